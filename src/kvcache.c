/*
 * The KV cache: schemes and their parsing, two-phase paged storage, compression in batches,
 * truncation, read-back and memory accounting (doc/kvcache.md). Attention lives in
 * attention.c; the layouts both files share are in kvcache_internal.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels/kernels.h"
#include "kvcache_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Schemes                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static const char scheme_help[] =
    "valid KV cache schemes:\n"
    "  f16 | q8_0 | q4_0            same format for keys and values\n"
    "  turboB                       B-bit TurboQuant keys and values, B in [1, 8], fractional ok"
    " (turbo3, turbo3.5)\n"
    "  turboKvV | kKvV              K-bit keys, V-bit values; 0 or f16/q8_0/q4_0 for a plain"
    " format (turbo4v2, turbo0v4, k3.5v3, kq8_0v4)\n"
    "  k=K:v=V                      explicit form\n"
    "options, appended as :name=value\n"
    "  variant=mse|prod norm=0|1 mean=0|1 kscale=0|1 ksplit=0|1 window=N batch=N\n"
    "  start=N prefill_raw=0|1 seed=N\n"
    "  first=N last=N edge=FORM     (edge layers default to turbo8)\n"
    "numbers are digits only, a bit width with at most one '.' (no sign, space or exponent):\n"
    "  bits 0 (f16) or 1 to 8, N 0 to 2^30 (batch from 1), seed 0 to 2^64-1\n";

const char *tq_kv_scheme_help(void) { return scheme_help; }

static void layer_scheme_set(tq_kv_layer_scheme *l, tq_kv_format kf, float kb, tq_kv_format vf,
                             float vb) {
    memset(l, 0, sizeof *l);
    l->key_format = kf;
    l->value_format = vf;
    l->key_bits = kf == TQ_KV_TURBO ? kb : 0.0f;
    l->value_bits = vf == TQ_KV_TURBO ? vb : 0.0f;
    l->key_variant = TQ_VARIANT_MSE;
    l->norm_correction = 1;
    /* Measured on Gemma 3 270M (wikitext-2, ctx 2048, fully compressed cache): the per-head key
     * mean cuts turbo4's KLD against fp16 from 0.131 to 0.090 (turbo3 at ctx 512: 0.52 to 0.30)
     * for head_dim floats per head and layer; so it is on by default for TurboQuant keys
     * (`:mean=0` turns it off). */
    l->key_mean = kf == TQ_KV_TURBO;
    /* Measured on Gemma 3 270M (wikitext-2, ctx 2048, 20 windows, every key compressed): the
     * per-channel key scale cuts turbo4's KLD against fp16 from 0.096 to 0.036 (ΔPPL 9.0% to
     * 2.9%) and turbo3's from 0.42 to 0.13 (52.6% to 13.6%); doc/kvcache.md §2. */
    l->key_scale = kf == TQ_KV_TURBO;
    /* Measured likewise (doc/kvcache.md §2): at fractional key widths, giving the extra bit
     * to the channels ranked first by query × key energy cuts turbo3.5's KLD from 0.082 to
     * 0.069 (ΔPPL 7.6% to 6.4%) at the same bytes. */
    l->key_split = kf == TQ_KV_TURBO;
}

static void scheme_defaults(tq_kv_scheme *s) {
    memset(s, 0, sizeof *s);
    layer_scheme_set(&s->layer, TQ_KV_F16, 0, TQ_KV_F16, 0);
    s->edge = s->layer;
    s->batch = 64;
    s->prefill_raw = 1;
    s->seed = 0x5475726230ull;
}

/* The largest window=, batch=, start=, first= and last= (2^30). */
#define TQ_KV_SCHEME_COUNT_MAX (1ull << 30)

/* The one reader of every number in a scheme string (bit widths, counts, flags, the seed).
 * The value is p[0, n): digits only and, where `fraction` is set (bit widths), at most one '.'
 * with digits on both sides; no sign, space, exponent, hex or empty text. The whole part is
 * accumulated digit by digit with an overflow check (strtoull would saturate to 2^64 − 1),
 * then the value is checked against [lo, hi]. A fraction (at most 40 characters) is read by
 * strtod from a copy, which the syntax check makes a plain decimal. Returns 1 and sets *u (the
 * whole part) and *d (the value); or 0 with a message naming `field` in why. */
static int parse_number(const char *p, size_t n, const char *field, int fraction,
                        unsigned long long lo, unsigned long long hi, const char *range,
                        unsigned long long *u, double *d, char *why, size_t why_cap) {
    unsigned long long v = 0;
    size_t whole = 0, frac = 0;
    int dot = 0, overflow = 0;
    if (n == 0) {
        snprintf(why, why_cap, "%s: empty value in", field);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c >= '0' && c <= '9') {
            unsigned digit = (unsigned)(c - '0');
            if (dot) {
                frac++;
            } else {
                whole++;
                if (v > (~0ull - digit) / 10) overflow = 1;
                else v = v * 10 + digit;
            }
        } else if (c == '.' && fraction && !dot) {
            dot = 1;
        } else {
            whole = 0; /* a syntax error */
            break;
        }
    }
    if (whole == 0 || (dot && frac == 0)) {
        snprintf(why, why_cap,
                 fraction ? "%s: not a number (digits with at most one '.'; no sign, space or "
                            "exponent) in"
                          : "%s: not a whole number (digits only; no sign or space) in",
                 field);
        return 0;
    }
    double x = (double)v;
    if (!overflow && dot) {
        char buf[41];
        if (n >= sizeof buf) {
            snprintf(why, why_cap, "%s: more than %zu characters in", field, sizeof buf - 1);
            return 0;
        }
        memcpy(buf, p, n);
        buf[n] = 0;
        x = strtod(buf, NULL);
    }
    if (overflow || v < lo || v > hi || x > (double)hi) {
        if (range) snprintf(why, why_cap, "%s: out of range (%s) in", field, range);
        else snprintf(why, why_cap, "%s: out of range [%llu, %llu] in", field, lo, hi);
        return 0;
    }
    *u = v;
    *d = x;
    return 1;
}

/* One side of a form: a bit width (0 = f16; else 1 to 8, fractional ok) or a plain format
 * name. Returns 0 on failure, with a message naming `field` in why. */
static int parse_side(const char *p, size_t n, const char *field, tq_kv_format *fmt, float *bits,
                      char *why, size_t why_cap) {
    if (n == 3 && !memcmp(p, "f16", 3)) return *fmt = TQ_KV_F16, *bits = 0, 1;
    if (n == 4 && !memcmp(p, "q8_0", 4)) return *fmt = TQ_KV_Q8_0, *bits = 0, 1;
    if (n == 4 && !memcmp(p, "q4_0", 4)) return *fmt = TQ_KV_Q4_0, *bits = 0, 1;
    if (n > 0 && ((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z'))) {
        snprintf(why, why_cap, "%s: expected a bit width, f16, q8_0 or q4_0 in", field);
        return 0;
    }
    unsigned long long u;
    double v;
    static const char range[] = "0 for f16, or 1 to 8";
    if (!parse_number(p, n, field, 1, 0, 8, range, &u, &v, why, why_cap)) return 0;
    if (v == 0.0) return *fmt = TQ_KV_F16, *bits = 0, 1;
    if (v < 1.0) {
        snprintf(why, why_cap, "%s: out of range (%s) in", field, range);
        return 0;
    }
    *fmt = TQ_KV_TURBO;
    *bits = (float)v;
    return 1;
}

/* A base form without options; edge: it is the edge= form (named so in messages). Returns 0
 * on failure, with a message in why. */
static int parse_base(const char *p, size_t n, int edge, tq_kv_layer_scheme *l, char *why,
                      size_t why_cap) {
    tq_kv_format kf, vf;
    float kb, vb;
    if ((n == 3 && !memcmp(p, "f16", 3)) || (n == 4 && !memcmp(p, "q8_0", 4)) ||
        (n == 4 && !memcmp(p, "q4_0", 4))) {
        parse_side(p, n, "", &kf, &kb, why, why_cap);
        layer_scheme_set(l, kf, 0, kf, 0);
        return 1;
    }
    snprintf(why, why_cap, "%s", edge ? "unknown edge form" : "unknown form");
    size_t skip = 0;
    if (n > 5 && !memcmp(p, "turbo", 5)) skip = 5;
    else if (n > 1 && p[0] == 'k') skip = 1;
    else return 0;
    const char *q = p + skip;
    size_t m = n - skip;
    /* A side that is empty or starts with a letter makes the whole an unknown form; one that
     * starts otherwise is a number, and its own message says what is wrong with it. */
#define SIDE_IS_NUMBER(s, len) ((len) > 0 && !(((s)[0] >= 'a' && (s)[0] <= 'z') || \
                                               ((s)[0] >= 'A' && (s)[0] <= 'Z')))
    char whyside[160];
    const char *vpos = memchr(q, 'v', m);
    if (!vpos) {
        if (skip != 5) return 0; /* kB alone is not a form */
        const char *field = edge ? "edge bits" : "bits";
        if (!parse_side(q, m, field, &kf, &kb, whyside, sizeof whyside)) {
            if (SIDE_IS_NUMBER(q, m)) snprintf(why, why_cap, "%s", whyside);
            return 0;
        }
        if (kf != TQ_KV_TURBO) {
            snprintf(why, why_cap, "%s: turboB needs B from 1 to 8 in", field);
            return 0;
        }
        layer_scheme_set(l, kf, kb, kf, kb);
        return 1;
    }
    size_t kn = (size_t)(vpos - q), vn = m - kn - 1;
    if (!parse_side(q, kn, edge ? "edge key bits" : "key bits", &kf, &kb, whyside,
                    sizeof whyside)) {
        if (SIDE_IS_NUMBER(q, kn)) snprintf(why, why_cap, "%s", whyside);
        return 0;
    }
    if (!parse_side(vpos + 1, vn, edge ? "edge value bits" : "value bits", &vf, &vb, whyside,
                    sizeof whyside)) {
        if (SIDE_IS_NUMBER(vpos + 1, vn)) snprintf(why, why_cap, "%s", whyside);
        return 0;
    }
#undef SIDE_IS_NUMBER
    layer_scheme_set(l, kf, kb, vf, vb);
    return 1;
}

static tq_status scheme_error(char *err, size_t cap, const char *text, const char *why,
                              const char *part, size_t part_len) {
    if (err && cap) {
        int pl = part_len > 64 ? 64 : (int)part_len;
        snprintf(err, cap, "bad KV cache scheme \"%.*s\": %s \"%.*s\"\n%s", 80, text, why, pl,
                 part ? part : "", scheme_help);
    }
    return TQ_ERR_SCHEME;
}

tq_status tq_kv_scheme_parse(const char *text, tq_kv_scheme *out, char *err, size_t cap) {
    if (!text || !out) return TQ_ERR_NULL;
    if (err && cap) err[0] = 0;
    tq_kv_scheme s;
    scheme_defaults(&s);
    int have_k = 0, have_v = 0, explicit_form = 0, have_edge = 0;
    int variant = -1, norm = -1, mean = -1, kscale = -1, ksplit = -1;
    tq_kv_format kf = TQ_KV_F16, vf = TQ_KV_F16;
    float kb = 0, vb = 0;
    const char *p = text;
    int first_tok = 1;
    char why[160];
    if (!*p) return scheme_error(err, cap, text, "empty", "", 0);
    for (;;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (first_tok && !eq) {
            if (!parse_base(p, n, 0, &s.layer, why, sizeof why))
                return scheme_error(err, cap, text, why, p, n);
        } else {
            if (!eq) return scheme_error(err, cap, text, "option without '='", p, n);
            size_t kn = (size_t)(eq - p);
            const char *val = eq + 1;
            size_t vn = n - kn - 1;
            unsigned long long u;
            double d;
#define KEY(str) (kn == sizeof(str) - 1 && !memcmp(p, str, kn))
            if (first_tok && !KEY("k"))
                return scheme_error(err, cap, text, "explicit form must start with k=", p, n);
            if (KEY("k") || KEY("v")) {
                if (!first_tok && !explicit_form)
                    return scheme_error(err, cap, text, "k=/v= only in the explicit form", p, n);
                explicit_form = 1;
                if (KEY("k")) {
                    if (!parse_side(val, vn, "key bits", &kf, &kb, why, sizeof why))
                        return scheme_error(err, cap, text, why, p, n);
                    have_k = 1;
                } else {
                    if (!parse_side(val, vn, "value bits", &vf, &vb, why, sizeof why))
                        return scheme_error(err, cap, text, why, p, n);
                    have_v = 1;
                }
            } else if (KEY("variant")) {
                if (vn == 3 && !memcmp(val, "mse", 3)) variant = TQ_VARIANT_MSE;
                else if (vn == 4 && !memcmp(val, "prod", 4)) variant = TQ_VARIANT_PROD;
                else return scheme_error(err, cap, text, "variant is mse or prod", p, n);
            } else if (KEY("norm") || KEY("mean") || KEY("kscale") || KEY("ksplit") ||
                       KEY("prefill_raw")) {
                char field[16];
                snprintf(field, sizeof field, "%.*s", (int)kn, p);
                if (!parse_number(val, vn, field, 0, 0, 1, NULL, &u, &d, why, sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                if (KEY("norm")) norm = (int)u;
                else if (KEY("mean")) mean = (int)u;
                else if (KEY("kscale")) kscale = (int)u;
                else if (KEY("ksplit")) ksplit = (int)u;
                else s.prefill_raw = (int)u;
            } else if (KEY("window") || KEY("batch") || KEY("start") || KEY("first") ||
                       KEY("last")) {
                char field[16];
                snprintf(field, sizeof field, "%.*s", (int)kn, p);
                if (!parse_number(val, vn, field, 0, KEY("batch") ? 1 : 0, TQ_KV_SCHEME_COUNT_MAX,
                                  NULL, &u, &d, why, sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                if (KEY("window")) s.raw_window = (int)u;
                else if (KEY("batch")) s.batch = (int)u;
                else if (KEY("start")) s.quantized_kv_start = (int)u;
                else if (KEY("first")) s.edge_first = (int)u;
                else s.edge_last = (int)u;
            } else if (KEY("seed")) {
                if (!parse_number(val, vn, "seed", 0, 0, ~0ull, NULL, &u, &d, why, sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                s.seed = u;
            } else if (KEY("edge")) {
                if (!parse_base(val, vn, 1, &s.edge, why, sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                have_edge = 1;
            } else {
                return scheme_error(err, cap, text, "unknown option", p, n);
            }
#undef KEY
        }
        first_tok = 0;
        if (!e) break;
        p = e + 1;
    }
    if (explicit_form) {
        if (!have_k || !have_v)
            return scheme_error(err, cap, text, "explicit form needs k= and v=", "", 0);
        layer_scheme_set(&s.layer, kf, kb, vf, vb);
    }
    if (!have_edge) {
        if (s.edge_first || s.edge_last) layer_scheme_set(&s.edge, TQ_KV_TURBO, 8, TQ_KV_TURBO, 8);
        else s.edge = s.layer;
    }
    tq_kv_layer_scheme *ls[2] = {&s.layer, &s.edge};
    for (int i = 0; i < 2; i++) {
        if (variant >= 0) ls[i]->key_variant = (tq_variant)variant;
        if (norm >= 0) ls[i]->norm_correction = norm;
        if (mean >= 0) ls[i]->key_mean = mean;
        if (kscale >= 0) ls[i]->key_scale = kscale;
        if (ksplit >= 0) ls[i]->key_split = ksplit;
        if (ls[i]->key_variant == TQ_VARIANT_PROD && ls[i]->key_format == TQ_KV_TURBO &&
            norm > 0)
            return scheme_error(err, cap, text, "norm correction is MSE only", "", 0);
    }
    *out = s;
    return TQ_OK;
}

static int format_side(char *buf, size_t cap, tq_kv_format f, float bits) {
    switch (f) {
    case TQ_KV_F16: return snprintf(buf, cap, "f16");
    case TQ_KV_Q8_0: return snprintf(buf, cap, "q8_0");
    case TQ_KV_Q4_0: return snprintf(buf, cap, "q4_0");
    case TQ_KV_TURBO: return snprintf(buf, cap, "%.9g", (double)bits);
    }
    return -1;
}

static int layer_scheme_valid(const tq_kv_layer_scheme *l) {
    if ((unsigned)l->key_format > TQ_KV_TURBO || (unsigned)l->value_format > TQ_KV_TURBO) return 0;
    if (l->key_variant != TQ_VARIANT_MSE && l->key_variant != TQ_VARIANT_PROD) return 0;
    return 1;
}

/* One of the key options mean / kscale / ksplit in the canonical text. The parser applies an
 * option to the layer and the edge alike, and without it gives each side its form's default
 * (on for TurboQuant keys): a value both sides share is written, sides that differ (each at
 * its default) leave it out. */
static void format_flag(char *buf, size_t cap, const char *name, int layer, int edge) {
    if ((layer != 0) == (edge != 0)) snprintf(buf, cap, ":%s=%d", name, layer ? 1 : 0);
    else buf[0] = 0;
}

tq_status tq_kv_scheme_format(const tq_kv_scheme *s, char *buf, size_t cap) {
    if (!s || !buf) return TQ_ERR_NULL;
    if (!layer_scheme_valid(&s->layer) || !layer_scheme_valid(&s->edge)) return TQ_ERR_INVALID;
    const tq_kv_layer_scheme *l = &s->layer, *e = &s->edge;
    char k[24], v[24], ek[24], ev[24], edge[64] = "", mean[16], kscale[16], ksplit[16];
    char norm[16] = "";
    format_side(k, sizeof k, l->key_format, l->key_bits);
    format_side(v, sizeof v, l->value_format, l->value_bits);
    /* The edge form whenever it is not the layer's: with first = last = 0 it has no effect,
     * but the scheme holds it (and a cache file records it). */
    format_side(ek, sizeof ek, e->key_format, e->key_bits);
    format_side(ev, sizeof ev, e->value_format, e->value_bits);
    if (s->edge_first || s->edge_last || strcmp(k, ek) || strcmp(v, ev))
        snprintf(edge, sizeof edge, ":edge=k%sv%s", ek, ev);
    /* norm=1 is the default and may not be written beside PROD TurboQuant keys (the parser
     * refuses it there: the values keep it), so only norm=0 is written. */
    if (!l->norm_correction || !e->norm_correction) snprintf(norm, sizeof norm, ":norm=0");
    format_flag(mean, sizeof mean, "mean", l->key_mean, e->key_mean);
    format_flag(kscale, sizeof kscale, "kscale", l->key_scale, e->key_scale);
    format_flag(ksplit, sizeof ksplit, "ksplit", l->key_split, e->key_split);
    int n = snprintf(buf, cap,
                     "k=%s:v=%s:variant=%s%s%s%s%s:window=%d:batch=%d:start=%d:prefill_raw=%d:"
                     "seed=%llu:first=%d:last=%d%s",
                     k, v, l->key_variant == TQ_VARIANT_PROD ? "prod" : "mse", norm, mean, kscale,
                     ksplit, s->raw_window, s->batch, s->quantized_kv_start,
                     s->prefill_raw ? 1 : 0, (unsigned long long)s->seed, s->edge_first,
                     s->edge_last, edge);
    if (n < 0 || (size_t)n >= cap) {
        if (cap) buf[0] = 0;
        return TQ_ERR_CAPACITY;
    }
    return TQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Tensor formats                                                                             */
/* ---------------------------------------------------------------------------------------- */

static size_t plain_bytes(tq_kv_format f, int dim) {
    size_t full = (size_t)dim / TQ_KV_BLOCK, rest = (size_t)dim % TQ_KV_BLOCK;
    switch (f) {
    case TQ_KV_F16: return 2 * (size_t)dim;
    case TQ_KV_Q8_0: return full * (2 + 32) + (rest ? 2 + rest : 0);
    case TQ_KV_Q4_0: return full * (2 + 16) + (rest ? 2 + rest / 2 : 0);
    default: return 0;
    }
}

/* The codec of a TURBO tensor; split: keys with a key split, which turns a fractional width
 * k + f ≤ 4 into TQ_SPLIT_BLOCK (f·d channels at k + 1, the rest at k) where that takes no
 * more bytes (tq_kv_layer_scheme.key_split). */
static void turbo_config(tq_codec_config *cc, int dim, float bits, tq_variant variant, int norm,
                         uint64_t seed, int split) {
    tq_codec_config_init(cc, dim, bits, variant);
    cc->norm_correction = variant == TQ_VARIANT_MSE ? norm : 0;
    cc->seed = seed;
    if (!split || variant != TQ_VARIANT_MSE) return;
    int k = (int)floor(bits + 1e-9);
    double frac = bits - k;
    tq_codec_config b = *cc;
    b.split = TQ_SPLIT_BLOCK;
    b.block_bits = k + 1;
    b.block_dim = (int)floor(frac * dim + 0.5);
    if (frac <= 1e-6 || b.block_bits > 4) return;
    size_t plain, with;
    if (tq_codec_config_bytes(cc, &plain) || tq_codec_config_bytes(&b, &with) || with > plain) return;
    *cc = b;
}

int tq_kv_key_split_applies(const tq_kv_layer_scheme *l, int dk) {
    if (l->key_format != TQ_KV_TURBO || !l->key_scale || !l->key_split || dk < TQ_MIN_DIM ||
        dk > TQ_MAX_DIM)
        return 0;
    tq_codec_config cc;
    turbo_config(&cc, dk, l->key_bits, l->key_variant, l->norm_correction, 0, 1);
    return cc.split == TQ_SPLIT_BLOCK;
}

static tq_status tensor_bytes(tq_kv_format f, int dim, float bits, tq_variant variant, int norm,
                              int split, size_t *bytes) {
    if (dim < TQ_MIN_DIM || dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (f == TQ_KV_TURBO) {
        tq_codec_config cc;
        turbo_config(&cc, dim, bits, variant, norm, 0, split);
        return tq_codec_config_bytes(&cc, bytes);
    }
    if ((unsigned)f > TQ_KV_TURBO) return TQ_ERR_VARIANT;
    if (f != TQ_KV_F16 && dim % 16) return TQ_ERR_DIM;
    *bytes = plain_bytes(f, dim);
    return TQ_OK;
}

tq_status tq_kv_layer_scheme_bytes(const tq_kv_layer_scheme *l, int dk, int dv, size_t *kb,
                                   size_t *vb) {
    if (!l || !kb || !vb) return TQ_ERR_NULL;
    if (l->key_variant != TQ_VARIANT_MSE && l->key_variant != TQ_VARIANT_PROD)
        return TQ_ERR_VARIANT;
    tq_status st = tensor_bytes(l->key_format, dk, l->key_bits, l->key_variant,
                                l->norm_correction, l->key_scale && l->key_split, kb);
    if (st) return st;
    return tensor_bytes(l->value_format, dv, l->value_bits, TQ_VARIANT_MSE, l->norm_correction,
                        0, vb);
}

static const float sign_centroids[2] = {-1.0f, 1.0f};

/* Sets up a tensor, deriving the TURBO record layout of doc/format.md (segments' words, PROD
 * sign words, norm, PROD γ) and checking it against the codec's own size. */
static tq_status tensor_init(tq_kv_tensor *x, tq_kv_format f, int dim, float bits,
                             tq_variant variant, int norm, uint64_t seed, int is_key, int split) {
    memset(x, 0, sizeof *x);
    x->format = f;
    x->dim = dim;
    x->row_floats = dim;
    tq_status st = tensor_bytes(f, dim, bits, variant, norm, split, &x->rec_bytes);
    if (st) return st;
    if (f != TQ_KV_TURBO) return TQ_OK;
    tq_codec_config cc;
    turbo_config(&cc, dim, bits, variant, norm, seed, split);
    st = tq_codec_create(&x->codec, &cc);
    if (st) return st;
    x->prod = variant == TQ_VARIANT_PROD;
    x->row_floats = (int)tq_codec_query_floats(x->codec);
    double m = x->prod ? bits - 1.0 : bits;
    int k = (int)floor(m + 1e-9);
    double frac = m - k;
    int n_hi = frac > 1e-6 ? (int)floor(frac * dim + 0.5) : 0, hi = k + 1, lo = k;
    if (cc.split == TQ_SPLIT_BLOCK) {
        x->block = n_hi = cc.block_dim;
        hi = cc.block_bits;
        lo = (int)floor(((double)bits * dim - (double)hi * n_hi) / (dim - n_hi) + 0.5);
    }
    size_t off = 0;
    int parts[2][2], np = 0;
    if (n_hi > 0) parts[np][0] = n_hi, parts[np][1] = hi, np++;
    parts[np][0] = dim - n_hi, parts[np][1] = lo, np++;
    int start = 0;
    for (int p = 0; p < np; p++) {
        if (parts[p][1] > 0) {
            const tq_codebook *cb;
            st = tq_codebook_get(dim, parts[p][1], &cb);
            if (st) return st;
            x->seg[x->n_seg].start = start;
            x->seg[x->n_seg].count = parts[p][0];
            x->seg[x->n_seg].bits = parts[p][1];
            x->seg[x->n_seg].off = off;
            x->seg[x->n_seg].centroids = cb->centroids;
            x->n_seg++;
            off += tq_group_bytes((size_t)parts[p][0], parts[p][1]);
        }
        start += parts[p][0];
    }
    if (x->prod) {
        x->sign_off = off;
        off += tq_group_bytes((size_t)dim, 1);
    }
    x->norm_f32 = cc.norm_format == TQ_NORM_F32;
    x->norm_off = off;
    off += x->norm_f32 ? 4 : 2;
    if (x->prod) {
        x->gamma_off = off;
        off += x->norm_f32 ? 4 : 2;
    }
    if (off != x->rec_bytes) return TQ_ERR_VARIANT; /* the codec's layout is not the spec's */
    /* Keys score against the prepared query (R q / √d), so rows carry n·C[idx] (codebooks are
     * ×√d); values accumulate the reconstruction n/√d·C[idx] in the codec's rotated basis. */
    x->inv_sqrt_dim = is_key ? 1.0f : (float)(1.0 / sqrt((double)dim));
    x->prod_scale = (float)(1.2533141373155003 / dim);
    return TQ_OK;
}

static float rec_norm(const tq_kv_tensor *x, const uint8_t *p) {
    return x->norm_f32 ? tq_load_f32(p) : tq_f16_to_f32(tq_load_u16(p));
}

int tq_kv_decode_rows(const tq_kv_tensor *x, const uint8_t *rec, size_t n, float *rows,
                      size_t stride) {
    const tq_attn_kernels *ak = tq_attn_kernels_get();
    int ok = 1;
    switch (x->format) {
    case TQ_KV_F16:
        for (size_t t = 0; t < n; t++)
            ak->f16_to_f32((const uint16_t *)(const void *)(rec + t * x->rec_bytes),
                           rows + t * stride, x->dim);
        return 1;
    case TQ_KV_Q8_0:
        for (size_t t = 0; t < n; t++) ak->q8_0_decode(rec + t * x->rec_bytes, x->dim, rows + t * stride);
        return 1;
    case TQ_KV_Q4_0:
        for (size_t t = 0; t < n; t++) ak->q4_0_decode(rec + t * x->rec_bytes, x->dim, rows + t * stride);
        return 1;
    case TQ_KV_TURBO:
        break;
    }
    const tq_kernel_table *k = tq_kernels();
    void (*unpack)(const uint8_t *, int, int, const float *, float, float *) = k->unpack_lookup;
    /* fp16 norms of up to 64 records at a time, converted with the SIMD kernel. */
    uint16_t nh[64];
    float nf[64];
    for (size_t t = 0; t < n; t++) {
        const uint8_t *r = rec + t * x->rec_bytes;
        float *row = rows + t * stride;
        if (!x->norm_f32 && t % 64 == 0) {
            size_t m = n - t < 64 ? n - t : 64;
            for (size_t j = 0; j < m; j++) nh[j] = tq_load_u16(r + j * x->rec_bytes + x->norm_off);
            ak->f16_to_f32(nh, nf, (int)m);
        }
        float nrm = x->norm_f32 ? rec_norm(x, r + x->norm_off) : nf[t % 64];
        float g = x->prod ? rec_norm(x, r + x->gamma_off) : 0.0f;
        if (!(isfinite(nrm) && nrm >= 0.0f) || !(isfinite(g) && g >= 0.0f)) {
            memset(row, 0, sizeof(float) * (size_t)x->row_floats);
            ok = 0;
            continue;
        }
        if (x->n_seg == 0 || x->seg[0].start > 0)
            memset(row, 0, sizeof(float) * (size_t)x->dim); /* PROD at 1 bit: no MSE part */
        for (int s = 0; s < x->n_seg; s++) {
            int b = x->seg[s].bits;
            (b <= 4 && ak->unpack_small ? ak->unpack_small : unpack)(
                r + x->seg[s].off, x->seg[s].count, b, x->seg[s].centroids,
                nrm * x->inv_sqrt_dim, row + x->seg[s].start);
        }
        if (x->prod)
            k->unpack_lookup(r + x->sign_off, x->dim, 1, sign_centroids,
                             nrm * g * x->prod_scale, row + x->dim);
    }
    return ok;
}

void tq_kv_f16_rows(const uint16_t *in, size_t n, int dim, float *out, size_t stride) {
    const tq_attn_kernels *ak = tq_attn_kernels_get();
    for (size_t t = 0; t < n; t++) ak->f16_to_f32(in + t * (size_t)dim, out + t * stride, dim);
}

/* Plain encoders (ggml's q8_0 / q4_0 rounding). */
static void encode_q8_0(const float *x, int dim, uint8_t *rec) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        tq_store_u16(rec, tq_f32_to_f16(d));
        for (int i = 0; i < n; i++) rec[2 + i] = (uint8_t)(int8_t)lrintf(x[b + i] * id);
        rec += 2 + n;
    }
}

static void encode_q4_0(const float *x, int dim, uint8_t *rec) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK, h = n / 2;
        float amax = 0.0f, mx = 0.0f;
        for (int i = 0; i < n; i++)
            if (fabsf(x[b + i]) > amax) amax = fabsf(x[b + i]), mx = x[b + i];
        float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        tq_store_u16(rec, tq_f32_to_f16(d));
        for (int i = 0; i < h; i++) {
            int a = (int)(x[b + i] * id + 8.5f), c = (int)(x[b + h + i] * id + 8.5f);
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            c = c < 0 ? 0 : c > 15 ? 15 : c;
            rec[2 + i] = (uint8_t)(a | (c << 4));
        }
        rec += 2 + h;
    }
}

static tq_status encode_tensor(const tq_kv_tensor *x, const float *v, uint8_t *rec) {
    switch (x->format) {
    case TQ_KV_F16:
        for (int i = 0; i < x->dim; i++) {
            uint16_t h = tq_f32_to_f16(v[i]);
            memcpy(rec + 2 * i, &h, 2); /* native order, as the raw part */
        }
        return TQ_OK;
    case TQ_KV_Q8_0: encode_q8_0(v, x->dim, rec); return TQ_OK;
    case TQ_KV_Q4_0: encode_q4_0(v, x->dim, rec); return TQ_OK;
    case TQ_KV_TURBO: return tq_codec_encode(x->codec, v, 1, rec, x->rec_bytes);
    }
    return TQ_ERR_VARIANT;
}

/* Decodes one record to the original basis (the reference path: no shortcut). */
static tq_status decode_tensor(const tq_kv_tensor *x, const uint8_t *rec, float *out) {
    switch (x->format) {
    case TQ_KV_F16:
        for (int i = 0; i < x->dim; i++) {
            uint16_t h;
            memcpy(&h, rec + 2 * i, 2);
            out[i] = tq_f16_to_f32(h);
        }
        return TQ_OK;
    case TQ_KV_Q8_0: tq_attn_kernels_ref()->q8_0_decode(rec, x->dim, out); return TQ_OK;
    case TQ_KV_Q4_0: tq_attn_kernels_ref()->q4_0_decode(rec, x->dim, out); return TQ_OK;
    case TQ_KV_TURBO: return tq_codec_decode(x->codec, rec, 1, out, (size_t)x->dim);
    }
    return TQ_ERR_VARIANT;
}

/* ---------------------------------------------------------------------------------------- */
/* Cache objects                                                                              */
/* ---------------------------------------------------------------------------------------- */

void tq_kv_cache_config_init(tq_kv_cache_config *cfg, int n_layers, int n_kv_heads, int dk,
                             int dv) {
    memset(cfg, 0, sizeof *cfg);
    cfg->n_layers = n_layers;
    cfg->n_kv_heads = n_kv_heads;
    cfg->head_dim_k = dk;
    cfg->head_dim_v = dv;
    scheme_defaults(&cfg->scheme);
}

static void layer_free(tq_kv_layer *l) {
    tq_codec_free(l->k.codec);
    tq_codec_free(l->v.codec);
    for (size_t i = 0; i < l->n_cpages; i++) free(l->cpages[i]);
    for (size_t i = 0; i < l->n_rpages; i++) free(l->rpages[i]);
    for (size_t i = 0; i < l->n_rspare; i++) free(l->rspare[i]);
    for (size_t i = 0; i < l->n_cspare; i++) free(l->cspare[i]);
    free(l->cpages);
    free(l->rpages);
    free(l->rspare);
    free(l->cspare);
    free(l->key_mean);
    free(l->key_scale);
    free(l->q_sq);
    free(l->key_perm);
}

void tq_kv_cache_free(tq_kv_cache *c) {
    if (!c) return;
    if (c->layers)
        for (int i = 0; i < c->cfg.n_layers; i++) layer_free(&c->layers[i]);
    free(c->layers);
    free(c);
}

/* A layer's key scale back to "not fixed": scale 1, no query statistics. */
static void key_scale_reset(const tq_kv_cache *c, tq_kv_layer *l) {
    size_t nm = (size_t)c->cfg.n_kv_heads * (size_t)c->cfg.head_dim_k;
    l->scale_set = 0;
    l->q_rows = 0.0;
    memset(l->q_sq, 0, nm * sizeof(double));
    for (size_t j = 0; j < nm; j++) l->key_scale[j] = 1.0f;
    if (l->key_perm)
        for (size_t j = 0; j < nm; j++) l->key_perm[j] = (uint16_t)(j % (size_t)c->cfg.head_dim_k);
}

static tq_kv_layer_scheme resolve_scheme(const tq_kv_cache_config *cfg, int i) {
    if (cfg->layer_schemes) return cfg->layer_schemes[i];
    if (i < cfg->scheme.edge_first || i >= cfg->n_layers - cfg->scheme.edge_last)
        return cfg->scheme.edge;
    return cfg->scheme.layer;
}

tq_status tq_kv_cache_create(tq_kv_cache **out, const tq_kv_cache_config *cfg) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!cfg) return TQ_ERR_NULL;
    const tq_kv_scheme *s = &cfg->scheme;
    if (cfg->n_layers < 1 || cfg->n_layers > 4096 || cfg->n_kv_heads < 1 ||
        cfg->n_kv_heads > 1024 || s->batch < 1 || s->raw_window < 0 ||
        s->quantized_kv_start < 0 || s->edge_first < 0 || s->edge_last < 0)
        return TQ_ERR_INVALID;
    if (cfg->head_dim_k < TQ_MIN_DIM || cfg->head_dim_k > TQ_MAX_DIM ||
        cfg->head_dim_v < TQ_MIN_DIM || cfg->head_dim_v > TQ_MAX_DIM)
        return TQ_ERR_DIM;
    tq_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return TQ_ERR_NOMEM;
    c->cfg = *cfg;
    c->cfg.layer_schemes = NULL;
    c->cfg.layer_windows = NULL;
    c->cfg.reserve_tokens = 0;
    c->layers = calloc((size_t)cfg->n_layers, sizeof *c->layers);
    tq_status st = TQ_OK;
    if (!c->layers) {
        st = TQ_ERR_NOMEM;
        goto fail;
    }
    c->rpage_bytes = (size_t)cfg->n_kv_heads * TQ_KV_P *
                     (size_t)(cfg->head_dim_k + cfg->head_dim_v) * sizeof(uint16_t);
    for (int i = 0; i < cfg->n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        l->scheme = resolve_scheme(cfg, i);
        const tq_kv_layer_scheme *ls = &l->scheme;
        if (!layer_scheme_valid(ls)) {
            st = TQ_ERR_VARIANT;
            goto fail;
        }
        if (ls->key_format != TQ_KV_TURBO) {
            l->scheme.key_mean = 0;
            l->scheme.key_scale = 0;
        }
        st = tensor_init(&l->k, ls->key_format, cfg->head_dim_k, ls->key_bits, ls->key_variant,
                         ls->norm_correction, s->seed, 1, ls->key_scale && ls->key_split);
        if (st) goto fail;
        st = tensor_init(&l->v, ls->value_format, cfg->head_dim_v, ls->value_bits,
                         TQ_VARIANT_MSE, ls->norm_correction, s->seed, 0, 0);
        if (st) goto fail;
        l->scheme.key_split = l->k.block > 0; /* what is in effect */
        l->compress_none = ls->key_format == TQ_KV_F16 && ls->value_format == TQ_KV_F16;
        l->window = cfg->layer_windows ? cfg->layer_windows[i] : 0;
        if (l->scheme.key_mean) {
            l->key_mean = calloc((size_t)cfg->n_kv_heads * (size_t)cfg->head_dim_k, sizeof(float));
            if (!l->key_mean) {
                st = TQ_ERR_NOMEM;
                goto fail;
            }
        }
        if (l->scheme.key_scale) {
            size_t nm = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim_k;
            l->key_scale = malloc(nm * sizeof(float));
            l->q_sq = malloc(nm * sizeof(double));
            if (l->k.block) l->key_perm = malloc(nm * sizeof(uint16_t));
            if (!l->key_scale || !l->q_sq || (l->k.block && !l->key_perm)) {
                st = TQ_ERR_NOMEM;
                goto fail;
            }
            key_scale_reset(c, l);
        }
    }
    if (cfg->reserve_tokens) {
        st = tq_kv_cache_reserve(c, cfg->reserve_tokens);
        if (st) goto fail;
        c->cfg.reserve_tokens = cfg->reserve_tokens;
    }
    *out = c;
    return TQ_OK;
fail:
    tq_kv_cache_free(c);
    return st;
}

tq_kv_cache_config tq_kv_cache_get_config(const tq_kv_cache *c) {
    tq_kv_cache_config cfg;
    if (c) return c->cfg;
    memset(&cfg, 0, sizeof cfg);
    return cfg;
}

tq_kv_layer_scheme tq_kv_cache_layer_scheme(const tq_kv_cache *c, int layer) {
    tq_kv_layer_scheme l;
    if (c && layer >= 0 && layer < c->cfg.n_layers) return c->layers[layer].scheme;
    memset(&l, 0, sizeof l);
    return l;
}

/* Grows a pointer array to hold at least n entries (doubling). */
static int grow_ptrs(void ***arr, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    size_t nc = *cap ? *cap : 8;
    while (nc < n) nc *= 2;
    void **p = realloc(*arr, nc * sizeof *p);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

/* One compressed page: a spare one if there is one. */
static uint8_t *new_cpage(const tq_kv_cache *c, tq_kv_layer *l) {
    return l->n_cspare ? l->cspare[--l->n_cspare] : malloc(tq_kv_cpage_bytes(c, l));
}

/* Compressed pages for tokens [from, n_tokens): slots past the array are added, and slots a
 * windowed layer emptied (dropped pages, NULL) are filled again. */
static tq_status ensure_cpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t n_tokens) {
    size_t need = (n_tokens + TQ_KV_P - 1) / TQ_KV_P;
    for (size_t i = from / TQ_KV_P; i < need && i < l->n_cpages; i++)
        if (!l->cpages[i] && !(l->cpages[i] = new_cpage(c, l))) return TQ_ERR_NOMEM;
    if (need <= l->n_cpages) return TQ_OK;
    if (!grow_ptrs((void ***)&l->cpages, &l->cap_cpages, need)) return TQ_ERR_NOMEM;
    while (l->n_cpages < need) {
        if (l->n_cpages < from / TQ_KV_P) { /* below a windowed layer's kept range */
            l->cpages[l->n_cpages++] = NULL;
            continue;
        }
        uint8_t *p = new_cpage(c, l);
        if (!p) return TQ_ERR_NOMEM;
        l->cpages[l->n_cpages++] = p;
    }
    return TQ_OK;
}

/* Keeps a compressed page for reuse (frees it if the spare list cannot grow). */
static void spare_cpage(tq_kv_layer *l, uint8_t *p) {
    if (!grow_ptrs((void ***)&l->cspare, &l->cap_cspare, l->n_cspare + 1)) {
        free(p);
        return;
    }
    l->cspare[l->n_cspare++] = p;
}

/* Raw pages for tokens up to (not including) `end`. */
static tq_status ensure_rpages(const tq_kv_cache *c, tq_kv_layer *l, size_t end) {
    if (end <= l->raw_base) return TQ_OK;
    size_t need = (end - l->raw_base + TQ_KV_P - 1) / TQ_KV_P;
    if (need <= l->n_rpages) return TQ_OK;
    if (!grow_ptrs((void ***)&l->rpages, &l->cap_rpages, need)) return TQ_ERR_NOMEM;
    while (l->n_rpages < need) {
        uint16_t *p = l->n_rspare ? l->rspare[--l->n_rspare] : malloc(c->rpage_bytes);
        if (!p) return TQ_ERR_NOMEM;
        l->rpages[l->n_rpages++] = p;
    }
    return TQ_OK;
}

/* Keeps a raw page for reuse (frees it if even the spare list cannot grow). */
static void spare_rpage(tq_kv_layer *l, uint16_t *p) {
    if (!grow_ptrs((void ***)&l->rspare, &l->cap_rspare, l->n_rspare + 1)) {
        free(p);
        return;
    }
    l->rspare[l->n_rspare++] = p;
}

/* For cachefile.c: gives layer `layer` of an empty cache the shape of a saved state (len tokens,
 * the first n_comp compressed, raw_base = ⌊n_comp/P⌋·P as compress_to leaves it) with every page
 * allocated; the caller then fills the records, raw tokens and key mean. */
tq_status tq_kv_layer_restore_shape(tq_kv_cache *c, int layer, size_t len, size_t n_comp) {
    if (!c || layer < 0 || layer >= c->cfg.n_layers || n_comp > len) return TQ_ERR_INVALID;
    tq_kv_layer *l = &c->layers[layer];
    if (l->len || l->n_comp || (l->compress_none && n_comp)) return TQ_ERR_INVALID;
    l->raw_base = n_comp / TQ_KV_P * TQ_KV_P;
    tq_status st = ensure_cpages(c, l, 0, n_comp);
    if (!st) st = ensure_rpages(c, l, len);
    if (st) return st;
    l->len = len;
    l->n_comp = n_comp;
    return TQ_OK;
}

/* Positions a windowed layer holds with appends of up to 2P tokens: the kept range, the page
 * it starts in, the append, the raw window and a batch in flight (larger appends allocate). */
static size_t window_hold(const tq_kv_cache *c, const tq_kv_layer *l) {
    return l->window + TQ_KV_WINDOW_SLACK + 2 * TQ_KV_P + (size_t)c->cfg.scheme.raw_window +
           (size_t)c->cfg.scheme.batch;
}

tq_status tq_kv_cache_reserve(tq_kv_cache *c, size_t n_tokens) {
    if (!c) return TQ_ERR_NULL;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        tq_status st;
        if (l->window && window_hold(c, l) < n_tokens) {
            /* A windowed layer recycles its pages: reserve the page table for n_tokens and
             * enough spare pages for what it can hold. */
            size_t pages = (n_tokens + TQ_KV_P - 1) / TQ_KV_P, hold = window_hold(c, l) / TQ_KV_P + 2;
            if (l->compress_none) {
                if (!grow_ptrs((void ***)&l->rpages, &l->cap_rpages, hold)) return TQ_ERR_NOMEM;
                st = ensure_rpages(c, l, l->raw_base + hold * TQ_KV_P);
            } else {
                if (!grow_ptrs((void ***)&l->cpages, &l->cap_cpages, pages)) return TQ_ERR_NOMEM;
                size_t have = l->n_cspare;
                for (size_t j = 0; j < l->n_cpages; j++) have += l->cpages[j] != NULL;
                for (; have < hold; have++) {
                    uint8_t *p = malloc(tq_kv_cpage_bytes(c, l));
                    if (!p) return TQ_ERR_NOMEM;
                    spare_cpage(l, p);
                }
                st = TQ_OK;
            }
        } else {
            st = l->compress_none ? ensure_rpages(c, l, n_tokens) : ensure_cpages(c, l, 0, n_tokens);
        }
        if (st) return st;
        /* The raw part needs window + batch tokens in decode (two pages across a boundary). */
        if (!l->compress_none) {
            size_t raw = (size_t)c->cfg.scheme.raw_window + (size_t)c->cfg.scheme.batch + TQ_KV_P;
            st = ensure_rpages(c, l, l->raw_base + (raw < n_tokens ? raw : n_tokens));
            if (st) return st;
        }
    }
    return TQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Two-phase storage                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* How many leading tokens the scheme wants compressed at length len: a pure function of the
 * length, so every history reaching a length can reach the same state (doc/kvcache.md). */
size_t tq_kv_scheme_compressed_length(const tq_kv_scheme *s, size_t len) {
    if (!s || s->batch < 1 || s->raw_window < 0 || s->quantized_kv_start < 0) return 0;
    if (len < (size_t)s->quantized_kv_start || len <= (size_t)s->raw_window) return 0;
    size_t avail = len - (size_t)s->raw_window;
    return avail / (size_t)s->batch * (size_t)s->batch;
}

size_t tq_kv_scheme_decode_chunk(const tq_kv_scheme *s, size_t pos, size_t max_n) {
    if (!s || max_n == 0) return 0;
    if (s->batch < 1 || s->raw_window < 0 || s->quantized_kv_start < 0 || pos >= SIZE_MAX / 2) return 1;
    /* A query at position j of the chunk sees the compressed length of pos + n (the whole
     * chunk is appended first); decode would give it that of j + 1. */
    const size_t first = tq_kv_scheme_compressed_length(s, pos + 1);
    /* The first compression fixes the key mean, scale and split from the tokens held then:
     * it must see as many as in decode, so that step goes alone. */
    if (first > 0 && tq_kv_scheme_compressed_length(s, pos) == 0) return 1;
    /* The smallest length L > pos + 1 whose compressed length differs from `first` (it only
     * grows): while none is compressed, the first length that compresses a whole batch
     * (at least quantized_kv_start); after, the next batch boundary. */
    const uint64_t W = (uint64_t)s->raw_window, B = (uint64_t)s->batch, start = (uint64_t)s->quantized_kv_start;
    uint64_t next = first == 0 ? (start > W + B ? start : W + B) : W + (uint64_t)first + B;
    if (next < (uint64_t)pos + 2) next = (uint64_t)pos + 2;
    const uint64_t n = next - (uint64_t)pos - 1;
    return n < (uint64_t)max_n ? (size_t)n : max_n;
}

static size_t compress_target(const tq_kv_cache *c, const tq_kv_layer *l, size_t len) {
    return l->compress_none ? 0 : tq_kv_scheme_compressed_length(&c->cfg.scheme, len);
}

static uint16_t *raw_k_mut(const tq_kv_cache *c, tq_kv_layer *l, size_t t, int h) {
    return (uint16_t *)tq_kv_kraw(c, l, t, h);
}
static uint16_t *raw_v_mut(const tq_kv_cache *c, tq_kv_layer *l, size_t t, int h) {
    return (uint16_t *)tq_kv_vraw(c, l, t, h);
}

/* The most tokens the key mean is taken from (tq_kv_set_key_mean_tokens: tests only). */
static _Atomic size_t key_mean_tokens = TQ_KV_KEY_SCALE_TOKENS;

void tq_kv_set_key_mean_tokens(size_t n) { key_mean_tokens = n ? n : TQ_KV_KEY_SCALE_TOKENS; }

/* The per-head key mean of the first n = min(TQ_KV_KEY_SCALE_TOKENS, len − n_comp) raw tokens
 * held at the first compression — the same tokens as the key scale's statistics: tokens
 * [0, n), or for a windowed layer whose first compression comes after a drop, the oldest
 * kept. Summed token by token (each key read once, in order) in double. */
static void compute_key_mean(const tq_kv_cache *c, tq_kv_layer *l) {
    int dk = c->cfg.head_dim_k, H = c->cfg.n_kv_heads;
    size_t t0 = l->n_comp, n = l->len - t0, most = key_mean_tokens;
    if (n > most) n = most;
    double acc[TQ_MAX_DIM];
    for (int h = 0; h < H; h++) {
        float *m = l->key_mean + (size_t)h * (size_t)dk;
        for (int i = 0; i < dk; i++) acc[i] = 0.0;
        for (size_t t = t0; t < t0 + n; t++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < dk; i++) acc[i] += tq_f16_to_f32(kr[i]);
        }
        for (int i = 0; i < dk; i++) m[i] = n ? (float)(acc[i] / (double)n) : 0.0f;
    }
    l->mean_set = 1;
}

/* Tokens at which the key scale's exponent reaches half its full value: with few keys the
 * channel energies are noisy and the scale shrinks towards 1 (doc/kvcache.md §2). */
#define KEY_SCALE_HALF_TOKENS 32.0
/* Added to each channel's normalized energy so that a near-silent channel gets a bounded
 * scale. */
#define KEY_SCALE_FLOOR 0.01

static void sort_u16(uint16_t *x, int n) {
    for (int i = 1; i < n; i++) {
        uint16_t v = x[i];
        int j = i - 1;
        while (j >= 0 && x[j] > v) x[j + 1] = x[j], j--;
        x[j + 1] = v;
    }
}

/* The key split of head h (tq_kv_layer_scheme.key_split): channels ranked by an_i·bn_i (the
 * scale's normalized, floored energies a_i + ε, b_i + ε; a_i = 1 without observed queries;
 * b the raw key energies), the first
 * k.block of them form the first block (the one with more bits), each block in channel order;
 * then the scale of each block is multiplied by a constant so that the mean scaled key energy
 * Σ s_i² b_i / n of the two blocks is equal (the codec's one norm then suits both) and the
 * scale keeps geometric mean 1. A constant per block leaves the score error Σ s²b · Σ a/s² of each block as it
 * was: only the bits move. */
static void split_channels(tq_kv_layer *l, int h, int dk, const double *an, const double *bn,
                           const double *b, float *s) {
    uint16_t *perm = l->key_perm + (size_t)h * (size_t)dk;
    double w[TQ_MAX_DIM];
    for (int i = 0; i < dk; i++) w[i] = an[i] * bn[i];
    /* Rank by weight, ties by channel (insertion sort: dk ≤ 1024, once per head). */
    for (int i = 0; i < dk; i++) perm[i] = (uint16_t)i;
    for (int i = 1; i < dk; i++) {
        uint16_t v = perm[i];
        int j = i - 1;
        while (j >= 0 && (w[perm[j]] < w[v] || (w[perm[j]] == w[v] && perm[j] > v))) {
            perm[j + 1] = perm[j];
            j--;
        }
        perm[j + 1] = v;
    }
    int nb = l->k.block;
    sort_u16(perm, nb);
    sort_u16(perm + nb, dk - nb);
    double e_all = 0.0, e_blk[2] = {0.0, 0.0};
    for (int j = 0; j < dk; j++) {
        double e = (double)s[perm[j]] * s[perm[j]] * b[perm[j]];
        e_all += e;
        e_blk[j >= nb] += e;
    }
    if (!(e_blk[0] > 0.0 && e_blk[1] > 0.0 && isfinite(e_all))) return;
    /* Block factors f ∝ √(mean energy / block energy), geometric mean 1 over the channels. */
    double l0 = 0.5 * log(e_all / dk / (e_blk[0] / nb)), l1 = 0.5 * log(e_all / dk / (e_blk[1] / (dk - nb)));
    double lm = (nb * l0 + (dk - nb) * l1) / dk;
    double f0 = exp(l0 - lm), f1 = exp(l1 - lm);
    for (int j = 0; j < dk; j++) s[perm[j]] = (float)(s[perm[j]] * (j < nb ? f0 : f1));
}

/* The per-channel key scale, from the first n = min(TQ_KV_KEY_SCALE_TOKENS, len − n_comp)
 * raw tokens held at the first compression (less the key mean) and the observed queries of
 * positions below TQ_KV_KEY_SCALE_TOKENS: with a_i, b_i the query and key energies of channel
 * i normalized to mean 1, s_i ∝ ((a_i + ε) / (b_i + ε))^p with p = n / (4 (n + 32)),
 * geometric mean 1. p = 1/4 minimizes the score error Σ_i a_i/s_i² · Σ_i s_i² b_i (the
 * rotation spreads the error of s ⊙ k evenly over channels). Without observed queries
 * a_i = 1. A fixed token count keeps the scale independent of when compression starts once
 * that many tokens are held. */
static void compute_key_scale(const tq_kv_cache *c, tq_kv_layer *l) {
    int dk = c->cfg.head_dim_k, H = c->cfg.n_kv_heads;
    size_t t0 = l->n_comp, n = l->len - t0;
    if (n > TQ_KV_KEY_SCALE_TOKENS) n = TQ_KV_KEY_SCALE_TOKENS;
    double p = 0.25 * (double)n / ((double)n + KEY_SCALE_HALF_TOKENS);
    double b[TQ_MAX_DIM], lg[TQ_MAX_DIM], an[TQ_MAX_DIM], bn[TQ_MAX_DIM];
    int with_q = l->q_rows > 0;
    for (int h = 0; h < H; h++) {
        const float *m = l->key_mean ? l->key_mean + (size_t)h * (size_t)dk : NULL;
        const double *a = l->q_sq + (size_t)h * (size_t)dk;
        float *s = l->key_scale + (size_t)h * (size_t)dk;
        double sa = 0.0, sb = 0.0;
        for (int i = 0; i < dk; i++) b[i] = 0.0;
        for (size_t t = t0; t < t0 + n; t++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < dk; i++) {
                double x = (double)tq_f16_to_f32(kr[i]) - (m ? (double)m[i] : 0.0);
                b[i] += x * x;
            }
        }
        for (int i = 0; i < dk; i++) {
            sa += with_q ? a[i] : 1.0;
            sb += b[i];
        }
        int ok = sa > 0.0 && sb > 0.0 && isfinite(sa) && isfinite(sb);
        double mean_lg = 0.0;
        for (int i = 0; ok && i < dk; i++) {
            an[i] = (with_q ? a[i] : 1.0) * dk / sa + KEY_SCALE_FLOOR;
            bn[i] = b[i] * dk / sb + KEY_SCALE_FLOOR;
            lg[i] = p * log(an[i] / bn[i]);
            mean_lg += lg[i] / dk;
        }
        for (int i = 0; i < dk; i++) s[i] = ok ? (float)exp(lg[i] - mean_lg) : 1.0f;
        if (l->key_perm && ok) split_channels(l, h, dk, an, bn, b, s);
    }
    l->scale_set = 1;
}

/* Compresses raw tokens [n_comp, target), K and V of each token in one pass. */
static tq_status compress_to(tq_kv_cache *c, tq_kv_layer *l, size_t target) {
    if (target <= l->n_comp) return TQ_OK;
    tq_status st = ensure_cpages(c, l, l->n_comp, target);
    if (st) return st;
    if (l->key_mean && !l->mean_set) compute_key_mean(c, l);
    if (l->key_scale && !l->scale_set) compute_key_scale(c, l);
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    float kbuf[TQ_MAX_DIM], vbuf[TQ_MAX_DIM];
    size_t t = l->n_comp;
    for (; t < target; t++) {
        for (int h = 0; h < H; h++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h), *vr = tq_kv_vraw(c, l, t, h);
            const size_t hk = (size_t)h * (size_t)dk;
            /* Stored coordinate i: s ⊙ (k − mean) of channel key_perm[i] (i without a split). */
            for (int i = 0; i < dk; i++) {
                int ch = tq_kv_key_channel(l, hk, i);
                float x = tq_f16_to_f32(kr[ch]);
                if (l->key_mean) x -= l->key_mean[hk + (size_t)ch];
                if (l->key_scale) x *= l->key_scale[hk + (size_t)ch];
                kbuf[i] = x;
            }
            for (int i = 0; i < dv; i++) vbuf[i] = tq_f16_to_f32(vr[i]);
            st = encode_tensor(&l->k, kbuf, (uint8_t *)tq_kv_krec(c, l, t, h));
            if (!st) st = encode_tensor(&l->v, vbuf, (uint8_t *)tq_kv_vrec(c, l, t, h));
            if (st) break;
        }
        if (st) break;
    }
    l->n_comp = t;
    /* Raw pages wholly below the compressed boundary go to the spare list. */
    size_t drop = 0;
    while (drop < l->n_rpages && l->raw_base + TQ_KV_P <= l->n_comp) {
        spare_rpage(l, l->rpages[drop++]);
        l->raw_base += TQ_KV_P;
    }
    if (drop) {
        memmove(l->rpages, l->rpages + drop, (l->n_rpages - drop) * sizeof *l->rpages);
        l->n_rpages -= drop;
    }
    if (l->n_rpages == 0) l->raw_base = l->n_comp / TQ_KV_P * TQ_KV_P;
    return st;
}

static int check_values(const float *x, size_t n, tq_status *st) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return *st = TQ_ERR_NONFINITE, 0;
        if (fabsf(x[i]) > 65504.0f && (tq_f32_to_f16(x[i]) & 0x7C00u) == 0x7C00u)
            return *st = TQ_ERR_RANGE, 0;
    }
    return 1;
}

/* Stores n_tokens tokens raw (fp16) after the layer's last one; no compression. */
static tq_status store_raw(tq_kv_cache *c, tq_kv_layer *l, const float *k, const float *v,
                           size_t n_tokens) {
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    tq_status st = TQ_OK;
    if (!check_values(k, n_tokens * (size_t)H * (size_t)dk, &st) ||
        !check_values(v, n_tokens * (size_t)H * (size_t)dv, &st))
        return st;
    st = ensure_rpages(c, l, l->len + n_tokens);
    if (st) return st;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t t = l->len + i;
        for (int h = 0; h < H; h++) {
            const float *kx = k + (i * (size_t)H + (size_t)h) * (size_t)dk;
            const float *vx = v + (i * (size_t)H + (size_t)h) * (size_t)dv;
            uint16_t *kr = raw_k_mut(c, l, t, h), *vr = raw_v_mut(c, l, t, h);
            for (int j = 0; j < dk; j++) kr[j] = tq_f32_to_f16(kx[j]);
            for (int j = 0; j < dv; j++) vr[j] = tq_f32_to_f16(vx[j]);
        }
    }
    l->len += n_tokens;
    return TQ_OK;
}

/* A windowed layer recycles the pages wholly below the range the first query of an append
 * at position `pos` (the length before it) can see, less the slack: [pos + 1 − window −
 * slack, …), in whole pages (dropped stays a multiple of P). Tokens dropped before they were
 * compressed count as compressed (n_comp ≥ dropped): compression resumes at the first kept. */
static void drop_old(tq_kv_layer *l, size_t pos) {
    size_t keep = l->window + TQ_KV_WINDOW_SLACK;
    if (!l->window || pos + 1 <= keep) return;
    size_t hp = (pos + 1 - keep) / TQ_KV_P * TQ_KV_P;
    if (hp <= l->dropped) return;
    for (size_t i = l->dropped / TQ_KV_P; i < hp / TQ_KV_P && i < l->n_cpages; i++)
        if (l->cpages[i]) {
            spare_cpage(l, l->cpages[i]);
            l->cpages[i] = NULL;
        }
    size_t drop = 0;
    while (drop < l->n_rpages && l->raw_base + TQ_KV_P <= hp) {
        spare_rpage(l, l->rpages[drop++]);
        l->raw_base += TQ_KV_P;
    }
    if (drop) {
        memmove(l->rpages, l->rpages + drop, (l->n_rpages - drop) * sizeof *l->rpages);
        l->n_rpages -= drop;
    }
    if (l->n_rpages == 0 && l->raw_base < hp) l->raw_base = hp;
    if (!l->compress_none && l->n_comp < hp) l->n_comp = hp;
    l->dropped = hp;
}

tq_status tq_kv_cache_append(tq_kv_cache *c, int layer, const float *k, const float *v,
                             size_t n_tokens) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    if (n_tokens == 0) return TQ_OK;
    if (!k || !v) return TQ_ERR_NULL;
    tq_kv_layer *l = &c->layers[layer];
    size_t pos = l->len;
    tq_status st = store_raw(c, l, k, v, n_tokens);
    if (st) return st;
    drop_old(l, pos);
    if (l->compress_none) return TQ_OK;
    /* Two-phase rule: a multi-token append is prefill and stays raw until the first decode
     * step (a single-token append), unless prefill_raw is off. */
    if (n_tokens == 1 || !c->cfg.scheme.prefill_raw) l->compress_started = 1;
    if (!l->compress_started) return TQ_OK;
    return compress_to(c, l, compress_target(c, l, l->len));
}

tq_status tq_kv_cache_compress(tq_kv_cache *c, int layer) {
    if (!c) return TQ_ERR_NULL;
    if (layer < -1 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    tq_status first = TQ_OK;
    for (int i = layer < 0 ? 0 : layer; i < (layer < 0 ? c->cfg.n_layers : layer + 1); i++) {
        tq_kv_layer *l = &c->layers[i];
        if (l->compress_none) continue;
        l->compress_started = 1;
        tq_status st = compress_to(c, l, compress_target(c, l, l->len));
        if (st && !first) first = st;
    }
    return first;
}

tq_status tq_kv_cache_observe_queries(tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                                      size_t n) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    int H = c->cfg.n_kv_heads, dk = c->cfg.head_dim_k;
    if (n_q_heads < H || n_q_heads % H) return TQ_ERR_INVALID;
    if (n && !q) return TQ_ERR_NULL;
    tq_kv_layer *l = &c->layers[layer];
    if (!l->q_sq || l->scale_set || l->len >= TQ_KV_KEY_SCALE_TOKENS || n == 0) return TQ_OK;
    /* The rows at positions len … len + n − 1 below TQ_KV_KEY_SCALE_TOKENS count. */
    if (n > TQ_KV_KEY_SCALE_TOKENS - l->len) n = TQ_KV_KEY_SCALE_TOKENS - l->len;
    size_t total = n * (size_t)n_q_heads * (size_t)dk;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(q[i])) return TQ_ERR_NONFINITE;
    int G = n_q_heads / H;
    for (size_t t = 0; t < n; t++)
        for (int qh = 0; qh < n_q_heads; qh++) {
            const float *x = q + (t * (size_t)n_q_heads + (size_t)qh) * (size_t)dk;
            double *acc = l->q_sq + (size_t)(qh / G) * (size_t)dk;
            for (int i = 0; i < dk; i++) acc[i] += (double)x[i] * x[i];
        }
    l->q_rows += (double)n * G;
    return TQ_OK;
}

tq_status tq_kv_cache_key_scale(const tq_kv_cache *c, int layer, float *out) {
    if (!c || !out) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    const tq_kv_layer *l = &c->layers[layer];
    if (!l->key_scale || !l->scale_set) return TQ_ERR_INVALID;
    memcpy(out, l->key_scale, (size_t)c->cfg.n_kv_heads * (size_t)c->cfg.head_dim_k * sizeof(float));
    return TQ_OK;
}

size_t tq_kv_cache_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].len : 0;
}

size_t tq_kv_cache_dropped_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].dropped : 0;
}

size_t tq_kv_cache_compressed_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].n_comp : 0;
}

tq_status tq_kv_cache_truncate(tq_kv_cache *c, size_t length) {
    if (!c) return TQ_ERR_NULL;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        if (length > l->len) return TQ_ERR_INVALID;
        /* The next query (at `length`) of a windowed layer must find what it sees. */
        if (length > 0 && l->dropped && length + 1 < l->dropped + l->window) return TQ_ERR_INVALID;
    }
    for (int i = 0; i < c->cfg.n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        if (length == 0 && l->dropped) {
            /* Reset: the emptied slots are filled again on demand. */
            for (size_t j = 0; j < l->n_rpages; j++) spare_rpage(l, l->rpages[j]);
            l->n_rpages = 0;
            l->raw_base = 0;
            l->n_comp = 0;
            l->dropped = 0;
        }
        if (length < l->n_comp) {
            /* The raw copies of [length, n_comp) are gone: the kept tokens stay compressed. */
            l->n_comp = length;
            for (size_t j = 0; j < l->n_rpages; j++) spare_rpage(l, l->rpages[j]);
            l->n_rpages = 0;
            l->raw_base = length / TQ_KV_P * TQ_KV_P;
        }
        l->len = length;
        if (length == 0) {
            l->mean_set = 0;
            l->compress_started = 0;
            if (l->key_scale) key_scale_reset(c, l);
        }
    }
    return TQ_OK;
}

tq_status tq_kv_cache_read(const tq_kv_cache *c, int layer, size_t start, size_t n, float *k,
                           float *v) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    const tq_kv_layer *l = &c->layers[layer];
    if (start > l->len || n > l->len - start) return TQ_ERR_INVALID;
    if (n && start < l->dropped) return TQ_ERR_INVALID;
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    tq_status st = TQ_OK;
    for (size_t i = 0; i < n; i++) {
        size_t t = start + i;
        for (int h = 0; h < H; h++) {
            float *ko = k ? k + (i * (size_t)H + (size_t)h) * (size_t)dk : NULL;
            float *vo = v ? v + (i * (size_t)H + (size_t)h) * (size_t)dv : NULL;
            if (t < l->n_comp) {
                tq_status s1 = TQ_OK;
                if (ko) {
                    float dec[TQ_MAX_DIM];
                    const size_t hk = (size_t)h * (size_t)dk;
                    s1 = decode_tensor(&l->k, tq_kv_krec(c, l, t, h), dec);
                    for (int j = 0; j < dk; j++) { /* the inverse of compress_to's */
                        int ch = tq_kv_key_channel(l, hk, j);
                        float x = dec[j];
                        if (l->key_scale) x /= l->key_scale[hk + (size_t)ch];
                        if (l->key_mean) x += l->key_mean[hk + (size_t)ch];
                        ko[ch] = x;
                    }
                }
                if (vo) {
                    tq_status s2 = decode_tensor(&l->v, tq_kv_vrec(c, l, t, h), vo);
                    if (!s1) s1 = s2;
                }
                if (s1 && !st) st = s1;
            } else {
                if (ko) {
                    const uint16_t *r = tq_kv_kraw(c, l, t, h);
                    for (int j = 0; j < dk; j++) ko[j] = tq_f16_to_f32(r[j]);
                }
                if (vo) {
                    const uint16_t *r = tq_kv_vraw(c, l, t, h);
                    for (int j = 0; j < dv; j++) vo[j] = tq_f16_to_f32(r[j]);
                }
            }
        }
    }
    return st;
}

tq_status tq_kv_cache_memory(const tq_kv_cache *c, tq_kv_memory *m) {
    if (!c || !m) return TQ_ERR_NULL;
    memset(m, 0, sizeof *m);
    size_t H = (size_t)c->cfg.n_kv_heads, dk = (size_t)c->cfg.head_dim_k,
           dv = (size_t)c->cfg.head_dim_v;
    m->allocated_bytes = sizeof *c + (size_t)c->cfg.n_layers * sizeof(tq_kv_layer);
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        size_t comp = l->n_comp > l->dropped ? l->n_comp - l->dropped : 0;
        size_t raw = l->len - (l->n_comp > l->dropped ? l->n_comp : l->dropped);
        m->tokens += comp + raw;
        m->compressed_tokens += comp;
        m->data_bytes += comp * H * (l->k.rec_bytes + l->v.rec_bytes) + raw * H * 2 * (dk + dv);
        m->f16_bytes += (comp + raw) * H * 2 * (dk + dv);
        size_t cpages = l->n_cspare;
        for (size_t j = 0; j < l->n_cpages; j++) cpages += l->cpages[j] != NULL;
        m->allocated_bytes += cpages * tq_kv_cpage_bytes(c, l) +
                              (l->n_rpages + l->n_rspare) * c->rpage_bytes +
                              (l->cap_cpages + l->cap_rpages + l->cap_rspare + l->cap_cspare) *
                                  sizeof(void *);
        if (l->key_mean) {
            m->data_bytes += H * dk * sizeof(float);
            m->allocated_bytes += H * dk * sizeof(float);
        }
        if (l->key_scale) {
            m->data_bytes += H * dk * sizeof(float);
            m->allocated_bytes += H * dk * (sizeof(float) + sizeof(double));
        }
        if (l->key_perm) {
            m->data_bytes += H * dk * sizeof(uint16_t);
            m->allocated_bytes += H * dk * sizeof(uint16_t);
        }
    }
    return TQ_OK;
}

tq_status tq_kv_cache_convert(const tq_kv_cache *src, const tq_kv_scheme *scheme,
                              tq_kv_cache **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!src || !scheme) return TQ_ERR_NULL;
    tq_kv_cache_config cfg = src->cfg;
    cfg.scheme = *scheme;
    cfg.reserve_tokens = 0;
    tq_kv_cache *dst;
    tq_status st = tq_kv_cache_create(&dst, &cfg);
    if (st) return st;
    size_t H = (size_t)cfg.n_kv_heads, chunk = TQ_KV_P;
    float *kb = malloc(chunk * H * (size_t)cfg.head_dim_k * sizeof(float));
    float *vb = malloc(chunk * H * (size_t)cfg.head_dim_v * sizeof(float));
    if (!kb || !vb) st = TQ_ERR_NOMEM;
    for (int i = 0; !st && i < cfg.n_layers; i++) {
        size_t len = src->layers[i].len;
        const tq_kv_layer *sl = &src->layers[i];
        tq_kv_layer *dl = &dst->layers[i];
        if (sl->q_sq && dl->q_sq) { /* the queries src has seen shape dst's key scale too */
            memcpy(dl->q_sq, sl->q_sq, H * (size_t)cfg.head_dim_k * sizeof(double));
            dl->q_rows = sl->q_rows;
        }
        for (size_t t = 0; !st && t < len; t += chunk) {
            size_t n = len - t < chunk ? len - t : chunk;
            st = tq_kv_cache_read(src, i, t, n, kb, vb);
            if (!st) st = store_raw(dst, &dst->layers[i], kb, vb, n);
        }
        if (!st) st = tq_kv_cache_compress(dst, i);
    }
    free(kb);
    free(vb);
    if (st) {
        tq_kv_cache_free(dst);
        return st;
    }
    *out = dst;
    return TQ_OK;
}

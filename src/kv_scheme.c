/*
 * The scheme language of the KV cache (doc/kvcache.md §2): the grammar of a scheme string, its
 * parser, the canonical format and the help text. Nothing here touches a cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvcache_internal.h"

static const char scheme_help[] =
    "valid KV cache schemes:\n"
    "  f16 | q8_0 | q4_0            same format for keys and values\n"
    "  q8_0r | q4_0r                q8_0 / q4_0 after a seeded Hadamard rotation (llama.cpp's)\n"
    "  turboB                       B-bit TurboQuant keys and values, B in [1, 8], fractional ok"
    " (turbo3, turbo3.5)\n"
    "  turboKvV | kKvV              K-bit keys, V-bit values; 0 or f16/q8_0/q4_0/q8_0r/q4_0r for"
    " a plain format (turbo4v2, turbo0v4, k3.5v3, kq8_0v4, kq8_0rvq4_0r)\n"
    "  k=K:v=V                      explicit form\n"
    "options, appended as :name=value\n"
    "  variant=mse|prod norm=0|1 mean=0|1|2 (2, the default for MSE keys, predicts each key from the\n"
    "  one before it; 1 the key mean alone) kscale=0|1 ksplit=0|1|2 window=N\n"
    "  batch=N start=N prefill_raw=0|1 seed=N sink=N (first N positions kept fp16 too, N to 1024;\n"
    "  default 4 with a TurboQuant side, else 0) trellis=0|1|2 (2-4 bit TurboQuant indices: 0\n"
    "  Lloyd-Max codes, 1 trellis codes, 2 trellis codes of two-state tables, the default with\n"
    "  a TurboQuant side; 0 decodes fastest, 1 has the least error)\n"
    "  first=N last=N edge=FORM     (edge layers default to turbo8)\n"
    "numbers are digits only, a bit width with at most one '.' (no sign, space or exponent):\n"
    "  bits 0 (f16) or 1 to 8, N 0 to 2^30 (batch from 1), seed 0 to 2^64-1\n";

const char *tq_kv_scheme_help(void) { return scheme_help; }

/* A side's key mean when the text does not say: 2 (prediction across tokens, below) for
 * TurboQuant MSE keys, 1 for PROD keys, which do not decode linearly, 0 for other forms. */
static int default_key_mean(const tq_kv_layer_scheme *l) {
    if (l->key_format != TQ_KV_TURBO) return 0;
    return l->key_variant == TQ_VARIANT_MSE ? TQ_KV_KEY_MEAN_PREDICT : 1;
}

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
     * (`:mean=0` turns it off). Prediction across tokens (mean=2: each key coded as its residual
     * from rho times the key before it as decoded) takes 6-7% more off turbo3's and turbo4's KLD
     * on both real models over 20 windows and improves or ties every other view
     * (doc/kvcache.md §2), so it is the default for MSE keys; PROD keys (variant=prod) keep 1. */
    l->key_mean = default_key_mean(l);
    /* Measured on Gemma 3 270M (wikitext-2, ctx 2048, 20 windows, every key compressed): the
     * per-channel key scale cuts turbo4's KLD against fp16 from 0.096 to 0.036 (ΔPPL 9.0% to
     * 2.9%) and turbo3's from 0.42 to 0.13 (52.6% to 13.6%); doc/kvcache.md §2. */
    l->key_scale = kf == TQ_KV_TURBO;
    /* Measured likewise (doc/kvcache.md §2): at fractional key widths, giving the extra bit
     * to the channels ranked first by query × key energy cuts turbo3.5's KLD from 0.082 to
     * 0.069 (ΔPPL 7.6% to 6.4%) at the same bytes; at the whole width 3 it helps with trellis
     * codes, and with Lloyd-Max codes at head dim 256 but not 64 (TQ_KV_KEY_SPLIT_AUTO). */
    l->key_split = kf == TQ_KV_TURBO ? TQ_KV_KEY_SPLIT_AUTO : 0;
}

void tq_kv_scheme_defaults(tq_kv_scheme *s) {
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    layer_scheme_set(&s->layer, TQ_KV_F16, 0, TQ_KV_F16, 0);
    s->edge = s->layer;
    s->batch = 64;
    s->prefill_raw = 1;
    s->seed = 0x5475726230ull;
}

/* The fields every sized tq_kv_scheme has (doc/api.md): struct_size and the layer scheme. */
#define KV_SCHEME_MIN offsetof(tq_kv_scheme, edge)

tq_status tq_kv_scheme_in(tq_kv_scheme *dst, const tq_kv_scheme *src) {
    if (!src) return TQ_ERR_NULL;
    tq_kv_scheme_defaults(dst);
    tq_status st = tq_sized_in(dst, src, sizeof *dst, KV_SCHEME_MIN);
    size_t size;
    memcpy(&size, src, sizeof size);
    if (!st && size < offsetof(tq_kv_scheme, edge) + sizeof dst->edge)
        dst->edge = dst->layer; /* as tq_kv_scheme_parse without an edge form */
    return st;
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

/* The names of the plain formats (every format but TQ_KV_TURBO), indexed by tq_kv_format. */
static const char *const plain_names[] = {
    [TQ_KV_F16] = "f16",     [TQ_KV_Q8_0] = "q8_0",   [TQ_KV_Q4_0] = "q4_0",
    [TQ_KV_Q8_0R] = "q8_0r", [TQ_KV_Q4_0R] = "q4_0r",
};
#define N_FORMATS ((int)(sizeof plain_names / sizeof plain_names[0]))

/* 1 and *fmt if p[0, n) names a plain format. */
static int plain_format(const char *p, size_t n, tq_kv_format *fmt) {
    for (int f = 0; f < N_FORMATS; f++)
        if (plain_names[f] && strlen(plain_names[f]) == n && !memcmp(p, plain_names[f], n))
            return *fmt = (tq_kv_format)f, 1;
    return 0;
}

/* One side of a form: a bit width (0 = f16; else 1 to 8, fractional ok) or a plain format
 * name. Returns 0 on failure, with a message naming `field` in why. */
static int parse_side(const char *p, size_t n, const char *field, tq_kv_format *fmt, float *bits,
                      char *why, size_t why_cap) {
    if (plain_format(p, n, fmt)) return *bits = 0, 1;
    if (n > 0 && ((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z'))) {
        snprintf(why, why_cap, "%s: expected a bit width, f16, q8_0, q4_0, q8_0r or q4_0r in",
                 field);
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
    if (plain_format(p, n, &kf)) {
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

/* The sink count a parsed scheme gets without sink=N: TQ_KV_SINK_DEFAULT where TurboQuant
 * compresses a side (the first tokens draw attention mass that its codes blur; measured on
 * both real models, doc/kvcache.md §2), 0 for schemes of f16 and block formats only (as
 * llama.cpp's caches, which they mirror). */
static int scheme_default_sink(const tq_kv_scheme *s) {
    const tq_kv_layer_scheme *ls[2] = {&s->layer, &s->edge};
    for (int i = 0; i < 2; i++)
        if (ls[i]->key_format == TQ_KV_TURBO || ls[i]->value_format == TQ_KV_TURBO)
            return TQ_KV_SINK_DEFAULT;
    return 0;
}

/* The parser's trellis codes: the two-state tables wherever a side is TurboQuant (measured on
 * both models, every key compressed, ctx 2048, 7 windows: KLD 15–26% below Lloyd-Max codes at
 * the same bytes, turbo4's ΔPPL +1.50% → +0.58% and +1.14% → +0.58%; decode attention 2–21%
 * slower at ctx 2048 by kernel set; doc/kvcache.md §2, "Trellis codes"), else 0 (nothing
 * reads them). */
static int scheme_default_trellis(const tq_kv_scheme *s) {
    return scheme_default_sink(s) ? TQ_TRELLIS_TWO_STATE : 0;
}

tq_status tq_kv_scheme_parse_sized(const char *text, tq_kv_scheme *out, size_t out_size, char *err,
                                   size_t cap) {
    if (!text || !out) return TQ_ERR_NULL;
    if (out_size < KV_SCHEME_MIN) return TQ_ERR_CAPACITY;
    if (err && cap) err[0] = 0;
    tq_kv_scheme s;
    tq_kv_scheme_defaults(&s);
    int have_k = 0, have_v = 0, explicit_form = 0, have_edge = 0;
    int variant = -1, norm = -1, mean = -1, kscale = -1, ksplit = -1, have_sink = 0, have_trellis = 0;
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
                /* ksplit=2: the default, the key split where measured to help (kv.h); mean=2:
                 * the mean and prediction across tokens (TQ_KV_KEY_MEAN_PREDICT) */
                if (!parse_number(val, vn, field, 0, 0,
                                  KEY("ksplit") ? TQ_KV_KEY_SPLIT_AUTO : KEY("mean") ? TQ_KV_KEY_MEAN_PREDICT : 1, NULL, &u,
                                  &d, why, sizeof why))
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
            } else if (KEY("sink")) {
                if (!parse_number(val, vn, "sink", 0, 0, (unsigned long long)TQ_KV_SINK_MAX, NULL, &u, &d, why,
                                  sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                s.sink = (int)u;
                have_sink = 1;
            } else if (KEY("trellis")) {
                if (!parse_number(val, vn, "trellis", 0, 0, TQ_TRELLIS_TWO_STATE, NULL, &u, &d, why, sizeof why))
                    return scheme_error(err, cap, text, why, p, n);
                s.trellis = (int)u;
                have_trellis = 1;
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
        ls[i]->key_mean = mean >= 0 ? mean : default_key_mean(ls[i]);
        if (kscale >= 0) ls[i]->key_scale = kscale;
        if (ksplit >= 0) ls[i]->key_split = ksplit;
        if (ls[i]->key_variant == TQ_VARIANT_PROD && ls[i]->key_format == TQ_KV_TURBO &&
            norm > 0)
            return scheme_error(err, cap, text, "norm correction is MSE only", "", 0);
        if (ls[i]->key_variant == TQ_VARIANT_PROD && ls[i]->key_format == TQ_KV_TURBO &&
            ls[i]->key_mean == TQ_KV_KEY_MEAN_PREDICT)
            return scheme_error(err, cap, text, "mean=2 (prediction across tokens) is MSE only", "", 0);
    }
    if (!have_sink) s.sink = scheme_default_sink(&s);
    if (!have_trellis) s.trellis = scheme_default_trellis(&s);
    tq_sized_out(out, out_size, &s, sizeof s, KV_SCHEME_MIN, 1);
    return TQ_OK;
}

static int format_side(char *buf, size_t cap, tq_kv_format f, float bits) {
    if (f == TQ_KV_TURBO) return snprintf(buf, cap, "%.9g", (double)bits);
    if ((unsigned)f < (unsigned)N_FORMATS && plain_names[f])
        return snprintf(buf, cap, "%s", plain_names[f]);
    return -1;
}

int tq_kv_layer_scheme_valid(const tq_kv_layer_scheme *l) {
    if ((unsigned)l->key_format > TQ_KV_Q4_0R || (unsigned)l->value_format > TQ_KV_Q4_0R) return 0;
    if (l->key_variant != TQ_VARIANT_MSE && l->key_variant != TQ_VARIANT_PROD) return 0;
    if (l->key_split < 0 || l->key_split > TQ_KV_KEY_SPLIT_AUTO) return 0;
    if (l->key_mean < 0 || l->key_mean > TQ_KV_KEY_MEAN_PREDICT) return 0;
    /* prediction across tokens needs keys that decode linearly: MSE */
    if (l->key_mean == TQ_KV_KEY_MEAN_PREDICT && l->key_format == TQ_KV_TURBO && l->key_variant != TQ_VARIANT_MSE)
        return 0;
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

tq_status tq_kv_scheme_format(const tq_kv_scheme *given, char *buf, size_t cap) {
    if (!given || !buf) return TQ_ERR_NULL;
    tq_kv_scheme local;
    const tq_kv_scheme *s = &local;
    if (tq_kv_scheme_in(&local, given)) return TQ_ERR_INVALID;
    if (!tq_kv_layer_scheme_valid(&s->layer) || !tq_kv_layer_scheme_valid(&s->edge)) return TQ_ERR_INVALID;
    if (s->sink < 0 || (unsigned long long)s->sink > (unsigned long long)TQ_KV_SINK_MAX) return TQ_ERR_INVALID;
    if (s->trellis < 0 || s->trellis > TQ_TRELLIS_TWO_STATE) return TQ_ERR_INVALID;
    const tq_kv_layer_scheme *l = &s->layer, *e = &s->edge;
    char k[24], v[24], ek[24], ev[24], edge[64] = "", mean[16], kscale[16], ksplit[16];
    char norm[16] = "", sink[24] = "", trellis[16] = "";
    /* likewise the parser's trellis codes */
    if (s->trellis != scheme_default_trellis(s)) snprintf(trellis, sizeof trellis, ":trellis=%d", s->trellis);
    /* The parser's default sink count is not written: canonical texts of schemes at their
     * default stay as they were. */
    if (s->sink != scheme_default_sink(s)) snprintf(sink, sizeof sink, ":sink=%d", s->sink);
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
    /* mean has three values: the parser gives both sides the one it was given, or each its
     * default. Sides that differ are written as nothing when both are at their defaults, as
     * the TurboQuant side's value when the other side's keys have no mean to keep; any other
     * mix no text gives. */
    int lt = l->key_format == TQ_KV_TURBO, et = e->key_format == TQ_KV_TURBO;
    mean[0] = 0;
    if (l->key_mean == e->key_mean) snprintf(mean, sizeof mean, ":mean=%d", l->key_mean);
    else if (l->key_mean == default_key_mean(l) && e->key_mean == default_key_mean(e)) mean[0] = 0;
    else if (lt != et) snprintf(mean, sizeof mean, ":mean=%d", lt ? l->key_mean : e->key_mean);
    else if (lt) return TQ_ERR_INVALID; /* no text parses to it */
    format_flag(kscale, sizeof kscale, "kscale", l->key_scale, e->key_scale);
    /* ksplit has three values (0, 1, TQ_KV_KEY_SPLIT_AUTO): written as they are. */
    if (l->key_split == e->key_split) snprintf(ksplit, sizeof ksplit, ":ksplit=%d", l->key_split);
    else ksplit[0] = 0;
    int n = snprintf(buf, cap,
                     "k=%s:v=%s:variant=%s%s%s%s%s:window=%d:batch=%d:start=%d:prefill_raw=%d:"
                     "seed=%llu:first=%d:last=%d%s%s%s",
                     k, v, l->key_variant == TQ_VARIANT_PROD ? "prod" : "mse", norm, mean, kscale,
                     ksplit, s->raw_window, s->batch, s->quantized_kv_start,
                     s->prefill_raw ? 1 : 0, (unsigned long long)s->seed, s->edge_first,
                     s->edge_last, edge, sink, trellis);
    if (n < 0 || (size_t)n >= cap) {
        if (cap) buf[0] = 0;
        return TQ_ERR_CAPACITY;
    }
    return TQ_OK;
}

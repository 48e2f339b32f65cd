/*
 * TurboQuant codecs (paper Algorithms 1 and 2; doc/codec.md): MSE, PROD, fractional bits.
 *
 * A codec is a list of units; a unit is a set of input channels with its own rotation and
 * norm, split into one or two segments of rotated coordinates coded at one bit width each:
 *  - integral bits:           1 unit, 1 segment;
 *  - TQ_SPLIT_FIXED fraction: 1 unit, segments [0, h) at ⌈b⌉ and [h, d) at ⌊b⌋ bits (after a
 *    random rotation the coordinates are exchangeable, so which h get more bits is immaterial);
 *  - TQ_SPLIT_ENERGY:         2 units, the h channels of largest energy and the rest;
 *  - TQ_SPLIT_BLOCK:          1 unit whose rotation is two independent ones, over channels
 *    [0, h) and [h, d): segment 0 is then the first block; one norm.
 * The record layout (doc/format.md): segments' packed words, then [PROD: sign words], then the
 * norms (one per unit), then [PROD: residual norm γ].
 *
 * Quantization works in s-units, s = √d·y for the rotated unit vector y, where the codebook
 * lives; one multiply maps the raw rotation output to s, so every kernel set sees the same
 * floats and produces the same indices.
 */
#include <math.h>
#include <stdlib.h>

#include "codec_record.h"
#include "internal.h"
#include "kernels/kernels.h"

#define SQRT_HALF_PI 1.2533141373155003 /* √(π/2), Algorithm 2's dequantization constant */

typedef struct segment {
    int start, count, bits; /* rotated coordinates [start, start+count) of the unit */
    size_t byte_off;        /* offset of its packed words in a record */
    const tq_codebook *cb;  /* NULL for a 0-bit segment (PROD's MSE part at < 1 bit) */
} segment;

typedef struct unit {
    int offset, dim; /* channels [offset, offset+dim) of the permuted vector */
    tq_rotation *rot;
    tq_rotation *rot2; /* TQ_SPLIT_BLOCK: rot covers [0, block), rot2 [block, dim); else NULL */
    int block;
    int n_seg;
    segment seg[2];
    size_t norm_off;
    float sqrt_dim, inv_sqrt_dim;
} unit;

struct tq_codec {
    tq_codec_config cfg;
    int dim;
    size_t record_bytes, norm_bytes;
    int n_units;
    unit u[2];
    int *perm; /* (dim,) input channel of permuted coordinate i; NULL for identity */
    /* PROD */
    float *sketch; /* (dim, dim) S, i.i.d. N(0, 1) */
    size_t sign_off, gamma_off;
};

static const float sign_centroids[2] = {-1.0f, 1.0f};
static const float sign_boundary[1] = {0.0f};

/* The fields every sized tq_codec_config has (doc/api.md): struct_size, dim, bits, variant. */
#define CODEC_CONFIG_MIN offsetof(tq_codec_config, norm_correction)

static void codec_config_defaults(tq_codec_config *cfg, int dim, float bits, tq_variant variant) {
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->dim = dim;
    cfg->bits = bits;
    cfg->variant = variant;
    cfg->norm_correction = variant == TQ_VARIANT_MSE;
    cfg->norm_format = TQ_NORM_F16;
    cfg->rotation = TQ_ROTATION_AUTO;
    cfg->seed = 0x5475726230ull;
    cfg->split = TQ_SPLIT_FIXED;
    cfg->channel_energy = NULL;
}

void tq_codec_config_init_sized(tq_codec_config *cfg, size_t cfg_size, int dim, float bits,
                                tq_variant variant) {
    tq_codec_config d;
    codec_config_defaults(&d, dim, bits, variant);
    if (cfg) tq_sized_out(cfg, cfg_size, &d, sizeof d, CODEC_CONFIG_MIN, 1);
}

/* The caller's config as this version's struct, missing fields at their defaults. */
static tq_status codec_config_in(tq_codec_config *dst, const tq_codec_config *src) {
    if (!src) return TQ_ERR_NULL;
    tq_codec_config given;
    memset(&given, 0, sizeof given);
    tq_status st = tq_sized_in(&given, src, sizeof given, CODEC_CONFIG_MIN);
    if (st) return st;
    codec_config_defaults(dst, given.dim, given.bits, given.variant);
    return tq_sized_in(dst, src, sizeof *dst, CODEC_CONFIG_MIN);
}

/* The shape of a configuration: how many coordinates at how many bits. */
typedef struct shape {
    int hi_bits, lo_bits; /* ⌈m⌉, ⌊m⌋ for the MSE part m (= b, or b − 1 for PROD) */
    int n_hi;             /* coordinates (or, with energy split, channels) at hi_bits */
} shape;

/* TQ_SPLIT_BLOCK: block_dim channels at block_bits, the rest at the whole width left. */
static tq_status check_block(const tq_codec_config *cfg, shape *sh) {
    int d = cfg->dim, h = cfg->block_dim;
    if (h < 2 || h > d - 2) return TQ_ERR_DIM;
    if (cfg->block_bits < 1 || cfg->block_bits > 8) return TQ_ERR_BITS;
    double lo = ((double)cfg->bits * d - (double)cfg->block_bits * h) / (d - h);
    double lr = floor(lo + 0.5);
    if (fabs(lo - lr) > 1e-4 || lr < 1 || lr > 8) return TQ_ERR_BITS;
    if (cfg->rotation == TQ_ROTATION_HADAMARD && (!tq_is_pow2(h) || !tq_is_pow2(d - h)))
        return TQ_ERR_DIM;
    sh->hi_bits = cfg->block_bits;
    sh->lo_bits = (int)lr;
    sh->n_hi = h;
    return TQ_OK;
}

static tq_status check_config(const tq_codec_config *cfg, shape *sh) {
    if (!cfg) return TQ_ERR_NULL;
    if (cfg->dim < TQ_MIN_DIM || cfg->dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (cfg->variant != TQ_VARIANT_MSE && cfg->variant != TQ_VARIANT_PROD) return TQ_ERR_VARIANT;
    if (cfg->norm_format != TQ_NORM_F16 && cfg->norm_format != TQ_NORM_F32) return TQ_ERR_VARIANT;
    if (cfg->rotation < TQ_ROTATION_AUTO || cfg->rotation > TQ_ROTATION_BLOCK_HADAMARD)
        return TQ_ERR_VARIANT;
    if (cfg->split != TQ_SPLIT_FIXED && cfg->split != TQ_SPLIT_ENERGY &&
        cfg->split != TQ_SPLIT_BLOCK)
        return TQ_ERR_VARIANT;
    if (!(cfg->bits >= 1.0f && cfg->bits <= 8.0f)) return TQ_ERR_BITS; /* also rejects NaN */
    if (cfg->variant == TQ_VARIANT_PROD && cfg->norm_correction) return TQ_ERR_INVALID;
    if (cfg->variant == TQ_VARIANT_PROD && cfg->split != TQ_SPLIT_FIXED) return TQ_ERR_INVALID;
    if (cfg->split == TQ_SPLIT_BLOCK) return check_block(cfg, sh);
    if (cfg->rotation == TQ_ROTATION_HADAMARD && !tq_is_pow2(cfg->dim) &&
        cfg->split == TQ_SPLIT_FIXED)
        return TQ_ERR_DIM;
    double m = cfg->variant == TQ_VARIANT_PROD ? cfg->bits - 1.0 : cfg->bits;
    double k = floor(m + 1e-9);
    double frac = m - k;
    sh->lo_bits = (int)k;
    sh->hi_bits = (int)k;
    sh->n_hi = 0;
    if (frac > 1e-6) {
        double h = frac * cfg->dim;
        double hr = floor(h + 0.5);
        if (fabs(h - hr) > 1e-4 || hr < 1 || hr >= cfg->dim) return TQ_ERR_BITS;
        sh->hi_bits = (int)k + 1;
        sh->n_hi = (int)hr;
    }
    if (cfg->split == TQ_SPLIT_ENERGY && sh->n_hi > 0) {
        if (!cfg->channel_energy) return TQ_ERR_INVALID;
        for (int i = 0; i < cfg->dim; i++)
            if (!isfinite(cfg->channel_energy[i]) || cfg->channel_energy[i] < 0)
                return TQ_ERR_INVALID;
        if (sh->n_hi < 2 || cfg->dim - sh->n_hi < 2) return TQ_ERR_BITS;
        if (cfg->rotation == TQ_ROTATION_HADAMARD &&
            (!tq_is_pow2(sh->n_hi) || !tq_is_pow2(cfg->dim - sh->n_hi)))
            return TQ_ERR_DIM;
    }
    return TQ_OK;
}

static size_t norm_size(const tq_codec_config *cfg) {
    return cfg->norm_format == TQ_NORM_F32 ? 4 : 2;
}

/* Lays out units and segments. With codebooks == 0 only sizes are computed. */
static tq_status layout(tq_codec *c, const shape *sh, int codebooks) {
    const tq_codec_config *cfg = &c->cfg;
    int d = cfg->dim;
    int energy = cfg->split == TQ_SPLIT_ENERGY && sh->n_hi > 0;
    size_t off = 0;
    c->dim = d;
    c->norm_bytes = norm_size(cfg);
    c->n_units = energy ? 2 : 1;
    for (int ui = 0; ui < c->n_units; ui++) {
        unit *u = &c->u[ui];
        u->offset = energy && ui == 1 ? sh->n_hi : 0;
        u->dim = energy ? (ui == 0 ? sh->n_hi : d - sh->n_hi) : d;
        u->sqrt_dim = (float)sqrt((double)u->dim);
        u->inv_sqrt_dim = (float)(1.0 / sqrt((double)u->dim));
        u->n_seg = 0;
        int parts[2][2]; /* (count, bits) */
        int np = 0;
        if (energy) {
            parts[np][0] = u->dim, parts[np][1] = ui == 0 ? sh->hi_bits : sh->lo_bits, np++;
        } else {
            if (sh->n_hi > 0) parts[np][0] = sh->n_hi, parts[np][1] = sh->hi_bits, np++;
            parts[np][0] = d - sh->n_hi, parts[np][1] = sh->lo_bits, np++;
        }
        int start = 0;
        for (int p = 0; p < np; p++) {
            segment *s = &u->seg[u->n_seg++];
            s->start = start;
            s->count = parts[p][0];
            s->bits = parts[p][1];
            s->byte_off = off;
            s->cb = NULL;
            if (s->bits > 0) {
                off += tq_group_bytes((size_t)s->count, s->bits);
                if (codebooks) {
                    tq_status st = tq_codebook_get(u->dim, s->bits, &s->cb);
                    if (st) return st;
                }
            }
            start += s->count;
        }
    }
    if (cfg->variant == TQ_VARIANT_PROD) {
        c->sign_off = off;
        off += tq_group_bytes((size_t)d, 1);
    }
    for (int ui = 0; ui < c->n_units; ui++) {
        c->u[ui].norm_off = off;
        off += c->norm_bytes;
    }
    if (cfg->variant == TQ_VARIANT_PROD) {
        c->gamma_off = off;
        off += c->norm_bytes;
    }
    c->record_bytes = off;
    return TQ_OK;
}

tq_status tq_codec_config_bytes(const tq_codec_config *given, size_t *bytes) {
    if (!given || !bytes) return TQ_ERR_NULL;
    tq_codec_config local;
    const tq_codec_config *cfg = &local;
    tq_status st = codec_config_in(&local, given);
    if (st) return st;
    shape sh;
    st = check_config(cfg, &sh);
    if (st) return st;
    tq_codec tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.cfg = *cfg;
    layout(&tmp, &sh, 0);
    *bytes = tmp.record_bytes;
    return TQ_OK;
}

void tq_codec_free(tq_codec *c) {
    if (!c) return;
    for (int i = 0; i < c->n_units; i++) {
        tq_rotation_free(c->u[i].rot);
        tq_rotation_free(c->u[i].rot2);
    }
    free(c->perm);
    free(c->sketch);
    free(c);
}

static int cmp_energy_desc(const void *a, const void *b, const float *e) {
    int i = *(const int *)a, j = *(const int *)b;
    if (e[i] != e[j]) return e[i] > e[j] ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* Insertion sort (dims ≤ 1024, once per codec) to avoid qsort's missing context argument. */
static void sort_by_energy(int *idx, int n, const float *e) {
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && cmp_energy_desc(&idx[j], &v, e) > 0) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

static void sort_ints(int *a, int n) {
    for (int i = 1; i < n; i++) {
        int v = a[i], j = i - 1;
        while (j >= 0 && a[j] > v) a[j + 1] = a[j], j--;
        a[j + 1] = v;
    }
}

tq_status tq_codec_create(tq_codec **out, const tq_codec_config *given) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    tq_codec_config local;
    const tq_codec_config *cfg = &local;
    tq_status st = codec_config_in(&local, given);
    if (st) return st;
    shape sh;
    st = check_config(cfg, &sh);
    if (st) return st;
    tq_codec *c = calloc(1, sizeof *c);
    if (!c) return TQ_ERR_NOMEM;
    c->cfg = *cfg;
    c->cfg.channel_energy = NULL;
    st = layout(c, &sh, 1);
    if (st) goto fail;
    for (int ui = 0; ui < c->n_units; ui++) {
        /* Each unit's rotation has its own seed stream so the two groups are independent. */
        unit *u = &c->u[ui];
        u->block = cfg->split == TQ_SPLIT_BLOCK ? sh.n_hi : u->dim;
        st = tq_rotation_create(&u->rot, u->block, cfg->seed + (uint64_t)ui * 0x9E37ull,
                                cfg->rotation);
        if (!st && u->block < u->dim)
            st = tq_rotation_create(&u->rot2, u->dim - u->block, cfg->seed + 0x9E37ull,
                                    cfg->rotation);
        if (st) goto fail;
    }
    if (c->n_units == 2) {
        int d = c->dim;
        c->perm = malloc(sizeof(int) * (size_t)d);
        if (!c->perm) {
            st = TQ_ERR_NOMEM;
            goto fail;
        }
        for (int i = 0; i < d; i++) c->perm[i] = i;
        sort_by_energy(c->perm, d, cfg->channel_energy);
        /* Keep the input order inside each group: the layout then depends only on the set. */
        sort_ints(c->perm, sh.n_hi);
        sort_ints(c->perm + sh.n_hi, d - sh.n_hi);
    }
    if (cfg->variant == TQ_VARIANT_PROD) {
        size_t d = (size_t)c->dim;
        c->sketch = malloc(sizeof(float) * d * d);
        if (!c->sketch) {
            st = TQ_ERR_NOMEM;
            goto fail;
        }
        tq_rng rng;
        tq_rng_seed(&rng, cfg->seed, 0x514A4Cull ^ d);
        for (size_t i = 0; i < d * d; i++) c->sketch[i] = (float)tq_rng_gauss(&rng);
    }
    *out = c;
    return TQ_OK;
fail:
    tq_codec_free(c);
    return st;
}

tq_status tq_codec_get_config(const tq_codec *c, tq_codec_config *out, size_t out_size) {
    if (!c || !out) return TQ_ERR_NULL;
    return tq_sized_out(out, out_size, &c->cfg, sizeof c->cfg, CODEC_CONFIG_MIN, 1);
}

size_t tq_codec_bytes_per_vector(const tq_codec *c) { return c ? c->record_bytes : 0; }

tq_status tq_codec_describe(tq_codec *c, int is_key, tq_record *x) {
    if (!c || !x) return TQ_ERR_NULL;
    memset(x, 0, sizeof *x);
    if (c->n_units != 1) return TQ_ERR_VARIANT;
    const unit *u = &c->u[0];
    x->format = TQ_KV_TURBO;
    x->dim = c->dim;
    x->rec_bytes = c->record_bytes;
    x->row_floats = (int)tq_codec_query_floats(c);
    x->codec = c;
    x->block = c->cfg.split == TQ_SPLIT_BLOCK ? u->block : 0;
    for (int si = 0; si < u->n_seg; si++) {
        const segment *s = &u->seg[si];
        if (!s->cb) continue; /* PROD's 0-bit MSE part */
        x->seg[x->n_seg].start = s->start;
        x->seg[x->n_seg].count = s->count;
        x->seg[x->n_seg].bits = s->bits;
        x->seg[x->n_seg].off = s->byte_off;
        x->seg[x->n_seg].centroids = s->cb->centroids;
        x->n_seg++;
    }
    x->norm_off = u->norm_off;
    x->norm_f32 = c->cfg.norm_format == TQ_NORM_F32;
    x->prod = c->cfg.variant == TQ_VARIANT_PROD;
    x->sign_off = x->prod ? c->sign_off : 0;
    x->gamma_off = x->prod ? c->gamma_off : 0;
    /* Keys score against the prepared query (R q / √d), so rows carry n·C[idx] (codebooks are
     * ×√d); values accumulate the reconstruction n/√d·C[idx] in the codec's rotated basis. */
    x->inv_sqrt_dim = is_key ? 1.0f : u->inv_sqrt_dim;
    x->prod_scale = (float)(SQRT_HALF_PI / u->dim);
    return TQ_OK;
}

/* ---- norms ---- */

static tq_status store_norm(const tq_codec *c, uint8_t *p, float v) {
    if (c->cfg.norm_format == TQ_NORM_F32) {
        if (!isfinite(v)) return TQ_ERR_RANGE;
        tq_store_f32(p, v);
        return TQ_OK;
    }
    uint16_t h = tq_f32_to_f16(v);
    if ((h & 0x7C00u) == 0x7C00u) return TQ_ERR_RANGE;
    tq_store_u16(p, h);
    return TQ_OK;
}

static float load_norm(const tq_codec *c, const uint8_t *p) {
    return c->cfg.norm_format == TQ_NORM_F32 ? tq_load_f32(p) : tq_f16_to_f32(tq_load_u16(p));
}

/* Stored norms and γ are checked by the one rule: tq_record_norm_ok, tq_record_gamma_ok
 * (kernels/record.h). */

/* ---- small dense helpers (PROD sketch) ---- */

static void matvec(const float *m, int d, const float *x, float *y) {
    for (int i = 0; i < d; i++) {
        const float *row = m + (size_t)i * (size_t)d;
        float acc = 0.0f;
        for (int j = 0; j < d; j++) acc += row[j] * x[j];
        y[i] = acc;
    }
}

static void matvec_t_add(const float *m, int d, const float *x, float *y) {
    for (int i = 0; i < d; i++) {
        const float *row = m + (size_t)i * (size_t)d;
        float xi = x[i];
        for (int j = 0; j < d; j++) y[j] += row[j] * xi;
    }
}

static void permute_in(const tq_codec *c, const float *x, float *buf) {
    if (c->perm)
        for (int i = 0; i < c->dim; i++) buf[i] = x[c->perm[i]];
    else
        memcpy(buf, x, sizeof(float) * (size_t)c->dim);
}

static void permute_out(const tq_codec *c, const float *buf, float *x) {
    if (c->perm)
        for (int i = 0; i < c->dim; i++) x[c->perm[i]] = buf[i];
    else
        memcpy(x, buf, sizeof(float) * (size_t)c->dim);
}

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* ---- a unit's rotation (two blocks with TQ_SPLIT_BLOCK) ---- */

/* x = R x up to the factor *scale (tq_rotation_forward_raw), in place. */
static void unit_forward_raw(const unit *u, float *x, float *scale) {
    tq_rotation_forward_raw(u->rot, x, scale);
    if (!u->rot2) return;
    float s2;
    tq_rotation_forward_raw(u->rot2, x + u->block, &s2);
    if (s2 == *scale) return;
    for (int i = 0; i < u->block; i++) x[i] *= *scale;
    for (int i = u->block; i < u->dim; i++) x[i] *= s2;
    *scale = 1.0f;
}

static void unit_inverse(const unit *u, float *x) {
    tq_rotation_inverse(u->rot, x, x, 1);
    if (u->rot2) tq_rotation_inverse(u->rot2, x + u->block, x + u->block, 1);
}

/* ---- encode ---- */

static tq_status encode_one(const tq_codec *c, const tq_kernel_table *k, const float *x,
                            uint8_t *rec) {
    float buf[TQ_MAX_DIM];
    float norm[2];
    permute_in(c, x, buf);
    /* Check every unit before writing anything, so a failing vector leaves its record alone. */
    for (int ui = 0; ui < c->n_units; ui++) {
        const unit *u = &c->u[ui];
        float ss = k->sumsq(buf + u->offset, u->dim);
        if (!isfinite(ss)) return all_finite(buf + u->offset, u->dim) ? TQ_ERR_RANGE : TQ_ERR_NONFINITE;
        norm[ui] = sqrtf(ss);
        if (c->cfg.norm_format == TQ_NORM_F16 && norm[ui] > 65504.0f) return TQ_ERR_RANGE;
    }
    /* Every byte of the record is written below (segments, signs, norms): no memset. */
    for (int ui = 0; ui < c->n_units; ui++) {
        const unit *u = &c->u[ui];
        float *xu = buf + u->offset;
        float rs;
        unit_forward_raw(u, xu, &rs);
        float n = norm[ui];
        /* s = √d · (R x / n): one multiply from the raw rotation output. */
        float scale = n > 0.0f ? rs * u->sqrt_dim / n : 0.0f; /* float: no double divide per vector */
        float csq = 0.0f;
        for (int si = 0; si < u->n_seg; si++) {
            const segment *s = &u->seg[si];
            if (!s->cb) continue;
            csq += k->quantize_pack(xu + s->start, scale, s->count, s->bits, s->cb->boundaries,
                                    s->cb->centroids, rec + s->byte_off);
        }
        float stored = n;
        if (c->cfg.variant == TQ_VARIANT_PROD) {
            /* Algorithm 2: residual of the unit rotated vector, its norm γ and the signs of
             * S·r. With n = 0 the record decodes to 0 whatever the residual. */
            float y[TQ_MAX_DIM], chat[TQ_MAX_DIM], z[TQ_MAX_DIM];
            float ys = n > 0.0f ? (float)((double)rs / (double)n) : 0.0f;
            for (int i = 0; i < u->dim; i++) chat[i] = 0.0f;
            for (int si = 0; si < u->n_seg; si++) {
                const segment *s = &u->seg[si];
                if (s->cb)
                    k->unpack_lookup(rec + s->byte_off, s->count, s->bits, s->cb->centroids,
                                     u->inv_sqrt_dim, chat + s->start);
            }
            double g2 = 0.0;
            for (int i = 0; i < u->dim; i++) {
                y[i] = xu[i] * ys - chat[i];
                g2 += (double)y[i] * y[i];
            }
            matvec(c->sketch, u->dim, y, z);
            k->quantize_pack(z, 1.0f, u->dim, 1, sign_boundary, sign_centroids,
                             rec + c->sign_off);
            tq_status st = store_norm(c, rec + c->gamma_off, (float)sqrt(g2));
            if (st) return st;
        } else if (c->cfg.norm_correction && n > 0.0f && csq > 0.0f) {
            /* E‖c[idx]‖² = 1 − D, so store n/‖ĉ‖ and decoded norms equal n (doc/codec.md,
             * "Norm correction"). */
            stored = n * u->sqrt_dim / sqrtf(csq);
        }
        tq_status st = store_norm(c, rec + u->norm_off, stored);
        if (st) return st;
    }
    return TQ_OK;
}

tq_status tq_codec_encode(const tq_codec *c, const float *x, size_t n, void *codes,
                          size_t codes_capacity) {
    if (!c || (n && (!x || !codes))) return TQ_ERR_NULL;
    if (n > codes_capacity / c->record_bytes) return TQ_ERR_CAPACITY;
    const tq_kernel_table *k = tq_kernels();
    uint8_t *out = codes;
    for (size_t v = 0; v < n; v++) {
        tq_status st = encode_one(c, k, x + v * (size_t)c->dim, out + v * c->record_bytes);
        if (st) return st;
    }
    return TQ_OK;
}

/* ---- decode ---- */

/* Rotated-domain reconstruction of one record into buf (permuted layout), without the
 * inverse rotation. Returns 0 for a corrupt norm (buf then zero). */
static int decode_rotated(const tq_codec *c, const tq_kernel_table *k, const uint8_t *rec,
                          float *buf) {
    int ok = 1;
    for (int ui = 0; ui < c->n_units; ui++) {
        const unit *u = &c->u[ui];
        float n = load_norm(c, rec + u->norm_off);
        float *xu = buf + u->offset;
        if (!tq_record_norm_ok(n)) {
            memset(xu, 0, sizeof(float) * (size_t)u->dim);
            ok = 0;
            continue;
        }
        for (int si = 0; si < u->n_seg; si++) {
            const segment *s = &u->seg[si];
            if (s->cb)
                k->unpack_lookup(rec + s->byte_off, s->count, s->bits, s->cb->centroids,
                                 n * u->inv_sqrt_dim, xu + s->start);
            else
                memset(xu + s->start, 0, sizeof(float) * (size_t)s->count);
        }
        if (c->cfg.variant == TQ_VARIANT_PROD) {
            float g = load_norm(c, rec + c->gamma_off);
            if (!tq_record_gamma_ok(g)) {
                memset(xu, 0, sizeof(float) * (size_t)u->dim);
                ok = 0;
                continue;
            }
            float sg[TQ_MAX_DIM];
            float w = (float)(SQRT_HALF_PI / u->dim) * g * n;
            for (int i = 0; i < u->dim; i++) sg[i] = 0.0f;
            k->axpy_codes(rec + c->sign_off, u->dim, 1, sign_centroids, w, sg);
            matvec_t_add(c->sketch, u->dim, sg, xu);
        }
    }
    return ok;
}

static void finish_rotated(const tq_codec *c, float *buf, float *out) {
    for (int ui = 0; ui < c->n_units; ui++) {
        const unit *u = &c->u[ui];
        unit_inverse(u, buf + u->offset);
    }
    permute_out(c, buf, out);
}

tq_status tq_codec_decode(const tq_codec *c, const void *codes, size_t n, float *x,
                          size_t x_capacity) {
    if (!c || (n && (!x || !codes))) return TQ_ERR_NULL;
    if (n > x_capacity / (size_t)c->dim) return TQ_ERR_CAPACITY;
    const tq_kernel_table *k = tq_kernels();
    const uint8_t *in = codes;
    tq_status st = TQ_OK;
    for (size_t v = 0; v < n; v++) {
        float buf[TQ_MAX_DIM];
        if (!decode_rotated(c, k, in + v * c->record_bytes, buf)) st = TQ_ERR_CORRUPT;
        finish_rotated(c, buf, x + v * (size_t)c->dim);
    }
    return st;
}

/* ---- scores and weighted sums in the rotated domain ---- */

size_t tq_codec_query_floats(const tq_codec *c) {
    if (!c) return 0;
    return (size_t)c->dim * (c->cfg.variant == TQ_VARIANT_PROD ? 2 : 1);
}

tq_status tq_codec_prepare_query(const tq_codec *c, const float *q, float *prepared,
                                 size_t capacity) {
    if (!c || !q || !prepared) return TQ_ERR_NULL;
    if (capacity < tq_codec_query_floats(c)) return TQ_ERR_CAPACITY;
    if (!all_finite(q, c->dim)) return TQ_ERR_NONFINITE;
    float buf[TQ_MAX_DIM];
    permute_in(c, q, buf);
    for (int ui = 0; ui < c->n_units; ui++) {
        const unit *u = &c->u[ui];
        float *qu = buf + u->offset;
        float rs;
        unit_forward_raw(u, qu, &rs);
        /* Codebooks are in s-units (×√d): fold 1/√d into the prepared query. */
        float f = rs * u->inv_sqrt_dim;
        for (int i = 0; i < u->dim; i++) prepared[u->offset + i] = qu[i] * f;
        if (c->cfg.variant == TQ_VARIANT_PROD) {
            for (int i = 0; i < u->dim; i++) qu[i] *= rs;
            matvec(c->sketch, u->dim, qu, prepared + c->dim);
        }
    }
    return TQ_OK;
}

tq_status tq_codec_scores(const tq_codec *c, const float *prepared, const void *codes, size_t n,
                          float *scores, size_t scores_capacity) {
    if (!c || (n && (!prepared || !codes || !scores))) return TQ_ERR_NULL;
    if (scores_capacity < n) return TQ_ERR_CAPACITY;
    const tq_kernel_table *k = tq_kernels();
    const uint8_t *in = codes;
    tq_status st = TQ_OK;
    for (size_t t = 0; t < n; t++) {
        const uint8_t *rec = in + t * c->record_bytes;
        double score = 0.0;
        for (int ui = 0; ui < c->n_units; ui++) {
            const unit *u = &c->u[ui];
            float nrm = load_norm(c, rec + u->norm_off);
            if (!tq_record_norm_ok(nrm)) {
                st = TQ_ERR_CORRUPT;
                continue;
            }
            float dot = 0.0f;
            for (int si = 0; si < u->n_seg; si++) {
                const segment *s = &u->seg[si];
                if (s->cb)
                    dot += k->dot_codes(rec + s->byte_off, s->count, s->bits, s->cb->centroids,
                                        prepared + u->offset + s->start);
            }
            if (c->cfg.variant == TQ_VARIANT_PROD) {
                float g = load_norm(c, rec + c->gamma_off);
                if (!tq_record_gamma_ok(g)) {
                    st = TQ_ERR_CORRUPT;
                    continue;
                }
                float sk = k->dot_codes(rec + c->sign_off, u->dim, 1, sign_centroids,
                                        prepared + c->dim);
                dot += (float)(SQRT_HALF_PI / u->dim) * g * sk;
            }
            score += (double)nrm * dot;
        }
        scores[t] = (float)score;
    }
    return st;
}

size_t tq_codec_accum_floats(const tq_codec *c) { return tq_codec_query_floats(c); }

tq_status tq_codec_accum_zero(const tq_codec *c, float *acc, size_t capacity) {
    if (!c || !acc) return TQ_ERR_NULL;
    size_t need = tq_codec_accum_floats(c);
    if (capacity < need) return TQ_ERR_CAPACITY;
    memset(acc, 0, sizeof(float) * need);
    return TQ_OK;
}

tq_status tq_codec_accumulate(const tq_codec *c, const void *codes, size_t n,
                              const float *weights, float *acc, size_t acc_capacity) {
    if (!c || (n && (!codes || !weights || !acc))) return TQ_ERR_NULL;
    if (n && acc_capacity < tq_codec_accum_floats(c)) return TQ_ERR_CAPACITY;
    const tq_kernel_table *k = tq_kernels();
    const uint8_t *in = codes;
    tq_status st = TQ_OK;
    for (size_t t = 0; t < n; t++) {
        const uint8_t *rec = in + t * c->record_bytes;
        for (int ui = 0; ui < c->n_units; ui++) {
            const unit *u = &c->u[ui];
            float nrm = load_norm(c, rec + u->norm_off);
            if (!tq_record_norm_ok(nrm)) {
                st = TQ_ERR_CORRUPT;
                continue;
            }
            float w = weights[t] * nrm;
            for (int si = 0; si < u->n_seg; si++) {
                const segment *s = &u->seg[si];
                if (s->cb)
                    k->axpy_codes(rec + s->byte_off, s->count, s->bits, s->cb->centroids,
                                  w * u->inv_sqrt_dim, acc + u->offset + s->start);
            }
            if (c->cfg.variant == TQ_VARIANT_PROD) {
                float g = load_norm(c, rec + c->gamma_off);
                if (!tq_record_gamma_ok(g)) {
                    st = TQ_ERR_CORRUPT;
                    continue;
                }
                k->axpy_codes(rec + c->sign_off, u->dim, 1, sign_centroids,
                              (float)(SQRT_HALF_PI / u->dim) * g * w, acc + c->dim);
            }
        }
    }
    return st;
}

tq_status tq_codec_accum_finish(const tq_codec *c, float *acc, size_t acc_capacity, float *out,
                                size_t out_capacity) {
    if (!c || !acc || !out) return TQ_ERR_NULL;
    if (acc_capacity < tq_codec_accum_floats(c) || out_capacity < (size_t)c->dim)
        return TQ_ERR_CAPACITY;
    if (c->cfg.variant == TQ_VARIANT_PROD) matvec_t_add(c->sketch, c->dim, acc + c->dim, acc);
    finish_rotated(c, acc, out);
    return TQ_OK;
}

tq_status tq_codec_weighted_sum(const tq_codec *c, const void *codes, size_t n,
                                const float *weights, float *out, size_t out_capacity) {
    float acc[2 * TQ_MAX_DIM];
    tq_status st = tq_codec_accum_zero(c, acc, 2 * TQ_MAX_DIM);
    if (st) return st;
    if (!out) return TQ_ERR_NULL;
    if (out_capacity < (size_t)c->dim) return TQ_ERR_CAPACITY;
    tq_status acc_st = tq_codec_accumulate(c, codes, n, weights, acc, 2 * TQ_MAX_DIM);
    if (acc_st && acc_st != TQ_ERR_CORRUPT) return acc_st;
    st = tq_codec_accum_finish(c, acc, 2 * TQ_MAX_DIM, out, out_capacity);
    return st ? st : acc_st;
}

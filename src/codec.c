/*
 * TurboQuant codecs (paper Algorithms 1 and 2; doc/codec.md): the configuration, the record
 * layout (doc/format.md) and its description for the kernels and the cache, create and free.
 * Encoding, decoding, scores and sums are in codec_coding.c; the codec object in
 * codec_internal.h.
 */
#include <math.h>
#include <stdlib.h>

#include "codec_internal.h"
#include "codec_record.h"
#include "internal.h"
#include "kernels/kernels.h"
#include "kernels/trellis.h"
#include "trellis_tables.h"

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
    if (cfg->norm_correction < 0 || cfg->norm_correction > TQ_NORM_CORRECTION_HALF)
        return TQ_ERR_INVALID;
    if (cfg->variant == TQ_VARIANT_PROD && cfg->norm_correction) return TQ_ERR_INVALID;
    if (cfg->variant == TQ_VARIANT_PROD && cfg->split != TQ_SPLIT_FIXED) return TQ_ERR_INVALID;
    if (cfg->trellis < 0 || cfg->trellis > TQ_TRELLIS_TWO_STATE) return TQ_ERR_INVALID;
    if (cfg->trellis && cfg->variant != TQ_VARIANT_MSE) return TQ_ERR_INVALID;
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
            s->pairs = NULL;
            s->pair_memory = 0;
            if (cfg->trellis && s->bits >= TQ_TRELLIS_MIN_BITS && s->bits <= TQ_TRELLIS_MAX_BITS) {
                const int k = s->bits - TQ_TRELLIS_MIN_BITS;
                const tq_trellis_table *t =
                    cfg->trellis == TQ_TRELLIS_TWO_STATE ? &tq_trellis_tables_two_state[k] : &tq_trellis_tables[k];
                s->pairs = t->pairs;
                s->pair_memory = t->memory;
            }
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
        x->seg[x->n_seg].pairs = s->pairs;
        x->seg[x->n_seg].pair_memory = s->pair_memory;
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

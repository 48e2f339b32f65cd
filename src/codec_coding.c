/*
 * TurboQuant coding (paper Algorithms 1 and 2; doc/codec.md): encode, decode, and the
 * decode-free scores and weighted sums, on the records codec.c lays out. Quantization works in
 * s-units, s = √d·y for the rotated unit vector y, where the codebook lives; one multiply maps
 * the raw rotation output to s, so every kernel set sees the same floats and produces the same
 * indices.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "internal.h"
#include "kernels/kernels.h"
#include "kernels/record.h"
#include "kernels/trellis.h"

static const float sign_centroids[2] = {-1.0f, 1.0f};
static const float sign_boundary[1] = {0.0f};

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

/* ---- a segment's indices: Lloyd-Max (the kernel table) or trellis-coded (kernels/trellis.h) ---- */

static float seg_quantize_pack(const tq_kernel_table *k, const segment *s, const float *x,
                               float scale, uint8_t *out) {
    if (s->pairs) return k->trellis_quantize_pack(x, scale, s->count, s->bits, s->pairs, s->pair_memory, out);
    return k->quantize_pack(x, scale, s->count, s->bits, s->cb->boundaries, s->cb->centroids, out);
}

static void seg_unpack(const tq_kernel_table *k, const segment *s, const uint8_t *in,
                       float scale, float *out) {
    if (s->pairs)
        tq_trellis_unpack(in, s->count, s->bits, s->pairs, scale, out);
    else
        k->unpack_lookup(in, s->count, s->bits, s->cb->centroids, scale, out);
}

static float seg_dot(const tq_kernel_table *k, const segment *s, const uint8_t *in,
                     const float *q) {
    if (!s->pairs) return k->dot_codes(in, s->count, s->bits, s->cb->centroids, q);
    float v[TQ_MAX_DIM];
    tq_trellis_unpack(in, s->count, s->bits, s->pairs, 1.0f, v);
    double acc = 0.0;
    for (int i = 0; i < s->count; i++) acc += (double)q[i] * (double)v[i];
    return (float)acc;
}

static void seg_axpy(const tq_kernel_table *k, const segment *s, const uint8_t *in, float w,
                     float *acc) {
    if (!s->pairs) {
        k->axpy_codes(in, s->count, s->bits, s->cb->centroids, w, acc);
        return;
    }
    float v[TQ_MAX_DIM];
    tq_trellis_unpack(in, s->count, s->bits, s->pairs, w, v);
    for (int i = 0; i < s->count; i++) acc[i] += v[i];
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
            csq += seg_quantize_pack(k, s, xu + s->start, scale, rec + s->byte_off);
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
                if (s->cb) seg_unpack(k, s, rec + s->byte_off, u->inv_sqrt_dim, chat + s->start);
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
             * "Norm correction"); halfway (the geometric mean of n and that) with
             * TQ_NORM_CORRECTION_HALF. */
            stored = c->cfg.norm_correction == TQ_NORM_CORRECTION_HALF
                         ? n * sqrtf(u->sqrt_dim / sqrtf(csq))
                         : n * u->sqrt_dim / sqrtf(csq);
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
                seg_unpack(k, s, rec + s->byte_off, n * u->inv_sqrt_dim, xu + s->start);
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

tq_status tq_codec_gaussian_mse(const tq_codec *c, size_t n, uint64_t seed, double *mse) {
    if (!c || !mse) return TQ_ERR_NULL;
    if (n == 0 || n > ((size_t)1 << 20)) return TQ_ERR_INVALID;
    uint8_t *rec = malloc(c->record_bytes);
    if (rec == NULL) return TQ_ERR_NOMEM;
    tq_rng rng;
    tq_rng_seed(&rng, seed, 0);
    double sum = 0.0;
    tq_status st = TQ_OK;
    for (size_t v = 0; v < n && st == TQ_OK; v++) {
        float x[TQ_MAX_DIM], y[TQ_MAX_DIM];
        for (int i = 0; i < c->dim; i++) x[i] = (float)tq_rng_gauss(&rng);
        st = tq_codec_encode(c, x, 1, rec, c->record_bytes);
        if (st == TQ_OK) st = tq_codec_decode(c, rec, 1, y, (size_t)c->dim);
        for (int i = 0; i < c->dim && st == TQ_OK; i++) sum += (double)(x[i] - y[i]) * (x[i] - y[i]);
    }
    free(rec);
    /* Gaussian vectors are finite and their norms far inside fp16: an error here is a bug */
    if (st != TQ_OK) return st;
    *mse = sum / ((double)n * (double)c->dim);
    return TQ_OK;
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
                if (s->cb) dot += seg_dot(k, s, rec + s->byte_off, prepared + u->offset + s->start);
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
                    seg_axpy(k, s, rec + s->byte_off, w * u->inv_sqrt_dim, acc + u->offset + s->start);
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

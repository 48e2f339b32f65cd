/*
 * The record formats of the KV cache: the bytes per token of each format, the per-tensor layout
 * (tq_kv_tensor: a TurboQuant record's segments, norm and PROD parts, derived from
 * doc/format.md), the q8_0 / q4_0 encoders and the decoding of records to rows.
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "kernels/kernels.h"
#include "kvcache_internal.h"

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
    if (split) tq_key_split_codec(cc); /* the key transform's rule (key_transform.c) */
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
tq_status tq_kv_tensor_init(tq_kv_tensor *x, tq_kv_format f, int dim, float bits,
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

tq_status tq_kv_tensor_encode(const tq_kv_tensor *x, const float *v, uint8_t *rec) {
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
tq_status tq_kv_tensor_decode(const tq_kv_tensor *x, const uint8_t *rec, float *out) {
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

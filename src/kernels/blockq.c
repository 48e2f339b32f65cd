/*
 * The block formats (blockq.h): f16, q8_0, q4_0 sizes, encoders and reference decoders.
 */
#include "blockq.h"

#include <math.h>
#include <string.h>

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

tq_status tq_record_plain(tq_record *x, tq_kv_format f, int dim) {
    memset(x, 0, sizeof *x);
    if (dim < TQ_MIN_DIM || dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (f != TQ_KV_F16 && f != TQ_KV_Q8_0 && f != TQ_KV_Q4_0) return TQ_ERR_VARIANT;
    if (f != TQ_KV_F16 && dim % 16) return TQ_ERR_DIM;
    size_t full = (size_t)dim / TQ_KV_BLOCK, rest = (size_t)dim % TQ_KV_BLOCK;
    x->format = f;
    x->dim = dim;
    x->row_floats = dim;
    x->rec_bytes = f == TQ_KV_F16    ? 2 * (size_t)dim
                   : f == TQ_KV_Q8_0 ? full * (2 + 32) + (rest ? 2 + rest : 0)
                                     : full * (2 + 16) + (rest ? 2 + rest / 2 : 0);
    return TQ_OK;
}

/* ggml's q8_0 / q4_0 rounding. */
static void encode_q8_0(const float *x, int dim, uint8_t *rec) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        put_u16(rec, tq_f32_to_f16(d));
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
        put_u16(rec, tq_f32_to_f16(d));
        for (int i = 0; i < h; i++) {
            int a = (int)(x[b + i] * id + 8.5f), c = (int)(x[b + h + i] * id + 8.5f);
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            c = c < 0 ? 0 : c > 15 ? 15 : c;
            rec[2 + i] = (uint8_t)(a | (c << 4));
        }
        rec += 2 + h;
    }
}

void tq_blockq_encode(const tq_record *x, const float *v, uint8_t *rec) {
    switch (x->format) {
    case TQ_KV_F16:
        for (int i = 0; i < x->dim; i++) {
            uint16_t h = tq_f32_to_f16(v[i]);
            memcpy(rec + 2 * i, &h, 2); /* native order, as the raw part */
        }
        return;
    case TQ_KV_Q8_0: encode_q8_0(v, x->dim, rec); return;
    case TQ_KV_Q4_0: encode_q4_0(v, x->dim, rec); return;
    case TQ_KV_TURBO: /* not block formats (a rotated tensor's records are Q8_0 / Q4_0) */
    case TQ_KV_Q8_0R:
    case TQ_KV_Q4_0R: return;
    }
}

void tq_blockq_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        float d = tq_f16_to_f32(get_u16(rec));
        for (int i = 0; i < n; i++) out[b + i] = d * (float)(int8_t)rec[2 + i];
        rec += 2 + n;
    }
}

void tq_blockq_q4_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        int h = n / 2;
        float d = tq_f16_to_f32(get_u16(rec));
        for (int i = 0; i < h; i++) {
            out[b + i] = d * (float)((rec[2 + i] & 15) - 8);
            out[b + h + i] = d * (float)((rec[2 + i] >> 4) - 8);
        }
        rec += 2 + h;
    }
}

void tq_blockq_decode(const tq_record *x, const uint8_t *rec, float *out) {
    switch (x->format) {
    case TQ_KV_F16:
        for (int i = 0; i < x->dim; i++) {
            uint16_t h;
            memcpy(&h, rec + 2 * i, 2);
            out[i] = tq_f16_to_f32(h);
        }
        return;
    case TQ_KV_Q8_0: tq_blockq_q8_0_decode(rec, x->dim, out); return;
    case TQ_KV_Q4_0: tq_blockq_q4_0_decode(rec, x->dim, out); return;
    case TQ_KV_TURBO: /* not block formats (a rotated tensor's records are Q8_0 / Q4_0) */
    case TQ_KV_Q8_0R:
    case TQ_KV_Q4_0R: return;
    }
}

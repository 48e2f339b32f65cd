/*
 * Attention kernels: scalar reference and the runtime dispatch of their table
 * (kvcache_internal.h). The table follows the codec kernel set in use (tq_kernels()), so
 * TQ_FORCE_REF=1 and tq_set_kernels() switch both at once. With the AVX-512 set, decode scores
 * and value sums run in integers where the CPU has VBMI and VNNI (attn_vnni.c) unless
 * TQ_INT8_SCORES=0.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kvcache_internal.h"
#include "kernels.h"

static void ref_dot_multi(const float *k, const float *q, size_t q_stride, int nq, int n,
                          float *out) {
    for (int j = 0; j < nq; j++) {
        const float *qj = q + (size_t)j * q_stride;
        double acc = 0.0;
        for (int i = 0; i < n; i++) acc += (double)qj[i] * (double)k[i];
        out[j] = (float)acc;
    }
}

static void ref_accum_rows(float *acc, const float *p, const float *rows, size_t stride, int nk,
                           int n) {
    for (int t = 0; t < nk; t++) {
        const float *r = rows + (size_t)t * stride;
        for (int i = 0; i < n; i++) acc[i] += p[t] * r[i];
    }
}

static float ref_exp_sum(float *s, int n, float m) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    return sum;
}

static void ref_scale(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

static float ref_shift_scale_max(float *s, int n, float add, float scale) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) {
        s[i] = (s[i] + add) * scale;
        m = s[i] > m ? s[i] : m;
    }
    return m;
}

static void ref_f16_to_f32(const uint16_t *in, float *out, int n) {
    for (int i = 0; i < n; i++) out[i] = tq_f16_to_f32(in[i]);
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void ref_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        float d = tq_f16_to_f32(load_u16(rec));
        for (int i = 0; i < n; i++) out[b + i] = d * (float)(int8_t)rec[2 + i];
        rec += 2 + n;
    }
}

static void ref_q4_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        int h = n / 2;
        float d = tq_f16_to_f32(load_u16(rec));
        for (int i = 0; i < h; i++) {
            out[b + i] = d * (float)((rec[2 + i] & 15) - 8);
            out[b + h + i] = d * (float)((rec[2 + i] >> 4) - 8);
        }
        rec += 2 + h;
    }
}

/* The scale of a TURBO record's row: norm·inv_sqrt_dim, or -1 for a corrupt norm. */
static float ref_row_scale(const tq_kv_tensor *x, const uint8_t *r) {
    float n;
    if (x->norm_f32) {
        uint32_t u = (uint32_t)r[x->norm_off] | (uint32_t)r[x->norm_off + 1] << 8 |
                     (uint32_t)r[x->norm_off + 2] << 16 | (uint32_t)r[x->norm_off + 3] << 24;
        memcpy(&n, &u, 4);
    } else {
        n = tq_f16_to_f32(load_u16(r + x->norm_off));
    }
    return isfinite(n) && n >= 0.0f ? n * x->inv_sqrt_dim : -1.0f;
}

static int ref_score_turbo(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *q,
                           size_t q_stride, int nq, float *S, size_t s_stride) {
    int ok = 1;
    for (int t = 0; t < nk; t++) {
        const uint8_t *r = rec + (size_t)t * x->rec_bytes;
        float sc = ref_row_scale(x, r);
        if (sc < 0.0f) ok = 0;
        for (int j = 0; j < nq; j++) {
            const float *qj = q + (size_t)j * q_stride;
            double acc = 0.0;
            for (int s = 0; s < x->n_seg; s++)
                for (int i = 0; i < x->seg[s].count; i++)
                    acc += (double)qj[x->seg[s].start + i] *
                           x->seg[s].centroids[tq_ref_get_index(r + x->seg[s].off, (size_t)i,
                                                                x->seg[s].bits)];
            S[(size_t)j * s_stride + (size_t)t] = sc < 0.0f ? 0.0f : (float)(acc * sc);
        }
    }
    return ok;
}

static int ref_accum_turbo(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *p,
                           size_t p_stride, int nq, float *acc, size_t acc_stride) {
    int ok = 1;
    for (int t = 0; t < nk; t++) {
        const uint8_t *r = rec + (size_t)t * x->rec_bytes;
        float sc = ref_row_scale(x, r);
        if (sc < 0.0f) {
            ok = 0;
            continue;
        }
        for (int j = 0; j < nq; j++) {
            float w = p[(size_t)j * p_stride + (size_t)t] * sc;
            float *a = acc + (size_t)j * acc_stride;
            for (int s = 0; s < x->n_seg; s++)
                for (int i = 0; i < x->seg[s].count; i++)
                    a[x->seg[s].start + i] +=
                        w * x->seg[s].centroids[tq_ref_get_index(r + x->seg[s].off, (size_t)i,
                                                                 x->seg[s].bits)];
        }
    }
    return ok;
}

static void ref_score_f16(const uint16_t *rows, size_t row_stride, int nk, int dim,
                          const float *q, size_t q_stride, int nq, float *S, size_t s_stride) {
    for (int t = 0; t < nk; t++) {
        const uint16_t *r = rows + (size_t)t * row_stride;
        for (int j = 0; j < nq; j++) {
            const float *qj = q + (size_t)j * q_stride;
            double acc = 0.0;
            for (int i = 0; i < dim; i++) acc += (double)qj[i] * tq_f16_to_f32(r[i]);
            S[(size_t)j * s_stride + (size_t)t] = (float)acc;
        }
    }
}

static void ref_accum_f16(const uint16_t *rows, size_t row_stride, int nk, int dim,
                          const float *p, size_t p_stride, int nq, float *acc,
                          size_t acc_stride) {
    for (int t = 0; t < nk; t++) {
        const uint16_t *r = rows + (size_t)t * row_stride;
        for (int j = 0; j < nq; j++) {
            float w = p[(size_t)j * p_stride + (size_t)t];
            float *a = acc + (size_t)j * acc_stride;
            for (int i = 0; i < dim; i++) a[i] += w * tq_f16_to_f32(r[i]);
        }
    }
}

static const tq_attn_kernels ref_table = {
    .name = "ref",
    .dot_multi = ref_dot_multi,
    .accum_rows = ref_accum_rows,
    .exp_sum = ref_exp_sum,
    .scale = ref_scale,
    .shift_scale_max = ref_shift_scale_max,
    .f16_to_f32 = ref_f16_to_f32,
    .q8_0_decode = ref_q8_0_decode,
    .q4_0_decode = ref_q4_0_decode,
    .score_turbo = ref_score_turbo,
    .accum_turbo = ref_accum_turbo,
    .score_f16 = ref_score_f16,
    .accum_f16 = ref_accum_f16,
};

const tq_attn_kernels *tq_attn_kernels_ref(void) { return &ref_table; }

static atomic_int int8_scores = 1;
static pthread_once_t int8_once = PTHREAD_ONCE_INIT;

static void int8_init(void) {
    const char *e = getenv("TQ_INT8_SCORES");
    atomic_store(&int8_scores, !(e && strcmp(e, "0") == 0));
}

void tq_attn_set_int8_scores(int on) {
    pthread_once(&int8_once, int8_init);
    atomic_store(&int8_scores, on != 0);
}

const tq_attn_kernels *tq_attn_kernels_get(void) {
    const char *name = tq_kernels()->name;
    const tq_attn_kernels *t = NULL;
    pthread_once(&int8_once, int8_init);
    if (strcmp(name, "avx512") == 0 && atomic_load(&int8_scores)) t = tq_attn_kernels_avx512_vnni();
    if (!t && strcmp(name, "avx512") == 0) t = tq_attn_kernels_avx512();
    if (!t && (strcmp(name, "avx512") == 0 || strcmp(name, "avx2") == 0))
        t = tq_attn_kernels_avx2();
    return t ? t : &ref_table;
}

const char *tq_attn_kernels_name(void) { return tq_attn_kernels_get()->name; }

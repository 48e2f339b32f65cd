/*
 * Attention kernels: scalar reference and the runtime dispatch of their table
 * (kvcache_internal.h). The table follows the codec kernel set in use (tq_kernels()), so
 * TQ_FORCE_REF=1 and tq_set_kernels() switch both at once.
 */
#include <math.h>
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

static const tq_attn_kernels ref_table = {
    .name = "ref",
    .dot_multi = ref_dot_multi,
    .accum_rows = ref_accum_rows,
    .exp_sum = ref_exp_sum,
    .scale = ref_scale,
    .f16_to_f32 = ref_f16_to_f32,
    .q8_0_decode = ref_q8_0_decode,
    .q4_0_decode = ref_q4_0_decode,
};

const tq_attn_kernels *tq_attn_kernels_ref(void) { return &ref_table; }

const tq_attn_kernels *tq_attn_kernels_get(void) {
    const char *name = tq_kernels()->name;
    const tq_attn_kernels *t = NULL;
    if (strcmp(name, "avx512") == 0) t = tq_attn_kernels_avx512();
    if (!t && (strcmp(name, "avx512") == 0 || strcmp(name, "avx2") == 0))
        t = tq_attn_kernels_avx2();
    return t ? t : &ref_table;
}

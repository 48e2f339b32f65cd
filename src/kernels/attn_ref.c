/*
 * Attention kernels: the scalar reference table (attn_kernels.h; dispatch.c chooses it or a
 * SIMD table together with the codec table).
 */
#include <math.h>
#include <string.h>

#include "attn_kernels.h"
#include "blockq.h"

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

static void ref_score_panels(const float *kp, int nk, int n, const float *q, size_t q_stride_i, int G,
                             size_t q_stride_g, int ni, float *S, size_t s_stride) {
    const int nk16 = (nk + 15) / 16 * 16;
    for (int r = 0; r < ni * G; r++) {
        const float *qr = q + (size_t)(r / G) * q_stride_i + (size_t)(r % G) * q_stride_g;
        for (int t = 0; t < nk16; t++) {
            const float *k = kp + (size_t)(t / 16) * 16 * (size_t)n + t % 16;
            float a = 0.0f;
            for (int d = 0; d < n; d++) a = fmaf(qr[d], k[16 * d], a);
            S[(size_t)r * s_stride + (size_t)t] = a;
        }
    }
}

static void ref_accum_multi(float *acc, size_t acc_stride, const float *p, size_t p_stride, int nr,
                            const float *rows, size_t stride, int nk, int n) {
    for (int r = 0; r < nr; r++) ref_accum_rows(acc + (size_t)r * acc_stride, p + (size_t)r * p_stride, rows, stride, nk, n);
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

/* A step of a chain waits for the one before it (a multiply-add's latency), so up to four rows
 * — the same positions, the same chain starts — advance together, each chain's last value in a
 * register. */
static void ref_chain_scan(float *s, size_t stride, int nr, int n, int phase, int chain, float rho) {
    for (int g0 = 0; g0 < nr; g0 += 4) {
        float *r0 = s + (size_t)g0 * stride;
        const int w1 = g0 + 1 < nr, w2 = g0 + 2 < nr, w3 = g0 + 3 < nr;
        float *r1 = w1 ? r0 + stride : r0, *r2 = w2 ? r0 + 2 * stride : r0,
              *r3 = w3 ? r0 + 3 * stride : r0; /* absent rows: row g0's values, never written */
        float a0 = n ? r0[0] : 0.0f, a1 = n ? r1[0] : 0.0f, a2 = n ? r2[0] : 0.0f, a3 = n ? r3[0] : 0.0f;
        for (int i = 1; i < n; i++) {
            if ((phase + i) % chain == 0) {
                a0 = r0[i], a1 = r1[i], a2 = r2[i], a3 = r3[i];
                continue;
            }
            a0 = r0[i] + rho * a0;
            a1 = r1[i] + rho * a1;
            a2 = r2[i] + rho * a2;
            a3 = r3[i] + rho * a3;
            r0[i] = a0;
            if (w1) r1[i] = a1;
            if (w2) r2[i] = a2;
            if (w3) r3[i] = a3;
        }
    }
}

static void ref_f16_to_f32(const uint16_t *in, float *out, int n) {
    for (int i = 0; i < n; i++) out[i] = tq_f16_to_f32(in[i]);
}

/* The scale of a TURBO record's row: norm·inv_sqrt_dim, or -1 for a corrupt norm. */
static float ref_row_scale(const tq_record *x, const uint8_t *r) {
    float n = tq_record_load_norm(x, r + x->norm_off);
    return tq_record_norm_ok(n) ? n * x->inv_sqrt_dim : -1.0f;
}

static int ref_score_turbo(const tq_record *x, const uint8_t *rec, int nk, const float *q,
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

static int ref_accum_turbo(const tq_record *x, const uint8_t *rec, int nk, const float *p,
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
    .score_panels = ref_score_panels,
    .accum_multi = ref_accum_multi,
    .exp_sum = ref_exp_sum,
    .scale = ref_scale,
    .shift_scale_max = ref_shift_scale_max,
    .chain_scan = ref_chain_scan,
    .f16_to_f32 = ref_f16_to_f32,
    .q8_0_decode = tq_blockq_q8_0_decode,
    .q4_0_decode = tq_blockq_q4_0_decode,
    .score_turbo = ref_score_turbo,
    .accum_turbo = ref_accum_turbo,
    .score_f16 = ref_score_f16,
    .accum_f16 = ref_accum_f16,
};

const tq_attn_kernels *tq_attn_kernels_ref(void) { return &ref_table; }

/*
 * AVX2 + FMA attention kernels (kvcache_internal.h); ground truth in attn_ref.c. Compiled with
 * -mavx2 -mfma -mf16c.
 */
#include "../kvcache_internal.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

static inline __m256i lanes_below(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void avx2_dot_multi(const float *k, const float *q, size_t q_stride, int nq, int n,
                           float *out) {
    int j = 0;
    for (; j + 4 <= nq; j += 4) {
        const float *q0 = q + (size_t)j * q_stride, *q1 = q0 + q_stride, *q2 = q1 + q_stride,
                    *q3 = q2 + q_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 kv = _mm256_loadu_ps(k + i);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), kv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + i), kv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + i), kv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + i), kv, a3);
        }
        float r0 = hsum8(a0), r1 = hsum8(a1), r2 = hsum8(a2), r3 = hsum8(a3);
        for (; i < n; i++) {
            r0 += q0[i] * k[i];
            r1 += q1[i] * k[i];
            r2 += q2[i] * k[i];
            r3 += q3[i] * k[i];
        }
        out[j] = r0, out[j + 1] = r1, out[j + 2] = r2, out[j + 3] = r3;
    }
    for (; j < nq; j++) {
        const float *qj = q + (size_t)j * q_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i + 8), _mm256_loadu_ps(k + i + 8), a1);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i), _mm256_loadu_ps(k + i), a0);
        float r = hsum8(_mm256_add_ps(a0, a1));
        for (; i < n; i++) r += qj[i] * k[i];
        out[j] = r;
    }
}

static void avx2_accum_rows(float *acc, const float *p, const float *rows, size_t stride, int nk,
                            int n) {
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8),
               a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride) {
            __m256 w = _mm256_broadcast_ss(p + t);
            a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + i);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + t), _mm256_loadu_ps(r), a0);
        _mm256_storeu_ps(acc + i, a0);
    }
    for (; i < n; i++) {
        float a = acc[i];
        for (int t = 0; t < nk; t++) a += p[t] * rows[(size_t)t * stride + i];
        acc[i] = a;
    }
}

/* exp(x) for x ≤ 0, as in attn_avx512.c; 2^k built in the exponent bits. */
static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 y = _mm256_set1_ps(1.0f / 720.0f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static float avx2_exp_sum(float *s, int n, float m) {
    __m256 vm = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        __m256i mk = lanes_below(n - i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_maskload_ps(s + i, mk), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(s + i, mk, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
}

static void avx2_scale(float *y, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), va));
    for (; i < n; i++) y[i] *= a;
}

static void avx2_f16_to_f32(const uint16_t *in, float *out, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
}

static inline float load_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static void avx2_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        __m256 d = _mm256_set1_ps(load_scale(rec));
        for (int i = 0; i < n; i += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(rec + 2 + i));
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
            _mm256_storeu_ps(out + b + i, _mm256_mul_ps(d, f));
        }
        rec += 2 + n;
    }
}

static void avx2_q4_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        int h = n / 2;
        __m256 d = _mm256_set1_ps(load_scale(rec));
        for (int i = 0; i < h; i += 8) {
            __m128i qs = _mm_loadl_epi64((const __m128i *)(rec + 2 + i));
            __m256i w = _mm256_cvtepu8_epi32(qs);
            __m256i lo = _mm256_sub_epi32(_mm256_and_si256(w, _mm256_set1_epi32(15)), _mm256_set1_epi32(8));
            __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(w, 4), _mm256_set1_epi32(8));
            _mm256_storeu_ps(out + b + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
            _mm256_storeu_ps(out + b + h + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
        }
        rec += 2 + h;
    }
}

static const tq_attn_kernels avx2_table = {
    .name = "avx2",
    .dot_multi = avx2_dot_multi,
    .accum_rows = avx2_accum_rows,
    .exp_sum = avx2_exp_sum,
    .scale = avx2_scale,
    .f16_to_f32 = avx2_f16_to_f32,
    .q8_0_decode = avx2_q8_0_decode,
    .q4_0_decode = avx2_q4_0_decode,
};

const tq_attn_kernels *tq_attn_kernels_avx2(void) { return &avx2_table; }

#else

const tq_attn_kernels *tq_attn_kernels_avx2(void) { return NULL; }

#endif

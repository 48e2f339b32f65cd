/*
 * AVX-512 attention kernels (kvcache_internal.h); ground truth in attn_ref.c. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c.
 */
#include "../kvcache_internal.h"

#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>
#include <string.h>

static inline __mmask16 tail_mask(int r) { return r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u); }

static void avx512_dot_multi(const float *k, const float *q, size_t q_stride, int nq, int n,
                             float *out) {
    int j = 0;
    for (; j + 4 <= nq; j += 4) {
        const float *q0 = q + (size_t)j * q_stride, *q1 = q0 + q_stride, *q2 = q1 + q_stride,
                    *q3 = q2 + q_stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 16 <= n; i += 16) {
            __m512 kv = _mm512_loadu_ps(k + i);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + i), kv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + i), kv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q2 + i), kv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q3 + i), kv, a3);
        }
        if (i < n) {
            __mmask16 m = tail_mask(n - i);
            __m512 kv = _mm512_maskz_loadu_ps(m, k + i);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q0 + i), kv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q1 + i), kv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q2 + i), kv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q3 + i), kv, a3);
        }
        out[j] = _mm512_reduce_add_ps(a0);
        out[j + 1] = _mm512_reduce_add_ps(a1);
        out[j + 2] = _mm512_reduce_add_ps(a2);
        out[j + 3] = _mm512_reduce_add_ps(a3);
    }
    for (; j < nq; j++) {
        const float *qj = q + (size_t)j * q_stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qj + i), _mm512_loadu_ps(k + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(qj + i + 16), _mm512_loadu_ps(k + i + 16), a1);
        }
        for (; i < n; i += 16) {
            __mmask16 m = tail_mask(n - i);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, qj + i), _mm512_maskz_loadu_ps(m, k + i), a0);
        }
        out[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

static void avx512_accum_rows(float *acc, const float *p, const float *rows, size_t stride,
                              int nk, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16),
               a2 = _mm512_loadu_ps(acc + i + 32), a3 = _mm512_loadu_ps(acc + i + 48);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride) {
            __m512 w = _mm512_set1_ps(p[t]);
            a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(r), a0);
            a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(r + 16), a1);
            a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(r + 32), a2);
            a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(r + 48), a3);
        }
        _mm512_storeu_ps(acc + i, a0);
        _mm512_storeu_ps(acc + i + 16, a1);
        _mm512_storeu_ps(acc + i + 32, a2);
        _mm512_storeu_ps(acc + i + 48, a3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 a0 = _mm512_maskz_loadu_ps(m, acc + i);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[t]), _mm512_maskz_loadu_ps(m, r), a0);
        _mm512_mask_storeu_ps(acc + i, m, a0);
    }
}

/* exp(x) for x ≤ 0: x = k·ln2 + r, |r| ≤ ln2/2, degree-6 Taylor of e^r, times 2^k. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 y = _mm512_set1_ps(1.0f / 720.0f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, k);
}

static float avx512_exp_sum(float *s, int n, float m) {
    __m512 vm = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = tail_mask(n - i);
        __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + i), vm);
        __m512 e = exp512(x);
        e = _mm512_maskz_mov_ps(mk, e);
        _mm512_mask_storeu_ps(s + i, mk, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

static void avx512_scale(float *y, float a, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + i), va));
    }
}

static void avx512_f16_to_f32(const uint16_t *in, float *out, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i))));
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
}

static inline float load_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static void avx512_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        __m512 d = _mm512_set1_ps(load_scale(rec));
        for (int i = 0; i < n; i += 16) {
            __m128i q8 = _mm_loadu_si128((const __m128i *)(rec + 2 + i));
            __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8));
            _mm512_storeu_ps(out + b + i, _mm512_mul_ps(d, f));
        }
        rec += 2 + n;
    }
}

static void avx512_q4_0_decode(const uint8_t *rec, int dim, float *out) {
    const __m128i lo_mask = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        __m512 d = _mm512_set1_ps(load_scale(rec));
        if (n == TQ_KV_BLOCK) {
            __m128i qs = _mm_loadu_si128((const __m128i *)(rec + 2));
            __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, lo_mask), eight);
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), lo_mask), eight);
            _mm512_storeu_ps(out + b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            _mm512_storeu_ps(out + b + 16,
                             _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
        } else {
            float dd = load_scale(rec);
            int h = n / 2;
            for (int i = 0; i < h; i++) {
                out[b + i] = dd * (float)((rec[2 + i] & 15) - 8);
                out[b + h + i] = dd * (float)((rec[2 + i] >> 4) - 8);
            }
        }
        rec += 2 + n / 2;
    }
}

static const tq_attn_kernels avx512_table = {
    .name = "avx512",
    .dot_multi = avx512_dot_multi,
    .accum_rows = avx512_accum_rows,
    .exp_sum = avx512_exp_sum,
    .scale = avx512_scale,
    .f16_to_f32 = avx512_f16_to_f32,
    .q8_0_decode = avx512_q8_0_decode,
    .q4_0_decode = avx512_q4_0_decode,
};

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return &avx512_table; }

#else

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return NULL; }

#endif

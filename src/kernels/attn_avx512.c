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
        /* Four horizontal sums at once: interleave pairs, then 128-bit lanes hold (a,b,c,d). */
        __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
        __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
        __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
        __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
        __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
        _mm_storeu_ps(out + j, h4);
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

/* n ≤ 8 little-endian bytes without reading past them. */
static inline uint64_t load_bytes(const uint8_t *p, int n) {
    uint32_t a = 0;
    uint16_t b = 0;
    uint64_t c;
    switch (n) {
    case 8: memcpy(&c, p, 8); return c;
    case 6: memcpy(&a, p, 4), memcpy(&b, p + 4, 2); return a | (uint64_t)b << 32;
    case 4: memcpy(&a, p, 4); return a;
    default: memcpy(&b, p, 2); return b;
    }
}

/* 16 indices of B ≤ 4 bits fill 2B bytes, starting on a byte. Lane i needs bits
 * [B·i, B·i + B): vpermw builds each 32-bit lane from 16-bit words w, w + 1 with
 * w = ⌊B·i/16⌋, then a variable shift by B·i mod 16 and a mask give the index, and vpermps
 * looks it up among the ≤ 16 centroids held in one register. */
static const uint16_t perm_1[32] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
static const uint32_t shift_1[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint16_t perm_2[32] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
static const uint32_t shift_2[16] = {0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14};
static const uint16_t perm_3[32] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3};
static const uint32_t shift_3[16] = {0, 3, 6, 9, 12, 15, 2, 5, 8, 11, 14, 1, 4, 7, 10, 13};
static const uint16_t perm_4[32] = {0, 1, 0, 1, 0, 1, 0, 1, 1, 2, 1, 2, 1, 2, 1, 2, 2, 3, 2, 3, 2, 3, 2, 3, 3, 4, 3, 4, 3, 4, 3, 4};
static const uint32_t shift_4[16] = {0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12};

#define UNPACK_B(B)                                                                        \
    static void unpack_##B(const uint8_t *in, int n, const float *centroids, float scale, \
                           float *out) {                                                   \
        __m512 cv = _mm512_maskz_loadu_ps((__mmask16)((1u << (1u << B)) - 1u), centroids); \
        __m512 vs = _mm512_set1_ps(scale);                                                 \
        const __m512i perm = _mm512_loadu_si512(perm_##B);                                 \
        const __m512i shift = _mm512_loadu_si512(shift_##B);                               \
        const __m512i mask = _mm512_set1_epi32((1 << B) - 1);                              \
        int i = 0;                                                                         \
        for (; i + 16 <= n; i += 16) {                                                     \
            uint64_t w = load_bytes(in + (size_t)i / 8 * B, 2 * B);                        \
            __m512i v = _mm512_zextsi128_si512(_mm_cvtsi64_si128((long long)w));           \
            __m512i idx = _mm512_and_si512(                                                \
                _mm512_srlv_epi32(_mm512_permutexvar_epi16(perm, v), shift), mask);        \
            _mm512_storeu_ps(out + i, _mm512_mul_ps(vs, _mm512_permutexvar_ps(idx, cv)));  \
        }                                                                                  \
        for (; i < n; i++) {                                                               \
            size_t pos = (size_t)i * B;                                                    \
            uint32_t x = in[pos >> 3];                                                     \
            if ((pos & 7) + B > 8) x |= (uint32_t)in[(pos >> 3) + 1] << 8;                 \
            out[i] = scale * centroids[(x >> (pos & 7)) & ((1u << B) - 1)];                \
        }                                                                                  \
    }
UNPACK_B(1)
UNPACK_B(2)
UNPACK_B(3)
UNPACK_B(4)

static void avx512_unpack_small(const uint8_t *in, int n, int bits, const float *centroids,
                                float scale, float *out) {
    switch (bits) {
    case 1: unpack_1(in, n, centroids, scale, out); break;
    case 2: unpack_2(in, n, centroids, scale, out); break;
    case 3: unpack_3(in, n, centroids, scale, out); break;
    default: unpack_4(in, n, centroids, scale, out); break;
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
    .unpack_small = avx512_unpack_small,
};

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return &avx512_table; }

#else

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return NULL; }

#endif

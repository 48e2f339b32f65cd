/*
 * AVX-512 attention kernels (attn_kernels.h); ground truth in attn_ref.c. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c.
 */
#include "attn_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn_simd.h"

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

/* score_panels: R (≤ 8) query rows against one or two panels of 16 keys: 16 accumulators, per
 * element d two panel loads, R broadcasts and 2R multiply-adds; each lane a chain of fmas over
 * d in order (as the reference's fmaf). */
static inline __attribute__((always_inline)) void panels_rows512(const float *k0, const int two, int n,
                                                                 const float *const *q, const int R,
                                                                 float *S, size_t ss) {
    __m512 a[8], b[8];
    for (int r = 0; r < R; r++) a[r] = b[r] = _mm512_setzero_ps();
    const float *k1 = k0 + 16 * (size_t)n;
    for (int d = 0; d < n; d++) {
        const __m512 ka = _mm512_loadu_ps(k0 + 16 * (size_t)d);
        const __m512 kb = two ? _mm512_loadu_ps(k1 + 16 * (size_t)d) : _mm512_setzero_ps();
        for (int r = 0; r < R; r++) {
            const __m512 qv = _mm512_set1_ps(q[r][d]);
            a[r] = _mm512_fmadd_ps(qv, ka, a[r]);
            if (two) b[r] = _mm512_fmadd_ps(qv, kb, b[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(S + (size_t)r * ss, a[r]);
        if (two) _mm512_storeu_ps(S + (size_t)r * ss + 16, b[r]);
    }
}

static void avx512_score_panels(const float *kp, int nk, int n, const float *q, size_t qsi, int G, size_t qsg,
                                int ni, float *S, size_t ss) {
    const int np = (nk + 15) / 16, nr = ni * G;
    for (int p = 0; p < np; p += 2) {
        const int two = p + 1 < np;
        const float *k0 = kp + (size_t)p * 16 * (size_t)n;
        for (int r0 = 0; r0 < nr; r0 += 8) {
            const int R = nr - r0 < 8 ? nr - r0 : 8;
            const float *qr[8];
            for (int r = 0; r < R; r++) qr[r] = q + (size_t)((r0 + r) / G) * qsi + (size_t)((r0 + r) % G) * qsg;
            float *Sr = S + (size_t)r0 * ss + (size_t)p * 16;
#define PANELS_CASE(RR)                                                                          \
    case RR:                                                                                     \
        if (two) panels_rows512(k0, 1, n, qr, RR, Sr, ss);                                       \
        else panels_rows512(k0, 0, n, qr, RR, Sr, ss);                                           \
        break;
            switch (R) {
                PANELS_CASE(1) PANELS_CASE(2) PANELS_CASE(3) PANELS_CASE(4)
                PANELS_CASE(5) PANELS_CASE(6) PANELS_CASE(7) default: PANELS_CASE(8)
            }
#undef PANELS_CASE
        }
    }
}

/* accum_multi: four rows by 32 columns per pass (8 accumulators; each key row's two vectors
 * loaded once for four rows), each element the fma chain over t of avx512_accum_rows; the
 * columns past the last full 32 by accum_rows itself. */
static void avx512_accum_multi(float *acc, size_t as, const float *p, size_t ps, int nr, const float *rows,
                               size_t stride, int nk, int n) {
    const int n32 = n / 32 * 32;
    int r0 = 0;
    for (; r0 + 4 <= nr; r0 += 4) {
        float *a0p = acc + (size_t)r0 * as;
        const float *p0 = p + (size_t)r0 * ps;
        for (int i = 0; i < n32; i += 32) {
            __m512 a[4][2];
            for (int r = 0; r < 4; r++)
                a[r][0] = _mm512_loadu_ps(a0p + (size_t)r * as + i), a[r][1] = _mm512_loadu_ps(a0p + (size_t)r * as + i + 16);
            const float *rr = rows + i;
            for (int t = 0; t < nk; t++, rr += stride) {
                const __m512 v0 = _mm512_loadu_ps(rr), v1 = _mm512_loadu_ps(rr + 16);
                for (int r = 0; r < 4; r++) {
                    const __m512 w = _mm512_set1_ps(p0[(size_t)r * ps + (size_t)t]);
                    a[r][0] = _mm512_fmadd_ps(w, v0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(w, v1, a[r][1]);
                }
            }
            for (int r = 0; r < 4; r++)
                _mm512_storeu_ps(a0p + (size_t)r * as + i, a[r][0]), _mm512_storeu_ps(a0p + (size_t)r * as + i + 16, a[r][1]);
        }
        if (n32 < n)
            for (int r = 0; r < 4; r++)
                avx512_accum_rows(a0p + (size_t)r * as + n32, p0 + (size_t)r * ps, rows + n32, stride, nk, n - n32);
    }
    for (; r0 < nr; r0++) avx512_accum_rows(acc + (size_t)r0 * as, p + (size_t)r0 * ps, rows, stride, nk, n);
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

/* max_ps(x, m) returns m where x is NaN: NaNs are ignored as in the reference. */
static float avx512_shift_scale_max(float *s, int n, float add, float scale) {
    __m512 va = _mm512_set1_ps(add), vs = _mm512_set1_ps(scale), m = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = tail_mask(n - i);
        __m512 x = _mm512_mul_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(mk, s + i), va), vs);
        _mm512_mask_storeu_ps(s + i, mk, x);
        m = _mm512_mask_max_ps(m, mk, x, m);
    }
    return _mm512_reduce_max_ps(m);
}

/* Each chain in vectors of 16: a doubling scan in the vector (v[i] += rho^d·v[i − d] for d =
 * 1, 2, 4, 8), then the previous vector's last value carried in with rho^(i+1). */
static void avx512_chain_scan(float *s, size_t stride, int nr, int n, int phase, int chain, float rho) {
    float pw[16];
    simd_chain_powers(pw, 16, rho);
    const __m512 z = _mm512_setzero_ps(), P = _mm512_loadu_ps(pw), d1 = _mm512_set1_ps(pw[0]),
                 d2 = _mm512_set1_ps(pw[1]), d4 = _mm512_set1_ps(pw[3]), d8 = _mm512_set1_ps(pw[7]);
    const __m512i last = _mm512_set1_epi32(15);
    SIMD_FOR_CHAINS(s, stride, nr, n, phase, chain, x, a, b) {
            __m512 carry = z;
            for (int m = a; m < b; m += 16) {
                __mmask16 mk = tail_mask(b - m);
                __m512 v = _mm512_maskz_loadu_ps(mk, x + m);
                v = _mm512_fmadd_ps(d1, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(z), 15)), v);
                v = _mm512_fmadd_ps(d2, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(z), 14)), v);
                v = _mm512_fmadd_ps(d4, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(z), 12)), v);
                v = _mm512_fmadd_ps(d8, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(z), 8)), v);
                v = _mm512_fmadd_ps(P, carry, v);
                _mm512_mask_storeu_ps(x + m, mk, v);
                carry = _mm512_permutexvar_ps(last, v);
            }
    }
}

static void avx512_f16_to_f32(const uint16_t *in, float *out, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i))));
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
}

static void avx512_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        __m512 d = _mm512_set1_ps(simd_load_f16(rec));
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
        __m512 d = _mm512_set1_ps(simd_load_f16(rec));
        if (n == TQ_KV_BLOCK) {
            __m128i qs = _mm_loadu_si128((const __m128i *)(rec + 2));
            __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, lo_mask), eight);
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), lo_mask), eight);
            _mm512_storeu_ps(out + b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            _mm512_storeu_ps(out + b + 16,
                             _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
        } else {
            float dd = simd_load_f16(rec);
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

/* ---- fused paths: records decoded in registers (attn_kernels.h) ---- */

/* fp16 rows here, TURBO records in the lane layout below. This table has no score_turbo /
 * accum_turbo: a TURBO tensor without a lane layout (a segment count not a multiple of 8)
 * takes the decoded tile (tq_record_decode_rows through unpack_small above), as on AVX2. */

#define FUSED_MAX_KEYS 256 /* tokens whose scales and weights one accumulation pass holds */

/* Four horizontal sums: lane j of the result is the sum of a_j. */
static inline __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
}

static void score_f16_4x4(const uint16_t *r0, size_t rs, int dim, const float *q, size_t qs,
                          float *S, size_t ss) {
    static const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    for (int i = 0; i < dim; i += 16) {
        __mmask16 mk = tail_mask(dim - i);
        __m512 q0 = _mm512_maskz_loadu_ps(mk, q + i), q1 = _mm512_maskz_loadu_ps(mk, q + qs + i),
               q2 = _mm512_maskz_loadu_ps(mk, q + 2 * qs + i), q3 = _mm512_maskz_loadu_ps(mk, q + 3 * qs + i);
        for (int m = 0; m < 4; m++) {
            __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, r0 + (size_t)m * rs + i));
            a[m] = _mm512_fmadd_ps(v, q0, a[m]);
            a[4 + m] = _mm512_fmadd_ps(v, q1, a[4 + m]);
            a[8 + m] = _mm512_fmadd_ps(v, q2, a[8 + m]);
            a[12 + m] = _mm512_fmadd_ps(v, q3, a[12 + m]);
        }
    }
    store16(hsum16(a), one, S, ss);
}

static void avx512_score_f16(const uint16_t *rows, size_t rs, int nk, int dim, const float *q,
                             size_t qs, int nq, float *S, size_t ss) {
    int t0 = 0;
    if (nq % 4 == 0)
        for (; t0 + 4 <= nk; t0 += 4)
            for (int j = 0; j < nq; j += 4)
                score_f16_4x4(rows + (size_t)t0 * rs, rs, dim, q + (size_t)j * qs, qs,
                              S + (size_t)j * ss + (size_t)t0, ss);
    for (int t = t0; t < nk; t++) {
        const uint16_t *r = rows + (size_t)t * rs;
        int j = 0;
        for (; j + 4 <= nq; j += 4) {
            const float *q0 = q + (size_t)j * qs;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int i = 0;
            for (; i + 16 <= dim; i += 16) {
                __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i)));
                a0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + i), a0);
                a1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + qs + i), a1);
                a2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + 2 * qs + i), a2);
                a3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + 3 * qs + i), a3);
            }
            if (i < dim) {
                __mmask16 m = tail_mask(dim - i);
                __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + i));
                a0 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, q0 + i), a0);
                a1 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, q0 + qs + i), a1);
                a2 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, q0 + 2 * qs + i), a2);
                a3 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, q0 + 3 * qs + i), a3);
            }
            float o[4];
            _mm_storeu_ps(o, hsum4(a0, a1, a2, a3));
            for (int k = 0; k < 4; k++) S[(size_t)(j + k) * ss + (size_t)t] = o[k];
        }
        for (; j < nq; j++) {
            const float *q0 = q + (size_t)j * qs;
            __m512 a0 = _mm512_setzero_ps();
            for (int i = 0; i < dim; i += 16) {
                __mmask16 m = tail_mask(dim - i);
                a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + i)),
                                     _mm512_maskz_loadu_ps(m, q0 + i), a0);
            }
            S[(size_t)j * ss + (size_t)t] = _mm512_reduce_add_ps(a0);
        }
    }
}

static void avx512_accum_f16(const uint16_t *rows, size_t rs, int nk, int dim, const float *p,
                             size_t ps, int nq, float *acc, size_t as) {
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        const float *p0 = p + (size_t)j * ps;
        const float *p1 = m4 > 1 ? p0 + ps : p0, *p2 = m4 > 2 ? p0 + 2 * ps : p0,
                    *p3 = m4 > 3 ? p0 + 3 * ps : p0;
        float *A0 = acc + (size_t)j * as;
        int i = 0;
        /* 64 columns per sweep: 16 accumulator chains (4 columns of 16 × 4 queries), so the
         * FMA latency is hidden and each row is read 128 bytes at a time. */
        for (; i + 64 <= dim; i += 64) {
            __m512 a[16];
            for (int k = 0; k < 16; k++) a[k] = _mm512_setzero_ps();
            const uint16_t *r = rows + i;
            for (int t = 0; t < nk; t++, r += rs) {
                __m512 w0 = _mm512_set1_ps(p0[t]), w1 = _mm512_set1_ps(p1[t]),
                       w2 = _mm512_set1_ps(p2[t]), w3 = _mm512_set1_ps(p3[t]);
                for (int c = 0; c < 4; c++) {
                    __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + 16 * c)));
                    a[4 * c] = _mm512_fmadd_ps(w0, v, a[4 * c]);
                    a[4 * c + 1] = _mm512_fmadd_ps(w1, v, a[4 * c + 1]);
                    a[4 * c + 2] = _mm512_fmadd_ps(w2, v, a[4 * c + 2]);
                    a[4 * c + 3] = _mm512_fmadd_ps(w3, v, a[4 * c + 3]);
                }
            }
            for (int c = 0; c < 4; c++)
                for (int k = m4 - 1; k >= 0; k--) {
                    float *d = A0 + (size_t)k * as + i + 16 * c;
                    _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), a[4 * c + k]));
                }
        }
        for (; i < dim; i += 16) {
            __mmask16 m = tail_mask(dim - i);
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const uint16_t *r = rows + i;
            for (int t = 0; t < nk; t++, r += rs) {
                __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r));
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[t]), v, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[t]), v, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[t]), v, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[t]), v, a3);
            }
            if (m4 > 3) _mm512_mask_storeu_ps(A0 + 3 * as + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, A0 + 3 * as + i), a3));
            if (m4 > 2) _mm512_mask_storeu_ps(A0 + 2 * as + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, A0 + 2 * as + i), a2));
            if (m4 > 1) _mm512_mask_storeu_ps(A0 + as + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, A0 + as + i), a1));
            _mm512_mask_storeu_ps(A0 + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, A0 + i), a0));
        }
    }
}

/* ---- lane layout (record.h, tq_record_lanes): 8 codes per 32-bit lane ---- */

/* One segment's state: perm/shift move bytes [Bl, Bl + 4) of a block into lane l (a word
 * permute and a shift by 0 or 8; B = 4 needs neither), cv the repeated centroids. */
typedef struct lane_seg {
    __m512i perm, shift;
    __m512 cv;
    int B, nblk;
    size_t off, bytes;
} lane_seg;

#define LANE_MAX_SEG 2

static void lane_setup(const tq_record *x, lane_seg *g) {
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits;
        uint16_t perm[32];
        uint32_t shift[16];
        for (int l = 0; l < 16; l++) {
            int b = B * l;
            perm[2 * l] = (uint16_t)(b / 2);
            perm[2 * l + 1] = (uint16_t)(b / 2 + 1);
            shift[l] = (uint32_t)(8 * (b % 2));
        }
        g[s].perm = _mm512_loadu_si512(perm);
        g[s].shift = _mm512_loadu_si512(shift);
        float rep[16];
        for (int i = 0; i < 16; i++) rep[i] = x->seg[s].centroids[i & ((1 << B) - 1)];
        g[s].cv = _mm512_loadu_ps(rep);
        g[s].B = B;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
    }
}

/* The 16 lanes of block h of a segment at p (only the segment's own bytes are read). */
static inline __attribute__((always_inline)) __m512i lane_load(const lane_seg *g, const uint8_t *p,
                                                               int h, int B) {
    size_t at = (size_t)h * 16 * (size_t)B, n = g->bytes - at;
    if (n > 16 * (size_t)B) n = 16 * (size_t)B;
    __m512i raw = _mm512_maskz_loadu_epi8(n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1, p + at);
    if (B == 4) return raw;
    return _mm512_srlv_epi32(_mm512_permutexvar_epi16(g->perm, raw), g->shift);
}

/* Four tokens (records r[m]) × four queries (q[j], lane layout, this segment's part) of one
 * segment. */
static inline __attribute__((always_inline)) void lanes_4x4_seg(const lane_seg *g,
                                                                const uint8_t *const r[4],
                                                                const float *const q[4],
                                                                __m512 a[16], int B) {
    for (int h = 0; h < g->nblk; h++) {
        __m512i L0 = lane_load(g, r[0] + g->off, h, B), L1 = lane_load(g, r[1] + g->off, h, B),
                L2 = lane_load(g, r[2] + g->off, h, B), L3 = lane_load(g, r[3] + g->off, h, B);
        for (int k = 0; k < 8; k++) {
            size_t at = 128 * (size_t)h + 16 * (size_t)k;
            __m512 q0 = _mm512_loadu_ps(q[0] + at), q1 = _mm512_loadu_ps(q[1] + at),
                   q2 = _mm512_loadu_ps(q[2] + at), q3 = _mm512_loadu_ps(q[3] + at);
            __m512 v[4] = {_mm512_permutexvar_ps(L0, g->cv), _mm512_permutexvar_ps(L1, g->cv),
                           _mm512_permutexvar_ps(L2, g->cv), _mm512_permutexvar_ps(L3, g->cv)};
            for (int m = 0; m < 4; m++) {
                a[m] = _mm512_fmadd_ps(v[m], q0, a[m]);
                a[4 + m] = _mm512_fmadd_ps(v[m], q1, a[4 + m]);
                a[8 + m] = _mm512_fmadd_ps(v[m], q2, a[8 + m]);
                a[12 + m] = _mm512_fmadd_ps(v[m], q3, a[12 + m]);
            }
            L0 = _mm512_srli_epi32(L0, B), L1 = _mm512_srli_epi32(L1, B);
            L2 = _mm512_srli_epi32(L2, B), L3 = _mm512_srli_epi32(L3, B);
        }
    }
}

static int avx512_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk,
                                    const float *q, size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    lane_seg g[LANE_MAX_SEG];
    lane_setup(x, g);
    size_t rb = x->rec_bytes;
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        /* Absent queries (nq not a multiple of 4) and tokens (a last group of fewer than 4)
         * repeat the first of their group; their sums are dropped. */
        for (int t = 0; t < nk; t += 4) {
            int n4 = nk - t < 4 ? nk - t : 4;
            const uint8_t *r[4];
            const float *qs4[4];
            float sc[4], out[16];
            for (int m = 0; m < 4; m++) {
                r[m] = rec + (size_t)(t + (m < n4 ? m : 0)) * rb;
                qs4[m] = q + (size_t)(j + (m < m4 ? m : 0)) * qs;
            }
            ok &= simd_rec_scales(x, r, 4, n4, sc);
            __m512 a[16];
            for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            for (int s = 0; s < x->n_seg; s++) {
                switch (g[s].B) {
                case 4: lanes_4x4_seg(&g[s], r, qs4, a, 4); break;
                case 3: lanes_4x4_seg(&g[s], r, qs4, a, 3); break;
                case 2: lanes_4x4_seg(&g[s], r, qs4, a, 2); break;
                default: lanes_4x4_seg(&g[s], r, qs4, a, 1); break;
                }
                for (int m = 0; m < 4; m++) qs4[m] += 128 * (size_t)g[s].nblk;
            }
            if (m4 == 4 && n4 == 4) {
                store16(hsum16(a), sc, S + (size_t)j * ss + (size_t)t, ss);
                continue;
            }
            store16(hsum16(a), sc, out, 4);
            for (int k = 0; k < m4; k++)
                for (int m = 0; m < n4; m++) S[(size_t)(j + k) * ss + (size_t)(t + m)] = out[4 * k + m];
        }
    }
    return ok;
}

/* Rounds k0 … k0 + 3 of block h of one segment over n tokens: acc_j (lane layout, segment
 * part) += Σ_t w_j[t]·row_t for the four queries j. */
static inline __attribute__((always_inline)) void lanes_accum_seg(const lane_seg *g, const uint8_t *r0,
                                                                  size_t rb, int n,
                                                                  const float (*w)[FUSED_MAX_KEYS],
                                                                  float *A[4], int m4, int B) {
    for (int h = 0; h < g->nblk; h++) {
        for (int k0 = 0; k0 < 8; k0 += 4) {
            __m512 a[16];
            for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            const uint8_t *p = r0 + g->off;
            for (int t = 0; t < n; t++, p += rb) {
                __m512i L = lane_load(g, p, h, B);
                if (k0) L = _mm512_srli_epi32(L, 4 * B);
                __m512 w0 = _mm512_set1_ps(w[0][t]), w1 = _mm512_set1_ps(w[1][t]),
                       w2 = _mm512_set1_ps(w[2][t]), w3 = _mm512_set1_ps(w[3][t]);
                for (int r = 0; r < 4; r++) {
                    __m512 v = _mm512_permutexvar_ps(L, g->cv);
                    a[4 * r] = _mm512_fmadd_ps(w0, v, a[4 * r]);
                    a[4 * r + 1] = _mm512_fmadd_ps(w1, v, a[4 * r + 1]);
                    a[4 * r + 2] = _mm512_fmadd_ps(w2, v, a[4 * r + 2]);
                    a[4 * r + 3] = _mm512_fmadd_ps(w3, v, a[4 * r + 3]);
                    L = _mm512_srli_epi32(L, B);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < m4; j++) {
                    float *d = A[j] + 128 * (size_t)h + 16 * (size_t)(k0 + r);
                    _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), a[4 * r + j]));
                }
        }
    }
}

static int avx512_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk,
                                    const float *p, size_t ps, int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    lane_seg g[LANE_MAX_SEG];
    lane_setup(x, g);
    size_t rb = x->rec_bytes;
    float sc[FUSED_MAX_KEYS];
    float w[4][FUSED_MAX_KEYS];
    int ok = 1;
    for (int t0 = 0; t0 < nk; t0 += FUSED_MAX_KEYS) {
        int n = nk - t0 < FUSED_MAX_KEYS ? nk - t0 : FUSED_MAX_KEYS;
        const uint8_t *r0 = rec + (size_t)t0 * rb;
        ok &= simd_rec_scales_run(x, r0, n, sc);
        for (int j = 0; j < nq; j += 4) {
            int m4 = nq - j < 4 ? nq - j : 4;
            for (int k = 0; k < 4; k++)
                for (int t = 0; t < n; t++)
                    w[k][t] = k < m4 ? p[(size_t)(j + k) * ps + (size_t)(t0 + t)] * sc[t] : 0.0f;
            float *A[4];
            for (int k = 0; k < 4; k++) A[k] = acc + (size_t)(j + (k < m4 ? k : 0)) * as;
            for (int s = 0; s < x->n_seg; s++) {
                switch (g[s].B) {
                case 4: lanes_accum_seg(&g[s], r0, rb, n, (const float(*)[FUSED_MAX_KEYS])w, A, m4, 4); break;
                case 3: lanes_accum_seg(&g[s], r0, rb, n, (const float(*)[FUSED_MAX_KEYS])w, A, m4, 3); break;
                case 2: lanes_accum_seg(&g[s], r0, rb, n, (const float(*)[FUSED_MAX_KEYS])w, A, m4, 2); break;
                default: lanes_accum_seg(&g[s], r0, rb, n, (const float(*)[FUSED_MAX_KEYS])w, A, m4, 1); break;
                }
                for (int k = 0; k < 4; k++) A[k] += 128 * (size_t)g[s].nblk;
            }
        }
    }
    return ok;
}

static const tq_attn_kernels avx512_table = {
    .name = "avx512",
    .dot_multi = avx512_dot_multi,
    .accum_rows = avx512_accum_rows,
    .score_panels = avx512_score_panels,
    .accum_multi = avx512_accum_multi,
    .exp_sum = avx512_exp_sum,
    .scale = avx512_scale,
    .shift_scale_max = avx512_shift_scale_max,
    .chain_scan = avx512_chain_scan,
    .f16_to_f32 = avx512_f16_to_f32,
    .q8_0_decode = avx512_q8_0_decode,
    .q4_0_decode = avx512_q4_0_decode,
    .unpack_small = avx512_unpack_small,
    .score_f16 = avx512_score_f16,
    .accum_f16 = avx512_accum_f16,
    .score_turbo_lanes = avx512_score_turbo_lanes,
    .accum_turbo_lanes = avx512_accum_turbo_lanes,
};

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return &avx512_table; }

#else

const tq_attn_kernels *tq_attn_kernels_avx512(void) { return NULL; }

#endif

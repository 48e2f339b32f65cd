/* AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels; compile alone with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c.
 *
 * Same integer scheme as quants_avx2.c (maddubs + madd, exact per-block sums) on 512-bit
 * registers: two 32-element blocks per step for Q4_0/Q5_0/Q8_0, 64 elements per step for
 * the k-quants. AVX-512 has no sign_epi8, so the sign trick uses a mask from the weight's
 * sign bits: |w| x (w < 0 ? -y : y). VNNI is deliberately not required. Entries left
 * unset here (activation quantization) keep the AVX2 version. */
#include "quants.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float f16_load(const uint8_t p[2]) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

ALWAYS_INLINE __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
ALWAYS_INLINE __m512i load512(const void *p) { return _mm512_loadu_si512(p); }
ALWAYS_INLINE __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
ALWAYS_INLINE __m512 join_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

ALWAYS_INLINE __m256i bits_to_bytes(uint32_t m) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

ALWAYS_INLINE __m256i nibbles_32(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* ---- float weights ---------------------------------------------------------------------- */

static float dot_f32_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        /* Masked loads never touch the lanes past n. */
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

enum { W_F32, W_F16, W_BF16 };

ALWAYS_INLINE __m512 load_w16(const uint8_t *w, int64_t i, __mmask16 m, int kind) {
    if (kind == W_F32) return _mm512_maskz_loadu_ps(m, (const float *)(const void *)(w + 4 * i));
    __m256i h = _mm256_maskz_loadu_epi16(m, w + 2 * i);
    if (kind == W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE void dot_float_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx,
                                float *out, int kind) {
    __m512 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 wv = load_w16(w, i, m, kind);
        for (int r = 0; r < nx; r++)
            acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, (const float *)(const void *)(x + r * xs) + i), acc[r]);
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- 32-element blocks against q8_a -------------------------------------------------------- */

enum { W_Q4_0, W_Q5_0, W_Q8_0 };

ALWAYS_INLINE __m256i decode_32(const uint8_t *w, int64_t i, int kind, float *d) {
    if (kind == W_Q8_0) {
        const quant_block_q8_0 *b = (const quant_block_q8_0 *)(const void *)w + i;
        *d = f16_load(b->d);
        return load256(b->qs);
    }
    if (kind == W_Q4_0) {
        const quant_block_q4_0 *b = (const quant_block_q4_0 *)(const void *)w + i;
        *d = f16_load(b->d);
        return _mm256_sub_epi8(nibbles_32(b->qs), _mm256_set1_epi8(8));
    }
    const quant_block_q5_0 *b = (const quant_block_q5_0 *)(const void *)w + i;
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    *d = f16_load(b->d);
    return _mm256_or_si256(nibbles_32(b->qs), _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8((char)0xF0)));
}

ALWAYS_INLINE void dot_32_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx,
                             float *out, int kind) {
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
    __m512 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    int64_t nb = n / QUANT_QK, i = 0;
    for (; i + 2 <= nb; i += 2) {
        float d0, d1;
        __m256i qa = decode_32(w, i, kind, &d0);
        __m256i qb = decode_32(w, i + 1, kind, &d1);
        __m512i q = join256(qa, qb);
        __m512i aq = _mm512_abs_epi8(q);
        __mmask64 neg = _mm512_movepi8_mask(q);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_a *xb = (const quant_block_q8_a *)(const void *)(x + r * xs) + i;
            __m512i y = join256(load256(xb[0].qs), load256(xb[1].qs));
            __m512i p = _mm512_maddubs_epi16(aq, _mm512_mask_sub_epi8(y, neg, zero, y));
            __m512 s = _mm512_cvtepi32_ps(_mm512_madd_epi16(p, ones));
            acc[r] = _mm512_fmadd_ps(s, join_ps(d0 * xb[0].d, d1 * xb[1].d), acc[r]);
        }
    }
    if (i < nb) {
        /* Odd block count: the last block in the lower half only. */
        float d0;
        __m512i q = _mm512_zextsi256_si512(decode_32(w, i, kind, &d0));
        __m512i aq = _mm512_abs_epi8(q);
        __mmask64 neg = _mm512_movepi8_mask(q);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_a *xb = (const quant_block_q8_a *)(const void *)(x + r * xs) + i;
            __m512i y = _mm512_zextsi256_si512(load256(xb[0].qs));
            __m512i p = _mm512_maddubs_epi16(aq, _mm512_mask_sub_epi8(y, neg, zero, y));
            __m512 s = _mm512_cvtepi32_ps(_mm512_madd_epi16(p, ones));
            acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(d0 * xb[0].d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- k-quants against q8_K ---------------------------------------------------------------- */

ALWAYS_INLINE void dot_q4_K_nx(int64_t n, const quant_block_q4_K *w, const char *x, size_t xs,
                               const int nx, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m512 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        uint8_t sc[8], mn[8];
        quant_k4_scales(w[i].scales, sc, mn);
        float dw = f16_load(w[i].d), dmw = f16_load(w[i].dmin);
        __m512i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            /* Elements 64c .. 64c+63: sub-block 2c in the low nibbles, 2c+1 in the high. */
            __m256i v = load256(w[i].qs + 32 * c);
            __m512i q = join256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            __m512i sv = join256(_mm256_set1_epi16(sc[2 * c]), _mm256_set1_epi16(sc[2 * c + 1]));
            for (int r = 0; r < nx; r++) {
                const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
                __m512i p = _mm512_maddubs_epi16(q, load512(xb->qs + 64 * c));
                isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(p, sv));
            }
        }
        __m256i mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3],
                                         mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
            __m512i ms = _mm512_zextsi256_si512(_mm256_madd_epi16(load256(xb->bsums), mins));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(dw * xb->d), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_set1_ps(dmw * xb->d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* Q6_K: runs 0|1 of a half share ql's low nibbles and runs 2|3 the high nibbles, so one
 * 64-byte load of ql feeds two 512-bit vectors; the qh bits for the upper 256 bits sit two
 * places higher, hence per-half shift counts. Scales: one int16 per 8 lanes, picked from
 * the 16 block scales by a permute. */
ALWAYS_INLINE void dot_q6_K_nx(int64_t n, const quant_block_q6_K *w, const char *x, size_t xs,
                               const int nx, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const __m512i shl01 = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i shr23 = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i lane8 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2,
                                           1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q6_K *b = &w[i];
        float dw = f16_load(b->d);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = load512(b->ql + 64 * h);
            __m256i hb = load256(b->qh + 32 * h);
            __m512i hh = join256(hb, hb);
            __m512i v01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(hh, shl01), m2));
            __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(hh, shr23), m2));
            __m512i s01 = _mm512_permutexvar_epi16(_mm512_add_epi16(lane8, _mm512_set1_epi16((short)(8 * h))), sc512);
            __m512i s23 = _mm512_permutexvar_epi16(_mm512_add_epi16(lane8, _mm512_set1_epi16((short)(8 * h + 4))), sc512);
            for (int r = 0; r < nx; r++) {
                const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
                __m512i p01 = _mm512_madd_epi16(_mm512_maddubs_epi16(v01, load512(xb->qs + 128 * h)), s01);
                __m512i p23 = _mm512_madd_epi16(_mm512_maddubs_epi16(v23, load512(xb->qs + 128 * h + 64)), s23);
                isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(p01, p23));
            }
        }
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
            __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(load256(xb->bsums), sc16), 5);
            __m512i s = _mm512_sub_epi32(isum[r], _mm512_zextsi256_si512(bias));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(dw * xb->d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- entry points ---------------------------------------------------------------------- */

#define NX_SWITCH(call)                                                                           \
    switch (nx) {                                                                                 \
    case 1: call(1); break;                                                                       \
    case 2: call(2); break;                                                                       \
    case 3: call(3); break;                                                                       \
    default: call(4); break;                                                                      \
    }
#define DEFINE_QUANT(name, call)                                                                  \
    static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) {    \
        NX_SWITCH(call)                                                                           \
    }
_Static_assert(QUANT_DOT_MAX_NX == 4, "NX_SWITCH covers nx = 1..4");

#define CALL_F32(k) dot_float_nx(n, w, x, xs, k, out, W_F32)
#define CALL_F16(k) dot_float_nx(n, w, x, xs, k, out, W_F16)
#define CALL_BF16(k) dot_float_nx(n, w, x, xs, k, out, W_BF16)
#define CALL_Q4_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q4_0)
#define CALL_Q5_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q5_0)
#define CALL_Q8_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q8_0)
#define CALL_Q4_K(k) dot_q4_K_nx(n, w, x, xs, k, out)
#define CALL_Q6_K(k) dot_q6_K_nx(n, w, x, xs, k, out)
DEFINE_QUANT(dot_f32_row_avx512, CALL_F32)
DEFINE_QUANT(dot_f16_row_avx512, CALL_F16)
DEFINE_QUANT(dot_bf16_row_avx512, CALL_BF16)
DEFINE_QUANT(dot_q4_0_avx512, CALL_Q4_0)
DEFINE_QUANT(dot_q5_0_avx512, CALL_Q5_0)
DEFINE_QUANT(dot_q8_0_avx512, CALL_Q8_0)
DEFINE_QUANT(dot_q4_K_avx512, CALL_Q4_K)
DEFINE_QUANT(dot_q6_K_avx512, CALL_Q6_K)

void quant_fill_avx512(quant_kernels *k) {
    k->name = "avx512";
    k->dot_f32 = dot_f32_avx512;
    k->dot[QUANT_F32] = dot_f32_row_avx512;
    k->dot[QUANT_F16] = dot_f16_row_avx512;
    k->dot[QUANT_BF16] = dot_bf16_row_avx512;
    k->dot[QUANT_Q4_0] = dot_q4_0_avx512;
    k->dot[QUANT_Q5_0] = dot_q5_0_avx512;
    k->dot[QUANT_Q8_0] = dot_q8_0_avx512;
    k->dot[QUANT_Q4_K] = dot_q4_K_avx512;
    k->dot[QUANT_Q6_K] = dot_q6_K_avx512;
}

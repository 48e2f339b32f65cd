/* AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels; compile alone with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c.
 *
 * Same integer scheme as quants_avx2.c (maddubs + madd, exact per-block sums) on 512-bit
 * registers: two 32-element blocks per step for Q4_0/Q5_0/Q8_0, 64 elements per step for
 * the k-quants. Q4_1 uses quants_simd.h's 256-bit kernel (vpdpbusd in the VNNI build): two
 * blocks per 512-bit step measured 1.5x slower at SmolLM2's shapes (doc/quants.md), the joins
 * of two blocks' weights, activations and scales costing more than the width gains. AVX-512
 * has no sign_epi8, so the sign trick uses a mask from the weight's sign bits:
 * |w| x (w < 0 ? -y : y). Entries left unset here (activation quantization) keep
 * the AVX2 version.
 *
 * quants_vnni.c compiles this file again with QUANT_VNNI defined (and -mavx512vnni): the
 * u8 x s8 products summed in fours (maddubs, then madd by ones) become one vpdpbusd, which
 * does not saturate; the sums are the same since maddubs never saturates here (|w| <= 128,
 * |y| <= 127: a pair is at most 32512). The k-quants weight pairs by their sub-block scales
 * (madd by scales, not ones), so they keep maddubs in both builds. */
#include "quants_simd.h"

#ifdef QUANT_VNNI
#define ISA_NAME "avx512-vnni"
#define FILL_FN quant_fill_avx512_vnni
/* Sums of 4 adjacent u8 x s8 products as int32. */
ALWAYS_INLINE __m512i dot4_u8s8(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
#else
#define ISA_NAME "avx512"
#define FILL_FN quant_fill_avx512
ALWAYS_INLINE __m512i dot4_u8s8(__m512i u, __m512i s) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}
#endif

ALWAYS_INLINE __m512i load512(const void *p) { return _mm512_loadu_si512(p); }
ALWAYS_INLINE __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
ALWAYS_INLINE __m512 join_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
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

/* NW weight rows by NX activation rows; per pair the arithmetic of dot_f32_avx512 (two
 * accumulators over 32-element steps, the masked tail into the first, one reduction), so each
 * value equals it bit for bit. */
ALWAYS_INLINE void tile_f32_avx512(const float *w, const int NW, const float *x, const int NX, int64_t n, float *y,
                                   size_t ys) {
    __m512 s0[2][4], s1[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) s0[r][c] = s1[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 wa[2], wb[2];
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++) wa[r] = _mm512_loadu_ps(w + r * n + i), wb[r] = _mm512_loadu_ps(w + r * n + i + 16);
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) {
            const __m512 xa = _mm512_loadu_ps(x + c * n + i), xb = _mm512_loadu_ps(x + c * n + i + 16);
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                s0[r][c] = _mm512_fmadd_ps(wa[r], xa, s0[r][c]);
                s1[r][c] = _mm512_fmadd_ps(wb[r], xb, s1[r][c]);
            }
        }
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
            for (int c = 0; c < NX; c++)
                s0[r][c] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + r * n + i), _mm512_maskz_loadu_ps(m, x + c * n + i),
                                           s0[r][c]);
    }
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) y[(size_t)c * ys + (size_t)r] = _mm512_reduce_add_ps(_mm512_add_ps(s0[r][c], s1[r][c]));
}

/* Tiles of two weight rows by up to four activation rows (16 accumulators, 12 loads per 16
 * multiply-adds, against 2 loads per one in dot_f32). */
static void dot_f32_tile_avx512(const float *w, int nw, const float *x, int nx, int64_t n, float *y, size_t ys) {
    for (int r = 0; r < nw; r += 2, w += 2 * n, y += 2) {
        const int two = nw - r >= 2;
        switch (nx) {
        case 4: two ? tile_f32_avx512(w, 2, x, 4, n, y, ys) : tile_f32_avx512(w, 1, x, 4, n, y, ys); break;
        case 3: two ? tile_f32_avx512(w, 2, x, 3, n, y, ys) : tile_f32_avx512(w, 1, x, 3, n, y, ys); break;
        case 2: two ? tile_f32_avx512(w, 2, x, 2, n, y, ys) : tile_f32_avx512(w, 1, x, 2, n, y, ys); break;
        default: two ? tile_f32_avx512(w, 2, x, 1, n, y, ys) : tile_f32_avx512(w, 1, x, 1, n, y, ys); break;
        }
    }
}

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

ALWAYS_INLINE void dot_32_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx,
                             float *out, int kind) {
    const __m512i zero = _mm512_setzero_si512();
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
            __m512 s = _mm512_cvtepi32_ps(dot4_u8s8(aq, _mm512_mask_sub_epi8(y, neg, zero, y)));
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
            __m512 s = _mm512_cvtepi32_ps(dot4_u8s8(aq, _mm512_mask_sub_epi8(y, neg, zero, y)));
            acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(d0 * xb[0].d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- k-quants against q8_K ---------------------------------------------------------------- */

/* Q4_K and Q5_K (five = W_Q5_K): elements 64c .. 64c+63 are sub-block 2c (low nibbles of
 * chunk c) and 2c+1 (high nibbles); Q5_K's fifth bits are bits 2c, 2c+1 of qh[l], shifted
 * to bits 0, 1 (qh right by 2 per chunk) and from there to bit 4 of each byte. */
ALWAYS_INLINE void dot_k4_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                             const int five) {
    __m512 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q4_K *b = (const quant_block_q4_K *)(const void *)(w + (size_t)i * K4_BYTES(five));
        const uint8_t *qs = (const uint8_t *)b + K4_QS(five);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b->scales, sc, mn);
        float dw = f16_load(b->d), dmw = f16_load(b->dmin);
        __m256i hb = five ? load256(((const quant_block_q5_K *)(const void *)b)->qh) : _mm256_setzero_si256();
        __m512i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            k4_chunk(qs + 32 * c, five, &hb, &lo, &hi);
            __m512i q = join256(lo, hi);
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

DEFINE_QUANT_ENTRIES(avx512)

void FILL_FN(quant_kernels *k) {
    k->name = ISA_NAME;
    k->dot_f32 = dot_f32_avx512;
    k->dot_f32_tile = dot_f32_tile_avx512;
    FILL_QUANT_ENTRIES(k, avx512);
}

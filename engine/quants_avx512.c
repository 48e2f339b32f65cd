/* AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels; compile alone with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c.
 *
 * Exact per-block integer sums (maddubs + madd, or vpdpbusd) on 512-bit registers: four
 * 32-element blocks per step for Q4_0/Q5_0/Q8_0/Q4_1, 64 elements per step for the k-quants;
 * the 32-element types, Q4_K and Q6_K follow one per-block rule in their row-wise (dot) and
 * batched (gemm, prefill) kernels, so both give the same bits (doc/quants.md, "Batched
 * kernels for prefill"). AVX-512 has no sign_epi8, so the sign trick uses a mask from the
 * weight's sign bits: |w| x (w < 0 ? -y : y). Entries left unset here (activation
 * quantization) keep the AVX2 version.
 *
 * quants_vnni.c compiles this file again with QUANT_VNNI defined (and -mavx512vnni): the
 * u8 x s8 products summed in fours (maddubs, then madd by ones) become one vpdpbusd, which
 * does not saturate; the sums are the same since maddubs never saturates here (|w| <= 128,
 * |y| <= 127: a pair is at most 32512). The k-quants weight pairs by their sub-block scales
 * (madd by scales, not ones), so they keep maddubs in both builds. */
#include <math.h>

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
/* Q6_K (the block rule as Q4_K's: S_b = the exact int sum of the super-block, then
 * P = fma((float)S_b, dw_b * dx_b, P) into four partials by b mod 4, (P0 + P1) + (P2 + P3)). */
ALWAYS_INLINE void dot_q6_K_nx(int64_t n, const quant_block_q6_K *w, const char *x, size_t xs,
                               const int nx, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const __m512i shl01 = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i shr23 = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i lane8 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2,
                                           1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    float part[QUANT_DOT_MAX_NX][4];
    for (int r = 0; r < nx; r++) part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.0f;
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
            const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(load256(xb->bsums), sc16), 5);
            const __m256i a = _mm256_sub_epi32(
                _mm256_add_epi32(_mm512_castsi512_si256(isum[r]), _mm512_extracti64x4_epi64(isum[r], 1)), bias);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
            float *p = &part[r][i & 3];
            *p = fmaf((float)_mm_cvtsi128_si32(h), dw * xb->d, *p);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
}

/* ---- Q4_0, Q5_0, Q4_1, Q8_0: the block rule of quants_simd.h, four blocks per step -------- */

/* nibbles_32 of two blocks side by side: each 16-byte half loaded twice, the second copy
 * shifted by 4. */
ALWAYS_INLINE __m512i nibbles_64(const uint8_t *qa, const uint8_t *qb) {
    const __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                            0x0004000400040004LL, 0x0004000400040004LL);
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qa));
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qb));
    return _mm512_and_si512(_mm512_srlv_epi16(join256(a, b), shift), _mm512_set1_epi8(0x0F));
}

/* The int32 sums of lanes 0-7 and 8-15 of p01, then of p23, as four lanes. */
ALWAYS_INLINE __m128i blk_sums4(__m512i p01, __m512i p23) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512i t = _mm512_add_epi32(_mm512_permutex2var_epi32(p01, even, p23), _mm512_permutex2var_epi32(p01, odd, p23));
    t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC)); /* four lanes per block now */
    t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si128(_mm512_permutexvar_epi32(first, t));
}

/* Blocks i .. i+nb-1 (nb = 1..4, a constant) of the row against nx activation rows, into each
 * row's partials (lane k: block i+k; lanes past nb untouched). */
ALWAYS_INLINE void dot_blk_group(const uint8_t *w, int64_t i, const int nb, const char *x, size_t xs, const int nx,
                                 __m128 *acc, const int kind) {
    const size_t xb = BLK_XBYTES(kind), xq = BLK_XQS(kind);
    const __m256i zero = _mm256_setzero_si256();
    __m512i z01, z23;
    __m128 dw, mw;
    blk_scales4(w, i, nb, kind, &dw, &mw);
    if (kind == B_Q4_1) {
        const quant_block_q4_1 *b = (const quant_block_q4_1 *)(const void *)w + i;
        z01 = nb >= 2 ? nibbles_64(b[0].qs, b[1].qs) : join256(nibbles_32(b[0].qs), zero);
        z23 = nb == 4 ? nibbles_64(b[2].qs, b[3].qs) : nb == 3 ? join256(nibbles_32(b[2].qs), zero) : _mm512_setzero_si512();
    } else {
        __m256i q[4];
        float d;
        for (int k = 0; k < 4; k++) q[k] = k < nb ? decode_32(w, i + k, kind, &d) : zero;
        z01 = join256(q[0], q[1]);
        z23 = join256(q[2], q[3]);
    }
    const __m512i a01 = kind == B_Q4_1 ? z01 : _mm512_abs_epi8(z01), a23 = kind == B_Q4_1 ? z23 : _mm512_abs_epi8(z23);
    const __mmask64 n01 = _mm512_movepi8_mask(z01), n23 = _mm512_movepi8_mask(z23);
    const __mmask8 live = (__mmask8)((1u << nb) - 1);
    for (int r = 0; r < nx; r++) {
        const char *xr = x + (size_t)r * xs + (size_t)i * xb;
        __m256i y[4];
        for (int k = 0; k < 4; k++) y[k] = k < nb ? load256(xr + k * xb + xq) : zero;
        __m512i y01 = join256(y[0], y[1]), y23 = join256(y[2], y[3]);
        if (kind != B_Q4_1) {
            y01 = _mm512_mask_sub_epi8(y01, n01, _mm512_setzero_si512(), y01);
            y23 = _mm512_mask_sub_epi8(y23, n23, _mm512_setzero_si512(), y23);
        }
        const __m128i isum = blk_sums4(dot4_u8s8(a01, y01), dot4_u8s8(a23, y23));
        __m128 dx4, sx4;
        blk_act4(xr, nb, kind, &dx4, &sx4);
        const __m128 c = _mm_mul_ps(dw, dx4);
        acc[r] = _mm_mask3_fmadd_ps(_mm_cvtepi32_ps(isum), c, acc[r], live);
        if (kind == B_Q4_1) acc[r] = _mm_mask3_fmadd_ps(mw, sx4, acc[r], live);
    }
}

ALWAYS_INLINE float blk_finish(__m128 p) {
    float v[4];
    _mm_storeu_ps(v, p);
    return (v[0] + v[1]) + (v[2] + v[3]);
}

ALWAYS_INLINE void dot_blk_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                              const int kind) {
    __m128 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm_setzero_ps();
#define BLK_STEP(i, nbk) dot_blk_group(w, i, nbk, x, xs, nx, acc, kind)
    IN_FOURS(n / QUANT_QK, BLK_STEP);
#undef BLK_STEP
    for (int r = 0; r < nx; r++) out[r] = blk_finish(acc[r]);
}

/* gemm scratch, per block: 8 vectors (vector g: bytes 4g .. 4g+3 of rows 0..15, row j at
 * byte 4j), then per row 128 * sum(q) (int32), the scale and the offset (float). */
#define GEMM_BLK_BYTES (8 * 64 + 3 * 64)
_Static_assert(QUANT_GEMM_ROWS == 16, "one int32 lane per row");

ALWAYS_INLINE void gemm_blk_decode(int64_t nb, const uint8_t *w, size_t wrb, int nw, uint8_t *scr, const int kind) {
    const __m256i idx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = scr + (size_t)b * GEMM_BLK_BYTES;
        int32_t ws[QUANT_GEMM_ROWS];
        float dw[QUANT_GEMM_ROWS], mw[QUANT_GEMM_ROWS];
        for (int j = 0; j < QUANT_GEMM_ROWS; j++) {
            __m256i q = _mm256_setzero_si256();
            dw[j] = mw[j] = 0.0f;
            if (j < nw) q = blk_decode(w + (size_t)j * wrb, b, kind, &dw[j], &mw[j]);
            _mm256_i32scatter_epi32((int *)(void *)blk + j, idx, q, 4);
            /* sum of q: sum of (q + 128) by sad, less 32 * 128 */
            __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, bias), _mm256_setzero_si256());
            __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
            ws[j] = (int32_t)(128 * sum);
        }
        memcpy(blk + 512, ws, sizeof ws);
        memcpy(blk + 576, dw, sizeof dw);
        memcpy(blk + 640, mw, sizeof mw);
    }
}

/* u8 x s8 sums of four into s: vpdpbusd, or maddubs + madd by ones (the products' pairs stay
 * within int16 for |q| <= 16, u <= 255: not for Q8_0, whose gemm is the VNNI set's only). */
ALWAYS_INLINE __m512i dot4_acc(__m512i s, __m512i u, __m512i q) {
#ifdef QUANT_VNNI
    return _mm512_dpbusd_epi32(s, u, q);
#else
    return _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(u, q), _mm512_set1_epi16(1)));
#endif
}

/* Block b against NY activation rows into partial p of each. */
ALWAYS_INLINE void gemm_blk_step(const uint8_t *blk, int64_t b, const int p, const char *x, size_t xs,
                                 const uint8_t *xu, size_t xus, const int NY, __m512 acc[4][4], const int kind) {
    const __m512i ws = load512(blk + 512);
    const __m512 dw = _mm512_loadu_ps((const float *)(const void *)(blk + 576));
    for (int yy = 0; yy < NY; yy++) {
        const uint8_t *xp = xu + (size_t)yy * xus + (size_t)b * QUANT_QK;
        __m512i s = _mm512_setzero_si512();
        for (int g = 0; g < 8; g++) {
            int32_t v;
            memcpy(&v, xp + 4 * g, 4);
            s = dot4_acc(s, _mm512_set1_epi32(v), load512(blk + 64 * g));
        }
        const char *xb = x + (size_t)yy * xs + (size_t)b * BLK_XBYTES(kind);
        float dx;
        memcpy(&dx, xb, 4);
        const __m512 c = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
        acc[yy][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, ws)), c, acc[yy][p]);
        if (kind == B_Q4_1) {
            float sx;
            memcpy(&sx, xb + 4, 4);
            acc[yy][p] = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(const void *)(blk + 640)), _mm512_set1_ps(sx),
                                         acc[yy][p]);
        }
    }
}

ALWAYS_INLINE void gemm_blk_rows(int64_t nb, const uint8_t *scr, const char *x, size_t xs, const uint8_t *xu,
                                 size_t xus, const int NY, float *y, size_t ys, __mmask16 keep, const int kind) {
    __m512 acc[4][4];
    for (int yy = 0; yy < NY; yy++)
        for (int p = 0; p < 4; p++) acc[yy][p] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4)
        for (int p = 0; p < 4; p++)
            gemm_blk_step(scr + (size_t)(b + p) * GEMM_BLK_BYTES, b + p, p, x, xs, xu, xus, NY, acc, kind);
    for (int p = 0; p < 3; p++)
        if (b + p < nb) gemm_blk_step(scr + (size_t)(b + p) * GEMM_BLK_BYTES, b + p, p, x, xs, xu, xus, NY, acc, kind);
    for (int yy = 0; yy < NY; yy++) {
        const __m512 r = _mm512_add_ps(_mm512_add_ps(acc[yy][0], acc[yy][1]), _mm512_add_ps(acc[yy][2], acc[yy][3]));
        _mm512_mask_storeu_ps(y + (size_t)yy * ys, keep, r);
    }
}

ALWAYS_INLINE void gemm_blk(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, const uint8_t *xu,
                            size_t xus, int nx, float *y, size_t ys, void *scratch, const int kind) {
    const int64_t nb = n / QUANT_QK;
    uint8_t *scr = scratch;
    gemm_blk_decode(nb, w, wrb, nw, scr, kind);
    const __mmask16 keep = (__mmask16)((1u << nw) - 1);
    const char *xc = x;
#define ROWS(i, ny) gemm_blk_rows(nb, scr, xc + (size_t)(i) * xs, xs, xu + (size_t)(i) * xus, xus, ny, y + (size_t)(i) * ys, ys, keep, kind)
    IN_FOURS(nx, ROWS);
#undef ROWS
}

/* ---- Q4_K: the same rule per 256-element super-block ------------------------------------
 *
 * Per super-block b: S_b = sum_j sc_j * isum_j and M_b = sum_j mn_j * (sum of the activation's
 * 32 values of sub-block j), both exact ints; P = fma((float)S_b, dw_b * dx_b, P), then
 * P = fma(-(float)M_b, dmin_b * dx_b, P), four partials by b mod 4, (P0 + P1) + (P2 + P3). */
ALWAYS_INLINE void dot_k4c_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out) {
    float part[QUANT_DOT_MAX_NX][4];
    for (int r = 0; r < nx; r++) part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q4_K *b = (const quant_block_q4_K *)(const void *)w + i;
        uint8_t sc[8], mn[8];
        quant_k4_scales(b->scales, sc, mn);
        const float dw = f16_load(b->d), dmw = f16_load(b->dmin);
        __m256i hb = _mm256_setzero_si256();
        __m512i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            k4_chunk(b->qs + 32 * c, 0, &hb, &lo, &hi);
            const __m512i q = join256(lo, hi);
            const __m512i sv = join256(_mm256_set1_epi16(sc[2 * c]), _mm256_set1_epi16(sc[2 * c + 1]));
            for (int r = 0; r < nx; r++) {
                const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
                isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(_mm512_maddubs_epi16(q, load512(xb->qs + 64 * c)), sv));
            }
        }
        const __m256i mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3], mn[4], mn[4],
                                               mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
            /* S and M reduced together: lane 0 and lane 1 */
            const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(isum[r]), _mm512_extracti64x4_epi64(isum[r], 1));
            __m256i h = _mm256_hadd_epi32(a, _mm256_madd_epi16(load256(xb->bsums), mins));
            h = _mm256_hadd_epi32(h, h);
            const __m128 sm = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
            float *p = &part[r][i & 3];
            *p = fmaf(_mm_cvtss_f32(sm), dw * xb->d, *p);
            *p = fmaf(-_mm_cvtss_f32(_mm_movehdup_ps(sm)), dmw * xb->d, *p);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
}

/* gemm scratch of Q4_K, per super-block: 64 vectors of nibbles (vector 8j + g: elements
 * 32j + 4g .. +3 of rows 0..15), the sub-block scales (8 vectors of int32, one per j), the
 * mins as int16 pairs (8 vectors, pair k = (mn_k, mn_k)), then d and dmin (16 floats each). */
#define GEMM_K4_BYTES (64 * 64 + 8 * 64 + 8 * 64 + 2 * 64)
_Static_assert(GEMM_K4_BYTES <= 8 * (8 * 64 + 4 * 64), "quant_gemm_scratch_bytes covers a Q4_K super-block");

ALWAYS_INLINE void gemm_k4_decode(int64_t nb, const uint8_t *w, size_t wrb, int nw, uint8_t *scr) {
    const __m256i idx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = scr + (size_t)i * GEMM_K4_BYTES;
        int32_t scv[8][QUANT_GEMM_ROWS], mnv[8][QUANT_GEMM_ROWS];
        float dv[2][QUANT_GEMM_ROWS];
        for (int j = 0; j < QUANT_GEMM_ROWS; j++) {
            uint8_t sc[8] = {0}, mn[8] = {0};
            __m256i hb = _mm256_setzero_si256(), lo[4], hi[4];
            dv[0][j] = dv[1][j] = 0.0f;
            if (j < nw) {
                const quant_block_q4_K *b = (const quant_block_q4_K *)(const void *)(w + (size_t)j * wrb) + i;
                quant_k4_scales(b->scales, sc, mn);
                dv[0][j] = f16_load(b->d);
                dv[1][j] = f16_load(b->dmin);
                for (int c = 0; c < 4; c++) k4_chunk(b->qs + 32 * c, 0, &hb, &lo[c], &hi[c]);
            } else
                for (int c = 0; c < 4; c++) lo[c] = hi[c] = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                /* sub-block 2c is lo[c], 2c+1 is hi[c]: 8 vectors each */
                _mm256_i32scatter_epi32((int *)(void *)(blk + (size_t)(2 * c) * 8 * 64) + j, idx, lo[c], 4);
                _mm256_i32scatter_epi32((int *)(void *)(blk + (size_t)(2 * c + 1) * 8 * 64) + j, idx, hi[c], 4);
            }
            for (int k = 0; k < 8; k++) {
                scv[k][j] = sc[k];
                mnv[k][j] = (int32_t)((uint32_t)mn[k] | ((uint32_t)mn[k] << 16));
            }
        }
        memcpy(blk + 4096, scv, sizeof scv);
        memcpy(blk + 4096 + 512, mnv, sizeof mnv);
        memcpy(blk + 4096 + 1024, dv, sizeof dv);
    }
}

/* A k-quant super-block's sum_k sc_k * (the sub-block's exact dot) for 16 rows: nsub sub-blocks
 * of 4 * per values, the values' vectors first in the scratch, the scales' int32 vectors at
 * 4096. */
ALWAYS_INLINE __m512i gemm_k_scaled(const uint8_t *blk, const int8_t *qs, const int nsub, const int per) {
    __m512i S = _mm512_setzero_si512();
    for (int k = 0; k < nsub; k++) {
        __m512i t = _mm512_setzero_si512();
        for (int g = 0; g < per; g++) {
            int32_t v;
            memcpy(&v, qs + 4 * (per * k + g), 4);
            t = dot4_acc(t, load512(blk + (size_t)(per * k + g) * 64), _mm512_set1_epi32(v));
        }
        S = _mm512_add_epi32(S, _mm512_mullo_epi32(t, load512(blk + 4096 + 64 * k)));
    }
    return S;
}

ALWAYS_INLINE void gemm_k4_step(const uint8_t *blk, int64_t i, const int p, const char *x, size_t xs, const int NY,
                                __m512 acc[4][4]) {
    const __m512 dw = _mm512_loadu_ps((const float *)(const void *)(blk + 4096 + 1024));
    const __m512 dmw = _mm512_loadu_ps((const float *)(const void *)(blk + 4096 + 1024 + 64));
    for (int yy = 0; yy < NY; yy++) {
        const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + (size_t)yy * xs) + i;
        const __m512i S = gemm_k_scaled(blk, xb->qs, 8, 8);
        __m512i M = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            int32_t bs;
            memcpy(&bs, &xb->bsums[2 * j], 4);
            M = _mm512_add_epi32(M, _mm512_madd_epi16(load512(blk + 4096 + 512 + 64 * j), _mm512_set1_epi32(bs)));
        }
        const __m512 dx = _mm512_set1_ps(xb->d);
        acc[yy][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, dx), acc[yy][p]);
        acc[yy][p] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmw, dx), acc[yy][p]);
    }
}

/* gemm scratch of Q6_K, per super-block: 64 vectors of the 6-bit values as bytes (vector G:
 * elements 4G .. 4G+3 of rows 0..15), the 16 sub-block scales (int32 vectors), the scales
 * again as int16 pairs (vector k: (sc_2k, sc_2k+1)) for the -32 offset, then d. */
#define GEMM_Q6_BYTES (64 * 64 + 16 * 64 + 8 * 64 + 64)
_Static_assert(GEMM_Q6_BYTES <= 8 * (8 * 64 + 4 * 64), "quant_gemm_scratch_bytes covers a Q6_K super-block");

ALWAYS_INLINE void gemm_q6_decode(int64_t nb, const uint8_t *w, size_t wrb, int nw, uint8_t *scr) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const __m512i shl01 = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i shr23 = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i idx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = scr + (size_t)i * GEMM_Q6_BYTES;
        int32_t scv[16][QUANT_GEMM_ROWS], scp[8][QUANT_GEMM_ROWS];
        float dv[QUANT_GEMM_ROWS];
        for (int j = 0; j < QUANT_GEMM_ROWS; j++) {
            __m512i v[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
            int8_t sc[16] = {0};
            dv[j] = 0.0f;
            if (j < nw) {
                const quant_block_q6_K *b = (const quant_block_q6_K *)(const void *)(w + (size_t)j * wrb) + i;
                dv[j] = f16_load(b->d);
                memcpy(sc, b->scales, 16);
                for (int h = 0; h < 2; h++) { /* as dot_q6_K_nx: elements 128h + 0..63, then + 64..127 */
                    const __m512i ql = load512(b->ql + 64 * h);
                    const __m256i hb = load256(b->qh + 32 * h);
                    const __m512i hh = join256(hb, hb);
                    v[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(hh, shl01), m2));
                    v[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                   _mm512_and_si512(_mm512_srlv_epi16(hh, shr23), m2));
                }
            }
            for (int k = 0; k < 4; k++) _mm512_i32scatter_epi32((int *)(void *)(blk + (size_t)k * 16 * 64) + j, idx, v[k], 4);
            for (int k = 0; k < 16; k++) scv[k][j] = sc[k];
            for (int k = 0; k < 8; k++)
                scp[k][j] = (int32_t)((uint32_t)(uint16_t)(int16_t)sc[2 * k] | ((uint32_t)(uint16_t)(int16_t)sc[2 * k + 1] << 16));
        }
        memcpy(blk + 4096, scv, sizeof scv);
        memcpy(blk + 4096 + 1024, scp, sizeof scp);
        memcpy(blk + 4096 + 1536, dv, sizeof dv);
    }
}

ALWAYS_INLINE void gemm_q6_step(const uint8_t *blk, int64_t i, const int p, const char *x, size_t xs, const int NY,
                                __m512 acc[4][4]) {
    const __m512 dw = _mm512_loadu_ps((const float *)(const void *)(blk + 4096 + 1536));
    for (int yy = 0; yy < NY; yy++) {
        const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + (size_t)yy * xs) + i;
        __m512i S = gemm_k_scaled(blk, xb->qs, 16, 4), M = _mm512_setzero_si512();
        for (int k = 0; k < 8; k++) {
            int32_t bs;
            memcpy(&bs, &xb->bsums[2 * k], 4);
            M = _mm512_add_epi32(M, _mm512_madd_epi16(load512(blk + 4096 + 1024 + 64 * k), _mm512_set1_epi32(bs)));
        }
        S = _mm512_sub_epi32(S, _mm512_slli_epi32(M, 5)); /* the values are q - 32 */
        acc[yy][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[yy][p]);
    }
}

/* The k-quants' gemm: decode 16 rows, then activation rows in fours (q6: Q6_K, else Q4_K). */
ALWAYS_INLINE void gemm_k_rows(int64_t nb, const uint8_t *scr, const char *x, size_t xs, const int NY, float *y,
                               size_t ys, __mmask16 keep, const int q6) {
    const size_t bytes = q6 ? GEMM_Q6_BYTES : GEMM_K4_BYTES;
    __m512 acc[4][4];
    for (int yy = 0; yy < NY; yy++)
        for (int p = 0; p < 4; p++) acc[yy][p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 4)
        for (int p = 0; p < 4 && i + p < nb; p++) {
            if (q6)
                gemm_q6_step(scr + (size_t)(i + p) * bytes, i + p, p, x, xs, NY, acc);
            else
                gemm_k4_step(scr + (size_t)(i + p) * bytes, i + p, p, x, xs, NY, acc);
        }
    for (int yy = 0; yy < NY; yy++) {
        const __m512 r = _mm512_add_ps(_mm512_add_ps(acc[yy][0], acc[yy][1]), _mm512_add_ps(acc[yy][2], acc[yy][3]));
        _mm512_mask_storeu_ps(y + (size_t)yy * ys, keep, r);
    }
}

ALWAYS_INLINE void gemm_k(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, int nx, float *y,
                          size_t ys, void *scratch, const int q6) {
    const int64_t nb = n / QUANT_QK_K;
    if (q6)
        gemm_q6_decode(nb, w, wrb, nw, scratch);
    else
        gemm_k4_decode(nb, w, wrb, nw, scratch);
    const __mmask16 keep = (__mmask16)((1u << nw) - 1);
    const char *xc = x;
#define ROWS(i, ny) gemm_k_rows(nb, scratch, xc + (size_t)(i) * xs, xs, ny, y + (size_t)(i) * ys, ys, keep, q6)
    IN_FOURS(nx, ROWS);
#undef ROWS
}

DEFINE_GEMM_K(gemm_q4_K_512, 0)
DEFINE_GEMM_K(gemm_q6_K_512, 1)


DEFINE_GEMM(gemm_q4_0_512, B_Q4_0)
DEFINE_GEMM(gemm_q5_0_512, B_Q5_0)
DEFINE_GEMM(gemm_q4_1_512, B_Q4_1)
#ifdef QUANT_VNNI
DEFINE_GEMM(gemm_q8_0_512, B_Q8_0)
#endif
DEFINE_QUANT_ENTRIES(avx512)

void FILL_FN(quant_kernels *k) {
    k->name = ISA_NAME;
    k->dot_f32 = dot_f32_avx512;
    k->dot_f32_tile = dot_f32_tile_avx512;
    FILL_QUANT_ENTRIES(k, avx512);
    /* the batched kernels (their dot entries above follow the same per-block rule) */
    k->gemm[QUANT_Q4_K] = gemm_q4_K_512;
    k->gemm[QUANT_Q6_K] = gemm_q6_K_512;
    k->gemm[QUANT_Q4_0] = gemm_q4_0_512;
    k->gemm[QUANT_Q5_0] = gemm_q5_0_512;
    k->gemm[QUANT_Q4_1] = gemm_q4_1_512;
#ifdef QUANT_VNNI
    k->gemm[QUANT_Q8_0] = gemm_q8_0_512;
#endif
}

/* AVX2 + FMA + F16C kernels (compile this file alone with -mavx2 -mfma -mf16c).
 *
 * Integer dots use maddubs (u8 x s8 -> pairs summed to s16) and madd (s16 x s16 -> s32),
 * so each block's integer sum equals the scalar reference exactly; only the float
 * accumulation across blocks is reordered. Signed weights go through the usual sign
 * trick: |w| as unsigned times sign(w)*y, which keeps maddubs in range because activations
 * are within [-127, 127] (quant_quantize_*: symmetric, never -128).
 *
 * Each kernel decodes a weight block once and applies it to NX activation rows; NX is a
 * compile-time constant in every inlined instance so the accumulators stay in registers. */
#include "quants_simd.h"

/* Sum of 32 signed bytes (exact). */
ALWAYS_INLINE int hsum_epi8(__m256i q) {
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return _mm_cvtsi128_si32(v);
}

/* ---- activation quantization ----------------------------------------------------------- */

/* Same arithmetic as quantize_block_ref; cvtps rounds half-even under the default MXCSR. */
ALWAYS_INLINE __m256i quantize_32(const float *x, __m256 id) {
    __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    /* packs work per 128-bit lane; restore element order. */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static float absmax(const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void quantize_q8_a_avx2(const float *x, void *dst, int64_t n) {
    quant_block_q8_a *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float d = absmax(x, QUANT_QK) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        _mm256_storeu_si256((__m256i *)b[i].qs, quantize_32(x, _mm256_set1_ps(id)));
    }
}

static void quantize_q8_a1_avx2(const float *x, void *dst, int64_t n) {
    quant_block_q8_a1 *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float d = absmax(x, QUANT_QK) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i q = quantize_32(x, _mm256_set1_ps(id));
        b[i].d = d;
        b[i].s = d * (float)hsum_epi8(q);
        _mm256_storeu_si256((__m256i *)b[i].qs, q);
    }
}

static void quantize_q8_K_avx2(const float *x, void *dst, int64_t n) {
    quant_block_q8_K *b = dst;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QUANT_QK_K; i++, x += QUANT_QK_K) {
        float d = absmax(x, QUANT_QK_K) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int g = 0; g < QUANT_QK_K / 32; g++) {
            __m256i q = quantize_32(x + 32 * g, _mm256_set1_ps(id));
            _mm256_storeu_si256((__m256i *)(b[i].qs + 32 * g), q);
            /* Sums of 16: pairs via maddubs(1, q), then within each 128-bit lane. */
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), _mm256_set1_epi16(1));
            __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
            lo = _mm_hadd_epi32(lo, hi);       /* 4 sums of 8 */
            lo = _mm_hadd_epi32(lo, lo);       /* 2 sums of 16 */
            b[i].bsums[2 * g] = (int16_t)_mm_cvtsi128_si32(lo);
            b[i].bsums[2 * g + 1] = (int16_t)_mm_extract_epi32(lo, 1);
        }
    }
}

/* ---- float weights ---------------------------------------------------------------------- */

static float dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* NW weight rows by NX activation rows; per pair the arithmetic of dot_f32_avx2 (two
 * accumulators over 16-element steps, one more 8-element step into the first, the horizontal
 * sum, then the scalar tail), so each value equals it bit for bit. */
ALWAYS_INLINE void tile_f32_avx2(const float *w, const int NW, const float *x, const int NX, int64_t n, float *y,
                                 size_t ys) {
    __m256 s0[2][2], s1[2][2];
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 2
        for (int c = 0; c < NX; c++) s0[r][c] = s1[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 wa[2], wb[2];
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++) wa[r] = _mm256_loadu_ps(w + r * n + i), wb[r] = _mm256_loadu_ps(w + r * n + i + 8);
#pragma GCC unroll 2
        for (int c = 0; c < NX; c++) {
            const __m256 xa = _mm256_loadu_ps(x + c * n + i), xb = _mm256_loadu_ps(x + c * n + i + 8);
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                s0[r][c] = _mm256_fmadd_ps(wa[r], xa, s0[r][c]);
                s1[r][c] = _mm256_fmadd_ps(wb[r], xb, s1[r][c]);
            }
        }
    }
    if (i + 8 <= n) {
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++)
#pragma GCC unroll 2
            for (int c = 0; c < NX; c++)
                s0[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * n + i), _mm256_loadu_ps(x + c * n + i), s0[r][c]);
        i += 8;
    }
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 2
        for (int c = 0; c < NX; c++) {
            float s = hsum_ps(_mm256_add_ps(s0[r][c], s1[r][c]));
            for (int64_t j = i; j < n; j++) s += w[r * n + j] * x[c * n + j];
            y[(size_t)c * ys + (size_t)r] = s;
        }
}

/* Tiles of two weight rows by two activation rows (8 accumulators: 8 loads per 8 multiply-adds,
 * against 2 loads per one in dot_f32). */
static void dot_f32_tile_avx2(const float *w, int nw, const float *x, int nx, int64_t n, float *y, size_t ys) {
    for (int c = 0; c < nx; c += 2) {
        const int two_x = nx - c >= 2;
        for (int r = 0; r < nw; r += 2) {
            const int two_w = nw - r >= 2;
            const float *wr = w + r * n, *xc = x + c * n;
            float *yy = y + (size_t)c * ys + (size_t)r;
            if (two_w && two_x) tile_f32_avx2(wr, 2, xc, 2, n, yy, ys);
            else if (two_w) tile_f32_avx2(wr, 2, xc, 1, n, yy, ys);
            else if (two_x) tile_f32_avx2(wr, 1, xc, 2, n, yy, ys);
            else tile_f32_avx2(wr, 1, xc, 1, n, yy, ys);
        }
    }
}

ALWAYS_INLINE __m256 load_w8(const uint8_t *w, int64_t i, int kind) {
    if (kind == W_F32) return _mm256_loadu_ps((const float *)(const void *)(w + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * i));
    if (kind == W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE float load_w1(const uint8_t *w, int64_t i, int kind) {
    uint16_t h;
    if (kind == W_F32) {
        float f;
        memcpy(&f, w + 4 * i, 4);
        return f;
    }
    memcpy(&h, w + 2 * i, 2);
    return kind == W_F16 ? _cvtsh_ss(h) : quant_bf16_to_f32(h);
}

ALWAYS_INLINE void dot_float_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx,
                                float *out, int kind) {
    __m256 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = load_w8(w, i, kind);
        for (int r = 0; r < nx; r++)
            acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps((const float *)(const void *)(x + r * xs) + i), acc[r]);
    }
    for (int r = 0; r < nx; r++) {
        const float *xr = (const float *)(const void *)(x + r * xs);
        float s = hsum_ps(acc[r]);
        for (int64_t j = i; j < n; j++) s += load_w1(w, j, kind) * xr[j];
        out[r] = s;
    }
}

/* ---- 32-element blocks against q8_a -------------------------------------------------------- */

ALWAYS_INLINE void dot_32_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx,
                             float *out, int kind) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        float dw;
        __m256i q = decode_32(w, i, kind, &dw);
        __m256i aq = _mm256_sign_epi8(q, q);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_a *xb = (const quant_block_q8_a *)(const void *)(x + r * xs) + i;
            __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(load256(xb->qs), q));
            __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            acc[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw * xb->d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]);
}

/* ---- k-quants against q8_K ---------------------------------------------------------------- */

/* Q4_K and Q5_K (five = W_Q5_K): chunk c of 32 nibble bytes holds sub-block 2c (low
 * nibbles) and 2c+1 (high); Q5_K's fifth bits of those are bits 2c and 2c+1 of qh[l], brought
 * to bits 0 and 1 by shifting qh right 2 per chunk, then to bit 4 of each byte. */
ALWAYS_INLINE void dot_k4_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                             const int five) {
    __m256 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q4_K *b = (const quant_block_q4_K *)(const void *)(w + (size_t)i * K4_BYTES(five));
        const uint8_t *qs = (const uint8_t *)b + K4_QS(five);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b->scales, sc, mn);
        float dw = f16_load(b->d), dmw = f16_load(b->dmin);
        __m256i hb = five ? load256(((const quant_block_q5_K *)(const void *)b)->qh) : _mm256_setzero_si256();
        __m256i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            k4_chunk(qs + 32 * c, five, &hb, &lo, &hi);
            __m256i s_lo = _mm256_set1_epi16(sc[2 * c]), s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
            for (int r = 0; r < nx; r++) {
                const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xb->qs + 64 * c)), s_lo);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xb->qs + 64 * c + 32)), s_hi);
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(p0, p1));
            }
        }
        /* Min term: m_j pairs with bsums 2j and 2j+1. */
        __m256i mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3],
                                         mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
            __m256i ms = _mm256_madd_epi16(load256(xb->bsums), mins);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(dw * xb->d), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmw * xb->d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]);
}

/* Q6_K: per half of 128, ql (64 bytes) and qh (32 bytes) give four 32-element runs;
 * run k takes ql[k%2 half] nibble k/2 and qh bits 2k..2k+1; sub-blocks of 16 use scales
 * 2k and 2k+1. The -32 bias is applied once per block via the bsums. */
ALWAYS_INLINE void dot_q6_K_nx(int64_t n, const quant_block_q6_K *w, const char *x, size_t xs,
                               const int nx, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    __m256 acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q6_K *b = &w[i];
        float dw = f16_load(b->d);
        __m256i isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q0 = load256(b->ql + 64 * h), q1 = load256(b->ql + 64 * h + 32);
            __m256i hb = load256(b->qh + 32 * h);
            __m256i v[4];
            v[0] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
            v[1] = _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
            v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(hb, m2));
            v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
            for (int k = 0; k < 4; k++) {
                const int8_t *s = b->scales + 8 * h + 2 * k;
                __m256i sv = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
                for (int r = 0; r < nx; r++) {
                    const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
                    __m256i p = _mm256_maddubs_epi16(v[k], load256(xb->qs + 128 * h + 32 * k));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, sv));
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + r * xs) + i;
            __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(load256(xb->bsums), sc16), 5);
            __m256 s = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], bias));
            acc[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw * xb->d), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]);
}

DEFINE_QUANT_ENTRIES(avx2)

/* ---- dequantization (the fp32 matmul) ------------------------------------------------------ */
/* Each value as quant_dequantize_row computes it (quants.c, no fused multiply-adds anywhere):
 * the integer converted exactly, times the scale, then plus or minus the offset. */

/* 8 signed bytes at lane group g (0..3) of q as floats. */
ALWAYS_INLINE __m256 bytes8_ps(__m256i q, int g) {
    __m128i h = g < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    if (g & 1) h = _mm_srli_si128(h, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
}

/* y[0..32) = q * d (+ m where add): 32 signed bytes. */
ALWAYS_INLINE void store32(float *y, __m256i q, float d, int add, float m) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (int g = 0; g < 4; g++) {
        __m256 v = _mm256_mul_ps(bytes8_ps(q, g), vd);
        _mm256_storeu_ps(y + 8 * g, add ? _mm256_add_ps(v, vm) : v);
    }
}

/* Sub-block of 32 of Q4_K: y = d1 * q - m1. */
ALWAYS_INLINE void store32_k4(float *y, __m256i q, float d1, float m1) {
    const __m256 vd = _mm256_set1_ps(d1), vm = _mm256_set1_ps(m1);
    for (int g = 0; g < 4; g++) _mm256_storeu_ps(y + 8 * g, _mm256_sub_ps(_mm256_mul_ps(vd, bytes8_ps(q, g)), vm));
}

static int dequantize_row_avx2(int type, const void *src, float *dst, int64_t n) {
    const int direct = type == QUANT_Q8_0 || type == QUANT_Q4_0 || type == QUANT_Q5_0 || type == QUANT_Q4_1 ||
                       type == QUANT_Q4_K || type == QUANT_Q6_K;
    if (!direct || src == NULL || dst == NULL || n < 0 || n % quant_block_elems(type) != 0)
        return quant_dequantize_row(type, src, dst, n);
    const uint8_t *w = src;
    if (type == QUANT_Q8_0 || type == QUANT_Q4_0 || type == QUANT_Q5_0) {
        const int kind = type == QUANT_Q8_0 ? W_Q8_0 : type == QUANT_Q4_0 ? W_Q4_0 : W_Q5_0;
        for (int64_t i = 0; i < n / QUANT_QK; i++) {
            float d;
            __m256i q = decode_32(w, i, kind, &d);
            store32(dst + i * QUANT_QK, q, d, 0, 0.0f);
        }
    } else if (type == QUANT_Q4_1) {
        const quant_block_q4_1 *b = src;
        for (int64_t i = 0; i < n / QUANT_QK; i++, b++)
            store32(dst + i * QUANT_QK, nibbles_32(b->qs), f16_load(b->d), 1, f16_load(b->m));
    } else if (type == QUANT_Q4_K) {
        const quant_block_q4_K *b = src;
        for (int64_t i = 0; i < n / QUANT_QK_K; i++, b++) {
            const float d = f16_load(b->d), dmin = f16_load(b->dmin);
            uint8_t sc[8], mn[8];
            quant_k4_scales(b->scales, sc, mn);
            float *y = dst + i * QUANT_QK_K;
            for (int c = 0; c < 4; c++) {
                __m256i lo, hi, hb = _mm256_setzero_si256();
                k4_chunk(b->qs + 32 * c, 0, &hb, &lo, &hi);
                store32_k4(y + 64 * c, lo, d * (float)sc[2 * c], dmin * (float)mn[2 * c]);
                store32_k4(y + 64 * c + 32, hi, d * (float)sc[2 * c + 1], dmin * (float)mn[2 * c + 1]);
            }
        }
    } else { /* Q6_K: element 32k + l of half h: low 4 bits from ql[64h + 32(k & 1) + l] (the
              * high nibble for k >= 2), bits 4-5 from qh[32h + l] >> 2k; minus 32 */
        const quant_block_q6_K *b = src;
        const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03), b32 = _mm256_set1_epi8(32);
        for (int64_t i = 0; i < n / QUANT_QK_K; i++, b++) {
            const float d = f16_load(b->d);
            float *y = dst + i * QUANT_QK_K;
            for (int h = 0; h < 2; h++) {
                const __m256i qh = load256(b->qh + 32 * h);
                for (int k = 0; k < 4; k++) {
                    __m256i ql = load256(b->ql + 64 * h + 32 * (k & 1));
                    ql = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
                    __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
                    __m256i q = _mm256_sub_epi8(_mm256_or_si256(ql, _mm256_slli_epi16(hi2, 4)), b32);
                    for (int g = 0; g < 4; g++) {
                        const float dl = d * (float)b->scales[8 * h + (32 * k + 8 * g) / 16];
                        _mm256_storeu_ps(y + 128 * h + 32 * k + 8 * g, _mm256_mul_ps(_mm256_set1_ps(dl), bytes8_ps(q, g)));
                    }
                }
            }
        }
    }
    return QUANT_OK;
}

void quant_fill_avx2(quant_kernels *k) {
    k->name = "avx2";
    k->quantize_q8_a = quantize_q8_a_avx2;
    k->quantize_q8_K = quantize_q8_K_avx2;
    k->quantize_q8_a1 = quantize_q8_a1_avx2;
    k->dot_f32 = dot_f32_avx2;
    k->dot_f32_tile = dot_f32_tile_avx2;
    k->dequantize_row = dequantize_row_avx2;
    FILL_QUANT_ENTRIES(k, avx2);
}

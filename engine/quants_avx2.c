/* AVX2 + FMA + F16C kernels (compile this file alone with -mavx2 -mfma -mf16c).
 *
 * Integer dots use maddubs (u8 x s8 -> pairs summed to s16) and madd (s16 x s16 -> s32),
 * so each block's integer sum equals the scalar reference exactly. Q4_0, Q5_0, Q8_0, Q4_1,
 * Q4_K and Q6_K then follow the block rule of quants_simd.h (the AVX-512 sets' float
 * arithmetic, so the values are theirs bit for bit), in the row-wise kernels and in the
 * batched gemm kernels below; Q5_K and the float types keep eight float lanes per row.
 * Signed weights go through the usual sign trick in the row-wise kernels: |w| as unsigned
 * times sign(w)*y, which keeps maddubs in range because activations are within [-127, 127]
 * (quant_quantize_*: symmetric, never -128); the gemm takes the activations + 128 as the
 * unsigned side instead.
 *
 * Each row-wise kernel decodes a weight block once and applies it to NX activation rows; NX is
 * a compile-time constant in every inlined instance so the accumulators stay in registers. */
#include <math.h>

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

/* An empty asm that claims to change v: the vector is then held in a register, not folded into
 * each multiply-add as a memory operand. */
#define KEEP_IN_REG(v) __asm__("" : "+x"(v))

/* NW weight rows by NX activation rows; per pair the arithmetic of dot_f32_avx2 (two
 * accumulators over 16-element steps, one more 8-element step into the first, the horizontal
 * sum, then the scalar tail), so each value equals it bit for bit. Each half step loads every
 * weight and activation vector once into a register: NW + NX loads for NW * NX multiply-adds.
 * Left to itself gcc folds the loads into the multiply-adds, one or two loads per multiply-add,
 * and on cores with one 256-bit load per cycle (Zen 1) that halved the throughput. */
ALWAYS_INLINE void tile_f32_avx2(const float *w, const int NW, const float *x, const int NX, int64_t n, float *y,
                                 size_t ys) {
    __m256 s0[2][2], s1[2][2];
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 2
        for (int c = 0; c < NX; c++) s0[r][c] = s1[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) { /* h = 0: elements i..i+7 into s0; h = 1: i+8..i+15 into s1 */
            __m256 wv[2];
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                wv[r] = _mm256_loadu_ps(w + r * n + i + 8 * h);
                KEEP_IN_REG(wv[r]);
            }
#pragma GCC unroll 2
            for (int c = 0; c < NX; c++) {
                __m256 xv = _mm256_loadu_ps(x + c * n + i + 8 * h);
                KEEP_IN_REG(xv);
#pragma GCC unroll 2
                for (int r = 0; r < NW; r++) {
                    if (h == 0) s0[r][c] = _mm256_fmadd_ps(wv[r], xv, s0[r][c]);
                    else s1[r][c] = _mm256_fmadd_ps(wv[r], xv, s1[r][c]);
                }
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

/* ---- Q4_0, Q5_0, Q8_0, Q4_1: the block rule of quants_simd.h ------------------------------- */

/* The int32 sums of all eight lanes of p[0], p[1], p[2], p[3], as four lanes. */
ALWAYS_INLINE __m128i blk_sums4(const __m256i p[4]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Blocks i .. i+nb-1 (nb = 1..4, a constant) of the row against nx activation rows, into each
 * row's partials (lane k: block i+k; lanes past nb kept as they are). */
ALWAYS_INLINE void dot_blk_group(const uint8_t *w, int64_t i, const int nb, const char *x, size_t xs, const int nx,
                                 __m128 *acc, const int kind) {
    const size_t xb = BLK_XBYTES(kind), xq = BLK_XQS(kind);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i q[4], a[4];
    __m128 dw4, mw4;
    blk_scales4(w, i, nb, kind, &dw4, &mw4);
    for (int k = 0; k < 4; k++) {
        float d, m;
        q[k] = k < nb ? blk_decode(w, i + k, kind, &d, &m) : _mm256_setzero_si256();
        a[k] = kind == B_Q4_1 ? q[k] : _mm256_sign_epi8(q[k], q[k]);
    }
    const __m128 live = _mm_castsi128_ps(_mm_cmpgt_epi32(_mm_set1_epi32(nb), _mm_setr_epi32(0, 1, 2, 3)));
    for (int r = 0; r < nx; r++) {
        const char *xr = x + (size_t)r * xs + (size_t)i * xb;
        __m256i p[4];
        for (int k = 0; k < 4; k++) {
            if (k < nb) {
                const __m256i y = load256(xr + k * xb + xq);
                p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(a[k], kind == B_Q4_1 ? y : _mm256_sign_epi8(y, q[k])), ones);
            } else
                p[k] = _mm256_setzero_si256();
        }
        __m128 dx4, sx4;
        blk_act4(xr, nb, kind, &dx4, &sx4);
        __m128 v = _mm_fmadd_ps(_mm_cvtepi32_ps(blk_sums4(p)), _mm_mul_ps(dw4, dx4), acc[r]);
        if (kind == B_Q4_1) v = _mm_fmadd_ps(mw4, sx4, v);
        acc[r] = nb == 4 ? v : _mm_blendv_ps(acc[r], v, live);
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

/* 8 x 8 transpose of 32-bit lanes: out[g] holds lane g of in[0..7] (row j at lane j). */
ALWAYS_INLINE void transpose8_epi32(const __m256i in[8], __m256i out[8]) {
    __m256i a[8], b[8];
    for (int j = 0; j < 8; j += 2) {
        a[j] = _mm256_unpacklo_epi32(in[j], in[j + 1]);     /* lanes 0 1 | 4 5 of rows j, j+1 */
        a[j + 1] = _mm256_unpackhi_epi32(in[j], in[j + 1]); /* lanes 2 3 | 6 7 */
    }
    for (int j = 0; j < 8; j += 4) {
        b[j] = _mm256_unpacklo_epi64(a[j], a[j + 2]);         /* lane 0 | 4 of rows j..j+3 */
        b[j + 1] = _mm256_unpackhi_epi64(a[j], a[j + 2]);     /* lane 1 | 5 */
        b[j + 2] = _mm256_unpacklo_epi64(a[j + 1], a[j + 3]); /* lane 2 | 6 */
        b[j + 3] = _mm256_unpackhi_epi64(a[j + 1], a[j + 3]); /* lane 3 | 7 */
    }
    for (int g = 0; g < 4; g++) {
        out[g] = _mm256_permute2x128_si256(b[g], b[g + 4], 0x20);
        out[g + 4] = _mm256_permute2x128_si256(b[g], b[g + 4], 0x31);
    }
}

/* ---- the batched kernels (gemm): 8 weight rows per vector, one int32 lane per row ----------
 *
 * matmul hands up to 16 rows (QUANT_GEMM_ROWS); they are decoded as two groups of 8 into the
 * scratch. Without vpdpbusd, each 4-byte broadcast of an activation meets a group by vpmaddubsw
 * (pairs to int16); the int16 sums of four such steps are added before one vpmaddwd by ones
 * (|w| <= 16 and u <= 255: four steps stay within 4 * 2 * 255 * 16 = 32640), so an int32 lane
 * gets 16 products for 5 instructions. */

/* 32-element types, per block and group: 8 vectors (vector g: bytes 4g .. 4g+3 of the 8 rows),
 * then per row 128 * sum(q) (int32), the scale and the offset (float). */
#define G8_BLK_BYTES (11 * 32)
_Static_assert(2 * G8_BLK_BYTES <= 768, "quant_gemm_scratch_bytes covers two groups of a block");

ALWAYS_INLINE void gemm8_blk_decode(int64_t nb, const uint8_t *w, size_t wrb, int nw, uint8_t *scr, const int kind) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = scr + (size_t)b * G8_BLK_BYTES;
        __m256i q[8], t[8];
        int32_t ws[8];
        float dw[8], mw[8];
        for (int j = 0; j < 8; j++) {
            q[j] = _mm256_setzero_si256();
            dw[j] = mw[j] = 0.0f;
            if (j < nw) q[j] = blk_decode(w + (size_t)j * wrb, b, kind, &dw[j], &mw[j]);
            /* sum of q: sum of (q + 128) by sad, less 32 * 128 */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q[j], bias), _mm256_setzero_si256());
            const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            ws[j] = (int32_t)(128 * (_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128));
        }
        transpose8_epi32(q, t);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(void *)(blk + 32 * g), t[g]);
        memcpy(blk + 256, ws, sizeof ws);
        memcpy(blk + 288, dw, sizeof dw);
        memcpy(blk + 320, mw, sizeof mw);
    }
}

/* Block b of a group against NY activation rows (their unsigned bytes xu) into acc. */
ALWAYS_INLINE void gemm8_blk_step(const uint8_t *blk, int64_t b, const char *x, size_t xs, const uint8_t *xu,
                                  size_t xus, const int NY, __m256 *acc, const int kind) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s[4], t[4];
    for (int yy = 0; yy < 4; yy++) s[yy] = t[yy] = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        for (int g = 4 * h; g < 4 * h + 4; g++) {
            const __m256i wv = load256(blk + 32 * g);
            for (int yy = 0; yy < NY; yy++) {
                int32_t v;
                memcpy(&v, xu + (size_t)yy * xus + (size_t)b * QUANT_QK + 4 * g, 4);
                const __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi32(v), wv);
                t[yy] = g == 4 * h ? p : _mm256_add_epi16(t[yy], p);
            }
        }
        for (int yy = 0; yy < NY; yy++) {
            const __m256i m = _mm256_madd_epi16(t[yy], ones);
            s[yy] = h == 0 ? m : _mm256_add_epi32(s[yy], m);
        }
    }
    const __m256i ws = load256(blk + 256);
    const __m256 dw = _mm256_loadu_ps((const float *)(const void *)(blk + 288));
    for (int yy = 0; yy < NY; yy++) {
        const char *xb = x + (size_t)yy * xs + (size_t)b * BLK_XBYTES(kind);
        float dx;
        memcpy(&dx, xb, 4);
        acc[yy] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[yy], ws)), _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
                                  acc[yy]);
        if (kind == B_Q4_1) {
            float sx;
            memcpy(&sx, xb + 4, 4);
            acc[yy] = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(const void *)(blk + 320)), _mm256_set1_ps(sx), acc[yy]);
        }
    }
}

/* y of nw (<= 8) rows for NY activation rows: the partials one at a time (partial p: blocks
 * p, p + 4, ...), each kept in registers over its blocks, then (P0 + P1) + (P2 + P3). */
ALWAYS_INLINE void gemm8_blk_rows(int64_t nb, const uint8_t *scr, const char *x, size_t xs, const uint8_t *xu,
                                  size_t xus, const int NY, float *y, size_t ys, int nw, const int kind) {
    __m256 part[4][4];
    for (int p = 0; p < 4; p++) {
        __m256 acc[4];
        for (int yy = 0; yy < NY; yy++) acc[yy] = _mm256_setzero_ps();
        for (int64_t b = p; b < nb; b += 4) gemm8_blk_step(scr + (size_t)b * G8_BLK_BYTES, b, x, xs, xu, xus, NY, acc, kind);
        for (int yy = 0; yy < NY; yy++) part[p][yy] = acc[yy];
    }
    for (int yy = 0; yy < NY; yy++) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(part[0][yy], part[1][yy]), _mm256_add_ps(part[2][yy], part[3][yy])));
        memcpy(y + (size_t)yy * ys, v, (size_t)nw * sizeof(float));
    }
}

ALWAYS_INLINE void gemm_blk(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, const uint8_t *xu,
                            size_t xus, int nx, float *y, size_t ys, void *scratch, const int kind) {
    const int64_t nb = n / QUANT_QK;
    for (int g0 = 0; g0 < nw; g0 += 8) {
        const int n8 = nw - g0 < 8 ? nw - g0 : 8;
        uint8_t *scr = (uint8_t *)scratch + (size_t)(g0 / 8) * (size_t)nb * G8_BLK_BYTES;
        gemm8_blk_decode(nb, (const uint8_t *)w + (size_t)g0 * wrb, wrb, n8, scr, kind);
        const char *xc = x;
        float *yg = y + g0;
#define ROWS(i, ny) gemm8_blk_rows(nb, scr, xc + (size_t)(i) * xs, xs, xu + (size_t)(i) * xus, xus, ny, yg + (size_t)(i) * ys, ys, n8, kind)
        IN_FOURS(nx, ROWS);
#undef ROWS
    }
}

DEFINE_GEMM(gemm_q4_0_avx2, B_Q4_0)
DEFINE_GEMM(gemm_q5_0_avx2, B_Q5_0)
DEFINE_GEMM(gemm_q4_1_avx2, B_Q4_1)

/* ---- k-quants against q8_K ---------------------------------------------------------------- */

/* The exact int sums of the eight lanes of a and of b, as floats (lanes 0 and 1). */
ALWAYS_INLINE __m128 hsum2_epi32(__m256i a, __m256i b) {
    __m256i h = _mm256_hadd_epi32(a, b);
    h = _mm256_hadd_epi32(h, h);
    return _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* Q4_K and Q5_K (five = W_Q5_K): chunk c of 32 nibble bytes holds sub-block 2c (low
 * nibbles) and 2c+1 (high); Q5_K's fifth bits of those are bits 2c and 2c+1 of qh[l], brought
 * to bits 0 and 1 by shifting qh right 2 per chunk, then to bit 4 of each byte. Q4_K follows
 * the block rule of the AVX-512 sets (per super-block S = sum_j sc_j * isum_j and M = sum_j
 * mn_j * bsum_j exact, P = fma(S, d * dx, P), P = fma(-M, dmin * dx, P), four partials by
 * super-block mod 4, doc/quants.md); Q5_K keeps eight float lanes per row. */
ALWAYS_INLINE void dot_k4_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                             const int five) {
    __m256 acc[QUANT_DOT_MAX_NX];
    float part[QUANT_DOT_MAX_NX][4];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps(), part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.0f;
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
            if (five) {
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(dw * xb->d), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmw * xb->d), acc[r]);
            } else {
                const __m128 sm = hsum2_epi32(isum[r], ms);
                float *p = &part[r][i & 3];
                *p = fmaf(_mm_cvtss_f32(sm), dw * xb->d, *p);
                *p = fmaf(-_mm_cvtss_f32(_mm_movehdup_ps(sm)), dmw * xb->d, *p);
            }
        }
    }
    for (int r = 0; r < nx; r++) out[r] = five ? hsum_ps(acc[r]) : (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
}
ALWAYS_INLINE void dot_k4c_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out) {
    dot_k4_nx(n, w, x, xs, nx, out, W_Q4_K);
}

/* Q6_K: per half of 128, ql (64 bytes) and qh (32 bytes) give four 32-element runs;
 * run k takes ql[k%2 half] nibble k/2 and qh bits 2k..2k+1; sub-blocks of 16 use scales
 * 2k and 2k+1. The -32 bias is applied once per block via the bsums. The block rule: the
 * super-block's exact int sum S, P = fma(S, d * dx, P) into four partials by super-block
 * mod 4. */
ALWAYS_INLINE void dot_q6_K_nx(int64_t n, const quant_block_q6_K *w, const char *x, size_t xs,
                               const int nx, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    float part[QUANT_DOT_MAX_NX][4];
    for (int r = 0; r < nx; r++) part[r][0] = part[r][1] = part[r][2] = part[r][3] = 0.0f;
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
            float *p = &part[r][i & 3];
            *p = fmaf(_mm_cvtss_f32(hsum2_epi32(_mm256_sub_epi32(isum[r], bias), _mm256_setzero_si256())), dw * xb->d, *p);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
}

/* ---- the k-quants' batched kernels (gemm), the block rule of dot_k4c_nx / dot_q6_K_nx --------
 *
 * Scratch per super-block and group of 8 rows: 64 vectors of the unsigned values (vector G:
 * elements 4G .. 4G+3 of the 8 rows; Q4_K's nibbles, Q6_K's 6-bit values before the -32),
 * at 2048 the sub-block scales as int16 pairs (sc, sc) per row (Q4_K 8 vectors, Q6_K 16),
 * then Q4_K: the mins as pairs (mn_j, mn_j) (8 vectors), d, dmin; Q6_K: the scales as pairs
 * (sc_2k, sc_2k+1) for the -32 offset (8 vectors), d. Each activation broadcast meets a
 * vector by vpmaddubsw (unsigned values x signed activations); a run of such steps is summed
 * in int16 (Q4_K: a sub-block's 8, at most 8 * 2 * 15 * 127 = 30480; Q6_K: 2, at most
 * 2 * 2 * 63 * 127 = 32004), then one vpmaddwd by the scale pairs gives sc * (the run's sum). */
#define G8_K4_BYTES (64 * 32 + 8 * 32 + 8 * 32 + 2 * 32)
#define G8_Q6_BYTES (64 * 32 + 16 * 32 + 8 * 32 + 32)
_Static_assert(2 * G8_K4_BYTES <= 8 * 768 && 2 * G8_Q6_BYTES <= 8 * 768,
               "quant_gemm_scratch_bytes covers two groups of a super-block");

ALWAYS_INLINE int32_t pair16(int a, int b) { return (int32_t)((uint32_t)(uint16_t)(int16_t)a | ((uint32_t)(uint16_t)(int16_t)b << 16)); }

ALWAYS_INLINE void gemm8_k_decode(int64_t nb, const uint8_t *w, size_t wrb, int nw, uint8_t *scr, const int q6) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    const size_t bytes = q6 ? G8_Q6_BYTES : G8_K4_BYTES;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = scr + (size_t)i * bytes;
        __m256i v[8][8], t[8]; /* v[m][row]: elements 32m .. 32m+31 of the row */
        int32_t scp[16][8], mnp[8][8];
        float dv[2][8];
        for (int j = 0; j < 8; j++) {
            dv[0][j] = dv[1][j] = 0.0f;
            for (int m = 0; m < 8; m++) v[m][j] = _mm256_setzero_si256();
            for (int k = 0; k < 16; k++) scp[k][j] = 0;
            for (int k = 0; k < 8; k++) mnp[k][j] = 0;
            if (j >= nw) continue;
            if (q6) {
                const quant_block_q6_K *b = (const quant_block_q6_K *)(const void *)(w + (size_t)j * wrb) + i;
                dv[0][j] = f16_load(b->d);
                for (int h = 0; h < 2; h++) { /* as dot_q6_K_nx */
                    const __m256i q0 = load256(b->ql + 64 * h), q1 = load256(b->ql + 64 * h + 32);
                    const __m256i hb = load256(b->qh + 32 * h);
                    v[4 * h][j] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
                    v[4 * h + 1][j] = _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
                    v[4 * h + 2][j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(hb, m2));
                    v[4 * h + 3][j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                                      _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
                }
                for (int k = 0; k < 16; k++) scp[k][j] = pair16(b->scales[k], b->scales[k]);
                for (int k = 0; k < 8; k++) mnp[k][j] = pair16(b->scales[2 * k], b->scales[2 * k + 1]);
            } else {
                const quant_block_q4_K *b = (const quant_block_q4_K *)(const void *)(w + (size_t)j * wrb) + i;
                uint8_t sc[8], mn[8];
                quant_k4_scales(b->scales, sc, mn);
                dv[0][j] = f16_load(b->d);
                dv[1][j] = f16_load(b->dmin);
                __m256i hb = _mm256_setzero_si256();
                for (int c = 0; c < 4; c++) k4_chunk(b->qs + 32 * c, 0, &hb, &v[2 * c][j], &v[2 * c + 1][j]);
                for (int k = 0; k < 8; k++) scp[k][j] = pair16(sc[k], sc[k]), mnp[k][j] = pair16(mn[k], mn[k]);
            }
        }
        for (int m = 0; m < 8; m++) {
            transpose8_epi32(v[m], t);
            for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(void *)(blk + (size_t)(8 * m + g) * 32), t[g]);
        }
        const int nsc = q6 ? 16 : 8;
        memcpy(blk + 2048, scp, (size_t)nsc * 32);
        memcpy(blk + 2048 + (size_t)nsc * 32, mnp, sizeof mnp);
        memcpy(blk + 2048 + (size_t)nsc * 32 + 256, dv, q6 ? 32 : sizeof dv);
    }
}

/* Super-block i of a group against NY activation rows into acc. */
ALWAYS_INLINE void gemm8_k_step(const uint8_t *blk, int64_t i, const char *x, size_t xs, const int NY, __m256 *acc,
                                const int q6) {
    const int nsub = q6 ? 16 : 8, per = q6 ? 4 : 8, run = q6 ? 2 : 8;
    const quant_block_q8_K *xb[4];
    __m256i S[4], M[4], t[4];
    for (int yy = 0; yy < 4; yy++) S[yy] = M[yy] = t[yy] = _mm256_setzero_si256();
    for (int yy = 0; yy < NY; yy++) xb[yy] = (const quant_block_q8_K *)(const void *)(x + (size_t)yy * xs) + i;
    for (int k = 0; k < nsub; k++) {
        const __m256i sp = load256(blk + 2048 + 32 * k);
        for (int g = 0; g < per; g++) {
            const int G = per * k + g;
            const __m256i wv = load256(blk + (size_t)G * 32);
            for (int yy = 0; yy < NY; yy++) {
                int32_t a;
                memcpy(&a, xb[yy]->qs + 4 * G, 4);
                const __m256i p = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(a));
                t[yy] = g % run == 0 ? p : _mm256_add_epi16(t[yy], p);
            }
            if (g % run == run - 1)
                for (int yy = 0; yy < NY; yy++) S[yy] = _mm256_add_epi32(S[yy], _mm256_madd_epi16(t[yy], sp));
        }
    }
    const uint8_t *mp = blk + 2048 + 32 * nsub;
    for (int j = 0; j < 8; j++) {
        const __m256i mv = load256(mp + 32 * j);
        for (int yy = 0; yy < NY; yy++) {
            int32_t bs;
            memcpy(&bs, &xb[yy]->bsums[2 * j], 4);
            M[yy] = _mm256_add_epi32(M[yy], _mm256_madd_epi16(mv, _mm256_set1_epi32(bs)));
        }
    }
    const __m256 dw = _mm256_loadu_ps((const float *)(const void *)(mp + 256));
    for (int yy = 0; yy < NY; yy++) {
        const __m256 dx = _mm256_set1_ps(xb[yy]->d);
        if (q6) {
            const __m256i s = _mm256_sub_epi32(S[yy], _mm256_slli_epi32(M[yy], 5)); /* the values are q - 32 */
            acc[yy] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx), acc[yy]);
        } else {
            const __m256 dmw = _mm256_loadu_ps((const float *)(const void *)(mp + 288));
            acc[yy] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[yy]), _mm256_mul_ps(dw, dx), acc[yy]);
            acc[yy] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M[yy]), _mm256_mul_ps(dmw, dx), acc[yy]);
        }
    }
}

ALWAYS_INLINE void gemm8_k_rows(int64_t nb, const uint8_t *scr, const char *x, size_t xs, const int NY, float *y,
                                size_t ys, int nw, const int q6) {
    const size_t bytes = q6 ? G8_Q6_BYTES : G8_K4_BYTES;
    __m256 part[4][4];
    for (int p = 0; p < 4; p++) {
        __m256 acc[4];
        for (int yy = 0; yy < NY; yy++) acc[yy] = _mm256_setzero_ps();
        for (int64_t i = p; i < nb; i += 4) gemm8_k_step(scr + (size_t)i * bytes, i, x, xs, NY, acc, q6);
        for (int yy = 0; yy < NY; yy++) part[p][yy] = acc[yy];
    }
    for (int yy = 0; yy < NY; yy++) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(part[0][yy], part[1][yy]), _mm256_add_ps(part[2][yy], part[3][yy])));
        memcpy(y + (size_t)yy * ys, v, (size_t)nw * sizeof(float));
    }
}

ALWAYS_INLINE void gemm_k(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, int nx, float *y,
                          size_t ys, void *scratch, const int q6) {
    const int64_t nb = n / QUANT_QK_K;
    const size_t bytes = q6 ? G8_Q6_BYTES : G8_K4_BYTES;
    for (int g0 = 0; g0 < nw; g0 += 8) {
        const int n8 = nw - g0 < 8 ? nw - g0 : 8;
        uint8_t *scr = (uint8_t *)scratch + (size_t)(g0 / 8) * (size_t)nb * bytes;
        gemm8_k_decode(nb, (const uint8_t *)w + (size_t)g0 * wrb, wrb, n8, scr, q6);
        const char *xc = x;
        float *yg = y + g0;
#define ROWS(i, ny) gemm8_k_rows(nb, scr, xc + (size_t)(i) * xs, xs, ny, yg + (size_t)(i) * ys, ys, n8, q6)
        IN_FOURS(nx, ROWS);
#undef ROWS
    }
}

DEFINE_GEMM_K(gemm_q4_K_avx2, 0)
DEFINE_GEMM_K(gemm_q6_K_avx2, 1)

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
    /* the batched kernels (their dot entries follow the same block rule) */
    k->gemm[QUANT_Q4_0] = gemm_q4_0_avx2;
    k->gemm[QUANT_Q5_0] = gemm_q5_0_avx2;
    k->gemm[QUANT_Q4_1] = gemm_q4_1_avx2;
    k->gemm[QUANT_Q4_K] = gemm_q4_K_avx2;
    k->gemm[QUANT_Q6_K] = gemm_q6_K_avx2;
}

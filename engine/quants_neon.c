/* AArch64 Advanced SIMD (NEON) weight kernels: baseline ARMv8-A, nothing beyond it. On every
 * other target this file compiles to a declaration only; quants_dispatch.c registers the set
 * ("neon") on AArch64 after the reference. quants_neon_dotprod.c compiles this file again with
 * ARMv8.2-A dot products (QUANT_NEON_DOTPROD: vdotq_s32 for the int8 block sums, the "neon-dotprod"
 * set, picked where getauxval(AT_HWCAP) reports ASIMDDP).
 *
 * Integer block sums are exact, as the reference's: int8 x int8 products by widening multiplies
 * (vmull_s8 / vmlal_high_s8: at most two products per int16 lane for the signed 32-element
 * types, four for Q4_K's nibbles; then vpadalq_s16 or vmlal_n_s16 by the sub-block scale into
 * int32), or by vdotq_s32 in the dotprod build. Floats:
 * - Q4_0, Q5_0, Q8_0, Q4_1: the block rule of the x86 sets (quants_simd.h): per group of four
 *   blocks one int32x4 of block sums (lane k: block i+k), P = fma((float)isum, dw * dx, P) and for
 *   Q4_1 P = fma(m, s, P) in four lanes, the value (P0 + P1) + (P2 + P3);
 * - Q4_K, Q6_K: the reference's float arithmetic per super-block, in its order (so bit for bit the
 *   reference's values);
 * - F32, F16, BF16: two four-lane accumulators per activation row;
 * - dot_f32 is dot_f32_tile's 1 x 1 instance, so a tile equals dot_f32 bit for bit per pair;
 * - quantize_*: the reference's d, 1/d and products, vcvtnq_s32_f32 rounds to nearest even as
 *   nearbyintf does under the default rounding mode: the same bytes;
 * - dequantize_row: the reference's separate multiplies and adds (the build has
 *   -ffp-contract=off, so nothing is fused), the same bits.
 * Each dot kernel decodes a weight block once for all nx activation rows (nx a compile-time
 * constant in each instance). */
#include "quants.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <stddef.h>
#include <string.h>

#include "quants_entries.h"

#ifndef QUANT_NEON_DOTPROD
#define QUANT_NEON_DOTPROD 0
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- small helpers -------------------------------------------------------------------------- */

ALWAYS_INLINE uint16_t ld_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2); /* AArch64 Linux is little-endian, as the file format */
    return h;
}

ALWAYS_INLINE float f16_to_f32(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

ALWAYS_INLINE float ld_f32(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* ---- int8 block sums ---------------------------------------------------------------------------
 * acc + the 32 products w0·y0 and w1·y1 (lanes hold partial sums; only their total matters).
 * Widening: each int16 lane takes two products, |w| <= 128 and |y| <= 127 (the activations are
 * symmetric), so at most 32512. */
ALWAYS_INLINE int32x4_t sdot32(int32x4_t acc, int8x16_t w0, int8x16_t y0, int8x16_t w1, int8x16_t y1) {
#if QUANT_NEON_DOTPROD
    return vdotq_s32(vdotq_s32(acc, w0, y0), w1, y1);
#else
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(y0));
    p = vmlal_high_s8(p, w0, y0);
    int16x8_t q = vmull_s8(vget_low_s8(w1), vget_low_s8(y1));
    q = vmlal_high_s8(q, w1, y1);
    return vpadalq_s16(vpadalq_s16(acc, p), q);
#endif
}

/* acc + sc * (32 products of unsigned 4-bit w0, w1 by y0, y1): Q4_K's sub-block of 32. Four
 * products per int16 lane: |.| <= 4 * 15 * 128. */
ALWAYS_INLINE int32x4_t sdot32_scaled(int32x4_t acc, int8x16_t w0, int8x16_t y0, int8x16_t w1, int8x16_t y1,
                                      int16_t sc) {
#if QUANT_NEON_DOTPROD
    return vmlaq_n_s32(acc, vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, y0), w1, y1), sc);
#else
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(y0));
    p = vmlal_high_s8(p, w0, y0);
    p = vmlal_s8(p, vget_low_s8(w1), vget_low_s8(y1));
    p = vmlal_high_s8(p, w1, y1);
    return vmlal_high_n_s16(vmlal_n_s16(acc, vget_low_s16(p), sc), p, sc);
#endif
}

/* acc + sc * (16 products w·y): Q6_K's sub-block of 16 (|w| <= 32, two products per int16 lane). */
ALWAYS_INLINE int32x4_t sdot16_scaled(int32x4_t acc, int8x16_t w, int8x16_t y, int16_t sc) {
#if QUANT_NEON_DOTPROD
    return vmlaq_n_s32(acc, vdotq_s32(vdupq_n_s32(0), w, y), sc);
#else
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(y));
    p = vmlal_high_s8(p, w, y);
    return vmlal_high_n_s16(vmlal_n_s16(acc, vget_low_s16(p), sc), p, sc);
#endif
}

/* ---- activation quantization ---------------------------------------------------------------- */

/* max |x_j| over n (a multiple of 16) floats; maxnm ignores a NaN as the reference's compare does. */
ALWAYS_INLINE float absmax(const float *x, int n) {
    float32x4_t m0 = vdupq_n_f32(0.0f), m1 = m0, m2 = m0, m3 = m0;
    for (int j = 0; j < n; j += 16) {
        m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + j)));
        m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + j + 4)));
        m2 = vmaxnmq_f32(m2, vabsq_f32(vld1q_f32(x + j + 8)));
        m3 = vmaxnmq_f32(m3, vabsq_f32(vld1q_f32(x + j + 12)));
    }
    return vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(m0, m1), vmaxnmq_f32(m2, m3)));
}

/* 16 values: round_half_even(x * id) as int8 (|x * id| <= 127 by the choice of d). */
ALWAYS_INLINE int8x16_t quantize_16(const float *x, float32x4_t id) {
    int32x4_t a = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x), id));
    int32x4_t b = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4), id));
    int32x4_t c = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 8), id));
    int32x4_t d = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 12), id));
    int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)), cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
    return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

/* d = max|x| / 127 and 1/d (0 for an all-zero block), as quantize_block_ref. */
ALWAYS_INLINE float block_scale(const float *x, int n, float *id) {
    float d = absmax(x, n) / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

static void quantize_q8_a_neon(const float *x, void *dst, int64_t n) {
    quant_block_q8_a *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float id, d = block_scale(x, QUANT_QK, &id);
        b[i].d = d;
        vst1q_s8(b[i].qs, quantize_16(x, vdupq_n_f32(id)));
        vst1q_s8(b[i].qs + 16, quantize_16(x + 16, vdupq_n_f32(id)));
    }
}

static void quantize_q8_a1_neon(const float *x, void *dst, int64_t n) {
    quant_block_q8_a1 *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float id, d = block_scale(x, QUANT_QK, &id);
        int8x16_t q0 = quantize_16(x, vdupq_n_f32(id)), q1 = quantize_16(x + 16, vdupq_n_f32(id));
        b[i].d = d;
        b[i].s = d * (float)(vaddlvq_s8(q0) + vaddlvq_s8(q1));
        vst1q_s8(b[i].qs, q0);
        vst1q_s8(b[i].qs + 16, q1);
    }
}

static void quantize_q8_K_neon(const float *x, void *dst, int64_t n) {
    quant_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++, x += QUANT_QK_K) {
        float id, d = block_scale(x, QUANT_QK_K, &id);
        b[i].d = d;
        for (int g = 0; g < QUANT_QK_K / 16; g++) {
            int8x16_t q = quantize_16(x + 16 * g, vdupq_n_f32(id));
            vst1q_s8(b[i].qs + 16 * g, q);
            b[i].bsums[g] = vaddlvq_s8(q); /* |sum| <= 16 * 127: exact in int16 */
        }
    }
}

/* ---- fp32 dot and its tiles ------------------------------------------------------------------
 * Per pair: two accumulators over 8-element steps, one 4-element step into the first, the sum of
 * the two (vaddvq), then the scalar tail in order. dot_f32 is the 1 x 1 tile. */
ALWAYS_INLINE void tile_f32(const float *w, const int NW, const float *x, const int NX, int64_t n, float *y, size_t ys) {
    float32x4_t s0[2][4], s1[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) s0[r][c] = s1[r][c] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t wa[2], wb[2];
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++) wa[r] = vld1q_f32(w + r * n + i), wb[r] = vld1q_f32(w + r * n + i + 4);
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) {
            const float32x4_t xa = vld1q_f32(x + c * n + i), xb = vld1q_f32(x + c * n + i + 4);
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                s0[r][c] = vfmaq_f32(s0[r][c], wa[r], xa);
                s1[r][c] = vfmaq_f32(s1[r][c], wb[r], xb);
            }
        }
    }
    if (i + 4 <= n) {
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
            for (int c = 0; c < NX; c++) s0[r][c] = vfmaq_f32(s0[r][c], vld1q_f32(w + r * n + i), vld1q_f32(x + c * n + i));
        i += 4;
    }
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) {
            float s = vaddvq_f32(vaddq_f32(s0[r][c], s1[r][c]));
            for (int64_t j = i; j < n; j++) s += w[r * n + j] * x[c * n + j];
            y[(size_t)c * ys + (size_t)r] = s;
        }
}

static float dot_f32_neon(const float *a, const float *b, int64_t n) {
    float y;
    tile_f32(a, 1, b, 1, n, &y, 1);
    return y;
}

/* Tiles of up to two weight rows by four activation rows (16 accumulators). */
#define TILE_NX(NW_)                                                                                  \
    switch (nx) {                                                                                     \
    case 1: tile_f32(wr, NW_, x, 1, n, yy, ys); break;                                                \
    case 2: tile_f32(wr, NW_, x, 2, n, yy, ys); break;                                                \
    case 3: tile_f32(wr, NW_, x, 3, n, yy, ys); break;                                                \
    default: tile_f32(wr, NW_, x, 4, n, yy, ys); break;                                               \
    }
_Static_assert(QUANT_F32_TILE == 4, "tile_f32 covers nx = 1..4");

static void dot_f32_tile_neon(const float *w, int nw, const float *x, int nx, int64_t n, float *y, size_t ys) {
    for (int r = 0; r < nw; r += 2) {
        const float *wr = w + r * n;
        float *yy = y + r;
        if (nw - r >= 2) {
            TILE_NX(2)
        } else {
            TILE_NX(1)
        }
    }
}

/* ---- float weights (F32, F16, BF16) against fp32 rows ------------------------------------------ */

enum { W_F32, W_F16, W_BF16 };

ALWAYS_INLINE float32x4_t load_w4(const uint8_t *w, int64_t i, const int kind) {
    if (kind == W_F32) return vreinterpretq_f32_u8(vld1q_u8(w + 4 * i));
    const uint16x4_t h = vreinterpret_u16_u8(vld1_u8(w + 2 * i));
    if (kind == W_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

ALWAYS_INLINE float load_w1(const uint8_t *w, int64_t i, const int kind) {
    if (kind == W_F32) return ld_f32(w + 4 * i);
    return kind == W_F16 ? f16_to_f32(ld_u16(w + 2 * i)) : quant_bf16_to_f32(ld_u16(w + 2 * i));
}

ALWAYS_INLINE void dot_float_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                                const int kind) {
    float32x4_t a0[QUANT_DOT_MAX_NX], a1[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) a0[r] = a1[r] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t w0 = load_w4(w, i, kind), w1 = load_w4(w, i + 4, kind);
        for (int r = 0; r < nx; r++) {
            const float *xr = (const float *)(const void *)(x + (size_t)r * xs) + i;
            a0[r] = vfmaq_f32(a0[r], w0, vld1q_f32(xr));
            a1[r] = vfmaq_f32(a1[r], w1, vld1q_f32(xr + 4));
        }
    }
    if (i + 4 <= n) {
        const float32x4_t w0 = load_w4(w, i, kind);
        for (int r = 0; r < nx; r++)
            a0[r] = vfmaq_f32(a0[r], w0, vld1q_f32((const float *)(const void *)(x + (size_t)r * xs) + i));
        i += 4;
    }
    for (int r = 0; r < nx; r++) {
        const float *xr = (const float *)(const void *)(x + (size_t)r * xs);
        float s = vaddvq_f32(vaddq_f32(a0[r], a1[r]));
        for (int64_t j = i; j < n; j++) s += load_w1(w, j, kind) * xr[j];
        out[r] = s;
    }
}

/* ---- Q4_0, Q5_0, Q8_0, Q4_1: the block rule ------------------------------------------------------ */

enum { B_Q4_0, B_Q5_0, B_Q8_0, B_Q4_1 };

#define BLK_WBYTES(kind)                                                                              \
    ((kind) == B_Q4_0 ? sizeof(quant_block_q4_0)                                                      \
     : (kind) == B_Q5_0 ? sizeof(quant_block_q5_0)                                                    \
     : (kind) == B_Q8_0 ? sizeof(quant_block_q8_0)                                                    \
                        : sizeof(quant_block_q4_1))
#define BLK_XBYTES(kind) ((kind) == B_Q4_1 ? sizeof(quant_block_q8_a1) : sizeof(quant_block_q8_a))
#define BLK_XQS(kind) ((kind) == B_Q4_1 ? offsetof(quant_block_q8_a1, qs) : offsetof(quant_block_q8_a, qs))
_Static_assert(offsetof(quant_block_q4_0, d) == 0 && offsetof(quant_block_q4_1, d) == 0 &&
                   offsetof(quant_block_q5_0, d) == 0 && offsetof(quant_block_q8_0, d) == 0,
               "the scale leads every 32-element block");

/* 32 bytes: byte k is 0xFF where bit k of qh is set (Q5_0's fifth bits), as two vectors. */
ALWAYS_INLINE void bits_to_bytes(uint32_t qh, uint8x16_t *b0, uint8x16_t *b1) {
    static const uint8_t lo_idx[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(qh)), idx = vld1q_u8(lo_idx), bit = vld1q_u8(bits);
    *b0 = vtstq_u8(vqtbl1q_u8(v, idx), bit);
    *b1 = vtstq_u8(vqtbl1q_u8(v, vaddq_u8(idx, vdupq_n_u8(2))), bit);
}

/* The 32 weights of the block at b as int8 (Q4_1: its nibbles 0..15): elements 0..15, 16..31. */
ALWAYS_INLINE void blk_decode(const uint8_t *b, const int kind, int8x16_t *w0, int8x16_t *w1) {
    if (kind == B_Q8_0) {
        *w0 = vld1q_s8((const int8_t *)(b + offsetof(quant_block_q8_0, qs)));
        *w1 = vld1q_s8((const int8_t *)(b + offsetof(quant_block_q8_0, qs) + 16));
        return;
    }
    const size_t off = kind == B_Q4_0 ? offsetof(quant_block_q4_0, qs)
                       : kind == B_Q5_0 ? offsetof(quant_block_q5_0, qs)
                                        : offsetof(quant_block_q4_1, qs);
    const uint8x16_t v = vld1q_u8(b + off);
    uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
    if (kind == B_Q4_0) {
        lo = vsubq_u8(lo, vdupq_n_u8(8));
        hi = vsubq_u8(hi, vdupq_n_u8(8));
    } else if (kind == B_Q5_0) {
        /* q - 16 as int8: where the fifth bit is clear, the nibble with the top four bits set;
         * where it is set, the plain nibble */
        uint32_t qh;
        memcpy(&qh, b + offsetof(quant_block_q5_0, qh), 4);
        uint8x16_t s0, s1;
        bits_to_bytes(qh, &s0, &s1);
        lo = vorrq_u8(lo, vbicq_u8(vdupq_n_u8(0xF0), s0));
        hi = vorrq_u8(hi, vbicq_u8(vdupq_n_u8(0xF0), s1));
    }
    *w0 = vreinterpretq_s8_u8(lo);
    *w1 = vreinterpretq_s8_u8(hi);
}

/* Blocks i .. i+nb-1 (nb = 1..4, a constant) against nx activation rows, into each row's four
 * partials (lane k: blocks = k mod 4; lanes past nb get fma(0, 0, P) = P). */
ALWAYS_INLINE void dot_blk_group(const uint8_t *w, int64_t i, const int nb, const char *x, size_t xs, const int nx,
                                 float32x4_t *acc, const int kind) {
    const size_t wb = BLK_WBYTES(kind), xb = BLK_XBYTES(kind), xq = BLK_XQS(kind);
    int8x16_t q0[4], q1[4];
    uint16_t hd[4] = {0, 0, 0, 0}, hm[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        q0[k] = q1[k] = vdupq_n_s8(0);
        if (k < nb) {
            const uint8_t *b = w + (size_t)(i + k) * wb;
            blk_decode(b, kind, &q0[k], &q1[k]);
            hd[k] = ld_u16(b);
            if (kind == B_Q4_1) hm[k] = ld_u16(b + offsetof(quant_block_q4_1, m));
        }
    }
    const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(hd)));
    const float32x4_t mw = kind == B_Q4_1 ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(hm))) : vdupq_n_f32(0.0f);
    for (int r = 0; r < nx; r++) {
        const char *xr = x + (size_t)r * xs + (size_t)i * xb;
        int32x4_t p[4];
        float dx[4] = {0, 0, 0, 0}, sx[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4; k++) {
            p[k] = vdupq_n_s32(0);
            if (k < nb) {
                const int8_t *y = (const int8_t *)(xr + (size_t)k * xb + xq);
                p[k] = sdot32(p[k], q0[k], vld1q_s8(y), q1[k], vld1q_s8(y + 16));
                dx[k] = ld_f32(xr + (size_t)k * xb);
                if (kind == B_Q4_1) sx[k] = ld_f32(xr + (size_t)k * xb + offsetof(quant_block_q8_a1, s));
            }
        }
        const int32x4_t s = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
        acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s), vmulq_f32(dw, vld1q_f32(dx)));
        if (kind == B_Q4_1) acc[r] = vfmaq_f32(acc[r], mw, vld1q_f32(sx));
    }
}

ALWAYS_INLINE void dot_blk_nx(int64_t n, const uint8_t *w, const char *x, size_t xs, const int nx, float *out,
                              const int kind) {
    float32x4_t acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = vdupq_n_f32(0.0f);
#define BLK_STEP(i, nbk) dot_blk_group(w, i, nbk, x, xs, nx, acc, kind)
    IN_FOURS(n / QUANT_QK, BLK_STEP);
#undef BLK_STEP
    for (int r = 0; r < nx; r++) {
        const float32x2_t h = vpadd_f32(vget_low_f32(acc[r]), vget_high_f32(acc[r])); /* P0+P1, P2+P3 */
        out[r] = vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
    }
}

/* ---- Q4_K against q8_K ----------------------------------------------------------------------------
 * Chunk c of 32 nibble bytes: sub-block 2c in the low nibbles, 2c+1 in the high ones, against
 * activations 64c .. 64c+31 and 64c+32 .. 64c+63. isum = sum_j sc_j * <q, y>_j, msum = sum_j mn_j *
 * (bsums 2j + bsums 2j+1), exact; then the reference's float expression. */
ALWAYS_INLINE void dot_q4_K_nx(int64_t n, const quant_block_q4_K *w, const char *x, size_t xs, const int nx,
                               float *out) {
    float acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q4_K *b = &w[i];
        uint8_t sc[8], mn[8];
        quant_k4_scales(b->scales, sc, mn);
        int32x4_t isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            const uint8x16_t v0 = vld1q_u8(b->qs + 32 * c), v1 = vld1q_u8(b->qs + 32 * c + 16);
            const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(v0, m4)), lo1 = vreinterpretq_s8_u8(vandq_u8(v1, m4));
            const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
            for (int r = 0; r < nx; r++) {
                const int8_t *y = ((const quant_block_q8_K *)(const void *)(x + (size_t)r * xs) + i)->qs + 64 * c;
                isum[r] = sdot32_scaled(isum[r], lo0, vld1q_s8(y), lo1, vld1q_s8(y + 16), sc[2 * c]);
                isum[r] = sdot32_scaled(isum[r], hi0, vld1q_s8(y + 32), hi1, vld1q_s8(y + 48), sc[2 * c + 1]);
            }
        }
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
        const float dw = f16_to_f32(ld_u16(b->d)), dmin = f16_to_f32(ld_u16(b->dmin));
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + (size_t)r * xs) + i;
            /* pairs of bsums (|.| <= 32 * 127) times the eight mins */
            const int16x8_t bs = vpaddq_s16(vld1q_s16(xb->bsums), vld1q_s16(xb->bsums + 8));
            const int32x4_t m = vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mins)), bs, mins);
            const int is = vaddvq_s32(isum[r]), ms = vaddvq_s32(m);
            acc[r] += xb->d * (dw * (float)is - dmin * (float)ms);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = acc[r];
}

/* ---- Q6_K against q8_K ----------------------------------------------------------------------------
 * Half h (128 values): run k (32 values) takes ql[64h + 32(k&1) ...] (the high nibbles for k >= 2)
 * and bits 2k, 2k+1 of qh[32h ...]; its two sub-blocks of 16 have scales 8h + 2k and 8h + 2k + 1.
 * The values are made signed (q - 32) once per weight block; then the reference's float
 * expression per super-block. */
ALWAYS_INLINE void dot_q6_K_nx(int64_t n, const quant_block_q6_K *w, const char *x, size_t xs, const int nx,
                               float *out) {
    float acc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
    const int8x16_t b32 = vdupq_n_s8(32);
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        const quant_block_q6_K *b = &w[i];
        int32x4_t isum[QUANT_DOT_MAX_NX];
        for (int r = 0; r < nx; r++) isum[r] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            int8x16_t q[8]; /* run k, vector v at 2k + v */
            for (int v = 0; v < 2; v++) {
                const uint8x16_t l0 = vld1q_u8(b->ql + 64 * h + 16 * v), l1 = vld1q_u8(b->ql + 64 * h + 32 + 16 * v);
                const uint8x16_t hb = vld1q_u8(b->qh + 32 * h + 16 * v);
                const uint8x16_t u0 = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m2));
                const uint8x16_t u1 = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m2));
                const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m2));
                const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m2));
                q[0 + v] = vsubq_s8(vreinterpretq_s8_u8(u0), b32);
                q[2 + v] = vsubq_s8(vreinterpretq_s8_u8(u1), b32);
                q[4 + v] = vsubq_s8(vreinterpretq_s8_u8(u2), b32);
                q[6 + v] = vsubq_s8(vreinterpretq_s8_u8(u3), b32);
            }
            const int8_t *sc = b->scales + 8 * h;
            for (int r = 0; r < nx; r++) {
                const int8_t *y = ((const quant_block_q8_K *)(const void *)(x + (size_t)r * xs) + i)->qs + 128 * h;
                for (int s = 0; s < 8; s++) isum[r] = sdot16_scaled(isum[r], q[s], vld1q_s8(y + 16 * s), sc[s]);
            }
        }
        const float dw = f16_to_f32(ld_u16(b->d));
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_K *xb = (const quant_block_q8_K *)(const void *)(x + (size_t)r * xs) + i;
            acc[r] += (dw * xb->d) * (float)vaddvq_s32(isum[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = acc[r];
}

/* ---- entry points: one instance per constant nx ---------------------------------------------------- */

/* NX_SWITCH and DEFINE_QUANT: quants_entries.h */

#define CALL_F32(k) dot_float_nx(n, w, x, xs, k, out, W_F32)
#define CALL_F16(k) dot_float_nx(n, w, x, xs, k, out, W_F16)
#define CALL_BF16(k) dot_float_nx(n, w, x, xs, k, out, W_BF16)
#define CALL_Q4_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q4_0)
#define CALL_Q5_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q5_0)
#define CALL_Q8_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q8_0)
#define CALL_Q4_1(k) dot_blk_nx(n, w, x, xs, k, out, B_Q4_1)
#define CALL_Q4_K(k) dot_q4_K_nx(n, w, x, xs, k, out)
#define CALL_Q6_K(k) dot_q6_K_nx(n, w, x, xs, k, out)

DEFINE_QUANT(dot_f32_row_neon, CALL_F32)
DEFINE_QUANT(dot_f16_row_neon, CALL_F16)
DEFINE_QUANT(dot_bf16_row_neon, CALL_BF16)
DEFINE_QUANT(dot_q4_0_neon, CALL_Q4_0)
DEFINE_QUANT(dot_q5_0_neon, CALL_Q5_0)
DEFINE_QUANT(dot_q8_0_neon, CALL_Q8_0)
DEFINE_QUANT(dot_q4_1_neon, CALL_Q4_1)
DEFINE_QUANT(dot_q4_K_neon, CALL_Q4_K)
DEFINE_QUANT(dot_q6_K_neon, CALL_Q6_K)

/* ---- dequantization (the fp32 matmul): quant_dequantize_row's arithmetic, bit for bit ----------------
 * The integer converted exactly, times the scale, then plus (Q4_1) or minus (Q4_K) the offset, each
 * a separate rounding as in quants.c. Scales through quant_f16_load, the reference's converter. */

/* 16 int8 as four float32x4 (exact). */
ALWAYS_INLINE void s8_to_f32x16(int8x16_t q, float32x4_t f[4]) {
    const int16x8_t a = vmovl_s8(vget_low_s8(q)), b = vmovl_high_s8(q);
    f[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(a)));
    f[1] = vcvtq_f32_s32(vmovl_high_s16(a));
    f[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(b)));
    f[3] = vcvtq_f32_s32(vmovl_high_s16(b));
}

/* y[0..16) = q * d, then + m where add (Q4_1). */
ALWAYS_INLINE void store16(float *y, int8x16_t q, float d, const int add, float m) {
    float32x4_t f[4];
    s8_to_f32x16(q, f);
    const float32x4_t vd = vdupq_n_f32(d), vm = vdupq_n_f32(m);
    for (int g = 0; g < 4; g++) {
        const float32x4_t v = vmulq_f32(f[g], vd);
        vst1q_f32(y + 4 * g, add ? vaddq_f32(v, vm) : v);
    }
}

/* y[0..16) = d1 * q - m1 (Q4_K). */
ALWAYS_INLINE void store16_k4(float *y, int8x16_t q, float d1, float m1) {
    float32x4_t f[4];
    s8_to_f32x16(q, f);
    const float32x4_t vd = vdupq_n_f32(d1), vm = vdupq_n_f32(m1);
    for (int g = 0; g < 4; g++) vst1q_f32(y + 4 * g, vsubq_f32(vmulq_f32(vd, f[g]), vm));
}

static int dequantize_row_neon(int type, const void *src, float *dst, int64_t n) {
    const int direct = type == QUANT_Q8_0 || type == QUANT_Q4_0 || type == QUANT_Q5_0 || type == QUANT_Q4_1 ||
                       type == QUANT_Q4_K || type == QUANT_Q6_K;
    if (!direct || src == NULL || dst == NULL || n < 0 || n % quant_block_elems(type) != 0)
        return quant_dequantize_row(type, src, dst, n);
    const uint8_t *w = src;
    if (type == QUANT_Q8_0 || type == QUANT_Q4_0 || type == QUANT_Q5_0 || type == QUANT_Q4_1) {
        const int q41 = type == QUANT_Q4_1;
        const size_t bb = quant_block_bytes(type);
        for (int64_t i = 0; i < n / QUANT_QK; i++) {
            const uint8_t *b = w + (size_t)i * bb;
            int8x16_t q0, q1;
            if (type == QUANT_Q8_0) blk_decode(b, B_Q8_0, &q0, &q1);
            else if (type == QUANT_Q4_0) blk_decode(b, B_Q4_0, &q0, &q1);
            else if (type == QUANT_Q5_0) blk_decode(b, B_Q5_0, &q0, &q1);
            else blk_decode(b, B_Q4_1, &q0, &q1);
            const float d = quant_f16_load(b), m = q41 ? quant_f16_load(b + offsetof(quant_block_q4_1, m)) : 0.0f;
            float *y = dst + i * QUANT_QK;
            if (q41) {
                store16(y, q0, d, 1, m);
                store16(y + 16, q1, d, 1, m);
            } else {
                store16(y, q0, d, 0, 0.0f);
                store16(y + 16, q1, d, 0, 0.0f);
            }
        }
    } else if (type == QUANT_Q4_K) {
        const quant_block_q4_K *b = src;
        const uint8x16_t m4 = vdupq_n_u8(0x0F);
        for (int64_t i = 0; i < n / QUANT_QK_K; i++, b++) {
            const float d = quant_f16_load(b->d), dmin = quant_f16_load(b->dmin);
            uint8_t sc[8], mn[8];
            quant_k4_scales(b->scales, sc, mn);
            float *y = dst + i * QUANT_QK_K;
            for (int c = 0; c < 4; c++) {
                const uint8x16_t v0 = vld1q_u8(b->qs + 32 * c), v1 = vld1q_u8(b->qs + 32 * c + 16);
                const float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
                const float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
                store16_k4(y + 64 * c, vreinterpretq_s8_u8(vandq_u8(v0, m4)), d1, m1);
                store16_k4(y + 64 * c + 16, vreinterpretq_s8_u8(vandq_u8(v1, m4)), d1, m1);
                store16_k4(y + 64 * c + 32, vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), d2, m2);
                store16_k4(y + 64 * c + 48, vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), d2, m2);
            }
        }
    } else { /* Q6_K: as in dot_q6_K_nx, run k of half h, sub-blocks of 16 */
        const quant_block_q6_K *b = src;
        const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
        const int8x16_t b32 = vdupq_n_s8(32);
        for (int64_t i = 0; i < n / QUANT_QK_K; i++, b++) {
            const float d = quant_f16_load(b->d);
            float *y = dst + i * QUANT_QK_K;
            for (int h = 0; h < 2; h++)
                for (int v = 0; v < 2; v++) {
                    const uint8x16_t l0 = vld1q_u8(b->ql + 64 * h + 16 * v), l1 = vld1q_u8(b->ql + 64 * h + 32 + 16 * v);
                    const uint8x16_t hb = vld1q_u8(b->qh + 32 * h + 16 * v);
                    uint8x16_t u[4];
                    u[0] = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m2));
                    u[1] = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m2));
                    u[2] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m2));
                    u[3] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m2));
                    for (int k = 0; k < 4; k++) {
                        const float dl = d * (float)b->scales[8 * h + 2 * k + v];
                        float32x4_t f[4];
                        s8_to_f32x16(vsubq_s8(vreinterpretq_s8_u8(u[k]), b32), f);
                        for (int g = 0; g < 4; g++)
                            vst1q_f32(y + 128 * h + 32 * k + 16 * v + 4 * g, vmulq_f32(vdupq_n_f32(dl), f[g]));
                    }
                }
        }
    }
    return QUANT_OK;
}

#if QUANT_NEON_DOTPROD
#define NEON_FILL quant_fill_neon_dotprod
#define NEON_NAME "neon-dotprod"
#else
#define NEON_FILL quant_fill_neon
#define NEON_NAME "neon"
#endif

void NEON_FILL(quant_kernels *k) {
    k->name = NEON_NAME;
    k->quantize_q8_a = quantize_q8_a_neon;
    k->quantize_q8_K = quantize_q8_K_neon;
    k->quantize_q8_a1 = quantize_q8_a1_neon;
    k->dot_f32 = dot_f32_neon;
    k->dot_f32_tile = dot_f32_tile_neon;
    k->dequantize_row = dequantize_row_neon;
    k->dot[QUANT_F32] = dot_f32_row_neon;
    k->dot[QUANT_F16] = dot_f16_row_neon;
    k->dot[QUANT_BF16] = dot_bf16_row_neon;
    k->dot[QUANT_Q4_0] = dot_q4_0_neon;
    k->dot[QUANT_Q4_1] = dot_q4_1_neon;
    k->dot[QUANT_Q5_0] = dot_q5_0_neon;
    k->dot[QUANT_Q8_0] = dot_q8_0_neon;
    k->dot[QUANT_Q4_K] = dot_q4_K_neon;
    k->dot[QUANT_Q6_K] = dot_q6_K_neon;
}

#endif

/* What the x86 weight kernels (quants_avx2.c, quants_avx512.c) share: fp16 and 256-bit
 * loads, the decode of a 32-element block to signed bytes (AVX2 width in both files), and the
 * block rule of the 32-element types (quants_entries.h has the entry points: one instance per
 * constant nx over the kernels each file defines: dot_float_nx, dot_blk_nx, dot_k4c_nx, dot_k4_nx for Q5_K,
 * dot_q6_K_nx). Included only from files compiled with at least -mavx2 -mfma -mf16c;
 * everything is inlined, so each file keeps its own ISA. */
#ifndef TQ_ENGINE_QUANTS_SIMD_H
#define TQ_ENGINE_QUANTS_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "quants.h"
#include "quants_entries.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float f16_load(const uint8_t p[2]) {
    uint16_t h;
    memcpy(&h, p, 2); /* x86 is little-endian, as the file format */
    return _cvtsh_ss(h);
}

ALWAYS_INLINE __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 32 bytes: byte k is 0xFF where bit k of m is set (Q5_0 high bits, ggml qh order). */
ALWAYS_INLINE __m256i bits_to_bytes(uint32_t m) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* 16 packed nibbles -> 32 bytes: low nibbles are elements 0..15, high 16..31. */
ALWAYS_INLINE __m256i nibbles_32(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

enum { W_F32, W_F16, W_BF16 };
enum { W_Q4_0, W_Q5_0, W_Q8_0 };
enum { W_Q4_K, W_Q5_K };

/* Q4_K and Q5_K share their first 16 bytes (d, dmin, 12 scale bytes); Q5_K then has 32 bytes
 * of fifth bits before its 128 nibble bytes. */
#define K4_BYTES(five) ((five) ? sizeof(quant_block_q5_K) : sizeof(quant_block_q4_K))
#define K4_QS(five) ((five) ? offsetof(quant_block_q5_K, qs) : offsetof(quant_block_q4_K, qs))
_Static_assert(offsetof(quant_block_q5_K, scales) == offsetof(quant_block_q4_K, scales), "k4 scales");

/* One 32-byte chunk of Q4_K/Q5_K nibbles (chunk c: sub-block 2c in the low nibbles, 2c+1 in
 * the high) as unsigned bytes. Q5_K (five): the fifth bits of the chunk are bits 0 and 1 of
 * each byte of *hb (qh, shifted right by 2 per chunk here), moved to bit 4. */
ALWAYS_INLINE void k4_chunk(const uint8_t *qs, int five, __m256i *hb, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256i v = load256(qs);
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(*hb, 4), b4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_slli_epi16(*hb, 3), b4));
        *hb = _mm256_srli_epi16(*hb, 2);
    }
}

/* Signed int8 weights of block i (row of kind `kind`) and its fp16 scale. */
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
    /* q - 16 as int8: where the 5th bit is clear the value is nibble - 16, i.e. the nibble
     * with the top four bits set; where it is set, the plain nibble. */
    return _mm256_or_si256(nibbles_32(b->qs), _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8((char)0xF0)));
}

/* ---- Q4_0, Q5_0, Q4_1, Q8_0: the block rule (doc/quants.md) --------------------------------
 *
 * Per block b: isum_b, the exact int sum of the 32 products (Q4_0/Q5_0/Q8_0 weights signed, Q4_1's
 * unsigned nibbles); c_b = dw_b * dx_b in float; four partial sums by b mod 4, taken in block
 * order: P = fma((float)isum_b, c_b, P), then for Q4_1 P = fma(m_b, s_b, P); the value is
 * (P0 + P1) + (P2 + P3). Every x86 set's row-wise kernel (dot, any nx) and batched kernel
 * (gemm) computes exactly that, so a value does not depend on the set, on how many activation
 * rows a call takes or on which kernel took it (tested bit for bit). */
enum { B_Q4_0 = W_Q4_0, B_Q5_0 = W_Q5_0, B_Q8_0 = W_Q8_0, B_Q4_1 = 3 };
_Static_assert(W_Q4_0 != 3 && W_Q5_0 != 3, "B_Q4_1 distinct");

/* Block i of a row as bytes (signed for Q4_0/Q5_0, Q4_1's nibbles), its scale and offset. */
ALWAYS_INLINE __m256i blk_decode(const uint8_t *w, int64_t i, const int kind, float *d, float *m) {
    if (kind == B_Q4_1) {
        const quant_block_q4_1 *b = (const quant_block_q4_1 *)(const void *)w + i;
        *d = f16_load(b->d);
        *m = f16_load(b->m);
        return nibbles_32(b->qs);
    }
    *m = 0.0f;
    return decode_32(w, i, kind, d);
}

/* Bytes of the activation block the type takes (q8_a, or q8_a1 for Q4_1); d is its first
 * float, q8_a1's s the second, and the 32 values follow. */
#define BLK_XBYTES(kind) ((kind) == B_Q4_1 ? sizeof(quant_block_q8_a1) : sizeof(quant_block_q8_a))
#define BLK_XQS(kind) ((kind) == B_Q4_1 ? offsetof(quant_block_q8_a1, qs) : offsetof(quant_block_q8_a, qs))

/* q8_a1's (d, s) of blocks k and k+1 (or k alone) as [d s d' s']: adjacent, one 8-byte load each. */
ALWAYS_INLINE __m128 ds_pair(const char *xr, size_t xb, int k, const int both) {
    int64_t lo, hi = 0;
    memcpy(&lo, xr + (size_t)k * xb, 8);
    if (both) memcpy(&hi, xr + (size_t)(k + 1) * xb, 8);
    return _mm_castsi128_ps(_mm_set_epi64x(hi, lo));
}

/* The fp16 scales (and Q4_1's offsets) of blocks i .. i+nb-1 (nb = 1..4) as four lanes, in one
 * conversion; lanes past nb are 0. */
ALWAYS_INLINE void blk_scales4(const uint8_t *w, int64_t i, const int nb, const int kind, __m128 *dw, __m128 *mw) {
    if (kind == B_Q4_1) {
        const quant_block_q4_1 *b = (const quant_block_q4_1 *)(const void *)w + i;
        int32_t h[4] = {0, 0, 0, 0}; /* [d0 m0 d1 m1 | d2 m2 d3 m3] after the conversion */
        for (int k = 0; k < nb; k++) memcpy(&h[k], b[k].d, 4);
        const __m256 dm = _mm256_cvtph_ps(_mm_setr_epi32(h[0], h[1], h[2], h[3]));
        const __m128 lo = _mm256_castps256_ps128(dm), hi = _mm256_extractf128_ps(dm, 1);
        *dw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        *mw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        return;
    }
    const size_t bb = kind == B_Q4_0 ? sizeof(quant_block_q4_0)
                    : kind == B_Q5_0 ? sizeof(quant_block_q5_0) : sizeof(quant_block_q8_0);
    const uint8_t *b = w + (size_t)i * bb; /* each block's first two bytes */
    int16_t h[4] = {0, 0, 0, 0};
    for (int k = 0; k < nb; k++) memcpy(&h[k], b + k * bb, 2);
    *dw = _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0));
    *mw = _mm_setzero_ps();
}

/* The activation blocks' d (and q8_a1's s) of blocks 0 .. nb-1 from xr, as four lanes (0 past nb). */
ALWAYS_INLINE void blk_act4(const char *xr, const int nb, const int kind, __m128 *dx, __m128 *sx) {
    const size_t xb = BLK_XBYTES(kind);
    if (kind == B_Q4_1) {
        const __m128 a = ds_pair(xr, xb, 0, nb >= 2), e = nb >= 3 ? ds_pair(xr, xb, 2, nb == 4) : _mm_setzero_ps();
        *dx = _mm_shuffle_ps(a, e, _MM_SHUFFLE(2, 0, 2, 0));
        *sx = _mm_shuffle_ps(a, e, _MM_SHUFFLE(3, 1, 3, 1));
        return;
    }
    float d[4] = {0, 0, 0, 0};
    for (int k = 0; k < nb; k++) memcpy(&d[k], xr + k * xb, 4);
    *dx = _mm_setr_ps(d[0], d[1], d[2], d[3]);
    *sx = _mm_setzero_ps();
}

ALWAYS_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- entry points: one instance per constant nx ----------------------------------------- */

/* NX_SWITCH and DEFINE_QUANT: quants_entries.h */

#define CALL_F32(k) dot_float_nx(n, w, x, xs, k, out, W_F32)
#define CALL_F16(k) dot_float_nx(n, w, x, xs, k, out, W_F16)
#define CALL_BF16(k) dot_float_nx(n, w, x, xs, k, out, W_BF16)
#define CALL_Q4_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q4_0)
#define CALL_Q5_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q5_0)
#define CALL_Q8_0(k) dot_blk_nx(n, w, x, xs, k, out, B_Q8_0)
#define CALL_Q4_1(k) dot_blk_nx(n, w, x, xs, k, out, B_Q4_1)
#define CALL_Q4_K(k) dot_k4c_nx(n, w, x, xs, k, out)
#define CALL_Q5_K(k) dot_k4_nx(n, w, x, xs, k, out, W_Q5_K)
#define CALL_Q6_K(k) dot_q6_K_nx(n, w, x, xs, k, out)

/* The entry points dot_<type>_<isa> and the fill of their table entries. */
#define DEFINE_QUANT_ENTRIES(isa)                                                                 \
    DEFINE_QUANT(dot_f32_row_##isa, CALL_F32)                                                     \
    DEFINE_QUANT(dot_f16_row_##isa, CALL_F16)                                                     \
    DEFINE_QUANT(dot_bf16_row_##isa, CALL_BF16)                                                   \
    DEFINE_QUANT(dot_q4_0_##isa, CALL_Q4_0)                                                       \
    DEFINE_QUANT(dot_q4_1_##isa, CALL_Q4_1)                                                       \
    DEFINE_QUANT(dot_q5_0_##isa, CALL_Q5_0)                                                       \
    DEFINE_QUANT(dot_q8_0_##isa, CALL_Q8_0)                                                       \
    DEFINE_QUANT(dot_q4_K_##isa, CALL_Q4_K)                                                       \
    DEFINE_QUANT(dot_q5_K_##isa, CALL_Q5_K)                                                       \
    DEFINE_QUANT(dot_q6_K_##isa, CALL_Q6_K)
#define FILL_QUANT_ENTRIES(k, isa)                                                                \
    do {                                                                                          \
        (k)->dot[QUANT_F32] = dot_f32_row_##isa;                                                  \
        (k)->dot[QUANT_F16] = dot_f16_row_##isa;                                                  \
        (k)->dot[QUANT_BF16] = dot_bf16_row_##isa;                                                \
        (k)->dot[QUANT_Q4_0] = dot_q4_0_##isa;                                                    \
        (k)->dot[QUANT_Q4_1] = dot_q4_1_##isa;                                                    \
        (k)->dot[QUANT_Q5_0] = dot_q5_0_##isa;                                                    \
        (k)->dot[QUANT_Q8_0] = dot_q8_0_##isa;                                                    \
        (k)->dot[QUANT_Q4_K] = dot_q4_K_##isa;                                                    \
        (k)->dot[QUANT_Q5_K] = dot_q5_K_##isa;                                                    \
        (k)->dot[QUANT_Q6_K] = dot_q6_K_##isa;                                                    \
    } while (0)

#endif

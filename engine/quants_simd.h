/* What the x86 weight kernels (quants_avx2.c, quants_avx512.c) share: fp16 and 256-bit
 * loads, the decode of a 32-element block to signed bytes (AVX2 width in both files), and the
 * entry points, one instance per constant nx over the kernels each file defines
 * (dot_float_nx, dot_32_nx, dot_k4_nx, dot_q6_K_nx; Q4_1's dot_q4_1_256 is here). Included only from files compiled with
 * at least -mavx2 -mfma -mf16c; everything is inlined, so each file keeps its own ISA. */
#ifndef TQ_ENGINE_QUANTS_SIMD_H
#define TQ_ENGINE_QUANTS_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "quants.h"

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

ALWAYS_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sums of 4 adjacent u8 x s8 products as int32: one vpdpbusd where the file is compiled with
 * AVX512-VNNI (quants_vnni.c), else maddubs then madd by ones (equal: a maddubs pair is at
 * most 2 * 128 * 127 here, no saturation). */
ALWAYS_INLINE __m256i dot4_u8s8_256(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* Q4_1 against q8_a1 at 256-bit width, one block per step (the AVX2 kernel, and the VNNI
 * set's: measured faster than two blocks per 512-bit step, doc/quants.md). The nibbles are
 * unsigned, so they need no sign trick; the offset m meets the activation block's s. */
ALWAYS_INLINE void dot_q4_1_256(int64_t n, const quant_block_q4_1 *w, const char *x, size_t xs, const int nx,
                                float *out) {
    __m256 acc[QUANT_DOT_MAX_NX];
    float macc[QUANT_DOT_MAX_NX];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        __m256i q = nibbles_32(w[i].qs);
        float dw = f16_load(w[i].d), mw = f16_load(w[i].m);
        for (int r = 0; r < nx; r++) {
            const quant_block_q8_a1 *xb = (const quant_block_q8_a1 *)(const void *)(x + r * xs) + i;
            __m256i p = dot4_u8s8_256(q, load256(xb->qs));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xb->d), acc[r]);
            macc[r] += mw * xb->s;
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]) + macc[r];
}

/* ---- entry points: one instance per constant nx ----------------------------------------- */

#define NX_SWITCH(call)                                                                           \
    switch (nx) {                                                                                 \
    case 1: call(1); break;                                                                       \
    case 2: call(2); break;                                                                       \
    case 3: call(3); break;                                                                       \
    case 4: call(4); break;                                                                       \
    case 5: call(5); break;                                                                       \
    case 6: call(6); break;                                                                       \
    case 7: call(7); break;                                                                       \
    default: call(8); break;                                                                      \
    }
#define DEFINE_QUANT(name, call)                                                                  \
    static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) {    \
        NX_SWITCH(call)                                                                           \
    }
_Static_assert(QUANT_DOT_MAX_NX == 8, "NX_SWITCH covers nx = 1..8");

#define CALL_F32(k) dot_float_nx(n, w, x, xs, k, out, W_F32)
#define CALL_F16(k) dot_float_nx(n, w, x, xs, k, out, W_F16)
#define CALL_BF16(k) dot_float_nx(n, w, x, xs, k, out, W_BF16)
#define CALL_Q4_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q4_0)
#define CALL_Q5_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q5_0)
#define CALL_Q8_0(k) dot_32_nx(n, w, x, xs, k, out, W_Q8_0)
#define CALL_Q4_1(k) dot_q4_1_256(n, w, x, xs, k, out)
#define CALL_Q4_K(k) dot_k4_nx(n, w, x, xs, k, out, W_Q4_K)
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

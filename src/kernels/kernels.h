/*
 * The kernel table: every hot loop of the codecs, as function pointers filled once from cpuid.
 *
 * ref.c holds the scalar reference of each kernel, the ground truth; avx2.c and avx512.c hold
 * fast versions compiled with their own ISA flags, neon.c the AArch64 one. Contracts that every implementation keeps:
 *
 *  - Packed codes: a group of n indices of `bits` bits (1..8) is a little-endian bit stream,
 *    index i at bits [i·bits, (i+1)·bits), LSB first, filling tq_group_bytes(n, bits) bytes
 *    (whole uint32 words); the padding bits after the last index are zero. Packed bytes may sit
 *    at any address. Quantize, pack and unpack are bit-exact across implementations.
 *  - Quantization: idx = number of boundaries b_j with b_j < x·scale, for x·scale computed as
 *    one float multiply (so every implementation sees the same product).
 *  - Fixed-order sums (tq_sumsq, the Σc² of quantize_pack): 16 lanes, lane j adds the terms
 *    i ≡ j (mod 16) in increasing i, each term one float multiply then one float add (no FMA);
 *    then lanes combine as j += j+8, j += j+4, j += j+2, j += j+1. Bit-exact across
 *    implementations, so encodes are bit-exact too.
 *  - rht is bit-exact for inputs without NaN (a NaN stays a NaN in the same places, but its
 *    sign and payload may differ: even the reference depends on operand order there).
 *  - Other float results (dot, axpy, lookup) may differ in rounding; tests/test_kernels.c
 *    states the tolerance.
 */
#ifndef TQ_KERNELS_H
#define TQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define TQ_MAX_BITS 8

/* Bytes of a packed group of n indices at `bits` bits: whole uint32 words. */
static inline size_t tq_group_bytes(size_t n, int bits) {
    return ((n * (size_t)bits + 31) / 32) * 4;
}

typedef struct tq_kernel_table {
    const char *name;

    /* x = H (signs ⊙ x) in place: unnormalized fast Walsh–Hadamard transform of length
     * 2^log2n (1 ≤ log2n ≤ 10) after an elementwise product with signs (±1.0f; NULL: none).
     * Butterfly (a, b) → (a + b, a − b), strides 1, 2, 4, … so every element sees the same
     * float operations in every implementation (bit-exact). */
    void (*rht)(float *x, const float *signs, int log2n);

    /* Σ x_i² in the fixed order above. */
    float (*sumsq)(const float *x, int n);

    /* For i < n: s = x[i]·scale, idx = #{j : boundaries[j] < s} (levels − 1 = 2^bits − 1
     * boundaries), packed into out (tq_group_bytes(n, bits) bytes, padding zero). Returns
     * Σ centroids[idx_i]² in the fixed order. */
    float (*quantize_pack)(const float *x, float scale, int n, int bits,
                           const float *boundaries, const float *centroids, uint8_t *out);

    /* out[i] = scale · centroids[idx_i] for the n packed indices at in. */
    void (*unpack_lookup)(const uint8_t *in, int n, int bits, const float *centroids,
                          float scale, float *out);

    /* Σ_i q[i] · centroids[idx_i]. */
    float (*dot_codes)(const uint8_t *in, int n, int bits, const float *centroids,
                       const float *q);

    /* acc[i] += w · centroids[idx_i]. */
    void (*axpy_codes)(const uint8_t *in, int n, int bits, const float *centroids, float w,
                       float *acc);

    /* Trellis-coded indices (trellis.h, tq_trellis_quantize_pack): the same bits and the same
     * returned float on every set (one inline source, trellis_search.h, at each set's width). */
    float (*trellis_quantize_pack)(const float *x, float scale, int n, int bits,
                                   const float *pairs, int memory, uint8_t *out);
} tq_kernel_table;

/* The table in use (never NULL; initialized on first call, thread-safe). */
const tq_kernel_table *tq_kernels(void);

/* The individual tables; tq_kernels_avx2/avx512 return NULL when the build lacks them. Tests
 * run every table the host supports against tq_kernels_ref. */
const tq_kernel_table *tq_kernels_ref(void);
const tq_kernel_table *tq_kernels_avx2(void);
const tq_kernel_table *tq_kernels_avx512(void);
const tq_kernel_table *tq_kernels_neon(void); /* NULL unless built for AArch64 */

/* Reference helpers shared by the SIMD files for their tails. */
uint32_t tq_ref_get_index(const uint8_t *in, size_t i, int bits);
void tq_ref_put_index(uint8_t *out, size_t i, int bits, uint32_t idx);
uint32_t tq_ref_quantize_one(float s, int bits, const float *boundaries);
/* The reference rht (the SIMD sets use it below their register width). */
void tq_ref_rht(float *x, const float *signs, int log2n);

#endif

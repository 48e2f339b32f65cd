/* Declarations shared inside libturboquant; not part of the public API. */
#ifndef TQ_INTERNAL_H
#define TQ_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "turboquant.h"

/* Deterministic PRNG (splitmix64): the same seed gives the same stream on every machine. */
typedef struct tq_rng {
    uint64_t state;
} tq_rng;

void tq_rng_seed(tq_rng *rng, uint64_t seed, uint64_t stream);
uint64_t tq_rng_next(tq_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double tq_rng_uniform(tq_rng *rng);
/* Standard normal (Marsaglia's polar method). */
double tq_rng_gauss(tq_rng *rng);

/* Rotation internals used by the codecs: y ← R x up to a known scale, so that the scale can be
 * folded into the quantizer's one multiply. After the call, R x = (*scale) · x. */
void tq_rotation_forward_raw(const tq_rotation *rot, float *x, float *scale);

/* tq_rotation_create with `rounds` rounds of signs and Hadamard transform (HADAMARD and
 * BLOCK_HADAMARD; 0: the default, TQ_HADAMARD_ROUNDS / 3). The q8_0r / q4_0r formats take one
 * round (kv_records.c). */
tq_status tq_rotation_create_rounds(tq_rotation **out, int dim, uint64_t seed,
                                    tq_rotation_kind kind, int rounds);

/* For tests: the sign vector (dim floats, ±1) of round r, and the number of rounds (0 for a
 * dense rotation). */
const float *tq_rotation_signs(const tq_rotation *rot, int round);
int tq_rotation_rounds(const tq_rotation *rot);

/* The sized-struct rule (doc/api.md, "Sized structs"). tq_sized_in copies a caller's struct src
 * (first field: size_t struct_size) over *dst, which holds the defaults and is `known` bytes;
 * fields src does not have keep their defaults and dst's struct_size becomes `known`.
 * TQ_ERR_INVALID for a size below `min` (the fields every version has), or above `known` with a
 * non-zero byte past `known`, or above TQ_SIZED_MAX (never read). */
#define TQ_SIZED_MAX ((size_t)4096)
tq_status tq_sized_in(void *dst, const void *src, size_t known, size_t min);
/* Copies `known` bytes of src into the caller's out of out_size bytes: the first
 * min(out_size, known) bytes, the rest of out zeroed. TQ_ERR_CAPACITY when out_size < min. With
 * has_size, out's first field (struct_size) becomes the bytes copied. */
tq_status tq_sized_out(void *out, size_t out_size, const void *src, size_t known, size_t min,
                       int has_size);

/* A TQ_ROPE_PAIRS_* value that fits a head of dim channels (pairs need an even dim). */
static inline int tq_rope_pairs_valid(int pairs, int dim) {
    return pairs == TQ_ROPE_PAIRS_NONE || ((pairs == TQ_ROPE_PAIRS_ADJACENT || pairs == TQ_ROPE_PAIRS_HALVES) && dim % 2 == 0);
}

static inline int tq_is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

static inline int tq_log2i(int n) {
    int l = 0;
    while ((1 << (l + 1)) <= n) l++;
    return l;
}

/* Little-endian loads and stores at any address. */
static inline void tq_store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline uint16_t tq_load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void tq_store_f32(uint8_t *p, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline float tq_load_f32(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                 ((uint32_t)p[3] << 24);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

#endif

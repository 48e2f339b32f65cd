/*
 * Trellis-coded indices (doc/codec.md, "Trellis codes"): the scalar kernels every kernel set
 * shares. A group of n indices of `bits` bits is packed exactly as kernels.h's packed codes;
 * what differs is the value an index stands for: coordinate i decodes to
 * pairs[idx_i·L + prev] with L = 2^bits and prev = idx_{i−1} (prev = 0 for i = 0) — the
 * 2·bits bits of the stream that end with index i, read as one number — so each coordinate has
 * L² possible values and the encoder (a Viterbi search over the L states)
 * chooses the whole path of indices that minimises Σ (x_i·scale − value_i)². The tables of pair
 * values (src/trellis_tables.c, tools/gen_trellis.c) live in the codec; the kernels only read
 * them.
 */
#ifndef TQ_KERNELS_TRELLIS_H
#define TQ_KERNELS_TRELLIS_H

#include <stddef.h>
#include <stdint.h>

#define TQ_TRELLIS_MIN_BITS 2
#define TQ_TRELLIS_MAX_BITS 4

/* For the n values s_i = x[i]·scale (one float multiply each), the index path of least
 * Σ (s_i − value_i)² (ties: the lower previous state, then the lower final state), packed into
 * out (tq_group_bytes(n, bits) bytes, padding zero). Returns Σ value_i² in kernels.h's fixed
 * 16-lane order. Deterministic: the same floats give the same bits on every machine.
 * bits in [TQ_TRELLIS_MIN_BITS, TQ_TRELLIS_MAX_BITS], n ≤ TQ_MAX_DIM (1024).
 * memory: the table's (src/trellis_tables.h): 2^bits searches over every previous index; 2
 * (bits 3, 4; the table must then be two-state: pairs[t·L + p] depends on t and p's top bit
 * only) searches over the previous index's top bit — the same least cost, found 2–4.6× faster
 * (trellis_search.h), with its own tie rules (the lowest index within a half, then state 0). */
float tq_trellis_quantize_pack(const float *x, float scale, int n, int bits, const float *pairs,
                               int memory, uint8_t *out);

/* out[i] = scale · value_i for the n packed indices at in. */
void tq_trellis_unpack(const uint8_t *in, int n, int bits, const float *pairs, float scale,
                       float *out);

#endif

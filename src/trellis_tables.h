/*
 * The pair tables of trellis-coded indices (doc/codec.md, "Trellis codes"; the kernels:
 * src/kernels/trellis.h). Generated data in src/trellis_tables.c (tools/gen_trellis.c).
 */
#ifndef TQ_TRELLIS_TABLES_H
#define TQ_TRELLIS_TABLES_H

typedef struct tq_trellis_table {
    int bits, levels;   /* levels = 2^bits */
    int memory;         /* the value of (c, p) depends on c and the top log2(memory) bits of p
                           (levels: all of p): on the B + log2(memory) bits of the stream that
                           end with c */
    const float *pairs; /* (levels², ) value of index c after index p at [c·levels + p], ×√dim */
    double mse;         /* held-out MSE per unit-variance coordinate (the generator's) */
} tq_trellis_table;

/* Tables for bits TQ_TRELLIS_MIN_BITS .. TQ_TRELLIS_MAX_BITS, in that order: those of
 * tq_codec_config.trellis = 1 (memory = levels: every pair free) and the two-state ones of
 * trellis = TQ_TRELLIS_TWO_STATE (at 3 and 4 bits memory 2: the value of c after p is
 * U[2c + (p >> (bits − 1))], 2^(bits+1) values; at 2 bits the free table). */
extern const tq_trellis_table tq_trellis_tables[3];
extern const tq_trellis_table tq_trellis_tables_two_state[3];

#endif

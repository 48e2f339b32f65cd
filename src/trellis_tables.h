/*
 * The pair tables of trellis-coded indices (doc/codec.md, "Trellis codes"; the kernels:
 * src/kernels/trellis.h). Generated data in src/trellis_tables.c (tools/gen_trellis.c).
 */
#ifndef TQ_TRELLIS_TABLES_H
#define TQ_TRELLIS_TABLES_H

typedef struct tq_trellis_table {
    int bits, levels;   /* levels = 2^bits */
    const float *pairs; /* (levels², ) value of index c after index p at [c·levels + p], ×√dim */
    double mse;         /* held-out MSE per unit-variance coordinate (the generator's) */
} tq_trellis_table;

/* Tables for bits TQ_TRELLIS_MIN_BITS .. TQ_TRELLIS_MAX_BITS, in that order. */
extern const tq_trellis_table tq_trellis_tables[3];

#endif

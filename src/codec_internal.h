/*
 * The codec object shared by codec.c (configuration, record layout, create, description) and
 * codec_coding.c (encode, decode, scores, sums). Not public.
 *
 * A codec is a list of units; a unit is a set of input channels with its own rotation and
 * norm, split into one or two segments of rotated coordinates coded at one bit width each:
 *  - integral bits:           1 unit, 1 segment;
 *  - TQ_SPLIT_FIXED fraction: 1 unit, segments [0, h) at ⌈b⌉ and [h, d) at ⌊b⌋ bits (after a
 *    random rotation the coordinates are exchangeable, so which h get more bits is immaterial);
 *  - TQ_SPLIT_ENERGY:         2 units, the h channels of largest energy and the rest;
 *  - TQ_SPLIT_BLOCK:          1 unit whose rotation is two independent ones, over channels
 *    [0, h) and [h, d): segment 0 is then the first block; one norm.
 * The record layout (doc/format.md): segments' packed words, then [PROD: sign words], then the
 * norms (one per unit), then [PROD: residual norm γ].
 */
#ifndef TQ_CODEC_INTERNAL_H
#define TQ_CODEC_INTERNAL_H

#include <stddef.h>

#include "turboquant.h"

#define SQRT_HALF_PI 1.2533141373155003 /* √(π/2), Algorithm 2's dequantization constant */

typedef struct segment {
    int start, count, bits; /* rotated coordinates [start, start+count) of the unit */
    size_t byte_off;        /* offset of its packed words in a record */
    const tq_codebook *cb;  /* NULL for a 0-bit segment (PROD's MSE part at < 1 bit) */
    const float *pairs;     /* trellis-coded (cfg.trellis, 2–4 bits): the pair table of
                               src/trellis_tables.h, else NULL (indices into cb) */
    int pair_memory;        /* with pairs: its table's memory (tq_trellis_table); else 0 */
} segment;

typedef struct unit {
    int offset, dim; /* channels [offset, offset+dim) of the permuted vector */
    tq_rotation *rot;
    tq_rotation *rot2; /* TQ_SPLIT_BLOCK: rot covers [0, block), rot2 [block, dim); else NULL */
    int block;
    int n_seg;
    segment seg[2];
    size_t norm_off;
    float sqrt_dim, inv_sqrt_dim;
} unit;

struct tq_codec {
    tq_codec_config cfg;
    int dim;
    size_t record_bytes, norm_bytes;
    int n_units;
    unit u[2];
    int *perm; /* (dim,) input channel of permuted coordinate i; NULL for identity */
    /* PROD */
    float *sketch; /* (dim, dim) S, i.i.d. N(0, 1) */
    size_t sign_off, gamma_off;
};

#endif

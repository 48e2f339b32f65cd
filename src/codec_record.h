/*
 * The codec's description of its records for the kernels and the KV cache (not public): one
 * place derives a TurboQuant record's layout (codec.c, `layout`), and this hands it out.
 */
#ifndef TQ_CODEC_RECORD_H
#define TQ_CODEC_RECORD_H

#include "kernels/record.h"
#include "turboquant.h"

/* *x = the description of c's records (format TQ_KV_TURBO, x->codec = c): segments, bits,
 * offsets, centroids, norm and PROD parts. is_key: rows in the prepared query's basis
 * (inv_sqrt_dim 1); else the reconstruction's (1/√dim). block: TQ_SPLIT_BLOCK's first block,
 * else 0. Errors: TQ_ERR_NULL, TQ_ERR_VARIANT for a codec of two units (TQ_SPLIT_ENERGY with a
 * fraction: no single-unit description). */
tq_status tq_codec_describe(tq_codec *c, int is_key, tq_record *x);

#endif

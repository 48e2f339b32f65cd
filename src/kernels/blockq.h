/*
 * The block formats of the KV cache besides TurboQuant: f16, and ggml's q8_0 / q4_0 (blocks of
 * TQ_KV_BLOCK elements, one fp16 scale each; a last partial block of dim % TQ_KV_BLOCK
 * elements). Their sizes, encoders and reference decoders, in one place: the cache encodes and
 * reads records through them, and the attention tables' SIMD decoders (attn_kernels.h) are held
 * bit-exact to them by tests/test_attention.c.
 */
#ifndef TQ_KERNELS_BLOCKQ_H
#define TQ_KERNELS_BLOCKQ_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"
#include "turboquant.h"

/* *x = the description of a record of format f (F16, Q8_0 or Q4_0) at dim. Errors: TQ_ERR_DIM
 * (dim outside [TQ_MIN_DIM, TQ_MAX_DIM], or Q8_0 / Q4_0 at a dim not a multiple of 16),
 * TQ_ERR_VARIANT (another format). */
tq_status tq_record_plain(tq_record *x, tq_kv_format f, int dim);

/* One record of x (a plain format) from x->dim floats v: fp16 in native byte order (as the raw
 * part), q8_0 / q4_0 with ggml's rounding. */
void tq_blockq_encode(const tq_record *x, const float *v, uint8_t *rec);
/* One record of x (a plain format) → x->dim floats (the reference decoders). */
void tq_blockq_decode(const tq_record *x, const uint8_t *rec, float *out);
void tq_blockq_q8_0_decode(const uint8_t *rec, int dim, float *out);
void tq_blockq_q4_0_decode(const uint8_t *rec, int dim, float *out);

#endif

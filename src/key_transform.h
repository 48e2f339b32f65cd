/*
 * The key transform (src/key_transform.c; doc/kvcache.md §2): per KV head, keys are stored as
 * s ⊙ (k − mean) with their channels in the key split's order, queries are scored as q / s in
 * that order plus ⟨q, mean⟩. One object owns the mean, the scale, the channel order and the
 * statistics they are fitted from; the KV cache (kvcache.c), attention (attention.c) and cache
 * files (cachefile_*.c) use it through these calls only. Not public beyond turboquant.h.
 */
#ifndef TQ_KEY_TRANSFORM_H
#define TQ_KEY_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>

#include "turboquant.h"

/* A mean that turns with RoPE: positions per block (the key at position p is stored less
 * R_c μ, c the centre of its block) and the most a pair may turn per block to be turned
 * (radians; faster pairs keep the fixed mean). doc/kvcache.md §2, "Key mean". */
#define TQ_KEY_MEAN_BLOCK 64
#define TQ_KEY_MEAN_TURN_MAX 2.0
/* The most pairs per layer that turn faster than that and whose mean is subtracted at each
 * key's own angle (the ones of most mean energy; doc/kvcache.md §2, "Fast pairs"). */
#define TQ_KEY_MEAN_FAST 8
/* A fast pair is taken only if its pre-RoPE mean removes at least this share of the keys'
 * energy beyond what the fixed mean removes (each pair costs a little decode time). */
#define TQ_KEY_MEAN_FAST_GAIN 0.005

/* A transform of n_heads × dim with the parts asked for (block > 0: a key split whose first
 * block has `block` channels at block_bits; pairs: TQ_ROPE_PAIRS_*, the channel pairs whose
 * statistics the fit moves halfway together; freqs: with a mean and pairs, the angle per
 * position of each of the dim / 2 pairs (radians, 0: not turned) — the mean then turns with
 * RoPE — or NULL), not fitted: mean unset, scale 1, identity order, no query statistics.
 * Errors: TQ_ERR_NOMEM, TQ_ERR_INVALID (a shape, block, pairing or angle out of range). */
tq_status tq_key_transform_create(tq_key_transform **out, int n_heads, int dim, int mean,
                                  int scale, int block, int block_bits, int pairs,
                                  const float *freqs);
/* 1 if freqs (dim / 2 angles, or NULL) suits a transform of dim with pairs: NULL, or pairs set,
 * dim even and every angle in [0, 10⁶]. */
int tq_key_transform_rope_freqs_ok(const float *freqs, int dim, int pairs);
/* A new, unfitted transform of the same shape and parts as `like`. */
tq_status tq_key_transform_create_like(tq_key_transform **out, const tq_key_transform *like);
/* Back to "not fitted" (a cache truncated to 0): the mean unset (its values kept, as a cache
 * file keeps them), scale 1, identity order, no query statistics. */
void tq_key_transform_reset(tq_key_transform *kt);

/* What it has and what is fixed (0 for NULL). */
int tq_key_transform_has_mean(const tq_key_transform *kt);
int tq_key_transform_has_scale(const tq_key_transform *kt);
int tq_key_transform_mean_set(const tq_key_transform *kt);
int tq_key_transform_scale_set(const tq_key_transform *kt);
/* The mean of every head ((n_heads, dim) floats) once set, else NULL (tests). */
const float *tq_key_transform_mean(const tq_key_transform *kt);
/* The scale ((n_heads, dim) floats) into out once set. Errors: TQ_ERR_INVALID (none, or not
 * set yet). */
tq_status tq_key_transform_get_scale(const tq_key_transform *kt, float *out, size_t capacity);
/* Bytes of stored data (mean, scale, order) and of allocations (the statistics and the object
 * too). */
void tq_key_transform_memory(const tq_key_transform *kt, size_t *data, size_t *allocated);

/* 1 while query statistics count: a scale that is not fixed yet. */
int tq_key_transform_observing(const tq_key_transform *kt);
/* Adds Σ q² of n query rows q (n, n_q_heads, dim; n_q_heads a multiple of n_heads) to each KV
 * head's statistics, unless the transform is not observing. Errors: TQ_ERR_NONFINITE (nothing
 * added). */
tq_status tq_key_transform_observe(tq_key_transform *kt, const float *q, int n_q_heads, size_t n);
/* Everything src holds (mean, scale, query statistics, key order and their flags) becomes
 * dst's (a fork: both made for the same shapes and options; otherwise nothing is copied). */
void tq_key_transform_copy(tq_key_transform *dst, const tq_key_transform *src);
/* The query statistics of src become dst's (a converted cache; both with a scale). */
void tq_key_transform_copy_statistics(tq_key_transform *dst, const tq_key_transform *src);

/* Key row t < n of head h, as floats (dim of them) into out. */
typedef void (*tq_key_rows_fn)(const void *ctx, size_t t, int h, float *out);
/* Fits what is not fixed yet: the mean from rows [0, n_mean), then the scale and split from
 * rows [0, n_scale) (less the mean) and the observed queries; row t is the key at position
 * pos0 + t (what a turning mean needs). */
void tq_key_transform_fit_rows(tq_key_transform *kt, size_t n_mean, size_t n_scale,
                               tq_key_rows_fn row, const void *ctx, size_t pos0);

/* Head h's key k at position pos (dim floats, channel order) → its stored coordinates. */
void tq_key_transform_key_row(const tq_key_transform *kt, int h, size_t pos, const float *k, float *out);
/* Stored coordinates of head h's key at position pos → the key in channel order (the
 * inverse). */
void tq_key_transform_invert_row(const tq_key_transform *kt, int h, size_t pos, const float *stored,
                                 float *out);

/* A mean that turns with RoPE. The pairs that turn (0: a fixed mean, NULL kt too). */
int tq_key_transform_n_turn(const tq_key_transform *kt);
/* The fast pairs (0 before the mean is fitted; NULL kt too); their table: pair k's
 * cos(θ_k i), then sin(θ_k i), i < TQ_KEY_MEAN_BLOCK (2 TQ_KEY_MEAN_BLOCK floats per pair). */
int tq_key_transform_n_fast(const tq_key_transform *kt);
const float *tq_key_transform_fast_table(const tq_key_transform *kt);
/* Makes pairs[0..n) (n ≤ TQ_KEY_MEAN_FAST, increasing, pairs that turn faster than
 * TQ_KEY_MEAN_TURN_MAX per block; the mean holds their pre-RoPE μ) the fast pairs (what a
 * cache file holds). */
void tq_key_transform_set_fast(tq_key_transform *kt, int n, const uint16_t *pairs);
/* 1 if pairs[0..n) may be kt's fast pairs (what set_fast takes; n 0 always, n > 0 only with
 * a mean that is set): a cache file's list is checked with it. */
int tq_key_transform_fast_ok(const tq_key_transform *kt, int n, const uint16_t *pairs);
/* kt's fast pairs into pairs (TQ_KEY_MEAN_FAST room); returns how many. */
int tq_key_transform_fast_pairs(const tq_key_transform *kt, uint16_t *pairs);
/* Tests: the most fast pairs later fits take (0: none, as before cache file version 10;
 * negative: back to TQ_KEY_MEAN_FAST). Process-wide, not thread-safe. */
void tq_key_transform_test_fast_max(int n);
/* The mean subtracted from head h's key at position pos: the stored mean itself when it does
 * not turn, else written to buf (dim floats) with R_c μ on the turning pairs and R_pos μ on the
 * fast ones; NULL without a mean. */
const float *tq_key_transform_mean_at(const tq_key_transform *kt, int h, size_t pos, float *buf);
/* cs (2 (n_turn + n_fast) floats) = the cos of each turning pair's angle at the centre of
 * block `block` (positions [64 block, 64 block + 64)), then the sin, then the cos and the sin of
 * each fast pair's angle at the block's start (computed in double); _next moves cs on by one
 * block (one rotation per pair, in float: callers start afresh now and then). */
void tq_key_transform_block_cs(const tq_key_transform *kt, size_t block, float *cs);
void tq_key_transform_block_cs_next(const tq_key_transform *kt, float *cs);
/* ⟨q, mean at a position⟩ of head h in parts: ab (2 (n_turn + n_fast) floats) gets each
 * turning pair's A, then each B, with ⟨q, R_c μ⟩ = ⟨ab, cs⟩ (tq_key_transform_block_cs), then
 * each fast pair's A, then B (⟨q, R_p μ⟩ = A cos θp + B sin θp); the return value is the rest,
 * ⟨q, μ⟩ over the channels that turn in neither way (0 without a mean). */
float tq_key_transform_rope_terms(const tq_key_transform *kt, int h, const float *q, float *ab);
/* A query of KV head h in the stored keys' basis: q itself without a scale (kt NULL too), else
 * q / s in the key split's order written to buf. */
const float *tq_key_transform_query_row(const tq_key_transform *kt, int h, const float *q,
                                        float *buf);
/* ⟨q, mean of head h⟩ (summed in double), 0 without a mean (kt NULL too) or with a turning
 * one (tq_key_transform_rope_terms). */
float tq_key_transform_offset_row(const tq_key_transform *kt, int h, const float *q);

/* The state a cache file keeps (doc/cachefile.md, layer section): with a mean, the mean (f32,
 * (n_heads, dim)); with a scale, the query rows (f64), Σ q² (f64, (n_heads, dim)), the scale
 * (f32, same), with a split the channel order (u16, same). All little-endian. */
size_t tq_key_transform_state_size(size_t n_heads_dim, int mean, int scale, int split);
size_t tq_key_transform_state_bytes(const tq_key_transform *kt);
/* Streams those bytes through put (in pieces). */
void tq_key_transform_write_state(const tq_key_transform *kt,
                                  void (*put)(void *ctx, const void *p, size_t n), void *ctx);
/* Reads tq_key_transform_state_bytes(kt) bytes at p with the flags mean_set, scale_set (each
 * ≤ the part's presence) into kt. Errors: TQ_ERR_CORRUPT (a value no fit writes: a non-finite
 * mean, statistics negative, −0.0 or not finite, a scale not finite and > 0, an order that is
 * no permutation per head, or not the identity before the scale is set; kt unchanged). */
tq_status tq_key_transform_read_state(tq_key_transform *kt, const uint8_t *p, int mean_set,
                                      int scale_set);

/* cc (for dim, bits, variant; made by tq_codec_config_init) becomes the key split's
 * TQ_SPLIT_BLOCK codec where it applies: MSE, a fractional width k + f with k + 1 ≤ 4 and no
 * more bytes than the fixed split. Returns 1 then, else 0 (cc unchanged). */
int tq_key_split_codec(tq_codec_config *cc);

#endif

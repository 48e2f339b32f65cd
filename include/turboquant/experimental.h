/*
 * turboquant/experimental.h — calls with no stability promise (doc/api.md, "Experimental"):
 * they expose rules and decisions of the current implementation (the two-phase rule, the key
 * transform, the kernel choice) or exist for tests and benchmarks. They may change or go in
 * any minor version; the release notes say when.
 */
#ifndef TURBOQUANT_EXPERIMENTAL_H
#define TURBOQUANT_EXPERIMENTAL_H

#include "kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attention kernel set in use: the codec set's name, or that of its integer decode kernels
 * over compressed K and V ("avx2-int8", "avx2-vnni", "avx512-vnni", "neon-dot": the CPUs that
 * have them, unless TQ_INT8_SCORES=0). */
TQ_API const char *tq_attn_kernels_name(void);

/* The two-phase rule: leading tokens held compressed at length len once compression started
 * (0 below quantized_kv_start or within raw_window, else ⌊(len − raw_window)/batch⌋·batch);
 * 0 for a NULL scheme or batch < 1. */
TQ_API size_t tq_kv_scheme_compressed_length(const tq_kv_scheme *scheme, size_t len);
/* The most tokens n ≤ max_n one append at length pos plus one tq_kv_attention can take so each
 * query sees its keys exactly as token-by-token decode would (doc/kvcache.md §3); 0 when max_n
 * is 0 or the scheme is NULL. */
TQ_API size_t tq_kv_scheme_decode_chunk(const tq_kv_scheme *scheme, size_t pos, size_t max_n);

/* The scheme of one layer (overrides and edges resolved; key_mean, key_scale, key_split as in
 * effect) into out (at most out_size bytes: sizeof *out). Errors: TQ_ERR_NULL, TQ_ERR_INVALID
 * (bad layer), TQ_ERR_CAPACITY (out_size < sizeof(tq_kv_layer_scheme) of this release). */
TQ_API tq_status tq_kv_cache_get_layer_scheme(const tq_kv_cache *cache, int layer,
                                              tq_kv_layer_scheme *out, size_t out_size);
/* 1 when a layer of scheme l, in a cache with trellis codes (trellis != 0, tq_kv_scheme.trellis)
 * or without, splits its keys at head dim head_dim_k (key_split resolved: TQ_KV_KEY_SPLIT_AUTO
 * by its rule, then whether the width and dim allow a split), else 0 (also for NULL). */
TQ_API int tq_kv_layer_scheme_key_split(const tq_kv_layer_scheme *l, int trellis, int head_dim_k);
/* A layer's key scale, (n_kv_heads, head_dim_k) floats into out (out_capacity floats).
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer or no key scale), TQ_ERR_STATE (not fixed
 * yet: before the layer's first compression), TQ_ERR_CAPACITY. */
TQ_API tq_status tq_kv_cache_key_scale(const tq_kv_cache *cache, int layer, float *out,
                                       size_t out_capacity);

/* The reference attention for tests: dequantizes the whole layer, then exact softmax in double.
 * Allocates; slow. Arguments and errors as tq_kv_attention, plus TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_attention_ref(const tq_kv_cache *cache, int layer, const float *q,
                                     int n_q_heads, size_t n_queries,
                                     const tq_attn_params *params, float *out,
                                     size_t out_capacity);
/* The reference at explicit query positions, as tq_kv_attention_at. */
TQ_API tq_status tq_kv_attention_ref_at(const tq_kv_cache *cache, int layer, const float *q,
                                        int n_q_heads, size_t n_queries,
                                        const int64_t *positions, const tq_attn_params *params,
                                        float *out, size_t out_capacity);

/* The codec's distortion on n seeded standard Gaussian vectors (every coordinate N(0, 1), the
 * same vectors for the same seed on every machine): *mse = the mean over the vectors of
 * ||x − decode(encode(x))||² / dim (1: as bad as sending zeros). What `--kv auto:B` compares
 * widths by (doc/kv-auto.md). Errors: TQ_ERR_NULL, TQ_ERR_INVALID (n 0 or over 2^20),
 * TQ_ERR_NOMEM; *mse untouched on error. */
TQ_API tq_status tq_codec_gaussian_mse(const tq_codec *codec, size_t n, uint64_t seed, double *mse);

#ifdef __cplusplus
}
#endif

#endif /* TURBOQUANT_EXPERIMENTAL_H */

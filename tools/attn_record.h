/* Real K/V for tq attn-bench: the keys, values and queries every attention layer of the model
 * hands its KV cache while reading a text (model_attn_hook), fp32 as they enter the cache
 * (after QK-norm and RoPE), with the layer's attention parameters (scale, sliding window). */
#ifndef TQ_TOOLS_ATTN_RECORD_H
#define TQ_TOOLS_ATTN_RECORD_H

#include <stddef.h>

#include "model_session.h"
#include "turboquant.h"

/* Leading query positions recorded for the key scale: as many as the library's statistics
 * use (it ignores the queries of later positions). */
#define ATTN_RECORD_FIRST 512

typedef struct attn_layer_rec {
    float *k, *v;       /* (n_tokens, n_kv_heads, dk), (n_tokens, n_kv_heads, dv) */
    float *q;           /* (n_queries, n_q_heads, dk): positions n_tokens − n_queries … */
    float *q_first;     /* (n_first, n_q_heads, dk): positions 0 … n_first − 1, for the
                           caches' key-scale statistics (tq_kv_cache_observe_queries) */
    tq_attn_params ap;  /* as the engine's layer attends */
} attn_layer_rec;

typedef struct attn_record {
    int n_layers, n_q_heads, n_kv_heads, dk, dv;
    size_t n_tokens, n_queries;
    size_t n_first; /* min(n_tokens, ATTN_RECORD_FIRST) */
    int rope_pairs; /* the engine's key_rope_pairs for the model (model_key_rope_pairs) */
    float *rope_freqs; /* the engine's key_rope_freqs (model_key_rope_freqs; (n_layers, dk / 2)),
                          NULL when the model's heads are not wholly rotated */
    attn_layer_rec *layers;
} attn_record;

/* Runs the model (model_path; NULL: the tools' default) with an f16 cache over the first
 * n_tokens tokens of the text file (BOS first) and records every layer. Returns 0, or an exit
 * code after printing why (prefixed "tq <cmd>: "): TQ_EXIT_USAGE when the text is too short
 * or n_tokens is beyond the model's context, 1 for files that cannot be read or memory. */
int attn_record_from_model(const char *cmd, const char *model_path, const char *text_path,
                           size_t n_tokens, size_t n_queries, int n_threads, attn_record *out);
void attn_record_free(attn_record *r); /* a zeroed record is fine */

/* The per-layer schemes auto:B chooses for the model (model_path as above): one session, each
 * of the n schemes (session_scheme_parse'd auto:B) calibrated on at most calib_tokens tokens of
 * the built-in text as tq perplexity does (the choice printed to stderr), its n_layers layer schemes copied to out[i].
 * Returns 0, or an exit code after printing why. */
int attn_record_auto_layers(const char *cmd, const char *model_path, int n_threads, int calib_tokens,
                            const session_scheme *schemes, int n, int n_layers,
                            tq_kv_layer_scheme *const *out);

#endif

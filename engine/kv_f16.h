/* A plain per-sequence K/V store in IEEE binary16 and the attention that reads it.
 *
 * This is the engine's baseline cache: one sequence, every layer holding the K and V rows of
 * positions 0 .. len-1 in fp16, attention computed with fp32 scores and an fp32 softmax. It
 * sits behind a narrow interface (append / attend / truncate) so that libturboquant's
 * compressed cache can replace it without touching the model code.
 *
 * Attention (one layer, GQA): query head h reads K/V head h / (n_head / n_kv_heads). A query
 * at position p sees the keys at positions j with j <= p (causal) and, when window > 0,
 * p - j < window (sliding window: the token itself and the window - 1 before it):
 *
 *     s_j = q . k_j            (q is expected already scaled by the model's 1/sqrt(d))
 *     a_j = exp(s_j - max s) / sum exp(s - max s)
 *     out = sum_j a_j v_j
 *
 * Memory: everything is allocated by kv_f16_create() — the fp16 store
 * (n_layer, max_ctx, n_kv_heads, head_dim_k + head_dim_v), an fp32 copy of one layer's rows
 * for the attention kernel, and per-thread score rows. append / attend / truncate allocate
 * nothing.
 *
 * Thread-safety: a store is used by one thread at a time; kv_f16_attend() spreads its work
 * over the pool it is given (one parallel_for per call, so not reentrant on that pool).
 * Never prints, never aborts: each call returns a kv_status. */
#ifndef TQ_ENGINE_KV_F16_H
#define TQ_ENGINE_KV_F16_H

#include <stdint.h>

#include "threadpool.h"

/* Status codes, pinned: never renumber, only append. */
typedef enum kv_status {
    KV_OK = 0,
    KV_ERR_ARG = 1,   /* NULL pointer, layer out of range, n < 1, bad shape parameter */
    KV_ERR_NOMEM = 2, /* allocation failed in create */
    KV_ERR_FULL = 3,  /* append past max_ctx */
    KV_ERR_POS = 4    /* attend: a query position not yet stored in this layer, or > max_q */
} kv_status;

const char *kv_status_name(int status);

typedef struct kv_f16_params {
    int n_layer;    /* layers, each with its own rows */
    int n_head;     /* query heads; a multiple of n_kv_heads */
    int n_kv_heads; /* K/V heads */
    int head_dim_k; /* values per K head (= per Q head) */
    int head_dim_v; /* values per V head */
    int max_ctx;    /* positions stored per layer */
    int max_q;      /* most queries one attend() call may pass */
    int n_threads;  /* most threads of the pool attend() will be given (sizes scratch) */
    int ggml_rounding; /* non-zero: round q to fp16 before q . k and the softmax weights a_j
                          to fp16 before the sum over V, as llama.cpp's CPU attention does
                          without flash attention (doc/gemma3.md, "Numerics"); scores and
                          softmax stay fp32 either way */
} kv_f16_params;

typedef struct kv_f16 kv_f16;

/* KV_OK and *out, or KV_ERR_ARG (a parameter < 1, n_head not a multiple of n_kv_heads) or
 * KV_ERR_NOMEM; *out is NULL on error. */
int kv_f16_create(const kv_f16_params *p, kv_f16 **out);
/* NULL is fine. */
void kv_f16_free(kv_f16 *kv);

/* Positions stored in layer (0 for a bad argument). */
int kv_f16_len(const kv_f16 *kv, int layer);

/* Appends n_tokens rows at positions len .. len+n_tokens-1 of layer, rounding to fp16.
 * k: (n_tokens, n_kv_heads, head_dim_k), v: (n_tokens, n_kv_heads, head_dim_v).
 * KV_ERR_FULL (nothing written) if len + n_tokens > max_ctx. */
int kv_f16_append(kv_f16 *kv, int layer, const float *k, const float *v, int n_tokens);

/* out[i] = attention of q[i] at position first_pos + i over the rows of layer, i < n_q.
 * q: (n_q, n_head, head_dim_k), out: (n_q, n_head, head_dim_v), not overlapping.
 * window: 0 for full causal attention, else the sliding window described at the top.
 * KV_ERR_POS if first_pos < 0, n_q > max_q or first_pos + n_q > len of that layer. */
int kv_f16_attend(kv_f16 *kv, int layer, const float *q, int n_q, int first_pos, int window,
                  float *out, tp_pool *pool);

/* Forgets every position >= len in all layers (len >= the current length: no change). */
void kv_f16_truncate(kv_f16 *kv, int len);

#endif

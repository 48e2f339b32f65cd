/* A decoder-only transformer's weights, loaded from a GGUF file: Gemma 3 (doc/gemma3.md), and
 * the LLaMA / Qwen2 / Qwen3 family (RoPE, GQA, RMSNorm, SwiGLU, optional q/k/v biases, optional
 * per-head QK-norm). The forward pass and everything one sequence needs live in a context
 * (context.h), as llama.cpp has llama_model and llama_context.
 *
 * model_load() maps the file (weights stay in the read-only mapping; nothing is copied but
 * the small norm vectors' pointers), reads the configuration from the metadata and checks
 * every tensor's presence, type and shape against it (the embedding's rows against the
 * vocabulary size; no tensor left unread: doc/gemma3.md section 2).
 *
 * Thread-safety: a loaded model is read-only. Any number of contexts (context_create), on
 * any threads, may share one model at once; free it after the last of them. The engine never
 * prints and never exits: load returns a model_status and fills the caller's buffer. */
#ifndef TQ_ENGINE_MODEL_H
#define TQ_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "matmul.h"
#include "turboquant.h"

/* Status codes, pinned: never renumber, only append. */
typedef enum model_status {
    MODEL_OK = 0,
    MODEL_ERR_ARG = 1,        /* NULL pointer, n < 1, max_batch/max_ctx < 1; the tools also
                                 use it for n_threads outside [1, 256] */
    MODEL_ERR_FILE = 2,       /* the GGUF reader rejected the file (message says why) */
    MODEL_ERR_ARCH = 3,       /* general.architecture missing or not supported */
    MODEL_ERR_CONFIG = 4,     /* a required key missing or a value out of range */
    MODEL_ERR_TENSOR = 5,     /* a required tensor missing, or one the forward pass would not read
                                 (e.g. a block past block_count) */
    MODEL_ERR_SHAPE = 6,      /* a tensor with the wrong shape (token_embd's rows against the
                                 vocabulary size included; doc/gemma3.md section 2) */
    MODEL_ERR_TYPE = 7,       /* a tensor with a type the engine cannot use there */
    MODEL_ERR_NOMEM = 8,      /* allocation at load failed */
    MODEL_ERR_CONTEXT = 9,    /* max_ctx > the model's context_length; or pos0 + n > max_ctx */
    MODEL_ERR_BATCH = 10,     /* n > max_batch */
    MODEL_ERR_TOKEN = 11,     /* token id < 0 or >= n_vocab */
    MODEL_ERR_POS = 12,       /* pos0 < 0 or pos0 > the sequence length (a gap), or a rewind
                                 past what the sliding-window layers keep */
    MODEL_ERR_INTERNAL = 13,  /* a kernel refused its arguments (a bug; message says which) */
    MODEL_ERR_KV_SCHEME = 14  /* the KV scheme does not fit this model's head dims (e.g. q4_0
                                 with head_dim % 16 != 0, a fraction that does not split
                                 head_dim), or is out of range; message has the library's word */
} model_status;

const char *model_status_name(int status);

typedef enum model_arch {
    MODEL_ARCH_GEMMA3 = 0,
    MODEL_ARCH_LLAMA = 1,
    MODEL_ARCH_QWEN2 = 2,
    MODEL_ARCH_QWEN3 = 3
} model_arch;

typedef enum model_ffn_act {
    MODEL_FFN_GELU_TANH = 0, /* gelu(gate) * up (Gemma's GeGLU, tanh approximation) */
    MODEL_FFN_SILU = 1       /* silu(gate) * up (SwiGLU) */
} model_ffn_act;

typedef enum model_rope_layout {
    MODEL_ROPE_NEOX = 0,  /* element i rotates with i + n_rot/2 (Gemma, Qwen) */
    MODEL_ROPE_NORM = 1   /* element 2i rotates with 2i+1 (LLaMA as llama.cpp converts it) */
} model_rope_layout;

/* Hyperparameters, from the GGUF metadata (doc/gemma3.md section 1 for the keys). */
typedef struct model_config {
    model_arch arch;
    int n_vocab;          /* rows of token_embd = tokens of the vocabulary (checked at load) */
    int n_embd;           /* residual width */
    int n_layer;
    int n_ff;             /* FFN hidden width */
    int n_head;           /* query heads */
    int n_head_kv;        /* K/V heads; n_head is a multiple */
    int head_dim;         /* values per Q and K head */
    int head_dim_v;       /* values per V head */
    int n_ctx_train;      /* {arch}.context_length */
    int n_rot;            /* rotated values per head (rope.dimension_count), even, <= head_dim */
    model_rope_layout rope_layout;
    float rope_base;      /* theta base for global layers */
    float rope_base_swa;  /* theta base for sliding-window layers */
    float rope_freq_scale;/* positions multiplied by this on global layers (1/linear factor) */
    float rms_eps;
    int sliding_window;   /* window of local layers; 0 = none */
    int swa_pattern;      /* layer il is local iff sliding_window && il % swa_pattern < swa_pattern-1 */
    float embd_scale;     /* embedding rows multiplied by this (sqrt(n_embd) for Gemma, else 1) */
    float attn_scale;     /* queries multiplied by this after RoPE */
    float final_softcap;  /* logits = c * tanh(logits / c) when > 0 */
    model_ffn_act ffn_act;
    int has_post_norms;   /* Gemma's post_attention_norm / post_ffw_norm */
    int has_qk_norm;      /* per-head RMSNorm of Q and K before RoPE */
    int has_qkv_bias;     /* q/k/v projection biases (Qwen2) */
} model_config;

/* One block's weights, all views into the mapping. Matrices are (rows = out, cols = in). */
typedef struct model_layer {
    const float *attn_norm;      /* (n_embd) */
    matmul_weight wq;            /* (n_head * head_dim, n_embd) */
    matmul_weight wk;            /* (n_head_kv * head_dim, n_embd) */
    matmul_weight wv;            /* (n_head_kv * head_dim_v, n_embd) */
    const float *bq, *bk, *bv;   /* (n_head*head_dim), (n_head_kv*head_dim), (n_head_kv*head_dim_v); NULL without biases */
    const float *q_norm;         /* (head_dim), NULL without QK-norm */
    const float *k_norm;         /* (head_dim), NULL without QK-norm */
    matmul_weight wo;            /* (n_embd, n_head * head_dim_v) */
    const float *post_attn_norm; /* (n_embd), NULL without post norms */
    const float *ffn_norm;       /* (n_embd) */
    matmul_weight w_gate;        /* (n_ff, n_embd) */
    matmul_weight w_up;          /* (n_ff, n_embd) */
    matmul_weight w_down;        /* (n_embd, n_ff) */
    const float *post_ffn_norm;  /* (n_embd), NULL without post norms */
    int is_swa;                  /* sliding-window (local) layer */
} model_layer;

typedef struct model_weights {
    matmul_weight token_embd;    /* (n_vocab, n_embd) */
    matmul_weight output;        /* (n_vocab, n_embd); token_embd when tied */
    const float *output_norm;    /* (n_embd) */
    model_layer *layers;         /* (n_layer) */
} model_weights;

/* The weights of a loaded model: read-only after model_load. */
typedef struct model {
    model_config cfg;
    model_weights w;
    gguf_file *file;  /* owns the mapping the weights point into */
    char err[256];    /* load-time message (model_load copies it to the caller) */
} model;

/* Loads the GGUF file at path. On success *out is a model to free with model_free(); on
 * error *out is NULL, a status is returned and err (if err_cap > 0) holds a message.
 * Errors: MODEL_ERR_ARG, MODEL_ERR_FILE, MODEL_ERR_ARCH, MODEL_ERR_CONFIG, MODEL_ERR_TENSOR,
 * MODEL_ERR_SHAPE, MODEL_ERR_TYPE, MODEL_ERR_NOMEM. */
model_status model_load(const char *path, model **out, char *err, size_t err_cap);
/* NULL is fine. Every context of m must be freed first. */
void model_free(model *m);

const model_config *model_get_config(const model *m);
/* The GGUF file the model was loaded from (its metadata: vocab_build); NULL for NULL. */
const gguf_file *model_file(const model *m);
/* 1 if layer il is a sliding-window (local) layer; 0 otherwise or out of range. */
int model_layer_is_swa(const model *m, int il);
/* The KV cache's key_rope_pairs for this model (TQ_ROPE_PAIRS_*, doc/kvcache.md §2): the
 * channel pairs its RoPE turns when it turns the whole head, else NONE (also for NULL). */
int model_key_rope_pairs(const model_config *c);
/* The keys' RoPE angle per position of each pair (n_layer, head_dim / 2) into out, as the
 * cache's key_rope_freqs: 1, or 0 (nothing written) where model_key_rope_pairs is NONE. */
int model_key_rope_freqs(const model *m, float *out);
/* Bytes of weights one decode step reads: every layer's matrices and norms, the output matrix
 * and norm, one embedding row (none more when the output is the tied embedding). What bounds
 * decode speed at short context (tq bench: bytes per token). 0 for a NULL model. */
size_t model_decode_weight_bytes(const model *m);

#endif

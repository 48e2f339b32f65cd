/* Decoder-only transformer forward pass over a GGUF file: Gemma 3 (doc/gemma3.md), and the
 * LLaMA / Qwen2 / Qwen3 family (RoPE, GQA, RMSNorm, SwiGLU, optional q/k/v biases, optional
 * per-head QK-norm).
 *
 * model_load() maps the file (weights stay in the read-only mapping; nothing is copied but
 * the small norm vectors' pointers), reads the configuration from the metadata, checks every
 * tensor's presence, type and shape against it (the embedding's rows against the vocabulary
 * size; no tensor left unread: doc/gemma3.md section 2), and allocates every buffer the forward pass needs for
 * batches of up to max_batch tokens and sequences of up to max_ctx positions. model_forward()
 * allocates nothing.
 *
 * One model holds one sequence, its K/V in a libturboquant KV cache (include/turboquant.h,
 * doc/kvcache.md) of the scheme model_params.kv_scheme (NULL: "f16", every K/V value as IEEE
 * half, attended exactly in fp32). Every attention layer, sliding-window ones included, stores
 * into that cache and attends with tq_kv_attention on the compressed codes; per-layer schemes
 * (e.g. local layers kept f16) through model_set_kv_layer_schemes(). Positions run from 0;
 * model_forward() appends tokens at positions pos0 .. pos0 + n - 1, rewinding the sequence
 * to pos0 first if it is longer.
 *
 * Two-phase storage. With a scheme's prefill_raw = 1 (the library default, as mlx-swift-lm)
 * a multi-token forward() keeps its tokens fp16 until the first single-token forward (the
 * first decode step), which compresses everything the scheme allows; a prefill-only workload
 * such as perplexity then never touches the compressed path. Set prefill_raw = 0 to compress
 * on every forward: after a call ending at length L, tokens [0, batch * floor(L / batch)) are
 * compressed before the attention of that call runs, so with L a multiple of the scheme's
 * batch every key every query of the call sees (its own included) is compressed.
 *
 * Thread-safety: a model is used by one thread at a time. It owns one tq_threadpool of
 * n_threads (caller included; the library's pool, include/turboquant.h) that runs both its
 * matmuls (tq_threadpool_run) and attention (tq_kv_attention); idle workers sleep. Logits do
 * not depend on n_threads (tests/test_thread_invariance.c). The engine never prints and never
 * exits: every call returns a model_status and fills the model's message (model_last_error),
 * or the caller's buffer for model_load(). */
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
    MODEL_ERR_ARG = 1,        /* NULL pointer, n < 1, max_batch/max_ctx < 1, n_threads outside
                                 [1, 256] */
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

/* Activations for a batch of up to max_batch tokens; all allocated at load. */
typedef struct model_state {
    float *x;         /* (max_batch, n_embd) residual stream */
    float *xb;        /* (max_batch, n_embd) normed input of a sub-block */
    float *xb2;       /* (max_batch, n_embd) output of attn_output / ffn_down */
    float *q;         /* (max_batch, n_head, head_dim) */
    float *k;         /* (max_batch, n_head_kv, head_dim) */
    float *v;         /* (max_batch, n_head_kv, head_dim_v) */
    float *att;       /* (max_batch, n_head, head_dim_v) attention output */
    float *hb;        /* (max_batch, n_ff) gate, then act(gate) * up */
    float *hb2;       /* (max_batch, n_ff) up */
    float *rope_cs;   /* (2 kinds, max_batch, n_rot/2, 2) cos, sin for global / local layers */
    float *gelu_f16;  /* (65536) gelu of each fp16 value, rounded to fp16; NULL for plain numerics */
    void *work;       /* matmul scratch, work_size bytes */
    size_t work_size;
} model_state;

typedef struct model_params {
    int max_ctx;   /* positions the sequence may reach; <= the model's context_length */
    int max_batch; /* most tokens one model_forward() call takes */
    int n_threads; /* threads of the model's pool, caller included: 1 .. 256 */
    int ggml_rounding; /* 0: plain fp32 activations (8-bit only inside matmul); 1: also round
                          where llama.cpp's CPU backend rounds (fp16 Q and softmax weights in
                          attention, GELU through an fp16 table: doc/gemma3.md, "Numerics").
                          Measured: neither tracks llama.cpp's logits better (test_model.c).
                          With the library's cache only Q is rounded in attention (its
                          softmax weights stay fp32) */
    const tq_kv_scheme *kv_scheme; /* the KV cache scheme (tq_kv_scheme_parse); NULL: "f16".
                          Copied at load: the pointer need not outlive model_load(). In the
                          model's own copy of the params it points at the model's copy */
} model_params;

/* Sees what every attention layer hands the KV cache: for layer il, the n tokens at
 * positions pos0 .. pos0 + n − 1, queries q (n, n_head, head_dim), keys k and values v
 * (n, n_head_kv, head_dim[_v]), fp32 after QK-norm and RoPE, and the attention parameters the
 * layer uses. Read-only; the pointers are valid during the call. For tools that record real
 * K/V (tq attn-bench --from-model). */
typedef void (*model_attn_hook)(void *ctx, int il, int pos0, int n, const float *q, const float *k,
                                const float *v, const tq_attn_params *ap);

typedef struct model {
    model_config cfg;
    model_weights w;
    model_state s;
    model_params params;
    gguf_file *file;  /* owns the mapping the weights point into */
    tq_kv_cache *kv;  /* the sequence's K/V, (n_layer, max_ctx reserved, n_head_kv, head_dim) */
    tq_kv_scheme kv_scheme;        /* the cache's scheme (params.kv_scheme points here) */
    tq_threadpool *pool;           /* n_threads: the matmuls and tq_kv_attention */
    void *attn_work;               /* attention workspace, attn_work_size bytes: the largest
                                      tq_kv_attention_workspace_size over layers, max_batch */
    size_t attn_work_size;
    model_attn_hook attn_hook; /* NULL, or called by every layer of model_forward */
    void *attn_hook_ctx;
    char err[256];    /* message of the last failing call */
} model;

/* Loads the GGUF file at path. On success *out is a model to free with model_free(); on
 * error *out is NULL, a status is returned and err (if err_cap > 0) holds a message.
 * Errors: MODEL_ERR_ARG, MODEL_ERR_FILE, MODEL_ERR_ARCH, MODEL_ERR_CONFIG, MODEL_ERR_TENSOR,
 * MODEL_ERR_SHAPE, MODEL_ERR_TYPE, MODEL_ERR_CONTEXT (max_ctx over context_length),
 * MODEL_ERR_KV_SCHEME (p->kv_scheme does not fit the model), MODEL_ERR_NOMEM. */
model_status model_load(const char *path, const model_params *p, model **out, char *err,
                        size_t err_cap);
/* NULL is fine. */
void model_free(model *m);

const model_config *model_get_config(const model *m);
/* Positions currently in the sequence. */
int model_seq_len(const model *m);
/* Drops every position >= len. Sliding-window layers keep only their last window +
 * TQ_KV_WINDOW_SLACK positions: rewinding further empties the sequence (length 0). */
void model_truncate(model *m, int len);
/* Message of the last failing call on m (empty string if none). */
const char *model_last_error(const model *m);

/* Runs tokens[0..n) at positions pos0 .. pos0+n-1 (rewinding the sequence to pos0 first),
 * 1 <= n <= max_batch, pos0 + n <= max_ctx. Writes logits: all_logits = 0: one row
 * (n_vocab floats) for the last token; all_logits = 1: (n, n_vocab) rows, one per token.
 * logits is caller-owned and must hold that many floats; it may be NULL to compute no
 * logits (the K/V are still stored: prefill of a prompt whose logits are not needed).
 * Errors: MODEL_ERR_ARG, MODEL_ERR_BATCH, MODEL_ERR_CONTEXT, MODEL_ERR_POS, MODEL_ERR_TOKEN
 * (checked before anything changes), MODEL_ERR_INTERNAL. */
model_status model_forward(model *m, const int32_t *tokens, int n, int pos0, int all_logits,
                           float *logits);
/* The same with every row's logits, (n, n_vocab), as token-by-token decode would give them:
 * the tokens go in the decode-exact chunks of the cache's scheme (tq_kv_scheme_decode_chunk,
 * at most max_batch each), so each position sees every key compressed or still fp16 exactly
 * as a single decode step there would (the scheme needs prefill_raw = 0, or compression
 * started). n may exceed max_batch. Errors: as model_forward. */
model_status model_forward_as_decode(model *m, const int32_t *tokens, int n, int pos0, float *logits);
/* The same right after a prompt prefilled raw (prefill_raw = 1, multi-token calls): the first
 * token goes alone — the decode step that ends the raw phase and compresses the prompt, with
 * the key mean, scale and split taken from the prompt's tokens — then the rest as
 * model_forward_as_decode. What generation after that prompt sees, at prefill cost. */
model_status model_forward_after_prompt(model *m, const int32_t *tokens, int n, int pos0, float *logits);
/* Every row's logits, (n, n_vocab), by one of the three above: the scoring modes of
 * tq perplexity and bench_model_kv (batch: model_forward with all_logits, n ≤ max_batch). */
typedef enum model_rows_mode {
    MODEL_ROWS_BATCH = 0,        /* model_forward */
    MODEL_ROWS_AS_DECODE = 1,    /* model_forward_as_decode */
    MODEL_ROWS_AFTER_PROMPT = 2, /* model_forward_after_prompt */
} model_rows_mode;
model_status model_forward_rows(model *m, const int32_t *tokens, int n, int pos0, model_rows_mode mode,
                                float *logits);

/* Installs (fn non-NULL) or removes the attention hook; ctx is passed to every call. */
void model_set_attn_hook(model *m, model_attn_hook fn, void *ctx);

/* ---- KV cache scheme ---------------------------------------------------------------------- */

/* Replaces the model's KV cache with an empty one of `scheme` (NULL: "f16") and resets the
 * sequence to length 0; the weights stay loaded, so several schemes can run one after the
 * other on one model. The new cache reserves max_ctx tokens and the attention workspace is
 * re-sized, all here: model_forward() still allocates nothing. On error the model keeps its
 * previous cache and sequence. Errors: MODEL_ERR_ARG (m NULL), MODEL_ERR_KV_SCHEME,
 * MODEL_ERR_NOMEM. */
model_status model_set_kv_scheme(model *m, const tq_kv_scheme *scheme);
/* The same with per-layer overrides: layer_schemes NULL, or (n_layer) layer schemes that win
 * over scheme->layer and scheme->edge (tq_kv_cache_config.layer_schemes; copied). E.g. keep
 * the sliding-window layers (model_layer.is_swa) at f16 and compress only the global ones. */
model_status model_set_kv_layer_schemes(model *m, const tq_kv_scheme *scheme,
                                        const tq_kv_layer_scheme *layer_schemes);
/* Memory of the sequence's K/V (tq_kv_cache_memory: exact data bytes, allocated bytes, and
 * what fp16 would take). Errors: MODEL_ERR_ARG (NULL argument). */
model_status model_kv_memory(const model *m, tq_kv_memory *mem);
/* The cache itself, read-only (tq_kv_cache_compressed_length, tq_kv_cache_layer_scheme …);
 * valid until the next model_set_kv_* or model_free. NULL for a NULL model. */
const tq_kv_cache *model_kv_cache(const model *m);

#endif

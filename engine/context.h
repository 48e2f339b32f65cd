/* One sequence on a loaded model (model.h): its KV cache, activations and attention
 * workspace, and the forward pass, as llama.cpp's llama_context is to llama_model. A context
 * reads the model's weights and never writes them, so many contexts — each with its own KV
 * scheme — may share one model on many threads at once.
 *
 * context_create() allocates every buffer the forward pass needs for batches of up to
 * max_batch tokens and sequences of up to max_ctx positions; context_forward() allocates
 * nothing. The sequence's K/V are in a libturboquant KV cache (include/turboquant.h,
 * doc/kvcache.md) of the scheme context_params.kv_scheme (NULL: "f16", every K/V value as
 * IEEE half, attended exactly in fp32). Every attention layer, sliding-window ones included,
 * stores into that cache and attends with tq_kv_attention on the compressed codes; per-layer
 * schemes (e.g. local layers kept f16) through context_set_kv_layer_schemes(). Positions run
 * from 0; context_forward() appends tokens at positions pos0 .. pos0 + n - 1, rewinding the
 * sequence to pos0 first if it is longer. context_fork() starts a second context from a
 * context's sequence (a shared prompt prefix: chats, a server, speculative or beam branches),
 * its KV cache sharing the first one's pages copy-on-write.
 *
 * Two-phase storage. With a scheme's prefill_raw = 1 (the library default, as mlx-swift-lm)
 * a multi-token forward() keeps its tokens fp16 until the first single-token forward (the
 * first decode step), which compresses everything the scheme allows; a prefill-only workload
 * such as perplexity then never touches the compressed path. Set prefill_raw = 0 to compress
 * on every forward: after a call ending at length L, tokens [0, batch * floor(L / batch)) are
 * compressed before the attention of that call runs, so with L a multiple of the scheme's
 * batch every key every query of the call sees (its own included) is compressed.
 *
 * Threads. The caller owns the thread pool (tq_threadpool, include/turboquant.h) and lends it
 * at create: it runs the context's matmuls (tq_threadpool_run) and attention
 * (tq_kv_attention); NULL runs everything on the calling thread. A context is used by one
 * thread at a time, and a pool by one context at a time (two contexts running concurrently
 * need two pools, or NULL). Logits depend neither on the pool's size
 * (tests/test_thread_invariance.c) nor on other contexts of the same model
 * (tests/test_contexts.c). Every call returns a model_status and fills the context's message
 * (context_last_error), or the caller's buffer for context_create(). */
#ifndef TQ_ENGINE_CONTEXT_H
#define TQ_ENGINE_CONTEXT_H

#include "model.h"

typedef struct context_params {
    int max_ctx;   /* positions the sequence may reach; <= the model's context_length */
    int max_batch; /* most tokens one context_forward() call takes (clipped to max_ctx) */
    int ggml_rounding; /* 0: plain fp32 activations (8-bit only inside matmul); 1: also round
                          where llama.cpp's CPU backend rounds (fp16 Q and softmax weights in
                          attention, GELU through an fp16 table: doc/gemma3.md, "Numerics").
                          Measured: neither tracks llama.cpp's logits better (test_model.c).
                          With the library's cache only Q is rounded in attention (its
                          softmax weights stay fp32) */
    const tq_kv_scheme *kv_scheme; /* the KV cache scheme (tq_kv_scheme_parse); NULL: "f16".
                          Copied at create: the pointer need not outlive context_create() */
    int f32_act;       /* 0: matmuls round the activations to 8 bits (MATMUL_Q8_ACT, as
                          llama.cpp); 1: weights dequantized to fp32, activations kept fp32
                          (MATMUL_F32_ACT): slower, and a KL divergence between two contexts
                          then measures what differs between them (their KV caches) without
                          the activation-rounding floor (doc/gemma3.md §8) */
} context_params;

typedef struct model_context model_context;

/* Sees what every attention layer hands the KV cache: for layer il, the n tokens at
 * positions pos0 .. pos0 + n − 1, queries q (n, n_head, head_dim), keys k and values v
 * (n, n_head_kv, head_dim[_v]), fp32 after QK-norm and RoPE, and the attention parameters the
 * layer uses. Read-only; the pointers are valid during the call. For tools that record real
 * K/V (tq attn-bench --from-model). */
typedef void (*model_attn_hook)(void *ctx, int il, int pos0, int n, const float *q, const float *k,
                                const float *v, const tq_attn_params *ap);

/* A context on m (which must outlive it) with an empty sequence. pool: borrowed, NULL = the
 * caller's thread only; it must outlive the context. On error *out is NULL and err (if
 * err_cap > 0) holds a message. Errors: MODEL_ERR_ARG (NULL m/p/out, max_ctx or max_batch
 * < 1), MODEL_ERR_CONTEXT (max_ctx over the model's context_length), MODEL_ERR_KV_SCHEME
 * (p->kv_scheme does not fit the model), MODEL_ERR_NOMEM. */
model_status context_create(const model *m, const context_params *p, tq_threadpool *pool,
                            model_context **out, char *err, size_t err_cap);
/* NULL is fine. Leaves the model and the pool alone. */
void context_free(model_context *x);

/* The model the context runs; its configuration. */
const model *context_model(const model_context *x);
const model_config *context_config(const model_context *x);
/* The parameters as the context uses them (max_batch clipped; kv_scheme points at the
 * context's own copy of the current scheme). */
const context_params *context_get_params(const model_context *x);
/* Positions currently in the sequence. */
int context_seq_len(const model_context *x);
/* Drops every position >= len. Sliding-window layers keep only their last window +
 * TQ_KV_WINDOW_SLACK positions: rewinding further empties the sequence (length 0). */
void context_truncate(model_context *x, int len);
/* Message of the last failing call on x (empty string if none). */
const char *context_last_error(const model_context *x);

/* Runs tokens[0..n) at positions pos0 .. pos0+n-1 (rewinding the sequence to pos0 first),
 * 1 <= n <= max_batch, pos0 + n <= max_ctx. Writes logits: all_logits = 0: one row
 * (n_vocab floats) for the last token; all_logits = 1: (n, n_vocab) rows, one per token.
 * logits is caller-owned and must hold that many floats; it may be NULL to compute no
 * logits (the K/V are still stored: prefill of a prompt whose logits are not needed).
 * Errors: MODEL_ERR_ARG, MODEL_ERR_BATCH, MODEL_ERR_CONTEXT, MODEL_ERR_POS, MODEL_ERR_TOKEN
 * (checked before anything changes), MODEL_ERR_INTERNAL. */
model_status context_forward(model_context *x, const int32_t *tokens, int n, int pos0, int all_logits,
                             float *logits);
/* The same with every row's logits, (n, n_vocab), as token-by-token decode would give them:
 * the tokens go in the decode-exact chunks of the cache's scheme (tq_kv_scheme_decode_chunk,
 * at most max_batch each), so each position sees every key compressed or still fp16 exactly
 * as a single decode step there would (the scheme needs prefill_raw = 0, or compression
 * started). n may exceed max_batch. Errors: as context_forward. */
model_status context_forward_as_decode(model_context *x, const int32_t *tokens, int n, int pos0, float *logits);
/* The same right after a prompt prefilled raw (prefill_raw = 1, multi-token calls): the first
 * token goes alone — the decode step that ends the raw phase and compresses the prompt, with
 * the key mean, scale and split taken from the prompt's tokens — then the rest as
 * context_forward_as_decode. What generation after that prompt sees, at prefill cost. */
model_status context_forward_after_prompt(model_context *x, const int32_t *tokens, int n, int pos0,
                                          float *logits);
/* Every row's logits, (n, n_vocab), by one of the three above: the scoring modes of
 * engine/eval.h (batch: context_forward with all_logits, n ≤ max_batch). */
typedef enum model_rows_mode {
    MODEL_ROWS_BATCH = 0,        /* context_forward */
    MODEL_ROWS_AS_DECODE = 1,    /* context_forward_as_decode */
    MODEL_ROWS_AFTER_PROMPT = 2, /* context_forward_after_prompt */
} model_rows_mode;
model_status context_forward_rows(model_context *x, const int32_t *tokens, int n, int pos0, model_rows_mode mode,
                                  float *logits);

/* Layer replay, for runs that repeat one token sequence with only some layers' KV schemes
 * changed (auto:B's calibration, engine/kv_auto.c). context_replay_record(x, n_pos) starts a
 * record (n_pos 0: drops it): the passes that follow keep, for positions below n_pos, each
 * layer's input rows and the query, key and value rows it appended (a pass whose earlier
 * positions do not hold the recorded tokens records nothing; one that does drops what was
 * recorded after its positions). context_replay_from(x, l) ends the recording; from then on a
 * pass takes the layers below l from the record — their K/V appended as recorded, layer l's
 * input rows copied — instead of computing them, as far as they were fp16 in every recorded
 * pass and are now, for a single sequence whose positions up to the call's last hold the
 * recorded tokens (and no attention hook). An fp16 layer's rows
 * depend on the tokens alone, so the results are bit for bit those of computing every layer;
 * any other pass computes every layer. l = 0: every layer computed, the record kept.
 * Errors: MODEL_ERR_ARG (x NULL, n_pos outside [0, max_ctx]), MODEL_ERR_NOMEM (about
 * n_layer · n_pos · (n_embd + (n_head + n_head_kv) · head_dim + n_head_kv · head_dim_v)
 * floats). */
model_status context_replay_record(model_context *x, int n_pos);
void context_replay_from(model_context *x, int layer);
/* Hidden rows instead of logits (on 1, off 0), for one-sequence passes: a row asked for
 * logits gets the output matrix's input norm(x) instead (n_embd floats, rows n_embd apart:
 * the caller's buffer must hold n_embd floats per row, more than n_vocab in some models), and
 * the output matrix is skipped; context_output_logits then gives the logits of chosen tokens
 * (auto:B's calibration, engine/kv_auto.c). */
void context_set_hidden_out(model_context *x, int on);
/* Chosen logits of n rows h of norm(x) (n_embd apart; context_set_hidden_out): row r's
 * tokens ids[r · stride + i], i < k[r], ascending, give out[r · stride + i], each bit for bit
 * what a pass with f32_act computes for that token (its weight row dequantized, dot_f32, the
 * model's final soft-cap). A token's weight row is dequantized once for all the rows that
 * ask for it. Uses the context's scratch, so not inside a pass. MODEL_ERR_ARG for a count
 * outside [0, stride] or ids outside the vocabulary or not ascending, MODEL_ERR_NOMEM. */
model_status context_output_logits(model_context *x, const float *h, int n, const int32_t *ids, const int *k,
                                   size_t stride, float *out);
/* Layer passes taken from the record since context_replay_record (0 without one). */
long context_replay_count(const model_context *x);

/* Installs (fn non-NULL) or removes the attention hook; ctx is passed to every call. */
void context_set_attn_hook(model_context *x, model_attn_hook fn, void *ctx);

/* ---- KV cache scheme ---------------------------------------------------------------------- */

/* Replaces the context's KV cache with an empty one of `scheme` (NULL: "f16") and resets the
 * sequence to length 0; one context can run several schemes one after the other. The new
 * cache reserves max_ctx tokens and the attention workspace is re-sized, all here:
 * context_forward() still allocates nothing. On error the context keeps its previous cache
 * and sequence. Errors: MODEL_ERR_ARG (x NULL), MODEL_ERR_KV_SCHEME, MODEL_ERR_NOMEM. */
model_status context_set_kv_scheme(model_context *x, const tq_kv_scheme *scheme);
/* The same with per-layer overrides: layer_schemes NULL, or (n_layer) layer schemes that win
 * over scheme->layer and scheme->edge (tq_kv_cache_config.layer_schemes; copied). E.g. keep
 * the sliding-window layers (model_layer_is_swa) at f16 and compress only the global ones. */
model_status context_set_kv_layer_schemes(model_context *x, const tq_kv_scheme *scheme,
                                          const tq_kv_layer_scheme *layer_schemes);
/* keep = 1: the sliding-window layers keep every position instead of recycling the pages of
 * positions no query can see again (memory O(context) instead of O(window) on those layers),
 * so that the sequence can be saved at any length (cache files hold whole histories:
 * context_kv_save_memory, doc/prompt-cache.md); keep = 0 (the default) recycles. Logits are the
 * same either way (tests/test_prompt_cache.c). Replaces the cache with an empty one of the
 * current scheme (no per-layer overrides) as context_set_kv_scheme does; later
 * context_set_kv_* calls keep the setting. Errors: as context_set_kv_scheme. */
model_status context_set_kv_keep_history(model_context *x, int keep);
/* Memory of the sequence's K/V (tq_kv_cache_memory: exact data bytes, allocated bytes, and
 * what fp16 would take). Errors: MODEL_ERR_ARG (NULL argument). */
model_status context_kv_memory(const model_context *x, tq_kv_memory *mem);
/* Frees the raw pages a compressed prompt left spare (tq_kv_cache_trim): a long-lived
 * sequence (a server's) calls it after its first decode step. NULL is fine. */
void context_kv_trim(model_context *x);
/* The cache itself, read-only (tq_kv_cache_compressed_length, tq_kv_cache_layer_scheme …);
 * valid until the next context_set_kv_* or context_free. NULL for a NULL context. */
const tq_kv_cache *context_kv_cache(const model_context *x);

/* ---- forks: sequences sharing a prefix (doc/gemma3.md, "Forks") ---------------------------- */

/* A new context on src's model with src's parameters and scheme whose sequence is src's: its
 * KV cache is tq_kv_cache_fork(src's cache), sharing src's pages copy-on-write; run state,
 * attention workspace and message of its own; no attention hook. pool: as context_create (the
 * fork may run concurrently with src only on another pool, or NULL). src is read: it must not
 * be modified during the call. Either context then runs, truncates, changes scheme and is
 * freed independently, each giving the logits of an independent context fed the same calls.
 * On error *out is NULL and err (if err_cap > 0) holds a message. Errors: MODEL_ERR_ARG (NULL
 * src/out), MODEL_ERR_NOMEM. */
model_status context_fork(const model_context *src, tq_threadpool *pool, model_context **out, char *err,
                          size_t err_cap);
/* The same with the fork's own max_ctx (at least src's length, at most the model's context
 * length): a prefix kept for reuse, continued by requests longer than the one it came from.
 * The KV cache is not reserved for max_ctx (pages come as the sequence grows). Errors: as
 * context_fork; MODEL_ERR_CONTEXT (max_ctx below src's length or over the model's). */
model_status context_fork_ctx(const model_context *src, tq_threadpool *pool, int max_ctx, model_context **out,
                              char *err, size_t err_cap);
/* The KV memory of xs[0, n) together (tq_kv_caches_memory): each page they share counted
 * once. None may be modified during the call. Errors: MODEL_ERR_ARG (NULL xs/mem/element,
 * n = 0), MODEL_ERR_NOMEM. */
model_status contexts_kv_memory(const model_context *const *xs, size_t n, tq_kv_memory *mem);
/* *shared_bytes = the part of x's context_kv_memory allocated_bytes in pages another cache
 * also holds (tq_kv_cache_shared_bytes). Errors: MODEL_ERR_ARG (NULL argument). */
model_status context_kv_shared_bytes(const model_context *x, size_t *shared_bytes);

/* ---- saving and restoring the sequence (engine/context_state.c, doc/prompt-cache.md) ------- */

/* Exact bytes of the library's cache file image of x's sequence (tq_kv_cache_save_bound); 0
 * when it cannot be saved: a sliding-window layer has recycled positions (create the context
 * with kv_keep_history = 1 to save at any length), or x is NULL. */
size_t context_kv_save_bound(const model_context *x);
/* Writes that image (doc/cachefile.md) into dst (capacity bytes), its size into *written (may
 * be NULL). Errors: MODEL_ERR_ARG (NULL x/dst), MODEL_ERR_POS (positions recycled: cannot be
 * saved), MODEL_ERR_BATCH (capacity too small), MODEL_ERR_NOMEM. */
model_status context_kv_save_memory(const model_context *x, void *dst, size_t capacity, size_t *written);
/* Replaces x's sequence with the one in a cache file image: the library checks every byte
 * (tq_kv_cache_load_memory_expect) and that the file's shapes, scheme, every layer's scheme
 * and windows are x's; here, that every layer holds the same length, at most max_ctx. The
 * restored state is the saved one bit for bit (two-phase state, key mean, scale and split, raw
 * and compressed tokens), so what follows gives the logits the saved context would have. On
 * error x keeps its sequence. Errors: MODEL_ERR_ARG, MODEL_ERR_FILE (not a valid image:
 * context_last_error has the library's word), MODEL_ERR_KV_SCHEME (a valid image of another
 * model shape, scheme or window), MODEL_ERR_CONTEXT (longer than max_ctx), MODEL_ERR_NOMEM. */
model_status context_kv_load_memory(model_context *x, const void *data, size_t size);
/* The same with a file: tq_kv_cache_save (atomic: temporary file, fsync, rename) and
 * tq_kv_cache_load_expect. Errors as above; MODEL_ERR_FILE also when the file cannot be
 * opened, read or written (nothing written then). */
model_status context_kv_save(const model_context *x, const char *path);
model_status context_kv_load(model_context *x, const char *path);

/* ---- many sequences in one forward (a server's engine step) -------------------------------- */

/* The activations of a forward pass over several contexts' tokens at once: every matmul runs
 * once over all their rows (the weights are read once per step, not once per sequence), each
 * sequence appends to and attends its own KV cache (on its context's pool). A sequence's
 * logits do not depend on what else is in the batch, nor on batching at all: they equal
 * context_forward's for the same calls, bit for bit (tests/test_batch.c). Contexts of the
 * batch's model with its f32_act and no ggml_rounding; each used by one batch at a time. */
typedef struct model_batch model_batch;

/* One sequence's part of a step: tokens[0, n) at positions pos0 .. pos0 + n - 1 of x, as
 * context_forward (n <= x's max_batch); logits: n_vocab floats for the last token, or NULL. */
typedef struct batch_seq {
    model_context *x;
    const int32_t *tokens;
    int n, pos0;
    float *logits;
} batch_seq;

/* A batch for up to max_tokens rows (all sequences' tokens together) of up to max_seqs
 * sequences per step; f32_act as context_params.f32_act; pool runs the matmuls (borrowed,
 * NULL: the caller's thread). Errors: MODEL_ERR_ARG (NULL m/out, max_tokens or max_seqs < 1,
 * max_seqs > max_tokens), MODEL_ERR_NOMEM. */
model_status model_batch_create(const model *m, int max_tokens, int max_seqs, int f32_act, tq_threadpool *pool,
                                model_batch **out, char *err, size_t err_cap);
void model_batch_free(model_batch *b); /* NULL is fine; leaves the contexts alone */
/* Runs one step over seqs[0, n_seqs) (distinct contexts). Every sequence is checked before
 * anything changes (context_forward's errors, with the sequence's index, in
 * model_batch_last_error); on a later failure every sequence is rewound to its pos0. Errors:
 * MODEL_ERR_ARG (NULL, a context of another model or other numerics, a context twice),
 * MODEL_ERR_BATCH (more than max_seqs sequences or max_tokens rows), and context_forward's. */
model_status model_batch_forward(model_batch *b, const batch_seq *seqs, int n_seqs);
const char *model_batch_last_error(const model_batch *b);

#endif

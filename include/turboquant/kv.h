/*
 * turboquant/kv.h — the KV-cache and attention API of libturboquant: schemes, the cache, cache
 * files, the thread pool and attention on the compressed codes. Stable as doc/api.md says.
 * The cache: doc/kvcache.md; its files: doc/cachefile.md.
 */
#ifndef TURBOQUANT_KV_H
#define TURBOQUANT_KV_H

#include "codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The thread pool (below, "Thread pool"): attention and compression may take one. */
typedef struct tq_threadpool tq_threadpool;

/* ---- Schemes (doc/kvcache.md §2) --------------------------------------------------------- */

#define TQ_KV_PAGE_TOKENS 256 /* tokens per page: memory grows a page at a time, never copies */
#define TQ_KV_BLOCK 32        /* elements per q8_0 / q4_0 block (one fp16 scale each) */
/* tq_kv_layer_scheme.key_split's default: the split where the tables show it helps. At the
 * whole width 3 with Lloyd-Max codes that is head dim 256 (Gemma 3: KLD -11 to -22% in every
 * view); at head dim 64 it loses (SmolLM2: +6% as decode and after a prompt); 128 is
 * unmeasured and left off. With trellis codes it helps on both (doc/kvcache.md §2, "Key
 * split"). */
#define TQ_KV_KEY_SPLIT_AUTO 2
#define TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM 256
/* tq_kv_layer_scheme.key_mean's third value: besides the key mean, each compressed key of a
 * head is coded as its difference from ρ times the key before it as decoded, in chains of
 * TQ_KV_PRED_CHAIN positions (ρ per head, fitted with the key scale; doc/kvcache.md §2). */
#define TQ_KV_KEY_MEAN_PREDICT 2
#define TQ_KV_PRED_CHAIN 64

/* How one of K or V is stored once compressed. */
typedef enum tq_kv_format {
    TQ_KV_F16 = 0,   /* IEEE half per element: 2·dim bytes */
    TQ_KV_Q8_0 = 1,  /* blocks of 32: fp16 scale + 32 int8; dim % 16 == 0 */
    TQ_KV_Q4_0 = 2,  /* blocks of 32: fp16 scale + 16 bytes of 4-bit values; dim % 16 == 0 */
    TQ_KV_TURBO = 3, /* a TurboQuant codec record (tq_codec_bytes_per_vector) */
    TQ_KV_Q8_0R = 4, /* q8_0 of the vector after a seeded Walsh–Hadamard rotation (as llama.cpp
                        rotates K and V before q8_0); same bytes as Q8_0 */
    TQ_KV_Q4_0R = 5  /* q4_0 after the rotation; same bytes as Q4_0 */
} tq_kv_format;

/* The storage of one layer. No size of its own: versioned by the struct that holds it. */
typedef struct tq_kv_layer_scheme {
    tq_kv_format key_format, value_format;
    float key_bits, value_bits; /* TQ_KV_TURBO: bits per coordinate, [1, 8], fractional as for
                                   tq_codec_create (split TQ_SPLIT_FIXED); ignored otherwise */
    tq_variant key_variant;     /* TURBO keys: MSE (default) or PROD; values are always MSE */
    int norm_correction;        /* TURBO MSE keys and values; default 1 */
    int key_mean;               /* TURBO keys: 1 subtracts the per-head key mean (the
                                   default for PROD keys); TQ_KV_KEY_MEAN_PREDICT (2, MSE keys,
                                   their default): the mean and, per head, a prediction from
                                   the previous key (doc/kvcache.md §2, "Prediction across
                                   tokens") */
    int key_scale;              /* TURBO keys: per-channel key scale from keys and observed
                                   queries; default 1 */
    int key_split;              /* TURBO MSE keys with key_scale at a fractional width ≤ 4 or
                                   a whole width 3: split channels by query × key energy.
                                   0 off, 1 wherever the codec splits, TQ_KV_KEY_SPLIT_AUTO
                                   (2, the default) where measured to help: a fractional
                                   width at any head dim, the whole width 3 with trellis
                                   codes at any head dim and with Lloyd-Max codes at head
                                   dims of TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM or more. A cache
                                   reports what is in effect (0 or 1). */
} tq_kv_layer_scheme;

/* A whole-cache scheme (a sized struct: tq_kv_scheme_parse fills it, struct_size included). */
typedef struct tq_kv_scheme {
    size_t struct_size;        /* sizeof(tq_kv_scheme) as the caller was compiled */
    tq_kv_layer_scheme layer;  /* every layer not at an edge */
    tq_kv_layer_scheme edge;   /* the first edge_first and the last edge_last layers */
    int edge_first, edge_last; /* default 0, 0 */
    int raw_window;            /* newest tokens always kept fp16; default 0 */
    int batch;                 /* pending tokens are compressed `batch` at a time; default 64 */
    int quantized_kv_start;    /* nothing is compressed below this length; default 0 */
    int prefill_raw;           /* 1 (default): multi-token appends stay raw until the first
                                  single-token append or tq_kv_cache_compress; 0: compress on
                                  every append (same final state) */
    uint64_t seed;             /* seed of every TURBO codec and of the q8_0r / q4_0r rotations;
                                  default as tq_codec_config_init */
    int sink;                  /* attention sinks: positions [0, sink) of every layer are also
                                  kept fp16 once compressed and attended exactly; [0, 1024].
                                  tq_kv_scheme_defaults: 0; tq_kv_scheme_parse: 4 when a side
                                  of the layer or edge form is TurboQuant, else 0 */
    int trellis;               /* 1: every TurboQuant MSE side codes its 2- to 4-bit indices as
                                  a trellis (tq_codec_config.trellis; same bytes, less error,
                                  slower attention: doc/kvcache.md §2); TQ_TRELLIS_TWO_STATE:
                                  the same with two-state tables (a little more error, faster
                                  attention); 0: Lloyd-Max codes (the fastest attention).
                                  tq_kv_scheme_defaults: 0; tq_kv_scheme_parse:
                                  TQ_TRELLIS_TWO_STATE when a side of the layer or edge form
                                  is TurboQuant, else 0 (as sink). It sits in
                                  what was the struct's tail padding: a scheme built by hand,
                                  not by tq_kv_scheme_parse, must be zeroed first */
} tq_kv_scheme;

/* Parses a scheme string (grammar: tq_kv_scheme_help, doc/kvcache.md §2) into *out, every field
 * set (out_size bytes: the macro passes the caller's sizeof *out). Errors: TQ_ERR_NULL (text or
 * out), TQ_ERR_CAPACITY (out_size below the first sized release's struct), TQ_ERR_SCHEME (a
 * NUL-terminated message naming the bad part into err when not NULL, at most err_capacity
 * bytes). */
#define tq_kv_scheme_parse(text, out, err, err_capacity) \
    tq_kv_scheme_parse_sized((text), (out), sizeof *(out), (err), (err_capacity))
TQ_API tq_status tq_kv_scheme_parse_sized(const char *text, tq_kv_scheme *out, size_t out_size,
                                          char *err, size_t err_capacity);
/* A static multi-line string listing the valid scheme forms. */
TQ_API const char *tq_kv_scheme_help(void);
/* Writes the canonical form of *scheme (parses back to the same scheme) into buf,
 * NUL-terminated. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY (256 bytes always suffice),
 * TQ_ERR_INVALID (a field out of range, a bad struct_size). */
TQ_API tq_status tq_kv_scheme_format(const tq_kv_scheme *scheme, char *buf, size_t capacity);

/* Exact compressed bytes per token of one KV head for keys of dim head_dim_k and values of dim
 * head_dim_v. Errors: TQ_ERR_NULL, TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_VARIANT. */
TQ_API tq_status tq_kv_layer_scheme_bytes(const tq_kv_layer_scheme *layer, int head_dim_k,
                                          int head_dim_v, size_t *key_bytes,
                                          size_t *value_bytes);

/* ---- The cache (doc/kvcache.md §3) ------------------------------------------------------- */

/* A sized struct: fill it with tq_kv_cache_config_init, then set the scheme. */
typedef struct tq_kv_cache_config {
    size_t struct_size;           /* sizeof(tq_kv_cache_config) as the caller was compiled */
    int n_layers;                 /* [1, 4096] */
    int n_kv_heads;               /* [1, 1024] */
    int head_dim_k, head_dim_v;   /* [TQ_MIN_DIM, TQ_MAX_DIM] each */
    tq_kv_scheme scheme;
    const tq_kv_layer_scheme *layer_schemes; /* (n_layers,) overrides copied at create, or NULL */
    size_t reserve_tokens;        /* tokens of capacity allocated at create (default 0) */
    const size_t *layer_windows;  /* (n_layers,) sliding windows copied at create (0: none; at
                                     most 2^30), or NULL; a windowed layer keeps window +
                                     TQ_KV_WINDOW_SLACK positions (tq_kv_cache_dropped_length) */
    int key_rope_pairs;           /* the keys' rotary embedding, TQ_ROPE_PAIRS_* (codec.h): every
                                     layer's key scale and split are fitted with each channel's
                                     statistics moved halfway to its pair's (doc/kvcache.md §2);
                                     default TQ_ROPE_PAIRS_NONE.
                                     _ADJACENT / _HALVES need an even head_dim_k. Added after 0.2.0
                                     (a smaller struct_size leaves it NONE); cache files keep it */
    const float *key_rope_freqs;  /* with key_rope_pairs set: (n_layers, head_dim_k / 2) angles
                                     in radians per position of each layer's RoPE pairs (0: a
                                     pair RoPE does not turn), copied at create, or NULL (the
                                     default). Given, a TurboQuant key mean turns with RoPE: the
                                     key at position p (its index in the cache) is stored less
                                     the pre-RoPE mean turned to p's block of 64 positions
                                     (doc/kvcache.md §2, "Key mean"). Added after 0.2.0; cache
                                     files (version 9) keep it */
} tq_kv_cache_config;

/* Positions a windowed layer keeps beyond its window (room for short truncations). */
#define TQ_KV_WINDOW_SLACK 256

/* Fills cfg (not NULL): struct_size, the shapes given, scheme "f16", no overrides (cfg_size:
 * the caller's sizeof *cfg, passed by the macro, as for tq_codec_config_init). */
#define tq_kv_cache_config_init(cfg, n_layers, n_kv_heads, head_dim_k, head_dim_v)            \
    tq_kv_cache_config_init_sized((cfg), sizeof *(cfg), (n_layers), (n_kv_heads), (head_dim_k), \
                                  (head_dim_v))
TQ_API void tq_kv_cache_config_init_sized(tq_kv_cache_config *cfg, size_t cfg_size, int n_layers,
                                          int n_kv_heads, int head_dim_k, int head_dim_v);

typedef struct tq_kv_cache tq_kv_cache;

/* Creates an empty cache. Errors: TQ_ERR_NULL, TQ_ERR_INVALID (a count out of range, batch <
 * 1, negative window/start/edges, a layer window over 2^30, a bad struct_size), TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_VARIANT,
 * TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_create(tq_kv_cache **out, const tq_kv_cache_config *cfg);
TQ_API void tq_kv_cache_free(tq_kv_cache *cache);
/* Copies the config the cache was created with (layer_schemes NULL; layer_windows the cache's
 * own copy, valid until tq_kv_cache_free, NULL when no layer has a window) into out, at most out_size bytes (out->struct_size set to the bytes written). Errors:
 * TQ_ERR_NULL, TQ_ERR_CAPACITY (out_size below the first sized release's struct). */
TQ_API tq_status tq_kv_cache_get_config(const tq_kv_cache *cache, tq_kv_cache_config *out,
                                        size_t out_size);

/* Makes room for n_tokens tokens in every layer (later appends up to it allocate nothing).
 * Errors: TQ_ERR_NULL, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_reserve(tq_kv_cache *cache, size_t n_tokens);
/* Frees the raw (fp16) pages the cache keeps for reuse beyond what its raw window and a batch
 * in decode need: after a long prompt prefilled raw is compressed, its raw pages stay spare
 * (allocated_bytes of tq_kv_cache_memory counts them) until this call or tq_kv_cache_free. A
 * later raw prefill allocates again. Never changes what the cache holds. Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_kv_cache_trim(tq_kv_cache *cache);

/* Appends n_tokens tokens to one layer, k (n_tokens, n_kv_heads, head_dim_k) and v (n_tokens,
 * n_kv_heads, head_dim_v) floats, then compresses per the two-phase rule. Different layers may
 * be appended concurrently, one layer not. Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer),
 * TQ_ERR_NONFINITE, TQ_ERR_RANGE (beyond fp16: nothing appended; a norm beyond fp16 while
 * compressing: appended, raw from that token on), TQ_ERR_NOMEM (nothing appended). */
TQ_API tq_status tq_kv_cache_append(tq_kv_cache *cache, int layer, const float *k,
                                    const float *v, size_t n_tokens);
/* Compresses every pending raw token the scheme allows now, for one layer or all (layer -1).
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID, TQ_ERR_RANGE (tokens from the failing one stay raw). */
TQ_API tq_status tq_kv_cache_compress(tq_kv_cache *cache, int layer);
/* tq_kv_cache_append / tq_kv_cache_compress with the compression split over pool's threads
 * where it has 128 tokens or more (the first decode step after a long prompt): the same
 * records, bit for bit, and the same errors. pool may be NULL (then they are the calls above);
 * never call them from inside a task of pool. */
TQ_API tq_status tq_kv_cache_append_pool(tq_kv_cache *cache, int layer, const float *k,
                                         const float *v, size_t n_tokens, tq_threadpool *pool);
TQ_API tq_status tq_kv_cache_compress_pool(tq_kv_cache *cache, int layer, tq_threadpool *pool);

/* Records the channel energies of n query positions q (n, n_q_heads, head_dim_k) of one layer
 * for its key scale; call before the append that goes with them. No effect once the scale is
 * fixed or without a key scale. Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer, n_q_heads not
 * a multiple of n_kv_heads), TQ_ERR_NONFINITE (nothing recorded). */
TQ_API tq_status tq_kv_cache_observe_queries(tq_kv_cache *cache, int layer, const float *q,
                                             int n_q_heads, size_t n);

/* Tokens stored in a layer, and how many of them are compressed (0 for a bad layer). */
TQ_API size_t tq_kv_cache_length(const tq_kv_cache *cache, int layer);
TQ_API size_t tq_kv_cache_compressed_length(const tq_kv_cache *cache, int layer);
/* Positions [0, n) of a windowed layer that are gone (0 for other layers and a bad layer). */
TQ_API size_t tq_kv_cache_dropped_length(const tq_kv_cache *cache, int layer);

/* Rolls every layer back to `length` tokens; kept tokens keep their bytes. Errors: TQ_ERR_NULL,
 * TQ_ERR_INVALID (beyond some layer's length, or needing dropped positions; nothing changed). */
TQ_API tq_status tq_kv_cache_truncate(tq_kv_cache *cache, size_t length);

/* Reads tokens [start, start + n) of a layer back as floats: k (k_capacity floats ≥
 * n·n_kv_heads·head_dim_k) and v (likewise with head_dim_v); either may be NULL. Errors:
 * TQ_ERR_NULL, TQ_ERR_INVALID (bad layer or range, dropped positions), TQ_ERR_CAPACITY,
 * TQ_ERR_CORRUPT. */
TQ_API tq_status tq_kv_cache_read(const tq_kv_cache *cache, int layer, size_t start, size_t n,
                                  float *k, size_t k_capacity, float *v, size_t v_capacity);

typedef struct tq_kv_memory {
    size_t tokens;          /* Σ over layers of the stored tokens (not dropped ones) */
    size_t compressed_tokens;
    size_t data_bytes;      /* exact bytes of stored token data (codes, scales, fp16) */
    size_t allocated_bytes; /* pages, key means, page tables, the cache structs */
    size_t f16_bytes;       /* the same tokens in fp16: 2·(dk+dv)·heads per token */
} tq_kv_memory;

/* Memory in use, into mem (at most mem_size bytes: sizeof *mem). Errors: TQ_ERR_NULL,
 * TQ_ERR_CAPACITY (mem_size below the first release's struct). */
TQ_API tq_status tq_kv_cache_memory(const tq_kv_cache *cache, tq_kv_memory *mem,
                                    size_t mem_size);

/* Creates *out: src's shapes, layer windows and tokens stored with `scheme`, compressed as after a decode
 * step. Errors: as tq_kv_cache_create and tq_kv_cache_append; TQ_ERR_STATE (src dropped
 * positions). */
TQ_API tq_status tq_kv_cache_convert(const tq_kv_cache *src, const tq_kv_scheme *scheme,
                                     tq_kv_cache **out);

/* ---- Forks (doc/kvcache.md §3, "Forks") ------------------------------------------------- */

/* Creates *out, a second sequence holding src's state (tokens, two-phase state, key transform)
 * that shares src's pages copy-on-write: either cache then appends, compresses, truncates and
 * is freed independently, in any order, and different caches may be used from different
 * threads even while they share pages; src must not be modified during the call. O(pages).
 * Errors: TQ_ERR_NULL, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_fork(const tq_kv_cache *src, tq_kv_cache **out);
/* *shared_bytes = the bytes of cache's pages that another cache also holds (counted in both
 * caches' tq_kv_cache_memory). Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_kv_cache_shared_bytes(const tq_kv_cache *cache, size_t *shared_bytes);
/* Memory of caches[0, n) together into mem (at most mem_size bytes): the sum of their
 * tq_kv_cache_memory with each page they share counted once. None may be modified during the
 * call. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_caches_memory(const tq_kv_cache *const *caches, size_t n,
                                     tq_kv_memory *mem, size_t mem_size);

/* ---- Cache files (doc/cachefile.md) ------------------------------------------------------ */

/* The format version the writer writes; the loader reads versions 1 to this one (a file before
 * version 4 has no layer windows, one before version 5 no q8_0r / q4_0r and no sinks, one
 * before version 6 no trellis codes, one before version 7 no key_rope_pairs, one before
 * version 8 no key split at a whole width, one before version 9 no key_rope_freqs, one before
 * version 10 no key-mean fast pairs, one before version 11 no two-state trellis tables). */
#define TQ_KV_CACHE_FILE_VERSION 12

/* Exact bytes tq_kv_cache_save_memory writes for the cache now; 0 for NULL or a cache that
 * dropped positions. */
TQ_API size_t tq_kv_cache_save_bound(const tq_kv_cache *cache);
/* Writes the file image into dst (capacity bytes) and its size into *written (may be NULL).
 * Errors: TQ_ERR_NULL, TQ_ERR_STATE (a windowed cache that dropped positions),
 * TQ_ERR_CAPACITY, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_save_memory(const tq_kv_cache *cache, void *dst, size_t capacity,
                                         size_t *written);
/* Saves atomically (a new O_EXCL temp file, fsync, rename, fsync of the folder: path is the old
 * file or the complete new one). Errors: TQ_ERR_NULL, TQ_ERR_STATE (dropped positions),
 * TQ_ERR_IO (path untouched, or only the folder's fsync failed), TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_save(const tq_kv_cache *cache, const char *path);
/* Loads a file image (any alignment) into a new cache *out (NULL on error); every byte is
 * validated, allocation is bounded by size; never crashes. Errors, first failing check wins:
 * TQ_ERR_NULL, TQ_ERR_FORMAT, TQ_ERR_VERSION, TQ_ERR_CHECKSUM, TQ_ERR_CORRUPT, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_load_memory(const void *data, size_t size, tq_kv_cache **out);
/* The same from the file at path; TQ_ERR_IO when it cannot be opened or read or is not a
 * regular file. */
TQ_API tq_status tq_kv_cache_load(const char *path, tq_kv_cache **out);
/* As the two above, and the file's shapes and schemes must match *expect (when not NULL;
 * reserve_tokens ignored; layer_windows, when set, against a version-4 file's), else TQ_ERR_MISMATCH before any allocation for the tokens. */
TQ_API tq_status tq_kv_cache_load_memory_expect(const void *data, size_t size,
                                                const tq_kv_cache_config *expect,
                                                tq_kv_cache **out);
TQ_API tq_status tq_kv_cache_load_expect(const char *path, const tq_kv_cache_config *expect,
                                         tq_kv_cache **out);

/* ---- Thread pool ------------------------------------------------------------------------- */

/* One task of a parallel for: thread < the pool's size, distinct among concurrent tasks. */
typedef void (*tq_task_fn)(void *ctx, size_t task, int thread);
/* An embedder's parallel for: must call task_fn(task_ctx, t, thread) exactly once for every
 * t < n_tasks, on up to the pool's n_threads threads (thread < n_threads, distinct among
 * concurrent calls), and return when all calls have returned, their writes visible. */
typedef void (*tq_parallel_for_fn)(void *user, tq_task_fn task_fn, void *task_ctx,
                                   size_t n_tasks);

/* A pool of n_threads threads (the caller's included; idle workers sleep). Errors:
 * TQ_ERR_NULL, TQ_ERR_INVALID (n_threads outside [1, 256]), TQ_ERR_NOMEM. */
TQ_API tq_status tq_threadpool_create(tq_threadpool **out, int n_threads);
/* A pool that runs every parallel for through fn(user, ...) (ggml, OpenMP, a server's workers)
 * with n_threads as its size. Errors: TQ_ERR_NULL (out or fn), TQ_ERR_INVALID (n_threads
 * outside [1, 256]), TQ_ERR_NOMEM. */
TQ_API tq_status tq_threadpool_create_custom(tq_threadpool **out, int n_threads,
                                             tq_parallel_for_fn fn, void *user);
TQ_API void tq_threadpool_free(tq_threadpool *pool);
/* Threads including the caller; 1 for a NULL pool. */
TQ_API int tq_threadpool_size(const tq_threadpool *pool);
/* Parallel for: fn(ctx, task, thread) once for every task < n_tasks, any order; returns when
 * all have returned. One run at a time per pool (concurrent runs are serialized); NULL pool,
 * size 1 or one task: inline on the caller as thread 0. Never call it from inside fn. */
TQ_API void tq_threadpool_run(tq_threadpool *pool, tq_task_fn fn, void *ctx, size_t n_tasks);

/* ---- Attention (doc/kvcache.md §4) ------------------------------------------------------- */

/* A sized struct: fill it with tq_attn_params_init. */
typedef struct tq_attn_params {
    size_t struct_size; /* sizeof(tq_attn_params) as the caller was compiled */
    float scale;        /* score = scale·⟨q, k⟩ (then soft-capped) */
    int causal;         /* 1: query i of n sits at position len − n + i and sees keys ≤ it */
    int sliding_window; /* 0: none; W > 0: a query at p sees only keys > p − W */
    float softcap;      /* 0: none; c > 0: score = c·tanh(score/c) */
} tq_attn_params;

/* Fills p: struct_size, scale 1/√head_dim_k, causal, no window, no soft-cap (p_size: the
 * caller's sizeof *p, passed by the macro, as for tq_codec_config_init). */
#define tq_attn_params_init(p, head_dim_k) tq_attn_params_init_sized((p), sizeof *(p), (head_dim_k))
TQ_API void tq_attn_params_init_sized(tq_attn_params *p, size_t p_size, int head_dim_k);

/* Workspace bytes of tq_kv_attention for this layer, n_q_heads, up to n_queries queries and
 * n_threads threads (any cache length); 0 on a bad argument. */
TQ_API size_t tq_kv_attention_workspace_size(const tq_kv_cache *cache, int layer,
                                             int n_q_heads, size_t n_queries, int n_threads);

/* Attention of n_queries query positions q (n_queries, n_q_heads, head_dim_k) on one layer's
 * codes into out (out_capacity floats ≥ n_queries·n_q_heads·head_dim_v); query head h reads KV
 * head h / (n_q_heads / n_kv_heads); a query that sees no key gets zeros. pool may be NULL;
 * work: work_bytes ≥ the workspace size. Reads the cache only (not concurrent with writes to
 * the layer). Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer, heads, n_queries > length,
 * window, scale, softcap, struct_size), TQ_ERR_CAPACITY (work or out too small),
 * TQ_ERR_NONFINITE (in q), TQ_ERR_CORRUPT. */
TQ_API tq_status tq_kv_attention(const tq_kv_cache *cache, int layer, const float *q,
                                 int n_q_heads, size_t n_queries, const tq_attn_params *params,
                                 tq_threadpool *pool, void *work, size_t work_bytes, float *out,
                                 size_t out_capacity);

/* tq_kv_attention with query i at position positions[i] (any order, repeats allowed, each in
 * [0, length)) instead of length − n_queries + i: causal masks and sliding windows are relative
 * to it, and n_queries may exceed the length. Bit-identical to tq_kv_attention when
 * positions[i] = length − n_queries + i. Errors: those of tq_kv_attention; TQ_ERR_NULL
 * (positions NULL with n_queries > 0); TQ_ERR_INVALID (a position out of range). */
TQ_API tq_status tq_kv_attention_at(const tq_kv_cache *cache, int layer, const float *q,
                                    int n_q_heads, size_t n_queries, const int64_t *positions,
                                    const tq_attn_params *params, tq_threadpool *pool,
                                    void *work, size_t work_bytes, float *out,
                                    size_t out_capacity);

#ifdef __cplusplus
}
#endif

#endif /* TURBOQUANT_KV_H */

/*
 * KV cache internals shared by the cache's files (kvcache.c: the operations and the two-phase
 * rule; kv_scheme.c: the scheme language; kv_records.c: record formats; kv_pages.c: page
 * storage), attention.c (reads) and the cache files (cachefile*.c). Not public. The key
 * transform (mean, scale, split) is its own object: key_transform.h. The kernels never
 * include it: they take the record descriptions (kernels/record.h).
 *
 * Per layer, tokens [0, n_comp) are compressed and [n_comp, len) are raw fp16. Both parts are
 * pages of TQ_KV_PAGE_TOKENS tokens with a head-major layout, so one KV head's records of a
 * page are contiguous and attention streams them:
 *   compressed page i (tokens [iP, iP + P)): K (n_kv_heads, P, k.rec_bytes), then
 *                                              V (n_kv_heads, P, v.rec_bytes)
 *   raw page j (tokens [raw_base + jP, …)):   K (n_kv_heads, P, dk) u16, then V (…, dv) u16
 * raw_base is a multiple of P, so token t sits at slot t % P in both. Raw tokens below n_comp
 * in the first raw page are stale and never read.
 *
 * Attention sinks (scheme.sink = N > 0): a compressed layer also keeps the fp16 K and V of
 * positions [0, N) in its sink store, written as compress_to encodes them (the records are
 * written as without sinks); positions [0, min(N, n_comp)) are read from there, exactly, by
 * attention, tq_kv_cache_read and the cache files:
 *   sink store: K (n_kv_heads, N, dk) u16, then V (n_kv_heads, N, dv) u16
 */
#ifndef TQ_KVCACHE_INTERNAL_H
#define TQ_KVCACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/record.h"
#include "key_transform.h"
#include "turboquant.h"

#define TQ_KV_P ((size_t)TQ_KV_PAGE_TOKENS)
/* The key transform's statistics: the first this many kept keys at the first compression, the
 * queries of positions below it (kvcache.c, fit_keys). */
#define TQ_KV_KEY_SCALE_TOKENS ((size_t)512)

/* One of K or V of a layer, in its compressed format: the description of its records, as the
 * codec (TURBO) or the block formats (f16, q8_0, q4_0; q8_0r / q4_0r with their rotation) give
 * it (kernels/record.h); its codec or rotation is the layer's to free (tq_kv_tensor_free). */
typedef tq_record tq_kv_tensor;

typedef struct tq_kv_layer {
    tq_kv_layer_scheme scheme;
    tq_kv_tensor k, v;
    int compress_none; /* both formats f16: the raw part is the storage, never compressed */
    size_t len, n_comp;
    uint8_t **cpages; /* compressed pages; n_cpages allocated, page i covers [iP, iP + P) */
    size_t n_cpages, cap_cpages;
    uint16_t **rpages; /* raw pages in use, page j covers [raw_base + jP, …) */
    size_t n_rpages, cap_rpages;
    size_t raw_base;
    uint16_t **rspare; /* allocated raw pages not in use */
    size_t n_rspare, cap_rspare;
    uint8_t **cspare; /* allocated compressed pages not in use (windowed layers) */
    size_t n_cspare, cap_cspare;
    size_t window;   /* layer_windows[i]: 0 or the most positions a query attends */
    size_t dropped;  /* positions [0, dropped) are gone (windowed layers; multiple of P) */
    tq_key_transform *kt; /* the key transform (key_transform.h) when the layer has a key mean
                             or key scale (TURBO keys), else NULL */
    int compress_started;
    uint16_t *sink; /* the sink store (NULL: scheme.sink 0 or an f16 layer); not shared by forks */
    float *rho;     /* (n_kv_heads) prediction across tokens (kv_predict.h): each head's ρ, 0
                       where it does not predict; NULL: a layer without key_mean
                       TQ_KV_KEY_MEAN_PREDICT */
    int rho_set;    /* ρ fitted (at the first compression, with the key transform) */
} tq_kv_layer;

/* The largest layer window (tq_kv_cache_config.layer_windows; cache files hold no more). */
#define TQ_KV_WINDOW_MAX ((size_t)1 << 30)
/* The most attention sinks a scheme keeps (tq_kv_scheme.sink). */
#define TQ_KV_SINK_MAX 1024
#define TQ_KV_SINK_DEFAULT 4 /* tq_kv_scheme_parse's sink=N for TurboQuant schemes */

struct tq_kv_cache {
    tq_kv_cache_config cfg; /* layer_schemes NULL; layer_windows = windows */
    size_t *windows;        /* (n_layers,) the layer windows, NULL when no layer has one */
    float *freqs;           /* (n_layers, head_dim_k / 2) key_rope_freqs, NULL when not given */
    tq_kv_layer *layers;    /* (n_layers,) */
    size_t cpage_bytes_max, rpage_bytes;
};

static inline size_t tq_kv_cpage_k_bytes(const tq_kv_cache *c, const tq_kv_layer *l) {
    return (size_t)c->cfg.n_kv_heads * TQ_KV_P * l->k.rec_bytes;
}
static inline size_t tq_kv_cpage_bytes(const tq_kv_cache *c, const tq_kv_layer *l) {
    return (size_t)c->cfg.n_kv_heads * TQ_KV_P * (l->k.rec_bytes + l->v.rec_bytes);
}
/* Compressed K record of (token t, head h), V record likewise. */
static inline const uint8_t *tq_kv_krec(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                        int h) {
    (void)c;
    return l->cpages[t / TQ_KV_P] + ((size_t)h * TQ_KV_P + t % TQ_KV_P) * l->k.rec_bytes;
}
static inline const uint8_t *tq_kv_vrec(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                        int h) {
    return l->cpages[t / TQ_KV_P] + tq_kv_cpage_k_bytes(c, l) +
           ((size_t)h * TQ_KV_P + t % TQ_KV_P) * l->v.rec_bytes;
}
/* Raw fp16 K / V of (token t, head h). */
static inline const uint16_t *tq_kv_kraw(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                         int h) {
    return l->rpages[(t - l->raw_base) / TQ_KV_P] +
           ((size_t)h * TQ_KV_P + t % TQ_KV_P) * (size_t)c->cfg.head_dim_k;
}
static inline const uint16_t *tq_kv_vraw(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                         int h) {
    return l->rpages[(t - l->raw_base) / TQ_KV_P] +
           (size_t)c->cfg.n_kv_heads * TQ_KV_P * (size_t)c->cfg.head_dim_k +
           ((size_t)h * TQ_KV_P + t % TQ_KV_P) * (size_t)c->cfg.head_dim_v;
}

/* The sink positions a layer holds with n_comp tokens compressed: min(scheme.sink, n_comp);
 * 0 on a layer that is never compressed (both formats f16). */
static inline size_t tq_kv_sink_held(const tq_kv_cache *c, const tq_kv_layer *l, size_t n_comp) {
    size_t n = l->compress_none ? 0 : (size_t)c->cfg.scheme.sink;
    return n_comp < n ? n_comp : n;
}
/* Positions [0, n) of the layer are read from the sink store: tq_kv_sink_held (0 while the
 * store is not allocated: a windowed layer's positions below n_comp then are all dropped). */
static inline size_t tq_kv_sink_len(const tq_kv_cache *c, const tq_kv_layer *l) {
    return l->sink ? tq_kv_sink_held(c, l, l->n_comp) : 0;
}
/* fp16 K / V of sink position t (< scheme.sink), head h, in the sink store. */
static inline const uint16_t *tq_kv_ksink(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                          int h) {
    return l->sink + ((size_t)h * (size_t)c->cfg.scheme.sink + t) * (size_t)c->cfg.head_dim_k;
}
static inline const uint16_t *tq_kv_vsink(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                          int h) {
    size_t n = (size_t)c->cfg.scheme.sink;
    return l->sink + (size_t)c->cfg.n_kv_heads * n * (size_t)c->cfg.head_dim_k +
           ((size_t)h * n + t) * (size_t)c->cfg.head_dim_v;
}
/* The exact fp16 K / V of (token t, head h): the sink store below tq_kv_sink_len, else the raw
 * part (t ≥ n_comp). Rows of one head are contiguous within either. */
static inline const uint16_t *tq_kv_kexact(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                           int h) {
    return t < tq_kv_sink_len(c, l) ? tq_kv_ksink(c, l, t, h) : tq_kv_kraw(c, l, t, h);
}
static inline const uint16_t *tq_kv_vexact(const tq_kv_cache *c, const tq_kv_layer *l, size_t t,
                                           int h) {
    return t < tq_kv_sink_len(c, l) ? tq_kv_vsink(c, l, t, h) : tq_kv_vraw(c, l, t, h);
}
/* Allocates the layer's sink store if its scheme has sinks and it has none yet (at its first
 * compression, a restore, a fork). Errors: TQ_ERR_NOMEM. */
tq_status tq_kv_sink_alloc(const tq_kv_cache *c, tq_kv_layer *l);
/* Bytes of a layer's sink store (0 without one). */
static inline size_t tq_kv_sink_bytes(const tq_kv_cache *c, const tq_kv_layer *l) {
    return l->sink ? (size_t)c->cfg.scheme.sink * (size_t)c->cfg.n_kv_heads *
                         (size_t)(c->cfg.head_dim_k + c->cfg.head_dim_v) * sizeof(uint16_t)
                   : 0;
}

/* ---- the scheme language (kv_scheme.c) ---- */

/* *s = the default scheme: f16 keys and values, batch 64, prefill_raw on, the default seed. */
void tq_kv_scheme_defaults(tq_kv_scheme *s);
/* A caller's sized scheme or cache config as this version's struct, missing fields at their
 * defaults (the sized-struct rule, doc/api.md); TQ_ERR_NULL, TQ_ERR_INVALID. */
tq_status tq_kv_scheme_in(tq_kv_scheme *dst, const tq_kv_scheme *src);
tq_status tq_kv_cache_config_in(tq_kv_cache_config *dst, const tq_kv_cache_config *src);
/* 1 if l's formats and key variant are known values (what tq_kv_scheme_format can write). */
int tq_kv_layer_scheme_valid(const tq_kv_layer_scheme *l);

/* ---- record formats and per-tensor layout (kv_records.c) ---- */

/* Sets up tensor x for format f at dim and bits (TURBO: its codec from variant, norm, seed and,
 * for keys with a key split, split; trellis: trellis-coded indices for an MSE codec; is_key: rows
 * in the scoring basis of prepared queries),
 * with the record description its codec (tq_codec_describe) or block format (tq_record_plain)
 * gives (q8_0r / q4_0r: the block format's, with the rotation seeded from seed, apart for keys
 * and values). Errors: those of the sizes, the codec and the rotation. Free with
 * tq_kv_tensor_free. */
tq_status tq_kv_tensor_init(tq_kv_tensor *x, tq_kv_format f, int dim, float bits,
                            tq_variant variant, int norm, uint64_t seed, int is_key, int split,
                            int trellis);
/* Frees what tq_kv_tensor_init made for x (its codec, its rotation); x stays a description. */
void tq_kv_tensor_free(tq_kv_tensor *x);
/* One record (x->rec_bytes at rec) of the x->dim floats v (F16 in native byte order). */
tq_status tq_kv_tensor_encode(const tq_kv_tensor *x, const float *v, uint8_t *rec);
/* One record → x->dim floats in the original basis (the reference path: no shortcut). */
tq_status tq_kv_tensor_decode(const tq_kv_tensor *x, const uint8_t *rec, float *out);

/* l->key_split at head dim dk in a cache with (trellis 1) or without trellis codes, as 0 or 1:
 * TQ_KV_KEY_SPLIT_AUTO resolved (0 at a whole key width with Lloyd-Max codes below
 * TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM), 0 and 1 as they are. */
int tq_kv_key_split_resolve(const tq_kv_layer_scheme *l, int trellis, int dk);
/* 1 if layer scheme l splits its keys at head dim dk (tq_kv_layer_scheme.key_split: TURBO MSE
 * keys with key_scale and key_split resolved on, at bits that allow a split). */
int tq_kv_key_split_applies(const tq_kv_layer_scheme *l, int trellis, int dk);

/* ---- page storage (kv_pages.c) ---- */

/* Compressed pages for tokens [from, n_tokens), spare pages first (slots added below from's
 * page stay NULL: a windowed layer's dropped range). Errors: TQ_ERR_NOMEM. */
tq_status tq_kv_ensure_cpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from,
                              size_t n_tokens);
/* Raw pages for tokens [raw_base, end) (spare pages first). Errors: TQ_ERR_NOMEM. */
tq_status tq_kv_ensure_rpages(const tq_kv_cache *c, tq_kv_layer *l, size_t end);
/* Raw pages wholly below position bound go to the spare list; raw_base moves past them. */
void tq_kv_spare_raw_below(tq_kv_layer *l, size_t bound);
/* Every raw page goes to the spare list (n_rpages = 0; raw_base is the caller's to set). */
void tq_kv_spare_raw_all(tq_kv_layer *l);
/* A windowed layer, before an append at position pos (its length), recycles the pages wholly
 * below what that append's first query can see (less TQ_KV_WINDOW_SLACK); dropped, raw_base
 * and n_comp move up to that page boundary. No-op for a layer without a window. */
void tq_kv_drop_old(tq_kv_layer *l, size_t pos);
/* Shapes an empty layer for a saved state, pages allocated (tq_kv_layer_restore's part).
 * Errors: TQ_ERR_INVALID (bad layer, n_comp > len, a non-empty layer, n_comp > 0 on an f16
 * layer), TQ_ERR_NOMEM. */
tq_status tq_kv_layer_restore_shape(tq_kv_cache *c, int layer, size_t len, size_t n_comp);

/* ---- what cache files use (kvcache.c) ---- */

/* Layer `layer`'s key transform (NULL without one): the shape a file's must have. */
const tq_key_transform *tq_kv_layer_key_transform(const tq_kv_cache *c, int layer);
/* Restores an empty layer of a new cache to a saved state: len tokens, the first n_comp
 * compressed (pages allocated, for the caller to fill through tq_kv_krec / tq_kv_kraw …), the
 * two-phase flag, and the key transform kt (made by tq_key_transform_create_like of the
 * layer's; NULL when it has none), which the layer takes on success. Errors: TQ_ERR_INVALID
 * (as tq_kv_layer_restore_shape; a transform where the layer has none or the other way),
 * TQ_ERR_NOMEM. */
tq_status tq_kv_layer_restore(tq_kv_cache *c, int layer, size_t len, size_t n_comp,
                              int compress_started, tq_key_transform *kt);

/* Pages carry a reference count (a fork shares them; kv_pages.c). A page of `bytes` data
 * bytes held once; NULL when out of memory. */
void *tq_kv_page_alloc(size_t bytes);
/* One more holder of page. */
void tq_kv_page_share(void *page);
/* How many caches hold page (1: its one holder may write it). */
size_t tq_kv_page_refs(const void *page);
/* Drops one reference to page (NULL: nothing), freeing it on the last. */
void tq_kv_page_drop(void *page);
/* Before writing tokens [from, to) of the compressed (raw) part: the pages holding them that
 * are shared are replaced by the layer's own copies. Errors: TQ_ERR_NOMEM. */
tq_status tq_kv_own_cpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t to);
tq_status tq_kv_own_rpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t to);


/* The most raw tokens the key mean is taken from at a layer's first compression (default and
 * 0: TQ_KV_KEY_SCALE_TOKENS). Writers before 2026-12 took it from the first `batch` tokens;
 * tests/test_cachefile.c sets that count to rebuild the caches of its older golden files. */
void tq_kv_set_key_mean_tokens(size_t n);

#endif

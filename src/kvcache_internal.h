/*
 * KV cache internals shared by the cache's files (kvcache.c: the operations and the two-phase
 * rule; kv_scheme.c: the scheme language; kv_records.c: record formats; kv_pages.c: page
 * storage; kv_keys.c: key statistics), attention.c (reads) and cachefile.c. Not public.
 *
 * Per layer, tokens [0, n_comp) are compressed and [n_comp, len) are raw fp16. Both parts are
 * pages of TQ_KV_PAGE_TOKENS tokens with a head-major layout, so one KV head's records of a
 * page are contiguous and attention streams them:
 *   compressed page i (tokens [iP, iP + P)): K (n_kv_heads, P, k.rec_bytes), then
 *                                              V (n_kv_heads, P, v.rec_bytes)
 *   raw page j (tokens [raw_base + jP, …)):   K (n_kv_heads, P, dk) u16, then V (…, dv) u16
 * raw_base is a multiple of P, so token t sits at slot t % P in both. Raw tokens below n_comp
 * in the first raw page are stale and never read.
 */
#ifndef TQ_KVCACHE_INTERNAL_H
#define TQ_KVCACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "turboquant.h"

#define TQ_KV_P ((size_t)TQ_KV_PAGE_TOKENS)
/* The key scale's statistics: the first this many kept keys at the first compression, the
 * queries of positions below it (kv_keys.c, compute_key_scale). */
#define TQ_KV_KEY_SCALE_TOKENS ((size_t)512)

/* One of K or V of a layer, in its compressed format. */
typedef struct tq_kv_tensor {
    tq_kv_format format;
    int dim;
    size_t rec_bytes; /* bytes per token per head */
    int row_floats;   /* floats of a decoded row in the scoring basis: dim, or for TURBO
                         tq_codec_query_floats (2·dim with PROD) */
    /* TQ_KV_TURBO: the record layout of the codec (doc/format.md, one unit, fixed or block
     * split: the same layout) */
    tq_codec *codec;
    int block; /* keys with a key split: channels in the first block (segment 0); else 0 */
    int n_seg;
    struct {
        int start, count, bits;
        size_t off;
        const float *centroids; /* ×√dim */
    } seg[2];
    size_t norm_off;
    int norm_f32;
    int prod;
    size_t sign_off, gamma_off;
    float inv_sqrt_dim;
    float prod_scale; /* √(π/2)/dim */
} tq_kv_tensor;

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
    float *key_mean; /* (n_kv_heads, dk) when scheme.key_mean and TURBO keys, else NULL */
    int mean_set;
    float *key_scale; /* (n_kv_heads, dk) s when scheme.key_scale and TURBO keys, else NULL:
                         keys are encoded as s ⊙ (k − mean), queries scored as q / s */
    double *q_sq;     /* (n_kv_heads, dk) Σ q² over the observed query rows of each KV head's
                         group (with key_scale; frozen once scale_set) */
    double q_rows;    /* query rows observed per KV head */
    uint16_t *key_perm; /* (n_kv_heads, dk) with a key split (k.block > 0): stored coordinate j
                           of head h holds channel key_perm[h·dk + j] (identity until
                           scale_set); else NULL */
    int scale_set;
    int compress_started;
} tq_kv_layer;

struct tq_kv_cache {
    tq_kv_cache_config cfg; /* layer_schemes NULL */
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

/* The channel that stored key coordinate j of the head whose rows start at hk = h·dk holds
 * (the key split's order; j itself without one). */
static inline int tq_kv_key_channel(const tq_kv_layer *l, size_t hk, int j) {
    return l->key_perm ? (int)l->key_perm[hk + (size_t)j] : j;
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
 * for keys with a key split, split; is_key: rows in the scoring basis of prepared queries),
 * deriving the record layout of doc/format.md. Errors: those of the sizes and the codec;
 * TQ_ERR_VARIANT when the codec's layout is not the spec's. x->codec is the caller's to free. */
tq_status tq_kv_tensor_init(tq_kv_tensor *x, tq_kv_format f, int dim, float bits,
                            tq_variant variant, int norm, uint64_t seed, int is_key, int split);
/* One record (x->rec_bytes at rec) of the x->dim floats v (F16 in native byte order). */
tq_status tq_kv_tensor_encode(const tq_kv_tensor *x, const float *v, uint8_t *rec);
/* One record → x->dim floats in the original basis (the reference path: no shortcut). */
tq_status tq_kv_tensor_decode(const tq_kv_tensor *x, const uint8_t *rec, float *out);

/* Decodes n consecutive records of tensor x (stride x->rec_bytes) into rows of x->row_floats
 * floats (stride `stride`), in the scoring basis: original coordinates for F16/Q8_0/Q4_0,
 * the codec's rotated basis for TURBO (norm/√d · c[idx], PROD signs scaled by √(π/2)/d·γ·n in
 * the second half). Returns 0 if some record held a corrupt norm (that row is zero). */
int tq_kv_decode_rows(const tq_kv_tensor *x, const uint8_t *rec, size_t n, float *rows,
                      size_t stride);

/* 1 if layer scheme l splits its keys at head dim dk (tq_kv_layer_scheme.key_split: TURBO MSE
 * keys with key_scale and key_split, at bits that allow a split). */
int tq_kv_key_split_applies(const tq_kv_layer_scheme *l, int dk);

/* fp16 rows → f32 (SIMD where available). */
void tq_kv_f16_rows(const uint16_t *in, size_t n, int dim, float *out, size_t stride);

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
/* Cache files (src/cachefile.c): shapes an empty layer for a saved state, pages allocated.
 * Errors: TQ_ERR_INVALID (bad layer, n_comp > len, a non-empty layer, n_comp > 0 on an f16
 * layer), TQ_ERR_NOMEM. */
tq_status tq_kv_layer_restore_shape(tq_kv_cache *c, int layer, size_t len, size_t n_comp);

/* ---- key statistics and transforms (kv_keys.c) ---- */

/* A layer's key scale back to "not fixed": scale 1, no query statistics, identity key order.
 * Only for a layer with a key scale (l->key_scale, l->q_sq allocated). */
void tq_kv_key_scale_reset(const tq_kv_cache *c, tq_kv_layer *l);
/* At a layer's first compression: fixes the key mean, then the key scale and split, from the
 * raw tokens held (n_comp onwards) and the queries observed; each only once (mean_set,
 * scale_set). */
void tq_kv_keys_fix(const tq_kv_cache *c, tq_kv_layer *l);
/* Head h's fp16 key kr (dk channels) → its dk stored coordinates: s ⊙ (k − mean) in the key
 * split's order (each part where the layer has it). */
void tq_kv_key_to_stored(const tq_kv_layer *l, int h, int dk, const uint16_t *kr, float *out);
/* The inverse: dk decoded stored coordinates of head h → the key in channel order. */
void tq_kv_key_from_stored(const tq_kv_layer *l, int h, int dk, const float *dec, float *out);

/* ---- the attention kernel table (src/kernels/attn_*.c) ---- */
typedef struct tq_attn_kernels {
    const char *name;
    /* out[j] = ⟨q + j·q_stride, k⟩ for j < nq (n floats each). */
    void (*dot_multi)(const float *k, const float *q, size_t q_stride, int nq, int n,
                      float *out);
    /* acc[i] += Σ_{t < nk} p[t]·rows[t·stride + i] for i < n. */
    void (*accum_rows)(float *acc, const float *p, const float *rows, size_t stride, int nk,
                       int n);
    /* s[i] = exp(s[i] − m) for i < n; returns Σ s[i]. Relative error ≤ 2e-7 per element. */
    float (*exp_sum)(float *s, int n, float m);
    /* y[i] *= a. */
    void (*scale)(float *y, float a, int n);
    /* s[i] = (s[i] + add) · scale (one add, one multiply); returns the largest result, NaNs
     * ignored (−∞ when there is none). Bit-exact across tables (but for the sign of a zero
     * maximum). */
    float (*shift_scale_max)(float *s, int n, float add, float scale);
    /* out[i] = f32(in[i]). */
    void (*f16_to_f32)(const uint16_t *in, float *out, int n);
    /* One q8_0 / q4_0 record of dim elements → floats. */
    void (*q8_0_decode)(const uint8_t *rec, int dim, float *out);
    void (*q4_0_decode)(const uint8_t *rec, int dim, float *out);
    /* out[i] = scale · centroids[idx_i] for n packed indices (kernels.h layout) at bits ≤ 4;
     * NULL: use the codec table's unpack_lookup. Bit-exact with it (one multiply). */
    void (*unpack_small)(const uint8_t *in, int n, int bits, const float *centroids, float scale,
                         float *out);
    /* Fused decode paths: the records are read in registers, no tile is written. Each returns
     * what the tile path computes from tq_kv_decode_rows rows (within float rounding).
     * score_turbo / accum_turbo take a TURBO tensor with tq_attn_fused_turbo(x) true (only
     * the scalar table has them; the SIMD tables leave them NULL and read TURBO records with
     * the lane kernels below, so a tensor without a lane layout takes the tile there):
     *   score: S[j·s_stride + t] = ⟨q_j, row_t⟩, q_j = q + j·q_stride, t < nk, j < nq;
     *   accum: acc_j[i] += Σ_t p_j[t]·row_t[i], p_j = p + j·p_stride, acc_j = acc + j·acc_stride;
     * with row_t the decoded row of record t (stride x->rec_bytes). A record with a corrupt norm
     * counts as a zero row and makes the call return 0 (else 1).
     * score_f16 / accum_f16 do the same for fp16 rows (row t at rows + t·row_stride, dim
     * elements): the raw part, and F16-format records. */
    int (*score_turbo)(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *q,
                       size_t q_stride, int nq, float *S, size_t s_stride);
    int (*accum_turbo)(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *p,
                       size_t p_stride, int nq, float *acc, size_t acc_stride);
    void (*score_f16)(const uint16_t *rows, size_t row_stride, int nk, int dim, const float *q,
                      size_t q_stride, int nq, float *S, size_t s_stride);
    void (*accum_f16)(const uint16_t *rows, size_t row_stride, int nk, int dim, const float *p,
                      size_t p_stride, int nq, float *acc, size_t acc_stride);
    /* The same as score_turbo / accum_turbo with q and acc in the lane layout of x (below:
     * tq_kv_lanes(x) > 0, rows of tq_kv_lanes(x) floats); NULL where a table has none. */
    int (*score_turbo_lanes)(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *q,
                             size_t q_stride, int nq, float *S, size_t s_stride);
    int (*accum_turbo_lanes)(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *p,
                             size_t p_stride, int nq, float *acc, size_t acc_stride);
} tq_attn_kernels;

/* 1 if the fused TURBO kernels (score_turbo / accum_turbo, and the lane kernels where
 * tq_kv_lanes(x) > 0) handle tensor x: TURBO, MSE (no PROD sketch), every segment of ≤ 4 bits
 * (≤ 16 centroids: one vpermps register). */
static inline int tq_attn_fused_turbo(const tq_kv_tensor *x) {
    if (x->format != TQ_KV_TURBO || x->prod || x->n_seg < 1) return 0;
    for (int s = 0; s < x->n_seg; s++)
        if (x->seg[s].bits > 4) return 0;
    return 1;
}

/* The lane layout of a TURBO tensor, for kernels that read 8 codes per 32-bit lane: within a
 * segment of B ≤ 4 bits and a count that is a multiple of 8, coordinate c = 128h + 8l + k
 * (block h, lane l < 16, round k < 8) has its index in bits [B(8l + k), B(8l + k) + B) of the
 * block's 16B bytes, so lane l of a vector of 16 lanes (bytes [Bl, Bl + B) of the block) yields
 * the eight rounds by shifts of B. A row in lane layout puts coordinate c of segment s at
 * base_s + 128h + 16k + l (base_s = 128 · the blocks of earlier segments); positions of a
 * partial last block's absent lanes are padding (zero in queries, ignored in sums).
 * Returns the floats of a lane-layout row, 0 when x has no lane layout. */
static inline int tq_kv_lanes(const tq_kv_tensor *x) {
    if (!tq_attn_fused_turbo(x)) return 0;
    int n = 0;
    for (int s = 0; s < x->n_seg; s++) {
        if (x->seg[s].count % 8) return 0;
        n += (x->seg[s].count + 127) / 128 * 128;
    }
    return n;
}
/* Natural (scoring-basis) row of x->dim floats ↔ lane-layout row of tq_kv_lanes(x) floats
 * (src/attention.c); to_lanes zeroes the padding. */
void tq_kv_to_lanes(const tq_kv_tensor *x, const float *in, float *out);
void tq_kv_from_lanes(const tq_kv_tensor *x, const float *in, float *out);

const tq_attn_kernels *tq_attn_kernels_get(void);
const tq_attn_kernels *tq_attn_kernels_ref(void);
const tq_attn_kernels *tq_attn_kernels_avx2(void);   /* NULL when not built */
const tq_attn_kernels *tq_attn_kernels_avx512(void); /* NULL when not built */
/* The AVX-512 table with score_turbo_lanes and accum_turbo_lanes in integers (attn_vnni.c:
 * int8 queries and centroids, uint8 weights, VNNI dot products; the error bounds are stated
 * there): NULL when not built or when the CPU lacks AVX-512 VBMI / VNNI. */
const tq_attn_kernels *tq_attn_kernels_avx512_vnni(void);
/* Whether tq_attn_kernels_get may return that table (default: yes unless TQ_INT8_SCORES=0 at
 * the first call). The tests that hold the fast path to the reference within fp32 rounding
 * turn it off; tests/test_attention.c checks the integer scores against their bound. */
void tq_attn_set_int8_scores(int on);
/* The most raw tokens the key mean is taken from at a layer's first compression (default and
 * 0: TQ_KV_KEY_SCALE_TOKENS). Writers before 2026-12 took it from the first `batch` tokens;
 * tests/test_cachefile.c sets that count to rebuild the caches of its older golden files. */
void tq_kv_set_key_mean_tokens(size_t n);

#endif

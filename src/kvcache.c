/*
 * The KV cache's operations: create, free, append, compress, read, truncate, memory accounting
 * and conversion, with the two-phase rule that decides what is compressed when
 * (doc/kvcache.md §3). The scheme language is in kv_scheme.c, the record formats in
 * kv_records.c, the pages in kv_pages.c; the key transform (mean, scale, split) is its own
 * object (key_transform.c), fitted here at a layer's first compression; attention lives in
 * attention.c. What these files share is declared in kvcache_internal.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kv_predict.h"
#include "kvcache_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Cache objects                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* The fields every sized tq_kv_cache_config has (doc/api.md): the shapes and the scheme. */
#define KV_CACHE_CONFIG_MIN offsetof(tq_kv_cache_config, layer_schemes)

static tq_status config_out(tq_kv_cache_config *out, size_t out_size, const tq_kv_cache_config *cfg);

void tq_kv_cache_config_init_sized(tq_kv_cache_config *cfg, size_t cfg_size, int n_layers,
                                   int n_kv_heads, int dk, int dv) {
    tq_kv_cache_config d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.n_layers = n_layers;
    d.n_kv_heads = n_kv_heads;
    d.head_dim_k = dk;
    d.head_dim_v = dv;
    tq_kv_scheme_defaults(&d.scheme);
    if (cfg) config_out(cfg, cfg_size, &d);
}

/* The 0.2 layout of tq_kv_cache_config: its scheme ended at seed (no sink), so every later
 * field sat 8 bytes earlier. A caller's config of at most this size has this layout (doc/api.md,
 * "Sized structs": the container's size tells the embedded struct's layout). */
#define KV_SCHEME_V02 offsetof(tq_kv_scheme, sink)
/* Its layer_schemes, reserve_tokens and layer_windows: at V02_TAIL, one pointer size apart. */
#define CONFIG_V02_TAIL (offsetof(tq_kv_cache_config, scheme) + KV_SCHEME_V02)
#define CONFIG_V02_SIZE (CONFIG_V02_TAIL + 3 * sizeof(void *))
_Static_assert(sizeof(tq_kv_scheme) > KV_SCHEME_V02, "sink is the newest scheme field");

/* A 0.2-layout config (struct_size ≤ CONFIG_V02_SIZE) as this version's. */
static tq_status config_in_v02(tq_kv_cache_config *dst, const tq_kv_cache_config *src) {
    size_t size;
    memcpy(&size, src, sizeof size);
    if (size < CONFIG_V02_TAIL) return TQ_ERR_INVALID;
    unsigned char raw[CONFIG_V02_SIZE];
    memset(raw, 0, sizeof raw);
    memcpy(raw, src, size);
    size_t at = CONFIG_V02_TAIL;
    memcpy(dst, raw, offsetof(tq_kv_cache_config, scheme));
    tq_kv_scheme s;
    memcpy(&s, raw + offsetof(tq_kv_cache_config, scheme), KV_SCHEME_V02);
    dst->scheme = s;
    memcpy(&dst->layer_schemes, raw + at, sizeof dst->layer_schemes);
    memcpy(&dst->reserve_tokens, raw + at + sizeof(void *), sizeof dst->reserve_tokens);
    memcpy(&dst->layer_windows, raw + at + 2 * sizeof(void *), sizeof dst->layer_windows);
    dst->struct_size = sizeof *dst;
    if (dst->scheme.struct_size > KV_SCHEME_V02) return TQ_ERR_INVALID;
    return TQ_OK;
}

/* cfg into a caller's config of out_size bytes: the 0.2 layout up to its size. */
static tq_status config_out(tq_kv_cache_config *out, size_t out_size, const tq_kv_cache_config *cfg) {
    if (out_size > CONFIG_V02_SIZE)
        return tq_sized_out(out, out_size, cfg, sizeof *cfg, KV_CACHE_CONFIG_MIN, 1);
    /* A 0.2 caller: its layout (config_in_v02), its scheme without the sink. */
    unsigned char raw[CONFIG_V02_SIZE];
    size_t at = CONFIG_V02_TAIL;
    tq_kv_scheme s = cfg->scheme;
    s.struct_size = KV_SCHEME_V02;
    memcpy(raw, cfg, offsetof(tq_kv_cache_config, scheme));
    memcpy(raw + offsetof(tq_kv_cache_config, scheme), &s, KV_SCHEME_V02);
    memcpy(raw + at, &cfg->layer_schemes, sizeof(void *));
    memcpy(raw + at + sizeof(void *), &cfg->reserve_tokens, sizeof(size_t));
    memcpy(raw + at + 2 * sizeof(void *), &cfg->layer_windows, sizeof(void *));
    return tq_sized_out(out, out_size, raw, sizeof raw, CONFIG_V02_TAIL, 1);
}

tq_status tq_kv_cache_config_in(tq_kv_cache_config *dst, const tq_kv_cache_config *src) {
    if (!src) return TQ_ERR_NULL;
    memset(dst, 0, sizeof *dst);
    tq_kv_scheme_defaults(&dst->scheme);
    size_t size;
    memcpy(&size, src, sizeof size);
    tq_status st = size <= CONFIG_V02_SIZE ? config_in_v02(dst, src)
                                           : tq_sized_in(dst, src, sizeof *dst, KV_CACHE_CONFIG_MIN);
    if (st) return st;
    /* The embedded scheme's layout is the container's: it cannot be larger than this one. */
    tq_kv_scheme s;
    if (dst->scheme.struct_size > sizeof s) return TQ_ERR_INVALID;
    st = tq_kv_scheme_in(&s, &dst->scheme);
    dst->scheme = s;
    return st;
}

static void layer_free(tq_kv_layer *l) {
    tq_kv_tensor_free(&l->k);
    tq_kv_tensor_free(&l->v);
    /* Pages a fork shares lose a reference; the last holder frees them. */
    for (size_t i = 0; i < l->n_cpages; i++) tq_kv_page_drop(l->cpages[i]);
    for (size_t i = 0; i < l->n_rpages; i++) tq_kv_page_drop(l->rpages[i]);
    for (size_t i = 0; i < l->n_rspare; i++) tq_kv_page_drop(l->rspare[i]);
    for (size_t i = 0; i < l->n_cspare; i++) tq_kv_page_drop(l->cspare[i]);
    free(l->cpages);
    free(l->rpages);
    free(l->rspare);
    free(l->cspare);
    free(l->sink);
    free(l->rho);
    tq_key_transform_free(l->kt);
}

void tq_kv_cache_free(tq_kv_cache *c) {
    if (!c) return;
    if (c->layers)
        for (int i = 0; i < c->cfg.n_layers; i++) layer_free(&c->layers[i]);
    free(c->layers);
    free(c->windows);
    free(c->freqs);
    free(c);
}

static tq_kv_layer_scheme resolve_scheme(const tq_kv_cache_config *cfg, int i) {
    if (cfg->layer_schemes) return cfg->layer_schemes[i];
    if (i < cfg->scheme.edge_first || i >= cfg->n_layers - cfg->scheme.edge_last)
        return cfg->scheme.edge;
    return cfg->scheme.layer;
}

tq_status tq_kv_cache_create(tq_kv_cache **out, const tq_kv_cache_config *given) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    tq_kv_cache_config local;
    const tq_kv_cache_config *cfg = &local;
    tq_status st = tq_kv_cache_config_in(&local, given);
    if (st) return st;
    const tq_kv_scheme *s = &cfg->scheme;
    if (cfg->n_layers < 1 || cfg->n_layers > 4096 || cfg->n_kv_heads < 1 ||
        cfg->n_kv_heads > 1024 || s->batch < 1 || s->raw_window < 0 ||
        s->quantized_kv_start < 0 || s->edge_first < 0 || s->edge_last < 0 || s->sink < 0 ||
        s->sink > TQ_KV_SINK_MAX || s->trellis < 0 || s->trellis > TQ_TRELLIS_TWO_STATE)
        return TQ_ERR_INVALID;
    if (cfg->head_dim_k < TQ_MIN_DIM || cfg->head_dim_k > TQ_MAX_DIM ||
        cfg->head_dim_v < TQ_MIN_DIM || cfg->head_dim_v > TQ_MAX_DIM)
        return TQ_ERR_DIM;
    if (!tq_rope_pairs_valid(cfg->key_rope_pairs, cfg->head_dim_k)) return TQ_ERR_INVALID;
    for (int i = 0; cfg->key_rope_freqs && i < cfg->n_layers; i++)
        if (!tq_key_transform_rope_freqs_ok(cfg->key_rope_freqs + (size_t)i * (size_t)(cfg->head_dim_k / 2),
                                            cfg->head_dim_k, cfg->key_rope_pairs))
            return TQ_ERR_INVALID;
    int windowed = 0;
    for (int i = 0; cfg->layer_windows && i < cfg->n_layers; i++) {
        if (cfg->layer_windows[i] > TQ_KV_WINDOW_MAX) return TQ_ERR_INVALID;
        windowed |= cfg->layer_windows[i] != 0;
    }
    tq_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return TQ_ERR_NOMEM;
    c->cfg = *cfg;
    /* The key split's default is a rule (TQ_KV_KEY_SPLIT_AUTO): the cache holds what it gave. */
    c->cfg.scheme.layer.key_split = tq_kv_key_split_resolve(&cfg->scheme.layer, cfg->scheme.trellis, cfg->head_dim_k);
    c->cfg.scheme.edge.key_split = tq_kv_key_split_resolve(&cfg->scheme.edge, cfg->scheme.trellis, cfg->head_dim_k);
    c->cfg.layer_schemes = NULL;
    c->cfg.layer_windows = NULL;
    c->cfg.reserve_tokens = 0;
    c->layers = calloc((size_t)cfg->n_layers, sizeof *c->layers);
    if (windowed) { /* the cache's copy, which get_config hands out */
        size_t wb = (size_t)cfg->n_layers * sizeof *c->windows;
        c->windows = malloc(wb);
        if (c->windows) memcpy(c->windows, cfg->layer_windows, wb);
        c->cfg.layer_windows = c->windows;
    }
    if (cfg->key_rope_freqs) { /* the cache's copy, likewise */
        size_t fb = (size_t)cfg->n_layers * (size_t)(cfg->head_dim_k / 2) * sizeof *c->freqs;
        c->freqs = malloc(fb);
        if (c->freqs) memcpy(c->freqs, cfg->key_rope_freqs, fb);
        c->cfg.key_rope_freqs = c->freqs;
    }
    if (!c->layers || (windowed && !c->windows) || (cfg->key_rope_freqs && !c->freqs)) {
        st = TQ_ERR_NOMEM;
        goto fail;
    }
    c->rpage_bytes = (size_t)cfg->n_kv_heads * TQ_KV_P *
                     (size_t)(cfg->head_dim_k + cfg->head_dim_v) * sizeof(uint16_t);
    for (int i = 0; i < cfg->n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        l->scheme = resolve_scheme(cfg, i);
        const tq_kv_layer_scheme *ls = &l->scheme;
        if (!tq_kv_layer_scheme_valid(ls)) {
            st = TQ_ERR_VARIANT;
            goto fail;
        }
        if (ls->key_format != TQ_KV_TURBO) {
            l->scheme.key_mean = 0;
            l->scheme.key_scale = 0;
        }
        st = tq_kv_tensor_init(&l->k, ls->key_format, cfg->head_dim_k, ls->key_bits,
                               ls->key_variant, ls->norm_correction, s->seed, 1,
                               tq_kv_key_split_applies(ls, s->trellis, cfg->head_dim_k), s->trellis);
        if (st) goto fail;
        st = tq_kv_tensor_init(&l->v, ls->value_format, cfg->head_dim_v, ls->value_bits,
                               TQ_VARIANT_MSE, ls->norm_correction, s->seed, 0, 0, s->trellis);
        if (st) goto fail;
        l->scheme.key_split = l->k.block > 0; /* what is in effect */
        l->compress_none = ls->key_format == TQ_KV_F16 && ls->value_format == TQ_KV_F16;
        l->window = c->windows ? c->windows[i] : 0;
        if (l->scheme.key_mean || l->scheme.key_scale) {
            /* A key split's first block is the codec's segment 0. */
            st = tq_key_transform_create(&l->kt, cfg->n_kv_heads, cfg->head_dim_k,
                                         l->scheme.key_mean, l->scheme.key_scale, l->k.block,
                                         l->k.block ? l->k.seg[0].bits : 0, cfg->key_rope_pairs,
                                         c->freqs ? c->freqs + (size_t)i * (size_t)(cfg->head_dim_k / 2) : NULL);
            if (st) goto fail;
        }
        st = tq_kv_pred_create(c, l);
        if (st) goto fail;
    }
    if (cfg->reserve_tokens) {
        st = tq_kv_cache_reserve(c, cfg->reserve_tokens);
        if (st) goto fail;
        c->cfg.reserve_tokens = cfg->reserve_tokens;
    }
    *out = c;
    return TQ_OK;
fail:
    tq_kv_cache_free(c);
    return st;
}

tq_status tq_kv_cache_get_config(const tq_kv_cache *c, tq_kv_cache_config *out,
                                 size_t out_size) {
    if (!c || !out) return TQ_ERR_NULL;
    return config_out(out, out_size, &c->cfg);
}

tq_status tq_kv_cache_get_layer_scheme(const tq_kv_cache *c, int layer, tq_kv_layer_scheme *out,
                                       size_t out_size) {
    if (!c || !out) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    const tq_kv_layer_scheme *ls = &c->layers[layer].scheme;
    return tq_sized_out(out, out_size, ls, sizeof *ls, sizeof *ls, 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Two-phase storage                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* How many leading tokens the scheme wants compressed at length len: a pure function of the
 * length, so every history reaching a length can reach the same state (doc/kvcache.md). */
size_t tq_kv_scheme_compressed_length(const tq_kv_scheme *given, size_t len) {
    tq_kv_scheme local, *s = &local;
    if (!given || tq_kv_scheme_in(&local, given)) return 0;
    if (s->batch < 1 || s->raw_window < 0 || s->quantized_kv_start < 0) return 0;
    if (len < (size_t)s->quantized_kv_start || len <= (size_t)s->raw_window) return 0;
    size_t avail = len - (size_t)s->raw_window;
    return avail / (size_t)s->batch * (size_t)s->batch;
}

size_t tq_kv_scheme_decode_chunk(const tq_kv_scheme *given, size_t pos, size_t max_n) {
    tq_kv_scheme local, *s = &local;
    if (!given || max_n == 0 || tq_kv_scheme_in(&local, given)) return 0;
    if (s->batch < 1 || s->raw_window < 0 || s->quantized_kv_start < 0 || pos >= SIZE_MAX / 2) return 1;
    /* A query at position j of the chunk sees the compressed length of pos + n (the whole
     * chunk is appended first); decode would give it that of j + 1. */
    const size_t first = tq_kv_scheme_compressed_length(s, pos + 1);
    /* The first compression fixes the key mean, scale and split from the tokens held then:
     * it must see as many as in decode, so that step goes alone. */
    if (first > 0 && tq_kv_scheme_compressed_length(s, pos) == 0) return 1;
    /* The smallest length L > pos + 1 whose compressed length differs from `first` (it only
     * grows): while none is compressed, the first length that compresses a whole batch
     * (at least quantized_kv_start); after, the next batch boundary. */
    const uint64_t W = (uint64_t)s->raw_window, B = (uint64_t)s->batch, start = (uint64_t)s->quantized_kv_start;
    uint64_t next = first == 0 ? (start > W + B ? start : W + B) : W + (uint64_t)first + B;
    if (next < (uint64_t)pos + 2) next = (uint64_t)pos + 2;
    const uint64_t n = next - (uint64_t)pos - 1;
    return n < (uint64_t)max_n ? (size_t)n : max_n;
}

static size_t compress_target(const tq_kv_cache *c, const tq_kv_layer *l, size_t len) {
    return l->compress_none ? 0 : tq_kv_scheme_compressed_length(&c->cfg.scheme, len);
}

static uint16_t *raw_k_mut(const tq_kv_cache *c, tq_kv_layer *l, size_t t, int h) {
    return (uint16_t *)tq_kv_kraw(c, l, t, h);
}
static uint16_t *raw_v_mut(const tq_kv_cache *c, tq_kv_layer *l, size_t t, int h) {
    return (uint16_t *)tq_kv_vraw(c, l, t, h);
}

/* ---- the key transform's inputs: the first raw keys at the first compression ---- */

/* The most raw tokens the key mean is taken from (tq_kv_set_key_mean_tokens: tests only). */
static _Atomic size_t key_mean_tokens = TQ_KV_KEY_SCALE_TOKENS;

void tq_kv_set_key_mean_tokens(size_t n) { key_mean_tokens = n ? n : TQ_KV_KEY_SCALE_TOKENS; }

typedef struct raw_keys {
    const tq_kv_cache *c;
    const tq_kv_layer *l;
    size_t t0;
} raw_keys;

static void raw_key_row(const void *ctx, size_t t, int h, float *out) {
    const raw_keys *r = ctx;
    const uint16_t *kr = tq_kv_kraw(r->c, r->l, r->t0 + t, h);
    for (int i = 0; i < r->c->cfg.head_dim_k; i++) out[i] = tq_f16_to_f32(kr[i]);
}

/* At a layer's first compression: fixes the key transform from the raw tokens held (n_comp
 * onwards; for a windowed layer whose first compression comes after a drop, the oldest kept):
 * the mean from the first min(key_mean_tokens, held), the scale and split from the first
 * min(TQ_KV_KEY_SCALE_TOKENS, held) and the queries observed. A fixed token count keeps the
 * transform independent of when compression starts once that many tokens are held. */
static void fit_keys(const tq_kv_cache *c, tq_kv_layer *l) {
    if (!l->kt) return;
    size_t held = l->len - l->n_comp, most = key_mean_tokens;
    raw_keys r = {c, l, l->n_comp};
    size_t n_scale = held < TQ_KV_KEY_SCALE_TOKENS ? held : TQ_KV_KEY_SCALE_TOKENS;
    tq_key_transform_fit_rows(l->kt, held < most ? held : most, n_scale, raw_key_row, &r, l->n_comp);
    tq_kv_pred_fit(c, l, l->n_comp, n_scale); /* ρ from the keys the scale saw */
}

tq_status tq_kv_cache_observe_queries(tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                                      size_t n) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    int H = c->cfg.n_kv_heads;
    if (n_q_heads < H || n_q_heads % H) return TQ_ERR_INVALID;
    if (n && !q) return TQ_ERR_NULL;
    tq_kv_layer *l = &c->layers[layer];
    if (!tq_key_transform_observing(l->kt) || l->len >= TQ_KV_KEY_SCALE_TOKENS || n == 0)
        return TQ_OK;
    /* The rows at positions len … len + n − 1 below TQ_KV_KEY_SCALE_TOKENS count. */
    if (n > TQ_KV_KEY_SCALE_TOKENS - l->len) n = TQ_KV_KEY_SCALE_TOKENS - l->len;
    return tq_key_transform_observe(l->kt, q, n_q_heads, n);
}

tq_status tq_kv_cache_key_scale(const tq_kv_cache *c, int layer, float *out,
                                size_t out_capacity) {
    if (!c || !out) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    return tq_key_transform_get_scale(c->layers[layer].kt, out, out_capacity);
}

/* ---- what cache files use ---- */

const tq_key_transform *tq_kv_layer_key_transform(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].kt : NULL;
}

tq_status tq_kv_layer_restore(tq_kv_cache *c, int layer, size_t len, size_t n_comp,
                              int compress_started, tq_key_transform *kt) {
    if (!c || layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    tq_kv_layer *l = &c->layers[layer];
    if ((kt == NULL) != (l->kt == NULL) || (l->compress_none && compress_started)) return TQ_ERR_INVALID;
    tq_status st = n_comp ? tq_kv_sink_alloc(c, l) : TQ_OK;
    if (!st) st = tq_kv_layer_restore_shape(c, layer, len, n_comp);
    if (st) return st;
    l->compress_started = compress_started ? 1 : 0;
    tq_key_transform_free(l->kt);
    l->kt = kt;
    return TQ_OK;
}

tq_status tq_kv_sink_alloc(const tq_kv_cache *c, tq_kv_layer *l) {
    if (l->sink || l->compress_none || c->cfg.scheme.sink <= 0) return TQ_OK;
    l->sink = malloc((size_t)c->cfg.scheme.sink * (size_t)c->cfg.n_kv_heads *
                     (size_t)(c->cfg.head_dim_k + c->cfg.head_dim_v) * sizeof(uint16_t));
    return l->sink ? TQ_OK : TQ_ERR_NOMEM;
}

/* Encodes tokens [t0, t1) of a layer whose pages and key transform are ready, K and V of each
 * token in one pass (the sinks' fp16 copies too); *bad = the first token that failed (t1 if
 * none) and its status. Each record is a function of its token and, where the layer predicts
 * keys (kv_predict.h), of the records before it in its chain, which the range reads back when
 * it starts inside one: any split of a range at chain starts writes the same bytes. */
static tq_status compress_range(const tq_kv_cache *c, const tq_kv_layer *l, size_t t0, size_t t1,
                                size_t *bad) {
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    float kraw[TQ_MAX_DIM], kbuf[TQ_MAX_DIM], vbuf[TQ_MAX_DIM];
    tq_status st = TQ_OK;
    /* ŷ_{t−1} per head, where the layer predicts */
    float *prev = l->rho ? malloc((size_t)H * (size_t)dk * sizeof *prev) : NULL;
    if (l->rho && !prev) return *bad = t0, TQ_ERR_NOMEM;
    for (int h = 0; prev && h < H && !st; h++)
        if (tq_kv_pred_rho(l, h) != 0.0f) st = tq_kv_pred_state(c, l, h, t0, prev + (size_t)h * (size_t)dk);
    for (size_t t = st ? t1 : t0; t < t1; t++) {
        for (int h = 0; h < H && !st; h++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h), *vr = tq_kv_vraw(c, l, t, h);
            if (l->sink && t < (size_t)c->cfg.scheme.sink) { /* an attention sink: kept exact */
                memcpy((uint16_t *)tq_kv_ksink(c, l, t, h), kr, (size_t)dk * sizeof *kr);
                memcpy((uint16_t *)tq_kv_vsink(c, l, t, h), vr, (size_t)dv * sizeof *vr);
            }
            for (int i = 0; i < dk; i++) kraw[i] = tq_f16_to_f32(kr[i]);
            if (l->kt) tq_key_transform_key_row(l->kt, h, t, kraw, kbuf);
            for (int i = 0; i < dv; i++) vbuf[i] = tq_f16_to_f32(vr[i]);
            float *kin = l->kt ? kbuf : kraw, rho = tq_kv_pred_rho(l, h);
            float *ph = rho != 0.0f ? prev + (size_t)h * (size_t)dk : NULL;
            if (ph && tq_kv_pred_chain_start(c, l, t) != t) /* the residual of the prediction */
                for (int i = 0; i < dk; i++) kin[i] -= rho * ph[i];
            st = tq_kv_tensor_encode(&l->k, kin, (uint8_t *)tq_kv_krec(c, l, t, h));
            if (!st && ph && t >= tq_kv_sink_held(c, l, (size_t)-1)) st = tq_kv_pred_next(c, l, h, t, ph);
            if (!st) st = tq_kv_tensor_encode(&l->v, vbuf, (uint8_t *)tq_kv_vrec(c, l, t, h));
        }
        if (st) {
            free(prev);
            return *bad = t, st;
        }
    }
    free(prev);
    if (st) return *bad = t0, st; /* the chain before t0 did not decode */
    *bad = t1;
    return TQ_OK;
}

/* Tokens per task of a pooled compression, and the fewest tokens worth a pool run. Tasks
 * cover the positions between multiples of COMPRESS_TASK_TOKENS, so that no task starts inside
 * a chain of predicted keys that another is writing (kv_predict.h). */
#define COMPRESS_TASK_TOKENS 64
#define COMPRESS_POOL_MIN 128
_Static_assert(COMPRESS_TASK_TOKENS % TQ_KV_PRED_CHAIN == 0, "tasks start at chain starts");

typedef struct compress_job {
    const tq_kv_cache *c;
    const tq_kv_layer *l;
    size_t t0, t1;
    size_t *bad;      /* per task: its first failing token, or its end */
    tq_status *st;    /* per task */
} compress_job;

static void compress_task(void *ctx, size_t task, int thread) {
    (void)thread;
    const compress_job *j = ctx;
    size_t a = (j->t0 / COMPRESS_TASK_TOKENS + task) * COMPRESS_TASK_TOKENS, b = a + COMPRESS_TASK_TOKENS;
    if (a < j->t0) a = j->t0;
    if (b > j->t1) b = j->t1;
    j->st[task] = compress_range(j->c, j->l, a, b, &j->bad[task]);
}

/* Compresses raw tokens [n_comp, target), K and V of each token in one pass; with a pool of
 * several threads and many tokens, in tasks of COMPRESS_TASK_TOKENS over its threads. On an
 * error the tokens from the first failing one stay raw, as in one pass (later tasks' records
 * are written but not counted). */
static tq_status compress_to(tq_kv_cache *c, tq_kv_layer *l, size_t target, tq_threadpool *pool) {
    if (target <= l->n_comp) return TQ_OK;
    tq_status st = tq_kv_ensure_cpages(c, l, l->n_comp, target);
    if (!st) st = tq_kv_own_cpages(c, l, l->n_comp, target);
    if (!st) st = tq_kv_sink_alloc(c, l);
    if (st) return st;
    fit_keys(c, l);
    size_t n = target - l->n_comp, reached = target;
    size_t n_tasks = (target + COMPRESS_TASK_TOKENS - 1) / COMPRESS_TASK_TOKENS - l->n_comp / COMPRESS_TASK_TOKENS;
    size_t *bad = NULL;
    tq_status *sts = NULL;
    if (pool && tq_threadpool_size(pool) > 1 && n >= COMPRESS_POOL_MIN) {
        bad = malloc(n_tasks * sizeof *bad);
        sts = malloc(n_tasks * sizeof *sts);
    }
    if (bad && sts) {
        compress_job j = {c, l, l->n_comp, target, bad, sts};
        tq_threadpool_run(pool, compress_task, &j, n_tasks);
        for (size_t i = 0; i < n_tasks; i++) /* tasks in token order: the first failure */
            if (sts[i]) {
                st = sts[i], reached = bad[i];
                break;
            }
    } else {
        st = compress_range(c, l, l->n_comp, target, &reached); /* no pool, few tokens, or no memory for one */
    }
    free(bad);
    free(sts);
    l->n_comp = reached;
    /* Raw pages wholly below the compressed boundary go to the spare list. */
    tq_kv_spare_raw_below(l, l->n_comp);
    if (l->n_rpages == 0) l->raw_base = l->n_comp / TQ_KV_P * TQ_KV_P;
    return st;
}

static int check_values(const float *x, size_t n, tq_status *st) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return *st = TQ_ERR_NONFINITE, 0;
        if (fabsf(x[i]) > 65504.0f && (tq_f32_to_f16(x[i]) & 0x7C00u) == 0x7C00u)
            return *st = TQ_ERR_RANGE, 0;
    }
    return 1;
}

/* Stores n_tokens tokens raw (fp16) after the layer's last one; no compression. */
static tq_status store_raw(tq_kv_cache *c, tq_kv_layer *l, const float *k, const float *v,
                           size_t n_tokens) {
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    tq_status st = TQ_OK;
    if (!check_values(k, n_tokens * (size_t)H * (size_t)dk, &st) ||
        !check_values(v, n_tokens * (size_t)H * (size_t)dv, &st))
        return st;
    st = tq_kv_ensure_rpages(c, l, l->len + n_tokens);
    if (!st) st = tq_kv_own_rpages(c, l, l->len, l->len + n_tokens);
    if (st) return st;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t t = l->len + i;
        for (int h = 0; h < H; h++) {
            const float *kx = k + (i * (size_t)H + (size_t)h) * (size_t)dk;
            const float *vx = v + (i * (size_t)H + (size_t)h) * (size_t)dv;
            uint16_t *kr = raw_k_mut(c, l, t, h), *vr = raw_v_mut(c, l, t, h);
            for (int j = 0; j < dk; j++) kr[j] = tq_f32_to_f16(kx[j]);
            for (int j = 0; j < dv; j++) vr[j] = tq_f32_to_f16(vx[j]);
        }
    }
    l->len += n_tokens;
    return TQ_OK;
}

tq_status tq_kv_cache_append(tq_kv_cache *c, int layer, const float *k, const float *v,
                             size_t n_tokens) {
    return tq_kv_cache_append_pool(c, layer, k, v, n_tokens, NULL);
}

tq_status tq_kv_cache_append_pool(tq_kv_cache *c, int layer, const float *k, const float *v,
                                  size_t n_tokens, tq_threadpool *pool) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    if (n_tokens == 0) return TQ_OK;
    if (!k || !v) return TQ_ERR_NULL;
    tq_kv_layer *l = &c->layers[layer];
    size_t pos = l->len;
    tq_status st = store_raw(c, l, k, v, n_tokens);
    if (st) return st;
    tq_kv_drop_old(l, pos);
    if (l->compress_none) return TQ_OK;
    /* Two-phase rule: a multi-token append is prefill and stays raw until the first decode
     * step (a single-token append), unless prefill_raw is off. */
    if (n_tokens == 1 || !c->cfg.scheme.prefill_raw) l->compress_started = 1;
    if (!l->compress_started) return TQ_OK;
    return compress_to(c, l, compress_target(c, l, l->len), pool);
}

tq_status tq_kv_cache_compress(tq_kv_cache *c, int layer) { return tq_kv_cache_compress_pool(c, layer, NULL); }

tq_status tq_kv_cache_compress_pool(tq_kv_cache *c, int layer, tq_threadpool *pool) {
    if (!c) return TQ_ERR_NULL;
    if (layer < -1 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    tq_status first = TQ_OK;
    for (int i = layer < 0 ? 0 : layer; i < (layer < 0 ? c->cfg.n_layers : layer + 1); i++) {
        tq_kv_layer *l = &c->layers[i];
        if (l->compress_none) continue;
        l->compress_started = 1;
        tq_status st = compress_to(c, l, compress_target(c, l, l->len), pool);
        if (st && !first) first = st;
    }
    return first;
}

size_t tq_kv_cache_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].len : 0;
}

size_t tq_kv_cache_dropped_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].dropped : 0;
}

size_t tq_kv_cache_compressed_length(const tq_kv_cache *c, int layer) {
    return c && layer >= 0 && layer < c->cfg.n_layers ? c->layers[layer].n_comp : 0;
}

tq_status tq_kv_cache_truncate(tq_kv_cache *c, size_t length) {
    if (!c) return TQ_ERR_NULL;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        if (length > l->len) return TQ_ERR_INVALID;
        /* The next query (at `length`) of a windowed layer must find what it sees. */
        if (length > 0 && l->dropped && length + 1 < l->dropped + l->window) return TQ_ERR_INVALID;
    }
    for (int i = 0; i < c->cfg.n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        if (length == 0 && l->dropped) {
            /* Reset: the emptied slots are filled again on demand. */
            tq_kv_spare_raw_all(l);
            l->raw_base = 0;
            l->n_comp = 0;
            l->dropped = 0;
        }
        if (length < l->n_comp) {
            /* The raw copies of [length, n_comp) are gone: the kept tokens stay compressed. */
            l->n_comp = length;
            tq_kv_spare_raw_all(l);
            l->raw_base = length / TQ_KV_P * TQ_KV_P;
        }
        l->len = length;
        if (length == 0) {
            l->compress_started = 0;
            if (l->kt) tq_key_transform_reset(l->kt);
            l->rho_set = 0;
        }
    }
    return TQ_OK;
}

tq_status tq_kv_cache_read(const tq_kv_cache *c, int layer, size_t start, size_t n, float *k,
                           size_t k_capacity, float *v, size_t v_capacity) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    const tq_kv_layer *l = &c->layers[layer];
    if (start > l->len || n > l->len - start) return TQ_ERR_INVALID;
    if (n && start < l->dropped) return TQ_ERR_INVALID;
    int dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v, H = c->cfg.n_kv_heads;
    if ((k && k_capacity / (size_t)H / (size_t)dk < n) ||
        (v && v_capacity / (size_t)H / (size_t)dv < n))
        return TQ_ERR_CAPACITY;
    tq_status st = TQ_OK;
    /* Predicted keys (kv_predict.h): each head's ŷ carried along its chains from start. */
    float *prev = k && l->rho && n ? malloc((size_t)H * (size_t)dk * sizeof *prev) : NULL;
    if (k && l->rho && n && !prev) return TQ_ERR_NOMEM;
    for (int h = 0; prev && h < H; h++)
        if (tq_kv_pred_rho(l, h) != 0.0f && start < l->n_comp) {
            tq_status s1 = tq_kv_pred_state(c, l, h, start, prev + (size_t)h * (size_t)dk);
            if (s1 && !st) st = s1;
        }
    for (size_t i = 0; i < n; i++) {
        size_t t = start + i;
        for (int h = 0; h < H; h++) {
            float *ko = k ? k + (i * (size_t)H + (size_t)h) * (size_t)dk : NULL;
            float *vo = v ? v + (i * (size_t)H + (size_t)h) * (size_t)dv : NULL;
            if (t < l->n_comp && t >= tq_kv_sink_len(c, l)) {
                tq_status s1 = TQ_OK;
                if (ko && tq_kv_pred_rho(l, h) != 0.0f) {
                    float *ph = prev + (size_t)h * (size_t)dk;
                    s1 = tq_kv_pred_next(c, l, h, t, ph);
                    tq_key_transform_invert_row(l->kt, h, t, ph, ko);
                } else if (ko) {
                    float dec[TQ_MAX_DIM];
                    s1 = tq_kv_tensor_decode(&l->k, tq_kv_krec(c, l, t, h), dec);
                    if (l->kt) tq_key_transform_invert_row(l->kt, h, t, dec, ko);
                    else memcpy(ko, dec, (size_t)dk * sizeof(float));
                }
                if (vo) {
                    tq_status s2 = tq_kv_tensor_decode(&l->v, tq_kv_vrec(c, l, t, h), vo);
                    if (!s1) s1 = s2;
                }
                if (s1 && !st) st = s1;
            } else {
                if (ko) {
                    const uint16_t *r = tq_kv_kexact(c, l, t, h);
                    for (int j = 0; j < dk; j++) ko[j] = tq_f16_to_f32(r[j]);
                }
                if (vo) {
                    const uint16_t *r = tq_kv_vexact(c, l, t, h);
                    for (int j = 0; j < dv; j++) vo[j] = tq_f16_to_f32(r[j]);
                }
            }
        }
    }
    free(prev);
    return st;
}

tq_status tq_kv_cache_memory(const tq_kv_cache *c, tq_kv_memory *out, size_t out_size) {
    if (!c || !out) return TQ_ERR_NULL;
    if (out_size < sizeof(tq_kv_memory)) return TQ_ERR_CAPACITY; /* the first release's size */
    tq_kv_memory mem, *m = &mem;
    memset(m, 0, sizeof *m);
    size_t H = (size_t)c->cfg.n_kv_heads, dk = (size_t)c->cfg.head_dim_k,
           dv = (size_t)c->cfg.head_dim_v;
    m->allocated_bytes = sizeof *c + (size_t)c->cfg.n_layers * sizeof(tq_kv_layer);
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        size_t comp = l->n_comp > l->dropped ? l->n_comp - l->dropped : 0;
        size_t raw = l->len - (l->n_comp > l->dropped ? l->n_comp : l->dropped);
        m->tokens += comp + raw;
        m->compressed_tokens += comp;
        m->data_bytes += comp * H * (l->k.rec_bytes + l->v.rec_bytes) + raw * H * 2 * (dk + dv);
        m->f16_bytes += (comp + raw) * H * 2 * (dk + dv);
        /* The sink store's kept positions (a windowed layer's dropped ones are gone). */
        size_t ns = tq_kv_sink_len(c, l);
        m->data_bytes += (ns > l->dropped ? ns - l->dropped : 0) * H * 2 * (dk + dv);
        m->allocated_bytes += tq_kv_sink_bytes(c, l);
        size_t cpages = l->n_cspare;
        for (size_t j = 0; j < l->n_cpages; j++) cpages += l->cpages[j] != NULL;
        m->allocated_bytes += cpages * tq_kv_cpage_bytes(c, l) +
                              (l->n_rpages + l->n_rspare) * c->rpage_bytes +
                              (l->cap_cpages + l->cap_rpages + l->cap_rspare + l->cap_cspare) *
                                  sizeof(void *);
        size_t kt_data, kt_alloc;
        tq_key_transform_memory(l->kt, &kt_data, &kt_alloc);
        m->data_bytes += kt_data;
        m->allocated_bytes += kt_alloc;
        if (l->rho) { /* ρ per head */
            m->data_bytes += H * sizeof *l->rho;
            m->allocated_bytes += H * sizeof *l->rho;
        }
    }
    return tq_sized_out(out, out_size, m, sizeof *m, sizeof *m, 0);
}

tq_status tq_kv_cache_convert(const tq_kv_cache *src, const tq_kv_scheme *scheme,
                              tq_kv_cache **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!src || !scheme) return TQ_ERR_NULL;
    tq_kv_cache_config cfg = src->cfg;
    tq_status st = tq_kv_scheme_in(&cfg.scheme, scheme);
    if (st) return st;
    for (int i = 0; i < cfg.n_layers; i++)
        if (src->layers[i].dropped) return TQ_ERR_STATE;
    cfg.reserve_tokens = 0;
    tq_kv_cache *dst;
    st = tq_kv_cache_create(&dst, &cfg);
    if (st) return st;
    size_t H = (size_t)cfg.n_kv_heads, chunk = TQ_KV_P;
    float *kb = malloc(chunk * H * (size_t)cfg.head_dim_k * sizeof(float));
    float *vb = malloc(chunk * H * (size_t)cfg.head_dim_v * sizeof(float));
    if (!kb || !vb) st = TQ_ERR_NOMEM;
    for (int i = 0; !st && i < cfg.n_layers; i++) {
        size_t len = src->layers[i].len;
        const tq_kv_layer *sl = &src->layers[i];
        tq_kv_layer *dl = &dst->layers[i];
        /* The queries src has seen shape dst's key scale too. */
        tq_key_transform_copy_statistics(dl->kt, sl->kt);
        for (size_t t = 0; !st && t < len; t += chunk) {
            size_t n = len - t < chunk ? len - t : chunk;
            st = tq_kv_cache_read(src, i, t, n, kb, chunk * H * (size_t)cfg.head_dim_k, vb,
                                  chunk * H * (size_t)cfg.head_dim_v);
            if (!st) st = store_raw(dst, &dst->layers[i], kb, vb, n);
        }
        if (!st) st = tq_kv_cache_compress(dst, i);
    }
    free(kb);
    free(vb);
    if (st) {
        tq_kv_cache_free(dst);
        return st;
    }
    *out = dst;
    return TQ_OK;
}

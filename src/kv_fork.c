/*
 * Forks of a KV cache (doc/kvcache.md §3, "Forks"): a second sequence that shares the first
 * one's pages copy-on-write, and the memory accounting that counts a shared page once. The
 * pages' reference counts and the copy before a write are in kv_pages.c.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvcache_internal.h"

/* Holds pages[0, n) of one layer of src (n ≤ src's count) in dst's table too. */
static tq_status share_pages(void ***dst, size_t *n_dst, size_t *cap, void *const *src, size_t n) {
    if (!n) return TQ_OK;
    *dst = malloc(n * sizeof **dst);
    if (!*dst) return TQ_ERR_NOMEM;
    *cap = n;
    for (size_t i = 0; i < n; i++) {
        (*dst)[i] = src[i];
        if (src[i]) tq_kv_page_share(src[i]);
    }
    *n_dst = n;
    return TQ_OK;
}

/* Layer d of a new cache of src's layer s's scheme takes s's state, sharing the pages that
 * hold its tokens (not its spare or not yet used ones). */
static tq_status fork_layer(const tq_kv_cache *c, const tq_kv_layer *s, tq_kv_layer *d) {
    size_t nc = (s->n_comp + TQ_KV_P - 1) / TQ_KV_P;
    size_t nr = s->len > s->raw_base ? (s->len - s->raw_base + TQ_KV_P - 1) / TQ_KV_P : 0;
    if (nc > s->n_cpages) nc = s->n_cpages;
    if (nr > s->n_rpages) nr = s->n_rpages;
    tq_status st = share_pages((void ***)&d->cpages, &d->n_cpages, &d->cap_cpages,
                               (void *const *)s->cpages, nc);
    if (!st)
        st = share_pages((void ***)&d->rpages, &d->n_rpages, &d->cap_rpages,
                         (void *const *)s->rpages, nr);
    if (st) return st;
    d->len = s->len;
    d->n_comp = s->n_comp;
    d->raw_base = s->raw_base;
    d->dropped = s->dropped;
    d->compress_started = s->compress_started;
    /* The sink store is small: copied, not shared (d's scheme is s's: the same size). */
    if (s->sink) {
        st = tq_kv_sink_alloc(c, d);
        if (st) return st;
        memcpy(d->sink, s->sink, tq_kv_sink_bytes(c, s));
    }
    tq_key_transform_copy(d->kt, s->kt);
    if (s->rho && d->rho) { /* ρ (kv_predict.h): the same heads */
        memcpy(d->rho, s->rho, (size_t)c->cfg.n_kv_heads * sizeof *d->rho);
        d->rho_set = s->rho_set;
    }
    return TQ_OK;
}

tq_status tq_kv_cache_fork(const tq_kv_cache *src, tq_kv_cache **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!src) return TQ_ERR_NULL;
    size_t n = (size_t)src->cfg.n_layers;
    tq_kv_layer_scheme *ls = malloc(n * sizeof *ls);
    size_t *win = malloc(n * sizeof *win);
    tq_kv_cache *dst = NULL;
    tq_status st = TQ_ERR_NOMEM;
    if (ls && win) {
        /* The layers as src resolved them (what is in effect; resolving it again is the
         * identity, as for a cache file). */
        for (size_t i = 0; i < n; i++) {
            ls[i] = src->layers[i].scheme;
            win[i] = src->layers[i].window;
        }
        tq_kv_cache_config cfg = src->cfg;
        cfg.layer_schemes = ls;
        cfg.layer_windows = win;
        cfg.reserve_tokens = 0;
        st = tq_kv_cache_create(&dst, &cfg);
    }
    free(ls);
    free(win);
    if (st) return st;
    dst->cfg = src->cfg;
    dst->cfg.reserve_tokens = 0; /* nothing reserved for the fork */
    dst->cfg.layer_windows = dst->windows; /* the fork's own copies, not the source's */
    dst->cfg.key_rope_freqs = dst->freqs;
    for (size_t i = 0; i < n && !st; i++) st = fork_layer(src, &src->layers[i], &dst->layers[i]);
    if (st) {
        tq_kv_cache_free(dst);
        return st;
    }
    *out = dst;
    return TQ_OK;
}

/* ---- accounting ---- */

/* One page as one cache counts it in tq_kv_cache_memory. */
typedef struct page_use {
    const void *page;
    size_t tokens, compressed, data, f16, bytes;
} page_use;

static size_t overlap(size_t a0, size_t a1, size_t b0, size_t b1) {
    size_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* The pages of c's page tables that another cache also holds: returns their bytes and in *n
 * their number; the first cap of them go to uses[] with what c counts of each (a page may
 * become shared between two calls: forking a cache only reads it). */
static size_t shared_pages(const tq_kv_cache *c, page_use *uses, size_t cap, size_t *n) {
    size_t bytes = 0, H = (size_t)c->cfg.n_kv_heads;
    size_t f16_tok = H * 2 * (size_t)(c->cfg.head_dim_k + c->cfg.head_dim_v);
    *n = 0;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        size_t comp_tok = H * (l->k.rec_bytes + l->v.rec_bytes);
        size_t raw_lo = l->n_comp > l->dropped ? l->n_comp : l->dropped;
        for (size_t j = 0; j < l->n_cpages + l->n_rpages; j++) {
            int raw = j >= l->n_cpages;
            const void *p = raw ? (const void *)l->rpages[j - l->n_cpages] : (const void *)l->cpages[j];
            if (!p || tq_kv_page_refs(p) < 2) continue;
            size_t t0 = raw ? l->raw_base + (j - l->n_cpages) * TQ_KV_P : j * TQ_KV_P;
            size_t t = raw ? overlap(t0, t0 + TQ_KV_P, raw_lo, l->len)
                           : overlap(t0, t0 + TQ_KV_P, l->dropped, l->n_comp);
            page_use u = {p, t, raw ? 0 : t, t * (raw ? f16_tok : comp_tok), t * f16_tok,
                          raw ? c->rpage_bytes : tq_kv_cpage_bytes(c, l)};
            bytes += u.bytes;
            if (*n < cap) uses[*n] = u;
            ++*n;
        }
    }
    return bytes;
}

tq_status tq_kv_cache_shared_bytes(const tq_kv_cache *c, size_t *shared_bytes) {
    if (!c || !shared_bytes) return TQ_ERR_NULL;
    size_t n;
    *shared_bytes = shared_pages(c, NULL, 0, &n);
    return TQ_OK;
}

static int cmp_use(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const page_use *)a)->page, y = (uintptr_t)((const page_use *)b)->page;
    return x < y ? -1 : x > y;
}

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

static tq_status caches_memory(const tq_kv_cache *const *caches, size_t n, tq_kv_memory *m) {
    memset(m, 0, sizeof *m);
    size_t n_use = 0, k = 0, got;
    for (size_t i = 0; i < n; i++) {
        if (!caches[i]) return TQ_ERR_NULL;
        shared_pages(caches[i], NULL, 0, &got);
        n_use += got;
    }
    page_use *u = n_use ? malloc(n_use * sizeof *u) : NULL;
    if (n_use && !u) return TQ_ERR_NOMEM;
    /* Each cache's own view (a cache listed twice counts once)... */
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = caches[j] == caches[i];
        if (seen) continue;
        tq_kv_memory one;
        tq_kv_cache_memory(caches[i], &one, sizeof one);
        m->tokens += one.tokens;
        m->compressed_tokens += one.compressed_tokens;
        m->data_bytes += one.data_bytes;
        m->allocated_bytes += one.allocated_bytes;
        m->f16_bytes += one.f16_bytes;
        shared_pages(caches[i], u ? u + k : NULL, n_use - k, &got);
        k += got < n_use - k ? got : n_use - k;
    }
    /* ... less what a page held by several of them added beyond its largest use. */
    if (k) qsort(u, k, sizeof *u, cmp_use);
    for (size_t a = 0, b; a < k; a = b) {
        page_use top = u[a];
        for (b = a + 1; b < k && u[b].page == u[a].page; b++) {
            top.tokens = max_z(top.tokens, u[b].tokens);
            top.compressed = max_z(top.compressed, u[b].compressed);
            top.data = max_z(top.data, u[b].data);
            top.f16 = max_z(top.f16, u[b].f16);
        }
        for (size_t j = a; j < b; j++) {
            m->tokens -= u[j].tokens;
            m->compressed_tokens -= u[j].compressed;
            m->data_bytes -= u[j].data;
            m->allocated_bytes -= u[j].bytes;
            m->f16_bytes -= u[j].f16;
        }
        m->tokens += top.tokens;
        m->compressed_tokens += top.compressed;
        m->data_bytes += top.data;
        m->allocated_bytes += top.bytes;
        m->f16_bytes += top.f16;
    }
    free(u);
    return TQ_OK;
}

tq_status tq_kv_caches_memory(const tq_kv_cache *const *caches, size_t n, tq_kv_memory *mem,
                              size_t mem_size) {
    if (!mem || (n && !caches)) return TQ_ERR_NULL;
    tq_kv_memory m;
    tq_status st = caches_memory(caches, n, &m);
    if (st) return st;
    return tq_sized_out(mem, mem_size, &m, sizeof m, sizeof m, 0);
}

/*
 * The KV cache's page storage: compressed and raw pages of TQ_KV_PAGE_TOKENS tokens (the layout
 * in kvcache_internal.h), their growth, spare lists and reservation, the shape a cache file
 * restores, the recycling of a windowed layer's old pages, and the pages' reference counts
 * (tq_kv_cache_fork shares pages copy-on-write; doc/kvcache.md §3, "Forks").
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache_internal.h"

/* ---- pages and their reference counts ----
 * A page is preceded by a header holding the number of caches that hold it (a cache holds a
 * page once, in its page table or a spare list). The count is atomic: two caches that share a
 * page may be used from two threads. A page held once belongs to its cache, which may write it;
 * a shared page is never written (tq_kv_own_cpages / tq_kv_own_rpages copy it first). */
#define PAGE_HDR ((size_t)64) /* keeps the data as aligned as malloc's */
typedef struct page_hdr {
    atomic_size_t refs;
} page_hdr;

static page_hdr *hdr_of(const void *page) {
    return (page_hdr *)(void *)((unsigned char *)(uintptr_t)page - PAGE_HDR);
}

void *tq_kv_page_alloc(size_t bytes) {
    unsigned char *p = malloc(PAGE_HDR + bytes);
    if (!p) return NULL;
    atomic_init(&((page_hdr *)(void *)p)->refs, 1);
    return p + PAGE_HDR;
}

void tq_kv_page_share(void *page) {
    atomic_fetch_add_explicit(&hdr_of(page)->refs, 1, memory_order_relaxed);
}

size_t tq_kv_page_refs(const void *page) {
    return atomic_load_explicit(&hdr_of(page)->refs, memory_order_acquire);
}

/* Drops one reference; returns 1 if it was the last (the page is then the caller's alone, its
 * count back at 1, for reuse or page_free), else 0. */
static int page_release(void *page) {
    page_hdr *h = hdr_of(page);
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return 0;
    atomic_store_explicit(&h->refs, 1, memory_order_relaxed);
    return 1;
}

static void page_free(void *page) { free(hdr_of(page)); }

void tq_kv_page_drop(void *page) {
    if (page && page_release(page)) page_free(page);
}

/* Grows a pointer array to hold at least n entries (doubling). */
static int grow_ptrs(void ***arr, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    size_t nc = *cap ? *cap : 8;
    while (nc < n) nc *= 2;
    void **p = realloc(*arr, nc * sizeof *p);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

/* One compressed page: a spare one if there is one. */
static uint8_t *new_cpage(const tq_kv_cache *c, tq_kv_layer *l) {
    return l->n_cspare ? l->cspare[--l->n_cspare] : tq_kv_page_alloc(tq_kv_cpage_bytes(c, l));
}

/* Compressed pages for tokens [from, n_tokens): slots past the array are added, and slots a
 * windowed layer emptied (dropped pages, NULL) are filled again. */
tq_status tq_kv_ensure_cpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t n_tokens) {
    size_t need = (n_tokens + TQ_KV_P - 1) / TQ_KV_P;
    for (size_t i = from / TQ_KV_P; i < need && i < l->n_cpages; i++)
        if (!l->cpages[i] && !(l->cpages[i] = new_cpage(c, l))) return TQ_ERR_NOMEM;
    if (need <= l->n_cpages) return TQ_OK;
    if (!grow_ptrs((void ***)&l->cpages, &l->cap_cpages, need)) return TQ_ERR_NOMEM;
    while (l->n_cpages < need) {
        if (l->n_cpages < from / TQ_KV_P) { /* below a windowed layer's kept range */
            l->cpages[l->n_cpages++] = NULL;
            continue;
        }
        uint8_t *p = new_cpage(c, l);
        if (!p) return TQ_ERR_NOMEM;
        l->cpages[l->n_cpages++] = p;
    }
    return TQ_OK;
}

/* Keeps a compressed page for reuse (frees it if the spare list cannot grow); a shared page
 * loses one reference instead. */
static void spare_cpage(tq_kv_layer *l, uint8_t *p) {
    if (!page_release(p)) return;
    if (!grow_ptrs((void ***)&l->cspare, &l->cap_cspare, l->n_cspare + 1)) {
        page_free(p);
        return;
    }
    l->cspare[l->n_cspare++] = p;
}

/* Raw pages for tokens up to (not including) `end`. */
tq_status tq_kv_ensure_rpages(const tq_kv_cache *c, tq_kv_layer *l, size_t end) {
    if (end <= l->raw_base) return TQ_OK;
    size_t need = (end - l->raw_base + TQ_KV_P - 1) / TQ_KV_P;
    if (need <= l->n_rpages) return TQ_OK;
    if (!grow_ptrs((void ***)&l->rpages, &l->cap_rpages, need)) return TQ_ERR_NOMEM;
    while (l->n_rpages < need) {
        uint16_t *p = l->n_rspare ? l->rspare[--l->n_rspare] : tq_kv_page_alloc(c->rpage_bytes);
        if (!p) return TQ_ERR_NOMEM;
        l->rpages[l->n_rpages++] = p;
    }
    return TQ_OK;
}

/* Keeps a raw page for reuse (frees it if even the spare list cannot grow); a shared page
 * loses one reference instead. */
static void spare_rpage(tq_kv_layer *l, uint16_t *p) {
    if (!page_release(p)) return;
    if (!grow_ptrs((void ***)&l->rspare, &l->cap_rspare, l->n_rspare + 1)) {
        page_free(p);
        return;
    }
    l->rspare[l->n_rspare++] = p;
}

/* Raw pages wholly below position `bound` go to the spare list (raw_base moves past them). */
void tq_kv_spare_raw_below(tq_kv_layer *l, size_t bound) {
    size_t drop = 0;
    while (drop < l->n_rpages && l->raw_base + TQ_KV_P <= bound) {
        spare_rpage(l, l->rpages[drop++]);
        l->raw_base += TQ_KV_P;
    }
    if (drop) {
        memmove(l->rpages, l->rpages + drop, (l->n_rpages - drop) * sizeof *l->rpages);
        l->n_rpages -= drop;
    }
}

void tq_kv_spare_raw_all(tq_kv_layer *l) {
    for (size_t j = 0; j < l->n_rpages; j++) spare_rpage(l, l->rpages[j]);
    l->n_rpages = 0;
}

/* For cachefile.c: gives layer `layer` of an empty cache the shape of a saved state (len tokens,
 * the first n_comp compressed, raw_base = ⌊n_comp/P⌋·P as compress_to in kvcache.c leaves it)
 * with every page allocated; the caller then fills the records, raw tokens and key mean. */
tq_status tq_kv_layer_restore_shape(tq_kv_cache *c, int layer, size_t len, size_t n_comp) {
    if (!c || layer < 0 || layer >= c->cfg.n_layers || n_comp > len) return TQ_ERR_INVALID;
    tq_kv_layer *l = &c->layers[layer];
    if (l->len || l->n_comp || (l->compress_none && n_comp)) return TQ_ERR_INVALID;
    l->raw_base = n_comp / TQ_KV_P * TQ_KV_P;
    tq_status st = tq_kv_ensure_cpages(c, l, 0, n_comp);
    if (!st) st = tq_kv_ensure_rpages(c, l, len);
    if (st) return st;
    l->len = len;
    l->n_comp = n_comp;
    return TQ_OK;
}

/* Positions a windowed layer holds with appends of up to 2P tokens: the kept range, the page
 * it starts in, the append, the raw window and a batch in flight (larger appends allocate). */
static size_t window_hold(const tq_kv_cache *c, const tq_kv_layer *l) {
    return l->window + TQ_KV_WINDOW_SLACK + 2 * TQ_KV_P + (size_t)c->cfg.scheme.raw_window +
           (size_t)c->cfg.scheme.batch;
}

tq_status tq_kv_cache_reserve(tq_kv_cache *c, size_t n_tokens) {
    if (!c) return TQ_ERR_NULL;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        tq_status st;
        if (l->window && window_hold(c, l) < n_tokens) {
            /* A windowed layer recycles its pages: reserve the page table for n_tokens and
             * enough spare pages for what it can hold. */
            size_t pages = (n_tokens + TQ_KV_P - 1) / TQ_KV_P, hold = window_hold(c, l) / TQ_KV_P + 2;
            if (l->compress_none) {
                if (!grow_ptrs((void ***)&l->rpages, &l->cap_rpages, hold)) return TQ_ERR_NOMEM;
                st = tq_kv_ensure_rpages(c, l, l->raw_base + hold * TQ_KV_P);
            } else {
                if (!grow_ptrs((void ***)&l->cpages, &l->cap_cpages, pages)) return TQ_ERR_NOMEM;
                size_t have = l->n_cspare;
                for (size_t j = 0; j < l->n_cpages; j++) have += l->cpages[j] != NULL;
                for (; have < hold; have++) {
                    uint8_t *p = tq_kv_page_alloc(tq_kv_cpage_bytes(c, l));
                    if (!p) return TQ_ERR_NOMEM;
                    spare_cpage(l, p);
                }
                st = TQ_OK;
            }
        } else {
            st = l->compress_none ? tq_kv_ensure_rpages(c, l, n_tokens) : tq_kv_ensure_cpages(c, l, 0, n_tokens);
        }
        if (st) return st;
        /* The raw part needs window + batch tokens in decode (two pages across a boundary). */
        if (!l->compress_none) {
            size_t raw = (size_t)c->cfg.scheme.raw_window + (size_t)c->cfg.scheme.batch + TQ_KV_P;
            st = tq_kv_ensure_rpages(c, l, l->raw_base + (raw < n_tokens ? raw : n_tokens));
            if (st) return st;
        }
    }
    return TQ_OK;
}

tq_status tq_kv_cache_trim(tq_kv_cache *c) {
    if (!c) return TQ_ERR_NULL;
    /* what decode's raw part takes: the window and a batch, across a page boundary */
    const size_t keep = ((size_t)c->cfg.scheme.raw_window + (size_t)c->cfg.scheme.batch) / TQ_KV_P + 2;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        tq_kv_layer *l = &c->layers[i];
        const size_t have = l->n_rpages;
        while (l->n_rspare > 0 && have + l->n_rspare > keep) page_free(l->rspare[--l->n_rspare]);
    }
    return TQ_OK;
}

/* A windowed layer recycles the pages wholly below the range the first query of an append
 * at position `pos` (the length before it) can see, less the slack: [pos + 1 − window −
 * slack, …), in whole pages (dropped stays a multiple of P). Tokens dropped before they were
 * compressed count as compressed (n_comp ≥ dropped): compression resumes at the first kept. */
void tq_kv_drop_old(tq_kv_layer *l, size_t pos) {
    size_t keep = l->window + TQ_KV_WINDOW_SLACK;
    if (!l->window || pos + 1 <= keep) return;
    size_t hp = (pos + 1 - keep) / TQ_KV_P * TQ_KV_P;
    if (hp <= l->dropped) return;
    for (size_t i = l->dropped / TQ_KV_P; i < hp / TQ_KV_P && i < l->n_cpages; i++)
        if (l->cpages[i]) {
            spare_cpage(l, l->cpages[i]);
            l->cpages[i] = NULL;
        }
    tq_kv_spare_raw_below(l, hp);
    if (l->n_rpages == 0 && l->raw_base < hp) l->raw_base = hp;
    if (!l->compress_none && l->n_comp < hp) l->n_comp = hp;
    l->dropped = hp;
}

/* Page slot *slot (of `bytes`) made the layer's own: a shared page is copied into a spare or
 * new page, and the layer's reference to it dropped. */
static tq_status own_page(void **slot, void **spares, size_t *n_spare, size_t bytes) {
    if (!*slot || tq_kv_page_refs(*slot) == 1) return TQ_OK;
    void *p = *n_spare ? spares[--*n_spare] : tq_kv_page_alloc(bytes);
    if (!p) return TQ_ERR_NOMEM;
    memcpy(p, *slot, bytes);
    tq_kv_page_drop(*slot);
    *slot = p;
    return TQ_OK;
}

tq_status tq_kv_own_cpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t to) {
    for (size_t i = from / TQ_KV_P; i * TQ_KV_P < to && i < l->n_cpages; i++) {
        tq_status st = own_page((void **)&l->cpages[i], (void **)l->cspare, &l->n_cspare,
                                tq_kv_cpage_bytes(c, l));
        if (st) return st;
    }
    return TQ_OK;
}

tq_status tq_kv_own_rpages(const tq_kv_cache *c, tq_kv_layer *l, size_t from, size_t to) {
    if (from < l->raw_base) from = l->raw_base;
    for (size_t j = (from - l->raw_base) / TQ_KV_P; l->raw_base + j * TQ_KV_P < to && j < l->n_rpages; j++) {
        tq_status st = own_page((void **)&l->rpages[j], (void **)l->rspare, &l->n_rspare,
                                c->rpage_bytes);
        if (st) return st;
    }
    return TQ_OK;
}

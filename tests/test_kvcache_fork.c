/*
 * Forks (tq_kv_cache_fork: pages shared copy-on-write) and attention at explicit query
 * positions (tq_kv_attention_at).
 *
 * Forks: two sequences sharing a prefix, then diverging, read and attend bit for bit as two
 * independent caches built from the same calls, for every kind of scheme (f16, q8_0, q4_0,
 * turbo3, turbo3.5 with its key split, windowed layers); memory counts the shared pages once;
 * truncating, appending to or freeing one leaves the other as it was; forks of forks; the
 * empty cache; bad arguments. `test_kvcache_fork threads` (also run under TSan, make
 * test-tsan) appends to and attends on two caches that share pages from two threads.
 *
 * Positions: the implicit ones give tq_kv_attention's bits; arbitrary ones (any order, repeats,
 * windows, soft-cap, several query blocks) match the reference at the same positions within
 * test_attention.c's tolerance (2e-4, int8 scores off), and bad positions fail.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache_internal.h"
#include "test_api.h"
#include "test_util.h"
#include "turboquant.h"

#define H 2
#define G 2 /* query heads per KV head */
#define D 128
#define NL 2 /* layers */
#define TOL 2e-4

/* Roughly normal: a sum of four uniforms of a 64-bit LCG, scaled to variance 1. */
static uint64_t rng_state = 88172645463325252ull;
static float grand(void) {
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(rng_state >> 11) * 0x1.0p-53;
    }
    return (float)((s - 2.0) * 1.7320508075688772);
}

/* Token streams: 0 the shared prefix, 1 and 2 two continuations. */
#define NS 3
#define NT 1400
static float *Kd[NS], *Vd[NS];
static const float *kat(int s, size_t t) { return Kd[s] + t * H * D; }
static const float *vat(int s, size_t t) { return Vd[s] + t * H * D; }

static void make_data(void) {
    for (int s = 0; s < NS; s++) {
        Kd[s] = malloc(sizeof(float) * NT * H * D);
        Vd[s] = malloc(sizeof(float) * NT * H * D);
        for (size_t i = 0; i < (size_t)NT * H * D; i++) Kd[s][i] = grand() + 0.3f, Vd[s][i] = grand();
    }
}

static tq_kv_cache *make_cache(const char *scheme, const size_t *windows) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, NL, H, D, D);
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0)) return NULL;
    cfg.layer_windows = windows;
    tq_kv_cache *c = NULL;
    return tq_kv_cache_create(&c, &cfg) ? NULL : c;
}

/* Appends tokens [t0, t0 + n) of stream s to every layer, in calls of `step` tokens. */
static int feed(tq_kv_cache *c, int s, size_t t0, size_t n, size_t step) {
    for (size_t t = t0; t < t0 + n; t += step) {
        size_t m = t0 + n - t < step ? t0 + n - t : step;
        for (int l = 0; l < NL; l++)
            if (tq_kv_cache_append(c, l, kat(s, t), vat(s, t), m)) return 0;
    }
    return 1;
}

/* The history every sequence starts with: a 300-token prefill, then 60 decode steps (the first
 * compresses; with batch 64 page 1 ends up partly compressed). */
static int prefix(tq_kv_cache *c) { return feed(c, 0, 0, 300, 300) && feed(c, 0, 300, 60, 1); }

static float Q[8 * G * H * D];

/* Every layer's attention (the last nq queries; layer l of `windows` attends with its window)
 * and read-back of c, into buf; returns the floats written (0 on an error). */
static size_t snapshot(const tq_kv_cache *c, const size_t *windows, size_t nq, float *buf) {
    size_t n = 0;
    for (int l = 0; l < NL; l++) {
        tq_attn_params p;
        tq_attn_params_init(&p, D);
        p.sliding_window = windows ? (int)windows[l] : 0;
        size_t wb = tq_kv_attention_workspace_size(c, l, G * H, nq, 2);
        void *work = malloc(wb);
        tq_status st = tq_kv_attention(c, l, Q, G * H, nq, &p, NULL, work, wb, buf + n, SIZE_MAX);
        free(work);
        if (st) return 0;
        n += nq * G * H * D;
        size_t len = tq_kv_cache_length(c, l), lo = tq_kv_cache_dropped_length(c, l);
        if (tq_kv_cache_read(c, l, lo, len - lo, buf + n, SIZE_MAX, buf + n + (len - lo) * H * D, SIZE_MAX)) return 0;
        n += 2 * (len - lo) * H * D;
    }
    return n;
}

#define SNAP_FLOATS ((size_t)NL * (8 * G * H * D + 2 * 2 * NT * H * D))
static float *snap_a, *snap_b;

/* 1 if a and b attend and read back the same bits. */
static int same(const tq_kv_cache *a, const tq_kv_cache *b, const size_t *windows, size_t nq) {
    size_t na = snapshot(a, windows, nq, snap_a), nb = snapshot(b, windows, nq, snap_b);
    return na && na == nb && memcmp(snap_a, snap_b, na * sizeof(float)) == 0;
}

/* The bytes of the pages holding a cache's tokens (what a fork shares), from the layout. */
static size_t held_page_bytes(const tq_kv_cache *c) {
    size_t b = 0;
    for (int i = 0; i < NL; i++) {
        const tq_kv_layer *l = &c->layers[i];
        size_t nc = (l->n_comp + TQ_KV_P - 1) / TQ_KV_P, nr = 0;
        if (l->len > l->raw_base) nr = (l->len - l->raw_base + TQ_KV_P - 1) / TQ_KV_P;
        if (nr > l->n_rpages) nr = l->n_rpages;
        for (size_t j = 0; j < nc; j++) b += l->cpages[j] ? tq_kv_cpage_bytes(c, l) : 0;
        b += nr * c->rpage_bytes;
    }
    return b;
}

/* The data bytes a cache holds of its own, never shared by a fork (tq_kv_cache_memory): key
 * means, key scales and key orders, and the sink store's kept positions. */
static size_t key_bytes(const tq_kv_cache *c) {
    size_t b = 0;
    for (int i = 0; i < NL; i++) {
        const tq_kv_layer *l = &c->layers[i];
        size_t data = 0, alloc = 0;
        if (l->kt) tq_key_transform_memory(l->kt, &data, &alloc);
        if (l->rho) data += (size_t)c->cfg.n_kv_heads * sizeof *l->rho; /* ρ per head (mean=2) */
        size_t ns = tq_kv_sink_len(c, l);
        b += data + (ns > l->dropped ? ns - l->dropped : 0) * (size_t)c->cfg.n_kv_heads * 2 *
                        (size_t)(c->cfg.head_dim_k + c->cfg.head_dim_v);
    }
    return b;
}

static const char *schemes[] = {"f16", "q8_0", "q4_0", "turbo3", "turbo3.5", "turbo4:prefill_raw=0",
                                "q4_0r", "kq8_0rv3"};
#define N_SCHEMES (sizeof schemes / sizeof *schemes)

/* Fork after the prefix, diverge (150 decode steps and a 20-token chunk each): both equal
 * independent caches; memory counts the shared pages once. */
static void test_fork_diverge(void) {
    for (size_t si = 0; si < N_SCHEMES; si++) {
        const char *sch = schemes[si];
        tq_kv_cache *a = make_cache(sch, NULL), *ia = make_cache(sch, NULL), *ib = make_cache(sch, NULL);
        CHECK_MSG(a && ia && ib && prefix(a) && prefix(ia) && prefix(ib), "%s", sch);
        tq_kv_cache *b = NULL;
        CHECK(tq_kv_cache_fork(a, &b) == TQ_OK && b);
        if (!b) continue;
        CHECK_MSG(same(a, b, NULL, 3), "%s: fork differs from its source", sch);
        if (!strcmp(sch, "turbo3.5")) CHECK(test_layer_scheme(b, 0).key_split == 1);
        /* Right after the fork every page holding a token is shared. */
        size_t sa = 0, sb = 0, held = held_page_bytes(a);
        CHECK(tq_kv_cache_shared_bytes(a, &sa) == TQ_OK && tq_kv_cache_shared_bytes(b, &sb) == TQ_OK);
        CHECK_MSG(sa == held && sb == held && held > 0, "%s: shared %zu %zu, prefix pages %zu", sch, sa, sb, held);
        tq_kv_memory ma, mb, mu, m1;
        const tq_kv_cache *both[3] = {a, b, a};
        CHECK(tq_kv_cache_memory(a, &ma, sizeof ma) == TQ_OK && tq_kv_cache_memory(b, &mb, sizeof mb) == TQ_OK);
        CHECK(tq_kv_caches_memory(both, 3, &mu, sizeof mu) == TQ_OK);
        /* Together: the tokens once, the key statistics each cache has its own copy of. */
        CHECK(mu.tokens == ma.tokens && mu.f16_bytes == ma.f16_bytes && mu.compressed_tokens == ma.compressed_tokens);
        CHECK(mu.data_bytes == ma.data_bytes + key_bytes(b));
        CHECK_MSG(mu.allocated_bytes == ma.allocated_bytes + mb.allocated_bytes - held, "%s", sch);
        CHECK(tq_kv_caches_memory(both, 1, &m1, sizeof m1) == TQ_OK && memcmp(&m1, &ma, sizeof m1) == 0);
        /* Diverge. */
        CHECK(feed(a, 1, 0, 150, 1) && feed(ia, 1, 0, 150, 1));
        CHECK(feed(b, 2, 0, 150, 1) && feed(ib, 2, 0, 150, 1));
        CHECK(feed(a, 1, 150, 20, 20) && feed(ia, 1, 150, 20, 20));
        CHECK(feed(b, 2, 150, 20, 20) && feed(ib, 2, 150, 20, 20));
        CHECK_MSG(same(a, ia, NULL, 1) && same(a, ia, NULL, 8), "%s: a differs from its independent cache", sch);
        CHECK_MSG(same(b, ib, NULL, 1) && same(b, ib, NULL, 8), "%s: b differs from its independent cache", sch);
        /* What is still shared: the pages neither wrote, counted once together. */
        CHECK(tq_kv_cache_shared_bytes(a, &sa) == TQ_OK && tq_kv_cache_shared_bytes(b, &sb) == TQ_OK);
        CHECK_MSG(sa == sb && sa < held, "%s: shared %zu %zu after diverging (%zu)", sch, sa, sb, held);
        if (strcmp(sch, "f16") != 0) CHECK_MSG(sa > 0, "%s: nothing shared after diverging", sch);
        CHECK(tq_kv_cache_memory(a, &ma, sizeof ma) == TQ_OK && tq_kv_cache_memory(b, &mb, sizeof mb) == TQ_OK);
        CHECK(tq_kv_caches_memory(both, 2, &mu, sizeof mu) == TQ_OK);
        CHECK(mu.allocated_bytes == ma.allocated_bytes + mb.allocated_bytes - sa);
        CHECK(mu.tokens < ma.tokens + mb.tokens && mu.tokens > ma.tokens);
        tq_kv_memory mia;
        CHECK(tq_kv_cache_memory(ia, &mia, sizeof mia) == TQ_OK && ma.data_bytes == mia.data_bytes && ma.tokens == mia.tokens);
        /* A saved fork is a normal cache: the same bytes as the independent one's file. */
        size_t fb = tq_kv_cache_save_bound(b);
        uint8_t *f1 = malloc(fb + 1), *f2 = malloc(fb + 1);
        CHECK(fb > 0 && fb == tq_kv_cache_save_bound(ib));
        CHECK(tq_kv_cache_save_memory(b, f1, fb, NULL) == TQ_OK && tq_kv_cache_save_memory(ib, f2, fb, NULL) == TQ_OK);
        CHECK_MSG(memcmp(f1, f2, fb) == 0, "%s: the saved fork differs", sch);
        free(f1);
        free(f2);
        tq_kv_cache_free(a);
        CHECK_MSG(same(b, ib, NULL, 2), "%s: b changed when a was freed", sch);
        CHECK(tq_kv_cache_shared_bytes(b, &sb) == TQ_OK && sb == 0);
        tq_kv_cache_free(b);
        tq_kv_cache_free(ia);
        tq_kv_cache_free(ib);
    }
}

/* Truncating a fork (inside the shared compressed pages, inside the shared raw part) leaves
 * its source as it was; the fork then equals an independent cache with the same history. */
static void test_fork_truncate(void) {
    static const size_t cut[] = {100, 330, 359};
    for (size_t si = 0; si < N_SCHEMES; si++)
        for (size_t ci = 0; ci < sizeof cut / sizeof *cut; ci++) {
            const char *sch = schemes[si];
            tq_kv_cache *a = make_cache(sch, NULL), *ib = make_cache(sch, NULL), *b = NULL;
            CHECK(a && ib && prefix(a) && prefix(ib));
            CHECK(tq_kv_cache_fork(a, &b) == TQ_OK);
            if (!b) continue;
            size_t n = snapshot(a, NULL, 4, snap_a);
            float *before = malloc(SNAP_FLOATS * sizeof(float));
            memcpy(before, snap_a, n * sizeof(float));
            CHECK(tq_kv_cache_truncate(b, cut[ci]) == TQ_OK && tq_kv_cache_truncate(ib, cut[ci]) == TQ_OK);
            CHECK(snapshot(a, NULL, 4, snap_a) == n && memcmp(before, snap_a, n * sizeof(float)) == 0);
            CHECK(feed(b, 2, 0, 90, 1) && feed(ib, 2, 0, 90, 1));
            CHECK_MSG(snapshot(a, NULL, 4, snap_a) == n && memcmp(before, snap_a, n * sizeof(float)) == 0,
                      "%s cut %zu: the source changed", sch, cut[ci]);
            CHECK_MSG(same(b, ib, NULL, 3), "%s cut %zu: the fork differs from an independent cache", sch, cut[ci]);
            /* And the other way: truncating the source leaves the fork. */
            n = snapshot(b, NULL, 2, snap_a);
            memcpy(before, snap_a, n * sizeof(float));
            CHECK(tq_kv_cache_truncate(a, 0) == TQ_OK && feed(a, 1, 0, 400, 400) && tq_kv_cache_compress(a, -1) == TQ_OK);
            CHECK(snapshot(b, NULL, 2, snap_a) == n && memcmp(before, snap_a, n * sizeof(float)) == 0);
            free(before);
            tq_kv_cache_free(b);
            tq_kv_cache_free(a);
            tq_kv_cache_free(ib);
        }
}

/* A fork of a fork; the parent freed first; a fork of an empty cache. */
static void test_fork_chain(void) {
    const char *sch = "turbo3";
    tq_kv_cache *a = make_cache(sch, NULL), *b = NULL, *c = NULL, *ic = make_cache(sch, NULL);
    CHECK(a && ic && prefix(a) && prefix(ic));
    CHECK(tq_kv_cache_fork(a, &b) == TQ_OK && feed(b, 1, 0, 70, 1));
    CHECK(feed(ic, 1, 0, 70, 1));
    CHECK(tq_kv_cache_fork(b, &c) == TQ_OK && c);
    if (!b || !c) return;
    CHECK(((const tq_kv_cache *)a)->layers[0].cpages[0] == c->layers[0].cpages[0]);
    CHECK(tq_kv_page_refs(c->layers[0].cpages[0]) == 3);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
    CHECK(tq_kv_page_refs(c->layers[0].cpages[0]) == 1);
    CHECK(feed(c, 2, 0, 100, 1) && feed(ic, 2, 0, 100, 1));
    CHECK(same(c, ic, NULL, 5));
    tq_kv_cache_free(c);
    tq_kv_cache_free(ic);

    tq_kv_cache *e = make_cache("turbo3.5", NULL), *f = NULL, *ie = make_cache("turbo3.5", NULL);
    CHECK(e && ie && tq_kv_cache_fork(e, &f) == TQ_OK && f);
    size_t s = 1;
    CHECK(tq_kv_cache_shared_bytes(f, &s) == TQ_OK && s == 0);
    CHECK(prefix(f) && prefix(ie) && feed(e, 1, 0, 10, 10));
    CHECK(same(f, ie, NULL, 2));
    CHECK(tq_kv_cache_length(e, 0) == 10);
    tq_kv_cache_free(e);
    tq_kv_cache_free(f);
    tq_kv_cache_free(ie);
}

/* Windowed layers: layer 0 has a window of 100, layer 1 none; long enough to recycle pages
 * (shared ones lose a reference instead of going to the spare list). */
static void test_fork_windowed(void) {
    static const size_t win[NL] = {100, 0};
    static const char *wsch[] = {"f16", "q8_0", "turbo3", "turbo3.5"};
    for (size_t si = 0; si < sizeof wsch / sizeof *wsch; si++) {
        tq_kv_cache *a = make_cache(wsch[si], win), *ia = make_cache(wsch[si], win),
                    *ib = make_cache(wsch[si], win), *b = NULL;
        CHECK(a && ia && ib);
        if (!a || !ia || !ib) continue;
        CHECK(feed(a, 0, 0, 400, 400) && feed(a, 0, 400, 500, 1));
        CHECK(feed(ia, 0, 0, 400, 400) && feed(ia, 0, 400, 500, 1));
        CHECK(feed(ib, 0, 0, 400, 400) && feed(ib, 0, 400, 500, 1));
        CHECK(tq_kv_cache_dropped_length(a, 0) > 0);
        CHECK(tq_kv_cache_fork(a, &b) == TQ_OK && b);
        if (!b) continue;
        CHECK(tq_kv_cache_dropped_length(b, 0) == tq_kv_cache_dropped_length(a, 0));
        CHECK(feed(a, 1, 0, 600, 1) && feed(ia, 1, 0, 600, 1));
        CHECK(feed(b, 2, 0, 600, 1) && feed(ib, 2, 0, 600, 1));
        CHECK_MSG(same(a, ia, win, 1) && same(b, ib, win, 1), "%s", wsch[si]);
        CHECK(tq_kv_cache_truncate(b, tq_kv_cache_length(b, 0) - 50) == TQ_OK);
        CHECK(same(a, ia, win, 1));
        tq_kv_cache_free(a);
        tq_kv_cache_free(b);
        tq_kv_cache_free(ia);
        tq_kv_cache_free(ib);
    }
}

/* A fork's config is its own: its layer windows and RoPE angles outlive the source. */
static void test_fork_config_owned(void) {
    enum { L = 2, HH = 1, DD = 32 };
    size_t win[L] = {100, 0};
    float fr[L * DD / 2];
    for (int i = 0; i < L * DD / 2; i++) fr[i] = 0.001f * (float)(i + 1);
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, L, HH, DD, DD);
    char err[256];
    CHECK(tq_kv_scheme_parse("turbo3", &cfg.scheme, err, sizeof err) == TQ_OK);
    cfg.layer_windows = win;
    cfg.key_rope_pairs = TQ_ROPE_PAIRS_ADJACENT;
    cfg.key_rope_freqs = fr;
    tq_kv_cache *a = NULL, *b = NULL;
    CHECK(tq_kv_cache_create(&a, &cfg) == TQ_OK && a);
    CHECK(a && tq_kv_cache_fork(a, &b) == TQ_OK && b);
    tq_kv_cache_free(a);
    tq_kv_cache_config got;
    CHECK(b && tq_kv_cache_get_config(b, &got, sizeof got) == TQ_OK);
    CHECK(b && got.layer_windows && got.layer_windows[0] == 100 && got.layer_windows[1] == 0);
    CHECK(b && got.key_rope_freqs && memcmp(got.key_rope_freqs, fr, sizeof fr) == 0);
    tq_kv_cache_free(b);
}

static void test_fork_errors(void) {
    tq_kv_cache *a = make_cache("turbo3", NULL), *o = (tq_kv_cache *)&o;
    CHECK(tq_kv_cache_fork(NULL, &o) == TQ_ERR_NULL && o == NULL);
    CHECK(tq_kv_cache_fork(a, NULL) == TQ_ERR_NULL);
    size_t s;
    CHECK(tq_kv_cache_shared_bytes(NULL, &s) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_shared_bytes(a, NULL) == TQ_ERR_NULL);
    tq_kv_memory m;
    const tq_kv_cache *list[2] = {a, NULL};
    CHECK(tq_kv_caches_memory(NULL, 1, &m, sizeof m) == TQ_ERR_NULL);
    CHECK(tq_kv_caches_memory(list, 1, NULL, sizeof(tq_kv_memory)) == TQ_ERR_NULL);
    CHECK(tq_kv_caches_memory(list, 2, &m, sizeof m) == TQ_ERR_NULL);
    CHECK(tq_kv_caches_memory(NULL, 0, &m, sizeof m) == TQ_OK && m.allocated_bytes == 0 && m.tokens == 0);
    tq_kv_cache_free(a);
}

/* ---- two threads on two caches that share pages ---- */

typedef struct worker {
    tq_kv_cache *c;
    int stream;
    int ok;
    float out[G * H * D];
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    tq_attn_params p;
    tq_attn_params_init(&p, D);
    size_t wb = tq_kv_attention_workspace_size(w->c, 0, G * H, 1, 1);
    void *work = malloc(wb);
    w->ok = work != NULL;
    for (size_t t = 0; w->ok && t < 200; t++) {
        w->ok = feed(w->c, w->stream, t, 1, 1);
        if (w->ok && t % 50 == 49) w->ok = tq_kv_attention(w->c, 1, Q, G * H, 1, &p, NULL, work, wb, w->out, SIZE_MAX) == TQ_OK;
    }
    if (w->ok) w->ok = tq_kv_cache_truncate(w->c, 300) == TQ_OK && feed(w->c, w->stream, 0, 30, 1);
    free(work);
    return NULL;
}

static void test_fork_threads(void) {
    const char *sch = "turbo3";
    tq_kv_cache *a = make_cache(sch, NULL), *b = NULL, *ia = make_cache(sch, NULL), *ib = make_cache(sch, NULL);
    CHECK(a && ia && ib && prefix(a) && prefix(ia) && prefix(ib));
    CHECK(tq_kv_cache_fork(a, &b) == TQ_OK && b);
    if (!b) return;
    worker w[2] = {{.c = a, .stream = 1}, {.c = b, .stream = 2}};
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++) started[i] = pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
    for (int i = 0; i < 2; i++)
        if (started[i]) pthread_join(th[i], NULL);
    CHECK(started[0] && started[1] && w[0].ok && w[1].ok);
    worker s[2] = {{.c = ia, .stream = 1}, {.c = ib, .stream = 2}};
    worker_main(&s[0]);
    worker_main(&s[1]);
    CHECK(memcmp(w[0].out, s[0].out, sizeof w[0].out) == 0 && memcmp(w[1].out, s[1].out, sizeof w[1].out) == 0);
    CHECK(same(a, ia, NULL, 2) && same(b, ib, NULL, 2));
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
    tq_kv_cache_free(ia);
    tq_kv_cache_free(ib);
}

/* ---- attention at explicit positions ---- */

static tq_status attend_at(const tq_kv_cache *c, int layer, size_t nq, const int64_t *pos,
                           const tq_attn_params *p, tq_threadpool *pool, float *out) {
    size_t wb = tq_kv_attention_workspace_size(c, layer, G * H, nq, tq_threadpool_size(pool));
    void *work = malloc(wb);
    tq_status st = work ? tq_kv_attention_at(c, layer, Q, G * H, nq, pos, p, pool, work, wb, out, SIZE_MAX)
                        : TQ_ERR_NOMEM;
    free(work);
    return st;
}

static void test_positions(void) {
    static const char *psch[] = {"f16", "q8_0", "q4_0", "turbo3", "turbo3.5", "turbo4:window=32",
                                 "k=4:v=3:variant=prod"};
    enum { NQ = 8 };
    float o1[NQ * G * H * D], o2[NQ * G * H * D];
    int64_t pos[NQ];
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 3) == TQ_OK);
    for (size_t si = 0; si < sizeof psch / sizeof *psch; si++) {
        tq_kv_cache *c = make_cache(psch[si], NULL);
        CHECK(c && feed(c, 0, 0, 700, 700) && tq_kv_cache_compress(c, -1) == TQ_OK && feed(c, 0, 700, 9, 1));
        if (!c) continue;
        size_t len = tq_kv_cache_length(c, 0);
        for (int variant = 0; variant < 3; variant++) {
            tq_attn_params p;
            tq_attn_params_init(&p, D);
            if (variant == 1) p.sliding_window = 200;
            if (variant == 2) p.softcap = 5.0f;
            /* The implicit positions: tq_kv_attention's bits. */
            static const size_t nqs[] = {1, 2, 3, NQ};
            for (size_t k = 0; k < sizeof nqs / sizeof *nqs; k++) {
                size_t nq = nqs[k];
                for (size_t i = 0; i < nq; i++) pos[i] = (int64_t)(len - nq + i);
                size_t wb = tq_kv_attention_workspace_size(c, 1, G * H, nq, 3);
                void *work = malloc(wb);
                CHECK(tq_kv_attention(c, 1, Q, G * H, nq, &p, pool, work, wb, o1, SIZE_MAX) == TQ_OK);
                free(work);
                CHECK(attend_at(c, 1, nq, pos, &p, pool, o2) == TQ_OK);
                CHECK_MSG(memcmp(o1, o2, nq * G * H * D * sizeof(float)) == 0, "%s nq %zu variant %d", psch[si], nq, variant);
                CHECK(tq_kv_attention_ref(c, 1, Q, G * H, nq, &p, o1, SIZE_MAX) == TQ_OK);
                CHECK(tq_kv_attention_ref_at(c, 1, Q, G * H, nq, pos, &p, o2, SIZE_MAX) == TQ_OK);
                CHECK(memcmp(o1, o2, nq * G * H * D * sizeof(float)) == 0);
            }
            /* Arbitrary positions: any order, repeats, in the compressed part, the raw part,
             * the first token; one query alone and all in one call. */
            static const int64_t any[NQ] = {708, 3, 0, 500, 255, 256, 3, 640};
            for (size_t nq = 1; nq <= NQ; nq += NQ - 1) {
                for (size_t i = 0; i < nq; i++) pos[i] = any[(i + (nq == 1 ? 3 : 0)) % NQ];
                CHECK(attend_at(c, 0, nq, pos, &p, pool, o1) == TQ_OK);
                CHECK(tq_kv_attention_ref_at(c, 0, Q, G * H, nq, pos, &p, o2, SIZE_MAX) == TQ_OK);
                double e = 0.0;
                for (size_t i = 0; i < nq * G * H * D; i++) e = fmax(e, fabs((double)o1[i] - o2[i]));
                CHECK_MSG(e <= TOL, "%s variant %d nq %zu: fast vs reference at positions %g", psch[si], variant, nq, e);
                /* Pool size never changes the bits. */
                CHECK(attend_at(c, 0, nq, pos, &p, NULL, o2) == TQ_OK);
                CHECK(memcmp(o1, o2, nq * G * H * D * sizeof(float)) == 0);
            }
        }
        /* More queries than the length (a batch of repeats), and bad positions. */
        tq_attn_params p;
        tq_attn_params_init(&p, D);
        tq_kv_cache *s = make_cache(psch[si], NULL);
        CHECK(s && feed(s, 0, 0, 3, 3));
        int64_t rep[NQ] = {2, 1, 0, 2, 1, 0, 0, 1};
        CHECK(attend_at(s, 0, NQ, rep, &p, NULL, o1) == TQ_OK);
        CHECK(tq_kv_attention_ref_at(s, 0, Q, G * H, NQ, rep, &p, o2, SIZE_MAX) == TQ_OK);
        for (size_t i = 0; i < NQ * G * H * D; i++) CHECK_NEAR(o1[i], o2[i], TOL);
        rep[5] = 3;
        CHECK(attend_at(s, 0, NQ, rep, &p, NULL, o1) == TQ_ERR_INVALID);
        CHECK(tq_kv_attention_ref_at(s, 0, Q, G * H, NQ, rep, &p, o2, SIZE_MAX) == TQ_ERR_INVALID);
        rep[5] = -1;
        CHECK(attend_at(s, 0, NQ, rep, &p, NULL, o1) == TQ_ERR_INVALID);
        rep[5] = INT64_MIN;
        CHECK(tq_kv_attention_ref_at(s, 0, Q, G * H, NQ, rep, &p, o2, SIZE_MAX) == TQ_ERR_INVALID);
        CHECK(attend_at(s, 0, 2, NULL, &p, NULL, o1) == TQ_ERR_NULL);
        CHECK(tq_kv_attention_ref_at(s, 0, Q, G * H, 2, NULL, &p, o2, SIZE_MAX) == TQ_ERR_NULL);
        CHECK(attend_at(s, 0, 0, NULL, &p, NULL, o1) == TQ_OK);
        tq_kv_cache_free(s);
        tq_kv_cache_free(c);
    }
    /* A windowed layer: a position whose window reaches below the dropped range fails. */
    static const size_t win[NL] = {100, 0};
    tq_kv_cache *w = make_cache("q8_0", win);
    CHECK(w && feed(w, 0, 0, 1000, 1));
    size_t dr = tq_kv_cache_dropped_length(w, 0);
    CHECK(dr > 0);
    tq_attn_params p;
    tq_attn_params_init(&p, D);
    p.sliding_window = 100;
    int64_t pw[2] = {999, (int64_t)(dr + 99)};
    CHECK(attend_at(w, 0, 2, pw, &p, NULL, o1) == TQ_OK);
    CHECK(tq_kv_attention_ref_at(w, 0, Q, G * H, 2, pw, &p, o2, SIZE_MAX) == TQ_OK);
    for (size_t i = 0; i < 2 * G * H * D; i++) CHECK_NEAR(o1[i], o2[i], TOL);
    pw[1] = (int64_t)(dr + 98);
    CHECK(attend_at(w, 0, 2, pw, &p, NULL, o1) == TQ_ERR_INVALID);
    tq_kv_cache_free(w);
    tq_threadpool_free(pool);
}

int main(int argc, char **argv) {
    make_data();
    for (size_t i = 0; i < sizeof Q / sizeof *Q; i++) Q[i] = grand() * 0.15f;
    snap_a = malloc(SNAP_FLOATS * sizeof(float));
    snap_b = malloc(SNAP_FLOATS * sizeof(float));
    /* Fast vs reference within fp32 rounding: the integer scores off (test_attention.c). */
    tq_set_int8_scores(0);
    if (argc > 1 && !strcmp(argv[1], "threads")) {
        RUN_TEST(test_fork_threads);
    } else {
        RUN_TEST(test_fork_diverge);
        RUN_TEST(test_fork_truncate);
        RUN_TEST(test_fork_chain);
        RUN_TEST(test_fork_windowed);
        RUN_TEST(test_fork_errors);
        RUN_TEST(test_fork_config_owned);
        RUN_TEST(test_fork_threads);
        RUN_TEST(test_positions);
    }
    free(snap_a);
    free(snap_b);
    for (int s = 0; s < NS; s++) free(Kd[s]), free(Vd[s]);
    return test_report();
}

/*
 * Attention sinks (tq_kv_scheme.sink, doc/kvcache.md §2 "Attention sinks"): positions [0, N)
 * of a compressed layer are attended exactly. For every kernel set this CPU has: the fast path
 * against the reference path and the reference path against attention computed here from the
 * fp16 inputs (positions < N) and the decoded records of a cache without sinks (the rest), for
 * decode (1 query) and prefill (many), with and without a sliding window, with and without GQA;
 * tq_kv_cache_read; save / load bit-exact; fork; truncate below and above N; convert; memory;
 * windowed layers that drop their sinks.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache_internal.h"
#include "test_util.h"
#include "turboquant.h"

#define H 2
#define D 64
#define T 300 /* tokens: past the first page */

static float Kin[T * H * D], Vin[T * H * D];
static float Q[40 * 8 * D];

static void make_data(void) {
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < T * H * D; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        Kin[i] = (float)((int)(s % 512) - 256) / 128.0f + (i % D == 5 ? 8.0f : 0.0f);
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        Vin[i] = (float)((int)(s % 512) - 256) / 256.0f;
    }
    for (size_t i = 0; i < sizeof Q / sizeof *Q; i++) Q[i] = (float)((int)(i * 7919 % 97) - 48) / 24.0f;
}

/* A one-layer cache of `scheme` holding the first n tokens, appended in one call then
 * compressed as after decode; windows: that layer's window (0: none). */
static tq_kv_cache *build(const char *scheme, size_t n, size_t window) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, D, D);
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0) != TQ_OK) return NULL;
    cfg.layer_windows = window ? &window : NULL;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg) != TQ_OK) return NULL;
    for (size_t t = 0; t < n; t += 50) {
        size_t m = n - t < 50 ? n - t : 50;
        if (tq_kv_cache_append(c, 0, Kin + t * H * D, Vin + t * H * D, m) ||
            tq_kv_cache_compress(c, -1)) {
            tq_kv_cache_free(c);
            return NULL;
        }
    }
    return c;
}

static float f16r(float x) { return tq_f16_to_f32(tq_f32_to_f16(x)); }

/* Attention in double over K, V (tokens [0, len), (t, h, d)), queries at len − nq + i. */
static void attend(const float *K, const float *V, size_t len, size_t nq, int nqh, size_t win,
                   float *out) {
    int G = nqh / H;
    for (size_t i = 0; i < nq; i++) {
        size_t pos = len - nq + i, lo = win && pos + 1 > win ? pos + 1 - win : 0;
        for (int qh = 0; qh < nqh; qh++) {
            const float *q = Q + (i * (size_t)nqh + (size_t)qh) * D;
            double w[T], m = -INFINITY, l = 0, acc[D] = {0};
            for (size_t t = lo; t <= pos; t++) {
                double s = 0;
                for (int j = 0; j < D; j++) s += (double)q[j] * K[(t * H + (size_t)(qh / G)) * D + (size_t)j];
                w[t] = s / 8.0;
                if (w[t] > m) m = w[t];
            }
            for (size_t t = lo; t <= pos; t++) {
                double e = exp(w[t] - m);
                l += e;
                for (int j = 0; j < D; j++) acc[j] += e * V[(t * H + (size_t)(qh / G)) * D + (size_t)j];
            }
            for (int j = 0; j < D; j++) out[(i * (size_t)nqh + (size_t)qh) * D + (size_t)j] = (float)(acc[j] / l);
        }
    }
}

static double max_err(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i])));
    return e;
}

static float Kr[T * H * D], Vr[T * H * D], O1[40 * 8 * D], O2[40 * 8 * D], O3[40 * 8 * D];

/* One scheme with N sinks, on the kernel set in use. */
static void check_scheme(const char *base, int N, const char *kernels) {
    char with[96];
    snprintf(with, sizeof with, "%s:sink=%d:batch=16", base, N);
    char without[96];
    snprintf(without, sizeof without, "%s:sink=0:batch=16", base);
    tq_kv_cache *c = build(with, T, 0), *z = build(without, T, 0);
    CHECK_MSG(c && z, "%s", with);
    if (!c || !z) goto done;
    CHECK(tq_kv_cache_compressed_length(c, 0) == tq_kv_cache_compressed_length(z, 0) &&
          tq_kv_cache_compressed_length(c, 0) >= (size_t)N);
    /* Reads: the sinks exact, the rest as without sinks. */
    CHECK(tq_kv_cache_read(z, 0, 0, T, Kr, sizeof Kr / 4, Vr, sizeof Vr / 4) == TQ_OK);
    for (size_t i = 0; i < (size_t)N * H * D; i++) Kr[i] = f16r(Kin[i]), Vr[i] = f16r(Vin[i]);
    static float Kc[T * H * D], Vc[T * H * D];
    CHECK(tq_kv_cache_read(c, 0, 0, T, Kc, sizeof Kc / 4, Vc, sizeof Vc / 4) == TQ_OK);
    CHECK_MSG(!memcmp(Kc, Kr, sizeof Kr) && !memcmp(Vc, Vr, sizeof Vr), "%s read", with);
    /* Attention: fast == reference, reference == attention on (exact sinks, records). */
    for (int gqa = 0; gqa < 2; gqa++)
        for (size_t win = 0; win <= 200; win += 200)
            for (size_t nq = 1; nq <= 40; nq += 39) {
                int nqh = gqa ? 4 * H : H;
                tq_attn_params p;
                tq_attn_params_init(&p, D);
                p.sliding_window = (int)win;
                size_t wb = tq_kv_attention_workspace_size(c, 0, nqh, nq, 2);
                void *w = malloc(wb);
                tq_threadpool *pool = NULL;
                tq_threadpool_create(&pool, 2);
                size_t on = nq * (size_t)nqh * D;
                CHECK(w && tq_kv_attention(c, 0, Q, nqh, nq, &p, pool, w, wb, O1, on) == TQ_OK);
                CHECK(tq_kv_attention_ref(c, 0, Q, nqh, nq, &p, O2, on) == TQ_OK);
                attend(Kr, Vr, T, nq, nqh, win, O3);
                double e1 = max_err(O1, O2, on), e2 = max_err(O2, O3, on);
                /* The fast path's error without sinks bounds it (the integer decode kernels of
                 * the AVX-512 set round scores more than the float ones). */
                CHECK(w && tq_kv_attention(z, 0, Q, nqh, nq, &p, pool, w, wb, O1, on) == TQ_OK);
                CHECK(tq_kv_attention_ref(z, 0, Q, nqh, nq, &p, O2, on) == TQ_OK);
                double ez = max_err(O1, O2, on);
                CHECK_MSG(e1 < fmax(2e-4, 1.5 * ez) && e2 < 1e-5,
                          "%s %s gqa %d window %zu queries %zu: fast %g (%g without sinks) ref %g",
                          with, kernels, gqa, win, nq, e1, ez, e2);
                free(w);
                tq_threadpool_free(pool);
            }
    /* Memory: the sink store's N positions, on top of the same records. */
    tq_kv_memory mc, mz;
    CHECK(tq_kv_cache_memory(c, &mc, sizeof mc) == TQ_OK && tq_kv_cache_memory(z, &mz, sizeof mz) == TQ_OK);
    CHECK(mc.data_bytes == mz.data_bytes + (size_t)N * H * 2 * (D + D) && mc.tokens == mz.tokens);
done:
    tq_kv_cache_free(c);
    tq_kv_cache_free(z);
}

/* Bit-identical attention and reads of two caches (decode and prefill). */
static int same(const tq_kv_cache *a, const tq_kv_cache *b) {
    size_t n = tq_kv_cache_length(a, 0);
    if (n != tq_kv_cache_length(b, 0)) return 0;
    static float ka[T * H * D], kb[T * H * D];
    if (tq_kv_cache_read(a, 0, 0, n, ka, sizeof ka / 4, NULL, 0) ||
        tq_kv_cache_read(b, 0, 0, n, kb, sizeof kb / 4, NULL, 0) || memcmp(ka, kb, n * H * D * 4))
        return 0;
    for (size_t nq = 1; nq <= 40 && nq <= n; nq += 39) {
        tq_attn_params p;
        tq_attn_params_init(&p, D);
        size_t wb = tq_kv_attention_workspace_size(a, 0, H, nq, 1), on = nq * H * D;
        void *w = malloc(wb);
        int ok = w && !tq_kv_attention(a, 0, Q, H, nq, &p, NULL, w, wb, O1, on) &&
                 !tq_kv_attention(b, 0, Q, H, nq, &p, NULL, w, wb, O2, on) && !memcmp(O1, O2, on * 4);
        free(w);
        if (!ok) return 0;
    }
    return 1;
}

static void test_kernel_sets(void) {
    const tq_kernels_kind kinds[] = {TQ_KERNELS_REF, TQ_KERNELS_AVX2, TQ_KERNELS_AVX512};
    const char *names[] = {"ref", "avx2", "avx512"};
    const char *bases[] = {"turbo3", "turbo4", "turbo3.5", "q8_0", "q4_0", "k4v2"};
    for (int k = 0; k < 3; k++) {
        if (!tq_kernels_supported(kinds[k]) || tq_set_kernels(kinds[k]) != TQ_OK) continue;
        for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
            check_scheme(bases[b], 4, names[k]);
            if (b < 2) check_scheme(bases[b], 33, names[k]);
        }
    }
    tq_set_kernels(TQ_KERNELS_AUTO);
}

static void test_state(void) {
    const char *s = "turbo3:sink=4:batch=16";
    tq_kv_cache *c = build(s, T, 0), *f = NULL, *b = NULL;
    CHECK(c != NULL);
    if (!c) return;
    /* Save / load: bit-exact, re-saved to the same bytes. */
    size_t n = tq_kv_cache_save_bound(c), n2 = 0;
    uint8_t *img = malloc(n), *img2 = malloc(n);
    CHECK(img && tq_kv_cache_save_memory(c, img, n, NULL) == TQ_OK);
    CHECK(tq_kv_cache_load_memory(img, n, &b) == TQ_OK && b && same(c, b));
    CHECK(b && tq_kv_cache_save_memory(b, img2, n, &n2) == TQ_OK && n2 == n && !memcmp(img, img2, n));
    tq_kv_cache_config e;
    CHECK(tq_kv_cache_get_config(c, &e, sizeof e) == TQ_OK && e.scheme.sink == 4);
    tq_kv_cache *x = NULL;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e, &x) == TQ_OK);
    tq_kv_cache_free(x);
    x = NULL;
    e.scheme.sink = 5;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e, &x) == TQ_ERR_MISMATCH && !x);
    /* Fork: the same; then the source diverges and the fork keeps its sinks. */
    CHECK(tq_kv_cache_fork(c, &f) == TQ_OK && f && same(c, f));
    CHECK(tq_kv_cache_truncate(c, 2) == TQ_OK && tq_kv_cache_append(c, 0, Vin, Kin, 20) == TQ_OK &&
          tq_kv_cache_compress(c, -1) == TQ_OK);
    CHECK(f && same(f, b));
    /* Truncate below N: the two kept sinks exact; the new tokens [2, 4) become sinks. */
    float k[22 * H * D];
    CHECK(tq_kv_cache_compressed_length(c, 0) == 16);
    CHECK(tq_kv_cache_read(c, 0, 0, 22, k, sizeof k / 4, NULL, 0) == TQ_OK);
    int ok = 1;
    for (size_t i = 0; i < 4 * H * D; i++)
        ok &= k[i] == f16r(i < 2 * H * D ? Kin[i] : Vin[i - 2 * H * D]);
    CHECK_MSG(ok, "sinks after a truncate below N");
    /* Truncate above N: the sinks stay. */
    CHECK(tq_kv_cache_truncate(f, 100) == TQ_OK);
    CHECK(tq_kv_cache_read(f, 0, 0, 4, k, sizeof k / 4, NULL, 0) == TQ_OK);
    ok = 1;
    for (size_t i = 0; i < 4 * H * D; i++) ok &= k[i] == f16r(Kin[i]);
    CHECK_MSG(ok, "sinks after a truncate above N");
    /* Convert keeps the exact sinks (as the other scheme's sinks where it has them). */
    tq_kv_scheme t4;
    CHECK(tq_kv_scheme_parse("turbo4:sink=8", &t4, NULL, 0) == TQ_OK);
    x = NULL;
    CHECK(tq_kv_cache_convert(b, &t4, &x) == TQ_OK && x);
    CHECK(x && tq_kv_cache_read(x, 0, 0, 8, k, sizeof k / 4, NULL, 0) == TQ_OK);
    ok = 1;
    for (size_t i = 0; i < 4 * H * D; i++) ok &= k[i] == f16r(Kin[i]);
    CHECK_MSG(ok, "sinks after convert");
    tq_kv_cache_free(x);
    free(img);
    free(img2);
    tq_kv_cache_free(b);
    tq_kv_cache_free(f);
    tq_kv_cache_free(c);
}

/* sink=N changes nothing while nothing is compressed (prefill), and on an f16 layer. */
static void test_no_effect(void) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, D, D);
    tq_kv_cache *a = NULL, *b = NULL;
    CHECK(tq_kv_scheme_parse("turbo3:sink=4", &cfg.scheme, NULL, 0) == TQ_OK &&
          tq_kv_cache_create(&a, &cfg) == TQ_OK);
    CHECK(tq_kv_scheme_parse("turbo3:sink=0", &cfg.scheme, NULL, 0) == TQ_OK &&
          tq_kv_cache_create(&b, &cfg) == TQ_OK);
    CHECK(a && b && !tq_kv_cache_append(a, 0, Kin, Vin, 100) && !tq_kv_cache_append(b, 0, Kin, Vin, 100));
    CHECK(a && b && tq_kv_cache_compressed_length(a, 0) == 0 && same(a, b));
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
    a = build("f16:sink=4", 100, 0);
    b = build("f16", 100, 0);
    tq_kv_memory ma, mb;
    CHECK(a && b && same(a, b) && !tq_kv_cache_memory(a, &ma, sizeof ma) &&
          !tq_kv_cache_memory(b, &mb, sizeof mb) && ma.data_bytes == mb.data_bytes);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
    /* The scheme text round-trips; out of range is refused. */
    tq_kv_scheme s;
    char txt[256];
    CHECK(tq_kv_scheme_parse("turbo3:sink=1024", &s, NULL, 0) == TQ_OK && s.sink == 1024);
    CHECK(tq_kv_scheme_format(&s, txt, sizeof txt) == TQ_OK);
    tq_kv_scheme s2;
    CHECK(tq_kv_scheme_parse(txt, &s2, NULL, 0) == TQ_OK && s2.sink == 1024);
    CHECK(tq_kv_scheme_parse("turbo3:sink=1025", &s, NULL, 0) == TQ_ERR_SCHEME);
    CHECK(tq_kv_scheme_parse("turbo3:sink=-1", &s, NULL, 0) == TQ_ERR_SCHEME);
    /* The parser's default: 4 sinks with a TurboQuant side, none for f16 and block formats;
     * the default is not written, any other count is, and both round-trip. */
    static const struct { const char *text; int sink; } defaults[] = {
        {"turbo3", 4}, {"turbo4", 4}, {"turbo0v4", 4}, {"kq8_0v3", 4}, {"f16", 0}, {"q8_0", 0},
        {"q4_0r", 0}, {"q8_0:first=1:last=1", 4}, {"turbo3:sink=0", 0}, {"q4_0:sink=4", 4}};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        CHECK_MSG(tq_kv_scheme_parse(defaults[i].text, &s, NULL, 0) == TQ_OK &&
                      s.sink == defaults[i].sink,
                  "%s: sink %d", defaults[i].text, s.sink);
        CHECK(tq_kv_scheme_format(&s, txt, sizeof txt) == TQ_OK);
        int is_default = !strstr(defaults[i].text, "sink=");
        CHECK_MSG((strstr(txt, "sink") == NULL) == is_default, "%s -> %s", defaults[i].text, txt);
        CHECK(tq_kv_scheme_parse(txt, &s2, NULL, 0) == TQ_OK && s2.sink == defaults[i].sink);
    }
    tq_kv_scheme_defaults(&s);
    CHECK(s.sink == 0);
}

/* A windowed layer: once its first page is dropped the sinks are gone (not counted); attention
 * fast == reference throughout. */
static void test_windowed(void) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, D, D);
    size_t win = 16;
    cfg.layer_windows = &win;
    tq_kv_cache *c = NULL, *z = NULL;
    CHECK(tq_kv_scheme_parse("turbo3:sink=4:batch=16", &cfg.scheme, NULL, 0) == TQ_OK &&
          tq_kv_cache_create(&c, &cfg) == TQ_OK);
    CHECK(tq_kv_scheme_parse("turbo3:sink=0:batch=16", &cfg.scheme, NULL, 0) == TQ_OK &&
          tq_kv_cache_create(&z, &cfg) == TQ_OK);
    if (!c || !z) return;
    tq_attn_params p;
    tq_attn_params_init(&p, D);
    p.sliding_window = (int)win;
    size_t wb = tq_kv_attention_workspace_size(c, 0, H, 1, 1);
    void *w = malloc(wb);
    int ok = w != NULL;
    size_t t = 0;
    double e = 0, ez = 0;
    /* Float scores: the int8 query's rounding moves a 16-key softmax by up to ~1e-2, more than
     * the sinks' own difference (tested against the reference with and without int8 scores in
     * test_attention). */
    const int int8 = tq_int8_scores();
    tq_set_int8_scores(0);
    for (; ok && t < 2 * T; t++) { /* past window + slack + a page: the first page dropped */
        /* The fast path's error on the twin without sinks bounds it. */
        const float *kt = Kin + t % T * H * D, *vt = Vin + t % T * H * D;
        ok = !tq_kv_cache_append(c, 0, kt, vt, 1) && !tq_kv_cache_append(z, 0, kt, vt, 1) &&
             !tq_kv_attention(z, 0, Q, H, 1, &p, NULL, w, wb, O1, H * D) &&
             !tq_kv_attention_ref(z, 0, Q, H, 1, &p, O2, H * D);
        ez = max_err(O1, O2, H * D);
        ok = ok && !tq_kv_attention(c, 0, Q, H, 1, &p, NULL, w, wb, O1, H * D) &&
             !tq_kv_attention_ref(c, 0, Q, H, 1, &p, O2, H * D);
        e = max_err(O1, O2, H * D);
        ok = ok && e < 2e-4 + 2.0 * ez; /* a 16-key softmax: the float path differs by ~1e-3 */
    }
    tq_set_int8_scores(int8);
    CHECK_MSG(ok, "windowed decode with sinks, token %zu: %g (%g without)", t, e, ez);
    CHECK(tq_kv_cache_dropped_length(c, 0) == 256); /* the sinks are gone with their page */
    tq_kv_memory m;
    tq_kv_memory mz;
    CHECK(tq_kv_cache_memory(c, &m, sizeof m) == TQ_OK && tq_kv_cache_memory(z, &mz, sizeof mz) == TQ_OK &&
          m.data_bytes == mz.data_bytes); /* dropped sinks are not counted */
    free(w);
    tq_kv_cache_free(c);
    tq_kv_cache_free(z);
}

int main(void) {
    make_data();
    RUN_TEST(test_kernel_sets);
    RUN_TEST(test_state);
    RUN_TEST(test_no_effect);
    RUN_TEST(test_windowed);
    return test_report();
}

/*
 * The key transform on its own (include/turboquant.h, "keys"; doc/kvcache.md §2): fitted from
 * the same keys and queries as a KV cache layer, it is the cache's transform byte for byte
 * (serialized state, and the codes of the codec it configures are the cache's records);
 * invert(keys(k)) ≈ k; ⟨q', keys(k)⟩ + offset = ⟨q, k⟩ within float rounding; serialize →
 * deserialize → serialize is exact; bad arguments give their error codes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache_internal.h"
#include "test_api.h"
#include "test_util.h"
#include "turboquant.h"

enum { H = 2, D = 64, NQH = 4, N = 300 };

/* Values in [−2, 2) (an LCG from seed) with a per-channel bias and loudness, so that mean,
 * scale and split all have something to do. */
static void fill(float *x, size_t n, uint32_t seed) {
    uint32_t r = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        float u = (float)(r >> 20) / 1024.0f - 2.0f;
        int ch = (int)(i % D);
        x[i] = u * (ch % 5 == 0 ? 4.0f : 1.0f) + (ch % 7 == 0 ? 3.0f : 0.0f);
    }
}

/* The cache of `scheme` (1 layer) after observe_queries + a prefill of N keys + compress, and
 * the same keys rounded through fp16 (what the cache fits from) into k16. */
static tq_kv_cache *cache_of(const char *scheme, int pairs, const float *k, const float *q, float *k16) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, D, D);
    cfg.key_rope_pairs = pairs;
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0)) return NULL;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg)) return NULL;
    tq_status st = tq_kv_cache_observe_queries(c, 0, q, NQH, N);
    if (!st) st = tq_kv_cache_append(c, 0, k, k, N);
    if (!st) st = tq_kv_cache_compress(c, 0);
    if (st || tq_kv_cache_compressed_length(c, 0) == 0) {
        tq_kv_cache_free(c);
        return NULL;
    }
    for (size_t i = 0; i < (size_t)N * H * D; i++) k16[i] = tq_f16_to_f32(tq_f32_to_f16(k[i]));
    return c;
}

static uint8_t *serialize(const tq_key_transform *kt, size_t *n) {
    *n = tq_key_transform_serialized_bytes(kt);
    uint8_t *b = malloc(*n ? *n : 1);
    size_t w = 0;
    if (tq_key_transform_serialize(kt, b, *n, &w) != TQ_OK || w != *n) {
        free(b);
        return NULL;
    }
    return b;
}

/* The standalone fit equals the cache's transform: its state, and the records of the codec it
 * configures for the transformed keys. */
static void test_same_as_cache(void) {
    static const char *schemes[] = {"turbo3.5", "turbo3", "turbo3:trellis=0", "turbo2.5:mean=0",
                                    "turbo4:kscale=0", "k3.5v3:ksplit=0"};
    float *k = malloc(sizeof(float) * N * H * D), *k16 = malloc(sizeof(float) * N * H * D);
    float *q = malloc(sizeof(float) * N * NQH * D), *st = malloc(sizeof(float) * N * H * D);
    fill(k, (size_t)N * H * D, 1u);
    fill(q, (size_t)N * NQH * D, 2u);
    for (size_t run = 0; run < 3 * sizeof schemes / sizeof *schemes; run++) {
        const char *s = schemes[run / 3];
        const int pairs = (int)(run % 3); /* NONE, ADJACENT, HALVES */
        tq_kv_cache *c = cache_of(s, pairs, k, q, k16);
        CHECK_MSG(c != NULL, "%s", s);
        if (!c) continue;
        tq_kv_layer_scheme ls = test_layer_scheme(c, 0);
        tq_key_transform_config cfg;
        tq_key_transform_config_init(&cfg, H, D, ls.key_bits);
        cfg.mean = ls.key_mean;
        cfg.scale = ls.key_scale;
        cfg.split = ls.key_split;
        cfg.rope_pairs = pairs;
        tq_key_transform *kt = NULL;
        CHECK(tq_key_transform_fit(&kt, &cfg, k16, N, q, NQH, N) == TQ_OK && kt);
        const tq_key_transform *ck = c->layers[0].kt;
        size_t na = 0, nb = 0;
        uint8_t *a = serialize(kt, &na), *b = serialize(ck, &nb);
        CHECK_MSG(a && b && na == nb && memcmp(a, b, na) == 0, "%s: the state differs", s);
        free(a);
        free(b);
        /* The codec for the transformed keys: its records are the cache's. */
        tq_codec_config cc;
        tq_codec_config_init(&cc, D, ls.key_bits, TQ_VARIANT_MSE);
        cc.seed = test_cache_config(c).scheme.seed;
        cc.trellis = test_cache_config(c).scheme.trellis; /* the cache's codes (MSE keys) */
        CHECK(tq_key_transform_codec_config(kt, &cc) == TQ_OK);
        CHECK_MSG((cc.split == TQ_SPLIT_BLOCK) == (ls.key_split != 0), "%s", s);
        tq_codec *codec = NULL;
        CHECK(tq_codec_create(&codec, &cc) == TQ_OK);
        size_t rb = tq_codec_bytes_per_vector(codec);
        CHECK(rb == c->layers[0].k.rec_bytes);
        CHECK(tq_key_transform_keys(kt, k16, N, st) == TQ_OK);
        uint8_t *codes = malloc(rb * N * H);
        CHECK(tq_codec_encode(codec, st, (size_t)N * H, codes, rb * N * H) == TQ_OK);
        size_t n_comp = tq_kv_cache_compressed_length(c, 0), bad = 0;
        for (size_t t = 0; t < n_comp; t++)
            for (int h = 0; h < H; h++)
                bad += memcmp(codes + (t * H + (size_t)h) * rb, tq_kv_krec(c, &c->layers[0], t, h), rb) != 0;
        CHECK_MSG(bad == 0, "%s: %zu of %zu records differ", s, bad, n_comp * H);
        free(codes);
        tq_codec_free(codec);
        tq_key_transform_free(kt);
        tq_kv_cache_free(c);
    }
    free(k);
    free(k16);
    free(q);
    free(st);
}

/* invert(keys(k)) ≈ k, and ⟨q', keys(k)⟩ + offset = ⟨q, k⟩, within float rounding. */
static void test_math(void) {
    float *k = malloc(sizeof(float) * N * H * D), *q = malloc(sizeof(float) * N * NQH * D);
    float *st = malloc(sizeof(float) * N * H * D), *back = malloc(sizeof(float) * N * H * D);
    float *qt = malloc(sizeof(float) * N * NQH * D), *off = malloc(sizeof(float) * N * NQH);
    fill(k, (size_t)N * H * D, 5u);
    fill(q, (size_t)N * NQH * D, 6u);
    tq_key_transform_config cfg;
    tq_key_transform_config_init(&cfg, H, D, 2.5f);
    tq_key_transform *kt = NULL;
    CHECK(tq_key_transform_fit(&kt, &cfg, k, N, q, NQH, N) == TQ_OK);
    CHECK(tq_key_transform_keys(kt, k, N, st) == TQ_OK);
    CHECK(tq_key_transform_invert(kt, st, N, back) == TQ_OK);
    double e_inv = 0.0;
    for (size_t i = 0; i < (size_t)N * H * D; i++)
        e_inv = fmax(e_inv, fabs((double)back[i] - k[i]) / (1.0 + fabs((double)k[i])));
    CHECK_MSG(e_inv < 4e-6, "invert(keys(k)) off by %g", e_inv);
    CHECK(tq_key_transform_queries(kt, q, NQH, 8, qt, off) == TQ_OK);
    double e_dot = 0.0;
    for (int i = 0; i < 8; i++)
        for (int qh = 0; qh < NQH; qh++) {
            int h = qh / (NQH / H);
            const float *qq = q + ((size_t)i * NQH + (size_t)qh) * D, *qp = qt + ((size_t)i * NQH + (size_t)qh) * D;
            for (size_t t = 0; t < N; t += 7) {
                const float *kk = k + (t * H + (size_t)h) * D, *ks = st + (t * H + (size_t)h) * D;
                double want = 0.0, got = off[(size_t)i * NQH + (size_t)qh], mag = 0.0;
                for (int j = 0; j < D; j++) {
                    want += (double)qq[j] * kk[j];
                    got += (double)qp[j] * ks[j];
                    mag += fabs((double)qq[j] * kk[j]);
                }
                e_dot = fmax(e_dot, fabs(got - want) / (1.0 + mag));
            }
        }
    CHECK_MSG(e_dot < 1e-5, "⟨q', keys(k)⟩ + offset off by %g (relative)", e_dot);
    /* The split is in effect at 2.5 bits: the codec config says so. */
    tq_codec_config cc;
    tq_codec_config_init(&cc, D, 2.5f, TQ_VARIANT_MSE);
    CHECK(tq_key_transform_codec_config(kt, &cc) == TQ_OK && cc.split == TQ_SPLIT_BLOCK &&
          cc.block_dim == D / 2 && cc.block_bits == 3);
    tq_key_transform_free(kt);
    free(k), free(q), free(st), free(back), free(qt), free(off);
}

/* serialize → deserialize → serialize gives the same bytes, and the copy transforms the same. */
static void test_serialize(void) {
    float *k = malloc(sizeof(float) * N * H * D), *q = malloc(sizeof(float) * N * NQH * D);
    float *s1 = malloc(sizeof(float) * N * H * D), *s2 = malloc(sizeof(float) * N * H * D);
    fill(k, (size_t)N * H * D, 9u);
    fill(q, (size_t)N * NQH * D, 10u);
    float bits[] = {3.5f, 3.0f};
    for (int m = 0; m < 2; m++) {
        tq_key_transform_config cfg;
        tq_key_transform_config_init(&cfg, H, D, bits[m]);
        cfg.mean = m == 0;
        tq_key_transform *a = NULL, *b = NULL;
        CHECK(tq_key_transform_fit(&a, &cfg, k, N, q, NQH, m == 0 ? N : 0) == TQ_OK);
        size_t n = 0, n2 = 0;
        uint8_t *img = serialize(a, &n);
        CHECK(img && tq_key_transform_deserialize(img, n, &b) == TQ_OK && b);
        uint8_t *img2 = serialize(b, &n2);
        CHECK(img2 && n2 == n && memcmp(img, img2, n) == 0);
        CHECK(tq_key_transform_keys(a, k, N, s1) == TQ_OK && tq_key_transform_keys(b, k, N, s2) == TQ_OK);
        CHECK(memcmp(s1, s2, sizeof(float) * N * H * D) == 0);
        /* Every truncation and a trailing byte are TQ_ERR_FORMAT; a zero scale is TQ_ERR_CORRUPT. */
        tq_key_transform *x = NULL;
        int bad = 0;
        for (size_t len = 0; img && len < n; len++) bad += tq_key_transform_deserialize(img, len, &x) != TQ_ERR_FORMAT || x;
        CHECK(bad == 0);
        uint8_t *big = calloc(n + 1, 1);
        memcpy(big, img, n);
        CHECK(tq_key_transform_deserialize(big, n + 1, &x) == TQ_ERR_FORMAT && !x);
        size_t scale_at = 24 + (cfg.mean ? 4 * H * D : 0) + 8 + 8 * H * D;
        memset(big + scale_at + 4 * 5, 0, 4);
        CHECK(tq_key_transform_deserialize(big, n, &x) == TQ_ERR_CORRUPT && !x);
        memcpy(big, img, n);
        big[0] = 'X';
        CHECK(tq_key_transform_deserialize(big, n, &x) == TQ_ERR_FORMAT && !x);
        free(big);
        free(img);
        free(img2);
        tq_key_transform_free(a);
        tq_key_transform_free(b);
    }
    free(k), free(q), free(s1), free(s2);
}

static void test_errors(void) {
    float k[H * D], q[NQH * D], out[NQH * D], off[NQH];
    fill(k, H * D, 3u);
    fill(q, NQH * D, 4u);
    tq_key_transform_config cfg;
    tq_key_transform_config_init(&cfg, H, D, 3.5f);
    tq_key_transform *kt = NULL;
    CHECK(tq_key_transform_fit(NULL, &cfg, k, 1, q, NQH, 1) == TQ_ERR_NULL);
    CHECK(tq_key_transform_fit(&kt, NULL, k, 1, q, NQH, 1) == TQ_ERR_NULL && !kt);
    CHECK(tq_key_transform_fit(&kt, &cfg, NULL, 1, q, NQH, 1) == TQ_ERR_NULL);
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, NULL, NQH, 1) == TQ_ERR_NULL);
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, q, 3, 1) == TQ_ERR_INVALID);
    tq_key_transform_config bad = cfg;
    bad.head_dim = 1;
    CHECK(tq_key_transform_fit(&kt, &bad, k, 1, q, NQH, 1) == TQ_ERR_DIM);
    bad = cfg;
    bad.n_heads = 0;
    CHECK(tq_key_transform_fit(&kt, &bad, k, 1, q, NQH, 1) == TQ_ERR_INVALID);
    bad = cfg;
    bad.bits = 9.0f;
    CHECK(tq_key_transform_fit(&kt, &bad, k, 1, q, NQH, 1) == TQ_ERR_BITS);
    k[5] = NAN;
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, q, NQH, 1) == TQ_ERR_NONFINITE && !kt);
    k[5] = 0.5f;
    q[7] = INFINITY;
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, q, NQH, 1) == TQ_ERR_NONFINITE && !kt);
    q[7] = 0.5f;
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, q, NQH, 1) == TQ_OK && kt);
    CHECK(tq_key_transform_keys(NULL, k, 1, out) == TQ_ERR_NULL);
    CHECK(tq_key_transform_keys(kt, k, 1, NULL) == TQ_ERR_NULL);
    CHECK(tq_key_transform_invert(kt, NULL, 1, out) == TQ_ERR_NULL);
    CHECK(tq_key_transform_queries(kt, q, 3, 1, out, off) == TQ_ERR_INVALID);
    CHECK(tq_key_transform_queries(kt, NULL, NQH, 1, out, off) == TQ_ERR_NULL);
    q[0] = NAN;
    CHECK(tq_key_transform_queries(kt, q, NQH, 1, out, off) == TQ_ERR_NONFINITE);
    k[0] = NAN;
    CHECK(tq_key_transform_keys(kt, k, 1, out) == TQ_ERR_NONFINITE);
    tq_codec_config cc;
    tq_codec_config_init(&cc, D + 2, 3.5f, TQ_VARIANT_MSE);
    CHECK(tq_key_transform_codec_config(kt, &cc) == TQ_ERR_DIM);
    tq_codec_config_init(&cc, D, 3.5f, TQ_VARIANT_PROD);
    CHECK(tq_key_transform_codec_config(kt, &cc) == TQ_ERR_INVALID);
    CHECK(tq_key_transform_codec_config(NULL, &cc) == TQ_ERR_NULL);
    uint8_t small[8];
    size_t w = 7;
    CHECK(tq_key_transform_serialize(kt, small, sizeof small, &w) == TQ_ERR_CAPACITY && w == 0);
    CHECK(tq_key_transform_serialize(NULL, small, sizeof small, &w) == TQ_ERR_NULL);
    CHECK(tq_key_transform_serialized_bytes(NULL) == 0);
    tq_key_transform_free(kt);
    tq_key_transform_free(NULL);
    CHECK(tq_key_transform_deserialize(NULL, 8, &kt) == TQ_ERR_NULL && !kt);
    CHECK(tq_key_transform_deserialize(small, sizeof small, NULL) == TQ_ERR_NULL);
}

/* Σ over late queries and keys of (⟨q, k⟩ − ⟨q, k̂⟩)², k̂ the key through the transform and a
 * 3-bit code (the split's codec when there is one), over tokens [t0, t1). */
static double late_error(const tq_key_transform *kt, const float *k, const float *q, size_t t0, size_t t1) {
    tq_codec_config cc;
    tq_codec_config_init(&cc, D, 3.0f, TQ_VARIANT_MSE);
    tq_codec *codec = NULL;
    if (tq_key_transform_codec_config(kt, &cc) || tq_codec_create(&codec, &cc)) return -1.0;
    size_t rb = tq_codec_bytes_per_vector(codec), n = t1 - t0;
    float *st = malloc(sizeof(float) * n * D), *back = malloc(sizeof(float) * n * D);
    uint8_t *codes = malloc(rb * n);
    double err = -1.0;
    if (tq_key_transform_keys(kt, k + t0 * D, n, st) == TQ_OK && tq_codec_encode(codec, st, n, codes, rb * n) == TQ_OK &&
        tq_codec_decode(codec, codes, n, st, n * D) == TQ_OK && tq_key_transform_invert(kt, st, n, back) == TQ_OK) {
        err = 0.0;
        for (size_t t = 0; t < n; t++)
            for (size_t i = t0; i < t1; i += 5) {
                double e = 0.0;
                for (int j = 0; j < D; j++) e += (double)q[i * D + (size_t)j] * (k[(t0 + t) * D + (size_t)j] - back[t * D + (size_t)j]);
                err += e * e;
            }
    }
    free(st), free(back), free(codes);
    tq_codec_free(codec);
    return err;
}

/* RoPE pairs (doc/kvcache.md §2). Each channel's statistics move halfway to its pair's: the
 * two scales of a pair are closer than per channel (Σ |log ratio| well under the per-channel
 * one);
 * serialize keeps the pairing (test_same_as_cache: the cache fits the same state). And the
 * point of it: keys whose loud channel a slow rotary pair turns into its partner after the
 * positions the transform was fitted on (per-channel statistics then give the partner a large
 * scale) keep their 3-bit error far better with the pooled statistics. */
static void test_rope_pairs(void) {
    float *k = malloc(sizeof(float) * N * H * D), *q = malloc(sizeof(float) * N * NQH * D);
    fill(k, (size_t)N * H * D, 21u);
    fill(q, (size_t)N * NQH * D, 22u);
    for (int pairs = TQ_ROPE_PAIRS_ADJACENT; pairs <= TQ_ROPE_PAIRS_HALVES; pairs++) {
        tq_key_transform_config cfg;
        tq_key_transform_config_init(&cfg, H, D, 3.0f); /* no split: its block factors apart */
        cfg.rope_pairs = pairs;
        tq_key_transform *kt = NULL, *none = NULL, *b = NULL;
        CHECK(tq_key_transform_fit(&kt, &cfg, k, N, q, NQH, N) == TQ_OK && kt);
        cfg.rope_pairs = TQ_ROPE_PAIRS_NONE;
        CHECK(tq_key_transform_fit(&none, &cfg, k, N, q, NQH, N) == TQ_OK && none);
        float sp[H * D], sn[H * D];
        CHECK(tq_key_transform_get_scale(kt, sp, H * D) == TQ_OK && tq_key_transform_get_scale(none, sn, H * D) == TQ_OK);
        double rp = 0.0, rn = 0.0;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                int i0 = pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * i : i, i1 = pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * i + 1 : i + D / 2;
                rp += fabs(log((double)sp[h * D + i0] / sp[h * D + i1]));
                rn += fabs(log((double)sn[h * D + i0] / sn[h * D + i1]));
            }
        CHECK_MSG(rn > 1.0 && rp < 0.6 * rn, "pairs %d: Σ |log| of the pairs' scale ratios %g, per channel %g", pairs, rp, rn);
        size_t n = 0, n2 = 0;
        uint8_t *img = serialize(kt, &n);
        CHECK(img && tq_key_transform_deserialize(img, n, &b) == TQ_OK && b);
        uint8_t *img2 = b ? serialize(b, &n2) : NULL;
        CHECK(img2 && n2 == n && memcmp(img, img2, n) == 0 && img[21] >> 2 == pairs);
        tq_key_transform *x = NULL;
        if (img) {
            img[21] |= 3 << 2; /* no such pairing */
            CHECK(tq_key_transform_deserialize(img, n, &x) == TQ_ERR_FORMAT && !x);
        }
        free(img), free(img2);
        tq_key_transform_free(kt), tq_key_transform_free(none), tq_key_transform_free(b);
    }
    /* An odd head dim takes no pairs; an older caller's config (no rope_pairs) none. */
    tq_key_transform_config cfg;
    tq_key_transform_config_init(&cfg, 1, 15, 3.0f);
    cfg.rope_pairs = TQ_ROPE_PAIRS_ADJACENT;
    tq_key_transform *kt = NULL;
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, NULL, 1, 0) == TQ_ERR_INVALID && !kt);
    tq_key_transform_config_init(&cfg, 1, D, 3.0f);
    cfg.rope_pairs = TQ_ROPE_PAIRS_HALVES;
    cfg.struct_size = offsetof(tq_key_transform_config, rope_pairs);
    CHECK(tq_key_transform_fit(&kt, &cfg, k, 1, NULL, 1, 0) == TQ_OK && kt);
    size_t n = 0;
    uint8_t *img = kt ? serialize(kt, &n) : NULL;
    CHECK(img && img[21] >> 2 == TQ_ROPE_PAIRS_NONE);
    free(img);
    tq_key_transform_free(kt);
    free(k), free(q);

    /* One head, 2048 tokens: noise in every channel (fill), and a component of 40 in channel
     * 0 that RoPE pair (0, 1) turns by π/2 over 1536 positions (ADJACENT); queries carry pair
     * 0 6× louder. Fitted on the first 128 tokens (the pair has turned 0.13 rad: per channel,
     * channel 1 looks quiet and gets a large scale), scored on tokens 1536 … 2047. */
    enum { T = 2048, FIT = 128 };
    float *kk = malloc(sizeof(float) * T * D), *qq = malloc(sizeof(float) * T * D);
    fill(kk, (size_t)T * D, 31u);
    fill(qq, (size_t)T * D, 32u);
    for (size_t t = 0; t < T; t++) {
        double a = 1.5707963 * (double)t / 1536.0, c = cos(a), sn = sin(a);
        float x0 = kk[t * D] + 40.0f, x1 = kk[t * D + 1];
        kk[t * D] = (float)(c * x0 - sn * x1);
        kk[t * D + 1] = (float)(sn * x0 + c * x1);
        qq[t * D] *= 6.0f;
        qq[t * D + 1] *= 6.0f;
    }
    double err[2];
    for (int m = 0; m < 2; m++) {
        tq_key_transform_config_init(&cfg, 1, D, 3.0f);
        cfg.rope_pairs = m ? TQ_ROPE_PAIRS_ADJACENT : TQ_ROPE_PAIRS_NONE;
        cfg.mean = 0; /* the scale alone (a mean of the first keys would absorb the loud channel) */
        kt = NULL;
        CHECK(tq_key_transform_fit(&kt, &cfg, kk, FIT, qq, 1, FIT) == TQ_OK && kt);
        err[m] = kt ? late_error(kt, kk, qq, T - 512, T) : -1.0;
        tq_key_transform_free(kt);
    }
    printf("  late 3-bit score error: per channel %.4g, RoPE pairs %.4g (%.2fx)\n", err[0], err[1], err[0] / err[1]);
    CHECK_MSG(err[0] > 0.0 && err[1] > 0.0 && err[1] < 0.7 * err[0], "per channel %g, pairs %g", err[0], err[1]);
    free(kk), free(qq);
}

/* Fast pairs (internal calls; doc/kvcache.md §2, "Fast pairs"): keys whose pre-RoPE mean sits
 * on pairs 1 and 5 (turning 64 and 32 rad per 64 positions: too fast for a block-centred
 * mean) and 20 (slow) get fast pairs 1 and 5, whose mean is then subtracted at each key's
 * own angle; a pair with an offset under the gain threshold is not taken; lists no fit makes
 * are refused. */
typedef struct {
    const float *k;
} rows_ctx;
static void rows_of(const void *ctx, size_t t, int h, float *out) {
    memcpy(out, ((const rows_ctx *)ctx)->k + (t * H + (size_t)h) * D, sizeof(float) * D);
}
static void test_fast_pairs(void) {
    enum { T = 512 };
    float freqs[D / 2];
    for (int j = 0; j < D / 2; j++) freqs[j] = (float)pow(10000.0, -2.0 * j / D);
    float *k = malloc(sizeof(float) * T * H * D);
    uint32_t r = 99u;
    const double off[D / 2] = {[1] = 6.0, [5] = 4.0, [9] = 0.05, [20] = 5.0};
    for (size_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < D / 2; j++) {
                double x[2];
                for (int e = 0; e < 2; e++) {
                    r = r * 1664525u + 1013904223u;
                    x[e] = (double)(r >> 8) / 16777216.0 * 2.0 - 1.0 + (e ? -0.5 : 1.0) * off[j];
                }
                double a = freqs[j] * (double)t;
                float *o = k + (t * H + (size_t)h) * D + 2 * j;
                o[0] = (float)(x[0] * cos(a) - x[1] * sin(a));
                o[1] = (float)(x[0] * sin(a) + x[1] * cos(a));
            }
    rows_ctx rc = {k};
    for (int lim = 0; lim < 2; lim++) {
        tq_key_transform *kt = NULL;
        CHECK(tq_key_transform_create(&kt, H, D, 1, 1, 0, 0, TQ_ROPE_PAIRS_ADJACENT, freqs) == TQ_OK && kt);
        if (!kt) continue;
        uint16_t fp[TQ_KEY_MEAN_FAST];
        CHECK(tq_key_transform_n_fast(kt) == 0 && !tq_key_transform_fast_ok(kt, 1, (const uint16_t[]){1}));
        tq_key_transform_test_fast_max(lim ? -1 : 0);
        tq_key_transform_fit_rows(kt, T, T, rows_of, &rc, 0);
        tq_key_transform_test_fast_max(-1);
        int nf = tq_key_transform_fast_pairs(kt, fp);
        if (!lim) {
            CHECK(nf == 0);
        } else {
            CHECK_MSG(nf == 2 && fp[0] == 1 && fp[1] == 5, "%d fast pairs, first %d", nf, nf ? fp[0] : -1);
            /* the mean at position p on pair 5: the planted offset turned by p's angle */
            float buf[D];
            size_t p = 1000;
            const float *m = tq_key_transform_mean_at(kt, 1, p, buf);
            double a = freqs[5] * (double)p, want0 = 4.0 * cos(a) + 2.0 * sin(a), want1 = 4.0 * sin(a) - 2.0 * cos(a);
            CHECK_MSG(m && fabs(m[10] - want0) < 0.1 && fabs(m[11] - want1) < 0.1, "pair 5 at %zu: %g %g, want %g %g",
                      p, m ? m[10] : 0.0, m ? m[11] : 0.0, want0, want1);
            /* lists no fit makes: out of order, twice, a slow pair, past the pairs, too many */
            CHECK(tq_key_transform_fast_ok(kt, 2, (const uint16_t[]){1, 5}));
            CHECK(!tq_key_transform_fast_ok(kt, 2, (const uint16_t[]){5, 1}));
            CHECK(!tq_key_transform_fast_ok(kt, 2, (const uint16_t[]){5, 5}));
            CHECK(!tq_key_transform_fast_ok(kt, 1, (const uint16_t[]){20}));
            CHECK(!tq_key_transform_fast_ok(kt, 1, (const uint16_t[]){32}));
            CHECK(!tq_key_transform_fast_ok(kt, TQ_KEY_MEAN_FAST + 1, (const uint16_t[TQ_KEY_MEAN_FAST + 1]){0}));
            /* a copy keeps them; a reset drops them */
            tq_key_transform *cp = NULL;
            CHECK(tq_key_transform_create_like(&cp, kt) == TQ_OK && cp);
            if (cp) {
                tq_key_transform_copy(cp, kt);
                uint16_t fq[TQ_KEY_MEAN_FAST];
                CHECK(tq_key_transform_fast_pairs(cp, fq) == 2 && fq[0] == 1 && fq[1] == 5);
                tq_key_transform_reset(cp);
                CHECK(tq_key_transform_n_fast(cp) == 0);
            }
            tq_key_transform_free(cp);
        }
        tq_key_transform_free(kt);
    }
    free(k);
}

int main(void) {
    RUN_TEST(test_same_as_cache);
    RUN_TEST(test_rope_pairs);
    RUN_TEST(test_math);
    RUN_TEST(test_serialize);
    RUN_TEST(test_errors);
    RUN_TEST(test_fast_pairs);
    return test_report();
}

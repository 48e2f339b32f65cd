/* The ABI promises of doc/api.md: the version macros agree with the library; the public structs
 * keep their sizes and offsets (pinned below for LP64 hosts); sized structs from an older minor
 * version (smaller struct_size, newest field missing) are accepted with defaults, larger ones
 * are accepted only when the bytes this version does not know are zero; getters write no more
 * than the caller's size. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "turboquant.h"

static void test_version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TQ_VERSION_MAJOR, TQ_VERSION_MINOR, TQ_VERSION_PATCH);
    CHECK(strcmp(want, TQ_VERSION_STRING) == 0);
    CHECK(strcmp(tq_version_string(), TQ_VERSION_STRING) == 0);
    CHECK(tq_version_number() == TQ_VERSION_NUMBER);
    CHECK(TQ_VERSION_NUMBER ==
          TQ_VERSION_MAJOR * 10000 + TQ_VERSION_MINOR * 100 + TQ_VERSION_PATCH);
    /* 0.2: the layered headers and sized structs (doc/api.md, "Versions"). */
    CHECK(TQ_VERSION_MAJOR == 0 && TQ_VERSION_MINOR >= 2);
}

/* ---- pinned layouts ---- */

typedef struct pin {
    const char *name;
    size_t got, want;
} pin;
#define SZ(T, w) {"sizeof(" #T ")", sizeof(T), w}
#define OF(T, f, w) {#T "." #f, offsetof(T, f), w}

static void test_layouts(void) {
    if (sizeof(void *) != 8 || sizeof(size_t) != 8 || sizeof(int) != 4)
        SKIP_TEST("the pinned table is for LP64 hosts");
    static const pin pins[] = {
        SZ(tq_codec_config, 72), OF(tq_codec_config, struct_size, 0),
        OF(tq_codec_config, dim, 8), OF(tq_codec_config, bits, 12),
        OF(tq_codec_config, variant, 16), OF(tq_codec_config, norm_correction, 20),
        OF(tq_codec_config, norm_format, 24), OF(tq_codec_config, rotation, 28),
        OF(tq_codec_config, seed, 32), OF(tq_codec_config, split, 40),
        OF(tq_codec_config, channel_energy, 48), OF(tq_codec_config, block_dim, 56),
        OF(tq_codec_config, block_bits, 60), OF(tq_codec_config, trellis, 64),
        SZ(tq_kv_layer_scheme, 36), OF(tq_kv_layer_scheme, key_format, 0),
        OF(tq_kv_layer_scheme, value_format, 4), OF(tq_kv_layer_scheme, key_bits, 8),
        OF(tq_kv_layer_scheme, value_bits, 12), OF(tq_kv_layer_scheme, key_variant, 16),
        OF(tq_kv_layer_scheme, norm_correction, 20), OF(tq_kv_layer_scheme, key_mean, 24),
        OF(tq_kv_layer_scheme, key_scale, 28), OF(tq_kv_layer_scheme, key_split, 32),
        OF(tq_kv_scheme, struct_size, 0), OF(tq_kv_scheme, layer, 8),
        OF(tq_kv_scheme, edge, 44), OF(tq_kv_scheme, edge_first, 80),
        OF(tq_kv_scheme, edge_last, 84), OF(tq_kv_scheme, raw_window, 88),
        OF(tq_kv_scheme, batch, 92), OF(tq_kv_scheme, quantized_kv_start, 96),
        OF(tq_kv_scheme, prefill_raw, 100), OF(tq_kv_scheme, seed, 104),
        OF(tq_kv_scheme, sink, 112), OF(tq_kv_scheme, trellis, 116), SZ(tq_kv_scheme, 120),
        SZ(tq_kv_cache_config, 184), OF(tq_kv_cache_config, key_rope_pairs, 168),
        OF(tq_kv_cache_config, key_rope_freqs, 176),
        OF(tq_kv_cache_config, struct_size, 0),
        OF(tq_kv_cache_config, n_layers, 8), OF(tq_kv_cache_config, n_kv_heads, 12),
        OF(tq_kv_cache_config, head_dim_k, 16), OF(tq_kv_cache_config, head_dim_v, 20),
        OF(tq_kv_cache_config, scheme, 24), OF(tq_kv_cache_config, layer_schemes, 144),
        OF(tq_kv_cache_config, reserve_tokens, 152), OF(tq_kv_cache_config, layer_windows, 160),
        SZ(tq_attn_params, 24), OF(tq_attn_params, struct_size, 0), OF(tq_attn_params, scale, 8),
        OF(tq_attn_params, causal, 12), OF(tq_attn_params, sliding_window, 16),
        OF(tq_attn_params, softcap, 20),
        SZ(tq_kv_memory, 40), OF(tq_kv_memory, tokens, 0), OF(tq_kv_memory, compressed_tokens, 8),
        OF(tq_kv_memory, data_bytes, 16), OF(tq_kv_memory, allocated_bytes, 24),
        OF(tq_kv_memory, f16_bytes, 32),
        SZ(tq_codebook, 40), OF(tq_codebook, dim, 0), OF(tq_codebook, bits, 4),
        OF(tq_codebook, levels, 8), OF(tq_codebook, centroids, 16),
        OF(tq_codebook, boundaries, 24), OF(tq_codebook, mse, 32),
    };
    for (size_t i = 0; i < sizeof pins / sizeof *pins; i++)
        CHECK_MSG(pins[i].got == pins[i].want, "%s is %zu, pinned at %zu", pins[i].name,
                  pins[i].got, pins[i].want);
}

/* ---- sized structs ---- */

/* A struct as a newer minor version would pass it: this version's bytes, then `extra` more. */
typedef struct {
    unsigned char bytes[256];
} bigger;

static void set_size(void *s, size_t size) { memcpy(s, &size, sizeof size); }

/* tq_kv_cache_config as 0.2 laid it out: its embedded scheme ended at seed (no sink), so the
 * later fields sit 8 bytes earlier; the library tells it by the container's size (doc/api.md). */
typedef struct config_v02 {
    size_t struct_size;
    int n_layers, n_kv_heads, head_dim_k, head_dim_v;
    unsigned char scheme[offsetof(tq_kv_scheme, sink)];
    const tq_kv_layer_scheme *layer_schemes;
    size_t reserve_tokens;
    const size_t *layer_windows;
} config_v02;

static void test_codec_config(void) {
    tq_codec_config cfg;
    tq_codec_config_init(&cfg, 128, 3.0f, TQ_VARIANT_MSE);
    CHECK(cfg.struct_size == sizeof cfg);
    size_t want = 0, got = 0;
    CHECK(tq_codec_config_bytes(&cfg, &want) == TQ_OK && want > 0);
    /* Older: the newest field (trellis) missing, garbage where it would be. */
    tq_codec_config old = cfg;
    old.struct_size = offsetof(tq_codec_config, trellis);
    old.trellis = 0x5A5A5A5A;
    CHECK(tq_codec_config_bytes(&old, &got) == TQ_OK && got == want);
    tq_codec *a = NULL, *b = NULL;
    CHECK(tq_codec_create(&a, &cfg) == TQ_OK && tq_codec_create(&b, &old) == TQ_OK);
    if (a && b) {
        float x[128];
        for (int i = 0; i < 128; i++) x[i] = (float)((i * 37) % 11) - 5.0f;
        unsigned char ca[64], cb[64];
        CHECK(tq_codec_encode(a, x, 1, ca, sizeof ca) == TQ_OK);
        CHECK(tq_codec_encode(b, x, 1, cb, sizeof cb) == TQ_OK);
        CHECK(memcmp(ca, cb, want) == 0);
        /* The getter: the library's struct into a caller's of any size from the first one. */
        tq_codec_config out;
        memset(&out, 0xEE, sizeof out);
        CHECK(tq_codec_get_config(b, &out, sizeof out) == TQ_OK);
        CHECK(out.struct_size == sizeof out && out.trellis == 0 && out.dim == 128);
        memset(&out, 0xEE, sizeof out);
        CHECK(tq_codec_get_config(b, &out, offsetof(tq_codec_config, trellis)) == TQ_OK);
        CHECK(out.struct_size == offsetof(tq_codec_config, trellis) &&
              out.trellis == (int)0xEEEEEEEE); /* not written past the caller's size */
        CHECK(tq_codec_get_config(b, &out, offsetof(tq_codec_config, variant)) ==
              TQ_ERR_CAPACITY);
        bigger big;
        memset(&big, 0xEE, sizeof big);
        CHECK(tq_codec_get_config(b, (tq_codec_config *)(void *)&big, sizeof cfg + 16) == TQ_OK);
        size_t sz;
        memcpy(&sz, big.bytes, sizeof sz);
        CHECK(sz == sizeof cfg && big.bytes[sizeof cfg] == 0 && big.bytes[sizeof cfg + 15] == 0 &&
              big.bytes[sizeof cfg + 16] == 0xEE);
    }
    tq_codec_free(a);
    tq_codec_free(b);
    /* Too small to hold the fields every version has; no size at all. */
    old.struct_size = offsetof(tq_codec_config, variant);
    CHECK(tq_codec_config_bytes(&old, &got) == TQ_ERR_INVALID);
    CHECK(tq_codec_create(&a, &old) == TQ_ERR_INVALID && a == NULL);
    old.struct_size = 0;
    CHECK(tq_codec_config_bytes(&old, &got) == TQ_ERR_INVALID);
    old.struct_size = (size_t)-1; /* uninitialized: refused without reading past the struct */
    CHECK(tq_codec_config_bytes(&old, &got) == TQ_ERR_INVALID);
    /* Newer: accepted with zeros past what this version knows, refused with anything else. */
    bigger big;
    memset(&big, 0, sizeof big);
    memcpy(big.bytes, &cfg, sizeof cfg);
    set_size(big.bytes, sizeof cfg + 24);
    CHECK(tq_codec_config_bytes((const tq_codec_config *)(void *)&big, &got) == TQ_OK &&
          got == want);
    big.bytes[sizeof cfg + 23] = 1;
    CHECK(tq_codec_config_bytes((const tq_codec_config *)(void *)&big, &got) == TQ_ERR_INVALID);
    CHECK(tq_codec_create(&a, (const tq_codec_config *)(void *)&big) == TQ_ERR_INVALID);
}

/* The init and parse calls of an older program: its sizeof reaches the library through the
 * macros; nothing is written past it, and what is written works. */
static void test_older_writers(void) {
    size_t old_size = offsetof(tq_codec_config, block_bits);
    tq_codec_config cfg;
    memset(&cfg, 0xEE, sizeof cfg);
    tq_codec_config_init_sized(&cfg, old_size, 64, 2.0f, TQ_VARIANT_MSE);
    CHECK(cfg.struct_size == old_size && cfg.dim == 64 && cfg.block_bits == (int)0xEEEEEEEE);
    size_t bytes = 0;
    CHECK(tq_codec_config_bytes(&cfg, &bytes) == TQ_OK && bytes == 64 * 2 / 8 + 2);
    memset(&cfg, 0xEE, sizeof cfg);
    tq_codec_config_init_sized(&cfg, offsetof(tq_codec_config, variant), 64, 2.0f, TQ_VARIANT_MSE);
    CHECK(cfg.dim == (int)0xEEEEEEEE); /* too small for any version: untouched */
    tq_kv_scheme s;
    memset(&s, 0xEE, sizeof s);
    CHECK(tq_kv_scheme_parse_sized("turbo4", &s, offsetof(tq_kv_scheme, seed), NULL, 0) == TQ_OK);
    CHECK(s.struct_size == offsetof(tq_kv_scheme, seed) && s.layer.key_bits == 4.0f &&
          s.seed == 0xEEEEEEEEEEEEEEEEull);
    CHECK(tq_kv_scheme_parse_sized("turbo4", &s, offsetof(tq_kv_scheme, layer), NULL, 0) ==
          TQ_ERR_CAPACITY);
    /* A 0.2 program's config (the scheme without sink), cut before its layer_windows. */
    config_v02 kc;
    memset(&kc, 0xEE, sizeof kc);
    tq_kv_cache_config_init_sized((tq_kv_cache_config *)(void *)&kc,
                                  offsetof(config_v02, layer_windows), 1, 1, 32, 32);
    CHECK(kc.layer_windows == (const size_t *)(uintptr_t)0xEEEEEEEEEEEEEEEEull || sizeof(void *) != 8);
    CHECK(kc.layer_schemes == NULL && kc.reserve_tokens == 0 && kc.n_layers == 1);
    size_t ssize;
    memcpy(&ssize, kc.scheme, sizeof ssize);
    CHECK(ssize == offsetof(tq_kv_scheme, sink));
    tq_kv_cache *c = NULL;
    CHECK(tq_kv_cache_create(&c, (const tq_kv_cache_config *)(void *)&kc) == TQ_OK);
    tq_kv_cache_free(c);
    tq_attn_params p;
    memset(&p, 0xEE, sizeof p);
    tq_attn_params_init_sized(&p, offsetof(tq_attn_params, softcap), 16);
    CHECK(p.struct_size == offsetof(tq_attn_params, softcap) && p.scale == 0.25f && p.causal == 1);
}

static void test_scheme(void) {
    tq_kv_scheme s;
    /* Layouts without the sink and trellis fields read them as 0 (tq_kv_scheme_defaults), not
     * as the parser's defaults for TurboQuant (4 sinks, the two-state trellis codes): a caller
     * built against 0.2 keeps what it had. Compare with turbo3:sink=0:trellis=0. */
    CHECK(tq_kv_scheme_parse("turbo3:sink=0:trellis=0", &s, NULL, 0) == TQ_OK && s.struct_size == sizeof s);
    char want[256], got[256];
    CHECK(tq_kv_scheme_format(&s, want, sizeof want) == TQ_OK);
    /* Older: the newest field (seed) missing and garbage where it would be: the default seed. */
    tq_kv_scheme old = s;
    old.struct_size = offsetof(tq_kv_scheme, seed);
    old.seed = 12345;
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_OK && strcmp(got, want) == 0);
    CHECK(tq_kv_scheme_compressed_length(&old, 1000) == tq_kv_scheme_compressed_length(&s, 1000));
    /* 0.2's scheme: no sink (the newest field), garbage where it would be: no sinks. */
    old = s;
    old.struct_size = offsetof(tq_kv_scheme, sink);
    old.sink = -3;
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_OK && strcmp(got, want) == 0);
    CHECK(tq_kv_scheme_parse("turbo3:sink=8", &old, NULL, 0) == TQ_OK && old.sink == 8);
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_OK && strstr(got, ":sink=8") != NULL);
    old.sink = 1025; /* beyond the range */
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_ERR_INVALID);
    /* Only the layer scheme: every later field at its default. */
    old.struct_size = offsetof(tq_kv_scheme, edge);
    old.batch = -7;
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_OK && strcmp(got, want) == 0);
    old.struct_size = offsetof(tq_kv_scheme, layer);
    CHECK(tq_kv_scheme_format(&old, got, sizeof got) == TQ_ERR_INVALID);
    CHECK(tq_kv_scheme_compressed_length(&old, 1000) == 0);
    bigger big;
    memset(&big, 0, sizeof big);
    memcpy(big.bytes, &s, sizeof s);
    set_size(big.bytes, sizeof s + 8);
    CHECK(tq_kv_scheme_format((const tq_kv_scheme *)(void *)&big, got, sizeof got) == TQ_OK &&
          strcmp(got, want) == 0);
    big.bytes[sizeof s] = 0x80;
    CHECK(tq_kv_scheme_format((const tq_kv_scheme *)(void *)&big, got, sizeof got) ==
          TQ_ERR_INVALID);
}

static void test_cache_config(void) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 2, 2, 64, 64);
    CHECK(cfg.struct_size == sizeof cfg && cfg.scheme.struct_size == sizeof cfg.scheme);
    CHECK(tq_kv_scheme_parse("turbo3:window=16:batch=32", &cfg.scheme, NULL, 0) == TQ_OK);
    /* Older: layer_windows (the newest field) missing, a pointer that must not be read there. */
    /* Of 0.2 (its scheme without sink), its layer_windows missing too. */
    config_v02 old;
    memset(&old, 0, sizeof old);
    memcpy(&old, &cfg, offsetof(tq_kv_cache_config, scheme));
    memcpy(old.scheme, &cfg.scheme, sizeof old.scheme);
    set_size(old.scheme, sizeof old.scheme);
    old.struct_size = offsetof(config_v02, layer_windows);
    old.layer_windows = (const size_t *)(uintptr_t)1;
    tq_kv_cache *c = NULL;
    CHECK(tq_kv_cache_create(&c, (const tq_kv_cache_config *)(void *)&old) == TQ_OK);
    /* Its embedded scheme may not be this version's (larger than its container's layout). */
    tq_kv_cache *bad = NULL;
    set_size(old.scheme, sizeof(tq_kv_scheme));
    CHECK(tq_kv_cache_create(&bad, (const tq_kv_cache_config *)(void *)&old) == TQ_ERR_INVALID && !bad);
    {
        config_v02 o2;
        memset(&o2, 0xEE, sizeof o2);
        CHECK(c && tq_kv_cache_get_config(c, (tq_kv_cache_config *)(void *)&o2, sizeof o2) == TQ_OK);
        tq_kv_scheme s2;
        memcpy(&s2, o2.scheme, sizeof o2.scheme);
        CHECK(o2.struct_size == sizeof o2 && o2.layer_windows == NULL && s2.batch == 32 &&
              s2.struct_size == sizeof o2.scheme);
    }
    float kv[600 * 2 * 64];
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++) kv[i] = (float)(i % 13) * 0.1f - 0.6f;
    CHECK(c && tq_kv_cache_append(c, 0, kv, kv, 600) == TQ_OK);
    CHECK(tq_kv_cache_dropped_length(c, 0) == 0); /* no window read from the garbage */
    tq_kv_cache_config out;
    CHECK(tq_kv_cache_get_config(c, &out, sizeof out) == TQ_OK);
    CHECK(out.struct_size == sizeof out && out.layer_windows == NULL && out.scheme.batch == 32 &&
          out.scheme.struct_size == sizeof out.scheme);
    CHECK(tq_kv_cache_get_config(c, &out, offsetof(tq_kv_cache_config, scheme)) ==
          TQ_ERR_CAPACITY);
    tq_kv_memory mem;
    CHECK(tq_kv_cache_memory(c, &mem, sizeof mem) == TQ_OK && mem.tokens == 600);
    CHECK(tq_kv_cache_memory(c, &mem, sizeof mem - 1) == TQ_ERR_CAPACITY);
    tq_kv_layer_scheme ls;
    CHECK(tq_kv_cache_get_layer_scheme(c, 1, &ls, sizeof ls) == TQ_OK &&
          ls.key_format == TQ_KV_TURBO);
    CHECK(tq_kv_cache_get_layer_scheme(c, 2, &ls, sizeof ls) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_get_layer_scheme(c, 0, &ls, sizeof ls - 1) == TQ_ERR_CAPACITY);
    /* The attention parameters: softcap (the newest field) missing, garbage there. */
    tq_attn_params p;
    tq_attn_params_init(&p, 64);
    CHECK(p.struct_size == sizeof p);
    p.struct_size = offsetof(tq_attn_params, softcap);
    p.softcap = -5.0f; /* refused if read */
    float q[4 * 64], o1[4 * 64], o2[4 * 64];
    for (int i = 0; i < 4 * 64; i++) q[i] = (float)(i % 5) * 0.2f;
    size_t wb = tq_kv_attention_workspace_size(c, 0, 4, 1, 1);
    void *w = malloc(wb);
    CHECK(w && tq_kv_attention(c, 0, q, 4, 1, &p, NULL, w, wb, o1, 4 * 64) == TQ_OK);
    tq_attn_params full;
    tq_attn_params_init(&full, 64);
    CHECK(w && tq_kv_attention(c, 0, q, 4, 1, &full, NULL, w, wb, o2, 4 * 64) == TQ_OK);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    p.struct_size = sizeof p + 8; /* newer, with a non-zero byte past this version's struct */
    p.softcap = 0.0f;
    struct { tq_attn_params p; uint64_t more; } newer = {p, 3};
    CHECK(tq_kv_attention(c, 0, q, 4, 1, &newer.p, NULL, w, wb, o1, 4 * 64) == TQ_ERR_INVALID);
    newer.more = 0;
    CHECK(tq_kv_attention(c, 0, q, 4, 1, &newer.p, NULL, w, wb, o1, 4 * 64) == TQ_OK);
    free(w);
    tq_kv_cache_free(c);
    /* Newer cache config with garbage in the tail; an embedded scheme claiming to be larger. */
    bigger big;
    memset(&big, 0, sizeof big);
    memcpy(big.bytes, &cfg, sizeof cfg);
    set_size(big.bytes, sizeof cfg + 8);
    c = NULL;
    CHECK(tq_kv_cache_create(&c, (const tq_kv_cache_config *)(void *)&big) == TQ_OK);
    tq_kv_cache_free(c);
    big.bytes[sizeof cfg + 7] = 9;
    CHECK(tq_kv_cache_create(&c, (const tq_kv_cache_config *)(void *)&big) == TQ_ERR_INVALID);
    tq_kv_cache_config cur = cfg;
    cur.scheme.struct_size = sizeof cur.scheme + 8;
    CHECK(tq_kv_cache_create(&c, &cur) == TQ_ERR_INVALID && c == NULL);
    cur.struct_size = offsetof(tq_kv_cache_config, scheme);
    CHECK(tq_kv_cache_create(&c, &cur) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_load_memory_expect("x", 1, &cur, &c) == TQ_ERR_INVALID);
}

int main(void) {
    RUN_TEST(test_version);
    RUN_TEST(test_layouts);
    RUN_TEST(test_codec_config);
    RUN_TEST(test_older_writers);
    RUN_TEST(test_scheme);
    RUN_TEST(test_cache_config);
    return test_report();
}

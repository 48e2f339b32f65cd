/*
 * The KV cache: scheme parsing and formatting, exact bytes per token, two-phase storage,
 * "prefill then decode equals all at once", truncation then re-append equals never having
 * appended (inside the raw part and across the compressed boundary), conversion from f16,
 * per-layer and edge schemes, memory accounting, errors.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache_internal.h"
#include "test_api.h"
#include "test_util.h"
#include "turboquant.h"

static unsigned long long rng_state = 2463534242ull;
static float grand(void) {
    double s = 0;
    for (int i = 0; i < 12; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        s += (double)(rng_state >> 11) * 0x1.0p-53;
    }
    return (float)(s - 6.0);
}

#define H 2
#define D 128
#define NT 700

static float Kd[NT * H * D], Vd[NT * H * D];

static void make_data(void) {
    for (size_t i = 0; i < sizeof Kd / sizeof *Kd; i++) Kd[i] = grand() + 0.5f, Vd[i] = grand();
}
static const float *kat(size_t t) { return Kd + t * H * D; }
static const float *vat(size_t t) { return Vd + t * H * D; }

static tq_kv_cache *cache_for(const char *scheme, int n_layers) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, n_layers, H, D, D);
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0)) return NULL;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg)) return NULL;
    return c;
}

/* Byte-equal read-back of two caches' layer 0 (same length and boundary required). */
static int same_state(const tq_kv_cache *a, const tq_kv_cache *b) {
    size_t n = tq_kv_cache_length(a, 0);
    if (n != tq_kv_cache_length(b, 0)) return 0;
    if (tq_kv_cache_compressed_length(a, 0) != tq_kv_cache_compressed_length(b, 0)) return 0;
    float *x = malloc(sizeof(float) * n * H * D * 2 + 4), *y = malloc(sizeof(float) * n * H * D * 2 + 4);
    tq_kv_cache_read(a, 0, 0, n, x, n * H * D, x + n * H * D, n * H * D);
    tq_kv_cache_read(b, 0, 0, n, y, n * H * D, y + n * H * D, n * H * D);
    int eq = memcmp(x, y, sizeof(float) * n * H * D * 2) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_parse(void) {
    tq_kv_scheme s;
    CHECK(tq_kv_scheme_parse("f16", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_format == TQ_KV_F16 && s.layer.value_format == TQ_KV_F16 && s.batch == 64);
    CHECK(tq_kv_scheme_parse("q8_0", &s, NULL, 0) == TQ_OK && s.layer.key_format == TQ_KV_Q8_0);
    CHECK(tq_kv_scheme_parse("q4_0", &s, NULL, 0) == TQ_OK && s.layer.value_format == TQ_KV_Q4_0);
    CHECK(tq_kv_scheme_parse("turbo3", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_format == TQ_KV_TURBO && s.layer.key_bits == 3 && s.layer.value_bits == 3);
    CHECK(s.layer.key_variant == TQ_VARIANT_MSE && s.layer.norm_correction == 1);
    /* trellis=0|1|2 (issue 17): with a TurboQuant side the parser's default is 2 (the two-state
     * tables), which the canonical text leaves out; 0 and 1 are written and read back. */
    CHECK(s.trellis == TQ_TRELLIS_TWO_STATE);
    char tbuf[512], terr[256];
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_OK && !strstr(tbuf, "trellis"));
    CHECK(tq_kv_scheme_parse(tbuf, &s, NULL, 0) == TQ_OK && s.trellis == TQ_TRELLIS_TWO_STATE);
    CHECK(tq_kv_scheme_parse("turbo3:trellis=1", &s, NULL, 0) == TQ_OK && s.trellis == 1);
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_OK && strstr(tbuf, ":trellis=1"));
    CHECK(tq_kv_scheme_parse(tbuf, &s, NULL, 0) == TQ_OK && s.trellis == 1);
    CHECK(tq_kv_scheme_parse("turbo3:trellis=0", &s, NULL, 0) == TQ_OK && s.trellis == 0);
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_OK && strstr(tbuf, ":trellis=0"));
    CHECK(tq_kv_scheme_parse(tbuf, &s, NULL, 0) == TQ_OK && s.trellis == 0);
    CHECK(tq_kv_scheme_parse("turbo3:trellis=2", &s, NULL, 0) == TQ_OK && s.trellis == TQ_TRELLIS_TWO_STATE);
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_OK && !strstr(tbuf, "trellis"));
    /* without a TurboQuant side nothing reads trellis codes: 0, and not written */
    CHECK(tq_kv_scheme_parse("q4_0r", &s, NULL, 0) == TQ_OK && s.trellis == 0);
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_OK && !strstr(tbuf, "trellis"));
    CHECK(tq_kv_scheme_parse("turbo0v4", &s, NULL, 0) == TQ_OK && s.trellis == TQ_TRELLIS_TWO_STATE);
    CHECK(tq_kv_scheme_parse("turbo3:trellis=3", &s, terr, sizeof terr) == TQ_ERR_SCHEME &&
          strstr(terr, "trellis"));
    s.trellis = 7;
    CHECK(tq_kv_scheme_format(&s, tbuf, sizeof tbuf) == TQ_ERR_INVALID);
    CHECK(tq_kv_scheme_parse("turbo4v2", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_bits == 4 && s.layer.value_bits == 2);
    CHECK(tq_kv_scheme_parse("turbo0v4", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_format == TQ_KV_F16 && s.layer.value_format == TQ_KV_TURBO);
    CHECK(tq_kv_scheme_parse("turbo3.5", &s, NULL, 0) == TQ_OK && s.layer.key_bits == 3.5f);
    CHECK(tq_kv_scheme_parse("k3.5v3", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_bits == 3.5f && s.layer.value_bits == 3);
    CHECK(tq_kv_scheme_parse("turbo8v4", &s, NULL, 0) == TQ_OK && s.layer.key_bits == 8);
    CHECK(tq_kv_scheme_parse("kq8_0v4", &s, NULL, 0) == TQ_OK && s.layer.key_format == TQ_KV_Q8_0);
    /* The rotated formats (issue 17), as a whole scheme and as either side. */
    CHECK(tq_kv_scheme_parse("q8_0r", &s, NULL, 0) == TQ_OK && s.layer.key_format == TQ_KV_Q8_0R &&
          s.layer.value_format == TQ_KV_Q8_0R && s.layer.key_bits == 0 && s.layer.key_mean == 0);
    CHECK(tq_kv_scheme_parse("q4_0r", &s, NULL, 0) == TQ_OK && s.layer.key_format == TQ_KV_Q4_0R &&
          s.layer.value_format == TQ_KV_Q4_0R && s.layer.key_scale == 0);
    CHECK(tq_kv_scheme_parse("k=q8_0r:v=q4_0r", &s, NULL, 0) == TQ_OK &&
          s.layer.key_format == TQ_KV_Q8_0R && s.layer.value_format == TQ_KV_Q4_0R);
    CHECK(tq_kv_scheme_parse("kq8_0rv4", &s, NULL, 0) == TQ_OK && s.layer.key_format == TQ_KV_Q8_0R &&
          s.layer.value_format == TQ_KV_TURBO && s.layer.value_bits == 4);
    CHECK(tq_kv_scheme_parse("turbo0vq4_0r", &s, NULL, 0) == TQ_OK &&
          s.layer.key_format == TQ_KV_F16 && s.layer.value_format == TQ_KV_Q4_0R);
    CHECK(tq_kv_scheme_parse("turbo3:first=1:edge=q4_0r", &s, NULL, 0) == TQ_OK &&
          s.edge.key_format == TQ_KV_Q4_0R && s.layer.key_format == TQ_KV_TURBO);
    CHECK(tq_kv_scheme_parse("k=4:v=3:variant=prod:norm=0:window=32:seed=7:batch=16:start=100",
                             &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_variant == TQ_VARIANT_PROD && s.layer.norm_correction == 0);
    CHECK(s.raw_window == 32 && s.seed == 7 && s.batch == 16 && s.quantized_kv_start == 100);
    CHECK(tq_kv_scheme_parse("turbo3:first=2:last=1", &s, NULL, 0) == TQ_OK);
    CHECK(s.edge_first == 2 && s.edge_last == 1 && s.edge.key_bits == 8);
    CHECK(tq_kv_scheme_parse("turbo3:first=2:edge=q8_0:mean=1", &s, NULL, 0) == TQ_OK);
    CHECK(s.edge.key_format == TQ_KV_Q8_0 && s.layer.key_mean == 1);
    CHECK(tq_kv_scheme_parse("turbo3", &s, NULL, 0) == TQ_OK && s.layer.key_scale == 1);
    CHECK(tq_kv_scheme_parse("turbo0v4", &s, NULL, 0) == TQ_OK && s.layer.key_scale == 0);
    CHECK(tq_kv_scheme_parse("turbo3:kscale=0:first=1", &s, NULL, 0) == TQ_OK);
    CHECK(s.layer.key_scale == 0 && s.edge.key_scale == 0);
    CHECK(tq_kv_scheme_parse("turbo3:kscale=2", &s, NULL, 0) == TQ_ERR_SCHEME);
    CHECK(tq_kv_scheme_parse("turbo3.5", &s, NULL, 0) == TQ_OK && s.layer.key_split == TQ_KV_KEY_SPLIT_AUTO);
    CHECK(tq_kv_scheme_parse("turbo3.5:ksplit=0", &s, NULL, 0) == TQ_OK && s.layer.key_split == 0);
    CHECK(tq_kv_scheme_parse("turbo3.5:ksplit=1", &s, NULL, 0) == TQ_OK && s.layer.key_split == 1);
    CHECK(tq_kv_scheme_parse("turbo3:ksplit=2", &s, NULL, 0) == TQ_OK && s.layer.key_split == TQ_KV_KEY_SPLIT_AUTO);
    CHECK(tq_kv_scheme_parse("q8_0", &s, NULL, 0) == TQ_OK && s.layer.key_split == 0);
    CHECK(tq_kv_scheme_parse("turbo3.5:ksplit=3", &s, NULL, 0) == TQ_ERR_SCHEME);
    /* mean=2: the key mean and prediction across tokens, MSE keys only */
    CHECK(tq_kv_scheme_parse("turbo4:mean=2", &s, NULL, 0) == TQ_OK && s.layer.key_mean == TQ_KV_KEY_MEAN_PREDICT &&
          s.edge.key_mean == TQ_KV_KEY_MEAN_PREDICT);
    CHECK(tq_kv_scheme_parse("turbo4:mean=3", &s, NULL, 0) == TQ_ERR_SCHEME);
    CHECK(tq_kv_scheme_parse("k=4:v=3:variant=prod:norm=0:mean=2", &s, NULL, 0) == TQ_ERR_SCHEME);
    /* the defaults: predicted MSE keys (also the turbo8 edge), the mean alone for PROD keys,
     * none for plain formats; mean=N sets both sides */
    CHECK(tq_kv_scheme_parse("turbo3", &s, NULL, 0) == TQ_OK && s.layer.key_mean == TQ_KV_KEY_MEAN_PREDICT);
    CHECK(tq_kv_scheme_parse("turbo3:first=1", &s, NULL, 0) == TQ_OK && s.layer.key_mean == TQ_KV_KEY_MEAN_PREDICT &&
          s.edge.key_mean == TQ_KV_KEY_MEAN_PREDICT);
    CHECK(tq_kv_scheme_parse("turbo3:variant=prod", &s, NULL, 0) == TQ_OK && s.layer.key_mean == 1);
    CHECK(tq_kv_scheme_parse("k=4:v=3:variant=prod:norm=0", &s, NULL, 0) == TQ_OK && s.layer.key_mean == 1);
    CHECK(tq_kv_scheme_parse("turbo0v4", &s, NULL, 0) == TQ_OK && s.layer.key_mean == 0);
    CHECK(tq_kv_scheme_parse("q4_0r:first=1", &s, NULL, 0) == TQ_OK && s.layer.key_mean == 0 &&
          s.edge.key_mean == TQ_KV_KEY_MEAN_PREDICT);
    CHECK(tq_kv_scheme_parse("turbo3:mean=1:first=1", &s, NULL, 0) == TQ_OK && s.layer.key_mean == 1 && s.edge.key_mean == 1);
    {
        /* hand-built: TurboQuant keys with the plain mean beside f16 edge keys without one
         * write the TurboQuant side's value (the f16 side has no mean to keep) */
        tq_kv_scheme h, back;
        char hb[256];
        CHECK(tq_kv_scheme_parse("turbo3:first=1:edge=f16", &h, NULL, 0) == TQ_OK);
        h.layer.key_mean = 1;
        h.edge.key_mean = 0;
        CHECK(tq_kv_scheme_format(&h, hb, sizeof hb) == TQ_OK && strstr(hb, ":mean=1") != NULL);
        CHECK(tq_kv_scheme_parse(hb, &back, NULL, 0) == TQ_OK && back.layer.key_mean == 1);
        /* both sides TurboQuant, neither at its default and not alike: no text gives it */
        CHECK(tq_kv_scheme_parse("turbo3:first=1", &h, NULL, 0) == TQ_OK);
        h.layer.key_mean = 0;
        h.edge.key_mean = 1;
        CHECK(tq_kv_scheme_format(&h, hb, sizeof hb) == TQ_ERR_INVALID);
    }
    /* a hand-built scheme no text gives: the layer predicting, the edge with the plain mean */
    CHECK(tq_kv_scheme_parse("turbo4:mean=2", &s, NULL, 0) == TQ_OK);
    s.edge.key_mean = 1;
    char fb[256];
    CHECK(tq_kv_scheme_format(&s, fb, sizeof fb) == TQ_ERR_INVALID);
    /* Canonical form round-trips. */
    const char *forms[] = {"turbo3:kscale=0", "k=4:v=3:variant=prod:norm=0:window=32:seed=7",
                           "turbo2.5:first=2:last=2", "turbo0v2:edge=q8_0:first=1", "q4_0",
                           "turbo3.5:ksplit=0",
                           /* found by fuzz_scheme: PROD keys (norm=1 is refused beside them),
                            * edge-only key flags, an edge form with no edge layers */
                           "turbo3:variant=prod", "f16:first=5", "turbo0v4:first=1",
                           "turbo3:first=2:edge=q8_0", "turbo3:edge=q8_0",
                           /* the rotated formats (issue 17) */
                           "q4_0r", "q8_0r:seed=9", "k=q8_0r:v=q4_0r", "kq4_0rv3", "turbo0vq8_0r",
                           "turbo3:first=1:edge=kq8_0rvq4_0r", "q4_0r:first=1",
                           /* predicted keys, beside an edge form */
                           "turbo4:mean=2", "turbo3:mean=2:first=1:edge=q8_0"};
    for (int i = 0; i < (int)(sizeof forms / sizeof *forms); i++) {
        tq_kv_scheme a, b;
        char buf[256];
        CHECK(tq_kv_scheme_parse(forms[i], &a, NULL, 0) == TQ_OK);
        CHECK(tq_kv_scheme_format(&a, buf, sizeof buf) == TQ_OK);
        CHECK_MSG(tq_kv_scheme_parse(buf, &b, NULL, 0) == TQ_OK, "%s", buf);
        CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "%s -> %s", forms[i], buf);
        CHECK(tq_kv_scheme_format(&a, buf, 10) == TQ_ERR_CAPACITY);
    }
    /* Invalid strings: TQ_ERR_SCHEME and a message listing the valid forms. */
    const char *bad[] = {"", "turbo", "turbo9", "turbo0.5", "k3", "k3v", "q5_0", "turbo3:",
                         "turbo3:window", "turbo3:window=-1", "turbo3:foo=1", "turbo3:variant=x",
                         "turbo3:batch=0", "k=3", "k=3:v=x", "turbo3:k=3", "turbo3v2x",
                         "k=4:v=3:variant=prod:norm=1",
                         /* the rotated formats' names exactly (issue 17) */
                         "q4_0rr", "q8_0R", "q4_r", "turboq4_0r", "k=q4_0r", "kq4_0r",
                         "q4_0r:variant=y", "k=q4_0r:v=q4_0rr"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[2048];
        CHECK_MSG(tq_kv_scheme_parse(bad[i], &s, err, sizeof err) == TQ_ERR_SCHEME, "%s", bad[i]);
        CHECK_MSG(strstr(err, "turboKvV") != NULL, "%s: %s", bad[i], err);
    }
    char small[8];
    CHECK(tq_kv_scheme_parse("nope", &s, small, sizeof small) == TQ_ERR_SCHEME);
    CHECK(strlen(small) == 7);
    CHECK(tq_kv_scheme_parse(NULL, &s, NULL, 0) == TQ_ERR_NULL);
    CHECK(strstr(tq_kv_scheme_help(), "f16") != NULL);
}

/* Every number in a scheme string goes through one check: digits only (a '.' in bit widths),
 * no sign, space, exponent, hex or empty value, no overflow, within the field's range; the
 * message names the field. strtoull/strtod used to saturate an overflowing seed to 2^64 − 1
 * and accept "+3", " 3", "-0", "0x4", "4e0" and an underflowing "1e-400" (f16) as bit widths. */
static void test_parse_numbers(void) {
    tq_kv_scheme s;
    char err[2048];
    static const struct {
        const char *text, *field;
    } bad[] = {
        {"k=3:v=3:seed=99999999999999999999999", "seed: out of range"},
        {"k=3:v=3:seed=18446744073709551616", "seed: out of range"}, /* 2^64 */
        {"turbo3:seed=184467440737095516150", "seed: out of range"},
        {"turbo3:window=99999999999999999999999", "window: out of range"},
        {"turbo3:window=1073741825", "window: out of range"}, /* 2^30 + 1 */
        {"turbo3:batch=99999999999999999999999", "batch: out of range"},
        {"turbo3:batch=0", "batch: out of range"},
        {"turbo3:start=99999999999999999999999", "start: out of range"},
        {"turbo3:first=99999999999999999999999", "first: out of range"},
        {"turbo3:last=18446744073709551617", "last: out of range"},
        {"turbo3:first=4294967297", "first: out of range"}, /* 2^32 + 1: no wrap to 1 */
        {"turbo3:norm=2", "norm: out of range"},
        {"turbo3:prefill_raw=99999999999999999999999", "prefill_raw: out of range"},
        {"turbo9", "bits: out of range"},
        {"turbo99999999999999999999999", "bits: out of range"},
        {"k=99999999999999999999999:v=3", "key bits: out of range"},
        {"k=3:v=8.5", "value bits: out of range"},
        {"k=0.5:v=3", "key bits: out of range"},
        {"turbo3:first=1:edge=turbo99999999999999999999", "edge bits: out of range"},
        {"turbo3:first=1:edge=k9v3", "edge key bits: out of range"},
        /* Sign, space, exponent, hex, a bare or trailing '.', an underflow. */
        {"turbo+3", "bits: not a number"},
        {"turbo 3", "bits: not a number"},
        {"turbo3 ", "bits: not a number"},
        {"turbo4e0", "bits: not a number"},
        {"turbo0x4", "bits: not a number"},
        {"turbo3.", "bits: not a number"},
        {"turbo3.5.5", "bits: not a number"},
        {"turbo+4v2", "key bits: not a number"},
        {"turbo4v-0", "value bits: not a number"},
        {"k=+3:v=3", "key bits: not a number"},
        {"k=-0:v=3", "key bits: not a number"},
        {"k= 3:v=3", "key bits: not a number"},
        {"k=1e-400:v=3", "key bits: not a number"},
        {"k=3:v=0x0", "value bits: not a number"},
        {"k=3:v=3:seed=+1", "seed: not a whole number"},
        {"k=3:v=3:seed=-1", "seed: not a whole number"},
        {"k=3:v=3:seed= 1", "seed: not a whole number"},
        {"k=3:v=3:seed=1 ", "seed: not a whole number"},
        {"k=3:v=3:seed=0x10", "seed: not a whole number"},
        {"turbo3:window=+1", "window: not a whole number"},
        {"turbo3:window=-1", "window: not a whole number"},
        {"turbo3:window= 1", "window: not a whole number"},
        {"turbo3:window=1.5", "window: not a whole number"},
        {"turbo3:batch=-0", "batch: not a whole number"},
        {"turbo3:start=1e3", "start: not a whole number"},
        {"turbo3:first=+1", "first: not a whole number"},
        {"turbo3:last=-1", "last: not a whole number"},
        {"turbo3:mean=+1", "mean: not a whole number"},
        {"turbo3:first=1:edge=turbo+8", "edge bits: not a number"},
        /* Empty values. */
        {"k=:v=3", "key bits: empty"},
        {"k=3:v=", "value bits: empty"},
        {"k=3:v=3:seed=", "seed: empty"},
        {"turbo3:window=", "window: empty"},
        {"turbo3:batch=", "batch: empty"},
        {"turbo3:start=", "start: empty"},
        {"turbo3:first=", "first: empty"},
        {"turbo3:last=", "last: empty"},
        {"turbo3:kscale=", "kscale: empty"},
        {"turbo3:first=1:edge=k3v", "unknown edge form"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 'x';
        CHECK_MSG(tq_kv_scheme_parse(bad[i].text, &s, err, sizeof err) == TQ_ERR_SCHEME, "%s",
                  bad[i].text);
        CHECK_MSG(strstr(err, bad[i].field) != NULL, "%s: wanted '%s' in: %s", bad[i].text,
                  bad[i].field, err);
        CHECK_MSG(strstr(err, "turboKvV") != NULL, "%s: %s", bad[i].text, err);
    }
    /* The ends of every range are accepted, leading zeros too. */
    CHECK(tq_kv_scheme_parse("k=3:v=3:seed=18446744073709551615", &s, NULL, 0) == TQ_OK);
    CHECK(s.seed == UINT64_MAX);
    CHECK(tq_kv_scheme_parse("k=3:v=3:seed=0", &s, NULL, 0) == TQ_OK && s.seed == 0);
    CHECK(tq_kv_scheme_parse("k=3:v=3:seed=000000000000000000000000000000000000000000042", &s, NULL,
                             0) == TQ_OK &&
          s.seed == 42);
    CHECK(tq_kv_scheme_parse("turbo3:window=1073741824:batch=1073741824:start=1073741824:"
                             "first=1073741824:last=1073741824",
                             &s, NULL, 0) == TQ_OK);
    CHECK(s.raw_window == 1 << 30 && s.batch == 1 << 30 && s.quantized_kv_start == 1 << 30 &&
          s.edge_first == 1 << 30 && s.edge_last == 1 << 30);
    CHECK(tq_kv_scheme_parse("turbo3:window=0:batch=1:start=0:first=0:last=0", &s, NULL, 0) ==
          TQ_OK);
    CHECK(s.raw_window == 0 && s.batch == 1);
    CHECK(tq_kv_scheme_parse("k=8:v=1", &s, NULL, 0) == TQ_OK && s.layer.key_bits == 8 &&
          s.layer.value_bits == 1);
    CHECK(tq_kv_scheme_parse("k=0:v=0.000", &s, NULL, 0) == TQ_OK &&
          s.layer.key_format == TQ_KV_F16 && s.layer.value_format == TQ_KV_F16);
    CHECK(tq_kv_scheme_parse("turbo03.50", &s, NULL, 0) == TQ_OK && s.layer.key_bits == 3.5f);
    CHECK(tq_kv_scheme_parse("k=8.0:v=1.0", &s, NULL, 0) == TQ_OK && s.layer.key_bits == 8);
    /* The canonical text of an extreme scheme parses back to it. */
    char buf[256];
    tq_kv_scheme b;
    CHECK(tq_kv_scheme_parse("k=3.3:v=7.99:seed=18446744073709551615:window=1073741824", &s, NULL,
                             0) == TQ_OK);
    CHECK(tq_kv_scheme_format(&s, buf, sizeof buf) == TQ_OK);
    CHECK_MSG(tq_kv_scheme_parse(buf, &b, err, sizeof err) == TQ_OK, "%s: %s", buf, err);
    CHECK(b.seed == UINT64_MAX && b.layer.key_bits == s.layer.key_bits &&
          b.layer.value_bits == s.layer.value_bits && b.raw_window == 1 << 30);
}

static void test_bytes(void) {
    static const struct {
        const char *scheme;
        int d;
        size_t kb, vb;
    } t[] = {
        {"f16", 128, 256, 256},     {"q8_0", 128, 136, 136},    {"q4_0", 128, 72, 72},
        {"turbo4", 128, 66, 66},    {"turbo3", 128, 50, 50},    {"turbo2", 128, 34, 34},
        {"turbo4v2", 128, 66, 34},  {"turbo0v4", 128, 256, 66}, {"turbo3.5", 128, 58, 58},
        {"turbo8v4", 128, 130, 66}, {"turbo3", 256, 98, 98},    {"q8_0", 80, 86, 86},
        {"q4_0", 80, 46, 46},       {"turbo3", 80, 34, 34},
        /* the rotated formats: the bytes of their block formats */
        {"q8_0r", 128, 136, 136},   {"q4_0r", 128, 72, 72},     {"q4_0r", 80, 46, 46},
        {"kq8_0rvq4_0r", 256, 272, 144},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        tq_kv_scheme s;
        size_t kb = 0, vb = 0;
        CHECK(tq_kv_scheme_parse(t[i].scheme, &s, NULL, 0) == TQ_OK);
        CHECK(tq_kv_layer_scheme_bytes(&s.layer, t[i].d, t[i].d, &kb, &vb) == TQ_OK);
        CHECK_MSG(kb == t[i].kb && vb == t[i].vb, "%s d %d: %zu %zu", t[i].scheme, t[i].d, kb, vb);
    }
    tq_kv_scheme s;
    size_t kb, vb;
    tq_kv_scheme_parse("q8_0", &s, NULL, 0);
    CHECK(tq_kv_layer_scheme_bytes(&s.layer, 72, 72, &kb, &vb) == TQ_ERR_DIM);
}

static void test_two_phase(void) {
    tq_kv_cache *c = cache_for("turbo3:trellis=0:window=16:batch=32", 1); /* no key split (below) */
    CHECK(c != NULL);
    if (!c) return;
    CHECK(tq_kv_cache_append(c, 0, kat(0), vat(0), 100) == TQ_OK);
    CHECK(tq_kv_cache_length(c, 0) == 100);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 0); /* prefill stays raw */
    CHECK(tq_kv_cache_append(c, 0, kat(100), vat(100), 1) == TQ_OK);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 64); /* (101 − 16) rounded down to 32 */
    for (size_t t = 101; t < 113; t++) tq_kv_cache_append(c, 0, kat(t), vat(t), 1);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 96);
    tq_kv_memory m;
    CHECK(tq_kv_cache_memory(c, &m, sizeof m) == TQ_OK);
    CHECK(m.tokens == 113 && m.compressed_tokens == 96);
    /* 96 compressed tokens, 17 raw fp16 ones, the per-head key mean and key scale (on by
     * default; no key split at turbo3 with Lloyd-Max codes and head dim 128,
     * TQ_KV_KEY_SPLIT_AUTO) and the 4
     * attention sinks' fp16 K and V (sink=4, the default with TurboQuant), and ρ per head
     * (mean=2, the default for MSE keys) */
    CHECK(m.data_bytes ==
          96 * H * (50 + 50) + 17 * H * 4 * D + 2 * H * D * sizeof(float) + 4 * H * 4 * D + H * sizeof(float));
    CHECK(m.f16_bytes == 113 * H * 4 * D);
    CHECK(m.allocated_bytes >= m.data_bytes);
    tq_kv_cache_free(c);
    /* quantized_kv_start: nothing compressed below it. */
    c = cache_for("turbo3:start=200", 1);
    for (size_t t = 0; t < 199; t++) tq_kv_cache_append(c, 0, kat(t), vat(t), 1);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 0);
    tq_kv_cache_append(c, 0, kat(199), vat(199), 1);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 192);
    tq_kv_cache_free(c);
    /* prefill_raw=0 compresses at once; f16 never compresses. */
    c = cache_for("turbo3:prefill_raw=0", 1);
    tq_kv_cache_append(c, 0, kat(0), vat(0), 100);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 64);
    tq_kv_cache_free(c);
    c = cache_for("f16", 1);
    tq_kv_cache_append(c, 0, kat(0), vat(0), 600);
    tq_kv_cache_append(c, 0, kat(600), vat(600), 1);
    CHECK(tq_kv_cache_compressed_length(c, 0) == 0 && tq_kv_cache_length(c, 0) == 601);
    float k[H * D];
    CHECK(tq_kv_cache_read(c, 0, 555, 1, k, H * D, NULL, 0) == TQ_OK);
    for (int i = 0; i < H * D; i++) CHECK_NEAR(k[i], kat(555)[i], 2e-3 * fabs(k[i]) + 1e-7);
    tq_kv_cache_free(c);
}

/* With the key scale, "the same" holds once the first compression finds the 512 tokens its
 * statistics use; the queries observed count for positions below 512 only (here the values
 * stand in for queries: H query heads). */
static void test_prefill_then_decode_equals_all_at_once(void) {
    const char *ss[] = {"turbo3", "turbo4v2:window=64", "q8_0", "turbo3:mean=1", "turbo0v4",
                        "turbo3:kscale=0", "turbo3.5", "k2.5v4"};
    for (int i = 0; i < 8; i++) {
        tq_kv_cache *a = cache_for(ss[i], 1), *b = cache_for(ss[i], 1);
        CHECK(a && b);
        if (!a || !b) continue;
        CHECK(tq_kv_cache_observe_queries(a, 0, vat(0), H, 560) == TQ_OK);
        tq_kv_cache_append(a, 0, kat(0), vat(0), 560);
        for (size_t t = 560; t < 680; t++) {
            CHECK(tq_kv_cache_observe_queries(a, 0, vat(t), H, 1) == TQ_OK);
            tq_kv_cache_append(a, 0, kat(t), vat(t), 1);
        }
        CHECK(tq_kv_cache_observe_queries(b, 0, vat(0), H, 300) == TQ_OK);
        CHECK(tq_kv_cache_observe_queries(b, 0, vat(300), H, 380) == TQ_OK); /* counted as at 0 */
        CHECK(tq_kv_cache_truncate(b, 0) == TQ_OK); /* forgets them */
        CHECK(tq_kv_cache_observe_queries(b, 0, vat(0), H, 680) == TQ_OK);
        tq_kv_cache_append(b, 0, kat(0), vat(0), 680);
        tq_kv_cache_compress(b, 0);
        CHECK_MSG(same_state(a, b), "%s", ss[i]);
        CHECK(tq_kv_cache_compressed_length(a, 0) > 0);
        tq_kv_cache_free(a);
        tq_kv_cache_free(b);
    }
}

/* The key split: where it applies, and what it does. Queries loud (×8) in channels 0..15 put
 * those channels in the first (4-bit) block of turbo3.5 and of turbo3 (4 + 2 bits), so the
 * score error the queries see, Σ_i E[q_i²]·(k_i − k̂_i)², falls against the same cache without
 * the split (turbo3.5 predicted Σ_blocks D(b)/n·(Σ √(a_i b_i))²: 0.69×). By default
 * (TQ_KV_KEY_SPLIT_AUTO) the whole width 3 splits with trellis codes (the default) and, with
 * Lloyd-Max codes, from head dim 256 only: here (128) ksplit=1 asks for it. */
static void test_key_split(void) {
    static const struct { const char *s; int split; } cases[] = {
        {"turbo3.5", 1}, {"k2.5v4", 1}, {"turbo3", 1}, {"turbo3:trellis=0", 0}, {"turbo3:trellis=0:ksplit=1", 1},
        {"turbo3:trellis=0:ksplit=2", 0}, {"turbo3:ksplit=2", 1},
        {"turbo3:trellis=1", 1}, {"turbo3:trellis=1:ksplit=0", 0},
        {"turbo2", 0}, {"turbo2:ksplit=1", 0}, {"k3v4", 1}, {"k3v4:trellis=0", 0}, {"k3v4:trellis=0:ksplit=1", 1},
        {"turbo3.5:ksplit=2", 1},
        {"turbo4", 0}, {"k1v4", 0}, {"turbo3:ksplit=0", 0}, {"turbo3.5:ksplit=0", 0},
        {"turbo3.5:kscale=0", 0}, {"turbo3:kscale=0", 0}, {"k=3.5:v=3:variant=prod:norm=0", 0},
        {"k=3:v=3:variant=prod:norm=0", 0}, {"turbo0v4", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tq_kv_cache *c = cache_for(cases[i].s, 1);
        CHECK_MSG(c && test_layer_scheme(c, 0).key_split == cases[i].split, "%s", cases[i].s);
        tq_kv_cache_free(c);
    }
    /* The rule by head dim, as a scheme's layer reports it (tq_kv_layer_scheme_key_split). */
    static const struct { const char *s; int dim, split; } dims[] = {
        {"turbo3", 64, 1}, {"turbo3", 128, 1}, {"turbo3:trellis=0", 64, 0}, {"turbo3:trellis=0", 128, 0},
        {"turbo3:trellis=0", 256, 1}, {"turbo3:trellis=0", 512, 1}, {"turbo3:trellis=2", 64, 1},
        {"turbo3:ksplit=1", 64, 1}, {"turbo3:ksplit=0", 256, 0}, {"turbo3.5", 64, 1},
        {"turbo3:trellis=1", 64, 1}, {"turbo3:trellis=1", 128, 1}, {"turbo3:trellis=1:ksplit=0", 256, 0},
        {"turbo4", 256, 0}, {"turbo4:trellis=1", 64, 0}, {"q8_0", 256, 0}};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        tq_kv_scheme s;
        CHECK(tq_kv_scheme_parse(dims[i].s, &s, NULL, 0) == TQ_OK);
        CHECK_MSG(tq_kv_layer_scheme_key_split(&s.layer, s.trellis, dims[i].dim) == dims[i].split, "%s at %d",
                  dims[i].s, dims[i].dim);
    }
    CHECK(tq_kv_layer_scheme_key_split(NULL, 0, 256) == 0);
    enum { N = 600 };
    float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * D * H);
    static const char *with[2] = {"turbo3.5", "turbo3:ksplit=1"}, *without[2] = {"turbo3.5:ksplit=0", "turbo3:ksplit=0"};
    for (int w = 0; w < 2; w++) {
        double ratio[2];
        for (int split = 0; split < 2; split++) {
            tq_kv_cache *c = cache_for(split ? with[w] : without[w], 1);
            CHECK(c != NULL);
            if (!c) break;
            rng_state = 99;
            for (size_t j = 0; j < (size_t)N * H * D; j++) q[j] = grand() * (j % D < 16 ? 8.0f : 1.0f);
            CHECK(tq_kv_cache_observe_queries(c, 0, q, H, N) == TQ_OK);
            tq_kv_cache_append(c, 0, kat(0), vat(0), N);
            tq_kv_cache_compress(c, 0);
            double e = 0, n2 = 0;
            for (size_t t = 0; t < N; t += 7) {
                CHECK(tq_kv_cache_read(c, 0, t, 1, k, H * D, NULL, 0) == TQ_OK);
                for (int j = 0; j < H * D; j++) {
                    double a = j % D < 16 ? 64.0 : 1.0;
                    e += a * (k[j] - kat(t)[j]) * (double)(k[j] - kat(t)[j]);
                    n2 += a * kat(t)[j] * (double)kat(t)[j];
                }
            }
            ratio[split] = e / n2;
            tq_kv_cache_free(c);
        }
        printf("     %s query-weighted key error: %.4f without the key split, %.4f with it\n",
               with[w], ratio[0], ratio[1]);
        CHECK_MSG(ratio[1] < 0.8 * ratio[0], "%s", with[w]);
    }
    free(q);
    free(k);
}

/* The key mean: from the first TQ_KV_KEY_SCALE_TOKENS (512) tokens held at the first
 * compression, or all of them when fewer are held. Keys drift: +1 on every channel before
 * position 64, −1 from there, so the means of 64, 100 and 512 tokens (1, 0.28, −0.75) tell
 * the rules apart; tq_kv_set_key_mean_tokens(64) gives the older writers' mean. */
static void test_key_mean_tokens(void) {
    enum { N = 600 };
    float *k = malloc(sizeof(float) * N * H * D);
    for (size_t t = 0; t < N; t++)
        for (int j = 0; j < H * D; j++) k[t * H * D + (size_t)j] = (t < 64 ? 1.0f : -1.0f) + 0.01f * (float)(j % 7);
    static const struct { size_t held, most; double want; } cases[] = {
        {600, 0, (64.0 - 448.0) / 512.0}, {100, 0, (64.0 - 36.0) / 100.0}, {600, 64, 1.0}};
    for (int i = 0; i < 3; i++) {
        tq_kv_set_key_mean_tokens(cases[i].most);
        tq_kv_cache *c = cache_for("turbo3", 1);
        CHECK(c != NULL);
        if (!c) break;
        CHECK(tq_kv_cache_append(c, 0, k, vat(0), cases[i].held) == TQ_OK);
        CHECK(tq_kv_cache_compress(c, 0) == TQ_OK);
        const float *mean = tq_key_transform_mean(c->layers[0].kt); /* NULL until set */
        CHECK(mean != NULL);
        double worst = 0;
        for (int j = 0; mean && j < H * D; j++) {
            double e = fabs(mean[j] - (cases[i].want + 0.01 * (j % 7)));
            if (e > worst) worst = e;
        }
        CHECK_MSG(worst < 2e-3, "held %zu, at most %zu: mean off by %g", cases[i].held, cases[i].most, worst);
        tq_kv_cache_free(c);
    }
    tq_kv_set_key_mean_tokens(0);
    free(k);
}

/* The key scale's state: fixed at the first compression, reset by truncating to 0, absent
 * for plain-format keys; observe_queries' errors. */
static void test_key_scale_state(void) {
    float sc[H * D], sc2[H * D];
    tq_kv_cache *c = cache_for("turbo3", 2), *f = cache_for("turbo0v4", 1);
    CHECK(c && f);
    if (!c || !f) return;
    CHECK(tq_kv_cache_observe_queries(NULL, 0, vat(0), H, 1) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_observe_queries(c, 0, NULL, H, 1) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_observe_queries(c, 2, vat(0), H, 1) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_observe_queries(c, -1, vat(0), H, 1) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_observe_queries(c, 0, vat(0), 3, 1) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_observe_queries(c, 0, vat(0), 1, 1) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_observe_queries(c, 0, vat(0), 2 * H, 0) == TQ_OK);
    float qbad[H * D];
    memcpy(qbad, vat(0), sizeof qbad);
    qbad[7] = NAN;
    CHECK(tq_kv_cache_observe_queries(c, 0, qbad, H, 1) == TQ_ERR_NONFINITE);
    CHECK(tq_kv_cache_observe_queries(f, 0, vat(0), H, 4) == TQ_OK); /* fp16 keys: no scale */
    CHECK(tq_kv_cache_key_scale(NULL, 0, sc, H * D) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_key_scale(c, 0, NULL, H * D) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_key_scale(c, 5, sc, H * D) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_key_scale(c, 0, sc, H * D) == TQ_ERR_STATE);
    tq_kv_cache_append(f, 0, kat(0), vat(0), 100);
    tq_kv_cache_compress(f, 0);
    CHECK(tq_kv_cache_key_scale(f, 0, sc, H * D) == TQ_ERR_INVALID);
    tq_kv_cache_append(c, 0, kat(0), vat(0), 100);
    CHECK(tq_kv_cache_key_scale(c, 0, sc, H * D) == TQ_ERR_STATE); /* prefill: not fixed yet */
    tq_kv_cache_compress(c, 0);
    CHECK(tq_kv_cache_key_scale(c, 0, sc, H * D - 1) == TQ_ERR_CAPACITY);
    CHECK(tq_kv_cache_key_scale(c, 0, sc, H * D) == TQ_OK);
    CHECK(tq_kv_cache_key_scale(c, 1, sc2, H * D) == TQ_ERR_STATE); /* per layer */
    for (int i = 0; i < H * D; i++) CHECK(isfinite(sc[i]) && sc[i] > 0.5f && sc[i] < 2.0f);
    /* Fixed: later queries and tokens leave it alone. */
    CHECK(tq_kv_cache_observe_queries(c, 0, kat(0), H, 50) == TQ_OK);
    tq_kv_cache_append(c, 0, kat(100), vat(100), 200);
    tq_kv_cache_compress(c, 0);
    CHECK(tq_kv_cache_key_scale(c, 0, sc2, H * D) == TQ_OK && memcmp(sc, sc2, sizeof sc) == 0);
    /* A shorter rollback keeps it; truncating to 0 starts a new sequence. */
    tq_kv_cache_append(c, 1, kat(0), vat(0), 100);
    CHECK(tq_kv_cache_truncate(c, 10) == TQ_OK);
    CHECK(tq_kv_cache_key_scale(c, 0, sc2, H * D) == TQ_OK);
    CHECK(tq_kv_cache_truncate(c, 0) == TQ_OK);
    CHECK(tq_kv_cache_key_scale(c, 0, sc2, H * D) == TQ_ERR_STATE);
    /* The same tokens again give the same scale. */
    tq_kv_cache_append(c, 0, kat(0), vat(0), 100);
    tq_kv_cache_compress(c, 0);
    CHECK(tq_kv_cache_key_scale(c, 0, sc2, H * D) == TQ_OK && memcmp(sc, sc2, sizeof sc) == 0);
    tq_kv_cache_free(c);
    tq_kv_cache_free(f);
}

static void test_truncate(void) {
    const char *ss[] = {"turbo3", "turbo4v2:window=64", "q4_0", "turbo3:mean=1", "f16", "turbo3.5"};
    for (int i = 0; i < 5; i++) {
        /* Reference: 300 prefill + decode to 330. */
        tq_kv_cache *ref = cache_for(ss[i], 1), *a = cache_for(ss[i], 1);
        tq_kv_cache_append(ref, 0, kat(0), vat(0), 300);
        for (size_t t = 300; t < 330; t++) tq_kv_cache_append(ref, 0, kat(t), vat(t), 1);
        /* a: same, then 40 other tokens (speculation), rolled back inside the raw part. */
        tq_kv_cache_append(a, 0, kat(0), vat(0), 300);
        for (size_t t = 300; t < 330; t++) tq_kv_cache_append(a, 0, kat(t), vat(t), 1);
        for (size_t t = 0; t < 40; t++) tq_kv_cache_append(a, 0, kat(600 + t), vat(600 + t), 1);
        size_t nc = tq_kv_cache_compressed_length(a, 0);
        CHECK(tq_kv_cache_truncate(a, 320) == (nc <= 320 ? TQ_OK : TQ_OK));
        for (size_t t = 320; t < 330; t++) tq_kv_cache_append(a, 0, kat(t), vat(t), 1);
        if (nc <= 320) CHECK_MSG(same_state(a, ref), "%s raw rollback", ss[i]);
        /* Across the boundary: roll back to 100 (compressed), re-append up to 700 in both. */
        CHECK(tq_kv_cache_truncate(a, 100) == TQ_OK);
        CHECK(tq_kv_cache_length(a, 0) == 100);
        CHECK(tq_kv_cache_compressed_length(a, 0) <= 100);
        for (size_t t = 100; t < 650; t++) tq_kv_cache_append(a, 0, kat(t), vat(t), 1);
        for (size_t t = 330; t < 650; t++) tq_kv_cache_append(ref, 0, kat(t), vat(t), 1);
        CHECK_MSG(same_state(a, ref), "%s boundary rollback", ss[i]);
        CHECK(tq_kv_cache_truncate(a, 651) == TQ_ERR_INVALID);
        CHECK(tq_kv_cache_truncate(a, 0) == TQ_OK && tq_kv_cache_length(a, 0) == 0);
        tq_kv_cache_append(a, 0, kat(0), vat(0), 300);
        for (size_t t = 300; t < 650; t++) tq_kv_cache_append(a, 0, kat(t), vat(t), 1);
        CHECK_MSG(same_state(a, ref), "%s reset", ss[i]);
        tq_kv_cache_free(a);
        tq_kv_cache_free(ref);
    }
}

static void test_convert(void) {
    tq_kv_cache *f = cache_for("f16", 2), *direct = cache_for("turbo3", 2), *conv = NULL;
    for (int l = 0; l < 2; l++) {
        tq_kv_cache_append(f, l, kat(0), vat(0), 500);
        tq_kv_cache_append(direct, l, kat(0), vat(0), 500);
    }
    tq_kv_cache_compress(direct, -1);
    tq_kv_scheme s;
    tq_kv_scheme_parse("turbo3", &s, NULL, 0);
    CHECK(tq_kv_cache_convert(f, &s, &conv) == TQ_OK);
    CHECK(conv && same_state(conv, direct));
    CHECK(tq_kv_cache_compressed_length(conv, 1) == 448);
    tq_kv_memory m1, m2;
    tq_kv_cache_memory(f, &m1, sizeof m1);
    tq_kv_cache_memory(conv, &m2, sizeof m2);
    CHECK(m2.data_bytes * 3 < m1.data_bytes);
    /* Compressed tokens decode close to the input (turbo3: relative MSE ≈ 0.034). */
    float k[H * D];
    tq_kv_cache_read(conv, 0, 7, 1, k, H * D, NULL, 0);
    double e = 0, n = 0;
    for (int i = 0; i < H * D; i++) e += (k[i] - kat(7)[i]) * (double)(k[i] - kat(7)[i]), n += kat(7)[i] * (double)kat(7)[i];
    CHECK(e / n < 0.08);
    tq_kv_cache_free(direct);
    tq_kv_cache_free(conv);
    /* A rotated format converts as its direct cache compresses (issue 17). */
    direct = cache_for("k=q4_0r:v=q8_0r", 2);
    for (int l = 0; l < 2; l++) tq_kv_cache_append(direct, l, kat(0), vat(0), 500);
    tq_kv_cache_compress(direct, -1);
    tq_kv_scheme_parse("k=q4_0r:v=q8_0r", &s, NULL, 0);
    conv = NULL;
    CHECK(tq_kv_cache_convert(f, &s, &conv) == TQ_OK);
    CHECK(conv && same_state(conv, direct) && tq_kv_cache_compressed_length(conv, 1) == 448);
    tq_kv_cache_free(f);
    tq_kv_cache_free(direct);
    tq_kv_cache_free(conv);
}

static void test_layer_schemes(void) {
    tq_kv_cache *c = cache_for("turbo3:first=2:last=1", 6);
    CHECK(c != NULL);
    if (!c) return;
    for (int l = 0; l < 6; l++) {
        tq_kv_layer_scheme ls = test_layer_scheme(c, l);
        float want = (l < 2 || l == 5) ? 8.0f : 3.0f;
        CHECK_MSG(ls.key_bits == want, "layer %d: %g", l, ls.key_bits);
    }
    tq_kv_cache_free(c);
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 2, H, D, D);
    tq_kv_layer_scheme ov[2];
    tq_kv_scheme s;
    tq_kv_scheme_parse("q8_0", &s, NULL, 0);
    ov[0] = s.layer;
    tq_kv_scheme_parse("turbo2", &s, NULL, 0);
    ov[1] = s.layer;
    cfg.layer_schemes = ov;
    cfg.reserve_tokens = 1000;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_OK);
    CHECK(test_layer_scheme(c, 0).key_format == TQ_KV_Q8_0);
    CHECK(test_layer_scheme(c, 1).key_bits == 2.0f);
    tq_kv_cache_free(c);
    /* A fraction that does not split the dim. */
    tq_kv_cache_config_init(&cfg, 1, 1, 64, 64);
    tq_kv_scheme_parse("turbo3.3", &cfg.scheme, NULL, 0);
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_BITS);
    tq_kv_cache_config_init(&cfg, 0, 1, 64, 64);
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID);
    tq_kv_cache_config_init(&cfg, 1, 1, 2000, 64);
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_DIM);
}

static void test_errors(void) {
    tq_kv_cache *c = cache_for("turbo3", 1);
    float k[H * D], v[H * D];
    memcpy(k, kat(0), sizeof k);
    memcpy(v, vat(0), sizeof v);
    k[3] = NAN;
    CHECK(tq_kv_cache_append(c, 0, k, v, 1) == TQ_ERR_NONFINITE);
    k[3] = 1e6f;
    CHECK(tq_kv_cache_append(c, 0, k, v, 1) == TQ_ERR_RANGE);
    CHECK(tq_kv_cache_length(c, 0) == 0);
    CHECK(tq_kv_cache_append(c, 1, kat(0), vat(0), 1) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_append(c, 0, NULL, vat(0), 1) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_append(NULL, 0, kat(0), vat(0), 1) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_read(c, 0, 0, 1, k, H * D, v, H * D) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_compress(c, 3) == TQ_ERR_INVALID);
    CHECK(tq_kv_cache_truncate(NULL, 0) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_length(NULL, 0) == 0);
    tq_kv_cache_free(c);
    tq_kv_cache_free(NULL);
}

/* Relative squared error of K and V (together) read back from a cache of `scheme` at head dim
 * d holding n of the test vectors, every one with channel 5 times `outlier` (as real keys
 * have: a few channels far larger than the rest); −1 on error. */
static double rotated_err(const char *scheme, int d, float outlier) {
    enum { N = 256 };
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, 1, d, d);
    tq_kv_cache *c = NULL;
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0) || tq_kv_cache_create(&c, &cfg)) return -1;
    float *x = malloc(sizeof(float) * N * (size_t)d * 4), *k = x, *v = x + N * d;
    float *rk = v + N * d, *rv = rk + N * d;
    for (int i = 0; i < N * d; i++) {
        k[i] = Kd[i] * (i % d == 5 ? outlier : 1.0f);
        v[i] = Vd[i] * (i % d == 5 ? outlier : 1.0f);
    }
    double e = 0.0, s = 0.0;
    if (tq_kv_cache_append(c, 0, k, v, N) || tq_kv_cache_compress(c, 0) ||
        tq_kv_cache_compressed_length(c, 0) != N ||
        tq_kv_cache_read(c, 0, 0, N, rk, (size_t)N * (size_t)d, rv, (size_t)N * (size_t)d))
        e = -1.0;
    for (int i = 0; e >= 0.0 && i < 2 * N * d; i++) {
        e += ((double)rk[i] - x[i]) * ((double)rk[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    free(x);
    tq_kv_cache_free(c);
    return e < 0.0 ? -1.0 : e / s;
}

/* q8_0r / q4_0r (issue 17): a rotated record decodes to the original basis (the reference read),
 * and the rotation does what it is for: with an outlier channel, plain q4_0 spends a block's
 * scale on it, the rotation spreads it over every block and the error drops well below
 * plain q4_0's (q8_0 likewise); without one they stay close. Power-of-two (Hadamard) and
 * other (block Hadamard) head dims. */
static void test_rotated_formats(void) {
    static const int dims[] = {128, 80, 64};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        int d = dims[i];
        double p4 = rotated_err("q4_0", d, 30.0f), r4 = rotated_err("q4_0r", d, 30.0f);
        double p8 = rotated_err("q8_0", d, 30.0f), r8 = rotated_err("q8_0r", d, 30.0f);
        double g4 = rotated_err("q4_0", d, 1.0f), s4 = rotated_err("q4_0r", d, 1.0f);
        printf("     d %d, outlier channel: q4_0 %.5f q4_0r %.5f, q8_0 %.7f q8_0r %.7f; "
               "none: q4_0 %.5f q4_0r %.5f\n", d, p4, r4, p8, r8, g4, s4);
        CHECK_MSG(p4 > 0 && r4 > 0 && r4 < 0.5 * p4, "d %d: q4_0r %g vs q4_0 %g", d, r4, p4);
        CHECK_MSG(p8 > 0 && r8 > 0 && r8 < 0.5 * p8, "d %d: q8_0r %g vs q8_0 %g", d, r8, p8);
        CHECK_MSG(g4 > 0 && s4 > 0 && s4 < 1.5 * g4 && s4 < 0.02, "d %d: %g vs %g", d, s4, g4);
    }
    /* Keys and values are rotated apart (their own seeds), and the seed moves both. */
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, 1, 64, 64);
    tq_kv_cache *a = NULL, *b = NULL;
    CHECK(tq_kv_scheme_parse("q4_0r", &cfg.scheme, NULL, 0) == TQ_OK && tq_kv_cache_create(&a, &cfg) == TQ_OK);
    CHECK(tq_kv_scheme_parse("q4_0r:seed=1", &cfg.scheme, NULL, 0) == TQ_OK && tq_kv_cache_create(&b, &cfg) == TQ_OK);
    uint8_t ra[64], rb[64], rv[64];
    CHECK(a && b && a->layers[0].k.rot && a->layers[0].v.rot && a->layers[0].k.format == TQ_KV_Q4_0);
    if (a && b) {
        CHECK(tq_kv_tensor_encode(&a->layers[0].k, Kd, ra) == TQ_OK);
        CHECK(tq_kv_tensor_encode(&a->layers[0].v, Kd, rv) == TQ_OK);
        CHECK(tq_kv_tensor_encode(&b->layers[0].k, Kd, rb) == TQ_OK);
        CHECK(memcmp(ra, rv, a->layers[0].k.rec_bytes) != 0 && memcmp(ra, rb, a->layers[0].k.rec_bytes) != 0);
    }
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
}

/* Decode attention of layer 0 with a sliding window w (one query per KV head); 0 on error. */
static int attend(const tq_kv_cache *c, size_t w, const float *q, float *out, tq_status *st) {
    tq_attn_params p;
    tq_attn_params_init(&p, D);
    p.sliding_window = (int)w;
    size_t wb = tq_kv_attention_workspace_size(c, 0, H, 1, 1);
    void *work = malloc(wb);
    *st = work ? tq_kv_attention(c, 0, q, H, 1, &p, NULL, work, wb, out, H * D) : TQ_ERR_NOMEM;
    free(work);
    return *st == TQ_OK;
}

/* Windowed layers (layer_windows): pages below the kept range are recycled and memory stays
 * flat, decode attention over the window equals the same cache without one (bit for bit where
 * the compressed history is the same; within the fast/reference tolerance where a prefill was
 * dropped before its first compression, which moves the key mean), and what the dropped
 * positions rule out fails with TQ_ERR_INVALID. */
static void test_windowed(void) {
    static const char *schemes[] = {"f16", "q8_0", "k=3:v=2:prefill_raw=0", "turbo4", "turbo3:window=64"};
    const size_t W = 100, N = 3000, hold_max = W + TQ_KV_WINDOW_SLACK + 3 * TQ_KV_PAGE_TOKENS;
    float q[H * D], o1[H * D], o2[H * D], o3[H * D];
    for (int i = 0; i < H * D; i++) q[i] = grand() * 0.2f;
    for (size_t si = 0; si < sizeof schemes / sizeof *schemes; si++) {
        const char *sch = schemes[si];
        int exact = si < 3;
        tq_kv_cache_config cfg;
        tq_kv_cache_config_init(&cfg, 1, H, D, D);
        CHECK(tq_kv_scheme_parse(sch, &cfg.scheme, NULL, 0) == TQ_OK);
        tq_kv_cache *cf = NULL, *cw = NULL;
        CHECK(tq_kv_cache_create(&cf, &cfg) == TQ_OK);
        size_t win[1] = {W};
        cfg.layer_windows = win;
        cfg.reserve_tokens = N;
        CHECK(tq_kv_cache_create(&cw, &cfg) == TQ_OK);
        if (!cf || !cw) continue;
        /* A 500-token prefill, then single tokens. */
        CHECK(tq_kv_cache_append(cf, 0, kat(0), vat(0), 500) == TQ_OK);
        CHECK(tq_kv_cache_append(cw, 0, kat(0), vat(0), 500) == TQ_OK);
        size_t alloc_mid = 0;
        tq_status st;
        for (size_t t = 500; t < N; t++) {
            CHECK(tq_kv_cache_append(cf, 0, kat(t % NT), vat(t % NT), 1) == TQ_OK);
            CHECK(tq_kv_cache_append(cw, 0, kat(t % NT), vat(t % NT), 1) == TQ_OK);
            if (t % 211 != 0 && t != N - 1) continue;
            CHECK_MSG(attend(cw, W, q, o1, &st), "%s t %zu: %s", sch, t, tq_error_name(st));
            CHECK(attend(cf, W, q, o2, &st));
            CHECK(tq_kv_attention_ref(cw, 0, q, H, 1, &(tq_attn_params){.struct_size = sizeof(tq_attn_params), .scale = 1.0f / sqrtf(D), .causal = 1, .sliding_window = (int)W}, o3, H * D) == TQ_OK);
            double e = 0.0;
            for (int i = 0; i < H * D; i++) e = fmax(e, fabs((double)o1[i] - o3[i]));
            CHECK_MSG(e <= 2e-4, "%s t %zu: windowed fast vs reference %g", sch, t, e);
            if (exact) CHECK_MSG(memcmp(o1, o2, sizeof o1) == 0, "%s t %zu", sch, t);
            tq_kv_memory m;
            CHECK(tq_kv_cache_memory(cw, &m, sizeof m) == TQ_OK);
            CHECK_MSG(m.tokens <= hold_max, "%s: holds %zu tokens", sch, m.tokens);
            if (t >= 1500 && !alloc_mid) alloc_mid = m.allocated_bytes;
            if (alloc_mid) CHECK_MSG(m.allocated_bytes == alloc_mid, "%s: memory grew %zu -> %zu", sch, alloc_mid, m.allocated_bytes);
        }
        size_t dr = tq_kv_cache_dropped_length(cw, 0);
        CHECK(dr > 0 && dr % TQ_KV_PAGE_TOKENS == 0 && dr + W + TQ_KV_WINDOW_SLACK <= N);
        CHECK(tq_kv_cache_dropped_length(cf, 0) == 0);
        /* What the dropped positions rule out. */
        float row[2 * H * D];
        CHECK(tq_kv_cache_read(cw, 0, dr - 1, 1, row, H * D, row + H * D, H * D) == TQ_ERR_INVALID);
        CHECK(tq_kv_cache_read(cw, 0, dr, 1, row, H * D, row + H * D, H * D) == TQ_OK);
        CHECK(tq_kv_cache_read(cw, 0, dr, 1, row, H * D - 1, row + H * D, H * D) == TQ_ERR_CAPACITY);
        CHECK(tq_kv_cache_read(cw, 0, dr, 1, row, H * D, row + H * D, H * D - 1) == TQ_ERR_CAPACITY);
        CHECK(!attend(cw, 0, q, o1, &st) && st == TQ_ERR_INVALID);
        CHECK(!attend(cw, N, q, o1, &st) && st == TQ_ERR_INVALID);
        CHECK(tq_kv_cache_save_bound(cw) == 0);
        uint8_t small[64];
        size_t wr;
        CHECK(tq_kv_cache_save_memory(cw, small, sizeof small, &wr) == TQ_ERR_STATE);
        tq_kv_cache *cv = NULL;
        CHECK(tq_kv_cache_convert(cw, &cfg.scheme, &cv) == TQ_ERR_STATE && cv == NULL);
        /* Rewinding: by the slack is fine, past the kept range is refused, to 0 resets. */
        CHECK(tq_kv_cache_truncate(cw, N - TQ_KV_WINDOW_SLACK) == TQ_OK);
        CHECK(tq_kv_cache_truncate(cf, N - TQ_KV_WINDOW_SLACK) == TQ_OK);
        CHECK(tq_kv_cache_append(cw, 0, kat(7), vat(7), 1) == TQ_OK);
        CHECK(tq_kv_cache_append(cf, 0, kat(7), vat(7), 1) == TQ_OK);
        CHECK(attend(cw, W, q, o1, &st) && attend(cf, W, q, o2, &st));
        if (exact) CHECK(memcmp(o1, o2, sizeof o1) == 0);
        CHECK(tq_kv_cache_truncate(cw, dr + W / 2) == TQ_ERR_INVALID);
        CHECK(tq_kv_cache_length(cw, 0) == N - TQ_KV_WINDOW_SLACK + 1);
        CHECK(tq_kv_cache_truncate(cw, 0) == TQ_OK && tq_kv_cache_dropped_length(cw, 0) == 0);
        tq_kv_cache *fresh = NULL;
        cfg.layer_windows = NULL;
        cfg.reserve_tokens = 0;
        CHECK(tq_kv_cache_create(&fresh, &cfg) == TQ_OK);
        for (size_t t = 0; fresh && t < 400; t += 100) {
            CHECK(tq_kv_cache_append(cw, 0, kat(t), vat(t), 100) == TQ_OK);
            CHECK(tq_kv_cache_append(fresh, 0, kat(t), vat(t), 100) == TQ_OK);
        }
        CHECK_MSG(fresh && same_state(cw, fresh), "%s: reset then re-append", sch);
        tq_kv_cache_free(fresh);
        tq_kv_cache_free(cf);
        tq_kv_cache_free(cw);
    }
}

/* tq_kv_cache_trim: a long raw prefill, then the first decode step compresses it; the raw
 * pages it used stay spare (allocated) until trim frees them. Trim changes nothing the cache
 * holds (byte-equal read-back against an untrimmed twin), and appends go on after it. */
static void test_trim(void) {
    tq_kv_cache *a = cache_for("turbo3", 1), *b = cache_for("turbo3", 1);
    CHECK(a != NULL && b != NULL);
    if (!a || !b) return;
    const size_t prompt = 600;
    CHECK(tq_kv_cache_append(a, 0, kat(0), vat(0), prompt) == TQ_OK);
    CHECK(tq_kv_cache_append(b, 0, kat(0), vat(0), prompt) == TQ_OK);
    CHECK(tq_kv_cache_append(a, 0, kat(prompt), vat(prompt), 1) == TQ_OK); /* decode: compresses */
    CHECK(tq_kv_cache_append(b, 0, kat(prompt), vat(prompt), 1) == TQ_OK);
    CHECK(tq_kv_cache_compressed_length(a, 0) > 0);
    tq_kv_memory before, after;
    CHECK(tq_kv_cache_memory(a, &before, sizeof before) == TQ_OK);
    CHECK(tq_kv_cache_trim(a) == TQ_OK);
    CHECK(tq_kv_cache_memory(a, &after, sizeof after) == TQ_OK);
    printf("  turbo3, %zu raw tokens compressed: allocated %zu -> %zu bytes (data %zu)\n", prompt,
           before.allocated_bytes, after.allocated_bytes, after.data_bytes);
    CHECK_MSG(after.allocated_bytes < before.allocated_bytes, "trim freed nothing");
    const tq_kv_layer *l = &a->layers[0]; /* what is left: the raw pages decode needs */
    const size_t keep = ((size_t)a->cfg.scheme.raw_window + (size_t)a->cfg.scheme.batch) / TQ_KV_P + 2;
    CHECK_MSG(l->n_rpages + l->n_rspare <= keep, "%zu raw pages left, %zu needed", l->n_rpages + l->n_rspare, keep);
    CHECK(after.data_bytes == before.data_bytes);
    CHECK(same_state(a, b));
    for (size_t t = prompt + 1; t < NT; t++) { /* decode goes on, equal to the twin */
        CHECK(tq_kv_cache_append(a, 0, kat(t), vat(t), 1) == TQ_OK);
        CHECK(tq_kv_cache_append(b, 0, kat(t), vat(t), 1) == TQ_OK);
    }
    CHECK(same_state(a, b));
    CHECK(tq_kv_cache_trim(a) == TQ_OK); /* twice: nothing more to free */
    CHECK(tq_kv_cache_trim(NULL) == TQ_ERR_NULL);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
}

/* The whole state of a cache as its cache file's bytes (NULL on failure; *n its length). */
static uint8_t *saved(const tq_kv_cache *c, size_t *n) {
    *n = tq_kv_cache_save_bound(c);
    uint8_t *b = *n ? malloc(*n) : NULL;
    size_t w = 0;
    if (b && (tq_kv_cache_save_memory(c, b, *n, &w) != TQ_OK || w != *n)) free(b), b = NULL;
    return b;
}

static int same_bytes(const tq_kv_cache *a, const tq_kv_cache *b) {
    size_t na, nb;
    uint8_t *x = saved(a, &na), *y = saved(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* Compression split over a pool's threads (tq_kv_cache_append_pool, tq_kv_cache_compress_pool)
 * writes the bytes one pass writes — every kind of scheme, trellis codes, sinks, the key split,
 * two layers — and stops at the same token with the same status when a token's norm is beyond
 * fp16. Also run under ThreadSanitizer (test_kvcache_pool). */
static void test_compress_pool(void) {
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 3) == TQ_OK);
    const char *schemes[] = {"turbo3", "turbo4:trellis=1", "turbo3.5", "q4_0r", "q8_0", "turbo2:sink=8"};
    for (size_t si = 0; si < sizeof schemes / sizeof *schemes; si++) {
        tq_kv_cache *a = cache_for(schemes[si], 2), *b = cache_for(schemes[si], 2);
        tq_kv_cache *c = cache_for(schemes[si], 2), *d = cache_for(schemes[si], 2);
        CHECK(a && b && c && d);
        if (!a || !b || !c || !d) break;
        /* a prompt prefilled raw, then the first decode step compresses it */
        for (int l = 0; l < 2; l++) {
            CHECK(tq_kv_cache_append(a, l, kat(0), vat(0), NT - 1) == TQ_OK);
            CHECK(tq_kv_cache_append_pool(b, l, kat(0), vat(0), NT - 1, pool) == TQ_OK);
            CHECK(tq_kv_cache_append(a, l, kat(NT - 1), vat(NT - 1), 1) == TQ_OK);
            CHECK(tq_kv_cache_append_pool(b, l, kat(NT - 1), vat(NT - 1), 1, pool) == TQ_OK);
            CHECK(tq_kv_cache_append(c, l, kat(0), vat(0), NT) == TQ_OK);
            CHECK(tq_kv_cache_append(d, l, kat(0), vat(0), NT) == TQ_OK);
        }
        CHECK(tq_kv_cache_compressed_length(b, 1) >= 640);
        CHECK_MSG(same_bytes(a, b), "%s: append_pool wrote other bytes", schemes[si]);
        CHECK(tq_kv_cache_compress(c, -1) == TQ_OK && tq_kv_cache_compress_pool(d, -1, pool) == TQ_OK);
        CHECK(tq_kv_cache_compressed_length(d, 0) >= 640);
        CHECK_MSG(same_bytes(c, d), "%s: compress_pool wrote other bytes", schemes[si]);
        tq_kv_cache_free(a), tq_kv_cache_free(b), tq_kv_cache_free(c), tq_kv_cache_free(d);
    }
    /* token 300 of 600 has a key norm beyond fp16 (its coordinates are not): both stop there */
    static float kbig[600 * H * D];
    memcpy(kbig, Kd, sizeof kbig);
    for (int i = 0; i < D; i++) kbig[300 * H * D + i] = 30000.0f;
    tq_kv_cache *a = cache_for("turbo3", 1), *b = cache_for("turbo3", 1);
    CHECK(a && b);
    if (a && b) {
        CHECK(tq_kv_cache_append(a, 0, kbig, Vd, 600) == TQ_OK && tq_kv_cache_append(b, 0, kbig, Vd, 600) == TQ_OK);
        tq_status sa = tq_kv_cache_compress(a, 0), sb = tq_kv_cache_compress_pool(b, 0, pool);
        CHECK_MSG(sa == TQ_ERR_RANGE && sb == sa, "statuses %s / %s", tq_error_name(sa), tq_error_name(sb));
        CHECK_MSG(tq_kv_cache_compressed_length(a, 0) == 300 && tq_kv_cache_compressed_length(b, 0) == 300,
                  "compressed %zu / %zu", tq_kv_cache_compressed_length(a, 0), tq_kv_cache_compressed_length(b, 0));
        CHECK(same_state(a, b));
    }
    tq_kv_cache_free(a), tq_kv_cache_free(b);
    tq_threadpool_free(pool);
}

int main(int argc, char **argv) {
    /* Fast vs reference within fp32 rounding: float key scores (test_attention.c tests the
     * integer ones). Read at the first attention call. */
    setenv("TQ_INT8_SCORES", "0", 1);
    make_data();
    if (argc > 1 && !strcmp(argv[1], "pool")) { /* the ThreadSanitizer run */
        RUN_TEST(test_compress_pool);
        return test_report();
    }
    RUN_TEST(test_parse);
    RUN_TEST(test_parse_numbers);
    RUN_TEST(test_bytes);
    RUN_TEST(test_two_phase);
    RUN_TEST(test_prefill_then_decode_equals_all_at_once);
    RUN_TEST(test_key_mean_tokens);
    RUN_TEST(test_key_scale_state);
    RUN_TEST(test_key_split);
    RUN_TEST(test_truncate);
    RUN_TEST(test_convert);
    RUN_TEST(test_layer_schemes);
    RUN_TEST(test_errors);
    RUN_TEST(test_rotated_formats);
    RUN_TEST(test_windowed);
    RUN_TEST(test_trim);
    RUN_TEST(test_compress_pool);
    return test_report();
}

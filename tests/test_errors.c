/* Every documented error path of the public API returns its code, and every code has a name. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "turboquant.h"

static void test_names(void) {
    for (int s = 0; s <= TQ_ERR_STATE; s++) {
        const char *n = tq_error_name((tq_status)s);
        CHECK(n && strncmp(n, "TQ_", 3) == 0 && strcmp(n, "TQ_ERR_UNKNOWN") != 0);
        CHECK(tq_error_message((tq_status)s) && *tq_error_message((tq_status)s));
        for (int t = 0; t < s; t++) CHECK(strcmp(n, tq_error_name((tq_status)t)) != 0);
    }
    CHECK(strcmp(tq_error_name((tq_status)999), "TQ_ERR_UNKNOWN") == 0);
    CHECK(strcmp(tq_error_name((tq_status)-1), "TQ_ERR_UNKNOWN") == 0);
    CHECK(strcmp(tq_error_name(TQ_ERR_BITS), "TQ_ERR_BITS") == 0);
    /* Pinned values. */
    CHECK(TQ_OK == 0 && TQ_ERR_NULL == 1 && TQ_ERR_CAPACITY == 5 && TQ_ERR_NONFINITE == 6 &&
          TQ_ERR_CORRUPT == 10 && TQ_ERR_STATE == 18);
    CHECK(tq_version_number() == TQ_VERSION_NUMBER);
    CHECK(strcmp(tq_version_string(), TQ_VERSION_STRING) == 0);
}

static tq_status create(int dim, float bits, tq_variant v, tq_codec **c) {
    tq_codec_config cfg;
    tq_codec_config_init(&cfg, dim, bits, v);
    return tq_codec_create(c, &cfg);
}

static void test_config_errors(void) {
    tq_codec *c = (tq_codec *)1;
    tq_codec_config cfg;
    CHECK(tq_codec_create(NULL, NULL) == TQ_ERR_NULL);
    CHECK(tq_codec_create(&c, NULL) == TQ_ERR_NULL && c == NULL);
    CHECK(create(0, 4, TQ_VARIANT_MSE, &c) == TQ_ERR_DIM);
    CHECK(create(1, 4, TQ_VARIANT_MSE, &c) == TQ_ERR_DIM);
    CHECK(create(1025, 4, TQ_VARIANT_MSE, &c) == TQ_ERR_DIM);
    CHECK(create(-5, 4, TQ_VARIANT_MSE, &c) == TQ_ERR_DIM);
    CHECK(create(128, 0.5f, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(128, 8.5f, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(128, NAN, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(128, INFINITY, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(128, 3.3f, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(100, 3.333f, TQ_VARIANT_MSE, &c) == TQ_ERR_BITS);
    CHECK(create(128, 4, (tq_variant)5, &c) == TQ_ERR_VARIANT);
    tq_codec_config_init(&cfg, 128, 4, TQ_VARIANT_PROD);
    cfg.norm_correction = 1;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_INVALID);
    tq_codec_config_init(&cfg, 128, 4, TQ_VARIANT_MSE);
    cfg.norm_format = (tq_norm_format)9;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_VARIANT);
    tq_codec_config_init(&cfg, 128, 4, TQ_VARIANT_MSE);
    cfg.rotation = (tq_rotation_kind)9;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_VARIANT);
    tq_codec_config_init(&cfg, 96, 4, TQ_VARIANT_MSE);
    cfg.rotation = TQ_ROTATION_HADAMARD;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_DIM);
    tq_codec_config_init(&cfg, 128, 3.5f, TQ_VARIANT_MSE);
    cfg.split = (tq_split)4;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_VARIANT);
    cfg.split = TQ_SPLIT_ENERGY;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_INVALID); /* no energy */
    float energy[128];
    for (int i = 0; i < 128; i++) energy[i] = 1;
    energy[3] = NAN;
    cfg.channel_energy = energy;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_INVALID);
    energy[3] = -1;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_INVALID);
    energy[3] = 1;
    tq_codec_config_init(&cfg, 128, 3.0f + 1.0f / 128, TQ_VARIANT_MSE); /* 1 channel group */
    cfg.split = TQ_SPLIT_ENERGY;
    cfg.channel_energy = energy;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_BITS);
    tq_codec_config_init(&cfg, 128, 4, TQ_VARIANT_PROD);
    cfg.split = TQ_SPLIT_ENERGY;
    CHECK(tq_codec_create(&c, &cfg) == TQ_ERR_INVALID);
    size_t bytes = 0;
    CHECK(tq_codec_config_bytes(NULL, &bytes) == TQ_ERR_NULL);
    tq_codec_config_init(&cfg, 128, 4, TQ_VARIANT_MSE);
    CHECK(tq_codec_config_bytes(&cfg, NULL) == TQ_ERR_NULL);
    CHECK(tq_codec_config_bytes(&cfg, &bytes) == TQ_OK && bytes == 66);
    cfg.bits = 9;
    CHECK(tq_codec_config_bytes(&cfg, &bytes) == TQ_ERR_BITS);
    tq_codec_free(NULL);
    CHECK(tq_codec_bytes_per_vector(NULL) == 0);
}

static void test_call_errors(void) {
    tq_codec *c;
    CHECK(create(64, 3, TQ_VARIANT_MSE, &c) == TQ_OK);
    size_t bpv = tq_codec_bytes_per_vector(c);
    float x[64 * 2], y[64 * 2], prep[64], scores[2], w[2] = {1, 1}, acc[64];
    uint8_t codes[200];
    for (int i = 0; i < 128; i++) x[i] = (float)i - 60;
    CHECK(tq_codec_encode(NULL, x, 1, codes, sizeof codes) == TQ_ERR_NULL);
    CHECK(tq_codec_encode(c, NULL, 1, codes, sizeof codes) == TQ_ERR_NULL);
    CHECK(tq_codec_encode(c, x, 1, NULL, sizeof codes) == TQ_ERR_NULL);
    CHECK(tq_codec_encode(c, x, 0, NULL, 0) == TQ_OK);
    /* Capacity: one byte short writes nothing. */
    memset(codes, 0xAB, sizeof codes);
    CHECK(tq_codec_encode(c, x, 2, codes, 2 * bpv - 1) == TQ_ERR_CAPACITY);
    CHECK(codes[0] == 0xAB && codes[2 * bpv - 1] == 0xAB);
    CHECK(tq_codec_encode(c, x, 2, codes, 2 * bpv) == TQ_OK);
    CHECK(codes[2 * bpv] == 0xAB); /* never past the end */
    CHECK(tq_codec_decode(c, codes, 2, y, 127) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_decode(c, NULL, 2, y, 128) == TQ_ERR_NULL);
    CHECK(tq_codec_decode(c, codes, 2, NULL, 128) == TQ_ERR_NULL);
    /* Non-finite input: the vectors before it are encoded, nothing for it. */
    uint8_t keep[64];
    memcpy(keep, codes + bpv, bpv);
    x[64 + 5] = NAN;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_ERR_NONFINITE);
    CHECK(memcmp(keep, codes + bpv, bpv) == 0);
    x[64 + 5] = INFINITY;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_ERR_NONFINITE);
    x[64 + 5] = -INFINITY;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_ERR_NONFINITE);
    x[64 + 5] = 5;
    /* Range: a norm beyond fp16, and a squared norm that overflows float. */
    x[64 + 5] = 1e5f;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_ERR_RANGE);
    x[64 + 5] = 3e38f;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_ERR_RANGE);
    x[64 + 5] = 5;
    CHECK(tq_codec_encode(c, x, 2, codes, sizeof codes) == TQ_OK);
    /* Queries. */
    CHECK(tq_codec_prepare_query(c, x, prep, 63) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_prepare_query(c, NULL, prep, 64) == TQ_ERR_NULL);
    float bad[64];
    memcpy(bad, x, sizeof bad);
    bad[0] = NAN;
    CHECK(tq_codec_prepare_query(c, bad, prep, 64) == TQ_ERR_NONFINITE);
    CHECK(tq_codec_prepare_query(c, x, prep, 64) == TQ_OK);
    CHECK(tq_codec_scores(c, NULL, codes, 2, scores, 2) == TQ_ERR_NULL);
    CHECK(tq_codec_scores(c, prep, codes, 2, scores, 1) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_scores(c, prep, codes, 2, scores, 2) == TQ_OK);
    CHECK(tq_codec_accum_zero(c, acc, 63) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_accum_zero(c, acc, 64) == TQ_OK);
    CHECK(tq_codec_accumulate(c, codes, 2, NULL, acc, 64) == TQ_ERR_NULL);
    CHECK(tq_codec_accumulate(c, codes, 2, w, acc, 63) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_accumulate(c, codes, 2, w, acc, 64) == TQ_OK);
    CHECK(tq_codec_accum_finish(c, acc, 64, NULL, 64) == TQ_ERR_NULL);
    CHECK(tq_codec_accum_finish(c, acc, 63, y, 64) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_accum_finish(c, acc, 64, y, 63) == TQ_ERR_CAPACITY);
    CHECK(tq_codec_weighted_sum(NULL, codes, 2, w, y, 64) == TQ_ERR_NULL);
    CHECK(tq_codec_weighted_sum(c, codes, 2, w, y, 63) == TQ_ERR_CAPACITY);
    /* Corrupt norms: decode writes zeros for that vector and reports it. */
    uint16_t nan16 = 0x7E00, neg16 = 0xBC00; /* NaN, −1.0 */
    memcpy(codes + bpv - 2, &nan16, 2);
    for (int i = 0; i < 64; i++) y[i] = 7;
    CHECK(tq_codec_decode(c, codes, 2, y, 128) == TQ_ERR_CORRUPT);
    CHECK(y[0] == 0 && y[63] == 0);
    CHECK(tq_codec_scores(c, prep, codes, 2, scores, 2) == TQ_ERR_CORRUPT);
    CHECK(tq_codec_weighted_sum(c, codes, 2, w, y, 128) == TQ_ERR_CORRUPT);
    memcpy(codes + bpv - 2, &neg16, 2);
    CHECK(tq_codec_decode(c, codes, 2, y, 128) == TQ_ERR_CORRUPT);
    tq_codec_free(c);
}

static void test_kernel_selection(void) {
    CHECK(tq_set_kernels((tq_kernels_kind)17) == TQ_ERR_VARIANT);
    CHECK(tq_set_kernels(TQ_KERNELS_REF) == TQ_OK);
    CHECK(strcmp(tq_kernels_name(), "ref") == 0);
    CHECK(tq_kernels_supported(TQ_KERNELS_REF));
    if (!tq_kernels_supported(TQ_KERNELS_AVX512))
        CHECK(tq_set_kernels(TQ_KERNELS_AVX512) == TQ_ERR_UNSUPPORTED);
    else
        CHECK(tq_set_kernels(TQ_KERNELS_AVX512) == TQ_OK);
    CHECK(tq_set_kernels(TQ_KERNELS_AUTO) == TQ_OK);
}

static void test_f16(void) {
    CHECK(tq_f32_to_f16(1.0f) == 0x3C00);
    CHECK(tq_f32_to_f16(-2.0f) == 0xC000);
    CHECK(tq_f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(tq_f32_to_f16(65520.0f) == 0x7C00); /* rounds to Inf */
    CHECK(tq_f32_to_f16(5.9604645e-08f) == 0x0001);
    CHECK(tq_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00); /* tie to even */
    CHECK(tq_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02);
    CHECK(tq_f32_to_f16(2.98023224e-08f) == 0x0000);    /* 2^-25: tie to even zero */
    CHECK(tq_f32_to_f16(-2.98023224e-08f) == 0x8000);
    CHECK((tq_f32_to_f16(NAN) & 0x7C00) == 0x7C00 && (tq_f32_to_f16(NAN) & 0x3FF));
    /* Round trip of every finite half and of Inf; every NaN half stays a NaN. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t back = tq_f32_to_f16(tq_f16_to_f32((uint16_t)h));
        int nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        if (nan ? (back & 0x7C00) != 0x7C00 || (back & 0x3FF) == 0 : back != h) bad++;
    }
    CHECK(bad == 0);
}

int main(void) {
    RUN_TEST(test_names);
    RUN_TEST(test_config_errors);
    RUN_TEST(test_call_errors);
    RUN_TEST(test_kernel_selection);
    RUN_TEST(test_f16);
    return test_report();
}

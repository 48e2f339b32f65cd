/*
 * Golden codes: the packed bytes of fixed inputs under fixed configurations, committed in
 * tests/golden/codes_v1.bin, so that the code format (doc/format.md) cannot drift unnoticed —
 * a change to the PRNG, rotation, codebooks, packing or norm handling moves these bytes.
 * TQ_REGEN_GOLDEN=1 rewrites the file (only for a deliberate, versioned format change).
 *
 * File layout: for each case in order, a u32 LE byte count then the bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "turboquant.h"

#define GOLDEN_PATH "tests/golden/codes_v1.bin"
#define N_VEC 5

typedef struct gcase {
    const char *name;
    int dim;
    float bits;
    tq_variant variant;
    int norm_correction;
    tq_rotation_kind rotation;
    tq_norm_format norm_format;
    tq_split split;
} gcase;

static const gcase cases[] = {
    {"mse d128 b4", 128, 4, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d128 b3 plain", 128, 3, TQ_VARIANT_MSE, 0, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d128 b3.5", 128, 3.5f, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d64 b2 f32", 64, 2, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F32, TQ_SPLIT_FIXED},
    {"mse d256 b8", 256, 8, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d80 b3 block", 80, 3, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d96 b5 dense", 96, 5, TQ_VARIANT_MSE, 1, TQ_ROTATION_DENSE, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"mse d128 b2.5 energy", 128, 2.5f, TQ_VARIANT_MSE, 1, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_ENERGY},
    {"prod d128 b3", 128, 3, TQ_VARIANT_PROD, 0, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
    {"prod d64 b1", 64, 1, TQ_VARIANT_PROD, 0, TQ_ROTATION_AUTO, TQ_NORM_F16, TQ_SPLIT_FIXED},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* Inputs from a formula, not a PRNG, so they are obviously machine-independent; values are
 * chosen away from float corner cases and include one loud channel. */
static void input(float *x, int dim, int v) {
    for (int i = 0; i < dim; i++) {
        double t = sin(0.37 * (i + 1) * (v + 1) + 0.11 * v) + 0.25 * cos(1.7 * i - v);
        x[i] = (float)(t * (1.0 + v));
    }
    x[(7 * v + 3) % dim] *= 9.0f;
}

static tq_codec *codec_for(const gcase *g) {
    tq_codec_config cfg;
    tq_codec_config_init(&cfg, g->dim, g->bits, g->variant);
    cfg.norm_correction = g->norm_correction;
    cfg.rotation = g->rotation;
    cfg.norm_format = g->norm_format;
    cfg.split = g->split;
    cfg.seed = 20261201;
    float energy[TQ_MAX_DIM];
    for (int i = 0; i < g->dim; i++) energy[i] = (float)((i * 13) % 17);
    cfg.channel_energy = energy;
    tq_codec *c = NULL;
    return tq_codec_create(&c, &cfg) == TQ_OK ? c : NULL;
}

static int encode_case(const gcase *g, uint8_t **out, size_t *len) {
    tq_codec *c = codec_for(g);
    if (!c) return 0;
    size_t bpv = tq_codec_bytes_per_vector(c);
    float *x = malloc(sizeof(float) * (size_t)g->dim * N_VEC);
    for (int v = 0; v < N_VEC; v++) input(x + (size_t)v * (size_t)g->dim, g->dim, v);
    *len = bpv * N_VEC;
    *out = malloc(*len);
    int ok = tq_codec_encode(c, x, N_VEC, *out, *len) == TQ_OK;
    free(x);
    tq_codec_free(c);
    return ok;
}

static void test_golden_codes(void) {
    const char *regen = getenv("TQ_REGEN_GOLDEN");
    if (regen && *regen == '1') {
        FILE *f = fopen(GOLDEN_PATH, "wb");
        CHECK(f != NULL);
        if (!f) return;
        for (int k = 0; k < N_CASES; k++) {
            uint8_t *b;
            size_t len;
            CHECK(encode_case(&cases[k], &b, &len));
            uint8_t hdr[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
            fwrite(hdr, 1, 4, f);
            fwrite(b, 1, len, f);
            free(b);
        }
        fclose(f);
        SKIP_TEST("TQ_REGEN_GOLDEN=1: rewrote %s, compared nothing", GOLDEN_PATH);
    }
    FILE *f = fopen(GOLDEN_PATH, "rb");
    CHECK_MSG(f != NULL, "cannot open %s (run from the repository root)", GOLDEN_PATH);
    if (!f) return;
    for (int k = 0; k < N_CASES; k++) {
        uint8_t hdr[4];
        CHECK(fread(hdr, 1, 4, f) == 4);
        size_t want_len = (size_t)hdr[0] | ((size_t)hdr[1] << 8) | ((size_t)hdr[2] << 16) | ((size_t)hdr[3] << 24);
        uint8_t *want = malloc(want_len ? want_len : 1);
        CHECK(fread(want, 1, want_len, f) == want_len);
        uint8_t *got;
        size_t len;
        CHECK(encode_case(&cases[k], &got, &len));
        CHECK_MSG(len == want_len, "%s: %zu bytes, golden %zu", cases[k].name, len, want_len);
        if (len == want_len) {
            size_t diff = 0;
            for (size_t i = 0; i < len; i++) diff += got[i] != want[i];
            CHECK_MSG(diff == 0, "%s: %zu of %zu bytes differ from the golden file", cases[k].name,
                      diff, len);
        }
        free(want), free(got);
    }
    fclose(f);
}

/* Decoding the golden bytes gives back the inputs within the codec's error. */
static void test_golden_decodes(void) {
    for (int k = 0; k < N_CASES; k++) {
        const gcase *g = &cases[k];
        uint8_t *b;
        size_t len;
        CHECK(encode_case(g, &b, &len));
        tq_codec *c = codec_for(g);
        CHECK(c != NULL);
        if (!c) continue;
        float x[TQ_MAX_DIM], y[TQ_MAX_DIM * N_VEC];
        CHECK(tq_codec_decode(c, b, N_VEC, y, sizeof y / sizeof y[0]) == TQ_OK);
        for (int v = 0; v < N_VEC; v++) {
            input(x, g->dim, v);
            double e = 0, n = 0;
            for (int i = 0; i < g->dim; i++) {
                double dd = x[i] - y[(size_t)v * (size_t)g->dim + (size_t)i];
                e += dd * dd, n += (double)x[i] * x[i];
            }
            double limit = g->variant == TQ_VARIANT_PROD ? 2.0 : 0.5; /* 1–8 bits */
            CHECK_MSG(e / n < limit, "%s vec %d: rel err %.3g", g->name, v, e / n);
        }
        tq_codec_free(c);
        free(b);
    }
}

int main(void) {
    RUN_TEST(test_golden_codes);
    RUN_TEST(test_golden_decodes);
    return test_report();
}

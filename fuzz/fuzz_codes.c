/*
 * libFuzzer target: arbitrary bytes decoded as TurboQuant codes.
 *
 * The first two bytes pick a configuration (dim, bits, variant, norm format); the rest are
 * records. Decode, scores and weighted sums must never crash or read out of bounds, and what
 * they return with TQ_OK (or TQ_ERR_CORRUPT for bad norms) must be finite.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "turboquant.h"

static const int dims[] = {2, 3, 16, 64, 80, 96, 128, 256};
static const float bits[] = {1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 5, 6, 7, 8};
#define N_DIMS 8
#define N_BITS 11

static tq_codec *cache[N_DIMS][N_BITS][2][2];

static tq_codec *codec_for(uint8_t a, uint8_t b) {
    int di = a % N_DIMS, bi = (a / N_DIMS) % N_BITS, v = b & 1, nf = (b >> 1) & 1;
    if (!cache[di][bi][v][nf]) {
        tq_codec_config cfg;
        tq_codec_config_init(&cfg, dims[di], bits[bi], v ? TQ_VARIANT_PROD : TQ_VARIANT_MSE);
        cfg.norm_format = nf ? TQ_NORM_F32 : TQ_NORM_F16;
        if (tq_codec_create(&cache[di][bi][v][nf], &cfg) != TQ_OK) return NULL;
    }
    return cache[di][bi][v][nf];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    tq_codec *c = codec_for(data[0], data[1]);
    if (!c) return 0;
    size_t bpv = tq_codec_bytes_per_vector(c);
    size_t n = (size - 2) / bpv;
    if (n > 64) n = 64;
    if (n == 0) return 0;
    /* Copy to an exact-size heap buffer so ASan catches any read past the records. */
    uint8_t *codes = malloc(n * bpv);
    memcpy(codes, data + 2, n * bpv);
    tq_codec_config cfg;
    if (tq_codec_get_config(c, &cfg, sizeof cfg) != TQ_OK) abort();
    int dim = cfg.dim;
    float *x = malloc(sizeof(float) * n * (size_t)dim);
    tq_status st = tq_codec_decode(c, codes, n, x, n * (size_t)dim);
    if (st != TQ_OK && st != TQ_ERR_CORRUPT) abort();
    for (size_t i = 0; i < n * (size_t)dim; i++)
        if (!isfinite(x[i])) abort();

    float q[TQ_MAX_DIM], prep[2 * TQ_MAX_DIM], scores[64], w[64], out[TQ_MAX_DIM];
    for (int i = 0; i < dim; i++) q[i] = (float)((i % 7) - 3);
    for (size_t t = 0; t < n; t++) w[t] = 1.0f / (float)(t + 1);
    if (tq_codec_prepare_query(c, q, prep, 2 * TQ_MAX_DIM) != TQ_OK) abort();
    st = tq_codec_scores(c, prep, codes, n, scores, 64);
    if (st != TQ_OK && st != TQ_ERR_CORRUPT) abort();
    st = tq_codec_weighted_sum(c, codes, n, w, out, TQ_MAX_DIM);
    if (st != TQ_OK && st != TQ_ERR_CORRUPT) abort();
    for (int i = 0; i < dim; i++)
        if (!isfinite(out[i])) abort();
    free(codes);
    free(x);
    return 0;
}

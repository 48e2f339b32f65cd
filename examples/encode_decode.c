/* The README's example as a program: encode 1000 random vectors at 3.5 bits, decode them,
 * score a query without decoding, and print the error and the bytes saved. Built against an
 * installed libturboquant by tests/test_install.sh (pkg-config turboquant). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <turboquant.h>

int main(void) {
    enum { N = 1000, D = 128 };
    tq_codec_config cfg;
    tq_codec_config_init(&cfg, D, 3.5f, TQ_VARIANT_MSE);
    tq_codec *codec;
    tq_status st = tq_codec_create(&codec, &cfg);
    if (st != TQ_OK) {
        fprintf(stderr, "tq_codec_create: %s\n", tq_error_name(st));
        return 1;
    }
    size_t bpv = tq_codec_bytes_per_vector(codec);
    float *x = malloc(sizeof(float) * N * D), *y = malloc(sizeof(float) * N * D);
    unsigned char *codes = malloc(bpv * N);
    float q[D], prep[D], *scores = malloc(sizeof(float) * N);
    unsigned s = 1;
    for (int i = 0; i < N * D; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((double)(s >> 8) / (1 << 24) - 0.5);
    }
    for (int i = 0; i < D; i++) q[i] = x[i];
    if ((st = tq_codec_encode(codec, x, N, codes, bpv * N)) != TQ_OK ||
        (st = tq_codec_decode(codec, codes, N, y, (size_t)N * D)) != TQ_OK ||
        (st = tq_codec_prepare_query(codec, q, prep, D)) != TQ_OK ||
        (st = tq_codec_scores(codec, prep, codes, N, scores, N)) != TQ_OK) {
        fprintf(stderr, "codec call failed: %s\n", tq_error_name(st));
        return 1;
    }
    double err = 0, norm = 0, ip = 0;
    for (int i = 0; i < N * D; i++) err += (x[i] - y[i]) * (x[i] - y[i]), norm += x[i] * x[i];
    for (int i = 0; i < D; i++) ip += q[i] * x[i];
    printf("libturboquant %s, kernels %s: %d vectors of %d floats, %zu bytes each (fp16: %d)\n",
           tq_version_string(), tq_kernels_name(), N, D, bpv, 2 * D);
    printf("relative MSE %.4f, <q, x0> = %.4f, scored on codes = %.4f\n", err / norm, ip, scores[0]);
    free(x), free(y), free(codes), free(scores);
    tq_codec_free(codec);
    return err / norm < 0.05 ? 0 : 1;
}

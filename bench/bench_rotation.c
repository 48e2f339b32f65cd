/*
 * Rotation and split measurements behind doc/rotation.md and doc/codec.md ("Fractional bits"):
 *  1. for non-power-of-two dims, dense QR vs block Hadamard: 3-bit MSE on random and
 *     structured inputs (averaged over seeds) and ns per forward rotation;
 *  2. fractional bits, fixed vs energy split, on isotropic data and on data with loud channels.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "turboquant.h"

static uint64_t st = 7;
static double unif(void) {
    uint64_t z = (st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
static double gauss(void) {
    for (;;) {
        double u = 2 * unif() - 1, v = 2 * unif() - 1, s = u * u + v * v;
        if (s > 0 && s < 1) return u * sqrt(-2 * log(s) / s);
    }
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double mse_of(tq_codec *c, const float *x, int n, int d) {
    size_t bpv = tq_codec_bytes_per_vector(c);
    unsigned char *codes = malloc(bpv * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)n * (size_t)d);
    tq_codec_encode(c, x, (size_t)n, codes, bpv * (size_t)n);
    tq_codec_decode(c, codes, (size_t)n, y, (size_t)n * (size_t)d);
    double m = 0;
    for (int v = 0; v < n; v++) {
        double e = 0, nx = 0;
        for (int i = 0; i < d; i++) {
            double a = x[v * d + i], b = y[v * d + i];
            e += (a - b) * (a - b), nx += a * a;
        }
        m += e / nx;
    }
    free(codes), free(y);
    return m / n;
}

static void fill(float *x, int n, int d, int kind, int seed) {
    for (int v = 0; v < n; v++)
        for (int i = 0; i < d; i++) {
            float val = 0;
            if (kind == 0) val = (float)gauss();
            else if (kind == 1) val = (i == (v + seed) % d) ? 1.0f : 0.0f;
            else if (kind == 2) val = 0.5f;
            else val = (float)gauss() * ((i % 29 == 3) ? 50.0f : 1.0f);
            x[v * d + i] = val;
        }
}

int main(void) {
    int dims[] = {80, 96, 112, 160, 192};
    const char *kinds[] = {"random", "one-hot", "constant", "outliers"};
    printf("## non-power-of-two dims, 3-bit MSE (no norm correction), mean over 16 seeds\n");
    printf("%5s %-10s %10s %10s %12s %12s\n", "dim", "input", "dense", "block", "dense ns", "block ns");
    for (int k = 0; k < 5; k++) {
        int d = dims[k];
        const int n = 64;
        float *x = malloc(sizeof(float) * n * (size_t)d);
        double tns[2] = {0, 0};
        for (int kind = 0; kind < 4; kind++) {
            double m[2] = {0, 0};
            for (int s = 0; s < 16; s++) {
                fill(x, n, d, kind, s);
                for (int r = 0; r < 2; r++) {
                    tq_codec_config cfg;
                    tq_codec_config_init(&cfg, d, 3, TQ_VARIANT_MSE);
                    cfg.norm_correction = 0;
                    cfg.seed = 100 + (uint64_t)s;
                    cfg.rotation = r ? TQ_ROTATION_BLOCK_HADAMARD : TQ_ROTATION_DENSE;
                    tq_codec *c;
                    tq_codec_create(&c, &cfg);
                    m[r] += mse_of(c, x, n, d) / 16;
                    tq_codec_free(c);
                }
            }
            if (kind == 0) {
                for (int r = 0; r < 2; r++) {
                    tq_rotation *rot;
                    tq_rotation_create(&rot, d, 1, r ? TQ_ROTATION_BLOCK_HADAMARD : TQ_ROTATION_DENSE);
                    double best = 1e9;
                    for (int rep = 0; rep < 5; rep++) {
                        double t0 = now();
                        for (int it = 0; it < 200; it++) tq_rotation_forward(rot, x, x, (size_t)n);
                        best = fmin(best, (now() - t0) / (200.0 * n) * 1e9);
                    }
                    tns[r] = best;
                    tq_rotation_free(rot);
                }
            }
            printf("%5d %-10s %10.5f %10.5f %12.1f %12.1f\n", d, kinds[kind], m[0], m[1], tns[0], tns[1]);
        }
        free(x);
    }

    printf("\n## fractional bits at d = 128: fixed vs energy split (no norm correction)\n");
    printf("%5s %-26s %10s %10s %8s\n", "bits", "data", "fixed", "energy", "ratio");
    float fr[] = {2.5f, 3.5f};
    for (int f = 0; f < 2; f++)
        for (int data = 0; data < 3; data++) {
            const int d = 128, n = 4000;
            float *x = malloc(sizeof(float) * n * d), energy[128];
            float loud = data == 0 ? 1.0f : data == 1 ? 3.0f : 10.0f;
            for (int v = 0; v < n; v++)
                for (int i = 0; i < d; i++) x[v * d + i] = (float)gauss() * ((i % 8 == 0) ? loud : 1.0f);
            for (int i = 0; i < d; i++) {
                double e = 0;
                for (int v = 0; v < n; v++) e += (double)x[v * d + i] * x[v * d + i];
                energy[i] = (float)(e / n);
            }
            double m[2];
            for (int sp = 0; sp < 2; sp++) {
                tq_codec_config cfg;
                tq_codec_config_init(&cfg, d, fr[f], TQ_VARIANT_MSE);
                cfg.norm_correction = 0;
                cfg.split = sp ? TQ_SPLIT_ENERGY : TQ_SPLIT_FIXED;
                cfg.channel_energy = energy;
                tq_codec *c;
                tq_codec_create(&c, &cfg);
                m[sp] = mse_of(c, x, n, d);
                tq_codec_free(c);
            }
            char label[64];
            snprintf(label, sizeof label, "16 channels x%g, rest x1", loud);
            printf("%5g %-26s %10.5f %10.5f %8.3f\n", fr[f], data == 0 ? "isotropic" : label, m[0], m[1],
                   m[1] / m[0]);
            free(x);
        }
    return 0;
}

/*
 * Nanoseconds per call (and per coordinate) of every kernel, for each table the host supports
 * (ref, avx2, avx512), bits 1..8, n = 128 and 256; then an MSE encode and decode of one vector
 * built from them (sumsq + 2 rht + quantize_pack; unpack_lookup + 2 rht) in vectors/s. The
 * codec (doc/codec.md, "MSE") runs TQ_HADAMARD_ROUNDS = 3 rounds (doc/rotation.md), so its
 * encode and decode each cost one rht more than these two figures.
 *
 * Each figure is the best of several timed runs (the machine is shared: the minimum is the
 * least disturbed); the ratio column is against ref measured in the same run.
 *
 *   bench_kernels [min_ms_per_figure [kernel_name_prefix]]      (default 20, all kernels)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "turboquant.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static float rng_unit(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng_state >> 40) / (double)(1u << 23)) - 1.0f;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

enum { K_RHT, K_SUMSQ, K_QUANT, K_LOOKUP, K_DOT, K_AXPY, K_ENCODE, K_DECODE };
static const char *kernel_names[] = {"rht",  "sumsq", "quantize_pack", "unpack_lookup",
                                     "dot_codes", "axpy_codes", "encode(mse)", "decode(mse)"};

#define N_VEC 64   /* distinct vectors cycled through (in L1/L2) */
#define MAX_N 256

static float xs[N_VEC][MAX_N], work[MAX_N], signs[2][MAX_N], q[MAX_N], acc[MAX_N];
static float boundaries[255], centroids[256];
static uint8_t codes[N_VEC][MAX_N];
static volatile float sink;
static double min_ms = 20.0;

/* One call of kernel k on vector v. */
static void run_once(const tq_kernel_table *t, int k, int n, int bits, int v) {
    int log2n = n == 128 ? 7 : 8;
    switch (k) {
    case K_RHT:
        /* In place and repeated: values grow by √n a call and reach inf after ~40 calls;
         * inf/NaN cost nothing extra in AVX arithmetic, so the timing is unaffected. */
        t->rht(work, signs[0], log2n);
        break;
    case K_SUMSQ: sink = t->sumsq(xs[v], n); break;
    case K_QUANT:
        sink = t->quantize_pack(xs[v], 11.0f, n, bits, boundaries, centroids, codes[v]);
        break;
    case K_LOOKUP: t->unpack_lookup(codes[v], n, bits, centroids, 0.5f, work); break;
    case K_DOT: sink = t->dot_codes(codes[v], n, bits, centroids, q); break;
    case K_AXPY: t->axpy_codes(codes[v], n, bits, centroids, 0.001f, acc); break;
    case K_ENCODE: {
        /* Norm, unit scale folded into quantize, two rounds of signs + WHT, Σc². */
        memcpy(work, xs[v], (size_t)n * sizeof(float));
        float norm = sqrtf(t->sumsq(work, n));
        t->rht(work, signs[0], log2n);
        t->rht(work, signs[1], log2n);
        float scale = norm > 0.0f ? sqrtf((float)n) / (norm * (float)n) : 0.0f;
        sink = t->quantize_pack(work, scale, n, bits, boundaries, centroids, codes[v]);
        break;
    }
    case K_DECODE:
        t->unpack_lookup(codes[v], n, bits, centroids, 0.01f, work);
        t->rht(work, NULL, log2n);
        t->rht(work, signs[1], log2n);
        break;
    }
}

/* Best-of-5 nanoseconds per call. */
static double time_kernel(const tq_kernel_table *t, int k, int n, int bits) {
    long iters = 64;
    for (;;) { /* calibrate to about min_ms / 5 per run */
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) run_once(t, k, n, bits, (int)(i % N_VEC));
        double dt = now_ns() - t0;
        if (dt > min_ms * 1e6 / 5.0) break;
        iters *= 2;
    }
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) run_once(t, k, n, bits, (int)(i % N_VEC));
        double per = (now_ns() - t0) / (double)iters;
        if (per < best) best = per;
    }
    return best;
}

static void setup_codebook(int bits) {
    int levels = 1 << bits;
    /* Evenly spaced centroids on [−1.5, 1.5] (only speed is measured here); boundaries at the
     * midpoints, as in the codec's codebooks (doc/codec.md, "Codebooks"). */
    for (int j = 0; j < levels; j++) centroids[j] = 3.0f * ((float)j + 0.5f) / (float)levels - 1.5f;
    for (int j = 0; j < levels - 1; j++) boundaries[j] = 0.5f * (centroids[j] + centroids[j + 1]);
    qsort(boundaries, (size_t)(levels - 1), sizeof(float), cmp_float);
}

int main(int argc, char **argv) {
    if (argc > 1) min_ms = atof(argv[1]);
    const char *only = argc > 2 ? argv[2] : "";
    const tq_kernel_table *tables[3];
    int nt = 0;
    tables[nt++] = tq_kernels_ref();
    if (tq_kernels_supported(TQ_KERNELS_AVX2)) tables[nt++] = tq_kernels_avx2();
    if (tq_kernels_supported(TQ_KERNELS_AVX512)) tables[nt++] = tq_kernels_avx512();

    for (int v = 0; v < N_VEC; v++)
        for (int i = 0; i < MAX_N; i++) xs[v][i] = rng_unit() * 0.2f;
    for (int i = 0; i < MAX_N; i++) {
        signs[0][i] = rng_unit() < 0 ? -1.0f : 1.0f;
        signs[1][i] = rng_unit() < 0 ? -1.0f : 1.0f;
        q[i] = rng_unit();
        work[i] = rng_unit();
    }

    printf("%-14s %4s %4s", "kernel", "n", "bits");
    for (int t = 0; t < nt; t++) printf(" %10s ns %7s", tables[t]->name, "ns/crd");
    for (int t = 1; t < nt; t++) printf(" %7s", tables[t]->name);
    printf("   (fast columns: speed-up over ref)\n");

    for (int k = K_RHT; k <= K_DECODE; k++) {
        if (strncmp(kernel_names[k], only, strlen(only)) != 0) continue;
        int per_bits = !(k == K_RHT || k == K_SUMSQ);
        for (int n = 128; n <= 256; n *= 2) {
            for (int bits = 1; bits <= (per_bits ? 8 : 1); bits++) {
                setup_codebook(bits);
                for (int v = 0; v < N_VEC; v++)
                    tables[0]->quantize_pack(xs[v], 11.0f, n, bits, boundaries, centroids,
                                             codes[v]);
                double ns[3];
                for (int t = 0; t < nt; t++) ns[t] = time_kernel(tables[t], k, n, bits);
                char bcol[8];
                snprintf(bcol, sizeof bcol, per_bits ? "%d" : "-", bits);
                printf("%-14s %4d %4s", kernel_names[k], n, bcol);
                for (int t = 0; t < nt; t++) printf(" %13.1f %7.3f", ns[t], ns[t] / n);
                for (int t = 1; t < nt; t++) printf(" %6.1fx", ns[0] / ns[t]);
                if (k >= K_ENCODE)
                    for (int t = 0; t < nt; t++)
                        printf("  %s %.2f M/s", tables[t]->name, 1e3 / ns[t]);
                printf("\n");
                fflush(stdout);
            }
        }
    }
    return 0;
}

/*
 * Generates src/trellis_tables.c: the pair tables of trellis-coded indices (doc/codec.md,
 * "Trellis codes"), trained by the generalized Lloyd iteration on the codec's own encoder.
 *
 * Training data: vectors of TRAIN_DIM i.i.d. N(0, 1) entries scaled to norm √TRAIN_DIM — the
 * s-values of a random rotation's output, what the codec quantizes — from a fixed splitmix64
 * stream, so the output is the same on every machine with IEEE doubles. Each iteration encodes
 * every vector with tq_trellis_quantize_pack (the library's Viterbi search), then sets each
 * pair value to the mean of the s-values coded by it and, negated, by its mirror pair (the
 * table stays antisymmetric; a pair no vector used keeps its value).
 * Start: two interleaved uniform quantizers of 2L levels over [−R, R], the one of odd levels
 * after an odd index (a two-state trellis).
 *
 * Two families (doc/codec.md, "Trellis codes"): the tables of `trellis=1`, trained freely over
 * all 4^B pairs, and the two-state tables of `trellis=2`, where at 3 and 4 bits a value depends
 * on the index and the previous index's highest bit only (the statistics of the pairs that
 * share both are pooled; 2^(B+1) distinct values, read from the B + 1 bits of the stream that
 * end with the index), started from the free tables' start with the indices' bits rotated
 * (below). At 2 bits both are the free table.
 *
 * Usage: build/gen_trellis > src/trellis_tables.c   (about 2 minutes; prints progress on stderr)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/trellis.h"

#define TRAIN_DIM 128
#define TRAIN_VECTORS 3000
#define TEST_VECTORS 1000

static uint64_t rng_state = 0x7472656c6c6973ull; /* "trellis" */

static uint64_t splitmix64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(void) { return ((double)(splitmix64() >> 11) + 0.5) / 9007199254740992.0; }

static void sphere_vectors(float *x, int n) {
    for (int v = 0; v < n; v++) {
        double g[TRAIN_DIM], ss = 0.0;
        for (int i = 0; i < TRAIN_DIM; i += 2) {
            double r = sqrt(-2.0 * log(uniform01())), a = 6.283185307179586 * uniform01();
            g[i] = r * cos(a);
            g[i + 1] = r * sin(a);
        }
        for (int i = 0; i < TRAIN_DIM; i++) ss += g[i] * g[i];
        double k = sqrt(TRAIN_DIM / ss);
        for (int i = 0; i < TRAIN_DIM; i++) x[(size_t)v * TRAIN_DIM + i] = (float)(g[i] * k);
    }
}

/* One pass: encode every vector; with sum/cnt, accumulate per pair. Returns the MSE per
 * coordinate. */
static double pass(const float *x, int n, int bits, const float *pairs, double *sum, long *cnt) {
    const int L = 1 << bits;
    uint8_t codes[TRAIN_DIM];
    float dec[TRAIN_DIM];
    double err = 0.0;
    for (int v = 0; v < n; v++) {
        const float *xv = x + (size_t)v * TRAIN_DIM;
        tq_trellis_quantize_pack(xv, 1.0f, TRAIN_DIM, bits, pairs, L, codes);
        tq_trellis_unpack(codes, TRAIN_DIM, bits, pairs, 1.0f, dec);
        uint32_t prev = 0;
        for (int i = 0; i < TRAIN_DIM; i++) {
            uint32_t idx = tq_ref_get_index(codes, (size_t)i, bits);
            double e = (double)xv[i] - (double)dec[i];
            err += e * e;
            if (sum) {
                sum[idx * (uint32_t)L + prev] += xv[i];
                cnt[idx * (uint32_t)L + prev]++;
            }
            prev = idx;
        }
    }
    return err / ((double)n * TRAIN_DIM);
}

/* Trains the table of `bits` whose values depend on the index and the top log2(tie) bits of
 * the previous index (tie = 2^bits: every pair free, started from the odd levels after an odd
 * index; else from them after an index of the upper half) into pairs; returns the held-out
 * MSE. */
static double train_table(const float *train, const float *test, int bits, int tie, float *pairs) {
    static const double range[5] = {0, 0, 2.2, 2.9, 3.4};
    const int L = 1 << bits, E = L * L, span = L / tie; /* previous indices per class */
    double sum[256];
    long cnt[256];
    double step = 2.0 * range[bits] / (2 * L);
    /* level 2c + (p odd) of index c after p; tied, the same trellis with every index's bits
     * rotated up by one (c → c', whose top bit is c's lowest), so that the state — the bit a
     * value depends on, which the index passes on — is the previous index's top bit */
    for (int p = 0; p < L; p++)
        for (int c = 0; c < L; c++) {
            int c0 = tie == L ? c : ((c << 1) | (c >> (bits - 1))) & (L - 1), s = tie == L ? p & 1 : p >= L / 2;
            pairs[c * L + p] = (float)(-range[bits] + step * (2 * c0 + s + 0.5));
        }
    for (int it = 0; it < 300; it++) {
        memset(sum, 0, sizeof sum);
        memset(cnt, 0, sizeof cnt);
        double mse = pass(train, TRAIN_VECTORS, bits, pairs, sum, cnt);
        /* The source is symmetric, so the table is kept antisymmetric: the value of (c, p) is
         * minus that of (L−1−c, L−1−p), each the mean of both cells' s-values (one of them
         * negated) — and of every cell that shares (c, p / span). Then a table rounded to
         * integers (the VNNI kernels' int8 values) keeps the symmetry, and its rounding errors
         * cancel over a symmetric input as a symmetric codebook's do. */
        for (int c = 0; c < L; c++)
            for (int r = 0; r < tie; r++) {
                double s = 0.0;
                long n = 0;
                for (int p = r * span; p < (r + 1) * span; p++) {
                    int e = c * L + p, m = E - 1 - e; /* m: (L−1−c)·L + (L−1−p) */
                    s += sum[e] - sum[m];
                    n += cnt[e] + cnt[m];
                }
                if (n == 0) continue;
                for (int p = r * span; p < (r + 1) * span; p++) {
                    int e = c * L + p;
                    pairs[e] = (float)(s / (double)n);
                    pairs[E - 1 - e] = -pairs[e];
                }
            }
        if (it % 20 == 0) fprintf(stderr, "bits %d tie %d iteration %d: train MSE %.5f\n", bits, tie, it, mse);
    }
    double mse = pass(test, TEST_VECTORS, bits, pairs, NULL, NULL);
    fprintf(stderr, "bits %d tie %d: held-out MSE %.5f\n", bits, tie, mse);
    return mse;
}

static void print_table(const char *name, const float *pairs, int E) {
    printf("static const float %s[%d] = {\n", name, E);
    for (int e = 0; e < E; e++)
        printf("%s%.9gf,%s", e % 8 ? " " : "    ", (double)pairs[e], e % 8 == 7 || e == E - 1 ? "\n" : "");
    printf("};\n\n");
}

int main(void) {
    float *train = malloc(sizeof(float) * TRAIN_VECTORS * TRAIN_DIM);
    float *test = malloc(sizeof(float) * TEST_VECTORS * TRAIN_DIM);
    if (!train || !test) return 1;
    sphere_vectors(train, TRAIN_VECTORS);
    sphere_vectors(test, TEST_VECTORS);
    printf("/*\n * Generated by tools/gen_trellis.c (build/gen_trellis > src/trellis_tables.c): do not "
           "edit.\n * Pair tables of trellis-coded indices (doc/codec.md, \"Trellis codes\"): "
           "value of index c after\n * index p = table[c·2^bits + p], in s-units (×√dim). "
           "Trained on %d vectors of dim %d.\n */\n",
           TRAIN_VECTORS, TRAIN_DIM);
    printf("#include \"trellis_tables.h\"\n\n");
    double mse[2][5] = {{0}};
    for (int bits = TQ_TRELLIS_MIN_BITS; bits <= TQ_TRELLIS_MAX_BITS; bits++) {
        const int L = 1 << bits, E = L * L;
        float pairs[256];
        char name[32];
        /* trellis=1: every pair free */
        mse[0][bits] = train_table(train, test, bits, L, pairs);
        snprintf(name, sizeof name, "pairs%d", bits);
        print_table(name, pairs, E);
        if (bits == 2) { /* the two-state family's 2-bit table is the free one */
            mse[1][bits] = mse[0][bits];
            continue;
        }
        mse[1][bits] = train_table(train, test, bits, 2, pairs);
        snprintf(name, sizeof name, "pairs%d_two_state", bits);
        print_table(name, pairs, E);
    }
    printf("/* Held-out MSE per coordinate of a unit-variance coordinate (%d vectors). */\n",
           TEST_VECTORS);
    printf("const tq_trellis_table tq_trellis_tables[3] = {\n");
    for (int bits = TQ_TRELLIS_MIN_BITS; bits <= TQ_TRELLIS_MAX_BITS; bits++)
        printf("    {%d, %d, %d, pairs%d, %.5f},\n", bits, 1 << bits, 1 << bits, bits, mse[0][bits]);
    printf("};\n\nconst tq_trellis_table tq_trellis_tables_two_state[3] = {\n");
    for (int bits = TQ_TRELLIS_MIN_BITS; bits <= TQ_TRELLIS_MAX_BITS; bits++)
        printf("    {%d, %d, %d, pairs%d%s, %.5f},\n", bits, 1 << bits, bits == 2 ? 1 << bits : 2, bits,
               bits == 2 ? "" : "_two_state", mse[1][bits]);
    printf("};\n");
    free(train);
    free(test);
    return 0;
}

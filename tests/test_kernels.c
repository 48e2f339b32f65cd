/*
 * Every kernel table the host supports, against the scalar reference (kernels.h contracts).
 *
 * Bit for bit (memcmp): rht, sumsq, the packed bytes and the Σc² of quantize_pack.
 * Within a stated tolerance: unpack_lookup, dot_codes, axpy_codes.
 * Inputs sit at unaligned addresses (1..3 bytes or floats off), in buffers allocated to their
 * exact size so that AddressSanitizer catches any read past them; outputs are followed by guard
 * bytes that must survive, and packed outputs are pre-filled with garbage so that a kernel
 * that forgets the zero padding fails.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "test_util.h"
#include "turboquant.h"

/* ---------------------------------------------------------------------------------------- */
/* Fixed-seed PRNG (splitmix64) and input generators                                          */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x5eed1234abcdULL;

static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint32_t n) { return (uint32_t)(rng_u64() % n); }

/* Uniform in [-1, 1). */
static float rng_unit(void) {
    return (float)((double)(rng_u64() >> 40) / (double)(1u << 23)) - 1.0f;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A value of a mixed distribution: mostly moderate, sometimes ±0, huge or tiny. */
static float rng_value(void) {
    switch (rng_below(16)) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return rng_unit() * 3.0e38f;
    case 3: return rng_unit() * 1.0e-38f;
    default: return rng_unit() * 4.0f;
    }
}

/* 2^bits − 1 sorted boundaries (sometimes with ties, sometimes ±0) and 2^bits centroids. */
static void make_codebook(int bits, float *boundaries, float *centroids) {
    int levels = 1 << bits;
    for (int j = 0; j < levels - 1; j++) boundaries[j] = rng_unit() * 3.0f;
    if (levels > 2 && rng_below(4) == 0) boundaries[rng_below((uint32_t)levels - 1)] = -0.0f;
    if (levels > 3 && rng_below(4) == 0) boundaries[1] = boundaries[0];
    qsort(boundaries, (size_t)(levels - 1), sizeof(float), cmp_float);
    for (int j = 0; j < levels; j++) centroids[j] = rng_unit() * 3.0f;
}

static const int sizes[] = {1,  2,  3,   7,   8,   9,   15,  16,  17,  31,  33,   40,  63, 64,
                            65, 80, 96, 100, 127, 128, 129, 255, 256, 257, 512, 1000, 1024};
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define GUARD 64
#define GUARD_BYTE 0xA5

static int guard_ok(const uint8_t *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != GUARD_BYTE) return 0;
    return 1;
}

/* An exactly sized copy of src at `offset` bytes past a malloc'd base (reads past the end are
 * caught by AddressSanitizer). *base receives the pointer to free. */
static void *exact_copy(const void *src, size_t len, size_t offset, void **base) {
    uint8_t *b = malloc(offset + len);
    if (!b) abort();
    memcpy(b + offset, src, len);
    *base = b;
    return b + offset;
}

/* ---------------------------------------------------------------------------------------- */
/* The tables under test                                                                      */
/* ---------------------------------------------------------------------------------------- */

static const tq_kernel_table *fast_tables[4];
static int n_fast;
static const tq_kernel_table *ref;

static void find_tables(void) {
    ref = tq_kernels_ref();
    /* A set the CPU lacks (or the environment excludes: test_util.h) is reported skipped. */
    static const struct { const char *name; tq_kernels_kind kind; } sets[] = {
        {"avx2", TQ_KERNELS_AVX2}, {"avx512", TQ_KERNELS_AVX512}, {"neon", TQ_KERNELS_NEON}};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        const tq_kernel_table *t = sets[i].kind == TQ_KERNELS_AVX2     ? tq_kernels_avx2()
                                   : sets[i].kind == TQ_KERNELS_AVX512 ? tq_kernels_avx512()
                                                                       : tq_kernels_neon();
        char why[256];
        if (test_kernel_skip_reason(sets[i].name, tq_kernels_supported(sets[i].kind) && t != NULL, why, sizeof why))
            test_skip("%s: every test below runs without it", why);
        else
            fast_tables[n_fast++] = t;
    }
    printf("tables:");
    for (int t = 0; t < n_fast; t++) printf(" %s", fast_tables[t]->name);
    printf(" (against ref)\n");
}

static void test_table_names(void) {
    CHECK(strcmp(ref->name, "ref") == 0);
    for (int t = 0; t < n_fast; t++) {
        const tq_kernel_table *k = fast_tables[t];
        CHECK(strcmp(k->name, "avx2") == 0 || strcmp(k->name, "avx512") == 0 || strcmp(k->name, "neon") == 0);
        CHECK(k->rht && k->sumsq && k->quantize_pack && k->unpack_lookup && k->dot_codes &&
              k->axpy_codes);
    }
    CHECK(tq_kernels() != NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* rht: bit-exact                                                                             */
/* ---------------------------------------------------------------------------------------- */

static void test_rht(void) {
    float src[1024], signs_src[1024], want[1024];
    for (int t = 0; t < n_fast; t++) {
        for (int log2n = 1; log2n <= 10; log2n++) {
            size_t n = (size_t)1 << log2n;
            for (int rep = 0; rep < 8; rep++) {
                int use_signs = rep & 1;
                size_t off = (size_t)(rep >> 1); /* 0..3 floats */
                for (size_t i = 0; i < n; i++) {
                    /* Keep sums finite (|x| · 1024 < FLT_MAX) so results are comparable. */
                    float v = rng_unit() * 4.0f;
                    uint32_t r = rng_below(16);
                    if (r == 0) v = 0.0f;
                    if (r == 1) v = -0.0f;
                    if (r == 2) v = rng_unit() * 1.0e34f;
                    src[i] = v;
                    signs_src[i] = rng_below(2) ? 1.0f : -1.0f;
                }
                memcpy(want, src, n * sizeof(float));
                ref->rht(want, use_signs ? signs_src : NULL, log2n);

                size_t len = (off + n) * sizeof(float) + GUARD;
                uint8_t *buf = malloc(len);
                void *sbase;
                const float *signs =
                    exact_copy(signs_src, n * sizeof(float), off * sizeof(float), &sbase);
                memset(buf, GUARD_BYTE, len);
                float *x = (float *)(void *)(buf + off * sizeof(float));
                memcpy(x, src, n * sizeof(float));
                fast_tables[t]->rht(x, use_signs ? signs : NULL, log2n);
                CHECK_MSG(memcmp(x, want, n * sizeof(float)) == 0, "%s rht log2n=%d signs=%d",
                          fast_tables[t]->name, log2n, use_signs);
                CHECK(guard_ok(buf, off * sizeof(float)));
                CHECK(guard_ok(buf + (off + n) * sizeof(float), GUARD));
                free(buf);
                free(sbase);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* sumsq: bit-exact (fixed 16-lane order)                                                     */
/* ---------------------------------------------------------------------------------------- */

static void test_sumsq(void) {
    float src[1024];
    for (int t = 0; t < n_fast; t++) {
        for (int s = 0; s < N_SIZES; s++) {
            int n = sizes[s];
            for (int rep = 0; rep < 8; rep++) {
                size_t off = (size_t)(rep & 3);
                for (int i = 0; i < n; i++) {
                    src[i] = rng_value();
                    /* Half the runs without the huge values, so the sums stay finite. */
                    if (rep < 4 && fabsf(src[i]) > 1.0e18f) src[i] = rng_unit();
                }
                void *base;
                const float *x = exact_copy(src, (size_t)n * sizeof(float), off * sizeof(float),
                                            &base);
                float want = ref->sumsq(src, n), got = fast_tables[t]->sumsq(x, n);
                CHECK_MSG(memcmp(&want, &got, sizeof want) == 0, "%s sumsq n=%d: %.9g vs %.9g",
                          fast_tables[t]->name, n, (double)got, (double)want);
                free(base);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* quantize_pack: bit-exact bytes and Σc²                                                     */
/* ---------------------------------------------------------------------------------------- */

/* x values that hit the boundaries exactly (scale 1 or a power of two), ±0, huge, NaN. */
static float quant_input(const float *boundaries, int bits, float scale) {
    uint32_t r = rng_below(12);
    int nb = (1 << bits) - 1;
    if (r < 3 && (scale == 1.0f || scale == 0.5f || scale == 2.0f))
        return boundaries[rng_below((uint32_t)nb)] / scale; /* exact: power-of-two scale */
    if (r == 3) return rng_below(2) ? 0.0f : -0.0f;
    if (r == 4) return rng_unit() * 3.0e38f; /* overflows to ±inf when scale = 2 */
    if (r == 5 && rng_below(4) == 0) return NAN;
    return rng_unit() * 4.0f;
}

static void test_quantize_pack(void) {
    float xs[1024], boundaries[256], centroids[256];
    static const float scales[] = {1.0f, 0.5f, 2.0f, 0.7071067f, 11.3137085f};
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            for (int s = 0; s < N_SIZES; s++) {
                int n = sizes[s];
                for (int rep = 0; rep < 5; rep++) {
                    float scale = scales[rep];
                    make_codebook(bits, boundaries, centroids);
                    for (int i = 0; i < n; i++) xs[i] = quant_input(boundaries, bits, scale);
                    size_t nbytes = tq_group_bytes((size_t)n, bits);
                    size_t xoff = (size_t)((rep + s) & 3), ooff = (size_t)(rep & 3);

                    uint8_t want[1024 + 4];
                    memset(want, 0xCC, sizeof want);
                    float want_sq = ref->quantize_pack(xs, scale, n, bits, boundaries,
                                                       centroids, want);

                    void *xbase, *bbase, *cbase;
                    const float *x = exact_copy(xs, (size_t)n * sizeof(float),
                                                xoff * sizeof(float), &xbase);
                    const float *bd = exact_copy(boundaries, ((size_t)1 << bits) * 4 - 4,
                                                 (size_t)rep * 4, &bbase);
                    const float *ct = exact_copy(centroids, ((size_t)1 << bits) * 4,
                                                 (size_t)rep * 4 + 4, &cbase);
                    uint8_t *obuf = malloc(ooff + nbytes + GUARD);
                    memset(obuf, GUARD_BYTE, ooff + nbytes + GUARD);
                    memset(obuf + ooff, 0xCC, nbytes); /* garbage the padding must overwrite */
                    float got_sq = fast_tables[t]->quantize_pack(x, scale, n, bits, bd, ct,
                                                                 obuf + ooff);
                    CHECK_MSG(memcmp(obuf + ooff, want, nbytes) == 0,
                              "%s quantize_pack bits=%d n=%d scale=%g bytes differ",
                              fast_tables[t]->name, bits, n, (double)scale);
                    CHECK_MSG(memcmp(&got_sq, &want_sq, sizeof got_sq) == 0,
                              "%s quantize_pack bits=%d n=%d: sum %.9g vs %.9g",
                              fast_tables[t]->name, bits, n, (double)got_sq, (double)want_sq);
                    CHECK_MSG(guard_ok(obuf, ooff) && guard_ok(obuf + ooff + nbytes, GUARD),
                              "%s quantize_pack bits=%d n=%d wrote past the group",
                              fast_tables[t]->name, bits, n);
                    free(obuf);
                    free(xbase);
                    free(bbase);
                    free(cbase);
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* trellis_quantize_pack: bit-exact (the same path, bytes and Σ value²)                        */
/* ---------------------------------------------------------------------------------------- */

/* The fast sets' Viterbi searches (vectors of states, two chains merged: trellis_search.h)
 * against the reference's scalar one, on random pair tables and inputs, and on tables and
 * inputs of a few small integers where many paths tie exactly — the lowest index must win
 * there as in the reference — plus huge values (infinite costs) and a NaN. */
static void test_trellis_quantize_pack(void) {
    float xs[1024], pairs[256];
    static const float scales[] = {1.0f, 0.5f, 2.0f};
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 2; bits <= 4; bits++) {
            const int L = 1 << bits;
            for (int s = 0; s < N_SIZES; s++) {
                int n = sizes[s];
                for (int rep = 0; rep < 8; rep++) {
                    float scale = scales[rep % 3];
                    const int ties = rep >= 3 && rep != 6;
                    for (int j = 0; j < L * L; j++)
                        pairs[j] = ties ? (float)((int)rng_below(5) - 2) : rng_unit() * 3.0f;
                    /* reps 6, 7: two-state tables (the value of t after p: t's and p's top bit's;
                     * many paths tie), at 3 and 4 bits */
                    if (rep >= 6 && bits >= 3)
                        for (int j = 0; j < L * L; j++) pairs[j] = pairs[j / L * L + (j % L >= L / 2) * (L / 2)];
                    for (int i = 0; i < n; i++)
                        xs[i] = ties ? (float)((int)rng_below(7) - 3) * 0.5f : rng_value();
                    if (rep == 2 && n > 4) xs[n / 2] = NAN;
                    size_t nbytes = tq_group_bytes((size_t)n, bits), ooff = (size_t)(rep & 3);
                    uint8_t want[1024];
                    /* the two-state tables by the two-state search (trellis_search.h) */
                    const int memory = rep >= 6 && bits >= 3 ? 2 : L;
                    float want_sq = ref->trellis_quantize_pack(xs, scale, n, bits, pairs, memory, want);
                    void *xbase, *pbase;
                    const float *x = exact_copy(xs, (size_t)n * sizeof(float), (size_t)(s & 3) * 4, &xbase);
                    const float *pt = exact_copy(pairs, (size_t)(L * L) * 4, (size_t)rep * 4, &pbase);
                    uint8_t *obuf = malloc(ooff + nbytes + GUARD);
                    memset(obuf, GUARD_BYTE, ooff + nbytes + GUARD);
                    float got_sq = fast_tables[t]->trellis_quantize_pack(x, scale, n, bits, pt, memory, obuf + ooff);
                    CHECK_MSG(memcmp(obuf + ooff, want, nbytes) == 0,
                              "%s trellis_quantize_pack bits=%d n=%d rep=%d: bytes differ", fast_tables[t]->name,
                              bits, n, rep);
                    CHECK_MSG(memcmp(&got_sq, &want_sq, sizeof got_sq) == 0,
                              "%s trellis_quantize_pack bits=%d n=%d rep=%d: sum %.9g vs %.9g",
                              fast_tables[t]->name, bits, n, rep, (double)got_sq, (double)want_sq);
                    CHECK_MSG(guard_ok(obuf, ooff) && guard_ok(obuf + ooff + nbytes, GUARD),
                              "%s trellis_quantize_pack bits=%d n=%d wrote past the group",
                              fast_tables[t]->name, bits, n);
                    free(obuf);
                    free(xbase);
                    free(pbase);
                }
            }
        }
    }
}

/* A sorted codebook with every x in the tie-free interior: the indices are also the exact
 * count of boundaries below (the definition in kernels.h and doc/codec.md, "MSE"), checked
 * against a linear count. */
static void test_quantize_definition(void) {
    float xs[256], boundaries[255], centroids[256];
    uint8_t got[256];
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            int nb = (1 << bits) - 1;
            for (int j = 0; j < nb; j++) boundaries[j] = (float)(j - nb / 2) * 0.25f;
            for (int j = 0; j <= nb; j++) centroids[j] = (float)j;
            for (int i = 0; i < 256; i++) xs[i] = rng_unit() * (float)nb * 0.2f;
            fast_tables[t]->quantize_pack(xs, 1.0f, 256, bits, boundaries, centroids, got);
            int bad = 0;
            for (int i = 0; i < 256; i++) {
                uint32_t count = 0;
                for (int j = 0; j < nb; j++) count += boundaries[j] < xs[i];
                bad += tq_ref_get_index(got, (size_t)i, bits) != count;
            }
            CHECK_MSG(bad == 0, "%s bits=%d: %d indices differ from the count",
                      fast_tables[t]->name, bits, bad);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* unpack_lookup, dot_codes, axpy_codes: within tolerance                                     */
/* ---------------------------------------------------------------------------------------- */

/* Random packed codes, padding bits included (kernels must ignore them). */
static void random_codes(uint8_t *codes, size_t nbytes) {
    for (size_t i = 0; i < nbytes; i++) codes[i] = (uint8_t)rng_u64();
}

static void test_unpack_lookup(void) {
    uint8_t codes[1024];
    float boundaries[256], centroids[256], want[1024];
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            for (int s = 0; s < N_SIZES; s++) {
                int n = sizes[s];
                for (int rep = 0; rep < 4; rep++) {
                    size_t nbytes = tq_group_bytes((size_t)n, bits);
                    make_codebook(bits, boundaries, centroids);
                    random_codes(codes, nbytes);
                    float scale = rep == 0 ? 1.0f : rng_unit() * 10.0f;
                    ref->unpack_lookup(codes, n, bits, centroids, scale, want);

                    void *ibase, *cbase;
                    const uint8_t *in = exact_copy(codes, nbytes, (size_t)rep, &ibase);
                    const float *ct = exact_copy(centroids, ((size_t)1 << bits) * sizeof(float),
                                                 (size_t)rep * sizeof(float), &cbase);
                    size_t ooff = (size_t)(3 - rep);
                    size_t len = (ooff + (size_t)n) * sizeof(float) + GUARD;
                    uint8_t *obuf = malloc(len);
                    memset(obuf, GUARD_BYTE, len);
                    float *out = (float *)(void *)(obuf + ooff * sizeof(float));
                    fast_tables[t]->unpack_lookup(in, n, bits, ct, scale, out);
                    /* Tolerance: one float multiply each, so 1 ulp (|out|·FLT_EPSILON). */
                    int bad = 0;
                    for (int i = 0; i < n; i++)
                        bad += !(fabsf(out[i] - want[i]) <= fabsf(want[i]) * FLT_EPSILON);
                    CHECK_MSG(bad == 0, "%s unpack_lookup bits=%d n=%d: %d values off",
                              fast_tables[t]->name, bits, n, bad);
                    CHECK(guard_ok(obuf, ooff * sizeof(float)));
                    CHECK(guard_ok(obuf + (ooff + (size_t)n) * sizeof(float), GUARD));
                    free(obuf);
                    free(ibase);
                    free(cbase);
                }
            }
        }
    }
}

static void test_dot_codes(void) {
    uint8_t codes[1024];
    float boundaries[256], centroids[256], qs[1024];
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            for (int s = 0; s < N_SIZES; s++) {
                int n = sizes[s];
                for (int rep = 0; rep < 4; rep++) {
                    size_t nbytes = tq_group_bytes((size_t)n, bits);
                    make_codebook(bits, boundaries, centroids);
                    random_codes(codes, nbytes);
                    for (int i = 0; i < n; i++) qs[i] = rng_unit() * 2.0f;
                    float want = ref->dot_codes(codes, n, bits, centroids, qs);
                    double mag = 0.0;
                    for (int i = 0; i < n; i++)
                        mag += fabs((double)qs[i] *
                                    (double)centroids[tq_ref_get_index(codes, (size_t)i, bits)]);

                    void *ibase, *qbase, *cbase;
                    const uint8_t *in = exact_copy(codes, nbytes, (size_t)rep, &ibase);
                    const float *ct = exact_copy(centroids, ((size_t)1 << bits) * sizeof(float),
                                                 (size_t)rep * sizeof(float), &cbase);
                    const float *q = exact_copy(qs, (size_t)n * sizeof(float),
                                                (size_t)(3 - rep) * sizeof(float), &qbase);
                    float got = fast_tables[t]->dot_codes(in, n, bits, ct, q);
                    /* Tolerance: float accumulation in any order over ≤ 1024 terms, error
                     * ≤ (chain length ≤ 166)·FLT_EPSILON/2·Σ|q·c| < 1e-5·Σ|q·c|. */
                    CHECK_MSG(fabs((double)got - (double)want) <= 1e-5 * mag + 1e-30,
                              "%s dot_codes bits=%d n=%d: %.9g vs %.9g (Σ|qc| %.3g)",
                              fast_tables[t]->name, bits, n, (double)got, (double)want, mag);
                    free(ibase);
                    free(qbase);
                    free(cbase);
                }
            }
        }
    }
}

static void test_axpy_codes(void) {
    uint8_t codes[1024];
    float boundaries[256], centroids[256], acc0[1024], want[1024];
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            for (int s = 0; s < N_SIZES; s++) {
                int n = sizes[s];
                for (int rep = 0; rep < 4; rep++) {
                    size_t nbytes = tq_group_bytes((size_t)n, bits);
                    make_codebook(bits, boundaries, centroids);
                    random_codes(codes, nbytes);
                    float w = rng_unit() * 3.0f;
                    for (int i = 0; i < n; i++) acc0[i] = rng_unit() * 5.0f;
                    memcpy(want, acc0, (size_t)n * sizeof(float));
                    ref->axpy_codes(codes, n, bits, centroids, w, want);

                    void *ibase, *cbase;
                    const uint8_t *in = exact_copy(codes, nbytes, (size_t)(3 - rep), &ibase);
                    const float *ct = exact_copy(centroids, ((size_t)1 << bits) * sizeof(float),
                                                 (size_t)rep * sizeof(float), &cbase);
                    size_t aoff = (size_t)rep;
                    size_t len = (aoff + (size_t)n) * sizeof(float) + GUARD;
                    uint8_t *abuf = malloc(len);
                    memset(abuf, GUARD_BYTE, len);
                    float *acc = (float *)(void *)(abuf + aoff * sizeof(float));
                    memcpy(acc, acc0, (size_t)n * sizeof(float));
                    fast_tables[t]->axpy_codes(in, n, bits, ct, w, acc);
                    /* Tolerance: FMA (one rounding) against multiply then add (two), so
                     * |Δ| ≤ 2·FLT_EPSILON·(|acc| + |w·c|). */
                    int bad = 0;
                    for (int i = 0; i < n; i++) {
                        float c = centroids[tq_ref_get_index(codes, (size_t)i, bits)];
                        float tol = 2.0f * FLT_EPSILON * (fabsf(acc0[i]) + fabsf(w * c));
                        bad += !(fabsf(acc[i] - want[i]) <= tol);
                    }
                    CHECK_MSG(bad == 0, "%s axpy_codes bits=%d n=%d: %d values off",
                              fast_tables[t]->name, bits, n, bad);
                    CHECK(guard_ok(abuf, aoff * sizeof(float)));
                    CHECK(guard_ok(abuf + (aoff + (size_t)n) * sizeof(float), GUARD));
                    free(abuf);
                    free(ibase);
                    free(cbase);
                }
            }
        }
    }
}

/* Round trip through every pair of tables: codes written by one decode identically in all. */
static void test_cross_roundtrip(void) {
    float xs[256], boundaries[256], centroids[256], a[256], b[256];
    uint8_t codes[256];
    for (int t = 0; t < n_fast; t++) {
        for (int bits = 1; bits <= TQ_MAX_BITS; bits++) {
            make_codebook(bits, boundaries, centroids);
            for (int i = 0; i < 256; i++) xs[i] = rng_unit() * 3.0f;
            fast_tables[t]->quantize_pack(xs, 1.0f, 255, bits, boundaries, centroids, codes);
            ref->unpack_lookup(codes, 255, bits, centroids, 1.0f, a);
            fast_tables[t]->unpack_lookup(codes, 255, bits, centroids, 1.0f, b);
            CHECK_MSG(memcmp(a, b, 255 * sizeof(float)) == 0, "%s bits=%d",
                      fast_tables[t]->name, bits);
        }
    }
}

int main(void) {
    find_tables();
    RUN_TEST(test_table_names);
    RUN_TEST(test_rht);
    RUN_TEST(test_sumsq);
    RUN_TEST(test_quantize_pack);
    RUN_TEST(test_quantize_definition);
    RUN_TEST(test_trellis_quantize_pack);
    RUN_TEST(test_unpack_lookup);
    RUN_TEST(test_dot_codes);
    RUN_TEST(test_axpy_codes);
    RUN_TEST(test_cross_roundtrip);
    return test_report();
}

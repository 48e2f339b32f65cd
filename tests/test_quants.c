/* Weight formats and matrix kernels: golden dequantization (values from the gguf Python
 * package, tests/golden/quants_*.bin, made by scripts/make_quant_golden.py), every kernel
 * set the host runs against the scalar reference, threaded against single-threaded.
 *
 * Usage: test_quants [golden_dir]   (default tests/golden, run from the repository root) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "../engine/matmul.h"
#include "../engine/quants.h"
#include "quant_rows.h"
#include "test_util.h"

static const char *golden_dir = "tests/golden";

static const int all_types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q4_0, QUANT_Q4_1,
                                QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0, QUANT_Q2_K, QUANT_Q3_K,
                                QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

/* ---- (1) golden dequantization ------------------------------------------------------------- */

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}


static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len)) != NULL &&
            fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)len;
    }
    fclose(f);
    return buf;
}

static void test_golden_dequantize(void) {
    for (int t = 0; t < N_TYPES; t++) {
        int type = all_types[t];
        char name[16], path[512];
        size_t k = 0;
        for (const char *s = quant_type_name(type); *s && k + 1 < sizeof name; s++)
            name[k++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
        name[k] = '\0';
        snprintf(path, sizeof path, "%s/quants_%s.bin", golden_dir, name);
        size_t size = 0;
        uint8_t *buf = read_file(path, &size);
        CHECK_MSG(buf != NULL, "cannot read %s", path);
        if (buf == NULL) continue;
        CHECK(size >= 32 && memcmp(buf, "TQQG", 4) == 0 && rd_u32(buf + 4) == 1);
        uint32_t n_blocks = rd_u32(buf + 12), be = rd_u32(buf + 16), bb = rd_u32(buf + 20);
        CHECK(rd_u32(buf + 8) == (uint32_t)type);
        CHECK(be == (uint32_t)quant_block_elems(type) && bb == quant_block_bytes(type));
        size_t n = (size_t)n_blocks * be;
        CHECK(size == 32 + (size_t)n_blocks * bb + 4 * n);
        if (size != 32 + (size_t)n_blocks * bb + 4 * n) {
            free(buf);
            continue;
        }
        float *got = malloc(n * sizeof *got);
        CHECK(quant_dequantize_row(type, buf + 32, got, (int64_t)n) == QUANT_OK);
        /* Tolerance 0: numpy computes the same float32 products (scale * sub-scale, then
         * times q, minus the min) in the same order, so every value must match bit for bit. */
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t a, b;
            float want;
            memcpy(&want, buf + 32 + (size_t)n_blocks * bb + 4 * i, 4);
            memcpy(&a, &got[i], 4);
            memcpy(&b, &want, 4);
            if (a != b && bad++ < 3)
                fprintf(stderr, "%s[%zu]: got %.9g want %.9g\n", quant_type_name(type), i, (double)got[i], (double)want);
        }
        CHECK_MSG(bad == 0, "%s: %d of %zu values differ (%u blocks from the model)", quant_type_name(type), bad, n,
                  rd_u32(buf + 24));
        free(got);
        free(buf);
    }
}

static void test_dequantize_errors(void) {
    uint8_t blk[512] = {0};
    float out[512];
    CHECK(quant_dequantize_row(4, blk, out, 32) == QUANT_ERR_TYPE);
    CHECK(quant_dequantize_row(99, blk, out, 32) == QUANT_ERR_TYPE);
    CHECK(quant_dequantize_row(QUANT_Q4_K, blk, out, 255) == QUANT_ERR_SIZE);
    CHECK(quant_dequantize_row(QUANT_Q4_0, blk, out, -32) == QUANT_ERR_SIZE);
    CHECK(quant_dequantize_row(QUANT_Q4_0, NULL, out, 32) == QUANT_ERR_ARG);
    CHECK(quant_row_bytes(QUANT_Q6_K, 512) == 420 && quant_row_bytes(QUANT_Q6_K, 100) == 0);
    CHECK(strcmp(quant_status_name(QUANT_ERR_WORK), "QUANT_ERR_WORK") == 0);
    /* Q8_K, our activation format, round-trips through its own dequantization. */
    float x[256];
    _Alignas(8) uint8_t q[sizeof(quant_block_q8_K)];
    for (int i = 0; i < 256; i++) x[i] = rnd_uniform(-3.0f, 3.0f);
    quant_quantize_q8_K_ref(x, q, 256);
    CHECK(quant_dequantize_row(QUANT_Q8_K, q, out, 256) == QUANT_OK);
    float d = ((quant_block_q8_K *)(void *)q)->d;
    for (int i = 0; i < 256; i++) CHECK_NEAR(out[i], x[i], 0.5 * d * 1.0001); /* half a step */
}

/* ---- (2) every kernel set against the reference --------------------------------------------- */

static void test_quantize_matches_ref(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    enum { N = 1024 };
    float *x = malloc((N + 1) * sizeof *x);
    _Alignas(64) static uint8_t ref[N / 32 * sizeof(quant_block_q8_a1) + N / 256 * sizeof(quant_block_q8_K)];
    _Alignas(64) static uint8_t got[sizeof ref];
    for (int i = 0; i <= N; i++) x[i] = rnd_uniform(-2.0f, 2.0f) * (i % 97 == 0 ? 50.0f : 1.0f);
    for (int i = 32; i < 64; i++) x[i + 1] = 0.0f; /* an all-zero block */
    for (int s = 0; s < ns; s++) {
        /* x + 1: unaligned input. Bit-exact: same arithmetic and rounding as the reference. */
        quant_quantize_q8_a_ref(x + 1, ref, N);
        sets[s]->quantize_q8_a(x + 1, got, N);
        CHECK_MSG(memcmp(ref, got, N / 32 * sizeof(quant_block_q8_a)) == 0, "%s q8_a", sets[s]->name);
        quant_quantize_q8_K_ref(x + 1, ref, N);
        sets[s]->quantize_q8_K(x + 1, got, N);
        CHECK_MSG(memcmp(ref, got, N / 256 * sizeof(quant_block_q8_K)) == 0, "%s q8_K", sets[s]->name);
        quant_quantize_q8_a1_ref(x + 1, ref, N);
        sets[s]->quantize_q8_a1(x + 1, got, N);
        CHECK_MSG(memcmp(ref, got, N / 32 * sizeof(quant_block_q8_a1)) == 0, "%s q8_a1", sets[s]->name);
    }
    /* q8_a1 carries q8_a's d and qs unchanged, and s = d * sum(qs). */
    _Alignas(64) static uint8_t a[N / 32 * sizeof(quant_block_q8_a)];
    quant_quantize_q8_a_ref(x + 1, a, N);
    quant_quantize_q8_a1_ref(x + 1, ref, N);
    int same = 1;
    for (int i = 0; i < N / 32; i++) {
        const quant_block_q8_a *qa = (const quant_block_q8_a *)(const void *)a + i;
        const quant_block_q8_a1 *q1 = (const quant_block_q8_a1 *)(const void *)ref + i;
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += q1->qs[j];
        same &= qa->d == q1->d && memcmp(qa->qs, q1->qs, 32) == 0 && q1->s == q1->d * (float)sum;
    }
    CHECK(same);
    free(x);
}

/* Activation row of format `act` for x (n floats) into dst, with the reference quantizer;
 * xhat gets the values it represents. Returns the byte stride. */
static size_t make_act(quant_act act, const float *x, int64_t n, void *dst, float *xhat) {
    if (act == QUANT_ACT_Q8_A) {
        quant_quantize_q8_a_ref(x, dst, n);
        const quant_block_q8_a *b = dst;
        for (int64_t i = 0; i < n; i++) xhat[i] = b[i / 32].d * (float)b[i / 32].qs[i % 32];
        return quant_act_row_bytes(act, n);
    }
    if (act == QUANT_ACT_Q8_A1) {
        quant_quantize_q8_a1_ref(x, dst, n);
        const quant_block_q8_a1 *b = dst;
        for (int64_t i = 0; i < n; i++) xhat[i] = b[i / 32].d * (float)b[i / 32].qs[i % 32];
        return quant_act_row_bytes(act, n);
    }
    if (act == QUANT_ACT_Q8_K) {
        quant_quantize_q8_K_ref(x, dst, n);
        quant_dequantize_row(QUANT_Q8_K, dst, xhat, n);
        return quant_act_row_bytes(act, n);
    }
    memcpy(dst, x, (size_t)n * sizeof *x);
    memcpy(xhat, x, (size_t)n * sizeof *x);
    return (size_t)n * sizeof *x;
}

/* Every set's dot for `type` against the reference on a row of n elements, nx = 1..MAX, with
 * the weight row and the activation rows at odd addresses. */
static void check_dot_type(const quant_kernels *const *sets, int ns, int type, int64_t n) {
    quant_act act = quant_act_format(type);
    size_t wb = quant_row_bytes(type, n);
    uint8_t *wbuf = malloc(wb + 1), *w = wbuf + 1; /* weights off alignment too */
    float *wf = malloc((size_t)n * sizeof *wf), *x = malloc((size_t)n * sizeof *x), *xhat = malloc((size_t)n * sizeof *xhat);
    size_t stride = ((size_t)n * 4 + 300) / 4 * 4 + 4; /* rows not 32-byte aligned apart */
    uint8_t *xq = aligned_alloc(64, (QUANT_DOT_MAX_NX * stride + 64 + 63) / 64 * 64);
    double absdot[QUANT_DOT_MAX_NX];
    for (int trial = 0; trial < 4; trial++) {
        random_row(type, w, n);
        quant_dequantize_row(type, w, wf, n);
        for (int r = 0; r < QUANT_DOT_MAX_NX; r++) {
            for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
            make_act(act, x, n, xq + 4 + r * stride, xhat); /* +4: off 64-byte alignment */
            absdot[r] = 0;
            for (int64_t i = 0; i < n; i++) absdot[r] += fabs((double)wf[i] * xhat[i]);
        }
        for (int nx = 1; nx <= QUANT_DOT_MAX_NX; nx++) {
            float want[QUANT_DOT_MAX_NX], got[QUANT_DOT_MAX_NX];
            sets[0]->dot[type](n, w, xq + 4, stride, nx, want);
            for (int s = 1; s < ns; s++) {
                sets[s]->dot[type](n, w, xq + 4, stride, nx, got);
                /* Tolerance 1e-5 * sum|w*x|: integer block sums are exact, only the
                 * float32 accumulation order differs (a few ulp per term added). */
                for (int r = 0; r < nx; r++)
                    CHECK_MSG(fabs((double)got[r] - want[r]) <= 1e-5 * absdot[r] + 1e-30,
                              "%s %s n=%lld nx=%d r=%d: %.9g vs ref %.9g (sum|wx| %.3g)", sets[s]->name,
                              quant_type_name(type), (long long)n, nx, r, (double)got[r], (double)want[r], absdot[r]);
            }
        }
    }
    free(wbuf);
    free(wf);
    free(x);
    free(xhat);
    free(xq);
}

static void test_dot_kernels_vs_ref(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    CHECK(strcmp(sets[0]->name, "ref") == 0);
    for (int t = 0; t < N_TYPES; t++) {
        int type = all_types[t];
        if (quant_act_format(type) == QUANT_ACT_NONE) {
            for (int s = 0; s < ns; s++) CHECK(sets[s]->dot[type] == NULL);
            continue;
        }
        /* Block counts: one block; two; 21 of 32 (odd: the AVX-512 tail); 48 (a 1536-wide
         * row); k-quants 1, 2, 3 and 6 super-blocks. Float types: 32 * count + 5 (vector tails). */
        static const int64_t nblocks32[] = {1, 2, 21, 48}, nblocksK[] = {1, 2, 3, 6};
        int64_t be = quant_block_elems(type);
        for (int sz = 0; sz < 4; sz++)
            check_dot_type(sets, ns, type, be == QUANT_QK_K ? nblocksK[sz] * QUANT_QK_K : nblocks32[sz] * QUANT_QK + (be == 1 ? 5 : 0));
    }
}

/* y = W x for `set`, against float64 sums of the dequantized weights times x. */
static void check_matmul_type(const quant_kernels *set, const quant_kernels *ref, int type, int64_t rows,
                              int64_t cols, int n, tq_threadpool *pool) {
    matmul_weight w = {type, rows, cols, NULL};
    size_t rb = quant_row_bytes(type, cols);
    uint8_t *wd = malloc((size_t)rows * rb);
    for (int64_t r = 0; r < rows; r++) random_row(type, wd + (size_t)r * rb, cols);
    w.data = wd;
    float *xbuf = malloc(((size_t)n * (size_t)cols + 1) * sizeof(float));
    float *x = xbuf + 1; /* unaligned activation buffer */
    for (size_t i = 0; i < (size_t)n * (size_t)cols; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
    float *y = malloc((size_t)n * (size_t)rows * sizeof *y), *yref = malloc((size_t)n * (size_t)rows * sizeof *yref);
    size_t ws = matmul_work_size(&w, n, tq_threadpool_size(pool));
    uint8_t *work = malloc(ws + 1);
    CHECK(matmul_with(set, &w, x, y, n, pool, work + 1, ws) == QUANT_OK); /* odd work address */
    CHECK(matmul_with(ref, &w, x, yref, n, NULL, work + 1, matmul_work_size(&w, n, 1)) == QUANT_OK);
    float *wf = malloc((size_t)cols * sizeof *wf);
    quant_act act = quant_act_format(type);
    int64_t ab = act == QUANT_ACT_Q8_K ? QUANT_QK_K : QUANT_QK;
    int bad_ref = 0, bad_exact = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row(type, wd + (size_t)r * rb, wf, cols);
        for (int i = 0; i < n; i++) {
            const float *xi = x + (size_t)i * (size_t)cols;
            double exact = 0, absdot = 0, qbound = 0;
            for (int64_t c = 0; c < cols; c++) {
                exact += (double)wf[c] * xi[c];
                absdot += fabs((double)wf[c] * xi[c]);
            }
            if (act == QUANT_ACT_Q8_A || act == QUANT_ACT_Q8_A1 || act == QUANT_ACT_Q8_K) {
                /* 8-bit activations move each x by at most half a step, max|x_block|/254. */
                for (int64_t b0 = 0; b0 < cols; b0 += ab) {
                    double amax = 0, wsum = 0;
                    for (int64_t c = b0; c < b0 + ab; c++) {
                        amax = fmax(amax, fabs(xi[c]));
                        wsum += fabs(wf[c]);
                    }
                    qbound += wsum * amax / 254.0 * 1.0001;
                }
            }
            double yv = y[(size_t)i * (size_t)rows + (size_t)r], yr = yref[(size_t)i * (size_t)rows + (size_t)r];
            /* Against the reference set: 1e-5 * sum|w*x| (float accumulation order only). */
            if (!(fabs(yv - yr) <= 1e-5 * absdot + 1e-30) && bad_ref++ < 3)
                fprintf(stderr, "%s %s n=%d row %lld: %.9g vs ref %.9g\n", set->name, quant_type_name(type), n,
                        (long long)r, yv, yr);
            /* Against exact float math: activation quantization bound + 1e-5 * sum|w*x|. */
            if (!(fabs(yv - exact) <= qbound + 1e-5 * absdot + 1e-30) && bad_exact++ < 3)
                fprintf(stderr, "%s %s n=%d row %lld: %.9g vs exact %.9g (bound %.3g)\n", set->name,
                        quant_type_name(type), n, (long long)r, yv, exact, qbound + 1e-5 * absdot);
        }
    }
    CHECK_MSG(bad_ref == 0 && bad_exact == 0, "%s %s rows=%lld cols=%lld n=%d", set->name, quant_type_name(type),
              (long long)rows, (long long)cols, n);
    free(wd);
    free(xbuf);
    free(y);
    free(yref);
    free(work);
    free(wf);
}

static void test_matmul_all_sets(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    static const int ns_rows[] = {1, 3, 7, 64};
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < N_TYPES; t++)
            for (int k = 0; k < 4; k++) {
                int type = all_types[t];
                int64_t cols = quant_block_elems(type) == QUANT_QK_K ? 512 : 32 * 7;
                check_matmul_type(sets[s], sets[0], type, 13 + 2 * k, cols, ns_rows[k], NULL);
            }
}

/* The VNNI set differs from the AVX-512 one only in how exact integer block sums are formed,
 * so every type's dot must agree bit for bit (what keeps results unchanged where it is picked);
 * the AVX2 set follows the same block rule for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K (the
 * models' types), so there it must agree with them too: a model gives the same bits on an
 * AVX2-only CPU as on an AVX-512 one. */
static int block_rule_type(int type) {
    return type == QUANT_Q4_0 || type == QUANT_Q4_1 || type == QUANT_Q5_0 || type == QUANT_Q8_0 ||
           type == QUANT_Q4_K || type == QUANT_Q6_K;
}

static void test_x86_sets_agree(void) {
    const quant_kernels *sets[8], *a = NULL, *v = NULL, *a2 = NULL;
    int ns = quant_kernels_list(sets, 8);
    for (int s = 0; s < ns; s++) {
        if (strcmp(sets[s]->name, "avx512") == 0) a = sets[s];
        if (strcmp(sets[s]->name, "avx512-vnni") == 0) v = sets[s];
        if (strcmp(sets[s]->name, "avx2") == 0) a2 = sets[s];
    }
    if (a == NULL) {
        test_skip("x86 sets agree: no avx512 set on this host");
        return;
    }
    if (v == NULL) test_skip("avx512-vnni vs avx512: no avx512-vnni set on this host");
    for (int t = 0; t < N_TYPES; t++) {
        int type = all_types[t];
        quant_act act = quant_act_format(type);
        if (act == QUANT_ACT_NONE) continue;
        int64_t n = quant_block_elems(type) == QUANT_QK_K ? 3 * QUANT_QK_K : 21 * QUANT_QK;
        uint8_t *w = malloc(quant_row_bytes(type, n));
        float *x = malloc((size_t)n * sizeof *x), *xhat = malloc((size_t)n * sizeof *xhat);
        size_t stride = (size_t)n * 4 + 64;
        uint8_t *xq = aligned_alloc(64, QUANT_DOT_MAX_NX * stride);
        random_row(type, w, n);
        for (int r = 0; r < QUANT_DOT_MAX_NX; r++) {
            for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
            make_act(act, x, n, xq + r * stride, xhat);
        }
        float ya[QUANT_DOT_MAX_NX], yv[QUANT_DOT_MAX_NX];
        a->dot[type](n, w, xq, stride, QUANT_DOT_MAX_NX, ya);
        if (v != NULL) {
            v->dot[type](n, w, xq, stride, QUANT_DOT_MAX_NX, yv);
            CHECK_MSG(memcmp(ya, yv, sizeof ya) == 0, "%s: avx512-vnni differs from avx512", quant_type_name(type));
        }
        if (a2 != NULL && block_rule_type(type)) {
            for (int nx = 1; nx <= QUANT_DOT_MAX_NX; nx += 7) { /* 1 and 8 rows per call */
                float y2[QUANT_DOT_MAX_NX];
                for (int r = 0; r < QUANT_DOT_MAX_NX; r += nx) a2->dot[type](n, w, xq + r * stride, stride, nx, y2 + r);
                CHECK_MSG(memcmp(ya, y2, sizeof ya) == 0, "%s: avx2 (nx %d) differs from avx512", quant_type_name(type), nx);
            }
        }
        free(w);
        free(x);
        free(xhat);
        free(xq);
    }
}

/* The NEON dot-product set differs from the NEON one only in how exact integer block sums are
 * formed (vdotq_s32 for widening multiplies), so every type's dot agrees bit for bit, at every nx
 * (what keeps a model's results unchanged where the dot products are there). */
static void test_neon_sets_agree(void) {
    const quant_kernels *sets[8], *a = NULL, *d = NULL;
    int ns = quant_kernels_list(sets, 8);
    for (int s = 0; s < ns; s++) {
        if (strcmp(sets[s]->name, "neon") == 0) a = sets[s];
        if (strcmp(sets[s]->name, "neon-dotprod") == 0) d = sets[s];
    }
    if (a == NULL || d == NULL) {
        test_skip("neon-dotprod vs neon: %s", a == NULL ? "not AArch64" : "no neon-dotprod set on this CPU");
        return;
    }
    for (int t = 0; t < N_TYPES; t++) {
        int type = all_types[t];
        quant_act act = quant_act_format(type);
        if (act == QUANT_ACT_NONE) continue;
        int64_t n = quant_block_elems(type) == QUANT_QK_K ? 3 * QUANT_QK_K : quant_block_elems(type) == 1 ? 21 * QUANT_QK + 5 : 21 * QUANT_QK;
        uint8_t *w = malloc(quant_row_bytes(type, n));
        float *x = malloc((size_t)n * sizeof *x), *xhat = malloc((size_t)n * sizeof *xhat);
        size_t stride = ((size_t)n * 4 + 64) / 4 * 4;
        uint8_t *xq = aligned_alloc(64, (QUANT_DOT_MAX_NX * stride + 63) / 64 * 64);
        random_row(type, w, n);
        for (int r = 0; r < QUANT_DOT_MAX_NX; r++) {
            for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
            make_act(act, x, n, xq + r * stride, xhat);
        }
        for (int nx = 1; nx <= QUANT_DOT_MAX_NX; nx++) {
            float ya[QUANT_DOT_MAX_NX], yd[QUANT_DOT_MAX_NX];
            a->dot[type](n, w, xq, stride, nx, ya);
            d->dot[type](n, w, xq, stride, nx, yd);
            CHECK_MSG(memcmp(ya, yd, (size_t)nx * sizeof *ya) == 0, "%s nx %d: neon-dotprod differs from neon",
                      quant_type_name(type), nx);
        }
        free(w);
        free(x);
        free(xhat);
        free(xq);
    }
}

/* A set's gemm (the batched kernel prefill takes) gives what its dot gives for every pair, bit
 * for bit: called directly for 1, 7 and 16 weight rows against 1..6 activation rows, and through
 * the matmul at batch sizes on both sides of its switch to gemm, on 37 rows (a partial tile),
 * one and two threads. Rows of 1, 3 and 20 blocks (the partials' groups of four and their
 * tails; Q4_K and Q6_K 1, 3 and 8 super-blocks). */
static void test_gemm_equals_dot(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8), tested = 0;
    tq_threadpool *pool2 = NULL;
    CHECK(tq_threadpool_create(&pool2, 2) == TQ_OK);
    static const int types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K};
    for (int s = 0; s < ns; s++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const quant_kernels *k = sets[s];
            int type = types[t];
            if (k->gemm[type] == NULL) continue;
            tested++;
            quant_act act = quant_act_format(type);
            static const int64_t ncols[] = {32, 96, 640}, ncolsK[] = {256, 768, 2048};
            const int ksb = act == QUANT_ACT_Q8_K; /* super-blocks of 256: 1, 3, 8 of them */
            for (int c = 0; c < 3; c++) {
                const int64_t cols = ksb ? ncolsK[c] : ncols[c], rows = 37;
                const int nmax = 17;
                size_t rb = quant_row_bytes(type, cols), xs = quant_act_row_bytes(act, cols);
                uint8_t *wd = malloc((size_t)rows * rb);
                for (int64_t r = 0; r < rows; r++) random_row(type, wd + (size_t)r * rb, cols);
                float *x = malloc((size_t)nmax * (size_t)cols * sizeof *x), *xhat = malloc((size_t)cols * sizeof *xhat);
                for (size_t i = 0; i < (size_t)nmax * (size_t)cols; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
                uint8_t *xq = aligned_alloc(64, ((size_t)nmax * xs + 63) / 64 * 64);
                uint8_t *xu = malloc((size_t)nmax * (size_t)cols);
                for (int i = 0; i < nmax; i++) {
                    make_act(act, x + (size_t)i * (size_t)cols, cols, xq + (size_t)i * xs, xhat);
                    if (ksb) continue; /* the k-quants' gemm takes no unsigned copy */
                    const size_t off = act == QUANT_ACT_Q8_A1 ? offsetof(quant_block_q8_a1, qs) : offsetof(quant_block_q8_a, qs);
                    for (int64_t e = 0; e < cols; e++)
                        xu[(size_t)i * (size_t)cols + (size_t)e] =
                            (uint8_t)(xq[(size_t)i * xs + (size_t)(e / 32) * (xs / (size_t)(cols / 32)) + off + (size_t)(e % 32)] ^ 0x80u);
                }
                /* the dot's values, one pair per call */
                float *want = malloc((size_t)nmax * (size_t)rows * sizeof *want);
                for (int64_t r = 0; r < rows; r++)
                    for (int i = 0; i < nmax; i++)
                        k->dot[type](cols, wd + (size_t)r * rb, xq + (size_t)i * xs, xs, 1, &want[(size_t)i * (size_t)rows + (size_t)r]);
                float *got = malloc((size_t)nmax * (size_t)rows * sizeof *got);
                void *scratch = aligned_alloc(64, (quant_gemm_scratch_bytes(cols) + 63) / 64 * 64);
                static const int nws[] = {1, 7, 12, 16};
                for (int a = 0; a < 4; a++)
                    for (int nx = 1; nx <= 6; nx++) {
                        memset(got, 0xFF, (size_t)nmax * (size_t)rows * sizeof *got);
                        k->gemm[type](cols, wd + rb, rb, nws[a], xq, xs, xu, (size_t)cols, nx, got + 1, (size_t)rows, scratch);
                        int bad = 0;
                        for (int i = 0; i < nx; i++) {
                            for (int r = 0; r < nws[a]; r++)
                                bad += memcmp(&got[(size_t)i * (size_t)rows + 1 + (size_t)r], &want[(size_t)i * (size_t)rows + 1 + (size_t)r], sizeof *got) != 0;
                            /* nothing written past the nw rows */
                            if (1 + nws[a] < rows) {
                                uint32_t u;
                                memcpy(&u, &got[(size_t)i * (size_t)rows + 1 + (size_t)nws[a]], 4);
                                bad += u != 0xFFFFFFFFu;
                            }
                        }
                        CHECK_MSG(bad == 0, "%s %s gemm cols=%lld nw=%d nx=%d: %d values differ from dot", k->name,
                                  quant_type_name(type), (long long)cols, nws[a], nx, bad);
                    }
                matmul_weight w = {type, rows, cols, wd};
                static const int ns_rows[] = {1, 3, 4, 5, 9, 17};
                for (int m = 0; m < 6; m++)
                    for (int p = 0; p < 2; p++) {
                        int n = ns_rows[m];
                        size_t wsz = matmul_work_size(&w, n, p ? 2 : 1);
                        void *work = malloc(wsz);
                        CHECK(matmul_with(k, &w, x, got, n, p ? pool2 : NULL, work, wsz) == QUANT_OK);
                        CHECK_MSG(memcmp(got, want, (size_t)n * (size_t)rows * sizeof *got) == 0,
                                  "%s %s matmul cols=%lld n=%d threads=%d differs from dot", k->name, quant_type_name(type),
                                  (long long)cols, n, p ? 2 : 1);
                        free(work);
                    }
                free(wd);
                free(x);
                free(xhat);
                free(xq);
                free(xu);
                free(want);
                free(got);
                free(scratch);
            }
        }
    tq_threadpool_free(pool2);
    if (tested == 0) test_skip("gemm kernels: no set on this CPU has one (the AVX-512 sets do)");
}

static void test_matmul_errors(void) {
    uint8_t wd[64] = {0};
    float x[32] = {0}, y[4];
    matmul_weight w = {QUANT_Q8_0, 1, 32, wd};
    CHECK(matmul(&w, x, y, 1, NULL, NULL, 0) == QUANT_ERR_WORK);
    CHECK(matmul(&w, x, y, 0, NULL, wd, sizeof wd) == QUANT_ERR_ARG);
    w.cols = 31;
    CHECK(matmul(&w, x, y, 1, NULL, wd, sizeof wd) == QUANT_ERR_SIZE);
    w.type = 5;
    w.cols = 32;
    CHECK(matmul(&w, x, y, 1, NULL, wd, sizeof wd) == QUANT_ERR_TYPE);
    w.type = QUANT_F32;
    w.cols = 8;
    float wf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    w.data = wf;
    CHECK(matmul(&w, x, y, 1, NULL, NULL, 0) == QUANT_OK); /* F32 needs no work buffer */
}

/* ---- (3) threaded equals single-threaded ------------------------------------------------------ */

static void test_matmul_threaded(void) {
    /* Pools of 2, 3 and 5 threads: the row chunks differ with the thread count, the outputs
     * must not. */
    static const int n_threads[] = {2, 3, 5};
    tq_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int p = 0; p < 3; p++)
        CHECK(tq_threadpool_create(&pools[p], n_threads[p]) == TQ_OK && tq_threadpool_size(pools[p]) == n_threads[p]);
    static const int types[] = {QUANT_Q4_K, QUANT_Q5_0, QUANT_Q6_K, QUANT_Q8_0, QUANT_Q3_K, QUANT_F16, QUANT_Q4_1, QUANT_Q5_K};
    static const int ns_rows[] = {1, 7, 64};
    const quant_kernels *k = quant_kernels_get();
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int m = 0; m < 3; m++) {
            int n = ns_rows[m];
            matmul_weight w = {types[t], 203, 512, NULL};
            size_t rb = quant_row_bytes(w.type, w.cols);
            uint8_t *wd = malloc((size_t)w.rows * rb);
            for (int64_t r = 0; r < w.rows; r++) random_row(w.type, wd + (size_t)r * rb, w.cols);
            w.data = wd;
            float *x = malloc((size_t)n * 512 * sizeof *x);
            for (int i = 0; i < n * 512; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
            float *y1 = malloc((size_t)n * 203 * sizeof *y1), *yt = malloc((size_t)n * 203 * sizeof *yt);
            size_t ws = matmul_work_size(&w, n, 5);
            void *work = malloc(ws);
            CHECK(matmul_with(k, &w, x, y1, n, NULL, work, ws) == QUANT_OK);
            for (int p = 0; p < 3; p++) {
                memset(yt, 0, (size_t)n * 203 * sizeof *yt);
                CHECK(matmul_with(k, &w, x, yt, n, pools[p], work, ws) == QUANT_OK);
                /* Bit-exact: each output is computed by the same code whichever thread runs it. */
                CHECK_MSG(memcmp(y1, yt, (size_t)n * 203 * sizeof *y1) == 0, "%s n=%d threads=%d",
                          quant_type_name(w.type), n, n_threads[p]);
            }
            free(wd);
            free(x);
            free(y1);
            free(yt);
            free(work);
        }
    for (int p = 0; p < 3; p++) tq_threadpool_free(pools[p]);
}

/* ---- (4) MATMUL_F32_ACT: fp32 activations, every set, every type, any pool --------------------- */

/* Against float64 sums of the dequantized weights times x: the fp32 path rounds nothing to 8
 * bits, so the error is the fp32 summation's alone (a relative bound on sum |w x|, far inside
 * the 8-bit bound check_matmul_type allows the default mode); and threads change nothing. */
static void test_matmul_f32_act(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 3) == TQ_OK);
    for (int t = 0; t < N_TYPES; t++) {
        const int type = all_types[t], n = 5;
        const int64_t rows = 37, cols = quant_block_elems(type) == QUANT_QK_K ? 2 * QUANT_QK_K : 8 * QUANT_QK;
        matmul_weight w = {type, rows, cols, NULL};
        size_t rb = quant_row_bytes(type, cols);
        uint8_t *wd = malloc((size_t)rows * rb);
        for (int64_t r = 0; r < rows; r++) random_row(type, wd + (size_t)r * rb, cols);
        w.data = wd;
        float *x = malloc((size_t)n * (size_t)cols * sizeof *x), *wf = malloc((size_t)cols * sizeof *wf);
        for (size_t i = 0; i < (size_t)n * (size_t)cols; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
        float *y = malloc((size_t)n * (size_t)rows * sizeof *y), *y1 = malloc((size_t)n * (size_t)rows * sizeof *y1);
        size_t ws = matmul_work_size_mode(&w, n, 3, MATMUL_F32_ACT);
        CHECK(ws > 0 && matmul_work_size_mode(&w, n, 3, (matmul_mode)7) == 0);
        uint8_t *work = malloc(ws);
        for (int s = 0; s < ns; s++) {
            CHECK(matmul_mode_with(sets[s], &w, x, y1, n, MATMUL_F32_ACT, NULL, work, ws) == QUANT_OK);
            CHECK(matmul_mode_with(sets[s], &w, x, y, n, MATMUL_F32_ACT, pool, work, ws) == QUANT_OK);
            CHECK_MSG(memcmp(y, y1, (size_t)n * (size_t)rows * sizeof *y) == 0, "%s %s: threads change the fp32 path",
                      sets[s]->name, quant_type_name(type));
            int bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                quant_dequantize_row(type, wd + (size_t)r * rb, wf, cols);
                for (int i = 0; i < n; i++) {
                    double exact = 0, absdot = 0;
                    for (int64_t c = 0; c < cols; c++) {
                        exact += (double)wf[c] * x[(size_t)i * (size_t)cols + (size_t)c];
                        absdot += fabs((double)wf[c] * x[(size_t)i * (size_t)cols + (size_t)c]);
                    }
                    bad += fabs(y[(size_t)i * (size_t)rows + (size_t)r] - exact) > 1e-5 * absdot + 1e-30;
                    /* a dequantized type: exactly the set's dot_f32 of the dequantized row (the
                     * tiles change nothing); float weights keep their own dot */
                    float one = sets[s]->dot_f32(wf, x + (size_t)i * (size_t)cols, cols);
                    if (quant_act_format(type) != QUANT_ACT_F32)
                        bad += memcmp(&one, &y[(size_t)i * (size_t)rows + (size_t)r], sizeof one) != 0;
                }
            }
            CHECK_MSG(bad == 0, "%s %s: %d fp32-path outputs off the float64 sum", sets[s]->name, quant_type_name(type), bad);
        }
        CHECK(matmul_mode_with(sets[0], &w, x, y, n, (matmul_mode)7, NULL, work, ws) == QUANT_ERR_ARG);
        free(wd), free(x), free(wf), free(y), free(y1), free(work);
    }
    tq_threadpool_free(pool);
}

/* Every set's tile equals its own dot_f32 on each pair, bit for bit, at every tile shape and at
 * lengths with every kind of tail (what makes the fp32 matmul independent of how rows are
 * grouped into tiles: threads, batch composition). */
static void test_dot_f32_tile(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    const int64_t lens[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 64, 100, 640};
    float *w = malloc(QUANT_F32_TILE * 640 * sizeof *w), *x = malloc(QUANT_F32_TILE * 640 * sizeof *x);
    float y[QUANT_F32_TILE * 9];
    for (int i = 0; i < QUANT_F32_TILE * 640; i++) w[i] = rnd_uniform(-1.0f, 1.0f), x[i] = rnd_uniform(-2.0f, 2.0f);
    for (int s = 0; s < ns; s++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            const int64_t n = lens[l];
            int bad = 0;
            for (int nw = 1; nw <= QUANT_F32_TILE; nw++)
                for (int nx = 1; nx <= QUANT_F32_TILE; nx++) {
                    for (size_t q = 0; q < sizeof y / sizeof y[0]; q++) y[q] = -7.0f;
                    sets[s]->dot_f32_tile(w, nw, x, nx, n, y, 9);
                    for (int i = 0; i < QUANT_F32_TILE; i++)
                        for (int r = 0; r < 9; r++) {
                            float want = i < nx && r < nw ? sets[s]->dot_f32(w + r * n, x + i * n, n) : -7.0f;
                            bad += memcmp(&y[i * 9 + r], &want, sizeof want) != 0;
                        }
                }
            CHECK_MSG(bad == 0, "%s, n %lld: %d tile values differ from dot_f32 (or written outside the tile)",
                      sets[s]->name, (long long)n, bad);
        }
    free(w), free(x);
}

/* Every set's dequantize_row writes what quant_dequantize_row writes, bit for bit, for every
 * type (the fp32 matmul then differs from the reference only in the float dot's order). */
static void test_dequantize_sets(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    for (int t = 0; t < N_TYPES; t++) {
        const int type = all_types[t];
        const int64_t cols = quant_block_elems(type) == QUANT_QK_K ? 3 * QUANT_QK_K : 9 * QUANT_QK;
        size_t rb = quant_row_bytes(type, cols);
        uint8_t *wd = malloc(rb);
        float *want = malloc((size_t)cols * sizeof *want), *got = malloc((size_t)cols * sizeof *got);
        for (int rep = 0; rep < 20; rep++) {
            random_row(type, wd, cols);
            CHECK(quant_dequantize_row(type, wd, want, cols) == QUANT_OK);
            for (int s = 0; s < ns; s++) {
                memset(got, 0xA5, (size_t)cols * sizeof *got);
                CHECK(sets[s]->dequantize_row(type, wd, got, cols) == QUANT_OK);
                CHECK_MSG(memcmp(got, want, (size_t)cols * sizeof *got) == 0, "%s %s: dequantized row differs",
                          sets[s]->name, quant_type_name(type));
            }
        }
        for (int s = 0; s < ns; s++) /* the reference's errors */
            CHECK((quant_block_elems(type) == 1 || sets[s]->dequantize_row(type, wd, got, cols + 1) == QUANT_ERR_SIZE) &&
                  sets[s]->dequantize_row(type, NULL, got, cols) == QUANT_ERR_ARG);
        free(wd), free(want), free(got);
    }
}

static void test_dispatch(void) {
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    CHECK(ns >= 1);
    printf("     kernel sets on this host:");
    for (int s = 0; s < ns; s++) printf(" %s", sets[s]->name);
    printf("; chosen: %s\n", quant_kernels_name());
    quant_force_reference(1);
    CHECK(strcmp(quant_kernels_name(), "ref") == 0);
    quant_force_reference(0);
    /* the CPU's best, or with TQ_KERNELS=FAMILY (avx2, avx512, neon) the best of that family */
    const char *want = getenv("TQ_KERNELS");
    const quant_kernels *fam = NULL;
    for (int s = 1; s < ns && want != NULL && want[0] != '\0'; s++)
        if (strncmp(sets[s]->name, want, strlen(want)) == 0 &&
            (sets[s]->name[strlen(want)] == '\0' || sets[s]->name[strlen(want)] == '-'))
            fam = sets[s];
    CHECK(quant_kernels_get() == (fam != NULL ? fam : sets[ns - 1]));
    for (int s = 0; s < ns; s++) {
        CHECK(sets[s]->quantize_q8_a && sets[s]->quantize_q8_K && sets[s]->quantize_q8_a1 && sets[s]->dot_f32 &&
              sets[s]->dot_f32_tile && sets[s]->dequantize_row);
        for (int t = 0; t < N_TYPES; t++)
            CHECK((sets[s]->dot[all_types[t]] != NULL) == (quant_act_format(all_types[t]) != QUANT_ACT_NONE));
    }
}

int main(int argc, char **argv) {
    if (argc > 1) golden_dir = argv[1];
    RUN_TEST(test_golden_dequantize);
    RUN_TEST(test_dequantize_errors);
    RUN_TEST(test_dispatch);
    {   /* the kernel-set tests below cover the sets this CPU has; the others are skipped */
        const quant_kernels *sets[8];
        int ns = quant_kernels_list(sets, 8), have_avx2 = 0, have_avx512 = 0;
        for (int s = 0; s < ns; s++) {
            have_avx2 |= strcmp(sets[s]->name, "avx2") == 0;
            have_avx512 |= strcmp(sets[s]->name, "avx512") == 0;
        }
        char lacks[160];
        if (!have_avx2)
            test_skip("engine kernel set avx2: this CPU lacks %s (avx2 fma f16c needed)",
                      test_cpu_lacks("avx2", lacks, sizeof lacks)[0] ? lacks : "f16c");
        if (!have_avx512 && test_cpu_lacks("avx512", lacks, sizeof lacks)[0])
            test_skip("engine kernel set avx512: this CPU lacks %s", lacks);
        else if (!have_avx512 && have_avx2) { /* the CPU has AVX-512: the build should too */
            fprintf(stderr, "engine kernel set avx512 missing although this CPU has AVX-512 (sources.list flags?)\n");
            test_failed_count++;
        } else if (!have_avx512)
            test_skip("engine kernel set avx512: needs the avx2 set (f16c) too");
        int have_vnni = 0;
        for (int s = 0; s < ns; s++) have_vnni |= strcmp(sets[s]->name, "avx512-vnni") == 0;
        if (!have_vnni && have_avx512 && test_cpu_lacks("avx512-vnni", lacks, sizeof lacks)[0])
            test_skip("engine kernel set avx512-vnni: this CPU lacks %s", lacks);
        else if (!have_vnni && have_avx512) {
            fprintf(stderr, "engine kernel set avx512-vnni missing although this CPU has AVX512_VNNI\n");
            test_failed_count++;
        }
        /* AArch64: neon always (quants_neon.c), neon-dotprod where the kernel reports ASIMDDP */
        int have_neon = 0, have_neon_dp = 0;
        for (int s = 0; s < ns; s++) {
            have_neon |= strcmp(sets[s]->name, "neon") == 0;
            have_neon_dp |= strcmp(sets[s]->name, "neon-dotprod") == 0;
        }
        if (!have_neon && test_cpu_lacks("neon", lacks, sizeof lacks)[0])
            test_skip("engine kernel set neon: this CPU lacks %s", lacks);
        else if (!have_neon) {
            fprintf(stderr, "engine kernel set neon missing on AArch64 (quants_dispatch.c)\n");
            test_failed_count++;
        }
#if defined(__aarch64__) && defined(HWCAP_ASIMDDP)
        const int cpu_dp = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
        const int cpu_dp = 0;
#endif
        if (!have_neon_dp && !cpu_dp && have_neon)
            test_skip("engine kernel set neon-dotprod: this CPU lacks asimddp");
        else if (!have_neon_dp && cpu_dp) {
            fprintf(stderr, "engine kernel set neon-dotprod missing although this CPU has ASIMDDP\n");
            test_failed_count++;
        }
    }
    RUN_TEST(test_quantize_matches_ref);
    RUN_TEST(test_dot_kernels_vs_ref);
    RUN_TEST(test_matmul_all_sets);
    RUN_TEST(test_x86_sets_agree);
    RUN_TEST(test_neon_sets_agree);
    RUN_TEST(test_gemm_equals_dot);
    RUN_TEST(test_matmul_errors);
    RUN_TEST(test_matmul_threaded);
    RUN_TEST(test_matmul_f32_act);
    RUN_TEST(test_dot_f32_tile);
    RUN_TEST(test_dequantize_sets);
    return test_report();
}

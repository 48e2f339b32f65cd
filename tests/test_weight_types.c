/* The weight types common in downloaded GGUFs (F16, BF16, Q4_0, Q4_1, Q5_K, Q8_0, Q4_K, Q6_K)
 * through the file path: a tiny GGUF this test writes (engine/gguf_write.h) with one matrix of
 * each type, read back by the engine's GGUF reader, multiplied by matmul with every kernel set
 * this CPU runs, and checked against float64 sums of the dequantized weights times the
 * activations the engine uses (the reference quantizer's 8-bit rounding, which every set
 * reproduces byte for byte: test_quants), so the tolerance covers float32 arithmetic only.
 *
 * Usage: test_weight_types */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/gguf.h"
#include "../engine/gguf_write.h"
#include "../engine/matmul.h"
#include "../engine/quants.h"
#include "quant_rows.h"
#include "test_util.h"

static const int types[] = {QUANT_F16, QUANT_BF16, QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_K,
                            QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K};
#define N_WTYPES ((int)(sizeof types / sizeof types[0]))
enum { ROWS = 37, COLS = 512 }; /* 37: not a multiple of any task size; 512: 2 super-blocks */

/* x as the engine's kernels see it: rounded to the activation format of `type` by the
 * reference quantizer, then back to floats. */
static void engine_activations(int type, const float *x, float *xhat) {
    quant_act act = quant_act_format(type);
    if (act == QUANT_ACT_F32 || act == QUANT_ACT_NONE) {
        memcpy(xhat, x, COLS * sizeof *x);
        return;
    }
    _Alignas(64) static uint8_t q[COLS / 32 * sizeof(quant_block_q8_a1) + COLS / 256 * sizeof(quant_block_q8_K)];
    if (act == QUANT_ACT_Q8_K) {
        quant_quantize_q8_K_ref(x, q, COLS);
        quant_dequantize_row(QUANT_Q8_K, q, xhat, COLS);
        return;
    }
    /* q8_a and q8_a1 carry the same d and qs (test_quants checks it). */
    quant_quantize_q8_a1_ref(x, q, COLS);
    const quant_block_q8_a1 *b = (const quant_block_q8_a1 *)(const void *)q;
    for (int i = 0; i < COLS; i++) xhat[i] = b[i / 32].d * (float)b[i / 32].qs[i % 32];
}

static int write_file(const char *path, uint8_t *data[N_WTYPES]) {
    gguf_writer *w = gguf_writer_create();
    if (w == NULL) return 0;
    gguf_writer_add_str(w, "general.architecture", "none", 4);
    for (int t = 0; t < N_WTYPES; t++) {
        size_t bytes = (size_t)ROWS * quant_row_bytes(types[t], COLS);
        data[t] = malloc(bytes);
        for (int r = 0; r < ROWS; r++) random_row(types[t], data[t] + (size_t)r * quant_row_bytes(types[t], COLS), COLS);
        char name[32];
        snprintf(name, sizeof name, "w.%s", quant_type_name(types[t]));
        uint64_t dims[2] = {COLS, ROWS};
        /* quant_type ids are ggml's, as the GGUF tensor type field. */
        gguf_writer_add_tensor(w, name, (uint32_t)types[t], 2, dims, data[t], bytes);
    }
    int ok = gguf_writer_to_file(w, path) == GGUF_OK;
    gguf_writer_free(w);
    return ok;
}

/* y = W x for every set and batch sizes 1, 5 (a partial tile of 4) and 64. */
static void check_tensor(const gguf_tensor *ten, const uint8_t *written, tq_threadpool *pool) {
    int type = (int)ten->type;
    CHECK_MSG(ten->n_dims == 2 && ten->dims[0] == COLS && ten->dims[1] == ROWS, "%s: shape", ten->name);
    CHECK_MSG(memcmp(ten->data, written, ten->n_bytes) == 0, "%s: bytes read back", ten->name);
    matmul_weight w = {type, (int64_t)ten->dims[1], (int64_t)ten->dims[0], ten->data};
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    static float wf[ROWS][COLS], x[64][COLS], xhat[64][COLS], y[64 * ROWS];
    for (int r = 0; r < ROWS; r++)
        CHECK(quant_dequantize_row(type, (const uint8_t *)ten->data + (size_t)r * quant_row_bytes(type, COLS), wf[r], COLS) ==
              QUANT_OK);
    for (int i = 0; i < 64; i++) {
        for (int c = 0; c < COLS; c++) x[i][c] = rnd_uniform(-1.0f, 1.0f) * (c % 61 == 0 ? 8.0f : 1.0f);
        engine_activations(type, x[i], xhat[i]);
    }
    size_t ws = matmul_work_size(&w, 64, tq_threadpool_size(pool));
    void *work = malloc(ws);
    static const int ns_rows[] = {1, 5, 64};
    for (int s = 0; s < ns; s++)
        for (int m = 0; m < 3; m++) {
            int n = ns_rows[m], bad = 0;
            double worst = 0;
            CHECK(matmul_with(sets[s], &w, &x[0][0], y, n, pool, work, ws) == QUANT_OK);
            for (int i = 0; i < n; i++)
                for (int r = 0; r < ROWS; r++) {
                    double exact = 0, absdot = 0;
                    for (int c = 0; c < COLS; c++) {
                        exact += (double)wf[r][c] * xhat[i][c];
                        absdot += fabs((double)wf[r][c] * xhat[i][c]);
                    }
                    /* float32 products and sums (integer block sums are exact): 1e-5 * sum|w*x|,
                     * the tolerance test_quants uses between sets. */
                    double err = fabs(y[(size_t)i * ROWS + (size_t)r] - exact);
                    worst = fmax(worst, err / (absdot + 1e-30));
                    if (!(err <= 1e-5 * absdot + 1e-30) && bad++ < 3)
                        fprintf(stderr, "%s %s n=%d y[%d][%d] = %.9g, float64 %.9g\n", sets[s]->name, ten->name, n, i, r,
                                (double)y[(size_t)i * ROWS + (size_t)r], exact);
                }
            CHECK_MSG(bad == 0, "%s %s n=%d: %d outputs off", sets[s]->name, ten->name, n, bad);
            if (m == 2) printf("     %-5s %-11s worst |y - float64| / sum|w*x| = %.2e\n", quant_type_name(type), sets[s]->name, worst);
        }
    free(work);
}

static void test_gguf_weight_types(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/tq_test_weight_types_%ld.gguf", (long)getpid());
    uint8_t *data[N_WTYPES] = {0};
    CHECK(write_file(path, data));
    gguf_file *f = NULL;
    char err[256] = "";
    CHECK_MSG(gguf_open(path, &f, err, sizeof err) == GGUF_OK, "%s", err);
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 2) == TQ_OK);
    for (int t = 0; f != NULL && t < N_WTYPES; t++) {
        char name[32];
        snprintf(name, sizeof name, "w.%s", quant_type_name(types[t]));
        const gguf_tensor *ten = gguf_find_tensor(f, name);
        CHECK_MSG(ten != NULL && ten->type == (uint32_t)types[t], "%s missing or retyped", name);
        if (ten != NULL) check_tensor(ten, data[t], pool);
    }
    tq_threadpool_free(pool);
    gguf_close(f);
    remove(path);
    for (int t = 0; t < N_WTYPES; t++) free(data[t]);
}

int main(void) {
    RUN_TEST(test_gguf_weight_types);
    return test_report();
}

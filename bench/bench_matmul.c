/* Matrix-kernel benchmark on the weight shapes of Gemma 3 270M Q4_K_M or SmolLM2-135M-Instruct
 * Q4_1 (types and shapes as in those GGUF files): GFLOP/s and effective GB/s of weight reads
 * for every kernel set the host runs (the reference set is the baseline), 1 and 2 threads,
 * n = 1 (decode) and n = 64 (prefill). Weights are random bytes of the right format with
 * finite scales: the kernels' speed does not depend on the values.
 *
 * Usage: bench_matmul [min_seconds_per_case [gemma3|smollm2 [threads [set [n]]]]]
 *        (defaults 0.2, gemma3, both 1 and 2 threads, every set, n = 1 and 64; threads 0 = both,
 *        set "all" = every set). min_seconds 0 runs each case once: with
 *        valgrind --tool=callgrind --toggle-collect=matmul_with it counts one call's instructions. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/matmul.h"
#include "../engine/quants.h"
#include "turboquant.h"

typedef struct {
    const char *what;
    int type;
    int64_t rows, cols;
} shape;

static const shape gemma_shapes[] = {
    {"attn_q", QUANT_Q5_0, 1024, 640},      {"attn_k", QUANT_Q5_0, 256, 640},
    {"attn_v", QUANT_Q8_0, 256, 640},       {"attn_output", QUANT_Q4_K, 640, 1024},
    {"ffn_gate/up", QUANT_Q5_0, 2048, 640}, {"ffn_down", QUANT_Q4_K, 640, 2048},
    {"ffn_down", QUANT_Q6_K, 640, 2048},    {"output(tied)", QUANT_Q8_0, 262144, 640},
    {NULL, 0, 0, 0},
};

static const shape smol_shapes[] = {
    {"attn_q/out", QUANT_Q4_1, 576, 576},   {"attn_k/v", QUANT_Q4_1, 192, 576},
    {"ffn_gate/up", QUANT_Q4_1, 1536, 576}, {"ffn_down", QUANT_Q4_1, 576, 1536},
    {"output(tied)", QUANT_Q8_0, 49152, 576}, {NULL, 0, 0, 0},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ULL;
static uint8_t rnd_byte(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)(rng >> 32);
}

int main(int argc, char **argv) {
    double min_s = argc > 1 ? atof(argv[1]) : 0.2;
    const shape *shapes = argc > 2 && strcmp(argv[2], "smollm2") == 0 ? smol_shapes : gemma_shapes;
    int thr_only = argc > 3 ? atoi(argv[3]) : 0; /* 1 or 2: that pool only */
    const char *set_only = argc > 4 && strcmp(argv[4], "all") != 0 ? argv[4] : NULL;
    int n_only = argc > 5 ? atoi(argv[5]) : 0;
    const quant_kernels *sets[8];
    int ns = quant_kernels_list(sets, 8);
    tq_threadpool *pools[2] = {NULL, NULL};
    if (tq_threadpool_create(&pools[0], 1) != TQ_OK || tq_threadpool_create(&pools[1], 2) != TQ_OK) return 1;
    printf("%-13s %-5s %6s %5s | %-11s %3s %3s | %9s %8s %8s %7s\n", "tensor", "type", "rows", "cols", "kernel", "thr",
           "n", "us/call", "GFLOP/s", "GB/s(W)", "vs ref");
    for (size_t s = 0; shapes[s].what != NULL; s++) {
        const shape *sh = &shapes[s];
        size_t rb = quant_row_bytes(sh->type, sh->cols), wbytes = rb * (size_t)sh->rows;
        uint8_t *wd = malloc(wbytes);
        for (size_t i = 0; i < wbytes; i++) wd[i] = rnd_byte();
        /* Finite fp16 scales: the first two bytes of every block of these types are d
         * (Q6_K's d is at 208, set separately). */
        size_t bs = quant_block_bytes(sh->type);
        for (size_t b = 0; b < wbytes / bs; b++) {
            uint8_t *p = wd + b * bs + (sh->type == QUANT_Q6_K ? 208 : 0);
            p[0] = 0x00;
            p[1] = 0x20;
            if (sh->type == QUANT_Q4_K || sh->type == QUANT_Q4_1) wd[b * bs + 2] = 0x00, wd[b * bs + 3] = 0x20;
        }
        matmul_weight w = {sh->type, sh->rows, sh->cols, wd};
        static const int ns_rows[] = {1, 64};
        for (int m = 0; m < 2; m++) {
            int n = ns_rows[m];
            if (n_only && n != n_only) continue;
            float *x = malloc((size_t)n * (size_t)sh->cols * sizeof *x);
            float *y = malloc((size_t)n * (size_t)sh->rows * sizeof *y);
            for (size_t i = 0; i < (size_t)n * (size_t)sh->cols; i++) x[i] = (float)(rnd_byte() - 128) / 64.0f;
            size_t ws = matmul_work_size(&w, n, 2);
            void *work = malloc(ws);
            for (int p = 0; p < 2; p++) {
                if (thr_only && p + 1 != thr_only) continue;
                double ref_us = 0;
                for (int k = 0; k < ns; k++) {
                    if (set_only && strcmp(sets[k]->name, set_only) != 0) continue;
                    /* The scalar reference on the 262144-row head at n=64 takes tens of
                     * seconds per call; its figure adds nothing. */
                    if (k == 0 && n > 1 && sh->rows > 100000) {
                        printf("%-13s %-5s %6lld %5lld | %-11s %3d %3d | %9s\n", sh->what, quant_type_name(sh->type),
                               (long long)sh->rows, (long long)sh->cols, sets[k]->name, p + 1, n, "skipped");
                        continue;
                    }
                    int iters = 0;
                    double t0 = now_s(), t;
                    do {
                        if (matmul_with(sets[k], &w, x, y, n, pools[p], work, ws) != QUANT_OK) return 1;
                        iters++;
                        t = now_s() - t0;
                    } while (t < min_s);
                    double us = 1e6 * t / iters;
                    if (k == 0) ref_us = us;
                    double flops = 2.0 * (double)sh->rows * (double)sh->cols * n;
                    printf("%-13s %-5s %6lld %5lld | %-11s %3d %3d | %9.1f %8.2f %8.2f", sh->what,
                           quant_type_name(sh->type), (long long)sh->rows, (long long)sh->cols, sets[k]->name, p + 1,
                           n, us, flops / us * 1e-3, (double)wbytes / us * 1e-3);
                    if (ref_us > 0) printf(" %6.1fx", ref_us / us);
                    printf("\n");
                    fflush(stdout);
                }
            }
            free(x);
            free(y);
            free(work);
        }
        free(wd);
    }
    tq_threadpool_free(pools[0]);
    tq_threadpool_free(pools[1]);
    return 0;
}

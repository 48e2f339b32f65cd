/* Prefill speed on token ids, for models whose vocabulary the engine cannot read yet (or to
 * leave the tokenizer out of the figure): loads MODEL, prefills n pseudo-random token ids in
 * batches, and prints the time, tokens/s and the kernel set (TQ_FORCE_REF=1: the reference).
 * The last row's logits are computed, as a generation's first step needs them.
 *
 * Usage: bench_prefill MODEL [n_tokens [threads [batch [repeats]]]]   (512 1 512 3; the best
 *        of the repeats is printed) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../engine/context.h"
#include "../engine/quants.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_prefill MODEL [n_tokens [threads [batch [repeats]]]]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 512, threads = argc > 3 ? atoi(argv[3]) : 1;
    int batch = argc > 4 ? atoi(argv[4]) : 512, reps = argc > 5 ? atoi(argv[5]) : 3;
    if (n < 1 || threads < 1 || batch < 1 || reps < 1) return 2;
    char err[256] = "";
    model *m = NULL;
    model_status st = model_load(argv[1], &m, err, sizeof err);
    if (st != MODEL_OK) {
        fprintf(stderr, "model_load: %s\n", err);
        return 1;
    }
    tq_threadpool *pool = NULL;
    if (tq_threadpool_create(&pool, threads) != TQ_OK) return 1;
    context_params cp = {n, batch < n ? batch : n, 0, NULL, 0};
    model_context *x = NULL;
    if (context_create(m, &cp, pool, &x, err, sizeof err) != MODEL_OK) {
        fprintf(stderr, "context_create: %s\n", err);
        return 1;
    }
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    float *logits = malloc((size_t)model_get_config(m)->n_vocab * sizeof *logits);
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        tok[i] = (int32_t)(100 + (s >> 8) % (uint32_t)(model_get_config(m)->n_vocab - 200));
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int p0 = 0; p0 < n; p0 += cp.max_batch) {
            int k = n - p0 < cp.max_batch ? n - p0 : cp.max_batch;
            st = context_forward(x, tok + p0, k, p0, 0, p0 + k == n ? logits : NULL);
            if (st != MODEL_OK) {
                fprintf(stderr, "context_forward: %s\n", context_last_error(x));
                return 1;
            }
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    printf("%s: prefill %d tokens (batch %d), %d thread(s), kernels %s: %.3f s, %.1f tok/s (best of %d)\n", argv[1], n,
           cp.max_batch, threads, quant_kernels_name(), best, n / best, reps);
    free(tok);
    free(logits);
    context_free(x);
    tq_threadpool_free(pool);
    model_free(m);
    return 0;
}

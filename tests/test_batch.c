/* Many sequences in one forward (engine/context.h, model_batch): each sequence's logits, step
 * by step, are bit-identical to the same calls run alone with context_forward — prompt chunks
 * and decode steps mixed in one batch, sequences joining late, different KV schemes side by
 * side (the batch invariance tq serve's greedy answers rest on). Then the batch's errors, each
 * of which changes no sequence. On a tiny synthetic model (runs everywhere) and on the real
 * model when present (SKIP otherwise). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/context.h"

#include "test_util.h"
#include "tiny_model.h"
#include "engine_test_util.h"

#define N_SEQ 5
#define CHUNK 8

/* Sequence i: a prompt of prompt_len(i) tokens, in CHUNK pieces, then `decode` single steps. */
static int prompt_len(int i) { return 5 + 7 * i; }

static int32_t token_of(int i, int t, int n_vocab) { return (int32_t)((i * 7919 + t * 104729 + 13) % n_vocab); }

/* The number of calls sequence i makes: its prompt pieces then its decode steps. */
static int n_calls(int i, int decode) { return (prompt_len(i) + CHUNK - 1) / CHUNK + decode; }

/* Call c of sequence i: its tokens' first position and count. */
static void call_of(int i, int c, int *pos0, int *n) {
    const int pieces = (prompt_len(i) + CHUNK - 1) / CHUNK;
    if (c < pieces) {
        *pos0 = c * CHUNK;
        *n = prompt_len(i) - *pos0 < CHUNK ? prompt_len(i) - *pos0 : CHUNK;
    } else {
        *pos0 = prompt_len(i) + (c - pieces);
        *n = 1;
    }
}

static model_context *open_ctx(const model *m, const char *scheme, int max_ctx, tq_threadpool *pool) {
    tq_kv_scheme sc;
    char err[256];
    CHECK_MSG(tq_kv_scheme_parse(scheme, &sc, err, sizeof err) == TQ_OK, "%s: %s", scheme, err);
    const context_params p = {max_ctx, CHUNK, 0, &sc, 0};
    model_context *x = NULL;
    model_status st = context_create(m, &p, pool, &x, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "context: %s", err);
    return x;
}

/* Runs the N_SEQ sequences alone, then batched (sequence i joining at step i), and compares
 * every call's last-row logits bit for bit. schemes[i]: sequence i's KV scheme. */
static void check_batch(const model *m, const char *const *schemes, int decode, int pool_threads) {
    const int nv = model_get_config(m)->n_vocab;
    const int max_ctx = prompt_len(N_SEQ - 1) + decode + 1;
    int total_calls = 0, offs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        offs[i] = total_calls;
        total_calls += n_calls(i, decode);
    }
    int32_t toks[N_SEQ][64 + 64];
    for (int i = 0; i < N_SEQ; i++)
        for (int t = 0; t < prompt_len(i) + decode; t++) toks[i][t] = token_of(i, t, nv);
    float *alone = malloc((size_t)total_calls * (size_t)nv * sizeof(float));
    float *batched = malloc((size_t)total_calls * (size_t)nv * sizeof(float));
    CHECK(alone != NULL && batched != NULL);
    tq_threadpool *pool = NULL;
    if (pool_threads > 0) CHECK(tq_threadpool_create(&pool, pool_threads) == TQ_OK);

    for (int i = 0; i < N_SEQ; i++) { /* alone */
        model_context *x = open_ctx(m, schemes[i], max_ctx, pool);
        for (int c = 0; x != NULL && c < n_calls(i, decode); c++) {
            int pos0, n;
            call_of(i, c, &pos0, &n);
            model_status st = context_forward(x, toks[i] + pos0, n, pos0, 0, alone + (size_t)(offs[i] + c) * nv);
            CHECK_MSG(st == MODEL_OK, "alone %d call %d: %s", i, c, context_last_error(x));
        }
        context_free(x);
    }

    model_context *xs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) xs[i] = open_ctx(m, schemes[i], max_ctx, pool);
    model_batch *b = NULL;
    char err[256];
    CHECK(model_batch_create(m, N_SEQ * CHUNK, N_SEQ, 0, pool, &b, err, sizeof err) == MODEL_OK);
    int done[N_SEQ] = {0}, steps = 0, max_rows = 0;
    for (int step = 0;; step++) { /* batched: sequence i joins at step i */
        batch_seq bs[N_SEQ];
        int k = 0, rows = 0;
        for (int i = 0; i < N_SEQ && i <= step; i++) {
            if (done[i] >= n_calls(i, decode)) continue;
            int pos0, n;
            call_of(i, done[i], &pos0, &n);
            bs[k++] = (batch_seq){xs[i], toks[i] + pos0, n, pos0, batched + (size_t)(offs[i] + done[i]) * nv};
            rows += n;
            done[i]++;
        }
        if (k == 0 && step >= N_SEQ) break;
        if (k == 0) continue;
        if (rows > max_rows) max_rows = rows;
        model_status st = model_batch_forward(b, bs, k);
        CHECK_MSG(st == MODEL_OK, "step %d: %s", step, model_batch_last_error(b));
        if (st != MODEL_OK) break;
        steps++;
    }
    int same = 1, first_bad = -1;
    for (int r = 0; r < total_calls && same; r++)
        if (memcmp(alone + (size_t)r * nv, batched + (size_t)r * nv, (size_t)nv * sizeof(float)) != 0) {
            same = 0;
            first_bad = r;
        }
    CHECK_MSG(same, "call row %d: batched logits differ from the sequence run alone", first_bad);
    printf("  %d sequences (%s, %s, ...), %d steps of up to %d rows, %d threads: every logit row identical\n",
           N_SEQ, schemes[0], schemes[1], steps, max_rows, pool_threads);

    /* Errors change nothing: lengths stay. */
    int len0[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) len0[i] = context_seq_len(xs[i]);
    const int32_t tok = 1, bad = -5;
    float *row = batched;
    batch_seq two[2] = {{xs[0], &tok, 1, len0[0], row}, {xs[0], &tok, 1, len0[0], NULL}};
    CHECK(model_batch_forward(b, two, 2) == MODEL_ERR_ARG); /* the same context twice */
    CHECK(strstr(model_batch_last_error(b), "same context") != NULL);
    batch_seq badtok[2] = {{xs[0], &tok, 1, len0[0] - 1, row}, {xs[1], &bad, 1, len0[1], NULL}};
    CHECK(model_batch_forward(b, badtok, 2) == MODEL_ERR_TOKEN);
    CHECK(strstr(model_batch_last_error(b), "sequence 1") != NULL);
    batch_seq past[1] = {{xs[2], &tok, 1, max_ctx, row}};
    CHECK(model_batch_forward(b, past, 1) == MODEL_ERR_POS);
    batch_seq nul[1] = {{NULL, &tok, 1, 0, row}};
    CHECK(model_batch_forward(b, nul, 1) == MODEL_ERR_ARG);
    CHECK(model_batch_forward(b, NULL, 1) == MODEL_ERR_ARG);
    CHECK(model_batch_forward(b, two, 0) == MODEL_ERR_ARG);
    batch_seq many[N_SEQ + 1];
    for (int i = 0; i <= N_SEQ; i++) many[i] = (batch_seq){xs[i % N_SEQ], &tok, 1, len0[i % N_SEQ], NULL};
    CHECK(model_batch_forward(b, many, N_SEQ + 1) == MODEL_ERR_BATCH);
    for (int i = 0; i < N_SEQ; i++) CHECK_MSG(context_seq_len(xs[i]) == len0[i], "sequence %d changed", i);
    CHECK(model_batch_forward(NULL, two, 1) == MODEL_ERR_ARG);
    CHECK(model_batch_create(m, 4, 5, 0, NULL, &(model_batch *){NULL}, err, sizeof err) == MODEL_ERR_ARG);
    CHECK(model_batch_create(NULL, 4, 1, 0, NULL, &(model_batch *){NULL}, err, sizeof err) == MODEL_ERR_ARG);

    model_batch_free(b);
    for (int i = 0; i < N_SEQ; i++) context_free(xs[i]);
    tq_threadpool_free(pool);
    free(alone);
    free(batched);
}

static const char *tiny_path = "/tmp/tq_test_batch_tiny.gguf";

static void test_tiny_batch(void) {
    static tiny t;
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 1, 4242, tiny_path);
    if (m == NULL) return;
    const char *schemes[N_SEQ] = {"f16", "turbo3", "turbo4", "q8_0", "turbo3"};
    check_batch(m, schemes, 6, 0);
    check_batch(m, schemes, 6, 2);
    model_free(m);
    remove(tiny_path);
}

static void test_real_batch(void) {
    const char *path = real_model_path();
    if (access(path, R_OK) != 0) SKIP_TEST("no model at %s (set TQ_MODEL or run scripts/get-model.sh)", path);
    if (TSAN) /* ~150 s there; the tiny model's runs on a pool cover the threads */
        SKIP_TEST("real model under ThreadSanitizer (the optimized and ASan builds run it)");
    model *m = load_model(path);
    if (m == NULL) return;
    const char *schemes[N_SEQ] = {"turbo3", "f16", "turbo3", "turbo4", "turbo3"};
    check_batch(m, schemes, 4, 2);
    model_free(m);
}

int main(void) {
    RUN_TEST(test_tiny_batch);
    RUN_TEST(test_real_batch);
    return test_report();
}

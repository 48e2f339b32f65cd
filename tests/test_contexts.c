/* Model and context apart (engine/model.h, engine/context.h): two contexts share ONE loaded
 * model and run different KV schemes (f16 and turbo3) at the same time on two threads; each
 * context's logits — every prefill row and every decode step — are bit-identical to the same
 * context run alone. On a tiny synthetic model this test writes itself (tests/tiny_model.h:
 * runs everywhere) and on the real model when present (SKIP otherwise). Built under TSan by
 * `make test-tsan`: the shared model must be read-only after load, so the two threads do not
 * race. One thread lends its context a thread pool of 2 (the matmuls and attention on two
 * more threads), the other runs on its own thread (pool NULL). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/context.h"

#include "test_util.h"
#include "tiny_model.h"
#include "engine_test_util.h"

typedef struct job {
    const model *m;
    const char *scheme;  /* KV scheme text */
    int pool_threads;    /* 0: no pool (the caller's thread) */
    int prompt, decode;  /* prompt tokens (in chunks of chunk), then single-token steps */
    int chunk;
    const int32_t *tokens;
    float *logits;       /* (prompt + decode, n_vocab) */
    model_status st;
    char err[256];
} job;

/* Runs the job's sequence on a fresh context of its own. No CHECK here: it runs on threads. */
static void *run_job(void *arg) {
    job *j = arg;
    tq_threadpool *pool = NULL;
    model_context *x = NULL;
    tq_kv_scheme sc;
    j->st = MODEL_ERR_ARG;
    if (tq_kv_scheme_parse(j->scheme, &sc, j->err, sizeof j->err) != TQ_OK) return NULL;
    if (j->pool_threads > 0 && tq_threadpool_create(&pool, j->pool_threads) != TQ_OK) {
        snprintf(j->err, sizeof j->err, "no pool of %d", j->pool_threads);
        return NULL;
    }
    const context_params p = {j->prompt + j->decode, j->chunk, 0, &sc, 0};
    j->st = context_create(j->m, &p, pool, &x, j->err, sizeof j->err);
    const size_t nv = (size_t)model_get_config(j->m)->n_vocab;
    for (int pos = 0; j->st == MODEL_OK && pos < j->prompt; pos += j->chunk) {
        const int n = j->prompt - pos < j->chunk ? j->prompt - pos : j->chunk;
        j->st = context_forward(x, j->tokens + pos, n, pos, 1, j->logits + (size_t)pos * nv);
    }
    for (int pos = j->prompt; j->st == MODEL_OK && pos < j->prompt + j->decode; pos++)
        j->st = context_forward(x, j->tokens + pos, 1, pos, 0, j->logits + (size_t)pos * nv);
    if (j->st != MODEL_OK && x != NULL) snprintf(j->err, sizeof j->err, "%s", context_last_error(x));
    context_free(x);
    tq_threadpool_free(pool);
    return NULL;
}

/* Both schemes alone, then both at once on two threads; the logits must be the same bits. */
static void check_shared(const model *m, const char *const schemes[2], int prompt, int decode, int chunk) {
    const int nv = model_get_config(m)->n_vocab, rows = prompt + decode;
    int32_t *tokens = malloc((size_t)rows * sizeof *tokens);
    float *alone[2], *together[2];
    job jobs[2];
    for (int i = 0; i < rows; i++) tokens[i] = i == 0 ? 2 : 3 + (int32_t)((i * 7919) % (nv - 3));
    for (int k = 0; k < 2; k++) {
        alone[k] = malloc((size_t)rows * (size_t)nv * sizeof(float));
        together[k] = calloc((size_t)rows * (size_t)nv, sizeof(float));
        CHECK(tokens && alone[k] && together[k]);
        if (!tokens || !alone[k] || !together[k]) return;
        jobs[k] = (job){m, schemes[k], k == 0 ? 2 : 0, prompt, decode, chunk, tokens, alone[k], MODEL_OK, ""};
        run_job(&jobs[k]);
        CHECK_MSG(jobs[k].st == MODEL_OK, "%s alone: %s: %s", schemes[k], model_status_name(jobs[k].st), jobs[k].err);
        jobs[k].logits = together[k];
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++) CHECK(pthread_create(&th[k], NULL, run_job, &jobs[k]) == 0);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(jobs[k].st == MODEL_OK, "%s together: %s: %s", schemes[k], model_status_name(jobs[k].st),
                  jobs[k].err);
        CHECK_MSG(memcmp(alone[k], together[k], (size_t)rows * (size_t)nv * sizeof(float)) == 0,
                  "%s: logits run beside the other context differ from the same context run alone", schemes[k]);
    }
    /* the two schemes do differ: the contexts really ran their own caches */
    CHECK(memcmp(alone[0], alone[1], (size_t)rows * (size_t)nv * sizeof(float)) != 0);
    printf("  %d prompt + %d decode rows of %d logits, %s and %s on two threads: bit-identical to each alone\n",
           prompt, decode, nv, schemes[0], schemes[1]);
    for (int k = 0; k < 2; k++) {
        free(alone[k]);
        free(together[k]);
    }
    free(tokens);
}

static const char *tiny_path = "/tmp/tq_test_contexts_tiny.gguf";

static void test_tiny_shared(void) {
    static tiny t;
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 1, 777, tiny_path);
    if (m == NULL) return;
    static const char *const schemes[2] = {"f16", "turbo3:prefill_raw=0:batch=4"};
    check_shared(m, schemes, 24, 8, 8);
    model_free(m);
    remove(tiny_path);
}

static void test_real_shared(void) {
    const char *path = real_model_path();
    if (access(path, R_OK) != 0) SKIP_TEST("no model at %s (set TQ_MODEL or run scripts/get-model.sh)", path);
    model *m = load_model(path);
    if (m == NULL) return;
    /* Under the sanitizers (5-20x slower) a shorter sequence: the same code paths, batch 8. */
    if (TSAN || SANITIZED) {
        static const char *const quick[2] = {"f16", "turbo3:prefill_raw=0:batch=8"};
        test_skip("real model: 16 prompt + 2 decode rows under the sanitizers (128 + 4 in the optimized build)");
        check_shared(m, quick, 16, 2, 8);
    } else {
        static const char *const schemes[2] = {"f16", "turbo3:prefill_raw=0:batch=64"};
        check_shared(m, schemes, 128, 4, 64);
    }
    model_free(m);
}

/* A context's arguments are checked; the model refuses nothing it did not load. */
static void test_create_errors(void) {
    static tiny t;
    rng_state = 778;
    t.arch = MODEL_ARCH_LLAMA;
    CHECK(write_tiny(&t, tiny_path, NULL));
    model *m = NULL;
    model_context *x = (model_context *)1;
    char err[256];
    CHECK(model_load(NULL, &m, err, sizeof err) == MODEL_ERR_ARG && m == NULL);
    CHECK(model_load(tiny_path, &m, err, sizeof err) == MODEL_OK);
    if (m == NULL) return;
    context_params p = {CTX, 8, 0, NULL, 0};
    CHECK(context_create(NULL, &p, NULL, &x, err, sizeof err) == MODEL_ERR_ARG && x == NULL);
    CHECK(context_create(m, NULL, NULL, &x, err, sizeof err) == MODEL_ERR_ARG);
    p.max_ctx = CTX + 1;
    CHECK(context_create(m, &p, NULL, &x, err, sizeof err) == MODEL_ERR_CONTEXT && x == NULL);
    CHECK_MSG(strstr(err, "context_length") != NULL, "%s", err);
    p.max_ctx = CTX;
    tq_kv_scheme bad;
    CHECK(tq_kv_scheme_parse("turbo3", &bad, NULL, 0) == TQ_OK);
    bad.batch = 0; /* the library refuses batch < 1 */
    p.kv_scheme = &bad;
    model_status st = context_create(m, &p, NULL, &x, err, sizeof err);
    CHECK_MSG(st == MODEL_ERR_KV_SCHEME && x == NULL, "%s: %s", model_status_name(st), err);
    p.kv_scheme = NULL;
    p.max_batch = 100; /* clipped to max_ctx */
    CHECK(context_create(m, &p, NULL, &x, err, sizeof err) == MODEL_OK);
    CHECK(context_get_params(x)->max_batch == CTX && context_model(x) == m && context_config(x)->n_vocab == V);
    CHECK(context_model(NULL) == NULL && context_config(NULL) == NULL && context_get_params(NULL) == NULL);
    CHECK(model_file(m) != NULL && model_file(NULL) == NULL);
    CHECK(model_layer_is_swa(m, -1) == 0 && model_layer_is_swa(m, L) == 0 && model_layer_is_swa(NULL, 0) == 0);
    context_free(x);
    context_free(NULL);
    model_free(m);
    remove(tiny_path);
}

int main(void) {
    RUN_TEST(test_tiny_shared);
    RUN_TEST(test_create_errors);
    RUN_TEST(test_real_shared);
    return test_report();
}

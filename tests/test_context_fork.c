/* Forked contexts (engine/context.h, context_fork): a prompt prefilled once in context A, B
 * forked from A (its KV cache shares A's pages copy-on-write), then A and B decode different
 * continuations. Every logit row of each is bit-identical to an independent context that
 * prefilled the same prompt and decoded the same continuation: interleaved step by step; after
 * A is truncated and refilled (writing where it shared pages); after A is freed; in a fork of
 * the fork; and with A and B on two threads at once (TSan clean under `make test-tsan`).
 * Memory right after the fork: the pages are shared (both see the same shared bytes, > 0), and
 * the two together hold exactly A's pages plus what B owns alone. Schemes f16, turbo3 compressed
 * on every call (prefill_raw=0) and turbo3 with a raw prefill (the default: the first decode
 * step of each context compresses the shared prompt on its own side). On the tiny synthetic
 * Gemma 3 model (tests/tiny_model.h: sliding-window layers, runs everywhere) and on the real
 * model when present (SKIP otherwise; under TSan only the two threads, shorter). */
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

/* One case: a prompt of np tokens prefilled in chunks of chunk, then continuations of nc
 * single-token steps per phase (three phases for B, one for A). */
typedef struct fork_case {
    const model *m;
    tq_kv_scheme scheme;
    int np, nc, chunk, max_ctx;
    int nv;
    const int32_t *prompt;
    int32_t cont_a[64], cont_b[3 * 64]; /* A's continuation (nc tokens), B's (3 nc) */
    float *want_a, *want_b;             /* an independent context's rows for each */
} fork_case;

/* Prefills tokens[0, n) in chunks (no logits). No CHECK: may run on a thread. */
static model_status prefill(model_context *x, const int32_t *tokens, int n, int chunk) {
    model_status st = MODEL_OK;
    for (int pos = 0; st == MODEL_OK && pos < n; pos += chunk)
        st = context_forward(x, tokens + pos, n - pos < chunk ? n - pos : chunk, pos, 0, NULL);
    return st;
}

/* What an independent context gives: the prompt, then cont[0, n) decoded. */
static void reference(const fork_case *c, const int32_t *cont, int n, float *rows) {
    const context_params p = {c->max_ctx, c->chunk, 0, &c->scheme, 0};
    model_context *x = NULL;
    char err[256];
    model_status st = context_create(c->m, &p, NULL, &x, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "%s: %s", model_status_name(st), err);
    if (st != MODEL_OK) return;
    st = prefill(x, c->prompt, c->np, c->chunk);
    if (st == MODEL_OK) st = decode_rows(x, cont, n, rows);
    CHECK_MSG(st == MODEL_OK, "reference: %s: %s", model_status_name(st), context_last_error(x));
    context_free(x);
}

static void tokens_from(int32_t *t, int n, int nv, int seed) {
    for (int i = 0; i < n; i++) t[i] = 3 + (int32_t)(((i + 1) * 7919 + seed * 104729) % (nv - 3));
}

static int same_rows(const float *a, const float *b, int rows, int nv) {
    return memcmp(a, b, (size_t)rows * (size_t)nv * sizeof(float)) == 0;
}

/* A prefills, B = fork(A): memory, then interleaved decoding, truncating and refilling A, a
 * fork of B, freeing A. */
static void check_sequential(const fork_case *c) {
    const int nc = c->nc, nv = c->nv;
    const int32_t *cont_a = c->cont_a, *cont_b = c->cont_b;
    const float *want_a = c->want_a, *want_b = c->want_b;
    int32_t refill[64];
    tokens_from(refill, c->chunk, nv, 3);
    float *got_a = malloc((size_t)nc * nv * sizeof(float)), *got_b = malloc((size_t)3 * nc * nv * sizeof(float));
    float *got_c = malloc((size_t)2 * nc * nv * sizeof(float));
    CHECK(got_a && got_b && got_c);
    if (!got_a || !got_b || !got_c) goto out;

    const context_params p = {c->max_ctx, c->chunk, 0, &c->scheme, 0};
    model_context *a = NULL, *b = NULL, *fc = NULL;
    char err[256];
    CHECK(context_create(c->m, &p, NULL, &a, err, sizeof err) == MODEL_OK);
    if (a == NULL) goto out;
    CHECK(prefill(a, c->prompt, c->np, c->chunk) == MODEL_OK);
    tq_kv_memory ma, mb, both;
    size_t sa0 = 1, sa = 0, sb = 0;
    CHECK(context_kv_shared_bytes(a, &sa0) == MODEL_OK && sa0 == 0); /* nothing shared yet */
    model_status st = context_fork(a, NULL, &b, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "fork: %s: %s", model_status_name(st), err);
    if (b == NULL) goto free_a;
    CHECK(context_seq_len(b) == c->np && context_model(b) == c->m);
    CHECK(context_get_params(b)->max_ctx == c->max_ctx && context_get_params(b)->max_batch == c->chunk);
    CHECK(memcmp(context_get_params(b)->kv_scheme, &c->scheme, sizeof c->scheme) == 0);

    /* memory right after the fork: the prompt's pages are shared, counted once together */
    const model_context *pair[2] = {a, b};
    CHECK(context_kv_memory(a, &ma) == MODEL_OK && context_kv_memory(b, &mb) == MODEL_OK);
    CHECK(context_kv_shared_bytes(a, &sa) == MODEL_OK && context_kv_shared_bytes(b, &sb) == MODEL_OK);
    CHECK(contexts_kv_memory(pair, 2, &both) == MODEL_OK);
    CHECK_MSG(sa > 0 && sa == sb, "shared bytes A %zu B %zu", sa, sb);
    CHECK_MSG(both.allocated_bytes == ma.allocated_bytes + mb.allocated_bytes - sb,
              "together %zu, A %zu + B %zu - shared %zu", both.allocated_bytes, ma.allocated_bytes,
              mb.allocated_bytes, sb);
    CHECK(both.allocated_bytes < ma.allocated_bytes + mb.allocated_bytes);
    /* the same tokens; their data once (plus each cache's own key transform state) */
    CHECK(both.tokens == ma.tokens && mb.tokens == ma.tokens && both.compressed_tokens == ma.compressed_tokens);
    CHECK(both.data_bytes >= ma.data_bytes && both.data_bytes < ma.data_bytes + mb.data_bytes);
    printf("    after the fork: A %zu B %zu bytes, %zu shared, %zu together\n", ma.allocated_bytes,
           mb.allocated_bytes, sb, both.allocated_bytes);

    /* phase 1: A and B step by step in turn */
    const size_t row = (size_t)nv;
    for (int i = 0; i < nc; i++) {
        CHECK(decode_rows(a, cont_a + i, 1, got_a + i * row) == MODEL_OK);
        CHECK(decode_rows(b, cont_b + i, 1, got_b + i * row) == MODEL_OK);
    }
    CHECK_MSG(same_rows(got_a, want_a, nc, nv), "A's continuation differs from an independent context's");
    CHECK_MSG(same_rows(got_b, want_b, nc, nv), "B's continuation differs from an independent context's");
    CHECK(!same_rows(got_a, got_b, nc, nv)); /* the continuations do differ */

    /* phase 2: C = fork(B); A rewinds into the shared prompt and writes new tokens there */
    st = context_fork(b, NULL, &fc, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "fork of a fork: %s: %s", model_status_name(st), err);
    context_truncate(a, c->np / 2);
    CHECK(context_forward(a, refill, c->chunk, context_seq_len(a), 0, NULL) == MODEL_OK);
    CHECK(decode_rows(b, cont_b + nc, nc, got_b + nc * row) == MODEL_OK);
    /* phase 3: A freed */
    context_free(a);
    a = NULL;
    CHECK(decode_rows(b, cont_b + 2 * nc, nc, got_b + 2 * nc * row) == MODEL_OK);
    CHECK_MSG(same_rows(got_b, want_b, 3 * nc, nv), "B after A's truncation, refill and free differs");
    if (fc != NULL) {
        CHECK(decode_rows(fc, cont_b + nc, 2 * nc, got_c) == MODEL_OK);
        CHECK_MSG(same_rows(got_c, want_b + nc * row, 2 * nc, nv), "a fork of the fork differs");
    }
    context_free(fc);
    context_free(b);
free_a:
    context_free(a);
out:
    free(got_a);
    free(got_b);
    free(got_c);
}

typedef struct side {
    model_context *x;
    const int32_t *cont;
    int n;
    float *rows;
    model_status st;
} side;

static void *run_side(void *arg) {
    side *s = arg;
    s->st = decode_rows(s->x, s->cont, s->n, s->rows);
    return NULL;
}

/* A (on a pool of 2) prefills, B = fork(A) (no pool); then both decode on two threads. */
static void check_threads(const fork_case *c) {
    const int nc = c->nc, nv = c->nv;
    const int32_t *cont[2] = {c->cont_a, c->cont_b};
    const float *want[2] = {c->want_a, c->want_b};
    float *got[2];
    for (int k = 0; k < 2; k++) {
        got[k] = calloc((size_t)nc * nv, sizeof(float));
        CHECK(got[k] != NULL);
        if (got[k] == NULL) return;
    }
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 2) == TQ_OK);
    const context_params p = {c->max_ctx, c->chunk, 0, &c->scheme, 0};
    model_context *a = NULL, *b = NULL;
    char err[256];
    CHECK(context_create(c->m, &p, pool, &a, err, sizeof err) == MODEL_OK);
    if (a != NULL && prefill(a, c->prompt, c->np, c->chunk) == MODEL_OK &&
        context_fork(a, NULL, &b, err, sizeof err) == MODEL_OK) {
        side sides[2] = {{a, cont[0], nc, got[0], MODEL_ERR_ARG}, {b, cont[1], nc, got[1], MODEL_ERR_ARG}};
        pthread_t th[2];
        for (int k = 0; k < 2; k++) CHECK(pthread_create(&th[k], NULL, run_side, &sides[k]) == 0);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        for (int k = 0; k < 2; k++) {
            CHECK_MSG(sides[k].st == MODEL_OK, "%s: %s", model_status_name(sides[k].st),
                      context_last_error(sides[k].x));
            CHECK_MSG(same_rows(got[k], want[k], nc, nv), "%s on two threads differs", k ? "B" : "A");
        }
    } else {
        CHECK_MSG(0, "setup: %s", a ? context_last_error(a) : err);
    }
    context_free(b);
    context_free(a);
    tq_threadpool_free(pool);
    for (int k = 0; k < 2; k++) free(got[k]);
}

/* Each scheme: an independent context's rows for both continuations, then the fork checks
 * (sequential only in non-TSan builds or when tiny: TSan is here for the threads). */
static void check_model(const model *m, const char *const *schemes, int n_schemes, int np, int nc, int chunk,
                        int sequential) {
    const int nv = model_get_config(m)->n_vocab;
    static fork_case c;
    int32_t *prompt = malloc((size_t)np * sizeof *prompt);
    c.want_a = malloc((size_t)nc * nv * sizeof(float));
    c.want_b = malloc((size_t)3 * nc * nv * sizeof(float));
    CHECK(prompt && c.want_a && c.want_b);
    if (prompt && c.want_a && c.want_b) {
        tokens_from(prompt, np, nv, 0);
        prompt[0] = 2; /* BOS */
        tokens_from(c.cont_a, nc, nv, 1);
        tokens_from(c.cont_b, 3 * nc, nv, 2);
        c.m = m;
        c.np = np;
        c.nc = nc;
        c.chunk = chunk;
        c.max_ctx = np + 3 * nc + chunk;
        c.nv = nv;
        c.prompt = prompt;
        for (int i = 0; i < n_schemes; i++) {
            CHECK(tq_kv_scheme_parse(schemes[i], &c.scheme, NULL, 0) == TQ_OK);
            printf("  %s: %d prompt tokens, %d-token continuations\n", schemes[i], np, nc);
            reference(&c, c.cont_a, nc, c.want_a);
            reference(&c, c.cont_b, 3 * nc, c.want_b);
            if (sequential) check_sequential(&c);
            check_threads(&c);
        }
    }
    free(prompt);
    free(c.want_a);
    free(c.want_b);
}

static const char *tiny_path = "/tmp/tq_test_context_fork_tiny.gguf";

static void test_tiny_fork(void) {
    static tiny t;
    /* Gemma 3: sliding-window layers (SWA = 4) beside global ones */
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 1, 779, tiny_path);
    if (m == NULL) return;
    static const char *const schemes[3] = {"f16", "turbo3:prefill_raw=0:batch=4", "turbo3:batch=4"};
    check_model(m, schemes, 3, 24, 8, 8, 1);
    model_free(m);
    remove(tiny_path);
}

static void test_real_fork(void) {
    const char *path = real_model_path();
    if (access(path, R_OK) != 0) SKIP_TEST("no model at %s (set TQ_MODEL or run scripts/get-model.sh)", path);
    model *m = load_model(path);
    if (m == NULL) return;
    if (TSAN || SANITIZED) { /* 5-20x slower: the same code paths, shorter */
        static const char *const quick[2] = {"f16", "turbo3:prefill_raw=0:batch=8"};
        test_skip("real model: 16 prompt + 2 decode tokens under the sanitizers, the two threads only (64 + 4 "
                  "and every check in the optimized build)");
        check_model(m, quick, 2, 16, 2, 8, 0);
    } else {
        static const char *const schemes[3] = {"f16", "turbo3:prefill_raw=0:batch=32", "turbo3"};
        check_model(m, schemes, 3, 64, 4, 32, 1);
    }
    model_free(m);
}

/* Bad arguments are refused with MODEL_ERR_ARG, nothing created. */
static void test_fork_errors(void) {
    static tiny t;
    model *m = load_tiny(&t, MODEL_ARCH_LLAMA, 0, 780, tiny_path);
    if (m == NULL) return;
    const context_params p = {CTX, 8, 0, NULL, 0};
    model_context *x = NULL, *y = (model_context *)1;
    char err[64];
    CHECK(context_create(m, &p, NULL, &x, err, sizeof err) == MODEL_OK);
    CHECK(context_fork(NULL, NULL, &y, err, sizeof err) == MODEL_ERR_ARG && y == NULL);
    CHECK(context_fork(x, NULL, NULL, err, sizeof err) == MODEL_ERR_ARG);
    tq_kv_memory mem;
    size_t shared;
    const model_context *xs[2] = {x, NULL};
    CHECK(contexts_kv_memory(NULL, 1, &mem) == MODEL_ERR_ARG);
    CHECK(contexts_kv_memory(xs, 0, &mem) == MODEL_ERR_ARG);
    CHECK(contexts_kv_memory(xs, 1, NULL) == MODEL_ERR_ARG);
    CHECK(contexts_kv_memory(xs, 2, &mem) == MODEL_ERR_ARG);
    CHECK(contexts_kv_memory(xs, 1, &mem) == MODEL_OK && mem.tokens == 0);
    CHECK(context_kv_shared_bytes(NULL, &shared) == MODEL_ERR_ARG);
    CHECK(context_kv_shared_bytes(x, NULL) == MODEL_ERR_ARG);
    /* the fork of an empty context is an empty context */
    CHECK(context_fork(x, NULL, &y, err, sizeof err) == MODEL_OK && y != NULL && context_seq_len(y) == 0);
    context_free(y);
    context_free(x);
    model_free(m);
    remove(tiny_path);
}

int main(void) {
    RUN_TEST(test_tiny_fork);
    RUN_TEST(test_fork_errors);
    RUN_TEST(test_real_fork);
    return test_report();
}

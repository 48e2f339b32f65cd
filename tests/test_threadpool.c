/* The thread pool and an embedder's parallel for (tq_threadpool_create_custom).
 *
 * test_custom_contract: every task runs once, thread indices stay below the pool size, argument
 * errors. test_custom_attention: tq_kv_attention on a pool built on a pthread-based parallel for
 * (a stand-in for ggml, OpenMP or a server's workers: no OpenMP needed) and on a serial one gives
 * the bytes of the built-in pool, over schemes, GQA shapes, decode and prefill.
 * test_custom_matmul: the engine's matmul on the same pools, bit-identical too.
 * test_builtin_runs: the built-in pool's workers spin between runs, then sleep (src/threads.c):
 * thousands of back-to-back runs (the spinning hand-off) and runs after pauses longer than the
 * spin (the sleeping one), each task exactly once, on a valid thread, its writes visible when
 * the run returns; a pool freed while its workers spin or sleep. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/matmul.h"
#include "test_util.h"
#include "turboquant.h"

#define POOL_THREADS 3

/* ---- two parallel-for implementations an embedder might bring ---- */

/* Runs every task on the caller as thread 0. */
static void serial_for(void *user, tq_task_fn fn, void *ctx, size_t n) {
    atomic_int *calls = user;
    atomic_fetch_add(calls, 1);
    for (size_t t = 0; t < n; t++) fn(ctx, t, 0);
}

/* Starts POOL_THREADS - 1 pthreads per call; they and the caller take tasks from a counter,
 * each with its own thread index. */
typedef struct pthread_run {
    tq_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
} pthread_run;
typedef struct pthread_arg {
    pthread_run *run;
    int index;
} pthread_arg;

static void *pthread_worker(void *p) {
    pthread_arg *a = p;
    for (;;) {
        size_t t = atomic_fetch_add(&a->run->next, 1);
        if (t >= a->run->n) break;
        a->run->fn(a->run->ctx, t, a->index);
    }
    return NULL;
}

static void pthread_for(void *user, tq_task_fn fn, void *ctx, size_t n) {
    atomic_int *calls = user;
    atomic_fetch_add(calls, 1);
    pthread_run run = {fn, ctx, n, 0};
    pthread_t th[POOL_THREADS - 1];
    pthread_arg args[POOL_THREADS];
    int started = 0;
    for (int i = 0; i < POOL_THREADS; i++) args[i] = (pthread_arg){&run, i};
    for (int i = 1; i < POOL_THREADS; i++)
        if (pthread_create(&th[i - 1], NULL, pthread_worker, &args[i]) == 0) started = i;
        else break;
    pthread_worker(&args[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i - 1], NULL);
}

/* ---- the contract ---- */

typedef struct count_ctx {
    atomic_int *runs; /* (n,) */
    atomic_int bad_thread;
    int n_threads;
} count_ctx;

static void count_task(void *p, size_t task, int thread) {
    count_ctx *c = p;
    atomic_fetch_add(&c->runs[task], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_store(&c->bad_thread, 1);
}

static void test_custom_contract(void) {
    tq_threadpool *pool = (tq_threadpool *)&pool;
    atomic_int calls = 0;
    CHECK(tq_threadpool_create_custom(NULL, 2, pthread_for, &calls) == TQ_ERR_NULL);
    CHECK(tq_threadpool_create_custom(&pool, 2, NULL, &calls) == TQ_ERR_NULL && pool == NULL);
    CHECK(tq_threadpool_create_custom(&pool, 0, pthread_for, &calls) == TQ_ERR_INVALID);
    CHECK(tq_threadpool_create_custom(&pool, 257, pthread_for, &calls) == TQ_ERR_INVALID);
    tq_parallel_for_fn fns[2] = {serial_for, pthread_for};
    for (int f = 0; f < 2; f++) {
        CHECK(tq_threadpool_create_custom(&pool, POOL_THREADS, fns[f], &calls) == TQ_OK);
        CHECK(tq_threadpool_size(pool) == POOL_THREADS);
        enum { N = 1000 };
        atomic_int runs[N];
        for (int i = 0; i < N; i++) atomic_init(&runs[i], 0);
        count_ctx c = {runs, 0, POOL_THREADS};
        int before = atomic_load(&calls);
        tq_threadpool_run(pool, count_task, &c, N);
        CHECK(atomic_load(&calls) == before + 1);
        int once = 1;
        for (int i = 0; i < N; i++) once &= atomic_load(&runs[i]) == 1;
        CHECK(once && !atomic_load(&c.bad_thread));
        tq_threadpool_free(pool);
    }
}

/* ---- attention ---- */

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* Attention of the last n_q positions on each pool; 1 if every pool gives pools[0]'s bytes. */
static int attention_same(const char *scheme, int H, int G, int d, size_t len, size_t n_q,
                          tq_threadpool **pools, int n_pools) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, d, d);
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, NULL, 0) != TQ_OK) return 0;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg) != TQ_OK) return 0;
    size_t row = (size_t)H * (size_t)d, nqh = (size_t)(H * G), on = n_q * nqh * (size_t)d;
    float *k = malloc(sizeof(float) * len * row), *v = malloc(sizeof(float) * len * row);
    float *q = malloc(sizeof(float) * on), *out0 = malloc(sizeof(float) * on),
          *out = malloc(sizeof(float) * on);
    int ok = k && v && q && out0 && out;
    for (size_t i = 0; ok && i < len * row; i++) k[i] = frand() + 0.3f * (float)(i % 7), v[i] = frand();
    for (size_t i = 0; ok && i < on; i++) q[i] = 2.0f * frand();
    ok = ok && tq_kv_cache_append(c, 0, k, v, len) == TQ_OK && tq_kv_cache_compress(c, 0) == TQ_OK;
    tq_attn_params p;
    tq_attn_params_init(&p, d);
    size_t wb = tq_kv_attention_workspace_size(c, 0, (int)nqh, n_q, POOL_THREADS);
    void *work = malloc(wb);
    ok = ok && work;
    for (int i = 0; ok && i < n_pools; i++) {
        tq_status st = tq_kv_attention(c, 0, q, (int)nqh, n_q, &p, pools[i], work, wb,
                                       i ? out : out0, on);
        CHECK_MSG(st == TQ_OK, "%s pool %d: %s", scheme, i, tq_error_name(st));
        ok = st == TQ_OK && (i == 0 || memcmp(out0, out, sizeof(float) * on) == 0);
        CHECK_MSG(ok, "%s H %d G %d d %d len %zu queries %zu: pool %d differs", scheme, H, G, d,
                  len, n_q, i);
    }
    free(k), free(v), free(q), free(out0), free(out), free(work);
    tq_kv_cache_free(c);
    return ok;
}

/* The built-in pool, a pthread-based custom pool and a serial custom one, all of size 3. */
static int make_pools(tq_threadpool **pools, atomic_int *calls) {
    return tq_threadpool_create(&pools[0], POOL_THREADS) == TQ_OK &&
           tq_threadpool_create_custom(&pools[1], POOL_THREADS, pthread_for, calls) == TQ_OK &&
           tq_threadpool_create_custom(&pools[2], POOL_THREADS, serial_for, calls) == TQ_OK;
}

static void test_custom_attention(void) {
    tq_threadpool *pools[3] = {NULL, NULL, NULL};
    atomic_int calls = 0;
    CHECK(make_pools(pools, &calls));
    static const char *schemes[] = {"f16", "q8_0", "turbo3", "turbo3.5", "turbo4:window=64"};
    struct { int H, G, d; } shapes[] = {{1, 4, 128}, {2, 2, 64}};
    static const size_t lens[] = {300, 2300};
    int cases = 0;
    for (size_t si = 0; pools[2] && si < sizeof schemes / sizeof *schemes; si++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                int H = shapes[sh].H, G = shapes[sh].G, d = shapes[sh].d;
                CHECK(attention_same(schemes[si], H, G, d, lens[li], 1, pools, 3));
                CHECK(attention_same(schemes[si], H, G, d, lens[li], 40, pools, 3));
                cases += 2;
            }
    CHECK(atomic_load(&calls) > 0); /* the custom pools were used, not bypassed */
    printf("     %d attention calls, identical on the built-in, pthread and serial pools\n", cases);
    for (int i = 0; i < 3; i++) tq_threadpool_free(pools[i]);
}

static void test_custom_matmul(void) {
    tq_threadpool *pools[3] = {NULL, NULL, NULL};
    atomic_int calls = 0;
    CHECK(make_pools(pools, &calls));
    enum { ROWS = 300, COLS = 256, N = 5 };
    float *w = malloc(sizeof(float) * ROWS * COLS), x[N * COLS], y0[N * ROWS], y[N * ROWS];
    for (size_t i = 0; w && i < (size_t)ROWS * COLS; i++) w[i] = frand();
    for (size_t i = 0; i < (size_t)N * COLS; i++) x[i] = frand();
    matmul_weight mw = {QUANT_F32, ROWS, COLS, w};
    size_t ws = matmul_work_size(&mw, N, POOL_THREADS);
    void *work = malloc(ws);
    for (int i = 0; w && work && pools[2] && i < 3; i++) {
        CHECK(matmul(&mw, x, i ? y : y0, N, pools[i], work, ws) == 0);
        if (i) CHECK_MSG(memcmp(y0, y, sizeof y) == 0, "matmul: pool %d differs", i);
    }
    free(w), free(work);
    for (int i = 0; i < 3; i++) tq_threadpool_free(pools[i]);
}

typedef struct builtin_run {
    int *hits;        /* (n,) tasks run, per task */
    atomic_int bad;   /* thread index out of range */
    int n_threads;
} builtin_run;

static void builtin_task(void *ctx, size_t t, int thread) {
    builtin_run *c = ctx;
    c->hits[t]++; /* a plain write: the run's return must make it visible (TSan checks it) */
    if (thread < 0 || thread >= c->n_threads) atomic_fetch_add(&c->bad, 1);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void test_builtin_runs(void) {
    for (int nt = 2; nt <= 4; nt += 2) {
        tq_threadpool *pool = NULL;
        CHECK(tq_threadpool_create(&pool, nt) == TQ_OK);
        CHECK(tq_threadpool_size(pool) == nt);
        enum { MAX_TASKS = 64 };
        int hits[MAX_TASKS];
        builtin_run c = {hits, 0, nt};
        int wrong = 0;
        for (int r = 0; r < 3000; r++) {
            size_t n = (size_t)(r % MAX_TASKS) + 1;
            memset(hits, 0, sizeof hits);
            if (r % 500 == 499) sleep_us(2000); /* longer than the workers spin: they sleep */
            tq_threadpool_run(pool, builtin_task, &c, n);
            for (size_t t = 0; t < MAX_TASKS; t++) wrong += hits[t] != (t < n);
        }
        CHECK(wrong == 0);
        CHECK(atomic_load(&c.bad) == 0);
        tq_threadpool_free(pool); /* workers spinning right after a run */
        CHECK(tq_threadpool_create(&pool, nt) == TQ_OK);
        sleep_us(5000);
        tq_threadpool_free(pool); /* workers asleep */
    }
}

int main(void) {
    RUN_TEST(test_builtin_runs);
    RUN_TEST(test_custom_contract);
    RUN_TEST(test_custom_attention);
    RUN_TEST(test_custom_matmul);
    return test_report();
}

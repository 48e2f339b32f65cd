/*
 * The one thread pool of the project (include/turboquant/kv.h): attention and the engine's
 * matmuls run on it. A run publishes its function and task count, then bumps the atomic
 * generation (release); workers pick tasks through one atomic counter and the caller works as
 * thread 0. Between runs a worker first spins on the generation for up to TQ_POOL_SPIN_NS
 * (a decode step is a few hundred short runs — matmuls of a few µs to a few hundred — and a
 * sleeping worker costs tens of µs to wake, more than many of those runs take), then sleeps on
 * a condition variable; the caller broadcasts only when some worker sleeps. The caller waits
 * for the workers the same way: spin, then sleep. The sleeper counts and the generation (and
 * the active count and caller flag) are sequentially consistent, so a waker and a sleeper never
 * both miss each other; the run's fields are read only after the generation that publishes
 * them, so ThreadSanitizer sees no race. A custom pool (tq_threadpool_create_custom) has no
 * workers: each run goes to the embedder's parallel for, one run at a time as well.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#include "kvcache_internal.h"

#define TQ_POOL_SPIN_NS 300000L /* how long an idle worker or a waiting caller spins */

typedef struct worker_arg {
    tq_threadpool *pool;
    int index;
} worker_arg;

struct tq_threadpool {
    int n_threads;
    pthread_t *threads;     /* (n_threads − 1,) */
    worker_arg *args;       /* (n_threads − 1,) */
    pthread_mutex_t run_lock; /* one run at a time */
    pthread_mutex_t lock;   /* the sleeps below */
    pthread_cond_t wake, done;
    atomic_ulong generation; /* bumped once per run, after the run's fields are written */
    atomic_int active;      /* workers still in the current run */
    atomic_int sleepers;    /* workers asleep on wake (or about to be) */
    atomic_int caller_waiting; /* the caller asleep on done (or about to be) */
    atomic_int stop;
    tq_parallel_for_fn custom; /* the embedder's parallel for, or NULL */
    void *custom_user;
    void (*fn)(void *, size_t, int);
    void *ctx;
    size_t n_tasks;
    atomic_size_t next;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A bounded spin, shared by idle workers and the waiting caller: spin_more() pauses once and
 * returns 0 once TQ_POOL_SPIN_NS have passed since the spin began (the clock is read every 64
 * pauses). Start each spin from a zeroed spin_clock. */
typedef struct spin_clock {
    unsigned pauses;
    int64_t t0;
} spin_clock;

static int spin_more(spin_clock *c) {
    cpu_relax();
    if ((++c->pauses & 63) != 0) return 1;
    int64_t t = now_ns();
    if (c->t0 == 0) c->t0 = t;
    return t - c->t0 <= TQ_POOL_SPIN_NS;
}

static void drain(tq_threadpool *p, void (*fn)(void *, size_t, int), void *ctx, size_t n,
                  int thread) {
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n) break;
        fn(ctx, t, thread);
    }
}

static void *worker_main(void *argp) {
    worker_arg *a = argp;
    tq_threadpool *p = a->pool;
    unsigned long seen = 0;
    for (;;) {
        spin_clock c = {0, 0};
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_relaxed) && spin_more(&c))
            ;
        if (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        drain(p, p->fn, p->ctx, p->n_tasks, a->index);
        if (atomic_fetch_sub(&p->active, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
    return NULL;
}

void tq_threadpool_free(tq_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; !p->custom && i < p->n_threads - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p->threads);
    free(p->args);
    free(p);
}

tq_status tq_threadpool_create(tq_threadpool **out, int n_threads) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (n_threads < 1 || n_threads > 256) return TQ_ERR_INVALID;
    tq_threadpool *p = calloc(1, sizeof *p);
    if (!p) return TQ_ERR_NOMEM;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->args = calloc((size_t)n_threads, sizeof *p->args);
    if (!p->threads || !p->args) {
        free(p->threads);
        free(p->args);
        free(p);
        return TQ_ERR_NOMEM;
    }
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, 0);
    p->n_threads = 1;
    for (int i = 1; i < n_threads; i++) {
        p->args[i - 1].pool = p;
        p->args[i - 1].index = i;
        if (pthread_create(&p->threads[i - 1], NULL, worker_main, &p->args[i - 1]) != 0) {
            tq_threadpool_free(p);
            return TQ_ERR_NOMEM;
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return TQ_OK;
}

tq_status tq_threadpool_create_custom(tq_threadpool **out, int n_threads, tq_parallel_for_fn fn,
                                      void *user) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!fn) return TQ_ERR_NULL;
    if (n_threads < 1 || n_threads > 256) return TQ_ERR_INVALID;
    tq_threadpool *p = calloc(1, sizeof *p);
    if (!p) return TQ_ERR_NOMEM;
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    p->n_threads = n_threads;
    p->custom = fn;
    p->custom_user = user;
    *out = p;
    return TQ_OK;
}

int tq_threadpool_size(const tq_threadpool *p) { return p ? p->n_threads : 1; }

void tq_threadpool_run(tq_threadpool *p, tq_task_fn fn, void *ctx, size_t n_tasks) {
    if (!p || p->n_threads == 1 || n_tasks <= 1) {
        for (size_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    if (p->custom) {
        p->custom(p->custom_user, fn, ctx, n_tasks);
        pthread_mutex_unlock(&p->run_lock);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->active, p->n_threads - 1);
    atomic_fetch_add(&p->generation, 1); /* publishes the fields above */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    drain(p, fn, ctx, n_tasks, 0);
    spin_clock c = {0, 0};
    while (atomic_load(&p->active) > 0 && spin_more(&c))
        ;
    if (atomic_load(&p->active) > 0) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->caller_waiting, 1);
        /* A seq_cst store then a seq_cst load must not be reordered (the worker's fetch_sub and
         * load of caller_waiting are the pair's other half). C11 already forbids it; the fence
         * says it again for emulators that do not: qemu-user 7.2 running aarch64 on x86 lets
         * stlr; ldar reorder (a store-buffer litmus saw the forbidden outcome in 25% of runs), and
         * this wait then slept forever about once in 60 runs of test_quants. */
        atomic_thread_fence(memory_order_seq_cst);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->lock);
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->run_lock);
}

/*
 * The one thread pool of the project (include/turboquant/kv.h): attention and the engine's
 * matmuls run on it. Workers sleep on a condition variable until the run generation changes;
 * a run hands out tasks through one atomic counter, and the caller works as thread 0. The
 * run's fields are written under the lock before the broadcast and read by workers after
 * taking it, so ThreadSanitizer sees no race. A custom pool (tq_threadpool_create_custom) has
 * no workers: each run goes to the embedder's parallel for, one run at a time as well.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kvcache_internal.h"

typedef struct worker_arg {
    tq_threadpool *pool;
    int index;
} worker_arg;

struct tq_threadpool {
    int n_threads;
    pthread_t *threads;     /* (n_threads − 1,) */
    worker_arg *args;       /* (n_threads − 1,) */
    pthread_mutex_t run_lock; /* one run at a time */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    unsigned long generation;
    int active;             /* workers still in the current run */
    int stop;
    tq_parallel_for_fn custom; /* the embedder's parallel for, or NULL */
    void *custom_user;
    void (*fn)(void *, size_t, int);
    void *ctx;
    size_t n_tasks;
    atomic_size_t next;
};

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
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        void (*fn)(void *, size_t, int) = p->fn;
        void *ctx = p->ctx;
        size_t n = p->n_tasks;
        pthread_mutex_unlock(&p->lock);
        drain(p, fn, ctx, n, a->index);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void tq_threadpool_free(tq_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
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
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    drain(p, fn, ctx, n_tasks, 0);
    pthread_mutex_lock(&p->lock);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}

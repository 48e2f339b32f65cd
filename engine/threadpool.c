/* Workers sleep on a condition variable until the job generation changes, then pull task
 * indices from an atomic counter; the caller works too and waits for the last worker.
 * The job fields are written under the mutex before the broadcast, so workers read them
 * after acquiring it: no data race for ThreadSanitizer to report. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

struct tp_pool {
    int n_threads;
    pthread_t *threads; /* (n_threads - 1) workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* generation changed or stop */
    pthread_cond_t finished; /* n_busy reached 0 */
    uint64_t generation;
    int stop;
    int n_busy; /* workers still inside the current job */
    tp_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next; /* next task index to hand out */
};

typedef struct {
    tp_pool *pool;
    int id;
} worker_arg;

static void run_tasks(tp_pool *p, tp_task_fn fn, void *ctx, int n_tasks, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    tp_pool *p = ((worker_arg *)arg)->pool;
    int id = ((worker_arg *)arg)->id;
    free(arg);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        tp_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int n_tasks = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, fn, ctx, n_tasks, id);
        pthread_mutex_lock(&p->mu);
        if (--p->n_busy == 0) pthread_cond_signal(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop_workers(tp_pool *p, int n_started) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n_started; i++) pthread_join(p->threads[i], NULL);
}

tp_pool *tp_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    tp_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->next, 0);
    if (n_threads == 1) return p;
    p->threads = calloc((size_t)(n_threads - 1), sizeof *p->threads);
    if (p->threads == NULL) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    for (int i = 0; i < n_threads - 1; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a != NULL) {
            a->pool = p;
            a->id = i + 1;
        }
        if (a == NULL || pthread_create(&p->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            stop_workers(p, i);
            pthread_cond_destroy(&p->finished);
            pthread_cond_destroy(&p->wake);
            pthread_mutex_destroy(&p->mu);
            free(p->threads);
            free(p);
            return NULL;
        }
    }
    return p;
}

void tp_free(tp_pool *p) {
    if (p == NULL) return;
    if (p->n_threads > 1) {
        stop_workers(p, p->n_threads - 1);
        pthread_cond_destroy(&p->finished);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->threads);
    free(p);
}

int tp_n_threads(const tp_pool *p) { return p == NULL ? 1 : p->n_threads; }

void tp_parallel_for(tp_pool *p, int n_tasks, tp_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p == NULL || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->n_busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, fn, ctx, n_tasks, 0);
    pthread_mutex_lock(&p->mu);
    while (p->n_busy > 0) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

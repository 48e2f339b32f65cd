/* A small fixed pthread pool with one operation: a blocking parallel-for.
 *
 * tp_parallel_for(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) once for every task
 * in [0, n_tasks), spread over the pool's threads (the caller is thread 0, workers are
 * 1 .. n_threads-1), and returns when all calls have returned. Tasks are handed out one at a
 * time from a shared counter, so uneven tasks balance. `thread` lets fn use per-thread
 * scratch without locking. Nothing is allocated per call.
 *
 * Thread-safety: one parallel_for at a time per pool (do not call it concurrently from two
 * threads, nor from inside fn). Different pools are independent. */
#ifndef TQ_ENGINE_THREADPOOL_H
#define TQ_ENGINE_THREADPOOL_H

typedef struct tp_pool tp_pool;

typedef void (*tp_task_fn)(void *ctx, int task, int thread);

/* n_threads < 1 is taken as 1; with 1 no thread is started and tasks run inline.
 * Returns NULL if memory or thread creation fails (nothing is leaked then). */
tp_pool *tp_create(int n_threads);
/* Joins the workers and frees the pool. NULL is a no-op. */
void tp_free(tp_pool *pool);
/* Threads including the caller; 1 for a NULL pool. */
int tp_n_threads(const tp_pool *pool);
/* pool may be NULL: tasks then run inline on the caller. n_tasks <= 0 does nothing. */
void tp_parallel_for(tp_pool *pool, int n_tasks, tp_task_fn fn, void *ctx);

#endif

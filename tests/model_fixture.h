/* What the engine's tests share: a model, a thread pool and one context on them, opened and
 * closed in one call each (engine/model.h, engine/context.h). The checks keep the order a
 * caller meets them in: the thread count (the pool), then the file (the model), then the
 * sequence's sizes and scheme (the context). */
#ifndef TQ_TESTS_MODEL_FIXTURE_H
#define TQ_TESTS_MODEL_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "../engine/context.h"

typedef struct model_params {
    int max_ctx, max_batch, n_threads, ggml_rounding;
    const tq_kv_scheme *kv_scheme;
} model_params;

typedef struct fixture {
    model *m;
    tq_threadpool *pool;
    model_context *x;
} fixture;

static inline void fixture_close(fixture *f) {
    context_free(f->x);
    model_free(f->m);
    tq_threadpool_free(f->pool);
    memset(f, 0, sizeof *f);
}

/* On error every member is NULL and err holds the message of the step that failed. */
static inline model_status fixture_open(const char *path, const model_params *p, fixture *f, char *err,
                                        size_t err_cap) {
    memset(f, 0, sizeof *f);
    if (p == NULL || path == NULL) {
        snprintf(err, err_cap, "bad argument");
        return MODEL_ERR_ARG;
    }
    tq_status ts = tq_threadpool_create(&f->pool, p->n_threads);
    if (ts != TQ_OK) {
        snprintf(err, err_cap, "n_threads %d: want 1 .. 256 (%s)", p->n_threads, tq_error_name(ts));
        return ts == TQ_ERR_INVALID ? MODEL_ERR_ARG : MODEL_ERR_NOMEM;
    }
    model_status st = model_load(path, &f->m, err, err_cap);
    if (st == MODEL_OK) {
        context_params cp = {p->max_ctx, p->max_batch, p->ggml_rounding, p->kv_scheme, 0};
        st = context_create(f->m, &cp, f->pool, &f->x, err, err_cap);
    }
    if (st != MODEL_OK) fixture_close(f);
    return st;
}

#endif

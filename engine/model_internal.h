/* What engine/model.c and engine/context.c share, not for their callers: the message of a
 * failing call into the object's err[] buffer, and early return on a failing step. */
#ifndef TQ_ENGINE_MODEL_INTERNAL_H
#define TQ_ENGINE_MODEL_INTERNAL_H

#include <stdio.h>

#include "model.h"

/* Writes the printf-style message into obj->err (a char array) and yields st. */
#define fail(obj, st, ...) ((void)snprintf((obj)->err, sizeof (obj)->err, __VA_ARGS__), (st))

/* Copies msg into the caller's buffer err (if err_cap > 0) and yields st: how a constructor
 * (model_load, context_create) reports before it has an object of its own. */
static inline model_status report_error(char *err, size_t err_cap, model_status st, const char *msg) {
    if (err != NULL && err_cap > 0) snprintf(err, err_cap, "%s", msg);
    return st;
}

#define TRY(expr)                                \
    do {                                         \
        model_status try_st_ = (expr);           \
        if (try_st_ != MODEL_OK) return try_st_; \
    } while (0)

#endif

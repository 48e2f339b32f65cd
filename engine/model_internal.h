/* What engine/model.c and engine/context.c share, not for their callers: the message of a
 * failing call into the object's err[] buffer, and early return on a failing step. */
#ifndef TQ_ENGINE_MODEL_INTERNAL_H
#define TQ_ENGINE_MODEL_INTERNAL_H

#include <stdio.h>

/* Writes the printf-style message into obj->err (a char array) and yields st. */
#define fail(obj, st, ...) ((void)snprintf((obj)->err, sizeof (obj)->err, __VA_ARGS__), (st))

#define TRY(expr)                                \
    do {                                         \
        model_status try_st_ = (expr);           \
        if (try_st_ != MODEL_OK) return try_st_; \
    } while (0)

#endif

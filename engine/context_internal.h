/* What engine/context.c lends engine/context_state.c (saving and restoring a context's KV
 * cache), not for the context's callers. */
#ifndef TQ_ENGINE_CONTEXT_INTERNAL_H
#define TQ_ENGINE_CONTEXT_INTERNAL_H

#include "context.h"

/* Makes kv (of scheme) the context's cache, with an attention workspace sized for it, freeing
 * the cache it had; on error kv is freed and the context keeps what it had (message set).
 * Errors: MODEL_ERR_KV_SCHEME, MODEL_ERR_NOMEM. */
model_status context_install_kv(model_context *x, tq_kv_cache *kv, const tq_kv_scheme *scheme);
/* The context's message buffer (context_last_error) and its capacity. */
char *context_error_buffer(model_context *x, size_t *cap);

#endif

/* Saving a context's sequence and restoring one (context.h, "saving and restoring"): the
 * library's cache file (doc/cachefile.md), checked against the context it is loaded into. A
 * prompt cache (prompt_cache.c) wraps the image with the model's fingerprint and the tokens. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "context.h"
#include "context_internal.h"

static model_status say(model_context *x, model_status st, const char *fmt, ...) {
    size_t cap = 0;
    char *err = context_error_buffer(x, &cap);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return st;
}

/* What a file must hold to go into x: x's shapes, scheme, every layer's resolved scheme and
 * window (the library compares them: TQ_ERR_MISMATCH). *ls is the caller's to free. */
static model_status expect_of(model_context *x, tq_kv_cache_config *cfg, tq_kv_layer_scheme **ls) {
    const tq_kv_cache *kv = context_kv_cache(x);
    *ls = NULL;
    if (tq_kv_cache_get_config(kv, cfg, sizeof *cfg) != TQ_OK) return say(x, MODEL_ERR_INTERNAL, "KV cache config");
    *ls = malloc((size_t)cfg->n_layers * sizeof **ls);
    if (*ls == NULL) return say(x, MODEL_ERR_NOMEM, "out of memory");
    for (int il = 0; il < cfg->n_layers; il++)
        if (tq_kv_cache_get_layer_scheme(kv, il, &(*ls)[il], sizeof **ls) != TQ_OK)
            return say(x, MODEL_ERR_INTERNAL, "KV layer %d scheme", il);
    cfg->layer_schemes = *ls;
    cfg->reserve_tokens = 0;
    return MODEL_OK;
}

/* A library load error as a status and a message. */
static model_status load_error(model_context *x, tq_status ts) {
    model_status st = ts == TQ_ERR_NOMEM      ? MODEL_ERR_NOMEM
                      : ts == TQ_ERR_MISMATCH ? MODEL_ERR_KV_SCHEME
                                              : MODEL_ERR_FILE;
    if (ts == TQ_ERR_MISMATCH)
        return say(x, st, "the cache file holds another model shape, KV scheme, sliding window or key-scale "
                          "RoPE pairing (files before version 7 have none) (%s)",
                   tq_error_name(ts));
    return say(x, st, "cache file: %s (%s)", tq_error_message(ts), tq_error_name(ts));
}

/* Installs a loaded cache as x's sequence after the checks the library cannot make. */
static model_status install(model_context *x, tq_kv_cache *kv) {
    const context_params *p = context_get_params(x);
    const int n_layer = context_config(x)->n_layer;
    const size_t len = tq_kv_cache_length(kv, 0);
    model_status st = MODEL_OK;
    for (int il = 1; il < n_layer && st == MODEL_OK; il++)
        if (tq_kv_cache_length(kv, il) != len)
            st = say(x, MODEL_ERR_FILE, "cache file: layer %d holds %zu positions, layer 0 %zu", il,
                     tq_kv_cache_length(kv, il), len);
    if (st == MODEL_OK && len > (size_t)p->max_ctx)
        st = say(x, MODEL_ERR_CONTEXT, "the cache file holds %zu positions, more than max_ctx %d", len, p->max_ctx);
    if (st == MODEL_OK && tq_kv_cache_reserve(kv, (size_t)p->max_ctx) != TQ_OK)
        st = say(x, MODEL_ERR_NOMEM, "out of memory (KV cache reserve)");
    if (st != MODEL_OK) {
        tq_kv_cache_free(kv);
        return st;
    }
    return context_install_kv(x, kv, p->kv_scheme);
}

size_t context_kv_save_bound(const model_context *x) {
    return x == NULL ? 0 : tq_kv_cache_save_bound(context_kv_cache(x));
}

model_status context_kv_save_memory(const model_context *x, void *dst, size_t capacity, size_t *written) {
    if (written != NULL) *written = 0;
    if (x == NULL || dst == NULL) return MODEL_ERR_ARG;
    tq_status ts = tq_kv_cache_save_memory(context_kv_cache(x), dst, capacity, written);
    return ts == TQ_OK             ? MODEL_OK
           : ts == TQ_ERR_STATE    ? MODEL_ERR_POS
           : ts == TQ_ERR_CAPACITY ? MODEL_ERR_BATCH
           : ts == TQ_ERR_NOMEM    ? MODEL_ERR_NOMEM
                                   : MODEL_ERR_INTERNAL;
}

model_status context_kv_save(const model_context *x, const char *path) {
    if (x == NULL || path == NULL) return MODEL_ERR_ARG;
    tq_status ts = tq_kv_cache_save(context_kv_cache(x), path);
    return ts == TQ_OK ? MODEL_OK : ts == TQ_ERR_STATE ? MODEL_ERR_POS : ts == TQ_ERR_NOMEM ? MODEL_ERR_NOMEM : MODEL_ERR_FILE;
}

/* Loads through load (memory or path form) with x's expectations, then installs. */
static model_status load_with(model_context *x, const void *data, size_t size, const char *path) {
    if (x == NULL || (data == NULL && path == NULL)) return MODEL_ERR_ARG;
    tq_kv_cache_config cfg;
    tq_kv_layer_scheme *ls = NULL;
    model_status st = expect_of(x, &cfg, &ls);
    tq_kv_cache *kv = NULL;
    if (st == MODEL_OK) {
        tq_status ts = path != NULL ? tq_kv_cache_load_expect(path, &cfg, &kv)
                                    : tq_kv_cache_load_memory_expect(data, size, &cfg, &kv);
        if (ts != TQ_OK) st = load_error(x, ts);
    }
    free(ls);
    return st == MODEL_OK ? install(x, kv) : st;
}

model_status context_kv_load_memory(model_context *x, const void *data, size_t size) {
    return data == NULL ? MODEL_ERR_ARG : load_with(x, data, size, NULL);
}

model_status context_kv_load(model_context *x, const char *path) {
    return path == NULL ? MODEL_ERR_ARG : load_with(x, NULL, 0, path);
}

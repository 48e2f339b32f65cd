/*
 * libFuzzer target: arbitrary bytes loaded as a KV cache file (doc/cachefile.md).
 *
 * tq_kv_cache_load_memory must never crash, read out of bounds or leak, whatever the input;
 * when it accepts a file, the cache must be usable: one attention call per layer (the last
 * position, GQA 2) returns TQ_OK with finite outputs, and saving it again reproduces the
 * input byte for byte (the loader accepts only what the writer writes) — for an input of an
 * earlier version (1 to 3), the current-version image it is re-saved as reproduces itself. A
 * file's layer windows (version 4) come back from tq_kv_cache_get_config, each ≤ 2^30.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "turboquant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy so that ASan catches any read past the input. */
    uint8_t *buf = malloc(size ? size : 1);
    if (size) memcpy(buf, data, size);
    tq_kv_cache *c = NULL;
    tq_status st = tq_kv_cache_load_memory(buf, size, &c);
    if (st != TQ_OK) {
        if (c) abort();
        free(buf);
        return 0;
    }
    tq_kv_cache_config cfg;
    if (tq_kv_cache_get_config(c, &cfg, sizeof cfg) != TQ_OK) abort();
    for (int l = 0; cfg.layer_windows && l < cfg.n_layers; l++)
        if (cfg.layer_windows[l] > ((size_t)1 << 30)) abort();
    int nqh = 2 * cfg.n_kv_heads;
    for (int l = 0; l < cfg.n_layers && l < 8; l++) {
        if (tq_kv_cache_length(c, l) == 0) continue;
        size_t qn = (size_t)nqh * (size_t)cfg.head_dim_k, on = (size_t)nqh * (size_t)cfg.head_dim_v;
        float *q = malloc(sizeof(float) * qn), *o = malloc(sizeof(float) * on);
        for (size_t i = 0; i < qn; i++) q[i] = (float)((int)(i % 7) - 3) * 0.25f;
        tq_attn_params p;
        tq_attn_params_init(&p, cfg.head_dim_k);
        size_t wb = tq_kv_attention_workspace_size(c, l, nqh, 1, 1);
        void *w = malloc(wb);
        st = tq_kv_attention(c, l, q, nqh, 1, &p, NULL, w, wb, o, on);
        if (st != TQ_OK) abort();
        for (size_t i = 0; i < on; i++)
            if (!isfinite(o[i])) abort();
        free(q), free(o), free(w);
    }
    size_t n = tq_kv_cache_save_bound(c), w = 0;
    uint8_t *again = malloc(n ? n : 1);
    if (tq_kv_cache_save_memory(c, again, n, &w) != TQ_OK) abort();
    if (again[8] != buf[8]) {
        /* A file of an earlier version is re-saved as the current one: that image loads and
         * re-saves to itself. */
        tq_kv_cache *c2 = NULL;
        size_t w2 = 0;
        uint8_t *third = malloc(w);
        if (tq_kv_cache_load_memory(again, w, &c2) != TQ_OK ||
            tq_kv_cache_save_memory(c2, third, w, &w2) != TQ_OK || w2 != w || memcmp(third, again, w))
            abort();
        tq_kv_cache_free(c2);
        free(third);
    } else if (w != size || memcmp(again, buf, size)) {
        abort();
    }
    free(again);
    tq_kv_cache_free(c);
    free(buf);
    return 0;
}

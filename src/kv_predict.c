/*
 * Prediction across tokens (kv_predict.h; doc/kvcache.md §2): ρ per head, the chains and the
 * recurrence of decoded keys that the encoder (kvcache.c), tq_kv_cache_read and, through it, the
 * reference attention share, so every path sums the same records in the same order.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kv_predict.h"

tq_status tq_kv_pred_create(const tq_kv_cache *c, tq_kv_layer *l) {
    if (l->scheme.key_mean != TQ_KV_KEY_MEAN_PREDICT || l->rho) return TQ_OK;
    l->rho = calloc((size_t)c->cfg.n_kv_heads, sizeof *l->rho);
    return l->rho ? TQ_OK : TQ_ERR_NOMEM;
}

size_t tq_kv_pred_chain_start(const tq_kv_cache *c, const tq_kv_layer *l, size_t t) {
    size_t s = tq_kv_sink_held(c, l, (size_t)-1); /* the sinks the scheme keeps */
    if (t < s) return t;
    size_t cs = t - t % TQ_KV_PRED_CHAIN;
    return cs > s ? cs : s;
}

static float test_rho = -1.0f;

void tq_kv_pred_test_rho(float rho) { test_rho = rho; }

void tq_kv_pred_fit(const tq_kv_cache *c, tq_kv_layer *l, size_t pos0, size_t n) {
    if (!l->rho || l->rho_set) return;
    l->rho_set = 1;
    if (test_rho >= 0.0f) {
        for (int h = 0; h < c->cfg.n_kv_heads; h++) l->rho[h] = test_rho;
        return;
    }
    const int dk = c->cfg.head_dim_k;
    size_t from = tq_kv_sink_held(c, l, (size_t)-1);
    if (from < TQ_KV_PRED_FIT_FROM) from = TQ_KV_PRED_FIT_FROM;
    float raw[TQ_MAX_DIM], y[TQ_MAX_DIM], yp[TQ_MAX_DIM];
    for (int h = 0; h < c->cfg.n_kv_heads; h++) {
        double xy = 0.0, pp = 0.0, xx = 0.0;
        for (size_t t = pos0; t < pos0 + n; t++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < dk; i++) raw[i] = tq_f16_to_f32(kr[i]);
            if (l->kt) tq_key_transform_key_row(l->kt, h, t, raw, y);
            else memcpy(y, raw, (size_t)dk * sizeof *y);
            /* the pairs (t − 1, t) inside one chain past the first tokens */
            if (t > pos0 && t - 1 >= from && t % TQ_KV_PRED_CHAIN)
                for (int i = 0; i < dk; i++) {
                    xy += (double)y[i] * yp[i];
                    pp += (double)yp[i] * yp[i];
                    xx += (double)y[i] * y[i];
                }
            memcpy(yp, y, (size_t)dk * sizeof *y);
        }
        double rho = pp > 0.0 ? xy / pp : 0.0;
        if (rho > TQ_KV_PRED_RHO_MAX) rho = TQ_KV_PRED_RHO_MAX;
        double resid = xx - 2.0 * rho * xy + rho * rho * pp; /* Σ|y_t − ρ y_{t−1}|² */
        l->rho[h] = rho > 0.0 && resid > 0.0 && xx >= TQ_KV_PRED_GAIN_MIN * resid ? (float)rho : 0.0f;
    }
}

tq_status tq_kv_pred_next(const tq_kv_cache *c, const tq_kv_layer *l, int h, size_t t, float *prev) {
    float dec[TQ_MAX_DIM];
    const int dk = c->cfg.head_dim_k;
    tq_status st = tq_kv_tensor_decode(&l->k, tq_kv_krec(c, l, t, h), dec);
    if (tq_kv_pred_chain_start(c, l, t) == t) {
        memcpy(prev, dec, (size_t)dk * sizeof *dec);
    } else {
        const float rho = l->rho[h];
        for (int i = 0; i < dk; i++) prev[i] = rho * prev[i] + dec[i];
    }
    return st;
}

tq_status tq_kv_pred_state(const tq_kv_cache *c, const tq_kv_layer *l, int h, size_t t, float *prev) {
    memset(prev, 0, (size_t)c->cfg.head_dim_k * sizeof *prev);
    tq_status st = TQ_OK;
    for (size_t j = tq_kv_pred_chain_start(c, l, t); j < t && !st; j++) st = tq_kv_pred_next(c, l, h, j, prev);
    return st;
}

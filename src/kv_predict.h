/*
 * Prediction across tokens (doc/kvcache.md §2): in a layer whose scheme has key_mean
 * TQ_KV_KEY_MEAN_PREDICT, head h's compressed key at position t is the record of the residual
 * r_t = y_t − ρ_h·ŷ_{t−1}, y_t the key as the key transform stores it and ŷ_{t−1} the key
 * before it as decoded (closed loop): ŷ_t = ρ_h·ŷ_{t−1} + r̂_t. Chains restart at every
 * multiple of TQ_KV_PRED_CHAIN and at the first position past the attention sinks, so any
 * block of a chain's positions can be read from its start within one page. Because the
 * codec's rotation and the key transform are linear, a score follows the same recurrence:
 * ⟨q, ŷ_t⟩ = ρ_h·⟨q, ŷ_{t−1}⟩ + ⟨q, r̂_t⟩ — attention scans its kernels' scores (the
 * attention kernels' chain_scan) and the score kernels are unchanged. This file owns ρ (its
 * fit), the chains and the recurrence of keys; kvcache.c encodes and reads through it,
 * attention.c scans. Not public.
 */
#ifndef TQ_KV_PREDICT_H
#define TQ_KV_PREDICT_H

#include <stddef.h>

#include "kvcache_internal.h"

/* ρ is kept in [0, TQ_KV_PRED_RHO_MAX], and a head whose fit takes less than a factor
 * TQ_KV_PRED_GAIN_MIN off its keys' energy does not predict (ρ = 0). Pairs of positions below
 * TQ_KV_PRED_FIT_FROM are left out of the fit (the first tokens' keys are atypical: the sinks). */
#define TQ_KV_PRED_RHO_MAX 0.95
#define TQ_KV_PRED_GAIN_MIN 1.05
#define TQ_KV_PRED_FIT_FROM 4

/* Allocates l->rho (all 0, not fitted) if its scheme predicts. Errors: TQ_ERR_NOMEM. */
tq_status tq_kv_pred_create(const tq_kv_cache *c, tq_kv_layer *l);
/* Head h's ρ (0: the head's keys are coded as they are, as in a layer without prediction). */
static inline float tq_kv_pred_rho(const tq_kv_layer *l, int h) { return l->rho ? l->rho[h] : 0.0f; }
/* The first position of t's chain (t itself at a sink position: no prediction there). */
size_t tq_kv_pred_chain_start(const tq_kv_cache *c, const tq_kv_layer *l, size_t t);
/* At a layer's first compression, after the key transform's fit: ρ per head from the raw keys
 * at positions [pos0, pos0 + n) (through the transform). No-op once set or without rho. */
void tq_kv_pred_fit(const tq_kv_cache *c, tq_kv_layer *l, size_t pos0, size_t n);
/* Tests: later fits give every head of a predicting layer ρ = rho, whatever its keys (so that
 * random keys exercise every path); negative: back to the fit. Process-wide, not thread-safe. */
void tq_kv_pred_test_rho(float rho);
/* prev (head_dim_k floats): ŷ_{t−1} → ŷ_t of head h, from t's record: zeroed first where t
 * starts its chain, then ρ·prev + the record decoded (tq_kv_tensor_decode). Errors: those of
 * the decode. */
tq_status tq_kv_pred_next(const tq_kv_cache *c, const tq_kv_layer *l, int h, size_t t, float *prev);
/* prev = ŷ_{t−1} of t's chain (zeros where t starts it), from the records before t. */
tq_status tq_kv_pred_state(const tq_kv_cache *c, const tq_kv_layer *l, int h, size_t t, float *prev);

#endif

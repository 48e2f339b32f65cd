/*
 * The trellis encoder (trellis.h, tq_trellis_quantize_pack) as inline functions, so that each
 * kernel set compiles it with its own vector width (the search is inlined per constant number
 * of states): the loop
 * over next indices t is a vector loop of sub, mul, add, compare and select — the same float
 * operations per lane on every set (no reduction across lanes, no fused multiply-add:
 * -ffp-contract=off), so every set finds the same path, bit for bit.
 */
#ifndef TQ_KERNELS_TRELLIS_SEARCH_H
#define TQ_KERNELS_TRELLIS_SEARCH_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define TQ_TRELLIS_MAX_N 1024

/* cost[t] (t < L) = the least Σ (s_j − value_j)² over paths of coordinates 0..n−1 ending in
 * index t; back[i][t] = the index before t at coordinate i (the lowest on ties). tr[p·L + t] =
 * the value of index t after index p (the pair table transposed). n ≥ 1. */
static inline __attribute__((always_inline)) void tq_trellis_search(const float *x, float scale,
                                                                   int n, const int L,
                                                                   const float *tr,
                                                                   uint8_t (*back)[16],
                                                                   float *cost) {
    float s0 = x[0] * scale;
    for (int t = 0; t < L; t++) { /* coordinate 0 leaves state 0 only */
        float e = s0 - tr[t];
        cost[t] = e * e;
        back[0][t] = 0;
    }
    for (int i = 1; i < n; i++) {
        float s = x[i] * scale, next[16];
        int32_t arg[16];
        for (int t = 0; t < L; t++) {
            float e = s - tr[t];
            next[t] = cost[0] + e * e;
            arg[t] = 0;
        }
        /* States in increasing p with a strict compare: the lowest p of least cost wins. */
        for (int p = 1; p < L; p++) {
            const float *row = tr + p * L;
            float c = cost[p];
            for (int t = 0; t < L; t++) {
                float e = s - row[t];
                float v = c + e * e;
                int better = v < next[t];
                next[t] = better ? v : next[t];
                arg[t] = better ? p : arg[t];
            }
        }
        for (int t = 0; t < L; t++) back[i][t] = (uint8_t)arg[t];
        memcpy(cost, next, sizeof(float) * (size_t)L);
    }
}

/* The encoder of trellis.h's tq_trellis_quantize_pack; each kernel set's entry is this. */
static inline __attribute__((always_inline)) float tq_trellis_encode(const float *x, float scale,
                                                                    int n, int bits,
                                                                    const float *pairs,
                                                                    uint8_t *out) {
    const int L = 1 << bits;
    float cost[16];
    uint8_t back[TQ_TRELLIS_MAX_N][16]; /* back[i][t]: the index before t at coordinate i */
    memset(out, 0, tq_group_bytes((size_t)n, bits));
    if (n <= 0) return 0.0f;
    /* value of index t after index p: pairs[t·L + p] (trellis.h); the search reads it
     * transposed, tr[p·L + t], so that its inner loop runs over t. */
    float tr[256];
    for (int p = 0; p < L; p++)
        for (int t = 0; t < L; t++) tr[p * L + t] = pairs[t * L + p];
    if (L == 4) tq_trellis_search(x, scale, n, 4, tr, back, cost);
    else if (L == 8) tq_trellis_search(x, scale, n, 8, tr, back, cost);
    else tq_trellis_search(x, scale, n, 16, tr, back, cost);
    int t = 0;
    for (int u = 1; u < L; u++)
        if (cost[u] < cost[t]) t = u;
    /* Walk back, writing indices; then the values' Σ² forward in the fixed lane order. */
    for (int i = n - 1; i >= 0; i--) {
        tq_ref_put_index(out, (size_t)i, bits, (uint32_t)t);
        t = back[i][t];
    }
    float lane[16] = {0};
    uint32_t prev = 0;
    for (int i = 0; i < n; i++) {
        uint32_t idx = tq_ref_get_index(out, (size_t)i, bits);
        float v = pairs[idx * (uint32_t)L + prev];
        float sq = v * v;
        lane[i & 15] = lane[i & 15] + sq;
        prev = idx;
    }
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) lane[j] = lane[j] + lane[j + w];
    return lane[0];
}

#endif

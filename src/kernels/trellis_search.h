/*
 * The trellis encoder (trellis.h, tq_trellis_quantize_pack) as inline functions, so that each
 * kernel set compiles it with its own vector width (the search is inlined per constant number
 * of states). The reference (trellis.c) runs the scalar search; the kernel sets run the vector
 * one: per state the same float subtract, multiply, add and strict compare (no reduction
 * across lanes, no fused multiply-add: -ffp-contract=off), so every set finds the same path,
 * bit for bit (tests/test_kernels.c, test_trellis_quantize_pack).
 */
#ifndef TQ_KERNELS_TRELLIS_SEARCH_H
#define TQ_KERNELS_TRELLIS_SEARCH_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define TQ_TRELLIS_MAX_N 1024

/* cost[t] (t < L) = the least Σ (s_j − value_j)² over paths of coordinates 0..n−1 ending in
 * index t; back[i][t] = the index before t at coordinate i (the lowest on ties). tr[p·L + t] =
 * the value of index t after index p (the pair table transposed). n ≥ 1.
 *
 * This is the scalar form (the reference table's: trellis.c). The kernel sets take
 * tq_trellis_search_vec below: the same operations on vectors of L lanes (GCC vector
 * extensions, which every set compiles at its own width). */
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

/* tq_trellis_search on vectors: the L states as L / W vectors of W lanes (W: TQ_TRELLIS_VW, the
 * including kernel set's float vector width — wider GCC vectors lower to scalar compares — or
 * L if smaller). The next index t is a lane; the previous one p runs in two chains, [0, L/2)
 * and [L/2, L), each in increasing p with a strict compare, merged with the upper chain's
 * where strictly less: the least cost and, on ties, the lowest p, as the scalar form's one
 * chain finds. A NaN cost (only where s is NaN, and then in every lane and state) is never
 * "better" in either form: index 0 wins. The search is latency-bound (each coordinate's costs
 * wait for the last compare of the one before): two chains halve that wait, more chains or a
 * full tree of minima cost more than they save (measured on AVX2 and AVX-512). Against the
 * scalar search, which the compiler leaves scalar (it does not vectorize the select chain):
 * 2.1–3.2× faster with AVX2, 2.7–6.9× with AVX-512 (doc/codec.md, "Trellis codes"). */
#ifndef TQ_TRELLIS_VW
#define TQ_TRELLIS_VW 4
#endif
/* dst[0..W) = the W int32 lanes of a (each < 16) as bytes. A kernel set may give its own for
 * its full width, TQ_TRELLIS_NARROW_NATIVE(address of the lanes, dst): GCC 12 lowers
 * __builtin_convertvector of 8 lanes on AVX2 to scalar extracts (avx2.c's packs: 4–10% of the
 * encode). */
#define TQ_TRELLIS_NARROW_GENERIC(a, dst, W)                                             \
    do {                                                                                 \
        typedef uint8_t tq_vb_ __attribute__((vector_size(W)));                          \
        tq_vb_ b_ = __builtin_convertvector((a), tq_vb_);                                \
        memcpy((dst), &b_, (size_t)(W));                                                 \
    } while (0)
#ifdef TQ_TRELLIS_NARROW_NATIVE
#define TQ_TRELLIS_NARROW(a, dst, W)                                                             \
    do {                                                                                         \
        if ((W) == TQ_TRELLIS_VW) TQ_TRELLIS_NARROW_NATIVE((const void *)&(a), (dst));           \
        else TQ_TRELLIS_NARROW_GENERIC(a, dst, W);                                               \
    } while (0)
#else
#define TQ_TRELLIS_NARROW(a, dst, W) TQ_TRELLIS_NARROW_GENERIC(a, dst, W)
#endif
#define TQ_TRELLIS_SEARCH_VEC(L, W)                                                                 \
    static inline __attribute__((always_inline)) void tq_trellis_search_vec##L(                   \
        const float *x, float scale, int n, const float *tr, uint8_t (*back)[16], float *cost) {   \
        typedef float vf __attribute__((vector_size(4 * (W))));                                    \
        typedef int32_t vi __attribute__((vector_size(4 * (W))));                                  \
        enum { K = (L) / (W) };                                                                    \
        vf row[L][K], c[K];                                                                        \
        float cs[L];                                                                               \
        memcpy(row, tr, sizeof row);                                                               \
        const float s0 = x[0] * scale;                                                             \
        for (int k = 0; k < K; k++) {                                                              \
            vf e = s0 - row[0][k];                                                                 \
            c[k] = e * e;                                                                          \
        }                                                                                          \
        memset(back[0], 0, (size_t)(L));                                                           \
        for (int i = 1; i < n; i++) {                                                              \
            const float s = x[i] * scale;                                                          \
            memcpy(cs, c, sizeof cs);                                                              \
            /* the two chains (above): states j·H + p, p in increasing order, j = 0, 1 */            \
            enum { H = (L) / 2 };                                                                  \
            vf nx[2][K];                                                                           \
            vi ar[2][K];                                                                           \
            for (int j = 0; j < 2; j++)                                                            \
                for (int k = 0; k < K; k++) {                                                      \
                    vf e = s - row[j * H][k];                                                      \
                    nx[j][k] = cs[j * H] + e * e;                                                  \
                    ar[j][k] = (vi){0} + j * H;                                                    \
                }                                                                                  \
            for (int p = 1; p < H; p++)                                                            \
                for (int j = 0; j < 2; j++)                                                        \
                    for (int k = 0; k < K; k++) {                                                  \
                        vf e = s - row[j * H + p][k];                                              \
                        vf v = cs[j * H + p] + e * e;                                              \
                        vi better = v < nx[j][k];                                                  \
                        nx[j][k] = (vf)(((vi)nx[j][k] & ~better) | ((vi)v & better));              \
                        ar[j][k] = (ar[j][k] & ~better) | ((j * H + p) & better);                  \
                    }                                                                              \
            for (int k = 0; k < K; k++) { /* the merge: the upper chain's where strictly less */  \
                vi better = nx[1][k] < nx[0][k];                                                   \
                c[k] = (vf)(((vi)nx[0][k] & ~better) | ((vi)nx[1][k] & better));                   \
                vi arg = (ar[0][k] & ~better) | (ar[1][k] & better);                               \
                TQ_TRELLIS_NARROW(arg, back[i] + k * (W), W);                                      \
            }                                                                                      \
        }                                                                                          \
        memcpy(cost, c, sizeof c);                                                                 \
    }
#define TQ_TRELLIS_W(L) (TQ_TRELLIS_VW < (L) ? TQ_TRELLIS_VW : (L))
TQ_TRELLIS_SEARCH_VEC(4, TQ_TRELLIS_W(4))
TQ_TRELLIS_SEARCH_VEC(8, TQ_TRELLIS_W(8))
TQ_TRELLIS_SEARCH_VEC(16, TQ_TRELLIS_W(16))
#undef TQ_TRELLIS_W
#undef TQ_TRELLIS_SEARCH_VEC

/* The encoder of trellis.h's tq_trellis_quantize_pack; each kernel set's entry is this, with
 * vec = 1 (the vector search; the reference: 0). */
static inline __attribute__((always_inline)) float tq_trellis_encode(const float *x, float scale,
                                                                    int n, int bits,
                                                                    const float *pairs,
                                                                    uint8_t *out, const int vec) {
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
    if (vec) {
        if (L == 4) tq_trellis_search_vec4(x, scale, n, tr, back, cost);
        else if (L == 8) tq_trellis_search_vec8(x, scale, n, tr, back, cost);
        else tq_trellis_search_vec16(x, scale, n, tr, back, cost);
    } else {
        if (L == 4) tq_trellis_search(x, scale, n, 4, tr, back, cost);
        else if (L == 8) tq_trellis_search(x, scale, n, 8, tr, back, cost);
        else tq_trellis_search(x, scale, n, 16, tr, back, cost);
    }
    int t = 0;
    for (int u = 1; u < L; u++)
        if (cost[u] < cost[t]) t = u;
    /* Walk back; then pack the indices (kernels.h's stream: index i at bits [i·bits, (i+1)·bits),
     * LSB first) and sum the values' squares forward in the fixed lane order. */
    uint8_t path[TQ_TRELLIS_MAX_N];
    for (int i = n - 1; i >= 0; i--) {
        path[i] = (uint8_t)t;
        t = back[i][t];
    }
    for (int i = 0; i < n; i++) {
        const unsigned pos = (unsigned)i * (unsigned)bits, sh = pos & 7u;
        const uint32_t v = (uint32_t)path[i] << sh;
        out[pos >> 3] |= (uint8_t)v;
        if (sh + (unsigned)bits > 8) out[(pos >> 3) + 1] |= (uint8_t)(v >> 8);
    }
    float lane[16] = {0};
    uint32_t prev = 0;
    for (int i = 0; i < n; i++) {
        uint32_t idx = path[i];
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

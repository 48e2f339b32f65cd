/*
 * The trellis encoder (trellis.h, tq_trellis_quantize_pack) as inline functions, so that each
 * kernel set compiles it with its own vector width (the search is inlined per constant number
 * of states). The reference (trellis.c) runs the scalar search; the kernel sets run the vector
 * one: per state the same float subtract, multiply, add and strict compare (no reduction
 * across lanes, no fused multiply-add: -ffp-contract=off), so every set finds the same path,
 * bit for bit (tests/test_kernels.c, test_trellis_quantize_pack). Two-state tables (memory 2)
 * take their own search over two states (tq_trellis_two_state_path, below).
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

/* Pack the path (kernels.h's stream: index i at bits [i·bits, (i+1)·bits), LSB first; out
 * zeroed) and return Σ value² of val[0..n) (val: the path's values) summed forward in the fixed
 * lane order: lane i mod 16, then the lanes' tree. */
static inline __attribute__((always_inline)) float tq_trellis_pack_path(const uint8_t *path,
                                                                       const float *val, int n,
                                                                       int bits, uint8_t *out) {
    int i = 0;
    if (bits == 4)
        for (; i + 2 <= n; i += 2) out[i >> 1] = (uint8_t)(path[i] | path[i + 1] << 4);
    else if (bits == 2)
        for (; i + 4 <= n; i += 4)
            out[i >> 2] = (uint8_t)(path[i] | path[i + 1] << 2 | path[i + 2] << 4 | path[i + 3] << 6);
    else if (bits == 3)
        for (; i + 8 <= n; i += 8) {
            uint32_t w = 0;
            for (int j = 0; j < 8; j++) w |= (uint32_t)path[i + j] << (3 * j);
            uint8_t *o = out + (i >> 3) * 3;
            o[0] = (uint8_t)w, o[1] = (uint8_t)(w >> 8), o[2] = (uint8_t)(w >> 16);
        }
    for (; i < n; i++) {
        const unsigned pos = (unsigned)i * (unsigned)bits, sh = pos & 7u;
        const uint32_t v = (uint32_t)path[i] << sh;
        out[pos >> 3] |= (uint8_t)v;
        if (sh + (unsigned)bits > 8) out[(pos >> 3) + 1] |= (uint8_t)(v >> 8);
    }
    typedef float v16 __attribute__((vector_size(64)));
    v16 acc = {0};
    i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 v;
        memcpy(&v, val + i, sizeof v);
        acc = acc + v * v;
    }
    float lane[16];
    memcpy(lane, &acc, sizeof lane);
    for (; i < n; i++) lane[i & 15] = lane[i & 15] + val[i] * val[i];
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) lane[j] = lane[j] + lane[j + w];
    return lane[0];
}

/* The two-state search (trellis.h: memory 2, bits 3 and 4). The value of index t after p is
 * U[t][p >> (bits − 1)], so a path's cost depends on p only through its top bit: a Viterbi
 * search over two states (the top bit of the index last chosen). Within one coordinate the
 * choice splits: for the next state b' (t's top bit, t in the half G(b') of 2^(bits−1)
 * indices) and the previous state b, the best t is the one nearest to s among the values
 * U[t][b], t in G(b') — independent of the costs so far. So:
 *   1. for every coordinate and each (b', b): E = min over t in G(b') of (s − U[t][b])² and
 *      its t (increasing t, strict compare: the lowest t on ties) — the bulk of the work, and
 *      independent across coordinates: vectors of coordinates (tq_trellis_two_state_near);
 *   2. M'[b'] = min over b of M[b] + E[b'][b] (b = 0 on ties; coordinate 0 leaves state 0),
 *      a scalar recursion of 4 adds and 2 compares per coordinate; the final state of least
 *      M (0 on ties), then the walk back.
 * The least cost is the full search's bit for bit (x ↦ fl(c + x) is monotone, so the minima
 * commute with the adds); only the tie rules differ. Every kernel set runs step 1 with the
 * same subtract, multiply and strict compare per lane and step 2 in scalar code: the same path
 * on every set. */
typedef struct tq_trellis_near {
    float e[4][TQ_TRELLIS_MAX_N];   /* [b'·2 + b][i] */
    int32_t t[4][TQ_TRELLIS_MAX_N]; /* its index t */
} tq_trellis_near;

/* Step 1 for coordinates [i0, n) one at a time (the reference; a kernel set's tail). */
static inline __attribute__((always_inline)) void tq_trellis_two_state_near_scalar(
    const float *x, float scale, int i0, int n, const int H, const float *u, tq_trellis_near *r) {
    for (int i = i0; i < n; i++) {
        const float s = x[i] * scale;
        for (int g = 0; g < 4; g++) { /* g = b'·2 + b; u[t·2 + b] = U[t][b] */
            const int t0 = (g >> 1) * H, b = g & 1;
            float e = s - u[t0 * 2 + b], best = e * e;
            int32_t arg = t0;
            for (int t = t0 + 1; t < t0 + H; t++) {
                float f = s - u[t * 2 + b], v = f * f;
                if (v < best) best = v, arg = t;
            }
            r->e[g][i] = best;
            r->t[g][i] = arg;
        }
    }
}

/* Step 1 on vectors of W coordinates (W: TQ_TRELLIS_VW), the tail scalar. */
#define TQ_TRELLIS_TWO_STATE_NEAR_VEC(H, W)                                                     \
    static inline __attribute__((always_inline)) void tq_trellis_two_state_near_vec##H(        \
        const float *x, float scale, int n, const float *u, tq_trellis_near *r) {              \
        typedef float vf __attribute__((vector_size(4 * (W))));                                \
        typedef int32_t vi __attribute__((vector_size(4 * (W))));                              \
        int i = 0;                                                                             \
        for (; i + (W) <= n; i += (W)) {                                                       \
            vf s;                                                                              \
            memcpy(&s, x + i, sizeof s);                                                       \
            s = s * scale;                                                                     \
            for (int g = 0; g < 4; g++) {                                                      \
                const int t0 = (g >> 1) * (H), b = g & 1;                                      \
                vf e = s - u[t0 * 2 + b], best = e * e;                                        \
                vi arg = (vi){0} + t0;                                                         \
                for (int t = t0 + 1; t < t0 + (H); t++) {                                      \
                    vf f = s - u[t * 2 + b], v = f * f;                                        \
                    vi better = v < best;                                                      \
                    best = (vf)(((vi)best & ~better) | ((vi)v & better));                      \
                    arg = (arg & ~better) | (t & better);                                      \
                }                                                                              \
                memcpy(r->e[g] + i, &best, sizeof best);                                       \
                memcpy(r->t[g] + i, &arg, sizeof arg);                                         \
            }                                                                                  \
        }                                                                                      \
        tq_trellis_two_state_near_scalar(x, scale, i, n, (H), u, r);                           \
    }
TQ_TRELLIS_TWO_STATE_NEAR_VEC(4, TQ_TRELLIS_VW)
TQ_TRELLIS_TWO_STATE_NEAR_VEC(8, TQ_TRELLIS_VW)
#undef TQ_TRELLIS_TWO_STATE_NEAR_VEC

/* Steps 1 and 2: the path into path[0..n), its values into val[0..n). */
static inline __attribute__((always_inline)) void tq_trellis_two_state_path(
    const float *x, float scale, int n, int bits, const float *pairs, uint8_t *path, float *val,
    const int vec) {
    const int L = 1 << bits, H = L / 2;
    float u[32]; /* u[t·2 + b] = U[t][b] = the value of t after any p of top bit b */
    for (int t = 0; t < L; t++)
        for (int b = 0; b < 2; b++) u[t * 2 + b] = pairs[t * L + b * H];
    tq_trellis_near r;
    if (!vec) tq_trellis_two_state_near_scalar(x, scale, 0, n, H, u, &r);
    else if (H == 4) tq_trellis_two_state_near_vec4(x, scale, n, u, &r);
    else tq_trellis_two_state_near_vec8(x, scale, n, u, &r);
    uint8_t from[TQ_TRELLIS_MAX_N]; /* bit b': the state before state b' at coordinate i */
    float m0 = r.e[0][0], m1 = r.e[2][0];
    from[0] = 0;
    for (int i = 1; i < n; i++) {
        float a0 = m0 + r.e[0][i], a1 = m1 + r.e[1][i]; /* into state 0 */
        float c0 = m0 + r.e[2][i], c1 = m1 + r.e[3][i]; /* into state 1 */
        int f0 = a1 < a0, f1 = c1 < c0;
        m0 = f0 ? a1 : a0;
        m1 = f1 ? c1 : c0;
        from[i] = (uint8_t)(f0 | f1 << 1);
    }
    int st = m1 < m0;
    for (int i = n - 1; i >= 0; i--) {
        int b = (from[i] >> st) & 1, t = r.t[st * 2 + b][i];
        path[i] = (uint8_t)t;
        val[i] = u[t * 2 + b];
        st = b;
    }
}

/* The encoder of trellis.h's tq_trellis_quantize_pack; each kernel set's entry is this, with
 * vec = 1 (the vector search; the reference: 0). */
static inline __attribute__((always_inline)) float tq_trellis_encode(const float *x, float scale,
                                                                    int n, int bits,
                                                                    const float *pairs,
                                                                    int memory, uint8_t *out,
                                                                    const int vec) {
    const int L = 1 << bits;
    memset(out, 0, tq_group_bytes((size_t)n, bits));
    if (n <= 0) return 0.0f;
    uint8_t path[TQ_TRELLIS_MAX_N];
    float val[TQ_TRELLIS_MAX_N];
    if (memory == 2 && bits > 2) {
        tq_trellis_two_state_path(x, scale, n, bits, pairs, path, val, vec);
        return tq_trellis_pack_path(path, val, n, bits, out);
    }
    float cost[16];
    uint8_t back[TQ_TRELLIS_MAX_N][16]; /* back[i][t]: the index before t at coordinate i */
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
    for (int i = n - 1; i >= 0; i--) { /* walk back */
        path[i] = (uint8_t)t;
        int p = i ? back[i][t] : 0;
        val[i] = pairs[t * L + p];
        t = p;
    }
    return tq_trellis_pack_path(path, val, n, bits, out);
}

#endif

/* What every SIMD weight-kernel file (quants_avx2.c, quants_avx512.c, quants_neon.c) shares
 * whatever its instruction set: the entry points, one instance per constant nx of a kernel the
 * file defines, and the loops that hand a kernel its rows or blocks in groups of four with each
 * tail size its own constant (so the compiler keeps the accumulators in registers). */
#ifndef TQ_ENGINE_QUANTS_ENTRIES_H
#define TQ_ENGINE_QUANTS_ENTRIES_H

#include "quants.h"

#define NX_SWITCH(call)                                                                           \
    switch (nx) {                                                                                 \
    case 1: call(1); break;                                                                       \
    case 2: call(2); break;                                                                       \
    case 3: call(3); break;                                                                       \
    case 4: call(4); break;                                                                       \
    case 5: call(5); break;                                                                       \
    case 6: call(6); break;                                                                       \
    case 7: call(7); break;                                                                       \
    default: call(8); break;                                                                      \
    }
/* A dot entry point: static void name(n, w, x, xs, nx, out) calling call(k) for nx = k. */
#define DEFINE_QUANT(name, call)                                                                  \
    static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) {    \
        NX_SWITCH(call)                                                                           \
    }
_Static_assert(QUANT_DOT_MAX_NX == 8, "NX_SWITCH covers nx = 1..8");

/* step(first, count) over [0, total) in fours, then the tail of 3, 2 or 1 (count a constant). */
#define IN_FOURS(total, step)                                                                     \
    do {                                                                                          \
        int64_t first_ = 0;                                                                       \
        for (; first_ + 4 <= (int64_t)(total); first_ += 4) step(first_, 4);                       \
        switch ((int64_t)(total) - first_) {                                                      \
        case 3: step(first_, 3); break;                                                           \
        case 2: step(first_, 2); break;                                                           \
        case 1: step(first_, 1); break;                                                           \
        default: break;                                                                           \
        }                                                                                         \
    } while (0)

/* The batched entry points (quant_gemm_fn) of a file whose gemm_blk(..., kind) and
 * gemm_k(..., q6) implement the 32-element types and the k-quants. */
#define DEFINE_GEMM(name, kind)                                                                              \
    static void name(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, const uint8_t *xu, \
                     size_t xus, int nx, float *y, size_t ys, void *scratch) {                              \
        gemm_blk(n, w, wrb, nw, x, xs, xu, xus, nx, y, ys, scratch, kind);                                   \
    }
/* xu unused: the k-quants' unsigned values meet the signed activations. */
#define DEFINE_GEMM_K(name, q6)                                                                              \
    static void name(int64_t n, const void *w, size_t wrb, int nw, const void *x, size_t xs, const uint8_t *xu, \
                     size_t xus, int nx, float *y, size_t ys, void *scratch) {                              \
        (void)xu, (void)xus;                                                                                 \
        gemm_k(n, w, wrb, nw, x, xs, nx, y, ys, scratch, q6);                                                \
    }

#endif

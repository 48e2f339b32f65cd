/* The FFN activations of the plain (fp32) forward pass, GELU (tanh form) and SiLU, on an exp of
 * our own: branch-free, so the loops over a batch's rows vectorize, and the same bits on every
 * CPU and kernel set (no libm, no fused multiply-add: the engine is built with
 * -ffp-contract=off). Before, each element called libm's tanhf/expf one at a time; on Gemma 3
 * that was ~15% of a prefill once the matmuls were fast.
 *
 * act_exp: relative error below 1.5e-7 on [-87, 88] (degree-7 Taylor polynomial on
 * |r| <= ln2/2 after n = round(z / ln2), Cody-Waite split of ln2); below -87 it returns
 * exp(-87), past 88.72 +inf; NaN stays NaN. GELU uses 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), with
 * u = sqrt(2/pi) x (1 + 0.044715 x^2), which has no cancellation near 0. tests/test_activation.c
 * checks both against double precision. */
#ifndef TQ_ENGINE_ACTIVATION_H
#define TQ_ENGINE_ACTIVATION_H

#include <stdint.h>
#include <string.h>

static inline float act_exp(float z) {
    z = z < -87.0f ? -87.0f : z;
    z = z > 89.0f ? 89.0f : z; /* past 88.72 n = 128: the exponent bits of +inf, as expf overflows */
    /* n = round(z / ln2) by the 1.5 * 2^23 trick (round to nearest in the default mode) */
    const float zn = z == z ? z : 0.0f; /* NaN: n = 0 (an integer to convert), r keeps the NaN */
    const float n = (zn * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (z - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n, n in [-126, 128]: a float built from its exponent bits (128: +inf) */
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) */
static inline float act_gelu_tanh(float x) {
    const float u = 0.7978845608028654f * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + act_exp(-2.0f * u));
}

/* x / (1 + exp(-x)) */
static inline float act_silu(float x) { return x / (1.0f + act_exp(-x)); }

#endif

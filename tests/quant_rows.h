/* Random rows of every weight format for the kernel tests (test_quants.c, test_weight_types.c):
 * random bytes, with each block's fp16 scales set to finite values of model-like size, so that
 * every bit pattern of the quantized values occurs. */
#ifndef TQ_TESTS_QUANT_ROWS_H
#define TQ_TESTS_QUANT_ROWS_H

#include <stdint.h>
#include <string.h>

#include "../engine/quants.h"
#include "turboquant.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static inline uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static inline float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f; }

static inline void put_f16(uint8_t *p, float f) {
    uint16_t h = tq_f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xFF);
    p[1] = (uint8_t)(h >> 8);
}

/* Byte offsets of the fp16 scale fields in a block (ggml-common.h), set to finite values of
 * model-like size in random blocks; -1 ends the list. */
static inline const int *f16_fields(int type) {
    static const int none[] = {-1}, at0[] = {0, -1}, at02[] = {0, 2, -1}, q2k[] = {80, 82, -1},
                     q3k[] = {108, -1}, q6k[] = {208, -1};
    switch (type) {
    case QUANT_Q4_0: case QUANT_Q5_0: case QUANT_Q8_0: return at0;
    case QUANT_Q4_1: case QUANT_Q5_1: case QUANT_Q4_K: case QUANT_Q5_K: return at02;
    case QUANT_Q2_K: return q2k;
    case QUANT_Q3_K: return q3k;
    case QUANT_Q6_K: return q6k;
    default: return none;
    }
}

/* A random row of `type` with n elements into buf (quant_row_bytes bytes). */
static inline void random_row(int type, uint8_t *buf, int64_t n) {
    size_t bytes = quant_row_bytes(type, n);
    if (type == QUANT_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = rnd_uniform(-1.0f, 1.0f);
            memcpy(buf + 4 * i, &f, 4);
        }
        return;
    }
    if (type == QUANT_F16 || type == QUANT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = rnd_uniform(-1.0f, 1.0f);
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t h = type == QUANT_F16 ? tq_f32_to_f16(f) : (uint16_t)(u >> 16);
            buf[2 * i] = (uint8_t)(h & 0xFF);
            buf[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return;
    }
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)rnd_u32();
    size_t bs = quant_block_bytes(type);
    for (size_t b = 0; b < bytes / bs; b++)
        for (const int *f = f16_fields(type); *f >= 0; f++) put_f16(buf + b * bs + (size_t)*f, rnd_uniform(-0.05f, 0.05f));
}

#endif

/*
 * Scalar reference kernels: the ground truth every SIMD kernel is tested against
 * (contracts in kernels.h). Written for clarity; compiled with -ffp-contract=off so that no
 * multiply-add is fused behind our back.
 */
#include <string.h>

#include "kernels.h"
#include "trellis.h"

uint32_t tq_ref_get_index(const uint8_t *in, size_t i, int bits) {
    size_t pos = i * (size_t)bits;
    size_t byte = pos >> 3;
    unsigned shift = (unsigned)(pos & 7);
    uint32_t v = in[byte];
    /* An index of at most 8 bits spans at most two bytes; read the second only when needed so
     * that the last index never reads past the group. */
    if (shift + (unsigned)bits > 8) v |= (uint32_t)in[byte + 1] << 8;
    return (v >> shift) & ((1u << bits) - 1u);
}

void tq_ref_put_index(uint8_t *out, size_t i, int bits, uint32_t idx) {
    size_t pos = i * (size_t)bits;
    size_t byte = pos >> 3;
    unsigned shift = (unsigned)(pos & 7);
    uint32_t v = idx << shift;
    out[byte] |= (uint8_t)(v & 0xFFu);
    if (shift + (unsigned)bits > 8) out[byte + 1] |= (uint8_t)(v >> 8);
}

uint32_t tq_ref_quantize_one(float s, int bits, const float *boundaries) {
    /* Branchless binary search over the sorted boundaries: O(bits) compares, and the result
     * equals the count of boundaries strictly below s (the quantizer's definition: kernels.h,
     * doc/codec.md "MSE"). */
    uint32_t idx = 0;
    for (uint32_t step = 1u << (bits - 1); step > 0; step >>= 1)
        idx += (s > boundaries[idx + step - 1]) ? step : 0;
    return idx;
}

void tq_ref_rht(float *x, const float *signs, int log2n) {
    size_t n = (size_t)1 << log2n;
    if (signs)
        for (size_t i = 0; i < n; i++) x[i] *= signs[i];
    for (size_t h = 1; h < n; h <<= 1) {
        for (size_t i = 0; i < n; i += 2 * h) {
            for (size_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
}

/* The fixed 16-lane order of kernels.h. */
static float lane_tree(float lane[16]) {
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) lane[j] = lane[j] + lane[j + w];
    return lane[0];
}

static float ref_sumsq(const float *x, int n) {
    float lane[16] = {0};
    for (int i = 0; i < n; i++) {
        float sq = x[i] * x[i];
        lane[i & 15] = lane[i & 15] + sq;
    }
    return lane_tree(lane);
}

static float ref_quantize_pack(const float *x, float scale, int n, int bits,
                               const float *boundaries, const float *centroids, uint8_t *out) {
    memset(out, 0, tq_group_bytes((size_t)n, bits));
    float lane[16] = {0};
    for (int i = 0; i < n; i++) {
        float s = x[i] * scale;
        uint32_t idx = tq_ref_quantize_one(s, bits, boundaries);
        tq_ref_put_index(out, (size_t)i, bits, idx);
        float c = centroids[idx];
        float sq = c * c;
        lane[i & 15] = lane[i & 15] + sq;
    }
    return lane_tree(lane);
}

static void ref_unpack_lookup(const uint8_t *in, int n, int bits, const float *centroids,
                              float scale, float *out) {
    for (int i = 0; i < n; i++) out[i] = scale * centroids[tq_ref_get_index(in, (size_t)i, bits)];
}

static float ref_dot_codes(const uint8_t *in, int n, int bits, const float *centroids,
                           const float *q) {
    /* Accumulated in double so the reference is more accurate than any fast path. */
    double acc = 0.0;
    for (int i = 0; i < n; i++)
        acc += (double)q[i] * (double)centroids[tq_ref_get_index(in, (size_t)i, bits)];
    return (float)acc;
}

static void ref_axpy_codes(const uint8_t *in, int n, int bits, const float *centroids, float w,
                           float *acc) {
    for (int i = 0; i < n; i++) acc[i] += w * centroids[tq_ref_get_index(in, (size_t)i, bits)];
}

static const tq_kernel_table ref_table = {
    .name = "ref",
    .rht = tq_ref_rht,
    .sumsq = ref_sumsq,
    .quantize_pack = ref_quantize_pack,
    .unpack_lookup = ref_unpack_lookup,
    .dot_codes = ref_dot_codes,
    .axpy_codes = ref_axpy_codes,
    .trellis_quantize_pack = tq_trellis_quantize_pack,
};

const tq_kernel_table *tq_kernels_ref(void) { return &ref_table; }

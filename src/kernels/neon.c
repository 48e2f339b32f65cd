/*
 * ARM NEON (AArch64 Advanced SIMD) codec kernels (kernels.h); ground truth in ref.c. NEON is
 * part of every AArch64 CPU, so the table needs no run-time check there; elsewhere it is NULL.
 * The contracts are the reference's: rht, sumsq and quantize_pack bit for bit (no fused
 * multiply-add where the reference has none: this file, like every other, is compiled with
 * -ffp-contract=off), unpack_lookup bit for bit (one multiply), dot_codes and axpy_codes within
 * tests/test_kernels.c's tolerance.
 *
 * Indices are unpacked four at a time into a uint32x4 (scalar bit reads for widths other than
 * 1, 2, 4 and 8, which take whole bytes); centroid lookups of up to 16 entries are one vqtbl4q
 * on the table's bytes (byte index 4·idx + k), wider tables are read lane by lane.
 */
#include "kernels.h"
#include "trellis_search.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <string.h>

/* ---- rht ---- */

static void neon_rht(float *x, const float *signs, int log2n) {
    if (log2n < 2) {
        tq_ref_rht(x, signs, log2n);
        return;
    }
    size_t n = (size_t)1 << log2n;
    if (signs)
        for (size_t i = 0; i < n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), vld1q_f32(signs + i)));
    /* h = 1 and 2 inside each vector of four, as the reference's (a + b, a − b) */
    const uint32x4_t odd = vreinterpretq_u32_u64(vdupq_n_u64(0xFFFFFFFF00000000ULL));
    for (size_t i = 0; i < n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        float32x4_t t = vrev64q_f32(v);                             /* x1 x0 x3 x2 */
        v = vbslq_f32(odd, vsubq_f32(t, v), vaddq_f32(v, t));       /* x0+x1 x0−x1 x2+x3 x2−x3 */
        t = vextq_f32(v, v, 2);                                     /* v2 v3 v0 v1 */
        v = vcombine_f32(vget_low_f32(vaddq_f32(v, t)), vget_high_f32(vsubq_f32(t, v)));
        vst1q_f32(x + i, v);
    }
    for (size_t h = 4; h < n; h <<= 1)
        for (size_t i = 0; i < n; i += 2 * h)
            for (size_t j = i; j < i + h; j += 4) {
                float32x4_t a = vld1q_f32(x + j), b = vld1q_f32(x + j + h);
                vst1q_f32(x + j, vaddq_f32(a, b));
                vst1q_f32(x + j + h, vsubq_f32(a, b));
            }
}

/* ---- the fixed 16-lane sums ---- */

/* Lanes 4k … 4k + 3 in acc[k]; the tail terms i ≥ n16 go to their lanes one by one. */
static float lanes_finish(float32x4_t acc[4], const float *tail_sq, int n16, int n) {
    float lane[16];
    for (int k = 0; k < 4; k++) vst1q_f32(lane + 4 * k, acc[k]);
    for (int i = n16; i < n; i++) lane[i & 15] = lane[i & 15] + tail_sq[i - n16];
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) lane[j] = lane[j] + lane[j + w];
    return lane[0];
}

static float neon_sumsq(const float *x, int n) {
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int n16 = n / 16 * 16;
    for (int i = 0; i < n16; i += 16)
        for (int k = 0; k < 4; k++) {
            float32x4_t v = vld1q_f32(x + i + 4 * k);
            acc[k] = vaddq_f32(acc[k], vmulq_f32(v, v));
        }
    float tail[16];
    for (int i = n16; i < n; i++) tail[i - n16] = x[i] * x[i];
    return lanes_finish(acc, tail, n16, n);
}

/* ---- indices ---- */

/* Indices [i, i + 4) of a packed group. */
static inline uint32x4_t get4(const uint8_t *in, int i, int bits) {
    uint32_t v[4];
    switch (bits) {
    case 8:
        for (int k = 0; k < 4; k++) v[k] = in[i + k];
        break;
    case 4:
        for (int k = 0; k < 4; k++) v[k] = (uint32_t)(in[(i + k) >> 1] >> (4 * ((i + k) & 1))) & 15u;
        break;
    default:
        for (int k = 0; k < 4; k++) v[k] = tq_ref_get_index(in, (size_t)(i + k), bits);
        break;
    }
    return vld1q_u32(v);
}

/* centroids[idx] for four indices; tab: the first 16 centroids' bytes (bits ≤ 4). */
static inline float32x4_t lookup4(uint32x4_t idx, int bits, const uint8x16x4_t *tab, const float *centroids) {
    if (bits <= 4) {
        uint32x4_t b = vaddq_u32(vmulq_n_u32(idx, 0x04040404u), vdupq_n_u32(0x03020100u));
        return vreinterpretq_f32_u8(vqtbl4q_u8(*tab, vreinterpretq_u8_u32(b)));
    }
    uint32_t iv[4];
    float c[4];
    vst1q_u32(iv, idx);
    for (int k = 0; k < 4; k++) c[k] = centroids[iv[k]];
    return vld1q_f32(c);
}

static inline uint8x16x4_t table16(const float *centroids, int bits) {
    float c[16] = {0};
    if (bits <= 4) memcpy(c, centroids, sizeof(float) * ((size_t)1 << bits));
    uint8x16x4_t t;
    t.val[0] = vreinterpretq_u8_f32(vld1q_f32(c));
    t.val[1] = vreinterpretq_u8_f32(vld1q_f32(c + 4));
    t.val[2] = vreinterpretq_u8_f32(vld1q_f32(c + 8));
    t.val[3] = vreinterpretq_u8_f32(vld1q_f32(c + 12));
    return t;
}

/* ---- quantize_pack ---- */

static float neon_quantize_pack(const float *x, float scale, int n, int bits, const float *boundaries,
                                const float *centroids, uint8_t *out) {
    memset(out, 0, tq_group_bytes((size_t)n, bits));
    const uint8x16x4_t tab = table16(centroids, bits);
    const float32x4_t vs = vdupq_n_f32(scale);
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int n4 = n / 4 * 4, n16 = n / 16 * 16;
    float tail[16];
    for (int i = 0; i < n4; i += 4) {
        float32x4_t s = vmulq_f32(vld1q_f32(x + i), vs);
        uint32x4_t idx;
        if (bits <= 4) {
            /* the count of boundaries strictly below s (a NaN counts none, as the reference) */
            idx = vdupq_n_u32(0);
            for (int j = 0; j < (1 << bits) - 1; j++) idx = vsubq_u32(idx, vcgtq_f32(s, vdupq_n_f32(boundaries[j])));
        } else {
            float sv[4];
            uint32_t iv[4];
            vst1q_f32(sv, s);
            for (int k = 0; k < 4; k++) iv[k] = tq_ref_quantize_one(sv[k], bits, boundaries);
            idx = vld1q_u32(iv);
        }
        uint32_t iv[4];
        vst1q_u32(iv, idx);
        for (int k = 0; k < 4; k++) tq_ref_put_index(out, (size_t)(i + k), bits, iv[k]);
        float32x4_t c = lookup4(idx, bits, &tab, centroids);
        float32x4_t sq = vmulq_f32(c, c);
        if (i < n16) acc[(i / 4) & 3] = vaddq_f32(acc[(i / 4) & 3], sq);
        else vst1q_f32(tail + (i - n16), sq);
    }
    for (int i = n4; i < n; i++) {
        uint32_t idx = tq_ref_quantize_one(x[i] * scale, bits, boundaries);
        tq_ref_put_index(out, (size_t)i, bits, idx);
        float c = centroids[idx];
        tail[i - n16] = c * c;
    }
    return lanes_finish(acc, tail, n16, n);
}

/* ---- lookups ---- */

static void neon_unpack_lookup(const uint8_t *in, int n, int bits, const float *centroids, float scale,
                               float *out) {
    const uint8x16x4_t tab = table16(centroids, bits);
    const float32x4_t vs = vdupq_n_f32(scale);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vs, lookup4(get4(in, i, bits), bits, &tab, centroids)));
    for (; i < n; i++) out[i] = scale * centroids[tq_ref_get_index(in, (size_t)i, bits)];
}

static float neon_dot_codes(const uint8_t *in, int n, int bits, const float *centroids, const float *q) {
    const uint8x16x4_t tab = table16(centroids, bits);
    float32x4_t a = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) a = vfmaq_f32(a, vld1q_f32(q + i), lookup4(get4(in, i, bits), bits, &tab, centroids));
    float s = vaddvq_f32(a);
    for (; i < n; i++) s += q[i] * centroids[tq_ref_get_index(in, (size_t)i, bits)];
    return s;
}

static void neon_axpy_codes(const uint8_t *in, int n, int bits, const float *centroids, float w, float *acc) {
    const uint8x16x4_t tab = table16(centroids, bits);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), lookup4(get4(in, i, bits), bits, &tab, centroids), w));
    for (; i < n; i++) acc[i] += w * centroids[tq_ref_get_index(in, (size_t)i, bits)];
}

/* The trellis encoder at this set's vector width (trellis_search.h). */
static float neon_trellis_quantize_pack(const float *x, float scale, int n, int bits,
                                        const float *pairs, int memory, uint8_t *out) {
    return tq_trellis_encode(x, scale, n, bits, pairs, memory, out, 1);
}

static const tq_kernel_table neon_table = {
    .name = "neon",
    .rht = neon_rht,
    .sumsq = neon_sumsq,
    .quantize_pack = neon_quantize_pack,
    .unpack_lookup = neon_unpack_lookup,
    .dot_codes = neon_dot_codes,
    .axpy_codes = neon_axpy_codes,
    .trellis_quantize_pack = neon_trellis_quantize_pack,
};

const tq_kernel_table *tq_kernels_neon(void) { return &neon_table; }

#else

const tq_kernel_table *tq_kernels_neon(void) { return NULL; }

#endif

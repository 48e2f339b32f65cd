/* What the x86 attention kernels (attn_avx2.c, attn_avx512.c) share; included only from files
 * compiled with F16C. */
#ifndef TQ_KERNELS_ATTN_SIMD_H
#define TQ_KERNELS_ATTN_SIMD_H

#include <immintrin.h>
#include <string.h>

#include "../kvcache_internal.h"

/* The scale of a TURBO record's row: norm · inv_sqrt_dim, or −1 for a corrupt norm (negative,
 * NaN or Inf; as ref_row_scale in attn_ref.c). */
static inline float simd_rec_scale(const tq_kv_tensor *x, const uint8_t *r) {
    float n;
    if (x->norm_f32) {
        memcpy(&n, r + x->norm_off, 4);
    } else {
        uint16_t h;
        memcpy(&h, r + x->norm_off, 2);
        n = _cvtsh_ss(h);
    }
    return n >= 0.0f && n <= 3.4e38f ? n * x->inv_sqrt_dim : -1.0f; /* NaN fails both */
}

/* sc[m] = the scales of records r[m], m < n (0 for a corrupt norm); returns 0 if one of the
 * first `real` records is corrupt (the others repeat one of them), else 1. */
static inline int simd_rec_scales(const tq_kv_tensor *x, const uint8_t *const *r, int n, int real,
                                  float *sc) {
    int ok = 1;
    for (int m = 0; m < n; m++) {
        sc[m] = simd_rec_scale(x, r[m]);
        if (sc[m] < 0.0f) {
            if (m < real) ok = 0;
            sc[m] = 0.0f;
        }
    }
    return ok;
}

/* The same for n consecutive records (stride x->rec_bytes) from rec. */
static inline int simd_rec_scales_run(const tq_kv_tensor *x, const uint8_t *rec, int n, float *sc) {
    int ok = 1;
    for (int t = 0; t < n; t++) {
        sc[t] = simd_rec_scale(x, rec + (size_t)t * x->rec_bytes);
        if (sc[t] < 0.0f) ok = 0, sc[t] = 0.0f;
    }
    return ok;
}

#endif

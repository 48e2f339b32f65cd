/* Trellis-coded records read row by row in floats: what the integer lane kernels fall back to.
 * Portable C (no intrinsics): the x86 files include it through attn_simd.h, attn_neon_dot.c
 * directly. */
#ifndef TQ_KERNELS_TRELLIS_ROWS_H
#define TQ_KERNELS_TRELLIS_ROWS_H

#include <string.h>

#include "attn_kernels.h"
#include "trellis.h"

/* Trellis-coded records (kernels/trellis.h) in floats, row by row, for the integer kernels
 * (attn_vnni.c, attn_avx2_int8.c, attn_neon_dot.c) where their integer path cannot go (non-finite inputs, a last
 * group of fewer than four tokens, widths they do not decode): the float kernels do not read
 * trellis codes. TRELLIS_LANE_ROW_MAX: the longest lane-layout row (head dims ≤ 1024, 2 segments,
 * 128-coordinate blocks). */
#define TRELLIS_LANE_ROW_MAX (128 * 9)

/* Record r of trellis-coded x decoded into the lane layout (kl floats); 0 for a corrupt norm
 * (row zero). */
static inline int trellis_lane_row(const tq_record *x, const uint8_t *r, float *lane) {
    float row[TQ_MAX_DIM];
    float n = tq_record_load_norm(x, r + x->norm_off);
    if (!tq_record_norm_ok(n)) {
        memset(row, 0, sizeof(float) * (size_t)x->dim);
        tq_record_to_lanes(x, row, lane);
        return 0;
    }
    for (int s = 0; s < x->n_seg; s++)
        tq_trellis_unpack(r + x->seg[s].off, x->seg[s].count, x->seg[s].bits, x->seg[s].pairs, n * x->inv_sqrt_dim,
                          row + x->seg[s].start);
    tq_record_to_lanes(x, row, lane);
    return 1;
}

/* score_turbo_lanes / accum_turbo_lanes in floats for trellis-coded x (row by row). */
static inline int trellis_rows_scores(const tq_record *x, const uint8_t *rec, int nk, const float *q,
                                size_t qs, int nq, float *S, size_t ss, int kl) {
    int ok = 1;
    float lane[TRELLIS_LANE_ROW_MAX];
    for (int t = 0; t < nk; t++) {
        int good = trellis_lane_row(x, rec + (size_t)t * x->rec_bytes, lane);
        ok &= good;
        for (int j = 0; j < nq; j++) {
            const float *qj = q + (size_t)j * qs;
            float acc = 0.0f;
            for (int i = 0; i < kl && good; i++) acc += qj[i] * lane[i];
            S[(size_t)j * ss + (size_t)t] = acc; /* a corrupt row scores 0 */
        }
    }
    return ok;
}

static inline int trellis_rows_accum(const tq_record *x, const uint8_t *rec, int nk, const float *p,
                               size_t ps, int nq, float *acc, size_t as, int kl) {
    int ok = 1;
    float lane[TRELLIS_LANE_ROW_MAX];
    for (int t = 0; t < nk; t++) {
        if (!trellis_lane_row(x, rec + (size_t)t * x->rec_bytes, lane)) {
            ok = 0; /* a corrupt row adds nothing */
            continue;
        }
        for (int j = 0; j < nq; j++) {
            float w = p[(size_t)j * ps + (size_t)t], *A = acc + (size_t)j * as;
            for (int i = 0; i < kl; i++) A[i] += w * lane[i];
        }
    }
    return ok;
}

#endif

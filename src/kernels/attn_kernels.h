/*
 * The attention kernel table: the hot loops of attention on stored records (scores, softmax
 * pieces, value sums, decoding records to rows), as function pointers. attn_ref.c holds the
 * scalar reference, attn_avx2.c, attn_avx512.c, attn_vnni.c, attn_avx2_int8.c, attn_neon.c and
 * attn_neon_dot.c the fast tables; dispatch.c
 * chooses one together with the codec table (tq_kernel_set). Kernels take a record description
 * (record.h) and plain pointers.
 */
#ifndef TQ_KERNELS_ATTN_KERNELS_H
#define TQ_KERNELS_ATTN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "record.h"

/* Memory a lane kernel's caller reads after the call — the values of the keys being scored,
 * the next block's keys while values are summed (src/attention.c) — that the kernel may
 * prefetch a share of per record it reads, so those misses overlap its work instead of
 * stalling the next call's first touch (a burst of prefetches before the call measured slower
 * than spreading them). {NULL, 0}: nothing. A prefetch never faults. */
typedef struct tq_attn_ahead {
    const uint8_t *p;
    size_t bytes;
} tq_attn_ahead;
#define TQ_ATTN_NO_AHEAD ((tq_attn_ahead){NULL, 0})

typedef struct tq_attn_kernels {
    const char *name;
    /* out[j] = ⟨q + j·q_stride, k⟩ for j < nq (n floats each). */
    void (*dot_multi)(const float *k, const float *q, size_t q_stride, int nq, int n,
                      float *out);
    /* acc[i] += Σ_{t < nk} p[t]·rows[t·stride + i] for i < n. */
    void (*accum_rows)(float *acc, const float *p, const float *rows, size_t stride, int nk,
                       int n);
    /* The prefill tile (many query rows against keys decoded to floats). Keys in panels of 16:
     * element d of key 16p + j at kp[(16p)·n + 16d + j] (tq_attn_key_panels writes them, zero
     * past nk). Query row r (r < ni·G) is q + (r / G)·q_stride_i + (r % G)·q_stride_g; then
     * S[r·s_stride + t] = ⟨q_r, key t⟩ for t < round16(nk) (S rows hold that many; past nk
     * the values are 0-key scores, not used), each a chain of fmaf over d = 0 .. n−1 in order:
     * bit-exact across tables. NULL where a table has none (dot_multi then serves). */
    void (*score_panels)(const float *kp, int nk, int n, const float *q, size_t q_stride_i, int G,
                         size_t q_stride_g, int ni, float *S, size_t s_stride);
    /* accum_rows for nr rows at once, reading each key row once for several: acc_r[i] +=
     * Σ_{t < nk} p_r[t]·rows[t·stride + i] for r < nr, p_r = p + r·p_stride, acc_r = acc +
     * r·acc_stride; each row bit for bit what accum_rows gives it. NULL: accum_rows per row. */
    void (*accum_multi)(float *acc, size_t acc_stride, const float *p, size_t p_stride, int nr,
                        const float *rows, size_t stride, int nk, int n);
    /* s[i] = exp(s[i] − m) for i < n; returns Σ s[i]. Relative error ≤ 2e-7 per element. */
    float (*exp_sum)(float *s, int n, float m);
    /* y[i] *= a. */
    void (*scale)(float *y, float a, int n);
    /* s[i] = (s[i] + add) · scale (one add, one multiply); returns the largest result, NaNs
     * ignored (−∞ when there is none). Bit-exact across tables (but for the sign of a zero
     * maximum). */
    float (*shift_scale_max)(float *s, int n, float add, float scale);
    /* Chains of a first-order recurrence (prediction across tokens, the cache's kv_predict.h):
     * for each row r < nr (s + r·stride), s[i] += rho·s[i − 1] for 0 < i < n, in order, except
     * where a chain starts: (phase + i) % chain == 0 (chain > 0). Within float rounding of
     * that order (a SIMD form sums each chain by doubling steps with powers of rho: relative
     * error a few 1e-7 for |rho| < 1). */
    void (*chain_scan)(float *s, size_t stride, int nr, int n, int phase, int chain, float rho);
    /* out[i] = f32(in[i]). */
    void (*f16_to_f32)(const uint16_t *in, float *out, int n);
    /* One q8_0 / q4_0 record of dim elements → floats (blockq.h; bit-exact with its
     * reference decoders). */
    void (*q8_0_decode)(const uint8_t *rec, int dim, float *out);
    void (*q4_0_decode)(const uint8_t *rec, int dim, float *out);
    /* out[i] = scale · centroids[idx_i] for n packed indices (kernels.h layout) at bits ≤ 4;
     * NULL: use the codec table's unpack_lookup. Bit-exact with it (one multiply). */
    void (*unpack_small)(const uint8_t *in, int n, int bits, const float *centroids, float scale,
                         float *out);
    /* Fused decode paths: the records are read in registers, no tile is written. Each returns
     * what the tile path computes from tq_record_decode_rows rows (within float rounding).
     * score_turbo / accum_turbo take a TURBO record x with tq_attn_fused_turbo(x) true (only
     * the scalar table has them; the SIMD tables leave them NULL and read TURBO records with
     * the lane kernels below, so a record without a lane layout takes the tile there):
     *   score: S[j·s_stride + t] = ⟨q_j, row_t⟩, q_j = q + j·q_stride, t < nk, j < nq;
     *   accum: acc_j[i] += Σ_t p_j[t]·row_t[i], p_j = p + j·p_stride, acc_j = acc + j·acc_stride;
     * with row_t the decoded row of record t (stride x->rec_bytes). A record with a corrupt norm
     * (tq_record_norm_ok) counts as a zero row and makes the call return 0 (else 1).
     * score_f16 / accum_f16 do the same for fp16 rows (row t at rows + t·row_stride, dim
     * elements): the raw part, and F16-format records. */
    int (*score_turbo)(const tq_record *x, const uint8_t *rec, int nk, const float *q,
                       size_t q_stride, int nq, float *S, size_t s_stride);
    int (*accum_turbo)(const tq_record *x, const uint8_t *rec, int nk, const float *p,
                       size_t p_stride, int nq, float *acc, size_t acc_stride);
    void (*score_f16)(const uint16_t *rows, size_t row_stride, int nk, int dim, const float *q,
                      size_t q_stride, int nq, float *S, size_t s_stride);
    void (*accum_f16)(const uint16_t *rows, size_t row_stride, int nk, int dim, const float *p,
                      size_t p_stride, int nq, float *acc, size_t acc_stride);
    /* The same as score_turbo / accum_turbo with q and acc in the lane layout of x
     * (tq_record_lanes(x) > 0, rows of tq_record_lanes(x) floats); NULL where a table has
     * none. `ahead`: bytes the caller reads next (tq_attn_ahead), which a kernel may prefetch
     * along the way; it changes no result. */
    int (*score_turbo_lanes)(const tq_record *x, const uint8_t *rec, int nk, const float *q,
                             size_t q_stride, int nq, float *S, size_t s_stride, tq_attn_ahead ahead);
    int (*accum_turbo_lanes)(const tq_record *x, const uint8_t *rec, int nk, const float *p,
                             size_t p_stride, int nq, float *acc, size_t acc_stride, tq_attn_ahead ahead);
    /* Optional (NULL: none), for the integer kernels: score_turbo_lanes in two steps, so that a
     * decode step's calls on many pages of records prepare its queries once.
     * lanes_prep_bytes(x, nq): the memory prep_turbo_lanes needs for nq queries (any
     * alignment); prep_turbo_lanes fills it from the nq lane-layout queries (returns 1);
     * score_turbo_lanes_prepared is then score_turbo_lanes on the same queries, bit for bit (q,
     * q_stride: those queries again, for where the kernel hands a group to the float ones). */
    size_t (*lanes_prep_bytes)(const tq_record *x, int nq);
    int (*prep_turbo_lanes)(const tq_record *x, const float *q, size_t q_stride, int nq, void *prep);
    int (*score_turbo_lanes_prepared)(const tq_record *x, const uint8_t *rec, int nk, const void *prep,
                                      const float *q, size_t q_stride, int nq, float *S, size_t s_stride,
                                      tq_attn_ahead ahead);
    /* Bit B set: the two lane kernels also read trellis-coded segments of B bits
     * (kernels/trellis.h; attn_vnni.c, attn_avx2_int8.c and attn_neon_dot.c: 2 to 4 bits); records with
     * a segment of a width not set take the tile (tq_attn_reads_lanes). */
    int trellis_lanes;
    /* Or: the lane kernels read trellis-coded segments of any width whose table has at most
     * this many distinct values, 2^bits · pair_memory (attn_neon.c: 32 — the two-state tables
     * of 3 and 4 bits and the 2-bit ones); 0: none. */
    int trellis_lane_entries;
} tq_attn_kernels;

/* 1 if table ak's lane kernels read x's records (given tq_record_lanes(x) > 0): always for
 * Lloyd-Max indices; for trellis codes only if every segment is trellis-coded at a width the
 * table's trellis_lanes has or with a table of at most its trellis_lane_entries values. */
static inline int tq_attn_reads_lanes(const tq_attn_kernels *ak, const tq_record *x) {
    if (!tq_record_trellis(x)) return 1;
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits;
        if (!x->seg[s].pairs || B < 0 || B > 30) return 0;
        if ((ak->trellis_lanes >> B) & 1) continue;
        if (B > 8 || x->seg[s].pair_memory < 1 || x->seg[s].pair_memory > (1 << B) ||
            (long)x->seg[s].pair_memory << B > (long)ak->trellis_lane_entries)
            return 0;
    }
    return 1;
}

/* The individual tables (tests run each the host supports against the reference). */
const tq_attn_kernels *tq_attn_kernels_ref(void);
const tq_attn_kernels *tq_attn_kernels_avx2(void);   /* NULL when not built */
const tq_attn_kernels *tq_attn_kernels_avx512(void); /* NULL when not built */
/* The AVX-512 table with score_turbo_lanes and accum_turbo_lanes in integers (attn_vnni.c:
 * int8 queries and centroids, uint8 weights, VNNI dot products; the error bounds are stated
 * there): NULL when not built or when the CPU lacks AVX-512 VBMI / VNNI. */
const tq_attn_kernels *tq_attn_kernels_avx512_vnni(void);
/* The AVX2 table with score_turbo_lanes and accum_turbo_lanes in integers without VNNI
 * (attn_avx2_int8.c: vpmaddubsw + vpmaddwd on int8 queries and 7-bit centroids, uint8
 * weights; error bounds there): NULL when not built or when the CPU lacks AVX2 / FMA. */
const tq_attn_kernels *tq_attn_kernels_avx2_int8(void);
/* The same kernels with vpdpbusd on 256-bit vectors (attn_avxvnni.c, "avx2-vnni"): NULL when
 * not built or when the CPU lacks AVX2 / FMA / AVX-VNNI. Results equal avx2-int8's. */
const tq_attn_kernels *tq_attn_kernels_avxvnni(void);
/* The AArch64 table (attn_neon.c): NULL unless built for AArch64. */
const tq_attn_kernels *tq_attn_kernels_neon(void);
/* The AArch64 table with score_turbo_lanes and accum_turbo_lanes in integers (attn_neon_dot.c:
 * int8 queries and code values, uint8 weights, sdot / udot; attn_vnni.c's error bounds): NULL
 * when not built or when the CPU lacks the ARMv8.2-A dot products. */
const tq_attn_kernels *tq_attn_kernels_neon_dot(void);

/* The kernels in use: the codec table and the attention table, chosen together, once
 * (dispatch.c; tq_set_kernels, tq_set_int8_scores and the environment switch both at once). */
typedef struct tq_kernel_set {
    const tq_kernel_table *codec;
    const tq_attn_kernels *attn;
} tq_kernel_set;

/* The set in use (never NULL; initialized on first call, thread-safe). */
const tq_kernel_set *tq_kernel_set_get(void);
/* Its attention table (tq_kernel_set_get()->attn). */
const tq_attn_kernels *tq_attn_kernels_get(void);

/* n consecutive records of x (stride x->rec_bytes) → rows of x->row_floats floats (stride
 * `stride`) in the scoring basis: original coordinates for F16 / Q8_0 / Q4_0, the codec's
 * rotated basis for TURBO (norm·inv_sqrt_dim · c[idx]; PROD: signs scaled by prod_scale·γ·norm
 * in the second half), with the kernels of ks. Returns 0 if some record held a corrupt norm or
 * γ (that row is zero), else 1. */
int tq_record_decode_rows(const tq_kernel_set *ks, const tq_record *x, const uint8_t *rec,
                          size_t n, float *rows, size_t stride);
/* n fp16 rows of dim elements (contiguous) → f32 rows (stride `stride`) with ks's table. */
void tq_record_f16_rows(const tq_kernel_set *ks, const uint16_t *in, size_t n, int dim,
                        float *out, size_t stride);

/* Keys 0 .. nk−1 (row t at rows + t·stride, n floats) into score_panels' layout at kp
 * (round16(nk)·n floats; keys past nk are 0). */
static inline void tq_attn_key_panels(const float *rows, size_t stride, int nk, int n, float *kp) {
    for (int p = 0; p < nk; p += 16) {
        float *dst = kp + (size_t)p * (size_t)n;
        const int m = nk - p < 16 ? nk - p : 16;
        for (int j = 0; j < m; j++) {
            const float *src = rows + (size_t)(p + j) * stride;
            for (int d = 0; d < n; d++) dst[16 * d + j] = src[d];
        }
        for (int j = m; j < 16; j++)
            for (int d = 0; d < n; d++) dst[16 * d + j] = 0.0f;
    }
}

#endif

/*
 * ARM NEON (AArch64) attention kernels (attn_kernels.h); ground truth in attn_ref.c. The table
 * starts from the reference one and replaces the float hot loops: dot products, row sums
 * (one row, or several at once: accum_multi), the prefill tile's scores (score_panels),
 * scaling, fp16 → f32, and the TurboQuant lane kernels (record.h, tq_record_lanes: four lanes
 * per vector, centroids looked up with one vqtbl4q per four coordinates, float multiply-adds;
 * trellis codes of tables of at most 32 values by their windows, nrow_block; the empty half
 * of a 64-coordinate block skipped).
 * The softmax pieces (exp_sum, shift_scale_max) and the q8_0 / q4_0 decoders stay the
 * reference's, which keeps their bit-exactness rules trivially. The integer lane kernels
 * (sdot / udot, CPUs with the ARMv8.2 dot products) are attn_neon_dot.c's.
 */
#include "attn_kernels.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <pthread.h>
#include <string.h>

#include "trellis_rows.h"

static void neon_dot_multi(const float *k, const float *q, size_t q_stride, int nq, int n, float *out) {
    int j = 0;
    for (; j + 4 <= nq; j += 4) { /* four queries share each load of k */
        const float *q0 = q + (size_t)j * q_stride, *q1 = q0 + q_stride, *q2 = q1 + q_stride, *q3 = q2 + q_stride;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            float32x4_t kr = vld1q_f32(k + i);
            a0 = vfmaq_f32(a0, kr, vld1q_f32(q0 + i));
            a1 = vfmaq_f32(a1, kr, vld1q_f32(q1 + i));
            a2 = vfmaq_f32(a2, kr, vld1q_f32(q2 + i));
            a3 = vfmaq_f32(a3, kr, vld1q_f32(q3 + i));
        }
        float s0 = vaddvq_f32(a0), s1 = vaddvq_f32(a1), s2 = vaddvq_f32(a2), s3 = vaddvq_f32(a3);
        for (; i < n; i++) s0 += k[i] * q0[i], s1 += k[i] * q1[i], s2 += k[i] * q2[i], s3 += k[i] * q3[i];
        out[j] = s0, out[j + 1] = s1, out[j + 2] = s2, out[j + 3] = s3;
    }
    for (; j < nq; j++) {
        const float *qj = q + (size_t)j * q_stride;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            a0 = vfmaq_f32(a0, vld1q_f32(k + i), vld1q_f32(qj + i));
            a1 = vfmaq_f32(a1, vld1q_f32(k + i + 4), vld1q_f32(qj + i + 4));
        }
        float s = vaddvq_f32(vaddq_f32(a0, a1));
        for (; i < n; i++) s += k[i] * qj[i];
        out[j] = s;
    }
}

static void neon_accum_rows(float *acc, const float *p, const float *rows, size_t stride, int nk, int n) {
    for (int t = 0; t < nk; t++) {
        const float *r = rows + (size_t)t * stride;
        float w = p[t];
        int i = 0;
        for (; i + 4 <= n; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(r + i), w));
        for (; i < n; i++) acc[i] += w * r[i];
    }
}

/* score_panels (attn_kernels.h): up to four query rows against a panel of 16 keys (four
 * vectors, 16 accumulators); each lane a chain of fused multiply-adds over d in order, as the
 * reference's fmaf. */
static void neon_score_panels(const float *kp, int nk, int n, const float *q, size_t qsi, int G, size_t qsg, int ni,
                              float *S, size_t ss) {
    const int nr = ni * G;
    for (int p = 0; p < nk; p += 16) {
        const float *k0 = kp + (size_t)p * (size_t)n;
        for (int r0 = 0; r0 < nr; r0 += 4) {
            const int R = nr - r0 < 4 ? nr - r0 : 4;
            const float *qr[4];
            float32x4_t a[4][4];
            for (int r = 0; r < 4; r++) {
                const int rr = r0 + (r < R ? r : 0);
                qr[r] = q + (size_t)(rr / G) * qsi + (size_t)(rr % G) * qsg;
                for (int v = 0; v < 4; v++) a[r][v] = vdupq_n_f32(0.0f);
            }
            for (int d = 0; d < n; d++) {
                const float *kd = k0 + 16 * (size_t)d;
                const float32x4_t k_0 = vld1q_f32(kd), k_1 = vld1q_f32(kd + 4), k_2 = vld1q_f32(kd + 8),
                                  k_3 = vld1q_f32(kd + 12);
                for (int r = 0; r < 4; r++) { /* rows past R repeat row r0: computed, not stored */
                    const float qv = qr[r][d];
                    a[r][0] = vfmaq_n_f32(a[r][0], k_0, qv);
                    a[r][1] = vfmaq_n_f32(a[r][1], k_1, qv);
                    a[r][2] = vfmaq_n_f32(a[r][2], k_2, qv);
                    a[r][3] = vfmaq_n_f32(a[r][3], k_3, qv);
                }
            }
            for (int r = 0; r < R; r++)
                for (int v = 0; v < 4; v++) vst1q_f32(S + (size_t)(r0 + r) * ss + (size_t)p + 4 * (size_t)v, a[r][v]);
        }
    }
}

/* accum_multi: four rows by 16 columns per pass, each element the chain of neon_accum_rows
 * (fused multiply-adds over t in order); the columns past the last full 16 by it. */
static void neon_accum_multi(float *acc, size_t as, const float *p, size_t ps, int nr, const float *rows,
                             size_t stride, int nk, int n) {
    const int n16 = n / 16 * 16;
    int r0 = 0;
    for (; r0 + 4 <= nr; r0 += 4) {
        float *a0p = acc + (size_t)r0 * as;
        const float *p0 = p + (size_t)r0 * ps;
        for (int i = 0; i < n16; i += 16) {
            float32x4_t a[4][4];
            for (int r = 0; r < 4; r++)
                for (int v = 0; v < 4; v++) a[r][v] = vld1q_f32(a0p + (size_t)r * as + (size_t)i + 4 * (size_t)v);
            const float *rr = rows + i;
            for (int t = 0; t < nk; t++, rr += stride) {
                const float32x4_t v0 = vld1q_f32(rr), v1 = vld1q_f32(rr + 4), v2 = vld1q_f32(rr + 8), v3 = vld1q_f32(rr + 12);
                for (int r = 0; r < 4; r++) {
                    const float w = p0[(size_t)r * ps + (size_t)t];
                    a[r][0] = vfmaq_n_f32(a[r][0], v0, w);
                    a[r][1] = vfmaq_n_f32(a[r][1], v1, w);
                    a[r][2] = vfmaq_n_f32(a[r][2], v2, w);
                    a[r][3] = vfmaq_n_f32(a[r][3], v3, w);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int v = 0; v < 4; v++) vst1q_f32(a0p + (size_t)r * as + (size_t)i + 4 * (size_t)v, a[r][v]);
        }
        if (n16 < n)
            for (int r = 0; r < 4; r++)
                neon_accum_rows(a0p + (size_t)r * as + n16, p0 + (size_t)r * ps, rows + n16, stride, nk, n - n16);
    }
    for (; r0 < nr; r0++) neon_accum_rows(acc + (size_t)r0 * as, p + (size_t)r0 * ps, rows, stride, nk, n);
}

static void neon_scale(float *y, float a, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
    for (; i < n; i++) y[i] *= a;
}

static void neon_f16_to_f32(const uint16_t *in, float *out, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(in + i))));
    for (; i < n; i++) out[i] = tq_f16_to_f32(in[i]);
}

/* ---- lane layout: 8 codes per 32-bit lane, four lanes per vector ---- */

/* A segment's codes as the lane kernels read them. Plain codes: lane word L holds 8 codes of B
 * bits (code k at bit Bk), looked up in the 2^B centroids repeated over 16 entries. Trellis
 * codes (kernels/trellis.h) of tables with at most NEON_TRELLIS_ENTRIES distinct values: code
 * k's value is the entry of its window, the W = B + P stream bits [Bk − P, Bk + B) — the code
 * and the top P bits of the code before (P = log2 pair_memory: 1 for the two-state tables, B
 * for the free ones; the first code of a lane takes them from the byte before the lane, and
 * the first of a segment from zeros, as tq_trellis_unpack) — in a table of 2^W floats
 * (16 or 32: one vqtbl4q, or a vqtbl4q and a vqtbx4q). */
#define NEON_TRELLIS_ENTRIES 32

typedef struct nseg {
    uint8x16x4_t tab[2]; /* 16 floats as bytes each: entries 0–15 and (W = 5) 16–31 */
    int B, P, nblk;      /* P = 0: plain codes */
    int last_groups;     /* groups of four lanes of the last block that hold codes (1 to 4) */
    size_t off, bytes;
} nseg;

static void nseg_setup(const tq_record *x, nseg *g) {
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits, P = tq_record_window_bits(x, s), m = (1 << (B + P)) - 1;
        float rep[32]; /* the 2^(B+P) ≤ 32 code or window values, repeated over 32 entries */
        for (int i = 0; i < 32; i++)
            rep[i] = P ? x->seg[s].pairs[tq_record_window_entry(B, P, i & m)] : x->seg[s].centroids[i & m];
        for (int t = 0; t < 2; t++)
            for (int v = 0; v < 4; v++) g[s].tab[t].val[v] = vreinterpretq_u8_f32(vld1q_f32(rep + 16 * t + 4 * v));
        g[s].B = B;
        g[s].P = P;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        int last = x->seg[s].count - 128 * (g[s].nblk - 1); /* codes in the last block */
        g[s].last_groups = (last + 31) / 32;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
    }
}

/* Lanes 4m … 4m + 3 of the block at p (16·B bytes, zero past `have`): lane l holds bytes
 * [Bl, Bl + B) in its low bits. */
static inline uint32x4_t nlane_load(const uint8_t *p, int m, int B) {
    const uint8_t *s = p + 4 * m * B;
    switch (B) {
    case 4: return vld1q_u32((const uint32_t *)(const void *)s);
    case 2: return vmovl_u16(vld1_u16((const uint16_t *)(const void *)s));
    case 1: {
        uint32_t w;
        memcpy(&w, s, 4);
        return vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(w))));
    }
    default: {
        static const uint8_t spread[16] = {0, 1, 2, 255, 3, 4, 5, 255, 6, 7, 8, 255, 9, 10, 11, 255};
        uint8_t b[16] = {0};
        memcpy(b, s, 12);
        return vreinterpretq_u32_u8(vqtbl1q_u8(vld1q_u8(b), vld1q_u8(spread)));
    }
    }
}

/* The block h of a segment at rec (record + segment offset), of which nlane_load reads the
 * first mg groups of four lanes (4·B bytes each): the block itself where its bytes hold them
 * (a whole block, or a last one of a multiple of 32 codes: the key split's quarters, SmolLM2's
 * halves), else a copy in blk (64 bytes, zero-padded). *prev: the byte before the block (0
 * for the first). */
static inline const uint8_t *nblock(const nseg *g, const uint8_t *rec, int h, int mg, uint8_t *blk, uint8_t *prev) {
    size_t at = (size_t)h * 16 * (size_t)g->B, n = g->bytes - at;
    *prev = h ? rec[at - 1] : 0;
    if (n >= 4 * (size_t)g->B * (size_t)mg) return rec + at;
    memset(blk, 0, 64);
    memcpy(blk, rec + at, n < 16 * (size_t)g->B ? n : 16 * (size_t)g->B);
    return blk;
}

/* Block b of a segment (the byte before it: prev; its first mg groups of four lanes hold
 * codes) into the row positions out + 16k + 4m + l: lane word L holds codes k = 0 … 7, each
 * looked up by its index (plain: B bits, the 2^B centroids repeated over 16 entries) or its
 * window (trellis: the W = B + P stream bits [Bk − P, Bk + B); for k = 0 the P bits before
 * are the top of the word to the lane's left, Lp — the previous group's lane 3 for lane 0, the
 * byte before the block for the first group) in the table t0 (entries 0–15) and t1 (16–31).
 * B and P are constants at every call (nrow's switch). */
static inline __attribute__((always_inline)) void nrow_block(const uint8_t *b, uint8_t prev, int mg, uint8x16x4_t t0,
                                                             uint8x16x4_t t1, float *out, int B, int P) {
    const uint32x4_t mask = vdupq_n_u32(P ? (1u << (B + P)) - 1u : 15u);
    const uint32x4_t spread = vdupq_n_u32(0x03020100u);
    uint32x4_t Lp = vsetq_lane_u32(P ? (uint32_t)prev << (8 * B - 8) : 0u, vdupq_n_u32(0), 3);
    for (int m = 0; m < mg; m++) {
        uint32x4_t L = nlane_load(b, m, B);
        for (int k = 0; k < 8; k++) {
            uint32x4_t w;
            if (!P)
                w = k ? vshlq_u32(L, vdupq_n_s32(-B * k)) : L;
            else if (k)
                w = vshlq_u32(L, vdupq_n_s32(P - B * k));
            else /* the top P bits of each lane's left neighbour below the code */
                w = vorrq_u32(vshlq_u32(L, vdupq_n_s32(P)), vshlq_u32(vextq_u32(Lp, L, 3), vdupq_n_s32(P - 8 * B)));
            /* entry e → its four bytes 4e … 4e + 3 */
            uint8x16_t bi = vreinterpretq_u8_u32(vmlaq_n_u32(spread, vandq_u32(w, mask), 0x04040404u));
            uint8x16_t r = vqtbl4q_u8(t0, bi);
            /* entries 16–31: bytes 64–127 from t1 (bytes below 64 wrap past 191: kept) */
            if (P && B + P == 5) r = vqtbx4q_u8(r, t1, vsubq_u8(bi, vdupq_n_u8(64)));
            vst1q_f32(out + 16 * k + 4 * m, vreinterpretq_f32_u8(r));
        }
        Lp = L;
    }
}

/* The scale of a record's row (norm · inv_sqrt_dim), 0 and *ok = 0 for a corrupt norm. */
static inline float nscale(const tq_record *x, const uint8_t *r, int *ok) {
    float n = tq_record_load_norm(x, r + x->norm_off);
    if (!tq_record_norm_ok(n)) {
        *ok = 0;
        return 0.0f;
    }
    return n * x->inv_sqrt_dim;
}

/* The groups of four lanes of block h that hold codes: 4, but in a segment's last block (a
 * segment of 64 coordinates — SmolLM2's heads, a turbo3.5 half at d128 — fills two). Row
 * positions 128h + 16k + 4m + l with m at or past it hold nothing: the kernels neither write
 * nor read them. */
static inline int ngroups(const nseg *g, int h) { return h + 1 < g->nblk ? 4 : g->last_groups; }

/* Runs STEP(i) for i the first row position of every four that hold codes, in row order:
 * a whole block's 128 in one run, a partial one's 16k + 4m for m < its groups. */
#define NEON_FOR_CODES(x, g, STEP)                                                                                     \
    do {                                                                                                               \
        size_t base_ = 0;                                                                                              \
        for (int s_ = 0; s_ < (x)->n_seg; base_ += 128 * (size_t)(g)[s_].nblk, s_++)                                   \
            for (int h_ = 0; h_ < (g)[s_].nblk; h_++) {                                                                \
                int mg_ = ngroups(&(g)[s_], h_);                                                                       \
                size_t b0_ = base_ + 128 * (size_t)h_;                                                                 \
                if (mg_ == 4)                                                                                          \
                    for (size_t i_ = b0_; i_ < b0_ + 128; i_ += 4) STEP(i_);                                           \
                else                                                                                                   \
                    for (size_t k_ = 0; k_ < 8; k_++)                                                                  \
                        for (int m_ = 0; m_ < mg_; m_++) STEP(b0_ + 16 * k_ + 4 * (size_t)m_);                         \
            }                                                                                                          \
    } while (0)

/* A lane-layout row: TQ_MAX_DIM coordinates in at most two segments pad to 9 blocks. */
#define NEON_MAX_LANES (TQ_MAX_DIM + 128)

/* Record r → its row in the lane layout (the positions that hold codes; centroids unscaled);
 * inlined into each kernel (so that scripts/arm-instr-counts.sh counts it in each). */
static inline __attribute__((always_inline)) void nrow(const tq_record *x, const nseg *g, const uint8_t *r,
                                                      float *row) {
    uint8_t blk[64], prev;
    for (int s = 0; s < x->n_seg; row += 128 * (size_t)g[s].nblk, s++) { /* a segment's blocks, then the next's */
        const uint8x16x4_t t0 = g[s].tab[0], t1 = g[s].tab[1];
        for (int h = 0; h < g[s].nblk; h++) {
            int mg = ngroups(&g[s], h);
            const uint8_t *b = nblock(&g[s], r + g[s].off, h, mg, blk, &prev);
            float *out = row + 128 * (size_t)h;
            switch (g[s].B * 8 + g[s].P) { /* (B, P) as constants */
            case 8: nrow_block(b, prev, mg, t0, t1, out, 1, 0); break;
            case 16: nrow_block(b, prev, mg, t0, t1, out, 2, 0); break;
            case 17: nrow_block(b, prev, mg, t0, t1, out, 2, 1); break;
            case 18: nrow_block(b, prev, mg, t0, t1, out, 2, 2); break;
            case 24: nrow_block(b, prev, mg, t0, t1, out, 3, 0); break;
            case 25: nrow_block(b, prev, mg, t0, t1, out, 3, 1); break;
            case 32: nrow_block(b, prev, mg, t0, t1, out, 4, 0); break;
            case 33: nrow_block(b, prev, mg, t0, t1, out, 4, 1); break;
            default: break; /* not read here (tq_attn_reads_lanes) */
            }
        }
    }
}

static tq_attn_kernels neon_table;

/* ⟨q_j, row⟩ for the nq queries q (stride qs) over the row positions that hold codes. */
static inline __attribute__((always_inline)) void nrow_dot(const tq_record *x, const nseg *g, const float *row,
                                                           const float *q, size_t qs, int nq, float *out) {
    for (int j0 = 0; j0 < nq; j0 += 4) { /* four queries share each load of the row */
        int m4 = nq - j0 < 4 ? nq - j0 : 4;
        const float *Q[4];
        for (int j = 0; j < 4; j++) Q[j] = q + (size_t)(j0 + (j < m4 ? j : 0)) * qs;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
#define NDOT_AT(i)                                                                                                     \
    do {                                                                                                               \
        float32x4_t v = vld1q_f32(row + (i));                                                                          \
        a0 = vfmaq_f32(a0, v, vld1q_f32(Q[0] + (i)));                                                                  \
        a1 = vfmaq_f32(a1, v, vld1q_f32(Q[1] + (i)));                                                                  \
        a2 = vfmaq_f32(a2, v, vld1q_f32(Q[2] + (i)));                                                                  \
        a3 = vfmaq_f32(a3, v, vld1q_f32(Q[3] + (i)));                                                                  \
    } while (0)
        NEON_FOR_CODES(x, g, NDOT_AT);
#undef NDOT_AT
        float o[4] = {vaddvq_f32(a0), vaddvq_f32(a1), vaddvq_f32(a2), vaddvq_f32(a3)};
        for (int j = 0; j < m4; j++) out[j0 + j] = o[j];
    }
}

static int neon_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *q, size_t qs,
                                  int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    /* trellis tables of more values than the lookups hold: row by row (the driver sends
     * those records to the tile; called directly, the kernel still answers) */
    if (!tq_attn_reads_lanes(&neon_table, x))
        return trellis_rows_scores(x, rec, nk, q, qs, nq, S, ss, tq_record_lanes(x));
    nseg g[2];
    nseg_setup(x, g);
    int ok = 1, kl = tq_record_lanes(x), full = 1;
    for (int s = 0; s < x->n_seg; s++) full &= g[s].last_groups == 4;
    float row[NEON_MAX_LANES];
    for (int t = 0; t < nk; t++) {
        const uint8_t *r = rec + (size_t)t * x->rec_bytes;
        int good = 1;
        float sc = nscale(x, r, &good);
        ok &= good;
        if (!good) { /* a corrupt row scores 0, whatever the queries */
            for (int j = 0; j < nq; j++) S[(size_t)j * ss + (size_t)t] = 0.0f;
            continue;
        }
        nrow(x, g, r, row);
        float o[16];
        for (int j0 = 0; j0 < nq; j0 += 16) {
            int m = nq - j0 < 16 ? nq - j0 : 16;
            if (full) /* every position holds a code: one contiguous dot */
                neon_dot_multi(row, q + (size_t)j0 * qs, qs, m, kl, o);
            else
                nrow_dot(x, g, row, q + (size_t)j0 * qs, qs, m, o);
            for (int j = 0; j < m; j++) S[(size_t)(j0 + j) * ss + (size_t)t] = sc * o[j];
        }
    }
    return ok;
}

static int neon_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *p, size_t ps,
                                  int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    if (!tq_attn_reads_lanes(&neon_table, x))
        return trellis_rows_accum(x, rec, nk, p, ps, nq, acc, as, tq_record_lanes(x));
    nseg g[2];
    nseg_setup(x, g);
    int ok = 1;
    float row[NEON_MAX_LANES];
    for (int t = 0; t < nk; t++) {
        const uint8_t *r = rec + (size_t)t * x->rec_bytes;
        int good = 1;
        float sc = nscale(x, r, &good);
        ok &= good;
        if (!good) continue; /* a corrupt row adds nothing, whatever the weights */
        nrow(x, g, r, row);
        for (int j0 = 0; j0 < nq; j0 += 4) { /* four heads per pass over the row */
            int m4 = nq - j0 < 4 ? nq - j0 : 4;
            float w[4] = {0, 0, 0, 0};
            float *A[4];
            for (int j = 0; j < 4; j++) {
                int jj = j0 + (j < m4 ? j : 0);
                if (j < m4) w[j] = p[(size_t)jj * ps + (size_t)t] * sc;
                A[j] = acc + (size_t)jj * as;
            }
            /* the row positions that hold codes (ngroups) */
#define NACC_AT(i)                                                                                                     \
    do {                                                                                                               \
        float32x4_t v = vld1q_f32(row + (i));                                                                          \
        if (m4 == 4) { /* unrolled: the usual group of four heads */                                                    \
            vst1q_f32(A[0] + (i), vfmaq_n_f32(vld1q_f32(A[0] + (i)), v, w[0]));                                        \
            vst1q_f32(A[1] + (i), vfmaq_n_f32(vld1q_f32(A[1] + (i)), v, w[1]));                                        \
            vst1q_f32(A[2] + (i), vfmaq_n_f32(vld1q_f32(A[2] + (i)), v, w[2]));                                        \
            vst1q_f32(A[3] + (i), vfmaq_n_f32(vld1q_f32(A[3] + (i)), v, w[3]));                                        \
        } else {                                                                                                       \
            for (int j = 0; j < m4; j++) vst1q_f32(A[j] + (i), vfmaq_n_f32(vld1q_f32(A[j] + (i)), v, w[j]));           \
        }                                                                                                              \
    } while (0)
            NEON_FOR_CODES(x, g, NACC_AT);
#undef NACC_AT
        }
    }
    return ok;
}

static pthread_once_t neon_once = PTHREAD_ONCE_INIT;

static void neon_init(void) {
    neon_table = *tq_attn_kernels_ref();
    neon_table.name = "neon";
    neon_table.dot_multi = neon_dot_multi;
    neon_table.accum_rows = neon_accum_rows;
    neon_table.score_panels = neon_score_panels;
    neon_table.accum_multi = neon_accum_multi;
    neon_table.scale = neon_scale;
    neon_table.f16_to_f32 = neon_f16_to_f32;
    neon_table.score_turbo_lanes = neon_score_turbo_lanes;
    neon_table.accum_turbo_lanes = neon_accum_turbo_lanes;
    neon_table.trellis_lane_entries = NEON_TRELLIS_ENTRIES;
}

const tq_attn_kernels *tq_attn_kernels_neon(void) {
    pthread_once(&neon_once, neon_init);
    return &neon_table;
}

#else

const tq_attn_kernels *tq_attn_kernels_neon(void) { return NULL; }

#endif

/*
 * Decode attention in integers on AArch64 CPUs with the ARMv8.2-A dot products (sdot / udot:
 * four byte products summed into each int32 lane), table "neon-dot": key scores and value sums on
 * the lane layout (record.h, tq_record_lanes), plain Lloyd-Max codes of 1 to 4 bits and trellis
 * codes of 2 to 4 bits. The rest of the table is attn_neon.c's. GCC sets the target for this file
 * only; clang builds it only when the command line targets the dot products (as
 * engine/quants_neon_dotprod.c); dispatch.c uses it where getauxval says HWCAP_ASIMDDP.
 *
 * The float kernel (attn_neon.c) decodes each record to a row of floats and multiplies it with
 * every query head. Here the rotated query is rounded to int8 once per call (q̂ = round(q / β),
 * β = max|q| / 127, per head) and the code values to int8 (ĉ = round(c / α), α = the largest
 * |value| of the tensor / 127), so one sdot does 16 multiply-adds of one head:
 *
 *   ⟨q, row⟩ ≈ scale · α · β · Σ ĉ_i · q̂_i     (exact in int32)
 *
 * A block of 128 coordinates (16·B bytes) is read as eight vectors of 16 indices: vector r, byte
 * i holds the code at stream position pos(B, r, i) (B = 4: 32⌊r/2⌋ + 2i + r mod 2, the low or
 * high nibbles of one 16-byte load; B = 2: 64⌊r/4⌋ + 4i + r mod 4; B = 1 and 3: 8i + r, B = 3 by
 * one vld3q that puts bytes 3i, 3i + 1, 3i + 2 in three vectors), each by a shift, an or and a
 * mask at most, then looked up in the table of ĉ with one tbl. The query is stored once in the
 * same order (ND_PERM), so the order of the products does not matter. Trellis codes (trellis.h)
 * look up the (B + P)-bit window that ends with the code (the code and the top P bits of the one
 * before it: P = B for the free tables, 1 for the two-state ones; the byte before each byte
 * comes from vext with the previous load, or the byte before the block, zero for the segment's
 * first block): 16 entries for 2 bits and 3-bit two-state codes (one tbl), 32 for 4-bit
 * two-state codes and 64 for 3-bit free ones (one tbl of four registers), 256 for 4-bit free
 * ones (by the pair table's antisymmetry, ĉ[255 − w] = −ĉ[w], checked at setup: one tbl and
 * one tbx of four registers on w or w ^ 255, then the sign).
 *
 * A segment of exactly 64 coordinates with codes of 2–4 bits (SmolLM2's heads, the halves of
 * turbo3.5's split at d 128; plain or trellis codes) is read in place, not staged: index
 * vectors 0–3 hold its codes at 2 and 4 bits; at 3 bits bytes 0–7 of every vector do, so the
 * score pass puts two records in one vector (vld3 of each record's 24 bytes, combined; the
 * second's first trellis window gets zeros before it) and the value pass skips the transposed
 * vectors of bytes 8–15 (nd_score_half, nd_accum_seg). A segment of exactly 32 coordinates (the
 * key split at d 64, turbo3.5's and turbo2.5's quarters there) likewise: 4 bits from index
 * vectors 0–1, 2 bits two records per vector (nd_score_pairs), 3 bits four records per vector
 * (nd_quad3; the value pass stages the tokens' 12 bytes in a row and transposes four tokens ×
 * four codes with one tbl). The same int32 sums.
 *
 * The error bound is attn_vnni.c's (centroids and queries of 127 levels):
 *   scores: scale · Σ_i (β/2 · |c_i| + α/2 · |q_i| + α·β/4);
 *   values (weights w = p · scale in uint8 per group of 32 tokens, γ = the group's largest w /
 *   255, summed by udot against the biased codes ĉ + 128): Σ_t (γ_t/2 · |c_ti| + (w_t + γ_t/2) ·
 *   α/2);
 * tests/test_attention.c holds the kernels to them. A non-finite query coordinate or weight
 * sends its group of four heads to the float kernel; a last group of fewer than four tokens
 * takes the float kernel in the value sums.
 */
#include "attn_kernels.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define ND_BASELINE 1 /* the command line targets the dot products (before the pragma sets them) */
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(__clang__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#define ND_BUILD 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define ND_BUILD 1
#endif

#if defined(ND_BUILD)

#include <arm_neon.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#if defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#define ND_MAX_BLOCKS 9 /* 128-coordinate blocks of a lane row: head dims ≤ 1024, 2 segments */

typedef struct ndseg {
    uint8x16x4_t ts[2]; /* entry e: the value of code (plain) or window (trellis) e as int8
                           (scores); 16, 64 or 128 entries (of 256 for 4-bit free trellis
                           codes: nd_lookup) */
    uint8x16x4_t tu[2]; /* entry e: 128 + the same value (value sums: the unsigned operand of
                           udot) */
    const uint8_t *perm; /* code order (16r + i) → lane-layout offset in the block (nd_perm) */
    int B, P, nblk; /* P: the bits of the code before in a trellis window (0: plain codes; 1: the
                       two-state tables; B: the free ones) */
    int half; /* one block of 64 coordinates, codes of 2–4 bits (SmolLM2's heads, the
                 halves of turbo3.5's split at d 128): index vectors r < 4 hold them all (2, 4
                 bits), or bytes 0–7 of every vector (3 bits: two records share one) */
    int quarter; /* one block of 32 coordinates, codes of 2–4 bits (SmolLM2's key split, the
                    quarters of turbo3.5 and turbo2.5 at d 64): index vectors 0–1 hold them
                    (4 bits), bytes 0–7 of vectors 0–3 (2 bits: two records share one) or
                    bytes 0–3 of every vector (3 bits: four records share one) */
    size_t off, bytes;
} ndseg;

/* The stream position of byte i of index vector r of a block, for codes of B bits. */
static int nd_pos(int B, int r, int i) {
    switch (B) {
    case 4: return 32 * (r >> 1) + 2 * i + (r & 1);
    case 2: return 64 * (r >> 2) + 4 * i + (r & 3);
    default: return 8 * i + r;
    }
}

/* nd_perm[B][16r + i]: the lane-layout offset (16k + l) of the block's coordinate 8l + k at
 * nd_pos(B, r, i); filled once (nd_init). */
static uint8_t nd_perm[5][128];

/* α and the segments' state; 0 if the lane row is longer than ND_MAX_BLOCKS blocks, some code
 * value is not finite, or all are 0 (then the float kernels). */
static int nd_setup(const tq_record *x, ndseg *g, float *alpha) {
    if (tq_record_lanes(x) > 128 * ND_MAX_BLOCKS) return 0;
    float m = tq_record_absmax(x);
    if (!(m > 0.0f)) return 0; /* a value not finite (−1), or only zeros */
    *alpha = m / 127.0f;
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits, tr = x->seg[s].pairs != NULL, P = tq_record_window_bits(x, s);
        if (B < 1 || B > 4 || (tr && B < 2)) return 0; /* not reached: tq_attn_reads_lanes */
        if (tr && P != 1 && P != B) return 0; /* no specialized loop (ND_BY_WIDTH): the float kernels */
        int nv, w = B + P;
        int ne = w <= 4 ? 16 : w <= 6 ? 64 : 256; /* the entries nd_lookup reads */
        const float *val = tq_record_seg_values(x, s, &nv);
        uint8_t ts[256], tu[256];
        memset(ts, 0, sizeof ts);
        memset(tu, 0, sizeof tu);
        for (int e = 0; e < ne; e++) {
            /* window e (record.h) or, plain, code e mod 2^B */
            int v = (tr ? tq_record_window_entry(B, P, e) : e) & (nv - 1);
            int c = vcvtns_s32_f32(val[v] / *alpha); /* |c| ≤ 127 */
            ts[e] = (uint8_t)(int8_t)c;
            tu[e] = (uint8_t)(128 + c);
        }
        if (ne == 256) /* nd_lookup reads entry 255 − e as −ĉ[e]: else the float kernels */
            for (int e = 0; e < 128; e++)
                if ((int8_t)ts[255 - e] != -(int8_t)ts[e]) return 0;
        for (int k = 0; k < 2; k++)
            for (int v = 0; v < 4; v++) {
                g[s].ts[k].val[v] = vld1q_u8(ts + 64 * k + 16 * v);
                g[s].tu[k].val[v] = vld1q_u8(tu + 64 * k + 16 * v);
            }
        g[s].perm = nd_perm[B];
        g[s].B = B;
        g[s].P = P;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        g[s].half = x->seg[s].count == 64 && B >= 2;
        g[s].quarter = x->seg[s].count == 32 && B >= 2;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
    }
    return 1;
}

/* Block h of a segment at p (record + segment offset), given full (the block lies within the
 * segment's bytes; only a last block may not): the block itself, or a copy in blk (64 bytes)
 * zero past the segment's bytes; *prev = the byte before it (0 for the first block; trellis
 * codes only). */
static inline __attribute__((always_inline)) const uint8_t *nd_block(const ndseg *g, const uint8_t *p, int h, int full,
                                                                     uint8_t *blk, uint8_t *prev, int B, int P) {
    size_t at = (size_t)h * 16 * (size_t)B;
    *prev = P && h ? p[at - 1] : 0;
    if (full) return p + at;
    /* a partial block: n < 16·B bytes, a multiple of 4 (no library call on this path) */
    const uint8_t *src = p + at;
    size_t n = g->bytes - at, i = 0;
    const uint8x16_t z = vdupq_n_u8(0);
    vst1q_u8(blk, z), vst1q_u8(blk + 16, z), vst1q_u8(blk + 32, z), vst1q_u8(blk + 48, z);
    for (; i + 16 <= n; i += 16) vst1q_u8(blk + i, vld1q_u8(src + i));
    switch ((n - i) / 4) {
    case 3: memcpy(blk + i, src + i, 12); break;
    case 2: memcpy(blk + i, src + i, 8); break;
    case 1: memcpy(blk + i, src + i, 4); break;
    default: break;
    }
    return blk;
}
static inline int nd_full(const ndseg *g, int h) { return (size_t)(h + 1) * 16 * (size_t)g->B <= g->bytes; }

static inline __attribute__((always_inline)) uint8x16_t nd_shr(uint8x16_t v, int s) {
    return s ? vshlq_u8(v, vdupq_n_s8((int8_t)-s)) : v;
}
static inline __attribute__((always_inline)) uint8x16_t nd_shl(uint8x16_t v, int s) {
    return s ? vshlq_u8(v, vdupq_n_s8((int8_t)s)) : v;
}

/* Bits [s, s + w) of each lane of the byte stream lo, hi (s < 8, or s < 0 with lo the bytes
 * before), 0 < w ≤ 8. */
static inline __attribute__((always_inline)) uint8x16_t nd_bits(uint8x16_t lo, uint8x16_t hi, int s, int w) {
    uint8x16_t v = nd_shr(lo, s);
    if (s + w > 8) v = vorrq_u8(v, nd_shl(hi, 8 - s));
    if (s + w != 8) v = vandq_u8(v, vdupq_n_u8((uint8_t)((1u << w) - 1u)));
    return v;
}

/* nd_idx for B = 3 from the block's triples t (vld3q: triple i = bytes 3i … 3i + 2, codes 8i …
 * 8i + 7). pair 1: triples 8–15 are another record's first (nd_pair3), whose first code has
 * zeros before it, not triple 7's last byte; pair 2: triples 4, 8, 12 are each another
 * record's first (nd_quad3). */
static inline __attribute__((always_inline)) uint8x16_t nd_idx3(uint8x16x3_t t, uint8_t prev, int r, int P, int pair) {
    int s = 3 * r - P, k = s < 0 ? -1 : s / 8, sh = s - 8 * k;
    uint8x16_t by[4] = {vextq_u8(vdupq_n_u8(prev), t.val[2], 15), t.val[0], t.val[1], t.val[2]};
    if (pair == 1 && P) by[0] = vsetq_lane_u8(0, by[0], 8);
    if (pair == 2 && P) by[0] = vandq_u8(by[0], vreinterpretq_u8_u32(vdupq_n_u32(0xFFFFFF00u)));
    uint8x16_t nx = k + 2 < 4 ? by[k + 2] : by[3];
    return nd_bits(by[k + 1], nx, sh, 3 + P);
}

/* The triples of two records' half blocks of 3 bits (24 bytes each at a and b): triples 0–7
 * from a, 8–15 from b. */
static inline __attribute__((always_inline)) uint8x16x3_t nd_pair3(const uint8_t *a, const uint8_t *b) {
    uint8x8x3_t ta = vld3_u8(a), tb = vld3_u8(b);
    uint8x16x3_t t;
    for (int k = 0; k < 3; k++) t.val[k] = vcombine_u8(ta.val[k], tb.val[k]);
    return t;
}

/* The triples of four records' quarter blocks of 3 bits (12 bytes each at r[0..3]) as vld3q
 * would read their 48 bytes in a row: triples 4m … 4m + 3 are record m's. */
static inline __attribute__((always_inline)) uint8x16x3_t nd_quad3(const uint8_t *const r[4]) {
    static const uint8_t ix[3][16] = {{0, 3, 6, 9, 16, 19, 22, 25, 32, 35, 38, 41, 48, 51, 54, 57},
                                      {1, 4, 7, 10, 17, 20, 23, 26, 33, 36, 39, 42, 49, 52, 55, 58},
                                      {2, 5, 8, 11, 18, 21, 24, 27, 34, 37, 40, 43, 50, 53, 56, 59}};
    uint8x16x4_t v;
    for (int m = 0; m < 4; m++) {
        uint32_t w;
        memcpy(&w, r[m] + 8, 4); /* its last 4 bytes: nothing past them is read */
        v.val[m] = vcombine_u8(vld1_u8(r[m]), vreinterpret_u8_u32(vdup_n_u32(w)));
    }
    uint8x16x3_t t;
    for (int k = 0; k < 3; k++) t.val[k] = vqtbl4q_u8(v, vld1q_u8(ix[k]));
    return t;
}

/* Index vector r of a block b (prev: the byte before it): the codes (plain) or their 2B-bit
 * windows (trellis) at nd_pos(B, r, ·). */
static inline __attribute__((always_inline)) uint8x16_t nd_idx(const uint8_t *b, uint8_t prev, int r, int B,
                                                               int P) {
    const int w = B + P;
    if (B == 3) return nd_idx3(vld3q_u8(b), prev, r, P, 0);
    const int per = 8 / B, ld = r / per, j = r % per; /* per codes per byte */
    uint8x16_t v = vld1q_u8(b + 16 * ld);
    int s = B * j - P;
    if (s >= 0) return nd_bits(v, v, s, w);
    uint8x16_t before = vextq_u8(ld ? vld1q_u8(b + 16 * ld - 16) : vdupq_n_u8(prev), v, 15);
    return nd_bits(before, v, 8 + s, w);
}

/* The table entries t[idx] of an index vector of w-bit entries. */
static inline __attribute__((always_inline)) uint8x16_t nd_lookup(const uint8x16x4_t *t, uint8x16_t idx, int w) {
    if (w <= 4) return vqtbl1q_u8(t[0].val[0], idx);
    if (w <= 6) return vqtbl4q_u8(t[0], idx);
    /* 256 entries by the table's antisymmetry (nd_setup checks it): entry e ≥ 128 is the
     * negative (mod 256: also for the biased table, 128 + ĉ) of entry 255 − e = e ^ 255, so a
     * 128-entry lookup (eight registers) of e or e ^ 255, then the sign */
    const uint8x16_t neg = vreinterpretq_u8_s8(vshrq_n_s8(vreinterpretq_s8_u8(idx), 7));
    const uint8x16_t i2 = veorq_u8(idx, neg);
    uint8x16_t r = vqtbx4q_u8(vqtbl4q_u8(t[0], i2), t[1], vsubq_u8(i2, vdupq_n_u8(64)));
    return vsubq_u8(veorq_u8(r, neg), neg);
}

/* The scale of a record's row (norm · inv_sqrt_dim); 0 and *ok = 0 for a corrupt norm. */
static inline float nd_scale(const tq_record *x, const uint8_t *r, int *ok) {
    float n = tq_record_load_norm(x, r + x->norm_off);
    if (!tq_record_norm_ok(n)) {
        *ok = 0;
        return 0.0f;
    }
    return n * x->inv_sqrt_dim;
}

/* One query row in the lane layout (kl floats) → q̂ in code order (block H, byte 16r + i: the
 * coordinate at perm); sets β; 0 if a coordinate is not finite. */
static int nd_quant_query(const tq_record *x, const ndseg *g, const float *q, int kl, int8_t *out, float *beta) {
    float32x4_t m = vdupq_n_f32(0.0f);
    uint32x4_t good = vdupq_n_u32(~0u);
    for (int i = 0; i < kl; i += 4) {
        float32x4_t a = vabsq_f32(vld1q_f32(q + i));
        good = vandq_u32(good, vcleq_f32(a, vdupq_n_f32(3.4e38f))); /* NaN fails */
        m = vmaxq_f32(m, a);
    }
    if (vminvq_u32(good) == 0) return 0;
    float mx = vmaxvq_f32(m);
    const float32x4_t inv = vdupq_n_f32(mx > 0.0f ? 127.0f / mx : 0.0f);
    int H = 0;
    for (int s = 0; s < x->n_seg; s++)
        for (int h = 0; h < g[s].nblk; h++, H++) {
            /* rounded in the lane layout's order, then permuted with tbl (indices ≥ 64 read the
             * second half) */
            uint8x16x4_t lo, hi;
            uint8x16_t *dst[8] = {&lo.val[0], &lo.val[1], &lo.val[2], &lo.val[3], &hi.val[0], &hi.val[1], &hi.val[2], &hi.val[3]};
            for (int v = 0; v < 8; v++) {
                const float *src = q + 128 * H + 16 * v;
                int16x8_t a = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src), inv))),
                                           vmovn_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src + 4), inv))));
                int16x8_t b = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src + 8), inv))),
                                           vmovn_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src + 12), inv))));
                *dst[v] = vreinterpretq_u8_s8(vcombine_s8(vmovn_s16(a), vmovn_s16(b))); /* |q̂| ≤ 127 */
            }
            for (int v = 0; v < 8; v++) {
                uint8x16_t ix = vld1q_u8(g[s].perm + 16 * v);
                uint8x16_t r = vqtbx4q_u8(vqtbl4q_u8(lo, ix), hi, vsubq_u8(ix, vdupq_n_u8(64)));
                vst1q_u8((uint8_t *)out + 128 * H + 16 * v, r);
            }
        }
    *beta = mx / 127.0f;
    return 1;
}

#define ND_RUN 64 /* records per pass of the score kernel */
/* Record t's block h against four queries (q[j]: the block's bytes of query j): part[t] as
 * nd_score_run says (init: the first contribution). full: nd_full, a constant per call site, so
 * that whole blocks take no branch for the copy of a partial one. */
static inline __attribute__((always_inline)) void nd_score_record(const ndseg *g, const uint8_t *base, size_t rb, int t,
                                                                  int h, int full, const int8_t *const q[4],
                                                                  int32x4_t *part, int init, int B, int P, int nr) {
    uint8_t blk[64], prev;
    const uint8_t *b = nd_block(g, base + (size_t)t * rb + g->off, h, full, blk, &prev, B, P);
    const int w = B + P;
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) { /* nr: 8, or 4 for a half block of 2 or 4 bits */
        int8x16_t c = vreinterpretq_s8_u8(nd_lookup(g->ts, nd_idx(b, prev, r, B, P), w));
        a0 = vdotq_s32(a0, c, vld1q_s8(q[0] + 16 * r));
        a1 = vdotq_s32(a1, c, vld1q_s8(q[1] + 16 * r));
        a2 = vdotq_s32(a2, c, vld1q_s8(q[2] + 16 * r));
        a3 = vdotq_s32(a3, c, vld1q_s8(q[3] + 16 * r));
    }
    int32x4_t sum = vpaddq_s32(vpaddq_s32(a0, a1), vpaddq_s32(a2, a3));
    part[t] = init ? sum : vaddq_s32(part[t], sum);
}

/* Index vector r < 4 of one or two quarter blocks of 2 bits (8 bytes each: v holds them in its
 * halves, zeros or another record in the second): the codes or their windows, the byte
 * before each record's first code zero (the start state). */
static inline __attribute__((always_inline)) uint8x16_t nd_idx_q2(uint8x16_t v, int r, int P) {
    const int s = 2 * r - P;
    if (s >= 0) return nd_bits(v, v, s, 2 + P);
    uint8x16_t before = vsetq_lane_u8(0, vextq_u8(vdupq_n_u8(0), v, 15), 8);
    return nd_bits(before, v, 8 + s, 2 + P);
}

/* Two records per index vector (bytes 0–7 of each: record t, then t + 1) against the queries'
 * bytes 0–7 of each vector in both halves: lanes 0–1 of a sum record t, lanes 2–3 record t + 1.
 * B = 3: a half block's 24 bytes each (nd_pair3), eight vectors; B = 2: a quarter's 8 bytes each
 * (nd_idx_q2), four. */
static inline __attribute__((always_inline)) void nd_score_pairs(const ndseg *g, const uint8_t *base, size_t rb, int n,
                                                                 const int8_t *const q[4], int32x4_t *part, int init,
                                                                 int B, int P) {
    const int nr = B == 3 ? 8 : 4;
    _Alignas(16) int8_t qd[4][8][16];
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < nr; r++) {
            int8x8_t lo = vld1_s8(q[k] + 16 * r);
            vst1q_s8(qd[k][r], vcombine_s8(lo, lo));
        }
    for (int t = 0; t < n; t += 2) {
        const int two = t + 1 < n; /* else the last record pairs with itself, its twin dropped */
        const uint8_t *ra = base + (size_t)t * rb + g->off, *rb2 = two ? ra + rb : ra;
        const uint8x16x3_t tp = B == 3 ? nd_pair3(ra, rb2) : (uint8x16x3_t){{vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)}};
        const uint8x16_t v = B == 3 ? vdupq_n_u8(0) : vcombine_u8(vld1_u8(ra), vld1_u8(rb2));
        int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            uint8x16_t ix = B == 3 ? nd_idx3(tp, 0, r, P, 1) : nd_idx_q2(v, r, P);
            int8x16_t c = vreinterpretq_s8_u8(nd_lookup(g->ts, ix, B + P));
            a0 = vdotq_s32(a0, c, vld1q_s8(qd[0][r]));
            a1 = vdotq_s32(a1, c, vld1q_s8(qd[1][r]));
            a2 = vdotq_s32(a2, c, vld1q_s8(qd[2][r]));
            a3 = vdotq_s32(a3, c, vld1q_s8(qd[3][r]));
        }
        /* [q0 t, q0 t+1, q1 t, q1 t+1] and the same for q2, q3 */
        int32x4_t x01 = vpaddq_s32(a0, a1), x23 = vpaddq_s32(a2, a3);
        int32x4_t sa = vuzp1q_s32(x01, x23), sb = vuzp2q_s32(x01, x23);
        part[t] = init ? sa : vaddq_s32(part[t], sa);
        if (two) part[t + 1] = init ? sb : vaddq_s32(part[t + 1], sb);
    }
}

/* nd_score_run for a segment with g->half (one block): 2 and 4 bits, index vectors 0–3 of each
 * record (its bytes only); 3 bits, two records per vector (nd_score_pairs). */
static inline __attribute__((always_inline)) void nd_score_half(const ndseg *g, const uint8_t *base, size_t rb, int n,
                                                                const int8_t *const q[4], int32x4_t *part, int init,
                                                                int B, int P) {
    if (B != 3) {
        for (int t = 0; t < n; t++) nd_score_record(g, base, rb, t, 0, 1, q, part, init, B, P, 4);
        return;
    }
    nd_score_pairs(g, base, rb, n, q, part, init, 3, P);
}

/* nd_score_run for a segment with g->quarter (one block of 32 coordinates): 4 bits, index
 * vectors 0–1 of each record (its 16 bytes); 3 bits, four records per vector (12 bytes each,
 * nd_quad3) against the queries' bytes 0–3 of every vector in each word: lane m of a sum record
 * t + m; 2 bits, two records per vector (8 bytes each, nd_score_pairs). */
static inline __attribute__((always_inline)) void nd_score_quarter(const ndseg *g, const uint8_t *base, size_t rb,
                                                                   int n, const int8_t *const q[4], int32x4_t *part,
                                                                   int init, int B, int P) {
    if (B == 4) {
        for (int t = 0; t < n; t++) nd_score_record(g, base, rb, t, 0, 1, q, part, init, B, P, 2);
        return;
    }
    if (B == 3) { /* four records per vector (nd_quad3) against the queries' bytes 0–3 */
        int32x4_t qd[4][8];
        for (int k = 0; k < 4; k++)
            for (int r = 0; r < 8; r++) {
                int32_t w;
                memcpy(&w, q[k] + 16 * r, 4);
                qd[k][r] = vdupq_n_s32(w);
            }
        for (int t = 0; t < n; t += 4) {
            const int cnt = n - t < 4 ? n - t : 4; /* a short last step repeats its last record */
            const uint8_t *rr[4];
            for (int m = 0; m < 4; m++) rr[m] = base + (size_t)(t + (m < cnt ? m : cnt - 1)) * rb + g->off;
            const uint8x16x3_t tq = nd_quad3(rr);
            int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                int8x16_t c = vreinterpretq_s8_u8(nd_lookup(g->ts, nd_idx3(tq, 0, r, P, 2), 3 + P));
                a0 = vdotq_s32(a0, c, vreinterpretq_s8_s32(qd[0][r]));
                a1 = vdotq_s32(a1, c, vreinterpretq_s8_s32(qd[1][r]));
                a2 = vdotq_s32(a2, c, vreinterpretq_s8_s32(qd[2][r]));
                a3 = vdotq_s32(a3, c, vreinterpretq_s8_s32(qd[3][r]));
            }
            /* a_k lane m: record t + m, query k → per record its four queries */
            int64x2_t b0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1)), b1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1));
            int64x2_t b2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3)), b3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
            int32x4_t rs[4] = {vreinterpretq_s32_s64(vzip1q_s64(b0, b2)), vreinterpretq_s32_s64(vzip1q_s64(b1, b3)),
                               vreinterpretq_s32_s64(vzip2q_s64(b0, b2)), vreinterpretq_s32_s64(vzip2q_s64(b1, b3))};
            for (int m = 0; m < cnt; m++) part[t + m] = init ? rs[m] : vaddq_s32(part[t + m], rs[m]);
        }
        return;
    }
    nd_score_pairs(g, base, rb, n, q, part, init, 2, P);
}

/* Segment g of n records (record t at base + t·rb) against four queries (qp[j], code order,
 * this segment's blocks from H0): part[t] lane j = (first ? 0 : part[t] lane j) + the int32
 * products of query j. (Two records per pass, one load of each query vector for both, counted
 * more instructions: GCC spills.) */
static inline __attribute__((always_inline)) void nd_score_run(const ndseg *g, const uint8_t *base, size_t rb, int n,
                                                               const int8_t *const qp[4], int H0,
                                                               int32x4_t *part, int first, int B, int P) {
    if (B >= 2 && (g->half || g->quarter)) {
        const size_t o = 128 * (size_t)H0;
        const int8_t *q[4] = {qp[0] + o, qp[1] + o, qp[2] + o, qp[3] + o};
        if (g->half) nd_score_half(g, base, rb, n, q, part, first, B, P);
        else nd_score_quarter(g, base, rb, n, q, part, first, B, P);
        return;
    }
    for (int h = 0; h < g->nblk; h++) {
        const size_t o = 128 * (size_t)(H0 + h);
        const int8_t *q[4] = {qp[0] + o, qp[1] + o, qp[2] + o, qp[3] + o};
        const int init = first && h == 0;
        if (nd_full(g, h))
            for (int t = 0; t < n; t++) nd_score_record(g, base, rb, t, h, 1, q, part, init, B, P, 8);
        else
            for (int t = 0; t < n; t++) nd_score_record(g, base, rb, t, h, 0, q, part, init, B, P, 8);
    }
}

/* Calls FN(args…, B, P) with the segment's width and window kind as constants (each its own
 * specialized loop; nd_setup refuses any other). */
#define ND_BY_WIDTH(g, FN, ...)                                                                     \
    switch ((g)->B * 8 + (g)->P) {                                                                  \
    case 32: FN(__VA_ARGS__, 4, 0); break;                                                          \
    case 33: FN(__VA_ARGS__, 4, 1); break;                                                          \
    case 36: FN(__VA_ARGS__, 4, 4); break;                                                          \
    case 24: FN(__VA_ARGS__, 3, 0); break;                                                          \
    case 25: FN(__VA_ARGS__, 3, 1); break;                                                          \
    case 27: FN(__VA_ARGS__, 3, 3); break;                                                          \
    case 16: FN(__VA_ARGS__, 2, 0); break;                                                          \
    case 17: FN(__VA_ARGS__, 2, 1); break;                                                          \
    case 18: FN(__VA_ARGS__, 2, 2); break;                                                          \
    default: FN(__VA_ARGS__, 1, 0); break;                                                          \
    }

static void nd_score_dispatch(const ndseg *g, const uint8_t *base, size_t rb, int n, const int8_t *const qp[4],
                              int H0, int32x4_t *part, int first) {
    ND_BY_WIDTH(g, nd_score_run, g, base, rb, n, qp, H0, part, first)
}

/* The float kernels for what the integer path leaves: attn_neon.c's lanes (which take trellis
 * codes of tables of more than 32 values row by row themselves). */
static int nd_float_scores(const tq_record *x, const uint8_t *rec, int nk, const float *q, size_t qs, int nq,
                           float *S, size_t ss) {
    return tq_attn_kernels_neon()->score_turbo_lanes(x, rec, nk, q, qs, nq, S, ss, TQ_ATTN_NO_AHEAD);
}
static int nd_float_accum(const tq_record *x, const uint8_t *rec, int nk, const float *p, size_t ps, int nq,
                          float *acc, size_t as) {
    return tq_attn_kernels_neon()->accum_turbo_lanes(x, rec, nk, p, ps, nq, acc, as, TQ_ATTN_NO_AHEAD);
}

/* What the scores of a call make of its queries before reading a record, kept so that calls on
 * many pages of records reuse it (tq_attn_kernels.prep_turbo_lanes): the segment state and, per
 * group of four queries, q̂ in code order and α·β. */
typedef struct nd_qgroup {
    int fin;            /* 0: a query of the group is not finite (the float kernels take it) */
    float ab[4];
    const int8_t *qp[4]; /* kl bytes each (absent queries: the first's) */
} nd_qgroup;
typedef struct nd_qprep {
    int ok, kl;
    float alpha;
    ndseg g[2];
    nd_qgroup grp[]; /* (nq + 3) / 4, then each group's bytes */
} nd_qprep;

#define ND_GROUP_BYTES(kl) (4 * ((size_t)(kl) + 16))

static size_t nd_prep_bytes(const tq_record *x, int nq) {
    int kl = tq_record_lanes(x), ng = (nq + 3) / 4;
    if (nq <= 0 || kl <= 0) return 0;
    return 16 + sizeof(nd_qprep) + (size_t)ng * (sizeof(nd_qgroup) + ND_GROUP_BYTES(kl));
}

static nd_qprep *nd_prep_at(void *mem) { return (nd_qprep *)(((uintptr_t)mem + 15) & ~(uintptr_t)15); }

static int nd_prep_turbo_lanes(const tq_record *x, const float *q, size_t qs, int nq, void *mem) {
    nd_qprep *P = nd_prep_at(mem);
    P->kl = tq_record_lanes(x);
    P->ok = nd_setup(x, P->g, &P->alpha);
    if (!P->ok) return 1;
    const int kl = P->kl, ng = (nq + 3) / 4;
    uint8_t *bytes = (uint8_t *)(void *)(P->grp + ng);
    for (int j = 0; j < nq; j += 4) {
        nd_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        int8_t *qb[4];
        float beta[4];
        uint8_t *b = bytes + (size_t)(j / 4) * ND_GROUP_BYTES(kl);
        for (int k = 0; k < 4; k++) qb[k] = (int8_t *)(((uintptr_t)(b + (size_t)k * ((size_t)kl + 16)) + 15) & ~(uintptr_t)15);
        G->fin = 1;
        for (int k = 0; k < m4 && G->fin; k++)
            G->fin = nd_quant_query(x, P->g, q + (size_t)(j + k) * qs, kl, qb[k], &beta[k]);
        if (!G->fin) continue;
        /* absent heads (a last group of fewer than four) repeat the first; their sums are dropped */
        for (int k = 0; k < 4; k++) {
            int kk = k < m4 ? k : 0;
            G->qp[k] = qb[kk];
            G->ab[k] = P->alpha * beta[kk];
        }
    }
    return 1;
}

/* score_turbo_lanes on queries prepared by nd_prep_turbo_lanes (q, qs: the same queries, for
 * the float kernels where the integer path cannot go). */
static int nd_score_prepared(const tq_record *x, const uint8_t *rec, int nk, const void *mem, const float *q,
                             size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    const nd_qprep *P = nd_prep_at((void *)(uintptr_t)mem);
    if (!P->ok) return nd_float_scores(x, rec, nk, q, qs, nq, S, ss);
    const ndseg *g = P->g;
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        const nd_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        if (!G->fin) {
            ok &= nd_float_scores(x, rec, nk, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss);
            continue;
        }
        const int8_t *const *qp = G->qp;
        const float *ab = G->ab;
        for (int t0 = 0; t0 < nk; t0 += ND_RUN) {
            int n = nk - t0 < ND_RUN ? nk - t0 : ND_RUN;
            const uint8_t *base = rec + (size_t)t0 * x->rec_bytes;
            int32x4_t part[ND_RUN];
            float sc[ND_RUN];
            int H0 = 0;
            for (int s = 0; s < x->n_seg; s++) {
                nd_score_dispatch(&g[s], base, x->rec_bytes, n, qp, H0, part, s == 0);
                H0 += g[s].nblk;
            }
            for (int t = 0; t < n; t++) sc[t] = nd_scale(x, base + (size_t)t * x->rec_bytes, &ok);
            /* four tokens at a time: token rows (lane j: head j) scaled, transposed to head rows */
            int t = 0;
            for (; t + 4 <= n; t += 4) {
                float32x4_t r0 = vmulq_n_f32(vcvtq_f32_s32(part[t]), sc[t]), r1 = vmulq_n_f32(vcvtq_f32_s32(part[t + 1]), sc[t + 1]),
                            r2 = vmulq_n_f32(vcvtq_f32_s32(part[t + 2]), sc[t + 2]), r3 = vmulq_n_f32(vcvtq_f32_s32(part[t + 3]), sc[t + 3]);
                float32x4_t e0 = vtrn1q_f32(r0, r1), o0 = vtrn2q_f32(r0, r1), e1 = vtrn1q_f32(r2, r3), o1 = vtrn2q_f32(r2, r3);
                float32x4_t hr[4] = {
                    vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(e0), vreinterpretq_f64_f32(e1))),
                    vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(o0), vreinterpretq_f64_f32(o1))),
                    vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(e0), vreinterpretq_f64_f32(e1))),
                    vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(o0), vreinterpretq_f64_f32(o1)))};
                for (int k = 0; k < m4; k++) vst1q_f32(S + (size_t)(j + k) * ss + (size_t)(t0 + t), vmulq_n_f32(hr[k], ab[k]));
            }
            for (; t < n; t++) {
                float o[4];
                vst1q_f32(o, vmulq_f32(vmulq_n_f32(vcvtq_f32_s32(part[t]), sc[t]), vld1q_f32(ab)));
                for (int k = 0; k < m4; k++) S[(size_t)(j + k) * ss + (size_t)(t0 + t)] = o[k];
            }
        }
    }
    return ok;
}

/* One call: the queries prepared four at a time on the stack, then scored. */
static int nd_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *q, size_t qs,
                                int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    _Alignas(16) unsigned char mem[16 + sizeof(nd_qprep) + sizeof(nd_qgroup) + ND_GROUP_BYTES(128 * ND_MAX_BLOCKS)];
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        nd_prep_turbo_lanes(x, q + (size_t)j * qs, qs, m4, mem);
        ok &= nd_score_prepared(x, rec, nk, mem, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss, ahead);
    }
    return ok;
}

/* ---- values: acc_j += Σ_t p_j[t] · row_t, weights in uint8 ----
 *
 * Per group of ND_GROUP tokens and head j, ŵ = round(w / γ_j) (w = p · scale, γ_j = the group's
 * largest w / 255). Four tokens' index vectors r of a block are looked up in the biased table
 * (128 + ĉ) and transposed 4 × 4 (two rounds of zips): each int32 lane then holds the four
 * tokens' bytes of one coordinate, and one udot by element against the four tokens' weights of a
 * head (one word of a vector that holds the four heads' words) adds Σ_m ŵ_m (ĉ_m + 128) (exact in
 * uint32). Per group the sums, times α·γ_j, are added to a float buffer in code order, which the
 * end of the call adds to acc in the lane layout, less the bias: 128 · Σ ŵ of each group times
 * its α·γ_j, the same for every coordinate, summed over the groups once (the float sums carry
 * it: their rounding, ~2^-24 of 128·α·Σw, stays far inside the bound). */
#define ND_GROUP 32
#define ND_CALL 256

/* Tokens [0, nt) (a multiple of 4) of index vector r, block h (token t's block at bp + t·bs,
 * the byte before it at bp + t·bs − 1 for h > 0): a[j][q] += their udot sums. */
static inline __attribute__((always_inline)) void nd_accum_quads(const ndseg *g, const uint8_t *bp, size_t bs, int nt,
                                                                 const uint8_t *W, int h, int r, uint32x4_t a[4][4],
                                                                 int B, int P, int half3, int q2) {
    const int w = B + P;
    if (B == 3 && q2) { /* a quarter of 3 bits: four tokens in one index vector — their 12 bytes
                         * each in a row (bp, staged by nd_accum_seg), one vld3q as nd_quad3
                         * gives them —, its bytes 4m + i (token m, code i < 4) transposed to
                         * 4i + m */
        static const uint8_t tr4[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
        const uint8x16_t tix = vld1q_u8(tr4);
        for (int t = 0; t < nt; t += 4) {
            uint8x16_t y = vqtbl1q_u8(nd_lookup(g->tu, nd_idx3(vld3q_u8(bp + 12 * (size_t)t), 0, r, P, 2), w), tix);
            const uint8x16_t wv = vld1q_u8(W + 4 * (size_t)t);
            a[0][0] = vdotq_laneq_u32(a[0][0], y, wv, 0);
            a[1][0] = vdotq_laneq_u32(a[1][0], y, wv, 1);
            a[2][0] = vdotq_laneq_u32(a[2][0], y, wv, 2);
            a[3][0] = vdotq_laneq_u32(a[3][0], y, wv, 3);
        }
        return;
    }
    for (int t = 0; t < nt; t += 4) {
        uint8x16_t xv[4];
        for (int m = 0; m < 4; m++) {
            const uint8_t *b = bp + (size_t)(t + m) * bs;
            /* half3 (a half block of 3 bits): its 24 bytes only, codes in bytes 0–7; q2 (a quarter
             * of 2 bits; of 3 bits above): its 8 bytes only, in bytes 0–7 */
            uint8x16_t ix = half3 ? nd_idx3(nd_pair3(b, b), 0, r, P, 0)
                            : q2  ? nd_idx_q2(vcombine_u8(vld1_u8(b), vdup_n_u8(0)), r, P)
                                  : nd_idx(b, P && h ? b[-1] : 0, r, B, P);
            xv[m] = nd_lookup(g->tu, ix, w);
        }
        uint8x16_t z01l = vzip1q_u8(xv[0], xv[1]), z01h = vzip2q_u8(xv[0], xv[1]);
        uint8x16_t z23l = vzip1q_u8(xv[2], xv[3]), z23h = vzip2q_u8(xv[2], xv[3]);
        uint16x8_t l01 = vreinterpretq_u16_u8(z01l), h01 = vreinterpretq_u16_u8(z01h);
        uint16x8_t l23 = vreinterpretq_u16_u8(z23l), h23 = vreinterpretq_u16_u8(z23h);
        uint8x16_t y[4] = {vreinterpretq_u8_u16(vzip1q_u16(l01, l23)), vreinterpretq_u8_u16(vzip2q_u16(l01, l23)),
                           vreinterpretq_u8_u16(vzip1q_u16(h01, h23)), vreinterpretq_u8_u16(vzip2q_u16(h01, h23))};
        /* the four heads' weights of tokens t … t + 3: word j = head j; udot by element */
        const uint8x16_t wv = vld1q_u8(W + 4 * (size_t)t);
        for (int q = 0; q < (half3 || q2 ? 2 : 4); q++) { /* half3, q2: y[2], y[3] hold no code */
            a[0][q] = vdotq_laneq_u32(a[0][q], y[q], wv, 0);
            a[1][q] = vdotq_laneq_u32(a[1][q], y[q], wv, 1);
            a[2][q] = vdotq_laneq_u32(a[2][q], y[q], wv, 2);
            a[3][q] = vdotq_laneq_u32(a[3][q], y[q], wv, 3);
        }
    }
}

/* One segment over n tokens (a multiple of 4; records r0 + t·rb), four heads: F[j] (code order,
 * this segment's blocks from H0) += α·γ · the biased sums, group by group. A partial block (the
 * last of a segment whose count is not a multiple of 128) is copied once per group, with the
 * byte before it, to a zero-padded stage that the eight index vectors then read. */
#define ND_STAGE 80 /* stage stride: the byte before the block at 15, the block at 16 */
static inline __attribute__((always_inline)) void nd_accum_seg(const ndseg *g, const uint8_t *r0, size_t rb, int n,
                                                               const uint8_t *W, const float (*ag)[ND_CALL / ND_GROUP],
                                                               int H0, float (*F)[128 * ND_MAX_BLOCKS], int B, int P) {
    _Alignas(16) uint8_t stage[ND_GROUP * ND_STAGE];
    /* a half block (ndseg.half) is read in place: index vectors 0–3 (2, 4 bits) or its 24
     * bytes (3 bits), nothing past its bytes; a quarter (ndseg.quarter) likewise: index vectors
     * 0–1 (4 bits), 0–3 of its 8 bytes (2 bits) or four tokens' 12 bytes in each (3 bits) */
    const int half = B >= 2 && g->half, half3 = half && B == 3, quarter = B >= 2 && g->quarter,
              q2 = quarter && B <= 3;
    const int nr = quarter ? (B == 4 ? 2 : B == 3 ? 8 : 4) : half && !half3 ? 4 : 8;
    for (int h = 0; h < g->nblk; h++) {
        const int full = nd_full(g, h) || half || quarter;
        const size_t at = (size_t)h * 16 * (size_t)B;
        for (int t0 = 0; t0 < n; t0 += ND_GROUP) {
            int nt = (t0 + ND_GROUP < n ? t0 + ND_GROUP : n) - t0, gi = t0 / ND_GROUP;
            const uint8_t *bp = r0 + (size_t)t0 * rb + g->off + at;
            size_t bs = rb;
            if (quarter && B == 3) { /* the tokens' 12 bytes in a row (nd_accum_quads) */
                for (int t = 0; t < nt; t++) {
                    const uint8_t *src = bp + (size_t)t * rb;
                    memcpy(stage + 12 * (size_t)t, src, 8);
                    memcpy(stage + 12 * (size_t)t + 8, src + 8, 4);
                }
                bp = stage, bs = 12;
            } else if (!full) {
                for (int t = 0; t < nt; t++) {
                    uint8_t *d = stage + (size_t)t * ND_STAGE, prev;
                    nd_block(g, r0 + (size_t)(t0 + t) * rb + g->off, h, 0, d + 16, &prev, B, P);
                    d[15] = prev;
                }
                bp = stage + 16, bs = ND_STAGE;
            }
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                uint32x4_t a[4][4];
                for (int j = 0; j < 4; j++)
                    for (int q = 0; q < 4; q++) a[j][q] = vdupq_n_u32(0);
                if (half3) nd_accum_quads(g, bp, bs, nt, W + 4 * (size_t)t0, h, r, a, B, P, 1, 0);
                else if (q2) nd_accum_quads(g, bp, bs, nt, W + 4 * (size_t)t0, h, r, a, B, P, 0, 1);
                else nd_accum_quads(g, bp, bs, nt, W + 4 * (size_t)t0, h, r, a, B, P, 0, 0);
                for (int j = 0; j < 4; j++) {
                    float *f = F[j] + 128 * (size_t)(H0 + h) + 16 * (size_t)r;
                    for (int q = 0; q < 4; q++)
                        vst1q_f32(f + 4 * q, vfmaq_n_f32(vld1q_f32(f + 4 * q), vcvtq_f32_u32(a[j][q]), ag[j][gi]));
                }
            }
        }
    }
}

/* A[perm[i]] += F[i] − bias for a block (nd_perm[B]): F's vectors 16r + 4q hold code positions
 * 4q … 4q + 3 of index vector r. B = 1, 3: the identity. B = 4: lane i' of vector (r, q) goes
 * to 32i' + 16(r mod 2) + 4⌊r/2⌋ + q, a 4 × 4 transpose per r. B = 2: to 64(i' mod 2) +
 * 16(r mod 4) + 8⌊r/4⌋ + 2q + ⌊i'/2⌋, the even / odd lanes of vector pairs (uzp). */
static void nd_flush(int B, const float *F, float *A, float bias) {
    const float32x4_t vb = vdupq_n_f32(bias);
    if (B != 2 && B != 4) {
        for (int i = 0; i < 128; i += 4) vst1q_f32(A + i, vaddq_f32(vld1q_f32(A + i), vsubq_f32(vld1q_f32(F + i), vb)));
        return;
    }
    for (int r = 0; r < 8; r++) {
        const float *f = F + 16 * r;
        float32x4_t v0 = vld1q_f32(f), v1 = vld1q_f32(f + 4), v2 = vld1q_f32(f + 8), v3 = vld1q_f32(f + 12);
        float32x4_t o[4];
        int at[4];
        if (B == 4) {
            float32x4_t e0 = vtrn1q_f32(v0, v1), o0 = vtrn2q_f32(v0, v1), e1 = vtrn1q_f32(v2, v3), o1 = vtrn2q_f32(v2, v3);
            o[0] = vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(e0), vreinterpretq_f64_f32(e1)));
            o[1] = vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(o0), vreinterpretq_f64_f32(o1)));
            o[2] = vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(e0), vreinterpretq_f64_f32(e1)));
            o[3] = vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(o0), vreinterpretq_f64_f32(o1)));
            for (int i = 0; i < 4; i++) at[i] = 32 * i + 16 * (r & 1) + 4 * (r >> 1);
        } else {
            o[0] = vuzp1q_f32(v0, v1), o[1] = vuzp1q_f32(v2, v3); /* lanes i' = 0, 2 */
            o[2] = vuzp2q_f32(v0, v1), o[3] = vuzp2q_f32(v2, v3); /* lanes i' = 1, 3 */
            int c = 16 * (r & 3) + 8 * (r >> 2);
            at[0] = c, at[1] = c + 4, at[2] = 64 + c, at[3] = 64 + c + 4;
        }
        for (int i = 0; i < 4; i++) vst1q_f32(A + at[i], vaddq_f32(vld1q_f32(A + at[i]), vsubq_f32(o[i], vb)));
    }
}

static void nd_accum_dispatch(const ndseg *g, const uint8_t *r0, size_t rb, int n, const uint8_t *W,
                              const float (*ag)[ND_CALL / ND_GROUP], int H0, float (*F)[128 * ND_MAX_BLOCKS]) {
    ND_BY_WIDTH(g, nd_accum_seg, g, r0, rb, n, W, ag, H0, F)
}

static int nd_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *p, size_t ps,
                                int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    ndseg g[2];
    float alpha;
    int kl = tq_record_lanes(x);
    if (!nd_setup(x, g, &alpha)) return nd_float_accum(x, rec, nk, p, ps, nq, acc, as);
    size_t rb = x->rec_bytes;
    int ok = 1;
    float sc[ND_CALL];
    _Alignas(16) uint8_t W[4 * ND_CALL]; /* ŵ of token quad u, head k, token m at 16u + 4k + m */
    float ag[4][ND_CALL / ND_GROUP];
    int32_t ws[4][ND_CALL / ND_GROUP];
    _Alignas(16) float F[4][128 * ND_MAX_BLOCKS];
    for (int c0 = 0; c0 < nk; c0 += ND_CALL) {
        int n = nk - c0 < ND_CALL ? nk - c0 : ND_CALL, nfull = n / 4 * 4;
        const uint8_t *r0 = rec + (size_t)c0 * rb;
        for (int t = 0; t < n; t++) sc[t] = nd_scale(x, r0 + (size_t)t * rb, &ok);
        for (int j = 0; j < nq; j += 4) {
            int m4 = nq - j < 4 ? nq - j : 4, fin = 1;
            /* ŵ of the four heads over the whole quads [0, nfull) (absent heads: 0), eight at a
             * time (a group is a multiple of 8 tokens but for the last, a multiple of 4) */
            for (int k = 0; k < 4; k++)
                for (int g0 = 0; g0 < nfull; g0 += ND_GROUP) {
                    int gn = nfull - g0 < ND_GROUP ? nfull - g0 : ND_GROUP;
                    const float *pk = p + (size_t)(j + (k < m4 ? k : 0)) * ps + (size_t)(c0 + g0);
                    const float32x4_t zero = vdupq_n_f32(k < m4 ? 1.0f : 0.0f); /* absent heads: 0 */
                    float32x4_t wv[ND_GROUP / 4], m = vdupq_n_f32(0.0f);
                    uint32x4_t good = vdupq_n_u32(~0u);
                    for (int i = 0; i < gn / 4; i++) {
                        wv[i] = vmulq_f32(vmulq_f32(vld1q_f32(pk + 4 * i), vld1q_f32(sc + g0 + 4 * i)), zero);
                        /* w ∈ [0, FLT_MAX]: fails for NaN, ±Inf and negatives */
                        good = vandq_u32(good, vandq_u32(vcgeq_f32(wv[i], vdupq_n_f32(0.0f)), vcleq_f32(wv[i], vdupq_n_f32(3.4e38f))));
                        m = vmaxq_f32(m, wv[i]);
                    }
                    if (vminvq_u32(good) == 0) fin = 0;
                    float mx = fin ? vmaxvq_f32(m) : 0.0f;
                    float32x4_t inv = vdupq_n_f32(mx > 0.0f ? 255.0f / mx : 0.0f);
                    uint32_t sum = 0;
                    for (int i = 0; i < gn / 4; i++) {
                        uint32x4_t u = vminq_u32(vcvtnq_u32_f32(vmulq_f32(wv[i], inv)), vdupq_n_u32(255));
                        uint8x8_t b = vmovn_u16(vcombine_u16(vmovn_u32(u), vdup_n_u16(0)));
                        vst1_lane_u32((uint32_t *)(void *)&W[4 * (g0 + 4 * i) + 4 * k], vreinterpret_u32_u8(b), 0);
                        sum += vaddvq_u32(u);
                    }
                    ws[k][g0 / ND_GROUP] = (int32_t)sum;
                    ag[k][g0 / ND_GROUP] = alpha * (mx / 255.0f);
                }
            if (!fin) {
                ok &= nd_float_accum(x, r0, n, p + (size_t)j * ps + (size_t)c0, ps, m4, acc + (size_t)j * as, as);
                continue;
            }
            for (int k = 0; k < 4; k++) memset(F[k], 0, sizeof(float) * (size_t)kl);
            int H0 = 0;
            for (int s = 0; s < x->n_seg; s++) {
                nd_accum_dispatch(&g[s], r0, rb, nfull, W,
                                  (const float(*)[ND_CALL / ND_GROUP])ag, H0, F);
                H0 += g[s].nblk;
            }
            /* code order → lane layout, less the bias: Σ over the groups of α·γ · 128 · Σ ŵ, the
             * same for every coordinate */
            for (int k = 0; k < m4; k++) {
                float *A = acc + (size_t)(j + k) * as, bias = 0.0f;
                for (int g0 = 0; g0 < nfull; g0 += ND_GROUP) bias += ag[k][g0 / ND_GROUP] * (float)(128 * ws[k][g0 / ND_GROUP]);
                int H = 0;
                for (int s = 0; s < x->n_seg; s++)
                    for (int h = 0; h < g[s].nblk; h++, H++) nd_flush(g[s].B, F[k] + 128 * H, A + 128 * H, bias);
            }
            /* the last n % 4 tokens: the float kernel */
            if (n % 4)
                ok &= nd_float_accum(x, r0 + (size_t)nfull * rb, n - nfull, p + (size_t)j * ps + (size_t)(c0 + nfull), ps, m4,
                                     acc + (size_t)j * as, as);
        }
    }
    return ok;
}

static tq_attn_kernels nd_table;
static pthread_once_t nd_once = PTHREAD_ONCE_INIT;

static void nd_init(void) {
    for (int B = 1; B <= 4; B++)
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 16; i++) {
                int c = nd_pos(B, r, i); /* coordinate 8l + k of the block */
                nd_perm[B][16 * r + i] = (uint8_t)(16 * (c % 8) + c / 8);
            }
    nd_table = *tq_attn_kernels_neon();
    nd_table.name = "neon-dot";
    nd_table.score_turbo_lanes = nd_score_turbo_lanes;
    nd_table.lanes_prep_bytes = nd_prep_bytes;
    nd_table.prep_turbo_lanes = nd_prep_turbo_lanes;
    nd_table.score_turbo_lanes_prepared = nd_score_prepared;
    nd_table.accum_turbo_lanes = nd_accum_turbo_lanes;
    nd_table.trellis_lanes = 1 << 2 | 1 << 3 | 1 << 4;
}

const tq_attn_kernels *tq_attn_kernels_neon_dot(void) {
#if defined(ND_BASELINE)
    /* the whole build targets the dot products: the CPUs it runs on have them */
#elif defined(__linux__) && defined(HWCAP_ASIMDDP)
    if (!(getauxval(AT_HWCAP) & HWCAP_ASIMDDP)) return NULL;
#else
    return NULL; /* no way to ask the CPU */
#endif
    pthread_once(&nd_once, nd_init);
    return &nd_table;
}

#else

const tq_attn_kernels *tq_attn_kernels_neon_dot(void) { return NULL; }

#endif

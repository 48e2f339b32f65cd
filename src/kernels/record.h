/*
 * The description of one stored record, as every kernel reads it: the format, the bytes, and
 * for a TurboQuant record its segments (packed index words), bit widths, centroids, norm and
 * PROD parts (doc/format.md). The codec fills it for TurboQuant records (tq_codec_describe in
 * src/codec_record.h), the block formats for f16 / q8_0 / q4_0 (tq_record_plain in blockq.h;
 * q8_0r / q4_0r are q8_0 / q4_0 records with a rotation beside them, `rot`); the KV cache
 * keeps one per K and V of a layer and hands it to the kernels with plain pointers. A plain
 * struct: no kernel needs anything above this layer.
 */
#ifndef TQ_KERNELS_RECORD_H
#define TQ_KERNELS_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "turboquant.h"

typedef struct tq_record {
    tq_kv_format format;
    int dim;
    size_t rec_bytes; /* bytes of one record */
    int row_floats;   /* floats of a decoded row in the scoring basis: dim, or for TURBO
                         tq_codec_query_floats (2·dim with PROD) */
    /* TQ_KV_TURBO (one codec unit: fixed or block split) */
    tq_codec *codec; /* the codec that filled this description and owns its rotation(s); the
                        kernels never read it; NULL for the other formats */
    /* Q8_0 / Q4_0 of a rotated format (TQ_KV_Q8_0R / Q4_0R, kv_records.c): the records hold
     * the blocks of R·v, and rows decode to the rotated basis; the kernels never read it;
     * NULL for the plain formats and TURBO */
    tq_rotation *rot;
    int block;       /* TQ_SPLIT_BLOCK: channels in the first block (segment 0); else 0 */
    int n_seg;
    struct {
        int start, count, bits; /* rotated coordinates [start, start + count) at bits */
        size_t off;             /* byte offset of the packed words in a record */
        const float *centroids; /* ×√dim */
        const float *pairs;     /* trellis-coded indices (kernels/trellis.h): the pair table
                                   (×√dim), and centroids unused; NULL otherwise */
        int pair_memory;        /* with pairs: a value depends on the index and the top
                                   log2(pair_memory) bits of the one before (2^bits: all of it;
                                   2: a two-state table, src/trellis_tables.h); else 0 */
    } seg[2];
    size_t norm_off;
    int norm_f32;
    int prod;
    size_t sign_off, gamma_off;
    float inv_sqrt_dim; /* row scale: 1 for keys (rows in the prepared query's basis), 1/√dim
                           for values (the reconstruction) */
    float prod_scale;   /* √(π/2)/dim */
} tq_record;

/* The one validity rule for a stored norm: what an encoder can store is finite, non-negative
 * and at most 2^66 (√FLT_MAX ≈ 2^64 for the input norm, times at most 2 for norm correction);
 * anything else (NaN fails) is corruption, and the bound keeps every decoded value finite.
 * PROD's γ = ‖u − ĉ‖ is at most 1 + ‖ĉ‖ < 6. */
#define TQ_RECORD_NORM_MAX 0x1p66f
#define TQ_RECORD_GAMMA_MAX 8.0f
static inline int tq_record_norm_ok(float n) { return n >= 0.0f && n <= TQ_RECORD_NORM_MAX; }
static inline int tq_record_gamma_ok(float g) { return g >= 0.0f && g <= TQ_RECORD_GAMMA_MAX; }

/* The stored norm (or γ) at byte p of a record of x (fp16 or f32, little-endian). */
static inline float tq_record_load_norm(const tq_record *x, const uint8_t *p) {
    if (x->norm_f32) {
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return tq_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* 1 if x is a TURBO MSE record (no PROD sketch) whose segments are all of ≤ 4 bits: the
 * records with a lane layout (tq_record_lanes), whatever their indices. */
static inline int tq_record_small_turbo(const tq_record *x) {
    if (x->format != TQ_KV_TURBO || x->prod || x->n_seg < 1) return 0;
    for (int s = 0; s < x->n_seg; s++)
        if (x->seg[s].bits > 4) return 0;
    return 1;
}

/* 1 if some segment of x holds trellis-coded indices (kernels/trellis.h). */
static inline int tq_record_trellis(const tq_record *x) {
    for (int s = 0; s < x->n_seg; s++)
        if (x->seg[s].pairs) return 1;
    return 0;
}

/* The values the codes of segment s stand for — its centroids (2^bits), or the pair values of
 * trellis codes (4^bits) — and their count in *n. */
static inline const float *tq_record_seg_values(const tq_record *x, int s, int *n) {
    int B = x->seg[s].bits;
    *n = x->seg[s].pairs ? 1 << (2 * B) : 1 << B;
    return x->seg[s].pairs ? x->seg[s].pairs : x->seg[s].centroids;
}

/* A trellis segment's window (kernels/trellis.h): the value of a code depends on it and on the
 * top P bits of the code before, P = log2 pair_memory (1 for the two-state tables, bits for the
 * free ones); 0 for plain codes. Window w = (code << P) | those bits, of bits + P bits. */
static inline int tq_record_window_bits(const tq_record *x, int s) {
    int P = 0;
    while (x->seg[s].pairs && P < 30 && (1 << P) < x->seg[s].pair_memory) P++;
    return P;
}

/* Window w of a trellis segment of B bits and P window bits → its entry in the pair table,
 * (code << B) | (the P bits << (B − P)). */
static inline int tq_record_window_entry(int B, int P, int w) {
    return ((w >> P) << B) | ((w & ((1 << P) - 1)) << (B - P));
}

/* The largest |value| of segment s (tq_record_seg_values), or −1 if one is above 3.4e38 or not
 * finite: the scale the integer kernels round the values by. On the bits: |v| as an unsigned
 * integer orders as |v| does (NaNs above every finite value), so the maximum is one integer
 * reduction the compiler vectorizes (the integer kernels set up per call, and a 4-bit trellis
 * table has 256 values: a scalar loop over them was most of a call's setup). */
static inline float tq_record_seg_absmax(const tq_record *x, int s) {
    int n;
    const float *v = tq_record_seg_values(x, s, &n);
    const float lim = 3.4e38f;
    uint32_t m = 0, ulim;
    memcpy(&ulim, &lim, 4);
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        u &= 0x7FFFFFFFu;
        m = u > m ? u : m;
    }
    if (m > ulim) return -1.0f;
    float f;
    memcpy(&f, &m, 4);
    return f;
}

/* The largest |value| over every segment of x, −1 if one is not finite. */
static inline float tq_record_absmax(const tq_record *x) {
    float m = 0.0f;
    for (int s = 0; s < x->n_seg; s++) {
        float a = tq_record_seg_absmax(x, s);
        if (a < 0.0f) return -1.0f;
        m = a > m ? a : m;
    }
    return m;
}

/* 1 if the fused TURBO kernels of Lloyd-Max indices (score_turbo / accum_turbo, and the lane
 * kernels where tq_record_lanes(x) > 0) handle x: a small TURBO record (≤ 16 centroids: one
 * vpermps register) without trellis codes. Trellis-coded records take the lane kernels of a
 * table with trellis_lanes (attn_kernels.h, tq_attn_reads_lanes) or the tile. */
static inline int tq_attn_fused_turbo(const tq_record *x) {
    return tq_record_small_turbo(x) && !tq_record_trellis(x);
}

/* The lane layout of a TURBO record, for kernels that read 8 codes per 32-bit lane: within a
 * segment of B ≤ 4 bits and a count that is a multiple of 8, coordinate c = 128h + 8l + k
 * (block h, lane l < 16, round k < 8) has its index in bits [B(8l + k), B(8l + k) + B) of the
 * block's 16B bytes, so lane l of a vector of 16 lanes (bytes [Bl, Bl + B) of the block) yields
 * the eight rounds by shifts of B. A row in lane layout puts coordinate c of segment s at
 * base_s + 128h + 16k + l (base_s = 128 · the blocks of earlier segments); positions of a
 * partial last block's absent lanes are padding (zero in queries, ignored in sums).
 * Returns the floats of a lane-layout row, 0 when x has no lane layout. */
static inline int tq_record_lanes(const tq_record *x) {
    if (!tq_record_small_turbo(x)) return 0;
    int n = 0;
    for (int s = 0; s < x->n_seg; s++) {
        if (x->seg[s].count % 8) return 0;
        n += (x->seg[s].count + 127) / 128 * 128;
    }
    return n;
}
/* Natural (scoring-basis) row of x->dim floats ↔ lane-layout row of tq_record_lanes(x) floats
 * (record.c); to_lanes zeroes the padding. */
void tq_record_to_lanes(const tq_record *x, const float *in, float *out);
void tq_record_from_lanes(const tq_record *x, const float *in, float *out);

#endif

/*
 * Decode attention in integers on AVX2 without VNNI — key scores and value sums — on the lane
 * layout (record.h, tq_record_lanes). The same arithmetic as the AVX-512 VNNI kernels
 * (attn_vnni.c) with the byte dot product of AVX2: vpmaddubsw (unsigned × signed bytes, pairs
 * summed in int16, saturating) then vpmaddwd by ones (pairs of int16 summed in int32). So that
 * vpmaddubsw can never saturate, the centroids are rounded to 7 bits instead of 8:
 * ĉ = round(c / α), α = the largest |centroid| of the tensor / 63 (every segment of a split
 * record the same α, as with VNNI), |ĉ| ≤ 63.
 * Compiled with -mavx2 -mfma -mf16c.
 *
 * Codes → bytes, per 128-coordinate block (16 lanes × 8 rounds) into four vectors of 32 bytes:
 * B = 4 and 2 by masks and shifts of the raw bytes, B = 3 by spreading each lane's 3 bytes to
 * a dword, then per dword one round of four lanes (a vpshufb picks the byte that holds it —
 * from the dwords shifted right by 2 for the rounds that straddle bytes — and a vpsrlvd moves
 * it to bit 0); then a vpshufb looks the 3 or 4-bit index up in a 16-entry table of ĉ. The
 * order of the 128 bytes is fixed per layout (i8_pos); queries are put in that order, value
 * sums are put back in lane order at the end of a call. Segments of 1 bit take the float
 * kernels.
 *
 * Trellis codes (kernels/trellis.h) of 2 to 4 bits: each byte gets the window of its code —
 * the 2B bits of the stream that end with it (the code and the one before) — and the window is
 * looked up in the 4^B pair values. B = 2: code k ≥ 1's window lies in its byte (bits 2k − 2
 * … 2k + 1: a 16-bit shift and a mask), code 0's is the byte's low 2 bits above the top 2 of
 * the byte before (the block shifted up one byte): the order of plain 2-bit codes, one vpshufb
 * lookup each. B = 3: per lane its 3 bytes and the byte before (the dword D; the code of
 * round r at bit 8 + 3r, its window at bit 5 + 3r), a vpshufb gathers for each (lane, round) the
 * 16-bit word of D that holds the window, vpmulhuw by 2^(16 − shift) moves it to bit 0 (AVX2
 * has no per-word shift), masked to 6 bits and packed to bytes; the 64-entry lookup is four
 * vpshufb and three vpblendvb (on bits 4 and 5 of the window). B = 4: a high nibble's window is
 * its byte, a low nibble's the byte with the byte before shifted in (plain 4-bit codes' order);
 * the 256-entry lookup uses the table's antisymmetry, ĉ[255 − w] = −ĉ[w]: eight vpshufb and
 * seven vpblendvb on w or 255 − w, then the sign (i8_lookup256). The first block's window reads
 * a zero code before the segment, as the encoder does. The 3- and 4-bit tables of trellis=2
 * are two-state ones (doc/codec.md, "Two-state tables"; the record's pair_memory 2, T = 2): a value is
 * U[2c + top bit of the code before], the window's top B + 1 bits, so the same windows are
 * looked up shorter — B = 3: the window shifted right by 2 into one vpshufb of 16 values;
 * B = 4: the code itself into two vpshufb, one vpblendvb on the previous code's top bit
 * (i8_lookup2s: no window built); trellis=1's
 * free tables keep the long lookups. Where the integer path cannot go,
 * trellis codes take the float rows (trellis_rows.h, trellis_rows_scores / trellis_rows_accum).
 *
 * Scores: q̂ = round(q / β), β = max|q| / Q per query row (Q = I8_QLEV: 63, or 127 with
 * AVX-VNNI), the table holds ĉ + 64 ∈ [1, 127]:
 *   ⟨q, row⟩ ≈ scale · α · β · (Σ (ĉ_i + 64) · q̂_i − 64 · Σ q̂_i),
 * vpmaddubsw pairs ≤ 2·127·63, two slices' pairs summed in int16 ≤ 32004 < 2^15;
 * error at most scale · Σ_i (β/2 · |c_i| + α/2 · |q_i| + α·β/4). A record of two half or two
 * quarter blocks (the key split and the fractional widths at d 64 and 128, Lloyd-Max codes or
 * the default's trellis codes: i8_two_blocks) is read in one pass over both segments, its scores converted once per record
 * (i8_score_run2) and its values summed in the same quad slots; others a pass per segment.
 * Values: w_t = p_t · scale_t rounded per group of 32 tokens to ŵ ∈ [0, 255] (γ = the group's
 * largest w / 255), four tokens' bytes of one coordinate brought together by a 4 × 4 byte
 * transpose, one broadcast dword of their weights: pairs ≤ 2·255·63 < 2^15; error per
 * coordinate at most Σ_t (γ_t/2 · |c_ti| + (w_t + γ_t/2) · α/2) (c in row units / scale).
 * tests/test_attention.c holds both to these bounds. A query or weight that is not finite (or a
 * negative weight) sends its group of four queries to the float kernels (attn_avx2.c), as
 * TQ_INT8_SCORES=0 sends everything.
 */
#include "attn_kernels.h"

/* attn_avxvnni.c compiles this file again with I8_AVXVNNI 1 (and -mavxvnni): the one byte dot
 * product is then vpdpbusd on 256-bit vectors (AVX-VNNI), everything else the same. */
#ifndef I8_AVXVNNI
#define I8_AVXVNNI 0
#endif

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && \
    (!I8_AVXVNNI || defined(__AVXVNNI__))

#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "attn_simd.h"

/* acc (8 × int32) += Σ of four adjacent u8 × s8 products: vpmaddubsw + vpmaddwd by ones (pairs
 * ≤ 2^15 by the ranges above: no saturation), or one vpdpbusd with AVX-VNNI. */
#if I8_AVXVNNI
#define I8_DPBUSD(acc, u, s) ((acc) = _mm256_dpbusd_avx_epi32((acc), (u), (s)))
#else
#define I8_DPBUSD(acc, u, s) \
    ((acc) = _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))))
#endif

/* Query levels of the scores: q̂ ∈ [−I8_QLEV, I8_QLEV]. Without VNNI, 7 bits: a vpmaddubsw pair
 * is then ≤ 2·127·63, so the pairs of two 32-byte slices add in int16 (≤ 32004) before one
 * vpmaddwd — five instructions per two slices instead of six. VNNI keeps 8 bits. */
#define I8_QLEV (I8_AVXVNNI ? 127 : 63)

/* acc += the byte dot products of (u0, s0) and (u1, s1): two I8_DPBUSD, or without VNNI the
 * two vpmaddubsw summed in int16 (the 7-bit queries above keep it exact). */
#if I8_AVXVNNI
#define I8_DPBUSD2(acc, u0, s0, u1, s1) (I8_DPBUSD(acc, u0, s0), I8_DPBUSD(acc, u1, s1))
#else
#define I8_DPBUSD2(acc, u0, s0, u1, s1)                                                                   \
    ((acc) = _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16((u0), (s0)),   \
                                                                         _mm256_maddubs_epi16((u1), (s1))), \
                                                       _mm256_set1_epi16(1))))
#endif

/* Unrolling a hot loop for GCC; clang 14 builds with the sanitizers (the fuzz build) take
 * minutes more per file with it, so clang leaves the loops as they are. */
#if defined(__clang__)
#define I8_UNROLL(n)
#else
#define I8_PRAGMA(x) _Pragma(#x)
#define I8_UNROLL(n) I8_PRAGMA(GCC unroll n)
#endif

#define I8_MAX_BLOCKS 9 /* 128-coordinate blocks of a lane row: head dims ≤ 1024, 2 segments */
#define I8_GROUP 32     /* tokens whose value weights share one γ */
#define I8_CALL 256     /* tokens per value pass */
#define I8_AHEAD 16     /* records prefetched ahead (a prefetch never faults) */

/* Byte orders of a decoded block (i8_pos): plain codes of B = 2, 3, 4 bits (trellis codes of 2
 * bits share B = 2's, of 4 bits B = 4's), trellis codes of 3 bits, and the partial last blocks
 * decoded into fewer vectors (i8_part_byte): a half block (64 coordinates) of 2-bit codes, a
 * quarter (32) of 2-, 3- and 4-bit codes and of 3-bit trellis codes (QT3). */
#define I8_LAYOUT_T3 5
#define I8_LAYOUT_H2 6
#define I8_LAYOUT_Q2 7
#define I8_LAYOUT_Q3 8
#define I8_LAYOUT_Q4 9
#define I8_LAYOUT_QT3 10
#define I8_LAYOUTS 11

static int i8_pos(int L, int p);

/* A partial layout's decoded byte p → the byte of the whole block's layout (i8_part_base) it
 * holds, −1 for padding. H2: the 16 bytes in both halves of two vectors (vector v, half k: the
 * whole block's vector 2v + k). Q4, Q3 and QT3: one vector, half k the whole block's vector k.
 * Q2: one vector of four 8-byte runs, run j the whole block's vector 0, 2, 1, 3. */
static int i8_part_byte(int L, int p) {
    static const int q2[4] = {0, 2, 1, 3};
    if (L == I8_LAYOUT_H2) return p < 64 ? 32 * (2 * (p / 32) + p % 32 / 16) + p % 16 : -1;
    if (L == I8_LAYOUT_Q2) return p < 32 ? 32 * q2[p / 8] + p % 8 : -1;
    return p < 32 ? 32 * (p / 16) + p % 16 : -1; /* Q3, Q4, QT3 */
}
static int i8_part_base(int L) {
    return L == I8_LAYOUT_Q4 ? 4 : L == I8_LAYOUT_Q3 ? 3 : L == I8_LAYOUT_QT3 ? I8_LAYOUT_T3 : 2;
}

/* A partial layout's lane positions: its bytes' (i8_part_byte), then the padding in the order
 * of the whole block's bytes left over (a permutation of 0..127, as every layout's). */
static int i8_part_pos(int L, int p) {
    int w = i8_part_byte(L, p), base = i8_part_base(L);
    if (w >= 0) return i8_pos(base, w);
    int pad = p, used[128] = {0};
    for (int i = 0; i < 128; i++) {
        int u = i8_part_byte(L, i);
        if (u >= 0) used[u] = 1, pad--;
    }
    for (w = 0; w < 128; w++)
        if (!used[w] && pad-- == 0) break;
    return i8_pos(base, w);
}

/* Lane-layout position (16·round + lane) inside its block of decoded byte p (0..127) of a
 * block of layout L (B = 2, 3, 4 or I8_LAYOUT_T3), as i8_decode leaves them. */
static int i8_pos(int L, int p) {
    int v = p / 32, b = p % 32, lane, round;
    if (L >= I8_LAYOUT_H2) return i8_part_pos(L, p);
    switch (L) {
    case 4: lane = 8 * (v / 2) + b / 4, round = 2 * (b % 4) + v % 2; break;
    case 2: lane = b / 2, round = 4 * (b % 2) + v; break;
    case I8_LAYOUT_T3: { /* vector v: group pair v/2, rounds 4(v%2)…+3; half: group; byte c */
        int c = b % 16;
        lane = 4 * (2 * (v / 2) + b / 16) + c % 4;
        round = 4 * (v % 2) + c / 4;
        break;
    }
    default: { /* 3: vector v = P/Q of group pair v/2; half: group; dword r; byte: lane */
        static const int kP[4] = {0, 1, 3, 4}, kQ[4] = {2, 5, 6, 7};
        int half = b / 16, r = b % 16 / 4, i = b % 4;
        lane = 4 * (2 * (v / 2) + half) + i;
        round = v % 2 ? kQ[r] : kP[r];
        break;
    }
    }
    return 16 * round + lane;
}

/* Quad slot layout of the value pass: per block, slot 4c + r of 32 bytes (8 dwords d) holds the
 * four tokens of decoded byte 32c + 16(d / 4) + 4r + d % 4 (the 4 × 4 byte transpose). */
static inline int i8_slot_byte(int slot, int d) { return 32 * (slot / 4) + 16 * (d / 4) + 4 * (slot % 4) + d % 4; }

/* How the value pass's sums reach the lane layout, per layout (i8_init checks each against
 * i8_pos): slot s (4q + s') of a block holds the four tokens of eight decoded bytes d
 * (i8_slot_byte), whose lane positions are
 *   I8_RUNS  the eight from that of d = 0 on (B = 3, 3-bit trellis): the sums go there at once;
 *   I8_T4X4  base_q + s' + 32(d % 4) + 4⌊d / 4⌋ (B = 4): per four slots a 4 × 4 transpose in
 *            each 128-bit half;
 *   I8_PAIRS base_q + 2s' + 64(d % 2) + ⌊d / 2⌋ % 2 + 8⌊d / 4⌋ (B = 2): per four slots a pair
 *            shuffle, an unpack of float pairs and a swap of halves;
 *   I8_SCALAR any other (the partial layouts but H2, whose slots are pairs): one position at a
 *            time, by a table (once per call of up to 256 tokens).
 * i8_slot_tab[L][s]: where slot s's sums go in F (I8_RUNS: their lane position; else 8s); 
 * i8_base_tab[L][q]: base_q. Filled once, i8_init. */
enum { I8_RUNS, I8_T4X4, I8_PAIRS, I8_SCALAR };
static uint8_t i8_pos_tab[I8_LAYOUTS][128], i8_slot_tab[I8_LAYOUTS][16], i8_base_tab[I8_LAYOUTS][4];
static uint8_t i8_back_tab[I8_LAYOUTS][128]; /* I8_SCALAR: F[i] → A[i8_back_tab[L][i]] */
static int i8_back_kind[I8_LAYOUTS];

/* A segment's last block: whole (128 coordinates), half (64: i8_decode's first two vectors
 * hold them all; B = 2 in its own order I8_LAYOUT_H2), quarter (32: i8_decode's first vector,
 * I8_LAYOUT_Q2..Q4, 3-bit trellis codes I8_LAYOUT_QT3) or another part (loads stop at its
 * bytes). */
enum { I8_PART, I8_WHOLE, I8_HALF, I8_QUARTER };

typedef struct iseg {
    float alpha;      /* the centroid step: the tensor's largest |centroid| (pair value) / 63 */
    __m256i tab_u[8]; /* entry e (both halves): 64 + ĉ[e mod 2^B] (scores: the unsigned operand);
                         3-bit trellis: 64 + ĉ[16k + e] in tab_u[k], the 64 pair values */
    __m256i tab_s[8]; /* ĉ, likewise (values: the signed operand); 4-bit trellis: ĉ[16k + e],
                         the first 128 of the 256 pair values (the rest: their negatives);
                         tied trellis (T = 2): the 16 (3-bit) or 32 (4-bit) values U[j] in
                         tab_[us][j / 16] */
    int B, T, nblk;   /* T: trellis codes; 2: tied ones (a two-state table, below) */
    int last;         /* the last block: I8_WHOLE, I8_HALF, I8_QUARTER or I8_PART */
    size_t off, bytes;
    int L;                /* the layout of whole blocks (i8_pos) */
    int lastL;            /* the last block's: L, or a partial layout */
    const uint8_t *pos;   /* i8_pos(L, ·) */
    const uint8_t *lastpos; /* i8_pos(lastL, ·) */
} iseg;

/* Runs the statement macro M(B, T) with the segment's width and kind as constants (each its own
 * specialized loop). */
#define I8_BY_WIDTH(g, M)           \
    switch (4 * (g)->T + (g)->B) {  \
    case 4: M(4, 0); break;         \
    case 3: M(3, 0); break;         \
    case 2: M(2, 0); break;         \
    case 8: M(4, 1); break;         \
    case 7: M(3, 1); break;         \
    case 12: M(4, 2); break;        \
    case 11: M(3, 2); break;        \
    default: M(2, 1); break;        \
    }

/* A pair of segments' widths and kinds as one number (I8_BY_PAIR). */
#define I8_PAIR_KEY4(B0, T0, B1, T1) ((((B0) * 4 + (T0)) * 8 + (B1)) * 4 + (T1))
#define I8_PAIR_KEY(g) I8_PAIR_KEY4((g)[0].B, (g)[0].T, (g)[1].B, (g)[1].T)

/* The pairs read in one pass, X(M, B0, T0, B1, T1) (M: passed along): the key split 4 + 2, turbo2.5's 3 + 2,
 * turbo3.5's 4 + 3, each of Lloyd-Max codes or of the default's trellis codes (the two-state
 * tables at 3 and 4 bits, the 2-bit table: one or two registers). */
#define I8_PAIRS(X, M) \
    X(M, 4, 0, 2, 0) X(M, 3, 0, 2, 0) X(M, 4, 0, 3, 0) X(M, 4, 2, 2, 1) X(M, 3, 2, 2, 1) X(M, 4, 2, 3, 2)

/* 1 if x's records are read in one pass over both segments (i8_score_run2, i8_accum_block with
 * B1): two segments of one block each, both a half or both a quarter block — the key split and
 * the fractional widths at d 64 and 128 — of a pair I8_PAIRS has. At whole blocks (d 256) and
 * with the free 3- and 4-bit tables (four and eight registers) the one pass measured slower
 * than two (the decoders' constants and tables spill: AVX2 has 16 vector registers). */
static int i8_two_blocks(const tq_record *x, const iseg *g) {
    if (x->n_seg != 2 || g[0].nblk != 1 || g[1].nblk != 1 || g[0].last != g[1].last ||
        (g[0].last != I8_HALF && g[0].last != I8_QUARTER))
        return 0;
#define I8_PAIR_CASE(M, B0, T0, B1, T1) case I8_PAIR_KEY4(B0, T0, B1, T1):
    switch (I8_PAIR_KEY(g)) {
    I8_PAIRS(I8_PAIR_CASE, _)
        return 1;
    default:
        return 0;
    }
#undef I8_PAIR_CASE
}

/* Runs the statement macro M(B0, T0, B1, T1) with the two segments' widths and kinds as
 * constants, for a pair of I8_PAIRS (i8_two_blocks). */
#define I8_PAIR_RUN(M, B0, T0, B1, T1) case I8_PAIR_KEY4(B0, T0, B1, T1): M(B0, T0, B1, T1); break;
#define I8_BY_PAIR(g, M)                   \
    switch (I8_PAIR_KEY(g)) {              \
    I8_PAIRS(I8_PAIR_RUN, M)               \
    default: break;                        \
    }

/* The segments' state; 0 if some segment has 1 bit, a value that is not finite, only zero
 * values, or 4-bit trellis values whose quantized table is not antisymmetric (then the float
 * kernels). */
static int iseg_setup(const tq_record *x, iseg *g) {
    for (int s = 0; s < x->n_seg; s++)
        if (x->seg[s].bits < 2 || x->seg[s].bits > 4) return 0;
    /* One α for every segment (the largest |value| of the tensor), so that the int32 sums of a
     * record's segments add before one conversion (i8_score_run2). */
    float m = tq_record_absmax(x);
    if (!(m > 0.0f)) return 0; /* not finite (−1), or only zeros */
    for (int s = 0; s < x->n_seg; s++) g[s].alpha = m / 63.0f;
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits, T = x->seg[s].pairs != NULL, nv = T ? 1 << (2 * B) : 1 << B;
        int L = T && B == 3 ? I8_LAYOUT_T3 : B;
        const float *val = T ? x->seg[s].pairs : x->seg[s].centroids;
        /* a two-state table (record.h, pair_memory 2): the value of c after p is
         * U[2c + (p >> (B − 1))], the B + 1 stream bits that end with c */
        if (T && B > 2 && x->seg[s].pair_memory == 2) T = 2, nv = 2 << B;
        /* ĉ = round(v / α) (to nearest even, as lrintf), |ĉ| ≤ 63; 16 entries per register, the
         * registers the decode reads: 1 (plain codes, 2-bit trellis, tied 3-bit), 2 (tied
         * 4-bit), 4 (3-bit), 8 (4-bit) */
        _Alignas(32) int8_t ts[256];
        _Alignas(32) float vs[256];
        int ne = nv > 16 ? nv : 16;
        for (int e = 0; e < ne; e++) {
            int j = e & (nv - 1);
            /* two-state, U[c][b] (b: the top bit of the code before) is the pair
             * (c, b · 2^(B−1)): at 3 bits entry j = 2c + b (the window's top four bits), at 4
             * bits j = c + 16b (register b, the code its index: i8_lookup2s) */
            vs[e] = T != 2  ? val[j]
                    : B == 4 ? val[((j & 15) << B) + ((j >> 4) << (B - 1))]
                             : val[(j >> 1 << B) + ((j & 1) << (B - 1))];
        }
        /* ĉ = round(v / α), 8 at a time: vcvtps2dq rounds to nearest even, as lrintf (the
         * 256-entry tables of 4-bit free trellis codes are rounded per call) */
        const __m256 va = _mm256_set1_ps(g[s].alpha);
        for (int e = 0; e < ne; e += 8) {
            __m256i w = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_load_ps(vs + e), va)); /* |ĉ| ≤ 63 */
            __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storel_epi64((__m128i *)(void *)(ts + e), _mm_packs_epi16(w16, w16));
        }
        if (nv == 256) /* i8_lookup256 reads entry 255 − e as −ĉ[e] */
            for (int e = 0; e < 128; e++)
                if (ts[255 - e] != -ts[e]) return 0;
        for (int k = 0; k < ne / 16 && k < 8; k++) {
            __m128i t = _mm_loadu_si128((const __m128i *)(const void *)(ts + 16 * k));
            g[s].tab_s[k] = _mm256_broadcastsi128_si256(t);
            g[s].tab_u[k] = _mm256_broadcastsi128_si256(_mm_add_epi8(t, _mm_set1_epi8(64)));
        }
        g[s].B = B;
        g[s].T = T;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        g[s].last = x->seg[s].count % 128 == 0                     ? I8_WHOLE
                    : x->seg[s].count % 128 == 64                  ? I8_HALF
                    : x->seg[s].count % 128 == 32                  ? I8_QUARTER
                                                                   : I8_PART;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
        g[s].L = L;
        g[s].lastL = g[s].last == I8_QUARTER          ? (L == I8_LAYOUT_T3 ? I8_LAYOUT_QT3 : I8_LAYOUT_Q2 + B - 2)
                     : B == 2 && g[s].last == I8_HALF ? I8_LAYOUT_H2
                                                      : L;
        g[s].pos = i8_pos_tab[L];
        g[s].lastpos = i8_pos_tab[g[s].lastL];
    }
    return 1;
}

static int i8_prepare(const tq_record *x, iseg *g, int *kl) {
    *kl = tq_record_lanes(x);
    return *kl > 0 && *kl <= 128 * I8_MAX_BLOCKS && iseg_setup(x, g);
}

/* The 32 bytes before those of v in the stream: v shifted up one byte across the halves, byte 0
 * from `before` (the previous vector, its byte 31) or `prev` (the byte before the block). */
static inline __attribute__((always_inline)) __m256i i8_shift_in(__m256i v, __m256i before, int prev) {
    __m256i r = _mm256_alignr_epi8(v, _mm256_permute2x128_si256(before, v, 0x21), 15);
    return _mm256_or_si256(r, _mm256_setr_epi32(prev, 0, 0, 0, 0, 0, 0, 0));
}

/* The 64-entry lookup of 6-bit indices: four 16-entry vpshufb, then vpblendvb on bit 4 (moved
 * to bit 7 of its byte) and bit 5. */
static inline __attribute__((always_inline)) __m256i i8_lookup64(const __m256i *t, __m256i idx) {
    __m256i b4 = _mm256_slli_epi16(idx, 3), b5 = _mm256_slli_epi16(idx, 2);
    __m256i lo = _mm256_blendv_epi8(_mm256_shuffle_epi8(t[0], idx), _mm256_shuffle_epi8(t[1], idx), b4);
    __m256i hi = _mm256_blendv_epi8(_mm256_shuffle_epi8(t[2], idx), _mm256_shuffle_epi8(t[3], idx), b4);
    return _mm256_blendv_epi8(lo, hi, b5);
}

/* Two-state 4-bit trellis codes (T = 2): codes c (bytes 0–15) and, in each byte's bit 7, the
 * top bit b of the code before: U[c][b] from register b (two vpshufb, one vpblendvb); t:
 * tab_u or tab_s, as a plain lookup. */
static inline __attribute__((always_inline)) __m256i i8_lookup2s(const __m256i *t, __m256i c, __m256i b) {
    return _mm256_blendv_epi8(_mm256_shuffle_epi8(t[0], c), _mm256_shuffle_epi8(t[1], c), b);
}

/* The 256-entry lookup of 8-bit indices w (t: the signed table's first 128 entries), by the
 * table's antisymmetry ĉ[255 − w] = −ĉ[w] (iseg_setup checks it): w ≥ 128 looks up 255 − w
 * (w xor 0xFF) and negates; eight vpshufb, seven vpblendvb on bits 4, 5 and 6. u: + 64 (the
 * scores' unsigned operand). */
static inline __attribute__((always_inline)) __m256i i8_lookup256(const __m256i *t, __m256i w, int u) {
    __m256i m = _mm256_cmpgt_epi8(_mm256_setzero_si256(), w); /* w ≥ 128 */
    __m256i x = _mm256_xor_si256(w, m);
    __m256i b4 = _mm256_slli_epi16(x, 3), b5 = _mm256_slli_epi16(x, 2), b6 = _mm256_slli_epi16(x, 1);
#define I8_L2(a, b) _mm256_blendv_epi8(_mm256_shuffle_epi8(t[a], x), _mm256_shuffle_epi8(t[b], x), b4)
    __m256i lo = _mm256_blendv_epi8(I8_L2(0, 1), I8_L2(2, 3), b5), hi = _mm256_blendv_epi8(I8_L2(4, 5), I8_L2(6, 7), b5);
#undef I8_L2
    __m256i r = _mm256_sub_epi8(_mm256_xor_si256(_mm256_blendv_epi8(lo, hi, b6), m), m);
    return u ? _mm256_add_epi8(r, _mm256_set1_epi8(64)) : r;
}

/* Block h of a segment of B-bit codes (T: trellis codes) at p (record + segment offset) →
 * out[4], 32 bytes each, byte p of the block (i8_pos) looked up in g's tables — u: tab_u (the
 * scores'), else tab_s (tab[0]; 3-bit trellis codes: tab[0..3]; 4-bit: i8_lookup256). A
 * partial last block reads zeros past its bytes (code 0 at absent coordinates: the queries
 * are 0 there, the sums are not read). */
static inline __attribute__((always_inline)) void i8_decode(const iseg *g, const uint8_t *p, int h, int u,
                                                            __m256i out[4], int B, int T, int full, int nv) {
    const __m256i *tab = u ? g->tab_u : g->tab_s;
    size_t at = (size_t)h * 16 * (size_t)B, rest = g->bytes - at;
    /* full (a whole block; a constant where the caller knows): every load is a plain one; nv = 2
     * (a block of 64 coordinates): out[0], out[1] only (coordinates 0–63; B = 2: in the order
     * I8_LAYOUT_H2); nv = 1 (32 coordinates): out[0] only, in the order I8_LAYOUT_Q2..Q4 */
    int n = full ? 16 * B : rest < 16 * (size_t)B ? (int)rest : 16 * B;
    const uint8_t *src = p + at;
    const int prev = T && h ? src[-1] : 0; /* the stream's byte before the block */
    if (T && B == 4 && nv == 1) {
        /* A quarter (I8_LAYOUT_Q4): the low nibbles' windows (as below) in the low half,
         * the high nibbles' (the bytes) in the high half. */
        const __m128i m4 = _mm_set1_epi8(0x0F);
        __m128i v = simd_load16_upto(src, 0, n);
        __m128i vm1 = _mm_or_si128(_mm_slli_si128(v, 1), _mm_cvtsi32_si128(prev));
        if (T == 2) { /* codes: the low nibbles, then the high ones; b: bit 7 of the byte
                       * before, then the byte's bit 3 */
            __m256i c = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                                _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
            __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(vm1), _mm_slli_epi16(v, 4), 1);
            out[0] = i8_lookup2s(tab, c, b);
        } else {
            __m128i wlo = _mm_or_si128(_mm_andnot_si128(m4, _mm_slli_epi16(v, 4)), _mm_and_si128(_mm_srli_epi16(vm1, 4), m4));
            out[0] = i8_lookup256(g->tab_s, _mm256_inserti128_si256(_mm256_castsi128_si256(wlo), v, 1), u);
        }
    } else if (T && B == 4) {
        /* A high nibble's window is its byte; a low nibble's is (its nibble, the high nibble of
         * the byte before): the bytes shifted up one (byte 0: the byte before the block). */
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i v0 = simd_load32_upto(src, 0, n);
        __m256i v0m1 = i8_shift_in(v0, _mm256_setzero_si256(), prev);
#define I8_WLO(v, vm1) \
    _mm256_or_si256(_mm256_andnot_si256(m4, _mm256_slli_epi16(v, 4)), _mm256_and_si256(_mm256_srli_epi16(vm1, 4), m4))
/* two-state (T = 2): a low nibble's code with bit 7 of the byte before, a high nibble's with
 * its byte's bit 3 (shifted to bit 7) */
#define I8_LO(v, vm1) (T == 2 ? i8_lookup2s(tab, _mm256_and_si256(v, m4), vm1) : i8_lookup256(g->tab_s, I8_WLO(v, vm1), u))
#define I8_HI(v) \
    (T == 2 ? i8_lookup2s(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(v, 4)) : i8_lookup256(g->tab_s, v, u))
        out[0] = I8_LO(v0, v0m1);
        out[1] = I8_HI(v0);
        if (nv > 2) {
            __m256i v1 = simd_load32_upto(src, 32, n), v1m1 = i8_shift_in(v1, v0, 0);
            out[2] = I8_LO(v1, v1m1);
            out[3] = I8_HI(v1);
        }
#undef I8_LO
#undef I8_HI
#undef I8_WLO
    } else if (T && B == 2 && nv == 1) {
        /* A quarter (I8_LAYOUT_Q2): its 8 bytes in each quarter, the runs of codes 0, 2, 1, 3
         * of every byte, as plain codes' below; code k's window is bits [2k − 2, 2k + 2) of
         * its byte's qword: shifted left by 2 (code 0: the byte before's top two bits come
         * with it, the block's first byte's from prev), right by 2, 0, 4, masked to 4 bits. */
        __m256i v = _mm256_set1_epi64x((long long)_mm_cvtsi128_si64(_mm_loadl_epi64((const __m128i *)(const void *)src)));
        v = _mm256_srlv_epi64(_mm256_sllv_epi64(v, _mm256_setr_epi64x(2, 0, 0, 0)), _mm256_setr_epi64x(0, 2, 0, 4));
        v = _mm256_or_si256(v, _mm256_castsi128_si256(_mm_cvtsi32_si128(prev >> 6)));
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(v, _mm256_set1_epi8(0x0F)));
    } else if (T && B == 2 && nv == 2) {
        /* A half block (I8_LAYOUT_H2): code 0's windows | code 1's (out[0]), code 2's | code
         * 3's (out[1]), as a whole block's (below), of its 16 bytes */
        __m128i v = simd_load16_upto(src, 0, n);
        __m128i vm1 = _mm_or_si128(_mm_slli_si128(v, 1), _mm_cvtsi32_si128(prev));
        const __m128i m4 = _mm_set1_epi8(0x0F);
        __m128i w0 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(vm1, 6), _mm_set1_epi8(0x03)),
                                  _mm_and_si128(_mm_slli_epi16(v, 2), _mm_set1_epi8(0x0C)));
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_inserti128_si256(_mm256_castsi128_si256(w0), _mm_and_si128(v, m4), 1));
        out[1] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(v),
                                                                                _mm256_setr_epi32(2, 2, 2, 2, 4, 4, 4, 4)),
                                                              _mm256_set1_epi8(0x0F)));
    } else if (T && B == 2) {
        /* Code k's window (the code and the one before, 4 bits) of each byte: k ≥ 1 within the
         * byte, bits 2k − 2 … 2k + 1; k = 0 the byte's low 2 bits above the top 2 of the byte
         * before (the block shifted up one byte, the byte before at 0). 16-bit shifts move a
         * neighbour's bits only into the bits each mask drops. The order of plain 2-bit codes. */
        __m256i v = simd_load32_upto(src, 0, n);
        __m256i vm1 = i8_shift_in(v, _mm256_setzero_si256(), prev);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(vm1, 6), _mm256_set1_epi8(0x03)),
                                                             _mm256_and_si256(_mm256_slli_epi16(v, 2), _mm256_set1_epi8(0x0C))));
        out[1] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(v, m4));
        out[2] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v, 2), m4));
        out[3] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    } else if (T) {
        /* Loads with lane 4i + c's dword D (its byte before, its 3 bytes) at bytes 3 + 3c of the
         * half: lanes 0–3 from the byte before (three filler bytes first), 4–7 from byte 8,
         * 8–11 from 20, 12–15 from 32. Word vector m, word w of a half: round r = 2m + w/4 of
         * lane c = w % 4, D's bytes (b_r, b_r + 1), b = 0 0 1 1 2 2 2 2; shifted right by
         * 5 + 3r − 8b_r = 5 8 3 6 1 4 7 10. */
#define I8_W(r, c, b) (char)(3 + 3 * (c) + (b)), (char)(4 + 3 * (c) + (b))
#define I8_W4(r, b) I8_W(r, 0, b), I8_W(r, 1, b), I8_W(r, 2, b), I8_W(r, 3, b)
#define I8_WV(r0, b0, r1, b1) _mm256_setr_epi8(I8_W4(r0, b0), I8_W4(r1, b1), I8_W4(r0, b0), I8_W4(r1, b1))
#define I8_M(k) (short)(uint16_t)(1u << (16 - (k))) /* 2^(16 − k) as an unsigned word */
#define I8_MUL(k0, k1) _mm256_setr_epi16(I8_M(k0), I8_M(k0), I8_M(k0), I8_M(k0), I8_M(k1), I8_M(k1), I8_M(k1), I8_M(k1), \
                                         I8_M(k0), I8_M(k0), I8_M(k0), I8_M(k0), I8_M(k1), I8_M(k1), I8_M(k1), I8_M(k1))
        const __m256i c0 = I8_WV(0, 0, 1, 0), c1 = I8_WV(2, 1, 3, 1), c2 = I8_WV(4, 2, 5, 2), c3 = I8_WV(6, 2, 7, 2);
        const __m256i k0 = I8_MUL(5, 8), k1 = I8_MUL(3, 6), k2 = I8_MUL(1, 4), k3 = I8_MUL(7, 10);
#undef I8_W
#undef I8_W4
#undef I8_WV
#undef I8_MUL
#undef I8_M
        const __m256i m6 = _mm256_set1_epi16(0x3F);
#define I8_Y(c, k) _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(R, c), k), m6)
            /* tied (T = 2): the window's top four bits index the 16 values U, one vpshufb */
#define I8_L(w) (T == 2 ? _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(w, 2), _mm256_set1_epi8(0x0F))) \
                        : i8_lookup64(tab, w))
        if (nv == 1) {
            /* a quarter (I8_LAYOUT_QT3): lanes 0–3 only, rounds 0–3 in the low half (the
             * words of vector 0's), 4–7 in the high half (vector 1's) */
            __m128i lo = _mm_alignr_epi8(simd_load16_upto(src, 0, n), _mm_set1_epi8((char)prev), 12);
            __m256i R = _mm256_broadcastsi128_si256(lo);
            const __m256i ca = _mm256_permute2x128_si256(c0, c2, 0x20), cb = _mm256_permute2x128_si256(c1, c3, 0x20);
            const __m256i ka = _mm256_permute2x128_si256(k0, k2, 0x20), kb = _mm256_permute2x128_si256(k1, k3, 0x20);
            out[0] = I8_L(_mm256_packus_epi16(I8_Y(ca, ka), I8_Y(cb, kb)));
        }
        for (int v = 0; v < nv / 2; v++) {
            __m128i lo = v ? simd_load16_upto(src, 20, n)
                           : _mm_alignr_epi8(simd_load16_upto(src, 0, n), _mm_set1_epi8((char)prev), 12);
            __m128i hi = simd_load16_upto(src, v ? 32 : 8, n);
            __m256i R = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
            out[2 * v] = I8_L(_mm256_packus_epi16(I8_Y(c0, k0), I8_Y(c1, k1)));
            out[2 * v + 1] = I8_L(_mm256_packus_epi16(I8_Y(c2, k2), I8_Y(c3, k3)));
        }
#undef I8_L
#undef I8_Y
    } else if (B == 4 && nv == 1) {
        /* a quarter (I8_LAYOUT_Q4): its 16 bytes, low nibbles | high nibbles */
        __m256i v = _mm256_broadcastsi128_si256(simd_load16_upto(src, 0, n));
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                                              _mm256_set1_epi8(0x0F)));
    } else if (B == 4) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i v0 = simd_load32_upto(src, 0, n);
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(v0, m4));
        out[1] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4));
        if (nv > 2) {
            __m256i v1 = simd_load32_upto(src, 32, n);
            out[2] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(v1, m4));
            out[3] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4));
        }
    } else if (B == 2 && nv == 1) {
        /* a quarter (I8_LAYOUT_Q2): its 8 bytes in each quarter, shifted by 0, 4, 2, 6 */
        __m256i v = _mm256_set1_epi64x((long long)_mm_cvtsi128_si64(_mm_loadl_epi64((const __m128i *)(const void *)src)));
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 4, 2, 6)),
                                                              _mm256_set1_epi8(0x03)));
    } else if (B == 2 && nv == 2) {
        /* a half block (I8_LAYOUT_H2): its 16 bytes in both halves, shifted by 0 | 2
         * (out[0]) and 4 | 6 (out[1]) */
        const __m256i m2 = _mm256_set1_epi8(0x03);
        __m256i v = _mm256_broadcastsi128_si256(simd_load16_upto(src, 0, n));
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)), m2));
        out[1] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)), m2));
    } else if (B == 2) {
        const __m256i m2 = _mm256_set1_epi8(0x03);
        __m256i v = simd_load32_upto(src, 0, n);
        out[0] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(v, m2));
        out[1] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v, 2), m2));
        out[2] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v, 4), m2));
        out[3] = _mm256_shuffle_epi8(tab[0], _mm256_and_si256(_mm256_srli_epi16(v, 6), m2));
    } else {
        /* Four lanes (12 bytes) per 128-bit half: groups 0 | 1 and 2 | 3, the last loaded from
         * byte 32 (its lanes at bytes 4..15 of the half). */
        const __m256i spread01 = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                                  0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
        const __m256i spread23 = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                                  4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
        /* After the spread, lane i of a half is dword i. P: dwords = rounds 0, 1, 3, 4 (bytes
         * 0, 0, 1, 1 of each lane, shifts 0, 3, 1, 4); Q: rounds 2, 5 from the lanes shifted
         * right by 2 (bytes 0, 1, shifts 4, 5), rounds 6, 7 (byte 2, shifts 2, 5). */
        const __m256i cP = _mm256_setr_epi8(0, 4, 8, 12, 0, 4, 8, 12, 1, 5, 9, 13, 1, 5, 9, 13,
                                            0, 4, 8, 12, 0, 4, 8, 12, 1, 5, 9, 13, 1, 5, 9, 13);
        const __m256i cQs = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                             0, 4, 8, 12, 1, 5, 9, 13, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m256i cQ = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 2, 6, 10, 14, 2, 6, 10, 14,
                                            -1, -1, -1, -1, -1, -1, -1, -1, 2, 6, 10, 14, 2, 6, 10, 14);
        const __m256i shP = _mm256_setr_epi32(0, 3, 1, 4, 0, 3, 1, 4);
        const __m256i shQ = _mm256_setr_epi32(4, 5, 2, 5, 4, 5, 2, 5);
        const __m256i m3 = _mm256_set1_epi8(0x07);
        /* a quarter (nv = 1, I8_LAYOUT_Q3): group 0 in both halves, then P's low half
         * and Q's in one vector */
        for (int v = 0; v < (nv + 1) / 2; v++) {
            __m128i lo = simd_load16_upto(src, 24 * v, n);
            __m128i hi = nv == 1 ? lo : simd_load16_upto(src, v ? 32 : 12, n);
            __m256i S = _mm256_shuffle_epi8(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1),
                                            v ? spread23 : spread01);
            __m256i S2 = _mm256_srli_epi32(S, 2);
            __m256i P = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(S, cP), shP), m3);
            __m256i Q = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_or_si256(_mm256_shuffle_epi8(S2, cQs), _mm256_shuffle_epi8(S, cQ)), shQ), m3);
            if (nv == 1) {
                out[0] = _mm256_shuffle_epi8(tab[0], _mm256_permute2x128_si256(P, Q, 0x20));
                break;
            }
            out[2 * v] = _mm256_shuffle_epi8(tab[0], P);
            out[2 * v + 1] = _mm256_shuffle_epi8(tab[0], Q);
        }
    }
}

/* One query row in the lane layout (kl floats) → q̂ with each block in its segment's decoded
 * order. Sets β and bias[s] = 64 · Σ q̂ over segment s; returns 0 if a coordinate is not
 * finite. */
static int i8_quant_query(const tq_record *x, const iseg *g, const float *q, int kl, int8_t *out,
                          float *beta, int32_t *bias) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 lim = _mm256_set1_ps(3.4e38f);
    __m256 m = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < kl; i += 8) {
        __m256 v = _mm256_and_ps(_mm256_loadu_ps(q + i), absmask);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(v, lim, _CMP_NLE_UQ)); /* NaN, ±Inf */
        m = _mm256_max_ps(m, v);
    }
    if (bad) return 0;
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float mx = _mm_cvtss_f32(m4);
    float inv = mx > 0.0f ? (float)I8_QLEV / mx : 0.0f;
    int8_t qi[128 * I8_MAX_BLOCKS];
    int H = 0;
    for (int s = 0; s < x->n_seg; s++) {
        __m256i sum = _mm256_setzero_si256();
        for (int i = 128 * H; i < 128 * (H + g[s].nblk); i += 16) {
            __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_set1_ps(inv)));
            __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(q + i + 8), _mm256_set1_ps(inv)));
            sum = _mm256_add_epi32(sum, _mm256_add_epi32(a, b));
            __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
            __m128i by = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(void *)(qi + i), by);
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        bias[s] = 64 * _mm_cvtsi128_si32(s4);
        for (int h = 0; h < g[s].nblk; h++, H++) {
            const uint8_t *pos = h + 1 == g[s].nblk ? g[s].lastpos : g[s].pos;
            const int8_t *src = qi + 128 * H;
            int8_t *dst = out + 128 * H;
            /* once per call of up to a page of records, four queries: keep it a plain gather */
I8_UNROLL(16)
            for (int p = 0; p < 128; p++) dst[p] = src[pos[p]];
        }
    }
    *beta = mx / (float)I8_QLEV;
    return 1;
}

/* acc_j += the byte dot products of a decoded block (nv vectors, i8_decode) with query j's
 * bytes of that block (q[j]: 128 bytes in the block's decoded order). */
static inline __attribute__((always_inline)) void i8_dot_block(const __m256i d[4], int nv, const int8_t *const q[4],
                                                               __m256i acc[4]) {
#define I8_Q(j, o) _mm256_loadu_si256((const __m256i *)(const void *)(q[j] + (o)))
    if (nv == 1)
        for (int j = 0; j < 4; j++) I8_DPBUSD(acc[j], d[0], I8_Q(j, 0));
    for (int c = 0; c + 1 < nv; c += 2)
        for (int j = 0; j < 4; j++) I8_DPBUSD2(acc[j], d[c], I8_Q(j, 32 * c), d[c + 1], I8_Q(j, 32 * c + 32));
#undef I8_Q
}

/* The four int32 sums (hadd pairs, then the two 128-bit halves), less the bias, times α·β. */
static inline __attribute__((always_inline)) __m128 i8_reduce4(const __m256i acc[4], __m128i vbias, __m128 vab) {
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
    __m128i tot = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(tot, vbias)), vab);
}

/* One segment of n records (stride rb from rec) against four queries (qb[j]: this segment's
 * first block): P[t][j] (first segment) or P[t][j] += (vab_j · (Σ − bias_j)). */
static inline __attribute__((always_inline)) void i8_score_run(const iseg *g, const uint8_t *rec, size_t rb,
                                                               int n, const int8_t *const qb[4],
                                                               __m128i vbias, __m128 vab, float (*P)[4],
                                                               int first, int B, int T, int NB, int LAST,
                                                               simd_ahead *ah) {
    const int nblk = NB ? NB : g->nblk; /* NB: the block count when known at compile time */
    for (int t = 0; t < n; t++) {
        const uint8_t *r = rec + (size_t)t * rb + g->off;
        _mm_prefetch((const char *)(r + I8_AHEAD * rb), _MM_HINT_T0);
        if (ah) simd_ahead_step(ah, 1);
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256()};
        for (int h = 0; h < nblk; h++) {
            __m256i d[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256()}; /* nv < 4: the rest unread */
            int nv = h + 1 < nblk ? 4 : LAST == I8_HALF ? 2 : LAST == I8_QUARTER ? 1 : 4;
            i8_decode(g, r, h, 1, d, B, T, LAST == I8_WHOLE || h + 1 < nblk, nv);
            const int8_t *qh[4] = {qb[0] + 128 * (size_t)h, qb[1] + 128 * (size_t)h, qb[2] + 128 * (size_t)h,
                                   qb[3] + 128 * (size_t)h};
            i8_dot_block(d, nv, qh, acc);
        }
        __m128 v = i8_reduce4(acc, vbias, vab);
        _mm_storeu_ps(P[t], first ? v : _mm_add_ps(v, _mm_loadu_ps(P[t])));
    }
}

/* A record of two segments of one block each, both WHOLE, HALF or QUARTER (LAST), of B0 and
 * B1 bits (T0, T1: their kinds, iseg.T), n records against four queries (qb[j]: block 0, segment 0; the
 * next 128 bytes segment 1's block): both segments' products in the same int32 sums (one α),
 * one conversion per record: P[t][j] = vab_j · (Σ − bias_j), bias over both segments. */
static inline __attribute__((always_inline)) void i8_score_run2(const iseg *g, const uint8_t *rec, size_t rb,
                                                                int n, const int8_t *const qb[4], __m128i vbias,
                                                                __m128 vab, float (*P)[4], int B0, int T0, int B1,
                                                                int T1, int LAST, simd_ahead *ah) {
    const int nv = LAST == I8_HALF ? 2 : LAST == I8_QUARTER ? 1 : 4;
    const int8_t *q1[4] = {qb[0] + 128, qb[1] + 128, qb[2] + 128, qb[3] + 128};
    for (int t = 0; t < n; t++) {
        const uint8_t *r = rec + (size_t)t * rb;
        _mm_prefetch((const char *)(r + g[0].off + I8_AHEAD * rb), _MM_HINT_T0);
        if (ah) simd_ahead_step(ah, 1);
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256()};
        __m256i d[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256()}; /* nv < 4: the rest unread */
        i8_decode(&g[0], r + g[0].off, 0, 1, d, B0, T0, LAST == I8_WHOLE, nv);
        i8_dot_block(d, nv, qb, acc);
        i8_decode(&g[1], r + g[1].off, 0, 1, d, B1, T1, LAST == I8_WHOLE, nv);
        i8_dot_block(d, nv, q1, acc);
        _mm_storeu_ps(P[t], i8_reduce4(acc, vbias, vab));
    }
}

/* Where the integer path cannot go: the AVX2 float kernels, for trellis codes the float rows
 * (the float kernels do not read them). */
static int i8_float_scores(const tq_record *x, const uint8_t *rec, int nk, const float *q, size_t qs, int nq,
                           float *S, size_t ss, tq_attn_ahead ahead) {
    if (tq_record_trellis(x)) return trellis_rows_scores(x, rec, nk, q, qs, nq, S, ss, tq_record_lanes(x));
    return tq_attn_kernels_avx2()->score_turbo_lanes(x, rec, nk, q, qs, nq, S, ss, ahead);
}
static int i8_float_accum(const tq_record *x, const uint8_t *rec, int nk, const float *p, size_t ps, int nq,
                          float *acc, size_t as, tq_attn_ahead ahead) {
    if (tq_record_trellis(x)) return trellis_rows_accum(x, rec, nk, p, ps, nq, acc, as, tq_record_lanes(x));
    return tq_attn_kernels_avx2()->accum_turbo_lanes(x, rec, nk, p, ps, nq, acc, as, ahead);
}

/* What the scores of a call make of its queries before reading a record, kept so that calls on
 * many pages of records reuse it (tq_attn_kernels.prep_turbo_lanes): the segment tables and,
 * per group of four queries, q̂ in block order, its bias and α·β. */
typedef struct i8_qgroup {
    int fin;           /* 0: a query of the group is not finite (the float kernels take it) */
    __m128i vbias[2];
    __m128 vab[2];
    int8_t *qb[4];     /* kl bytes each, in the memory after the groups */
} i8_qgroup;
typedef struct i8_qprep {
    int ok, kl, nq;    /* ok 0: the record is not for the integer path (float kernels) */
    iseg g[2];
    i8_qgroup grp[];   /* (nq + 3) / 4 */
} i8_qprep;

static size_t i8_prep_bytes(const tq_record *x, int nq) {
    int kl = tq_record_lanes(x), ng = (nq + 3) / 4;
    if (nq <= 0 || kl <= 0) return 0;
    return 32 + sizeof(i8_qprep) + (size_t)ng * sizeof(i8_qgroup) + (size_t)ng * 4 * ((size_t)kl + 32);
}

static i8_qprep *i8_prep_at(void *mem) { return (i8_qprep *)(((uintptr_t)mem + 31) & ~(uintptr_t)31); }

static int i8_prep_turbo_lanes(const tq_record *x, const float *q, size_t qs, int nq, void *mem) {
    i8_qprep *P = i8_prep_at(mem);
    P->nq = nq;
    P->ok = i8_prepare(x, P->g, &P->kl);
    if (!P->ok) return 1;
    const int kl = P->kl, ng = (nq + 3) / 4;
    int8_t *bytes = (int8_t *)(void *)(P->grp + ng);
    for (int j = 0; j < nq; j += 4) {
        i8_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        float beta[4];
        int32_t bias[4][2];
        G->fin = 1;
        for (int k = 0; k < 4; k++, bytes += kl + 32) G->qb[k] = (int8_t *)(((uintptr_t)bytes + 31) & ~(uintptr_t)31);
        for (int k = 0; k < m4 && G->fin; k++)
            G->fin = i8_quant_query(x, P->g, q + (size_t)(j + k) * qs, kl, G->qb[k], &beta[k], bias[k]);
        if (!G->fin) continue;
        /* Absent queries (a last group of fewer than 4) repeat the first; their sums are dropped.
         * Per segment s: its bias and α_s·β. */
        for (int k = m4; k < 4; k++) G->qb[k] = G->qb[0];
        for (int s = 0; s < x->n_seg; s++) {
            int32_t b4[4];
            float ab[4];
            for (int k = 0; k < 4; k++) {
                int kk = k < m4 ? k : 0;
                b4[k] = bias[kk][s];
                ab[k] = P->g[s].alpha * beta[kk];
            }
            G->vbias[s] = _mm_loadu_si128((const __m128i *)(const void *)b4);
            G->vab[s] = _mm_loadu_ps(ab);
        }
    }
    return 1;
}

/* score_turbo_lanes on queries prepared by i8_prep_turbo_lanes (q, qs: the same queries, for
 * the float kernels where the integer path cannot go). */
static int i8_score_prepared(const tq_record *x, const uint8_t *rec, int nk, const void *mem, const float *q,
                             size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    const i8_qprep *P = i8_prep_at((void *)(uintptr_t)mem);
    if (!P->ok) return i8_float_scores(x, rec, nk, q, qs, nq, S, ss, ahead);
    const iseg *g = P->g;
    size_t rb = x->rec_bytes;
    simd_ahead ah = simd_ahead_init(ahead, nk);
    int ok = 1;
    float sc[I8_CALL], Pt[I8_CALL][4];
    for (int j = 0; j < nq; j += 4) {
        const i8_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        if (!G->fin) {
            ok &= i8_float_scores(x, rec, nk, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss, TQ_ATTN_NO_AHEAD);
            continue;
        }
        for (int t0 = 0; t0 < nk; t0 += I8_CALL) {
            int n = nk - t0 < I8_CALL ? nk - t0 : I8_CALL;
            const uint8_t *r0 = rec + (size_t)t0 * rb;
            ok &= simd_rec_scales_run(x, r0, n, sc);
            int H0 = 0, two = i8_two_blocks(x, g);
            if (two) {
                /* one pass over both segments, else a pass per segment */
                const int8_t *qp[4] = {G->qb[0], G->qb[1], G->qb[2], G->qb[3]};
                __m128i vb = _mm_add_epi32(G->vbias[0], G->vbias[1]);
                simd_ahead *ahp = j == 0 ? &ah : NULL;
                int half = g[0].last == I8_HALF;
#define I8_RUN2(B0, T0, B1, T1)                                                                   \
    do {                                                                                          \
        if (half) i8_score_run2(g, r0, rb, n, qp, vb, G->vab[0], Pt, B0, T0, B1, T1, I8_HALF, ahp); \
        else i8_score_run2(g, r0, rb, n, qp, vb, G->vab[0], Pt, B0, T0, B1, T1, I8_QUARTER, ahp);   \
    } while (0)
                I8_BY_PAIR(g, I8_RUN2);
#undef I8_RUN2
            }
            for (int s = 0; s < x->n_seg && !two; s++) {
                const int8_t *qp[4];
                for (int k = 0; k < 4; k++) qp[k] = G->qb[k] + 128 * H0;
                int first = s == 0, one = g[s].nblk == 1, last = g[s].last;
                simd_ahead *ahp = j == 0 && first ? &ah : NULL;
#define I8_RUN(B, T)                                                                           \
    do {                                                                                       \
        if (one && last == I8_WHOLE)                                                                     \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 1, I8_WHOLE, ahp); \
        else if (one && last == I8_HALF)                                                                 \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 1, I8_HALF, ahp); \
        else if (one && last == I8_QUARTER)                                                              \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 1, I8_QUARTER, ahp); \
        else if (one) i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 1, I8_PART, ahp); \
        else if (last == I8_WHOLE)                                                                       \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 0, I8_WHOLE, ahp); \
        else if (last == I8_HALF) /* after whole blocks: the last one in its own layout (lastL) */     \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 0, I8_HALF, ahp); \
        else if (last == I8_QUARTER)                                                                     \
            i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 0, I8_QUARTER, ahp); \
        else i8_score_run(&g[s], r0, rb, n, qp, G->vbias[s], G->vab[s], Pt, first, B, T, 0, I8_PART, ahp); \
    } while (0)
                I8_BY_WIDTH(&g[s], I8_RUN);
#undef I8_RUN
                H0 += g[s].nblk;
            }
            for (int k = 0; k < m4; k++) {
                float *o = S + (size_t)(j + k) * ss + (size_t)t0;
                for (int t = 0; t < n; t++) o[t] = Pt[t][k] * sc[t];
            }
        }
    }
    return ok;
}

/* One call: the queries prepared four at a time on the stack, then scored. */
static int i8_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *q,
                                size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    _Alignas(32) unsigned char mem[32 + sizeof(i8_qprep) + sizeof(i8_qgroup) + 4 * (128 * I8_MAX_BLOCKS + 32)];
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        if (i8_prep_bytes(x, m4) > sizeof mem) return i8_float_scores(x, rec, nk, q, qs, nq, S, ss, ahead);
        i8_prep_turbo_lanes(x, q + (size_t)j * qs, qs, m4, mem);
        ok &= i8_score_prepared(x, rec, nk, mem, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss,
                                j == 0 ? ahead : TQ_ATTN_NO_AHEAD);
    }
    return ok;
}

/* A[lane position] += F[i] for one block of F (as i8_accum_block leaves it) of layout L. */
static void i8_back_add(int L, const float *F, float *A) {
#define I8_ADD(o, v) _mm256_storeu_ps(A + (o), _mm256_add_ps(_mm256_loadu_ps(A + (o)), (v)))
    switch (i8_back_kind[L]) {
    case I8_RUNS:
        for (int i = 0; i < 128; i += 8) I8_ADD(i, _mm256_load_ps(F + i));
        break;
    case I8_T4X4:
        for (int q = 0; q < 4; q++) {
            const float *f = F + 32 * q;
            __m256 v0 = _mm256_load_ps(f), v1 = _mm256_load_ps(f + 8), v2 = _mm256_load_ps(f + 16),
                   v3 = _mm256_load_ps(f + 24);
            __m256 l01 = _mm256_unpacklo_ps(v0, v1), h01 = _mm256_unpackhi_ps(v0, v1);
            __m256 l23 = _mm256_unpacklo_ps(v2, v3), h23 = _mm256_unpackhi_ps(v2, v3);
            int b = i8_base_tab[L][q];
            I8_ADD(b, _mm256_shuffle_ps(l01, l23, 0x44));
            I8_ADD(b + 32, _mm256_shuffle_ps(l01, l23, 0xEE));
            I8_ADD(b + 64, _mm256_shuffle_ps(h01, h23, 0x44));
            I8_ADD(b + 96, _mm256_shuffle_ps(h01, h23, 0xEE));
        }
        break;
    case I8_PAIRS:
        for (int q = 0; q < 4; q++) {
            const float *f = F + 32 * q;
            /* per half: d' = 0 1 2 3 → (t, e) = 00 10 01 11; to 00 01 10 11, then pairs of t */
            __m256d p0 = _mm256_castps_pd(_mm256_permute_ps(_mm256_load_ps(f), 0xD8));
            __m256d p1 = _mm256_castps_pd(_mm256_permute_ps(_mm256_load_ps(f + 8), 0xD8));
            __m256d p2 = _mm256_castps_pd(_mm256_permute_ps(_mm256_load_ps(f + 16), 0xD8));
            __m256d p3 = _mm256_castps_pd(_mm256_permute_ps(_mm256_load_ps(f + 24), 0xD8));
            __m256d e01 = _mm256_unpacklo_pd(p0, p1), o01 = _mm256_unpackhi_pd(p0, p1);
            __m256d e23 = _mm256_unpacklo_pd(p2, p3), o23 = _mm256_unpackhi_pd(p2, p3);
            int b = i8_base_tab[L][q];
            I8_ADD(b, _mm256_castpd_ps(_mm256_permute2f128_pd(e01, e23, 0x20)));
            I8_ADD(b + 8, _mm256_castpd_ps(_mm256_permute2f128_pd(e01, e23, 0x31)));
            I8_ADD(b + 64, _mm256_castpd_ps(_mm256_permute2f128_pd(o01, o23, 0x20)));
            I8_ADD(b + 72, _mm256_castpd_ps(_mm256_permute2f128_pd(o01, o23, 0x31)));
        }
        break;
    default:
        for (int i = 0; i < 128; i++) A[i8_back_tab[L][i]] += F[i];
    }
#undef I8_ADD
}

/* One block h of one segment over n tokens (a multiple of 4; records r0 + t·rb), four
 * queries: F[j][at[slot] + d] += α·γ · the int32 sums (i8_back_add then reads F). B1 > 0:
 * merged, a record of two segments of one block each, both HALF or QUARTER (h = 0): segment
 * 1's block (B1 bits) decoded after segment 0's into the same quad slots, its sums to the
 * next block of F — one pass instead of two. */
static inline __attribute__((always_inline)) void i8_accum_block(const iseg *g, const uint8_t *r0, size_t rb,
                                                                 int n, int h,
                                                                 const uint8_t (*W)[I8_CALL],
                                                                 const float (*ag)[I8_CALL / I8_GROUP],
                                                                 float *const F[4], int B, int T, int LAST, int B1,
                                                                 int T1, simd_ahead *ah) {
    const float al = g->alpha;
    /* the decoded vectors (and slots / 4) that matter, and where the slots' sums go in F */
    const int nvs = LAST == I8_HALF ? 2 : LAST == I8_QUARTER ? 1 : 4, nv = B1 ? 2 * nvs : nvs;
    int at[16];
    for (int sl = 0; sl < 4 * nvs; sl++) {
        at[sl] = i8_slot_tab[LAST == I8_WHOLE ? g->L : g->lastL][sl];
        if (B1) at[4 * nvs + sl] = 128 + i8_slot_tab[g[1].lastL][sl];
    }
    _Alignas(32) uint8_t buf[I8_GROUP / 4][16][32];
    for (int t0 = 0; t0 < n; t0 += I8_GROUP) {
        int t1 = t0 + I8_GROUP < n ? t0 + I8_GROUP : n, nquad = (t1 - t0) / 4;
        for (int u = 0; u < nquad; u++) {
            const uint8_t *r = r0 + (size_t)(t0 + 4 * u) * rb + g->off;
            _mm_prefetch((const char *)(r + I8_AHEAD * rb), _MM_HINT_T0);
            _mm_prefetch((const char *)(r + (I8_AHEAD + 2) * rb), _MM_HINT_T0);
            if (ah) simd_ahead_step(ah, 4);
            __m256i x0[8], x1[8], x2[8], x3[8]; /* merged (B1): segment 1 from x[nvs] */
            i8_decode(g, r, h, 0, x0, B, T, LAST == I8_WHOLE, nvs);
            i8_decode(g, r + rb, h, 0, x1, B, T, LAST == I8_WHOLE, nvs);
            i8_decode(g, r + 2 * rb, h, 0, x2, B, T, LAST == I8_WHOLE, nvs);
            i8_decode(g, r + 3 * rb, h, 0, x3, B, T, LAST == I8_WHOLE, nvs);
            if (B1) {
                const uint8_t *r1 = r - g->off + g[1].off;
                i8_decode(&g[1], r1, 0, 0, x0 + nvs, B1, T1, 0, nvs);
                i8_decode(&g[1], r1 + rb, 0, 0, x1 + nvs, B1, T1, 0, nvs);
                i8_decode(&g[1], r1 + 2 * rb, 0, 0, x2 + nvs, B1, T1, 0, nvs);
                i8_decode(&g[1], r1 + 3 * rb, 0, 0, x3 + nvs, B1, T1, 0, nvs);
            }
            for (int c = 0; c < nv; c++) {
                __m256i lo01 = _mm256_unpacklo_epi8(x0[c], x1[c]), hi01 = _mm256_unpackhi_epi8(x0[c], x1[c]);
                __m256i lo23 = _mm256_unpacklo_epi8(x2[c], x3[c]), hi23 = _mm256_unpackhi_epi8(x2[c], x3[c]);
                _mm256_store_si256((__m256i *)(void *)buf[u][4 * c], _mm256_unpacklo_epi16(lo01, lo23));
                _mm256_store_si256((__m256i *)(void *)buf[u][4 * c + 1], _mm256_unpackhi_epi16(lo01, lo23));
                _mm256_store_si256((__m256i *)(void *)buf[u][4 * c + 2], _mm256_unpacklo_epi16(hi01, hi23));
                _mm256_store_si256((__m256i *)(void *)buf[u][4 * c + 3], _mm256_unpackhi_epi16(hi01, hi23));
            }
        }
        const __m256 s0 = _mm256_set1_ps(al * ag[0][t0 / I8_GROUP]), s1 = _mm256_set1_ps(al * ag[1][t0 / I8_GROUP]),
                     s2 = _mm256_set1_ps(al * ag[2][t0 / I8_GROUP]), s3 = _mm256_set1_ps(al * ag[3][t0 / I8_GROUP]);
        /* two slots at a time: eight accumulators, each weight broadcast serves both */
        for (int sl = 0; sl < 4 * nv; sl += 2) {
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
I8_UNROLL(8)
            for (int u = 0; u < nquad; u++) {
                __m256i y = _mm256_load_si256((const __m256i *)(const void *)buf[u][sl]);
                __m256i z = _mm256_load_si256((const __m256i *)(const void *)buf[u][sl + 1]);
                const float *wp = (const float *)(const void *)&W[0][t0 + 4 * u];
#define I8_ACC(acc, wv, v) I8_DPBUSD(acc, wv, v)
                __m256i w = _mm256_castps_si256(_mm256_broadcast_ss(wp));
                I8_ACC(a0, w, y);
                I8_ACC(b0, w, z);
                w = _mm256_castps_si256(_mm256_broadcast_ss(wp + I8_CALL / 4));
                I8_ACC(a1, w, y);
                I8_ACC(b1, w, z);
                w = _mm256_castps_si256(_mm256_broadcast_ss(wp + 2 * (I8_CALL / 4)));
                I8_ACC(a2, w, y);
                I8_ACC(b2, w, z);
                w = _mm256_castps_si256(_mm256_broadcast_ss(wp + 3 * (I8_CALL / 4)));
                I8_ACC(a3, w, y);
                I8_ACC(b3, w, z);
#undef I8_ACC
            }
            int oa = at[sl], ob = at[sl + 1];
            _mm256_store_ps(F[0] + oa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), s0, _mm256_load_ps(F[0] + oa)));
            _mm256_store_ps(F[1] + oa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), s1, _mm256_load_ps(F[1] + oa)));
            _mm256_store_ps(F[2] + oa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a2), s2, _mm256_load_ps(F[2] + oa)));
            _mm256_store_ps(F[3] + oa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a3), s3, _mm256_load_ps(F[3] + oa)));
            _mm256_store_ps(F[0] + ob, _mm256_fmadd_ps(_mm256_cvtepi32_ps(b0), s0, _mm256_load_ps(F[0] + ob)));
            _mm256_store_ps(F[1] + ob, _mm256_fmadd_ps(_mm256_cvtepi32_ps(b1), s1, _mm256_load_ps(F[1] + ob)));
            _mm256_store_ps(F[2] + ob, _mm256_fmadd_ps(_mm256_cvtepi32_ps(b2), s2, _mm256_load_ps(F[2] + ob)));
            _mm256_store_ps(F[3] + ob, _mm256_fmadd_ps(_mm256_cvtepi32_ps(b3), s3, _mm256_load_ps(F[3] + ob)));
        }
    }
}

static int i8_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *p,
                                size_t ps, int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    int kl;
    iseg g[2];
    if (!i8_prepare(x, g, &kl)) return i8_float_accum(x, rec, nk, p, ps, nq, acc, as, ahead);
    size_t rb = x->rec_bytes;
    simd_ahead ah = simd_ahead_init(ahead, nk);
    int ok = 1;
    float sc[I8_CALL];
    _Alignas(32) uint8_t W[4][I8_CALL];
    float ag[4][I8_CALL / I8_GROUP];
    _Alignas(32) float F[4][128 * I8_MAX_BLOCKS];
    for (int c0 = 0; c0 < nk; c0 += I8_CALL) {
        int n = nk - c0 < I8_CALL ? nk - c0 : I8_CALL;
        const uint8_t *r0 = rec + (size_t)c0 * rb;
        ok &= simd_rec_scales_run(x, r0, n, sc);
        int nfull = n / 4 * 4;
        for (int j = 0; j < nq; j += 4) {
            int m4 = nq - j < 4 ? nq - j : 4, fin = 1;
            /* ŵ of the four queries over the whole quads [0, nfull) (absent queries: 0) */
            const __m256 zero = _mm256_setzero_ps(), lim = _mm256_set1_ps(3.4e38f);
            for (int k = 0; k < 4; k++)
                for (int g0 = 0; g0 < nfull; g0 += I8_GROUP) {
                    int gn = nfull - g0 < I8_GROUP ? nfull - g0 : I8_GROUP;
                    __m256 w[I8_GROUP / 8], m = zero;
                    const float *pk = p + (size_t)(j + (k < m4 ? k : 0)) * ps + (size_t)(c0 + g0);
                    for (int i = 0; i < I8_GROUP / 8; i++) {
                        /* gn is a multiple of 4: the last vector may hold 4 tokens */
                        int cnt = gn - 8 * i;
                        __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(k < m4 ? cnt : 0),
                                                        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                        w[i] = _mm256_mul_ps(_mm256_maskload_ps(pk + 8 * i, mk), _mm256_maskload_ps(sc + g0 + 8 * i, mk));
                        /* w ∈ [0, FLT_MAX]: fails for NaN, ±Inf and negatives */
                        __m256 good = _mm256_and_ps(_mm256_cmp_ps(w[i], zero, _CMP_GE_OQ), _mm256_cmp_ps(w[i], lim, _CMP_LE_OQ));
                        if (_mm256_movemask_ps(good) != 0xFF) fin = 0;
                        m = _mm256_max_ps(m, w[i]);
                    }
                    __m128 m4v = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
                    m4v = _mm_max_ps(m4v, _mm_movehl_ps(m4v, m4v));
                    m4v = _mm_max_ss(m4v, _mm_movehdup_ps(m4v));
                    float mx = _mm_cvtss_f32(m4v);
                    __m256 inv = _mm256_set1_ps(mx > 0.0f ? 255.0f / mx : 0.0f);
                    for (int i = 0; i < I8_GROUP / 8; i++) {
                        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(w[i], inv));
                        __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
                        _mm_storel_epi64((__m128i *)(void *)&W[k][g0 + 8 * i], _mm_packus_epi16(h, h));
                    }
                    ag[k][g0 / I8_GROUP] = mx / 255.0f;
                }
            if (!fin) {
                ok &= i8_float_accum(x, r0, n, p + (size_t)j * ps + (size_t)c0, ps, m4, acc + (size_t)j * as, as,
                                     TQ_ATTN_NO_AHEAD);
                continue;
            }
            for (int k = 0; k < 4; k++) memset(F[k], 0, sizeof(float) * (size_t)kl);
            const uint8_t(*Wc)[I8_CALL] = (const uint8_t(*)[I8_CALL])W;
            const float(*agc)[I8_CALL / I8_GROUP] = (const float(*)[I8_CALL / I8_GROUP])ag;
            int H0 = 0, two = i8_two_blocks(x, g);
            if (two) {
                /* one pass over both segments, else a pass per segment and block */
                float *Fp[4] = {F[0], F[1], F[2], F[3]};
                simd_ahead *ahp = j == 0 ? &ah : NULL;
                int half = g[0].last == I8_HALF;
#define I8_BLK2(B0, T0, B1, T1)                                                                \
    do {                                                                                       \
        if (half) i8_accum_block(g, r0, rb, nfull, 0, Wc, agc, Fp, B0, T0, I8_HALF, B1, T1, ahp); \
        else i8_accum_block(g, r0, rb, nfull, 0, Wc, agc, Fp, B0, T0, I8_QUARTER, B1, T1, ahp);   \
    } while (0)
                I8_BY_PAIR(g, I8_BLK2);
#undef I8_BLK2
            }
            for (int s = 0; s < x->n_seg && !two; s++) {
                for (int h = 0; h < g[s].nblk; h++) {
                    simd_ahead *ahp = j == 0 && s == 0 && h == 0 ? &ah : NULL;
                    float *Fp[4] = {F[0] + 128 * (H0 + h), F[1] + 128 * (H0 + h), F[2] + 128 * (H0 + h),
                                    F[3] + 128 * (H0 + h)};
                    int last = h + 1 < g[s].nblk ? I8_WHOLE : g[s].last;
#define I8_BLK(B, T)                                                                                   \
    do {                                                                                               \
        if (last == I8_WHOLE) i8_accum_block(&g[s], r0, rb, nfull, h, Wc, agc, Fp, B, T, I8_WHOLE, 0, 0, ahp); \
        else if (last == I8_HALF) i8_accum_block(&g[s], r0, rb, nfull, h, Wc, agc, Fp, B, T, I8_HALF, 0, 0, ahp); \
        else if (last == I8_QUARTER) i8_accum_block(&g[s], r0, rb, nfull, h, Wc, agc, Fp, B, T, I8_QUARTER, 0, 0, ahp); \
        else i8_accum_block(&g[s], r0, rb, nfull, h, Wc, agc, Fp, B, T, I8_PART, 0, 0, ahp);                 \
    } while (0)
                    I8_BY_WIDTH(&g[s], I8_BLK);
#undef I8_BLK
                }
                H0 += g[s].nblk;
            }
            for (int k = 0; k < m4; k++) {
                float *A = acc + (size_t)(j + k) * as;
                H0 = 0;
                for (int s = 0; s < x->n_seg; s++)
                    for (int h = 0; h < g[s].nblk; h++, H0++)
                        i8_back_add(h + 1 < g[s].nblk ? g[s].L : g[s].lastL, F[k] + 128 * H0, A + 128 * H0);
            }
            /* the last n % 4 tokens: the float kernel */
            if (n > nfull)
                ok &= i8_float_accum(x, r0 + (size_t)nfull * rb, n - nfull, p + (size_t)j * ps + (size_t)(c0 + nfull),
                                     ps, m4, acc + (size_t)j * as, as, TQ_ATTN_NO_AHEAD);
        }
    }
    return ok;
}

static tq_attn_kernels i8_table;
static pthread_once_t i8_once = PTHREAD_ONCE_INIT;

static void i8_init(void) {
    for (int L = 2; L < I8_LAYOUTS; L++) {
        int runs = 1, t4x4 = 1, pairs = 1;
        for (int p = 0; p < 128; p++) i8_pos_tab[L][p] = (uint8_t)i8_pos(L, p);
        for (int q = 0; q < 4; q++) i8_base_tab[L][q] = (uint8_t)i8_pos(L, i8_slot_byte(4 * q, 0));
        for (int sl = 0; sl < 16; sl++)
            for (int d = 0; d < 8; d++) {
                int at = i8_pos(L, i8_slot_byte(sl, d)), b = i8_base_tab[L][sl / 4], s1 = sl % 4;
                runs &= at == i8_pos(L, i8_slot_byte(sl, 0)) + d;
                t4x4 &= at == b + s1 + 32 * (d % 4) + 4 * (d / 4);
                pairs &= at == b + 2 * s1 + 64 * (d % 2) + d / 2 % 2 + 8 * (d / 4);
            }
        i8_back_kind[L] = runs ? I8_RUNS : t4x4 ? I8_T4X4 : pairs ? I8_PAIRS : I8_SCALAR;
        for (int i = 0; i < 128; i++) i8_back_tab[L][i] = (uint8_t)i8_pos(L, i8_slot_byte(i / 8, i % 8));
        for (int sl = 0; sl < 16; sl++)
            i8_slot_tab[L][sl] = (uint8_t)(runs ? i8_pos(L, i8_slot_byte(sl, 0)) : 8 * sl);
    }
    i8_table = *tq_attn_kernels_avx2();
    i8_table.name = I8_AVXVNNI ? "avx2-vnni" : "avx2-int8";
    i8_table.score_turbo_lanes = i8_score_turbo_lanes;
    i8_table.lanes_prep_bytes = i8_prep_bytes;
    i8_table.prep_turbo_lanes = i8_prep_turbo_lanes;
    i8_table.score_turbo_lanes_prepared = i8_score_prepared;
    i8_table.accum_turbo_lanes = i8_accum_turbo_lanes;
    i8_table.trellis_lanes = 1 << 2 | 1 << 3 | 1 << 4;
}

#if I8_AVXVNNI
const tq_attn_kernels *tq_attn_kernels_avxvnni(void) {
    /* AVX-VNNI: CPUID leaf 7, subleaf 1, EAX bit 4 (clang 14 has no __builtin_cpu_supports name) */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!tq_attn_kernels_avx2() || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 4) & 1u))
        return NULL;
    pthread_once(&i8_once, i8_init);
    return &i8_table;
}
#else
const tq_attn_kernels *tq_attn_kernels_avx2_int8(void) {
    __builtin_cpu_init();
    if (!tq_attn_kernels_avx2() || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return NULL;
    pthread_once(&i8_once, i8_init);
    return &i8_table;
}
#endif

#else

#if I8_AVXVNNI
const tq_attn_kernels *tq_attn_kernels_avxvnni(void) { return NULL; }
#else
const tq_attn_kernels *tq_attn_kernels_avx2_int8(void) { return NULL; }
#endif

#endif

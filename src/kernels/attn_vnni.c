/*
 * Decode attention in integers — key scores and value sums — with AVX-512 VNNI + VBMI on the
 * lane layout (record.h, tq_record_lanes); the value side is described above vnni_accum_turbo_lanes.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi -mavx512vnni -mfma -mf16c.
 *
 * The float lane kernel (attn_avx512.c) spends, per 16 key coordinates and token, one vpermps
 * and one multiply-add per query head. Here the rotated query is rounded to int8 once per call
 * (q̂ = round(q / β), β = max|q| / 127, per query row) and each codebook to biased uint8
 * (ĉ + 128, ĉ = round(c / α), α = the largest |centroid| of the tensor / 127), so one vpdpbusd
 * does 64 multiply-adds of one query head:
 *
 *   ⟨q, row⟩ ≈ scale · α · β · (Σ (ĉ_i + 128) · q̂_i − 128 · Σ q̂_i)
 *
 * with the sums exact in int32. Per 128-coordinate block and token: a masked load, a vpermb
 * that moves each lane's B bytes to its own 32-bit lane, two vpmultishiftqb (codes 0–3 and 4–7
 * of each lane as bytes) and two vpermb lookups in a 64-entry table; then two vpdpbusd per query
 * head. The error against the float kernel is at most
 *   scale · Σ_i (β/2 · |c_i| + α/2 · |q_i| + α·β/4)
 * (tests/test_attention.c checks it), on Gemma 3's keys far below the quantization error of the
 * codes themselves. A query with a non-finite coordinate goes to the float
 * kernel. TQ_INT8_SCORES=0 in the environment keeps the float kernels for both (attn_ref.c).
 *
 * Trellis-coded segments of 2 and 3 bits (kernels/trellis.h; trellis_lanes): index k's value
 * is looked up by the 2B-bit window of the stream that ends with it. The block is loaded from
 * one byte earlier (the byte before a lane's first byte holds the index before it; for the
 * segment's first block that byte is masked to zero: the start state), each lane's dword is
 * then bytes [Bl − 1, Bl + 3) of the block, and the vpmultishiftqb controls take the byte at
 * bit 8 − B + Bk of the lane for code k: its low 2B bits are the window, and the table (entry
 * e: the pair value of e mod 2^(2B), quantized with α from the largest |pair value|) reads it
 * as vpermb reads the plain codes. The same instructions per block as Lloyd-Max codes. At 4
 * bits the 8-bit window of the free tables (trellis=1) indexes 256 entries (two vpermi2b and a
 * blend on its top bit); the two-state tables (trellis=2, the record's pair_memory 2) are read
 * from the window's bit 3 — the previous code's top bit, the code, and bits vpermb ignores or
 * finds in a table of their 32 values held twice — by one vpermb. Both take an even lane's
 * code 0 from the block loaded four bytes early (vctl.lo2).
 *
 * A segment of one block of at most 64 coordinates (SmolLM2's heads, the halves of turbo3.5 and
 * of the key split at d 128) leaves lanes 8–15 padding, one of at most 32 (the quarters of those
 * at d 64) lanes 4–15: such a segment is packed, two or four records to a vector (two merged by
 * one vpermt2b, four each in its own 16-byte slot; vseg_load_packed, trellis codes too), and the
 * queries' bytes of the block are repeated in each slot (vnni_4x4_packed, vnni_accum_packed):
 * the same int32 sums with a half or a quarter of the instructions per record. The value sums
 * read a record of two such segments (fractional widths at d ≤ 128; plain codes, or trellis
 * codes but the 256-entry tables) as one (vseg_merge).
 */
#include "attn_kernels.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VBMI__)

#include <pthread.h>
#include <string.h>

#include "attn_simd.h"
#include "trellis.h"

/* vseg.B of a merged record (vseg_merge): 0 (plain codes), VNNI_MERGED_T (trellis codes: the
 * bytes before a segment zeroed, kz) or VNNI_MERGED_RAW2 (and a 4-bit trellis segment: raw2) */
#define VNNI_MERGED_T (-1)
#define VNNI_MERGED_RAW2 (-2)
#define VNNI_MAX_BLOCKS 9 /* 128-coordinate blocks of a lane row: head dims ≤ 1024, 2 segments */

/* The controls of a segment's shape — width B, trellis codes or not, records per vector P —
 * made once for every shape (vnni_init), so that a call only copies them. */
typedef struct vctl {
    __m512i align;  /* vpermb: lane l ← bytes [Bl, Bl + 4) of the block (trellis: of the block
                       loaded from one byte earlier) */
    __m512i lo, hi; /* vpmultishiftqb controls: codes 0–3 / 4–7 of each lane as bytes */
    __m512i lo2;    /* wide: the control of even lanes' code 0 in the block loaded from four
                       bytes earlier (byte 0 of each qword) */
    __m512i alignp; /* packed (vseg_load_packed): P = 2, vpermt2b, lane l ← bytes [B(l mod 8),
                       +4) of record l / 8's load; P = 4 (B < 4), vpermb, lane l ← bytes
                       [B(l mod 4), +4) of 16-byte slot l / 4 */
    __m512i sh4;    /* packed wide: vpermb, each slot's bytes moved up by 4 (sh4m: zeros in its
                       first 4) */
    __m512i spread; /* packed values (vnni_accum_packed): vpshufb, lane L of the weights ← the
                       bytes of the four records of slot L·P/4 */
    __mmask64 sh4m;
} vctl;
static vctl vnni_ctl[5][3][3]; /* [B][trellis: 0, 1, 2 two-state at 4 bits][log2 P] */

typedef struct vseg {
    vctl c;               /* the shape's controls (vnni_ctl; vseg_merge: its own) */
    __m512i table[4];     /* entry e: 128 + ĉ[e mod 2^B] (scores: unsigned operand); wide: 256
                             entries in four registers, else [0] */
    __m512i table_s[4];   /* entry e: ĉ[e mod 2^B] (values: signed operand), likewise */
    __mmask64 km;                   /* merged (vseg_merge): the bytes of segment 1's lanes */
    __mmask64 kz, kz2, klo2;        /* merged: the align's bytes kept (the others: zero, the
                                       start state before a trellis segment), the early align's,
                                       and the bytes whose code 0 comes from raw2 */
    __m512i align2;                 /* merged, a 4-bit trellis segment: its lanes' dwords of
                                       the block four bytes early (vseg_load's raw2) */
    __mmask64 mk[VNNI_MAX_BLOCKS];  /* vseg_load's mask of block h: its n stored bytes (trellis
                                       of B < 4: n + 1 from the byte before, that byte off in
                                       block 0) */
    __mmask64 mk2[VNNI_MAX_BLOCKS]; /* wide: the block loaded four bytes early (n + 4 bytes, the
                                       first four off in block 0) */
    int B, nblk, trellis; /* trellis: the codes are trellis-coded, ĉ the pair values */
    int wide;             /* 4-bit trellis codes of free tables: 8-bit windows, a 256-entry
                             table (two-state tables: the windows' top 5 bits and 1 more, a
                             64-entry table of 32 values twice) */
    int pack;             /* records per vector: 1; 2 for one block of ≤ 64 coordinates (lanes
                             8–15 padding), 4 for ≤ 32 (lanes 4–15) */
    int H0;               /* the segment's first block in the lane-layout row */
    size_t off, bytes;
} vseg;



static void vctl_make(vctl *c, int B, int tr, int lg) {
    /* early: 4-bit trellis codes (either table) take an even lane's code 0 from the block
     * loaded four bytes early; lps: lanes per slot of 64 >> lg bytes */
    const int early = tr && B == 4, lps = 16 >> lg;
    uint8_t align[64], alignp[64], lo[64], hi[64], lo2[64], sh4[64] = {0};
    uint64_t sh4m = 0;
    for (int l = 0; l < 16; l++)
        for (int j = 0; j < 4; j++) {
            align[4 * l + j] = (uint8_t)(B * l + j);
            /* P = 2: vpermt2b of two records' loads; P = 4: vpermb of four 16-byte slots */
            alignp[4 * l + j] = (uint8_t)((l / lps) * (lg == 1 ? 64 : 16) + B * (l % lps) + j);
        }
    if (early)
        for (int i = 0; i < 64; i++)
            if (i % (64 >> lg) >= 4) sh4[i] = (uint8_t)(i - 4), sh4m |= 1ull << i;
    /* Trellis: the window ending with the code — B < 4 in the block loaded one byte early
     * (+8 − B), B = 4 in the block as stored (−4: an even lane's code 0 wraps; lo2 reads
     * it from the block loaded four bytes early, where it sits at bit 28). Two-state 4-bit
     * tables (tr 2): the window from its bit 3 (−1, lo2 at 31): the previous code's top bit,
     * the code, then 3 bits of the next code, of which vpermb reads the 6th as bit 5 — the
     * table holds its 32 values twice. */
    int shift = !tr ? 0 : early ? (tr == 2 ? 64 - 1 : 64 - 4) : 8 - B;
    for (int j = 0; j < 8; j++) {
        int lane = j / 4, k = j % 4; /* byte j of a qword: lane 2i + lane, code k (+4) */
        for (int w = 0; w < 8; w++) {
            lo[8 * w + j] = (uint8_t)((32 * lane + shift + B * k) & 63);
            hi[8 * w + j] = (uint8_t)((32 * lane + shift + B * (k + 4)) & 63);
            lo2[8 * w + j] = tr == 2 ? 31 : 28;
        }
    }
    c->align = _mm512_loadu_si512(align);
    c->alignp = _mm512_loadu_si512(alignp);
    c->lo = _mm512_loadu_si512(lo);
    c->hi = _mm512_loadu_si512(hi);
    c->lo2 = _mm512_loadu_si512(lo2);
    c->sh4 = _mm512_loadu_si512(sh4);
    c->sh4m = (__mmask64)sh4m;
    uint8_t spread[64];
    for (int i = 0; i < 64; i++) /* byte b of 128-bit lane L: record b mod 4 of slot L·P/4 */
        spread[i] = (uint8_t)(i % 16 % 4 * (1 << lg) + (i / 16) * (1 << lg) / 4);
    c->spread = _mm512_loadu_si512(spread);
}

/* α and the segments' state; 0 if some centroid is not finite (then the float kernel). Called
 * once per call of the value sums (a page of records) and per decode task of the scores, so
 * the tables are made 16 entries at a time: ĉ = round(c/α) by vcvtps2dq (the rounding of
 * lrintf), ĉ + 128 as the same byte with its top bit flipped. */
static int vseg_setup(const tq_record *x, vseg *g, float *alpha) {
    float m = tq_record_absmax(x);
    if (!(m > 0.0f)) return 0; /* a value not finite (−1), or only zeros */
    *alpha = m / 127.0f;
    const __m512 va = _mm512_set1_ps(*alpha);
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits, nv, tr = x->seg[s].pairs != NULL;
        const float *val = tq_record_seg_values(x, s, &nv);
        if (tr && (B < 2 || B > 4)) return 0; /* not reached: tq_attn_reads_lanes */
        /* two-state 4-bit tables (record.h, pair_memory 2): entry e is U[c][b], c = bits 1–4
         * of e, b = bit 0 (the previous code's top bit), bit 5 ignored */
        const int two = tr && B == 4 && x->seg[s].pair_memory == 2;
        float u[64];
        if (two) {
            for (int e = 0; e < 64; e++) u[e] = val[((e >> 1) & 15) * 16 + (e & 1) * 8];
            val = u, nv = 64;
        }
        int wide = tr && B == 4 && !two, ne = wide ? 256 : 64;
        const int nblk = (x->seg[s].count + 127) / 128;
        const int P = nblk > 1 || x->seg[s].count > 64 ? 1 : x->seg[s].count > 32 ? 2 : 4;
        const vctl *ctl = &vnni_ctl[B][two ? 2 : tr][P == 1 ? 0 : P == 2 ? 1 : 2];
        g[s].c = *ctl;
        /* entry e: val[e mod nv] (nv < 16: the values repeated by a permute) */
        __m512i rep = _mm512_and_si512(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm512_set1_epi32(nv - 1));
        __m512 v16 = nv < 16 ? _mm512_permutexvar_ps(rep, _mm512_maskz_loadu_ps((__mmask16)((1u << nv) - 1u), val))
                             : _mm512_setzero_ps();
        for (int i = 0; i < ne / 64; i++) {
            __m128i b[4];
            for (int q = 0; q < 4; q++) {
                int e = 64 * i + 16 * q;
                __m512 v = nv < 16 ? v16 : _mm512_loadu_ps(val + (e & (nv - 1)));
                b[q] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_div_ps(v, va))); /* |ĉ| ≤ 127 */
            }
            __m512i t = _mm512_inserti32x4(_mm512_castsi128_si512(b[0]), b[1], 1);
            t = _mm512_inserti32x4(_mm512_inserti32x4(t, b[2], 2), b[3], 3);
            g[s].table_s[i] = t;
            g[s].table[i] = _mm512_xor_si512(t, _mm512_set1_epi8((char)0x80));
        }
        g[s].B = B;
        g[s].wide = wide;
        g[s].trellis = tr;
        g[s].nblk = nblk;
        g[s].pack = P;
        g[s].H0 = s ? g[s - 1].H0 + g[s - 1].nblk : 0;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
        for (int h = 0; h < nblk; h++) {
            size_t at = (size_t)h * 16 * (size_t)B, n = g[s].bytes - at;
            if (n > 16 * (size_t)B) n = 16 * (size_t)B;
            uint64_t k = n >= 64 ? ~0ull : (1ull << n) - 1, k2 = n + 4 >= 64 ? ~0ull : (1ull << (n + 4)) - 1;
            if (tr && B < 4) k = ((1ull << (n + 1)) - 1) & (h ? ~0ull : ~1ull);
            g[s].mk[h] = (__mmask64)k;
            g[s].mk2[h] = (__mmask64)(h ? k2 : k2 & ~0xFull);
        }
    }
    return 1;
}

/* Block h of segment g of record r: raw, each lane's bytes in its dword (B < 4; B = 4: as
 * stored); B < 4 trellis codes: loaded from one byte earlier, that byte zero for the first
 * block; wide: raw2, the block loaded from four bytes earlier (the first block: zeros there). */
typedef struct vblk {
    __m512i raw, raw2;
} vblk;

static inline __attribute__((always_inline)) vblk vseg_load(const vseg *g, const uint8_t *r, int h,
                                                            int B) {
    const uint8_t *p = r + g->off + (size_t)h * 16 * (size_t)B;
    vblk b;
    b.raw2 = _mm512_setzero_si512();
    if (B <= 0) { /* merged (vseg_merge): both segments in one load, each lane's dword by the align */
        __m512i v = _mm512_maskz_loadu_epi8(g->mk[0], p);
        b.raw = B == 0 ? _mm512_permutexvar_epi8(g->c.align, v) : _mm512_maskz_permutexvar_epi8(g->kz, g->c.align, v);
        if (B == VNNI_MERGED_RAW2) b.raw2 = _mm512_maskz_permutexvar_epi8(g->kz2, g->align2, v);
        return b;
    }
    if (g->trellis && B < 4) {
        b.raw = _mm512_maskz_loadu_epi8(g->mk[h], p - 1); /* n + 1 ≤ 49 bytes */
    } else {
        b.raw = _mm512_maskz_loadu_epi8(g->mk[h], p);
        if (B == 4 && g->trellis) b.raw2 = _mm512_maskz_loadu_epi8(g->mk2[h], p - 4);
    }
    if (B != 4) b.raw = _mm512_permutexvar_epi8(g->c.align, b.raw);
    return b;
}

/* The table values (t: g->table or g->table_s) of half u (codes 0–3 or 4–7 of every lane) of a
 * loaded block. */
static inline __attribute__((always_inline)) __m512i vseg_half(const vseg *g, vblk b, int u,
                                                               const __m512i *t, int B) {
    __m512i idx = _mm512_multishift_epi64_epi8(u ? g->c.hi : g->c.lo, b.raw);
    if (B <= 0) { /* merged: segment 1's lanes from its own table; a 4-bit trellis segment's
                   * even lanes' code 0 from raw2 */
        if (B == VNNI_MERGED_RAW2 && !u) idx = _mm512_mask_multishift_epi64_epi8(idx, g->klo2, g->c.lo2, b.raw2);
        return _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(idx, t[0]), g->km, idx, t[1]);
    }
    if (B == 4 && g->trellis && !u) /* even lanes' code 0 from the early load */
        idx = _mm512_mask_multishift_epi64_epi8(idx, 0x0101010101010101ull, g->c.lo2, b.raw2);
    if (B != 4 || !g->wide) return _mm512_permutexvar_epi8(idx, t[0]);
    __m512i a = _mm512_permutex2var_epi8(t[0], idx, t[1]), c = _mm512_permutex2var_epi8(t[2], idx, t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), a, c);
}

/* Records r[0 … P) of a packed segment (g->pack = P) in one vector, as vseg_load leaves one
 * block, with vseg_load's mask of its one block (trellis codes of B < 4 loaded from the byte
 * before, that byte zero: the start state). P = 2: the two records' loads are merged by one
 * vpermt2b (lanes 0–7 ← the first's lanes, 8–15 ← the second's); P = 4: each record's bytes
 * go to its own 16-byte slot, then (B < 4) one vpermb moves each lane's B bytes to its own
 * 32-bit lane. Wide trellis codes: raw2, each slot (32 or 16 bytes) moved up by four bytes,
 * zeros in (the block loaded four bytes early). A record's 8B ≤ 32 or 4B ≤ 16 bytes (one more
 * from the byte before) fit its slot. */
static inline __attribute__((always_inline)) vblk vseg_load_packed(const vseg *g, const uint8_t *const *r, int P,
                                                                   int B) {
    /* the byte before: subtracted from the pointer (an offset of off − 1 wraps at off = 0) */
    const size_t off = g->off;
    const int tb = g->trellis && B < 4;
    const __mmask64 m = g->mk[0];
    vblk b;
    b.raw2 = _mm512_setzero_si512();
    if (B <= 0) { /* merged (vseg_merge, P = 2): each lane's dword by the align, from either load */
        __m512i v0 = _mm512_maskz_loadu_epi8(m, r[0] + off), v1 = _mm512_maskz_loadu_epi8(m, r[1] + off);
        b.raw = B == 0 ? _mm512_permutex2var_epi8(v0, g->c.alignp, v1)
                       : _mm512_maskz_permutex2var_epi8(g->kz, v0, g->c.alignp, v1);
        if (B == VNNI_MERGED_RAW2) b.raw2 = _mm512_maskz_permutex2var_epi8(g->kz2, v0, g->align2, v1);
        return b;
    }
    if (P == 2) {
        b.raw = _mm512_permutex2var_epi8(_mm512_maskz_loadu_epi8(m, r[0] + off - tb), g->c.alignp,
                                         _mm512_maskz_loadu_epi8(m, r[1] + off - tb));
    } else {
        __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8((__mmask16)m, r[0] + off - tb));
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8((__mmask16)m, r[1] + off - tb), 1);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8((__mmask16)m, r[2] + off - tb), 2);
        b.raw = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8((__mmask16)m, r[3] + off - tb), 3);
        if (B != 4) b.raw = _mm512_permutexvar_epi8(g->c.alignp, b.raw);
    }
    if (B == 4 && g->trellis) b.raw2 = _mm512_maskz_permutexvar_epi8(g->c.sh4m, g->c.sh4, b.raw);
    return b;
}

/* The value sums of a record of two one-block segments with L0 + L1 ≤ 16 lanes (turbo3.5's
 * and turbo2.5's values at head dims ≤ 128) read both segments in one vector: m, a segment
 * read with B = 0, whose lanes 0 … L0 − 1 are segment 0's and L0 … L0 + L1 − 1 segment 1's,
 * two records to a vector when L0 + L1 ≤ 8 (lanes 8 on: the second record's). One masked load
 * covers both segments' bytes (they are consecutive, ≤ 64 bytes); the align moves each lane's
 * bytes from its own segment — a trellis segment of B < 4 its lane's from one byte earlier,
 * zero before its first lane (kz), a 4-bit one (two-state tables) also the dword four bytes
 * earlier for its even lanes' code 0 (align2, kz2, klo2), as vseg_load does for one segment;
 * each byte of the shift controls is its lane's segment's, and segment 1's lanes are looked up
 * in its own table (a second, masked vpermb: km). Two passes of transposes, weights and group
 * sums become one. Returns 0 where the record is not of that shape (or has the 256-entry
 * tables of 4-bit free trellis codes). */
static int vseg_merge(const tq_record *x, const vseg *g, vseg *m) {
    if (x->n_seg != 2 || g[0].pack == 1 || g[1].pack == 1 || g[0].wide || g[1].wide) return 0;
    const int L0 = x->seg[0].count / 8, L1 = x->seg[1].count / 8;
    const size_t rel = x->seg[1].off - x->seg[0].off, span = rel + g[1].bytes;
    if (x->seg[1].off < x->seg[0].off + g[0].bytes || L0 + L1 > 16 || span > 64 || L0 % 2) return 0;
    const int P = L0 + L1 <= 8 ? 2 : 1;
    uint8_t al[64] = {0}, al2[64] = {0}; /* lanes of neither segment (padding): byte 0 */
    uint64_t kz = ~0ull, kz2 = ~0ull, klo2 = 0;
    const vctl *ctl[2];
    int tr4 = 0;
    for (int s = 0; s < 2; s++) {
        const int B = g[s].B, early = g[s].trellis && B < 4, t4 = g[s].trellis && B == 4;
        ctl[s] = &vnni_ctl[B][t4 ? 2 : g[s].trellis][0];
        tr4 |= t4;
        for (int l = 0; l < 16; l++) {
            const int lr = P == 2 ? l % 8 : l, rec = P == 2 ? l / 8 : 0; /* lane in its record */
            if ((lr >= L0) != s) continue;
            const int ls = s ? lr - L0 : lr;                    /* lane in its segment */
            const int base = (int)(s ? rel : 0) + B * ls - early; /* its dword's first byte */
            for (int j = 0; j < 4; j++) {
                al[4 * l + j] = (uint8_t)(((base + j) & 63) + 64 * rec);
                al2[4 * l + j] = (uint8_t)(((base - 4 + j) & 63) + 64 * rec);
            }
            if (early && ls == 0) kz &= ~(1ull << (4 * l));        /* the start state */
            if (t4 && ls == 0) kz2 &= ~(0xFull << (4 * l));        /* no code before */
            if (t4 && l % 2 == 0) klo2 |= 1ull << (4 * l);         /* even lanes' code 0 */
        }
    }
    const __m512i l = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lr = P == 2 ? _mm512_and_si512(l, _mm512_set1_epi32(7)) : l; /* lane in its record */
    const __mmask16 in1 = _mm512_cmpge_epi32_mask(lr, _mm512_set1_epi32(L0));
    *m = g[0];
    m->c.align = m->c.alignp = _mm512_loadu_si512(al);
    m->align2 = _mm512_loadu_si512(al2);
    m->kz = (__mmask64)kz;
    m->kz2 = (__mmask64)kz2;
    m->klo2 = (__mmask64)klo2;
    m->trellis = tr4;
    m->km = _mm512_movepi8_mask(_mm512_movm_epi32(in1));
    m->c.lo = _mm512_mask_blend_epi8(m->km, ctl[0]->lo, ctl[1]->lo);
    m->c.hi = _mm512_mask_blend_epi8(m->km, ctl[0]->hi, ctl[1]->hi);
    m->c.lo2 = vnni_ctl[4][2][0].lo2;
    m->c.spread = vnni_ctl[1][0][1].spread; /* P = 2 (P = 1 reads none) */
    m->table[1] = g[1].table[0];
    m->table_s[1] = g[1].table_s[0];
    m->mk[0] = span >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << span) - 1;
    m->B = tr4 ? VNNI_MERGED_RAW2 : g[0].trellis || g[1].trellis ? VNNI_MERGED_T : 0;
    m->pack = P;
    m->nblk = 1;
    m->H0 = 0;
    m->bytes = span;
    return 1;
}

/* The state of both kernels, kl = the lane-layout row floats; 0: use the float kernel. */
static int vnni_prepare(const tq_record *x, vseg *g, float *alpha, int *kl) {
    *kl = tq_record_lanes(x);
    return *kl <= 128 * VNNI_MAX_BLOCKS && vseg_setup(x, g, alpha);
}

/* One query row in the lane layout (kl floats) → q̂ in the order the codes come out: block H,
 * half u (rounds 4u … 4u + 3), lane l, byte j holds the coordinate at 128H + 16(4u + j) + l.
 * Sets β and 128 · Σ q̂; returns 0 if a coordinate is not finite. */
static int quant_query(const float *q, int kl, int8_t *out, float *beta, int32_t *bias) {
    __m512 m = _mm512_setzero_ps();
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    for (int i = 0; i < kl; i += 16) m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(q + i), absmask));
    float mx = _mm512_reduce_max_ps(m);
    /* max_ps drops NaNs: check every coordinate. */
    __mmask16 bad = 0;
    for (int i = 0; i < kl; i += 16) {
        __m512 v = _mm512_and_ps(_mm512_loadu_ps(q + i), absmask);
        bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(3.4e38f), _CMP_NLE_UQ);
    }
    if (bad) return 0;
    __m512 inv = _mm512_set1_ps(mx > 0.0f ? 127.0f / mx : 0.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int H = 0; H < kl / 128; H++)
        for (int u = 0; u < 2; u++) {
            __m128i r[4];
            for (int j = 0; j < 4; j++) {
                __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + 128 * H + 16 * (4 * u + j)), inv));
                sum = _mm512_add_epi32(sum, v);
                r[j] = _mm512_cvtepi32_epi8(v);
            }
            __m128i a01l = _mm_unpacklo_epi8(r[0], r[1]), a01h = _mm_unpackhi_epi8(r[0], r[1]);
            __m128i a23l = _mm_unpacklo_epi8(r[2], r[3]), a23h = _mm_unpackhi_epi8(r[2], r[3]);
            int8_t *o = out + 128 * H + 64 * u;
            _mm_storeu_si128((__m128i *)(void *)o, _mm_unpacklo_epi16(a01l, a23l));
            _mm_storeu_si128((__m128i *)(void *)(o + 16), _mm_unpackhi_epi16(a01l, a23l));
            _mm_storeu_si128((__m128i *)(void *)(o + 32), _mm_unpacklo_epi16(a01h, a23h));
            _mm_storeu_si128((__m128i *)(void *)(o + 48), _mm_unpackhi_epi16(a01h, a23h));
        }
    *beta = mx / 127.0f;
    *bias = 128 * _mm512_reduce_add_epi32(sum);
    return 1;
}

/* The in-lane rounds of hsum16 (attn_simd.h) in int32 for 4·nu vectors: u[i] per 128-bit lane
 * L = the sums of a[4i], …, a[4i + 3] over lane L. */
static inline __attribute__((always_inline)) void hsum_in_lanes_i32(const __m512i *a, int nu, __m512i *u) {
#define SHUF(x, y, imm) _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), imm))
    for (int i = 0; i < nu; i++) {
        __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[4 * i], a[4 * i + 1]),
                                      _mm512_unpackhi_epi32(a[4 * i], a[4 * i + 1]));
        __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[4 * i + 2], a[4 * i + 3]),
                                      _mm512_unpackhi_epi32(a[4 * i + 2], a[4 * i + 3]));
        u[i] = _mm512_add_epi32(SHUF(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)), SHUF(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
    }
#undef SHUF
}

/* hsum16 (attn_simd.h) in int32. */
static inline __attribute__((always_inline)) __m512i hsum16_i32(const __m512i a[16]) {
    __m512i u[4];
    hsum_in_lanes_i32(a, 4, u);
    __m512i v01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i v23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Four tokens (records r[m]) × four queries (qb[j], this segment's blocks from H0) of one
 * segment of constant width B. */
static inline __attribute__((always_inline)) void vnni_4x4_seg(const vseg *g, const uint8_t *const r[4],
                                                               const int8_t *const qb[4], int H0,
                                                               __m512i a[16], int B) {
    for (int h = 0; h < g->nblk; h++) {
        const int8_t *q0 = qb[0] + 128 * (H0 + h), *q1 = qb[1] + 128 * (H0 + h),
                     *q2 = qb[2] + 128 * (H0 + h), *q3 = qb[3] + 128 * (H0 + h);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            vblk blk = vseg_load(g, r[m], h, B);
            __m512i cl = vseg_half(g, blk, 0, g->table, B), ch = vseg_half(g, blk, 1, g->table, B);
            a[m] = _mm512_dpbusd_epi32(a[m], cl, _mm512_loadu_si512(q0));
            a[m] = _mm512_dpbusd_epi32(a[m], ch, _mm512_loadu_si512(q0 + 64));
            a[4 + m] = _mm512_dpbusd_epi32(a[4 + m], cl, _mm512_loadu_si512(q1));
            a[4 + m] = _mm512_dpbusd_epi32(a[4 + m], ch, _mm512_loadu_si512(q1 + 64));
            a[8 + m] = _mm512_dpbusd_epi32(a[8 + m], cl, _mm512_loadu_si512(q2));
            a[8 + m] = _mm512_dpbusd_epi32(a[8 + m], ch, _mm512_loadu_si512(q2 + 64));
            a[12 + m] = _mm512_dpbusd_epi32(a[12 + m], cl, _mm512_loadu_si512(q3));
            a[12 + m] = _mm512_dpbusd_epi32(a[12 + m], ch, _mm512_loadu_si512(q3 + 64));
        }
    }
}

/* A packed segment (g->pack = P, 2 or 4) of records r[0 … 4), P to a vector, against the
 * queries' bytes of its block repeated in every slot (qd[k][u]: query k, half u):
 * a[(4/P)k + p] += the products of query k with records Pp … Pp + P − 1. The same instructions
 * per vector as a whole block: 1/P as many per record. */
static inline __attribute__((always_inline)) void vnni_4x4_packed(const vseg *g, const uint8_t *const r[4],
                                                                  const int8_t (*qd)[2][64], __m512i *a, int P,
                                                                  int B) {
    for (int p = 0; p < 4 / P; p++) {
        vblk blk = vseg_load_packed(g, r + P * p, P, B);
        __m512i cl = vseg_half(g, blk, 0, g->table, B), ch = vseg_half(g, blk, 1, g->table, B);
        for (int k = 0; k < 4; k++) {
            __m512i *ak = &a[(4 / P) * k + p];
            *ak = _mm512_dpbusd_epi32(*ak, cl, _mm512_load_si512(qd[k][0]));
            *ak = _mm512_dpbusd_epi32(*ak, ch, _mm512_load_si512(qd[k][1]));
        }
    }
}

/* The 16 sums of vnni_4x4_packed's accumulators at P = 2, lane 4k + m = query k, record m. */
static inline __attribute__((always_inline)) __m512i hsum8_halves_i32(const __m512i a[8]) {
    __m512i u[2];
    hsum_in_lanes_i32(a, 2, u);
    /* 128-bit lanes 0, 1: record 2p, lanes 2, 3: record 2p + 1 of accumulator 2k + p; after the
     * sum, lane 8(k / 2) + 4(m % 2) + 2(k % 2) + m / 2 holds query k, record m */
    __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    return _mm512_permutexvar_epi32(order, v);
}

/* The same at P = 4: 128-bit lane m of a[k] is record m; after the in-lane sums lane 4m + k
 * holds query k, record m. */
static inline __attribute__((always_inline)) __m512i hsum4_quarters_i32(const __m512i a[4]) {
    __m512i u;
    hsum_in_lanes_i32(a, 1, &u);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(order, u);
}

/* What the scores of a call make of its queries before reading a record, kept so that calls on
 * many pages of records reuse it (tq_attn_kernels.prep_turbo_lanes): the segment tables and,
 * per group of four queries, q̂, its bias and α·β, and for packed segments the queries' bytes of
 * the block repeated in every slot. */
typedef struct vnni_qgroup {
    __m512i vbias;
    __m512 vab;
    int fin;             /* 0: a query of the group is not finite (the float kernels take it) */
    const int8_t *qp[4]; /* kl bytes each (absent queries: the first's) */
    int8_t (*qd)[4][2][64]; /* [segment]: a packed segment's block of each query, repeated in
                               every slot */
} vnni_qgroup;
typedef struct vnni_qprep {
    int ok, kl, tr;
    int packs; /* bit P set: a segment of g->pack = P */
    float alpha;
    vseg g[2];
    vnni_qgroup grp[]; /* (nq + 3) / 4, then each group's bytes */
} vnni_qprep;

#define VNNI_GROUP_BYTES(kl) (4 * ((size_t)(kl) + 64) + 64 + sizeof(int8_t[2][4][2][64]))

static size_t vnni_prep_bytes(const tq_record *x, int nq) {
    int kl = tq_record_lanes(x), ng = (nq + 3) / 4;
    if (nq <= 0 || kl <= 0) return 0;
    return 64 + sizeof(vnni_qprep) + (size_t)ng * (sizeof(vnni_qgroup) + VNNI_GROUP_BYTES(kl));
}

static vnni_qprep *vnni_prep_at(void *mem) { return (vnni_qprep *)(((uintptr_t)mem + 63) & ~(uintptr_t)63); }
static uint8_t *align64(uint8_t *p) { return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

static int vnni_prep_turbo_lanes(const tq_record *x, const float *q, size_t qs, int nq, void *mem) {
    vnni_qprep *P = vnni_prep_at(mem);
    P->tr = tq_record_trellis(x);
    P->ok = vnni_prepare(x, P->g, &P->alpha, &P->kl);
    if (!P->ok) return 1;
    const int kl = P->kl, ng = (nq + 3) / 4;
    P->packs = 0;
    for (int s = 0; s < x->n_seg; s++) P->packs |= 1 << P->g[s].pack;
    uint8_t *bytes = (uint8_t *)(void *)(P->grp + ng);
    for (int j = 0; j < nq; j += 4) {
        vnni_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        int8_t *qb[4];
        uint8_t *b = bytes + (size_t)(j / 4) * VNNI_GROUP_BYTES(kl);
        for (int k = 0; k < 4; k++) qb[k] = (int8_t *)align64(b + (size_t)k * ((size_t)kl + 64));
        G->qd = (int8_t(*)[4][2][64])(void *)align64(b + 4 * ((size_t)kl + 64));
        float beta[4];
        int32_t bias[4];
        G->fin = 1;
        for (int k = 0; k < m4 && G->fin; k++)
            G->fin = quant_query(q + (size_t)(j + k) * qs, kl, qb[k], &beta[k], &bias[k]);
        if (!G->fin) continue;
        /* Absent queries (a last group of fewer than 4) and tokens repeat the first of their
         * group; their sums are dropped. */
        float ab[16];
        int32_t b16[16];
        for (int k = 0; k < 4; k++) {
            int kk = k < m4 ? k : 0;
            G->qp[k] = qb[kk];
            for (int m = 0; m < 4; m++) ab[4 * k + m] = P->alpha * beta[kk], b16[4 * k + m] = bias[kk];
        }
        G->vbias = _mm512_loadu_si512(b16);
        G->vab = _mm512_loadu_ps(ab);
        /* packed segments: the block's first 32 or 16 bytes of each half repeated */
        for (int s = 0; s < x->n_seg; s++)
            for (int k = 0; k < 4 && P->g[s].pack > 1; k++)
                for (int u = 0; u < 2; u++) {
                    __m512i v = _mm512_load_si512(G->qp[k] + 128 * P->g[s].H0 + 64 * u);
                    v = P->g[s].pack == 2 ? _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 0, 1, 0))
                                          : _mm512_shuffle_i64x2(v, v, 0);
                    _mm512_store_si512(G->qd[s][k][u], v);
                }
    }
    return 1;
}

/* vnni_4x4_seg and vnni_4x4_packed with the segment's width and pack as constants. */
static inline __attribute__((always_inline)) void vnni_seg_whole(const vseg *g, const uint8_t *const r[4], const int8_t *const qp[4], __m512i a[16]) {
    switch (g->B) {
    case 4: vnni_4x4_seg(g, r, qp, g->H0, a, 4); break;
    case 3: vnni_4x4_seg(g, r, qp, g->H0, a, 3); break;
    case 2: vnni_4x4_seg(g, r, qp, g->H0, a, 2); break;
    default: vnni_4x4_seg(g, r, qp, g->H0, a, 1); break;
    }
}
static inline __attribute__((always_inline)) void vnni_seg_packed(const vseg *g, const uint8_t *const r[4], const int8_t (*qd)[2][64], __m512i *a) {
#define PACKED(P)                                                                                              \
    switch (g->B) {                                                                                            \
    case 4: vnni_4x4_packed(g, r, qd, a, P, 4); break;                                                         \
    case 3: vnni_4x4_packed(g, r, qd, a, P, 3); break;                                                         \
    case 2: vnni_4x4_packed(g, r, qd, a, P, 2); break;                                                         \
    default: vnni_4x4_packed(g, r, qd, a, P, 1); break;                                                        \
    }
    if (g->pack == 2) {
        PACKED(2)
    } else {
        PACKED(4)
    }
#undef PACKED
}

/* The sums of records r's segments of pack P (2 or 4) against query group G, lane 4k + m =
 * query k, record m. */
static inline __attribute__((always_inline)) __m512i vnni_packed_sums(const vseg *g, int n_seg,
                                                                      const uint8_t *const r[4],
                                                                      const vnni_qgroup *G, int P) {
    __m512i a[8];
    for (int i = 0; i < 16 / P; i++) a[i] = _mm512_setzero_si512();
    for (int s = 0; s < n_seg; s++)
        if (g[s].pack == P) vnni_seg_packed(&g[s], r, (const int8_t(*)[2][64])G->qd[s], a);
    return P == 2 ? hsum8_halves_i32(a) : hsum4_quarters_i32(a);
}

/* score_turbo_lanes on queries prepared by vnni_prep_turbo_lanes (q, qs: the same queries,
 * for the float kernels where the integer path cannot go). */
static int vnni_score_prepared(const tq_record *x, const uint8_t *rec, int nk, const void *mem, const float *q,
                               size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    const tq_attn_kernels *fallback = tq_attn_kernels_avx512();
    const vnni_qprep *P = vnni_prep_at((void *)(uintptr_t)mem);
    const int tr = P->tr;
    if (!P->ok)
        return tr ? trellis_rows_scores(x, rec, nk, q, qs, nq, S, ss, tq_record_lanes(x))
                  : fallback->score_turbo_lanes(x, rec, nk, q, qs, nq, S, ss, ahead);
    const vseg *g = P->g;
    const int kl = P->kl, packs = P->packs;
    size_t rb = x->rec_bytes;
    simd_ahead ah = simd_ahead_init(ahead, nk);
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        const vnni_qgroup *G = &P->grp[j / 4];
        int m4 = nq - j < 4 ? nq - j : 4;
        if (!G->fin) {
            ok &= tr ? trellis_rows_scores(x, rec, nk, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss, kl)
                     : fallback->score_turbo_lanes(x, rec, nk, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss, TQ_ATTN_NO_AHEAD);
            continue;
        }
        const int8_t *const *qp = G->qp;
        const __m512i vbias = G->vbias;
        const __m512 vab = G->vab;
        for (int t = 0; t < nk; t += 4) {
            int n4 = nk - t < 4 ? nk - t : 4;
            const uint8_t *r[4];
            float sc[4], out[16];
            for (int m = 0; m < 4; m++) r[m] = rec + (size_t)(t + (m < n4 ? m : 0)) * rb;
            if (j == 0) simd_ahead_step(&ah, 4);
            ok &= simd_rec_scales(x, r, 4, n4, sc);
            __m512i sums = _mm512_setzero_si512();
            if (packs & 1 << 1) {
                __m512i a[16];
                for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_si512();
                for (int s = 0; s < x->n_seg; s++)
                    if (g[s].pack == 1) vnni_seg_whole(&g[s], r, qp, a);
                sums = hsum16_i32(a);
            }
            if (packs & 1 << 2) sums = _mm512_add_epi32(sums, vnni_packed_sums(g, x->n_seg, r, G, 2));
            if (packs & 1 << 4) sums = _mm512_add_epi32(sums, vnni_packed_sums(g, x->n_seg, r, G, 4));
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums, vbias)), vab);
            if (m4 == 4 && n4 == 4) {
                store16(v, sc, S + (size_t)j * ss + (size_t)t, ss);
                continue;
            }
            store16(v, sc, out, 4);
            for (int k = 0; k < m4; k++)
                for (int m = 0; m < n4; m++) S[(size_t)(j + k) * ss + (size_t)(t + m)] = out[4 * k + m];
        }
    }
    return ok;
}

/* One call: the queries prepared four at a time on the stack, then scored. */
static int vnni_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *q,
                                  size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    _Alignas(64) unsigned char mem[64 + sizeof(vnni_qprep) + sizeof(vnni_qgroup) + VNNI_GROUP_BYTES(128 * VNNI_MAX_BLOCKS)];
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        /* a lane row longer than mem holds: vnni_prepare refuses it before any group is written */
        vnni_prep_turbo_lanes(x, q + (size_t)j * qs, qs, m4, mem);
        ok &= vnni_score_prepared(x, rec, nk, mem, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss,
                                  j == 0 ? ahead : TQ_ATTN_NO_AHEAD);
    }
    return ok;
}

/* ---- values: acc_j += Σ_t p_j[t] · row_t with the weights in uint8 ----
 *
 * w_jt = p_jt · scale_t is rounded per group of VNNI_GROUP tokens: ŵ = round(w / γ), γ = the
 * group's largest w / 255, and the centroids to ĉ (int8, the same α as the scores). vpdpbusd
 * then sums four tokens per int32 lane: the four tokens' centroid bytes of one coordinate are
 * brought into one lane by a 4 × 4 byte transpose (two rounds of unpacks), and the weights of
 * the four tokens are one broadcast dword. Per group the int32 sums, times α·γ, are added to
 * a float buffer in the order the transpose leaves them; at the end of the call the buffer is
 * added to acc in the lane layout. Error per coordinate at most
 *   Σ_t (γ_t/2 · |c_ti| + (w_t + γ_t/2) · α/2)   (γ_t: the group of token t; c in row units / scale)
 * checked in tests/test_attention.c. */
#define VNNI_GROUP 32
#define VNNI_CALL 256

/* Byte k of dword (lane l) of a half-u vector is coordinate 128h + 8l + 4u + k; after the
 * transpose, vector r's dword (L, k) (128-bit lane L, dword k) holds the four tokens of
 * coordinate 128h + 8(4L + r) + 4u + k. The float buffer keeps, per block h and half u, the
 * four vectors r = 0..3 (64 floats): lane-layout position 128h + 16(4u + k) + 4L + r. */
static inline __attribute__((always_inline)) __m512i vnni_decode_half(const vseg *g, const uint8_t *r,
                                                                      int h, int u, int B) {
    return vseg_half(g, vseg_load(g, r, h, B), u, g->table_s, B);
}

/* The 4 × 4 byte transpose of the value pass (two rounds of unpacks): per 128-bit lane, dword i
 * of y[q] holds byte 4q + i of x0, x1, x2 and x3, in that order. */
static inline __attribute__((always_inline)) void transpose_bytes4(__m512i x0, __m512i x1, __m512i x2, __m512i x3,
                                                                   __m512i y[4]) {
    __m512i lo01 = _mm512_unpacklo_epi8(x0, x1), hi01 = _mm512_unpackhi_epi8(x0, x1);
    __m512i lo23 = _mm512_unpacklo_epi8(x2, x3), hi23 = _mm512_unpackhi_epi8(x2, x3);
    y[0] = _mm512_unpacklo_epi16(lo01, lo23);
    y[1] = _mm512_unpackhi_epi16(lo01, lo23);
    y[2] = _mm512_unpacklo_epi16(hi01, hi23);
    y[3] = _mm512_unpackhi_epi16(hi01, hi23);
}

/* One segment, half u of every block, over n tokens (a multiple of 4; records r0 + t·rb), four
 * queries: F[(H·2 + u)·4 + r][16] += α·γ · the int32 sums. */
static inline __attribute__((always_inline)) void vnni_accum_seg(const vseg *g, const uint8_t *r0,
                                                                 size_t rb, int n,
                                                                 const uint8_t (*W)[VNNI_CALL],
                                                                 const float (*ag)[VNNI_CALL / VNNI_GROUP],
                                                                 int H0, float *const F[4], int B,
                                                                 simd_ahead *ah) {
    for (int h = 0; h < g->nblk; h++)
        for (int u = 0; u < 2; u++) {
            for (int t0 = 0; t0 < n; t0 += VNNI_GROUP) {
                int t1 = t0 + VNNI_GROUP < n ? t0 + VNNI_GROUP : n;
                __m512i a[16];
                for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_si512();
                for (int t = t0; t < t1; t += 4) {
                    const uint8_t *r = r0 + (size_t)t * rb;
                    if (ah && h == 0 && u == 0) simd_ahead_step(ah, 4);
                    __m512i x0 = vnni_decode_half(g, r, h, u, B), x1 = vnni_decode_half(g, r + rb, h, u, B),
                            x2 = vnni_decode_half(g, r + 2 * rb, h, u, B),
                            x3 = vnni_decode_half(g, r + 3 * rb, h, u, B);
                    __m512i y[4];
                    transpose_bytes4(x0, x1, x2, x3, y);
                    for (int j = 0; j < 4; j++) {
                        uint32_t wq;
                        memcpy(&wq, &W[j][t], 4);
                        __m512i wb = _mm512_set1_epi32((int)wq);
                        for (int q = 0; q < 4; q++) a[4 * j + q] = _mm512_dpbusd_epi32(a[4 * j + q], wb, y[q]);
                    }
                }
                for (int j = 0; j < 4; j++) {
                    __m512 sc = _mm512_set1_ps(ag[j][t0 / VNNI_GROUP]);
                    float *f = F[j] + ((size_t)(H0 + h) * 2 + (size_t)u) * 64;
                    for (int q = 0; q < 4; q++)
                        _mm512_storeu_ps(f + 16 * q, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[4 * j + q]), sc,
                                                                     _mm512_loadu_ps(f + 16 * q)));
                }
            }
        }
}

/* vnni_accum_seg for a packed segment (g->pack = P, 2 or 4): 4P records per step in four
 * vectors of P (vector v: records Pv … Pv + P − 1, one per slot). After the transpose a dword
 * of 128-bit lane L holds one coordinate of the four records of slot i = L·P/4 (records i,
 * P + i, 2P + i, 3P + i), so lane L of the weight vector has those records' bytes; per group
 * the slots' sums are added (the block's first 64 or 32 coordinates: F's first 8 or 4 floats
 * per vector). n: a multiple of 4; a shorter last step repeats its records with weight 0. */
static inline __attribute__((always_inline)) void vnni_accum_packed(const vseg *g, const uint8_t *r0, size_t rb,
                                                                    int n, const uint8_t (*W)[VNNI_CALL],
                                                                    const float (*ag)[VNNI_CALL / VNNI_GROUP],
                                                                    float *const F[4], int P, int B,
                                                                    simd_ahead *ah) {
    const __m512i spread = g->c.spread;
    for (int u = 0; u < 2; u++)
        for (int t0 = 0; t0 < n; t0 += VNNI_GROUP) {
            int t1 = t0 + VNNI_GROUP < n ? t0 + VNNI_GROUP : n;
            __m512i a[16];
            for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_si512();
            for (int t = t0; t < t1; t += 4 * P) {
                const int cnt = t1 - t < 4 * P ? t1 - t : 4 * P; /* records present, a multiple of 4 */
                const uint8_t *r[16];
                for (int i = 0; i < 4 * P; i++) r[i] = r0 + (size_t)(t + (i < cnt ? i : 0)) * rb;
                if (ah && u == 0) simd_ahead_step(ah, cnt);
                __m512i x[4];
                for (int v = 0; v < 4; v++) x[v] = vseg_half(g, vseg_load_packed(g, r + P * v, P, B), u, g->table_s, B);
                __m512i y[4];
                transpose_bytes4(x[0], x[1], x[2], x[3], y);
                for (int j = 0; j < 4; j++) {
                    __m128i w = _mm_maskz_loadu_epi8((__mmask16)((1u << cnt) - 1u), &W[j][t]);
                    __m512i wb = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(w), spread);
                    for (int q = 0; q < 4; q++) a[4 * j + q] = _mm512_dpbusd_epi32(a[4 * j + q], wb, y[q]);
                }
            }
            for (int j = 0; j < 4; j++) {
                float *f = F[j] + ((size_t)g->H0 * 2 + (size_t)u) * 64;
                for (int q = 0; q < 4; q++) {
                    __m256i s2 = _mm256_add_epi32(_mm512_castsi512_si256(a[4 * j + q]),
                                                  _mm512_extracti64x4_epi64(a[4 * j + q], 1));
                    if (P == 2) {
                        __m256 sc = _mm256_set1_ps(ag[j][t0 / VNNI_GROUP]);
                        _mm256_storeu_ps(f + 16 * q, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), sc, _mm256_loadu_ps(f + 16 * q)));
                    } else {
                        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s2), _mm256_extracti128_si256(s2, 1));
                        __m128 sc = _mm_set1_ps(ag[j][t0 / VNNI_GROUP]);
                        _mm_storeu_ps(f + 16 * q, _mm_fmadd_ps(_mm_cvtepi32_ps(s4), sc, _mm_loadu_ps(f + 16 * q)));
                    }
                }
            }
        }
}

/* The merged records of trellis codes (vseg_merge: VNNI_MERGED_T, VNNI_MERGED_RAW2), apart from
 * vnni_accum_any: instantiated in its body they slowed the plain records' merged pass by about 3%
 * (d 64 turbo3.5, Zen 5). */
static __attribute__((noinline)) void vnni_accum_merged_tr(const vseg *g, const uint8_t *r0, size_t rb, int n,
                                                            const uint8_t (*W)[VNNI_CALL],
                                                            const float (*ag)[VNNI_CALL / VNNI_GROUP],
                                                            float *const F[4], simd_ahead *ah) {
    if (g->B == VNNI_MERGED_RAW2) {
        if (g->pack == 1) vnni_accum_seg(g, r0, rb, n, W, ag, g->H0, F, VNNI_MERGED_RAW2, ah);
        else vnni_accum_packed(g, r0, rb, n, W, ag, F, 2, VNNI_MERGED_RAW2, ah);
    } else {
        if (g->pack == 1) vnni_accum_seg(g, r0, rb, n, W, ag, g->H0, F, VNNI_MERGED_T, ah);
        else vnni_accum_packed(g, r0, rb, n, W, ag, F, 2, VNNI_MERGED_T, ah);
    }
}

/* vnni_accum_seg and vnni_accum_packed with the segment's width and pack as constants. */
static inline __attribute__((always_inline)) void vnni_accum_any(const vseg *g, const uint8_t *r0, size_t rb, int n, const uint8_t (*W)[VNNI_CALL],
                           const float (*ag)[VNNI_CALL / VNNI_GROUP], float *const F[4], simd_ahead *ah) {
#define ACCUM(call)                                                                                            \
    switch (g->B) {                                                                                            \
    case 4: call(4); break;                                                                                    \
    case 3: call(3); break;                                                                                    \
    case 2: call(2); break;                                                                                    \
    default: call(1); break;                                                                                   \
    }
#define WHOLE(B) vnni_accum_seg(g, r0, rb, n, W, ag, g->H0, F, B, ah)
#define PACK2(B) vnni_accum_packed(g, r0, rb, n, W, ag, F, 2, B, ah)
#define PACK4(B) vnni_accum_packed(g, r0, rb, n, W, ag, F, 4, B, ah)
    if (g->B < 0) { /* merged (vseg_merge), trellis codes */
        vnni_accum_merged_tr(g, r0, rb, n, W, ag, F, ah);
    } else if (g->B == 0) { /* merged, plain codes */
        if (g->pack == 1) WHOLE(0);
        else PACK2(0);
    } else if (g->pack == 1) {
        ACCUM(WHOLE)
    } else if (g->pack == 2) {
        ACCUM(PACK2)
    } else {
        ACCUM(PACK4)
    }
#undef ACCUM
#undef WHOLE
#undef PACK2
#undef PACK4
}

static int vnni_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk, const float *p,
                                  size_t ps, int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    const tq_attn_kernels *fallback = tq_attn_kernels_avx512();
    int kl;
    vseg g[2];
    float alpha;
    const int tr = tq_record_trellis(x);
    if (!vnni_prepare(x, g, &alpha, &kl))
        return tr ? trellis_rows_accum(x, rec, nk, p, ps, nq, acc, as, tq_record_lanes(x))
                  : fallback->accum_turbo_lanes(x, rec, nk, p, ps, nq, acc, as, ahead);
    vseg mg = g[0]; /* what vseg_merge does not set (gcc cannot see it unread otherwise) */
    const int merged = vseg_merge(x, g, &mg);
    const int L0 = x->seg[0].count / 8, Lm = merged ? L0 + x->seg[1].count / 8 : 0;
    size_t rb = x->rec_bytes;
    simd_ahead ah = simd_ahead_init(ahead, nk);
    int ok = 1;
    float sc[VNNI_CALL];
    _Alignas(64) uint8_t W[4][VNNI_CALL];
    float ag[4][VNNI_CALL / VNNI_GROUP];
    _Alignas(64) float F[4][128 * VNNI_MAX_BLOCKS];
    for (int c0 = 0; c0 < nk; c0 += VNNI_CALL) {
        int n = nk - c0 < VNNI_CALL ? nk - c0 : VNNI_CALL;
        const uint8_t *r0 = rec + (size_t)c0 * rb;
        ok &= simd_rec_scales_run(x, r0, n, sc);
        for (int j = 0; j < nq; j += 4) {
            int m4 = nq - j < 4 ? nq - j : 4;
            /* ŵ of the four queries over the whole quads [0, nfull) (absent queries: 0) */
            int nfull = n / 4 * 4, fin = 1;
            for (int k = 0; k < 4; k++)
                for (int g0 = 0; g0 < nfull; g0 += VNNI_GROUP) {
                    int gn = nfull - g0 < VNNI_GROUP ? nfull - g0 : VNNI_GROUP;
                    __m512 w[VNNI_GROUP / 16], m = _mm512_setzero_ps();
                    for (int i = 0; i < VNNI_GROUP / 16; i++) {
                        int cnt = gn - 16 * i;
                        __mmask16 mk = k >= m4 || cnt <= 0 ? 0 : cnt >= 16 ? 0xFFFF : (__mmask16)((1u << cnt) - 1u);
                        const float *pk = p + (size_t)(j + (k < m4 ? k : 0)) * ps + (size_t)(c0 + g0 + 16 * i);
                        w[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, pk), _mm512_maskz_loadu_ps(mk, sc + g0 + 16 * i));
                        /* w ∈ [0, FLT_MAX]: fails for NaN, ±Inf and negatives */
                        if (_mm512_mask_cmp_ps_mask(mk, w[i], _mm512_setzero_ps(), _CMP_NGE_UQ) |
                            _mm512_mask_cmp_ps_mask(mk, w[i], _mm512_set1_ps(3.4e38f), _CMP_NLE_UQ))
                            fin = 0;
                        m = _mm512_max_ps(m, w[i]);
                    }
                    float mx = _mm512_reduce_max_ps(m);
                    __m512 inv = _mm512_set1_ps(mx > 0.0f ? 255.0f / mx : 0.0f);
                    for (int i = 0; i < VNNI_GROUP / 16; i++)
                        _mm_storeu_si128((__m128i *)(void *)&W[k][g0 + 16 * i],
                                         _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(w[i], inv))));
                    ag[k][g0 / VNNI_GROUP] = alpha * (mx / 255.0f);
                }
            if (!fin) {
                ok &= tr ? trellis_rows_accum(x, r0, n, p + (size_t)j * ps + (size_t)c0, ps, m4,
                                               acc + (size_t)j * as, as, kl)
                         : fallback->accum_turbo_lanes(x, r0, n, p + (size_t)j * ps + (size_t)c0, ps, m4,
                                                       acc + (size_t)j * as, as, TQ_ATTN_NO_AHEAD);
                continue;
            }
            float *Fp[4] = {F[0], F[1], F[2], F[3]};
            for (int k = 0; k < 4; k++) memset(F[k], 0, sizeof(float) * (size_t)kl);
            const uint8_t(*Wc)[VNNI_CALL] = (const uint8_t(*)[VNNI_CALL])W;
            const float(*agc)[VNNI_CALL / VNNI_GROUP] = (const float(*)[VNNI_CALL / VNNI_GROUP])ag;
            if (merged) vnni_accum_any(&mg, r0, rb, nfull, Wc, agc, Fp, j == 0 ? &ah : NULL);
            for (int s = 0; s < x->n_seg && !merged; s++)
                vnni_accum_any(&g[s], r0, rb, nfull, Wc, agc, Fp, j == 0 && s == 0 ? &ah : NULL);
            /* buffer order → lane layout (merged: the one block's lanes to their segments) */
            for (int k = 0; k < m4 && merged; k++) {
                float *A = acc + (size_t)(j + k) * as;
                for (int u = 0; u < 2; u++)
                    for (int r = 0; r < 4; r++)
                        for (int L = 0; L < 4; L++)
                            for (int q = 0; q < 4; q++) {
                                int l = 4 * L + r;
                                if (l < Lm)
                                    A[(l < L0 ? 0 : 128 - L0) + 16 * (4 * u + q) + l] += F[k][(size_t)u * 64 + 16 * r + 4 * L + q];
                            }
            }
            for (int k = 0; k < m4 && !merged; k++) {
                float *A = acc + (size_t)(j + k) * as;
                for (int H = 0; H < kl / 128; H++)
                    for (int u = 0; u < 2; u++)
                        for (int r = 0; r < 4; r++)
                            for (int L = 0; L < 4; L++)
                                for (int q = 0; q < 4; q++)
                                    A[128 * H + 16 * (4 * u + q) + 4 * L + r] +=
                                        F[k][((size_t)H * 2 + (size_t)u) * 64 + 16 * r + 4 * L + q];
            }
            /* the last n % 4 tokens: the float kernel */
            if (n % 4) {
                int t = n / 4 * 4;
                ok &= tr ? trellis_rows_accum(x, r0 + (size_t)t * rb, n - t, p + (size_t)j * ps + (size_t)(c0 + t), ps, m4,
                                               acc + (size_t)j * as, as, kl)
                         : fallback->accum_turbo_lanes(x, r0 + (size_t)t * rb, n - t, p + (size_t)j * ps + (size_t)(c0 + t), ps, m4,
                                                       acc + (size_t)j * as, as, TQ_ATTN_NO_AHEAD);
            }
        }
    }
    return ok;
}

static tq_attn_kernels vnni_table;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

static void vnni_init(void) {
    vnni_table = *tq_attn_kernels_avx512();
    vnni_table.name = "avx512-vnni";
    vnni_table.score_turbo_lanes = vnni_score_turbo_lanes;
    vnni_table.lanes_prep_bytes = vnni_prep_bytes;
    vnni_table.prep_turbo_lanes = vnni_prep_turbo_lanes;
    vnni_table.score_turbo_lanes_prepared = vnni_score_prepared;
    vnni_table.accum_turbo_lanes = vnni_accum_turbo_lanes;
    vnni_table.trellis_lanes = 1 << 2 | 1 << 3 | 1 << 4;
    for (int B = 1; B <= 4; B++)
        for (int tr = 0; tr < 3; tr++)
            for (int lg = 0; lg < 3; lg++) vctl_make(&vnni_ctl[B][tr][lg], B, tr, lg);
}

const tq_attn_kernels *tq_attn_kernels_avx512_vnni(void) {
    __builtin_cpu_init();
    if (!tq_attn_kernels_avx512() || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vbmi") ||
        !__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("fma"))
        return NULL;
    pthread_once(&vnni_once, vnni_init);
    return &vnni_table;
}

#else

const tq_attn_kernels *tq_attn_kernels_avx512_vnni(void) { return NULL; }

#endif

/*
 * AVX-512 (F/BW/VL/DQ) + FMA kernels; contracts in kernels.h, ground truth in ref.c.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c and nothing more (no
 * VBMI: vpermb and vpcompressb are not available on every AVX-512 machine).
 *
 * Layout of a packed group (kernels.h): index i at bits [i·b, (i+1)·b). Sixteen consecutive
 * indices fill exactly 2b bytes, and index i of such a block lies inside bytes
 * ⌊i·b/8⌋ and ⌊i·b/8⌋ + 1 of it, so one load broadcast to the four 128-bit lanes (4, 8 or 16
 * bytes), one vpshufb that moves those two bytes into 32-bit lane i (none for b ≤ 2), one
 * variable shift and one mask give sixteen indices.
 *
 * Packing goes the other way with multiply-adds: bytes → pairs (vpmaddubsw), pairs → quads
 * (vpmaddwd), quads → octets (64-bit shift and or), one vpshufb that glues the two octets'
 * b bytes each together, and one byte-masked store of 2b bytes.
 *
 * Quantization is the reference's branchless binary search, level by level for sixteen lanes
 * at once; the boundary each lane compares against comes from a register permute (one or two
 * registers: the first six levels of any width) and from gathers below that.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>
#define TQ_TRELLIS_VW 16 /* floats per vector: the trellis search's width */
#include "trellis_search.h"

#define TQ_INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------------------------------- */
/* Fixed-order 16-lane sums (kernels.h): lane j += j+8, += j+4, += j+2, += j+1.              */
/* ---------------------------------------------------------------------------------------- */

TQ_INLINE float lane_tree16(__m512 acc) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* Lanes i < r of a 16-lane mask (r ≤ 16). */
TQ_INLINE __mmask16 lanes_below(int r) { return (__mmask16)((1u << r) - 1u); }

/* Bytes j < r of a 16-byte mask (r ≤ 16). */
TQ_INLINE __mmask16 bytes_below(size_t r) { return (__mmask16)((1u << r) - 1u); }

static float avx512_sumsq(const float *x, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
    }
    if (i < n) {
        __mmask16 m = lanes_below(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        acc = _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(v, v));
    }
    return lane_tree16(acc);
}

/* ---------------------------------------------------------------------------------------- */
/* Walsh–Hadamard transform                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* One in-register butterfly stage: lane j (low half of its pair) gets x_j + x_{j+h}, lane j+h
 * gets x_j − x_{j+h}. fma(x, ±1, partner) rounds once, and x·(±1) is exact, so this is
 * bit-identical to the reference add and subtract. */
TQ_INLINE __m512 bfly_in(__m512 x, __m512 partner, __m512 sign) {
    return _mm512_fmadd_ps(x, sign, partner);
}

TQ_INLINE __m512 wht16(__m512 v) {
    const __m512 s1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    const __m512 s2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    const __m512 s4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    const __m512 s8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
    v = bfly_in(v, _mm512_permute_ps(v, 0xB1), s1);
    v = bfly_in(v, _mm512_permute_ps(v, 0x4E), s2);
    v = bfly_in(v, _mm512_shuffle_f32x4(v, v, 0xB1), s4);
    v = bfly_in(v, _mm512_shuffle_f32x4(v, v, 0x4E), s8);
    return v;
}

TQ_INLINE __m256 wht8(__m256 v) {
    const __m256 s1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
    const __m256 s2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
    const __m256 s4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    v = _mm256_fmadd_ps(v, s1, _mm256_permute_ps(v, 0xB1));
    v = _mm256_fmadd_ps(v, s2, _mm256_permute_ps(v, 0x4E));
    v = _mm256_fmadd_ps(v, s4, _mm256_permute2f128_ps(v, v, 0x01));
    return v;
}

/* Every register index spelled out, so that the block lives in registers with any compiler
 * (a loop over an array of vectors is left on the stack by some). */
#define TQ_REP16(X)                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* Stages 1 .. 16·nv/2 of a block of nv registers (nv ≤ 16: 256 floats), in registers. */
TQ_INLINE void rht_block(float *x, const float *signs, const int nv, const int with_signs) {
    __m512 v[16];
#define TQ_LOAD(j)                                                                                 \
    if ((j) < nv) {                                                                                \
        v[j] = _mm512_loadu_ps(x + 16 * (j));                                                      \
        if (with_signs) v[j] = _mm512_mul_ps(v[j], _mm512_loadu_ps(signs + 16 * (j)));             \
        v[j] = wht16(v[j]);                                                                        \
    }
#define TQ_BFLY(j, h)                                                                              \
    if (((j) & (h)) == 0 && (j) + (h) < nv) {                                                      \
        __m512 a_ = v[j], b_ = v[((j) + (h)) & 15];                                                \
        v[j] = _mm512_add_ps(a_, b_);                                                              \
        v[((j) + (h)) & 15] = _mm512_sub_ps(a_, b_);                                               \
    }
#define TQ_BFLY1(j) TQ_BFLY(j, 1)
#define TQ_BFLY2(j) TQ_BFLY(j, 2)
#define TQ_BFLY4(j) TQ_BFLY(j, 4)
#define TQ_BFLY8(j) TQ_BFLY(j, 8)
#define TQ_STORE(j) if ((j) < nv) _mm512_storeu_ps(x + 16 * (j), v[j]);
    TQ_REP16(TQ_LOAD)
    TQ_REP16(TQ_BFLY1)
    TQ_REP16(TQ_BFLY2)
    TQ_REP16(TQ_BFLY4)
    TQ_REP16(TQ_BFLY8)
    TQ_REP16(TQ_STORE)
#undef TQ_LOAD
#undef TQ_BFLY
#undef TQ_BFLY1
#undef TQ_BFLY2
#undef TQ_BFLY4
#undef TQ_BFLY8
#undef TQ_STORE
}

/* One butterfly stage of stride h (a multiple of 16) over n floats in memory. */
static void rht_mem_stage(float *x, size_t n, size_t h) {
    for (size_t i = 0; i < n; i += 2 * h)
        for (size_t j = i; j < i + h; j += 16) {
            __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
            _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
            _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
        }
}

/* Stages h and 2h together (four registers per step): each element still sees stage h before
 * stage 2h, as in the reference. */
static void rht_mem_stage2(float *x, size_t n, size_t h) {
    for (size_t i = 0; i < n; i += 4 * h)
        for (size_t j = i; j < i + h; j += 16) {
            __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
            __m512 c = _mm512_loadu_ps(x + j + 2 * h), d = _mm512_loadu_ps(x + j + 3 * h);
            __m512 a1 = _mm512_add_ps(a, b), b1 = _mm512_sub_ps(a, b);
            __m512 c1 = _mm512_add_ps(c, d), d1 = _mm512_sub_ps(c, d);
            _mm512_storeu_ps(x + j, _mm512_add_ps(a1, c1));
            _mm512_storeu_ps(x + j + h, _mm512_add_ps(b1, d1));
            _mm512_storeu_ps(x + j + 2 * h, _mm512_sub_ps(a1, c1));
            _mm512_storeu_ps(x + j + 3 * h, _mm512_sub_ps(b1, d1));
        }
}

static void avx512_rht(float *x, const float *signs, int log2n) {
    if (log2n < 3) {
        tq_ref_rht(x, signs, log2n);
        return;
    }
    if (log2n == 3) {
        __m256 v = _mm256_loadu_ps(x);
        if (signs) v = _mm256_mul_ps(v, _mm256_loadu_ps(signs));
        _mm256_storeu_ps(x, wht8(v));
        return;
    }
    size_t n = (size_t)1 << log2n;
#define TQ_BLOCK(nv)                                                                               \
    do {                                                                                           \
        if (signs) rht_block(x, signs, (nv), 1);                                                   \
        else rht_block(x, NULL, (nv), 0);                                                          \
    } while (0)
    switch (log2n) {
    case 4: TQ_BLOCK(1); return;
    case 5: TQ_BLOCK(2); return;
    case 6: TQ_BLOCK(4); return;
    case 7: TQ_BLOCK(8); return;
    case 8: TQ_BLOCK(16); return;
    default: break;
    }
#undef TQ_BLOCK
    for (size_t off = 0; off < n; off += 256) {
        if (signs) rht_block(x + off, signs + off, 16, 1);
        else rht_block(x + off, NULL, 16, 0);
    }
    size_t h = 256;
    for (; 4 * h <= n; h *= 4) rht_mem_stage2(x, n, h);
    if (h < n) rht_mem_stage(x, n, h);
}

/* ---------------------------------------------------------------------------------------- */
/* Packing and unpacking of 16 indices (2b bytes)                                           */
/* ---------------------------------------------------------------------------------------- */

/* vpshufb control that moves bytes ⌊i·b/8⌋ and ⌊i·b/8⌋+1 into 32-bit lane i (0x80: zero). The
 * second byte only when the index straddles into it. Compile-time constants once b is. */
#define TQ_UB0(b, i) (((i) * (b)) >> 3)
#define TQ_UCT(b, i)                                                                               \
    ((int)((uint32_t)TQ_UB0(b, i) |                                                                \
           ((((((i) * (b)) & 7) + (b) > 8) ? (uint32_t)TQ_UB0(b, i) + 1u : 0x80u) << 8) |          \
           0x80800000u))
#define TQ_USH(b, i) (((i) * (b)) & 7)

TQ_INLINE __m512i unpack_ctrl(const int b) {
    return _mm512_setr_epi32(TQ_UCT(b, 0), TQ_UCT(b, 1), TQ_UCT(b, 2), TQ_UCT(b, 3),
                             TQ_UCT(b, 4), TQ_UCT(b, 5), TQ_UCT(b, 6), TQ_UCT(b, 7),
                             TQ_UCT(b, 8), TQ_UCT(b, 9), TQ_UCT(b, 10), TQ_UCT(b, 11),
                             TQ_UCT(b, 12), TQ_UCT(b, 13), TQ_UCT(b, 14), TQ_UCT(b, 15));
}

TQ_INLINE __m512i unpack_shift(const int b) {
    return _mm512_setr_epi32(TQ_USH(b, 0), TQ_USH(b, 1), TQ_USH(b, 2), TQ_USH(b, 3),
                             TQ_USH(b, 4), TQ_USH(b, 5), TQ_USH(b, 6), TQ_USH(b, 7),
                             TQ_USH(b, 8), TQ_USH(b, 9), TQ_USH(b, 10), TQ_USH(b, 11),
                             TQ_USH(b, 12), TQ_USH(b, 13), TQ_USH(b, 14), TQ_USH(b, 15));
}

/* Bytes a 16-index block needs, loaded and broadcast so that every 128-bit lane holds them:
 * 4 (b ≤ 2: one 32-bit word holds all sixteen), 8 (b ≤ 4) or 16. From memory the broadcast is
 * part of the load. */
TQ_INLINE size_t block_width(const int b) { return b <= 2 ? 4 : b <= 4 ? 8 : 16; }

TQ_INLINE __m512i load_block(const uint8_t *p, const int b) {
    if (b <= 2) {
        uint32_t w;
        memcpy(&w, p, sizeof w);
        return _mm512_set1_epi32((int)w);
    }
    if (b <= 4) {
        uint64_t w;
        memcpy(&w, p, sizeof w);
        return _mm512_set1_epi64((long long)w);
    }
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
}

/* The same from the last avail (< block_width) bytes of the group, without reading past it. */
TQ_INLINE __m512i load_block_tail(const uint8_t *p, size_t avail, const int b) {
    __m128i raw = _mm_maskz_loadu_epi8(bytes_below(avail), p);
    if (b <= 2) return _mm512_broadcastd_epi32(raw);
    if (b <= 4) return _mm512_broadcastq_epi64(raw);
    return _mm512_broadcast_i32x4(raw);
}

/* The 16 indices of a block broadcast by load_block. */
TQ_INLINE __m512i unpack16(__m512i v, const int b, __m512i ctrl, __m512i shift) {
    const __m512i mask = _mm512_set1_epi32((1 << b) - 1);
    if (b == 8) return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
    if (b <= 2) {
        const __m512i sh = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(b));
        return _mm512_and_si512(_mm512_srlv_epi32(v, sh), mask);
    }
    v = _mm512_shuffle_epi8(v, ctrl);
    return _mm512_and_si512(_mm512_srlv_epi32(v, shift), mask);
}

/* Glue control: bytes 0..b−1 of the low octet, then bytes 0..b−1 of the high one, then zeros. */
#define TQ_MC(b, j) ((char)((j) < (b) ? (j) : (j) < 2 * (b) ? (j) - (b) + 8 : 0x80))

TQ_INLINE __m128i pack_merge(const int b) {
    return _mm_setr_epi8(TQ_MC(b, 0), TQ_MC(b, 1), TQ_MC(b, 2), TQ_MC(b, 3), TQ_MC(b, 4),
                         TQ_MC(b, 5), TQ_MC(b, 6), TQ_MC(b, 7), TQ_MC(b, 8), TQ_MC(b, 9),
                         TQ_MC(b, 10), TQ_MC(b, 11), TQ_MC(b, 12), TQ_MC(b, 13), TQ_MC(b, 14),
                         TQ_MC(b, 15));
}

/* 16 indices (each < 2^b, one per byte of bytes) → their 2b packed bytes, then zeros.
 * vpmaddubsw takes the weights as the unsigned operand and the indices (< 2^b ≤ 128) as the
 * signed one, so the weight 2^7 still fits; b = 8 is already packed. */
TQ_INLINE __m128i pack16_bytes(__m128i bytes, const int b) {
    if (b == 8) return bytes;
    __m128i w1 = _mm_set1_epi16((short)(1 | ((1 << b) << 8)));
    __m128i w2 = _mm_set1_epi32(1 | ((1 << (2 * b)) << 16));
    __m128i v16 = _mm_maddubs_epi16(w1, bytes);   /* i0 + i1·2^b: 2b bits */
    __m128i v32 = _mm_madd_epi16(v16, w2);        /* quads: 4b bits */
    __m128i hi = _mm_slli_epi64(_mm_srli_epi64(v32, 32), 4 * b);
    __m128i lo = _mm_blend_epi32(v32, _mm_setzero_si128(), 0xA);
    return _mm_shuffle_epi8(_mm_or_si128(hi, lo), pack_merge(b));
}

TQ_INLINE __m128i pack16(__m512i idx, const int b) {
    return pack16_bytes(_mm512_cvtepi32_epi8(idx), b);
}

/* ---------------------------------------------------------------------------------------- */
/* Codebook lookups                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* A codebook of 2^b floats held in registers (b ≤ 6), or read by gathers (b ≥ 7). */
typedef struct {
    __m512 t[4];
    const float *mem;
} book;

TQ_INLINE book load_book(const float *values, const int b) {
    book bk;
    int levels = 1 << b;
    bk.mem = values;
    for (int j = 0; j < 4; j++) bk.t[j] = _mm512_setzero_ps();
    if (b <= 6) {
        for (int j = 0; j * 16 < levels; j++) {
            int r = levels - 16 * j;
            bk.t[j] = _mm512_maskz_loadu_ps(lanes_below(r < 16 ? r : 16), values + 16 * j);
        }
    }
    return bk;
}

/* The squares c·c, the same float products the reference forms. */
TQ_INLINE book square_book(book bk) {
    for (int j = 0; j < 4; j++) bk.t[j] = _mm512_mul_ps(bk.t[j], bk.t[j]);
    return bk;
}

TQ_INLINE __m512 lookup(const book *bk, __m512i idx, const int b) {
    if (b <= 4) return _mm512_permutexvar_ps(idx, bk->t[0]);
    if (b == 5) return _mm512_permutex2var_ps(bk->t[0], idx, bk->t[1]);
    if (b == 6) {
        __m512 lo = _mm512_permutex2var_ps(bk->t[0], idx, bk->t[1]);
        __m512 hi = _mm512_permutex2var_ps(bk->t[2], idx, bk->t[3]);
        return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo, hi);
    }
    return _mm512_i32gather_ps(idx, bk->mem, 4);
}

/* ---------------------------------------------------------------------------------------- */
/* Quantization: the reference's binary search, sixteen lanes at a time                     */
/* ---------------------------------------------------------------------------------------- */

/* The search state. For b ≤ 5 the 2^b − 1 sorted boundaries sit in one register (two for b = 5)
 * and the search runs on idx directly (candidate idx + step − 1). For b ≥ 6 the first six levels
 * run on the node number k (idx = k·2^(b−L) after L levels) against per-level tables
 * T_L[k] = boundaries[(2k+1)·2^(b−1−L) − 1] (≤ 16 entries: vpermps; 32 at level 5: vpermt2ps),
 * the rest (b = 7, 8) by gathers. */
typedef struct {
    __m512 t[5];
    __m512 t5_lo, t5_hi; /* level 5 (32 entries, b ≥ 6): one two-register permute */
    __m512 first;
    const float *bounds;
} searcher;

/* T_L[k] for k = first .. first + 15 (lanes k < count), by one gather: no scalar stores that
 * a vector load would have to wait for. */
TQ_INLINE __m512 level_table(const float *boundaries, const int b, const int level, int first,
                             int count) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i k = _mm512_add_epi32(_mm512_set1_epi32(first),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                   14, 15));
    __m512i pos = _mm512_sub_epi32(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_add_epi32(k, k), one), b - 1 - level), one);
    __mmask16 m = lanes_below(count - first < 16 ? count - first : 16);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, pos, boundaries, 4);
}

TQ_INLINE searcher make_searcher(const float *boundaries, const int b) {
    searcher se;
    se.bounds = boundaries;
    for (int j = 0; j < 5; j++) se.t[j] = _mm512_setzero_ps();
    se.t5_lo = se.t5_hi = _mm512_setzero_ps();
    se.first = _mm512_set1_ps(boundaries[(1 << (b - 1)) - 1]);
    if (b <= 5) {
        int nb = (1 << b) - 1;
        se.t[0] = _mm512_maskz_loadu_ps(lanes_below(nb < 16 ? nb : 16), boundaries);
        if (b == 5) se.t[1] = _mm512_maskz_loadu_ps(lanes_below(nb - 16), boundaries + 16);
    } else {
        for (int level = 1; level < 5; level++)
            se.t[level] = level_table(boundaries, b, level, 0, 1 << level);
        se.t5_lo = level_table(boundaries, b, 5, 0, 32);
        se.t5_hi = level_table(boundaries, b, 5, 16, 32);
    }
    return se;
}

TQ_INLINE __m512i search(const searcher *se, __m512 s, const int b) {
    if (b <= 5) {
        __mmask16 m = _mm512_cmp_ps_mask(s, se->first, _CMP_GT_OQ);
        __m512i idx = _mm512_maskz_mov_epi32(m, _mm512_set1_epi32(1 << (b - 1)));
        for (int step = b >= 2 ? 1 << (b - 2) : 0; step > 0; step >>= 1) {
            __m512i cand = _mm512_add_epi32(idx, _mm512_set1_epi32(step - 1));
            __m512 c = b == 5 ? _mm512_permutex2var_ps(se->t[0], cand, se->t[1])
                              : _mm512_permutexvar_ps(cand, se->t[0]);
            m = _mm512_cmp_ps_mask(s, c, _CMP_GT_OQ);
            idx = _mm512_mask_add_epi32(idx, m, idx, _mm512_set1_epi32(step));
        }
        return idx;
    }
    const __m512i one = _mm512_set1_epi32(1);
    __mmask16 m = _mm512_cmp_ps_mask(s, se->first, _CMP_GT_OQ);
    __m512i k = _mm512_maskz_mov_epi32(m, one);
    for (int level = 1; level < 5; level++) {
        m = _mm512_cmp_ps_mask(s, _mm512_permutexvar_ps(k, se->t[level]), _CMP_GT_OQ);
        k = _mm512_add_epi32(k, k);
        k = _mm512_mask_add_epi32(k, m, k, one);
    }
    if (b == 5) return k;
    m = _mm512_cmp_ps_mask(s, _mm512_permutex2var_ps(se->t5_lo, k, se->t5_hi), _CMP_GT_OQ);
    k = _mm512_add_epi32(k, k);
    k = _mm512_mask_add_epi32(k, m, k, one);
    if (b == 6) return k;
    __m512i idx = _mm512_slli_epi32(k, b - 6);
    for (int step = b >= 7 ? 1 << (b - 7) : 0; step > 0; step >>= 1) {
        __m512i cand = _mm512_add_epi32(idx, _mm512_set1_epi32(step - 1));
        __m512 c = _mm512_i32gather_ps(cand, se->bounds, 4);
        m = _mm512_cmp_ps_mask(s, c, _CMP_GT_OQ);
        idx = _mm512_mask_add_epi32(idx, m, idx, _mm512_set1_epi32(step));
    }
    return idx;
}

/* c² of each index, the same float product the reference forms. */
TQ_INLINE __m512 lookup_sq(const book *sq, __m512i idx, const int b) {
    if (b <= 6) return lookup(sq, idx, b);
    __m512 c = _mm512_i32gather_ps(idx, sq->mem, 4);
    return _mm512_mul_ps(c, c);
}

TQ_INLINE float quantize_pack_b(const float *x, float scale, int n, const int b,
                                const float *boundaries, const float *centroids, uint8_t *out) {
    searcher se = make_searcher(boundaries, b);
    book sq = load_book(centroids, b);
    if (b <= 6) sq = square_book(sq);
    const __m512 vscale = _mm512_set1_ps(scale);
    const __mmask16 store_mask = bytes_below((size_t)(2 * b));
    const size_t nbytes = tq_group_bytes((size_t)n, b);
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    size_t p = 0;
    for (; i + 16 <= n; i += 16, p += (size_t)(2 * b)) {
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(x + i), vscale);
        __m512i idx = search(&se, s, b);
        acc = _mm512_add_ps(acc, lookup_sq(&sq, idx, b));
        _mm_mask_storeu_epi8(out + p, store_mask, pack16(idx, b));
    }
    if (p < nbytes) {
        /* The last < 16 indices, then the zero padding up to the word boundary; at most 16
         * bytes remain (2b + 2 when b is odd, 2b otherwise). */
        __mmask16 m = lanes_below(n - i);
        __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vscale);
        __m512i idx = _mm512_maskz_mov_epi32(m, search(&se, s, b));
        acc = _mm512_mask_add_ps(acc, m, acc, lookup_sq(&sq, idx, b));
        _mm_mask_storeu_epi8(out + p, bytes_below(nbytes - p), pack16(idx, b));
    }
    return lane_tree16(acc);
}

static float avx512_quantize_pack(const float *x, float scale, int n, int bits,
                                  const float *boundaries, const float *centroids,
                                  uint8_t *out) {
    switch (bits) {
    case 1: return quantize_pack_b(x, scale, n, 1, boundaries, centroids, out);
    case 2: return quantize_pack_b(x, scale, n, 2, boundaries, centroids, out);
    case 3: return quantize_pack_b(x, scale, n, 3, boundaries, centroids, out);
    case 4: return quantize_pack_b(x, scale, n, 4, boundaries, centroids, out);
    case 5: return quantize_pack_b(x, scale, n, 5, boundaries, centroids, out);
    case 6: return quantize_pack_b(x, scale, n, 6, boundaries, centroids, out);
    case 7: return quantize_pack_b(x, scale, n, 7, boundaries, centroids, out);
    default: return quantize_pack_b(x, scale, n, 8, boundaries, centroids, out);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels on packed codes: one loop, three bodies                                            */
/* ---------------------------------------------------------------------------------------- */

enum { OP_LOOKUP, OP_DOT, OP_AXPY };

/* Streams the n indices 16 at a time: blocks by plain broadcast loads while those stay inside
 * the group, the last ones by byte-masked loads that never read past it. */
TQ_INLINE float codes_b(const uint8_t *in, int n, const int b, const float *centroids,
                        float scalar, const float *q, float *out, const int op) {
    const book bk = load_book(centroids, b);
    const __m512i ctrl = unpack_ctrl(b), shift = unpack_shift(b);
    const __m512 vs = _mm512_set1_ps(scalar);
    const size_t nbytes = tq_group_bytes((size_t)n, b);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    size_t p = 0;
    /* Two blocks per step (32 indices, 4b bytes) so that dot has two accumulator chains. */
    const size_t width = block_width(b);
    for (; i + 32 <= n && p + 2 * (size_t)b + width <= nbytes; i += 32, p += (size_t)(4 * b)) {
        __m512i i0 = unpack16(load_block(in + p, b), b, ctrl, shift);
        __m512i i1 = unpack16(load_block(in + p + 2 * b, b), b, ctrl, shift);
        __m512 c0 = lookup(&bk, i0, b), c1 = lookup(&bk, i1, b);
        if (op == OP_LOOKUP) {
            _mm512_storeu_ps(out + i, _mm512_mul_ps(vs, c0));
            _mm512_storeu_ps(out + i + 16, _mm512_mul_ps(vs, c1));
        } else if (op == OP_DOT) {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), c0, acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), c1, acc1);
        } else {
            _mm512_storeu_ps(out + i, _mm512_fmadd_ps(vs, c0, _mm512_loadu_ps(out + i)));
            _mm512_storeu_ps(out + i + 16,
                             _mm512_fmadd_ps(vs, c1, _mm512_loadu_ps(out + i + 16)));
        }
    }
    for (; i < n; i += 16, p += (size_t)(2 * b)) {
        int r = n - i;
        __mmask16 m = lanes_below(r < 16 ? r : 16);
        size_t avail = nbytes - p;
        __m512i raw = avail >= width ? load_block(in + p, b) : load_block_tail(in + p, avail, b);
        __m512 c = lookup(&bk, unpack16(raw, b, ctrl, shift), b);
        if (op == OP_LOOKUP) {
            _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(vs, c));
        } else if (op == OP_DOT) {
            acc0 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), c, acc0, m);
        } else {
            __m512 a = _mm512_maskz_loadu_ps(m, out + i);
            _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(vs, c, a));
        }
    }
    return op == OP_DOT ? _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) : 0.0f;
}

#define TQ_BITS_SWITCH(bits, call)                                                                 \
    switch (bits) {                                                                                \
    case 1: call(1); break;                                                                        \
    case 2: call(2); break;                                                                        \
    case 3: call(3); break;                                                                        \
    case 4: call(4); break;                                                                        \
    case 5: call(5); break;                                                                        \
    case 6: call(6); break;                                                                        \
    case 7: call(7); break;                                                                        \
    default: call(8); break;                                                                       \
    }

static void avx512_unpack_lookup(const uint8_t *in, int n, int bits, const float *centroids,
                                 float scale, float *out) {
#define TQ_CALL(b) (void)codes_b(in, n, b, centroids, scale, NULL, out, OP_LOOKUP)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
}

static float avx512_dot_codes(const uint8_t *in, int n, int bits, const float *centroids,
                              const float *q) {
    float r = 0.0f;
#define TQ_CALL(b) r = codes_b(in, n, b, centroids, 0.0f, q, NULL, OP_DOT)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
    return r;
}

static void avx512_axpy_codes(const uint8_t *in, int n, int bits, const float *centroids,
                              float w, float *acc) {
#define TQ_CALL(b) (void)codes_b(in, n, b, centroids, w, NULL, acc, OP_AXPY)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
}

/* The trellis encoder at this set's vector width (trellis_search.h). */
static float avx512_trellis_quantize_pack(const float *x, float scale, int n, int bits,
                                          const float *pairs, int memory, uint8_t *out) {
    return tq_trellis_encode(x, scale, n, bits, pairs, memory, out, 1);
}

static const tq_kernel_table avx512_table = {
    .name = "avx512",
    .rht = avx512_rht,
    .sumsq = avx512_sumsq,
    .quantize_pack = avx512_quantize_pack,
    .unpack_lookup = avx512_unpack_lookup,
    .dot_codes = avx512_dot_codes,
    .axpy_codes = avx512_axpy_codes,
    .trellis_quantize_pack = avx512_trellis_quantize_pack,
};

const tq_kernel_table *tq_kernels_avx512(void) { return &avx512_table; }

#else /* not x86-64 */

const tq_kernel_table *tq_kernels_avx512(void) { return NULL; }

#endif

/*
 * AVX2 + FMA kernels; contracts in kernels.h, ground truth in ref.c.
 *
 * Compiled with -mavx2 -mfma -mf16c. Layout of a packed group (kernels.h): index i at bits
 * [i·b, (i+1)·b). Eight consecutive indices fill exactly b bytes. For b ≤ 4 they fit in one
 * 32-bit word: a broadcast load, one variable shift and one mask give eight indices. Above, index
 * i of a block lies inside bytes ⌊i·b/8⌋ and ⌊i·b/8⌋ + 1 of it, so an 8-byte broadcast load, one
 * vpshufb that moves those two bytes into 32-bit lane i, a shift and a mask do it.
 *
 * Packing goes the other way, sixteen indices at a time, with multiply-adds: bytes → pairs
 * (vpmaddubsw), pairs → quads (vpmaddwd), quads → octets (64-bit shift and or), stored as two
 * overlapping 8-byte writes b bytes apart.
 *
 * Quantization is the reference's branchless binary search, level by level for eight lanes at
 * once; the boundary each lane compares against comes from a broadcast, a blend, vpermps
 * (levels 2..4 of any width) and from gathers below that.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>
#define TQ_TRELLIS_VW 8 /* floats per vector: the trellis search's width */
#define TQ_TRELLIS_NARROW_NATIVE(src, dst)                                                            \
    do {                                                                                              \
        __m256i a_ = _mm256_loadu_si256((const __m256i *)(src));                                      \
        __m128i w_ = _mm_packus_epi32(_mm256_castsi256_si128(a_), _mm256_extracti128_si256(a_, 1)); \
        _mm_storel_epi64((__m128i *)(void *)(dst), _mm_packus_epi16(w_, w_));                       \
    } while (0)
#include "trellis_search.h"

#define TQ_INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------------------------------- */
/* Fixed-order 16-lane sums (kernels.h): lanes 0..7 in lo, 8..15 in hi.                      */
/* ---------------------------------------------------------------------------------------- */

TQ_INLINE float lane_tree16(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* All-ones in the lanes i < r (r may be ≤ 0 or ≥ 8). */
TQ_INLINE __m256i lanes_below(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static float avx2_sumsq(const float *x, int n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        lo = _mm256_add_ps(lo, _mm256_mul_ps(a, a));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(b, b));
    }
    if (i < n) {
        /* Masked-off lanes load +0 and add +0·+0: the lane sums start at +0 and only grow, so
         * adding +0 leaves them bit-identical. */
        int r = n - i;
        __m256 a = _mm256_maskload_ps(x + i, lanes_below(r));
        __m256 b = r > 8 ? _mm256_maskload_ps(x + i + 8, lanes_below(r - 8)) : _mm256_setzero_ps();
        lo = _mm256_add_ps(lo, _mm256_mul_ps(a, a));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(b, b));
    }
    return lane_tree16(lo, hi);
}

/* ---------------------------------------------------------------------------------------- */
/* Walsh–Hadamard transform                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* Stages 1, 2, 4 inside one register: lane j (low half of its pair) gets x_j + x_{j+h}, lane
 * j+h gets x_j − x_{j+h}. fma(x, ±1, partner) rounds once and x·(±1) is exact, so this is
 * bit-identical to the reference add and subtract. */
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

/* Stages 1 .. 8·nv/2 of a block of nv registers (nv ≤ 16: 128 floats), in registers. */
TQ_INLINE void rht_block(float *x, const float *signs, const int nv, const int with_signs) {
    __m256 v[16];
#define TQ_LOAD(j)                                                                                 \
    if ((j) < nv) {                                                                                \
        v[j] = _mm256_loadu_ps(x + 8 * (j));                                                       \
        if (with_signs) v[j] = _mm256_mul_ps(v[j], _mm256_loadu_ps(signs + 8 * (j)));              \
        v[j] = wht8(v[j]);                                                                         \
    }
#define TQ_BFLY(j, h)                                                                              \
    if (((j) & (h)) == 0 && (j) + (h) < nv) {                                                      \
        __m256 a_ = v[j], b_ = v[((j) + (h)) & 15];                                                \
        v[j] = _mm256_add_ps(a_, b_);                                                              \
        v[((j) + (h)) & 15] = _mm256_sub_ps(a_, b_);                                               \
    }
#define TQ_BFLY1(j) TQ_BFLY(j, 1)
#define TQ_BFLY2(j) TQ_BFLY(j, 2)
#define TQ_BFLY4(j) TQ_BFLY(j, 4)
#define TQ_BFLY8(j) TQ_BFLY(j, 8)
#define TQ_STORE(j) if ((j) < nv) _mm256_storeu_ps(x + 8 * (j), v[j]);
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

/* One butterfly stage of stride h (a multiple of 8) over n floats in memory. */
static void rht_mem_stage(float *x, size_t n, size_t h) {
    for (size_t i = 0; i < n; i += 2 * h)
        for (size_t j = i; j < i + h; j += 8) {
            __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
            _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
            _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
        }
}

/* Stages h and 2h together: each element still sees stage h before stage 2h. */
static void rht_mem_stage2(float *x, size_t n, size_t h) {
    for (size_t i = 0; i < n; i += 4 * h)
        for (size_t j = i; j < i + h; j += 8) {
            __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
            __m256 c = _mm256_loadu_ps(x + j + 2 * h), d = _mm256_loadu_ps(x + j + 3 * h);
            __m256 a1 = _mm256_add_ps(a, b), b1 = _mm256_sub_ps(a, b);
            __m256 c1 = _mm256_add_ps(c, d), d1 = _mm256_sub_ps(c, d);
            _mm256_storeu_ps(x + j, _mm256_add_ps(a1, c1));
            _mm256_storeu_ps(x + j + h, _mm256_add_ps(b1, d1));
            _mm256_storeu_ps(x + j + 2 * h, _mm256_sub_ps(a1, c1));
            _mm256_storeu_ps(x + j + 3 * h, _mm256_sub_ps(b1, d1));
        }
}

static void avx2_rht(float *x, const float *signs, int log2n) {
    if (log2n < 3) {
        tq_ref_rht(x, signs, log2n);
        return;
    }
#define TQ_BLOCK(nv)                                                                               \
    do {                                                                                           \
        if (signs) rht_block(x, signs, (nv), 1);                                                   \
        else rht_block(x, NULL, (nv), 0);                                                          \
    } while (0)
    switch (log2n) {
    case 3: TQ_BLOCK(1); return;
    case 4: TQ_BLOCK(2); return;
    case 5: TQ_BLOCK(4); return;
    case 6: TQ_BLOCK(8); return;
    case 7: TQ_BLOCK(16); return;
    default: break;
    }
#undef TQ_BLOCK
    size_t n = (size_t)1 << log2n;
    for (size_t off = 0; off < n; off += 128) {
        if (signs) rht_block(x + off, signs + off, 16, 1);
        else rht_block(x + off, NULL, 16, 0);
    }
    size_t h = 128;
    for (; 4 * h <= n; h *= 4) rht_mem_stage2(x, n, h);
    if (h < n) rht_mem_stage(x, n, h);
}

/* ---------------------------------------------------------------------------------------- */
/* Packing and unpacking                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* vpshufb control that moves bytes ⌊i·b/8⌋ and ⌊i·b/8⌋+1 into 32-bit lane i (0x80: zero), the
 * second byte only when the index straddles into it. Compile-time constants once b is. */
#define TQ_UB0(b, i) (((i) * (b)) >> 3)
#define TQ_UCT(b, i)                                                                               \
    ((int)((uint32_t)TQ_UB0(b, i) |                                                                \
           ((((((i) * (b)) & 7) + (b) > 8) ? (uint32_t)TQ_UB0(b, i) + 1u : 0x80u) << 8) |          \
           0x80800000u))
#define TQ_USH(b, i) (((i) * (b)) & 7)

/* The 8 indices held in the low b bytes of raw. */
TQ_INLINE __m256i unpack8(uint64_t raw, const int b) {
    if (b == 8) return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)raw));
    if (b <= 4) {
        /* All eight indices lie in the low 32 bits: broadcast, shift lane i by i·b, mask. */
        const __m256i sh = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
        __m256i v = _mm256_set1_epi32((int)(uint32_t)raw);
        return _mm256_and_si256(_mm256_srlv_epi32(v, sh), _mm256_set1_epi32((1 << b) - 1));
    }
    const __m256i ctrl = _mm256_setr_epi32(TQ_UCT(b, 0), TQ_UCT(b, 1), TQ_UCT(b, 2), TQ_UCT(b, 3),
                                           TQ_UCT(b, 4), TQ_UCT(b, 5), TQ_UCT(b, 6), TQ_UCT(b, 7));
    const __m256i shift = _mm256_setr_epi32(TQ_USH(b, 0), TQ_USH(b, 1), TQ_USH(b, 2), TQ_USH(b, 3),
                                            TQ_USH(b, 4), TQ_USH(b, 5), TQ_USH(b, 6), TQ_USH(b, 7));
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)raw), ctrl);
    return _mm256_and_si256(_mm256_srlv_epi32(v, shift), _mm256_set1_epi32((1 << b) - 1));
}

TQ_INLINE uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The bytes an 8-index block needs: 4 for b ≤ 4 (so the load folds into vpbroadcastd), else 8. */
TQ_INLINE uint64_t load_block(const uint8_t *p, const int b) {
    if (b > 4) return load_u64(p);
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The bytes [p, p + 8) of a group of nbytes (a multiple of 4), zeros past its end, without
 * reading past it: the last 8 (or 4) bytes of the group, shifted down. */
TQ_INLINE uint64_t load_tail_u64(const uint8_t *in, size_t p, size_t nbytes) {
    size_t avail = nbytes - p;
    if (avail >= 8) return load_u64(in + p);
    if (nbytes >= 8) return load_u64(in + nbytes - 8) >> (8 * (8 - avail));
    uint32_t w;
    memcpy(&w, in, sizeof w); /* nbytes == 4 */
    return (uint64_t)(w >> (8 * p));
}

/* Glue control: bytes 0..b−1 of the low octet, then bytes 0..b−1 of the high one, then zeros. */
#define TQ_MC(b, j) ((char)((j) < (b) ? (j) : (j) < 2 * (b) ? (j) - (b) + 8 : 0x80))

/* 16 indices (each < 2^b, one per byte) → two uint64 octets of 8b bits each (low: indices
 * 0..7). vpmaddubsw takes the weights as the unsigned operand and the indices (< 2^b ≤ 128) as
 * the signed one, so the weight 2^7 still fits; b = 8 is already packed. */
TQ_INLINE __m128i pack16_octets(__m128i bytes, const int b) {
    if (b == 8) return bytes;
    __m128i w1 = _mm_set1_epi16((short)(1 | ((1 << b) << 8)));
    __m128i w2 = _mm_set1_epi32(1 | ((1 << (2 * b)) << 16));
    __m128i v16 = _mm_maddubs_epi16(w1, bytes); /* pairs: 2b bits */
    __m128i v32 = _mm_madd_epi16(v16, w2);      /* quads: 4b bits */
    __m128i hi = _mm_slli_epi64(_mm_srli_epi64(v32, 32), 4 * b);
    __m128i lo = _mm_blend_epi32(v32, _mm_setzero_si128(), 0xA);
    return _mm_or_si128(hi, lo);
}

/* The two octets glued: the 2b packed bytes, then zeros. */
TQ_INLINE __m128i glue_octets(__m128i octets, const int b) {
    if (b == 8) return octets;
    const __m128i merge = _mm_setr_epi8(TQ_MC(b, 0), TQ_MC(b, 1), TQ_MC(b, 2), TQ_MC(b, 3),
                                        TQ_MC(b, 4), TQ_MC(b, 5), TQ_MC(b, 6), TQ_MC(b, 7),
                                        TQ_MC(b, 8), TQ_MC(b, 9), TQ_MC(b, 10), TQ_MC(b, 11),
                                        TQ_MC(b, 12), TQ_MC(b, 13), TQ_MC(b, 14), TQ_MC(b, 15));
    return _mm_shuffle_epi8(octets, merge);
}

/* Indices 0..7 in i0 and 8..15 in i1 → their two packed octets. */
TQ_INLINE __m128i pack16(__m256i i0, __m256i i1, const int b) {
    __m256i w = _mm256_packus_epi32(i0, i1); /* i0[0..3] i1[0..3] | i0[4..7] i1[4..7] */
    w = _mm256_packus_epi16(w, w);           /* dwords: A0 B0 A0 B0 | A1 B1 A1 B1 */
    w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return pack16_octets(_mm256_castsi256_si128(w), b);
}

/* ---------------------------------------------------------------------------------------- */
/* Codebook lookups                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* A codebook of 2^b floats held in registers (b ≤ 4), or read by gathers (b ≥ 5: four
 * vpermps and three blends measured slower than one gather). */
typedef struct {
    __m256 t[2];
    const float *mem;
} book;

TQ_INLINE book load_book(const float *values, const int b) {
    book bk;
    bk.mem = values;
    bk.t[0] = bk.t[1] = _mm256_setzero_ps();
    if (b <= 3) {
        bk.t[0] = _mm256_maskload_ps(values, lanes_below(1 << b));
    } else if (b == 4) {
        bk.t[0] = _mm256_loadu_ps(values);
        bk.t[1] = _mm256_loadu_ps(values + 8);
    }
    return bk;
}

/* The squares c·c, the same float products the reference forms. */
TQ_INLINE book square_book(book bk) {
    bk.t[0] = _mm256_mul_ps(bk.t[0], bk.t[0]);
    bk.t[1] = _mm256_mul_ps(bk.t[1], bk.t[1]);
    return bk;
}

TQ_INLINE __m256 lookup(const book *bk, __m256i idx, const int b) {
    if (b <= 3) return _mm256_permutevar8x32_ps(bk->t[0], idx);
    if (b == 4) {
        /* vpermps reads the low 3 bits; bit 3, moved to the sign, picks the register. */
        __m256 lo = _mm256_permutevar8x32_ps(bk->t[0], idx);
        __m256 hi = _mm256_permutevar8x32_ps(bk->t[1], idx);
        return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return _mm256_i32gather_ps(bk->mem, idx, 4);
}

/* ---------------------------------------------------------------------------------------- */
/* Quantization: the reference's binary search, eight lanes at a time                        */
/* ---------------------------------------------------------------------------------------- */

/* The search runs on the node number k: after L levels idx = k·2^(b−L), and level L compares
 * against T_L[k] = boundaries[(2k+1)·2^(b−1−L) − 1]. Level 0 is one broadcast, level 1 a blend
 * of two, levels 2 and 3 one vpermps each (4 and 8 entries), level 4 two vpermps and a blend
 * (16 entries), deeper levels (b ≥ 6) gathers. */
typedef struct {
    __m256 first, second_lo, second_hi, t2, t3;
    __m256 t4_lo, t4_hi; /* level 4 (16 entries, b ≥ 5): two vpermps and a blend */
    const float *bounds;
} searcher;

/* T_L[k] for k = first .. first + 7 (lanes k < count), by one gather: no scalar stores that a
 * vector load would have to wait for. */
TQ_INLINE __m256 level_table(const float *boundaries, const int b, const int level, int first,
                             int count) {
    const __m256i one = _mm256_set1_epi32(1);
    __m256i k =
        _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i pos = _mm256_sub_epi32(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_add_epi32(k, k), one), b - 1 - level), one);
    __m256 m = _mm256_castsi256_ps(lanes_below(count - first));
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), boundaries, pos, m, 4);
}

TQ_INLINE searcher make_searcher(const float *boundaries, const int b) {
    searcher se;
    se.bounds = boundaries;
    se.first = _mm256_set1_ps(boundaries[(1 << (b - 1)) - 1]);
    se.second_lo = se.second_hi = se.t2 = se.t3 = se.t4_lo = se.t4_hi = _mm256_setzero_ps();
    if (b >= 2) {
        se.second_lo = _mm256_set1_ps(boundaries[(1 << (b - 2)) - 1]);
        se.second_hi = _mm256_set1_ps(boundaries[3 * (1 << (b - 2)) - 1]);
    }
    if (b >= 3) se.t2 = level_table(boundaries, b, 2, 0, 4);
    if (b >= 4) se.t3 = level_table(boundaries, b, 3, 0, 8);
    if (b >= 5) {
        se.t4_lo = level_table(boundaries, b, 4, 0, 16);
        se.t4_hi = level_table(boundaries, b, 4, 8, 16);
    }
    return se;
}

TQ_INLINE __m256i search(const searcher *se, __m256 s, const int b) {
    __m256 m = _mm256_cmp_ps(s, se->first, _CMP_GT_OQ);
    __m256i k = _mm256_srli_epi32(_mm256_castps_si256(m), 31);
    if (b == 1) return k;
    /* k = 2k + (s > c): the compare mask is −1 where true. */
    m = _mm256_cmp_ps(s, _mm256_blendv_ps(se->second_lo, se->second_hi, m), _CMP_GT_OQ);
    k = _mm256_sub_epi32(_mm256_add_epi32(k, k), _mm256_castps_si256(m));
    if (b == 2) return k;
    m = _mm256_cmp_ps(s, _mm256_permutevar8x32_ps(se->t2, k), _CMP_GT_OQ);
    k = _mm256_sub_epi32(_mm256_add_epi32(k, k), _mm256_castps_si256(m));
    if (b == 3) return k;
    m = _mm256_cmp_ps(s, _mm256_permutevar8x32_ps(se->t3, k), _CMP_GT_OQ);
    k = _mm256_sub_epi32(_mm256_add_epi32(k, k), _mm256_castps_si256(m));
    if (b == 4) return k;
    {
        __m256 lo = _mm256_permutevar8x32_ps(se->t4_lo, k);
        __m256 hi = _mm256_permutevar8x32_ps(se->t4_hi, k);
        __m256 c = _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
        m = _mm256_cmp_ps(s, c, _CMP_GT_OQ);
        k = _mm256_sub_epi32(_mm256_add_epi32(k, k), _mm256_castps_si256(m));
    }
    if (b == 5) return k;
    __m256i idx = _mm256_slli_epi32(k, b - 5);
    for (int step = b >= 6 ? 1 << (b - 6) : 0; step > 0; step >>= 1) {
        __m256i cand = _mm256_add_epi32(idx, _mm256_set1_epi32(step - 1));
        __m256 c = _mm256_i32gather_ps(se->bounds, cand, 4);
        __m256i mi = _mm256_castps_si256(_mm256_cmp_ps(s, c, _CMP_GT_OQ));
        idx = _mm256_add_epi32(idx, _mm256_and_si256(mi, _mm256_set1_epi32(step)));
    }
    return idx;
}

/* c² of each index, the same float product the reference forms. */
TQ_INLINE __m256 lookup_sq(const book *sq, __m256i idx, const int b) {
    if (b <= 4) return lookup(sq, idx, b);
    __m256 c = _mm256_i32gather_ps(sq->mem, idx, 4);
    return _mm256_mul_ps(c, c);
}

TQ_INLINE float quantize_pack_b(const float *x, float scale, int n, const int b,
                                const float *boundaries, const float *centroids, uint8_t *out) {
    const searcher se = make_searcher(boundaries, b);
    book sq = load_book(centroids, b);
    if (b <= 4) sq = square_book(sq);
    const __m256 vscale = _mm256_set1_ps(scale);
    const size_t nbytes = tq_group_bytes((size_t)n, b);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int i = 0;
    size_t p = 0;
    for (; i + 16 <= n; i += 16, p += (size_t)(2 * b)) {
        __m256i i0 = search(&se, _mm256_mul_ps(_mm256_loadu_ps(x + i), vscale), b);
        __m256i i1 = search(&se, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vscale), b);
        lo = _mm256_add_ps(lo, lookup_sq(&sq, i0, b));
        hi = _mm256_add_ps(hi, lookup_sq(&sq, i1, b));
        __m128i octets = pack16(i0, i1, b);
        if (p + (size_t)b + 8 <= nbytes) {
            /* Two 8-byte stores, the second over the first's zero upper bytes. */
            _mm_storel_epi64((__m128i *)(out + p), octets);
            _mm_storeh_pi((__m64 *)(void *)(out + p + b), _mm_castsi128_ps(octets));
        } else {
            uint8_t tmp[16];
            _mm_storeu_si128((__m128i *)tmp, glue_octets(octets, b));
            memcpy(out + p, tmp, (size_t)(2 * b));
        }
    }
    if (p < nbytes) {
        /* The last < 16 indices, then the zero padding up to the word boundary (≤ 16 bytes):
         * masked-off lanes get index 0 and add +0 to their lane sums. */
        int r = n - i;
        __m256i m0 = lanes_below(r), m1 = lanes_below(r - 8);
        __m256 x0 = _mm256_maskload_ps(x + i, m0);
        __m256 x1 = r > 8 ? _mm256_maskload_ps(x + i + 8, m1) : _mm256_setzero_ps();
        __m256i i0 = _mm256_and_si256(m0, search(&se, _mm256_mul_ps(x0, vscale), b));
        __m256i i1 = _mm256_and_si256(m1, search(&se, _mm256_mul_ps(x1, vscale), b));
        lo = _mm256_add_ps(lo, _mm256_and_ps(_mm256_castsi256_ps(m0), lookup_sq(&sq, i0, b)));
        hi = _mm256_add_ps(hi, _mm256_and_ps(_mm256_castsi256_ps(m1), lookup_sq(&sq, i1, b)));
        uint8_t tmp[16];
        _mm_storeu_si128((__m128i *)tmp, glue_octets(pack16(i0, i1, b), b));
        memcpy(out + p, tmp, nbytes - p);
    }
    return lane_tree16(lo, hi);
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

static float avx2_quantize_pack(const float *x, float scale, int n, int bits,
                                const float *boundaries, const float *centroids, uint8_t *out) {
    float r = 0.0f;
#define TQ_CALL(b) r = quantize_pack_b(x, scale, n, b, boundaries, centroids, out)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
    return r;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels on packed codes: one loop, three bodies                                            */
/* ---------------------------------------------------------------------------------------- */

enum { OP_LOOKUP, OP_DOT, OP_AXPY };

TQ_INLINE float codes_b(const uint8_t *in, int n, const int b, const float *centroids,
                        float scalar, const float *q, float *out, const int op) {
    const book bk = load_book(centroids, b);
    const __m256 vs = _mm256_set1_ps(scalar);
    const size_t nbytes = tq_group_bytes((size_t)n, b);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    size_t p = 0;
    /* Two blocks of 8 per step (2b bytes) while both block loads stay inside the group. */
    const size_t width = b <= 4 ? 4 : 8;
    for (; i + 16 <= n && p + (size_t)b + width <= nbytes; i += 16, p += (size_t)(2 * b)) {
        __m256 c0 = lookup(&bk, unpack8(load_block(in + p, b), b), b);
        __m256 c1 = lookup(&bk, unpack8(load_block(in + p + b, b), b), b);
        if (op == OP_LOOKUP) {
            _mm256_storeu_ps(out + i, _mm256_mul_ps(vs, c0));
            _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(vs, c1));
        } else if (op == OP_DOT) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), c0, acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), c1, acc1);
        } else {
            _mm256_storeu_ps(out + i, _mm256_fmadd_ps(vs, c0, _mm256_loadu_ps(out + i)));
            _mm256_storeu_ps(out + i + 8, _mm256_fmadd_ps(vs, c1, _mm256_loadu_ps(out + i + 8)));
        }
    }
    for (; i < n; i += 8, p += (size_t)b) {
        __m256i m = lanes_below(n - i);
        __m256 c = lookup(&bk, unpack8(load_tail_u64(in, p, nbytes), b), b);
        if (op == OP_LOOKUP) {
            _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(vs, c));
        } else if (op == OP_DOT) {
            c = _mm256_and_ps(c, _mm256_castsi256_ps(m));
            acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(q + i, m), c, acc0);
        } else {
            __m256 a = _mm256_maskload_ps(out + i, m);
            _mm256_maskstore_ps(out + i, m, _mm256_fmadd_ps(vs, c, a));
        }
    }
    if (op != OP_DOT) return 0.0f;
    __m256 s8 = _mm256_add_ps(acc0, acc1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

static void avx2_unpack_lookup(const uint8_t *in, int n, int bits, const float *centroids,
                               float scale, float *out) {
#define TQ_CALL(b) (void)codes_b(in, n, b, centroids, scale, NULL, out, OP_LOOKUP)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
}

static float avx2_dot_codes(const uint8_t *in, int n, int bits, const float *centroids,
                            const float *q) {
    float r = 0.0f;
#define TQ_CALL(b) r = codes_b(in, n, b, centroids, 0.0f, q, NULL, OP_DOT)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
    return r;
}

static void avx2_axpy_codes(const uint8_t *in, int n, int bits, const float *centroids, float w,
                            float *acc) {
#define TQ_CALL(b) (void)codes_b(in, n, b, centroids, w, NULL, acc, OP_AXPY)
    TQ_BITS_SWITCH(bits, TQ_CALL)
#undef TQ_CALL
}

/* The trellis encoder at this set's vector width (trellis_search.h). */
static float avx2_trellis_quantize_pack(const float *x, float scale, int n, int bits,
                                        const float *pairs, int memory, uint8_t *out) {
    return tq_trellis_encode(x, scale, n, bits, pairs, memory, out, 1);
}

static const tq_kernel_table avx2_table = {
    .name = "avx2",
    .rht = avx2_rht,
    .sumsq = avx2_sumsq,
    .quantize_pack = avx2_quantize_pack,
    .unpack_lookup = avx2_unpack_lookup,
    .dot_codes = avx2_dot_codes,
    .axpy_codes = avx2_axpy_codes,
    .trellis_quantize_pack = avx2_trellis_quantize_pack,
};

const tq_kernel_table *tq_kernels_avx2(void) { return &avx2_table; }

#else /* not x86-64 */

const tq_kernel_table *tq_kernels_avx2(void) { return NULL; }

#endif

/*
 * Key scoring in integers: AVX-512 VNNI + VBMI on the lane layout (kvcache_internal.h).
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
 * codes themselves (doc/kvcache.md §5). A query with a non-finite coordinate goes to the float
 * kernel. TQ_INT8_SCORES=0 in the environment keeps the float kernel (attn_ref.c).
 */
#include "../kvcache_internal.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VBMI__)

#include <math.h>
#include <pthread.h>

#include "attn_simd.h"

#define VNNI_MAX_BLOCKS 9 /* 128-coordinate blocks of a lane row: head dims ≤ 1024, 2 segments */

typedef struct vseg {
    __m512i align;        /* vpermb: lane l ← bytes [Bl, Bl + 4) of the block */
    __m512i lo, hi;       /* vpmultishiftqb controls: codes 0–3 / 4–7 of each lane as bytes */
    __m512i table;        /* entry e: 128 + ĉ[e mod 2^B] */
    int B, nblk;
    size_t off, bytes;
} vseg;

/* α and the segments' state; 0 if some centroid is not finite (then the float kernel). */
static int vseg_setup(const tq_kv_tensor *x, vseg *g, float *alpha) {
    float m = 0.0f;
    for (int s = 0; s < x->n_seg; s++)
        for (int i = 0; i < 1 << x->seg[s].bits; i++) {
            float a = fabsf(x->seg[s].centroids[i]);
            if (!(a <= 3.4e38f)) return 0;
            m = a > m ? a : m;
        }
    if (m == 0.0f) return 0;
    *alpha = m / 127.0f;
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits;
        uint8_t align[64], lo[64], hi[64], table[64];
        for (int l = 0; l < 16; l++)
            for (int j = 0; j < 4; j++) align[4 * l + j] = (uint8_t)(B * l + j);
        for (int j = 0; j < 8; j++) {
            int lane = j / 4, k = j % 4; /* byte j of a qword: lane 2i + lane, code k (+4) */
            for (int w = 0; w < 8; w++) {
                lo[8 * w + j] = (uint8_t)(32 * lane + B * k);
                hi[8 * w + j] = (uint8_t)(32 * lane + B * (k + 4));
            }
        }
        for (int e = 0; e < 64; e++) {
            float c = x->seg[s].centroids[e & ((1 << B) - 1)] / *alpha;
            table[e] = (uint8_t)(128 + (int)lrintf(c)); /* |c| ≤ 127 */
        }
        g[s].align = _mm512_loadu_si512(align);
        g[s].lo = _mm512_loadu_si512(lo);
        g[s].hi = _mm512_loadu_si512(hi);
        g[s].table = _mm512_loadu_si512(table);
        g[s].B = B;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
    }
    return 1;
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

/* hsum16 (attn_simd.h) in int32. */
static inline __m512i hsum16_i32(const __m512i a[16]) {
#define SHUF(x, y, imm) _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), imm))
    __m512i t[8], u[4];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]),
                                _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_epi32(SHUF(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                SHUF(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#undef SHUF
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
        size_t at = (size_t)h * 16 * (size_t)B, n = g->bytes - at;
        if (n > 16 * (size_t)B) n = 16 * (size_t)B;
        __mmask64 mk = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
        const int8_t *q0 = qb[0] + 128 * (H0 + h), *q1 = qb[1] + 128 * (H0 + h),
                     *q2 = qb[2] + 128 * (H0 + h), *q3 = qb[3] + 128 * (H0 + h);
        for (int m = 0; m < 4; m++) {
            __m512i raw = _mm512_maskz_loadu_epi8(mk, r[m] + g->off + at);
            if (B != 4) raw = _mm512_permutexvar_epi8(g->align, raw);
            __m512i cl = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(g->lo, raw), g->table);
            __m512i ch = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(g->hi, raw), g->table);
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

static int vnni_score_turbo_lanes(const tq_kv_tensor *x, const uint8_t *rec, int nk, const float *q,
                                  size_t qs, int nq, float *S, size_t ss) {
    const tq_attn_kernels *fallback = tq_attn_kernels_avx512();
    int kl = tq_kv_lanes(x);
    vseg g[2];
    float alpha;
    if (kl > 128 * VNNI_MAX_BLOCKS || !vseg_setup(x, g, &alpha))
        return fallback->score_turbo_lanes(x, rec, nk, q, qs, nq, S, ss);
    size_t rb = x->rec_bytes;
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        _Alignas(64) int8_t qb[4][128 * VNNI_MAX_BLOCKS];
        float beta[4];
        int32_t bias[4];
        int fin = 1;
        for (int k = 0; k < m4 && fin; k++)
            fin = quant_query(q + (size_t)(j + k) * qs, kl, qb[k], &beta[k], &bias[k]);
        if (!fin) {
            ok &= fallback->score_turbo_lanes(x, rec, nk, q + (size_t)j * qs, qs, m4, S + (size_t)j * ss, ss);
            continue;
        }
        /* Absent queries (a last group of fewer than 4) and tokens repeat the first of their
         * group; their sums are dropped. */
        const int8_t *qp[4];
        float ab[16];
        for (int k = 0; k < 4; k++) {
            int kk = k < m4 ? k : 0;
            qp[k] = qb[kk];
            for (int m = 0; m < 4; m++) ab[4 * k + m] = alpha * beta[kk];
        }
        const __m512i vbias = _mm512_setr_epi32(bias[0], bias[0], bias[0], bias[0],
                                                bias[m4 > 1], bias[m4 > 1], bias[m4 > 1], bias[m4 > 1],
                                                bias[m4 > 2 ? 2 : 0], bias[m4 > 2 ? 2 : 0],
                                                bias[m4 > 2 ? 2 : 0], bias[m4 > 2 ? 2 : 0],
                                                bias[m4 > 3 ? 3 : 0], bias[m4 > 3 ? 3 : 0],
                                                bias[m4 > 3 ? 3 : 0], bias[m4 > 3 ? 3 : 0]);
        const __m512 vab = _mm512_loadu_ps(ab);
        for (int t = 0; t < nk; t += 4) {
            int n4 = nk - t < 4 ? nk - t : 4;
            const uint8_t *r[4];
            float sc[4], out[16];
            for (int m = 0; m < 4; m++) r[m] = rec + (size_t)(t + (m < n4 ? m : 0)) * rb;
            ok &= simd_rec_scales(x, r, 4, n4, sc);
            __m512i a[16];
            for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_si512();
            int H0 = 0;
            for (int s = 0; s < x->n_seg; s++) {
                switch (g[s].B) {
                case 4: vnni_4x4_seg(&g[s], r, qp, H0, a, 4); break;
                case 3: vnni_4x4_seg(&g[s], r, qp, H0, a, 3); break;
                case 2: vnni_4x4_seg(&g[s], r, qp, H0, a, 2); break;
                default: vnni_4x4_seg(&g[s], r, qp, H0, a, 1); break;
                }
                H0 += g[s].nblk;
            }
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hsum16_i32(a), vbias)), vab);
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

static tq_attn_kernels vnni_table;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

static void vnni_init(void) {
    vnni_table = *tq_attn_kernels_avx512();
    vnni_table.name = "avx512-vnni";
    vnni_table.score_turbo_lanes = vnni_score_turbo_lanes;
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

/* What the x86 attention kernels (attn_avx2.c, attn_avx512.c, attn_vnni.c) share; included only
 * from files compiled with F16C. */
#ifndef TQ_KERNELS_ATTN_SIMD_H
#define TQ_KERNELS_ATTN_SIMD_H

#include <immintrin.h>
#include <string.h>

#include "attn_kernels.h"
#include "trellis_rows.h"

/* The fp16 value at p (any alignment, native order). */
static inline float simd_load_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* pw[i] = rho^(i+1) for i < w (chain_scan's carry-in powers). */
static inline void simd_chain_powers(float *pw, int w, float rho) {
    pw[0] = rho;
    for (int i = 1; i < w; i++) pw[i] = pw[i - 1] * rho;
}
/* chain_scan's chains (attn_kernels.h): for each row of s (stride apart), x the row and [a, b)
 * each chain of its n positions, the first ending at the first chain start after 0 (phase),
 * then every `chain`: the vector forms share the walk. */
#define SIMD_FOR_CHAINS(s, stride, nr, n, phase, chain, x, a, b)                                  \
    for (int r_ = 0, first_ = (chain) - (phase) % (chain); r_ < (nr); r_++)                      \
        for (float *x = (s) + (size_t)r_ * (stride); x; x = NULL)                                \
            for (int a = 0, b = first_ < (n) ? first_ : (n); a < (n);                            \
                 a = b, b = b + (chain) < (n) ? b + (chain) : (n))

/* The scale of a TURBO record's row: norm · inv_sqrt_dim, or −1 for a corrupt norm
 * (tq_record_norm_ok, as ref_row_scale in attn_ref.c). */
static inline float simd_rec_scale(const tq_record *x, const uint8_t *r) {
    float n;
    if (x->norm_f32) memcpy(&n, r + x->norm_off, 4);
    else n = simd_load_f16(r + x->norm_off);
    return tq_record_norm_ok(n) ? n * x->inv_sqrt_dim : -1.0f;
}

/* Prefetching what the caller reads next (tq_attn_ahead), spread over a call: simd_ahead_init
 * for a call of nk records, then simd_ahead_step after each m records read, which prefetches
 * the next m records' share of the bytes. */
typedef struct simd_ahead {
    const uint8_t *p, *end;
    size_t per; /* bytes per record of the call, rounded up */
} simd_ahead;
static inline simd_ahead simd_ahead_init(tq_attn_ahead a, int nk) {
    simd_ahead s = {a.p, a.p, 0};
    if (a.p && a.bytes && nk > 0) s.end = a.p + a.bytes, s.per = (a.bytes + (size_t)nk - 1) / (size_t)nk;
    return s;
}
static inline void simd_ahead_step(simd_ahead *s, int m) {
    if (s->p == s->end) return;
    size_t left = (size_t)(s->end - s->p), want = s->per * (size_t)m, n = want < left ? want : left;
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(s->p + o), _MM_HINT_T0);
    s->p += n;
}

/* sc[m] = the scales of records r[m], m < n (0 for a corrupt norm); returns 0 if one of the
 * first `real` records is corrupt (the others repeat one of them), else 1. */
static inline int simd_rec_scales(const tq_record *x, const uint8_t *const *r, int n, int real,
                                  float *sc) {
    int ok = 1;
    for (int m = 0; m < n; m++) {
        sc[m] = simd_rec_scale(x, r[m]);
        if (sc[m] < 0.0f) {
            if (m < real) ok = 0;
            sc[m] = 0.0f;
        }
    }
    return ok;
}

/* The same for n consecutive records (stride x->rec_bytes) from rec: the norms gathered, then
 * converted and checked eight at a time (F16C; the same values as simd_rec_scale). */
static inline int simd_rec_scales_run(const tq_record *x, const uint8_t *rec, int n, float *sc) {
    const uint8_t *p = rec + x->norm_off;
    size_t rb = x->rec_bytes;
    int t = 0, bad = 0;
    if (!x->norm_f32) {
        const __m256 lim = _mm256_set1_ps(TQ_RECORD_NORM_MAX), zero = _mm256_setzero_ps(),
                     isd = _mm256_set1_ps(x->inv_sqrt_dim);
        for (; t + 8 <= n; t += 8) {
            uint16_t h[8];
            for (int m = 0; m < 8; m++) memcpy(&h[m], p + (size_t)(t + m) * rb, 2);
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
            /* good: tq_record_norm_ok(v), 0 ≤ v ≤ TQ_RECORD_NORM_MAX (NaN fails) */
            __m256 good = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ), _mm256_cmp_ps(v, lim, _CMP_LE_OQ));
            bad |= _mm256_movemask_ps(good) ^ 0xFF;
            _mm256_storeu_ps(sc + t, _mm256_and_ps(_mm256_mul_ps(v, isd), good));
        }
    }
    for (; t < n; t++) {
        sc[t] = simd_rec_scale(x, rec + (size_t)t * rb);
        if (sc[t] < 0.0f) bad = 1, sc[t] = 0.0f;
    }
    return !bad;
}

#if defined(__AVX2__)
/* Bytes [off, off + 16) / [off, off + 32) of a block of which the first n are stored (n a
 * multiple of 4): the rest read as zero, by masked loads, which touch no byte past n. */
static inline __m128i simd_load16_upto(const uint8_t *src, int off, int n) {
    if (off + 16 <= n) return _mm_loadu_si128((const __m128i *)(const void *)(src + off));
    __m128i end = _mm_add_epi32(_mm_setr_epi32(4, 8, 12, 16), _mm_set1_epi32(off));
    return _mm_maskload_epi32((const int *)(const void *)(src + off), _mm_cmpgt_epi32(_mm_set1_epi32(n + 1), end));
}
static inline __m256i simd_load32_upto(const uint8_t *src, int off, int n) {
    if (off + 32 <= n) return _mm256_loadu_si256((const __m256i *)(const void *)(src + off));
    __m256i end = _mm256_add_epi32(_mm256_setr_epi32(4, 8, 12, 16, 20, 24, 28, 32), _mm256_set1_epi32(off));
    return _mm256_maskload_epi32((const int *)(const void *)(src + off),
                                 _mm256_cmpgt_epi32(_mm256_set1_epi32(n + 1), end));
}

#endif

#if defined(__AVX512F__)
/* Sixteen horizontal sums at once: a[4k + m] for query k, token m (k, m < 4); returns the
 * vector whose 128-bit block k holds the sums of a[4k], …, a[4k + 3] (query k, tokens 0..3). */
static inline __m512 hsum16(const __m512 a[16]) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* u[k] block b holds query k's four token sums over block b of the inputs. */
    __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Stores block k of r (scaled by the four token scales) to S + k·ss + t. */
static inline void store16(__m512 r, const float sc[4], float *S, size_t ss) {
    r = _mm512_mul_ps(r, _mm512_broadcast_f32x4(_mm_loadu_ps(sc)));
    _mm_storeu_ps(S, _mm512_castps512_ps128(r));
    _mm_storeu_ps(S + ss, _mm512_extractf32x4_ps(r, 1));
    _mm_storeu_ps(S + 2 * ss, _mm512_extractf32x4_ps(r, 2));
    _mm_storeu_ps(S + 3 * ss, _mm512_extractf32x4_ps(r, 3));
}
#endif

#endif

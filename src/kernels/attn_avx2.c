/*
 * AVX2 + FMA attention kernels (attn_kernels.h); ground truth in attn_ref.c. Compiled with
 * -mavx2 -mfma -mf16c.
 */
#include "attn_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn_simd.h"

static inline __m256i lanes_below(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void avx2_dot_multi(const float *k, const float *q, size_t q_stride, int nq, int n,
                           float *out) {
    int j = 0;
    for (; j + 4 <= nq; j += 4) {
        const float *q0 = q + (size_t)j * q_stride, *q1 = q0 + q_stride, *q2 = q1 + q_stride,
                    *q3 = q2 + q_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 kv = _mm256_loadu_ps(k + i);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), kv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + i), kv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + i), kv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + i), kv, a3);
        }
        float r0 = hsum8(a0), r1 = hsum8(a1), r2 = hsum8(a2), r3 = hsum8(a3);
        for (; i < n; i++) {
            r0 += q0[i] * k[i];
            r1 += q1[i] * k[i];
            r2 += q2[i] * k[i];
            r3 += q3[i] * k[i];
        }
        out[j] = r0, out[j + 1] = r1, out[j + 2] = r2, out[j + 3] = r3;
    }
    for (; j < nq; j++) {
        const float *qj = q + (size_t)j * q_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i + 8), _mm256_loadu_ps(k + i + 8), a1);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i), _mm256_loadu_ps(k + i), a0);
        float r = hsum8(_mm256_add_ps(a0, a1));
        for (; i < n; i++) r += qj[i] * k[i];
        out[j] = r;
    }
}

static void avx2_accum_rows(float *acc, const float *p, const float *rows, size_t stride, int nk,
                            int n) {
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8),
               a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride) {
            __m256 w = _mm256_broadcast_ss(p + t);
            a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + i);
        const float *r = rows + i;
        for (int t = 0; t < nk; t++, r += stride)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + t), _mm256_loadu_ps(r), a0);
        _mm256_storeu_ps(acc + i, a0);
    }
    for (; i < n; i++) {
        float a = acc[i];
        for (int t = 0; t < nk; t++) a += p[t] * rows[(size_t)t * stride + i];
        acc[i] = a;
    }
}

/* score_panels: R (≤ 6) query rows against a panel of 16 keys (two vectors): 12 accumulators;
 * each lane a chain of fmas over d in order, as attn_avx512.c's and the reference's. */
static inline __attribute__((always_inline)) void panel_rows256(const float *k0, int n, const float *const *q,
                                                                const int R, float *S, size_t ss) {
    __m256 a[6], b[6];
    for (int r = 0; r < R; r++) a[r] = b[r] = _mm256_setzero_ps();
    for (int d = 0; d < n; d++) {
        const __m256 ka = _mm256_loadu_ps(k0 + 16 * (size_t)d), kb = _mm256_loadu_ps(k0 + 16 * (size_t)d + 8);
        for (int r = 0; r < R; r++) {
            const __m256 qv = _mm256_broadcast_ss(q[r] + d);
            a[r] = _mm256_fmadd_ps(qv, ka, a[r]);
            b[r] = _mm256_fmadd_ps(qv, kb, b[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(S + (size_t)r * ss, a[r]);
        _mm256_storeu_ps(S + (size_t)r * ss + 8, b[r]);
    }
}

static void avx2_score_panels(const float *kp, int nk, int n, const float *q, size_t qsi, int G, size_t qsg,
                              int ni, float *S, size_t ss) {
    const int np = (nk + 15) / 16, nr = ni * G;
    for (int p = 0; p < np; p++) {
        const float *k0 = kp + (size_t)p * 16 * (size_t)n;
        for (int r0 = 0; r0 < nr; r0 += 6) {
            const int R = nr - r0 < 6 ? nr - r0 : 6;
            const float *qr[6];
            for (int r = 0; r < R; r++) qr[r] = q + (size_t)((r0 + r) / G) * qsi + (size_t)((r0 + r) % G) * qsg;
            float *Sr = S + (size_t)r0 * ss + (size_t)p * 16;
            switch (R) {
            case 1: panel_rows256(k0, n, qr, 1, Sr, ss); break;
            case 2: panel_rows256(k0, n, qr, 2, Sr, ss); break;
            case 3: panel_rows256(k0, n, qr, 3, Sr, ss); break;
            case 4: panel_rows256(k0, n, qr, 4, Sr, ss); break;
            case 5: panel_rows256(k0, n, qr, 5, Sr, ss); break;
            default: panel_rows256(k0, n, qr, 6, Sr, ss); break;
            }
        }
    }
}

/* accum_multi: four rows by 16 columns per pass (8 accumulators), each element the fma chain
 * over t of avx2_accum_rows; the columns past the last full 16 by accum_rows itself. */
static void avx2_accum_multi(float *acc, size_t as, const float *p, size_t ps, int nr, const float *rows, size_t stride,
                             int nk, int n) {
    const int n16 = n / 16 * 16;
    int r0 = 0;
    for (; r0 + 4 <= nr; r0 += 4) {
        float *a0p = acc + (size_t)r0 * as;
        const float *p0 = p + (size_t)r0 * ps;
        for (int i = 0; i < n16; i += 16) {
            __m256 a[4][2];
            for (int r = 0; r < 4; r++)
                a[r][0] = _mm256_loadu_ps(a0p + (size_t)r * as + i), a[r][1] = _mm256_loadu_ps(a0p + (size_t)r * as + i + 8);
            const float *rr = rows + i;
            for (int t = 0; t < nk; t++, rr += stride) {
                const __m256 v0 = _mm256_loadu_ps(rr), v1 = _mm256_loadu_ps(rr + 8);
                for (int r = 0; r < 4; r++) {
                    const __m256 w = _mm256_broadcast_ss(p0 + (size_t)r * ps + (size_t)t);
                    a[r][0] = _mm256_fmadd_ps(w, v0, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(w, v1, a[r][1]);
                }
            }
            for (int r = 0; r < 4; r++)
                _mm256_storeu_ps(a0p + (size_t)r * as + i, a[r][0]), _mm256_storeu_ps(a0p + (size_t)r * as + i + 8, a[r][1]);
        }
        if (n16 < n)
            for (int r = 0; r < 4; r++)
                avx2_accum_rows(a0p + (size_t)r * as + n16, p0 + (size_t)r * ps, rows + n16, stride, nk, n - n16);
    }
    for (; r0 < nr; r0++) avx2_accum_rows(acc + (size_t)r0 * as, p + (size_t)r0 * ps, rows, stride, nk, n);
}

/* exp(x) for x ≤ 0, as in attn_avx512.c; 2^k built in the exponent bits. */
static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 y = _mm256_set1_ps(1.0f / 720.0f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static float avx2_exp_sum(float *s, int n, float m) {
    __m256 vm = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        __m256i mk = lanes_below(n - i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_maskload_ps(s + i, mk), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(s + i, mk, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
}

static void avx2_scale(float *y, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), va));
    for (; i < n; i++) y[i] *= a;
}

/* Each chain in vectors of 8: a doubling scan in the vector (v[i] += rho^d·v[i − d] for d = 1,
 * 2, 4: a lane permute and a blend with zero each), then the previous vector's last value
 * carried in with rho^(i+1). */
static void avx2_chain_scan(float *s, size_t stride, int nr, int n, int phase, int chain, float rho) {
    const __m256i i1 = _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6), i2 = _mm256_setr_epi32(0, 0, 0, 1, 2, 3, 4, 5),
                  i4 = _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3), last = _mm256_set1_epi32(7);
    float pw[8];
    simd_chain_powers(pw, 8, rho);
    const __m256 z = _mm256_setzero_ps(), P = _mm256_loadu_ps(pw), d1 = _mm256_set1_ps(pw[0]),
                 d2 = _mm256_set1_ps(pw[1]), d4 = _mm256_set1_ps(pw[3]);
    SIMD_FOR_CHAINS(s, stride, nr, n, phase, chain, x, a, b) {
            __m256 carry = z;
            for (int m = a; m < b; m += 8) {
                const int full = b - m >= 8;
                const __m256i mk = full ? _mm256_set1_epi32(-1) : lanes_below(b - m);
                __m256 v = full ? _mm256_loadu_ps(x + m) : _mm256_maskload_ps(x + m, mk);
                v = _mm256_fmadd_ps(d1, _mm256_blend_ps(_mm256_permutevar8x32_ps(v, i1), z, 0x01), v);
                v = _mm256_fmadd_ps(d2, _mm256_blend_ps(_mm256_permutevar8x32_ps(v, i2), z, 0x03), v);
                v = _mm256_fmadd_ps(d4, _mm256_blend_ps(_mm256_permutevar8x32_ps(v, i4), z, 0x0F), v);
                v = _mm256_fmadd_ps(P, carry, v);
                if (full) _mm256_storeu_ps(x + m, v);
                else _mm256_maskstore_ps(x + m, mk, v);
                carry = _mm256_permutevar8x32_ps(v, last);
            }
    }
}

/* max_ps(x, m) returns m where x is NaN: NaNs are ignored as in the reference. */
static float avx2_shift_scale_max(float *s, int n, float add, float scale) {
    __m256 va = _mm256_set1_ps(add), vs = _mm256_set1_ps(scale), m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(s + i), va), vs);
        _mm256_storeu_ps(s + i, x);
        m = _mm256_max_ps(x, m);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ps(h, _mm_shuffle_ps(h, h, 1));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) {
        s[i] = (s[i] + add) * scale;
        r = s[i] > r ? s[i] : r;
    }
    return r;
}

static void avx2_f16_to_f32(const uint16_t *in, float *out, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
}

static void avx2_q8_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        __m256 d = _mm256_set1_ps(simd_load_f16(rec));
        for (int i = 0; i < n; i += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(rec + 2 + i));
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
            _mm256_storeu_ps(out + b + i, _mm256_mul_ps(d, f));
        }
        rec += 2 + n;
    }
}

static void avx2_q4_0_decode(const uint8_t *rec, int dim, float *out) {
    for (int b = 0; b < dim; b += TQ_KV_BLOCK) {
        int n = dim - b < TQ_KV_BLOCK ? dim - b : TQ_KV_BLOCK;
        int h = n / 2;
        __m256 d = _mm256_set1_ps(simd_load_f16(rec));
        for (int i = 0; i < h; i += 8) {
            __m128i qs = _mm_loadl_epi64((const __m128i *)(rec + 2 + i));
            __m256i w = _mm256_cvtepu8_epi32(qs);
            __m256i lo = _mm256_sub_epi32(_mm256_and_si256(w, _mm256_set1_epi32(15)), _mm256_set1_epi32(8));
            __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(w, 4), _mm256_set1_epi32(8));
            _mm256_storeu_ps(out + b + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
            _mm256_storeu_ps(out + b + h + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
        }
        rec += 2 + h;
    }
}

/* ---- lane layout (record.h, tq_record_lanes): 8 codes per 32-bit lane, 8 lanes per vector ---- */

/* One segment's state: the 2^B centroids repeated over 16 entries, as two 8-entry tables. */
typedef struct lane2_seg {
    __m256 lo, hi;
    int B, nblk;
    size_t off, bytes;
} lane2_seg;

static void lane2_setup(const tq_record *x, lane2_seg *g) {
    for (int s = 0; s < x->n_seg; s++) {
        int B = x->seg[s].bits, m = (1 << B) - 1;
        float rep[16];
        for (int i = 0; i < 16; i++) rep[i] = x->seg[s].centroids[i & m];
        g[s].lo = _mm256_loadu_ps(rep);
        g[s].hi = _mm256_loadu_ps(rep + 8);
        g[s].B = B;
        g[s].nblk = (x->seg[s].count + 127) / 128;
        g[s].off = x->seg[s].off;
        g[s].bytes = ((size_t)x->seg[s].count * (size_t)B + 31) / 32 * 4;
    }
}

/* Lanes 8·half … 8·half + 7 of block h of a segment at p: lane l holds bytes [Bl, Bl + B) of
 * the block in its low bits. A partial last block reads zeros past its bytes (masked loads:
 * no byte past it is touched). */
static inline __attribute__((always_inline)) __m256i lane2_load(const lane2_seg *g, const uint8_t *p,
                                                                int h, int half, int B) {
    size_t at = (size_t)h * 16 * (size_t)B, rest = g->bytes - at;
    int n = rest < 16 * (size_t)B ? (int)rest : 16 * B, o = half * 8 * B;
    const uint8_t *src = p + at;
    switch (B) {
    case 4: return simd_load32_upto(src, o, n);
    case 2: return _mm256_cvtepu16_epi32(simd_load16_upto(src, o, n));
    case 1: return _mm256_cvtepu8_epi32(simd_load16_upto(src, o, n > o + 8 ? o + 8 : n));
    default: {
        /* 3 bytes per lane: lanes 0-3 from bytes 0-11, lanes 4-7 from bytes 12-23 of the half,
         * the upper 16-byte load of the second half ending at the block's last byte. */
        const __m256i sh0 = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                             0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
        const __m256i sh1 = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                             4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
        __m128i a = simd_load16_upto(src, o, n);
        __m128i b = simd_load16_upto(src, o + (half ? 8 : 12), n);
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
        return _mm256_shuffle_epi8(v, half ? sh1 : sh0);
    }
    }
}

/* Centroids of the indices in the low 4 bits of each lane. */
static inline __attribute__((always_inline)) __m256 lane2_lookup(const lane2_seg *g, __m256i L, int B) {
    if (B < 4) return _mm256_permutevar8x32_ps(g->lo, L); /* entries repeat every 2^B */
    __m256 a = _mm256_permutevar8x32_ps(g->lo, L), b = _mm256_permutevar8x32_ps(g->hi, L);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(L, 28)));
}

/* Two tokens (r[0], r[1]) × four queries (q[j], lane layout) of one segment. */
static inline __attribute__((always_inline)) void lanes2_2x4_seg(const lane2_seg *g,
                                                                 const uint8_t *const r[2],
                                                                 const float *const q[4],
                                                                 __m256 a[8], int B) {
    for (int h = 0; h < g->nblk; h++)
        for (int half = 0; half < 2; half++) {
            __m256i La = lane2_load(g, r[0] + g->off, h, half, B);
            __m256i Lb = lane2_load(g, r[1] + g->off, h, half, B);
            for (int k = 0; k < 8; k++) {
                size_t at = 128 * (size_t)h + 16 * (size_t)k + 8 * (size_t)half;
                __m256 va = lane2_lookup(g, La, B), vb = lane2_lookup(g, Lb, B);
                for (int j = 0; j < 4; j++) {
                    __m256 qv = _mm256_loadu_ps(q[j] + at);
                    a[j] = _mm256_fmadd_ps(va, qv, a[j]);
                    a[4 + j] = _mm256_fmadd_ps(vb, qv, a[4 + j]);
                }
                La = _mm256_srli_epi32(La, B), Lb = _mm256_srli_epi32(Lb, B);
            }
        }
}

static int avx2_score_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk,
                                  const float *q, size_t qs, int nq, float *S, size_t ss, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    lane2_seg g[2];
    lane2_setup(x, g);
    size_t rb = x->rec_bytes;
    int ok = 1;
    for (int j = 0; j < nq; j += 4) {
        int m4 = nq - j < 4 ? nq - j : 4;
        for (int t = 0; t < nk; t += 2) {
            /* Absent queries and a lone last token repeat the first of their group. */
            int n2 = nk - t < 2 ? nk - t : 2;
            const uint8_t *r[2] = {rec + (size_t)t * rb, rec + (size_t)(t + n2 - 1) * rb};
            const float *qj[4];
            for (int k = 0; k < 4; k++) qj[k] = q + (size_t)(j + (k < m4 ? k : 0)) * qs;
            float sc[2];
            ok &= simd_rec_scales(x, r, 2, n2, sc);
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
            for (int s = 0; s < x->n_seg; s++) {
                switch (g[s].B) {
                case 4: lanes2_2x4_seg(&g[s], r, qj, a, 4); break;
                case 3: lanes2_2x4_seg(&g[s], r, qj, a, 3); break;
                case 2: lanes2_2x4_seg(&g[s], r, qj, a, 2); break;
                default: lanes2_2x4_seg(&g[s], r, qj, a, 1); break;
                }
                for (int k = 0; k < 4; k++) qj[k] += 128 * (size_t)g[s].nblk;
            }
            for (int k = 0; k < m4; k++)
                for (int m = 0; m < n2; m++)
                    S[(size_t)(j + k) * ss + (size_t)(t + m)] = sc[m] * hsum8(a[4 * m + k]);
        }
    }
    return ok;
}

#define LANE2_MAX_KEYS 256

static int avx2_accum_turbo_lanes(const tq_record *x, const uint8_t *rec, int nk,
                                  const float *p, size_t ps, int nq, float *acc, size_t as, tq_attn_ahead ahead) {
    (void)ahead; /* these kernels prefetch nothing */
    lane2_seg g[2];
    lane2_setup(x, g);
    size_t rb = x->rec_bytes;
    float sc[LANE2_MAX_KEYS], w[4][LANE2_MAX_KEYS];
    int ok = 1;
    for (int t0 = 0; t0 < nk; t0 += LANE2_MAX_KEYS) {
        int n = nk - t0 < LANE2_MAX_KEYS ? nk - t0 : LANE2_MAX_KEYS;
        const uint8_t *r0 = rec + (size_t)t0 * rb;
        ok &= simd_rec_scales_run(x, r0, n, sc);
        for (int j = 0; j < nq; j += 4) {
            int m4 = nq - j < 4 ? nq - j : 4;
            for (int k = 0; k < 4; k++)
                for (int t = 0; t < n; t++)
                    w[k][t] = k < m4 ? p[(size_t)(j + k) * ps + (size_t)(t0 + t)] * sc[t] : 0.0f;
            float *A = acc + (size_t)j * as;
            for (int s = 0; s < x->n_seg; s++) {
                const lane2_seg *gs = &g[s];
                int B = gs->B;
                for (int h = 0; h < gs->nblk; h++)
                    for (int half = 0; half < 2; half++)
                        for (int k0 = 0; k0 < 8; k0 += 2) {
                            __m256 a[8];
                            for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
                            const __m256i shift = _mm256_set1_epi32(B * k0);
                            const uint8_t *pt = r0 + gs->off;
                            for (int t = 0; t < n; t++, pt += rb) {
                                __m256i L;
                                switch (B) {
                                case 4: L = lane2_load(gs, pt, h, half, 4); break;
                                case 3: L = lane2_load(gs, pt, h, half, 3); break;
                                case 2: L = lane2_load(gs, pt, h, half, 2); break;
                                default: L = lane2_load(gs, pt, h, half, 1); break;
                                }
                                L = _mm256_srlv_epi32(L, shift);
                                __m256 v0 = lane2_lookup(gs, L, B == 4 ? 4 : 1);
                                __m256 v1 = lane2_lookup(gs, _mm256_srli_epi32(L, B), B == 4 ? 4 : 1);
                                for (int k = 0; k < 4; k++) {
                                    __m256 wk = _mm256_broadcast_ss(&w[k][t]);
                                    a[k] = _mm256_fmadd_ps(wk, v0, a[k]);
                                    a[4 + k] = _mm256_fmadd_ps(wk, v1, a[4 + k]);
                                }
                            }
                            for (int r = 0; r < 2; r++)
                                for (int k = 0; k < m4; k++) {
                                    float *d = A + (size_t)k * as + 128 * (size_t)h +
                                               16 * (size_t)(k0 + r) + 8 * (size_t)half;
                                    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), a[4 * r + k]));
                                }
                        }
                A += 128 * (size_t)gs->nblk;
            }
        }
    }
    return ok;
}

static const tq_attn_kernels avx2_table = {
    .name = "avx2",
    .dot_multi = avx2_dot_multi,
    .accum_rows = avx2_accum_rows,
    .score_panels = avx2_score_panels,
    .accum_multi = avx2_accum_multi,
    .exp_sum = avx2_exp_sum,
    .scale = avx2_scale,
    .shift_scale_max = avx2_shift_scale_max,
    .chain_scan = avx2_chain_scan,
    .f16_to_f32 = avx2_f16_to_f32,
    .q8_0_decode = avx2_q8_0_decode,
    .q4_0_decode = avx2_q4_0_decode,
    .score_turbo_lanes = avx2_score_turbo_lanes,
    .accum_turbo_lanes = avx2_accum_turbo_lanes,
};

const tq_attn_kernels *tq_attn_kernels_avx2(void) { return &avx2_table; }

#else

const tq_attn_kernels *tq_attn_kernels_avx2(void) { return NULL; }

#endif

/* Scalar reference for the ggml block formats: type table, fp16 loads (converted by the
 * library's tq_f16_to_f32), dequantization, activation quantization and the integer dot
 * products every SIMD kernel is tested against. Layouts: see quants.h and ggml-common.h. */
#include "quants.h"

#include <math.h>
#include <string.h>

#include "turboquant.h"

/* ---- type table ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t elems;
    size_t bytes;
} type_info;

static const type_info type_table[QUANT_TYPE_COUNT] = {
    [QUANT_F32] = {"F32", 1, 4},
    [QUANT_F16] = {"F16", 1, 2},
    [QUANT_Q4_0] = {"Q4_0", QUANT_QK, sizeof(quant_block_q4_0)},
    [QUANT_Q4_1] = {"Q4_1", QUANT_QK, sizeof(quant_block_q4_1)},
    [QUANT_Q5_0] = {"Q5_0", QUANT_QK, sizeof(quant_block_q5_0)},
    [QUANT_Q5_1] = {"Q5_1", QUANT_QK, sizeof(quant_block_q5_1)},
    [QUANT_Q8_0] = {"Q8_0", QUANT_QK, sizeof(quant_block_q8_0)},
    [QUANT_Q2_K] = {"Q2_K", QUANT_QK_K, sizeof(quant_block_q2_K)},
    [QUANT_Q3_K] = {"Q3_K", QUANT_QK_K, sizeof(quant_block_q3_K)},
    [QUANT_Q4_K] = {"Q4_K", QUANT_QK_K, sizeof(quant_block_q4_K)},
    [QUANT_Q5_K] = {"Q5_K", QUANT_QK_K, sizeof(quant_block_q5_K)},
    [QUANT_Q6_K] = {"Q6_K", QUANT_QK_K, sizeof(quant_block_q6_K)},
    [QUANT_Q8_K] = {"Q8_K", QUANT_QK_K, sizeof(quant_block_q8_K)},
    [QUANT_BF16] = {"BF16", 1, 2},
};

const char *quant_status_name(int status) {
    switch (status) {
    case QUANT_OK: return "QUANT_OK";
    case QUANT_ERR_TYPE: return "QUANT_ERR_TYPE";
    case QUANT_ERR_SIZE: return "QUANT_ERR_SIZE";
    case QUANT_ERR_ARG: return "QUANT_ERR_ARG";
    case QUANT_ERR_WORK: return "QUANT_ERR_WORK";
    default: return "QUANT_ERR_UNKNOWN";
    }
}

int quant_type_valid(int type) {
    return type >= 0 && type < QUANT_TYPE_COUNT && type_table[type].name != NULL;
}

const char *quant_type_name(int type) { return quant_type_valid(type) ? type_table[type].name : "?"; }

int64_t quant_block_elems(int type) { return quant_type_valid(type) ? type_table[type].elems : 0; }

size_t quant_block_bytes(int type) { return quant_type_valid(type) ? type_table[type].bytes : 0; }

size_t quant_row_bytes(int type, int64_t n) {
    if (!quant_type_valid(type) || n < 0 || n % type_table[type].elems != 0) return 0;
    return (size_t)(n / type_table[type].elems) * type_table[type].bytes;
}

/* ---- fp16 / bf16 ---------------------------------------------------------------------- */

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_f16_load(const uint8_t p[2]) { return tq_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

float quant_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- dequantization ------------------------------------------------------------------- */

static void dq_q4_0(const quant_block_q4_0 *b, float *y) {
    float d = quant_f16_load(b->d);
    for (int j = 0; j < QUANT_QK / 2; j++) {
        y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
        y[j + QUANT_QK / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void dq_q4_1(const quant_block_q4_1 *b, float *y) {
    float d = quant_f16_load(b->d), m = quant_f16_load(b->m);
    for (int j = 0; j < QUANT_QK / 2; j++) {
        y[j] = (float)(b->qs[j] & 0xF) * d + m;
        y[j + QUANT_QK / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static void dq_q5_0(const quant_block_q5_0 *b, float *y) {
    float d = quant_f16_load(b->d);
    uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QUANT_QK / 2; j++) {
        int lo = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
        int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)(lo - 16) * d;
        y[j + QUANT_QK / 2] = (float)(hi - 16) * d;
    }
}

static void dq_q5_1(const quant_block_q5_1 *b, float *y) {
    float d = quant_f16_load(b->d), m = quant_f16_load(b->m);
    uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QUANT_QK / 2; j++) {
        int lo = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
        int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)lo * d + m;
        y[j + QUANT_QK / 2] = (float)hi * d + m;
    }
}

static void dq_q8_0(const quant_block_q8_0 *b, float *y) {
    float d = quant_f16_load(b->d);
    for (int j = 0; j < QUANT_QK; j++) y[j] = (float)b->qs[j] * d;
}

static void dq_q2_K(const quant_block_q2_K *b, float *y) {
    float d = quant_f16_load(b->d), dmin = quant_f16_load(b->dmin);
    /* Two halves of 128; in each, 32 bytes of qs hold 4 planes (shift 0,2,4,6) of 32
     * elements; each plane is two sub-blocks of 16 with their own scale byte. */
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = b->qs + 32 * h;
        for (int plane = 0; plane < 4; plane++) {
            for (int half = 0; half < 2; half++) {
                uint8_t s = b->scales[8 * h + 2 * plane + half];
                float dl = d * (float)(s & 0xF), ml = dmin * (float)(s >> 4);
                for (int l = 0; l < 16; l++) {
                    int v = (q[16 * half + l] >> (2 * plane)) & 3;
                    *y++ = dl * (float)v - ml;
                }
            }
        }
    }
}

/* Q3_K scales: 16 six-bit values; low 4 bits are nibbles of bytes 0..7 (low nibbles give
 * scales 0..7, high nibbles 8..15), high 2 bits are bit pairs of bytes 8..11 (scale j takes
 * bits 2*(j/4) of byte 8 + j%4). Stored with a bias of 32. */
static void q3_K_scales(const uint8_t s[12], int sc[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = (j < 8) ? (s[j] & 0xF) : (s[j - 8] >> 4);
        int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | (hi << 4)) - 32;
    }
}

static void dq_q3_K(const quant_block_q3_K *b, float *y) {
    float d = quant_f16_load(b->d);
    int sc[16];
    q3_K_scales(b->scales, sc);
    /* Same 2-bit plane order as Q2_K; plane p of half h has hmask bit 4h + p, and a clear
     * bit subtracts 4 (the stored high bit is inverted). */
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = b->qs + 32 * h;
        for (int plane = 0; plane < 4; plane++) {
            int bit = 4 * h + plane;
            for (int half = 0; half < 2; half++) {
                float dl = d * (float)sc[8 * h + 2 * plane + half];
                for (int l = 0; l < 16; l++) {
                    int i = 16 * half + l;
                    int v = (q[i] >> (2 * plane)) & 3;
                    v -= ((b->hmask[i] >> bit) & 1) ? 0 : 4;
                    *y++ = dl * (float)v;
                }
            }
        }
    }
}

/* Q4_K and Q5_K: one layout but for Q5_K's fifth bits, qh (NULL for Q4_K). The fifth bit of
 * element l of sub-block j is bit j of qh[l]. */
static int k4_high(const uint8_t *qh, int l, int j) { return qh ? ((qh[l] >> j) & 1) << 4 : 0; }

static void dq_k4(const uint8_t d_[2], const uint8_t dmin_[2], const uint8_t scales[12],
                  const uint8_t *qs, const uint8_t *qh, float *y) {
    float d = quant_f16_load(d_), dmin = quant_f16_load(dmin_);
    uint8_t sc[8], mn[8];
    quant_k4_scales(scales, sc, mn);
    for (int c = 0; c < 4; c++) {
        const uint8_t *q = qs + 32 * c;
        float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
        float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
        for (int l = 0; l < 32; l++)
            y[l] = d1 * (float)((q[l] & 0xF) | k4_high(qh, l, 2 * c)) - m1;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d2 * (float)((q[l] >> 4) | k4_high(qh, l, 2 * c + 1)) - m2;
        y += 64;
    }
}

static void dq_q4_K(const quant_block_q4_K *b, float *y) {
    dq_k4(b->d, b->dmin, b->scales, b->qs, NULL, y);
}

static void dq_q5_K(const quant_block_q5_K *b, float *y) {
    dq_k4(b->d, b->dmin, b->scales, b->qs, b->qh, y);
}

/* Q6_K element i of half h (i < 128): 4 low bits from ql[64h + i%64] (low nibble for
 * i < 64, high for i >= 64), 2 high bits from qh[32h + i%32] at shift 2*(i/32). */
static int q6_K_value(const quant_block_q6_K *b, int h, int i) {
    int lo = b->ql[64 * h + (i % 64)];
    lo = (i < 64) ? (lo & 0xF) : (lo >> 4);
    int hi = (b->qh[32 * h + (i % 32)] >> (2 * (i / 32))) & 3;
    return (lo | (hi << 4)) - 32;
}

static void dq_q6_K(const quant_block_q6_K *b, float *y) {
    float d = quant_f16_load(b->d);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 128; i++) {
            float dl = d * (float)b->scales[8 * h + i / 16];
            *y++ = dl * (float)q6_K_value(b, h, i);
        }
}

static void dq_q8_K(const quant_block_q8_K *b, float *y) {
    for (int j = 0; j < QUANT_QK_K; j++) y[j] = b->d * (float)b->qs[j];
}

int quant_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    if (!quant_type_valid(type)) return QUANT_ERR_TYPE;
    if (src == NULL || dst == NULL) return QUANT_ERR_ARG;
    if (n < 0 || n % type_table[type].elems != 0) return QUANT_ERR_SIZE;
    const uint8_t *p = src;
    int64_t nb = n / type_table[type].elems;
    size_t bs = type_table[type].bytes;
    int64_t be = type_table[type].elems;
    for (int64_t i = 0; i < nb; i++, p += bs) {
        float *y = dst + i * be;
        switch (type) {
        case QUANT_F32: memcpy(y, p, 4); break;
        case QUANT_F16: *y = tq_f16_to_f32(load_u16(p)); break;
        case QUANT_BF16: *y = quant_bf16_to_f32(load_u16(p)); break;
        case QUANT_Q4_0: dq_q4_0((const void *)p, y); break;
        case QUANT_Q4_1: dq_q4_1((const void *)p, y); break;
        case QUANT_Q5_0: dq_q5_0((const void *)p, y); break;
        case QUANT_Q5_1: dq_q5_1((const void *)p, y); break;
        case QUANT_Q8_0: dq_q8_0((const void *)p, y); break;
        case QUANT_Q2_K: dq_q2_K((const void *)p, y); break;
        case QUANT_Q3_K: dq_q3_K((const void *)p, y); break;
        case QUANT_Q4_K: dq_q4_K((const void *)p, y); break;
        case QUANT_Q5_K: dq_q5_K((const void *)p, y); break;
        case QUANT_Q6_K: dq_q6_K((const void *)p, y); break;
        case QUANT_Q8_K: dq_q8_K((const void *)p, y); break;
        default: return QUANT_ERR_TYPE;
        }
    }
    return QUANT_OK;
}

/* ---- activation quantization ------------------------------------------------------------ */

quant_act quant_act_format(int type) {
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16: return QUANT_ACT_F32;
    case QUANT_Q4_0:
    case QUANT_Q5_0:
    case QUANT_Q8_0: return QUANT_ACT_Q8_A;
    case QUANT_Q4_1: return QUANT_ACT_Q8_A1;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K: return QUANT_ACT_Q8_K;
    default: return QUANT_ACT_NONE;
    }
}

size_t quant_act_row_bytes(quant_act act, int64_t n) {
    if (n < 0) return 0;
    if (act == QUANT_ACT_Q8_A && n % QUANT_QK == 0) return (size_t)(n / QUANT_QK) * sizeof(quant_block_q8_a);
    if (act == QUANT_ACT_Q8_A1 && n % QUANT_QK == 0) return (size_t)(n / QUANT_QK) * sizeof(quant_block_q8_a1);
    if (act == QUANT_ACT_Q8_K && n % QUANT_QK_K == 0) return (size_t)(n / QUANT_QK_K) * sizeof(quant_block_q8_K);
    return 0;
}

/* One symmetric block: the SIMD versions compute the same d, 1/d and products in the
 * same order, and round with the default (half-even) mode, so bytes match exactly. */
static float quantize_block_ref(const float *x, int8_t *q, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) q[j] = (int8_t)nearbyintf(x[j] * id);
    return d;
}

void quant_quantize_q8_a_ref(const float *x, void *dst, int64_t n) {
    quant_block_q8_a *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++) b[i].d = quantize_block_ref(x + i * QUANT_QK, b[i].qs, QUANT_QK);
}

void quant_quantize_q8_a1_ref(const float *x, void *dst, int64_t n) {
    quant_block_q8_a1 *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        b[i].d = quantize_block_ref(x + i * QUANT_QK, b[i].qs, QUANT_QK);
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++) sum += b[i].qs[j];
        b[i].s = b[i].d * (float)sum;
    }
}

void quant_quantize_q8_K_ref(const float *x, void *dst, int64_t n) {
    quant_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        b[i].d = quantize_block_ref(x + i * QUANT_QK_K, b[i].qs, QUANT_QK_K);
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l];
            b[i].bsums[j] = (int16_t)s;
        }
    }
}

/* ---- reference dot products ------------------------------------------------------------- */

/* Integer parts are exact: the SIMD kernels must produce the same int32 per block, and
 * differ only in the order of the float accumulation across blocks. */

static float dot_plain_f32_ref(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The tile pair by pair: what every set's tile must equal. */
static void dot_f32_tile_ref(const float *w, int nw, const float *x, int nx, int64_t n, float *y, size_t y_stride) {
    for (int i = 0; i < nx; i++)
        for (int r = 0; r < nw; r++) y[(size_t)i * y_stride + (size_t)r] = dot_plain_f32_ref(w + r * n, x + i * n, n);
}

static float dot1_f32(int64_t n, const uint8_t *w, const float *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, w + 4 * i, 4);
        s += v * x[i];
    }
    return s;
}

static float dot1_f16(int64_t n, const uint8_t *w, const float *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += tq_f16_to_f32(load_u16(w + 2 * i)) * x[i];
    return s;
}

static float dot1_bf16(int64_t n, const uint8_t *w, const float *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += quant_bf16_to_f32(load_u16(w + 2 * i)) * x[i];
    return s;
}

static float dot1_q4_0(int64_t n, const quant_block_q4_0 *w, const quant_block_q8_a *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            isum += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j];
            isum += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + QUANT_QK / 2];
        }
        s += (quant_f16_load(w[i].d) * x[i].d) * (float)isum;
    }
    return s;
}

/* Q4_1: sum_j (q_j * d + m) * dx * y_j = (d * dx) * sum_j q_j y_j + m * (dx * sum_j y_j),
 * the last factor being the activation block's s. */
static float dot1_q4_1(int64_t n, const quant_block_q4_1 *w, const quant_block_q8_a1 *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            isum += (w[i].qs[j] & 0xF) * x[i].qs[j];
            isum += (w[i].qs[j] >> 4) * x[i].qs[j + QUANT_QK / 2];
        }
        s += (quant_f16_load(w[i].d) * x[i].d) * (float)isum + quant_f16_load(w[i].m) * x[i].s;
    }
    return s;
}

static float dot1_q5_0(int64_t n, const quant_block_q5_0 *w, const quant_block_q8_a *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        uint32_t qh = load_u32(w[i].qh);
        int isum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            int lo = ((w[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4)) - 16;
            int hi = ((w[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            isum += lo * x[i].qs[j] + hi * x[i].qs[j + QUANT_QK / 2];
        }
        s += (quant_f16_load(w[i].d) * x[i].d) * (float)isum;
    }
    return s;
}

static float dot1_q8_0(int64_t n, const quant_block_q8_0 *w, const quant_block_q8_a *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK; j++) isum += w[i].qs[j] * x[i].qs[j];
        s += (quant_f16_load(w[i].d) * x[i].d) * (float)isum;
    }
    return s;
}

/* Q4_K/Q5_K: sum_j (d*sc_j*q - dmin*m_j) * dx*y = dx*(d*sum_j sc_j*<q,y>_j
 * - dmin*sum_j m_j*sum(y)_j); the per-sub-block sums of y are the Q8_K bsums. One block;
 * qh: Q5_K's fifth bits, NULL for Q4_K. */
static float dot1_k4_block(const uint8_t d[2], const uint8_t dmin[2], const uint8_t scales[12],
                           const uint8_t *qs, const uint8_t *qh, const quant_block_q8_K *x) {
    uint8_t sc[8], mn[8];
    quant_k4_scales(scales, sc, mn);
    int isum = 0, msum = 0;
    for (int c = 0; c < 4; c++) {
        const uint8_t *q = qs + 32 * c;
        const int8_t *y = x->qs + 64 * c;
        int d1 = 0, d2 = 0;
        for (int l = 0; l < 32; l++) {
            d1 += ((q[l] & 0xF) | k4_high(qh, l, 2 * c)) * y[l];
            d2 += ((q[l] >> 4) | k4_high(qh, l, 2 * c + 1)) * y[32 + l];
        }
        isum += sc[2 * c] * d1 + sc[2 * c + 1] * d2;
    }
    for (int j = 0; j < 8; j++) msum += mn[j] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    return x->d * (quant_f16_load(d) * (float)isum - quant_f16_load(dmin) * (float)msum);
}

static float dot1_q4_K(int64_t n, const quant_block_q4_K *w, const quant_block_q8_K *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++)
        s += dot1_k4_block(w[i].d, w[i].dmin, w[i].scales, w[i].qs, NULL, &x[i]);
    return s;
}

static float dot1_q5_K(int64_t n, const quant_block_q5_K *w, const quant_block_q8_K *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++)
        s += dot1_k4_block(w[i].d, w[i].dmin, w[i].scales, w[i].qs, w[i].qh, &x[i]);
    return s;
}

static float dot1_q6_K(int64_t n, const quant_block_q6_K *w, const quant_block_q8_K *x) {
    float s = 0.0f;
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 8; k++) {
                int sub = 0;
                for (int l = 0; l < 16; l++) sub += q6_K_value(&w[i], h, 16 * k + l) * x[i].qs[128 * h + 16 * k + l];
                isum += w[i].scales[8 * h + k] * sub;
            }
        s += (quant_f16_load(w[i].d) * x[i].d) * (float)isum;
    }
    return s;
}

#define DEFINE_DOT_REF(tname, wtype, xtype)                                                     \
    static void dot_##tname##_ref(int64_t n, const void *w, const void *x, size_t x_stride,     \
                                  int nx, float *out) {                                         \
        for (int r = 0; r < nx; r++)                                                            \
            out[r] = dot1_##tname(n, (const wtype *)w,                                          \
                                  (const xtype *)(const void *)((const char *)x + (size_t)r * x_stride)); \
    }

DEFINE_DOT_REF(f32, uint8_t, float)
DEFINE_DOT_REF(f16, uint8_t, float)
DEFINE_DOT_REF(bf16, uint8_t, float)
DEFINE_DOT_REF(q4_0, quant_block_q4_0, quant_block_q8_a)
DEFINE_DOT_REF(q4_1, quant_block_q4_1, quant_block_q8_a1)
DEFINE_DOT_REF(q5_0, quant_block_q5_0, quant_block_q8_a)
DEFINE_DOT_REF(q8_0, quant_block_q8_0, quant_block_q8_a)
DEFINE_DOT_REF(q4_K, quant_block_q4_K, quant_block_q8_K)
DEFINE_DOT_REF(q5_K, quant_block_q5_K, quant_block_q8_K)
DEFINE_DOT_REF(q6_K, quant_block_q6_K, quant_block_q8_K)

size_t quant_gemm_scratch_bytes(int64_t n) {
    if (n <= 0 || n % QUANT_QK != 0) return 0;
    /* per 32 elements: 8 vectors of interleaved bytes and room for 4 vectors of per-row
     * numbers (the 32-element types use 3: 128 * sum(q), scale, offset; the k-quants their
     * sub-block scales and mins per super-block) */
    return (size_t)(n / QUANT_QK) * (8 * 64 + 4 * QUANT_GEMM_ROWS * 4);
}

void quant_fill_ref(quant_kernels *k) {
    memset(k, 0, sizeof *k);
    k->name = "ref";
    k->quantize_q8_a = quant_quantize_q8_a_ref;
    k->quantize_q8_K = quant_quantize_q8_K_ref;
    k->quantize_q8_a1 = quant_quantize_q8_a1_ref;
    k->dot_f32 = dot_plain_f32_ref;
    k->dot_f32_tile = dot_f32_tile_ref;
    k->dequantize_row = quant_dequantize_row;
    k->dot[QUANT_F32] = dot_f32_ref;
    k->dot[QUANT_F16] = dot_f16_ref;
    k->dot[QUANT_BF16] = dot_bf16_ref;
    k->dot[QUANT_Q4_0] = dot_q4_0_ref;
    k->dot[QUANT_Q4_1] = dot_q4_1_ref;
    k->dot[QUANT_Q5_0] = dot_q5_0_ref;
    k->dot[QUANT_Q8_0] = dot_q8_0_ref;
    k->dot[QUANT_Q4_K] = dot_q4_K_ref;
    k->dot[QUANT_Q5_K] = dot_q5_K_ref;
    k->dot[QUANT_Q6_K] = dot_q6_K_ref;
}

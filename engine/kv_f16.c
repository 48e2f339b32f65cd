/* fp16 K/V store and attention; see kv_f16.h for the contract and the math.
 *
 * Layout: one array per layer of max_ctx rows; a row is the K heads then the V heads of one
 * position, (n_kv_heads * head_dim_k + n_kv_heads * head_dim_v) fp16 values, so appending a
 * token writes one contiguous row and attention streams rows in position order.
 *
 * attend() first widens the rows it needs to fp32 (one layer, once per call, through a
 * 65536-entry table): K as rows (position-major), V transposed (one row of positions per V
 * value, as llama.cpp stores V without flash attention), so that both q . k_j and
 * sum_j a_j v_j[d] are contiguous dot products for the SIMD dot of the quant kernel set.
 * Then one task per (query, head): scores, an fp32 softmax, the weighted sum. Widening once
 * costs O(rows * row_width) against the O(n_q * n_head * rows * head_dim) of attention. */
#include "kv_f16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quants.h"

struct kv_f16 {
    kv_f16_params p;
    int row_width;       /* n_kv_heads * (head_dim_k + head_dim_v) values per position */
    int *len;            /* (n_layer) positions stored per layer */
    uint16_t *rows;      /* (n_layer, max_ctx, row_width) fp16 K then V heads */
    float *k_f32;        /* (max_ctx, n_kv_heads * head_dim_k) K rows of the layer being attended */
    float *vt_f32;       /* (n_kv_heads * head_dim_v, max_ctx) its V, transposed */
    float *scores;       /* (n_threads, max_ctx) per-thread attention weights */
    float *q16;          /* (n_threads, head_dim_k) per-thread fp16-rounded query */
    float *f16_table;    /* (65536) fp16 bit pattern -> float */
    const quant_kernels *kern;
};

const char *kv_status_name(int status) {
    switch (status) {
        case KV_OK: return "KV_OK";
        case KV_ERR_ARG: return "KV_ERR_ARG";
        case KV_ERR_NOMEM: return "KV_ERR_NOMEM";
        case KV_ERR_FULL: return "KV_ERR_FULL";
        case KV_ERR_POS: return "KV_ERR_POS";
        default: return "KV_ERR_UNKNOWN";
    }
}

void kv_f16_free(kv_f16 *kv) {
    if (kv == NULL) return;
    free(kv->len);
    free(kv->rows);
    free(kv->k_f32);
    free(kv->vt_f32);
    free(kv->scores);
    free(kv->q16);
    free(kv->f16_table);
    free(kv);
}

int kv_f16_create(const kv_f16_params *p, kv_f16 **out) {
    if (out == NULL) return KV_ERR_ARG;
    *out = NULL;
    if (p == NULL || p->n_layer < 1 || p->n_head < 1 || p->n_kv_heads < 1 || p->head_dim_k < 1 ||
        p->head_dim_v < 1 || p->max_ctx < 1 || p->max_q < 1 || p->n_threads < 1 ||
        p->n_head % p->n_kv_heads != 0)
        return KV_ERR_ARG;
    kv_f16 *kv = calloc(1, sizeof *kv);
    if (kv == NULL) return KV_ERR_NOMEM;
    kv->p = *p;
    kv->row_width = p->n_kv_heads * (p->head_dim_k + p->head_dim_v);
    size_t layer_vals = (size_t)p->max_ctx * (size_t)kv->row_width;
    kv->len = calloc((size_t)p->n_layer, sizeof *kv->len);
    kv->rows = malloc((size_t)p->n_layer * layer_vals * sizeof *kv->rows);
    kv->k_f32 = malloc((size_t)p->max_ctx * (size_t)(p->n_kv_heads * p->head_dim_k) * sizeof(float));
    kv->vt_f32 = malloc((size_t)p->max_ctx * (size_t)(p->n_kv_heads * p->head_dim_v) * sizeof(float));
    kv->scores = malloc((size_t)p->n_threads * (size_t)p->max_ctx * sizeof *kv->scores);
    kv->q16 = malloc((size_t)p->n_threads * (size_t)p->head_dim_k * sizeof *kv->q16);
    kv->f16_table = malloc(65536 * sizeof *kv->f16_table);
    if (kv->len == NULL || kv->rows == NULL || kv->k_f32 == NULL || kv->vt_f32 == NULL || kv->scores == NULL ||
        kv->q16 == NULL || kv->f16_table == NULL) {
        kv_f16_free(kv);
        return KV_ERR_NOMEM;
    }
    for (uint32_t h = 0; h < 65536; h++) kv->f16_table[h] = quant_f16_to_f32((uint16_t)h);
    kv->kern = quant_kernels_get();
    *out = kv;
    return KV_OK;
}

int kv_f16_len(const kv_f16 *kv, int layer) {
    if (kv == NULL || layer < 0 || layer >= kv->p.n_layer) return 0;
    return kv->len[layer];
}

int kv_f16_append(kv_f16 *kv, int layer, const float *k, const float *v, int n_tokens) {
    if (kv == NULL || k == NULL || v == NULL || layer < 0 || layer >= kv->p.n_layer || n_tokens < 1)
        return KV_ERR_ARG;
    if (n_tokens > kv->p.max_ctx - kv->len[layer]) return KV_ERR_FULL;
    const int kw = kv->p.n_kv_heads * kv->p.head_dim_k, vw = kv->p.n_kv_heads * kv->p.head_dim_v;
    uint16_t *dst = kv->rows + ((size_t)layer * (size_t)kv->p.max_ctx + (size_t)kv->len[layer]) *
                                   (size_t)kv->row_width;
    for (int t = 0; t < n_tokens; t++, dst += kv->row_width) {
        const float *kt = k + (size_t)t * (size_t)kw, *vt = v + (size_t)t * (size_t)vw;
        for (int i = 0; i < kw; i++) dst[i] = quant_f32_to_f16(kt[i]);
        for (int i = 0; i < vw; i++) dst[kw + i] = quant_f32_to_f16(vt[i]);
    }
    kv->len[layer] += n_tokens;
    return KV_OK;
}

void kv_f16_truncate(kv_f16 *kv, int len) {
    if (kv == NULL) return;
    if (len < 0) len = 0;
    for (int l = 0; l < kv->p.n_layer; l++)
        if (kv->len[l] > len) kv->len[l] = len;
}

/* ---- attention -------------------------------------------------------------------------- */

typedef struct {
    kv_f16 *kv;
    const uint16_t *src;  /* (rows, row_width) fp16 rows of the layer */
    int row0, row1;       /* rows [row0, row1) are needed */
    const float *q;
    float *out;
    int first_pos, window;
} attend_job;

#define WIDEN_ROWS_PER_TASK 32

static void widen_task(void *ctx, int task, int thread) {
    (void)thread;
    const attend_job *j = ctx;
    const int w = j->kv->row_width;
    int r0 = j->row0 + task * WIDEN_ROWS_PER_TASK;
    int r1 = r0 + WIDEN_ROWS_PER_TASK < j->row1 ? r0 + WIDEN_ROWS_PER_TASK : j->row1;
    const int kw = j->kv->p.n_kv_heads * j->kv->p.head_dim_k, vw = w - kw;
    const size_t stride = (size_t)j->kv->p.max_ctx;
    const float *table = j->kv->f16_table;
    for (int r = r0; r < r1; r++) {
        const uint16_t *s = j->src + (size_t)r * (size_t)w;
        float *k = j->kv->k_f32 + (size_t)r * (size_t)kw, *vt = j->kv->vt_f32 + (size_t)r;
        for (int i = 0; i < kw; i++) k[i] = table[s[i]];
        for (int i = 0; i < vw; i++) vt[(size_t)i * stride] = table[s[kw + i]];
    }
}

/* One (query, head): out = softmax(q . K^T) V over the visible positions. */
static void head_task(void *ctx, int task, int thread) {
    const attend_job *j = ctx;
    const kv_f16 *kv = j->kv;
    const int n_head = kv->p.n_head, dk = kv->p.head_dim_k, dv = kv->p.head_dim_v;
    const int qi = task / n_head, h = task % n_head;
    const int g = h / (n_head / kv->p.n_kv_heads); /* the K/V head this query head reads */
    const int pos = j->first_pos + qi;
    const int lo = j->window > 0 && pos - j->window + 1 > 0 ? pos - j->window + 1 : 0;
    const int kw = kv->p.n_kv_heads * dk;
    const float *q = j->q + ((size_t)qi * (size_t)n_head + (size_t)h) * (size_t)dk;
    float *out = j->out + ((size_t)qi * (size_t)n_head + (size_t)h) * (size_t)dv;
    float *a = kv->scores + (size_t)thread * (size_t)kv->p.max_ctx;
    const float *keys = kv->k_f32 + (size_t)g * (size_t)dk;
    const float *vt = kv->vt_f32 + (size_t)g * (size_t)dv * (size_t)kv->p.max_ctx;
    if (kv->p.ggml_rounding) {
        float *qr = kv->q16 + (size_t)thread * (size_t)dk;
        for (int i = 0; i < dk; i++) qr[i] = kv->f16_table[quant_f32_to_f16(q[i])];
        q = qr;
    }

    float mx = -INFINITY;
    for (int p = lo; p <= pos; p++) {
        float s = kv->kern->dot_f32(q, keys + (size_t)p * (size_t)kw, dk);
        a[p] = s;
        if (s > mx) mx = s;
    }
    double sum = 0.0;
    for (int p = lo; p <= pos; p++) {
        a[p] = expf(a[p] - mx);
        sum += a[p];
    }
    float scale = (float)(1.0 / sum);
    if (kv->p.ggml_rounding) {
        for (int p = lo; p <= pos; p++) a[p] = kv->f16_table[quant_f32_to_f16(a[p] * scale)];
        scale = 1.0f; /* the rounded weights are normalized already */
    }
    for (int d = 0; d < dv; d++)
        out[d] = scale * kv->kern->dot_f32(a + lo, vt + (size_t)d * (size_t)kv->p.max_ctx + lo, pos - lo + 1);
}

int kv_f16_attend(kv_f16 *kv, int layer, const float *q, int n_q, int first_pos, int window,
                  float *out, tp_pool *pool) {
    if (kv == NULL || q == NULL || out == NULL || layer < 0 || layer >= kv->p.n_layer || n_q < 1 ||
        window < 0)
        return KV_ERR_ARG;
    if (first_pos < 0 || n_q > kv->p.max_q || first_pos + n_q > kv->len[layer]) return KV_ERR_POS;
    if (tp_n_threads(pool) > kv->p.n_threads) return KV_ERR_ARG;
    attend_job j;
    j.kv = kv;
    j.src = kv->rows + (size_t)layer * (size_t)kv->p.max_ctx * (size_t)kv->row_width;
    j.row0 = window > 0 && first_pos - window + 1 > 0 ? first_pos - window + 1 : 0;
    j.row1 = first_pos + n_q;
    j.q = q;
    j.out = out;
    j.first_pos = first_pos;
    j.window = window;
    int n_widen = (j.row1 - j.row0 + WIDEN_ROWS_PER_TASK - 1) / WIDEN_ROWS_PER_TASK;
    tp_parallel_for(pool, n_widen, widen_task, &j);
    tp_parallel_for(pool, n_q * kv->p.n_head, head_task, &j);
    return KV_OK;
}

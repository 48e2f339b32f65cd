/* Work split: tasks are contiguous chunks of weight rows; inside a chunk each weight row is
 * streamed once from memory and applied to all n activation rows in tiles of
 * QUANT_DOT_MAX_NX while it sits in L1, so a batch of n costs about one pass over W. */
#include "matmul.h"

#include <stddef.h>
#include <string.h>

#define WORK_ALIGN 64
#define PREFETCH_ROWS 4 /* decode: weight rows prefetched ahead (doc/bench.md: 4 measured best) */
/* The fp32 path dequantizes F32_ROWS weight rows at a time (they stay in L1 while every group of
 * QUANT_F32_TILE activation rows passes over them: two of the kernel's tiles). */
#define F32_ROWS (2 * QUANT_F32_TILE)
/* Batches of at least this many activation rows take the set's gemm kernel where it has one
 * (same values as dot, bit for bit: only the speed depends on it; doc/quants.md). */
#define GEMM_MIN_N 4

typedef struct {
    const quant_kernels *k;
    const matmul_weight *w;
    const float *x;
    float *y;
    int n;
    quant_act act;
    size_t w_row_bytes;
    const void *xq;      /* activations in act format, or x itself for QUANT_ACT_F32 */
    size_t xq_stride;    /* bytes between activation rows */
    void *xq_out;        /* quantization target */
    float *row_scratch;  /* (n_threads, F32_ROWS, cols) dequantized weight rows, fp32 path */
    quant_gemm_fn gemm;  /* batched kernel, or NULL */
    uint8_t *xu;         /* gemm: the activations' values + 128, cols bytes per row */
    uint8_t *gemm_scratch; /* gemm: per thread, gemm_scratch_stride bytes each */
    size_t gemm_scratch_stride;
    int64_t rows_per_task;
} mm_job;

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static size_t act_bytes(const matmul_weight *w, int n, quant_act act) {
    return round_up((size_t)n * quant_act_row_bytes(act, w->cols), WORK_ALIGN);
}

/* The activation format of w under mode: the type's 8-bit format, or for MATMUL_F32_ACT the
 * fp32 fallback (dequantized weight rows) for every type that would quantize them. */
static quant_act act_for(const matmul_weight *w, matmul_mode mode) {
    quant_act act = quant_act_format(w->type);
    return mode == MATMUL_F32_ACT && act != QUANT_ACT_F32 ? QUANT_ACT_NONE : act;
}

/* Whether a batch of n rows of w may take a gemm kernel (some set has one for the type): the
 * work buffer then holds the unsigned activations and one decode scratch per thread. */
static int gemm_type(const matmul_weight *w, int n, matmul_mode mode) {
    return mode == MATMUL_Q8_ACT && n >= GEMM_MIN_N &&
           (w->type == QUANT_Q4_0 || w->type == QUANT_Q5_0 || w->type == QUANT_Q4_1 || w->type == QUANT_Q8_0 ||
            w->type == QUANT_Q4_K || w->type == QUANT_Q6_K);
}

/* The 32-element types' gemm takes the activations as unsigned bytes too (their weights are
 * the signed side of the products); the k-quants' values are unsigned, their activations stay
 * signed. */
static int gemm_wants_xu(const matmul_weight *w) { return w->type != QUANT_Q4_K && w->type != QUANT_Q6_K; }

static size_t gemm_scratch_stride(const matmul_weight *w) {
    return round_up(quant_gemm_scratch_bytes(w->cols), WORK_ALIGN);
}

size_t matmul_work_size_mode(const matmul_weight *w, int n, int n_threads, matmul_mode mode) {
    if (w == NULL || n < 1 || quant_row_bytes(w->type, w->cols) == 0 || w->cols < 1) return 0;
    if (mode != MATMUL_Q8_ACT && mode != MATMUL_F32_ACT) return 0;
    if (n_threads < 1) n_threads = 1;
    quant_act act = act_for(w, mode);
    size_t s = WORK_ALIGN;
    if (act == QUANT_ACT_Q8_A || act == QUANT_ACT_Q8_A1 || act == QUANT_ACT_Q8_K) s += act_bytes(w, n, act);
    if (act == QUANT_ACT_NONE) s += (size_t)n_threads * round_up((size_t)F32_ROWS * (size_t)w->cols * sizeof(float), WORK_ALIGN);
    if (gemm_type(w, n, mode))
        s += (gemm_wants_xu(w) ? round_up((size_t)n * (size_t)w->cols, WORK_ALIGN) : 0) +
             (size_t)n_threads * gemm_scratch_stride(w);
    return s;
}

size_t matmul_work_size(const matmul_weight *w, int n, int n_threads) {
    return matmul_work_size_mode(w, n, n_threads, MATMUL_Q8_ACT);
}

static void quantize_task(void *ctx, size_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    const float *src = j->x + task * (size_t)j->w->cols;
    void *dst = (char *)j->xq_out + task * j->xq_stride;
    if (j->act == QUANT_ACT_Q8_A)
        j->k->quantize_q8_a(src, dst, j->w->cols);
    else if (j->act == QUANT_ACT_Q8_A1)
        j->k->quantize_q8_a1(src, dst, j->w->cols);
    else
        j->k->quantize_q8_K(src, dst, j->w->cols);
    if (j->xu != NULL) {
        /* The values again as unsigned bytes (+ 128) for the gemm kernel's u8 x s8 products. */
        const size_t blk = quant_act_row_bytes(j->act, QUANT_QK), off = j->act == QUANT_ACT_Q8_A1 ? offsetof(quant_block_q8_a1, qs) : offsetof(quant_block_q8_a, qs);
        uint8_t *u = j->xu + task * (size_t)j->w->cols;
        for (int64_t b = 0; b < j->w->cols / QUANT_QK; b++) {
            const uint8_t *q = (const uint8_t *)dst + (size_t)b * blk + off;
            for (int e = 0; e < QUANT_QK; e++) u[b * QUANT_QK + e] = (uint8_t)(q[e] ^ 0x80u);
        }
    }
}

static void rows_task(void *ctx, size_t task, int thread) {
    const mm_job *j = ctx;
    const int64_t rows = j->w->rows, cols = j->w->cols;
    int64_t r0 = (int64_t)task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task < rows ? r0 + j->rows_per_task : rows;
    const char *wrow = (const char *)j->w->data + (size_t)r0 * j->w_row_bytes;
    if (j->act == QUANT_ACT_NONE) {
        float *wf = j->row_scratch +
                    (size_t)thread * round_up((size_t)F32_ROWS * (size_t)cols * sizeof(float), WORK_ALIGN) / sizeof(float);
        for (int64_t r = r0; r < r1; r += F32_ROWS, wrow += F32_ROWS * j->w_row_bytes) {
            const int nr = r1 - r < F32_ROWS ? (int)(r1 - r) : F32_ROWS;
            for (int q = 0; q < nr; q++) j->k->dequantize_row(j->w->type, wrow + (size_t)q * j->w_row_bytes, wf + q * cols, cols);
            for (int i = 0; i < j->n; i += QUANT_F32_TILE) {
                const int nx = j->n - i < QUANT_F32_TILE ? j->n - i : QUANT_F32_TILE;
                for (int q = 0; q < nr; q += QUANT_F32_TILE)
                    j->k->dot_f32_tile(wf + q * cols, nr - q < QUANT_F32_TILE ? nr - q : QUANT_F32_TILE,
                                       j->x + (size_t)i * (size_t)cols, nx, cols,
                                       j->y + (size_t)i * (size_t)rows + (size_t)(r + q), (size_t)rows);
            }
        }
        return;
    }
    if (j->gemm != NULL) {
        uint8_t *scratch = j->gemm_scratch + (size_t)thread * j->gemm_scratch_stride;
        for (int64_t r = r0; r < r1; r += QUANT_GEMM_ROWS, wrow += QUANT_GEMM_ROWS * j->w_row_bytes) {
            const int nw = r1 - r < QUANT_GEMM_ROWS ? (int)(r1 - r) : QUANT_GEMM_ROWS;
            j->gemm(cols, wrow, j->w_row_bytes, nw, j->xq, j->xq_stride, j->xu, (size_t)cols, j->n, j->y + r,
                    (size_t)rows, scratch);
        }
        return;
    }
    quant_dot_fn dot = j->k->dot[j->w->type];
    /* Decode (one activation row) streams the weights once: prefetch PREFETCH_ROWS rows
     * ahead, within the matrix, so each core keeps more reads in flight than its hardware
     * prefetcher does. */
    const char *wend = (const char *)j->w->data + (size_t)rows * j->w_row_bytes;
    const size_t ahead = j->n == 1 ? PREFETCH_ROWS * j->w_row_bytes : 0;
    for (int64_t r = r0; r < r1; r++, wrow += j->w_row_bytes) {
        if (ahead && (size_t)(wend - wrow) > ahead + j->w_row_bytes)
            for (size_t b = 0; b < j->w_row_bytes; b += 64) __builtin_prefetch(wrow + ahead + b, 0, 3);
        for (int i = 0; i < j->n; i += QUANT_DOT_MAX_NX) {
            int nx = j->n - i < QUANT_DOT_MAX_NX ? j->n - i : QUANT_DOT_MAX_NX;
            float out[QUANT_DOT_MAX_NX];
            dot(cols, wrow, (const char *)j->xq + (size_t)i * j->xq_stride, j->xq_stride, nx, out);
            for (int t = 0; t < nx; t++) j->y[(size_t)(i + t) * (size_t)rows + (size_t)r] = out[t];
        }
    }
}

static int run(const quant_kernels *k, const matmul_weight *w, const float *x, float *y, int n, matmul_mode mode,
               tq_threadpool *pool, void *work, size_t work_size) {
    if (k == NULL || w == NULL || x == NULL || y == NULL || w->data == NULL || n < 1 || w->rows < 1) return QUANT_ERR_ARG;
    if (!quant_type_valid(w->type)) return QUANT_ERR_TYPE;
    if (w->cols < 1 || quant_row_bytes(w->type, w->cols) == 0) return QUANT_ERR_SIZE;
    int n_threads = tq_threadpool_size(pool);
    if (mode != MATMUL_Q8_ACT && mode != MATMUL_F32_ACT) return QUANT_ERR_ARG;
    size_t need = matmul_work_size_mode(w, n, n_threads, mode);
    if (need > WORK_ALIGN && (work == NULL || work_size < need)) return QUANT_ERR_WORK;

    mm_job j;
    memset(&j, 0, sizeof j);
    j.k = k;
    j.w = w;
    j.x = x;
    j.y = y;
    j.n = n;
    j.act = act_for(w, mode);
    /* Every set is filled from the reference, which has a kernel for each direct type. */
    if (j.act != QUANT_ACT_NONE && k->dot[w->type] == NULL) return QUANT_ERR_TYPE;
    j.w_row_bytes = quant_row_bytes(w->type, w->cols);
    char *base = work == NULL ? NULL : (char *)round_up((size_t)(uintptr_t)work, WORK_ALIGN);
    if (j.act == QUANT_ACT_F32) {
        j.xq = x;
        j.xq_stride = (size_t)w->cols * sizeof(float);
    } else if (j.act == QUANT_ACT_NONE) {
        j.row_scratch = (float *)(void *)base;
    } else {
        j.xq_out = base;
        j.xq = base;
        j.xq_stride = quant_act_row_bytes(j.act, w->cols);
        if (gemm_type(w, n, mode) && k->gemm[w->type] != NULL) {
            j.gemm = k->gemm[w->type];
            uint8_t *after = (uint8_t *)base + act_bytes(w, n, j.act);
            if (gemm_wants_xu(w)) {
                j.xu = after;
                after += round_up((size_t)n * (size_t)w->cols, WORK_ALIGN);
            }
            j.gemm_scratch = after;
            j.gemm_scratch_stride = gemm_scratch_stride(w);
        }
        /* Quantizing a row costs about what one weight row's dot does; only spread it
         * when there are rows enough to keep every thread busy. */
        if (n >= 2 * n_threads)
            tq_threadpool_run(pool, quantize_task, &j, (size_t)n);
        else
            for (size_t i = 0; i < (size_t)n; i++) quantize_task(&j, i, 0);
    }
    /* About 8 chunks per thread balances rows of uneven cost without making tasks so
     * small that the shared counter dominates. */
    int64_t per = (w->rows + (int64_t)n_threads * 8 - 1) / ((int64_t)n_threads * 8);
    if (per < 4) per = 4;
    if (j.gemm != NULL) per = (int64_t)round_up((size_t)per, QUANT_GEMM_ROWS);
    j.rows_per_task = per;
    int64_t n_tasks = (w->rows + per - 1) / per;
    tq_threadpool_run(pool, rows_task, &j, (size_t)n_tasks);
    return QUANT_OK;
}

int matmul_with(const quant_kernels *k, const matmul_weight *w, const float *x, float *y, int n,
                tq_threadpool *pool, void *work, size_t work_size) {
    return run(k, w, x, y, n, MATMUL_Q8_ACT, pool, work, work_size);
}

int matmul_mode_with(const quant_kernels *k, const matmul_weight *w, const float *x, float *y, int n,
                     matmul_mode mode, tq_threadpool *pool, void *work, size_t work_size) {
    return run(k, w, x, y, n, mode, pool, work, work_size);
}

int matmul(const matmul_weight *w, const float *x, float *y, int n, tq_threadpool *pool, void *work, size_t work_size) {
    return run(quant_kernels_get(), w, x, y, n, MATMUL_Q8_ACT, pool, work, work_size);
}

int matmul_mode_run(const matmul_weight *w, const float *x, float *y, int n, matmul_mode mode, tq_threadpool *pool,
                    void *work, size_t work_size) {
    return run(quant_kernels_get(), w, x, y, n, mode, pool, work, work_size);
}

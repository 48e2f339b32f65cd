/* y = W x for a batch of activation rows, threaded: the matrix kernel of the engine.
 *
 * W is a row-major GGUF weight matrix (rows = output features, cols = input features, each
 * row quant_row_bytes(type, cols) bytes). For the types with a direct dot kernel the
 * activations are first quantized to 8 bits (quant_act_format), then each weight block is
 * decoded once and applied to up to QUANT_DOT_MAX_NX activation rows; other types are
 * dequantized a row at a time and that row is used for all n activation rows.
 *
 * MATMUL_F32_ACT takes that second path for every type: weight rows dequantized to fp32 eight
 * at a time and dotted with the fp32 activations in tiles (quant_kernels.dot_f32_tile, each
 * value what dot_f32 gives), nothing rounded to 8 bits. Slower; for measuring: the
 * 8-bit rounding of the activations is a noise that any other change of the forward pass (a
 * KV cache's error however small, another kernel set) redraws, so a KL divergence between two
 * runs of the default mode carries a floor from it alone (doc/gemma3.md §8, "The activation
 * floor"). */
#ifndef TQ_ENGINE_MATMUL_H
#define TQ_ENGINE_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "quants.h"
#include "turboquant.h"

typedef enum matmul_mode {
    MATMUL_Q8_ACT = 0,  /* activations rounded to the type's 8-bit format (as llama.cpp's CPU backend) */
    MATMUL_F32_ACT = 1, /* weights dequantized to fp32, activations kept fp32 */
} matmul_mode;

typedef struct matmul_weight {
    int type;         /* quant_type */
    int64_t rows;     /* output features */
    int64_t cols;     /* input features; a whole number of the type's blocks */
    const void *data; /* (rows, quant_row_bytes(type, cols)) bytes, any alignment, read only */
} matmul_weight;

/* Bytes of work buffer matmul needs for n activation rows on a pool of n_threads (64-byte
 * slack included, so any address will do). 0 if the weight's type or shape is invalid. */
size_t matmul_work_size(const matmul_weight *w, int n, int n_threads);
/* The same for either mode (matmul_work_size is MATMUL_Q8_ACT's); 0 also for another mode. */
size_t matmul_work_size_mode(const matmul_weight *w, int n, int n_threads, matmul_mode mode);

/* x: (n, cols) floats, y: (n, rows) floats; y must not overlap x or work. work: caller-owned
 * scratch of at least matmul_work_size(w, n, tq_threadpool_size(pool)) bytes. pool (the
 * library's, tq_threadpool_run) may be NULL (single thread). Each output is one dot product
 * computed whole by one task, so y does not depend on the pool size. Uses quant_kernels_get().
 * Returns QUANT_OK, QUANT_ERR_ARG (NULL pointer, n < 1, rows < 1), QUANT_ERR_TYPE,
 * QUANT_ERR_SIZE (cols not whole blocks) or QUANT_ERR_WORK; on error y is untouched. Not to be
 * called from inside a task of the same pool. */
int matmul(const matmul_weight *w, const float *x, float *y, int n, tq_threadpool *pool, void *work,
           size_t work_size);

/* As matmul in either mode (work: matmul_work_size_mode with the same mode); QUANT_ERR_ARG
 * for a mode that is not a matmul_mode. */
int matmul_mode_run(const matmul_weight *w, const float *x, float *y, int n, matmul_mode mode, tq_threadpool *pool,
                    void *work, size_t work_size);

/* As matmul with an explicit kernel set (from quant_kernels_list), for tests and benches. */
int matmul_with(const quant_kernels *k, const matmul_weight *w, const float *x, float *y, int n,
                tq_threadpool *pool, void *work, size_t work_size);
/* ... and an explicit mode. */
int matmul_mode_with(const quant_kernels *k, const matmul_weight *w, const float *x, float *y, int n,
                     matmul_mode mode, tq_threadpool *pool, void *work, size_t work_size);

#endif

/* Weight formats of GGUF files (ggml block quantization) and the dot-product kernels the
 * matrix multiply is built from.
 *
 * Layouts are the ones ggml writes into GGUF files: little-endian, blocks packed back to
 * back with no padding, a row of a matrix is a whole number of blocks. Every struct below
 * has byte members only (fp16 scales are stored as two bytes and read through
 * quant_f16_load), so a block may sit at any address: nothing here needs aligned input.
 *
 * Type ids are ggml's `enum ggml_type` values, so a GGUF tensor's type field maps directly.
 *
 * Dot kernels come in sets (quant_kernels): a scalar reference set and, on x86-64, AVX2,
 * AVX-512 and AVX-512 VNNI sets, on AArch64 NEON (Advanced SIMD) and NEON dot-product sets
 * (doc/quants.md). quant_kernels_get() returns the best set the CPU supports, chosen once;
 * TQ_FORCE_REF=1 in the environment or quant_force_reference(1) selects the reference.
 *
 * Thread-safety: every function here is safe to call from any number of threads at once;
 * the kernel sets are immutable after the first quant_kernels_* call. */
#ifndef TQ_ENGINE_QUANTS_H
#define TQ_ENGINE_QUANTS_H

#include <stddef.h>
#include <stdint.h>

/* ---- types ------------------------------------------------------------------------- */

typedef enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_BF16 = 30,
    QUANT_TYPE_COUNT = 31 /* bound for tables indexed by type id, not a type */
} quant_type;

/* Status codes, pinned: never renumber. */
typedef enum quant_status {
    QUANT_OK = 0,
    QUANT_ERR_TYPE = -1,  /* type id unknown or not supported by this call */
    QUANT_ERR_SIZE = -2,  /* element count not a multiple of the type's block size, or < 0 */
    QUANT_ERR_ARG = -3,   /* NULL pointer or out-of-range argument */
    QUANT_ERR_WORK = -4   /* caller's work buffer smaller than the *_work_size() bound */
} quant_status;

const char *quant_status_name(int status);

#define QUANT_QK 32   /* elements per block of Q4_0 .. Q8_0 */
#define QUANT_QK_K 256 /* elements per super-block of the k-quants */

/* ---- block layouts (ggml-common.h order; `d` and `dmin` are IEEE binary16) ----------- */

/* x[i] = (q[i] - 8) * d. qs[j] low nibble is element j, high nibble element j + 16. */
typedef struct { uint8_t d[2]; uint8_t qs[QUANT_QK / 2]; } quant_block_q4_0;
/* x[i] = q[i] * d + m, nibbles as Q4_0. */
typedef struct { uint8_t d[2]; uint8_t m[2]; uint8_t qs[QUANT_QK / 2]; } quant_block_q4_1;
/* x[i] = (q[i] - 16) * d; 5th bit of element i is bit i of qh (little-endian u32). */
typedef struct { uint8_t d[2]; uint8_t qh[4]; uint8_t qs[QUANT_QK / 2]; } quant_block_q5_0;
/* x[i] = q[i] * d + m, bits as Q5_0. */
typedef struct { uint8_t d[2]; uint8_t m[2]; uint8_t qh[4]; uint8_t qs[QUANT_QK / 2]; } quant_block_q5_1;
/* x[i] = qs[i] * d. */
typedef struct { uint8_t d[2]; int8_t qs[QUANT_QK]; } quant_block_q8_0;

/* 16 sub-blocks of 16; scales[j] low nibble = scale, high nibble = min;
 * x = d * sc * q - dmin * m, q 2-bit from qs (4 per byte, 32-byte groups, shift 0,2,4,6). */
typedef struct {
    uint8_t scales[QUANT_QK_K / 16];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t d[2];
    uint8_t dmin[2];
} quant_block_q2_K;
/* 16 sub-blocks of 16 with 6-bit signed scales (bias 32) packed in 12 bytes;
 * q = 2 low bits from qs minus 4 where the hmask bit is clear; x = d * (sc - 32) * q. */
typedef struct {
    uint8_t hmask[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t scales[12];
    uint8_t d[2];
} quant_block_q3_K;
/* 8 sub-blocks of 32 with 6-bit scale and min packed in 12 bytes;
 * x = d * sc * q - dmin * m, q 4-bit: byte l of 32-byte chunk c holds sub-block 2c (low
 * nibble) and 2c+1 (high nibble). */
typedef struct {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q4_K;
/* As Q4_K plus a 5th bit: bit 2c of qh[l] for sub-block 2c, bit 2c+1 for 2c+1. */
typedef struct {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qh[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q5_K;
/* 16 sub-blocks of 16 with int8 scales; q 6-bit = 4 from ql + 2 from qh, x = d*sc*(q-32). */
typedef struct {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint8_t d[2];
} quant_block_q6_K;
/* Activation super-block (also a ggml type): x = d * qs, bsums[j] = sum of qs[16j..16j+15].
 * d is a float32, so this block needs 4-byte alignment; it only lives in our buffers. */
typedef struct {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
} quant_block_q8_K;

/* Activation block for the 32-element weight types. Not a GGUF type: ggml's Q8_0 rounds
 * the scale to fp16; a float32 scale keeps one less rounding and is cheaper to load. */
typedef struct {
    float d;
    int8_t qs[QUANT_QK];
} quant_block_q8_a;

/* Activation block for the weight types with an offset (Q4_1: x = q * d + m): q8_a's d and qs
 * (the same values quantize_q8_a writes) plus s = d * (float)sum(qs), so that the offset's
 * part of a block's dot, m * d * sum(qs), costs one multiply instead of a pass over qs per
 * weight row. Not a GGUF type (ggml's Q8_1 stores d and s as fp16). */
typedef struct {
    float d;
    float s;
    int8_t qs[QUANT_QK];
} quant_block_q8_a1;

_Static_assert(sizeof(quant_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(quant_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(quant_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(quant_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(quant_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(quant_block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(quant_block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(quant_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(quant_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(quant_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(quant_block_q8_K) == 292, "Q8_K block is 292 bytes");
_Static_assert(sizeof(quant_block_q8_a) == 36, "Q8_A block is 36 bytes");
_Static_assert(sizeof(quant_block_q8_a1) == 40, "Q8_A1 block is 40 bytes");

/* The 12 scale bytes of Q4_K/Q5_K hold 8 six-bit scales and 8 six-bit mins: for j < 4,
 * scale j and min j are the low 6 bits of bytes j and j+4; for j >= 4 the low 4 bits come
 * from byte j+4 (scale: low nibble, min: high nibble) and the top 2 bits from the top
 * bits of bytes j-4 (scale) and j (min). */
static inline void quant_k4_scales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = (uint8_t)(s[j] & 63);
        mn[j] = (uint8_t)(s[j + 4] & 63);
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* ---- type properties ---------------------------------------------------------------- */

/* 1 if `type` is one of the types above, else 0. */
int quant_type_valid(int type);
/* "Q4_K" etc.; "?" for an unknown id. */
const char *quant_type_name(int type);
/* Elements per block (1 for F32/F16/BF16); 0 for an unknown id. */
int64_t quant_block_elems(int type);
/* Bytes per block; 0 for an unknown id. */
size_t quant_block_bytes(int type);
/* Bytes of a row of n elements; 0 when the type is unknown or n is not a whole number of
 * blocks (or negative). */
size_t quant_row_bytes(int type, int64_t n);

/* An IEEE binary16 from two little-endian bytes at any address (converted by the library's
 * tq_f16_to_f32, the project's one fp16 converter; tq_f32_to_f16 the other way), and a
 * bfloat16 to binary32. */
float quant_f16_load(const uint8_t p[2]);
float quant_bf16_to_f32(uint16_t h);

/* ---- scalar reference dequantization ------------------------------------------------ */

/* Writes n floats to dst from n elements of `type` at src (quant_row_bytes(type, n) bytes,
 * any alignment). Returns QUANT_OK, QUANT_ERR_TYPE, QUANT_ERR_SIZE (n not a whole number of
 * blocks) or QUANT_ERR_ARG (NULL). Writes nothing on error. Q8_K src must be 4-aligned. */
int quant_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* ---- activation quantization (reference) --------------------------------------------- */

/* Which activation format a weight type's dot kernel consumes. */
typedef enum quant_act {
    QUANT_ACT_F32 = 0,  /* float rows as given (F32, F16, BF16 weights) */
    QUANT_ACT_Q8_A = 1, /* quant_block_q8_a (Q4_0, Q5_0, Q8_0) */
    QUANT_ACT_Q8_K = 2, /* quant_block_q8_K (Q4_K, Q5_K, Q6_K) */
    QUANT_ACT_NONE = 3, /* no direct kernel: dequantize the weight row, then float dot */
    QUANT_ACT_Q8_A1 = 4 /* quant_block_q8_a1 (Q4_1) */
} quant_act;

quant_act quant_act_format(int type);
/* Bytes of one activation row of n elements in `act` format (0 if n is not a multiple of
 * its block, or act is QUANT_ACT_NONE/F32: F32 rows are used in place). */
size_t quant_act_row_bytes(quant_act act, int64_t n);

/* Symmetric 8-bit quantization, per block: d = max|x| / 127, q = round_half_even(x / d),
 * written as x * (1/d). dst must be 4-byte aligned; n a multiple of 32 (q8_a) or 256 (q8_K).
 * The SIMD versions in the kernel sets produce identical bytes. */
void quant_quantize_q8_a_ref(const float *x, void *dst, int64_t n);
void quant_quantize_q8_K_ref(const float *x, void *dst, int64_t n);
/* q8_a1: d and qs exactly as quant_quantize_q8_a_ref, s = d * (float)sum(qs). */
void quant_quantize_q8_a1_ref(const float *x, void *dst, int64_t n);

/* ---- kernel sets --------------------------------------------------------------------- */

/* Most activation rows one dot call handles; the matmul tiles n into groups of this. */
#define QUANT_DOT_MAX_NX 8

/* out[r] = sum_i w[i] * x_r[i] for r < nx, where w is a row of n elements of the kernel's
 * weight type and x_r = (const char *)x + r * x_stride is an activation row in
 * quant_act_format(type). n is a whole number of blocks, 1 <= nx <= QUANT_DOT_MAX_NX.
 * Each weight block is decoded once and applied to all nx rows. */
typedef void (*quant_dot_fn)(int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                             float *out);

/* The largest tile dot_f32_tile takes: QUANT_F32_TILE weight rows by as many activation rows. */
#define QUANT_F32_TILE 4

/* Weight rows per call of a gemm kernel (one 512-bit vector of int32 lanes, one per row). */
#define QUANT_GEMM_ROWS 16

/* The batched form of dot, for prefill: y[i * y_stride + r] for r < nw (1 <= nw <=
 * QUANT_GEMM_ROWS weight rows, w_row_bytes apart) and i < nx (any nx >= 1) activation rows,
 * each value bit for bit what the set's dot gives for that pair. The weight rows are decoded
 * once into `scratch` (quant_gemm_scratch_bytes(n) bytes, 64-aligned, the caller's per
 * thread), interleaved so that one vector holds four bytes of every row; each activation is
 * then one broadcast per four bytes. x holds the activation rows in quant_act_format(type)
 * as for dot; xu the same rows' 8-bit values plus 128 as unsigned bytes (n per row,
 * xu_stride apart), the form the u8 x s8 products take where the weights are the signed side
 * (Q4_0, Q5_0, Q4_1, Q8_0; Q4_K and Q6_K ignore xu: their unsigned values meet the signed
 * activations). */
typedef void (*quant_gemm_fn)(int64_t n, const void *w, size_t w_row_bytes, int nw, const void *x, size_t x_stride,
                              const uint8_t *xu, size_t xu_stride, int nx, float *y, size_t y_stride, void *scratch);
/* Bytes of a gemm kernel's scratch for rows of n elements (n a multiple of 32). */
size_t quant_gemm_scratch_bytes(int64_t n);

typedef struct quant_kernels {
    const char *name; /* "ref", "avx2", "avx512", "avx512-vnni", "neon", "neon-dotprod" */
    void (*quantize_q8_a)(const float *x, void *dst, int64_t n);
    void (*quantize_q8_K)(const float *x, void *dst, int64_t n);
    void (*quantize_q8_a1)(const float *x, void *dst, int64_t n);
    /* Plain float dot product of n elements, any alignment; used after dequantization. */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    /* y[i * y_stride + r] = dot_f32(w + r * n, x + i * n, n) for r < nw, i < nx (1 <= nw, nx
     * <= QUANT_F32_TILE): each value bit for bit what dot_f32 returns for that pair, with the
     * tile's weight and activation rows loaded once per step for all pairs (the fp32 matmul). */
    void (*dot_f32_tile)(const float *w, int nw, const float *x, int nx, int64_t n, float *y, size_t y_stride);
    /* quant_dequantize_row, bit for bit (the fp32 matmul's weight rows). */
    int (*dequantize_row)(int type, const void *src, float *dst, int64_t n);
    quant_dot_fn dot[QUANT_TYPE_COUNT]; /* NULL where quant_act_format() is NONE */
    /* NULL where the set has no batched kernel for the type (then dot serves every n). */
    quant_gemm_fn gemm[QUANT_TYPE_COUNT];
} quant_kernels;

/* Best set for this CPU, or the reference when forced. Never NULL. */
const quant_kernels *quant_kernels_get(void);
/* Name of the set quant_kernels_get() returns now. */
const char *quant_kernels_name(void);
/* on != 0: quant_kernels_get() returns the reference set from now on; on == 0: back to the
 * CPU's best (this also overrides TQ_FORCE_REF). Takes effect for later calls only. */
void quant_force_reference(int on);
/* Fills out[0..cap) with every set this CPU can run, reference first; returns the count. */
int quant_kernels_list(const quant_kernels **out, int cap);

/* Fill a table (for quants_dispatch.c): ref fills every entry; the ISA fills override the
 * entries they accelerate and leave the rest. Call an ISA fill only on a CPU that has it. */
void quant_fill_ref(quant_kernels *k);
void quant_fill_avx2(quant_kernels *k);
void quant_fill_avx512(quant_kernels *k);
void quant_fill_avx512_vnni(quant_kernels *k);
void quant_fill_neon(quant_kernels *k);         /* AArch64 Advanced SIMD (quants_neon.c) */
void quant_fill_neon_dotprod(quant_kernels *k); /* the same with ARMv8.2-A vdotq_s32 */

#endif

/*
 * turboquant.h — the public API of libturboquant.
 *
 * TurboQuant (Zandieh, Daliri, Hadian, Mirrokni, arXiv:2504.19874) compresses one vector at a
 * time, online and without calibration: a seeded random rotation gives every coordinate of a
 * unit vector a known density, a Lloyd-Max codebook for that density quantizes each coordinate
 * to a few bits, and the packed indices plus a norm replace the fp32/fp16 data.
 *
 * General guarantees, valid for every function below unless its comment says otherwise:
 *  - The library never prints, never exits or aborts, and never allocates in the encode,
 *    decode, score and accumulate calls. Objects are created and freed by the caller through
 *    tq_*_create / tq_*_free; every free function accepts NULL.
 *  - Functions return a tq_status. TQ_OK is 0; every other value is a pinned error code whose
 *    name tq_error_name() returns. On error, output buffers may have been partly written but
 *    never past the capacity the caller gave.
 *  - Objects (rotations, codecs) are immutable after creation, so one object may be used from
 *    many threads at once. Creation itself is thread-safe.
 *  - Vectors are arrays of float in row-major order: N vectors of dim D are N*D floats.
 *  - Codes are byte strings in the layout written in doc/format.md; they may sit at any
 *    address (no alignment is required) and are the same on every little- or big-endian host.
 */
#ifndef TURBOQUANT_H
#define TURBOQUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(TQ_BUILDING_SHARED)
#define TQ_API __declspec(dllexport)
#elif defined(__GNUC__)
#define TQ_API __attribute__((visibility("default")))
#else
#define TQ_API
#endif

/* ---------------------------------------------------------------------------------------- */
/* Version                                                                                   */
/* ---------------------------------------------------------------------------------------- */

#define TQ_VERSION_MAJOR 0
#define TQ_VERSION_MINOR 1
#define TQ_VERSION_PATCH 0
#define TQ_VERSION_NUMBER (TQ_VERSION_MAJOR * 10000 + TQ_VERSION_MINOR * 100 + TQ_VERSION_PATCH)
#define TQ_VERSION_STRING "0.1.0"

/* The version of the library actually linked (compare with TQ_VERSION_NUMBER). */
TQ_API int tq_version_number(void);
TQ_API const char *tq_version_string(void);

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* Values are pinned: they never change meaning between versions. */
typedef enum tq_status {
    TQ_OK = 0,
    TQ_ERR_NULL = 1,          /* a required pointer argument was NULL */
    TQ_ERR_DIM = 2,           /* dimension outside [TQ_MIN_DIM, TQ_MAX_DIM] or unsupported */
    TQ_ERR_BITS = 3,          /* bit width outside [1, 8], or a fraction that does not split
                                 the dimension into a whole number of coordinates */
    TQ_ERR_VARIANT = 4,       /* unknown codec variant, rotation kind, split or norm format */
    TQ_ERR_CAPACITY = 5,      /* an output buffer is smaller than the call needs */
    TQ_ERR_NONFINITE = 6,     /* an input vector holds NaN or Inf */
    TQ_ERR_RANGE = 7,         /* a finite value overflows what the format stores (e.g. a norm
                                 beyond fp16 range with fp16 norms) */
    TQ_ERR_NOMEM = 8,         /* memory allocation failed */
    TQ_ERR_INVALID = 9,       /* an argument is inconsistent with the others */
    TQ_ERR_CORRUPT = 10,      /* codes hold values no encoder produces (bad norm, NaN norm) */
    TQ_ERR_UNSUPPORTED = 11,  /* the requested kernel set is not supported by this CPU */
    /* Reserved for the KV cache and its files. */
    TQ_ERR_SCHEME = 12,       /* a scheme string that does not parse */
    TQ_ERR_IO = 13,           /* a file could not be read or written */
    TQ_ERR_FORMAT = 14,       /* a file is not a cache file, or is truncated */
    TQ_ERR_VERSION = 15,      /* a file of an unsupported format version */
    TQ_ERR_CHECKSUM = 16,     /* a section's checksum does not match */
    TQ_ERR_MISMATCH = 17,     /* a file's shapes or scheme do not match the caller's */
    TQ_ERR_STATE = 18         /* the call is not valid in the object's current state */
} tq_status;

/* A static string naming the code ("TQ_ERR_BITS"); "TQ_ERR_UNKNOWN" for other values. */
TQ_API const char *tq_error_name(tq_status status);
/* A static one-line English description of the code. */
TQ_API const char *tq_error_message(tq_status status);

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* Hot loops have a scalar reference and SIMD versions; the best one the CPU supports is chosen
 * once, at the first library call. The environment variable TQ_FORCE_REF=1 (read once, at that
 * first call) or tq_set_kernels(TQ_KERNELS_REF) forces the scalar reference. Integer results
 * (indices, packed codes) are identical on every kernel set; float results agree within the
 * tolerances stated in tests/test_kernels.c. */
typedef enum tq_kernels_kind {
    TQ_KERNELS_AUTO = 0,  /* the best the CPU supports */
    TQ_KERNELS_REF = 1,   /* portable scalar C */
    TQ_KERNELS_AVX2 = 2,  /* AVX2 + FMA (x86-64) */
    TQ_KERNELS_AVX512 = 3 /* AVX-512 F/BW/VL/DQ (x86-64) */
} tq_kernels_kind;

/* Selects the kernel set used by every later call. Not thread-safe against concurrent codec
 * calls: select before starting work. Returns TQ_ERR_UNSUPPORTED if the CPU (or this build)
 * lacks the set, TQ_ERR_VARIANT for an unknown kind. */
TQ_API tq_status tq_set_kernels(tq_kernels_kind kind);
/* The kernel set in use ("ref", "avx2", "avx512"). */
TQ_API const char *tq_kernels_name(void);
/* The attention kernels that go with it: the same name, or "avx512-vnni" where the AVX-512 set
 * decodes over compressed keys and values in integers (int8 queries and centroids, uint8
 * weights, exact int32 sums; on CPUs with AVX-512 VBMI and VNNI, unless TQ_INT8_SCORES=0 is in
 * the environment at the first call; see doc/kvcache.md). */
TQ_API const char *tq_attn_kernels_name(void);
/* 1 if this CPU and build support the set, else 0. */
TQ_API int tq_kernels_supported(tq_kernels_kind kind);

/* ---------------------------------------------------------------------------------------- */
/* Rotation                                                                                  */
/* ---------------------------------------------------------------------------------------- */

#define TQ_MIN_DIM 2
#define TQ_MAX_DIM 1024

typedef enum tq_rotation_kind {
    /* Hadamard for power-of-two dims, block Hadamard otherwise (measured equal to dense in
     * doc/rotation.md). */
    TQ_ROTATION_AUTO = 0,
    /* Randomized Walsh–Hadamard, TQ_HADAMARD_ROUNDS rounds of (seeded ±1 signs, fast WHT),
     * scaled to be orthonormal; power-of-two dims only. O(d log d). */
    TQ_ROTATION_HADAMARD = 1,
    /* Dense orthogonal matrix: Householder QR of a seeded Gaussian matrix. O(d^2). The
     * reference for every dim. */
    TQ_ROTATION_DENSE = 2,
    /* Any dim: rounds of seeded signs and an orthonormal WHT over the first and the last
     * 2^floor(log2 d) coordinates alternately (overlapping blocks). O(d log d). */
    TQ_ROTATION_BLOCK_HADAMARD = 3
} tq_rotation_kind;

#define TQ_HADAMARD_ROUNDS 3

typedef struct tq_rotation tq_rotation;

/* Creates the rotation for (dim, seed, kind). The same arguments give the same rotation on
 * every machine (own PRNG). Errors: TQ_ERR_NULL, TQ_ERR_DIM (dim outside [2, 1024], or a
 * non-power-of-two dim with TQ_ROTATION_HADAMARD), TQ_ERR_VARIANT, TQ_ERR_NOMEM. */
TQ_API tq_status tq_rotation_create(tq_rotation **out, int dim, uint64_t seed,
                                    tq_rotation_kind kind);
TQ_API void tq_rotation_free(tq_rotation *rotation);
TQ_API int tq_rotation_dim(const tq_rotation *rotation);
/* The kind actually used (AUTO resolved). */
TQ_API tq_rotation_kind tq_rotation_get_kind(const tq_rotation *rotation);

/* y = R x for n vectors (n*dim floats each). x == y (in place) is allowed; other overlap is
 * not. Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_rotation_forward(const tq_rotation *rotation, const float *x, float *y,
                                     size_t n);
/* x = R^T y for n vectors; the exact inverse of tq_rotation_forward up to float rounding. */
TQ_API tq_status tq_rotation_inverse(const tq_rotation *rotation, const float *y, float *x,
                                     size_t n);

/* ---------------------------------------------------------------------------------------- */
/* Codebooks                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* The Lloyd-Max quantizer of one coordinate of a uniformly random unit vector in R^dim, whose
 * density is f(t) = Γ(d/2) / (√π Γ((d−1)/2)) (1 − t²)^((d−3)/2) on [−1, 1] (paper §3.1).
 * Values are scaled by √dim, so that for large dim they approach the N(0, 1) quantizer. */
typedef struct tq_codebook {
    int dim;
    int bits;
    int levels;               /* 2^bits */
    const float *centroids;   /* (levels,) increasing, symmetric about 0, ×√dim */
    const float *boundaries;  /* (levels − 1,) midpoints of adjacent centroids, ×√dim */
    double mse;               /* D(b) = dim · E[(t − c(t))²]: the normalized MSE of a unit vector */
} tq_codebook;

/* Returns the codebook for (dim, bits), computing it on first use (Lloyd iterations on the exact
 * density by numerical integration, a few ms) and caching it for the life of the process; the
 * pointer stays valid until then. Thread-safe. Errors: TQ_ERR_NULL, TQ_ERR_DIM, TQ_ERR_BITS
 * (bits outside [1, 8]), TQ_ERR_NOMEM. */
TQ_API tq_status tq_codebook_get(int dim, int bits, const tq_codebook **out);

/* ---------------------------------------------------------------------------------------- */
/* Codecs                                                                                    */
/* ---------------------------------------------------------------------------------------- */

typedef enum tq_variant {
    TQ_VARIANT_MSE = 0,  /* Algorithm 1: minimum reconstruction error */
    TQ_VARIANT_PROD = 1  /* Algorithm 2: (b−1)-bit MSE + 1-bit QJL sketch, unbiased ⟨q, x⟩ */
} tq_variant;

typedef enum tq_split {
    /* Fractional bits: the first h rotated coordinates take ⌈b⌉ bits, the rest ⌊b⌋; one
     * rotation and one norm. Needs no calibration (measurements: doc/codec.md, "Fractional
     * bits"). */
    TQ_SPLIT_FIXED = 0,
    /* Fractional bits: the h input channels of largest energy (cfg.channel_energy) form the
     * ⌈b⌉-bit group; each group has its own rotation (dims h and d − h) and its own norm. */
    TQ_SPLIT_ENERGY = 1,
    /* Two blocks of input channels, each with its own rotation: [0, block_dim) at block_bits
     * bits and [block_dim, dim) at the width that makes the average `bits` (a whole number
     * of bits, [1, 8]); one norm over the whole vector, and the record layout of
     * TQ_SPLIT_FIXED (segment 0 = the first block). Both blocks are quantized with the
     * dim-d codebooks, which fit when the caller makes the mean square per channel of the two
     * blocks equal (the KV cache's key split does: doc/kvcache.md). MSE only. */
    TQ_SPLIT_BLOCK = 2
} tq_split;

typedef enum tq_norm_format {
    TQ_NORM_F16 = 0,  /* IEEE half: 2 bytes, relative error ≤ 2^-11; |norm| ≤ 65504 */
    TQ_NORM_F32 = 1   /* IEEE single: 4 bytes, any finite norm */
} tq_norm_format;

typedef struct tq_codec_config {
    int dim;                      /* vector length, [2, 1024] */
    float bits;                   /* average bits per coordinate, [1, 8]; fractional values
                                     need bits·dim to split into whole groups (see below) */
    tq_variant variant;
    int norm_correction;          /* MSE only: store n/‖c[idx]‖ so decoded norms equal the
                                     input's (doc/codec.md, "Norm correction"). Default 1;
                                     must be 0 for PROD. */
    tq_norm_format norm_format;   /* default TQ_NORM_F16 */
    tq_rotation_kind rotation;    /* default TQ_ROTATION_AUTO */
    uint64_t seed;                /* rotation (and PROD sketch) seed; default 0x5475726230 */
    tq_split split;               /* default TQ_SPLIT_FIXED */
    const float *channel_energy;  /* (dim,) for TQ_SPLIT_ENERGY: mean square of each channel,
                                     copied at create; ignored otherwise */
    int block_dim;                /* TQ_SPLIT_BLOCK: channels in the first block, [2, dim − 2] */
    int block_bits;               /* TQ_SPLIT_BLOCK: bits of the first block, [1, 8] */
} tq_codec_config;

/* Fills cfg with the defaults above for (dim, bits, variant). cfg may not be NULL. */
TQ_API void tq_codec_config_init(tq_codec_config *cfg, int dim, float bits, tq_variant variant);

typedef struct tq_codec tq_codec;

/* Creates a codec. Bit-width rules: with MSE, bits b in [1, 8]; with PROD, b in [1, 8] and
 * the MSE part uses b − 1 bits (b = 1: sketch only). A fractional b = k + f (0 < f < 1) is
 * valid when h = f·dim is a whole number (within 1e-4); h coordinates then take k + 1 bits
 * (of the MSE part for PROD) and the rest k. With TQ_SPLIT_ENERGY both groups must have at
 * least 2 channels. With TQ_SPLIT_BLOCK (any average b) the first block_dim channels take
 * block_bits and the rest (b·dim − block_bits·block_dim) / (dim − block_dim), which must be a
 * whole number in [1, 8]. Errors: TQ_ERR_NULL, TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_VARIANT,
 * TQ_ERR_INVALID (norm correction with PROD, missing channel_energy, non-finite energy),
 * TQ_ERR_NOMEM. */
TQ_API tq_status tq_codec_create(tq_codec **out, const tq_codec_config *cfg);
TQ_API void tq_codec_free(tq_codec *codec);
/* A copy of the configuration the codec was created with (channel_energy set to NULL). */
TQ_API tq_codec_config tq_codec_get_config(const tq_codec *codec);

/* Exact bytes of one encoded vector; N vectors take N times this, contiguous. */
TQ_API size_t tq_codec_bytes_per_vector(const tq_codec *codec);
/* The same without creating a codec. Errors as tq_codec_create, except TQ_ERR_NOMEM. */
TQ_API tq_status tq_codec_config_bytes(const tq_codec_config *cfg, size_t *bytes_per_vector);

/* Encodes n vectors x (n·dim floats) into codes (n·bytes_per_vector bytes; codes_capacity is
 * its size in bytes; never writes past it). A zero vector encodes to norm 0 and decodes to 0.
 * Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY, TQ_ERR_NONFINITE (NaN/Inf in x, nothing written for
 * that vector or any after it), TQ_ERR_RANGE (a norm beyond fp16 range with TQ_NORM_F16, or a
 * vector whose squared norm overflows float). Vectors before the failing one are written. */
TQ_API tq_status tq_codec_encode(const tq_codec *codec, const float *x, size_t n, void *codes,
                                 size_t codes_capacity);
/* Decodes n vectors into x (x_capacity floats, at least n·dim). Errors: TQ_ERR_NULL,
 * TQ_ERR_CAPACITY, TQ_ERR_CORRUPT (a stored norm that is NaN, Inf or negative: the vector is
 * written as zeros and decoding continues; the error is returned at the end). */
TQ_API tq_status tq_codec_decode(const tq_codec *codec, const void *codes, size_t n, float *x,
                                 size_t x_capacity);

/* Scores without decoding (paper §3; doc/codec.md, "Decode-free scores and sums"). A query is
 * prepared once — rotated, and for PROD also sketched — into tq_codec_query_floats() floats;
 * then each code costs dim codebook lookups and multiply-adds. */
TQ_API size_t tq_codec_query_floats(const tq_codec *codec);
/* Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY (prepared_capacity < tq_codec_query_floats),
 * TQ_ERR_NONFINITE. */
TQ_API tq_status tq_codec_prepare_query(const tq_codec *codec, const float *q, float *prepared,
                                        size_t prepared_capacity);
/* scores[t] = ⟨q, x̂_t⟩ for t < n (MSE: of the reconstruction; PROD: the paper's unbiased
 * estimator of ⟨q, x_t⟩). Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_codec_scores(const tq_codec *codec, const float *prepared, const void *codes,
                                 size_t n, float *scores);

/* Decode-free weighted sums Σ_t w_t·x̂_t. An accumulator of tq_codec_accum_floats() floats lives
 * in the rotated domain: zero it (tq_codec_accum_zero), add codes to it any number of times
 * (tq_codec_accumulate), then tq_codec_accum_finish applies the single inverse rotation.
 * Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API size_t tq_codec_accum_floats(const tq_codec *codec);
TQ_API tq_status tq_codec_accum_zero(const tq_codec *codec, float *acc, size_t acc_capacity);
TQ_API tq_status tq_codec_accumulate(const tq_codec *codec, const void *codes, size_t n,
                                     const float *weights, float *acc);
/* out (dim floats) = the weighted sum in the original basis. acc is used as scratch. */
TQ_API tq_status tq_codec_accum_finish(const tq_codec *codec, float *acc, float *out);
/* One call: out = Σ_t weights[t]·x̂_t. Uses a stack accumulator (≤ 8 KiB). */
TQ_API tq_status tq_codec_weighted_sum(const tq_codec *codec, const void *codes, size_t n,
                                       const float *weights, float *out);

/* ---------------------------------------------------------------------------------------- */
/* Half precision helpers (IEEE binary16, round to nearest even)                              */
/* ---------------------------------------------------------------------------------------- */

TQ_API uint16_t tq_f32_to_f16(float x);
TQ_API float tq_f16_to_f32(uint16_t h);

/* ---------------------------------------------------------------------------------------- */
/* KV cache                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* A cache for one sequence: n_layers × n_kv_heads × head_dim keys and values (doc/kvcache.md).
 * Storage is two-phase: the newest tokens stay in fp16 (the raw part); older ones are
 * compressed in batches into the scheme's format (the compressed part). Token t of a layer is
 * compressed iff t < tq_kv_cache_compressed_length(). Memory grows in pages of
 * TQ_KV_PAGE_TOKENS tokens; growing never copies stored tokens. */

#define TQ_KV_PAGE_TOKENS 256
#define TQ_KV_BLOCK 32 /* elements per q8_0 / q4_0 block (one fp16 scale each) */

/* How one of K or V is stored once compressed. */
typedef enum tq_kv_format {
    TQ_KV_F16 = 0,   /* IEEE half per element: 2·dim bytes */
    TQ_KV_Q8_0 = 1,  /* blocks of 32: fp16 scale + 32 int8 (34 bytes); dim % 16 == 0, a last
                        block of 16 takes 18 bytes */
    TQ_KV_Q4_0 = 2,  /* blocks of 32: fp16 scale + 16 bytes of 4-bit values (18 bytes); dim % 16
                        == 0, a last block of 16 takes 10 bytes */
    TQ_KV_TURBO = 3  /* a TurboQuant codec record (tq_codec_bytes_per_vector) */
} tq_kv_format;

/* The storage of one layer. */
typedef struct tq_kv_layer_scheme {
    tq_kv_format key_format, value_format;
    float key_bits, value_bits; /* TQ_KV_TURBO: bits per coordinate, [1, 8], fractional as for
                                   tq_codec_create (split TQ_SPLIT_FIXED); ignored otherwise */
    tq_variant key_variant;     /* TURBO keys: TQ_VARIANT_MSE (default) or PROD; values are
                                   always MSE (PROD only helps inner products) */
    int norm_correction;        /* TURBO MSE keys and values: default 1 (doc/codec.md,
                                   "Norm correction") */
    int key_mean;               /* TURBO keys: subtract the per-head mean of the first 512
                                   keys held at the layer's first compression (all of them if
                                   fewer) before quantizing, add ⟨q, mean⟩ back to the scores
                                   (models with a large k_proj bias; measured to help on
                                   Gemma 3 too, doc/kvcache.md). Default 1 for TURBO keys */
    int key_scale;              /* TURBO keys: per-channel key scale s (per head), fixed at the
                                   layer's first compression from the keys held then and the
                                   queries observed (tq_kv_cache_observe_queries): keys are
                                   stored as s ⊙ (k − mean) and queries scored as q / s, which
                                   leaves ⟨q, k⟩ unchanged and moves quantization error away
                                   from the channels queries weigh (doc/kvcache.md §2).
                                   Default 1 for TURBO keys */
    int key_split;              /* TURBO MSE keys with key_scale at a fractional width
                                   b = k + f ≤ 4: at the first compression each head's channels
                                   are ranked by query × key energy and the first f·d form a
                                   block of their own (own rotation) at k + 1 bits, the rest
                                   another at k, where a fixed split would spread the extra bit
                                   over all channels. Same bytes per token; no effect at whole
                                   widths, above 4 bits or with PROD (doc/kvcache.md §2).
                                   tq_kv_cache_layer_scheme reports whether it is in effect.
                                   Default 1 for TURBO keys */
} tq_kv_layer_scheme;

/* A whole-cache scheme: the layer scheme, optional higher precision at the edges, and the
 * two-phase parameters. */
typedef struct tq_kv_scheme {
    tq_kv_layer_scheme layer;  /* every layer not at an edge */
    tq_kv_layer_scheme edge;   /* the first edge_first and the last edge_last layers */
    int edge_first, edge_last; /* default 0, 0 */
    int raw_window;            /* newest tokens always kept fp16; default 0 */
    int batch;                 /* pending tokens are compressed `batch` at a time; default 64 */
    int quantized_kv_start;    /* nothing is compressed while the length is below this (the
                                  mlx-vlm parameter); default 0 */
    int prefill_raw;           /* 1 (default): multi-token appends stay raw until the first
                                  single-token append (the first decode step) or
                                  tq_kv_cache_compress, as mlx-swift-lm does; 0: compress on
                                  every append. The final state is the same either way */
    uint64_t seed;             /* rotation seed of every TURBO codec; default as
                                  tq_codec_config_init */
} tq_kv_scheme;

/* Parses a scheme string into *out (every field set). Forms (doc/kvcache.md):
 *   f16 | q8_0 | q4_0                        the same format for K and V
 *   turboB                                   B-bit keys and values, B ∈ [1, 8], fractional ok
 *                                            (turbo2, turbo3, turbo3.5, turbo4 …)
 *   turboKvV                                 K-bit keys, V-bit values; 0 (or f16, q8_0,
 *                                            q4_0) for a plain format (turbo4v2, turbo0v4,
 *                                            turbo8v4, turboq8_0v4 …)
 *   kKvV                                     the same (k3.5v3, kq8_0v4)
 *   k=K:v=V[:option…]                        explicit; K, V a number, f16, q8_0 or q4_0
 * followed by any of the options, each ":name=value":
 *   variant=mse|prod  norm=0|1  mean=0|1  kscale=0|1  ksplit=0|1  window=N  batch=N
 *   start=N  prefill_raw=0|1  seed=N  first=N  last=N  edge=FORM (the first/last layers'
 *   form, no options; default turbo8 when first or last is given). variant, norm, mean,
 *   kscale and ksplit apply to both; norm=1 with variant=prod is refused.
 * Numbers are digits only (no sign, space, exponent or empty value; a bit width may hold one
 * '.'), range-checked per field, never clamped: window/start/first/last [0, 2^30], batch
 * [1, 2^30], flags 0 or 1, seed [0, 2^64 − 1] (doc/kvcache.md §2).
 * Errors: TQ_ERR_NULL (text or out), TQ_ERR_SCHEME (does not parse; when err is not NULL a
 * NUL-terminated message naming the bad part and listing the valid forms is written to err,
 * truncated to err_capacity bytes). Bit widths are checked for range only here; whether a
 * fraction splits a given head_dim is checked by tq_kv_cache_create. */
TQ_API tq_status tq_kv_scheme_parse(const char *text, tq_kv_scheme *out, char *err,
                                    size_t err_capacity);
/* A static multi-line string listing the valid scheme forms. */
TQ_API const char *tq_kv_scheme_help(void);
/* Writes the canonical explicit form of *scheme (parses back to the same scheme) into buf
 * (NUL-terminated). Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY (buf too small; 256 bytes always
 * suffice), TQ_ERR_INVALID (a field out of range). */
TQ_API tq_status tq_kv_scheme_format(const tq_kv_scheme *scheme, char *buf, size_t capacity);

/* Exact bytes per token of one KV head once compressed, for keys of dim head_dim_k and values
 * of dim head_dim_v (the raw fp16 part costs 2·(head_dim_k + head_dim_v)). Errors:
 * TQ_ERR_NULL, TQ_ERR_DIM (q8_0/q4_0 with dim % 16 != 0, or a dim out of range), TQ_ERR_BITS,
 * TQ_ERR_VARIANT. */
TQ_API tq_status tq_kv_layer_scheme_bytes(const tq_kv_layer_scheme *layer, int head_dim_k,
                                          int head_dim_v, size_t *key_bytes,
                                          size_t *value_bytes);

typedef struct tq_kv_cache_config {
    int n_layers;                 /* [1, 4096] */
    int n_kv_heads;               /* [1, 1024] */
    int head_dim_k, head_dim_v;   /* [TQ_MIN_DIM, TQ_MAX_DIM] each */
    tq_kv_scheme scheme;
    const tq_kv_layer_scheme *layer_schemes; /* (n_layers,) per-layer overrides, copied at
                                                create; wins over scheme.layer/edge; or NULL */
    size_t reserve_tokens;        /* tokens of capacity allocated at create (default 0) */
    const size_t *layer_windows;  /* (n_layers,) or NULL (copied at create): per layer, the
                                     most positions one query attends (a sliding window; 0:
                                     all; at most 2^30). A windowed layer keeps only the newest window +
                                     TQ_KV_WINDOW_SLACK positions and recycles the pages of
                                     older ones, so its memory stays bounded at any length;
                                     see tq_kv_cache_dropped_length for what that rules out */
} tq_kv_cache_config;

/* Positions a windowed layer keeps beyond its window: truncating by up to this many tokens
 * (speculative decoding, a short edit) stays possible. */
#define TQ_KV_WINDOW_SLACK 256

/* Fills cfg: the shapes given, scheme "f16", no overrides. cfg may not be NULL. */
TQ_API void tq_kv_cache_config_init(tq_kv_cache_config *cfg, int n_layers, int n_kv_heads,
                                    int head_dim_k, int head_dim_v);

typedef struct tq_kv_cache tq_kv_cache;

/* Creates an empty cache. Errors: TQ_ERR_NULL, TQ_ERR_INVALID (a count out of range, batch <
 * 1, negative window/start/edges, a layer window over 2^30), TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_VARIANT (as the codecs),
 * TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_create(tq_kv_cache **out, const tq_kv_cache_config *cfg);
TQ_API void tq_kv_cache_free(tq_kv_cache *cache);
/* The config the cache was created with (layer_schemes NULL; layer_windows points to the
 * cache's own copy, valid until tq_kv_cache_free, NULL when no layer has a window), and the
 * scheme of one layer
 * (overrides and edges resolved, key_mean / key_scale / key_split as in effect; a zeroed
 * struct for a bad layer). */
TQ_API tq_kv_cache_config tq_kv_cache_get_config(const tq_kv_cache *cache);
TQ_API tq_kv_layer_scheme tq_kv_cache_layer_scheme(const tq_kv_cache *cache, int layer);

/* Makes room for n_tokens tokens in every layer, so that appends up to that length allocate
 * nothing. Errors: TQ_ERR_NULL, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_reserve(tq_kv_cache *cache, size_t n_tokens);

/* Appends n_tokens tokens to one layer: k (n_tokens, n_kv_heads, head_dim_k) and v
 * (n_tokens, n_kv_heads, head_dim_v) floats, already position-encoded. They are stored fp16
 * and, per the scheme's two-phase rules, older raw tokens are then compressed (K and V in one
 * pass). Allocates a page when the layer outgrows its capacity. Not thread-safe for the same
 * layer; different layers may be appended from different threads at once.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer), TQ_ERR_NONFINITE (NaN/Inf in k or v:
 * nothing is appended), TQ_ERR_RANGE (a value beyond fp16 range: nothing appended; or, while
 * compressing, a vector whose norm overflows fp16: the tokens are appended and stay raw from
 * that one on), TQ_ERR_NOMEM (nothing appended). */
TQ_API tq_status tq_kv_cache_append(tq_kv_cache *cache, int layer, const float *k,
                                    const float *v, size_t n_tokens);
/* Compresses every pending raw token the scheme allows now (as a decode step would), for one
 * layer or, with layer = -1, all. Errors: TQ_ERR_NULL, TQ_ERR_INVALID, TQ_ERR_RANGE (a norm
 * beyond fp16; the layer stays valid, tokens from the failing one on stay raw). */
TQ_API tq_status tq_kv_cache_compress(tq_kv_cache *cache, int layer);

/* Records the channel energies of n query positions q (n, n_q_heads, head_dim_k) of one layer
 * for its key scale (tq_kv_layer_scheme.key_scale): call it before the append that goes with
 * those queries, as attention will see them. Until the layer's first compression fixes the
 * scale, every call adds to the statistics; afterwards, and for layers without a key scale,
 * it does nothing. Without any observed queries the scale is estimated from the keys alone
 * (weaker: doc/kvcache.md §2). Not thread-safe for the same layer, like append.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer, n_q_heads not a multiple of n_kv_heads),
 * TQ_ERR_NONFINITE (nothing recorded). */
TQ_API tq_status tq_kv_cache_observe_queries(tq_kv_cache *cache, int layer, const float *q,
                                             int n_q_heads, size_t n);
/* The key scale of a layer, (n_kv_heads, head_dim_k) floats into out, once it is fixed.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer, no key scale, or not fixed yet). */
TQ_API tq_status tq_kv_cache_key_scale(const tq_kv_cache *cache, int layer, float *out);

/* Tokens stored in a layer, and how many of them are compressed (0 for a bad layer). */
TQ_API size_t tq_kv_cache_length(const tq_kv_cache *cache, int layer);
TQ_API size_t tq_kv_cache_compressed_length(const tq_kv_cache *cache, int layer);

/* The two-phase rule as a function of the length (doc/kvcache.md §3): how many leading tokens
 * a layer that compresses (K or V not f16) holds compressed at length len once compression
 * has started — 0 below quantized_kv_start or up to raw_window tokens, else
 * ⌊(len − raw_window) / batch⌋ · batch. 0 for a NULL scheme or batch < 1. */
TQ_API size_t tq_kv_scheme_compressed_length(const tq_kv_scheme *scheme, size_t len);
/* Decode-exact chunking: the most tokens n ≤ max_n that one append at length pos followed by
 * one tq_kv_attention call can take such that each of its queries sees every key exactly as
 * a single-token decode step at that query's position would (compressed or still fp16), and
 * the first compression (which fixes the key mean, scale and split) sees the same tokens:
 * the run up to the next change of the compressed length, 1 at the first compression. With
 * prefill_raw = 0 (or compression started), appending in such chunks gives the scores of
 * token-by-token decode at prefill cost (model_forward_as_decode, tq perplexity --as-decode).
 * 0 when max_n is 0 or the scheme is NULL. */
TQ_API size_t tq_kv_scheme_decode_chunk(const tq_kv_scheme *scheme, size_t pos, size_t max_n);

/* Rolls every layer back to `length` tokens (speculative decoding, chat edits), across the
 * raw/compressed boundary: tokens kept keep their exact stored bytes; pages are kept for reuse.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (length beyond some layer's length; nothing changed). */
TQ_API tq_status tq_kv_cache_truncate(tq_kv_cache *cache, size_t length);

/* Reads tokens [start, start + n) of a layer back as floats (dequantized; the key mean added
 * back): k (n, n_kv_heads, head_dim_k), v (n, n_kv_heads, head_dim_v); either may be NULL.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer or range), TQ_ERR_CORRUPT. */
TQ_API tq_status tq_kv_cache_read(const tq_kv_cache *cache, int layer, size_t start, size_t n,
                                  float *k, float *v);

typedef struct tq_kv_memory {
    size_t tokens;          /* Σ over layers of the stored tokens (not dropped ones) */
    size_t compressed_tokens;
    size_t data_bytes;      /* exact bytes of stored token data (codes, scales, fp16) */
    size_t allocated_bytes; /* pages (spare and reserved ones too), key means, page tables,
                               the cache structs; not the codecs' rotation tables */
    size_t f16_bytes;       /* what the same tokens take in fp16: 2·(dk+dv)·heads per token */
} tq_kv_memory;

/* Positions [0, n) of a windowed layer that are gone (0 for other layers): reading them,
 * attending to them (a query whose window reaches below n), saving the cache or converting
 * it fails with TQ_ERR_INVALID, and so does truncating to a length L > 0 whose next query
 * would need them (L + 1 − window < n); truncating to 0 resets the layer. */
TQ_API size_t tq_kv_cache_dropped_length(const tq_kv_cache *cache, int layer);

/* Memory in use. Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_kv_cache_memory(const tq_kv_cache *cache, tq_kv_memory *mem);

/* Creates *out, a cache of src's shapes and layer windows with `scheme`, holding src's tokens
 * (read back from src and re-appended; compressed per scheme as after a decode step). From an
 * f16 cache this is the f16 → TurboQuant conversion. Errors: as tq_kv_cache_create and
 * tq_kv_cache_append. */
TQ_API tq_status tq_kv_cache_convert(const tq_kv_cache *src, const tq_kv_scheme *scheme,
                                     tq_kv_cache **out);

/* ---- Cache files (doc/cachefile.md: format version 4; versions 1 to 3 still load) ----
 * A file holds the whole state of a cache: shapes, scheme (every layer's, resolved), the layer
 * windows, seed, and
 * per layer the length, the compression boundary, the two-phase flags, the key mean, the key
 * scale and its query statistics, the compressed records and the raw fp16 tokens, each section
 * with a CRC32C. Loading restores
 * the identical state: tq_kv_cache_read, tq_kv_attention and later appends give the same bits
 * as on the cache that was saved, and saving the loaded cache gives the same bytes. The file is
 * little-endian on every host. Saving reads the cache only (not concurrently with an append,
 * compress or truncate); loading creates a new cache (reserve_tokens 0). */

/* The format version the writer writes (the u32 at byte 8 of every file it saves). The loader
 * reads versions 1 to TQ_KV_CACHE_FILE_VERSION: 1 (before the key scale), 2 (before the key
 * split) and 3 (before the layer windows) load as the caches they were written from. */
#define TQ_KV_CACHE_FILE_VERSION 4

/* Exact bytes tq_kv_cache_save_memory writes for the cache now; 0 for NULL. */
TQ_API size_t tq_kv_cache_save_bound(const tq_kv_cache *cache);
/* Writes the file image into dst (capacity bytes; never writes past it) and its size into
 * *written (may be NULL). Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY (capacity < the bound),
 * TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_save_memory(const tq_kv_cache *cache, void *dst, size_t capacity,
                                         size_t *written);
/* Saves atomically: writes a new file "<path>.tmp.XXXXXX" (XXXXXX random; created with O_EXCL
 * and O_NOFOLLOW, so never an existing file or a symbolic link; mode 0666 less the umask),
 * fsyncs it, renames it over path and fsyncs the folder, so a crash at any point leaves the
 * previous file (or none) or the complete new one, never a partial file at path (a crash
 * before the rename may leave its temp file behind; no later save touches it). A path that is
 * a symbolic link is replaced, not followed. Errors: TQ_ERR_NULL, TQ_ERR_INVALID (a windowed
 * cache that dropped tokens), TQ_ERR_IO (cannot create, write, sync or rename: the temp file is
 * removed and path is untouched; or only the folder's fsync after the rename failed: path is
 * the new file), TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_save(const tq_kv_cache *cache, const char *path);

/* Loads a cache file image of size bytes (any alignment) into a new cache *out (NULL on
 * error). Every byte is validated before use; allocation is bounded by the size of the input
 * (pages hold at most TQ_KV_PAGE_TOKENS times a token's bytes), never by a count read from it.
 * Errors, first failing check wins (doc/cachefile.md lists them all):
 *   TQ_ERR_NULL; TQ_ERR_FORMAT (not a cache file, truncated, trailing bytes, a count or field
 *   out of range, sections out of order, a scheme the shapes cannot have); TQ_ERR_VERSION (a
 *   format version outside 1 … TQ_KV_CACHE_FILE_VERSION); TQ_ERR_CHECKSUM (a section's CRC32C
 *   does not match); TQ_ERR_CORRUPT (a record or raw token no encoder writes: non-finite
 *   norm, scale, fp16 value or key mean); TQ_ERR_NOMEM. Never crashes on any input. */
TQ_API tq_status tq_kv_cache_load_memory(const void *data, size_t size, tq_kv_cache **out);
/* Reads the file at path and loads it as above, with the same result as the memory form on
 * its bytes: the header and the scheme section are read and checked first, and a file larger
 * (or smaller) than any file with their counts and schemes is TQ_ERR_FORMAT before the rest is
 * read or allocated for. TQ_ERR_IO when it cannot be opened or read, or is not a regular file
 * (a FIFO, a device or a folder: opened without blocking, then refused). */
TQ_API tq_status tq_kv_cache_load(const char *path, tq_kv_cache **out);
/* As the two above, and the file must match *expect (when not NULL): n_layers, n_kv_heads,
 * head dims, the whole scheme (layer, edge, edges, window, batch, start, prefill_raw, seed),
 * when expect->layer_schemes is set every layer's scheme, and when expect->layer_windows is
 * set every layer's window (files of version 4 on); otherwise TQ_ERR_MISMATCH
 * (checked right after the header's and the scheme's checksums, before any allocation for the
 * tokens). reserve_tokens is ignored. */
TQ_API tq_status tq_kv_cache_load_memory_expect(const void *data, size_t size,
                                                const tq_kv_cache_config *expect,
                                                tq_kv_cache **out);
TQ_API tq_status tq_kv_cache_load_expect(const char *path, const tq_kv_cache_config *expect,
                                         tq_kv_cache **out);

/* ---------------------------------------------------------------------------------------- */
/* Attention                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* A fixed set of worker threads for the attention calls and the caller's own parallel loops
 * (tq_threadpool_run). Create once, reuse for every call. Errors: TQ_ERR_NULL, TQ_ERR_INVALID
 * (n_threads outside [1, 256]), TQ_ERR_NOMEM (also when a thread cannot be started). The
 * caller's thread is one of the n_threads; idle workers sleep. A pool runs one call at a time:
 * concurrent calls on one pool are serialized; different pools are independent. */
typedef struct tq_threadpool tq_threadpool;
TQ_API tq_status tq_threadpool_create(tq_threadpool **out, int n_threads);
TQ_API void tq_threadpool_free(tq_threadpool *pool);
/* Threads including the caller; 1 for a NULL pool. */
TQ_API int tq_threadpool_size(const tq_threadpool *pool);
/* Parallel for: calls fn(ctx, task, thread) once for every task < n_tasks, in any order and on
 * any thread (0 = the caller, thread < tq_threadpool_size(pool), for per-thread scratch), and
 * returns when all calls have returned (their writes visible to the caller). Tasks are handed
 * out one at a time, so uneven ones balance; nothing is allocated. pool NULL (or of size 1)
 * runs every task inline on the caller as thread 0. Never call it from inside fn. */
TQ_API void tq_threadpool_run(tq_threadpool *pool, void (*fn)(void *ctx, size_t task, int thread),
                              void *ctx, size_t n_tasks);

typedef struct tq_attn_params {
    float scale;        /* score = scale·⟨q, k⟩ (then soft-capped); typically 1/√head_dim_k */
    int causal;         /* 1: query i of n sits at position len − n + i and sees keys ≤ it */
    int sliding_window; /* 0: none; W > 0: a query at p sees only keys > p − W (needs causal
                           positions: with causal = 0 queries still sit at len − n + i) */
    float softcap;      /* 0: none; c > 0: score = c·tanh(score/c) */
} tq_attn_params;

/* Fills p: scale 1/√head_dim_k, causal, no window, no soft-cap. */
TQ_API void tq_attn_params_init(tq_attn_params *p, int head_dim_k);

/* Bytes of workspace tq_kv_attention needs for this layer, n_q_heads, any chunk of up to
 * n_queries queries and pool size (threads; 1 without a pool): one workspace sized for the
 * largest chunk serves every smaller one. Independent of the cache length. O(n_queries) to
 * compute: call it once, at setup. 0 on a bad argument. */
TQ_API size_t tq_kv_attention_workspace_size(const tq_kv_cache *cache, int layer,
                                             int n_q_heads, size_t n_queries, int n_threads);

/* Attention of n_queries query positions on one layer, on the compressed codes
 * (doc/kvcache.md §4):
 * q (n_queries, n_q_heads, head_dim_k), out (n_queries, n_q_heads, head_dim_v) floats; query
 * head h reads KV head h / (n_q_heads / n_kv_heads). Scores and sums are fp32 with online
 * softmax; nothing is dequantized beyond a small tile. pool may be NULL (caller's thread only);
 * work is caller memory of work_bytes ≥ tq_kv_attention_workspace_size(...) (any alignment).
 * Reads the cache only: concurrent calls on one cache are safe, but not concurrent with an
 * append, compress or truncate of the same layer. A query that sees no key gets zeros.
 * Errors: TQ_ERR_NULL, TQ_ERR_INVALID (bad layer, n_q_heads not a positive multiple of
 * n_kv_heads, n_queries > length, negative window, non-finite or ≤ 0 scale, negative softcap),
 * TQ_ERR_CAPACITY (work too small), TQ_ERR_NONFINITE (NaN/Inf in q), TQ_ERR_CORRUPT. */
TQ_API tq_status tq_kv_attention(const tq_kv_cache *cache, int layer, const float *q,
                                 int n_q_heads, size_t n_queries, const tq_attn_params *params,
                                 tq_threadpool *pool, void *work, size_t work_bytes, float *out);

/* The reference: dequantizes the whole layer (tq_kv_cache_read), then exact softmax attention
 * in double. Allocates (and frees) its buffers; slow; for tests. Same arguments and errors as
 * tq_kv_attention, plus TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_attention_ref(const tq_kv_cache *cache, int layer, const float *q,
                                     int n_q_heads, size_t n_queries,
                                     const tq_attn_params *params, float *out);

/* ---- codec: the integer attention kernels through the API ---- */

/* Lets attention use the integer decode kernels ("avx512-vnni": with the AVX-512 set, on CPUs
 * with AVX-512 VBMI and VNNI) when on != 0 (the default unless TQ_INT8_SCORES=0), the float
 * kernels when 0; kept across tq_set_kernels. Select before starting work, as tq_set_kernels. */
TQ_API void tq_set_int8_scores(int on);
/* 1 if attention uses the integer kernels now, else 0. */
TQ_API int tq_int8_scores(void);

/* ---- keys: the key transform (key mean, scale, split) without the cache ----
 * The transform the KV cache applies to TurboQuant keys (doc/kvcache.md §2, "The key transform
 * on its own"), for engines that keep their own paged memory: fit it once per layer from the
 * first keys and the queries seen, store keys as tq_key_transform_keys(k) with the codec
 * tq_key_transform_codec_config gives, and score ⟨q, k⟩ as ⟨q', stored⟩ + offset with
 * (q', offset) = tq_key_transform_queries(q). Immutable once fitted: share it across threads. */
typedef struct tq_key_transform tq_key_transform;

typedef struct tq_key_transform_config {
    int n_heads;  /* KV heads, [1, 1024]: one mean / scale / channel order per head */
    int head_dim; /* [TQ_MIN_DIM, TQ_MAX_DIM] */
    float bits;   /* the key codec's bits per coordinate, [1, 8] (the split needs it) */
    int mean;     /* subtract the per-head key mean (default 1) */
    int scale;    /* per-channel key scale from key and query energies (default 1) */
    int split;    /* with scale, at a fractional MSE width k + f ≤ 4: the key split (default 1) */
} tq_key_transform_config;

/* Fills cfg: the shapes and bits given, mean, scale and split on. cfg may not be NULL. */
TQ_API void tq_key_transform_config_init(tq_key_transform_config *cfg, int n_heads, int head_dim,
                                         float bits);
/* Fits *out from n_keys keys (n_keys, n_heads, head_dim) and n_queries queries (n_queries,
 * n_q_heads, head_dim; may be NULL when n_queries is 0), as the cache does from the keys and
 * queries it has seen at a layer's first compression. Errors: TQ_ERR_NULL, TQ_ERR_DIM,
 * TQ_ERR_BITS, TQ_ERR_INVALID (n_heads, n_q_heads), TQ_ERR_NONFINITE, TQ_ERR_NOMEM. */
TQ_API tq_status tq_key_transform_fit(tq_key_transform **out, const tq_key_transform_config *cfg,
                                      const float *keys, size_t n_keys, const float *queries,
                                      int n_q_heads, size_t n_queries);
TQ_API void tq_key_transform_free(tq_key_transform *kt);
/* Makes *cfg (a codec config for head_dim, the transform's bits, MSE) the codec that stores the
 * transformed keys: TQ_SPLIT_BLOCK with the key split's block, else unchanged.
 * Errors: TQ_ERR_NULL, TQ_ERR_DIM (cfg->dim ≠ head_dim), TQ_ERR_INVALID (a split with PROD). */
TQ_API tq_status tq_key_transform_codec_config(const tq_key_transform *kt, tq_codec_config *cfg);
/* Keys (n, n_heads, head_dim) → stored coordinates, same shape. Errors: TQ_ERR_NULL,
 * TQ_ERR_NONFINITE (nothing written). */
TQ_API tq_status tq_key_transform_keys(const tq_key_transform *kt, const float *keys, size_t n,
                                       float *stored);
/* Stored coordinates (n, n_heads, head_dim) → keys: the inverse of tq_key_transform_keys up to
 * float rounding. Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_key_transform_invert(const tq_key_transform *kt, const float *stored,
                                         size_t n, float *keys);
/* Queries q (n, n_q_heads, head_dim) → q_out (same shape) and, when offsets is not NULL,
 * offsets (n, n_q_heads): ⟨q, k⟩ = ⟨q_out, stored(k)⟩ + offset for every key of q's KV head
 * (query head h reads KV head h / (n_q_heads / n_heads)). Errors: TQ_ERR_NULL,
 * TQ_ERR_INVALID (n_q_heads), TQ_ERR_NONFINITE. */
TQ_API tq_status tq_key_transform_queries(const tq_key_transform *kt, const float *q,
                                          int n_q_heads, size_t n, float *q_out, float *offsets);
/* Exact bytes tq_key_transform_serialize writes; 0 for NULL. */
TQ_API size_t tq_key_transform_serialized_bytes(const tq_key_transform *kt);
/* Writes the transform (doc/kvcache.md §2: a 24-byte head, then the bytes a cache file keeps
 * for a layer's transform) into dst. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_key_transform_serialize(const tq_key_transform *kt, void *dst,
                                            size_t capacity, size_t *written);
/* Reads what tq_key_transform_serialize wrote into a new *out (NULL on error). Errors:
 * TQ_ERR_NULL, TQ_ERR_FORMAT (not a transform, wrong size, a field out of range),
 * TQ_ERR_CORRUPT (a value no fit produces), TQ_ERR_NOMEM. */
TQ_API tq_status tq_key_transform_deserialize(const void *data, size_t size,
                                              tq_key_transform **out);

/* ---- fork: forks sharing pages copy-on-write; attention at explicit positions ---- */

/* Creates *out, a second sequence holding src's state (tokens, two-phase state, key mean /
 * scale / split) that shares src's pages copy-on-write (doc/kvcache.md §3, "Forks"): either
 * cache then appends, compresses, truncates and is freed independently, in any order, and
 * different caches may be used from different threads even while they share pages; src must
 * not be modified during the call. O(pages). Errors: TQ_ERR_NULL, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_cache_fork(const tq_kv_cache *src, tq_kv_cache **out);

/* *shared_bytes = the bytes of cache's pages that another cache also holds (counted in both
 * caches' tq_kv_cache_memory). Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_kv_cache_shared_bytes(const tq_kv_cache *cache, size_t *shared_bytes);

/* Memory of caches[0, n) together: the sum of their tq_kv_cache_memory with each page they
 * share counted once (its tokens as the cache holding most of them counts them). None of them
 * may be modified during the call. Errors: TQ_ERR_NULL, TQ_ERR_NOMEM. */
TQ_API tq_status tq_kv_caches_memory(const tq_kv_cache *const *caches, size_t n,
                                     tq_kv_memory *mem);

/* tq_kv_attention with query i at position positions[i] (any order, repeats allowed, each in
 * [0, length)) instead of length − n_queries + i: causal masks and sliding windows are relative
 * to it, and n_queries may exceed the length. Bit-identical to tq_kv_attention when
 * positions[i] = length − n_queries + i. Errors: those of tq_kv_attention; TQ_ERR_NULL
 * (positions NULL with n_queries > 0); TQ_ERR_INVALID (a position out of range). */
TQ_API tq_status tq_kv_attention_at(const tq_kv_cache *cache, int layer, const float *q,
                                    int n_q_heads, size_t n_queries, const int64_t *positions,
                                    const tq_attn_params *params, tq_threadpool *pool,
                                    void *work, size_t work_bytes, float *out);

/* The reference (tq_kv_attention_ref) at explicit positions, as tq_kv_attention_at. */
TQ_API tq_status tq_kv_attention_ref_at(const tq_kv_cache *cache, int layer, const float *q,
                                        int n_q_heads, size_t n_queries,
                                        const int64_t *positions,
                                        const tq_attn_params *params, float *out);

#ifdef __cplusplus
}
#endif

#endif /* TURBOQUANT_H */

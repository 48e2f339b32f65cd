/*
 * turboquant/codec.h — the stable codec API of libturboquant: errors, version, kernel choice,
 * rotations, codebooks, codecs, fp16 helpers. Layers, conventions and the stability promise:
 * doc/api.md. The codec itself: doc/codec.md; the code layout: doc/format.md.
 *
 * TurboQuant (Zandieh, Daliri, Hadian, Mirrokni, arXiv:2504.19874) compresses one vector at a
 * time, online and without calibration: a seeded random rotation, then a Lloyd-Max codebook per
 * coordinate; the packed indices plus a norm replace the fp32/fp16 data.
 *
 * Every function: never prints, exits or aborts; never allocates in encode, decode, score and
 * accumulate calls; returns a tq_status (TQ_OK = 0) unless its comment says otherwise; never
 * writes past a capacity the caller gave. Objects are immutable after creation (usable from many
 * threads at once); every free function accepts NULL. Vectors are row-major floats; codes are
 * byte strings of any alignment, identical on every host.
 */
#ifndef TURBOQUANT_CODEC_H
#define TURBOQUANT_CODEC_H

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

/* ---- Version (doc/api.md, "Versions") ---------------------------------------------------- */

#define TQ_VERSION_MAJOR 0
#define TQ_VERSION_MINOR 2
#define TQ_VERSION_PATCH 0
#define TQ_VERSION_NUMBER (TQ_VERSION_MAJOR * 10000 + TQ_VERSION_MINOR * 100 + TQ_VERSION_PATCH)
#define TQ_VERSION_STRING "0.2.0"

/* The version of the library actually linked, as TQ_VERSION_NUMBER / TQ_VERSION_STRING. */
TQ_API int tq_version_number(void);
TQ_API const char *tq_version_string(void);

/* ---- Errors ------------------------------------------------------------------------------ */

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
    TQ_ERR_RANGE = 7,         /* a finite value overflows what the format stores */
    TQ_ERR_NOMEM = 8,         /* memory allocation failed */
    TQ_ERR_INVALID = 9,       /* an argument is inconsistent with the others (also: a sized
                                 struct of a bad size, or larger with non-zero unknown bytes) */
    TQ_ERR_CORRUPT = 10,      /* codes hold values no encoder produces (bad norm, NaN norm) */
    TQ_ERR_UNSUPPORTED = 11,  /* the requested kernel set is not supported by this CPU */
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

/* ---- Kernels (doc/api.md, "Kernels") ----------------------------------------------------- */

typedef enum tq_kernels_kind {
    TQ_KERNELS_AUTO = 0,   /* the best the CPU supports (TQ_FORCE_REF=1 in the environment: REF) */
    TQ_KERNELS_REF = 1,    /* portable scalar C */
    TQ_KERNELS_AVX2 = 2,   /* AVX2 + FMA (x86-64) */
    TQ_KERNELS_AVX512 = 3, /* AVX-512 F/BW/VL/DQ (x86-64) */
    TQ_KERNELS_NEON = 4    /* Advanced SIMD (AArch64) */
} tq_kernels_kind;

/* Selects the kernel set of every later call; call before starting work (not thread-safe
 * against running calls). Errors: TQ_ERR_UNSUPPORTED (CPU or build lacks it), TQ_ERR_VARIANT. */
TQ_API tq_status tq_set_kernels(tq_kernels_kind kind);
/* The kernel set in use ("ref", "avx2", "avx512", "neon"). */
TQ_API const char *tq_kernels_name(void);
/* 1 if this CPU and build support the set, else 0. */
TQ_API int tq_kernels_supported(tq_kernels_kind kind);
/* Lets attention use the integer decode kernels (with the AVX2 set: vpmaddubsw, or vpdpbusd
 * with AVX-VNNI; with the AVX-512 set, on CPUs with AVX-512 VBMI and VNNI: vpdpbusd; with the
 * NEON set, on CPUs with the ARMv8.2 dot products: sdot / udot) when on != 0 (the default unless
 * TQ_INT8_SCORES=0), the float kernels when 0; kept across tq_set_kernels. Select before
 * starting work, as tq_set_kernels. */
TQ_API void tq_set_int8_scores(int on);
/* 1 if attention uses the integer kernels now, else 0. */
TQ_API int tq_int8_scores(void);

/* ---- Rotation (doc/rotation.md) ---------------------------------------------------------- */

#define TQ_MIN_DIM 2
#define TQ_MAX_DIM 1024

typedef enum tq_rotation_kind {
    TQ_ROTATION_AUTO = 0,           /* HADAMARD for power-of-two dims, else BLOCK_HADAMARD */
    TQ_ROTATION_HADAMARD = 1,       /* randomized Walsh–Hadamard, power-of-two dims, O(d log d) */
    TQ_ROTATION_DENSE = 2,          /* Householder QR of a seeded Gaussian matrix, O(d²) */
    TQ_ROTATION_BLOCK_HADAMARD = 3  /* overlapping power-of-two WHT blocks, any dim, O(d log d) */
} tq_rotation_kind;

#define TQ_HADAMARD_ROUNDS 3

typedef struct tq_rotation tq_rotation;

/* Creates the rotation for (dim, seed, kind), the same on every machine. Errors: TQ_ERR_NULL,
 * TQ_ERR_DIM (dim outside [2, 1024], or not a power of two with HADAMARD), TQ_ERR_VARIANT,
 * TQ_ERR_NOMEM. */
TQ_API tq_status tq_rotation_create(tq_rotation **out, int dim, uint64_t seed,
                                    tq_rotation_kind kind);
TQ_API void tq_rotation_free(tq_rotation *rotation);
/* The dimension; 0 for NULL. */
TQ_API int tq_rotation_dim(const tq_rotation *rotation);
/* The kind actually used (AUTO resolved). */
TQ_API tq_rotation_kind tq_rotation_get_kind(const tq_rotation *rotation);

/* y = R x for n vectors (n·dim floats each; y holds as many floats as x, which may equal y).
 * Errors: TQ_ERR_NULL. */
TQ_API tq_status tq_rotation_forward(const tq_rotation *rotation, const float *x, float *y,
                                     size_t n);
/* x = R^T y for n vectors: the inverse of tq_rotation_forward up to float rounding. */
TQ_API tq_status tq_rotation_inverse(const tq_rotation *rotation, const float *y, float *x,
                                     size_t n);

/* ---- Codebooks (doc/codec.md, "Codebooks") ----------------------------------------------- */

/* The Lloyd-Max quantizer of one coordinate of a random unit vector in R^dim, scaled by √dim. */
typedef struct tq_codebook {
    int dim;
    int bits;
    int levels;               /* 2^bits */
    const float *centroids;   /* (levels,) increasing, symmetric about 0, ×√dim */
    const float *boundaries;  /* (levels − 1,) midpoints of adjacent centroids, ×√dim */
    double mse;               /* dim · E[(t − c(t))²]: the normalized MSE of a unit vector */
} tq_codebook;

/* The shared codebook for (dim, bits), computed on first use and valid for the life of the
 * process; thread-safe. Errors: TQ_ERR_NULL, TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_NOMEM. */
TQ_API tq_status tq_codebook_get(int dim, int bits, const tq_codebook **out);

/* ---- Codecs (doc/codec.md) --------------------------------------------------------------- */

typedef enum tq_variant {
    TQ_VARIANT_MSE = 0,  /* Algorithm 1: minimum reconstruction error */
    TQ_VARIANT_PROD = 1  /* Algorithm 2: (b−1)-bit MSE + 1-bit QJL sketch, unbiased ⟨q, x⟩ */
} tq_variant;

typedef enum tq_split {
    TQ_SPLIT_FIXED = 0,  /* fractional bits: the first h rotated coordinates take ⌈b⌉ bits */
    TQ_SPLIT_ENERGY = 1, /* the h channels of largest channel_energy take ⌈b⌉ bits, own rotation
                            and norm per group */
    TQ_SPLIT_BLOCK = 2   /* channels [0, block_dim) at block_bits, the rest at the whole width
                            that makes the average b; MSE only (doc/codec.md) */
} tq_split;

typedef enum tq_norm_format {
    TQ_NORM_F16 = 0,  /* IEEE half: 2 bytes, |norm| ≤ 65504 */
    TQ_NORM_F32 = 1   /* IEEE single: 4 bytes */
} tq_norm_format;

/* tq_codec_config.norm_correction: the stored norm is n·√(√d/‖ĉ‖), the geometric mean of the
 * plain norm n and the corrected n·√d/‖ĉ‖ (doc/codec.md, "Norm correction"). */
#define TQ_NORM_CORRECTION_HALF 2

/* A sized struct (doc/api.md, "Sized structs"): fill it with tq_codec_config_init. */
typedef struct tq_codec_config {
    size_t struct_size;           /* sizeof(tq_codec_config) as the caller was compiled */
    int dim;                      /* vector length, [2, 1024] */
    float bits;                   /* average bits per coordinate, [1, 8] */
    tq_variant variant;
    int norm_correction;          /* MSE only: 1 decoded norms equal the input's (default);
                                     TQ_NORM_CORRECTION_HALF: halfway there (a key split at a
                                     whole width, doc/codec.md); 0 none */
    tq_norm_format norm_format;   /* default TQ_NORM_F16 */
    tq_rotation_kind rotation;    /* default TQ_ROTATION_AUTO */
    uint64_t seed;                /* rotation (and PROD sketch) seed; default 0x5475726230 */
    tq_split split;               /* default TQ_SPLIT_FIXED */
    const float *channel_energy;  /* (dim,) for TQ_SPLIT_ENERGY, copied at create */
    int block_dim;                /* TQ_SPLIT_BLOCK: channels in the first block, [2, dim − 2] */
    int block_bits;               /* TQ_SPLIT_BLOCK: bits of the first block, [1, 8] */
    int trellis;                  /* MSE only: 1 = trellis-coded indices for the segments of 2
                                     to 4 bits (same bytes, about 1.2–1.35× less MSE; doc/codec.md,
                                     "Trellis codes"); TQ_TRELLIS_TWO_STATE (2) = the same with
                                     two-state tables; default 0 */
} tq_codec_config;

/* tq_codec_config.trellis (and tq_kv_scheme.trellis): trellis codes whose 3- and 4-bit values
 * depend on the index and the previous index's top bit only (2^(B+1) values where trellis=1
 * has 4^B): 1–3% more MSE than trellis=1, read faster by the integer attention kernels
 * (doc/codec.md, "Two-state tables"). */
#define TQ_TRELLIS_TWO_STATE 2

/* Fills cfg (not NULL) with struct_size and the defaults above for (dim, bits, variant). The
 * macro passes the caller's sizeof *cfg, so a newer library never writes past an older
 * program's struct (a cfg_size below the first sized release's leaves cfg untouched). */
#define tq_codec_config_init(cfg, dim, bits, variant) \
    tq_codec_config_init_sized((cfg), sizeof *(cfg), (dim), (bits), (variant))
TQ_API void tq_codec_config_init_sized(tq_codec_config *cfg, size_t cfg_size, int dim, float bits,
                                       tq_variant variant);

typedef struct tq_codec tq_codec;

/* Creates a codec (bit-width rules: doc/api.md, "Codec bit widths"). Errors: TQ_ERR_NULL,
 * TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_VARIANT, TQ_ERR_INVALID (norm correction with PROD, missing
 * or non-finite channel_energy, a bad struct_size), TQ_ERR_NOMEM. */
TQ_API tq_status tq_codec_create(tq_codec **out, const tq_codec_config *cfg);
TQ_API void tq_codec_free(tq_codec *codec);
/* Copies the configuration the codec was created with (channel_energy NULL) into out, at most
 * out_size bytes (sizeof *out; out->struct_size is set to the bytes written). Errors:
 * TQ_ERR_NULL, TQ_ERR_CAPACITY (out_size below the first sized release's struct). */
TQ_API tq_status tq_codec_get_config(const tq_codec *codec, tq_codec_config *out,
                                     size_t out_size);

/* Exact bytes of one encoded vector (N vectors: N times this, contiguous); 0 for NULL. */
TQ_API size_t tq_codec_bytes_per_vector(const tq_codec *codec);
/* The same from a config, without creating a codec. Errors as tq_codec_create but NOMEM. */
TQ_API tq_status tq_codec_config_bytes(const tq_codec_config *cfg, size_t *bytes_per_vector);

/* Encodes n vectors x (n·dim floats) into codes (codes_capacity bytes ≥ n·bytes_per_vector).
 * Vectors before a failing one are written. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY,
 * TQ_ERR_NONFINITE (NaN/Inf in x), TQ_ERR_RANGE (a norm beyond what the norm format holds). */
TQ_API tq_status tq_codec_encode(const tq_codec *codec, const float *x, size_t n, void *codes,
                                 size_t codes_capacity);
/* Decodes n vectors into x (x_capacity floats ≥ n·dim). Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY,
 * TQ_ERR_CORRUPT (a NaN, Inf or negative stored norm: that vector decodes to zeros, the rest
 * are decoded). */
TQ_API tq_status tq_codec_decode(const tq_codec *codec, const void *codes, size_t n, float *x,
                                 size_t x_capacity);

/* Floats of a prepared query (decode-free scores, doc/codec.md); 0 for NULL. */
TQ_API size_t tq_codec_query_floats(const tq_codec *codec);
/* Rotates (PROD: and sketches) q into prepared. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY,
 * TQ_ERR_NONFINITE. */
TQ_API tq_status tq_codec_prepare_query(const tq_codec *codec, const float *q, float *prepared,
                                        size_t prepared_capacity);
/* scores[t] = ⟨q, x̂_t⟩ for t < n (PROD: the unbiased estimate of ⟨q, x_t⟩), scores_capacity
 * floats ≥ n. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_codec_scores(const tq_codec *codec, const float *prepared, const void *codes,
                                 size_t n, float *scores, size_t scores_capacity);

/* Floats of a weighted-sum accumulator (rotated domain); 0 for NULL. */
TQ_API size_t tq_codec_accum_floats(const tq_codec *codec);
/* Zeroes acc (acc_capacity floats ≥ tq_codec_accum_floats). Errors: TQ_ERR_NULL,
 * TQ_ERR_CAPACITY. */
TQ_API tq_status tq_codec_accum_zero(const tq_codec *codec, float *acc, size_t acc_capacity);
/* acc += Σ_t weights[t]·x̂_t (rotated) for t < n. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_codec_accumulate(const tq_codec *codec, const void *codes, size_t n,
                                     const float *weights, float *acc, size_t acc_capacity);
/* out (out_capacity floats ≥ dim) = the accumulated sum in the original basis; acc (as for
 * tq_codec_accum_zero) is used as scratch. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_codec_accum_finish(const tq_codec *codec, float *acc, size_t acc_capacity,
                                       float *out, size_t out_capacity);
/* out (out_capacity floats ≥ dim) = Σ_t weights[t]·x̂_t in one call (stack accumulator).
 * Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_codec_weighted_sum(const tq_codec *codec, const void *codes, size_t n,
                                       const float *weights, float *out, size_t out_capacity);

/* ---- Half precision (IEEE binary16, round to nearest even) -------------------------------- */

TQ_API uint16_t tq_f32_to_f16(float x);
TQ_API float tq_f16_to_f32(uint16_t h);


/* ---- The key transform (doc/kvcache.md §2, "The key transform on its own") ---------------
 * What the KV cache applies to TurboQuant keys (key mean, per-channel scale, key split), for
 * engines that keep their own paged memory: fit it once per layer from the first keys and the
 * queries seen, store keys as tq_key_transform_keys(k) with the codec
 * tq_key_transform_codec_config gives, and score ⟨q, k⟩ as ⟨q', stored⟩ + offset with
 * (q', offset) = tq_key_transform_queries(q). Immutable once fitted: share it across threads. */
typedef struct tq_key_transform tq_key_transform;

typedef struct tq_key_transform_config {
    size_t struct_size; /* sizeof(tq_key_transform_config) as the caller was compiled */
    int n_heads;        /* KV heads, [1, 1024]: one mean / scale / channel order per head */
    int head_dim;       /* [TQ_MIN_DIM, TQ_MAX_DIM] */
    float bits;         /* the key codec's bits per coordinate, [1, 8] (the split needs it) */
    int mean;           /* subtract the per-head key mean (default 1) */
    int scale;          /* per-channel key scale from key and query energies (default 1) */
    int split;          /* with scale, MSE: the key split (default 1) at a fractional width k + f
                           ≤ 4 and at the whole width 3 (half the channels at 4 bits, half at 2) */
    int rope_pairs;     /* the keys' rotary embedding: TQ_ROPE_PAIRS_NONE (default: every channel
                           on its own), _ADJACENT (it turns channels 2i, 2i + 1 into each other)
                           or _HALVES (i, i + head_dim/2; head_dim even): each channel's statistics
                           then move halfway to its pair's before the scale and split are fitted, so
                           they hold far from the fitted positions too (doc/kvcache.md §2). Added after 0.2.0: a smaller struct_size leaves it 0 */
} tq_key_transform_config;

/* How a rotary position embedding (RoPE) pairs the channels of a key: the rotation of position
 * p turns each pair by its own angle, so a pair's energy is the same at every position while
 * its split between the two channels is not. */
enum {
    TQ_ROPE_PAIRS_NONE = 0,     /* unknown or none: channels on their own */
    TQ_ROPE_PAIRS_ADJACENT = 1, /* (2i, 2i + 1): llama.cpp's "normal" RoPE (LLaMA, SmolLM2) */
    TQ_ROPE_PAIRS_HALVES = 2    /* (i, i + d/2): "NeoX" RoPE (Gemma, Qwen) */
};

/* Fills cfg (not NULL): struct_size, the shapes and bits given, mean, scale and split on
 * (cfg_size: the caller's sizeof *cfg, passed by the macro, as for tq_codec_config_init). */
#define tq_key_transform_config_init(cfg, n_heads, head_dim, bits)                            \
    tq_key_transform_config_init_sized((cfg), sizeof *(cfg), (n_heads), (head_dim), (bits))
TQ_API void tq_key_transform_config_init_sized(tq_key_transform_config *cfg, size_t cfg_size,
                                               int n_heads, int head_dim, float bits);
/* Fits *out from n_keys keys (n_keys, n_heads, head_dim) and n_queries queries (n_queries,
 * n_q_heads, head_dim; may be NULL when n_queries is 0), as the cache does at a layer's first
 * compression. Errors: TQ_ERR_NULL, TQ_ERR_DIM, TQ_ERR_BITS, TQ_ERR_INVALID (n_heads,
 * n_q_heads, struct_size), TQ_ERR_NONFINITE, TQ_ERR_NOMEM. */
TQ_API tq_status tq_key_transform_fit(tq_key_transform **out, const tq_key_transform_config *cfg,
                                      const float *keys, size_t n_keys, const float *queries,
                                      int n_q_heads, size_t n_queries);
TQ_API void tq_key_transform_free(tq_key_transform *kt);
/* Makes *cfg (a codec config for head_dim, the transform's bits, MSE) the codec that stores the
 * transformed keys: TQ_SPLIT_BLOCK with the key split's block (at a whole width also
 * TQ_NORM_CORRECTION_HALF where the norm is corrected), else unchanged.
 * Errors: TQ_ERR_NULL, TQ_ERR_DIM (cfg->dim ≠ head_dim), TQ_ERR_INVALID (a split with PROD). */
TQ_API tq_status tq_key_transform_codec_config(const tq_key_transform *kt, tq_codec_config *cfg);
/* Keys (n, n_heads, head_dim) → stored coordinates, same shape. Errors: TQ_ERR_NULL,
 * TQ_ERR_NONFINITE (nothing written). */
TQ_API tq_status tq_key_transform_keys(const tq_key_transform *kt, const float *keys, size_t n,
                                       float *stored);
/* Stored coordinates (n, n_heads, head_dim) → keys, the inverse of tq_key_transform_keys up to
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
/* Writes the transform (doc/kvcache.md §2) into dst. Errors: TQ_ERR_NULL, TQ_ERR_CAPACITY. */
TQ_API tq_status tq_key_transform_serialize(const tq_key_transform *kt, void *dst,
                                            size_t capacity, size_t *written);
/* Reads what tq_key_transform_serialize wrote into a new *out (NULL on error). Errors:
 * TQ_ERR_NULL, TQ_ERR_FORMAT (not a transform, wrong size, a field out of range),
 * TQ_ERR_CORRUPT (a value no fit produces), TQ_ERR_NOMEM. */
TQ_API tq_status tq_key_transform_deserialize(const void *data, size_t size,
                                              tq_key_transform **out);

#ifdef __cplusplus
}
#endif

#endif /* TURBOQUANT_CODEC_H */

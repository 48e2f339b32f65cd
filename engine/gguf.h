/* GGUF reader for the inference engine.
 *
 * gguf_open() maps a GGUF file read-only and validates all of it before returning: header,
 * every metadata key/value, every tensor descriptor, and every tensor's bytes against the
 * file size. After a successful open, every pointer the accessors hand out lies inside the
 * mapping, every length is in bounds, and no accessor can fail on a malformed file; they
 * only fail on a missing key, a type mismatch, or a bad argument.
 *
 * What is accepted and rejected is written down in doc/gguf.md.
 *
 * Byte order: GGUF files are little-endian; every multi-byte field is assembled byte by
 * byte, so the reader works on any host and never does an unaligned load. Big-endian GGUF
 * files are rejected (GGUF_ERR_BIG_ENDIAN).
 *
 * Memory: gguf_file owns its tables (O(number of keys + tensors + strings in string
 * arrays)) and, for gguf_open(), the mapping. Strings and tensor data are never copied.
 * Key names and tensor names are copied once, NUL-terminated, so they can be used as C
 * strings.
 *
 * Thread safety: gguf_open*() and gguf_close() touch no global state. Once opened, a
 * gguf_file is immutable: any number of threads may call the const accessors at once.
 *
 * The library never prints and never exits. Errors come back as a gguf_status; the open
 * calls can also fill a caller-supplied buffer with a message that names the key or
 * tensor at fault. */
#ifndef TQ_ENGINE_GGUF_H
#define TQ_ENGINE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. The numeric values are pinned: never renumber, only append. */
typedef enum gguf_status {
    GGUF_OK = 0,
    GGUF_ERR_INVALID_ARG = 1,          /* NULL where a pointer is required, index past the end */
    GGUF_ERR_IO = 2,                   /* open/fstat/mmap failed, or not a regular file */
    GGUF_ERR_NOMEM = 3,                /* a table allocation failed */
    GGUF_ERR_TRUNCATED = 4,            /* the file ends inside a fixed-size field */
    GGUF_ERR_BAD_MAGIC = 5,            /* first four bytes are not "GGUF" */
    GGUF_ERR_VERSION_1 = 6,            /* GGUF v1 (32-bit counts): no longer supported */
    GGUF_ERR_BAD_VERSION = 7,          /* version other than 1, 2, 3 */
    GGUF_ERR_BIG_ENDIAN = 8,           /* version field is byte-swapped: big-endian file */
    GGUF_ERR_TOO_MANY_KV = 9,          /* n_kv over GGUF_MAX_KV or more than the file can hold */
    GGUF_ERR_TOO_MANY_TENSORS = 10,    /* n_tensors over GGUF_MAX_TENSORS or than the file holds */
    GGUF_ERR_BAD_KEY = 11,             /* empty key, over GGUF_MAX_KEY_LEN, or contains NUL */
    GGUF_ERR_DUPLICATE_KEY = 12,       /* the same key twice */
    GGUF_ERR_BAD_VALUE_TYPE = 13,      /* metadata value type (or array element type) unknown */
    GGUF_ERR_NESTED_ARRAY = 14,        /* array of arrays: not supported */
    GGUF_ERR_BAD_STRING_LENGTH = 15,   /* a string's length runs past the end of the file */
    GGUF_ERR_BAD_ARRAY_LENGTH = 16,    /* an array's elements run past the end of the file */
    GGUF_ERR_BAD_BOOL = 17,            /* a bool byte other than 0 or 1 */
    GGUF_ERR_BAD_ALIGNMENT = 18,       /* general.alignment not an integer power of two <= 2^31 */
    GGUF_ERR_BAD_TENSOR_NAME = 19,     /* empty name, over GGUF_MAX_NAME_LEN, or contains NUL */
    GGUF_ERR_DUPLICATE_TENSOR = 20,    /* the same tensor name twice */
    GGUF_ERR_BAD_N_DIMS = 21,          /* n_dims not in 1..GGUF_MAX_DIMS */
    GGUF_ERR_BAD_DIM = 22,             /* a dimension is zero */
    GGUF_ERR_DIMS_OVERFLOW = 23,       /* element count or byte size does not fit in int64 */
    GGUF_ERR_BAD_TENSOR_TYPE = 24,     /* ggml type id not in the table below */
    GGUF_ERR_BAD_ROW_SIZE = 25,        /* dims[0] not a multiple of the type's block size */
    GGUF_ERR_MISALIGNED_OFFSET = 26,   /* tensor offset not a multiple of the alignment */
    GGUF_ERR_TENSOR_OUT_OF_BOUNDS = 27,/* tensor bytes run past the end of the file */
    GGUF_ERR_TENSOR_OVERLAP = 28,      /* two tensors share bytes */
    GGUF_ERR_NOT_FOUND = 29,           /* getter: no such key */
    GGUF_ERR_TYPE_MISMATCH = 30,       /* getter: the value has another type */
    GGUF_ERR_OUT_OF_RANGE = 31         /* getter: the integer does not fit the requested type */
} gguf_status;

/* "GGUF_OK", "GGUF_ERR_TRUNCATED", ...; "GGUF_ERR_UNKNOWN" for values not listed above.
 * The returned string is static. */
const char *gguf_status_name(gguf_status status);

/* Limits the reader enforces so that a hostile header cannot make it allocate without
 * bound. Tables are further bounded by what the file size could possibly hold. */
#define GGUF_MAX_KV ((uint64_t)1 << 20)
#define GGUF_MAX_TENSORS ((uint64_t)1 << 20)
#define GGUF_MAX_KEY_LEN 65535u /* the GGUF spec's limit on key length */
#define GGUF_MAX_NAME_LEN 255u  /* tensor names; ggml itself stops at 63 */
#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32u

/* Metadata value types, as numbered in the file. */
typedef enum gguf_value_type {
    GGUF_VALUE_UINT8 = 0,
    GGUF_VALUE_INT8 = 1,
    GGUF_VALUE_UINT16 = 2,
    GGUF_VALUE_INT16 = 3,
    GGUF_VALUE_UINT32 = 4,
    GGUF_VALUE_INT32 = 5,
    GGUF_VALUE_FLOAT32 = 6,
    GGUF_VALUE_BOOL = 7,
    GGUF_VALUE_STRING = 8,
    GGUF_VALUE_ARRAY = 9,
    GGUF_VALUE_UINT64 = 10,
    GGUF_VALUE_INT64 = 11,
    GGUF_VALUE_FLOAT64 = 12
} gguf_value_type;

/* "uint8", ..., "array"; "unknown" for values out of range. Static string. */
const char *gguf_value_type_name(int type);

/* Size in bytes of a scalar value of this type in the file; 0 for string, array, unknown. */
size_t gguf_value_type_size(int type);

/* ggml tensor type ids (as numbered by ggml; gaps are ids ggml retired). */
typedef enum gguf_ggml_type {
    GGUF_GGML_F32 = 0,
    GGUF_GGML_F16 = 1,
    GGUF_GGML_Q4_0 = 2,
    GGUF_GGML_Q4_1 = 3,
    GGUF_GGML_Q5_0 = 6,
    GGUF_GGML_Q5_1 = 7,
    GGUF_GGML_Q8_0 = 8,
    GGUF_GGML_Q8_1 = 9,
    GGUF_GGML_Q2_K = 10,
    GGUF_GGML_Q3_K = 11,
    GGUF_GGML_Q4_K = 12,
    GGUF_GGML_Q5_K = 13,
    GGUF_GGML_Q6_K = 14,
    GGUF_GGML_Q8_K = 15,
    GGUF_GGML_IQ2_XXS = 16,
    GGUF_GGML_IQ2_XS = 17,
    GGUF_GGML_IQ3_XXS = 18,
    GGUF_GGML_IQ1_S = 19,
    GGUF_GGML_IQ4_NL = 20,
    GGUF_GGML_IQ3_S = 21,
    GGUF_GGML_IQ2_S = 22,
    GGUF_GGML_IQ4_XS = 23,
    GGUF_GGML_I8 = 24,
    GGUF_GGML_I16 = 25,
    GGUF_GGML_I32 = 26,
    GGUF_GGML_I64 = 27,
    GGUF_GGML_F64 = 28,
    GGUF_GGML_IQ1_M = 29,
    GGUF_GGML_BF16 = 30,
    GGUF_GGML_TQ1_0 = 34,
    GGUF_GGML_TQ2_0 = 35,
    GGUF_GGML_MXFP4 = 39
} gguf_ggml_type;

typedef struct gguf_type_info {
    uint32_t id;         /* gguf_ggml_type */
    const char *name;    /* "F32", "Q4_K", ... */
    uint32_t block_size; /* elements per block; rows must be a whole number of blocks */
    uint32_t type_size;  /* bytes per block */
} gguf_type_info;

/* The table entry for a ggml type id, or NULL if the id is unknown. Static storage. */
const gguf_type_info *gguf_ggml_type_info(uint32_t ggml_type);

/* Bytes taken by n_elements consecutive elements of a ggml type (one row, typically).
 * GGUF_ERR_BAD_TENSOR_TYPE for an unknown type, GGUF_ERR_BAD_ROW_SIZE if n_elements is
 * not a multiple of the block size, GGUF_ERR_DIMS_OVERFLOW if the size exceeds INT64_MAX. */
gguf_status gguf_ggml_row_size(uint32_t ggml_type, uint64_t n_elements, uint64_t *out_bytes);

/* One tensor descriptor. All fields are validated at open. */
typedef struct gguf_tensor {
    const char *name;       /* NUL-terminated, owned by the gguf_file */
    uint32_t type;          /* gguf_ggml_type */
    uint32_t n_dims;        /* 1..GGUF_MAX_DIMS */
    uint64_t dims[GGUF_MAX_DIMS]; /* dims[0] is the row length (innermost); unused dims = 1 */
    uint64_t n_elements;    /* product of dims, <= INT64_MAX */
    uint64_t offset;        /* from the start of the data section; multiple of the alignment */
    uint64_t n_bytes;       /* from the type's block size and bytes per block */
    const void *data;       /* n_bytes inside the mapping; aligned only as the file is */
} gguf_tensor;

/* A view of an array value. Elements are stored little-endian and possibly unaligned;
 * read them with the gguf_array_get_*() calls (or memcpy from data if the host is LE). */
typedef struct gguf_array {
    gguf_value_type type;   /* element type; never GGUF_VALUE_ARRAY */
    uint64_t count;         /* number of elements; may be 0 */
    const void *data;       /* first element (for strings: its 64-bit length field) */
    const size_t *str_offs_; /* private: offset from data of each string element */
} gguf_array;

typedef struct gguf_file gguf_file;

/* Map the file at `path` read-only and validate it.
 * On success *out receives a file to release with gguf_close() and GGUF_OK is returned.
 * On failure *out is set to NULL, a gguf_status names the problem and, if err != NULL and
 * err_cap > 0, err receives a NUL-terminated message (truncated to err_cap bytes).
 * Errors: GGUF_ERR_INVALID_ARG (path or out NULL), GGUF_ERR_IO, GGUF_ERR_NOMEM, and every
 * format error listed above (GGUF_ERR_TRUNCATED .. GGUF_ERR_TENSOR_OVERLAP).
 * GGUF_ERR_IO covers open/fstat/mmap failures and a path that is not a regular file (a
 * directory, a FIFO, a device, a socket: the message names the path and the kind). The
 * file is opened non-blocking and its type checked before anything is read, so a FIFO with
 * no writer is rejected at once instead of blocking the caller.
 * If another process shrinks the file while it is mapped, accessing tensor data may raise
 * SIGBUS; that is outside what a reader can defend against. */
gguf_status gguf_open(const char *path, gguf_file **out, char *err, size_t err_cap);

/* Same as gguf_open() on a buffer already in memory. Nothing is copied: the caller keeps
 * data alive and unchanged until gguf_close(). data may be NULL only if size is 0. */
gguf_status gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err,
                             size_t err_cap);

/* Release the tables and the mapping. Accepts NULL. */
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);     /* 2 or 3 */
uint32_t gguf_alignment(const gguf_file *f);   /* general.alignment or 32 */
uint64_t gguf_data_offset(const gguf_file *f); /* file offset of the data section */
uint64_t gguf_file_size(const gguf_file *f);
/* The file's bytes, gguf_file_size() of them (the mapping, or the caller's buffer); NULL for NULL. */
const void *gguf_file_bytes(const gguf_file *f);

/* ---- metadata ---------------------------------------------------------------------- */

/* Keys in file order: i in [0, gguf_n_kv()). gguf_kv_key() returns a NUL-terminated name
 * (NULL if i is out of range); gguf_kv_type() returns a gguf_value_type (-1 if out of
 * range). gguf_find_key() returns the index of key, or -1. */
int64_t gguf_n_kv(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, int64_t i);
int gguf_kv_type(const gguf_file *f, int64_t i);
int64_t gguf_find_key(const gguf_file *f, const char *key);

/* Typed getters by key. Each returns GGUF_OK and writes *out, or:
 *   GGUF_ERR_INVALID_ARG  f, key or out NULL
 *   GGUF_ERR_NOT_FOUND    no such key
 *   GGUF_ERR_TYPE_MISMATCH the value's type is not accepted (rules below)
 *   GGUF_ERR_OUT_OF_RANGE the integer does not fit the requested type
 * *out is left untouched on failure.
 * Integer getters accept every integer type (uint8..int64, not bool) whose value fits:
 * gguf_get_u32 on an int8 of -1 is OUT_OF_RANGE, on a uint64 of 7 is OK.
 * gguf_get_f32 accepts float32 only; gguf_get_f64 accepts float32 and float64.
 * gguf_get_bool accepts bool only and writes 0 or 1. */
gguf_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
gguf_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
gguf_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
gguf_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
gguf_status gguf_get_f32(const gguf_file *f, const char *key, float *out);
gguf_status gguf_get_f64(const gguf_file *f, const char *key, double *out);
gguf_status gguf_get_bool(const gguf_file *f, const char *key, int *out);

/* String value: *str points into the file and is NOT NUL-terminated; *len is its length
 * in bytes (no encoding check is made). Do not write through it. Errors as above. */
gguf_status gguf_get_str(const gguf_file *f, const char *key, const char **str, size_t *len);

/* Array value: fills *out with a view valid until gguf_close(). Errors as above. */
gguf_status gguf_get_arr(const gguf_file *f, const char *key, gguf_array *out);

/* Element i of an array, with the same conversion rules as the scalar getters.
 * GGUF_ERR_INVALID_ARG if a or out is NULL or i >= a->count. */
gguf_status gguf_array_get_u32(const gguf_array *a, uint64_t i, uint32_t *out);
gguf_status gguf_array_get_i32(const gguf_array *a, uint64_t i, int32_t *out);
gguf_status gguf_array_get_u64(const gguf_array *a, uint64_t i, uint64_t *out);
gguf_status gguf_array_get_i64(const gguf_array *a, uint64_t i, int64_t *out);
gguf_status gguf_array_get_f32(const gguf_array *a, uint64_t i, float *out);
gguf_status gguf_array_get_f64(const gguf_array *a, uint64_t i, double *out);
gguf_status gguf_array_get_bool(const gguf_array *a, uint64_t i, int *out);
gguf_status gguf_array_get_str(const gguf_array *a, uint64_t i, const char **str, size_t *len);

/* ---- tensors ----------------------------------------------------------------------- */

/* Tensors in file order: i in [0, gguf_n_tensors()); NULL if out of range.
 * gguf_find_tensor() returns NULL when no tensor has that name. */
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

#ifdef __cplusplus
}
#endif

#endif

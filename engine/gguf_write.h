/* Minimal GGUF writer, used by tests and tools to build small models and, on purpose,
 * malformed files.
 *
 * The writer does not validate what it is given beyond what it needs to lay the file out:
 * duplicate keys, empty names, unknown tensor types or byte sizes that do not match the
 * dims are all written as asked, so tests can produce every file the reader must reject.
 * A file built only from well-formed calls is a valid GGUF v3 file that gguf_open() reads
 * back unchanged.
 *
 * Layout produced: header, key/values in the order added, tensor descriptors in the order
 * added, zero padding to the alignment, then each tensor's bytes at the next multiple of
 * the alignment (offsets relative to the data section), the last one padded too.
 * Everything is written little-endian whatever the host.
 *
 * Errors are sticky: after the first failing call the writer remembers the status and
 * gguf_writer_to_memory()/gguf_writer_to_file() return it. Not thread-safe per writer. */
#ifndef TQ_ENGINE_GGUF_WRITE_H
#define TQ_ENGINE_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGUF_WRITER_MAX_DIMS 8 /* more than the reader accepts, to test that it rejects them */

typedef struct gguf_writer gguf_writer;

/* A new empty writer (version 3, alignment 32), or NULL if out of memory. */
gguf_writer *gguf_writer_create(void);
/* Accepts NULL. */
void gguf_writer_free(gguf_writer *w);

/* The version number written in the header (any value; the layout is always v2/v3). */
void gguf_writer_set_version(gguf_writer *w, uint32_t version);

/* Pad the data section to `alignment` (a power of two, else GGUF_ERR_INVALID_ARG) and add
 * the key general.alignment = alignment (uint32) at this point in the key order. Call at
 * most once (a second call writes the key twice). Layout happens at output time, so the
 * call may come before or after tensors are added. */
gguf_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);

/* Scalars. key is a NUL-terminated string, copied. */
gguf_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
gguf_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
gguf_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
gguf_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
gguf_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
gguf_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
gguf_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
gguf_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
gguf_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
gguf_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
/* v is written as one byte as given (0/1 for a valid file). */
gguf_status gguf_writer_add_bool(gguf_writer *w, const char *key, uint8_t v);
/* len bytes of s (need not be NUL-terminated); s may be NULL if len is 0. */
gguf_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, size_t len);

/* Array of a scalar type: `data` holds `count` host-order values of the matching C type
 * (uint8_t for UINT8 and BOOL, ..., float for FLOAT32, double for FLOAT64).
 * elem_type STRING or ARRAY -> GGUF_ERR_INVALID_ARG (use the calls below). */
gguf_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_value_type elem_type,
                                const void *data, uint64_t count);
/* Array of strings: strs[i] of lens[i] bytes; lens may be NULL for NUL-terminated strs. */
gguf_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, uint64_t count);

/* Append raw bytes to the key/value section and count them as one key/value. Lets tests
 * write encodings the typed calls cannot (nested arrays, unknown types, bad lengths). */
gguf_status gguf_writer_add_kv_raw(gguf_writer *w, const void *bytes, size_t n);

/* A tensor: name (NUL-terminated, copied), ggml type id, dims[0..n_dims) with
 * n_dims <= GGUF_WRITER_MAX_DIMS, and n_bytes of data (copied; may be NULL to write zeros). */
gguf_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type,
                                   uint32_t n_dims, const uint64_t *dims, const void *data,
                                   size_t n_bytes);

/* The whole file in a malloc'd buffer the caller frees with free(). */
gguf_status gguf_writer_to_memory(const gguf_writer *w, void **out, size_t *out_size);
/* The whole file written to path (created or truncated). GGUF_ERR_IO on failure. */
gguf_status gguf_writer_to_file(const gguf_writer *w, const char *path);

#ifdef __cplusplus
}
#endif

#endif

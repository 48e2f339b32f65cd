/* GGUF reader internals shared by its files; not part of the engine's interface.
 *
 *   gguf.c         the container: one validating parse at open, open / close, file fields
 *   gguf_lookup.c  the name tables (sorted index, duplicate check, the name pool) and the
 *                  key and tensor lookups by index and by name
 *   gguf_meta.c    typed metadata getters (scalars and array elements)
 *   gguf_types.c   the ggml type table, row sizes, status and value-type names
 *
 * After a successful gguf_open*() every field below is validated (gguf.h, doc/gguf.md). */
#ifndef TQ_ENGINE_GGUF_INTERNAL_H
#define TQ_ENGINE_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* ---- little-endian loads (byte by byte: alignment- and host-endianness-independent) ---- */

static inline uint16_t load_le16(const uint8_t *p) {
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* a * b into *r; 0 when it overflows 64 bits. */
static inline int mul_u64(uint64_t a, uint64_t b, uint64_t *r) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}

/* ---- the file object ---------------------------------------------------------------- */

/* Names (keys or tensor names) in file order, plus an index sorted by name for lookup and
 * duplicate detection. Sorting rather than hashing keeps the worst case at O(n log n) on a
 * hostile file (no crafted collisions). Names live in the file's name pool, as offsets
 * because the pool moves while it grows during parsing. */
typedef struct name_table {
    size_t *off;     /* (n) offset of each name in the pool */
    uint32_t *len;   /* (n) length of each name, excluding the NUL */
    int32_t *sorted; /* (n) indices ordered by name; valid after table_sort() */
    int64_t n;
} name_table;

typedef struct gguf_kv {
    gguf_value_type type;
    const uint8_t *val;        /* scalar: its bytes; string: its text; array: first element */
    uint64_t len;              /* string: byte length; array: element count */
    gguf_value_type elem_type; /* arrays only */
    size_t *str_offs;          /* (len) string arrays: offset from val of each element */
} gguf_kv;

struct gguf_file {
    const uint8_t *base; /* the whole file */
    size_t size;
    int mapped;          /* base came from mmap and must be unmapped */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    int64_t n_kv;
    gguf_kv *kvs;        /* (n_kv) */
    const char **keys;   /* (n_kv) NUL-terminated, into names */
    name_table key_table;

    int64_t n_tensors;
    gguf_tensor *tensors; /* (n_tensors) */
    name_table tensor_table;

    char *names;         /* every key and tensor name, each NUL-terminated */
    size_t names_len, names_cap;
};

/* ---- name tables (gguf_lookup.c) ----------------------------------------------------- */

/* Room for n names (n <= GGUF_MAX_KV or GGUF_MAX_TENSORS); GGUF_ERR_NOMEM on failure. */
gguf_status gguf_table_init(name_table *t, uint64_t n);
void gguf_table_free(name_table *t);
/* Orders t->sorted by name, ties in file order. GGUF_ERR_NOMEM on failure. */
gguf_status gguf_table_sort(name_table *t, const char *pool);
/* Index of the first name in sorted order whose successor equals it, or -1. */
int64_t gguf_table_duplicate(const name_table *t, const char *pool);
/* Index of the name equal to s[0..len), or -1 (after gguf_table_sort). */
int64_t gguf_table_find(const name_table *t, const char *pool, const char *s, size_t len);
/* Copies a name into f's pool, NUL-terminated; *off_out receives its offset. */
gguf_status gguf_pool_add(gguf_file *f, const uint8_t *s, size_t len, size_t *off_out);

/* ---- integers (gguf_meta.c) ---------------------------------------------------------- */

/* An integer value of `type` at v as sign + magnitude (and the signed value when negative);
 * GGUF_ERR_TYPE_MISMATCH for a non-integer type. */
gguf_status gguf_decode_integer(const uint8_t *v, gguf_value_type type, int *neg,
                                uint64_t *mag, int64_t *sval);

#endif

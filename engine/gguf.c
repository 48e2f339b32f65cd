/* GGUF reader: one validating pass at open, then read-only views.
 *
 * File layout (doc/gguf.md has the full list of checks):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv    x { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
 *   padding to `alignment`, then the data section; tensor offsets are relative to it.
 * A string is u64 length + bytes (no NUL). An array is u32 elem_type, u64 count, elements.
 *
 * Every read goes through the cursor below, which checks the bytes left before touching
 * them, so a malformed file can only produce an error, never an out-of-bounds read. */
#include "gguf.h"
#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Smallest possible encodings, used to bound counts by the bytes actually left: a kv is
 * at least key length (8) + 1 key byte + type (4) + a uint8 value (1); a tensor descriptor
 * at least name length (8) + 1 name byte + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_INFO_BYTES 33u

/* ======================================================================================
 * ggml type table
 * ====================================================================================== */

static const gguf_type_info type_table[] = {
    {GGUF_GGML_F32, "F32", 1, 4},          {GGUF_GGML_F16, "F16", 1, 2},
    {GGUF_GGML_Q4_0, "Q4_0", 32, 18},      {GGUF_GGML_Q4_1, "Q4_1", 32, 20},
    {GGUF_GGML_Q5_0, "Q5_0", 32, 22},      {GGUF_GGML_Q5_1, "Q5_1", 32, 24},
    {GGUF_GGML_Q8_0, "Q8_0", 32, 34},      {GGUF_GGML_Q8_1, "Q8_1", 32, 40},
    {GGUF_GGML_Q2_K, "Q2_K", 256, 84},     {GGUF_GGML_Q3_K, "Q3_K", 256, 110},
    {GGUF_GGML_Q4_K, "Q4_K", 256, 144},    {GGUF_GGML_Q5_K, "Q5_K", 256, 176},
    {GGUF_GGML_Q6_K, "Q6_K", 256, 210},    {GGUF_GGML_Q8_K, "Q8_K", 256, 292},
    {GGUF_GGML_IQ2_XXS, "IQ2_XXS", 256, 66}, {GGUF_GGML_IQ2_XS, "IQ2_XS", 256, 74},
    {GGUF_GGML_IQ3_XXS, "IQ3_XXS", 256, 98}, {GGUF_GGML_IQ1_S, "IQ1_S", 256, 50},
    {GGUF_GGML_IQ4_NL, "IQ4_NL", 32, 18},  {GGUF_GGML_IQ3_S, "IQ3_S", 256, 110},
    {GGUF_GGML_IQ2_S, "IQ2_S", 256, 82},   {GGUF_GGML_IQ4_XS, "IQ4_XS", 256, 136},
    {GGUF_GGML_I8, "I8", 1, 1},            {GGUF_GGML_I16, "I16", 1, 2},
    {GGUF_GGML_I32, "I32", 1, 4},          {GGUF_GGML_I64, "I64", 1, 8},
    {GGUF_GGML_F64, "F64", 1, 8},          {GGUF_GGML_IQ1_M, "IQ1_M", 256, 56},
    {GGUF_GGML_BF16, "BF16", 1, 2},        {GGUF_GGML_TQ1_0, "TQ1_0", 256, 54},
    {GGUF_GGML_TQ2_0, "TQ2_0", 256, 66},   {GGUF_GGML_MXFP4, "MXFP4", 32, 17},
};

const gguf_type_info *gguf_ggml_type_info(uint32_t ggml_type) {
    for (size_t i = 0; i < sizeof type_table / sizeof type_table[0]; i++)
        if (type_table[i].id == ggml_type) return &type_table[i];
    return NULL;
}

static int mul_u64(uint64_t a, uint64_t b, uint64_t *r) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}

gguf_status gguf_ggml_row_size(uint32_t ggml_type, uint64_t n_elements, uint64_t *out_bytes) {
    const gguf_type_info *ti = gguf_ggml_type_info(ggml_type);
    uint64_t bytes;
    if (!out_bytes) return GGUF_ERR_INVALID_ARG;
    if (!ti) return GGUF_ERR_BAD_TENSOR_TYPE;
    if (n_elements % ti->block_size != 0) return GGUF_ERR_BAD_ROW_SIZE;
    if (!mul_u64(n_elements / ti->block_size, ti->type_size, &bytes) || bytes > INT64_MAX)
        return GGUF_ERR_DIMS_OVERFLOW;
    *out_bytes = bytes;
    return GGUF_OK;
}

/* ======================================================================================
 * names, statuses, value types
 * ====================================================================================== */

const char *gguf_status_name(gguf_status status) {
    switch (status) {
    case GGUF_OK: return "GGUF_OK";
    case GGUF_ERR_INVALID_ARG: return "GGUF_ERR_INVALID_ARG";
    case GGUF_ERR_IO: return "GGUF_ERR_IO";
    case GGUF_ERR_NOMEM: return "GGUF_ERR_NOMEM";
    case GGUF_ERR_TRUNCATED: return "GGUF_ERR_TRUNCATED";
    case GGUF_ERR_BAD_MAGIC: return "GGUF_ERR_BAD_MAGIC";
    case GGUF_ERR_VERSION_1: return "GGUF_ERR_VERSION_1";
    case GGUF_ERR_BAD_VERSION: return "GGUF_ERR_BAD_VERSION";
    case GGUF_ERR_BIG_ENDIAN: return "GGUF_ERR_BIG_ENDIAN";
    case GGUF_ERR_TOO_MANY_KV: return "GGUF_ERR_TOO_MANY_KV";
    case GGUF_ERR_TOO_MANY_TENSORS: return "GGUF_ERR_TOO_MANY_TENSORS";
    case GGUF_ERR_BAD_KEY: return "GGUF_ERR_BAD_KEY";
    case GGUF_ERR_DUPLICATE_KEY: return "GGUF_ERR_DUPLICATE_KEY";
    case GGUF_ERR_BAD_VALUE_TYPE: return "GGUF_ERR_BAD_VALUE_TYPE";
    case GGUF_ERR_NESTED_ARRAY: return "GGUF_ERR_NESTED_ARRAY";
    case GGUF_ERR_BAD_STRING_LENGTH: return "GGUF_ERR_BAD_STRING_LENGTH";
    case GGUF_ERR_BAD_ARRAY_LENGTH: return "GGUF_ERR_BAD_ARRAY_LENGTH";
    case GGUF_ERR_BAD_BOOL: return "GGUF_ERR_BAD_BOOL";
    case GGUF_ERR_BAD_ALIGNMENT: return "GGUF_ERR_BAD_ALIGNMENT";
    case GGUF_ERR_BAD_TENSOR_NAME: return "GGUF_ERR_BAD_TENSOR_NAME";
    case GGUF_ERR_DUPLICATE_TENSOR: return "GGUF_ERR_DUPLICATE_TENSOR";
    case GGUF_ERR_BAD_N_DIMS: return "GGUF_ERR_BAD_N_DIMS";
    case GGUF_ERR_BAD_DIM: return "GGUF_ERR_BAD_DIM";
    case GGUF_ERR_DIMS_OVERFLOW: return "GGUF_ERR_DIMS_OVERFLOW";
    case GGUF_ERR_BAD_TENSOR_TYPE: return "GGUF_ERR_BAD_TENSOR_TYPE";
    case GGUF_ERR_BAD_ROW_SIZE: return "GGUF_ERR_BAD_ROW_SIZE";
    case GGUF_ERR_MISALIGNED_OFFSET: return "GGUF_ERR_MISALIGNED_OFFSET";
    case GGUF_ERR_TENSOR_OUT_OF_BOUNDS: return "GGUF_ERR_TENSOR_OUT_OF_BOUNDS";
    case GGUF_ERR_TENSOR_OVERLAP: return "GGUF_ERR_TENSOR_OVERLAP";
    case GGUF_ERR_NOT_FOUND: return "GGUF_ERR_NOT_FOUND";
    case GGUF_ERR_TYPE_MISMATCH: return "GGUF_ERR_TYPE_MISMATCH";
    case GGUF_ERR_OUT_OF_RANGE: return "GGUF_ERR_OUT_OF_RANGE";
    }
    return "GGUF_ERR_UNKNOWN";
}

const char *gguf_value_type_name(int type) {
    static const char *const names[] = {"uint8",  "int8",  "uint16", "int16", "uint32",
                                        "int32",  "float32", "bool", "string", "array",
                                        "uint64", "int64", "float64"};
    if (type < 0 || (size_t)type >= sizeof names / sizeof names[0]) return "unknown";
    return names[type];
}

size_t gguf_value_type_size(int type) {
    switch (type) {
    case GGUF_VALUE_UINT8: case GGUF_VALUE_INT8: case GGUF_VALUE_BOOL: return 1;
    case GGUF_VALUE_UINT16: case GGUF_VALUE_INT16: return 2;
    case GGUF_VALUE_UINT32: case GGUF_VALUE_INT32: case GGUF_VALUE_FLOAT32: return 4;
    case GGUF_VALUE_UINT64: case GGUF_VALUE_INT64: case GGUF_VALUE_FLOAT64: return 8;
    default: return 0;
    }
}

static int value_type_known(uint32_t type) { return type <= GGUF_VALUE_FLOAT64; }

/* ======================================================================================
 * little-endian loads (byte by byte: alignment- and host-endianness-independent)
 * ====================================================================================== */

static uint16_t load_le16(const uint8_t *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* ======================================================================================
 * the file object
 * ====================================================================================== */

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

/* Parsing state: a bounds-checked cursor plus the error buffer. */
typedef struct parser {
    gguf_file *f;
    size_t pos;
    char *err;
    size_t err_cap;
} parser;

static size_t bytes_left(const parser *p) { return p->f->size - p->pos; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static gguf_status fail(parser *p, gguf_status st, const char *fmt, ...) {
    if (p->err && p->err_cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, p->err_cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* A printable, bounded copy of a name from the file for error messages, so that a hostile
 * file cannot put control characters into the caller's terminal or log. */
static const char *printable(char buf[72], const uint8_t *s, size_t len) {
    size_t n = len < 64 ? len : 64, i;
    for (i = 0; i < n; i++) buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (len > n) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

static gguf_status table_init(name_table *t, uint64_t n) {
    size_t cap = n ? (size_t)n : 1; /* n <= 2^20 */
    t->off = malloc(cap * sizeof *t->off);
    t->len = malloc(cap * sizeof *t->len);
    t->sorted = malloc(cap * sizeof *t->sorted);
    t->n = 0;
    return t->off && t->len && t->sorted ? GGUF_OK : GGUF_ERR_NOMEM;
}

static void table_free(name_table *t) {
    free(t->off);
    free(t->len);
    free(t->sorted);
}

/* Byte-wise order of s[0..len) against name i; a proper prefix sorts first. */
static int name_cmp(const name_table *t, const char *pool, const char *s, size_t len,
                    int32_t i) {
    size_t li = t->len[i];
    int c = memcmp(s, pool + t->off[i], len < li ? len : li);
    if (c != 0) return c;
    return (len > li) - (len < li);
}

/* Bottom-up merge sort of t->sorted by name (qsort has no context argument, and a static
 * one would break the promise of no global state). */
static gguf_status table_sort(name_table *t, const char *pool) {
    size_t n = (size_t)t->n;
    int32_t *a = t->sorted, *b = malloc((n ? n : 1) * sizeof *b), *tmp;
    if (!b) return GGUF_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) a[i] = (int32_t)i;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int32_t x = a[j];
                /* ties take the left run: equal names stay in file order, so a duplicate
                 * is reported by its first occurrence */
                if (name_cmp(t, pool, pool + t->off[x], t->len[x], a[i]) >= 0) b[k++] = a[i++];
                else b[k++] = a[j++];
            }
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        tmp = a;
        a = b;
        b = tmp;
    }
    if (a != t->sorted) {
        memcpy(t->sorted, a, n * sizeof *a);
        b = a;
    }
    free(b);
    return GGUF_OK;
}

/* Index of the first name in sorted order whose successor equals it, or -1. */
static int64_t table_duplicate(const name_table *t, const char *pool) {
    for (int64_t i = 1; i < t->n; i++) {
        int32_t x = t->sorted[i - 1];
        if (name_cmp(t, pool, pool + t->off[x], t->len[x], t->sorted[i]) == 0) return x;
    }
    return -1;
}

/* Index of the name equal to s[0..len), or -1. Binary search over the sorted index. */
static int64_t table_find(const name_table *t, const char *pool, const char *s, size_t len) {
    int64_t lo = 0, hi = t->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(t, pool, s, len, t->sorted[mid]);
        if (c == 0) return t->sorted[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return -1;
}

/* Copy a name into the pool, NUL-terminated; *off_out receives its offset. */
static gguf_status pool_add(gguf_file *f, const uint8_t *s, size_t len, size_t *off_out) {
    if (f->names_cap - f->names_len < len + 1) {
        size_t cap = f->names_cap ? f->names_cap : 4096;
        char *grown;
        while (cap - f->names_len < len + 1) cap *= 2; /* bounded by the file size */
        grown = realloc(f->names, cap);
        if (!grown) return GGUF_ERR_NOMEM;
        f->names = grown;
        f->names_cap = cap;
    }
    memcpy(f->names + f->names_len, s, len);
    f->names[f->names_len + len] = '\0';
    *off_out = f->names_len;
    f->names_len += len + 1;
    return GGUF_OK;
}

/* ======================================================================================
 * parsing
 * ====================================================================================== */

static int read_u32(parser *p, uint32_t *v) {
    if (bytes_left(p) < 4) return 0;
    *v = load_le32(p->f->base + p->pos);
    p->pos += 4;
    return 1;
}

static int read_u64(parser *p, uint64_t *v) {
    if (bytes_left(p) < 8) return 0;
    *v = load_le64(p->f->base + p->pos);
    p->pos += 8;
    return 1;
}

/* A name (key or tensor name): length-checked, NUL-free, copied into the pool (uniqueness
 * is checked once the whole table is read). `what` is "key" or "tensor name" for messages;
 * `idx` the entry number. */
static gguf_status read_name(parser *p, name_table *t, const char *what, int64_t idx,
                             uint64_t max_len, gguf_status bad) {
    gguf_file *f = p->f;
    uint64_t len;
    const uint8_t *s;
    char buf[72];
    size_t off;
    gguf_status st;

    if (!read_u64(p, &len))
        return fail(p, GGUF_ERR_TRUNCATED, "%s %lld: file ends inside the length field", what,
                    (long long)idx);
    if (len == 0) return fail(p, bad, "%s %lld: empty", what, (long long)idx);
    if (len > bytes_left(p))
        return fail(p, GGUF_ERR_BAD_STRING_LENGTH,
                    "%s %lld: length %llu exceeds the %zu bytes left in the file", what,
                    (long long)idx, (unsigned long long)len, bytes_left(p));
    s = f->base + p->pos;
    if (len > max_len)
        return fail(p, bad, "%s %lld ('%s'): length %llu exceeds the limit of %llu", what,
                    (long long)idx, printable(buf, s, (size_t)len), (unsigned long long)len,
                    (unsigned long long)max_len);
    if (memchr(s, 0, (size_t)len))
        return fail(p, bad, "%s %lld ('%s'): contains a NUL byte", what, (long long)idx,
                    printable(buf, s, (size_t)len));
    st = pool_add(f, s, (size_t)len, &off);
    if (st != GGUF_OK) return fail(p, st, "out of memory copying %s %lld", what, (long long)idx);
    t->off[t->n] = off;
    t->len[t->n] = (uint32_t)len;
    t->n++;
    p->pos += (size_t)len;
    return GGUF_OK;
}

/* Name of the most recently added key, for messages. */
static const char *last_key(parser *p, char buf[72]) {
    const name_table *t = &p->f->key_table;
    return printable(buf, (const uint8_t *)p->f->names + t->off[t->n - 1], t->len[t->n - 1]);
}

static gguf_status check_bools(parser *p, const uint8_t *v, uint64_t count) {
    char buf[72];
    for (uint64_t i = 0; i < count; i++)
        if (v[i] > 1)
            return fail(p, GGUF_ERR_BAD_BOOL, "key '%s': bool element %llu has byte value %u",
                        last_key(p, buf), (unsigned long long)i, v[i]);
    return GGUF_OK;
}

static gguf_status read_string_array(parser *p, gguf_kv *kv) {
    char buf[72];
    const uint8_t *base = p->f->base;
    if (kv->len > bytes_left(p) / 8)
        return fail(p, GGUF_ERR_BAD_ARRAY_LENGTH,
                    "key '%s': %llu strings cannot fit in the %zu bytes left in the file",
                    last_key(p, buf), (unsigned long long)kv->len, bytes_left(p));
    /* Bounded by the file size: each element takes at least 8 bytes of it. */
    kv->str_offs = malloc((kv->len ? (size_t)kv->len : 1) * sizeof *kv->str_offs);
    if (!kv->str_offs)
        return fail(p, GGUF_ERR_NOMEM, "key '%s': out of memory for %llu string offsets",
                    last_key(p, buf), (unsigned long long)kv->len);
    for (uint64_t i = 0; i < kv->len; i++) {
        uint64_t len;
        size_t at = p->pos;
        if (!read_u64(p, &len))
            return fail(p, GGUF_ERR_TRUNCATED,
                        "key '%s': file ends inside the length of string element %llu",
                        last_key(p, buf), (unsigned long long)i);
        if (len > bytes_left(p))
            return fail(p, GGUF_ERR_BAD_STRING_LENGTH,
                        "key '%s': string element %llu has length %llu but only %zu bytes "
                        "are left in the file",
                        last_key(p, buf), (unsigned long long)i, (unsigned long long)len,
                        bytes_left(p));
        kv->str_offs[i] = at - (size_t)(kv->val - base);
        p->pos += (size_t)len;
    }
    return GGUF_OK;
}

static gguf_status read_value(parser *p, gguf_kv *kv) {
    char buf[72];
    const uint8_t *base = p->f->base;
    uint32_t type;
    size_t sz;

    if (!read_u32(p, &type))
        return fail(p, GGUF_ERR_TRUNCATED, "key '%s': file ends inside the value type",
                    last_key(p, buf));
    if (!value_type_known(type))
        return fail(p, GGUF_ERR_BAD_VALUE_TYPE, "key '%s': unknown value type %u",
                    last_key(p, buf), type);
    kv->type = (gguf_value_type)type;

    if (type == GGUF_VALUE_STRING) {
        if (!read_u64(p, &kv->len))
            return fail(p, GGUF_ERR_TRUNCATED, "key '%s': file ends inside the string length",
                        last_key(p, buf));
        if (kv->len > bytes_left(p))
            return fail(p, GGUF_ERR_BAD_STRING_LENGTH,
                        "key '%s': string length %llu exceeds the %zu bytes left in the file",
                        last_key(p, buf), (unsigned long long)kv->len, bytes_left(p));
        kv->val = base + p->pos;
        p->pos += (size_t)kv->len;
        return GGUF_OK;
    }

    if (type == GGUF_VALUE_ARRAY) {
        uint32_t elem;
        if (!read_u32(p, &elem))
            return fail(p, GGUF_ERR_TRUNCATED,
                        "key '%s': file ends inside the array element type", last_key(p, buf));
        if (elem == GGUF_VALUE_ARRAY)
            return fail(p, GGUF_ERR_NESTED_ARRAY,
                        "key '%s': arrays of arrays are not supported", last_key(p, buf));
        if (!value_type_known(elem))
            return fail(p, GGUF_ERR_BAD_VALUE_TYPE, "key '%s': unknown array element type %u",
                        last_key(p, buf), elem);
        kv->elem_type = (gguf_value_type)elem;
        if (!read_u64(p, &kv->len))
            return fail(p, GGUF_ERR_TRUNCATED, "key '%s': file ends inside the array length",
                        last_key(p, buf));
        kv->val = base + p->pos;
        if (elem == GGUF_VALUE_STRING) return read_string_array(p, kv);
        sz = gguf_value_type_size((int)elem);
        if (kv->len > bytes_left(p) / sz)
            return fail(p, GGUF_ERR_BAD_ARRAY_LENGTH,
                        "key '%s': %llu elements of %s exceed the %zu bytes left in the file",
                        last_key(p, buf), (unsigned long long)kv->len,
                        gguf_value_type_name((int)elem), bytes_left(p));
        if (elem == GGUF_VALUE_BOOL) {
            gguf_status st = check_bools(p, kv->val, kv->len);
            if (st != GGUF_OK) return st;
        }
        p->pos += (size_t)kv->len * sz;
        return GGUF_OK;
    }

    sz = gguf_value_type_size((int)type);
    if (bytes_left(p) < sz)
        return fail(p, GGUF_ERR_TRUNCATED, "key '%s': file ends inside the %s value",
                    last_key(p, buf), gguf_value_type_name((int)type));
    kv->val = base + p->pos;
    if (type == GGUF_VALUE_BOOL) {
        gguf_status st = check_bools(p, kv->val, 1);
        if (st != GGUF_OK) return st;
    }
    p->pos += sz;
    return GGUF_OK;
}

static gguf_status decode_integer(const uint8_t *v, gguf_value_type type, int *neg,
                                  uint64_t *mag, int64_t *sval);

static gguf_status read_alignment(parser *p) {
    gguf_file *f = p->f;
    int64_t idx = gguf_find_key(f, "general.alignment");
    int neg;
    uint64_t mag;
    int64_t sval;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (idx < 0) return GGUF_OK;
    if (f->kvs[idx].type == GGUF_VALUE_ARRAY ||
        decode_integer(f->kvs[idx].val, f->kvs[idx].type, &neg, &mag, &sval) != GGUF_OK)
        return fail(p, GGUF_ERR_BAD_ALIGNMENT, "general.alignment has type %s, not an integer",
                    gguf_value_type_name(f->kvs[idx].type));
    if (neg || mag == 0 || mag > ((uint64_t)1 << 31) || (mag & (mag - 1)) != 0)
        return fail(p, GGUF_ERR_BAD_ALIGNMENT,
                    "general.alignment = %s%llu is not a power of two in [1, 2^31]",
                    neg ? "-" : "", (unsigned long long)mag);
    f->alignment = (uint32_t)mag;
    return GGUF_OK;
}

/* Printable name of tensor i, for messages (tensor->name is only set once parsing ends). */
static const char *tensor_name(const gguf_file *f, int64_t i, char buf[72]) {
    return printable(buf, (const uint8_t *)f->names + f->tensor_table.off[i],
                     f->tensor_table.len[i]);
}

static gguf_status read_tensor_info(parser *p, int64_t idx) {
    gguf_file *f = p->f;
    gguf_tensor *t = &f->tensors[idx];
    name_table *tt = &f->tensor_table;
    const gguf_type_info *ti;
    char buf[72];
    const char *name;
    uint64_t row_bytes, n_rows = 1;
    gguf_status st;

    st = read_name(p, tt, "tensor name", idx, GGUF_MAX_NAME_LEN, GGUF_ERR_BAD_TENSOR_NAME);
    if (st != GGUF_OK) return st;
    name = tensor_name(f, tt->n - 1, buf);

    if (!read_u32(p, &t->n_dims))
        return fail(p, GGUF_ERR_TRUNCATED, "tensor '%s': file ends inside n_dims", name);
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return fail(p, GGUF_ERR_BAD_N_DIMS, "tensor '%s': n_dims = %u, must be 1..%d", name,
                    t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->dims[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (!read_u64(p, &t->dims[d]))
            return fail(p, GGUF_ERR_TRUNCATED, "tensor '%s': file ends inside dimension %u",
                        name, d);
    if (!read_u32(p, &t->type))
        return fail(p, GGUF_ERR_TRUNCATED, "tensor '%s': file ends inside the type", name);
    if (!read_u64(p, &t->offset))
        return fail(p, GGUF_ERR_TRUNCATED, "tensor '%s': file ends inside the offset", name);

    t->n_elements = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] == 0)
            return fail(p, GGUF_ERR_BAD_DIM, "tensor '%s': dimension %u is zero", name, d);
        if (!mul_u64(t->n_elements, t->dims[d], &t->n_elements) || t->n_elements > INT64_MAX)
            return fail(p, GGUF_ERR_DIMS_OVERFLOW,
                        "tensor '%s': element count overflows int64 at dimension %u", name, d);
    }
    ti = gguf_ggml_type_info(t->type);
    if (!ti) return fail(p, GGUF_ERR_BAD_TENSOR_TYPE, "tensor '%s': unknown ggml type %u", name,
                         t->type);
    st = gguf_ggml_row_size(t->type, t->dims[0], &row_bytes);
    if (st == GGUF_ERR_BAD_ROW_SIZE)
        return fail(p, st, "tensor '%s': row length %llu is not a multiple of the %s block "
                    "size %u", name, (unsigned long long)t->dims[0], ti->name, ti->block_size);
    for (uint32_t d = 1; d < t->n_dims; d++) n_rows *= t->dims[d]; /* <= n_elements */
    if (st != GGUF_OK || !mul_u64(row_bytes, n_rows, &t->n_bytes) || t->n_bytes > INT64_MAX)
        return fail(p, GGUF_ERR_DIMS_OVERFLOW, "tensor '%s': byte size overflows int64", name);
    if (t->offset % f->alignment != 0)
        return fail(p, GGUF_ERR_MISALIGNED_OFFSET,
                    "tensor '%s': offset %llu is not a multiple of the alignment %u", name,
                    (unsigned long long)t->offset, f->alignment);
    return GGUF_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Bounds of every tensor against the data section, then pairwise disjointness (sorted by
 * offset, each must end before the next begins). */
static gguf_status place_tensors(parser *p) {
    gguf_file *f = p->f;
    uint64_t data_size = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    const gguf_tensor **order;
    gguf_status st = GGUF_OK;
    char buf[72], buf2[72];

    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_size || t->n_bytes > data_size - t->offset)
            return fail(p, GGUF_ERR_TENSOR_OUT_OF_BOUNDS,
                        "tensor '%s': bytes [%llu, +%llu) run past the %llu-byte data section",
                        tensor_name(f, i, buf), (unsigned long long)t->offset,
                        (unsigned long long)t->n_bytes, (unsigned long long)data_size);
        t->data = f->base + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return GGUF_OK;
    order = malloc((size_t)f->n_tensors * sizeof *order);
    if (!order) return fail(p, GGUF_ERR_NOMEM, "out of memory checking tensor overlap");
    for (int64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_by_offset);
    for (int64_t i = 1; i < f->n_tensors; i++) {
        if (order[i - 1]->offset + order[i - 1]->n_bytes > order[i]->offset) {
            st = fail(p, GGUF_ERR_TENSOR_OVERLAP, "tensors '%s' and '%s' overlap",
                      tensor_name(f, order[i - 1] - f->tensors, buf),
                      tensor_name(f, order[i] - f->tensors, buf2));
            break;
        }
    }
    free(order);
    return st;
}

static gguf_status check_unique(parser *p, name_table *t, const char *what, gguf_status dup) {
    char buf[72];
    int64_t d;
    if (table_sort(t, p->f->names) != GGUF_OK)
        return fail(p, GGUF_ERR_NOMEM, "out of memory sorting %s table", what);
    d = table_duplicate(t, p->f->names);
    if (d >= 0)
        return fail(p, dup, "%s '%s' appears twice", what,
                    printable(buf, (const uint8_t *)p->f->names + t->off[d], t->len[d]));
    return GGUF_OK;
}

static gguf_status parse(parser *p) {
    gguf_file *f = p->f;
    uint64_t n_tensors, n_kv;
    uint32_t version;
    gguf_status st;

    if (f->size < 4) return fail(p, GGUF_ERR_TRUNCATED, "file is %zu bytes, no magic", f->size);
    if (memcmp(f->base, "GGUF", 4) != 0)
        return fail(p, GGUF_ERR_BAD_MAGIC, "bad magic %02x %02x %02x %02x, expected \"GGUF\"",
                    f->base[0], f->base[1], f->base[2], f->base[3]);
    p->pos = 4;
    if (!read_u32(p, &version)) return fail(p, GGUF_ERR_TRUNCATED, "file ends inside version");
    if (version == 1)
        return fail(p, GGUF_ERR_VERSION_1, "GGUF version 1 is not supported (use v2 or v3)");
    if (version == 0x02000000u || version == 0x03000000u)
        return fail(p, GGUF_ERR_BIG_ENDIAN, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return fail(p, GGUF_ERR_BAD_VERSION, "GGUF version %u is not supported", version);
    f->version = version;
    if (!read_u64(p, &n_tensors))
        return fail(p, GGUF_ERR_TRUNCATED, "file ends inside the tensor count");
    if (!read_u64(p, &n_kv)) return fail(p, GGUF_ERR_TRUNCATED, "file ends inside the kv count");
    if (n_kv > GGUF_MAX_KV || n_kv > bytes_left(p) / MIN_KV_BYTES)
        return fail(p, GGUF_ERR_TOO_MANY_KV,
                    "n_kv = %llu: over the limit of %llu or more than the %zu bytes left hold",
                    (unsigned long long)n_kv, (unsigned long long)GGUF_MAX_KV, bytes_left(p));
    if (n_tensors > GGUF_MAX_TENSORS)
        return fail(p, GGUF_ERR_TOO_MANY_TENSORS, "n_tensors = %llu: over the limit of %llu",
                    (unsigned long long)n_tensors, (unsigned long long)GGUF_MAX_TENSORS);

    f->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *f->kvs);
    if (!f->kvs || table_init(&f->key_table, n_kv) != GGUF_OK)
        return fail(p, GGUF_ERR_NOMEM, "out of memory for %llu keys", (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        st = read_name(p, &f->key_table, "key", (int64_t)i, GGUF_MAX_KEY_LEN, GGUF_ERR_BAD_KEY);
        if (st != GGUF_OK) return st;
        f->n_kv = (int64_t)i + 1; /* so gguf_close frees this entry's string offsets */
        st = read_value(p, &f->kvs[i]);
        if (st != GGUF_OK) return st;
    }

    /* Lookups go through the table's offsets, so general.alignment can be found before the
     * pool is final. */
    st = check_unique(p, &f->key_table, "key", GGUF_ERR_DUPLICATE_KEY);
    if (st != GGUF_OK) return st;
    st = read_alignment(p);
    if (st != GGUF_OK) return st;

    if (n_tensors > bytes_left(p) / MIN_TENSOR_INFO_BYTES)
        return fail(p, GGUF_ERR_TOO_MANY_TENSORS,
                    "n_tensors = %llu: more than the %zu bytes left in the file can hold",
                    (unsigned long long)n_tensors, bytes_left(p));
    f->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || table_init(&f->tensor_table, n_tensors) != GGUF_OK)
        return fail(p, GGUF_ERR_NOMEM, "out of memory for %llu tensors",
                    (unsigned long long)n_tensors);
    f->n_tensors = (int64_t)n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        st = read_tensor_info(p, (int64_t)i);
        if (st != GGUF_OK) return st;
    }
    st = check_unique(p, &f->tensor_table, "tensor name", GGUF_ERR_DUPLICATE_TENSOR);
    if (st != GGUF_OK) return st;

    /* pos <= size <= SIZE_MAX and alignment <= 2^31: no overflow in 64 bits on LP64;
     * elsewhere the bounds check in place_tensors catches a start past the end. */
    f->data_offset = ((uint64_t)p->pos + f->alignment - 1) / f->alignment * f->alignment;
    st = place_tensors(p);
    if (st != GGUF_OK) return st;

    f->keys = malloc((n_kv ? (size_t)n_kv : 1) * sizeof *f->keys);
    if (!f->keys) return fail(p, GGUF_ERR_NOMEM, "out of memory for the key index");
    for (int64_t i = 0; i < f->n_kv; i++) f->keys[i] = f->names + f->key_table.off[i];
    for (int64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].name = f->names + f->tensor_table.off[i];
    return GGUF_OK;
}

/* ======================================================================================
 * open / close
 * ====================================================================================== */

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kvs)
        for (int64_t i = 0; i < f->n_kv; i++) free(f->kvs[i].str_offs);
    free(f->kvs);
    free(f->keys);
    table_free(&f->key_table);
    free(f->tensors);
    table_free(&f->tensor_table);
    free(f->names);
    if (f->mapped) munmap((void *)(uintptr_t)f->base, f->size);
    free(f);
}

static gguf_status open_common(gguf_file *f, gguf_file **out, char *err, size_t err_cap) {
    parser p = {f, 0, err, err_cap};
    gguf_status st;
    if (err && err_cap > 0) err[0] = '\0';
    st = parse(&p);
    if (st != GGUF_OK) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return GGUF_OK;
}

gguf_status gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err,
                             size_t err_cap) {
    gguf_file *f;
    static const uint8_t empty[1];
    if (out) *out = NULL;
    if (!out || (!data && size != 0)) {
        if (err && err_cap > 0) snprintf(err, err_cap, "gguf_open_memory: NULL argument");
        return GGUF_ERR_INVALID_ARG;
    }
    f = calloc(1, sizeof *f);
    if (!f) {
        if (err && err_cap > 0) snprintf(err, err_cap, "out of memory");
        return GGUF_ERR_NOMEM;
    }
    f->base = data ? data : empty;
    f->size = size;
    return open_common(f, out, err, err_cap);
}

gguf_status gguf_open(const char *path, gguf_file **out, char *err, size_t err_cap) {
    gguf_file *f;
    struct stat stbuf;
    void *map = NULL;
    size_t size;
    int fd;
    static const uint8_t empty[1];

    if (out) *out = NULL;
    if (!path || !out) {
        if (err && err_cap > 0) snprintf(err, err_cap, "gguf_open: NULL argument");
        return GGUF_ERR_INVALID_ARG;
    }
    /* Never blocks (a FIFO with no writer, a device): regular_file.h. */
    const char *why = NULL;
    fd = regular_file_open(path, &why);
    if (fd < 0) {
        if (err && err_cap > 0) snprintf(err, err_cap, "%s: %s", path, why);
        return GGUF_ERR_IO;
    }
    if (fstat(fd, &stbuf) != 0) {
        if (err && err_cap > 0) snprintf(err, err_cap, "%s: fstat: %s", path, strerror(errno));
        close(fd);
        return GGUF_ERR_IO;
    }
    if (stbuf.st_size < 0 || (off_t)(size_t)stbuf.st_size != stbuf.st_size) {
        if (err && err_cap > 0) snprintf(err, err_cap, "%s: file too large to map", path);
        close(fd);
        return GGUF_ERR_IO;
    }
    size = (size_t)stbuf.st_size;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            if (err && err_cap > 0) snprintf(err, err_cap, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            return GGUF_ERR_IO;
        }
    }
    close(fd); /* the mapping keeps the file alive */
    f = calloc(1, sizeof *f);
    if (!f) {
        if (map) munmap(map, size);
        if (err && err_cap > 0) snprintf(err, err_cap, "out of memory");
        return GGUF_ERR_NOMEM;
    }
    f->base = map ? map : (const void *)empty;
    f->size = size;
    f->mapped = map != NULL;
    return open_common(f, out, err, err_cap);
}

uint32_t gguf_version(const gguf_file *f) { return f ? f->version : 0; }
uint32_t gguf_alignment(const gguf_file *f) { return f ? f->alignment : 0; }
uint64_t gguf_data_offset(const gguf_file *f) { return f ? f->data_offset : 0; }
uint64_t gguf_file_size(const gguf_file *f) { return f ? f->size : 0; }

/* ======================================================================================
 * metadata accessors
 * ====================================================================================== */

int64_t gguf_n_kv(const gguf_file *f) { return f ? f->n_kv : 0; }

const char *gguf_kv_key(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_kv) return NULL;
    return f->keys[i];
}

int gguf_kv_type(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_kv) return -1;
    return (int)f->kvs[i].type;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    if (!f || !key || !f->key_table.sorted) return -1;
    return table_find(&f->key_table, f->names, key, strlen(key));
}

/* Decode an integer of `type` at v into sign + magnitude (and the signed value when
 * negative), so that each getter can range-check without caring about the source type. */
static gguf_status decode_integer(const uint8_t *v, gguf_value_type type, int *neg,
                                  uint64_t *mag, int64_t *sval) {
    int64_t s = 0;
    *neg = 0;
    switch (type) {
    case GGUF_VALUE_UINT8: *mag = v[0]; return GGUF_OK;
    case GGUF_VALUE_UINT16: *mag = load_le16(v); return GGUF_OK;
    case GGUF_VALUE_UINT32: *mag = load_le32(v); return GGUF_OK;
    case GGUF_VALUE_UINT64: *mag = load_le64(v); return GGUF_OK;
    case GGUF_VALUE_INT8: s = (int8_t)v[0]; break;
    case GGUF_VALUE_INT16: s = (int16_t)load_le16(v); break;
    case GGUF_VALUE_INT32: s = (int32_t)load_le32(v); break;
    case GGUF_VALUE_INT64: {
        uint64_t u = load_le64(v);
        memcpy(&s, &u, sizeof s); /* two's complement reinterpretation without UB */
        break;
    }
    default: return GGUF_ERR_TYPE_MISMATCH;
    }
    *sval = s;
    *neg = s < 0;
    *mag = s < 0 ? 0 : (uint64_t)s;
    return GGUF_OK;
}

typedef enum int_kind { K_U32, K_I32, K_U64, K_I64 } int_kind;

static gguf_status get_int(const uint8_t *v, gguf_value_type type, int_kind kind, void *out) {
    int neg;
    uint64_t mag;
    int64_t s = 0;
    gguf_status st = decode_integer(v, type, &neg, &mag, &s);
    if (st != GGUF_OK) return st;
    switch (kind) {
    case K_U32: {
        uint32_t r;
        if (neg || mag > UINT32_MAX) return GGUF_ERR_OUT_OF_RANGE;
        r = (uint32_t)mag;
        memcpy(out, &r, sizeof r);
        return GGUF_OK;
    }
    case K_I32: {
        int32_t r;
        if (neg ? s < INT32_MIN : mag > INT32_MAX) return GGUF_ERR_OUT_OF_RANGE;
        r = neg ? (int32_t)s : (int32_t)mag;
        memcpy(out, &r, sizeof r);
        return GGUF_OK;
    }
    case K_U64:
        if (neg) return GGUF_ERR_OUT_OF_RANGE;
        memcpy(out, &mag, sizeof mag);
        return GGUF_OK;
    case K_I64: {
        int64_t r;
        if (!neg && mag > INT64_MAX) return GGUF_ERR_OUT_OF_RANGE;
        r = neg ? s : (int64_t)mag;
        memcpy(out, &r, sizeof r);
        return GGUF_OK;
    }
    }
    return GGUF_ERR_INVALID_ARG;
}

static float load_f32(const uint8_t *v) {
    uint32_t u = load_le32(v);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static double load_f64(const uint8_t *v) {
    uint64_t u = load_le64(v);
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static gguf_status find_scalar(const gguf_file *f, const char *key, const void *out,
                               const gguf_kv **kv) {
    int64_t i;
    if (!f || !key || !out) return GGUF_ERR_INVALID_ARG;
    i = gguf_find_key(f, key);
    if (i < 0) return GGUF_ERR_NOT_FOUND;
    *kv = &f->kvs[i];
    return GGUF_OK;
}

#define DEFINE_INT_GETTER(fn, ctype, kind)                                                   \
    gguf_status fn(const gguf_file *f, const char *key, ctype *out) {                        \
        const gguf_kv *kv;                                                                   \
        gguf_status st = find_scalar(f, key, out, &kv);                                      \
        if (st != GGUF_OK) return st;                                                        \
        return get_int(kv->val, kv->type, kind, out);                                        \
    }
DEFINE_INT_GETTER(gguf_get_u32, uint32_t, K_U32)
DEFINE_INT_GETTER(gguf_get_i32, int32_t, K_I32)
DEFINE_INT_GETTER(gguf_get_u64, uint64_t, K_U64)
DEFINE_INT_GETTER(gguf_get_i64, int64_t, K_I64)

gguf_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv;
    gguf_status st = find_scalar(f, key, out, &kv);
    if (st != GGUF_OK) return st;
    if (kv->type != GGUF_VALUE_FLOAT32) return GGUF_ERR_TYPE_MISMATCH;
    *out = load_f32(kv->val);
    return GGUF_OK;
}

gguf_status gguf_get_f64(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv;
    gguf_status st = find_scalar(f, key, out, &kv);
    if (st != GGUF_OK) return st;
    if (kv->type == GGUF_VALUE_FLOAT32) *out = load_f32(kv->val);
    else if (kv->type == GGUF_VALUE_FLOAT64) *out = load_f64(kv->val);
    else return GGUF_ERR_TYPE_MISMATCH;
    return GGUF_OK;
}

gguf_status gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv;
    gguf_status st = find_scalar(f, key, out, &kv);
    if (st != GGUF_OK) return st;
    if (kv->type != GGUF_VALUE_BOOL) return GGUF_ERR_TYPE_MISMATCH;
    *out = kv->val[0] != 0;
    return GGUF_OK;
}

gguf_status gguf_get_str(const gguf_file *f, const char *key, const char **str, size_t *len) {
    const gguf_kv *kv;
    gguf_status st = find_scalar(f, key, str, &kv);
    if (st != GGUF_OK) return st;
    if (!len) return GGUF_ERR_INVALID_ARG;
    if (kv->type != GGUF_VALUE_STRING) return GGUF_ERR_TYPE_MISMATCH;
    *str = (const char *)kv->val;
    *len = (size_t)kv->len;
    return GGUF_OK;
}

gguf_status gguf_get_arr(const gguf_file *f, const char *key, gguf_array *out) {
    const gguf_kv *kv;
    gguf_status st = find_scalar(f, key, out, &kv);
    if (st != GGUF_OK) return st;
    if (kv->type != GGUF_VALUE_ARRAY) return GGUF_ERR_TYPE_MISMATCH;
    out->type = kv->elem_type;
    out->count = kv->len;
    out->data = kv->val;
    out->str_offs_ = kv->str_offs;
    return GGUF_OK;
}

/* Element i's bytes, or NULL if the arguments are bad. */
static const uint8_t *array_elem(const gguf_array *a, uint64_t i, const void *out) {
    if (!a || !out || i >= a->count || !a->data) return NULL;
    if (a->type == GGUF_VALUE_STRING)
        return a->str_offs_ ? (const uint8_t *)a->data + a->str_offs_[i] : NULL;
    return (const uint8_t *)a->data + (size_t)i * gguf_value_type_size(a->type);
}

#define DEFINE_ARRAY_INT_GETTER(fn, ctype, kind)                                             \
    gguf_status fn(const gguf_array *a, uint64_t i, ctype *out) {                            \
        const uint8_t *v = array_elem(a, i, out);                                            \
        if (!v) return GGUF_ERR_INVALID_ARG;                                                 \
        return get_int(v, a->type, kind, out);                                               \
    }
DEFINE_ARRAY_INT_GETTER(gguf_array_get_u32, uint32_t, K_U32)
DEFINE_ARRAY_INT_GETTER(gguf_array_get_i32, int32_t, K_I32)
DEFINE_ARRAY_INT_GETTER(gguf_array_get_u64, uint64_t, K_U64)
DEFINE_ARRAY_INT_GETTER(gguf_array_get_i64, int64_t, K_I64)

gguf_status gguf_array_get_f32(const gguf_array *a, uint64_t i, float *out) {
    const uint8_t *v = array_elem(a, i, out);
    if (!v) return GGUF_ERR_INVALID_ARG;
    if (a->type != GGUF_VALUE_FLOAT32) return GGUF_ERR_TYPE_MISMATCH;
    *out = load_f32(v);
    return GGUF_OK;
}

gguf_status gguf_array_get_f64(const gguf_array *a, uint64_t i, double *out) {
    const uint8_t *v = array_elem(a, i, out);
    if (!v) return GGUF_ERR_INVALID_ARG;
    if (a->type == GGUF_VALUE_FLOAT32) *out = load_f32(v);
    else if (a->type == GGUF_VALUE_FLOAT64) *out = load_f64(v);
    else return GGUF_ERR_TYPE_MISMATCH;
    return GGUF_OK;
}

gguf_status gguf_array_get_bool(const gguf_array *a, uint64_t i, int *out) {
    const uint8_t *v = array_elem(a, i, out);
    if (!v) return GGUF_ERR_INVALID_ARG;
    if (a->type != GGUF_VALUE_BOOL) return GGUF_ERR_TYPE_MISMATCH;
    *out = v[0] != 0;
    return GGUF_OK;
}

gguf_status gguf_array_get_str(const gguf_array *a, uint64_t i, const char **str, size_t *len) {
    const uint8_t *v = array_elem(a, i, str);
    if (!v || !len) return GGUF_ERR_INVALID_ARG;
    if (a->type != GGUF_VALUE_STRING) return GGUF_ERR_TYPE_MISMATCH;
    *len = (size_t)load_le64(v); /* validated at open */
    *str = (const char *)v + 8;
    return GGUF_OK;
}

/* ======================================================================================
 * tensor accessors
 * ====================================================================================== */

int64_t gguf_n_tensors(const gguf_file *f) { return f ? f->n_tensors : 0; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_tensors) return NULL;
    return &f->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i;
    if (!f || !name || !f->tensor_table.sorted) return NULL;
    i = table_find(&f->tensor_table, f->names, name, strlen(name));
    return i < 0 ? NULL : &f->tensors[i];
}

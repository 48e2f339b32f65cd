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
 * them, so a malformed file can only produce an error, never an out-of-bounds read.
 *
 * The other files of the reader: gguf_lookup.c (name tables, lookups), gguf_meta.c (typed
 * getters), gguf_types.c (ggml type table, names); shared definitions in gguf_internal.h. */
#include "gguf_internal.h"
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

static int value_type_known(uint32_t type) { return type <= GGUF_VALUE_FLOAT64; }

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
    st = gguf_pool_add(f, s, (size_t)len, &off);
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

static gguf_status read_alignment(parser *p) {
    gguf_file *f = p->f;
    int64_t idx = gguf_find_key(f, "general.alignment");
    int neg;
    uint64_t mag;
    int64_t sval;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (idx < 0) return GGUF_OK;
    if (f->kvs[idx].type == GGUF_VALUE_ARRAY ||
        gguf_decode_integer(f->kvs[idx].val, f->kvs[idx].type, &neg, &mag, &sval) != GGUF_OK)
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
    if (gguf_table_sort(t, p->f->names) != GGUF_OK)
        return fail(p, GGUF_ERR_NOMEM, "out of memory sorting %s table", what);
    d = gguf_table_duplicate(t, p->f->names);
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
    if (!f->kvs || gguf_table_init(&f->key_table, n_kv) != GGUF_OK)
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
    if (!f->tensors || gguf_table_init(&f->tensor_table, n_tensors) != GGUF_OK)
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
    gguf_table_free(&f->key_table);
    free(f->tensors);
    gguf_table_free(&f->tensor_table);
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
const void *gguf_file_bytes(const gguf_file *f) { return f ? f->base : NULL; }

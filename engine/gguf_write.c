/* Minimal GGUF writer; see gguf_write.h for what it does and does not check. */
#include "gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct byte_buf {
    uint8_t *p;
    size_t len, cap;
} byte_buf;

typedef struct writer_tensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t dims[GGUF_WRITER_MAX_DIMS];
    uint8_t *data; /* (n_bytes), NULL for zeros */
    size_t n_bytes;
} writer_tensor;

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    byte_buf kv;              /* serialized key/value section */
    writer_tensor *tensors;   /* (n_tensors) */
    size_t n_tensors, cap_tensors;
    gguf_status err;          /* first failure, sticky */
};

static int buf_reserve(byte_buf *b, size_t n) {
    size_t cap;
    uint8_t *grown;
    if (b->cap - b->len >= n) return 1;
    if (n > SIZE_MAX / 2 - b->len) return 0;
    cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    grown = realloc(b->p, cap);
    if (!grown) return 0;
    b->p = grown;
    b->cap = cap;
    return 1;
}

static void put_bytes(uint8_t *dst, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static int buf_le(byte_buf *b, uint64_t v, size_t n) {
    if (!buf_reserve(b, n)) return 0;
    put_bytes(b->p + b->len, v, n);
    b->len += n;
    return 1;
}

static int buf_raw(byte_buf *b, const void *s, size_t n) {
    if (!buf_reserve(b, n)) return 0;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    return 1;
}

static int buf_str(byte_buf *b, const char *s, size_t len) {
    return buf_le(b, len, 8) && buf_raw(b, s, len);
}

gguf_writer *gguf_writer_create(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->kv.p);
    free(w);
}

void gguf_writer_set_version(gguf_writer *w, uint32_t version) {
    if (w) w->version = version;
}

static gguf_status note(gguf_writer *w, gguf_status st) {
    if (w && w->err == GGUF_OK) w->err = st;
    return st;
}

/* Key and value type; the caller appends the value. Rolls back nothing on failure: the
 * sticky error makes the half-written entry unreachable. */
static gguf_status begin_kv(gguf_writer *w, const char *key, gguf_value_type type) {
    if (!w || !key) return note(w, GGUF_ERR_INVALID_ARG);
    if (w->err != GGUF_OK) return w->err;
    if (!buf_str(&w->kv, key, strlen(key)) || !buf_le(&w->kv, (uint64_t)type, 4))
        return note(w, GGUF_ERR_NOMEM);
    w->n_kv++;
    return GGUF_OK;
}

static gguf_status add_scalar(gguf_writer *w, const char *key, gguf_value_type type,
                              uint64_t bits) {
    gguf_status st = begin_kv(w, key, type);
    if (st != GGUF_OK) return st;
    if (!buf_le(&w->kv, bits, gguf_value_type_size(type))) return note(w, GGUF_ERR_NOMEM);
    return GGUF_OK;
}

gguf_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (!w || alignment == 0 || (alignment & (alignment - 1)) != 0)
        return note(w, GGUF_ERR_INVALID_ARG);
    w->alignment = alignment;
    return add_scalar(w, "general.alignment", GGUF_VALUE_UINT32, alignment);
}

/* Integer conversions through unsigned types keep two's complement bits without UB. */
#define DEFINE_ADD_INT(fn, ctype, utype, vtype)                                              \
    gguf_status fn(gguf_writer *w, const char *key, ctype v) {                               \
        return add_scalar(w, key, vtype, (utype)v);                                          \
    }
DEFINE_ADD_INT(gguf_writer_add_u8, uint8_t, uint8_t, GGUF_VALUE_UINT8)
DEFINE_ADD_INT(gguf_writer_add_i8, int8_t, uint8_t, GGUF_VALUE_INT8)
DEFINE_ADD_INT(gguf_writer_add_u16, uint16_t, uint16_t, GGUF_VALUE_UINT16)
DEFINE_ADD_INT(gguf_writer_add_i16, int16_t, uint16_t, GGUF_VALUE_INT16)
DEFINE_ADD_INT(gguf_writer_add_u32, uint32_t, uint32_t, GGUF_VALUE_UINT32)
DEFINE_ADD_INT(gguf_writer_add_i32, int32_t, uint32_t, GGUF_VALUE_INT32)
DEFINE_ADD_INT(gguf_writer_add_u64, uint64_t, uint64_t, GGUF_VALUE_UINT64)
DEFINE_ADD_INT(gguf_writer_add_i64, int64_t, uint64_t, GGUF_VALUE_INT64)
DEFINE_ADD_INT(gguf_writer_add_bool, uint8_t, uint8_t, GGUF_VALUE_BOOL)

gguf_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return add_scalar(w, key, GGUF_VALUE_FLOAT32, bits);
}
gguf_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return add_scalar(w, key, GGUF_VALUE_FLOAT64, bits);
}

gguf_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, size_t len) {
    gguf_status st;
    if (!s && len) return note(w, GGUF_ERR_INVALID_ARG);
    st = begin_kv(w, key, GGUF_VALUE_STRING);
    if (st != GGUF_OK) return st;
    if (!buf_str(&w->kv, s, len)) return note(w, GGUF_ERR_NOMEM);
    return GGUF_OK;
}

/* Host value i of a scalar array, as the bits to write little-endian. */
static uint64_t host_elem_bits(gguf_value_type type, const uint8_t *data, uint64_t i) {
    size_t sz = gguf_value_type_size(type);
    const uint8_t *p = data + i * sz;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (sz) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

gguf_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_value_type elem_type,
                                const void *data, uint64_t count) {
    size_t sz = gguf_value_type_size(elem_type);
    gguf_status st;
    if (sz == 0 || (!data && count)) return note(w, GGUF_ERR_INVALID_ARG);
    st = begin_kv(w, key, GGUF_VALUE_ARRAY);
    if (st != GGUF_OK) return st;
    if (!buf_le(&w->kv, (uint64_t)elem_type, 4) || !buf_le(&w->kv, count, 8))
        return note(w, GGUF_ERR_NOMEM);
    if (count > SIZE_MAX / sz || !buf_reserve(&w->kv, (size_t)count * sz))
        return note(w, GGUF_ERR_NOMEM);
    for (uint64_t i = 0; i < count; i++)
        buf_le(&w->kv, host_elem_bits(elem_type, data, i), sz); /* reserved above */
    return GGUF_OK;
}

gguf_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, uint64_t count) {
    gguf_status st;
    if (!strs && count) return note(w, GGUF_ERR_INVALID_ARG);
    for (uint64_t i = 0; i < count; i++)
        if (!strs[i] && (!lens || lens[i])) return note(w, GGUF_ERR_INVALID_ARG);
    st = begin_kv(w, key, GGUF_VALUE_ARRAY);
    if (st != GGUF_OK) return st;
    if (!buf_le(&w->kv, GGUF_VALUE_STRING, 4) || !buf_le(&w->kv, count, 8))
        return note(w, GGUF_ERR_NOMEM);
    for (uint64_t i = 0; i < count; i++)
        if (!buf_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i])))
            return note(w, GGUF_ERR_NOMEM);
    return GGUF_OK;
}

gguf_status gguf_writer_add_kv_raw(gguf_writer *w, const void *bytes, size_t n) {
    if (!w || (!bytes && n)) return note(w, GGUF_ERR_INVALID_ARG);
    if (w->err != GGUF_OK) return w->err;
    if (!buf_raw(&w->kv, bytes, n)) return note(w, GGUF_ERR_NOMEM);
    w->n_kv++;
    return GGUF_OK;
}

gguf_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type,
                                   uint32_t n_dims, const uint64_t *dims, const void *data,
                                   size_t n_bytes) {
    writer_tensor *t;
    if (!w || !name || n_dims > GGUF_WRITER_MAX_DIMS || (!dims && n_dims))
        return note(w, GGUF_ERR_INVALID_ARG);
    if (w->err != GGUF_OK) return w->err;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        writer_tensor *grown = realloc(w->tensors, cap * sizeof *grown);
        if (!grown) return note(w, GGUF_ERR_NOMEM);
        w->tensors = grown;
        w->cap_tensors = cap;
    }
    t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = malloc(strlen(name) + 1);
    if (!t->name) return note(w, GGUF_ERR_NOMEM);
    memcpy(t->name, name, strlen(name) + 1);
    if (data && n_bytes) {
        t->data = malloc(n_bytes);
        if (!t->data) {
            free(t->name);
            return note(w, GGUF_ERR_NOMEM);
        }
        memcpy(t->data, data, n_bytes);
    }
    t->type = ggml_type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->dims[d] = dims[d];
    t->n_bytes = n_bytes;
    w->n_tensors++;
    return GGUF_OK;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

gguf_status gguf_writer_to_memory(const gguf_writer *w, void **out, size_t *out_size) {
    byte_buf b = {0};
    size_t data_start, pos;
    uint64_t offset = 0;

    if (out) *out = NULL;
    if (!w || !out || !out_size) return GGUF_ERR_INVALID_ARG;
    if (w->err != GGUF_OK) return w->err;

    if (!buf_raw(&b, "GGUF", 4) || !buf_le(&b, w->version, 4) || !buf_le(&b, w->n_tensors, 8) ||
        !buf_le(&b, w->n_kv, 8) || !buf_raw(&b, w->kv.p, w->kv.len))
        goto nomem;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        if (!buf_str(&b, t->name, strlen(t->name)) || !buf_le(&b, t->n_dims, 4)) goto nomem;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (!buf_le(&b, t->dims[d], 8)) goto nomem;
        if (!buf_le(&b, t->type, 4) || !buf_le(&b, offset, 8)) goto nomem;
        offset = align_up((size_t)offset + t->n_bytes, w->alignment);
    }
    data_start = align_up(b.len, w->alignment);
    if (!buf_reserve(&b, data_start - b.len + (size_t)offset)) goto nomem;
    memset(b.p + b.len, 0, data_start - b.len + (size_t)offset);
    pos = data_start;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        if (t->data) memcpy(b.p + pos, t->data, t->n_bytes);
        pos = align_up(pos + t->n_bytes, w->alignment);
    }
    b.len = data_start + (size_t)offset;
    *out = b.p;
    *out_size = b.len;
    return GGUF_OK;
nomem:
    free(b.p);
    return GGUF_ERR_NOMEM;
}

gguf_status gguf_writer_to_file(const gguf_writer *w, const char *path) {
    void *buf;
    size_t size;
    FILE *fp;
    int ok;
    gguf_status st = gguf_writer_to_memory(w, &buf, &size);
    if (st != GGUF_OK) return st;
    if (!path) {
        free(buf);
        return GGUF_ERR_INVALID_ARG;
    }
    fp = fopen(path, "wb");
    if (!fp) {
        free(buf);
        return GGUF_ERR_IO;
    }
    ok = fwrite(buf, 1, size, fp) == size;
    ok = (fclose(fp) == 0) && ok;
    free(buf);
    return ok ? GGUF_OK : GGUF_ERR_IO;
}

/* GGUF reader: typed metadata getters, by key and by array element. Every value was
 * validated at open, so these only check the arguments, the type and the range. */
#include "gguf_internal.h"

#include <string.h>

/* Decode an integer of `type` at v into sign + magnitude (and the signed value when
 * negative), so that each getter can range-check without caring about the source type. */
gguf_status gguf_decode_integer(const uint8_t *v, gguf_value_type type, int *neg,
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
    gguf_status st = gguf_decode_integer(v, type, &neg, &mag, &s);
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

/* Each value getter in one place, for a value of `type` at v wherever it is stored (a key's
 * value or an array element): the type rules of gguf.h, then the load. */
static gguf_status conv_u32(const uint8_t *v, gguf_value_type type, uint32_t *out) {
    return get_int(v, type, K_U32, out);
}
static gguf_status conv_i32(const uint8_t *v, gguf_value_type type, int32_t *out) {
    return get_int(v, type, K_I32, out);
}
static gguf_status conv_u64(const uint8_t *v, gguf_value_type type, uint64_t *out) {
    return get_int(v, type, K_U64, out);
}
static gguf_status conv_i64(const uint8_t *v, gguf_value_type type, int64_t *out) {
    return get_int(v, type, K_I64, out);
}

static gguf_status conv_f32(const uint8_t *v, gguf_value_type type, float *out) {
    if (type != GGUF_VALUE_FLOAT32) return GGUF_ERR_TYPE_MISMATCH;
    *out = load_f32(v);
    return GGUF_OK;
}

static gguf_status conv_f64(const uint8_t *v, gguf_value_type type, double *out) {
    if (type == GGUF_VALUE_FLOAT32) *out = load_f32(v);
    else if (type == GGUF_VALUE_FLOAT64) *out = load_f64(v);
    else return GGUF_ERR_TYPE_MISMATCH;
    return GGUF_OK;
}

static gguf_status conv_bool(const uint8_t *v, gguf_value_type type, int *out) {
    if (type != GGUF_VALUE_BOOL) return GGUF_ERR_TYPE_MISMATCH;
    *out = v[0] != 0;
    return GGUF_OK;
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

/* Element i's bytes, or NULL if the arguments are bad. */
static const uint8_t *array_elem(const gguf_array *a, uint64_t i, const void *out) {
    if (!a || !out || i >= a->count || !a->data) return NULL;
    if (a->type == GGUF_VALUE_STRING)
        return a->str_offs_ ? (const uint8_t *)a->data + a->str_offs_[i] : NULL;
    return (const uint8_t *)a->data + (size_t)i * gguf_value_type_size(a->type);
}

/* gguf_get_<name> (by key) and gguf_array_get_<name> (by element) through conv_<name>. */
#define DEFINE_GETTERS(name, ctype)                                                          \
    gguf_status gguf_get_##name(const gguf_file *f, const char *key, ctype *out) {           \
        const gguf_kv *kv;                                                                   \
        gguf_status st = find_scalar(f, key, out, &kv);                                      \
        if (st != GGUF_OK) return st;                                                        \
        return conv_##name(kv->val, kv->type, out);                                          \
    }                                                                                        \
    gguf_status gguf_array_get_##name(const gguf_array *a, uint64_t i, ctype *out) {         \
        const uint8_t *v = array_elem(a, i, out);                                            \
        if (!v) return GGUF_ERR_INVALID_ARG;                                                 \
        return conv_##name(v, a->type, out);                                                 \
    }
DEFINE_GETTERS(u32, uint32_t)
DEFINE_GETTERS(i32, int32_t)
DEFINE_GETTERS(u64, uint64_t)
DEFINE_GETTERS(i64, int64_t)
DEFINE_GETTERS(f32, float)
DEFINE_GETTERS(f64, double)
DEFINE_GETTERS(bool, int)

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

gguf_status gguf_array_get_str(const gguf_array *a, uint64_t i, const char **str, size_t *len) {
    const uint8_t *v = array_elem(a, i, str);
    if (!v || !len) return GGUF_ERR_INVALID_ARG;
    if (a->type != GGUF_VALUE_STRING) return GGUF_ERR_TYPE_MISMATCH;
    *len = (size_t)load_le64(v); /* validated at open */
    *str = (const char *)v + 8;
    return GGUF_OK;
}

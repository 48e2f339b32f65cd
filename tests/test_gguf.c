/* Tests for the GGUF reader (engine/gguf.c) and writer (engine/gguf_write.c).
 *
 * Round trips writer -> reader for every metadata type and several tensor types, one test
 * per malformed-file case the reader rejects (each pinned to its status code), and, when
 * the real model is installed, a check of that file.
 *
 *   test_gguf                       run the tests
 *   test_gguf --write-seeds DIR     write small fuzz seeds into DIR and exit
 *
 * The model path comes from $TQ_MODEL, else models/gemma3-270m-q4_k_m.gguf. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "test_util.h"

#define DEFAULT_MODEL "models/gemma3-270m-q4_k_m.gguf"

/* ======================================================================================
 * helpers
 * ====================================================================================== */

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* Serialize and free the writer. */
static blob finish(gguf_writer *w) {
    blob b = {NULL, 0};
    void *p = NULL;
    gguf_status st = gguf_writer_to_memory(w, &p, &b.n);
    CHECK_MSG(st == GGUF_OK, "writer: %s", gguf_status_name(st));
    b.p = p;
    gguf_writer_free(w);
    return b;
}

static void wr_le(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Offset of the first occurrence of needle in b (which must be there). */
static size_t find(const blob *b, const void *needle, size_t n) {
    for (size_t i = 0; i + n <= b->n; i++)
        if (memcmp(b->p + i, needle, n) == 0) return i;
    CHECK_MSG(0, "pattern of %zu bytes not found", n);
    return 0;
}

/* Offset of the byte right after the first length-prefixed occurrence of `name` (a key or
 * a tensor name): a key's value type field, a tensor descriptor's n_dims. */
static size_t after_name(const blob *b, const char *name) {
    uint8_t pat[8 + 64];
    size_t len = strlen(name);
    wr_le(pat, len, 8);
    memcpy(pat + 8, name, len);
    return find(b, pat, 8 + len) + 8 + len;
}

/* Open an exact-size heap copy (so ASan sees any overread) and expect `want`; if `msg` is
 * given, the error message must contain it. Returns the status. */
static gguf_status expect_open(const uint8_t *data, size_t n, gguf_status want, const char *msg) {
    uint8_t *copy = malloc(n ? n : 1);
    gguf_file *f = (gguf_file *)1;
    char err[256];
    gguf_status st;
    if (n) memcpy(copy, data, n);
    st = gguf_open_memory(n ? copy : NULL, n, &f, err, sizeof err);
    CHECK_MSG(st == want, "got %s (%s), want %s", gguf_status_name(st), err,
              gguf_status_name(want));
    if (st != GGUF_OK) {
        CHECK(f == NULL);
        CHECK(err[0] != '\0');
        if (msg) CHECK_MSG(strstr(err, msg) != NULL, "message '%s' lacks '%s'", err, msg);
    }
    gguf_close(f);
    free(copy);
    return st;
}

static void expect_blob(blob b, gguf_status want, const char *msg) {
    expect_open(b.p, b.n, want, msg);
    free(b.p);
}

/* A small valid file with two tensors, sizes chosen so that the file ends exactly at the
 * end of the last tensor (no trailing padding): every shorter prefix must be rejected. */
static gguf_writer *small_model(void) {
    gguf_writer *w = gguf_writer_create();
    uint64_t d2[2] = {8, 2}, d1[1] = {8};
    float a[16], c[8];
    const char *toks[3] = {"<pad>", "a", ""};
    for (int i = 0; i < 16; i++) a[i] = (float)i;
    for (int i = 0; i < 8; i++) c[i] = -(float)i;
    gguf_writer_add_str(w, "general.architecture", "tiny", 4);
    gguf_writer_add_u32(w, "tiny.block_count", 2);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
    gguf_writer_add_f32(w, "tiny.eps", 1e-6f);
    gguf_writer_add_tensor(w, "a.weight", GGUF_GGML_F32, 2, d2, a, sizeof a);
    gguf_writer_add_tensor(w, "c.weight", GGUF_GGML_F32, 1, d1, c, sizeof c);
    return w;
}

/* ======================================================================================
 * tables and names
 * ====================================================================================== */

static void test_status_names(void) {
    for (int s = 0; s <= GGUF_ERR_OUT_OF_RANGE; s++) {
        const char *name = gguf_status_name((gguf_status)s);
        CHECK(strncmp(name, "GGUF_", 5) == 0);
        CHECK(strcmp(name, "GGUF_ERR_UNKNOWN") != 0);
        for (int t = 0; t < s; t++) CHECK(strcmp(name, gguf_status_name((gguf_status)t)) != 0);
    }
    CHECK(strcmp(gguf_status_name((gguf_status)999), "GGUF_ERR_UNKNOWN") == 0);
    /* pinned values */
    CHECK(GGUF_ERR_TRUNCATED == 4 && GGUF_ERR_VERSION_1 == 6 && GGUF_ERR_TENSOR_OVERLAP == 28);
    CHECK(strcmp(gguf_value_type_name(GGUF_VALUE_FLOAT64), "float64") == 0);
    CHECK(strcmp(gguf_value_type_name(13), "unknown") == 0);
    CHECK(strcmp(gguf_value_type_name(-1), "unknown") == 0);
}

static void test_type_table(void) {
    static const struct { uint32_t id; const char *name; uint32_t bs, ts; } want[] = {
        {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 40},    {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {24, "I8", 1, 1},
        {25, "I16", 1, 2},      {26, "I32", 1, 4},      {27, "I64", 1, 8},
        {28, "F64", 1, 8},      {30, "BF16", 1, 2},
    };
    uint64_t bytes = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gguf_type_info *ti = gguf_ggml_type_info(want[i].id);
        CHECK_MSG(ti != NULL, "type %u", want[i].id);
        if (!ti) continue;
        CHECK(ti->id == want[i].id);
        CHECK(strcmp(ti->name, want[i].name) == 0);
        CHECK_MSG(ti->block_size == want[i].bs && ti->type_size == want[i].ts, "%s", ti->name);
    }
    CHECK(gguf_ggml_type_info(4) == NULL);
    CHECK(gguf_ggml_type_info(5) == NULL);
    CHECK(gguf_ggml_type_info(31) == NULL);
    CHECK(gguf_ggml_type_info(1000) == NULL);
    CHECK(gguf_ggml_row_size(GGUF_GGML_Q4_K, 512, &bytes) == GGUF_OK && bytes == 288);
    CHECK(gguf_ggml_row_size(GGUF_GGML_Q4_K, 100, &bytes) == GGUF_ERR_BAD_ROW_SIZE);
    CHECK(gguf_ggml_row_size(77, 100, &bytes) == GGUF_ERR_BAD_TENSOR_TYPE);
    CHECK(gguf_ggml_row_size(GGUF_GGML_F64, (uint64_t)1 << 61, &bytes) == GGUF_ERR_DIMS_OVERFLOW);
    CHECK(gguf_ggml_row_size(GGUF_GGML_F32, 1, NULL) == GGUF_ERR_INVALID_ARG);
}

/* ======================================================================================
 * round trips
 * ====================================================================================== */

static void test_roundtrip_metadata(void) {
    gguf_writer *w = gguf_writer_create();
    static const uint8_t au8[3] = {0, 7, 255};
    static const int8_t ai8[3] = {-128, 0, 127};
    static const uint16_t au16[2] = {0, 65535};
    static const int16_t ai16[2] = {-32768, 32767};
    static const uint32_t au32[2] = {1, 4294967295u};
    static const int32_t ai32[3] = {INT32_MIN, -1, INT32_MAX};
    static const uint64_t au64[2] = {0, UINT64_MAX};
    static const int64_t ai64[2] = {INT64_MIN, INT64_MAX};
    static const float af32[3] = {1.5f, -0.0f, 3.0e38f};
    static const double af64[2] = {1e-300, -2.5};
    static const uint8_t abool[3] = {1, 0, 1};
    const char *strs[4] = {"hello", "", "w\xc3\xb6rld", "nul"};
    size_t lens[4] = {5, 0, 6, 4}; /* "nul" plus its NUL byte: strings may hold NULs */
    gguf_file *f = NULL;
    gguf_array a;
    const char *s;
    size_t len;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    int b;
    char err[128];
    blob bl;

    gguf_writer_add_u8(w, "k.u8", 200);
    gguf_writer_add_i8(w, "k.i8", -100);
    gguf_writer_add_u16(w, "k.u16", 60000);
    gguf_writer_add_i16(w, "k.i16", -30000);
    gguf_writer_add_u32(w, "k.u32", 4000000000u);
    gguf_writer_add_i32(w, "k.i32", -2000000000);
    gguf_writer_add_u64(w, "k.u64", UINT64_MAX);
    gguf_writer_add_i64(w, "k.i64", INT64_MIN);
    gguf_writer_add_f32(w, "k.f32", 0.15625f);
    gguf_writer_add_f64(w, "k.f64", -1.0 / 3.0);
    gguf_writer_add_bool(w, "k.true", 1);
    gguf_writer_add_bool(w, "k.false", 0);
    gguf_writer_add_str(w, "k.str", "gemma\0x", 7);
    gguf_writer_add_str(w, "k.empty", NULL, 0);
    gguf_writer_add_arr(w, "a.u8", GGUF_VALUE_UINT8, au8, 3);
    gguf_writer_add_arr(w, "a.i8", GGUF_VALUE_INT8, ai8, 3);
    gguf_writer_add_arr(w, "a.u16", GGUF_VALUE_UINT16, au16, 2);
    gguf_writer_add_arr(w, "a.i16", GGUF_VALUE_INT16, ai16, 2);
    gguf_writer_add_arr(w, "a.u32", GGUF_VALUE_UINT32, au32, 2);
    gguf_writer_add_arr(w, "a.i32", GGUF_VALUE_INT32, ai32, 3);
    gguf_writer_add_arr(w, "a.u64", GGUF_VALUE_UINT64, au64, 2);
    gguf_writer_add_arr(w, "a.i64", GGUF_VALUE_INT64, ai64, 2);
    gguf_writer_add_arr(w, "a.f32", GGUF_VALUE_FLOAT32, af32, 3);
    gguf_writer_add_arr(w, "a.f64", GGUF_VALUE_FLOAT64, af64, 2);
    gguf_writer_add_arr(w, "a.bool", GGUF_VALUE_BOOL, abool, 3);
    gguf_writer_add_arr_str(w, "a.str", strs, lens, 4);
    gguf_writer_add_arr(w, "a.empty", GGUF_VALUE_INT32, NULL, 0);
    gguf_writer_add_arr_str(w, "a.empty_str", NULL, NULL, 0);
    bl = finish(w);

    CHECK(gguf_open_memory(bl.p, bl.n, &f, err, sizeof err) == GGUF_OK);
    if (!f) {
        free(bl.p);
        return;
    }
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_alignment(f) == 32);
    CHECK(gguf_n_kv(f) == 28);
    CHECK(gguf_n_tensors(f) == 0);
    CHECK(strcmp(gguf_kv_key(f, 0), "k.u8") == 0);
    CHECK(gguf_kv_type(f, 0) == GGUF_VALUE_UINT8);
    CHECK(strcmp(gguf_kv_key(f, 27), "a.empty_str") == 0);
    CHECK(gguf_kv_type(f, 25) == GGUF_VALUE_ARRAY);
    CHECK(gguf_kv_key(f, 28) == NULL && gguf_kv_key(f, -1) == NULL);
    CHECK(gguf_kv_type(f, 28) == -1);
    CHECK(gguf_find_key(f, "k.f64") == 9);
    CHECK(gguf_find_key(f, "k.f6") == -1 && gguf_find_key(f, "") == -1);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) CHECK(gguf_find_key(f, gguf_kv_key(f, i)) == i);

    CHECK(gguf_get_u32(f, "k.u8", &u32) == GGUF_OK && u32 == 200);
    CHECK(gguf_get_i32(f, "k.i8", &i32) == GGUF_OK && i32 == -100);
    CHECK(gguf_get_u32(f, "k.u16", &u32) == GGUF_OK && u32 == 60000);
    CHECK(gguf_get_i64(f, "k.i16", &i64) == GGUF_OK && i64 == -30000);
    CHECK(gguf_get_u32(f, "k.u32", &u32) == GGUF_OK && u32 == 4000000000u);
    CHECK(gguf_get_i32(f, "k.i32", &i32) == GGUF_OK && i32 == -2000000000);
    CHECK(gguf_get_u64(f, "k.u64", &u64) == GGUF_OK && u64 == UINT64_MAX);
    CHECK(gguf_get_i64(f, "k.i64", &i64) == GGUF_OK && i64 == INT64_MIN);
    CHECK(gguf_get_f32(f, "k.f32", &f32) == GGUF_OK && f32 == 0.15625f);
    CHECK(gguf_get_f64(f, "k.f32", &f64) == GGUF_OK && f64 == 0.15625);
    CHECK(gguf_get_f64(f, "k.f64", &f64) == GGUF_OK && f64 == -1.0 / 3.0);
    CHECK(gguf_get_bool(f, "k.true", &b) == GGUF_OK && b == 1);
    CHECK(gguf_get_bool(f, "k.false", &b) == GGUF_OK && b == 0);
    CHECK(gguf_get_str(f, "k.str", &s, &len) == GGUF_OK && len == 7 &&
          memcmp(s, "gemma\0x", 7) == 0);
    CHECK(gguf_get_str(f, "k.empty", &s, &len) == GGUF_OK && len == 0);

    CHECK(gguf_get_arr(f, "a.u8", &a) == GGUF_OK && a.type == GGUF_VALUE_UINT8 && a.count == 3);
    CHECK(gguf_array_get_u32(&a, 2, &u32) == GGUF_OK && u32 == 255);
    CHECK(gguf_get_arr(f, "a.i8", &a) == GGUF_OK && a.count == 3);
    CHECK(gguf_array_get_i32(&a, 0, &i32) == GGUF_OK && i32 == -128);
    CHECK(gguf_array_get_u32(&a, 0, &u32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_arr(f, "a.u16", &a) == GGUF_OK && a.type == GGUF_VALUE_UINT16);
    CHECK(gguf_array_get_u64(&a, 1, &u64) == GGUF_OK && u64 == 65535);
    CHECK(gguf_get_arr(f, "a.i16", &a) == GGUF_OK);
    CHECK(gguf_array_get_i64(&a, 0, &i64) == GGUF_OK && i64 == -32768);
    CHECK(gguf_get_arr(f, "a.u32", &a) == GGUF_OK);
    CHECK(gguf_array_get_u32(&a, 1, &u32) == GGUF_OK && u32 == 4294967295u);
    CHECK(gguf_array_get_i32(&a, 1, &i32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_arr(f, "a.i32", &a) == GGUF_OK && a.count == 3);
    for (uint64_t i = 0; i < 3; i++)
        CHECK(gguf_array_get_i32(&a, i, &i32) == GGUF_OK && i32 == ai32[i]);
    CHECK(gguf_get_arr(f, "a.u64", &a) == GGUF_OK);
    CHECK(gguf_array_get_u64(&a, 1, &u64) == GGUF_OK && u64 == UINT64_MAX);
    CHECK(gguf_array_get_i64(&a, 1, &i64) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_arr(f, "a.i64", &a) == GGUF_OK);
    CHECK(gguf_array_get_i64(&a, 0, &i64) == GGUF_OK && i64 == INT64_MIN);
    CHECK(gguf_array_get_i64(&a, 1, &i64) == GGUF_OK && i64 == INT64_MAX);
    CHECK(gguf_get_arr(f, "a.f32", &a) == GGUF_OK && a.type == GGUF_VALUE_FLOAT32);
    for (uint64_t i = 0; i < 3; i++) {
        CHECK(gguf_array_get_f32(&a, i, &f32) == GGUF_OK && memcmp(&f32, &af32[i], 4) == 0);
        CHECK(gguf_array_get_f64(&a, i, &f64) == GGUF_OK && f64 == (double)af32[i]);
    }
    CHECK(gguf_get_arr(f, "a.f64", &a) == GGUF_OK);
    CHECK(gguf_array_get_f64(&a, 0, &f64) == GGUF_OK && f64 == 1e-300);
    CHECK(gguf_array_get_f32(&a, 0, &f32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_arr(f, "a.bool", &a) == GGUF_OK && a.type == GGUF_VALUE_BOOL);
    CHECK(gguf_array_get_bool(&a, 0, &b) == GGUF_OK && b == 1);
    CHECK(gguf_array_get_bool(&a, 1, &b) == GGUF_OK && b == 0);
    CHECK(gguf_array_get_u32(&a, 1, &u32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_arr(f, "a.str", &a) == GGUF_OK && a.type == GGUF_VALUE_STRING && a.count == 4);
    for (uint64_t i = 0; i < 4; i++)
        CHECK(gguf_array_get_str(&a, i, &s, &len) == GGUF_OK && len == lens[i] &&
              memcmp(s, strs[i], len) == 0);
    CHECK(gguf_array_get_str(&a, 4, &s, &len) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_array_get_u32(&a, 0, &u32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_arr(f, "a.empty", &a) == GGUF_OK && a.count == 0 && a.type == GGUF_VALUE_INT32);
    CHECK(gguf_array_get_i32(&a, 0, &i32) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_get_arr(f, "a.empty_str", &a) == GGUF_OK && a.count == 0);
    CHECK(gguf_array_get_str(&a, 0, &s, &len) == GGUF_ERR_INVALID_ARG);

    /* the strings point into the caller's buffer: no copy */
    CHECK(gguf_get_str(f, "k.str", &s, &len) == GGUF_OK);
    CHECK((const uint8_t *)s > bl.p && (const uint8_t *)s + len <= bl.p + bl.n);
    gguf_close(f);
    free(bl.p);
}

static void test_getter_rules(void) {
    gguf_writer *w = gguf_writer_create();
    gguf_file *f = NULL;
    uint32_t u32 = 12345;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    int b;
    const char *s;
    size_t len;
    gguf_array a;
    blob bl;

    gguf_writer_add_i8(w, "neg", -1);
    gguf_writer_add_u64(w, "big", (uint64_t)1 << 40);
    gguf_writer_add_u64(w, "seven", 7);
    gguf_writer_add_u32(w, "u32max", UINT32_MAX);
    gguf_writer_add_i64(w, "i64min", INT64_MIN);
    gguf_writer_add_f64(w, "d", 2.0);
    gguf_writer_add_bool(w, "flag", 1);
    gguf_writer_add_str(w, "s", "x", 1);
    gguf_writer_add_arr(w, "arr", GGUF_VALUE_UINT8, "ab", 2);
    bl = finish(w);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, NULL, 0) == GGUF_OK);
    if (!f) {
        free(bl.p);
        return;
    }
    CHECK(gguf_get_u32(f, "neg", &u32) == GGUF_ERR_OUT_OF_RANGE && u32 == 12345);
    CHECK(gguf_get_u64(f, "neg", &u64) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_i32(f, "neg", &i32) == GGUF_OK && i32 == -1);
    CHECK(gguf_get_u32(f, "big", &u32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_i32(f, "big", &i32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_i64(f, "big", &i64) == GGUF_OK && i64 == (int64_t)1 << 40);
    CHECK(gguf_get_u32(f, "seven", &u32) == GGUF_OK && u32 == 7);
    CHECK(gguf_get_i32(f, "u32max", &i32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_i32(f, "i64min", &i32) == GGUF_ERR_OUT_OF_RANGE);
    CHECK(gguf_get_i64(f, "i64min", &i64) == GGUF_OK && i64 == INT64_MIN);
    CHECK(gguf_get_f32(f, "d", &f32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_f64(f, "d", &f64) == GGUF_OK && f64 == 2.0);
    CHECK(gguf_get_u32(f, "d", &u32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_u32(f, "flag", &u32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_bool(f, "seven", &b) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_str(f, "seven", &s, &len) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_arr(f, "s", &a) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_u32(f, "arr", &u32) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_str(f, "arr", &s, &len) == GGUF_ERR_TYPE_MISMATCH);
    CHECK(gguf_get_u32(f, "missing", &u32) == GGUF_ERR_NOT_FOUND);
    CHECK(gguf_get_arr(f, "missing", &a) == GGUF_ERR_NOT_FOUND);
    CHECK(gguf_get_u32(f, NULL, &u32) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_get_u32(f, "seven", NULL) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_get_u32(NULL, "seven", &u32) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_get_str(f, "s", &s, NULL) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_array_get_u32(NULL, 0, &u32) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_find_tensor(f, "x") == NULL && gguf_tensor_at(f, 0) == NULL);
    CHECK(gguf_find_key(NULL, "s") == -1 && gguf_n_kv(NULL) == 0);
    gguf_close(f);
    gguf_close(NULL);
    free(bl.p);
}

static void test_roundtrip_tensors(void) {
    gguf_writer *w = gguf_writer_create();
    struct { const char *name; uint32_t type; uint32_t n_dims; uint64_t dims[4]; size_t bytes; }
    spec[] = {
        {"f32", GGUF_GGML_F32, 2, {4, 3}, 48},
        {"f16", GGUF_GGML_F16, 1, {8}, 16},
        {"q4_0", GGUF_GGML_Q4_0, 2, {64, 2}, 2 * 2 * 18},
        {"q4_k", GGUF_GGML_Q4_K, 2, {256, 1}, 144},
        {"q6_k", GGUF_GGML_Q6_K, 1, {512}, 2 * 210},
        {"q8_0.4d", GGUF_GGML_Q8_0, 4, {32, 2, 3, 1}, 6 * 34},
        {"q5_0", GGUF_GGML_Q5_0, 3, {32, 1, 5}, 5 * 22},
        {"i8", GGUF_GGML_I8, 1, {3}, 3},
        {"bf16", GGUF_GGML_BF16, 1, {5}, 10},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    uint8_t *data[N];
    gguf_file *f = NULL;
    char err[128];
    blob bl;

    for (int i = 0; i < N; i++) {
        data[i] = malloc(spec[i].bytes);
        for (size_t j = 0; j < spec[i].bytes; j++) data[i][j] = (uint8_t)(i * 31 + j);
        CHECK(gguf_writer_add_tensor(w, spec[i].name, spec[i].type, spec[i].n_dims, spec[i].dims,
                                     data[i], spec[i].bytes) == GGUF_OK);
    }
    gguf_writer_add_str(w, "general.architecture", "test", 4);
    bl = finish(w);
    CHECK_MSG(gguf_open_memory(bl.p, bl.n, &f, err, sizeof err) == GGUF_OK, "%s", err);
    if (f) {
        CHECK(gguf_n_tensors(f) == N);
        CHECK(gguf_data_offset(f) % 32 == 0);
        CHECK(gguf_file_size(f) == bl.n);
        for (int i = 0; i < N; i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            CHECK(t != NULL && t == gguf_find_tensor(f, spec[i].name));
            if (!t) continue;
            CHECK(strcmp(t->name, spec[i].name) == 0);
            CHECK(t->type == spec[i].type && t->n_dims == spec[i].n_dims);
            uint64_t ne = 1;
            for (uint32_t d = 0; d < 4; d++) {
                uint64_t want = d < spec[i].n_dims ? spec[i].dims[d] : 1;
                CHECK(t->dims[d] == want);
                ne *= want;
            }
            CHECK(t->n_elements == ne);
            CHECK_MSG(t->n_bytes == spec[i].bytes, "%s: %llu", t->name,
                      (unsigned long long)t->n_bytes);
            CHECK(t->offset % 32 == 0);
            CHECK((const uint8_t *)t->data == bl.p + gguf_data_offset(f) + t->offset);
            CHECK(memcmp(t->data, data[i], spec[i].bytes) == 0);
        }
        CHECK(gguf_find_tensor(f, "f3") == NULL && gguf_find_tensor(f, "f322") == NULL);
        CHECK(gguf_tensor_at(f, N) == NULL && gguf_tensor_at(f, -1) == NULL);
    }
    gguf_close(f);
    for (int i = 0; i < N; i++) free(data[i]);
    free(bl.p);
}

static void test_version2_and_alignment(void) {
    gguf_writer *w = small_model();
    gguf_file *f = NULL;
    uint64_t dims[1] = {3};
    blob bl;
    gguf_writer_set_version(w, 2);
    CHECK(gguf_writer_set_alignment(w, 3) == GGUF_ERR_INVALID_ARG);
    gguf_writer_free(w);

    w = small_model();
    gguf_writer_set_version(w, 2);
    CHECK(gguf_writer_set_alignment(w, 256) == GGUF_OK);
    gguf_writer_add_tensor(w, "odd", GGUF_GGML_I8, 1, dims, "xyz", 3);
    bl = finish(w);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, NULL, 0) == GGUF_OK);
    if (f) {
        CHECK(gguf_version(f) == 2);
        CHECK(gguf_alignment(f) == 256);
        CHECK(gguf_data_offset(f) % 256 == 0);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++)
            CHECK(gguf_tensor_at(f, i)->offset % 256 == 0);
        CHECK(memcmp(gguf_find_tensor(f, "odd")->data, "xyz", 3) == 0);
    }
    gguf_close(f);
    free(bl.p);

    /* general.alignment may be any integer type holding a power of two */
    w = gguf_writer_create();
    gguf_writer_add_u64(w, "general.alignment", 32);
    expect_blob(finish(w), GGUF_OK, NULL);
}

static void test_empty_and_minimal(void) {
    /* header only: no keys, no tensors, no padding */
    gguf_writer *w = gguf_writer_create();
    blob bl = finish(w);
    gguf_file *f = NULL;
    CHECK(bl.n == 32); /* 24-byte header padded to 32 */
    expect_open(bl.p, 24, GGUF_OK, NULL);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, NULL, 0) == GGUF_OK);
    CHECK(f && gguf_n_kv(f) == 0 && gguf_n_tensors(f) == 0 && gguf_find_key(f, "x") == -1);
    gguf_close(f);
    free(bl.p);
}

static void test_open_file(void) {
    const char *path = "/tmp/test_gguf_roundtrip.gguf";
    gguf_writer *w = small_model();
    gguf_file *f = NULL;
    char err[256];
    const char *s;
    size_t len;
    float eps;
    FILE *fp;

    CHECK(gguf_writer_to_file(w, path) == GGUF_OK);
    gguf_writer_free(w);
    CHECK_MSG(gguf_open(path, &f, err, sizeof err) == GGUF_OK, "%s", err);
    if (f) {
        CHECK(gguf_get_str(f, "general.architecture", &s, &len) == GGUF_OK && len == 4 &&
              memcmp(s, "tiny", 4) == 0);
        CHECK(gguf_get_f32(f, "tiny.eps", &eps) == GGUF_OK && eps == 1e-6f);
        CHECK(gguf_n_tensors(f) == 2);
        CHECK(((const float *)gguf_find_tensor(f, "c.weight")->data)[7] == -7.0f);
    }
    gguf_close(f);
    remove(path);

    f = (gguf_file *)1;
    CHECK(gguf_open("/nonexistent/dir/x.gguf", &f, err, sizeof err) == GGUF_ERR_IO);
    CHECK(f == NULL && strstr(err, "/nonexistent/dir/x.gguf") != NULL);
    CHECK(gguf_open("/tmp", &f, err, sizeof err) == GGUF_ERR_IO);
    CHECK(gguf_open(NULL, &f, err, sizeof err) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_open(path, NULL, err, sizeof err) == GGUF_ERR_INVALID_ARG);
    fp = fopen(path, "wb");
    if (fp) fclose(fp);
    CHECK(gguf_open(path, &f, err, sizeof err) == GGUF_ERR_TRUNCATED);
    remove(path);
}

/* gguf_open on a path that is not a regular file fails at once with GGUF_ERR_IO and a
 * message naming the path. A FIFO with no writer used to block forever in open(2); the
 * call runs in a child process under alarm(), so a regression fails this test (the child
 * dies of SIGALRM) instead of hanging the suite. */
static int open_rejects(const char *path, const char *kind) {
    gguf_file *f = (gguf_file *)1;
    char err[256] = "";
    gguf_status st = gguf_open(path, &f, err, sizeof err);
    int ok = st == GGUF_ERR_IO && f == NULL && strstr(err, path) != NULL &&
             strstr(err, "not a regular file") != NULL && strstr(err, kind) != NULL;
    if (!ok) fprintf(stderr, "gguf_open(%s): %s: %s\n", path, gguf_status_name(st), err);
    if (st == GGUF_OK) gguf_close(f);
    return ok;
}

static void test_open_not_regular(void) {
    char dir[] = "/tmp/test_gguf_XXXXXX";
    char fifo[64];
    pid_t pid;
    int wst = 0;

    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(10); /* SIGALRM's default action ends the child if gguf_open blocks */
        _exit(open_rejects(fifo, "FIFO") ? 0 : 1);
    }
    if (pid > 0) {
        CHECK(waitpid(pid, &wst, 0) == pid);
        CHECK_MSG(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "gguf_open on a FIFO with no writer: %s",
                  WIFSIGNALED(wst) && WTERMSIG(wst) == SIGALRM ? "blocked (child killed after 10 s)"
                                                               : "wrong status or message");
    }
    CHECK(open_rejects(dir, "directory"));
    CHECK(open_rejects("/dev/null", "character device"));
    unlink(fifo);
    rmdir(dir);
}

/* Many keys and tensors: lookups through the sorted index, and a duplicate far from its
 * twin, in file order after thousands of other names. */
static void test_many_names(void) {
    enum { N_KEYS = 20000, N_TENSORS = 3000 };
    gguf_writer *w = gguf_writer_create();
    gguf_file *f = NULL;
    char name[32];
    uint64_t d[1] = {8};
    uint32_t u32;
    blob bl;
    for (uint32_t i = 0; i < N_KEYS; i++) {
        snprintf(name, sizeof name, "k.%u", (i * 7919u) % N_KEYS); /* not in sorted order */
        gguf_writer_add_u32(w, name, (i * 7919u) % N_KEYS);
    }
    for (uint32_t i = 0; i < N_TENSORS; i++) {
        snprintf(name, sizeof name, "t.%u", N_TENSORS - 1 - i);
        gguf_writer_add_tensor(w, name, GGUF_GGML_F32, 1, d, NULL, 32);
    }
    bl = finish(w);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, NULL, 0) == GGUF_OK);
    if (f) {
        CHECK(gguf_n_kv(f) == N_KEYS && gguf_n_tensors(f) == N_TENSORS);
        for (uint32_t i = 0; i < N_KEYS; i += 97) {
            snprintf(name, sizeof name, "k.%u", i);
            CHECK(gguf_get_u32(f, name, &u32) == GGUF_OK && u32 == i);
        }
        for (uint32_t i = 0; i < N_TENSORS; i += 31) {
            const gguf_tensor *t;
            snprintf(name, sizeof name, "t.%u", i);
            t = gguf_find_tensor(f, name);
            CHECK(t != NULL && strcmp(t->name, name) == 0);
        }
        CHECK(gguf_get_u32(f, "k.20000", &u32) == GGUF_ERR_NOT_FOUND);
        CHECK(gguf_get_u32(f, "k.", &u32) == GGUF_ERR_NOT_FOUND);
        CHECK(gguf_find_tensor(f, "t.3000") == NULL && gguf_find_tensor(f, "t.") == NULL);
    }
    gguf_close(f);
    free(bl.p);

    w = gguf_writer_create();
    for (uint32_t i = 0; i < N_KEYS; i++) {
        snprintf(name, sizeof name, "k.%u", i);
        gguf_writer_add_u32(w, name, i);
    }
    gguf_writer_add_u32(w, "k.12345", 0);
    expect_blob(finish(w), GGUF_ERR_DUPLICATE_KEY, "'k.12345'");
}

/* ======================================================================================
 * malformed files: one test per rejection
 * ====================================================================================== */

static void test_invalid_args(void) {
    gguf_file *f = (gguf_file *)1;
    char err[64];
    CHECK(gguf_open_memory(NULL, 10, &f, err, sizeof err) == GGUF_ERR_INVALID_ARG && f == NULL);
    CHECK(gguf_open_memory("GGUF", 4, NULL, err, sizeof err) == GGUF_ERR_INVALID_ARG);
    CHECK(gguf_open_memory(NULL, 0, &f, NULL, 0) == GGUF_ERR_TRUNCATED);
}

static void test_truncated_everywhere(void) {
    blob bl = finish(small_model());
    size_t n_fail = 0;
    for (size_t n = 0; n < bl.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        gguf_file *f = NULL;
        char err[256];
        gguf_status st;
        if (n) memcpy(copy, bl.p, n);
        st = gguf_open_memory(copy, n, &f, err, sizeof err);
        CHECK_MSG(st == GGUF_ERR_TRUNCATED || st == GGUF_ERR_BAD_STRING_LENGTH ||
                  st == GGUF_ERR_BAD_ARRAY_LENGTH || st == GGUF_ERR_TOO_MANY_KV ||
                  st == GGUF_ERR_TOO_MANY_TENSORS || st == GGUF_ERR_TENSOR_OUT_OF_BOUNDS,
                  "prefix %zu: %s", n, gguf_status_name(st));
        CHECK(f == NULL);
        n_fail += st != GGUF_OK;
        gguf_close(f);
        free(copy);
    }
    CHECK(n_fail == bl.n);
    /* inside fixed header fields the answer is exactly TRUNCATED */
    for (size_t n = 0; n < 24; n++) expect_open(bl.p, n, GGUF_ERR_TRUNCATED, NULL);
    expect_open(bl.p, bl.n, GGUF_OK, NULL);
    free(bl.p);
}

static void test_bad_magic(void) {
    blob bl = finish(small_model());
    bl.p[0] = 'g';
    expect_blob(bl, GGUF_ERR_BAD_MAGIC, "magic");
}

static void test_bad_versions(void) {
    static const struct { uint32_t v; gguf_status want; } cases[] = {
        {1, GGUF_ERR_VERSION_1},         {0, GGUF_ERR_BAD_VERSION},
        {4, GGUF_ERR_BAD_VERSION},       {0xffffffffu, GGUF_ERR_BAD_VERSION},
        {0x03000000u, GGUF_ERR_BIG_ENDIAN}, {0x02000000u, GGUF_ERR_BIG_ENDIAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gguf_writer *w = small_model();
        gguf_writer_set_version(w, cases[i].v);
        expect_blob(finish(w), cases[i].want, NULL);
    }
}

static void test_huge_counts(void) {
    blob bl = finish(small_model());
    uint8_t *p = bl.p;
    wr_le(p + 16, (uint64_t)1 << 40, 8); /* n_kv */
    expect_open(p, bl.n, GGUF_ERR_TOO_MANY_KV, "n_kv");
    wr_le(p + 16, UINT64_MAX, 8);
    expect_open(p, bl.n, GGUF_ERR_TOO_MANY_KV, NULL);
    wr_le(p + 16, bl.n / 14 + 1, 8); /* under the hard cap, over what the file can hold */
    expect_open(p, bl.n, GGUF_ERR_TOO_MANY_KV, NULL);
    wr_le(p + 16, 4, 8);
    wr_le(p + 8, UINT64_MAX, 8); /* n_tensors */
    expect_open(p, bl.n, GGUF_ERR_TOO_MANY_TENSORS, "n_tensors");
    wr_le(p + 8, 1000, 8);
    expect_open(p, bl.n, GGUF_ERR_TOO_MANY_TENSORS, NULL);
    free(bl.p);
}

static void test_bad_keys(void) {
    gguf_writer *w = small_model();
    uint8_t raw[8 + 3 + 4 + 1];
    size_t at;
    blob bl;

    gguf_writer_add_u8(w, "", 1);
    expect_blob(finish(w), GGUF_ERR_BAD_KEY, "empty");

    w = small_model();
    wr_le(raw, 3, 8);
    memcpy(raw + 8, "a\0b", 3);
    wr_le(raw + 11, GGUF_VALUE_UINT8, 4);
    raw[15] = 0;
    gguf_writer_add_kv_raw(w, raw, sizeof raw);
    expect_blob(finish(w), GGUF_ERR_BAD_KEY, "NUL");

    {
        char *longkey = malloc(70001);
        memset(longkey, 'k', 70000);
        longkey[70000] = '\0';
        w = gguf_writer_create();
        gguf_writer_add_u8(w, longkey, 1);
        free(longkey);
        expect_blob(finish(w), GGUF_ERR_BAD_KEY, "limit");
    }

    /* key length beyond the end of the file */
    bl = finish(small_model());
    at = after_name(&bl, "tiny.block_count") - strlen("tiny.block_count") - 8;
    wr_le(bl.p + at, (uint64_t)1 << 62, 8);
    expect_blob(bl, GGUF_ERR_BAD_STRING_LENGTH, "key 1");
}

static void test_duplicate_key(void) {
    gguf_writer *w = small_model();
    gguf_writer_add_u32(w, "tiny.block_count", 3);
    expect_blob(finish(w), GGUF_ERR_DUPLICATE_KEY, "tiny.block_count");
}

static void test_bad_value_types(void) {
    gguf_writer *w = small_model();
    uint8_t raw[8 + 1 + 4 + 4 + 8];
    blob bl;

    /* scalar type 13 */
    bl = finish(small_model());
    wr_le(bl.p + after_name(&bl, "tiny.block_count"), 13, 4);
    expect_blob(bl, GGUF_ERR_BAD_VALUE_TYPE, "tiny.block_count");

    /* array element type 99 */
    wr_le(raw, 1, 8);
    raw[8] = 'x';
    wr_le(raw + 9, GGUF_VALUE_ARRAY, 4);
    wr_le(raw + 13, 99, 4);
    wr_le(raw + 17, 0, 8);
    gguf_writer_add_kv_raw(w, raw, sizeof raw);
    expect_blob(finish(w), GGUF_ERR_BAD_VALUE_TYPE, "element type");

    /* array of arrays */
    w = small_model();
    wr_le(raw + 13, GGUF_VALUE_ARRAY, 4);
    gguf_writer_add_kv_raw(w, raw, sizeof raw);
    expect_blob(finish(w), GGUF_ERR_NESTED_ARRAY, "'x'");
}

static void test_bad_string_lengths(void) {
    blob bl = finish(small_model());
    size_t at = after_name(&bl, "general.architecture") + 4;
    wr_le(bl.p + at, (uint64_t)1 << 62, 8);
    expect_blob(bl, GGUF_ERR_BAD_STRING_LENGTH, "general.architecture");

    /* second element of the string array ("a", length 1) */
    bl = finish(small_model());
    at = find(&bl, "\x01\0\0\0\0\0\0\0a", 9);
    wr_le(bl.p + at, UINT64_MAX, 8);
    expect_blob(bl, GGUF_ERR_BAD_STRING_LENGTH, "element 1");
}

static void test_bad_array_lengths(void) {
    static const uint32_t v[2] = {1, 2};
    gguf_writer *w = small_model();
    blob bl;
    size_t at;

    gguf_writer_add_arr(w, "vals", GGUF_VALUE_UINT32, v, 2);
    bl = finish(w);
    at = after_name(&bl, "vals") + 4 + 4;
    wr_le(bl.p + at, (uint64_t)1 << 62, 8); /* count * 4 overflows 64 bits */
    expect_open(bl.p, bl.n, GGUF_ERR_BAD_ARRAY_LENGTH, "vals");
    wr_le(bl.p + at, bl.n, 8); /* fits in 64 bits, not in the file */
    expect_blob(bl, GGUF_ERR_BAD_ARRAY_LENGTH, "vals");

    bl = finish(small_model());
    at = after_name(&bl, "tokenizer.ggml.tokens") + 4 + 4;
    wr_le(bl.p + at, UINT64_MAX / 2, 8);
    expect_blob(bl, GGUF_ERR_BAD_ARRAY_LENGTH, "strings");
}

static void test_bad_bool(void) {
    static const uint8_t flags[3] = {0, 1, 2};
    gguf_writer *w = small_model();
    gguf_writer_add_bool(w, "flag", 2);
    expect_blob(finish(w), GGUF_ERR_BAD_BOOL, "flag");
    w = small_model();
    gguf_writer_add_arr(w, "flags", GGUF_VALUE_BOOL, flags, 3);
    expect_blob(finish(w), GGUF_ERR_BAD_BOOL, "element 2");
}

static void test_bad_alignment(void) {
    gguf_writer *w = small_model();
    gguf_writer_add_u32(w, "general.alignment", 48);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, "power of two");
    w = small_model();
    gguf_writer_add_u32(w, "general.alignment", 0);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, NULL);
    w = small_model();
    gguf_writer_add_i32(w, "general.alignment", -32);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, NULL);
    w = small_model();
    gguf_writer_add_u64(w, "general.alignment", (uint64_t)1 << 32);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, NULL);
    w = small_model();
    gguf_writer_add_str(w, "general.alignment", "32", 2);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, "string");
    w = small_model();
    gguf_writer_add_f32(w, "general.alignment", 32.0f);
    expect_blob(finish(w), GGUF_ERR_BAD_ALIGNMENT, "float32");
}

static void test_bad_tensor_names(void) {
    uint64_t d[1] = {1};
    char longname[300];
    gguf_writer *w = small_model();
    blob bl;

    gguf_writer_add_tensor(w, "", GGUF_GGML_F32, 1, d, "abcd", 4);
    expect_blob(finish(w), GGUF_ERR_BAD_TENSOR_NAME, "empty");

    memset(longname, 'n', 299);
    longname[299] = '\0';
    w = small_model();
    gguf_writer_add_tensor(w, longname, GGUF_GGML_F32, 1, d, "abcd", 4);
    expect_blob(finish(w), GGUF_ERR_BAD_TENSOR_NAME, "limit");

    bl = finish(small_model());
    bl.p[after_name(&bl, "c.weight") - 3] = '\0'; /* "c.wei\0ht" */
    expect_blob(bl, GGUF_ERR_BAD_TENSOR_NAME, "NUL");

    bl = finish(small_model());
    wr_le(bl.p + after_name(&bl, "c.weight") - 8 - 8, UINT64_MAX, 8);
    expect_blob(bl, GGUF_ERR_BAD_STRING_LENGTH, "tensor name 1");
}

static void test_duplicate_tensor(void) {
    uint64_t d[1] = {8};
    gguf_writer *w = small_model();
    gguf_writer_add_tensor(w, "a.weight", GGUF_GGML_F32, 1, d, NULL, 32);
    expect_blob(finish(w), GGUF_ERR_DUPLICATE_TENSOR, "a.weight");
}

static void test_bad_n_dims(void) {
    uint64_t d[5] = {1, 1, 1, 1, 1};
    gguf_writer *w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_F32, 0, d, NULL, 4);
    expect_blob(finish(w), GGUF_ERR_BAD_N_DIMS, "'x'");
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_F32, 5, d, NULL, 4);
    expect_blob(finish(w), GGUF_ERR_BAD_N_DIMS, "n_dims = 5");
    /* n_dims huge: must not try to read 4e9 dims */
    {
        blob bl = finish(small_model());
        wr_le(bl.p + after_name(&bl, "a.weight"), 0xffffffffu, 4);
        expect_blob(bl, GGUF_ERR_BAD_N_DIMS, NULL);
    }
}

static void test_bad_dims(void) {
    uint64_t zero[2] = {8, 0};
    uint64_t wide[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    uint64_t top[1] = {(uint64_t)1 << 63};
    uint64_t bytes_over[1] = {(uint64_t)1 << 62}; /* 2^62 elements ok, 2^64 bytes of F32 not */
    uint64_t mid[3] = {(uint64_t)1 << 31, (uint64_t)1 << 31, 4}; /* product 2^64 at dim 2 */
    gguf_writer *w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_F32, 2, zero, NULL, 0);
    expect_blob(finish(w), GGUF_ERR_BAD_DIM, "dimension 1 is zero");
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_F32, 2, wide, NULL, 0);
    expect_blob(finish(w), GGUF_ERR_DIMS_OVERFLOW, "element count");
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_I8, 1, top, NULL, 0);
    expect_blob(finish(w), GGUF_ERR_DIMS_OVERFLOW, NULL);
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_F32, 1, bytes_over, NULL, 0);
    expect_blob(finish(w), GGUF_ERR_DIMS_OVERFLOW, "byte size");
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_I8, 3, mid, NULL, 0);
    expect_blob(finish(w), GGUF_ERR_DIMS_OVERFLOW, "dimension 2");
}

static void test_bad_tensor_type(void) {
    static const uint32_t bad[] = {4, 5, 31, 36, 1000, 0xffffffffu};
    uint64_t d[1] = {32};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gguf_writer *w = small_model();
        gguf_writer_add_tensor(w, "x", bad[i], 1, d, NULL, 32);
        expect_blob(finish(w), GGUF_ERR_BAD_TENSOR_TYPE, "unknown ggml type");
    }
}

static void test_bad_row_size(void) {
    uint64_t d[2] = {100, 2};
    gguf_writer *w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_Q4_K, 2, d, NULL, 144);
    expect_blob(finish(w), GGUF_ERR_BAD_ROW_SIZE, "Q4_K");
    d[0] = 48;
    w = small_model();
    gguf_writer_add_tensor(w, "x", GGUF_GGML_Q8_0, 2, d, NULL, 144);
    expect_blob(finish(w), GGUF_ERR_BAD_ROW_SIZE, "block size 32");
}

/* Offset field of the tensor whose descriptor starts (after its name) at `at`. */
static size_t offset_field(const blob *b, size_t at) {
    uint32_t n_dims = (uint32_t)b->p[at] | (uint32_t)b->p[at + 1] << 8;
    return at + 4 + 8 * n_dims + 4;
}

static void test_misaligned_offset(void) {
    blob bl = finish(small_model());
    wr_le(bl.p + offset_field(&bl, after_name(&bl, "c.weight")), 64 + 4, 8);
    expect_blob(bl, GGUF_ERR_MISALIGNED_OFFSET, "c.weight");
}

static void test_tensor_out_of_bounds(void) {
    uint64_t d[1] = {1024};
    gguf_writer *w;
    blob bl = finish(small_model());
    size_t at = offset_field(&bl, after_name(&bl, "c.weight"));

    wr_le(bl.p + at, 1024, 8);
    expect_open(bl.p, bl.n, GGUF_ERR_TENSOR_OUT_OF_BOUNDS, "c.weight");
    wr_le(bl.p + at, (uint64_t)1 << 63, 8); /* offset + size would wrap if added naively */
    expect_open(bl.p, bl.n, GGUF_ERR_TENSOR_OUT_OF_BOUNDS, NULL);
    wr_le(bl.p + at, UINT64_MAX - 31, 8);
    expect_blob(bl, GGUF_ERR_TENSOR_OUT_OF_BOUNDS, NULL);

    /* dims say 4 KiB, only 32 bytes are there */
    w = small_model();
    gguf_writer_add_tensor(w, "short", GGUF_GGML_F32, 1, d, NULL, 32);
    expect_blob(finish(w), GGUF_ERR_TENSOR_OUT_OF_BOUNDS, "short");
}

static void test_tensor_overlap(void) {
    blob bl = finish(small_model());
    wr_le(bl.p + offset_field(&bl, after_name(&bl, "c.weight")), 32, 8); /* a is [0, 64) */
    expect_blob(bl, GGUF_ERR_TENSOR_OVERLAP, "overlap");
}

static void test_error_buffer(void) {
    blob bl = finish(small_model());
    gguf_file *f = NULL;
    char small[8];
    bl.p[0] = 'X';
    memset(small, 'z', sizeof small);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, small, sizeof small) == GGUF_ERR_BAD_MAGIC);
    CHECK(small[7] == '\0' && strlen(small) == 7);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, NULL, 100) == GGUF_ERR_BAD_MAGIC);
    memset(small, 'z', sizeof small);
    CHECK(gguf_open_memory(bl.p, bl.n, &f, small, 0) == GGUF_ERR_BAD_MAGIC);
    CHECK(small[0] == 'z');
    free(bl.p);

    /* control characters from the file do not reach the message */
    {
        gguf_writer *w = small_model();
        gguf_writer_add_u32(w, "evil\x1b[2J", 1);
        gguf_writer_add_u32(w, "evil\x1b[2J", 2);
        bl = finish(w);
        char err[128];
        CHECK(gguf_open_memory(bl.p, bl.n, &f, err, sizeof err) == GGUF_ERR_DUPLICATE_KEY);
        CHECK(strchr(err, '\x1b') == NULL && strstr(err, "evil?[2J") != NULL);
        free(bl.p);
    }
}

/* ======================================================================================
 * the real model
 * ====================================================================================== */

static void test_real_model(void) {
    const char *path = getenv("TQ_MODEL");
    struct stat st;
    gguf_file *f = NULL;
    char err[256];
    const char *s;
    size_t len;
    uint32_t u32;
    float eps;
    int b;
    gguf_array a;
    int n_f32 = 0, n_q5_0 = 0, n_q4_k = 0, n_q8_0 = 0, n_q6_k = 0;

    if (!path || !*path) path = DEFAULT_MODEL;
    if (stat(path, &st) != 0) {
        SKIP_TEST("no model at %s (set TQ_MODEL or run scripts/get-model.sh)", path);
    }
    CHECK_MSG(gguf_open(path, &f, err, sizeof err) == GGUF_OK, "%s: %s", path, err);
    if (!f) return;
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_alignment(f) == 32);
    CHECK(gguf_file_size(f) == (uint64_t)st.st_size);
    CHECK(gguf_get_str(f, "general.architecture", &s, &len) == GGUF_OK && len == 6 &&
          memcmp(s, "gemma3", 6) == 0);
    CHECK(gguf_n_kv(f) == 33);
    CHECK(gguf_n_tensors(f) == 236);
    CHECK(gguf_data_offset(f) == 6525120);
    CHECK(gguf_get_u32(f, "gemma3.block_count", &u32) == GGUF_OK && u32 == 18);
    CHECK(gguf_get_u32(f, "gemma3.embedding_length", &u32) == GGUF_OK && u32 == 640);
    CHECK(gguf_get_u32(f, "gemma3.attention.head_count_kv", &u32) == GGUF_OK && u32 == 1);
    CHECK(gguf_get_u32(f, "gemma3.attention.key_length", &u32) == GGUF_OK && u32 == 256);
    CHECK(gguf_get_f32(f, "gemma3.attention.layer_norm_rms_epsilon", &eps) == GGUF_OK);
    CHECK_NEAR(eps, 1e-6, 1e-12);
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == GGUF_OK && b == 1);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &a) == GGUF_OK &&
          a.type == GGUF_VALUE_STRING && a.count == 262144);
    CHECK(gguf_array_get_str(&a, 2, &s, &len) == GGUF_OK && len == 5 && memcmp(s, "<bos>", 5) == 0);
    CHECK(gguf_array_get_str(&a, 262143, &s, &len) == GGUF_OK && len == 12 &&
          memcmp(s, "<unused6241>", 12) == 0);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &a) == GGUF_OK &&
          a.type == GGUF_VALUE_FLOAT32 && a.count == 262144);
    CHECK(gguf_array_get_f32(&a, 0, &eps) == GGUF_OK && eps == -1000.0f);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &a) == GGUF_OK &&
          a.type == GGUF_VALUE_INT32 && a.count == 262144);
    {
        const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
        CHECK(t != NULL);
        if (t) {
            CHECK(t->type == GGUF_GGML_Q8_0 && t->n_dims == 2);
            CHECK(t->dims[0] == 640 && t->dims[1] == 262144);
            CHECK(t->n_bytes == 178257920);
        }
        CHECK(gguf_find_tensor(f, "blk.17.post_ffw_norm.weight") != NULL);
        CHECK(gguf_find_tensor(f, "blk.18.post_ffw_norm.weight") == NULL);
    }
    {
        const uint8_t *data0 = NULL;
        uint64_t data_size = gguf_file_size(f) - gguf_data_offset(f);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            const uint8_t *p = t->data;
            uint64_t row;
            if (!data0) data0 = p - t->offset;
            CHECK_MSG(t->offset + t->n_bytes <= data_size, "%s", t->name);
            CHECK(p == data0 + t->offset);
            CHECK(gguf_ggml_row_size(t->type, t->dims[0], &row) == GGUF_OK);
            CHECK(row * (t->n_elements / t->dims[0]) == t->n_bytes);
            CHECK(gguf_find_tensor(f, t->name) == t);
            n_f32 += t->type == GGUF_GGML_F32;
            n_q5_0 += t->type == GGUF_GGML_Q5_0;
            n_q4_k += t->type == GGUF_GGML_Q4_K;
            n_q8_0 += t->type == GGUF_GGML_Q8_0;
            n_q6_k += t->type == GGUF_GGML_Q6_K;
        }
        /* the last tensor ends exactly at the end of the file (its size is aligned) */
        {
            const gguf_tensor *last = gguf_tensor_at(f, gguf_n_tensors(f) - 1);
            CHECK(last->offset + last->n_bytes == data_size);
        }
    }
    CHECK(n_f32 == 109 && n_q5_0 == 81 && n_q4_k == 27 && n_q8_0 == 10 && n_q6_k == 9);
    gguf_close(f);
}

/* ======================================================================================
 * fuzz seeds
 * ====================================================================================== */

static int write_seeds(const char *dir) {
    char path[4096];
    gguf_writer *w;
    uint64_t d[2] = {32, 2};
    static const int32_t ints[4] = {1, -2, 3, -4};
    static const uint8_t q8[2 * 34] = {0};
    const char *toks[3] = {"<s>", "</s>", "hello"};
    int ok = 1;

    w = small_model();
    snprintf(path, sizeof path, "%s/small_f32.gguf", dir);
    ok &= gguf_writer_to_file(w, path) == GGUF_OK;
    gguf_writer_free(w);

    w = gguf_writer_create();
    gguf_writer_set_version(w, 2);
    gguf_writer_set_alignment(w, 64);
    gguf_writer_add_u8(w, "u8", 1);
    gguf_writer_add_i16(w, "i16", -2);
    gguf_writer_add_u64(w, "u64", 3);
    gguf_writer_add_f64(w, "f64", 0.5);
    gguf_writer_add_bool(w, "b", 1);
    gguf_writer_add_arr(w, "ints", GGUF_VALUE_INT32, ints, 4);
    gguf_writer_add_arr_str(w, "toks", toks, NULL, 3);
    gguf_writer_add_tensor(w, "q8", GGUF_GGML_Q8_0, 2, d, q8, sizeof q8);
    snprintf(path, sizeof path, "%s/v2_types_q8.gguf", dir);
    ok &= gguf_writer_to_file(w, path) == GGUF_OK;
    gguf_writer_free(w);

    w = gguf_writer_create();
    d[0] = 256;
    d[1] = 1;
    gguf_writer_add_str(w, "general.architecture", "gemma3", 6);
    gguf_writer_add_tensor(w, "k", GGUF_GGML_Q4_K, 2, d, NULL, 144);
    gguf_writer_add_tensor(w, "s", GGUF_GGML_Q6_K, 1, d, NULL, 210);
    snprintf(path, sizeof path, "%s/kquants.gguf", dir);
    ok &= gguf_writer_to_file(w, path) == GGUF_OK;
    gguf_writer_free(w);
    if (!ok) fprintf(stderr, "could not write seeds into %s\n", dir);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);

    RUN_TEST(test_status_names);
    RUN_TEST(test_type_table);
    RUN_TEST(test_roundtrip_metadata);
    RUN_TEST(test_getter_rules);
    RUN_TEST(test_roundtrip_tensors);
    RUN_TEST(test_version2_and_alignment);
    RUN_TEST(test_empty_and_minimal);
    RUN_TEST(test_open_file);
    RUN_TEST(test_open_not_regular);
    RUN_TEST(test_many_names);
    RUN_TEST(test_invalid_args);
    RUN_TEST(test_truncated_everywhere);
    RUN_TEST(test_bad_magic);
    RUN_TEST(test_bad_versions);
    RUN_TEST(test_huge_counts);
    RUN_TEST(test_bad_keys);
    RUN_TEST(test_duplicate_key);
    RUN_TEST(test_bad_value_types);
    RUN_TEST(test_bad_string_lengths);
    RUN_TEST(test_bad_array_lengths);
    RUN_TEST(test_bad_bool);
    RUN_TEST(test_bad_alignment);
    RUN_TEST(test_bad_tensor_names);
    RUN_TEST(test_duplicate_tensor);
    RUN_TEST(test_bad_n_dims);
    RUN_TEST(test_bad_dims);
    RUN_TEST(test_bad_tensor_type);
    RUN_TEST(test_bad_row_size);
    RUN_TEST(test_misaligned_offset);
    RUN_TEST(test_tensor_out_of_bounds);
    RUN_TEST(test_tensor_overlap);
    RUN_TEST(test_error_buffer);
    RUN_TEST(test_real_model);
    return test_report();
}

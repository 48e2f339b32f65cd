/* libFuzzer target for the GGUF reader.
 *
 * Opens the input with gguf_open_memory() and, if it is accepted, walks everything the
 * reader promises is in bounds: every key through every getter, every array element through
 * every element getter, every tensor's first and last data byte. The input buffer is
 * exactly `size` bytes, so ASan reports any read past it.
 *
 * Build and run (seeds: fuzz/corpus/gguf/, or `test_gguf --write-seeds DIR`):
 *   clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *       -Iengine fuzz/fuzz_gguf.c \
 *       engine/gguf*.c engine/regular_file.c -o /tmp/fuzz_gguf
 *   rm -rf /tmp/gguf-corpus && cp -r fuzz/corpus/gguf /tmp/gguf-corpus
 *   /tmp/fuzz_gguf -max_total_time=60 /tmp/gguf-corpus */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads from being optimized away */

static void touch(const void *p, size_t n) {
    if (n == 0) return;
    sink += ((const uint8_t *)p)[0];
    sink += ((const uint8_t *)p)[n - 1];
}

/* Sums what the integer, float and bool getters accept: get is gguf_get (arguments f, key)
 * or gguf_array_get (arguments a, i). */
#define SUM_GETTERS(get, ...)                                                                 \
    do {                                                                                      \
        uint32_t u32;                                                                         \
        int32_t i32;                                                                          \
        uint64_t u64;                                                                         \
        int64_t i64;                                                                          \
        float f32;                                                                            \
        double f64;                                                                           \
        int b;                                                                                \
        if (get##_u32(__VA_ARGS__, &u32) == GGUF_OK) sink += u32;                             \
        if (get##_i32(__VA_ARGS__, &i32) == GGUF_OK) sink += (uint32_t)i32;                   \
        if (get##_u64(__VA_ARGS__, &u64) == GGUF_OK) sink += u64;                             \
        if (get##_i64(__VA_ARGS__, &i64) == GGUF_OK) sink += (uint64_t)i64;                   \
        if (get##_f32(__VA_ARGS__, &f32) == GGUF_OK) sink += f32 == f32;                      \
        if (get##_f64(__VA_ARGS__, &f64) == GGUF_OK) sink += f64 == f64;                      \
        if (get##_bool(__VA_ARGS__, &b) == GGUF_OK) sink += (uint64_t)b;                      \
    } while (0)

static void walk_array(const gguf_array *a) {
    const char *s;
    size_t len;
    for (uint64_t i = 0; i <= a->count; i++) { /* one past the end must fail cleanly */
        gguf_status st = gguf_array_get_str(a, i, &s, &len);
        if (st == GGUF_OK) touch(s, len);
        if (i == a->count && st == GGUF_OK) __builtin_trap();
        SUM_GETTERS(gguf_array_get, a, i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    char err[256];
    gguf_status st = gguf_open_memory(data, size, &f, err, sizeof err);
    if (st != GGUF_OK) {
        /* a failure always names itself and leaves nothing behind */
        if (f != NULL || err[0] == '\0' || memchr(err, '\0', sizeof err) == NULL)
            __builtin_trap();
        sink += strlen(gguf_status_name(st));
        return 0;
    }
    sink += gguf_version(f) + gguf_alignment(f) + gguf_data_offset(f);

    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        const char *s;
        size_t len;
        gguf_array a;
        if (!key || gguf_find_key(f, key) != i) __builtin_trap();
        sink += strlen(key) + (uint64_t)gguf_kv_type(f, i);
        sink += strlen(gguf_value_type_name(gguf_kv_type(f, i)));
        SUM_GETTERS(gguf_get, f, key);
        if (gguf_get_str(f, key, &s, &len) == GGUF_OK) touch(s, len);
        if (gguf_get_arr(f, key, &a) == GGUF_OK) walk_array(&a);
    }

    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const gguf_type_info *ti;
        if (!t || gguf_find_tensor(f, t->name) != t) __builtin_trap();
        ti = gguf_ggml_type_info(t->type);
        if (!ti || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->n_bytes == 0 ||
            t->offset % gguf_alignment(f) != 0)
            __builtin_trap();
        sink += strlen(t->name) + strlen(ti->name);
        touch(t->data, (size_t)t->n_bytes);
    }
    gguf_close(f);
    return 0;
}

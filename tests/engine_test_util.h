/* What the engine's model tests share (after test_util.h and tiny_model.h): TSAN (1 in a
 * ThreadSanitizer build, whose tests run shorter), the real model's path, and loading a model
 * or a freshly written tiny one under CHECK. */
#ifndef TQ_TESTS_ENGINE_TEST_UTIL_H
#define TQ_TESTS_ENGINE_TEST_UTIL_H

#include <stdlib.h>

#include "../engine/context.h"
#include "../engine/model.h"

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

/* $TQ_MODEL, else the project's real model (which may be absent: the caller SKIPs). */
static inline const char *real_model_path(void) {
    return getenv("TQ_MODEL") ? getenv("TQ_MODEL") : "models/gemma3-270m-q4_k_m.gguf";
}

/* The model at path, or NULL after a failed CHECK. */
static inline model *load_model(const char *path) {
    model *m = NULL;
    char err[256];
    model_status st = model_load(path, &m, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "%s: %s: %s", path, model_status_name(st), err);
    return m;
}

/* Writes a tiny model of arch (weights from seed; Q8_0 matrices when q8) to path and loads it;
 * NULL after a failed CHECK. */
static inline model *load_tiny(tiny *t, model_arch arch, int q8, uint64_t seed, const char *path) {
    rng_state = seed;
    t->arch = arch;
    t->q8 = q8;
    CHECK(write_tiny(t, path, NULL));
    return load_model(path);
}

/* Decodes cont[0, n) one token at a time from the context's length, a logit row per step.
 * No CHECK: may run on a thread. */
static inline model_status decode_rows(model_context *x, const int32_t *cont, int n, float *rows) {
    model_status st = MODEL_OK;
    const size_t nv = (size_t)context_config(x)->n_vocab;
    for (int i = 0; st == MODEL_OK && i < n; i++)
        st = context_forward(x, cont + i, 1, context_seq_len(x), 0, rows + (size_t)i * nv);
    return st;
}

#endif

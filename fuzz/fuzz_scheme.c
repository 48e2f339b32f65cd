/*
 * libFuzzer target for the KV-cache scheme parser (tq_kv_scheme_parse, doc/kvcache.md §2).
 *
 * The input, at most MAX_TEXT bytes, is copied into an exact-size heap buffer and
 * NUL-terminated (ASan reports any read past the NUL), then parsed. Invariants:
 *   - the status is TQ_OK or TQ_ERR_SCHEME, and parsing the same text again gives the same
 *     status and the same scheme (no hidden state);
 *   - on failure the message is NUL-terminated inside the buffer, whatever its capacity (the
 *     capacity is taken from the first input byte, 1 to 256 bytes, and also a full-size one),
 *     and a full-size message begins with "bad KV cache scheme";
 *   - on success every field is in its documented range (bit widths 0 or [1, 8] per format,
 *     batch ≥ 1, counts in [0, 2^30]), the canonical text (tq_kv_scheme_format, which never
 *     needs more than 256 bytes) parses back to a scheme equal field by field, and formatting
 *     that gives the same text again.
 * Any violation aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build and run: `scripts/fuzz.sh 30` builds every fuzz/fuzz_*.c with clang
 * (-fsanitize=fuzzer,address,undefined, linked with the library as the script builds it) and
 * runs each, seeded from fuzz/corpus/<name>/ (here fuzz/corpus/scheme/: scheme strings from
 * README.md and doc/kvcache.md); by hand, after that build:
 *   cp -r fuzz/corpus/scheme /tmp/scheme-corpus
 *   build-fuzz/fuzz_scheme -max_total_time=30 -max_len=1024 /tmp/scheme-corpus
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turboquant.h"

#define MAX_TEXT 1024
#define COUNT_MAX (1 << 30)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *text, const char *detail) {
    fprintf(stderr, "fuzz_scheme: %s\n  input: \"%s\"\n  %s\n", what, text, detail ? detail : "");
    abort();
}

static int side_ok(tq_kv_format f, float bits) {
    switch (f) {
    case TQ_KV_F16:
    case TQ_KV_Q8_0:
    case TQ_KV_Q4_0:
    case TQ_KV_Q8_0R:
    case TQ_KV_Q4_0R: return bits == 0.0f;
    case TQ_KV_TURBO: return bits >= 1.0f && bits <= 8.0f;
    }
    return 0;
}

static int layer_ok(const tq_kv_layer_scheme *l) {
    return side_ok(l->key_format, l->key_bits) && side_ok(l->value_format, l->value_bits) &&
           (l->key_variant == TQ_VARIANT_MSE || l->key_variant == TQ_VARIANT_PROD) &&
           (l->norm_correction == 0 || l->norm_correction == 1) &&
           (l->key_mean >= 0 && l->key_mean <= TQ_KV_KEY_MEAN_PREDICT) && (l->key_scale == 0 || l->key_scale == 1) &&
           (l->key_split >= 0 && l->key_split <= TQ_KV_KEY_SPLIT_AUTO);
}

static int count_ok(int v) { return v >= 0 && v <= COUNT_MAX; }

static int scheme_ok(const tq_kv_scheme *s) {
    return layer_ok(&s->layer) && layer_ok(&s->edge) && count_ok(s->edge_first) &&
           count_ok(s->edge_last) && count_ok(s->raw_window) && s->batch >= 1 &&
           s->batch <= COUNT_MAX && count_ok(s->quantized_kv_start) &&
           (s->prefill_raw == 0 || s->prefill_raw == 1);
}

/* Field by field (memcmp would also compare padding). */
static int same_layer(const tq_kv_layer_scheme *a, const tq_kv_layer_scheme *b) {
    return a->key_format == b->key_format && a->value_format == b->value_format &&
           a->key_bits == b->key_bits && a->value_bits == b->value_bits &&
           a->key_variant == b->key_variant && a->norm_correction == b->norm_correction &&
           a->key_mean == b->key_mean && a->key_scale == b->key_scale &&
           a->key_split == b->key_split;
}

static int same_scheme(const tq_kv_scheme *a, const tq_kv_scheme *b) {
    return same_layer(&a->layer, &b->layer) && same_layer(&a->edge, &b->edge) &&
           a->edge_first == b->edge_first && a->edge_last == b->edge_last &&
           a->raw_window == b->raw_window && a->batch == b->batch &&
           a->quantized_kv_start == b->quantized_kv_start && a->prefill_raw == b->prefill_raw &&
           a->seed == b->seed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_TEXT) size = MAX_TEXT;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;

    tq_kv_scheme s, again;
    char err[2048];
    memset(err, 0x55, sizeof err);
    tq_status st = tq_kv_scheme_parse(text, &s, err, sizeof err);
    if (st != TQ_OK && st != TQ_ERR_SCHEME) fail("status neither TQ_OK nor TQ_ERR_SCHEME", text, NULL);

    /* A small error buffer: the message is cut, NUL-terminated, never written past. */
    size_t small_cap = size ? 1 + (size_t)data[0] % 256 : 1;
    char *small = malloc(small_cap);
    if (!small) {
        free(text);
        return 0;
    }
    memset(small, 0x55, small_cap);
    tq_status st2 = tq_kv_scheme_parse(text, &again, small, small_cap);
    if (st2 != st) fail("a second parse gave another status", text, NULL);
    if (tq_kv_scheme_parse(text, &again, NULL, 0) != st)
        fail("parsing without an error buffer gave another status", text, NULL);

    if (st != TQ_OK) {
        if (!memchr(err, 0, sizeof err)) fail("error message not NUL-terminated", text, NULL);
        if (strncmp(err, "bad KV cache scheme", 19) != 0) fail("error message", text, err);
        if (!memchr(small, 0, small_cap)) fail("cut error message not NUL-terminated", text, NULL);
        if (strncmp(small, err, strlen(small)) != 0) fail("cut error message differs", text, small);
    } else {
        if (err[0] || small[0]) fail("an error message after success", text, err);
        if (!scheme_ok(&s)) fail("a field out of range", text, NULL);
        tq_kv_scheme_parse(text, &again, NULL, 0);
        if (!same_scheme(&s, &again)) fail("a second parse gave another scheme", text, NULL);
        char canon[256], canon2[256];
        if (tq_kv_scheme_format(&s, canon, sizeof canon) != TQ_OK)
            fail("tq_kv_scheme_format failed in 256 bytes", text, NULL);
        if (tq_kv_scheme_parse(canon, &again, err, sizeof err) != TQ_OK)
            fail("the canonical text does not parse", text, err);
        if (!same_scheme(&s, &again)) fail("the canonical text parses to another scheme", text, canon);
        if (tq_kv_scheme_format(&again, canon2, sizeof canon2) != TQ_OK || strcmp(canon, canon2))
            fail("formatting the reparsed scheme gives another text", text, canon2);
    }
    free(small);
    free(text);
    return 0;
}

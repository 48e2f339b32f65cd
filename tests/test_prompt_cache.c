/* Prompt caches (engine/prompt_cache.h, doc/prompt-cache.md) and the context's save / restore
 * (engine/context_state.c). A sequence restored from a file gives bit for bit the logits of a
 * fresh prefill: the last prompt position's stored logits, the rest of a prompt prefilled after
 * the restored prefix, and the decode steps after it — f16, turbo3 (raw prefill, the default)
 * and turbo3 compressed on every call (and q4_0r / q8_0r, issue 17, on the tiny model), on the
 * tiny Gemma 3 model (tests/tiny_model.h: runs everywhere) and on the real model (SKIP when
 * absent), where the sliding-window layers keep
 * their whole history (context_set_kv_keep_history) with the same logits as when they recycle.
 * Every reason not to use a file is its own status, and the context keeps its sequence: no
 * file, not a file, not a cache, another model file, another scheme, too long for the context,
 * a corrupted byte (header, tokens, logits, cache image), a truncated file, bytes after the end. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/context.h"
#include "../engine/prompt_cache.h"

#include "test_util.h"
#include "tiny_model.h"
#include "engine_test_util.h"

static const char *const tiny_path = "/tmp/tq_test_prompt_cache_tiny.gguf";
static const char *const tiny2_path = "/tmp/tq_test_prompt_cache_tiny2.gguf";
/* Per process: two runs at once (worktrees side by side) must not remove each other's file. */
static char file[64];

static void tokens_from(int32_t *t, int n, int nv, int seed) {
    for (int i = 0; i < n; i++) t[i] = 3 + (int32_t)(((i + 1) * 7919 + seed * 104729) % (nv - 3));
}

static model_context *open_ctx(const model *m, const char *scheme_text, int max_ctx, int chunk, int keep) {
    tq_kv_scheme scheme;
    char err[256];
    CHECK(tq_kv_scheme_parse(scheme_text, &scheme, err, sizeof err) == TQ_OK);
    const context_params p = {max_ctx, chunk, 0, &scheme, 0};
    model_context *x = NULL;
    model_status st = context_create(m, &p, NULL, &x, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "%s: %s", model_status_name(st), err);
    if (x != NULL && keep) CHECK(context_set_kv_keep_history(x, 1) == MODEL_OK);
    return x;
}

/* Runs tokens[from, to) in chunks from the context's length; the last row into logits. */
static model_status run(model_context *x, const int32_t *tokens, int from, int to, int chunk, float *logits) {
    model_status st = MODEL_OK;
    for (int pos = from; st == MODEL_OK && pos < to; pos += chunk) {
        const int n = to - pos < chunk ? to - pos : chunk;
        st = context_forward(x, tokens + pos, n, pos, 0, pos + n == to ? logits : NULL);
    }
    return st;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* One scheme on m: a fresh context A prefills np tokens in chunks and decodes nd; (a) A's state
 * saved right after the prompt and restored into B gives A's last logits (stored) and, decoding
 * the same tokens, A's rows; (b) the state after the first k tokens, restored into C, then the
 * rest of the prompt prefilled, gives them too. keep: every context keeps its whole history
 * (cache files need it once the windows recycle), and A is checked against a context that
 * recycles. All bit for bit. */
static void check_scheme(const model *m, const char *scheme, int np, int k, int nd, int chunk, int max_ctx, int keep) {
    const int nv = model_get_config(m)->n_vocab;
    int32_t *prompt = malloc((size_t)np * sizeof *prompt), cont[16];
    float *want = malloc((size_t)(nd + 1) * (size_t)nv * sizeof(float));
    float *got = malloc((size_t)(nd + 1) * (size_t)nv * sizeof(float));
    CHECK(prompt && want && got && nd <= 16);
    if (!prompt || !want || !got) goto out;
    tokens_from(prompt, np, nv, 1);
    tokens_from(cont, nd, nv, 2);
    char why[256];
    /* A: the fresh run; the file of its prompt */
    model_context *a = open_ctx(m, scheme, max_ctx, chunk, keep);
    if (a == NULL) goto out;
    CHECK(run(a, prompt, 0, np, chunk, want) == MODEL_OK);
    prompt_cache_status ps = prompt_cache_save(file, a, prompt, (size_t)np, want, why, sizeof why);
    CHECK_MSG(ps == PCACHE_OK, "%s: save: %s", scheme, why);
    CHECK(decode_rows(a, cont, nd, want + nv) == MODEL_OK);
    context_free(a);
    if (keep) { /* the same without keeping the history */
        model_context *r = open_ctx(m, scheme, max_ctx, chunk, 0);
        if (r == NULL) goto out;
        CHECK(run(r, prompt, 0, np, chunk, got) == MODEL_OK && decode_rows(r, cont, nd, got + nv) == MODEL_OK);
        /* f16 attends the same keys either way; a compressed scheme fits a windowed layer's key
         * mean on the oldest positions it holds at its first compression, [0, 512) when it
         * kept them, later ones when it recycled them (doc/prompt-cache.md, "Windows") */
        const int same = memcmp(got, want, (size_t)(nd + 1) * nv * sizeof(float)) == 0;
        if (strcmp(scheme, "f16") == 0 || np + nd <= 512 + TQ_KV_WINDOW_SLACK)
            CHECK_MSG(same, "%s: keeping the history changed the logits", scheme);
        else
            printf("    %s, %d positions: keeping the history vs recycling: max |dlogit| %.3g\n", scheme, np + nd,
                   max_diff(got, want, (size_t)(nd + 1) * nv));
        context_free(r);
    }
    /* (a) restored whole: the stored logits, then the decode rows */
    model_context *b = open_ctx(m, scheme, max_ctx, chunk, keep);
    if (b == NULL) goto out;
    prompt_cache_tokens t;
    ps = prompt_cache_load(file, b, &t, why, sizeof why);
    CHECK_MSG(ps == PCACHE_OK, "%s: load: %s", scheme, why);
    if (ps == PCACHE_OK) {
        CHECK(t.n_tokens == (size_t)np && memcmp(t.tokens, prompt, (size_t)np * sizeof *prompt) == 0);
        CHECK(context_seq_len(b) == np && t.logits != NULL);
        CHECK_MSG(t.logits && memcmp(t.logits, want, (size_t)nv * sizeof(float)) == 0, "%s: stored logits", scheme);
        CHECK(decode_rows(b, cont, nd, got + nv) == MODEL_OK);
        CHECK_MSG(memcmp(got + nv, want + nv, (size_t)nd * nv * sizeof(float)) == 0,
                  "%s: decode after a restore differs from the fresh run", scheme);
    }
    prompt_cache_tokens_free(&t);
    context_free(b);
    /* (b) the first k tokens saved (no logits), restored, the rest prefilled */
    model_context *c = open_ctx(m, scheme, max_ctx, chunk, keep);
    if (c == NULL) goto out;
    CHECK(run(c, prompt, 0, k, chunk, NULL) == MODEL_OK);
    ps = prompt_cache_save(file, c, prompt, (size_t)k, NULL, why, sizeof why);
    CHECK_MSG(ps == PCACHE_OK, "%s: save %d: %s", scheme, k, why);
    context_truncate(c, 0);
    ps = prompt_cache_load(file, c, &t, why, sizeof why);
    CHECK_MSG(ps == PCACHE_OK && t.logits == NULL && t.n_tokens == (size_t)k, "%s: load %d: %s", scheme, k, why);
    prompt_cache_tokens_free(&t);
    CHECK(run(c, prompt, k, np, chunk, got) == MODEL_OK && decode_rows(c, cont, nd, got + nv) == MODEL_OK);
    CHECK_MSG(memcmp(got, want, (size_t)(nd + 1) * nv * sizeof(float)) == 0,
              "%s: restored %d + prefilled %d differs from a fresh prefill", scheme, k, np - k);
    /* (c) k2 not at one of the fresh run's chunk boundaries: the attention's key splits
     * follow the calls' lengths, so rounding differs; the next token does not */
    const int k2 = k - chunk / 2 > 0 ? k - chunk / 2 : 1;
    context_truncate(c, 0);
    CHECK(run(c, prompt, 0, k2, chunk, NULL) == MODEL_OK);
    CHECK(run(c, prompt, k2, np, chunk, got) == MODEL_OK);
    CHECK_MSG(argmax(got, nv) == argmax(want, nv), "%s: restored %d: another next token", scheme, k2);
    printf("    %s: %d positions restored + %d prefilled vs fresh: max |dlogit| %.3g (chunks of %d)\n", scheme, k2,
           np - k2, max_diff(got, want, (size_t)nv), chunk);
    context_free(c);
out:
    remove(file);
    free(prompt);
    free(want);
    free(got);
}

static const char *const schemes[4] = {"f16", "turbo3", "turbo3:prefill_raw=0:batch=8",
                                       "k=q4_0r:v=q8_0r:prefill_raw=0:batch=8"};

static void test_tiny_restore(void) {
    static tiny t;
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 1, 901, tiny_path);
    if (m == NULL) return;
    for (int s = 0; s < 4; s++) {
        check_scheme(m, schemes[s], 40, 16, 4, 8, CTX, 0);
        check_scheme(m, schemes[s], 40, 24, 4, 8, CTX, 1);
    }
    model_free(m);
    remove(tiny_path);
}

/* Writes bytes to path (replacing it). */
static void write_bytes(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(d, 1, n, f) == n);
    if (f) fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(*n);
    if (d && fread(d, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return d;
}

/* Loads path into x expecting st; x keeps its len positions. */
static void expect_refused(model_context *x, const char *path, prompt_cache_status want, const char *what) {
    prompt_cache_tokens t;
    char why[256] = "";
    const int len = context_seq_len(x);
    prompt_cache_status st = prompt_cache_load(path, x, &t, why, sizeof why);
    CHECK_MSG(st == want, "%s: got %s (%s), want %s", what, prompt_cache_status_name(st), why,
              prompt_cache_status_name(want));
    CHECK_MSG(t.tokens == NULL && t.n_tokens == 0 && context_seq_len(x) == len, "%s: state changed", what);
    CHECK_MSG(why[0] != 0 && strchr(why, '\n') == NULL, "%s: want one line, got '%s'", what, why);
    printf("    %-28s %s: %s\n", what, prompt_cache_status_name(st), why);
}

/* Every reason not to use a file. */
static void test_mismatches(void) {
    static tiny t, t2;
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 1, 902, tiny_path);
    model *m2 = load_tiny(&t2, MODEL_ARCH_GEMMA3, 1, 903, tiny2_path); /* same shapes, other weights */
    if (m == NULL || m2 == NULL) goto out;
    const int nv = model_get_config(m)->n_vocab, np = 20;
    int32_t prompt[20];
    tokens_from(prompt, np, nv, 5);
    float *logits = malloc((size_t)nv * sizeof *logits);
    model_context *x = open_ctx(m, "turbo3", CTX, 8, 0), *y = open_ctx(m, "f16", CTX, 8, 0);
    model_context *z = open_ctx(m2, "turbo3", CTX, 8, 0), *s = open_ctx(m, "turbo3", 16, 8, 0);
    model_context *w = open_ctx(m, "turbo3:batch=32", CTX, 8, 0);
    if (!logits || !x || !y || !z || !s || !w) goto free_all;
    CHECK(run(x, prompt, 0, np, 8, logits) == MODEL_OK);
    char why[256];
    CHECK(prompt_cache_save(file, x, prompt, np, logits, why, sizeof why) == PCACHE_OK);
    CHECK(run(y, prompt, 0, 5, 8, NULL) == MODEL_OK); /* y holds 5 positions: kept on refusal */
    expect_refused(y, "/tmp/tq_no_such_prompt_cache", PCACHE_ERR_ABSENT, "no file");
    expect_refused(y, "/tmp", PCACHE_ERR_IO, "a folder");
    expect_refused(y, tiny_path, PCACHE_ERR_NOT_CACHE, "a GGUF file");
    expect_refused(z, file, PCACHE_ERR_OTHER_MODEL, "another model file");
    expect_refused(y, file, PCACHE_ERR_OTHER_SCHEME, "f16 context, turbo3 file");
    expect_refused(w, file, PCACHE_ERR_OTHER_SCHEME, "turbo3:batch=32 context");
    expect_refused(s, file, PCACHE_ERR_CONTEXT, "max_ctx 16 < 20 tokens");
    size_t n = 0;
    uint8_t *d = read_bytes(file, &n);
    CHECK(d != NULL && n > 200);
    if (d == NULL) goto free_all;
    /* prompt_cache_peek: the front (scheme, tokens) checked, not the image; the model by its
     * fingerprint */
    prompt_cache_fingerprint fp, fp2;
    prompt_cache_fingerprint_of(m, &fp);
    prompt_cache_fingerprint_of(m2, &fp2);
    prompt_cache_entry pe;
    CHECK(prompt_cache_peek(file, &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_OK);
    char canon[256];
    CHECK(tq_kv_scheme_format(context_get_params(x)->kv_scheme, canon, sizeof canon) == TQ_OK);
    CHECK(pe.n_tokens == (size_t)np && pe.file_bytes == n && strcmp(pe.scheme, canon) == 0 &&
          memcmp(pe.tokens, prompt, sizeof prompt) == 0);
    prompt_cache_entry_free(&pe);
    CHECK(prompt_cache_peek(file, &fp2, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_OTHER_MODEL && pe.tokens == NULL);
    CHECK(prompt_cache_peek(file, &fp, (size_t)nv + 1, &pe, why, sizeof why) == PCACHE_ERR_OTHER_MODEL);
    CHECK(prompt_cache_peek(tiny_path, &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_NOT_CACHE);
    CHECK(prompt_cache_peek("/tmp", &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_IO);
    CHECK(prompt_cache_peek("/tmp/tq_no_such_prompt_cache", &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_ABSENT);
    const char *bad = "/tmp/tq_test_prompt_cache_bad.tqpc";
    d[96 + 6 + 8] ^= 0x10; /* a token: the front's checksum */
    write_bytes(bad, d, n);
    CHECK(prompt_cache_peek(bad, &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_CORRUPT);
    d[96 + 6 + 8] ^= 0x10;
    d[n - 1] ^= 0x10; /* the image: only a load sees it */
    write_bytes(bad, d, n);
    CHECK(prompt_cache_peek(bad, &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_OK);
    prompt_cache_entry_free(&pe);
    d[n - 1] ^= 0x10;
    write_bytes(bad, d, n / 2);
    CHECK(prompt_cache_peek(bad, &fp, (size_t)nv, &pe, why, sizeof why) == PCACHE_ERR_TRUNCATED);
    /* a corrupted byte: header field, scheme text, token, logits, cache image (front, middle, last) */
    const size_t at[] = {20, 100, 96 + 6 + 8, 96 + 6 + 80 + 100, n - 2000, n / 2 + 7000, n - 1};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        if (at[i] >= n) continue;
        d[at[i]] ^= 0x10;
        write_bytes(bad, d, n);
        char what[64];
        snprintf(what, sizeof what, "byte %zu of %zu flipped", at[i], n);
        expect_refused(x, bad, PCACHE_ERR_CORRUPT, what);
        d[at[i]] ^= 0x10;
    }
    write_bytes(bad, d, n);
    prompt_cache_tokens tk;
    CHECK(prompt_cache_load(bad, y, &tk, why, sizeof why) == PCACHE_ERR_OTHER_SCHEME); /* restored bytes */
    const size_t cut[] = {n - 1, n / 2, 96, 95, 8, 3};
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        write_bytes(bad, d, cut[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cut[i]);
        expect_refused(x, bad, cut[i] < 8 ? PCACHE_ERR_NOT_CACHE : PCACHE_ERR_TRUNCATED, what);
    }
    uint8_t *longer = malloc(n + 3);
    if (longer) {
        memcpy(longer, d, n);
        memset(longer + n, 0, 3);
        write_bytes(bad, longer, n + 3);
        expect_refused(x, bad, PCACHE_ERR_CORRUPT, "3 bytes after the end");
        d[8] = 2; /* version 2 */
        write_bytes(bad, d, n);
        expect_refused(x, bad, PCACHE_ERR_VERSION, "version 2");
    }
    free(longer);
    free(d);
    remove(bad);
    /* saving: bad arguments, a folder that does not exist */
    CHECK(prompt_cache_save(file, x, prompt, np - 1, NULL, why, sizeof why) == PCACHE_ERR_ARG);
    CHECK(prompt_cache_save("/tmp/no/such/dir/f", x, prompt, np, NULL, why, sizeof why) == PCACHE_ERR_IO);
    int32_t badtok[20];
    memcpy(badtok, prompt, sizeof badtok);
    badtok[3] = nv;
    CHECK(prompt_cache_save(file, x, badtok, np, NULL, why, sizeof why) == PCACHE_ERR_ARG);
free_all:
    context_free(x);
    context_free(y);
    context_free(z);
    context_free(s);
    context_free(w);
    free(logits);
out:
    model_free(m);
    model_free(m2);
    remove(file);
    remove(tiny_path);
    remove(tiny2_path);
}

/* context_kv_save / _load (files) and the memory forms: what goes in must fit the context. */
static void test_context_state(void) {
    static tiny t;
    model *m = load_tiny(&t, MODEL_ARCH_GEMMA3, 0, 904, tiny_path);
    if (m == NULL) return;
    const char *kvf = "/tmp/tq_test_prompt_cache.tqkv";
    int32_t prompt[12];
    tokens_from(prompt, 12, model_get_config(m)->n_vocab, 7);
    model_context *x = open_ctx(m, "turbo3", CTX, 8, 0), *y = open_ctx(m, "turbo3", CTX, 8, 0);
    model_context *f = open_ctx(m, "f16", CTX, 8, 0), *s = open_ctx(m, "turbo3", 8, 8, 0);
    if (!x || !y || !f || !s) goto out;
    CHECK(run(x, prompt, 0, 12, 8, NULL) == MODEL_OK && run(y, prompt, 0, 3, 8, NULL) == MODEL_OK);
    CHECK(run(f, prompt, 0, 3, 8, NULL) == MODEL_OK && run(s, prompt, 0, 3, 8, NULL) == MODEL_OK);
    CHECK(context_kv_save(x, kvf) == MODEL_OK);
    CHECK(context_kv_load(f, kvf) == MODEL_ERR_KV_SCHEME && context_seq_len(f) == 3); /* another scheme */
    CHECK(context_kv_load(s, kvf) == MODEL_ERR_CONTEXT && context_seq_len(s) == 3);   /* 12 > max_ctx 8 */
    CHECK(context_kv_load(y, "/tmp/tq_no_such_cache_file") == MODEL_ERR_FILE && context_seq_len(y) == 3);
    CHECK(context_kv_load(y, tiny_path) == MODEL_ERR_FILE && context_seq_len(y) == 3); /* not a cache */
    printf("    %s\n", context_last_error(y));
    CHECK(context_kv_load(y, kvf) == MODEL_OK && context_seq_len(y) == 12);
    const size_t n = context_kv_save_bound(y);
    uint8_t *a = malloc(n), *b = malloc(n);
    size_t wa = 0, wb = 0;
    CHECK(a && b && n > 0);
    if (a && b) { /* the restored cache saves to the same bytes */
        CHECK(context_kv_save_memory(x, a, n, &wa) == MODEL_OK && context_kv_save_memory(y, b, n, &wb) == MODEL_OK);
        CHECK(wa == n && wb == n && memcmp(a, b, n) == 0);
        CHECK(context_kv_save_memory(y, b, n - 1, &wb) == MODEL_ERR_BATCH && wb == 0);
        a[n / 2] ^= 1;
        CHECK(context_kv_load_memory(y, a, n) == MODEL_ERR_FILE && context_seq_len(y) == 12);
        CHECK(context_kv_load_memory(y, b, n - 1) == MODEL_ERR_FILE);
    }
    free(a);
    free(b);
    CHECK(context_kv_load_memory(NULL, "x", 1) == MODEL_ERR_ARG && context_kv_load_memory(y, NULL, 1) == MODEL_ERR_ARG);
    CHECK(context_kv_save(NULL, kvf) == MODEL_ERR_ARG && context_kv_save(y, NULL) == MODEL_ERR_ARG);
    CHECK(context_kv_save_bound(NULL) == 0 && context_kv_save_memory(y, NULL, 1, NULL) == MODEL_ERR_ARG);
    CHECK(context_set_kv_keep_history(NULL, 1) == MODEL_ERR_ARG);
out:
    context_free(x);
    context_free(y);
    context_free(f);
    context_free(s);
    model_free(m);
    remove(kvf);
    remove(tiny_path);
}

static void test_xxh64(void) {
    uint8_t b[773];
    for (int i = 0; i < 768; i++) b[i] = (uint8_t)i;
    memcpy(b + 768, "hello", 5);
    CHECK(prompt_cache_xxh64("", 0, 0) == 0xef46db3751d8e999ull);
    CHECK(prompt_cache_xxh64("abc", 3, 0) == 0x44bc2cf5ad770999ull);
    CHECK(prompt_cache_xxh64("abc", 3, 7) == 0x9e755206156676d7ull);
    CHECK(prompt_cache_xxh64(b, sizeof b, 0) == 0x1b0d739e7ed05922ull);
    CHECK(prompt_cache_xxh64(b, sizeof b, 7) == 0xb545a3fe821a256aull);
}

/* The real model: f16 and turbo3, a prompt longer than the windows keep (512 + 256), so the
 * sliding-window layers have recycled positions: the context keeps its history to save. */
static void test_real_restore(void) {
    const char *path = real_model_path();
    if (access(path, R_OK) != 0) SKIP_TEST("no model at %s (set TQ_MODEL or run scripts/get-model.sh)", path);
    model *m = load_model(path);
    if (m == NULL) return;
    const int quick = TSAN || getenv("TQ_TEST_QUICK") != NULL;
    if (quick) test_skip("real model: 96-token prompt (1100 in the optimized build)");
    const int np = quick ? 96 : 1100, k = quick ? 64 : 768;
    for (int s = 0; s < 2; s++) check_scheme(m, schemes[s], np, k, 2, quick ? 32 : 256, 2048, 1);
    /* a context that recycles cannot be saved past the windows; says so */
    if (!quick) {
        model_context *x = open_ctx(m, "f16", 2048, 256, 0);
        int32_t *prompt = malloc(1100 * sizeof *prompt);
        char why[256];
        if (x && prompt) {
            tokens_from(prompt, 1100, model_get_config(m)->n_vocab, 1);
            CHECK(run(x, prompt, 0, 1100, 256, NULL) == MODEL_OK);
            CHECK(prompt_cache_save(file, x, prompt, 1100, NULL, why, sizeof why) == PCACHE_ERR_UNSAVABLE);
            CHECK(access(file, F_OK) != 0);
        }
        free(prompt);
        context_free(x);
    }
    model_free(m);
}

int main(void) {
    snprintf(file, sizeof file, "/tmp/tq_test_prompt_cache_%d.tqpc", (int)getpid());
    RUN_TEST(test_xxh64);
    RUN_TEST(test_tiny_restore);
    RUN_TEST(test_mismatches);
    RUN_TEST(test_context_state);
    RUN_TEST(test_real_restore);
    return test_report();
}

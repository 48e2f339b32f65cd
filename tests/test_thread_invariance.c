/* Results do not depend on the number of threads: bit for bit, not within a tolerance.
 *
 * The attention cuts its work into (KV head, query block, key split) tasks whose boundaries
 * are a function of the shapes and the sequence length alone, never of the thread count, and
 * merges the splits in a fixed order (src/attention.c, make_plan); every matmul output is
 * one dot product computed whole by one thread (engine/matmul.c). So the same call with a pool
 * of 1, 2, 3 or 5 threads must give the same bytes.
 *
 * test_attention_threads: tq_kv_attention on random K/V over schemes (f16, q8_0, q4_0, turbo2,
 * turbo3, turbo3.5, turbo4, two-phase and windowed), GQA shapes, decode and prefill chunks,
 * sequence lengths on both sides of the length-dependent split rule, every kernel set the CPU
 * has (the ones it lacks are reported skipped).
 * test_model_threads: the real model's logits for a prompt (chunked prefill and decode steps),
 * f16 and turbo3 with every key compressed, for 1, 2, 3 and 5 threads. Skipped without the
 * model ($TQ_MODEL or models/gemma3-270m-q4_k_m.gguf).
 * tests/test_cli.sh checks `tq perplexity` over two chunks the same way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_fixture.h"
#include "test_util.h"
#include "turboquant.h"

static const int thread_counts[] = {1, 2, 3, 5};
#define N_COUNTS (int)(sizeof thread_counts / sizeof thread_counts[0])

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* One cache of `len` tokens under `scheme`, attention of the last n_q positions with each pool
 * size; returns the number of mismatching configurations (0 expected). */
static int attention_case(const char *scheme_text, int H, int G, int d, size_t len, size_t n_q,
                          int window) {
    tq_kv_scheme scheme;
    char err[256];
    if (tq_kv_scheme_parse(scheme_text, &scheme, err, sizeof err) != TQ_OK) {
        CHECK_MSG(0, "scheme %s: %s", scheme_text, err);
        return 1;
    }
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, H, d, d);
    cfg.scheme = scheme;
    size_t win = (size_t)window;
    if (window) cfg.layer_windows = &win;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg) != TQ_OK) {
        CHECK_MSG(0, "create %s", scheme_text);
        return 1;
    }
    int nq = H * G;
    float *k = malloc(sizeof(float) * 64 * (size_t)H * (size_t)d);
    float *v = malloc(sizeof(float) * 64 * (size_t)H * (size_t)d);
    float *q = malloc(sizeof(float) * n_q * (size_t)nq * (size_t)d);
    float *out0 = malloc(sizeof(float) * n_q * (size_t)nq * (size_t)d);
    float *out = malloc(sizeof(float) * n_q * (size_t)nq * (size_t)d);
    int bad = 0;
    CHECK(k && v && q && out0 && out);
    /* Append in chunks of up to 64, as a prefill would (the two-phase rules compress as they
     * go); keys with a per-channel offset so the key mean matters. */
    for (size_t t = 0; k && v && t < len;) {
        size_t n = len - t < 64 ? len - t : 64;
        for (size_t i = 0; i < n * (size_t)H * (size_t)d; i++) {
            k[i] = frand() + 0.5f * (float)((i % (size_t)d) % 5);
            v[i] = frand();
        }
        tq_status st = tq_kv_cache_append(c, 0, k, v, n);
        CHECK_MSG(st == TQ_OK, "append %s: %s", scheme_text, tq_error_name(st));
        if (st) break;
        t += n;
    }
    for (size_t i = 0; q && i < n_q * (size_t)nq * (size_t)d; i++) q[i] = 2.0f * frand();
    tq_attn_params p;
    tq_attn_params_init(&p, d);
    p.sliding_window = window;
    for (int ti = 0; out0 && out && ti < N_COUNTS; ti++) {
        int T = thread_counts[ti];
        tq_threadpool *pool = NULL;
        if (T > 1 && tq_threadpool_create(&pool, T) != TQ_OK) {
            CHECK_MSG(0, "threadpool %d", T);
            bad++;
            continue;
        }
        size_t wb = tq_kv_attention_workspace_size(c, 0, nq, n_q, T);
        void *work = malloc(wb);
        CHECK(work != NULL);
        tq_status st = work ? tq_kv_attention(c, 0, q, nq, n_q, &p, pool, work, wb, ti ? out : out0, n_q * (size_t)nq * (size_t)d)
                            : TQ_ERR_NOMEM;
        CHECK_MSG(st == TQ_OK, "%s threads %d: %s", scheme_text, T, tq_error_name(st));
        if (st == TQ_OK && ti &&
            memcmp(out0, out, sizeof(float) * n_q * (size_t)nq * (size_t)d) != 0) {
            size_t at = 0;
            while (out0[at] == out[at]) at++;
            CHECK_MSG(0, "%s H %d G %d d %d len %zu queries %zu window %d: %d threads differ from 1 "
                      "at float %zu (%.9g vs %.9g)", scheme_text, H, G, d, len, n_q, window, T, at,
                      (double)out[at], (double)out0[at]);
            bad++;
        }
        free(work);
        tq_threadpool_free(pool);
    }
    free(k);
    free(v);
    free(q);
    free(out0);
    free(out);
    tq_kv_cache_free(c);
    return bad;
}

static void attention_grid(int quick) {
    static const char *schemes[] = {
        "f16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo3.5", "turbo4", "k=4:v=3",
        "turbo3:prefill_raw=1", "turbo4:window=64:batch=32",
    };
    struct { int H, G, d; } shapes[] = {{1, 4, 256}, {2, 2, 128}, {4, 1, 64}};
    if (getenv("TQ_TEST_QUICK") != NULL) quick = 1;
    /* Lengths on both sides of a page (256) and of SPLIT_KEYS (2048); 4500 gives the
     * 4-head shape's decode more splits than its minimum (the length-dependent rule). */
    static const size_t lens[] = {77, 700, 2300, 4500};
    int n = 0;
    for (size_t si = 0; si < sizeof schemes / sizeof *schemes; si++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                if (quick && (n++ % 3)) continue;
                size_t len = lens[li];
                int H = shapes[sh].H, G = shapes[sh].G, d = shapes[sh].d;
                attention_case(schemes[si], H, G, d, len, 1, 0); /* decode */
                if (len > 2300) continue;
                attention_case(schemes[si], H, G, d, len, 2, 0); /* two positions */
                attention_case(schemes[si], H, G, d, len, len < 130 ? len : 130, 0); /* prefill */
                if (len == 2300) attention_case(schemes[si], H, G, d, len, 3, 512); /* window */
            }
}

static void test_attention_threads(void) {
    static const struct { tq_kernels_kind kind; const char *name; } sets[] = {
        {TQ_KERNELS_REF, "ref"}, {TQ_KERNELS_AVX2, "avx2"}, {TQ_KERNELS_AVX512, "avx512"}};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        char why[256];
        if (test_kernel_skip_reason(sets[i].name, tq_kernels_supported(sets[i].kind), why, sizeof why)) {
            test_skip("%s", why);
            continue;
        }
        CHECK(tq_set_kernels(sets[i].kind) == TQ_OK);
        printf("     kernels %s (attention %s)\n", tq_kernels_name(), tq_attn_kernels_name());
        /* The scalar reference is slow: a third of the grid. */
        attention_grid(sets[i].kind == TQ_KERNELS_REF);
    }
    tq_set_kernels(TQ_KERNELS_AUTO);
}

/* ---- the model ---------------------------------------------------------------------------- */

static const char *model_path(void) {
    const char *p = getenv("TQ_MODEL");
    return p ? p : "models/gemma3-270m-q4_k_m.gguf";
}

#define PROMPT 300
#define PROMPT_QUICK 140 /* TQ_TEST_QUICK: two chunks still, the second one short */
#define CHUNK 128
#define DECODE 6
static int n_prompt = PROMPT; /* the prompt positions run_model computes */

/* Logits of every prompt position (chunks of CHUNK) and of DECODE single-token steps. */
static float *run_model(const char *scheme_text, int n_threads, const int32_t *tokens, int n_vocab) {
    tq_kv_scheme scheme;
    char err[256];
    if (tq_kv_scheme_parse(scheme_text, &scheme, err, sizeof err) != TQ_OK) return NULL;
    model_params p = {512, CHUNK, n_threads, 0, &scheme};
    fixture f;
    model_status st = fixture_open(model_path(), &p, &f, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "model_load: %s: %s", model_status_name(st), err);
    if (st) return NULL;
    size_t rows = (size_t)n_prompt + DECODE;
    float *logits = malloc(sizeof(float) * rows * (size_t)n_vocab);
    CHECK(logits != NULL);
    for (int pos = 0; logits && pos < n_prompt;) {
        int n = n_prompt - pos < CHUNK ? n_prompt - pos : CHUNK;
        st = context_forward(f.x, tokens + pos, n, pos, 1, logits + (size_t)pos * (size_t)n_vocab);
        CHECK_MSG(st == MODEL_OK, "forward: %s", context_last_error(f.x));
        if (st) break;
        pos += n;
    }
    for (int i = 0; logits && st == MODEL_OK && i < DECODE; i++) {
        int pos = n_prompt + i;
        st = context_forward(f.x, tokens + pos, 1, pos, 0, logits + (size_t)pos * (size_t)n_vocab);
        CHECK_MSG(st == MODEL_OK, "decode: %s", context_last_error(f.x));
    }
    fixture_close(&f);
    if (st != MODEL_OK) {
        free(logits);
        return NULL;
    }
    return logits;
}

static void test_model_threads(void) {
    if (access(model_path(), R_OK) != 0) SKIP_TEST("no model at %s (scripts/get-model.sh)", model_path());
    /* turbo3 with prefill_raw=0 and batch 64: every call compresses what it may before its
     * attention, so the compressed kernels run in prefill and decode alike. */
    static const char *schemes[] = {"turbo3:prefill_raw=0:batch=64", "f16"};
    /* TQ_TEST_QUICK (sanitizer builds): turbo3 with 1 and 3 threads only. */
    const int quick = getenv("TQ_TEST_QUICK") != NULL;
    if (quick) test_skip("f16, 2 and 5 threads, prompt positions %d..%d: TQ_TEST_QUICK=1 (turbo3 with 1 and 3 threads)",
                         PROMPT_QUICK, PROMPT - 1);
    n_prompt = quick ? PROMPT_QUICK : PROMPT;
    int32_t tokens[PROMPT + DECODE];
    int n_vocab = 0;
    {
        char err[256];
        model_params p = {512, 1, 1, 0, NULL};
        fixture f;
        if (fixture_open(model_path(), &p, &f, err, sizeof err) != MODEL_OK) {
            CHECK_MSG(0, "model_load: %s", err);
            return;
        }
        n_vocab = model_get_config(f.m)->n_vocab;
        fixture_close(&f);
    }
    /* Token ids from a fixed generator over the first 20000 ids (mostly word pieces): the
     * check is of arithmetic, not of language. */
    rng_state = 12345;
    for (int i = 0; i < PROMPT + DECODE; i++)
        tokens[i] = 2 + (int32_t)((frand() + 1.0f) * 0.5f * 20000.0f) % (n_vocab - 2);
    size_t bytes = sizeof(float) * (size_t)(n_prompt + DECODE) * (size_t)n_vocab;
    for (size_t si = 0; si < (quick ? 1 : sizeof schemes / sizeof *schemes); si++) {
        float *ref = run_model(schemes[si], thread_counts[0], tokens, n_vocab);
        if (!ref) continue;
        int same = 1;
        for (int ti = 1; ti < N_COUNTS; ti++) {
            if (quick && thread_counts[ti] != 3) continue;
            float *got = run_model(schemes[si], thread_counts[ti], tokens, n_vocab);
            same &= got != NULL;
            if (!got) continue;
            if (memcmp(ref, got, bytes) != 0) {
                same = 0;
                size_t at = 0;
                while (ref[at] == got[at]) at++;
                CHECK_MSG(0, "%s: logits with %d threads differ from 1 thread at row %zu (%.9g vs %.9g)",
                          schemes[si], thread_counts[ti], at / (size_t)n_vocab, (double)got[at],
                          (double)ref[at]);
            }
            free(got);
        }
        if (same)
            printf("     %s: logits of %d positions identical for %s threads\n", schemes[si],
                   n_prompt + DECODE, quick ? "1 and 3" : "1, 2, 3 and 5");
        free(ref);
    }
}

int main(void) {
    RUN_TEST(test_attention_threads);
    RUN_TEST(test_model_threads);
    return test_report();
}

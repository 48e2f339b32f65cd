/* `--kv auto:B` (engine/kv_auto.c, doc/kv-auto.md): the allocator on synthetic sensitivities
 * (the budget never exceeded, a more sensitive item of the same size never fewer bits, all
 * 8-bit or better at B = 8, too small a budget refused), the parser (good and bad forms), and
 * on the real model (SKIP without it) a calibration end to end: auto:3 on Gemma 3's built-in
 * text takes no more bytes per token than turbo3, every layer's scheme is one of the options,
 * and the context runs with it.
 *
 * Model: $TQ_MODEL or models/gemma3-270m-q4_k_m.gguf; TQ_THREADS (default 2). Set
 * TQ_KV_AUTO_TOKENS to calibrate on more than the default 64 tokens, TQ_KV_AUTO_MEASURED=1 to
 * also print the whole-model curve (an experiment: doc/kv-auto.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_fixture.h"
#include "../engine/eval.h"
#include "../engine/kv_auto.h"
#include "../engine/tokenizer.h"
#include "../engine/vocab.h"
#include "test_util.h"
#include "tiny_model.h"
#include "engine_test_util.h"

enum { NL = 12, NI = 2 * NL };

/* Bytes per token of option o for a side of dim 128 (as turbo: bits·dim/8 + a 2-byte norm;
 * fp16: 2·dim), and the Lloyd-Max-like curve 4^-(b-3). */
static void synth(size_t *bytes, double *kld, const double *sens, int n) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < KV_AUTO_N_OPT; o++) {
            const float b = kv_auto_widths[o];
            bytes[i * KV_AUTO_N_OPT + o] = o == KV_AUTO_N_OPT - 1 ? 256 : (size_t)(b * 16.0f) + 2;
            kld[i * KV_AUTO_N_OPT + o] = o == KV_AUTO_N_OPT - 1 ? 0.0 : sens[i] * pow(4.0, -(b - 3.0));
        }
}

static size_t uniform_bytes(const size_t *bytes, int n, int o) {
    size_t s = 0;
    for (int i = 0; i < n; i++) s += bytes[i * KV_AUTO_N_OPT + o];
    return s;
}

static void test_allocator(void) {
    double sens[NI];
    size_t bytes[NI * KV_AUTO_N_OPT];
    double kld[NI * KV_AUTO_N_OPT];
    unsigned char ch[NI];
    uint64_t s = 12345;
    for (int i = 0; i < NI; i++) { /* spread over three decades, two of each value */
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        sens[i] = i % 2 ? sens[i - 1] : 1e-4 * pow(10.0, 3.0 * (double)(s >> 11) / 9007199254740992.0);
    }
    synth(bytes, kld, sens, NI);
    for (int o = 0; o < KV_AUTO_N_OPT - 1; o++) { /* every option width as B: turboB's budget */
        const size_t budget = uniform_bytes(bytes, NI, o);
        CHECK(kv_auto_allocate(NI, bytes, kld, budget, o, NULL, ch) == 0);
        size_t used = 0;
        double pred = 0.0, upred = 0.0;
        for (int i = 0; i < NI; i++) {
            CHECK(ch[i] < KV_AUTO_N_OPT);
            used += bytes[i * KV_AUTO_N_OPT + ch[i]];
            pred += kld[i * KV_AUTO_N_OPT + ch[i]];
            upred += kld[i * KV_AUTO_N_OPT + o];
        }
        CHECK_MSG(used <= budget, "B = %g: %zu bytes over the budget %zu", (double)kv_auto_widths[o], used, budget);
        CHECK_MSG(pred <= upred, "B = %g: predicts %g, uniform %g", (double)kv_auto_widths[o], pred, upred);
        for (int i = 0; i < NI; i++)
            for (int j = 0; j < NI; j++)
                if (sens[i] > sens[j]) CHECK_MSG(ch[i] >= ch[j], "B = %g: item %d (a %g) gets %s bits, item %d (a %g) %s",
                                                 (double)kv_auto_widths[o], i, sens[i], kv_auto_option_name(ch[i]), j,
                                                 sens[j], kv_auto_option_name(ch[j]));
        if (kv_auto_widths[o] == 8.0f)
            for (int i = 0; i < NI; i++) CHECK(kv_auto_widths[ch[i]] >= 8.0f);
        if (o == 0)
            for (int i = 0; i < NI; i++) CHECK(ch[i] == 0);
    }
    /* a budget below every item at 2 bits is refused */
    CHECK(kv_auto_allocate(NI, bytes, kld, uniform_bytes(bytes, NI, 0) - 1, -1, NULL, ch) == -1);
    CHECK(kv_auto_allocate(0, bytes, kld, 1000, -1, NULL, ch) == -1);
    /* one very sensitive item: it goes up, the budget still holds */
    for (int i = 0; i < NI; i++) sens[i] = i == 5 ? 1.0 : 1e-3;
    synth(bytes, kld, sens, NI);
    const size_t b3 = uniform_bytes(bytes, NI, 2);
    CHECK(kv_auto_allocate(NI, bytes, kld, b3, 2, NULL, ch) == 0);
    CHECK(kv_auto_widths[ch[5]] > 3.0f);
    size_t used = 0;
    for (int i = 0; i < NI; i++) used += bytes[i * KV_AUTO_N_OPT + ch[i]];
    CHECK(used <= b3);
    /* floors (global layers the calibration cannot see): items 0-3, the least sensitive, would
     * go below 3 bits; with their lowest option at 3 bits they stay there, the budget holds,
     * and the others pay for the sensitive one */
    for (int i = 0; i < NI; i++) sens[i] = i == 5 ? 1.0 : i < 4 ? 1e-6 : 1e-3;
    synth(bytes, kld, sens, NI);
    unsigned char lowest[NI] = {0}, ch0[NI];
    for (int i = 0; i < 4; i++) lowest[i] = 2;
    CHECK(kv_auto_allocate(NI, bytes, kld, b3, 2, NULL, ch0) == 0);
    CHECK(kv_auto_allocate(NI, bytes, kld, b3, 2, lowest, ch) == 0);
    int below = 0;
    used = 0;
    for (int i = 0; i < NI; i++) {
        below += i < 4 && ch0[i] < 2;
        CHECK_MSG(i >= 4 || ch[i] >= 2, "item %d with floor 3 bits: %s", i, kv_auto_option_name(ch[i]));
        used += bytes[i * KV_AUTO_N_OPT + ch[i]];
    }
    CHECK_MSG(below > 0, "without floors the quiet items stay at 3 bits: the test shows nothing");
    CHECK(used <= b3 && kv_auto_widths[ch[5]] > 3.0f);
    /* floors above the budget: refused */
    for (int i = 0; i < NI; i++) lowest[i] = 3;
    CHECK(kv_auto_allocate(NI, bytes, kld, b3, 2, lowest, ch) == -1);
}

/* The width rule at B <= 4 (kv_auto_option_allowed): full-attention layers 2..4 bits. */
static void test_option_rule(void) {
    for (int o = 0; o < KV_AUTO_N_OPT; o++) {
        const int narrow = kv_auto_widths[o] <= 4.0f;
        CHECK(kv_auto_option_allowed(3.0f, o, 0) == narrow);
        CHECK(kv_auto_option_allowed(4.0f, o, 0) == narrow);
        CHECK(kv_auto_option_allowed(4.0f, o, 1) == 1);
        CHECK(kv_auto_option_allowed(4.5f, o, 0) == 1);
        CHECK(kv_auto_option_allowed(8.0f, o, 0) == 1);
    }
    CHECK(kv_auto_option_allowed(4.0f, 4, 0) == 1 && kv_auto_option_allowed(4.0f, 5, 0) == 0); /* 4 and 5 bits */
    CHECK(kv_auto_option_allowed(3.0f, -1, 1) == 0 && kv_auto_option_allowed(3.0f, KV_AUTO_N_OPT, 1) == 0);
}

static void test_parse(void) {
    tq_kv_scheme base;
    float bits = 0;
    char err[400];
    CHECK(kv_auto_parse("turbo3", &bits, &base, err, sizeof err) == 0);
    CHECK(kv_auto_parse("auto:3", &bits, &base, err, sizeof err) == 1 && bits == 3.0f);
    CHECK(base.layer.key_format == TQ_KV_TURBO && base.layer.key_bits == 3.0f && base.layer.value_bits == 3.0f);
    CHECK(kv_auto_parse("auto:3.5", &bits, &base, err, sizeof err) == 1 && bits == 3.5f);
    CHECK(kv_auto_parse("auto:8", &bits, &base, err, sizeof err) == 1 && bits == 8.0f);
    CHECK(kv_auto_parse("auto:2", &bits, &base, err, sizeof err) == 1 && bits == 2.0f);
    CHECK(kv_auto_parse("auto:4:prefill_raw=0", &bits, &base, err, sizeof err) == 1 && base.prefill_raw == 0);
    static const char *const bad[] = {"auto", "auto:", "auto:1", "auto:9", "auto:x", "auto:1.99", "auto::3",
                                      "auto:3x", "auto:nan", "auto:inf", "auto:3:nonsense=1", "autox"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_MSG(kv_auto_parse(bad[i], &bits, &base, err, sizeof err) == -1, "%s accepted", bad[i]);
        CHECK_MSG(strlen(err) > 10, "%s: no message", bad[i]);
    }
    CHECK(strstr(kv_auto_default_text(), "lighthouse") != NULL);
}

static const char *model_path;

/* A calibration end to end on a tiny synthetic model (runs everywhere, and is what the
 * sanitizer builds run: Gemma 3's takes minutes there): the runs, the budget, the choice
 * reproduced from the sensitivities. */
/* One sequence of n tokens through x with layer schemes ls (NULL: fp16), in chunks of 16;
 * every row's logits into out. */
static model_status replay_run(model_context *x, const tq_kv_layer_scheme *ls, const int32_t *tok, int n,
                               float *out) {
    tq_kv_scheme base;
    if (tq_kv_scheme_parse("f16", &base, NULL, 0) != TQ_OK) return MODEL_ERR_KV_SCHEME;
    base.prefill_raw = 0; /* compressed at append, 8 tokens at a time */
    base.batch = 8;
    model_status st = context_set_kv_layer_schemes(x, &base, ls);
    for (int p = 0; p < n && st == MODEL_OK; p += 16)
        st = context_forward(x, tok + p, n - p < 16 ? n - p : 16, p, 1, out + (size_t)p * V);
    return st;
}

/* Layer replay (context_replay_record, context_replay_from: what auto:B's probes use): the
 * logits of computing every layer, bit for bit, where layers are taken from the record, and
 * every layer computed where the record does not apply (other tokens, a layer below that is
 * not fp16). */
static void test_replay(void) {
    static tiny t;
    const char *path = "/tmp/tq_test_kv_auto_replay.gguf";
    model *m = load_tiny(&t, MODEL_ARCH_LLAMA, 1, 778, path);
    if (m == NULL) return;
    enum { N = 32 };
    int32_t a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (int32_t)((i * 29 + 5) % V);
    b[20] = (b[20] + 1) % V;
    static float la[N * V], lb[N * V], ra[N * V];
    const context_params p = {CTX, 16, 0, NULL, 1};
    model_context *x = NULL, *y = NULL;
    char err[256];
    CHECK(context_create(m, &p, NULL, &x, err, sizeof err) == MODEL_OK);
    CHECK(context_create(m, &p, NULL, &y, err, sizeof err) == MODEL_OK);
    /* probe: the last layer's keys at turbo3, the rest fp16; low: layer 0's keys instead */
    tq_kv_layer_scheme probe[L], low[L];
    tq_kv_scheme f16, t3;
    CHECK(tq_kv_scheme_parse("f16", &f16, NULL, 0) == TQ_OK && tq_kv_scheme_parse("turbo3", &t3, NULL, 0) == TQ_OK);
    for (int il = 0; il < L; il++) probe[il] = low[il] = f16.layer;
    probe[L - 1] = t3.layer;
    probe[L - 1].value_format = TQ_KV_F16;
    low[0] = probe[L - 1];
    if (x && y) {
        CHECK(context_replay_record(x, CTX + 1) == MODEL_ERR_ARG);
        CHECK(context_replay_record(x, N) == MODEL_OK && context_replay_count(x) == 0);
        CHECK(replay_run(x, NULL, a, N, la) == MODEL_OK); /* recorded */
        context_replay_from(x, L - 1);
        /* the probe of the last layer: layers 0 .. L − 2 from the record, both chunks */
        CHECK(replay_run(x, probe, a, N, ra) == MODEL_OK && replay_run(y, probe, a, N, lb) == MODEL_OK);
        CHECK(context_replay_count(x) == 2 * (L - 1));
        CHECK(memcmp(ra, lb, sizeof ra) == 0);
        CHECK(memcmp(ra, la, sizeof ra) != 0); /* the probe changed the logits */
        /* other tokens from position 20 on: the first chunk replayed, the second computed */
        CHECK(replay_run(x, probe, b, N, ra) == MODEL_OK && replay_run(y, probe, b, N, lb) == MODEL_OK);
        CHECK(context_replay_count(x) == 3 * (L - 1));
        CHECK(memcmp(ra, lb, sizeof ra) == 0);
        /* layer 0 compressed: nothing from the record */
        CHECK(replay_run(x, low, a, N, ra) == MODEL_OK && replay_run(y, low, a, N, lb) == MODEL_OK);
        CHECK(context_replay_count(x) == 3 * (L - 1));
        CHECK(memcmp(ra, lb, sizeof ra) == 0);
        /* from 0: every layer computed, the record kept */
        context_replay_from(x, 0);
        CHECK(replay_run(x, probe, a, N, ra) == MODEL_OK && context_replay_count(x) == 3 * (L - 1));
        CHECK(context_replay_record(x, 0) == MODEL_OK && context_replay_count(x) == 0);
        /* recording a, then b over it: positions from b's second chunk on hold b's rows */
        CHECK(context_replay_record(x, N) == MODEL_OK);
        CHECK(replay_run(x, NULL, a, N, ra) == MODEL_OK && replay_run(x, NULL, b, N, ra) == MODEL_OK);
        context_replay_from(x, L - 1);
        CHECK(replay_run(x, probe, a, N, ra) == MODEL_OK && replay_run(y, probe, a, N, lb) == MODEL_OK);
        CHECK(context_replay_count(x) == L - 1 && memcmp(ra, lb, sizeof ra) == 0);
    }
    context_free(x);
    context_free(y);
    model_free(m);
    remove(path);
}

/* A probe scored on its head (eval_head, eval_kld_head: what auto:B's probes use): the whole
 * row gives the KLD computed in double, 99% of the mass gives it within a few percent where the
 * tail moves like the head, and the head is the most probable tokens, ascending, within cap. */
static void test_head_kld(void) {
    enum { NV = 5000 };
    static float z[NV], z2[NV], ref[NV], mine[NV], hz[NV];
    static int32_t ids[NV];
    uint64_t st = 0x68656164ULL; /* "head" */
    for (int j = 0; j < NV; j++) {
        double g[2];
        for (int u = 0; u < 2; u++) { /* Box–Muller from a 64-bit LCG */
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            const double a = ((double)(st >> 11) + 0.5) / 9007199254740992.0;
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            const double b = (double)(st >> 11) / 9007199254740992.0;
            g[u] = sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b);
        }
        z[j] = (float)(3.0 * g[0]);
        z2[j] = z[j] + (float)(0.05 * g[1]) + (j % 97 == 0 ? 0.5f : 0.0f);
    }
    eval_log_softmax(z, ref, NV);
    eval_log_softmax(z2, mine, NV);
    /* the KLD in double from the logits themselves, and eval_score_row's from float rows */
    double l1 = 0.0, l2 = 0.0, full = 0.0;
    for (int j = 0; j < NV; j++) l1 += exp((double)z[j]), l2 += exp((double)z2[j]);
    for (int j = 0; j < NV; j++)
        full += exp((double)z[j] - log(l1)) * (((double)z[j] - log(l1)) - ((double)z2[j] - log(l2)));
    eval_acc a;
    CHECK(eval_acc_init(&a, 0) == 0);
    eval_score_row(&a, ref, mine, NV, 0);
    CHECK_MSG(fabs(a.kld - full) <= 2e-3 * full, "eval_score_row %.7g, in double %.7g", a.kld, full);
    eval_acc_free(&a);
    CHECK(full > 1e-4);
    const double mass[3] = {2.0, 0.999, 0.99};
    int prev = NV + 1;
    for (int t = 0; t < 3; t++) {
        const int k = eval_head(ref, NV, mass[t], NV, ids);
        double got = 0.0;
        int asc = 1;
        for (int i = 0; i < k; i++) {
            got += exp((double)ref[ids[i]]);
            hz[i] = z2[ids[i]] + 7.0f; /* logits: any shift */
            if (i > 0 && ids[i] <= ids[i - 1]) asc = 0;
        }
        CHECK(asc && k >= 1 && k < prev);
        CHECK_MSG(got >= (mass[t] < 1.0 ? mass[t] : 0.999999), "mass %g: the head holds %g", mass[t], got);
        const double kh = eval_kld_head(ref, ids, k, hz);
        CHECK_MSG(fabs(kh - full) <= (t == 0 ? 1e-5 : t == 1 ? 0.01 : 0.05) * full,
                  "mass %g (%d tokens): KLD %.7g against %.7g on the whole row", mass[t], k, kh, full);
        prev = k;
    }
    /* cap: exactly cap tokens, none less probable than the best one left out by a bin */
    const int k = eval_head(ref, NV, 0.999, 10, ids);
    CHECK(k == 10);
    float worst_in = 0.0f, best_out = -1e30f;
    for (int j = 0, i = 0; j < NV; j++) {
        if (i < k && ids[i] == j) {
            worst_in = i == 0 || ref[j] < worst_in ? ref[j] : worst_in;
            i++;
        } else if (ref[j] > best_out)
            best_out = ref[j];
    }
    CHECK_MSG(worst_in >= best_out - 1.0f / 32.0f, "cap: %g in the head, %g left out", worst_in, best_out);
    CHECK(eval_head(ref, NV, 0.999, 0, ids) == 0);
}

/* ΔPPL in percent from the paired rows and its batch-means standard error (eval_summary):
 * whole blocks of EVAL_SE_BLOCK rows at d = 0.01 and 0.03 in turn, then a partial block. */
static void test_dppl_se(void) {
    enum { NV = 4 };
    const float ref[NV] = {-1.0f, -2.0f, -3.0f, -0.5f};
    float mine[NV];
    eval_acc a;
    eval_summary e;
    CHECK(eval_acc_init(&a, 8 * EVAL_SE_BLOCK) == 0);
    double sum = 0.0;
    for (int b = 0; b < 4; b++)
        for (int r = 0; r < EVAL_SE_BLOCK; r++) {
            const double d = b % 2 ? 0.03 : 0.01;
            memcpy(mine, ref, sizeof mine);
            mine[1] = ref[1] - (float)d;
            eval_score_row(&a, ref, mine, NV, 1);
            sum += (double)ref[1] - (double)mine[1];
            if (b == 0 && r == EVAL_SE_BLOCK - 2) { /* under two whole blocks: no error */
                CHECK(eval_summarize(&a, &e) == 0 && e.dppl_pct_se == -1.0);
            }
        }
    CHECK(eval_summarize(&a, &e) == 0);
    /* block means 0.01, 0.03, 0.01, 0.03 (as float rows hold them): mean 0.02, sample variance
     * 4e-4 / 3, standard error sqrt(var / 4), through exp */
    const double m = sum / (4.0 * EVAL_SE_BLOCK), want = 100.0 * (exp(m) - 1.0);
    CHECK_MSG(fabs(e.dppl_pct - want) < 1e-9 && fabs(e.dppl_pct - 2.0201) < 1e-3, "dPPL %% %.6f, want %.6f", e.dppl_pct,
              want);
    const double se = 100.0 * exp(m) * sqrt(4e-4 / 3.0 / 4.0);
    CHECK_MSG(fabs(e.dppl_pct_se - se) < 1e-4 * se, "SE %.6f, want %.6f", e.dppl_pct_se, se);
    /* a partial block counts in ΔPPL, not in the error (which only scales with the ratio) */
    memcpy(mine, ref, sizeof mine);
    mine[1] = ref[1] - 1.0f;
    eval_score_row(&a, ref, mine, NV, 1);
    eval_summary e2;
    CHECK(eval_summarize(&a, &e2) == 0 && e2.dppl_pct > e.dppl_pct + 0.1);
    CHECK(fabs(e2.dppl_pct_se / (100.0 + e2.dppl_pct) - e.dppl_pct_se / (100.0 + e.dppl_pct)) < 1e-12);
    /* the reference against itself */
    eval_acc z;
    CHECK(eval_acc_init(&z, 4 * EVAL_SE_BLOCK) == 0);
    for (int r = 0; r < 4 * EVAL_SE_BLOCK; r++) eval_score_row(&z, ref, ref, NV, 2);
    CHECK(eval_summarize(&z, &e) == 0 && e.dppl_pct == 0.0 && e.dppl_pct_se == 0.0);
    eval_acc_free(&z);
    eval_acc_free(&a);
}

/* context_output_logits after context_set_hidden_out: bit for bit the logits of the whole
 * output matrix under f32_act, for chosen tokens of several rows; bad ids refused. */
static void test_output_logits(void) {
    static tiny t;
    const char *path = "/tmp/tq_test_kv_auto_logits.gguf";
    model *m = load_tiny(&t, MODEL_ARCH_LLAMA, 1, 779, path);
    if (m == NULL) return;
    enum { N = 16, K = 5 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 13 + 3) % V);
    static float full[N * V], hid[N * V], out[N * K];
    int32_t ids[N * K];
    int k[N];
    const context_params p = {CTX, 16, 0, NULL, 1};
    model_context *x = NULL;
    char err[256];
    CHECK(context_create(m, &p, NULL, &x, err, sizeof err) == MODEL_OK);
    if (x != NULL) {
        CHECK(context_forward(x, tok, N, 0, 1, full) == MODEL_OK);
        context_set_hidden_out(x, 1);
        CHECK(context_forward(x, tok, N, 0, 1, hid) == MODEL_OK);
        for (int r = 0; r < N; r++) {
            k[r] = r % (K + 1); /* 0 to K tokens, rows sharing some */
            for (int i = 0; i < k[r]; i++) ids[r * K + i] = (int32_t)(i * 11 + (r % 3));
        }
        CHECK(context_output_logits(x, hid, N, ids, k, K, out) == MODEL_OK);
        int same = 1;
        for (int r = 0; r < N; r++)
            for (int i = 0; i < k[r]; i++)
                if (memcmp(&out[r * K + i], &full[(size_t)r * V + (size_t)ids[r * K + i]], sizeof(float)) != 0) same = 0;
        CHECK_MSG(same, "chosen logits differ from the whole output matrix's");
        ids[K + 1] = ids[K]; /* row 1: not ascending */
        k[1] = 2;
        CHECK(context_output_logits(x, hid, N, ids, k, K, out) == MODEL_ERR_ARG);
        ids[K + 1] = V; /* outside the vocabulary */
        CHECK(context_output_logits(x, hid, N, ids, k, K, out) == MODEL_ERR_ARG);
        k[1] = K + 1; /* more than a row holds */
        CHECK(context_output_logits(x, hid, N, ids, k, K, out) == MODEL_ERR_ARG);
        context_set_hidden_out(x, 0);
        static float again[N * V];
        CHECK(context_forward(x, tok, N, 0, 1, again) == MODEL_OK && memcmp(again, full, sizeof full) == 0);
    }
    context_free(x);
    model_free(m);
    remove(path);
}

static void test_tiny_auto3(void) {
    static tiny t;
    const char *path = "/tmp/tq_test_kv_auto_tiny.gguf";
    model *m = load_tiny(&t, MODEL_ARCH_LLAMA, 1, 777, path);
    if (m == NULL) return;
    tq_threadpool *pool = NULL;
    CHECK(tq_threadpool_create(&pool, 2) == TQ_OK);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    tq_kv_scheme base;
    float bits;
    char err[400];
    /* ksplit=1: the tiny model's head dim is under the default's TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM */
    CHECK(kv_auto_parse("auto:3:ksplit=1", &bits, &base, err, sizeof err) == 1);
    kv_auto_result r, r2;
    model_status st = kv_auto_calibrate(m, pool, ids, 64, &base, bits, 0, &r, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "%s", err);
    if (st == MODEL_OK) {
        /* the reference, 2·L probes, the key split's two passes, the two checks */
        CHECK(r.n_layer == L && r.runs == 2 * L + 5);
        CHECK(r.bytes_per_token > 0 && r.bytes_per_token <= r.budget_bytes);
        CHECK(r.key_split_gain > 0.0 && isfinite(r.key_split_gain));
        {
            /* The probes' layer replay changes nothing: every layer computed, the same bits. */
            kv_auto_result rn;
            st = kv_auto_calibrate(m, pool, ids, 64, &base, bits, KV_AUTO_NO_REPLAY, &rn, err, sizeof err);
            CHECK_MSG(st == MODEL_OK, "%s", err);
            if (st == MODEL_OK) {
                CHECK(memcmp(rn.sens, r.sens, (size_t)L * sizeof *r.sens) == 0);
                CHECK(rn.measured_kld == r.measured_kld && rn.key_split_gain == r.key_split_gain);
                CHECK(memcmp(rn.choice, r.choice, (size_t)L * sizeof *r.choice) == 0);
                kv_auto_result_free(&rn);
            }
        }
        {
            /* The probes scored on the whole vocabulary: each sensitivity within 1% of the
             * head's, the same choice. */
            kv_auto_result rf;
            st = kv_auto_calibrate(m, pool, ids, 64, &base, bits, KV_AUTO_FULL_LOGITS, &rf, err, sizeof err);
            CHECK_MSG(st == MODEL_OK, "%s", err);
            if (st == MODEL_OK) {
                for (int il = 0; il < L; il++)
                    for (int sd = 0; sd < 2; sd++)
                        CHECK_MSG(fabs(r.sens[il][sd] - rf.sens[il][sd]) <= 0.01 * rf.sens[il][sd],
                                  "layer %d side %d: %g on the head, %g on the whole rows", il, sd, r.sens[il][sd],
                                  rf.sens[il][sd]);
                CHECK(fabs(r.key_split_gain - rf.key_split_gain) <= 0.02 * rf.key_split_gain);
                CHECK(memcmp(rf.choice, r.choice, (size_t)L * sizeof *r.choice) == 0);
                kv_auto_result_free(&rf);
            }
        }
        {
            /* Without the split: two passes fewer, no gain, and the key curve's other widths
             * are the split's divided by its gain (the values' curve is the same). */
            tq_kv_scheme b0;
            float bits0;
            kv_auto_result r0;
            CHECK(kv_auto_parse("auto:3:ksplit=0", &bits0, &b0, err, sizeof err) == 1);
            st = kv_auto_calibrate(m, pool, ids, 64, &b0, bits0, 0, &r0, err, sizeof err);
            CHECK_MSG(st == MODEL_OK, "%s", err);
            if (st == MODEL_OK) {
                CHECK(r0.runs == 2 * L + 3 && r0.key_split_gain == 1.0);
                for (int o = 0; o < KV_AUTO_N_OPT; o++) {
                    CHECK(r0.curve[1][o] == r.curve[1][o]);
                    if (kv_auto_widths[o] != 3.0f && o != KV_AUTO_N_OPT - 1)
                        CHECK_MSG(fabs(r.curve[0][o] - r0.curve[0][o] * r.key_split_gain) <= 1e-12 * r.curve[0][o],
                                  "key option %d: %g against %g × %g", o, r.curve[0][o], r0.curve[0][o],
                                  r.key_split_gain);
                }
                /* The default (trellis codes) splits the keys at 3 bits at any head dim:
                 * ksplit=1's calibration. */
                kv_auto_result rd;
                CHECK(kv_auto_parse("auto:3", &bits0, &b0, err, sizeof err) == 1);
                st = kv_auto_calibrate(m, pool, ids, 64, &b0, bits0, 0, &rd, err, sizeof err);
                CHECK_MSG(st == MODEL_OK, "%s", err);
                if (st == MODEL_OK) {
                    CHECK(rd.runs == 2 * L + 5 && rd.key_split_gain == r.key_split_gain && rd.measured_kld == r.measured_kld);
                    CHECK(memcmp(rd.choice, r.choice, (size_t)r.n_layer * sizeof *r.choice) == 0);
                    kv_auto_result_free(&rd);
                }
                /* With Lloyd-Max codes this head dim (below TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM)
                 * splits no key at 3 bits: two passes fewer, no gain. */
                CHECK(kv_auto_parse("auto:3:trellis=0", &bits0, &b0, err, sizeof err) == 1);
                st = kv_auto_calibrate(m, pool, ids, 64, &b0, bits0, 0, &rd, err, sizeof err);
                CHECK_MSG(st == MODEL_OK, "%s", err);
                if (st == MODEL_OK) {
                    CHECK(rd.runs == 2 * L + 3 && rd.key_split_gain == 1.0);
                    kv_auto_result_free(&rd);
                }
                kv_auto_result_free(&r0);
            }
            st = MODEL_OK;
        }
        CHECK(r.measured_kld >= 0.0 && r.uniform_kld >= 0.0);
        st = kv_auto_calibrate_from(m, pool, ids, 64, &base, bits, 0, &r, &r2, err, sizeof err);
        CHECK_MSG(st == MODEL_OK, "%s", err);
        if (st == MODEL_OK) {
            CHECK(r2.runs == 3 && r2.measured_kld == r.measured_kld);
            CHECK(memcmp(r2.choice, r.choice, (size_t)r.n_layer * sizeof *r.choice) == 0);
        }
        kv_auto_result_free(&r2);
        kv_auto_result_free(&r);
    }
    tq_threadpool_free(pool);
    model_free(m);
    remove(path);
}

static void test_model_auto3(void) {
    FILE *fp = fopen(model_path, "rb");
    if (fp == NULL) SKIP_TEST("no model at %s", model_path);
    fclose(fp);
    if (SANITIZED) /* 45 passes of the real model: minutes under the sanitizers */
        SKIP_TEST("real model under the sanitizers (the optimized build calibrates it; test_tiny_auto3 ran here)");
    const int threads = getenv("TQ_THREADS") ? atoi(getenv("TQ_THREADS")) : 2;
    const int want = getenv("TQ_KV_AUTO_TOKENS") ? atoi(getenv("TQ_KV_AUTO_TOKENS")) : 64;
    tq_kv_scheme base, t3;
    float bits;
    char err[400];
    CHECK(kv_auto_parse("auto:3", &bits, &base, err, sizeof err) == 1);
    t3 = base;
    const model_params p = {want, 64, threads, 0, &t3};
    fixture f;
    if (fixture_open(model_path, &p, &f, err, sizeof err) != MODEL_OK) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    /* the built-in text's tokens */
    gguf_vocab gv;
    tokenizer *tok = NULL;
    size_t n = 0;
    const char *text = kv_auto_default_text();
    int32_t *ids = malloc(4 * strlen(text) * sizeof *ids + 64);
    CHECK(vocab_build(model_file(f.m), &gv, err, sizeof err) == VOCAB_OK);
    CHECK(tokenizer_create(&gv.v, &tok) == TOKENIZER_OK);
    CHECK(tokenizer_encode(tok, text, strlen(text), TOKENIZER_ENCODE_ADD_SPECIAL, ids, 4 * strlen(text) + 16, &n) ==
          TOKENIZER_OK);
    tokenizer_free(tok);
    vocab_free(&gv);
    CHECK(n >= (size_t)want);
    kv_auto_result r;
    model_status st = kv_auto_calibrate(f.m, f.pool, ids, want, &base, bits, 0, &r, err, sizeof err);
    CHECK_MSG(st == MODEL_OK, "%s", err);
    if (st == MODEL_OK) {
        const model_config *c = model_get_config(f.m);
        printf("auto:3 on %d tokens: %zu bytes per token (turbo3 %zu, f16 %zu), predicted KLD %.4f, measured %.4f, "
               "turbo3 %.4f, %d runs, %.1f s\n",
               r.n_tokens, r.bytes_per_token, r.budget_bytes, r.f16_bytes, r.predicted_kld, r.measured_kld,
               r.uniform_kld, r.runs, r.seconds);
        for (int il = 0; il < r.n_layer; il++)
            printf("layer %2d: a_K %.5f a_V %.5f -> k %s v %s\n", il, r.sens[il][0], r.sens[il][1],
                   kv_auto_option_name(r.choice[il][0]), kv_auto_option_name(r.choice[il][1]));
        CHECK(r.n_layer == c->n_layer && r.runs == 2 * c->n_layer + 5);
        CHECK(r.bytes_per_token <= r.budget_bytes && r.bytes_per_token > 0);
        CHECK(r.measured_kld >= 0.0 && r.uniform_kld > 0.0 && r.predicted_kld >= 0.0);
        /* never worse than turbo3 on its own tokens: an allocation that measured above it is
         * replaced by turbo3 (kept_uniform) */
        CHECK_MSG(r.measured_kld <= r.uniform_kld, "measured %g, turbo3 %g", r.measured_kld, r.uniform_kld);
        for (int il = 0; r.kept_uniform && il < r.n_layer; il++)
            CHECK(kv_auto_widths[r.choice[il][0]] == 3.0f && kv_auto_widths[r.choice[il][1]] == 3.0f);
        CHECK(!r.kept_uniform || (r.allocated_kld > r.uniform_kld && r.bytes_per_token == r.budget_bytes));
        for (int il = 0; il < r.n_layer; il++) {
            CHECK(r.sens[il][0] >= 0.0 && r.sens[il][1] >= 0.0);
            CHECK(r.choice[il][0] < KV_AUTO_N_OPT && r.choice[il][1] < KV_AUTO_N_OPT);
            /* auto:3's keys are predicted as turbo3's (mean=2, the default), though the probes
             * ran without it */
            const tq_kv_layer_scheme *ls = &r.layer_schemes[il];
            CHECK_MSG(ls->key_format != TQ_KV_TURBO || ls->key_mean == TQ_KV_KEY_MEAN_PREDICT, "layer %d: mean %d", il,
                      ls->key_mean);
        }
        CHECK(base.layer.key_mean == TQ_KV_KEY_MEAN_PREDICT);
        /* Gemma 3 (sliding-window layers, calibrated on fewer tokens than the window): its
         * global layers do not go below 3 bits */
        CHECK(r.global_floor == (c->sliding_window > 0 && want <= c->sliding_window));
        for (int il = 0; r.global_floor && il < r.n_layer; il++)
            if (!model_layer_is_swa(f.m, il))
                CHECK_MSG(kv_auto_widths[r.choice[il][0]] >= 3.0f && kv_auto_widths[r.choice[il][1]] >= 3.0f,
                          "global layer %d: k %s v %s", il, kv_auto_option_name(r.choice[il][0]),
                          kv_auto_option_name(r.choice[il][1]));
        /* the context runs it and its accounting agrees */
        CHECK(context_set_kv_layer_schemes(f.x, &base, r.layer_schemes) == MODEL_OK);
        CHECK(context_forward(f.x, ids, 64, 0, 0, NULL) == MODEL_OK);
        size_t total = 0;
        for (int il = 0; il < c->n_layer; il++) {
            tq_kv_layer_scheme ls;
            size_t kb, vb;
            CHECK(tq_kv_cache_get_layer_scheme(context_kv_cache(f.x), il, &ls, sizeof ls) == TQ_OK);
            CHECK(tq_kv_layer_scheme_bytes(&ls, c->head_dim, c->head_dim_v, &kb, &vb) == TQ_OK);
            total += (kb + vb) * (size_t)c->n_head_kv;
        }
        CHECK(total == r.bytes_per_token);
        /* from the sensitivities of r: the same choice and figures in 3 runs */
        kv_auto_result r2;
        st = kv_auto_calibrate_from(f.m, f.pool, ids, want, &base, bits, 0, &r, &r2, err, sizeof err);
        CHECK_MSG(st == MODEL_OK, "%s", err);
        if (st == MODEL_OK) {
            CHECK(r2.runs == 3 && r2.measured_kld == r.measured_kld && r2.predicted_kld == r.predicted_kld);
            CHECK(memcmp(r2.choice, r.choice, (size_t)r.n_layer * sizeof *r.choice) == 0);
        }
        kv_auto_result_free(&r2);
        /* auto:4 from the same sensitivities: a layer attending the whole context (not a
         * sliding-window one) stays within 2..4 bits, the widths with integer kernels */
        st = kv_auto_calibrate_from(f.m, f.pool, ids, want, &base, 4.0f, 0, &r, &r2, err, sizeof err);
        CHECK_MSG(st == MODEL_OK, "%s", err);
        if (st == MODEL_OK) {
            int n_global = 0;
            for (int il = 0; il < r2.n_layer; il++) {
                if (model_layer_is_swa(f.m, il)) continue;
                n_global++;
                for (int side = 0; side < 2; side++)
                    CHECK_MSG(kv_auto_widths[r2.choice[il][side]] <= 4.0f, "auto:4, global layer %d side %d: %s bits",
                              il, side, kv_auto_option_name(r2.choice[il][side]));
            }
            CHECK_MSG(n_global > 0 && r2.bytes_per_token <= r2.budget_bytes, "n_global %d bytes %zu budget %zu kept %d", n_global, r2.bytes_per_token, r2.budget_bytes, r2.kept_uniform);
        }
        kv_auto_result_free(&r2);
        kv_auto_result_free(&r);
    }
    if (getenv("TQ_KV_AUTO_MEASURED")) {
        st = kv_auto_calibrate(f.m, f.pool, ids, want, &base, bits, KV_AUTO_MEASURED_CURVE, &r, err, sizeof err);
        CHECK_MSG(st == MODEL_OK, "%s", err);
        if (st == MODEL_OK) {
            printf("measured curve: predicted %.4f measured %.4f; g_K / g_V:", r.predicted_kld, r.measured_kld);
            for (int o = 0; o < KV_AUTO_N_OPT; o++) printf(" %s %.3f/%.3f", kv_auto_option_name(o), r.curve[0][o], r.curve[1][o]);
            printf("\n");
        }
        kv_auto_result_free(&r);
    }
    /* too few tokens, bad bits */
    CHECK(kv_auto_calibrate(f.m, f.pool, ids, KV_AUTO_MIN_TOKENS - 1, &base, 3.0f, 0, &r, err, sizeof err) ==
          MODEL_ERR_ARG);
    CHECK(kv_auto_calibrate(f.m, f.pool, ids, want, &base, 9.0f, 0, &r, err, sizeof err) == MODEL_ERR_ARG);
    free(ids);
    fixture_close(&f);
}

int main(void) {
    model_path = getenv("TQ_MODEL") ? getenv("TQ_MODEL") : "models/gemma3-270m-q4_k_m.gguf";
    RUN_TEST(test_allocator);
    RUN_TEST(test_option_rule);
    RUN_TEST(test_parse);
    RUN_TEST(test_head_kld);
    RUN_TEST(test_dppl_se);
    RUN_TEST(test_output_logits);
    RUN_TEST(test_replay);
    RUN_TEST(test_tiny_auto3);
    RUN_TEST(test_model_auto3);
    return test_report();
}

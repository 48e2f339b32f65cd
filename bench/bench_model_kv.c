/* What each KV cache scheme costs on a real model: perplexity, KL divergence and top-1
 * agreement against the f16 cache (doc/gemma3.md §8, as llama-perplexity --kl-divergence
 * reports them), bytes per token, and prefill/decode speed. A benchmark, not a test: it prints.
 * The evaluation (windows, pieces, views, scores, ratio) is engine/eval.c's, the code behind
 * `tq perplexity`, which prints the same numbers; this file holds the runs' order (one context
 * re-schemed, the f16 reference's rows of a whole window kept), the table layout and --speed.
 *
 *   bench_model_kv [-m model.gguf] [-f wikitext.txt | --ids ids.i32] [-c ctx] [-w windows] [-t threads]
 *                  [-s scheme,scheme,...] [-l scheme,...] [--as-decode | --prompt] [--speed] [--no-quality]
 *
 * --ids: the tokens are read from a file of little-endian int32 ids (llama.cpp's, e.g. the
 * chunk_tokens of tests/golden/smollm2_ppl.json) instead of tokenizing -f, and each window is
 * fed as it is (no BOS put first): for a model whose vocabulary the engine cannot tokenize yet.
 *
 * Windows are llama-perplexity's: window i is tokens [i·ctx, (i+1)·ctx) of the whole text
 * (BOS first), rows ctx/2 .. ctx−2 scored. Every scheme runs with prefill_raw = 0 and forward
 * calls ending at multiples of 64 (the schemes' batch), so before each call's attention every
 * key it sees — its own included — is compressed: these are the figures of a fully
 * compressed cache, an upper bound on what decode sees (decode keeps < 64 newest tokens raw).
 * -l S also runs S with the sliding-window layers kept f16 (per-layer override), shown as
 * "S/lf16". --as-decode: every run (the f16 reference too) feeds its scored pieces in the
 * chunks of tq_kv_scheme_decode_chunk (context_forward_as_decode: 63 tokens, then 1), so each query sees each key
 * compressed or still fp16 exactly as the decode step at its position would (the newest
 * < 64 tokens raw): the figures of generation rather than the worst case. Its "ratio" column
 * is then the cache's mean over the scored decode steps (each layer's newest len − compressed
 * length tokens fp16, 31.5 on average with batch 64), not the end-of-window state. --prompt:
 * generation after a prompt, as `tq generate` runs: the first half of each window is the
 * prompt, prefilled with the scheme's prefill_raw = 1 (attention exact, K/V kept fp16), then
 * the scored half is decoded — its first step alone (it compresses the prompt, fixing the key
 * mean, scale and split from the prompt's tokens), the rest in decode-exact chunks; every run,
 * the f16 reference too, in the same calls. --speed:
 * prefill of ctx − 64 tokens, then 64 decode steps (the first, which compresses the prefill,
 * timed apart), for f16 and turbo3 with the library's defaults. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "eval.h"
#include "regular_file.h"
#include "sampler.h"
#include "tokenizer.h"
#include "vocab.h"

#define MAX_RUNS 32

typedef struct {
    char name[64];
    tq_kv_scheme scheme;
    int local_f16;   /* sliding-window layers kept f16 */
    eval_view view;  /* EVAL_AS_DECODE: scored pieces in decode-exact chunks; EVAL_PROMPT (--prompt): the same after
                        the first half prefilled as a raw prompt (prefill_raw = 1) and one decode step alone */
    eval_acc acc;    /* sums over scored rows, the rows' KLD, the ratio after the first window */
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t *tokenize_file(const model *m, const char *path, int raw_ids, size_t *n_out, int32_t *bos) {
    int fd = regular_file_open(path, NULL); /* never blocks on a FIFO */
    FILE *fp = fd < 0 ? NULL : fdopen(fd, "rb");
    if (fp == NULL) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)sz + 1);
    size_t got = text ? fread(text, 1, (size_t)sz, fp) : 0;
    fclose(fp);
    int32_t *ids = NULL;
    if (text != NULL && got == (size_t)sz && raw_ids) { /* --ids: as stored, no BOS */
        *n_out = got / sizeof(int32_t);
        *bos = -1;
        return (int32_t *)text;
    }
    if (text != NULL && got == (size_t)sz) ids = eval_tokenize(m, text, got, n_out, bos); /* as llama-perplexity */
    free(text);
    return ids;
}

static int set_scheme(model_context *x, const run *r) {
    model_status st;
    if (r->local_f16) {
        const int nl = context_config(x)->n_layer;
        tq_kv_layer_scheme *ls = malloc((size_t)nl * sizeof *ls);
        tq_kv_scheme f16;
        if (ls == NULL || tq_kv_scheme_parse("f16", &f16, NULL, 0) != TQ_OK) return 0;
        for (int il = 0; il < nl; il++) ls[il] = model_layer_is_swa(context_model(x), il) ? f16.layer : r->scheme.layer;
        st = context_set_kv_layer_schemes(x, &r->scheme, ls);
        free(ls);
    } else {
        st = context_set_kv_scheme(x, &r->scheme);
    }
    if (st != MODEL_OK) fprintf(stderr, "%s: %s\n", r->name, context_last_error(x));
    return st == MODEL_OK;
}

/* One window with run r on x: the reference's log-probability rows ref (rows, n_vocab) are filled when
 * is_ref, else compared with. logits: (EVAL_PIECE, n_vocab); lp: (n_vocab). */
static int run_window(model_context *x, const int32_t *win, int ctx, run *r, int is_ref, float *ref, float *logits,
                      float *lp) {
    const int nv = context_config(x)->n_vocab, first = ctx / 2;
    if (!set_scheme(x, r)) return 0;
    const int n_pieces = eval_plan(ctx, r->view, NULL, 0);
    eval_piece *plan = malloc((size_t)n_pieces * sizeof *plan);
    model_status st = plan != NULL && eval_plan(ctx, r->view, plan, n_pieces) == n_pieces ? eval_prefill(x, win, ctx)
                                                                                          : MODEL_ERR_NOMEM;
    for (int k = 0; k < n_pieces && st == MODEL_OK; k++) {
        const eval_piece *pc = &plan[k];
        st = eval_run_piece(x, win, pc, logits);
        for (int i = 0; i < pc->n_score && st == MODEL_OK; i++) {
            float *rf = ref + (size_t)(pc->pos + i - first) * (size_t)nv;
            float *mine = is_ref ? rf : lp;
            eval_log_softmax(logits + (size_t)i * (size_t)nv, mine, nv);
            eval_score_row(&r->acc, rf, mine, nv, win[pc->pos + i + 1]);
        }
    }
    free(plan);
    if (st != MODEL_OK) {
        fprintf(stderr, "%s: %s\n", r->name, context_last_error(x));
        return 0;
    }
    if (r->acc.ratio == 0.0) r->acc.ratio = eval_kv_ratio(x, r->view, ctx);
    return 1;
}

static void print_table(run *runs, int n_runs, int windows, int ctx) {
    printf("\nctx %d, %d window%s, %ld scored rows per scheme; %s\n", ctx, windows, windows == 1 ? "" : "s",
           runs[0].acc.rows,
           runs[0].view == EVAL_PROMPT ? "prompt, then decode (--prompt: first half a raw prompt, compressed at the first decode step)"
           : runs[0].view == EVAL_AS_DECODE ? "as decode sees the cache (--as-decode: the newest < batch tokens fp16)"
                                  : "every key compressed (prefill_raw=0)");
    printf("%-14s %9s %9s %10s %10s %8s %7s\n", "scheme", "PPL", "dPPL", "KLD mean", "KLD p99", "top-1", "ratio");
    eval_summary s0;
    eval_summarize(&runs[0].acc, &s0);
    for (int i = 0; i < n_runs; i++) {
        run *r = &runs[i];
        eval_summary s;
        if (r->acc.rows == 0 || eval_summarize(&r->acc, &s) != 0) continue;
        printf("%-14s %9.4f %+9.4f %10.5f %10.5f %7.2f%% %6.2fx\n", r->name, s.ppl, s.ppl - s0.ppl, s.kld_mean,
               s.kld_p99, 100.0 * s.top1, r->acc.ratio);
    }
    fflush(stdout);
}

static void bench_speed(model_context *x, const int32_t *toks, int ctx, int threads) {
    const char *names[] = {"f16", "turbo3"};
    const int nv = context_config(x)->n_vocab, n_dec = 64, n_pre = ctx - n_dec;
    float *logits = malloc((size_t)nv * sizeof(float));
    if (logits == NULL) return;
    printf("\nspeed at ctx %d, %d threads (library defaults: prefill raw, compressed at the first decode step)\n",
           ctx, threads);
    for (int s = 0; s < 2; s++) {
        tq_kv_scheme sc;
        if (tq_kv_scheme_parse(names[s], &sc, NULL, 0) != TQ_OK || context_set_kv_scheme(x, &sc) != MODEL_OK) break;
        const int B = context_get_params(x)->max_batch;
        double t0 = now_s();
        model_status st = MODEL_OK;
        for (int p = 0; p < n_pre && st == MODEL_OK; p += B) {
            const int n = n_pre - p < B ? n_pre - p : B;
            st = context_forward(x, toks + p, n, p, 0, p + n == n_pre ? logits : NULL);
        }
        double t1 = now_s();
        int32_t next = sampler_argmax(logits, nv);
        st = st == MODEL_OK ? context_forward(x, &next, 1, n_pre, 0, logits) : st;
        double t2 = now_s();
        for (int i = 1; i < n_dec && st == MODEL_OK; i++) {
            next = sampler_argmax(logits, nv);
            st = context_forward(x, &next, 1, n_pre + i, 0, logits);
        }
        double t3 = now_s();
        if (st != MODEL_OK) {
            fprintf(stderr, "speed %s: %s\n", names[s], context_last_error(x));
            break;
        }
        tq_kv_memory mem;
        context_kv_memory(x, &mem);
        /* fp16 of every position of every layer: a cache without sliding-window page recycling */
        const model_config *c = context_config(x);
        double full = (double)ctx * c->n_layer * c->n_head_kv * 2.0 * (c->head_dim + c->head_dim_v);
        printf("%-7s prefill %d tokens: %7.1f tok/s; first decode step (compresses) %6.1f ms; decode %d..%d: %6.2f "
               "tok/s; KV %zu bytes (%.2fx smaller than f16 of the same tokens, %.2fx smaller than f16 of all "
               "%d positions of all layers)\n",
               names[s], n_pre, n_pre / (t1 - t0), 1e3 * (t2 - t1), n_pre + 1, ctx - 1, (n_dec - 1) / (t3 - t2),
               mem.data_bytes, (double)mem.f16_bytes / (double)mem.data_bytes, full / (double)mem.data_bytes, ctx);
        fflush(stdout);
    }
    free(logits);
}

int main(int argc, char **argv) {
    const char *model_path = getenv("TQ_MODEL") ? getenv("TQ_MODEL") : "models/gemma3-270m-q4_k_m.gguf";
    const char *text = "../shared/data/wikitext-2-raw-test.txt";
    const char *schemes = "f16,q8_0,q4_0,turbo4,turbo3.5,turbo3,turbo2,turbo4v3,turbo0v4,turbo8v3", *locals = "";
    eval_view view = EVAL_COMPRESSED;
    int ctx = 2048, windows = 20, threads = 2, speed = 0, quality = 1, raw_ids = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--speed") == 0) speed = 1;
        else if (strcmp(a, "--no-quality") == 0) quality = 0;
        else if (v != NULL && strcmp(a, "-m") == 0) model_path = v, i++;
        else if (v != NULL && strcmp(a, "-f") == 0) text = v, i++;
        else if (v != NULL && strcmp(a, "--ids") == 0) text = v, raw_ids = 1, i++;
        else if (v != NULL && strcmp(a, "-c") == 0) ctx = atoi(v), i++;
        else if (v != NULL && strcmp(a, "-w") == 0) windows = atoi(v), i++;
        else if (v != NULL && strcmp(a, "-t") == 0) threads = atoi(v), i++;
        else if (v != NULL && strcmp(a, "-s") == 0) schemes = v, i++;
        else if (v != NULL && strcmp(a, "-l") == 0) locals = v, i++;
        else if (strcmp(a, "--as-decode") == 0) view = EVAL_AS_DECODE;
        else if (strcmp(a, "--prompt") == 0) view = EVAL_PROMPT;
        else {
            fprintf(stderr, "usage: %s [-m model] [-f text | --ids ids.i32] [-c ctx] [-w windows] [-t threads] [-s schemes] "
                            "[-l schemes] [--as-decode | --prompt] [--speed] [--no-quality]\n", argv[0]);
            return 2;
        }
    }
    if (ctx < 2 * EVAL_PIECE || ctx % (2 * EVAL_PIECE) != 0 || windows < 1 || threads < 1) {
        fprintf(stderr, "ctx must be a multiple of %d, windows and threads >= 1\n", 2 * EVAL_PIECE);
        return 2;
    }
    const context_params p = {ctx, eval_context_batch(ctx), 0, NULL, 0};
    model *m = NULL;
    model_context *x = NULL;
    tq_threadpool *pool = NULL;
    char err[300];
    model_status ms = model_load(model_path, &m, err, sizeof err);
    if (ms == MODEL_OK) ms = tq_threadpool_create(&pool, threads) == TQ_OK ? MODEL_OK : MODEL_ERR_ARG;
    if (ms == MODEL_OK) ms = context_create(m, &p, pool, &x, err, sizeof err);
    if (ms != MODEL_OK) {
        fprintf(stderr, "%s: %s (%s)\n", model_path, err, model_status_name(ms));
        return 1;
    }
    size_t n_tok = 0;
    int32_t bos = -1;
    int32_t *toks = tokenize_file(m, text, raw_ids, &n_tok, &bos);
    if (toks == NULL || n_tok < (size_t)ctx) {
        fprintf(stderr, "cannot tokenize %s (or shorter than ctx)\n", text);
        context_free(x);
        model_free(m);
        tq_threadpool_free(pool);
        return 1;
    }
    if ((size_t)windows > n_tok / (size_t)ctx) windows = (int)(n_tok / (size_t)ctx);
    printf("%s: %zu tokens, ctx %d, %d windows, %d threads, kernels %s\n", text, n_tok, ctx, windows, threads,
           tq_kernels_name());

    run runs[MAX_RUNS];
    int n_runs = 0;
    memset(runs, 0, sizeof runs);
    for (int pass = 0; pass < 2 && quality; pass++) {
        char list[1024];
        snprintf(list, sizeof list, "%s%s", pass == 0 ? "f16," : "", pass == 0 ? schemes : locals);
        for (char *tokp = strtok(list, ","); tokp != NULL && n_runs < MAX_RUNS; tokp = strtok(NULL, ",")) {
            if (pass == 0 && n_runs > 0 && strcmp(tokp, "f16") == 0) continue; /* the reference runs first */
            run *r = &runs[n_runs];
            if (tq_kv_scheme_parse(tokp, &r->scheme, err, sizeof err) != TQ_OK) {
                fprintf(stderr, "scheme %s: %s\n", tokp, err);
                return 2;
            }
            eval_scheme_for_view(&r->scheme, view, strstr(tokp, "prefill_raw=") != NULL);
            r->local_f16 = pass == 1;
            r->view = view;
            snprintf(r->name, sizeof r->name, "%s%s", tokp, pass == 1 ? "/lf16" : "");
            if (eval_acc_init(&r->acc, (long)windows * eval_rows_per_window(ctx)) != 0) return 1;
            n_runs++;
        }
    }
    const int nv = model_get_config(m)->n_vocab, rows = eval_rows_per_window(ctx);
    float *ref = quality ? malloc((size_t)rows * (size_t)nv * sizeof(float)) : NULL;
    float *logits = malloc((size_t)EVAL_PIECE * (size_t)nv * sizeof(float));
    float *lp = malloc((size_t)nv * sizeof(float));
    int32_t *win = malloc((size_t)ctx * sizeof *win);
    if ((quality && ref == NULL) || logits == NULL || lp == NULL || win == NULL) return 1;
    const double t_start = now_s();
    for (int w = 0; w < windows && quality; w++) {
        eval_window_tokens(toks, w, ctx, bos, win);
        for (int i = 0; i < n_runs; i++) {
            const double nll0 = runs[i].acc.nll, kld0 = runs[i].acc.kld;
            const long rows0 = runs[i].acc.rows;
            if (!run_window(x, win, ctx, &runs[i], i == 0, ref, logits, lp)) return 1;
            const long nr = runs[i].acc.rows - rows0;
            printf("window %2d %-14s ppl %9.4f kld %9.5f (%.0f s)\n", w, runs[i].name,
                   exp((runs[i].acc.nll - nll0) / (double)nr), (runs[i].acc.kld - kld0) / (double)nr, now_s() - t_start);
            fflush(stdout);
        }
        print_table(runs, n_runs, w + 1, ctx);
    }
    if (speed) bench_speed(x, toks, ctx, threads);
    for (int i = 0; i < n_runs; i++) eval_acc_free(&runs[i].acc);
    free(ref);
    free(logits);
    free(lp);
    free(win);
    free(toks);
    context_free(x);
    model_free(m);
    tq_threadpool_free(pool);
    return 0;
}

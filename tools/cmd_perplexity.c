/*
 * tq perplexity: perplexity over a text file exactly as llama.cpp's llama-perplexity computes
 * it (tests/golden/gemma3_ppl.json, "description"), and for every KV scheme besides f16 the
 * divergence of its next-token distributions from the f16 run's: KLD mean, median and 99th
 * percentile, top-1 agreement, ΔPPL, and how much smaller than fp16 the cache is.
 *
 * The evaluation itself — windows (chunks), the scored pieces, the three views (default:
 * every key compressed; --as-decode; --prompt), the per-row arithmetic, the quantiles — is
 * engine/eval.c's, the same code bench_model_kv and tests/test_model_kv.c use: its header and
 * doc/gemma3.md §8 describe the method. This file holds the command: options, one sequence
 * (context) per scheme on the one loaded model, the order of the calls, and the output.
 *
 * Order. Chunk by chunk, f16 first, then each scheme runs the same piece of the chunk; only
 * one piece (EVAL_PIECE rows) of the f16 run's log-probabilities is held at a time, not a
 * chunk's. The "ratio" column: f16 bytes over the cache's bytes at the end of the first chunk
 * (eval_kv_ratio; with --as-decode / --prompt, as the scored decode steps hold it on average).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "eval.h"
#include "kv_auto.h"
#include "common.h"
#include "model_session.h"
#include "progress.h"
#include "sampler.h"

/* 0, or 1 after printing the engine's message. */
static int forward_check(const session_seq *q, model_status st) {
    if (st == MODEL_OK) return 0;
    fprintf(stderr, "tq perplexity: forward pass failed: %s (%s)\n", context_last_error(q->x), model_status_name(st));
    return 1;
}

int cmd_perplexity(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "perplexity", 512, SESSION_KV_WITH_F16);
    const char *text_path = NULL, *calib_path = NULL;
    long want_chunks = -1;
    int json = 0, decode_flag = 0, prompt_flag = 0, f32_act = 0;
    const tool_opt opts[] = {
        {OPT_STRING("-f", "TEXT", &text_path,
                    "text file, e.g. ../shared/data/wikitext-2-raw-test.txt (required)"),
         .required = 1},
        {OPT_INT("--chunks", "N", &want_chunks, 1, 1L << 30,
                 "score the first N chunks of CTX tokens (default: all)")},
        {OPT_FLAG("--as-decode", &decode_flag,
                  "score each position with the cache as token-by-token decode\n"
                  "leaves it (its newest tokens still fp16, the scheme's two-phase\n"
                  "rule); default: every key a scored position sees is compressed")},
        {OPT_FLAG("--prompt", &prompt_flag,
                  "the same after each chunk's first half went in as a raw prompt\n"
                  "(prefill_raw=1), compressed at the first scored position: what\n"
                  "generation after a prompt sees")},
        {OPT_FLAG("--f32-act", &f32_act,
                  "matmuls on fp32 activations (weights dequantized), not rounded\n"
                  "to 8 bits: KLD then measures the KV cache alone, without the\n"
                  "floor that redrawing that rounding adds (slower)")},
        {OPT_FLAG("--json", &json, "one JSON object on stdout instead of the table")},
        {OPT_STRING("--calib-file", "F",
                    &calib_path, "auto:B calibrates on the start of F (default: a built-in\n"
                                 "text, never the file scored)")},
    };
    const tool_cmd cmd = {
        .name = "perplexity",
        .synopsis = "usage: tq perplexity -f TEXT [-c CTX] [--chunks N] [--kv S[,S...]] [-m MODEL]\n"
                    "                     [-t THREADS] [--as-decode | --prompt] [--f32-act] [--json]\n"
                    "                     [--calib-file F]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
        .epilogue = "\nllama.cpp's method: BOS-tokenized text, non-overlapping chunks of CTX whose first\n"
                    "token becomes BOS, positions CTX/2..CTX-2 scored. Schemes other than f16 also get\n"
                    "KL divergence to the f16 run (mean, median, p99), top-1 agreement and delta PPL,\n"
                    "also in percent with its standard error (batch means over blocks of 128 scored\n"
                    "positions, which are not independent; '?' under 256 positions).\n"
                    "Progress goes to stderr.\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if (decode_flag && prompt_flag)
        return tool_opts_usage_error(&cmd, "--as-decode and --prompt exclude each other");
    const eval_view view = prompt_flag ? EVAL_PROMPT : decode_flag ? EVAL_AS_DECODE : EVAL_COMPRESSED;
    if ((rc = session_opts_finish(&o)) != 0) return rc;

    char *text = NULL;
    size_t text_len = 0;
    if ((rc = session_read_file("perplexity", text_path, &text, &text_len)) != 0) return rc;
    if (text_len > 0 && text[text_len - 1] == '\n') text_len--; /* as llama-perplexity */

    session s;
    session_seq seqs[SESSION_MAX_SCHEMES];
    eval_acc res[SESSION_MAX_SCHEMES];
    memset(seqs, 0, sizeof seqs);
    memset(res, 0, sizeof res);
    int32_t *toks = NULL, *batch = NULL, *calib = NULL;
    float *logits = NULL, *ref = NULL, *lp = NULL;
    eval_piece *plan = NULL;
    size_t n_tok = 0;
    const int n_schemes = o.n_schemes;
    if ((rc = session_open(&s, &o)) != 0) {
        free(text);
        return rc;
    }
    rc = session_tokenize(&s, text, text_len, 1, &toks, &n_tok);
    free(text);
    if (rc) goto done;
    const int ctx = s.n_ctx;
    const long avail = eval_windows(n_tok, ctx);
    if (avail < 1) {
        fprintf(stderr, "tq perplexity: '%s' is %zu tokens, fewer than one chunk of -c %d\n",
                text_path, n_tok, ctx);
        rc = 1;
        goto done;
    }
    long n_chunks = want_chunks < 0 ? avail : want_chunks;
    if (n_chunks > avail) {
        fprintf(stderr, "tq perplexity: the text has %ld chunks of %d; scoring %ld, not %ld\n",
                avail, ctx, avail, n_chunks);
        n_chunks = avail;
    }
    const long n_pos = n_chunks * eval_rows_per_window(ctx);
    if (calib_path != NULL) { /* auto:B's calibration text (default: the built-in one) */
        char *ct = NULL;
        size_t ct_len = 0, n_calib = 0;
        if ((rc = session_read_file("perplexity", calib_path, &ct, &ct_len)) != 0) goto done;
        rc = session_tokenize(&s, ct, ct_len, 1, &calib, &n_calib);
        free(ct);
        if (rc) goto done;
        if (n_calib < KV_AUTO_MIN_TOKENS) {
            fprintf(stderr, "tq perplexity: --calib-file '%s' is %zu tokens; auto:B needs at least %d\n", calib_path,
                    n_calib, KV_AUTO_MIN_TOKENS);
            rc = TQ_EXIT_USAGE;
            goto done;
        }
        session_set_calibration(&s, calib, n_calib, calib_path);
    }
    s.f32_act = f32_act;
    for (int k = 0; k < n_schemes; k++) {
        eval_scheme_for_view(&o.schemes[k].scheme, view, strstr(o.schemes[k].name, "prefill_raw=") != NULL);
        if ((rc = session_seq_open(&s, &o.schemes[k], eval_context_batch(ctx), &seqs[k])) != 0) goto done;
        if (eval_acc_init(&res[k], n_pos) != 0) goto nomem;
    }
    const int nv = s.cfg.n_vocab;
    const int n_pieces = eval_plan(ctx, view, NULL, 0);
    plan = malloc((size_t)n_pieces * sizeof *plan);
    if (plan == NULL || eval_plan(ctx, view, plan, n_pieces) != n_pieces) goto nomem;
    const int32_t bos = tokenizer_add_bos(s.tok) ? tokenizer_bos_id(s.tok) : -1; /* as llama-perplexity */
    batch = malloc((size_t)ctx * sizeof *batch);
    logits = malloc((size_t)EVAL_PIECE * (size_t)nv * sizeof *logits);
    ref = malloc((size_t)EVAL_PIECE * (size_t)nv * sizeof *ref);
    lp = malloc((size_t)nv * sizeof *lp);
    if (!batch || !logits || !ref || !lp) goto nomem;

    if (!json)
        printf("perplexity of %s: %zu tokens, %ld of %ld chunks of %d, %ld positions scored\n",
               text_path, n_tok, n_chunks, avail, ctx, n_pos);
    if (!json && n_schemes > 1)
        printf("%s\n", view == EVAL_PROMPT ? "the first half of each chunk is a raw prompt, the scored half decoded after it (--prompt)"
                        : view == EVAL_AS_DECODE ? "each position sees the cache as token-by-token decode leaves it (--as-decode)"
                                 : "every key a scored position sees is compressed (the worst case; "
                                   "--as-decode scores as decode sees the cache)");
    if (!json)
        printf("%s\n", f32_act ? "matmuls on fp32 activations (--f32-act): the KLD is the KV cache's alone"
                               : "matmuls on 8-bit activations (as llama.cpp): every KLD carries the floor their "
                                 "rounding adds (--f32-act removes it)");
    fflush(stdout);
    progress pb;
    progress_start(&pb, "perplexity", "chunks", n_chunks);
    double t0 = tool_now();
    for (long c = 0; c < n_chunks; c++) {
        eval_window_tokens(toks, c, ctx, bos, batch);
        for (int k = 0; k < n_schemes; k++)
            if ((rc = forward_check(&seqs[k], eval_prefill(seqs[k].x, batch, ctx))) != 0) goto done;
        for (int i = 0; i < n_pieces; i++) {
            const eval_piece *pc = &plan[i];
            for (int k = 0; k < n_schemes; k++) {
                if ((rc = forward_check(&seqs[k], eval_run_piece(seqs[k].x, batch, pc, logits))) != 0) goto done;
                for (int r = 0; r < pc->n_score; r++) {
                    float *rf = ref + (size_t)r * (size_t)nv, *mine = k == 0 ? rf : lp;
                    eval_log_softmax(logits + (size_t)r * (size_t)nv, mine, nv);
                    eval_score_row(&res[k], rf, mine, nv, batch[pc->pos + r + 1]);
                }
            }
        }
        for (int k = 0; k < n_schemes; k++)
            if (res[k].ratio == 0.0) res[k].ratio = eval_kv_ratio(seqs[k].x, view, ctx);
        char note[64];
        snprintf(note, sizeof note, "f16 ppl %.4f", exp(res[0].nll / (double)res[0].rows));
        progress_update(&pb, c + 1, note);
    }
    progress_end(&pb);
    double dt = tool_now() - t0;

    const long scored = res[0].rows;
    eval_summary s16;
    eval_summarize(&res[0], &s16);
    if (json) {
        printf("{\"ctx\":%d,\"chunks\":%ld,\"tokens_scored\":%ld,\"tokens\":%zu,\"seconds\":%.3f,"
               "\"as_decode\":%s,\"prompt\":%s,\"f32_act\":%s,\"results\":[",
               ctx, n_chunks, scored, n_tok, dt, view != EVAL_COMPRESSED ? "true" : "false",
               view == EVAL_PROMPT ? "true" : "false", f32_act ? "true" : "false");
    } else {
        printf("%-14s %9s %9s %10s %10s %10s %8s %7s %10s  %s\n", "scheme", "PPL", "dPPL", "KLD mean",
               "KLD median", "KLD p99", "top-1", "ratio", "KV B/tok", "dPPL% +- SE");
    }
    for (int k = 0; k < n_schemes; k++) {
        eval_summary e;
        if (eval_summarize(&res[k], &e) != 0) goto nomem;
        size_t bpt = session_kv_bytes_per_token(&seqs[k]);
        if (json) {
            printf("%s{\"scheme\":", k ? "," : "");
            session_json_str(stdout, o.schemes[k].name);
            printf(",\"ppl\":%.6f,\"delta_ppl\":%.6f,\"delta_ppl_pct\":%.6f,", e.ppl, e.ppl - s16.ppl, e.dppl_pct);
            if (e.dppl_pct_se >= 0.0) printf("\"delta_ppl_pct_se\":%.6f,", e.dppl_pct_se);
            else printf("\"delta_ppl_pct_se\":null,");
            printf("\"kld_mean\":%.6g,\"kld_median\":%.6g,\"kld_p99\":%.6g,\"top1\":%.6f,\"kv_ratio\":%.4f,"
                   "\"kv_bytes_per_token\":%zu}",
                   e.kld_mean, e.kld_median, e.kld_p99, e.top1, res[k].ratio, bpt);
        } else {
            printf("%-14s %9.4f %+9.4f %10.5f %10.5f %10.5f %7.2f%% %6.2fx %10zu  %+.2f", o.schemes[k].name,
                   e.ppl, e.ppl - s16.ppl, e.kld_mean, e.kld_median, e.kld_p99, 100.0 * e.top1, res[k].ratio, bpt,
                   e.dppl_pct);
            if (e.dppl_pct_se >= 0.0) printf(" +- %.2f\n", e.dppl_pct_se);
            else printf(" +- ?\n");
        }
    }
    if (json) printf("]}\n");
    else
        printf("%ld positions scored in %.1f s (%.0f tokens/s evaluated, all schemes)\n", scored,
               dt, dt > 0 ? (double)n_chunks * (ctx - 1) * n_schemes / dt : 0.0);
    rc = 0;
    goto done;
nomem:
    fprintf(stderr, "tq perplexity: out of memory\n");
    rc = 1;
done:
    for (int k = 0; k < n_schemes; k++) {
        session_seq_close(&seqs[k]);
        eval_acc_free(&res[k]);
    }
    free(toks);
    free(calib);
    free(batch);
    free(logits);
    free(ref);
    free(lp);
    free(plan);
    session_close(&s);
    return rc;
}

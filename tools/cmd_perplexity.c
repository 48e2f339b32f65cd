/*
 * tq perplexity: perplexity over a text file exactly as llama.cpp's llama-perplexity computes
 * it (tests/golden/gemma3_ppl.json, "description"), and for every KV scheme besides f16 the
 * divergence of its next-token distributions from the f16 run's.
 *
 * Method. The file is read as bytes, one trailing '\n' removed, tokenized once with BOS. The
 * tokens are cut into consecutive chunks of CTX (the remainder is dropped); in each chunk the
 * first token is replaced by BOS, the chunk runs from position 0 on an empty cache, and the
 * logits at positions CTX/2 .. CTX-2 are scored against the next original token:
 * NLL = logsumexp(logits) − logit[target] in double; PPL = exp(Σ NLL / positions).
 *
 * Comparison. Every scheme has its own sequence. Chunk by chunk, f16 first, then each scheme
 * runs the same tokens; the scored positions are evaluated SUB at a time, f16's rows first, so
 * only SUB rows of f16 logits are ever held (not a chunk's 255 × n_vocab). Per position:
 *   KLD = Σ_i p_i (log p_i − log q_i), p = softmax(f16 logits), q = softmax(scheme logits)
 *       = Σ_i p_i (x_i − y_i) − lse(x) + lse(y)
 * (llama.cpp's KL direction: the f16 distribution is the reference); top-1 agreement: the
 * same argmax. Mean, median and 99th percentile (linear interpolation between order
 * statistics) over all scored positions; ΔPPL = PPL(scheme) − PPL(f16).
 *
 * Compression during prefill. By default the library keeps multi-token appends raw until the
 * first decode step (prefill_raw = 1), which a prefill-only evaluation never reaches: the
 * scores would be f16's. Schemes run here with prefill_raw = 0 (compress on every forward;
 * after a call ending at length L, tokens [0, batch·floor(L/batch)) are compressed before
 * that call's attention) unless the scheme text sets prefill_raw itself (with --as-decode
 * always: decode ends a prompt's raw phase at its first step). The scored positions
 * run in calls ending at multiples of SUB (the last at CTX, its unscored last position
 * included), so every key a scored query sees, its own included, is compressed: the
 * figures of a fully compressed cache, the worst case of each scheme. With --as-decode each
 * scheme's SUB positions — the f16 reference's too — run instead in the chunks of
 * tq_kv_scheme_decode_chunk (63 tokens, then 1, with the default batch of 64): every query
 * sees each key exactly as token-by-token decode would show it — the newest tokens the
 * two-phase rule keeps fp16 included — at prefill cost. The reference takes the same chunks
 * because a single-token step sums attention in another order than a 64-token call, and the
 * model's rounding steps (8-bit activations inside the matmuls, fp16 K/V) amplify such
 * differences to a mean KLD of about 0.005 on their own: comparing like with like keeps that
 * out. With --prompt each chunk's first half is instead a prompt prefilled as `tq generate`
 * prefills one (prefill_raw = 1: raw, attention exact), and the scored half runs as the
 * generation after it: its first position alone (the decode step that compresses the prompt,
 * taking the key mean, scale and split from the prompt's tokens), the rest as --as-decode.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "progress.h"
#include "sampler.h"

/* Logits rows per forward call: SUB × n_vocab floats are held for f16 and for the scheme in
 * turn (64 MiB each with Gemma 3's 262144). Equal to the library's default compression batch:
 * calls end at multiples of it, so every key a scored query sees is compressed. */
#define SUB 64

typedef struct scheme_result {
    double nll;      /* Σ NLL over scored positions */
    double *kld;     /* (n_positions) per-position KLD against f16 */
    long top1_same;  /* positions whose argmax matches f16's */
} scheme_result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* q-quantile of sorted v[0..n) by linear interpolation at (n − 1)·q. */
static double quantile(const double *v, long n, double q) {
    if (n <= 0) return 0;
    double at = q * (double)(n - 1);
    long lo = (long)at;
    if (lo >= n - 1) return v[n - 1];
    return v[lo] + (at - (double)lo) * (v[lo + 1] - v[lo]);
}

/* KLD of q = softmax(y) from p = softmax(x), given both log-sum-exps. */
static double kl_row(const float *x, double lse_x, const float *y, double lse_y, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        double lp = (double)x[i] - lse_x;
        s += exp(lp) * ((double)x[i] - (double)y[i]);
    }
    double kl = s - lse_x + lse_y;
    return kl > 0 ? kl : 0.0; /* rounding can take an exact 0 slightly negative */
}

int cmd_perplexity(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "perplexity", 512, SESSION_KV_WITH_F16);
    const char *text_path = NULL;
    long want_chunks = -1;
    int json = 0, decode_flag = 0, prompt_flag = 0;
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
        {OPT_FLAG("--json", &json, "one JSON object on stdout instead of the table")},
    };
    const tool_cmd cmd = {
        .name = "perplexity",
        .synopsis = "usage: tq perplexity -f TEXT [-c CTX] [--chunks N] [--kv S[,S...]] [-m MODEL]\n"
                    "                     [-t THREADS] [--as-decode | --prompt] [--json]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
        .epilogue = "\nllama.cpp's method: BOS-tokenized text, non-overlapping chunks of CTX whose first\n"
                    "token becomes BOS, positions CTX/2..CTX-2 scored. Schemes other than f16 also get\n"
                    "KL divergence to the f16 run (mean, median, p99), top-1 agreement and delta PPL.\n"
                    "Progress goes to stderr.\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if (decode_flag && prompt_flag)
        return tool_opts_usage_error(&cmd, "--as-decode and --prompt exclude each other");
    const int as_decode = prompt_flag ? 2 : decode_flag; /* 0, 1 --as-decode, 2 --prompt */
    if ((rc = session_opts_finish(&o)) != 0) return rc;

    char *text = NULL;
    size_t text_len = 0;
    if ((rc = session_read_file("perplexity", text_path, &text, &text_len)) != 0) return rc;
    if (text_len > 0 && text[text_len - 1] == '\n') text_len--; /* as llama-perplexity */

    session s;
    session_seq seqs[SESSION_MAX_SCHEMES];
    scheme_result res[SESSION_MAX_SCHEMES];
    memset(seqs, 0, sizeof seqs);
    memset(res, 0, sizeof res);
    int32_t *toks = NULL, *batch = NULL;
    float *ref = NULL, *cur = NULL;
    double *ref_lse = NULL;
    int32_t *ref_top = NULL;
    size_t n_tok = 0;
    const int n_schemes = o.n_schemes;
    if ((rc = session_open(&s, &o)) != 0) {
        free(text);
        return rc;
    }
    rc = session_tokenize(&s, text, text_len, 1, &toks, &n_tok);
    free(text);
    if (rc) goto done;
    const int ctx = s.n_ctx, first = ctx / 2, per_chunk = ctx - 1 - first;
    const long avail = (long)(n_tok / (size_t)ctx);
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
    const long n_pos = n_chunks * per_chunk;
    for (int k = 0; k < n_schemes; k++) {
        /* As decode, a prompt's raw phase ends at the first decode step anyway (same state);
         * --prompt keeps the first half raw. */
        if (as_decode == 2) o.schemes[k].scheme.prefill_raw = 1;
        else if (as_decode || !strstr(o.schemes[k].name, "prefill_raw=")) o.schemes[k].scheme.prefill_raw = 0;
        if ((rc = session_seq_open(&s, &o.schemes[k], ctx, &seqs[k])) != 0) goto done;
        if (k > 0 && (res[k].kld = malloc((size_t)n_pos * sizeof(double))) == NULL) goto nomem;
    }
    const int nv = s.cfg.n_vocab;
    const int32_t bos = tokenizer_bos_id(s.tok);
    batch = malloc((size_t)ctx * sizeof *batch);
    ref = malloc((size_t)SUB * (size_t)nv * sizeof *ref);
    cur = n_schemes > 1 ? malloc((size_t)SUB * (size_t)nv * sizeof *cur) : NULL;
    ref_lse = malloc(SUB * sizeof *ref_lse);
    ref_top = malloc(SUB * sizeof *ref_top);
    if (!batch || !ref || (n_schemes > 1 && !cur) || !ref_lse || !ref_top) goto nomem;

    if (!json)
        printf("perplexity of %s: %zu tokens, %ld of %ld chunks of %d, %ld positions scored\n",
               text_path, n_tok, n_chunks, avail, ctx, n_pos);
    if (!json && n_schemes > 1)
        printf("%s\n", as_decode == 2 ? "the first half of each chunk is a raw prompt, the scored half decoded after it (--prompt)"
                        : as_decode    ? "each position sees the cache as token-by-token decode leaves it (--as-decode)"
                                 : "every key a scored position sees is compressed (the worst case; "
                                   "--as-decode scores as decode sees the cache)");
    fflush(stdout);
    progress pb;
    progress_start(&pb, "perplexity", "chunks", n_chunks);
    double t0 = tool_now();
    long scored = 0;
    for (long c = 0; c < n_chunks; c++) {
        const int32_t *orig = toks + (size_t)c * (size_t)ctx;
        memcpy(batch, orig, (size_t)ctx * sizeof *batch);
        if (bos >= 0) batch[0] = bos;
        /* Positions before CTX/2 are context only: no logits. The last position is never
         * scored (it has no next token in the chunk) but is run, so that the last call ends
         * at a multiple of 64 too: without it, that call's own 63 tokens would stay fp16. */
        for (int k = 0; k < n_schemes; k++) {
            session_seq_reset(&seqs[k]);
            if ((rc = session_forward(&seqs[k], batch, first, 0, 0, NULL)) != 0) goto done;
        }
        for (int p = first, n_run; p < ctx - 1; p += n_run) {
            /* calls end at multiples of SUB (of any batch dividing it) or at CTX */
            n_run = SUB - p % SUB < ctx - p ? SUB - p % SUB : ctx - p;
            const int n = ctx - 1 - p < n_run ? ctx - 1 - p : n_run;
            /* --prompt: the piece at the first scored position starts with the prompt's first
             * decode step; later pieces run as --as-decode */
            const int mode = as_decode == 2 && p != first ? 1 : as_decode;
            if ((rc = session_forward_rows(&seqs[0], batch + p, n_run, p, mode, ref)) != 0)
                goto done;
            for (int r = 0; r < n; r++) {
                const float *row = ref + (size_t)r * (size_t)nv;
                ref_lse[r] = session_logsumexp(row, nv);
                ref_top[r] = sampler_argmax(row, nv);
                res[0].nll += ref_lse[r] - (double)row[orig[p + r + 1]];
            }
            for (int k = 1; k < n_schemes; k++) {
                if ((rc = session_forward_rows(&seqs[k], batch + p, n_run, p, mode, cur)) != 0)
                    goto done;
                for (int r = 0; r < n; r++) {
                    const float *row = cur + (size_t)r * (size_t)nv;
                    double lse = session_logsumexp(row, nv);
                    res[k].nll += lse - (double)row[orig[p + r + 1]];
                    res[k].top1_same += sampler_argmax(row, nv) == ref_top[r];
                    res[k].kld[scored + r] =
                        kl_row(ref + (size_t)r * (size_t)nv, ref_lse[r], row, lse, nv);
                }
            }
            scored += n;
        }
        char note[64];
        snprintf(note, sizeof note, "f16 ppl %.4f", exp(res[0].nll / (double)scored));
        progress_update(&pb, c + 1, note);
    }
    progress_end(&pb);
    double dt = tool_now() - t0;

    const double ppl16 = exp(res[0].nll / (double)scored);
    if (json) {
        printf("{\"ctx\":%d,\"chunks\":%ld,\"tokens_scored\":%ld,\"tokens\":%zu,\"seconds\":%.3f,"
               "\"as_decode\":%s,\"prompt\":%s,\"results\":[",
               ctx, n_chunks, scored, n_tok, dt, as_decode ? "true" : "false", as_decode == 2 ? "true" : "false");
    } else {
        printf("%-14s %10s %9s %10s %10s %10s %8s %10s\n", "scheme", "PPL", "dPPL", "KLD mean",
               "KLD median", "KLD p99", "top-1", "KV B/tok");
    }
    for (int k = 0; k < n_schemes; k++) {
        double ppl = exp(res[k].nll / (double)scored), mean = 0, med = 0, p99 = 0, top1 = 1;
        if (k > 0) {
            for (long i = 0; i < scored; i++) mean += res[k].kld[i];
            mean /= (double)scored;
            qsort(res[k].kld, (size_t)scored, sizeof(double), cmp_double);
            med = quantile(res[k].kld, scored, 0.5);
            p99 = quantile(res[k].kld, scored, 0.99);
            top1 = (double)res[k].top1_same / (double)scored;
        }
        size_t bpt = session_kv_bytes_per_token(&seqs[k]);
        if (json) {
            printf("%s{\"scheme\":", k ? "," : "");
            session_json_str(stdout, o.schemes[k].name);
            printf(",\"ppl\":%.6f,\"delta_ppl\":%.6f,\"kld_mean\":%.6g,\"kld_median\":%.6g,"
                   "\"kld_p99\":%.6g,\"top1\":%.6f,\"kv_bytes_per_token\":%zu}",
                   ppl, ppl - ppl16, mean, med, p99, top1, bpt);
        } else {
            printf("%-14s %10.4f %+9.4f %10.6f %10.6f %10.6f %7.2f%% %10zu\n", o.schemes[k].name,
                   ppl, ppl - ppl16, mean, med, p99, 100.0 * top1, bpt);
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
        free(res[k].kld);
    }
    free(toks);
    free(batch);
    free(ref);
    free(cur);
    free(ref_lse);
    free(ref_top);
    session_close(&s);
    return rc;
}

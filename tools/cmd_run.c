/*
 * tq run: the one-command demonstration. On the default model, greedy-decode N tokens of a
 * built-in prompt with the f16 KV cache and with a compressed scheme (turbo3 unless --kv
 * says otherwise), print both texts, the KV bytes per token of each, prefill and decode speed,
 * and how far the compressed run's next-token distributions are from f16's along the f16
 * continuation: the f16 tokens are forced through the compressed sequence one decode step at
 * a time (as generation would run them; in a fork of the compressed run's prompt, which is
 * prefilled once), and at each of the N steps
 *   KLD = Σ p_f16 (log p_f16 − log p_scheme)   and   top-1 agreement (same argmax).
 * A scheme the engine cannot run is reported as pending.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "sampler.h"

/* Long enough (about 200 tokens) that the compressed run really compresses: the library
 * compresses whole batches of 64 tokens, from the first decode step on. */
static const char *const default_prompt =
    "The history of the printing press begins long before Gutenberg. In China, craftsmen carved "
    "whole pages into wooden blocks, inked them and pressed paper onto the wood, and by the "
    "eleventh century an artisan named Bi Sheng had made movable characters of baked clay. "
    "Korean printers later cast type in bronze and printed Buddhist texts with it. In Europe, "
    "books were still copied by hand in monasteries, slowly and at great cost, and a single "
    "bible could take a scribe more than a year. Around 1440, in the city of Mainz, a goldsmith "
    "named Johannes Gutenberg combined several ideas: type cast from a metal alloy in a "
    "hand mould, an oil-based ink that clung to metal, and a screw press adapted from the ones "
    "used to make wine. The result was a machine that could print hundreds of pages a day. "
    "Within fifty years, printing shops had opened in more than two hundred European towns, and";

typedef struct run_stats {
    double t_prefill, t_decode;
    int n_prompt, n_decoded, n_out;
} run_stats;

/* Greedy decode of up to n tokens after prompt[0..n_prompt) into out (prompt included,
 * capacity n_prompt + n). When rows is not NULL, the logits that chose each token are kept
 * there ((n, n_vocab)). When force is not NULL the tokens are not chosen but read from it
 * (teacher forcing) and cmp_rows, the f16 rows, are compared on the fly: kld[i], agree[i].
 * prefilled: q already holds the prompt and logits its last row (no prefill here). */
static int decode(session *s, session_seq *q, int prefilled, int32_t *out, int n_prompt, int n, float *logits,
                  float *rows, const int32_t *force, const float *cmp_rows, double *kld,
                  int *agree, run_stats *st) {
    const int nv = s->cfg.n_vocab;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    double t0 = tool_now();
    if (!prefilled) {
        session_seq_reset(q);
        if (session_forward(q, out, n_prompt, 0, 0, logits)) return 1;
    }
    st->t_prefill = tool_now() - t0;
    t0 = tool_now();
    int pos = n_prompt;
    for (int i = 0; i < n; i++) {
        if (rows) memcpy(rows + (size_t)i * (size_t)nv, logits, (size_t)nv * sizeof *logits);
        int32_t tok = sampler_argmax(logits, nv);
        if (force) {
            const float *ref = cmp_rows + (size_t)i * (size_t)nv;
            double lr = session_logsumexp(ref, nv), lc = session_logsumexp(logits, nv), acc = 0;
            for (int j = 0; j < nv; j++) acc += exp((double)ref[j] - lr) * ((double)ref[j] - (double)logits[j]);
            kld[i] = fmax(0.0, acc - lr + lc);
            agree[i] = tok == sampler_argmax(ref, nv);
            tok = force[i];
        } else if (session_is_stop(s, tok)) {
            break;
        }
        out[pos] = tok;
        st->n_out++;
        if (i + 1 == n || pos + 1 >= s->n_ctx) break;
        if (session_forward(q, &out[pos], 1, pos, 0, logits)) return 1;
        pos++;
        st->n_decoded++;
    }
    st->t_decode = tool_now() - t0;
    return 0;
}

static void print_run(session *s, const session_seq *q, const int32_t *toks, const run_stats *st) {
    char text[8192];
    size_t len = 0;
    for (int i = 0; i < st->n_out && len + 256 < sizeof text; i++)
        len += session_piece(s, toks[st->n_prompt + i], text + len, sizeof text - len);
    text[len] = 0;
    size_t bpt = session_kv_bytes_per_token(q), f16 = session_kv_f16_bytes(&s->cfg, 1);
    tq_kv_memory mem;
    if (session_kv_memory(q, &mem)) memset(&mem, 0, sizeof mem);
    printf("[%s] ...%s\n", q->scheme.name, text);
    printf("    KV %zu bytes/token compressed (f16: %zu, %.2fx), in use %.1f KiB for %d tokens "
           "(%zu compressed)\n",
           bpt, f16, bpt ? (double)f16 / (double)bpt : 0.0, (double)mem.data_bytes / 1024,
           session_seq_len(q), mem.compressed_tokens / (size_t)s->cfg.n_layer);
    printf("    prefill %d tokens %.1f tok/s, decode %d tokens %.1f tok/s\n\n", st->n_prompt,
           st->t_prefill > 0 ? st->n_prompt / st->t_prefill : 0.0, st->n_decoded,
           st->t_decode > 0 && st->n_decoded ? st->n_decoded / st->t_decode : 0.0);
}

int cmd_run(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "run", 512, SESSION_KV_VS_F16);
    const char *prompt = default_prompt;
    long n_gen = 48;
    const tool_opt opts[] = {
        {OPT_STRING("-p", "PROMPT", &prompt, "prompt (default: a paragraph on the history of printing)")},
        {OPT_INT("-n", "N", &n_gen, 1, 4096, "tokens to decode greedily (default 48)")},
    };
    const tool_cmd cmd = {
        .name = "run",
        .synopsis = "usage: tq run [-p PROMPT] [-n N] [--kv SCHEME] [-m MODEL] [-c CTX] [-t THREADS]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    /* The compared scheme: --kv or turbo3; it may be one the engine cannot run yet. */
    session_scheme f16, cmp;
    char err[256];
    if ((o.cache_type_k || o.cache_type_v) && (rc = session_opts_finish(&o)) != 0)
        return rc; /* builds and checks the scheme from the types */
    if (session_scheme_parse(o.n_schemes ? o.schemes[0].name : "turbo3", &cmp, err, sizeof err) ||
        session_scheme_parse("f16", &f16, err, sizeof err)) {
        fprintf(stderr, "tq run: --kv: %s\n", err);
        return TQ_EXIT_USAGE;
    }
    const int run_cmp = !cmp.is_f16 && session_engine_supports(&cmp);

    session s;
    session_seq q, qf;
    memset(&q, 0, sizeof q);
    memset(&qf, 0, sizeof qf);
    int32_t *ids = NULL, *toks16 = NULL, *toksc = NULL, *agree = NULL;
    float *logits = NULL, *first = NULL, *rows = NULL;
    double *kld = NULL;
    size_t n_prompt = 0;
    if ((rc = session_open(&s, &o)) != 0) return rc;
    if ((rc = session_tokenize(&s, prompt, strlen(prompt), 1, &ids, &n_prompt))) goto done;
    session_set_calibration(&s, ids, n_prompt, "the prompt"); /* auto:B */
    if (n_prompt + (size_t)n_gen > (size_t)s.n_ctx) {
        fprintf(stderr, "tq run: %zu prompt tokens + -n %ld do not fit -c %d\n", n_prompt, n_gen,
                s.n_ctx);
        rc = TQ_EXIT_USAGE;
        goto done;
    }
    const int nv = s.cfg.n_vocab, n = (int)n_gen, np = (int)n_prompt;
    size_t cap = n_prompt + (size_t)n;
    toks16 = malloc(cap * sizeof *toks16);
    toksc = malloc(cap * sizeof *toksc);
    logits = malloc((size_t)nv * sizeof *logits);
    first = malloc((size_t)nv * sizeof *first);
    rows = run_cmp ? malloc((size_t)n * (size_t)nv * sizeof *rows) : NULL;
    kld = malloc((size_t)n * sizeof *kld);
    agree = malloc((size_t)n * sizeof *agree);
    if (!toks16 || !toksc || !logits || !first || (run_cmp && !rows) || !kld || !agree) {
        fprintf(stderr, "tq run: out of memory\n");
        rc = 1;
        goto done;
    }
    memcpy(toks16, ids, n_prompt * sizeof *ids);
    memcpy(toksc, ids, n_prompt * sizeof *ids);

    printf("tq run: %s\n    %d layers, %d KV heads x (%d + %d) dims, vocab %d; %d threads\n",
           s.model_path, s.cfg.n_layer, s.cfg.n_head_kv, s.cfg.head_dim, s.cfg.head_dim_v, nv,
           s.n_threads);
    printf("prompt (%d tokens): %.*s%s\n\n", np, 160, prompt, strlen(prompt) > 160 ? "..." : "");
    fflush(stdout);

    run_stats st16, stc, stf;
    if ((rc = session_seq_open(&s, &f16, 512, &q))) goto done;
    if ((rc = decode(&s, &q, 0, toks16, np, n, logits, rows, NULL, NULL, NULL, NULL, &st16))) goto done;
    print_run(&s, &q, toks16, &st16);
    session_seq_close(&q);
    if (!run_cmp) {
        printf("[%s] %s\n", cmp.name,
               cmp.is_f16 ? "is f16: nothing to compare"
                          : "pending: the engine cannot run this scheme yet");
        rc = 0;
        goto done;
    }
    if ((rc = session_seq_open(&s, &cmp, 512, &q))) goto done;
    /* The prompt once: the teacher-forced run goes on from a fork of it (context_fork), which
     * gives the logits a second prefill would, bit for bit. */
    double t0 = tool_now();
    if ((rc = session_forward(&q, toksc, np, 0, 0, logits))) goto done;
    const double t_prefill = tool_now() - t0;
    memcpy(first, logits, (size_t)nv * sizeof *logits);
    if ((rc = session_seq_fork(&s, &q, &qf))) goto done;
    if ((rc = decode(&s, &q, 1, toksc, np, n, logits, NULL, NULL, NULL, NULL, NULL, &stc))) goto done;
    stc.t_prefill = t_prefill;
    print_run(&s, &q, toksc, &stc);
    /* Teacher forcing: the f16 tokens through the compressed cache. */
    memcpy(logits, first, (size_t)nv * sizeof *logits);
    if ((rc = decode(&s, &qf, 1, toksc, np, st16.n_out, logits, NULL, toks16 + np, rows, kld, agree,
                     &stf)))
        goto done;
    double mean = 0, mx = 0;
    int same = 0;
    for (int i = 0; i < st16.n_out; i++) {
        mean += kld[i];
        mx = fmax(mx, kld[i]);
        same += agree[i];
    }
    mean /= st16.n_out > 0 ? st16.n_out : 1;
    printf("%s vs f16 along the f16 continuation (%d positions): KLD mean %.6f, max %.6f; "
           "top-1 agreement %.1f%%\n",
           cmp.name, st16.n_out, mean, mx, 100.0 * same / (st16.n_out > 0 ? st16.n_out : 1));
    rc = 0;
done:
    session_seq_close(&qf);
    session_seq_close(&q);
    free(ids);
    free(toks16);
    free(toksc);
    free(logits);
    free(first);
    free(rows);
    free(kld);
    free(agree);
    session_close(&s);
    return rc;
}

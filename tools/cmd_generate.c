/*
 * tq generate: text continuation of a prompt, streamed token by token.
 *
 * The prompt is tokenized with BOS, run as one prefill (in pieces ending at multiples of
 * --prefill-chunk, default 512: tq serve's chunking, so the same N gives its answers), then
 * tokens are sampled one at a time (engine/sampler.h: greedy at --temp 0, else temperature with
 * top-k / top-p, seeded) and each one's text is written to stdout and flushed as soon as it is
 * known. Generation stops after -n tokens, at EOS or a control token, or when the context (-c)
 * is full. Afterwards stderr gets prefill and decode speed and the KV bytes in use (the
 * library's count: compressed tokens at their code size, the still-raw newest ones at fp16)
 * against what fp16 K and V would take.
 *
 * --prompt-cache FILE (llama.cpp's flag; doc/prompt-cache.md): when FILE is a prompt cache of
 * this model file and KV scheme whose tokens are a prefix of the prompt's, the sequence is
 * restored from it and only the rest is prefilled (at least two tokens: one alone would be a
 * decode step); a whole-prompt match takes the stored logits of the last position, so its
 * output is bit for bit the one without the cache. Anything else is one line on stderr and a
 * fresh prefill. After
 * the prompt the file is saved atomically (a failure is reported, not fatal). The context keeps
 * the sliding-window layers' whole history so that it can be saved at any length.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "prompt_cache.h"
#include "sampler.h"
#include "sampling_opts.h"

#define GEN_MAX_BATCH 512

static void print_bytes(FILE *f, size_t b) {
    if (b >= (size_t)1 << 20) fprintf(f, "%.2f MiB", (double)b / (1 << 20));
    else fprintf(f, "%.1f KiB", (double)b / 1024);
}

/* Restores what FILE holds of the prompt ids[0, n) into q: returns the positions kept (0: a
 * fresh prefill), with *have_logits set when logits holds the last position's row. Every
 * reason not to use the file is one line on stderr. */
static int restore_prompt(const char *path, session_seq *q, const int32_t *ids, int n, float *logits,
                          int *have_logits) {
    prompt_cache_tokens t;
    char why[320];
    *have_logits = 0;
    prompt_cache_status st = prompt_cache_load(path, q->x, &t, why, sizeof why);
    if (st != PCACHE_OK) {
        fprintf(stderr, "tq generate: prompt cache '%s' not used: %s%s\n", path, why,
                st == PCACHE_ERR_ABSENT ? " (it will be written)" : "; prefilling the whole prompt");
        return 0;
    }
    int keep = 0;
    if (t.n_tokens > (size_t)n || memcmp(t.tokens, ids, t.n_tokens * sizeof *ids) != 0) {
        size_t same = 0;
        while (same < t.n_tokens && same < (size_t)n && t.tokens[same] == ids[same]) same++;
        fprintf(stderr,
                "tq generate: prompt cache '%s' not used: its %zu tokens are not a prefix of this prompt's %d "
                "(they agree on the first %zu); prefilling the whole prompt\n",
                path, t.n_tokens, n, same);
        prompt_cache_tokens_free(&t);
        context_truncate(q->x, 0);
        return 0;
    } else if (t.n_tokens == (size_t)n && t.logits != NULL) {
        memcpy(logits, t.logits, (size_t)q->cfg->n_vocab * sizeof *logits);
        *have_logits = 1;
        keep = n;
    } else {
        keep = (int)t.n_tokens < n ? (int)t.n_tokens : n - 1;
        /* Never one token alone: a one-token call is a decode step, which ends a raw prefill
         * (doc/kvcache.md §3) one token early; two or more stay a prefill as in a fresh run. */
        if (n - keep == 1 && keep > 0) keep--;
    }
    context_truncate(q->x, keep);
    fprintf(stderr, "tq generate: prompt cache '%s': %zu tokens restored, %d kept, %d to prefill\n", path,
            t.n_tokens, keep, n - keep);
    prompt_cache_tokens_free(&t);
    return keep;
}

int cmd_generate(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "generate", 4096, SESSION_KV_ONE);
    const char *prompt = NULL;
    sampling_opts so = SAMPLING_OPTS_INIT(64);
    const char *cache_path = NULL;
    long chunk = GEN_MAX_BATCH;
    const tool_opt opts[] = {
        {OPT_STRING("-p", "PROMPT", &prompt, "text to continue (required)"), .required = 1},
        SAMPLING_OPTS(so, "tokens to generate (default 64)"),
        {OPT_STRING("--prompt-cache", "FILE",
                    &cache_path, "reuse the prompt's KV cache from FILE when it matches; save it there")},
        {OPT_INT("--prefill-chunk", "N", &chunk, 2, 1L << 20,
                 "prompt tokens per forward pass, chunks ending at multiples of N (default 512; tq serve's "
                 "--prefill-chunk: the same N gives its answers bit for bit)")},
    };
    const tool_cmd cmd = {
        .name = "generate",
        .synopsis =
            "usage: tq generate -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
            "                   [--prompt-cache FILE] [--prefill-chunk N] [-m MODEL] [-c CTX] [-t THREADS]\n"
            "                   [--kv SCHEME]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
        .epilogue = "\nThe text goes to stdout; speed and KV memory go to stderr.\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if ((rc = session_opts_finish(&o)) != 0) return rc;

    session s;
    session_seq q;
    memset(&q, 0, sizeof q);
    int32_t *ids = NULL;
    float *logits = NULL;
    sampler *smp = NULL;
    size_t n_prompt = 0;
    if ((rc = session_open(&s, &o)) != 0) return rc;
    if ((rc = session_tokenize(&s, prompt, strlen(prompt), 1, &ids, &n_prompt)) != 0) goto done;
    /* auto:B calibrates on the prompt; with a prompt cache on the built-in text, so that every
     * run chooses the same layer schemes and a cache file written by one fits the next */
    if (cache_path == NULL) session_set_calibration(&s, ids, n_prompt, "the prompt");
    if ((rc = session_seq_open(&s, &o.schemes[0], (int)chunk, &q)) != 0) goto done;
    if (n_prompt == 0 || n_prompt >= (size_t)s.n_ctx) {
        fprintf(stderr, "tq generate: the prompt is %zu tokens; -c %d leaves no room to generate\n",
                n_prompt, s.n_ctx);
        rc = TQ_EXIT_USAGE;
        goto done;
    }
    const int nv = s.cfg.n_vocab;
    const sampler_params sp = sampling_params(&so);
    logits = malloc((size_t)nv * sizeof *logits);
    smp = sampler_create(&sp, nv);
    int32_t *grown = realloc(ids, ((size_t)s.n_ctx + 1) * sizeof *ids);
    if (logits == NULL || smp == NULL || grown == NULL) {
        if (grown) ids = grown;
        fprintf(stderr, "tq generate: out of memory\n");
        rc = 1;
        goto done;
    }
    ids = grown;

    double t0 = tool_now();
    int n_kept = 0, have_logits = 0;
    if (cache_path != NULL) {
        if (context_set_kv_keep_history(q.x, 1) != MODEL_OK) {
            fprintf(stderr, "tq generate: %s\n", context_last_error(q.x));
            rc = 1;
            goto done;
        }
        if ((rc = session_seq_reapply_auto(&s, &q)) != 0) goto done;
        n_kept = restore_prompt(cache_path, &q, ids, (int)n_prompt, logits, &have_logits);
    }
    fputs(prompt, stdout);
    fflush(stdout);
    if (!have_logits &&
        (rc = session_forward(&q, ids + n_kept, (int)n_prompt - n_kept, n_kept, 0, logits)) != 0)
        goto done;
    double t_prefill = tool_now() - t0;
    if (cache_path != NULL) {
        char why[320];
        prompt_cache_status ps = prompt_cache_save(cache_path, q.x, ids, n_prompt, logits, why, sizeof why);
        if (ps != PCACHE_OK) fprintf(stderr, "tq generate: prompt cache '%s' not saved: %s\n", cache_path, why);
    }

    int pos = (int)n_prompt, n_out = 0, n_decoded = 0;
    const char *why = NULL;
    double t1 = tool_now();
    for (;;) {
        int32_t tok = sampler_sample(smp, logits);
        if (session_is_stop(&s, tok)) {
            why = "end of text";
            break;
        }
        char piece[256];
        size_t len = session_piece(&s, tok, piece, sizeof piece);
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        ids[pos] = tok;
        n_out++;
        if (n_out >= so.n_predict) break;
        if (pos + 1 >= s.n_ctx) {
            why = "context full";
            break;
        }
        if ((rc = session_forward(&q, &ids[pos], 1, pos, 0, logits)) != 0) goto done;
        pos++;
        n_decoded++;
    }
    double t_decode = tool_now() - t1;
    fputc('\n', stdout);
    fflush(stdout);

    /* The library's own accounting: tokens still raw (fp16) count at their fp16 size. */
    tq_kv_memory mem;
    if (session_kv_memory(&q, &mem)) {
        fprintf(stderr, "tq generate: cannot read the KV cache's memory\n");
        rc = 1;
        goto done;
    }
    fprintf(stderr, "\n");
    if (why) fprintf(stderr, "stopped: %s after %d tokens\n", why, n_out);
    fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tok/s)\n", n_prompt - (size_t)n_kept, t_prefill,
            t_prefill > 0 ? (double)(n_prompt - (size_t)n_kept) / t_prefill : 0.0);
    if (cache_path != NULL) fprintf(stderr, "prompt cache: %d of %zu prompt tokens restored\n", n_kept, n_prompt);
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", n_decoded, t_decode,
            t_decode > 0 && n_decoded ? (double)n_decoded / t_decode : 0.0);
    const int n_layer = s.cfg.n_layer;
    fprintf(stderr, "KV cache (%s): %d tokens (%zu compressed), ", q.scheme.name,
            session_seq_len(&q), mem.compressed_tokens / (size_t)n_layer);
    print_bytes(stderr, mem.data_bytes);
    fprintf(stderr, " in use, fp16 would use ");
    print_bytes(stderr, mem.f16_bytes);
    fprintf(stderr, " (%.2fx); %zu bytes/token compressed, %zu in fp16\n",
            mem.data_bytes ? (double)mem.f16_bytes / (double)mem.data_bytes : 1.0,
            session_kv_bytes_per_token(&q), session_kv_f16_bytes(&s.cfg, 1));
    rc = 0;
done:
    sampler_free(smp);
    free(logits);
    free(ids);
    session_seq_close(&q);
    session_close(&s);
    return rc;
}

/*
 * tq generate: text continuation of a prompt, streamed token by token.
 *
 * The prompt is tokenized with BOS, run as one prefill (in pieces of up to 512 tokens), then
 * tokens are sampled one at a time (engine/sampler.h: greedy at --temp 0, else temperature with
 * top-k / top-p, seeded) and each one's text is written to stdout and flushed as soon as it is
 * known. Generation stops after -n tokens, at EOS or a control token, or when the context (-c)
 * is full. Afterwards stderr gets prefill and decode speed and the KV bytes in use (the
 * library's count: compressed tokens at their code size, the still-raw newest ones at fp16)
 * against what fp16 K and V would take.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "sampling_opts.h"

#define GEN_MAX_BATCH 512

static void print_bytes(FILE *f, size_t b) {
    if (b >= (size_t)1 << 20) fprintf(f, "%.2f MiB", (double)b / (1 << 20));
    else fprintf(f, "%.1f KiB", (double)b / 1024);
}

int cmd_generate(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "generate", 4096, SESSION_KV_ONE);
    const char *prompt = NULL;
    sampling_opts so = SAMPLING_OPTS_INIT(64);
    const tool_opt opts[] = {
        {OPT_STRING("-p", "PROMPT", &prompt, "text to continue (required)"), .required = 1},
        SAMPLING_OPTS(so, "tokens to generate (default 64)"),
    };
    const tool_cmd cmd = {
        .name = "generate",
        .synopsis =
            "usage: tq generate -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
            "                   [-m MODEL] [-c CTX] [-t THREADS] [--kv SCHEME]\n",
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
    if ((rc = session_seq_open(&s, &o.schemes[0], GEN_MAX_BATCH, &q)) != 0) goto done;
    if ((rc = session_tokenize(&s, prompt, strlen(prompt), 1, &ids, &n_prompt)) != 0) goto done;
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

    fputs(prompt, stdout);
    fflush(stdout);
    double t0 = tool_now();
    if ((rc = session_forward(&q, ids, (int)n_prompt, 0, 0, logits)) != 0) goto done;
    double t_prefill = tool_now() - t0;

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
    fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tok/s)\n", n_prompt, t_prefill,
            t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0);
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

/*
 * tq passkey: can the model find a 5-digit number hidden in filler text?
 *
 * The prompt (about CTX tokens) is an instruction, filler sentences written for this tool,
 * the needle "The pass key is NNNNN. Remember it. NNNNN is the pass key." placed at a depth
 * (0 = right after the instruction, 1 = right before the question), more filler, and
 * "What is the pass key? The pass key is". The answer is greedy-decoded for ANSWER_TOKENS
 * tokens; a trial succeeds when the first run of digits in it is the key. Each trial draws a
 * new key (from --seed) and starts the filler at another sentence. Every scheme answers the
 * same prompts, so its rate is read against f16's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "sampler.h"

#define MAX_DEPTHS 32
#define ANSWER_TOKENS 8

static const char *const filler[] = {
    "The grass is green and the sky is blue.",
    "The sun rose over the quiet hills, and the river kept moving toward the sea.",
    "A small boat waited by the dock while gulls circled above the harbor.",
    "In the village, the baker opened his shop before dawn, as he did every day.",
    "Clouds drifted slowly across the afternoon sky.",
    "Nobody remembered who had planted the old oak tree near the road.",
    "The library on the corner kept its lamps lit until late in the evening.",
    "Here we go, and there we go again, round and round the garden.",
};
#define N_FILLER (int)(sizeof filler / sizeof filler[0])

static const char *const intro =
    "There is an important piece of information hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about it.";
static const char *const question = " What is the pass key? The pass key is";

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Appends s to the growing buffer; returns 0 on out of memory. */
static int append(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *nb = realloc(*buf, nc);
        if (nb == NULL) return 0;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return 1;
}

/* The prompt with n_fill filler sentences (starting at sentence `rot`), the needle after
 * round(depth · n_fill) of them. */
static char *build_prompt(int n_fill, int rot, double depth, const char *key) {
    char needle[128];
    snprintf(needle, sizeof needle, " The pass key is %s. Remember it. %s is the pass key.", key,
             key);
    int at = (int)(depth * n_fill + 0.5);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int ok = append(&buf, &len, &cap, intro);
    for (int i = 0; i <= n_fill && ok; i++) {
        if (i == at) ok = append(&buf, &len, &cap, needle);
        if (i < n_fill && ok) {
            ok = append(&buf, &len, &cap, " ");
            ok = ok && append(&buf, &len, &cap, filler[(rot + i) % N_FILLER]);
        }
    }
    ok = ok && append(&buf, &len, &cap, question);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The first maximal run of digits in s, into out (empty if none). */
static void first_digits(const char *s, char *out, size_t cap) {
    while (*s && (*s < '0' || *s > '9')) s++;
    size_t n = 0;
    while (*s >= '0' && *s <= '9' && n + 1 < cap) out[n++] = *s++;
    out[n] = 0;
}

int cmd_passkey(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "passkey", 1024, SESSION_KV_EACH); /* no f16 run is added */
    long trials = 3;
    double depths[MAX_DEPTHS] = {0, 0.25, 0.5, 0.75, 1};
    int n_depths = 5, json = 0, verbose = 0;
    uint64_t seed = 1;
    const tool_opt opts[] = {
        {OPT_INT("--trials", "N", &trials, 1, 100000,
                 "prompts per scheme and depth, each with its own key (default 3)")},
        {OPT_DOUBLES("--depths", "LIST", depths, &n_depths, MAX_DEPTHS, 0, 1,
                     "needle depths in [0, 1] (default 0,0.25,0.5,0.75,1)")},
        {OPT_U64("--seed", "S", &seed, "seed of the keys (default 1)")},
        {OPT_FLAG("--json", &json, "one JSON object on stdout instead of the table")},
        {OPT_FLAG("-v", &verbose, "each answer's text on stderr"), .alias = "--verbose"},
    };
    const tool_cmd cmd = {
        .name = "passkey",
        .synopsis = "usage: tq passkey [-c CTX] [--kv S[,S...]] [--trials N] [--depths D1,D2,...]\n"
                    "                  [--seed S] [-m MODEL] [-t THREADS] [--json] [-v]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if ((rc = session_opts_finish(&o)) != 0) return rc;
    if (o.n_ctx < 128) {
        fprintf(stderr, "tq passkey: -c %ld is too small for the prompt (at least 128)\n", o.n_ctx);
        return TQ_EXIT_USAGE;
    }

    session s;
    session_seq q;
    memset(&q, 0, sizeof q);
    float *logits = NULL;
    int32_t *ids = NULL;
    char *prompt = NULL;
    long *found = NULL;
    if ((rc = session_open(&s, &o)) != 0) return rc;
    const int nv = s.cfg.n_vocab, ctx = s.n_ctx;
    logits = malloc((size_t)nv * sizeof *logits);
    found = calloc((size_t)o.n_schemes * (size_t)n_depths, sizeof *found);
    if (logits == NULL || found == NULL) {
        fprintf(stderr, "tq passkey: out of memory\n");
        rc = 1;
        goto done;
    }
    /* Filler sentences so that the prompt and the answer fit CTX: the tokens of the prompt
     * without filler and with one round of it give the cost per sentence; sentences are then
     * dropped until the real prompt fits. */
    int n_fill;
    {
        size_t n_tok[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            char *probe = build_prompt(r ? N_FILLER : 0, 0, 0.5, "12345");
            if (probe == NULL) {
                fprintf(stderr, "tq passkey: out of memory\n");
                rc = 1;
                goto done;
            }
            rc = session_tokenize(&s, probe, strlen(probe), 1, &ids, &n_tok[r]);
            free(probe);
            free(ids);
            ids = NULL;
            if (rc) goto done;
        }
        double per = (double)(n_tok[1] - n_tok[0]) / N_FILLER;
        double room = (double)ctx - ANSWER_TOKENS - (double)n_tok[0];
        if (room < per) {
            fprintf(stderr, "tq passkey: -c %d cannot hold the prompt (%zu tokens without filler)\n",
                    ctx, n_tok[0]);
            rc = TQ_EXIT_USAGE;
            goto done;
        }
        n_fill = (int)(room / per);
    }
    if (!json) printf("passkey: ctx %d, %ld trials per depth, answer %d tokens greedy\n", ctx,
                      trials, ANSWER_TOKENS);
    int first_line = 1;
    if (json) printf("{\"ctx\":%d,\"trials\":%ld,\"results\":[", ctx, trials);
    for (int k = 0; k < o.n_schemes; k++) {
        if ((rc = session_seq_open(&s, &o.schemes[k], 512, &q)) != 0) goto done;
        uint64_t rng = seed;
        for (int d = 0; d < n_depths; d++) {
            char answers[160] = "";
            size_t n_prompt_last = 0;
            for (long t = 0; t < trials; t++) {
                char key[16];
                snprintf(key, sizeof key, "%05d", (int)(10000 + splitmix(&rng) % 90000));
                size_t n_prompt = 0;
                for (;;) { /* shrink the filler until the prompt fits */
                    free(prompt);
                    free(ids);
                    ids = NULL;
                    prompt = build_prompt(n_fill, (int)t, depths[d], key);
                    if (prompt == NULL) {
                        fprintf(stderr, "tq passkey: out of memory\n");
                        rc = 1;
                        goto done;
                    }
                    if ((rc = session_tokenize(&s, prompt, strlen(prompt), 1, &ids, &n_prompt)))
                        goto done;
                    if (n_prompt + ANSWER_TOKENS <= (size_t)ctx) break;
                    int over = (int)(n_prompt + ANSWER_TOKENS - (size_t)ctx);
                    n_fill -= over / 20 + 1;
                    if (n_fill < 0) {
                        fprintf(stderr, "tq passkey: -c %d cannot hold the prompt\n", ctx);
                        rc = TQ_EXIT_USAGE;
                        goto done;
                    }
                }
                n_prompt_last = n_prompt;
                int32_t *all = realloc(ids, (n_prompt + ANSWER_TOKENS) * sizeof *ids);
                if (all == NULL) {
                    fprintf(stderr, "tq passkey: out of memory\n");
                    rc = 1;
                    goto done;
                }
                ids = all;
                session_seq_reset(&q);
                if ((rc = session_forward(&q, ids, (int)n_prompt, 0, 0, logits))) goto done;
                char out[256] = "";
                size_t out_len = 0;
                int pos = (int)n_prompt;
                for (int g = 0; g < ANSWER_TOKENS; g++) {
                    int32_t tok = sampler_argmax(logits, nv);
                    if (session_is_stop(&s, tok)) break;
                    out_len += session_piece(&s, tok, out + out_len, sizeof out - out_len);
                    ids[pos] = tok;
                    if (g + 1 < ANSWER_TOKENS &&
                        (rc = session_forward(&q, &ids[pos], 1, pos, 0, logits)))
                        goto done;
                    pos++;
                }
                char digits[32];
                first_digits(out, digits, sizeof digits);
                int ok = !strcmp(digits, key);
                if (verbose)
                    fprintf(stderr, "%s depth %.2f trial %ld: key %s, answer \"%s\"\n",
                            o.schemes[k].name, depths[d], t, key, out);
                found[k * n_depths + d] += ok;
                size_t al = strlen(answers);
                if (al + 12 < sizeof answers)
                    snprintf(answers + al, sizeof answers - al, "%s%s%s", al ? " " : "",
                             digits[0] ? digits : "-", ok ? "" : "(x)");
            }
            long hit = found[k * n_depths + d];
            if (json) {
                printf("%s{\"scheme\":", first_line ? "" : ",");
                session_json_str(stdout, o.schemes[k].name);
                printf(",\"depth\":%g,\"found\":%ld,\"trials\":%ld,\"rate\":%.4f,"
                       "\"prompt_tokens\":%zu}",
                       depths[d], hit, trials, (double)hit / (double)trials, n_prompt_last);
                first_line = 0;
            } else {
                printf("%-12s depth %.2f  %ld/%ld  (%zu prompt tokens; answers: %s)\n",
                       o.schemes[k].name, depths[d], hit, trials, n_prompt_last, answers);
            }
            fflush(stdout);
        }
        long total = 0;
        for (int d = 0; d < n_depths; d++) total += found[k * n_depths + d];
        if (!json)
            printf("%-12s retrieval %ld/%ld (%.0f%%)\n", o.schemes[k].name, total,
                   trials * n_depths, 100.0 * (double)total / (double)(trials * n_depths));
        session_seq_close(&q);
    }
    if (json) printf("]}\n");
    rc = 0;
done:
    free(prompt);
    free(ids);
    free(found);
    free(logits);
    session_seq_close(&q);
    session_close(&s);
    return rc;
}

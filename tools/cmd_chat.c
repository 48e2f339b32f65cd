/*
 * tq chat: a multi-turn conversation with the model, its turns read from standard input one
 * line each (a terminal or a pipe; EOF ends the chat, exit 0). doc/chat.md is the manual.
 *
 * Each turn lays out the whole conversation with the model's chat template (chat_template.h),
 * tokenizes it, and keeps in the KV cache the longest prefix of tokens it already holds; only
 * the rest is prefilled. The cache therefore always holds exactly the tokens a fresh prefill of
 * the whole conversation would have: when the answer the model wrote tokenizes differently once
 * written into the template (Gemma and Llama 3 trim it, a rare non-canonical token split), the
 * tokens from the first difference on are prefilled again, and the stats line says how many.
 *
 * The answer streams to stdout as its tokens decode, cut only between whole UTF-8 characters;
 * it ends at the family's end-of-turn token, EOS or any control token, at -n tokens, or when
 * the context is full. After each turn stderr gets one line: tokens prefilled (and reused),
 * tokens generated, prefill and decode speed, KV bytes in use against fp16.
 *
 * Context full (-c): an answer that reaches the end of the context stops there with a message;
 * a new turn that does not fit drops the oldest exchanges (user message and answer; the system
 * text stays) until it does, and prefills again from where the layout changed; a message that
 * does not fit even alone is skipped with a message. Never an exit.
 *
 * Resuming (tq chat --session FILE, chat_session.h): the conversation's messages (FILE.turns)
 * and its KV cache (FILE, a prompt cache) are restored before the first turn and saved after
 * each one; chat_run() takes a chat whose context may already hold tokens (held[0..n_held)) and
 * whose messages may already hold the turns those tokens came from, and the first turn then
 * prefills only what differs (everything, when the cache did not load or does not match).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_session.h"
#include "chat_prompt.h"
#include "chat_template.h"
#include "commands.h"
#include "common.h"
#include "gguf.h"
#include "model_session.h"
#include "prompt_cache.h"
#include "sampling_opts.h"

#define CHAT_MAX_BATCH 512

typedef struct chat {
    session *s;
    session_seq *q;
    chat_family family;
    int32_t eot_id;         /* the family's end-of-turn token, -1 when it is EOS */
    chat_msg *msgs;         /* the conversation; contents malloc'd, roles static */
    size_t n_msgs, cap_msgs;
    int32_t *held;          /* the tokens the context holds, positions 0 .. n_held */
    int n_held;
    sampler *smp;
    float *logits;
    long n_predict;         /* -n: most tokens per answer */
    int turn;
    FILE *out;              /* the answers */
    const char *session;    /* --session FILE, or NULL */
} chat;

/* ---- the conversation --------------------------------------------------------------------- */

/* Appends a message (content copied). Returns 0, or 1 when memory is short. */
static int chat_add(chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (m == NULL) return 1;
        c->msgs = m;
        c->cap_msgs = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) return 1;
    memcpy(copy, content, len);
    copy[len] = 0;
    c->msgs[c->n_msgs].role = role;
    c->msgs[c->n_msgs].content = copy;
    c->n_msgs++;
    return 0;
}

static void free_msgs(chat_msg *m, size_t n) {
    for (size_t i = 0; i < n; i++) free((char *)m[i].content);
}

/* Drops the oldest exchange: the first non-system message and what follows it up to the next
 * user message. Returns 0 when there is no earlier exchange than the last user message. */
static int chat_drop_oldest(chat *c) {
    size_t a = 0;
    while (a < c->n_msgs && !strcmp(c->msgs[a].role, "system")) a++;
    size_t b = a + 1;
    while (b < c->n_msgs && strcmp(c->msgs[b].role, "user")) b++;
    if (b >= c->n_msgs) return 0; /* a is the last user message */
    free_msgs(c->msgs + a, b - a);
    memmove(c->msgs + a, c->msgs + b, (c->n_msgs - b) * sizeof *c->msgs);
    c->n_msgs -= b - a;
    return 1;
}

/* The conversation with the generation prompt as tokens (chat_prompt.h). */
static int chat_tokens(chat *c, int32_t **ids, size_t *n) {
    return chat_prompt_tokens(c->s, "chat", c->family, c->msgs, c->n_msgs, ids, n);
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Bytes written so far hold whole UTF-8 characters only: a character split across token
 * pieces (byte tokens) waits in pend until its last byte arrives. */
typedef struct utf8_stream {
    char pend[4];
    size_t n_pend;
} utf8_stream;

static void stream_put(utf8_stream *u, FILE *f, const char *p, size_t n) {
    char buf[4 + 4096];
    memcpy(buf, u->pend, u->n_pend);
    size_t total = u->n_pend;
    if (n > sizeof buf - total) n = sizeof buf - total; /* pieces are far shorter */
    memcpy(buf + total, p, n);
    total += n;
    const size_t cut = chat_utf8_whole(buf, total);
    fwrite(buf, 1, cut, f);
    fflush(f);
    u->n_pend = total - cut;
    memcpy(u->pend, buf + cut, u->n_pend);
}

static void stream_flush(utf8_stream *u, FILE *f) {
    fwrite(u->pend, 1, u->n_pend, f);
    u->n_pend = 0;
    fflush(f);
}

/* ---- one turn ----------------------------------------------------------------------------- */

static void print_bytes(FILE *f, size_t b) {
    if (b >= (size_t)1 << 20) fprintf(f, "%.2f MiB", (double)b / (1 << 20));
    else fprintf(f, "%.1f KiB", (double)b / 1024);
}

/* The tokens of the conversation, dropping the oldest exchanges until they leave room for an
 * answer. Returns 0 with *ids set, 0 with *ids NULL when the last message alone does not fit
 * (it is removed), or 1 on a failure (printed). */
static int fit_tokens(chat *c, int32_t **ids, size_t *n) {
    const int n_ctx = c->s->n_ctx;
    int dropped = 0;
    for (;;) {
        if (chat_tokens(c, ids, n)) return 1;
        if (*n < (size_t)n_ctx) break;
        free(*ids);
        *ids = NULL;
        if (!chat_drop_oldest(c)) {
            fprintf(stderr, "tq chat: this message needs %zu tokens with the template%s; -c %d "
                    "leaves no room for an answer: skipped\n", *n,
                    c->n_msgs > 1 ? " and the system text" : "", n_ctx);
            c->n_msgs--;
            free((char *)c->msgs[c->n_msgs].content);
            return 0;
        }
        dropped++;
    }
    if (dropped == 1)
        fprintf(stderr, "tq chat: the context is full (-c %d): dropped the oldest exchange\n", n_ctx);
    else if (dropped > 1)
        fprintf(stderr, "tq chat: the context is full (-c %d): dropped the %d oldest exchanges\n",
                n_ctx, dropped);
    return 0;
}

/* Runs one user turn: prefill what the context lacks, stream the answer, keep it. */
static int chat_turn(chat *c, const char *line, size_t len) {
    session *s = c->s;
    const int n_ctx = s->n_ctx;
    if (chat_add(c, "user", line, len)) goto oom;
    int32_t *ids;
    size_t n_ids;
    if (fit_tokens(c, &ids, &n_ids)) return 1;
    if (ids == NULL) return 0;
    c->turn++;

    /* Keep the longest common prefix of what the context holds; prefill the rest (at least
     * one token: its logits start the answer). A rewind the sliding-window layers cannot make
     * empties the sequence (context_truncate): then everything is prefilled. */
    int keep = 0;
    while (keep < c->n_held && (size_t)keep < n_ids && c->held[keep] == ids[keep]) keep++;
    if ((size_t)keep == n_ids) keep--;
    context_truncate(c->q->x, keep);
    keep = session_seq_len(c->q);
    const int stale = c->n_held - keep; /* held tokens prefilled again */
    memcpy(c->held + keep, ids + keep, (n_ids - (size_t)keep) * sizeof *ids);
    c->n_held = (int)n_ids;
    const int n_prefill = (int)n_ids - keep;
    free(ids);

    double t0 = tool_now();
    if (session_forward(c->q, c->held + keep, n_prefill, keep, 0, c->logits)) return 1;
    double t_prefill = tool_now() - t0;

    char *answer = NULL;
    size_t n_answer = 0, cap_answer = 0;
    utf8_stream u = {{0}, 0};
    int pos = c->n_held, n_out = 0, n_decoded = 0;
    const char *why = "end of turn";
    double t1 = tool_now();
    for (;;) {
        int32_t tok = sampler_sample(c->smp, c->logits);
        if (tok == c->eot_id || session_is_stop(s, tok)) break;
        char piece[4096];
        size_t plen = session_piece(s, tok, piece, sizeof piece);
        if (n_answer + plen + 1 > cap_answer) {
            size_t cap = cap_answer ? 2 * cap_answer : 1024;
            while (cap < n_answer + plen + 1) cap *= 2;
            char *grown = realloc(answer, cap);
            if (grown == NULL) {
                free(answer);
                goto oom;
            }
            answer = grown;
            cap_answer = cap;
        }
        memcpy(answer + n_answer, piece, plen);
        n_answer += plen;
        stream_put(&u, c->out, piece, plen);
        n_out++;
        /* The cache keeps every token of the answer (so the next turn starts after it). */
        if (pos >= n_ctx) {
            why = "context full";
            break;
        }
        if (session_forward(c->q, &tok, 1, pos, 0, c->logits)) {
            free(answer);
            return 1;
        }
        c->held[pos++] = tok;
        c->n_held = pos;
        n_decoded++;
        if (n_out >= c->n_predict) {
            why = "-n limit";
            break;
        }
    }
    double t_decode = tool_now() - t1;
    stream_flush(&u, c->out);
    fputc('\n', c->out);
    fflush(c->out);
    int rc = chat_add(c, "assistant", answer ? answer : "", n_answer);
    free(answer);
    if (rc) goto oom;

    if (!strcmp(why, "context full"))
        fprintf(stderr, "tq chat: the context is full (-c %d): the answer stops here; the next "
                "turn drops the oldest exchanges\n", n_ctx);
    tq_kv_memory mem;
    if (session_kv_memory(c->q, &mem)) {
        fprintf(stderr, "tq chat: cannot read the KV cache's memory\n");
        return 1;
    }
    fprintf(stderr, "turn %d: prefill %d tokens (%d reused", c->turn, n_prefill, keep);
    if (stale > 0) fprintf(stderr, ", %d re-prefilled", stale);
    fprintf(stderr, ") in %.3f s (%.1f tok/s); %d tokens generated (%s), decode %.1f tok/s; "
            "KV (%s): %d tokens, ", t_prefill,
            t_prefill > 0 ? (double)n_prefill / t_prefill : 0.0, n_out, why,
            t_decode > 0 && n_decoded ? (double)n_decoded / t_decode : 0.0, c->q->scheme.name,
            session_seq_len(c->q));
    print_bytes(stderr, mem.data_bytes);
    fprintf(stderr, " in use, f16 would use ");
    print_bytes(stderr, mem.f16_bytes);
    fprintf(stderr, " (%.2fx)\n", mem.data_bytes ? (double)mem.f16_bytes / (double)mem.data_bytes : 1.0);
    return 0;
oom:
    fprintf(stderr, "tq chat: out of memory\n");
    return 1;
}

/* ---- sessions (--session FILE) ----------------------------------------------------------------- */

static int add_turn(void *ctx, const char *role, const char *content, size_t len) {
    return chat_add(ctx, role, content, len);
}

/* Restores c->session before the first turn: its messages, then as much of its KV cache as
 * they lay out. Anything missing or unreadable is one line on stderr and a fresh start (or a
 * fresh prefill). Returns 1 when messages were restored (the --system text is then the
 * session's), 0 otherwise, -1 when memory is short. */
static int session_restore(chat *c) {
    char why[320];
    char *turns = chat_session_turns_path(c->session);
    if (turns == NULL) return -1;
    int rc = chat_session_read_turns(turns, add_turn, c, why, sizeof why);
    if (rc == 1) {
        fprintf(stderr, "tq chat: session '%s' is new\n", c->session);
    } else if (rc < 0) {
        fprintf(stderr, "tq chat: session '%s': %s: %s; starting a new conversation\n", c->session, turns, why);
        free_msgs(c->msgs, c->n_msgs);
        c->n_msgs = 0;
    }
    free(turns);
    if (rc != 0) return 0;
    prompt_cache_tokens t = {0};
    prompt_cache_status st = prompt_cache_load(c->session, c->q->x, &t, why, sizeof why);
    if (st == PCACHE_OK) {
        memcpy(c->held, t.tokens, t.n_tokens * sizeof *t.tokens); /* n_tokens <= max_ctx: checked */
        c->n_held = (int)t.n_tokens;
    } else {
        fprintf(stderr, "tq chat: session '%s': KV cache not restored (%s); the conversation is "
                "prefilled again\n", c->session, why);
    }
    prompt_cache_tokens_free(&t);
    fprintf(stderr, "tq chat: session '%s': %zu messages, %d tokens restored\n", c->session, c->n_msgs,
            c->n_held);
    return 1;
}

/* Saves the conversation after a turn: KV cache first, then the messages (either file alone
 * stale costs a prefill on resume, never a wrong continuation). A failure is one line. */
static void session_save(chat *c) {
    char why[320];
    if (c->n_held > 0) {
        prompt_cache_status st = prompt_cache_save(c->session, c->q->x, c->held, (size_t)c->n_held, NULL, why,
                                                   sizeof why);
        if (st != PCACHE_OK) fprintf(stderr, "tq chat: session '%s' not saved: %s\n", c->session, why);
    }
    char *turns = chat_session_turns_path(c->session);
    if (turns == NULL || chat_session_write_turns(turns, c->msgs, c->n_msgs, why, sizeof why) != 0)
        fprintf(stderr, "tq chat: session turns not saved: %s\n", turns ? why : "out of memory");
    free(turns);
}

/* Reads user turns from in, one per line, until EOF (0) or a failure (1). Empty lines are
 * skipped. c's context may already hold tokens (held) and c its earlier messages. */
static int chat_run(chat *c, FILE *in) {
    const int tty = isatty(fileno(in));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t n = getline(&line, &cap, in);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if ((rc = chat_turn(c, line, (size_t)n)) != 0) break;
        if (c->session) session_save(c);
    }
    free(line);
    return rc;
}

/* ---- setup -------------------------------------------------------------------------------- */

int cmd_chat(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "chat", 4096, SESSION_KV_ONE);
    const char *system = NULL, *template_name = NULL, *session_path = NULL;
    sampling_opts so = SAMPLING_OPTS_INIT(256);
    const tool_opt opts[] = {
        {OPT_STRING("--system", "TEXT", &system, "system text opening the conversation")},
        {OPT_STRING("--chat-template", "NAME", &template_name,
                    "the template family instead of the model's (listed below)")},
        SAMPLING_OPTS(so, "most tokens per answer (default 256)"),
        {OPT_STRING("--session", "FILE", &session_path,
                    "resume the conversation saved in FILE (and FILE.turns); save it there after each turn")},
    };
    const tool_cmd cmd = {
        .name = "chat",
        .synopsis =
            "usage: tq chat [--system TEXT] [--chat-template NAME] [-n N] [--temp T] [--top-k K]\n"
            "               [--top-p P] [--seed S] [--session FILE] [-m MODEL] [-c CTX] [-t THREADS]\n"
            "               [--kv SCHEME]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
        .epilogue = "\nTurns are read from standard input, one line each, until EOF. Answers go to "
                    "stdout;\nafter each turn stderr gets tokens prefilled and generated, speed "
                    "and KV memory.\nTemplates: chatml, gemma, llama3, llama2, llama2-sys, "
                    "llama2-sys-bos,\nllama2-sys-strip, mistral-v7, phi3, zephyr (doc/chat.md).\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if (template_name && chat_template_by_name(template_name) == CHAT_UNKNOWN)
        return tool_opts_usage_error(&cmd, "--chat-template %s: unknown template; known: %s",
                                     template_name, chat_template_list());
    if ((rc = session_opts_finish(&o)) != 0) return rc;

    session s;
    session_seq q;
    memset(&q, 0, sizeof q);
    chat c;
    memset(&c, 0, sizeof c);
    c.s = &s;
    c.q = &q;
    c.n_predict = so.n_predict;
    c.out = stdout;
    c.session = session_path;
    if ((rc = session_open(&s, &o)) != 0) return rc;
    if ((rc = chat_prompt_family(&s, "chat", template_name, &c.family)) != 0) goto done;
    if ((rc = session_seq_open(&s, &o.schemes[0], CHAT_MAX_BATCH, &q)) != 0) goto done;
    const char *eot = chat_template_end_of_turn(c.family);
    c.eot_id = eot ? tokenizer_find_token(s.tok, eot, strlen(eot)) : -1;
    const sampler_params sp = sampling_params(&so);
    c.smp = sampler_create(&sp, s.cfg.n_vocab);
    c.logits = malloc((size_t)s.cfg.n_vocab * sizeof *c.logits);
    c.held = malloc(((size_t)s.n_ctx + 1) * sizeof *c.held);
    rc = 1;
    int resumed = 0;
    if (c.smp && c.logits && c.held && session_path) {
        if (context_set_kv_keep_history(q.x, 1) != MODEL_OK) { /* saved at any length */
            fprintf(stderr, "tq chat: %s\n", context_last_error(q.x));
            goto done;
        }
        if (session_seq_reapply_auto(&s, &q) != 0) goto done;
        resumed = session_restore(&c);
        if (resumed && system)
            fprintf(stderr, "tq chat: --system ignored: the session's conversation goes on\n");
    }
    if (c.smp == NULL || c.logits == NULL || c.held == NULL || resumed < 0 ||
        (system && !resumed && chat_add(&c, "system", system, strlen(system)))) {
        fprintf(stderr, "tq chat: out of memory\n");
        goto done;
    }
    fprintf(stderr, "tq chat: template %s, KV %s, -c %d; one line per turn, EOF ends\n",
            chat_template_name(c.family), q.scheme.name, s.n_ctx);
    rc = chat_run(&c, stdin);
done:
    free_msgs(c.msgs, c.n_msgs);
    free(c.msgs);
    free(c.held);
    free(c.logits);
    sampler_free(c.smp);
    session_seq_close(&q);
    session_close(&s);
    return rc;
}

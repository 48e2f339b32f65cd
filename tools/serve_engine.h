/* tq serve's engine (doc/serve.md): one loaded model, many sequences, one thread that steps
 * them all. Each step is one batched forward (engine/context.h, model_batch) over the next
 * token of every decoding sequence plus one chunk of the oldest prompt still prefilling, so a
 * long prompt never stalls the others' streams for more than a chunk. A request is admitted
 * while the KV bytes it can reach (prompt + max_tokens at its scheme's exact bytes per token,
 * eval_kv_need_bytes) fit the budget with those of the sequences already running; the rest
 * wait in arrival order. A sequence's tokens do not depend on what else runs (the batch's
 * logits are those of the sequence alone), so greedy answers equal tq generate's. Prompts are
 * kept right after their raw prefill (a fork: the prefix cache, LRU within prefix_cache bytes);
 * a later prompt sharing at least a few dozen tokens with one forks it and prefills only the rest,
 * with the answer a fresh prefill gives.
 *
 * The HTTP side (cmd_serve.c) makes a job from a checked request, submits it, and reads its
 * text as it grows (serve_job_read); whichever of the two lets go of a job last frees it. */
#ifndef TQ_TOOLS_SERVE_ENGINE_H
#define TQ_TOOLS_SERVE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "model_session.h"
#include "serve_api.h"

typedef struct serve_engine serve_engine;
typedef struct serve_job serve_job;

typedef struct serve_engine_opts {
    int parallel;     /* sequences running at once, at most */
    size_t kv_budget; /* bytes of K/V the running sequences may reach together; 0: no limit */
    int chunk;        /* prompt tokens per sequence per step */
    int n_ctx;        /* positions a sequence may reach */
    size_t prefix_cache; /* bytes of raw prompts kept for reuse (doc/serve.md); 0: none */
    const char *cache_dir; /* kept prompts that leave memory go to files here (serve_disk.h); NULL: none */
    unsigned long long cache_dir_bytes; /* the folder's files of this model, at most */
} serve_engine_opts;

/* Starts the engine thread on s (loaded; its pool runs the steps). default_scheme: requests
 * without "kv". NULL with a message in err on failure. */
serve_engine *serve_engine_start(session *s, const session_scheme *default_scheme, const serve_engine_opts *o,
                                 char *err, size_t err_cap);
/* Stops taking jobs (serve_engine_submit then answers 503), finishes every job already taken,
 * joins the thread, frees. NULL is fine. */
void serve_engine_stop(serve_engine *e);
/* Stops taking jobs; what is running goes on. */
void serve_engine_drain(serve_engine *e);

/* Bytes of K/V a sequence of scheme reaches at len positions with a prompt of n_prompt
 * (eval_kv_need_bytes: *steady while decoding, *prefill while its prompt is still raw; 0 when
 * the scheme cannot run): what admission counts. Admission holds Σ steady of the running
 * sequences plus the largest prefill excess among those whose prompt is still to run (one
 * prompt runs at a time). */
void serve_engine_need_bytes(serve_engine *e, const session_scheme *scheme, int n_prompt, int len, size_t *steady,
                             size_t *prefill);

/* A job for p (its prompt tokens ids[0, n), kept by the job: freed with it). The scheme is
 * p->kv or the engine's default. Checks that the prompt and max_tokens fit the context and
 * the budget; -1 with *err (400) when not. On success the job holds one reference for the
 * caller. */
int serve_job_create(serve_engine *e, const serve_params *p, int32_t *ids, int n, serve_job **out,
                     serve_error *err);
/* Queues the job (the engine takes its own reference). -1 with *err (503) when draining. */
int serve_engine_submit(serve_engine *e, serve_job *j, serve_error *err);

/* What a reader sees of a job. */
typedef struct serve_job_state {
    int done;                  /* no more text will come */
    const char *finish_reason; /* "stop", "length" (when done), or NULL */
    int n_prompt, n_gen;       /* tokens */
    int error;                 /* 1: failed (message in error_message) */
    char error_message[256];
    double t_first;            /* seconds from submit to the first token, 0 before */
} serve_job_state;

/* Waits (up to timeout_s seconds; < 0: no limit) until the job has text past *pos or is done,
 * copies at most cap bytes of it into buf, advances *pos and returns the bytes copied; the
 * state into *st. Text comes whole: never a part of a stop sequence, nor half a UTF-8
 * character. */
size_t serve_job_read(serve_job *j, size_t *pos, char *buf, size_t cap, double timeout_s, serve_job_state *st);
/* The caller lets go of the job: a job still running is cancelled (its sequence freed at the
 * next step). NULL is fine. */
void serve_job_release(serve_job *j);
/* The job's id ("cmpl-..."), and the KV scheme it runs. */
const char *serve_job_id(const serve_job *j);

/* Counters for /metrics. */
typedef struct serve_metrics {
    int active, queued, prefilling;
    size_t kv_reserved_bytes, kv_budget_bytes;   /* admission's count and limit */
    size_t kv_data_bytes, kv_f16_bytes;          /* the library's count of what is held now */
    unsigned long long requests, prompt_tokens, generated_tokens, steps;
    double prompt_tok_s, gen_tok_s;              /* over the last few seconds */
    double ttft_sum, ttft_count, ttft_last;
    int max_active;                              /* the most sequences running at once so far */
    int prefix_entries;                          /* prompts kept for reuse */
    size_t prefix_bytes;                         /* their raw K/V */
    unsigned long long prefix_hits, prefix_reused_tokens; /* requests that reused one; tokens not run */
    int disk_entries;                            /* --cache-dir: files of this model */
    unsigned long long disk_bytes, disk_saves, disk_loads, disk_failures;
} serve_metrics;
void serve_engine_metrics(serve_engine *e, serve_metrics *m);

#endif

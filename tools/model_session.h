/* What the model commands of tq (generate, perplexity, passkey, run) share: the common flags
 * (-m, -c, -t, --kv, --cache-type-k/-v: session_opts, parsed in session_opts.c through the
 * option table of tools/options.h), finding the model file, loading the tokenizer, and opening
 * one sequence per KV scheme (the session, model_session.c).
 *
 * This file is the only place that knows how a KV scheme reaches the engine: schemes are
 * parsed and validated by libturboquant (tq_kv_scheme_parse), handed to a context at create
 * (context_params.kv_scheme, engine/context.h), and
 * measured by the library's accounting. session_engine_supports() is where a scheme the engine
 * cannot run would be refused with "not yet supported by the engine".
 *
 * The session loads the model once and owns one thread pool of -t threads; every sequence is
 * its own context on that model (its activations and KV cache), lent the session's pool (the
 * commands run their sequences one at a time).
 *
 * Errors are printed here, prefixed with the command's name ("tq perplexity: ..."), and
 * returned as the process exit code: 0, 1 (runtime failure: a file that cannot be read, a
 * model that does not load) or TQ_EXIT_USAGE (a bad flag or value, including a context larger
 * than the model's). */
#ifndef TQ_TOOLS_MODEL_SESSION_H
#define TQ_TOOLS_MODEL_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "context.h"
#include "options.h"
#include "tokenizer.h"
#include "turboquant.h"

#define SESSION_MAX_SCHEMES 16
#define SESSION_DEFAULT_MODEL "models/gemma3-270m-q4_k_m.gguf"

/* The short model names -m and $TQ_MODEL take, comma-separated ("gemma3-270m, smollm2-135m"):
 * each names a file under models/ that scripts/get-model.sh installs; the first is the default. */
const char *session_model_names(void);
/* The file (models/...) of a model name, or NULL when name is not one. */
const char *session_model_file(const char *name);
/* The model file the command uses: flag (-m), else $TQ_MODEL, else the default model; a path to
 * a readable file, else a model name located under ./models or the tq binary's ../models. 0 with
 * path (cap bytes) set, or 1 after printing why ("tq CMD: ..."). */
int session_find_model(const char *cmd, const char *flag, char *path, size_t cap);

/* One KV scheme as the user named it. */
typedef struct session_scheme {
    char name[96];       /* the text given to --kv (or built from --cache-type-k/-v) */
    int is_f16;          /* the fp16 baseline: the reference every other scheme is compared to */
    tq_kv_scheme scheme; /* parsed by tq_kv_scheme_parse; for auto:B[:options], turboB[:options] */
    int is_auto;         /* auto:B (engine/kv_auto.h): per-layer widths from a calibration */
    float auto_bits;     /* its B */
} session_scheme;

/* How a command takes --kv. */
typedef enum session_kv_mode {
    SESSION_KV_ONE,      /* --kv S: the one scheme run (generate) */
    SESSION_KV_VS_F16,   /* --kv SCHEME: the one scheme compared with f16 (run; its default,
                            turbo3, is the command's) */
    SESSION_KV_EACH,     /* --kv S[,S...]: each scheme scored on its own (passkey) */
    SESSION_KV_WITH_F16, /* --kv S[,S...]: f16 run first as the reference of the others, added
                            when absent, named twice run once (perplexity) */
} session_kv_mode;

#define SESSION_N_FLAGS 9

/* The flags every model command takes. session_opts_init sets the defaults and the option
 * table (flags, pointing into this struct: do not copy it), which the command passes to
 * tool_opts_parse as its shared table; session_opts_finish then builds the scheme list. */
typedef struct session_opts {
    const char *cmd;        /* "generate", ...: prefixes messages */
    const char *model_path; /* -m: a path or a model name; NULL: $TQ_MODEL, then the default
                               model (SESSION_DEFAULT_MODEL; see find_model in the .c) */
    long n_ctx;             /* -c: positions a sequence may reach */
    long n_threads;         /* -t: threads per sequence (default: online CPUs) */
    session_kv_mode kv_mode;
    session_scheme schemes[SESSION_MAX_SCHEMES];
    int n_schemes;          /* after finish: >= 1; schemes[0] is f16 with SESSION_KV_WITH_F16 */
    const char *cache_type_k, *cache_type_v;
    long calib_tokens;      /* --calib-tokens: auto:B calibrates on at most this many tokens */
    tool_opt flags[SESSION_N_FLAGS]; /* the shared option table */
    size_t n_flags;
    char ctx_help[160], threads_help[64]; /* help lines that carry the defaults */
} session_opts;

void session_opts_init(session_opts *o, const char *cmd, long default_ctx, session_kv_mode kv_mode);

/* Resolves --cache-type-k/-v into a scheme, defaults the list to f16, puts f16 first with
 * SESSION_KV_WITH_F16, and refuses schemes the engine cannot run. Returns 0, or an exit code
 * after printing why. */
int session_opts_finish(session_opts *o);

/* Parses one scheme text into *out. Returns 0, or TQ_EXIT_USAGE with a message in err. */
int session_scheme_parse(const char *text, session_scheme *out, char *err, size_t err_cap);
/* 1 if the engine can run the scheme. */
int session_engine_supports(const session_scheme *s);

/* A loaded model file: the tokenizer and the configuration; sequences come from it. */
typedef struct session {
    const char *cmd;
    char model_path[1024];
    tokenizer *tok;
    model_config cfg;
    int n_ctx, n_threads;
    model *m;              /* loaded once; every sequence's context reads it */
    tq_threadpool *pool;   /* n_threads, lent to every sequence's context */
    /* auto:B: the calibration tokens (the command sets them before opening a sequence: the
     * user's prompt when it has at least KV_AUTO_MIN_TOKENS, else NULL for the built-in text)
     * and the calibrations done, one per auto scheme name */
    const int32_t *calib_tokens;
    size_t n_calib_tokens;
    const char *calib_source; /* printed: "the prompt", a file name; NULL: "the built-in text" */
    int calib_max;            /* --calib-tokens */
    int f32_act;              /* set before opening sequences: their contexts' context_params.f32_act */
    int n_autos;
    struct session_auto *autos;
} session;

/* One sequence: its own context (and so its own KV store) with one scheme. */
typedef struct session_seq {
    const char *cmd;
    model_context *x;
    session_scheme scheme;
    const model_config *cfg;
    int n_ctx, max_batch; /* a prefill's chunk (the context takes one row more) */
} session_seq;

/* Finds and loads the model, checks -c against its context length, builds the tokenizer.
 * Returns 0 or an exit code (message printed). */
int session_open(session *s, const session_opts *o);
void session_close(session *s); /* a zeroed session is fine; close its sequences first */

/* Opens a sequence (a context on s's model) with the given scheme, empty, for up to s->n_ctx positions; max_batch is
 * the most tokens per forward call (<= n_ctx). Returns 0 or an exit code (message printed). */
int session_seq_open(session *s, const session_scheme *scheme, int max_batch, session_seq *q);
void session_seq_close(session_seq *q); /* a zeroed sequence is fine */
/* Gives q's context the per-layer schemes of its auto:B scheme again (after
 * context_set_kv_keep_history, which drops them); nothing for other schemes. Returns 0 or 1. */
int session_seq_reapply_auto(session *s, session_seq *q);
/* The per-layer schemes (s->cfg.n_layer, owned by the session) an auto:B scheme chose,
 * calibrating now (the choice printed) when not yet done; NULL after printing why, or when
 * scheme is not auto:B. For commands that build caches without a sequence (tq attn-bench). */
const tq_kv_layer_scheme *session_auto_layer_schemes(session *s, const session_scheme *scheme);
/* Uses tokens[0, n) as the calibration text of auto:B when n >= KV_AUTO_MIN_TOKENS (else the
 * built-in text stays); source names them in the printed table. */
void session_set_calibration(session *s, const int32_t *tokens, size_t n, const char *source);
/* Opens *out as a fork of src (context_fork): the same scheme and positions, src's KV pages
 * shared copy-on-write, then independent. Returns 0 or an exit code (message printed). */
int session_seq_fork(session *s, const session_seq *src, session_seq *out);

/* Empties the sequence (next forward starts at position 0). */
void session_seq_reset(session_seq *q);
int session_seq_len(const session_seq *q);

/* Runs tokens[0..n) at positions pos0.. in pieces of at most max_batch. all_logits = 0:
 * logits (n_vocab floats, may be NULL) gets the last token's row; all_logits = 1: n rows (then
 * n <= max_batch). Returns 0 or 1 after printing the engine's message. */
int session_forward(session_seq *q, const int32_t *tokens, int n, int pos0, int all_logits,
                    float *logits);
/* Logits of every row, (n, n_vocab): as session_forward with all_logits (as_decode = 0), as
 * token-by-token decode would give them (1: context_forward_as_decode), or as the decode steps
 * right after a raw prompt would (2: context_forward_after_prompt, the first token alone).
 * Returns 0 or 1 (printed). */
int session_forward_rows(session_seq *q, const int32_t *tokens, int n, int pos0, int as_decode, float *logits);

/* Bytes one token takes in the sequence's cache once compressed, summed over layers and KV
 * heads (the library's tq_kv_layer_scheme_bytes of each layer's scheme); for f16 that is
 * session_kv_f16_bytes(cfg, 1). 0 if the library refuses a layer's scheme. */
size_t session_kv_bytes_per_token(const session_seq *q);
/* What the cache holds now, by the library's own accounting (tq_kv_cache_memory: exact data
 * bytes, raw and compressed tokens, and the fp16 equivalent). Returns 0 or 1. */
int session_kv_memory(const session_seq *q, tq_kv_memory *mem);
/* fp16 K and V: 2 bytes × (head_dim + head_dim_v) × n_head_kv × n_layer × n_tokens. */
size_t session_kv_f16_bytes(const model_config *cfg, size_t n_tokens);

/* Tokenizes text[0..len) (with BOS when add_bos and the vocab has one). *ids is malloc'd.
 * Returns 0 or 1 (message printed). */
int session_tokenize(session *s, const char *text, size_t len, int add_bos, int32_t **ids,
                     size_t *n_ids);
/* The text of one token into buf (NUL-terminated, truncated to cap); returns its length. */
size_t session_piece(const session *s, int32_t id, char *buf, size_t cap);
/* 1 if the token ends generation (EOS, or a control token such as <end_of_turn>). */
int session_is_stop(const session *s, int32_t id);

/* Reads a whole regular file into a malloc'd buffer (NUL-terminated; tool_read_file: a FIFO,
 * a directory or a device is refused at once, never waited on). Returns 0 or 1 (printed). */
int session_read_file(const char *cmd, const char *path, char **out, size_t *len);

/* Writes s as a JSON string literal (quotes, escapes). */
void session_json_str(FILE *f, const char *s);

/* Natural log of sum(exp(x)) over n floats, in double. */
double session_logsumexp(const float *x, int n);

#endif

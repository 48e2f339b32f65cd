/* The session of the model commands (model_session.h): schemes, model lookup and load,
 * tokenizer, one sequence per KV scheme, forward passes. The scheme → engine path is here and
 * nowhere else; the flags that configure a session are parsed in session_opts.c. */
#include "model_session.h"

#include "regular_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "eval.h"
#include "kv_auto.h"
#include "vocab.h"

/* ---- schemes ------------------------------------------------------------------------------ */

int session_scheme_parse(const char *text, session_scheme *out, char *err, size_t err_cap) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", text);
    const int a = kv_auto_parse(text, &out->auto_bits, &out->scheme, err, err_cap);
    if (a < 0) return TQ_EXIT_USAGE;
    out->is_auto = a;
    if (!a && tq_kv_scheme_parse(text, &out->scheme, err, err_cap) != TQ_OK) return TQ_EXIT_USAGE;
    const tq_kv_scheme *k = &out->scheme;
    out->is_f16 = k->layer.key_format == TQ_KV_F16 && k->layer.value_format == TQ_KV_F16 &&
                  ((k->edge_first == 0 && k->edge_last == 0) ||
                   (k->edge.key_format == TQ_KV_F16 && k->edge.value_format == TQ_KV_F16));
    return 0;
}

int session_engine_supports(const session_scheme *s) {
    /* The engine stores K/V in libturboquant's cache (context_params.kv_scheme): every scheme
     * that parses runs. A scheme the engine could not run would be refused here. */
    (void)s;
    return 1;
}

/* ---- auto:B: the calibration, once per session and scheme name (engine/kv_auto.h) -------- */

struct session_auto {
    char name[96];
    kv_auto_result r;
};

void session_set_calibration(session *s, const int32_t *tokens, size_t n, const char *source) {
    if (n < KV_AUTO_MIN_TOKENS) return;
    s->calib_tokens = tokens;
    s->n_calib_tokens = n;
    s->calib_source = source;
}

static void print_auto(const session *s, const char *name, const kv_auto_result *r) {
    fprintf(stderr, "tq %s: %s: calibrated on %d tokens of %s in %.1f s (%d runs)\n", s->cmd, name, r->n_tokens,
            s->calib_source ? s->calib_source : "the built-in text", r->seconds, r->runs);
    for (int il = 0; il < r->n_layer; il++) {
        const int k = r->choice[il][0], v = r->choice[il][1];
        fprintf(stderr, "  layer %2d: k %s%-4s v %s%-4s (KLD at turbo3: k %.5f, v %.5f)\n", il,
                k == KV_AUTO_N_OPT - 1 ? "" : "turbo", kv_auto_option_name(k), v == KV_AUTO_N_OPT - 1 ? "" : "turbo",
                kv_auto_option_name(v), r->sens[il][0], r->sens[il][1]);
    }
    fprintf(stderr, "  %zu bytes per token (turbo%g %zu, f16 %zu: %.2fx smaller); KLD on the calibration tokens: "
            "predicted %.4f, measured %.4f (turbo%g %.4f)\n",
            r->bytes_per_token, (double)r->bits, r->budget_bytes, r->f16_bytes,
            (double)r->f16_bytes / (double)r->bytes_per_token, r->predicted_kld, r->measured_kld, (double)r->bits,
            r->uniform_kld);
    if (r->global_floor)
        fprintf(stderr, "  global layers at turbo%g or more: the calibration is no longer than the sliding window, "
                        "so it cannot see their reach\n", (double)r->bits);
    if (r->kept_uniform)
        fprintf(stderr, "  turbo%g kept: the allocation measured %.4f on the calibration tokens, above turbo%g's\n",
                (double)r->bits, r->allocated_kld, (double)r->bits);
    if (r->key_split_gain != 1.0)
        fprintf(stderr, "  the key split at turbo3 takes %.2fx off the keys' KLD (the key curve carries it)\n",
                r->key_split_gain);
}

/* The calibration of scheme (done now when not yet), or NULL after printing why. */
static const kv_auto_result *auto_result(session *s, const session_scheme *scheme) {
    for (int i = 0; i < s->n_autos; i++)
        if (strcmp(s->autos[i].name, scheme->name) == 0) return &s->autos[i].r;
    int32_t *own = NULL;
    const int32_t *toks = s->calib_tokens;
    size_t n = s->n_calib_tokens;
    if (toks == NULL) {
        const char *text = kv_auto_default_text();
        if (session_tokenize(s, text, strlen(text), 1, &own, &n)) return NULL;
        toks = own;
    }
    if (n > (size_t)s->calib_max) n = (size_t)s->calib_max;
    struct session_auto *grown = realloc(s->autos, (size_t)(s->n_autos + 1) * sizeof *grown);
    if (grown == NULL) {
        free(own);
        fprintf(stderr, "tq %s: out of memory\n", s->cmd);
        return NULL;
    }
    s->autos = grown;
    struct session_auto *a = &s->autos[s->n_autos];
    snprintf(a->name, sizeof a->name, "%s", scheme->name);
    /* another B with the same options reuses the sensitivities (they do not depend on B) */
    const kv_auto_result *prior = NULL;
    const char *opts = strchr(scheme->name + 5, ':');
    for (int i = 0; i < s->n_autos && prior == NULL; i++) {
        const char *o2 = strchr(s->autos[i].name + 5, ':');
        if ((opts == NULL && o2 == NULL) || (opts && o2 && strcmp(opts, o2) == 0)) prior = &s->autos[i].r;
    }
    char err[300];
    fprintf(stderr, "tq %s: %s: %s ...\n", s->cmd, scheme->name,
            prior ? "allocating (the sensitivities of the calibration above)" : "calibrating");
    model_status st = kv_auto_calibrate_from(s->m, s->pool, toks, (int)n, &scheme->scheme, scheme->auto_bits, 0, prior,
                                             &a->r, err, sizeof err);
    free(own);
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: %s: calibration failed: %s (%s)\n", s->cmd, scheme->name, err, model_status_name(st));
        return NULL;
    }
    s->n_autos++;
    print_auto(s, scheme->name, &a->r);
    return &a->r;
}

const tq_kv_layer_scheme *session_auto_layer_schemes(session *s, const session_scheme *scheme) {
    if (!scheme->is_auto) return NULL;
    const kv_auto_result *r = auto_result(s, scheme);
    return r ? r->layer_schemes : NULL;
}

int session_seq_reapply_auto(session *s, session_seq *q) {
    if (!q->scheme.is_auto) return 0;
    const kv_auto_result *r = auto_result(s, &q->scheme);
    if (r == NULL) return 1;
    model_status st = context_set_kv_layer_schemes(q->x, &q->scheme.scheme, r->layer_schemes);
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: %s: %s (%s)\n", s->cmd, q->scheme.name, context_last_error(q->x), model_status_name(st));
        return 1;
    }
    return 0;
}

/* ---- model and tokenizer ------------------------------------------------------------------ */

/* A regular file that opens for reading (regular_file_open: a FIFO, a directory or a device
 * is refused at once, never waited on); why: the reason when not. */
static int readable(const char *path, const char **why) {
    int fd = regular_file_open(path, why);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* The models tq knows by a short name (-m NAME, $TQ_MODEL=NAME): each is a file under models/
 * that scripts/get-model.sh installs. The first is the default. */
static const struct {
    const char *name, *file;
} known_models[] = {
    {"gemma3-270m", SESSION_DEFAULT_MODEL},
    {"smollm2-135m", "models/smollm2-135m-instruct-q4_1.gguf"},
};
#define N_KNOWN_MODELS (sizeof known_models / sizeof known_models[0])

const char *session_model_names(void) { return "gemma3-270m, smollm2-135m"; }

const char *session_model_file(const char *name) {
    for (size_t i = 0; name != NULL && i < N_KNOWN_MODELS; i++)
        if (strcmp(name, known_models[i].name) == 0) return known_models[i].file;
    return NULL;
}

/* file (relative to the repository: models/...) relative to the current directory, else
 * relative to the directory of the tq executable's parent (build/tq -> models/). 0 when found,
 * with path set; else 1 with path the last path tried ("" if none). */
static int locate(char *path, size_t cap, const char *file) {
    const char *why;
    if (readable(file, &why)) {
        snprintf(path, cap, "%s", file);
        return 0;
    }
    path[0] = 0;
    char exe[800];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, cap, "%s/../%s", exe, file);
            if (readable(path, &why)) return 0;
        }
    }
    return 1;
}

int session_find_model(const char *cmd, const char *flag, char *path, size_t cap) {
    const char *env = getenv("TQ_MODEL");
    const char *given = flag ? flag : (env && *env ? env : NULL);
    const char *from = flag ? "" : " (from $TQ_MODEL)";
    const char *why;
    if (given && readable(given, &why)) {
        snprintf(path, cap, "%s", given);
        return 0;
    }
    const char *name = given ? given : known_models[0].name;
    const char *file = session_model_file(name);
    if (file == NULL) { /* a path (with a '/') is only a path; a bare word may be a name */
        fprintf(stderr, "tq %s: cannot open model '%s'%s: %s%s%s%s\n", cmd, given, from, why,
                strchr(given, '/') ? "" : "; nor is it a model name (", strchr(given, '/') ? "" : session_model_names(),
                strchr(given, '/') ? "" : ")");
        return 1;
    }
    if (locate(path, cap, file) == 0) return 0;
    fprintf(stderr,
            "tq %s: no model%s: %s is not installed (tried ./%s%s%s); scripts/get-model.sh fetches it%s\n",
            cmd, from, name, file, path[0] ? " and " : "", path,
            given ? "" : ", or give -m PATH|NAME or set $TQ_MODEL");
    path[0] = 0;
    return 1;
}

static int find_model(session *s, const session_opts *o) {
    return session_find_model(s->cmd, o->model_path, s->model_path, sizeof s->model_path);
}

static int kv_scheme_error(const session *s, const session_scheme *scheme, const char *msg) {
    fprintf(stderr, "tq %s: KV scheme '%s' does not fit this model: %s\n", s->cmd,
            scheme ? scheme->name : "f16", msg);
    return TQ_EXIT_USAGE;
}

int session_open(session *s, const session_opts *o) {
    memset(s, 0, sizeof *s);
    s->cmd = o->cmd;
    s->n_ctx = (int)o->n_ctx;
    s->n_threads = (int)o->n_threads;
    s->calib_max = (int)o->calib_tokens;
    int rc = find_model(s, o);
    if (rc) return rc;
    tq_status ts = tq_threadpool_create(&s->pool, s->n_threads);
    if (ts != TQ_OK) {
        fprintf(stderr, "tq %s: cannot start %d threads: %s\n", s->cmd, s->n_threads, tq_error_message(ts));
        return ts == TQ_ERR_INVALID ? TQ_EXIT_USAGE : 1;
    }
    char err[300];
    model_status st = model_load(s->model_path, &s->m, err, sizeof err);
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: cannot load model '%s': %s (%s)\n", s->cmd, s->model_path, err,
                model_status_name(st));
        session_close(s);
        return 1;
    }
    s->cfg = *model_get_config(s->m);
    if (s->n_ctx > s->cfg.n_ctx_train) {
        fprintf(stderr, "tq %s: -c %d is larger than the model's context (max_ctx %d > the model's context_length %d)\n",
                s->cmd, s->n_ctx, s->n_ctx, s->cfg.n_ctx_train);
        session_close(s);
        return TQ_EXIT_USAGE;
    }
    gguf_vocab gv;
    vocab_status vs = vocab_build(model_file(s->m), &gv, err, sizeof err);
    if (vs != VOCAB_OK) {
        fprintf(stderr, "tq %s: no usable vocabulary in '%s': %s\n", s->cmd, s->model_path, err);
        session_close(s);
        return 1;
    }
    int tks = tokenizer_create(&gv.v, &s->tok);
    vocab_free(&gv);
    if (tks != TOKENIZER_OK) {
        fprintf(stderr, "tq %s: cannot build the tokenizer: %s\n", s->cmd, tokenizer_status_name(tks));
        session_close(s);
        return 1;
    }
    return 0;
}

void session_close(session *s) {
    for (int i = 0; i < s->n_autos; i++) kv_auto_result_free(&s->autos[i].r);
    free(s->autos);
    s->autos = NULL;
    s->n_autos = 0;
    tokenizer_free(s->tok);
    model_free(s->m);
    tq_threadpool_free(s->pool);
    s->tok = NULL;
    s->m = NULL;
    s->pool = NULL;
}

int session_seq_open(session *s, const session_scheme *scheme, int max_batch, session_seq *q) {
    memset(q, 0, sizeof *q);
    if (!session_engine_supports(scheme)) { /* session_opts_finish refuses these first */
        fprintf(stderr, "tq %s: KV scheme '%s' is not yet supported by the engine\n", s->cmd,
                scheme->name);
        return 1;
    }
    if (max_batch > s->n_ctx) max_batch = s->n_ctx;
    if (max_batch < 1) max_batch = 1;
    /* One context per sequence on the session's one model and pool (the tools run their
     * sequences one at a time); one row more than a chunk (forward: a single last token). */
    const context_params p = {s->n_ctx, max_batch < s->n_ctx ? max_batch + 1 : max_batch, 0, &scheme->scheme,
                              s->f32_act};
    char err[300];
    model_status st = context_create(s->m, &p, s->pool, &q->x, err, sizeof err);
    if (st == MODEL_ERR_KV_SCHEME) return kv_scheme_error(s, scheme, err);
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: cannot open a sequence on '%s': %s (%s)\n", s->cmd, s->model_path, err,
                model_status_name(st));
        return 1;
    }
    q->cmd = s->cmd;
    q->scheme = *scheme;
    q->cfg = context_config(q->x);
    q->n_ctx = s->n_ctx;
    q->max_batch = max_batch;
    int rc = session_seq_reapply_auto(s, q);
    if (rc) session_seq_close(q);
    return rc;
}

int session_seq_fork(session *s, const session_seq *src, session_seq *out) {
    memset(out, 0, sizeof *out);
    char err[300];
    model_status st = context_fork(src->x, s->pool, &out->x, err, sizeof err);
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: cannot fork a sequence: %s (%s)\n", s->cmd, err, model_status_name(st));
        return 1;
    }
    model_context *x = out->x;
    *out = *src;
    out->x = x;
    return 0;
}

void session_seq_close(session_seq *q) {
    context_free(q->x);
    q->x = NULL;
}

void session_seq_reset(session_seq *q) { context_truncate(q->x, 0); }

int session_seq_len(const session_seq *q) { return context_seq_len(q->x); }

/* session_forward, and with as_decode (all_logits implied) each max_batch piece in the
 * decode-exact chunks of context_forward_as_decode (a piece of a decode-exact run is one too);
 * as_decode = 2: the first piece by context_forward_after_prompt (its first token alone). */
static int forward(session_seq *q, const int32_t *tokens, int n, int pos0, int all_logits, int as_decode,
                   float *logits) {
    if (pos0 + n > q->n_ctx) {
        fprintf(stderr, "tq %s: %d positions do not fit the context of %d (-c)\n", q->cmd,
                pos0 + n, q->n_ctx);
        return 1;
    }
    for (int done = 0; done < n;) {
        int len = n - done < q->max_batch ? n - done : q->max_batch;
        if (!all_logits && !as_decode) {
            /* A prefill ends its chunks at multiples of max_batch, wherever it starts, and
             * never leaves a single token (a one-token call is a decode step, which ends a raw
             * prefill): as tq serve chunks prompts, so that the same prompt gives the same
             * K/V and logits bit for bit (attention's float sums depend on the chunks). */
            len = q->max_batch - (pos0 + done) % q->max_batch;
            if (len > n - done) len = n - done;
            else if (n - done - len == 1) len++;
        }
        int last = done + len == n;
        float *out = all_logits || last ? logits : NULL;
        const model_rows_mode mode = as_decode == MODEL_ROWS_AFTER_PROMPT && done > 0 ? MODEL_ROWS_AS_DECODE
                                                                                  : (model_rows_mode)as_decode;
        model_status st = all_logits ? context_forward_rows(q->x, tokens + done, len, pos0 + done, mode, out)
                                     : context_forward(q->x, tokens + done, len, pos0 + done, 0, out);
        if (st != MODEL_OK) {
            fprintf(stderr, "tq %s: forward pass failed: %s (%s)\n", q->cmd,
                    context_last_error(q->x), model_status_name(st));
            return 1;
        }
        if (all_logits && logits) logits += (size_t)len * (size_t)q->cfg->n_vocab;
        done += len;
    }
    return 0;
}

int session_forward(session_seq *q, const int32_t *tokens, int n, int pos0, int all_logits,
                    float *logits) {
    return forward(q, tokens, n, pos0, all_logits, 0, logits);
}

int session_forward_rows(session_seq *q, const int32_t *tokens, int n, int pos0, int as_decode, float *logits) {
    return forward(q, tokens, n, pos0, 1, as_decode, logits);
}

size_t session_kv_f16_bytes(const model_config *cfg, size_t n_tokens) {
    return 2u * (size_t)(cfg->head_dim + cfg->head_dim_v) * (size_t)cfg->n_head_kv *
           (size_t)cfg->n_layer * n_tokens;
}

size_t session_kv_bytes_per_token(const session_seq *q) { return eval_kv_bytes_per_token(q->x); }

int session_kv_memory(const session_seq *q, tq_kv_memory *mem) {
    memset(mem, 0, sizeof *mem);
    return context_kv_memory(q->x, mem) == MODEL_OK ? 0 : 1;
}

int session_tokenize(session *s, const char *text, size_t len, int add_bos, int32_t **ids,
                     size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    size_t cap = tokenizer_encode_bound(s->tok, len);
    int32_t *buf = cap ? malloc(cap * sizeof *buf) : NULL;
    if (buf == NULL) {
        fprintf(stderr, "tq %s: text too long or out of memory (%zu bytes)\n", s->cmd, len);
        return 1;
    }
    int st = tokenizer_encode(s->tok, text, len, add_bos ? TOKENIZER_ENCODE_ADD_SPECIAL : 0, buf,
                              cap, n_ids);
    if (st != TOKENIZER_OK) {
        fprintf(stderr, "tq %s: tokenizer: %s\n", s->cmd, tokenizer_status_name(st));
        free(buf);
        return 1;
    }
    *ids = buf;
    return 0;
}

size_t session_piece(const session *s, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    if (cap == 0) return 0;
    if (tokenizer_token_to_piece(s->tok, id, 0, buf, cap - 1, &len) != TOKENIZER_OK) len = 0;
    buf[len] = 0;
    return len;
}

int session_is_stop(const session *s, int32_t id) {
    return id == tokenizer_eos_id(s->tok) ||
           tokenizer_token_type_of(s->tok, id) == TOKENIZER_TYPE_CONTROL;
}

int session_read_file(const char *cmd, const char *path, char **out, size_t *len) {
    return tool_read_file(cmd, path, out, len);
}

double session_logsumexp(const float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)expf(x[i] - mx);
    return (double)mx + log(s);
}

void session_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

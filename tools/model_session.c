/* Shared plumbing of the model commands: flags, model lookup, tokenizer, one sequence per KV
 * scheme (model_session.h). The scheme → engine path is here and nowhere else. */
#include "model_session.h"

#include "regular_file.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "vocab.h"

/* ---- flags ------------------------------------------------------------------------------ */

static long online_cpus(void) {
#ifdef _SC_NPROCESSORS_ONLN
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n >= 1) return n > 256 ? 256 : n;
#endif
    return 1;
}

void session_opts_init(session_opts *o, const char *cmd, long default_ctx, int multi_scheme) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->n_ctx = default_ctx;
    o->n_threads = online_cpus();
    o->multi_scheme = multi_scheme;
}

void session_opts_help(FILE *f, const session_opts *o) {
    fprintf(f,
            "  -m PATH        model file (default: $TQ_MODEL, else %s\n"
            "                 in the current directory, else next to the tq binary's ../models)\n"
            "  -c CTX         context: positions a sequence may reach (default %ld); more than the\n"
            "                 model's context length is a usage error (exit 2)\n"
            "  -t THREADS     threads (default: online CPUs, %ld here)\n",
            SESSION_DEFAULT_MODEL, o->n_ctx, online_cpus());
    if (o->kv_help)
        fputs(o->kv_help, f);
    else if (o->multi_scheme && o->no_reference)
        fprintf(f, "  --kv S[,S...]  KV-cache schemes to run, each on its own (default f16)\n");
    else if (o->multi_scheme)
        fprintf(f, "  --kv S[,S...]  KV-cache schemes to run (default f16; f16 is always run first as\n"
                   "                 the reference)\n");
    else
        fprintf(f, "  --kv S         KV-cache scheme (default f16)\n");
    fprintf(f, "  --cache-type-k T, --cache-type-v T\n"
               "                 llama.cpp-style K / V cache types (f16, q8_0, q4_0, turboN); the\n"
               "                 other defaults to f16; together they name one more scheme\n"
               "  Schemes (doc/kvcache.md): f16, q8_0, q4_0, turboB (turbo3, turbo3.5), turboKvV\n"
               "  (turbo4v2), kKvV or k=K:v=V, each followed by any :option=value.\n");
}

static int add_scheme(session_opts *o, const char *text, size_t len) {
    char err[2048]; /* the whole message: what is wrong, then the valid forms */
    if (len == 0) {
        fprintf(stderr, "tq %s: --kv: empty scheme name\n", o->cmd);
        return TQ_EXIT_USAGE;
    }
    if (o->n_schemes >= SESSION_MAX_SCHEMES) {
        fprintf(stderr, "tq %s: --kv: at most %d schemes\n", o->cmd, SESSION_MAX_SCHEMES);
        return TQ_EXIT_USAGE;
    }
    if (len >= sizeof o->schemes[0].name) {
        fprintf(stderr, "tq %s: --kv: scheme name too long\n", o->cmd);
        return TQ_EXIT_USAGE;
    }
    char name[sizeof o->schemes[0].name];
    memcpy(name, text, len);
    name[len] = 0;
    if (session_scheme_parse(name, &o->schemes[o->n_schemes], err, sizeof err)) {
        fprintf(stderr, "tq %s: --kv %s: %s\n", o->cmd, name, err);
        return TQ_EXIT_USAGE;
    }
    o->n_schemes++;
    return 0;
}

int session_opts_flag(session_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int takes_value = !strcmp(a, "-m") || !strcmp(a, "-c") || !strcmp(a, "-t") ||
                      !strcmp(a, "--kv") || !strcmp(a, "--cache-type-k") ||
                      !strcmp(a, "--cache-type-v") || !strcmp(a, "--ctx-size") ||
                      !strcmp(a, "--threads") || !strcmp(a, "--model");
    if (!takes_value) return 0;
    if (v == NULL) {
        fprintf(stderr, "tq %s: %s needs a value (tq %s --help)\n", o->cmd, a, o->cmd);
        return TQ_EXIT_USAGE;
    }
    (*i)++;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->model_path = v;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        if (!tool_parse_int(v, 8, 1L << 24, &o->n_ctx)) goto bad_value;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (!tool_parse_int(v, 1, 256, &o->n_threads)) goto bad_value;
    } else if (!strcmp(a, "--cache-type-k")) {
        o->cache_type_k = v;
    } else if (!strcmp(a, "--cache-type-v")) {
        o->cache_type_v = v;
    } else { /* --kv */
        const char *p = v;
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            int rc = add_scheme(o, p, len);
            if (rc) return rc;
            if (!comma) break;
            if (!o->multi_scheme) {
                fprintf(stderr, "tq %s: --kv takes one scheme here, not a list\n", o->cmd);
                return TQ_EXIT_USAGE;
            }
            p = comma + 1;
        }
    }
    return 1;
bad_value:
    fprintf(stderr, "tq %s: bad value for %s: '%s' (tq %s --help)\n", o->cmd, a, v, o->cmd);
    return TQ_EXIT_USAGE;
}

/* A llama.cpp cache type as one side of an explicit k=K:v=V scheme: f16 / q8_0 / q4_0 stay,
 * turboN becomes N (the bits). NULL for anything else. */
static const char *cache_type_side(const char *t, char *buf, size_t cap) {
    if (t == NULL) return "f16";
    if (!strcmp(t, "f16") || !strcmp(t, "q8_0") || !strcmp(t, "q4_0")) return t;
    if (!strncmp(t, "turbo", 5) && t[5] && strlen(t + 5) < cap) {
        char *end;
        errno = 0;
        double b = strtod(t + 5, &end);
        if (errno || *end || !(b >= 1 && b <= 8)) return NULL;
        snprintf(buf, cap, "%s", t + 5);
        return buf;
    }
    return NULL;
}

int session_opts_finish(session_opts *o, int with_f16_first) {
    if (o->cache_type_k || o->cache_type_v) {
        char kb[32], vb[32], text[96];
        const char *k = cache_type_side(o->cache_type_k, kb, sizeof kb);
        const char *v = cache_type_side(o->cache_type_v, vb, sizeof vb);
        if (k == NULL || v == NULL) {
            fprintf(stderr, "tq %s: bad --cache-type-%s '%s' (f16, q8_0, q4_0 or turboN)\n",
                    o->cmd, k == NULL ? "k" : "v", k == NULL ? o->cache_type_k : o->cache_type_v);
            return TQ_EXIT_USAGE;
        }
        if (!strcmp(k, v)) snprintf(text, sizeof text, "%s%s", (k[0] >= '0' && k[0] <= '9') ? "turbo" : "", k);
        else snprintf(text, sizeof text, "k=%s:v=%s", k, v);
        if (!o->multi_scheme && o->n_schemes > 0) {
            fprintf(stderr, "tq %s: give either --kv or --cache-type-k/-v, not both\n", o->cmd);
            return TQ_EXIT_USAGE;
        }
        int rc = add_scheme(o, text, strlen(text));
        if (rc) return rc;
    }
    if (o->n_schemes == 0) {
        int rc = add_scheme(o, "f16", 3);
        if (rc) return rc;
    }
    if (with_f16_first) {
        int f = -1;
        for (int i = 0; i < o->n_schemes && f < 0; i++)
            if (o->schemes[i].is_f16) f = i;
        if (f < 0) {
            if (o->n_schemes >= SESSION_MAX_SCHEMES) {
                fprintf(stderr, "tq %s: --kv: at most %d schemes besides f16\n", o->cmd,
                        SESSION_MAX_SCHEMES - 1);
                return TQ_EXIT_USAGE;
            }
            memmove(&o->schemes[1], &o->schemes[0], (size_t)o->n_schemes * sizeof o->schemes[0]);
            o->n_schemes++;
            char err[128];
            if (session_scheme_parse("f16", &o->schemes[0], err, sizeof err)) return 1;
        } else if (f > 0) {
            session_scheme t = o->schemes[f];
            memmove(&o->schemes[1], &o->schemes[0], (size_t)f * sizeof o->schemes[0]);
            o->schemes[0] = t;
        }
        /* f16 named twice would only be run twice */
        for (int i = 1; i < o->n_schemes; i++)
            if (o->schemes[i].is_f16) {
                memmove(&o->schemes[i], &o->schemes[i + 1],
                        (size_t)(o->n_schemes - i - 1) * sizeof o->schemes[0]);
                o->n_schemes--;
                i--;
            }
    }
    for (int i = 0; i < o->n_schemes; i++)
        if (!session_engine_supports(&o->schemes[i])) {
            fprintf(stderr,
                    "tq %s: KV scheme '%s' is not yet supported by the engine\n",
                    o->cmd, o->schemes[i].name);
            return 1;
        }
    return 0;
}

/* ---- schemes ------------------------------------------------------------------------------ */

int session_scheme_parse(const char *text, session_scheme *out, char *err, size_t err_cap) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", text);
    if (tq_kv_scheme_parse(text, &out->scheme, err, err_cap) != TQ_OK) return TQ_EXIT_USAGE;
    const tq_kv_scheme *k = &out->scheme;
    out->is_f16 = k->layer.key_format == TQ_KV_F16 && k->layer.value_format == TQ_KV_F16 &&
                  ((k->edge_first == 0 && k->edge_last == 0) ||
                   (k->edge.key_format == TQ_KV_F16 && k->edge.value_format == TQ_KV_F16));
    return 0;
}

int session_engine_supports(const session_scheme *s) {
    /* The engine stores K/V in libturboquant's cache (model_params.kv_scheme): every scheme
     * that parses runs. A scheme the engine could not run would be refused here. */
    (void)s;
    return 1;
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

/* -m, else $TQ_MODEL, else the default relative to the current directory, else relative to
 * the directory of the tq executable's parent (build/tq → models/). */
static int find_model(session *s, const session_opts *o) {
    const char *env = getenv("TQ_MODEL");
    const char *given = o->model_path ? o->model_path : (env && *env ? env : NULL);
    const char *why;
    if (given) {
        if (!readable(given, &why)) {
            fprintf(stderr, "tq %s: cannot open model '%s'%s: %s\n", s->cmd, given,
                    o->model_path ? "" : " (from $TQ_MODEL)", why);
            return 1;
        }
        snprintf(s->model_path, sizeof s->model_path, "%s", given);
        return 0;
    }
    if (readable(SESSION_DEFAULT_MODEL, &why)) {
        snprintf(s->model_path, sizeof s->model_path, "%s", SESSION_DEFAULT_MODEL);
        return 0;
    }
    char exe[800];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(s->model_path, sizeof s->model_path, "%s/../%s", exe, SESSION_DEFAULT_MODEL);
            if (readable(s->model_path, &why)) return 0;
        }
    }
    fprintf(stderr,
            "tq %s: no model: give -m PATH or set $TQ_MODEL (tried ./%s%s%s); "
            "scripts/get-model.sh fetches the default one\n",
            s->cmd, SESSION_DEFAULT_MODEL, n > 0 ? " and " : "", n > 0 ? s->model_path : "");
    s->model_path[0] = 0;
    return 1;
}

static int kv_scheme_error(const session *s, const session_scheme *scheme, const char *msg) {
    fprintf(stderr, "tq %s: KV scheme '%s' does not fit this model: %s\n", s->cmd,
            scheme ? scheme->name : "f16", msg);
    return TQ_EXIT_USAGE;
}

/* scheme NULL: f16. */
static int load_model(session *s, const session_scheme *scheme, int max_batch, model **out) {
    model_params p;
    memset(&p, 0, sizeof p);
    p.max_ctx = s->n_ctx;
    p.max_batch = max_batch;
    p.n_threads = s->n_threads;
    p.kv_scheme = scheme ? &scheme->scheme : NULL;
    char err[300];
    model_status st = model_load(s->model_path, &p, out, err, sizeof err);
    if (st == MODEL_ERR_KV_SCHEME) return kv_scheme_error(s, scheme, err);
    if (st == MODEL_ERR_CONTEXT) {
        fprintf(stderr, "tq %s: -c %d is larger than the model's context (%s)\n", s->cmd, s->n_ctx,
                err);
        return TQ_EXIT_USAGE;
    }
    if (st != MODEL_OK) {
        fprintf(stderr, "tq %s: cannot load model '%s': %s (%s)\n", s->cmd, s->model_path, err,
                model_status_name(st));
        return 1;
    }
    return 0;
}

int session_open(session *s, const session_opts *o) {
    memset(s, 0, sizeof *s);
    s->cmd = o->cmd;
    s->n_ctx = (int)o->n_ctx;
    s->n_threads = (int)o->n_threads;
    int rc = find_model(s, o);
    if (rc) return rc;
    rc = load_model(s, NULL, s->n_ctx < 512 ? s->n_ctx : 512, &s->first);
    if (rc) return rc;
    s->cfg = *model_get_config(s->first);
    gguf_vocab gv;
    char err[300];
    vocab_status vs = vocab_build(s->first->file, &gv, err, sizeof err);
    if (vs != VOCAB_OK) {
        fprintf(stderr, "tq %s: no usable vocabulary in '%s': %s\n", s->cmd, s->model_path, err);
        session_close(s);
        return 1;
    }
    int ts = tokenizer_create(&gv.v, &s->tok);
    vocab_free(&gv);
    if (ts != TOKENIZER_OK) {
        fprintf(stderr, "tq %s: cannot build the tokenizer: %s\n", s->cmd, tokenizer_status_name(ts));
        session_close(s);
        return 1;
    }
    return 0;
}

void session_close(session *s) {
    tokenizer_free(s->tok);
    model_free(s->first);
    s->tok = NULL;
    s->first = NULL;
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
    /* The first sequence reuses the model loaded for the configuration when its batch fits. */
    if (s->first && s->first->params.max_batch >= max_batch) {
        model_status st = model_set_kv_scheme(s->first, &scheme->scheme);
        if (st != MODEL_OK) return kv_scheme_error(s, scheme, model_last_error(s->first));
        q->m = s->first;
        s->first = NULL;
    } else {
        int rc = load_model(s, scheme, max_batch, &q->m);
        if (rc) return rc;
    }
    q->cmd = s->cmd;
    q->scheme = *scheme;
    q->cfg = model_get_config(q->m);
    q->n_ctx = s->n_ctx;
    q->max_batch = q->m->params.max_batch;
    model_truncate(q->m, 0);
    return 0;
}

void session_seq_close(session_seq *q) {
    model_free(q->m);
    q->m = NULL;
}

void session_seq_reset(session_seq *q) { model_truncate(q->m, 0); }

int session_seq_len(const session_seq *q) { return model_seq_len(q->m); }

/* session_forward, and with as_decode (all_logits implied) each max_batch piece in the
 * decode-exact chunks of model_forward_as_decode (a piece of a decode-exact run is one too);
 * as_decode = 2: the first piece by model_forward_after_prompt (its first token alone). */
static int forward(session_seq *q, const int32_t *tokens, int n, int pos0, int all_logits, int as_decode,
                   float *logits) {
    if (pos0 + n > q->n_ctx) {
        fprintf(stderr, "tq %s: %d positions do not fit the context of %d (-c)\n", q->cmd,
                pos0 + n, q->n_ctx);
        return 1;
    }
    for (int done = 0; done < n;) {
        int len = n - done < q->max_batch ? n - done : q->max_batch;
        int last = done + len == n;
        float *out = all_logits || last ? logits : NULL;
        const model_rows_mode mode = as_decode == MODEL_ROWS_AFTER_PROMPT && done > 0 ? MODEL_ROWS_AS_DECODE
                                                                                  : (model_rows_mode)as_decode;
        model_status st = all_logits ? model_forward_rows(q->m, tokens + done, len, pos0 + done, mode, out)
                                     : model_forward(q->m, tokens + done, len, pos0 + done, 0, out);
        if (st != MODEL_OK) {
            fprintf(stderr, "tq %s: forward pass failed: %s (%s)\n", q->cmd,
                    model_last_error(q->m), model_status_name(st));
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

size_t session_kv_bytes_per_token(const session_seq *q) {
    const tq_kv_cache *c = model_kv_cache(q->m);
    size_t total = 0;
    for (int l = 0; l < q->cfg->n_layer; l++) {
        tq_kv_layer_scheme ls = tq_kv_cache_layer_scheme(c, l);
        size_t kb = 0, vb = 0;
        if (tq_kv_layer_scheme_bytes(&ls, q->cfg->head_dim, q->cfg->head_dim_v, &kb, &vb) != TQ_OK)
            return 0;
        total += (kb + vb) * (size_t)q->cfg->n_head_kv;
    }
    return total;
}

int session_kv_memory(const session_seq *q, tq_kv_memory *mem) {
    memset(mem, 0, sizeof *mem);
    return model_kv_memory(q->m, mem) == MODEL_OK ? 0 : 1;
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

int session_usage_error(const session_opts *o, session_usage_fn usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tq %s: ", o->cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    usage(stderr, o);
    return TQ_EXIT_USAGE;
}

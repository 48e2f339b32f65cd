/* The flags every model command takes (model_session.h: session_opts): their option table for
 * tools/options.h, the --kv list, and the scheme list they name once parsed. */
#include "model_session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "kv_auto.h"

static long online_cpus(void) {
#ifdef _SC_NPROCESSORS_ONLN
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n >= 1) return n > 256 ? 256 : n;
#endif
    return 1;
}

static int multi_scheme(const session_opts *o) {
    return o->kv_mode == SESSION_KV_EACH || o->kv_mode == SESSION_KV_WITH_F16;
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

/* --kv S[,S...]: each scheme parsed as it is read (TOOL_OPT_CALL). */
static int kv_option(void *ctx, const char *name, const char *value) {
    session_opts *o = ctx;
    (void)name;
    for (const char *p = value;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int rc = add_scheme(o, p, len);
        if (rc) return rc;
        if (!comma) return 0;
        if (!multi_scheme(o)) {
            fprintf(stderr, "tq %s: --kv takes one scheme here, not a list\n", o->cmd);
            return TQ_EXIT_USAGE;
        }
        p = comma + 1;
    }
}

void session_opts_init(session_opts *o, const char *cmd, long default_ctx, session_kv_mode kv_mode) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->n_ctx = default_ctx;
    o->n_threads = online_cpus();
    o->kv_mode = kv_mode;
    o->calib_tokens = KV_AUTO_DEFAULT_TOKENS;
    snprintf(o->ctx_help, sizeof o->ctx_help,
             "context: positions a sequence may reach (default %ld); more than the\n"
             "model's context length is a usage error (exit 2)",
             default_ctx);
    snprintf(o->threads_help, sizeof o->threads_help, "threads (default: online CPUs, %ld here)",
             o->n_threads);
    static const struct {
        const char *meta, *help;
    } kv[] = {
        [SESSION_KV_ONE] = {"S", "KV-cache scheme (default f16)"},
        [SESSION_KV_VS_F16] = {"SCHEME", "the compressed scheme compared with f16 (default turbo3)"},
        [SESSION_KV_EACH] = {"S[,S...]", "KV-cache schemes to run, each on its own (default f16)"},
        [SESSION_KV_WITH_F16] = {"S[,S...]", "KV-cache schemes to run (default f16; f16 is always "
                                             "run first as\nthe reference)"},
    };
    const tool_opt flags[] = {
        {OPT_STRING("-m", "PATH|NAME", &o->model_path,
                    "a GGUF file, or a model name: gemma3-270m, smollm2-135m\n"
                    "(looked up in ./models, else in the tq binary's ../models);\n"
                    "default: $TQ_MODEL, else gemma3-270m"),
         .alias = "--model"},
        {OPT_INT("-c", "CTX", &o->n_ctx, 8, 1L << 24, o->ctx_help), .alias = "--ctx-size"},
        {OPT_INT("-t", "THREADS", &o->n_threads, 1, 256, o->threads_help), .alias = "--threads"},
        {OPT_CALL("--kv", kv[kv_mode].meta, kv_option, o, kv[kv_mode].help)},
        {OPT_STRING("--cache-type-k", "T", &o->cache_type_k,
                    "llama.cpp-style K / V cache types (f16, q8_0, q4_0, turboN); the\n"
                    "other defaults to f16; together they name one more scheme. q8_0 / q4_0\n"
                    "are unrotated: llama.cpp's Hadamard-rotated caches are --kv q8_0r / q4_0r"),
         .show = "--cache-type-k T, --cache-type-v T"},
        {OPT_STRING("--cache-type-v", "T", &o->cache_type_v, NULL)}, /* listed with -k */
        {OPT_INT("--calib-tokens", "N", &o->calib_tokens, KV_AUTO_MIN_TOKENS, 1L << 20,
                 "auto:B calibrates on at most N tokens (default 128): the prompt's\n"
                 "when it has 64 or more, else a built-in text (doc/kv-auto.md)")},
        {OPT_TEXT("Schemes (doc/kvcache.md): f16, q8_0, q4_0, q8_0r, q4_0r (rotated), turboB (turbo3,\n"
                  "turbo3.5), turboKvV (turbo4v2), kKvV or k=K:v=V, each followed by any\n"
                  ":option=value (turbo schemes keep the first 4 tokens exact: :sink=N changes\n"
                  "that); auto:B[:options] (B in [2, 8]) gives each layer's K and V its own width\n"
                  "at turboB's bytes.")},
    };
    _Static_assert(OPT_COUNT(flags) <= SESSION_N_FLAGS, "session_opts.flags is too short");
    memcpy(o->flags, flags, sizeof flags);
    o->n_flags = OPT_COUNT(flags);
}

/* A llama.cpp cache type as one side of an explicit k=K:v=V scheme: f16 / q8_0 / q4_0 stay,
 * turboN becomes N (the bits). NULL for anything else. q8_0 / q4_0 stay the plain formats,
 * although llama.cpp (since 2026) rotates K and V before q8_0 / q4_0 under these names: the
 * rotated formats are q8_0r / q4_0r, named by --kv (doc/kvcache.md §2). */
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

int session_opts_finish(session_opts *o) {
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
        if (!multi_scheme(o) && o->n_schemes > 0) {
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
    if (o->kv_mode == SESSION_KV_WITH_F16) {
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

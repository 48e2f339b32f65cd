/* tq serve's engine: the job queue, admission by KV bytes, and the thread that steps every
 * running sequence in one batched forward (serve_engine.h). One mutex guards the queue, the
 * jobs' shared fields and the counters; the engine thread holds it only between steps. */
#include "serve_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "eval.h"
#include "sampler.h"
#include "serve_disk.h"

#define MAX_SCHEMES 8    /* distinct KV schemes whose byte counts are kept */
#define MAX_SNAPSHOTS 64 /* prompts kept for reuse, at most */
#define MIN_REUSE 16     /* fewer shared tokens are prefilled again */
#define KEEP_TAIL 8      /* a prompt is kept without its last tokens, which a longer prompt
                            often tokenizes otherwise (a word continued past the end) */
#define KEY_SCALE_TOKENS 512 /* the cache's query statistics span (src/kvcache_internal.h) */

typedef enum job_phase { JOB_QUEUED, JOB_PREFILL, JOB_DECODE, JOB_DONE } job_phase;

struct serve_job {
    serve_engine *e;
    int refs;                 /* the reader's and the engine's */
    char id[40];
    /* set at create, then the engine's alone */
    session_scheme scheme;
    int32_t *ids;             /* the prompt, then the generated tokens: (n_prompt + max_tokens) */
    int n_prompt, max_tokens;
    sampler_params sp;
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    size_t need_steady, need_prefill; /* admission: bytes */
    model_context *x;
    sampler *smp;
    int prefilled;            /* prompt tokens run (or taken from a kept prompt) */
    int began;                /* its prefill has had a step: it goes on before any other's */
    int trimmed;              /* the raw pages its compressed prompt left are freed */
    int n_gen;
    int32_t next;             /* the token to run next while decoding */
    float *logits;            /* (n_vocab) */
    double t_submit;
    /* shared: under e->mu */
    job_phase phase;
    int cancelled;
    char *text;               /* generated text */
    size_t len, cap;
    size_t visible;           /* text[0, visible) may be read */
    const char *finish_reason;
    int error;
    char error_message[256];
    double t_first;
    pthread_cond_t cv;        /* text grew or the job ended */
    serve_job *next_in_list;
};

/* A prompt right after its raw prefill, before the first decode step compressed it: a fork of
 * the sequence's context, whose pages it shares until then. A later prompt that starts with
 * (part of) its tokens forks it and prefills only the rest, which gives what a fresh prefill
 * gives: the prefix's K/V are the raw ones a fresh prefill computes. */
typedef struct snapshot {
    model_context *x;
    int32_t *tokens;
    int n;
    size_t bytes;      /* its raw prompt's K/V (what it holds once the source compresses) */
    char scheme[96];         /* the session scheme's name (what requests give) */
    char text[256];          /* its canonical text (the --cache-dir files' key) */
    unsigned long long used; /* the engine step it was last used in (LRU) */
} snapshot;

typedef struct scheme_bytes {
    char name[96];
    model_context *probe; /* a 1-position context of the scheme: its per-layer bytes */
} scheme_bytes;

struct serve_engine {
    session *s;
    session_scheme def;
    serve_engine_opts o;
    model_batch *batch;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* work arrived, or stop */
    int draining, quit;
    serve_job *queue_head, *queue_tail;
    serve_job **active;       /* (parallel) */
    int n_active;
    size_t reserved;          /* Σ need_steady of the active */
    scheme_bytes schemes[MAX_SCHEMES];
    int n_schemes;
    unsigned long long n_ids;
    serve_metrics m;
    double rate_t0;           /* the rate window's start */
    unsigned long long rate_p0, rate_g0;
    double kv_t;              /* when the KV bytes were last counted (engine thread) */
    snapshot snaps[MAX_SNAPSHOTS]; /* the prefix cache (engine thread; counts under mu) */
    serve_disk *disk;         /* --cache-dir: kept prompts that leave memory (engine thread) */
    int n_snaps;
    size_t snap_bytes;
    batch_seq *step_seqs;     /* (parallel) a step's sequences (engine thread) */
    serve_job **step_jobs;    /* (parallel) and their jobs */
};

static double now_s(void) { return tool_now(); }

/* ---- bytes per scheme --------------------------------------------------------------------- */

/* The probe context of scheme (made once, under e->mu); NULL when the scheme cannot run. */
static model_context *probe_of(serve_engine *e, const session_scheme *sc) {
    for (int i = 0; i < e->n_schemes; i++)
        if (strcmp(e->schemes[i].name, sc->name) == 0) return e->schemes[i].probe;
    if (e->n_schemes == MAX_SCHEMES) return NULL;
    const context_params p = {1, 1, 0, &sc->scheme, 0};
    model_context *x = NULL;
    char err[256];
    if (context_create(e->s->m, &p, NULL, &x, err, sizeof err) != MODEL_OK) return NULL;
    scheme_bytes *b = &e->schemes[e->n_schemes++];
    snprintf(b->name, sizeof b->name, "%s", sc->name);
    b->probe = x;
    return x;
}

static void need_locked(serve_engine *e, const session_scheme *sc, int n_prompt, int len, size_t *steady,
                        size_t *prefill) {
    model_context *x = probe_of(e, sc);
    *steady = *prefill = 0;
    if (x != NULL) eval_kv_need_bytes(x, n_prompt, len, steady, prefill);
}

void serve_engine_need_bytes(serve_engine *e, const session_scheme *scheme, int n_prompt, int len, size_t *steady,
                             size_t *prefill) {
    pthread_mutex_lock(&e->mu);
    need_locked(e, scheme, n_prompt, len, steady, prefill);
    pthread_mutex_unlock(&e->mu);
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static void job_free(serve_job *j) {
    context_free(j->x);
    sampler_free(j->smp);
    free(j->ids);
    free(j->logits);
    free(j->text);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Drops one reference (under e->mu); frees the job at the last. */
static void job_unref_locked(serve_job *j) {
    if (--j->refs == 0) job_free(j);
}

void serve_job_release(serve_job *j) {
    if (j == NULL) return;
    serve_engine *e = j->e;
    pthread_mutex_lock(&e->mu);
    if (j->phase != JOB_DONE) j->cancelled = 1;
    job_unref_locked(j);
    pthread_mutex_unlock(&e->mu);
}

const char *serve_job_id(const serve_job *j) { return j->id; }

int serve_job_create(serve_engine *e, const serve_params *p, int32_t *ids, int n, serve_job **out, serve_error *err) {
    *out = NULL;
    session_scheme sc = e->def;
    if (p->kv[0]) {
        char why[256];
        if (session_scheme_parse(p->kv, &sc, why, sizeof why) != 0 || sc.is_auto || !session_engine_supports(&sc)) {
            free(ids);
            return serve_error_set(err, 400, "invalid_request_error", "kv", NULL, "kv '%.80s': %s", p->kv,
                                   sc.is_auto ? "auto:B needs a calibration; tq serve takes fixed schemes" : why);
        }
    }
    const int n_ctx = e->o.n_ctx;
    if (n >= n_ctx) {
        free(ids);
        return serve_error_set(err, 400, "invalid_request_error", "messages", "context_length_exceeded",
                               "the prompt is %d tokens; the context is %d (at least one must be left to generate)",
                               n, n_ctx);
    }
    long mt = p->max_tokens;
    if (mt < 0) mt = p->kind == SERVE_COMPLETION ? 16 : n_ctx - n;
    if (mt > n_ctx - n) {
        free(ids);
        return serve_error_set(err, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                               "the prompt (%d tokens) and max_tokens (%ld) exceed the context of %d positions", n, mt,
                               n_ctx);
    }
    serve_job *j = calloc(1, sizeof *j);
    int32_t *grown = j ? realloc(ids, ((size_t)n + (size_t)mt + 1) * sizeof *ids) : NULL;
    if (j == NULL || grown == NULL) {
        free(j);
        free(ids);
        return serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->e = e;
    j->refs = 1;
    j->scheme = sc;
    j->ids = grown;
    j->n_prompt = n;
    j->max_tokens = (int)mt;
    j->sp = (sampler_params){(float)p->temperature, (int)p->top_k, (float)p->top_p, p->seed};
    pthread_cond_init(&j->cv, NULL);
    pthread_mutex_lock(&e->mu);
    if (!p->has_seed) j->sp.seed = (uint64_t)time(NULL) * 2654435761u + ++e->n_ids;
    snprintf(j->id, sizeof j->id, "cmpl-%llx%08llx", (unsigned long long)time(NULL), ++e->n_ids);
    need_locked(e, &sc, n, n + (int)mt, &j->need_steady, &j->need_prefill);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < p->n_stop; i++) {
        j->stop[i] = strdup(p->stop[i]);
        if (j->stop[i] == NULL) break;
        j->n_stop++;
    }
    if (j->need_steady == 0 || j->n_stop != p->n_stop) {
        job_free(j);
        return serve_error_set(err, 500, "server_error", NULL, NULL, "cannot size the KV cache of scheme %s", sc.name);
    }
    const size_t need = j->need_steady > j->need_prefill ? j->need_steady : j->need_prefill;
    if (e->o.kv_budget && need > e->o.kv_budget) {
        job_free(j);
        return serve_error_set(err, 400, "invalid_request_error", "max_tokens", "kv_budget_exceeded",
                               "this request can reach %.1f MB of KV cache with %s, more than the server's whole "
                               "--kv-budget of %.1f MB: lower max_tokens or shorten the prompt",
                               need / 1e6, sc.name, e->o.kv_budget / 1e6);
    }
    *out = j;
    return 0;
}

int serve_engine_submit(serve_engine *e, serve_job *j, serve_error *err) {
    pthread_mutex_lock(&e->mu);
    if (e->draining) {
        pthread_mutex_unlock(&e->mu);
        return serve_error_set(err, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    }
    j->refs++;
    j->phase = JOB_QUEUED;
    j->t_submit = now_s();
    if (e->queue_tail) e->queue_tail->next_in_list = j;
    else e->queue_head = j;
    e->queue_tail = j;
    e->m.queued++;
    e->m.requests++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

size_t serve_job_read(serve_job *j, size_t *pos, char *buf, size_t cap, double timeout_s, serve_job_state *st) {
    serve_engine *e = j->e;
    pthread_mutex_lock(&e->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_s >= 0) {
        long long ns = (long long)until.tv_nsec + (long long)(timeout_s * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
    }
    while (j->visible <= *pos && j->phase != JOB_DONE) {
        int rc = timeout_s < 0 ? pthread_cond_wait(&j->cv, &e->mu) : pthread_cond_timedwait(&j->cv, &e->mu, &until);
        if (rc == ETIMEDOUT) break;
    }
    size_t n = j->visible > *pos ? j->visible - *pos : 0;
    if (n > cap) n = cap;
    if (n) memcpy(buf, j->text + *pos, n);
    *pos += n;
    st->done = j->phase == JOB_DONE && *pos >= j->visible;
    st->finish_reason = j->finish_reason;
    st->n_prompt = j->n_prompt;
    st->n_gen = j->n_gen;
    st->error = j->error;
    snprintf(st->error_message, sizeof st->error_message, "%s", j->error_message);
    st->t_first = j->t_first > 0 ? j->t_first - j->t_submit : 0.0;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* ---- the engine thread ---------------------------------------------------------------------- */

/* Ends a job (under e->mu): why = "stop"/"length", or an error message. */
static void finish_locked(serve_job *j, const char *why, const char *error) {
    if (j->phase == JOB_DONE) return;
    if (error) {
        j->error = 1;
        snprintf(j->error_message, sizeof j->error_message, "%.250s", error);
    }
    j->finish_reason = why;
    j->visible = j->len;
    j->phase = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

/* Appends a token's text (under e->mu), ends the job at a stop sequence, and moves
 * `visible` up to what can no longer turn into a stop sequence nor split a character. */
static void emit_locked(serve_job *j, const char *piece, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *t = realloc(j->text, cap);
        if (t == NULL) {
            finish_locked(j, NULL, "out of memory");
            return;
        }
        j->text = t;
        j->cap = cap;
    }
    memcpy(j->text + j->len, piece, n);
    j->len += n;
    j->text[j->len] = '\0';
    /* a stop sequence: the text ends before its first occurrence */
    size_t cut = j->len;
    for (int i = 0; i < j->n_stop; i++) {
        const char *hit = strstr(j->text, j->stop[i]);
        if (hit && (size_t)(hit - j->text) < cut) cut = (size_t)(hit - j->text);
    }
    if (cut < j->len) {
        j->len = cut;
        j->text[cut] = '\0';
        finish_locked(j, "stop", NULL);
        return;
    }
    /* hold back the longest tail that begins a stop sequence */
    size_t hold = 0;
    for (int i = 0; i < j->n_stop; i++) {
        size_t sl = strlen(j->stop[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= j->len && memcmp(j->text + j->len - k, j->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    size_t vis = chat_utf8_whole(j->text, j->len - hold);
    if (vis > j->visible) {
        j->visible = vis;
        pthread_cond_broadcast(&j->cv);
    }
}

/* ---- the prefix cache (engine thread) ------------------------------------------------------ */

/* The folder's counters into the metrics. */
static void disk_metrics(serve_engine *e) {
    serve_disk_stats ds;
    serve_disk_stats_get(e->disk, &ds);
    pthread_mutex_lock(&e->mu);
    e->m.disk_entries = ds.entries;
    e->m.disk_bytes = ds.bytes;
    e->m.disk_saves = ds.saves;
    e->m.disk_loads = ds.loads;
    e->m.disk_failures = ds.failures;
    pthread_mutex_unlock(&e->mu);
}

/* Writes kept prompt i to the --cache-dir folder (when there is one). */
static void snapshot_save(serve_engine *e, int i) {
    if (e->disk == NULL) return;
    const snapshot *sn = &e->snaps[i];
    serve_disk_save(e->disk, sn->x, sn->tokens, sn->n, sn->text);
    disk_metrics(e);
}

static void snapshot_drop(serve_engine *e, int i) {
    snapshot *sn = &e->snaps[i];
    snapshot_save(e, i);
    context_free(sn->x);
    free(sn->tokens);
    pthread_mutex_lock(&e->mu);
    e->snap_bytes -= sn->bytes;
    e->snaps[i] = e->snaps[--e->n_snaps];
    e->m.prefix_entries = e->n_snaps;
    e->m.prefix_bytes = e->snap_bytes;
    pthread_mutex_unlock(&e->mu);
}

/* Makes room for bytes more (least recently used first, each saved to the folder if any);
 * 0 when they cannot fit at all. */
static int snapshot_room(serve_engine *e, size_t bytes) {
    if (bytes == 0 || bytes > e->o.prefix_cache) return 0;
    while (e->n_snaps > 0 && (e->n_snaps == MAX_SNAPSHOTS || e->snap_bytes + bytes > e->o.prefix_cache)) {
        int lru = 0;
        for (int i = 1; i < e->n_snaps; i++)
            if (e->snaps[i].used < e->snaps[lru].used) lru = i;
        snapshot_drop(e, lru);
    }
    return 1;
}

/* Adds sn (its context and tokens now the cache's); returns its index. */
static int snapshot_add(serve_engine *e, const snapshot *sn) {
    pthread_mutex_lock(&e->mu);
    const int i = e->n_snaps++;
    e->snaps[i] = *sn;
    e->snap_bytes += sn->bytes;
    e->m.prefix_entries = e->n_snaps;
    e->m.prefix_bytes = e->snap_bytes;
    pthread_mutex_unlock(&e->mu);
    return i;
}

/* The canonical text of a job's scheme (256 bytes); "" when it has none. */
static void scheme_text(const serve_job *j, char *buf) {
    if (tq_kv_scheme_format(&j->scheme.scheme, buf, 256) != TQ_OK) buf[0] = '\0';
}

/* Where j's prompt is kept: the last chunk boundary (a multiple of the chunk) at or before
 * n_prompt - KEEP_TAIL, or 0 when it is not kept. */
static int keep_at(const serve_engine *e, const serve_job *j) {
    if (e->o.prefix_cache == 0 || !j->scheme.scheme.prefill_raw) return 0;
    const int k = (j->n_prompt - KEEP_TAIL) / e->o.chunk * e->o.chunk;
    return k >= MIN_REUSE ? k : 0;
}

/* Keeps j's first n prompt tokens (just prefilled, raw) for reuse, evicting the least recently
 * used while the cache is over its bytes. */
static void snapshot_keep(serve_engine *e, serve_job *j, int n) {
    for (int i = 0; i < e->n_snaps; i++) /* the same prompt already kept: refresh it */
        if (e->snaps[i].n == n && strcmp(e->snaps[i].scheme, j->scheme.name) == 0 &&
            memcmp(e->snaps[i].tokens, j->ids, (size_t)n * sizeof *j->ids) == 0) {
            e->snaps[i].used = e->m.steps;
            return;
        }
    const size_t bytes = (size_t)((double)j->need_prefill * n / j->n_prompt);
    if (!snapshot_room(e, bytes)) return;
    snapshot sn = {0};
    char err[256];
    sn.tokens = malloc((size_t)n * sizeof *sn.tokens);
    if (sn.tokens == NULL || context_fork(j->x, e->s->pool, &sn.x, err, sizeof err) != MODEL_OK) {
        free(sn.tokens);
        return;
    }
    memcpy(sn.tokens, j->ids, (size_t)n * sizeof *sn.tokens);
    sn.n = n;
    sn.bytes = bytes;
    snprintf(sn.scheme, sizeof sn.scheme, "%s", j->scheme.name);
    scheme_text(j, sn.text);
    sn.used = e->m.steps;
    snapshot_add(e, &sn);
}

/* How many of j's prompt tokens a kept prompt (kept[0, n)) can give, so that the result is a
 * fresh prefill's bit for bit: a chunk boundary (every prefill chunks at multiples of the chunk,
 * and attention's float sums depend on the chunks), at least two prompt tokens left to run (one
 * alone would be a decode step), and a kept prompt used whole, or cut at or past the span over
 * which the cache gathers query statistics (which a truncation does not rewind); 0 below
 * MIN_REUSE. */
static int usable(const serve_engine *e, const int32_t *kept, int n, const serve_job *j) {
    int k = 0;
    while (k < n && k < j->n_prompt && kept[k] == j->ids[k]) k++;
    if (k > j->n_prompt - 2) k = j->n_prompt - 2;
    k = k / e->o.chunk * e->o.chunk;
    if (k < n && k < KEY_SCALE_TOKENS) return 0;
    return k >= MIN_REUSE ? k : 0;
}

/* Kept prompt d of the --cache-dir folder, loaded into memory as a kept prompt: its index, or
 * -1 (nothing changed but the folder's index when the file no longer fits). Loaded first, then
 * room is made (which may write others to the folder and so renumber its entries). */
static int snapshot_from_disk(serve_engine *e, serve_job *j, int d) {
    int n = 0;
    const int32_t *toks = serve_disk_tokens(e->disk, d, &n);
    snapshot sn = {0};
    char err[256];
    const context_params p = {n, e->o.chunk + 1 < n ? e->o.chunk + 1 : n, 0, &j->scheme.scheme, 0};
    sn.tokens = malloc((size_t)n * sizeof *sn.tokens);
    int ok = sn.tokens != NULL && context_create(e->s->m, &p, e->s->pool, &sn.x, err, sizeof err) == MODEL_OK;
    if (ok) memcpy(sn.tokens, toks, (size_t)n * sizeof *sn.tokens); /* before the load: a failed one drops d */
    ok = ok && serve_disk_load(e->disk, d, sn.x) == 0;
    sn.bytes = (size_t)((double)j->need_prefill * n / j->n_prompt);
    ok = ok && snapshot_room(e, sn.bytes);
    disk_metrics(e);
    if (!ok) {
        context_free(sn.x);
        free(sn.tokens);
        return -1;
    }
    sn.n = n;
    snprintf(sn.scheme, sizeof sn.scheme, "%s", j->scheme.name);
    scheme_text(j, sn.text);
    sn.used = e->m.steps;
    return snapshot_add(e, &sn);
}

/* j's context as a fork of the kept prompt sharing the most usable tokens with j's (usable()),
 * in memory or, when the --cache-dir folder has a longer one, loaded from there: 1 with
 * j->prefilled set, or 0 (nothing fits: a fresh context). */
static int snapshot_reuse(serve_engine *e, serve_job *j, int len) {
    int best = -1, best_k = 0;
    for (int i = 0; i < e->n_snaps; i++) {
        if (strcmp(e->snaps[i].scheme, j->scheme.name) != 0) continue;
        const int k = usable(e, e->snaps[i].tokens, e->snaps[i].n, j);
        if (k > best_k) best = i, best_k = k;
    }
    if (e->disk != NULL) {
        char text[256];
        scheme_text(j, text);
        int best_d = -1, best_dk = best_k;
        for (int d = 0; d < serve_disk_count(e->disk); d++) {
            if (strcmp(serve_disk_scheme(e->disk, d), text) != 0) continue;
            int n = 0;
            const int32_t *toks = serve_disk_tokens(e->disk, d, &n);
            const int k = usable(e, toks, n, j);
            if (k > best_dk) best_d = d, best_dk = k;
        }
        const int before = serve_disk_count(e->disk);
        const int i = best_d >= 0 ? snapshot_from_disk(e, j, best_d) : -1;
        if (i >= 0) best = i, best_k = best_dk;
        else if (best_d >= 0 && serve_disk_count(e->disk) < before)
            return snapshot_reuse(e, j, len); /* that file is gone from the index: the next best */
        /* else it is larger than the whole prefix cache: nothing moved, the memory's best */
    }
    if (best < 0) return 0;
    char err[256];
    model_context *x = NULL;
    if (context_fork_ctx(e->snaps[best].x, e->s->pool, len, &x, err, sizeof err) != MODEL_OK) return 0;
    if (best_k < e->snaps[best].n) context_truncate(x, best_k);
    if (context_seq_len(x) != best_k) { /* the sliding windows no longer reach back */
        context_free(x);
        return 0;
    }
    e->snaps[best].used = e->m.steps;
    j->x = x;
    j->prefilled = best_k;
    pthread_mutex_lock(&e->mu);
    e->m.prefix_reused_tokens += (unsigned long long)best_k;
    e->m.prefix_hits++;
    pthread_mutex_unlock(&e->mu);
    return 1;
}

/* The running sequence's context for job j (outside the lock): a kept prompt's fork when one
 * shares enough of j's, else a fresh one. */
static int open_job(serve_engine *e, serve_job *j, char *err, size_t cap) {
    const int len = j->n_prompt + j->max_tokens;
    const context_params p = {len, e->o.chunk + 1 < len ? e->o.chunk + 1 : len, 0, &j->scheme.scheme, 0};
    if (!snapshot_reuse(e, j, len) && context_create(e->s->m, &p, e->s->pool, &j->x, err, cap) != MODEL_OK)
        return -1;
    j->smp = sampler_create(&j->sp, e->s->cfg.n_vocab);
    j->logits = malloc((size_t)e->s->cfg.n_vocab * sizeof *j->logits);
    if (j->smp == NULL || j->logits == NULL) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    return 0;
}

/* The largest prefill excess (need_prefill - need_steady) among running jobs still
 * prefilling, and the candidate's. */
static size_t prefill_excess(const serve_job *j) {
    return j->need_prefill > j->need_steady ? j->need_prefill - j->need_steady : 0;
}

/* Admits queued jobs in order while they fit (under e->mu; opens their contexts with the
 * lock dropped). */
static void admit_locked(serve_engine *e) {
    while (e->queue_head != NULL && e->n_active < e->o.parallel) {
        serve_job *j = e->queue_head;
        if (!j->cancelled && e->o.kv_budget) {
            size_t excess = prefill_excess(j);
            for (int i = 0; i < e->n_active; i++)
                if (e->active[i]->phase == JOB_PREFILL && prefill_excess(e->active[i]) > excess)
                    excess = prefill_excess(e->active[i]);
            if (e->reserved + j->need_steady + excess > e->o.kv_budget) break; /* waits, in order */
        }
        e->queue_head = j->next_in_list;
        if (e->queue_head == NULL) e->queue_tail = NULL;
        j->next_in_list = NULL;
        e->m.queued--;
        if (j->cancelled) {
            finish_locked(j, NULL, "cancelled");
            job_unref_locked(j);
            continue;
        }
        char err[256];
        pthread_mutex_unlock(&e->mu);
        int rc = open_job(e, j, err, sizeof err);
        pthread_mutex_lock(&e->mu);
        if (rc != 0) {
            finish_locked(j, NULL, err);
            job_unref_locked(j);
            continue;
        }
        j->phase = JOB_PREFILL;
        e->reserved += j->need_steady;
        e->active[e->n_active++] = j;
        if (e->n_active > e->m.max_active) e->m.max_active = e->n_active;
    }
}

/* Removes active job i (under e->mu): done or cancelled. */
static void retire_locked(serve_engine *e, int i) {
    serve_job *j = e->active[i];
    e->reserved -= j->need_steady;
    context_free(j->x);
    j->x = NULL;
    e->active[i] = e->active[--e->n_active];
    job_unref_locked(j);
}

/* After a forward: the job's next token from its logits (outside the lock: sampling and the
 * piece), then its text and end (under the lock). */
static void after_logits(serve_engine *e, serve_job *j) {
    const int32_t tok = sampler_sample(j->smp, j->logits);
    char piece[256];
    size_t n = 0;
    const int stop = tok < 0 || session_is_stop(e->s, tok);
    if (!stop) n = session_piece(e->s, tok, piece, sizeof piece);
    pthread_mutex_lock(&e->mu);
    if (j->t_first == 0) {
        j->t_first = now_s();
        e->m.ttft_last = j->t_first - j->t_submit;
        e->m.ttft_sum += e->m.ttft_last;
        e->m.ttft_count += 1;
    }
    if (stop) {
        finish_locked(j, "stop", NULL);
    } else {
        j->ids[j->n_prompt + j->n_gen] = tok;
        j->n_gen++;
        e->m.generated_tokens++;
        emit_locked(j, piece, n);
        if (j->phase != JOB_DONE && j->n_gen >= j->max_tokens) finish_locked(j, "length", NULL);
        j->next = tok;
    }
    pthread_mutex_unlock(&e->mu);
}

/* One step over the running jobs: every decoding one's next token, and the next chunk of the
 * oldest prefilling one. Returns 0, or -1 when the step failed (its jobs are ended). */
static void step(serve_engine *e, serve_job **run, int n_run) {
    batch_seq *bs = e->step_seqs;
    serve_job **js = e->step_jobs;
    /* one prompt at a time (admission counts one raw prompt's excess): the one begun, else the
     * first waiting */
    serve_job *pre = NULL;
    for (int i = 0; i < n_run; i++)
        if (run[i]->prefilled < run[i]->n_prompt && (pre == NULL || run[i]->began)) {
            pre = run[i];
            if (pre->began) break;
        }
    if (pre != NULL) pre->began = 1;
    int k = 0;
    for (int i = 0; i < n_run; i++) {
        serve_job *j = run[i];
        if (j->prefilled < j->n_prompt) {
            if (j != pre) continue;
            /* Chunks end at multiples of the chunk size, whatever the prefill started from (a
             * kept prompt's fork included), so that a prompt's K/V and logits do not depend on
             * where it was taken up; the kept prompts end at such a boundary (keep_at). Never a
             * one-token chunk: a one-token call is a decode step, which ends the raw prefill
             * (doc/kvcache.md §3), so a single last token joins the chunk before it (the
             * contexts take chunk + 1 rows). */
            const int C = e->o.chunk, rest = j->n_prompt - j->prefilled;
            int n = C - j->prefilled % C;
            if (n > rest) n = rest;
            else if (rest - n == 1) n++;
            const int last = j->prefilled + n == j->n_prompt;
            bs[k] = (batch_seq){j->x, j->ids + j->prefilled, n, j->prefilled, last ? j->logits : NULL};
        } else {
            const int pos = j->n_prompt + j->n_gen - 1;
            bs[k] = (batch_seq){j->x, j->ids + pos, 1, pos, j->logits};
        }
        js[k++] = j;
    }
    if (k == 0) return;
    model_status st = model_batch_forward(e->batch, bs, k);
    if (st != MODEL_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "engine step failed: %s", model_batch_last_error(e->batch));
        fprintf(stderr, "tq serve: %s\n", msg);
        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < k; i++) finish_locked(js[i], NULL, msg);
        pthread_mutex_unlock(&e->mu);
        return;
    }
    unsigned long long prompt_done = 0;
    for (int i = 0; i < k; i++) {
        serve_job *j = js[i];
        if (j->prefilled == j->n_prompt && !j->trimmed) { /* its first decode step compressed the prompt */
            context_kv_trim(j->x);
            j->trimmed = 1;
        }
        if (j->prefilled < j->n_prompt) {
            j->prefilled += bs[i].n;
            prompt_done += (unsigned long long)bs[i].n;
            if (j->prefilled == keep_at(e, j)) snapshot_keep(e, j, j->prefilled); /* raw */
            if (j->prefilled < j->n_prompt) continue;
        }
        after_logits(e, j);
    }
    pthread_mutex_lock(&e->mu);
    e->m.prompt_tokens += prompt_done;
    e->m.steps++;
    for (int i = 0; i < k; i++)
        if (js[i]->phase == JOB_PREFILL && js[i]->prefilled == js[i]->n_prompt) js[i]->phase = JOB_DECODE;
    pthread_mutex_unlock(&e->mu);
}

/* The library's count of the K/V the running sequences hold (shared pages once), into the
 * metrics at most twice a second (engine thread, outside the lock). */
static void kv_memory(serve_engine *e, serve_job **run, int n_run) {
    static const double every = 0.5;
    const double t = now_s();
    if (t - e->kv_t < every) return;
    e->kv_t = t;
    const model_context **xs = malloc(((size_t)n_run + (size_t)e->n_snaps) * sizeof *xs);
    if (xs == NULL) return;
    int n = 0;
    for (int i = 0; i < n_run; i++)
        if (run[i]->x != NULL) xs[n++] = run[i]->x;
    for (int i = 0; i < e->n_snaps; i++) xs[n++] = e->snaps[i].x;
    tq_kv_memory mem;
    memset(&mem, 0, sizeof mem);
    if (n > 0 && contexts_kv_memory((const model_context *const *)xs, (size_t)n, &mem) != MODEL_OK)
        memset(&mem, 0, sizeof mem);
    free(xs);
    pthread_mutex_lock(&e->mu);
    e->m.kv_data_bytes = mem.data_bytes;
    e->m.kv_f16_bytes = mem.f16_bytes;
    pthread_mutex_unlock(&e->mu);
}

static void update_rates_locked(serve_engine *e) {
    const double t = now_s();
    if (t - e->rate_t0 < 2.0) return;
    e->m.prompt_tok_s = (double)(e->m.prompt_tokens - e->rate_p0) / (t - e->rate_t0);
    e->m.gen_tok_s = (double)(e->m.generated_tokens - e->rate_g0) / (t - e->rate_t0);
    e->rate_t0 = t;
    e->rate_p0 = e->m.prompt_tokens;
    e->rate_g0 = e->m.generated_tokens;
}

static void *engine_main(void *arg) {
    serve_engine *e = arg;
    serve_job **run = calloc((size_t)e->o.parallel, sizeof *run);
    pthread_mutex_lock(&e->mu);
    while (run != NULL) {
        for (int i = 0; i < e->n_active;) /* done or cancelled: out */
            if (e->active[i]->phase == JOB_DONE || e->active[i]->cancelled) {
                finish_locked(e->active[i], NULL, "cancelled");
                retire_locked(e, i);
            } else {
                i++;
            }
        admit_locked(e);
        update_rates_locked(e);
        e->m.active = e->n_active;
        if (e->n_active == 0) {
            if (e->quit && e->queue_head == NULL) break;
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&e->cv, &e->mu, &until);
            continue;
        }
        const int n_run = e->n_active;
        memcpy(run, e->active, (size_t)n_run * sizeof *run);
        pthread_mutex_unlock(&e->mu);
        step(e, run, n_run); /* the running jobs are the engine's until retired here */
        kv_memory(e, run, n_run);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    free(run);
    return NULL;
}

serve_engine *serve_engine_start(session *s, const session_scheme *def, const serve_engine_opts *o, char *err,
                                 size_t err_cap) {
    serve_engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    e->s = s;
    e->def = *def;
    e->o = *o;
    e->active = calloc((size_t)o->parallel, sizeof *e->active);
    e->step_seqs = calloc((size_t)o->parallel, sizeof *e->step_seqs);
    e->step_jobs = calloc((size_t)o->parallel, sizeof *e->step_jobs);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->m.kv_budget_bytes = o->kv_budget;
    e->rate_t0 = now_s();
    const int rows = o->parallel + o->chunk + 1; /* a chunk takes a single last token along */
    const int have = e->active != NULL && e->step_seqs != NULL && e->step_jobs != NULL;
    if (!have || model_batch_create(s->m, rows, o->parallel, 0, s->pool, &e->batch, err, err_cap) != MODEL_OK) {
        if (!have) snprintf(err, err_cap, "out of memory");
        serve_engine_stop(e);
        return NULL;
    }
    if (o->cache_dir != NULL && (e->disk = serve_disk_open(o->cache_dir, o->cache_dir_bytes, s->m, err, err_cap)) == NULL) {
        serve_engine_stop(e);
        return NULL;
    }
    if (e->disk != NULL) disk_metrics(e);
    if (probe_of(e, def) == NULL) {
        snprintf(err, err_cap, "KV scheme %s does not fit this model", def->name);
        serve_engine_stop(e);
        return NULL;
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        snprintf(err, err_cap, "cannot start the engine thread");
        serve_engine_stop(e);
        return NULL;
    }
    e->started = 1;
    return e;
}

void serve_engine_drain(serve_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->draining = 1;
    pthread_mutex_unlock(&e->mu);
}

void serve_engine_stop(serve_engine *e) {
    if (e == NULL) return;
    pthread_mutex_lock(&e->mu);
    e->draining = 1;
    e->quit = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->thread, NULL);
    /* jobs still referenced by readers stay until those let go; none is running now */
    for (int i = 0; i < e->n_schemes; i++) context_free(e->schemes[i].probe);
    for (int i = 0; i < e->n_snaps; i++) {
        if (e->disk != NULL) serve_disk_save(e->disk, e->snaps[i].x, e->snaps[i].tokens, e->snaps[i].n, e->snaps[i].text);
        context_free(e->snaps[i].x);
        free(e->snaps[i].tokens);
    }
    serve_disk_close(e->disk);
    model_batch_free(e->batch);
    free(e->active);
    free(e->step_seqs);
    free(e->step_jobs);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void serve_engine_metrics(serve_engine *e, serve_metrics *m) {
    pthread_mutex_lock(&e->mu);
    update_rates_locked(e);
    *m = e->m;
    m->active = e->n_active;
    m->kv_reserved_bytes = e->reserved;
    m->prefilling = 0;
    for (int i = 0; i < e->n_active; i++) m->prefilling += e->active[i]->phase == JOB_PREFILL;
    pthread_mutex_unlock(&e->mu);
}

/*
 * tq serve: an OpenAI-compatible HTTP server on the compressed KV cache (doc/serve.md).
 *
 * HTTP by libmicrohttpd (a thread per connection, a connection limit, an idle timeout), JSON
 * by jansson (serve_api.c), the sequences by the engine thread (serve_engine.c), which runs
 * every active sequence in one batched forward per step and admits requests by KV bytes.
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions (non-streaming, or server-sent
 * events in OpenAI's chunk format with "stream": true), GET /v1/models, GET /health,
 * GET /metrics (Prometheus text). --api-key KEY: every endpoint but /health wants
 * "Authorization: Bearer KEY". SIGINT/SIGTERM: no new requests (503), the ones in flight
 * finish, then exit 0.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_prompt.h"
#include "commands.h"
#include "common.h"
#include "model_session.h"
#include "serve_api.h"
#include "serve_engine.h"

typedef struct server {
    session *s;
    serve_engine *eng;
    chat_family family;
    const char *model_id;
    const char *api_key;
    pthread_mutex_t tok_mu;   /* the tokenizer is not reentrant */
    atomic_int in_flight;     /* completion requests from their dispatch to their last byte */
    atomic_int draining;
} server;

/* One request's upload, then its state. */
typedef struct conn {
    char *body;
    size_t len, cap;
    int too_big;
    int counted;
} conn;

/* ---- replies -------------------------------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *type, char *body_malloced) {
    const char *b = body_malloced ? body_malloced : "";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body_malloced);
    if (r == NULL) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, int status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s == NULL) return reply(c, 500, "application/json", strdup("{\"error\":{\"message\":\"out of memory\"}}"));
    return reply(c, status, "application/json", s);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const serve_error *e) {
    return reply(c, e->status, "application/json", serve_error_json(e));
}

static enum MHD_Result error_now(struct MHD_Connection *c, int status, const char *type, const char *code,
                                 const char *msg) {
    serve_error e;
    serve_error_set(&e, status, type, NULL, code, "%s", msg);
    return reply_error(c, &e);
}

/* ---- OpenAI objects ------------------------------------------------------------------------- */

static json_t *usage_json(const serve_job_state *st) {
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", st->n_prompt, "completion_tokens", st->n_gen, "total_tokens",
                     st->n_prompt + st->n_gen);
}

/* A whole answer (non-streaming). */
static json_t *answer_json(const server *sv, serve_kind kind, const char *id, long created, const char *text,
                           const serve_job_state *st) {
    json_t *choice = kind == SERVE_CHAT
                         ? json_pack("{s:i,s:{s:s,s:s},s:s,s:n}", "index", 0, "message", "role", "assistant", "content",
                                     text, "finish_reason", st->finish_reason ? st->finish_reason : "stop", "logprobs")
                         : json_pack("{s:i,s:s,s:s,s:n}", "index", 0, "text", text, "finish_reason",
                                     st->finish_reason ? st->finish_reason : "stop", "logprobs");
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o,s:s}", "id", id, "object",
                     kind == SERVE_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)created,
                     "model", sv->model_id, "choices", choice, "usage", usage_json(st), "system_fingerprint",
                     "turboquant");
}

/* One streamed chunk: text (may be empty), first (chat: the role), finish (or NULL). */
static char *chunk_sse(const server *sv, serve_kind kind, const char *id, long created, const char *raw,
                       size_t raw_len, int first, const char *finish) {
    size_t len;
    char *text = serve_utf8_clean(raw, raw_len, &len);
    if (text == NULL) return NULL;
    json_t *choice;
    if (kind == SERVE_CHAT) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (len || !finish) json_object_set_new(delta, "content", json_stringn(text, len));
        choice = json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "delta", delta, "finish_reason",
                           finish ? json_string(finish) : json_null(), "logprobs");
    } else {
        choice = json_pack("{s:i,s:s%,s:o,s:n}", "index", 0, "text", text, len, "finish_reason",
                           finish ? json_string(finish) : json_null(), "logprobs");
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object",
                          kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)created, "model", sv->model_id, "choices", choice);
    free(text);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- streaming ------------------------------------------------------------------------------- */

typedef struct stream {
    const server *sv;
    serve_job *job;
    serve_kind kind;
    char id[48];
    long created;
    int include_usage;
    size_t pos;      /* the job's text read so far */
    int first, ended;
    char *out;       /* SSE bytes not yet handed to MHD */
    size_t out_len, out_off;
} stream;

static int stream_push(stream *st, const char *prefix, char *json_malloced, const char *suffix) {
    if (json_malloced == NULL && prefix == NULL) return -1;
    const char *j = json_malloced ? json_malloced : "";
    size_t n = strlen(prefix) + strlen(j) + strlen(suffix);
    char *grown = realloc(st->out, st->out_len + n + 1);
    if (grown == NULL) {
        free(json_malloced);
        return -1;
    }
    st->out = grown;
    st->out_len += (size_t)sprintf(st->out + st->out_len, "%s%s%s", prefix, j, suffix);
    free(json_malloced);
    return 0;
}

#define KEEPALIVE_S 5.0

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->out_off == st->out_len) {
        st->out_len = st->out_off = 0;
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        char text[4096];
        serve_job_state js;
        size_t n = serve_job_read(st->job, &st->pos, text, sizeof text, KEEPALIVE_S, &js);
        if (js.error) { /* an error mid-stream: an error event, then the end */
            serve_error e;
            serve_error_set(&e, 500, "server_error", NULL, NULL, "%s", js.error_message);
            stream_push(st, "data: ", serve_error_json(&e), "\n\n");
            stream_push(st, "data: [DONE]", NULL, "\n\n");
            st->ended = 1;
            continue;
        }
        if (n == 0 && !js.done) { /* silence: a comment keeps the connection and shows a gone client */
            stream_push(st, ": keep-alive", NULL, "\n\n");
            continue;
        }
        if (n > 0 || st->first) {
            if (stream_push(st, "data: ", chunk_sse(st->sv, st->kind, st->id, st->created, text, n, st->first, NULL),
                            "\n\n"))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            st->first = 0;
        }
        if (js.done) {
            if (stream_push(st, "data: ",
                            chunk_sse(st->sv, st->kind, st->id, st->created, "", 0, 0,
                                      js.finish_reason ? js.finish_reason : "stop"),
                            "\n\n"))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            if (st->include_usage) {
                json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", st->id, "object",
                                      st->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                      (json_int_t)st->created, "model", st->sv->model_id, "choices", "usage",
                                      usage_json(&js));
                stream_push(st, "data: ", u ? json_dumps(u, JSON_COMPACT) : NULL, "\n\n");
                json_decref(u);
            }
            stream_push(st, "data: [DONE]", NULL, "\n\n");
            st->ended = 1;
        }
    }
    size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the client left): let go of the job (cancelled if running). */
static void stream_free(void *cls) {
    stream *st = cls;
    serve_job_release(st->job);
    free(st->out);
    free(st);
}

/* ---- completions -------------------------------------------------------------------------- */

#define GONE_CHECK_S 0.5 /* a whole answer's wait looks at its connection this often */

/* 1 when the client has closed its connection (or it failed): a whole answer is then not
 * waited for. Data waiting to be read (a pipelined request) is not a close. */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL) return 0;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static enum MHD_Result completion(server *sv, struct MHD_Connection *c, serve_kind kind, const conn *cn) {
    serve_params p;
    serve_error e;
    if (cn->too_big) {
        serve_error_set(&e, 413, "invalid_request_error", NULL, NULL, "the request body is over %zu bytes",
                        SERVE_MAX_BODY);
        return reply_error(c, &e);
    }
    if (serve_parse_request(kind, cn->body ? cn->body : "", cn->len, &p, &e) != 0) return reply_error(c, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    pthread_mutex_lock(&sv->tok_mu);
    int bad = kind == SERVE_CHAT ? chat_prompt_tokens(sv->s, "serve", sv->family, p.msgs, p.n_msgs, &ids, &n)
                                 : session_tokenize(sv->s, p.prompt, strlen(p.prompt), 1, &ids, &n);
    pthread_mutex_unlock(&sv->tok_mu);
    if (bad) {
        serve_params_free(&p);
        free(ids);
        return error_now(c, 400, "invalid_request_error", NULL, "the text cannot be tokenized");
    }
    serve_job *job = NULL;
    if (serve_job_create(sv->eng, &p, ids, (int)n, &job, &e) != 0 || serve_engine_submit(sv->eng, job, &e) != 0) {
        serve_job_release(job);
        serve_params_free(&p);
        return reply_error(c, &e);
    }
    const long created = (long)time(NULL);
    const int streaming = p.stream, include_usage = p.include_usage;
    serve_params_free(&p);
    if (streaming) {
        stream *st = calloc(1, sizeof *st);
        if (st == NULL) {
            serve_job_release(job);
            return error_now(c, 500, "server_error", NULL, "out of memory");
        }
        *st = (stream){.sv = sv, .job = job, .kind = kind, .created = created, .include_usage = include_usage,
                       .first = 1};
        snprintf(st->id, sizeof st->id, "%s%s", kind == SERVE_CHAT ? "chat" : "", serve_job_id(job));
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
        if (r == NULL) {
            stream_free(st);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    /* whole answer: wait for the end, or until the client has gone (its sequence cancelled) */
    char *text = NULL;
    size_t len = 0, pos = 0;
    serve_job_state js;
    for (;;) {
        char buf[4096];
        size_t got = serve_job_read(job, &pos, buf, sizeof buf, GONE_CHECK_S, &js);
        if (!js.done && !js.error && client_gone(c)) {
            serve_job_release(job);
            free(text);
            return MHD_NO; /* nobody to answer: libmicrohttpd closes the connection */
        }
        char *grown = realloc(text, len + got + 1);
        if (grown == NULL) break;
        text = grown;
        memcpy(text + len, buf, got);
        len += got;
        text[len] = '\0';
        if (js.done || js.error) break;
    }
    char id[48];
    snprintf(id, sizeof id, "%s%s", kind == SERVE_CHAT ? "chat" : "", serve_job_id(job));
    serve_job_release(job);
    if (text == NULL || js.error) {
        free(text);
        return error_now(c, 500, "server_error", NULL, js.error ? js.error_message : "out of memory");
    }
    /* the text must be valid UTF-8 for JSON: a model can emit stray bytes */
    size_t clean_len;
    char *clean = serve_utf8_clean(text, len, &clean_len);
    free(text);
    json_t *o = clean ? answer_json(sv, kind, id, created, clean, &js) : NULL;
    free(clean);
    return reply_json(c, 200, o);
}

/* ---- other endpoints -------------------------------------------------------------------------- */

static enum MHD_Result models(server *sv, struct MHD_Connection *c) {
    return reply_json(c, 200,
                      json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", sv->model_id, "object",
                                "model", "created", (json_int_t)time(NULL), "owned_by", "turboquant"));
}

static enum MHD_Result metrics(server *sv, struct MHD_Connection *c) {
    serve_metrics m;
    serve_engine_metrics(sv->eng, &m);
    char *b = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&b, &n);
    if (f == NULL) return error_now(c, 500, "server_error", NULL, "out of memory");
#define G(name, help, type, fmt, v) fprintf(f, "# HELP " name " " help "\n# TYPE " name " " type "\n" name " " fmt "\n", v)
    G("tq_sequences_active", "Sequences running (prefilling or decoding).", "gauge", "%d", m.active);
    G("tq_sequences_prefilling", "Sequences whose prompt is still being run.", "gauge", "%d", m.prefilling);
    G("tq_sequences_queued", "Requests waiting for admission.", "gauge", "%d", m.queued);
    G("tq_sequences_active_max", "The most sequences running at once since start.", "gauge", "%d", m.max_active);
    G("tq_kv_bytes_reserved", "KV bytes the running sequences may reach (admission's count).", "gauge", "%zu",
      m.kv_reserved_bytes);
    G("tq_kv_budget_bytes", "The --kv-budget (0: none).", "gauge", "%zu", m.kv_budget_bytes);
    G("tq_kv_bytes_in_use", "KV bytes the running sequences hold now (the library's count).", "gauge", "%zu",
      m.kv_data_bytes);
    G("tq_kv_f16_bytes_equivalent", "What fp16 K/V of the same tokens would take.", "gauge", "%zu", m.kv_f16_bytes);
    G("tq_requests_total", "Requests admitted to the queue.", "counter", "%llu", m.requests);
    G("tq_prompt_tokens_total", "Prompt tokens run.", "counter", "%llu", m.prompt_tokens);
    G("tq_generated_tokens_total", "Tokens generated.", "counter", "%llu", m.generated_tokens);
    G("tq_engine_steps_total", "Batched forward steps.", "counter", "%llu", m.steps);
    G("tq_prompt_tokens_per_second", "Prompt tokens per second, last seconds.", "gauge", "%.2f", m.prompt_tok_s);
    G("tq_generated_tokens_per_second", "Generated tokens per second, last seconds.", "gauge", "%.2f", m.gen_tok_s);
    fprintf(f, "# HELP tq_time_to_first_token_seconds Time from a request's arrival to its first token.\n"
               "# TYPE tq_time_to_first_token_seconds summary\n"
               "tq_time_to_first_token_seconds_sum %.6f\ntq_time_to_first_token_seconds_count %.0f\n",
            m.ttft_sum, m.ttft_count);
    G("tq_time_to_first_token_last_seconds", "The last request's time to first token.", "gauge", "%.6f", m.ttft_last);
    G("tq_prefix_cache_entries", "Prompts kept for reuse.", "gauge", "%d", m.prefix_entries);
    G("tq_prefix_cache_bytes", "Their raw K/V bytes.", "gauge", "%zu", m.prefix_bytes);
    G("tq_prefix_cache_hits_total", "Requests that started from a kept prompt.", "counter", "%llu", m.prefix_hits);
    G("tq_prefix_reused_tokens_total", "Prompt tokens taken from kept prompts instead of run.", "counter", "%llu",
      m.prefix_reused_tokens);
    G("tq_cache_dir_entries", "Kept prompts of this model in --cache-dir.", "gauge", "%d", m.disk_entries);
    G("tq_cache_dir_bytes", "Their file bytes.", "gauge", "%llu", m.disk_bytes);
    G("tq_cache_dir_saves_total", "Kept prompts written to --cache-dir.", "counter", "%llu", m.disk_saves);
    G("tq_cache_dir_loads_total", "Kept prompts restored from --cache-dir.", "counter", "%llu", m.disk_loads);
    G("tq_cache_dir_failures_total", "Saves or loads that did not happen (see the log).", "counter", "%llu",
      m.disk_failures);
#undef G
    fclose(f);
    return reply(c, 200, "text/plain; version=0.0.4", b);
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static int authorized(const server *sv, struct MHD_Connection *c) {
    if (sv->api_key == NULL) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h == NULL || strncmp(h, "Bearer ", 7) != 0) return 0;
    const char *k = h + 7;
    size_t a = strlen(k), b = strlen(sv->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)(i < a ? k[i] : 0) ^ (unsigned char)sv->api_key[i];
    return diff == 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    conn *cn = *con_cls;
    if (cn == NULL) {
        cn = calloc(1, sizeof *cn);
        if (cn == NULL) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!cn->too_big && cn->len + *upload_size <= SERVE_MAX_BODY) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = cn->cap ? cn->cap : 4096;
                while (cap < cn->len + *upload_size + 1) cap *= 2;
                char *b = realloc(cn->body, cap);
                if (b == NULL) return MHD_NO;
                cn->body = b;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
        } else {
            cn->too_big = 1; /* the rest is read and dropped; 413 at the end */
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0) {
        if (!get) return error_now(c, 405, "invalid_request_error", NULL, "use GET /health");
        return reply(c, atomic_load(&sv->draining) ? 503 : 200, "application/json",
                     strdup(atomic_load(&sv->draining) ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}"));
    }
    const int is_cmpl = strcmp(url, "/v1/completions") == 0, is_chat = strcmp(url, "/v1/chat/completions") == 0;
    const int is_models = strcmp(url, "/v1/models") == 0, is_metrics = strcmp(url, "/metrics") == 0;
    if (!is_cmpl && !is_chat && !is_models && !is_metrics) {
        char msg[160];
        snprintf(msg, sizeof msg, "no endpoint %.100s", url);
        return error_now(c, 404, "invalid_request_error", "not_found", msg);
    }
    if (!authorized(sv, c))
        return error_now(c, 401, "invalid_request_error", "invalid_api_key",
                         "a valid API key is required: Authorization: Bearer KEY");
    if ((is_models || is_metrics) && !get) return error_now(c, 405, "invalid_request_error", NULL, "use GET");
    if ((is_cmpl || is_chat) && !post) return error_now(c, 405, "invalid_request_error", NULL, "use POST");
    if (is_models) return models(sv, c);
    if (is_metrics) return metrics(sv, c);
    /* counted before the check: shutdown waits for every request that got past it */
    cn->counted = 1;
    atomic_fetch_add(&sv->in_flight, 1);
    if (atomic_load(&sv->draining))
        return error_now(c, 503, "server_error", "shutting_down", "the server is shutting down");
    return completion(sv, c, is_chat ? SERVE_CHAT : SERVE_COMPLETION, cn);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    server *sv = cls;
    conn *cn = *con_cls;
    if (cn == NULL) return;
    if (cn->counted) atomic_fetch_sub(&sv->in_flight, 1);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- the command ----------------------------------------------------------------------------- */

/* How many sequences of n_ctx positions (prompts of half of it) the budget admits with the
 * server's scheme and with f16: steady bytes each, one prompt's raw-prefill excess once. */
static void print_admission(serve_engine *eng, const session_scheme *def, size_t budget, int n_ctx) {
    session_scheme f16;
    char why[128];
    if (session_scheme_parse("f16", &f16, why, sizeof why) != 0) return;
    size_t a, ap, b, bp;
    serve_engine_need_bytes(eng, def, n_ctx / 2, n_ctx, &a, &ap);
    serve_engine_need_bytes(eng, &f16, n_ctx / 2, n_ctx, &b, &bp);
    if (a == 0 || b == 0) return;
    if (budget == 0) {
        fprintf(stderr, "tq serve: no --kv-budget: a sequence of %d tokens reaches %.1f MB with %s, %.1f MB with f16\n",
                n_ctx, a / 1e6, def->name, b / 1e6);
        return;
    }
    const size_t ax = ap > a ? ap - a : 0, bx = bp > b ? bp - b : 0;
    if (def->is_f16) {
        fprintf(stderr, "tq serve: budget %.0f MB: %zu sequence(s) of %d tokens with f16 (%.2f MB each)\n",
                budget / 1e6, budget > bx ? (budget - bx) / b : 0, n_ctx, b / 1e6);
        return;
    }
    fprintf(stderr,
            "tq serve: budget %.0f MB: %zu sequence(s) of %d tokens with %s, %zu with f16 (%.2f / %.2f MB each; "
            "a %d-token prompt's raw prefill holds %.2f MB more while it runs)\n",
            budget / 1e6, budget > ax ? (budget - ax) / a : 0, n_ctx, def->name, budget > bx ? (budget - bx) / b : 0,
            a / 1e6, b / 1e6, n_ctx / 2, ax / 1e6);
    fprintf(stderr, "tq serve: requests are admitted by their own prompt + max_tokens: shorter ones fit more\n");
}

int cmd_serve(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "serve", 4096, SESSION_KV_ONE);
    const char *host = "127.0.0.1", *api_key = NULL, *template_name = NULL, *cache_dir = NULL;
    long port = 8080, parallel = 4, budget_mb = 0, max_conn = 64, timeout_s = 60, chunk = 64, prefix_mb = 64;
    long cache_dir_mb = 4096;
    const tool_opt opts[] = {
        {OPT_STRING("--host", "ADDR", &host, "IPv4 address to listen on (default 127.0.0.1)")},
        {OPT_INT("--port", "N", &port, 0, 65535, "TCP port (default 8080; 0: any free port)")},
        {OPT_INT("--parallel", "N", &parallel, 1, 256, "sequences running at once (default 4)")},
        {OPT_INT("--kv-budget", "MB", &budget_mb, 0, 1L << 30,
                 "admit requests while their KV cache fits MB megabytes (default 0: no limit)")},
        {OPT_STRING("--api-key", "KEY", &api_key, "require Authorization: Bearer KEY")},
        {OPT_INT("--max-connections", "N", &max_conn, 1, 100000, "open connections at most (default 64)")},
        {OPT_INT("--timeout", "S", &timeout_s, 1, 86400, "close a connection idle S seconds (default 60)")},
        {OPT_INT("--prefill-chunk", "N", &chunk, 4, 4096, "prompt tokens per engine step (default 64)")},
        {OPT_INT("--prefix-cache", "MB", &prefix_mb, 0, 1L << 30,
                 "keep prompts (raw K/V) for reuse by later prompts that start alike (default 64; 0: off)")},
        {OPT_STRING("--cache-dir", "DIR", &cache_dir,
                    "kept prompts leaving memory are saved in DIR and reused from there, also after a restart")},
        {OPT_INT("--cache-dir-size", "MB", &cache_dir_mb, 1, 1L << 30,
                 "the files of this model in --cache-dir, at most (default 4096; oldest use removed first)")},
        {OPT_STRING("--chat-template", "NAME", &template_name, "chat template family (default: the model's)")},
    };
    const tool_cmd cmd = {
        .name = "serve",
        .synopsis = "usage: tq serve [-m MODEL] [--kv SCHEME] [--host ADDR] [--port N] [--parallel N]\n"
                    "                [--kv-budget MB] [--api-key KEY] [-c CTX] [-t THREADS] ...\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
        .epilogue = "\nOpenAI-compatible: POST /v1/completions, /v1/chat/completions; GET /v1/models, /health,\n"
                    "/metrics. Per-request \"kv\" picks a KV scheme. See doc/serve.md.\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if (template_name && chat_template_by_name(template_name) == CHAT_UNKNOWN) {
        fprintf(stderr, "tq serve: unknown --chat-template '%s'; one of: %s\n", template_name, chat_template_list());
        return TQ_EXIT_USAGE;
    }
    if (cache_dir != NULL && prefix_mb == 0) {
        fprintf(stderr, "tq serve: --cache-dir needs the prefix cache (--prefix-cache MB > 0): prompts reach the "
                        "folder from it\n");
        return TQ_EXIT_USAGE;
    }
    struct in_addr addr4;
    if (inet_pton(AF_INET, host, &addr4) != 1) {
        fprintf(stderr, "tq serve: --host '%s' is not an IPv4 address\n", host);
        return TQ_EXIT_USAGE;
    }
    if ((rc = session_opts_finish(&o)) != 0) return rc;
    if (o.schemes[0].is_auto) {
        fprintf(stderr, "tq serve: --kv %s: auto:B needs a calibration; tq serve takes fixed schemes\n",
                o.schemes[0].name);
        return TQ_EXIT_USAGE;
    }
    /* every thread started from here on inherits the blocked signals; main waits for them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    session s;
    if ((rc = session_open(&s, &o)) != 0) return rc;
    server sv = {.s = &s, .api_key = api_key};
    const char *slash = strrchr(o.model_path ? o.model_path : "", '/');
    sv.model_id = o.model_path ? (slash ? slash + 1 : o.model_path) : session_model_names();
    if (o.model_path == NULL) {
        static char def_name[64];
        snprintf(def_name, sizeof def_name, "%s", session_model_names());
        char *comma = strchr(def_name, ',');
        if (comma) *comma = '\0';
        sv.model_id = def_name;
    }
    pthread_mutex_init(&sv.tok_mu, NULL);
    if (chat_prompt_family(&s, "serve", template_name, &sv.family) != 0) {
        session_close(&s);
        return 1;
    }
    const serve_engine_opts eo = {(int)parallel,           (size_t)budget_mb * 1000000u,
                                  (int)chunk,              s.n_ctx,
                                  (size_t)prefix_mb * 1000000u, cache_dir,
                                  (unsigned long long)cache_dir_mb * 1000000ull};
    char err[256];
    sv.eng = serve_engine_start(&s, &o.schemes[0], &eo, err, sizeof err);
    if (sv.eng == NULL) {
        fprintf(stderr, "tq serve: %s\n", err);
        session_close(&s);
        return 1;
    }
    print_admission(sv.eng, &o.schemes[0], eo.kv_budget, s.n_ctx);

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr = addr4;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, handler, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, completed, &sv, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "tq serve: cannot listen on %s:%ld (in use, or not allowed)\n", host, port);
        serve_engine_stop(sv.eng);
        session_close(&s);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "tq serve: %s with %s, %d threads, context %d, %ld sequences at once; listening on http://%s:%u\n",
            sv.model_id, o.schemes[0].name, s.n_threads, s.n_ctx, parallel, host,
            info ? (unsigned)info->port : (unsigned)port);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "tq serve: %s: finishing the requests in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&sv.draining, 1);
    serve_engine_drain(sv.eng);
    /* new requests get 503 meanwhile; the ones in flight finish (60 s at most) */
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 6000 && atomic_load(&sv.in_flight) > 0; i++) nanosleep(&tick, NULL);
    MHD_quiesce_daemon(d);
    MHD_stop_daemon(d);
    serve_engine_stop(sv.eng);
    pthread_mutex_destroy(&sv.tok_mu);
    session_close(&s);
    fprintf(stderr, "tq serve: stopped\n");
    return 0;
}

/* tq serve's request parsing and error bodies (serve_api.h), on jansson. */
#include "serve_api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_error_set(serve_error *e, int status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *serve_error_json(const serve_error *e) {
    size_t n; /* a message may quote the client's bytes, or cut a character: made valid UTF-8 */
    char *msg = serve_utf8_clean(e->message, strlen(e->message), &n);
    if (msg == NULL) return NULL;
    json_t *o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code[0] ? json_string(e->code) : json_null());
    free(msg);
    if (o == NULL) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

void serve_params_free(serve_params *p) {
    if (p == NULL) return;
    free(p->prompt);
    for (size_t i = 0; i < p->n_msgs; i++) {
        free((char *)p->msgs[i].role);
        free((char *)p->msgs[i].content);
    }
    free(p->msgs);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

#define BAD(param, ...) serve_error_set(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* A number field (integer or real) into *v within [lo, hi]; absent or null keeps *v. */
static int get_real(json_t *o, const char *key, double lo, double hi, double *v, serve_error *err) {
    json_t *x = json_object_get(o, key);
    if (x == NULL || json_is_null(x)) return 0;
    if (!json_is_number(x)) return BAD(key, "'%s' must be a number", key);
    double d = json_number_value(x);
    if (!isfinite(d) || d < lo || d > hi) return BAD(key, "'%s' must be between %g and %g", key, lo, hi);
    *v = d;
    return 0;
}

/* An integer field within [lo, hi]; absent or null keeps *v. */
static int get_int(json_t *o, const char *key, long lo, long hi, long *v, serve_error *err) {
    json_t *x = json_object_get(o, key);
    if (x == NULL || json_is_null(x)) return 0;
    if (!json_is_integer(x)) return BAD(key, "'%s' must be an integer", key);
    json_int_t i = json_integer_value(x);
    if (i < lo || i > hi) return BAD(key, "'%s' must be between %ld and %ld", key, lo, hi);
    *v = (long)i;
    return 0;
}

static int get_bool(json_t *o, const char *key, int *v, serve_error *err) {
    json_t *x = json_object_get(o, key);
    if (x == NULL || json_is_null(x)) return 0;
    if (!json_is_boolean(x)) return BAD(key, "'%s' must be true or false", key);
    *v = json_is_true(x);
    return 0;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts joined. */
static char *content_text(json_t *c, serve_error *err) {
    if (json_is_string(c)) {
        if (strlen(json_string_value(c)) != json_string_length(c)) {
            BAD("messages", "a message's content holds a NUL character");
            return NULL;
        }
        return strdup(json_string_value(c));
    }
    if (!json_is_array(c)) {
        BAD("messages", "a message's 'content' must be a string or an array of text parts");
        return NULL;
    }
    size_t total = 1, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text)) {
            BAD("messages", "content part %zu: only {\"type\": \"text\", \"text\": ...} parts are supported", i);
            return NULL;
        }
        if (strlen(json_string_value(text)) != json_string_length(text)) {
            BAD("messages", "a message's content holds a NUL character");
            return NULL;
        }
        total += json_string_length(text);
    }
    char *s = malloc(total), *p = s;
    if (s == NULL) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *p = '\0';
    return s;
}

static int parse_messages(json_t *root, serve_params *p, serve_error *err) {
    json_t *ms = json_object_get(root, "messages");
    if (ms == NULL) return BAD("messages", "'messages' is required");
    if (!json_is_array(ms) || json_array_size(ms) == 0) return BAD("messages", "'messages' must be a non-empty array");
    if (json_array_size(ms) > SERVE_MAX_MESSAGES)
        return BAD("messages", "at most %d messages", SERVE_MAX_MESSAGES);
    p->msgs = calloc(json_array_size(ms), sizeof *p->msgs);
    if (p->msgs == NULL) return serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        if (!json_is_object(m)) return BAD("messages", "message %zu must be an object", i);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) return BAD("messages", "message %zu: 'role' must be a string", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "developer") == 0) r = "system"; /* OpenAI's newer name for system */
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)
            return BAD("messages", "message %zu: role '%.40s' is not system, developer, user or assistant", i, r);
        if (content == NULL || json_is_null(content))
            return BAD("messages", "message %zu: 'content' is required", i);
        char *text = content_text(content, err);
        if (text == NULL) return -1;
        p->msgs[p->n_msgs].role = strdup(r);
        p->msgs[p->n_msgs].content = text;
        p->n_msgs++;
        if (p->msgs[p->n_msgs - 1].role == NULL)
            return serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_prompt(json_t *root, serve_params *p, serve_error *err) {
    json_t *pr = json_object_get(root, "prompt");
    if (pr == NULL || json_is_null(pr)) return BAD("prompt", "'prompt' is required");
    if (json_is_array(pr) && json_array_size(pr) == 1 && json_is_string(json_array_get(pr, 0)))
        pr = json_array_get(pr, 0); /* one prompt in a list: the same */
    if (!json_is_string(pr)) return BAD("prompt", "'prompt' must be a string (one prompt per request)");
    if (strlen(json_string_value(pr)) != json_string_length(pr)) return BAD("prompt", "the prompt holds a NUL character");
    p->prompt = strdup(json_string_value(pr));
    if (p->prompt == NULL) return serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

static int parse_stop(json_t *root, serve_params *p, serve_error *err) {
    json_t *st = json_object_get(root, "stop");
    if (st == NULL || json_is_null(st)) return 0;
    json_t *one[1] = {st};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(st)) {
        n = json_array_size(st);
        if (n > SERVE_MAX_STOP) return BAD("stop", "at most %d stop sequences", SERVE_MAX_STOP);
        items = NULL;
    } else if (!json_is_string(st)) {
        return BAD("stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(st, i);
        if (!json_is_string(s)) return BAD("stop", "'stop' must be a string or an array of strings");
        size_t len = json_string_length(s);
        if (len == 0 || len > SERVE_MAX_STOP_LEN)
            return BAD("stop", "a stop sequence must have 1 to %d bytes", SERVE_MAX_STOP_LEN);
        if (memchr(json_string_value(s), '\0', len) != NULL) return BAD("stop", "a stop sequence holds a NUL");
        p->stop[p->n_stop] = strdup(json_string_value(s));
        if (p->stop[p->n_stop] == NULL) return serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        p->n_stop++;
    }
    return 0;
}

static int parse_fields(json_t *root, serve_kind kind, serve_params *p, serve_error *err) {
    if (!json_is_object(root)) return BAD(NULL, "the request body must be a JSON object");
    if (kind == SERVE_CHAT ? parse_messages(root, p, err) : parse_prompt(root, p, err)) return -1;
    json_t *model = json_object_get(root, "model");
    if (model != NULL && !json_is_null(model) && !json_is_string(model)) return BAD("model", "'model' must be a string");
    long mt = -1;
    if (get_int(root, "max_tokens", 1, 1L << 24, &mt, err)) return -1;
    if (kind == SERVE_CHAT && get_int(root, "max_completion_tokens", 1, 1L << 24, &mt, err)) return -1;
    p->max_tokens = mt;
    p->temperature = 1.0;
    p->top_p = 1.0;
    if (get_real(root, "temperature", 0.0, 2.0, &p->temperature, err)) return -1;
    if (get_real(root, "top_p", 0.0, 1.0, &p->top_p, err)) return -1;
    if (p->top_p <= 0.0) return BAD("top_p", "'top_p' must be above 0");
    if (get_int(root, "top_k", 0, 1L << 30, &p->top_k, err)) return -1;
    json_t *seed = json_object_get(root, "seed");
    if (seed != NULL && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return BAD("seed", "'seed' must be an integer");
        p->seed = (uint64_t)json_integer_value(seed);
        p->has_seed = 1;
    }
    long n = 1;
    if (get_int(root, "n", 1, 1L << 20, &n, err)) return -1;
    if (n != 1) return BAD("n", "only n = 1 is supported");
    if (get_bool(root, "stream", &p->stream, err)) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so != NULL && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &p->include_usage, err)) return -1;
    }
    int lp = 0;
    json_t *lpv = json_object_get(root, "logprobs");
    if (json_is_integer(lpv)) lp = json_integer_value(lpv) > 0;
    else if (get_bool(root, "logprobs", &lp, err)) return -1;
    if (lp) return BAD("logprobs", "logprobs are not supported");
    if (parse_stop(root, p, err)) return -1;
    json_t *kv = json_object_get(root, "kv");
    if (kv != NULL && !json_is_null(kv)) {
        if (!json_is_string(kv) || json_string_length(kv) == 0 || json_string_length(kv) >= sizeof p->kv)
            return BAD("kv", "'kv' must be a KV scheme name such as \"turbo3\" or \"f16\"");
        snprintf(p->kv, sizeof p->kv, "%s", json_string_value(kv));
    }
    return 0;
}

int serve_parse_request(serve_kind kind, const char *body, size_t len, serve_params *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    if (len > SERVE_MAX_BODY)
        return serve_error_set(err, 413, "invalid_request_error", NULL, NULL, "the request body is over %zu bytes",
                               SERVE_MAX_BODY);
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) return BAD(NULL, "malformed JSON at line %d, column %d: %.200s", je.line, je.column, je.text);
    int rc = parse_fields(root, kind, out, err);
    json_decref(root);
    if (rc != 0) {
        serve_params_free(out);
        out->kind = kind;
    }
    return rc;
}

char *serve_utf8_clean(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(3 * n + 1), *w = o; /* each bad byte becomes 3 (U+FFFD) */
    if (o == NULL) return NULL;
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t k = 0;
        unsigned c = p[0];
        unsigned cp = 0;
        if (c < 0x80) k = 1, cp = c;
        else if ((c & 0xE0) == 0xC0) k = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) k = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) k = 4, cp = c & 0x07;
        int ok = k > 0 && (size_t)(end - p) >= k;
        for (size_t i = 1; ok && i < k; i++) {
            if ((p[i] & 0xC0) != 0x80) ok = 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        /* no overlong forms, surrogates or values past U+10FFFF, no NUL */
        if (ok && ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF || cp == 0))
            ok = 0;
        if (ok) {
            memcpy(w, p, k);
            w += k;
            p += k;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            p++;
        }
    }
    *w = '\0';
    *out_n = (size_t)(w - o);
    return o;
}

/*
 * libFuzzer target for tq serve's request parsing (tools/serve_api.c, doc/serve.md): the bytes
 * an HTTP client sends as the body of /v1/completions or /v1/chat/completions.
 *
 * The first input byte picks the endpoint (odd: chat); the rest, copied into an exact-size heap
 * buffer (ASan reports any read past it), is parsed. Invariants:
 *   - parsing the same body twice gives the same result (no hidden state);
 *   - on failure the status is 400, 413 or 500, the message is NUL-terminated, and the error
 *     body (serve_error_json) is a JSON object jansson parses back, whose error.message is
 *     the message made valid UTF-8 (serve_utf8_clean);
 *   - on success every field is in its documented range: a prompt (completions) or 1 to
 *     SERVE_MAX_MESSAGES messages whose roles are system/user/assistant (chat); temperature in
 *     [0, 2], top_p in (0, 1], top_k >= 0, max_tokens -1 or >= 1, at most SERVE_MAX_STOP stop
 *     sequences of 1 to SERVE_MAX_STOP_LEN bytes, kv shorter than its buffer;
 *   - serve_utf8_clean of the body is valid UTF-8 (jansson takes it as a string) and never
 *     longer than three times the input.
 * Any violation aborts, which libFuzzer reports as a crash with the input saved.
 *
 * The parser is compiled into this target from its source (it lives with the tq tools, not in
 * the library scripts/fuzz.sh archives); seeds in fuzz/corpus/serve_request/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/serve_api.c"

#define REQUIRE(c)          \
    do {                    \
        if (!(c)) abort();  \
    } while (0)

static void check_ok(const serve_params *p, serve_kind kind) {
    REQUIRE(p->kind == kind);
    if (kind == SERVE_COMPLETION) {
        REQUIRE(p->prompt != NULL && p->msgs == NULL);
    } else {
        REQUIRE(p->prompt == NULL && p->n_msgs >= 1 && p->n_msgs <= SERVE_MAX_MESSAGES);
        for (size_t i = 0; i < p->n_msgs; i++) {
            const char *r = p->msgs[i].role;
            REQUIRE(strcmp(r, "system") == 0 || strcmp(r, "user") == 0 || strcmp(r, "assistant") == 0);
            REQUIRE(p->msgs[i].content != NULL);
        }
    }
    REQUIRE(p->temperature >= 0.0 && p->temperature <= 2.0);
    REQUIRE(p->top_p > 0.0 && p->top_p <= 1.0);
    REQUIRE(p->top_k >= 0);
    REQUIRE(p->max_tokens == -1 || p->max_tokens >= 1);
    REQUIRE(p->n_stop >= 0 && p->n_stop <= SERVE_MAX_STOP);
    for (int i = 0; i < p->n_stop; i++) REQUIRE(strlen(p->stop[i]) >= 1 && strlen(p->stop[i]) <= SERVE_MAX_STOP_LEN);
    REQUIRE(memchr(p->kv, '\0', sizeof p->kv) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const serve_kind kind = data[0] & 1 ? SERVE_CHAT : SERVE_COMPLETION;
    const size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    if (body == NULL) return 0;
    memcpy(body, data + 1, n);

    serve_params a, b;
    serve_error ea, eb;
    int ra = serve_parse_request(kind, body, n, &a, &ea);
    int rb = serve_parse_request(kind, body, n, &b, &eb);
    REQUIRE(ra == rb);
    if (ra == 0) {
        check_ok(&a, kind);
        REQUIRE(a.n_msgs == b.n_msgs && a.max_tokens == b.max_tokens && a.n_stop == b.n_stop);
    } else {
        REQUIRE(ea.status == 400 || ea.status == 413 || ea.status == 500);
        REQUIRE(ea.status == eb.status && strcmp(ea.message, eb.message) == 0);
        REQUIRE(memchr(ea.message, '\0', sizeof ea.message) != NULL);
        char *js = serve_error_json(&ea);
        REQUIRE(js != NULL);
        json_t *o = json_loads(js, 0, NULL);
        REQUIRE(o != NULL);
        size_t mn;
        char *msg = serve_utf8_clean(ea.message, strlen(ea.message), &mn);
        json_t *m = json_object_get(json_object_get(o, "error"), "message");
        REQUIRE(msg != NULL && json_is_string(m) && strcmp(json_string_value(m), msg) == 0);
        free(msg);
        json_decref(o);
        free(js);
    }
    serve_params_free(&a);
    serve_params_free(&b);

    size_t cn = 0;
    char *clean = serve_utf8_clean(body, n, &cn);
    if (clean != NULL) {
        REQUIRE(cn <= 3 * n && strlen(clean) == cn);
        json_t *s = json_stringn(clean, cn);
        REQUIRE(s != NULL);
        json_decref(s);
        free(clean);
    }
    free(body);
    return 0;
}

/* tq serve's OpenAI-compatible request bodies and error bodies (doc/serve.md): parsing and
 * checking a /v1/completions or /v1/chat/completions JSON body into serve_params, and the
 * OpenAI-style error object. Pure: no I/O, no model, no globals (fuzz/fuzz_serve_request.c
 * runs it on arbitrary bytes). JSON by jansson. */
#ifndef TQ_TOOLS_SERVE_API_H
#define TQ_TOOLS_SERVE_API_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"

#define SERVE_MAX_BODY ((size_t)1 << 20) /* larger bodies: 413 */
#define SERVE_MAX_STOP 4                 /* as OpenAI */
#define SERVE_MAX_STOP_LEN 256           /* bytes per stop string */
#define SERVE_MAX_MESSAGES 1024

typedef enum serve_kind { SERVE_COMPLETION = 0, SERVE_CHAT = 1 } serve_kind;

/* A checked request. Strings are malloc'd (serve_params_free). */
typedef struct serve_params {
    serve_kind kind;
    char *prompt;          /* completion: the prompt text */
    chat_msg *msgs;        /* chat: the messages (role one of system/user/assistant; content) */
    size_t n_msgs;
    long max_tokens;       /* -1: not given (completions: 16; chat: up to the context) */
    double temperature;    /* [0, 2], default 1 (OpenAI's); 0: greedy */
    double top_p;          /* (0, 1], default 1 */
    long top_k;            /* extension: >= 0, default 0 (all) */
    uint64_t seed;
    int has_seed;          /* 0: the server picks a seed */
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    int stream;
    int include_usage;     /* stream_options.include_usage */
    char kv[96];           /* extension: the request's KV scheme; "" = the server's */
} serve_params;

/* An error answer: HTTP status, OpenAI's error type, the offending parameter ("" for none),
 * a code ("" for none) and the message. */
typedef struct serve_error {
    int status;
    const char *type;
    char param[48];
    char code[48];
    char message[320];
} serve_error;

/* Parses body[0, len) as a request of kind; 0 with *out filled, or -1 with *err filled (4xx)
 * and *out empty. Unknown fields are ignored, as OpenAI's own server does for fields it does
 * not know of a newer client; known fields of a wrong type or range are refused. */
int serve_parse_request(serve_kind kind, const char *body, size_t len, serve_params *out, serve_error *err);
void serve_params_free(serve_params *p); /* a zeroed struct is fine */

/* Fills *e (message printf-style) and returns -1. */
int serve_error_set(serve_error *e, int status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error's JSON body {"error":{"message","type","param","code"}}: malloc'd, NULL when out
 * of memory. */
char *serve_error_json(const serve_error *e);

/* s[0, n) as valid UTF-8 for JSON: each byte that does not start a well-formed character (and
 * NUL) becomes U+FFFD. malloc'd, NUL-terminated, *out_n its length; NULL when out of memory. */
char *serve_utf8_clean(const char *s, size_t n, size_t *out_n);

#endif

/* The FILE.turns half of a chat session: see chat_session.h. */
#include "chat_session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "regular_file.h"

#define TURNS_MAGIC "tq-chat-turns 1\n"

char *chat_session_turns_path(const char *path) {
    size_t n = strlen(path);
    char *p = malloc(n + 7);
    if (p) snprintf(p, n + 7, "%s.turns", path);
    return p;
}

static const char *const roles[] = {"system", "user", "assistant"};

int chat_session_write_turns(const char *path, const chat_msg *msgs, size_t n, char *why, size_t why_cap) {
    size_t total = strlen(TURNS_MAGIC);
    for (size_t i = 0; i < n; i++) total += strlen(msgs[i].role) + 24 + strlen(msgs[i].content) + 1;
    char *buf = malloc(total + 1);
    if (buf == NULL) {
        snprintf(why, why_cap, "out of memory");
        return 1;
    }
    size_t at = (size_t)snprintf(buf, total + 1, "%s", TURNS_MAGIC);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(msgs[i].content);
        at += (size_t)snprintf(buf + at, total + 1 - at, "%s %zu\n", msgs[i].role, len);
        memcpy(buf + at, msgs[i].content, len);
        at += len;
        buf[at++] = '\n';
    }
    const char *what = NULL;
    int err = regular_file_write_atomic(path, buf, at, NULL, 0, &what);
    free(buf);
    if (err != 0) {
        snprintf(why, why_cap, "%s: %s", what, strerror(err));
        return 1;
    }
    return 0;
}

/* Reads the whole regular file at path into *buf (NUL-terminated). 0, 1 (absent) or -1. */
static int slurp(const char *path, char **buf, size_t *size, char *why, size_t why_cap) {
    const char *reason = NULL;
    int fd = regular_file_open(path, &reason);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        snprintf(why, why_cap, "cannot open: %s", reason);
        return -1;
    }
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        snprintf(why, why_cap, "cannot open: %s", strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    int rc = 0;
    while (b != NULL) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= CHAT_TURNS_MAX_BYTES) {
            snprintf(why, why_cap, "larger than %zu bytes", CHAT_TURNS_MAX_BYTES);
            rc = -1;
            break;
        }
        cap *= 2;
        char *g = realloc(b, cap + 1);
        if (g == NULL) free(b);
        b = g;
    }
    if (b == NULL) {
        snprintf(why, why_cap, "out of memory");
        rc = -1;
    } else if (rc == 0 && ferror(f)) {
        snprintf(why, why_cap, "read error");
        rc = -1;
    }
    fclose(f);
    if (rc != 0) {
        free(b);
        return rc;
    }
    b[n] = 0;
    *buf = b;
    *size = n;
    return 0;
}

int chat_session_read_turns(const char *path, chat_turn_fn fn, void *ctx, char *why, size_t why_cap) {
    char *buf = NULL;
    size_t size = 0;
    int rc = slurp(path, &buf, &size, why, why_cap);
    if (rc != 0) return rc;
    const size_t ml = strlen(TURNS_MAGIC);
    size_t at = ml, k = 0;
    if (size < ml || memcmp(buf, TURNS_MAGIC, ml) != 0) {
        snprintf(why, why_cap, "not a tq chat turns file");
        rc = -1;
    }
    while (rc == 0 && at < size) {
        k++;
        const char *nl = memchr(buf + at, '\n', size - at);
        const char *sp = nl ? memchr(buf + at, ' ', (size_t)(nl - (buf + at))) : NULL;
        const char *role = NULL;
        for (size_t r = 0; sp && r < sizeof roles / sizeof roles[0]; r++)
            if ((size_t)(sp - (buf + at)) == strlen(roles[r]) && !memcmp(buf + at, roles[r], strlen(roles[r])))
                role = roles[r];
        size_t len = 0;
        const char *d = sp ? sp + 1 : NULL;
        int digits = 0;
        while (d && d < nl && *d >= '0' && *d <= '9' && digits < 12) len = len * 10 + (size_t)(*d++ - '0'), digits++;
        if (role == NULL || digits == 0 || d != nl) {
            snprintf(why, why_cap, "message %zu: bad header line", k);
            rc = -1;
            break;
        }
        at = (size_t)(nl - buf) + 1;
        if (len > size - at || size - at - len < 1 || buf[at + len] != '\n') {
            snprintf(why, why_cap, "message %zu: truncated", k);
            rc = -1;
            break;
        }
        buf[at + len] = 0; /* the content's terminator, in place of its '\n' */
        if (memchr(buf + at, 0, len) != NULL) {
            snprintf(why, why_cap, "message %zu: a NUL byte in the text", k);
            rc = -1;
            break;
        }
        if (fn(ctx, role, buf + at, len) != 0) {
            snprintf(why, why_cap, "out of memory");
            rc = -1;
            break;
        }
        at += len + 1;
    }
    free(buf);
    return rc;
}

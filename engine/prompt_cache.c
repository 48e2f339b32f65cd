/* Prompt caches on disk: the format (doc/prompt-cache.md), the model fingerprint, loading into
 * a context with every check, and the atomic save. See prompt_cache.h. */
#include "prompt_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "regular_file.h"

static const uint8_t magic[8] = {'T', 'Q', 'P', 'C', 'A', 'C', 'H', 'E'};
#define HDR PROMPT_CACHE_HEADER_BYTES
#define FLAG_LOGITS 1u
#define SCHEME_MAX 255u
#define SAMPLE 4096u /* bytes of each tensor sample in the fingerprint */

const char *prompt_cache_status_name(int s) {
    static const char *const names[] = {"ok",        "bad argument",  "absent",        "i/o error",
                                        "not a prompt cache", "unknown version", "truncated", "corrupt",
                                        "another model", "another scheme", "too long for the context",
                                        "cannot be saved", "out of memory"};
    return s >= 0 && s < (int)(sizeof names / sizeof *names) ? names[s] : "unknown status";
}

static prompt_cache_status say(char *why, size_t cap, prompt_cache_status st, const char *fmt, ...) {
    if (why != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- little-endian fields ---------------------------------------------------------------- */

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* ---- XXH64 (Yann Collet's reference algorithm) -------------------------------------------- */

#define X1 11400714785074694791ull
#define X2 14029467366897019727ull
#define X3 1609587929392839161ull
#define X4 9650029242287828579ull
#define X5 2870177450012600261ull

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * X2, 31) * X1; }
static uint64_t xmerge(uint64_t h, uint64_t v) { return (h ^ xround(0, v)) * X1 + X4; }

uint64_t prompt_cache_xxh64(const void *data, size_t n, uint64_t seed) {
    const uint8_t *p = data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = seed + X1 + X2, v2 = seed + X2, v3 = seed, v4 = seed - X1;
        for (; end - p >= 32; p += 32) {
            v1 = xround(v1, get64(p));
            v2 = xround(v2, get64(p + 8));
            v3 = xround(v3, get64(p + 16));
            v4 = xround(v4, get64(p + 24));
        }
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = xmerge(xmerge(xmerge(xmerge(h, v1), v2), v3), v4);
    } else {
        h = seed + X5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) h = rotl(h ^ xround(0, get64(p)), 27) * X1 + X4;
    if (end - p >= 4) {
        h = rotl(h ^ (uint64_t)get32(p) * X1, 23) * X2 + X3;
        p += 4;
    }
    for (; p < end; p++) h = rotl(h ^ (uint64_t)*p * X5, 11) * X1;
    h ^= h >> 33;
    h *= X2;
    h ^= h >> 29;
    h *= X3;
    return h ^ (h >> 32);
}

/* ---- the fingerprint ----------------------------------------------------------------------- */

void prompt_cache_fingerprint_of(const model *m, prompt_cache_fingerprint *fp) {
    memset(fp, 0, sizeof *fp);
    const gguf_file *f = model_file(m);
    if (f == NULL) return;
    const uint8_t *base = gguf_file_bytes(f);
    fp->file_size = gguf_file_size(f);
    fp->data_offset = gguf_data_offset(f);
    fp->n_tensors = (uint64_t)gguf_n_tensors(f);
    fp->meta_hash = prompt_cache_xxh64(base, (size_t)fp->data_offset, 0);
    /* Every tensor's first, middle and last SAMPLE bytes (all of a small one): a re-quantized
     * or fine-tuned file differs there even when its metadata does not. */
    uint64_t h = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *d = t->data;
        size_t n = (size_t)t->n_bytes;
        uint64_t s[4] = {h, 0, 0, 0};
        if (n <= 3 * SAMPLE) {
            s[1] = prompt_cache_xxh64(d, n, (uint64_t)i);
        } else {
            s[1] = prompt_cache_xxh64(d, SAMPLE, (uint64_t)i);
            s[2] = prompt_cache_xxh64(d + (n / 2 - SAMPLE / 2), SAMPLE, (uint64_t)i);
            s[3] = prompt_cache_xxh64(d + (n - SAMPLE), SAMPLE, (uint64_t)i);
        }
        uint8_t b[32];
        for (int k = 0; k < 4; k++) put64(b + 8 * k, s[k]);
        h = prompt_cache_xxh64(b, sizeof b, 0);
    }
    fp->data_hash = h;
}

/* ---- the format --------------------------------------------------------------------------- */

/* Bytes before the checksum, for a header's fields. */
static uint64_t front_bytes(uint64_t scheme_len, uint64_t n_tokens, uint64_t n_vocab, int logits) {
    return HDR + scheme_len + 4 * n_tokens + (logits ? 4 * n_vocab : 0);
}

prompt_cache_status prompt_cache_check_header(const void *head, size_t head_bytes, uint64_t file_size, char *why,
                                              size_t why_cap) {
    const uint8_t *h = head;
    if (head_bytes < sizeof magic || memcmp(h, magic, sizeof magic) != 0)
        return say(why, why_cap, PCACHE_ERR_NOT_CACHE, "not a prompt cache file");
    if (head_bytes < HDR)
        return say(why, why_cap, PCACHE_ERR_TRUNCATED, "truncated: %zu bytes, less than the %d-byte header",
                   head_bytes, HDR);
    uint32_t version = get32(h + 8);
    if (version != PROMPT_CACHE_VERSION)
        return say(why, why_cap, PCACHE_ERR_VERSION, "prompt cache version %u; this build reads version %d", version,
                   PROMPT_CACHE_VERSION);
    uint32_t n_tokens = get32(h + 56), n_vocab = get32(h + 60), flags = get32(h + 64), slen = get32(h + 68);
    uint64_t image = get64(h + 72);
    if (get32(h + 12) != HDR || (flags & ~FLAG_LOGITS) || get64(h + 80) || get64(h + 88) || slen < 1 ||
        slen > SCHEME_MAX || n_tokens < 1 || n_tokens > PROMPT_CACHE_MAX_TOKENS || n_vocab < 1 ||
        n_vocab > PROMPT_CACHE_MAX_VOCAB || image < 64 || image > ((uint64_t)1 << 48))
        return say(why, why_cap, PCACHE_ERR_CORRUPT, "corrupt header");
    uint64_t want = front_bytes(slen, n_tokens, n_vocab, (int)(flags & FLAG_LOGITS)) + 8 + image;
    if (file_size < want)
        return say(why, why_cap, PCACHE_ERR_TRUNCATED, "truncated: %llu of %llu bytes", (unsigned long long)file_size,
                   (unsigned long long)want);
    if (file_size > want)
        return say(why, why_cap, PCACHE_ERR_CORRUPT, "corrupt: %llu bytes after the end",
                   (unsigned long long)(file_size - want));
    return PCACHE_OK;
}

/* The fields, scheme text and tokens of a checked header's front (header, scheme, tokens,
 * logits) and its checksum, which follow in h; v->image is left to the caller. */
static prompt_cache_status parse_front(const uint8_t *h, prompt_cache_view *v, char *why, size_t why_cap) {
    const int logits = (int)(get32(h + 64) & FLAG_LOGITS);
    v->n_tokens = get32(h + 56);
    v->n_vocab = get32(h + 60);
    v->scheme_len = get32(h + 68);
    v->image_bytes = (size_t)get64(h + 72);
    const size_t front = (size_t)front_bytes(v->scheme_len, v->n_tokens, v->n_vocab, logits);
    if (prompt_cache_xxh64(h, front, 0) != get64(h + front))
        return say(why, why_cap, PCACHE_ERR_CORRUPT, "corrupt: header checksum");
    v->fp.file_size = get64(h + 16);
    v->fp.data_offset = get64(h + 24);
    v->fp.n_tensors = get64(h + 32);
    v->fp.meta_hash = get64(h + 40);
    v->fp.data_hash = get64(h + 48);
    v->scheme = (const char *)h + HDR;
    v->tokens = h + HDR + v->scheme_len;
    v->logits = logits ? v->tokens + 4 * v->n_tokens : NULL;
    for (size_t i = 0; i < v->scheme_len; i++)
        if (v->scheme[i] < 0x20 || v->scheme[i] > 0x7E) return say(why, why_cap, PCACHE_ERR_CORRUPT, "corrupt: scheme text");
    for (size_t i = 0; i < v->n_tokens; i++) {
        uint32_t t = get32(v->tokens + 4 * i);
        if (t >= v->n_vocab)
            return say(why, why_cap, PCACHE_ERR_CORRUPT, "corrupt: token %u at %zu outside the vocabulary", t, i);
    }
    return PCACHE_OK;
}

prompt_cache_status prompt_cache_parse(const void *data, size_t size, prompt_cache_view *v, char *why,
                                       size_t why_cap) {
    memset(v, 0, sizeof *v);
    if (data == NULL) return say(why, why_cap, PCACHE_ERR_ARG, "no data");
    prompt_cache_status st = prompt_cache_check_header(data, size, size, why, why_cap);
    if (st == PCACHE_OK) st = parse_front(data, v, why, why_cap);
    if (st == PCACHE_OK) v->image = (const uint8_t *)data + (size - v->image_bytes);
    return st;
}

void prompt_cache_entry_free(prompt_cache_entry *e) {
    if (e == NULL) return;
    free(e->tokens);
    memset(e, 0, sizeof *e);
}

void prompt_cache_tokens_free(prompt_cache_tokens *t) {
    if (t == NULL) return;
    free(t->tokens);
    free(t->logits);
    memset(t, 0, sizeof *t);
}

/* ---- load ----------------------------------------------------------------------------------- */

/* Reads n bytes at offset off; 0 on a short read or an error. */
static int read_at(int fd, void *buf, size_t n, off_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 1;
}

/* Opens path and checks its header (read into head): *fd open on PCACHE_OK (the caller
 * closes it), closed otherwise; *file_size the file's bytes. */
static prompt_cache_status open_checked(const char *path, int *fd, uint8_t head[HDR], uint64_t *file_size, char *why,
                                        size_t cap) {
    const char *reason = NULL;
    *fd = regular_file_open(path, &reason);
    if (*fd < 0)
        return errno == ENOENT ? say(why, cap, PCACHE_ERR_ABSENT, "no such file")
                               : say(why, cap, PCACHE_ERR_IO, "cannot open: %s", reason ? reason : "?");
    struct stat sb;
    prompt_cache_status st = PCACHE_OK;
    size_t got = 0;
    if (fstat(*fd, &sb) != 0 || sb.st_size < 0) st = say(why, cap, PCACHE_ERR_IO, "cannot stat: %s", strerror(errno));
    if (st == PCACHE_OK) {
        got = (uint64_t)sb.st_size < HDR ? (size_t)sb.st_size : HDR;
        if (!read_at(*fd, head, got, 0)) st = say(why, cap, PCACHE_ERR_IO, "cannot read: %s", strerror(errno));
    }
    if (st == PCACHE_OK) st = prompt_cache_check_header(head, got, (uint64_t)sb.st_size, why, cap);
    if (st == PCACHE_OK && (uint64_t)sb.st_size > SIZE_MAX) st = say(why, cap, PCACHE_ERR_NOMEM, "too large");
    if (st != PCACHE_OK) {
        close(*fd);
        *fd = -1;
    }
    *file_size = (uint64_t)sb.st_size;
    return st;
}

/* The whole file at path, checked up to prompt_cache_parse; *buf the caller's to free. */
static prompt_cache_status read_file(const char *path, uint8_t **buf, size_t *size, char *why, size_t cap) {
    int fd;
    uint8_t head[HDR];
    uint64_t file_size = 0;
    prompt_cache_status st = open_checked(path, &fd, head, &file_size, why, cap);
    if (st != PCACHE_OK) return st;
    *size = (size_t)file_size; /* what the header's fields give: checked */
    *buf = malloc(*size);
    if (*buf == NULL) st = say(why, cap, PCACHE_ERR_NOMEM, "out of memory (%zu bytes)", *size);
    else if (!read_at(fd, *buf, *size, 0))
        st = say(why, cap, PCACHE_ERR_TRUNCATED, "truncated while reading");
    close(fd);
    return st;
}

/* OTHER_MODEL unless v was made with the model of fingerprint fp and vocabulary n_vocab. */
static prompt_cache_status same_model(const prompt_cache_view *v, const prompt_cache_fingerprint *fp, size_t n_vocab,
                                      char *why, size_t cap) {
    if (memcmp(fp, &v->fp, sizeof *fp) == 0 && v->n_vocab == n_vocab) return PCACHE_OK;
    if (fp->file_size != v->fp.file_size)
        return say(why, cap, PCACHE_ERR_OTHER_MODEL, "made with another model file (%llu bytes, this one %llu)",
                   (unsigned long long)v->fp.file_size, (unsigned long long)fp->file_size);
    return say(why, cap, PCACHE_ERR_OTHER_MODEL, "made with another model file (same size, other %s)",
               fp->meta_hash != v->fp.meta_hash ? "metadata" : "weights");
}

prompt_cache_status prompt_cache_peek(const char *path, const prompt_cache_fingerprint *fp, size_t n_vocab,
                                      prompt_cache_entry *out, char *why, size_t why_cap) {
    if (out != NULL) memset(out, 0, sizeof *out);
    if (path == NULL || fp == NULL || out == NULL) return say(why, why_cap, PCACHE_ERR_ARG, "bad argument");
    int fd;
    uint8_t head[HDR], *front = NULL;
    uint64_t file_size = 0;
    prompt_cache_status st = open_checked(path, &fd, head, &file_size, why, why_cap);
    if (st != PCACHE_OK) return st;
    prompt_cache_view v;
    memset(&v, 0, sizeof v);
    /* the header is checked: the front's size is bounded by the file's */
    const size_t n = (size_t)front_bytes(get32(head + 68), get32(head + 56), get32(head + 60),
                                         (int)(get32(head + 64) & FLAG_LOGITS)) + 8;
    front = malloc(n);
    if (front == NULL) st = say(why, why_cap, PCACHE_ERR_NOMEM, "out of memory");
    else if (!read_at(fd, front, n, 0)) st = say(why, why_cap, PCACHE_ERR_TRUNCATED, "truncated while reading");
    close(fd);
    if (st == PCACHE_OK) st = parse_front(front, &v, why, why_cap);
    if (st == PCACHE_OK) st = same_model(&v, fp, n_vocab, why, why_cap);
    if (st == PCACHE_OK && (out->tokens = malloc(v.n_tokens * sizeof *out->tokens)) == NULL)
        st = say(why, why_cap, PCACHE_ERR_NOMEM, "out of memory");
    if (st == PCACHE_OK) {
        for (size_t i = 0; i < v.n_tokens; i++) out->tokens[i] = (int32_t)get32(v.tokens + 4 * i);
        out->n_tokens = v.n_tokens;
        memcpy(out->scheme, v.scheme, v.scheme_len);
        out->scheme[v.scheme_len] = '\0';
        out->file_bytes = file_size;
    }
    free(front);
    return st;
}

/* The canonical text of x's scheme into buf (256 bytes). */
static int scheme_text(const model_context *x, char *buf) {
    return tq_kv_scheme_format(context_get_params(x)->kv_scheme, buf, 256) == TQ_OK;
}

/* The fields (':'-separated, canonical order) where the canonical texts x and y differ, as
 * "k=3:v=3" into a and "k=f16:v=f16" into b (cap bytes each); the whole texts when their fields
 * do not line up. */
static void scheme_diff(const char *x, const char *y, char *a, char *b, size_t cap) {
    size_t na = 0, nb = 0;
    while (*x && *y) {
        size_t lx = strcspn(x, ":"), ly = strcspn(y, ":");
        if (lx != ly || memcmp(x, y, lx) != 0) {
            na += (size_t)snprintf(a + na, na < cap ? cap - na : 0, "%s%.*s", na ? ":" : "", (int)lx, x);
            nb += (size_t)snprintf(b + nb, nb < cap ? cap - nb : 0, "%s%.*s", nb ? ":" : "", (int)ly, y);
        }
        x += lx + (x[lx] == ':');
        y += ly + (y[ly] == ':');
        if (na >= cap || nb >= cap) break;
    }
    if (*x || *y || na == 0) {
        snprintf(a, cap, "%s", x);
        snprintf(b, cap, "%s", y);
    }
}

/* The view against x: model, scheme, length; then the image into x. */
static prompt_cache_status restore(const prompt_cache_view *v, model_context *x, char *why, size_t cap) {
    prompt_cache_fingerprint fp;
    prompt_cache_fingerprint_of(context_model(x), &fp);
    prompt_cache_status st = same_model(v, &fp, (size_t)context_config(x)->n_vocab, why, cap);
    if (st != PCACHE_OK) return st;
    char mine[256];
    if (!scheme_text(x, mine)) return say(why, cap, PCACHE_ERR_ARG, "the context's KV scheme has no text");
    if (strlen(mine) != v->scheme_len || memcmp(mine, v->scheme, v->scheme_len) != 0) {
        char theirs[256], a[256] = "", b[256] = "";
        snprintf(theirs, sizeof theirs, "%.*s", (int)v->scheme_len, v->scheme);
        scheme_diff(theirs, mine, a, b, sizeof a);
        return say(why, cap, PCACHE_ERR_OTHER_SCHEME, "made with another KV scheme (%s, this run %s)", a, b);
    }
    const int max_ctx = context_get_params(x)->max_ctx;
    if (v->n_tokens > (size_t)max_ctx)
        return say(why, cap, PCACHE_ERR_CONTEXT, "holds %zu tokens, more than the context of %d", v->n_tokens, max_ctx);
    model_status ms = context_kv_load_memory(x, v->image, v->image_bytes);
    if (ms != MODEL_OK) {
        st = ms == MODEL_ERR_NOMEM       ? PCACHE_ERR_NOMEM
             : ms == MODEL_ERR_KV_SCHEME ? PCACHE_ERR_OTHER_SCHEME
             : ms == MODEL_ERR_CONTEXT   ? PCACHE_ERR_CONTEXT
                                         : PCACHE_ERR_CORRUPT;
        return say(why, cap, st, "%s", context_last_error(x));
    }
    if ((size_t)context_seq_len(x) != v->n_tokens) {
        char keep[64];
        snprintf(keep, sizeof keep, "corrupt: the KV cache holds %d positions, not %zu", context_seq_len(x), v->n_tokens);
        context_truncate(x, 0);
        return say(why, cap, PCACHE_ERR_CORRUPT, "%s", keep);
    }
    return PCACHE_OK;
}

prompt_cache_status prompt_cache_load(const char *path, model_context *x, prompt_cache_tokens *out, char *why,
                                      size_t why_cap) {
    if (out != NULL) memset(out, 0, sizeof *out);
    if (path == NULL || x == NULL || out == NULL) return say(why, why_cap, PCACHE_ERR_ARG, "bad argument");
    uint8_t *buf = NULL;
    size_t size = 0;
    prompt_cache_view v;
    prompt_cache_status st = read_file(path, &buf, &size, why, why_cap);
    if (st == PCACHE_OK) st = prompt_cache_parse(buf, size, &v, why, why_cap);
    if (st == PCACHE_OK) {
        out->tokens = malloc(v.n_tokens * sizeof *out->tokens);
        out->logits = v.logits != NULL ? malloc(v.n_vocab * sizeof *out->logits) : NULL;
        if (out->tokens == NULL || (v.logits != NULL && out->logits == NULL))
            st = say(why, why_cap, PCACHE_ERR_NOMEM, "out of memory");
    }
    if (st == PCACHE_OK) st = restore(&v, x, why, why_cap);
    if (st == PCACHE_OK) {
        out->n_tokens = v.n_tokens;
        for (size_t i = 0; i < v.n_tokens; i++) out->tokens[i] = (int32_t)get32(v.tokens + 4 * i);
        for (size_t i = 0; v.logits != NULL && i < v.n_vocab; i++) {
            uint32_t b = get32(v.logits + 4 * i);
            memcpy(&out->logits[i], &b, 4);
        }
    } else {
        prompt_cache_tokens_free(out);
    }
    free(buf);
    return st;
}

/* ---- save ----------------------------------------------------------------------------------- */

/* front (front_n bytes, checksum included) then image, to a new temporary file renamed over path. */
static prompt_cache_status write_atomic(const char *path, const uint8_t *front, size_t front_n, const uint8_t *image,
                                        size_t image_n, char *why, size_t cap) {
    const char *what = NULL;
    int err = regular_file_write_atomic(path, front, front_n, image, image_n, &what);
    if (err == ENOMEM) return say(why, cap, PCACHE_ERR_NOMEM, "out of memory");
    if (err != 0) return say(why, cap, PCACHE_ERR_IO, "%s: %s", what, strerror(err));
    return PCACHE_OK;
}

prompt_cache_status prompt_cache_save(const char *path, const model_context *x, const int32_t *tokens,
                                      size_t n_tokens, const float *logits, char *why, size_t why_cap) {
    if (path == NULL || x == NULL || tokens == NULL || n_tokens < 1 || n_tokens > PROMPT_CACHE_MAX_TOKENS ||
        n_tokens != (size_t)context_seq_len(x))
        return say(why, why_cap, PCACHE_ERR_ARG, "bad argument (%zu tokens for a sequence of %d)", n_tokens,
                   context_seq_len(x));
    const size_t nv = (size_t)context_config(x)->n_vocab;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= nv)
            return say(why, why_cap, PCACHE_ERR_ARG, "token %d at %zu outside the vocabulary", tokens[i], i);
    const size_t image_n = context_kv_save_bound(x);
    if (image_n == 0)
        return say(why, why_cap, PCACHE_ERR_UNSAVABLE,
                   "cannot save: the sliding-window layers have recycled old positions (kv_keep_history)");
    char scheme[256];
    if (!scheme_text(x, scheme)) return say(why, why_cap, PCACHE_ERR_ARG, "the context's KV scheme has no text");
    const size_t slen = strlen(scheme);
    const size_t front_n = (size_t)front_bytes(slen, n_tokens, nv, logits != NULL);
    uint8_t *front = malloc(front_n + 8), *image = malloc(image_n);
    prompt_cache_status st = PCACHE_OK;
    if (front == NULL || image == NULL) st = say(why, why_cap, PCACHE_ERR_NOMEM, "out of memory");
    size_t written = 0;
    if (st == PCACHE_OK && context_kv_save_memory(x, image, image_n, &written) != MODEL_OK)
        st = say(why, why_cap, PCACHE_ERR_UNSAVABLE, "cannot save the KV cache");
    if (st == PCACHE_OK) {
        prompt_cache_fingerprint fp;
        prompt_cache_fingerprint_of(context_model(x), &fp);
        memset(front, 0, HDR);
        memcpy(front, magic, sizeof magic);
        put32(front + 8, PROMPT_CACHE_VERSION);
        put32(front + 12, HDR);
        put64(front + 16, fp.file_size);
        put64(front + 24, fp.data_offset);
        put64(front + 32, fp.n_tensors);
        put64(front + 40, fp.meta_hash);
        put64(front + 48, fp.data_hash);
        put32(front + 56, (uint32_t)n_tokens);
        put32(front + 60, (uint32_t)nv);
        put32(front + 64, logits != NULL ? FLAG_LOGITS : 0);
        put32(front + 68, (uint32_t)slen);
        put64(front + 72, written);
        memcpy(front + HDR, scheme, slen);
        uint8_t *p = front + HDR + slen;
        for (size_t i = 0; i < n_tokens; i++, p += 4) put32(p, (uint32_t)tokens[i]);
        for (size_t i = 0; logits != NULL && i < nv; i++, p += 4) {
            uint32_t b;
            memcpy(&b, &logits[i], 4);
            put32(p, b);
        }
        put64(p, prompt_cache_xxh64(front, front_n, 0));
        st = write_atomic(path, front, front_n + 8, image, written, why, why_cap);
    }
    free(front);
    free(image);
    return st;
}

/* Prompt caches on disk (doc/prompt-cache.md): a context's sequence saved with what it takes
 * to reuse it safely — a fingerprint of the model file, the KV scheme's canonical text, the
 * token ids of the sequence and, optionally, the logits of its last position — around the
 * library's cache file image (doc/cachefile.md). `tq generate --prompt-cache FILE` and
 * `tq chat --session FILE` use it.
 *
 * Loading never crashes and never restores something that does not belong: every reason not
 * to use a file is a status with a one-line message, and the context keeps its sequence. Saving
 * is atomic: a new temporary file in the same folder, fsync, rename, fsync of the folder. */
#ifndef TQ_ENGINE_PROMPT_CACHE_H
#define TQ_ENGINE_PROMPT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

#define PROMPT_CACHE_VERSION 1
#define PROMPT_CACHE_HEADER_BYTES 96
#define PROMPT_CACHE_MAX_TOKENS ((size_t)1 << 26) /* more than any context_length we load */
#define PROMPT_CACHE_MAX_VOCAB ((size_t)1 << 24)

/* Status codes, pinned: never renumber, only append. */
typedef enum prompt_cache_status {
    PCACHE_OK = 0,
    PCACHE_ERR_ARG = 1,          /* a NULL argument, tokens not the context's length */
    PCACHE_ERR_ABSENT = 2,       /* no file at the path */
    PCACHE_ERR_IO = 3,           /* cannot open, read or write (not a regular file included) */
    PCACHE_ERR_NOT_CACHE = 4,    /* no prompt cache magic */
    PCACHE_ERR_VERSION = 5,      /* a version this build does not read */
    PCACHE_ERR_TRUNCATED = 6,    /* shorter than its header says */
    PCACHE_ERR_CORRUPT = 7,      /* a checksum, a field or the cache image is wrong */
    PCACHE_ERR_OTHER_MODEL = 8,  /* made with another model file */
    PCACHE_ERR_OTHER_SCHEME = 9, /* made with another KV scheme (or per-layer scheme, window) */
    PCACHE_ERR_CONTEXT = 10,     /* holds more positions than the context's max_ctx */
    PCACHE_ERR_UNSAVABLE = 11,   /* the sequence cannot be saved (sliding-window layers recycled
                                    positions: context_params.kv_keep_history) */
    PCACHE_ERR_NOMEM = 12
} prompt_cache_status;

const char *prompt_cache_status_name(int status);

/* What identifies a model file, cheaply but soundly (doc/prompt-cache.md, "Fingerprint"). */
typedef struct prompt_cache_fingerprint {
    uint64_t file_size;   /* bytes of the GGUF file */
    uint64_t data_offset; /* where its tensor data starts */
    uint64_t n_tensors;
    uint64_t meta_hash;   /* XXH64 of bytes [0, data_offset): header, metadata, tensor infos */
    uint64_t data_hash;   /* XXH64 over 3 samples of 4 KiB of every tensor's data */
} prompt_cache_fingerprint;

/* The fingerprint of the file m was loaded from. */
void prompt_cache_fingerprint_of(const model *m, prompt_cache_fingerprint *fp);
/* XXH64 of n bytes (the reference algorithm, any alignment). */
uint64_t prompt_cache_xxh64(const void *data, size_t n, uint64_t seed);

/* A parsed file image, pointing into the caller's bytes. */
typedef struct prompt_cache_view {
    prompt_cache_fingerprint fp;
    const char *scheme;     /* scheme_len bytes, not NUL-terminated */
    size_t scheme_len;
    const uint8_t *tokens;  /* n_tokens little-endian int32 */
    size_t n_tokens;
    size_t n_vocab;         /* the model's vocabulary size when saved */
    const uint8_t *logits;  /* n_vocab little-endian f32, or NULL */
    const uint8_t *image;   /* the library's cache file image */
    size_t image_bytes;
} prompt_cache_view;

/* Checks the first PROMPT_CACHE_HEADER_BYTES of a file of file_size bytes: magic, version,
 * fields, and that the size is the one they give. Errors: NOT_CACHE, VERSION, CORRUPT,
 * TRUNCATED; why (why_cap bytes) says what. */
prompt_cache_status prompt_cache_check_header(const void *head, size_t head_bytes, uint64_t file_size, char *why,
                                              size_t why_cap);
/* Parses a whole image (header, scheme, tokens, logits, checksum; the cache image is the
 * library's to check). Errors: those of the header, CORRUPT (checksum, scheme text, a token
 * outside [0, n_vocab)). */
prompt_cache_status prompt_cache_parse(const void *data, size_t size, prompt_cache_view *v, char *why,
                                       size_t why_cap);

/* The tokens (and logits) of a restored sequence; free with prompt_cache_tokens_free. */
typedef struct prompt_cache_tokens {
    int32_t *tokens;
    size_t n_tokens;
    float *logits; /* the last position's logits (n_vocab), or NULL when the file has none */
} prompt_cache_tokens;
void prompt_cache_tokens_free(prompt_cache_tokens *t);

/* What a file holds, read without its cache image (prompt_cache_peek). */
typedef struct prompt_cache_entry {
    char scheme[256];   /* the KV scheme's canonical text (tq_kv_scheme_format) */
    int32_t *tokens;    /* n_tokens; free with prompt_cache_entry_free */
    size_t n_tokens;
    uint64_t file_bytes;
} prompt_cache_entry;
void prompt_cache_entry_free(prompt_cache_entry *e);

/* Reads the header, scheme and tokens of the file at path (not its cache image, which only a
 * load checks) and checks them: a prompt cache of this version, its front's checksum, made
 * with the model of fingerprint fp and vocabulary n_vocab (OTHER_MODEL otherwise). For
 * indexing a folder of caches (tq serve --cache-dir); a load still checks everything. */
prompt_cache_status prompt_cache_peek(const char *path, const prompt_cache_fingerprint *fp, size_t n_vocab,
                                      prompt_cache_entry *out, char *why, size_t why_cap);

/* Restores the sequence saved at path into x: the file must be a valid prompt cache of x's
 * model file (fingerprint), x's KV scheme (canonical text, then every layer's scheme and
 * window), and fit x's max_ctx. On PCACHE_OK x holds the saved sequence (as context_kv_load_memory)
 * and *out its tokens; otherwise x keeps its sequence, *out is empty, and why holds one line. */
prompt_cache_status prompt_cache_load(const char *path, model_context *x, prompt_cache_tokens *out, char *why,
                                      size_t why_cap);
/* Saves x's sequence, whose tokens are tokens[0, n_tokens) (n_tokens = context_seq_len(x)),
 * with logits (n_vocab floats of the last position, or NULL) to path atomically. Errors: ARG,
 * UNSAVABLE, IO (path untouched), NOMEM; why holds one line. */
prompt_cache_status prompt_cache_save(const char *path, const model_context *x, const int32_t *tokens,
                                      size_t n_tokens, const float *logits, char *why, size_t why_cap);

#endif

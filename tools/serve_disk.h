/* tq serve's prefix cache on disk (--cache-dir DIR, doc/serve.md "Persistence"): kept prompts
 * that leave memory (evicted, or when the server stops) are written to DIR as prompt cache
 * files (engine/prompt_cache.h), and a later request whose prompt starts with one's tokens
 * loads it instead of prefilling again — also after a restart. The folder is indexed when the
 * server starts (each file's scheme and tokens, not its cache image); only files of the loaded
 * model are used, and nothing in DIR is ever deleted but the files this index holds, oldest use
 * first, when they pass max_bytes.
 *
 * File names are the XXH64 of the scheme's canonical text and the token ids, as 16 hex digits
 * plus ".tqpc": never from request text, so no name can leave DIR. Used by the engine thread
 * only (no lock); counters for /metrics in serve_disk_stats. */
#ifndef TQ_TOOLS_SERVE_DISK_H
#define TQ_TOOLS_SERVE_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

typedef struct serve_disk serve_disk;

typedef struct serve_disk_stats {
    int entries;                 /* files indexed */
    unsigned long long bytes;    /* their size */
    unsigned long long saves;    /* files written */
    unsigned long long loads;    /* files restored into a sequence */
    unsigned long long failures; /* saves or loads that did not happen (logged) */
} serve_disk_stats;

/* Opens dir (created when absent; its parent must exist) and indexes the prompt caches of m in
 * it, telling stderr what it found and which files it does not use (and why). NULL with a
 * message in err when dir cannot be a cache folder. */
serve_disk *serve_disk_open(const char *dir, unsigned long long max_bytes, const model *m, char *err, size_t err_cap);
void serve_disk_close(serve_disk *d);

/* Entry i (0 <= i < serve_disk_count): its scheme's canonical text and tokens. */
int serve_disk_count(const serve_disk *d);
const char *serve_disk_scheme(const serve_disk *d, int i);
const int32_t *serve_disk_tokens(const serve_disk *d, int i, int *n);

/* Writes x's sequence (tokens[0, n), n = context_seq_len(x)) of scheme (canonical text) unless
 * the folder has it, then removes the least recently used files while the index is over
 * max_bytes. 0 when the file is there; -1 when it could not be written (logged, counted). */
int serve_disk_save(serve_disk *d, const model_context *x, const int32_t *tokens, int n, const char *scheme);

/* Restores entry i into x (fresh, of the entry's scheme, max_ctx at least its length): 0, or
 * -1 when the file no longer fits (logged, counted, and dropped from the index). */
int serve_disk_load(serve_disk *d, int i, model_context *x);

void serve_disk_stats_get(const serve_disk *d, serve_disk_stats *s);

#endif

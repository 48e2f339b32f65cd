/* tq serve's prefix cache on disk: the folder's index, saves and loads. See serve_disk.h. */
#include "serve_disk.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prompt_cache.h"

#define NAME_LEN 21 /* 16 hex digits + ".tqpc" */
#define MAX_ENTRIES 65536

typedef struct entry {
    uint64_t hash;
    prompt_cache_entry pc; /* scheme text, tokens, file bytes */
    unsigned long long used;
} entry;

struct serve_disk {
    char *dir;
    unsigned long long max_bytes;
    const model *m;
    prompt_cache_fingerprint fp;
    size_t n_vocab;
    entry *e;
    int n, cap;
    unsigned long long clock;
    serve_disk_stats st;
};

/* The name of a sequence: XXH64 of the scheme text (with its NUL) then the tokens' bytes. */
static uint64_t name_hash(const char *scheme, const int32_t *tokens, size_t n) {
    uint64_t h = prompt_cache_xxh64(scheme, strlen(scheme) + 1, 0x7470636163686521ULL /* "tpcache!" */);
    return prompt_cache_xxh64(tokens, n * sizeof *tokens, h);
}

static void path_of(const serve_disk *d, uint64_t hash, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%016llx.tqpc", d->dir, (unsigned long long)hash);
}

/* A name this folder's index would give a file: 16 lowercase hex digits and ".tqpc". */
static int our_name(const char *name, uint64_t *hash) {
    if (strlen(name) != NAME_LEN || strcmp(name + 16, ".tqpc") != 0) return 0;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        const char c = name[i];
        if (c >= '0' && c <= '9') h = h << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') h = h << 4 | (uint64_t)(c - 'a' + 10);
        else return 0;
    }
    *hash = h;
    return 1;
}

static void stats_update(serve_disk *d) {
    d->st.entries = d->n;
    d->st.bytes = 0;
    for (int i = 0; i < d->n; i++) d->st.bytes += d->e[i].pc.file_bytes;
}

static void drop(serve_disk *d, int i) {
    prompt_cache_entry_free(&d->e[i].pc);
    d->e[i] = d->e[--d->n];
    stats_update(d);
}

static int add(serve_disk *d, uint64_t hash, prompt_cache_entry *pc, unsigned long long used) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        entry *ne = realloc(d->e, (size_t)cap * sizeof *ne);
        if (ne == NULL) return -1;
        d->e = ne;
        d->cap = cap;
    }
    d->e[d->n].hash = hash;
    d->e[d->n].pc = *pc;
    d->e[d->n].used = used;
    d->n++;
    stats_update(d);
    return 0;
}

/* Removes the least recently used files while the index is over max_bytes, never keep. */
static void trim(serve_disk *d, int keep) {
    uint64_t keep_hash = keep >= 0 ? d->e[keep].hash : 0;
    while (d->st.bytes > d->max_bytes && d->n > (keep >= 0 ? 1 : 0)) {
        int lru = -1;
        for (int i = 0; i < d->n; i++)
            if ((keep < 0 || d->e[i].hash != keep_hash) && (lru < 0 || d->e[i].used < d->e[lru].used)) lru = i;
        char path[4096];
        path_of(d, d->e[lru].hash, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT)
            fprintf(stderr, "tq serve: cache-dir: cannot remove %s: %s\n", path, strerror(errno));
        drop(d, lru);
    }
}

typedef struct found {
    uint64_t hash;
    double mtime;
} found;

static int by_mtime(const void *a, const void *b) {
    const found *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

serve_disk *serve_disk_open(const char *dir, unsigned long long max_bytes, const model *m, char *err, size_t err_cap) {
    struct stat sb;
    if (dir == NULL || dir[0] == '\0' || strlen(dir) > 3000) {
        snprintf(err, err_cap, "--cache-dir: an empty or too long path");
        return NULL;
    }
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT || mkdir(dir, 0700) != 0 || stat(dir, &sb) != 0) {
            snprintf(err, err_cap, "--cache-dir %s: cannot create it: %s", dir, strerror(errno));
            return NULL;
        }
        fprintf(stderr, "tq serve: cache-dir: created %s\n", dir);
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, err_cap, "--cache-dir %s: not a directory", dir);
        return NULL;
    }
    if (access(dir, R_OK | W_OK | X_OK) != 0) {
        snprintf(err, err_cap, "--cache-dir %s: not readable and writable: %s", dir, strerror(errno));
        return NULL;
    }
    DIR *dp = opendir(dir);
    if (dp == NULL) {
        snprintf(err, err_cap, "--cache-dir %s: cannot list it: %s", dir, strerror(errno));
        return NULL;
    }
    serve_disk *d = calloc(1, sizeof *d);
    found *fs = NULL;
    int nf = 0, capf = 0, other = 0, bad = 0;
    if (d == NULL || (d->dir = strdup(dir)) == NULL) goto nomem;
    d->max_bytes = max_bytes;
    d->m = m;
    prompt_cache_fingerprint_of(m, &d->fp);
    d->n_vocab = (size_t)model_get_config(m)->n_vocab;
    /* the names first, oldest modification first: that order is the index's first LRU order */
    for (struct dirent *de; (de = readdir(dp)) != NULL;) {
        uint64_t h;
        if (!our_name(de->d_name, &h) || nf >= MAX_ENTRIES) continue;
        char path[4096];
        path_of(d, h, path, sizeof path);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (nf == capf) {
            capf = capf ? 2 * capf : 64;
            found *nfs = realloc(fs, (size_t)capf * sizeof *nfs);
            if (nfs == NULL) goto nomem;
            fs = nfs;
        }
        fs[nf].hash = h;
        fs[nf].mtime = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        nf++;
    }
    closedir(dp);
    dp = NULL;
    if (nf > 0) qsort(fs, (size_t)nf, sizeof *fs, by_mtime);
    for (int i = 0; i < nf; i++) {
        char path[4096], why[300];
        path_of(d, fs[i].hash, path, sizeof path);
        prompt_cache_entry pc;
        prompt_cache_status st = prompt_cache_peek(path, &d->fp, d->n_vocab, &pc, why, sizeof why);
        if (st == PCACHE_OK && name_hash(pc.scheme, pc.tokens, pc.n_tokens) != fs[i].hash) {
            st = PCACHE_ERR_CORRUPT;
            snprintf(why, sizeof why, "its name is not the hash of its contents");
        }
        if (st != PCACHE_OK) {
            /* left where it is: it may be another model's, or a person's */
            if (st == PCACHE_ERR_OTHER_MODEL) other++;
            else {
                bad++;
                fprintf(stderr, "tq serve: cache-dir: %s not used: %s\n", path, why);
            }
            prompt_cache_entry_free(&pc);
            continue;
        }
        if (add(d, fs[i].hash, &pc, ++d->clock) != 0) {
            prompt_cache_entry_free(&pc);
            goto nomem;
        }
    }
    free(fs);
    fs = NULL;
    fprintf(stderr, "tq serve: cache-dir %s: %d prompt(s) of this model (%.1f MB, at most %.0f MB kept)", dir, d->n,
            (double)d->st.bytes / 1e6, (double)max_bytes / 1e6);
    if (other) fprintf(stderr, "; %d of another model left alone", other);
    if (bad) fprintf(stderr, "; %d not readable as prompt caches", bad);
    fprintf(stderr, "\n");
    trim(d, -1);
    return d;
nomem:
    if (dp != NULL) closedir(dp);
    free(fs);
    serve_disk_close(d);
    snprintf(err, err_cap, "--cache-dir %s: out of memory", dir);
    return NULL;
}

void serve_disk_close(serve_disk *d) {
    if (d == NULL) return;
    for (int i = 0; i < d->n; i++) prompt_cache_entry_free(&d->e[i].pc);
    free(d->e);
    free(d->dir);
    free(d);
}

int serve_disk_count(const serve_disk *d) { return d == NULL ? 0 : d->n; }

const char *serve_disk_scheme(const serve_disk *d, int i) { return d->e[i].pc.scheme; }

const int32_t *serve_disk_tokens(const serve_disk *d, int i, int *n) {
    *n = (int)d->e[i].pc.n_tokens;
    return d->e[i].pc.tokens;
}

int serve_disk_save(serve_disk *d, const model_context *x, const int32_t *tokens, int n, const char *scheme) {
    if (n < 1 || strlen(scheme) >= sizeof d->e[0].pc.scheme) return -1;
    const uint64_t h = name_hash(scheme, tokens, (size_t)n);
    for (int i = 0; i < d->n; i++)
        if (d->e[i].hash == h && d->e[i].pc.n_tokens == (size_t)n &&
            memcmp(d->e[i].pc.tokens, tokens, (size_t)n * sizeof *tokens) == 0 && strcmp(d->e[i].pc.scheme, scheme) == 0) {
            d->e[i].used = ++d->clock;
            return 0;
        }
    char path[4096], why[300];
    path_of(d, h, path, sizeof path);
    prompt_cache_status st = prompt_cache_save(path, x, tokens, (size_t)n, NULL, why, sizeof why);
    struct stat sb;
    prompt_cache_entry pc;
    memset(&pc, 0, sizeof pc);
    if (st == PCACHE_OK && stat(path, &sb) != 0) st = PCACHE_ERR_IO, snprintf(why, sizeof why, "%s", strerror(errno));
    if (st == PCACHE_OK && (pc.tokens = malloc((size_t)n * sizeof *tokens)) == NULL)
        st = PCACHE_ERR_NOMEM, snprintf(why, sizeof why, "out of memory");
    if (st != PCACHE_OK) {
        d->st.failures++;
        fprintf(stderr, "tq serve: cache-dir: a prompt of %d tokens not saved: %s\n", n, why);
        return -1;
    }
    memcpy(pc.tokens, tokens, (size_t)n * sizeof *tokens);
    pc.n_tokens = (size_t)n;
    snprintf(pc.scheme, sizeof pc.scheme, "%s", scheme);
    pc.file_bytes = (unsigned long long)sb.st_size;
    for (int i = 0; i < d->n; i++) /* a file of the same name (a hash collision): replaced */
        if (d->e[i].hash == h) drop(d, i--);
    if (add(d, h, &pc, ++d->clock) != 0) {
        prompt_cache_entry_free(&pc);
        unlink(path);
        d->st.failures++;
        return -1;
    }
    d->st.saves++;
    trim(d, d->n - 1);
    return 0;
}

int serve_disk_load(serve_disk *d, int i, model_context *x) {
    char path[4096], why[300];
    path_of(d, d->e[i].hash, path, sizeof path);
    prompt_cache_tokens t;
    prompt_cache_status st = prompt_cache_load(path, x, &t, why, sizeof why);
    if (st == PCACHE_OK && (t.n_tokens != d->e[i].pc.n_tokens ||
                            memcmp(t.tokens, d->e[i].pc.tokens, t.n_tokens * sizeof *t.tokens) != 0)) {
        st = PCACHE_ERR_CORRUPT; /* changed since it was indexed */
        snprintf(why, sizeof why, "its tokens changed since the server indexed it");
    }
    prompt_cache_tokens_free(&t);
    if (st != PCACHE_OK) {
        d->st.failures++;
        fprintf(stderr, "tq serve: cache-dir: %s not used: %s\n", path, why);
        drop(d, i);
        return -1;
    }
    d->e[i].used = ++d->clock;
    d->st.loads++;
    return 0;
}

void serve_disk_stats_get(const serve_disk *d, serve_disk_stats *s) {
    if (d == NULL) memset(s, 0, sizeof *s);
    else *s = d->st;
}

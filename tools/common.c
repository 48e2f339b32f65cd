#include "common.h"

#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Strict numbers start with a digit (or '-' and a digit where negatives may be): strto*
 * would skip leading spaces and take a '+', and strtoull a '-' (wrapping " -1" to 2^64 − 1). */
static int starts_number(const char *s, int minus_ok) {
    if (minus_ok && *s == '-') s++;
    return *s >= '0' && *s <= '9';
}

int tool_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !starts_number(s, 1)) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int tool_parse_u64(const char *s, uint64_t *out) {
    if (!s || !starts_number(s, 0)) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return 0;
    *out = (uint64_t)v;
    return 1;
}

int tool_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !(starts_number(s, 1) || (s[0] == '.' && starts_number(s + 1, 0)) ||
                (s[0] == '-' && s[1] == '.' && starts_number(s + 2, 0))))
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int tool_parse_double_list(const char *s, double lo, double hi, double *out, int cap) {
    if (!s || !*s) return -1;
    int n = 0;
    const char *p = s;
    while (1) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char buf[64];
        if (len == 0 || len >= sizeof buf || n >= cap) return -1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (!tool_parse_double(buf, lo, hi, &out[n])) return -1;
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

double tool_phys_mem_bytes(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) return (double)pages * (double)page;
#endif
    return 0.0;
}

int tool_check_memory(const char *cmd, double bytes, const char *detail, const char *hint) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const char *env = getenv("TQ_MEM_LIMIT_GIB");
    double limit = tool_phys_mem_bytes();
    if (env && *env) {
        double g;
        if (!tool_parse_double(env, 0.001, 1e9, &g)) {
            fprintf(stderr, "tq %s: bad TQ_MEM_LIMIT_GIB '%s' (GiB, 0.001 to 1e9)\n", cmd, env);
            return -1;
        }
        limit = g * gib;
    }
    if (limit <= 0.0 || bytes <= limit) return 1;
    fprintf(stderr, "tq %s: this run needs about %.1f GiB (%s), more than the %.1f GiB %s; %s\n",
            cmd, bytes / gib, detail, limit / gib,
            env && *env ? "limit of TQ_MEM_LIMIT_GIB" : "of physical memory here", hint);
    return 0;
}

int tool_read_file(const char *cmd, const char *path, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const char *why;
    int fd = regular_file_open(path, &why);
    if (fd < 0) {
        fprintf(stderr, "tq %s: cannot open '%s': %s\n", cmd, path, why);
        return 1;
    }
    struct stat st;
    size_t cap = 1 << 16, n = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (unsigned long long)st.st_size < SIZE_MAX / 2)
        cap = (size_t)st.st_size + 1; /* the whole file and the NUL in one read, as a rule */
    char *buf = malloc(cap);
    const char *err = buf ? NULL : "out of memory";
    while (buf && !err) {
        if (n + 1 == cap) {
            char *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                err = "out of memory";
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            err = strerror(errno);
        } else if (r == 0) {
            break;
        } else {
            n += (size_t)r;
        }
    }
    close(fd);
    if (err) {
        fprintf(stderr, "tq %s: cannot read '%s': %s\n", cmd, path, err);
        free(buf);
        return 1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

double tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tool_rng_seed(tool_rng *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t rng_next(tool_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tool_rng_gauss(tool_rng *r) {
    for (;;) {
        double u = 2.0 * ((double)(rng_next(r) >> 11) * 0x1.0p-53) - 1.0;
        double v = 2.0 * ((double)(rng_next(r) >> 11) * 0x1.0p-53) - 1.0;
        double s = u * u + v * v;
        if (s > 0.0 && s < 1.0) return u * sqrt(-2.0 * log(s) / s);
    }
}

typedef struct thread_arg {
    void (*fn)(void *, int);
    void *ctx;
    int t;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    a->fn(a->ctx, a->t);
    return NULL;
}

int tool_run_threads(int n_threads, void (*fn)(void *ctx, int t), void *ctx) {
    if (n_threads <= 1) {
        fn(ctx, 0);
        return 1;
    }
    pthread_t th[256];
    thread_arg args[256];
    if (n_threads > 256) n_threads = 256;
    int started = 0;
    for (int t = 1; t < n_threads; t++) {
        args[t] = (thread_arg){fn, ctx, t};
        if (pthread_create(&th[t], NULL, thread_main, &args[t]) != 0) break;
        started = t;
    }
    fn(ctx, 0);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    /* Threads that could not start: run their share here. */
    for (int t = started + 1; t < n_threads; t++) fn(ctx, t);
    return 1;
}

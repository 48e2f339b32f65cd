#include "common.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int tool_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int tool_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return 0;
    *out = (uint64_t)v;
    return 1;
}

int tool_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return 0;
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

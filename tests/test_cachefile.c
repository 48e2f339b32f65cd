/*
 * Cache files (doc/cachefile.md): save → load restores the identical state (reads, attention
 * bit for bit, later appends, re-saved bytes) for several schemes, with a raw window and with
 * per-layer edges; the golden file pins the format; every truncation, every single-bit flip,
 * wrong magic, other versions, mismatched shapes, hostile counts and bad values are rejected
 * with their code; a crash mid-save leaves the previous file; unwritable paths give TQ_ERR_IO.
 * Issue 14: a save never opens, follows or removes what is at "<path>.tmp" (a symlink, a stale
 * file) and leaves no temp file after a success or a failure; loading a FIFO, a folder or a
 * device is TQ_ERR_IO without blocking; a file far larger than its header and scheme allow is
 * TQ_ERR_FORMAT before it is read (a terabyte sparse file, in a child process); loading a path
 * gives what loading its bytes gives; −0.0 in a plain format's bits field is TQ_ERR_FORMAT;
 * TQ_KV_CACHE_FILE_VERSION is the version the writer writes.
 *
 * Issue 15: the layer windows persist (version 4): save → load keeps them and the windowed
 * recycling goes on; tq_kv_cache_convert keeps them; _expect compares them.
 *
 * Issue 17: version 5 — the rotated formats q8_0r / q4_0r save and load (a version 4 file
 * with their format codes is TQ_ERR_FORMAT), and attention sinks: the scheme's sink count
 * (header offset 56) and each layer's sink store persist; save → load is bit-exact.
 *
 * Version 6: the header flag of trellis-coded indices (scheme option trellis=1); the golden
 * cache uses them, so the file pins the trellis encoder's bits too.
 *
 * Version 7: the header flags carry the config's key_rope_pairs (the key scale and split pool
 * each RoPE pair's statistics); the golden cache pairs its channels in halves.
 *
 * Version 8: a key split at the whole width 3 (half the channels at 4 bits, half at 2); the
 * golden cache's turbo layer is turbo3, so the file pins that split and its halfway norm
 * correction.
 *
 * Version 9: the config's key_rope_freqs (header flag bit 3, the angles at the end of the
 * scheme section): the key mean turns with RoPE; the golden cache gives its layers angles of
 * which some pairs turn and some do not.
 *
 * Version 10: the key mean's fast pairs (layer byte 20 and their list after the key
 * transform's state): pairs that turn too fast for a block-centred mean whose pre-RoPE mean
 * is subtracted at each key's own angle; the golden cache's turbo layer has some.
 *
 * Version 11: the two-state trellis tables (trellis=2, TQ_TRELLIS_TWO_STATE: at 3 and 4 bits a
 * value depends on the index and the previous index's top bit), header flag bit 4 with bit 0;
 * the golden cache uses them, so the file pins their encoder's bits.
 *
 * Version 12: predicted keys (key_mean 2, TQ_KV_KEY_MEAN_PREDICT: each key coded against ρ
 * times the one before it as decoded, doc/kvcache.md §7): layer scheme byte 4 may be 2, layer
 * byte 21 says ρ is fitted, and ρ per head follows the fast pairs; the golden cache's turbo
 * layer predicts (ρ 0.5 by the tests' hook: 20 random tokens fit none), so the file pins ρ
 * and the chained records.
 *
 * TQ_UPDATE_GOLDEN=1 rewrites tests/golden/cache_v12.bin (when the format version moves, or
 * what a cache computes from its tokens does); tests/golden/cache_v1.bin, cache_v2.bin,
 * cache_v3.bin, cache_v4.bin, cache_v5.bin, cache_v6.bin, cache_v7.bin, cache_v8.bin,
 * cache_v9.bin, cache_v10.bin and cache_v11.bin,
 * written by versions 1 (before the key scale), 2 (before the key split), 3 (before the layer
 * windows), 4 (before q8_0r / q4_0r and the sinks), 5 (before trellis codes), 6 (before the
 * RoPE pairs), 7 (before the whole-width key split), 8 (before the turning key mean), 9
 * (before the fast pairs), 10 (before the two-state trellis tables) and 11 (before predicted
 * keys), and
 * cache_v3_mean8.bin (before the key mean came from 512 tokens) must still load.
 */
#include <dirent.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv_predict.h"
#include "kvcache_internal.h"
#include "test_api.h"
#include "test_util.h"
#include "turboquant.h"

#define GOLDEN "tests/golden/cache_v12.bin"
#define GOLDEN_V11 "tests/golden/cache_v11.bin"
#define GOLDEN_V10 "tests/golden/cache_v10.bin"
#define GOLDEN_V9 "tests/golden/cache_v9.bin"
#define GOLDEN_V8 "tests/golden/cache_v8.bin"
#define GOLDEN_V7 "tests/golden/cache_v7.bin"
#define GOLDEN_V6 "tests/golden/cache_v6.bin"
#define GOLDEN_V5 "tests/golden/cache_v5.bin"
#define GOLDEN_V4 "tests/golden/cache_v4.bin"
#define GOLDEN_V3 "tests/golden/cache_v3.bin"
#define GOLDEN_V2 "tests/golden/cache_v2.bin"
#define GOLDEN_V1 "tests/golden/cache_v1.bin"
/* Version 3 as written before the key mean came from 512 tokens (its mean: the first 8). */
#define GOLDEN_V3_MEAN8 "tests/golden/cache_v3_mean8.bin"

/* Scratch paths under $TMPDIR (or /tmp), unique per process. */
static const char *scratch(const char *name) {
    static char buf[4][512];
    static int k;
    const char *dir = getenv("TMPDIR");
    char *b = buf[k++ & 3];
    snprintf(b, sizeof buf[0], "%s/tq_cachefile_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(),
             name);
    return b;
}

/* ---- File-system helpers for the save / load tests below ---------------------------------- */

/* A fresh private folder under $TMPDIR (or /tmp); the caller frees the name. */
static char *scratch_dir(const char *name) {
    const char *dir = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/tq_cf_%s_XXXXXX", dir && *dir ? dir : "/tmp", name);
    char *d = mkdtemp(buf);
    if (!d) return NULL;
    char *r = malloc(strlen(d) + 1);
    if (r) strcpy(r, d);
    return r;
}

/* Entries of a folder, "." and ".." apart; -1 if it cannot be read. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Entries of dir whose name starts with prefix (e.g. "x.tqkv.tmp"). */
static int count_prefixed(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Removes every entry of dir (files, links, empty folders), then dir itself. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

static int write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* 1 if the file at path (followed if a link) holds exactly data[0, n). */
static int file_is(const char *path, const void *data, size_t n) {
    size_t got = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t *b = malloc(n + 1);
    got = fread(b, 1, n + 1, f);
    fclose(f);
    int ok = got == n && memcmp(b, data, n) == 0;
    free(b);
    return ok;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs fn(arg), which returns a tq_status, in a child process; returns that status, or -1
 * when it did not finish within secs seconds (it is then killed: a hang fails the test instead
 * of hanging the suite), -2 when it died of a signal, -3 when it exited otherwise (a
 * sanitizer's report: exit code 1) or could not be started. *elapsed gets its time. */
#define CHILD_STATUS_BASE 100 /* exit code of a child that returned status s: BASE + s */
typedef int (*child_fn)(const void *arg);
static int run_in_child(child_fn fn, const void *arg, double secs, double *elapsed) {
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) return -3;
    if (pid == 0) _exit(CHILD_STATUS_BASE + fn(arg));
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -3;
        if (now_s() - t0 > secs) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (elapsed) *elapsed = now_s() - t0;
            return -1;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (elapsed) *elapsed = now_s() - t0;
    if (!WIFEXITED(status)) return -2;
    return WEXITSTATUS(status) >= CHILD_STATUS_BASE ? WEXITSTATUS(status) - CHILD_STATUS_BASE : -3;
}

static const char *child_result(int code) {
    return code >= 0 ? tq_error_name((tq_status)code)
           : code == -1 ? "still blocked (killed)"
           : code == -2 ? "died of a signal"
                        : "exited without a status (a sanitizer report?)";
}

static int child_load(const void *path) {
    tq_kv_cache *c = NULL;
    tq_status st = tq_kv_cache_load(path, &c);
    tq_kv_cache_free(c);
    return (int)st;
}

/* AddressSanitizer reserves terabytes of address space: no RLIMIT_AS under it (its allocator
 * refuses any single allocation over 1 TiB instead). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

typedef struct load_args {
    const char *path;
    const tq_kv_cache_config *expect;
} load_args;

/* tq_kv_cache_load_expect with at most 8 GiB of address space: a loader that allocates the
 * size of a terabyte file gets TQ_ERR_NOMEM instead of taking the machine's memory. */
static int child_load_capped(const void *arg) {
    const load_args *a = arg;
    if (!TEST_ASAN) {
        struct rlimit rl = {(rlim_t)8 << 30, (rlim_t)8 << 30};
        setrlimit(RLIMIT_AS, &rl);
    }
    tq_kv_cache *c = NULL;
    tq_status st = tq_kv_cache_load_expect(a->path, a->expect, &c);
    tq_kv_cache_free(c);
    return (int)st;
}

typedef struct save_args {
    const tq_kv_cache *cache;
    const char *path;
    rlim_t fsize;
} save_args;

/* tq_kv_cache_save with files limited to a->fsize bytes (writes past it fail with EFBIG). */
static int child_save_fsize(const void *arg) {
    const save_args *a = arg;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {a->fsize, a->fsize};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 99;
    return (int)tq_kv_cache_save(a->cache, a->path);
}

/* Reports a part of a test that cannot run here (the harness's test_skip where it has one). */
#ifdef TEST_SKIP_CODE
#define PART_SKIPPED(...) test_skip(__VA_ARGS__)
#else
#define PART_SKIPPED(...) (printf("skip: " __VA_ARGS__), putchar('\n'))
#endif

/* Exact-arithmetic inputs (multiples of 1/256), the same on every machine. */
static uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
static void fill(float *x, size_t n, uint32_t seed, int loud) {
    for (size_t i = 0; i < n; i++) {
        int v = (int)(hash32((uint32_t)i * 2654435761u + seed) % 1025u) - 512;
        x[i] = (float)v / 256.0f + (loud && i % 16 == 3 ? 6.0f : 0.0f);
    }
}

/* The test's own bitwise CRC32C, independent of the library's sliced one. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t r = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        r ^= p[i];
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1u)));
    }
    return r ^ 0xFFFFFFFFu;
}
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

/* Recomputes every section's CRC of a (possibly edited) file image, walking the layout. */
static void fix_crcs(uint8_t *d, size_t size) {
    wr32(d + 60, crc32c(d, 60));
    size_t sp = rd32(d + 48), pos = 64;
    if (sp > size - pos - 12) return; /* an edited size: nothing more to fix */
    wr32(d + pos + 8 + sp, crc32c(d + pos, 8 + sp));
    pos += 8 + sp + 4;
    uint32_t nl = rd32(d + 16);
    for (uint32_t i = 0; i < nl && pos + 16 <= size; i++) {
        uint64_t pn = rd64(d + pos + 8);
        if (pn > size - pos - 20) return;
        wr32(d + pos + 16 + pn, crc32c(d + pos, 16 + (size_t)pn));
        pos += 16 + (size_t)pn + 4;
    }
}

/* A cache of n_layers × H × d with `n` tokens per layer: a prefill of n − 8 and 8 decode steps;
 * windows: the layer windows (or NULL). */
/* The key_rope_pairs of the caches build_w makes (TQ_ROPE_PAIRS_NONE unless a test sets it). */
static int build_pairs = TQ_ROPE_PAIRS_NONE;
/* The key_rope_freqs of the caches build_w makes (NULL unless a test sets it). */
static const float *build_freqs = NULL;
/* 1: the layer scheme's key split forced on (ksplit=1 on the layer only, the edge at its
 * default): turbo3's default when version 8 was written, which split at every head dim. */
static int build_layer_split = 0;

static tq_kv_cache *build_w(const char *scheme, int n_layers, int H, int d, size_t n,
                            const tq_kv_layer_scheme *overrides, const size_t *windows) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, n_layers, H, d, d);
    cfg.key_rope_pairs = build_pairs;
    cfg.key_rope_freqs = build_freqs;
    char err[1024];
    if (tq_kv_scheme_parse(scheme, &cfg.scheme, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    if (build_layer_split) cfg.scheme.layer.key_split = 1;
    cfg.layer_schemes = overrides;
    cfg.layer_windows = windows;
    tq_kv_cache *c = NULL;
    if (tq_kv_cache_create(&c, &cfg)) return NULL;
    size_t row = (size_t)H * (size_t)d;
    float *k = malloc(sizeof(float) * n * row), *v = malloc(sizeof(float) * n * row);
    tq_status st = TQ_OK;
    for (int l = 0; l < n_layers && !st; l++) {
        fill(k, n * row, 11u + (uint32_t)l, 1);
        fill(v, n * row, 77u + (uint32_t)l, 0);
        size_t pre = n > 8 ? n - 8 : 0;
        if (pre) st = tq_kv_cache_append(c, l, k, v, pre);
        for (size_t t = pre; t < n && !st; t++)
            st = tq_kv_cache_append(c, l, k + t * row, v + t * row, 1);
    }
    free(k);
    free(v);
    if (st) {
        tq_kv_cache_free(c);
        return NULL;
    }
    return c;
}

static tq_kv_cache *build(const char *scheme, int n_layers, int H, int d, size_t n,
                          const tq_kv_layer_scheme *overrides) {
    return build_w(scheme, n_layers, H, d, n, overrides, NULL);
}

/* 1 if a and b have the same layer windows (get_config: NULL when none). */
static int same_windows(const tq_kv_cache *a, const tq_kv_cache *b) {
    tq_kv_cache_config ca = test_cache_config(a), cb = test_cache_config(b);
    if (!ca.layer_windows || !cb.layer_windows) return !ca.layer_windows && !cb.layer_windows;
    return memcmp(ca.layer_windows, cb.layer_windows, sizeof(size_t) * (size_t)ca.n_layers) == 0;
}

static uint8_t *save_image(const tq_kv_cache *c, size_t *size) {
    size_t n = tq_kv_cache_save_bound(c), w = 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (tq_kv_cache_save_memory(c, buf, n, &w) != TQ_OK || w != n) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

/* 1 if a and b hold the same state: lengths, boundaries, windows, read-back bits, attention
 * bits. */
static int same_cache(const tq_kv_cache *a, const tq_kv_cache *b, int nqh) {
    tq_kv_cache_config ca = test_cache_config(a), cb = test_cache_config(b);
    if (ca.n_layers != cb.n_layers || ca.n_kv_heads != cb.n_kv_heads ||
        ca.head_dim_k != cb.head_dim_k || ca.head_dim_v != cb.head_dim_v || !same_windows(a, b))
        return 0;
    char sa[256], sb[256];
    if (tq_kv_scheme_format(&ca.scheme, sa, sizeof sa) ||
        tq_kv_scheme_format(&cb.scheme, sb, sizeof sb) || strcmp(sa, sb))
        return 0;
    int ok = 1;
    size_t row = (size_t)ca.n_kv_heads * (size_t)ca.head_dim_k;
    for (int l = 0; l < ca.n_layers && ok; l++) {
        tq_kv_layer_scheme la = test_layer_scheme(a, l), lb = test_layer_scheme(b, l);
        if (memcmp(&la, &lb, sizeof la)) return 0;
        size_t n = tq_kv_cache_length(a, l);
        if (n != tq_kv_cache_length(b, l) ||
            tq_kv_cache_compressed_length(a, l) != tq_kv_cache_compressed_length(b, l))
            return 0;
        float *x = malloc(sizeof(float) * (n * row * 2 + 1)), *y = malloc(sizeof(float) * (n * row * 2 + 1));
        tq_kv_cache_read(a, l, 0, n, x, n * row, x + n * row, n * row);
        tq_kv_cache_read(b, l, 0, n, y, n * row, y + n * row, n * row);
        ok = memcmp(x, y, sizeof(float) * n * row * 2) == 0;
        free(x);
        free(y);
        /* Decode attention of the last position, and a 4-query prefill chunk. */
        for (size_t nq = 1; ok && nq <= 4 && nq <= n; nq += 3) {
            size_t qn = nq * (size_t)nqh * (size_t)ca.head_dim_k;
            float *q = malloc(sizeof(float) * qn);
            float *o1 = malloc(sizeof(float) * nq * (size_t)nqh * (size_t)ca.head_dim_v);
            float *o2 = malloc(sizeof(float) * nq * (size_t)nqh * (size_t)ca.head_dim_v);
            fill(q, qn, 999u + (uint32_t)l, 0);
            tq_attn_params p;
            tq_attn_params_init(&p, ca.head_dim_k);
            size_t wb = tq_kv_attention_workspace_size(a, l, nqh, nq, 1);
            void *w = malloc(wb);
            tq_status s1 = tq_kv_attention(a, l, q, nqh, nq, &p, NULL, w, wb, o1, nq * (size_t)nqh * (size_t)ca.head_dim_v);
            tq_status s2 = tq_kv_attention(b, l, q, nqh, nq, &p, NULL, w, wb, o2, nq * (size_t)nqh * (size_t)ca.head_dim_v);
            ok = s1 == TQ_OK && s2 == TQ_OK &&
                 memcmp(o1, o2, sizeof(float) * nq * (size_t)nqh * (size_t)ca.head_dim_v) == 0;
            free(q);
            free(o1);
            free(o2);
            free(w);
        }
    }
    return ok;
}

/* Appends the same decode token to every layer of both caches. */
static int append_both(tq_kv_cache *a, tq_kv_cache *b, uint32_t seed) {
    tq_kv_cache_config c = test_cache_config(a);
    size_t row = (size_t)c.n_kv_heads * (size_t)c.head_dim_k;
    float *k = malloc(sizeof(float) * row), *v = malloc(sizeof(float) * row);
    fill(k, row, seed, 1);
    fill(v, row, seed + 1, 0);
    int ok = 1;
    for (int l = 0; l < c.n_layers; l++)
        ok &= tq_kv_cache_append(a, l, k, v, 1) == TQ_OK && tq_kv_cache_append(b, l, k, v, 1) == TQ_OK;
    free(k);
    free(v);
    return ok;
}

static const char *schemes[] = {"f16", "q8_0", "turbo3", "turbo3:trellis=0", "turbo4:trellis=1", "turbo4v2", "k3.5v3",
                                "turbo3:mean=1", "k=4:v=3:variant=prod", "turbo0v4",
                                "q4_0r", "k=q8_0r:v=q4_0r", "kq4_0rv3"};
#define N_SCHEMES (sizeof schemes / sizeof *schemes)

static void roundtrip_one(const char *scheme, const tq_kv_layer_scheme *ov, int n_layers) {
    tq_kv_cache *a = build(scheme, n_layers, 2, 64, 300, ov);
    CHECK_MSG(a != NULL, "%s", scheme);
    if (!a) return;
    size_t n1 = 0, n2 = 0;
    uint8_t *img = save_image(a, &n1);
    CHECK(img != NULL);
    tq_kv_cache *b = NULL;
    CHECK_MSG(tq_kv_cache_load_memory(img, n1, &b) == TQ_OK, "%s", scheme);
    if (b) {
        CHECK_MSG(same_cache(a, b, 8), "%s", scheme);
        uint8_t *img2 = save_image(b, &n2);
        CHECK_MSG(img2 && n1 == n2 && memcmp(img, img2, n1) == 0, "%s: re-save differs", scheme);
        free(img2);
        /* The state carries on identically: the next decode steps compress the same way. */
        for (uint32_t s = 0; s < 70; s++) CHECK(append_both(a, b, 5000u + s));
        CHECK_MSG(same_cache(a, b, 8), "%s after appends", scheme);
        tq_kv_memory ma, mb;
        tq_kv_cache_memory(a, &ma, sizeof ma);
        tq_kv_cache_memory(b, &mb, sizeof mb);
        CHECK(ma.data_bytes == mb.data_bytes && ma.compressed_tokens == mb.compressed_tokens);
    }
    free(img);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
}

static void test_roundtrip_schemes(void) {
    for (size_t i = 0; i < N_SCHEMES; i++) roundtrip_one(schemes[i], NULL, 2);
}

/* RoPE pairs (v7): a file keeps the pairing, also of a cache saved before its first
 * compression fitted the key scale, so that the fit after loading pools as the saved cache
 * would have; a file whose pairing differs from an expected config is TQ_ERR_MISMATCH. */
static void test_roundtrip_rope_pairs(void) {
    for (int pairs = TQ_ROPE_PAIRS_ADJACENT; pairs <= TQ_ROPE_PAIRS_HALVES; pairs++) {
        build_pairs = pairs;
        roundtrip_one("turbo3.5", NULL, 2);
        roundtrip_one("turbo4:start=1000", NULL, 2); /* nothing compressed, nothing fitted */
        tq_kv_cache *a = build("turbo3.5:start=1000", 1, 2, 64, 40, NULL), *b = NULL, *fresh = NULL;
        build_pairs = TQ_ROPE_PAIRS_NONE;
        size_t n = 0;
        uint8_t *img = a ? save_image(a, &n) : NULL;
        CHECK(img && tq_kv_cache_load_memory(img, n, &b) == TQ_OK && b);
        CHECK(b && test_cache_config(b).key_rope_pairs == pairs);
        tq_kv_cache_config e = test_cache_config(a);
        e.key_rope_pairs = TQ_ROPE_PAIRS_NONE;
        CHECK(img && tq_kv_cache_load_memory_expect(img, n, &e, &fresh) == TQ_ERR_MISMATCH && !fresh);
        e.key_rope_pairs = pairs;
        CHECK(img && tq_kv_cache_load_memory_expect(img, n, &e, &fresh) == TQ_OK && fresh);
        tq_kv_cache_free(fresh);
        free(img);
        tq_kv_cache_free(a);
        tq_kv_cache_free(b);
    }
    /* A pairing the head dim cannot take, or no pairing at all, is refused at create. */
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, 1, 15, 16);
    tq_kv_cache *c = NULL;
    cfg.key_rope_pairs = TQ_ROPE_PAIRS_HALVES;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID && !c);
    tq_kv_cache_config_init(&cfg, 1, 1, 16, 16);
    cfg.key_rope_pairs = 3;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID && !c);
}

/* RoPE angles (v9): a file keeps them (the mean turns after loading as in the saved cache);
 * a file whose angles differ from an expected config's, or which has none where it expects
 * some (and the other way round), is TQ_ERR_MISMATCH; angles out of range are refused at
 * create, and in a file (TQ_ERR_FORMAT). */
static void test_roundtrip_rope_freqs(void) {
    float fr[32], other[32];
    for (int i = 0; i < 32; i++) fr[i] = (float)pow(10000.0, -2.0 * i / 64.0), other[i] = fr[i] * 1.5f;
    build_pairs = TQ_ROPE_PAIRS_HALVES;
    build_freqs = fr;
    roundtrip_one("turbo3.5", NULL, 1);
    roundtrip_one("turbo3:trellis=1", NULL, 1);
    roundtrip_one("turbo4:start=1000", NULL, 1); /* nothing compressed, nothing fitted */
    tq_kv_cache *a = build("turbo3", 1, 2, 64, 300, NULL), *fresh = NULL;
    build_freqs = NULL;
    tq_kv_cache *nf = build("turbo3", 1, 2, 64, 300, NULL);
    build_pairs = TQ_ROPE_PAIRS_NONE;
    CHECK(a && nf && !same_cache(a, nf, 8)); /* the angles move the mean */
    size_t n = 0;
    uint8_t *img = a ? save_image(a, &n) : NULL;
    tq_kv_cache_config e = test_cache_config(a);
    CHECK(img && e.key_rope_freqs && memcmp(e.key_rope_freqs, fr, sizeof fr) == 0);
    CHECK(img && tq_kv_cache_load_memory_expect(img, n, &e, &fresh) == TQ_OK && fresh);
    tq_kv_cache_free(fresh);
    fresh = NULL;
    e.key_rope_freqs = other;
    CHECK(img && tq_kv_cache_load_memory_expect(img, n, &e, &fresh) == TQ_ERR_MISMATCH && !fresh);
    e.key_rope_freqs = NULL;
    CHECK(img && tq_kv_cache_load_memory_expect(img, n, &e, &fresh) == TQ_ERR_MISMATCH && !fresh);
    {
        size_t m = 0;
        uint8_t *im2 = nf ? save_image(nf, &m) : NULL;
        tq_kv_cache_config e2 = test_cache_config(nf);
        e2.key_rope_freqs = fr;
        CHECK(im2 && tq_kv_cache_load_memory_expect(im2, m, &e2, &fresh) == TQ_ERR_MISMATCH && !fresh);
        free(im2);
    }
    /* An angle in the file out of range (negative): a file no writer made. The angles are the
     * last 4·32 bytes of the scheme section, before its CRC. */
    if (img && n > 64) {
        size_t end = 64 + 8 + rd32(img + 48);
        uint8_t *cp = malloc(n);
        memcpy(cp, img, n);
        wr32(cp + end - 4, 0xBF800000u); /* −1.0f */
        fix_crcs(cp, n);
        CHECK(tq_kv_cache_load_memory(cp, n, &fresh) == TQ_ERR_FORMAT && !fresh);
        free(cp);
    }
    free(img);
    tq_kv_cache_free(a);
    tq_kv_cache_free(nf);
    /* At create: angles need a pairing, and each must be finite and in [0, 10⁶]. */
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, 1, 1, 64, 64);
    tq_kv_cache *c = NULL;
    cfg.key_rope_freqs = fr;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID && !c);
    cfg.key_rope_pairs = TQ_ROPE_PAIRS_ADJACENT;
    float bad[32];
    memcpy(bad, fr, sizeof bad);
    bad[3] = NAN;
    cfg.key_rope_freqs = bad;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID && !c);
    bad[3] = -0.5f;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_ERR_INVALID && !c);
    cfg.key_rope_freqs = fr;
    CHECK(tq_kv_cache_create(&c, &cfg) == TQ_OK && c);
    tq_kv_cache_free(c);
}

static void test_roundtrip_window_and_edges(void) {
    char s[128];
    for (size_t i = 0; i < N_SCHEMES; i++) {
        snprintf(s, sizeof s, "%s:window=40:batch=16", schemes[i]);
        roundtrip_one(s, NULL, 2);
    }
    roundtrip_one("turbo3:first=1:last=1:edge=q8_0", NULL, 4);
    roundtrip_one("turbo4v2:first=1:window=64", NULL, 3);
    roundtrip_one("turbo3:start=1000", NULL, 2); /* nothing compressed yet */
    roundtrip_one("turbo3:first=1:last=1:edge=kq8_0rvq4_0r", NULL, 3);
    /* predicted keys (v12): ρ fitted (0.6 in every head by the tests' hook), and not yet */
    tq_kv_pred_test_rho(0.6f);
    roundtrip_one("turbo4:mean=2:window=40:batch=16", NULL, 2);
    roundtrip_one("turbo3:mean=2:first=1:edge=q8_0:sink=0", NULL, 3);
    roundtrip_one("turbo3:mean=2:start=1000", NULL, 2);
    tq_kv_pred_test_rho(-1.0f);
    /* Per-layer overrides. */
    tq_kv_scheme a, b, c;
    tq_kv_scheme_parse("turbo3", &a, NULL, 0);
    tq_kv_scheme_parse("q8_0", &b, NULL, 0);
    tq_kv_scheme_parse("f16", &c, NULL, 0);
    tq_kv_layer_scheme ov[3] = {a.layer, b.layer, c.layer};
    roundtrip_one("turbo3", ov, 3);
}

static void test_roundtrip_file(void) {
    const char *path = scratch("rt.tqkv");
    tq_kv_cache *a = build("turbo4:window=16", 2, 2, 64, 200, NULL), *b = NULL;
    CHECK(a != NULL);
    CHECK(tq_kv_cache_save(a, path) == TQ_OK);
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK);
    CHECK(b && same_cache(a, b, 4));
    const char *base = strrchr(path, '/');
    char prefix[256], dir[512];
    snprintf(prefix, sizeof prefix, "%s.tmp", base ? base + 1 : path);
    snprintf(dir, sizeof dir, "%.*s", base ? (int)(base - path) : 1, base ? path : ".");
    CHECK(count_prefixed(dir, prefix) == 0); /* no temp file left behind */
    tq_kv_cache_free(b);
    tq_kv_cache_free(a);
    unlink(path);
}

/* The golden cache: 2 layers (the first a q8_0 edge), 2 KV heads, d = 16, 20 tokens,
 * turbo3.5 with key mean, scale and split, window 4, batch 8, layer windows 0 and 12 (nothing
 * dropped yet), 3 attention sinks: compressed and raw tokens, a mean, a scale, a channel
 * order, an edge, both formats, a sliding window, sink stores. */
static const size_t golden_windows[2] = {0, 12};
static tq_kv_cache *golden_pairs(const char *scheme) {
    build_pairs = TQ_ROPE_PAIRS_HALVES;
    tq_kv_cache *c = build_w(scheme, 2, 2, 16, 20, NULL, golden_windows);
    build_pairs = TQ_ROPE_PAIRS_NONE;
    return c;
}
/* RoPE angles of 2 layers × 8 pairs (d = 16), base 10⁴ and 10²: pairs 4–7 of layer 0 and 7 of
 * layer 1 turn at most 2 radians per 64 positions, so their mean turns; the others' is fixed. */
static const float golden_freqs[16] = {1.0f, 0.316228f, 0.1f, 0.0316228f, 0.01f, 0.00316228f, 0.001f, 0.000316228f,
                                       1.0f, 0.562341f, 0.316228f, 0.177828f, 0.1f, 0.0562341f, 0.0316228f, 0.0177828f};
/* The trellis tables of the golden builders: 1, or the two-state ones (golden_cache_v11); the
 * key mean: 1, or 2 (golden_cache: predicted keys). */
static int golden_trellis = 1, golden_mean = 1;
/* The cache version 8 wrote: version 10's without the angles. */
static tq_kv_cache *golden_cache_v8(void) {
    char sch[128];
    snprintf(sch, sizeof sch, "turbo3:mean=%d:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=%d", golden_mean,
             golden_trellis);
    build_layer_split = 1; /* the golden file's split at d = 16 (TQ_KV_KEY_SPLIT_AUTO: none) */
    tq_kv_cache *c = golden_pairs(sch);
    build_layer_split = 0;
    return c;
}
/* The cache version 10 wrote: today's with trellis=1. */
static tq_kv_cache *golden_cache_v10(void) {
    build_freqs = golden_freqs;
    tq_kv_cache *c = golden_cache_v8();
    build_freqs = NULL;
    return c;
}
/* The cache version 11 wrote: version 10's with the two-state tables. */
static tq_kv_cache *golden_cache_v11(void) {
    golden_trellis = TQ_TRELLIS_TWO_STATE;
    tq_kv_cache *c = golden_cache_v10();
    golden_trellis = 1;
    return c;
}
/* Today's: version 11's with predicted keys, ρ 0.5 in each head. */
static tq_kv_cache *golden_cache(void) {
    golden_mean = TQ_KV_KEY_MEAN_PREDICT;
    tq_kv_pred_test_rho(0.5f);
    tq_kv_cache *c = golden_cache_v11();
    tq_kv_pred_test_rho(-1.0f);
    golden_mean = 1;
    return c;
}
/* The cache version 9 wrote: version 10's without fast pairs. */
static tq_kv_cache *golden_cache_v9(void) {
    tq_key_transform_test_fast_max(0);
    tq_kv_cache *c = golden_cache_v10();
    tq_key_transform_test_fast_max(-1);
    return c;
}
/* The cache version 7 wrote: turbo3.5 (its key split was the only one). */
static tq_kv_cache *golden_cache_v7(void) {
    return golden_pairs("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=1");
}
/* The cache version 6 wrote: the same with every channel's statistics on its own. */
static tq_kv_cache *golden_cache_v6(void) {
    return build_w("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=1", 2, 2,
                   16, 20, NULL, golden_windows);
}
/* The cache version 5 wrote: the same without trellis codes (trellis=0, the parser's default
 * before trellis=2 was). */
static tq_kv_cache *golden_cache_v5(void) {
    return build_w("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=0", 2, 2, 16, 20,
                   NULL, golden_windows);
}
/* The cache version 4 wrote: the same without sinks. */
static tq_kv_cache *golden_cache_v4(void) {
    return build_w("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0", 2, 2, 16, 20, NULL,
                   golden_windows);
}
/* The cache version 3 wrote: the same without layer windows. */
static tq_kv_cache *golden_cache_v3(void) {
    return build("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0", 2, 2, 16, 20, NULL);
}
/* A cache as the writers of the older golden files built it: the key mean from the first
 * `batch` (8) tokens rather than from all 13 held at the first compression. */
static tq_kv_cache *build_old_mean(const char *scheme) {
    tq_kv_set_key_mean_tokens(8);
    tq_kv_cache *c = build(scheme, 2, 2, 16, 20, NULL);
    tq_kv_set_key_mean_tokens(0);
    return c;
}
/* The cache version 2 wrote: turbo3, no key split. */
static tq_kv_cache *golden_cache_v2(void) {
    return build_old_mean("turbo3:mean=1:ksplit=0:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0");
}
/* The same cache as version 1 wrote it: no key scale. */
static tq_kv_cache *golden_cache_v1(void) {
    return build_old_mean("turbo3:mean=1:kscale=0:ksplit=0:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0");
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *size = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* An old golden file loads as `want` (built by this code with that file's scheme and key
 * mean); setting byte `flag` (≥ 0) of its first layer scheme record makes it TQ_ERR_FORMAT. */
static void check_old_version(const char *path, const tq_kv_cache *want, int flag) {
    size_t gn = 0;
    uint8_t *g = read_file(path, &gn);
    CHECK_MSG(g != NULL, "missing %s", path);
    if (!g) return;
    tq_kv_cache *b = NULL, *x = NULL;
    CHECK(tq_kv_cache_load_memory(g, gn, &b) == TQ_OK);
    CHECK_MSG(b && want && same_cache(want, b, 4), "%s", path);
    if (flag >= 0) {
        g[64 + 8 + flag] = 1;
        fix_crcs(g, gn);
        CHECK_MSG(tq_kv_cache_load_memory(g, gn, &x) == TQ_ERR_FORMAT && !x, "%s, byte %d set", path, flag);
    }
    tq_kv_cache_free(b);
    free(g);
}

/* A copy of the file image g (gn bytes) with the u32 at off set to v (the version at 8, the
 * flags at 52), checksums fixed, is TQ_ERR_FORMAT: a file no writer of that version made. */
static void check_refused_with(const uint8_t *g, size_t gn, size_t off, uint32_t v, const char *what) {
    uint8_t *cp = g && gn > 64 ? malloc(gn) : NULL;
    CHECK_MSG(cp != NULL, "%s: no image", what);
    if (!cp) return;
    memcpy(cp, g, gn);
    wr32(cp + off, v);
    fix_crcs(cp, gn);
    tq_kv_cache *x = NULL;
    CHECK_MSG(tq_kv_cache_load_memory(cp, gn, &x) == TQ_ERR_FORMAT && !x, "%s", what);
    tq_kv_cache_free(x);
    free(cp);
}

static void test_golden(void) {
    tq_kv_cache *c = golden_cache();
    CHECK(c != NULL);
    size_t n = 0, gn = 0;
    uint8_t *img = save_image(c, &n);
    CHECK(crc32c((const uint8_t *)"123456789", 9) == 0xE3069283u); /* the CRC32C check value */
    const char *upd = getenv("TQ_UPDATE_GOLDEN");
    if (upd && *upd == '1') {
        FILE *f = fopen(GOLDEN, "wb");
        CHECK(f && fwrite(img, 1, n, f) == n);
        if (f) fclose(f);
        printf("wrote %s (%zu bytes)\n", GOLDEN, n);
        test_skip("the comparison with %s: TQ_UPDATE_GOLDEN=1 just wrote it", GOLDEN);
    }
    uint8_t *g = read_file(GOLDEN, &gn);
    CHECK_MSG(g != NULL, "missing %s", GOLDEN);
    if (g) {
        CHECK_MSG(gn == n && memcmp(g, img, n) == 0, "writer no longer produces %s", GOLDEN);
        /* Every CRC field agrees with an independent bitwise CRC32C. */
        uint8_t *h = malloc(gn);
        memcpy(h, g, gn);
        fix_crcs(h, gn);
        CHECK(memcmp(h, g, gn) == 0);
        free(h);
        tq_kv_cache *b = NULL;
        CHECK(tq_kv_cache_load_memory(g, gn, &b) == TQ_OK);
        CHECK(b && same_cache(c, b, 4));
        CHECK(b && b->layers[1].rho && b->layers[1].rho_set && !memcmp(b->layers[1].rho, c->layers[1].rho, 2 * sizeof(float)));
        CHECK(tq_kv_cache_length(b, 1) == 20 && tq_kv_cache_compressed_length(b, 1) == 16);
        CHECK(b && test_layer_scheme(b, 1).key_split == 1 && test_layer_scheme(b, 0).key_split == 0);
        /* the file pins fast pairs: layer 1 has some, the same as the cache's */
        uint16_t fa[TQ_KEY_MEAN_FAST], fb[TQ_KEY_MEAN_FAST];
        int na = tq_key_transform_fast_pairs(tq_kv_layer_key_transform(c, 1), fa),
            nb = b ? tq_key_transform_fast_pairs(tq_kv_layer_key_transform(b, 1), fb) : -1;
        CHECK_MSG(na > 0 && na == nb && !memcmp(fa, fb, (size_t)na * sizeof *fa), "fast pairs %d / %d", na, nb);
        float sa[2 * 16], sb[2 * 16];
        CHECK(b && tq_kv_cache_key_scale(c, 1, sa, 32) == TQ_OK && tq_kv_cache_key_scale(b, 1, sb, 32) == TQ_OK);
        CHECK(memcmp(sa, sb, sizeof sa) == 0);
        tq_kv_cache_free(b);
        /* The default key split (TQ_KV_KEY_SPLIT_AUTO) splits turbo3 with trellis codes at
         * d = 16 (the golden file's), and with Lloyd-Max codes not: a file of those that did
         * is another scheme to today's default, a clear mismatch, and loads as what it is. */
        tq_kv_cache *t = golden_pairs("turbo3:mean=2:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=2");
        CHECK(t && test_layer_scheme(t, 1).key_split == 1);
        tq_kv_cache_config et = test_cache_config(t);
        et.key_rope_freqs = golden_freqs; /* t is built without them */
        b = NULL;
        CHECK(t && tq_kv_cache_load_memory_expect(g, gn, &et, &b) == TQ_OK && b);
        tq_kv_cache_free(b);
        /* ... and against trellis=1 it is another scheme (a prompt cache is rebuilt) */
        et.scheme.trellis = 1;
        b = NULL;
        CHECK(t && tq_kv_cache_load_memory_expect(g, gn, &et, &b) == TQ_ERR_MISMATCH && !b);
        tq_kv_cache_free(t);
        tq_kv_cache *s1 = golden_pairs("turbo3:mean=1:ksplit=1:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=0"),
                    *s2 = golden_pairs("turbo3:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=3:trellis=0");
        CHECK(s1 && s2 && test_layer_scheme(s1, 1).key_split == 1 && test_layer_scheme(s2, 1).key_split == 0);
        size_t n1 = 0;
        uint8_t *i1 = s1 ? save_image(s1, &n1) : NULL;
        tq_kv_cache_config e2 = test_cache_config(s2);
        b = NULL;
        CHECK(i1 && tq_kv_cache_load_memory_expect(i1, n1, &e2, &b) == TQ_ERR_MISMATCH && !b);
        CHECK(i1 && tq_kv_cache_load_memory(i1, n1, &b) == TQ_OK && b && same_cache(s1, b, 4));
        tq_kv_cache_free(b);
        free(i1);
        tq_kv_cache_free(s1);
        tq_kv_cache_free(s2);
    }
    free(g);
    /* Files of earlier versions load as the caches they were written from (v3: no layer
     * windows, v2: no key split either, v1: no key scale either); with the flag a later version
     * added set, they are files no writer of their version produced. */
    tq_kv_cache *w6 = golden_cache_v6(), *w5 = golden_cache_v5(), *w4 = golden_cache_v4(),
                *w3 = golden_cache_v3(), *w7 = golden_cache_v7(), *w8 = golden_cache_v8(),
                *w10 = golden_cache_v10();
    {
        /* Version 11 had no predicted keys: its file loads as today's cache with mean=1; today's
         * file as version 11 (its turbo layer predicts) is a file no writer of version 11 made;
         * ρ is not inert (the golden cache reads back other keys), and the file holds it. */
        tq_kv_cache *w11 = golden_cache_v11();
        check_old_version(GOLDEN_V11, w11, -1);
        CHECK(c && w11 && !same_cache(c, w11, 4));
        CHECK(c && c->layers[1].rho && c->layers[1].rho_set && c->layers[1].rho[0] == 0.5f && !c->layers[0].rho);
        check_refused_with(img, n, 8, 11, "today's file as version 11");
        tq_kv_cache_free(w11);
    }
    {
        /* Version 10 had no two-state tables: its file (trellis=1) loads as today's cache with
         * trellis=1, which saves with flag bit 4 clear; the tables are not inert (the golden
         * cache reads back other keys); bit 4 set in a version 10 file, or without bit 0, is a
         * file no writer made. */
        check_old_version(GOLDEN_V10, w10, -1);
        CHECK(c && w10 && !same_cache(c, w10, 4));
        CHECK(c && test_cache_config(c).scheme.trellis == TQ_TRELLIS_TWO_STATE);
        size_t n10 = 0, g10n = 0;
        uint8_t *i10 = w10 ? save_image(w10, &n10) : NULL, *g10 = read_file(GOLDEN_V10, &g10n);
        CHECK(i10 && rd32(i10 + 8) == 12 && rd32(i10 + 52) == (rd32(img + 52) & ~16u) && (rd32(img + 52) & 17u) == 17u);
        check_refused_with(img, n, 52, rd32(img + 52) & ~1u, "version 12, flag bit 4 without trellis codes");
        check_refused_with(g10, g10n, 52, g10 ? rd32(g10 + 52) | 16u : 0, "version 10 with flag bit 4");
        check_refused_with(img, n, 8, 10, "today's file as version 10");
        free(i10);
        free(g10);
    }
    {
        /* Version 9 had no fast pairs: it loads as today's cache without them; today's file as
         * version 9 (its layer 1 has fast pairs) is a file no writer of version 9 made; and the
         * fast pairs are not inert (the golden cache reads back other keys). */
        tq_kv_cache *w9 = golden_cache_v9();
        check_old_version(GOLDEN_V9, w9, -1);
        CHECK(w10 && w9 && !same_cache(w10, w9, 4));
        CHECK(w9 && tq_key_transform_n_fast(tq_kv_layer_key_transform(w9, 1)) == 0);
        tq_kv_cache_free(w9);
        size_t n10 = 0;
        uint8_t *i10 = w10 ? save_image(w10, &n10) : NULL;
        check_refused_with(i10, n10, 8, 9, "version 10's file as version 9");
        free(i10);
    }
    check_old_version(GOLDEN_V8, w8, -1);
    {
        /* Version 8 had no angles: version 9's file as version 8 is a file no writer of version
         * 8 made; and the angles are not inert (the golden cache reads back other keys). */
        size_t n9 = 0;
        uint8_t *g9 = read_file(GOLDEN_V9, &n9);
        check_refused_with(g9, n9, 8, 8, "version 9's file as version 8");
        free(g9);
        CHECK(w10 && w8 && !same_cache(w10, w8, 4));
    }
    tq_kv_cache_free(w8);
    tq_kv_cache_free(w10);
    check_old_version(GOLDEN_V7, w7, -1);
    tq_kv_cache_free(w7);
    {
        /* Version 7 split no key at a whole width: today's file as version 7 (its turbo3 layer
         * split) is a file no writer of version 7 made. */
        check_refused_with(img, n, 8, 7, "today's file as version 7");
    }
    check_old_version(GOLDEN_V6, w6, -1);
    {
        /* The pairing's scale differs from the per-channel one (the flag is not inert), and a
         * version 6 file with pair flags set is a file no writer of version 6 made. */
        tq_kv_cache *c7 = golden_cache_v7();
        float s6[32], s7[32];
        CHECK(c7 && w6 && tq_kv_cache_key_scale(c7, 1, s7, 32) == TQ_OK &&
              tq_kv_cache_key_scale(w6, 1, s6, 32) == TQ_OK && memcmp(s6, s7, sizeof s6) != 0);
        /* halves: channels i and i + 8 of each head have closer scales than per channel */
        double r6 = 0.0, r7 = 0.0;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 8; i++) {
                r6 += fabs(log((double)s6[16 * h + i] / s6[16 * h + i + 8]));
                r7 += fabs(log((double)s7[16 * h + i] / s7[16 * h + i + 8]));
            }
        CHECK_MSG(r7 < 0.8 * r6, "Σ |log| of the pair ratios: %g with pairs, %g per channel", r7, r6);
        tq_kv_cache_free(c7);
        uint8_t *g6 = read_file(GOLDEN_V6, &gn);
        tq_kv_cache *x = NULL;
        CHECK(g6 && gn > 64);
        for (uint32_t pairs = 1; g6 && gn > 64 && pairs <= 2; pairs++) {
            wr32(g6 + 52, 1u | pairs << 1);
            fix_crcs(g6, gn);
            CHECK(tq_kv_cache_load_memory(g6, gn, &x) == TQ_ERR_FORMAT && !x);
        }
        free(g6);
    }
    tq_kv_cache_free(w6);
    check_old_version(GOLDEN_V5, w5, -1);
    {
        /* A version 5 file with the trellis flag set is a file no writer of version 5 made. */
        uint8_t *g5 = read_file(GOLDEN_V5, &gn);
        check_refused_with(g5, gn, 52, 1, "version 5 with the trellis flag");
        free(g5);
    }
    tq_kv_cache_free(w5);
    check_old_version(GOLDEN_V4, w4, -1);
    {
        /* Without sinks, trellis codes, RoPE pairs and angles and a whole-width split, version 9 is version 4's bytes but for
         * the version and header CRC. */
        size_t n4 = 0, g4n = 0;
        uint8_t *i4 = save_image(w4, &n4), *g4 = read_file(GOLDEN_V4, &g4n);
        CHECK(i4 && g4 && n4 == g4n && rd32(i4 + 8) == TQ_KV_CACHE_FILE_VERSION && rd32(g4 + 8) == 4);
        if (i4 && g4 && n4 == g4n) {
            memcpy(i4 + 8, g4 + 8, 4);
            memcpy(i4 + 60, g4 + 60, 4);
            CHECK(memcmp(i4, g4, n4) == 0);
        }
        free(i4);
        free(g4);
    }
    {
        /* Version 4 knows no q8_0r / q4_0r: their codes there are a file no writer made. */
        uint8_t *g4 = read_file(GOLDEN_V4, &gn);
        tq_kv_cache *x = NULL;
        CHECK(g4 && gn > 80);
        for (int code = TQ_KV_Q8_0R; g4 && code <= TQ_KV_Q4_0R; code++) {
            g4[64 + 8] = (uint8_t)code; /* the scheme's layer record: key format */
            fix_crcs(g4, gn);
            CHECK_MSG(tq_kv_cache_load_memory(g4, gn, &x) == TQ_ERR_FORMAT && !x, "code %d", code);
        }
        free(g4);
    }
    check_old_version(GOLDEN_V3, w3, -1);
    tq_kv_cache_free(w4);
    tq_kv_cache_free(w3);
    tq_kv_cache *v2 = golden_cache_v2(), *v1 = golden_cache_v1();
    check_old_version(GOLDEN_V2, v2, 6);
    CHECK(test_layer_scheme(v2, 1).key_split == 0 && test_layer_scheme(v2, 1).key_scale == 1);
    {
        /* Today's "turbo3" with Lloyd-Max codes, without its key split (on by default since version 8) and sinks
         * expects it fine; with the split, or the parser's default 4 sinks, it is another
         * scheme (the file has neither). */
        tq_kv_cache *t3 = build("turbo3:mean=1:ksplit=0:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0", 2, 2, 16, 20, NULL), *b = NULL;
        tq_kv_cache *t3s = build("turbo3:mean=1:ksplit=0:window=4:batch=8:first=1:edge=q8_0:trellis=0", 2, 2, 16, 20, NULL);
        tq_kv_cache *t3k = build("turbo3:mean=1:ksplit=1:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0", 2, 2, 16, 20, NULL);
        tq_kv_cache_config e = test_cache_config(t3), es = test_cache_config(t3s), ek = test_cache_config(t3k);
        uint8_t *g2 = read_file(GOLDEN_V2, &gn);
        CHECK(g2 && tq_kv_cache_load_memory_expect(g2, gn, &e, &b) == TQ_OK && b);
        tq_kv_cache_free(b);
        b = NULL;
        CHECK(g2 && tq_kv_cache_load_memory_expect(g2, gn, &ek, &b) == TQ_ERR_MISMATCH && !b);
        tq_kv_cache_free(t3k);
        CHECK(es.scheme.sink == 4 && g2 &&
              tq_kv_cache_load_memory_expect(g2, gn, &es, &b) == TQ_ERR_MISMATCH && !b);
        tq_kv_cache_free(t3);
        tq_kv_cache_free(t3s);
        free(g2);
    }
    check_old_version(GOLDEN_V1, v1, 5);
    CHECK(test_layer_scheme(v1, 1).key_scale == 0 && test_layer_scheme(v1, 1).key_mean == 1);
    /* A file of this version whose key mean came from the first `batch` tokens keeps it. */
    tq_kv_cache *v3 = build_old_mean("turbo3.5:mean=1:window=4:batch=8:first=1:edge=q8_0:sink=0:trellis=0");
    check_old_version(GOLDEN_V3_MEAN8, v3, -1);
    tq_kv_cache_free(v3);
    tq_kv_cache_free(v2);
    tq_kv_cache_free(v1);
    free(img);
    tq_kv_cache_free(c);
}

static void test_truncation(void) {
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    CHECK(img != NULL);
    int bad = 0;
    for (size_t len = 0; img && len < n; len++) {
        uint8_t *p = malloc(len ? len : 1); /* exact size: ASan sees any over-read */
        memcpy(p, img, len);
        tq_kv_cache *b = NULL;
        tq_status st = tq_kv_cache_load_memory(p, len, &b);
        if (st != TQ_ERR_FORMAT || b) {
            if (bad++ < 5) fprintf(stderr, "truncated at %zu: %s\n", len, tq_error_name(st));
        }
        tq_kv_cache_free(b);
        free(p);
    }
    CHECK(bad == 0);
    /* Trailing bytes are rejected too. */
    uint8_t *p = malloc(n + 1);
    memcpy(p, img, n);
    p[n] = 0;
    tq_kv_cache *b = NULL;
    CHECK(tq_kv_cache_load_memory(p, n + 1, &b) == TQ_ERR_FORMAT && !b);
    free(p);
    free(img);
    tq_kv_cache_free(c);
}

static void test_bit_flips(void) {
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    CHECK(img != NULL);
    int bad = 0, n_crc = 0, n_fmt = 0;
    uint8_t *p = malloc(n);
    for (size_t i = 0; img && i < n * 8; i++) {
        memcpy(p, img, n);
        p[i / 8] ^= (uint8_t)(1u << (i % 8));
        tq_kv_cache *b = NULL;
        tq_status st = tq_kv_cache_load_memory(p, n, &b);
        n_crc += st == TQ_ERR_CHECKSUM;
        n_fmt += st == TQ_ERR_FORMAT;
        /* The version field (bytes 8..11) is checked before the header's CRC. */
        int ok = st == TQ_ERR_CHECKSUM || st == TQ_ERR_FORMAT ||
                 (st == TQ_ERR_VERSION && i / 8 >= 8 && i / 8 < 12);
        if (!ok || b) {
            if (bad++ < 5) fprintf(stderr, "bit %zu: %s\n", i, tq_error_name(st));
        }
        tq_kv_cache_free(b);
    }
    CHECK(bad == 0);
    CHECK(n_crc > n_fmt); /* most flips land in checksummed bytes */
    free(p);
    free(img);
    tq_kv_cache_free(c);
}

static void test_magic_version(void) {
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    tq_kv_cache *b = NULL;
    uint8_t *p = malloc(n);
    memcpy(p, img, n);
    p[0] = 'X';
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    memcpy(p, img, n);
    wr32(p + 8, TQ_KV_CACHE_FILE_VERSION + 1); /* a future version, with a valid checksum */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_VERSION && !b);
    wr32(p + 8, 0);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_VERSION && !b);
    memcpy(p, img, n);
    wr32(p + 52, 8); /* a reserved flag */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    wr32(p + 52, 6); /* key_rope_pairs 3: no such pairing */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    CHECK(tq_kv_cache_load_memory(NULL, n, &b) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_load_memory(img, n, NULL) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_load_memory(img, 0, &b) == TQ_ERR_FORMAT);
    /* A random non-cache file. */
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)hash32((uint32_t)i);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    free(p);
    free(img);
    tq_kv_cache_free(c);
}

static void test_mismatch(void) {
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    tq_kv_cache_config e = test_cache_config(c);
    tq_kv_cache *b = NULL;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e, &b) == TQ_OK && b);
    tq_kv_cache_free(b);
    b = NULL;
    tq_kv_cache_config e2 = e;
    e2.n_kv_heads = 4;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH && !b);
    e2 = e;
    e2.head_dim_v = 32;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH);
    e2 = e;
    e2.n_layers = 3;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH);
    e2 = e;
    tq_kv_scheme_parse("turbo4:mean=1:window=4:batch=8:first=1:edge=q8_0", &e2.scheme, NULL, 0);
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH);
    e2 = e;
    e2.scheme.seed ^= 1;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH);
    /* The key split: turbo3.5 without it is another cache; the flag of the q8_0 edge (where
     * it has no effect) is no mismatch. */
    e2 = e;
    e2.scheme.layer.key_split = 0;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH && !b);
    e2 = e;
    e2.scheme.edge.key_split = !e2.scheme.edge.key_split;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_OK && b);
    tq_kv_cache_free(b);
    b = NULL;
    e2 = e;
    e2.scheme.raw_window = 0;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH);
    tq_kv_layer_scheme ls[2] = {test_layer_scheme(c, 0), test_layer_scheme(c, 1)};
    e2 = e;
    e2.layer_schemes = ls;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_OK);
    tq_kv_cache_free(b);
    b = NULL;
    ls[1].value_bits = 4.0f;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_MISMATCH && !b);
    /* A file's checksum error wins over a mismatch further on. */
    img[80] ^= 1;
    e2 = e;
    e2.scheme.batch = 9;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e2, &b) == TQ_ERR_CHECKSUM);
    free(img);
    tq_kv_cache_free(c);
}

/* Offset of layer section i's head in a valid image. */
static size_t layer_at(const uint8_t *d, uint32_t i) {
    size_t pos = 64 + 8 + rd32(d + 48) + 4;
    for (uint32_t j = 0; j < i; j++) pos += 16 + (size_t)rd64(d + pos + 8) + 4;
    return pos;
}

static void test_hostile(void) {
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    uint8_t *p = malloc(n);
    tq_kv_cache *b = NULL;
    /* Huge shapes in a small file (checksums valid): rejected before allocating. */
    memcpy(p, img, n);
    wr32(p + 16, 4096);
    wr32(p + 20, 1024);
    wr32(p + 48, 64 + 4096 * (16 + 8));
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    memcpy(p, img, n);
    wr32(p + 16, 5000); /* beyond the API's limit */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    memcpy(p, img, n);
    wr32(p + 24, 4096); /* head dim beyond TQ_MAX_DIM */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    /* Huge token counts in a layer section. */
    size_t L1 = layer_at(img, 1);
    uint64_t huge[] = {1ull << 62, ~0ull, (1ull << 40) + 3, 21};
    for (size_t k = 0; k < sizeof huge / sizeof *huge; k++) {
        memcpy(p, img, n);
        wr64(p + L1 + 16, huge[k]);
        fix_crcs(p, n);
        CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
        memcpy(p, img, n);
        wr64(p + L1 + 24, huge[k]); /* n_comp */
        fix_crcs(p, n);
        CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
        memcpy(p, img, n);
        wr64(p + L1 + 8, huge[k]); /* payload bytes */
        fix_crcs(p, n);
        CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    }
    /* n_tokens in the header that disagrees with the layers. */
    memcpy(p, img, n);
    wr64(p + 40, 41);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    /* Layer sections out of order. */
    memcpy(p, img, n);
    wr32(p + L1 + 4, 0);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    /* A bad scheme record (format 7) and a bit width the head dim cannot split. */
    memcpy(p, img, n);
    p[64 + 8] = 7;
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    memcpy(p, img, n);
    {
        uint8_t *rec = p + 64 + 8 + 64 + 16; /* layer 1's record: turbo3.5 keys → 3.3 bits */
        float f = 3.3f;
        uint32_t u;
        memcpy(&u, &f, 4);
        wr32(rec + 8, u);
    }
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    /* A key split the scheme does not make (layer 0 has q8_0 keys), and none where it does. */
    for (int li = 0; li < 2; li++) {
        memcpy(p, img, n);
        p[64 + 8 + 64 + 16 * li + 6] ^= 1;
        fix_crcs(p, n);
        CHECK_MSG(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b, "split flag of layer %d", li);
    }
    /* Values no encoder writes, with valid checksums: a NaN norm, an Inf raw token, a NaN
     * key mean, bad key scale statistics, a channel order that is no permutation. Layer 1
     * payload: 24 fixed, 2·16 mean floats, the scale block (query rows f64, 2·16 Σq² f64,
     * 2·16 scale f32, 2·16 channel order u16), then 16·2 K records of 10 bytes. */
    size_t sblk = L1 + 16 + 24 + 2 * 16 * 4;
    struct {
        size_t off;
        uint64_t bits;
        int width;
    } bad_scale[] = {
        {sblk, 0xBFF0000000000000ull, 8},                   /* −1 query rows */
        {sblk, 0x7FF0000000000000ull, 8},                   /* +Inf query rows */
        {sblk + 8 + 8 * 5, 0xFFF8000000000000ull, 8},       /* NaN Σq² */
        {sblk + 8 + 8 * 32 + 4 * 7, 0x7FC00000u, 4},        /* NaN scale */
        {sblk + 8 + 8 * 32 + 4 * 7, 0, 4},                  /* zero scale */
        {sblk + 8 + 8 * 32 + 4 * 31, 0xBF800000u, 4},       /* negative scale */
        {sblk + 8 + 12 * 32 + 2 * 3, 16, 2},                /* channel 16 of 16 */
        {sblk + 8 + 12 * 32 + 2 * 17, 0x00010001u, 4},      /* channel 1 twice (head 1) */
    };
    for (size_t k = 0; k < sizeof bad_scale / sizeof *bad_scale; k++) {
        memcpy(p, img, n);
        if (bad_scale[k].width == 8) wr64(p + bad_scale[k].off, bad_scale[k].bits);
        else if (bad_scale[k].width == 4) wr32(p + bad_scale[k].off, (uint32_t)bad_scale[k].bits);
        else p[bad_scale[k].off] = (uint8_t)bad_scale[k].bits, p[bad_scale[k].off + 1] = 0;
        fix_crcs(p, n);
        CHECK_MSG(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT && !b, "bad scale %zu", k);
    }
    /* Compressed tokens without their key scale. */
    memcpy(p, img, n);
    p[L1 + 16 + 19] = 0;
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    memcpy(p, img, n);
    const int nfast = p[L1 + 16 + 20]; /* v10: the fast pairs' list follows the key transform */
    CHECK(nfast > 0 && nfast <= TQ_KEY_MEAN_FAST);
    size_t rho0 = sblk + 8 + 2 * 16 * 14 + 2 * (size_t)nfast; /* v12: ρ of the 2 heads */
    size_t krec0 = rho0 + 2 * 4;
    p[krec0 + 8] = 0x00, p[krec0 + 9] = 0x7E; /* fp16 NaN norm */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT && !b);
    memcpy(p, img, n);
    size_t kraw0 = krec0 + 16 * 2 * 10 * 2;
    p[kraw0] = 0x00, p[kraw0 + 1] = 0x7C; /* fp16 +Inf */
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT);
    memcpy(p, img, n);
    wr32(p + L1 + 16 + 24, 0x7FC00000u);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT);
    /* Fast pairs: more than TQ_KEY_MEAN_FAST (the payload then disagrees too), and a list no
     * fit writes: a pair that turns slowly (7), one past the pairs (8). (Order and twins:
     * test_key_transform's test_fast_pairs.) */
    memcpy(p, img, n);
    p[L1 + 16 + 20] = TQ_KEY_MEAN_FAST + 1;
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    for (int bad = 7; bad <= 8 && nfast > 0; bad++) {
        size_t last = sblk + 8 + 2 * 16 * 14 + 2 * (size_t)(nfast - 1);
        memcpy(p, img, n);
        p[last] = (uint8_t)bad, p[last + 1] = 0;
        fix_crcs(p, n);
        CHECK_MSG(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT && !b, "fast pair %d", bad);
    }
    /* ρ (v12) no fit writes: NaN, negative, −0, above TQ_KV_PRED_RHO_MAX; compressed tokens
     * without ρ fitted; the flag at 2, or on a layer that does not predict (layer 0). */
    CHECK(rd32(img + rho0) == 0x3F000000u && rd32(img + rho0 + 4) == 0x3F000000u); /* 0.5, 0.5 */
    const uint32_t bad_rho[] = {0x7FC00000u, 0xBF000000u, 0x80000000u, 0x3F7AE148u /* 0.98 */};
    for (size_t k = 0; k < sizeof bad_rho / sizeof *bad_rho; k++) {
        memcpy(p, img, n);
        wr32(p + rho0 + 4, bad_rho[k]);
        fix_crcs(p, n);
        CHECK_MSG(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_CORRUPT && !b, "bad rho %zu", k);
    }
    for (int k = 0; k < 3; k++) {
        memcpy(p, img, n);
        p[(k == 2 ? layer_at(img, 0) : L1) + 16 + 21] = (uint8_t)(k == 0 ? 0 : k == 1 ? 2 : 1);
        fix_crcs(p, n);
        CHECK_MSG(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b, "rho flag %d", k);
    }
    /* Compressed tokens without their key mean. */
    memcpy(p, img, n);
    p[L1 + 16 + 17] = 0;
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT);
    /* The edited image, restored, still loads: the edits above were the only faults. */
    fix_crcs(img, n);
    CHECK(tq_kv_cache_load_memory(img, n, &b) == TQ_OK);
    tq_kv_cache_free(b);
    free(p);
    free(img);
    tq_kv_cache_free(c);
}

static void test_crash_temp_file(void) {
    const char *path = scratch("crash.tqkv");
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    tq_kv_cache *a = build("turbo3", 1, 2, 64, 100, NULL), *b2 = build("q8_0", 1, 2, 64, 50, NULL);
    CHECK(tq_kv_cache_save(a, path) == TQ_OK);
    /* A crash mid-save: a partial temp file next to the previous file. */
    size_t n = 0;
    uint8_t *img = save_image(b2, &n);
    FILE *f = fopen(tmp, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(img, 1, n / 2, f);
        fclose(f);
    }
    tq_kv_cache *b = NULL;
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && same_cache(a, b, 2));
    tq_kv_cache_free(b);
    b = NULL;
    CHECK(tq_kv_cache_load(tmp, &b) == TQ_ERR_FORMAT); /* the partial file itself */
    /* The next save replaces the previous file through a temp file of its own: a file at
     * "<path>.tmp" (stale or not) is never opened, so it is left exactly as it was. */
    CHECK(tq_kv_cache_save(b2, path) == TQ_OK);
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && same_cache(b2, b, 2));
    tq_kv_cache_free(b);
    CHECK(img && file_is(tmp, img, n / 2));
    unlink(tmp);
    unlink(path);
    free(img);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b2);
}

static void test_io_errors(void) {
    tq_kv_cache *a = build("turbo3", 1, 2, 64, 10, NULL), *b = NULL;
    CHECK(tq_kv_cache_save(a, "/nonexistent-dir-tq/x.tqkv") == TQ_ERR_IO);
    CHECK(tq_kv_cache_save(a, "") == TQ_ERR_IO);
    /* Renaming over a folder fails: the folder survives, no temp file is left. */
    const char *dir = scratch("dir");
    char dirtmp[600];
    snprintf(dirtmp, sizeof dirtmp, "%s.tmp", dir);
    mkdir(dir, 0755);
    CHECK(tq_kv_cache_save(a, dir) == TQ_ERR_IO);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(stat(dirtmp, &sb) != 0);
    CHECK(tq_kv_cache_load(dir, &b) == TQ_ERR_IO && !b);
    rmdir(dir);
    CHECK(tq_kv_cache_load("/nonexistent-dir-tq/x.tqkv", &b) == TQ_ERR_IO);
    CHECK(tq_kv_cache_save(NULL, "x") == TQ_ERR_NULL);
    CHECK(tq_kv_cache_save(a, NULL) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_load(NULL, &b) == TQ_ERR_NULL);
    /* Capacity. */
    size_t n = tq_kv_cache_save_bound(a), w = 7;
    uint8_t *buf = malloc(n);
    CHECK(tq_kv_cache_save_memory(a, buf, n - 1, &w) == TQ_ERR_CAPACITY && w == 0);
    CHECK(tq_kv_cache_save_memory(a, NULL, n, &w) == TQ_ERR_NULL);
    CHECK(tq_kv_cache_save_bound(NULL) == 0);
    free(buf);
    tq_kv_cache_free(a);
}

/* ---- Defect tests (issue 14) -------------------------------------------------------------- */

/* Saving never follows or reuses a file at "<path>.tmp": a symlink there (to a file, or
 * dangling) and a stale regular file are left exactly as they were, the save succeeds, path
 * becomes a regular file holding the cache, and no temporary file is left behind. */
static void test_save_temp_not_followed(void) {
    char *dir = scratch_dir("save"), *other = scratch_dir("victim");
    CHECK(dir && other);
    if (!dir || !other) return;
    char path[600], tmp[600], victim[600], absent[600];
    snprintf(path, sizeof path, "%s/c.tqkv", dir);
    snprintf(tmp, sizeof tmp, "%s/c.tqkv.tmp", dir);
    snprintf(victim, sizeof victim, "%s/precious.txt", other);
    snprintf(absent, sizeof absent, "%s/never-created", other);
    static const char secret[] = "precious contents: must survive the save\n";
    CHECK(write_bytes(victim, secret, sizeof secret - 1));
    tq_kv_cache *a = build("turbo3", 1, 2, 64, 100, NULL), *b2 = build("q4_0", 2, 2, 64, 40, NULL);
    tq_kv_cache *b = NULL;
    CHECK(a && b2);
    struct stat sb;

    /* 1. <path>.tmp is a symlink to another file. */
    CHECK(symlink(victim, tmp) == 0);
    tq_status st = tq_kv_cache_save(a, path);
    CHECK_MSG(st == TQ_OK, "save with a .tmp symlink: %s", tq_error_name(st));
    CHECK_MSG(file_is(victim, secret, sizeof secret - 1), "the symlink's target was overwritten");
    CHECK_MSG(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "path is not a regular file");
    CHECK_MSG(lstat(tmp, &sb) == 0 && S_ISLNK(sb.st_mode), "the .tmp symlink was moved or removed");
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && b && same_cache(a, b, 2));
    tq_kv_cache_free(b);
    b = NULL;
    CHECK_MSG(count_entries(dir) == 2, "%d entries in the folder, want 2 (path, .tmp link)",
              count_entries(dir));
    CHECK(count_entries(other) == 1);

    /* 2. A dangling symlink: nothing is created at its target. */
    unlink(tmp);
    CHECK(symlink(absent, tmp) == 0);
    st = tq_kv_cache_save(b2, path);
    CHECK_MSG(st == TQ_OK, "save with a dangling .tmp symlink: %s", tq_error_name(st));
    CHECK_MSG(lstat(absent, &sb) != 0, "a file was created through the dangling symlink");
    CHECK(lstat(tmp, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && b && same_cache(b2, b, 2));
    tq_kv_cache_free(b);
    b = NULL;
    CHECK(count_entries(dir) == 2 && count_entries(other) == 1);

    /* 3. A regular file at <path>.tmp (a stale one, or someone else's): left untouched. */
    unlink(tmp);
    static const char stale[] = "someone else's file, not a temp file of ours";
    CHECK(write_bytes(tmp, stale, sizeof stale - 1));
    st = tq_kv_cache_save(a, path);
    CHECK_MSG(st == TQ_OK, "save with a .tmp file: %s", tq_error_name(st));
    CHECK_MSG(file_is(tmp, stale, sizeof stale - 1), "the existing .tmp file was changed");
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && b && same_cache(a, b, 2));
    tq_kv_cache_free(b);
    CHECK_MSG(count_entries(dir) == 2, "%d entries in the folder, want 2", count_entries(dir));
    CHECK(file_is(victim, secret, sizeof secret - 1));

    tq_kv_cache_free(a);
    tq_kv_cache_free(b2);
    remove_dir(dir);
    remove_dir(other);
    free(dir);
    free(other);
}

/* Failed saves leave no temporary file and the previous file byte for byte: the folder is a
 * regular file (creating fails), path is a folder (rename fails), a write fails (RLIMIT_FSIZE,
 * in a child process). A successful save leaves exactly the one file. Works as root. */
static void test_save_failures_leave_nothing(void) {
    char *dir = scratch_dir("fail");
    CHECK(dir != NULL);
    if (!dir) return;
    char path[600], notdir[600], inside[700], sub[600], big[600];
    snprintf(path, sizeof path, "%s/keep.tqkv", dir);
    snprintf(notdir, sizeof notdir, "%s/plainfile", dir);
    snprintf(inside, sizeof inside, "%s/x.tqkv", notdir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(big, sizeof big, "%s/big.tqkv", dir);
    tq_kv_cache *a = build("turbo3", 1, 2, 64, 100, NULL), *big_c = build("f16", 2, 2, 64, 300, NULL);
    CHECK(a && big_c);
    CHECK(tq_kv_cache_save(a, path) == TQ_OK);
    CHECK_MSG(count_entries(dir) == 1, "after a save: %d entries, want 1", count_entries(dir));
    size_t n = 0;
    uint8_t *img = read_file(path, &n);
    CHECK(img && n == tq_kv_cache_save_bound(a));

    CHECK(write_bytes(notdir, "x", 1));
    CHECK(tq_kv_cache_save(a, inside) == TQ_ERR_IO);
    CHECK(mkdir(sub, 0755) == 0);
    CHECK(tq_kv_cache_save(a, sub) == TQ_ERR_IO);
    struct stat sb;
    CHECK(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && count_entries(sub) == 0);
    CHECK_MSG(count_entries(dir) == 3, "after failed saves: %d entries, want 3 (no temp files)",
              count_entries(dir));

    /* A write that fails half way: the previous file at big stays as it was. */
    CHECK(tq_kv_cache_save(a, big) == TQ_OK);
    size_t need = tq_kv_cache_save_bound(big_c);
    save_args sa = {big_c, big, (rlim_t)(need / 2)};
    int code = run_in_child(child_save_fsize, &sa, 60.0, NULL);
    CHECK_MSG(code == TQ_ERR_IO, "save past RLIMIT_FSIZE: %s", child_result(code));
    CHECK_MSG(img && file_is(big, img, n), "the previous file changed after a failed write");
    CHECK_MSG(count_entries(dir) == 4, "after a failed write: %d entries, want 4 (no temp file)",
              count_entries(dir));
    CHECK(count_prefixed(dir, "big.tqkv.tmp") == 0 && count_prefixed(dir, "keep.tqkv.tmp") == 0);
    free(img);
    tq_kv_cache_free(a);
    tq_kv_cache_free(big_c);
    remove_dir(dir);
    free(dir);
}

/* Loading a FIFO with no writer, a folder or a character device returns TQ_ERR_IO at once
 * (run in a child process with a time limit, so a loader that blocks in open() fails). */
static void test_load_not_regular(void) {
    char *dir = scratch_dir("fifo");
    CHECK(dir != NULL);
    if (!dir) return;
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/pipe.tqkv", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    double t = 0;
    int code = run_in_child(child_load, fifo, 10.0, &t);
    CHECK_MSG(code == TQ_ERR_IO, "load of a FIFO without a writer: %s after %.1f s",
              child_result(code), t);
    tq_kv_cache_config e;
    tq_kv_cache_config_init(&e, 1, 2, 64, 64);
    tq_kv_cache *b = NULL;
    code = run_in_child(child_load, dir, 10.0, &t);
    CHECK_MSG(code == TQ_ERR_IO, "load of a folder: %s", child_result(code));
    CHECK(tq_kv_cache_load(dir, &b) == TQ_ERR_IO && !b);
    CHECK(tq_kv_cache_load_expect(dir, &e, &b) == TQ_ERR_IO && !b);
    if (access("/dev/null", R_OK) == 0) CHECK(tq_kv_cache_load("/dev/null", &b) == TQ_ERR_IO && !b);
    remove_dir(dir);
    free(dir);
}

/* A valid file with a huge sparse tail is refused from its header and scheme, before the rest
 * is read: TQ_ERR_FORMAT at once, without allocating its size (in a child process under an
 * 8 GiB address-space limit, so a loader that allocates the file's size gets TQ_ERR_NOMEM; under
 * ASan, whose allocator refuses anything over 1 TiB, the file is larger than that). */
static void test_load_size_bound(void) {
    char *dir = scratch_dir("huge");
    CHECK(dir != NULL);
    if (!dir) return;
    char path[600];
    snprintf(path, sizeof path, "%s/huge.tqkv", dir);
    tq_kv_cache *a = build("turbo3", 2, 2, 64, 300, NULL);
    CHECK(a != NULL);
    CHECK(tq_kv_cache_save(a, path) == TQ_OK);
    size_t n = 0;
    uint8_t *img = read_file(path, &n);
    CHECK(img != NULL);
    tq_kv_cache *b = NULL;

    /* A small tail: rejected by the file loader and the memory loader alike. */
    uint8_t *p = calloc(n + (1u << 16), 1);
    memcpy(p, img, n);
    CHECK(tq_kv_cache_load_memory(p, n + (1u << 16), &b) == TQ_ERR_FORMAT && !b);
    CHECK(write_bytes(path, p, n + (1u << 16)));
    CHECK(tq_kv_cache_load(path, &b) == TQ_ERR_FORMAT && !b);

    /* A sparse tail of terabytes (no disk used). */
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
    off_t sizes[] = {(off_t)1 << 43, (off_t)1 << 41, (off_t)1 << 36};
    off_t size = 0;
    for (size_t k = 0; fd >= 0 && k < sizeof sizes / sizeof *sizes && !size; k++)
        if ((!TEST_ASAN || sizes[k] > ((off_t)1 << 40)) && ftruncate(fd, sizes[k]) == 0)
            size = sizes[k];
    signal(SIGXFSZ, old);
    if (fd >= 0) close(fd);
    if (size) {
        tq_kv_cache_config e = test_cache_config(a);
        for (int with_expect = 0; with_expect < 2; with_expect++) {
            double t = 0;
            load_args la = {path, with_expect ? &e : NULL};
            int code = run_in_child(child_load_capped, &la, 60.0, &t);
            printf("     %.0f GiB file (a valid cache of %zu bytes, then a sparse tail)%s: %s in %.3f s\n",
                   (double)size / (1 << 30), n, with_expect ? ", _expect" : "", child_result(code), t);
            fflush(stdout);
            CHECK_MSG(code == TQ_ERR_FORMAT, "huge file: %s", child_result(code));
        }
    } else {
        PART_SKIPPED("the file system under %s refuses a sparse file over 1 TiB", dir);
    }

    /* A header whose token count is far below what the layers hold, and one far above: the
     * size is outside what those counts allow. */
    memcpy(p, img, n);
    wr64(p + 40, 1);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    memcpy(p, img, n);
    wr64(p + 40, 1ull << 40);
    fix_crcs(p, n);
    CHECK(tq_kv_cache_load_memory(p, n, &b) == TQ_ERR_FORMAT && !b);
    /* The file itself, unchanged, still loads (by path and from memory). */
    CHECK(write_bytes(path, img, n));
    CHECK(tq_kv_cache_load(path, &b) == TQ_OK && b && same_cache(a, b, 2));
    tq_kv_cache_free(b);
    free(p);
    free(img);
    tq_kv_cache_free(a);
    remove_dir(dir);
    free(dir);
}

/* tq_kv_cache_load returns what tq_kv_cache_load_memory returns on the same bytes: the valid
 * golden files, every truncation of the golden cache, single-bit flips, trailing bytes. */
static void test_load_file_equals_memory(void) {
    char *dir = scratch_dir("eq");
    CHECK(dir != NULL);
    if (!dir) return;
    char path[600];
    snprintf(path, sizeof path, "%s/e.tqkv", dir);
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n);
    CHECK(img != NULL);
    tq_kv_cache_config e = test_cache_config(c);
    uint8_t *p = malloc(n + 64);
    int bad = 0, cases = 0;
    for (size_t k = 0; img && k < n + 3 * n / 7 + 40; k++) {
        size_t len = n;
        memcpy(p, img, n);
        if (k < n) {
            len = k; /* every truncation */
        } else if (k < n + 3 * n / 7) {
            size_t bit = (k - n) * 7 * 8 / 3 + (k % 8); /* a spread of single-bit flips */
            p[(bit / 8) % n] ^= (uint8_t)(1u << (bit % 8));
        } else {
            len = n + (k - n - 3 * n / 7) + 1; /* trailing bytes */
            memset(p + n, (int)k, len - n);
        }
        tq_kv_cache *x = NULL, *y = NULL;
        tq_status sm = tq_kv_cache_load_memory(p, len, &x);
        unlink(path); /* a new file each time: ext4 flushes a file truncated and rewritten */
        tq_status sf = write_bytes(path, p, len) ? tq_kv_cache_load(path, &y) : TQ_ERR_IO;
        cases++;
        if (sm != sf || (sm == TQ_OK) != (x != NULL) || (sf == TQ_OK) != (y != NULL)) {
            if (bad++ < 5) fprintf(stderr, "case %zu (%zu bytes): memory %s, file %s\n", k, len,
                                   tq_error_name(sm), tq_error_name(sf));
        }
        tq_kv_cache_free(x);
        tq_kv_cache_free(y);
        x = y = NULL;
        tq_status sme = tq_kv_cache_load_memory_expect(p, len, &e, &x);
        tq_status sfe = tq_kv_cache_load_expect(path, &e, &y);
        if (sme != sfe) {
            if (bad++ < 5) fprintf(stderr, "case %zu: expect: memory %s, file %s\n", k,
                                   tq_error_name(sme), tq_error_name(sfe));
        }
        tq_kv_cache_free(x);
        tq_kv_cache_free(y);
    }
    CHECK_MSG(bad == 0, "%d of %d cases differ", bad, cases);
    const char *golden[] = {GOLDEN, GOLDEN_V6, GOLDEN_V5, GOLDEN_V4, GOLDEN_V3, GOLDEN_V2, GOLDEN_V1, GOLDEN_V3_MEAN8};
    for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++) {
        tq_kv_cache *x = NULL;
        CHECK_MSG(tq_kv_cache_load(golden[g], &x) == TQ_OK && x, "%s", golden[g]);
        tq_kv_cache_free(x);
    }
    free(p);
    free(img);
    tq_kv_cache_free(c);
    remove_dir(dir);
    free(dir);
}

/* The bits fields of a layer scheme record are exactly what the writer writes: 0 (bit pattern
 * 0x00000000) for the plain formats, so −0.0 there is TQ_ERR_FORMAT (it used to load and
 * re-save as +0.0, which broke the load → save identity; fuzz/corpus/cachefile holds such a
 * file). Query statistics of −0.0 (no encoder writes them) are TQ_ERR_CORRUPT. */
static void test_negative_zero_fields(void) {
    static const char *plain[] = {"f16", "q4_0", "q8_0", "turbo0v4", "turbo4v0", "kq8_0v4",
                                  "q4_0r", "kq8_0rv4"};
    for (size_t s = 0; s < sizeof plain / sizeof *plain; s++) {
        tq_kv_cache *c = build(plain[s], 2, 2, 64, 40, NULL);
        CHECK_MSG(c != NULL, "%s", plain[s]);
        if (!c) continue;
        size_t n = 0;
        uint8_t *img = save_image(c, &n), *p = malloc(n);
        /* The scheme's layer and edge records, then each layer's record. */
        size_t recs[] = {64 + 8, 64 + 8 + 16, 64 + 8 + 64, 64 + 8 + 64 + 16};
        int flipped = 0;
        for (size_t r = 0; r < 4; r++)
            for (int field = 8; field <= 12; field += 4) {
                if (rd32(img + recs[r] + (size_t)field) != 0) continue; /* a TurboQuant width */
                memcpy(p, img, n);
                wr32(p + recs[r] + (size_t)field, 0x80000000u); /* −0.0f */
                fix_crcs(p, n);
                tq_kv_cache *b = NULL;
                tq_status st = tq_kv_cache_load_memory(p, n, &b);
                CHECK_MSG(st == TQ_ERR_FORMAT && !b, "%s: −0.0 at record %zu byte %d: %s", plain[s],
                          r, field, tq_error_name(st));
                tq_kv_cache_free(b);
                flipped++;
            }
        CHECK(flipped >= 3);
        free(p);
        free(img);
        tq_kv_cache_free(c);
    }
    /* The corpus files that made fuzz_cachefile abort. */
    const char *corpus[] = {"fuzz/corpus/cachefile/f16_negzero_bits.tqkv",
                            "fuzz/corpus/cachefile/q4_0_negzero_bits.tqkv"};
    for (size_t k = 0; k < 2; k++) {
        size_t gn = 0;
        uint8_t *g = read_file(corpus[k], &gn);
        CHECK_MSG(g != NULL, "missing %s", corpus[k]);
        if (!g) continue;
        uint8_t *h = malloc(gn);
        memcpy(h, g, gn);
        fix_crcs(h, gn);
        CHECK_MSG(memcmp(h, g, gn) == 0, "%s: a checksum is wrong", corpus[k]); /* only the −0 */
        tq_kv_cache *b = NULL;
        tq_status st = tq_kv_cache_load_memory(g, gn, &b);
        CHECK_MSG(st == TQ_ERR_FORMAT && !b, "%s: %s", corpus[k], tq_error_name(st));
        tq_kv_cache_free(b);
        b = NULL;
        st = tq_kv_cache_load(corpus[k], &b);
        CHECK_MSG(st == TQ_ERR_FORMAT && !b, "%s by path: %s", corpus[k], tq_error_name(st));
        tq_kv_cache_free(b);
        b = NULL;
        /* With +0.0 there it is a valid file. */
        for (size_t r = 72; r + 16 <= 72 + rd32(h + 48); r += 16)
            for (size_t f = 8; f <= 12; f += 4)
                if (rd32(h + r + f) == 0x80000000u) wr32(h + r + f, 0);
        fix_crcs(h, gn);
        CHECK_MSG(tq_kv_cache_load_memory(h, gn, &b) == TQ_OK && b, "%s with +0.0", corpus[k]);
        tq_kv_cache_free(b);
        free(h);
        free(g);
    }
    /* −0.0 query statistics in the golden cache's layer 1 (see test_hostile for the layout). */
    tq_kv_cache *c = golden_cache();
    size_t n = 0;
    uint8_t *img = save_image(c, &n), *p = malloc(n);
    size_t sblk = layer_at(img, 1) + 16 + 24 + 2 * 16 * 4;
    size_t offs[] = {sblk, sblk + 8 + 8 * 5};
    for (size_t k = 0; k < 2; k++) {
        memcpy(p, img, n);
        wr64(p + offs[k], 0x8000000000000000ull);
        fix_crcs(p, n);
        tq_kv_cache *b = NULL;
        tq_status st = tq_kv_cache_load_memory(p, n, &b);
        CHECK_MSG(st == TQ_ERR_CORRUPT && !b, "−0.0 statistic %zu: %s", k, tq_error_name(st));
        tq_kv_cache_free(b);
    }
    free(p);
    free(img);
    tq_kv_cache_free(c);
}

/* TQ_KV_CACHE_FILE_VERSION is the version the writer writes (u32 at offset 8), and the
 * versions the loader takes are 1 … TQ_KV_CACHE_FILE_VERSION. */
static void test_version_macro(void) {
    const char *path = scratch("version.tqkv");
    tq_kv_cache *c = build("k=q4_0r:v=q8_0r:window=4:batch=8", 2, 2, 16, 20, NULL);
    CHECK(tq_kv_cache_save(c, path) == TQ_OK);
    size_t n = 0;
    uint8_t *f = read_file(path, &n);
    CHECK(f && n >= 64);
    if (f && n >= 64) {
        CHECK_MSG(rd32(f + 8) == TQ_KV_CACHE_FILE_VERSION,
                  "the writer writes version %u, TQ_KV_CACHE_FILE_VERSION is %d", rd32(f + 8),
                  TQ_KV_CACHE_FILE_VERSION);
        tq_kv_cache *b = NULL;
        for (uint32_t v = 0; v <= TQ_KV_CACHE_FILE_VERSION + 1; v++) {
            wr32(f + 8, v);
            fix_crcs(f, n);
            tq_status st = tq_kv_cache_load_memory(f, n, &b);
            tq_kv_cache_free(b);
            b = NULL;
            /* Older versions are read, but this cache uses q4_0r / q8_0r (version 5) and its
             * scheme section holds the layer windows (version 4); version 6 added only a
             * header flag (zero here). */
            tq_status want = v == 0 || v > TQ_KV_CACHE_FILE_VERSION ? TQ_ERR_VERSION
                             : v >= 5                               ? TQ_OK
                                                                    : TQ_ERR_FORMAT;
            CHECK_MSG(st == want, "version %u: %s", v, tq_error_name(st));
        }
    }
    size_t mn = 0;
    uint8_t *m = save_image(c, &mn);
    CHECK(m && rd32(m + 8) == TQ_KV_CACHE_FILE_VERSION);
    free(m);
    free(f);
    unlink(path);
    tq_kv_cache_free(c);
}

/* Layer windows persist (version 4): save → load keeps them (get_config), the loaded cache goes
 * on recycling old pages exactly as the saved one, tq_kv_cache_convert keeps them, _expect
 * compares them, and a window beyond 2^30 is refused by create and by the loader. */
static void test_windows_persist(void) {
    const size_t win[2] = {0, 40};
    tq_kv_cache *a = build_w("turbo3:batch=16", 2, 2, 64, 200, NULL, win), *b = NULL;
    CHECK(a != NULL);
    if (!a) return;
    tq_kv_cache_config ca = test_cache_config(a);
    CHECK(ca.layer_windows && ca.layer_windows[0] == 0 && ca.layer_windows[1] == 40);
    size_t n = 0;
    uint8_t *img = save_image(a, &n);
    CHECK(img && tq_kv_cache_load_memory(img, n, &b) == TQ_OK && b);
    if (!img || !b) return;
    CHECK(same_cache(a, b, 4));
    tq_kv_cache_config cb = test_cache_config(b);
    CHECK(cb.layer_windows && cb.layer_windows[1] == 40 && cb.layer_windows[0] == 0);
    /* Converting keeps them too. */
    tq_kv_cache *cv = NULL;
    CHECK(tq_kv_cache_convert(b, &cb.scheme, &cv) == TQ_OK && cv && same_windows(cv, a));
    tq_kv_cache_free(cv);
    /* _expect: the same windows load, others do not; no expected windows is no check. */
    tq_kv_cache *x = NULL;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &ca, &x) == TQ_OK && x);
    tq_kv_cache_free(x);
    x = NULL;
    const size_t other[2] = {0, 41};
    tq_kv_cache_config e = ca;
    e.layer_windows = other;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e, &x) == TQ_ERR_MISMATCH && !x);
    e.layer_windows = NULL;
    CHECK(tq_kv_cache_load_memory_expect(img, n, &e, &x) == TQ_OK && x);
    tq_kv_cache_free(x);
    x = NULL;
    /* The windowed layer goes on recycling after the load, as the saved cache does. */
    for (uint32_t t = 0; t < 600; t++) CHECK(append_both(a, b, 7000u + t));
    size_t da = tq_kv_cache_dropped_length(a, 1);
    CHECK(da > 0 && da == tq_kv_cache_dropped_length(b, 1) && tq_kv_cache_dropped_length(b, 0) == 0);
    tq_kv_memory ma, mb;
    CHECK(tq_kv_cache_memory(a, &ma, sizeof ma) == TQ_OK && tq_kv_cache_memory(b, &mb, sizeof mb) == TQ_OK);
    CHECK(ma.tokens == mb.tokens && ma.data_bytes == mb.data_bytes &&
          ma.allocated_bytes == mb.allocated_bytes);
    float q[4 * 64], o1[4 * 64], o2[4 * 64];
    fill(q, 4 * 64, 31u, 0);
    tq_attn_params p;
    tq_attn_params_init(&p, 64);
    p.sliding_window = 40;
    size_t wb = tq_kv_attention_workspace_size(a, 1, 4, 1, 1);
    void *w = malloc(wb);
    CHECK(tq_kv_attention(a, 1, q, 4, 1, &p, NULL, w, wb, o1, SIZE_MAX) == TQ_OK);
    CHECK(tq_kv_attention(b, 1, q, 4, 1, &p, NULL, w, wb, o2, SIZE_MAX) == TQ_OK);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    free(w);
    /* A window beyond 2^30: refused by create, and in a file (checksums valid). */
    const size_t huge[2] = {0, ((size_t)1 << 30) + 1};
    tq_kv_cache_config h;
    tq_kv_cache_config_init(&h, 2, 2, 64, 64);
    h.layer_windows = huge;
    CHECK(tq_kv_cache_create(&x, &h) == TQ_ERR_INVALID && !x);
    wr64(img + 64 + 8 + 64 + 2 * 16 + 8, ((uint64_t)1 << 30) + 1);
    fix_crcs(img, n);
    CHECK(tq_kv_cache_load_memory(img, n, &x) == TQ_ERR_FORMAT && !x);
    wr64(img + 64 + 8 + 64 + 2 * 16 + 8, (uint64_t)1 << 30);
    fix_crcs(img, n);
    CHECK(tq_kv_cache_load_memory(img, n, &x) == TQ_OK && x);
    tq_kv_cache_free(x);
    free(img);
    tq_kv_cache_free(a);
    tq_kv_cache_free(b);
}

int main(void) {
    RUN_TEST(test_roundtrip_schemes);
    RUN_TEST(test_roundtrip_rope_pairs);
    RUN_TEST(test_roundtrip_rope_freqs);
    RUN_TEST(test_roundtrip_window_and_edges);
    RUN_TEST(test_roundtrip_file);
    RUN_TEST(test_golden);
    RUN_TEST(test_truncation);
    RUN_TEST(test_bit_flips);
    RUN_TEST(test_magic_version);
    RUN_TEST(test_mismatch);
    RUN_TEST(test_hostile);
    RUN_TEST(test_crash_temp_file);
    RUN_TEST(test_io_errors);
    RUN_TEST(test_save_temp_not_followed);
    RUN_TEST(test_save_failures_leave_nothing);
    RUN_TEST(test_load_not_regular);
    RUN_TEST(test_load_size_bound);
    RUN_TEST(test_load_file_equals_memory);
    RUN_TEST(test_negative_zero_fields);
    RUN_TEST(test_version_macro);
    RUN_TEST(test_windows_persist);
    return test_report();
}

/*
 * Cache files: saving (doc/cachefile.md). The writer streams the sections through a sink (a
 * caller buffer, or a file descriptor through a buffer) and never builds the file in memory.
 * Saves to a path go to a new temporary file "<path>.tmp.XXXXXX" (created exclusively, never an
 * existing file or link), are fsync'd and renamed over <path>, so a crash at any point leaves
 * either the old file or the new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cachefile_internal.h"
#include "internal.h"

/* 1 if a windowed layer has dropped positions: the file format holds whole histories. */
static int has_dropped(const tq_kv_cache *c) {
    for (int i = 0; i < c->cfg.n_layers; i++)
        if (c->layers[i].dropped) return 1;
    return 0;
}

size_t tq_kv_cache_save_bound(const tq_kv_cache *c) {
    if (!c || has_dropped(c)) return 0;
    size_t n = CF_HEADER_BYTES + CF_SECTION_HEAD +
               tq_cf_scheme_payload(c->cfg.n_layers, CF_VERSION, c->cfg.key_rope_freqs ? CF_FLAG_FREQS : 0,
                                    c->cfg.head_dim_k) +
               CF_CRC;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        n = tq_cf_add_sat(n, CF_LAYER_HEAD + CF_CRC);
        n = tq_cf_add_sat(n, tq_cf_layer_payload(c, i, l->len, l->n_comp, tq_key_transform_n_fast(l->kt)));
    }
    return n == SIZE_MAX ? 0 : n;
}

/* ---------------------------------------------------------------------------------------- */
/* Writing                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* Where bytes go: a caller buffer (fd < 0) or a file descriptor through a buffer. The CRC
 * register runs over everything written since the last crc_begin. */
typedef struct sink {
    uint8_t *buf;
    size_t cap, pos;
    int fd;
    tq_status st;
    size_t total;
    const tq_cf_crc *crc;
    uint32_t reg;
} sink;

static void sink_flush(sink *s) {
    if (s->fd < 0 || s->st) return;
    size_t off = 0;
    while (off < s->pos) {
        ssize_t w = write(s->fd, s->buf + off, s->pos - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            s->st = TQ_ERR_IO;
            return;
        }
        off += (size_t)w;
    }
    s->pos = 0;
}

static void sink_write(sink *s, const void *data, size_t n) {
    const uint8_t *p = data;
    if (s->st) return;
    s->reg = tq_cf_crc_update(s->crc, s->reg, p, n);
    s->total += n;
    while (n) {
        if (s->pos == s->cap) {
            if (s->fd < 0) {
                s->st = TQ_ERR_CAPACITY;
                return;
            }
            sink_flush(s);
            if (s->st) return;
        }
        size_t k = s->cap - s->pos < n ? s->cap - s->pos : n;
        memcpy(s->buf + s->pos, p, k);
        s->pos += k;
        p += k;
        n -= k;
    }
}

static void sink_put(void *ctx, const void *p, size_t n) { sink_write(ctx, p, n); }

static void crc_begin(sink *s) { s->reg = 0xFFFFFFFFu; }
static void crc_end(sink *s) {
    uint8_t b[4];
    tq_cf_put_u32(b, s->reg ^ 0xFFFFFFFFu);
    sink_write(s, b, 4);
}

/* One tensor's records of n tokens (token-major, heads inside) of a compressed page run. F16
 * records are native uint16 in memory and little-endian in the file. */
static void write_records(sink *s, const tq_kv_cache *c, const tq_kv_layer *l, int is_v) {
    const tq_kv_tensor *x = is_v ? &l->v : &l->k;
    int H = c->cfg.n_kv_heads;
    uint8_t tmp[2 * TQ_MAX_DIM];
    for (size_t t = 0; t < l->n_comp; t++)
        for (int h = 0; h < H; h++) {
            const uint8_t *r = is_v ? tq_kv_vrec(c, l, t, h) : tq_kv_krec(c, l, t, h);
            if (x->format == TQ_KV_F16) {
                for (int i = 0; i < x->dim; i++) {
                    uint16_t v;
                    memcpy(&v, r + 2 * i, 2);
                    tq_store_u16(tmp + 2 * i, v);
                }
                r = tmp;
            }
            sink_write(s, r, x->rec_bytes);
        }
}

/* The exact fp16 K or V of tokens [from, to): raw tokens, or (v5) the sink store's. */
static void write_raw(sink *s, const tq_kv_cache *c, const tq_kv_layer *l, int is_v, size_t from,
                      size_t to) {
    int H = c->cfg.n_kv_heads, d = is_v ? c->cfg.head_dim_v : c->cfg.head_dim_k;
    uint8_t tmp[2 * TQ_MAX_DIM];
    for (size_t t = from; t < to; t++)
        for (int h = 0; h < H; h++) {
            const uint16_t *r = is_v ? tq_kv_vexact(c, l, t, h) : tq_kv_kexact(c, l, t, h);
            for (int i = 0; i < d; i++) tq_store_u16(tmp + 2 * i, r[i]);
            sink_write(s, tmp, (size_t)d * 2);
        }
}

static tq_status write_cache(const tq_kv_cache *c, sink *s) {
    const tq_kv_cache_config *cfg = &c->cfg;
    const tq_kv_scheme *sc = &cfg->scheme;
    uint8_t b[CF_SCHEME_FIXED];
    uint64_t n_tokens = 0;
    const uint32_t fr = cfg->key_rope_freqs ? CF_FLAG_FREQS : 0u;
    const uint32_t payload = (uint32_t)tq_cf_scheme_payload(cfg->n_layers, CF_VERSION, fr, cfg->head_dim_k);
    for (int i = 0; i < cfg->n_layers; i++) n_tokens += c->layers[i].len;

    /* Header. */
    uint8_t h[CF_HEADER_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, tq_cf_magic, 8);
    tq_cf_put_u32(h + 8, CF_VERSION);
    tq_cf_put_u32(h + 12, CF_HEADER_BYTES);
    tq_cf_put_u32(h + 16, (uint32_t)cfg->n_layers);
    tq_cf_put_u32(h + 20, (uint32_t)cfg->n_kv_heads);
    tq_cf_put_u32(h + 24, (uint32_t)cfg->head_dim_k);
    tq_cf_put_u32(h + 28, (uint32_t)cfg->head_dim_v);
    tq_cf_put_u64(h + 32, sc->seed);
    tq_cf_put_u64(h + 40, n_tokens);
    tq_cf_put_u32(h + 48, payload);
    tq_cf_put_u32(h + 52, (sc->trellis ? CF_FLAG_TRELLIS : 0u) |
                              (sc->trellis == TQ_TRELLIS_TWO_STATE ? CF_FLAG_TRELLIS_TWO_STATE : 0u) |
                              (uint32_t)cfg->key_rope_pairs << CF_FLAG_PAIRS_SHIFT | fr); /* v6, v7, v9, v11 */
    tq_cf_put_u32(h + 56, (uint32_t)sc->sink); /* v5 */
    crc_begin(s);
    sink_write(s, h, 60);
    crc_end(s);

    /* Scheme section. */
    crc_begin(s);
    memcpy(b, tq_cf_tag_scheme, 4);
    tq_cf_put_u32(b + 4, payload);
    sink_write(s, b, CF_SECTION_HEAD);
    tq_cf_put_layer_scheme(b, &sc->layer);
    tq_cf_put_layer_scheme(b + 16, &sc->edge);
    tq_cf_put_u32(b + 32, (uint32_t)sc->edge_first);
    tq_cf_put_u32(b + 36, (uint32_t)sc->edge_last);
    tq_cf_put_u32(b + 40, (uint32_t)sc->raw_window);
    tq_cf_put_u32(b + 44, (uint32_t)sc->batch);
    tq_cf_put_u32(b + 48, (uint32_t)sc->quantized_kv_start);
    tq_cf_put_u32(b + 52, sc->prefill_raw ? 1u : 0u);
    tq_cf_put_u64(b + 56, sc->seed);
    sink_write(s, b, CF_SCHEME_FIXED);
    for (int i = 0; i < cfg->n_layers; i++) {
        tq_cf_put_layer_scheme(b, &c->layers[i].scheme);
        sink_write(s, b, CF_LAYER_SCHEME);
    }
    for (int i = 0; i < cfg->n_layers; i++) { /* v4: the layer windows */
        tq_cf_put_u64(b, c->layers[i].window);
        sink_write(s, b, CF_LAYER_WINDOW);
    }
    /* v9: the keys' RoPE angles, (n_layers, head_dim_k / 2) f32 */
    for (size_t j = 0; fr && j < (size_t)cfg->n_layers * (size_t)(cfg->head_dim_k / 2); j++) {
        tq_store_f32(b, cfg->key_rope_freqs[j]);
        sink_write(s, b, 4);
    }
    crc_end(s);

    /* Layer sections. */
    for (int i = 0; i < cfg->n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        crc_begin(s);
        memcpy(b, tq_cf_tag_layer, 4);
        tq_cf_put_u32(b + 4, (uint32_t)i);
        tq_cf_put_u64(b + 8, tq_cf_layer_payload(c, i, l->len, l->n_comp, tq_key_transform_n_fast(l->kt)));
        sink_write(s, b, CF_LAYER_HEAD);
        memset(b, 0, CF_LAYER_FIXED);
        tq_cf_put_u64(b, l->len);
        tq_cf_put_u64(b + 8, l->n_comp);
        b[16] = l->compress_started ? 1 : 0;
        b[17] = (uint8_t)tq_key_transform_mean_set(l->kt);
        b[18] = (uint8_t)tq_key_transform_has_mean(l->kt);
        b[19] = (uint8_t)tq_key_transform_scale_set(l->kt);
        uint16_t fast[TQ_KEY_MEAN_FAST];
        int nf = tq_key_transform_fast_pairs(l->kt, fast);
        b[20] = (uint8_t)nf; /* v10 */
        b[21] = (uint8_t)(l->rho && l->rho_set); /* v12 */
        sink_write(s, b, CF_LAYER_FIXED);
        tq_key_transform_write_state(l->kt, sink_put, s);
        for (int k = 0; k < nf; k++) {
            tq_store_u16(b, fast[k]);
            sink_write(s, b, 2);
        }
        for (int hd = 0; l->rho && hd < cfg->n_kv_heads; hd++) { /* v12: ρ per head */
            tq_store_f32(b, l->rho[hd]);
            sink_write(s, b, 4);
        }
        write_records(s, c, l, 0);
        write_records(s, c, l, 1);
        write_raw(s, c, l, 0, l->n_comp, l->len);
        write_raw(s, c, l, 1, l->n_comp, l->len);
        /* v5: the sink store's positions (tq_cf_layer_payload counts them). */
        size_t ns = tq_kv_sink_len(c, l);
        if (ns != tq_kv_sink_held(c, l, l->n_comp)) return TQ_ERR_STATE; /* not reached */
        write_raw(s, c, l, 0, 0, ns);
        write_raw(s, c, l, 1, 0, ns);
        crc_end(s);
    }
    return s->st;
}

tq_status tq_kv_cache_save_memory(const tq_kv_cache *c, void *dst, size_t capacity,
                                  size_t *written) {
    if (written) *written = 0;
    if (!c || !dst) return TQ_ERR_NULL;
    if (has_dropped(c)) return TQ_ERR_STATE;
    size_t need = tq_kv_cache_save_bound(c);
    if (need == 0 || capacity < need) return TQ_ERR_CAPACITY;
    tq_cf_crc *ct = malloc(sizeof *ct);
    if (!ct) return TQ_ERR_NOMEM;
    tq_cf_crc_init(ct);
    sink s = {.buf = dst, .cap = capacity, .fd = -1, .crc = ct};
    tq_status st = write_cache(c, &s);
    free(ct);
    if (!st && written) *written = s.total;
    return st;
}

/* fsync of the folder holding path, so that the rename itself is durable. */
static int sync_dir_of(const char *path) {
    size_t n = strlen(path);
    while (n && path[n - 1] != '/') n--;
    char *dir = malloc(n ? n + 1 : 2);
    if (!dir) return -1;
    if (n) {
        memcpy(dir, path, n);
        dir[n] = 0;
    } else {
        strcpy(dir, ".");
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int r = fsync(fd);
    /* Some file systems refuse fsync on a folder; the data itself is already synced. */
    if (r && (errno == EINVAL || errno == EBADF)) r = 0;
    close(fd);
    return r;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

#define CF_TMP_SUFFIX ".tmp."
#define CF_TMP_RANDOM 6
#define CF_TMP_TRIES 100

/* Creates the temporary file of a save: tmp (room for strlen(path) + 12 bytes) gets
 * "<path>.tmp.XXXXXX", XXXXXX random in [A-Za-z0-9], created with O_CREAT | O_EXCL |
 * O_NOFOLLOW, so it is always a new file of ours: never an existing file, never through a
 * symbolic link (a link, even a dangling one, at the name is EEXIST and another name is
 * tried). Mode 0666 less the umask, as for any new file (fopen's). Returns the descriptor, or
 * -1 with nothing created. */
static int create_temp(const char *path, size_t pn, char *tmp) {
    static const char az[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    struct timespec ts = {0, 0};
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                    mix64((uint64_t)getpid() << 20 ^ (uint64_t)(uintptr_t)&ts) ^
                    mix64((uint64_t)(uintptr_t)path);
    memcpy(tmp, path, pn);
    memcpy(tmp + pn, CF_TMP_SUFFIX, sizeof CF_TMP_SUFFIX - 1);
    char *x = tmp + pn + sizeof CF_TMP_SUFFIX - 1;
    x[CF_TMP_RANDOM] = 0;
    for (int k = 0; k < CF_TMP_TRIES; k++) {
        uint64_t r = mix64(seed + (uint64_t)k);
        for (int i = 0; i < CF_TMP_RANDOM; i++, r /= 62) x[i] = az[r % 62];
        int fd;
        do {
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        } while (fd < 0 && errno == EINTR);
        if (fd >= 0) return fd;
        if (errno != EEXIST) return -1;
    }
    return -1;
}

tq_status tq_kv_cache_save(const tq_kv_cache *c, const char *path) {
    if (!c || !path) return TQ_ERR_NULL;
    if (!*path) return TQ_ERR_IO;
    if (tq_kv_cache_save_bound(c) == 0) return TQ_ERR_STATE;
    size_t pn = strlen(path);
    char *tmp = malloc(pn + sizeof CF_TMP_SUFFIX + CF_TMP_RANDOM);
    tq_cf_crc *ct = malloc(sizeof *ct);
    uint8_t *buf = malloc(1u << 20);
    tq_status st = TQ_OK;
    int fd = -1, created = 0; /* created: tmp names a file of ours to remove on failure */
    if (!tmp || !ct || !buf) {
        st = TQ_ERR_NOMEM;
        goto done;
    }
    tq_cf_crc_init(ct);
    fd = create_temp(path, pn, tmp);
    if (fd < 0) {
        st = TQ_ERR_IO;
        goto done;
    }
    created = 1;
    sink s = {.buf = buf, .cap = 1u << 20, .fd = fd, .crc = ct};
    st = write_cache(c, &s);
    if (!st) sink_flush(&s), st = s.st;
    if (!st && fsync(fd) != 0) st = TQ_ERR_IO;
    if (close(fd) != 0 && !st) st = TQ_ERR_IO;
    fd = -1;
    if (st) goto done;
    if (rename(tmp, path) != 0) {
        st = TQ_ERR_IO;
        goto done;
    }
    created = 0; /* the file is path now */
    if (sync_dir_of(path) != 0) st = TQ_ERR_IO;
done:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    free(tmp);
    free(ct);
    free(buf);
    return st;
}

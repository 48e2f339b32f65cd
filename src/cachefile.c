/*
 * Cache files: save and restore a tq_kv_cache (doc/cachefile.md, format version 3; versions 1
 * and 2, which predate the key scale and the key split, still load).
 *
 * A file is a fixed 64-byte header, a scheme section and one section per layer, each with its
 * own CRC32C. The writer streams sections through a sink (a caller buffer or a buffered file
 * descriptor) and never builds the file in memory; the reader validates every byte it uses
 * before it allocates in proportion to it, so a hostile count in a small file costs nothing.
 * Saves to a path go to a new temporary file "<path>.tmp.XXXXXX" (created exclusively, never an
 * existing file or link), are fsync'd and renamed over <path>, so a crash at any point leaves
 * either the old file or the new one. Loading a path checks the header and the scheme section
 * against the file's size before it reads (or allocates for) the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "kvcache_internal.h"

/* The version the writer writes is the public one; the layout this file reads and writes is
 * version 3, so moving the public macro without this code fails to compile. */
#define CF_VERSION ((uint32_t)TQ_KV_CACHE_FILE_VERSION)
_Static_assert(TQ_KV_CACHE_FILE_VERSION == 3, "src/cachefile.c writes the version 3 layout");
#define CF_VERSION_MIN 1u
#define CF_HEADER_BYTES 64u
#define CF_SCHEME_FIXED 64u  /* layer + edge records, six u32, seed */
#define CF_LAYER_SCHEME 16u  /* one layer scheme record */
#define CF_LAYER_FIXED 24u   /* len, n_comp, flags */
#define CF_SECTION_HEAD 8u   /* scheme section: tag, payload bytes */
#define CF_LAYER_HEAD 16u    /* layer section: tag, index, payload bytes */
#define CF_CRC 4u

static const uint8_t cf_magic[8] = {'T', 'Q', 'K', 'V', 'C', 'A', 'C', 'H'};
static const uint8_t tag_scheme[4] = {'S', 'C', 'H', 'M'};
static const uint8_t tag_layer[4] = {'L', 'A', 'Y', 'R'};

/* ---------------------------------------------------------------------------------------- */
/* CRC32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor ~0.      */
/* Slicing by 8: t[0] is the byte table; t[k][b] advances t[k-1][b] by one more zero byte.    */
/* ---------------------------------------------------------------------------------------- */

typedef struct crc_tab {
    uint32_t t[8][256];
} crc_tab;

static void crc_tab_init(crc_tab *c) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1u)));
        c->t[0][b] = r;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            c->t[k][b] = (c->t[k - 1][b] >> 8) ^ c->t[0][c->t[k - 1][b] & 0xFF];
}

/* Continues a CRC register (start from 0xFFFFFFFF; the checksum is the final value xor ~0). */
static uint32_t crc_update(const crc_tab *c, uint32_t r, const uint8_t *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = r ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        r = c->t[7][lo & 0xFF] ^ c->t[6][(lo >> 8) & 0xFF] ^ c->t[5][(lo >> 16) & 0xFF] ^
            c->t[4][lo >> 24] ^ c->t[3][p[4]] ^ c->t[2][p[5]] ^ c->t[1][p[6]] ^ c->t[0][p[7]];
    }
    for (; n; n--, p++) r = (r >> 8) ^ c->t[0][(r ^ *p) & 0xFF];
    return r;
}

/* ---------------------------------------------------------------------------------------- */
/* Little-endian helpers                                                                      */
/* ---------------------------------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* a·b, or SIZE_MAX when it overflows. */
static size_t mul_sat(size_t a, size_t b) {
    if (a && b > SIZE_MAX / a) return SIZE_MAX;
    return a * b;
}
static size_t add_sat(size_t a, size_t b) { return b > SIZE_MAX - a ? SIZE_MAX : a + b; }

/* ---------------------------------------------------------------------------------------- */
/* Sizes                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static int has_mean(const tq_kv_layer *l) { return l->key_mean != NULL; }
static int has_scale(const tq_kv_layer *l) { return l->key_scale != NULL; }

/* Bytes of a layer's key scale block: query rows (f64), Σ q² (f64 each), scale (f32 each),
 * with a key split the channel order (u16 each). */
static size_t scale_block(const tq_kv_cache *c, const tq_kv_layer *l) {
    return 8 + (size_t)c->cfg.n_kv_heads * (size_t)c->cfg.head_dim_k * (l->key_perm ? 14 : 12);
}
static void put_f64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_u64(p, u);
}
static double get_f64(const uint8_t *p) {
    uint64_t u = get_u64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* Payload bytes of a layer section for (len, n_comp): SIZE_MAX on overflow. */
static size_t layer_payload(const tq_kv_cache *c, const tq_kv_layer *l, int with_mean,
                            int with_scale, uint64_t len, uint64_t n_comp) {
    size_t H = (size_t)c->cfg.n_kv_heads, dk = (size_t)c->cfg.head_dim_k,
           dv = (size_t)c->cfg.head_dim_v;
    if (len > SIZE_MAX || n_comp > len) return SIZE_MAX;
    size_t n = CF_LAYER_FIXED;
    if (with_mean) n = add_sat(n, H * dk * 4);
    if (with_scale) n = add_sat(n, scale_block(c, l));
    n = add_sat(n, mul_sat((size_t)n_comp, H * (l->k.rec_bytes + l->v.rec_bytes)));
    n = add_sat(n, mul_sat((size_t)(len - n_comp), H * 2 * (dk + dv)));
    return n;
}

static size_t scheme_payload(int n_layers) {
    return CF_SCHEME_FIXED + (size_t)n_layers * CF_LAYER_SCHEME;
}

/* 1 if a windowed layer has dropped positions: the file format holds whole histories. */
static int has_dropped(const tq_kv_cache *c) {
    for (int i = 0; i < c->cfg.n_layers; i++)
        if (c->layers[i].dropped) return 1;
    return 0;
}

size_t tq_kv_cache_save_bound(const tq_kv_cache *c) {
    if (!c || has_dropped(c)) return 0;
    size_t n = CF_HEADER_BYTES + CF_SECTION_HEAD + scheme_payload(c->cfg.n_layers) + CF_CRC;
    for (int i = 0; i < c->cfg.n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        n = add_sat(n, CF_LAYER_HEAD + CF_CRC);
        n = add_sat(n, layer_payload(c, l, has_mean(l), has_scale(l), l->len, l->n_comp));
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
    const crc_tab *crc;
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
    s->reg = crc_update(s->crc, s->reg, p, n);
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

static void crc_begin(sink *s) { s->reg = 0xFFFFFFFFu; }
static void crc_end(sink *s) {
    uint8_t b[4];
    put_u32(b, s->reg ^ 0xFFFFFFFFu);
    sink_write(s, b, 4);
}

static void put_layer_scheme(uint8_t *p, const tq_kv_layer_scheme *l) {
    memset(p, 0, CF_LAYER_SCHEME);
    p[0] = (uint8_t)l->key_format;
    p[1] = (uint8_t)l->value_format;
    p[2] = (uint8_t)l->key_variant;
    p[3] = l->norm_correction ? 1 : 0;
    p[4] = l->key_mean ? 1 : 0;
    p[5] = l->key_scale ? 1 : 0;
    p[6] = l->key_split ? 1 : 0;
    tq_store_f32(p + 8, l->key_format == TQ_KV_TURBO ? l->key_bits : 0.0f);
    tq_store_f32(p + 12, l->value_format == TQ_KV_TURBO ? l->value_bits : 0.0f);
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

static void write_raw(sink *s, const tq_kv_cache *c, const tq_kv_layer *l, int is_v) {
    int H = c->cfg.n_kv_heads, d = is_v ? c->cfg.head_dim_v : c->cfg.head_dim_k;
    uint8_t tmp[2 * TQ_MAX_DIM];
    for (size_t t = l->n_comp; t < l->len; t++)
        for (int h = 0; h < H; h++) {
            const uint16_t *r = is_v ? tq_kv_vraw(c, l, t, h) : tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < d; i++) tq_store_u16(tmp + 2 * i, r[i]);
            sink_write(s, tmp, (size_t)d * 2);
        }
}

static tq_status write_cache(const tq_kv_cache *c, sink *s) {
    const tq_kv_cache_config *cfg = &c->cfg;
    const tq_kv_scheme *sc = &cfg->scheme;
    uint8_t b[CF_SCHEME_FIXED];
    uint64_t n_tokens = 0;
    for (int i = 0; i < cfg->n_layers; i++) n_tokens += c->layers[i].len;

    /* Header. */
    uint8_t h[CF_HEADER_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, cf_magic, 8);
    put_u32(h + 8, CF_VERSION);
    put_u32(h + 12, CF_HEADER_BYTES);
    put_u32(h + 16, (uint32_t)cfg->n_layers);
    put_u32(h + 20, (uint32_t)cfg->n_kv_heads);
    put_u32(h + 24, (uint32_t)cfg->head_dim_k);
    put_u32(h + 28, (uint32_t)cfg->head_dim_v);
    put_u64(h + 32, sc->seed);
    put_u64(h + 40, n_tokens);
    put_u32(h + 48, (uint32_t)scheme_payload(cfg->n_layers));
    crc_begin(s);
    sink_write(s, h, 60);
    crc_end(s);

    /* Scheme section. */
    crc_begin(s);
    memcpy(b, tag_scheme, 4);
    put_u32(b + 4, (uint32_t)scheme_payload(cfg->n_layers));
    sink_write(s, b, CF_SECTION_HEAD);
    put_layer_scheme(b, &sc->layer);
    put_layer_scheme(b + 16, &sc->edge);
    put_u32(b + 32, (uint32_t)sc->edge_first);
    put_u32(b + 36, (uint32_t)sc->edge_last);
    put_u32(b + 40, (uint32_t)sc->raw_window);
    put_u32(b + 44, (uint32_t)sc->batch);
    put_u32(b + 48, (uint32_t)sc->quantized_kv_start);
    put_u32(b + 52, sc->prefill_raw ? 1u : 0u);
    put_u64(b + 56, sc->seed);
    sink_write(s, b, CF_SCHEME_FIXED);
    for (int i = 0; i < cfg->n_layers; i++) {
        put_layer_scheme(b, &c->layers[i].scheme);
        sink_write(s, b, CF_LAYER_SCHEME);
    }
    crc_end(s);

    /* Layer sections. */
    for (int i = 0; i < cfg->n_layers; i++) {
        const tq_kv_layer *l = &c->layers[i];
        crc_begin(s);
        memcpy(b, tag_layer, 4);
        put_u32(b + 4, (uint32_t)i);
        put_u64(b + 8, layer_payload(c, l, has_mean(l), has_scale(l), l->len, l->n_comp));
        sink_write(s, b, CF_LAYER_HEAD);
        memset(b, 0, CF_LAYER_FIXED);
        put_u64(b, l->len);
        put_u64(b + 8, l->n_comp);
        b[16] = l->compress_started ? 1 : 0;
        b[17] = l->mean_set ? 1 : 0;
        b[18] = has_mean(l) ? 1 : 0;
        b[19] = l->scale_set ? 1 : 0;
        sink_write(s, b, CF_LAYER_FIXED);
        size_t nm = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim_k;
        if (has_mean(l)) {
            for (size_t j = 0; j < nm; j++) {
                tq_store_f32(b, l->key_mean[j]);
                sink_write(s, b, 4);
            }
        }
        if (has_scale(l)) {
            put_f64(b, l->q_rows);
            sink_write(s, b, 8);
            for (size_t j = 0; j < nm; j++) {
                put_f64(b, l->q_sq[j]);
                sink_write(s, b, 8);
            }
            for (size_t j = 0; j < nm; j++) {
                tq_store_f32(b, l->key_scale[j]);
                sink_write(s, b, 4);
            }
            for (size_t j = 0; l->key_perm && j < nm; j++) {
                tq_store_u16(b, l->key_perm[j]);
                sink_write(s, b, 2);
            }
        }
        write_records(s, c, l, 0);
        write_records(s, c, l, 1);
        write_raw(s, c, l, 0);
        write_raw(s, c, l, 1);
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
    crc_tab *ct = malloc(sizeof *ct);
    if (!ct) return TQ_ERR_NOMEM;
    crc_tab_init(ct);
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
    crc_tab *ct = malloc(sizeof *ct);
    uint8_t *buf = malloc(1u << 20);
    tq_status st = TQ_OK;
    int fd = -1, created = 0; /* created: tmp names a file of ours to remove on failure */
    if (!tmp || !ct || !buf) {
        st = TQ_ERR_NOMEM;
        goto done;
    }
    crc_tab_init(ct);
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

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static uint32_t crc_of(const crc_tab *ct, const uint8_t *p, size_t n) {
    return crc_update(ct, 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

/* A layer scheme record; 0 when a field holds a value no writer produces. */
static int get_layer_scheme(const uint8_t *p, uint32_t version, tq_kv_layer_scheme *l) {
    memset(l, 0, sizeof *l);
    if (p[0] > TQ_KV_TURBO || p[1] > TQ_KV_TURBO || p[2] > TQ_VARIANT_PROD || p[3] > 1 ||
        p[4] > 1 || p[5] > (version >= 2) || p[6] > (version >= 3) || p[7])
        return 0;
    l->key_format = (tq_kv_format)p[0];
    l->value_format = (tq_kv_format)p[1];
    l->key_variant = (tq_variant)p[2];
    l->norm_correction = p[3];
    l->key_mean = p[4];
    l->key_scale = p[5];
    l->key_split = p[6];
    l->key_bits = tq_load_f32(p + 8);
    l->value_bits = tq_load_f32(p + 12);
    /* The writer stores bits as 0.0f (all bits zero) for the plain formats: the bit pattern is
     * compared, so −0.0f (equal to 0.0f as a float, but re-saved as +0.0f) is refused. A
     * TurboQuant width in [1, 8] is positive, so its pattern is the one it re-saves as. */
    if (l->key_format == TQ_KV_TURBO ? !(l->key_bits >= 1.0f && l->key_bits <= 8.0f)
                                     : get_u32(p + 8) != 0)
        return 0;
    if (l->value_format == TQ_KV_TURBO ? !(l->value_bits >= 1.0f && l->value_bits <= 8.0f)
                                       : get_u32(p + 12) != 0)
        return 0;
    return 1;
}

static int same_layer_scheme(const tq_kv_layer_scheme *a, const tq_kv_layer_scheme *b) {
    uint8_t x[CF_LAYER_SCHEME], y[CF_LAYER_SCHEME];
    put_layer_scheme(x, a);
    put_layer_scheme(y, b);
    return memcmp(x, y, sizeof x) == 0;
}

static int f16_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }

/* 1 if a record holds only values an encoder produces (finite scales and norms, finite
 * fp16 elements); rec is little-endian file bytes. */
static int record_ok(const tq_kv_tensor *x, const uint8_t *r) {
    switch (x->format) {
    case TQ_KV_F16:
        for (int i = 0; i < x->dim; i++)
            if (!f16_finite(tq_load_u16(r + 2 * i))) return 0;
        return 1;
    case TQ_KV_Q8_0:
    case TQ_KV_Q4_0: {
        size_t blk = x->format == TQ_KV_Q8_0 ? 2 + TQ_KV_BLOCK : 2 + TQ_KV_BLOCK / 2;
        for (size_t off = 0; off < x->rec_bytes; off += blk)
            if (!f16_finite(tq_load_u16(r + off))) return 0;
        return 1;
    }
    case TQ_KV_TURBO: {
        float n = x->norm_f32 ? tq_load_f32(r + x->norm_off)
                              : tq_f16_to_f32(tq_load_u16(r + x->norm_off));
        if (!(isfinite(n) && n >= 0.0f)) return 0;
        if (x->prod) {
            float g = x->norm_f32 ? tq_load_f32(r + x->gamma_off)
                                  : tq_f16_to_f32(tq_load_u16(r + x->gamma_off));
            if (!(isfinite(g) && g >= 0.0f && g <= 8.0f)) return 0;
        }
        return 1;
    }
    }
    return 0;
}

/* 1 if the key split's channel order (H rows of dk u16) holds a permutation of [0, dk) per
 * head, and the identity while the scale is not set (as the cache keeps it). */
static int perm_ok(const uint8_t *p, int H, int dk, int scale_set) {
    uint8_t seen[TQ_MAX_DIM];
    for (int h = 0; h < H; h++) {
        memset(seen, 0, sizeof seen);
        for (int j = 0; j < dk; j++) {
            unsigned v = tq_load_u16(p + 2 * ((size_t)h * (size_t)dk + (size_t)j));
            if (v >= (unsigned)dk || seen[v] || (!scale_set && v != (unsigned)j)) return 0;
            seen[v] = 1;
        }
    }
    return 1;
}

/* Reads one layer section's payload p (n bytes, checksum already verified) into layer i. */
static tq_status read_layer(tq_kv_cache *c, int i, const uint8_t *p, size_t n) {
    tq_kv_layer *l = &c->layers[i];
    int H = c->cfg.n_kv_heads, dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v;
    if (n < CF_LAYER_FIXED) return TQ_ERR_FORMAT;
    uint64_t len = get_u64(p), n_comp = get_u64(p + 8);
    int started = p[16], mean_set = p[17], with_mean = p[18], scale_set = p[19];
    int with_scale = has_scale(l);
    for (int j = 20; j < 24; j++)
        if (p[j]) return TQ_ERR_FORMAT;
    if (started > 1 || mean_set > 1 || with_mean != has_mean(l) || scale_set > with_scale)
        return TQ_ERR_FORMAT;
    if (n_comp > len || (l->compress_none && (n_comp || started))) return TQ_ERR_FORMAT;
    /* Compressed tokens need the mean and the scale they were encoded with. */
    if (with_mean && n_comp && !mean_set) return TQ_ERR_FORMAT;
    if (with_scale && n_comp && !scale_set) return TQ_ERR_FORMAT;
    if (layer_payload(c, l, with_mean, with_scale, len, n_comp) != n) return TQ_ERR_FORMAT;
    /* From here on the counts are bounded by n, itself bounded by the input size. */
    const uint8_t *q = p + CF_LAYER_FIXED;
    size_t nm = (size_t)H * (size_t)dk;
    if (with_mean) {
        for (size_t j = 0; j < nm; j++)
            if (!isfinite(tq_load_f32(q + 4 * j))) return TQ_ERR_CORRUPT;
    }
    const uint8_t *sq = q + (with_mean ? nm * 4 : 0);
    if (with_scale) {
        /* Statistics are finite and ≥ +0 (a count and sums of squares from 0.0: never −0.0);
         * the scale is finite and > 0 (1 until fixed). */
        double rows = get_f64(sq);
        if (!(isfinite(rows) && !signbit(rows))) return TQ_ERR_CORRUPT;
        for (size_t j = 0; j < nm; j++) {
            double a = get_f64(sq + 8 + 8 * j);
            float sc = tq_load_f32(sq + 8 + 8 * nm + 4 * j);
            if (!(isfinite(a) && !signbit(a)) || !(isfinite(sc) && sc > 0.0f))
                return TQ_ERR_CORRUPT;
        }
    }
    const uint8_t *pq = sq + 8 + 12 * nm; /* the channel order, with a key split */
    if (with_scale && l->key_perm && !perm_ok(pq, H, dk, scale_set)) return TQ_ERR_CORRUPT;
    const uint8_t *krec = sq + (with_scale ? scale_block(c, l) : 0);
    const uint8_t *vrec = krec + (size_t)n_comp * (size_t)H * l->k.rec_bytes;
    const uint8_t *kraw = vrec + (size_t)n_comp * (size_t)H * l->v.rec_bytes;
    size_t n_raw = (size_t)(len - n_comp);
    const uint8_t *vraw = kraw + n_raw * (size_t)H * (size_t)dk * 2;
    for (size_t t = 0; t < (size_t)n_comp * (size_t)H; t++)
        if (!record_ok(&l->k, krec + t * l->k.rec_bytes) ||
            !record_ok(&l->v, vrec + t * l->v.rec_bytes))
            return TQ_ERR_CORRUPT;
    for (size_t j = 0; j < n_raw * (size_t)H * (size_t)dk; j++)
        if (!f16_finite(tq_load_u16(kraw + 2 * j))) return TQ_ERR_CORRUPT;
    for (size_t j = 0; j < n_raw * (size_t)H * (size_t)dv; j++)
        if (!f16_finite(tq_load_u16(vraw + 2 * j))) return TQ_ERR_CORRUPT;

    tq_status st = tq_kv_layer_restore_shape(c, i, (size_t)len, (size_t)n_comp);
    if (st) return st == TQ_ERR_INVALID ? TQ_ERR_FORMAT : st;
    if (with_mean)
        for (size_t j = 0; j < nm; j++) l->key_mean[j] = tq_load_f32(q + 4 * j);
    l->mean_set = mean_set;
    if (with_scale) {
        l->q_rows = get_f64(sq);
        for (size_t j = 0; j < nm; j++) {
            l->q_sq[j] = get_f64(sq + 8 + 8 * j);
            l->key_scale[j] = tq_load_f32(sq + 8 + 8 * nm + 4 * j);
        }
        for (size_t j = 0; l->key_perm && j < nm; j++) l->key_perm[j] = tq_load_u16(pq + 2 * j);
    }
    l->scale_set = scale_set;
    l->compress_started = started;
    for (size_t t = 0; t < (size_t)n_comp; t++)
        for (int h = 0; h < H; h++) {
            size_t at = t * (size_t)H + (size_t)h;
            uint8_t *kd = (uint8_t *)tq_kv_krec(c, l, t, h), *vd = (uint8_t *)tq_kv_vrec(c, l, t, h);
            const uint8_t *ks = krec + at * l->k.rec_bytes, *vs = vrec + at * l->v.rec_bytes;
            if (l->k.format == TQ_KV_F16) {
                for (int j = 0; j < dk; j++) {
                    uint16_t v = tq_load_u16(ks + 2 * j);
                    memcpy(kd + 2 * j, &v, 2);
                }
            } else {
                memcpy(kd, ks, l->k.rec_bytes);
            }
            if (l->v.format == TQ_KV_F16) {
                for (int j = 0; j < dv; j++) {
                    uint16_t v = tq_load_u16(vs + 2 * j);
                    memcpy(vd + 2 * j, &v, 2);
                }
            } else {
                memcpy(vd, vs, l->v.rec_bytes);
            }
        }
    for (size_t t = 0; t < n_raw; t++)
        for (int h = 0; h < H; h++) {
            size_t at = t * (size_t)H + (size_t)h;
            uint16_t *kd = (uint16_t *)tq_kv_kraw(c, l, (size_t)n_comp + t, h);
            uint16_t *vd = (uint16_t *)tq_kv_vraw(c, l, (size_t)n_comp + t, h);
            for (int j = 0; j < dk; j++) kd[j] = tq_load_u16(kraw + 2 * (at * (size_t)dk + (size_t)j));
            for (int j = 0; j < dv; j++) vd[j] = tq_load_u16(vraw + 2 * (at * (size_t)dv + (size_t)j));
        }
    return TQ_OK;
}

/* What the header and the scheme section say, checked: the loader's first two stages, which
 * read only the first front_bytes() bytes of the input (and its size). */
typedef struct cf_front {
    uint32_t version, n_layers, H, dk, dv, scheme_bytes;
    uint64_t seed, n_tokens;
    tq_kv_cache_config cfg; /* shapes and scheme (check_scheme); layer_schemes set by load */
    tq_kv_layer_scheme *ls; /* the n_layers layer scheme records (check_scheme; owned) */
} cf_front;

/* Bytes of the header and the scheme section. */
static size_t front_bytes(const cf_front *f) {
    return CF_HEADER_BYTES + CF_SECTION_HEAD + (size_t)f->scheme_bytes + CF_CRC;
}

/* Stage 1: the 64-byte header, for an input of size bytes of which d holds the first
 * min(size, 64). */
static tq_status check_header(const uint8_t *d, size_t size, const tq_kv_cache_config *expect,
                              const crc_tab *ct, cf_front *f) {
    /* Magic and version first (fixed in every version), then the checksum. */
    if (size < CF_HEADER_BYTES || memcmp(d, cf_magic, 8) != 0) return TQ_ERR_FORMAT;
    uint32_t version = get_u32(d + 8);
    if (version < CF_VERSION_MIN || version > CF_VERSION) return TQ_ERR_VERSION;
    if (get_u32(d + 12) != CF_HEADER_BYTES) return TQ_ERR_FORMAT;
    if (crc_of(ct, d, 60) != get_u32(d + 60)) return TQ_ERR_CHECKSUM;
    if (get_u32(d + 52) || get_u32(d + 56)) return TQ_ERR_FORMAT;
    uint32_t n_layers = get_u32(d + 16), H = get_u32(d + 20), dk = get_u32(d + 24),
             dv = get_u32(d + 28);
    uint32_t scheme_bytes = get_u32(d + 48);
    if (n_layers < 1 || n_layers > 4096 || H < 1 || H > 1024 || dk < TQ_MIN_DIM ||
        dk > TQ_MAX_DIM || dv < TQ_MIN_DIM || dv > TQ_MAX_DIM)
        return TQ_ERR_FORMAT;
    if (scheme_bytes != scheme_payload((int)n_layers)) return TQ_ERR_FORMAT;
    if (expect && (expect->n_layers != (int)n_layers || expect->n_kv_heads != (int)H ||
                   expect->head_dim_k != (int)dk || expect->head_dim_v != (int)dv))
        return TQ_ERR_MISMATCH;
    memset(f, 0, sizeof *f);
    f->version = version;
    f->n_layers = n_layers;
    f->H = H;
    f->dk = dk;
    f->dv = dv;
    f->scheme_bytes = scheme_bytes;
    f->seed = get_u64(d + 32);
    f->n_tokens = get_u64(d + 40);
    /* The smallest file with these counts (the scheme section included, so that stage 2
     * reads within the input): nothing more is read for a file shorter than it. */
    size_t min_size = front_bytes(f) + (size_t)n_layers * (CF_LAYER_HEAD + CF_LAYER_FIXED + CF_CRC);
    if (size < min_size) return TQ_ERR_FORMAT;
    return TQ_OK;
}

/* The least and the most bytes a file of these counts and layer schemes can have, saturating:
 * the header and scheme section; per layer its section head, CRC, fixed fields, key mean
 * (4·H·dk) and key scale block (8 + 12·H·dk, + 2·H·dk with a key split), as layer_payload and
 * write_cache lay them out; then n_tokens tokens (Σ len = n_tokens) at the cheapest / dearest
 * per-token cost of any layer, a token of a layer costing H·(kb + vb) compressed and
 * H·2·(dk + dv) raw. 0 when a layer scheme has no record size for these dims (then
 * tq_kv_cache_create refuses it too). */
static int size_range(const cf_front *f, size_t *lo, size_t *hi) {
    size_t H = f->H, nm = (size_t)f->H * f->dk, raw = 2 * ((size_t)f->dk + f->dv);
    size_t fixed = front_bytes(f), least = SIZE_MAX, most = 0;
    for (uint32_t i = 0; i < f->n_layers; i++) {
        const tq_kv_layer_scheme *l = &f->ls[i];
        size_t kb = 0, vb = 0;
        if (tq_kv_layer_scheme_bytes(l, (int)f->dk, (int)f->dv, &kb, &vb) != TQ_OK) return 0;
        fixed = add_sat(fixed, CF_LAYER_HEAD + CF_LAYER_FIXED + CF_CRC);
        if (l->key_mean) fixed = add_sat(fixed, 4 * nm);
        if (l->key_scale) fixed = add_sat(fixed, 8 + (l->key_split ? 14 : 12) * nm);
        size_t comp = add_sat(kb, vb);
        size_t cheap = comp < raw ? comp : raw, dear = comp > raw ? comp : raw;
        if (cheap < least) least = cheap;
        if (dear > most) most = dear;
    }
    size_t n = f->n_tokens > SIZE_MAX ? SIZE_MAX : (size_t)f->n_tokens;
    *lo = add_sat(fixed, mul_sat(n, mul_sat(H, least)));
    *hi = add_sat(fixed, mul_sat(n, mul_sat(H, most)));
    return 1;
}

/* Stage 2: the scheme section (d holds the first front_bytes(f) bytes of the size-byte
 * input; check_header made sure size covers them), then the input's size against what the
 * counts and the schemes allow. On TQ_OK, f->cfg and f->ls (to free) are set. */
static tq_status check_scheme(const uint8_t *d, size_t size, const tq_kv_cache_config *expect,
                              const crc_tab *ct, cf_front *f) {
    uint32_t n_layers = f->n_layers, scheme_bytes = f->scheme_bytes, version = f->version;
    int dk = (int)f->dk;
    const uint8_t *s = d + CF_HEADER_BYTES;
    if (memcmp(s, tag_scheme, 4) != 0 || get_u32(s + 4) != scheme_bytes) return TQ_ERR_FORMAT;
    if (crc_of(ct, s, CF_SECTION_HEAD + scheme_bytes) !=
        get_u32(s + CF_SECTION_HEAD + scheme_bytes))
        return TQ_ERR_CHECKSUM;
    const uint8_t *sp = s + CF_SECTION_HEAD;
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, (int)n_layers, (int)f->H, dk, (int)f->dv);
    tq_kv_scheme *sc = &cfg.scheme;
    if (!get_layer_scheme(sp, version, &sc->layer) || !get_layer_scheme(sp + 16, version, &sc->edge))
        return TQ_ERR_FORMAT;
    uint32_t v32[6];
    for (int j = 0; j < 6; j++) {
        v32[j] = get_u32(sp + 32 + 4 * j);
        if (v32[j] > 0x7FFFFFFFu) return TQ_ERR_FORMAT;
    }
    sc->edge_first = (int)v32[0];
    sc->edge_last = (int)v32[1];
    sc->raw_window = (int)v32[2];
    sc->batch = (int)v32[3];
    sc->quantized_kv_start = (int)v32[4];
    if (v32[5] > 1 || v32[3] < 1) return TQ_ERR_FORMAT;
    sc->prefill_raw = (int)v32[5];
    sc->seed = get_u64(sp + 56);
    if (sc->seed != f->seed) return TQ_ERR_FORMAT;
    tq_kv_layer_scheme *ls = malloc(n_layers * sizeof *ls);
    if (!ls) return TQ_ERR_NOMEM;
    for (uint32_t i = 0; i < n_layers; i++)
        if (!get_layer_scheme(sp + CF_SCHEME_FIXED + (size_t)i * CF_LAYER_SCHEME, version, &ls[i]) ||
            ((ls[i].key_mean || ls[i].key_scale) && ls[i].key_format != TQ_KV_TURBO)) {
            free(ls);
            return TQ_ERR_FORMAT;
        }
    if (expect) {
        /* A key split flag that has no effect at these dims does not make a mismatch. */
        tq_kv_layer_scheme el = expect->scheme.layer, ee = expect->scheme.edge, fl = sc->layer,
                           fe = sc->edge;
        el.key_split = tq_kv_key_split_applies(&el, dk);
        ee.key_split = tq_kv_key_split_applies(&ee, dk);
        fl.key_split = tq_kv_key_split_applies(&fl, dk);
        fe.key_split = tq_kv_key_split_applies(&fe, dk);
        int ok = same_layer_scheme(&el, &fl) && same_layer_scheme(&ee, &fe) &&
                 expect->scheme.edge_first == sc->edge_first &&
                 expect->scheme.edge_last == sc->edge_last &&
                 expect->scheme.raw_window == sc->raw_window &&
                 expect->scheme.batch == sc->batch &&
                 expect->scheme.quantized_kv_start == sc->quantized_kv_start &&
                 (expect->scheme.prefill_raw ? 1 : 0) == sc->prefill_raw &&
                 expect->scheme.seed == sc->seed;
        for (uint32_t i = 0; ok && expect->layer_schemes && i < n_layers; i++) {
            tq_kv_layer_scheme e = expect->layer_schemes[i];
            if (e.key_format != TQ_KV_TURBO) e.key_mean = e.key_scale = 0;
            e.key_split = tq_kv_key_split_applies(&e, dk);
            ok = same_layer_scheme(&e, &ls[i]);
        }
        if (!ok) {
            free(ls);
            return TQ_ERR_MISMATCH;
        }
    }
    f->cfg = cfg;
    f->ls = ls;
    /* The size: before anything is allocated for, or read of, the layer sections. */
    size_t lo = 0, hi = 0;
    if (!size_range(f, &lo, &hi) || size < lo || size > hi) {
        free(ls);
        f->ls = NULL;
        return TQ_ERR_FORMAT;
    }
    return TQ_OK;
}

/* Stage 3: creates the cache and reads the layer sections (d: the whole input); frees f->ls. */
static tq_status load_layers(const uint8_t *d, size_t size, const crc_tab *ct, cf_front *f,
                             tq_kv_cache **out) {
    uint32_t n_layers = f->n_layers;
    tq_kv_layer_scheme *ls = f->ls;
    f->cfg.layer_schemes = ls;
    tq_kv_cache *c = NULL;
    tq_status st = tq_kv_cache_create(&c, &f->cfg);
    /* A key split the file claims must be the one the cache makes of its scheme. */
    for (uint32_t i = 0; !st && i < n_layers; i++)
        if (c->layers[i].scheme.key_split != ls[i].key_split) st = TQ_ERR_FORMAT;
    free(ls);
    f->ls = NULL;
    f->cfg.layer_schemes = NULL;
    if (st) {
        tq_kv_cache_free(c);
        return st == TQ_ERR_NOMEM ? st : TQ_ERR_FORMAT;
    }

    /* Layer sections, in order, ending exactly at the end of the input. */
    size_t pos = front_bytes(f);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_layers && !st; i++) {
        size_t left = size - pos;
        /* Room for this section's head and CRC and the fixed part of every later one. */
        size_t later = (size_t)(n_layers - 1 - i) * (CF_LAYER_HEAD + CF_LAYER_FIXED + CF_CRC);
        if (left < CF_LAYER_HEAD + CF_CRC + later) {
            st = TQ_ERR_FORMAT;
            break;
        }
        const uint8_t *L = d + pos;
        uint64_t pn = get_u64(L + 8);
        if (memcmp(L, tag_layer, 4) != 0 || get_u32(L + 4) != i ||
            pn > left - CF_LAYER_HEAD - CF_CRC - later) {
            st = TQ_ERR_FORMAT;
            break;
        }
        if (crc_of(ct, L, CF_LAYER_HEAD + (size_t)pn) != get_u32(L + CF_LAYER_HEAD + (size_t)pn)) {
            st = TQ_ERR_CHECKSUM;
            break;
        }
        st = read_layer(c, (int)i, L + CF_LAYER_HEAD, (size_t)pn);
        total += c->layers[i].len;
        pos += CF_LAYER_HEAD + (size_t)pn + CF_CRC;
    }
    if (!st && (pos != size || total != f->n_tokens)) st = TQ_ERR_FORMAT;
    if (st) {
        tq_kv_cache_free(c);
        return st;
    }
    *out = c;
    return TQ_OK;
}

static tq_status load(const uint8_t *d, size_t size, const tq_kv_cache_config *expect,
                      const crc_tab *ct, tq_kv_cache **out) {
    cf_front f;
    tq_status st = check_header(d, size, expect, ct, &f);
    if (!st) st = check_scheme(d, size, expect, ct, &f);
    if (!st) st = load_layers(d, size, ct, &f, out);
    return st;
}

tq_status tq_kv_cache_load_memory_expect(const void *data, size_t size,
                                         const tq_kv_cache_config *expect, tq_kv_cache **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!data) return TQ_ERR_NULL;
    tq_kv_cache_config expect_in;
    if (expect && tq_kv_cache_config_in(&expect_in, expect)) return TQ_ERR_INVALID;
    if (expect) expect = &expect_in;
    crc_tab *ct = malloc(sizeof *ct);
    if (!ct) return TQ_ERR_NOMEM;
    crc_tab_init(ct);
    tq_status st = load(data, size, expect, ct, out);
    free(ct);
    return st;
}

tq_status tq_kv_cache_load_memory(const void *data, size_t size, tq_kv_cache **out) {
    return tq_kv_cache_load_memory_expect(data, size, NULL, out);
}

/* Reads up to n bytes at buf; the count read (short at end of file), or -1 on an error. */
static ssize_t read_full(int fd, uint8_t *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Opens path for reading without blocking (a FIFO with no writer, a device) and keeps only a
 * regular file, in blocking mode again. -1 when it is not one or cannot be opened. */
static int open_regular(const char *path, struct stat *sb) {
    int fd;
    do {
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -1;
    int fl;
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Grows *buf to want bytes and reads bytes [*got, want) of the file into it; *got ends short
 * at the end of the file. TQ_ERR_NOMEM or TQ_ERR_IO (then *buf is still the caller's). */
static tq_status read_more(int fd, uint8_t **buf, size_t *got, size_t want) {
    if (want <= *got) return TQ_OK;
    uint8_t *nb = realloc(*buf, want);
    if (!nb) return TQ_ERR_NOMEM;
    *buf = nb;
    ssize_t r = read_full(fd, nb + *got, want - *got);
    if (r < 0) return TQ_ERR_IO;
    *got += (size_t)r;
    return TQ_OK;
}

tq_status tq_kv_cache_load_expect(const char *path, const tq_kv_cache_config *expect,
                                  tq_kv_cache **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!path) return TQ_ERR_NULL;
    tq_kv_cache_config expect_in;
    if (expect && tq_kv_cache_config_in(&expect_in, expect)) return TQ_ERR_INVALID;
    if (expect) expect = &expect_in;
    struct stat sb;
    int fd = open_regular(path, &sb);
    if (fd < 0) return TQ_ERR_IO;
    if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return TQ_ERR_IO;
    }
    size_t size = (size_t)sb.st_size, got = 0;
    tq_status st = TQ_OK;
    crc_tab *ct = malloc(sizeof *ct);
    uint8_t *buf = malloc(CF_HEADER_BYTES);
    cf_front f;
    if (!ct || !buf) {
        st = TQ_ERR_NOMEM;
        goto done;
    }
    crc_tab_init(ct);
    /* The header, then the scheme section, checked against the file's size exactly as the
     * memory loader checks them, before the rest is read or allocated for. A file that shrinks
     * while being read is parsed as far as it goes (the memory loader below decides). */
    size_t want = size < CF_HEADER_BYTES ? size : CF_HEADER_BYTES;
    st = read_more(fd, &buf, &got, want);
    if (!st && got == want) {
        st = check_header(buf, size, expect, ct, &f);
        if (st) goto done;
        want = front_bytes(&f); /* ≤ size: check_header checked */
        st = read_more(fd, &buf, &got, want);
        if (!st && got == want) {
            st = check_scheme(buf, size, expect, ct, &f);
            if (st) goto done;
            free(f.ls); /* checked again below, on the same bytes */
        }
    }
    /* Within the bound the header and the scheme give: the rest. */
    if (!st && got == want && size > got) st = read_more(fd, &buf, &got, size);
    if (st) goto done;
    st = load(buf, got, expect, ct, out);
done:
    close(fd);
    free(buf);
    free(ct);
    return st;
}

tq_status tq_kv_cache_load(const char *path, tq_kv_cache **out) {
    return tq_kv_cache_load_expect(path, NULL, out);
}

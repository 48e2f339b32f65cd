/*
 * Cache files: loading (doc/cachefile.md, "Loading: every check and its code"). Three stages:
 * the header, the scheme section (and the input's size against what their counts allow), then
 * the cache and its layer sections (cachefile.c reads each). Loading a path runs the first two
 * on the file's front before it reads (or allocates for) the rest.
 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachefile_internal.h"
#include "internal.h"

/* What the header and the scheme section say, checked: the loader's first two stages, which
 * read only the first front_bytes() bytes of the input (and its size). */
typedef struct cf_front {
    uint32_t version, n_layers, H, dk, dv, scheme_bytes;
    uint64_t seed, n_tokens;
    uint32_t sink;          /* v5: the scheme's attention sinks (header offset 56) */
    uint32_t flags;         /* v6: header flags (offset 52; CF_FLAG_TRELLIS, v7 CF_FLAG_PAIRS) */
    tq_kv_cache_config cfg; /* shapes and scheme (check_scheme); layer_schemes set by load */
    tq_kv_layer_scheme *ls; /* the n_layers layer scheme records (check_scheme; owned) */
    size_t *windows;        /* v4: the n_layers layer windows, NULL when all are 0 (owned) */
    float *freqs;           /* v9: the keys' RoPE angles (n_layers, dk / 2), or NULL (owned) */
} cf_front;

static void front_free(cf_front *f) {
    free(f->ls);
    free(f->windows);
    free(f->freqs);
    f->ls = NULL;
    f->windows = NULL;
    f->freqs = NULL;
}

/* Bytes of the header and the scheme section. */
static size_t front_bytes(const cf_front *f) {
    return CF_HEADER_BYTES + CF_SECTION_HEAD + (size_t)f->scheme_bytes + CF_CRC;
}

/* Stage 1: the 64-byte header, for an input of size bytes of which d holds the first
 * min(size, 64). */
static tq_status check_header(const uint8_t *d, size_t size, const tq_kv_cache_config *expect,
                              const tq_cf_crc *ct, cf_front *f) {
    /* Magic and version first (fixed in every version), then the checksum. */
    if (size < CF_HEADER_BYTES || memcmp(d, tq_cf_magic, 8) != 0) return TQ_ERR_FORMAT;
    uint32_t version = tq_cf_get_u32(d + 8);
    if (version < CF_VERSION_MIN || version > CF_VERSION) return TQ_ERR_VERSION;
    if (tq_cf_get_u32(d + 12) != CF_HEADER_BYTES) return TQ_ERR_FORMAT;
    if (tq_cf_crc_of(ct, d, 60) != tq_cf_get_u32(d + 60)) return TQ_ERR_CHECKSUM;
    /* v5: offset 56 holds the scheme's sinks; reserved (zero) before. */
    uint32_t sink = tq_cf_get_u32(d + 56);
    uint32_t flags = tq_cf_get_u32(d + 52);
    uint32_t pairs = (flags & CF_FLAG_PAIRS) >> CF_FLAG_PAIRS_SHIFT;
    if ((version < 6 && flags) || (version < 7 && pairs) ||
        (flags & ~(CF_FLAG_TRELLIS | CF_FLAG_PAIRS | CF_FLAG_FREQS | CF_FLAG_TRELLIS_TWO_STATE)) ||
        ((flags & CF_FLAG_TRELLIS_TWO_STATE) && (version < 11 || !(flags & CF_FLAG_TRELLIS))) ||
        ((flags & CF_FLAG_FREQS) && (version < 9 || !pairs)) ||
        (version < 5 && sink) || sink > TQ_KV_SINK_MAX)
        return TQ_ERR_FORMAT;
    uint32_t n_layers = tq_cf_get_u32(d + 16), H = tq_cf_get_u32(d + 20), dk = tq_cf_get_u32(d + 24),
             dv = tq_cf_get_u32(d + 28);
    uint32_t scheme_bytes = tq_cf_get_u32(d + 48);
    if (n_layers < 1 || n_layers > 4096 || H < 1 || H > 1024 || dk < TQ_MIN_DIM ||
        dk > TQ_MAX_DIM || dv < TQ_MIN_DIM || dv > TQ_MAX_DIM)
        return TQ_ERR_FORMAT;
    if (scheme_bytes != tq_cf_scheme_payload((int)n_layers, version, flags, (int)dk)) return TQ_ERR_FORMAT;
    if (expect && (expect->n_layers != (int)n_layers || expect->n_kv_heads != (int)H ||
                   expect->head_dim_k != (int)dk || expect->head_dim_v != (int)dv))
        return TQ_ERR_MISMATCH;
    memset(f, 0, sizeof *f);
    f->version = version;
    f->sink = sink;
    f->flags = flags;
    f->n_layers = n_layers;
    f->H = H;
    f->dk = dk;
    f->dv = dv;
    f->scheme_bytes = scheme_bytes;
    f->seed = tq_cf_get_u64(d + 32);
    f->n_tokens = tq_cf_get_u64(d + 40);
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
 * H·2·(dk + dv) raw (v5, with sinks: a compressed one up to both). 0 when a layer scheme has no record size for these dims (then
 * tq_kv_cache_create refuses it too). */
static int size_range(const cf_front *f, size_t *lo, size_t *hi) {
    size_t H = f->H, nm = (size_t)f->H * f->dk, raw = 2 * ((size_t)f->dk + f->dv);
    size_t fixed = front_bytes(f), least = SIZE_MAX, most = 0, extra = 0; /* extra: v10 fast pairs, at most */
    for (uint32_t i = 0; i < f->n_layers; i++) {
        const tq_kv_layer_scheme *l = &f->ls[i];
        size_t kb = 0, vb = 0;
        if (tq_kv_layer_scheme_bytes(l, (int)f->dk, (int)f->dv, &kb, &vb) != TQ_OK) return 0;
        fixed = tq_cf_add_sat(fixed, CF_LAYER_HEAD + CF_LAYER_FIXED + CF_CRC);
        fixed = tq_cf_add_sat(fixed, tq_key_transform_state_size(nm, l->key_mean, l->key_scale,
                                                                 l->key_scale && l->key_split));
        if (f->version >= 10 && (f->flags & CF_FLAG_FREQS) && l->key_mean) extra += 2 * TQ_KEY_MEAN_FAST;
        if (l->key_mean == TQ_KV_KEY_MEAN_PREDICT) fixed = tq_cf_add_sat(fixed, 4 * H); /* v12: ρ */
        size_t comp = tq_cf_add_sat(kb, vb);
        size_t cheap = comp < raw ? comp : raw, dear = comp > raw ? comp : raw;
        if (f->sink) dear = tq_cf_add_sat(comp, raw); /* v5: a sink is stored twice */
        if (cheap < least) least = cheap;
        if (dear > most) most = dear;
    }
    size_t n = f->n_tokens > SIZE_MAX ? SIZE_MAX : (size_t)f->n_tokens;
    *lo = tq_cf_add_sat(fixed, tq_cf_mul_sat(n, tq_cf_mul_sat(H, least)));
    *hi = tq_cf_add_sat(tq_cf_add_sat(fixed, extra), tq_cf_mul_sat(n, tq_cf_mul_sat(H, most)));
    return 1;
}

/* Stage 2: the scheme section (d holds the first front_bytes(f) bytes of the size-byte
 * input; check_header made sure size covers them), then the input's size against what the
 * counts and the schemes allow. On TQ_OK, f->cfg, f->ls and f->windows (front_free) are set. */
static tq_status check_scheme(const uint8_t *d, size_t size, const tq_kv_cache_config *expect,
                              const tq_cf_crc *ct, cf_front *f) {
    uint32_t n_layers = f->n_layers, scheme_bytes = f->scheme_bytes, version = f->version;
    int dk = (int)f->dk;
    const uint8_t *s = d + CF_HEADER_BYTES;
    if (memcmp(s, tq_cf_tag_scheme, 4) != 0 || tq_cf_get_u32(s + 4) != scheme_bytes) return TQ_ERR_FORMAT;
    if (tq_cf_crc_of(ct, s, CF_SECTION_HEAD + scheme_bytes) !=
        tq_cf_get_u32(s + CF_SECTION_HEAD + scheme_bytes))
        return TQ_ERR_CHECKSUM;
    const uint8_t *sp = s + CF_SECTION_HEAD;
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, (int)n_layers, (int)f->H, dk, (int)f->dv);
    tq_kv_scheme *sc = &cfg.scheme;
    if (!tq_cf_get_layer_scheme(sp, version, &sc->layer) || !tq_cf_get_layer_scheme(sp + 16, version, &sc->edge))
        return TQ_ERR_FORMAT;
    uint32_t v32[6];
    for (int j = 0; j < 6; j++) {
        v32[j] = tq_cf_get_u32(sp + 32 + 4 * j);
        if (v32[j] > 0x7FFFFFFFu) return TQ_ERR_FORMAT;
    }
    sc->edge_first = (int)v32[0];
    sc->edge_last = (int)v32[1];
    sc->raw_window = (int)v32[2];
    sc->batch = (int)v32[3];
    sc->quantized_kv_start = (int)v32[4];
    if (v32[5] > 1 || v32[3] < 1) return TQ_ERR_FORMAT;
    sc->prefill_raw = (int)v32[5];
    sc->seed = tq_cf_get_u64(sp + 56);
    sc->sink = (int)f->sink;
    /* Trellis codes (v6); with flag bit 4 (v11) the two-state tables */
    sc->trellis = !(f->flags & CF_FLAG_TRELLIS)          ? 0
                  : (f->flags & CF_FLAG_TRELLIS_TWO_STATE) ? TQ_TRELLIS_TWO_STATE
                                                           : 1;
    cfg.key_rope_pairs = (int)((f->flags & CF_FLAG_PAIRS) >> CF_FLAG_PAIRS_SHIFT);
    if (!tq_rope_pairs_valid(cfg.key_rope_pairs, dk)) return TQ_ERR_FORMAT;
    if (sc->seed != f->seed) return TQ_ERR_FORMAT;
    tq_kv_layer_scheme *ls = malloc(n_layers * sizeof *ls);
    if (!ls) return TQ_ERR_NOMEM;
    for (uint32_t i = 0; i < n_layers; i++)
        if (!tq_cf_get_layer_scheme(sp + CF_SCHEME_FIXED + (size_t)i * CF_LAYER_SCHEME, version, &ls[i]) ||
            ((ls[i].key_mean || ls[i].key_scale) && ls[i].key_format != TQ_KV_TURBO) ||
            /* v8 split keys at a whole width: a layer's split there before is one no writer made */
            (version < 8 && ls[i].key_split && ls[i].key_bits == floorf(ls[i].key_bits))) {
            free(ls);
            return TQ_ERR_FORMAT;
        }
    /* v4: the layer windows, each ≤ CF_WINDOW_MAX (kept only when one is not 0). */
    const uint8_t *wp = sp + CF_SCHEME_FIXED + (size_t)n_layers * CF_LAYER_SCHEME;
    int windowed = 0;
    for (uint32_t i = 0; version >= 4 && i < n_layers; i++) {
        uint64_t w = tq_cf_get_u64(wp + CF_LAYER_WINDOW * i);
        if (w > CF_WINDOW_MAX) {
            free(ls);
            return TQ_ERR_FORMAT;
        }
        windowed |= w != 0;
    }
    f->ls = ls;
    /* v9: the keys' RoPE angles, each as tq_kv_cache_create accepts them. */
    if (f->flags & CF_FLAG_FREQS) {
        const size_t half = (size_t)dk / 2, nf = (size_t)n_layers * half;
        const uint8_t *fp = wp + (size_t)n_layers * CF_LAYER_WINDOW;
        f->freqs = malloc(nf * sizeof *f->freqs);
        if (!f->freqs) {
            front_free(f);
            return TQ_ERR_NOMEM;
        }
        for (size_t j = 0; j < nf; j++) f->freqs[j] = tq_load_f32(fp + 4 * j);
        for (uint32_t i = 0; i < n_layers; i++)
            if (!tq_key_transform_rope_freqs_ok(f->freqs + i * half, dk, cfg.key_rope_pairs)) {
                front_free(f);
                return TQ_ERR_FORMAT;
            }
    }
    if (windowed) {
        f->windows = malloc(n_layers * sizeof *f->windows);
        if (!f->windows) {
            front_free(f);
            return TQ_ERR_NOMEM;
        }
        for (uint32_t i = 0; i < n_layers; i++)
            f->windows[i] = (size_t)tq_cf_get_u64(wp + CF_LAYER_WINDOW * i);
    }
    if (expect) {
        /* A key split flag that has no effect at these dims does not make a mismatch. */
        tq_kv_layer_scheme el = expect->scheme.layer, ee = expect->scheme.edge, fl = sc->layer,
                           fe = sc->edge;
        const int et = expect->scheme.trellis != 0, ft = sc->trellis != 0;
        el.key_split = tq_kv_key_split_applies(&el, et, dk);
        ee.key_split = tq_kv_key_split_applies(&ee, et, dk);
        fl.key_split = tq_kv_key_split_applies(&fl, ft, dk);
        fe.key_split = tq_kv_key_split_applies(&fe, ft, dk);
        int ok = tq_cf_same_layer_scheme(&el, &fl) && tq_cf_same_layer_scheme(&ee, &fe) &&
                 expect->scheme.edge_first == sc->edge_first &&
                 expect->scheme.edge_last == sc->edge_last &&
                 expect->scheme.raw_window == sc->raw_window &&
                 expect->scheme.batch == sc->batch &&
                 expect->scheme.quantized_kv_start == sc->quantized_kv_start &&
                 (expect->scheme.prefill_raw ? 1 : 0) == sc->prefill_raw &&
                 expect->scheme.seed == sc->seed && expect->scheme.sink == sc->sink &&
                 expect->scheme.trellis == sc->trellis && expect->key_rope_pairs == cfg.key_rope_pairs &&
                 !expect->key_rope_freqs == !f->freqs &&
                 (!f->freqs || memcmp(expect->key_rope_freqs, f->freqs,
                                      (size_t)n_layers * (size_t)(dk / 2) * sizeof *f->freqs) == 0);
        for (uint32_t i = 0; ok && expect->layer_schemes && i < n_layers; i++) {
            tq_kv_layer_scheme e = expect->layer_schemes[i];
            if (e.key_format != TQ_KV_TURBO) e.key_mean = e.key_scale = 0;
            e.key_split = tq_kv_key_split_applies(&e, et, dk);
            ok = tq_cf_same_layer_scheme(&e, &ls[i]);
        }
        /* A file with windows (v4) against the expected ones, when given. */
        for (uint32_t i = 0; ok && version >= 4 && expect->layer_windows && i < n_layers; i++)
            ok = expect->layer_windows[i] == (f->windows ? f->windows[i] : 0);
        if (!ok) {
            front_free(f);
            return TQ_ERR_MISMATCH;
        }
    }
    f->cfg = cfg;
    /* The size: before anything is allocated for, or read of, the layer sections. */
    size_t lo = 0, hi = 0;
    if (!size_range(f, &lo, &hi) || size < lo || size > hi) {
        front_free(f);
        return TQ_ERR_FORMAT;
    }
    return TQ_OK;
}

/* Stage 3: creates the cache and reads the layer sections (d: the whole input); front_free. */
static tq_status load_layers(const uint8_t *d, size_t size, const tq_cf_crc *ct, cf_front *f,
                             tq_kv_cache **out) {
    uint32_t n_layers = f->n_layers;
    tq_kv_layer_scheme *ls = f->ls;
    f->cfg.layer_schemes = ls;
    f->cfg.layer_windows = f->windows;
    f->cfg.key_rope_freqs = f->freqs;
    tq_kv_cache *c = NULL;
    tq_status st = tq_kv_cache_create(&c, &f->cfg);
    /* A key split the file claims must be the one the cache makes of its scheme. */
    for (uint32_t i = 0; !st && i < n_layers; i++)
        if (c->layers[i].scheme.key_split != ls[i].key_split) st = TQ_ERR_FORMAT;
    front_free(f);
    f->cfg.layer_schemes = NULL;
    f->cfg.layer_windows = NULL;
    f->cfg.key_rope_freqs = NULL;
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
        uint64_t pn = tq_cf_get_u64(L + 8);
        if (memcmp(L, tq_cf_tag_layer, 4) != 0 || tq_cf_get_u32(L + 4) != i ||
            pn > left - CF_LAYER_HEAD - CF_CRC - later) {
            st = TQ_ERR_FORMAT;
            break;
        }
        if (tq_cf_crc_of(ct, L, CF_LAYER_HEAD + (size_t)pn) != tq_cf_get_u32(L + CF_LAYER_HEAD + (size_t)pn)) {
            st = TQ_ERR_CHECKSUM;
            break;
        }
        st = tq_cf_read_layer(c, (int)i, L + CF_LAYER_HEAD, (size_t)pn, f->version);
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
                      const tq_cf_crc *ct, tq_kv_cache **out) {
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
    tq_cf_crc *ct = malloc(sizeof *ct);
    if (!ct) return TQ_ERR_NOMEM;
    tq_cf_crc_init(ct);
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
    tq_cf_crc *ct = malloc(sizeof *ct);
    uint8_t *buf = malloc(CF_HEADER_BYTES);
    cf_front f;
    if (!ct || !buf) {
        st = TQ_ERR_NOMEM;
        goto done;
    }
    tq_cf_crc_init(ct);
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
            front_free(&f); /* checked again below, on the same bytes */
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

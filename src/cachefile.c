/*
 * Cache files (doc/cachefile.md, format version 8; versions 1 to 7 still load): the layout
 * shared by the writer (cachefile_write.c) and the reader (cachefile_read.c) — CRC32C, the
 * sections' sizes, layer scheme records — and the reading of one layer section: its checks
 * (every value an encoder writes) and the restore of the layer through the cache's narrow call
 * (tq_kv_layer_restore) and its key transform (tq_key_transform_read_state).
 *
 * A file is a fixed 64-byte header, a scheme section and one section per layer, each with its
 * own CRC32C. The writer streams sections through a sink (a caller buffer or a buffered file
 * descriptor) and never builds the file in memory; the reader validates every byte it uses
 * before it allocates in proportion to it, so a hostile count in a small file costs nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cachefile_internal.h"
#include "kv_predict.h"
#include "internal.h"

const uint8_t tq_cf_magic[8] = {'T', 'Q', 'K', 'V', 'C', 'A', 'C', 'H'};
const uint8_t tq_cf_tag_scheme[4] = {'S', 'C', 'H', 'M'};
const uint8_t tq_cf_tag_layer[4] = {'L', 'A', 'Y', 'R'};

/* ---------------------------------------------------------------------------------------- */
/* CRC32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor ~0.      */
/* Slicing by 8: t[0] is the byte table; t[k][b] advances t[k-1][b] by one more zero byte.    */
/* ---------------------------------------------------------------------------------------- */

void tq_cf_crc_init(tq_cf_crc *c) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1u)));
        c->t[0][b] = r;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            c->t[k][b] = (c->t[k - 1][b] >> 8) ^ c->t[0][c->t[k - 1][b] & 0xFF];
}

uint32_t tq_cf_crc_update(const tq_cf_crc *c, uint32_t r, const uint8_t *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = r ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        r = c->t[7][lo & 0xFF] ^ c->t[6][(lo >> 8) & 0xFF] ^ c->t[5][(lo >> 16) & 0xFF] ^
            c->t[4][lo >> 24] ^ c->t[3][p[4]] ^ c->t[2][p[5]] ^ c->t[1][p[6]] ^ c->t[0][p[7]];
    }
    for (; n; n--, p++) r = (r >> 8) ^ c->t[0][(r ^ *p) & 0xFF];
    return r;
}

uint32_t tq_cf_crc_of(const tq_cf_crc *ct, const uint8_t *p, size_t n) {
    return tq_cf_crc_update(ct, 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

/* ---------------------------------------------------------------------------------------- */
/* Sizes                                                                                      */
/* ---------------------------------------------------------------------------------------- */

size_t tq_cf_scheme_payload(int n_layers, uint32_t version, uint32_t flags, int dk) {
    return CF_SCHEME_FIXED +
           (size_t)n_layers * (CF_LAYER_SCHEME + (version >= 4 ? CF_LAYER_WINDOW : 0) +
                               (flags & CF_FLAG_FREQS ? 4 * (size_t)(dk / 2) : 0));
}

size_t tq_cf_layer_payload(const tq_kv_cache *c, int i, uint64_t len, uint64_t n_comp, int n_fast) {
    const tq_kv_layer *l = &c->layers[i];
    size_t H = (size_t)c->cfg.n_kv_heads, dk = (size_t)c->cfg.head_dim_k,
           dv = (size_t)c->cfg.head_dim_v;
    if (len > SIZE_MAX || n_comp > len) return SIZE_MAX;
    size_t n = CF_LAYER_FIXED + tq_key_transform_state_bytes(l->kt) + 2 * (size_t)n_fast;
    if (l->rho) n += 4 * H; /* v12: ρ per head (kv_predict.h) */
    n = tq_cf_add_sat(n, tq_cf_mul_sat((size_t)n_comp, H * (l->k.rec_bytes + l->v.rec_bytes)));
    n = tq_cf_add_sat(n, tq_cf_mul_sat((size_t)(len - n_comp), H * 2 * (dk + dv)));
    /* v5: the sink store (none in files of earlier versions: their schemes have no sinks). */
    n = tq_cf_add_sat(n, tq_kv_sink_held(c, l, (size_t)n_comp) * H * 2 * (dk + dv));
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Layer scheme records                                                                       */
/* ---------------------------------------------------------------------------------------- */

void tq_cf_put_layer_scheme(uint8_t *p, const tq_kv_layer_scheme *l) {
    memset(p, 0, CF_LAYER_SCHEME);
    p[0] = (uint8_t)l->key_format;
    p[1] = (uint8_t)l->value_format;
    p[2] = (uint8_t)l->key_variant;
    p[3] = l->norm_correction ? 1 : 0;
    p[4] = (uint8_t)(l->key_mean == TQ_KV_KEY_MEAN_PREDICT ? 2 : l->key_mean ? 1 : 0); /* 2: v12 */
    p[5] = l->key_scale ? 1 : 0;
    p[6] = l->key_split ? 1 : 0;
    tq_store_f32(p + 8, l->key_format == TQ_KV_TURBO ? l->key_bits : 0.0f);
    tq_store_f32(p + 12, l->value_format == TQ_KV_TURBO ? l->value_bits : 0.0f);
}

/* A layer scheme record; 0 when a field holds a value no writer produces. */
int tq_cf_get_layer_scheme(const uint8_t *p, uint32_t version, tq_kv_layer_scheme *l) {
    memset(l, 0, sizeof *l);
    /* v5 added the rotated formats q8_0r / q4_0r (codes 4, 5). */
    unsigned fmax = version >= 5 ? TQ_KV_Q4_0R : TQ_KV_TURBO;
    if (p[0] > fmax || p[1] > fmax || p[2] > TQ_VARIANT_PROD || p[3] > 1 ||
        p[4] > (version >= 12 ? 2 : 1) || p[5] > (version >= 2) || p[6] > (version >= 3) || p[7])
        return 0;
    /* v12: predicted keys (key_mean 2) are TurboQuant MSE keys */
    if (p[4] == TQ_KV_KEY_MEAN_PREDICT && p[0] == TQ_KV_TURBO && p[2] != TQ_VARIANT_MSE) return 0;
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
                                     : tq_cf_get_u32(p + 8) != 0)
        return 0;
    if (l->value_format == TQ_KV_TURBO ? !(l->value_bits >= 1.0f && l->value_bits <= 8.0f)
                                       : tq_cf_get_u32(p + 12) != 0)
        return 0;
    return 1;
}

int tq_cf_same_layer_scheme(const tq_kv_layer_scheme *a, const tq_kv_layer_scheme *b) {
    uint8_t x[CF_LAYER_SCHEME], y[CF_LAYER_SCHEME];
    tq_cf_put_layer_scheme(x, a);
    tq_cf_put_layer_scheme(y, b);
    return memcmp(x, y, sizeof x) == 0;
}

/* ---------------------------------------------------------------------------------------- */
/* A layer section                                                                            */
/* ---------------------------------------------------------------------------------------- */

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
    case TQ_KV_TURBO: /* the codec's one rule (kernels/record.h) */
        return tq_record_norm_ok(tq_record_load_norm(x, r + x->norm_off)) &&
               (!x->prod || tq_record_gamma_ok(tq_record_load_norm(x, r + x->gamma_off)));
    case TQ_KV_Q8_0R: /* never a record's format (the records of q8_0r / q4_0r are Q8_0 / Q4_0) */
    case TQ_KV_Q4_0R: return 0;
    }
    return 0;
}

/* Copies n_comp tokens' records (file order: token-major, heads inside; F16 little-endian)
 * and the raw tokens into the restored layer's pages. */
static void fill_pages(tq_kv_cache *c, const tq_kv_layer *l, size_t n_comp, size_t n_raw,
                       const uint8_t *krec, const uint8_t *vrec, const uint8_t *kraw,
                       const uint8_t *vraw) {
    int H = c->cfg.n_kv_heads, dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v;
    for (size_t t = 0; t < n_comp; t++)
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
            uint16_t *kd = (uint16_t *)tq_kv_kraw(c, l, n_comp + t, h);
            uint16_t *vd = (uint16_t *)tq_kv_vraw(c, l, n_comp + t, h);
            for (int j = 0; j < dk; j++) kd[j] = tq_load_u16(kraw + 2 * (at * (size_t)dk + (size_t)j));
            for (int j = 0; j < dv; j++) vd[j] = tq_load_u16(vraw + 2 * (at * (size_t)dv + (size_t)j));
        }
}

tq_status tq_cf_read_layer(tq_kv_cache *c, int i, const uint8_t *p, size_t n, uint32_t version) {
    const tq_kv_layer *l = &c->layers[i];
    const tq_key_transform *like = tq_kv_layer_key_transform(c, i);
    int H = c->cfg.n_kv_heads, dk = c->cfg.head_dim_k, dv = c->cfg.head_dim_v;
    if (n < CF_LAYER_FIXED) return TQ_ERR_FORMAT;
    uint64_t len = tq_cf_get_u64(p), n_comp = tq_cf_get_u64(p + 8);
    int started = p[16], mean_set = p[17], with_mean = p[18], scale_set = p[19];
    int with_scale = tq_key_transform_has_scale(like);
    /* v10: byte 20 counts the key mean's fast pairs (their list follows the key transform's
     * state); zero before, as bytes 21-23 are. */
    int n_fast = p[20];
    if (n_fast > TQ_KEY_MEAN_FAST || (n_fast && (version < 10 || !mean_set))) return TQ_ERR_FORMAT;
    /* v12: byte 21 says ρ is fitted (a layer that predicts keys, kv_predict.h) */
    int rho_set = p[21];
    if (rho_set > (l->rho != NULL) || (l->rho && n_comp && !rho_set)) return TQ_ERR_FORMAT;
    for (int j = 22; j < 24; j++)
        if (p[j]) return TQ_ERR_FORMAT;
    if (started > 1 || mean_set > with_mean || with_mean != tq_key_transform_has_mean(like) ||
        scale_set > with_scale)
        return TQ_ERR_FORMAT;
    if (n_comp > len || (l->compress_none && (n_comp || started))) return TQ_ERR_FORMAT;
    /* Compressed tokens need the mean and the scale they were encoded with. */
    if (with_mean && n_comp && !mean_set) return TQ_ERR_FORMAT;
    if (with_scale && n_comp && !scale_set) return TQ_ERR_FORMAT;
    if (tq_cf_layer_payload(c, i, len, n_comp, n_fast) != n) return TQ_ERR_FORMAT;
    /* From here on the counts are bounded by n, itself bounded by the input size. The key
     * transform's state comes first (its values checked as it is read), then the records. */
    const uint8_t *q = p + CF_LAYER_FIXED;
    tq_key_transform *kt = NULL;
    tq_status st = like ? tq_key_transform_create_like(&kt, like) : TQ_OK;
    if (!st && kt) st = tq_key_transform_read_state(kt, q, mean_set, scale_set);
    const uint8_t *fp = q + tq_key_transform_state_bytes(like);
    uint16_t fast[TQ_KEY_MEAN_FAST];
    for (int k = 0; k < n_fast; k++) fast[k] = tq_load_u16(fp + 2 * k);
    if (!st && n_fast && !(kt && tq_key_transform_fast_ok(kt, n_fast, fast))) st = TQ_ERR_CORRUPT;
    if (!st && kt) tq_key_transform_set_fast(kt, n_fast, fast);
    const uint8_t *rp = fp + 2 * (size_t)n_fast; /* v12: ρ per head */
    float rho[1024];
    for (int h = 0; l->rho && h < H; h++) {
        rho[h] = tq_load_f32(rp + 4 * (size_t)h);
        /* what a fit writes: 0 before it, then in [0, TQ_KV_PRED_RHO_MAX] (not −0) */
        if (!(rho[h] >= 0.0f && rho[h] <= (float)TQ_KV_PRED_RHO_MAX) || signbit(rho[h]) || (!rho_set && rho[h] != 0.0f))
            st = TQ_ERR_CORRUPT;
    }
    const uint8_t *krec = rp + (l->rho ? 4 * (size_t)H : 0);
    const uint8_t *vrec = krec + (size_t)n_comp * (size_t)H * l->k.rec_bytes;
    const uint8_t *kraw = vrec + (size_t)n_comp * (size_t)H * l->v.rec_bytes;
    size_t n_raw = (size_t)(len - n_comp);
    const uint8_t *vraw = kraw + n_raw * (size_t)H * (size_t)dk * 2;
    size_t ns = tq_kv_sink_held(c, l, (size_t)n_comp); /* v5: the sink store */
    const uint8_t *ksink = vraw + n_raw * (size_t)H * (size_t)dv * 2;
    const uint8_t *vsink = ksink + ns * (size_t)H * (size_t)dk * 2;
    for (size_t t = 0; !st && t < (size_t)n_comp * (size_t)H; t++)
        if (!record_ok(&l->k, krec + t * l->k.rec_bytes) ||
            !record_ok(&l->v, vrec + t * l->v.rec_bytes))
            st = TQ_ERR_CORRUPT;
    for (size_t j = 0; !st && j < n_raw * (size_t)H * (size_t)dk; j++)
        if (!f16_finite(tq_load_u16(kraw + 2 * j))) st = TQ_ERR_CORRUPT;
    for (size_t j = 0; !st && j < n_raw * (size_t)H * (size_t)dv; j++)
        if (!f16_finite(tq_load_u16(vraw + 2 * j))) st = TQ_ERR_CORRUPT;
    for (size_t j = 0; !st && j < ns * (size_t)H * (size_t)(dk + dv); j++)
        if (!f16_finite(tq_load_u16(ksink + 2 * j))) st = TQ_ERR_CORRUPT; /* K then V */
    if (!st) st = tq_kv_layer_restore(c, i, (size_t)len, (size_t)n_comp, started, kt);
    if (st) {
        tq_key_transform_free(kt);
        return st == TQ_ERR_INVALID ? TQ_ERR_FORMAT : st;
    }
    fill_pages(c, l, (size_t)n_comp, n_raw, krec, vrec, kraw, vraw);
    if (l->rho) {
        memcpy(c->layers[i].rho, rho, (size_t)H * sizeof *rho);
        c->layers[i].rho_set = rho_set;
    }
    for (size_t t = 0; t < ns; t++) /* restore allocated the sink store (n_comp ≥ ns > 0) */
        for (int h = 0; h < H; h++) {
            size_t at = t * (size_t)H + (size_t)h;
            uint16_t *kd = (uint16_t *)tq_kv_ksink(c, l, t, h), *vd = (uint16_t *)tq_kv_vsink(c, l, t, h);
            for (int j = 0; j < dk; j++) kd[j] = tq_load_u16(ksink + 2 * (at * (size_t)dk + (size_t)j));
            for (int j = 0; j < dv; j++) vd[j] = tq_load_u16(vsink + 2 * (at * (size_t)dv + (size_t)j));
        }
    return TQ_OK;
}

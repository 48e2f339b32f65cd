/*
 * Cache files (doc/cachefile.md, format version 12; versions 1 to 11 still load), shared by the
 * three files that implement them: cachefile.c (the layout: CRC32C, section sizes, layer
 * scheme records, the checks of a layer section and its restore), cachefile_write.c (save) and
 * cachefile_read.c (load). Not public.
 */
#ifndef TQ_CACHEFILE_INTERNAL_H
#define TQ_CACHEFILE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache_internal.h"

/* The version the writer writes is the public one; the layout these files read and write is
 * version 12, so moving the public macro without this code fails to compile. */
#define CF_VERSION ((uint32_t)TQ_KV_CACHE_FILE_VERSION)
_Static_assert(TQ_KV_CACHE_FILE_VERSION == 12, "src/cachefile*.c write the version 12 layout");
/* Header flags (offset 52), v6: bit 0 the scheme's trellis codes; v7: bits 1-2 the config's
 * key_rope_pairs (TQ_ROPE_PAIRS_*, at most 2); v9: bit 3 the config's key_rope_freqs (the
 * scheme section ends with them); v11: bit 4 with bit 0, the two-state trellis tables
 * (TQ_TRELLIS_TWO_STATE); zero before. */
#define CF_FLAG_TRELLIS 1u
#define CF_FLAG_PAIRS_SHIFT 1
#define CF_FLAG_PAIRS (3u << CF_FLAG_PAIRS_SHIFT)
#define CF_FLAG_FREQS 8u
#define CF_FLAG_TRELLIS_TWO_STATE 16u
#define CF_VERSION_MIN 1u
#define CF_HEADER_BYTES 64u
#define CF_SCHEME_FIXED 64u  /* layer + edge records, six u32, seed */
#define CF_LAYER_SCHEME 16u  /* one layer scheme record */
#define CF_LAYER_WINDOW 8u   /* one layer's window (v4) */
#define CF_LAYER_FIXED 24u   /* len, n_comp, flags */
#define CF_SECTION_HEAD 8u   /* scheme section: tag, payload bytes */
#define CF_LAYER_HEAD 16u    /* layer section: tag, index, payload bytes */
#define CF_CRC 4u
/* The largest layer window a file holds (tq_kv_cache_config.layer_windows). */
#define CF_WINDOW_MAX ((uint64_t)TQ_KV_WINDOW_MAX)

extern const uint8_t tq_cf_magic[8], tq_cf_tag_scheme[4], tq_cf_tag_layer[4];

/* CRC32C (Castagnoli): the slicing-by-8 tables. */
typedef struct tq_cf_crc {
    uint32_t t[8][256];
} tq_cf_crc;
void tq_cf_crc_init(tq_cf_crc *c);
/* Continues a CRC register (start from 0xFFFFFFFF; the checksum is the final value xor ~0). */
uint32_t tq_cf_crc_update(const tq_cf_crc *c, uint32_t r, const uint8_t *p, size_t n);
/* The CRC32C of n bytes. */
uint32_t tq_cf_crc_of(const tq_cf_crc *c, const uint8_t *p, size_t n);

static inline void tq_cf_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void tq_cf_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t tq_cf_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t tq_cf_get_u64(const uint8_t *p) {
    return (uint64_t)tq_cf_get_u32(p) | (uint64_t)tq_cf_get_u32(p + 4) << 32;
}
/* a·b and a + b, or SIZE_MAX when they overflow. */
static inline size_t tq_cf_mul_sat(size_t a, size_t b) {
    return a && b > SIZE_MAX / a ? SIZE_MAX : a * b;
}
static inline size_t tq_cf_add_sat(size_t a, size_t b) { return b > SIZE_MAX - a ? SIZE_MAX : a + b; }

/* Payload bytes of the scheme section of a file of this version, header flags and key dim. */
size_t tq_cf_scheme_payload(int n_layers, uint32_t version, uint32_t flags, int dk);
/* Payload bytes of layer i's section for (len, n_comp) and n_fast fast pairs (v10; the key
 * transform's list after its state; v12: then ρ per head where the layer predicts keys):
 * SIZE_MAX on overflow. */
size_t tq_cf_layer_payload(const tq_kv_cache *c, int i, uint64_t len, uint64_t n_comp, int n_fast);

/* A layer scheme record (16 bytes) of l, and back: 0 when a field holds a value no writer of
 * that version produces. */
void tq_cf_put_layer_scheme(uint8_t *p, const tq_kv_layer_scheme *l);
int tq_cf_get_layer_scheme(const uint8_t *p, uint32_t version, tq_kv_layer_scheme *l);
/* 1 if a and b write the same record. */
int tq_cf_same_layer_scheme(const tq_kv_layer_scheme *a, const tq_kv_layer_scheme *b);

/* Reads one layer section's payload p (n bytes, checksum already verified) into layer i of a
 * new cache. Errors: TQ_ERR_FORMAT, TQ_ERR_CORRUPT, TQ_ERR_NOMEM. */
tq_status tq_cf_read_layer(tq_kv_cache *c, int i, const uint8_t *p, size_t n, uint32_t version);

#endif

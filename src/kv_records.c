/*
 * The record formats of the KV cache: which codec (or block format) stores each of K and V of a
 * layer, and the bytes per token. The layout of a record is its owner's: the codec describes a
 * TurboQuant record (tq_codec_describe), the block formats f16 / q8_0 / q4_0
 * (kernels/blockq.h); the cache keeps that description (tq_kv_tensor) and encodes and decodes
 * through them. The rotated formats q8_0r / q4_0r are a q8_0 / q4_0 record of R·v, R the
 * seeded randomized Walsh–Hadamard rotation of rotation.c with one round (two rounds of the
 * block Hadamard at a dim that is not a power of two): the description is the block format's
 * with the rotation beside it (tq_record.rot), which this file creates and frees
 * (doc/kvcache.md §2).
 */
#include <math.h>
#include <string.h>

#include "codec_record.h"
#include "internal.h"
#include "kernels/blockq.h"
#include "kvcache_internal.h"

/* The codec of a TURBO tensor; split: keys with a key split, which turns a fractional width
 * k + f ≤ 4 into TQ_SPLIT_BLOCK (f·d channels at k + 1, the rest at k) where that takes no
 * more bytes (tq_kv_layer_scheme.key_split). */
static void turbo_config(tq_codec_config *cc, int dim, float bits, tq_variant variant, int norm,
                         uint64_t seed, int split, int trellis) {
    tq_codec_config_init(cc, dim, bits, variant);
    cc->norm_correction = variant == TQ_VARIANT_MSE ? norm : 0;
    cc->trellis = variant == TQ_VARIANT_MSE ? trellis : 0; /* PROD keys stay Lloyd-Max */
    cc->seed = seed;
    if (split) tq_key_split_codec(cc); /* the key transform's rule (key_transform.c) */
}

int tq_kv_key_split_resolve(const tq_kv_layer_scheme *l, int trellis, int dk) {
    if (l->key_split != TQ_KV_KEY_SPLIT_AUTO) return l->key_split;
    return !(l->key_bits == floorf(l->key_bits) && !trellis && dk < TQ_KV_KEY_SPLIT_WHOLE_MIN_DIM);
}

int tq_kv_key_split_applies(const tq_kv_layer_scheme *l, int trellis, int dk) {
    if (l->key_format != TQ_KV_TURBO || !l->key_scale || !tq_kv_key_split_resolve(l, trellis, dk) ||
        dk < TQ_MIN_DIM || dk > TQ_MAX_DIM)
        return 0;
    tq_codec_config cc;
    turbo_config(&cc, dk, l->key_bits, l->key_variant, l->norm_correction, 0, 1, 0);
    return cc.split == TQ_SPLIT_BLOCK;
}

int tq_kv_layer_scheme_key_split(const tq_kv_layer_scheme *l, int trellis, int head_dim_k) {
    return l != NULL && tq_kv_key_split_applies(l, trellis != 0, head_dim_k);
}

/* The block format that stores a rotated format's records; f itself for the others. */
static tq_kv_format block_format(tq_kv_format f) {
    return f == TQ_KV_Q8_0R ? TQ_KV_Q8_0 : f == TQ_KV_Q4_0R ? TQ_KV_Q4_0 : f;
}

/* The seed of a rotated tensor's rotation: the scheme's seed, apart for keys and values. */
#define ROT_SEED_KEY 0x526F744Bull   /* "RotK" */
#define ROT_SEED_VALUE 0x526F7456ull /* "RotV" */
/* Rounds of the rotation: one at a power-of-two dim, two of the block Hadamard otherwise (each
 * coordinate mixed). Not TurboQuant's three: a round maps a vector of a few large channels to a
 * nearly flat one, which an absmax block stores almost exactly, while three rounds make the
 * coordinates Gaussian (the codebooks' assumption); measured in doc/rotation.md. */
#define ROT_ROUNDS(dim) ((dim) & ((dim) - 1) ? 2 : 1)

static tq_status tensor_bytes(tq_kv_format f, int dim, float bits, tq_variant variant, int norm,
                              int split, size_t *bytes) {
    if (dim < TQ_MIN_DIM || dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (f == TQ_KV_TURBO) {
        tq_codec_config cc;
        turbo_config(&cc, dim, bits, variant, norm, 0, split, 0); /* same bytes either way */
        return tq_codec_config_bytes(&cc, bytes);
    }
    tq_record x;
    tq_status st = tq_record_plain(&x, block_format(f), dim);
    *bytes = x.rec_bytes;
    return st;
}

tq_status tq_kv_layer_scheme_bytes(const tq_kv_layer_scheme *l, int dk, int dv, size_t *kb,
                                   size_t *vb) {
    if (!l || !kb || !vb) return TQ_ERR_NULL;
    if (l->key_variant != TQ_VARIANT_MSE && l->key_variant != TQ_VARIANT_PROD)
        return TQ_ERR_VARIANT;
    tq_status st = tensor_bytes(l->key_format, dk, l->key_bits, l->key_variant,
                                l->norm_correction, l->key_scale && l->key_split, kb);
    if (st) return st;
    return tensor_bytes(l->value_format, dv, l->value_bits, TQ_VARIANT_MSE, l->norm_correction,
                        0, vb);
}

/* Sets up a tensor: its record description from the codec (TURBO) or the block formats, with
 * the rotation of a rotated format. */
tq_status tq_kv_tensor_init(tq_kv_tensor *x, tq_kv_format f, int dim, float bits,
                            tq_variant variant, int norm, uint64_t seed, int is_key, int split,
                            int trellis) {
    memset(x, 0, sizeof *x);
    if (f != TQ_KV_TURBO) {
        tq_status st = tq_record_plain(x, block_format(f), dim);
        if (st || block_format(f) == f) return st;
        st = tq_rotation_create_rounds(&x->rot, dim, seed ^ (is_key ? ROT_SEED_KEY : ROT_SEED_VALUE),
                                       TQ_ROTATION_AUTO, ROT_ROUNDS(dim));
        if (st) memset(x, 0, sizeof *x);
        return st;
    }
    size_t bytes;
    tq_status st = tensor_bytes(f, dim, bits, variant, norm, split, &bytes);
    if (st) return st;
    tq_codec_config cc;
    tq_codec *codec;
    turbo_config(&cc, dim, bits, variant, norm, seed, split, trellis);
    st = tq_codec_create(&codec, &cc);
    if (st) return st;
    st = tq_codec_describe(codec, is_key, x);
    if (st) tq_codec_free(codec);
    return st;
}

void tq_kv_tensor_free(tq_kv_tensor *x) {
    tq_codec_free(x->codec);
    tq_rotation_free(x->rot);
    x->codec = NULL;
    x->rot = NULL;
}

tq_status tq_kv_tensor_encode(const tq_kv_tensor *x, const float *v, uint8_t *rec) {
    if (x->format == TQ_KV_TURBO) return tq_codec_encode(x->codec, v, 1, rec, x->rec_bytes);
    if (x->rot) {
        float r[TQ_MAX_DIM];
        tq_rotation_forward(x->rot, v, r, 1);
        tq_blockq_encode(x, r, rec);
    } else {
        tq_blockq_encode(x, v, rec);
    }
    return TQ_OK;
}

/* Decodes one record to the original basis (the reference path: no shortcut). */
tq_status tq_kv_tensor_decode(const tq_kv_tensor *x, const uint8_t *rec, float *out) {
    if (x->format == TQ_KV_TURBO) return tq_codec_decode(x->codec, rec, 1, out, (size_t)x->dim);
    tq_blockq_decode(x, rec, out);
    if (x->rot) tq_rotation_inverse(x->rot, out, out, 1);
    return TQ_OK;
}

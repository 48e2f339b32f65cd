/* Tokenizer entry points (GGUF "llama" vocabularies: SentencePiece, as llama.cpp's SPM
 * tokenizer; GGUF "gpt2": byte-level BPE, as llama.cpp's BPE tokenizer). See tokenizer.h for the behaviour and the contracts, tokenizer_internal.h for
 * the files. Layout of this file:
 *   status names / hashing and the token table / create & free / scratch / encode / decode. */
#include "tokenizer_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Status names
 * ------------------------------------------------------------------------------------- */

const char *tokenizer_status_name(int status) {
    switch (status) {
    case TOKENIZER_OK: return "TOKENIZER_OK";
    case TOKENIZER_ERR_INVALID_ARG: return "TOKENIZER_ERR_INVALID_ARG";
    case TOKENIZER_ERR_OUT_OF_MEMORY: return "TOKENIZER_ERR_OUT_OF_MEMORY";
    case TOKENIZER_ERR_BAD_VOCAB: return "TOKENIZER_ERR_BAD_VOCAB";
    case TOKENIZER_ERR_BAD_TOKEN_ID: return "TOKENIZER_ERR_BAD_TOKEN_ID";
    case TOKENIZER_ERR_BUFFER_TOO_SMALL: return "TOKENIZER_ERR_BUFFER_TOO_SMALL";
    case TOKENIZER_ERR_INPUT_TOO_LONG: return "TOKENIZER_ERR_INPUT_TOO_LONG";
    case TOKENIZER_ERR_NO_BYTE_TOKEN: return "TOKENIZER_ERR_NO_BYTE_TOKEN";
    case TOKENIZER_ERR_REGEX: return "TOKENIZER_ERR_REGEX";
    default: return "TOKENIZER_ERR_UNKNOWN";
    }
}

/* ---------------------------------------------------------------------------------------
 * Hashing and the token table
 * ------------------------------------------------------------------------------------- */

/* FNV-1a, 32 bit: tokens are short, so a byte loop is as fast as anything wider. */
uint32_t tok_hash_continue(uint32_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

static uint32_t hash_bytes(const unsigned char *p, size_t n) {
    return tok_hash_continue(TOK_FNV_INIT, p, n);
}

int32_t tok_lookup_token(const tokenizer *tok, const char *s, size_t n) {
    if (n > tok->max_token_len) return -1;
    uint32_t h = hash_bytes((const unsigned char *)s, n);
    for (uint32_t i = h & tok->slot_mask;; i = (i + 1) & tok->slot_mask) {
        const tok_slot *slot = &tok->slots[i];
        if (slot->id < 0) return -1;
        if (slot->hash == h) {
            uint32_t len;
            const char *t = tok_token_text(tok, slot->id, &len);
            if (len == n && memcmp(t, s, n) == 0) return slot->id;
        }
    }
}

/* Inserts id; an existing equal text is overwritten, so the highest id wins (llama.cpp
 * fills its token_to_id map in id order with assignment). */
static void insert_token(tokenizer *tok, int32_t id) {
    uint32_t n;
    const char *s = tok_token_text(tok, id, &n);
    uint32_t h = hash_bytes((const unsigned char *)s, n);
    for (uint32_t i = h & tok->slot_mask;; i = (i + 1) & tok->slot_mask) {
        tok_slot *slot = &tok->slots[i];
        if (slot->id < 0) {
            slot->hash = h;
            slot->id = id;
            return;
        }
        if (slot->hash == h) {
            uint32_t len;
            const char *t = tok_token_text(tok, slot->id, &len);
            if (len == n && memcmp(t, s, n) == 0) {
                slot->id = id;
                return;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Create / free
 * ------------------------------------------------------------------------------------- */

static int id_ok(int32_t id, int32_t n_vocab) { return id >= -1 && id < n_vocab; }

static int build(tokenizer *tok, const tok_vocab *v) {
    int32_t n = v->n_vocab;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (v->text_lens[i] > 0 && !v->texts[i]) return TOKENIZER_ERR_BAD_VOCAB;
        if (v->types && (v->types[i] < 0 || v->types[i] > TOKENIZER_TYPE_BYTE))
            return TOKENIZER_ERR_BAD_VOCAB;
        total += v->text_lens[i];
    }
    if (total >= UINT32_MAX) return TOKENIZER_ERR_BAD_VOCAB;

    tok->n_vocab = n;
    tok->blob = malloc(total ? (size_t)total : 1);
    tok->offsets = malloc(((size_t)n + 1) * sizeof *tok->offsets);
    tok->scores = malloc((size_t)n * sizeof *tok->scores);
    tok->types = malloc((size_t)n);
    tok->slot_mask = tok_pow2_at_least(2 * (uint64_t)n) - 1;
    tok->slots = malloc(((size_t)tok->slot_mask + 1) * sizeof *tok->slots);
    if (!tok->blob || !tok->offsets || !tok->scores || !tok->types || !tok->slots)
        return TOKENIZER_ERR_OUT_OF_MEMORY;

    uint32_t off = 0;
    tok->max_token_len = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len = v->text_lens[i];
        tok->offsets[i] = off;
        if (len) memcpy(tok->blob + off, v->texts[i], len);
        off += len;
        if (len > tok->max_token_len) tok->max_token_len = len;
        float s = v->scores ? v->scores[i] : 0.0f;
        tok->scores[i] = isnan(s) ? -FLT_MAX : s;
        tok->types[i] = v->types ? (uint8_t)v->types[i] : TOKENIZER_TYPE_NORMAL;
    }
    tok->offsets[n] = off;
    if (v->strip) {
        tok->strip = malloc((size_t)n);
        if (!tok->strip) return TOKENIZER_ERR_OUT_OF_MEMORY;
        memcpy(tok->strip, v->strip, (size_t)n);
    }

    for (uint32_t i = 0; i <= tok->slot_mask; i++) tok->slots[i].id = -1;
    for (int32_t i = 0; i < n; i++) insert_token(tok, i);

    spm_build_byte_fallback(tok, v->unk_id);
    int rc = tok_build_specials(tok);
    return rc == TOKENIZER_OK ? bpe_build(tok, v) : rc;
}

int tokenizer_create(const tok_vocab *v, tokenizer **out) {
    if (!out) return TOKENIZER_ERR_INVALID_ARG;
    *out = NULL;
    if (!v) return TOKENIZER_ERR_INVALID_ARG;
    if (v->n_vocab < 1 || !v->texts || !v->text_lens) return TOKENIZER_ERR_BAD_VOCAB;
    if (!id_ok(v->bos_id, v->n_vocab) || !id_ok(v->eos_id, v->n_vocab) ||
        !id_ok(v->unk_id, v->n_vocab) || !id_ok(v->pad_id, v->n_vocab))
        return TOKENIZER_ERR_BAD_VOCAB;
    if ((v->add_bos && v->bos_id < 0) || (v->add_eos && v->eos_id < 0))
        return TOKENIZER_ERR_BAD_VOCAB;

    tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return TOKENIZER_ERR_OUT_OF_MEMORY;
    tok->bos_id = v->bos_id;
    tok->eos_id = v->eos_id;
    tok->unk_id = v->unk_id;
    tok->pad_id = v->pad_id;
    tok->add_bos = v->add_bos;
    tok->add_eos = v->add_eos;
    tok->add_space_prefix = v->add_space_prefix;
    int rc = build(tok, v);
    if (rc == TOKENIZER_OK) rc = tokenizer_scratch_create(&tok->own_scratch);
    if (rc != TOKENIZER_OK) {
        tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return TOKENIZER_OK;
}

void tokenizer_free(tokenizer *tok) {
    if (!tok) return;
    free(tok->blob);
    free(tok->offsets);
    free(tok->scores);
    free(tok->types);
    free(tok->strip);
    free(tok->slots);
    free(tok->specials);
    free(tok->node_special);
    free(tok->edges);
    bpe_free(tok);
    tokenizer_scratch_free(tok->own_scratch);
    free(tok);
}

int32_t tokenizer_n_vocab(const tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t tokenizer_bos_id(const tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t tokenizer_eos_id(const tokenizer *tok) { return tok ? tok->eos_id : -1; }

int tokenizer_add_bos(const tokenizer *tok) { return tok != NULL && tok->add_bos; }

int tokenizer_token_type_of(const tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return -1;
    return tok->types[id];
}

int32_t tokenizer_find_token(const tokenizer *tok, const char *text, size_t len) {
    if (!tok || (!text && len)) return -1;
    return tok_lookup_token(tok, text ? text : "", len);
}

/* ---------------------------------------------------------------------------------------
 * Scratch
 * ------------------------------------------------------------------------------------- */

int tokenizer_scratch_create(tokenizer_scratch **out) {
    if (!out) return TOKENIZER_ERR_INVALID_ARG;
    *out = calloc(1, sizeof **out);
    return *out ? TOKENIZER_OK : TOKENIZER_ERR_OUT_OF_MEMORY;
}

void tokenizer_scratch_free(tokenizer_scratch *s) {
    if (!s) return;
    free(s->esc);
    free(s->syms);
    free(s->heap);
    free(s->frags[0]);
    free(s->frags[1]);
    free(s->seen);
    free(s->occ);
    free(s->occ_first);
    free(s->occ_last);
    free(s->spans[0]);
    free(s->spans[1]);
    free(s->san);
    tok_pretok_scratch_free(s);
    free(s);
}

/* Grows *buf to hold at least need elements of size elem (1.5x steps); 0 on failure. */
int tok_grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t new_cap = *cap + *cap / 2;
    if (new_cap < need) new_cap = need;
    if (new_cap < 16) new_cap = 16;
    if (new_cap > SIZE_MAX / elem) return 0;
    void *p = realloc(*buf, new_cap * elem);
    if (!p) return 0;
    *buf = p;
    *cap = new_cap;
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * Encode
 * ------------------------------------------------------------------------------------- */

size_t tokenizer_encode_bound(const tokenizer *tok, size_t len) {
    if (!tok || len > TOKENIZER_MAX_TEXT_BYTES) return 0;
    return tok->add_space_prefix ? 4 * len + 5 : 3 * len + 2;
}

static int check_encode_args(const tokenizer *tok, const char *text, size_t len,
                             unsigned flags, const int32_t *out_ids, size_t capacity,
                             const size_t *n_out) {
    if (!tok || !n_out || (!text && len) || (!out_ids && capacity)) return TOKENIZER_ERR_INVALID_ARG;
    if (flags & ~(TOKENIZER_ENCODE_ADD_SPECIAL | TOKENIZER_ENCODE_PARSE_SPECIAL))
        return TOKENIZER_ERR_INVALID_ARG;
    if (len > TOKENIZER_MAX_TEXT_BYTES) return TOKENIZER_ERR_INPUT_TOO_LONG;
    return TOKENIZER_OK;
}

/* Emits the ids of the fragments: BOS, then raw fragments through BPE (with the space
 * prefix at the start and after each special, as llama.cpp's SPM branch), then EOS. */
static int emit_fragments(const tokenizer *tok, const fragment *frags, size_t n_frags,
                          const char *text, unsigned flags, fragment_bpe_fn bpe, void *state,
                          id_sink *k) {
    int add_special = (flags & TOKENIZER_ENCODE_ADD_SPECIAL) != 0;
    if (add_special && tok->add_bos) tok_sink_put(k, tok->bos_id);
    int prev_special = 1;
    for (size_t f = 0; f < n_frags; f++) {
        if (frags[f].token >= 0) {
            tok_sink_put(k, frags[f].token);
            prev_special = 1;
            continue;
        }
        int rc = bpe(tok, state, text + frags[f].off, frags[f].len,
                     tok->add_space_prefix && prev_special, k);
        if (rc != TOKENIZER_OK) return rc;
        prev_special = 0;
    }
    if (add_special && tok->add_eos) tok_sink_put(k, tok->eos_id);
    return TOKENIZER_OK;
}

static int finish(int rc, const id_sink *k, size_t capacity, size_t *n_out) {
    if (rc != TOKENIZER_OK) {
        *n_out = 0;
        return rc;
    }
    *n_out = k->n;
    return k->n > capacity ? TOKENIZER_ERR_BUFFER_TOO_SMALL : TOKENIZER_OK;
}

int tokenizer_encode_with(const tokenizer *tok, tokenizer_scratch *scratch, const char *text,
                          size_t len, unsigned flags, int32_t *out_ids, size_t capacity,
                          size_t *n_out) {
    int rc = check_encode_args(tok, text, len, flags, out_ids, capacity, n_out);
    if (rc != TOKENIZER_OK) {
        if (n_out) *n_out = 0;
        return rc;
    }
    if (!scratch) {
        *n_out = 0;
        return TOKENIZER_ERR_INVALID_ARG;
    }
    size_t n_frags;
    id_sink k = {out_ids, capacity, 0};
    rc = tok_partition(tok, scratch, text, len, flags, &n_frags);
    if (rc == TOKENIZER_OK)
        rc = emit_fragments(tok, scratch->frags[0], n_frags, text, flags,
                            tok->model == TOKENIZER_MODEL_BPE ? bpe_encode_fragment
                                                              : spm_encode_fragment,
                            scratch, &k);
    return finish(rc, &k, capacity, n_out);
}

int tokenizer_encode(tokenizer *tok, const char *text, size_t len, unsigned flags,
                     int32_t *out_ids, size_t capacity, size_t *n_out) {
    return tokenizer_encode_with(tok, tok ? tok->own_scratch : NULL, text, len, flags, out_ids,
                                 capacity, n_out);
}

int tokenizer_encode_ref(const tokenizer *tok, const char *text, size_t len, unsigned flags,
                         int32_t *out_ids, size_t capacity, size_t *n_out) {
    int rc = check_encode_args(tok, text, len, flags, out_ids, capacity, n_out);
    if (rc != TOKENIZER_OK) {
        if (n_out) *n_out = 0;
        return rc;
    }
    fragment *frags;
    size_t n_frags;
    id_sink k = {out_ids, capacity, 0};
    rc = tok_partition_ref(tok, text, len, flags, &frags, &n_frags);
    if (rc == TOKENIZER_OK) {
        rc = emit_fragments(tok, frags, n_frags, text, flags,
                            tok->model == TOKENIZER_MODEL_BPE ? bpe_encode_fragment_ref
                                                              : spm_encode_fragment_ref,
                            NULL, &k);
        free(frags);
    }
    return finish(rc, &k, capacity, n_out);
}

/* ---------------------------------------------------------------------------------------
 * Decode (llama.cpp token_to_piece / detokenize)
 * ------------------------------------------------------------------------------------- */

static void put_piece(const tokenizer *tok, int32_t id, int render_special, int strip,
                      char *out, size_t capacity, size_t *pos) {
    if (tok->model == TOKENIZER_MODEL_BPE)
        bpe_put_piece(tok, id, render_special, strip, out, capacity, pos);
    else
        spm_put_piece(tok, id, render_special, strip, out, capacity, pos);
}

int tokenizer_token_to_piece(const tokenizer *tok, int32_t id, unsigned flags, char *out,
                             size_t capacity, size_t *len_out) {
    if (!tok || !len_out || (!out && capacity)) return TOKENIZER_ERR_INVALID_ARG;
    *len_out = 0;
    if (id < 0 || id >= tok->n_vocab) return TOKENIZER_ERR_BAD_TOKEN_ID;
    int render = (flags & TOKENIZER_DECODE_RENDER_SPECIAL) != 0;
    size_t n = 0;
    put_piece(tok, id, render, 0, NULL, 0, &n);
    *len_out = n;
    if (n > capacity) return TOKENIZER_ERR_BUFFER_TOO_SMALL;
    n = 0;
    put_piece(tok, id, render, 0, out, capacity, &n);
    return TOKENIZER_OK;
}

int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                     char *out, size_t capacity, size_t *len_out) {
    if (!tok || !len_out || (!ids && n) || (!out && capacity)) return TOKENIZER_ERR_INVALID_ARG;
    *len_out = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) return TOKENIZER_ERR_BAD_TOKEN_ID;
    int render = (flags & TOKENIZER_DECODE_RENDER_SPECIAL) != 0;
    int strip = tok->add_space_prefix;
    if (flags & TOKENIZER_DECODE_REMOVE_SPECIAL) {
        if (tok->add_bos && n > 0 && ids[0] == tok->bos_id) {
            strip = 0;
            ids++;
            n--;
        }
        if (tok->add_eos && n > 0 && ids[n - 1] == tok->eos_id) n--;
    }
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        put_piece(tok, ids[i], render, strip, out, capacity, &pos);
        strip = 0;
    }
    *len_out = pos;
    return pos > capacity ? TOKENIZER_ERR_BUFFER_TOO_SMALL : TOKENIZER_OK;
}

/* Byte-level BPE (GGUF "gpt2" vocabularies), as llama.cpp's BPE tokenizer: each raw fragment
 * is split into words by the pre-tokenizer (tokenizer_pretok.c); each word's bytes become
 * GPT-2's byte characters (one symbol per byte); adjacent symbols are merged by the rank of
 * the pair in tokenizer.ggml.merges (lowest rank first, ties to the leftmost pair) until no
 * pair has a rank; each final symbol is a token. doc/tokenizer.md has the details. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Build: the byte mapping and the merge table
 * ------------------------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF are
 * their own code points; the other 68 bytes, in byte order, are U+0100, U+0101, ... */
static void build_byte_map(tokenizer *tok) {
    for (int cp = 0; cp < 324; cp++) tok->cp_byte[cp] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : 256 + extra++;
        tok->cp_byte[cp] = (int16_t)b;
        if (cp < 0x80) {
            tok->byte_enc[b][0] = (char)cp;
            tok->byte_enc_len[b] = 1;
        } else {
            tok->byte_enc[b][0] = (char)(0xC0 | (cp >> 6));
            tok->byte_enc[b][1] = (char)(0x80 | (cp & 0x3F));
            tok->byte_enc_len[b] = 2;
        }
    }
}

/* Rank of the merge (a, b), or -1. */
static int32_t merge_rank(const tokenizer *tok, const char *a, size_t la, const char *b,
                          size_t lb) {
    if (tok->n_merges == 0) return -1;
    uint32_t h = tok_hash_continue(TOK_FNV_INIT, a, la);
    h = tok_hash_continue(h, " ", 1);
    h = tok_hash_continue(h, b, lb);
    for (uint32_t i = h & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
        const tok_slot *slot = &tok->merge_slots[i];
        if (slot->id < 0) return -1;
        if (slot->hash != h) continue;
        int32_t m = slot->id;
        const char *t = tok->merge_blob + tok->merge_off[m];
        if (tok->merge_split[m] == la && tok->merge_off[m + 1] - tok->merge_off[m] == la + 1 + lb &&
            memcmp(t, a, la) == 0 && memcmp(t + la + 1, b, lb) == 0)
            return m;
    }
}

/* Inserts merge m unless an equal pair is there already (llama.cpp: emplace, first wins). */
static void insert_merge(tokenizer *tok, int32_t m) {
    const char *t = tok->merge_blob + tok->merge_off[m];
    uint32_t len = tok->merge_off[m + 1] - tok->merge_off[m], la = tok->merge_split[m];
    if (merge_rank(tok, t, la, t + la + 1, len - la - 1) >= 0) return;
    uint32_t h = tok_hash_continue(TOK_FNV_INIT, t, len);
    uint32_t i = h & tok->merge_mask;
    while (tok->merge_slots[i].id >= 0) i = (i + 1) & tok->merge_mask;
    tok->merge_slots[i] = (tok_slot){h, m};
}

int bpe_build(tokenizer *tok, const tok_vocab *v) {
    tok->model = v->model;
    tok->pre = v->pre;
    if (v->model == TOKENIZER_MODEL_SPM) return TOKENIZER_OK;
    if (v->model != TOKENIZER_MODEL_BPE || v->pre < 0 || v->pre >= TOKENIZER_PRE_COUNT ||
        v->n_merges < 0 || (v->n_merges > 0 && (!v->merges || !v->merge_lens)))
        return TOKENIZER_ERR_BAD_VOCAB;
    build_byte_map(tok);
    tok->ignore_merges = v->pre == TOKENIZER_PRE_LLAMA3;
    int32_t n = v->n_merges;
    uint64_t total = 0;
    for (int32_t m = 0; m < n; m++) {
        if (v->merge_lens[m] > 0 && !v->merges[m]) return TOKENIZER_ERR_BAD_VOCAB;
        total += v->merge_lens[m];
    }
    if (total >= UINT32_MAX) return TOKENIZER_ERR_BAD_VOCAB;
    tok->merge_blob = malloc(total ? (size_t)total : 1);
    tok->merge_off = malloc(((size_t)n + 1) * sizeof *tok->merge_off);
    tok->merge_split = malloc((n ? (size_t)n : 1) * sizeof *tok->merge_split);
    tok->merge_mask = tok_pow2_at_least(2 * (uint64_t)n) - 1;
    tok->merge_slots = malloc(((size_t)tok->merge_mask + 1) * sizeof *tok->merge_slots);
    if (!tok->merge_blob || !tok->merge_off || !tok->merge_split || !tok->merge_slots)
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i <= tok->merge_mask; i++) tok->merge_slots[i].id = -1;
    uint32_t off = 0;
    for (int32_t m = 0; m < n; m++) {
        uint32_t len = v->merge_lens[m];
        tok->merge_off[m] = off;
        if (len) memcpy(tok->merge_blob + off, v->merges[m], len);
        off += len;
    }
    tok->merge_off[n] = off;
    tok->n_merges = n;
    for (int32_t m = 0; m < n; m++) {
        const char *t = tok->merge_blob + tok->merge_off[m];
        uint32_t len = tok->merge_off[m + 1] - tok->merge_off[m];
        /* llama.cpp splits at the first ' ' after byte 0; without one the pair is ("", ""),
         * which no symbol matches: such a merge never applies. */
        const char *sp = len >= 2 ? memchr(t + 1, ' ', len - 1) : NULL;
        tok->merge_split[m] = sp ? (uint32_t)(sp - t) : UINT32_MAX;
        if (sp) insert_merge(tok, m);
    }
    return tok_pretok_create(v->pre, &tok->pretok);
}

void bpe_free(tokenizer *tok) {
    free(tok->merge_blob);
    free(tok->merge_off);
    free(tok->merge_split);
    free(tok->merge_slots);
    tok_pretok_free(tok->pretok);
}

/* ---------------------------------------------------------------------------------------
 * Encode
 * ------------------------------------------------------------------------------------- */

/* Writes the byte characters of w[0..n) to esc (room for 2 n bytes); returns their length. */
static size_t byte_encode(const tokenizer *tok, char *esc, const char *w, size_t n) {
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)w[i];
        esc[j] = tok->byte_enc[b][0];
        if (tok->byte_enc_len[b] == 2) esc[j + 1] = tok->byte_enc[b][1];
        j += tok->byte_enc_len[b];
    }
    return j;
}

/* The token of a final symbol; if its text is no token, the one-byte tokens of its bytes
 * that exist (llama.cpp: the others are dropped; a vocabulary with every byte character and
 * every merge result as a token never gets here). */
static void emit_symbol(const tokenizer *tok, id_sink *k, const char *p, size_t n) {
    int32_t id = tok_lookup_token(tok, p, n);
    if (id >= 0) {
        tok_sink_put(k, id);
        return;
    }
    for (size_t j = 0; j < n; j++) {
        id = tok_lookup_token(tok, p + j, 1);
        if (id >= 0) tok_sink_put(k, id);
    }
}

/* tok_pair_fn: (a, b) is a merge; minus its rank (lower ranks first). */
static int bpe_pair(const tokenizer *tok, const char *a, size_t la, const char *b, size_t lb,
                    double *priority) {
    int32_t rank = merge_rank(tok, a, la, b, lb);
    if (rank < 0) return 0;
    *priority = -(double)rank;
    return 1;
}

/* One word w[0..wl) (wl >= 1) with the priority queue (llama.cpp llm_tokenizer_bpe_session). */
static int bpe_word(const tokenizer *tok, tokenizer_scratch *s, const char *w, size_t wl,
                    id_sink *k) {
    if (!tok_grow((void **)&s->esc, &s->esc_cap, 2 * wl, 1) ||
        !tok_grow((void **)&s->syms, &s->syms_cap, wl, sizeof *s->syms))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    size_t n = byte_encode(tok, s->esc, w, wl);
    if (tok->ignore_merges) {
        int32_t id = tok_lookup_token(tok, s->esc, n);
        if (id >= 0) {
            tok_sink_put(k, id);
            return TOKENIZER_OK;
        }
    }
    int32_t n_syms = (int32_t)wl, start = 0;
    for (int32_t i = 0; i < n_syms; i++) {
        int32_t cl = tok->byte_enc_len[(unsigned char)w[i]];
        s->syms[i] = (spm_symbol){start, cl, i - 1, i + 1 == n_syms ? -1 : i + 1};
        start += cl;
    }
    int rc = tok_merge(tok, s, n_syms, bpe_pair);
    for (int32_t i = 0; i != -1 && rc == TOKENIZER_OK; i = s->syms[i].next)
        emit_symbol(tok, k, s->esc + s->syms[i].start, (size_t)s->syms[i].n);
    return rc;
}

int bpe_encode_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                        int prefix, id_sink *k) {
    (void)prefix;
    tokenizer_scratch *s = state;
    const uint32_t *words;
    size_t n_words;
    int rc = tok_pretok_split(tok->pretok, s, text, len, 1, &words, &n_words);
    for (size_t i = 0; i < n_words && rc == TOKENIZER_OK; i++)
        rc = bpe_word(tok, s, text + words[2 * i], words[2 * i + 1], k);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Reference: the literal algorithm (rescan every adjacent pair, merge the best, repeat)
 * ------------------------------------------------------------------------------------- */

static int bpe_word_ref(const tokenizer *tok, const char *w, size_t wl, id_sink *k) {
    char *esc = malloc(2 * wl);
    ref_symbol *syms = malloc(wl * sizeof *syms);
    if (!esc || !syms) {
        free(esc);
        free(syms);
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    }
    size_t n = byte_encode(tok, esc, w, wl), m = 0;
    if (tok->ignore_merges && tok_lookup_token(tok, esc, n) >= 0) {
        syms[m++] = (ref_symbol){0, n};
    } else {
        for (size_t off = 0; off < n; m++) { /* one character per byte */
            size_t cl = tok_utf8_len((unsigned char)esc[off]);
            syms[m] = (ref_symbol){off, cl};
            off += cl;
        }
        m = tok_merge_ref(tok, esc, syms, m, bpe_pair);
    }
    for (size_t i = 0; i < m; i++) emit_symbol(tok, k, esc + syms[i].start, syms[i].n);
    free(esc);
    free(syms);
    return TOKENIZER_OK;
}

int bpe_encode_fragment_ref(const tokenizer *tok, void *state, const char *text, size_t len,
                            int prefix, id_sink *k) {
    (void)state;
    (void)prefix;
    tokenizer_scratch *s;
    int rc = tokenizer_scratch_create(&s);
    if (rc != TOKENIZER_OK) return rc;
    const uint32_t *words;
    size_t n_words;
    rc = tok_pretok_split(tok->pretok, s, text, len, 0, &words, &n_words); /* no JIT */
    for (size_t i = 0; i < n_words && rc == TOKENIZER_OK; i++)
        rc = bpe_word_ref(tok, text + words[2 * i], words[2 * i + 1], k);
    tokenizer_scratch_free(s);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Pieces (llama.cpp token_to_piece for BPE)
 * ------------------------------------------------------------------------------------- */

void bpe_put_piece(const tokenizer *tok, int32_t id, int render_special, int strip, char *out,
                   size_t capacity, size_t *pos) {
    if (tok->types[id] != TOKENIZER_TYPE_NORMAL) { /* the same rules as SentencePiece */
        spm_put_piece(tok, id, render_special, strip, out, capacity, pos);
        return;
    }
    uint32_t n;
    const unsigned char *t = (const unsigned char *)tok_token_text(tok, id, &n);
    for (uint32_t i = 0; i < n;) {
        /* A byte character is U+0021..U+0143: one byte, or two with lead 0xC2..0xC5. */
        int cp = -1;
        uint32_t cl = 1;
        if (t[i] < 0x80) {
            cp = t[i];
        } else if (t[i] >= 0xC2 && t[i] <= 0xC5 && i + 1 < n && (t[i + 1] & 0xC0) == 0x80) {
            cp = ((t[i] & 0x1F) << 6) | (t[i + 1] & 0x3F);
            cl = 2;
        } else {
            cl = (uint32_t)tok_utf8_len(t[i]);
            if (cl > n - i) cl = n - i;
        }
        int byte = cp >= 0 && cp < 324 ? tok->cp_byte[cp] : -1;
        /* A character that is no byte character is copied as it is (llama.cpp writes
         * "[UNK_BYTE_0x..]" for it). */
        for (uint32_t j = 0; j < (byte >= 0 ? 1u : cl); j++) {
            char c = byte >= 0 ? (char)byte : (char)t[i + j];
            if (strip && *pos == 0 && c == ' ') {
                strip = 0;
                continue;
            }
            strip = 0;
            if (*pos < capacity) out[*pos] = c;
            (*pos)++;
        }
        i += cl;
    }
}

/* Tokenizer internals shared by its files; not part of the engine's interface.
 *
 *   tokenizer.c          the entry points: create / free (the token table: texts, scores,
 *                        types, the text -> id hash), scratch, encode (special partition,
 *                        then each raw fragment through the vocabulary's algorithm, BOS /
 *                        EOS), decode
 *   tokenizer_special.c  special tokens: the trie over their texts and the partition of the
 *                        input (fast and reference)
 *   tokenizer_spm.c      SentencePiece (GGUF "llama"): escaping, byte fallback, the BPE merges
 *                        (priority queue and reference), pieces for decode
 *   tokenizer_bpe.c      byte-level BPE (GGUF "gpt2"): the GPT-2 byte mapping, merges by rank
 *                        (priority queue and reference), pieces for decode
 *   tokenizer_pretok.c   the BPE pre-tokenizers: llama.cpp's regex lists on PCRE2, the split
 *                        of a fragment into words, invalid UTF-8
 *
 * An algorithm plugs in through a fragment function (fragment_bpe_fn, one fast and one
 * reference) and a piece function for decode. */
#ifndef TQ_ENGINE_TOKENIZER_INTERNAL_H
#define TQ_ENGINE_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* One slot of the open-addressing table text -> id. id < 0: empty. */
typedef struct tok_slot {
    uint32_t hash;
    int32_t id;
} tok_slot;

/* A special token (control, unknown or user-defined with a non-empty text). The array of
 * them is sorted in llama.cpp's partition order: longer text first, then lower id. */
typedef struct special_entry {
    int32_t id;
    uint32_t len;
    int32_t next_same; /* next special with the identical text, -1: none */
    uint8_t type;
    uint8_t strip; /* TOKENIZER_STRIP_* */
} special_entry;

/* Edge of the special-token trie, in an open-addressing table keyed by (node, byte). */
typedef struct trie_edge {
    uint32_t key; /* (node << 8 | byte) + 1; 0: empty slot */
    int32_t child;
} trie_edge;

/* A piece of the input after the special partition. */
typedef struct fragment {
    int32_t token; /* special token id, or -1: raw text */
    uint32_t off;  /* byte offset into the input */
    uint32_t len;  /* byte length */
} fragment;

/* A BPE symbol: a byte range of the escaped fragment, in a doubly linked list. */
typedef struct spm_symbol {
    int32_t start;
    int32_t n; /* 0 once merged into its left neighbour */
    int32_t prev, next;
} spm_symbol;

/* A candidate merge of two adjacent symbols: higher priority first, ties to the leftmost
 * pair. (SentencePiece: the score of the merged token; BPE: minus the merge's rank. Both are
 * exact in a double, so the order is the algorithms' own.) */
typedef struct spm_bigram {
    double priority;
    int32_t left, right;
    uint32_t size; /* byte length of the concatenation when pushed; detects stale entries */
} spm_bigram;

/* A symbol of the reference merges: a byte range of the escaped text. */
typedef struct ref_symbol {
    size_t start, n;
} ref_symbol;

/* The compiled pre-tokenizer (tokenizer_pretok.c). */
typedef struct tok_pretok tok_pretok;

struct tokenizer_scratch {
    char *esc; /* (esc_cap) escaped fragment text */
    size_t esc_cap;
    spm_symbol *syms; /* (syms_cap) */
    size_t syms_cap;
    spm_bigram *heap; /* (heap_cap) binary max-heap */
    size_t heap_cap;
    fragment *frags[2]; /* (frags_cap) each: current and next partition */
    size_t frags_cap;
    uint8_t *seen;       /* (special_cap) special index occurs in the text */
    int32_t *occ;        /* (special_cap) occurring special indices */
    uint32_t *occ_first; /* (special_cap) first byte offset of an occurrence */
    uint32_t *occ_last;  /* (special_cap) last byte offset of an occurrence */
    size_t special_cap;
    /* byte-level BPE */
    uint32_t *spans[2]; /* (spans_cap) (offset, length) pairs: the words of a fragment */
    size_t spans_cap[2]; /* in uint32_t */
    char *san;          /* (san_cap) the fragment with invalid UTF-8 bytes as U+FFFD */
    size_t san_cap;
    void *match_data;   /* pcre2_match_data, made on first use */
};

struct tokenizer {
    int32_t n_vocab;
    char *blob;        /* all token texts back to back */
    uint32_t *offsets; /* (n_vocab + 1) text of id i is blob[offsets[i] .. offsets[i+1]) */
    float *scores;     /* (n_vocab) NaN replaced by -FLT_MAX so the heap order is total */
    uint8_t *types;    /* (n_vocab) tokenizer_token_type */
    uint8_t *strip;    /* (n_vocab) TOKENIZER_STRIP_*, NULL: none */
    uint32_t max_token_len;

    tok_slot *slots; /* (slot_mask + 1) text -> id */
    uint32_t slot_mask;

    int32_t byte_to_id[256]; /* byte fallback; -1: none */

    int32_t bos_id, eos_id, unk_id, pad_id;
    bool add_bos, add_eos, add_space_prefix;

    special_entry *specials; /* (n_special) in partition priority order */
    int32_t n_special;
    int32_t *node_special;   /* (n_nodes) first special whose text ends at node, -1: none */
    int32_t n_nodes;
    trie_edge *edges;        /* (edge_mask + 1) */
    uint32_t edge_mask;
    int32_t root_child[256]; /* trie children of the root, -1: none */

    tokenizer_scratch *own_scratch;

    /* byte-level BPE (model == TOKENIZER_MODEL_BPE) */
    int32_t model, pre;
    bool ignore_merges;          /* a word that is a token is not merged (llama.cpp: Llama 3) */
    char byte_enc[256][2];       /* GPT-2 byte -> unicode: the UTF-8 of each byte's character */
    uint8_t byte_enc_len[256];
    int16_t cp_byte[324];        /* the inverse: codepoint -> byte, -1: none */
    char *merge_blob;            /* all merges back to back */
    uint32_t *merge_off;         /* (n_merges + 1) */
    uint32_t *merge_split;       /* (n_merges) length of the left part */
    tok_slot *merge_slots;       /* (merge_mask + 1) (left, right) -> rank; id = rank */
    uint32_t merge_mask;
    int32_t n_merges;
    tok_pretok *pretok;
};

/* ---- shared helpers ------------------------------------------------------------------ */

static inline const char *tok_token_text(const tokenizer *tok, int32_t id, uint32_t *len) {
    *len = tok->offsets[id + 1] - tok->offsets[id];
    return tok->blob + tok->offsets[id];
}

static inline uint32_t tok_pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

/* Bytes of a UTF-8 character from its lead byte, as llama.cpp's unicode_len_utf8: no
 * validation, continuation and invalid bytes count as one-byte characters except
 * 0xF8..0xFF, which claim four. */
static inline size_t tok_utf8_len(unsigned char lead) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

/* Output of an encoder: ids past capacity are counted, not written. */
typedef struct id_sink {
    int32_t *ids;
    size_t capacity;
    size_t n; /* ids produced so far (may exceed capacity) */
} id_sink;

static inline void tok_sink_put(id_sink *k, int32_t id) {
    if (k->n < k->capacity) k->ids[k->n] = id;
    k->n++;
}

/* FNV-1a, 32 bit, continued from h (start: TOK_FNV_INIT) (tokenizer.c). */
#define TOK_FNV_INIT 2166136261u
uint32_t tok_hash_continue(uint32_t h, const void *p, size_t n);

/* Id of the token whose text is s[0..n), or -1 (tokenizer.c). */
int32_t tok_lookup_token(const tokenizer *tok, const char *s, size_t n);

/* Grows *buf to hold at least need elements of size elem (1.5x steps); 0 on failure
 * (tokenizer.c). */
int tok_grow(void **buf, size_t *cap, size_t need, size_t elem);

/* ---- special tokens (tokenizer_special.c) -------------------------------------------- */

/* Builds tok->specials and the trie over their texts from tok->types and the texts. */
int tok_build_specials(tokenizer *tok);

/* Partitions text into s->frags[0][0..*n_frags): special-token fragments cut out of raw
 * ones (tokenizer.h, encode step 1). */
int tok_partition(const tokenizer *tok, tokenizer_scratch *s, const char *text, size_t len,
                  unsigned flags, size_t *n_frags);

/* The same partition the literal way; *out is malloc'ed, the caller frees it. */
int tok_partition_ref(const tokenizer *tok, const char *text, size_t len, unsigned flags,
                      fragment **out, size_t *n_out);

/* ---- an algorithm ------------------------------------------------------------------- */

/* Emits the ids of one raw fragment text[0..len) into k; prefix: add the space prefix.
 * state is the encoder's scratch (NULL for a reference encoder). */
typedef int (*fragment_bpe_fn)(const tokenizer *tok, void *state, const char *text, size_t len,
                               int prefix, id_sink *k);

/* ---- the merge loop both algorithms share (tokenizer_spm.c) ------------------------- */

/* Whether the adjacent symbols a[0..la) and b[0..lb) (b == a + la) merge, and with what
 * priority (*priority; higher first). */
typedef int (*tok_pair_fn)(const tokenizer *tok, const char *a, size_t la, const char *b, size_t lb,
                           double *priority);

/* Merges the symbols s->syms[0..n_syms) (a linked list over s->esc, n_syms >= 1) with a
 * priority queue until no adjacent pair merges (llama.cpp's SPM and BPE sessions). */
int tok_merge(const tokenizer *tok, tokenizer_scratch *s, int32_t n_syms, tok_pair_fn pair);

/* The same, the literal way: rescan every adjacent pair of syms[0..m), merge the best
 * (leftmost on ties), repeat. Returns the number of symbols left. */
size_t tok_merge_ref(const tokenizer *tok, const char *esc, ref_symbol *syms, size_t m, tok_pair_fn pair);

/* ---- SentencePiece (tokenizer_spm.c) ------------------------------------------------- */

/* Fills tok->byte_to_id: "<0xXX>", else the one-byte token, else unk_id. */
void spm_build_byte_fallback(tokenizer *tok, int32_t unk_id);

/* fragment_bpe_fn: the priority-queue BPE on the scratch / the O(n^2) reference. */
int spm_encode_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                        int prefix, id_sink *k);
int spm_encode_fragment_ref(const tokenizer *tok, void *state, const char *text, size_t len,
                            int prefix, id_sink *k);

/* Appends the piece of id to out at *pos (bytes past capacity are counted, not written).
 * strip: drop one leading ' ' of the piece. */
void spm_put_piece(const tokenizer *tok, int32_t id, int render_special, int strip, char *out,
                   size_t capacity, size_t *pos);

/* ---- byte-level BPE (tokenizer_bpe.c) ----------------------------------------------- */

/* Builds the byte mapping, the merge table and the pre-tokenizer from v. */
int bpe_build(tokenizer *tok, const tok_vocab *v);
void bpe_free(tokenizer *tok);

/* fragment_bpe_fn: the priority-queue merges on the scratch / the O(n^2) reference (prefix is
 * ignored: llama.cpp's BPE adds no space prefix). */
int bpe_encode_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                        int prefix, id_sink *k);
int bpe_encode_fragment_ref(const tokenizer *tok, void *state, const char *text, size_t len,
                            int prefix, id_sink *k);

/* As spm_put_piece, for byte-level BPE (normal tokens: characters back to bytes). */
void bpe_put_piece(const tokenizer *tok, int32_t id, int render_special, int strip, char *out,
                   size_t capacity, size_t *pos);

/* ---- pre-tokenizers (tokenizer_pretok.c) -------------------------------------------- */

/* Compiles the regex list of pre (tokenizer_pre). Errors: REGEX, OUT_OF_MEMORY. */
int tok_pretok_create(int pre, tok_pretok **out);
void tok_pretok_free(tok_pretok *p);

/* Splits text[0..len) into words: *words points at n_words (offset, length) pairs in the
 * scratch, in order, covering the text. jit: 0 runs PCRE2's interpreter (the reference). */
int tok_pretok_split(const tok_pretok *p, tokenizer_scratch *s, const char *text, size_t len,
                     int jit, const uint32_t **words, size_t *n_words);

/* Frees the scratch's PCRE2 match data (tokenizer_scratch_free). */
void tok_pretok_scratch_free(tokenizer_scratch *s);

#endif

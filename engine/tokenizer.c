/* SentencePiece-style tokenizer (GGUF "llama" model), matching llama.cpp's SPM tokenizer.
 * See tokenizer.h for the behaviour and the contracts. Layout of this file:
 *   status names / hashing / the token table / the special-token trie / create & free /
 *   scratch / special partition / BPE / encode / reference encoder / decode. */
#include "tokenizer.h"

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
    default: return "TOKENIZER_ERR_UNKNOWN";
    }
}

/* ---------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------- */

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

/* A candidate merge of two adjacent symbols. */
typedef struct spm_bigram {
    float score;
    int32_t left, right;
    uint32_t size; /* byte length of the concatenation when pushed; detects stale entries */
} spm_bigram;

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
};

struct tokenizer {
    int32_t n_vocab;
    char *blob;        /* all token texts back to back */
    uint32_t *offsets; /* (n_vocab + 1) text of id i is blob[offsets[i] .. offsets[i+1]) */
    float *scores;     /* (n_vocab) NaN replaced by -FLT_MAX so the heap order is total */
    uint8_t *types;    /* (n_vocab) tokenizer_token_type */
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
};

/* ---------------------------------------------------------------------------------------
 * Hashing and the token table
 * ------------------------------------------------------------------------------------- */

/* FNV-1a, 32 bit: tokens are short, so a byte loop is as fast as anything wider. */
static uint32_t hash_bytes(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

static const char *token_text(const tokenizer *tok, int32_t id, uint32_t *len) {
    *len = tok->offsets[id + 1] - tok->offsets[id];
    return tok->blob + tok->offsets[id];
}

static int32_t lookup_token(const tokenizer *tok, const char *s, size_t n) {
    if (n > tok->max_token_len) return -1;
    uint32_t h = hash_bytes((const unsigned char *)s, n);
    for (uint32_t i = h & tok->slot_mask;; i = (i + 1) & tok->slot_mask) {
        const tok_slot *slot = &tok->slots[i];
        if (slot->id < 0) return -1;
        if (slot->hash == h) {
            uint32_t len;
            const char *t = token_text(tok, slot->id, &len);
            if (len == n && memcmp(t, s, n) == 0) return slot->id;
        }
    }
}

/* Inserts id; an existing equal text is overwritten, so the highest id wins (llama.cpp
 * fills its token_to_id map in id order with assignment). */
static void insert_token(tokenizer *tok, int32_t id) {
    uint32_t n;
    const char *s = token_text(tok, id, &n);
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
            const char *t = token_text(tok, slot->id, &len);
            if (len == n && memcmp(t, s, n) == 0) {
                slot->id = id;
                return;
            }
        }
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

/* ---------------------------------------------------------------------------------------
 * Special-token trie: finds which special texts occur in the input in one pass
 * ------------------------------------------------------------------------------------- */

/* murmur3 fmix32: the low bits (used by the mask) depend on all key bits. */
static uint32_t edge_hash(uint32_t key) {
    key ^= key >> 16;
    key *= 0x85ebca6bu;
    key ^= key >> 13;
    key *= 0xc2b2ae35u;
    key ^= key >> 16;
    return key;
}

static int32_t trie_child(const tokenizer *tok, int32_t node, unsigned char byte) {
    if (node == 0) return tok->root_child[byte];
    uint32_t key = (((uint32_t)node << 8) | byte) + 1;
    for (uint32_t i = edge_hash(key) & tok->edge_mask;; i = (i + 1) & tok->edge_mask) {
        if (tok->edges[i].key == key) return tok->edges[i].child;
        if (tok->edges[i].key == 0) return -1;
    }
}

static void trie_add_child(tokenizer *tok, int32_t node, unsigned char byte, int32_t child) {
    if (node == 0) {
        tok->root_child[byte] = child;
        return;
    }
    uint32_t key = (((uint32_t)node << 8) | byte) + 1;
    uint32_t i = edge_hash(key) & tok->edge_mask;
    while (tok->edges[i].key != 0) i = (i + 1) & tok->edge_mask;
    tok->edges[i].key = key;
    tok->edges[i].child = child;
}

static int cmp_special(const void *a, const void *b) {
    const special_entry *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int is_special_type(uint8_t type) {
    return type == TOKENIZER_TYPE_CONTROL || type == TOKENIZER_TYPE_UNKNOWN ||
           type == TOKENIZER_TYPE_USER_DEFINED;
}

static int build_specials(tokenizer *tok) {
    int32_t n = 0;
    uint64_t total_bytes = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint32_t len = tok->offsets[id + 1] - tok->offsets[id];
        if (is_special_type(tok->types[id]) && len > 0) {
            n++;
            total_bytes += len;
        }
    }
    tok->n_special = n;
    for (int b = 0; b < 256; b++) tok->root_child[b] = -1;
    if (n == 0) return TOKENIZER_OK;
    if (total_bytes >= (uint64_t)INT32_MAX / 512) return TOKENIZER_ERR_BAD_VOCAB;

    tok->specials = malloc((size_t)n * sizeof *tok->specials);
    tok->node_special = malloc((size_t)(total_bytes + 1) * sizeof *tok->node_special);
    tok->edge_mask = pow2_at_least(2 * (total_bytes + 1)) - 1;
    tok->edges = calloc((size_t)tok->edge_mask + 1, sizeof *tok->edges);
    if (!tok->specials || !tok->node_special || !tok->edges) return TOKENIZER_ERR_OUT_OF_MEMORY;

    n = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint32_t len = tok->offsets[id + 1] - tok->offsets[id];
        if (is_special_type(tok->types[id]) && len > 0) {
            tok->specials[n].id = id;
            tok->specials[n].len = len;
            tok->specials[n].next_same = -1;
            tok->specials[n].type = tok->types[id];
            n++;
        }
    }
    qsort(tok->specials, (size_t)n, sizeof *tok->specials, cmp_special);

    tok->n_nodes = 1;
    tok->node_special[0] = -1;
    for (int32_t s = 0; s < n; s++) {
        uint32_t len;
        const unsigned char *t = (const unsigned char *)token_text(tok, tok->specials[s].id, &len);
        int32_t node = 0;
        for (uint32_t i = 0; i < len; i++) {
            int32_t child = trie_child(tok, node, t[i]);
            if (child < 0) {
                child = tok->n_nodes++;
                tok->node_special[child] = -1;
                trie_add_child(tok, node, t[i], child);
            }
            node = child;
        }
        /* Specials with equal text: chain them in priority order. */
        int32_t *link = &tok->node_special[node];
        while (*link >= 0) link = &tok->specials[*link].next_same;
        *link = s;
    }
    return TOKENIZER_OK;
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
    tok->slot_mask = pow2_at_least(2 * (uint64_t)n) - 1;
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

    for (uint32_t i = 0; i <= tok->slot_mask; i++) tok->slots[i].id = -1;
    for (int32_t i = 0; i < n; i++) insert_token(tok, i);

    /* Byte fallback as llama.cpp's byte_to_token for SPM: "<0xXX>" (upper-case hex), else
     * the one-byte token; llama.cpp throws when neither exists, we fall back to unk. */
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char raw = (char)b;
        int32_t id = lookup_token(tok, name, sizeof name);
        if (id < 0) id = lookup_token(tok, &raw, 1);
        if (id < 0) id = v->unk_id;
        tok->byte_to_id[b] = id;
    }
    return build_specials(tok);
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
    free(tok->slots);
    free(tok->specials);
    free(tok->node_special);
    free(tok->edges);
    tokenizer_scratch_free(tok->own_scratch);
    free(tok);
}

int32_t tokenizer_n_vocab(const tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t tokenizer_bos_id(const tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t tokenizer_eos_id(const tokenizer *tok) { return tok ? tok->eos_id : -1; }

int tokenizer_token_type_of(const tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return -1;
    return tok->types[id];
}

int32_t tokenizer_find_token(const tokenizer *tok, const char *text, size_t len) {
    if (!tok || (!text && len)) return -1;
    return lookup_token(tok, text ? text : "", len);
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
    free(s);
}

/* Grows *buf to hold at least need elements of size elem (1.5x steps); 0 on failure. */
static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
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

static int grow_frags(tokenizer_scratch *s, size_t need) {
    if (need <= s->frags_cap) return 1;
    size_t cap0 = s->frags_cap, cap1 = s->frags_cap;
    if (!grow((void **)&s->frags[0], &cap0, need, sizeof(fragment))) return 0;
    if (!grow((void **)&s->frags[1], &cap1, cap0, sizeof(fragment))) return 0;
    s->frags_cap = cap0 < cap1 ? cap0 : cap1;
    return 1;
}

static int grow_specials(tokenizer_scratch *s, size_t n) {
    if (n <= s->special_cap) return 1;
    uint8_t *seen = realloc(s->seen, n);
    if (!seen) return 0;
    memset(seen + s->special_cap, 0, n - s->special_cap);
    s->seen = seen;
    int32_t *occ = realloc(s->occ, n * sizeof *occ);
    if (!occ) return 0;
    s->occ = occ;
    uint32_t *first = realloc(s->occ_first, n * sizeof *first);
    if (!first) return 0;
    s->occ_first = first;
    uint32_t *last = realloc(s->occ_last, n * sizeof *last);
    if (!last) return 0;
    s->occ_last = last;
    s->special_cap = n;
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * Special partition (llama.cpp tokenizer_st_partition)
 *
 * llama.cpp takes the special tokens longest first and, for each, cuts every leftmost
 * non-overlapping occurrence out of the raw fragments left so far. Equivalently: sort all
 * occurrences by (priority of the token, position) and accept each one that overlaps
 * nothing accepted before. We do the same token by token, but only for the tokens that
 * occur at all (found in one trie pass) and only over the span where each one occurs.
 * Cost: O(len * trie depth + n_occurring_tokens * (span + n_fragments)).
 * ------------------------------------------------------------------------------------- */

static int special_eligible(uint8_t type, unsigned flags) {
    return (flags & TOKENIZER_ENCODE_PARSE_SPECIAL) || type == TOKENIZER_TYPE_USER_DEFINED;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Leftmost occurrence of pat[0..m) in t[from..to), or -1. */
static int64_t find_bytes(const char *t, size_t from, size_t to, const char *pat, size_t m) {
    if (m == 0 || to < from || to - from < m) return -1;
    size_t last = to - m;
    size_t i = from;
    while (i <= last) {
        const char *hit = memchr(t + i, pat[0], last - i + 1);
        if (!hit) return -1;
        i = (size_t)(hit - t);
        if (memcmp(t + i, pat, m) == 0) return (int64_t)i;
        i++;
    }
    return -1;
}

/* Partitions text into s->frags[0][0..*n_frags). */
static int partition(const tokenizer *tok, tokenizer_scratch *s, const char *text,
                     size_t len, unsigned flags, size_t *n_frags) {
    *n_frags = 0;
    if (len == 0) return TOKENIZER_OK;
    if (!grow_frags(s, 16)) return TOKENIZER_ERR_OUT_OF_MEMORY;
    s->frags[0][0] = (fragment){-1, 0, (uint32_t)len};
    *n_frags = 1;
    if (tok->n_special == 0) return TOKENIZER_OK;
    if (!grow_specials(s, (size_t)tok->n_special)) return TOKENIZER_ERR_OUT_OF_MEMORY;

    /* Which eligible specials occur, and where first and last. */
    const unsigned char *u = (const unsigned char *)text;
    size_t n_occ = 0;
    for (size_t p = 0; p < len; p++) {
        int32_t node = tok->root_child[u[p]];
        size_t q = p + 1;
        while (node >= 0) {
            for (int32_t sp = tok->node_special[node]; sp >= 0; sp = tok->specials[sp].next_same) {
                if (!special_eligible(tok->specials[sp].type, flags)) continue;
                if (!s->seen[sp]) {
                    s->seen[sp] = 1;
                    s->occ[n_occ++] = sp;
                    s->occ_first[sp] = (uint32_t)p;
                }
                s->occ_last[sp] = (uint32_t)p;
            }
            if (q == len) break;
            node = trie_child(tok, node, u[q++]);
        }
    }
    qsort(s->occ, n_occ, sizeof *s->occ, cmp_i32);

    int rc = TOKENIZER_OK;
    int cur = 0;
    for (size_t k = 0; k < n_occ; k++) {
        int32_t sp = s->occ[k];
        s->seen[sp] = 0;
        if (rc != TOKENIZER_OK) continue; /* keep clearing seen[] */
        int32_t id = tok->specials[sp].id;
        uint32_t m;
        const char *pat = token_text(tok, id, &m);
        size_t span_lo = s->occ_first[sp], span_hi = (size_t)s->occ_last[sp] + m;
        fragment *src = s->frags[cur];
        size_t n_src = *n_frags, n_dst = 0;
        for (size_t f = 0; f < n_src; f++) {
            fragment fr = src[f];
            size_t fr_end = (size_t)fr.off + fr.len;
            /* Each cut adds at most two fragments: keep room for the worst case. */
            if (!grow_frags(s, n_dst + 2 * (size_t)fr.len / m + 2)) {
                rc = TOKENIZER_ERR_OUT_OF_MEMORY;
                break;
            }
            src = s->frags[cur];
            fragment *dst = s->frags[cur ^ 1];
            if (fr.token >= 0 || fr_end <= span_lo || fr.off >= span_hi) {
                dst[n_dst++] = fr;
                continue;
            }
            size_t pos = fr.off;
            for (;;) {
                int64_t hit = find_bytes(text, pos > span_lo ? pos : span_lo, fr_end, pat, m);
                if (hit < 0) break;
                if ((size_t)hit > pos)
                    dst[n_dst++] = (fragment){-1, (uint32_t)pos, (uint32_t)((size_t)hit - pos)};
                dst[n_dst++] = (fragment){id, (uint32_t)hit, m};
                pos = (size_t)hit + m;
            }
            if (pos < fr_end) dst[n_dst++] = (fragment){-1, (uint32_t)pos, (uint32_t)(fr_end - pos)};
        }
        if (rc != TOKENIZER_OK) continue;
        cur ^= 1;
        *n_frags = n_dst;
    }
    if (rc == TOKENIZER_OK && cur == 1)
        memcpy(s->frags[0], s->frags[1], *n_frags * sizeof(fragment));
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Output and escaping helpers shared by the fast and the reference encoder
 * ------------------------------------------------------------------------------------- */

typedef struct id_sink {
    int32_t *ids;
    size_t capacity;
    size_t n; /* ids produced so far (may exceed capacity) */
} id_sink;

static void sink_put(id_sink *k, int32_t id) {
    if (k->n < k->capacity) k->ids[k->n] = id;
    k->n++;
}

/* Bytes of a UTF-8 character from its lead byte, as llama.cpp's unicode_len_utf8: no
 * validation, continuation and invalid bytes count as one-byte characters except
 * 0xF8..0xFF, which claim four. */
static size_t utf8_len(unsigned char lead) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

/* Writes the escaped fragment ((space prefix) + text, ' ' -> U+2581) into esc, which
 * holds at least 3 * (len + 1) bytes; returns its length. */
static size_t escape_fragment(char *esc, const char *text, size_t len, int prefix) {
    size_t n = 0;
    if (prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            esc[n++] = text[i];
        }
    }
    return n;
}

/* Emits the token of a final symbol, or its bytes (llama.cpp resegment: merged symbols
 * are always tokens, so only unmerged characters can fall back to bytes). */
static int emit_symbol(const tokenizer *tok, id_sink *k, const char *p, size_t n) {
    int32_t id = lookup_token(tok, p, n);
    if (id >= 0) {
        sink_put(k, id);
        return TOKENIZER_OK;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t b = tok->byte_to_id[(unsigned char)p[j]];
        if (b < 0) return TOKENIZER_ERR_NO_BYTE_TOKEN;
        sink_put(k, b);
    }
    return TOKENIZER_OK;
}

/* ---------------------------------------------------------------------------------------
 * SentencePiece BPE with a priority queue (llama.cpp llm_tokenizer_spm_session)
 * ------------------------------------------------------------------------------------- */

/* a comes out of the heap before b: higher score, then the leftmost pair. */
static int bigram_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(spm_bigram *h, size_t *n, spm_bigram x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&x, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static spm_bigram heap_pop(spm_bigram *h, size_t *n) {
    spm_bigram top = h[0];
    spm_bigram x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && bigram_before(&h[c + 1], &h[c])) c++;
        if (!bigram_before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
    return top;
}

static int try_add_bigram(const tokenizer *tok, tokenizer_scratch *s, size_t *heap_n,
                          int32_t left, int32_t right) {
    if (left < 0 || right < 0) return TOKENIZER_OK;
    const spm_symbol *l = &s->syms[left], *r = &s->syms[right];
    size_t size = (size_t)l->n + (size_t)r->n;
    int32_t id = lookup_token(tok, s->esc + l->start, size);
    if (id < 0) return TOKENIZER_OK;
    if (!grow((void **)&s->heap, &s->heap_cap, *heap_n + 1, sizeof *s->heap))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    heap_push(s->heap, heap_n, (spm_bigram){tok->scores[id], left, right, (uint32_t)size});
    return TOKENIZER_OK;
}

/* Tokenizes the escaped fragment s->esc[0..n) into k. */
static int bpe_fragment(const tokenizer *tok, tokenizer_scratch *s, size_t n, id_sink *k) {
    if (n == 0) return TOKENIZER_OK;
    if (!grow((void **)&s->syms, &s->syms_cap, n, sizeof *s->syms))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    int32_t n_syms = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = utf8_len((unsigned char)s->esc[off]);
        if (cl > n - off) cl = n - off;
        spm_symbol *sym = &s->syms[n_syms];
        sym->start = (int32_t)off;
        sym->n = (int32_t)cl;
        sym->prev = n_syms - 1;
        off += cl;
        sym->next = off == n ? -1 : n_syms + 1;
        n_syms++;
    }

    size_t heap_n = 0;
    int rc = TOKENIZER_OK;
    for (int32_t i = 1; i < n_syms && rc == TOKENIZER_OK; i++)
        rc = try_add_bigram(tok, s, &heap_n, i - 1, i);
    while (heap_n > 0 && rc == TOKENIZER_OK) {
        spm_bigram b = heap_pop(s->heap, &heap_n);
        spm_symbol *l = &s->syms[b.left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || (uint32_t)(l->n + r->n) != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = b.left;
        rc = try_add_bigram(tok, s, &heap_n, l->prev, b.left);
        if (rc == TOKENIZER_OK) rc = try_add_bigram(tok, s, &heap_n, b.left, s->syms[b.left].next);
    }
    for (int32_t i = 0; i != -1 && rc == TOKENIZER_OK; i = s->syms[i].next)
        rc = emit_symbol(tok, k, s->esc + s->syms[i].start, (size_t)s->syms[i].n);
    return rc;
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
typedef int (*fragment_bpe_fn)(const tokenizer *tok, void *state, const char *text, size_t len,
                               int prefix, id_sink *k);

static int emit_fragments(const tokenizer *tok, const fragment *frags, size_t n_frags,
                          const char *text, unsigned flags, fragment_bpe_fn bpe, void *state,
                          id_sink *k) {
    int add_special = (flags & TOKENIZER_ENCODE_ADD_SPECIAL) != 0;
    if (add_special && tok->add_bos) sink_put(k, tok->bos_id);
    int prev_special = 1;
    for (size_t f = 0; f < n_frags; f++) {
        if (frags[f].token >= 0) {
            sink_put(k, frags[f].token);
            prev_special = 1;
            continue;
        }
        int rc = bpe(tok, state, text + frags[f].off, frags[f].len,
                     tok->add_space_prefix && prev_special, k);
        if (rc != TOKENIZER_OK) return rc;
        prev_special = 0;
    }
    if (add_special && tok->add_eos) sink_put(k, tok->eos_id);
    return TOKENIZER_OK;
}

static int fast_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                         int prefix, id_sink *k) {
    tokenizer_scratch *s = state;
    if (!grow((void **)&s->esc, &s->esc_cap, 3 * (len + 1), 1)) return TOKENIZER_ERR_OUT_OF_MEMORY;
    size_t n = escape_fragment(s->esc, text, len, prefix);
    return bpe_fragment(tok, s, n, k);
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
    rc = partition(tok, scratch, text, len, flags, &n_frags);
    if (rc == TOKENIZER_OK)
        rc = emit_fragments(tok, scratch->frags[0], n_frags, text, flags, fast_fragment, scratch, &k);
    return finish(rc, &k, capacity, n_out);
}

int tokenizer_encode(tokenizer *tok, const char *text, size_t len, unsigned flags,
                     int32_t *out_ids, size_t capacity, size_t *n_out) {
    return tokenizer_encode_with(tok, tok ? tok->own_scratch : NULL, text, len, flags, out_ids,
                                 capacity, n_out);
}

/* ---------------------------------------------------------------------------------------
 * Reference encoder: the literal algorithms, slow and obvious
 * ------------------------------------------------------------------------------------- */

typedef struct ref_symbol {
    size_t start, n;
} ref_symbol;

static int ref_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                        int prefix, id_sink *k) {
    (void)state;
    char *esc = malloc(3 * (len + 1));
    ref_symbol *syms = malloc((3 * len + 3) * sizeof *syms);
    if (!esc || !syms) {
        free(esc);
        free(syms);
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    }
    size_t n = escape_fragment(esc, text, len, prefix), m = 0;
    for (size_t off = 0; off < n; m++) {
        size_t cl = utf8_len((unsigned char)esc[off]);
        if (cl > n - off) cl = n - off;
        syms[m] = (ref_symbol){off, cl};
        off += cl;
    }
    /* Merge the best pair (highest score, leftmost on ties) until none is a token. */
    for (;;) {
        size_t best = SIZE_MAX;
        float best_score = 0.0f;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t id = lookup_token(tok, esc + syms[i].start, syms[i].n + syms[i + 1].n);
            if (id >= 0 && (best == SIZE_MAX || tok->scores[id] > best_score)) {
                best = i;
                best_score = tok->scores[id];
            }
        }
        if (best == SIZE_MAX) break;
        syms[best].n += syms[best + 1].n;
        memmove(&syms[best + 1], &syms[best + 2], (m - best - 2) * sizeof *syms);
        m--;
    }
    int rc = TOKENIZER_OK;
    for (size_t i = 0; i < m && rc == TOKENIZER_OK; i++)
        rc = emit_symbol(tok, k, esc + syms[i].start, syms[i].n);
    free(esc);
    free(syms);
    return rc;
}

/* llama.cpp's partition loop as written: every eligible special in priority order, every
 * raw fragment, leftmost occurrences, naive substring search. */
static int ref_partition(const tokenizer *tok, const char *text, size_t len, unsigned flags,
                         fragment **out, size_t *n_out) {
    size_t cap = 2 * len + 1, n = 0;
    fragment *cur = malloc(cap * sizeof *cur), *next = malloc(cap * sizeof *next);
    if (!cur || !next) {
        free(cur);
        free(next);
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    }
    if (len) cur[n++] = (fragment){-1, 0, (uint32_t)len};
    uint8_t present[256] = {0}; /* skipping specials whose first byte is absent is exact */
    for (size_t i = 0; i < len; i++) present[(unsigned char)text[i]] = 1;
    for (int32_t sp = 0; sp < tok->n_special; sp++) {
        if (!special_eligible(tok->specials[sp].type, flags)) continue;
        uint32_t m;
        const char *pat = token_text(tok, tok->specials[sp].id, &m);
        if (!present[(unsigned char)pat[0]]) continue;
        size_t n_next = 0;
        for (size_t f = 0; f < n; f++) {
            if (cur[f].token >= 0) {
                next[n_next++] = cur[f];
                continue;
            }
            size_t pos = cur[f].off, end = (size_t)cur[f].off + cur[f].len, run = pos;
            while (pos + m <= end) {
                if (memcmp(text + pos, pat, m) != 0) {
                    pos++;
                    continue;
                }
                if (pos > run) next[n_next++] = (fragment){-1, (uint32_t)run, (uint32_t)(pos - run)};
                next[n_next++] = (fragment){tok->specials[sp].id, (uint32_t)pos, m};
                pos += m;
                run = pos;
            }
            if (run < end) next[n_next++] = (fragment){-1, (uint32_t)run, (uint32_t)(end - run)};
        }
        fragment *t = cur;
        cur = next;
        next = t;
        n = n_next;
    }
    free(next);
    *out = cur;
    *n_out = n;
    return TOKENIZER_OK;
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
    rc = ref_partition(tok, text, len, flags, &frags, &n_frags);
    if (rc == TOKENIZER_OK) {
        rc = emit_fragments(tok, frags, n_frags, text, flags, ref_fragment, NULL, &k);
        free(frags);
    }
    return finish(rc, &k, capacity, n_out);
}

/* ---------------------------------------------------------------------------------------
 * Decode (llama.cpp token_to_piece / detokenize for SPM)
 * ------------------------------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Appends the piece of id to out at *pos (bytes past capacity are counted, not written).
 * strip: drop one leading ' ' of the piece. */
static void put_piece(const tokenizer *tok, int32_t id, int render_special, int strip,
                      char *out, size_t capacity, size_t *pos) {
    uint32_t n;
    const char *t = token_text(tok, id, &n);
    char byte;
    int unescape = 0;
    switch (tok->types[id]) {
    case TOKENIZER_TYPE_CONTROL:
    case TOKENIZER_TYPE_UNKNOWN:
        if (!render_special) return;
        break;
    case TOKENIZER_TYPE_USER_DEFINED: break;
    case TOKENIZER_TYPE_NORMAL: unescape = 1; break;
    case TOKENIZER_TYPE_BYTE:
        if (n == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>' &&
            hex_digit(t[3]) >= 0 && hex_digit(t[4]) >= 0) {
            byte = (char)(hex_digit(t[3]) * 16 + hex_digit(t[4]));
            t = &byte;
            n = 1;
        } else if (n != 1) {
            return;
        }
        break;
    default: return; /* unused, undefined: suppressed like control tokens */
    }
    for (uint32_t i = 0; i < n;) {
        char c;
        if (unescape && n - i >= 3 && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
            c = ' ';
            i += 3;
        } else {
            c = t[i++];
        }
        if (strip && *pos == 0 && c == ' ') { /* only the very first output byte */
            strip = 0;
            continue;
        }
        strip = 0;
        if (*pos < capacity) out[*pos] = c;
        (*pos)++;
    }
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

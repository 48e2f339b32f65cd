/* Special tokens of the tokenizer: the trie over the texts of control, unknown and
 * user-defined tokens, and the partition of the input into special-token and raw fragments
 * (llama.cpp tokenizer_st_partition), fast and reference. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

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

int tok_build_specials(tokenizer *tok) {
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
    tok->edge_mask = tok_pow2_at_least(2 * (total_bytes + 1)) - 1;
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
            tok->specials[n].strip = tok->strip ? tok->strip[id] : 0;
            n++;
        }
    }
    qsort(tok->specials, (size_t)n, sizeof *tok->specials, cmp_special);

    tok->n_nodes = 1;
    tok->node_special[0] = -1;
    for (int32_t s = 0; s < n; s++) {
        uint32_t len;
        const unsigned char *t =
            (const unsigned char *)tok_token_text(tok, tok->specials[s].id, &len);
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

/* Scratch growth for the partition. */
static int grow_frags(tokenizer_scratch *s, size_t need) {
    if (need <= s->frags_cap) return 1;
    size_t cap0 = s->frags_cap, cap1 = s->frags_cap;
    if (!tok_grow((void **)&s->frags[0], &cap0, need, sizeof(fragment))) return 0;
    if (!tok_grow((void **)&s->frags[1], &cap1, cap0, sizeof(fragment))) return 0;
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

/* C isspace in the "C" locale, what llama.cpp's strip attributes test. */
static int c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* End of the raw text [from, to) before a special: to, less trailing white space when the
 * special has TOKENIZER_STRIP_LEFT. */
static size_t strip_left(uint8_t strip, const char *text, size_t from, size_t to) {
    if (strip & TOKENIZER_STRIP_LEFT)
        while (to > from && c_space(text[to - 1])) to--;
    return to;
}

/* Start of the raw text [from, end) after a special: from, past leading white space when the
 * special has TOKENIZER_STRIP_RIGHT. */
static size_t strip_right(uint8_t strip, const char *text, size_t from, size_t end) {
    if (strip & TOKENIZER_STRIP_RIGHT)
        while (from < end && c_space(text[from])) from++;
    return from;
}

/* Partitions text into s->frags[0][0..*n_frags). */
int tok_partition(const tokenizer *tok, tokenizer_scratch *s, const char *text, size_t len,
                  unsigned flags, size_t *n_frags) {
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
        const char *pat = tok_token_text(tok, id, &m);
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
                size_t gap_end = strip_left(tok->specials[sp].strip, text, pos, (size_t)hit);
                if (gap_end > pos)
                    dst[n_dst++] = (fragment){-1, (uint32_t)pos, (uint32_t)(gap_end - pos)};
                dst[n_dst++] = (fragment){id, (uint32_t)hit, m};
                pos = strip_right(tok->specials[sp].strip, text, (size_t)hit + m, fr_end);
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

/* llama.cpp's partition loop as written: every eligible special in priority order, every
 * raw fragment, leftmost occurrences, naive substring search. */
int tok_partition_ref(const tokenizer *tok, const char *text, size_t len, unsigned flags,
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
        const char *pat = tok_token_text(tok, tok->specials[sp].id, &m);
        if (!present[(unsigned char)pat[0]]) continue;
        size_t n_next = 0;
        for (size_t f = 0; f < n; f++) {
            if (cur[f].token >= 0) {
                next[n_next++] = cur[f];
                continue;
            }
            size_t pos = cur[f].off, end = (size_t)cur[f].off + cur[f].len, run = pos;
            const uint8_t strip = tok->specials[sp].strip;
            while (pos + m <= end) {
                if (memcmp(text + pos, pat, m) != 0) {
                    pos++;
                    continue;
                }
                size_t gap_end = strip_left(strip, text, run, pos);
                if (gap_end > run) next[n_next++] = (fragment){-1, (uint32_t)run, (uint32_t)(gap_end - run)};
                next[n_next++] = (fragment){tok->specials[sp].id, (uint32_t)pos, m};
                pos = run = strip_right(strip, text, pos + m, end);
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

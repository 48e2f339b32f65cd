/* SentencePiece (GGUF "llama" vocabularies), as llama.cpp's SPM tokenizer: the escaped
 * fragment (space prefix, ' ' -> U+2581), the BPE merges by score (a priority queue, and the
 * literal O(n^2) reference), byte fallback, and pieces for decode. tokenizer.h has the
 * behaviour. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Byte fallback as llama.cpp's byte_to_token for SPM: "<0xXX>" (upper-case hex), else the
 * one-byte token; llama.cpp throws when neither exists, we fall back to unk. */
void spm_build_byte_fallback(tokenizer *tok, int32_t unk_id) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char raw = (char)b;
        int32_t id = tok_lookup_token(tok, name, sizeof name);
        if (id < 0) id = tok_lookup_token(tok, &raw, 1);
        if (id < 0) id = unk_id;
        tok->byte_to_id[b] = id;
    }
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
    int32_t id = tok_lookup_token(tok, p, n);
    if (id >= 0) {
        tok_sink_put(k, id);
        return TOKENIZER_OK;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t b = tok->byte_to_id[(unsigned char)p[j]];
        if (b < 0) return TOKENIZER_ERR_NO_BYTE_TOKEN;
        tok_sink_put(k, b);
    }
    return TOKENIZER_OK;
}

/* ---------------------------------------------------------------------------------------
 * The merge loop: a priority queue (llama.cpp llm_tokenizer_spm_session and
 * llm_tokenizer_bpe_session), and the literal reference
 * ------------------------------------------------------------------------------------- */

/* a comes out of the heap before b: higher priority, then the leftmost pair. */
static int bigram_before(const spm_bigram *a, const spm_bigram *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
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

static int try_add_bigram(const tokenizer *tok, tokenizer_scratch *s, tok_pair_fn pair,
                          size_t *heap_n, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return TOKENIZER_OK;
    const spm_symbol *l = &s->syms[left], *r = &s->syms[right];
    double priority;
    if (!pair(tok, s->esc + l->start, (size_t)l->n, s->esc + r->start, (size_t)r->n, &priority))
        return TOKENIZER_OK;
    if (!tok_grow((void **)&s->heap, &s->heap_cap, *heap_n + 1, sizeof *s->heap))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    heap_push(s->heap, heap_n, (spm_bigram){priority, left, right, (uint32_t)(l->n + r->n)});
    return TOKENIZER_OK;
}

int tok_merge(const tokenizer *tok, tokenizer_scratch *s, int32_t n_syms, tok_pair_fn pair) {
    size_t heap_n = 0;
    int rc = TOKENIZER_OK;
    for (int32_t i = 1; i < n_syms && rc == TOKENIZER_OK; i++)
        rc = try_add_bigram(tok, s, pair, &heap_n, i - 1, i);
    while (heap_n > 0 && rc == TOKENIZER_OK) {
        spm_bigram b = heap_pop(s->heap, &heap_n);
        spm_symbol *l = &s->syms[b.left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || (uint32_t)(l->n + r->n) != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = b.left;
        rc = try_add_bigram(tok, s, pair, &heap_n, l->prev, b.left);
        if (rc == TOKENIZER_OK) rc = try_add_bigram(tok, s, pair, &heap_n, b.left, s->syms[b.left].next);
    }
    return rc;
}

size_t tok_merge_ref(const tokenizer *tok, const char *esc, ref_symbol *syms, size_t m, tok_pair_fn pair) {
    for (;;) {
        size_t best = SIZE_MAX;
        double best_priority = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            double p;
            if (pair(tok, esc + syms[i].start, syms[i].n, esc + syms[i + 1].start, syms[i + 1].n, &p) &&
                (best == SIZE_MAX || p > best_priority)) {
                best = i;
                best_priority = p;
            }
        }
        if (best == SIZE_MAX) return m;
        syms[best].n += syms[best + 1].n;
        memmove(&syms[best + 1], &syms[best + 2], (m - best - 2) * sizeof *syms);
        m--;
    }
}

/* ---------------------------------------------------------------------------------------
 * SentencePiece
 * ------------------------------------------------------------------------------------- */

/* tok_pair_fn: the concatenation is a token; its score. */
static int spm_pair(const tokenizer *tok, const char *a, size_t la, const char *b, size_t lb,
                    double *priority) {
    (void)b;
    int32_t id = tok_lookup_token(tok, a, la + lb);
    if (id < 0) return 0;
    *priority = tok->scores[id];
    return 1;
}

/* Tokenizes the escaped fragment s->esc[0..n) into k. */
static int bpe_fragment(const tokenizer *tok, tokenizer_scratch *s, size_t n, id_sink *k) {
    if (n == 0) return TOKENIZER_OK;
    if (!tok_grow((void **)&s->syms, &s->syms_cap, n, sizeof *s->syms))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    int32_t n_syms = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = tok_utf8_len((unsigned char)s->esc[off]);
        if (cl > n - off) cl = n - off;
        spm_symbol *sym = &s->syms[n_syms];
        sym->start = (int32_t)off;
        sym->n = (int32_t)cl;
        sym->prev = n_syms - 1;
        off += cl;
        sym->next = off == n ? -1 : n_syms + 1;
        n_syms++;
    }
    int rc = tok_merge(tok, s, n_syms, spm_pair);
    for (int32_t i = 0; i != -1 && rc == TOKENIZER_OK; i = s->syms[i].next)
        rc = emit_symbol(tok, k, s->esc + s->syms[i].start, (size_t)s->syms[i].n);
    return rc;
}

int spm_encode_fragment(const tokenizer *tok, void *state, const char *text, size_t len,
                        int prefix, id_sink *k) {
    tokenizer_scratch *s = state;
    if (!tok_grow((void **)&s->esc, &s->esc_cap, 3 * (len + 1), 1))
        return TOKENIZER_ERR_OUT_OF_MEMORY;
    size_t n = escape_fragment(s->esc, text, len, prefix);
    return bpe_fragment(tok, s, n, k);
}

int spm_encode_fragment_ref(const tokenizer *tok, void *state, const char *text, size_t len,
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
        size_t cl = tok_utf8_len((unsigned char)esc[off]);
        if (cl > n - off) cl = n - off;
        syms[m] = (ref_symbol){off, cl};
        off += cl;
    }
    m = tok_merge_ref(tok, esc, syms, m, spm_pair);
    int rc = TOKENIZER_OK;
    for (size_t i = 0; i < m && rc == TOKENIZER_OK; i++)
        rc = emit_symbol(tok, k, esc + syms[i].start, syms[i].n);
    free(esc);
    free(syms);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Pieces (llama.cpp token_to_piece for SPM)
 * ------------------------------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

void spm_put_piece(const tokenizer *tok, int32_t id, int render_special, int strip, char *out,
                   size_t capacity, size_t *pos) {
    uint32_t n;
    const char *t = tok_token_text(tok, id, &n);
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

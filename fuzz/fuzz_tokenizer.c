/* libFuzzer target for the tokenizer (engine/tokenizer*.c).
 *
 * Build and run (60 s):
 *   clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_POSIX_C_SOURCE=200809L \
 *       engine/tokenizer*.c fuzz/fuzz_tokenizer.c -o /tmp/fuzz_tokenizer
 *   mkdir -p /tmp/corpus-tokenizer && /tmp/fuzz_tokenizer -max_total_time=60 /tmp/corpus-tokenizer
 *
 * Input: byte 0 picks the mode and flags, the rest is text (and, in vocab mode, a vocab).
 *   bit 0: TOKENIZER_ENCODE_ADD_SPECIAL      bit 1: TOKENIZER_ENCODE_PARSE_SPECIAL
 *   bit 2: the built-in vocab with add_space_prefix
 *   bit 3: vocab mode: the bytes up to "\xff\xff" are a vocab, tokens separated by 0xfe,
 *          each token's first byte giving its type (b % 7) and score ((b >> 3) - 16);
 *          bit 4 adds the 256 byte tokens; bit 5 makes it a byte-level BPE vocab whose merges
 *          are its token texts (those with a ' ' after byte 0 merge) and whose pre-tokenizer
 *          is the second input byte % TOKENIZER_PRE_COUNT.
 *   bit 5 (without bit 3): the built-in byte-level BPE vocab (all 256 byte characters, a few
 *          merges, a control and a user-defined token) with the pre-tokenizer the second byte
 *          picks; any input round-trips (invalid UTF-8 included) when ADD_SPECIAL is off.
 * Checks: fast encoder == reference encoder; a short capacity reports the same count and
 * writes a prefix only; decode and pieces never fail on valid ids; with the built-in vocab
 * (no space prefix, no add_special), valid UTF-8 without U+2581 round-trips exactly. The BPE
 * vocab is written by this harness: the fuzz run needs no files. */
#include "../engine/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TEXT 2048 /* the reference encoder is quadratic */
#define MAX_VOCAB 512

static const struct {
    const char *text;
    float score;
    int32_t type;
} builtin[] = {
    {"<unk>", 0, TOKENIZER_TYPE_UNKNOWN}, {"<s>", 0, TOKENIZER_TYPE_CONTROL},
    {"</s>", 0, TOKENIZER_TYPE_CONTROL}, {"\xe2\x96\x81", -1, TOKENIZER_TYPE_NORMAL},
    {"a", -2, TOKENIZER_TYPE_NORMAL}, {"b", -3, TOKENIZER_TYPE_NORMAL},
    {"ab", -5, TOKENIZER_TYPE_NORMAL}, {"bc", -0.5f, TOKENIZER_TYPE_NORMAL},
    {"abc", -1, TOKENIZER_TYPE_NORMAL}, {"\xe2\x96\x81" "a", -6, TOKENIZER_TYPE_NORMAL},
    {"\xe2\x96\x81\xe2\x96\x81", -2, TOKENIZER_TYPE_NORMAL}, {"<tag>", 0, TOKENIZER_TYPE_USER_DEFINED},
    {"<ctl>", 0, TOKENIZER_TYPE_CONTROL}, {"xy", 0, TOKENIZER_TYPE_USER_DEFINED},
    {"yzw", 0, TOKENIZER_TYPE_USER_DEFINED}, {"\n", 0, TOKENIZER_TYPE_USER_DEFINED},
    {"\n\n", 0, TOKENIZER_TYPE_USER_DEFINED}, {"\xc3\xa9", -7, TOKENIZER_TYPE_NORMAL},
    {"dd", -8, TOKENIZER_TYPE_NORMAL}, {"he", -9, TOKENIZER_TYPE_NORMAL},
    {"ll", -9, TOKENIZER_TYPE_NORMAL}, {"hell", -9.5f, TOKENIZER_TYPE_NORMAL},
    {"hello", -3.5f, TOKENIZER_TYPE_NORMAL}, {"<unused0>", 0, TOKENIZER_TYPE_UNUSED},
    {"\xe4\xbd\xa0", -4, TOKENIZER_TYPE_NORMAL}, {"\xe4\xbd\xa0\xe5\xa5\xbd", -1, TOKENIZER_TYPE_NORMAL},
};
#define N_BUILTIN ((int)(sizeof builtin / sizeof builtin[0]))

static tokenizer *builtin_tok[2];
static tokenizer *bpe_tok[TOKENIZER_PRE_COUNT];

typedef struct vocab_buf {
    const char *texts[MAX_VOCAB + 256];
    uint32_t lens[MAX_VOCAB + 256];
    float scores[MAX_VOCAB + 256];
    int32_t types[MAX_VOCAB + 256];
    char byte_names[256][6];
    tok_vocab v;
} vocab_buf;

static void add_token(vocab_buf *b, const char *text, uint32_t len, float score, int32_t type) {
    int32_t i = b->v.n_vocab++;
    b->texts[i] = text;
    b->lens[i] = len;
    b->scores[i] = score;
    b->types[i] = type;
}

static void add_byte_tokens(vocab_buf *b) {
    static const char hex[] = "0123456789ABCDEF";
    for (int c = 0; c < 256; c++) {
        char *n = b->byte_names[c];
        n[0] = '<', n[1] = '0', n[2] = 'x', n[3] = hex[c >> 4], n[4] = hex[c & 15], n[5] = '>';
        add_token(b, n, 6, 0, TOKENIZER_TYPE_BYTE);
    }
}

static void vocab_init(vocab_buf *b) {
    memset(&b->v, 0, sizeof b->v);
    b->v.texts = b->texts;
    b->v.text_lens = b->lens;
    b->v.scores = b->scores;
    b->v.types = b->types;
    b->v.bos_id = b->v.eos_id = b->v.unk_id = b->v.pad_id = -1;
}

static tokenizer *make_builtin(int space_prefix) {
    static vocab_buf b;
    vocab_init(&b);
    for (int i = 0; i < N_BUILTIN; i++)
        add_token(&b, builtin[i].text, (uint32_t)strlen(builtin[i].text), builtin[i].score,
                  builtin[i].type);
    add_byte_tokens(&b);
    b.v.unk_id = 0, b.v.bos_id = 1, b.v.eos_id = 2;
    b.v.add_bos = true;
    b.v.add_space_prefix = space_prefix != 0;
    tokenizer *tok = NULL;
    if (tokenizer_create(&b.v, &tok) != TOKENIZER_OK) abort();
    return tok;
}

/* GPT-2's byte characters (the BPE vocab's first 256 tokens), UTF-8. */
static char byte_chars[256][2];

static void make_byte_chars(void) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int cp = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae ? b : 256 + extra++;
        if (cp < 0x80) byte_chars[b][0] = (char)cp;
        else byte_chars[b][0] = (char)(0xc0 | (cp >> 6)), byte_chars[b][1] = (char)(0x80 | (cp & 0x3f));
    }
}

static uint32_t byte_char_len(int b) { return (unsigned char)byte_chars[b][0] < 0x80 ? 1 : 2; }

/* "Ġ" is the byte character of ' ', "Ã" and "©" those of 0xC3 and 0xA9 (é). */
static const char *const bpe_merges[] = {
    "a b", "\xc4\xa0 a", "\xc4\xa0" "a b", "h e", "l l", "he ll", "hell o", "\xc4\xa0 hello", "1 2", "12 3",
    "\xc3\x83 \xc2\xa9", "\xc4\xa0 \xc4\xa0", "\xc4\x8a \xc4\x8a", "' s", "\xe4 \xb8",
};
static const char *const bpe_merged[] = {
    "ab", "\xc4\xa0" "a", "\xc4\xa0" "ab", "he", "ll", "hell", "hello", "\xc4\xa0" "hello", "12", "123",
    "\xc3\x83\xc2\xa9", "\xc4\xa0\xc4\xa0", "\xc4\x8a\xc4\x8a", "'s",
};

static tokenizer *make_bpe(int pre) {
    static vocab_buf b;
    static const char *merges[sizeof bpe_merges / sizeof bpe_merges[0]];
    static uint32_t merge_lens[sizeof bpe_merges / sizeof bpe_merges[0]];
    vocab_init(&b);
    make_byte_chars();
    for (int c = 0; c < 256; c++) add_token(&b, byte_chars[c], byte_char_len(c), 0, TOKENIZER_TYPE_NORMAL);
    for (size_t i = 0; i < sizeof bpe_merged / sizeof bpe_merged[0]; i++)
        add_token(&b, bpe_merged[i], (uint32_t)strlen(bpe_merged[i]), 0, TOKENIZER_TYPE_NORMAL);
    add_token(&b, "<|end|>", 7, 0, TOKENIZER_TYPE_CONTROL);
    add_token(&b, "<tag>", 5, 0, TOKENIZER_TYPE_USER_DEFINED);
    for (size_t i = 0; i < sizeof bpe_merges / sizeof bpe_merges[0]; i++) {
        merges[i] = bpe_merges[i];
        merge_lens[i] = (uint32_t)strlen(bpe_merges[i]);
    }
    b.v.model = TOKENIZER_MODEL_BPE;
    b.v.pre = pre;
    b.v.merges = merges;
    b.v.merge_lens = merge_lens;
    b.v.n_merges = (int32_t)(sizeof bpe_merges / sizeof bpe_merges[0]);
    b.v.bos_id = b.v.eos_id = b.v.n_vocab - 2;
    b.v.add_bos = true;
    tokenizer *tok = NULL;
    if (tokenizer_create(&b.v, &tok) != TOKENIZER_OK) abort();
    return tok;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return 0;
        i += len;
    }
    return 1;
}

static int contains(const uint8_t *s, size_t n, const char *pat, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, pat, m) == 0) return 1;
    return 0;
}

static void check_tokenizer(tokenizer *tok, const uint8_t *text, size_t len, unsigned flags,
                            int check_round_trip) {
    size_t cap = tokenizer_encode_bound(tok, len);
    int32_t *ids = malloc(cap * sizeof *ids), *ref = malloc(cap * sizeof *ref);
    if (!ids || !ref) abort();
    size_t n = 0, n_ref = 0;
    int rc = tokenizer_encode(tok, (const char *)text, len, flags, ids, cap, &n);
    int rc_ref = tokenizer_encode_ref(tok, (const char *)text, len, flags, ref, cap, &n_ref);
    if (rc != rc_ref) abort();
    if (rc == TOKENIZER_ERR_NO_BYTE_TOKEN) goto done;
    if (rc != TOKENIZER_OK || n != n_ref || n > cap) abort();
    if (memcmp(ids, ref, n * sizeof *ids) != 0) abort();

    /* Short capacity: same count, only a prefix written. */
    if (n > 0) {
        size_t small = n / 2, n2 = 0;
        for (size_t i = 0; i < cap; i++) ref[i] = -5;
        if (tokenizer_encode(tok, (const char *)text, len, flags, ref, small, &n2) !=
                TOKENIZER_ERR_BUFFER_TOO_SMALL ||
            n2 != n || memcmp(ref, ids, small * sizeof *ids) != 0 || ref[small] != -5)
            abort();
    }

    size_t dlen = 0;
    int drc = tokenizer_decode(tok, ids, n, TOKENIZER_DECODE_RENDER_SPECIAL, NULL, 0, &dlen);
    if (drc != TOKENIZER_OK && drc != TOKENIZER_ERR_BUFFER_TOO_SMALL) abort();
    char *back = malloc(dlen + 1);
    if (!back) abort();
    size_t dlen2 = 0;
    if (tokenizer_decode(tok, ids, n, TOKENIZER_DECODE_RENDER_SPECIAL, back, dlen, &dlen2) !=
            TOKENIZER_OK || dlen2 != dlen)
        abort();
    if (check_round_trip && (dlen != len || memcmp(back, text, len) != 0)) abort();
    if (dlen > 0) {
        char *part = malloc(dlen);
        if (!part) abort();
        size_t dlen3 = 0;
        if (tokenizer_decode(tok, ids, n, TOKENIZER_DECODE_RENDER_SPECIAL, part, dlen - 1, &dlen3) !=
                TOKENIZER_ERR_BUFFER_TOO_SMALL ||
            dlen3 != dlen || memcmp(part, back, dlen - 1) != 0)
            abort();
        free(part);
    }
    for (size_t i = 0; i < n; i++) {
        char piece[512];
        size_t pl = 0;
        int prc = tokenizer_token_to_piece(tok, ids[i], 0, piece, sizeof piece, &pl);
        if (prc != TOKENIZER_OK && prc != TOKENIZER_ERR_BUFFER_TOO_SMALL) abort();
    }
    free(back);
done:
    free(ids);
    free(ref);
}

static void fuzz_vocab_mode(const uint8_t *data, size_t size, unsigned flags, int bytes, int bpe) {
    static vocab_buf b;
    vocab_init(&b);
    int pre = 0;
    if (bpe) {
        if (size < 1) return;
        pre = data[0] % TOKENIZER_PRE_COUNT;
        data++, size--;
    }
    size_t sep = size;
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == 0xff && data[i + 1] == 0xff) {
            sep = i;
            break;
        }
    size_t start = 0;
    for (size_t i = 0; i <= sep && b.v.n_vocab < MAX_VOCAB; i++) {
        if (i < sep && data[i] != 0xfe) continue;
        if (i > start) {
            uint8_t info = data[start];
            add_token(&b, (const char *)data + start + 1, (uint32_t)(i - start - 1),
                      (float)((info >> 3) - 16), info % 7);
        }
        start = i + 1;
    }
    if (bytes) add_byte_tokens(&b);
    if (b.v.n_vocab == 0) return;
    b.v.unk_id = (flags & 1) ? 0 : -1;
    b.v.bos_id = 0;
    b.v.add_bos = true;
    b.v.add_space_prefix = (flags & 4) != 0;
    if (bpe) {
        b.v.model = TOKENIZER_MODEL_BPE;
        b.v.pre = pre;
        b.v.merges = b.texts;
        b.v.merge_lens = b.lens;
        b.v.n_merges = b.v.n_vocab;
    }
    tokenizer *tok = NULL;
    if (tokenizer_create(&b.v, &tok) != TOKENIZER_OK) abort();
    const uint8_t *text = sep + 2 <= size ? data + sep + 2 : data + size;
    size_t len = (size_t)(data + size - text);
    if (len > MAX_TEXT) len = MAX_TEXT;
    check_tokenizer(tok, text, len, flags & 3, 0);
    tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    data++, size--;
    if (mode & 8) {
        fuzz_vocab_mode(data, size, mode & 7, (mode & 16) != 0, (mode & 32) != 0);
        return 0;
    }
    if (mode & 32) {
        if (size < 1) return 0;
        int pre = data[0] % TOKENIZER_PRE_COUNT;
        data++, size--;
        if (!bpe_tok[pre]) bpe_tok[pre] = make_bpe(pre);
        if (size > MAX_TEXT) size = MAX_TEXT;
        unsigned flags = mode & 3;
        check_tokenizer(bpe_tok[pre], data, size, flags, !(flags & TOKENIZER_ENCODE_ADD_SPECIAL));
        return 0;
    }
    int prefix = (mode & 4) != 0;
    if (!builtin_tok[prefix]) builtin_tok[prefix] = make_builtin(prefix);
    if (size > MAX_TEXT) size = MAX_TEXT;
    unsigned flags = mode & 3;
    int round_trip = !prefix && !(flags & TOKENIZER_ENCODE_ADD_SPECIAL) && valid_utf8(data, size) &&
                     !contains(data, size, "\xe2\x96\x81", 3);
    check_tokenizer(builtin_tok[prefix], data, size, flags, round_trip);
    return 0;
}

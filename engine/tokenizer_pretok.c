/* Pre-tokenizers of byte-level BPE: llama.cpp's regex list for each tokenizer.ggml.pre,
 * compiled with PCRE2 (Unicode properties, JIT when the library has it), and the split of a
 * raw fragment into words. doc/tokenizer.md has the reasoning; in short:
 *
 *   - llama.cpp applies the regexes of a list one after the other: each splits every piece
 *     the previous one left into its matches and the unmatched gaps between them (both are
 *     kept). We do the same, each regex matching within one piece at a time (a lookahead or
 *     '$' sees the end of the piece, not of the text, as in llama.cpp).
 *   - llama.cpp runs some lists through hand-written matchers (GPT-2, Llama 3) and the rest
 *     through std::regex on a text whose characters are collapsed to one byte per Unicode
 *     category, or std::wregex with non-ASCII white space turned into '\v'. Both mean: '\s' is
 *     the Unicode White_Space set (written out below: PCRE2's own '\s' differs on U+0085),
 *     and a literal character class never contains a white-space character (the ranges of the
 *     deepseek-llm list that span one are cut around it here).
 *   - Invalid UTF-8: llama.cpp decodes the text leniently and turns each byte it cannot decode
 *     into U+FFFD. We split a copy in which every byte that does not start a well-formed UTF-8
 *     character (RFC 3629: no overlongs, surrogates or code points past U+10FFFF) is U+FFFD,
 *     then map the word boundaries back: the words keep the original bytes, so byte-level BPE
 *     round-trips any input. */
#include "tokenizer_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The regex lists (llama.cpp llm_tokenizer_bpe, src/llama-vocab.cpp)
 * ------------------------------------------------------------------------------------- */

/* Unicode White_Space, what '\s' means in every llama.cpp pre-tokenizer. */
#define WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define SP "[" WS "]"
#define NSP "[^" WS "]"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) (llama.cpp matches it
 * by hand and takes a lone white space no branch matches as a word: the \s+ at the end). */
#define RE_GPT2                                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" SP "+(?!" NSP ")|" SP \
    "+"

/* Llama 3 and Qwen 2 differ in the digit run: \p{N}{1,3} or \p{N}. */
#define RE_LLAMA3_LIKE(DIGITS)                                                                 \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    DIGITS "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" SP "*[\\r\\n]+|" SP "+(?!" NSP ")|" SP "+"

/* deepseek-llm's classes, white space cut out (llama.cpp matches them with std::wregex on a
 * text where non-ASCII white space is '\v'). */
#define DS_LETTERS                                                                            \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-"     \
    "\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}"      \
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"     \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-"       \
    "\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"    \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-"   \
    "\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-"     \
    "\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-"    \
    "\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"    \
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"     \
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-"    \
    "\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-"     \
    "\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"     \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-"   \
    "\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-"         \
    "\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-"    \
    "\\x{118DF}\\x{1E900}-\\x{1E943}"
#define DS_PUNCT "!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}"
#define DS_CJK                                                                                 \
    "\\x{4E00}-\\x{9FA5}\\x{800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-"    \
    "\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{4E00}\\x{AC00}-\\x{D7FF}"

#define MAX_REGEX 6

static const struct pre_def {
    const char *name;
    const char *aliases[4];
    int ignore_merges;
    const char *regex[MAX_REGEX];
} pre_defs[TOKENIZER_PRE_COUNT] = {
    [TOKENIZER_PRE_DEFAULT] = {"default", {NULL}, 0,
                               {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    [TOKENIZER_PRE_LLAMA3] = {"llama-bpe", {"llama3", "llama-v3", NULL}, 1,
                              {RE_LLAMA3_LIKE("\\p{N}{1,3}")}},
    [TOKENIZER_PRE_QWEN2] = {"qwen2", {"deepseek-r1-qwen", NULL}, 0, {RE_LLAMA3_LIKE("\\p{N}")}},
    [TOKENIZER_PRE_SMOLLM] = {"smollm", {"starcoder", NULL}, 0, {"\\p{N}", RE_GPT2}},
    [TOKENIZER_PRE_GPT2] = {"gpt-2", {"phi-2", "mpt", "olmo", NULL}, 0, {RE_GPT2}},
    [TOKENIZER_PRE_DEEPSEEK_LLM] = {"deepseek-llm", {NULL}, 0,
                                    {"[\\r\\n]", SP "?[" DS_LETTERS "]+", SP "?[" DS_PUNCT "]+",
                                     SP "+$", "[" DS_CJK "]+", "\\p{N}+"}},
};

static int name_is(const char *want, const char *name, size_t len) {
    return strlen(want) == len && memcmp(want, name, len) == 0;
}

int tokenizer_pre_from_name(const char *name, size_t len) {
    if (!name) return -1;
    for (int p = 0; p < TOKENIZER_PRE_COUNT; p++) {
        if (name_is(pre_defs[p].name, name, len)) return p;
        for (int a = 0; a < 4 && pre_defs[p].aliases[a]; a++)
            if (name_is(pre_defs[p].aliases[a], name, len)) return p;
    }
    return -1;
}

const char *tokenizer_pre_name(int pre) {
    return pre >= 0 && pre < TOKENIZER_PRE_COUNT ? pre_defs[pre].name : "?";
}

/* ---------------------------------------------------------------------------------------
 * Compile
 * ------------------------------------------------------------------------------------- */

struct tok_pretok {
    int n_regex;
    pcre2_code *code[MAX_REGEX];
};

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_regex; i++) pcre2_code_free(p->code[i]);
    free(p);
}

int tok_pretok_create(int pre, tok_pretok **out) {
    *out = NULL;
    if (pre < 0 || pre >= TOKENIZER_PRE_COUNT) return TOKENIZER_ERR_BAD_VOCAB;
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return TOKENIZER_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < MAX_REGEX && pre_defs[pre].regex[i]; i++) {
        int err;
        PCRE2_SIZE err_off;
        p->code[i] = pcre2_compile((PCRE2_SPTR)pre_defs[pre].regex[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_off, NULL);
        if (!p->code[i]) {
            tok_pretok_free(p);
            return err == PCRE2_ERROR_NOMEMORY ? TOKENIZER_ERR_OUT_OF_MEMORY : TOKENIZER_ERR_REGEX;
        }
        p->n_regex = i + 1;
        (void)pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE); /* no JIT: the interpreter */
    }
    *out = p;
    return TOKENIZER_OK;
}

void tok_pretok_scratch_free(tokenizer_scratch *s) {
    pcre2_match_data_free(s->match_data);
    s->match_data = NULL;
}

/* ---------------------------------------------------------------------------------------
 * Invalid UTF-8
 * ------------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 character at p[0..n) (RFC 3629), or 0 if none starts there. */
static size_t utf8_char_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* Offset of the first byte of text that does not start a well-formed character, or len. */
static size_t utf8_valid_prefix(const unsigned char *t, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (t[i] < 0x80) {
            i++;
            continue;
        }
        size_t cl = utf8_char_len(t + i, len - i);
        if (cl == 0) return i;
        i += cl;
    }
    return len;
}

/* s->san = text with each byte that starts no well-formed character as U+FFFD. Returns its
 * length, or 0 on allocation failure. */
static size_t sanitize(tokenizer_scratch *s, const unsigned char *t, size_t len) {
    if (!tok_grow((void **)&s->san, &s->san_cap, 3 * len, 1)) return 0;
    size_t j = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = t[i] < 0x80 ? 1 : utf8_char_len(t + i, len - i);
        if (cl == 0) {
            memcpy(s->san + j, "\xef\xbf\xbd", 3);
            j += 3;
            i++;
        } else {
            memcpy(s->san + j, t + i, cl);
            j += cl;
            i += cl;
        }
    }
    return j;
}

/* The words sp[0..n) (offsets in the sanitized copy; in order, back to back, each boundary at
 * a character) as offsets in t: one walk over both texts. */
static void unsanitize(uint32_t *sp, size_t n, const unsigned char *t, size_t len) {
    size_t i = 0, j = 0; /* offsets in t and in the copy */
    for (size_t w = 0; w < n; w++) {
        size_t start = i, end = (size_t)sp[2 * w] + sp[2 * w + 1];
        while (j < end) {
            size_t cl = t[i] < 0x80 ? 1 : utf8_char_len(t + i, len - i);
            i += cl ? cl : 1;
            j += cl ? cl : 3;
        }
        sp[2 * w] = (uint32_t)start;
        sp[2 * w + 1] = (uint32_t)(i - start);
    }
}

/* ---------------------------------------------------------------------------------------
 * Split
 * ------------------------------------------------------------------------------------- */

static int put_span(tokenizer_scratch *s, int buf, size_t *n, size_t off, size_t len) {
    if (!tok_grow((void **)&s->spans[buf], &s->spans_cap[buf], 2 * (*n + 1), sizeof(uint32_t)))
        return 0;
    s->spans[buf][2 * *n] = (uint32_t)off;
    s->spans[buf][2 * *n + 1] = (uint32_t)len;
    (*n)++;
    return 1;
}

/* One regex over the pieces in spans[src] -> spans[src ^ 1]: matches and the gaps. */
static int split_one(const pcre2_code *code, tokenizer_scratch *s, const char *text, int src,
                     size_t n_src, size_t *n_dst, uint32_t opts) {
    pcre2_match_data *md = s->match_data;
    int dst = src ^ 1;
    *n_dst = 0;
    for (size_t w = 0; w < n_src; w++) {
        size_t off = s->spans[src][2 * w], len = s->spans[src][2 * w + 1];
        const PCRE2_SPTR subject = (PCRE2_SPTR)(text + off);
        size_t pos = 0, prev = 0;
        while (pos < len) {
            int rc = pcre2_match(code, subject, len, pos, opts, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? TOKENIZER_ERR_OUT_OF_MEMORY
                                                          : TOKENIZER_ERR_REGEX;
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* an empty match (none of our lists has one): step a character */
                pos = ms + tok_utf8_len((unsigned char)text[off + ms]);
                continue;
            }
            if (ms > prev && !put_span(s, dst, n_dst, off + prev, ms - prev))
                return TOKENIZER_ERR_OUT_OF_MEMORY;
            if (!put_span(s, dst, n_dst, off + ms, me - ms)) return TOKENIZER_ERR_OUT_OF_MEMORY;
            prev = pos = me;
        }
        if (prev < len && !put_span(s, dst, n_dst, off + prev, len - prev))
            return TOKENIZER_ERR_OUT_OF_MEMORY;
    }
    return TOKENIZER_OK;
}

int tok_pretok_split(const tok_pretok *p, tokenizer_scratch *s, const char *text, size_t len,
                     int jit, const uint32_t **words, size_t *n_words) {
    *words = NULL;
    *n_words = 0;
    if (len == 0) return TOKENIZER_OK;
    if (!s->match_data) {
        s->match_data = pcre2_match_data_create(4, NULL);
        if (!s->match_data) return TOKENIZER_ERR_OUT_OF_MEMORY;
    }
    const char *subject = text;
    size_t sub_len = len;
    int mapped = utf8_valid_prefix((const unsigned char *)text, len) != len;
    if (mapped) {
        sub_len = sanitize(s, (const unsigned char *)text, len);
        if (sub_len == 0) return TOKENIZER_ERR_OUT_OF_MEMORY;
        subject = s->san;
    }
    size_t n = 0;
    if (!put_span(s, 0, &n, 0, sub_len)) return TOKENIZER_ERR_OUT_OF_MEMORY;
    uint32_t opts = PCRE2_NO_UTF_CHECK | (jit ? 0 : PCRE2_NO_JIT);
    int cur = 0;
    for (int r = 0; r < p->n_regex; r++) {
        size_t n_next;
        int rc = split_one(p->code[r], s, subject, cur, n, &n_next, opts);
        if (rc != TOKENIZER_OK) return rc;
        cur ^= 1;
        n = n_next;
    }
    uint32_t *sp = s->spans[cur];
    if (mapped) unsanitize(sp, n, (const unsigned char *)text, len);
    *words = sp;
    *n_words = n;
    return TOKENIZER_OK;
}

/* tok_vocab from tokenizer.ggml.* keys; see vocab.h. */
#include "vocab.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *vocab_status_name(int status) {
    switch (status) {
        case VOCAB_OK: return "VOCAB_OK";
        case VOCAB_ERR_ARG: return "VOCAB_ERR_ARG";
        case VOCAB_ERR_MISSING: return "VOCAB_ERR_MISSING";
        case VOCAB_ERR_MODEL: return "VOCAB_ERR_MODEL";
        case VOCAB_ERR_FORMAT: return "VOCAB_ERR_FORMAT";
        case VOCAB_ERR_NOMEM: return "VOCAB_ERR_NOMEM";
        case VOCAB_ERR_PRE: return "VOCAB_ERR_PRE";
        default: return "VOCAB_ERR_UNKNOWN";
    }
}

void vocab_free(gguf_vocab *v) {
    if (v == NULL) return;
    free(v->texts);
    free(v->text_lens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v->merge_lens);
    free(v->strip);
    memset(v, 0, sizeof *v);
}

static vocab_status failv(gguf_vocab *v, vocab_status st, char *err, size_t cap, const char *msg, const char *key) {
    if (err != NULL && cap > 0) snprintf(err, cap, "%s%s%s", msg, key ? ": " : "", key ? key : "");
    vocab_free(v);
    return st;
}

/* A special id key: -1 when absent; an error when present but not a valid id. */
static int special_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *out) {
    uint32_t id;
    gguf_status st = gguf_get_u32(f, key, &id);
    if (st == GGUF_ERR_NOT_FOUND) {
        *out = -1;
        return 1;
    }
    if (st != GGUF_OK || id >= (uint32_t)n_vocab) return 0;
    *out = (int32_t)id;
    return 1;
}

static int flag(const gguf_file *f, const char *key, int dflt) {
    int b;
    return gguf_get_bool(f, key, &b) == GGUF_OK ? b : dflt;
}

/* The byte-level BPE keys: tokenizer.ggml.pre (missing: "default", as llama.cpp) and the
 * merges (required). */
static vocab_status read_bpe(const gguf_file *f, gguf_vocab *out, int32_t *pre, char *err, size_t err_cap) {
    const char *s;
    size_t len;
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s, &len) == GGUF_OK) {
        int p = tokenizer_pre_from_name(s, len);
        if (p < 0) {
            if (err != NULL && err_cap > 0)
                snprintf(err, err_cap,
                         "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer we have "
                         "(default, llama-bpe, qwen2, smollm, gpt-2, deepseek-llm and aliases)",
                         (int)(len > 64 ? 64 : len), s);
            vocab_free(out);
            return VOCAB_ERR_PRE;
        }
        *pre = p;
    }
    gguf_array a;
    if (gguf_get_arr(f, "tokenizer.ggml.merges", &a) != GGUF_OK || a.type != GGUF_VALUE_STRING || a.count > INT32_MAX)
        return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "gpt2 vocabulary: missing or bad", "tokenizer.ggml.merges");
    out->v.n_merges = (int32_t)a.count;
    out->merges = malloc((a.count ? (size_t)a.count : 1) * sizeof *out->merges);
    out->merge_lens = malloc((a.count ? (size_t)a.count : 1) * sizeof *out->merge_lens);
    if (out->merges == NULL || out->merge_lens == NULL) return failv(out, VOCAB_ERR_NOMEM, err, err_cap, "out of memory", NULL);
    for (uint64_t i = 0; i < a.count; i++) {
        if (gguf_array_get_str(&a, i, &s, &len) != GGUF_OK || len > UINT32_MAX)
            return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "bad merge", "tokenizer.ggml.merges");
        out->merges[i] = s;
        out->merge_lens[i] = (uint32_t)len;
    }
    return VOCAB_OK;
}

/* ---- llama.cpp's load-time fixes of token attributes (llama_vocab::impl::load) -------- */

/* End-of-generation texts: such a token becomes a control token (llama.cpp warns
 * "control-looking token ... was not control-type" and overrides it). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

/* Fill-in-the-middle texts, by role: control tokens too, unless the file names the role's id. */
static const struct fim_group {
    const char *keys[2];
    const char *texts[9];
} fim_groups[] = {
    {{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL}},
    {{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL}},
    {{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL}},
    {{"tokenizer.ggml.fim_pad_token_id", NULL}, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
    {{"tokenizer.ggml.fim_rep_token_id", NULL},
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL}},
    {{"tokenizer.ggml.fim_sep_token_id", NULL}, {"<|file_sep|>", NULL}},
};

/* Id of the token with text t (the highest id, as llama.cpp's text -> id map), or -1. */
static int32_t text_id(const gguf_vocab *gv, const char *t) {
    size_t len = strlen(t);
    for (int32_t i = gv->v.n_vocab - 1; i >= 0; i--)
        if (gv->text_lens[i] == len && memcmp(gv->texts[i], t, len) == 0) return i;
    return -1;
}

static void set_type_of(gguf_vocab *gv, const char *t, int32_t type) {
    int32_t id = text_id(gv, t);
    if (id >= 0) gv->types[id] = type;
}

static int is_special(int32_t type) {
    return type == TOKENIZER_TYPE_CONTROL || type == TOKENIZER_TYPE_USER_DEFINED || type == TOKENIZER_TYPE_UNKNOWN;
}

/* Types: end-of-generation and FIM texts become control tokens, gpt-oss's channel tokens
 * user-defined, "<|end|>" user-defined next to "<|return|>" and "<|call|>" (or "<|calls|>"
 * and "<|flush|>"), "</s>" normal next to "<|tool_response>". Strip flags by model name:
 * Phi-3 (every special token but <unk>, <s>, <|endoftext|> eats the white space after it),
 * ModernBERT ("[MASK]" eats the white space before it). */
static vocab_status fix_attributes(const gguf_file *f, gguf_vocab *gv) {
    const int32_t n = gv->v.n_vocab;
    if (gv->types == NULL) {
        gv->types = malloc((size_t)n * sizeof *gv->types);
        if (gv->types == NULL) return VOCAB_ERR_NOMEM;
        for (int32_t i = 0; i < n; i++) gv->types[i] = TOKENIZER_TYPE_NORMAL;
    }
    for (size_t g = 0; g < sizeof fim_groups / sizeof fim_groups[0]; g++) {
        const struct fim_group *fg = &fim_groups[g];
        if (gguf_find_key(f, fg->keys[0]) >= 0 || (fg->keys[1] && gguf_find_key(f, fg->keys[1]) >= 0)) continue;
        for (int t = 0; fg->texts[t]; t++) set_type_of(gv, fg->texts[t], TOKENIZER_TYPE_CONTROL);
    }
    for (int t = 0; eog_texts[t]; t++) set_type_of(gv, eog_texts[t], TOKENIZER_TYPE_CONTROL);
    static const char *const channel[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (int t = 0; t < 4; t++) set_type_of(gv, channel[t], TOKENIZER_TYPE_USER_DEFINED);
    if (text_id(gv, "<|end|>") >= 0 && ((text_id(gv, "<|return|>") >= 0 && text_id(gv, "<|call|>") >= 0) ||
                                        (text_id(gv, "<|calls|>") >= 0 && text_id(gv, "<|flush|>") >= 0)))
        set_type_of(gv, "<|end|>", TOKENIZER_TYPE_USER_DEFINED);
    if (text_id(gv, "<|tool_response>") >= 0) set_type_of(gv, "</s>", TOKENIZER_TYPE_NORMAL);

    const char *s;
    size_t len;
    char name[256] = "";
    if (gguf_get_str(f, "general.name", &s, &len) == GGUF_OK) {
        if (len >= sizeof name) len = sizeof name - 1;
        for (size_t i = 0; i < len; i++) name[i] = (char)tolower((unsigned char)s[i]);
        name[len] = 0;
    }
    const int phi3 = strstr(name, "phi-3") || strstr(name, "phi3"), modern_bert = strstr(name, "modern-bert") != NULL;
    if (!phi3 && !modern_bert) return VOCAB_OK;
    gv->strip = calloc((size_t)n, 1);
    if (gv->strip == NULL) return VOCAB_ERR_NOMEM;
    gv->v.strip = gv->strip;
    int32_t id;
    if (phi3) {
        for (int32_t i = 0; i < n; i++)
            if (is_special(gv->types[i])) gv->strip[i] = TOKENIZER_STRIP_RIGHT;
        if ((id = text_id(gv, "</s>")) >= 0) gv->strip[id] = TOKENIZER_STRIP_RIGHT;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int t = 0; t < 3; t++)
            if ((id = text_id(gv, keep[t])) >= 0) gv->strip[id] = 0;
    } else if ((id = text_id(gv, "[MASK]")) >= 0) {
        gv->strip[id] = TOKENIZER_STRIP_LEFT;
    }
    return VOCAB_OK;
}

vocab_status vocab_build(const gguf_file *f, gguf_vocab *out, char *err, size_t err_cap) {
    if (out == NULL) return VOCAB_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (f == NULL) return failv(out, VOCAB_ERR_ARG, err, err_cap, "NULL file", NULL);
    const char *s;
    size_t len;
    int32_t model = TOKENIZER_MODEL_SPM, pre = TOKENIZER_PRE_DEFAULT;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s, &len) == GGUF_OK) {
        if (len == 4 && memcmp(s, "gpt2", 4) == 0) {
            model = TOKENIZER_MODEL_BPE;
        } else if (!(len == 5 && memcmp(s, "llama", 5) == 0)) {
            if (err != NULL && err_cap > 0)
                snprintf(err, err_cap, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                         (int)(len > 64 ? 64 : len), s);
            vocab_free(out);
            return VOCAB_ERR_MODEL;
        }
    }
    if (model == TOKENIZER_MODEL_BPE) {
        vocab_status st = read_bpe(f, out, &pre, err, err_cap);
        if (st != VOCAB_OK) return st;
    }
    gguf_array toks;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) != GGUF_OK || toks.type != GGUF_VALUE_STRING ||
        toks.count < 1 || toks.count > INT32_MAX)
        return failv(out, VOCAB_ERR_MISSING, err, err_cap, "missing or bad", "tokenizer.ggml.tokens");
    const int32_t n = (int32_t)toks.count;
    out->texts = malloc((size_t)n * sizeof *out->texts);
    out->text_lens = malloc((size_t)n * sizeof *out->text_lens);
    if (out->texts == NULL || out->text_lens == NULL) return failv(out, VOCAB_ERR_NOMEM, err, err_cap, "out of memory", NULL);
    for (int32_t i = 0; i < n; i++) {
        if (gguf_array_get_str(&toks, (uint64_t)i, &s, &len) != GGUF_OK || len > UINT32_MAX)
            return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "bad token text", "tokenizer.ggml.tokens");
        out->texts[i] = s;
        out->text_lens[i] = (uint32_t)len;
    }
    gguf_array a;
    if (gguf_get_arr(f, "tokenizer.ggml.scores", &a) == GGUF_OK) {
        if (a.count != (uint64_t)n) return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "length differs", "tokenizer.ggml.scores");
        out->scores = malloc((size_t)n * sizeof *out->scores);
        if (out->scores == NULL) return failv(out, VOCAB_ERR_NOMEM, err, err_cap, "out of memory", NULL);
        for (int32_t i = 0; i < n; i++)
            if (gguf_array_get_f32(&a, (uint64_t)i, &out->scores[i]) != GGUF_OK)
                return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "not float32", "tokenizer.ggml.scores");
    }
    if (gguf_get_arr(f, "tokenizer.ggml.token_type", &a) == GGUF_OK) {
        if (a.count != (uint64_t)n) return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "length differs", "tokenizer.ggml.token_type");
        out->types = malloc((size_t)n * sizeof *out->types);
        if (out->types == NULL) return failv(out, VOCAB_ERR_NOMEM, err, err_cap, "out of memory", NULL);
        for (int32_t i = 0; i < n; i++)
            if (gguf_array_get_i32(&a, (uint64_t)i, &out->types[i]) != GGUF_OK || out->types[i] < 0 || out->types[i] > 6)
                return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "bad type", "tokenizer.ggml.token_type");
    }
    tok_vocab *v = &out->v;
    v->model = model;
    v->pre = pre;
    v->merges = out->merges;
    v->merge_lens = out->merge_lens;
    v->n_vocab = n;
    v->texts = out->texts;
    v->text_lens = out->text_lens;
    v->scores = out->scores;
    v->types = out->types;
    if (!special_id(f, "tokenizer.ggml.bos_token_id", n, &v->bos_id) ||
        !special_id(f, "tokenizer.ggml.eos_token_id", n, &v->eos_id) ||
        !special_id(f, "tokenizer.ggml.unknown_token_id", n, &v->unk_id) ||
        !special_id(f, "tokenizer.ggml.padding_token_id", n, &v->pad_id))
        return failv(out, VOCAB_ERR_FORMAT, err, err_cap, "special token id out of range", NULL);
    const int bpe = model == TOKENIZER_MODEL_BPE;
    v->add_bos = flag(f, "tokenizer.ggml.add_bos_token", bpe ? pre == TOKENIZER_PRE_LLAMA3 : 1) && v->bos_id >= 0;
    v->add_eos = flag(f, "tokenizer.ggml.add_eos_token", 0) && v->eos_id >= 0;
    v->add_space_prefix = flag(f, "tokenizer.ggml.add_space_prefix", !bpe);
    if (fix_attributes(f, out) != VOCAB_OK) return failv(out, VOCAB_ERR_NOMEM, err, err_cap, "out of memory", NULL);
    v->types = out->types;
    return VOCAB_OK;
}

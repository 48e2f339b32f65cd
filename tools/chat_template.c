/* Chat template families: detection by distinctive substrings and the layout of each family
 * (chat_template.h; the rules and their sources are in doc/chat.md). The layouts are those of
 * llama.cpp's built-in formatter (llm_chat_apply_template), written here from the templates'
 * own text; the expected strings of tests/test_chat_template.c pin them. */
#include "chat_template.h"

#include <stdlib.h>
#include <string.h>

static const char *const family_names[CHAT_N_FAMILIES] = {
    [CHAT_CHATML] = "chatml",
    [CHAT_GEMMA] = "gemma",
    [CHAT_LLAMA3] = "llama3",
    [CHAT_LLAMA2] = "llama2",
    [CHAT_LLAMA2_SYS] = "llama2-sys",
    [CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_MISTRAL_V7] = "mistral-v7",
    [CHAT_PHI3] = "phi3",
    [CHAT_ZEPHYR] = "zephyr",
};

chat_family chat_template_by_name(const char *name) {
    if (name == NULL) return CHAT_UNKNOWN;
    for (int f = 0; f < CHAT_N_FAMILIES; f++)
        if (!strcmp(name, family_names[f])) return (chat_family)f;
    return CHAT_UNKNOWN;
}

const char *chat_template_name(chat_family f) {
    return f >= 0 && f < CHAT_N_FAMILIES ? family_names[f] : "unknown";
}

const char *chat_template_list(void) {
    return "chatml, gemma, llama3, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, "
           "mistral-v7, phi3, zephyr";
}

/* ---- detection ---------------------------------------------------------------------------- */

/* needle in hay[0..len) (hay need not be NUL-terminated). */
static int has(const char *hay, size_t len, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0 || n > len) return n == 0;
    for (size_t i = 0; i + n <= len; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, n)) return 1;
    return 0;
}

/* One rule: the template holds `a` (and `b` when given) → family. Rules are tried in order,
 * the first that matches decides; CHAT_UNKNOWN rules are families llama.cpp knows that we do
 * not lay out: they stop a later, wrong rule from matching (a Phi-4 template also holds
 * <|im_start|>, a Falcon 3 one <|assistant|>). */
typedef struct rule {
    const char *a, *b;
    chat_family family;
} rule;

static const rule rules[] = {
    {"<|im_sep|>", "<|im_start|>", CHAT_UNKNOWN},         /* phi4 */
    {"<end_of_utterance>", "<|im_start|>", CHAT_UNKNOWN}, /* smolvlm */
    {"<|im_start|>", NULL, CHAT_CHATML},
    /* [INST] families: decided in detect_inst below */
    {"<|assistant|>", "<|end|>", CHAT_PHI3},
    {"[gMASK]<sop>", NULL, CHAT_UNKNOWN},                 /* chatglm4 */
    {"<|assistant|>", "<|user|>", CHAT_UNKNOWN},          /* falcon3, glmedge */
    {"<|{{ item['role'] }}|>", "<|begin_of_image|>", CHAT_UNKNOWN}, /* glmedge */
    {"<|user|>", "<|endoftext|>", CHAT_ZEPHYR},
    {"bos_token + message['role']", NULL, CHAT_UNKNOWN},  /* monarch */
    {"<start_of_turn>", NULL, CHAT_GEMMA},
    {"'\\n\\nAssistant: ' + eos_token", NULL, CHAT_UNKNOWN}, /* orion */
    {"GPT4 Correct ", NULL, CHAT_UNKNOWN},                /* openchat */
    {"USER: ", "ASSISTANT: ", CHAT_UNKNOWN},              /* vicuna */
    {"### Instruction:", "<|EOT|>", CHAT_UNKNOWN},        /* deepseek coder */
    {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", CHAT_UNKNOWN}, /* command-r */
    {"<|start_header_id|>", "<|end_header_id|>", CHAT_LLAMA3},
};

/* Templates with [INST] (or starting with "mistral"): Mistral v7, the Llama 2 variants, or a
 * Mistral v1/v3 template (unknown here). */
static chat_family detect_inst(const char *t, size_t len) {
    if (has(t, len, "[SYSTEM_PROMPT]")) return CHAT_MISTRAL_V7;
    if (has(t, len, "' [INST] ' + system_message") || has(t, len, "[AVAILABLE_TOOLS]"))
        return CHAT_UNKNOWN; /* mistral v1 / v3 / v3-tekken */
    if (has(t, len, "content.strip()")) return CHAT_LLAMA2_SYS_STRIP;
    if (has(t, len, "bos_token + '[INST]")) return CHAT_LLAMA2_SYS_BOS;
    if (has(t, len, "<<SYS>>")) return CHAT_LLAMA2_SYS;
    return CHAT_LLAMA2;
}

chat_family chat_template_detect(const char *tmpl, size_t len) {
    if (tmpl == NULL) return CHAT_UNKNOWN;
    for (int f = 0; f < CHAT_N_FAMILIES; f++) {
        size_t n = strlen(family_names[f]);
        if (n == len && !memcmp(tmpl, family_names[f], n)) return (chat_family)f;
    }
    const size_t n_before_inst = 3; /* the <|im_start|> rules come before [INST] */
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (i == n_before_inst &&
            ((len >= 7 && !memcmp(tmpl, "mistral", 7)) || has(tmpl, len, "[INST]")))
            return detect_inst(tmpl, len);
        const rule *r = &rules[i];
        if (has(tmpl, len, r->a) && (r->b == NULL || has(tmpl, len, r->b))) return r->family;
    }
    return CHAT_UNKNOWN;
}

const char *chat_template_end_of_turn(chat_family f) {
    switch (f) {
    case CHAT_CHATML: return "<|im_end|>";
    case CHAT_GEMMA: return "<end_of_turn>";
    case CHAT_LLAMA3: return "<|eot_id|>";
    case CHAT_PHI3: return "<|end|>";
    case CHAT_ZEPHYR: return "<|endoftext|>";
    default: return NULL;
    }
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Length of the sequence a lead byte starts (1 for ASCII and for stray bytes). */
static size_t utf8_len(unsigned char b) {
    if (b >= 0xF0 && b <= 0xF4) return 4;
    if (b >= 0xE0 && b < 0xF0) return 3;
    if (b >= 0xC2 && b < 0xE0) return 2;
    return 1;
}

size_t chat_utf8_whole(const char *p, size_t n) {
    /* The last lead byte among the final 3 bytes: is its character complete? */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char b = (unsigned char)p[n - back];
        if ((b & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        return utf8_len(b) > back ? n - back : n;
    }
    return n;
}

/* ---- formatting --------------------------------------------------------------------------- */

typedef struct text {
    char *p;
    size_t n, cap;
    int oom;
} text;

static void put_n(text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

static void put(text *t, const char *s) { put_n(t, s, strlen(s)); }

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* s without its leading and trailing ASCII white space (as the templates' `| trim`). */
static void put_trimmed(text *t, const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && is_space(s[a])) a++;
    while (b > a && is_space(s[b - 1])) b--;
    put_n(t, s + a, b - a);
}

static int role_is(const chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* <|role|>\n content END\n ... then <|assistant|>\n: ChatML (with <|im_start|> and no closing
 * bar), Phi-3 and Zephyr. */
static void format_role_blocks(text *t, const chat_msg *m, size_t n, int add_gen, const char *open,
                               const char *close_open, const char *end) {
    for (size_t i = 0; i < n; i++) {
        put(t, open);
        put(t, m[i].role);
        put(t, close_open);
        put(t, m[i].content);
        put(t, end);
    }
    if (add_gen) {
        put(t, open);
        put(t, "assistant");
        put(t, close_open);
    }
}

/* Gemma has no system role: the system text (trimmed) opens the first user turn, followed by
 * a blank line; "assistant" is "model"; contents are trimmed. */
static void format_gemma(text *t, const chat_msg *m, size_t n, int add_gen) {
    text sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "system")) {
            text one = {0};
            put_trimmed(&one, m[i].content);
            if (one.n) put_n(&sys, one.p, one.n);
            t->oom |= one.oom;
            free(one.p);
            continue;
        }
        const int model = role_is(&m[i], "assistant");
        put(t, "<start_of_turn>");
        put(t, model ? "model" : m[i].role);
        put(t, "\n");
        if (sys.n && !model) {
            put_n(t, sys.p, sys.n);
            put(t, "\n\n");
            sys.n = 0;
        }
        put_trimmed(t, m[i].content);
        put(t, "<end_of_turn>\n");
    }
    t->oom |= sys.oom;
    free(sys.p);
    if (add_gen) put(t, "<start_of_turn>model\n");
}

static void format_llama3(text *t, const chat_msg *m, size_t n, int add_gen) {
    for (size_t i = 0; i < n; i++) {
        put(t, "<|start_header_id|>");
        put(t, m[i].role);
        put(t, "<|end_header_id|>\n\n");
        put_trimmed(t, m[i].content);
        put(t, "<|eot_id|>");
    }
    if (add_gen) put(t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 and its variants: [INST] user [/INST] answer</s>; the text ends at [/INST], which
 * is where the answer starts (no separate generation prompt). */
static void format_llama2(text *t, chat_family f, const chat_msg *m, size_t n) {
    const int sys_block = f != CHAT_LLAMA2;
    const int strip = f == CHAT_LLAMA2_SYS_STRIP;
    int in_turn = 1;
    put(t, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            in_turn = 1;
            put(t, f == CHAT_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] ");
        }
        const char *c = m[i].content;
        if (role_is(&m[i], "system")) {
            if (sys_block) put(t, "<<SYS>>\n");
            strip ? put_trimmed(t, c) : put(t, c);
            put(t, sys_block ? "\n<</SYS>>\n\n" : "\n");
        } else if (role_is(&m[i], "user")) {
            strip ? put_trimmed(t, c) : put(t, c);
            put(t, " [/INST]");
        } else {
            strip ? put_trimmed(t, c) : put(t, c);
            put(t, "</s>");
            in_turn = 0;
        }
    }
}

static void format_mistral_v7(text *t, const chat_msg *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "system")) {
            put(t, "[SYSTEM_PROMPT] ");
            put(t, m[i].content);
            put(t, "[/SYSTEM_PROMPT]");
        } else if (role_is(&m[i], "user")) {
            put(t, "[INST] ");
            put(t, m[i].content);
            put(t, "[/INST]");
        } else {
            put(t, " ");
            put(t, m[i].content);
            put(t, "</s>");
        }
    }
}

char *chat_format(chat_family f, const chat_msg *msgs, size_t n, int add_generation, size_t *len) {
    if (len) *len = 0;
    if (f < 0 || f >= CHAT_N_FAMILIES || (n && msgs == NULL)) return NULL;
    for (size_t i = 0; i < n; i++)
        if (msgs[i].role == NULL || msgs[i].content == NULL) return NULL;
    text t = {0};
    put(&t, ""); /* an empty conversation is the empty string, not NULL */
    switch (f) {
    case CHAT_CHATML: format_role_blocks(&t, msgs, n, add_generation, "<|im_start|>", "\n", "<|im_end|>\n"); break;
    case CHAT_PHI3: format_role_blocks(&t, msgs, n, add_generation, "<|", "|>\n", "<|end|>\n"); break;
    case CHAT_ZEPHYR: format_role_blocks(&t, msgs, n, add_generation, "<|", "|>\n", "<|endoftext|>\n"); break;
    case CHAT_GEMMA: format_gemma(&t, msgs, n, add_generation); break;
    case CHAT_LLAMA3: format_llama3(&t, msgs, n, add_generation); break;
    case CHAT_MISTRAL_V7: format_mistral_v7(&t, msgs, n); break;
    default: format_llama2(&t, f, msgs, n); break;
    }
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    if (len) *len = t.n;
    return t.p;
}

/* Chat templates of tq chat: recognising a model's template family and formatting a
 * conversation the way that family does (doc/chat.md).
 *
 * A model's GGUF names its template as a Jinja program (tokenizer.chat_template). We do not run
 * Jinja: as llama.cpp's llm_chat_detect_template does, the family is recognised by substrings
 * only it has (chat_template_detect), and each family's layout is written out here in C
 * (chat_format). A template none of the rules recognise is refused by the caller with the list
 * of known names (chat_template_list); --chat-template NAME picks a family by name.
 *
 * Everything here is pure: no I/O, no model, no tokenizer. */
#ifndef TQ_TOOLS_CHAT_TEMPLATE_H
#define TQ_TOOLS_CHAT_TEMPLATE_H

#include <stddef.h>

typedef enum chat_family {
    CHAT_UNKNOWN = -1,
    CHAT_CHATML = 0,        /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    CHAT_GEMMA,             /* <start_of_turn>user|model\n...<end_of_turn>\n; no system role */
    CHAT_LLAMA3,            /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_LLAMA2,            /* [INST] ... [/INST]; a system text is put before the first turn */
    CHAT_LLAMA2_SYS,        /* as llama2 with <<SYS>>\n...\n<</SYS>>\n\n */
    CHAT_LLAMA2_SYS_BOS,    /* as llama2-sys; later turns open with <s>[INST] */
    CHAT_LLAMA2_SYS_STRIP,  /* as llama2-sys; contents trimmed */
    CHAT_MISTRAL_V7,        /* [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] ...</s> */
    CHAT_PHI3,              /* <|role|>\n...<|end|>\n */
    CHAT_ZEPHYR,            /* <|role|>\n...<|endoftext|>\n */
    CHAT_N_FAMILIES
} chat_family;

/* One message of a conversation: role "system", "user" or "assistant"; content UTF-8. */
typedef struct chat_msg {
    const char *role;
    const char *content;
} chat_msg;

/* The family named name ("chatml", "gemma", ...), or CHAT_UNKNOWN. */
chat_family chat_template_by_name(const char *name);
/* The name of a family ("chatml", ...); "unknown" for anything else. */
const char *chat_template_name(chat_family f);
/* The known names, comma-separated ("chatml, gemma, llama3, ..."): a static string. */
const char *chat_template_list(void);

/* The family of a template text (tokenizer.chat_template, len bytes, need not be
 * NUL-terminated): a known name itself, else the first distinctive substring found, in
 * llama.cpp's order; CHAT_UNKNOWN when none matches (or a Mistral v1/v3 template, which these
 * layouts do not reproduce). */
chat_family chat_template_detect(const char *tmpl, size_t len);

/* The conversation msgs[0..n) laid out as family f lays it out, followed, when add_generation
 * is set, by the opening of the assistant's turn. Returns a malloc'd NUL-terminated text
 * (*len = its length, may be NULL), or NULL for an unknown family or when memory is short.
 * The text never starts with the BOS token: the caller adds it as the vocabulary asks. */
char *chat_format(chat_family f, const chat_msg *msgs, size_t n, int add_generation, size_t *len);

/* The text of the token that closes an assistant turn in family f ("<end_of_turn>",
 * "<|im_end|>", "<|eot_id|>", "<|end|>"), or NULL when it is the vocabulary's EOS. */
const char *chat_template_end_of_turn(chat_family f);

/* The length of the longest prefix of p[0..n) that does not end inside a UTF-8 character:
 * n, less the bytes of a final multi-byte character whose last bytes are still missing (at
 * most 3). Stray bytes count as whole characters. tq chat streams answers with it, so that a
 * character split across two tokens (byte tokens) is written whole. */
size_t chat_utf8_whole(const char *p, size_t n);

#endif

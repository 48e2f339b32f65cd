/* A conversation as prompt tokens (chat_prompt.h). */
#include "chat_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

int chat_prompt_tokens(session *s, const char *cmd, chat_family f, const chat_msg *msgs, size_t n, int32_t **ids,
                       size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    size_t len;
    char *text = chat_format(f, msgs, n, 1, &len);
    if (text == NULL) {
        fprintf(stderr, "tq %s: out of memory\n", cmd);
        return 1;
    }
    size_t cap = tokenizer_encode_bound(s->tok, len) + 1;
    int32_t *buf = cap > 1 ? malloc(cap * sizeof *buf) : NULL;
    if (buf == NULL) {
        free(text);
        fprintf(stderr, "tq %s: conversation too long or out of memory (%zu bytes)\n", cmd, len);
        return 1;
    }
    int st = tokenizer_encode(s->tok, text, len, TOKENIZER_ENCODE_PARSE_SPECIAL, buf + 1, cap - 1, n_ids);
    free(text);
    if (st != TOKENIZER_OK) {
        free(buf);
        fprintf(stderr, "tq %s: tokenizer: %s\n", cmd, tokenizer_status_name(st));
        return 1;
    }
    const int32_t bos = tokenizer_bos_id(s->tok);
    if (tokenizer_add_bos(s->tok) && bos >= 0 && !(*n_ids > 0 && buf[1] == bos)) {
        buf[0] = bos;
        (*n_ids)++;
    } else {
        memmove(buf, buf + 1, *n_ids * sizeof *buf);
    }
    *ids = buf;
    return 0;
}

int chat_prompt_family(const session *s, const char *cmd, const char *name, chat_family *out) {
    if (name) {
        *out = chat_template_by_name(name);
        return 0;
    }
    const char *tmpl;
    size_t len;
    if (gguf_get_str(model_file(s->m), "tokenizer.chat_template", &tmpl, &len) == GGUF_OK) {
        *out = chat_template_detect(tmpl, len);
        if (*out != CHAT_UNKNOWN) return 0;
        fprintf(stderr, "tq %s: the model's chat template (tokenizer.chat_template, %zu bytes) "
                "is not one tq recognises; give --chat-template NAME, one of: %s\n", cmd, len,
                chat_template_list());
        return 1;
    }
    static const struct { const char *marker; chat_family f; } by_vocab[] = {
        {"<start_of_turn>", CHAT_GEMMA},
        {"<|im_start|>", CHAT_CHATML},
        {"<|start_header_id|>", CHAT_LLAMA3},
    };
    for (size_t i = 0; i < sizeof by_vocab / sizeof by_vocab[0]; i++)
        if (tokenizer_find_token(s->tok, by_vocab[i].marker, strlen(by_vocab[i].marker)) >= 0) {
            *out = by_vocab[i].f;
            fprintf(stderr, "tq %s: the model has no chat template (tokenizer.chat_template); "
                    "using '%s', whose %s the vocabulary has\n", cmd, chat_template_name(*out),
                    by_vocab[i].marker);
            return 0;
        }
    fprintf(stderr, "tq %s: the model has no chat template (tokenizer.chat_template); give "
            "--chat-template NAME, one of: %s\n", cmd, chat_template_list());
    return 1;
}

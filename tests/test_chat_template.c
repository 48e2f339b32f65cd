/* tq chat's templates (tools/chat_template.c): each family's layout against the exact text
 * llama.cpp's formatter gives for the same conversation (its tests/test-chat-template.cpp uses
 * this conversation; the expected strings below are the outputs it lists, or for llama2-sys and
 * zephyr, which it lists no case for, what its layout gives), detection from real template
 * texts, names, and the refusals. Pure: no model needed. */
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "test_util.h"

static const chat_msg conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
#define N_CONV (sizeof conv / sizeof conv[0])

static void check_format(chat_family f, const chat_msg *m, size_t n, int add_gen, const char *want) {
    size_t len = 12345;
    char *got = chat_format(f, m, n, add_gen, &len);
    CHECK_MSG(got != NULL, "%s: NULL", chat_template_name(f));
    if (got == NULL) return;
    CHECK_MSG(!strcmp(got, want), "%s:\n got  [%s]\n want [%s]", chat_template_name(f), got, want);
    CHECK(len == strlen(got));
    free(got);
}

static void test_layouts(void) {
    check_format(CHAT_CHATML, conv, N_CONV, 1,
                 "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                 "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
                 "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_format(CHAT_GEMMA, conv, N_CONV, 1,
                 "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                 "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
                 "<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n"
                 "<start_of_turn>model\n");
    check_format(CHAT_LLAMA3, conv, N_CONV, 1,
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_format(CHAT_LLAMA2, conv, N_CONV, 1,
                 "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]"
                 "   I am an assistant   </s>[INST] Another question [/INST]");
    check_format(CHAT_LLAMA2_SYS, conv, N_CONV, 1,
                 "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
                 "[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]");
    check_format(CHAT_LLAMA2_SYS_BOS, conv, N_CONV, 1,
                 "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
                 "<s>[INST] Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]");
    check_format(CHAT_LLAMA2_SYS_STRIP, conv, N_CONV, 1,
                 "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
                 "[INST] Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]");
    check_format(CHAT_MISTRAL_V7, conv, N_CONV, 1,
                 "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
                 "[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]");
    check_format(CHAT_PHI3, conv, N_CONV, 1,
                 "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
                 "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
                 "<|user|>\nAnother question<|end|>\n<|assistant|>\n");
    check_format(CHAT_ZEPHYR, conv, N_CONV, 1,
                 "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
                 "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n"
                 "<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n"
                 "<|assistant|>\n");
}

/* The pieces tq chat relies on: no generation prompt, no system text, the empty conversation,
 * and the prefix property (a conversation's text starts with the text of its earlier turns),
 * which is what lets the KV cache keep earlier turns. */
static void test_edges(void) {
    check_format(CHAT_CHATML, conv + 1, 1, 0, "<|im_start|>user\nHello<|im_end|>\n");
    check_format(CHAT_GEMMA, conv + 1, 1, 1, "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
    check_format(CHAT_GEMMA, conv, 2, 0, "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n");
    check_format(CHAT_GEMMA, conv, 0, 1, "<start_of_turn>model\n");
    check_format(CHAT_CHATML, conv, 0, 0, "");
    for (int f = 0; f < CHAT_N_FAMILIES; f++) {
        for (size_t n = 2; n + 2 <= N_CONV; n += 2) { /* n messages, the last a user's */
            char *before = chat_format((chat_family)f, conv, n, 1, NULL);
            char *after = chat_format((chat_family)f, conv, n + 2, 1, NULL); /* answer, next user */
            CHECK(before && after);
            if (before && after)
                CHECK_MSG(!strncmp(after, before, strlen(before)), "%s: turn %zu is not a prefix",
                          chat_template_name((chat_family)f), n);
            free(before);
            free(after);
        }
    }
    size_t len = 7;
    CHECK(chat_format(CHAT_UNKNOWN, conv, N_CONV, 1, &len) == NULL && len == 0);
    CHECK(chat_format(CHAT_N_FAMILIES, conv, N_CONV, 1, NULL) == NULL);
    const chat_msg bad[] = {{"user", NULL}};
    CHECK(chat_format(CHAT_CHATML, bad, 1, 1, NULL) == NULL);
}

static void check_detect(const char *what, const char *tmpl, chat_family want) {
    chat_family got = chat_template_detect(tmpl, strlen(tmpl));
    CHECK_MSG(got == want, "%s: detected %s, want %s", what, chat_template_name(got), chat_template_name(want));
}

static void test_detect(void) {
    /* SmolLM2-135M-Instruct (models/smollm2-135m-instruct-q4_1.gguf, tokenizer.chat_template,
     * whole). */
    check_detect("SmolLM2",
                 "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                 "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}",
                 CHAT_CHATML);
    /* Qwen 2 (../shared/data/vocab/ggml-vocab-qwen2.gguf): the start. */
    check_detect("Qwen2",
                 "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}",
                 CHAT_CHATML);
    /* Gemma 3 instruction-tuned releases (models/gemma3-270m-q4_k_m.gguf carries no
     * tokenizer.chat_template: tq chat then picks gemma from the vocabulary's <start_of_turn>). */
    check_detect("Gemma 3",
                 "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
                 "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
                 "{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'assistant') -%}\n"
                 "        {%- set role = \"model\" -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
                 "{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n",
                 CHAT_GEMMA);
    check_detect("gemma-7b-it",
                 "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                 "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
                 CHAT_GEMMA);
    check_detect("Llama 3",
                 "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
                 "message['content'] | trim + '<|eot_id|>' %}",
                 CHAT_LLAMA3);
    /* Phi-3 (../shared/data/vocab/ggml-vocab-phi-3.gguf). */
    check_detect("Phi-3",
                 "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
                 "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}"
                 "{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
                 CHAT_PHI3);
    check_detect("Mistral 7B v0.2", "{{ bos_token }}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}", CHAT_LLAMA2);
    check_detect("llama2 <<SYS>>", "{{ '[INST] <<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n' }}", CHAT_LLAMA2_SYS);
    check_detect("FusionNet", "{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}} <<SYS>>", CHAT_LLAMA2_SYS_BOS);
    check_detect("vigogne", "{{ '[INST] ' + content.strip() + ' [/INST]' }} <<SYS>>", CHAT_LLAMA2_SYS_STRIP);
    check_detect("Mistral v7", "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{{ '[INST] ' }}", CHAT_MISTRAL_V7);
    check_detect("zephyr", "{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}", CHAT_ZEPHYR);
    /* By name: a template text that is a family's name (as llama.cpp takes it). */
    for (int f = 0; f < CHAT_N_FAMILIES; f++) {
        const char *name = chat_template_name((chat_family)f);
        check_detect(name, name, (chat_family)f);
        CHECK(chat_template_by_name(name) == f);
        CHECK_MSG(strstr(chat_template_list(), name) != NULL, "%s missing from the list", name);
    }
    /* Families llama.cpp knows and we do not lay out: never mistaken for one we do. */
    check_detect("phi-4", "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}", CHAT_UNKNOWN);
    check_detect("SmolVLM", "<|im_start|>{{ 'User:' }}<end_of_utterance>", CHAT_UNKNOWN);
    check_detect("Mistral v1", "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}", CHAT_UNKNOWN);
    check_detect("Mistral v3", "{{- \"[AVAILABLE_TOOLS] [\" }}[INST]", CHAT_UNKNOWN);
    check_detect("Falcon 3", "{{ '<|user|>\\n' }}{{ '<|assistant|>\\n' }}</s>", CHAT_UNKNOWN);
    check_detect("command-r", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|><|start_header_id|><|end_header_id|>", CHAT_UNKNOWN);
    check_detect("plain", "{% for m in messages %}{{ m['content'] }}\n{% endfor %}", CHAT_UNKNOWN);
    check_detect("empty", "", CHAT_UNKNOWN);
    CHECK(chat_template_detect(NULL, 0) == CHAT_UNKNOWN);
    /* Not NUL-terminated: only len bytes are read. */
    const char cut[] = "<|im_start|>";
    CHECK(chat_template_detect(cut, 5) == CHAT_UNKNOWN);
    CHECK(chat_template_detect(cut, 12) == CHAT_CHATML);
}

static void test_names(void) {
    CHECK(chat_template_by_name("chatml") == CHAT_CHATML);
    CHECK(chat_template_by_name("gemma") == CHAT_GEMMA);
    CHECK(chat_template_by_name("llama3") == CHAT_LLAMA3);
    CHECK(chat_template_by_name("ChatML") == CHAT_UNKNOWN);
    CHECK(chat_template_by_name("nonsense") == CHAT_UNKNOWN);
    CHECK(chat_template_by_name("") == CHAT_UNKNOWN);
    CHECK(chat_template_by_name(NULL) == CHAT_UNKNOWN);
    CHECK(!strcmp(chat_template_name(CHAT_UNKNOWN), "unknown"));
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_GEMMA), "<end_of_turn>"));
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_CHATML), "<|im_end|>"));
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_LLAMA3), "<|eot_id|>"));
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_PHI3), "<|end|>"));
    CHECK(chat_template_end_of_turn(CHAT_LLAMA2) == NULL); /* EOS */
}

/* Streaming: a character split across pieces waits for its last byte. */
static void test_utf8_whole(void) {
    const char *e = "\xc3\xa9";                 /* é: 2 bytes */
    const char *ja = "\xe6\x97\xa5";            /* 日: 3 bytes */
    const char *emoji = "\xf0\x9f\x98\x80";     /* 😀: 4 bytes */
    CHECK(chat_utf8_whole("", 0) == 0);
    CHECK(chat_utf8_whole("abc", 3) == 3);
    CHECK(chat_utf8_whole(e, 1) == 0);
    CHECK(chat_utf8_whole(e, 2) == 2);
    CHECK(chat_utf8_whole(ja, 1) == 0 && chat_utf8_whole(ja, 2) == 0 && chat_utf8_whole(ja, 3) == 3);
    for (size_t k = 1; k < 4; k++) CHECK(chat_utf8_whole(emoji, k) == 0);
    CHECK(chat_utf8_whole(emoji, 4) == 4);
    char buf[16];
    memcpy(buf, "ab", 2);
    memcpy(buf + 2, emoji, 3); /* "ab" + 3 of 4 bytes */
    CHECK(chat_utf8_whole(buf, 5) == 2);
    memcpy(buf + 2, ja, 3);
    memcpy(buf + 5, e, 1);     /* "ab日" + half of é */
    CHECK(chat_utf8_whole(buf, 6) == 5);
    /* Stray bytes pass: a lone continuation byte, an invalid lead byte. */
    CHECK(chat_utf8_whole("a\x80", 2) == 2);
    CHECK(chat_utf8_whole("a\xff", 2) == 2);
    CHECK(chat_utf8_whole("\x80\x80\x80\x80", 4) == 4);
    /* Every split of a mixed text: the parts written, whole prefixes each time, give the text. */
    const char text[] = "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80z";
    const size_t n = sizeof text - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        size_t w = chat_utf8_whole(text, cut);
        CHECK(w <= cut && cut - w <= 3);
        CHECK(w == 0 || (text[w] & 0xC0) != 0x80 || w == n); /* never inside a character */
    }
}

int main(void) {
    RUN_TEST(test_utf8_whole);
    RUN_TEST(test_layouts);
    RUN_TEST(test_edges);
    RUN_TEST(test_detect);
    RUN_TEST(test_names);
    return test_report();
}

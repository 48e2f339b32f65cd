/*
 * tq tokenize: the token ids of a text, as llama.cpp's llama-tokenize prints them.
 *
 * Reads only the GGUF metadata (the tokenizer.ggml.* keys), never the weights, so it works on
 * vocabulary-only GGUF files as well as on models. Like llama-tokenize it adds BOS / EOS as the
 * vocabulary asks and matches special-token text (e.g. "<|im_start|>") unless told not to.
 * Output: one line per token, "%6d -> 'PIECE'" (control tokens shown as their text), or with
 * --ids one line "[id, id, ...]".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "gguf.h"
#include "model_session.h"
#include "options.h"
#include "tokenizer.h"
#include "vocab.h"

/* The tokenizer of the GGUF file at path, or NULL after printing why. */
static tokenizer *open_vocab(const char *path) {
    gguf_file *f = NULL;
    char err[512];
    gguf_status gs = gguf_open(path, &f, err, sizeof err);
    if (gs != GGUF_OK) {
        fprintf(stderr, "tq tokenize: cannot read '%s': %s (%s)\n", path, err, gguf_status_name(gs));
        return NULL;
    }
    gguf_vocab gv;
    tokenizer *tok = NULL;
    vocab_status vs = vocab_build(f, &gv, err, sizeof err);
    if (vs != VOCAB_OK) {
        fprintf(stderr, "tq tokenize: no usable vocabulary in '%s': %s (%s)\n", path, err, vocab_status_name(vs));
    } else {
        int ts = tokenizer_create(&gv.v, &tok);
        if (ts != TOKENIZER_OK)
            fprintf(stderr, "tq tokenize: cannot build the tokenizer of '%s': %s\n", path, tokenizer_status_name(ts));
        vocab_free(&gv);
    }
    gguf_close(f);
    return tok;
}

static int read_stdin(char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) break;
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        if (got == 0) {
            if (ferror(stdin)) break;
            *out = buf;
            *len = n;
            return 0;
        }
        n += got;
    }
    free(buf);
    fprintf(stderr, "tq tokenize: cannot read standard input\n");
    return 1;
}

/* Prints the ids as llama-tokenize does; returns 0, or 1 after printing why. */
static int print_tokens(const tokenizer *tok, const int32_t *ids, size_t n, int ids_only, int show_count) {
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else {
        char piece[1024];
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            int rc = tokenizer_token_to_piece(tok, ids[i], TOKENIZER_DECODE_RENDER_SPECIAL, piece, sizeof piece, &len);
            if (rc == TOKENIZER_ERR_BUFFER_TOO_SMALL) len = sizeof piece; /* a 1 KiB prefix */
            else if (rc != TOKENIZER_OK) len = 0;
            printf("%6d -> '", ids[i]);
            fwrite(piece, 1, len, stdout);
            printf("'\n");
        }
    }
    if (show_count) printf("Total number of tokens: %zu\n", n);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tq tokenize: cannot write to standard output\n");
        return 1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_arg = NULL, *prompt = NULL, *file = NULL;
    int ids_only = 0, no_bos = 0, no_parse_special = 0, from_stdin = 0, show_count = 0;
    const tool_opt opts[] = {
        {OPT_STRING("-m", "PATH|NAME", &model_arg,
                    "GGUF file (a model or a vocabulary-only file) or a model name (default: as the other commands)")},
        {OPT_STRING("-p", "TEXT", &prompt, "the text to tokenize")},
        {OPT_STRING("-f", "FILE", &file, "tokenize the contents of FILE")},
        {OPT_FLAG("--stdin", &from_stdin, "tokenize standard input")},
        {OPT_FLAG("--ids", &ids_only, "print only the ids, as [id, id, ...]")},
        {OPT_FLAG("--no-bos", &no_bos, "do not add BOS / EOS even where the vocabulary asks for them")},
        {OPT_FLAG("--no-parse-special", &no_parse_special,
                  "take control-token text (e.g. \"<|im_start|>\") as plain text")},
        {OPT_FLAG("--show-count", &show_count, "print the number of tokens at the end")},
    };
    const tool_cmd cmd = {
        .name = "tokenize",
        .synopsis = "usage: tq tokenize [-m PATH|NAME] (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos]\n"
                    "                   [--no-parse-special] [--show-count]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts),
        .epilogue = "\nAs llama.cpp's llama-tokenize: one line per token, \"ID -> 'PIECE'\", or the ids\n"
                    "alone with --ids. Reads only the file's metadata (works on vocabulary-only GGUF files).\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if ((prompt != NULL) + (file != NULL) + from_stdin != 1)
        return tool_opts_usage_error(&cmd, "give exactly one of -p TEXT, -f FILE and --stdin");

    char *text = NULL;
    size_t len = 0;
    if (file != NULL) {
        if (tool_read_file("tokenize", file, &text, &len) != 0) return 1;
    } else if (from_stdin) {
        if (read_stdin(&text, &len) != 0) return 1;
    }
    char model_path[1024];
    if (session_find_model("tokenize", model_arg, model_path, sizeof model_path) != 0) {
        free(text);
        return 1;
    }
    tokenizer *tok = open_vocab(model_path);
    if (tok == NULL) {
        free(text);
        return 1;
    }
    const char *src = text ? text : prompt;
    if (!text) len = strlen(prompt);
    unsigned flags = (no_bos ? 0u : TOKENIZER_ENCODE_ADD_SPECIAL) | (no_parse_special ? 0u : TOKENIZER_ENCODE_PARSE_SPECIAL);
    size_t cap = tokenizer_encode_bound(tok, len), n = 0;
    int32_t *ids = cap ? malloc(cap * sizeof *ids) : NULL;
    rc = 1;
    if (cap == 0) {
        fprintf(stderr, "tq tokenize: the text is %zu bytes, more than the tokenizer takes\n", len);
    } else if (ids == NULL) {
        fprintf(stderr, "tq tokenize: out of memory\n");
    } else {
        int ts = tokenizer_encode(tok, src, len, flags, ids, cap, &n);
        if (ts != TOKENIZER_OK) fprintf(stderr, "tq tokenize: cannot tokenize: %s\n", tokenizer_status_name(ts));
        else rc = print_tokens(tok, ids, n, ids_only, show_count);
    }
    free(ids);
    free(text);
    tokenizer_free(tok);
    return rc;
}

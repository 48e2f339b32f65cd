/* Builds the tokenizer's vocabulary (tok_vocab, tokenizer.h) from a GGUF file's
 * tokenizer.ggml.* metadata (doc/gemma3.md section 7 for the keys and their meaning).
 *
 * Token texts are not copied: vocab.texts point into the GGUF mapping, so the gguf_file must
 * stay open while the vocab is used (tokenizer_create() copies what it needs, so the vocab
 * may be freed, and the file closed, once the tokenizer exists). Scores and types are
 * decoded into arrays owned by the gguf_vocab.
 *
 * Never prints, never aborts. */
#ifndef TQ_ENGINE_VOCAB_H
#define TQ_ENGINE_VOCAB_H

#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

typedef enum vocab_status {
    VOCAB_OK = 0,
    VOCAB_ERR_ARG = 1,     /* NULL pointer */
    VOCAB_ERR_MISSING = 2, /* tokenizer.ggml.tokens absent or not a string array */
    VOCAB_ERR_MODEL = 3,   /* tokenizer.ggml.model is neither "llama" (SentencePiece) nor
                              "gpt2" (byte-level BPE) */
    VOCAB_ERR_FORMAT = 4,  /* scores / token_type of the wrong type or length, bad special id,
                              gpt2 without tokenizer.ggml.merges (a string array) */
    VOCAB_ERR_NOMEM = 5,
    VOCAB_ERR_PRE = 6      /* gpt2 whose tokenizer.ggml.pre names a pre-tokenizer we lack */
} vocab_status;

const char *vocab_status_name(int status);

typedef struct gguf_vocab {
    tok_vocab v;          /* what tokenizer_create() takes */
    const char **texts;   /* (n_vocab) into the mapping */
    uint32_t *text_lens;  /* (n_vocab) */
    float *scores;        /* (n_vocab), NULL when the file has none */
    int32_t *types;       /* (n_vocab), NULL when the file has none */
    const char **merges;  /* (v.n_merges) into the mapping; NULL for SentencePiece */
    uint32_t *merge_lens; /* (v.n_merges) */
    uint8_t *strip;       /* (n_vocab) TOKENIZER_STRIP_* per token, NULL when none has any */
} gguf_vocab;

/* Fills *out (zeroed on error). err, when err_cap > 0, receives a message on error (naming
 * the model or pre-tokenizer it does not know). Special ids absent from the file are -1;
 * add_bos / add_eos / add_space_prefix default as in llama.cpp when absent: SentencePiece
 * true / false / true; byte-level BPE: add_bos only for the Llama 3 pre-tokenizer, false,
 * false. A gpt2 vocabulary without tokenizer.ggml.pre gets the "default" pre-tokenizer.
 * Token types and strip flags get llama.cpp's load-time fixes (vocab.c fix_attributes:
 * end-of-generation and fill-in-the-middle texts become control tokens, Phi-3's special
 * tokens eat the white space after them, ...), so that encoding matches llama.cpp's. */
vocab_status vocab_build(const gguf_file *f, gguf_vocab *out, char *err, size_t err_cap);
/* Frees the arrays; NULL and a zeroed vocab are fine. */
void vocab_free(gguf_vocab *v);

#endif

/* The inference engine's tokenizer: SentencePiece (GGUF "llama" model) and byte-level BPE
 * (GGUF "gpt2" model), both following llama.cpp, the de-facto reference for GGUF models.
 * The byte-level BPE path (pre-tokenizers, byte mapping, merges by rank, invalid UTF-8) is
 * described in doc/tokenizer.md; what follows is the SentencePiece path, whose frame (special
 * partition, BOS / EOS, decode flags) BPE shares:
 *
 *   encode:  1. special-token partition: the texts of control / unknown tokens (only with
 *               TOKENIZER_ENCODE_PARSE_SPECIAL) and of user-defined tokens (always) are cut
 *               out of the input first, longest text first (ties: lower id first), each one
 *               at every leftmost non-overlapping occurrence in the text not yet claimed;
 *            2. each remaining raw fragment: optional " " prefix (vocab add_space_prefix,
 *               only at the start and right after a special token), ' ' -> U+2581 "▁";
 *            3. SentencePiece BPE on the fragment: symbols start as UTF-8 characters (lead
 *               byte decides the length, no validation, so invalid UTF-8 is still split
 *               deterministically); repeatedly merge the adjacent pair whose concatenation
 *               is a vocab token with the highest score, ties to the leftmost pair;
 *            4. a final symbol that is not a token is emitted as byte tokens "<0xXX>"
 *               (or the one-byte token, or unk as last resort).
 *            Characters are cut from the escaped text, as llama.cpp does: an invalid lead
 *            byte right before a space can swallow bytes of its "▁", which then decode
 *            as those raw bytes. Valid UTF-8 without U+2581 always round-trips.
 *   decode:  normal tokens: text with "▁" -> ' '; byte tokens: the raw byte; user-defined
 *            tokens: text verbatim; control / unknown tokens: empty unless
 *            TOKENIZER_DECODE_RENDER_SPECIAL; unused / undefined tokens: empty.
 *
 * The tokenizer copies everything it needs from the tok_vocab at create time; it does not
 * depend on the GGUF reader.
 *
 * Thread-safety: a tokenizer is immutable after tokenizer_create() except for its own
 * encode scratch. tokenizer_encode() uses that scratch and so must not run concurrently on
 * the same tokenizer. tokenizer_encode_with() takes a caller-owned tokenizer_scratch and is
 * reentrant: any number of threads may encode with one tokenizer, one scratch per thread.
 * Decode and piece functions take a const tokenizer and are always thread-safe. (Byte-level
 * BPE shares its compiled PCRE2 patterns read-only; the match data lives in the scratch.)
 *
 * Memory: the encode scratch grows (realloc) to the largest fragment seen and is then
 * reused; encode allocates nothing else. Decode never allocates.
 *
 * The library never prints and never aborts; every function returns a tokenizer_status. */
#ifndef TQ_ENGINE_TOKENIZER_H
#define TQ_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOKENIZER_VERSION_MAJOR 1
#define TOKENIZER_VERSION_MINOR 0

/* Status codes. Values are pinned: never renumber, only append. */
typedef enum tokenizer_status {
    TOKENIZER_OK = 0,
    TOKENIZER_ERR_INVALID_ARG = 1,      /* NULL pointer where one is required, bad flags */
    TOKENIZER_ERR_OUT_OF_MEMORY = 2,    /* malloc/realloc failed; outputs untouched */
    TOKENIZER_ERR_BAD_VOCAB = 3,        /* tok_vocab inconsistent (see tokenizer_create) */
    TOKENIZER_ERR_BAD_TOKEN_ID = 4,     /* id < 0 or id >= n_vocab */
    TOKENIZER_ERR_BUFFER_TOO_SMALL = 5, /* output capacity too small; required size reported */
    TOKENIZER_ERR_INPUT_TOO_LONG = 6,   /* text longer than TOKENIZER_MAX_TEXT_BYTES */
    TOKENIZER_ERR_NO_BYTE_TOKEN = 7,    /* byte fallback needed, vocab has no byte and no unk */
    TOKENIZER_ERR_REGEX = 8,            /* the pre-tokenizer's regex failed to compile or match */
} tokenizer_status;

/* Static string naming a status ("TOKENIZER_OK", ...); "TOKENIZER_ERR_UNKNOWN" otherwise. */
const char *tokenizer_status_name(int status);

/* Token types: the values of GGUF tokenizer.ggml.token_type (llama.cpp llama_token_type). */
typedef enum tokenizer_token_type {
    TOKENIZER_TYPE_UNDEFINED = 0,
    TOKENIZER_TYPE_NORMAL = 1,
    TOKENIZER_TYPE_UNKNOWN = 2,
    TOKENIZER_TYPE_CONTROL = 3,
    TOKENIZER_TYPE_USER_DEFINED = 4,
    TOKENIZER_TYPE_UNUSED = 5,
    TOKENIZER_TYPE_BYTE = 6,
} tokenizer_token_type;

/* The tokenizer algorithm (GGUF tokenizer.ggml.model). Values are pinned. */
typedef enum tokenizer_model {
    TOKENIZER_MODEL_SPM = 0, /* "llama": SentencePiece (the zero value: old callers keep it) */
    TOKENIZER_MODEL_BPE = 1, /* "gpt2": byte-level BPE with merges and a pre-tokenizer */
} tokenizer_model;

/* Byte-level BPE pre-tokenizers (GGUF tokenizer.ggml.pre), each the regex list llama.cpp uses
 * for it. Values are pinned. */
typedef enum tokenizer_pre {
    TOKENIZER_PRE_DEFAULT = 0,      /* "default" (and a missing key, as llama.cpp) */
    TOKENIZER_PRE_LLAMA3 = 1,       /* "llama-bpe", "llama3", "llama-v3": Llama 3; ignore_merges */
    TOKENIZER_PRE_QWEN2 = 2,        /* "qwen2", "deepseek-r1-qwen": Qwen 2 / 2.5 / 3 */
    TOKENIZER_PRE_SMOLLM = 3,       /* "smollm", "starcoder": digits split, then the GPT-2 regex */
    TOKENIZER_PRE_GPT2 = 4,         /* "gpt-2", "phi-2", "mpt", "olmo": the GPT-2 regex */
    TOKENIZER_PRE_DEEPSEEK_LLM = 5, /* "deepseek-llm" */
    TOKENIZER_PRE_COUNT = 6
} tokenizer_pre;

/* The pre-tokenizer a tokenizer.ggml.pre value names (name[0..len), not NUL-terminated), or -1
 * when we do not have it. */
int tokenizer_pre_from_name(const char *name, size_t len);
/* Canonical name of a pre-tokenizer ("default", "llama-bpe", ...), or "?" if out of range. */
const char *tokenizer_pre_name(int pre);

/* Largest text tokenizer_encode accepts, in bytes (symbol indices are 32-bit). */
#define TOKENIZER_MAX_TEXT_BYTES ((size_t)1 << 28)

/* The vocabulary as the GGUF metadata holds it. All arrays are read only during
 * tokenizer_create() and may be freed by the caller afterwards. */
typedef struct tok_vocab {
    int32_t n_vocab;               /* number of tokens, 1 .. INT32_MAX */
    const char *const *texts;      /* (n_vocab) token bytes, need not be NUL-terminated;
                                      an entry may be NULL only if its length is 0 */
    const uint32_t *text_lens;     /* (n_vocab) byte length of each text */
    const float *scores;           /* (n_vocab) merge priority, higher first; NULL: all 0 */
    const int32_t *types;          /* (n_vocab) tokenizer_token_type; NULL: all NORMAL */
    int32_t bos_id;                /* -1 if none */
    int32_t eos_id;                /* -1 if none */
    int32_t unk_id;                /* -1 if none */
    int32_t pad_id;                /* -1 if none */
    bool add_bos;                  /* tokenizer.ggml.add_bos_token */
    bool add_eos;                  /* tokenizer.ggml.add_eos_token */
    bool add_space_prefix;         /* tokenizer.ggml.add_space_prefix (llama.cpp SPM default:
                                      true when the key is absent; Gemma 3: false). BPE: only
                                      the decode strip uses it, as llama.cpp */
    int32_t model;                 /* tokenizer_model (0, SentencePiece, when left zeroed) */
    /* Byte-level BPE only (model == TOKENIZER_MODEL_BPE); ignored for SentencePiece. */
    int32_t pre;                   /* tokenizer_pre */
    int32_t n_merges;              /* entries of tokenizer.ggml.merges, 0 .. INT32_MAX */
    const char *const *merges;     /* (n_merges) "left right" (split at the first ' ' after
                                      byte 0), rank = index; not NUL-terminated */
    const uint32_t *merge_lens;    /* (n_merges) byte length of each merge */
    /* Any model: per token, or NULL for none. */
    const uint8_t *strip;          /* (n_vocab) TOKENIZER_STRIP_* of a special token */
} tok_vocab;

/* Strip flags of a special token (llama.cpp LSTRIP / RSTRIP attributes): when the partition
 * cuts the token out, the white space (C isspace) right before / after it is dropped. */
#define TOKENIZER_STRIP_LEFT 1u
#define TOKENIZER_STRIP_RIGHT 2u

typedef struct tokenizer tokenizer;
typedef struct tokenizer_scratch tokenizer_scratch;

/* Builds a tokenizer from v (copied; v's arrays may be freed afterwards). Builds a hash
 * table over all token texts (duplicate texts: the highest id wins, as in llama.cpp), the
 * byte-fallback table, and the special-token matcher.
 * Errors: INVALID_ARG (v or out NULL), BAD_VOCAB (n_vocab < 1, texts/text_lens NULL, a NULL
 * text with non-zero length, a type outside 0..6, a special id outside -1..n_vocab-1,
 * add_bos without bos_id or add_eos without eos_id, total text bytes >= 4 GiB; BPE: a
 * model or pre out of range, merges NULL with n_merges > 0, a NULL merge with non-zero
 * length), REGEX (the pre-tokenizer's patterns did not compile: PCRE2 without Unicode),
 * OUT_OF_MEMORY. On error *out is NULL. */
int tokenizer_create(const tok_vocab *v, tokenizer **out);

/* Frees everything; NULL is fine. */
void tokenizer_free(tokenizer *tok);

int32_t tokenizer_n_vocab(const tokenizer *tok);
int32_t tokenizer_bos_id(const tokenizer *tok); /* -1 if none */
int32_t tokenizer_eos_id(const tokenizer *tok); /* -1 if none */
/* 1 if encoding with TOKENIZER_ENCODE_ADD_SPECIAL puts BOS first (tokenizer.ggml.add_bos_token:
 * Gemma 3 yes, SmolLM2 no), else 0; 0 for NULL. */
int tokenizer_add_bos(const tokenizer *tok);
/* Type of a token, or -1 if id is out of range. */
int tokenizer_token_type_of(const tokenizer *tok, int32_t id);
/* Id of the token whose text is exactly text[0..len), or -1. Thread-safe. */
int32_t tokenizer_find_token(const tokenizer *tok, const char *text, size_t len);

/* --- encode ------------------------------------------------------------------------- */

/* Add BOS / EOS as the vocab asks (add_bos / add_eos): llama.cpp's add_special. */
#define TOKENIZER_ENCODE_ADD_SPECIAL 1u
/* Match control / unknown token texts (e.g. "<start_of_turn>", "<bos>") in the text.
 * User-defined token texts are matched whether or not this is set (as llama.cpp does). */
#define TOKENIZER_ENCODE_PARSE_SPECIAL 2u

/* Upper bound on the number of ids encode can produce for len bytes of text: each byte
 * becomes at most 3 byte tokens (' ' -> "▁" is 3 bytes), plus one space prefix (3) per
 * fragment and BOS/EOS. Returns 0 if len > TOKENIZER_MAX_TEXT_BYTES. */
size_t tokenizer_encode_bound(const tokenizer *tok, size_t len);

/* Tokenizes text[0..len) (arbitrary bytes; text may be NULL when len == 0).
 * Writes at most capacity ids to out_ids (may be NULL when capacity == 0) and sets *n_out
 * to the number of ids the full tokenization has. If that exceeds capacity, returns
 * BUFFER_TOO_SMALL; the first capacity ids are written, never more.
 * Uses the tokenizer's own scratch: not thread-safe for one tokenizer (see top).
 * Errors: INVALID_ARG (tok / n_out NULL, text NULL with len > 0, out_ids NULL with
 * capacity > 0, unknown flag bits), INPUT_TOO_LONG, OUT_OF_MEMORY (scratch growth; *n_out
 * is 0), NO_BYTE_TOKEN, BUFFER_TOO_SMALL. */
int tokenizer_encode(tokenizer *tok, const char *text, size_t len, unsigned flags,
                     int32_t *out_ids, size_t capacity, size_t *n_out);

/* Scratch for tokenizer_encode_with(); usable with any tokenizer, one thread at a time. */
int tokenizer_scratch_create(tokenizer_scratch **out);
void tokenizer_scratch_free(tokenizer_scratch *s); /* NULL is fine */

/* As tokenizer_encode, with caller-owned scratch: reentrant. */
int tokenizer_encode_with(const tokenizer *tok, tokenizer_scratch *scratch, const char *text,
                          size_t len, unsigned flags, int32_t *out_ids, size_t capacity,
                          size_t *n_out);

/* Reference encoder: the same contract and the same output as tokenizer_encode, computed
 * the slow, literal way (special partition token by token in priority order, O(n^2) BPE
 * rescanning all pairs). For tests and fuzzing only. Allocates; reentrant. */
int tokenizer_encode_ref(const tokenizer *tok, const char *text, size_t len, unsigned flags,
                         int32_t *out_ids, size_t capacity, size_t *n_out);

/* --- decode ------------------------------------------------------------------------- */

/* Render control / unknown tokens as their text (llama.cpp unparse_special). */
#define TOKENIZER_DECODE_RENDER_SPECIAL 1u
/* Drop a leading BOS if the vocab has add_bos and a trailing EOS if it has add_eos
 * (llama.cpp remove_special). */
#define TOKENIZER_DECODE_REMOVE_SPECIAL 2u

/* Bytes of token id as decoded text: writes at most capacity bytes (no NUL terminator) to
 * out (may be NULL when capacity == 0) and sets *len_out to the piece length. Only
 * TOKENIZER_DECODE_RENDER_SPECIAL is honoured in flags.
 * Errors: INVALID_ARG, BAD_TOKEN_ID (*len_out = 0), BUFFER_TOO_SMALL (nothing written). */
int tokenizer_token_to_piece(const tokenizer *tok, int32_t id, unsigned flags, char *out,
                             size_t capacity, size_t *len_out);

/* Concatenated pieces of ids[0..n) (ids may be NULL when n == 0). As llama.cpp: when the
 * vocab has add_space_prefix, one leading ' ' is stripped from the first piece, unless
 * REMOVE_SPECIAL dropped a leading BOS (then nothing is stripped); the strip applies to the
 * first id processed only, so a leading BOS that is not removed also disables it.
 * Writes at most capacity bytes to out (no NUL terminator); *len_out is the full length.
 * Errors: INVALID_ARG, BAD_TOKEN_ID (any id out of range; *len_out = 0, out contents
 * unspecified), BUFFER_TOO_SMALL (out holds the first capacity bytes). */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                     char *out, size_t capacity, size_t *len_out);

#ifdef __cplusplus
}
#endif

#endif

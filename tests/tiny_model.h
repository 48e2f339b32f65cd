/* Tiny GGUF models with random weights, one per architecture (gemma3, llama, qwen2, qwen3), in
 * F32, Q8_0 or Q4_1, written by the tests themselves (engine/gguf_write.h): test_tiny_model.c checks
 * the forward pass on them against a naive double forward, test_contexts.c runs contexts on
 * them without the real model. */
#ifndef TQ_TESTS_TINY_MODEL_H
#define TQ_TESTS_TINY_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../engine/gguf_write.h"
#include "../engine/model.h"
#include "../engine/quants.h"


enum { V = 64, E = 64, L = 3, H = 4, HKV = 2, D = 16, F = 96, CTX = 64, SWA = 4, PATTERN = 3 };

typedef struct {
    model_arch arch;
    int q8;          /* matrices in Q8_0 (else F32) */
    int q4_1;        /* matrices in Q4_1 (overrides q8) */
    double rope_base, rope_base_swa;
    /* weights as the reference reads them (dequantized when q8) */
    float embd[V * E], out_norm[E];
    float attn_norm[L][E], wq[L][H * D * E], wk[L][HKV * D * E], wv[L][HKV * D * E], wo[L][E * H * D];
    float bq[L][H * D], bk[L][HKV * D], bv[L][HKV * D], qn[L][D], kn[L][D];
    float post_attn[L][E], ffn_norm[L][E], wg[L][F * E], wu[L][F * E], wd[L][E * F], post_ffn[L][E];
} tiny;

static uint64_t rng_state;
static inline double urand(void) { /* uniform [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static inline void fill(float *x, int n, double lo, double hi) {
    for (int i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
}

/* Q8_0 weight quantization (d = max|x| / 127 stored as fp16) and back, so that the reference
 * reads exactly the values the engine's kernels decode. */
static inline void q8_0_quantize(const float *x, uint8_t *dst, int n) {
    for (int b = 0; b < n / 32; b++, x += 32, dst += 34) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        uint16_t dh = tq_f32_to_f16(amax / 127.0f);
        float d = tq_f16_to_f32(dh);
        dst[0] = (uint8_t)(dh & 0xFF);
        dst[1] = (uint8_t)(dh >> 8);
        for (int i = 0; i < 32; i++) dst[2 + i] = (uint8_t)(int8_t)(d > 0 ? lrintf(x[i] / d) : 0);
    }
}

/* Q4_1 weight quantization (ggml's: d = (max - min) / 15, m = min, both stored as fp16; q =
 * round((x - m) / d) clamped to 0..15); the reference reads the dequantized values. */
static inline void q4_1_quantize(const float *x, uint8_t *dst, int n) {
    for (int b = 0; b < n / 32; b++, x += 32, dst += 20) {
        float lo = x[0], hi = x[0];
        for (int i = 1; i < 32; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
        uint16_t dh = tq_f32_to_f16((hi - lo) / 15.0f), mh = tq_f32_to_f16(lo);
        float d = tq_f16_to_f32(dh), m = tq_f16_to_f32(mh);
        dst[0] = (uint8_t)(dh & 0xFF);
        dst[1] = (uint8_t)(dh >> 8);
        dst[2] = (uint8_t)(mh & 0xFF);
        dst[3] = (uint8_t)(mh >> 8);
        for (int i = 0; i < 16; i++) {
            long q0 = d > 0 ? lrintf((x[i] - m) / d) : 0, q1 = d > 0 ? lrintf((x[i + 16] - m) / d) : 0;
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            dst[4 + i] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static inline void add_matrix(gguf_writer *w, tiny *t, const char *name, float *x, int rows, int cols) {
    uint64_t dims[2] = {(uint64_t)cols, (uint64_t)rows};
    if (!t->q8 && !t->q4_1) {
        gguf_writer_add_tensor(w, name, GGUF_GGML_F32, 2, dims, x, (size_t)rows * cols * sizeof(float));
        return;
    }
    int type = t->q4_1 ? QUANT_Q4_1 : QUANT_Q8_0;
    size_t nb = quant_row_bytes(type, (int64_t)rows * cols);
    uint8_t *q = malloc(nb);
    if (t->q4_1)
        q4_1_quantize(x, q, rows * cols);
    else
        q8_0_quantize(x, q, rows * cols);
    quant_dequantize_row(type, q, x, (int64_t)rows * cols); /* the reference sees these */
    gguf_writer_add_tensor(w, name, (uint32_t)type, 2, dims, q, nb);
    free(q);
}

static inline void add_vector(gguf_writer *w, const char *name, const float *x, int n) {
    uint64_t dims[1] = {(uint64_t)n};
    gguf_writer_add_tensor(w, name, GGUF_GGML_F32, 1, dims, x, (size_t)n * sizeof(float));
}

typedef struct {
    const char *skip_tensor;  /* leave this tensor out */
    const char *arch_name;    /* override general.architecture */
    int bad_q_rows;           /* write attn_q of blk.0 with one block of rows too few */
    int norm_as_f16;          /* write blk.0.attn_norm as F16 */
    int n_tokens;             /* tokens in the tokenizer (0: V, one per embedding row) */
    int no_tokenizer;         /* write no tokenizer.ggml.* keys */
    int vocab_size;           /* write {arch}.vocab_size with this value (0: no such key) */
    int ffn_down_transposed;  /* blk.1.ffn_down as [E, F] (F rows of E) instead of [F, E] */
    int bad_k_rows;           /* blk.2.attn_k with H * D rows instead of HKV * D */
    int output_rows;          /* write an output.weight of this many rows (0: tied) */
    int extra_block;          /* add blk.L.attn_norm.weight, a block past block_count */
} tiny_faults;

enum { VMAX = V + 32 }; /* room for a tokenizer larger than the embedding */

static inline const char *arch_str(model_arch a) {
    return a == MODEL_ARCH_GEMMA3 ? "gemma3" : a == MODEL_ARCH_LLAMA ? "llama" : a == MODEL_ARCH_QWEN2 ? "qwen2" : "qwen3";
}

/* Random weights for t->arch, written to path. Returns 1 on success. */
static inline int write_tiny(tiny *t, const char *path, const tiny_faults *fl) {
    const int gemma = t->arch == MODEL_ARCH_GEMMA3;
    const int qkv_bias = t->arch == MODEL_ARCH_QWEN2, qk_norm = gemma || t->arch == MODEL_ARCH_QWEN3;
    gguf_writer *w = gguf_writer_create();
    if (w == NULL) return 0;
    const char *an = fl && fl->arch_name ? fl->arch_name : arch_str(t->arch);
    gguf_writer_add_str(w, "general.architecture", an, strlen(an));
    char key[96];
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", an, k), key)
    gguf_writer_add_u32(w, KEY("context_length"), CTX);
    gguf_writer_add_u32(w, KEY("embedding_length"), E);
    gguf_writer_add_u32(w, KEY("block_count"), L);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), F);
    gguf_writer_add_u32(w, KEY("attention.head_count"), H);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), HKV);
    gguf_writer_add_u32(w, KEY("attention.key_length"), D);
    gguf_writer_add_u32(w, KEY("attention.value_length"), D);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    t->rope_base = gemma ? 1000000.0 : 500000.0;
    t->rope_base_swa = gemma ? 10000.0 : t->rope_base;
    gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)t->rope_base);
    if (gemma) {
        gguf_writer_add_u32(w, KEY("attention.sliding_window"), SWA);
        gguf_writer_add_u32(w, KEY("attention.sliding_window_pattern"), PATTERN);
    }
    if (fl && fl->vocab_size) gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)fl->vocab_size);
#undef KEY
    /* a small SentencePiece vocab: <pad> <eos> <bos> <unk>, then single letters/pieces */
    const int nt = fl && fl->n_tokens ? fl->n_tokens : V;
    const char *texts[VMAX];
    char buf[VMAX][8];
    int32_t types[VMAX];
    float scores[VMAX];
    for (int i = 0; i < nt; i++) {
        if (i < 4) {
            static const char *sp[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
            texts[i] = sp[i];
            types[i] = i == 3 ? 2 : 3;
        } else {
            snprintf(buf[i], sizeof buf[i], "%c", i < 30 ? 'a' + (i - 4) : 'A' + (i - 30) % 26);
            if (i >= 56) snprintf(buf[i], sizeof buf[i], "\xe2\x96\x81%c", 'a' + (i - 56) % 26);
            texts[i] = buf[i];
            types[i] = 1;
        }
        scores[i] = -(float)i;
    }
    if (!(fl && fl->no_tokenizer)) {
        gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", 5);
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", texts, NULL, (uint64_t)nt);
        gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VALUE_FLOAT32, scores, (uint64_t)nt);
        gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, types, (uint64_t)nt);
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
        gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
        gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    }

    const double a = 0.25; /* weight scale: keeps activations O(1) through the tiny stack */
    fill(t->embd, V * E, -1, 1);
    add_matrix(w, t, "token_embd.weight", t->embd, V, E);
    if (fl && fl->output_rows) add_matrix(w, t, "output.weight", t->embd, fl->output_rows, E);
    fill(t->out_norm, E, 0.5, 1.5);
    add_vector(w, "output_norm.weight", t->out_norm, E);
    if (fl && fl->extra_block) add_vector(w, "blk.3.attn_norm.weight", t->out_norm, E); /* L = 3 */
    char name[64];
#define N(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
#define SKIP(nm) (fl && fl->skip_tensor && strcmp(fl->skip_tensor, nm) == 0)
    for (int il = 0; il < L; il++) {
        fill(t->attn_norm[il], E, 0.5, 1.5);
        if (!SKIP(N("attn_norm.weight"))) {
            if (fl && fl->norm_as_f16 && il == 0) {
                uint64_t dims[1] = {E};
                gguf_writer_add_tensor(w, N("attn_norm.weight"), GGUF_GGML_F16, 1, dims, NULL, E * 2);
            } else {
                add_vector(w, N("attn_norm.weight"), t->attn_norm[il], E);
            }
        }
        fill(t->wq[il], H * D * E, -a, a);
        fill(t->wk[il], HKV * D * E, -a, a);
        fill(t->wv[il], HKV * D * E, -a, a);
        fill(t->wo[il], E * H * D, -a, a);
        add_matrix(w, t, N("attn_q.weight"), t->wq[il], fl && fl->bad_q_rows && il == 0 ? H * D - 32 : H * D, E);
        if (fl && fl->bad_k_rows && il == 2)
            add_matrix(w, t, N("attn_k.weight"), t->wq[il], H * D, E); /* the q projection's shape */
        else
            add_matrix(w, t, N("attn_k.weight"), t->wk[il], HKV * D, E);
        add_matrix(w, t, N("attn_v.weight"), t->wv[il], HKV * D, E);
        add_matrix(w, t, N("attn_output.weight"), t->wo[il], E, H * D);
        memset(t->bq[il], 0, sizeof t->bq[il]);
        memset(t->bk[il], 0, sizeof t->bk[il]);
        memset(t->bv[il], 0, sizeof t->bv[il]);
        if (qkv_bias) {
            fill(t->bq[il], H * D, -0.5, 0.5);
            fill(t->bk[il], HKV * D, -0.5, 0.5);
            fill(t->bv[il], HKV * D, -0.5, 0.5);
            add_vector(w, N("attn_q.bias"), t->bq[il], H * D);
            add_vector(w, N("attn_k.bias"), t->bk[il], HKV * D);
            add_vector(w, N("attn_v.bias"), t->bv[il], HKV * D);
        }
        if (qk_norm) {
            fill(t->qn[il], D, 0.5, 1.5);
            fill(t->kn[il], D, 0.5, 1.5);
            add_vector(w, N("attn_q_norm.weight"), t->qn[il], D);
            add_vector(w, N("attn_k_norm.weight"), t->kn[il], D);
        }
        fill(t->ffn_norm[il], E, 0.5, 1.5);
        add_vector(w, N("ffn_norm.weight"), t->ffn_norm[il], E);
        fill(t->wg[il], F * E, -a, a);
        fill(t->wu[il], F * E, -a, a);
        fill(t->wd[il], E * F, -a, a);
        add_matrix(w, t, N("ffn_gate.weight"), t->wg[il], F, E);
        if (!SKIP(N("ffn_up.weight"))) add_matrix(w, t, N("ffn_up.weight"), t->wu[il], F, E);
        if (fl && fl->ffn_down_transposed && il == 1)
            add_matrix(w, t, N("ffn_down.weight"), t->wd[il], F, E); /* [E, F]: gate/up's shape */
        else
            add_matrix(w, t, N("ffn_down.weight"), t->wd[il], E, F);
        if (gemma) {
            fill(t->post_attn[il], E, 0.5, 1.5);
            fill(t->post_ffn[il], E, 0.5, 1.5);
            add_vector(w, N("post_attention_norm.weight"), t->post_attn[il], E);
            add_vector(w, N("post_ffw_norm.weight"), t->post_ffn[il], E);
        }
    }
#undef N
#undef SKIP
    int ok = gguf_writer_to_file(w, path) == GGUF_OK;
    gguf_writer_free(w);
    return ok;
}

#endif

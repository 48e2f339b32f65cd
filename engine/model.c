/* The forward pass: configuration from GGUF metadata, weights as views into the mapping,
 * run state sized at load, and forward() for a batch of tokens. See model.h for the
 * contract and doc/gemma3.md for every fact about Gemma 3 used here.
 *
 * Sections, in dependency order: status and messages, configuration, weights, run state,
 * the KV cache, the math kernels (RMSNorm, RoPE, activations), forward, load/free. */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quants.h"

/* ---- status and messages ---------------------------------------------------------------- */

const char *model_status_name(int status) {
    switch (status) {
        case MODEL_OK: return "MODEL_OK";
        case MODEL_ERR_ARG: return "MODEL_ERR_ARG";
        case MODEL_ERR_FILE: return "MODEL_ERR_FILE";
        case MODEL_ERR_ARCH: return "MODEL_ERR_ARCH";
        case MODEL_ERR_CONFIG: return "MODEL_ERR_CONFIG";
        case MODEL_ERR_TENSOR: return "MODEL_ERR_TENSOR";
        case MODEL_ERR_SHAPE: return "MODEL_ERR_SHAPE";
        case MODEL_ERR_TYPE: return "MODEL_ERR_TYPE";
        case MODEL_ERR_NOMEM: return "MODEL_ERR_NOMEM";
        case MODEL_ERR_CONTEXT: return "MODEL_ERR_CONTEXT";
        case MODEL_ERR_BATCH: return "MODEL_ERR_BATCH";
        case MODEL_ERR_TOKEN: return "MODEL_ERR_TOKEN";
        case MODEL_ERR_POS: return "MODEL_ERR_POS";
        case MODEL_ERR_INTERNAL: return "MODEL_ERR_INTERNAL";
        case MODEL_ERR_KV_SCHEME: return "MODEL_ERR_KV_SCHEME";
        default: return "MODEL_ERR_UNKNOWN";
    }
}

static model_status fail(model *m, model_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return st;
}

const char *model_last_error(const model *m) { return m == NULL ? "NULL model" : m->err; }

/* ---- configuration ---------------------------------------------------------------------- */

/* {arch}.{key} as a u32 into *out; when absent, *out = dflt, or an error if dflt < 0. */
static model_status key_u32(model *m, const char *arch, const char *key, int64_t dflt, int *out) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", arch, key);
    uint32_t v;
    gguf_status st = gguf_get_u32(m->file, name, &v);
    if (st == GGUF_ERR_NOT_FOUND && dflt >= 0) {
        *out = (int)dflt;
        return MODEL_OK;
    }
    if (st != GGUF_OK) return fail(m, MODEL_ERR_CONFIG, "key %s: %s", name, gguf_status_name(st));
    if (v > (1u << 30)) return fail(m, MODEL_ERR_CONFIG, "key %s: %u out of range", name, v);
    *out = (int)v;
    return MODEL_OK;
}

/* {arch}.{key} as a float (f32 or f64 in the file); dflt when absent. */
static model_status key_f32(model *m, const char *arch, const char *key, float dflt, float *out) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", arch, key);
    double v;
    gguf_status st = gguf_get_f64(m->file, name, &v);
    if (st == GGUF_ERR_NOT_FOUND) {
        *out = dflt;
        return MODEL_OK;
    }
    if (st != GGUF_OK) return fail(m, MODEL_ERR_CONFIG, "key %s: %s", name, gguf_status_name(st));
    if (!isfinite(v)) return fail(m, MODEL_ERR_CONFIG, "key %s: not finite", name);
    *out = (float)v;
    return MODEL_OK;
}

#define TRY(expr)                          \
    do {                                   \
        model_status try_st_ = (expr);     \
        if (try_st_ != MODEL_OK) return try_st_; \
    } while (0)

static model_status read_config(model *m) {
    model_config *c = &m->cfg;
    memset(c, 0, sizeof *c);
    const char *s;
    size_t len;
    if (gguf_get_str(m->file, "general.architecture", &s, &len) != GGUF_OK)
        return fail(m, MODEL_ERR_ARCH, "general.architecture missing or not a string");
    char arch[32];
    if (len >= sizeof arch) return fail(m, MODEL_ERR_ARCH, "unsupported architecture (name too long)");
    memcpy(arch, s, len);
    arch[len] = '\0';
    if (strcmp(arch, "gemma3") == 0) c->arch = MODEL_ARCH_GEMMA3;
    else if (strcmp(arch, "llama") == 0) c->arch = MODEL_ARCH_LLAMA;
    else if (strcmp(arch, "qwen2") == 0) c->arch = MODEL_ARCH_QWEN2;
    else if (strcmp(arch, "qwen3") == 0) c->arch = MODEL_ARCH_QWEN3;
    else return fail(m, MODEL_ERR_ARCH, "unsupported architecture '%s'", arch);
    const int gemma = c->arch == MODEL_ARCH_GEMMA3;

    TRY(key_u32(m, arch, "context_length", -1, &c->n_ctx_train));
    TRY(key_u32(m, arch, "embedding_length", -1, &c->n_embd));
    TRY(key_u32(m, arch, "block_count", -1, &c->n_layer));
    TRY(key_u32(m, arch, "feed_forward_length", -1, &c->n_ff));
    TRY(key_u32(m, arch, "attention.head_count", -1, &c->n_head));
    TRY(key_u32(m, arch, "attention.head_count_kv", c->n_head, &c->n_head_kv));
    if (c->n_embd < 1 || c->n_layer < 1 || c->n_ff < 1 || c->n_head < 1 || c->n_head_kv < 1 ||
        c->n_ctx_train < 1 || c->n_head % c->n_head_kv != 0)
        return fail(m, MODEL_ERR_CONFIG, "bad sizes: n_embd %d n_layer %d n_ff %d n_head %d n_head_kv %d ctx %d",
                    c->n_embd, c->n_layer, c->n_ff, c->n_head, c->n_head_kv, c->n_ctx_train);
    TRY(key_u32(m, arch, "attention.key_length", c->n_embd / c->n_head, &c->head_dim));
    TRY(key_u32(m, arch, "attention.value_length", c->head_dim, &c->head_dim_v));
    TRY(key_u32(m, arch, "rope.dimension_count", c->head_dim, &c->n_rot));
    if (c->head_dim < 2 || c->head_dim_v < 1 || c->n_rot < 2 || c->n_rot % 2 != 0 || c->n_rot > c->head_dim)
        return fail(m, MODEL_ERR_CONFIG, "bad head sizes: head_dim %d head_dim_v %d n_rot %d",
                    c->head_dim, c->head_dim_v, c->n_rot);
    TRY(key_f32(m, arch, "attention.layer_norm_rms_epsilon", 1e-6f, &c->rms_eps));
    TRY(key_f32(m, arch, "rope.freq_base", 10000.0f, &c->rope_base));
    /* Gemma 3: local layers use base 10000 unless the file says otherwise (doc section 4). */
    TRY(key_f32(m, arch, "rope.freq_base_swa", gemma ? 10000.0f : c->rope_base, &c->rope_base_swa));
    float factor;
    TRY(key_f32(m, arch, "rope.scaling.factor", 1.0f, &factor));
    {
        char name[128];
        snprintf(name, sizeof name, "%s.rope.scaling.type", arch);
        if (gguf_get_str(m->file, name, &s, &len) == GGUF_OK && !(len == 6 && memcmp(s, "linear", 6) == 0) &&
            !(len == 4 && memcmp(s, "none", 4) == 0))
            return fail(m, MODEL_ERR_CONFIG, "rope scaling '%.*s' not supported", (int)len, s);
    }
    if (!(factor > 0.0f)) return fail(m, MODEL_ERR_CONFIG, "rope.scaling.factor %g", (double)factor);
    c->rope_freq_scale = 1.0f / factor;
    if (gemma) {
        TRY(key_u32(m, arch, "attention.sliding_window", 0, &c->sliding_window));
        TRY(key_u32(m, arch, "attention.sliding_window_pattern", 6, &c->swa_pattern));
        if (c->swa_pattern < 1) return fail(m, MODEL_ERR_CONFIG, "sliding_window_pattern 0");
        TRY(key_f32(m, arch, "final_logit_softcapping", 0.0f, &c->final_softcap));
        c->embd_scale = sqrtf((float)c->n_embd);
        /* llama.cpp: 1/sqrt(n_embd/n_head) for the 27B model (62 layers), else 1/sqrt(head_dim);
         * both equal query_pre_attn_scalar^-1/2 of the Hugging Face configs. */
        c->attn_scale = c->n_layer == 62 ? 1.0f / sqrtf((float)(c->n_embd / c->n_head))
                                         : 1.0f / sqrtf((float)c->head_dim);
        c->ffn_act = MODEL_FFN_GELU_TANH;
        c->rope_layout = MODEL_ROPE_NEOX;
        c->has_post_norms = 1;
        c->has_qk_norm = 1;
    } else {
        c->embd_scale = 1.0f;
        c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
        c->ffn_act = MODEL_FFN_SILU;
        c->rope_layout = c->arch == MODEL_ARCH_LLAMA ? MODEL_ROPE_NORM : MODEL_ROPE_NEOX;
        c->has_qk_norm = c->arch == MODEL_ARCH_QWEN3;
        c->has_qkv_bias = c->arch == MODEL_ARCH_QWEN2 || gguf_find_tensor(m->file, "blk.0.attn_q.bias") != NULL;
        if (gguf_find_tensor(m->file, "rope_freqs.weight") != NULL)
            return fail(m, MODEL_ERR_CONFIG, "rope_freqs (LLaMA 3 frequency factors) not supported");
    }
    /* The vocabulary size the metadata declares: the tokenizer's token count and
     * {arch}.vocab_size, which must agree when both are present. read_weights checks the
     * embedding (and output) rows against it; 0 here when neither key is present, and the
     * embedding then defines it. */
    int64_t n_tokens = 0;
    if (gguf_find_key(m->file, "tokenizer.ggml.tokens") >= 0) {
        gguf_array toks;
        if (gguf_get_arr(m->file, "tokenizer.ggml.tokens", &toks) != GGUF_OK || toks.count < 1 ||
            toks.count > INT32_MAX)
            return fail(m, MODEL_ERR_CONFIG, "key tokenizer.ggml.tokens: not an array of 1 to %d tokens", INT32_MAX);
        n_tokens = (int64_t)toks.count;
    }
    int vocab_size = 0;
    {
        char name[128];
        snprintf(name, sizeof name, "%s.vocab_size", arch);
        if (gguf_find_key(m->file, name) >= 0) {
            TRY(key_u32(m, arch, "vocab_size", -1, &vocab_size));
            if (vocab_size < 1) return fail(m, MODEL_ERR_CONFIG, "key %s: 0", name);
            if (n_tokens > 0 && vocab_size != n_tokens)
                return fail(m, MODEL_ERR_CONFIG, "key %s = %d, but tokenizer.ggml.tokens has %lld tokens", name,
                            vocab_size, (long long)n_tokens);
        }
    }
    c->n_vocab = n_tokens > 0 ? (int)n_tokens : vocab_size;
    return MODEL_OK;
}

/* ---- weights ------------------------------------------------------------------------------ */

static model_status find(model *m, const char *name, const gguf_tensor **out) {
    *out = gguf_find_tensor(m->file, name);
    if (*out == NULL) return fail(m, MODEL_ERR_TENSOR, "tensor %s missing", name);
    return MODEL_OK;
}

/* A matrix of `rows` rows of `cols` values (GGUF dims [cols, rows]). */
static model_status get_matrix(model *m, const char *name, int64_t rows, int64_t cols, matmul_weight *w) {
    const gguf_tensor *t;
    TRY(find(m, name, &t));
    if (t->n_dims != 2 || (int64_t)t->dims[0] != cols || (int64_t)t->dims[1] != rows)
        return fail(m, MODEL_ERR_SHAPE, "tensor %s: shape [%llu, %llu] (%u dims), want [%lld, %lld]", name,
                    (unsigned long long)t->dims[0], (unsigned long long)t->dims[1], t->n_dims,
                    (long long)cols, (long long)rows);
    if (!quant_type_valid((int)t->type) || t->type == QUANT_Q8_K || quant_row_bytes((int)t->type, cols) == 0)
        return fail(m, MODEL_ERR_TYPE, "tensor %s: type %s not supported for a matrix", name,
                    quant_type_name((int)t->type));
    w->type = (int)t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    return MODEL_OK;
}

/* An F32 vector of n values. The data section is 32-byte aligned from a page-aligned mapping
 * and every tensor offset is a multiple of the alignment, so the pointer is float-aligned;
 * checked anyway, since a reader may hand out other memory. */
static model_status get_vector(model *m, const char *name, int64_t n, const float **out) {
    const gguf_tensor *t;
    TRY(find(m, name, &t));
    if (t->n_dims != 1 || (int64_t)t->dims[0] != n)
        return fail(m, MODEL_ERR_SHAPE, "tensor %s: %llu values (%u dims), want %lld", name,
                    (unsigned long long)t->dims[0], t->n_dims, (long long)n);
    if (t->type != GGUF_GGML_F32) return fail(m, MODEL_ERR_TYPE, "tensor %s: type %s, want F32", name, quant_type_name((int)t->type));
    if ((uintptr_t)t->data % sizeof(float) != 0) return fail(m, MODEL_ERR_TYPE, "tensor %s: misaligned", name);
    *out = t->data;
    return MODEL_OK;
}

static int in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

/* Whether read_weights reads the tensor `name` for configuration c: the global tensors, and
 * blk.N.* for N < n_layer with a suffix this configuration uses (N written without leading
 * zeros, as the lookups spell it). */
static int tensor_used(const model_config *c, const char *name, int has_output) {
    static const char *const base[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                       "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                                       "ffn_down.weight"};
    static const char *const bias[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
    static const char *const qk_norm[] = {"attn_q_norm.weight", "attn_k_norm.weight"};
    static const char *const post[] = {"post_attention_norm.weight", "post_ffw_norm.weight"};
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "output_norm.weight") == 0) return 1;
    if (strcmp(name, "output.weight") == 0) return has_output;
    if (strncmp(name, "blk.", 4) != 0) return 0;
    const char *p = name + 4;
    long il = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) il = il * 10 + (*p - '0');
    if (digits == 0 || (digits > 1 && name[4] == '0') || *p != '.' || il >= c->n_layer) return 0;
    p++;
#define IN(list) (in_list(p, list, sizeof list / sizeof list[0]))
    return IN(base) || (c->has_qkv_bias && IN(bias)) || (c->has_qk_norm && IN(qk_norm)) ||
           (c->has_post_norms && IN(post));
#undef IN
}

static model_status read_weights(model *m) {
    const model_config *c = &m->cfg;
    model_weights *w = &m->w;
    const gguf_tensor *t;
    TRY(find(m, "token_embd.weight", &t));
    if (t->n_dims != 2 || t->dims[0] != (uint64_t)c->n_embd || t->dims[1] < 1 || t->dims[1] > INT32_MAX)
        return fail(m, MODEL_ERR_SHAPE, "tensor token_embd.weight: shape [%llu, %llu] (%u dims), want [%d, n_vocab]",
                    (unsigned long long)t->dims[0], (unsigned long long)t->dims[1], t->n_dims, c->n_embd);
    /* One embedding row per token of the vocabulary (read_config): more rows would let the
     * sampler pick ids the tokenizer cannot print, fewer would fail only when a large id
     * comes up. */
    if (c->n_vocab > 0 && t->dims[1] != (uint64_t)c->n_vocab) {
        char src[64] = "tokenizer.ggml.tokens";
        const char *arch;
        size_t len;
        if (gguf_find_key(m->file, src) < 0 && gguf_get_str(m->file, "general.architecture", &arch, &len) == GGUF_OK)
            snprintf(src, sizeof src, "%.*s.vocab_size", (int)(len < 32 ? len : 32), arch);
        return fail(m, MODEL_ERR_SHAPE, "tensor token_embd.weight: shape [%llu, %llu], want [%d, %d]: the vocabulary (%s) has %d tokens",
                    (unsigned long long)t->dims[0], (unsigned long long)t->dims[1], c->n_embd, c->n_vocab, src,
                    c->n_vocab);
    }
    m->cfg.n_vocab = (int)t->dims[1];
    TRY(get_matrix(m, "token_embd.weight", c->n_vocab, c->n_embd, &w->token_embd));
    if (gguf_find_tensor(m->file, "output.weight") != NULL)
        TRY(get_matrix(m, "output.weight", c->n_vocab, c->n_embd, &w->output));
    else
        w->output = w->token_embd; /* tied (Gemma 3: doc section 5) */
    TRY(get_vector(m, "output_norm.weight", c->n_embd, &w->output_norm));

    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    if (w->layers == NULL) return fail(m, MODEL_ERR_NOMEM, "out of memory (layers)");
    const int64_t qw = (int64_t)c->n_head * c->head_dim, kw = (int64_t)c->n_head_kv * c->head_dim;
    const int64_t vw = (int64_t)c->n_head_kv * c->head_dim_v, ow = (int64_t)c->n_head * c->head_dim_v;
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    for (int il = 0; il < c->n_layer; il++) {
        model_layer *L = &w->layers[il];
        TRY(get_vector(m, NAME("attn_norm.weight"), c->n_embd, &L->attn_norm));
        TRY(get_matrix(m, NAME("attn_q.weight"), qw, c->n_embd, &L->wq));
        TRY(get_matrix(m, NAME("attn_k.weight"), kw, c->n_embd, &L->wk));
        TRY(get_matrix(m, NAME("attn_v.weight"), vw, c->n_embd, &L->wv));
        if (c->has_qkv_bias) {
            TRY(get_vector(m, NAME("attn_q.bias"), qw, &L->bq));
            TRY(get_vector(m, NAME("attn_k.bias"), kw, &L->bk));
            TRY(get_vector(m, NAME("attn_v.bias"), vw, &L->bv));
        }
        if (c->has_qk_norm) {
            TRY(get_vector(m, NAME("attn_q_norm.weight"), c->head_dim, &L->q_norm));
            TRY(get_vector(m, NAME("attn_k_norm.weight"), c->head_dim, &L->k_norm));
        }
        TRY(get_matrix(m, NAME("attn_output.weight"), c->n_embd, ow, &L->wo));
        TRY(get_vector(m, NAME("ffn_norm.weight"), c->n_embd, &L->ffn_norm));
        TRY(get_matrix(m, NAME("ffn_gate.weight"), c->n_ff, c->n_embd, &L->w_gate));
        TRY(get_matrix(m, NAME("ffn_up.weight"), c->n_ff, c->n_embd, &L->w_up));
        TRY(get_matrix(m, NAME("ffn_down.weight"), c->n_embd, c->n_ff, &L->w_down));
        if (c->has_post_norms) {
            TRY(get_vector(m, NAME("post_attention_norm.weight"), c->n_embd, &L->post_attn_norm));
            TRY(get_vector(m, NAME("post_ffw_norm.weight"), c->n_embd, &L->post_ffn_norm));
        }
        /* doc section 4: with pattern n, layer il is local iff il % n < n - 1. */
        L->is_swa = c->sliding_window > 0 && il % c->swa_pattern < c->swa_pattern - 1;
    }
#undef NAME
    /* Every tensor must be one read above (as llama.cpp requires): a leftover one means the
     * metadata describes another model than the weights (a block past block_count, a bias or
     * norm this configuration does not apply), which would otherwise run silently wrong. */
    const int has_output = gguf_find_tensor(m->file, "output.weight") != NULL;
    for (int64_t i = 0; i < gguf_n_tensors(m->file); i++) {
        const char *tn = gguf_tensor_at(m->file, i)->name;
        if (!tensor_used(c, tn, has_output))
            return fail(m, MODEL_ERR_TENSOR, "tensor %s: not used by this model (block_count %d%s%s%s)", tn,
                        c->n_layer, c->has_qkv_bias ? ", q/k/v biases" : "", c->has_qk_norm ? ", q/k norms" : "",
                        c->has_post_norms ? ", post norms" : "");
    }
    return MODEL_OK;
}

static float gelu_tanh(float x);

/* ---- run state ---------------------------------------------------------------------------- */

static size_t max_work(size_t cur, const matmul_weight *w, int n, int n_threads) {
    size_t s = matmul_work_size(w, n, n_threads);
    return s > cur ? s : cur;
}

static model_status build_state(model *m) {
    const model_config *c = &m->cfg;
    model_state *s = &m->s;
    const size_t B = (size_t)m->params.max_batch;
    const int nt = m->params.n_threads;
    s->x = malloc(B * (size_t)c->n_embd * sizeof(float));
    s->xb = malloc(B * (size_t)c->n_embd * sizeof(float));
    s->xb2 = malloc(B * (size_t)c->n_embd * sizeof(float));
    s->q = malloc(B * (size_t)c->n_head * (size_t)c->head_dim * sizeof(float));
    s->k = malloc(B * (size_t)c->n_head_kv * (size_t)c->head_dim * sizeof(float));
    s->v = malloc(B * (size_t)c->n_head_kv * (size_t)c->head_dim_v * sizeof(float));
    s->att = malloc(B * (size_t)c->n_head * (size_t)c->head_dim_v * sizeof(float));
    s->hb = malloc(B * (size_t)c->n_ff * sizeof(float));
    s->hb2 = malloc(B * (size_t)c->n_ff * sizeof(float));
    s->rope_cs = malloc(2 * B * (size_t)c->n_rot * sizeof(float));
    if (m->params.ggml_rounding && c->ffn_act == MODEL_FFN_GELU_TANH) {
        s->gelu_f16 = malloc(65536 * sizeof(float));
        if (s->gelu_f16 == NULL) return fail(m, MODEL_ERR_NOMEM, "out of memory (gelu table)");
        for (uint32_t h = 0; h < 65536; h++)
            s->gelu_f16[h] = tq_f16_to_f32(tq_f32_to_f16(gelu_tanh(tq_f16_to_f32((uint16_t)h))));
    }
    size_t ws = max_work(0, &m->w.output, m->params.max_batch, nt);
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *L = &m->w.layers[il];
        const matmul_weight *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) ws = max_work(ws, ms[i], m->params.max_batch, nt);
    }
    s->work_size = ws;
    s->work = malloc(ws);
    if (s->x == NULL || s->xb == NULL || s->xb2 == NULL || s->q == NULL || s->k == NULL || s->v == NULL ||
        s->att == NULL || s->hb == NULL || s->hb2 == NULL || s->rope_cs == NULL || s->work == NULL)
        return fail(m, MODEL_ERR_NOMEM, "out of memory (run state)");
    return MODEL_OK;
}

static void free_state(model_state *s) {
    free(s->x);
    free(s->xb);
    free(s->xb2);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    free(s->rope_cs);
    free(s->gelu_f16);
    free(s->work);
    memset(s, 0, sizeof *s);
}

/* ---- the KV cache ---------------------------------------------------------------------------- */

/* A status of the library as a model status: the shape/scheme errors of create mean the
 * scheme does not fit this model; running out of memory is itself; the rest is a bug. */
static model_status kv_fail(model *m, tq_status ts, const char *what) {
    model_status st = ts == TQ_ERR_NOMEM ? MODEL_ERR_NOMEM
                      : ts == TQ_ERR_DIM || ts == TQ_ERR_BITS || ts == TQ_ERR_VARIANT || ts == TQ_ERR_INVALID
                          ? MODEL_ERR_KV_SCHEME
                          : MODEL_ERR_INTERNAL;
    return fail(m, st, "KV cache %s: %s (%s)", what, tq_error_message(ts), tq_error_name(ts));
}

/* Builds a cache of scheme (NULL: f16) with the overrides, reserved for max_ctx, and its
 * attention workspace, then swaps them in; on error the model keeps what it had. */
static model_status build_kv(model *m, const tq_kv_scheme *scheme, const tq_kv_layer_scheme *layer_schemes) {
    const model_config *c = &m->cfg;
    tq_kv_cache_config kc;
    tq_kv_cache_config_init(&kc, c->n_layer, c->n_head_kv, c->head_dim, c->head_dim_v);
    if (scheme != NULL) kc.scheme = *scheme;
    kc.layer_schemes = layer_schemes;
    kc.reserve_tokens = (size_t)m->params.max_ctx;
    /* Sliding-window layers keep only what their queries can see (the library recycles the
     * pages of older positions): memory O(window) instead of O(context). */
    size_t *windows = calloc((size_t)c->n_layer, sizeof *windows);
    if (windows == NULL) return fail(m, MODEL_ERR_NOMEM, "KV cache windows");
    for (int il = 0; il < c->n_layer; il++)
        windows[il] = m->w.layers[il].is_swa ? (size_t)c->sliding_window : 0;
    kc.layer_windows = windows;
    tq_kv_cache *kv = NULL;
    tq_status ts = tq_kv_cache_create(&kv, &kc);
    free(windows); /* copied by create */
    if (ts != TQ_OK) return kv_fail(m, ts, "create");
    ts = tq_kv_cache_reserve(kv, (size_t)m->params.max_ctx); /* in case create took no reserve */
    if (ts != TQ_OK) {
        tq_kv_cache_free(kv);
        return kv_fail(m, ts, "reserve");
    }
    /* The workspace depends on the layer's scheme, the batch and the threads, not on the cache
     * length; the size for max_batch serves every smaller batch. */
    const int nt = tq_threadpool_size(m->pool);
    size_t ws = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t w = tq_kv_attention_workspace_size(kv, il, c->n_head, (size_t)m->params.max_batch, nt);
        if (w == 0) {
            tq_kv_cache_free(kv);
            return fail(m, MODEL_ERR_KV_SCHEME, "KV cache: no attention workspace size for layer %d", il);
        }
        if (w > ws) ws = w;
    }
    void *work = malloc(ws);
    if (work == NULL) {
        tq_kv_cache_free(kv);
        return fail(m, MODEL_ERR_NOMEM, "out of memory (attention workspace, %zu bytes)", ws);
    }
    tq_kv_cache_free(m->kv);
    free(m->attn_work);
    m->kv = kv;
    m->attn_work = work;
    m->attn_work_size = ws;
    m->kv_scheme = kc.scheme;
    m->params.kv_scheme = &m->kv_scheme;
    return MODEL_OK;
}

model_status model_set_kv_layer_schemes(model *m, const tq_kv_scheme *scheme,
                                        const tq_kv_layer_scheme *layer_schemes) {
    if (m == NULL) return MODEL_ERR_ARG;
    m->err[0] = '\0';
    return build_kv(m, scheme, layer_schemes);
}

model_status model_set_kv_scheme(model *m, const tq_kv_scheme *scheme) {
    return model_set_kv_layer_schemes(m, scheme, NULL);
}

model_status model_kv_memory(const model *m, tq_kv_memory *mem) {
    if (m == NULL || mem == NULL) return MODEL_ERR_ARG;
    return tq_kv_cache_memory(m->kv, mem, sizeof *mem) == TQ_OK ? MODEL_OK : MODEL_ERR_INTERNAL;
}

const tq_kv_cache *model_kv_cache(const model *m) { return m == NULL ? NULL : m->kv; }

/* Drops every position >= len (no change when len is not below the length). Fails (0) only
 * when the sliding-window layers no longer hold what a query at len would see. */
static int kv_rewind(model *m, int len) {
    if (len < 0) len = 0;
    if ((size_t)len < tq_kv_cache_length(m->kv, 0)) return tq_kv_cache_truncate(m->kv, (size_t)len) == TQ_OK;
    return 1;
}

/* ---- math ---------------------------------------------------------------------------------- */

/* out = x / sqrt(mean(x^2) + eps) * w (doc section 3: the Gemma "+1" is already in w).
 * Squares summed in double and the scale applied in float, as ggml does. out may be x. */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

/* cos/sin of theta_i = pos * freq_scale * base^(-2i/n_rot), i < n_rot/2, by repeated
 * multiplication as ggml does (doc section 4). cs: (n, n_rot/2, 2). */
static void rope_table(float *cs, int pos0, int n, int n_rot, float base, float freq_scale) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    for (int t = 0; t < n; t++) {
        float theta = (float)(pos0 + t) * freq_scale;
        float *r = cs + (size_t)t * (size_t)n_rot;
        for (int i = 0; i < n_rot / 2; i++) {
            r[2 * i] = cosf(theta);
            r[2 * i + 1] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

/* Rotates the first n_rot values of one head. NEOX pairs (i, i + n_rot/2); NORM pairs
 * (2i, 2i+1). cs: (n_rot/2, 2) for this token. */
static void rope_head(float *x, const float *cs, int n_rot, model_rope_layout layout) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const int a = layout == MODEL_ROPE_NEOX ? i : 2 * i, b = layout == MODEL_ROPE_NEOX ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

/* 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), in ggml's operation order */
static float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

/* ggml's GELU with GGML_GELU_FP16: 0 below -10, identity above 10, else the fp16 table. */
static float gelu_ggml(const float *table, float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return table[tq_f32_to_f16(x)];
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* ---- forward ------------------------------------------------------------------------------- */

static model_status mm(model *m, const matmul_weight *w, const float *x, float *y, int n, const char *what) {
    int st = matmul(w, x, y, n, m->pool, m->s.work, m->s.work_size);
    if (st != QUANT_OK) return fail(m, MODEL_ERR_INTERNAL, "matmul %s: %s", what, quant_status_name(st));
    return MODEL_OK;
}

static void add_bias(float *y, const float *b, int n, int width) {
    if (b == NULL) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) y[(size_t)t * (size_t)width + (size_t)i] += b[i];
}

/* Per-head RMSNorm (optional) then RoPE for n tokens of n_heads heads. */
static void qk_prepare(const model_config *c, float *x, int n, int n_heads, const float *norm, const float *cs) {
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++) {
            float *xh = x + ((size_t)t * (size_t)n_heads + (size_t)h) * (size_t)c->head_dim;
            if (norm != NULL) rmsnorm(xh, xh, norm, c->head_dim, c->rms_eps);
            rope_head(xh, cs + (size_t)t * (size_t)c->n_rot, c->n_rot, c->rope_layout);
        }
}

static model_status forward_layer(model *m, int il, int n, int pos0) {
    const model_config *c = &m->cfg;
    const model_layer *L = &m->w.layers[il];
    model_state *s = &m->s;
    const int E = c->n_embd;

    /* attention sub-block: x += post_norm(W_o attn(rope(norm(W_q h)), rope(norm(W_k h)), W_v h)) */
    for (int t = 0; t < n; t++) rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, L->attn_norm, E, c->rms_eps);
    TRY(mm(m, &L->wq, s->xb, s->q, n, "attn_q"));
    TRY(mm(m, &L->wk, s->xb, s->k, n, "attn_k"));
    TRY(mm(m, &L->wv, s->xb, s->v, n, "attn_v"));
    add_bias(s->q, L->bq, n, c->n_head * c->head_dim);
    add_bias(s->k, L->bk, n, c->n_head_kv * c->head_dim);
    add_bias(s->v, L->bv, n, c->n_head_kv * c->head_dim_v);
    const float *cs = s->rope_cs + (L->is_swa ? (size_t)m->params.max_batch * (size_t)c->n_rot : 0);
    qk_prepare(c, s->q, n, c->n_head, L->q_norm, cs);
    qk_prepare(c, s->k, n, c->n_head_kv, L->k_norm, cs);
    if (m->params.ggml_rounding) { /* llama.cpp rounds the scaled Q to fp16 for K.q */
        const size_t nq = (size_t)n * (size_t)c->n_head * (size_t)c->head_dim;
        for (size_t i = 0; i < nq; i++) s->q[i] = tq_f16_to_f32(tq_f32_to_f16(s->q[i] * c->attn_scale)) / c->attn_scale;
    }
    tq_attn_params ap;
    tq_attn_params_init(&ap, c->head_dim);
    ap.scale = c->attn_scale;
    ap.causal = 1;
    ap.sliding_window = L->is_swa ? c->sliding_window : 0;
    ap.softcap = 0.0f; /* Gemma 3 has no attention soft-cap (doc/gemma3.md section 4) */
    if (m->attn_hook != NULL) m->attn_hook(m->attn_hook_ctx, il, pos0, n, s->q, s->k, s->v, &ap);
    /* K/V of the new tokens at positions pos0 .. pos0+n-1 (the cache holds pos0 before), then
     * the n queries attend as the last n positions (doc/kvcache.md section 1). */
    /* The queries first: a layer's first compression (maybe inside this append) fixes its key
     * scale from the queries seen so far (tq_kv_cache_observe_queries). */
    tq_status ts = tq_kv_cache_observe_queries(m->kv, il, s->q, c->n_head, (size_t)n);
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV observe layer %d: %s", il, tq_error_name(ts));
    ts = tq_kv_cache_append(m->kv, il, s->k, s->v, (size_t)n);
    if (ts == TQ_ERR_RANGE && tq_kv_cache_length(m->kv, il) == (size_t)(pos0 + n))
        ts = TQ_OK; /* a norm beyond fp16 while compressing: appended, kept raw (exact) */
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV append layer %d: %s", il, tq_error_name(ts));
    ts = tq_kv_attention(m->kv, il, s->q, c->n_head, (size_t)n, &ap, m->pool, m->attn_work, m->attn_work_size,
                         s->att, (size_t)m->params.max_batch * (size_t)c->n_head * (size_t)c->head_dim_v);
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV attention layer %d: %s", il, tq_error_name(ts));
    TRY(mm(m, &L->wo, s->att, s->xb2, n, "attn_output"));
    for (int t = 0; t < n; t++) {
        float *a = s->xb2 + (size_t)t * E, *x = s->x + (size_t)t * E;
        if (L->post_attn_norm != NULL) rmsnorm(a, a, L->post_attn_norm, E, c->rms_eps);
        for (int i = 0; i < E; i++) x[i] += a[i];
    }

    /* FFN sub-block: x += post_norm(W_down (act(W_gate h) * W_up h)), h = norm(x) */
    for (int t = 0; t < n; t++) rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, L->ffn_norm, E, c->rms_eps);
    TRY(mm(m, &L->w_gate, s->xb, s->hb, n, "ffn_gate"));
    TRY(mm(m, &L->w_up, s->xb, s->hb2, n, "ffn_up"));
    const size_t nf = (size_t)n * (size_t)c->n_ff;
    if (c->ffn_act == MODEL_FFN_GELU_TANH && s->gelu_f16 != NULL)
        for (size_t i = 0; i < nf; i++) s->hb[i] = gelu_ggml(s->gelu_f16, s->hb[i]) * s->hb2[i];
    else if (c->ffn_act == MODEL_FFN_GELU_TANH)
        for (size_t i = 0; i < nf; i++) s->hb[i] = gelu_tanh(s->hb[i]) * s->hb2[i];
    else
        for (size_t i = 0; i < nf; i++) s->hb[i] = silu(s->hb[i]) * s->hb2[i];
    TRY(mm(m, &L->w_down, s->hb, s->xb2, n, "ffn_down"));
    for (int t = 0; t < n; t++) {
        float *f = s->xb2 + (size_t)t * E, *x = s->x + (size_t)t * E;
        if (L->post_ffn_norm != NULL) rmsnorm(f, f, L->post_ffn_norm, E, c->rms_eps);
        for (int i = 0; i < E; i++) x[i] += f[i];
    }
    return MODEL_OK;
}

model_status model_forward(model *m, const int32_t *tokens, int n, int pos0, int all_logits, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    m->err[0] = '\0';
    const model_config *c = &m->cfg;
    model_state *s = &m->s;
    if (tokens == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens");
    if (n > m->params.max_batch) return fail(m, MODEL_ERR_BATCH, "batch of %d > max_batch %d", n, m->params.max_batch);
    const int len = model_seq_len(m);
    if (pos0 < 0 || pos0 > len) return fail(m, MODEL_ERR_POS, "pos0 %d with %d positions stored", pos0, len);
    if (pos0 > m->params.max_ctx - n)
        return fail(m, MODEL_ERR_CONTEXT, "positions %d..%d past max_ctx %d", pos0, pos0 + n - 1, m->params.max_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return fail(m, MODEL_ERR_TOKEN, "token %d at %d outside 0..%d", tokens[t], t, c->n_vocab - 1);
    if (!kv_rewind(m, pos0))
        return fail(m, MODEL_ERR_POS,
                    "cannot rewind to position %d of %d: the sliding-window layers keep only the "
                    "last %d + %d positions (rewind less, or restart from 0)",
                    pos0, len, c->sliding_window, TQ_KV_WINDOW_SLACK);

    /* x = embd[token] * embd_scale (sqrt(n_embd) for Gemma: doc section 5) */
    const size_t row_bytes = quant_row_bytes(m->w.token_embd.type, c->n_embd);
    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * (size_t)c->n_embd;
        quant_dequantize_row(m->w.token_embd.type, (const char *)m->w.token_embd.data + (size_t)tokens[t] * row_bytes,
                             x, c->n_embd);
        if (c->embd_scale != 1.0f)
            for (int i = 0; i < c->n_embd; i++) x[i] *= c->embd_scale;
    }
    rope_table(s->rope_cs, pos0, n, c->n_rot, c->rope_base, c->rope_freq_scale);
    /* Local layers: their own base, and no linear scaling (llama.cpp's freq_scale_swa = 1). */
    rope_table(s->rope_cs + (size_t)m->params.max_batch * (size_t)c->n_rot, pos0, n, c->n_rot, c->rope_base_swa,
               c->arch == MODEL_ARCH_GEMMA3 ? 1.0f : c->rope_freq_scale);

    for (int il = 0; il < c->n_layer; il++) {
        model_status st = forward_layer(m, il, n, pos0);
        if (st != MODEL_OK) {
            if (!kv_rewind(m, pos0)) kv_rewind(m, 0); /* too far back for the windows: reset */
            return st;
        }
    }
    if (logits == NULL) return MODEL_OK;

    /* logits = W_out . norm(x), for the last token or every token */
    const int first = all_logits ? 0 : n - 1, n_out = n - first;
    for (int t = first; t < n; t++)
        rmsnorm(s->xb + (size_t)(t - first) * c->n_embd, s->x + (size_t)t * c->n_embd, m->w.output_norm, c->n_embd,
                c->rms_eps);
    TRY(mm(m, &m->w.output, s->xb, logits, n_out, "output"));
    if (c->final_softcap > 0.0f) {
        const float cap = c->final_softcap;
        for (size_t i = 0; i < (size_t)n_out * (size_t)c->n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
    }
    return MODEL_OK;
}

model_status model_forward_as_decode(model *m, const int32_t *tokens, int n, int pos0, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    if (tokens == NULL || logits == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens or no logits");
    for (int q = 0; q < n;) {
        const int most = n - q < m->params.max_batch ? n - q : m->params.max_batch;
        const int k = (int)tq_kv_scheme_decode_chunk(&m->kv_scheme, (size_t)(pos0 + q), (size_t)most);
        model_status st = model_forward(m, tokens + q, k, pos0 + q, 1, logits + (size_t)q * (size_t)m->cfg.n_vocab);
        if (st != MODEL_OK) return st;
        q += k;
    }
    return MODEL_OK;
}

model_status model_forward_after_prompt(model *m, const int32_t *tokens, int n, int pos0, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    if (tokens == NULL || logits == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens or no logits");
    model_status st = model_forward(m, tokens, 1, pos0, 1, logits);
    if (st != MODEL_OK || n == 1) return st;
    return model_forward_as_decode(m, tokens + 1, n - 1, pos0 + 1, logits + (size_t)m->cfg.n_vocab);
}

model_status model_forward_rows(model *m, const int32_t *tokens, int n, int pos0, model_rows_mode mode,
                                float *logits) {
    switch (mode) {
    case MODEL_ROWS_AS_DECODE: return model_forward_as_decode(m, tokens, n, pos0, logits);
    case MODEL_ROWS_AFTER_PROMPT: return model_forward_after_prompt(m, tokens, n, pos0, logits);
    default: return model_forward(m, tokens, n, pos0, 1, logits);
    }
}

/* ---- load / free --------------------------------------------------------------------------- */

const model_config *model_get_config(const model *m) { return m == NULL ? NULL : &m->cfg; }

void model_set_attn_hook(model *m, model_attn_hook fn, void *ctx) {
    if (m == NULL) return;
    m->attn_hook = fn;
    m->attn_hook_ctx = fn != NULL ? ctx : NULL;
}

int model_seq_len(const model *m) { return m == NULL ? 0 : (int)tq_kv_cache_length(m->kv, 0); }

void model_truncate(model *m, int len) {
    if (m != NULL && !kv_rewind(m, len)) kv_rewind(m, 0);
}

void model_free(model *m) {
    if (m == NULL) return;
    free_state(&m->s);
    tq_kv_cache_free(m->kv);
    free(m->attn_work);
    tq_threadpool_free(m->pool);
    free(m->w.layers);
    gguf_close(m->file);
    free(m);
}

static model_status load_into(model *m, const char *path) {
    /* The pool first: an n_threads out of range is a bad argument, whatever the file. */
    tq_status ts = tq_threadpool_create(&m->pool, m->params.n_threads);
    if (ts == TQ_ERR_INVALID)
        return fail(m, MODEL_ERR_ARG, "n_threads %d: want 1 .. 256", m->params.n_threads);
    if (ts != TQ_OK)
        return fail(m, MODEL_ERR_NOMEM, "cannot start %d threads: %s", m->params.n_threads, tq_error_name(ts));
    char gerr[200];
    gguf_status gs = gguf_open(path, &m->file, gerr, sizeof gerr);
    if (gs != GGUF_OK) return fail(m, MODEL_ERR_FILE, "%s: %s", path, gerr);
    TRY(read_config(m));
    if (m->params.max_ctx > m->cfg.n_ctx_train)
        return fail(m, MODEL_ERR_CONTEXT, "max_ctx %d > the model's context_length %d", m->params.max_ctx,
                    m->cfg.n_ctx_train);
    TRY(read_weights(m));
    TRY(build_state(m));
    TRY(build_kv(m, m->params.kv_scheme, NULL));
    return MODEL_OK;
}

model_status model_load(const char *path, const model_params *p, model **out, char *err, size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (path == NULL || p == NULL || out == NULL || p->max_ctx < 1 || p->max_batch < 1 || p->n_threads < 1) {
        if (err != NULL && err_cap > 0) snprintf(err, err_cap, "bad argument");
        return MODEL_ERR_ARG;
    }
    model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        if (err != NULL && err_cap > 0) snprintf(err, err_cap, "out of memory");
        return MODEL_ERR_NOMEM;
    }
    m->params = *p;
    if (m->params.max_batch > m->params.max_ctx) m->params.max_batch = m->params.max_ctx;
    model_status st = load_into(m, path);
    if (st != MODEL_OK) {
        if (err != NULL && err_cap > 0) snprintf(err, err_cap, "%s", m->err);
        model_free(m);
        return st;
    }
    *out = m;
    return MODEL_OK;
}

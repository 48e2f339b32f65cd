/* Loading a model: configuration from GGUF metadata, weights as views into the mapping. See
 * model.h for the contract and doc/gemma3.md for every fact about Gemma 3 used here; the
 * forward pass is in context.c.
 *
 * Sections, in dependency order: status and messages, configuration, weights, load/free. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
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

/* ---- load / free --------------------------------------------------------------------------- */

const model_config *model_get_config(const model *m) { return m == NULL ? NULL : &m->cfg; }

const gguf_file *model_file(const model *m) { return m == NULL ? NULL : m->file; }

int model_layer_is_swa(const model *m, int il) {
    return m != NULL && il >= 0 && il < m->cfg.n_layer && m->w.layers[il].is_swa;
}

int model_key_rope_pairs(const model_config *c) {
    if (c == NULL || c->n_rot != c->head_dim) return TQ_ROPE_PAIRS_NONE;
    return c->rope_layout == MODEL_ROPE_NEOX ? TQ_ROPE_PAIRS_HALVES : TQ_ROPE_PAIRS_ADJACENT;
}

int model_key_rope_freqs(const model *m, float *out) {
    const model_config *c = m == NULL ? NULL : &m->cfg;
    if (model_key_rope_pairs(c) == TQ_ROPE_PAIRS_NONE) return 0;
    const int half = c->head_dim / 2;
    for (int il = 0; il < c->n_layer; il++) {
        /* as rope_table (context.c): the sliding-window layers' base, and Gemma 3's without
         * the linear factor */
        const int swa = m->w.layers[il].is_swa;
        const double base = swa ? c->rope_base_swa : c->rope_base;
        const double scale = swa && c->arch == MODEL_ARCH_GEMMA3 ? 1.0 : c->rope_freq_scale;
        for (int i = 0; i < half; i++) out[(size_t)il * half + i] = (float)(scale * pow(base, -2.0 * i / c->n_rot));
    }
    return 1;
}

static size_t weight_bytes(const matmul_weight *w) {
    return w->data ? (size_t)w->rows * quant_row_bytes(w->type, w->cols) : 0;
}

size_t model_decode_weight_bytes(const model *m) {
    if (m == NULL) return 0;
    const model_config *c = &m->cfg;
    const size_t vec = (size_t)c->n_embd * sizeof(float);
    size_t total = weight_bytes(&m->w.output) + vec; /* output matrix and norm */
    if (m->w.output.data != m->w.token_embd.data)
        total += quant_row_bytes(m->w.token_embd.type, m->w.token_embd.cols);
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *l = &m->w.layers[il];
        const matmul_weight *mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) total += weight_bytes(mats[i]);
        total += vec * (size_t)(1 + 1 + (l->post_attn_norm != NULL) + (l->post_ffn_norm != NULL));
        if (l->q_norm) total += (size_t)c->head_dim * sizeof(float) * 2;
        if (l->bq) total += (size_t)(c->n_head + 2 * c->n_head_kv) * (size_t)c->head_dim * sizeof(float);
    }
    return total;
}

void model_free(model *m) {
    if (m == NULL) return;
    free(m->w.layers);
    gguf_close(m->file);
    free(m);
}

static model_status load_into(model *m, const char *path) {
    char gerr[200];
    gguf_status gs = gguf_open(path, &m->file, gerr, sizeof gerr);
    if (gs != GGUF_OK) return fail(m, MODEL_ERR_FILE, "%s: %s", path, gerr);
    TRY(read_config(m));
    TRY(read_weights(m));
    return MODEL_OK;
}

model_status model_load(const char *path, model **out, char *err, size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (path == NULL || out == NULL) {
        return report_error(err, err_cap, MODEL_ERR_ARG, "bad argument");
    }
    model *m = calloc(1, sizeof *m);
    if (m == NULL) return report_error(err, err_cap, MODEL_ERR_NOMEM, "out of memory");
    model_status st = load_into(m, path);
    if (st != MODEL_OK) {
        report_error(err, err_cap, st, m->err);
        model_free(m);
        return st;
    }
    *out = m;
    return MODEL_OK;
}

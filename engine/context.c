/* The context: one sequence's run state, KV cache and forward pass on a shared, read-only
 * model. See context.h for the contract and doc/gemma3.md for every fact about Gemma 3 used
 * here.
 *
 * Sections, in dependency order: the context, run state, the KV cache, the math kernels
 * (RMSNorm, RoPE, activations), forward, create/free, forks. */
#include "context.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activation.h"
#include "context_internal.h"
#include "model_internal.h"
#include "quants.h"

/* ---- the context ------------------------------------------------------------------------- */

/* Activations for a batch of up to max_batch tokens; all allocated at load. */
typedef struct model_state {
    float *x;         /* (max_batch, n_embd) residual stream */
    float *xb;        /* (max_batch, n_embd) normed input of a sub-block */
    float *xb2;       /* (max_batch, n_embd) output of attn_output / ffn_down */
    float *q;         /* (max_batch, n_head, head_dim) */
    float *k;         /* (max_batch, n_head_kv, head_dim) */
    float *v;         /* (max_batch, n_head_kv, head_dim_v) */
    float *att;       /* (max_batch, n_head, head_dim_v) attention output */
    float *hb;        /* (max_batch, n_ff) gate, then act(gate) * up */
    float *hb2;       /* (max_batch, n_ff) up */
    float *rope_cs;   /* (2 kinds, max_batch, n_rot/2, 2) cos, sin for global / local layers */
    float *gelu_f16;  /* (65536) gelu of each fp16 value, rounded to fp16; NULL for plain numerics */
    void *work;       /* matmul scratch, work_size bytes */
    size_t work_size;
} model_state;

struct model_context {
    const model *model;            /* read only: the weights */
    model_config cfg;              /* the model's configuration (a copy) */
    const model_weights *w;        /* &model->w */
    model_state s;
    context_params params;         /* params.kv_scheme points at kv_scheme */
    tq_kv_cache *kv;               /* the sequence's K/V, (n_layer, max_ctx reserved, n_head_kv, head_dim) */
    tq_kv_scheme kv_scheme;        /* the cache's scheme */
    tq_threadpool *pool;           /* borrowed, NULL: the caller's thread: the matmuls and tq_kv_attention */
    void *attn_work;               /* attention workspace, attn_work_size bytes: the largest
                                      tq_kv_attention_workspace_size over layers, max_batch */
    size_t attn_work_size;
    int kv_keep_history;           /* 1: no layer window given to the cache (context_set_kv_keep_history) */
    model_attn_hook attn_hook;     /* NULL, or called by every layer of context_forward */
    void *attn_hook_ctx;
    struct layer_replay *replay;   /* NULL, or the record of context_replay_record */
    int hidden_out;                /* 1: passes give norm(x) rows instead of logits */
    char err[256];                 /* message of the last failing call */
};

/* What context_replay_record keeps (forward section): per position its token and, per layer,
 * its input row and its query, key and value rows as appended. */
typedef struct layer_replay {
    int n_pos;                /* positions 0 .. n_pos − 1 */
    int recording;            /* 1 until context_replay_from */
    int from;                 /* replaying: layers below it come from the record */
    int keep_history;         /* the context's kv_keep_history while recording */
    int match;                /* positions 0 .. match − 1 of the sequence hold the recorded
                                 tokens (replay_track) */
    long replayed;            /* layer passes taken from the record so far */
    int32_t *tok;             /* (n_pos) the token recorded there, −1: none */
    unsigned char *f16;       /* (n_layer) 1: every recorded call had the layer at fp16 */
    float *x, *q, *k, *v;     /* (n_layer, n_pos, row width) */
} layer_replay;

static void replay_free(layer_replay *r) {
    if (r == NULL) return;
    free(r->tok), free(r->f16), free(r->x), free(r->q), free(r->k), free(r->v);
    free(r);
}

static float gelu_tanh(float x);

/* ---- run state ---------------------------------------------------------------------------- */

/* The context's matmul mode (context_params.f32_act). */
static matmul_mode mm_mode(const model_context *m) { return m->params.f32_act ? MATMUL_F32_ACT : MATMUL_Q8_ACT; }

static size_t max_work(size_t cur, const matmul_weight *w, int n, int n_threads, matmul_mode mode) {
    size_t s = matmul_work_size_mode(w, n, n_threads, mode);
    return s > cur ? s : cur;
}

/* Allocates s for batches of up to max_rows tokens of model w/c, matmul scratch for pool's
 * threads under mode; MODEL_ERR_NOMEM (s partly filled: free_state) when memory is short. */
static model_status build_state(model_state *s, const model_config *c, const model_weights *w, int max_rows,
                                tq_threadpool *pool, matmul_mode mode, int ggml_rounding) {
    const size_t B = (size_t)max_rows;
    const int nt = tq_threadpool_size(pool);
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
    if (ggml_rounding && c->ffn_act == MODEL_FFN_GELU_TANH) {
        s->gelu_f16 = malloc(65536 * sizeof(float));
        if (s->gelu_f16 == NULL) return MODEL_ERR_NOMEM;
        for (uint32_t h = 0; h < 65536; h++)
            s->gelu_f16[h] = tq_f16_to_f32(tq_f32_to_f16(gelu_tanh(tq_f16_to_f32((uint16_t)h))));
    }
    size_t ws = max_work(0, &w->output, max_rows, nt, mode);
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *L = &w->layers[il];
        const matmul_weight *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) ws = max_work(ws, ms[i], max_rows, nt, mode);
    }
    s->work_size = ws;
    s->work = malloc(ws);
    if (s->x == NULL || s->xb == NULL || s->xb2 == NULL || s->q == NULL || s->k == NULL || s->v == NULL ||
        s->att == NULL || s->hb == NULL || s->hb2 == NULL || s->rope_cs == NULL || s->work == NULL)
        return MODEL_ERR_NOMEM;
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
static model_status kv_fail(model_context *m, tq_status ts, const char *what) {
    model_status st = ts == TQ_ERR_NOMEM ? MODEL_ERR_NOMEM
                      : ts == TQ_ERR_DIM || ts == TQ_ERR_BITS || ts == TQ_ERR_VARIANT || ts == TQ_ERR_INVALID
                          ? MODEL_ERR_KV_SCHEME
                          : MODEL_ERR_INTERNAL;
    return fail(m, st, "KV cache %s: %s (%s)", what, tq_error_message(ts), tq_error_name(ts));
}

/* The attention workspace for kv: its size depends on the layer's scheme, the batch and the
 * threads, not on the cache length; the size for max_batch serves every smaller batch. */
static model_status build_attn_work(model_context *m, const tq_kv_cache *kv, void **work, size_t *size) {
    const model_config *c = &m->cfg;
    const int nt = tq_threadpool_size(m->pool);
    size_t ws = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t w = tq_kv_attention_workspace_size(kv, il, c->n_head, (size_t)m->params.max_batch, nt);
        if (w == 0) return fail(m, MODEL_ERR_KV_SCHEME, "KV cache: no attention workspace size for layer %d", il);
        if (w > ws) ws = w;
    }
    *work = malloc(ws);
    if (*work == NULL) return fail(m, MODEL_ERR_NOMEM, "out of memory (attention workspace, %zu bytes)", ws);
    *size = ws;
    return MODEL_OK;
}

/* Makes kv (scheme, created by the caller) the context's cache with a workspace of its own,
 * freeing what it had; on error frees kv and the context keeps what it had (context_internal.h). */
model_status context_install_kv(model_context *m, tq_kv_cache *kv, const tq_kv_scheme *scheme) {
    void *work = NULL;
    size_t ws = 0;
    model_status st = build_attn_work(m, kv, &work, &ws);
    if (st != MODEL_OK) {
        tq_kv_cache_free(kv);
        return st;
    }
    tq_kv_cache_free(m->kv);
    free(m->attn_work);
    m->kv = kv;
    m->attn_work = work;
    m->attn_work_size = ws;
    m->kv_scheme = *scheme;
    m->params.kv_scheme = &m->kv_scheme;
    if (m->replay != NULL) m->replay->match = 0; /* a new cache: its tokens are not known */
    return MODEL_OK;
}

/* Builds a cache of scheme (NULL: f16) with the overrides, reserved for max_ctx, and its
 * attention workspace, then swaps them in; on error the context keeps what it had. */
static model_status build_kv(model_context *m, const tq_kv_scheme *scheme, const tq_kv_layer_scheme *layer_schemes) {
    const model_config *c = &m->cfg;
    tq_kv_cache_config kc;
    tq_kv_cache_config_init(&kc, c->n_layer, c->n_head_kv, c->head_dim, c->head_dim_v);
    if (scheme != NULL) kc.scheme = *scheme;
    kc.layer_schemes = layer_schemes;
    kc.reserve_tokens = (size_t)m->params.max_ctx;
    kc.key_rope_pairs = model_key_rope_pairs(c); /* the key scale's statistics per RoPE pair */
    /* The key mean turns with RoPE (doc/kvcache.md §2, "Key mean"); TQ_KEY_MEAN_ROPE=0 keeps
     * it fixed (the cache before 2026-12-06, for comparisons). */
    const char *turn = getenv("TQ_KEY_MEAN_ROPE");
    float *freqs = malloc((size_t)c->n_layer * (size_t)(c->head_dim / 2 + 1) * sizeof *freqs);
    if (freqs == NULL) return fail(m, MODEL_ERR_NOMEM, "KV cache RoPE angles");
    if (!(turn && strcmp(turn, "0") == 0) && model_key_rope_freqs(m->model, freqs)) kc.key_rope_freqs = freqs;
    /* Sliding-window layers keep only what their queries can see (the library recycles the
     * pages of older positions): memory O(window) instead of O(context). */
    size_t *windows = calloc((size_t)c->n_layer, sizeof *windows);
    if (windows == NULL) {
        free(freqs);
        return fail(m, MODEL_ERR_NOMEM, "KV cache windows");
    }
    for (int il = 0; il < c->n_layer; il++)
        windows[il] = m->w->layers[il].is_swa && !m->kv_keep_history ? (size_t)c->sliding_window : 0;
    kc.layer_windows = windows;
    tq_kv_cache *kv = NULL;
    tq_status ts = tq_kv_cache_create(&kv, &kc);
    free(windows); /* copied by create */
    free(freqs);
    if (ts != TQ_OK) return kv_fail(m, ts, "create");
    ts = tq_kv_cache_reserve(kv, (size_t)m->params.max_ctx); /* in case create took no reserve */
    if (ts != TQ_OK) {
        tq_kv_cache_free(kv);
        return kv_fail(m, ts, "reserve");
    }
    return context_install_kv(m, kv, &kc.scheme);
}

model_status context_set_kv_layer_schemes(model_context *m, const tq_kv_scheme *scheme,
                                        const tq_kv_layer_scheme *layer_schemes) {
    if (m == NULL) return MODEL_ERR_ARG;
    m->err[0] = '\0';
    return build_kv(m, scheme, layer_schemes);
}

model_status context_set_kv_scheme(model_context *m, const tq_kv_scheme *scheme) {
    return context_set_kv_layer_schemes(m, scheme, NULL);
}

model_status context_set_kv_keep_history(model_context *m, int keep) {
    if (m == NULL) return MODEL_ERR_ARG;
    const int was = m->kv_keep_history;
    const tq_kv_scheme scheme = m->kv_scheme;
    m->kv_keep_history = keep != 0;
    model_status st = context_set_kv_scheme(m, &scheme);
    if (st != MODEL_OK) m->kv_keep_history = was;
    return st;
}

model_status context_kv_memory(const model_context *m, tq_kv_memory *mem) {
    if (m == NULL || mem == NULL) return MODEL_ERR_ARG;
    return tq_kv_cache_memory(m->kv, mem, sizeof *mem) == TQ_OK ? MODEL_OK : MODEL_ERR_INTERNAL;
}

const tq_kv_cache *context_kv_cache(const model_context *m) { return m == NULL ? NULL : m->kv; }

void context_kv_trim(model_context *m) {
    if (m != NULL) tq_kv_cache_trim(m->kv);
}

/* Drops every position >= len (no change when len is not below the length). Fails (0) only
 * when the sliding-window layers no longer hold what a query at len would see. */
static int kv_rewind(model_context *m, int len) {
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

/* 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), in ggml's operation order with libm's tanhf:
 * the fp16 table of the ggml-rounding numerics only (the plain path: activation.h) */
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


/* ---- forward ------------------------------------------------------------------------------- */

/* One sequence's part of a forward pass: its tokens are rows [row, row + n) of the shared
 * activations; first_out: the first of its rows whose logits are wanted (rows first_out ..
 * n - 1), or -1 for none. */
typedef struct fwd_seq {
    model_context *x;
    const int32_t *tokens;
    int n, pos0, row, first_out;
} fwd_seq;

/* A forward pass over the rows of one or more sequences: every matmul runs once on all rows
 * (weights read once for the batch), each sequence attends its own KV cache. Each row's
 * result depends on its own sequence only: matmuls compute every activation row alone
 * (8-bit rounding per row, one dot per weight row and activation row), so a sequence's logits
 * are the same whatever else is in the batch (tests/test_batch.c). */
typedef struct fwd {
    const model_config *c;
    const model_weights *w;
    model_state *s;
    int max_rows; /* rows s holds: the stride of the two rope tables */
    matmul_mode mode;
    int ggml_rounding;
    tq_threadpool *pool;
    const fwd_seq *seqs;
    int n_seqs, n_rows;
    char *err;
    size_t err_cap;
} fwd;

static model_status ffail(const fwd *f, model_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, f->err_cap, fmt, ap);
    va_end(ap);
    return st;
}

static model_status mm(const fwd *f, const matmul_weight *w, const float *x, float *y, int n, const char *what) {
    int st = matmul_mode_run(w, x, y, n, f->mode, f->pool, f->s->work, f->s->work_size);
    if (st != QUANT_OK) return ffail(f, MODEL_ERR_INTERNAL, "matmul %s: %s", what, quant_status_name(st));
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

/* ---- layer replay (context_replay_record, context_replay_from) ---- */

/* Row widths of the record: a layer's input, queries, keys, values. */
static size_t replay_width(const model_config *c, int what) {
    return what == 0   ? (size_t)c->n_embd
           : what == 1 ? (size_t)c->n_head * (size_t)c->head_dim
           : what == 2 ? (size_t)c->n_head_kv * (size_t)c->head_dim
                       : (size_t)c->n_head_kv * (size_t)c->head_dim_v;
}

/* The record's rows of layer il from position pos on, of kind what (replay_width). */
static float *replay_rows(const layer_replay *r, const model_config *c, int what, int il, int pos) {
    float *base = what == 0 ? r->x : what == 1 ? r->q : what == 2 ? r->k : r->v;
    return base + ((size_t)il * (size_t)r->n_pos + (size_t)pos) * replay_width(c, what);
}

/* The record a forward pass of f writes to: one sequence, recording, positions inside it, and
 * the positions before them holding the recorded tokens (so that every recorded position's
 * rows are those of the recorded tokens before it). */
static layer_replay *replay_recording(const fwd *f) {
    if (f->n_seqs != 1) return NULL;
    layer_replay *r = f->seqs[0].x->replay;
    return r != NULL && r->recording && f->seqs[0].pos0 <= r->match && f->seqs[0].pos0 + f->seqs[0].n <= r->n_pos
               ? r
               : NULL;
}

static int layer_is_f16(const tq_kv_cache *kv, int il) {
    tq_kv_layer_scheme ls;
    return tq_kv_cache_get_layer_scheme(kv, il, &ls, sizeof ls) == TQ_OK && ls.key_format == TQ_KV_F16 &&
           ls.value_format == TQ_KV_F16;
}

/* The layers a forward pass of f takes from the record: those below context_replay_from's
 * layer that were fp16 in every recorded call and are now, when f is one sequence whose
 * tokens were all recorded at its positions (and no hook watches); 0 otherwise. An fp16
 * layer's rows depend on the tokens before and at each position alone (matmuls per row,
 * exact attention), so the record is what computing them gives, bit for bit. */
static int replay_layers(const fwd *f) {
    if (f->n_seqs != 1) return 0;
    const fwd_seq *q = &f->seqs[0];
    const model_context *m = q->x;
    const layer_replay *r = m->replay;
    if (r == NULL || r->recording || r->from <= 0 || m->attn_hook != NULL || m->kv_keep_history != r->keep_history ||
        q->pos0 > r->match || q->pos0 + q->n > r->n_pos)
        return 0;
    for (int t = 0; t < q->n; t++) /* the positions before hold the recorded tokens (match) */
        if (r->tok[q->pos0 + t] != q->tokens[t]) return 0;
    int from = 0;
    while (from < r->from && from + 1 < f->c->n_layer && r->f16[from] && layer_is_f16(m->kv, from)) from++;
    return from;
}

/* After a pass of sequence q (ok: it succeeded; else the sequence is back at pos0 or less):
 * how far its positions still hold the recorded tokens. */
static void replay_track(const fwd_seq *q, int ok) {
    layer_replay *r = q->x->replay;
    if (r == NULL) return;
    int keep = r->match < q->pos0 ? r->match : q->pos0;
    if (ok && keep == q->pos0)
        while (keep < r->n_pos && keep - q->pos0 < q->n && r->tok[keep] == q->tokens[keep - q->pos0]) keep++;
    r->match = keep;
}

/* Layer il's K/V of sequence m's n new tokens at positions pos0 .. pos0+n-1 (the cache holds
 * pos0 before). The queries first: a layer's first compression (maybe inside this append)
 * fixes its key scale from the queries seen so far (tq_kv_cache_observe_queries). */
static model_status kv_store(model_context *m, int il, const float *qr, const float *kr, const float *vr, int pos0,
                             size_t n) {
    tq_status ts = tq_kv_cache_observe_queries(m->kv, il, qr, m->cfg.n_head, n);
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV observe layer %d: %s", il, tq_error_name(ts));
    ts = tq_kv_cache_append_pool(m->kv, il, kr, vr, n, m->pool);
    if (ts == TQ_ERR_RANGE && tq_kv_cache_length(m->kv, il) == (size_t)pos0 + n)
        ts = TQ_OK; /* a norm beyond fp16 while compressing: appended, kept raw (exact) */
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV append layer %d: %s", il, tq_error_name(ts));
    return MODEL_OK;
}

/* Layer il of sequence q: hook, K/V appended to its cache, its queries attend. */
static model_status attend_seq(const fwd *f, const fwd_seq *q, int il, const tq_attn_params *ap) {
    const model_config *c = f->c;
    model_state *s = f->s;
    model_context *m = q->x;
    const size_t r = (size_t)q->row, n = (size_t)q->n;
    const float *qr = s->q + r * (size_t)c->n_head * (size_t)c->head_dim;
    const float *kr = s->k + r * (size_t)c->n_head_kv * (size_t)c->head_dim;
    const float *vr = s->v + r * (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    if (m->attn_hook != NULL) m->attn_hook(m->attn_hook_ctx, il, q->pos0, q->n, qr, kr, vr, ap);
    layer_replay *rec = replay_recording(f);
    if (rec != NULL) {
        memcpy(replay_rows(rec, c, 1, il, q->pos0), qr, n * replay_width(c, 1) * sizeof(float));
        memcpy(replay_rows(rec, c, 2, il, q->pos0), kr, n * replay_width(c, 2) * sizeof(float));
        memcpy(replay_rows(rec, c, 3, il, q->pos0), vr, n * replay_width(c, 3) * sizeof(float));
        if (!layer_is_f16(m->kv, il)) rec->f16[il] = 0;
    }
    /* K/V of the new tokens, then the n queries attend as the last n positions
     * (doc/kvcache.md section 1). */
    model_status st = kv_store(m, il, qr, kr, vr, q->pos0, n);
    if (st != MODEL_OK) return st;
    const size_t att_row = (size_t)c->n_head * (size_t)c->head_dim_v;
    tq_status ts = tq_kv_attention(m->kv, il, qr, c->n_head, n, ap, m->pool, m->attn_work, m->attn_work_size,
                         s->att + r * att_row, ((size_t)f->max_rows - r) * att_row);
    if (ts != TQ_OK) return fail(m, MODEL_ERR_INTERNAL, "KV attention layer %d: %s", il, tq_error_name(ts));
    return MODEL_OK;
}

/* Layer il of a pass replay_layers lets the record give: its K/V appended as recorded (after
 * observing the recorded queries, as attend_seq does); nothing computed. */
static model_status replay_layer(const fwd *f, int il) {
    const fwd_seq *q = &f->seqs[0];
    layer_replay *r = q->x->replay;
    r->replayed++;
    return kv_store(q->x, il, replay_rows(r, f->c, 1, il, q->pos0), replay_rows(r, f->c, 2, il, q->pos0),
                    replay_rows(r, f->c, 3, il, q->pos0), q->pos0, (size_t)q->n);
}

static model_status forward_layer(const fwd *f, int il) {
    const model_config *c = f->c;
    const model_layer *L = &f->w->layers[il];
    model_state *s = f->s;
    const int E = c->n_embd, n = f->n_rows;
    layer_replay *rec = replay_recording(f);
    if (rec != NULL) memcpy(replay_rows(rec, c, 0, il, f->seqs[0].pos0), s->x, (size_t)n * (size_t)E * sizeof(float));

    /* attention sub-block: x += post_norm(W_o attn(rope(norm(W_q h)), rope(norm(W_k h)), W_v h)) */
    for (int t = 0; t < n; t++) rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, L->attn_norm, E, c->rms_eps);
    TRY(mm(f, &L->wq, s->xb, s->q, n, "attn_q"));
    TRY(mm(f, &L->wk, s->xb, s->k, n, "attn_k"));
    TRY(mm(f, &L->wv, s->xb, s->v, n, "attn_v"));
    add_bias(s->q, L->bq, n, c->n_head * c->head_dim);
    add_bias(s->k, L->bk, n, c->n_head_kv * c->head_dim);
    add_bias(s->v, L->bv, n, c->n_head_kv * c->head_dim_v);
    const float *cs = s->rope_cs + (L->is_swa ? (size_t)f->max_rows * (size_t)c->n_rot : 0);
    qk_prepare(c, s->q, n, c->n_head, L->q_norm, cs);
    qk_prepare(c, s->k, n, c->n_head_kv, L->k_norm, cs);
    if (f->ggml_rounding) { /* llama.cpp rounds the scaled Q to fp16 for K.q */
        const size_t nq = (size_t)n * (size_t)c->n_head * (size_t)c->head_dim;
        for (size_t i = 0; i < nq; i++) s->q[i] = tq_f16_to_f32(tq_f32_to_f16(s->q[i] * c->attn_scale)) / c->attn_scale;
    }
    tq_attn_params ap;
    tq_attn_params_init(&ap, c->head_dim);
    ap.scale = c->attn_scale;
    ap.causal = 1;
    ap.sliding_window = L->is_swa ? c->sliding_window : 0;
    ap.softcap = 0.0f; /* Gemma 3 has no attention soft-cap (doc/gemma3.md section 4) */
    for (int i = 0; i < f->n_seqs; i++) {
        model_status st = attend_seq(f, &f->seqs[i], il, &ap);
        if (st != MODEL_OK) /* the message is the sequence's; a batch's own names which */
            return f->err == f->seqs[i].x->err ? st : ffail(f, st, "sequence %d: %.200s", i, f->seqs[i].x->err);
    }
    TRY(mm(f, &L->wo, s->att, s->xb2, n, "attn_output"));
    for (int t = 0; t < n; t++) {
        float *a = s->xb2 + (size_t)t * E, *x = s->x + (size_t)t * E;
        if (L->post_attn_norm != NULL) rmsnorm(a, a, L->post_attn_norm, E, c->rms_eps);
        for (int i = 0; i < E; i++) x[i] += a[i];
    }

    /* FFN sub-block: x += post_norm(W_down (act(W_gate h) * W_up h)), h = norm(x) */
    for (int t = 0; t < n; t++) rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, L->ffn_norm, E, c->rms_eps);
    TRY(mm(f, &L->w_gate, s->xb, s->hb, n, "ffn_gate"));
    TRY(mm(f, &L->w_up, s->xb, s->hb2, n, "ffn_up"));
    const size_t nf = (size_t)n * (size_t)c->n_ff;
    if (c->ffn_act == MODEL_FFN_GELU_TANH && s->gelu_f16 != NULL)
        for (size_t i = 0; i < nf; i++) s->hb[i] = gelu_ggml(s->gelu_f16, s->hb[i]) * s->hb2[i];
    else if (c->ffn_act == MODEL_FFN_GELU_TANH)
        for (size_t i = 0; i < nf; i++) s->hb[i] = act_gelu_tanh(s->hb[i]) * s->hb2[i];
    else
        for (size_t i = 0; i < nf; i++) s->hb[i] = act_silu(s->hb[i]) * s->hb2[i];
    TRY(mm(f, &L->w_down, s->hb, s->xb2, n, "ffn_down"));
    for (int t = 0; t < n; t++) {
        float *fo = s->xb2 + (size_t)t * E, *x = s->x + (size_t)t * E;
        if (L->post_ffn_norm != NULL) rmsnorm(fo, fo, L->post_ffn_norm, E, c->rms_eps);
        for (int i = 0; i < E; i++) x[i] += fo[i];
    }
    return MODEL_OK;
}

/* Checks a sequence's call; nothing changes, the message is m's. */
static model_status seq_check(model_context *m, const int32_t *tokens, int n, int pos0) {
    const model_config *c = &m->cfg;
    if (tokens == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens");
    if (n > m->params.max_batch) return fail(m, MODEL_ERR_BATCH, "batch of %d > max_batch %d", n, m->params.max_batch);
    const int len = context_seq_len(m);
    if (pos0 < 0 || pos0 > len) return fail(m, MODEL_ERR_POS, "pos0 %d with %d positions stored", pos0, len);
    if (pos0 > m->params.max_ctx - n)
        return fail(m, MODEL_ERR_CONTEXT, "positions %d..%d past max_ctx %d", pos0, pos0 + n - 1, m->params.max_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return fail(m, MODEL_ERR_TOKEN, "token %d at %d outside 0..%d", tokens[t], t, c->n_vocab - 1);
    return MODEL_OK;
}

/* Rewinds a checked sequence to pos0; fails only when its windows no longer reach back. */
static model_status seq_rewind(model_context *m, int pos0) {
    const model_config *c = &m->cfg;
    const int len = context_seq_len(m);
    if (!kv_rewind(m, pos0))
        return fail(m, MODEL_ERR_POS,
                    "cannot rewind to position %d of %d: the sliding-window layers keep only the "
                    "last %d + %d positions (rewind less, or restart from 0)",
                    pos0, len, c->sliding_window, TQ_KV_WINDOW_SLACK);
    return MODEL_OK;
}

/* The forward pass of f's sequences (each checked and rewound: seq_check, seq_rewind); logits: the
 * rows each sequence asks for (fwd_seq.first_out .. n - 1), one after the other, n_out rows;
 * NULL or n_out = 0 for none. On error every sequence is rewound to its pos0. */
static model_status forward_run(const fwd *f, float *logits, int n_out) {
    const model_config *c = f->c;
    model_state *s = f->s;
    /* x = embd[token] * embd_scale (sqrt(n_embd) for Gemma: doc section 5) */
    const size_t row_bytes = quant_row_bytes(f->w->token_embd.type, c->n_embd);
    for (int i = 0; i < f->n_seqs; i++) {
        const fwd_seq *q = &f->seqs[i];
        for (int t = 0; t < q->n; t++) {
            float *x = s->x + (size_t)(q->row + t) * (size_t)c->n_embd;
            quant_dequantize_row(f->w->token_embd.type,
                                 (const char *)f->w->token_embd.data + (size_t)q->tokens[t] * row_bytes, x, c->n_embd);
            if (c->embd_scale != 1.0f)
                for (int e = 0; e < c->n_embd; e++) x[e] *= c->embd_scale;
        }
        float *cs = s->rope_cs + (size_t)q->row * (size_t)c->n_rot;
        rope_table(cs, q->pos0, q->n, c->n_rot, c->rope_base, c->rope_freq_scale);
        /* Local layers: their own base, and no linear scaling (llama.cpp's freq_scale_swa = 1). */
        rope_table(cs + (size_t)f->max_rows * (size_t)c->n_rot, q->pos0, q->n, c->n_rot, c->rope_base_swa,
                   c->arch == MODEL_ARCH_GEMMA3 ? 1.0f : c->rope_freq_scale);
    }
    /* Recording: the call's positions count once every layer is kept, and the later ones no
     * more (their rows followed other tokens here). Replaying: layers below `from` from the
     * record, then layer from's input rows. */
    layer_replay *rec = replay_recording(f);
    if (rec != NULL)
        for (int t = f->seqs[0].pos0; t < rec->n_pos; t++) rec->tok[t] = -1;
    const int from = replay_layers(f);
    for (int il = 0; il < c->n_layer; il++) {
        model_status st = il < from ? replay_layer(f, il) : MODEL_OK;
        if (il == from && from > 0)
            memcpy(s->x, replay_rows(f->seqs[0].x->replay, c, 0, il, f->seqs[0].pos0),
                   (size_t)f->n_rows * (size_t)c->n_embd * sizeof(float));
        if (st == MODEL_OK && il >= from) st = forward_layer(f, il);
        if (st != MODEL_OK) {
            for (int i = 0; i < f->n_seqs; i++) { /* too far back for the windows: reset */
                if (!kv_rewind(f->seqs[i].x, f->seqs[i].pos0)) kv_rewind(f->seqs[i].x, 0);
                replay_track(&f->seqs[i], 0);
            }
            return st;
        }
    }
    if (rec != NULL)
        for (int t = 0; t < f->seqs[0].n; t++) rec->tok[f->seqs[0].pos0 + t] = f->seqs[0].tokens[t];
    for (int i = 0; i < f->n_seqs; i++) replay_track(&f->seqs[i], 1);
    if (logits == NULL || n_out == 0) return MODEL_OK;

    /* logits = W_out . norm(x), for the rows asked (only norm(x): context_set_hidden_out) */
    const int hidden = f->n_seqs == 1 && f->seqs[0].x->hidden_out;
    float *h = hidden ? logits : s->xb;
    int o = 0;
    for (int i = 0; i < f->n_seqs; i++) {
        const fwd_seq *q = &f->seqs[i];
        if (q->first_out < 0) continue;
        for (int t = q->first_out; t < q->n; t++, o++)
            rmsnorm(h + (size_t)o * c->n_embd, s->x + (size_t)(q->row + t) * c->n_embd, f->w->output_norm,
                    c->n_embd, c->rms_eps);
    }
    if (hidden) return MODEL_OK;
    TRY(mm(f, &f->w->output, s->xb, logits, n_out, "output"));
    if (c->final_softcap > 0.0f) {
        const float cap = c->final_softcap;
        for (size_t i = 0; i < (size_t)n_out * (size_t)c->n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
    }
    return MODEL_OK;
}

model_status context_forward(model_context *m, const int32_t *tokens, int n, int pos0, int all_logits, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    m->err[0] = '\0';
    TRY(seq_check(m, tokens, n, pos0));
    TRY(seq_rewind(m, pos0));
    const fwd_seq q = {m, tokens, n, pos0, 0, logits == NULL ? -1 : all_logits ? 0 : n - 1};
    const fwd f = {&m->cfg, m->w, &m->s, m->params.max_batch, mm_mode(m), m->params.ggml_rounding, m->pool,
                   &q, 1, n, m->err, sizeof m->err};
    return forward_run(&f, logits, logits == NULL ? 0 : n - q.first_out);
}

model_status context_forward_as_decode(model_context *m, const int32_t *tokens, int n, int pos0, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    if (tokens == NULL || logits == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens or no logits");
    for (int q = 0; q < n;) {
        const int most = n - q < m->params.max_batch ? n - q : m->params.max_batch;
        const int k = (int)tq_kv_scheme_decode_chunk(&m->kv_scheme, (size_t)(pos0 + q), (size_t)most);
        model_status st = context_forward(m, tokens + q, k, pos0 + q, 1, logits + (size_t)q * (size_t)m->cfg.n_vocab);
        if (st != MODEL_OK) return st;
        q += k;
    }
    return MODEL_OK;
}

model_status context_forward_after_prompt(model_context *m, const int32_t *tokens, int n, int pos0, float *logits) {
    if (m == NULL) return MODEL_ERR_ARG;
    if (tokens == NULL || logits == NULL || n < 1) return fail(m, MODEL_ERR_ARG, "no tokens or no logits");
    model_status st = context_forward(m, tokens, 1, pos0, 1, logits);
    if (st != MODEL_OK || n == 1) return st;
    return context_forward_as_decode(m, tokens + 1, n - 1, pos0 + 1, logits + (size_t)m->cfg.n_vocab);
}

model_status context_forward_rows(model_context *m, const int32_t *tokens, int n, int pos0, model_rows_mode mode,
                                float *logits) {
    switch (mode) {
    case MODEL_ROWS_AS_DECODE: return context_forward_as_decode(m, tokens, n, pos0, logits);
    case MODEL_ROWS_AFTER_PROMPT: return context_forward_after_prompt(m, tokens, n, pos0, logits);
    default: return context_forward(m, tokens, n, pos0, 1, logits);
    }
}

model_status context_replay_record(model_context *m, int n_pos) {
    if (m == NULL || n_pos < 0 || n_pos > m->params.max_ctx) return MODEL_ERR_ARG;
    replay_free(m->replay);
    m->replay = NULL;
    if (n_pos == 0) return MODEL_OK;
    const model_config *c = &m->cfg;
    layer_replay *r = calloc(1, sizeof *r);
    if (r == NULL) return fail(m, MODEL_ERR_NOMEM, "layer replay");
    const size_t rows = (size_t)c->n_layer * (size_t)n_pos;
    r->n_pos = n_pos;
    r->recording = 1;
    r->keep_history = m->kv_keep_history;
    r->tok = malloc((size_t)n_pos * sizeof *r->tok);
    r->f16 = malloc((size_t)c->n_layer);
    r->x = malloc(rows * replay_width(c, 0) * sizeof(float));
    r->q = malloc(rows * replay_width(c, 1) * sizeof(float));
    r->k = malloc(rows * replay_width(c, 2) * sizeof(float));
    r->v = malloc(rows * replay_width(c, 3) * sizeof(float));
    if (!r->tok || !r->f16 || !r->x || !r->q || !r->k || !r->v) {
        replay_free(r);
        return fail(m, MODEL_ERR_NOMEM, "layer replay of %d positions", n_pos);
    }
    for (int t = 0; t < n_pos; t++) r->tok[t] = -1;
    memset(r->f16, 1, (size_t)c->n_layer);
    m->replay = r;
    return MODEL_OK;
}

void context_replay_from(model_context *m, int layer) {
    if (m == NULL || m->replay == NULL) return;
    m->replay->recording = 0;
    m->replay->from = layer > 0 ? layer : 0;
}

void context_set_hidden_out(model_context *m, int on) {
    if (m != NULL) m->hidden_out = on != 0;
}

model_status context_output_logits(model_context *m, const float *h, int n, const int32_t *ids, const int *k,
                                   size_t stride, float *out) {
    if (m == NULL) return MODEL_ERR_ARG;
    if (n < 0 || (n > 0 && (h == NULL || ids == NULL || k == NULL || out == NULL))) return fail(m, MODEL_ERR_ARG, "no rows");
    const model_config *c = &m->cfg;
    const matmul_weight *w = &m->w->output;
    const quant_kernels *qk = quant_kernels_get();
    const size_t row_bytes = quant_row_bytes(w->type, c->n_embd), E = (size_t)c->n_embd;
    int *at = calloc((size_t)n + 1, sizeof *at);
    if (at == NULL) return fail(m, MODEL_ERR_NOMEM, "output logits of %d rows", n);
    for (int r = 0; r < n; r++) {
        if (k[r] < 0 || (size_t)k[r] > stride) {
            free(at);
            return fail(m, MODEL_ERR_ARG, "row %d: %d tokens, outside [0, %zu]", r, k[r], stride);
        }
        for (int i = 0; i < k[r]; i++)
            if (ids[(size_t)r * stride + (size_t)i] < 0 || ids[(size_t)r * stride + (size_t)i] >= c->n_vocab ||
                (i > 0 && ids[(size_t)r * stride + (size_t)i] <= ids[(size_t)r * stride + (size_t)i - 1])) {
                free(at);
                return fail(m, MODEL_ERR_ARG, "row %d: token ids not ascending inside the vocabulary", r);
            }
    }
    float *wf = m->s.xb2; /* the weight row of the token in hand, dequantized once for every row */
    for (;;) { /* the rows' lists merged: each token's weight row is dequantized once */
        int32_t t = c->n_vocab;
        for (int r = 0; r < n; r++)
            if (at[r] < k[r] && ids[(size_t)r * stride + (size_t)at[r]] < t) t = ids[(size_t)r * stride + (size_t)at[r]];
        if (t == c->n_vocab) break;
        if (qk->dequantize_row(w->type, (const char *)w->data + (size_t)t * row_bytes, wf, c->n_embd) != QUANT_OK) {
            free(at);
            return fail(m, MODEL_ERR_INTERNAL, "output row %d: type %d", t, w->type);
        }
        for (int r = 0; r < n; r++) {
            if (at[r] >= k[r] || ids[(size_t)r * stride + (size_t)at[r]] != t) continue;
            float v = qk->dot_f32(wf, h + (size_t)r * E, c->n_embd);
            if (c->final_softcap > 0.0f) v = c->final_softcap * tanhf(v / c->final_softcap);
            out[(size_t)r * stride + (size_t)at[r]++] = v;
        }
    }
    free(at);
    return MODEL_OK;
}

long context_replay_count(const model_context *m) { return m != NULL && m->replay != NULL ? m->replay->replayed : 0; }

void context_set_attn_hook(model_context *m, model_attn_hook fn, void *ctx) {
    if (m == NULL) return;
    m->attn_hook = fn;
    m->attn_hook_ctx = fn != NULL ? ctx : NULL;
}

int context_seq_len(const model_context *m) { return m == NULL ? 0 : (int)tq_kv_cache_length(m->kv, 0); }

void context_truncate(model_context *m, int len) {
    if (m != NULL && !kv_rewind(m, len)) kv_rewind(m, 0);
    if (m != NULL && m->replay != NULL && m->replay->match > context_seq_len(m)) m->replay->match = context_seq_len(m);
}

/* ---- create / free ------------------------------------------------------------------------- */

const model *context_model(const model_context *m) { return m == NULL ? NULL : m->model; }

const model_config *context_config(const model_context *m) { return m == NULL ? NULL : &m->cfg; }

const context_params *context_get_params(const model_context *m) { return m == NULL ? NULL : &m->params; }

const char *context_last_error(const model_context *m) { return m == NULL ? "NULL context" : m->err; }

char *context_error_buffer(model_context *m, size_t *cap) {
    *cap = sizeof m->err;
    return m->err;
}

void context_free(model_context *m) {
    if (m == NULL) return;
    replay_free(m->replay);
    free_state(&m->s);
    tq_kv_cache_free(m->kv);
    free(m->attn_work);
    free(m);
}

/* A context on mod with params p (max_batch clipped) and *st = its run state's status, no KV
 * cache yet; NULL only when out of memory. */
static model_context *context_alloc(const model *mod, const context_params *p, tq_threadpool *pool,
                                    model_status *st) {
    model_context *m = calloc(1, sizeof *m);
    *st = MODEL_ERR_NOMEM;
    if (m == NULL) return NULL;
    m->model = mod;
    m->cfg = mod->cfg;
    m->w = &mod->w;
    m->pool = pool;
    m->params = *p;
    if (m->params.max_batch > m->params.max_ctx) m->params.max_batch = m->params.max_ctx;
    *st = MODEL_OK;
    if (m->params.max_ctx > m->cfg.n_ctx_train)
        *st = fail(m, MODEL_ERR_CONTEXT, "max_ctx %d > the model's context_length %d", m->params.max_ctx,
                   m->cfg.n_ctx_train);
    if (*st == MODEL_OK && build_state(&m->s, &m->cfg, m->w, m->params.max_batch, pool, mm_mode(m),
                                       m->params.ggml_rounding) != MODEL_OK)
        *st = fail(m, MODEL_ERR_NOMEM, "out of memory (run state)");
    return m;
}

/* Finishes a context from context_alloc: on error reports and frees it. */
static model_status context_finish(model_context *m, model_status st, model_context **out, char *err,
                                   size_t err_cap) {
    if (m == NULL) return report_error(err, err_cap, MODEL_ERR_NOMEM, "out of memory");
    if (st != MODEL_OK) {
        report_error(err, err_cap, st, m->err);
        context_free(m);
        return st;
    }
    *out = m;
    return MODEL_OK;
}

model_status context_create(const model *mod, const context_params *p, tq_threadpool *pool, model_context **out,
                            char *err, size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (mod == NULL || p == NULL || out == NULL || p->max_ctx < 1 || p->max_batch < 1) {
        return report_error(err, err_cap, MODEL_ERR_ARG, "bad argument");
    }
    model_status st;
    model_context *m = context_alloc(mod, p, pool, &st);
    if (st == MODEL_OK) st = build_kv(m, p->kv_scheme, NULL);
    return context_finish(m, st, out, err, err_cap);
}

/* ---- forks --------------------------------------------------------------------------------- */

model_status context_fork(const model_context *src, tq_threadpool *pool, model_context **out, char *err,
                          size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (src == NULL || out == NULL) return report_error(err, err_cap, MODEL_ERR_ARG, "bad argument");
    return context_fork_ctx(src, pool, src->params.max_ctx, out, err, err_cap);
}

model_status context_fork_ctx(const model_context *src, tq_threadpool *pool, int max_ctx, model_context **out,
                              char *err, size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (src == NULL || out == NULL || max_ctx < 1) return report_error(err, err_cap, MODEL_ERR_ARG, "bad argument");
    if (max_ctx < context_seq_len(src))
        return report_error(err, err_cap, MODEL_ERR_CONTEXT, "max_ctx below the sequence's length");
    context_params p = src->params;
    p.max_ctx = max_ctx;
    model_status st;
    model_context *m = context_alloc(src->model, &p, pool, &st);
    tq_kv_cache *kv = NULL;
    if (st == MODEL_OK) {
        m->kv_keep_history = src->kv_keep_history;
        tq_status ts = tq_kv_cache_fork(src->kv, &kv);
        st = ts != TQ_OK ? kv_fail(m, ts, "fork") : context_install_kv(m, kv, &src->kv_scheme);
    }
    return context_finish(m, st, out, err, err_cap);
}

model_status contexts_kv_memory(const model_context *const *xs, size_t n, tq_kv_memory *mem) {
    if (xs == NULL || mem == NULL || n == 0) return MODEL_ERR_ARG;
    const tq_kv_cache **caches = malloc(n * sizeof *caches);
    if (caches == NULL) return MODEL_ERR_NOMEM;
    model_status st = MODEL_OK;
    for (size_t i = 0; i < n && st == MODEL_OK; i++)
        if (xs[i] == NULL) st = MODEL_ERR_ARG;
        else caches[i] = xs[i]->kv;
    if (st == MODEL_OK) {
        tq_status ts = tq_kv_caches_memory(caches, n, mem, sizeof *mem);
        st = ts == TQ_OK ? MODEL_OK : ts == TQ_ERR_NOMEM ? MODEL_ERR_NOMEM : MODEL_ERR_INTERNAL;
    }
    free(caches);
    return st;
}

model_status context_kv_shared_bytes(const model_context *x, size_t *shared_bytes) {
    if (x == NULL || shared_bytes == NULL) return MODEL_ERR_ARG;
    return tq_kv_cache_shared_bytes(x->kv, shared_bytes) == TQ_OK ? MODEL_OK : MODEL_ERR_INTERNAL;
}

/* ---- many sequences in one forward ---------------------------------------------------------- */

struct model_batch {
    const model *model;
    model_config cfg;
    const model_weights *w;
    model_state s;      /* activations for max_tokens rows */
    int max_tokens, max_seqs, f32_act;
    tq_threadpool *pool;
    fwd_seq *seqs;      /* (max_seqs) */
    float *logits;      /* (max_seqs, n_vocab) */
    char err[256];
};

void model_batch_free(model_batch *b) {
    if (b == NULL) return;
    free_state(&b->s);
    free(b->seqs);
    free(b->logits);
    free(b);
}

model_status model_batch_create(const model *mod, int max_tokens, int max_seqs, int f32_act, tq_threadpool *pool,
                                model_batch **out, char *err, size_t err_cap) {
    if (out != NULL) *out = NULL;
    if (mod == NULL || out == NULL || max_tokens < 1 || max_seqs < 1 || max_seqs > max_tokens)
        return report_error(err, err_cap, MODEL_ERR_ARG, "bad argument");
    model_batch *b = calloc(1, sizeof *b);
    if (b == NULL) return report_error(err, err_cap, MODEL_ERR_NOMEM, "out of memory");
    b->model = mod;
    b->cfg = mod->cfg;
    b->w = &mod->w;
    b->max_tokens = max_tokens;
    b->max_seqs = max_seqs;
    b->f32_act = f32_act != 0;
    b->pool = pool;
    b->seqs = calloc((size_t)max_seqs, sizeof *b->seqs);
    b->logits = malloc((size_t)max_seqs * (size_t)b->cfg.n_vocab * sizeof *b->logits);
    if (b->seqs == NULL || b->logits == NULL ||
        build_state(&b->s, &b->cfg, b->w, max_tokens, pool, b->f32_act ? MATMUL_F32_ACT : MATMUL_Q8_ACT, 0) !=
            MODEL_OK) {
        model_batch_free(b);
        return report_error(err, err_cap, MODEL_ERR_NOMEM, "out of memory (batch run state)");
    }
    *out = b;
    return MODEL_OK;
}

const char *model_batch_last_error(const model_batch *b) { return b == NULL ? "NULL batch" : b->err; }

model_status model_batch_forward(model_batch *b, const batch_seq *seqs, int n_seqs) {
    if (b == NULL) return MODEL_ERR_ARG;
    b->err[0] = '\0';
    if (seqs == NULL || n_seqs < 1) return fail(b, MODEL_ERR_ARG, "no sequences");
    if (n_seqs > b->max_seqs) return fail(b, MODEL_ERR_BATCH, "%d sequences > max_seqs %d", n_seqs, b->max_seqs);
    int rows = 0, n_out = 0;
    for (int i = 0; i < n_seqs; i++) {
        model_context *x = seqs[i].x;
        if (x == NULL) return fail(b, MODEL_ERR_ARG, "sequence %d: NULL context", i);
        if (x->model != b->model) return fail(b, MODEL_ERR_ARG, "sequence %d: a context of another model", i);
        if (x->params.f32_act != b->f32_act || x->params.ggml_rounding)
            return fail(b, MODEL_ERR_ARG, "sequence %d: its context's numerics (f32_act, ggml_rounding) are not the batch's", i);
        for (int j = 0; j < i; j++)
            if (seqs[j].x == x) return fail(b, MODEL_ERR_ARG, "sequences %d and %d: the same context", j, i);
        x->err[0] = '\0';
        model_status st = seq_check(x, seqs[i].tokens, seqs[i].n, seqs[i].pos0);
        if (st != MODEL_OK) return fail(b, st, "sequence %d: %.200s", i, x->err);
        if (seqs[i].n > b->max_tokens - rows)
            return fail(b, MODEL_ERR_BATCH, "%d tokens and more > max_tokens %d", rows + seqs[i].n, b->max_tokens);
        b->seqs[i] = (fwd_seq){x, seqs[i].tokens, seqs[i].n, seqs[i].pos0, rows, seqs[i].logits ? seqs[i].n - 1 : -1};
        rows += seqs[i].n;
        n_out += seqs[i].logits != NULL;
    }
    for (int i = 0; i < n_seqs; i++) {
        model_status st = seq_rewind(seqs[i].x, seqs[i].pos0);
        if (st != MODEL_OK) return fail(b, st, "sequence %d: %.200s", i, seqs[i].x->err);
    }
    const fwd f = {&b->cfg, b->w, &b->s, b->max_tokens, b->f32_act ? MATMUL_F32_ACT : MATMUL_Q8_ACT, 0, b->pool,
                   b->seqs, n_seqs, rows, b->err, sizeof b->err};
    TRY(forward_run(&f, b->logits, n_out));
    const size_t nv = (size_t)b->cfg.n_vocab;
    for (int i = 0, o = 0; i < n_seqs; i++)
        if (seqs[i].logits != NULL) memcpy(seqs[i].logits, b->logits + (size_t)o++ * nv, nv * sizeof(float));
    return MODEL_OK;
}

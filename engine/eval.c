/* Scoring a KV scheme on a text: windows, pieces, per-row scores, summaries (eval.h). */
#include "eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "tokenizer.h"
#include "vocab.h"

/* ---- windows and pieces -------------------------------------------------------------------- */

int32_t *eval_tokenize(const model *m, const char *text, size_t len, size_t *n_out, int32_t *bos) {
    *n_out = 0;
    *bos = -1;
    if (len > 0 && text[len - 1] == '\n') len--;
    gguf_vocab gv;
    tokenizer *tok = NULL;
    char err[200];
    int32_t *ids = NULL;
    if (vocab_build(model_file(m), &gv, err, sizeof err) != VOCAB_OK) return NULL;
    if (tokenizer_create(&gv.v, &tok) == TOKENIZER_OK) {
        *bos = tokenizer_add_bos(tok) ? tokenizer_bos_id(tok) : -1; /* as llama-perplexity */
        const size_t cap = tokenizer_encode_bound(tok, len);
        ids = cap > 0 ? malloc(cap * sizeof *ids) : NULL;
        if (ids != NULL &&
            tokenizer_encode(tok, text, len, TOKENIZER_ENCODE_ADD_SPECIAL, ids, cap, n_out) != TOKENIZER_OK) {
            free(ids);
            ids = NULL;
            *n_out = 0;
        }
    }
    tokenizer_free(tok);
    vocab_free(&gv);
    return ids;
}

void eval_scheme_for_view(tq_kv_scheme *s, eval_view v, int keep_prefill_raw) {
    /* As decode, a prompt's raw phase ends at the first decode step anyway (same state);
     * EVAL_PROMPT keeps the first half raw. */
    if (v == EVAL_PROMPT) s->prefill_raw = 1;
    else if (v == EVAL_AS_DECODE || !keep_prefill_raw) s->prefill_raw = 0;
}

int eval_context_batch(int ctx) {
    int b = ctx / 2 < 512 ? ctx / 2 : 512;
    const int piece = ctx < EVAL_PIECE ? ctx : EVAL_PIECE;
    return b > piece ? b : piece;
}

int eval_rows_per_window(int ctx) { return ctx - 1 - ctx / 2; }

long eval_windows(size_t n_tokens, int ctx) { return ctx < 1 ? 0 : (long)(n_tokens / (size_t)ctx); }

void eval_window_tokens(const int32_t *toks, long w, int ctx, int32_t bos, int32_t *out) {
    memcpy(out, toks + (size_t)w * (size_t)ctx, (size_t)ctx * sizeof *out);
    if (bos >= 0) out[0] = bos;
}

int eval_plan(int ctx, eval_view v, eval_piece *out, int cap) {
    const int first = ctx / 2;
    int k = 0;
    for (int p = first, n_run; p < ctx - 1; p += n_run) {
        /* calls end at multiples of EVAL_PIECE (of any batch dividing it) or at ctx: the last
         * position is never scored (no next token in the window) but runs, so that the last
         * call ends at a multiple of the batch too */
        n_run = EVAL_PIECE - p % EVAL_PIECE < ctx - p ? EVAL_PIECE - p % EVAL_PIECE : ctx - p;
        if (out == NULL) {
            k++;
            continue;
        }
        if (k == cap) return 0;
        out[k].pos = p;
        out[k].n_run = n_run;
        out[k].n_score = ctx - 1 - p < n_run ? ctx - 1 - p : n_run;
        /* EVAL_PROMPT: only the first piece starts with the prompt's first decode step */
        out[k].mode = v == EVAL_PROMPT && p != first ? MODEL_ROWS_AS_DECODE : (model_rows_mode)v;
        k++;
    }
    return k;
}

model_status eval_prefill(model_context *x, const int32_t *win, int ctx) {
    const context_params *cp = context_get_params(x);
    if (cp == NULL || win == NULL) return MODEL_ERR_ARG;
    context_truncate(x, 0);
    model_status st = MODEL_OK;
    for (int p = 0, first = ctx / 2; p < first && st == MODEL_OK; p += cp->max_batch) {
        const int n = first - p < cp->max_batch ? first - p : cp->max_batch;
        st = context_forward(x, win + p, n, p, 0, NULL);
    }
    return st;
}

model_status eval_run_piece(model_context *x, const int32_t *win, const eval_piece *pc, float *logits) {
    return context_forward_rows(x, win + pc->pos, pc->n_run, pc->pos, pc->mode, logits);
}

/* ---- scores -------------------------------------------------------------------------------- */

void eval_log_softmax(const float *row, float *out, int n) {
    float mx = row[0];
    for (int i = 1; i < n; i++)
        if (row[i] > mx) mx = row[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)(row[i] - mx));
    const float lse = mx + (float)log(s);
    for (int i = 0; i < n; i++) out[i] = row[i] - lse;
}

#define HEAD_BINS 1024 /* log-probability bins of 1/32: 0 down to −32 */

/* lp's bin: floor(−32 lp), 0 for lp >= 0, −1 below e^−32 (or NaN): never in a head */
static int head_bin(float lp) {
    const float b = -32.0f * lp;
    return !(b < (float)HEAD_BINS) ? -1 : b > 0.0f ? (int)b : 0;
}

int eval_head(const float *lp, int n, double mass, int cap, int32_t *ids) {
    double m[HEAD_BINS] = {0};
    int cnt[HEAD_BINS] = {0};
    for (int j = 0; j < n; j++) {
        const int b = head_bin(lp[j]);
        if (b < 0) continue;
        m[b] += exp((double)lp[j]);
        cnt[b]++;
    }
    /* whole bins while short of mass and within cap; then part of the bin that does not fit */
    int last = -1, count = 0, part = -1, part_n = 0;
    double got = 0.0;
    for (int b = 0; b < HEAD_BINS && got < mass; b++) {
        if (count + cnt[b] > cap) {
            part = b, part_n = cap - count;
            break;
        }
        count += cnt[b];
        got += m[b];
        last = b;
    }
    int k = 0;
    for (int j = 0; j < n; j++) {
        const int b = head_bin(lp[j]);
        if (b >= 0 && b <= last) ids[k++] = j;
        else if (b == part && part_n > 0) ids[k++] = j, part_n--;
    }
    return k;
}

double eval_kld_head(const float *ref, const int32_t *ids, int k, const float *z) {
    double ph = 0.0, mu = 0.0;
    for (int i = 0; i < k; i++) {
        const double p = exp((double)ref[ids[i]]);
        ph += p;
        mu += p * ((double)z[i] - ref[ids[i]]);
    }
    if (!(ph > 0.0)) return 0.0;
    mu /= ph;
    double s = 0.0; /* Σ_head p (e^(δ − μ) − 1): q's mass over p's, less 1, times p's */
    for (int i = 0; i < k; i++)
        s += exp((double)ref[ids[i]]) * expm1f((float)((double)z[i] - ref[ids[i]] - mu));
    const double pt = ph < 1.0 ? 1.0 - ph : 0.0; /* the tail, moving by μ: no part in s */
    return log1p(s / (ph + pt));
}

int eval_acc_init(eval_acc *a, long cap) {
    memset(a, 0, sizeof *a);
    a->kld_rows = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *a->kld_rows);
    if (a->kld_rows == NULL) return -1;
    a->cap = cap;
    return 0;
}

void eval_acc_free(eval_acc *a) {
    free(a->kld_rows);
    memset(a, 0, sizeof *a);
}

void eval_score_row(eval_acc *a, const float *ref, const float *mine, int n_vocab, int32_t target) {
    double k = 0.0;
    if (mine != ref)
        for (int j = 0; j < n_vocab; j++) k += (double)(expf(ref[j]) * (ref[j] - mine[j]));
    a->nll -= mine[target];
    a->kld += k;
    a->d_block += (double)ref[target] - (double)mine[target];
    if ((a->rows + 1) % EVAL_SE_BLOCK == 0) {
        const double m = a->d_block / EVAL_SE_BLOCK;
        a->d_means += m;
        a->d_means2 += m * m;
        a->n_blocks++;
        a->d_block = 0.0;
    }
    if (a->rows < a->cap) a->kld_rows[a->rows] = (float)k;
    a->top1 += mine == ref || sampler_argmax(ref, n_vocab) == sampler_argmax(mine, n_vocab);
    a->rows++;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int eval_summarize(const eval_acc *a, eval_summary *out) {
    memset(out, 0, sizeof *out);
    out->rows = a->rows;
    if (a->rows == 0) return 0;
    out->ppl = exp(a->nll / (double)a->rows);
    out->kld_mean = a->kld / (double)a->rows;
    out->top1 = (double)a->top1 / (double)a->rows;
    /* ΔPPL from the paired rows: the mean of d over every row (whole blocks and the rest) */
    const double d_all = (a->d_means * EVAL_SE_BLOCK + a->d_block) / (double)a->rows, r = exp(d_all);
    out->dppl_pct = 100.0 * (r - 1.0);
    out->dppl_pct_se = -1.0;
    if (a->n_blocks >= 2) {
        const double nb = (double)a->n_blocks, mean = a->d_means / nb;
        const double var = (a->d_means2 - nb * mean * mean) / (nb - 1.0);
        out->dppl_pct_se = 100.0 * r * sqrt(var > 0.0 ? var / nb : 0.0);
    }
    const long kept = a->rows < a->cap ? a->rows : a->cap;
    if (kept == 0) return 0;
    float *sorted = malloc((size_t)kept * sizeof *sorted);
    if (sorted == NULL) return -1;
    memcpy(sorted, a->kld_rows, (size_t)kept * sizeof *sorted);
    qsort(sorted, (size_t)kept, sizeof *sorted, cmp_float);
    out->kld_median = sorted[(size_t)(0.5 * (double)(kept - 1))];
    out->kld_p99 = sorted[(size_t)(0.99 * (double)(kept - 1))];
    free(sorted);
    return 0;
}

/* ---- the cache's size ---------------------------------------------------------------------- */

/* Bytes one token takes in layer il of x's cache once compressed (K and V, every KV head);
 * 0 if unknown. */
static size_t layer_token_bytes(const model_context *x, int il) {
    const model_config *c = context_config(x);
    tq_kv_layer_scheme ls;
    size_t kb = 0, vb = 0;
    if (tq_kv_cache_get_layer_scheme(context_kv_cache(x), il, &ls, sizeof ls) != TQ_OK ||
        tq_kv_layer_scheme_bytes(&ls, c->head_dim, c->head_dim_v, &kb, &vb) != TQ_OK)
        return 0;
    return (kb + vb) * (size_t)c->n_head_kv;
}

size_t eval_kv_bytes_per_token(const model_context *x) {
    const model_config *c = context_config(x);
    if (c == NULL || context_kv_cache(x) == NULL) return 0;
    size_t total = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t b = layer_token_bytes(x, il);
        if (b == 0) return 0;
        total += b;
    }
    return total;
}

size_t eval_kv_read_bytes(const model_context *x, int len) {
    const model_config *c = context_config(x);
    if (c == NULL || context_kv_cache(x) == NULL || len < 1) return 0;
    const size_t raw = (size_t)len - tq_kv_scheme_compressed_length(context_get_params(x)->kv_scheme, (size_t)len);
    const size_t f16 = 2 * (size_t)(c->head_dim + c->head_dim_v) * (size_t)c->n_head_kv;
    size_t total = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t b = layer_token_bytes(x, il);
        if (b == 0) return 0;
        size_t seen = (size_t)len;
        if (model_layer_is_swa(context_model(x), il) && c->sliding_window > 0 && seen > (size_t)c->sliding_window)
            seen = (size_t)c->sliding_window;
        size_t seen_raw = raw < seen ? raw : seen;
        total += seen_raw * f16 + (seen - seen_raw) * b;
    }
    return total;
}

void eval_kv_need_bytes(const model_context *x, int n_prompt, int len, size_t *steady, size_t *prefill) {
    *steady = *prefill = 0;
    const model_config *c = context_config(x);
    if (c == NULL || context_kv_cache(x) == NULL || len < 1 || n_prompt < 0 || n_prompt > len) return;
    const tq_kv_scheme *sc = context_get_params(x)->kv_scheme;
    size_t tail = 0; /* the longest raw tail at any length up to len */
    for (size_t p = len > 512 ? (size_t)len - 512 : 1; p <= (size_t)len; p++) {
        size_t t = p - tq_kv_scheme_compressed_length(sc, p);
        if (t > tail) tail = t;
    }
    const size_t f16 = 2 * (size_t)(c->head_dim + c->head_dim_v) * (size_t)c->n_head_kv;
    size_t st = 0, pf = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t b = layer_token_bytes(x, il);
        if (b == 0) return;
        size_t keep = (size_t)len, keep_p = (size_t)n_prompt;
        if (model_layer_is_swa(context_model(x), il) && c->sliding_window > 0) {
            const size_t w = (size_t)c->sliding_window + TQ_KV_WINDOW_SLACK;
            if (keep > w) keep = w;
            if (keep_p > w) keep_p = w;
        }
        const size_t raw = tail < keep ? tail : keep;
        st += (keep - raw) * b + raw * (b > f16 ? b : f16);
        pf += keep_p * f16;
    }
    *steady = st;
    /* prefill_raw = 0 compresses as the prompt runs: it never holds more than while decoding */
    *prefill = sc->prefill_raw ? pf : 0;
}

/* Bytes the decode steps of the scored half hold beyond the end-of-window (all compressed)
 * state, on average: per layer, the raw tail len − compressed length (the two-phase rule)
 * at fp16 instead of the layer's compressed bytes. */
static double decode_tail_bytes(const model_context *x, int ctx) {
    const tq_kv_scheme *sc = context_get_params(x)->kv_scheme;
    double tail = 0.0;
    for (int p = ctx / 2; p < ctx - 1; p++)
        tail += (double)(p + 1) - (double)tq_kv_scheme_compressed_length(sc, (size_t)(p + 1));
    tail /= (double)(ctx - 1 - ctx / 2);
    const model_config *c = context_config(x);
    const double f16 = 2.0 * (c->head_dim + c->head_dim_v) * c->n_head_kv;
    double extra = 0.0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t b = layer_token_bytes(x, il);
        if (b) extra += tail * (f16 - (double)b);
    }
    return extra;
}

double eval_kv_ratio(const model_context *x, eval_view v, int ctx) {
    tq_kv_memory mem;
    if (context_kv_memory(x, &mem) != MODEL_OK || mem.data_bytes == 0) return 0.0;
    double ratio = (double)mem.f16_bytes / (double)mem.data_bytes;
    if (v != EVAL_COMPRESSED && ctx > 2)
        ratio = (double)mem.f16_bytes / ((double)mem.data_bytes + decode_tail_bytes(x, ctx));
    return ratio;
}

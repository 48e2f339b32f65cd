/* Scoring a KV scheme on a text, the one implementation behind `tq perplexity`, bench_model_kv
 * and tests/test_model_kv.c: perplexity, KL divergence against a reference run (mean, median,
 * 99th percentile), top-1 agreement, and the KV cache's size ratio, with llama-perplexity's
 * windowing and the three scoring views. doc/gemma3.md §8 has the method and its reasons.
 *
 * Windowing (llama-perplexity's default mode): the text, tokenized once with BOS, is cut into
 * consecutive windows of ctx tokens (the remainder dropped); in each window the first token is
 * replaced by BOS, the window runs from position 0 on an empty sequence, positions 0 .. ctx/2−1
 * are context only (eval_prefill, no logits) and rows ctx/2 .. ctx−2 are scored against the
 * next token. The scored part runs in pieces whose forward calls end at multiples of
 * EVAL_PIECE (the schemes' compression batch) or at ctx (eval_plan).
 *
 * Views (eval_view): EVAL_COMPRESSED, every key a scored query sees compressed (schemes run
 * with prefill_raw = 0: the worst case); EVAL_AS_DECODE, each piece in the decode-exact chunks
 * of context_forward_as_decode (the cache as token-by-token decode leaves it); EVAL_PROMPT,
 * the first half is a raw prompt (prefill_raw = 1), the first scored position goes alone (the
 * decode step that compresses the prompt), the rest as EVAL_AS_DECODE. The reference run takes
 * the same calls in every view.
 *
 * Arithmetic (pinned: the README's tables are printed from it): a row's log-probabilities are
 * log_softmax in float with the log-sum-exp summed in double (eval_log_softmax); NLL = −log p
 * of the target; KLD = Σ_j exp(r_j) (r_j − s_j) over the reference's and the scheme's
 * log-probabilities r, s (products in float, summed in double); top-1: the same argmax;
 * quantiles: the order statistic at floor(q · (rows − 1)) of the sorted row KLDs. */
#ifndef TQ_ENGINE_EVAL_H
#define TQ_ENGINE_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

/* Rows per scored piece: the schemes' default compression batch. */
#define EVAL_PIECE 64

typedef enum eval_view {
    EVAL_COMPRESSED = 0, /* MODEL_ROWS_BATCH */
    EVAL_AS_DECODE = 1,  /* MODEL_ROWS_AS_DECODE */
    EVAL_PROMPT = 2,     /* MODEL_ROWS_AFTER_PROMPT for the first piece, then AS_DECODE */
} eval_view;

/* One forward call of a window's scored part: tokens [pos, pos + n_run), rows
 * [pos, pos + n_score) scored (the window's last position runs, unscored). */
typedef struct eval_piece {
    int pos, n_run, n_score;
    model_rows_mode mode;
} eval_piece;

/* Tokens of text[0..len) as llama-perplexity reads a file (doc/gemma3.md §8): one trailing '\n'
 * removed, tokenized once with BOS where the vocabulary adds it (the model's own). Returns a malloc'd array of
 * *n_out tokens, or NULL (no usable vocabulary, out of memory); *bos: the BOS id each window
 * starts with (llama-perplexity: only when the vocabulary adds BOS), or -1. */
int32_t *eval_tokenize(const model *m, const char *text, size_t len, size_t *n_out, int32_t *bos);
/* Sets a scheme's prefill_raw for the view: 1 for EVAL_PROMPT, else 0 unless keep_prefill_raw
 * (the scheme's text named prefill_raw itself; never kept for EVAL_AS_DECODE). */
void eval_scheme_for_view(tq_kv_scheme *s, eval_view v, int keep_prefill_raw);
/* The max_batch a context for windows of ctx needs: min(ctx/2, 512), at least min(ctx, 64). */
int eval_context_batch(int ctx);
/* Scored rows per window: ctx − 1 − ctx/2. */
int eval_rows_per_window(int ctx);
/* Windows of ctx in n_tokens tokens. */
long eval_windows(size_t n_tokens, int ctx);
/* Window w of toks into out (ctx tokens), its first token replaced by bos when bos >= 0. */
void eval_window_tokens(const int32_t *toks, long w, int ctx, int32_t bos, int32_t *out);
/* The scored pieces of a window of ctx in view v into out (capacity cap); returns their count
 * (0 when cap is too small). out NULL: returns the count only. */
int eval_plan(int ctx, eval_view v, eval_piece *out, int cap);
/* Empties x's sequence and runs the window's context positions [0, ctx/2) in calls of at most
 * the context's max_batch, without logits. */
model_status eval_prefill(model_context *x, const int32_t *win, int ctx);
/* Runs one piece; logits gets (pc->n_run, n_vocab) rows. */
model_status eval_run_piece(model_context *x, const int32_t *win, const eval_piece *pc, float *logits);

/* log_softmax of row[0..n) into out (see the arithmetic above). */
void eval_log_softmax(const float *row, float *out, int n);

/* Scored rows per block of the batch-means standard error of ΔPPL (eval_summary). */
#define EVAL_SE_BLOCK 128

/* What a scheme scored, summed over rows. */
typedef struct eval_acc {
    double nll, kld;  /* sums over scored rows */
    long top1, rows;
    /* ΔPPL's uncertainty by batch means: d = log p_ref(target) − log p(target) per row, summed
     * over the current block of EVAL_SE_BLOCK rows; the whole blocks' means, their squares */
    double d_block, d_means, d_means2;
    long n_blocks;
    float *kld_rows;  /* (cap) the rows' KLD, for the quantiles */
    long cap;
    double ratio;     /* eval_kv_ratio after the first window; 0 before */
} eval_acc;

/* The head of a log-probability row lp[0..n): the most probable tokens, as few as hold at
 * least `mass` of the probability, in bins of 1/32 of log-probability (the last bin taken
 * whole), and at most cap of them (then the bin that does not fit gives its first tokens
 * up to cap); their ids, ascending, into ids (cap entries); returns the count. Tokens under
 * e^−32 are never in it. */
int eval_head(const float *lp, int n, double mass, int cap, int32_t *ids);
/* KL(p ‖ q) of a row from its head (eval_head) alone: p = e^ref, q's logits z[i] at the head's
 * tokens ids[i] (i < k), the rest of q's logits taken to move as the head's p-mean
 * (a tail without a shape of its own): log(Σ_head p e^(δ − μ) + p_tail), δ = z − ref, μ the
 * head's p-mean of δ, summed in double from expm1f terms. eval_score_row's KLD when the head
 * is the whole row, up to float rounding; short of it by the tail's own part otherwise. */
double eval_kld_head(const float *ref, const int32_t *ids, int k, const float *z);

/* Returns 0 on success, -1 out of memory; cap: the rows the run will score. */
int eval_acc_init(eval_acc *a, long cap);
void eval_acc_free(eval_acc *a);
/* Scores one row: ref and mine are log-probability rows (mine == ref for the reference run:
 * KLD 0, top-1 agreed); target the next token. A row past cap is summed, not kept. */
void eval_score_row(eval_acc *a, const float *ref, const float *mine, int n_vocab, int32_t target);

typedef struct eval_summary {
    long rows;
    double ppl, kld_mean, kld_median, kld_p99, top1; /* top1 as a fraction */
    /* ΔPPL against the reference rows in percent, 100 (PPL / PPL_ref − 1) (the same rows,
     * paired), and its standard error by batch means: the spread of the mean of d over blocks
     * of EVAL_SE_BLOCK consecutive rows (neighbouring positions are not independent), / √blocks,
     * through exp; −1 with fewer than 2 whole blocks. */
    double dppl_pct, dppl_pct_se;
} eval_summary;

/* Returns 0, or -1 out of memory (the quantiles need a sorted copy). */
int eval_summarize(const eval_acc *a, eval_summary *out);

/* f16 bytes / data bytes of x's cache now (tq_kv_cache_memory); for the decode views (as the
 * scored half's decode steps hold it, on average over a window of ctx) with each layer's
 * newest len − compressed length tokens fp16 (the two-phase rule). 0 when unknown. */
double eval_kv_ratio(const model_context *x, eval_view v, int ctx);
/* Bytes one token takes in x's cache once compressed, over layers and K/V heads; 0 if unknown. */
size_t eval_kv_bytes_per_token(const model_context *x);
/* Bytes of K and V the attention of one decode query reads at sequence length len (its own
 * token included): per layer the positions it sees (the window on sliding-window layers), the
 * newest len − compressed length of them at fp16 (the two-phase rule), the rest at the layer's
 * compressed bytes. 0 if unknown or len < 1. (tq bench: bytes read per decode token.) */
size_t eval_kv_read_bytes(const model_context *x, int len);
/* Bytes x's scheme needs for a sequence of len positions whose first n_prompt are a prompt
 * prefilled raw (prefill_raw = 1): *steady = the most it holds while decoding up to len (per
 * layer the positions it keeps — the window plus TQ_KV_WINDOW_SLACK on sliding-window layers —
 * at the layer's compressed bytes, the raw tail of the two-phase rule at fp16), *prefill = what
 * the raw prompt holds before the first decode step compresses it (fp16; 0 with prefill_raw = 0,
 * which compresses as the prompt runs). The K/V data; the cache's page rounding is on top. 0 in
 * both when unknown. (tq serve's admission.) */
void eval_kv_need_bytes(const model_context *x, int n_prompt, int len, size_t *steady, size_t *prefill);

#endif

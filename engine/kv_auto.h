/* Per-layer KV bit allocation from a short calibration: `--kv auto:B` (doc/kv-auto.md).
 *
 * auto:B[:options] gives every layer's keys and values their own width — TurboQuant at 2, 2.5,
 * 3, 3.5, 4, 5, 6 or 8 bits, or fp16 — so that the model's predicted KL divergence against the
 * fp16 cache is least while the cache takes no more bytes per token than the fixed scheme
 * turboB[:options] (Σ over layers of tq_kv_layer_scheme_bytes). The options apply to every
 * layer.
 *
 * Calibration (kv_auto_calibrate): the tokens run once with the fp16 cache (the reference
 * log-probabilities of the second half of the positions), then once per layer and side with
 * only that layer's keys (or values) compressed at the probe width (turbo3, every key
 * compressed: prefill_raw = 0): its KLD against the reference is that layer-side's
 * sensitivity a. The KLD at another width b is predicted as a · g(b), g the ratio of the
 * codec's mean squared error at b to the one at the probe width (measured on Gaussian
 * vectors, no model run), or, with KV_AUTO_MEASURED_CURVE, of whole-model runs (every layer's
 * keys, or values, at b). The allocation (kv_auto_allocate) is a multiple-choice knapsack
 * solved greedily on each item's convex hull. A last run measures the chosen allocation's KLD
 * on the calibration tokens (and one the uniform turboB's) to print beside the prediction.
 *
 * Errors are model_status codes with a message in the caller's buffer; nothing is printed. */
#ifndef TQ_ENGINE_KV_AUTO_H
#define TQ_ENGINE_KV_AUTO_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* The widths an item may take, ascending; the last (16) is fp16. */
#define KV_AUTO_N_OPT 9
extern const float kv_auto_widths[KV_AUTO_N_OPT];
/* The probe width of the sensitivity runs. */
#define KV_AUTO_PROBE_BITS 3.0f
/* Default calibration tokens, and the fewest a user's prompt must have to be used. */
#define KV_AUTO_DEFAULT_TOKENS 128
#define KV_AUTO_MIN_TOKENS 64

/* kv_auto_calibrate flags. */
#define KV_AUTO_MEASURED_CURVE 1 /* g(b) from whole-model runs instead of the codec's MSE */
#define KV_AUTO_NO_CHECK 2       /* skip the two closing runs (measured KLD of the choice and
                                    of turboB); measured_kld, uniform_kld stay -1 */
#define KV_AUTO_NO_REPLAY 4      /* compute every layer of every probe run (the probes take the
                                    layers below the probed one from the reference run's record
                                    otherwise, context_replay_record: the same results) */
#define KV_AUTO_FULL_LOGITS 8    /* the probes score every row on the whole vocabulary (on
                                    each row's head otherwise: KV_AUTO_HEAD_MASS) */
/* A probe's KLD is taken on the reference's most probable tokens holding this much of each
 * row's probability, at most KV_AUTO_HEAD_CAP of them (eval_head, eval_kld_head). */
#define KV_AUTO_HEAD_MASS 0.999
#define KV_AUTO_HEAD_CAP 16384

typedef struct kv_auto_result {
    int n_layer;
    float bits;                        /* B */
    tq_kv_layer_scheme *layer_schemes; /* (n_layer): for context_set_kv_layer_schemes */
    unsigned char (*choice)[2];        /* (n_layer) option index of K [0] and V [1] */
    double (*sens)[2];                 /* (n_layer) KLD with only that side at the probe */
    double curve[2][KV_AUTO_N_OPT];    /* g(b) of K and V, 1 at the probe width, 0 at fp16 */
    double key_split_gain;             /* whole-model KLD of the probe's keys without the key
                                          split over with it (1: no split); the key curve's
                                          other widths carry it */
    double predicted_kld;              /* Σ a · g(b) of the choice */
    double measured_kld, uniform_kld;  /* on the calibration tokens; -1 when not measured */
    int kept_uniform;                  /* 1: the allocation measured above uniform turboB on the
                                          calibration tokens, so choice and layer_schemes are
                                          turboB's (measured_kld then its KLD) */
    double allocated_kld;              /* kept_uniform: what the allocation measured; else -1 */
    int global_floor;                  /* 1: the global layers of a model with sliding-window
                                          layers kept at least B (the calibration was no longer
                                          than the window; doc/kv-auto.md, "Global layers") */
    size_t bytes_per_token, budget_bytes, f16_bytes; /* over layers and K/V heads */
    int n_tokens, n_rows, runs;        /* calibration tokens, scored rows, forward runs */
    double seconds;
} kv_auto_result;

/* Parses "auto:B[:options]". Returns 0 when text is not an auto form (does not start with
 * "auto"), 1 with *bits = B and *base = turboB[:options] parsed (tq_kv_scheme_parse), or -1
 * with a message in err (B missing, not a number, outside [2, 8], or options the library
 * refuses). */
int kv_auto_parse(const char *text, float *bits, tq_kv_scheme *base, char *err, size_t err_cap);

/* The layer scheme for key option ko and value option vo (indices into kv_auto_widths), the
 * other fields from base's layer scheme. */
void kv_auto_layer_scheme(const tq_kv_scheme *base, int ko, int vo, tq_kv_layer_scheme *out);

/* 1 if option o may be chosen at B = bits for a layer (layer_is_swa: a sliding-window layer):
 * at B <= 4 a layer that attends the whole context gets only the widths with integer attention
 * kernels, 2 to 4 bits (5, 6, 8 bits and fp16 decode 2.4-5x slower there); a sliding-window
 * layer attends a bounded window, any width; at B > 4 every option. 0 for o out of range. */
int kv_auto_option_allowed(float bits, int o, int layer_is_swa);

/* The allocation: n items (a layer's K or V), option o of item i costing bytes[i * KV_AUTO_N_OPT
 * + o] (ascending in o) with predicted KLD kld[i * KV_AUTO_N_OPT + o]; choice[i] gets the
 * option. Starts every item at option 0, or lowest[i] when lowest is not NULL (or at the 8-bit
 * option when all of them fit at it)
 * and spends the budget greedily on the best KLD decrease per byte along each item's lower
 * convex hull, taking the uniform option `uniform` (−1: none) instead when it predicts less.
 * Returns 0, or -1 when even the lowest options exceed the budget (or bad arguments). The
 * total bytes never exceed budget. */
int kv_auto_allocate(int n, const size_t *bytes, const double *kld, size_t budget, int uniform,
                     const unsigned char *lowest,
                     unsigned char *choice);

/* Calibrates on tokens[0, n) (n >= KV_AUTO_MIN_TOKENS; the first multiple of 64 at most n
 * is used) with base (kv_auto_parse) at B = bits and fills *out (free with
 * kv_auto_result_free). pool: borrowed, NULL = this thread. Errors: MODEL_ERR_ARG (NULL, n
 * too small, bits outside [2, 8]), MODEL_ERR_KV_SCHEME (a width does not fit the model),
 * MODEL_ERR_NOMEM, and the forward pass's. */
model_status kv_auto_calibrate(const model *m, tq_threadpool *pool, const int32_t *tokens, int n,
                               const tq_kv_scheme *base, float bits, int flags, kv_auto_result *out,
                               char *err, size_t err_cap);
/* The same reusing prior's sensitivities and curves (a calibration of the same model, tokens,
 * flags and options at another B): only the allocation and the two closing runs (and their
 * reference) are done. prior NULL: kv_auto_calibrate. */
model_status kv_auto_calibrate_from(const model *m, tq_threadpool *pool, const int32_t *tokens, int n,
                                    const tq_kv_scheme *base, float bits, int flags, const kv_auto_result *prior,
                                    kv_auto_result *out, char *err, size_t err_cap);
void kv_auto_result_free(kv_auto_result *r); /* NULL or zeroed is fine */

/* Short name of option o: "2", "2.5", … "8", "f16". */
const char *kv_auto_option_name(int o);

/* The built-in calibration text (original plain English prose, ~400 words). */
const char *kv_auto_default_text(void);

#endif

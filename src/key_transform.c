/*
 * The key transform (doc/kvcache.md §2): per KV head, the key mean, the per-channel key scale
 * fitted from key and query energies, and the key split's channel order; keys to stored
 * coordinates and back, queries to the stored keys' basis, the state a cache file keeps. The
 * KV cache, attention and cache files use it through src/key_transform.h; engines that keep
 * their own pages use it through the public calls at the end of this file.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "key_transform.h"

struct tq_key_transform {
    int n_heads, dim;
    int block, block_bits; /* key split: channels of the first block and its bits; 0: none */
    int pairs;             /* TQ_ROPE_PAIRS_*: the channel pairs a rotary embedding turns, whose
                              statistics the fit moves halfway together (0: channels alone) */
    float *mean;           /* (n_heads, dim) with a mean, else NULL */
    int mean_set;
    float *scale;   /* (n_heads, dim) s with a scale, else NULL: keys stored as s ⊙ (k − mean),
                       queries scored as q / s */
    double *q_sq;   /* (n_heads, dim) Σ q² over the observed query rows of each KV head's group
                       (with a scale; frozen once scale_set) */
    double q_rows;  /* query rows observed per KV head */
    uint16_t *perm; /* (n_heads, dim) with a split: stored coordinate j of head h holds channel
                       perm[h·dim + j] (the identity until scale_set); else NULL */
    int scale_set;
    /* A mean that turns with RoPE (tq_key_transform_create's freqs; doc/kvcache.md §2, "Key
     * mean"): the n_turn pairs turn[k] (pair index) whose angle per position freq[k] is at
     * most TQ_KEY_MEAN_TURN_MAX radians per TQ_KEY_MEAN_BLOCK positions hold, in `mean`, the
     * pre-RoPE mean μ; the key at position p is stored less R_c μ, c the centre of p's block
     * of TQ_KEY_MEAN_BLOCK positions. n_turn 0: a fixed mean. */
    int n_turn;
    uint16_t *turn;
    double *freq;
    float *step; /* (2 n_turn): cos, then sin of freq[k] · TQ_KEY_MEAN_BLOCK (one block on) */
    float *freqs_in; /* (dim / 2) the freqs given, for create_like and cache files; else NULL */
    /* Fast pairs (turning more than TQ_KEY_MEAN_TURN_MAX per block) whose pre-RoPE mean is
     * subtracted at each key's own angle: the n_fast ≤ TQ_KEY_MEAN_FAST of most mean energy,
     * chosen when the mean is fitted (doc/kvcache.md §2, "Fast pairs"). `mean` holds their
     * pre-RoPE μ. Attention adds their ⟨q, R_p μ⟩ per key from ftab. */
    int n_fast;
    uint16_t fast[TQ_KEY_MEAN_FAST];
    double ffreq[TQ_KEY_MEAN_FAST];
    float fstep[2 * TQ_KEY_MEAN_FAST]; /* cos, then sin of ffreq · TQ_KEY_MEAN_BLOCK */
    float ftab[TQ_KEY_MEAN_FAST * 2 * TQ_KEY_MEAN_BLOCK]; /* pair k: cos(ffreq i), then sin, i < BLOCK */
};

static size_t nm_of(const tq_key_transform *kt) { return (size_t)kt->n_heads * (size_t)kt->dim; }

void tq_key_transform_free(tq_key_transform *kt) {
    if (!kt) return;
    free(kt->mean);
    free(kt->scale);
    free(kt->q_sq);
    free(kt->perm);
    free(kt->turn);
    free(kt->freq);
    free(kt->step);
    free(kt->freqs_in);
    free(kt);
}

/* Channels of RoPE pair j (pairs: TQ_ROPE_PAIRS_ADJACENT or _HALVES). */
static inline void pair_channels(int pairs, int dim, int j, int *i0, int *i1) {
    *i0 = pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * j : j;
    *i1 = pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * j + 1 : j + dim / 2;
}

int tq_key_transform_rope_freqs_ok(const float *freqs, int dim, int pairs) {
    if (!freqs) return 1;
    if (pairs == TQ_ROPE_PAIRS_NONE || dim % 2) return 0;
    for (int j = 0; j < dim / 2; j++)
        if (!(freqs[j] >= 0.0f && freqs[j] <= 1e6f)) return 0; /* NaN too */
    return 1;
}

tq_status tq_key_transform_create(tq_key_transform **out, int n_heads, int dim, int mean,
                                  int scale, int block, int block_bits, int pairs,
                                  const float *freqs) {
    *out = NULL;
    if (n_heads < 1 || n_heads > 1024 || dim < TQ_MIN_DIM || dim > TQ_MAX_DIM ||
        (block && (!scale || block < 1 || block >= dim || block_bits < 1 || block_bits > 8)) ||
        !tq_rope_pairs_valid(pairs, dim) || !tq_key_transform_rope_freqs_ok(freqs, dim, pairs))
        return TQ_ERR_INVALID;
    tq_key_transform *kt = calloc(1, sizeof *kt);
    if (!kt) return TQ_ERR_NOMEM;
    kt->n_heads = n_heads;
    kt->dim = dim;
    kt->block = block;
    kt->block_bits = block ? block_bits : 0;
    kt->pairs = pairs;
    size_t nm = nm_of(kt);
    int ok = 1;
    if (mean) ok &= (kt->mean = calloc(nm, sizeof(float))) != NULL;
    if (scale) {
        ok &= (kt->scale = malloc(nm * sizeof(float))) != NULL;
        ok &= (kt->q_sq = malloc(nm * sizeof(double))) != NULL;
        if (block) ok &= (kt->perm = malloc(nm * sizeof(uint16_t))) != NULL;
    }
    if (mean && freqs && ok) {
        int n = 0, half = dim / 2;
        for (int j = 0; j < half; j++)
            n += freqs[j] > 0.0f && (double)freqs[j] * TQ_KEY_MEAN_BLOCK <= TQ_KEY_MEAN_TURN_MAX;
        ok &= (kt->freqs_in = malloc((size_t)half * sizeof(float))) != NULL;
        if (ok) memcpy(kt->freqs_in, freqs, (size_t)half * sizeof(float));
        if (n && ok) {
            ok &= (kt->turn = malloc((size_t)n * sizeof(uint16_t))) != NULL;
            ok &= (kt->freq = malloc((size_t)n * sizeof(double))) != NULL;
            ok &= (kt->step = malloc((size_t)n * 2 * sizeof(float))) != NULL;
        }
        for (int j = 0; ok && j < half; j++)
            if (freqs[j] > 0.0f && (double)freqs[j] * TQ_KEY_MEAN_BLOCK <= TQ_KEY_MEAN_TURN_MAX) {
                kt->step[kt->n_turn] = (float)cos((double)freqs[j] * TQ_KEY_MEAN_BLOCK);
                kt->step[n + kt->n_turn] = (float)sin((double)freqs[j] * TQ_KEY_MEAN_BLOCK);
                kt->turn[kt->n_turn] = (uint16_t)j;
                kt->freq[kt->n_turn] = freqs[j];
                kt->n_turn++;
            }
    }
    if (!ok) {
        tq_key_transform_free(kt);
        return TQ_ERR_NOMEM;
    }
    tq_key_transform_reset(kt);
    *out = kt;
    return TQ_OK;
}

tq_status tq_key_transform_create_like(tq_key_transform **out, const tq_key_transform *like) {
    return tq_key_transform_create(out, like->n_heads, like->dim, like->mean != NULL,
                                   like->scale != NULL, like->block, like->block_bits, like->pairs,
                                   like->freqs_in);
}

void tq_key_transform_reset(tq_key_transform *kt) {
    kt->mean_set = 0;
    kt->n_fast = 0;
    if (!kt->scale) return;
    size_t nm = nm_of(kt);
    kt->scale_set = 0;
    kt->q_rows = 0.0;
    memset(kt->q_sq, 0, nm * sizeof(double));
    for (size_t j = 0; j < nm; j++) kt->scale[j] = 1.0f;
    if (kt->perm)
        for (size_t j = 0; j < nm; j++) kt->perm[j] = (uint16_t)(j % (size_t)kt->dim);
}

int tq_key_transform_has_mean(const tq_key_transform *kt) { return kt && kt->mean; }
int tq_key_transform_has_scale(const tq_key_transform *kt) { return kt && kt->scale; }
int tq_key_transform_mean_set(const tq_key_transform *kt) { return kt && kt->mean_set; }
int tq_key_transform_scale_set(const tq_key_transform *kt) { return kt && kt->scale_set; }

const float *tq_key_transform_mean(const tq_key_transform *kt) {
    return kt && kt->mean && kt->mean_set ? kt->mean : NULL;
}

tq_status tq_key_transform_get_scale(const tq_key_transform *kt, float *out, size_t capacity) {
    if (!kt || !kt->scale) return TQ_ERR_INVALID;
    if (!kt->scale_set) return TQ_ERR_STATE;
    if (capacity < nm_of(kt)) return TQ_ERR_CAPACITY;
    memcpy(out, kt->scale, nm_of(kt) * sizeof(float));
    return TQ_OK;
}

void tq_key_transform_memory(const tq_key_transform *kt, size_t *data, size_t *allocated) {
    *data = *allocated = 0;
    if (!kt) return;
    size_t nm = nm_of(kt);
    *allocated = sizeof *kt;
    if (kt->freqs_in) *allocated += (size_t)kt->dim / 2 * sizeof(float);
    *allocated += (size_t)kt->n_turn * (sizeof(uint16_t) + sizeof(double) + 2 * sizeof(float));
    if (kt->mean) *data += nm * sizeof(float), *allocated += nm * sizeof(float);
    if (kt->scale) *data += nm * sizeof(float), *allocated += nm * (sizeof(float) + sizeof(double));
    if (kt->perm) *data += nm * sizeof(uint16_t), *allocated += nm * sizeof(uint16_t);
}

/* ---- fitting ---- */

int tq_key_transform_observing(const tq_key_transform *kt) {
    return kt && kt->scale && !kt->scale_set;
}

tq_status tq_key_transform_observe(tq_key_transform *kt, const float *q, int n_q_heads, size_t n) {
    if (!tq_key_transform_observing(kt) || n == 0) return TQ_OK;
    int dk = kt->dim, G = n_q_heads / kt->n_heads;
    size_t total = n * (size_t)n_q_heads * (size_t)dk;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(q[i])) return TQ_ERR_NONFINITE;
    for (size_t t = 0; t < n; t++)
        for (int qh = 0; qh < n_q_heads; qh++) {
            const float *x = q + (t * (size_t)n_q_heads + (size_t)qh) * (size_t)dk;
            double *acc = kt->q_sq + (size_t)(qh / G) * (size_t)dk;
            for (int i = 0; i < dk; i++) acc[i] += (double)x[i] * x[i];
        }
    kt->q_rows += (double)n * G;
    return TQ_OK;
}

void tq_key_transform_copy(tq_key_transform *dst, const tq_key_transform *src) {
    if (!dst || !src || nm_of(dst) != nm_of(src) || !dst->mean != !src->mean ||
        !dst->scale != !src->scale || !dst->perm != !src->perm || dst->n_turn != src->n_turn ||
        (dst->n_turn && memcmp(dst->freq, src->freq, (size_t)dst->n_turn * sizeof(double))))
        return;
    size_t nm = nm_of(src);
    if (src->mean) memcpy(dst->mean, src->mean, nm * sizeof(float));
    if (src->scale) {
        memcpy(dst->scale, src->scale, nm * sizeof(float));
        memcpy(dst->q_sq, src->q_sq, nm * sizeof(double));
    }
    if (src->perm) memcpy(dst->perm, src->perm, nm * sizeof(uint16_t));
    dst->block = src->block;
    dst->block_bits = src->block_bits;
    dst->mean_set = src->mean_set;
    dst->n_fast = src->n_fast;
    memcpy(dst->fast, src->fast, sizeof src->fast);
    memcpy(dst->ffreq, src->ffreq, sizeof src->ffreq);
    memcpy(dst->fstep, src->fstep, sizeof src->fstep);
    memcpy(dst->ftab, src->ftab, sizeof src->ftab);
    dst->q_rows = src->q_rows;
    dst->scale_set = src->scale_set;
}

void tq_key_transform_copy_statistics(tq_key_transform *dst, const tq_key_transform *src) {
    if (!dst || !src || !dst->q_sq || !src->q_sq || nm_of(dst) != nm_of(src)) return;
    memcpy(dst->q_sq, src->q_sq, nm_of(src) * sizeof(double));
    dst->q_rows = src->q_rows;
}

static void sort_u16(uint16_t *x, int n) {
    for (int i = 1; i < n; i++) {
        uint16_t v = x[i];
        int j = i - 1;
        while (j >= 0 && x[j] > v) x[j + 1] = x[j], j--;
        x[j + 1] = v;
    }
}

/* 1 if pair j turns faster than a block-centred mean allows (a candidate fast pair). */
static int fast_candidate(const tq_key_transform *kt, int j) {
    return kt->freqs_in && kt->freqs_in[j] > 0.0f &&
           !((double)kt->freqs_in[j] * TQ_KEY_MEAN_BLOCK <= TQ_KEY_MEAN_TURN_MAX);
}

/* The most fast pairs a fit takes (tq_key_transform_test_fast_max). */
static int fast_max = TQ_KEY_MEAN_FAST;

void tq_key_transform_test_fast_max(int n) {
    fast_max = n < 0 || n > TQ_KEY_MEAN_FAST ? TQ_KEY_MEAN_FAST : n;
}

int tq_key_transform_fast_ok(const tq_key_transform *kt, int n, const uint16_t *pairs) {
    if (n < 0 || n > TQ_KEY_MEAN_FAST || (n && (!kt->mean || !kt->mean_set))) return 0;
    for (int k = 0; k < n; k++)
        if (pairs[k] >= kt->dim / 2 || !fast_candidate(kt, pairs[k]) || (k && pairs[k] <= pairs[k - 1])) return 0;
    return 1;
}

int tq_key_transform_fast_pairs(const tq_key_transform *kt, uint16_t *pairs) {
    if (!kt) return 0;
    memcpy(pairs, kt->fast, (size_t)kt->n_fast * sizeof(uint16_t));
    return kt->n_fast;
}

void tq_key_transform_set_fast(tq_key_transform *kt, int n, const uint16_t *pairs) {
    kt->n_fast = n;
    for (int k = 0; k < n; k++) {
        double f = kt->freqs_in[pairs[k]];
        kt->fast[k] = pairs[k];
        kt->ffreq[k] = f;
        kt->fstep[k] = (float)cos(f * TQ_KEY_MEAN_BLOCK);
        kt->fstep[TQ_KEY_MEAN_FAST + k] = (float)sin(f * TQ_KEY_MEAN_BLOCK);
        float *tab = kt->ftab + (size_t)k * 2 * TQ_KEY_MEAN_BLOCK;
        for (int i = 0; i < TQ_KEY_MEAN_BLOCK; i++) {
            tab[i] = (float)cos(f * i);
            tab[TQ_KEY_MEAN_BLOCK + i] = (float)sin(f * i);
        }
    }
}

/* The per-head key mean of rows [0, n), summed row by row (each key read once, in order) in
 * double; a turning pair's two channels turned back by the row's angle first (row t at
 * position pos0 + t): the pre-RoPE mean. Fast pairs: both sums are kept, and the
 * TQ_KEY_MEAN_FAST whose pre-RoPE mean removes the most energy beyond the fixed mean's
 * (Σ over heads of |μ̃|² − |μ|²) keep their pre-RoPE mean; the others the fixed mean. */
static void fit_mean(tq_key_transform *kt, size_t n, tq_key_rows_fn row, const void *ctx, size_t pos0) {
    int dk = kt->dim, H = kt->n_heads, half = dk / 2;
    double acc[TQ_MAX_DIM], gain[TQ_MAX_DIM / 2] = {0};
    float k[TQ_MAX_DIM];
    float *alt = NULL; /* (H, dim): fast pairs' pre-RoPE means */
    int any_fast = 0;
    double energy = 0.0; /* Σ |k|² over the rows and heads */
    for (int j = 0; j < half && kt->freqs_in; j++) any_fast |= fast_candidate(kt, j);
    if (any_fast) alt = malloc((size_t)H * (size_t)dk * sizeof(float));
    for (int h = 0; h < H; h++) {
        float *m = kt->mean + (size_t)h * (size_t)dk;
        double accf[TQ_MAX_DIM];
        for (int i = 0; i < dk; i++) acc[i] = accf[i] = 0.0;
        for (size_t t = 0; t < n; t++) {
            row(ctx, t, h, k);
            double x[TQ_MAX_DIM];
            for (int i = 0; i < dk; i++) x[i] = k[i];
            for (int j = 0; j < kt->n_turn; j++) {
                int i0, i1;
                pair_channels(kt->pairs, dk, kt->turn[j], &i0, &i1);
                double a = kt->freq[j] * (double)(pos0 + t), cs = cos(a), sn = sin(a);
                x[i0] = k[i0] * cs + k[i1] * sn;
                x[i1] = -(double)k[i0] * sn + k[i1] * cs;
            }
            for (int j = 0; alt && j < half; j++) {
                if (!fast_candidate(kt, j)) continue;
                int i0, i1;
                pair_channels(kt->pairs, dk, j, &i0, &i1);
                double a = (double)kt->freqs_in[j] * (double)(pos0 + t), cs = cos(a), sn = sin(a);
                accf[i0] += k[i0] * cs + k[i1] * sn;
                accf[i1] += -(double)k[i0] * sn + k[i1] * cs;
            }
            for (int i = 0; i < dk; i++) acc[i] += x[i], energy += (double)k[i] * k[i];
        }
        for (int i = 0; i < dk; i++) m[i] = n ? (float)(acc[i] / (double)n) : 0.0f;
        for (int j = 0; alt && j < half; j++) {
            if (!fast_candidate(kt, j)) continue;
            int i0, i1;
            pair_channels(kt->pairs, dk, j, &i0, &i1);
            float *a = alt + (size_t)h * (size_t)dk;
            a[i0] = n ? (float)(accf[i0] / (double)n) : 0.0f;
            a[i1] = n ? (float)(accf[i1] / (double)n) : 0.0f;
            gain[j] += (double)a[i0] * a[i0] + (double)a[i1] * a[i1] - (double)m[i0] * m[i0] - (double)m[i1] * m[i1];
        }
    }
    /* The fast pairs: most gain first, ties by pair; kept in pair order. */
    uint16_t sel[TQ_KEY_MEAN_FAST];
    int nf = 0;
    const double tau = TQ_KEY_MEAN_FAST_GAIN * (n ? energy / (double)n : 0.0);
    while (alt && nf < fast_max) {
        int best = -1;
        for (int j = 0; j < half; j++) {
            int taken = 0;
            for (int q = 0; q < nf; q++) taken |= sel[q] == j;
            if (fast_candidate(kt, j) && !taken && gain[j] > tau && (best < 0 || gain[j] > gain[best])) best = j;
        }
        if (best < 0) break;
        sel[nf++] = (uint16_t)best;
    }
    sort_u16(sel, nf);
    for (int f = 0; f < nf; f++)
        for (int h = 0; h < H; h++) {
            int i0, i1;
            pair_channels(kt->pairs, dk, sel[f], &i0, &i1);
            kt->mean[(size_t)h * (size_t)dk + (size_t)i0] = alt[(size_t)h * (size_t)dk + (size_t)i0];
            kt->mean[(size_t)h * (size_t)dk + (size_t)i1] = alt[(size_t)h * (size_t)dk + (size_t)i1];
        }
    tq_key_transform_set_fast(kt, nf, sel);
    free(alt);
    kt->mean_set = 1;
}

/* Rows at which the key scale's exponent reaches half its full value: with few keys the
 * channel energies are noisy and the scale shrinks towards 1 (doc/kvcache.md §2). */
#define KEY_SCALE_HALF_TOKENS 32.0
/* Added to each channel's normalized energy so that a near-silent channel gets a bounded
 * scale. */
#define KEY_SCALE_FLOOR 0.01
/* With RoPE pairs, how far each channel's key and query energies move to their pair's mean
 * before the fit: 1 makes the scale commute with the rotation (right far from the fitted
 * positions), 0 keeps the per-channel split (right near them); 0.5 measured better than
 * either in every view on both real models (doc/kvcache.md §2, "RoPE pairs"). */
#define KEY_SCALE_PAIR_POOL 0.5

/* The key split of head h: channels ranked by an_i·bn_i (the scale's normalized, floored
 * energies a_i + ε, b_i + ε; a_i = 1 without observed queries; b the raw key energies), the
 * first `block` of them form the first block (the one with more bits), each block in channel
 * order; then the scale of each block is multiplied by a constant so that the mean scaled key
 * energy Σ s_i² b_i / n of the two blocks is equal (the codec's one norm then suits both) and
 * the scale keeps geometric mean 1. A constant per block leaves the score error
 * Σ s²b · Σ a/s² of each block as it was: only the bits move. */
static void split_channels(tq_key_transform *kt, int h, const double *an, const double *bn,
                           const double *b, float *s) {
    int dk = kt->dim;
    uint16_t *perm = kt->perm + (size_t)h * (size_t)dk;
    double w[TQ_MAX_DIM];
    for (int i = 0; i < dk; i++) w[i] = an[i] * bn[i];
    /* Rank by weight, ties by channel (insertion sort: dk ≤ 1024, once per head). */
    for (int i = 0; i < dk; i++) perm[i] = (uint16_t)i;
    for (int i = 1; i < dk; i++) {
        uint16_t v = perm[i];
        int j = i - 1;
        while (j >= 0 && (w[perm[j]] < w[v] || (w[perm[j]] == w[v] && perm[j] > v))) {
            perm[j + 1] = perm[j];
            j--;
        }
        perm[j + 1] = v;
    }
    int nb = kt->block;
    sort_u16(perm, nb);
    sort_u16(perm + nb, dk - nb);
    double e_all = 0.0, e_blk[2] = {0.0, 0.0};
    for (int j = 0; j < dk; j++) {
        double e = (double)s[perm[j]] * s[perm[j]] * b[perm[j]];
        e_all += e;
        e_blk[j >= nb] += e;
    }
    if (!(e_blk[0] > 0.0 && e_blk[1] > 0.0 && isfinite(e_all))) return;
    /* Block factors f ∝ √(mean energy / block energy), geometric mean 1 over the channels. */
    double l0 = 0.5 * log(e_all / dk / (e_blk[0] / nb)), l1 = 0.5 * log(e_all / dk / (e_blk[1] / (dk - nb)));
    double lm = (nb * l0 + (dk - nb) * l1) / dk;
    double f0 = exp(l0 - lm), f1 = exp(l1 - lm);
    for (int j = 0; j < dk; j++) s[perm[j]] = (float)(s[perm[j]] * (j < nb ? f0 : f1));
}

/* The per-channel key scale from rows [0, n) (less the mean) and the observed queries: with
 * a_i, b_i the query and key energies of channel i normalized to mean 1,
 * s_i ∝ ((a_i + ε) / (b_i + ε))^p with p = n / (4 (n + 32)), geometric mean 1. p = 1/4
 * minimizes the score error Σ_i a_i/s_i² · Σ_i s_i² b_i (the rotation spreads the error of
 * s ⊙ k evenly over channels). Without observed queries a_i = 1. */
static void fit_scale(tq_key_transform *kt, size_t n, tq_key_rows_fn row, const void *ctx, size_t pos0) {
    int dk = kt->dim, H = kt->n_heads;
    double p = 0.25 * (double)n / ((double)n + KEY_SCALE_HALF_TOKENS);
    double b[TQ_MAX_DIM], lg[TQ_MAX_DIM], an[TQ_MAX_DIM], bn[TQ_MAX_DIM];
    float k[TQ_MAX_DIM];
    int with_q = kt->q_rows > 0;
    for (int h = 0; h < H; h++) {
        const float *m = kt->mean ? kt->mean + (size_t)h * (size_t)dk : NULL;
        const double *a = kt->q_sq + (size_t)h * (size_t)dk;
        float *s = kt->scale + (size_t)h * (size_t)dk;
        double sa = 0.0, sb = 0.0;
        for (int i = 0; i < dk; i++) b[i] = 0.0;
        float mp[TQ_MAX_DIM];
        for (size_t t = 0; t < n; t++) {
            row(ctx, t, h, k);
            const float *mt = m && (kt->n_turn || kt->n_fast) ? tq_key_transform_mean_at(kt, h, pos0 + t, mp) : m;
            for (int i = 0; i < dk; i++) {
                double x = (double)k[i] - (mt ? (double)mt[i] : 0.0);
                b[i] += x * x;
            }
        }
        /* A rotary embedding turns each pair's two channels into each other as the position
         * grows: the pair's pooled energy holds at every position, its division between the
         * two channels only near the positions the statistics come from. Each channel's
         * energy moves halfway to its pair's mean (KEY_SCALE_PAIR_POOL; doc/kvcache.md §2). */
        double ap[TQ_MAX_DIM];
        for (int i = 0; i < dk; i++) ap[i] = with_q ? a[i] : 1.0;
        for (int i = 0; kt->pairs && i < dk / 2; i++) {
            int i0 = kt->pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * i : i;
            int i1 = kt->pairs == TQ_ROPE_PAIRS_ADJACENT ? 2 * i + 1 : i + dk / 2;
            const double w = KEY_SCALE_PAIR_POOL, mb = 0.5 * (b[i0] + b[i1]), ma = 0.5 * (ap[i0] + ap[i1]);
            b[i0] += w * (mb - b[i0]);
            b[i1] += w * (mb - b[i1]);
            ap[i0] += w * (ma - ap[i0]);
            ap[i1] += w * (ma - ap[i1]);
        }
        for (int i = 0; i < dk; i++) {
            sa += ap[i];
            sb += b[i];
        }
        int ok = sa > 0.0 && sb > 0.0 && isfinite(sa) && isfinite(sb);
        double mean_lg = 0.0;
        for (int i = 0; ok && i < dk; i++) {
            an[i] = ap[i] * dk / sa + KEY_SCALE_FLOOR;
            bn[i] = b[i] * dk / sb + KEY_SCALE_FLOOR;
            lg[i] = p * log(an[i] / bn[i]);
            mean_lg += lg[i] / dk;
        }
        for (int i = 0; i < dk; i++) s[i] = ok ? (float)exp(lg[i] - mean_lg) : 1.0f;
        if (kt->perm && ok) split_channels(kt, h, an, bn, b, s);
    }
    kt->scale_set = 1;
}

void tq_key_transform_fit_rows(tq_key_transform *kt, size_t n_mean, size_t n_scale,
                               tq_key_rows_fn row, const void *ctx, size_t pos0) {
    if (kt->mean && !kt->mean_set) fit_mean(kt, n_mean, row, ctx, pos0);
    if (kt->scale && !kt->scale_set) fit_scale(kt, n_scale, row, ctx, pos0);
}

/* ---- a mean that turns with RoPE ---- */

int tq_key_transform_n_turn(const tq_key_transform *kt) { return kt ? kt->n_turn : 0; }
int tq_key_transform_n_fast(const tq_key_transform *kt) { return kt ? kt->n_fast : 0; }
const float *tq_key_transform_fast_table(const tq_key_transform *kt) { return kt->ftab; }

void tq_key_transform_block_cs(const tq_key_transform *kt, size_t block, float *cs) {
    const double c = (double)block * TQ_KEY_MEAN_BLOCK + TQ_KEY_MEAN_BLOCK / 2;
    const int n = kt->n_turn, nf = kt->n_fast;
    for (int j = 0; j < n; j++) {
        double a = kt->freq[j] * c;
        cs[j] = (float)cos(a);
        cs[n + j] = (float)sin(a);
    }
    const double b0 = (double)block * TQ_KEY_MEAN_BLOCK;
    for (int k = 0; k < nf; k++) {
        double a = kt->ffreq[k] * b0;
        cs[2 * n + k] = (float)cos(a);
        cs[2 * n + nf + k] = (float)sin(a);
    }
}

/* c, s (n lanes each) turned by the angles whose cos, sin are dc, ds. */
static void turn_lanes(float *c, float *s, const float *dc, const float *ds, int n) {
    for (int j = 0; j < n; j++) { /* independent lanes: vectorized */
        float c1 = c[j] * dc[j] - s[j] * ds[j], s1 = c[j] * ds[j] + s[j] * dc[j];
        c[j] = c1;
        s[j] = s1;
    }
}

void tq_key_transform_block_cs_next(const tq_key_transform *kt, float *cs) {
    const int n = kt->n_turn, nf = kt->n_fast;
    turn_lanes(cs, cs + n, kt->step, kt->step + n, n);
    turn_lanes(cs + 2 * n, cs + 2 * n + nf, kt->fstep, kt->fstep + TQ_KEY_MEAN_FAST, nf);
}

const float *tq_key_transform_mean_at(const tq_key_transform *kt, int h, size_t pos, float *buf) {
    if (!kt || !kt->mean) return NULL;
    const float *mu = kt->mean + (size_t)h * (size_t)kt->dim;
    if (!kt->n_turn && !kt->n_fast) return mu;
    const double cc = (double)(pos / TQ_KEY_MEAN_BLOCK) * TQ_KEY_MEAN_BLOCK + TQ_KEY_MEAN_BLOCK / 2;
    memcpy(buf, mu, (size_t)kt->dim * sizeof(float));
    for (int j = 0; j < kt->n_turn + kt->n_fast; j++) {
        int i0, i1, fast = j >= kt->n_turn;
        pair_channels(kt->pairs, kt->dim, fast ? kt->fast[j - kt->n_turn] : kt->turn[j], &i0, &i1);
        double a = fast ? kt->ffreq[j - kt->n_turn] * (double)pos : kt->freq[j] * cc;
        double c = cos(a), s = sin(a);
        buf[i0] = (float)(mu[i0] * c - mu[i1] * s);
        buf[i1] = (float)(mu[i0] * s + mu[i1] * c);
    }
    return buf;
}

float tq_key_transform_rope_terms(const tq_key_transform *kt, int h, const float *q, float *ab) {
    if (!kt || !kt->mean) return 0.0f;
    const float *mu = kt->mean + (size_t)h * (size_t)kt->dim;
    uint8_t turned[TQ_MAX_DIM] = {0};
    const int n = kt->n_turn, nf = kt->n_fast;
    for (int j = 0; j < n + nf; j++) {
        int i0, i1, fast = j >= n;
        pair_channels(kt->pairs, kt->dim, fast ? kt->fast[j - n] : kt->turn[j], &i0, &i1);
        turned[i0] = turned[i1] = 1;
        /* ⟨(q0, q1), R_a (m0, m1)⟩ = cos a (q0 m0 + q1 m1) + sin a (q1 m0 − q0 m1) */
        float A = (float)((double)q[i0] * mu[i0] + (double)q[i1] * mu[i1]);
        float B = (float)((double)q[i1] * mu[i0] - (double)q[i0] * mu[i1]);
        if (fast) {
            ab[2 * n + (j - n)] = A;
            ab[2 * n + nf + (j - n)] = B;
        } else {
            ab[j] = A;
            ab[n + j] = B;
        }
    }
    double a = 0.0;
    for (int i = 0; i < kt->dim; i++)
        if (!turned[i]) a += (double)q[i] * mu[i];
    return (float)a;
}

/* ---- applying ---- */

/* The channel stored coordinate j of the head whose rows start at hk = h·dim holds. */
static inline int channel(const tq_key_transform *kt, size_t hk, int j) {
    return kt->perm ? (int)kt->perm[hk + (size_t)j] : j;
}

void tq_key_transform_key_row(const tq_key_transform *kt, int h, size_t pos, const float *k, float *out) {
    const size_t hk = (size_t)h * (size_t)kt->dim;
    float mp[TQ_MAX_DIM];
    const float *m = tq_key_transform_mean_at(kt, h, pos, mp);
    /* Stored coordinate i: s ⊙ (k − mean) of channel perm[i] (i without a split). */
    for (int i = 0; i < kt->dim; i++) {
        int ch = channel(kt, hk, i);
        float x = k[ch];
        if (m) x -= m[ch];
        if (kt->scale) x *= kt->scale[hk + (size_t)ch];
        out[i] = x;
    }
}

void tq_key_transform_invert_row(const tq_key_transform *kt, int h, size_t pos, const float *stored,
                                 float *out) {
    const size_t hk = (size_t)h * (size_t)kt->dim;
    float mp[TQ_MAX_DIM];
    const float *m = tq_key_transform_mean_at(kt, h, pos, mp);
    for (int j = 0; j < kt->dim; j++) {
        int ch = channel(kt, hk, j);
        float x = stored[j];
        if (kt->scale) x /= kt->scale[hk + (size_t)ch];
        if (m) x += m[ch];
        out[ch] = x;
    }
}

const float *tq_key_transform_query_row(const tq_key_transform *kt, int h, const float *q,
                                        float *buf) {
    if (!kt || !kt->scale) return q;
    /* ⟨q, k⟩ = ⟨q / s, s ⊙ k⟩: the stored s ⊙ k is scored with q / s, in its channel order. */
    const size_t hk = (size_t)h * (size_t)kt->dim;
    for (int j = 0; j < kt->dim; j++) {
        int ch = channel(kt, hk, j);
        buf[j] = q[ch] / kt->scale[hk + (size_t)ch];
    }
    return buf;
}

float tq_key_transform_offset_row(const tq_key_transform *kt, int h, const float *q) {
    if (!kt || !kt->mean || kt->n_turn || kt->n_fast) return 0.0f;
    const float *m = kt->mean + (size_t)h * (size_t)kt->dim;
    double a = 0.0;
    for (int j = 0; j < kt->dim; j++) a += (double)q[j] * m[j];
    return (float)a;
}

/* ---- the state a cache file keeps ---- */

static void put_f64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(u >> (8 * i));
}
static double get_f64(const uint8_t *p) {
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u |= (uint64_t)p[i] << (8 * i);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

size_t tq_key_transform_state_size(size_t nm, int mean, int scale, int split) {
    return (mean ? 4 * nm : 0) + (scale ? 8 + (split ? 14 : 12) * nm : 0);
}

size_t tq_key_transform_state_bytes(const tq_key_transform *kt) {
    return kt ? tq_key_transform_state_size(nm_of(kt), kt->mean != NULL, kt->scale != NULL,
                                            kt->perm != NULL)
              : 0;
}

void tq_key_transform_write_state(const tq_key_transform *kt,
                                  void (*put)(void *ctx, const void *p, size_t n), void *ctx) {
    if (!kt) return;
    size_t nm = nm_of(kt);
    uint8_t b[8];
    for (size_t j = 0; kt->mean && j < nm; j++) {
        tq_store_f32(b, kt->mean[j]);
        put(ctx, b, 4);
    }
    if (!kt->scale) return;
    put_f64(b, kt->q_rows);
    put(ctx, b, 8);
    for (size_t j = 0; j < nm; j++) {
        put_f64(b, kt->q_sq[j]);
        put(ctx, b, 8);
    }
    for (size_t j = 0; j < nm; j++) {
        tq_store_f32(b, kt->scale[j]);
        put(ctx, b, 4);
    }
    for (size_t j = 0; kt->perm && j < nm; j++) {
        tq_store_u16(b, kt->perm[j]);
        put(ctx, b, 2);
    }
}

/* 1 if the channel order (n_heads rows of dim u16) holds a permutation of [0, dim) per head,
 * and the identity while the scale is not set (as the transform keeps it). */
static int perm_ok(const uint8_t *p, int H, int dk, int scale_set) {
    uint8_t seen[TQ_MAX_DIM];
    for (int h = 0; h < H; h++) {
        memset(seen, 0, sizeof seen);
        for (int j = 0; j < dk; j++) {
            unsigned v = tq_load_u16(p + 2 * ((size_t)h * (size_t)dk + (size_t)j));
            if (v >= (unsigned)dk || seen[v] || (!scale_set && v != (unsigned)j)) return 0;
            seen[v] = 1;
        }
    }
    return 1;
}

tq_status tq_key_transform_read_state(tq_key_transform *kt, const uint8_t *p, int mean_set,
                                      int scale_set) {
    size_t nm = nm_of(kt);
    const uint8_t *sq = p + (kt->mean ? 4 * nm : 0), *pq = sq + 8 + 12 * nm;
    for (size_t j = 0; kt->mean && j < nm; j++)
        if (!isfinite(tq_load_f32(p + 4 * j))) return TQ_ERR_CORRUPT;
    if (kt->scale) {
        /* Statistics are finite and ≥ +0 (a count and sums of squares from 0.0: never −0.0);
         * the scale is finite and > 0 (1 until fixed). */
        double rows = get_f64(sq);
        if (!(isfinite(rows) && !signbit(rows))) return TQ_ERR_CORRUPT;
        for (size_t j = 0; j < nm; j++) {
            double a = get_f64(sq + 8 + 8 * j);
            float sc = tq_load_f32(sq + 8 + 8 * nm + 4 * j);
            if (!(isfinite(a) && !signbit(a)) || !(isfinite(sc) && sc > 0.0f)) return TQ_ERR_CORRUPT;
        }
        if (kt->perm && !perm_ok(pq, kt->n_heads, kt->dim, scale_set)) return TQ_ERR_CORRUPT;
    }
    for (size_t j = 0; kt->mean && j < nm; j++) kt->mean[j] = tq_load_f32(p + 4 * j);
    kt->mean_set = kt->mean ? mean_set : 0;
    if (kt->scale) {
        kt->q_rows = get_f64(sq);
        for (size_t j = 0; j < nm; j++) {
            kt->q_sq[j] = get_f64(sq + 8 + 8 * j);
            kt->scale[j] = tq_load_f32(sq + 8 + 8 * nm + 4 * j);
        }
        for (size_t j = 0; kt->perm && j < nm; j++) kt->perm[j] = tq_load_u16(pq + 2 * j);
        kt->scale_set = scale_set;
    }
    return TQ_OK;
}

int tq_key_split_codec(tq_codec_config *cc) {
    if (cc->variant != TQ_VARIANT_MSE) return 0;
    int k = (int)floor(cc->bits + 1e-9);
    double frac = cc->bits - k;
    tq_codec_config b = *cc;
    b.split = TQ_SPLIT_BLOCK;
    b.block_bits = k + 1;
    if (frac > 1e-6) {
        /* k + f: f·d channels at k + 1, the rest at k. */
        b.block_dim = (int)floor(frac * cc->dim + 0.5);
    } else {
        /* A whole width k: half the channels at k + 1, the other half at k − 1 (both 2 to 4
         * bits, the widths trellis codes cover: k = 3), the norm corrected halfway
         * (doc/kvcache.md §2, "Key split"). */
        if (k != 3 || cc->dim % 2) return 0;
        b.block_dim = cc->dim / 2;
        if (b.norm_correction) b.norm_correction = TQ_NORM_CORRECTION_HALF;
    }
    if (b.block_bits > 4) return 0;
    size_t plain, with;
    if (tq_codec_config_bytes(cc, &plain) || tq_codec_config_bytes(&b, &with) || with > plain) return 0;
    *cc = b;
    return 1;
}

/* ---- the public calls (include/turboquant.h, "keys") ---- */

static void config_defaults(tq_key_transform_config *cfg, int n_heads, int head_dim,
                            float bits) {
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->n_heads = n_heads;
    cfg->head_dim = head_dim;
    cfg->bits = bits;
    cfg->mean = cfg->scale = cfg->split = 1;
}

void tq_key_transform_config_init_sized(tq_key_transform_config *cfg, size_t cfg_size,
                                        int n_heads, int head_dim, float bits) {
    tq_key_transform_config d;
    config_defaults(&d, n_heads, head_dim, bits);
    if (cfg) tq_sized_out(cfg, cfg_size, &d, sizeof d, sizeof d, 1);
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

typedef struct float_rows {
    const float *keys;
    int n_heads, dim;
} float_rows;

static void float_row(const void *ctx, size_t t, int h, float *out) {
    const float_rows *r = ctx;
    memcpy(out, r->keys + (t * (size_t)r->n_heads + (size_t)h) * (size_t)r->dim,
           (size_t)r->dim * sizeof(float));
}

/* n_q_heads is a positive multiple of the transform's heads. */
static int q_heads_ok(int n_heads, int n_q_heads) {
    return n_q_heads >= n_heads && n_q_heads % n_heads == 0;
}

tq_status tq_key_transform_fit(tq_key_transform **out, const tq_key_transform_config *given,
                               const float *keys, size_t n_keys, const float *queries,
                               int n_q_heads, size_t n_queries) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!given || (n_keys && !keys) || (n_queries && !queries)) return TQ_ERR_NULL;
    tq_key_transform_config local;
    const tq_key_transform_config *cfg = &local;
    config_defaults(&local, 0, 0, 0.0f);
    if (tq_sized_in(&local, given, sizeof local, offsetof(tq_key_transform_config, rope_pairs)))
        return TQ_ERR_INVALID;
    int H = cfg->n_heads, d = cfg->head_dim;
    if (d < TQ_MIN_DIM || d > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (H < 1 || H > 1024 || (n_queries && !q_heads_ok(H, n_q_heads))) return TQ_ERR_INVALID;
    int block = 0, block_bits = 0;
    if (cfg->scale && cfg->split) {
        if (!(cfg->bits >= 1.0f && cfg->bits <= 8.0f)) return TQ_ERR_BITS;
        tq_codec_config cc;
        tq_codec_config_init(&cc, d, cfg->bits, TQ_VARIANT_MSE);
        if (tq_key_split_codec(&cc)) block = cc.block_dim, block_bits = cc.block_bits;
    }
    if (!all_finite(keys, n_keys * (size_t)H * (size_t)d)) return TQ_ERR_NONFINITE;
    tq_key_transform *kt;
    tq_status st = tq_key_transform_create(&kt, H, d, cfg->mean != 0, cfg->scale != 0, block,
                                           block_bits, cfg->rope_pairs, NULL);
    if (st) return st;
    st = tq_key_transform_observe(kt, queries, n_q_heads, n_queries);
    if (st) {
        tq_key_transform_free(kt);
        return st;
    }
    float_rows rows = {keys, H, d};
    tq_key_transform_fit_rows(kt, n_keys, n_keys, float_row, &rows, 0);
    *out = kt;
    return TQ_OK;
}

tq_status tq_key_transform_codec_config(const tq_key_transform *kt, tq_codec_config *cfg) {
    if (!kt || !cfg) return TQ_ERR_NULL;
    if (cfg->dim != kt->dim) return TQ_ERR_DIM;
    if (!kt->block) return TQ_OK;
    if (cfg->variant != TQ_VARIANT_MSE) return TQ_ERR_INVALID;
    /* The split's rule at these bits when it gives this block (its norm correction too). */
    tq_codec_config b = *cfg;
    if (tq_key_split_codec(&b) && b.block_dim == kt->block && b.block_bits == kt->block_bits) {
        *cfg = b;
        return TQ_OK;
    }
    cfg->split = TQ_SPLIT_BLOCK;
    cfg->block_dim = kt->block;
    cfg->block_bits = kt->block_bits;
    return TQ_OK;
}

tq_status tq_key_transform_keys(const tq_key_transform *kt, const float *keys, size_t n,
                                float *stored) {
    if (!kt || (n && (!keys || !stored))) return TQ_ERR_NULL;
    size_t H = (size_t)kt->n_heads, d = (size_t)kt->dim;
    if (!all_finite(keys, n * H * d)) return TQ_ERR_NONFINITE;
    for (size_t r = 0; r < n * H; r++)
        tq_key_transform_key_row(kt, (int)(r % H), 0, keys + r * d, stored + r * d);
    return TQ_OK;
}

tq_status tq_key_transform_invert(const tq_key_transform *kt, const float *stored, size_t n,
                                  float *keys) {
    if (!kt || (n && (!keys || !stored))) return TQ_ERR_NULL;
    size_t H = (size_t)kt->n_heads, d = (size_t)kt->dim;
    for (size_t r = 0; r < n * H; r++)
        tq_key_transform_invert_row(kt, (int)(r % H), 0, stored + r * d, keys + r * d);
    return TQ_OK;
}

tq_status tq_key_transform_queries(const tq_key_transform *kt, const float *q, int n_q_heads,
                                   size_t n, float *q_out, float *offsets) {
    if (!kt || (n && (!q || !q_out))) return TQ_ERR_NULL;
    if (!q_heads_ok(kt->n_heads, n_q_heads)) return TQ_ERR_INVALID;
    size_t d = (size_t)kt->dim, rows = n * (size_t)n_q_heads;
    if (!all_finite(q, rows * d)) return TQ_ERR_NONFINITE;
    int G = n_q_heads / kt->n_heads;
    for (size_t r = 0; r < rows; r++) {
        int h = (int)(r % (size_t)n_q_heads) / G;
        const float *qr = q + r * d;
        const float *qt = tq_key_transform_query_row(kt, h, qr, q_out + r * d);
        if (qt == qr) memcpy(q_out + r * d, qr, d * sizeof(float));
        if (offsets) offsets[r] = tq_key_transform_offset_row(kt, h, qr);
    }
    return TQ_OK;
}

/* The serialized head: "TQKT", version, n_heads, dim, block (u32 each), block_bits, parts
 * (bit 0 mean, bit 1 scale), mean_set, scale_set (u8 each); then the state. */
#define KT_HEAD 24u
static const uint8_t kt_magic[4] = {'T', 'Q', 'K', 'T'};

size_t tq_key_transform_serialized_bytes(const tq_key_transform *kt) {
    return kt ? KT_HEAD + tq_key_transform_state_bytes(kt) : 0;
}

typedef struct buf_sink {
    uint8_t *p;
    size_t pos;
} buf_sink;

static void buf_put(void *ctx, const void *p, size_t n) {
    buf_sink *b = ctx;
    memcpy(b->p + b->pos, p, n);
    b->pos += n;
}

static void put_u32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

tq_status tq_key_transform_serialize(const tq_key_transform *kt, void *dst, size_t capacity,
                                     size_t *written) {
    if (written) *written = 0;
    if (!kt || !dst) return TQ_ERR_NULL;
    size_t need = tq_key_transform_serialized_bytes(kt);
    if (capacity < need) return TQ_ERR_CAPACITY;
    uint8_t *p = dst;
    memcpy(p, kt_magic, 4);
    put_u32le(p + 4, 1);
    put_u32le(p + 8, (uint32_t)kt->n_heads);
    put_u32le(p + 12, (uint32_t)kt->dim);
    put_u32le(p + 16, (uint32_t)kt->block);
    p[20] = (uint8_t)kt->block_bits;
    p[21] = (uint8_t)((kt->mean ? 1 : 0) | (kt->scale ? 2 : 0) | kt->pairs << 2);
    p[22] = (uint8_t)kt->mean_set;
    p[23] = (uint8_t)kt->scale_set;
    buf_sink b = {p, KT_HEAD};
    tq_key_transform_write_state(kt, buf_put, &b);
    if (written) *written = b.pos;
    return TQ_OK;
}

tq_status tq_key_transform_deserialize(const void *data, size_t size, tq_key_transform **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (!data) return TQ_ERR_NULL;
    const uint8_t *p = data;
    if (size < KT_HEAD || memcmp(p, kt_magic, 4) != 0 || get_u32le(p + 4) != 1) return TQ_ERR_FORMAT;
    uint32_t H = get_u32le(p + 8), d = get_u32le(p + 12), block = get_u32le(p + 16);
    int parts = p[21], mean = parts & 1, scale = (parts >> 1) & 1, pairs = parts >> 2;
    if (!tq_rope_pairs_valid(pairs, (int)d) || p[22] > mean || p[23] > scale || H < 1 || H > 1024 || d < TQ_MIN_DIM ||
        d > TQ_MAX_DIM || block >= d || (block == 0) != (p[20] == 0) ||
        size != KT_HEAD + tq_key_transform_state_size((size_t)H * d, mean, scale, block > 0))
        return TQ_ERR_FORMAT;
    tq_key_transform *kt;
    tq_status st = tq_key_transform_create(&kt, (int)H, (int)d, mean, scale, (int)block, p[20], pairs, NULL);
    if (st) return st == TQ_ERR_NOMEM ? st : TQ_ERR_FORMAT;
    st = tq_key_transform_read_state(kt, p + KT_HEAD, p[22], p[23]);
    if (st) {
        tq_key_transform_free(kt);
        return st;
    }
    *out = kt;
    return TQ_OK;
}

/*
 * The key statistics of the KV cache (doc/kvcache.md §2): the per-head key mean, the
 * per-channel key scale from the observed queries and the kept keys, the key split's channel
 * order, and the transform of a key to its stored coordinates and back.
 */
#include <math.h>
#include <string.h>

#include "kvcache_internal.h"

/* A layer's key scale back to "not fixed": scale 1, no query statistics. */
void tq_kv_key_scale_reset(const tq_kv_cache *c, tq_kv_layer *l) {
    size_t nm = (size_t)c->cfg.n_kv_heads * (size_t)c->cfg.head_dim_k;
    l->scale_set = 0;
    l->q_rows = 0.0;
    memset(l->q_sq, 0, nm * sizeof(double));
    for (size_t j = 0; j < nm; j++) l->key_scale[j] = 1.0f;
    if (l->key_perm)
        for (size_t j = 0; j < nm; j++) l->key_perm[j] = (uint16_t)(j % (size_t)c->cfg.head_dim_k);
}

/* The most tokens the key mean is taken from (tq_kv_set_key_mean_tokens: tests only). */
static _Atomic size_t key_mean_tokens = TQ_KV_KEY_SCALE_TOKENS;

void tq_kv_set_key_mean_tokens(size_t n) { key_mean_tokens = n ? n : TQ_KV_KEY_SCALE_TOKENS; }

/* The per-head key mean of the first n = min(TQ_KV_KEY_SCALE_TOKENS, len − n_comp) raw tokens
 * held at the first compression — the same tokens as the key scale's statistics: tokens
 * [0, n), or for a windowed layer whose first compression comes after a drop, the oldest
 * kept. Summed token by token (each key read once, in order) in double. */
static void compute_key_mean(const tq_kv_cache *c, tq_kv_layer *l) {
    int dk = c->cfg.head_dim_k, H = c->cfg.n_kv_heads;
    size_t t0 = l->n_comp, n = l->len - t0, most = key_mean_tokens;
    if (n > most) n = most;
    double acc[TQ_MAX_DIM];
    for (int h = 0; h < H; h++) {
        float *m = l->key_mean + (size_t)h * (size_t)dk;
        for (int i = 0; i < dk; i++) acc[i] = 0.0;
        for (size_t t = t0; t < t0 + n; t++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < dk; i++) acc[i] += tq_f16_to_f32(kr[i]);
        }
        for (int i = 0; i < dk; i++) m[i] = n ? (float)(acc[i] / (double)n) : 0.0f;
    }
    l->mean_set = 1;
}

/* Tokens at which the key scale's exponent reaches half its full value: with few keys the
 * channel energies are noisy and the scale shrinks towards 1 (doc/kvcache.md §2). */
#define KEY_SCALE_HALF_TOKENS 32.0
/* Added to each channel's normalized energy so that a near-silent channel gets a bounded
 * scale. */
#define KEY_SCALE_FLOOR 0.01

static void sort_u16(uint16_t *x, int n) {
    for (int i = 1; i < n; i++) {
        uint16_t v = x[i];
        int j = i - 1;
        while (j >= 0 && x[j] > v) x[j + 1] = x[j], j--;
        x[j + 1] = v;
    }
}

/* The key split of head h (tq_kv_layer_scheme.key_split): channels ranked by an_i·bn_i (the
 * scale's normalized, floored energies a_i + ε, b_i + ε; a_i = 1 without observed queries;
 * b the raw key energies), the first
 * k.block of them form the first block (the one with more bits), each block in channel order;
 * then the scale of each block is multiplied by a constant so that the mean scaled key energy
 * Σ s_i² b_i / n of the two blocks is equal (the codec's one norm then suits both) and the
 * scale keeps geometric mean 1. A constant per block leaves the score error Σ s²b · Σ a/s² of each block as it
 * was: only the bits move. */
static void split_channels(tq_kv_layer *l, int h, int dk, const double *an, const double *bn,
                           const double *b, float *s) {
    uint16_t *perm = l->key_perm + (size_t)h * (size_t)dk;
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
    int nb = l->k.block;
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

/* The per-channel key scale, from the first n = min(TQ_KV_KEY_SCALE_TOKENS, len − n_comp)
 * raw tokens held at the first compression (less the key mean) and the observed queries of
 * positions below TQ_KV_KEY_SCALE_TOKENS: with a_i, b_i the query and key energies of channel
 * i normalized to mean 1, s_i ∝ ((a_i + ε) / (b_i + ε))^p with p = n / (4 (n + 32)),
 * geometric mean 1. p = 1/4 minimizes the score error Σ_i a_i/s_i² · Σ_i s_i² b_i (the
 * rotation spreads the error of s ⊙ k evenly over channels). Without observed queries
 * a_i = 1. A fixed token count keeps the scale independent of when compression starts once
 * that many tokens are held. */
static void compute_key_scale(const tq_kv_cache *c, tq_kv_layer *l) {
    int dk = c->cfg.head_dim_k, H = c->cfg.n_kv_heads;
    size_t t0 = l->n_comp, n = l->len - t0;
    if (n > TQ_KV_KEY_SCALE_TOKENS) n = TQ_KV_KEY_SCALE_TOKENS;
    double p = 0.25 * (double)n / ((double)n + KEY_SCALE_HALF_TOKENS);
    double b[TQ_MAX_DIM], lg[TQ_MAX_DIM], an[TQ_MAX_DIM], bn[TQ_MAX_DIM];
    int with_q = l->q_rows > 0;
    for (int h = 0; h < H; h++) {
        const float *m = l->key_mean ? l->key_mean + (size_t)h * (size_t)dk : NULL;
        const double *a = l->q_sq + (size_t)h * (size_t)dk;
        float *s = l->key_scale + (size_t)h * (size_t)dk;
        double sa = 0.0, sb = 0.0;
        for (int i = 0; i < dk; i++) b[i] = 0.0;
        for (size_t t = t0; t < t0 + n; t++) {
            const uint16_t *kr = tq_kv_kraw(c, l, t, h);
            for (int i = 0; i < dk; i++) {
                double x = (double)tq_f16_to_f32(kr[i]) - (m ? (double)m[i] : 0.0);
                b[i] += x * x;
            }
        }
        for (int i = 0; i < dk; i++) {
            sa += with_q ? a[i] : 1.0;
            sb += b[i];
        }
        int ok = sa > 0.0 && sb > 0.0 && isfinite(sa) && isfinite(sb);
        double mean_lg = 0.0;
        for (int i = 0; ok && i < dk; i++) {
            an[i] = (with_q ? a[i] : 1.0) * dk / sa + KEY_SCALE_FLOOR;
            bn[i] = b[i] * dk / sb + KEY_SCALE_FLOOR;
            lg[i] = p * log(an[i] / bn[i]);
            mean_lg += lg[i] / dk;
        }
        for (int i = 0; i < dk; i++) s[i] = ok ? (float)exp(lg[i] - mean_lg) : 1.0f;
        if (l->key_perm && ok) split_channels(l, h, dk, an, bn, b, s);
    }
    l->scale_set = 1;
}

void tq_kv_keys_fix(const tq_kv_cache *c, tq_kv_layer *l) {
    if (l->key_mean && !l->mean_set) compute_key_mean(c, l);
    if (l->key_scale && !l->scale_set) compute_key_scale(c, l);
}

void tq_kv_key_to_stored(const tq_kv_layer *l, int h, int dk, const uint16_t *kr, float *out) {
    const size_t hk = (size_t)h * (size_t)dk;
    /* Stored coordinate i: s ⊙ (k − mean) of channel key_perm[i] (i without a split). */
    for (int i = 0; i < dk; i++) {
        int ch = tq_kv_key_channel(l, hk, i);
        float x = tq_f16_to_f32(kr[ch]);
        if (l->key_mean) x -= l->key_mean[hk + (size_t)ch];
        if (l->key_scale) x *= l->key_scale[hk + (size_t)ch];
        out[i] = x;
    }
}

void tq_kv_key_from_stored(const tq_kv_layer *l, int h, int dk, const float *dec, float *out) {
    const size_t hk = (size_t)h * (size_t)dk;
    for (int j = 0; j < dk; j++) { /* the inverse of tq_kv_key_to_stored */
        int ch = tq_kv_key_channel(l, hk, j);
        float x = dec[j];
        if (l->key_scale) x /= l->key_scale[hk + (size_t)ch];
        if (l->key_mean) x += l->key_mean[hk + (size_t)ch];
        out[ch] = x;
    }
}

tq_status tq_kv_cache_observe_queries(tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                                      size_t n) {
    if (!c) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    int H = c->cfg.n_kv_heads, dk = c->cfg.head_dim_k;
    if (n_q_heads < H || n_q_heads % H) return TQ_ERR_INVALID;
    if (n && !q) return TQ_ERR_NULL;
    tq_kv_layer *l = &c->layers[layer];
    if (!l->q_sq || l->scale_set || l->len >= TQ_KV_KEY_SCALE_TOKENS || n == 0) return TQ_OK;
    /* The rows at positions len … len + n − 1 below TQ_KV_KEY_SCALE_TOKENS count. */
    if (n > TQ_KV_KEY_SCALE_TOKENS - l->len) n = TQ_KV_KEY_SCALE_TOKENS - l->len;
    size_t total = n * (size_t)n_q_heads * (size_t)dk;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(q[i])) return TQ_ERR_NONFINITE;
    int G = n_q_heads / H;
    for (size_t t = 0; t < n; t++)
        for (int qh = 0; qh < n_q_heads; qh++) {
            const float *x = q + (t * (size_t)n_q_heads + (size_t)qh) * (size_t)dk;
            double *acc = l->q_sq + (size_t)(qh / G) * (size_t)dk;
            for (int i = 0; i < dk; i++) acc[i] += (double)x[i] * x[i];
        }
    l->q_rows += (double)n * G;
    return TQ_OK;
}

tq_status tq_kv_cache_key_scale(const tq_kv_cache *c, int layer, float *out,
                                size_t out_capacity) {
    if (!c || !out) return TQ_ERR_NULL;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    const tq_kv_layer *l = &c->layers[layer];
    if (!l->key_scale) return TQ_ERR_INVALID;
    if (!l->scale_set) return TQ_ERR_STATE;
    size_t n = (size_t)c->cfg.n_kv_heads * (size_t)c->cfg.head_dim_k;
    if (out_capacity < n) return TQ_ERR_CAPACITY;
    memcpy(out, l->key_scale, n * sizeof(float));
    return TQ_OK;
}

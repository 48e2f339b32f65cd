/* Greedy / temperature / top-k / top-p sampling; see sampler.h.
 *
 * Top-k is a partial selection (a bounded min-heap of the k best), so a k of 40 over 262144
 * logits costs one pass plus O(n log k); the kept candidates are then sorted by probability
 * for the top-p cut. Without top-k the full vocabulary is sorted. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float logit;
    int32_t id;
} cand;

struct sampler {
    sampler_params p;
    int n_vocab;
    uint64_t rng;  /* xorshift64* state, never 0 */
    cand *c;       /* (n_vocab) candidates */
};

sampler *sampler_create(const sampler_params *p, int n_vocab) {
    if (p == NULL || n_vocab < 1) return NULL;
    sampler *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (s->c == NULL) {
        free(s);
        return NULL;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed != 0 ? p->seed : 0x9E3779B97F4A7C15ull;
    return s;
}

void sampler_free(sampler *s) {
    if (s == NULL) return;
    free(s->c);
    free(s);
}

int32_t sampler_argmax(const float *logits, int n_vocab) {
    if (logits == NULL || n_vocab < 1) return -1;
    int32_t best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Uniform in [0, 1) from the top 24 bits of xorshift64*. */
static float next_uniform(sampler *s) {
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (float)((s->rng * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

/* "a ranks before b": higher logit, then lower id (a strict total order). */
static int before(const cand *a, const cand *b) { return a->logit > b->logit || (a->logit == b->logit && a->id < b->id); }

static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Min-heap on `before` (the root is the worst kept candidate). */
static void sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[w], &h[l])) w = l;
        if (r < n && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

int32_t sampler_sample(sampler *s, const float *logits) {
    if (s == NULL || logits == NULL) return -1;
    if (!(s->p.temperature > 0.0f)) return sampler_argmax(logits, s->n_vocab);
    const int nv = s->n_vocab;
    int k = s->p.top_k > 0 && s->p.top_k < nv ? s->p.top_k : nv;
    cand *c = s->c;
    if (k < nv) {
        for (int i = 0; i < k; i++) c[i] = (cand){logits[i], i};
        for (int i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
        for (int i = k; i < nv; i++) {
            cand x = {logits[i], i};
            if (before(&x, &c[0])) {
                c[0] = x;
                sift_down(c, k, 0);
            }
        }
    } else {
        for (int i = 0; i < nv; i++) c[i] = (cand){logits[i], i};
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    /* p_i = exp((l_i - l_max) / T) / Z; the logit field now holds the unnormalized p. */
    const float inv_t = 1.0f / s->p.temperature, mx = c[0].logit;
    double z = 0.0;
    for (int i = 0; i < k; i++) {
        c[i].logit = expf((c[i].logit - mx) * inv_t);
        z += c[i].logit;
    }
    int n = k;
    if (s->p.top_p < 1.0f) {
        double cum = 0.0, target = (double)s->p.top_p * z;
        for (n = 0; n < k;) {
            cum += c[n++].logit;
            if (cum >= target) break;
        }
        z = cum;
    }
    double r = (double)next_uniform(s) * z, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].logit;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

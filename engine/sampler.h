/* Picks the next token from a row of logits: greedy, or temperature sampling restricted to
 * the top k and/or the smallest set of tokens whose probability reaches top_p, drawn with a
 * seeded PRNG (xorshift64*), so a seed reproduces a run exactly.
 *
 * sampler_create() allocates the candidate buffer for n_vocab tokens; sampling allocates
 * nothing. One sampler per thread (it holds the PRNG state). Never prints, never aborts. */
#ifndef TQ_ENGINE_SAMPLER_H
#define TQ_ENGINE_SAMPLER_H

#include <stdint.h>

typedef struct sampler_params {
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    int top_k;         /* keep the k most likely; <= 0 or >= n_vocab: all */
    float top_p;       /* keep the smallest prefix with cumulative probability >= top_p; >= 1: all */
    uint64_t seed;     /* PRNG seed (0 is replaced by a fixed non-zero constant) */
} sampler_params;

typedef struct sampler sampler;

/* NULL if n_vocab < 1, p is NULL or memory is short. */
sampler *sampler_create(const sampler_params *p, int n_vocab);
void sampler_free(sampler *s); /* NULL is fine */

/* Argmax of logits[0..n_vocab), lowest id on ties; -1 if logits is NULL or n_vocab < 1. */
int32_t sampler_argmax(const float *logits, int n_vocab);

/* Next token from logits (n_vocab floats, read only); -1 on a NULL argument. */
int32_t sampler_sample(sampler *s, const float *logits);

#endif

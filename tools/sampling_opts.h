/* The sampling flags of the commands that write text (tq generate, tq chat): -n, --temp,
 * --top-k, --top-p, --seed, the same names, ranges and defaults in both (engine/sampler.h does
 * the sampling). A command puts SAMPLING_OPTS(so, n_help) in its option table. */
#ifndef TQ_TOOLS_SAMPLING_OPTS_H
#define TQ_TOOLS_SAMPLING_OPTS_H

#include <float.h>
#include <stdint.h>

#include "options.h"
#include "sampler.h"

typedef struct sampling_opts {
    long n_predict, top_k;
    double temp, top_p;
    uint64_t seed;
} sampling_opts;

/* The defaults, with the command's own -n default. */
#define SAMPLING_OPTS_INIT(n_predict_) {(n_predict_), 40, 0.8, 0.95, 1}

/* The option table entries; n_help: the -n line of the command's help. */
#define SAMPLING_OPTS(so, n_help)                                                             \
    {OPT_INT("-n", "N", &(so).n_predict, 1, 1L << 24, n_help)},                               \
    {OPT_DOUBLE("--temp", "T", &(so).temp, 0, 100, "temperature; 0 = greedy (default 0.8)")}, \
    {OPT_INT("--top-k", "K", &(so).top_k, 0, 1L << 30,                                        \
             "sample among the K most likely; 0 = all (default 40)")},                        \
    {OPT_DOUBLE("--top-p", "P", &(so).top_p, DBL_TRUE_MIN, 1, /* (0, 1] */                    \
                "and within cumulative probability P; 1 = all (default 0.95)")},              \
    {OPT_U64("--seed", "S", &(so).seed, "sampling seed (default 1): the same seed repeats a run")}

static inline sampler_params sampling_params(const sampling_opts *so) {
    sampler_params p = {(float)so->temp, (int)so->top_k, (float)so->top_p, so->seed};
    return p;
}

#endif

/* Value-returning forms of the library's struct getters for terse tests: each checks that the
 * call succeeds (a failure counts in the running test) and returns the struct it filled. */
#ifndef TQ_TEST_API_H
#define TQ_TEST_API_H

#include "test_util.h"
#include "turboquant.h"

static inline tq_kv_layer_scheme test_layer_scheme(const tq_kv_cache *c, int layer) {
    tq_kv_layer_scheme s;
    memset(&s, 0, sizeof s);
    CHECK(tq_kv_cache_get_layer_scheme(c, layer, &s, sizeof s) == TQ_OK);
    return s;
}

static inline tq_kv_cache_config test_cache_config(const tq_kv_cache *c) {
    tq_kv_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK(tq_kv_cache_get_config(c, &cfg, sizeof cfg) == TQ_OK);
    return cfg;
}

static inline tq_codec_config test_codec_config(const tq_codec *c) {
    tq_codec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK(tq_codec_get_config(c, &cfg, sizeof cfg) == TQ_OK);
    return cfg;
}

#endif

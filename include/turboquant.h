/*
 * turboquant.h — the public API of libturboquant, in three layers (doc/api.md):
 *   turboquant/codec.h         stable: errors, version, kernels, rotations, codebooks, codecs
 *   turboquant/kv.h            stable: KV-cache schemes, the cache, cache files, thread pool,
 *                              attention
 *   turboquant/experimental.h  no stability promise: implementation rules, introspection, the
 *                              reference attention
 * Include this header for all three, or one layer's header alone.
 */
#ifndef TURBOQUANT_H
#define TURBOQUANT_H

#include "turboquant/codec.h"
#include "turboquant/kv.h"
#include "turboquant/experimental.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* TURBOQUANT_H */

/*
 * Runtime selection of the kernel table, once, from cpuid (libsodium-style): the best set the
 * CPU supports, unless TQ_FORCE_REF=1 is in the environment at the first call or the caller
 * selects one with tq_set_kernels().
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "turboquant.h"

static _Atomic(const tq_kernel_table *) current;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int cpu_has(tq_kernels_kind kind) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    switch (kind) {
    case TQ_KERNELS_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TQ_KERNELS_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
    default:
        return 0;
    }
#else
    (void)kind;
    return 0;
#endif
}

static const tq_kernel_table *table_for(tq_kernels_kind kind) {
    switch (kind) {
    case TQ_KERNELS_REF:
        return tq_kernels_ref();
    case TQ_KERNELS_AVX2:
        return cpu_has(kind) ? tq_kernels_avx2() : NULL;
    case TQ_KERNELS_AVX512:
        return cpu_has(kind) ? tq_kernels_avx512() : NULL;
    case TQ_KERNELS_AUTO: {
        const tq_kernel_table *t = table_for(TQ_KERNELS_AVX512);
        if (!t) t = table_for(TQ_KERNELS_AVX2);
        return t ? t : tq_kernels_ref();
    }
    }
    return NULL;
}

/* TQ_FORCE_REF=1 picks the scalar reference; TQ_KERNELS=ref|avx2|avx512 picks a set (one the
 * CPU lacks, or another value, leaves the automatic choice: tq_kernels_name() says which). */
static void init_once(void) {
    const char *force = getenv("TQ_FORCE_REF");
    const char *want = getenv("TQ_KERNELS");
    const tq_kernel_table *t = NULL;
    if (force && *force && strcmp(force, "0") != 0) t = tq_kernels_ref();
    else if (want && strcmp(want, "ref") == 0) t = tq_kernels_ref();
    else if (want && strcmp(want, "avx2") == 0) t = table_for(TQ_KERNELS_AVX2);
    else if (want && strcmp(want, "avx512") == 0) t = table_for(TQ_KERNELS_AVX512);
    atomic_store(&current, t ? t : table_for(TQ_KERNELS_AUTO));
}

const tq_kernel_table *tq_kernels(void) {
    pthread_once(&once, init_once);
    return atomic_load_explicit(&current, memory_order_acquire);
}

int tq_kernels_supported(tq_kernels_kind kind) { return table_for(kind) != NULL; }

tq_status tq_set_kernels(tq_kernels_kind kind) {
    if (kind < TQ_KERNELS_AUTO || kind > TQ_KERNELS_AVX512) return TQ_ERR_VARIANT;
    pthread_once(&once, init_once);
    const tq_kernel_table *t = table_for(kind);
    if (!t) return TQ_ERR_UNSUPPORTED;
    atomic_store(&current, t);
    return TQ_OK;
}

const char *tq_kernels_name(void) { return tq_kernels()->name; }

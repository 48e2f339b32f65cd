/*
 * The kernels in use: the codec table and the attention table, chosen together and once
 * (libsodium-style, from cpuid): the best set the CPU supports, unless the environment at the
 * first call (read_environment: the one place the library reads it) or tq_set_kernels /
 * tq_set_int8_scores say otherwise. A choice is one pointer to a prepared tq_kernel_set.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "kernels.h"
#include "turboquant.h"

/* The prepared sets: one per codec kind, and the AVX2, AVX-512 and NEON ones with the integer
 * attention kernels (the same as SET_AVX2 / SET_AVX512 / SET_NEON where the CPU or build lacks
 * them). */
enum { SET_REF, SET_AVX2, SET_AVX2_INT8, SET_AVX512, SET_AVX512_INT8, SET_NEON, SET_NEON_INT8, N_SETS };
static tq_kernel_set sets[N_SETS];
static _Atomic(const tq_kernel_set *) current;
static atomic_int cur_kind = TQ_KERNELS_REF; /* the codec kind in use: REF, AVX2 or AVX512 */
static atomic_int int8_on = 1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int cpu_has(tq_kernels_kind kind) {
#if defined(__aarch64__) && defined(__ARM_NEON)
    return kind == TQ_KERNELS_NEON; /* Advanced SIMD is part of every AArch64 CPU */
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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
    case TQ_KERNELS_REF: return tq_kernels_ref();
    case TQ_KERNELS_AVX2: return cpu_has(kind) ? tq_kernels_avx2() : NULL;
    case TQ_KERNELS_AVX512: return cpu_has(kind) ? tq_kernels_avx512() : NULL;
    case TQ_KERNELS_NEON: return cpu_has(kind) ? tq_kernels_neon() : NULL;
    case TQ_KERNELS_AUTO: break;
    }
    return NULL;
}

/* The concrete kind kind stands for (AUTO: the best supported), or -1 when unsupported. */
static int resolve(tq_kernels_kind kind) {
    if (kind != TQ_KERNELS_AUTO) return table_for(kind) ? (int)kind : -1;
    if (table_for(TQ_KERNELS_AVX512)) return TQ_KERNELS_AVX512;
    if (table_for(TQ_KERNELS_AVX2)) return TQ_KERNELS_AVX2;
    if (table_for(TQ_KERNELS_NEON)) return TQ_KERNELS_NEON;
    return TQ_KERNELS_REF;
}

/* Every environment variable the library reads, read here once: TQ_FORCE_REF=1 picks the
 * scalar reference; TQ_KERNELS=ref|avx2|avx512|neon picks a set (one the CPU lacks, or another
 * value, leaves the automatic choice: tq_kernels_name() says which); TQ_INT8_SCORES=0 turns the
 * integer attention kernels off;
 * TQ_AVXVNNI=0 keeps the AVX2 integer kernels on vpmaddubsw where the CPU has AVX-VNNI (what a
 * CPU without it runs; the results are the same bit for bit). */
static void read_environment(tq_kernels_kind *kind, int *int8, int *avxvnni, int *avx512int8) {
    const char *force = getenv("TQ_FORCE_REF");
    const char *want = getenv("TQ_KERNELS");
    const char *i8 = getenv("TQ_INT8_SCORES");
    const char *vn = getenv("TQ_AVXVNNI");
    const char *v5 = getenv("TQ_AVX512_INT8");
    *kind = TQ_KERNELS_AUTO;
    if (force && *force && strcmp(force, "0") != 0) *kind = TQ_KERNELS_REF;
    else if (want && strcmp(want, "ref") == 0) *kind = TQ_KERNELS_REF;
    else if (want && strcmp(want, "avx2") == 0) *kind = TQ_KERNELS_AVX2;
    else if (want && strcmp(want, "avx512") == 0) *kind = TQ_KERNELS_AVX512;
    else if (want && strcmp(want, "neon") == 0) *kind = TQ_KERNELS_NEON;
    *int8 = !(i8 && strcmp(i8, "0") == 0);
    *avxvnni = !(vn && strcmp(vn, "0") == 0);
    *avx512int8 = !(v5 && strcmp(v5, "0") == 0);
}

static void select_set(void) {
    int k = atomic_load(&cur_kind);
    int i8 = atomic_load(&int8_on);
    int s = k == TQ_KERNELS_AVX512 ? (i8 ? SET_AVX512_INT8 : SET_AVX512)
            : k == TQ_KERNELS_AVX2 ? (i8 ? SET_AVX2_INT8 : SET_AVX2)
            : k == TQ_KERNELS_NEON ? (i8 ? SET_NEON_INT8 : SET_NEON)
                                   : SET_REF;
    atomic_store_explicit(&current, &sets[s], memory_order_release);
}

static void init_once(void) {
    const tq_attn_kernels *a2 = tq_attn_kernels_avx2(), *a5 = tq_attn_kernels_avx512();
    const tq_attn_kernels *ref = tq_attn_kernels_ref();
    tq_kernels_kind kind;
    int int8, avxvnni, avx512int8;
    read_environment(&kind, &int8, &avxvnni, &avx512int8);
    sets[SET_REF] = (tq_kernel_set){tq_kernels_ref(), ref};
    sets[SET_AVX2] = (tq_kernel_set){tq_kernels_avx2(), a2 ? a2 : ref};
    sets[SET_AVX2_INT8] = sets[SET_AVX2];
    if (avxvnni && cpu_has(TQ_KERNELS_AVX2) && tq_attn_kernels_avxvnni())
        sets[SET_AVX2_INT8].attn = tq_attn_kernels_avxvnni();
    else if (cpu_has(TQ_KERNELS_AVX2) && tq_attn_kernels_avx2_int8())
        sets[SET_AVX2_INT8].attn = tq_attn_kernels_avx2_int8();
    sets[SET_AVX512] = (tq_kernel_set){tq_kernels_avx512(), a5 ? a5 : a2 ? a2 : ref};
    sets[SET_AVX512_INT8] = sets[SET_AVX512];
    const tq_attn_kernels *an = tq_attn_kernels_neon();
    sets[SET_NEON] = (tq_kernel_set){tq_kernels_neon(), an ? an : ref};
    sets[SET_NEON_INT8] = sets[SET_NEON];
    if (cpu_has(TQ_KERNELS_NEON) && tq_attn_kernels_neon_dot()) sets[SET_NEON_INT8].attn = tq_attn_kernels_neon_dot();
    if (avx512int8 && cpu_has(TQ_KERNELS_AVX512) && tq_attn_kernels_avx512_vnni())
        sets[SET_AVX512_INT8].attn = tq_attn_kernels_avx512_vnni();
    else if (sets[SET_AVX2_INT8].attn != sets[SET_AVX2].attn)
        /* AVX-512 without VBMI and VNNI (Skylake-SP, Cascade Lake; TQ_AVX512_INT8=0 as one):
         * the AVX2 integer kernels (AVX-VNNI's where the CPU has it), which read trellis
         * codes — the AVX-512 float ones leave them to the tile, 4.9× slower — and plain
         * codes faster too (SmolLM2's decode attention at ctx 2048 on a Zen 5: turbo3 3.1
         * against 3.3 ms, turbo4 2.6 against 3.5) */
        sets[SET_AVX512_INT8].attn = sets[SET_AVX2_INT8].attn;
    int k = resolve(kind);
    atomic_store(&cur_kind, k >= 0 ? k : resolve(TQ_KERNELS_AUTO));
    atomic_store(&int8_on, int8);
    select_set();
}

const tq_kernel_set *tq_kernel_set_get(void) {
    pthread_once(&once, init_once);
    return atomic_load_explicit(&current, memory_order_acquire);
}

const tq_kernel_table *tq_kernels(void) { return tq_kernel_set_get()->codec; }

const tq_attn_kernels *tq_attn_kernels_get(void) { return tq_kernel_set_get()->attn; }

int tq_kernels_supported(tq_kernels_kind kind) {
    return kind == TQ_KERNELS_AUTO || table_for(kind) != NULL;
}

tq_status tq_set_kernels(tq_kernels_kind kind) {
    if (kind < TQ_KERNELS_AUTO || kind > TQ_KERNELS_NEON) return TQ_ERR_VARIANT;
    pthread_once(&once, init_once);
    int k = resolve(kind);
    if (k < 0) return TQ_ERR_UNSUPPORTED;
    atomic_store(&cur_kind, k);
    select_set();
    return TQ_OK;
}

void tq_set_int8_scores(int on) {
    pthread_once(&once, init_once);
    atomic_store(&int8_on, on != 0);
    select_set();
}

int tq_int8_scores(void) {
    const tq_kernel_set *s = tq_kernel_set_get();
    return (s == &sets[SET_AVX512_INT8] && s->attn != sets[SET_AVX512].attn) ||
           (s == &sets[SET_AVX2_INT8] && s->attn != sets[SET_AVX2].attn) ||
           (s == &sets[SET_NEON_INT8] && s->attn != sets[SET_NEON].attn);
}

const char *tq_kernels_name(void) { return tq_kernels()->name; }

const char *tq_attn_kernels_name(void) { return tq_attn_kernels_get()->name; }

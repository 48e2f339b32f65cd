/* Runtime choice of the kernel set, made once (libsodium-style): the reference table is
 * always there; on x86-64 the AVX2, AVX-512 and AVX-512 VNNI tables, on AArch64 the NEON and
 * NEON dot-product tables, start as copies of the one before and override what they accelerate,
 * so every entry of every table is callable. */
#include "quants.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define QUANT_HAVE_X86 1
#include <cpuid.h>
#else
#define QUANT_HAVE_X86 0
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#define QUANT_HAVE_NEON 1
#include <sys/auxv.h>
#else
#define QUANT_HAVE_NEON 0
#endif

static quant_kernels table_ref;
#if QUANT_HAVE_X86
static quant_kernels table_avx2, table_avx512, table_vnni;
#endif
#if QUANT_HAVE_NEON
static quant_kernels table_neon;
#if defined(HWCAP_ASIMDDP)
static quant_kernels table_neon_dp;
#endif
#endif
static const quant_kernels *sets[4];
static int n_sets;
static const quant_kernels *best;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* -1: not set by the API, follow TQ_FORCE_REF; 0/1: set by quant_force_reference. */
static atomic_int force_api = -1;
static int force_env;

#if QUANT_HAVE_X86
/* clang 14's __builtin_cpu_supports has no "f16c"; CPUID leaf 1 ECX bit 29 is F16C. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

static void init_tables(void) {
    quant_fill_ref(&table_ref);
    sets[n_sets++] = &table_ref;
    best = &table_ref;
#if QUANT_HAVE_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx2) {
        table_avx2 = table_ref;
        quant_fill_avx2(&table_avx2);
        sets[n_sets++] = &table_avx2;
        best = &table_avx2;
    }
    if (avx512) {
        table_avx512 = table_avx2;
        quant_fill_avx512(&table_avx512);
        sets[n_sets++] = &table_avx512;
        best = &table_avx512;
    }
    if (avx512 && __builtin_cpu_supports("avx512vnni")) {
        table_vnni = table_avx512;
        quant_fill_avx512_vnni(&table_vnni);
        sets[n_sets++] = &table_vnni;
        best = &table_vnni;
    }
#endif
#if QUANT_HAVE_NEON
    /* Advanced SIMD is part of every AArch64 CPU; the dot products (ARMv8.2-A, optional there
     * and from v8.4 on mandatory) are asked of the kernel. */
    table_neon = table_ref;
    quant_fill_neon(&table_neon);
    sets[n_sets++] = &table_neon;
    best = &table_neon;
#if defined(HWCAP_ASIMDDP)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) {
        table_neon_dp = table_neon;
        quant_fill_neon_dotprod(&table_neon_dp); /* a no-op where the compiler could not build it */
        if (strcmp(table_neon_dp.name, "neon-dotprod") == 0) {
            sets[n_sets++] = &table_neon_dp;
            best = &table_neon_dp;
        }
    }
#endif
#endif
    const char *env = getenv("TQ_FORCE_REF");
    force_env = env != NULL && env[0] != '\0' && strcmp(env, "0") != 0;
    /* TQ_KERNELS=ref|avx2|avx512|neon, as the library reads it (README): the best set of that
     * family this CPU runs (avx2 on an AVX-512 CPU: what an AVX2-only CPU gets); a family the
     * CPU lacks, or another value, leaves the choice as it is. */
    const char *want = getenv("TQ_KERNELS");
    if (want != NULL && strcmp(want, "ref") == 0) force_env = 1;
    else if (want != NULL && want[0] != '\0')
        for (int i = 1; i < n_sets; i++)
            if (strncmp(sets[i]->name, want, strlen(want)) == 0 &&
                (sets[i]->name[strlen(want)] == '\0' || sets[i]->name[strlen(want)] == '-'))
                best = sets[i];
}

const quant_kernels *quant_kernels_get(void) {
    pthread_once(&init_once, init_tables);
    int f = atomic_load_explicit(&force_api, memory_order_relaxed);
    if (f < 0) f = force_env;
    return f ? &table_ref : best;
}

const char *quant_kernels_name(void) { return quant_kernels_get()->name; }

void quant_force_reference(int on) {
    atomic_store_explicit(&force_api, on ? 1 : 0, memory_order_relaxed);
}

int quant_kernels_list(const quant_kernels **out, int cap) {
    pthread_once(&init_once, init_tables);
    int n = 0;
    for (int i = 0; i < n_sets && out != NULL && n < cap; i++) out[n++] = sets[i];
    return n;
}

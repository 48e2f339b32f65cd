/* Minimal test harness shared by every test program.
 *
 * Each test file defines test functions, calls them through RUN_TEST, and ends main()
 * with `return test_report();`, which prints the closing line "N passed, N failed, N skipped"
 * that CI reads and returns the exit status: 1 if anything failed, TEST_SKIP_CODE (77, ctest's
 * SKIP_RETURN_CODE in CMakeLists.txt) if nothing ran at all because everything skipped, else 0.
 *
 * Skips are never passes. A test that cannot run (no model, no data file, a CPU without the
 * instructions its kernels need) says so with SKIP_TEST("reason", ...), which prints
 * "skip NAME: reason" and returns from the test function; the test counts as skipped, not
 * passed, even if some checks ran before (their failures still count). A test that runs but
 * leaves a part out (one kernel set the CPU lacks) calls test_skip("reason", ...) and goes on:
 * the reason is printed, the test still passes or fails on what ran, and each skipped part is
 * added to the skipped count. Outside a test (main deciding a group cannot run),
 * test_skip_named("test_name", "reason", ...) records a whole test as skipped. */
#ifndef TQ_TEST_UTIL_H
#define TQ_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

/* SANITIZED: 1 in an AddressSanitizer build, whose tests may run shorter (and say so). */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* The exit status of a program in which nothing ran and nothing failed (automake's and ctest's
 * convention; CMakeLists.txt sets SKIP_RETURN_CODE to it). */
#define TEST_SKIP_CODE 77

static int test_passed_count;
static int test_failed_count;
static int test_skipped_count;  /* whole tests skipped + parts of tests skipped */
static int test_skipped_parts;  /* of which parts of tests that ran */
static int test_current_failed;
static int test_current_skipped; /* SKIP_TEST called in the running test */
static int test_current_parts;   /* test_skip calls in the running test */
static const char *test_current_name;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
            test_current_failed = 1;                                                      \
        }                                                                                 \
    } while (0)

#define CHECK_MSG(cond, ...)                                                              \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            test_current_failed = 1;                                                      \
        }                                                                                 \
    } while (0)

/* |a - b| <= tol, with a message naming both values. */
#define CHECK_NEAR(a, b, tol)                                                             \
    do {                                                                                  \
        double check_a_ = (double)(a), check_b_ = (double)(b);                            \
        if (!(fabs(check_a_ - check_b_) <= (double)(tol))) {                              \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %.3g\n", \
                    __FILE__, __LINE__, #a, check_a_, #b, check_b_, (double)(tol));       \
            test_current_failed = 1;                                                      \
        }                                                                                 \
    } while (0)

static inline void test_vprint_skip(const char *prefix, const char *name, const char *fmt, va_list ap) {
    fflush(stderr);
    if (name != NULL) printf("%s%s: ", prefix, name);
    else printf("%s", prefix);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
}

/* A part of the running test is left out (the test goes on): printed "skip NAME: reason" and
 * counted as skipped. Outside a test, a part of the program: printed "skip reason". */
static inline void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    test_vprint_skip("skip ", test_current_name, fmt, ap);
    va_end(ap);
    if (test_current_name != NULL) {
        test_current_parts++;
    } else {
        test_skipped_count++;
        test_skipped_parts++;
    }
}

/* A whole test, by name, that main() does not run. */
static inline void test_skip_named(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void test_skip_named(const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    test_vprint_skip("skip ", name, fmt, ap);
    va_end(ap);
    test_skipped_count++;
}

/* Called by SKIP_TEST: the running test cannot do what it is for. */
static inline void test_skip_whole(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_skip_whole(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    test_vprint_skip("skip ", test_current_name, fmt, ap);
    va_end(ap);
    test_current_skipped = 1;
}

/* Skips the rest of the running test (a void function) with a printf-style reason. */
#define SKIP_TEST(...)                                                                    \
    do {                                                                                  \
        test_skip_whole(__VA_ARGS__);                                                     \
        return;                                                                           \
    } while (0)

#define RUN_TEST(fn)                                                                      \
    do {                                                                                  \
        test_current_failed = 0;                                                          \
        test_current_skipped = 0;                                                         \
        test_current_parts = 0;                                                           \
        test_current_name = #fn;                                                          \
        fn();                                                                             \
        test_current_name = NULL;                                                         \
        if (test_current_failed) {                                                        \
            test_failed_count++;                                                          \
            fprintf(stderr, "FAIL %s\n", #fn);                                            \
        } else if (test_current_skipped) {                                                \
            test_skipped_count++; /* its "skip" line is printed */                        \
        } else {                                                                          \
            test_passed_count++;                                                          \
            if (test_current_parts > 0)                                                   \
                printf("ok   %s (%d part%s skipped, above)\n", #fn, test_current_parts,   \
                       test_current_parts == 1 ? "" : "s");                               \
            else                                                                          \
                printf("ok   %s\n", #fn);                                                 \
        }                                                                                 \
        test_skipped_count += test_current_parts;                                         \
        test_skipped_parts += test_current_parts;                                         \
        fflush(stdout);                                                                   \
    } while (0)

/* The closing line and the exit status (see the top of this file). */
static inline int test_report(void) {
    if (test_skipped_parts > 0)
        printf("%d passed, %d failed, %d skipped (%d of them parts of tests that ran)\n", test_passed_count,
               test_failed_count, test_skipped_count, test_skipped_parts);
    else
        printf("%d passed, %d failed, %d skipped\n", test_passed_count, test_failed_count, test_skipped_count);
    fflush(stdout);
    if (test_failed_count > 0) return 1;
    if (test_passed_count == 0 && test_skipped_count > 0) return TEST_SKIP_CODE;
    if (test_passed_count == 0) {
        printf("no test ran\n");
        return 1;
    }
    return 0;
}

/* ---- kernel sets: why one is not tested here ------------------------------------------------ */

/* The features of `set` ("avx2", "avx512", "avx512-vnni": what src/kernels/dispatch.c and
 * attn_vnni.c ask cpuid for; "neon": AArch64; "neon-dot": AArch64 with the dot products) that this CPU lacks, space-separated into buf; ""
 * if none. */
static inline const char *test_cpu_lacks(const char *set, char *buf, size_t cap) {
    buf[0] = '\0';
    if (strncmp(set, "neon", 4) == 0) { /* part of every AArch64 CPU; "neon-dot": HWCAP_ASIMDDP */
#if !(defined(__aarch64__) && defined(__ARM_NEON))
        snprintf(buf, cap, "(not AArch64)");
#elif defined(HWCAP_ASIMDDP)
        if (set[4] == '-' && !(getauxval(AT_HWCAP) & HWCAP_ASIMDDP)) snprintf(buf, cap, "asimddp");
#endif
        return buf;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TEST_NEED_(feat)                                                                  \
    do {                                                                                  \
        if (!__builtin_cpu_supports(feat)) {                                              \
            size_t used_ = strlen(buf);                                                   \
            snprintf(buf + used_, cap - used_, "%s%s", used_ ? " " : "", feat);           \
        }                                                                                 \
    } while (0)
    __builtin_cpu_init();
    if (strncmp(set, "avx2", 4) == 0) {
        TEST_NEED_("avx2");
        TEST_NEED_("fma");
        if (strcmp(set, "avx2-vnni") == 0) { /* CPUID leaf 7 subleaf 1, EAX bit 4 */
            unsigned a_, b_, c_, d_;
            if (!__get_cpuid_count(7, 1, &a_, &b_, &c_, &d_) || !((a_ >> 4) & 1u)) {
                size_t used_ = strlen(buf);
                snprintf(buf + used_, cap - used_, "%savxvnni", used_ ? " " : "");
            }
        }
    } else if (strncmp(set, "avx512", 6) == 0) {
        TEST_NEED_("avx512f");
        TEST_NEED_("avx512bw");
        TEST_NEED_("avx512vl");
        TEST_NEED_("avx512dq");
        TEST_NEED_("fma");
        if (strcmp(set, "avx512-vnni") == 0) {
            TEST_NEED_("avx512vbmi");
            TEST_NEED_("avx512vnni");
        }
    }
#undef TEST_NEED_
#else
    (void)set;
    snprintf(buf, cap, "(not x86-64)");
#endif
    return buf;
}

/* 0 ref, 1 avx2 (avx2-int8 included) and neon (neon-dot included), 2 avx512 (avx512-vnni included), 3 for anything
 * else. */
static inline int test_kernel_rank(const char *set) {
    if (strcmp(set, "ref") == 0) return 0;
    if (strncmp(set, "neon", 4) == 0) return 1; /* neon, neon-dot */
    if (strncmp(set, "avx2", 4) == 0 && (set[4] == '\0' || strcmp(set + 4, "-int8") == 0 || strcmp(set + 4, "-vnni") == 0))
        return 1;
    if (strncmp(set, "avx512", 6) == 0) return 2;
    return 3;
}

/* Why kernel set `set` is not to be tested here, into buf; NULL if it is. `available`: the
 * library provides it on this CPU (tq_kernels_supported, a non-NULL table); not available on a
 * CPU that has every instruction the set needs is also a failure of the running test. The environment
 * caps the sets the tests use as the library's dispatch does: TQ_FORCE_REF=1 leaves the
 * reference only, TQ_KERNELS=ref|avx2|avx512|neon the sets up to that one (so TQ_KERNELS=avx2 runs
 * the tests as on a CPU without AVX-512). */
static inline const char *test_kernel_skip_reason(const char *set, int available, char *buf, size_t cap) {
    const char *force = getenv("TQ_FORCE_REF"), *want = getenv("TQ_KERNELS");
    if (force && *force && strcmp(force, "0") != 0 && test_kernel_rank(set) > 0) {
        snprintf(buf, cap, "kernel set %s: TQ_FORCE_REF=%s in the environment", set, force);
        return buf;
    }
    if (want && test_kernel_rank(want) < 3 && test_kernel_rank(set) > test_kernel_rank(want)) {
        snprintf(buf, cap, "kernel set %s: TQ_KERNELS=%s in the environment", set, want);
        return buf;
    }
    if (available) return NULL;
    char lacks[160];
    test_cpu_lacks(set, lacks, sizeof lacks);
    if (lacks[0]) {
        snprintf(buf, cap, "kernel set %s: this CPU lacks %s", set, lacks);
    } else {
        /* The CPU has what the set needs, so the build should have it: a failure, not a skip
         * (a kernel file compiled without its flags in sources.list builds a stub). */
        snprintf(buf, cap, "kernel set %s: missing from the library although this CPU has its instructions", set);
        fprintf(stderr, "%s:%d: CHECK failed: %s (compiled without its flags? sources.list)\n", __FILE__, __LINE__,
                buf);
        if (test_current_name != NULL) test_current_failed = 1;
        else test_failed_count++;
    }
    return buf;
}

#endif

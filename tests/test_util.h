/* Minimal test harness shared by every test program.
 *
 * Each test file defines test functions, calls them through RUN_TEST, and ends main()
 * with `return test_report();`, which prints the closing line "N passed, N failed"
 * that CI reads, and returns non-zero if anything failed. */
#ifndef TQ_TEST_UTIL_H
#define TQ_TEST_UTIL_H

#include <math.h>
#include <stdio.h>

static int test_passed_count;
static int test_failed_count;
static int test_current_failed;

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

#define RUN_TEST(fn)                                                                      \
    do {                                                                                  \
        test_current_failed = 0;                                                          \
        fn();                                                                             \
        if (test_current_failed) {                                                        \
            test_failed_count++;                                                          \
            fprintf(stderr, "FAIL %s\n", #fn);                                            \
        } else {                                                                          \
            test_passed_count++;                                                          \
            printf("ok   %s\n", #fn);                                                     \
        }                                                                                 \
        fflush(stdout);                                                                   \
    } while (0)

static inline int test_report(void) {
    printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
    return test_failed_count == 0 ? 0 : 1;
}

#endif

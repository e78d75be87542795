/* A minimal test harness for the C and C++ tests: CHECK records a failure and goes on. */
#ifndef SDM_P1_TEST_UTIL_H
#define SDM_P1_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int g_checks = 0, g_failures = 0, g_tests = 0, g_failed_tests = 0;

#define CHECK_MSG(cond, msg)                                                     \
    do {                                                                         \
        ++g_checks;                                                              \
        if (!(cond)) {                                                           \
            ++g_failures;                                                        \
            printf("  FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, (msg)); \
        }                                                                        \
    } while (0)
#define CHECK(cond) CHECK_MSG(cond, "")

#define RUN(test)                                                         \
    do {                                                                  \
        const int before = g_failures;                                    \
        test();                                                           \
        ++g_tests;                                                        \
        if (g_failures != before) ++g_failed_tests;                       \
        printf("%s %s\n", g_failures == before ? "ok  " : "FAIL", #test); \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed (%d checks)\n", g_tests - g_failed_tests, g_failed_tests, g_checks);
    return g_failed_tests == 0 ? 0 : 1;
}

/* |got - want| within `ulps` units in the last place of float32 at want. */
static inline int near_ulps(float got, double want, int ulps) {
    const double ulp = want == 0.0 ? ldexp(1.0, -149) : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - want) <= ulps * ulp;
}

#endif /* SDM_P1_TEST_UTIL_H */

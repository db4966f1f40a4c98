/* A plain table of unit tests. Each test file:
 *   static void test_foo(void) { NB_CHECK(x == 1); NB_CHECK_NEAR(a, b, 1e-6); }
 *   static const nb_test tests[] = {{"foo", test_foo}, ...};
 *   int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
 * `test_x NAME_SUBSTRING` runs only matching tests. A test calls nb_test_skip("why") to
 * skip (the whole binary exits 77 when every test selected skipped). */
#ifndef NB_TESTS_NBTEST_H
#define NB_TESTS_NBTEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct nb_test {
    const char *name;
    void (*fn)(void);
} nb_test;

static int nb_test_failures_, nb_test_skipped_;

#define NB_CHECK(cond)                                                                  \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
            nb_test_failures_++;                                                        \
        }                                                                               \
    } while (0)

#define NB_CHECK_MSG(cond, ...)                                                         \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                      \
            nb_test_failures_++;                                                        \
        }                                                                               \
    } while (0)

#define NB_CHECK_NEAR(a, b, tol)                                                        \
    do {                                                                                \
        double nb_a_ = (double)(a), nb_b_ = (double)(b);                                \
        if (!(fabs(nb_a_ - nb_b_) <= (tol))) {                                          \
            fprintf(stderr, "  FAIL %s:%d: %s = %.9g, %s = %.9g (tol %g)\n", __FILE__,  \
                    __LINE__, #a, nb_a_, #b, nb_b_, (double)(tol));                     \
            nb_test_failures_++;                                                        \
        }                                                                               \
    } while (0)

/* Expect a status; print nb_last_error() when it differs. */
#define NB_CHECK_STATUS(expr, want)                                                     \
    do {                                                                                \
        nb_status nb_s_ = (expr);                                                       \
        if (nb_s_ != (want)) {                                                          \
            fprintf(stderr, "  FAIL %s:%d: %s returned %s (%s), wanted %s\n", __FILE__, \
                    __LINE__, #expr, nb_strerror(nb_s_), nb_last_error(),               \
                    nb_strerror(want));                                                 \
            nb_test_failures_++;                                                        \
        }                                                                               \
    } while (0)

#define NB_CHECK_OK(expr) NB_CHECK_STATUS(expr, NB_OK)

static inline void nb_test_skip(const char *why)
{
    fprintf(stderr, "  SKIP: %s\n", why);
    nb_test_skipped_++;
}

static inline int nb_test_main(const nb_test *tests, size_t n, int argc, char **argv)
{
    int ran = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
        int f0 = nb_test_failures_, s0 = nb_test_skipped_;
        fprintf(stderr, "[ RUN  ] %s\n", tests[i].name);
        tests[i].fn();
        ran++;
        if (nb_test_failures_ != f0) {
            failed++;
            fprintf(stderr, "[ FAIL ] %s\n", tests[i].name);
        } else if (nb_test_skipped_ != s0) {
            skipped++;
            fprintf(stderr, "[ SKIP ] %s\n", tests[i].name);
        } else {
            fprintf(stderr, "[  OK  ] %s\n", tests[i].name);
        }
    }
    fprintf(stderr, "%d tests: %d passed, %d failed, %d skipped\n", ran, ran - failed - skipped,
            failed, skipped);
    if (failed) return 1;
    if (ran == 0) {
        fprintf(stderr, "no test matched\n");
        return 1;
    }
    return skipped == ran ? 77 : 0;
}

#endif

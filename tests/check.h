/* The checks of a test program (header-only), on the public API alone: test_api.c, which may call only what the
 * library exports, uses it as it is; test_util.h, the harness of the other tests, includes it.
 *
 * CHECK records a failure and goes on; a test ends with `return h3t_finish("name");`.  A test that cannot run here
 * (no GPU, no MPI) calls h3t_skip("reason"): it prints "SKIP: reason" and exits 77, which ctest reports as skipped.
 * CHECK_FAILS first calls H3T_CLEAR_ERROR(), when the includer defines it, so that the message it checks for is the
 * call's own. */
#ifndef H3S_TEST_CHECK_H
#define H3S_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "h3s.h"

#ifndef H3T_CLEAR_ERROR
#define H3T_CLEAR_ERROR() ((void)0)
#endif

static int h3t_checks = 0, h3t_failures = 0;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        h3t_checks++;                                                                                                  \
        if (!(cond)) {                                                                                                 \
            h3t_failures++;                                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

/* The call must succeed; on failure print the library's message. */
#define CHECK_OK(expr)                                                                                                 \
    do {                                                                                                               \
        h3s_status h3t_s_ = (expr);                                                                                    \
        CHECK(h3t_s_ == H3S_OK, "%s -> %s: %s", #expr, h3s_status_name(h3t_s_), h3s_last_error());                     \
    } while (0)

/* The call must fail with `want` and leave a non-empty message. */
#define CHECK_FAILS(want, expr)                                                                                        \
    do {                                                                                                               \
        H3T_CLEAR_ERROR();                                                                                             \
        h3s_status h3t_s_ = (expr);                                                                                    \
        CHECK(h3t_s_ == (want), "%s -> %s (%s), expected %s", #expr, h3s_status_name(h3t_s_), h3s_last_error(),        \
              h3s_status_name(want));                                                                                  \
        CHECK(h3s_last_error()[0] != '\0', "%s left no error message", #expr);                                         \
    } while (0)

static inline void h3t_skip(const char *reason) {
    printf("SKIP: %s\n", reason);
    exit(77);
}

static inline int h3t_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, h3t_checks, h3t_failures);
    return h3t_failures ? 1 : 0;
}

#endif

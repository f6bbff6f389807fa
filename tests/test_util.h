/* Minimal test harness shared by every test program (header-only).
 *
 * CHECK records a failure and goes on; a test ends with `return h3t_finish();`.  A test that
 * cannot run here (no GPU, no MPI) calls h3t_skip("reason"): it prints "SKIP: reason" and
 * exits 77, which ctest reports as skipped. */
#ifndef H3S_TEST_UTIL_H
#define H3S_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/rng.h"
#include "h3s.h"

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
        h3s_clear_error();                                                                                             \
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

/* Allocate or abort the test (allocation failure is not what a test measures). */
static inline h3s_tensor h3t_alloc(h3s_dtype dtype, int ndim, const int64_t *shape) {
    h3s_tensor t;
    if (h3s_tensor_alloc(&t, dtype, ndim, shape) != H3S_OK) {
        fprintf(stderr, "test allocation failed: %s\n", h3s_last_error());
        exit(2);
    }
    return t;
}
static inline h3s_tensor h3t_alloc2(h3s_dtype dtype, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return h3t_alloc(dtype, 2, s);
}
static inline h3s_tensor h3t_alloc1(h3s_dtype dtype, int64_t a) { return h3t_alloc(dtype, 1, &a); }

/* Seeded normal values * scale written into a float tensor (rounded to its dtype). */
static inline void h3t_fill_normal(h3s_tensor *t, uint64_t seed, float scale) {
    int64_t n = h3s_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float v = h3s_rng_normal(seed, 77, (uint64_t)i) * scale;
        switch (t->dtype) {
        case H3S_F64: ((double *)t->data)[i] = v; break;
        case H3S_F32: ((float *)t->data)[i] = v; break;
        case H3S_BF16: ((uint16_t *)t->data)[i] = h3s_bf16_round(v); break;
        default: break;
        }
    }
}

/* Fill with a recognisable poison so unwritten outputs show up. */
static inline void h3t_poison(h3s_tensor *t) { memset(t->data, 0x7f, h3s_tensor_nbytes(t)); }

/* F64 copy of any float tensor (exact for BF16/F32 inputs). */
static inline h3s_tensor h3t_to_f64(const h3s_tensor *t) {
    h3s_tensor d = h3t_alloc(H3S_F64, t->ndim, t->shape);
    if (h3s_tensor_convert(t, &d) != H3S_OK) {
        fprintf(stderr, "convert failed: %s\n", h3s_last_error());
        exit(2);
    }
    return d;
}

/* ||a - ref|| / ||ref|| over all elements; a any float dtype, ref F64.  NaN anywhere -> inf. */
static inline double h3t_rel_l2(const h3s_tensor *a, const h3s_tensor *ref) {
    int64_t n = h3s_tensor_numel(ref);
    if (h3s_tensor_numel(a) != n) return INFINITY;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = h3s_tensor_get_f64(a, i), r = h3s_tensor_get_f64(ref, i);
        if (isnan(x) || isnan(r)) return INFINITY;
        num += (x - r) * (x - r);
        den += r * r;
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static inline int h3t_bitwise_equal(const h3s_tensor *a, const h3s_tensor *b) {
    return a->dtype == b->dtype && h3s_tensor_nbytes(a) == h3s_tensor_nbytes(b) &&
           memcmp(a->data, b->data, h3s_tensor_nbytes(a)) == 0;
}

/* Rows [r0, r0+n) of a 2-D tensor, as a borrowed view. */
static inline h3s_tensor h3t_rows(const h3s_tensor *t, int64_t r0, int64_t n) {
    int64_t s[2] = {n, t->shape[1]};
    return h3s_tensor_view((char *)t->data + (size_t)(r0 * t->shape[1]) * h3s_dtype_size(t->dtype), t->dtype, 2, s);
}

/* Bitwise comparison of n rows of a starting at ra with n rows of b starting at rb. */
static inline int h3t_rows_equal(const h3s_tensor *a, int64_t ra, const h3s_tensor *b, int64_t rb, int64_t n) {
    size_t row = (size_t)a->shape[1] * h3s_dtype_size(a->dtype);
    if (a->dtype != b->dtype || a->shape[1] != b->shape[1]) return 0;
    return memcmp((const char *)a->data + (size_t)ra * row, (const char *)b->data + (size_t)rb * row,
                  row * (size_t)n) == 0;
}

#endif

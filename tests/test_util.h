/* Minimal test harness shared by every test program but test_api.c (header-only): the checks of check.h, and
 * tensors to test with. */
#ifndef H3S_TEST_UTIL_H
#define H3S_TEST_UTIL_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/rng.h"
#include "h3s.h"

/* the library's own error state can be reset here (test_api.c, on the public API alone, cannot) */
#define H3T_CLEAR_ERROR() h3s_clear_error()
#include "check.h"

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

/* A new [a, b] / [a] tensor of h3t_fill_normal values. */
static inline h3s_tensor h3t_normal2(h3s_dtype dtype, int64_t a, int64_t b, uint64_t seed, float scale) {
    h3s_tensor t = h3t_alloc2(dtype, a, b);
    h3t_fill_normal(&t, seed, scale);
    return t;
}
static inline h3s_tensor h3t_normal1(h3s_dtype dtype, int64_t a, uint64_t seed, float scale) {
    h3s_tensor t = h3t_alloc1(dtype, a);
    h3t_fill_normal(&t, seed, scale);
    return t;
}

/* Fill with a recognisable poison so unwritten outputs show up. */
#define H3T_POISON_BYTE 0x7f
static inline void h3t_poison(h3s_tensor *t) { memset(t->data, H3T_POISON_BYTE, h3s_tensor_nbytes(t)); }

/* Every byte of t still holds the poison of h3t_poison. */
static inline int h3t_all_poison(const h3s_tensor *t) {
    const unsigned char *b = (const unsigned char *)t->data;
    size_t n = h3s_tensor_nbytes(t);
    for (size_t i = 0; i < n; i++)
        if (b[i] != H3T_POISON_BYTE) return 0;
    return 1;
}

/* Every element of a float tensor equals 0 (either sign). */
static inline int h3t_all_zero(const h3s_tensor *t) {
    for (int64_t i = 0; i < h3s_tensor_numel(t); i++)
        if (h3s_tensor_get_f64(t, i) != 0.0) return 0;
    return 1;
}

/* A malloc'd copy of t's bytes (never NULL for an empty tensor; the caller frees it). */
static inline void *h3t_snapshot(const h3s_tensor *t) {
    size_t n = h3s_tensor_nbytes(t);
    void *c = malloc(n ? n : 1);
    if (!c) {
        fprintf(stderr, "test allocation failed\n");
        exit(2);
    }
    if (n) memcpy(c, t->data, n);
    return c;
}

/* Fail closed: the outputs t[] (NULL entries ignored) of a call that must fail are poisoned
 * before it and must be byte-identical after it. */
#define H3T_MAX_OUTS 8
typedef struct h3t_outs {
    h3s_tensor *t[H3T_MAX_OUTS];
    void *copy[H3T_MAX_OUTS];
} h3t_outs;

static inline void h3t_outs_poison(h3t_outs *o) {
    for (int i = 0; i < H3T_MAX_OUTS; i++)
        if (o->t[i]) {
            h3t_poison(o->t[i]);
            o->copy[i] = h3t_snapshot(o->t[i]);
        }
}

static inline void h3t_outs_check(h3t_outs *o, const char *what) {
    for (int i = 0; i < H3T_MAX_OUTS; i++)
        if (o->t[i]) {
            size_t n = h3s_tensor_nbytes(o->t[i]);
            CHECK(n == 0 || memcmp(o->t[i]->data, o->copy[i], n) == 0, "%s: output %d was written by a failing call",
                  what, i);
            free(o->copy[i]);
            o->copy[i] = NULL;
        }
}

/* CHECK_FAILS, and the outputs of *outsp left untouched. */
#define CHECK_FAILS_UNWRITTEN(want, outsp, expr)                                                                       \
    do {                                                                                                               \
        h3t_outs_poison(outsp);                                                                                        \
        CHECK_FAILS(want, expr);                                                                                       \
        h3t_outs_check(outsp, #expr);                                                                                  \
    } while (0)

/* F64 copy of any float tensor (exact for BF16/F32 inputs). */
static inline h3s_tensor h3t_to_f64(const h3s_tensor *t) {
    h3s_tensor d = h3t_alloc(H3S_F64, t->ndim, t->shape);
    if (h3s_tensor_convert(t, &d) != H3S_OK) {
        fprintf(stderr, "convert failed: %s\n", h3s_last_error());
        exit(2);
    }
    return d;
}

/* Columns [c0, c0 + n) of a 2-D float tensor, as a new F64 tensor. */
static inline h3s_tensor h3t_columns(const h3s_tensor *t, int64_t c0, int64_t n) {
    int64_t M = t->shape[0], W = t->shape[1];
    h3s_tensor o = h3t_alloc2(H3S_F64, M, n);
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < n; j++)
            ((double *)o.data)[m * n + j] = h3s_tensor_get_f64(t, m * W + c0 + j);
    return o;
}

/* With H3S_TEST_VERBOSE set, print a measured error next to its bound; returns e. */
static inline double h3t_measured(const char *what, double e, double bound) {
    if (getenv("H3S_TEST_VERBOSE")) printf("  %-44s %.3e  (bound %.3e)\n", what, e, bound);
    return e;
}

/* The BF16 value nearest to v (ties: either), computed from the double directly. */
static inline double h3t_bf16_nearest(double v) {
    uint16_t b = h3s_bf16_round((float)v);
    double best = h3s_bf16_value(b), err = fabs(best - v);
    for (int d = -1; d <= 1; d += 2) {
        double cv = h3s_bf16_value((uint16_t)(b + d));
        if (!isnan(cv) && fabs(cv - v) < err) {
            best = cv;
            err = fabs(cv - v);
        }
    }
    return best;
}

/* Fraction of the BF16 elements of y equal to the correctly rounded golden value (ref). */
static inline double h3t_frac_correctly_rounded(const h3s_tensor *y, const h3s_tensor *ref) {
    int64_t n = h3s_tensor_numel(ref), hit = 0;
    if (n == 0) return 1.0;
    for (int64_t i = 0; i < n; i++)
        hit += h3s_tensor_get_f64(y, i) == h3t_bf16_nearest(h3s_tensor_get_f64(ref, i));
    return (double)hit / (double)n;
}

/* silu(x) = x / (1 + exp(-x)) in double: the reference formula of the golden checks. */
static inline double h3t_silu(double x) { return x / (1.0 + exp(-x)); }

/* Central differences against an analytic gradient: every entry of the F64 tensor `param` is
 * moved by +-1e-6, (loss(+) - loss(-)) / 2e-6 must match grad (F64, the shape of param) within
 * 1e-7 (1 + max |grad|).  loss(ctx) recomputes the scalar loss; param is restored. */
static inline void h3t_fd_check(double (*loss)(void *), void *ctx, h3s_tensor *param, const h3s_tensor *grad,
                                const char *what, const char *name) {
    const double h = 1e-6;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < h3s_tensor_numel(param); i++) {
        double *p = (double *)param->data + i, keep = *p;
        *p = keep + h;
        double lp = loss(ctx);
        *p = keep - h;
        double lm = loss(ctx);
        *p = keep;
        double fd = (lp - lm) / (2 * h), an = ((double *)grad->data)[i];
        worst = fmax(worst, fabs(fd - an));
        scale = fmax(scale, fabs(an));
    }
    CHECK(worst <= 1e-7 * (1 + scale), "%s %s vs central differences: worst %g (scale %g)", what, name, worst, scale);
}

/* The whole file at path, malloc'd and NUL-terminated (*out = NULL and 0 if it cannot be
 * opened); returns its length. */
static inline size_t h3t_read_file(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *out = NULL;
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    size_t got = fread(*out, 1, (size_t)n, f);
    fclose(f);
    (*out)[got] = 0;
    return got;
}

/* Create or replace path with len bytes of data. */
static inline void h3t_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

/* A fresh directory from a mkdtemp template such as "/tmp/h3s_test_x_XXXXXX" (rewritten in
 * place); a test that cannot have one stops with exit status 2. */
static inline void h3t_make_temp_dir(char *templ) {
    if (!mkdtemp(templ)) {
        perror("mkdtemp");
        exit(2);
    }
}

/* Entries of dir other than "." and ".."; -1 when it cannot be opened. */
static inline int h3t_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
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

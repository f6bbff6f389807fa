/* Linear forward/backward: accuracy against the FP64 golden, the pinned operation order, repeat,
 * row/batch invariance, thread invariance, vector kernels == scalar reference bitwise, bad
 * input, boundaries (M = 0, K = 0, N = 0, odd sizes). */
#include <float.h>
#include <math.h>

#include "ops/fold.h"
#include "ops/linear_internal.h"
#include "ops/ops.h"
#include "test_util.h"

#define U32 (1.0 / 16777216.0) /* unit roundoff of FP32: 2^-24 */
#define UBF16 (1.0 / 256.0)    /* unit roundoff of BF16 (8-bit significand): 2^-8 */

static h3s_tensor rnd2(h3s_dtype dt, int64_t a, int64_t b, uint64_t seed) {
    h3s_tensor t = h3t_alloc2(dt, a, b);
    h3t_fill_normal(&t, seed, 1.0f);
    return t;
}

static h3s_tensor rnd1(h3s_dtype dt, int64_t a, uint64_t seed) {
    h3s_tensor t = h3t_alloc1(dt, a);
    h3t_fill_normal(&t, seed, 1.0f);
    return t;
}

/* F64 copy of |t|: feeding it to the golden gives sum |a||b| per output, the scale of every
 * rounding-error bound below. */
static h3s_tensor abs_f64(const h3s_tensor *t) {
    h3s_tensor d = h3t_to_f64(t);
    double *v = d.data;
    for (int64_t i = 0; i < h3s_tensor_numel(&d); i++)
        v[i] = fabs(v[i]);
    return d;
}

static double l2(const h3s_tensor *t) {
    double s = 0;
    for (int64_t i = 0; i < h3s_tensor_numel(t); i++) {
        double v = h3s_tensor_get_f64(t, i);
        s += v * v;
    }
    return sqrt(s);
}

/* gamma_n = n u / (1 - n u): the classic bound on n successive FP32 roundings. */
static double gamma32(double n) { return n * U32 / (1 - n * U32); }

static float f32_at(const h3s_tensor *t, int64_t i) { return (float)h3s_tensor_get_f64(t, i); }

static uint32_t bits_of(const h3s_tensor *t, int64_t i) {
    if (t->dtype == H3S_BF16) return ((const uint16_t *)t->data)[i];
    uint32_t u;
    memcpy(&u, (const float *)t->data + i, 4);
    return u;
}

static uint32_t bits_rounded(float v, h3s_dtype dt) {
    if (dt == H3S_BF16) return h3s_bf16_round(v);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

static void free_all(h3s_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        h3s_tensor_free(t[i]);
}

/* ------------------------------------------------------------------ 1. accuracy */

static void test_accuracy(h3s_dtype dt, int64_t M, int64_t K, int64_t N) {
    const char *name = h3s_dtype_name(dt);
    h3s_tensor x = rnd2(dt, M, K, 11), w = rnd2(dt, N, K, 12), b = rnd1(dt, N, 13), y = h3t_alloc2(dt, M, N);
    h3s_tensor dy = rnd2(H3S_F32, M, N, 14), dx = h3t_alloc2(H3S_F32, M, K), dw = h3t_alloc2(H3S_F32, N, K),
               db = h3t_alloc1(H3S_F32, N);
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &y));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db));

    h3s_tensor xd = h3t_to_f64(&x), wd = h3t_to_f64(&w), bd = h3t_to_f64(&b), dyd = h3t_to_f64(&dy);
    h3s_tensor yg = h3t_alloc2(H3S_F64, M, N), dxg = h3t_alloc2(H3S_F64, M, K), dwg = h3t_alloc2(H3S_F64, N, K),
               dbg = h3t_alloc1(H3S_F64, N);
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yg));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxg, &dwg, &dbg));
    h3s_tensor xa = abs_f64(&x), wa = abs_f64(&w), ba = abs_f64(&b), dya = abs_f64(&dy);
    h3s_tensor ya = h3t_alloc2(H3S_F64, M, N), dxa = h3t_alloc2(H3S_F64, M, K), dwa = h3t_alloc2(H3S_F64, N, K),
               dba = h3t_alloc1(H3S_F64, N);
    CHECK_OK(h3s_linear_forward(&xa, &wa, &ba, &ya));
    CHECK_OK(h3s_linear_backward(&xa, &wa, &dya, &dxa, &dwa, &dba));

    /* Forward.  y = round_out(s), s = the FP32 chain of K FMAs plus the bias add: K + 1
     * roundings, so |s - y*| <= gamma_{K+1} (sum_k |x||w| + |b|) = gamma_{K+1} ya elementwise,
     * and the one output rounding adds u_out |s| (u_out = 2^-8 for BF16, whose significand has 8
     * bits, 2^-24 for F32).  Hence
     *   rel-L2 <= u_out + (1 + u_out) gamma_{K+1} ||ya|| / ||y*||
     * (~2^-8 + 3e-4 for BF16 here; ~3e-4 worst case, ~1e-6 typical, for F32). */
    const double u_out = dt == H3S_BF16 ? UBF16 : U32, gf = gamma32((double)K + 1);
    double rel = h3t_rel_l2(&y, &yg), bound = u_out + (1 + u_out) * gf * l2(&ya) / l2(&yg);
    CHECK(rel <= bound, "%s forward rel-L2 %.3e > bound %.3e", name, rel, bound);
    int64_t bad = 0;
    for (int64_t i = 0; i < M * N; i++) {
        double e = fabs(h3s_tensor_get_f64(&y, i) - ((double *)yg.data)[i]), a = ((double *)ya.data)[i];
        if (e > u_out * (fabs(((double *)yg.data)[i]) + gf * a) + gf * a) bad++;
    }
    CHECK(bad == 0, "%s forward: %lld elements exceed their elementwise error bound", name, (long long)bad);
    printf("accuracy %s M=%lld K=%lld N=%lld: forward rel-L2 %.3e (bound %.3e)", name, (long long)M, (long long)K,
           (long long)N, rel, bound);

    /* dx: an FP32 FMA chain over N terms, output F32 (no further rounding):
     *   rel-L2 <= gamma_N ||(|dy| |w|)|| / ||dx*||. */
    double gx = gamma32((double)N);
    rel = h3t_rel_l2(&dx, &dxg), bound = gx * l2(&dxa) / l2(&dxg);
    CHECK(rel <= bound, "%s dx rel-L2 %.3e > bound %.3e", name, rel, bound);
    printf(", dx %.3e (%.3e)", rel, bound);

    /* dw, db: each output is a chain of at most 256 roundings inside a tile, then one rounding
     * per further tile in the fold: gamma_{min(M,256) + ceil(M/256)}. */
    double L = (double)(M < H3S_FOLD_TILE ? M : H3S_FOLD_TILE) + (double)((M + H3S_FOLD_TILE - 1) / H3S_FOLD_TILE);
    rel = h3t_rel_l2(&dw, &dwg), bound = gamma32(L) * l2(&dwa) / l2(&dwg);
    CHECK(rel <= bound, "%s dw rel-L2 %.3e > bound %.3e", name, rel, bound);
    printf(", dw %.3e (%.3e)", rel, bound);
    rel = h3t_rel_l2(&db, &dbg), bound = gamma32(L) * l2(&dba) / l2(&dbg);
    CHECK(rel <= bound, "%s db rel-L2 %.3e > bound %.3e", name, rel, bound);
    printf(", db %.3e (%.3e)\n", rel, bound);

    h3s_tensor *all[] = {&x,  &w,   &b,   &y,   &dy, &dx, &dw, &db,  &xd, &wd,  &bd,  &dyd,
                         &yg, &dxg, &dwg, &dbg, &xa, &wa, &ba, &dya, &ya, &dxa, &dwa, &dba};
    free_all(all, (int)(sizeof all / sizeof all[0]));
}

/* ------------------------------------------------------------------ the pinned order
 * Recompute sample outputs here, independently of the library, in the documented order:
 * forward acc = +0, acc = fmaf(x, w, acc) for k ascending, + bias, one rounding; dw the same
 * chain inside each 256-row tile from +0, tiles folded in ascending order; db the fold of
 * ops/fold.h.  A reversed k order must give different bits for some sample (so this test has
 * the power to see a wrong order). */
static void test_pinned_order(h3s_dtype dt) {
    const int64_t M = 600, K = 300, N = 40;
    h3s_tensor x = rnd2(dt, M, K, 21), w = rnd2(dt, N, K, 22), b = rnd1(dt, N, 23), y = h3t_alloc2(dt, M, N);
    h3s_tensor dy = rnd2(H3S_F32, M, N, 24), dw = h3t_alloc2(H3S_F32, N, K), db = h3t_alloc1(H3S_F32, N);
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &y));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, NULL, &dw, &db));
    int mismatches = 0, reversed_differs = 0;
    for (int64_t m = 0; m < M; m += 37) {
        for (int64_t n = 0; n < N; n += 7) {
            float acc = 0.0f, rev = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc = fmaf(f32_at(&x, m * K + k), f32_at(&w, n * K + k), acc);
            for (int64_t k = K - 1; k >= 0; k--)
                rev = fmaf(f32_at(&x, m * K + k), f32_at(&w, n * K + k), rev);
            acc = acc + f32_at(&b, n);
            rev = rev + f32_at(&b, n);
            if (bits_of(&y, m * N + n) != bits_rounded(acc, dt)) mismatches++;
            if (bits_rounded(rev, H3S_F32) != bits_rounded(acc, H3S_F32)) reversed_differs++;
        }
    }
    CHECK(mismatches == 0, "%s forward: %d sampled outputs differ from the documented chain", h3s_dtype_name(dt),
          mismatches);
    CHECK(reversed_differs > 0, "%s: reversed k order never changes the bits (test has no power)", h3s_dtype_name(dt));
    mismatches = 0;
    for (int64_t n = 0; n < N; n += 3) {
        for (int64_t k = 0; k < K; k += 29) {
            float total = 0.0f;
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {
                float part = 0.0f;
                for (int64_t m = t0; m < M && m < t0 + H3S_FOLD_TILE; m++)
                    part = fmaf(((float *)dy.data)[m * N + n], f32_at(&x, m * K + k), part);
                total = t0 == 0 ? part : total + part;
            }
            if (bits_of(&dw, n * K + k) != bits_rounded(total, H3S_F32)) mismatches++;
        }
        float total = 0.0f;
        for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {
            float part = ((float *)dy.data)[t0 * N + n];
            for (int64_t m = t0 + 1; m < M && m < t0 + H3S_FOLD_TILE; m++)
                part = part + ((float *)dy.data)[m * N + n];
            total = t0 == 0 ? part : total + part;
        }
        if (bits_of(&db, n) != bits_rounded(total, H3S_F32)) mismatches++;
    }
    CHECK(mismatches == 0, "%s backward: %d sampled dw/db outputs differ from the documented fold", h3s_dtype_name(dt),
          mismatches);
    h3s_tensor *all[] = {&x, &w, &b, &y, &dy, &dw, &db};
    free_all(all, 7);
}

/* ------------------------------------------------------------------ 2. repeat */

static void test_repeat(h3s_dtype dt) {
    const int64_t M = 300, K = 70, N = 50;
    h3s_tensor x = rnd2(dt, M, K, 31), w = rnd2(dt, N, K, 32), b = rnd1(dt, N, 33), dy = rnd2(H3S_F32, M, N, 34);
    h3s_tensor y1 = h3t_alloc2(dt, M, N), y2 = h3t_alloc2(dt, M, N);
    h3s_tensor dx1 = h3t_alloc2(H3S_F32, M, K), dx2 = h3t_alloc2(H3S_F32, M, K);
    h3s_tensor dw1 = h3t_alloc2(H3S_F32, N, K), dw2 = h3t_alloc2(H3S_F32, N, K);
    h3s_tensor db1 = h3t_alloc1(H3S_F32, N), db2 = h3t_alloc1(H3S_F32, N);
    h3t_poison(&y2), h3t_poison(&dx2), h3t_poison(&dw2), h3t_poison(&db2);
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &y1));
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &y2));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx1, &dw1, &db1));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx2, &dw2, &db2));
    CHECK(h3t_bitwise_equal(&y1, &y2), "%s forward repeat differs", h3s_dtype_name(dt));
    CHECK(h3t_bitwise_equal(&dx1, &dx2) && h3t_bitwise_equal(&dw1, &dw2) && h3t_bitwise_equal(&db1, &db2),
          "%s backward repeat differs", h3s_dtype_name(dt));
    h3s_tensor *all[] = {&x, &w, &b, &dy, &y1, &y2, &dx1, &dx2, &dw1, &dw2, &db1, &db2};
    free_all(all, 12);
}

/* ------------------------------------------------------------------ 3. rows, kernels */

/* Rows [o, o+s) of src placed in reversed order in a new [s, W] tensor. */
static h3s_tensor rows_reversed(const h3s_tensor *src, int64_t o, int64_t s) {
    h3s_tensor t = h3t_alloc2(src->dtype, s, src->shape[1]);
    size_t row = (size_t)src->shape[1] * h3s_dtype_size(src->dtype);
    for (int64_t i = 0; i < s; i++)
        memcpy((char *)t.data + (size_t)i * row, (const char *)src->data + (size_t)(o + s - 1 - i) * row, row);
    return t;
}

static void test_row_invariance(h3s_dtype dt, int64_t M, int64_t K, int64_t N, const int64_t (*cases)[2], int ncases) {
    h3s_tensor x = rnd2(dt, M, K, 41), w = rnd2(dt, N, K, 42), b = rnd1(dt, N, 43), dy = rnd2(H3S_F32, M, N, 44);
    h3s_tensor y = h3t_alloc2(dt, M, N), dx = h3t_alloc2(H3S_F32, M, K);
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &y));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx, NULL, NULL));
    for (int c = 0; c < ncases; c++) {
        const int64_t s = cases[c][0], o = cases[c][1];
        h3s_tensor xs = rows_reversed(&x, o, s), dys = rows_reversed(&dy, o, s);
        h3s_tensor ys = h3t_alloc2(dt, s, N), dxs = h3t_alloc2(H3S_F32, s, K);
        CHECK_OK(h3s_linear_forward(&xs, &w, &b, &ys));
        CHECK_OK(h3s_linear_backward(&xs, &w, &dys, &dxs, NULL, NULL));
        int bad_y = 0, bad_dx = 0;
        for (int64_t i = 0; i < s; i++) {
            bad_y += !h3t_rows_equal(&ys, i, &y, o + s - 1 - i, 1);
            bad_dx += !h3t_rows_equal(&dxs, i, &dx, o + s - 1 - i, 1);
        }
        CHECK(bad_y == 0 && bad_dx == 0, "%s M=%lld rows %lld..: %d y rows and %d dx rows differ from M=%lld",
              h3s_dtype_name(dt), (long long)s, (long long)o, bad_y, bad_dx, (long long)M);
        h3s_tensor *all[] = {&xs, &dys, &ys, &dxs};
        free_all(all, 4);
    }
    h3s_tensor *all[] = {&x, &w, &b, &dy, &y, &dx};
    free_all(all, 6);
}

typedef struct lin_outputs {
    h3s_tensor y, dx, dw, db;
} lin_outputs;

static lin_outputs run_all(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, const h3s_tensor *dy) {
    lin_outputs o;
    o.y = h3t_alloc2(x->dtype, x->shape[0], w->shape[0]);
    o.dx = h3t_alloc2(H3S_F32, x->shape[0], x->shape[1]);
    o.dw = h3t_alloc2(H3S_F32, w->shape[0], w->shape[1]);
    o.db = h3t_alloc1(H3S_F32, w->shape[0]);
    h3t_poison(&o.y), h3t_poison(&o.dx), h3t_poison(&o.dw), h3t_poison(&o.db);
    CHECK_OK(h3s_linear_forward(x, w, b, &o.y));
    CHECK_OK(h3s_linear_backward(x, w, dy, &o.dx, &o.dw, &o.db));
    return o;
}

static int outputs_equal(const lin_outputs *a, const lin_outputs *b) {
    return h3t_bitwise_equal(&a->y, &b->y) && h3t_bitwise_equal(&a->dx, &b->dx) && h3t_bitwise_equal(&a->dw, &b->dw) &&
           h3t_bitwise_equal(&a->db, &b->db);
}

static void free_outputs(lin_outputs *o) {
    h3s_tensor_free(&o->y), h3s_tensor_free(&o->dx), h3s_tensor_free(&o->dw), h3s_tensor_free(&o->db);
}

/* Every vector kernel this CPU has against the scalar reference, bitwise. */
static void test_kernels_match_scalar(h3s_dtype dt, int64_t M, int64_t K, int64_t N, int with_bias, int with_inf) {
    h3s_tensor x = rnd2(dt, M, K, 51), w = rnd2(dt, N, K, 52), b = rnd1(dt, N, 53), dy = rnd2(H3S_F32, M, N, 54);
    const int64_t ms = M / 2, ns = N / 2;
    if (with_inf) {
        /* x[ms, 1..2] = +Inf, w[ns, 1] = +Inf, w[ns, 2] = -Inf: Inf rows and columns everywhere
         * and the default NaN (Inf - Inf) at y[ms, ns]; every path must give the same bits. */
        const float vals[4] = {INFINITY, INFINITY, INFINITY, -INFINITY};
        const int64_t at[4] = {ms * K + 1, ms * K + 2, ns * K + 1, ns * K + 2};
        for (int i = 0; i < 4; i++) {
            h3s_tensor *t = i < 2 ? &x : &w;
            h3s_tensor one = h3s_tensor_view((float *)vals + i, H3S_F32, 1, (const int64_t[]){1});
            h3s_tensor dst =
                h3s_tensor_view((char *)t->data + (size_t)at[i] * h3s_dtype_size(dt), dt, 1, (const int64_t[]){1});
            CHECK_OK(h3s_tensor_convert(&one, &dst));
        }
    }
    CHECK_OK(h3s_linear_set_impl(H3S_LINEAR_SCALAR));
    lin_outputs ref = run_all(&x, &w, with_bias ? &b : NULL, &dy);
    if (with_inf)
        CHECK(isnan(h3s_tensor_get_f64(&ref.y, ms * N + ns)) && isinf(h3s_tensor_get_f64(&ref.y, ms * N + ns + 1)),
              "Inf inputs did not give NaN and Inf outputs");
    int compared = 0;
    for (int impl = H3S_LINEAR_AVX2; impl <= H3S_LINEAR_AVX512; impl++) {
        if (!h3s_linear_impl_available((h3s_linear_impl)impl)) continue;
        CHECK_OK(h3s_linear_set_impl((h3s_linear_impl)impl));
        lin_outputs o = run_all(&x, &w, with_bias ? &b : NULL, &dy);
        CHECK(outputs_equal(&o, &ref), "%s kernel %s != scalar (M=%lld K=%lld N=%lld bias=%d inf=%d)",
              h3s_dtype_name(dt), h3s_linear_impl_name((h3s_linear_impl)impl), (long long)M, (long long)K, (long long)N,
              with_bias, with_inf);
        free_outputs(&o);
        compared++;
    }
    CHECK_OK(h3s_linear_set_impl(H3S_LINEAR_AUTO));
    if (!compared) printf("note: no vector kernel on this CPU; the scalar path is the only one\n");
    free_outputs(&ref);
    h3s_tensor *all[] = {&x, &w, &b, &dy};
    free_all(all, 4);
}

/* ------------------------------------------------------------------ 4. threads */

static void test_thread_invariance(h3s_dtype dt) {
    const int64_t M = 700, K = 130, N = 90; /* 3 fold tiles */
    h3s_tensor x = rnd2(dt, M, K, 61), w = rnd2(dt, N, K, 62), b = rnd1(dt, N, 63), dy = rnd2(H3S_F32, M, N, 64);
    int saved = h3s_get_num_threads();
    h3s_set_num_threads(1);
    lin_outputs one = run_all(&x, &w, &b, &dy);
    const int counts[] = {2, 4};
    for (int i = 0; i < 2; i++) {
        h3s_set_num_threads(counts[i]);
        lin_outputs o = run_all(&x, &w, &b, &dy);
        CHECK(h3t_bitwise_equal(&o.y, &one.y), "%s y: %d threads != 1 thread", h3s_dtype_name(dt), counts[i]);
        CHECK(h3t_bitwise_equal(&o.dx, &one.dx), "%s dx: %d threads != 1 thread", h3s_dtype_name(dt), counts[i]);
        CHECK(h3t_bitwise_equal(&o.dw, &one.dw), "%s dw: %d threads != 1 thread", h3s_dtype_name(dt), counts[i]);
        CHECK(h3t_bitwise_equal(&o.db, &one.db), "%s db: %d threads != 1 thread", h3s_dtype_name(dt), counts[i]);
        free_outputs(&o);
    }
    h3s_set_num_threads(saved);
    free_outputs(&one);
    h3s_tensor *all[] = {&x, &w, &b, &dy};
    free_all(all, 4);
}

/* ------------------------------------------------------------------ 5. bad input */

/* The call must fail with `want`, leave a message naming `what`, and leave y/dx/dw/db as they
 * were (poisoned). */
#define CHECK_REJECTS(want, what, expr)                                                                                \
    do {                                                                                                               \
        h3t_poison(&y), h3t_poison(&dx), h3t_poison(&dw), h3t_poison(&db);                                             \
        CHECK_FAILS(want, expr);                                                                                       \
        CHECK(strstr(h3s_last_error(), what) != NULL, "message of %s does not name '%s': %s", #expr, what,             \
              h3s_last_error());                                                                                       \
        CHECK(h3t_bitwise_equal(&y, &py) && h3t_bitwise_equal(&dx, &pdx) && h3t_bitwise_equal(&dw, &pdw) &&            \
                  h3t_bitwise_equal(&db, &pdb),                                                                        \
              "%s wrote an output", #expr);                                                                            \
    } while (0)

static void test_bad_input(void) {
    const int64_t M = 5, K = 6, N = 4;
    h3s_tensor x = rnd2(H3S_BF16, M, K, 71), w = rnd2(H3S_BF16, N, K, 72), b = rnd1(H3S_BF16, N, 73);
    h3s_tensor x32 = rnd2(H3S_F32, M, K, 71), w32 = rnd2(H3S_F32, N, K, 72), b32 = rnd1(H3S_F32, N, 73);
    h3s_tensor x64 = rnd2(H3S_F64, M, K, 71), w64 = rnd2(H3S_F64, N, K, 72);
    h3s_tensor xf16 = h3t_alloc2(H3S_F16, M, K), x1d = rnd1(H3S_BF16, M * K, 74);
    h3s_tensor wk = rnd2(H3S_BF16, N, K + 1, 75), b5 = rnd1(H3S_BF16, N + 1, 76);
    h3s_tensor y = h3t_alloc2(H3S_BF16, M, N), dy = rnd2(H3S_F32, M, N, 77), dx = h3t_alloc2(H3S_F32, M, K);
    h3s_tensor dw = h3t_alloc2(H3S_F32, N, K), db = h3t_alloc1(H3S_F32, N);
    h3s_tensor y32 = h3t_alloc2(H3S_F32, M, N), yn1 = h3t_alloc2(H3S_BF16, M, N + 1), dyb = rnd2(H3S_BF16, M, N, 78);
    h3s_tensor dw64 = h3t_alloc2(H3S_F64, N, K), dxk = h3t_alloc2(H3S_F32, M, K + 1), db2 = h3t_alloc1(H3S_F32, N + 1);
    h3s_tensor dyn = h3t_alloc2(H3S_F32, M, N + 1);
    h3s_tensor py = h3t_alloc2(H3S_BF16, M, N), pdx = h3t_alloc2(H3S_F32, M, K), pdw = h3t_alloc2(H3S_F32, N, K),
               pdb = h3t_alloc1(H3S_F32, N);
    h3t_poison(&py), h3t_poison(&pdx), h3t_poison(&pdw), h3t_poison(&pdb);

    /* forward */
    CHECK_REJECTS(H3S_ERR_INVALID, "x", h3s_linear_forward(NULL, &w, &b, &y));
    CHECK_REJECTS(H3S_ERR_INVALID, "w", h3s_linear_forward(&x, NULL, &b, &y));
    CHECK_REJECTS(H3S_ERR_INVALID, "y", h3s_linear_forward(&x, &w, &b, NULL));
    CHECK_REJECTS(H3S_ERR_SHAPE, "w", h3s_linear_forward(&x, &wk, &b, &y));
    CHECK_REJECTS(H3S_ERR_SHAPE, "b", h3s_linear_forward(&x, &w, &b5, &y));
    CHECK_REJECTS(H3S_ERR_SHAPE, "y", h3s_linear_forward(&x, &w, &b, &yn1));
    CHECK_REJECTS(H3S_ERR_SHAPE, "x", h3s_linear_forward(&x1d, &w, &b, &y));
    CHECK_REJECTS(H3S_ERR_DTYPE, "x", h3s_linear_forward(&xf16, &w, &b, &y));
    CHECK_REJECTS(H3S_ERR_DTYPE, "w", h3s_linear_forward(&x, &w32, &b, &y));   /* BF16 x, F32 w */
    CHECK_REJECTS(H3S_ERR_DTYPE, "b", h3s_linear_forward(&x, &w, &b32, &y));   /* F32 bias in BF16 */
    CHECK_REJECTS(H3S_ERR_DTYPE, "y", h3s_linear_forward(&x, &w, &b, &y32));   /* F32 y from BF16 */
    CHECK_REJECTS(H3S_ERR_DTYPE, "w", h3s_linear_forward(&x32, &w, &b32, &y)); /* F32 x, BF16 w */
    CHECK_REJECTS(H3S_ERR_DTYPE, "w", h3s_linear_forward(&x64, &w32, NULL, &y));
    CHECK_REJECTS(H3S_ERR_DTYPE, "y", h3s_linear_forward(&x64, &w64, NULL, &y)); /* golden into BF16 */
    {
        h3s_tensor alias = h3s_tensor_view(x.data, H3S_BF16, 2, (const int64_t[]){M, N});
        h3t_poison(&y);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_linear_forward(&x, &w, &b, &alias)); /* y overlaps x */
        CHECK(strstr(h3s_last_error(), "overlaps") != NULL, "alias message: %s", h3s_last_error());
    }
    x.device = 1; /* only flagged, never dereferenced: the mix is caught first */
    CHECK_REJECTS(H3S_ERR_DEVICE, "host", h3s_linear_forward(&x, &w, &b, &y));
    x.device = 7;
    CHECK_REJECTS(H3S_ERR_INVALID, "device", h3s_linear_forward(&x, &w, &b, &y));
    x.device = 0;

    /* backward */
    CHECK_REJECTS(H3S_ERR_INVALID, "x", h3s_linear_backward(NULL, &w, &dy, &dx, &dw, &db));
    CHECK_REJECTS(H3S_ERR_INVALID, "w", h3s_linear_backward(&x, NULL, &dy, &dx, &dw, &db));
    CHECK_REJECTS(H3S_ERR_INVALID, "dy", h3s_linear_backward(&x, &w, NULL, &dx, &dw, &db));
    CHECK_REJECTS(H3S_ERR_DTYPE, "dy", h3s_linear_backward(&x, &w, &dyb, &dx, &dw, &db)); /* BF16 gradient */
    CHECK_REJECTS(H3S_ERR_DTYPE, "w", h3s_linear_backward(&x, &w32, &dy, &dx, &dw, &db));
    CHECK_REJECTS(H3S_ERR_DTYPE, "dw", h3s_linear_backward(&x, &w, &dy, &dx, &dw64, &db));
    CHECK_REJECTS(H3S_ERR_DTYPE, "dy", h3s_linear_backward(&x64, &w64, &dy, NULL, NULL, NULL)); /* golden, F32 dy */
    CHECK_REJECTS(H3S_ERR_SHAPE, "dx", h3s_linear_backward(&x, &w, &dy, &dxk, &dw, &db));
    CHECK_REJECTS(H3S_ERR_SHAPE, "db", h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db2));
    CHECK_REJECTS(H3S_ERR_SHAPE, "dy", h3s_linear_backward(&x, &w, &dyn, &dx, &dw, &db));
    {
        h3s_tensor alias = h3s_tensor_view(dx.data, H3S_F32, 1, (const int64_t[]){N}); /* db inside dx */
        h3t_poison(&dx), h3t_poison(&dw);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_linear_backward(&x, &w, &dy, &dx, &dw, &alias));
        CHECK(h3t_bitwise_equal(&dx, &pdx) && h3t_bitwise_equal(&dw, &pdw), "aliased backward wrote an output");
    }
    dw.device = 1;
    CHECK_REJECTS(H3S_ERR_DEVICE, "dw", h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db));
    dw.device = 0;

    /* the internal switch */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_linear_set_impl((h3s_linear_impl)42));

    h3s_tensor *all[] = {&x,  &w,  &b,  &x32, &w32, &b32, &x64,  &w64, &xf16, &x1d, &wk, &b5,  &y,   &dy,
                         &dx, &dw, &db, &y32, &yn1, &dyb, &dw64, &dxk, &db2,  &dyn, &py, &pdx, &pdw, &pdb};
    free_all(all, (int)(sizeof all / sizeof all[0]));
}

/* ------------------------------------------------------------------ 6. boundaries */

static int all_positive_zero(const h3s_tensor *t) {
    for (int64_t i = 0; i < h3s_tensor_numel(t); i++)
        if (bits_of(t, i) != 0) return 0;
    return 1;
}

static void test_boundaries(h3s_dtype dt) {
    const char *name = h3s_dtype_name(dt);
    /* M = 0: nothing to compute forward; dw and db are empty sums (+0). */
    {
        h3s_tensor x = h3t_alloc2(dt, 0, 9), w = rnd2(dt, 5, 9, 81), b = rnd1(dt, 5, 82), y = h3t_alloc2(dt, 0, 5);
        h3s_tensor dy = h3t_alloc2(H3S_F32, 0, 5), dx = h3t_alloc2(H3S_F32, 0, 9), dw = h3t_alloc2(H3S_F32, 5, 9),
                   db = h3t_alloc1(H3S_F32, 5);
        h3t_poison(&dw), h3t_poison(&db);
        CHECK_OK(h3s_linear_forward(&x, &w, &b, &y));
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db));
        CHECK(all_positive_zero(&dw) && all_positive_zero(&db), "%s M=0: dw/db not +0", name);
        h3s_tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        free_all(all, 8);
    }
    /* K = 0: y = +0 + b (= b; no bias: +0); dx is empty, dw is [N, 0], db still sums dy. */
    {
        h3s_tensor x = h3t_alloc2(dt, 4, 0), w = h3t_alloc2(dt, 3, 0), b = rnd1(dt, 3, 83), y = h3t_alloc2(dt, 4, 3);
        h3s_tensor dy = rnd2(H3S_F32, 4, 3, 84), dx = h3t_alloc2(H3S_F32, 4, 0), dw = h3t_alloc2(H3S_F32, 3, 0),
                   db = h3t_alloc1(H3S_F32, 3);
        h3t_poison(&y);
        CHECK_OK(h3s_linear_forward(&x, &w, &b, &y));
        int bad = 0;
        for (int64_t m = 0; m < 4; m++)
            for (int64_t n = 0; n < 3; n++)
                bad += bits_of(&y, m * 3 + n) != bits_of(&b, n);
        CHECK(bad == 0, "%s K=0: y is not the bias (%d)", name, bad);
        h3t_poison(&y);
        CHECK_OK(h3s_linear_forward(&x, &w, NULL, &y));
        CHECK(all_positive_zero(&y), "%s K=0 without bias: y not +0", name);
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db));
        CHECK(fabsf(((float *)db.data)[1] - (((float *)dy.data)[1] + ((float *)dy.data)[4] + ((float *)dy.data)[7] +
                                             ((float *)dy.data)[10])) < 1e-5f,
              "%s K=0: db is not the column sum", name);
        h3s_tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        free_all(all, 8);
    }
    /* N = 0: y is [M, 0]; dx = dy @ w is an empty sum: +0. */
    {
        h3s_tensor x = rnd2(dt, 4, 7, 85), w = h3t_alloc2(dt, 0, 7), y = h3t_alloc2(dt, 4, 0);
        h3s_tensor dy = h3t_alloc2(H3S_F32, 4, 0), dx = h3t_alloc2(H3S_F32, 4, 7), dw = h3t_alloc2(H3S_F32, 0, 7),
                   db = h3t_alloc1(H3S_F32, 0);
        h3t_poison(&dx);
        CHECK_OK(h3s_linear_forward(&x, &w, NULL, &y));
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx, &dw, &db));
        CHECK(all_positive_zero(&dx), "%s N=0: dx not +0", name);
        h3s_tensor *all[] = {&x, &w, &y, &dy, &dx, &dw, &db};
        free_all(all, 7);
    }
    /* No bias and NULL gradient outputs. */
    {
        h3s_tensor x = rnd2(dt, 9, 37, 86), w = rnd2(dt, 60, 37, 87), y = h3t_alloc2(dt, 9, 60),
                   dy = rnd2(H3S_F32, 9, 60, 88);
        h3s_tensor xd = h3t_to_f64(&x), wd = h3t_to_f64(&w), yg = h3t_alloc2(H3S_F64, 9, 60);
        h3s_tensor db = h3t_alloc1(H3S_F32, 60);
        CHECK_OK(h3s_linear_forward(&x, &w, NULL, &y));
        CHECK_OK(h3s_linear_forward(&xd, &wd, NULL, &yg));
        double rel = h3t_rel_l2(&y, &yg);
        CHECK(rel <= (dt == H3S_BF16 ? UBF16 : 1e-5), "%s no-bias rel-L2 %.3e", name, rel);
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, NULL, NULL, &db));
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, NULL, NULL, NULL));
        h3s_tensor *all[] = {&x, &w, &y, &dy, &xd, &wd, &yg, &db};
        free_all(all, 8);
    }
}

/* linear_backward_rounded on the host: dy_bf16 (dy's rounding) is checked and adds nothing, so dx, dw and db are the
 * plain backward's bits; the F32 variant, another shape and an output over dy_bf16 are refused. */
static void test_rounded_dy(void) {
    const int64_t M = 37, K = 24, N = 40;
    h3s_tensor x = h3t_normal2(H3S_BF16, M, K, 70, 1.0f), w = h3t_normal2(H3S_BF16, N, K, 71, 0.2f);
    h3s_tensor dy = h3t_normal2(H3S_F32, M, N, 72, 1.0f), dyb = h3t_alloc2(H3S_BF16, M, N);
    CHECK_OK(h3s_tensor_convert(&dy, &dyb));
    h3s_tensor dx1 = h3t_alloc2(H3S_F32, M, K), dx2 = h3t_alloc2(H3S_F32, M, K);
    h3s_tensor dw1 = h3t_alloc2(H3S_F32, N, K), dw2 = h3t_alloc2(H3S_F32, N, K);
    h3s_tensor db1 = h3t_alloc1(H3S_F32, N), db2 = h3t_alloc1(H3S_F32, N);
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dx1, &dw1, &db1));
    CHECK_OK(h3s_linear_backward_rounded(&x, &w, &dy, &dyb, &dx2, &dw2, &db2));
    CHECK(h3t_bitwise_equal(&dx1, &dx2) && h3t_bitwise_equal(&dw1, &dw2) && h3t_bitwise_equal(&db1, &db2),
          "linear_backward_rounded on the host: not the plain backward's bits");
    h3s_tensor xf = h3t_normal2(H3S_F32, M, K, 73, 1.0f), wf = h3t_normal2(H3S_F32, N, K, 74, 0.2f);
    h3s_tensor bad = h3t_alloc2(H3S_BF16, M, N + 1), dxb = h3t_alloc2(H3S_BF16, M, 2 * K);
    h3s_tensor dx_over = dxb; /* dx viewing dy_bf16's bytes */
    dx_over.dtype = H3S_F32;
    dx_over.shape[1] = K;
    h3s_tensor dyb_over = dxb;
    dyb_over.shape[1] = N;
    h3t_outs oo = {{&dx2, &dxb}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_linear_backward_rounded(&xf, &wf, &dy, &dyb, &dx2, NULL, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &oo, h3s_linear_backward_rounded(&x, &w, &dy, &bad, &dx2, NULL, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_linear_backward_rounded(&x, &w, &dy, &dyb_over, &dx_over, NULL, NULL));
    /* dy_bf16 alone is a CUDA-backend option: the host reads dy */
    CHECK(!h3s_linear_backward_bf16_dy_only(&x, &w), "linear_backward_bf16_dy_only: 1 for host tensors");
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_linear_backward_rounded(&x, &w, NULL, &dyb, &dx2, NULL, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_linear_backward_rounded(&x, &w, NULL, NULL, &dx2, NULL, NULL));
    h3s_tensor *frees[] = {&x, &w, &dy, &dyb, &dx1, &dx2, &dw1, &dw2, &db1, &db2, &xf, &wf, &bad, &dxb};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

int main(void) {
    if (!getenv("OMP_NUM_THREADS")) h3s_set_num_threads(2);
    printf("linear kernel: %s\n", h3s_linear_impl_name(h3s_linear_get_impl()));
    test_accuracy(H3S_BF16, 520, 300, 72);
    test_accuracy(H3S_F32, 520, 300, 72);
    test_accuracy(H3S_BF16, 13, 37, 60);
    test_accuracy(H3S_F32, 13, 37, 60);
    test_pinned_order(H3S_BF16);
    test_pinned_order(H3S_F32);
    test_repeat(H3S_BF16);
    test_repeat(H3S_F32);
    /* (s, o): rows o..o+s-1 of the big problem, reversed, as an s-row problem */
    const int64_t small[][2] = {{1, 0}, {1, 137}, {1, 299}, {7, 0}, {7, 250}, {7, 293}, {300, 0}};
    test_row_invariance(H3S_BF16, 300, 300, 70, small, 7);
    test_row_invariance(H3S_F32, 300, 300, 70, small, 7);
    /* big enough for two row superblocks and two column chunks, with K > 256 */
    const int64_t big[][2] = {{1, 0}, {1, 599}, {7, 500}, {13, 250}};
    test_row_invariance(H3S_BF16, 600, 300, 2100, big, 4);
    /* shapes that cross every blocking edge: KC (K > 256), the fold tile (M > 256), the dw item
     * width (K > 512), several column chunks (N > 2048) and row superblocks, and ragged M, N, K */
    test_kernels_match_scalar(H3S_BF16, 300, 300, 70, 1, 0);
    test_kernels_match_scalar(H3S_F32, 300, 300, 70, 1, 0);
    test_kernels_match_scalar(H3S_F32, 100, 40, 530, 0, 0);
    test_kernels_match_scalar(H3S_BF16, 3, 2100, 1100, 1, 0);
    test_kernels_match_scalar(H3S_BF16, 600, 9, 2100, 1, 0); /* two column chunks, two row superblocks */
    test_kernels_match_scalar(H3S_BF16, 13, 37, 60, 1, 0);
    test_kernels_match_scalar(H3S_F32, 1, 37, 60, 1, 0);
    test_kernels_match_scalar(H3S_F32, 29, 45, 33, 1, 1);
    test_kernels_match_scalar(H3S_BF16, 29, 45, 33, 0, 1);
    test_thread_invariance(H3S_BF16);
    test_thread_invariance(H3S_F32);
    test_bad_input();
    test_rounded_dy();
    test_boundaries(H3S_BF16);
    test_boundaries(H3S_F32);
    return h3t_finish("test_linear");
}

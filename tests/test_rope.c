/* Rotary embedding: table (strict F32 / golden F64), rotate-half forward (BF16) and backward
 * (F32) -- accuracy against the golden, hand-computed values, exact adjoint, pass-through
 * bits, repeat / row / batch / thread invariance, bad input, boundaries.
 *
 * Error bounds (u = 2^-8: the unit roundoff of BF16, whose significand has 8 bits, so one
 * round-to-nearest changes a value by at most 2^-8 of itself; over many elements with spread
 * mantissas one rounding measures ~1.66e-3 in rel-L2, 0.42 u.  e = 2^-24, the F32 unit roundoff):
 *  - table: the strict angle a = f32(pos * inv_j) carries the f32 errors of inv_j (the f32
 *    exponent 2j/(2F), the f32 power, the f32 reciprocal: at most (ln(theta) + 2) e relative,
 *    11.3 e for theta = 1e4) and of the product (e): |da| <= 12.3 e |a| <= 7.4e-7 |a|; cos/sin
 *    then add one f32 rounding (<= e).  So every element is within 7.4e-7 |a| + e of the
 *    golden; table_bound() sums that over the elements (rel-L2 <= ||7.4e-7 |a| + e|| / ||golden||).
 *  - forward: y = bf16(f32(f32(x1 c) -+ f32(x2 s))): the f32 part is <= 2e (|x1 c| + |x2 s|)
 *    per element, <= 2^-22 ||x|| in L2, and the rotation keeps ||y|| = ||x||; the one BF16
 *    rounding adds <= u relative per element.  rel-L2 <= u + 2^-21.
 *  - backward: dx = f32(f32(g1 c) +- f32(g2 s)) from F32 dy: no BF16 rounding enters,
 *    rel-L2 <= 2^-21 (we use 1e-6). */
#include <math.h>

#include "cuda/cuda_ops.h"
#include "ops/ops.h"
#include "test_util.h"

#define U_BF16 (1.0 / 256.0)
#define E_F32 (1.0 / 16777216.0)

static h3s_tensor positions(int64_t S, uint64_t seed, double scale) {
    h3s_tensor p = h3t_alloc2(H3S_F64, S, 3);
    double *v = (double *)p.data;
    for (int64_t i = 0; i < S * 3; i++) /* non-integer coordinates, like the packed grid */
        v[i] = (double)h3s_rng_normal(seed, 5, (uint64_t)i) * scale + 0.1234567891234;
    return p;
}

static void tables(const h3s_tensor *pos, int64_t F, h3s_dtype dt, h3s_tensor *c, h3s_tensor *s) {
    *c = h3t_alloc2(dt, pos->shape[0], 6 * F);
    *s = h3t_alloc2(dt, pos->shape[0], 6 * F);
    CHECK_OK(h3s_rope_table(pos, F, 10000.0, c, s));
}

static double max_abs(const h3s_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < h3s_tensor_numel(t); i++)
        m = fmax(m, fabs(h3s_tensor_get_f64(t, i)));
    return m;
}

/* The rigorous rel-L2 bound of a strict table against the golden: element (s, axis, j) is
 * within 7.4e-7 |pos[s, axis]| inv_j + e (see the top of the file); theta = 1e4. */
static double table_bound(const h3s_tensor *pos, int64_t F, const h3s_tensor *ref) {
    double num = 0, den = 0;
    int64_t S = pos->shape[0];
    for (int64_t r = 0; r < S; r++)
        for (int64_t axis = 0; axis < 3; axis++)
            for (int64_t j = 0; j < F; j++) {
                double a = fabs((double)(float)h3s_tensor_get_f64(pos, r * 3 + axis)) * pow(1e4, -(double)j / F);
                double b = 7.4e-7 * a + E_F32;
                num += 2 * b * b; /* each angle appears twice in a row */
            }
    for (int64_t i = 0; i < h3s_tensor_numel(ref); i++)
        den += h3s_tensor_get_f64(ref, i) * h3s_tensor_get_f64(ref, i);
    return sqrt(num / den);
}

/* ----------------------------------------------------------------- table ----------- */

static void test_table_hand_values(void) {
    /* F = 2, theta = 1e4: inv_freq = (1, 1e4^-1/2 = 0.01); position (3, 0.5, -2) gives angles
     * (3, 0.03, 0.5, 0.005, -2, -0.02) twice.  Row 1 is the origin: cos 1, sin 0. */
    double pv[6] = {3.0, 0.5, -2.0, 0.0, 0.0, 0.0};
    int64_t ps[2] = {2, 3};
    h3s_tensor pos = h3s_tensor_view(pv, H3S_F64, 2, ps);
    static const double want_cos[6] = {-0.9899924966004454, 0.9995500337489875,  0.8775825618903728,
                                       0.9999875000260416,  -0.4161468365471424, 0.9998000066665778};
    static const double want_sin[6] = {0.1411200080598672,   0.02999550020249566, 0.479425538604203,
                                       0.004999979166692708, -0.9092974268256817, -0.01999866669333308};
    for (int golden = 0; golden < 2; golden++) {
        h3s_tensor c, s;
        tables(&pos, 2, golden ? H3S_F64 : H3S_F32, &c, &s);
        /* golden: double math on exact positions (the 3 * 0.01 product is one double rounding);
         * strict: f32 angles (rel 12.3 e) and f32 outputs: 2 f32 ulps of 1 */
        double tol = golden ? 1e-15 : 1.2e-7;
        double worst = 0;
        for (int col = 0; col < 12; col++) {
            worst = fmax(worst, fabs(h3s_tensor_get_f64(&c, col) - want_cos[col % 6]));
            worst = fmax(worst, fabs(h3s_tensor_get_f64(&s, col) - want_sin[col % 6]));
            CHECK(h3s_tensor_get_f64(&c, 12 + col) == 1.0 && h3s_tensor_get_f64(&s, 12 + col) == 0.0,
                  "origin row col %d: cos %g sin %g", col, h3s_tensor_get_f64(&c, 12 + col),
                  h3s_tensor_get_f64(&s, 12 + col));
        }
        CHECK(worst <= tol, "%s table vs hand values: worst %g > %g", golden ? "golden" : "strict", worst, tol);
        h3s_tensor_free(&c);
        h3s_tensor_free(&s);
    }
}

static void test_table_f32_cast(void) {
    /* The model casts position_ids to f32 before anything else: 1000.1 becomes 1000.0999755859375.
     * Column 0 uses inv_freq[0] = 1, so the golden cos is cos of the f32-cast position exactly. */
    double pv[6] = {1000.1, 1.0 / 3.0, -7.77, 2.5e-3, 123456.789, -0.3};
    int64_t ps[2] = {2, 3};
    h3s_tensor pos = h3s_tensor_view(pv, H3S_F64, 2, ps);
    h3s_tensor gc, gs;
    tables(&pos, 4, H3S_F64, &gc, &gs);
    double got = ((double *)gc.data)[0];
    CHECK(got == cos((double)(float)1000.1), "golden uses the f32-cast position: %.17g vs %.17g", got,
          cos((double)(float)1000.1));
    CHECK(fabs(got - cos(1000.1)) > 1e-6, "the cast is visible at 1000.1 (%.17g vs %.17g)", got, cos(1000.1));
    /* strict from F64 positions == strict from the same positions given as F32 */
    float pf[6];
    for (int i = 0; i < 6; i++)
        pf[i] = (float)pv[i];
    h3s_tensor posf = h3s_tensor_view(pf, H3S_F32, 2, ps);
    h3s_tensor c1, s1, c2, s2;
    tables(&pos, 4, H3S_F32, &c1, &s1);
    tables(&posf, 4, H3S_F32, &c2, &s2);
    CHECK(h3t_bitwise_equal(&c1, &c2) && h3t_bitwise_equal(&s1, &s2), "F64 and F32 position_ids differ");
    /* accuracy with these awkward coordinates (max |angle| = 123456.789) */
    double bound_c = table_bound(&pos, 4, &gc), bound_s = table_bound(&pos, 4, &gs);
    CHECK(h3t_rel_l2(&c1, &gc) <= bound_c, "cos rel-L2 %g > %g", h3t_rel_l2(&c1, &gc), bound_c);
    CHECK(h3t_rel_l2(&s1, &gs) <= bound_s, "sin rel-L2 %g > %g", h3t_rel_l2(&s1, &gs), bound_s);
    h3s_tensor_free(&gc);
    h3s_tensor_free(&gs);
    h3s_tensor_free(&c1);
    h3s_tensor_free(&s1);
    h3s_tensor_free(&c2);
    h3s_tensor_free(&s2);
}

static void test_table_accuracy(void) {
    /* the model's F = 16; positions ~ N(0, 30^2) plus a text-like row at 500.37 */
    h3s_tensor pos = positions(41, 11, 30.0);
    ((double *)pos.data)[40 * 3] = 500.37;
    h3s_tensor c, s, gc, gs;
    tables(&pos, 16, H3S_F32, &c, &s);
    tables(&pos, 16, H3S_F64, &gc, &gs);
    double bc = table_bound(&pos, 16, &gc), bs = table_bound(&pos, 16, &gs);
    double ec = h3t_rel_l2(&c, &gc), es = h3t_rel_l2(&s, &gs);
    printf("rope_table rel-L2: cos %.3g (bound %.3g), sin %.3g (bound %.3g)\n", ec, bc, es, bs);
    CHECK(ec <= bc, "cos rel-L2 %g > %g", ec, bc);
    CHECK(es <= bs, "sin rel-L2 %g > %g", es, bs);
    /* the second half of every row repeats the first */
    int64_t W = 96;
    int dup = 1;
    for (int64_t r = 0; r < 41; r++)
        dup &= memcmp((float *)c.data + r * W, (float *)c.data + r * W + 48, 48 * sizeof(float)) == 0 &&
               memcmp((float *)s.data + r * W, (float *)s.data + r * W + 48, 48 * sizeof(float)) == 0;
    CHECK(dup, "table halves differ");
    h3s_tensor_free(&pos);
    h3s_tensor_free(&c);
    h3s_tensor_free(&s);
    h3s_tensor_free(&gc);
    h3s_tensor_free(&gs);
}

/* ----------------------------------------------------------------- apply ----------- */

/* Strict forward + backward and their golden twins on the same values; returns rel-L2s. */
static void check_apply_accuracy(int64_t B, int64_t S, int64_t heads, int64_t D, int64_t F, uint64_t seed) {
    h3s_tensor pos = positions(S, seed, 20.0);
    h3s_tensor c, s, gc, gs;
    tables(&pos, F, H3S_F32, &c, &s);
    tables(&pos, F, H3S_F64, &gc, &gs);
    int64_t M = B * S, W = heads * D, R = 6 * F;
    h3s_tensor x = h3t_alloc2(H3S_BF16, M, W), y = h3t_alloc2(H3S_BF16, M, W);
    h3s_tensor dy = h3t_alloc2(H3S_F32, M, W), dx = h3t_alloc2(H3S_F32, M, W);
    h3t_fill_normal(&x, seed + 1, 1.0f);
    h3t_fill_normal(&dy, seed + 2, 0.5f);
    CHECK_OK(h3s_rope_forward(&x, heads, &c, &s, &y));
    CHECK_OK(h3s_rope_backward(heads, &c, &s, &dy, &dx));

    /* golden on exactly the strict inputs (x, dy and the strict F32 table in F64) */
    h3s_tensor x64 = h3t_to_f64(&x), dy64 = h3t_to_f64(&dy), c64 = h3t_to_f64(&c), s64 = h3t_to_f64(&s);
    h3s_tensor y64 = h3t_alloc2(H3S_F64, M, W), dx64 = h3t_alloc2(H3S_F64, M, W);
    CHECK_OK(h3s_rope_forward(&x64, heads, &c64, &s64, &y64));
    CHECK_OK(h3s_rope_backward(heads, &c64, &s64, &dy64, &dx64));
    double ey = h3t_rel_l2(&y, &y64), edx = h3t_rel_l2(&dx, &dx64);
    const double by = U_BF16 + 1.0 / 2097152.0, bdx = 1e-6;
    CHECK(ey <= by, "rope y rel-L2 %g > %g (B %lld S %lld heads %lld D %lld F %lld)", ey, by, (long long)B,
          (long long)S, (long long)heads, (long long)D, (long long)F);
    CHECK(edx <= bdx, "rope dx rel-L2 %g > %g (D %lld F %lld)", edx, bdx, (long long)D, (long long)F);

    /* end to end: strict table + strict apply against golden table + golden apply; the table
     * error enters |y| linearly: bound u + 2^-21 + 2 * (7.4e-7 max|a| + e) */
    h3s_tensor y64e = h3t_alloc2(H3S_F64, M, W), dx64e = h3t_alloc2(H3S_F64, M, W);
    CHECK_OK(h3s_rope_forward(&x64, heads, &gc, &gs, &y64e));
    CHECK_OK(h3s_rope_backward(heads, &gc, &gs, &dy64, &dx64e));
    double tab = 2 * (7.4e-7 * max_abs(&pos) + E_F32);
    double eye = h3t_rel_l2(&y, &y64e), edxe = h3t_rel_l2(&dx, &dx64e);
    CHECK(eye <= by + tab, "rope y vs full golden rel-L2 %g > %g", eye, by + tab);
    CHECK(edxe <= bdx + tab, "rope dx vs full golden rel-L2 %g > %g", edxe, bdx + tab);
    if (seed == 100)
        printf("rope rel-L2: y %.3g (bound %.3g), dx %.3g (bound %.3g); full golden: y %.3g, dx %.3g\n", ey, by, edx,
               bdx, eye, edxe);

    /* pass-through channels carry the input bits */
    int pass = 1;
    for (int64_t m = 0; m < M; m++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = R; i < D; i++) {
                int64_t k = m * W + h * D + i;
                pass &= ((uint16_t *)y.data)[k] == ((uint16_t *)x.data)[k];
                pass &= memcmp((float *)dx.data + k, (float *)dy.data + k, sizeof(float)) == 0;
            }
    CHECK(pass, "pass-through channels changed (D %lld, R %lld)", (long long)D, (long long)R);

    h3s_tensor *all[] = {&pos, &c, &s, &gc, &gs, &x, &y, &dy, &dx, &x64, &dy64, &c64, &s64, &y64, &dx64, &y64e, &dx64e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_apply_accuracy(void) {
    check_apply_accuracy(2, 5, 3, 16, 2, 100);   /* 12 rotary + 4 pass-through channels per head */
    check_apply_accuracy(1, 9, 3, 14, 2, 200);   /* head_dim 14: not a power of two */
    check_apply_accuracy(2, 4, 1, 100, 16, 300); /* the model's 96 rotary channels in a 100-wide head */
    check_apply_accuracy(1, 3, 2, 30, 5, 400);   /* 6F = head_dim: no pass-through */
    check_apply_accuracy(1, 1, 5, 12, 1, 500);   /* M = 1, width 60 */
}

static void test_rotate_half_by_hand(void) {
    /* F = 1: inv_freq = (1), angles (t, h, w, t, h, w) = (0.3, -1.1, 2.0, ...); one head, D = 8.
     * y[i] = x[i] cos a_i - x[i+3] sin a_i, y[i+3] = x[i+3] cos a_i + x[i] sin a_i, y[6,7] = x[6,7]. */
    double pv[3] = {0.3, -1.1, 2.0};
    int64_t ps[2] = {1, 3};
    h3s_tensor pos = h3s_tensor_view(pv, H3S_F64, 2, ps);
    h3s_tensor c, s;
    tables(&pos, 1, H3S_F64, &c, &s);
    double xv[8] = {1, 2, 3, 4, 5, 6, 7, 8}, yv[8];
    int64_t xs[2] = {1, 8};
    h3s_tensor x = h3s_tensor_view(xv, H3S_F64, 2, xs), y = h3s_tensor_view(yv, H3S_F64, 2, xs);
    CHECK_OK(h3s_rope_forward(&x, 1, &c, &s, &y));
    double a[3] = {(double)0.3f, (double)-1.1f, 2.0};
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        worst = fmax(worst, fabs(yv[i] - (xv[i] * cos(a[i]) - xv[i + 3] * sin(a[i]))));
        worst = fmax(worst, fabs(yv[i + 3] - (xv[i + 3] * cos(a[i]) + xv[i] * sin(a[i]))));
    }
    CHECK(worst < 1e-14, "rotate-half by hand: worst %g", worst);
    CHECK(yv[6] == 7 && yv[7] == 8, "pass-through %g %g", yv[6], yv[7]);
    h3s_tensor_free(&c);
    h3s_tensor_free(&s);
}

static void test_adjoint(void) {
    /* golden: <dy, J x> == <J^T dy, x> for the linear map J = rope_forward */
    int64_t S = 7, B = 2, heads = 3, D = 20, F = 3, M = B * S, W = heads * D;
    h3s_tensor pos = positions(S, 21, 10.0);
    h3s_tensor c, s;
    tables(&pos, F, H3S_F64, &c, &s);
    h3s_tensor x = h3t_alloc2(H3S_F64, M, W), dy = h3t_alloc2(H3S_F64, M, W);
    h3s_tensor y = h3t_alloc2(H3S_F64, M, W), dx = h3t_alloc2(H3S_F64, M, W);
    /* full double values, not rounded to float */
    for (int64_t i = 0; i < M * W; i++) {
        ((double *)x.data)[i] = h3s_rng_normal(22, 1, (uint64_t)i) + h3s_rng_normal(22, 2, (uint64_t)i) * 1e-9;
        ((double *)dy.data)[i] = h3s_rng_normal(23, 1, (uint64_t)i) + h3s_rng_normal(23, 2, (uint64_t)i) * 1e-9;
    }
    CHECK_OK(h3s_rope_forward(&x, heads, &c, &s, &y));
    CHECK_OK(h3s_rope_backward(heads, &c, &s, &dy, &dx));
    double lhs = 0, rhs = 0, nx = 0, ndy = 0;
    for (int64_t i = 0; i < M * W; i++) {
        lhs += ((double *)dy.data)[i] * ((double *)y.data)[i];
        rhs += ((double *)dx.data)[i] * ((double *)x.data)[i];
        nx += ((double *)x.data)[i] * ((double *)x.data)[i];
        ndy += ((double *)dy.data)[i] * ((double *)dy.data)[i];
    }
    double scale = sqrt(nx * ndy);
    CHECK(fabs(lhs - rhs) <= 1e-12 * scale, "adjoint: <dy,Jx> = %.17g, <J^T dy,x> = %.17g", lhs, rhs);
    /* The same with arbitrary tables whose two halves differ: this pins which half of cos and
     * sin each term reads, which a real table (halves equal) cannot. */
    {
        h3s_tensor rc = h3t_alloc2(H3S_F64, S, 6 * F), rs = h3t_alloc2(H3S_F64, S, 6 * F);
        for (int64_t i = 0; i < S * 6 * F; i++) {
            ((double *)rc.data)[i] = h3s_rng_normal(24, 1, (uint64_t)i) + h3s_rng_normal(24, 2, (uint64_t)i) * 1e-9;
            ((double *)rs.data)[i] = h3s_rng_normal(25, 1, (uint64_t)i) + h3s_rng_normal(25, 2, (uint64_t)i) * 1e-9;
        }
        CHECK_OK(h3s_rope_forward(&x, heads, &rc, &rs, &y));
        CHECK_OK(h3s_rope_backward(heads, &rc, &rs, &dy, &dx));
        double l2 = 0, r2 = 0;
        for (int64_t i = 0; i < M * W; i++) {
            l2 += ((double *)dy.data)[i] * ((double *)y.data)[i];
            r2 += ((double *)dx.data)[i] * ((double *)x.data)[i];
        }
        CHECK(fabs(l2 - r2) <= 1e-12 * scale * 3, "adjoint (random tables): %.17g vs %.17g", l2, r2);
        h3s_tensor_free(&rc);
        h3s_tensor_free(&rs);
    }
    /* and the check can fail: a backward with sin's sign flipped would not pass it */
    h3s_tensor sneg = h3t_to_f64(&s);
    for (int64_t i = 0; i < h3s_tensor_numel(&sneg); i++)
        ((double *)sneg.data)[i] = -((double *)sneg.data)[i];
    CHECK_OK(h3s_rope_backward(heads, &c, &sneg, &dy, &dx));
    double wrong = 0;
    for (int64_t i = 0; i < M * W; i++)
        wrong += ((double *)dx.data)[i] * ((double *)x.data)[i];
    CHECK(fabs(lhs - wrong) > 1e-6 * scale, "adjoint test is blind to a transposed rotation");
    h3s_tensor *all[] = {&pos, &c, &s, &x, &dy, &y, &dx, &sneg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

/* ----------------------------------------------------------------- invariance ------ */

static void test_repeat(void) {
    int64_t S = 9, heads = 2, D = 16, F = 2, M = 2 * S, W = heads * D;
    h3s_tensor pos = positions(S, 31, 15.0);
    h3s_tensor c1, s1, c2, s2;
    tables(&pos, F, H3S_F32, &c1, &s1);
    tables(&pos, F, H3S_F32, &c2, &s2);
    CHECK(h3t_bitwise_equal(&c1, &c2) && h3t_bitwise_equal(&s1, &s2), "table repeat differs");
    h3s_tensor x = h3t_alloc2(H3S_BF16, M, W), dy = h3t_alloc2(H3S_F32, M, W);
    h3t_fill_normal(&x, 32, 1.0f);
    h3t_fill_normal(&dy, 33, 1.0f);
    h3s_tensor y1 = h3t_alloc2(H3S_BF16, M, W), y2 = h3t_alloc2(H3S_BF16, M, W);
    h3s_tensor d1 = h3t_alloc2(H3S_F32, M, W), d2 = h3t_alloc2(H3S_F32, M, W);
    CHECK_OK(h3s_rope_forward(&x, heads, &c1, &s1, &y1));
    CHECK_OK(h3s_rope_forward(&x, heads, &c1, &s1, &y2));
    CHECK_OK(h3s_rope_backward(heads, &c1, &s1, &dy, &d1));
    CHECK_OK(h3s_rope_backward(heads, &c1, &s1, &dy, &d2));
    CHECK(h3t_bitwise_equal(&y1, &y2), "forward repeat differs");
    CHECK(h3t_bitwise_equal(&d1, &d2), "backward repeat differs");
    h3s_tensor *all[] = {&pos, &c1, &s1, &c2, &s2, &x, &dy, &y1, &y2, &d1, &d2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_row_invariance(void) {
    /* One table row (S = 1) serves every row; the same input row at row 0 of M = 1, row 3 of
     * M = 7 and row 211 of M = 300 gives the same bits.  The table row of one position is the
     * same at row 0 of S = 1, row 3 of S = 7 and row 211 of S = 300. */
    const int64_t heads = 3, D = 14, F = 2, W = heads * D;
    const int64_t Ms[3] = {1, 7, 300}, at[3] = {0, 3, 211};
    h3s_tensor probe_pos = positions(1, 41, 25.0);
    h3s_tensor probe_x = h3t_alloc2(H3S_BF16, 1, W), probe_dy = h3t_alloc2(H3S_F32, 1, W);
    h3t_fill_normal(&probe_x, 42, 1.0f);
    h3t_fill_normal(&probe_dy, 43, 1.0f);
    h3s_tensor c1, s1;
    tables(&probe_pos, F, H3S_F32, &c1, &s1);
    h3s_tensor ref_y = {0}, ref_dx = {0}, ref_c = {0}, ref_s = {0};
    for (int k = 0; k < 3; k++) {
        int64_t M = Ms[k];
        h3s_tensor pos = positions(M, 44 + (uint64_t)k, 25.0);
        memcpy((double *)pos.data + at[k] * 3, probe_pos.data, 3 * sizeof(double));
        h3s_tensor c, s;
        tables(&pos, F, H3S_F32, &c, &s);
        h3s_tensor x = h3t_alloc2(H3S_BF16, M, W), dy = h3t_alloc2(H3S_F32, M, W);
        h3t_fill_normal(&x, 45 + (uint64_t)k, 1.0f);
        h3t_fill_normal(&dy, 46 + (uint64_t)k, 1.0f);
        memcpy((uint16_t *)x.data + at[k] * W, probe_x.data, (size_t)W * 2);
        memcpy((float *)dy.data + at[k] * W, probe_dy.data, (size_t)W * 4);
        h3s_tensor y = h3t_alloc2(H3S_BF16, M, W), dx = h3t_alloc2(H3S_F32, M, W);
        CHECK_OK(h3s_rope_forward(&x, heads, &c1, &s1, &y));
        CHECK_OK(h3s_rope_backward(heads, &c1, &s1, &dy, &dx));
        if (k == 0) {
            ref_y = y;
            ref_dx = dx;
            ref_c = c;
            ref_s = s;
        } else {
            CHECK(h3t_rows_equal(&y, at[k], &ref_y, 0, 1), "rope y row differs at M = %lld", (long long)M);
            CHECK(h3t_rows_equal(&dx, at[k], &ref_dx, 0, 1), "rope dx row differs at M = %lld", (long long)M);
            CHECK(h3t_rows_equal(&c, at[k], &ref_c, 0, 1) && h3t_rows_equal(&s, at[k], &ref_s, 0, 1),
                  "table row differs at S = %lld", (long long)M);
            h3s_tensor_free(&y);
            h3s_tensor_free(&dx);
            h3s_tensor_free(&c);
            h3s_tensor_free(&s);
        }
        h3s_tensor_free(&pos);
        h3s_tensor_free(&x);
        h3s_tensor_free(&dy);
    }
    h3s_tensor *all[] = {&probe_pos, &probe_x, &probe_dy, &c1, &s1, &ref_y, &ref_dx, &ref_c, &ref_s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_batch_invariance(void) {
    /* item 0 of B = 3 equals B = 1; item 2 (same values as item 0) equals it too */
    const int64_t S = 6, heads = 2, D = 18, F = 3, W = heads * D;
    h3s_tensor pos = positions(S, 51, 12.0);
    h3s_tensor c, s;
    tables(&pos, F, H3S_F32, &c, &s);
    h3s_tensor x1 = h3t_alloc2(H3S_BF16, S, W), dy1 = h3t_alloc2(H3S_F32, S, W);
    h3t_fill_normal(&x1, 52, 1.0f);
    h3t_fill_normal(&dy1, 53, 1.0f);
    h3s_tensor x3 = h3t_alloc2(H3S_BF16, 3 * S, W), dy3 = h3t_alloc2(H3S_F32, 3 * S, W);
    h3t_fill_normal(&x3, 54, 1.0f);
    h3t_fill_normal(&dy3, 55, 1.0f);
    for (int b = 0; b < 3; b += 2) {
        memcpy((uint16_t *)x3.data + b * S * W, x1.data, (size_t)(S * W) * 2);
        memcpy((float *)dy3.data + b * S * W, dy1.data, (size_t)(S * W) * 4);
    }
    h3s_tensor y1 = h3t_alloc2(H3S_BF16, S, W), d1 = h3t_alloc2(H3S_F32, S, W);
    h3s_tensor y3 = h3t_alloc2(H3S_BF16, 3 * S, W), d3 = h3t_alloc2(H3S_F32, 3 * S, W);
    CHECK_OK(h3s_rope_forward(&x1, heads, &c, &s, &y1));
    CHECK_OK(h3s_rope_backward(heads, &c, &s, &dy1, &d1));
    CHECK_OK(h3s_rope_forward(&x3, heads, &c, &s, &y3));
    CHECK_OK(h3s_rope_backward(heads, &c, &s, &dy3, &d3));
    CHECK(h3t_rows_equal(&y3, 0, &y1, 0, S) && h3t_rows_equal(&d3, 0, &d1, 0, S), "item 0 of B=3 != B=1");
    CHECK(h3t_rows_equal(&y3, 2 * S, &y1, 0, S) && h3t_rows_equal(&d3, 2 * S, &d1, 0, S), "item 2 of B=3 != B=1");
    /* item 1 has other values: it must differ (the comparison is not vacuous) */
    CHECK(!h3t_rows_equal(&y3, S, &y1, 0, S), "item 1 equals item 0 although its input differs");
    h3s_tensor *all[] = {&pos, &c, &s, &x1, &dy1, &x3, &dy3, &y1, &d1, &y3, &d3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_thread_invariance(void) {
    const int64_t S = 200, B = 3, M = B * S, heads = 2, D = 22, F = 3, W = heads * D;
    h3s_tensor pos = positions(S * 3, 61, 40.0); /* table of 600 rows for the table itself */
    h3s_tensor x = h3t_alloc2(H3S_BF16, M, W), dy = h3t_alloc2(H3S_F32, M, W);
    h3t_fill_normal(&x, 62, 1.0f);
    h3t_fill_normal(&dy, 63, 1.0f);
    int64_t ps[2] = {S, 3};
    h3s_tensor pos_s = h3s_tensor_view(pos.data, H3S_F64, 2, ps);
    h3s_tensor rc[3], rs[3], tc[3], ts[3], ry[3], rd[3];
    const int threads[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        h3s_set_num_threads(threads[k]);
        tables(&pos, F, H3S_F32, &rc[k], &rs[k]);
        tables(&pos_s, F, H3S_F32, &tc[k], &ts[k]);
        ry[k] = h3t_alloc2(H3S_BF16, M, W);
        rd[k] = h3t_alloc2(H3S_F32, M, W);
        CHECK_OK(h3s_rope_forward(&x, heads, &tc[k], &ts[k], &ry[k]));
        CHECK_OK(h3s_rope_backward(heads, &tc[k], &ts[k], &dy, &rd[k]));
    }
    h3s_set_num_threads(0);
    for (int k = 1; k < 3; k++) {
        CHECK(h3t_bitwise_equal(&rc[k], &rc[0]) && h3t_bitwise_equal(&rs[k], &rs[0]), "table differs at %d threads",
              threads[k]);
        CHECK(h3t_bitwise_equal(&ry[k], &ry[0]), "forward differs at %d threads", threads[k]);
        CHECK(h3t_bitwise_equal(&rd[k], &rd[0]), "backward differs at %d threads", threads[k]);
    }
    for (int k = 0; k < 3; k++) {
        h3s_tensor_free(&rc[k]);
        h3s_tensor_free(&rs[k]);
        h3s_tensor_free(&tc[k]);
        h3s_tensor_free(&ts[k]);
        h3s_tensor_free(&ry[k]);
        h3s_tensor_free(&rd[k]);
    }
    h3s_tensor_free(&pos);
    h3s_tensor_free(&x);
    h3s_tensor_free(&dy);
}

static void test_zero_rows(void) {
    /* M = 0 rows (and a table of S = 0 rows) succeed and write nothing */
    int64_t heads = 2, D = 12, W = heads * D;
    h3s_tensor pos0 = h3t_alloc2(H3S_F64, 0, 3), c0 = h3t_alloc2(H3S_F32, 0, 12), s0 = h3t_alloc2(H3S_F32, 0, 12);
    CHECK_OK(h3s_rope_table(&pos0, 2, 10000.0, &c0, &s0));
    h3s_tensor pos = positions(4, 71, 3.0), c, s;
    tables(&pos, 2, H3S_F32, &c, &s);
    h3s_tensor x = h3t_alloc2(H3S_BF16, 0, W), y = h3t_alloc2(H3S_BF16, 0, W);
    h3s_tensor dy = h3t_alloc2(H3S_F32, 0, W), dx = h3t_alloc2(H3S_F32, 0, W);
    CHECK_OK(h3s_rope_forward(&x, heads, &c, &s, &y));
    CHECK_OK(h3s_rope_backward(heads, &c, &s, &dy, &dx));
    h3s_tensor *all[] = {&pos0, &c0, &s0, &pos, &c, &s, &x, &y, &dy, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

/* ----------------------------------------------------------------- bad input ------- */

static void test_bad_table(void) {
    const int64_t S = 4, F = 2;
    h3s_tensor pos = positions(S, 81, 5.0);
    h3s_tensor c = h3t_alloc2(H3S_F32, S, 6 * F), s = h3t_alloc2(H3S_F32, S, 6 * F);
    h3s_tensor gc = h3t_alloc2(H3S_F64, S, 6 * F), gs = h3t_alloc2(H3S_F64, S, 6 * F);
    h3s_tensor bad_w = h3t_alloc2(H3S_F32, S, 6 * F + 1), bad_rows = h3t_alloc2(H3S_F32, S + 1, 6 * F);
    h3s_tensor pos2 = h3t_alloc2(H3S_F64, S, 2), posi = h3t_alloc2(H3S_I64, S, 3), posf = h3t_alloc2(H3S_F32, S, 3);
    h3s_tensor bf = h3t_alloc2(H3S_BF16, S, 6 * F);
    h3t_poison(&c);
    h3t_poison(&s);
    h3t_poison(&gc);
    h3t_poison(&gs);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(NULL, F, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e4, NULL, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e4, &c, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, 0, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, -2, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 0.0, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, -1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, NAN, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e300, &c, &s));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 0.5, &c, &s)); /* inv_freq > 1: angles beyond the bound */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_table(&pos2, F, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_table(&pos, F, 1e4, &bad_w, &s));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_table(&pos, F, 1e4, &c, &bad_rows));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_table(&pos, F + 1, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_table(&posi, F, 1e4, &c, &s));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_table(&pos, F, 1e4, &bf, &s));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_table(&pos, F, 1e4, &c, &gs));   /* strict cos, golden sin */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_table(&pos, F, 1e4, &gc, &s));   /* golden cos, strict sin */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_table(&posf, F, 1e4, &gc, &gs)); /* golden table from F32 positions */
    /* non-finite positions, and one that overflows f32 */
    ((double *)pos.data)[7] = NAN;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e4, &c, &s));
    ((double *)pos.data)[7] = 1e39;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e4, &gc, &gs));
    ((double *)pos.data)[7] = 1.5;
    /* host/device mix and a bad device flag */
    c.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_rope_table(&pos, F, 1e4, &c, &s));
    c.device = 2;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, F, 1e4, &c, &s));
    c.device = 0;
    CHECK(h3t_all_poison(&c) && h3t_all_poison(&s) && h3t_all_poison(&gc) && h3t_all_poison(&gs),
          "a failed rope_table wrote output");
    CHECK_OK(h3s_rope_table(&pos, F, 1e4, &c, &s));
    CHECK(!h3t_all_poison(&c), "the valid call wrote nothing");
    h3s_tensor *all[] = {&pos, &c, &s, &gc, &gs, &bad_w, &bad_rows, &pos2, &posi, &posf, &bf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_bad_apply(void) {
    const int64_t S = 3, heads = 2, D = 16, F = 2, M = 2 * S, W = heads * D;
    h3s_tensor pos = positions(S, 91, 5.0), c, s, gc, gs;
    tables(&pos, F, H3S_F32, &c, &s);
    tables(&pos, F, H3S_F64, &gc, &gs);
    h3s_tensor x = h3t_alloc2(H3S_BF16, M, W), y = h3t_alloc2(H3S_BF16, M, W);
    h3s_tensor dy = h3t_alloc2(H3S_F32, M, W), dx = h3t_alloc2(H3S_F32, M, W);
    h3s_tensor x64 = h3t_alloc2(H3S_F64, M, W), y64 = h3t_alloc2(H3S_F64, M, W), dx64 = h3t_alloc2(H3S_F64, M, W);
    h3s_tensor xf = h3t_alloc2(H3S_F32, M, W), yf = h3t_alloc2(H3S_F32, M, W), dybf = h3t_alloc2(H3S_BF16, M, W);
    h3s_tensor x_odd_rows = h3t_alloc2(H3S_BF16, M + 1, W), y_odd_rows = h3t_alloc2(H3S_BF16, M + 1, W);
    h3s_tensor y_short = h3t_alloc2(H3S_BF16, M - 1, W), y_narrow = h3t_alloc2(H3S_BF16, M, W - 2);
    h3s_tensor x_oddD = h3t_alloc2(H3S_BF16, M, 2 * 13), y_oddD = h3t_alloc2(H3S_BF16, M, 2 * 13);
    h3s_tensor x_smallD = h3t_alloc2(H3S_BF16, M, 2 * 10), y_smallD = h3t_alloc2(H3S_BF16, M, 2 * 10);
    h3s_tensor c_bad = h3t_alloc2(H3S_F32, S, 10), s_bad = h3t_alloc2(H3S_F32, S, 10),
               s_rows = h3t_alloc2(H3S_F32, S + 1, 12);
    h3s_tensor c_empty = h3t_alloc2(H3S_F32, 0, 12), s_empty = h3t_alloc2(H3S_F32, 0, 12);
    h3t_fill_normal(&x, 92, 1.0f);
    h3t_fill_normal(&dy, 93, 1.0f);
    h3s_tensor *outs[] = {&y, &dx, &y64, &dx64, &yf, &y_odd_rows, &y_short, &y_narrow, &y_oddD, &y_smallD};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h3t_poison(outs[i]);

    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(NULL, heads, &c, &s, &y));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, heads, NULL, &s, &y));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, heads, &c, NULL, &y));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, heads, &c, &s, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, 0, &c, &s, &y));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, 3, &c, &s, &y));         /* 32 channels, 3 heads */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&xf, heads, &c, &s, &yf));   /* F32 activations: not rope's */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&x, heads, &c, &s, &yf));    /* y dtype */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&x64, heads, &c, &s, &y64)); /* golden x, strict table */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&x, heads, &gc, &gs, &y));   /* strict x, golden table */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&x64, heads, &gc, &gs, &y)); /* golden x, strict y */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_forward(&x, heads, &c, &gs, &y));    /* mixed table */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x_odd_rows, heads, &c, &s, &y_odd_rows)); /* 7 rows, S = 3 */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, heads, &c, &s, &y_short));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, heads, &c, &s, &y_narrow));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x_oddD, heads, &c, &s, &y_oddD));     /* head_dim 13 */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x_smallD, heads, &c, &s, &y_smallD)); /* 6F = 12 > 10 */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, heads, &c_bad, &s_bad, &y));       /* width 10 != 6F */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, heads, &c, &s_rows, &y));          /* sin rows != cos rows */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_forward(&x, heads, &c_empty, &s_empty, &y));   /* empty table */
    y.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_rope_forward(&x, heads, &c, &s, &y));
    y.device = 0;

    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_backward(heads, &c, &s, NULL, &dx));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_backward(heads, &c, &s, &dy, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_backward(heads, NULL, &s, &dy, &dx));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_backward(-1, &c, &s, &dy, &dx));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_backward(heads, &c, &s, &dybf, &dx));  /* BF16 gradient */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_backward(heads, &c, &s, &dy, &y));     /* BF16 dx */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_backward(heads, &c, &s, &dy, &dx64));  /* strict dy, golden dx */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_backward(heads, &gc, &gs, &dy, &dx));  /* strict dy, golden table */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_rope_backward(heads, &c, &s, &x64, &dx64)); /* golden dy, strict table */
    {
        h3s_tensor dx_short = h3t_alloc2(H3S_F32, M - 1, W);
        h3t_poison(&dx_short);
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_backward(heads, &c, &s, &dy, &dx_short));
        CHECK(h3t_all_poison(&dx_short), "short dx written");
        h3s_tensor_free(&dx_short);
    }
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_backward(heads, &c_bad, &s_bad, &dy, &dx));
    dx.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_rope_backward(heads, &c, &s, &dy, &dx));
    dx.device = 0;
    {
        h3s_tensor xo = h3t_alloc2(H3S_F32, M + 1, W), dxo = h3t_alloc2(H3S_F32, M + 1, W);
        h3t_poison(&dxo);
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_rope_backward(heads, &c, &s, &xo, &dxo));
        CHECK(h3t_all_poison(&dxo), "rows-not-multiple backward wrote dx");
        h3s_tensor_free(&xo);
        h3s_tensor_free(&dxo);
    }

    /* without a CUDA backend, device tensors are refused, never computed on the host */
    if (!h3s_cuda_available()) {
        h3s_tensor *dev[] = {&x, &c, &s, &y};
        for (size_t i = 0; i < 4; i++)
            dev[i]->device = 1;
        h3s_clear_error();
        h3s_status st = h3s_rope_forward(&x, heads, &c, &s, &y);
        CHECK(st == H3S_ERR_DEVICE && h3s_last_error()[0], "device rope without CUDA -> %s", h3s_status_name(st));
        for (size_t i = 0; i < 4; i++)
            dev[i]->device = 0;
    }

    int untouched = 1;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        untouched &= h3t_all_poison(outs[i]);
    CHECK(untouched, "a failed rope call wrote its output");
    CHECK_OK(h3s_rope_forward(&x, heads, &c, &s, &y));
    CHECK(!h3t_all_poison(&y), "the valid call wrote nothing");

    h3s_tensor *all[] = {&pos,      &c,          &s,          &gc,      &gs,       &x,       &y,
                         &dy,       &dx,         &x64,        &y64,     &dx64,     &xf,      &yf,
                         &dybf,     &x_odd_rows, &y_odd_rows, &y_short, &y_narrow, &x_oddD,  &y_oddD,
                         &x_smallD, &y_smallD,   &c_bad,      &s_bad,   &s_rows,   &c_empty, &s_empty};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

/* Positions beyond the deterministic sin/cos range are refused (not silently NaN), and the
 * outputs stay untouched; the range's edge is accepted. */
static void test_table_range(void) {
    double pv[3] = {0.5, 2.0, 3e38};
    int64_t ps[2] = {1, 3};
    h3s_tensor pos = h3s_tensor_view(pv, H3S_F64, 2, ps);
    h3s_tensor c = h3t_alloc2(H3S_F32, 1, 6), s = h3t_alloc2(H3S_F32, 1, 6);
    h3t_poison(&c);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, 1, 1e4, &c, &s));
    CHECK(((uint32_t *)c.data)[0] == 0x7f7f7f7fu, "refused rope_table wrote its output");
    pv[2] = -1048577.0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, 1, 1e4, &c, &s));
    pv[2] = 1048576.0;
    CHECK_OK(h3s_rope_table(&pos, 1, 1e4, &c, &s));
    for (int i = 0; i < 6; i++)
        CHECK(isfinite(((float *)c.data)[i]), "cos[%d] not finite at the range edge", i);
    h3s_tensor_free(&c);
    h3s_tensor_free(&s);
}

int main(void) {
    test_table_range();
    test_table_hand_values();
    test_table_f32_cast();
    test_table_accuracy();
    test_rotate_half_by_hand();
    test_apply_accuracy();
    test_adjoint();
    test_repeat();
    test_row_invariance();
    test_batch_invariance();
    test_thread_invariance();
    test_zero_rows();
    test_bad_table();
    test_bad_apply();
    return h3t_finish("test_rope");
}

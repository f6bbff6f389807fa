/* SwiGLU: h3s_swiglu_forward / h3s_swiglu_backward.
 *
 * Error bounds.  BF16 (p = 8): one rounding has unit roundoff u_bf16 = 2^-8, RMS about
 * 0.4 u_bf16 for random data.  FP32: u_f32 = 2^-24.  silu and silu' are evaluated in double
 * (error ~1e-16) and rounded once to FP32 (u_f32).  Strict and golden read the same BF16 u
 * (exact F64 copy), so gradients carry FP32 roundings only. */
#include "core/detmath.h"
#include "ops/ops.h"
#include "test_util.h"

#define U_BF16 (1.0 / 256.0)
#define U_F32 (1.0 / 16777216.0)
/* h = bf16(value * silu_f32(gate)): silu rounding + product rounding = 2 u_f32, then BF16. */
#define BOUND_H (U_BF16 + 3 * U_F32)
/* dvalue = dh * silu_f32(gate): two FP32 roundings, 2 u_f32 per element (+ margin). */
#define BOUND_DVALUE (2.5 * U_F32)
/* dgate = (dh * value) * silu'_f32(gate): three FP32 roundings, 3 u_f32 per element. */
#define BOUND_DGATE (3.5 * U_F32)
#define MIN_CORRECTLY_ROUNDED 0.99

typedef struct sw_result {
    h3s_tensor h, du;
} sw_result;

static void sw_free(sw_result *r) {
    h3s_tensor_free(&r->h);
    h3s_tensor_free(&r->du);
}

static void sw_run(const h3s_tensor *u, const h3s_tensor *dh, sw_result *r) {
    int golden = u->dtype == H3S_F64;
    int64_t M = u->shape[0], F = u->shape[1] / 2;
    r->h = h3t_alloc2(golden ? H3S_F64 : H3S_BF16, M, F);
    r->du = h3t_alloc2(golden ? H3S_F64 : H3S_F32, M, 2 * F);
    CHECK_OK(h3s_swiglu_forward(u, &r->h));
    CHECK_OK(h3s_swiglu_backward(u, dh, &r->du));
}

static int sw_equal(const sw_result *a, const sw_result *b) {
    return h3t_bitwise_equal(&a->h, &b->h) && h3t_bitwise_equal(&a->du, &b->du);
}

/* 1. accuracy against golden, F = 37, 60, 100 and M = 1. */
static void check_accuracy(int64_t M, int64_t F) {
    h3s_tensor u = h3t_normal2(H3S_BF16, M, 2 * F, 10 + (uint64_t)F, 2.0f), dh = h3t_normal2(H3S_F32, M, F, 20, 1.0f);
    h3s_tensor u64 = h3t_to_f64(&u), dh64 = h3t_to_f64(&dh);
    sw_result s, g;
    sw_run(&u, &dh, &s);
    sw_run(&u64, &dh64, &g);
    char what[96];
    snprintf(what, sizeof what, "swiglu M=%lld F=%lld h", (long long)M, (long long)F);
    double e = h3t_measured(what, h3t_rel_l2(&s.h, &g.h), BOUND_H);
    CHECK(e <= BOUND_H, "M=%lld F=%lld: h rel-L2 %.3g", (long long)M, (long long)F, e);
    double f = h3t_frac_correctly_rounded(&s.h, &g.h);
    CHECK(f >= MIN_CORRECTLY_ROUNDED, "F=%lld: only %.4f of h correctly rounded", (long long)F, f);
    h3s_tensor sv = h3t_columns(&s.du, 0, F), gv = h3t_columns(&g.du, 0, F), sg = h3t_columns(&s.du, F, F),
               gg = h3t_columns(&g.du, F, F);
    snprintf(what, sizeof what, "swiglu M=%lld F=%lld dvalue", (long long)M, (long long)F);
    e = h3t_measured(what, h3t_rel_l2(&sv, &gv), BOUND_DVALUE);
    CHECK(e <= BOUND_DVALUE, "M=%lld F=%lld: dvalue rel-L2 %.3g", (long long)M, (long long)F, e);
    snprintf(what, sizeof what, "swiglu M=%lld F=%lld dgate", (long long)M, (long long)F);
    e = h3t_measured(what, h3t_rel_l2(&sg, &gg), BOUND_DGATE);
    CHECK(e <= BOUND_DGATE, "M=%lld F=%lld: dgate rel-L2 %.3g", (long long)M, (long long)F, e);
    h3s_tensor *frees[] = {&u, &dh, &u64, &dh64, &sv, &gv, &sg, &gg};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
    sw_free(&s);
    sw_free(&g);
}

/* The documented formula, evaluated here, gives the library's bits. */
static void check_documented_formula(void) {
    const int64_t M = 64, F = 70;
    h3s_tensor u = h3t_normal2(H3S_BF16, M, 2 * F, 33, 3.0f), dh = h3t_normal2(H3S_F32, M, F, 34, 1.0f);
    sw_result s;
    sw_run(&u, &dh, &s);
    int64_t bad_h = 0, bad_du = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t f = 0; f < F; f++) {
            float v = h3s_tensor_get_f64(&u, m * 2 * F + f), g = h3s_tensor_get_f64(&u, m * 2 * F + F + f);
            float d = ((float *)dh.data)[m * F + f];
            bad_h += ((uint16_t *)s.h.data)[m * F + f] != h3s_bf16_round(v * h3s_det_siluf(g));
            float dv = d * h3s_det_siluf(g), dg = (d * v) * h3s_det_silu_gradf(g);
            bad_du += memcmp(&dv, (float *)s.du.data + m * 2 * F + f, 4) != 0;
            bad_du += memcmp(&dg, (float *)s.du.data + m * 2 * F + F + f, 4) != 0;
        }
    CHECK(bad_h == 0, "%lld h elements differ from bf16(value * det_siluf(gate))", (long long)bad_h);
    CHECK(bad_du == 0, "%lld du elements differ from the documented formula", (long long)bad_du);
    h3s_tensor_free(&u);
    h3s_tensor_free(&dh);
    sw_free(&s);
}

/* 2. repeat and 5. threads (M = 600, F = 130). */
static void check_repeat_threads(void) {
    h3s_tensor u = h3t_normal2(H3S_BF16, 600, 260, 40, 2.0f), dh = h3t_normal2(H3S_F32, 600, 130, 41, 1.0f);
    sw_result r[4];
    int threads[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        h3s_set_num_threads(threads[i]);
        sw_run(&u, &dh, &r[i]);
    }
    h3s_set_num_threads(1);
    sw_run(&u, &dh, &r[3]);
    CHECK(sw_equal(&r[0], &r[3]), "two identical calls differ");
    for (int i = 1; i < 3; i++)
        CHECK(sw_equal(&r[0], &r[i]), "%d threads differ from 1", threads[i]);
    for (int i = 0; i < 4; i++)
        sw_free(&r[i]);
    h3s_tensor_free(&u);
    h3s_tensor_free(&dh);
}

/* 3. row 211 of M = 300 == row 3 of M = 7 == row 0 of M = 1 (h and du). */
static void check_row_invariance(void) {
    const int64_t F = 60;
    h3s_tensor ub = h3t_normal2(H3S_BF16, 300, 2 * F, 50, 2.0f), um = h3t_normal2(H3S_BF16, 7, 2 * F, 51, 2.0f);
    h3s_tensor u1 = h3t_normal2(H3S_BF16, 1, 2 * F, 52, 2.0f);
    h3s_tensor db = h3t_normal2(H3S_F32, 300, F, 53, 1.0f), dm = h3t_normal2(H3S_F32, 7, F, 54, 1.0f),
               d1 = h3t_normal2(H3S_F32, 1, F, 55, 1.0f);
    size_t ru = 2 * 2 * (size_t)F, rd = 4 * (size_t)F;
    memcpy((char *)um.data + 3 * ru, (char *)ub.data + 211 * ru, ru);
    memcpy(u1.data, (char *)ub.data + 211 * ru, ru);
    memcpy((char *)dm.data + 3 * rd, (char *)db.data + 211 * rd, rd);
    memcpy(d1.data, (char *)db.data + 211 * rd, rd);
    sw_result rb, rm, r1;
    sw_run(&ub, &db, &rb);
    sw_run(&um, &dm, &rm);
    sw_run(&u1, &d1, &r1);
    CHECK(h3t_rows_equal(&rb.h, 211, &rm.h, 3, 1) && h3t_rows_equal(&rb.h, 211, &r1.h, 0, 1),
          "h row depends on M or position");
    CHECK(h3t_rows_equal(&rb.du, 211, &rm.du, 3, 1) && h3t_rows_equal(&rb.du, 211, &r1.du, 0, 1),
          "du row depends on M or position");
    h3s_tensor *frees[] = {&ub, &um, &u1, &db, &dm, &d1};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
    sw_free(&rb);
    sw_free(&rm);
    sw_free(&r1);
}

/* 7. M = 0 succeeds; du NULL is "not computed" and succeeds without writing. */
static void check_boundaries(void) {
    h3s_tensor u = h3t_alloc2(H3S_BF16, 0, 74), dh = h3t_alloc2(H3S_F32, 0, 37);
    sw_result r;
    sw_run(&u, &dh, &r);
    sw_free(&r);
    h3s_tensor_free(&u);
    h3s_tensor_free(&dh);
    h3s_tensor u2 = h3t_normal2(H3S_BF16, 3, 8, 60, 1.0f), dh2 = h3t_normal2(H3S_F32, 3, 4, 61, 1.0f);
    CHECK_OK(h3s_swiglu_backward(&u2, &dh2, NULL));
    h3s_tensor_free(&u2);
    h3s_tensor_free(&dh2);
}

/* 8. h3s_swiglu_backward_rounded: du as h3s_swiglu_backward writes it, and du_bf16 = du rounded to BF16 (the
 * conversion's round to nearest even); refused for the golden variant, without du, or over its inputs. */
static void check_rounded(void) {
    const int64_t M = 9, F = 40;
    h3s_tensor u = h3t_normal2(H3S_BF16, M, 2 * F, 80, 2.0f), dh = h3t_normal2(H3S_F32, M, F, 81, 1.0f);
    h3s_tensor du = h3t_alloc2(H3S_F32, M, 2 * F), du2 = h3t_alloc2(H3S_F32, M, 2 * F);
    h3s_tensor dub = h3t_alloc2(H3S_BF16, M, 2 * F), want = h3t_alloc2(H3S_BF16, M, 2 * F);
    CHECK_OK(h3s_swiglu_backward(&u, &dh, &du));
    CHECK_OK(h3s_swiglu_backward_rounded(&u, &dh, &du2, &dub));
    CHECK_OK(h3s_tensor_convert(&du, &want));
    CHECK(h3t_bitwise_equal(&du, &du2), "swiglu_backward_rounded: du is swiglu_backward's");
    CHECK(h3t_bitwise_equal(&dub, &want), "swiglu_backward_rounded: du_bf16 is du rounded to BF16");
    h3s_tensor u64 = h3t_to_f64(&u), dh64 = h3t_to_f64(&dh), du64 = h3t_alloc2(H3S_F64, M, 2 * F);
    h3s_tensor dubad = h3t_alloc2(H3S_BF16, M, 2 * F + 2);
    h3s_tensor uview = u; /* du_bf16 over u's own bytes */
    uview.shape[1] = 2 * F;
    h3t_outs all = {{&du2, &dub, &du64, &dubad}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_backward_rounded(&u64, &dh64, &du64, &dub));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_backward_rounded(&u, &dh, NULL, &dub));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &all, h3s_swiglu_backward_rounded(&u, &dh, &du2, &dubad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_backward_rounded(&u, &dh, &du2, &uview));
    h3s_tensor *frees[] = {&u, &dh, &du, &du2, &dub, &want, &u64, &dh64, &du64, &dubad};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

/* 6. bad input: every failing call leaves its poisoned output untouched. */
static void check_bad_input(void) {
    const int64_t M = 4, F = 6;
    h3s_tensor u = h3t_normal2(H3S_BF16, M, 2 * F, 70, 1.0f), dh = h3t_normal2(H3S_F32, M, F, 71, 1.0f);
    h3s_tensor h = h3t_alloc2(H3S_BF16, M, F), du = h3t_alloc2(H3S_F32, M, 2 * F);
    h3s_tensor uodd = h3t_alloc2(H3S_BF16, M, 2 * F + 1), u32 = h3t_alloc2(H3S_F32, M, 2 * F), u64 = h3t_to_f64(&u);
    h3s_tensor hbad = h3t_alloc2(H3S_BF16, M, F + 1), h64 = h3t_alloc2(H3S_F64, M, F), h32 = h3t_alloc2(H3S_F32, M, F);
    h3s_tensor dh16 = h3t_alloc2(H3S_BF16, M, F), dh64 = h3t_to_f64(&dh), dubad = h3t_alloc2(H3S_F32, M + 1, 2 * F);
    h3s_tensor du64 = h3t_alloc2(H3S_F64, M, 2 * F), dhbad = h3t_alloc2(H3S_F32, M, F - 1);
    h3t_outs all = {{&h, &du, &hbad, &h64, &h32, &dubad, &du64}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_forward(NULL, &h));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_forward(&u, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &all, h3s_swiglu_forward(&uodd, &h));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_forward(&u32, &h));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &all, h3s_swiglu_forward(&u, &hbad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_forward(&u, &h64)); /* strict u, golden h */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_forward(&u64, &h)); /* golden u, strict h */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_forward(&u, &h32)); /* h must be BF16 */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_backward(&u, NULL, &du));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_backward(NULL, &dh, &du));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_backward(&u, &dh16, &du));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_backward(&u, &dh64, &du)); /* strict u, golden dh */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_backward(&u64, &dh, &du)); /* golden u, strict dh */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &all, h3s_swiglu_backward(&u, &dh, &du64));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &all, h3s_swiglu_backward(&u, &dh, &dubad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &all, h3s_swiglu_backward(&u, &dhbad, &du));
    h.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &all, h3s_swiglu_forward(&u, &h));
    h.device = 0;
    du.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &all, h3s_swiglu_backward(&u, &dh, &du));
    du.device = 0;
    h.device = 2; /* neither host (0) nor CUDA (1) */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &all, h3s_swiglu_forward(&u, &h));
    h.device = 0;
    /* h over u: rows written while other threads still read them gave bits that depended on the thread count */
    void *u0 = h3t_snapshot(&u);
    int64_t hs[2] = {M, F};
    h3s_tensor h_u = h3s_tensor_view(u.data, H3S_BF16, 2, hs),
               h_gate = h3s_tensor_view((uint16_t *)u.data + F, H3S_BF16, 2, hs);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_swiglu_forward(&u, &h_u));
    CHECK(strstr(h3s_last_error(), "swiglu_forward: h overlaps u"), "names both: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_swiglu_forward(&u, &h_gate));
    CHECK(!memcmp(u.data, u0, h3s_tensor_nbytes(&u)), "a refused swiglu wrote over u");
    free(u0);
    h3s_tensor *frees[] = {&u, &dh, &h, &du, &uodd, &u32, &u64, &hbad, &h64, &h32, &dh16, &dh64, &dubad, &du64, &dhbad};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

int main(void) {
    /* One thread except where threads are the subject (thread invariance, repeat): OpenMP
     * barriers on an oversubscribed 2-core CI runner cost milliseconds each. */
    h3s_set_num_threads(1);
    check_accuracy(50, 60);
    check_rounded();
    check_accuracy(50, 37);
    check_accuracy(40, 100);
    check_accuracy(1, 37);
    check_documented_formula();
    check_repeat_threads();
    check_row_invariance();
    check_boundaries();
    check_bad_input();
    return h3t_finish("test_swiglu");
}

/* AdaLN projection: a = bf16(silu(temb)), table = linear(a, w, b); backward dtemb, dw, db --
 * golden against plain loops and central differences, strict against golden, repeat / row /
 * thread invariance, partial gradients, bad input, T = 0.
 *
 * Error bounds (u = 2^-8, the BF16 unit roundoff: one rounding moves a value by at most u of
 * itself, ~0.42 u in rel-L2 over many values; e = 2^-24 for F32):
 *  - a: silu in double rounded to f32 (e) then to BF16 (u): rel-L2 <= u + e.
 *  - table: two BF16 roundings reach it -- a's (random relative errors <= u, carried through the
 *    random-sign weights, ~0.42 u in rel-L2) and the output's own (<= u) -- plus F32 sums
 *    (~sqrt(E) e).  Bound 2u.
 *  - dtemb: da = dtable @ w uses the same BF16 w and F32 dtable in both backends (no rounded
 *    activation enters), then one f32 product with silu'(temb) rounded to f32: F32 chains of
 *    N <= 90 terms, ~sqrt(N) e; bound 1e-5.
 *  - dw = dtable^T a: the strict a is BF16-rounded (relative error <= u per element, the golden
 *    a is exact), the F32 fold adds ~sqrt(T) e: bound u.
 *  - db = column sums of dtable: identical inputs, F32 fold only: bound 1e-6. */
#include <math.h>

#include "cuda/cuda_ops.h"
#include "ops/ops.h"
#include "test_util.h"

#define U_BF16 (1.0 / 256.0)
#define E_F32 (1.0 / 16777216.0)

typedef struct proj {
    int64_t T, E, N;
    h3s_tensor temb, w, b, a, table, dtable, dtemb, dw, db;
} proj;

/* strict: temb F32, w/b/a/table BF16, gradients F32; golden: all F64 */
static void proj_alloc(proj *p, int golden, int64_t T, int64_t E, int64_t N) {
    h3s_dtype act = golden ? H3S_F64 : H3S_BF16, f = golden ? H3S_F64 : H3S_F32;
    p->T = T;
    p->E = E;
    p->N = N;
    p->temb = h3t_alloc2(f, T, E);
    p->w = h3t_alloc2(act, N, E);
    p->b = h3t_alloc1(act, N);
    p->a = h3t_alloc2(act, T, E);
    p->table = h3t_alloc2(act, T, N);
    p->dtable = h3t_alloc2(f, T, N);
    p->dtemb = h3t_alloc2(f, T, E);
    p->dw = h3t_alloc2(f, N, E);
    p->db = h3t_alloc1(f, N);
}

static void proj_fill(proj *p, uint64_t seed) {
    h3t_fill_normal(&p->temb, seed, 1.5f); /* temb spans silu's curved region and both tails */
    h3t_fill_normal(&p->w, seed + 1, (float)(1.0 / sqrt((double)p->E)));
    h3t_fill_normal(&p->b, seed + 2, 0.2f);
    h3t_fill_normal(&p->dtable, seed + 3, 1.0f);
}

static void proj_free(proj *p) {
    h3s_tensor *all[] = {&p->temb, &p->w, &p->b, &p->a, &p->table, &p->dtable, &p->dtemb, &p->dw, &p->db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void proj_run(proj *p) {
    CHECK_OK(h3s_adaln_projection_forward(&p->temb, &p->w, &p->b, &p->a, &p->table));
    CHECK_OK(h3s_adaln_projection_backward(&p->temb, &p->a, &p->w, &p->dtable, &p->dtemb, &p->dw, &p->db));
}

static void proj_golden_of(const proj *s, proj *g) {
    proj_alloc(g, 1, s->T, s->E, s->N);
    CHECK_OK(h3s_tensor_convert(&s->temb, &g->temb));
    CHECK_OK(h3s_tensor_convert(&s->w, &g->w));
    CHECK_OK(h3s_tensor_convert(&s->b, &g->b));
    CHECK_OK(h3s_tensor_convert(&s->dtable, &g->dtable));
}

/* <dtable, table> of the golden forward, for h3t_fd_check (ctx: a proj) */
static double proj_loss(void *ctx) {
    proj *g = ctx;
    CHECK_OK(h3s_adaln_projection_forward(&g->temb, &g->w, &g->b, &g->a, &g->table));
    double l = 0;
    for (int64_t i = 0; i < g->T * g->N; i++)
        l += ((double *)g->dtable.data)[i] * ((double *)g->table.data)[i];
    return l;
}

static void test_golden(void) {
    proj s, g;
    proj_alloc(&s, 0, 3, 7, 12);
    proj_fill(&s, 10);
    proj_golden_of(&s, &g);
    proj_run(&g);
    /* forward against plain loops: a = silu(temb) with no cast, table = a w^T + b */
    double wa = 0, wt = 0;
    for (int64_t t = 0; t < 3; t++) {
        for (int64_t k = 0; k < 7; k++)
            wa = fmax(wa, fabs(((double *)g.a.data)[t * 7 + k] - h3t_silu(((double *)g.temb.data)[t * 7 + k])));
        for (int64_t n = 0; n < 12; n++) {
            double r = ((double *)g.b.data)[n];
            for (int64_t k = 0; k < 7; k++)
                r += h3t_silu(((double *)g.temb.data)[t * 7 + k]) * ((double *)g.w.data)[n * 7 + k];
            wt = fmax(wt, fabs(((double *)g.table.data)[t * 12 + n] - r));
        }
    }
    CHECK(wa <= 1e-15 && wt <= 1e-14, "golden adaln vs plain loops: a %g, table %g", wa, wt);
    h3s_tensor dtemb = h3t_to_f64(&g.dtemb), dw = h3t_to_f64(&g.dw), db = h3t_to_f64(&g.db);
    h3t_fd_check(proj_loss, &g, &g.temb, &dtemb, "golden adaln", "dtemb");
    h3t_fd_check(proj_loss, &g, &g.w, &dw, "golden adaln", "dw");
    h3t_fd_check(proj_loss, &g, &g.b, &db, "golden adaln", "db");
    h3s_tensor_free(&dtemb);
    h3s_tensor_free(&dw);
    h3s_tensor_free(&db);
    proj_free(&s);
    proj_free(&g);
}

static void check_accuracy(int64_t T, int64_t E, int64_t N, uint64_t seed, int print) {
    proj s, g;
    proj_alloc(&s, 0, T, E, N);
    proj_fill(&s, seed);
    proj_golden_of(&s, &g);
    proj_run(&s);
    proj_run(&g);
    const char *names[5] = {"a", "table", "dtemb", "dw", "db"};
    const h3s_tensor *st[5] = {&s.a, &s.table, &s.dtemb, &s.dw, &s.db};
    const h3s_tensor *gt[5] = {&g.a, &g.table, &g.dtemb, &g.dw, &g.db};
    const double bound[5] = {U_BF16 + E_F32, 2 * U_BF16, 1e-5, U_BF16, 1e-6};
    for (int i = 0; i < 5; i++) {
        double e = h3t_rel_l2(st[i], gt[i]);
        CHECK(e <= bound[i], "adaln %s rel-L2 %g > %g (T %lld E %lld N %lld)", names[i], e, bound[i], (long long)T,
              (long long)E, (long long)N);
        if (print) printf("adaln %s rel-L2 %.3g (bound %.3g)\n", names[i], e, bound[i]);
    }
    proj_free(&s);
    proj_free(&g);
}

static void test_accuracy(void) {
    check_accuracy(37, 100, 90, 20, 1); /* N = 6 * 3 * 5: a block's table for H = 5 */
    check_accuracy(1, 60, 10, 30, 0);   /* T = 1; N = 2 * 5: norm_out */
    check_accuracy(4, 37, 36, 40, 0);
}

static void test_invariance(void) {
    const int64_t E = 20, N = 36;
    proj a, b;
    proj_alloc(&a, 0, 9, E, N);
    proj_alloc(&b, 0, 9, E, N);
    proj_fill(&a, 50);
    proj_fill(&b, 50);
    proj_run(&a);
    proj_run(&b);
    CHECK(h3t_bitwise_equal(&a.a, &b.a) && h3t_bitwise_equal(&a.table, &b.table) &&
              h3t_bitwise_equal(&a.dtemb, &b.dtemb) && h3t_bitwise_equal(&a.dw, &b.dw) &&
              h3t_bitwise_equal(&a.db, &b.db),
          "adaln repeat differs");
    /* rows: temb row 0 of `a` at row 0 of T = 1, 3 of T = 7, 211 of T = 300 (same w, b) */
    const int64_t Ts[3] = {1, 7, 300}, at[3] = {0, 3, 211};
    proj r[3];
    for (int k = 0; k < 3; k++) {
        proj_alloc(&r[k], 0, Ts[k], E, N);
        proj_fill(&r[k], 60 + (uint64_t)k);
        memcpy(r[k].w.data, a.w.data, h3s_tensor_nbytes(&a.w));
        memcpy(r[k].b.data, a.b.data, h3s_tensor_nbytes(&a.b));
        memcpy((float *)r[k].temb.data + at[k] * E, a.temb.data, E * sizeof(float));
        memcpy((float *)r[k].dtable.data + at[k] * N, a.dtable.data, N * sizeof(float));
        proj_run(&r[k]);
    }
    for (int k = 1; k < 3; k++) {
        CHECK(h3t_rows_equal(&r[k].a, at[k], &r[0].a, 0, 1) && h3t_rows_equal(&r[k].table, at[k], &r[0].table, 0, 1),
              "adaln forward row differs at T = %lld", (long long)Ts[k]);
        CHECK(h3t_rows_equal(&r[k].dtemb, at[k], &r[0].dtemb, 0, 1), "adaln dtemb row differs at T = %lld",
              (long long)Ts[k]);
    }
    CHECK(h3t_rows_equal(&r[0].table, 0, &a.table, 0, 1), "T = 1 differs from row 0 of T = 9");
    for (int k = 0; k < 3; k++)
        proj_free(&r[k]);
    /* threads: T = 600 rows, 3 fold tiles for dw and db */
    proj th[3];
    const int threads[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        h3s_set_num_threads(threads[k]);
        proj_alloc(&th[k], 0, 600, E, N);
        proj_fill(&th[k], 70);
        proj_run(&th[k]);
    }
    h3s_set_num_threads(0);
    for (int k = 1; k < 3; k++)
        CHECK(h3t_bitwise_equal(&th[k].a, &th[0].a) && h3t_bitwise_equal(&th[k].table, &th[0].table) &&
                  h3t_bitwise_equal(&th[k].dtemb, &th[0].dtemb) && h3t_bitwise_equal(&th[k].dw, &th[0].dw) &&
                  h3t_bitwise_equal(&th[k].db, &th[0].db),
              "adaln differs at %d threads", threads[k]);
    for (int k = 0; k < 3; k++)
        proj_free(&th[k]);
    proj_free(&a);
    proj_free(&b);
}

static void test_partial_and_empty(void) {
    proj p;
    proj_alloc(&p, 0, 5, 12, 18);
    proj_fill(&p, 80);
    proj_run(&p);
    h3s_tensor dw = h3t_alloc2(H3S_F32, 18, 12), dtemb = h3t_alloc2(H3S_F32, 5, 12), db = h3t_alloc1(H3S_F32, 18);
    CHECK_OK(h3s_adaln_projection_backward(&p.temb, &p.a, &p.w, &p.dtable, NULL, &dw, NULL));
    CHECK(h3t_bitwise_equal(&dw, &p.dw), "dw alone differs");
    CHECK_OK(h3s_adaln_projection_backward(&p.temb, &p.a, &p.w, &p.dtable, &dtemb, NULL, NULL));
    CHECK(h3t_bitwise_equal(&dtemb, &p.dtemb), "dtemb alone differs");
    CHECK_OK(h3s_adaln_projection_backward(&p.temb, &p.a, &p.w, &p.dtable, NULL, NULL, &db));
    CHECK(h3t_bitwise_equal(&db, &p.db), "db alone differs");
    CHECK_OK(h3s_adaln_projection_backward(&p.temb, &p.a, &p.w, &p.dtable, NULL, NULL, NULL));
    /* no bias == zero bias */
    h3s_tensor a0 = h3t_alloc2(H3S_BF16, 5, 12), t0 = h3t_alloc2(H3S_BF16, 5, 18);
    memset(p.b.data, 0, h3s_tensor_nbytes(&p.b));
    CHECK_OK(h3s_adaln_projection_forward(&p.temb, &p.w, NULL, &a0, &t0));
    CHECK_OK(h3s_adaln_projection_forward(&p.temb, &p.w, &p.b, &p.a, &p.table));
    CHECK(h3t_bitwise_equal(&t0, &p.table) && h3t_bitwise_equal(&a0, &p.a), "NULL bias differs from a zero bias");
    h3s_tensor *tmp[] = {&dw, &dtemb, &db, &a0, &t0};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++)
        h3s_tensor_free(tmp[i]);
    proj_free(&p);
    for (int golden = 0; golden < 2; golden++) {
        proj z;
        proj_alloc(&z, golden, 0, 6, 12);
        proj_fill(&z, 90);
        h3t_poison(&z.dw);
        h3t_poison(&z.db);
        proj_run(&z);
        CHECK(h3t_all_zero(&z.dw) && h3t_all_zero(&z.db), "T = 0: dw/db are not 0 (%s)", golden ? "golden" : "strict");
        proj_free(&z);
    }
}

static void test_bad_input(void) {
    proj s, g;
    proj_alloc(&s, 0, 4, 8, 12);
    proj_fill(&s, 100);
    proj_golden_of(&s, &g);
    h3s_tensor temb_bf = h3t_alloc2(H3S_BF16, 4, 8), w_f32 = h3t_alloc2(H3S_F32, 12, 8),
               w_bad = h3t_alloc2(H3S_BF16, 12, 9);
    h3s_tensor b_bad = h3t_alloc1(H3S_BF16, 11), a_bad = h3t_alloc2(H3S_BF16, 5, 8), a_f32 = h3t_alloc2(H3S_F32, 4, 8);
    h3s_tensor table_bad = h3t_alloc2(H3S_BF16, 4, 13), table_f32 = h3t_alloc2(H3S_F32, 4, 12);
    h3s_tensor dtable_bf = h3t_alloc2(H3S_BF16, 4, 12), dtable_bad = h3t_alloc2(H3S_F32, 3, 12);
    h3s_tensor dw_bad = h3t_alloc2(H3S_F32, 12, 7), db_bad = h3t_alloc1(H3S_F32, 13),
               dtemb_bf = h3t_alloc2(H3S_BF16, 4, 8);
    h3s_tensor *outs[] = {&s.a,   &s.table, &s.dtemb,   &s.dw,      &s.db,   &g.a,    &g.table,
                          &a_bad, &a_f32,   &table_bad, &table_f32, &dw_bad, &db_bad, &dtemb_bf};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h3t_poison(outs[i]);
#define FWD(t, w, b, a, tab) h3s_adaln_projection_forward(t, w, b, a, tab)
    CHECK_FAILS(H3S_ERR_INVALID, FWD(NULL, &s.w, &s.b, &s.a, &s.table));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&s.temb, NULL, &s.b, &s.a, &s.table));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&s.temb, &s.w, &s.b, NULL, &s.table));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&s.temb, &s.w, &s.b, &s.a, NULL));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&temb_bf, &s.w, &s.b, &s.a, &s.table));  /* temb must be F32 */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&s.temb, &w_f32, &s.b, &s.a, &s.table)); /* w must be BF16 */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&s.temb, &s.w, &s.b, &a_f32, &s.table));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&s.temb, &s.w, &s.b, &s.a, &table_f32));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.temb, &s.w, &s.b, &s.a, &s.table)); /* golden temb, strict rest */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&s.temb, &g.w, &g.b, &g.a, &g.table)); /* strict temb, golden rest */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.temb, &g.w, &s.b, &g.a, &g.table)); /* one strict bias */
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&s.temb, &w_bad, &s.b, &s.a, &s.table));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&s.temb, &s.w, &b_bad, &s.a, &s.table));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&s.temb, &s.w, &s.b, &a_bad, &s.table));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&s.temb, &s.w, &s.b, &s.a, &table_bad));
    s.table.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, FWD(&s.temb, &s.w, &s.b, &s.a, &s.table));
    s.table.device = 0;
    /* an output over an operand or the other output, refused naming both before anything is written: table over w
     * was refused by the projection only after `a` had been written */
    void *w0 = h3t_snapshot(&s.w), *temb0 = h3t_snapshot(&s.temb);
    h3s_tensor table_w = h3s_tensor_view(s.w.data, H3S_BF16, 2, s.table.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&s.temb, &s.w, &s.b, &s.a, &table_w));
    CHECK(strstr(h3s_last_error(), "adaln_projection_forward: table overlaps w"), "names both: %s", h3s_last_error());
    CHECK(h3t_all_poison(&s.a), "a refused projection wrote a");
    h3s_tensor a_temb = h3s_tensor_view(s.temb.data, H3S_BF16, 2, s.a.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&s.temb, &s.w, &s.b, &a_temb, &s.table));
    CHECK(strstr(h3s_last_error(), "a overlaps temb"), "names both: %s", h3s_last_error());
    /* T = 2: a over the first 2 rows of s.a, table over the rest of them */
    h3s_tensor temb2 = h3s_tensor_view(s.temb.data, H3S_F32, 2, (int64_t[2]){2, 8});
    h3s_tensor a2 = h3s_tensor_view(s.a.data, H3S_BF16, 2, (int64_t[2]){2, 8});
    h3s_tensor table_a = h3s_tensor_view((uint16_t *)s.a.data + 8, H3S_BF16, 2, (int64_t[2]){2, 12});
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&temb2, &s.w, &s.b, &a2, &table_a));
    CHECK(strstr(h3s_last_error(), "table overlaps a"), "names both: %s", h3s_last_error());
    CHECK(!memcmp(s.w.data, w0, h3s_tensor_nbytes(&s.w)) && !memcmp(s.temb.data, temb0, h3s_tensor_nbytes(&s.temb)),
          "a refused projection wrote over an operand");
    free(w0);
    free(temb0);
    if (!h3s_cuda_available()) {
        h3s_tensor *dev[] = {&s.temb, &s.w, &s.b, &s.a, &s.table};
        for (int i = 0; i < 5; i++)
            dev[i]->device = 1;
        h3s_clear_error();
        h3s_status st = FWD(&s.temb, &s.w, &s.b, &s.a, &s.table);
        CHECK(st == H3S_ERR_DEVICE && h3s_last_error()[0], "device adaln without CUDA -> %s", h3s_status_name(st));
        for (int i = 0; i < 5; i++)
            dev[i]->device = 0;
    }
#undef FWD
#define BWD(t, a, w, dtab, dt, dw, db) h3s_adaln_projection_backward(t, a, w, dtab, dt, dw, db)
    CHECK_FAILS(H3S_ERR_INVALID, BWD(NULL, &s.a, &s.w, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&s.temb, NULL, &s.w, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&s.temb, &s.a, NULL, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&s.temb, &s.a, &s.w, NULL, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&s.temb, &s.a, &s.w, &dtable_bf, &s.dtemb, &s.dw, &s.db)); /* BF16 gradient */
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&s.temb, &s.a, &s.w, &s.dtable, &dtemb_bf, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&s.temb, &a_f32, &s.w, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&s.temb, &s.a, &s.w, &g.dtable, &s.dtemb, &s.dw, &s.db)); /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&g.temb, &g.a, &g.w, &g.dtable, &s.dtemb, &g.dw, &g.db)); /* mixed */
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&s.temb, &a_bad, &s.w, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&s.temb, &s.a, &w_bad, &s.dtable, &s.dtemb, &s.dw, &s.db));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&s.temb, &s.a, &s.w, &dtable_bad, &s.dtemb, &s.dw, &s.db)); /* T mismatch */
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&s.temb, &s.a, &s.w, &s.dtable, &s.dtemb, &dw_bad, &s.db));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&s.temb, &s.a, &s.w, &s.dtable, &s.dtemb, &s.dw, &db_bad));
    s.dw.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, BWD(&s.temb, &s.a, &s.w, &s.dtable, &s.dtemb, &s.dw, &s.db));
    s.dw.device = 0;
#undef BWD
    int untouched = 1;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        untouched &= h3t_all_poison(outs[i]);
    CHECK(untouched, "a failed adaln call wrote an output");
    h3s_tensor *all[] = {&temb_bf,   &w_f32,     &w_bad,      &b_bad,  &a_bad,  &a_f32,   &table_bad,
                         &table_f32, &dtable_bf, &dtable_bad, &dw_bad, &db_bad, &dtemb_bf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
    proj_free(&s);
    proj_free(&g);
}

int main(void) {
    test_golden();
    test_accuracy();
    test_invariance();
    test_partial_and_empty();
    test_bad_input();
    return h3t_finish("test_adaln");
}

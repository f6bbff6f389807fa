/* Timestep embedding: sinusoid (forward, dt) and the f32 MLP (forward, dfeatures, dw1, db1,
 * dw2, db2) -- hand values, golden against an independent double reference and central
 * differences, strict against golden, repeat / row / thread invariance, bad input, boundaries.
 *
 * Error bounds (e = 2^-24, the F32 unit roundoff; no BF16 rounding enters anything here):
 *  - sinusoid: the strict exponent f32(f32(-ln 1e4) * k) / half carries 3 f32 roundings
 *    (<= 3e * 9.21 absolute), exp adds e, the product t * freq adds e: the f32 angle is within
 *    30 e |arg| of the golden one; cos/sin add one f32 rounding.  Element bound 30 e |arg| + e,
 *    summed over the elements by sinusoid_bound().
 *  - sinusoid dt: per term the f32 cos/sin/freq above, two products, a difference and a product
 *    (<= 4 e relative); the row sum over half terms adds <= (half - 1) e sum|terms|.  Row bound
 *    (half + 70) e sum_k (|dcos_k| + |dsin_k|) freq_k (sinusoid_dt_bound()).
 *  - MLP: every node F32 (FMA chains over K <= 100 terms, silu/silu' rounded once to f32).
 *    One chain's rounding errors are at most K e of sum|terms| and, being of random sign, sum
 *    to ~sqrt(K) e ~ 6e-7 relative for K = 100; three chained nodes (linear_1, silu,
 *    linear_2 and their transposes) give ~2e-6.  Bound 1e-5 for every output and gradient:
 *    far below the BF16 resolution (3.9e-3) that a wrongly rounded F32 node would show. */
#include <math.h>

#include "cuda/cuda_ops.h"
#include "ops/ops.h"
#include "test_util.h"

#define E_F32 (1.0 / 16777216.0)
#define MLP_BOUND 1e-5

/* timesteps in [0, 1], spread out, F32 (exact in F64) */
static h3s_tensor timesteps(int64_t T, uint64_t seed) {
    h3s_tensor t = h3t_alloc1(H3S_F32, T);
    for (int64_t i = 0; i < T; i++) {
        float v = fabsf(h3s_rng_normal(seed, 9, (uint64_t)i)) * 0.45f;
        ((float *)t.data)[i] = v > 1.0f ? 1.0f : v;
    }
    return t;
}

static double golden_freq(int64_t k, int64_t half) { return exp(-log(10000.0) * (double)k / (double)half); }

static double sinusoid_bound(const h3s_tensor *t, int64_t freq_dim, const h3s_tensor *ref) {
    int64_t half = freq_dim / 2;
    double num = 0, den = 0;
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int64_t k = 0; k < half; k++) {
            double b = 30 * E_F32 * fabs(h3s_tensor_get_f64(t, i) * golden_freq(k, half)) + E_F32;
            num += 2 * b * b;
        }
    for (int64_t i = 0; i < h3s_tensor_numel(ref); i++)
        den += h3s_tensor_get_f64(ref, i) * h3s_tensor_get_f64(ref, i);
    return sqrt(num / den);
}

static double sinusoid_dt_bound(const h3s_tensor *dout, const h3s_tensor *ref) {
    int64_t T = dout->shape[0], freq_dim = dout->shape[1], half = freq_dim / 2;
    double num = 0, den = 0;
    for (int64_t i = 0; i < T; i++) {
        double s = 0;
        for (int64_t k = 0; k < half; k++)
            s += (fabs(h3s_tensor_get_f64(dout, i * freq_dim + k)) +
                  fabs(h3s_tensor_get_f64(dout, i * freq_dim + half + k))) *
                 golden_freq(k, half);
        double b = (double)(half + 70) * E_F32 * s;
        num += b * b;
        den += h3s_tensor_get_f64(ref, i) * h3s_tensor_get_f64(ref, i);
    }
    return sqrt(num / den);
}

/* ----------------------------------------------------------------- sinusoid -------- */

static void test_sinusoid_hand_values(void) {
    /* freq_dim 6, half 3: freq = (1, 1e4^-1/3, 1e4^-2/3); out = [cos(t f), sin(t f)], cos first */
    static const double want[2][6] = {{0.9689124217106447, 0.9999326746714, 0.9999998549503525, 0.24740395925452294,
                                       0.01160371166911856, 0.0005386086464663047},
                                      {0.5403023058681398, 0.9989229760406304, 0.9999976792064809, 0.8414709848078965,
                                       0.04639922346473128, 0.0021544330233656045}};
    float tv[2] = {0.25f, 1.0f};
    double tv64[2] = {0.25, 1.0};
    int64_t two = 2;
    h3s_tensor t = h3s_tensor_view(tv, H3S_F32, 1, &two), t64 = h3s_tensor_view(tv64, H3S_F64, 1, &two);
    h3s_tensor o = h3t_alloc2(H3S_F32, 2, 6), o64 = h3t_alloc2(H3S_F64, 2, 6);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, 6, &o));
    CHECK_OK(h3s_timestep_sinusoid_forward(&t64, 6, &o64));
    double ws = 0, wg = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 6; k++) {
            ws = fmax(ws, fabs(((float *)o.data)[i * 6 + k] - want[i][k]));
            wg = fmax(wg, fabs(((double *)o64.data)[i * 6 + k] - want[i][k]));
        }
    /* golden: a few double roundings; strict: 30 e |arg| + e, well inside 2 f32 ulps of 1 */
    CHECK(wg <= 1e-15, "golden sinusoid vs hand values: %g", wg);
    CHECK(ws <= 1.2e-7, "strict sinusoid vs hand values: %g", ws);
    /* t = 0: cos 1, sin 0 exactly */
    float z = 0.0f;
    int64_t one = 1;
    h3s_tensor tz = h3s_tensor_view(&z, H3S_F32, 1, &one), oz = h3t_alloc2(H3S_F32, 1, 4);
    CHECK_OK(h3s_timestep_sinusoid_forward(&tz, 4, &oz));
    float *ozv = (float *)oz.data;
    CHECK(ozv[0] == 1 && ozv[1] == 1 && ozv[2] == 0 && ozv[3] == 0, "t = 0: %g %g %g %g", ozv[0], ozv[1], ozv[2],
          ozv[3]);
    h3s_tensor_free(&o);
    h3s_tensor_free(&o64);
    h3s_tensor_free(&oz);
}

static void check_sinusoid_accuracy(int64_t T, int64_t freq_dim, uint64_t seed) {
    h3s_tensor t = timesteps(T, seed), t64 = h3t_to_f64(&t);
    h3s_tensor o = h3t_alloc2(H3S_F32, T, freq_dim), o64 = h3t_alloc2(H3S_F64, T, freq_dim);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, freq_dim, &o));
    CHECK_OK(h3s_timestep_sinusoid_forward(&t64, freq_dim, &o64));
    h3s_tensor g = h3t_alloc2(H3S_F32, T, freq_dim);
    h3t_fill_normal(&g, seed + 1, 1.0f);
    h3s_tensor g64 = h3t_to_f64(&g), dt = h3t_alloc1(H3S_F32, T), dt64 = h3t_alloc1(H3S_F64, T);
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &dt));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t64, &g64, &dt64));
    double eo = h3t_rel_l2(&o, &o64), bo = sinusoid_bound(&t, freq_dim, &o64);
    double ed = h3t_rel_l2(&dt, &dt64), bd = sinusoid_dt_bound(&g, &dt64);
    CHECK(eo <= bo, "sinusoid rel-L2 %g > %g (freq_dim %lld)", eo, bo, (long long)freq_dim);
    CHECK(ed <= bd, "sinusoid dt rel-L2 %g > %g (freq_dim %lld)", ed, bd, (long long)freq_dim);
    if (freq_dim == 256) printf("sinusoid rel-L2: out %.3g (bound %.3g), dt %.3g (bound %.3g)\n", eo, bo, ed, bd);
    h3s_tensor *all[] = {&t, &t64, &o, &o64, &g, &g64, &dt, &dt64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_sinusoid_accuracy(void) {
    check_sinusoid_accuracy(37, 256, 10); /* the model's freq_dim */
    check_sinusoid_accuracy(5, 100, 20);
    check_sinusoid_accuracy(1, 2, 30); /* half = 1: freq = (1) */
    check_sinusoid_accuracy(3, 60, 40);
}

static void test_sinusoid_gradient_fd(void) {
    /* golden dt against central differences of the golden forward: <dout, d out / dt> */
    const int64_t T = 4, FD = 10;
    double tv[4] = {0.0, 0.137, 0.61803398875, 1.0}, tp[4], tm[4];
    const double h = 1e-5;
    for (int i = 0; i < 4; i++) {
        tp[i] = tv[i] + h;
        tm[i] = tv[i] - h;
    }
    int64_t ts = T;
    h3s_tensor t = h3s_tensor_view(tv, H3S_F64, 1, &ts), tpl = h3s_tensor_view(tp, H3S_F64, 1, &ts),
               tmi = h3s_tensor_view(tm, H3S_F64, 1, &ts);
    h3s_tensor g = h3t_alloc2(H3S_F64, T, FD), op = h3t_alloc2(H3S_F64, T, FD), om = h3t_alloc2(H3S_F64, T, FD);
    h3t_fill_normal(&g, 51, 1.0f);
    h3s_tensor dt = h3t_alloc1(H3S_F64, T);
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &dt));
    CHECK_OK(h3s_timestep_sinusoid_forward(&tpl, FD, &op));
    CHECK_OK(h3s_timestep_sinusoid_forward(&tmi, FD, &om));
    for (int64_t i = 0; i < T; i++) {
        double fd = 0;
        for (int64_t k = 0; k < FD; k++)
            fd += ((double *)g.data)[i * FD + k] * (((double *)op.data)[i * FD + k] - ((double *)om.data)[i * FD + k]) /
                  (2 * h);
        double got = ((double *)dt.data)[i];
        CHECK(fabs(got - fd) <= 1e-8 * (1 + fabs(fd)), "sinusoid dt[%lld] = %.12g, central difference %.12g",
              (long long)i, got, fd);
    }
    h3s_tensor *all[] = {&g, &op, &om, &dt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_sinusoid_invariance(void) {
    const int64_t FD = 40;
    /* repeat */
    h3s_tensor t = timesteps(9, 61), g = h3t_alloc2(H3S_F32, 9, FD);
    h3t_fill_normal(&g, 62, 1.0f);
    h3s_tensor o1 = h3t_alloc2(H3S_F32, 9, FD), o2 = h3t_alloc2(H3S_F32, 9, FD);
    h3s_tensor d1 = h3t_alloc1(H3S_F32, 9), d2 = h3t_alloc1(H3S_F32, 9);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, FD, &o1));
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, FD, &o2));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &d1));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &d2));
    CHECK(h3t_bitwise_equal(&o1, &o2) && h3t_bitwise_equal(&d1, &d2), "sinusoid repeat differs");
    /* row invariance: t = 0.7321 with its dout row at row 0 of T = 1, 3 of T = 7, 211 of T = 300 */
    const int64_t Ts[3] = {1, 7, 300}, at[3] = {0, 3, 211};
    h3s_tensor probe_g = h3t_alloc2(H3S_F32, 1, FD);
    h3t_fill_normal(&probe_g, 63, 1.0f);
    h3s_tensor ro = {0}, rd = {0};
    for (int k = 0; k < 3; k++) {
        h3s_tensor tk = timesteps(Ts[k], 64 + (uint64_t)k), gk = h3t_alloc2(H3S_F32, Ts[k], FD);
        h3t_fill_normal(&gk, 65 + (uint64_t)k, 1.0f);
        ((float *)tk.data)[at[k]] = 0.7321f;
        memcpy((float *)gk.data + at[k] * FD, probe_g.data, FD * sizeof(float));
        h3s_tensor ok = h3t_alloc2(H3S_F32, Ts[k], FD), dk = h3t_alloc2(H3S_F32, Ts[k], 1);
        h3s_tensor dk1 = h3s_tensor_view(dk.data, H3S_F32, 1, &Ts[k]);
        CHECK_OK(h3s_timestep_sinusoid_forward(&tk, FD, &ok));
        CHECK_OK(h3s_timestep_sinusoid_backward(&tk, &gk, &dk1));
        if (k == 0) {
            ro = ok;
            rd = dk;
        } else {
            CHECK(h3t_rows_equal(&ok, at[k], &ro, 0, 1), "sinusoid row differs at T = %lld", (long long)Ts[k]);
            CHECK(h3t_rows_equal(&dk, at[k], &rd, 0, 1), "sinusoid dt differs at T = %lld", (long long)Ts[k]);
            h3s_tensor_free(&ok);
            h3s_tensor_free(&dk);
        }
        h3s_tensor_free(&tk);
        h3s_tensor_free(&gk);
    }
    /* threads */
    const int64_t T = 600;
    h3s_tensor tt = timesteps(T, 66), gt = h3t_alloc2(H3S_F32, T, FD);
    h3t_fill_normal(&gt, 67, 1.0f);
    h3s_tensor to[3], td[3];
    const int threads[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        h3s_set_num_threads(threads[k]);
        to[k] = h3t_alloc2(H3S_F32, T, FD);
        td[k] = h3t_alloc1(H3S_F32, T);
        CHECK_OK(h3s_timestep_sinusoid_forward(&tt, FD, &to[k]));
        CHECK_OK(h3s_timestep_sinusoid_backward(&tt, &gt, &td[k]));
    }
    h3s_set_num_threads(0);
    for (int k = 1; k < 3; k++)
        CHECK(h3t_bitwise_equal(&to[k], &to[0]) && h3t_bitwise_equal(&td[k], &td[0]), "sinusoid differs at %d threads",
              threads[k]);
    for (int k = 0; k < 3; k++) {
        h3s_tensor_free(&to[k]);
        h3s_tensor_free(&td[k]);
    }
    h3s_tensor *all[] = {&t, &g, &o1, &o2, &d1, &d2, &probe_g, &ro, &rd, &tt, &gt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_sinusoid_bad_input(void) {
    h3s_tensor t = timesteps(3, 71), o = h3t_alloc2(H3S_F32, 3, 8), o64 = h3t_alloc2(H3S_F64, 3, 8);
    h3s_tensor t64 = h3t_to_f64(&t), tbf = h3t_alloc1(H3S_BF16, 3), t2 = h3t_alloc2(H3S_F32, 3, 1);
    h3s_tensor o_rows = h3t_alloc2(H3S_F32, 4, 8), o_bf = h3t_alloc2(H3S_BF16, 3, 8);
    h3s_tensor g = h3t_alloc2(H3S_F32, 3, 8), g64 = h3t_alloc2(H3S_F64, 3, 8), g_odd = h3t_alloc2(H3S_F32, 3, 7);
    h3s_tensor g_rows = h3t_alloc2(H3S_F32, 2, 8), dt = h3t_alloc1(H3S_F32, 3), dt64 = h3t_alloc1(H3S_F64, 3);
    h3s_tensor dt_short = h3t_alloc1(H3S_F32, 2), g_empty = h3t_alloc2(H3S_F32, 3, 0);
    h3s_tensor *outs[] = {&o, &o64, &o_rows, &o_bf, &dt, &dt64, &dt_short};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h3t_poison(outs[i]);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(NULL, 8, &o));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 8, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 7, &o)); /* odd freq_dim */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 0, &o));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, -8, &o));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_timestep_sinusoid_forward(&t, 10, &o)); /* out width != freq_dim */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_timestep_sinusoid_forward(&t, 8, &o_rows));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_timestep_sinusoid_forward(&t2, 8, &o)); /* t must be 1-D */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_forward(&tbf, 8, &o));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_forward(&t, 8, &o64)); /* strict t, golden out */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_forward(&t64, 8, &o)); /* golden t, strict out */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_forward(&t, 8, &o_bf));
    ((float *)t.data)[1] = NAN;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 8, &o));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&t, &g, &dt));
    ((float *)t.data)[1] = INFINITY;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 8, &o));
    ((float *)t.data)[1] = 0.5f;
    o.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_timestep_sinusoid_forward(&t, 8, &o));
    o.device = 0;
    /* out over t (was computed, reading t while other threads wrote it) */
    h3s_tensor o_t = h3t_alloc2(H3S_F32, 3, 8);
    memcpy(o_t.data, t.data, h3s_tensor_nbytes(&t));
    h3s_tensor t_in = h3s_tensor_view(o_t.data, H3S_F32, 1, t.shape);
    void *o_t0 = h3t_snapshot(&o_t);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t_in, 8, &o_t));
    CHECK(strstr(h3s_last_error(), "timestep_sinusoid_forward: out overlaps t"), "names both: %s", h3s_last_error());
    CHECK(!memcmp(o_t.data, o_t0, h3s_tensor_nbytes(&o_t)), "a refused sinusoid wrote over t");
    free(o_t0);
    h3s_tensor_free(&o_t);

    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(NULL, &g, &dt));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&t, NULL, &dt));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&t, &g, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&t, &g_odd, &dt));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&t, &g_empty, &dt));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_timestep_sinusoid_backward(&t, &g_rows, &dt));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_timestep_sinusoid_backward(&t, &g, &dt_short));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_backward(&t, &g64, &dt));   /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_backward(&t, &g, &dt64));   /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_backward(&t64, &g, &dt64)); /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_timestep_sinusoid_backward(&tbf, &g, &dt));
    dt.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_timestep_sinusoid_backward(&t, &g, &dt));
    dt.device = 0;
    if (!h3s_cuda_available()) {
        t.device = o.device = 1;
        h3s_clear_error();
        h3s_status st = h3s_timestep_sinusoid_forward(&t, 8, &o);
        CHECK(st == H3S_ERR_DEVICE && h3s_last_error()[0], "device sinusoid without CUDA -> %s", h3s_status_name(st));
        t.device = o.device = 0;
    }
    int untouched = 1;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        untouched &= h3t_all_poison(outs[i]);
    CHECK(untouched, "a failed sinusoid call wrote its output");
    h3s_tensor *all[] = {&t, &o,   &o64,   &t64,    &tbf, &t2,   &o_rows,   &o_bf,
                         &g, &g64, &g_odd, &g_rows, &dt,  &dt64, &dt_short, &g_empty};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void test_sinusoid_zero_rows(void) {
    h3s_tensor t = h3t_alloc1(H3S_F32, 0), o = h3t_alloc2(H3S_F32, 0, 8), g = h3t_alloc2(H3S_F32, 0, 8),
               dt = h3t_alloc1(H3S_F32, 0);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, 8, &o));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &dt));
    h3s_tensor_free(&t);
    h3s_tensor_free(&o);
    h3s_tensor_free(&g);
    h3s_tensor_free(&dt);
}

/* ----------------------------------------------------------------- MLP ------------- */

typedef struct mlp {
    int64_t T, Fd, Eh, E;
    h3s_tensor features, w1, b1, w2, b2, hidden, temb, dtemb; /* inputs and forward outputs */
    h3s_tensor dfeatures, dw1, db1, dw2, db2;                 /* gradients */
} mlp;

static void mlp_alloc(mlp *m, h3s_dtype dt, int64_t T, int64_t Fd, int64_t Eh, int64_t E) {
    m->T = T;
    m->Fd = Fd;
    m->Eh = Eh;
    m->E = E;
    m->features = h3t_alloc2(dt, T, Fd);
    m->w1 = h3t_alloc2(dt, Eh, Fd);
    m->b1 = h3t_alloc1(dt, Eh);
    m->w2 = h3t_alloc2(dt, E, Eh);
    m->b2 = h3t_alloc1(dt, E);
    m->hidden = h3t_alloc2(dt, T, Eh);
    m->temb = h3t_alloc2(dt, T, E);
    m->dtemb = h3t_alloc2(dt, T, E);
    m->dfeatures = h3t_alloc2(dt, T, Fd);
    m->dw1 = h3t_alloc2(dt, Eh, Fd);
    m->db1 = h3t_alloc1(dt, Eh);
    m->dw2 = h3t_alloc2(dt, E, Eh);
    m->db2 = h3t_alloc1(dt, E);
}

static void mlp_fill(mlp *m, uint64_t seed) {
    /* features look like sinusoid outputs (|.| <= 1), weights ~ 1/sqrt(fan-in) */
    h3t_fill_normal(&m->features, seed, 0.7f);
    h3t_fill_normal(&m->w1, seed + 1, (float)(1.0 / sqrt((double)m->Fd)));
    h3t_fill_normal(&m->b1, seed + 2, 0.1f);
    h3t_fill_normal(&m->w2, seed + 3, (float)(1.0 / sqrt((double)m->Eh)));
    h3t_fill_normal(&m->b2, seed + 4, 0.1f);
    h3t_fill_normal(&m->dtemb, seed + 5, 1.0f);
}

static void mlp_free(mlp *m) {
    h3s_tensor *all[] = {&m->features, &m->w1,        &m->b1,  &m->w2,  &m->b2,  &m->hidden, &m->temb,
                         &m->dtemb,    &m->dfeatures, &m->dw1, &m->db1, &m->dw2, &m->db2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
}

static void mlp_run(mlp *m) {
    CHECK_OK(h3s_timestep_mlp_forward(&m->features, &m->w1, &m->b1, &m->w2, &m->b2, &m->hidden, &m->temb));
    CHECK_OK(h3s_timestep_mlp_backward(&m->features, &m->w1, &m->w2, &m->hidden, &m->dtemb, &m->dfeatures, &m->dw1,
                                       &m->db1, &m->dw2, &m->db2));
}

/* golden twin holding exactly the strict inputs */
static void mlp_golden_of(const mlp *s, mlp *g) {
    mlp_alloc(g, H3S_F64, s->T, s->Fd, s->Eh, s->E);
    CHECK_OK(h3s_tensor_convert(&s->features, &g->features));
    CHECK_OK(h3s_tensor_convert(&s->w1, &g->w1));
    CHECK_OK(h3s_tensor_convert(&s->b1, &g->b1));
    CHECK_OK(h3s_tensor_convert(&s->w2, &g->w2));
    CHECK_OK(h3s_tensor_convert(&s->b2, &g->b2));
    CHECK_OK(h3s_tensor_convert(&s->dtemb, &g->dtemb));
}

/* temb of the golden MLP by plain loops (an independent reference for the composition) */
static double mlp_reference(const mlp *g, int64_t t, int64_t e) {
    double out = ((double *)g->b2.data)[e];
    for (int64_t j = 0; j < g->Eh; j++) {
        double h = ((double *)g->b1.data)[j];
        for (int64_t k = 0; k < g->Fd; k++)
            h += ((double *)g->features.data)[t * g->Fd + k] * ((double *)g->w1.data)[j * g->Fd + k];
        out += h3t_silu(h) * ((double *)g->w2.data)[e * g->Eh + j];
    }
    return out;
}

/* <dtemb, temb> of the golden forward, for h3t_fd_check (ctx: an mlp) */
static double mlp_loss(void *ctx) {
    mlp *g = ctx;
    CHECK_OK(h3s_timestep_mlp_forward(&g->features, &g->w1, &g->b1, &g->w2, &g->b2, &g->hidden, &g->temb));
    double l = 0;
    for (int64_t i = 0; i < g->T * g->E; i++)
        l += ((double *)g->dtemb.data)[i] * ((double *)g->temb.data)[i];
    return l;
}

static void test_mlp_golden(void) {
    mlp s, g;
    mlp_alloc(&s, H3S_F32, 3, 6, 5, 4);
    mlp_fill(&s, 100);
    mlp_golden_of(&s, &g);
    mlp_run(&g);
    double worst = 0;
    for (int64_t t = 0; t < 3; t++)
        for (int64_t e = 0; e < 4; e++)
            worst = fmax(worst, fabs(((double *)g.temb.data)[t * 4 + e] - mlp_reference(&g, t, e)));
    CHECK(worst <= 1e-13, "golden MLP vs plain loops: %g", worst);
    /* copies of the analytic gradients (the loss evaluations overwrite hidden/temb only) */
    h3s_tensor df = h3t_to_f64(&g.dfeatures), dw1 = h3t_to_f64(&g.dw1), db1 = h3t_to_f64(&g.db1),
               dw2 = h3t_to_f64(&g.dw2), db2 = h3t_to_f64(&g.db2);
    h3t_fd_check(mlp_loss, &g, &g.features, &df, "golden MLP", "dfeatures");
    h3t_fd_check(mlp_loss, &g, &g.w1, &dw1, "golden MLP", "dw1");
    h3t_fd_check(mlp_loss, &g, &g.b1, &db1, "golden MLP", "db1");
    h3t_fd_check(mlp_loss, &g, &g.w2, &dw2, "golden MLP", "dw2");
    h3t_fd_check(mlp_loss, &g, &g.b2, &db2, "golden MLP", "db2");
    h3s_tensor *all[] = {&df, &dw1, &db1, &dw2, &db2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
    mlp_free(&s);
    mlp_free(&g);
}

static void check_mlp_accuracy(int64_t T, int64_t Fd, int64_t Eh, int64_t E, uint64_t seed, int print) {
    mlp s, g;
    mlp_alloc(&s, H3S_F32, T, Fd, Eh, E);
    mlp_fill(&s, seed);
    mlp_golden_of(&s, &g);
    mlp_run(&s);
    mlp_run(&g);
    const char *names[7] = {"hidden", "temb", "dfeatures", "dw1", "db1", "dw2", "db2"};
    const h3s_tensor *st[7] = {&s.hidden, &s.temb, &s.dfeatures, &s.dw1, &s.db1, &s.dw2, &s.db2};
    const h3s_tensor *gt[7] = {&g.hidden, &g.temb, &g.dfeatures, &g.dw1, &g.db1, &g.dw2, &g.db2};
    for (int i = 0; i < 7; i++) {
        double e = h3t_rel_l2(st[i], gt[i]);
        CHECK(e <= MLP_BOUND, "timestep MLP %s rel-L2 %g > %g (T %lld Fd %lld Eh %lld E %lld)", names[i], e, MLP_BOUND,
              (long long)T, (long long)Fd, (long long)Eh, (long long)E);
        if (print) printf("timestep MLP %s rel-L2 %.3g (bound %g)\n", names[i], e, MLP_BOUND);
    }
    mlp_free(&s);
    mlp_free(&g);
}

static void test_mlp_accuracy(void) {
    check_mlp_accuracy(37, 64, 100, 60, 200, 1);
    check_mlp_accuracy(1, 6, 37, 5, 210, 0); /* T = 1, odd widths */
}

static void test_mlp_invariance(void) {
    /* repeat */
    mlp a, b;
    mlp_alloc(&a, H3S_F32, 9, 16, 24, 20);
    mlp_alloc(&b, H3S_F32, 9, 16, 24, 20);
    mlp_fill(&a, 300);
    mlp_fill(&b, 300);
    mlp_run(&a);
    mlp_run(&b);
    CHECK(h3t_bitwise_equal(&a.hidden, &b.hidden) && h3t_bitwise_equal(&a.temb, &b.temb) &&
              h3t_bitwise_equal(&a.dfeatures, &b.dfeatures) && h3t_bitwise_equal(&a.dw1, &b.dw1) &&
              h3t_bitwise_equal(&a.db1, &b.db1) && h3t_bitwise_equal(&a.dw2, &b.dw2) &&
              h3t_bitwise_equal(&a.db2, &b.db2),
          "timestep MLP repeat differs");
    /* row invariance: features row 0 of a at row 0 of T = 1, 3 of T = 7, 211 of T = 300 (same weights) */
    const int64_t Ts[3] = {1, 7, 300}, at[3] = {0, 3, 211};
    mlp r[3];
    for (int k = 0; k < 3; k++) {
        mlp_alloc(&r[k], H3S_F32, Ts[k], 16, 24, 20);
        mlp_fill(&r[k], 310 + (uint64_t)k);
        h3s_tensor *params[4] = {&r[k].w1, &r[k].b1, &r[k].w2, &r[k].b2};
        const h3s_tensor *src[4] = {&a.w1, &a.b1, &a.w2, &a.b2};
        for (int p = 0; p < 4; p++)
            memcpy(params[p]->data, src[p]->data, h3s_tensor_nbytes(src[p]));
        memcpy((float *)r[k].features.data + at[k] * 16, a.features.data, 16 * sizeof(float));
        memcpy((float *)r[k].dtemb.data + at[k] * 20, a.dtemb.data, 20 * sizeof(float));
        mlp_run(&r[k]);
    }
    for (int k = 1; k < 3; k++) {
        CHECK(h3t_rows_equal(&r[k].hidden, at[k], &r[0].hidden, 0, 1) &&
                  h3t_rows_equal(&r[k].temb, at[k], &r[0].temb, 0, 1),
              "timestep MLP forward row differs at T = %lld", (long long)Ts[k]);
        CHECK(h3t_rows_equal(&r[k].dfeatures, at[k], &r[0].dfeatures, 0, 1),
              "timestep MLP dfeatures row differs at T = %lld", (long long)Ts[k]);
    }
    CHECK(h3t_rows_equal(&r[0].temb, 0, &a.temb, 0, 1), "T = 1 row differs from row 0 of T = 9");
    for (int k = 0; k < 3; k++)
        mlp_free(&r[k]);
    /* threads: T = 600 > 2 fold tiles, every output and parameter gradient */
    mlp th[3];
    const int threads[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        h3s_set_num_threads(threads[k]);
        mlp_alloc(&th[k], H3S_F32, 600, 16, 24, 20);
        mlp_fill(&th[k], 320);
        mlp_run(&th[k]);
    }
    h3s_set_num_threads(0);
    for (int k = 1; k < 3; k++)
        CHECK(h3t_bitwise_equal(&th[k].hidden, &th[0].hidden) && h3t_bitwise_equal(&th[k].temb, &th[0].temb) &&
                  h3t_bitwise_equal(&th[k].dfeatures, &th[0].dfeatures) && h3t_bitwise_equal(&th[k].dw1, &th[0].dw1) &&
                  h3t_bitwise_equal(&th[k].db1, &th[0].db1) && h3t_bitwise_equal(&th[k].dw2, &th[0].dw2) &&
                  h3t_bitwise_equal(&th[k].db2, &th[0].db2),
              "timestep MLP differs at %d threads", threads[k]);
    for (int k = 0; k < 3; k++)
        mlp_free(&th[k]);
    mlp_free(&a);
    mlp_free(&b);
}

static void test_mlp_partial_and_empty(void) {
    /* NULL gradient outputs are skipped; the ones computed equal the full call's bits */
    mlp a;
    mlp_alloc(&a, H3S_F32, 5, 8, 12, 6);
    mlp_fill(&a, 400);
    mlp_run(&a);
    h3s_tensor dw2 = h3t_alloc2(H3S_F32, 6, 12), dw1 = h3t_alloc2(H3S_F32, 12, 8);
    CHECK_OK(h3s_timestep_mlp_backward(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, NULL, NULL, NULL, &dw2, NULL));
    CHECK(h3t_bitwise_equal(&dw2, &a.dw2), "dw2 alone differs");
    CHECK_OK(h3s_timestep_mlp_backward(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, NULL, &dw1, NULL, NULL, NULL));
    CHECK(h3t_bitwise_equal(&dw1, &a.dw1), "dw1 alone differs");
    CHECK_OK(h3s_timestep_mlp_backward(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, NULL, NULL, NULL, NULL, NULL));
    /* no bias: the same as a zero bias */
    h3s_tensor h0 = h3t_alloc2(H3S_F32, 5, 12), t0 = h3t_alloc2(H3S_F32, 5, 6);
    memset(a.b1.data, 0, h3s_tensor_nbytes(&a.b1));
    memset(a.b2.data, 0, h3s_tensor_nbytes(&a.b2));
    CHECK_OK(h3s_timestep_mlp_forward(&a.features, &a.w1, NULL, &a.w2, NULL, &h0, &t0));
    CHECK_OK(h3s_timestep_mlp_forward(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK(h3t_bitwise_equal(&t0, &a.temb), "NULL bias differs from a zero bias");
    h3s_tensor_free(&dw2);
    h3s_tensor_free(&dw1);
    h3s_tensor_free(&h0);
    h3s_tensor_free(&t0);
    mlp_free(&a);
    /* T = 0: succeeds, parameter gradients become 0 */
    for (int golden = 0; golden < 2; golden++) {
        mlp z;
        mlp_alloc(&z, golden ? H3S_F64 : H3S_F32, 0, 4, 6, 3);
        mlp_fill(&z, 410);
        h3t_poison(&z.dw1);
        h3t_poison(&z.db1);
        h3t_poison(&z.dw2);
        h3t_poison(&z.db2);
        mlp_run(&z);
        CHECK(h3t_all_zero(&z.dw1) && h3t_all_zero(&z.db1) && h3t_all_zero(&z.dw2) && h3t_all_zero(&z.db2),
              "T = 0 parameter gradients are not 0 (%s)", golden ? "golden" : "strict");
        mlp_free(&z);
    }
}

static void test_mlp_bad_input(void) {
    mlp a, g;
    mlp_alloc(&a, H3S_F32, 4, 8, 10, 6);
    mlp_fill(&a, 500);
    mlp_golden_of(&a, &g);
    h3s_tensor w1_bad = h3t_alloc2(H3S_F32, 10, 9), w2_bad = h3t_alloc2(H3S_F32, 6, 11),
               b1_bad = h3t_alloc1(H3S_F32, 11);
    h3s_tensor hid_bad = h3t_alloc2(H3S_F32, 5, 10), temb_bad = h3t_alloc2(H3S_F32, 4, 7),
               f_bf = h3t_alloc2(H3S_BF16, 4, 8);
    h3s_tensor dtemb_bad = h3t_alloc2(H3S_F32, 3, 6), dw1_bad = h3t_alloc2(H3S_F32, 10, 7);
    h3s_tensor *outs[] = {&a.hidden, &a.temb,   &a.dfeatures, &a.dw1,   &a.db1,    &a.dw2,
                          &a.db2,    &g.hidden, &g.temb,      &hid_bad, &temb_bad, &dw1_bad};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h3t_poison(outs[i]);
#define FWD(f, w1, b1, w2, b2, h, t) h3s_timestep_mlp_forward(f, w1, b1, w2, b2, h, t)
    CHECK_FAILS(H3S_ERR_INVALID, FWD(NULL, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, NULL, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, NULL, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, NULL, &a.temb));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, NULL));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &w1_bad, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &a.w1, &b1_bad, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &a.w1, &a.b1, &w2_bad, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &hid_bad, &a.temb));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &temb_bad));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b1, &a.hidden, &a.temb)); /* b2 length */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&f_bf, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&a.features, &g.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb)); /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.features, &g.w1, &g.b1, &g.w2, &g.b2, &g.hidden, &a.temb)); /* mixed */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.features, &g.w1, &g.b1, &g.w2, &a.b2, &g.hidden, &g.temb)); /* mixed */
    a.temb.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &a.temb));
    a.temb.device = 0;
    /* an output over an operand or the other output, refused naming both before anything is written: temb over w2
     * was refused by linear_2 only after linear_1 had written hidden */
    void *w1_0 = h3t_snapshot(&a.w1), *w2_0 = h3t_snapshot(&a.w2);
    h3s_tensor temb_w2 = h3s_tensor_view(a.w2.data, H3S_F32, 2, a.temb.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &temb_w2));
    CHECK(strstr(h3s_last_error(), "timestep_mlp_forward: temb overlaps w2"), "names both: %s", h3s_last_error());
    CHECK(h3t_all_poison(&a.hidden), "a refused timestep MLP wrote hidden");
    h3s_tensor hid_w1 = h3s_tensor_view(a.w1.data, H3S_F32, 2, a.hidden.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &hid_w1, &a.temb));
    CHECK(strstr(h3s_last_error(), "hidden overlaps w1"), "names both: %s", h3s_last_error());
    h3s_tensor temb_hid = h3s_tensor_view(a.hidden.data, H3S_F32, 2, a.temb.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&a.features, &a.w1, &a.b1, &a.w2, &a.b2, &a.hidden, &temb_hid));
    CHECK(strstr(h3s_last_error(), "temb overlaps hidden"), "names both: %s", h3s_last_error());
    CHECK(!memcmp(a.w1.data, w1_0, h3s_tensor_nbytes(&a.w1)) && !memcmp(a.w2.data, w2_0, h3s_tensor_nbytes(&a.w2)),
          "a refused timestep MLP wrote over a weight");
    free(w1_0);
    free(w2_0);
#undef FWD
#define BWD(f, w1, w2, h, dt, df, dw1, db1, dw2, db2)                                                                  \
    h3s_timestep_mlp_backward(f, w1, w2, h, dt, df, dw1, db1, dw2, db2)
    CHECK_FAILS(H3S_ERR_INVALID,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, NULL, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_INVALID,
                BWD(&a.features, &a.w1, &a.w2, NULL, &a.dtemb, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_SHAPE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &dtemb_bad, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_SHAPE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, &a.dfeatures, &dw1_bad, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_SHAPE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, &a.dfeatures, &a.dw1, &a.db2, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_SHAPE,
                BWD(&a.features, &a.w1, &a.w2, &hid_bad, &a.dtemb, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_DTYPE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &g.dtemb, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_DTYPE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, &a.dfeatures, &a.dw1, &a.db1, &g.dw2, &a.db2));
    CHECK_FAILS(H3S_ERR_DTYPE,
                BWD(&g.features, &g.w1, &g.w2, &g.hidden, &g.dtemb, &a.dfeatures, &g.dw1, &g.db1, &g.dw2, &g.db2));
    a.db2.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE,
                BWD(&a.features, &a.w1, &a.w2, &a.hidden, &a.dtemb, &a.dfeatures, &a.dw1, &a.db1, &a.dw2, &a.db2));
    a.db2.device = 0;
#undef BWD
    int untouched = 1;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        untouched &= h3t_all_poison(outs[i]);
    CHECK(untouched, "a failed timestep MLP call wrote an output");
    h3s_tensor *all[] = {&w1_bad, &w2_bad, &b1_bad, &hid_bad, &temb_bad, &f_bf, &dtemb_bad, &dw1_bad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        h3s_tensor_free(all[i]);
    mlp_free(&a);
    mlp_free(&g);
}

/* Timesteps beyond the deterministic sin/cos range are refused, outputs untouched. */
static void test_sinusoid_range(void) {
    float tv[2] = {0.5f, 1e30f};
    int64_t n = 2;
    h3s_tensor t = h3s_tensor_view(tv, H3S_F32, 1, &n);
    h3s_tensor o = h3t_alloc2(H3S_F32, 2, 8);
    h3t_poison(&o);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&t, 8, &o));
    CHECK(((uint32_t *)o.data)[0] == 0x7f7f7f7fu, "refused sinusoid wrote its output");
    tv[1] = 1.0f;
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, 8, &o));
    h3s_tensor_free(&o);
}

int main(void) {
    test_sinusoid_range();
    test_sinusoid_hand_values();
    test_sinusoid_accuracy();
    test_sinusoid_gradient_fd();
    test_sinusoid_invariance();
    test_sinusoid_bad_input();
    test_sinusoid_zero_rows();
    test_mlp_golden();
    test_mlp_accuracy();
    test_mlp_invariance();
    test_mlp_partial_and_empty();
    test_mlp_bad_input();
    return h3t_finish("test_timestep");
}

/* Every operator of the strict CUDA backend, forward and backward, through the public entry
 * points with device tensors:
 *   - accuracy against the FP64 golden (the CPU golden ops on F64 copies of the same inputs),
 *     with the CPU strict backend's error on the same inputs printed beside it;
 *   - repeatability: a second run gives identical bits;
 *   - row invariance: a sub-range of rows computed alone gives the bits of the full run;
 *   - batch invariance (B in {1, 2, 4}) for attention and the per-row-table ops;
 *   - attention padding invariance (masked keys between live ones change no live bit);
 *   - the vectorised row kernels give the bits of the one-thread-per-element reference kernels.
 * H3S_GPU_TEST_SMALL=1 shrinks every problem (the compute-sanitizer runs). */
#include "cuda/cuda_internal.h"
#include "gpu_util.h"

#define TOL_BF16 4e-3 /* BF16 output: one rounding, about 2^-9 relative at worst */
#define TOL_F32 1e-4  /* F32 output from BF16/F32 inputs with FP32 accumulation */

static int64_t SZ(int64_t big, int64_t small) { return gpu_small() ? small : big; }

static h3s_tensor f64(const h3s_tensor *t) { return h3t_to_f64(t); }
static h3s_tensor like64(const h3s_tensor *t) { return h3t_alloc(H3S_F64, t->ndim, t->shape); }
static h3s_tensor host_like(const h3s_tensor *t, h3s_dtype dt) { return h3t_alloc(dt, t->ndim, t->shape); }

static void free_all(h3s_tensor *ts, int n, int device) {
    for (int i = 0; i < n; i++) {
        if (device)
            gfree(&ts[i]);
        else
            h3s_tensor_free(&ts[i]);
    }
}

/* Row-index tensor [n] with values (seed-mixed) in [0, R). */
static h3s_tensor rand_index(int64_t n, int64_t R, uint64_t seed) {
    h3s_tensor t = h3t_alloc1(H3S_I64, n);
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)t.data)[i] = (int64_t)((i * 2654435761ull + seed * 40503ull) % (uint64_t)R);
    return t;
}

static h3s_tensor hview_rows(const h3s_tensor *t, int64_t r0, int64_t n) {
    if (t->ndim == 1) {
        h3s_tensor v = *t;
        v.shape[0] = n;
        v.data = (char *)t->data + (size_t)r0 * h3s_dtype_size(t->dtype);
        v.owns_data = 0;
        return v;
    }
    return h3t_rows(t, r0, n);
}

/* ================================================================== linear */

/* The provider's precision for a gradient of a BF16 linear: dy rounded to BF16, the product
 * accumulated (here in FP64, which only makes the provider look better), the result rounded to
 * BF16.  A strict BF16-operand gradient must be at least as accurate (docs/strict.md 1.4). */
static h3s_tensor provider_grad(const h3s_tensor *dy, const h3s_tensor *w, const h3s_tensor *x, int want_dw) {
    const int64_t M = dy->shape[0], N = dy->shape[1], K = want_dw ? x->shape[1] : w->shape[1];
    h3s_tensor out = want_dw ? h3t_alloc2(H3S_F64, N, K) : h3t_alloc2(H3S_F64, M, K);
    double *o = (double *)out.data;
    const float *g = (const float *)dy->data;
    for (int64_t i = 0; i < (want_dw ? N : M); i++)
        for (int64_t k = 0; k < K; k++) {
            double acc = 0.0;
            for (int64_t j = 0; j < (want_dw ? M : N); j++) {
                const int64_t m = want_dw ? j : i, n = want_dw ? i : j;
                const double gb = (double)h3s_bf16_to_f32(h3s_bf16_from_f32(g[m * N + n]));
                const uint16_t *src = want_dw ? (const uint16_t *)x->data : (const uint16_t *)w->data;
                const int64_t idx = want_dw ? m * K + k : n * K + k;
                acc += gb * (double)h3s_bf16_to_f32(src[idx]);
            }
            o[i * K + k] = (double)h3s_bf16_to_f32(h3s_bf16_from_f32((float)acc));
        }
    return out;
}

/* BF16 and F32 linears; N = 330 takes the mma.sync kernel (N not a multiple of 8), N = 328 the
 * Hopper kernels; BF16 gradients in both operand modes. */
static void test_linear(h3s_dtype dt, int64_t N_big, h3s_grad_operands mode) {
    const char *name = dt == H3S_BF16 ? "bf16" : "f32";
    const int64_t M = SZ(300, 37), K = SZ(392, 40), N = SZ(N_big, 24);
    const double tol_y = dt == H3S_BF16 ? TOL_BF16 : 1e-5;
    CHECK_OK(h3s_set_grad_operands(mode));
    const int rounded = dt == H3S_BF16 && mode == H3S_GRAD_OPERANDS_BF16 && N % 8 == 0 && K % 8 == 0;
    printf("linear %s M=%lld K=%lld N=%lld, grad operands %s%s\n", name, (long long)M, (long long)K, (long long)N,
           h3s_grad_operands_name(mode), rounded ? " (dy rounded to bf16)" : "");
    h3s_tensor x = hrand(dt, M, K, 11, 1.0f), w = hrand(dt, N, K, 12, 0.05f), b = hrand(dt, N, 0, 13, 0.1f);
    h3s_tensor dy = hrand(H3S_F32, M, N, 14, 1.0f);
    h3s_tensor xd = gup(&x), wd = gup(&w), bd = gup(&b), dyd = gup(&dy);
    h3s_tensor yd = gdev2(dt, M, N), dxd = gdev2(H3S_F32, M, K), dwd = gdev2(H3S_F32, N, K), dbd = gdev1(H3S_F32, N);
    gpoison(&yd), gpoison(&dxd), gpoison(&dwd), gpoison(&dbd);
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, &dwd, &dbd));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd), dw = gdown(&dwd), db = gdown(&dbd);

    h3s_tensor x64 = f64(&x), w64 = f64(&w), b64 = f64(&b), dy64 = f64(&dy);
    h3s_tensor y64 = like64(&y), dx64 = like64(&dx), dw64 = like64(&dw), db64 = like64(&db);
    CHECK_OK(h3s_linear_forward(&x64, &w64, &b64, &y64));
    CHECK_OK(h3s_linear_backward(&x64, &w64, &dy64, &dx64, &dw64, &db64));
    h3s_tensor yc = host_like(&y, dt), dxc = host_like(&dx, H3S_F32), dwc = host_like(&dw, H3S_F32),
               dbc = host_like(&db, H3S_F32);
    CHECK_OK(h3s_linear_forward(&x, &w, &b, &yc));
    CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dxc, &dwc, &dbc));
    char what[96];
    snprintf(what, sizeof what, "linear %s N=%lld y", name, (long long)N);
    report_err(what, h3t_rel_l2(&y, &y64), h3t_rel_l2(&yc, &y64), tol_y);
    if (rounded) {
        /* dy rounded once to BF16: bounded by the provider's error on the same inputs */
        h3s_tensor pdx = provider_grad(&dy, &w, &x, 0), pdw = provider_grad(&dy, &w, &x, 1);
        const double edx = h3t_rel_l2(&dx, &dx64), edw = h3t_rel_l2(&dw, &dw64);
        const double pex = h3t_rel_l2(&pdx, &dx64), pew = h3t_rel_l2(&pdw, &dw64);
        printf("  linear bf16 N=%lld dx (bf16 operands)     gpu rel_l2 %.3e   provider precision %.3e\n", (long long)N,
               edx, pex);
        printf("  linear bf16 N=%lld dw (bf16 operands)     gpu rel_l2 %.3e   provider precision %.3e\n", (long long)N,
               edw, pew);
        CHECK(edx <= pex && edx <= TOL_BF16, "dx with BF16 operands: %.3e exceeds the provider's %.3e", edx, pex);
        CHECK(edw <= pew && edw <= TOL_BF16, "dw with BF16 operands: %.3e exceeds the provider's %.3e", edw, pew);
        h3s_tensor_free(&pdx), h3s_tensor_free(&pdw);
    } else {
        snprintf(what, sizeof what, "linear %s N=%lld dx", name, (long long)N);
        report_err(what, h3t_rel_l2(&dx, &dx64), h3t_rel_l2(&dxc, &dx64), TOL_F32);
        snprintf(what, sizeof what, "linear %s N=%lld dw", name, (long long)N);
        report_err(what, h3t_rel_l2(&dw, &dw64), h3t_rel_l2(&dwc, &dw64), TOL_F32);
    }
    snprintf(what, sizeof what, "linear %s N=%lld db", name, (long long)N);
    report_err(what, h3t_rel_l2(&db, &db64), h3t_rel_l2(&dbc, &db64), 1e-5);
    if (dt == H3S_F32) {
        /* the FFMA kernel runs the CPU's chain: the same bits */
        CHECK(h3t_bitwise_equal(&y, &yc), "F32 linear y equals the CPU strict bits");
        CHECK(h3t_bitwise_equal(&dx, &dxc), "F32 linear dx equals the CPU strict bits");
        CHECK(h3t_bitwise_equal(&dw, &dwc), "F32 linear dw equals the CPU strict bits");
    }
    CHECK(h3t_bitwise_equal(&db, &dbc), "db (tile fold of dy) equals the CPU strict bits");

    /* repeat */
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, &dwd, &dbd));
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx) && gequal(&dwd, &dw) && gequal(&dbd, &db), "linear %s repeat", name);

    /* rows alone give the bits they had in the full run */
    const int64_t subs[][2] = {{0, 1}, {5, 7}, {M / 2, M / 3}, {M - 1, 1}, {1, M - 1}};
    for (int s = 0; s < 5; s++) {
        int64_t r0 = subs[s][0], n = subs[s][1];
        h3s_tensor xv = grows(&xd, r0, n), dyv = grows(&dyd, r0, n);
        h3s_tensor ys = gdev2(dt, n, N), dxs = gdev2(H3S_F32, n, K);
        CHECK_OK(h3s_linear_forward(&xv, &wd, &bd, &ys));
        CHECK_OK(h3s_linear_backward(&xv, &wd, &dyv, &dxs, NULL, NULL));
        h3s_tensor yh = gdown(&ys), dxh = gdown(&dxs);
        CHECK(h3t_rows_equal(&yh, 0, &y, r0, n), "linear %s y rows [%lld, +%lld) alone", name, (long long)r0,
              (long long)n);
        CHECK(h3t_rows_equal(&dxh, 0, &dx, r0, n), "linear %s dx rows [%lld, +%lld) alone", name, (long long)r0,
              (long long)n);
        gfree(&ys), gfree(&dxs), h3s_tensor_free(&yh), h3s_tensor_free(&dxh);
    }
    h3s_tensor all[] = {x, w, b, dy, y, dx, dw, db, x64, w64, b64, dy64, y64, dx64, dw64, db64, yc, dxc, dwc, dbc};
    free_all(all, 20, 0);
    h3s_tensor alld[] = {xd, wd, bd, dyd, yd, dxd, dwd, dbd};
    free_all(alld, 8, 1);
}

/* The F32 FFMA GEMM's tile configurations (64, 32, 16 outputs square per CTA) and the dispatcher, each forced in
 * turn on the same operands: y, dx and dw bit-identical to the CPU's strict chain, and so to each other.  The shapes
 * are the model's F32 modules' at release width (proj_in / proj_out over 5376 features, the audio projections,
 * the timestep MLP) plus odd sizes whose tiles are partial on every side. */
static void test_sgemm_configs(void) {
    const int64_t shapes[][3] = {
        {SZ(1008, 37), SZ(96, 24), SZ(5376, 300)}, /* M, K, N: proj_in; its transpose is proj_out */
        {SZ(1008, 37), SZ(5376, 300), SZ(96, 24)}, {SZ(48, 5), SZ(5376, 300), SZ(32, 7)},
        {1, SZ(5376, 300), SZ(2688, 130)},         {SZ(77, 9), SZ(259, 33), SZ(131, 17)},
    };
    for (int s = 0; s < 5; s++) {
        const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        h3s_tensor x = hrand(H3S_F32, M, K, 41, 1.0f), w = hrand(H3S_F32, N, K, 42, 0.05f);
        h3s_tensor b = hrand(H3S_F32, N, 0, 43, 0.1f), dy = hrand(H3S_F32, M, N, 44, 1.0f);
        h3s_tensor yc = h3t_alloc2(H3S_F32, M, N), dxc = h3t_alloc2(H3S_F32, M, K), dwc = h3t_alloc2(H3S_F32, N, K);
        CHECK_OK(h3s_linear_forward(&x, &w, &b, &yc));
        CHECK_OK(h3s_linear_backward(&x, &w, &dy, &dxc, &dwc, NULL));
        h3s_tensor xd = gup(&x), wd = gup(&w), bd = gup(&b), dyd = gup(&dy);
        h3s_tensor yd = gdev2(H3S_F32, M, N), dxd = gdev2(H3S_F32, M, K), dwd = gdev2(H3S_F32, N, K);
        int64_t bad = 0;
        for (int c = -1; c < h3c_sgemm_config_count(); c++) {
            CHECK_OK(h3c_sgemm_force_config(c));
            gpoison(&yd), gpoison(&dxd), gpoison(&dwd);
            CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
            CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, &dwd, NULL));
            h3s_tensor y = gdown(&yd), dx = gdown(&dxd), dw = gdown(&dwd);
            const int ok = h3t_bitwise_equal(&y, &yc) && h3t_bitwise_equal(&dx, &dxc) && h3t_bitwise_equal(&dw, &dwc);
            bad += !ok;
            CHECK(ok, "F32 GEMM M=%lld K=%lld N=%lld configuration %d: y, dx, dw equal the CPU strict bits",
                  (long long)M, (long long)K, (long long)N, c);
            h3s_tensor_free(&y), h3s_tensor_free(&dx), h3s_tensor_free(&dw);
        }
        CHECK_OK(h3c_sgemm_force_config(-1));
        printf("sgemm configurations M=%lld K=%lld N=%lld: the dispatcher and configurations 0..%d, %lld differ from "
               "the CPU\n",
               (long long)M, (long long)K, (long long)N, h3c_sgemm_config_count() - 1, (long long)bad);
        h3s_tensor all[] = {x, w, b, dy, yc, dxc, dwc};
        free_all(all, 7, 0);
        h3s_tensor alld[] = {xd, wd, bd, dyd, yd, dxd, dwd};
        free_all(alld, 7, 1);
    }
    CHECK(h3c_sgemm_force_config(h3c_sgemm_config_count()) != H3S_OK, "sgemm: a configuration out of range is refused");
}

/* ================================================================== rmsnorm */

/* A modulated norm's weight, shift and scale gradients in one pass (H3C_FOLD_NORM_ALL, when dw and dtable are both
 * asked for) against the three folds apart (the fold hook), for R table rows: 1 and 3 (the kernel for 3), 5 and 12
 * (the kernel for 12), 13 (the folds apart either way).  Rows over 256-row tiles with a partial last tile; some table
 * rows take no row of a tile (every third row index of a tile repeats). */
static void test_norm_all(int64_t R) {
    const int64_t M = SZ(700, 300), H = SZ(600, 136), C = 6;
    const int shift = 3, scale = 4;
    h3s_tensor x = hrand(H3S_BF16, M, H, 31, 1.5f), w = hrand(H3S_BF16, H, 0, 32, 1.0f);
    h3s_tensor table = hrand(H3S_BF16, R, C * H, 33, 0.3f), idx = rand_index(M, R, 34);
    h3s_tensor dy = hrand(H3S_F32, M, H, 35, 1.0f), pattern = hrand(H3S_F32, R, C * H, 36, 1.0f);
    h3s_tensor xd = gup(&x), wd = gup(&w), td = gup(&table), dyd = gup(&dy);
    h3s_modulation mod = {&td, &idx, shift, scale};
    h3s_tensor dw1 = gdev1(H3S_F32, H), dw2 = gdev1(H3S_F32, H), dt1 = gup(&pattern), dt2 = gup(&pattern);
    gpoison(&dw1), gpoison(&dw2);
    CHECK_OK(h3s_rmsnorm_backward(&xd, &wd, &mod, 1e-5, &dyd, NULL, &dw1, &dt1));
    h3c_fold_force_generic(1);
    CHECK_OK(h3s_rmsnorm_backward(&xd, &wd, &mod, 1e-5, &dyd, NULL, &dw2, &dt2));
    h3c_fold_force_generic(0);
    h3s_tensor dw2h = gdown(&dw2), dt2h = gdown(&dt2);
    CHECK(gequal(&dw1, &dw2h) && gequal(&dt1, &dt2h),
          "rmsnorm R=%lld: the one-pass weight, shift and scale fold differs from the three folds apart", (long long)R);
    printf("rmsnorm one-pass folds R=%lld M=%lld H=%lld: dw and dtable equal to the folds apart\n", (long long)R,
           (long long)M, (long long)H);
    h3s_tensor all[] = {x, w, table, idx, dy, pattern, dw2h, dt2h};
    free_all(all, 8, 0);
    h3s_tensor alld[] = {xd, wd, td, dyd, dw1, dw2, dt1, dt2};
    free_all(alld, 8, 1);
}

static void test_rmsnorm(int with_w, int with_mod, h3s_dtype ydt) {
    const int64_t M = SZ(300, 20), H = SZ(1000, 72), R = 5, C = 6;
    const int shift = 3, scale = 4;
    printf("rmsnorm w=%d mod=%d y=%s M=%lld H=%lld\n", with_w, with_mod, h3s_dtype_name(ydt), (long long)M,
           (long long)H);
    h3s_tensor x = hrand(H3S_BF16, M, H, 21, 1.5f), w = hrand(H3S_BF16, H, 0, 22, 1.0f);
    h3s_tensor table = hrand(H3S_BF16, R, C * H, 23, 0.3f), idx = rand_index(M, R, 24);
    h3s_tensor dy = hrand(H3S_F32, M, H, 25, 1.0f), pattern = hrand(H3S_F32, R, C * H, 26, 1.0f);
    h3s_tensor xd = gup(&x), wd = gup(&w), td = gup(&table), dyd = gup(&dy);
    h3s_tensor yd = gdev2(ydt, M, H), dxd = gdev2(H3S_F32, M, H), dwd = gdev1(H3S_F32, H), dtd = gup(&pattern);
    h3s_modulation mod = {&td, &idx, shift, scale};
    const h3s_tensor *W = with_w ? &wd : NULL;
    const h3s_modulation *MOD = with_mod ? &mod : NULL;
    gpoison(&yd), gpoison(&dxd), gpoison(&dwd);
    CHECK_OK(h3s_rmsnorm_forward(&xd, W, MOD, 1e-5, &yd));
    CHECK_OK(h3s_rmsnorm_backward(&xd, W, MOD, 1e-5, &dyd, &dxd, with_w ? &dwd : NULL, with_mod ? &dtd : NULL));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd), dw = gdown(&dwd), dt = gdown(&dtd);

    h3s_tensor x64 = f64(&x), w64 = f64(&w), t64 = f64(&table), dy64 = f64(&dy);
    h3s_tensor y64 = h3t_alloc2(H3S_F64, M, H), dx64 = like64(&dx), dw64 = like64(&dw), dt64 = f64(&pattern);
    h3s_modulation mod64 = {&t64, &idx, shift, scale};
    CHECK_OK(h3s_rmsnorm_forward(&x64, with_w ? &w64 : NULL, with_mod ? &mod64 : NULL, 1e-5, &y64));
    CHECK_OK(h3s_rmsnorm_backward(&x64, with_w ? &w64 : NULL, with_mod ? &mod64 : NULL, 1e-5, &dy64, &dx64,
                                  with_w ? &dw64 : NULL, with_mod ? &dt64 : NULL));
    h3s_tensor yc = host_like(&y, ydt), dxc = host_like(&dx, H3S_F32), dwc = host_like(&dw, H3S_F32);
    h3s_tensor dtc = h3t_alloc2(H3S_F32, R, C * H);
    memcpy(dtc.data, pattern.data, h3s_tensor_nbytes(&pattern));
    h3s_modulation modc = {&table, &idx, shift, scale};
    CHECK_OK(h3s_rmsnorm_forward(&x, with_w ? &w : NULL, with_mod ? &modc : NULL, 1e-5, &yc));
    CHECK_OK(h3s_rmsnorm_backward(&x, with_w ? &w : NULL, with_mod ? &modc : NULL, 1e-5, &dy, &dxc,
                                  with_w ? &dwc : NULL, with_mod ? &dtc : NULL));
    report_err("rmsnorm y", h3t_rel_l2(&y, &y64), h3t_rel_l2(&yc, &y64), ydt == H3S_BF16 ? TOL_BF16 : 1e-5);
    report_err("rmsnorm dx", h3t_rel_l2(&dx, &dx64), h3t_rel_l2(&dxc, &dx64), TOL_F32);
    if (with_w) report_err("rmsnorm dw", h3t_rel_l2(&dw, &dw64), h3t_rel_l2(&dwc, &dw64), TOL_F32);
    if (with_mod) {
        report_err("rmsnorm dtable", h3t_rel_l2(&dt, &dt64), h3t_rel_l2(&dtc, &dt64), TOL_F32);
        /* only the shift and scale chunks are written */
        int untouched = 1;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                if (c == shift || c == scale) continue;
                size_t off = (size_t)((r * C + c) * H) * sizeof(float);
                if (memcmp((char *)dt.data + off, (char *)pattern.data + off, (size_t)H * sizeof(float))) untouched = 0;
            }
        CHECK(untouched, "rmsnorm dtable: other chunks untouched");
    }
    /* repeat */
    CHECK_OK(h3s_rmsnorm_forward(&xd, W, MOD, 1e-5, &yd));
    CHECK_OK(h3s_rmsnorm_backward(&xd, W, MOD, 1e-5, &dyd, &dxd, with_w ? &dwd : NULL, NULL));
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx) && (!with_w || gequal(&dwd, &dw)), "rmsnorm repeat");
    /* the generic kernels (one column at a time in every pass) give the bits of the forward that writes 8 columns
     * at a time and of the backward that holds the row in registers (H = 1000: the last of a thread's columns past
     * the row's end for some threads; the table's chunks at multiples of 8) */
    gpoison(&yd), gpoison(&dxd);
    h3c_norm_force_generic(1);
    CHECK_OK(h3s_rmsnorm_forward(&xd, W, MOD, 1e-5, &yd));
    CHECK_OK(h3s_rmsnorm_backward(&xd, W, MOD, 1e-5, &dyd, &dxd, with_w ? &dwd : NULL, NULL));
    h3c_norm_force_generic(0);
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx) && (!with_w || gequal(&dwd, &dw)),
          "rmsnorm: the generic kernels differ from the vector and register-resident ones");
    if (with_mod) { /* the shift and scale folds in one pass: the bits of the two folds apart (the fold hook) */
        h3s_tensor dt2 = gup(&pattern);
        h3c_fold_force_generic(1);
        CHECK_OK(h3s_rmsnorm_backward(&xd, W, MOD, 1e-5, &dyd, NULL, NULL, &dt2));
        h3c_fold_force_generic(0);
        CHECK(gequal(&dt2, &dt), "rmsnorm dtable: the one-pass shift and scale fold differs from the two folds");
        gfree(&dt2);
    }
    /* dx = dx_add + the norm's dx (h3s_rmsnorm_backward_add: the block's residual sums), register-resident and
     * generic kernels: the bits of the plain backward followed by grad_add(dx_add, dx) */
    {
        h3s_tensor addh = hrand(H3S_F32, M, H, 27, 1.0f), addd = gup(&addh), dxs = gdev2(H3S_F32, M, H);
        h3s_tensor sumd = gdev2(H3S_F32, M, H);
        CHECK_OK(h3s_grad_add(&addd, &dxd, &sumd));
        h3s_tensor want = gdown(&sumd);
        for (int generic = 0; generic < 2; generic++) {
            gpoison(&dxs);
            h3c_norm_force_generic(generic);
            CHECK_OK(h3s_rmsnorm_backward_add(&xd, W, MOD, 1e-5, &dyd, &addd, &dxs, with_w ? &dwd : NULL, NULL));
            h3c_norm_force_generic(0);
            CHECK(gequal(&dxs, &want) && (!with_w || gequal(&dwd, &dw)),
                  "rmsnorm_backward_add (%s kernels) gives the backward's dx plus dx_add, bit for bit",
                  generic ? "generic" : "register-resident");
        }
        CHECK(h3s_rmsnorm_backward_add(&xd, W, MOD, 1e-5, &dyd, &dxs, &dxs, NULL, NULL) != H3S_OK,
              "rmsnorm_backward_add: dx_add overlapping dx is refused");
        CHECK(h3s_rmsnorm_backward_add(&xd, W, MOD, 1e-5, &dyd, &addd, NULL, NULL, NULL) != H3S_OK,
              "rmsnorm_backward_add: dx_add without dx is refused");
        h3s_tensor_free(&addh), h3s_tensor_free(&want);
        gfree(&addd), gfree(&dxs), gfree(&sumd);
    }
    /* rows alone (with their own index rows) */
    const int64_t r0 = M / 3, n = M / 2;
    h3s_tensor xv = grows(&xd, r0, n), dyv = grows(&dyd, r0, n), iv = hview_rows(&idx, r0, n);
    h3s_modulation modv = {&td, &iv, shift, scale};
    h3s_tensor ys = gdev2(ydt, n, H), dxs = gdev2(H3S_F32, n, H);
    CHECK_OK(h3s_rmsnorm_forward(&xv, W, with_mod ? &modv : NULL, 1e-5, &ys));
    CHECK_OK(h3s_rmsnorm_backward(&xv, W, with_mod ? &modv : NULL, 1e-5, &dyv, &dxs, NULL, NULL));
    h3s_tensor yh = gdown(&ys), dxh = gdown(&dxs);
    CHECK(h3t_rows_equal(&yh, 0, &y, r0, n) && h3t_rows_equal(&dxh, 0, &dx, r0, n), "rmsnorm rows alone");
    gfree(&ys), gfree(&dxs), h3s_tensor_free(&yh), h3s_tensor_free(&dxh);

    h3s_tensor all[] = {x,   w,   table, idx, dy,   pattern, y,    dx, dw,  dt,  x64,
                        w64, t64, dy64,  y64, dx64, dw64,    dt64, yc, dxc, dwc, dtc};
    free_all(all, 22, 0);
    h3s_tensor alld[] = {xd, wd, td, dyd, yd, dxd, dwd, dtd};
    free_all(alld, 8, 1);
}

/* Item 0 of a batch of B items, each S rows with a per-row AdaLN index: its rows of y and dx
 * are the bits it gets alone (B = 1).  Also the final norm (F32 y, table [T, 2H]). */
static void test_norm_batch(void) {
    const int64_t S = SZ(120, 9), H = SZ(640, 40), R = 3;
    h3s_tensor ref_y = {0}, ref_dx = {0}, ref_fy = {0}, ref_fdx = {0};
    h3s_tensor w = hrand(H3S_BF16, H, 0, 31, 1.0f), table = hrand(H3S_BF16, R, 6 * H, 32, 0.3f);
    h3s_tensor ftable = hrand(H3S_BF16, 2, 2 * H, 33, 0.3f);
    h3s_tensor wd = gup(&w), td = gup(&table), ftd = gup(&ftable);
    for (int64_t B = 1; B <= 4; B *= 2) {
        const int64_t M = B * S;
        h3s_tensor xd = gdev2(H3S_BF16, M, H), dyd = gdev2(H3S_F32, M, H);
        for (int64_t b = 0; b < B; b++) {
            h3s_tensor xv = grows(&xd, b * S, S), dv = grows(&dyd, b * S, S);
            gfill(&xv, 100 + (uint64_t)b, 1.0f); /* item 0 gets seed 100 for every B */
            gfill(&dv, 200 + (uint64_t)b, 1.0f);
        }
        h3s_tensor idx = h3t_alloc1(H3S_I64, M), fidx = h3t_alloc1(H3S_I64, M);
        for (int64_t m = 0; m < M; m++) {
            ((int64_t *)idx.data)[m] = (m % S) % R; /* the layout repeats per item */
            ((int64_t *)fidx.data)[m] = (m % S) % 2;
        }
        h3s_modulation mod = {&td, &idx, 0, 1};
        h3s_tensor yd = gdev2(H3S_BF16, M, H), dxd = gdev2(H3S_F32, M, H), dwd = gdev1(H3S_F32, H);
        h3s_tensor dtd = gdev2(H3S_F32, R, 6 * H), fyd = gdev2(H3S_F32, M, H), fdxd = gdev2(H3S_F32, M, H);
        h3s_tensor fdtd = gdev2(H3S_F32, 2, 2 * H);
        CHECK_OK(h3s_rmsnorm_forward(&xd, &wd, &mod, 1e-5, &yd));
        CHECK_OK(h3s_rmsnorm_backward(&xd, &wd, &mod, 1e-5, &dyd, &dxd, &dwd, &dtd));
        CHECK_OK(h3s_final_norm_forward(&xd, &wd, &ftd, &fidx, 1e-5, &fyd));
        CHECK_OK(h3s_final_norm_backward(&xd, &wd, &ftd, &fidx, 1e-5, &dyd, &fdxd, &dwd, &fdtd));
        h3s_tensor y0 = grows(&yd, 0, S), dx0 = grows(&dxd, 0, S), fy0 = grows(&fyd, 0, S), fdx0 = grows(&fdxd, 0, S);
        if (B == 1) {
            ref_y = gdown(&y0), ref_dx = gdown(&dx0), ref_fy = gdown(&fy0), ref_fdx = gdown(&fdx0);
        } else {
            CHECK(gequal(&y0, &ref_y) && gequal(&dx0, &ref_dx), "rmsnorm item 0 at B=%lld equals B=1", (long long)B);
            CHECK(gequal(&fy0, &ref_fy) && gequal(&fdx0, &ref_fdx), "final norm item 0 at B=%lld equals B=1",
                  (long long)B);
        }
        h3s_tensor alld[] = {xd, dyd, yd, dxd, dwd, dtd, fyd, fdxd, fdtd};
        free_all(alld, 9, 1);
        h3s_tensor_free(&idx), h3s_tensor_free(&fidx);
    }
    /* final norm accuracy (B = 1 inputs rebuilt on the host) */
    {
        const int64_t M = S;
        h3s_tensor x = hrand(H3S_BF16, M, H, 34, 1.0f), dy = hrand(H3S_F32, M, H, 35, 1.0f);
        h3s_tensor fidx = rand_index(M, 2, 36);
        h3s_tensor xd = gup(&x), dyd = gup(&dy), yd = gdev2(H3S_F32, M, H), dxd = gdev2(H3S_F32, M, H);
        h3s_tensor dwd = gdev1(H3S_F32, H), dtd = gdev2(H3S_F32, 2, 2 * H);
        CHECK_OK(h3s_final_norm_forward(&xd, &wd, &ftd, &fidx, 1e-5, &yd));
        CHECK_OK(h3s_final_norm_backward(&xd, &wd, &ftd, &fidx, 1e-5, &dyd, &dxd, &dwd, &dtd));
        h3s_tensor y = gdown(&yd), dx = gdown(&dxd), dw = gdown(&dwd), dt = gdown(&dtd);
        h3s_tensor x64 = f64(&x), w64 = f64(&w), t64 = f64(&ftable), dy64 = f64(&dy);
        h3s_tensor y64 = like64(&y), dx64 = like64(&dx), dw64 = like64(&dw), dt64 = like64(&dt);
        CHECK_OK(h3s_final_norm_forward(&x64, &w64, &t64, &fidx, 1e-5, &y64));
        CHECK_OK(h3s_final_norm_backward(&x64, &w64, &t64, &fidx, 1e-5, &dy64, &dx64, &dw64, &dt64));
        h3s_tensor yc = host_like(&y, H3S_F32), dxc = host_like(&dx, H3S_F32), dwc = host_like(&dw, H3S_F32),
                   dtc = host_like(&dt, H3S_F32);
        CHECK_OK(h3s_final_norm_forward(&x, &w, &ftable, &fidx, 1e-5, &yc));
        CHECK_OK(h3s_final_norm_backward(&x, &w, &ftable, &fidx, 1e-5, &dy, &dxc, &dwc, &dtc));
        report_err("final_norm y", h3t_rel_l2(&y, &y64), h3t_rel_l2(&yc, &y64), 1e-5);
        report_err("final_norm dx", h3t_rel_l2(&dx, &dx64), h3t_rel_l2(&dxc, &dx64), TOL_F32);
        report_err("final_norm dw", h3t_rel_l2(&dw, &dw64), h3t_rel_l2(&dwc, &dw64), TOL_F32);
        report_err("final_norm dtable", h3t_rel_l2(&dt, &dt64), h3t_rel_l2(&dtc, &dt64), TOL_F32);
        h3s_tensor all[] = {x, dy, fidx, y, dx, dw, dt, x64, w64, t64, dy64, y64, dx64, dw64, dt64, yc, dxc, dwc, dtc};
        free_all(all, 19, 0);
        h3s_tensor alld[] = {xd, dyd, yd, dxd, dwd, dtd};
        free_all(alld, 6, 1);
    }
    h3s_tensor all[] = {ref_y, ref_dx, ref_fy, ref_fdx, w, table, ftable};
    free_all(all, 7, 0);
    gfree(&wd), gfree(&td), gfree(&ftd);
}

/* ================================================================== head rmsnorm */

static void test_head_rmsnorm(void) {
    const int64_t M = SZ(200, 10), heads = SZ(6, 2), D = SZ(128, 16), W = heads * D;
    printf("head_rmsnorm M=%lld heads=%lld D=%lld\n", (long long)M, (long long)heads, (long long)D);
    h3s_tensor x = hrand(H3S_BF16, M, W, 41, 2.0f), w = hrand(H3S_BF16, D, 0, 42, 1.0f);
    h3s_tensor dy = hrand(H3S_F32, M, W, 43, 1.0f);
    h3s_tensor xd = gup(&x), wd = gup(&w), dyd = gup(&dy);
    h3s_tensor yd = gdev2(H3S_BF16, M, W), dxd = gdev2(H3S_F32, M, W), dwd = gdev1(H3S_F32, D);
    CHECK_OK(h3s_head_rmsnorm_forward(&xd, heads, &wd, 1e-5, &yd));
    CHECK_OK(h3s_head_rmsnorm_backward(&xd, heads, &wd, 1e-5, &dyd, &dxd, &dwd));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd), dw = gdown(&dwd);
    h3s_tensor x64 = f64(&x), w64 = f64(&w), dy64 = f64(&dy), y64 = like64(&y), dx64 = like64(&dx), dw64 = like64(&dw);
    CHECK_OK(h3s_head_rmsnorm_forward(&x64, heads, &w64, 1e-5, &y64));
    CHECK_OK(h3s_head_rmsnorm_backward(&x64, heads, &w64, 1e-5, &dy64, &dx64, &dw64));
    h3s_tensor yc = host_like(&y, H3S_BF16), dxc = host_like(&dx, H3S_F32), dwc = host_like(&dw, H3S_F32);
    CHECK_OK(h3s_head_rmsnorm_forward(&x, heads, &w, 1e-5, &yc));
    CHECK_OK(h3s_head_rmsnorm_backward(&x, heads, &w, 1e-5, &dy, &dxc, &dwc));
    report_err("head_rmsnorm y", h3t_rel_l2(&y, &y64), h3t_rel_l2(&yc, &y64), TOL_BF16);
    report_err("head_rmsnorm dx", h3t_rel_l2(&dx, &dx64), h3t_rel_l2(&dxc, &dx64), TOL_F32);
    report_err("head_rmsnorm dw", h3t_rel_l2(&dw, &dw64), h3t_rel_l2(&dwc, &dw64), TOL_F32);
    CHECK_OK(h3s_head_rmsnorm_forward(&xd, heads, &wd, 1e-5, &yd));
    CHECK_OK(h3s_head_rmsnorm_backward(&xd, heads, &wd, 1e-5, &dyd, &dxd, &dwd));
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx) && gequal(&dwd, &dw), "head_rmsnorm repeat");
    /* the generic kernels give the bits of the ones that hold a head in registers (D = 128) */
    gpoison(&yd), gpoison(&dxd);
    h3c_norm_force_generic(1);
    CHECK_OK(h3s_head_rmsnorm_forward(&xd, heads, &wd, 1e-5, &yd));
    CHECK_OK(h3s_head_rmsnorm_backward(&xd, heads, &wd, 1e-5, &dyd, &dxd, &dwd));
    h3c_norm_force_generic(0);
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx) && gequal(&dwd, &dw),
          "head_rmsnorm: the generic kernels differ from the register-resident ones");
    /* dx rounded to BF16 in the same pass (register-resident and generic kernels): dx unchanged, and the copy is
     * round_bf16(dx) */
    {
        h3s_tensor dxb = gdev2(H3S_BF16, M, W), want = gdev2(H3S_BF16, M, W);
        CHECK_OK(h3s_cuda_round_bf16(&dxd, &want));
        h3s_tensor wanth = gdown(&want);
        for (int generic = 0; generic < 2; generic++) {
            gpoison(&dxd), gpoison(&dxb);
            h3c_norm_force_generic(generic);
            CHECK_OK(h3s_head_rmsnorm_backward_rounded(&xd, heads, &wd, 1e-5, &dyd, &dxd, &dxb, &dwd));
            h3c_norm_force_generic(0);
            CHECK(gequal(&dxd, &dx) && gequal(&dxb, &wanth) && gequal(&dwd, &dw),
                  "head_rmsnorm_backward_rounded (%s kernels): dx, dw unchanged and dx_bf16 = round_bf16(dx)",
                  generic ? "generic" : "register-resident");
        }
        /* the copy alone (dx NULL, as the block writes it when q_proj reads only the copy): the same bits */
        for (int generic = 0; generic < 2; generic++) {
            gpoison(&dxb);
            h3c_norm_force_generic(generic);
            CHECK_OK(h3s_head_rmsnorm_backward_rounded(&xd, heads, &wd, 1e-5, &dyd, NULL, &dxb, &dwd));
            h3c_norm_force_generic(0);
            CHECK(gequal(&dxb, &wanth) && gequal(&dwd, &dw),
                  "head_rmsnorm_backward_rounded without dx (%s kernels): dx_bf16 = round_bf16(dx), dw unchanged",
                  generic ? "generic" : "register-resident");
        }
        h3s_tensor_free(&wanth);
        gfree(&dxb), gfree(&want);
    }
    /* in place: dx over dy gives the same bits */
    CHECK_OK(h3s_head_rmsnorm_backward(&xd, heads, &wd, 1e-5, &dyd, &dyd, &dwd));
    CHECK(gequal(&dyd, &dx) && gequal(&dwd, &dw), "head_rmsnorm backward in place");
    h3s_tensor all[] = {x, w, dy, y, dx, dw, x64, w64, dy64, y64, dx64, dw64, yc, dxc, dwc};
    free_all(all, 15, 0);
    h3s_tensor alld[] = {xd, wd, dyd, yd, dxd, dwd};
    free_all(alld, 6, 1);

    /* The streamed HEAD_DW fold kernel equals the generic one bit for bit: release geometry (56
     * heads x 128, three 256-row tiles, the last one partial) and an odd one (6 heads x 48: inverse
     * norms copied one by one, two tiles); its ring and chain edges: one head (8 values a phase,
     * a last tile of one row: the chain starts in the tail), 5 heads x 32 (phases of 40 values, a
     * last tile of one partial phase), 199 heads (a ring of two slots).  201 heads (more shared
     * memory than the kernel takes) and head dim 24 go to the generic kernel both times.  (Not the
     * CPU's bits: the GPU's per-head inverse norm is a warp-order sum, docs/numerics/cuda.md.) */
    const int64_t geo[][3] = {{SZ(600, 300), SZ(56, 3), SZ(128, 32)},
                              {SZ(300, 270), 6, 48},
                              {257, 1, 16},
                              {262, 5, 32},
                              {300, 199, 16},
                              {40, 201, 16},
                              {100, 3, 24}};
    for (int gi = 0; gi < (int)(sizeof geo / sizeof geo[0]); gi++) {
        const int64_t M2 = geo[gi][0], H2 = geo[gi][1], D2 = geo[gi][2];
        h3s_tensor x2 = gdev2(H3S_BF16, M2, H2 * D2), w2 = gdev1(H3S_BF16, D2), dy2 = gdev2(H3S_F32, M2, H2 * D2);
        gfill(&x2, 44 + gi, 2.0f), gfill(&w2, 45 + gi, 1.0f), gfill(&dy2, 46 + gi, 1.0f);
        h3s_tensor dwa = gdev1(H3S_F32, D2), dwb = gdev1(H3S_F32, D2);
        h3c_fold_force_generic(1);
        CHECK_OK(h3s_head_rmsnorm_backward(&x2, H2, &w2, 1e-5, &dy2, NULL, &dwa));
        h3c_fold_force_generic(0);
        CHECK_OK(h3s_head_rmsnorm_backward(&x2, H2, &w2, 1e-5, &dy2, NULL, &dwb));
        h3s_tensor ha = gdown(&dwa);
        const int same = gequal(&dwb, &ha);
        CHECK(same, "head_rmsnorm dw: the streamed fold kernel differs from the generic one");
        printf("  head_rmsnorm dw M=%lld heads=%lld D=%lld: streamed fold kernel %s the generic one\n", (long long)M2,
               (long long)H2, (long long)D2, same ? "bit-identical to" : "DIFFERS from");
        h3s_tensor_free(&ha);
        h3s_tensor alld2[] = {x2, w2, dy2, dwa, dwb};
        free_all(alld2, 5, 1);
    }
}

/* ================================================================== rope */

static void test_rope(void) {
    const int64_t S = SZ(150, 12), B = 2, M = B * S, heads = SZ(4, 2), D = SZ(128, 16), F = SZ(16, 2), W = heads * D;
    printf("rope S=%lld heads=%lld D=%lld F=%lld\n", (long long)S, (long long)heads, (long long)D, (long long)F);
    h3s_tensor pos = h3t_alloc2(H3S_F64, S, 3);
    for (int64_t s = 0; s < S; s++) {
        ((double *)pos.data)[s * 3] = 5.0 + s / 7;
        ((double *)pos.data)[s * 3 + 1] = -4.0 + 0.37 * (double)(s % 7) * 32.0 / 7.0;
        ((double *)pos.data)[s * 3 + 2] = 1.5 + 0.21 * (double)(s % 5) * 32.0;
    }
    h3s_tensor posd = gup(&pos), cd = gdev2(H3S_F32, S, 6 * F), sd = gdev2(H3S_F32, S, 6 * F);
    CHECK_OK(h3s_rope_table(&posd, F, 10000.0, &cd, &sd));
    h3s_tensor c = gdown(&cd), s_ = gdown(&sd);
    h3s_tensor c64 = h3t_alloc2(H3S_F64, S, 6 * F), s64 = h3t_alloc2(H3S_F64, S, 6 * F);
    h3s_tensor cc = h3t_alloc2(H3S_F32, S, 6 * F), sc = h3t_alloc2(H3S_F32, S, 6 * F);
    CHECK_OK(h3s_rope_table(&pos, F, 10000.0, &c64, &s64));
    CHECK_OK(h3s_rope_table(&pos, F, 10000.0, &cc, &sc));
    report_err("rope_table cos", h3t_rel_l2(&c, &c64), h3t_rel_l2(&cc, &c64), 1e-5);
    report_err("rope_table sin", h3t_rel_l2(&s_, &s64), h3t_rel_l2(&sc, &s64), 1e-5);

    h3s_tensor x = hrand(H3S_BF16, M, W, 51, 1.0f), dy = hrand(H3S_F32, M, W, 52, 1.0f);
    h3s_tensor xd = gup(&x), dyd = gup(&dy), yd = gdev2(H3S_BF16, M, W), dxd = gdev2(H3S_F32, M, W);
    CHECK_OK(h3s_rope_forward(&xd, heads, &cd, &sd, &yd));
    CHECK_OK(h3s_rope_backward(heads, &cd, &sd, &dyd, &dxd));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd);
    /* golden and CPU strict from the GPU's own table (the apply is what is measured here) */
    h3s_tensor cg = f64(&c), sg = f64(&s_), x64 = f64(&x), dy64 = f64(&dy), y64 = like64(&y), dx64 = like64(&dx);
    CHECK_OK(h3s_rope_forward(&x64, heads, &cg, &sg, &y64));
    CHECK_OK(h3s_rope_backward(heads, &cg, &sg, &dy64, &dx64));
    h3s_tensor yc = host_like(&y, H3S_BF16), dxc = host_like(&dx, H3S_F32);
    CHECK_OK(h3s_rope_forward(&x, heads, &c, &s_, &yc));
    CHECK_OK(h3s_rope_backward(heads, &c, &s_, &dy, &dxc));
    report_err("rope y", h3t_rel_l2(&y, &y64), h3t_rel_l2(&yc, &y64), TOL_BF16);
    report_err("rope dx", h3t_rel_l2(&dx, &dx64), h3t_rel_l2(&dxc, &dx64), 1e-6);
    CHECK(h3t_bitwise_equal(&y, &yc) && h3t_bitwise_equal(&dx, &dxc), "rope apply equals the CPU strict bits");
    /* in place */
    CHECK_OK(h3s_rope_forward(&xd, heads, &cd, &sd, &xd));
    CHECK_OK(h3s_rope_backward(heads, &cd, &sd, &dyd, &dyd));
    CHECK(gequal(&xd, &y) && gequal(&dyd, &dx), "rope in place gives the same bits");
    /* device positions are checked as host ones are: Inf in f32, beyond the angle bound, NaN; theta < 1 */
    const double bad_pos[3] = {1e39, -2e6, NAN};
    for (int k = 0; k < 3; k++) {
        h3s_tensor pb = h3t_alloc2(H3S_F64, S, 3);
        memcpy(pb.data, pos.data, h3s_tensor_nbytes(&pos));
        ((double *)pb.data)[3 * (S - 1) + 1] = bad_pos[k];
        h3s_tensor pbd = gup(&pb);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pbd, F, 10000.0, &cd, &sd));
        CHECK(strstr(h3s_last_error(), "position_ids"), "device position %g: %s", bad_pos[k], h3s_last_error());
        h3s_tensor_free(&pb);
        free_all(&pbd, 1, 1);
    }
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&posd, F, 0.5, &cd, &sd));
    CHECK(gequal(&cd, &c) && gequal(&sd, &s_), "a refused device rope_table wrote its tables");
    h3s_tensor all[] = {pos, c, s_, c64, s64, cc, sc, x, dy, y, dx, cg, sg, x64, dy64, y64, dx64, yc, dxc};
    free_all(all, 19, 0);
    h3s_tensor alld[] = {posd, cd, sd, xd, dyd, yd, dxd};
    free_all(alld, 7, 1);
}

/* ================================================================== attention */

typedef struct attn_case {
    int64_t B, S, heads, D;
    int use_doc, use_kv;
} attn_case;

/* Masks: doc = two documents (first 40%, rest); key_valid drops every 5th key of items b >= 1
 * and every 7th of item 0, keeping at least one key per document. */
static void make_masks(const attn_case *c, h3s_tensor *doc, h3s_tensor *kv) {
    *doc = h3t_alloc1(H3S_I64, c->S);
    for (int64_t s = 0; s < c->S; s++)
        ((int64_t *)doc->data)[s] = s < (c->S * 2) / 5 ? 3 : 8;
    int64_t kd[2] = {c->B, c->S};
    *kv = h3t_alloc(H3S_BOOL, 2, kd);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t s = 0; s < c->S; s++)
            ((uint8_t *)kv->data)[b * c->S + s] = (s % (b == 0 ? 7 : 5)) != 3;
}

/* The provider's precision for the attention backward (flash kernels in BF16), emulated in FP64:
 * dout rounded to BF16, bf16(P) and bf16(dS) into the products, dq/dk/dv rounded to BF16; out
 * and stats as given (the same the golden uses).  The tensor-core path must be at least as
 * accurate (docs/strict.md 1.4). */
static void provider_attention_grads(const attn_case *c, const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                     const h3s_tensor *o, const h3s_tensor *st, const h3s_tensor *dout,
                                     const h3s_tensor *doc, const h3s_tensor *kv, h3s_tensor *dq, h3s_tensor *dk,
                                     h3s_tensor *dv) {
    const int64_t S = c->S, H = c->heads, D = c->D, W = H * D;
    const double scale = 1.0 / sqrt((double)D);
    const uint16_t *Q = (const uint16_t *)q->data, *K = (const uint16_t *)k->data, *V = (const uint16_t *)v->data;
    const double *O = (const double *)o->data, *ST = (const double *)st->data;
    const float *G = (const float *)dout->data;
    double *DQ = (double *)dq->data, *DK = (double *)dk->data, *DV = (double *)dv->data;
    memset(DQ, 0, h3s_tensor_nbytes(dq)), memset(DK, 0, h3s_tensor_nbytes(dk)), memset(DV, 0, h3s_tensor_nbytes(dv));
#define BF(x) ((double)h3s_bf16_to_f32(h3s_bf16_from_f32((float)(x))))
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t ri = (b * S + i) * W + h * D;
                const double m = ST[((b * S + i) * H + h) * 2], l = ST[((b * S + i) * H + h) * 2 + 1];
                if (!(l > 0)) continue;
                double delta = 0;
                for (int64_t d = 0; d < D; d++)
                    delta += BF(G[ri + d]) * O[ri + d];
                for (int64_t j = 0; j < S; j++) {
                    if (c->use_doc && ((int64_t *)doc->data)[i] != ((int64_t *)doc->data)[j]) continue;
                    if (c->use_kv && !((uint8_t *)kv->data)[b * S + j]) continue;
                    const int64_t rj = (b * S + j) * W + h * D;
                    double sc = 0, dp = 0;
                    for (int64_t d = 0; d < D; d++) {
                        sc += (double)h3s_bf16_to_f32(Q[ri + d]) * (double)h3s_bf16_to_f32(K[rj + d]);
                        dp += BF(G[ri + d]) * (double)h3s_bf16_to_f32(V[rj + d]);
                    }
                    const double P = exp(sc * scale - m) / l, dS = BF(P * (dp - delta)), Pb = BF(P);
                    for (int64_t d = 0; d < D; d++) {
                        DQ[ri + d] += dS * (double)h3s_bf16_to_f32(K[rj + d]) * scale;
                        DK[rj + d] += dS * (double)h3s_bf16_to_f32(Q[ri + d]) * scale;
                        DV[rj + d] += Pb * BF(G[ri + d]);
                    }
                }
            }
    for (int64_t i = 0; i < c->B * S * W; i++)
        DQ[i] = BF(DQ[i]), DK[i] = BF(DK[i]), DV[i] = BF(DV[i]);
#undef BF
}

static void test_attention_case(const attn_case *c) {
    const int64_t M = c->B * c->S, W = c->heads * c->D;
    printf("attention B=%lld S=%lld heads=%lld D=%lld doc=%d key_valid=%d\n", (long long)c->B, (long long)c->S,
           (long long)c->heads, (long long)c->D, c->use_doc, c->use_kv);
    h3s_tensor q = hrand(H3S_BF16, M, W, 61, 1.0f), k = hrand(H3S_BF16, M, W, 62, 1.0f),
               v = hrand(H3S_BF16, M, W, 63, 1.0f), dout = hrand(H3S_F32, M, W, 64, 1.0f);
    h3s_tensor doc, kv;
    make_masks(c, &doc, &kv);
    h3s_attn_mask mask = {c->use_doc ? &doc : NULL, c->use_kv ? &kv : NULL};
    h3s_tensor qd = gup(&q), kd = gup(&k), vd = gup(&v), gd = gup(&dout);
    int64_t sdims[3] = {M, c->heads, 2};
    h3s_tensor od = gdev2(H3S_BF16, M, W), std = gdev(H3S_F32, 3, sdims);
    h3s_tensor dqd = gdev2(H3S_F32, M, W), dkd = gdev2(H3S_F32, M, W), dvd = gdev2(H3S_F32, M, W);
    gpoison(&od), gpoison(&std), gpoison(&dqd), gpoison(&dkd), gpoison(&dvd);
    CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, c->B, c->heads, &mask, &od, &std));
    CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, &dqd, &dkd, &dvd));
    h3s_tensor o = gdown(&od), st = gdown(&std), dq = gdown(&dqd), dk = gdown(&dkd), dv = gdown(&dvd);

    h3s_tensor q64 = f64(&q), k64 = f64(&k), v64 = f64(&v), g64 = f64(&dout);
    h3s_tensor o64 = like64(&o), st64 = like64(&st);
    CHECK_OK(h3s_attention_forward(&q64, &k64, &v64, c->B, c->heads, &mask, &o64, &st64));
    h3s_tensor oc = host_like(&o, H3S_BF16), stc = host_like(&st, H3S_F32);
    CHECK_OK(h3s_attention_forward(&q, &k, &v, c->B, c->heads, &mask, &oc, &stc));
    report_err("attention out", h3t_rel_l2(&o, &o64), h3t_rel_l2(&oc, &o64), TOL_BF16);
    report_err("attention stats", h3t_rel_l2(&st, &st64), h3t_rel_l2(&stc, &st64), 1e-5);
    /* the backward measured on the GPU's own forward outputs */
    h3s_tensor og = f64(&o), sg = f64(&st), dq64 = like64(&dq), dk64 = like64(&dk), dv64 = like64(&dv);
    CHECK_OK(h3s_attention_backward(&q64, &k64, &v64, &og, &sg, c->B, c->heads, &mask, &g64, &dq64, &dk64, &dv64));
    h3s_tensor dqc = host_like(&dq, H3S_F32), dkc = host_like(&dk, H3S_F32), dvc = host_like(&dv, H3S_F32);
    CHECK_OK(h3s_attention_backward(&q, &k, &v, &o, &st, c->B, c->heads, &mask, &dout, &dqc, &dkc, &dvc));
    if (c->D == 128) { /* the tensor-core path: BF16 operands in the backward, as the provider */
        h3s_tensor pq = like64(&dq), pk = like64(&dk), pv = like64(&dv);
        provider_attention_grads(c, &q, &k, &v, &og, &sg, &dout, &doc, &kv, &pq, &pk, &pv);
        const char *nm[3] = {"dq", "dk", "dv"};
        const h3s_tensor *mine[3] = {&dq, &dk, &dv}, *prov[3] = {&pq, &pk, &pv}, *gold[3] = {&dq64, &dk64, &dv64};
        for (int i = 0; i < 3; i++) {
            const double e = h3t_rel_l2(mine[i], gold[i]), pe = h3t_rel_l2(prov[i], gold[i]);
            printf("  attention %s (tensor cores)             gpu rel_l2 %.3e   provider precision %.3e\n", nm[i], e,
                   pe);
            CHECK(e <= pe, "attention %s: %.3e exceeds the provider's %.3e", nm[i], e, pe);
        }
        h3s_tensor pt[] = {pq, pk, pv};
        free_all(pt, 3, 0);
    } else {
        report_err("attention dq", h3t_rel_l2(&dq, &dq64), h3t_rel_l2(&dqc, &dq64), TOL_F32);
        report_err("attention dk", h3t_rel_l2(&dk, &dk64), h3t_rel_l2(&dkc, &dk64), TOL_F32);
        report_err("attention dv", h3t_rel_l2(&dv, &dv64), h3t_rel_l2(&dvc, &dv64), TOL_F32);
    }
    /* repeat */
    CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, c->B, c->heads, &mask, &od, &std));
    CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, &dqd, &dkd, &dvd));
    CHECK(gequal(&od, &o) && gequal(&std, &st) && gequal(&dqd, &dq) && gequal(&dkd, &dk) && gequal(&dvd, &dv),
          "attention repeat");
    /* dv rounded to BF16 in the same pass (the value projection's operand): dq, dk, dv unchanged and the copy
     * round_bf16(dv), masked key rows included; then the copy alone (dv NULL, as the block runs it): the same copy */
    {
        h3s_tensor dvb = gdev2(H3S_BF16, M, W), want = gdev2(H3S_BF16, M, W);
        CHECK_OK(h3s_cuda_round_bf16(&dvd, &want));
        h3s_tensor wanth = gdown(&want);
        gpoison(&dqd), gpoison(&dkd), gpoison(&dvd), gpoison(&dvb);
        CHECK_OK(h3s_attention_backward_rounded(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, &dqd, &dkd, &dvd,
                                                &dvb));
        CHECK(gequal(&dqd, &dq) && gequal(&dkd, &dk) && gequal(&dvd, &dv) && gequal(&dvb, &wanth),
              "attention_backward_rounded: dq, dk, dv unchanged and dv_bf16 = round_bf16(dv)");
        gpoison(&dkd), gpoison(&dvb);
        CHECK_OK(h3s_attention_backward_rounded(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, NULL, &dkd, NULL,
                                                &dvb));
        CHECK(gequal(&dkd, &dk) && gequal(&dvb, &wanth),
              "attention_backward_rounded without dv: dk unchanged and dv_bf16 = round_bf16(dv)");
        CHECK(h3s_attention_backward_rounded(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, NULL, NULL, &dvd,
                                             &dqd) != H3S_OK,
              "attention_backward_rounded: an F32 dv_bf16 is refused");
        /* dq alone (the dk/dv pass still runs, for the dS it stores): the bits of the full call */
        gpoison(&dqd);
        CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, c->B, c->heads, &mask, &gd, &dqd, NULL, NULL));
        CHECK(gequal(&dqd, &dq), "attention backward with dq alone: the bits of the full call");
        h3s_tensor_free(&wanth);
        gfree(&dvb), gfree(&want);
    }
    h3s_tensor all[] = {q,   k,   v,    dout, doc, kv, o,  st,   dq,   dk,   dv,  q64, k64, v64,
                        g64, o64, st64, oc,   stc, og, sg, dq64, dk64, dv64, dqc, dkc, dvc};
    free_all(all, 27, 0);
    h3s_tensor alld[] = {qd, kd, vd, gd, od, std, dqd, dkd, dvd};
    free_all(alld, 9, 1);
}

/* Item 0 of B items gets the bits it gets alone, forward and backward. */
static void test_attention_batch(void) {
    const int64_t S = SZ(200, 20), heads = SZ(4, 2), D = SZ(128, 16), W = heads * D;
    char ref[7][65];
    for (int64_t B = 1; B <= 4; B *= 2) {
        const int64_t M = B * S;
        attn_case c = {B, S, heads, D, 1, 1};
        h3s_tensor doc, kv;
        make_masks(&c, &doc, &kv);
        h3s_attn_mask mask = {&doc, &kv};
        h3s_tensor qd = gdev2(H3S_BF16, M, W), kd = gdev2(H3S_BF16, M, W), vd = gdev2(H3S_BF16, M, W),
                   gd = gdev2(H3S_F32, M, W);
        for (int64_t b = 0; b < B; b++) {
            h3s_tensor t[4] = {grows(&qd, b * S, S), grows(&kd, b * S, S), grows(&vd, b * S, S), grows(&gd, b * S, S)};
            for (int i = 0; i < 4; i++)
                gfill(&t[i], 1000 + 10 * (uint64_t)b + (uint64_t)i, 1.0f);
        }
        int64_t sdims[3] = {M, heads, 2};
        h3s_tensor od = gdev2(H3S_BF16, M, W), std = gdev(H3S_F32, 3, sdims);
        h3s_tensor dqd = gdev2(H3S_F32, M, W), dkd = gdev2(H3S_F32, M, W), dvd = gdev2(H3S_F32, M, W);
        CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, B, heads, &mask, &od, &std));
        CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, B, heads, &mask, &gd, &dqd, &dkd, &dvd));
        const h3s_tensor *outs[5] = {&od, &std, &dqd, &dkd, &dvd};
        for (int i = 0; i < 5; i++) {
            char h[65];
            h3s_tensor v0 = *outs[i];
            v0.shape[0] = S;
            ghash(&v0, 0, -1, h);
            if (B == 1)
                memcpy(ref[i], h, 65);
            else
                CHECK(strcmp(ref[i], h) == 0, "attention output %d of item 0 at B=%lld differs from B=1", i,
                      (long long)B);
        }
        h3s_tensor alld[] = {qd, kd, vd, gd, od, std, dqd, dkd, dvd};
        free_all(alld, 9, 1);
        h3s_tensor_free(&doc), h3s_tensor_free(&kv);
    }
}

/* SHA-256 of out, stats, dq, dk, dv of one forward + backward with the given masks (host tensors). */
static void attention_hashes(int64_t B, int64_t S, int64_t heads, int64_t D, h3s_tensor *doc, h3s_tensor *kv,
                             char h[5][65]) {
    const int64_t M = B * S, W = heads * D;
    h3s_attn_mask mask = {doc, kv};
    h3s_tensor qd = gdev2(H3S_BF16, M, W), kd = gdev2(H3S_BF16, M, W), vd = gdev2(H3S_BF16, M, W),
               gd = gdev2(H3S_F32, M, W);
    gfill(&qd, 2001, 1.0f), gfill(&kd, 2002, 1.0f), gfill(&vd, 2003, 1.0f), gfill(&gd, 2004, 1.0f);
    int64_t sdims[3] = {M, heads, 2};
    h3s_tensor od = gdev2(H3S_BF16, M, W), std = gdev(H3S_F32, 3, sdims);
    h3s_tensor dqd = gdev2(H3S_F32, M, W), dkd = gdev2(H3S_F32, M, W), dvd = gdev2(H3S_F32, M, W);
    CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, B, heads, &mask, &od, &std));
    CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, B, heads, &mask, &gd, &dqd, &dkd, &dvd));
    const h3s_tensor *outs[5] = {&od, &std, &dqd, &dkd, &dvd};
    for (int i = 0; i < 5; i++)
        ghash(outs[i], 0, -1, h[i]);
    h3s_tensor alld[] = {qd, kd, vd, gd, od, std, dqd, dkd, dvd};
    free_all(alld, 9, 1);
}

/* The tensor-core attention keeps its plans by content: new mask bytes in the same host buffers get a plan of
 * their own (the results of fresh tensors holding them), and the first masks' results come back unchanged. */
static void test_attention_plan_cache(void) {
    const int64_t B = 2, S = SZ(200, 20), heads = 2, D = SZ(128, 16);
    attn_case c = {B, S, heads, D, 1, 1};
    h3s_tensor doc, kv, doc2, kv2;
    make_masks(&c, &doc, &kv);
    make_masks(&c, &doc2, &kv2);
    for (int64_t s = 0; s < S; s++) /* another document split and other masked keys */
        ((int64_t *)doc2.data)[s] = s < S / 3 ? 3 : 8;
    for (int64_t i = 0; i < B * S; i++)
        ((uint8_t *)kv2.data)[i] = (i % 4) != 1;
    char ha[5][65], hb[5][65], hc[5][65], hd[5][65];
    attention_hashes(B, S, heads, D, &doc, &kv, ha);
    attention_hashes(B, S, heads, D, &doc2, &kv2, hb);
    memcpy(doc.data, doc2.data, (size_t)S * 8); /* the first buffers now hold the second masks */
    memcpy(kv.data, kv2.data, (size_t)(B * S));
    attention_hashes(B, S, heads, D, &doc, &kv, hc);
    h3s_tensor_free(&doc2), h3s_tensor_free(&kv2);
    make_masks(&c, &doc2, &kv2); /* fresh buffers with the first masks again */
    attention_hashes(B, S, heads, D, &doc2, &kv2, hd);
    int differ = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(strcmp(hc[i], hb[i]) == 0, "attention output %d: new masks in old buffers differ from fresh buffers", i);
        CHECK(strcmp(hd[i], ha[i]) == 0, "attention output %d: the first masks again differ from their first run", i);
        differ += strcmp(ha[i], hb[i]) != 0;
    }
    CHECK(differ > 0, "the two mask sets must give different results (control)");
    h3s_tensor_free(&doc), h3s_tensor_free(&kv), h3s_tensor_free(&doc2), h3s_tensor_free(&kv2);
}

/* The same live sequence with padding inserted between live positions (padding keys masked
 * by key_valid, padding rows a document of their own): every live row's out, stats, dq, dk
 * and dv have the unpadded bits. */
static void test_attention_padding(int64_t D_big) {
    const int64_t S0 = SZ(150, 14), heads = SZ(3, 2), D = D_big == 128 ? 128 : SZ(D_big, 16), W = heads * D;
    printf("attention padding S0=%lld heads=%lld D=%lld\n", (long long)S0, (long long)heads, (long long)D);
    int64_t S1 = 0;
    int64_t *live_at = (int64_t *)malloc((size_t)S0 * sizeof(int64_t));
    for (int64_t s = 0; s < S0; s++) {
        if (s % 6 == 2) S1 += 3; /* three padding rows before every 6th live row */
        live_at[s] = S1++;
    }
    S1 += 5; /* and a padded tail */
    h3s_tensor q = hrand(H3S_BF16, S0, W, 71, 1.0f), k = hrand(H3S_BF16, S0, W, 72, 1.0f),
               v = hrand(H3S_BF16, S0, W, 73, 1.0f), g = hrand(H3S_F32, S0, W, 74, 1.0f);
    h3s_tensor qp = hrand(H3S_BF16, S1, W, 75, 1.0f), kp = hrand(H3S_BF16, S1, W, 76, 1.0f),
               vp = hrand(H3S_BF16, S1, W, 77, 1.0f), gp = hrand(H3S_F32, S1, W, 78, 1.0f);
    h3s_tensor doc = h3t_alloc1(H3S_I64, S1);
    int64_t kd2[2] = {1, S1};
    h3s_tensor kv = h3t_alloc(H3S_BOOL, 2, kd2);
    for (int64_t s = 0; s < S1; s++) {
        ((int64_t *)doc.data)[s] = 1;
        ((uint8_t *)kv.data)[s] = 0;
    }
    for (int64_t s = 0; s < S0; s++) {
        int64_t p = live_at[s];
        memcpy((uint16_t *)qp.data + p * W, (uint16_t *)q.data + s * W, (size_t)W * 2);
        memcpy((uint16_t *)kp.data + p * W, (uint16_t *)k.data + s * W, (size_t)W * 2);
        memcpy((uint16_t *)vp.data + p * W, (uint16_t *)v.data + s * W, (size_t)W * 2);
        memcpy((float *)gp.data + p * W, (float *)g.data + s * W, (size_t)W * 4);
        ((int64_t *)doc.data)[p] = 0;
        ((uint8_t *)kv.data)[p] = 1;
    }
    h3s_tensor res[2][5];
    for (int pass = 0; pass < 2; pass++) {
        const int64_t S = pass ? S1 : S0;
        h3s_tensor qd = gup(pass ? &qp : &q), kd = gup(pass ? &kp : &k), vd = gup(pass ? &vp : &v),
                   gd = gup(pass ? &gp : &g);
        h3s_attn_mask mask = {pass ? &doc : NULL, pass ? &kv : NULL};
        int64_t sdims[3] = {S, heads, 2};
        h3s_tensor od = gdev2(H3S_BF16, S, W), std = gdev(H3S_F32, 3, sdims);
        h3s_tensor dqd = gdev2(H3S_F32, S, W), dkd = gdev2(H3S_F32, S, W), dvd = gdev2(H3S_F32, S, W);
        CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, 1, heads, &mask, &od, &std));
        CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, 1, heads, &mask, &gd, &dqd, &dkd, &dvd));
        res[pass][0] = gdown(&od), res[pass][1] = gdown(&std), res[pass][2] = gdown(&dqd);
        res[pass][3] = gdown(&dkd), res[pass][4] = gdown(&dvd);
        h3s_tensor alld[] = {qd, kd, vd, gd, od, std, dqd, dkd, dvd};
        free_all(alld, 9, 1);
    }
    int same = 1;
    for (int i = 0; i < 5; i++) {
        size_t row = (size_t)(res[0][i].shape[1] * (res[0][i].ndim == 3 ? res[0][i].shape[2] : 1)) *
                     h3s_dtype_size(res[0][i].dtype);
        for (int64_t s = 0; s < S0; s++)
            if (memcmp((char *)res[0][i].data + (size_t)s * row, (char *)res[1][i].data + (size_t)live_at[s] * row,
                       row))
                same = 0;
    }
    CHECK(same, "attention live rows with padding between them keep the unpadded bits (S %lld -> %lld)", (long long)S0,
          (long long)S1);
    for (int p = 0; p < 2; p++)
        free_all(res[p], 5, 0);
    h3s_tensor all[] = {q, k, v, g, qp, kp, vp, gp, doc, kv};
    free_all(all, 10, 0);
    free(live_at);
}

/* The warp-specialised tensor-core forward (h3c_attention_force_fwd_v1(0): a producer warpgroup fills the stages of K
 * and V through mbarriers, the two consumer warpgroups take turns at the tensor cores) gives every bit of the first
 * one (h3c_attention_force_fwd_v1(1)): out and stats, element by element.  It runs twice: as built (key tiles of
 * consecutive rows loaded by the bulk tensor copy, the others gathered) and with every tile gathered
 * (h3c_attention_force_gather(1)).  Masks are host tensors or NULL. */
static void attn_fwd_ws_case(const char *what, int64_t B, int64_t S, int64_t heads, h3s_tensor *doc, h3s_tensor *kv) {
    const int64_t M = B * S, W = heads * 128;
    h3s_attn_mask mask = {doc, kv};
    h3s_tensor qd = gdev2(H3S_BF16, M, W), kd = gdev2(H3S_BF16, M, W), vd = gdev2(H3S_BF16, M, W);
    gfill(&qd, 3001, 1.0f), gfill(&kd, 3002, 1.0f), gfill(&vd, 3003, 1.0f);
    int64_t sdims[3] = {M, heads, 2};
    h3s_tensor o[3], st[3];
    for (int v = 0; v < 3; v++) { /* v = 0: the first kernel, 1: the warp-specialised one, 2: it gathering all */
        h3s_tensor od = gdev2(H3S_BF16, M, W), std = gdev(H3S_F32, 3, sdims);
        gpoison(&od), gpoison(&std);
        h3c_attention_force_fwd_v1(v == 0 ? 1 : 0);
        h3c_attention_force_gather(v == 2);
        CHECK_OK(h3s_attention_forward(&qd, &kd, &vd, B, heads, &mask, &od, &std));
        o[v] = gdown(&od), st[v] = gdown(&std);
        gfree(&od), gfree(&std);
    }
    h3c_attention_force_fwd_v1(-1);
    h3c_attention_force_gather(0);
    static const char *name[3] = {"first", "warp-specialised", "warp-specialised, all gathered"};
    for (int v = 1; v < 3; v++) {
        int64_t dout = 0, dst = 0;
        for (int64_t i = 0; i < M * W; i++)
            dout += ((const uint16_t *)o[0].data)[i] != ((const uint16_t *)o[v].data)[i];
        for (int64_t i = 0; i < M * heads * 2; i++)
            dst += ((const uint32_t *)st[0].data)[i] != ((const uint32_t *)st[v].data)[i];
        printf("  attention forward %s vs first (%s: B=%lld S=%lld heads=%lld): %lld of %lld out and %lld of %lld "
               "stats differ\n",
               name[v], what, (long long)B, (long long)S, (long long)heads, (long long)dout, (long long)(M * W),
               (long long)dst, (long long)(M * heads * 2));
        CHECK(dout == 0 && dst == 0, "attention forward (%s): the %s kernel differs from the first", what, name[v]);
    }
    /* the backward (dq's key tiles, dk/dv's query tiles): tiles of consecutive rows by the bulk tensor copy, every
     * tile gathered, and the heads one at a time through the stored dS (a budget of one byte: one head per chunk);
     * dq, dk, dv bit for bit */
    h3s_tensor od = gup(&o[1]), std = gup(&st[1]), gd = gdev2(H3S_F32, M, W);
    gfill(&gd, 3004, 1.0f);
    h3s_tensor g[3][3];
    for (int v = 0; v < 3; v++) {
        h3s_tensor dq = gdev2(H3S_F32, M, W), dk = gdev2(H3S_F32, M, W), dv = gdev2(H3S_F32, M, W);
        gpoison(&dq), gpoison(&dk), gpoison(&dv);
        h3c_attention_force_gather(v == 1);
        h3c_attention_set_ds_budget(v == 2 ? 1 : 0);
        CHECK_OK(h3s_attention_backward(&qd, &kd, &vd, &od, &std, B, heads, &mask, &gd, &dq, &dk, &dv));
        g[v][0] = gdown(&dq), g[v][1] = gdown(&dk), g[v][2] = gdown(&dv);
        gfree(&dq), gfree(&dk), gfree(&dv);
    }
    h3c_attention_force_gather(0);
    h3c_attention_set_ds_budget(0);
    int64_t dg[3] = {0, 0, 0}, dh[3] = {0, 0, 0};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < M * W; i++) {
            dg[t] += ((const uint32_t *)g[0][t].data)[i] != ((const uint32_t *)g[1][t].data)[i];
            dh[t] += ((const uint32_t *)g[0][t].data)[i] != ((const uint32_t *)g[2][t].data)[i];
        }
    /* rows no kernel computes hold +0 (the outputs were poisoned before): dk and dv of a row whose key is masked, dq
     * of a query whose document has no live key in its item (l = 0; dout is nowhere zero here) */
    int64_t unset = 0, zero_rows = 0;
    for (int64_t r = 0; r < M; r++) {
        const int64_t b = r / S, i = r % S;
        const int key_live = !kv || ((const uint8_t *)kv->data)[r];
        int any_key = 0;
        for (int64_t j = 0; j < S && !any_key; j++)
            any_key = (!doc || ((const int64_t *)doc->data)[j] == ((const int64_t *)doc->data)[i]) &&
                      (!kv || ((const uint8_t *)kv->data)[b * S + j]);
        for (int t = 0; t < 3; t++) {
            if (t == 0 ? any_key : key_live) continue;
            zero_rows++;
            for (int64_t c = 0; c < W; c++)
                unset += ((const uint32_t *)g[0][t].data)[r * W + c] != 0u;
        }
    }
    printf("  attention backward (%s): %lld rows no kernel computes, %lld of their values not +0\n", what,
           (long long)zero_rows, (long long)unset);
    CHECK(unset == 0, "attention backward (%s): a row no kernel computes is not +0", what);
    printf("  attention backward bulk copies vs all gathered (%s): %lld, %lld, %lld of %lld dq, dk, dv differ\n", what,
           (long long)dg[0], (long long)dg[1], (long long)dg[2], (long long)(M * W));
    CHECK(dg[0] == 0 && dg[1] == 0 && dg[2] == 0, "attention backward (%s): the bulk copies change a gradient", what);
    printf("  attention backward one head per dS chunk vs all heads (%s): %lld, %lld, %lld of %lld dq, dk, dv differ\n",
           what, (long long)dh[0], (long long)dh[1], (long long)dh[2], (long long)(M * W));
    CHECK(dh[0] == 0 && dh[1] == 0 && dh[2] == 0, "attention backward (%s): the dS chunks change a gradient", what);
    h3s_tensor all[] = {o[0],    o[1],    o[2],    st[0],   st[1],   st[2],   g[0][0], g[0][1],
                        g[0][2], g[1][0], g[1][1], g[1][2], g[2][0], g[2][1], g[2][2]};
    free_all(all, 15, 0);
    h3s_tensor alld[] = {qd, kd, vd, od, std, gd};
    free_all(alld, 6, 1);
}

static void test_attention_fwd_ws(void) {
    printf("attention: warp-specialised forward against the first, bulk copies against gathers, bit for bit\n");
    /* the release shape: S = 925 (7 whole key tiles and one of 29), 56 heads x 128, no mask */
    attn_fwd_ws_case("S=925, no mask", 1, 925, SZ(56, 4), NULL, NULL);
    /* many key tiles (the stage ring wraps many times), a partial last tile: 2000 - 2000/7 keys per item */
    {
        const int64_t B = 1, S = SZ(2000, 1100);
        int64_t kd2[2] = {B, S};
        h3s_tensor kv = h3t_alloc(H3S_BOOL, 2, kd2);
        for (int64_t s = 0; s < S; s++)
            ((uint8_t *)kv.data)[s] = (s % 7) != 3;
        attn_fwd_ws_case("long, every 7th key masked", B, S, SZ(4, 2), NULL, &kv);
        h3s_tensor_free(&kv);
    }
    /* B = 3 with documents and key padding between live rows: a small document (fewer keys than one tile), a
     * document whose keys are all masked (queries with no live key), padding rows (three in every
     * 12 positions, each its own document with its key masked, so also no live key), per-item masked keys, and two
     * large documents whose key counts are not multiples of 128 */
    {
        const int64_t B = 3, S = SZ(700, 460);
        h3s_tensor doc = h3t_alloc1(H3S_I64, S);
        int64_t kd2[2] = {B, S};
        h3s_tensor kv = h3t_alloc(H3S_BOOL, 2, kd2);
        for (int64_t s = 0; s < S; s++) {
            const int pad = s % 12 >= 2 && s % 12 <= 4; /* three padding rows in every 12 positions */
            ((int64_t *)doc.data)[s] = pad ? 1000 + s : s < 50 ? 1 : s < 70 ? 2 : s < (S * 2) / 5 ? 3 : 8;
            for (int64_t b = 0; b < B; b++)
                ((uint8_t *)kv.data)[b * S + s] = !pad && !(s >= 50 && s < 70) && (s % (5 + b)) != 3;
        }
        attn_fwd_ws_case("B=3, documents, key padding", B, S, SZ(3, 2), &doc, &kv);
        h3s_tensor_free(&doc), h3s_tensor_free(&kv);
    }
    /* every group smaller than one key tile */
    attn_fwd_ws_case("S=100, one partial tile", 2, 100, 2, NULL, NULL);
    /* tiles of consecutive rows (bulk copies) and tiles across a run of masked keys (gathered) in one group, with
     * the runs at other places in each item: item b masks keys [300 + 37 b, 341 + 37 b) */
    {
        const int64_t B = 2, S = SZ(1000, 700);
        int64_t kd2[2] = {B, S};
        h3s_tensor kv = h3t_alloc(H3S_BOOL, 2, kd2);
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < S; s++)
                ((uint8_t *)kv.data)[b * S + s] = !(s >= 300 + 37 * b && s < 341 + 37 * b);
        attn_fwd_ws_case("B=2, a run of masked keys", B, S, SZ(3, 2), NULL, &kv);
        h3s_tensor_free(&kv);
    }
}

/* ================================================================== residual, swiglu */

static void test_residual(int with_table) {
    const int64_t M = SZ(300, 20), H = SZ(700, 40), R = 4, C = 6, gate = 5;
    printf("residual table=%d M=%lld H=%lld\n", with_table, (long long)M, (long long)H);
    h3s_tensor r = hrand(H3S_BF16, M, H, 81, 1.0f), y = hrand(H3S_BF16, M, H, 82, 1.0f);
    h3s_tensor table = hrand(H3S_BF16, R, C * H, 83, 0.5f), idx = rand_index(M, R, 84);
    h3s_tensor dout = hrand(H3S_F32, M, H, 85, 1.0f), pattern = hrand(H3S_F32, R, C * H, 86, 1.0f);
    h3s_tensor rd = gup(&r), yd = gup(&y), td = gup(&table), gd = gup(&dout);
    h3s_tensor od = gdev2(H3S_BF16, M, H), drd = gdev2(H3S_F32, M, H), dyd = gdev2(H3S_F32, M, H), dtd = gup(&pattern);
    const h3s_tensor *T = with_table ? &td : NULL, *I = with_table ? &idx : NULL;
    CHECK_OK(h3s_residual_forward(&rd, &yd, T, I, gate, &od));
    CHECK_OK(h3s_residual_backward(&yd, T, I, gate, &gd, &drd, &dyd, with_table ? &dtd : NULL));
    h3s_tensor o = gdown(&od), dr = gdown(&drd), dy = gdown(&dyd), dt = gdown(&dtd);
    h3s_tensor r64 = f64(&r), y64 = f64(&y), t64 = f64(&table), g64 = f64(&dout);
    h3s_tensor o64 = like64(&o), dr64 = like64(&dr), dy64 = like64(&dy), dt64 = f64(&pattern);
    CHECK_OK(h3s_residual_forward(&r64, &y64, with_table ? &t64 : NULL, I, gate, &o64));
    CHECK_OK(
        h3s_residual_backward(&y64, with_table ? &t64 : NULL, I, gate, &g64, &dr64, &dy64, with_table ? &dt64 : NULL));
    h3s_tensor oc = host_like(&o, H3S_BF16), drc = host_like(&dr, H3S_F32), dyc = host_like(&dy, H3S_F32);
    h3s_tensor dtc = h3t_alloc2(H3S_F32, R, C * H);
    memcpy(dtc.data, pattern.data, h3s_tensor_nbytes(&pattern));
    CHECK_OK(h3s_residual_forward(&r, &y, with_table ? &table : NULL, I, gate, &oc));
    CHECK_OK(
        h3s_residual_backward(&y, with_table ? &table : NULL, I, gate, &dout, &drc, &dyc, with_table ? &dtc : NULL));
    report_err("residual out", h3t_rel_l2(&o, &o64), h3t_rel_l2(&oc, &o64), TOL_BF16);
    report_err("residual dy", h3t_rel_l2(&dy, &dy64), h3t_rel_l2(&dyc, &dy64), 1e-6);
    CHECK(h3t_bitwise_equal(&o, &oc) && h3t_bitwise_equal(&dr, &drc) && h3t_bitwise_equal(&dy, &dyc),
          "residual forward / dr / dy equal the CPU strict bits");
    if (with_table) {
        report_err("residual dtable", h3t_rel_l2(&dt, &dt64), h3t_rel_l2(&dtc, &dt64), TOL_F32);
        CHECK(h3t_bitwise_equal(&dt, &dtc), "residual dtable (indexed tile fold) equals the CPU strict bits");
    }
    CHECK_OK(h3s_residual_forward(&rd, &yd, T, I, gate, &od));
    CHECK(gequal(&od, &o), "residual repeat");
    /* in place: out over r */
    CHECK_OK(h3s_residual_forward(&rd, &yd, T, I, gate, &rd));
    CHECK(gequal(&rd, &o), "residual in place");
    h3s_tensor all[] = {r,   y,   table, idx, dout, pattern, o,    dr, dy,  dt,  r64,
                        y64, t64, g64,   o64, dr64, dy64,    dt64, oc, drc, dyc, dtc};
    free_all(all, 22, 0);
    h3s_tensor alld[] = {rd, yd, td, gd, od, drd, dyd, dtd};
    free_all(alld, 8, 1);
}

static void test_swiglu(void) {
    const int64_t M = SZ(200, 10), F = SZ(700, 24);
    h3s_tensor u = hrand(H3S_BF16, M, 2 * F, 91, 2.0f), dh = hrand(H3S_F32, M, F, 92, 1.0f);
    h3s_tensor ud = gup(&u), dhd = gup(&dh), hd = gdev2(H3S_BF16, M, F), dud = gdev2(H3S_F32, M, 2 * F);
    CHECK_OK(h3s_swiglu_forward(&ud, &hd));
    CHECK_OK(h3s_swiglu_backward(&ud, &dhd, &dud));
    h3s_tensor h = gdown(&hd), du = gdown(&dud);
    h3s_tensor u64 = f64(&u), dh64 = f64(&dh), h64 = like64(&h), du64 = like64(&du);
    CHECK_OK(h3s_swiglu_forward(&u64, &h64));
    CHECK_OK(h3s_swiglu_backward(&u64, &dh64, &du64));
    h3s_tensor hc = host_like(&h, H3S_BF16), duc = host_like(&du, H3S_F32);
    CHECK_OK(h3s_swiglu_forward(&u, &hc));
    CHECK_OK(h3s_swiglu_backward(&u, &dh, &duc));
    report_err("swiglu h", h3t_rel_l2(&h, &h64), h3t_rel_l2(&hc, &h64), TOL_BF16);
    report_err("swiglu du", h3t_rel_l2(&du, &du64), h3t_rel_l2(&duc, &du64), 1e-6);
    CHECK_OK(h3s_swiglu_forward(&ud, &hd));
    CHECK_OK(h3s_swiglu_backward(&ud, &dhd, &dud));
    CHECK(gequal(&hd, &h) && gequal(&dud, &du), "swiglu repeat");
    h3s_tensor all[] = {u, dh, h, du, u64, dh64, h64, du64, hc, duc};
    free_all(all, 10, 0);
    h3s_tensor alld[] = {ud, dhd, hd, dud};
    free_all(alld, 4, 1);
}

/* ================================================================== adaln, timestep */

static void test_adaln(void) {
    const int64_t T = SZ(3, 2), E = SZ(512, 40), N = SZ(1152, 36);
    h3s_tensor temb = hrand(H3S_F32, T, E, 101, 2.0f), w = hrand(H3S_BF16, N, E, 102, 0.05f),
               b = hrand(H3S_BF16, N, 0, 103, 0.1f), dtab = hrand(H3S_F32, T, N, 104, 1.0f);
    h3s_tensor ted = gup(&temb), wd = gup(&w), bd = gup(&b), dtd = gup(&dtab);
    h3s_tensor ad = gdev2(H3S_BF16, T, E), tabd = gdev2(H3S_BF16, T, N), dted = gdev2(H3S_F32, T, E),
               dwd = gdev2(H3S_F32, N, E), dbd = gdev1(H3S_F32, N);
    CHECK_OK(h3s_adaln_projection_forward(&ted, &wd, &bd, &ad, &tabd));
    CHECK_OK(h3s_adaln_projection_backward(&ted, &ad, &wd, &dtd, &dted, &dwd, &dbd));
    h3s_tensor a = gdown(&ad), tab = gdown(&tabd), dte = gdown(&dted), dw = gdown(&dwd), db = gdown(&dbd);
    h3s_tensor ac = host_like(&a, H3S_BF16), tabc = host_like(&tab, H3S_BF16), dtec = host_like(&dte, H3S_F32),
               dwc = host_like(&dw, H3S_F32), dbc = host_like(&db, H3S_F32);
    CHECK_OK(h3s_adaln_projection_forward(&temb, &w, &b, &ac, &tabc));
    CHECK_OK(h3s_adaln_projection_backward(&temb, &ac, &w, &dtab, &dtec, &dwc, &dbc));
    h3s_tensor te64 = f64(&temb), w64 = f64(&w), b64 = f64(&b), dt64 = f64(&dtab);
    h3s_tensor a64 = like64(&a), tab64 = like64(&tab), dte64 = like64(&dte), dw64 = like64(&dw), db64 = like64(&db);
    CHECK_OK(h3s_adaln_projection_forward(&te64, &w64, &b64, &a64, &tab64));
    CHECK_OK(h3s_adaln_projection_backward(&te64, &a64, &w64, &dt64, &dte64, &dw64, &db64));
    CHECK(h3t_bitwise_equal(&a, &ac), "adaln a = bf16(silu(temb)) equals the CPU strict bits");
    report_err("adaln table", h3t_rel_l2(&tab, &tab64), h3t_rel_l2(&tabc, &tab64), TOL_BF16);
    if (h3s_get_grad_operands() == H3S_GRAD_OPERANDS_BF16 && N % 8 == 0 && E % 8 == 0) {
        /* dtable enters the tensor cores rounded to BF16: bounded by the provider's precision,
         * da = bf16(bf16(dtable) W) times silu'(temb), dw = bf16(bf16(dtable)^T a) */
        h3s_tensor pda = provider_grad(&dtab, &w, &a, 0), pdw = provider_grad(&dtab, &w, &a, 1);
        double *pd = (double *)pda.data;
        const float *tv = (const float *)temb.data;
        for (int64_t i = 0; i < T * E; i++) {
            const double x = (double)tv[i], sg = 1.0 / (1.0 + exp(-x));
            pd[i] *= sg * (1.0 + x * (1.0 - sg));
        }
        const double e1 = h3t_rel_l2(&dte, &dte64), p1 = h3t_rel_l2(&pda, &dte64);
        const double e2 = h3t_rel_l2(&dw, &dw64), p2 = h3t_rel_l2(&pdw, &dw64);
        printf("  adaln dtemb (bf16 operands)              gpu rel_l2 %.3e   provider precision %.3e\n", e1, p1);
        printf("  adaln dw (bf16 operands)                 gpu rel_l2 %.3e   provider precision %.3e\n", e2, p2);
        CHECK(e1 <= p1 && e1 <= 5e-3, "adaln dtemb with BF16 operands: %.3e exceeds the provider's %.3e", e1, p1);
        CHECK(e2 <= p2 && e2 <= 5e-3, "adaln dw with BF16 operands: %.3e exceeds the provider's %.3e", e2, p2);
        h3s_tensor_free(&pda), h3s_tensor_free(&pdw);
    } else {
        report_err("adaln dtemb", h3t_rel_l2(&dte, &dte64), h3t_rel_l2(&dtec, &dte64), 5e-3);
        report_err("adaln dw", h3t_rel_l2(&dw, &dw64), h3t_rel_l2(&dwc, &dw64), 5e-3);
    }
    report_err("adaln db", h3t_rel_l2(&db, &db64), h3t_rel_l2(&dbc, &db64), 1e-5);
    CHECK_OK(h3s_adaln_projection_forward(&ted, &wd, &bd, &ad, &tabd));
    CHECK_OK(h3s_adaln_projection_backward(&ted, &ad, &wd, &dtd, &dted, &dwd, &dbd));
    CHECK(gequal(&tabd, &tab) && gequal(&dted, &dte) && gequal(&dwd, &dw), "adaln repeat");
    h3s_tensor all[] = {temb, w,   b,    dtab, a,   tab,  dte, dw,    db,    ac,   tabc, dtec,
                        dwc,  dbc, te64, w64,  b64, dt64, a64, tab64, dte64, dw64, db64};
    free_all(all, 23, 0);
    h3s_tensor alld[] = {ted, wd, bd, dtd, ad, tabd, dted, dwd, dbd};
    free_all(alld, 9, 1);
}

static void test_timestep(void) {
    const int64_t T = SZ(5, 3), fd = SZ(256, 16), Eh = SZ(640, 48), E = SZ(320, 24);
    h3s_tensor t = h3t_alloc1(H3S_F32, T);
    for (int64_t i = 0; i < T; i++)
        ((float *)t.data)[i] = 0.08f + 0.21f * (float)i;
    h3s_tensor g = hrand(H3S_F32, T, fd, 111, 1.0f);
    h3s_tensor td = gup(&t), gd = gup(&g), od = gdev2(H3S_F32, T, fd), dtd = gdev1(H3S_F32, T);
    CHECK_OK(h3s_timestep_sinusoid_forward(&td, fd, &od));
    CHECK_OK(h3s_timestep_sinusoid_backward(&td, &gd, &dtd));
    h3s_tensor o = gdown(&od), dt = gdown(&dtd);
    h3s_tensor t64 = f64(&t), g64 = f64(&g), o64 = like64(&o), dt64 = like64(&dt);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t64, fd, &o64));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t64, &g64, &dt64));
    h3s_tensor oc = host_like(&o, H3S_F32), dtc = host_like(&dt, H3S_F32);
    CHECK_OK(h3s_timestep_sinusoid_forward(&t, fd, &oc));
    CHECK_OK(h3s_timestep_sinusoid_backward(&t, &g, &dtc));
    report_err("timestep sinusoid", h3t_rel_l2(&o, &o64), h3t_rel_l2(&oc, &o64), 1e-5);
    report_err("timestep sinusoid dt", h3t_rel_l2(&dt, &dt64), h3t_rel_l2(&dtc, &dt64), 1e-4);
    /* a NaN or out-of-range device timestep is refused as a host one is, before a kernel reads it */
    const float bad_t[2] = {NAN, 3e6f};
    for (int k = 0; k < 2; k++) {
        h3s_tensor tb = h3t_alloc1(H3S_F32, T);
        memcpy(tb.data, t.data, h3s_tensor_nbytes(&t));
        ((float *)tb.data)[T - 1] = bad_t[k];
        h3s_tensor tbd = gup(&tb);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_forward(&tbd, fd, &od));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_timestep_sinusoid_backward(&tbd, &gd, &dtd));
        h3s_tensor_free(&tb);
        free_all(&tbd, 1, 1);
    }
    CHECK(gequal(&od, &o) && gequal(&dtd, &dt), "a refused device sinusoid wrote its output");

    /* MLP on the sinusoid features */
    h3s_tensor w1 = hrand(H3S_F32, Eh, fd, 112, 0.1f), b1 = hrand(H3S_F32, Eh, 0, 113, 0.1f);
    h3s_tensor w2 = hrand(H3S_F32, E, Eh, 114, 0.05f), b2 = hrand(H3S_F32, E, 0, 115, 0.1f);
    h3s_tensor de = hrand(H3S_F32, T, E, 116, 1.0f);
    h3s_tensor w1d = gup(&w1), b1d = gup(&b1), w2d = gup(&w2), b2d = gup(&b2), ded = gup(&de);
    h3s_tensor hd = gdev2(H3S_F32, T, Eh), ed = gdev2(H3S_F32, T, E), dfd = gdev2(H3S_F32, T, fd),
               dw1d = gdev2(H3S_F32, Eh, fd), db1d = gdev1(H3S_F32, Eh), dw2d = gdev2(H3S_F32, E, Eh),
               db2d = gdev1(H3S_F32, E);
    CHECK_OK(h3s_timestep_mlp_forward(&od, &w1d, &b1d, &w2d, &b2d, &hd, &ed));
    CHECK_OK(h3s_timestep_mlp_backward(&od, &w1d, &w2d, &hd, &ded, &dfd, &dw1d, &db1d, &dw2d, &db2d));
    h3s_tensor hh = gdown(&hd), e = gdown(&ed), df = gdown(&dfd), dw1 = gdown(&dw1d), db1 = gdown(&db1d),
               dw2 = gdown(&dw2d), db2 = gdown(&db2d);
    h3s_tensor w164 = f64(&w1), b164 = f64(&b1), w264 = f64(&w2), b264 = f64(&b2), de64 = f64(&de), f64_ = f64(&o);
    h3s_tensor h64 = like64(&hh), e64 = like64(&e), df64 = like64(&df), dw164 = like64(&dw1), db164 = like64(&db1),
               dw264 = like64(&dw2), db264 = like64(&db2);
    CHECK_OK(h3s_timestep_mlp_forward(&f64_, &w164, &b164, &w264, &b264, &h64, &e64));
    CHECK_OK(h3s_timestep_mlp_backward(&f64_, &w164, &w264, &h64, &de64, &df64, &dw164, &db164, &dw264, &db264));
    h3s_tensor hc = host_like(&hh, H3S_F32), ec = host_like(&e, H3S_F32), dfc = host_like(&df, H3S_F32),
               dw1c = host_like(&dw1, H3S_F32), db1c = host_like(&db1, H3S_F32), dw2c = host_like(&dw2, H3S_F32),
               db2c = host_like(&db2, H3S_F32);
    CHECK_OK(h3s_timestep_mlp_forward(&o, &w1, &b1, &w2, &b2, &hc, &ec));
    CHECK_OK(h3s_timestep_mlp_backward(&o, &w1, &w2, &hc, &de, &dfc, &dw1c, &db1c, &dw2c, &db2c));
    report_err("timestep mlp temb", h3t_rel_l2(&e, &e64), h3t_rel_l2(&ec, &e64), 1e-5);
    report_err("timestep mlp dfeatures", h3t_rel_l2(&df, &df64), h3t_rel_l2(&dfc, &df64), 1e-5);
    report_err("timestep mlp dw1", h3t_rel_l2(&dw1, &dw164), h3t_rel_l2(&dw1c, &dw164), 1e-5);
    report_err("timestep mlp db1", h3t_rel_l2(&db1, &db164), h3t_rel_l2(&db1c, &db164), 1e-5);
    report_err("timestep mlp dw2", h3t_rel_l2(&dw2, &dw264), h3t_rel_l2(&dw2c, &dw264), 1e-5);
    report_err("timestep mlp db2", h3t_rel_l2(&db2, &db264), h3t_rel_l2(&db2c, &db264), 1e-5);
    CHECK(h3t_bitwise_equal(&hh, &hc), "timestep mlp hidden (FFMA chain) equals the CPU strict bits");
    CHECK_OK(h3s_timestep_mlp_forward(&od, &w1d, &b1d, &w2d, &b2d, &hd, &ed));
    CHECK_OK(h3s_timestep_mlp_backward(&od, &w1d, &w2d, &hd, &ded, &dfd, &dw1d, &db1d, &dw2d, &db2d));
    CHECK(gequal(&ed, &e) && gequal(&dfd, &df) && gequal(&dw1d, &dw1), "timestep repeat");
    h3s_tensor all[] = {t,   g,   o,    dt,    t64,   o64,   g64,   dt64, oc,   dtc,  w1,   b1,   w2,   b2,
                        de,  hh,  e,    df,    dw1,   db1,   dw2,   db2,  w164, b164, w264, b264, de64, f64_,
                        h64, e64, df64, dw164, db164, dw264, db264, hc,   ec,   dfc,  dw1c, db1c, dw2c, db2c};
    free_all(all, 42, 0);
    h3s_tensor alld[] = {td, gd, od, dtd, w1d, b1d, w2d, b2d, ded, hd, ed, dfd, dw1d, db1d, dw2d, db2d};
    free_all(alld, 16, 1);
}

/* ================================================================== rows, grad_add */

static void test_rows_and_add(void) {
    const int64_t B = 2, Ss = SZ(50, 9), n = SZ(20, 4), Wd = SZ(96, 8);
    h3s_tensor src = hrand(H3S_F32, B * Ss, Wd, 121, 1.0f), idx = h3t_alloc1(H3S_I64, n);
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)idx.data)[i] = (i * 7 + 3) % Ss; /* distinct: 7 and Ss coprime or n small */
    h3s_tensor sd = gup(&src), dd = gdev2(H3S_BF16, B * n, Wd);
    CHECK_OK(h3s_rows_gather(&sd, &idx, B, &dd));
    h3s_tensor dg = gdown(&dd), dc = h3t_alloc2(H3S_BF16, B * n, Wd);
    CHECK_OK(h3s_rows_gather(&src, &idx, B, &dc));
    CHECK(h3t_bitwise_equal(&dg, &dc), "rows_gather F32 -> BF16 equals the CPU");
    /* scatter the gathered rows back into a zero packed buffer */
    h3s_tensor pd = gdev2(H3S_F32, B * Ss, Wd), pc = h3t_alloc2(H3S_F32, B * Ss, Wd);
    CHECK_OK(h3s_rows_scatter(&dd, &idx, B, &pd));
    CHECK_OK(h3s_rows_scatter(&dc, &idx, B, &pc));
    CHECK(gequal(&pd, &pc), "rows_scatter BF16 -> F32 equals the CPU");
    /* grad_add */
    h3s_tensor a = hrand(H3S_F32, 33, 17, 122, 1.0f), b = hrand(H3S_F32, 33, 17, 123, 1.0f);
    h3s_tensor ad = gup(&a), bd = gup(&b), od = gdev2(H3S_F32, 33, 17), oc = h3t_alloc2(H3S_F32, 33, 17);
    CHECK_OK(h3s_grad_add(&ad, &bd, &od));
    CHECK_OK(h3s_grad_add(&a, &b, &oc));
    CHECK(gequal(&od, &oc), "grad_add equals the CPU");
    h3s_tensor all[] = {src, idx, dg, dc, pc, a, b, oc};
    free_all(all, 8, 0);
    h3s_tensor alld[] = {sd, dd, pd, ad, bd, od};
    free_all(alld, 6, 1);
}

/* ================================================================== row kernels against the reference
 * The vectorised row kernels (rope apply, residual, swiglu, grad_add, round to BF16) against the
 * one-thread-per-element reference kernels (h3c_elem_force_reference): the same bits, on inputs
 * full of special values (NaN with payloads, infinities, subnormals, rounding ties), for every
 * vector width (shapes and element offsets that make the launcher pick 8, 4, 2 and 1), odd tails,
 * in place, and the production shapes (S = 925, hidden 5376, ffn 14336, 56 heads x 128). */

typedef struct {
    h3s_tensor dev, init; /* n + 8 elements on the device; their initial content on the host */
} ebuf;

static uint64_t emix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* kind 0: poison (0x7f bytes, shows unwritten elements); 1: seeded values with specials mixed in */
static ebuf ebuf_new(h3s_dtype dt, int64_t n, uint64_t seed, int kind) {
    ebuf b;
    b.init = kind ? hrand(dt, n + 8, 0, seed, 1.0f) : h3t_alloc1(dt, n + 8);
    if (!kind) h3t_poison(&b.init);
    for (int64_t i = 0; kind && i < n + 8; i++) {
        const uint64_t r = emix(seed * 1000003ull + (uint64_t)i);
        if (r % 5) continue; /* one element in five is special */
        const uint32_t hi = (uint32_t)(r >> 32), pick = (uint32_t)(r >> 8) % 5;
        uint32_t u = pick == 0   ? hi                                              /* any bits: NaN payloads too */
                     : pick == 1 ? hi & 0x807fffffu                                /* subnormal or zero */
                     : pick == 2 ? (hi & 0x80000000u) | 0x7f800000u                /* infinity */
                     : pick == 3 ? (hi & 0x80000000u) | 0x7f800000u | (hi & 0x7fu) /* NaN, small payload */
                                 : (hi & 0xffff0000u) | 0x8000u;                   /* a BF16 rounding tie */
        if (dt == H3S_BF16)
            ((uint16_t *)b.init.data)[i] = (uint16_t)(u >> 16 | (pick == 3 ? (hi & 0x3fu) : 0u));
        else
            ((uint32_t *)b.init.data)[i] = u;
    }
    b.dev = gup(&b.init);
    return b;
}

static void ebuf_reset(ebuf *b) {
    if (h3s_cuda_upload(&b->init, &b->dev) != H3S_OK) gpu_die("upload");
}

/* Element `off` of the buffer (offsets 1, 2, 4 misalign the vector accesses on purpose). */
static void *ebuf_at(ebuf *b, int64_t off) { return (char *)b->dev.data + (size_t)off * h3s_dtype_size(b->dev.dtype); }

static void ebuf_free(ebuf *b) {
    gfree(&b->dev);
    h3s_tensor_free(&b->init);
}

/* Run `call` (a statement using the buffers) with the reference and with the row kernels, from the
 * same initial contents, and compare every listed buffer bit for bit. */
#define ELEM_SAME_BITS(what, bufs, nb, call)                                                                           \
    do {                                                                                                               \
        h3s_tensor got_[2][4];                                                                                         \
        for (int ref_ = 1; ref_ >= 0; ref_--) {                                                                        \
            for (int i_ = 0; i_ < (nb); i_++)                                                                          \
                ebuf_reset((bufs)[i_]);                                                                                \
            h3c_elem_force_reference(ref_);                                                                            \
            CHECK_OK(call);                                                                                            \
            for (int i_ = 0; i_ < (nb); i_++)                                                                          \
                got_[ref_][i_] = gdown(&(bufs)[i_]->dev);                                                              \
        }                                                                                                              \
        int same_ = 1;                                                                                                 \
        for (int i_ = 0; i_ < (nb); i_++) {                                                                            \
            same_ = same_ && h3t_bitwise_equal(&got_[0][i_], &got_[1][i_]);                                            \
            h3s_tensor_free(&got_[0][i_]);                                                                             \
            h3s_tensor_free(&got_[1][i_]);                                                                             \
        }                                                                                                              \
        CHECK(same_, "%s: the row kernels give the reference's bits", what);                                           \
    } while (0)

/* all_gates: the gates are every BF16 bit pattern in turn (M F = 65,536 covers them all once: the SiLU table's
 * 8,192 and every gate the kernels compute directly) */
static void elem_swiglu(int64_t M, int64_t F, int64_t ou, int64_t oo, int all_gates) {
    char what[160];
    snprintf(what, sizeof what, "swiglu M=%lld F=%lld offsets %lld %lld%s", (long long)M, (long long)F, (long long)ou,
             (long long)oo, all_gates ? ", every gate pattern" : "");
    ebuf u = ebuf_new(H3S_BF16, M * 2 * F, 201, 1), h = ebuf_new(H3S_BF16, M * F, 0, 0);
    for (int64_t m = 0; all_gates && m < M; m++)
        for (int64_t f = 0; f < F; f++)
            ((uint16_t *)u.init.data)[ou + m * 2 * F + F + f] = (uint16_t)(m * F + f);
    ebuf dh = ebuf_new(H3S_F32, M * F, 202, 1), du = ebuf_new(H3S_F32, M * 2 * F, 0, 0);
    ebuf dub = ebuf_new(H3S_BF16, M * 2 * F, 0, 0), r = ebuf_new(H3S_BF16, M * 2 * F, 0, 0);
    ebuf *fw[] = {&u, &h}, *bw[] = {&u, &dh, &du}, *bwr[] = {&u, &dh, &du, &dub};
    const float *pdh = (const float *)ebuf_at(&dh, oo);
    float *pdu = (float *)ebuf_at(&du, oo);
    ELEM_SAME_BITS(what, fw, 2, h3c_swiglu_forward("t", M, F, ebuf_at(&u, ou), ebuf_at(&h, oo)));
    ELEM_SAME_BITS(what, bw, 3, h3c_swiglu_backward("t", M, F, ebuf_at(&u, ou), pdh, pdu, NULL));
    /* with du rounded to BF16 in the same pass: the same du, and du_bf16 = round_bf16(du) */
    ELEM_SAME_BITS(what, bwr, 4, h3c_swiglu_backward("t", M, F, ebuf_at(&u, ou), pdh, pdu, ebuf_at(&dub, oo)));
    CHECK_OK(h3c_round_bf16("t", M * 2 * F, pdu, ebuf_at(&r, oo)));
    h3s_tensor a = gdown(&dub.dev), b = gdown(&r.dev);
    CHECK(h3t_bitwise_equal(&a, &b), "%s: du_bf16 is du rounded to BF16", what);
    h3s_tensor_free(&a), h3s_tensor_free(&b);
    /* the copy alone (du NULL, as the block runs when the gate/up linear reads only the copy): the same copy */
    ebuf dub1 = ebuf_new(H3S_BF16, M * 2 * F, 0, 0);
    ebuf *bw1[] = {&u, &dh, &dub1};
    ELEM_SAME_BITS(what, bw1, 3, h3c_swiglu_backward("t", M, F, ebuf_at(&u, ou), pdh, NULL, ebuf_at(&dub1, oo)));
    a = gdown(&dub1.dev), b = gdown(&r.dev);
    CHECK(h3t_bitwise_equal(&a, &b), "%s: du_bf16 without du is du rounded to BF16", what);
    h3s_tensor_free(&a), h3s_tensor_free(&b);
    ebuf_free(&dub1);
    ebuf_free(&u), ebuf_free(&h), ebuf_free(&dh), ebuf_free(&du), ebuf_free(&dub), ebuf_free(&r);
}

/* gate chunk 5 of 6 (gate_off = 5 H) or, with C = 3, chunk 1 */
static void elem_residual(int64_t M, int64_t H, int with_table, int64_t C, int64_t o1, int64_t ot, int inplace) {
    char what[160];
    snprintf(what, sizeof what, "residual M=%lld H=%lld table %d C=%lld offsets %lld %lld in place %d", (long long)M,
             (long long)H, with_table, (long long)C, (long long)o1, (long long)ot, inplace);
    const int64_t R = 4, ld = C * H, gate_off = (C - 1) * H;
    ebuf r = ebuf_new(H3S_BF16, M * H, 211, 1), y = ebuf_new(H3S_BF16, M * H, 212, 1);
    ebuf out = ebuf_new(H3S_BF16, M * H, 0, 0), table = ebuf_new(H3S_BF16, R * ld, 213, 1);
    ebuf dout = ebuf_new(H3S_F32, M * H, 214, 1), dr = ebuf_new(H3S_F32, M * H, 0, 0),
         dy = ebuf_new(H3S_F32, M * H, 0, 0);
    h3s_tensor idx_h = rand_index(M, R, 215), idx_d = gup(&idx_h);
    const void *T = with_table ? ebuf_at(&table, ot) : NULL;
    const int64_t *I = with_table ? (const int64_t *)idx_d.data : NULL;
    void *o = inplace ? ebuf_at(&r, o1) : ebuf_at(&out, o1);
    ebuf *fw[] = {&r, &y, &out, &table}, *bw[] = {&dout, &dr, &dy, &table};
    ELEM_SAME_BITS(what, fw, 4,
                   h3c_residual_forward("t", M, H, ebuf_at(&r, o1), ebuf_at(&y, o1), T, I, R, ld, gate_off, o));
    /* dr and dy, then dy alone written over dout (the wrappers allow dr or dy to alias dout) */
    float *g = (float *)ebuf_at(&dout, o1);
    ELEM_SAME_BITS(what, bw, 4,
                   h3c_residual_backward_rows("t", M, H, T, I, R, ld, gate_off, g, (float *)ebuf_at(&dr, o1),
                                              (float *)ebuf_at(&dy, o1), NULL));
    ELEM_SAME_BITS(what, bw, 4, h3c_residual_backward_rows("t", M, H, T, I, R, ld, gate_off, g, NULL, g, NULL));
    /* with dy rounded to BF16 in the same pass: dr and dy unchanged, the copy is round_bf16(dy) */
    ebuf dyb = ebuf_new(H3S_BF16, M * H, 0, 0), rr = ebuf_new(H3S_BF16, M * H, 0, 0);
    ebuf *bwr[] = {&dout, &dr, &dy, &dyb};
    float *pdy = (float *)ebuf_at(&dy, o1);
    ELEM_SAME_BITS(what, bwr, 4,
                   h3c_residual_backward_rows("t", M, H, T, I, R, ld, gate_off, g, (float *)ebuf_at(&dr, o1), pdy,
                                              ebuf_at(&dyb, o1)));
    CHECK_OK(h3c_round_bf16("t", M * H, pdy, ebuf_at(&rr, o1)));
    h3s_tensor a = gdown(&dyb.dev), b = gdown(&rr.dev);
    CHECK(h3t_bitwise_equal(&a, &b), "%s: dy_bf16 is dy rounded to BF16", what);
    h3s_tensor_free(&a), h3s_tensor_free(&b);
    /* the copy alone (dy NULL, as the block runs when the branch's linear reads only the copy): the same copy, the
     * same dr */
    ebuf dyb1 = ebuf_new(H3S_BF16, M * H, 0, 0);
    ebuf *bw1[] = {&dout, &dr, &dyb1};
    ELEM_SAME_BITS(what, bw1, 3,
                   h3c_residual_backward_rows("t", M, H, T, I, R, ld, gate_off, g, (float *)ebuf_at(&dr, o1), NULL,
                                              ebuf_at(&dyb1, o1)));
    a = gdown(&dyb1.dev), b = gdown(&rr.dev);
    CHECK(h3t_bitwise_equal(&a, &b), "%s: dy_bf16 without dy is dy rounded to BF16", what);
    h3s_tensor_free(&a), h3s_tensor_free(&b);
    ebuf_free(&dyb1);
    ebuf_free(&dyb), ebuf_free(&rr);
    ebuf_free(&r), ebuf_free(&y), ebuf_free(&out), ebuf_free(&table), ebuf_free(&dout), ebuf_free(&dr);
    ebuf_free(&dy);
    h3s_tensor_free(&idx_h);
    gfree(&idx_d);
}

static void elem_rope(int64_t S, int64_t B, int64_t heads, int64_t D, int64_t F, int64_t oi, int64_t ot) {
    const int64_t M = S * B, R = 6 * F, W = heads * D;
    ebuf c = ebuf_new(H3S_F32, S * R, 221, 1), sn = ebuf_new(H3S_F32, S * R, 222, 1);
    ebuf x = ebuf_new(H3S_BF16, M * W, 223, 1), y = ebuf_new(H3S_BF16, M * W, 0, 0);
    ebuf g = ebuf_new(H3S_F32, M * W, 224, 1), dx = ebuf_new(H3S_F32, M * W, 0, 0);
    const float *ct = (const float *)ebuf_at(&c, ot), *st = (const float *)ebuf_at(&sn, ot);
    for (int inplace = 0; inplace < 2; inplace++) {
        char what[160];
        snprintf(what, sizeof what, "rope S=%lld B=%lld heads=%lld D=%lld F=%lld offsets %lld %lld in place %d",
                 (long long)S, (long long)B, (long long)heads, (long long)D, (long long)F, (long long)oi, (long long)ot,
                 inplace);
        ebuf *fw[] = {&c, &sn, &x, &y}, *bw[] = {&c, &sn, &g, &dx};
        void *xi = ebuf_at(&x, oi), *gi = ebuf_at(&g, oi);
        ELEM_SAME_BITS(what, fw, 4,
                       h3c_rope_apply("t", 0, M, S, heads, D, R, ct, st, xi, inplace ? xi : ebuf_at(&y, oi)));
        ELEM_SAME_BITS(what, bw, 4,
                       h3c_rope_apply("t", 1, M, S, heads, D, R, ct, st, gi, inplace ? gi : ebuf_at(&dx, oi)));
    }
    ebuf_free(&c), ebuf_free(&sn), ebuf_free(&x), ebuf_free(&y), ebuf_free(&g), ebuf_free(&dx);
}

static void elem_add_round(int64_t n, int64_t oa, int64_t oo) {
    char what[160];
    snprintf(what, sizeof what, "grad_add / round_bf16 n=%lld offsets %lld %lld", (long long)n, (long long)oa,
             (long long)oo);
    ebuf a = ebuf_new(H3S_F32, n, 231, 1), b = ebuf_new(H3S_F32, n, 232, 1), o = ebuf_new(H3S_F32, n, 0, 0);
    ebuf c = ebuf_new(H3S_F32, n, 233, 1), r = ebuf_new(H3S_BF16, n, 0, 0);
    ebuf *ab[] = {&a, &b, &o}, *abc[] = {&a, &b, &c, &o}, *rb[] = {&a, &r};
    const float *pa = (const float *)ebuf_at(&a, oa), *pb = (const float *)ebuf_at(&b, oo);
    const float *pc = (const float *)ebuf_at(&c, oa);
    float *po = (float *)ebuf_at(&o, oo);
    ELEM_SAME_BITS(what, ab, 3, h3c_add_f32("t", n, pa, pb, NULL, po));
    ELEM_SAME_BITS(what, ab, 3, h3c_add_f32("t", n, pa, pb, NULL, (float *)pa)); /* in place over a */
    ELEM_SAME_BITS(what, abc, 4, h3c_add_f32("t", n, pa, pb, pc, po));
    ELEM_SAME_BITS(what, abc, 4, h3c_add_f32("t", n, pa, pb, pc, (float *)pa)); /* in place over a */
    ELEM_SAME_BITS(what, rb, 2, h3c_round_bf16("t", n, pa, ebuf_at(&r, oo)));
    /* (a + b) + c in one pass: the bits of two passes */
    ebuf_reset(&o);
    CHECK_OK(h3c_add_f32("t", n, pa, pb, NULL, po));
    CHECK_OK(h3c_add_f32("t", n, po, pc, NULL, po));
    h3s_tensor two = gdown(&o.dev);
    CHECK_OK(h3c_add_f32("t", n, pa, pb, pc, po));
    h3s_tensor one = gdown(&o.dev);
    CHECK(h3t_bitwise_equal(&one, &two), "%s: (a + b) + c in one pass equals two passes", what);
    h3s_tensor_free(&one), h3s_tensor_free(&two);
    ebuf_free(&a), ebuf_free(&b), ebuf_free(&c), ebuf_free(&o), ebuf_free(&r);
}

static void test_elem_rows(void) {
    printf("row kernels against the one-thread-per-element reference\n");
    /* swiglu: production ffn, then F and offsets that pick vector widths 8, 4, 2 and 1 */
    elem_swiglu(SZ(925, 3), SZ(14336, 96), 0, 0, 0);
    const int64_t sw[][3] = {{96, 0, 0}, {100, 0, 0}, {6, 0, 0},  {7, 0, 0},
                             {96, 1, 0}, {96, 0, 1},  {96, 2, 2}, {96, 4, 0}};
    for (int i = 0; i < 8; i++)
        elem_swiglu(7, sw[i][0], sw[i][1], sw[i][2], 0);
    elem_swiglu(8, 8192, 0, 0, 1);  /* vector width 8 */
    elem_swiglu(64, 1024, 1, 0, 1); /* misaligned: width 1 */
    /* residual: production hidden, then H 40 (8), 12 with gate offset 60 (4), 6 (2), 13 (1), misaligned views */
    for (int t = 0; t < 2; t++) {
        elem_residual(SZ(925, 4), SZ(5376, 40), t, 6, 0, 0, 0);
        elem_residual(9, 40, t, 6, 0, 0, 1);
        elem_residual(9, 12, t, 6, 0, 0, 0);
        elem_residual(9, 6, t, 3, 0, 0, 0);
        elem_residual(9, 13, t, 6, 0, 0, 0);
        elem_residual(9, 40, t, 6, 1, 0, 0);
        elem_residual(9, 40, t, 6, 2, 0, 1);
        elem_residual(9, 40, t, 6, 0, 3, 0);
    }
    /* rope: production heads, then pair and pass-through widths that pick 8, 4, 2 and 1 */
    elem_rope(SZ(925, 4), 1, SZ(56, 3), 128, 16, 0, 0);
    const int64_t rp[][3] = {{3, 128, 16}, {2, 32, 2}, {2, 12, 2}, {1, 128, 21}, {2, 64, 8}, {4, 40, 4}, {2, 6, 1}};
    for (int i = 0; i < 7; i++) {
        elem_rope(4, 2, rp[i][0], rp[i][1], rp[i][2], 0, 0);
        elem_rope(4, 2, rp[i][0], rp[i][1], rp[i][2], 1, 0);
        elem_rope(4, 2, rp[i][0], rp[i][1], rp[i][2], 2, 1);
    }
    /* grad_add and round_bf16: production sizes, tails of every length, misaligned views */
    elem_add_round(SZ(925 * 14336, 4099), 0, 0);
    const int64_t ar[][3] = {{1, 0, 0}, {7, 0, 0}, {9, 0, 0}, {561, 0, 0}, {4099, 1, 0}, {4099, 0, 1}, {4099, 4, 2}};
    for (int i = 0; i < 7; i++)
        elem_add_round(ar[i][0], ar[i][1], ar[i][2]);
    h3c_elem_force_reference(0);
}

int main(void) {
    gpu_require();
    double t0 = gpu_now();
    test_linear(H3S_BF16, 330, H3S_GRAD_OPERANDS_BF16);
    test_linear(H3S_BF16, 328, H3S_GRAD_OPERANDS_BF16);
    test_linear(H3S_BF16, 328, H3S_GRAD_OPERANDS_SPLIT);
    test_linear(H3S_F32, 330, H3S_GRAD_OPERANDS_BF16);
    test_sgemm_configs();
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16));
    test_rmsnorm(1, 1, H3S_BF16);
    test_rmsnorm(1, 0, H3S_BF16);
    test_rmsnorm(0, 1, H3S_F32);
    const int64_t norm_rows[] = {1, 3, 5, 12, 13};
    for (int i = 0; i < 5; i++)
        test_norm_all(norm_rows[i]);
    test_norm_batch();
    test_head_rmsnorm();
    test_rope();
    const attn_case cases[] = {
        {2, SZ(150, 20), SZ(3, 2), SZ(128, 16), 1, 1},
        {1, SZ(97, 11), SZ(2, 1), SZ(40, 8), 0, 0},
        {3, SZ(70, 9), 2, SZ(64, 32), 1, 0},
        {1, SZ(300, 40), SZ(2, 1), 128, 0, 1},
    };
    for (int i = 0; i < 4; i++)
        test_attention_case(&cases[i]);
    test_attention_batch();
    test_attention_plan_cache();
    test_attention_padding(64);
    test_attention_padding(128);
    test_attention_fwd_ws();
    test_residual(1);
    test_residual(0);
    test_swiglu();
    test_adaln();
    test_timestep();
    test_rows_and_add();
    test_elem_rows();
    printf("elapsed %.2f s\n", gpu_now() - t0);
    return h3t_finish("test_gpu_ops");
}

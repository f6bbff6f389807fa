/* The strict CUDA GEMM at the MiniMax-H3 shapes:
 *   - row invariance: for M in {1, 2, 7, 64, 925, 4253, 8349}, rows [r0, r0 + M) of x computed
 *     alone give the bits those rows get in the M = 8349 run (y of the forward and dx of the
 *     backward), at r0 = 0 and at an offset that puts them elsewhere in their 128-row tiles,
 *     on 5376->7168, 7168->5376, 5376->28672 and 14336->5376;
 *   - the canonical fold of dw: dw over 8349 rows equals the ascending-tile fold (on the host,
 *     in FP32) of the dw of each 256-row tile computed alone, and a 512-row dw on each H3 shape
 *     equals fl(dw(tile 0) + dw(tile 1));
 *   - repeat: the same call twice gives the same bits.
 * H3S_GPU_TEST_SMALL=1 runs scaled-down shapes. */
#include "gpu_util.h"

#define MAXM 8349

static void row_invariance(int64_t K, int64_t N, int small) {
    const int64_t Ms[] = {1, 2, 7, 64, 925, 4253, MAXM};
    const int64_t MM = small ? 700 : MAXM;
    double t0 = gpu_now();
    h3s_tensor xd = gdev2(H3S_BF16, MM, K), wd = gdev2(H3S_BF16, N, K), bd = gdev1(H3S_BF16, N);
    h3s_tensor dyd = gdev2(H3S_F32, MM, N);
    gfill(&xd, 1, 1.0f);
    gfill(&wd, 2, 1.0f / sqrtf((float)K));
    gfill(&bd, 3, 0.1f);
    gfill(&dyd, 4, 1.0f);
    h3s_tensor yd = gdev2(H3S_BF16, MM, N), dxd = gdev2(H3S_F32, MM, K);
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, NULL, NULL));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd);
    /* repeat */
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, NULL, NULL));
    CHECK(gequal(&yd, &y) && gequal(&dxd, &dx), "%lld->%lld repeat", (long long)K, (long long)N);
    int bad = 0, runs = 0;
    for (int i = 0; i < 7; i++) {
        int64_t M = Ms[i];
        if (M > MM) continue;
        const int64_t offsets[2] = {0, (MM - M) / 2 + 3 > MM - M ? MM - M : (MM - M) / 2 + 3};
        for (int o = 0; o < 2; o++) {
            int64_t r0 = offsets[o];
            if (o == 1 && r0 == 0) continue;
            h3s_tensor xv = grows(&xd, r0, M), dyv = grows(&dyd, r0, M);
            h3s_tensor ys = gdev2(H3S_BF16, M, N), dxs = gdev2(H3S_F32, M, K);
            CHECK_OK(h3s_linear_forward(&xv, &wd, &bd, &ys));
            CHECK_OK(h3s_linear_backward(&xv, &wd, &dyv, &dxs, NULL, NULL));
            h3s_tensor yh = gdown(&ys), dxh = gdown(&dxs);
            int ok = h3t_rows_equal(&yh, 0, &y, r0, M) && h3t_rows_equal(&dxh, 0, &dx, r0, M);
            CHECK(ok, "%lld->%lld: rows [%lld, %lld) alone differ from the M = %lld run", (long long)K, (long long)N,
                  (long long)r0, (long long)(r0 + M), (long long)MM);
            bad += !ok;
            runs++;
            gfree(&ys), gfree(&dxs), h3s_tensor_free(&yh), h3s_tensor_free(&dxh);
        }
    }
    printf("  %5lld -> %5lld: %d row-subset runs (y and dx), %d differ; %.2f s\n", (long long)K, (long long)N, runs,
           bad, gpu_now() - t0);
    if (!small) {
        /* informational: median of 3 timed calls at M = 8349 (host clock around a stream sync) */
        h3s_tensor dwd = gdev2(H3S_F32, N, K);
        double tf[3], tdx[3], tdw[3];
        for (int rep = 0; rep < 3; rep++) {
            double a = gpu_now();
            CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
            CHECK_OK(h3s_cuda_sync());
            double b = gpu_now();
            CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, NULL, NULL));
            CHECK_OK(h3s_cuda_sync());
            double c = gpu_now();
            CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, NULL, &dwd, NULL));
            CHECK_OK(h3s_cuda_sync());
            tf[rep] = b - a, tdx[rep] = c - b, tdw[rep] = gpu_now() - c;
        }
        double flop = 2.0 * (double)MM * (double)K * (double)N;
#define MED3(v)                                                                                                        \
    ((v)[0] > (v)[1] ? ((v)[1] > (v)[2] ? (v)[1] : ((v)[0] > (v)[2] ? (v)[2] : (v)[0]))                                \
                     : ((v)[0] > (v)[2] ? (v)[0] : ((v)[1] > (v)[2] ? (v)[2] : (v)[1])))
        printf("    M=%d timing (median of 3): forward %.2f ms (%.0f TFLOP/s), dx %.2f ms (%.0f TFLOP/s), "
               "dw %.2f ms (%.0f TFLOP/s)\n",
               MAXM, 1e3 * MED3(tf), flop / MED3(tf) * 1e-12, 1e3 * MED3(tdx), flop / MED3(tdx) * 1e-12,
               1e3 * MED3(tdw), flop / MED3(tdw) * 1e-12);
#undef MED3
        gfree(&dwd);
    }
    h3s_tensor_free(&y), h3s_tensor_free(&dx);
    gfree(&xd), gfree(&wd), gfree(&bd), gfree(&dyd), gfree(&yd), gfree(&dxd);
}

/* dw of rows [r0, r0 + n) on the device, downloaded. */
static h3s_tensor dw_rows(const h3s_tensor *xd, const h3s_tensor *wd, const h3s_tensor *dyd, int64_t r0, int64_t n) {
    h3s_tensor xv = grows(xd, r0, n), dyv = grows(dyd, r0, n);
    h3s_tensor dwd = gdev2(H3S_F32, wd->shape[0], wd->shape[1]);
    CHECK_OK(h3s_linear_backward(&xv, wd, &dyv, NULL, &dwd, NULL));
    h3s_tensor dw = gdown(&dwd);
    gfree(&dwd);
    return dw;
}

/* A BF16 dw (the fold rounded as it is stored, or, on the mma.sync path and with split operands, the F32 fold rounded
 * after) is bit for bit the F32 dw of the same rows rounded to nearest even on the host. */
static void dw_bf16_check(const h3s_tensor *xd, const h3s_tensor *wd, const h3s_tensor *dyd, const h3s_tensor *f32,
                          const char *what) {
    h3s_tensor dwd = gdev2(H3S_BF16, wd->shape[0], wd->shape[1]);
    CHECK_OK(h3s_linear_backward(xd, wd, dyd, NULL, &dwd, NULL));
    h3s_tensor got = gdown(&dwd), want = h3t_alloc2(H3S_BF16, wd->shape[0], wd->shape[1]);
    CHECK_OK(h3s_tensor_convert(f32, &want));
    int64_t differ = 0;
    for (int64_t i = 0; i < h3s_tensor_numel(&want); i++)
        differ += ((const uint16_t *)got.data)[i] != ((const uint16_t *)want.data)[i];
    printf("  dw in BF16 (%s, M=%lld %lld->%lld): %lld of %lld elements differ from the F32 dw rounded\n", what,
           (long long)xd->shape[0], (long long)wd->shape[1], (long long)wd->shape[0], (long long)differ,
           (long long)h3s_tensor_numel(&want));
    CHECK(differ == 0, "BF16 dw (%s): %lld elements differ from the F32 dw rounded", what, (long long)differ);
    h3s_tensor_free(&got), h3s_tensor_free(&want);
    gfree(&dwd);
}

/* The BF16 dw on a shape that the Hopper kernels cannot take (K, N not multiples of 8: the mma.sync path) and on one
 * they take, with split gradient operands (F32 fold in a workspace, then rounded). */
static void dw_bf16_paths(void) {
    const int64_t M = 700, K = 30, N = 20;
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    gfill(&xd, 21, 1.0f);
    gfill(&wd, 22, 0.05f);
    gfill(&dyd, 23, 1.0f);
    h3s_tensor full = dw_rows(&xd, &wd, &dyd, 0, M);
    dw_bf16_check(&xd, &wd, &dyd, &full, "mma.sync path");
    h3s_tensor_free(&full);
    gfree(&xd), gfree(&wd), gfree(&dyd);
    const int64_t K2 = 72, N2 = 40;
    h3s_tensor x2 = gdev2(H3S_BF16, M, K2), w2 = gdev2(H3S_BF16, N2, K2), dy2 = gdev2(H3S_F32, M, N2);
    gfill(&x2, 24, 1.0f);
    gfill(&w2, 25, 0.05f);
    gfill(&dy2, 26, 1.0f);
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_SPLIT));
    h3s_tensor f2 = dw_rows(&x2, &w2, &dy2, 0, M);
    dw_bf16_check(&x2, &w2, &dy2, &f2, "split operands");
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16));
    h3s_tensor_free(&f2);
    gfree(&x2), gfree(&w2), gfree(&dy2);
}

/* dw(M rows) == host FP32 fold, in ascending tile order, of dw(each 256-row tile alone). */
static void dw_fold(int64_t M, int64_t K, int64_t N) {
    double t0 = gpu_now();
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    gfill(&xd, 11, 1.0f);
    gfill(&wd, 12, 0.05f);
    gfill(&dyd, 13, 1.0f);
    h3s_tensor full = dw_rows(&xd, &wd, &dyd, 0, M);
    h3s_tensor fold = h3t_alloc2(H3S_F32, N, K);
    float *fv = (float *)fold.data;
    int64_t tiles = 0;
    for (int64_t t0r = 0; t0r < M; t0r += H3S_FOLD_TILE, tiles++) {
        int64_t n = M - t0r < H3S_FOLD_TILE ? M - t0r : H3S_FOLD_TILE;
        h3s_tensor part = dw_rows(&xd, &wd, &dyd, t0r, n);
        const float *pv = (const float *)part.data;
        for (int64_t i = 0; i < N * K; i++)
            fv[i] = t0r == 0 ? pv[i] : fv[i] + pv[i];
        h3s_tensor_free(&part);
    }
    CHECK(h3t_bitwise_equal(&full, &fold), "dw over %lld rows (%lld -> %lld) is the ascending fold of its %lld tiles",
          (long long)M, (long long)K, (long long)N, (long long)tiles);
    dw_bf16_check(&xd, &wd, &dyd, &full, "fold rounded as stored");
    printf("  dw fold: M=%lld %lld->%lld over %lld tiles: %s; %.2f s\n", (long long)M, (long long)K, (long long)N,
           (long long)tiles, h3t_bitwise_equal(&full, &fold) ? "bitwise equal" : "DIFFERENT", gpu_now() - t0);
    h3s_tensor_free(&full), h3s_tensor_free(&fold);
    gfree(&xd), gfree(&wd), gfree(&dyd);
}

/* A BF16 dw with NaN and infinities in it (dy carries a NaN and two infinities): the fold's epilogue takes another
 * rounding route for a thread holding a value that is not finite; every element, NaN payloads included, must still
 * be the F32 dw rounded on the host.  At 300 rows (two fold tiles) and at 77 (one tile, no fold). */
static void dw_bf16_nonfinite(int64_t M) {
    const int64_t K = 264, N = 136;
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    gfill(&xd, 31, 1.0f);
    gfill(&wd, 32, 0.05f);
    gfill(&dyd, 33, 1.0f);
    h3s_tensor dyh = gdown(&dyd);
    float *v = (float *)dyh.data;
    v[5 * N + 3] = NAN;
    v[7 * N + 10] = INFINITY;
    v[(M - 1) * N + 20] = -INFINITY;
    CHECK_OK(h3s_cuda_upload(&dyh, &dyd));
    h3s_tensor full = dw_rows(&xd, &wd, &dyd, 0, M);
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < N * K; i++)
        nonfinite += !isfinite(((const float *)full.data)[i]);
    CHECK(nonfinite >= 2 * K, "the F32 dw has its NaN and infinite rows (%lld values not finite)",
          (long long)nonfinite);
    dw_bf16_check(&xd, &wd, &dyd, &full, "NaN and infinities");
    h3s_tensor_free(&full), h3s_tensor_free(&dyh);
    gfree(&xd), gfree(&wd), gfree(&dyd);
}

/* h3s_linear_backward_rounded: given dy's BF16 rounding (h3s_cuda_round_bf16), dx and dw (F32 and BF16) are the bits of
 * the plain backward, which rounds dy itself; bad dy_bf16 is refused. */
static void dy_rounded(int64_t M, int64_t K, int64_t N) {
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    h3s_tensor dybd = gdev2(H3S_BF16, M, N);
    gfill(&xd, 61, 1.0f), gfill(&wd, 62, 1.0f / sqrtf((float)K)), gfill(&dyd, 63, 1.0f);
    CHECK_OK(h3s_cuda_round_bf16(&dyd, &dybd));
    h3s_tensor dxd = gdev2(H3S_F32, M, K), dwd = gdev2(H3S_F32, N, K), dwbd = gdev2(H3S_BF16, N, K);
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, &dwd, NULL));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, NULL, &dwbd, NULL));
    h3s_tensor dx = gdown(&dxd), dw = gdown(&dwd), dwb = gdown(&dwbd);
    gpoison(&dxd), gpoison(&dwd), gpoison(&dwbd);
    CHECK_OK(h3s_linear_backward_rounded(&xd, &wd, &dyd, &dybd, &dxd, &dwd, NULL));
    CHECK_OK(h3s_linear_backward_rounded(&xd, &wd, &dyd, &dybd, NULL, &dwbd, NULL));
    CHECK(gequal(&dxd, &dx) && gequal(&dwd, &dw) && gequal(&dwbd, &dwb),
          "linear_backward_rounded M=%lld %lld->%lld: dx, dw and BF16 dw are the plain backward's bits", (long long)M,
          (long long)K, (long long)N);
    h3s_tensor xf = gdev2(H3S_F32, M, K), wf = gdev2(H3S_F32, N, K), dybad = gdev2(H3S_BF16, M, N + 8);
    CHECK(h3s_linear_backward_rounded(&xf, &wf, &dyd, &dybd, &dxd, NULL, NULL) != H3S_OK,
          "linear_backward_rounded: dy_bf16 with the F32 variant is refused");
    CHECK(h3s_linear_backward_rounded(&xd, &wd, &dyd, &dybad, &dxd, NULL, NULL) != H3S_OK,
          "linear_backward_rounded: dy_bf16 of the wrong shape is refused");
    CHECK(h3s_linear_backward_rounded(&xd, &wd, &dyd, &dybd, NULL, NULL, NULL) == H3S_OK,
          "linear_backward_rounded: no output is a no-op");
    /* dy_bf16 alone (dy NULL): the same bits where the BF16 operands read nothing else; refused with split operands
     * and with db, which sums F32 dy */
    CHECK(h3s_linear_backward_bf16_dy_only(&xd, &wd), "linear_backward_bf16_dy_only: 0 on a BF16 wgmma shape");
    gpoison(&dxd), gpoison(&dwd), gpoison(&dwbd);
    CHECK_OK(h3s_linear_backward_rounded(&xd, &wd, NULL, &dybd, &dxd, &dwd, NULL));
    CHECK_OK(h3s_linear_backward_rounded(&xd, &wd, NULL, &dybd, NULL, &dwbd, NULL));
    CHECK(gequal(&dxd, &dx) && gequal(&dwd, &dw) && gequal(&dwbd, &dwb),
          "linear_backward_rounded without dy M=%lld %lld->%lld: dx, dw and BF16 dw are the plain backward's bits",
          (long long)M, (long long)K, (long long)N);
    h3s_tensor dbd = gdev1(H3S_F32, N);
    CHECK(h3s_linear_backward_rounded(&xd, &wd, NULL, &dybd, &dxd, NULL, &dbd) != H3S_OK,
          "linear_backward_rounded: db without dy is refused");
    gfree(&dbd);
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_SPLIT));
    CHECK(!h3s_linear_backward_bf16_dy_only(&xd, &wd), "linear_backward_bf16_dy_only: 1 with split operands");
    CHECK(h3s_linear_backward_rounded(&xd, &wd, NULL, &dybd, &dxd, NULL, NULL) != H3S_OK,
          "linear_backward_rounded: dy NULL with split operands is refused");
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16));
    CHECK(!h3s_linear_backward_bf16_dy_only(&xf, &wf), "linear_backward_bf16_dy_only: 1 for the F32 variant");
    h3s_tensor_free(&dx), h3s_tensor_free(&dw), h3s_tensor_free(&dwb);
    gfree(&xd), gfree(&wd), gfree(&dyd), gfree(&dybd), gfree(&dxd), gfree(&dwd), gfree(&dwbd);
    gfree(&xf), gfree(&wf), gfree(&dybad);
}

int main(void) {
    gpu_require();
    const int small = gpu_small();
    const int64_t shapes[4][2] = {{5376, 7168}, {7168, 5376}, {5376, 28672}, {14336, 5376}};
    const int64_t small_shapes[2][2] = {{136, 200}, {200, 72}};
    double t0 = gpu_now();
    printf("row invariance, M in {1, 2, 7, 64, 925, 4253, %d}\n", MAXM);
    if (small)
        for (int i = 0; i < 2; i++)
            row_invariance(small_shapes[i][0], small_shapes[i][1], 1);
    else
        for (int i = 0; i < 4; i++)
            row_invariance(shapes[i][0], shapes[i][1], 0);
    printf("canonical dw fold\n");
    dw_fold(small ? 600 : MAXM, small ? 72 : 384, small ? 40 : 256);
    if (!small)
        for (int i = 0; i < 4; i++)
            dw_fold(512, shapes[i][0], shapes[i][1]);
    printf("dy given rounded to BF16\n");
    dy_rounded(small ? 300 : 925, small ? 136 : 5376, small ? 200 : 7168);
    dy_rounded(77, 136, 200);
    printf("BF16 dw on the other paths\n");
    dw_bf16_paths();
    dw_bf16_nonfinite(300);
    dw_bf16_nonfinite(77);
    printf("elapsed %.2f s\n", gpu_now() - t0);
    return h3t_finish("test_gpu_linear");
}

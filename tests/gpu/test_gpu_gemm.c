/* The Hopper GEMM family (src/cuda/linear.cu): every configuration the dispatcher can pick gives
 * the same bits for the same rows.
 *
 * For each MiniMax-H3 shape (K -> N: 5376->7168, 7168->5376, 5376->28672, 14336->5376 and the
 * AdaLN projection's 2688->32256) the reference is the forward y and the dgrad dx of all
 * MREF = 33396 rows computed by configuration 0.  Then, for M in {1, 2, 7, 12, 16, 17, 33, 64, 925, 1133,
 * 4253, 8349, 33396}, rows [r0, r0 + M) are computed alone by every configuration (forced; 6 and 7 up to 4253) and
 * by the dispatcher's own choice, at an offset r0 that puts them elsewhere in their tiles, and
 * compared element by element with the reference rows.  The total number of differing elements
 * is printed (and written to $H3S_GEMM_INVARIANCE_JSON when set); it must be 0.  A check that
 * the comparison can fail: the split-operand dgrad (a different, documented precision) must
 * differ from the BF16-operand one somewhere.
 *
 * The AdaLN shape's dgrad folds its reduction every H3C_DGRAD_FOLD_TILE = 1024 rows (h3c_gemm_dgrad_folds):
 * configuration 0 (the reference), 2, 8, 9, 10 and the dispatcher at M > 64 add the tile partials in registers with
 * the overlapped fold's schedule, configuration 1 with the plain one; configurations 3, 6, 7 and the dispatcher at
 * M <= 64 compute every partial as a work item of its own (64 x 64 tiles, or 64 x 16 transposed ones) and add them in
 * a second pass; the comparison covers all of them.
 *
 * Configurations 8 and 9 are bands: the tile-rows of configuration 0 (8) or 5 (9, transposed) that fill whole waves
 * of the device, then the rows left in the narrower tiles of 1 or 4, a second launch; at small size they run on
 * 4096 -> 4096 at M = 1133, where both split (h3c_gemm_band_rows), and the full size checks that 9 splits the
 * 14336 -> 5376 dgrad at M = 925.  Configuration 10 is the short band: 0's whole waves, then the rows left (at most
 * 64) in their small-M configuration (2, 3, 6 or 7).  At small size it splits on 4096 -> 4096 at M = 1030 (6 rows
 * left: configuration 6) and 1060 (36: 3), and on 256 -> 8704 (forward) and 8704 -> 256 (dgrad) at M = 394 (10: 7)
 * and 424 (40: 2); at full size with 29 rows left on 5376 -> 7168 (forward) and 7168 -> 5376 (dgrad) at M = 4253
 * (3), and on 5376 -> 28672, 2688 -> 32256 (forward) and 14336 -> 5376 (dgrad) at M = 925 and 4253 (2).
 *
 * Configuration 11 is configuration 0 on 2-CTA clusters sharing the B block by multicast (the dispatcher's instead of
 * 0 from 16384 rows on): a cluster's two CTAs compute vertically adjacent tiles, and with an odd tile-row count the
 * last cluster's second tile lies past the rows and is stored nowhere.  Configuration 12 runs 192 x 192 tiles on three
 * consumer warpgroups (the dispatcher's where its estimate wins by 3%): its tile-rows and tile-columns end past P and
 * Q at most shapes, where the bulk stores clip.
 *
 * Configurations 4 and 5 compute the transpose (y^T = w x^T, dx^T = w^T dy^T) with M along 160- or 232-column tiles,
 * 6 and 7 along 16-column ones (M <= 16), the folded dgrad's 4 and 5 the transposed register fold; wgrad configuration
 * 9 the transposed overlapped fold (F32 dw; refused for BF16 dw, which the test checks).  Their bits must be the
 * others'.
 *
 * The wgrad of at most 256 rows (one fold tile) runs a configuration without the fold; wgrad_one_tile compares its
 * F32 and BF16 dw with the fold's on every shape.  wgrad_fold_configs compares every fold configuration of the wgrad
 * (the tile shapes, epilogues and schedules of h3c_gemm_force_wgrad) with configuration 0 at M in {257, 1133, 4253}
 * ({257, 700, 1024, 1200} at small size).
 *
 * raster_invariance runs the forward, dgrad and wgrad under other tile rasters and L2 policies (h3c_gemm_raster) and
 * compares them with the default's bits: 4096 -> 4096 at M = 1133 and the folded 512 -> 4096 at M = 12 at small size,
 * 5376 -> 28672 at M = 4253 and 2688 -> 32256 at M = 64 at full size.
 *
 * H3S_GPU_TEST_SMALL=1 runs scaled-down shapes (compute-sanitizer), two of them folded dgrads (64 -> 2048: two whole
 * fold tiles, the last run apart by the overlapped fold; 72 -> 1160: a partial last column tile and fold tile).
 * H3S_GEMM_SHAPES="KxN,..." runs only the listed full-size shapes, in every part (the forward/dgrad configurations
 * and the wgrad's), and H3S_GEMM_MS="M,..." only the listed M in the forward/dgrad part (shorter runs, e.g. the full
 * test in two device calls, scripts/gemm_evidence_run.sh; the JSON lists the shapes run and says whether all were). */
#include "cuda/cuda_internal.h"
#include "gpu_util.h"

/* Number of elements of rows [0, n) of `a` that differ bitwise from rows [rb, rb + n) of `b`. */
static int64_t count_differing(const h3s_tensor *a, const h3s_tensor *b, int64_t rb, int64_t n) {
    const int64_t cols = a->shape[1];
    const size_t es = h3s_dtype_size(a->dtype);
    const unsigned char *pa = (const unsigned char *)a->data, *pb = (const unsigned char *)b->data + rb * cols * es;
    if (memcmp(pa, pb, (size_t)(n * cols) * es) == 0) return 0; /* the common case, at memory speed */
    int64_t bad = 0;
    for (int64_t i = 0; i < n * cols; i++)
        bad += memcmp(pa + i * es, pb + i * es, es) != 0;
    return bad;
}

static int64_t g_total_differing = 0;
static int64_t g_comparisons = 0;

static void shape_invariance(int64_t K, int64_t N, int64_t MREF, const int64_t *Ms, int nM) {
    const double t0 = gpu_now();
    h3s_tensor xd = gdev2(H3S_BF16, MREF, K), wd = gdev2(H3S_BF16, N, K), bd = gdev1(H3S_BF16, N);
    h3s_tensor dyd = gdev2(H3S_F32, MREF, N);
    gfill(&xd, 101, 1.0f);
    gfill(&wd, 102, 1.0f / sqrtf((float)K));
    gfill(&bd, 103, 0.1f);
    gfill(&dyd, 104, 1.0f);
    h3s_tensor yd = gdev2(H3S_BF16, MREF, N), dxd = gdev2(H3S_F32, MREF, K);
    gpoison(&yd), gpoison(&dxd);
    CHECK_OK(h3c_gemm_force_config(0));
    CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &yd));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dxd, NULL, NULL));
    h3s_tensor y = gdown(&yd), dx = gdown(&dxd);
    gfree(&yd), gfree(&dxd);
    int64_t shape_bad = 0, runs = 0;
    for (int i = 0; i < nM; i++) {
        const int64_t M = Ms[i];
        if (M > MREF) continue;
        /* an offset that is no multiple of any tile height, inside the reference rows */
        const int64_t r0 = M == MREF ? 0 : ((MREF - M) / 2 + 3 <= MREF - M ? (MREF - M) / 2 + 3 : MREF - M);
        h3s_tensor xv = grows(&xd, r0, M), dyv = grows(&dyd, r0, M);
        h3s_tensor ys = gdev2(H3S_BF16, M, N), dxs = gdev2(H3S_F32, M, K);
        for (int c = -1; c < h3c_gemm_config_count(); c++) {
            /* the 64 x 16 configurations (6, 7), which the dispatcher takes at M <= 16, up to M = 4253: past it their
             * tile grid reads each weight tile once per 16 rows (2088 times at M = 33396) */
            if ((c == 6 || c == 7) && M > 4253) continue;
            CHECK_OK(h3c_gemm_force_config(c));
            gpoison(&ys), gpoison(&dxs);
            CHECK_OK(h3s_linear_forward(&xv, &wd, &bd, &ys));
            CHECK_OK(h3s_linear_backward(&xv, &wd, &dyv, &dxs, NULL, NULL));
            h3s_tensor yh = gdown(&ys), dxh = gdown(&dxs);
            const int64_t by = count_differing(&yh, &y, r0, M), bx = count_differing(&dxh, &dx, r0, M);
            CHECK(by == 0 && bx == 0,
                  "%lld->%lld M=%lld rows [%lld, +%lld) config %d: %lld y and %lld dx elements differ from the "
                  "reference",
                  (long long)K, (long long)N, (long long)M, (long long)r0, (long long)M, c, (long long)by,
                  (long long)bx);
            shape_bad += by + bx;
            g_comparisons += M * (N + K);
            runs++;
            h3s_tensor_free(&yh), h3s_tensor_free(&dxh);
        }
        gfree(&ys), gfree(&dxs);
    }
    CHECK_OK(h3c_gemm_force_config(-1));
    g_total_differing += shape_bad;
    printf("  %5lld -> %5lld: %lld runs (y and dx; configs 0..%d and the dispatcher), %lld elements differ; %.1f s\n",
           (long long)K, (long long)N, (long long)runs, h3c_gemm_config_count() - 1, (long long)shape_bad,
           gpu_now() - t0);
    h3s_tensor_free(&y), h3s_tensor_free(&dx);
    gfree(&xd), gfree(&wd), gfree(&bd), gfree(&dyd);
}

/* The transposed fold (wgrad configuration 9) writes F32 dw only: with BF16 dw it must refuse.  Returns 1 when the
 * run was the refused one (checked here), 0 when configuration c takes this dw. */
static int refused_bf16_dw(int c, int b16, int64_t M, int64_t N, int64_t K, const h3s_tensor *dyb, const h3s_tensor *xd,
                           h3s_tensor *got) {
    if (c != 9 || !b16) return 0;
    CHECK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb->data, xd->data, got->data, b16) != H3S_OK,
          "wgrad configuration 9 refuses BF16 dw");
    return 1;
}

/* The wgrad of at most 256 rows (one fold tile) runs without the fold (the one-tile configuration): its dw, F32 and
 * BF16, must be the fold's bits.  Forced both ways, with the fold's bulk-store and overlapped configurations, and by
 * the dispatcher at M in {1, 7, 77, 256}; the one-tile configuration is refused at 257 rows. */
static void wgrad_one_tile(int64_t K, int64_t N) {
    const int64_t Ms[] = {1, 7, 77, 256};
    const int64_t MM = 257;
    h3s_tensor xd = gdev2(H3S_BF16, MM, K), dyd = gdev2(H3S_F32, MM, N), dyb = gdev2(H3S_BF16, MM, N);
    gfill(&xd, 301, 1.0f);
    gfill(&dyd, 302, 1.0f);
    CHECK_OK(h3c_round_bf16("test", MM * N, dyd.data, dyb.data));
    int64_t bad = 0;
    for (int b16 = 0; b16 < 2; b16++) {
        const h3s_dtype dt = b16 ? H3S_BF16 : H3S_F32;
        h3s_tensor ref = gdev2(dt, N, K), got = gdev2(dt, N, K);
        for (int i = 0; i < 4; i++) {
            const int64_t M = Ms[i];
            gpoison(&ref);
            CHECK_OK(h3c_gemm_force_wgrad(0));
            CHECK_OK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb.data, xd.data, ref.data, b16));
            h3s_tensor rh = gdown(&ref);
            /* the dispatcher, the one-tile configurations, the overlapped folds and the transposed one (whose
             * reduction of at most four blocks is their last fold tile alone) */
            static const int cs[] = {-1, 1, 5, 7, 8, 9};
            for (int ci = 0; ci < (int)(sizeof cs / sizeof cs[0]); ci++) {
                const int c = cs[ci];
                CHECK_OK(h3c_gemm_force_wgrad(c));
                if (refused_bf16_dw(c, b16, M, N, K, &dyb, &xd, &got)) continue;
                gpoison(&got);
                CHECK_OK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb.data, xd.data, got.data, b16));
                h3s_tensor gh = gdown(&got);
                const int64_t d = count_differing(&gh, &rh, 0, N);
                CHECK(d == 0, "%lld->%lld wgrad (%s dw) M=%lld, %s: %lld elements differ from the fold", (long long)K,
                      (long long)N, b16 ? "bf16" : "f32", (long long)M,
                      c < 0    ? "dispatcher"
                      : c == 1 ? "one tile"
                      : c == 5 ? "one tile, bulk stores"
                      : c == 9 ? "the transposed overlapped fold"
                               : "the overlapped fold",
                      (long long)d);
                bad += d;
                g_comparisons += N * K;
                h3s_tensor_free(&gh);
            }
            h3s_tensor_free(&rh);
        }
        gfree(&ref), gfree(&got);
    }
    h3s_tensor big = gdev2(H3S_F32, N, K);
    for (int c = 1; c <= 5; c += 4) {
        CHECK_OK(h3c_gemm_force_wgrad(c));
        CHECK(h3c_gemm_bf16_wgrad_bf16("test", MM, N, K, dyb.data, xd.data, big.data, 0) != H3S_OK,
              "the one-tile wgrad (configuration %d) refuses %lld rows", c, (long long)MM);
    }
    CHECK_OK(h3c_gemm_force_wgrad(-1));
    g_total_differing += bad;
    printf("  %5lld -> %5lld: wgrad at M in {1, 7, 77, 256}, F32 and BF16 dw, one tile, the "
           "overlapped folds and the dispatcher against the fold: %lld elements differ\n",
           (long long)K, (long long)N, (long long)bad);
    gfree(&big), gfree(&xd), gfree(&dyd), gfree(&dyb);
}

/* Every fold configuration of the wgrad (h3c_gemm_force_wgrad 7, 8, 9 and the dispatcher's choice) gives the
 * fold's bits: dw, F32 and BF16, of M rows against configuration 0's, at M past one fold tile (a partial last tile
 * among them).  Whole buffers are compared first; elements are counted only when they differ. */
static void wgrad_fold_configs(int64_t K, int64_t N, const int64_t *Ms, int nM) {
    const double t0 = gpu_now();
    int64_t MM = 0;
    for (int i = 0; i < nM; i++)
        MM = Ms[i] > MM ? Ms[i] : MM;
    h3s_tensor xd = gdev2(H3S_BF16, MM, K), dyd = gdev2(H3S_F32, MM, N), dyb = gdev2(H3S_BF16, MM, N);
    gfill(&xd, 311, 1.0f);
    gfill(&dyd, 312, 1.0f);
    CHECK_OK(h3c_round_bf16("test", MM * N, dyd.data, dyb.data));
    int64_t bad = 0, runs = 0;
    for (int b16 = 0; b16 < 2; b16++) {
        const h3s_dtype dt = b16 ? H3S_BF16 : H3S_F32;
        h3s_tensor ref = gdev2(dt, N, K), got = gdev2(dt, N, K);
        for (int i = 0; i < nM; i++) {
            const int64_t M = Ms[i];
            gpoison(&ref);
            CHECK_OK(h3c_gemm_force_wgrad(0));
            CHECK_OK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb.data, xd.data, ref.data, b16));
            h3s_tensor rh = gdown(&ref);
            for (int c = -1; c < h3c_gemm_wgrad_config_count(); c++) {
                if (c == 0 || c == 1 || c == 5) continue; /* the reference; the one-tile ones refuse M > 256 */
                if (h3c_gemm_wgrad_config_removed(c)) {
                    CHECK(h3c_gemm_force_wgrad(c) != H3S_OK, "the removed wgrad configuration %d is refused", c);
                    continue;
                }
                CHECK_OK(h3c_gemm_force_wgrad(c));
                if (refused_bf16_dw(c, b16, M, N, K, &dyb, &xd, &got)) continue;
                gpoison(&got);
                CHECK_OK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb.data, xd.data, got.data, b16));
                h3s_tensor gh = gdown(&got);
                const int64_t d = count_differing(&gh, &rh, 0, N);
                CHECK(d == 0, "%lld->%lld wgrad (%s dw) M=%lld, configuration %d: %lld elements differ from the fold",
                      (long long)K, (long long)N, b16 ? "bf16" : "f32", (long long)M, c, (long long)d);
                bad += d, runs++;
                g_comparisons += N * K;
                h3s_tensor_free(&gh);
            }
            h3s_tensor_free(&rh);
        }
        gfree(&ref), gfree(&got);
    }
    CHECK_OK(h3c_gemm_force_wgrad(-1));
    g_total_differing += bad;
    printf(
        "  %5lld -> %5lld: wgrad, the overlapped folds and the dispatcher against the 128 x 192 fold, F32 and BF16 dw, "
        "%lld runs: %lld elements differ; %.1f s\n",
        (long long)K, (long long)N, (long long)runs, (long long)bad, gpu_now() - t0);
    gfree(&xd), gfree(&dyd), gfree(&dyb);
}

/* The raster and L2 hooks (h3c_gemm_raster: tile-rows per group of the grouped tile order, an L2 policy for each
 * operand's copies) change which CTA computes a tile, when, and how long its operands stay in L2, never a result: y,
 * dx and F32 dw of M rows under several settings against the default's, in every forward/dgrad configuration given
 * and the dispatcher (the first of cfgs), and the dispatcher's wgrad (with the first only: forcing a forward/dgrad
 * configuration does not change it).  Also: the hook refuses settings out of range. */
static void raster_invariance(int64_t K, int64_t N, int64_t M, const int *cfgs, int ncfg) {
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), bd = gdev1(H3S_BF16, N);
    h3s_tensor dyd = gdev2(H3S_F32, M, N), dyb = gdev2(H3S_BF16, M, N);
    gfill(&xd, 401, 1.0f);
    gfill(&wd, 402, 1.0f / sqrtf((float)K));
    gfill(&bd, 403, 0.1f);
    gfill(&dyd, 404, 1.0f);
    CHECK_OK(h3c_round_bf16("test", M * N, dyd.data, dyb.data));
    h3s_tensor y = gdev2(H3S_BF16, M, N), dx = gdev2(H3S_F32, M, K), dw = gdev2(H3S_F32, N, K);
    /* group, hint A, hint B; the first is the default */
    static const int set[][3] = {{16, 0, 0}, {1, 0, 0}, {3, 2, 1}, {8, 1, 2}, {64, 2, 2}, {4096, 1, 1}};
    const int nset = (int)(sizeof set / sizeof set[0]);
    int64_t bad = 0, runs = 0;
    for (int ci = 0; ci < ncfg; ci++) {
        const int c = cfgs[ci];
        CHECK_OK(h3c_gemm_force_config(c));
        h3s_tensor yr = {0}, dxr = {0}, dwr = {0};
        for (int k = 0; k < nset; k++) {
            CHECK_OK(h3c_gemm_raster(set[k][0], set[k][1], set[k][2]));
            gpoison(&y), gpoison(&dx), gpoison(&dw);
            CHECK_OK(h3s_linear_forward(&xd, &wd, &bd, &y));
            CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dx, NULL, NULL));
            if (ci == 0) CHECK_OK(h3c_gemm_bf16_wgrad_bf16("test", M, N, K, dyb.data, xd.data, dw.data, 0));
            h3s_tensor yh = gdown(&y), dxh = gdown(&dx), dwh = ci == 0 ? gdown(&dw) : (h3s_tensor){0};
            if (k == 0) {
                yr = yh, dxr = dxh, dwr = dwh;
                continue;
            }
            const int64_t by = count_differing(&yh, &yr, 0, M), bx = count_differing(&dxh, &dxr, 0, M),
                          bw = ci == 0 ? count_differing(&dwh, &dwr, 0, N) : 0;
            CHECK(by == 0 && bx == 0 && bw == 0,
                  "%lld->%lld M=%lld config %d, raster group %d, hints %d/%d: %lld y, %lld dx, %lld dw elements "
                  "differ from the default raster's",
                  (long long)K, (long long)N, (long long)M, c, set[k][0], set[k][1], set[k][2], (long long)by,
                  (long long)bx, (long long)bw);
            bad += by + bx + bw;
            g_comparisons += M * (N + K) + (ci == 0 ? N * K : 0);
            runs++;
            h3s_tensor_free(&yh), h3s_tensor_free(&dxh);
            if (ci == 0) h3s_tensor_free(&dwh);
        }
        h3s_tensor_free(&yr), h3s_tensor_free(&dxr);
        if (ci == 0) h3s_tensor_free(&dwr);
    }
    CHECK_OK(h3c_gemm_raster(16, 0, 0));
    CHECK_OK(h3c_gemm_force_config(-1));
    CHECK(h3c_gemm_raster(0, 0, 0) != H3S_OK && h3c_gemm_raster(4097, 0, 0) != H3S_OK &&
              h3c_gemm_raster(16, 3, 0) != H3S_OK && h3c_gemm_raster(16, 0, -1) != H3S_OK,
          "h3c_gemm_raster refuses a group outside 1..4096 and a hint outside 0..2");
    CHECK_OK(h3c_gemm_raster(16, 0, 0));
    g_total_differing += bad;
    printf("  %5lld -> %5lld: M = %lld, raster groups and L2 hints against the default, %lld runs of y, dx and dw: "
           "%lld elements differ\n",
           (long long)K, (long long)N, (long long)M, (long long)runs, (long long)bad);
    gfree(&xd), gfree(&wd), gfree(&bd), gfree(&dyd), gfree(&dyb), gfree(&y), gfree(&dx), gfree(&dw);
}

/* The GEMMs keep the tensor maps they encode (make_map in src/cuda/linear.cu), by the encoding's arguments: a kept map
 * must be byte for byte the map a fresh encode writes (BF16 and F32), a second lookup with the same arguments must find
 * it, other arguments must not, and turning the cache off must change no result: y and dx of configurations 0, 11, 4
 * and 5 (128 x 256 tiles, clusters, transposed) into two output buffers in turn, encoded fresh against kept maps, with
 * a check that the kept run found its maps.  Also: h3c_gemm_tensor_map refuses bad arguments. */
static void map_cache(int small) {
    h3s_tensor buf = gdev2(H3S_BF16, 256, 512);
    _Alignas(64) unsigned char fresh[2][128], kept1[2][128], kept2[2][128], other[128];
    memset(fresh, 0, sizeof fresh), memset(kept1, 0, sizeof kept1), memset(kept2, 0, sizeof kept2);
    memset(other, 0, sizeof other);
    const int was = h3c_gemm_map_cache(0);
    CHECK(was == 1, "the map cache is on by default (got %d)", was);
    for (int f = 0; f < 2; f++) /* BF16, then F32 elements over the same bytes */
        CHECK_OK(h3c_gemm_tensor_map(buf.data, 256, f ? 224 : 448, f ? 256 : 512, f ? 32 : 64, 64, f, fresh[f]));
    CHECK(h3c_gemm_map_cache(1) == 0, "h3c_gemm_map_cache returns the setting before");
    int found = 1, equal = 1;
    for (int f = 0; f < 2; f++) {
        uint64_t h0, m0, h1, m1, h2, m2;
        h3c_gemm_map_cache_counts(&h0, &m0);
        CHECK_OK(h3c_gemm_tensor_map(buf.data, 256, f ? 224 : 448, f ? 256 : 512, f ? 32 : 64, 64, f, kept1[f]));
        h3c_gemm_map_cache_counts(&h1, &m1);
        CHECK_OK(h3c_gemm_tensor_map(buf.data, 256, f ? 224 : 448, f ? 256 : 512, f ? 32 : 64, 64, f, kept2[f]));
        h3c_gemm_map_cache_counts(&h2, &m2);
        CHECK(m1 == m0 + 1 && h1 == h0, "%s map: the first lookup encodes (hits %llu -> %llu, encodes %llu -> %llu)",
              f ? "F32" : "BF16", (unsigned long long)h0, (unsigned long long)h1, (unsigned long long)m0,
              (unsigned long long)m1);
        CHECK(h2 == h1 + 1 && m2 == m1,
              "%s map: the second lookup finds the kept map (hits %llu -> %llu, encodes %llu -> %llu)",
              f ? "F32" : "BF16", (unsigned long long)h1, (unsigned long long)h2, (unsigned long long)m1,
              (unsigned long long)m2);
        found &= h2 == h1 + 1 && m2 == m1;
        const int eq = memcmp(fresh[f], kept1[f], 128) == 0 && memcmp(fresh[f], kept2[f], 128) == 0;
        CHECK(eq, "a kept %s tensor map differs from a fresh encode", f ? "F32" : "BF16");
        equal &= eq;
    }
    /* other arguments (the row stride): another map, encoded */
    uint64_t h3, m3, h4, m4;
    h3c_gemm_map_cache_counts(&h3, &m3);
    CHECK_OK(h3c_gemm_tensor_map(buf.data, 256, 448, 448, 64, 64, 0, other));
    h3c_gemm_map_cache_counts(&h4, &m4);
    CHECK(m4 == m3 + 1 && h4 == h3 && memcmp(other, fresh[0], 128) != 0,
          "another row stride found a kept map or gave the same map");
    CHECK(h3c_gemm_tensor_map(NULL, 256, 448, 512, 64, 64, 0, other) != H3S_OK &&
              h3c_gemm_tensor_map(buf.data, 256, 448, 400, 64, 64, 0, other) != H3S_OK &&
              h3c_gemm_tensor_map(buf.data, 0, 448, 512, 64, 64, 0, other) != H3S_OK,
          "h3c_gemm_tensor_map refuses a null base, a row stride under the row and an empty operand");
    H3T_CLEAR_ERROR();
    /* y and dx: each configuration with every map encoded (the cache off), then with kept maps, into two output
     * buffers in turn (so that the kept maps of one output cannot stand for the other's) */
    const int64_t M = small ? 333 : 925, K = small ? 256 : 5376, N = small ? 512 : 7168;
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    gfill(&xd, 501, 1.0f);
    gfill(&wd, 502, 1.0f / sqrtf((float)K));
    gfill(&dyd, 503, 1.0f);
    h3s_tensor y[2] = {gdev2(H3S_BF16, M, N), gdev2(H3S_BF16, M, N)},
               dx[2] = {gdev2(H3S_F32, M, K), gdev2(H3S_F32, M, K)};
    const int cfgs[] = {0, 11, 4, 5};
    int64_t bad = 0;
    int hit_all = 1;
    for (int ci = 0; ci < 4; ci++) {
        CHECK_OK(h3c_gemm_force_config(cfgs[ci]));
        h3s_tensor yr = {0}, dxr = {0};
        for (int run = 0; run < 3; run++) { /* 0: the cache off; 1: on, output buffer 1; 2: on, buffer 0 again */
            const int o = run == 1;
            h3c_gemm_map_cache(run > 0);
            uint64_t hb, mb, ha, ma;
            h3c_gemm_map_cache_counts(&hb, &mb);
            gpoison(&y[o]), gpoison(&dx[o]);
            CHECK_OK(h3s_linear_forward(&xd, &wd, NULL, &y[o]));
            CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &dx[o], NULL, NULL));
            h3c_gemm_map_cache_counts(&ha, &ma);
            if (run == 2) { /* x's and w's maps were kept in run 1 (run 0 kept none: the cache was off) */
                const int hit = ha > hb;
                CHECK(hit, "configuration %d: the run with kept maps found none (hits %llu -> %llu)", cfgs[ci],
                      (unsigned long long)hb, (unsigned long long)ha);
                hit_all &= hit;
            }
            h3s_tensor yh = gdown(&y[o]), dxh = gdown(&dx[o]);
            if (run == 0) {
                yr = yh, dxr = dxh;
                continue;
            }
            const int64_t b = count_differing(&yh, &yr, 0, M) + count_differing(&dxh, &dxr, 0, M);
            CHECK(b == 0, "configuration %d, output buffer %d: %lld elements of y and dx differ with kept maps",
                  cfgs[ci], o, (long long)b);
            bad += b;
            g_comparisons += M * (N + K);
            h3s_tensor_free(&yh), h3s_tensor_free(&dxh);
        }
        h3s_tensor_free(&yr), h3s_tensor_free(&dxr);
    }
    CHECK_OK(h3c_gemm_force_config(-1));
    h3c_gemm_map_cache(1);
    g_total_differing += bad;
    printf("  map cache: kept BF16 and F32 maps %s fresh encodes, %s on the second lookup; %lld -> %lld at M = %lld, "
           "configurations 0, 11, 4, 5, y and dx with the cache off and on (two output buffers): %lld elements "
           "differ, kept maps %s\n",
           equal ? "equal" : "DIFFER FROM", found ? "found" : "NOT FOUND", (long long)K, (long long)N, (long long)M,
           (long long)bad, hit_all ? "found in every configuration" : "NOT FOUND in some configuration");
    gfree(&xd), gfree(&wd), gfree(&dyd), gfree(&y[0]), gfree(&y[1]), gfree(&dx[0]), gfree(&dx[1]), gfree(&buf);
}

/* The comparison above can fail: the split operands give other bits than BF16 operands. */
static void modes_differ(int64_t M, int64_t K, int64_t N) {
    h3s_tensor xd = gdev2(H3S_BF16, M, K), wd = gdev2(H3S_BF16, N, K), dyd = gdev2(H3S_F32, M, N);
    gfill(&xd, 201, 1.0f);
    gfill(&wd, 202, 0.05f);
    gfill(&dyd, 203, 1.0f);
    h3s_tensor a = gdev2(H3S_F32, M, K), b = gdev2(H3S_F32, M, K);
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &a, NULL, NULL));
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_SPLIT));
    CHECK_OK(h3s_linear_backward(&xd, &wd, &dyd, &b, NULL, NULL));
    CHECK_OK(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16));
    h3s_tensor ah = gdown(&a), bh = gdown(&b);
    const int64_t d = count_differing(&ah, &bh, 0, M);
    printf("  control: bf16 vs split operands, dx of %lld x %lld: %lld elements differ (must be > 0)\n", (long long)M,
           (long long)K, (long long)d);
    CHECK(d > 0, "the element comparison cannot see a change of operand precision");
    h3s_tensor_free(&ah), h3s_tensor_free(&bh);
    gfree(&xd), gfree(&wd), gfree(&dyd), gfree(&a), gfree(&b);
}

int main(void) {
    gpu_require();
    const int small = gpu_small();
    /* 16 and 17: either side of the 64 x 16 transposed configurations' range; 33: a short A whose copied rows (40)
     * are not a multiple of 16 */
    int64_t Ms[] = {1, 2, 7, 12, 16, 17, 33, 64, 925, 1133, 4253, 8349, 33396};
    int nM = (int)(sizeof Ms / sizeof Ms[0]);
    const char *only_m = getenv("H3S_GEMM_MS");
    int partial = 0;
    if (only_m && only_m[0]) { /* keep the listed M, in the list's order */
        int k = 0;
        for (int i = 0; i < nM; i++) {
            char key[32];
            snprintf(key, sizeof key, ",%lld,", (long long)Ms[i]);
            char list[256];
            snprintf(list, sizeof list, ",%s,", only_m);
            if (strstr(list, key)) Ms[k++] = Ms[i];
        }
        printf("  M limited to %s (H3S_GEMM_MS): %d of %d values\n", only_m, k, nM);
        CHECK(k > 0, "H3S_GEMM_MS=%s names none of the test's M", only_m);
        partial = k < nM;
        nM = k;
    }
    const int64_t shapes[5][2] = {{5376, 7168}, {7168, 5376}, {5376, 28672}, {14336, 5376}, {2688, 32256}};
    /* 72 -> 1160: a folded dgrad whose last column tile has 8 columns and whose last fold tile is partial */
    const int64_t small_shapes[4][2] = {{136, 200}, {264, 72}, {64, 2048}, {72, 1160}};
    const char *only = getenv("H3S_GEMM_SHAPES");
    /* which full-size shapes run (H3S_GEMM_SHAPES names them as "KxN"); every part takes the same ones */
    int run_shape[5];
    char shapes_run[128] = "";
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "%lldx%lld", (long long)shapes[i][0], (long long)shapes[i][1]);
        run_shape[i] = !(only && only[0]) || strstr(only, name) != NULL;
        if (small || !run_shape[i]) continue;
        if (shapes_run[0]) strncat(shapes_run, ",", sizeof shapes_run - strlen(shapes_run) - 1);
        strncat(shapes_run, name, sizeof shapes_run - strlen(shapes_run) - 1);
    }
    const double t0 = gpu_now();
    /* the rules the dispatcher applies (shape, fold, bands) are checked on the host, without a device:
     * tests/gpu/test_gemm_dispatch.c */
    printf("configuration and row invariance, M in {1, 2, 7, 12, 16, 17, 33, 64, 925, 1133, 4253, 8349, 33396}\n");
    if (small) {
        for (int i = 0; i < 4; i++)
            shape_invariance(small_shapes[i][0], small_shapes[i][1], 1200, Ms, nM);
        /* the bands at a size where both split (4096 / 256 = 16 column tiles of 9 rows: 144 tiles); the short band
         * where 6 and 36 rows are left after 0's 1024 */
        const int64_t band_m[] = {1030, 1060, 1133};
        shape_invariance(4096, 4096, 1200, band_m, 3);
        /* the short band's second launch in the wide small-M configurations, 7 and 2 (8704 columns: 34 tiles of 256,
         * 136 of 64) */
        const int64_t short_m[] = {394, 424};
        shape_invariance(256, 8704, 512, short_m, 2);
        shape_invariance(8704, 256, 512, short_m, 2);
    } else
        for (int i = 0; i < 5; i++) {
            if (!run_shape[i]) {
                printf("  %lldx%lld: left out (H3S_GEMM_SHAPES=%s)\n", (long long)shapes[i][0], (long long)shapes[i][1],
                       only);
                partial = 1;
                continue;
            }
            shape_invariance(shapes[i][0], shapes[i][1], 33396, Ms, nM);
        }
    if (small)
        for (int i = 0; i < 4; i++)
            wgrad_one_tile(small_shapes[i][0], small_shapes[i][1]);
    else
        for (int i = 0; i < 5; i++)
            if (run_shape[i]) wgrad_one_tile(shapes[i][0], shapes[i][1]);
    /* 1024: a whole last fold tile, which the overlapped fold runs apart from the others (at full size the AdaLN
     * shape's folded dgrad, 126 whole fold tiles, covers it) */
    const int64_t fold_ms[] = {257, 1133, 4253}, fold_ms_small[] = {257, 700, 1024, 1200};
    if (small)
        for (int i = 0; i < 4; i++)
            wgrad_fold_configs(small_shapes[i][0], small_shapes[i][1], fold_ms_small, 4);
    else
        for (int i = 0; i < 5; i++)
            if (run_shape[i]) wgrad_fold_configs(shapes[i][0], shapes[i][1], fold_ms, 3);
    /* the raster hooks: the configurations on grouped persistent or one-CTA-per-tile grids (0, 1, 4, 5, the bands,
     * the clusters of 11, the 192 x 192 tiles of 12) and the dispatcher, on a shape of many tile-rows, and the folded
     * dgrad's split and register fold (512 -> 4096 at M = 12: the transposed split's 8 tile-rows of 64 output
     * columns, so that the groups differ there too) */
    {
        const int big_cfgs[] = {-1, 0, 1, 4, 5, 8, 9, 10, 11, 12}, split_cfgs[] = {-1, 0, 3, 7};
        const int nbig = (int)(sizeof big_cfgs / sizeof big_cfgs[0]);
        const int nsplit = (int)(sizeof split_cfgs / sizeof split_cfgs[0]);
        if (small) {
            raster_invariance(4096, 4096, 1133, big_cfgs, nbig);
            raster_invariance(512, 4096, 12, split_cfgs, nsplit);
        } else {
            if (run_shape[2]) raster_invariance(5376, 28672, 4253, big_cfgs, nbig);
            if (run_shape[4]) raster_invariance(2688, 32256, 64, split_cfgs, nsplit);
        }
    }
    modes_differ(small ? 100 : 925, small ? 136 : 5376, small ? 200 : 7168);
    if (small || run_shape[0]) map_cache(small); /* at full size on 5376 -> 7168, with that shape's part */
    printf("row_invariance_differing %lld over %lld compared elements; elapsed %.1f s\n", (long long)g_total_differing,
           (long long)g_comparisons, gpu_now() - t0);
    const char *path = getenv("H3S_GEMM_INVARIANCE_JSON");
    if (path && path[0]) {
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "cannot write %s", path);
        if (f) {
            fprintf(f,
                    "{\"row_invariance_differing\": %lld, \"compared_elements\": %lld, \"small\": %s, "
                    "\"all_shapes\": %s, \"shapes\": \"%s\", \"all_m\": %s}\n",
                    (long long)g_total_differing, (long long)g_comparisons, small ? "true" : "false",
                    partial ? "false" : "true", shapes_run, nM == (int)(sizeof Ms / sizeof Ms[0]) ? "true" : "false");
            fclose(f);
        }
    }
    return h3t_finish("test_gpu_gemm");
}

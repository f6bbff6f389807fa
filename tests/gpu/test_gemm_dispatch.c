/* The Hopper GEMM's host-side rules, checked without a device (so in CI too): which shapes the tensor-core kernels
 * take (K and N multiples of 8), which dgrads fold (N >= 8 K), where the bands split (h3c_gemm_band_rows), and the
 * forward/dgrad dispatcher's choice of configuration (h3c_gemm_dispatch_config), a function of the output's (M, Q)
 * alone.  Every configuration gives the same bits for the same row (tests/gpu/test_gpu_gemm.c proves that on a GPU);
 * this test pins which one runs where, so that a change of the dispatcher shows here and not only in a benchmark:
 *   - the choice is one of the configurations, and never the test override's;
 *   - at M <= 64 it is the small-M configuration (6 or 7 at M <= 16, 3 or 2 at M <= 64, by whether the output has
 *     fewer 64-column tiles than the 132 multiprocessors), above 64 rows never one of those;
 *   - a band (8, 9, 10) is chosen only where its first launch leaves rows to the second (h3c_gemm_band_rows > 0);
 *   - the choices the documentation quotes (docs/numerics/linear_cuda.md): at M = 4253 the short band (10) for
 *     7168-column outputs, band 8 at M = 3700 for 5376-column ones, band 9 at M = 925 for 32256-column ones;
 *     configuration 12 (192 x 192 tiles) where its estimate wins by 3%, e.g. 4253 x 5376, 925 x 14336, 8349 x 28672,
 *     33396 x 28672; configuration 11 instead of 0 from 16384 rows on (e.g. 33396 x 7168), 0 below.
 * The table of choices over the benchmark's M and the H3 shapes' output widths is printed. */
#include "cuda/cuda_internal.h"
#include "test_util.h"

/* the small-M configuration of an M x Q output (M <= 64), as the dispatcher documents it */
static int small_expected(int64_t M, int64_t Q) {
    const int narrow = (Q + 63) / 64 < 132;
    return M <= 16 ? (narrow ? 6 : 7) : (narrow ? 3 : 2);
}

int main(void) {
    /* the H3 shapes K -> N (the AdaLN projection's 2688 -> 32256 folds its dgrad, so its K is no dgrad output) */
    const int64_t shapes[5][2] = {{5376, 7168}, {7168, 5376}, {5376, 28672}, {14336, 5376}, {2688, 32256}};
    CHECK(h3c_gemm_wgmma_shape(7168, 5376) && !h3c_gemm_wgmma_shape(60, 48), "shape rule: K and N multiples of 8");
    /* the folded dgrad: the AdaLN projection's (and test_gpu_gemm's small fold shapes'), none of the other H3 shapes'
     */
    CHECK(h3c_gemm_dgrad_folds(32256, 2688) && h3c_gemm_dgrad_folds(96768, 2688) && h3c_gemm_dgrad_folds(2048, 64) &&
              h3c_gemm_dgrad_folds(1160, 72),
          "fold rule: N >= 8 K folds");
    for (int i = 0; i < 4; i++)
        CHECK(!h3c_gemm_dgrad_folds(shapes[i][1], shapes[i][0]), "fold rule: %lld -> %lld does not fold",
              (long long)shapes[i][0], (long long)shapes[i][1]);
    /* the bands split where their first configuration's tiles fill a last wave in part, and nowhere else; test_gpu_gemm
     * at small size relies on these splits (4096 -> 4096 at M = 1030, 1060 and 1133; 8704 columns at M = 394, 424) */
    CHECK(h3c_gemm_band_rows(8, 1133, 4096) == 1024 && h3c_gemm_band_rows(9, 4096, 1133) == 3328 &&
              h3c_gemm_band_rows(9, 14336, 925) == 12672 && h3c_gemm_band_rows(8, 925, 4096) == 0 &&
              h3c_gemm_band_rows(8, 128 * 264, 256) == 0 && h3c_gemm_band_rows(0, 1133, 4096) == 0,
          "band rows: the whole waves of 132 tiles (none past fewer than 132 tiles or whole waves)");
    CHECK(h3c_gemm_band_rows(10, 1030, 4096) == 1024 && h3c_gemm_band_rows(10, 1060, 4096) == 1024 &&
              h3c_gemm_band_rows(10, 1133, 4096) == 0 && h3c_gemm_band_rows(10, 4253, 7168) == 4224 &&
              h3c_gemm_band_rows(10, 925, 4096) == 0 && h3c_gemm_band_rows(10, 394, 8704) == 384 &&
              h3c_gemm_band_rows(10, 424, 8704) == 384,
          "short band rows: 0's whole waves where at most 64 rows are left, else none");

    /* the output widths Q of the H3 shapes: forward N, and the dgrad's K where it does not fold */
    const int64_t Qs[] = {5376, 7168, 14336, 28672, 32256};
    const int64_t Ms[] = {1, 2, 7, 12, 16, 17, 33, 64, 65, 925, 1133, 3700, 4253, 8349, 33396};
    const int nQ = (int)(sizeof Qs / sizeof Qs[0]), nM = (int)(sizeof Ms / sizeof Ms[0]);
    const int count = h3c_gemm_config_count();
    printf("dispatcher's configuration by M (rows) and Q (columns: %lld %lld %lld %lld %lld)\n", (long long)Qs[0],
           (long long)Qs[1], (long long)Qs[2], (long long)Qs[3], (long long)Qs[4]);
    for (int mi = 0; mi < nM; mi++) {
        const int64_t M = Ms[mi];
        printf("  M = %5lld:", (long long)M);
        for (int qi = 0; qi < nQ; qi++) {
            const int64_t Q = Qs[qi];
            const int c = h3c_gemm_dispatch_config(M, Q);
            printf(" %2d", c);
            CHECK(c >= 0 && c < count, "M = %lld, Q = %lld: configuration %d is not one of 0..%d", (long long)M,
                  (long long)Q, c, count - 1);
            /* the test override is the kernels' business (pick_config), not the dispatcher's */
            CHECK(h3c_gemm_force_config(1) == H3S_OK && h3c_gemm_dispatch_config(M, Q) == c &&
                      h3c_gemm_force_config(-1) == H3S_OK,
                  "M = %lld, Q = %lld: the override changed the dispatcher's choice", (long long)M, (long long)Q);
            if (M <= 64)
                CHECK(c == small_expected(M, Q), "M = %lld, Q = %lld: %d, not the small-M configuration %d",
                      (long long)M, (long long)Q, c, small_expected(M, Q));
            else
                CHECK(c != 2 && c != 3 && c != 6 && c != 7, "M = %lld, Q = %lld: small-M configuration %d",
                      (long long)M, (long long)Q, c);
            /* a band only where it splits: 8 and 10 along the output's rows, 9 (transposed) along its columns */
            if (c == 8 || c == 10)
                CHECK(h3c_gemm_band_rows(c, M, Q) > 0, "M = %lld, Q = %lld: band %d that does not split", (long long)M,
                      (long long)Q, c);
            if (c == 9)
                CHECK(h3c_gemm_band_rows(9, Q, M) > 0, "M = %lld, Q = %lld: band 9 that does not split", (long long)M,
                      (long long)Q);
        }
        printf("\n");
    }
    /* the choices the documentation quotes */
    CHECK(h3c_gemm_dispatch_config(4253, 7168) == 10, "the short band for 7168 columns at M = 4253 (got %d)",
          h3c_gemm_dispatch_config(4253, 7168));
    CHECK(h3c_gemm_dispatch_config(3700, 5376) == 8, "band 8 for 5376 columns at M = 3700 (got %d)",
          h3c_gemm_dispatch_config(3700, 5376));
    CHECK(h3c_gemm_dispatch_config(925, 32256) == 9, "band 9 for 32256 columns at M = 925 (got %d)",
          h3c_gemm_dispatch_config(925, 32256));
    /* configuration 12's 192 x 192 tiles where their estimate is under 0.97 of the choice's: the band 8 at 4253 x 5376
     * and 9 at 925 x 14336 give way to it, as 0 at 8349 x 28672 and 11 at 33396 x 28672 do */
    CHECK(h3c_gemm_dispatch_config(4253, 5376) == 12 && h3c_gemm_dispatch_config(925, 14336) == 12 &&
              h3c_gemm_dispatch_config(8349, 28672) == 12 && h3c_gemm_dispatch_config(33396, 28672) == 12 &&
              h3c_gemm_dispatch_config(16384, 7168) == 12,
          "configuration 12 (got %d, %d, %d, %d, %d)", h3c_gemm_dispatch_config(4253, 5376),
          h3c_gemm_dispatch_config(925, 14336), h3c_gemm_dispatch_config(8349, 28672),
          h3c_gemm_dispatch_config(33396, 28672), h3c_gemm_dispatch_config(16384, 7168));
    /* configuration 0's tiles on 2-CTA clusters (11) from 16384 rows on where 0 would be chosen; 0 below */
    CHECK(h3c_gemm_dispatch_config(33396, 7168) == 11 && h3c_gemm_dispatch_config(16384, 5376) == 11 &&
              h3c_gemm_dispatch_config(20000, 7168) == 11 && h3c_gemm_dispatch_config(4253, 28672) == 0,
          "configuration 11 instead of 0 from 16384 rows on (got %d, %d, %d, %d)",
          h3c_gemm_dispatch_config(33396, 7168), h3c_gemm_dispatch_config(16384, 5376),
          h3c_gemm_dispatch_config(20000, 7168), h3c_gemm_dispatch_config(4253, 28672));
    CHECK(h3c_gemm_dispatch_config(0, 5376) == -1 && h3c_gemm_dispatch_config(12, 0) == -1,
          "no configuration for an empty output");
    CHECK(h3c_gemm_force_config(count) != H3S_OK, "the override refuses configuration %d", count);
    H3T_CLEAR_ERROR();
    return h3t_finish("test_gemm_dispatch");
}

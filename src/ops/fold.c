#include "ops/fold.h"

#include <string.h>

/* Column blocks are the unit of thread work; their width does not affect the bits. */
#define FOLD_COLS 64

#define DEFINE_FOLD_COLUMNS(NAME, T)                                                                                   \
    void NAME(const T *contrib, int64_t M, int64_t N, int64_t ld, T *out) {                                            \
        int64_t nblocks = (N + FOLD_COLS - 1) / FOLD_COLS;                                                             \
        _Pragma("omp parallel for schedule(static)") for (int64_t cb = 0; cb < nblocks; cb++) {                        \
            int64_t n0 = cb * FOLD_COLS, n1 = n0 + FOLD_COLS < N ? n0 + FOLD_COLS : N;                                 \
            T total[FOLD_COLS], part[FOLD_COLS];                                                                       \
            for (int64_t n = n0; n < n1; n++)                                                                          \
                total[n - n0] = 0;                                                                                     \
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {                                                        \
                int64_t t1 = t0 + H3S_FOLD_TILE < M ? t0 + H3S_FOLD_TILE : M;                                          \
                for (int64_t n = n0; n < n1; n++)                                                                      \
                    part[n - n0] = contrib[t0 * ld + n];                                                               \
                for (int64_t m = t0 + 1; m < t1; m++)                                                                  \
                    for (int64_t n = n0; n < n1; n++)                                                                  \
                        part[n - n0] += contrib[m * ld + n];                                                           \
                if (t0 == 0)                                                                                           \
                    for (int64_t n = n0; n < n1; n++)                                                                  \
                        total[n - n0] = part[n - n0];                                                                  \
                else                                                                                                   \
                    for (int64_t n = n0; n < n1; n++)                                                                  \
                        total[n - n0] += part[n - n0];                                                                 \
            }                                                                                                          \
            for (int64_t n = n0; n < n1; n++)                                                                          \
                out[n] = total[n - n0];                                                                                \
        }                                                                                                              \
    }

DEFINE_FOLD_COLUMNS(h3s_fold_columns_f32, float)
DEFINE_FOLD_COLUMNS(h3s_fold_columns_f64, double)

/* For each output row r and column block: walk the tiles in order; inside a tile, the rows
 * with index r in ascending order.  A tile holding no such row contributes nothing. */
#define DEFINE_FOLD_INDEXED(NAME, T)                                                                                   \
    void NAME(const T *contrib, const int64_t *index, int64_t M, int64_t N, int64_t ld, int64_t R, T *out,             \
              int64_t ldo) {                                                                                           \
        int64_t nblocks = (N + FOLD_COLS - 1) / FOLD_COLS;                                                             \
        int64_t work = R * nblocks;                                                                                    \
        _Pragma("omp parallel for schedule(static)") for (int64_t w = 0; w < work; w++) {                              \
            int64_t r = w / nblocks, cb = w % nblocks;                                                                 \
            int64_t n0 = cb * FOLD_COLS, n1 = n0 + FOLD_COLS < N ? n0 + FOLD_COLS : N;                                 \
            T total[FOLD_COLS], part[FOLD_COLS];                                                                       \
            int have_total = 0;                                                                                        \
            for (int64_t n = n0; n < n1; n++)                                                                          \
                total[n - n0] = 0;                                                                                     \
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {                                                        \
                int64_t t1 = t0 + H3S_FOLD_TILE < M ? t0 + H3S_FOLD_TILE : M;                                          \
                int have_part = 0;                                                                                     \
                for (int64_t m = t0; m < t1; m++) {                                                                    \
                    if (index[m] != r) continue;                                                                       \
                    if (!have_part)                                                                                    \
                        for (int64_t n = n0; n < n1; n++)                                                              \
                            part[n - n0] = contrib[m * ld + n];                                                        \
                    else                                                                                               \
                        for (int64_t n = n0; n < n1; n++)                                                              \
                            part[n - n0] += contrib[m * ld + n];                                                       \
                    have_part = 1;                                                                                     \
                }                                                                                                      \
                if (!have_part) continue;                                                                              \
                if (!have_total)                                                                                       \
                    for (int64_t n = n0; n < n1; n++)                                                                  \
                        total[n - n0] = part[n - n0];                                                                  \
                else                                                                                                   \
                    for (int64_t n = n0; n < n1; n++)                                                                  \
                        total[n - n0] += part[n - n0];                                                                 \
                have_total = 1;                                                                                        \
            }                                                                                                          \
            for (int64_t n = n0; n < n1; n++)                                                                          \
                out[r * ldo + n] = total[n - n0];                                                                      \
        }                                                                                                              \
    }

DEFINE_FOLD_INDEXED(h3s_fold_indexed_f32, float)
DEFINE_FOLD_INDEXED(h3s_fold_indexed_f64, double)

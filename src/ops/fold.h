/* The canonical cross-row reduction (docs/strict.md section 3).
 *
 * Rows of the packed [B*S] axis are cut into tiles of H3S_FOLD_TILE consecutive rows.  A
 * tile's partial sum runs over its rows in ascending order, starting from the first row's
 * value; tile partials are folded in ascending tile order, starting from tile 0's partial.
 * Threads split the *columns*, never the rows, so every output element is produced by one
 * thread in that one order: the bits do not depend on the thread count.  Sequence-parallel
 * ranks compute whole tiles and fold the gathered partials in the same order. */
#ifndef H3S_FOLD_H
#define H3S_FOLD_H

#include <stdint.h>

#include "h3s.h"

#define H3S_FOLD_TILE 256

/* out[n] = fold over rows m of contrib[m * ld + n], n < N.  M may be 0 (out = 0). */
void h3s_fold_columns_f32(const float *contrib, int64_t M, int64_t N, int64_t ld, float *out);
void h3s_fold_columns_f64(const double *contrib, int64_t M, int64_t N, int64_t ld, double *out);

/* Indexed fold: out[r * ldo + n] = fold over the rows m with index[m] == r of
 * contrib[m * ld + n] (rows whose index differs are skipped, the tile structure is kept).
 * Rows r that no index names get 0.  `index` entries must already be checked to lie in
 * [0, R). */
void h3s_fold_indexed_f32(const float *contrib, const int64_t *index, int64_t M, int64_t N, int64_t ld, int64_t R,
                          float *out, int64_t ldo);
void h3s_fold_indexed_f64(const double *contrib, const int64_t *index, int64_t M, int64_t N, int64_t ld, int64_t R,
                          double *out, int64_t ldo);

#endif

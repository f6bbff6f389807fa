/* Sequence parallelism, owner-computes (docs/ARCHITECTURE.md): each rank holds a contiguous slice of the packed
 * [B*S] rows, row-wise nodes run on the slice, and a cross-row sum is computed tile by tile by the rank that holds
 * the tile's first row (docs/strict.md section 3), its partials gathered and folded by every rank in ascending tile
 * order.  The communicator only copies bytes. */
#ifndef H3S_DIST_SP_H
#define H3S_DIST_SP_H

#include "dist/comm.h"
#include "h3s.h"

/* Slices of M rows over n ranks: rank r holds [lo[r], lo[r + 1]).  Every slice is non-empty. */
typedef struct h3s_sp_plan {
    h3s_comm *comm;
    int n, rank;
    int64_t M;
    int64_t *lo; /* n + 1 bounds */
} h3s_sp_plan;

/* sizes == NULL: the even split (the first M % n ranks get one row more); else sizes[r] rows for rank r, summing
 * to M, each >= 1. */
h3s_status h3s_sp_plan_make(h3s_comm *comm, int64_t M, const int64_t *sizes, h3s_sp_plan *p);
void h3s_sp_plan_free(h3s_sp_plan *p);
static inline int64_t h3s_sp_lo(const h3s_sp_plan *p) { return p->lo[p->rank]; }
static inline int64_t h3s_sp_rows(const h3s_sp_plan *p) { return p->lo[p->rank + 1] - p->lo[p->rank]; }

/* Rows [need_lo[r], need_hi[r]) of the sliced tensor for every rank r (all ranks pass the same arrays); `local`
 * holds this rank's slice [rows, W]; `out` (allocated here, host, local's dtype) receives this rank's range. */
h3s_status h3s_sp_exchange_rows(const h3s_sp_plan *p, const h3s_tensor *local, const int64_t *need_lo,
                                const int64_t *need_hi, h3s_tensor *out);
/* Every rank gets all M rows (an all-gather of the slices) into `full` [M, W], allocated here. */
h3s_status h3s_sp_allgather_rows(const h3s_sp_plan *p, const h3s_tensor *local, h3s_tensor *full);
/* Rows [lo, hi) of the items (blocks of `seq` rows) that rank r's slice touches, for every r. */
void h3s_sp_item_ranges(const h3s_sp_plan *p, int64_t seq, int64_t *need_lo, int64_t *need_hi);

/* The most 256-row tiles any rank owns (the same on every rank). */
int64_t h3s_sp_max_owned_tiles(const h3s_sp_plan *p);

/* ---- cross-row sums by tiles ----
 * One output of a cross-row sum: `dst` (host F32) as R rows of `ld` floats; the fold writes, in each row, the
 * columns [col[c], col[c] + width) for c < ncols (other columns are left as they are).  index == NULL: every tile
 * contributes to every row (a column fold, R = 1 for a vector or matrix seen flat); else index[m] (the global row
 * list, M entries in [0, R)) names the output row that packed row m contributes to, and a tile holding no row of
 * index r contributes nothing to row r (ops/fold.h, indexed fold). */
typedef struct h3s_sp_sum {
    h3s_tensor *dst;
    const int64_t *index;
    int64_t R, ld;
    int ncols;
    int64_t col[2], width;
} h3s_sp_sum;

/* Computes one tile's partials: rows [row0, row0 + n) of the packed axis, `in[i]` the views of those rows of each
 * row input; parts[k] is a zeroed F32 tensor shaped like sums[k].dst, to be filled as the operator fills dst
 * (only the declared columns are read back). */
typedef h3s_status (*h3s_sp_tile_fn)(void *ctx, int64_t row0, int64_t n, const h3s_tensor *in, h3s_tensor *parts);

/* The cross-row sums of one node: `nin` row inputs (this rank's slices [rows, W_i]) are extended to the tiles this
 * rank owns (the tiles whose first row it holds, plus the rows of its last tile held by the next ranks) and fn
 * computes every owned tile's partials (all ranks at once).  The fold then runs in ascending tile order along the
 * ranks: rank r receives the running total of the tiles before its own from the previous rank, adds its partials
 * one by one, passes the total on; the last rank broadcasts it and every rank writes it into sums[k].dst.  Every
 * addition is the one ops/fold.h makes, in its order: only copies cross ranks. */
h3s_status h3s_sp_tile_sums(const h3s_sp_plan *p, const h3s_tensor *const *in, int nin, h3s_sp_sum *sums, int nsums,
                            h3s_sp_tile_fn fn, void *ctx);

#endif

/* Sequence parallelism: row slices, row exchange, cross-row sums by owned tiles (dist/sp.h). */
#include "dist/sp.h"

#include "core/core.h"
#include "ops/fold.h"

h3s_status h3s_sp_plan_make(h3s_comm *comm, int64_t M, const int64_t *sizes, h3s_sp_plan *p) {
    if (!comm || !p) return h3s_fail(H3S_ERR_INVALID, "sp_plan: NULL argument");
    memset(p, 0, sizeof *p);
    int n = comm->size;
    if (n < 1) return h3s_fail(H3S_ERR_INVALID, "sp_plan: world of %d ranks", n);
    if (M < n)
        return h3s_fail(H3S_ERR_SHAPE, "sequence parallel: %lld packed rows cannot be cut into %d non-empty slices",
                        (long long)M, n);
    p->lo = h3s_malloc((size_t)n + 1, sizeof *p->lo);
    if (!p->lo) return H3S_ERR_NOMEM;
    p->comm = comm;
    p->n = n;
    p->rank = comm->rank;
    p->M = M;
    p->lo[0] = 0;
    for (int r = 0; r < n; r++) {
        int64_t rows = sizes ? sizes[r] : M / n + (r < M % n ? 1 : 0);
        if (rows < 1 || rows > M - p->lo[r]) { /* no sum that could overflow */
            h3s_sp_plan_free(p);
            return h3s_fail(H3S_ERR_SHAPE, "sequence parallel: slice %d of %lld rows does not fit %lld rows", r,
                            (long long)rows, (long long)M);
        }
        p->lo[r + 1] = p->lo[r] + rows;
    }
    if (p->lo[n] != M) {
        int64_t held = p->lo[n];
        h3s_sp_plan_free(p);
        return h3s_fail(H3S_ERR_SHAPE, "sequence parallel: the slices hold %lld rows, not %lld", (long long)held,
                        (long long)M);
    }
    return H3S_OK;
}

void h3s_sp_plan_free(h3s_sp_plan *p) {
    if (!p) return;
    free(p->lo);
    p->lo = NULL;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static h3s_status check_local(const h3s_sp_plan *p, const h3s_tensor *local, const char *op) {
    if (!local || local->ndim != 2 || local->device)
        return h3s_fail(H3S_ERR_INVALID, "%s: a 2-D host tensor is required", op);
    if (local->shape[0] != h3s_sp_rows(p))
        return h3s_fail(H3S_ERR_SHAPE, "%s: the slice has %lld rows, rank %d holds %lld", op,
                        (long long)local->shape[0], p->rank, (long long)h3s_sp_rows(p));
    return H3S_OK;
}

h3s_status h3s_sp_exchange_rows(const h3s_sp_plan *p, const h3s_tensor *local, const int64_t *need_lo,
                                const int64_t *need_hi, h3s_tensor *out) {
    static const char op[] = "sp_exchange_rows";
    H3S_TRY(check_local(p, local, op));
    for (int r = 0; r < p->n; r++)
        if (need_lo[r] < 0 || need_hi[r] < need_lo[r] || need_hi[r] > p->M)
            return h3s_fail(H3S_ERR_INDEX, "%s: rank %d asks for rows [%lld, %lld) of %lld", op, r,
                            (long long)need_lo[r], (long long)need_hi[r], (long long)p->M);
    const size_t rb = (size_t)local->shape[1] * h3s_dtype_size(local->dtype);
    int64_t shape[2] = {need_hi[p->rank] - need_lo[p->rank], local->shape[1]};
    H3S_TRY(h3s_tensor_alloc(out, local->dtype, 2, shape));
    size_t *v = h3s_calloc((size_t)p->n * 4, sizeof *v);
    if (!v) {
        h3s_tensor_free(out);
        return H3S_ERR_NOMEM;
    }
    size_t *sc = v, *sd = v + p->n, *rc = v + 2 * p->n, *rd = v + 3 * p->n;
    const int64_t mlo = p->lo[p->rank], mhi = p->lo[p->rank + 1];
    for (int r = 0; r < p->n; r++) {
        int64_t a = max64(mlo, need_lo[r]), b = min64(mhi, need_hi[r]);
        if (a < b) {
            sc[r] = (size_t)(b - a) * rb;
            sd[r] = (size_t)(a - mlo) * rb;
        }
        int64_t c = max64(p->lo[r], need_lo[p->rank]), d = min64(p->lo[r + 1], need_hi[p->rank]);
        if (c < d) {
            rc[r] = (size_t)(d - c) * rb;
            rd[r] = (size_t)(c - need_lo[p->rank]) * rb;
        }
    }
    h3s_status st = h3s_comm_alltoallv(p->comm, local->data, sc, sd, out->data, rc, rd);
    free(v);
    if (st != H3S_OK) h3s_tensor_free(out);
    return st;
}

h3s_status h3s_sp_allgather_rows(const h3s_sp_plan *p, const h3s_tensor *local, h3s_tensor *full) {
    static const char op[] = "sp_allgather_rows";
    H3S_TRY(check_local(p, local, op));
    const size_t rb = (size_t)local->shape[1] * h3s_dtype_size(local->dtype);
    int64_t shape[2] = {p->M, local->shape[1]};
    H3S_TRY(h3s_tensor_alloc(full, local->dtype, 2, shape));
    size_t *v = h3s_calloc((size_t)p->n * 2, sizeof *v);
    if (!v) {
        h3s_tensor_free(full);
        return H3S_ERR_NOMEM;
    }
    for (int r = 0; r < p->n; r++) {
        v[r] = (size_t)(p->lo[r + 1] - p->lo[r]) * rb;
        v[p->n + r] = (size_t)p->lo[r] * rb;
    }
    h3s_status st = h3s_comm_allgatherv(p->comm, local->data, full->data, v, v + p->n);
    free(v);
    if (st != H3S_OK) h3s_tensor_free(full);
    return st;
}

void h3s_sp_item_ranges(const h3s_sp_plan *p, int64_t seq, int64_t *need_lo, int64_t *need_hi) {
    for (int r = 0; r < p->n; r++) {
        need_lo[r] = p->lo[r] / seq * seq;
        need_hi[r] = ((p->lo[r + 1] - 1) / seq + 1) * seq;
    }
}

/* Tiles whose first row rank r holds: [t0, t1). */
static void owned_tiles(const h3s_sp_plan *p, int r, int64_t *t0, int64_t *t1) {
    const int64_t T = H3S_FOLD_TILE;
    *t0 = (p->lo[r] + T - 1) / T;
    *t1 = (p->lo[r + 1] + T - 1) / T;
}

int64_t h3s_sp_max_owned_tiles(const h3s_sp_plan *p) {
    int64_t most = 0;
    for (int r = 0; r < p->n; r++) {
        int64_t t0, t1;
        owned_tiles(p, r, &t0, &t1);
        if (t1 - t0 > most) most = t1 - t0;
    }
    return most;
}

/* Floats of one output's declared columns (the message layout: row-major over (row, column range, column)). */
static size_t sum_floats(const h3s_sp_sum *s) { return (size_t)(s->R * s->ncols * s->width); }

/* Fold one tile's partial into the running total: a row's first contributing tile sets it, later ones add. */
static void fold_tile(const h3s_sp_sum *s, const float *part, int64_t row0, int64_t n, float *total, uint8_t *have) {
    for (int64_t r = 0; r < s->R; r++) {
        int present = 1;
        if (s->index) {
            present = 0;
            for (int64_t m = row0; m < row0 + n && !present; m++)
                present = s->index[m] == r;
        }
        if (!present) continue;
        for (int c = 0; c < s->ncols; c++) {
            const float *src = part + r * s->ld + s->col[c];
            float *dst = total + (r * s->ncols + c) * s->width;
            if (!have[r])
                for (int64_t j = 0; j < s->width; j++)
                    dst[j] = src[j];
            else
                for (int64_t j = 0; j < s->width; j++)
                    dst[j] = dst[j] + src[j];
        }
        have[r] = 1;
    }
}

h3s_status h3s_sp_tile_sums(const h3s_sp_plan *p, const h3s_tensor *const *in, int nin, h3s_sp_sum *sums, int nsums,
                            h3s_sp_tile_fn fn, void *ctx) {
    static const char op[] = "sp_tile_sums";
    if (!p || (nin && !in) || !sums || nsums < 1 || nsums > 8 || nin > 8 || !fn)
        return h3s_fail(H3S_ERR_INVALID, "%s: bad arguments", op);
    for (int k = 0; k < nsums; k++) {
        const h3s_sp_sum *s = &sums[k];
        if (!s->dst || s->dst->dtype != H3S_F32 || s->dst->device || s->R < 1 || s->ncols < 1 || s->ncols > 2 ||
            s->R * s->ld != h3s_tensor_numel(s->dst))
            return h3s_fail(H3S_ERR_INVALID, "%s: output %d is not an F32 host tensor of %lld rows", op, k,
                            (long long)s->R);
        for (int c = 0; c < s->ncols; c++)
            if (s->col[c] < 0 || s->width < 0 || s->col[c] + s->width > s->ld)
                return h3s_fail(H3S_ERR_INDEX, "%s: output %d columns [%lld, %lld) outside its %lld", op, k,
                                (long long)s->col[c], (long long)(s->col[c] + s->width), (long long)s->ld);
        if (s->index)
            for (int64_t m = 0; m < p->M; m++)
                if (s->index[m] < 0 || s->index[m] >= s->R)
                    return h3s_fail(H3S_ERR_INDEX, "%s: index[%lld] = %lld outside [0, %lld)", op, (long long)m,
                                    (long long)s->index[m], (long long)s->R);
    }
    for (int i = 0; i < nin; i++)
        H3S_TRY(check_local(p, in[i], op));

    const int64_t TILE = H3S_FOLD_TILE;
    int64_t *need = h3s_malloc((size_t)p->n * 2, sizeof *need);
    if (!need) return H3S_ERR_NOMEM;
    for (int r = 0; r < p->n; r++) {
        int64_t t0, t1;
        owned_tiles(p, r, &t0, &t1);
        need[r] = t0 < t1 ? t0 * TILE : p->lo[r];
        need[p->n + r] = t0 < t1 ? min64(t1 * TILE, p->M) : p->lo[r];
    }
    h3s_tensor ext[8];
    memset(ext, 0, sizeof ext);
    h3s_status st = H3S_OK;
    for (int i = 0; i < nin && st == H3S_OK; i++)
        st = h3s_sp_exchange_rows(p, in[i], need, need + p->n, &ext[i]);
    const int64_t ext_lo = need[p->rank];
    free(need);

    size_t msg = 0, offs[8];
    for (int k = 0; k < nsums; k++) {
        offs[k] = msg;
        msg += sum_floats(&sums[k]);
    }
    size_t flags = 0, foffs[8];
    for (int k = 0; k < nsums; k++) {
        foffs[k] = flags;
        flags += (size_t)sums[k].R;
    }
    int64_t t0, t1;
    owned_tiles(p, p->rank, &t0, &t1);
    const int64_t mine = t1 - t0;
    /* every owned tile's partials, computed before the fold reaches this rank */
    h3s_tensor *parts = st == H3S_OK ? h3s_calloc((size_t)(mine > 0 ? mine : 1) * (size_t)nsums, sizeof *parts) : NULL;
    if (st == H3S_OK && !parts) st = H3S_ERR_NOMEM;
    for (int64_t t = 0; st == H3S_OK && t < mine; t++) {
        int64_t row0 = (t0 + t) * TILE, n = min64(TILE, p->M - row0);
        h3s_tensor views[8];
        for (int i = 0; i < nin; i++) {
            int64_t shape[2] = {n, ext[i].shape[1]};
            size_t rb = (size_t)ext[i].shape[1] * h3s_dtype_size(ext[i].dtype);
            views[i] = h3s_tensor_view((char *)ext[i].data + (size_t)(row0 - ext_lo) * rb, ext[i].dtype, 2, shape);
        }
        for (int k = 0; k < nsums && st == H3S_OK; k++)
            st = h3s_tensor_alloc(&parts[t * nsums + k], H3S_F32, sums[k].dst->ndim, sums[k].dst->shape);
        if (st == H3S_OK) st = fn(ctx, row0, n, views, &parts[t * nsums]);
    }
    for (int i = 0; i < nin; i++)
        h3s_tensor_free(&ext[i]);

    /* the running total: received from the previous rank (rank 0 starts it), this rank's tiles added in order */
    float *total = st == H3S_OK ? h3s_calloc(msg ? msg : 1, sizeof(float)) : NULL;
    uint8_t *have = total ? h3s_calloc(flags, 1) : NULL;
    if (st == H3S_OK && !have) st = H3S_ERR_NOMEM;
    if (st == H3S_OK && p->rank > 0) st = h3s_comm_recv(p->comm, total, msg * sizeof(float), p->rank - 1);
    if (st == H3S_OK && p->rank > 0) st = h3s_comm_recv(p->comm, have, flags, p->rank - 1);
    for (int64_t t = 0; st == H3S_OK && t < mine; t++) {
        int64_t row0 = (t0 + t) * TILE, n = min64(TILE, p->M - row0);
        for (int k = 0; k < nsums; k++)
            fold_tile(&sums[k], parts[t * nsums + k].data, row0, n, total + offs[k], have + foffs[k]);
    }
    if (st == H3S_OK && p->rank + 1 < p->n) st = h3s_comm_send(p->comm, total, msg * sizeof(float), p->rank + 1);
    if (st == H3S_OK && p->rank + 1 < p->n) st = h3s_comm_send(p->comm, have, flags, p->rank + 1);
    if (st == H3S_OK) st = h3s_comm_bcast(p->comm, total, msg * sizeof(float), p->n - 1);
    if (st == H3S_OK) st = h3s_comm_bcast(p->comm, have, flags, p->n - 1);
    /* rows no tile names get +0, as ops/fold.h gives them */
    for (int k = 0; st == H3S_OK && k < nsums; k++) {
        const h3s_sp_sum *s = &sums[k];
        float *dst = s->dst->data;
        for (int64_t r = 0; r < s->R; r++)
            for (int c = 0; c < s->ncols; c++) {
                const float *src = total + offs[k] + (size_t)((r * s->ncols + c) * s->width);
                float *d = dst + r * s->ld + s->col[c];
                for (int64_t j = 0; j < s->width; j++)
                    d[j] = have[foffs[k] + (size_t)r] ? src[j] : 0.0f;
            }
    }
    if (parts)
        for (int64_t t = 0; t < (mine > 0 ? mine : 0) * nsums; t++)
            h3s_tensor_free(&parts[t]);
    free(parts);
    free(total);
    free(have);
    return st;
}

/* Gated residual: out = r + gate[index[m]] * y, or out = r + y without a table.
 * Exact operation order and error bounds: docs/numerics/norms.md.
 *
 * Strict (BF16 r, y, table; F32 gradients):
 *   out_k = bf16(r_k + (g_k * y_k))   -- g*y is exact in FP32 (two 8-bit significands),
 *                                        the FP32 add is the only rounding before BF16
 *   dr    = dout (copy), dy = dout * g (one FP32 rounding; dout itself without a table),
 *   dtable gate chunk = indexed tile fold (fold.h) of dout * y per table row.
 * Golden: all F64, the same formula in double. */
#include <math.h>

#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "ops/fold.h"
#include "ops/ops.h"

typedef struct residual_call {
    int golden;
    int on_device;
    int64_t M, H, R, C;
} residual_call;

/* table / index / gate_chunk, shared by forward and backward.  c->M, c->H, c->golden set. */
static h3s_status check_gate(const char *op, const h3s_tensor *table, const h3s_tensor *index, int gate_chunk,
                             residual_call *c) {
    h3s_dtype act = c->golden ? H3S_F64 : H3S_BF16;
    if (!table) {
        if (index) return h3s_fail(H3S_ERR_INVALID, "%s: index given without a gate table", op);
        return H3S_OK;
    }
    H3S_TRY(h3s_check_tensor(op, "table", table, act, 2));
    if (c->H == 0 || table->shape[1] == 0 || table->shape[1] % c->H != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: table has %lld columns, expected a positive multiple of H = %lld", op,
                        (long long)table->shape[1], (long long)c->H);
    c->R = table->shape[0];
    c->C = table->shape[1] / c->H;
    if (gate_chunk < 0 || gate_chunk >= c->C)
        return h3s_fail(H3S_ERR_INVALID, "%s: gate_chunk = %d is outside [0, %lld)", op, gate_chunk, (long long)c->C);
    if (!index) return h3s_fail(H3S_ERR_INVALID, "%s: index is NULL (a gate table needs one row index per row)", op);
    int64_t dimM[1] = {c->M};
    H3S_TRY(h3s_check_shape(op, "index", index, H3S_I64, 1, dimM));
    /* A device index is bounds-checked by the kernel that reads it (cuda_ops.h). */
    if (!index->device) H3S_TRY(h3s_check_index(op, "index", index, c->R));
    return H3S_OK;
}

static inline float bf16_at(const uint16_t *p, int64_t i) { return h3s_bf16_value(p[i]); }

h3s_status h3s_residual_forward(const h3s_tensor *r, const h3s_tensor *y, const h3s_tensor *table,
                                const h3s_tensor *index, int gate_chunk, h3s_tensor *out) {
    static const char op[] = "residual_forward";
    residual_call c;
    memset(&c, 0, sizeof c);
    if (!r) return h3s_fail(H3S_ERR_INVALID, "%s: r is NULL", op);
    if (r->dtype == H3S_F64)
        c.golden = 1;
    else if (r->dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_DTYPE, "%s: r has dtype %s, expected BF16 (strict) or F64 (golden)", op,
                        h3s_dtype_name(r->dtype));
    h3s_dtype act = c.golden ? H3S_F64 : H3S_BF16;
    H3S_TRY(h3s_check_tensor(op, "r", r, act, 2));
    c.M = r->shape[0];
    c.H = r->shape[1];
    int64_t dimMH[2] = {c.M, c.H};
    if (!y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL", op);
    H3S_TRY(h3s_check_shape(op, "y", y, act, 2, dimMH));
    H3S_TRY(check_gate(op, table, index, gate_chunk, &c));
    if (!out) return h3s_fail(H3S_ERR_INVALID, "%s: out is NULL", op);
    H3S_TRY(h3s_check_shape(op, "out", out, act, 2, dimMH));
    const h3s_tensor *ts[4] = {r, y, table, out};
    const char *names[4] = {"r", "y", "table", "out"};
    H3S_TRY(h3s_check_placement(op, ts, names, 4, &c.on_device));
    if (index && index->device && !c.on_device)
        return h3s_fail(H3S_ERR_DEVICE, "%s: index is in device memory but the float tensors are on the host", op);
    if (c.on_device) return h3s_cuda_residual_forward(r, y, table, index, gate_chunk, out);
    {
        /* out may be r or y itself (below); a partial overlap, or one with the gate table or the index, would let a
         * thread write what another still reads */
        const h3s_tensor *ins[4] = {r, y, table, index};
        const char *in_names[4] = {"r", "y", "table", "index"};
        H3S_TRY(h3s_check_disjoint(op, "out", out, ins, in_names, 4, 3u));
    }

    const int64_t M = c.M, H = c.H, ld = c.C * H;
    const int64_t *idx = table ? (const int64_t *)index->data : NULL;
    /* Element i reads r[i] and y[i] before writing out[i]: out may alias r or y. */
    if (c.golden) {
        const double *R = (const double *)r->data, *Y = (const double *)y->data;
        const double *G = table ? (const double *)table->data + gate_chunk * H : NULL;
        double *O = (double *)out->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            const double *g = G ? G + idx[m] * ld : NULL;
            for (int64_t k = 0; k < H; k++) {
                double v = g ? g[k] * Y[m * H + k] : Y[m * H + k];
                O[m * H + k] = R[m * H + k] + v;
            }
        }
    } else {
        const uint16_t *R = (const uint16_t *)r->data, *Y = (const uint16_t *)y->data;
        const uint16_t *G = table ? (const uint16_t *)table->data + gate_chunk * H : NULL;
        uint16_t *O = (uint16_t *)out->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            const uint16_t *g = G ? G + idx[m] * ld : NULL;
            for (int64_t k = 0; k < H; k++) {
                float v = bf16_at(Y, m * H + k);
                if (g) v = bf16_at(g, k) * v; /* exact: 8-bit x 8-bit significands */
                O[m * H + k] = h3s_bf16_round(bf16_at(R, m * H + k) + v);
            }
        }
    }
    return H3S_OK;
}

h3s_status h3s_residual_backward(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index, int gate_chunk,
                                 const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy, h3s_tensor *dtable) {
    return h3s_residual_backward_rounded(y, table, index, gate_chunk, dout, dr, dy, NULL, dtable);
}

h3s_status h3s_residual_backward_rounded(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index,
                                         int gate_chunk, const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy,
                                         h3s_tensor *dy_bf16, h3s_tensor *dtable) {
    static const char op[] = "residual_backward";
    residual_call c;
    memset(&c, 0, sizeof c);
    if (!dout) return h3s_fail(H3S_ERR_INVALID, "%s: dout is NULL", op);
    if (dout->dtype == H3S_F64)
        c.golden = 1;
    else if (dout->dtype != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "%s: dout has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(dout->dtype));
    h3s_dtype act = c.golden ? H3S_F64 : H3S_BF16, grad = c.golden ? H3S_F64 : H3S_F32;
    H3S_TRY(h3s_check_tensor(op, "dout", dout, grad, 2));
    c.M = dout->shape[0];
    c.H = dout->shape[1];
    int64_t dimMH[2] = {c.M, c.H};
    /* y is read only for the gate's gradient. */
    if (dtable && !y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL (needed for dtable)", op);
    if (y) H3S_TRY(h3s_check_shape(op, "y", y, act, 2, dimMH));
    H3S_TRY(check_gate(op, table, index, gate_chunk, &c));
    if (dr) H3S_TRY(h3s_check_shape(op, "dr", dr, grad, 2, dimMH));
    if (dy) H3S_TRY(h3s_check_shape(op, "dy", dy, grad, 2, dimMH));
    if (dtable) {
        if (!table) return h3s_fail(H3S_ERR_INVALID, "%s: dtable requested but there is no gate table", op);
        int64_t dimT[2] = {c.R, c.C * c.H};
        H3S_TRY(h3s_check_shape(op, "dtable", dtable, grad, 2, dimT));
    }
    if (dy_bf16) {
        if (c.golden) return h3s_fail(H3S_ERR_INVALID, "%s: dy_bf16 needs the strict variant", op);
        H3S_TRY(h3s_check_shape(op, "dy_bf16", dy_bf16, H3S_BF16, 2, dimMH));
        const h3s_tensor *in[6] = {dout, y, table, dr, dy, dtable};
        for (int i = 0; i < 6; i++)
            if (h3s_tensors_overlap(dy_bf16, in[i]))
                return h3s_fail(H3S_ERR_INVALID, "%s: dy_bf16 overlaps an operand", op);
    }
    const h3s_tensor *ts[7] = {dout, y, table, dr, dy, dtable, dy_bf16};
    const char *names[7] = {"dout", "y", "table", "dr", "dy", "dtable", "dy_bf16"};
    H3S_TRY(h3s_check_placement(op, ts, names, 7, &c.on_device));
    if (index && index->device && !c.on_device)
        return h3s_fail(H3S_ERR_DEVICE, "%s: index is in device memory but the float tensors are on the host", op);
    if (c.on_device) return h3s_cuda_residual_backward(y, table, index, gate_chunk, dout, dr, dy, dy_bf16, dtable);
    if (dy_bf16 && !dy)
        return h3s_fail(H3S_ERR_INVALID, "%s: dy is NULL; dy_bf16 alone is a CUDA-backend option (the host writes dy)",
                        op);

    const int64_t M = c.M, H = c.H, ld = c.C * H;
    const size_t es = c.golden ? sizeof(double) : sizeof(float);
    const int64_t *idx = table ? (const int64_t *)index->data : NULL;
    void *contrib = NULL;
    if (dtable) {
        contrib = h3s_malloc((size_t)(M * H), es);
        if (!contrib) return H3S_ERR_NOMEM;
    }
    /* Order: dtable (reads dout, y), then dr, then dy, so that dr or dy (not both) may
     * alias dout. */
    if (dtable) {
        if (c.golden) {
            const double *DO = (const double *)dout->data, *Y = (const double *)y->data;
            double *CT = (double *)contrib;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < M * H; i++)
                CT[i] = DO[i] * Y[i];
            h3s_fold_indexed_f64(CT, idx, M, H, H, c.R, (double *)dtable->data + gate_chunk * H, ld);
        } else {
            const float *DO = (const float *)dout->data;
            const uint16_t *Y = (const uint16_t *)y->data;
            float *CT = (float *)contrib;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < M * H; i++)
                CT[i] = DO[i] * bf16_at(Y, i);
            h3s_fold_indexed_f32(CT, idx, M, H, H, c.R, (float *)dtable->data + gate_chunk * H, ld);
        }
        free(contrib);
    }
    if (dr && dr->data != dout->data && M * H > 0) memcpy(dr->data, dout->data, (size_t)(M * H) * es);
    if (dy) {
        if (!table) {
            if (dy->data != dout->data && M * H > 0) memcpy(dy->data, dout->data, (size_t)(M * H) * es);
        } else if (c.golden) {
            const double *DO = (const double *)dout->data, *G = (const double *)table->data + gate_chunk * H;
            double *DY = (double *)dy->data;
#pragma omp parallel for schedule(static)
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < H; k++)
                    DY[m * H + k] = DO[m * H + k] * G[idx[m] * ld + k];
        } else {
            const float *DO = (const float *)dout->data;
            const uint16_t *G = (const uint16_t *)table->data + gate_chunk * H;
            float *DY = (float *)dy->data;
#pragma omp parallel for schedule(static)
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < H; k++)
                    DY[m * H + k] = DO[m * H + k] * bf16_at(G, idx[m] * ld + k);
        }
    }
    /* dy rounded as the CUDA backend's linear rounds its gradient operand (h3s_bf16_round per element) */
    return dy_bf16 ? h3s_tensor_convert(dy, dy_bf16) : H3S_OK;
}

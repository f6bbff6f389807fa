/* AdaLN projection: table = linear(bf16(silu(temb)), w, b), as MiniMaxH3AdaLayerNormModulation
 * and MiniMaxH3AdaLayerNormOut compute it: silu at temb's f32 precision, one cast to the
 * projection's BF16, then the BF16 linear.
 *
 * Strict: temb F32; a = bf16(silu(temb)) (silu in double, rounded to f32, then to BF16: the
 * provider's two roundings, f32 silu then the .to(bf16) cast); w, b, table BF16.
 * Golden: F64 everywhere and no cast (a = silu(temb) exactly in double). */
#include <math.h>

#include "core/core.h"
#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

/* temb decides the mode: F32 strict (activations BF16, gradients F32), F64 golden. */
static h3s_status adaln_mode(const char *op, const h3s_tensor *temb, int *golden) {
    if (temb->dtype != H3S_F32 && temb->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: temb has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(temb->dtype));
    *golden = temb->dtype == H3S_F64;
    return H3S_OK;
}

h3s_status h3s_adaln_projection_forward(const h3s_tensor *temb, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *a,
                                        h3s_tensor *table) {
    static const char *op = "adaln_projection_forward";
    if (!temb) return h3s_fail(H3S_ERR_INVALID, "%s: temb is NULL", op);
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    if (!a) return h3s_fail(H3S_ERR_INVALID, "%s: a is NULL", op);
    if (!table) return h3s_fail(H3S_ERR_INVALID, "%s: table is NULL", op);
    int golden = 0;
    H3S_TRY(adaln_mode(op, temb, &golden));
    const h3s_dtype act = golden ? H3S_F64 : H3S_BF16;
    int64_t any2[2] = {-1, -1};
    H3S_TRY(h3s_check_shape(op, "temb", temb, temb->dtype, 2, any2));
    const int64_t T = temb->shape[0], E = temb->shape[1];
    int64_t w_dims[2] = {-1, E};
    H3S_TRY(h3s_check_shape(op, "w", w, act, 2, w_dims));
    const int64_t N = w->shape[0];
    if (b) H3S_TRY(h3s_check_shape(op, "b", b, act, 1, &N));
    H3S_TRY(h3s_check_shape(op, "a", a, act, 2, temb->shape));
    int64_t table_dims[2] = {T, N};
    H3S_TRY(h3s_check_shape(op, "table", table, act, 2, table_dims));
    const h3s_tensor *ts[5] = {temb, w, b, a, table};
    const char *names[5] = {"temb", "w", "b", "a", "table"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 5, &device));
    if (device) return h3s_cuda_adaln_projection_forward(temb, w, b, a, table);
    /* every output apart from every operand and from the other output (the projection checks table against a, w and
     * b again) */
    H3S_TRY(h3s_check_disjoint(op, "a", a, ts, names, 3, 0));
    H3S_TRY(h3s_check_disjoint(op, "table", table, ts, names, 4, 0));

    /* silu into a temporary, copied to `a` only once the projection has succeeded: a failure leaves both outputs as
     * they were */
    h3s_tensor as;
    H3S_TRY(h3s_tensor_alloc(&as, act, 2, temb->shape));
    const int64_t n = T * E;
    if (golden) {
        const double *tv = (const double *)temb->data;
        double *av = (double *)as.data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            av[i] = tv[i] / (1.0 + exp(-tv[i]));
    } else {
        const float *tv = (const float *)temb->data;
        uint16_t *av = (uint16_t *)as.data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            av[i] = h3s_bf16_round(h3s_det_siluf(tv[i]));
    }
    h3s_status st = h3s_linear_forward(&as, w, b, table);
    if (st == H3S_OK && h3s_tensor_nbytes(&as)) memcpy(a->data, as.data, h3s_tensor_nbytes(&as));
    h3s_tensor_free(&as);
    if (st != H3S_OK) return h3s_fail_context(st, "%s", op);
    return H3S_OK;
}

h3s_status h3s_adaln_projection_backward(const h3s_tensor *temb, const h3s_tensor *a, const h3s_tensor *w,
                                         const h3s_tensor *dtable, h3s_tensor *dtemb, h3s_tensor *dw, h3s_tensor *db) {
    static const char *op = "adaln_projection_backward";
    if (!temb) return h3s_fail(H3S_ERR_INVALID, "%s: temb is NULL", op);
    if (!a) return h3s_fail(H3S_ERR_INVALID, "%s: a is NULL", op);
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    if (!dtable) return h3s_fail(H3S_ERR_INVALID, "%s: dtable is NULL", op);
    int golden = 0;
    H3S_TRY(adaln_mode(op, temb, &golden));
    const h3s_dtype act = golden ? H3S_F64 : H3S_BF16, grad = golden ? H3S_F64 : H3S_F32;
    int64_t any2[2] = {-1, -1};
    H3S_TRY(h3s_check_shape(op, "temb", temb, temb->dtype, 2, any2));
    const int64_t T = temb->shape[0], E = temb->shape[1];
    H3S_TRY(h3s_check_shape(op, "a", a, act, 2, temb->shape));
    int64_t w_dims[2] = {-1, E};
    H3S_TRY(h3s_check_shape(op, "w", w, act, 2, w_dims));
    const int64_t N = w->shape[0];
    int64_t table_dims[2] = {T, N};
    H3S_TRY(h3s_check_shape(op, "dtable", dtable, grad, 2, table_dims));
    if (dtemb) H3S_TRY(h3s_check_shape(op, "dtemb", dtemb, grad, 2, temb->shape));
    /* dw may be BF16 on the CUDA backend (strict): the F32 gradient rounded once as the GEMM stores it */
    const h3s_dtype wgt = !golden && dw && dw->dtype == H3S_BF16 && dw->device ? H3S_BF16 : grad;
    if (dw) H3S_TRY(h3s_check_shape(op, "dw", dw, wgt, 2, w->shape));
    if (db) H3S_TRY(h3s_check_shape(op, "db", db, grad, 1, &N));
    const h3s_tensor *ts[7] = {temb, a, w, dtable, dtemb, dw, db};
    const char *names[7] = {"temb", "a", "w", "dtable", "dtemb", "dw", "db"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 7, &device));
    if (device) return h3s_cuda_adaln_projection_backward(temb, a, w, dtable, dtemb, dw, db);
    if (!dtemb && !dw && !db) return H3S_OK;

    /* da = dtable @ w (gradient dtype); the BF16 cast passes the gradient straight through;
     * dtemb = da * silu'(temb), one product per element. */
    h3s_tensor da;
    memset(&da, 0, sizeof da);
    if (dtemb) H3S_TRY(h3s_tensor_alloc(&da, grad, 2, temb->shape));
    h3s_status st = h3s_linear_backward(a, w, dtable, dtemb ? &da : NULL, dw, db);
    if (st == H3S_OK && dtemb) {
        const int64_t n = T * E;
        if (golden) {
            const double *tv = (const double *)temb->data, *g = (const double *)da.data;
            double *o = (double *)dtemb->data;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++) {
                double s = 1.0 / (1.0 + exp(-tv[i]));
                o[i] = g[i] * (s * (1.0 + tv[i] * (1.0 - s)));
            }
        } else {
            const float *tv = (const float *)temb->data, *g = (const float *)da.data;
            float *o = (float *)dtemb->data;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++)
                o[i] = g[i] * h3s_det_silu_gradf(tv[i]);
        }
    }
    if (dtemb) h3s_tensor_free(&da);
    if (st != H3S_OK) return h3s_fail_context(st, "%s", op);
    return H3S_OK;
}

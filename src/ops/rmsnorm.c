/* RMSNorm family: the block norms (optionally AdaLN-modulated), the per-head q/k norms and
 * the final output norm.  Exact operation orders and error bounds: docs/numerics/norms.md.
 *
 * Strict (BF16 x, w, table; F32 gradients), per row of H channels:
 *   ss   = fmaf chain of x_k * x_k over k ascending, starting from 0
 *   inv  = 1.0f / sqrtf(ss / (float)H + (float)eps)
 *   t_k  = x_k * inv;  t_k = t_k * w_k;  t_k = t_k * (1.0f + scale_k);  t_k = t_k + shift_k
 *   y_k  = t_k rounded once to y's dtype (BF16 or F32)
 * every step one IEEE FP32 operation (the build uses -ffp-contract=off).  The backward
 * recomputes ss and inv with the same code, so it sees the forward's bits.  Cross-row sums
 * (dw, dtable) go through the canonical tile fold of ops/fold.h (per-row contributions in an
 * [M, H] F32 buffer); the per-head norm's dw uses the dedicated loop head_fold_* below, the
 * same tile structure over token rows with (row, head) pairs inside a tile.
 * Golden (all F64): the same formula in double, no intermediate rounding to float. */
#include <math.h>

#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "ops/fold.h"
#include "ops/ops.h"

/* ---------------------------------------------------------------- validation -------- */

static inline float bf16_at(const uint16_t *p, int64_t i) { return h3s_bf16_value(p[i]); }

/* The activation dtype decides the backend: BF16 strict, F64 golden. */
static h3s_status activation_mode(const char *op, const char *name, const h3s_tensor *t, int *golden) {
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, name);
    if (t->dtype == H3S_F64)
        *golden = 1;
    else if (t->dtype == H3S_BF16)
        *golden = 0;
    else
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, expected BF16 (strict) or F64 (golden)", op, name,
                        h3s_dtype_name(t->dtype));
    return H3S_OK;
}

static h3s_status check_eps(const char *op, double eps) {
    if (!(eps > 0) || !isfinite(eps)) return h3s_fail(H3S_ERR_INVALID, "%s: eps = %g must be finite and > 0", op, eps);
    if (!((float)eps > 0)) return h3s_fail(H3S_ERR_INVALID, "%s: eps = %g underflows to 0 in FP32", op, eps);
    if (!isfinite((float)eps)) return h3s_fail(H3S_ERR_INVALID, "%s: eps = %g overflows to +inf in FP32", op, eps);
    return H3S_OK;
}

/* Everything an rmsnorm call needs once its arguments are known to be consistent. */
typedef struct norm_call {
    int golden;
    int on_device;
    int64_t M, H, R, C;
} norm_call;

/* Checks shared by rmsnorm / final_norm forward and backward.  `y` is checked when
 * `forward`; dy/dx/dw/dtable when not.  `y_f32_only` restricts the strict y to F32. */
static h3s_status check_rmsnorm(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod,
                                double eps, int forward, const h3s_tensor *y, int y_f32_only, const h3s_tensor *dy,
                                const h3s_tensor *dx, const h3s_tensor *dw, const h3s_tensor *dtable, norm_call *c) {
    memset(c, 0, sizeof *c);
    H3S_TRY(activation_mode(op, "x", x, &c->golden));
    h3s_dtype act = c->golden ? H3S_F64 : H3S_BF16, grad = c->golden ? H3S_F64 : H3S_F32;
    H3S_TRY(h3s_check_tensor(op, "x", x, act, 2));
    c->M = x->shape[0];
    c->H = x->shape[1];
    if (c->H == 0) return h3s_fail(H3S_ERR_SHAPE, "%s: x has 0 columns (H must be > 0)", op);
    if (c->H >= ((int64_t)1 << 24))
        return h3s_fail(H3S_ERR_SHAPE, "%s: x has %lld columns, more than FP32 counts exactly", op, (long long)c->H);
    H3S_TRY(check_eps(op, eps));
    int64_t dimH[1] = {c->H}, dimMH[2] = {c->M, c->H};
    if (w) H3S_TRY(h3s_check_shape(op, "w", w, act, 1, dimH));
    const h3s_tensor *table = NULL, *index = NULL;
    if (mod) {
        table = mod->table;
        index = mod->index;
        if (!table) return h3s_fail(H3S_ERR_INVALID, "%s: modulation table is NULL", op);
        H3S_TRY(h3s_check_tensor(op, "table", table, act, 2));
        if (table->shape[1] == 0 || table->shape[1] % c->H != 0)
            return h3s_fail(H3S_ERR_SHAPE, "%s: table has %lld columns, expected a positive multiple of H = %lld", op,
                            (long long)table->shape[1], (long long)c->H);
        c->R = table->shape[0];
        c->C = table->shape[1] / c->H;
        if (mod->shift_chunk < 0 || mod->shift_chunk >= c->C)
            return h3s_fail(H3S_ERR_INVALID, "%s: shift_chunk = %d is outside [0, %lld)", op, mod->shift_chunk,
                            (long long)c->C);
        if (mod->scale_chunk < 0 || mod->scale_chunk >= c->C)
            return h3s_fail(H3S_ERR_INVALID, "%s: scale_chunk = %d is outside [0, %lld)", op, mod->scale_chunk,
                            (long long)c->C);
        if (mod->shift_chunk == mod->scale_chunk)
            return h3s_fail(H3S_ERR_INVALID, "%s: shift_chunk and scale_chunk are both %d", op, mod->shift_chunk);
        if (!index) return h3s_fail(H3S_ERR_INVALID, "%s: modulation index is NULL", op);
        int64_t dimM[1] = {c->M};
        H3S_TRY(h3s_check_shape(op, "index", index, H3S_I64, 1, dimM));
        /* A device index is bounds-checked by the kernel that reads it (cuda_ops.h). */
        if (!index->device) H3S_TRY(h3s_check_index(op, "index", index, c->R));
    }
    if (forward) {
        if (!y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL", op);
        h3s_dtype ydt = c->golden ? H3S_F64 : (y_f32_only || y->dtype == H3S_F32 ? H3S_F32 : H3S_BF16);
        H3S_TRY(h3s_check_shape(op, "y", y, ydt, 2, dimMH));
    } else {
        if (!dy) return h3s_fail(H3S_ERR_INVALID, "%s: dy is NULL", op);
        H3S_TRY(h3s_check_shape(op, "dy", dy, grad, 2, dimMH));
        if (dx) H3S_TRY(h3s_check_shape(op, "dx", dx, grad, 2, dimMH));
        if (dw) {
            if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: dw requested but the norm has no weight (w is NULL)", op);
            H3S_TRY(h3s_check_shape(op, "dw", dw, grad, 1, dimH));
        }
        if (dtable) {
            if (!mod) return h3s_fail(H3S_ERR_INVALID, "%s: dtable requested but there is no modulation", op);
            int64_t dimT[2] = {c->R, c->C * c->H};
            H3S_TRY(h3s_check_shape(op, "dtable", dtable, grad, 2, dimT));
        }
    }
    const h3s_tensor *ts[8] = {x, w, table, y, dy, dx, dw, dtable};
    const char *names[8] = {"x", "w", "table", "y", "dy", "dx", "dw", "dtable"};
    H3S_TRY(h3s_check_placement(op, ts, names, 8, &c->on_device));
    if (index && index->device && !c->on_device)
        return h3s_fail(H3S_ERR_DEVICE, "%s: index is in device memory but the float tensors are on the host", op);
    return H3S_OK;
}

/* The forward's y apart from every operand (host tensors): a row of y written while another thread still reads x,
 * w or a modulation row under it would make the result depend on the thread count. */
static h3s_status check_y_apart(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod,
                                const h3s_tensor *y) {
    const h3s_tensor *ins[4] = {x, w, mod ? mod->table : NULL, mod ? mod->index : NULL};
    const char *names[4] = {"x", "w", "table", "index"};
    return h3s_check_disjoint(op, "y", y, ins, names, 4, 0);
}

/* The backward's outputs on the host: dx may be dy itself (each row of dy is read before that row of dx is written,
 * and the fold of dy into the shift chunk runs first) but meets no other operand; dw and dtable meet nothing.  An
 * output written over an operand another thread still reads would make the result depend on the thread count. */
static h3s_status check_grads_apart(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod,
                                    const h3s_tensor *dy, const h3s_tensor *dx, const h3s_tensor *dw,
                                    const h3s_tensor *dtable) {
    const h3s_tensor *ins[7] = {dy, x, w, mod ? mod->table : NULL, mod ? mod->index : NULL, dw, dtable};
    const char *names[7] = {"dy", "x", "w", "table", "index", "dw", "dtable"};
    if (dx) H3S_TRY(h3s_check_disjoint(op, "dx", dx, ins, names, 7, 1u));
    if (dw) H3S_TRY(h3s_check_disjoint(op, "dw", dw, ins, names, 5, 0));
    if (dtable) H3S_TRY(h3s_check_disjoint(op, "dtable", dtable, ins, names, 6, 0));
    return H3S_OK;
}

/* ---------------------------------------------------------------- strict rows ------- */

/* 1 / sqrt(mean(x^2) + eps) of one BF16 row: FMA chain over k ascending. */
static inline float row_inv_rms_f32(const uint16_t *x, int64_t H, float epsf) {
    float ss = 0.0f;
    for (int64_t k = 0; k < H; k++) {
        float v = bf16_at(x, k);
        ss = fmaf(v, v, ss);
    }
    return 1.0f / sqrtf(ss / (float)H + epsf);
}

static inline double row_inv_rms_f64(const double *x, int64_t H, double eps) {
    double ss = 0.0;
    for (int64_t k = 0; k < H; k++)
        ss += x[k] * x[k];
    return 1.0 / sqrt(ss / (double)H + eps);
}

/* Per-row modulation rows (NULL when absent). */
typedef struct mod_rows {
    const void *shift, *scale;
} mod_rows;

static inline mod_rows mod_row(const h3s_modulation *mod, int64_t m, int64_t H, int64_t C, size_t esize) {
    mod_rows r = {NULL, NULL};
    if (!mod) return r;
    int64_t row = ((const int64_t *)mod->index->data)[m];
    const char *base = (const char *)mod->table->data + (size_t)(row * C * H) * esize;
    r.shift = base + (size_t)(mod->shift_chunk * H) * esize;
    r.scale = base + (size_t)(mod->scale_chunk * H) * esize;
    return r;
}

static void rmsnorm_forward_f32(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, float epsf,
                                const norm_call *c, h3s_tensor *y) {
    const int64_t M = c->M, H = c->H;
    const uint16_t *X = (const uint16_t *)x->data, *W = w ? (const uint16_t *)w->data : NULL;
    const int y32 = y->dtype == H3S_F32;
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *xr = X + m * H;
        float inv = row_inv_rms_f32(xr, H, epsf);
        mod_rows mr = mod_row(mod, m, H, c->C, 2);
        for (int64_t k = 0; k < H; k++) {
            float t = bf16_at(xr, k) * inv;
            if (W) t = t * bf16_at(W, k);
            if (mod) {
                float a = 1.0f + bf16_at((const uint16_t *)mr.scale, k);
                t = t * a;
                t = t + bf16_at((const uint16_t *)mr.shift, k);
            }
            if (y32)
                ((float *)y->data)[m * H + k] = t;
            else
                ((uint16_t *)y->data)[m * H + k] = h3s_bf16_round(t);
        }
    }
}

static void rmsnorm_forward_f64(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                const norm_call *c, h3s_tensor *y) {
    const int64_t M = c->M, H = c->H;
    const double *X = (const double *)x->data, *W = w ? (const double *)w->data : NULL;
    double *Y = (double *)y->data;
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const double *xr = X + m * H;
        double inv = row_inv_rms_f64(xr, H, eps);
        mod_rows mr = mod_row(mod, m, H, c->C, 8);
        for (int64_t k = 0; k < H; k++) {
            double t = xr[k] * inv;
            if (W) t = t * W[k];
            if (mod) t = t * (1.0 + ((const double *)mr.scale)[k]) + ((const double *)mr.shift)[k];
            Y[m * H + k] = t;
        }
    }
}

/* Backward of one strict call.  cdw / csc: [M, H] contribution buffers (or NULL). */
static void rmsnorm_backward_f32(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, float epsf,
                                 const norm_call *c, const h3s_tensor *dy, h3s_tensor *dx, float *cdw, float *csc) {
    const int64_t M = c->M, H = c->H;
    const uint16_t *X = (const uint16_t *)x->data, *W = w ? (const uint16_t *)w->data : NULL;
    const float *DY = (const float *)dy->data;
    float *DX = dx ? (float *)dx->data : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *xr = X + m * H;
        const float *dyr = DY + m * H;
        float inv = row_inv_rms_f32(xr, H, epsf);
        mod_rows mr = mod_row(mod, m, H, c->C, 2);
        float dot = 0.0f;
        for (int64_t k = 0; k < H; k++) {
            float xh = bf16_at(xr, k) * inv;
            float wk = W ? bf16_at(W, k) : 1.0f;
            float a = mod ? 1.0f + bf16_at((const uint16_t *)mr.scale, k) : 1.0f;
            float g = dyr[k] * a; /* dL/d(xhat*w) */
            float gx = g * wk;    /* dL/d(xhat) */
            dot = fmaf(gx, xh, dot);
            if (cdw) cdw[m * H + k] = g * xh;
            if (csc) csc[m * H + k] = dyr[k] * (xh * wk);
        }
        if (!DX) continue;
        float mean = dot / (float)H;
        for (int64_t k = 0; k < H; k++) {
            float xh = bf16_at(xr, k) * inv;
            float wk = W ? bf16_at(W, k) : 1.0f;
            float a = mod ? 1.0f + bf16_at((const uint16_t *)mr.scale, k) : 1.0f;
            float gx = (dyr[k] * a) * wk;
            DX[m * H + k] = inv * (gx - xh * mean);
        }
    }
}

static void rmsnorm_backward_f64(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                 const norm_call *c, const h3s_tensor *dy, h3s_tensor *dx, double *cdw, double *csc) {
    const int64_t M = c->M, H = c->H;
    const double *X = (const double *)x->data, *W = w ? (const double *)w->data : NULL;
    const double *DY = (const double *)dy->data;
    double *DX = dx ? (double *)dx->data : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const double *xr = X + m * H, *dyr = DY + m * H;
        double inv = row_inv_rms_f64(xr, H, eps);
        mod_rows mr = mod_row(mod, m, H, c->C, 8);
        double dot = 0.0;
        for (int64_t k = 0; k < H; k++) {
            double xh = xr[k] * inv, wk = W ? W[k] : 1.0;
            double a = mod ? 1.0 + ((const double *)mr.scale)[k] : 1.0;
            double g = dyr[k] * a, gx = g * wk;
            dot += gx * xh;
            if (cdw) cdw[m * H + k] = g * xh;
            if (csc) csc[m * H + k] = dyr[k] * xh * wk;
        }
        if (!DX) continue;
        double mean = dot / (double)H;
        for (int64_t k = 0; k < H; k++) {
            double xh = xr[k] * inv, wk = W ? W[k] : 1.0;
            double a = mod ? 1.0 + ((const double *)mr.scale)[k] : 1.0;
            DX[m * H + k] = inv * (dyr[k] * a * wk - xh * mean);
        }
    }
}

/* ---------------------------------------------------------------- rmsnorm entry ----- */

static h3s_status rmsnorm_forward_impl(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                       h3s_tensor *y, const norm_call *c) {
    if (c->golden)
        rmsnorm_forward_f64(x, w, mod, eps, c, y);
    else
        rmsnorm_forward_f32(x, w, mod, (float)eps, c, y);
    return H3S_OK;
}

static h3s_status rmsnorm_backward_impl(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                        const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *dtable,
                                        const norm_call *c) {
    const int64_t M = c->M, H = c->H;
    const size_t es = c->golden ? sizeof(double) : sizeof(float);
    if (!dx && !dw && !dtable) return H3S_OK;
    /* Temporaries first: an allocation failure must leave every output untouched. */
    void *cdw = NULL, *csc = NULL;
    if (dw) {
        cdw = h3s_malloc((size_t)(M * H), es);
        if (!cdw) return H3S_ERR_NOMEM;
    }
    if (dtable) {
        csc = h3s_malloc((size_t)(M * H), es);
        if (!csc) {
            free(cdw);
            return H3S_ERR_NOMEM;
        }
    }
    /* The shift chunk is the fold of dy itself: it runs before the rows write dx, which may be dy (the row kernel
     * reads a row of dy before writing it). */
    const int64_t *idx = dtable ? (const int64_t *)mod->index->data : NULL;
    const int64_t ldo = c->C * H, R = c->R;
    if (dtable) {
        if (c->golden)
            h3s_fold_indexed_f64((const double *)dy->data, idx, M, H, H, R,
                                 (double *)dtable->data + mod->shift_chunk * H, ldo);
        else
            h3s_fold_indexed_f32((const float *)dy->data, idx, M, H, H, R, (float *)dtable->data + mod->shift_chunk * H,
                                 ldo);
    }
    if (c->golden)
        rmsnorm_backward_f64(x, w, mod, eps, c, dy, dx, (double *)cdw, (double *)csc);
    else
        rmsnorm_backward_f32(x, w, mod, (float)eps, c, dy, dx, (float *)cdw, (float *)csc);
    if (dw) {
        if (c->golden)
            h3s_fold_columns_f64((const double *)cdw, M, H, H, (double *)dw->data);
        else
            h3s_fold_columns_f32((const float *)cdw, M, H, H, (float *)dw->data);
    }
    if (dtable) {
        if (c->golden)
            h3s_fold_indexed_f64((const double *)csc, idx, M, H, H, R, (double *)dtable->data + mod->scale_chunk * H,
                                 ldo);
        else
            h3s_fold_indexed_f32((const float *)csc, idx, M, H, H, R, (float *)dtable->data + mod->scale_chunk * H,
                                 ldo);
    }
    free(cdw);
    free(csc);
    return H3S_OK;
}

h3s_status h3s_rmsnorm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                               h3s_tensor *y) {
    static const char op[] = "rmsnorm_forward";
    norm_call c;
    H3S_TRY(check_rmsnorm(op, x, w, mod, eps, 1, y, 0, NULL, NULL, NULL, NULL, &c));
    if (c.on_device) return h3s_cuda_rmsnorm_forward(x, w, mod, eps, y);
    H3S_TRY(check_y_apart(op, x, w, mod, y));
    return rmsnorm_forward_impl(x, w, mod, eps, y, &c);
}

h3s_status h3s_rmsnorm_backward_add(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                    const h3s_tensor *dy, const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw,
                                    h3s_tensor *dtable) {
    static const char op[] = "rmsnorm_backward";
    norm_call c;
    H3S_TRY(check_rmsnorm(op, x, w, mod, eps, 0, NULL, 0, dy, dx, dw, dtable, &c));
    if (dx_add) {
        if (!dx) return h3s_fail(H3S_ERR_INVALID, "%s: dx_add is given but dx is NULL", op);
        H3S_TRY(h3s_check_shape(op, "dx_add", dx_add, dy->dtype, 2, dy->shape));
        const h3s_tensor *ts[2] = {dx, dx_add};
        const char *names[2] = {"dx", "dx_add"};
        int on_device = 0;
        H3S_TRY(h3s_check_placement(op, ts, names, 2, &on_device));
        if (h3s_tensors_overlap(dx_add, dx) || h3s_tensors_overlap(dx_add, dy))
            return h3s_fail(H3S_ERR_INVALID, "%s: dx_add overlaps dx or dy", op);
    }
    if (c.on_device) return h3s_cuda_rmsnorm_backward(x, w, mod, eps, dy, dx_add, dx, dw, dtable);
    H3S_TRY(check_grads_apart(op, x, w, mod, dy, dx, dw, dtable));
    H3S_TRY(rmsnorm_backward_impl(x, w, mod, eps, dy, dx, dw, dtable, &c));
    return dx_add ? h3s_grad_add(dx_add, dx, dx) : H3S_OK; /* dx_add + dx: grad_add's one addition per element */
}

h3s_status h3s_rmsnorm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *dtable) {
    return h3s_rmsnorm_backward_add(x, w, mod, eps, dy, NULL, dx, dw, dtable);
}

/* ---------------------------------------------------------------- final norm -------- */

/* norm_out: weight required, table [T, 2H] = (shift | scale), y F32 (strict). */
h3s_status h3s_final_norm_modulation(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                     const h3s_tensor *index, h3s_modulation *mod) {
    if (!x) return h3s_fail(H3S_ERR_INVALID, "%s: x is NULL", op);
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    if (!table) return h3s_fail(H3S_ERR_INVALID, "%s: table is NULL", op);
    if (!index) return h3s_fail(H3S_ERR_INVALID, "%s: index is NULL", op);
    if (x->ndim == 2 && table->ndim == 2 && table->shape[1] != 2 * x->shape[1])
        return h3s_fail(H3S_ERR_SHAPE, "%s: table has %lld columns, expected 2 * H = %lld (shift | scale)", op,
                        (long long)table->shape[1], (long long)(2 * x->shape[1]));
    mod->table = table;
    mod->index = index;
    mod->shift_chunk = 0;
    mod->scale_chunk = 1;
    return H3S_OK;
}

h3s_status h3s_final_norm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                  const h3s_tensor *index, double eps, h3s_tensor *y) {
    static const char op[] = "final_norm_forward";
    h3s_modulation mod;
    norm_call c;
    H3S_TRY(h3s_final_norm_modulation(op, x, w, table, index, &mod));
    H3S_TRY(check_rmsnorm(op, x, w, &mod, eps, 1, y, 1, NULL, NULL, NULL, NULL, &c));
    if (c.on_device) return h3s_cuda_final_norm_forward(x, w, table, index, eps, y);
    H3S_TRY(check_y_apart(op, x, w, &mod, y));
    return rmsnorm_forward_impl(x, w, &mod, eps, y, &c);
}

h3s_status h3s_final_norm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                   const h3s_tensor *index, double eps, const h3s_tensor *dy, h3s_tensor *dx,
                                   h3s_tensor *dw, h3s_tensor *dtable) {
    static const char op[] = "final_norm_backward";
    h3s_modulation mod;
    norm_call c;
    H3S_TRY(h3s_final_norm_modulation(op, x, w, table, index, &mod));
    H3S_TRY(check_rmsnorm(op, x, w, &mod, eps, 0, NULL, 1, dy, dx, dw, dtable, &c));
    if (c.on_device) return h3s_cuda_final_norm_backward(x, w, table, index, eps, dy, dx, dw, dtable);
    H3S_TRY(check_grads_apart(op, x, w, &mod, dy, dx, dw, dtable));
    return rmsnorm_backward_impl(x, w, &mod, eps, dy, dx, dw, dtable, &c);
}

/* ---------------------------------------------------------------- per-head norm ----- */

static h3s_status check_head_rmsnorm(const char *op, const h3s_tensor *x, int64_t heads, const h3s_tensor *w,
                                     double eps, int forward, const h3s_tensor *y, const h3s_tensor *dy,
                                     const h3s_tensor *dx, const h3s_tensor *dw, norm_call *c, int64_t *D) {
    memset(c, 0, sizeof *c);
    H3S_TRY(activation_mode(op, "x", x, &c->golden));
    h3s_dtype act = c->golden ? H3S_F64 : H3S_BF16, grad = c->golden ? H3S_F64 : H3S_F32;
    H3S_TRY(h3s_check_tensor(op, "x", x, act, 2));
    c->M = x->shape[0];
    c->H = x->shape[1];
    if (heads <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: heads = %lld must be > 0", op, (long long)heads);
    if (c->H == 0 || c->H % heads != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: x has %lld columns, expected a positive multiple of heads = %lld", op,
                        (long long)c->H, (long long)heads);
    *D = c->H / heads;
    if (*D >= ((int64_t)1 << 24))
        return h3s_fail(H3S_ERR_SHAPE, "%s: head_dim %lld is more than FP32 counts exactly", op, (long long)*D);
    H3S_TRY(check_eps(op, eps));
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    int64_t dimD[1] = {*D}, dimMH[2] = {c->M, c->H};
    H3S_TRY(h3s_check_shape(op, "w", w, act, 1, dimD));
    if (forward) {
        if (!y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL", op);
        H3S_TRY(h3s_check_shape(op, "y", y, act, 2, dimMH));
    } else {
        if (!dy) return h3s_fail(H3S_ERR_INVALID, "%s: dy is NULL", op);
        H3S_TRY(h3s_check_shape(op, "dy", dy, grad, 2, dimMH));
        if (dx) H3S_TRY(h3s_check_shape(op, "dx", dx, grad, 2, dimMH));
        if (dw) H3S_TRY(h3s_check_shape(op, "dw", dw, grad, 1, dimD));
    }
    const h3s_tensor *ts[6] = {x, w, y, dy, dx, dw};
    const char *names[6] = {"x", "w", "y", "dy", "dx", "dw"};
    return h3s_check_placement(op, ts, names, 6, &c->on_device);
}

/* dw of the per-head norm.  contrib is [M, heads * D] (token row m, head h, channel d at
 * (m * heads + h) * D + d).  Tiles are 256 *token* rows (the same rows as every other fold,
 * so a sequence-parallel split by token rows keeps the order); inside a tile the partial is
 * one chain over the (row, head) pairs in ascending row, then ascending head order, starting
 * from the first pair's value; tile partials are folded in ascending tile order starting
 * from tile 0's.  Threads split the D channels only.  fold.h's h3s_fold_columns would cut
 * the [M * heads, D] view into tiles of 256 pairs instead, hence this dedicated loop. */
#define HEAD_FOLD_COLS 64
#define DEFINE_HEAD_FOLD(NAME, T)                                                                                      \
    static void NAME(const T *contrib, int64_t M, int64_t heads, int64_t D, T *out) {                                  \
        int64_t nblocks = (D + HEAD_FOLD_COLS - 1) / HEAD_FOLD_COLS;                                                   \
        _Pragma("omp parallel for schedule(static)") for (int64_t cb = 0; cb < nblocks; cb++) {                        \
            int64_t d0 = cb * HEAD_FOLD_COLS, d1 = d0 + HEAD_FOLD_COLS < D ? d0 + HEAD_FOLD_COLS : D;                  \
            T total[HEAD_FOLD_COLS], part[HEAD_FOLD_COLS];                                                             \
            for (int64_t d = d0; d < d1; d++)                                                                          \
                total[d - d0] = 0;                                                                                     \
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {                                                        \
                int64_t t1 = t0 + H3S_FOLD_TILE < M ? t0 + H3S_FOLD_TILE : M;                                          \
                int64_t p0 = t0 * heads, p1 = t1 * heads; /* (row, head) pairs of the tile */                          \
                for (int64_t d = d0; d < d1; d++)                                                                      \
                    part[d - d0] = contrib[p0 * D + d];                                                                \
                for (int64_t p = p0 + 1; p < p1; p++)                                                                  \
                    for (int64_t d = d0; d < d1; d++)                                                                  \
                        part[d - d0] += contrib[p * D + d];                                                            \
                if (t0 == 0)                                                                                           \
                    for (int64_t d = d0; d < d1; d++)                                                                  \
                        total[d - d0] = part[d - d0];                                                                  \
                else                                                                                                   \
                    for (int64_t d = d0; d < d1; d++)                                                                  \
                        total[d - d0] += part[d - d0];                                                                 \
            }                                                                                                          \
            for (int64_t d = d0; d < d1; d++)                                                                          \
                out[d] = total[d - d0];                                                                                \
        }                                                                                                              \
    }
DEFINE_HEAD_FOLD(head_fold_f32, float)
DEFINE_HEAD_FOLD(head_fold_f64, double)

h3s_status h3s_head_rmsnorm_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                    h3s_tensor *y) {
    static const char op[] = "head_rmsnorm_forward";
    norm_call c;
    int64_t D;
    H3S_TRY(check_head_rmsnorm(op, x, heads, w, eps, 1, y, NULL, NULL, NULL, &c, &D));
    if (c.on_device) return h3s_cuda_head_rmsnorm_forward(x, heads, w, eps, y);
    H3S_TRY(check_y_apart(op, x, w, NULL, y));
    const int64_t P = c.M * heads; /* (row, head) pairs; each is one independent D-channel norm */
    if (c.golden) {
        const double *X = (const double *)x->data, *W = (const double *)w->data;
        double *Y = (double *)y->data;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            double inv = row_inv_rms_f64(X + p * D, D, eps);
            for (int64_t d = 0; d < D; d++)
                Y[p * D + d] = X[p * D + d] * inv * W[d];
        }
    } else {
        const uint16_t *X = (const uint16_t *)x->data, *W = (const uint16_t *)w->data;
        uint16_t *Y = (uint16_t *)y->data;
        const float epsf = (float)eps;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            float inv = row_inv_rms_f32(X + p * D, D, epsf);
            for (int64_t d = 0; d < D; d++) {
                float t = bf16_at(X, p * D + d) * inv;
                t = t * bf16_at(W, d);
                Y[p * D + d] = h3s_bf16_round(t);
            }
        }
    }
    return H3S_OK;
}

h3s_status h3s_head_rmsnorm_backward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                     const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw) {
    return h3s_head_rmsnorm_backward_rounded(x, heads, w, eps, dy, dx, NULL, dw);
}

h3s_status h3s_head_rmsnorm_backward_rounded(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                             const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dx_bf16,
                                             h3s_tensor *dw) {
    static const char op[] = "head_rmsnorm_backward";
    norm_call c;
    int64_t D;
    H3S_TRY(check_head_rmsnorm(op, x, heads, w, eps, 0, NULL, dy, dx, dw, &c, &D));
    if (dx_bf16) {
        if (c.golden) return h3s_fail(H3S_ERR_INVALID, "%s: dx_bf16 needs the strict variant", op);
        H3S_TRY(h3s_check_shape(op, "dx_bf16", dx_bf16, H3S_BF16, 2, dy->shape));
        if ((dx_bf16->device != 0) != (c.on_device != 0))
            return h3s_fail(H3S_ERR_DEVICE, "%s: dx_bf16 is not in the memory of x, dy and dx", op);
        const h3s_tensor *in[5] = {x, w, dy, dx, dw};
        for (int i = 0; i < 5; i++)
            if (h3s_tensors_overlap(dx_bf16, in[i]))
                return h3s_fail(H3S_ERR_INVALID, "%s: dx_bf16 overlaps an operand", op);
    }
    if (c.on_device) return h3s_cuda_head_rmsnorm_backward(x, heads, w, eps, dy, dx, dx_bf16, dw);
    if (dx_bf16 && !dx)
        return h3s_fail(H3S_ERR_INVALID, "%s: dx is NULL; dx_bf16 alone is a CUDA-backend option (the host writes dx)",
                        op);
    const int64_t P = c.M * heads;
    void *cdw = NULL;
    if (dw) {
        cdw = h3s_malloc((size_t)(P * D), c.golden ? sizeof(double) : sizeof(float));
        if (!cdw) return H3S_ERR_NOMEM;
    }
    if (c.golden) {
        const double *X = (const double *)x->data, *W = (const double *)w->data, *DY = (const double *)dy->data;
        double *DX = dx ? (double *)dx->data : NULL, *CW = (double *)cdw;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            const double *xr = X + p * D, *dyr = DY + p * D;
            double inv = row_inv_rms_f64(xr, D, eps), dot = 0.0;
            for (int64_t d = 0; d < D; d++) {
                double xh = xr[d] * inv;
                dot += dyr[d] * W[d] * xh;
                if (CW) CW[p * D + d] = dyr[d] * xh;
            }
            if (!DX) continue;
            double mean = dot / (double)D;
            for (int64_t d = 0; d < D; d++)
                DX[p * D + d] = inv * (dyr[d] * W[d] - xr[d] * inv * mean);
        }
        if (dw) head_fold_f64(CW, c.M, heads, D, (double *)dw->data);
    } else {
        const uint16_t *X = (const uint16_t *)x->data, *W = (const uint16_t *)w->data;
        const float *DY = (const float *)dy->data;
        float *DX = dx ? (float *)dx->data : NULL, *CW = (float *)cdw;
        const float epsf = (float)eps;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            const uint16_t *xr = X + p * D;
            const float *dyr = DY + p * D;
            float inv = row_inv_rms_f32(xr, D, epsf), dot = 0.0f;
            for (int64_t d = 0; d < D; d++) {
                float xh = bf16_at(xr, d) * inv;
                float gx = dyr[d] * bf16_at(W, d);
                dot = fmaf(gx, xh, dot);
                if (CW) CW[p * D + d] = dyr[d] * xh;
            }
            if (!DX) continue;
            float mean = dot / (float)D;
            for (int64_t d = 0; d < D; d++) {
                float xh = bf16_at(xr, d) * inv;
                float gx = dyr[d] * bf16_at(W, d);
                DX[p * D + d] = inv * (gx - xh * mean);
            }
        }
        if (dw) head_fold_f32(CW, c.M, heads, D, (float *)dw->data);
    }
    free(cdw);
    /* dx rounded as the CUDA backend's linear rounds its gradient operand (h3s_bf16_round per element) */
    return dx_bf16 ? h3s_tensor_convert(dx, dx_bf16) : H3S_OK;
}

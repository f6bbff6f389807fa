/* The h3s_cuda_<op> twins of ops/ops.h for CUDA builds (cuda_none.c serves builds without
 * nvcc).  The public entry points validate their arguments and dispatch here when the float
 * tensors are device tensors; these wrappers still check what they rely on (device placement,
 * dtypes, ranks and the shapes they read) so that a direct call fails closed too, then queue
 * the kernels on the backend's stream (cuda_internal.h) and return without waiting.
 *
 * Index and mask tensors (I64, BOOL) may be host tensors (copied to the device through the
 * content-keyed cache of cuda_runtime.cu; the entry points have bounds-checked them) or device
 * tensors; either way every kernel that reads an index checks it and reports a bad one
 * through the error flag, which h3s_cuda_sync / h3s_cuda_download turn into H3S_ERR_INDEX. */
#ifdef H3S_WITH_CUDA
#include <math.h>

#include "core/core.h"
#include "cuda/cuda_extra.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_ops.h"

/* ------------------------------------------------------------------ argument checks */

static h3s_status dev_tensor(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dt, int ndim, int64_t d0,
                             int64_t d1, int64_t d2) {
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, name);
    if (t->device != 1)
        return h3s_fail(H3S_ERR_DEVICE,
                        "%s: %s is not in device memory (device = %d); the CUDA backend needs every "
                        "float tensor on the device",
                        op, name, t->device);
    if (t->dtype != dt)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, the CUDA backend expects %s here", op, name,
                        h3s_dtype_name(t->dtype), h3s_dtype_name(dt));
    if (t->ndim != ndim) return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %d dims, expected %d", op, name, t->ndim, ndim);
    const int64_t want[3] = {d0, d1, d2};
    for (int d = 0; d < ndim && d < 3; d++) {
        if (t->shape[d] < 0) return h3s_fail(H3S_ERR_SHAPE, "%s: %s has a negative dimension", op, name);
        if (want[d] >= 0 && t->shape[d] != want[d])
            return h3s_fail(H3S_ERR_SHAPE, "%s: %s has shape[%d] = %lld, expected %lld", op, name, d,
                            (long long)t->shape[d], (long long)want[d]);
    }
    if (!t->data && h3s_tensor_numel(t) > 0) return h3s_fail(H3S_ERR_INVALID, "%s: %s has no data", op, name);
    return H3S_OK;
}

/* Optional tensor: NULL is fine. */
static h3s_status dev_opt(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dt, int ndim, int64_t d0,
                          int64_t d1) {
    return t ? dev_tensor(op, name, t, dt, ndim, d0, d1, -1) : H3S_OK;
}

/* Index / mask tensor of `dt` with `numel` elements, on the device afterwards. */
static h3s_status index_tensor(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dt, int64_t numel,
                               const void **dptr) {
    *dptr = NULL;
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, name);
    if (t->dtype != dt)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, expected %s", op, name, h3s_dtype_name(t->dtype),
                        h3s_dtype_name(dt));
    if (h3s_tensor_numel(t) != numel)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %lld elements, expected %lld", op, name,
                        (long long)h3s_tensor_numel(t), (long long)numel);
    if (t->device != 0 && t->device != 1) return h3s_fail(H3S_ERR_INVALID, "%s: %s has device %d", op, name, t->device);
    return h3c_index_on_device(op, t, dptr);
}

static h3s_status check_eps(const char *op, double eps) {
    if (!(eps > 0) || !isfinite(eps) || !((float)eps > 0))
        return h3s_fail(H3S_ERR_INVALID, "%s: eps = %g must be finite and > 0 in FP32", op, eps);
    return H3S_OK;
}

static const void *dp(const h3s_tensor *t) { return t ? t->data : NULL; }

/* ------------------------------------------------------------------ linear */

/* x [M, K] and w [N, K] of one dtype, BF16 or F32 (x's decides). */
static h3s_status linear_common(const char *op, const h3s_tensor *x, const h3s_tensor *w, h3s_dtype *dt, int64_t *M,
                                int64_t *K, int64_t *N) {
    H3S_TRY(h3c_init(op));
    if (!x) return h3s_fail(H3S_ERR_INVALID, "%s: x is NULL", op);
    *dt = x->dtype;
    if (*dt != H3S_BF16 && *dt != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "%s: x has dtype %s; the CUDA backend runs BF16 and F32 linears", op,
                        h3s_dtype_name(*dt));
    H3S_TRY(dev_tensor(op, "x", x, *dt, 2, -1, -1, -1));
    *M = x->shape[0];
    *K = x->shape[1];
    H3S_TRY(dev_tensor(op, "w", w, *dt, 2, -1, *K, -1));
    *N = w->shape[0];
    return H3S_OK;
}

h3s_status h3s_cuda_linear_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *y) {
    static const char op[] = "linear_forward";
    h3s_dtype dt = H3S_F32;
    int64_t M = 0, K = 0, N = 0;
    H3S_TRY(linear_common(op, x, w, &dt, &M, &K, &N));
    H3S_TRY(dev_opt(op, "b", b, dt, 1, N, -1));
    H3S_TRY(dev_tensor(op, "y", y, dt, 2, M, N, -1));
    if (dt == H3S_BF16) return h3c_gemm_bf16_forward(op, M, N, K, x->data, w->data, dp(b), y->data);
    return h3c_sgemm_forward(op, M, N, K, x->data, w->data, (const float *)dp(b), y->data);
}

int h3s_cuda_linear_bf16_dy_only(int64_t N, int64_t K) {
    return h3c_gemm_wgmma_shape(N, K) && h3s_get_grad_operands() == H3S_GRAD_OPERANDS_BF16;
}

h3s_status h3s_cuda_linear_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                    const h3s_tensor *dy_bf16, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *db) {
    static const char op[] = "linear_backward";
    h3s_dtype dt = H3S_F32;
    int64_t M = 0, K = 0, N = 0;
    H3S_TRY(linear_common(op, x, w, &dt, &M, &K, &N));
    if (!dy) { /* dy_bf16 alone: only where the kernels read nothing else */
        if (!dy_bf16) return h3s_fail(H3S_ERR_INVALID, "%s: dy is NULL", op);
        if (dt != H3S_BF16 || !h3s_cuda_linear_bf16_dy_only(N, K))
            return h3s_fail(H3S_ERR_INVALID,
                            "%s: dy is NULL, but this backward reads F32 dy (%s); only the BF16 variant with BF16 "
                            "gradient operands on a shape whose K and N are multiples of 8 computes from dy_bf16 alone",
                            op,
                            dt != H3S_BF16                                       ? "F32 variant"
                            : h3s_get_grad_operands() == H3S_GRAD_OPERANDS_SPLIT ? "split gradient operands"
                                                                                 : "K or N not a multiple of 8");
        if (db) return h3s_fail(H3S_ERR_INVALID, "%s: db sums F32 dy, which is NULL", op);
    }
    H3S_TRY(dev_opt(op, "dy", dy, H3S_F32, 2, M, N));
    H3S_TRY(dev_opt(op, "dx", dx, H3S_F32, 2, M, K));
    /* dw in BF16 (the BF16 variant only): the F32 fold rounded once as it is stored */
    const int dw_bf16 = dw && dt == H3S_BF16 && dw->dtype == H3S_BF16;
    H3S_TRY(dev_opt(op, "dw", dw, dw_bf16 ? H3S_BF16 : H3S_F32, 2, N, K));
    H3S_TRY(dev_opt(op, "db", db, H3S_F32, 1, N, -1));
    if (dy_bf16 && dt != H3S_BF16) return h3s_fail(H3S_ERR_INVALID, "%s: dy_bf16 is for the BF16 variant only", op);
    H3S_TRY(dev_opt(op, "dy_bf16", dy_bf16, H3S_BF16, 2, M, N));
    if (dt == H3S_BF16) {
        if (dx || dw)
            H3S_TRY(h3c_gemm_bf16_backward(op, M, N, K, (const float *)dp(dy), dp(dy_bf16), w->data, x->data,
                                           dx ? dx->data : NULL, dw ? dw->data : NULL, dw_bf16));
    } else {
        if (dx) H3S_TRY(h3c_sgemm_dx(op, M, N, K, dy->data, w->data, dx->data));
        if (dw) H3S_TRY(h3c_sgemm_dw(op, M, N, K, dy->data, x->data, dw->data));
    }
    if (db) {
        h3c_fold_args f;
        memset(&f, 0, sizeof f);
        f.mode = H3C_FOLD_COPY, f.M = M, f.N = N, f.R = 1, f.dy = dy->data, f.ld_dy = N, f.out = db->data, f.ldo = N;
        H3S_TRY(h3c_fold(op, &f));
    }
    return H3S_OK;
}

/* ------------------------------------------------------------------ rmsnorm family */

typedef struct norm_geom {
    int64_t M, H, R, C, ld_table, shift_off, scale_off;
    const void *table;
    const int64_t *index;
} norm_geom;

static h3s_status norm_common(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod,
                              double eps, norm_geom *g) {
    memset(g, 0, sizeof *g);
    H3S_TRY(h3c_init(op));
    H3S_TRY(check_eps(op, eps));
    H3S_TRY(dev_tensor(op, "x", x, H3S_BF16, 2, -1, -1, -1));
    g->M = x->shape[0];
    g->H = x->shape[1];
    if (g->H <= 0) return h3s_fail(H3S_ERR_SHAPE, "%s: x has 0 columns", op);
    H3S_TRY(dev_opt(op, "w", w, H3S_BF16, 1, g->H, -1));
    if (mod) {
        H3S_TRY(dev_tensor(op, "table", mod->table, H3S_BF16, 2, -1, -1, -1));
        const int64_t cols = mod->table->shape[1];
        if (cols == 0 || cols % g->H)
            return h3s_fail(H3S_ERR_SHAPE, "%s: table has %lld columns, not a positive multiple of H = %lld", op,
                            (long long)cols, (long long)g->H);
        g->R = mod->table->shape[0];
        g->C = cols / g->H;
        if (mod->shift_chunk < 0 || mod->shift_chunk >= g->C || mod->scale_chunk < 0 || mod->scale_chunk >= g->C ||
            mod->shift_chunk == mod->scale_chunk)
            return h3s_fail(H3S_ERR_INVALID, "%s: shift_chunk %d / scale_chunk %d invalid for %lld chunks", op,
                            mod->shift_chunk, mod->scale_chunk, (long long)g->C);
        g->ld_table = cols;
        g->shift_off = (int64_t)mod->shift_chunk * g->H;
        g->scale_off = (int64_t)mod->scale_chunk * g->H;
        g->table = mod->table->data;
        const void *idx = NULL;
        H3S_TRY(index_tensor(op, "index", mod->index, H3S_I64, g->M, &idx));
        g->index = (const int64_t *)idx;
    }
    return H3S_OK;
}

static h3s_status rmsnorm_forward_impl(const char *op, int code, const h3s_tensor *x, const h3s_tensor *w,
                                       const h3s_modulation *mod, double eps, h3s_tensor *y, int y_f32_only) {
    norm_geom g;
    H3S_TRY(norm_common(op, x, w, mod, eps, &g));
    if (!y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL", op);
    if (y_f32_only || y->dtype == H3S_F32)
        H3S_TRY(dev_tensor(op, "y", y, H3S_F32, 2, g.M, g.H, -1));
    else
        H3S_TRY(dev_tensor(op, "y", y, H3S_BF16, 2, g.M, g.H, -1));
    return h3c_rmsnorm_forward(op, code, g.M, g.H, x->data, dp(w), g.table, g.index, g.R, g.ld_table, g.shift_off,
                               g.scale_off, (float)eps, y->data, y->dtype);
}

static h3s_status rmsnorm_backward_impl(const char *op, int code, const h3s_tensor *x, const h3s_tensor *w,
                                        const h3s_modulation *mod, double eps, const h3s_tensor *dy,
                                        const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *dtable) {
    norm_geom g;
    H3S_TRY(norm_common(op, x, w, mod, eps, &g));
    H3S_TRY(dev_tensor(op, "dy", dy, H3S_F32, 2, g.M, g.H, -1));
    H3S_TRY(dev_opt(op, "dx", dx, H3S_F32, 2, g.M, g.H));
    H3S_TRY(dev_opt(op, "dx_add", dx_add, H3S_F32, 2, g.M, g.H));
    if (dx_add && (!dx || h3s_tensors_overlap(dx_add, dx) || h3s_tensors_overlap(dx_add, dy)))
        return h3s_fail(H3S_ERR_INVALID, "%s: dx_add needs dx, and may overlap neither dx nor dy", op);
    if (dw && !w) return h3s_fail(H3S_ERR_INVALID, "%s: dw requested but the norm has no weight", op);
    H3S_TRY(dev_opt(op, "dw", dw, H3S_F32, 1, g.H, -1));
    if (dtable && !mod) return h3s_fail(H3S_ERR_INVALID, "%s: dtable requested but there is no modulation", op);
    H3S_TRY(dev_opt(op, "dtable", dtable, H3S_F32, 2, g.R, g.C * g.H));

    void *inv = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)(g.M > 0 ? g.M : 1) * sizeof(float), &inv));
    /* dx may alias dy (the rows kernel reads a row of dy before writing it); the folds read dy
     * too, so then they run before dx is written. */
    const int late_dx = dx && (dw || dtable) && h3s_tensors_overlap(dx, dy);
    h3s_status st = h3c_rmsnorm_backward_rows(op, code, g.M, g.H, x->data, dp(w), g.table, g.index, g.R, g.ld_table,
                                              g.scale_off, (float)eps, dy->data, (const float *)dp(dx_add),
                                              late_dx || !dx ? NULL : dx->data, inv);
    h3c_fold_args f;
    memset(&f, 0, sizeof f);
    f.code = code, f.M = g.M, f.N = g.H, f.dy = dy->data, f.ld_dy = g.H, f.x = x->data, f.ld_x = g.H;
    f.inv = inv, f.w = dp(w), f.index = g.index, f.index_limit = g.R;
    if (st == H3S_OK && dw && dtable && g.index) {
        /* the weight's, the shift chunk's and the scale chunk's sums in one pass over dy and x (the three folds'
         * bits) */
        f.mode = H3C_FOLD_NORM_ALL, f.R = g.R, f.indexed = 1, f.ldo = g.C * g.H;
        f.table = g.table, f.ld_table = g.ld_table, f.scale_off = g.scale_off;
        f.out = (float *)dtable->data + g.shift_off;
        f.out2 = (float *)dtable->data + g.scale_off;
        f.out3 = dw->data;
        st = h3c_fold(op, &f);
        dw = NULL, dtable = NULL;
    }
    if (st == H3S_OK && dw) {
        f.mode = H3C_FOLD_RMS_DW, f.R = 1, f.indexed = 0;
        f.table = g.table, f.ld_table = g.ld_table, f.scale_off = g.scale_off;
        f.out = dw->data, f.ldo = g.H;
        st = h3c_fold(op, &f);
    }
    if (st == H3S_OK && dtable) { /* the shift chunk (fold of dy) and the scale chunk in one pass over dy and x */
        f.table = NULL;
        f.R = g.R, f.indexed = 1, f.ldo = g.C * g.H;
        f.mode = H3C_FOLD_SHIFT_SCALE;
        f.out = (float *)dtable->data + g.shift_off;
        f.out2 = (float *)dtable->data + g.scale_off;
        st = h3c_fold(op, &f);
    }
    if (st == H3S_OK && late_dx)
        st = h3c_rmsnorm_backward_rows(op, code, g.M, g.H, x->data, dp(w), g.table, g.index, g.R, g.ld_table,
                                       g.scale_off, (float)eps, dy->data, (const float *)dp(dx_add), dx->data, inv);
    h3c_ws_free(inv);
    return st;
}

h3s_status h3s_cuda_rmsnorm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                    h3s_tensor *y) {
    return rmsnorm_forward_impl("rmsnorm_forward", H3C_CODE_RMSNORM_FORWARD, x, w, mod, eps, y, 0);
}

h3s_status h3s_cuda_rmsnorm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                     const h3s_tensor *dy, const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw,
                                     h3s_tensor *dtable) {
    return rmsnorm_backward_impl("rmsnorm_backward", H3C_CODE_RMSNORM_BACKWARD, x, w, mod, eps, dy, dx_add, dx, dw,
                                 dtable);
}

h3s_status h3s_cuda_final_norm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                       const h3s_tensor *index, double eps, h3s_tensor *y) {
    static const char op[] = "final_norm_forward";
    h3s_modulation mod;
    H3S_TRY(h3s_final_norm_modulation(op, x, w, table, index, &mod));
    return rmsnorm_forward_impl(op, H3C_CODE_FINAL_NORM_FORWARD, x, w, &mod, eps, y, 1);
}

h3s_status h3s_cuda_final_norm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                        const h3s_tensor *index, double eps, const h3s_tensor *dy, h3s_tensor *dx,
                                        h3s_tensor *dw, h3s_tensor *dtable) {
    static const char op[] = "final_norm_backward";
    h3s_modulation mod;
    H3S_TRY(h3s_final_norm_modulation(op, x, w, table, index, &mod));
    return rmsnorm_backward_impl(op, H3C_CODE_FINAL_NORM_BACKWARD, x, w, &mod, eps, dy, NULL, dx, dw, dtable);
}

static h3s_status head_common(const char *op, const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                              int64_t *M, int64_t *D) {
    H3S_TRY(h3c_init(op));
    H3S_TRY(check_eps(op, eps));
    H3S_TRY(dev_tensor(op, "x", x, H3S_BF16, 2, -1, -1, -1));
    if (heads <= 0 || x->shape[1] == 0 || x->shape[1] % heads)
        return h3s_fail(H3S_ERR_SHAPE, "%s: x width %lld is not a positive multiple of heads = %lld", op,
                        (long long)x->shape[1], (long long)heads);
    *M = x->shape[0];
    *D = x->shape[1] / heads;
    return dev_tensor(op, "w", w, H3S_BF16, 1, *D, -1, -1);
}

h3s_status h3s_cuda_head_rmsnorm_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                         h3s_tensor *y) {
    static const char op[] = "head_rmsnorm_forward";
    int64_t M = 0, D = 0;
    H3S_TRY(head_common(op, x, heads, w, eps, &M, &D));
    H3S_TRY(dev_tensor(op, "y", y, H3S_BF16, 2, M, heads * D, -1));
    return h3c_head_rmsnorm_forward(op, M, heads, D, x->data, w->data, (float)eps, y->data);
}

h3s_status h3s_cuda_head_rmsnorm_backward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                          const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dx_bf16, h3s_tensor *dw) {
    static const char op[] = "head_rmsnorm_backward";
    int64_t M = 0, D = 0;
    H3S_TRY(head_common(op, x, heads, w, eps, &M, &D));
    H3S_TRY(dev_tensor(op, "dy", dy, H3S_F32, 2, M, heads * D, -1));
    H3S_TRY(dev_opt(op, "dx", dx, H3S_F32, 2, M, heads * D));
    H3S_TRY(dev_opt(op, "dw", dw, H3S_F32, 1, D, -1));
    H3S_TRY(dev_opt(op, "dx_bf16", dx_bf16, H3S_BF16, 2, M, heads * D));
    void *inv = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)(M * heads > 0 ? M * heads : 1) * sizeof(float), &inv));
    const int late_dx = dx && dw && h3s_tensors_overlap(dx, dy);
    h3s_status st = h3c_head_rmsnorm_backward_rows(op, M, heads, D, x->data, w->data, (float)eps, dy->data,
                                                   late_dx || !dx ? NULL : dx->data,
                                                   late_dx || !dx_bf16 ? NULL : dx_bf16->data, inv);
    if (st == H3S_OK && dw) {
        h3c_fold_args f;
        memset(&f, 0, sizeof f);
        f.mode = H3C_FOLD_HEAD_DW, f.M = M, f.N = D, f.R = 1, f.dy = dy->data, f.ld_dy = heads * D;
        f.x = x->data, f.ld_x = heads * D, f.inv = inv, f.heads = heads, f.head_dim = D;
        f.out = dw->data, f.ldo = D;
        st = h3c_fold(op, &f);
    }
    if (st == H3S_OK && late_dx)
        st = h3c_head_rmsnorm_backward_rows(op, M, heads, D, x->data, w->data, (float)eps, dy->data, dx->data,
                                            dx_bf16 ? dx_bf16->data : NULL, inv);
    h3c_ws_free(inv);
    return st;
}

/* ------------------------------------------------------------------ rope */

h3s_status h3s_cuda_rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta, h3s_tensor *cos_out,
                               h3s_tensor *sin_out) {
    static const char op[] = "rope_table";
    H3S_TRY(h3c_init(op));
    if (!position_ids) return h3s_fail(H3S_ERR_INVALID, "%s: position_ids is NULL", op);
    if (rope_freq_dim < 1 || rope_freq_dim > (1 << 20))
        return h3s_fail(H3S_ERR_INVALID, "%s: rope_freq_dim = %lld is outside [1, 2^20]", op, (long long)rope_freq_dim);
    if (!(theta >= 1) || !isfinite((float)theta))
        return h3s_fail(H3S_ERR_INVALID, "%s: theta = %g must be >= 1 and finite in f32", op, theta);
    const h3s_dtype pdt = position_ids->dtype;
    if (pdt != H3S_F64 && pdt != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "%s: position_ids has dtype %s, expected F64 or F32", op, h3s_dtype_name(pdt));
    H3S_TRY(dev_tensor(op, "position_ids", position_ids, pdt, 2, -1, 3, -1));
    const int64_t S = position_ids->shape[0], F = rope_freq_dim;
    H3S_TRY(dev_tensor(op, "cos_out", cos_out, H3S_F32, 2, S, 6 * F, -1));
    H3S_TRY(dev_tensor(op, "sin_out", sin_out, H3S_F32, 2, S, 6 * F, -1));
    return h3c_rope_table(op, S, F, theta, position_ids->data, pdt, cos_out->data, sin_out->data);
}

static h3s_status rope_common(const char *op, const h3s_tensor *in, const char *in_name, h3s_dtype dt, int64_t heads,
                              const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *out,
                              const char *out_name, int64_t *M, int64_t *S, int64_t *D, int64_t *R) {
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, in_name, in, dt, 2, -1, -1, -1));
    if (heads <= 0 || in->shape[1] % heads)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s width %lld is not a multiple of heads = %lld", op, in_name,
                        (long long)in->shape[1], (long long)heads);
    *M = in->shape[0];
    *D = in->shape[1] / heads;
    H3S_TRY(dev_tensor(op, "cos", cos_t, H3S_F32, 2, -1, -1, -1));
    *S = cos_t->shape[0];
    *R = cos_t->shape[1];
    H3S_TRY(dev_tensor(op, "sin", sin_t, H3S_F32, 2, *S, *R, -1));
    if (*S <= 0 || *R <= 0 || *R % 6 || *R > *D || *D % 2)
        return h3s_fail(H3S_ERR_SHAPE, "%s: table [%lld, %lld] does not fit head_dim %lld", op, (long long)*S,
                        (long long)*R, (long long)*D);
    if (*M % *S)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %lld rows, not a multiple of the %lld table rows", op, in_name,
                        (long long)*M, (long long)*S);
    return dev_tensor(op, out_name, out, dt, 2, *M, in->shape[1], -1);
}

h3s_status h3s_cuda_rope_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t,
                                 h3s_tensor *y) {
    static const char op[] = "rope_forward";
    int64_t M = 0, S = 0, D = 0, R = 0;
    H3S_TRY(rope_common(op, x, "x", H3S_BF16, heads, cos_t, sin_t, y, "y", &M, &S, &D, &R));
    return h3c_rope_apply(op, 0, M, S, heads, D, R, cos_t->data, sin_t->data, x->data, y->data);
}

h3s_status h3s_cuda_rope_backward(int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *dy,
                                  h3s_tensor *dx) {
    static const char op[] = "rope_backward";
    int64_t M = 0, S = 0, D = 0, R = 0;
    H3S_TRY(rope_common(op, dy, "dy", H3S_F32, heads, cos_t, sin_t, dx, "dx", &M, &S, &D, &R));
    return h3c_rope_apply(op, 1, M, S, heads, D, R, cos_t->data, sin_t->data, dy->data, dx->data);
}

/* ------------------------------------------------------------------ attention */

/* q, k, v, the mask and the forward's out [rows, width] and stats [rows, heads, 2] (outputs of
 * the forward, inputs of the backward). */
static h3s_status attn_common(const char *op, const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                              int64_t batch, int64_t heads, const h3s_attn_mask *mask, const h3s_tensor *out,
                              const h3s_tensor *stats, h3c_attn_args *a) {
    memset(a, 0, sizeof *a);
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "q", q, H3S_BF16, 2, -1, -1, -1));
    const int64_t rows = q->shape[0], width = q->shape[1];
    if (batch <= 0 || heads <= 0 || rows % batch || width == 0 || width % heads)
        return h3s_fail(H3S_ERR_SHAPE, "%s: q [%lld, %lld] does not split into batch %lld x heads %lld", op,
                        (long long)rows, (long long)width, (long long)batch, (long long)heads);
    H3S_TRY(dev_tensor(op, "k", k, H3S_BF16, 2, rows, width, -1));
    H3S_TRY(dev_tensor(op, "v", v, H3S_BF16, 2, rows, width, -1));
    a->B = batch, a->S = rows / batch, a->heads = heads, a->D = width / heads;
    a->scale = (float)(1.0 / sqrt((double)a->D));
    a->q = q->data, a->k = k->data, a->v = v->data;
    if (mask && mask->doc) {
        const void *p = NULL;
        H3S_TRY(index_tensor(op, "mask.doc", mask->doc, H3S_I64, a->S, &p));
        a->doc = (const int64_t *)p;
        if (mask->doc->device == 0) a->doc_host = (const int64_t *)mask->doc->data;
    }
    if (mask && mask->key_valid) {
        const void *p = NULL;
        H3S_TRY(index_tensor(op, "mask.key_valid", mask->key_valid, H3S_BOOL, rows, &p));
        a->kv = (const uint8_t *)p;
        if (mask->key_valid->device == 0) a->kv_host = (const uint8_t *)mask->key_valid->data;
    }
    H3S_TRY(dev_tensor(op, "out", out, H3S_BF16, 2, rows, width, -1));
    return dev_tensor(op, "stats", stats, H3S_F32, 3, rows, heads, 2);
}

h3s_status h3s_cuda_attention_forward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                      int64_t heads, const h3s_attn_mask *mask, h3s_tensor *out, h3s_tensor *stats) {
    static const char op[] = "attention_forward";
    h3c_attn_args a;
    H3S_TRY(attn_common(op, q, k, v, batch, heads, mask, out, stats, &a));
    a.out = out->data;
    a.stats = stats->data;
    return h3c_attention_forward(op, &a);
}

h3s_status h3s_cuda_attention_backward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                       const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t heads,
                                       const h3s_attn_mask *mask, const h3s_tensor *dout, h3s_tensor *dq,
                                       h3s_tensor *dk, h3s_tensor *dv, h3s_tensor *dv_bf16) {
    static const char op[] = "attention_backward";
    h3c_attn_args a;
    H3S_TRY(attn_common(op, q, k, v, batch, heads, mask, out, stats, &a));
    const int64_t rows = q->shape[0], width = q->shape[1];
    H3S_TRY(dev_tensor(op, "dout", dout, H3S_F32, 2, rows, width, -1));
    H3S_TRY(dev_opt(op, "dq", dq, H3S_F32, 2, rows, width));
    H3S_TRY(dev_opt(op, "dk", dk, H3S_F32, 2, rows, width));
    H3S_TRY(dev_opt(op, "dv", dv, H3S_F32, 2, rows, width));
    H3S_TRY(dev_opt(op, "dv_bf16", dv_bf16, H3S_BF16, 2, rows, width));
    if (!dq && !dk && !dv && !dv_bf16) return H3S_OK;
    a.out_in = out->data, a.stats_in = stats->data, a.dout = dout->data;
    a.dq = dq ? dq->data : NULL, a.dk = dk ? dk->data : NULL, a.dv = dv ? dv->data : NULL;
    a.dvb = dv_bf16 ? (uint16_t *)dv_bf16->data : NULL;
    void *delta = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)(rows * heads > 0 ? rows * heads : 1) * sizeof(float), &delta));
    a.delta = delta;
    a.delta_out = delta;
    h3s_status st = h3c_attention_backward(op, &a);
    h3c_ws_free(delta);
    return st;
}

/* ------------------------------------------------------------------ residual */

static h3s_status gate_table(const char *op, const h3s_tensor *table, const h3s_tensor *index, int gate_chunk,
                             int64_t M, int64_t H, int64_t *R, int64_t *ld, int64_t *off, const int64_t **idx) {
    *R = 0, *ld = 0, *off = 0, *idx = NULL;
    if (!table) return H3S_OK;
    H3S_TRY(dev_tensor(op, "table", table, H3S_BF16, 2, -1, -1, -1));
    const int64_t cols = table->shape[1];
    if (cols == 0 || cols % H)
        return h3s_fail(H3S_ERR_SHAPE, "%s: table has %lld columns, not a positive multiple of H = %lld", op,
                        (long long)cols, (long long)H);
    if (gate_chunk < 0 || gate_chunk >= cols / H)
        return h3s_fail(H3S_ERR_INVALID, "%s: gate_chunk = %d is outside [0, %lld)", op, gate_chunk,
                        (long long)(cols / H));
    *R = table->shape[0], *ld = cols, *off = (int64_t)gate_chunk * H;
    const void *p = NULL;
    H3S_TRY(index_tensor(op, "index", index, H3S_I64, M, &p));
    *idx = (const int64_t *)p;
    return H3S_OK;
}

h3s_status h3s_cuda_residual_forward(const h3s_tensor *r, const h3s_tensor *y, const h3s_tensor *table,
                                     const h3s_tensor *index, int gate_chunk, h3s_tensor *out) {
    static const char op[] = "residual_forward";
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "r", r, H3S_BF16, 2, -1, -1, -1));
    const int64_t M = r->shape[0], H = r->shape[1];
    H3S_TRY(dev_tensor(op, "y", y, H3S_BF16, 2, M, H, -1));
    H3S_TRY(dev_tensor(op, "out", out, H3S_BF16, 2, M, H, -1));
    int64_t R = 0, ld = 0, off = 0;
    const int64_t *idx;
    H3S_TRY(gate_table(op, table, index, gate_chunk, M, H, &R, &ld, &off, &idx));
    return h3c_residual_forward(op, M, H, r->data, y->data, dp(table), idx, R, ld, off, out->data);
}

h3s_status h3s_cuda_residual_backward(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index,
                                      int gate_chunk, const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy,
                                      h3s_tensor *dy_bf16, h3s_tensor *dtable) {
    static const char op[] = "residual_backward";
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "dout", dout, H3S_F32, 2, -1, -1, -1));
    const int64_t M = dout->shape[0], H = dout->shape[1];
    H3S_TRY(dev_opt(op, "dr", dr, H3S_F32, 2, M, H));
    H3S_TRY(dev_opt(op, "dy", dy, H3S_F32, 2, M, H));
    H3S_TRY(dev_opt(op, "dy_bf16", dy_bf16, H3S_BF16, 2, M, H));
    int64_t R = 0, ld = 0, off = 0;
    const int64_t *idx;
    H3S_TRY(gate_table(op, table, index, gate_chunk, M, H, &R, &ld, &off, &idx));
    if (dtable) {
        if (!table) return h3s_fail(H3S_ERR_INVALID, "%s: dtable requested without a table", op);
        H3S_TRY(dev_tensor(op, "y", y, H3S_BF16, 2, M, H, -1));
        H3S_TRY(dev_tensor(op, "dtable", dtable, H3S_F32, 2, R, ld, -1));
        /* first, since dr or dy may alias dout */
        h3c_fold_args f;
        memset(&f, 0, sizeof f);
        f.mode = H3C_FOLD_PRODUCT, f.code = H3C_CODE_RESIDUAL_BACKWARD, f.M = M, f.N = H, f.R = R, f.indexed = 1;
        f.index = idx, f.index_limit = R, f.dy = dout->data, f.ld_dy = H, f.x = y->data, f.ld_x = H;
        f.out = (float *)dtable->data + off, f.ldo = ld;
        H3S_TRY(h3c_fold(op, &f));
    }
    if (dr && dy && h3s_tensors_overlap(dr, dy)) return h3s_fail(H3S_ERR_INVALID, "%s: dr and dy overlap", op);
    return h3c_residual_backward_rows(op, M, H, dp(table), idx, R, ld, off, dout->data, dr ? dr->data : NULL,
                                      dy ? dy->data : NULL, dy_bf16 ? dy_bf16->data : NULL);
}

/* ------------------------------------------------------------------ swiglu */

/* u [M, 2F] BF16 = (value | gate). */
static h3s_status swiglu_common(const char *op, const h3s_tensor *u, int64_t *M, int64_t *F) {
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "u", u, H3S_BF16, 2, -1, -1, -1));
    if (u->shape[1] % 2) return h3s_fail(H3S_ERR_SHAPE, "%s: u width %lld is odd", op, (long long)u->shape[1]);
    *M = u->shape[0];
    *F = u->shape[1] / 2;
    return H3S_OK;
}

h3s_status h3s_cuda_swiglu_forward(const h3s_tensor *u, h3s_tensor *h) {
    static const char op[] = "swiglu_forward";
    int64_t M = 0, F = 0;
    H3S_TRY(swiglu_common(op, u, &M, &F));
    H3S_TRY(dev_tensor(op, "h", h, H3S_BF16, 2, M, F, -1));
    return h3c_swiglu_forward(op, M, F, u->data, h->data);
}

h3s_status h3s_cuda_swiglu_backward(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du, h3s_tensor *du_bf16) {
    static const char op[] = "swiglu_backward";
    int64_t M = 0, F = 0;
    H3S_TRY(swiglu_common(op, u, &M, &F));
    H3S_TRY(dev_tensor(op, "dh", dh, H3S_F32, 2, M, F, -1));
    H3S_TRY(dev_opt(op, "du", du, H3S_F32, 2, M, 2 * F));
    H3S_TRY(dev_opt(op, "du_bf16", du_bf16, H3S_BF16, 2, M, 2 * F));
    if (!du && !du_bf16) return H3S_OK;
    return h3c_swiglu_backward(op, M, F, u->data, dh->data, du ? du->data : NULL, du_bf16 ? du_bf16->data : NULL);
}

/* ------------------------------------------------------------------ adaln projection */

h3s_status h3s_cuda_adaln_projection_forward(const h3s_tensor *temb, const h3s_tensor *w, const h3s_tensor *b,
                                             h3s_tensor *a, h3s_tensor *table) {
    static const char op[] = "adaln_projection_forward";
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "temb", temb, H3S_F32, 2, -1, -1, -1));
    const int64_t T = temb->shape[0], E = temb->shape[1];
    H3S_TRY(dev_tensor(op, "w", w, H3S_BF16, 2, -1, E, -1));
    const int64_t N = w->shape[0];
    H3S_TRY(dev_opt(op, "b", b, H3S_BF16, 1, N, -1));
    H3S_TRY(dev_tensor(op, "a", a, H3S_BF16, 2, T, E, -1));
    H3S_TRY(dev_tensor(op, "table", table, H3S_BF16, 2, T, N, -1));
    H3S_TRY(h3c_silu_to_bf16(op, T * E, temb->data, a->data));
    return h3c_gemm_bf16_forward(op, T, N, E, a->data, w->data, dp(b), table->data);
}

h3s_status h3s_cuda_adaln_projection_backward(const h3s_tensor *temb, const h3s_tensor *a, const h3s_tensor *w,
                                              const h3s_tensor *dtable, h3s_tensor *dtemb, h3s_tensor *dw,
                                              h3s_tensor *db) {
    static const char op[] = "adaln_projection_backward";
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "temb", temb, H3S_F32, 2, -1, -1, -1));
    const int64_t T = temb->shape[0], E = temb->shape[1];
    H3S_TRY(dev_tensor(op, "a", a, H3S_BF16, 2, T, E, -1));
    H3S_TRY(dev_tensor(op, "w", w, H3S_BF16, 2, -1, E, -1));
    const int64_t N = w->shape[0];
    H3S_TRY(dev_tensor(op, "dtable", dtable, H3S_F32, 2, T, N, -1));
    H3S_TRY(dev_opt(op, "dtemb", dtemb, H3S_F32, 2, T, E));
    H3S_TRY(dev_opt(op, "dw", dw, dw && dw->dtype == H3S_BF16 ? H3S_BF16 : H3S_F32, 2, N, E)); /* BF16: rounded */
    H3S_TRY(dev_opt(op, "db", db, H3S_F32, 1, N, -1));
    h3s_tensor *none = NULL;
    H3S_TRY(h3s_cuda_linear_backward(a, w, dtable, NULL, none, dw, db));
    if (dtemb) {
        /* through the BF16 cast straight, then silu' */
        H3S_TRY(h3c_gemm_bf16_dx(op, T, N, E, dtable->data, w->data, dtemb->data));
        H3S_TRY(h3c_mul_silu_grad(op, T * E, temb->data, dtemb->data));
    }
    return H3S_OK;
}

/* ------------------------------------------------------------------ timestep */

h3s_status h3s_cuda_timestep_sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out) {
    static const char op[] = "timestep_sinusoid_forward";
    H3S_TRY(h3c_init(op));
    if (freq_dim <= 0 || freq_dim % 2 || freq_dim > (1 << 24))
        return h3s_fail(H3S_ERR_INVALID, "%s: freq_dim = %lld must be even and in [2, 2^24]", op, (long long)freq_dim);
    H3S_TRY(dev_tensor(op, "t", t, H3S_F32, 1, -1, -1, -1));
    const int64_t T = t->shape[0];
    H3S_TRY(dev_tensor(op, "out", out, H3S_F32, 2, T, freq_dim, -1));
    return h3c_timestep_sinusoid_forward(op, T, freq_dim, t->data, out->data);
}

h3s_status h3s_cuda_timestep_sinusoid_backward(const h3s_tensor *t, const h3s_tensor *dout, h3s_tensor *dt) {
    static const char op[] = "timestep_sinusoid_backward";
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "t", t, H3S_F32, 1, -1, -1, -1));
    const int64_t T = t->shape[0];
    H3S_TRY(dev_tensor(op, "dout", dout, H3S_F32, 2, T, -1, -1));
    const int64_t freq_dim = dout->shape[1];
    if (freq_dim <= 0 || freq_dim % 2)
        return h3s_fail(H3S_ERR_SHAPE, "%s: dout width %lld must be even and positive", op, (long long)freq_dim);
    H3S_TRY(dev_tensor(op, "dt", dt, H3S_F32, 1, T, -1, -1));
    return h3c_timestep_sinusoid_backward(op, T, freq_dim, t->data, dout->data, dt->data);
}

typedef struct mlp_geom {
    int64_t T, Fd, Eh, E;
} mlp_geom;

static h3s_status mlp_common(const char *op, const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                             const h3s_tensor *w2, const h3s_tensor *b2, const h3s_tensor *hidden, mlp_geom *g) {
    H3S_TRY(h3c_init(op));
    H3S_TRY(dev_tensor(op, "features", features, H3S_F32, 2, -1, -1, -1));
    g->T = features->shape[0], g->Fd = features->shape[1];
    H3S_TRY(dev_tensor(op, "w1", w1, H3S_F32, 2, -1, g->Fd, -1));
    g->Eh = w1->shape[0];
    H3S_TRY(dev_tensor(op, "w2", w2, H3S_F32, 2, -1, g->Eh, -1));
    g->E = w2->shape[0];
    H3S_TRY(dev_opt(op, "b1", b1, H3S_F32, 1, g->Eh, -1));
    H3S_TRY(dev_opt(op, "b2", b2, H3S_F32, 1, g->E, -1));
    return dev_tensor(op, "hidden", hidden, H3S_F32, 2, g->T, g->Eh, -1);
}

h3s_status h3s_cuda_timestep_mlp_forward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                                         const h3s_tensor *w2, const h3s_tensor *b2, h3s_tensor *hidden,
                                         h3s_tensor *temb) {
    static const char op[] = "timestep_mlp_forward";
    mlp_geom g;
    H3S_TRY(mlp_common(op, features, w1, b1, w2, b2, hidden, &g));
    H3S_TRY(dev_tensor(op, "temb", temb, H3S_F32, 2, g.T, g.E, -1));
    void *act = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)(g.T * g.Eh) * sizeof(float), &act));
    h3s_status st =
        h3c_sgemm_forward(op, g.T, g.Eh, g.Fd, features->data, w1->data, (const float *)dp(b1), hidden->data);
    if (st == H3S_OK) st = h3c_silu_f32(op, g.T * g.Eh, hidden->data, act);
    if (st == H3S_OK) st = h3c_sgemm_forward(op, g.T, g.E, g.Eh, act, w2->data, (const float *)dp(b2), temb->data);
    h3c_ws_free(act);
    return st;
}

h3s_status h3s_cuda_timestep_mlp_backward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *w2,
                                          const h3s_tensor *hidden, const h3s_tensor *dtemb, h3s_tensor *dfeatures,
                                          h3s_tensor *dw1, h3s_tensor *db1, h3s_tensor *dw2, h3s_tensor *db2) {
    static const char op[] = "timestep_mlp_backward";
    mlp_geom g;
    H3S_TRY(mlp_common(op, features, w1, NULL, w2, NULL, hidden, &g));
    H3S_TRY(dev_tensor(op, "dtemb", dtemb, H3S_F32, 2, g.T, g.E, -1));
    H3S_TRY(dev_opt(op, "dfeatures", dfeatures, H3S_F32, 2, g.T, g.Fd));
    H3S_TRY(dev_opt(op, "dw1", dw1, H3S_F32, 2, g.Eh, g.Fd));
    H3S_TRY(dev_opt(op, "db1", db1, H3S_F32, 1, g.Eh, -1));
    H3S_TRY(dev_opt(op, "dw2", dw2, H3S_F32, 2, g.E, g.Eh));
    H3S_TRY(dev_opt(op, "db2", db2, H3S_F32, 1, g.E, -1));
    const int need_first = dfeatures || dw1 || db1;
    if (!need_first && !dw2 && !db2) return H3S_OK;
    const size_t act_bytes = (size_t)(g.T * g.Eh) * sizeof(float);
    void *ws = NULL;
    H3S_TRY(h3c_ws_alloc(op, 2 * act_bytes + 256, &ws));
    /* two [T, Eh] buffers, the second one 256-byte aligned */
    float *act = (float *)ws, *dact = act + ((act_bytes + 255) & ~(size_t)255) / sizeof(float);
    h3s_status st = h3c_silu_f32(op, g.T * g.Eh, hidden->data, act); /* linear_2's input, bit for bit */
    if (st == H3S_OK && dw2) st = h3c_sgemm_dw(op, g.T, g.E, g.Eh, dtemb->data, act, dw2->data);
    h3c_fold_args f;
    memset(&f, 0, sizeof f);
    f.mode = H3C_FOLD_COPY, f.M = g.T, f.R = 1;
    if (st == H3S_OK && db2) {
        f.N = g.E, f.dy = dtemb->data, f.ld_dy = g.E, f.out = db2->data, f.ldo = g.E;
        st = h3c_fold(op, &f);
    }
    if (st == H3S_OK && need_first) {
        st = h3c_sgemm_dx(op, g.T, g.E, g.Eh, dtemb->data, w2->data, dact);
        if (st == H3S_OK) st = h3c_mul_silu_grad(op, g.T * g.Eh, hidden->data, dact);
        if (st == H3S_OK && dfeatures) st = h3c_sgemm_dx(op, g.T, g.Eh, g.Fd, dact, w1->data, dfeatures->data);
        if (st == H3S_OK && dw1) st = h3c_sgemm_dw(op, g.T, g.Eh, g.Fd, dact, features->data, dw1->data);
        if (st == H3S_OK && db1) {
            f.N = g.Eh, f.dy = dact, f.ld_dy = g.Eh, f.out = db1->data, f.ldo = g.Eh;
            st = h3c_fold(op, &f);
        }
    }
    h3c_ws_free(ws);
    return st;
}

/* ------------------------------------------------------------------ rows and grads */

static h3s_status rows_common(const char *op, int scatter, int code, const h3s_tensor *src, const h3s_tensor *index,
                              int64_t batch, h3s_tensor *dst) {
    H3S_TRY(h3c_init(op));
    if (!src || !dst || !index) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    if ((src->dtype != H3S_F32 && src->dtype != H3S_BF16) || (dst->dtype != H3S_F32 && dst->dtype != H3S_BF16))
        return h3s_fail(H3S_ERR_DTYPE, "%s: the CUDA backend copies F32/BF16 rows (src %s, dst %s)", op,
                        h3s_dtype_name(src->dtype), h3s_dtype_name(dst->dtype));
    H3S_TRY(dev_tensor(op, "src", src, src->dtype, 2, -1, -1, -1));
    H3S_TRY(dev_tensor(op, "dst", dst, dst->dtype, 2, -1, src->shape[1], -1));
    if (index->ndim != 1) return h3s_fail(H3S_ERR_SHAPE, "%s: index must be 1-D", op);
    const int64_t n = index->shape[0];
    if (batch <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: batch %lld must be positive", op, (long long)batch);
    const h3s_tensor *items = scatter ? src : dst, *packed = scatter ? dst : src;
    if (items->shape[0] != batch * n || packed->shape[0] % batch)
        return h3s_fail(H3S_ERR_SHAPE, "%s: row counts do not match batch %lld x index length %lld", op,
                        (long long)batch, (long long)n);
    if (h3s_tensors_overlap(src, dst)) return h3s_fail(H3S_ERR_INVALID, "%s: src and dst overlap", op);
    if (scatter) {
        /* Duplicate targets would make the result depend on which thread writes last. */
        if (index->device)
            return h3s_fail(H3S_ERR_INVALID,
                            "%s: the scatter index must be a host tensor (duplicates are refused there)", op);
        if (index->dtype != H3S_I64) return h3s_fail(H3S_ERR_DTYPE, "%s: index must be I64", op);
        const int64_t rows = dst->shape[0] / batch, *iv = (const int64_t *)index->data;
        uint8_t *seen = h3s_calloc((size_t)(rows > 0 ? rows : 1), 1);
        if (!seen) return H3S_ERR_NOMEM;
        for (int64_t i = 0; i < n; i++) {
            if (iv[i] < 0 || iv[i] >= rows || seen[iv[i]]) {
                int64_t bad = iv[i];
                int dup = bad >= 0 && bad < rows;
                free(seen);
                return h3s_fail(H3S_ERR_INDEX,
                                dup ? "%s: index[%lld] = %lld repeats an earlier row"
                                    : "%s: index[%lld] = %lld is outside [0, %lld)",
                                op, (long long)i, (long long)bad, (long long)rows);
            }
            seen[iv[i]] = 1;
        }
        free(seen);
    }
    const void *idx = NULL;
    H3S_TRY(index_tensor(op, "index", index, H3S_I64, n, &idx));
    return h3c_rows_copy(op, scatter, code, batch, n, src->shape[0], dst->shape[0], src->shape[1], src->data,
                         src->dtype, dst->data, dst->dtype, (const int64_t *)idx);
}

h3s_status h3s_cuda_rows_gather(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    return rows_common("rows_gather", 0, H3C_CODE_ROWS_GATHER, src, index, batch, dst);
}

h3s_status h3s_cuda_rows_scatter(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    return rows_common("rows_scatter", 1, H3C_CODE_ROWS_SCATTER, src, index, batch, dst);
}

h3s_status h3s_cuda_grad_add(const h3s_tensor *a, const h3s_tensor *b, h3s_tensor *out) {
    static const char op[] = "grad_add";
    H3S_TRY(h3c_init(op));
    if (!a || !b || !out) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    if (a->dtype != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "%s: a has dtype %s; the CUDA backend adds F32 gradients", op,
                        h3s_dtype_name(a->dtype));
    for (const h3s_tensor *const *t = (const h3s_tensor *const[]){a, b, out, NULL}; *t; t++) {
        if ((*t)->device != 1) return h3s_fail(H3S_ERR_DEVICE, "%s: a tensor is not in device memory", op);
        if ((*t)->dtype != H3S_F32) return h3s_fail(H3S_ERR_DTYPE, "%s: every tensor must be F32", op);
        if (h3s_tensor_numel(*t) != h3s_tensor_numel(a))
            return h3s_fail(H3S_ERR_SHAPE, "%s: a, b and out differ in size", op);
    }
    return h3c_add_f32(op, h3s_tensor_numel(a), a->data, b->data, NULL, out->data);
}

h3s_status h3s_cuda_grad_add3(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out) {
    static const char op[] = "grad_add";
    H3S_TRY(h3c_init(op));
    for (const h3s_tensor *const *t = (const h3s_tensor *const[]){a, b, c, out, NULL}; *t; t++)
        if ((*t)->device != 1 || (*t)->dtype != H3S_F32 || h3s_tensor_numel(*t) != h3s_tensor_numel(a))
            return h3s_fail(H3S_ERR_INVALID, "%s: a, b, c and out must be F32 device tensors of one size", op);
    return h3c_add_f32(op, h3s_tensor_numel(a), a->data, b->data, c->data, out->data);
}

h3s_status h3s_cuda_round_bf16(const h3s_tensor *src, h3s_tensor *dst) {
    static const char op[] = "round_bf16";
    H3S_TRY(h3c_init(op));
    if (!src || !dst) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    if (src->device != 1 || dst->device != 1)
        return h3s_fail(H3S_ERR_DEVICE, "%s: a tensor is not in device memory", op);
    if (src->dtype != H3S_F32 || dst->dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s -> %s; it rounds F32 to BF16", op, h3s_dtype_name(src->dtype),
                        h3s_dtype_name(dst->dtype));
    const int64_t n = h3s_tensor_numel(src);
    if (n < 0 || n != h3s_tensor_numel(dst)) return h3s_fail(H3S_ERR_SHAPE, "%s: src and dst differ in size", op);
    if (n > 0 && (!src->data || !dst->data)) return h3s_fail(H3S_ERR_INVALID, "%s: NULL data", op);
    return h3c_round_bf16(op, n, src->data, dst->data);
}

/* ------------------------------------------------------------------ extras */

h3s_status h3s_cuda_fill_random(h3s_tensor *t, uint64_t seed, float scale) {
    static const char op[] = "cuda_fill_random";
    H3S_TRY(h3c_init(op));
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: tensor is NULL", op);
    if (t->device != 1) return h3s_fail(H3S_ERR_DEVICE, "%s: not a device tensor", op);
    if (t->dtype != H3S_F32 && t->dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_DTYPE, "%s: dtype %s (F32 or BF16 only)", op, h3s_dtype_name(t->dtype));
    return h3c_fill_random(op, h3s_tensor_numel(t), seed, scale, t->data, t->dtype);
}

#else
typedef int h3s_cuda_ops_translation_unit_is_not_empty;
#endif

/* Elementwise gradient accumulation: out = a + b (or (a + b) + c), one IEEE addition at a time in the
 * dtype of the tensors (F32 strict, F64 golden), a first.  out may alias a or b. */
#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

/* a + b (+ c when c is not NULL), in a's dtype, element by element: out[i] = (a[i] + b[i]) + c[i]. */
static h3s_status grad_sum(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out) {
    static const char op[] = "grad_add";
    if (!a) return h3s_fail(H3S_ERR_INVALID, "%s: a is NULL", op);
    if (!b) return h3s_fail(H3S_ERR_INVALID, "%s: b is NULL", op);
    if (!out) return h3s_fail(H3S_ERR_INVALID, "%s: out is NULL", op);
    if (a->dtype != H3S_F32 && a->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: a has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(a->dtype));
    if (a->ndim < 0 || a->ndim > H3S_MAX_DIMS) return h3s_fail(H3S_ERR_SHAPE, "%s: a has %d dims", op, a->ndim);
    H3S_TRY(h3s_check_tensor(op, "a", a, a->dtype, a->ndim));
    H3S_TRY(h3s_check_shape(op, "b", b, a->dtype, a->ndim, a->shape));
    if (c) H3S_TRY(h3s_check_shape(op, "c", c, a->dtype, a->ndim, a->shape));
    H3S_TRY(h3s_check_shape(op, "out", out, a->dtype, a->ndim, a->shape));
    const h3s_tensor *ts[4] = {a, b, out, c};
    const char *names[4] = {"a", "b", "out", "c"};
    int on_device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, c ? 4 : 3, &on_device));
    if (on_device) return c ? h3s_cuda_grad_add3(a, b, c, out) : h3s_cuda_grad_add(a, b, out);
    const int64_t n = h3s_tensor_numel(a);
    if (a->dtype == H3S_F64) {
        const double *A = (const double *)a->data, *B = (const double *)b->data;
        const double *C = c ? (const double *)c->data : NULL;
        double *O = (double *)out->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            O[i] = C ? (A[i] + B[i]) + C[i] : A[i] + B[i];
    } else {
        const float *A = (const float *)a->data, *B = (const float *)b->data;
        const float *C = c ? (const float *)c->data : NULL;
        float *O = (float *)out->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            O[i] = C ? (A[i] + B[i]) + C[i] : A[i] + B[i];
    }
    return H3S_OK;
}

h3s_status h3s_grad_add(const h3s_tensor *a, const h3s_tensor *b, h3s_tensor *out) { return grad_sum(a, b, NULL, out); }

h3s_status h3s_grad_add3(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out) {
    if (!c) return h3s_fail(H3S_ERR_INVALID, "grad_add: c is NULL");
    return grad_sum(a, b, c, out);
}

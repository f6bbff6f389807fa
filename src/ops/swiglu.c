/* SwiGLU: u [M, 2F] = (value | gate), h = value * silu(gate) [M, F].
 * Exact operation order and error bounds: docs/numerics/norms.md.
 *
 * Strict (BF16 u and h, F32 dh and du):
 *   s   = h3s_det_siluf(gate)            silu in double, rounded once to FP32 (deterministic)
 *   h   = bf16(value * s)                 one FP32 product, one BF16 rounding
 *   dvalue = dh * s                       one FP32 product
 *   dgate  = (dh * value) * s'            s' = h3s_det_silu_gradf(gate); two FP32 products
 * Golden: all F64, silu(g) = g / (1 + exp(-g)), silu'(g) = sig * (1 + g * (1 - sig)). */
#include <math.h>

#include "core/core.h"
#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

/* u: BF16 (strict) or F64 (golden), 2-D, an even positive number of columns. */
static h3s_status check_u(const char *op, const h3s_tensor *u, int *golden, int64_t *M, int64_t *F) {
    if (!u) return h3s_fail(H3S_ERR_INVALID, "%s: u is NULL", op);
    if (u->dtype == H3S_F64)
        *golden = 1;
    else if (u->dtype == H3S_BF16)
        *golden = 0;
    else
        return h3s_fail(H3S_ERR_DTYPE, "%s: u has dtype %s, expected BF16 (strict) or F64 (golden)", op,
                        h3s_dtype_name(u->dtype));
    H3S_TRY(h3s_check_tensor(op, "u", u, u->dtype, 2));
    if (u->shape[1] == 0 || u->shape[1] % 2 != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: u has %lld columns, expected an even number > 0 (value | gate)", op,
                        (long long)u->shape[1]);
    *M = u->shape[0];
    *F = u->shape[1] / 2;
    return H3S_OK;
}

static inline float bf16_at(const uint16_t *p, int64_t i) { return h3s_bf16_value(p[i]); }

h3s_status h3s_swiglu_forward(const h3s_tensor *u, h3s_tensor *h) {
    static const char op[] = "swiglu_forward";
    int golden = 0, on_device = 0;
    int64_t M = 0, F = 0;
    H3S_TRY(check_u(op, u, &golden, &M, &F));
    if (!h) return h3s_fail(H3S_ERR_INVALID, "%s: h is NULL", op);
    int64_t dimMF[2] = {M, F};
    H3S_TRY(h3s_check_shape(op, "h", h, u->dtype, 2, dimMF));
    const h3s_tensor *ts[2] = {u, h};
    const char *names[2] = {"u", "h"};
    H3S_TRY(h3s_check_placement(op, ts, names, 2, &on_device));
    if (on_device) return h3s_cuda_swiglu_forward(u, h);
    /* h written over u while other threads still read it would depend on the thread count */
    H3S_TRY(h3s_check_disjoint(op, "h", h, ts, names, 1, 0));
    if (golden) {
        const double *U = (const double *)u->data;
        double *O = (double *)h->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++)
            for (int64_t f = 0; f < F; f++) {
                double v = U[m * 2 * F + f], g = U[m * 2 * F + F + f];
                O[m * F + f] = v * (g / (1.0 + exp(-g)));
            }
    } else {
        const uint16_t *U = (const uint16_t *)u->data;
        uint16_t *O = (uint16_t *)h->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++)
            for (int64_t f = 0; f < F; f++) {
                float v = bf16_at(U, m * 2 * F + f), g = bf16_at(U, m * 2 * F + F + f);
                O[m * F + f] = h3s_bf16_round(v * h3s_det_siluf(g));
            }
    }
    return H3S_OK;
}

h3s_status h3s_swiglu_backward_rounded(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du, h3s_tensor *du_bf16) {
    static const char op[] = "swiglu_backward";
    int golden = 0, on_device = 0;
    int64_t M = 0, F = 0;
    H3S_TRY(check_u(op, u, &golden, &M, &F));
    h3s_dtype grad = golden ? H3S_F64 : H3S_F32;
    if (!dh) return h3s_fail(H3S_ERR_INVALID, "%s: dh is NULL", op);
    int64_t dimMF[2] = {M, F}, dimU[2] = {M, 2 * F};
    H3S_TRY(h3s_check_shape(op, "dh", dh, grad, 2, dimMF));
    if (du) H3S_TRY(h3s_check_shape(op, "du", du, grad, 2, dimU));
    if (du_bf16) {
        if (golden) return h3s_fail(H3S_ERR_INVALID, "%s: du_bf16 needs the strict variant", op);
        H3S_TRY(h3s_check_shape(op, "du_bf16", du_bf16, H3S_BF16, 2, dimU));
        const h3s_tensor *in[3] = {u, dh, du};
        for (int i = 0; i < 3; i++)
            if (h3s_tensors_overlap(du_bf16, in[i]))
                return h3s_fail(H3S_ERR_INVALID, "%s: du_bf16 overlaps u, dh or du", op);
    }
    const h3s_tensor *ts[4] = {u, dh, du, du_bf16};
    const char *names[4] = {"u", "dh", "du", "du_bf16"};
    H3S_TRY(h3s_check_placement(op, ts, names, 4, &on_device));
    if (on_device) return h3s_cuda_swiglu_backward(u, dh, du, du_bf16);
    if (!du && du_bf16)
        return h3s_fail(H3S_ERR_INVALID, "%s: du is NULL; du_bf16 alone is a CUDA-backend option (the host writes du)",
                        op);
    if (!du) return H3S_OK;
    if (golden) {
        const double *U = (const double *)u->data, *DH = (const double *)dh->data;
        double *DU = (double *)du->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++)
            for (int64_t f = 0; f < F; f++) {
                double v = U[m * 2 * F + f], g = U[m * 2 * F + F + f], d = DH[m * F + f];
                double sig = 1.0 / (1.0 + exp(-g));
                DU[m * 2 * F + f] = d * (g * sig);
                DU[m * 2 * F + F + f] = d * v * (sig * (1.0 + g * (1.0 - sig)));
            }
    } else {
        const uint16_t *U = (const uint16_t *)u->data;
        const float *DH = (const float *)dh->data;
        float *DU = (float *)du->data;
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++)
            for (int64_t f = 0; f < F; f++) {
                float v = bf16_at(U, m * 2 * F + f), g = bf16_at(U, m * 2 * F + F + f), d = DH[m * F + f];
                DU[m * 2 * F + f] = d * h3s_det_siluf(g);
                DU[m * 2 * F + F + f] = (d * v) * h3s_det_silu_gradf(g);
            }
        /* du rounded as the CUDA backend's linear rounds its gradient operand (h3s_bf16_round per element) */
        if (du_bf16) H3S_TRY(h3s_tensor_convert(du, du_bf16));
    }
    return H3S_OK;
}

h3s_status h3s_swiglu_backward(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du) {
    return h3s_swiglu_backward_rounded(u, dh, du, NULL);
}

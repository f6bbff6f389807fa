/* Rotary position embedding over the packed (t, h, w) grid: the cos/sin table and the
 * rotate-half application to q and k (forward and backward).
 *
 * Strict table: the provider's float32 recipe, step by step (inv_freq, angle product in
 * f32), with cos/sin from the deterministic double routines rounded once to f32.
 * Strict apply: BF16 x, F32 cos/sin, FP32 products and sum, one rounding to BF16.
 * Golden: the same function in double, with the positions cast to f32 first as the
 * provider does (that cast is part of the model, not an approximation). */
#include <math.h>

#include "core/core.h"
#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

/* 6F must stay an exact small integer everywhere (also as a float exponent numerator). */
#define ROPE_MAX_FREQ_DIM (1 << 20)

/* ------------------------------------------------------------------------ table ------ */

static double rope_position(const h3s_tensor *pos, int64_t i) {
    return pos->dtype == H3S_F64 ? ((const double *)pos->data)[i] : (double)((const float *)pos->data)[i];
}

/* Every position of a host [S, 3] tensor: finite after the f32 cast the model applies, and at most
 * H3S_DET_TRIG_MAX in magnitude (theta >= 1 gives inv_freq <= 1, so |angle| <= |position|: every angle stays where
 * the deterministic sin/cos are accurate). */
h3s_status h3s_rope_check_positions(const char *op, const h3s_tensor *pos) {
    int64_t n = 3 * pos->shape[0];
    for (int64_t i = 0; i < n; i++) {
        double p = rope_position(pos, i);
        if (!isfinite(p) || !isfinite((float)p))
            return h3s_fail(H3S_ERR_INVALID, "%s: position_ids[%lld, %lld] = %g is not finite in f32", op,
                            (long long)(i / 3), (long long)(i % 3), p);
        if (fabs((double)(float)p) > H3S_DET_TRIG_MAX)
            return h3s_fail(H3S_ERR_INVALID, "%s: position_ids[%lld, %lld] = %g exceeds %g in magnitude", op,
                            (long long)(i / 3), (long long)(i % 3), p, H3S_DET_TRIG_MAX);
    }
    return H3S_OK;
}

static h3s_status rope_table_check(const h3s_tensor *pos, int64_t F, double theta, const h3s_tensor *cos_out,
                                   const h3s_tensor *sin_out, int prechecked, int *golden, int *device) {
    static const char *op = "rope_table";
    if (!pos) return h3s_fail(H3S_ERR_INVALID, "%s: position_ids is NULL", op);
    if (!cos_out) return h3s_fail(H3S_ERR_INVALID, "%s: cos_out is NULL", op);
    if (!sin_out) return h3s_fail(H3S_ERR_INVALID, "%s: sin_out is NULL", op);
    if (F <= 0 || F > ROPE_MAX_FREQ_DIM)
        return h3s_fail(H3S_ERR_INVALID, "%s: rope_freq_dim = %lld is outside [1, %d]", op, (long long)F,
                        ROPE_MAX_FREQ_DIM);
    /* The strict path uses theta as the provider does, rounded to f32: it must stay finite there.  theta >= 1 keeps
     * every inv_freq <= 1, so no angle exceeds its position (bounded below). */
    if (!(theta >= 1) || !isfinite((float)theta))
        return h3s_fail(H3S_ERR_INVALID, "%s: theta = %g must be >= 1 and finite in f32", op, theta);
    if (cos_out->dtype != H3S_F32 && cos_out->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: cos_out has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(cos_out->dtype));
    *golden = cos_out->dtype == H3S_F64;
    if (sin_out->dtype != cos_out->dtype)
        return h3s_fail(H3S_ERR_DTYPE, "%s: sin_out has dtype %s but cos_out has %s (strict and golden cannot mix)", op,
                        h3s_dtype_name(sin_out->dtype), h3s_dtype_name(cos_out->dtype));
    if (*golden && pos->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: position_ids has dtype %s, the golden table (F64) needs F64", op,
                        h3s_dtype_name(pos->dtype));
    if (!*golden && pos->dtype != H3S_F64 && pos->dtype != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "%s: position_ids has dtype %s, expected F64 or F32", op,
                        h3s_dtype_name(pos->dtype));
    int64_t pos_dims[2] = {-1, 3};
    H3S_TRY(h3s_check_shape(op, "position_ids", pos, pos->dtype, 2, pos_dims));
    int64_t table_dims[2] = {pos->shape[0], 6 * F};
    H3S_TRY(h3s_check_shape(op, "cos_out", cos_out, cos_out->dtype, 2, table_dims));
    H3S_TRY(h3s_check_shape(op, "sin_out", sin_out, sin_out->dtype, 2, table_dims));
    const h3s_tensor *ts[3] = {pos, cos_out, sin_out};
    const char *names[3] = {"position_ids", "cos_out", "sin_out"};
    H3S_TRY(h3s_check_placement(op, ts, names, 3, device));
    if (!*device) {
        /* an output written over the positions or the other table would depend on the thread count */
        H3S_TRY(h3s_check_disjoint(op, "cos_out", cos_out, ts, names, 1, 0));
        H3S_TRY(h3s_check_disjoint(op, "sin_out", sin_out, ts, names, 2, 0));
        return h3s_rope_check_positions(op, pos);
    }
    /* device positions: the same checks on a host copy (S x 3 values) before the kernel reads them, unless the caller
     * checked these very values on the host before uploading them (the model) */
    if (prechecked) return H3S_OK;
    h3s_tensor host;
    H3S_TRY(h3s_tensor_host_copy(pos, &host));
    h3s_status st = h3s_rope_check_positions(op, &host);
    h3s_tensor_free(&host);
    return st;
}

static h3s_status rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta, h3s_tensor *cos_out,
                             h3s_tensor *sin_out, int prechecked) {
    int golden = 0, device = 0;
    H3S_TRY(rope_table_check(position_ids, rope_freq_dim, theta, cos_out, sin_out, prechecked, &golden, &device));
    if (device) return h3s_cuda_rope_table(position_ids, rope_freq_dim, theta, cos_out, sin_out);

    const int64_t F = rope_freq_dim, S = position_ids->shape[0], W = 6 * F;
    if (golden) {
        double *inv = h3s_malloc((size_t)F, sizeof(double));
        if (!inv) return H3S_ERR_NOMEM;
        for (int64_t j = 0; j < F; j++)
            inv[j] = 1.0 / pow(theta, (double)(2 * j) / (double)(2 * F));
        double *co = (double *)cos_out->data, *so = (double *)sin_out->data;
#pragma omp parallel for schedule(static)
        for (int64_t s = 0; s < S; s++) {
            for (int64_t axis = 0; axis < 3; axis++) {
                double p = (double)(float)rope_position(position_ids, s * 3 + axis);
                for (int64_t j = 0; j < F; j++) {
                    double a = p * inv[j], c = cos(a), sn = sin(a);
                    int64_t col = axis * F + j;
                    co[s * W + col] = c;
                    co[s * W + 3 * F + col] = c;
                    so[s * W + col] = sn;
                    so[s * W + 3 * F + col] = sn;
                }
            }
        }
        free(inv);
        return H3S_OK;
    }

    /* Provider recipe in f32: e_j = f32(2j) / f32(2F); p_j = theta_f32 ** e_j (computed as
     * exp(e_j * ln theta) in double and rounded once: correctly rounded except at near-ties,
     * like a good powf); inv_j = 1 / p_j in f32. */
    float *inv = h3s_malloc((size_t)F, sizeof(float));
    if (!inv) return H3S_ERR_NOMEM;
    double ln_theta = h3s_det_log((double)(float)theta);
    for (int64_t j = 0; j < F; j++) {
        float e = (float)(2 * j) / (float)(2 * F);
        float p = (float)h3s_det_exp((double)e * ln_theta);
        inv[j] = 1.0f / p;
    }
    float *co = (float *)cos_out->data, *so = (float *)sin_out->data;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        for (int64_t axis = 0; axis < 3; axis++) {
            float p = (float)rope_position(position_ids, s * 3 + axis);
            for (int64_t j = 0; j < F; j++) {
                float a = p * inv[j];
                float c = (float)h3s_det_cos((double)a), sn = (float)h3s_det_sin((double)a);
                int64_t col = axis * F + j;
                co[s * W + col] = c;
                co[s * W + 3 * F + col] = c;
                so[s * W + col] = sn;
                so[s * W + 3 * F + col] = sn;
            }
        }
    }
    free(inv);
    return H3S_OK;
}

h3s_status h3s_rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta, h3s_tensor *cos_out,
                          h3s_tensor *sin_out) {
    return rope_table(position_ids, rope_freq_dim, theta, cos_out, sin_out, 0);
}

h3s_status h3s_rope_table_prechecked(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta,
                                     h3s_tensor *cos_out, h3s_tensor *sin_out) {
    return rope_table(position_ids, rope_freq_dim, theta, cos_out, sin_out, 1);
}

/* ------------------------------------------------------------------------ apply ------ */

typedef struct rope_geometry {
    int64_t M, W, D, S, R, half;
} rope_geometry;

/* Shared checks of forward (x -> y) and backward (dy -> dx).  `in_strict`/`out_strict` are
 * the strict dtypes of the input and output (BF16/BF16 forward, F32/F32 backward). */
static h3s_status rope_apply_check(const char *op, const char *in_name, const h3s_tensor *in, const char *out_name,
                                   const h3s_tensor *out, int64_t heads, const h3s_tensor *cos_t,
                                   const h3s_tensor *sin_t, h3s_dtype in_strict, h3s_dtype out_strict, rope_geometry *g,
                                   int *golden, int *device) {
    if (!in) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, in_name);
    if (!cos_t) return h3s_fail(H3S_ERR_INVALID, "%s: cos is NULL", op);
    if (!sin_t) return h3s_fail(H3S_ERR_INVALID, "%s: sin is NULL", op);
    if (!out) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, out_name);
    if (in->dtype == H3S_F64) {
        *golden = 1;
    } else if (in->dtype == in_strict) {
        *golden = 0;
    } else {
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, expected %s (strict) or F64 (golden)", op, in_name,
                        h3s_dtype_name(in->dtype), h3s_dtype_name(in_strict));
    }
    h3s_dtype table_dt = *golden ? H3S_F64 : H3S_F32, out_dt = *golden ? H3S_F64 : out_strict;
    const char *mode = *golden ? "golden" : "strict";
    if (cos_t->dtype != table_dt)
        return h3s_fail(H3S_ERR_DTYPE, "%s: cos has dtype %s, the %s path needs %s (strict and golden cannot mix)", op,
                        h3s_dtype_name(cos_t->dtype), mode, h3s_dtype_name(table_dt));
    if (sin_t->dtype != table_dt)
        return h3s_fail(H3S_ERR_DTYPE, "%s: sin has dtype %s, the %s path needs %s (strict and golden cannot mix)", op,
                        h3s_dtype_name(sin_t->dtype), mode, h3s_dtype_name(table_dt));
    if (out->dtype != out_dt)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, the %s path needs %s (strict and golden cannot mix)", op,
                        out_name, h3s_dtype_name(out->dtype), mode, h3s_dtype_name(out_dt));
    int64_t any2[2] = {-1, -1};
    H3S_TRY(h3s_check_shape(op, in_name, in, in->dtype, 2, any2));
    H3S_TRY(h3s_check_shape(op, "cos", cos_t, table_dt, 2, any2));
    H3S_TRY(h3s_check_shape(op, "sin", sin_t, table_dt, 2, cos_t->shape));
    int64_t in_dims[2] = {in->shape[0], in->shape[1]};
    H3S_TRY(h3s_check_shape(op, out_name, out, out_dt, 2, in_dims));
    if (heads <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: heads = %lld must be > 0", op, (long long)heads);
    g->M = in->shape[0];
    g->W = in->shape[1];
    if (g->W % heads != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s width %lld is not a multiple of heads = %lld", op, in_name,
                        (long long)g->W, (long long)heads);
    g->D = g->W / heads;
    if (g->D % 2 != 0) return h3s_fail(H3S_ERR_SHAPE, "%s: head_dim = %lld must be even", op, (long long)g->D);
    g->S = cos_t->shape[0];
    g->R = cos_t->shape[1];
    if (g->S <= 0) return h3s_fail(H3S_ERR_SHAPE, "%s: cos has %lld rows, expected at least 1", op, (long long)g->S);
    if (g->R <= 0 || g->R % 6 != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: cos width %lld is not 6 * rope_freq_dim with rope_freq_dim >= 1", op,
                        (long long)g->R);
    if (g->R > g->D)
        return h3s_fail(H3S_ERR_SHAPE, "%s: the %lld rotary channels exceed head_dim = %lld", op, (long long)g->R,
                        (long long)g->D);
    if (g->M % g->S != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %lld rows, not a multiple of the %lld table rows", op, in_name,
                        (long long)g->M, (long long)g->S);
    g->half = g->R / 2;
    const h3s_tensor *ts[4] = {in, cos_t, sin_t, out};
    const char *names[4] = {in_name, "cos", "sin", out_name};
    H3S_TRY(h3s_check_placement(op, ts, names, 4, device));
    /* out may be in itself (each head reads a pair before writing it); any other overlap, with in or a table, would
     * let one thread write what another still reads */
    if (!*device) H3S_TRY(h3s_check_disjoint(op, out_name, out, ts, names, 3, 1u));
    return H3S_OK;
}

/* One head of one row: the pairs (i, half + i), i < half, rotated by the table row (c, s);
 * channels R .. D-1 pass through.  Both entries of a pair are read before either is written,
 * so out may alias in.  With x1 = x[i], x2 = x[half + i] (rotated = [-x2, x1]), the forward is
 *   y[i]        = x1 * cos[i]        - x2 * sin[i]
 *   y[half + i] = x2 * cos[half + i] + x1 * sin[half + i]
 * i.e. y = diag(cos) x + diag(sin) P x with P (x1, x2) = (-x2, x1), so the backward is
 * dx = diag(cos) dy + P^T (diag(sin) dy) with P^T (v1, v2) = (v2, -v1):
 *   dx[i]        = dy1 * cos[i]        + dy2 * sin[half + i]
 *   dx[half + i] = dy2 * cos[half + i] - dy1 * sin[i]
 * Golden: both directions in double. */
static void head_golden(const double *in, const double *c, const double *s, int64_t half, int64_t R, int64_t D,
                        int backward, double *out) {
    for (int64_t i = 0; i < half; i++) {
        double a1 = in[i], a2 = in[half + i], o1, o2;
        if (backward) {
            o1 = a1 * c[i] + a2 * s[half + i];
            o2 = a2 * c[half + i] - a1 * s[i];
        } else {
            o1 = a1 * c[i] - a2 * s[i];
            o2 = a2 * c[half + i] + a1 * s[half + i];
        }
        out[i] = o1;
        out[half + i] = o2;
    }
    for (int64_t i = R; i < D; i++)
        out[i] = in[i];
}

/* Strict forward: BF16 x, two f32 products, one f32 sum (no contraction), one rounding to BF16. */
static void head_strict_forward(const uint16_t *x, const float *c, const float *s, int64_t half, int64_t R, int64_t D,
                                uint16_t *y) {
    for (int64_t i = 0; i < half; i++) {
        float x1 = h3s_bf16_value(x[i]), x2 = h3s_bf16_value(x[half + i]);
        float p1 = x1 * c[i], p2 = x2 * s[i];
        float q1 = x2 * c[half + i], q2 = x1 * s[half + i];
        y[i] = h3s_bf16_round(p1 - p2);
        y[half + i] = h3s_bf16_round(q1 + q2);
    }
    for (int64_t i = R; i < D; i++)
        y[i] = x[i]; /* pass-through: the same bits */
}

/* Strict backward: F32 dy, two f32 products, one f32 sum, stored in F32. */
static void head_strict_backward(const float *dy, const float *c, const float *s, int64_t half, int64_t R, int64_t D,
                                 float *dx) {
    for (int64_t i = 0; i < half; i++) {
        float g1 = dy[i], g2 = dy[half + i];
        float p1 = g1 * c[i], p2 = g2 * s[half + i];
        float q1 = g2 * c[half + i], q2 = g1 * s[i];
        dx[i] = p1 + p2;
        dx[half + i] = q1 - q2;
    }
    for (int64_t i = R; i < D; i++)
        dx[i] = dy[i];
}

/* Every head of every row (row m uses table row m % S) of in into out: the forward (x -> y)
 * or the backward (dy -> dx), strict or golden. */
static void rope_apply(const rope_geometry *g, int64_t heads, int golden, int backward, const h3s_tensor *in,
                       const h3s_tensor *cos_t, const h3s_tensor *sin_t, h3s_tensor *out) {
    const int64_t M = g->M, W = g->W, D = g->D, S = g->S, R = g->R, half = g->half;
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const int64_t t = (m % S) * R;
        for (int64_t h = 0; h < heads; h++) {
            const int64_t o = m * W + h * D;
            if (golden)
                head_golden((const double *)in->data + o, (const double *)cos_t->data + t,
                            (const double *)sin_t->data + t, half, R, D, backward, (double *)out->data + o);
            else if (backward)
                head_strict_backward((const float *)in->data + o, (const float *)cos_t->data + t,
                                     (const float *)sin_t->data + t, half, R, D, (float *)out->data + o);
            else
                head_strict_forward((const uint16_t *)in->data + o, (const float *)cos_t->data + t,
                                    (const float *)sin_t->data + t, half, R, D, (uint16_t *)out->data + o);
        }
    }
}

h3s_status h3s_rope_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t,
                            h3s_tensor *y) {
    rope_geometry g = {0, 0, 0, 0, 0, 0};
    int golden = 0, device = 0;
    H3S_TRY(rope_apply_check("rope_forward", "x", x, "y", y, heads, cos_t, sin_t, H3S_BF16, H3S_BF16, &g, &golden,
                             &device));
    if (device) return h3s_cuda_rope_forward(x, heads, cos_t, sin_t, y);
    rope_apply(&g, heads, golden, 0, x, cos_t, sin_t, y);
    return H3S_OK;
}

h3s_status h3s_rope_backward(int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *dy,
                             h3s_tensor *dx) {
    rope_geometry g = {0, 0, 0, 0, 0, 0};
    int golden = 0, device = 0;
    H3S_TRY(rope_apply_check("rope_backward", "dy", dy, "dx", dx, heads, cos_t, sin_t, H3S_F32, H3S_F32, &g, &golden,
                             &device));
    if (device) return h3s_cuda_rope_backward(heads, cos_t, sin_t, dy, dx);
    rope_apply(&g, heads, golden, 1, dy, cos_t, sin_t, dx);
    return H3S_OK;
}

/* Timestep embedding: the sinusoidal features (diffusers Timesteps with flip_sin_to_cos =
 * True, downscale_freq_shift = 0, scale 1, timesteps unscaled in [0, 1]) and the f32 MLP
 * linear_2(silu(linear_1(features))), forward and backward.
 *
 * Strict: F32 everywhere, the provider's f32 recipe step by step, exp/sin/cos/silu from the
 * deterministic double routines rounded once to f32, GEMMs through h3s_linear_*.
 * Golden: F64 everywhere, libm double functions, no intermediate rounding. */
#include <math.h>

#include "core/core.h"
#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

/* k and half must be exact in f32 */
#define TIMESTEP_MAX_FREQ_DIM (1 << 24)
/* -ln(10000) in double; the strict path rounds it to f32 as the provider's scalar product does. */
#define TIMESTEP_NEG_LN_MAX_PERIOD (-9.210340371976184)

/* ------------------------------------------------------------------------ sinusoid --- */

/* freq[k] = exp(f32(f32(-ln 10000) * k) / half) rounded once to f32: the provider computes the
 * exponent with two f32 operations and exp in f32.  A new table (the caller frees it), NULL
 * when out of memory. */
static float *strict_freqs(int64_t half) {
    float *freq = h3s_malloc((size_t)half, sizeof(float));
    if (!freq) return NULL;
    const float neg_ln = (float)TIMESTEP_NEG_LN_MAX_PERIOD;
    for (int64_t k = 0; k < half; k++) {
        float e = neg_ln * (float)k;
        e = e / (float)half;
        freq[k] = h3s_det_expf(e);
    }
    return freq;
}

static double *golden_freqs(int64_t half) {
    double *freq = h3s_malloc((size_t)half, sizeof(double));
    if (!freq) return NULL;
    for (int64_t k = 0; k < half; k++)
        freq[k] = exp(-log(10000.0) * (double)k / (double)half);
    return freq;
}

/* The strict angle t * freq in f32 and its cosine and sine, each from the deterministic
 * double routine rounded once to f32: the forward's values, which the backward recomputes
 * bit for bit. */
static inline void strict_cos_sin(float t, float freq, float *c, float *s) {
    float a = t * freq;
    *c = (float)h3s_det_cos((double)a);
    *s = (float)h3s_det_sin((double)a);
}

static h3s_status check_freq_dim(const char *op, int64_t freq_dim) {
    if (freq_dim <= 0 || freq_dim % 2 != 0 || freq_dim > TIMESTEP_MAX_FREQ_DIM)
        return h3s_fail(H3S_ERR_INVALID, "%s: freq_dim = %lld must be even and in [2, %d]", op, (long long)freq_dim,
                        TIMESTEP_MAX_FREQ_DIM);
    return H3S_OK;
}

/* t in device memory is checked on a host copy (T values) before a kernel reads it. */
static h3s_status check_timesteps_finite(const char *op, const h3s_tensor *t) {
    if (t->device) {
        h3s_tensor host;
        H3S_TRY(h3s_tensor_host_copy(t, &host));
        h3s_status st = check_timesteps_finite(op, &host);
        h3s_tensor_free(&host);
        return st;
    }
    int64_t T = t->shape[0];
    for (int64_t i = 0; i < T; i++) {
        double v = h3s_tensor_get_f64(t, i);
        if (!isfinite(v)) return h3s_fail(H3S_ERR_INVALID, "%s: t[%lld] = %g is not finite", op, (long long)i, v);
        /* freq <= 1, so |t * freq| <= |t|: keep every argument where the deterministic
         * sin/cos are accurate (the model's timesteps lie in [0, 1]) */
        if (fabs(v) > H3S_DET_TRIG_MAX)
            return h3s_fail(H3S_ERR_INVALID, "%s: t[%lld] = %g exceeds %g in magnitude", op, (long long)i, v,
                            H3S_DET_TRIG_MAX);
    }
    return H3S_OK;
}

/* t decides the mode (F32 strict, F64 golden) and must be 1-D. */
static h3s_status timestep_mode(const char *op, const h3s_tensor *t, h3s_dtype *dt) {
    if (t->dtype != H3S_F32 && t->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: t has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(t->dtype));
    *dt = t->dtype;
    int64_t any1 = -1;
    return h3s_check_shape(op, "t", t, *dt, 1, &any1);
}

static h3s_status sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out, int prechecked) {
    static const char *op = "timestep_sinusoid_forward";
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: t is NULL", op);
    if (!out) return h3s_fail(H3S_ERR_INVALID, "%s: out is NULL", op);
    H3S_TRY(check_freq_dim(op, freq_dim));
    h3s_dtype dt = H3S_F32;
    H3S_TRY(timestep_mode(op, t, &dt));
    int64_t out_dims[2] = {t->shape[0], freq_dim};
    H3S_TRY(h3s_check_shape(op, "out", out, dt, 2, out_dims));
    const h3s_tensor *ts[2] = {t, out};
    const char *names[2] = {"t", "out"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 2, &device));
    /* device timesteps the caller checked on the host before uploading them (the model) are not copied back */
    if (!(device && prechecked)) H3S_TRY(check_timesteps_finite(op, t));
    if (device) return h3s_cuda_timestep_sinusoid_forward(t, freq_dim, out);
    H3S_TRY(h3s_check_disjoint(op, "out", out, ts, names, 1, 0)); /* features written over t: thread-dependent */

    const int64_t T = t->shape[0], half = freq_dim / 2;
    if (dt == H3S_F64) {
        double *freq = golden_freqs(half);
        if (!freq) return H3S_ERR_NOMEM;
        const double *tv = (const double *)t->data;
        double *o = (double *)out->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T; i++) {
            for (int64_t k = 0; k < half; k++) {
                double a = tv[i] * freq[k];
                o[i * freq_dim + k] = cos(a);
                o[i * freq_dim + half + k] = sin(a);
            }
        }
        free(freq);
        return H3S_OK;
    }
    float *freq = strict_freqs(half);
    if (!freq) return H3S_ERR_NOMEM;
    const float *tv = (const float *)t->data;
    float *o = (float *)out->data;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T; i++) {
        for (int64_t k = 0; k < half; k++)
            strict_cos_sin(tv[i], freq[k], &o[i * freq_dim + k], &o[i * freq_dim + half + k]);
    }
    free(freq);
    return H3S_OK;
}

h3s_status h3s_timestep_sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out) {
    return sinusoid_forward(t, freq_dim, out, 0);
}

h3s_status h3s_timestep_sinusoid_forward_prechecked(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out) {
    return sinusoid_forward(t, freq_dim, out, 1);
}

h3s_status h3s_timestep_sinusoid_backward(const h3s_tensor *t, const h3s_tensor *dout, h3s_tensor *dt_out) {
    static const char *op = "timestep_sinusoid_backward";
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: t is NULL", op);
    if (!dout) return h3s_fail(H3S_ERR_INVALID, "%s: dout is NULL", op);
    if (!dt_out) return h3s_fail(H3S_ERR_INVALID, "%s: dt is NULL", op);
    h3s_dtype dt = H3S_F32;
    H3S_TRY(timestep_mode(op, t, &dt));
    int64_t dout_dims[2] = {t->shape[0], -1};
    H3S_TRY(h3s_check_shape(op, "dout", dout, dt, 2, dout_dims));
    const int64_t freq_dim = dout->shape[1];
    H3S_TRY(check_freq_dim(op, freq_dim));
    H3S_TRY(h3s_check_shape(op, "dt", dt_out, dt, 1, t->shape));
    const h3s_tensor *ts[3] = {t, dout, dt_out};
    const char *names[3] = {"t", "dout", "dt"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 3, &device));
    H3S_TRY(check_timesteps_finite(op, t));
    if (device) return h3s_cuda_timestep_sinusoid_backward(t, dout, dt_out);

    /* out = [cos(t f_k), sin(t f_k)]  =>  dt = sum_k (-dcos_k sin(t f_k) + dsin_k cos(t f_k)) f_k,
     * one accumulator per row, k ascending. */
    const int64_t T = t->shape[0], half = freq_dim / 2;
    if (dt == H3S_F64) {
        double *freq = golden_freqs(half);
        if (!freq) return H3S_ERR_NOMEM;
        const double *tv = (const double *)t->data, *g = (const double *)dout->data;
        double *o = (double *)dt_out->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T; i++) {
            double acc = 0.0;
            for (int64_t k = 0; k < half; k++) {
                double a = tv[i] * freq[k];
                double gc = g[i * freq_dim + k], gs = g[i * freq_dim + half + k];
                acc += (gs * cos(a) - gc * sin(a)) * freq[k];
            }
            o[i] = acc;
        }
        free(freq);
        return H3S_OK;
    }
    float *freq = strict_freqs(half);
    if (!freq) return H3S_ERR_NOMEM;
    const float *tv = (const float *)t->data, *g = (const float *)dout->data;
    float *o = (float *)dt_out->data;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T; i++) {
        float acc = 0.0f;
        for (int64_t k = 0; k < half; k++) {
            float c, s; /* the forward's values, bit for bit */
            strict_cos_sin(tv[i], freq[k], &c, &s);
            float gc = g[i * freq_dim + k], gs = g[i * freq_dim + half + k];
            float p_sin = gs * c, p_cos = gc * s;
            float term = (p_sin - p_cos) * freq[k];
            acc += term;
        }
        o[i] = acc;
    }
    free(freq);
    return H3S_OK;
}

/* ------------------------------------------------------------------------ MLP -------- */

typedef struct mlp_dims {
    int64_t T, Fd, Eh, E;
} mlp_dims;

/* Shapes and dtypes of the parameters and the saved hidden activation (shared by both
 * directions).  b1/b2 may be NULL: a missing bias is a linear without bias, as in h3s_linear. */
static h3s_status mlp_check_common(const char *op, const h3s_tensor *features, const h3s_tensor *w1,
                                   const h3s_tensor *b1, const h3s_tensor *w2, const h3s_tensor *b2,
                                   const h3s_tensor *hidden, h3s_dtype *dt, mlp_dims *d) {
    if (!features) return h3s_fail(H3S_ERR_INVALID, "%s: features is NULL", op);
    if (!w1) return h3s_fail(H3S_ERR_INVALID, "%s: w1 is NULL", op);
    if (!w2) return h3s_fail(H3S_ERR_INVALID, "%s: w2 is NULL", op);
    if (!hidden) return h3s_fail(H3S_ERR_INVALID, "%s: hidden is NULL", op);
    if (features->dtype != H3S_F32 && features->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: features has dtype %s, expected F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(features->dtype));
    *dt = features->dtype;
    int64_t any2[2] = {-1, -1};
    H3S_TRY(h3s_check_shape(op, "features", features, *dt, 2, any2));
    d->T = features->shape[0];
    d->Fd = features->shape[1];
    int64_t w1_dims[2] = {-1, d->Fd};
    H3S_TRY(h3s_check_shape(op, "w1", w1, *dt, 2, w1_dims));
    d->Eh = w1->shape[0];
    int64_t w2_dims[2] = {-1, d->Eh};
    H3S_TRY(h3s_check_shape(op, "w2", w2, *dt, 2, w2_dims));
    d->E = w2->shape[0];
    if (b1) H3S_TRY(h3s_check_shape(op, "b1", b1, *dt, 1, &d->Eh));
    if (b2) H3S_TRY(h3s_check_shape(op, "b2", b2, *dt, 1, &d->E));
    int64_t hid_dims[2] = {d->T, d->Eh};
    H3S_TRY(h3s_check_shape(op, "hidden", hidden, *dt, 2, hid_dims));
    return H3S_OK;
}

/* s = silu(h) elementwise: strict through the deterministic silu (one rounding), golden in double. */
static void mlp_silu(const h3s_tensor *h, h3s_tensor *s) {
    int64_t n = h3s_tensor_numel(h);
    if (h->dtype == H3S_F64) {
        const double *hv = (const double *)h->data;
        double *sv = (double *)s->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            sv[i] = hv[i] / (1.0 + exp(-hv[i]));
    } else {
        const float *hv = (const float *)h->data;
        float *sv = (float *)s->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            sv[i] = h3s_det_siluf(hv[i]);
    }
}

h3s_status h3s_timestep_mlp_forward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                                    const h3s_tensor *w2, const h3s_tensor *b2, h3s_tensor *hidden, h3s_tensor *temb) {
    static const char *op = "timestep_mlp_forward";
    h3s_dtype dt = H3S_F32;
    mlp_dims d = {0, 0, 0, 0};
    H3S_TRY(mlp_check_common(op, features, w1, b1, w2, b2, hidden, &dt, &d));
    if (!temb) return h3s_fail(H3S_ERR_INVALID, "%s: temb is NULL", op);
    int64_t temb_dims[2] = {d.T, d.E};
    H3S_TRY(h3s_check_shape(op, "temb", temb, dt, 2, temb_dims));
    const h3s_tensor *ts[7] = {features, w1, b1, w2, b2, hidden, temb};
    const char *names[7] = {"features", "w1", "b1", "w2", "b2", "hidden", "temb"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 7, &device));
    if (device) return h3s_cuda_timestep_mlp_forward(features, w1, b1, w2, b2, hidden, temb);
    /* every output apart from every operand and from the other output */
    H3S_TRY(h3s_check_disjoint(op, "hidden", hidden, ts, names, 5, 0));
    H3S_TRY(h3s_check_disjoint(op, "temb", temb, ts, names, 6, 0));

    /* linear_1 into a temporary, copied to `hidden` only once linear_2 has succeeded: a failure leaves both outputs
     * as they were */
    h3s_tensor hid, act;
    int64_t act_dims[2] = {d.T, d.Eh};
    H3S_TRY(h3s_tensor_alloc(&hid, dt, 2, act_dims));
    h3s_status st = h3s_tensor_alloc(&act, dt, 2, act_dims);
    if (st != H3S_OK) {
        h3s_tensor_free(&hid);
        return st;
    }
    st = h3s_linear_forward(features, w1, b1, &hid);
    if (st == H3S_OK) {
        mlp_silu(&hid, &act);
        st = h3s_linear_forward(&act, w2, b2, temb);
    }
    if (st == H3S_OK && h3s_tensor_nbytes(&hid)) memcpy(hidden->data, hid.data, h3s_tensor_nbytes(&hid));
    h3s_tensor_free(&act);
    h3s_tensor_free(&hid);
    if (st != H3S_OK) return h3s_fail_context(st, "%s", op);
    return H3S_OK;
}

h3s_status h3s_timestep_mlp_backward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *w2,
                                     const h3s_tensor *hidden, const h3s_tensor *dtemb, h3s_tensor *dfeatures,
                                     h3s_tensor *dw1, h3s_tensor *db1, h3s_tensor *dw2, h3s_tensor *db2) {
    static const char *op = "timestep_mlp_backward";
    h3s_dtype dt = H3S_F32;
    mlp_dims d = {0, 0, 0, 0};
    H3S_TRY(mlp_check_common(op, features, w1, NULL, w2, NULL, hidden, &dt, &d));
    if (!dtemb) return h3s_fail(H3S_ERR_INVALID, "%s: dtemb is NULL", op);
    int64_t dtemb_dims[2] = {d.T, d.E};
    H3S_TRY(h3s_check_shape(op, "dtemb", dtemb, dt, 2, dtemb_dims));
    if (dfeatures) H3S_TRY(h3s_check_shape(op, "dfeatures", dfeatures, dt, 2, features->shape));
    if (dw1) H3S_TRY(h3s_check_shape(op, "dw1", dw1, dt, 2, w1->shape));
    if (db1) H3S_TRY(h3s_check_shape(op, "db1", db1, dt, 1, &d.Eh));
    if (dw2) H3S_TRY(h3s_check_shape(op, "dw2", dw2, dt, 2, w2->shape));
    if (db2) H3S_TRY(h3s_check_shape(op, "db2", db2, dt, 1, &d.E));
    const h3s_tensor *ts[10] = {features, w1, w2, hidden, dtemb, dfeatures, dw1, db1, dw2, db2};
    const char *names[10] = {"features", "w1", "w2", "hidden", "dtemb", "dfeatures", "dw1", "db1", "dw2", "db2"};
    int device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 10, &device));
    if (device) return h3s_cuda_timestep_mlp_backward(features, w1, w2, hidden, dtemb, dfeatures, dw1, db1, dw2, db2);

    const int need_first = dfeatures || dw1 || db1; /* anything below silu needs d(hidden) */
    if (!need_first && !dw2 && !db2) return H3S_OK;

    int64_t act_dims[2] = {d.T, d.Eh};
    h3s_tensor act, dact;
    memset(&dact, 0, sizeof dact);
    H3S_TRY(h3s_tensor_alloc(&act, dt, 2, act_dims));
    h3s_status st = H3S_OK;
    if (need_first) {
        st = h3s_tensor_alloc(&dact, dt, 2, act_dims);
        if (st != H3S_OK) {
            h3s_tensor_free(&act);
            return st;
        }
    }
    mlp_silu(hidden, &act); /* linear_2's input, recomputed bit for bit */
    st = h3s_linear_backward(&act, w2, dtemb, need_first ? &dact : NULL, dw2, db2);
    if (st == H3S_OK && need_first) {
        /* d hidden = d act * silu'(hidden): one product per element */
        int64_t n = d.T * d.Eh;
        if (dt == H3S_F64) {
            const double *hv = (const double *)hidden->data;
            double *g = (double *)dact.data;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++) {
                double s = 1.0 / (1.0 + exp(-hv[i]));
                g[i] = g[i] * (s * (1.0 + hv[i] * (1.0 - s)));
            }
        } else {
            const float *hv = (const float *)hidden->data;
            float *g = (float *)dact.data;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++)
                g[i] = g[i] * h3s_det_silu_gradf(hv[i]);
        }
        st = h3s_linear_backward(features, w1, &dact, dfeatures, dw1, db1);
    }
    h3s_tensor_free(&act);
    if (need_first) h3s_tensor_free(&dact);
    if (st != H3S_OK) return h3s_fail_context(st, "%s", op);
    return H3S_OK;
}

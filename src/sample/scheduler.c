/* Rectified-flow Euler scheduler.  Compiled with -ffp-contract=off: every a*b+c below rounds twice,
 * as the reference's separate torch operations do. */
#include "sample/scheduler.h"

#include <math.h>

#include "core/core.h"

void h3s_torch_linspace_f32(float start, float end, int64_t n, float *out) {
    if (n <= 0 || !out) return;
    if (n == 1) {
        out[0] = start;
        return;
    }
    const float step = (end - start) / (float)(n - 1);
    const int64_t halfway = n / 2;
    /* torch's CPU kernel evaluates `start + step * i` and `end - step * (n - 1 - i)` in float; the
     * x86-64 AVX2/AVX512 builds of torch (and aarch64 builds) compile both into fused multiply-adds,
     * which is what the reference pipeline runs on.  fmaf gives that single rounding on every machine. */
    for (int64_t i = 0; i < n; i++) {
        if (i < halfway)
            out[i] = fmaf(step, (float)i, start);
        else
            out[i] = fmaf(-step, (float)(n - 1 - i), end);
    }
}

h3s_status h3s_schedule_sigmas(int64_t n, float shift, float *sigmas_out, int64_t *count_out) {
    if (!sigmas_out) return h3s_fail(H3S_ERR_INVALID, "schedule_sigmas: sigmas_out is NULL");
    if (!count_out) return h3s_fail(H3S_ERR_INVALID, "schedule_sigmas: count_out is NULL");
    if (n < 2) return h3s_fail(H3S_ERR_INVALID, "schedule_sigmas: n = %lld grid points, need at least 2", (long long)n);
    if (n > ((int64_t)1 << 24))
        return h3s_fail(H3S_ERR_INVALID, "schedule_sigmas: n = %lld grid points exceeds 2^24 (float32 indices)",
                        (long long)n);
    if (!isfinite(shift) || !(shift > 0.0f))
        return h3s_fail(H3S_ERR_INVALID, "schedule_sigmas: shift = %g must be positive and finite", (double)shift);
    float *base = h3s_malloc((size_t)n, sizeof(float));
    if (!base) return H3S_ERR_NOMEM;
    h3s_torch_linspace_f32(1.0f, 0.0f, n, base);
    const float sm1 = shift - 1.0f;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        float num = shift * base[i];
        float den = sm1 * base[i];
        den = 1.0f + den;
        float sigma = num / den;
        /* torch.unique_consecutive: keep a value unless it equals the last one kept. */
        if (count > 0 && sigma == sigmas_out[count - 1]) continue;
        sigmas_out[count++] = sigma;
    }
    free(base);
    *count_out = count;
    return H3S_OK;
}

h3s_status h3s_schedule_check(int64_t steps, float shift) {
    if (steps < 1) return h3s_fail(H3S_ERR_INVALID, "schedule_check: %lld steps, need at least 1", (long long)steps);
    if (steps >= ((int64_t)1 << 24))
        return h3s_fail(H3S_ERR_INVALID, "schedule_check: %lld steps exceeds 2^24 - 1 (float32 indices)",
                        (long long)steps);
    float *sig = h3s_malloc((size_t)(steps + 1), sizeof(float));
    if (!sig) return H3S_ERR_NOMEM;
    int64_t count = 0;
    h3s_status st = h3s_schedule_sigmas(steps + 1, shift, sig, &count);
    int64_t above = -1;
    for (int64_t i = 0; st == H3S_OK && i < count && above < 0; i++)
        if (!(sig[i] <= 1.0f)) above = i;
    double bad = above >= 0 ? (double)sig[above] : 0;
    free(sig);
    if (st != H3S_OK) return st;
    if (above < 0) return H3S_OK;
    return h3s_fail(H3S_ERR_INVALID,
                    "with %lld steps its sigma schedule rounds sigma %lld to %.9g, above 1 (a negative timestep); a "
                    "shift of 0.5 or more starts at exactly 1",
                    (long long)steps, (long long)above, bad);
}

h3s_status h3s_schedule_timesteps(const float *sigmas, int64_t count, float *timesteps_out) {
    if (!sigmas) return h3s_fail(H3S_ERR_INVALID, "schedule_timesteps: sigmas is NULL");
    if (!timesteps_out) return h3s_fail(H3S_ERR_INVALID, "schedule_timesteps: timesteps_out is NULL");
    if (count < 2)
        return h3s_fail(H3S_ERR_INVALID, "schedule_timesteps: %lld sigmas, need at least 2", (long long)count);
    for (int64_t i = 0; i + 1 < count; i++)
        timesteps_out[i] = 1.0f - sigmas[i];
    return H3S_OK;
}

void h3s_euler_step(const float *x, const float *v, int64_t n, float t, float sigma, float sigma_next, float *x_next) {
    const float sigma_t = 1.0f - t;     /* sigma recovered from the timestep (not the grid) */
    const float r = sigma_next / sigma; /* Euler ratio from the grid */
    const float one_minus_r = 1.0f - r;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float dv = sigma_t * v[i];
        float x0 = x[i] + dv;
        float a = r * x[i];
        float b = one_minus_r * x0;
        x_next[i] = a + b;
    }
}

void h3s_scale_noise(const float *x0, const float *noise, int64_t n, float t, float *out) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        out[i] = h3s_scale_noise1(x0[i], noise[i], t);
}

float h3s_condition_timestep(float t_video) {
    return t_video > H3S_KEYFRAME_NOISE_AUG ? t_video : H3S_KEYFRAME_NOISE_AUG;
}

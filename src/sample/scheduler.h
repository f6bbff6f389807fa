/* Rectified-flow Euler scheduler (eta = 0) of MiniMax-H3 (docs/model.md section 5).
 *
 * Every value is float32 and every operation rounds where the reference scheduler's torch
 * operations round; docs/numerics/layout_scheduler.md lists the rounding points. */
#ifndef H3S_SAMPLE_SCHEDULER_H
#define H3S_SAMPLE_SCHEDULER_H

#include <stdint.h>

#include "h3s.h"
#include "h3s_sample.h"

/* H3S_VIDEO_SHIFT, H3S_AUDIO_SHIFT, h3s_schedule_sigmas, h3s_schedule_timesteps, h3s_euler_step and
 * h3s_scale_noise are public (include/h3s_sample.h). */

/* Keyframe conditioning level: condition rows are noised once to t = 0.999 and held there. */
#define H3S_KEYFRAME_NOISE_AUG 0.999f

/* torch.linspace(start, end, n, dtype=float32) on the CPU as the reference runs it (torch's AVX2/AVX512
 * kernels): step = (end - start) / (float)(n - 1); out[i] = fma(step, i, start) for i < n / 2 and
 * fma(-step, n - 1 - i, end) for the rest, one rounding each.  n >= 1 (n == 1 gives start).  torch's
 * no-FMA "default" CPU build rounds the product first and differs in the last bit for some n; see
 * docs/numerics/layout_scheduler.md. */
void h3s_torch_linspace_f32(float start, float end, int64_t n, float *out);

/* One element of h3s_scale_noise: out = t*x0 + (1 - t)*noise in F32, rounded after t*x0, after (1 - t), after
 * (1 - t)*noise and after the sum (the header is compiled with -ffp-contract=off too). */
static inline float h3s_scale_noise1(float x0, float noise, float t) {
    const float one_minus_t = 1.0f - t;
    const float a = t * x0;
    const float b = one_minus_t * noise;
    return a + b;
}

/* Timestep of the keyframe condition rows at a step whose video timestep is t_video:
 * max(t_video, 0.999f), as the pipeline's max(float(t), 0.999) stored to float32. */
float h3s_condition_timestep(float t_video);

#endif

/* h3strict public API: the rectified-flow Euler scheduler of MiniMax-H3 and the dual trajectory (a request
 * sampled alone, as a rollout, and as item 0 of a training batch, compared bitwise at every step).
 *
 * Ownership and errors as in h3s_model.h: status codes, h3s_last_error(), outputs untouched on failure, the
 * caller frees what a call allocates for it (here the report text, with h3s_free). */
#ifndef H3S_PUBLIC_SAMPLE_H
#define H3S_PUBLIC_SAMPLE_H

#include "h3s.h"
#include "h3s_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ scheduler (docs/model.md section 5)
 * Every value is F32 and rounds where the reference scheduler's torch operations round. */
#define H3S_VIDEO_SHIFT 12.0f
#define H3S_AUDIO_SHIFT 3.0f

/* sigmas = unique_consecutive(s*b / (1 + (s-1)*b)) in F32 with b = linspace(1, 0, n) in F32 (n grid points incl.
 * the terminal 0); the count is returned.  sigmas_out has room for n.  n >= 2, shift > 0 and finite. */
H3S_API h3s_status h3s_schedule_sigmas(int64_t n, float shift, float *sigmas_out, int64_t *count_out);
/* A schedule a trajectory can run: h3s_schedule_sigmas(steps + 1, shift) succeeds (steps >= 1) and no sigma rounds
 * above 1, which would be a negative timestep.  A shift below 0.5 can round so at the first point (1 + (shift - 1)
 * is not shift in float); from 0.5 up the first sigma is exactly 1.  The error names the sigma and its value.
 * h3s_trajectory makes this check on both shifts before any work. */
H3S_API h3s_status h3s_schedule_check(int64_t steps, float shift);
/* timesteps[i] = 1 - sigmas[i] (F32) for i < count - 1 (t = 1 is clean). */
H3S_API h3s_status h3s_schedule_timesteps(const float *sigmas, int64_t count, float *timesteps_out);
/* One Euler step on F32 rows: x0 = x + (1 - t) * v; r = sigma_next / sigma; x_next = r*x + (1 - r)*x0, all F32 in
 * that order.  x_next may alias x. */
H3S_API void h3s_euler_step(const float *x, const float *v, int64_t n, float t, float sigma, float sigma_next,
                            float *x_next);
/* The forward process (the scheduler's scale_noise): out = t*x0 + (1 - t)*noise in F32.  out may alias x0. */
H3S_API void h3s_scale_noise(const float *x0, const float *noise, int64_t n, float t, float *out);

/* ------------------------------------------------------------------ packed layout of a seeded request */
typedef struct h3s_layout_opts {
    int64_t text_tokens;                 /* Nt */
    int64_t frames;                      /* latent frames F of the target video */
    int64_t latent_height, latent_width; /* must be divisible by the patch (2) */
    int64_t audio_latents;               /* A: audio rows = 2 * A, channel-major */
    int keyframe_first, keyframe_last;   /* fl2va keyframes; both 0 = t2va.  Both: "first" block packed first */
    int64_t pad_to; /* 0 = no padding; else total S padded up to a multiple of pad_to with rows tagged -1 */
} h3s_layout_opts;

/* The row counts of a layout (patch_h, patch_w: the config's patch_size[1] and [2]), without building its
 * tensors: nothing is allocated, so a layout too large to build is counted at once; the options are checked as
 * h3s_inputs_seeded checks them (H3S_ERR_INVALID naming the option), and the counts are those of the built layout. */
typedef struct h3s_layout_rows {
    int64_t rows;      /* S, padding included */
    int64_t text;      /* Nt */
    int64_t video;     /* Nv: keyframe condition rows + target video rows */
    int64_t condition; /* keyframe condition rows (the first entries of video_indices) */
    int64_t audio;     /* Na */
    int64_t padding;   /* rows tagged -1 at the end */
} h3s_layout_rows;
H3S_API h3s_status h3s_layout_count(const h3s_layout_opts *lo, int64_t patch_h, int64_t patch_w, h3s_layout_rows *out);

/* The condition rows of a request, inferred from its timesteps: the leading video_indices entries whose timestep
 * differs from the text rows' (condition rows carry max(t_video, 0.999), text rows t_video).  0 when every video
 * row carries the text timestep -- which is also what a request whose t_video is 0.999 or more gives: name the
 * count then -- and for inputs it cannot read (check them with h3s_inputs_validate first). */
H3S_API int64_t h3s_layout_condition_rows(const h3s_inputs *in);

/* Seeded request inputs on that layout for a model of config c, exactly the tensors `h3strict inputs` writes for
 * the same options, seed and timesteps (without an attention mask): item b of the batch depends on (seed, b)
 * only, so item 0 is the same request in a batch of any size.  Every tensor is owned by `out` (h3s_inputs_free);
 * on failure nothing is written. */
H3S_API h3s_status h3s_inputs_seeded(const h3s_config *c, const h3s_layout_opts *lo, int64_t batch, uint64_t seed,
                                     float t_video, float t_audio, h3s_inputs *out);

/* A seeded cotangent (upstream gradient) for sample [batch, nv, wv] and audio_sample [batch, na, wa], F32 standard
 * normal, exactly what `h3strict cotangent` writes: item b of each tensor is drawn from a stream of its own, so item 0
 * does not depend on the batch size.  Both tensors are allocated for the caller (h3s_tensor_free); on failure
 * neither is written. */
H3S_API h3s_status h3s_cotangent_random(int64_t batch, int64_t nv, int64_t wv, int64_t na, int64_t wa, uint64_t seed,
                                        h3s_tensor *d_sample, h3s_tensor *d_audio_sample);

/* ------------------------------------------------------------------ the dual trajectory (docs/strict.md 6) */
typedef void (*h3s_progress_fn)(void *ctx, const char *line);

typedef struct h3s_trajectory_opts {
    const uint64_t *seeds;
    int64_t nseeds;
    int64_t steps; /* Euler steps: the grid has steps + 1 points */
    int64_t batch; /* size of the training batch (item 0 = the rollout's request), >= 2 */
    h3s_backend_kind backend;
    h3s_layout_opts layout;
    int with_grad; /* one backward per step on both layouts, item 0's input gradients compared */
    h3s_progress_fn progress;
    void *progress_ctx;
    /* The user's own request instead of seeded ones (NULL: seeded).  Its layout replaces `layout`; its item 0 is
     * the rollout's request and item 0 of the training batch; items 1.. of the batch are its items 1.. while it
     * has them, then seeded requests (seeds[0]) on the same layout.  The first condition_rows video rows are
     * condition rows (held fixed).  Only seeds[0] is used; an attention_mask is not supported yet. */
    const h3s_inputs *request;
    int64_t condition_rows;
    float shift_video, shift_audio; /* scheduler shifts; 0 = the pipeline's 12 (video) and 3 (audio) */
    /* Optional, with request: the training batch goes on with this file's items (the same layout: equal tags,
     * positions and index lists) after the request's own, before any seeded one. */
    const h3s_inputs *batch_inputs;
} h3s_trajectory_opts;

/* Totals of a run (also in the report's "summary"). */
typedef struct h3s_trajectory_totals {
    int64_t comparisons, differing;                   /* 4 per step: velocities and next latents */
    int64_t gradient_comparisons, gradient_differing; /* 3 per step: item 0's input gradients */
    int64_t steps_run;
} h3s_trajectory_totals;

/* Run the dual trajectory on a model's weights.  *report_json (may be NULL) receives the report as JSON text
 * (docs/cli.md, `h3strict trajectory`; each seed a JSON integer of all its digits), freed by the caller with
 * h3s_free.  A differing comparison is not an error: it is counted in the totals.  Before any work the backend must
 * be known and o->request and o->batch_inputs (when given) must pass h3s_inputs_validate for the weights' config
 * (their status, the message prefixed "trajectory: the request" / "the batch file"). */
H3S_API h3s_status h3s_trajectory(const h3s_weights *w, const h3s_trajectory_opts *o, char **report_json,
                                  h3s_trajectory_totals *totals);

#ifdef __cplusplus
}
#endif
#endif

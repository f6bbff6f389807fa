/* Packed t2va / fl2va layout, per-row timesteps and seeded request inputs (docs/model.md section 4).
 *
 * Row order: [text | keyframe condition frames | target audio | target video] [| padding].
 * Every float64 coordinate is produced with the same IEEE operations, in the same order, as the
 * reference pipeline (numpy linspace, torch cumsum, numpy pairwise sum); see
 * docs/numerics/layout_scheduler.md for each rounding point and for where the reference sources
 * differ from the spec. */
#ifndef H3S_SAMPLE_LAYOUT_H
#define H3S_SAMPLE_LAYOUT_H

#include <stdint.h>

#include "h3s.h"
#include "h3s_sample.h"

/* Row tags of the packed sequence (token_tags). */
#define H3S_TAG_PAD (-1)
#define H3S_TAG_VIDEO 0
#define H3S_TAG_TEXT 1
#define H3S_TAG_AUDIO 2

/* Row kinds (row_kind), for the scheduler. */
#define H3S_ROW_PAD (-1)
#define H3S_ROW_TEXT 0
#define H3S_ROW_CONDITION 1
#define H3S_ROW_AUDIO 2
#define H3S_ROW_VIDEO 3

/* Audio rows are two channel-major blocks of A rows each. */
#define H3S_AUDIO_CHANNELS 2

/* h3s_layout_opts is public (include/h3s_sample.h). */

typedef struct h3s_layout {
    int64_t S, Nv, Na, Nt, T; /* packed rows, video rows (condition + target), audio rows, text rows, row groups */
    int64_t n_condition;      /* keyframe condition rows (first Nv entries of video_indices) */
    h3s_tensor token_tags;    /* [S] I64: 0 video/condition, 1 text, 2 audio, -1 padding */
    h3s_tensor position_ids;  /* [S, 3] F64 */
    h3s_tensor video_indices, audio_indices, text_indices; /* I64 */
    h3s_tensor timestep_indices;                           /* [S] I64: static row-group plan, see below */
    h3s_tensor row_kind; /* [S] I64: 0 text, 1 condition, 2 target audio, 3 target video, -1 padding */
    /* Additions. */
    int64_t n_pad;          /* padding rows appended at the end (S - Nt - Nv - Na) */
    int64_t rows_per_frame; /* (latent_height / patch_h) * (latent_width / patch_w) */
    int64_t frames, latent_height, latent_width, audio_latents, patch_h, patch_w;
    int n_keyframes; /* 0, 1 or 2 condition frames */
    int keyframe_first, keyframe_last;
} h3s_layout;

/* Build the layout.  `out` is overwritten (not freed first); on failure it is left untouched.
 * layout.T / layout.timestep_indices are the static row-group plan: one group per kind of row that
 * carries its own timestep -- {text + target video}, {condition}, {target audio} -- numbered in order
 * of first appearance in packed order (text first, so group 0 is text + target video); padding rows
 * point at group 0.  The value-level plan the transformer consumes at a given step is
 * h3s_layout_timesteps. */
h3s_status h3s_layout_build(const h3s_layout_opts *o, int64_t patch_h, int64_t patch_w, h3s_layout *out);
void h3s_layout_free(h3s_layout *l);

/* The layout of an inputs file (validated with h3s_inputs_validate): an owning copy of its token_tags, position_ids
 * (as F64), index lists and timestep_indices (as the row-group plan, T = its timestep count), with row kinds from
 * the index lists: the first n_condition entries of video_indices are condition rows (the packed order this
 * project writes), the rest target video.  Counts only: rows_per_frame and the frame fields stay 0.  On failure
 * `out` is untouched. */
struct h3s_inputs;
h3s_status h3s_layout_from_inputs(const struct h3s_inputs *in, int64_t n_condition, h3s_layout *out);
/* h3s_layout_condition_rows (the condition rows of an inputs file, inferred) and h3s_layout_count (the row counts of
 * a layout) are public (include/h3s_sample.h). */

/* Row timesteps for one denoising step, as the reference pipeline builds them: every row starts at
 * t_video (text rows and target video rows keep it), target audio rows get t_audio, keyframe condition
 * rows get h3s_condition_timestep(t_video) = max(t_video, 0.999f).  `timestep` [T] F32 holds the
 * distinct values of the live rows sorted ascending (torch.unique(sorted=True)); `timestep_indices`
 * [S] I64 is each row's index into it (torch's return_inverse); padding rows take index 0 and add no
 * value.  Both outputs are allocated here; on failure neither is written. */
h3s_status h3s_layout_timesteps(const h3s_layout *l, float t_video, float t_audio, h3s_tensor *timestep,
                                h3s_tensor *timestep_indices);
/* Same with the condition rows' timestep given explicitly (no max with t_video). */
h3s_status h3s_layout_timesteps_ex(const h3s_layout *l, float t_video, float t_audio, float t_condition,
                                   h3s_tensor *timestep, h3s_tensor *timestep_indices);

/* Seeded request data for a batch of B items: hidden_states [B, Nv, video_width] F32,
 * audio_hidden_states [B, Na, audio_ch] F32, encoder_hidden_states [B, Nt, text_dim] F32.
 * Item b of each tensor is drawn from the Philox key `seed` on a stream of its own
 * (h3s_inputs_stream(name, b)), so item 0 depends on the seed alone, never on B.
 * Target video rows, audio rows and text rows are standard normal.  The keyframe condition rows of
 * hidden_states are a normal "clean latent" x0 noised once with h3s_scale_noise at t = 0.999 (the
 * rows the pipeline holds fixed).  All three outputs are allocated here; on failure none is written. */
h3s_status h3s_inputs_random(const h3s_layout *l, int64_t batch, uint64_t seed, int64_t video_width,
                             int64_t audio_channels, int64_t text_dim, h3s_tensor *hidden_states,
                             h3s_tensor *audio_hidden_states, h3s_tensor *encoder_hidden_states);
/* The RNG stream of item `item` of the tensor `name` ("hidden_states", "audio_hidden_states",
 * "encoder_hidden_states", "keyframe_latents", "keyframe_noise"); item 0 is h3s_rng_stream_id(name). */
uint64_t h3s_inputs_stream(const char *name, int64_t item);

/* numpy.linspace(start, stop, num, endpoint=False) in float64, exactly as numpy evaluates it:
 * step = (stop - start) / num; out[k] = k * step + start. */
void h3s_np_linspace_noend(double start, double stop, int64_t num, double *out);
/* numpy's float64 add.reduce of a contiguous array: 0.0 + pairwise_sum(a, n) with numpy's
 * 8-accumulator blocks of at most 128 elements (PW_BLOCKSIZE) and halving above. */
double h3s_np_sum_f64(const double *a, int64_t n);
/* One spatial axis of the rotary grid: numpy.linspace(left, left + ratio, dim / patch, endpoint=False) * 32
 * with ratio = dim / sqrt(latent_height * latent_width), left = (1 - ratio) / 2.  out has dim / patch entries. */
void h3s_spatial_grid(int64_t dim, int64_t patch, int64_t latent_height, int64_t latent_width, double *out);
/* Rotary span of latent frame f: 5/3 * (1, 4, 4, 4, 4)[f mod 5] in float64. */
double h3s_frame_span(int64_t f);
/* Rotary time of the "last" keyframe: Nt + numpy_sum(spans of all `frames` frames) - 5/3. */
double h3s_keyframe_last_time(int64_t text_tokens, int64_t frames);

#endif

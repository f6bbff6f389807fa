/* The dual trajectory (docs/strict.md section 6): a request sampled alone (rollout, batch 1) and
 * as item 0 of a batch (training layout), compared bitwise at every Euler step. */
#ifndef H3S_TRAJECTORY_H
#define H3S_TRAJECTORY_H

#include <cjson/cJSON.h>

#include "model/model.h"
#include "sample/layout.h"

typedef void (*h3s_progress_fn)(void *ctx, const char *line);

typedef struct h3s_trajectory_opts {
    const uint64_t *seeds;
    int64_t nseeds;
    int64_t steps; /* Euler steps: the grid has steps + 1 points */
    int64_t batch; /* size of the training batch (item 0 = the rollout's request) */
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
} h3s_trajectory_opts;

/* Totals of a run (also in the report's "summary"). */
typedef struct h3s_trajectory_totals {
    int64_t comparisons, differing;                   /* 4 per step: velocities and next latents */
    int64_t gradient_comparisons, gradient_differing; /* 3 per step: item 0's input gradients */
    int64_t steps_run;
} h3s_trajectory_totals;

h3s_status h3s_trajectory_run(const h3s_weights *w, const h3s_trajectory_opts *o, cJSON **report,
                              h3s_trajectory_totals *totals);

#endif

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

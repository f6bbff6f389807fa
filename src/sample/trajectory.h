/* The dual trajectory (docs/strict.md section 6): a request sampled alone (rollout, batch 1) and
 * as item 0 of a batch (training layout), compared bitwise at every Euler step. */
#ifndef H3S_TRAJECTORY_H
#define H3S_TRAJECTORY_H

#include <cjson/cJSON.h>

#include "h3s_sample.h"
#include "model/model.h"
#include "sample/layout.h"

/* h3s_progress_fn, h3s_trajectory_opts and h3s_trajectory_totals are public (include/h3s_sample.h); this is the
 * run with the report as a cJSON document (the caller frees it with cJSON_Delete). */
h3s_status h3s_trajectory_run(const h3s_weights *w, const h3s_trajectory_opts *o, cJSON **report,
                              h3s_trajectory_totals *totals);

#endif

/* h3strict public API: the per-node replay (docs/strict.md section 5) -- every node of a batch's forward and
 * backward with its SHA-256, run twice (repeat), item 0 run alone (batch invariance), and optionally the FP64 golden
 * (each node's error against it), with the first node that drifts.
 *
 * Ownership and errors as in h3s_model.h: status codes, h3s_last_error(), outputs untouched on failure, the report
 * text is the caller's (h3s_free). */
#ifndef H3S_PUBLIC_REPLAY_H
#define H3S_PUBLIC_REPLAY_H

#include "h3s.h"
#include "h3s_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3s_replay_opts {
    h3s_backend_kind backend; /* strict backend under test: H3S_BACKEND_CPU or H3S_BACKEND_CUDA */
    uint64_t cotangent_seed;  /* the backward's seeded cotangent (h3s_cotangent_random) */
    int with_golden;          /* also run the FP64 golden and report each node's error against it */
    /* Test only: flip one bit of the output of the node of this exact name in the repeat run (or, with
     * plant_alone, in the run of item 0 alone), so that the report must name it as the first drift. */
    const char *plant_node;
    void (*progress)(void *ctx, const char *line); /* optional: one line before each pass */
    void *progress_ctx;
    int plant_alone;
} h3s_replay_opts;

/* Replay `in` (batch B; B >= 2 also compares item 0 alone against the batch) on the model of `w`.  *report_json
 * receives the report as JSON text (docs/cli.md, `h3strict replay`): "nodes", "summary", and "first_drift" (the
 * name of the first node that did not repeat or was not batch-invariant, null when none).  A drift is not an error:
 * it is in the report. */
H3S_API h3s_status h3s_replay_report(const h3s_weights *w, const h3s_inputs *in, const h3s_replay_opts *o,
                                     char **report_json);

#ifdef __cplusplus
}
#endif
#endif

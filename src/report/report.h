/* Per-node evidence (docs/strict.md section 5): digests, repeat/batch equality, error against the
 * FP64 golden, first drift; and the replay driver that produces it as JSON. */
#ifndef H3S_REPORT_H
#define H3S_REPORT_H

#include <cjson/cJSON.h>

#include "h3s.h"
#include "h3s_replay.h"
#include "h3s_sample.h"
#include "model/model.h"

typedef struct h3s_node_record {
    char name[200];
    char sha256[65];       /* all output bytes */
    char sha256_item0[65]; /* the first rows_per_item rows (batched nodes), else = sha256 */
    int batched;
    int64_t numel;
    h3s_dtype dtype;
} h3s_node_record;

/* Records every node a pass emits (use h3s_recorder_hook as the model's node hook).  With
 * keep_values set it also keeps an F64 copy of each output (for golden comparisons).  With
 * plant_node set, the output of the node of that exact name gets one bit flipped before the
 * pass goes on: the test-only hook that proves first-drift detection finds a planted
 * perturbation at exactly that node. */
typedef struct h3s_recorder {
    h3s_node_record *rec;
    h3s_tensor *values; /* parallel to rec when keep_values */
    int64_t n, cap;
    int keep_values;
    const char *plant_node;
    int planted;
} h3s_recorder;

h3s_status h3s_recorder_hook(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item);
void h3s_recorder_free(h3s_recorder *r);

/* Host copy of any tensor, as F64. */
h3s_status h3s_tensor_to_host_f64(const h3s_tensor *t, h3s_tensor *out);

/* h3s_replay_opts and h3s_replay_report (the report as JSON text) are public (include/h3s_replay.h). */

/* Runs forward + backward of `in` (batch B) twice, item 0 alone once, and (optionally) the
 * golden; returns the report (caller frees with cJSON_Delete).  `first_drift` is NULL when
 * every node agrees, else a pointer into the report's "first_drift" string. */
h3s_status h3s_replay(const h3s_weights *w, const h3s_inputs *in, const h3s_replay_opts *o, cJSON **report);

/* h3s_cotangent_random (a seeded cotangent) is public (include/h3s_sample.h). */

/* Write a cJSON document atomically (temp file + rename), pretty-printed. */
h3s_status h3s_json_write_file(const char *path, const cJSON *doc);

/* Compare item 0 of `batched` (B items of rows_per_item rows) with all of `alone`: number of
 * differing elements (bitwise) and their max absolute difference. */
void h3s_compare_item0(const h3s_tensor *batched, const h3s_tensor *alone, int64_t *differing, double *max_abs);

#endif

/* Soak: long runs in one process, resident memory sampled throughout, the same bits at the end as at the start.
 *   1. a 1000-step dual trajectory (with gradients) on the tiny model, RSS sampled at every step;
 *   2. 200 forward + backward calls of one resident small model on one request, RSS sampled after every call,
 *      the SHA-256 of the outputs and of every gradient compared with the first call's.
 * Before and after part 1 a fixed tiny request is run forward + backward: its digest must not change.
 * Writes a JSON report to the path given; exits non-zero when a bound or an equality fails.
 * Built and run by scripts/soak.sh. */
#include <stdio.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "io/modeldir.h"
#include "model/config.h"
#include "model/model.h"
#include "report/report.h"
#include "sample/layout.h"
#include "sample/trajectory.h"

/* Resident set size in KiB (VmRSS). */
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    long v = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct samples {
    long *v;
    int n, cap;
} samples;

static void sample(samples *s) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
        if (!s->v) abort();
    }
    s->v[s->n++] = rss_kib();
}

static void on_progress(void *ctx, const char *line) {
    if (strstr(line, "rollout")) sample(ctx); /* once per step */
}

static void die(const char *what) {
    fprintf(stderr, "soak: %s: %s\n", what, h3s_last_error());
    exit(2);
}

/* A seeded request for config c, batch B (every tensor owned by `in`). */
typedef struct request {
    h3s_inputs in;
} request;

static void request_make(const h3s_config *c, int64_t batch, request *q) {
    h3s_layout_opts lo = {6, 2, 4, 6, 4, 1, 0, 0};
    if (h3s_inputs_seeded(c, &lo, batch, 77, 0.3f, 0.6f, &q->in) != H3S_OK) die("request");
}

static void request_free(request *q) { h3s_inputs_free(&q->in); }

static void forward_backward_digest(h3s_model *m, const request *q, char hex[65]) {
    h3s_tape *tape = NULL;
    h3s_tensor s = {0}, a = {0}, ds, da;
    h3s_grads g;
    memset(&g, 0, sizeof g);
    if (h3s_model_forward(m, &q->in, NULL, NULL, &tape, &s, &a) != H3S_OK) die("forward");
    if (h3s_cotangent_random(s.shape[0], s.shape[1], s.shape[2], a.shape[1], a.shape[2], 5, &ds, &da) != H3S_OK)
        die("cotangent");
    if (h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g) != H3S_OK) die("backward");
    /* digest of the digests: sample, audio_sample, the three input gradients, every parameter gradient */
    int64_t n = 5 + g.count;
    char *all = malloc((size_t)n * 64 + 1);
    const h3s_tensor *ts[5] = {&s, &a, &g.hidden_states, &g.audio_hidden_states, &g.encoder_hidden_states};
    for (int64_t i = 0; i < n; i++) {
        const h3s_tensor *t = i < 5 ? ts[i] : &g.params[i - 5];
        char h[65];
        if (h3s_sha256_hex(t->data, h3s_tensor_nbytes(t), h) != H3S_OK) die("sha");
        memcpy(all + i * 64, h, 64);
    }
    if (h3s_sha256_hex(all, (size_t)n * 64, hex) != H3S_OK) die("sha");
    free(all);
    h3s_grads_free(&g);
    h3s_tape_free(tape);
    h3s_tensor_free(&s);
    h3s_tensor_free(&a);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
}

/* RSS samples as JSON: first, after warm-up, max, last, and every k-th value. */
static cJSON *rss_json(const samples *s, int warm, int every, long bound_kib, int *ok) {
    cJSON *o = cJSON_CreateObject();
    long mx = 0;
    for (int i = warm; i < s->n; i++)
        if (s->v[i] > mx) mx = s->v[i];
    long base = s->v[warm < s->n ? warm : s->n - 1];
    cJSON_AddNumberToObject(o, "samples", s->n);
    cJSON_AddNumberToObject(o, "first_kib", (double)s->v[0]);
    cJSON_AddNumberToObject(o, "after_warmup_kib", (double)base);
    cJSON_AddNumberToObject(o, "warmup_samples", warm);
    cJSON_AddNumberToObject(o, "max_after_warmup_kib", (double)mx);
    cJSON_AddNumberToObject(o, "last_kib", (double)s->v[s->n - 1]);
    cJSON_AddNumberToObject(o, "growth_after_warmup_kib", (double)(mx - base));
    cJSON_AddNumberToObject(o, "bound_kib", (double)bound_kib);
    *ok = mx - base <= bound_kib;
    cJSON_AddBoolToObject(o, "within_bound", *ok);
    cJSON *arr = cJSON_AddArrayToObject(o, "every_kth_kib");
    cJSON_AddNumberToObject(o, "k", every);
    for (int i = 0; i < s->n; i += every)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)s->v[i]));
    return o;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: soak OUT.json STEPS CALLS\n");
        return 2;
    }
    int64_t steps = atoll(argv[2]), calls = atoll(argv[3]);
    int ok = 1, part_ok;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "threads", h3s_get_num_threads());

    /* ---- 1. the trajectory */
    h3s_config tiny;
    h3s_weights *tw = NULL;
    h3s_model *tm = NULL;
    if (h3s_config_preset("tiny", -1, &tiny) != H3S_OK || h3s_weights_create(&tiny, 0, &tw) != H3S_OK ||
        h3s_model_create(tw, H3S_BACKEND_CPU, &tm) != H3S_OK)
        die("tiny model");
    request tq;
    request_make(&tiny, 2, &tq);
    char before[65], after[65];
    forward_backward_digest(tm, &tq, before);
    uint64_t seed = 11;
    h3s_trajectory_opts o;
    memset(&o, 0, sizeof o);
    o.seeds = &seed;
    o.nseeds = 1;
    o.steps = steps;
    o.batch = 3;
    o.backend = H3S_BACKEND_CPU;
    o.layout = (h3s_layout_opts){6, 2, 4, 6, 4, 1, 0, 0};
    o.with_grad = 1;
    samples ts = {0};
    o.progress = on_progress;
    o.progress_ctx = &ts;
    cJSON *report = NULL;
    h3s_trajectory_totals tot;
    double t0 = now();
    if (h3s_trajectory_run(tw, &o, &report, &tot) != H3S_OK) die("trajectory");
    double t_traj = now() - t0;
    /* the report is kept in memory (one object per step): its size is part of what the samples show */
    char *text = cJSON_PrintUnformatted(report);
    size_t report_bytes = text ? strlen(text) : 0;
    free(text);
    cJSON_Delete(report);
    forward_backward_digest(tm, &tq, after);
    cJSON *t = cJSON_AddObjectToObject(doc, "trajectory");
    cJSON_AddStringToObject(t, "model", "tiny (built-in, seed 0)");
    cJSON_AddNumberToObject(t, "steps", (double)tot.steps_run);
    cJSON_AddNumberToObject(t, "batch", (double)o.batch);
    cJSON_AddNumberToObject(t, "comparisons", (double)tot.comparisons);
    cJSON_AddNumberToObject(t, "differing", (double)tot.differing);
    cJSON_AddNumberToObject(t, "gradient_comparisons", (double)tot.gradient_comparisons);
    cJSON_AddNumberToObject(t, "gradient_differing", (double)tot.gradient_differing);
    cJSON_AddNumberToObject(t, "seconds", t_traj);
    cJSON_AddNumberToObject(t, "report_bytes_held", (double)report_bytes);
    /* bound: 8 MiB over the RSS after the first 10 steps (the report held in memory grows ~report_bytes) */
    cJSON_AddItemToObject(t, "rss", rss_json(&ts, steps >= 100 ? 10 : 0, 50, 8192, &part_ok));
    ok &= part_ok;
    int same = !strcmp(before, after);
    cJSON_AddStringToObject(t, "request_digest_before", before);
    cJSON_AddStringToObject(t, "request_digest_after", after);
    cJSON_AddBoolToObject(t, "same_bits_after", same);
    ok &= same && tot.differing == 0 && tot.gradient_differing == 0 && tot.steps_run == steps;
    request_free(&tq);
    h3s_model_free(tm);
    h3s_weights_free(tw);

    /* ---- 2. the resident small model */
    h3s_config small;
    h3s_weights *sw = NULL;
    h3s_model *sm = NULL;
    if (h3s_config_preset("small", -1, &small) != H3S_OK || h3s_weights_create(&small, 1, &sw) != H3S_OK ||
        h3s_model_create(sw, H3S_BACKEND_CPU, &sm) != H3S_OK)
        die("small model");
    request sq;
    request_make(&small, 2, &sq);
    samples rs = {0};
    char first[65] = "", hex[65];
    int64_t differing_calls = 0;
    t0 = now();
    for (int64_t i = 0; i < calls; i++) {
        forward_backward_digest(sm, &sq, hex);
        if (i == 0) memcpy(first, hex, 65);
        differing_calls += strcmp(first, hex) != 0;
        sample(&rs);
    }
    double t_res = now() - t0;
    cJSON *r = cJSON_AddObjectToObject(doc, "resident");
    cJSON_AddStringToObject(r, "model", "small (seed 1), created once");
    cJSON_AddNumberToObject(r, "calls", (double)calls);
    cJSON_AddNumberToObject(r, "rows", (double)sq.in.token_tags.shape[0]);
    cJSON_AddNumberToObject(r, "batch", 2);
    cJSON_AddNumberToObject(r, "seconds", t_res);
    cJSON_AddStringToObject(r, "digest_first_call", first);
    cJSON_AddStringToObject(r, "digest_last_call", hex);
    cJSON_AddNumberToObject(r, "calls_differing_from_first", (double)differing_calls);
    /* bound: 4 MiB over the RSS after the first 10 calls */
    cJSON_AddItemToObject(r, "rss", rss_json(&rs, calls >= 20 ? 10 : 0, 10, 4096, &part_ok));
    ok &= part_ok && differing_calls == 0;
    request_free(&sq);
    h3s_model_free(sm);
    h3s_weights_free(sw);

    cJSON_AddBoolToObject(doc, "ok", ok);
    char *out = cJSON_Print(doc);
    FILE *f = fopen(argv[1], "w");
    if (!f || !out) die("write");
    fprintf(f, "%s\n", out);
    fclose(f);
    printf("soak: trajectory %lld steps, %lld/%lld differ, RSS growth %.0f KiB; resident %lld calls, %lld differ, RSS "
           "growth %.0f KiB: %s\n",
           (long long)tot.steps_run, (long long)(tot.differing + tot.gradient_differing),
           (long long)(tot.comparisons + tot.gradient_comparisons),
           cJSON_GetObjectItem(cJSON_GetObjectItem(t, "rss"), "growth_after_warmup_kib")->valuedouble, (long long)calls,
           (long long)differing_calls,
           cJSON_GetObjectItem(cJSON_GetObjectItem(r, "rss"), "growth_after_warmup_kib")->valuedouble,
           ok ? "OK" : "FAILED");
    free(out);
    cJSON_Delete(doc);
    free(ts.v);
    free(rs.v);
    return ok ? 0 : 1;
}

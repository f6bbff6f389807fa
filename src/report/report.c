#include "report/report.h"

#include <math.h>
#include <stdio.h>

#include "core/core.h"
#include "core/hash.h"
#include "core/rng.h"
#include "cuda/cuda_ops.h"
#include "io/safetensors.h"

/* The tensor's bytes on the host: a borrowed view of a host tensor, or a downloaded copy
 * of a device tensor (then *owned = 1 and the caller frees it). */
static h3s_status host_bytes(const h3s_tensor *t, h3s_tensor *host, int *owned) {
    *host = *t;
    *owned = 0;
    if (!t->device) return H3S_OK;
    H3S_TRY(h3s_tensor_alloc(host, t->dtype, t->ndim, t->shape));
    h3s_status st = h3s_cuda_download(t, host);
    if (st != H3S_OK) {
        h3s_tensor_free(host);
        return st;
    }
    *owned = 1;
    return H3S_OK;
}

h3s_status h3s_tensor_to_host_f64(const h3s_tensor *t, h3s_tensor *out) {
    h3s_tensor host;
    int owned;
    H3S_TRY(host_bytes(t, &host, &owned));
    h3s_status st = h3s_tensor_alloc(out, H3S_F64, t->ndim, t->shape);
    if (st == H3S_OK) st = h3s_tensor_convert(&host, out);
    if (owned) h3s_tensor_free(&host);
    return st;
}

void h3s_recorder_free(h3s_recorder *r) {
    if (!r) return;
    if (r->values)
        for (int64_t i = 0; i < r->n; i++)
            h3s_tensor_free(&r->values[i]);
    free(r->values);
    free(r->rec);
    memset(r, 0, sizeof *r);
}

static h3s_status digest(const void *data, size_t len, char hex[65]) { return h3s_sha256_hex(data, len, hex); }

h3s_status h3s_recorder_hook(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item) {
    h3s_recorder *r = ctx;
    if (r->n == r->cap) {
        int64_t cap = r->cap ? 2 * r->cap : 256;
        h3s_node_record *rec = realloc(r->rec, (size_t)cap * sizeof *rec);
        if (!rec) return h3s_fail(H3S_ERR_NOMEM, "recorder: out of memory");
        r->rec = rec;
        if (r->keep_values) {
            h3s_tensor *v = realloc(r->values, (size_t)cap * sizeof *v);
            if (!v) return h3s_fail(H3S_ERR_NOMEM, "recorder: out of memory");
            r->values = v;
        }
        r->cap = cap;
    }
    h3s_tensor host;
    int owned;
    H3S_TRY(host_bytes(out, &host, &owned));
    h3s_status st = H3S_OK;
    if (r->plant_node && !strcmp(r->plant_node, name) && h3s_tensor_nbytes(&host) > 0) {
        /* flip the lowest mantissa bit of the first element, on the tensor the graph goes on with */
        ((unsigned char *)host.data)[0] ^= 1u;
        if (out->device) st = h3s_cuda_upload(&host, out);
        r->planted = 1;
    }
    h3s_node_record *rec = &r->rec[r->n];
    memset(rec, 0, sizeof *rec);
    snprintf(rec->name, sizeof rec->name, "%s", name);
    rec->batched = batched;
    rec->numel = h3s_tensor_numel(&host);
    rec->dtype = host.dtype;
    size_t bytes = h3s_tensor_nbytes(&host);
    if (st == H3S_OK) st = digest(host.data, bytes, rec->sha256);
    if (st == H3S_OK) {
        if (batched && host.ndim >= 1 && host.shape[0] > 0) {
            size_t row = bytes / (size_t)host.shape[0];
            st = digest(host.data, row * (size_t)rows_per_item, rec->sha256_item0);
        } else {
            memcpy(rec->sha256_item0, rec->sha256, sizeof rec->sha256);
        }
    }
    if (st == H3S_OK && r->keep_values) {
        h3s_tensor v;
        st = h3s_tensor_alloc(&v, H3S_F64, host.ndim, host.shape);
        if (st == H3S_OK) st = h3s_tensor_convert(&host, &v);
        if (st == H3S_OK)
            r->values[r->n] = v;
        else
            h3s_tensor_free(&v);
    }
    if (owned) h3s_tensor_free(&host);
    if (st == H3S_OK) r->n++;
    return st;
}

h3s_status h3s_cotangent_random(int64_t batch, int64_t nv, int64_t wv, int64_t na, int64_t wa, uint64_t seed,
                                h3s_tensor *d_sample, h3s_tensor *d_audio_sample) {
    if (!d_sample || !d_audio_sample) return h3s_fail(H3S_ERR_INVALID, "cotangent_random: NULL output");
    if (batch < 1 || nv < 0 || wv < 0 || na < 0 || wa < 0)
        return h3s_fail(H3S_ERR_INVALID, "cotangent_random: batch %lld must be >= 1 and the sizes >= 0",
                        (long long)batch);
    int64_t sv[3] = {batch, nv, wv}, sa[3] = {batch, na, wa};
    H3S_TRY(h3s_tensor_alloc(d_sample, H3S_F32, 3, sv));
    h3s_status st = h3s_tensor_alloc(d_audio_sample, H3S_F32, 3, sa);
    if (st != H3S_OK) {
        h3s_tensor_free(d_sample);
        return st;
    }
    for (int64_t b = 0; b < batch; b++) {
        h3s_rng_fill_normal(seed, h3s_rng_stream_id("cotangent.sample") + (uint64_t)b * 0x9e3779b97f4a7c15ULL, 0,
                            nv * wv, 1.0f, (float *)d_sample->data + b * nv * wv);
        h3s_rng_fill_normal(seed, h3s_rng_stream_id("cotangent.audio_sample") + (uint64_t)b * 0x9e3779b97f4a7c15ULL, 0,
                            na * wa, 1.0f, (float *)d_audio_sample->data + b * na * wa);
    }
    return H3S_OK;
}

h3s_status h3s_json_write_file(const char *path, const cJSON *doc) {
    char *text = cJSON_Print(doc);
    if (!text) return h3s_fail(H3S_ERR_NOMEM, "json: could not render the report");
    size_t len = strlen(text);
    char *with_nl = realloc(text, len + 2);
    if (!with_nl) {
        free(text);
        return h3s_fail(H3S_ERR_NOMEM, "json: out of memory");
    }
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    h3s_status st = h3s_io_write_file_atomic(path, with_nl, len + 1);
    free(with_nl);
    return st;
}

void h3s_compare_item0(const h3s_tensor *batched, const h3s_tensor *alone, int64_t *differing, double *max_abs) {
    int64_t n = h3s_tensor_numel(alone);
    if (batched->dtype != alone->dtype || h3s_tensor_numel(batched) < n) {
        /* not comparable: count every element as differing rather than pass silently */
        *differing = n > 0 ? n : 1;
        *max_abs = INFINITY;
        return;
    }
    size_t es = h3s_dtype_size(alone->dtype);
    int64_t diff = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp((const char *)batched->data + (size_t)i * es, (const char *)alone->data + (size_t)i * es, es)) {
            diff++;
            double d = fabs(h3s_tensor_get_f64(batched, i) - h3s_tensor_get_f64(alone, i));
            if (!(d <= worst)) worst = d; /* NaN differences count as the worst */
        }
    }
    *differing = diff;
    *max_abs = worst;
}

/* ------------------------------------------------------------------ replay ------------ */

/* Item 0 of every batched input (views; nothing copied). */
static h3s_inputs item0_inputs(const h3s_inputs *in) {
    h3s_inputs one = *in;
    one.hidden_states.shape[0] = 1;
    one.audio_hidden_states.shape[0] = 1;
    one.encoder_hidden_states.shape[0] = 1;
    if (one.attention_mask.data) one.attention_mask.shape[0] = 1;
    return one;
}

typedef struct pass_result {
    h3s_recorder rec;
    h3s_tensor sample, audio_sample;
    h3s_grads grads;
} pass_result;

static void pass_free(pass_result *p) {
    h3s_recorder_free(&p->rec);
    h3s_tensor_free(&p->sample);
    h3s_tensor_free(&p->audio_sample);
    h3s_grads_free(&p->grads);
}

static h3s_status run_pass(h3s_model *m, const h3s_inputs *in, uint64_t ct_seed, pass_result *p) {
    h3s_tape *tape = NULL;
    H3S_TRY(h3s_model_forward(m, in, h3s_recorder_hook, &p->rec, &tape, &p->sample, &p->audio_sample));
    h3s_tensor ds, da;
    const h3s_config *c = h3s_model_config(m);
    h3s_status st = h3s_cotangent_random(p->sample.shape[0], p->sample.shape[1], p->sample.shape[2],
                                         p->audio_sample.shape[1], c->audio_in_channels, ct_seed, &ds, &da);
    if (st == H3S_OK) {
        st = h3s_model_backward(m, tape, &ds, &da, h3s_recorder_hook, &p->rec, &p->grads);
        h3s_tensor_free(&ds);
        h3s_tensor_free(&da);
    }
    h3s_tape_free(tape);
    return st;
}

static double rel_l2_f64(const h3s_tensor *a, const h3s_tensor *ref) {
    int64_t n = h3s_tensor_numel(ref);
    if (h3s_tensor_numel(a) != n) return INFINITY;
    double num = 0, den = 0;
    const double *x = a->data, *r = ref->data;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - r[i];
        num += d * d;
        den += r[i] * r[i];
    }
    if (!(num == num)) return INFINITY;
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* Whether the pass recorded a node of this name with a bit to flip. */
static int has_node(const h3s_recorder *r, const char *name) {
    for (int64_t i = 0; i < r->n; i++)
        if (!strcmp(r->rec[i].name, name) && r->rec[i].numel > 0) return 1;
    return 0;
}

h3s_status h3s_replay(const h3s_weights *w, const h3s_inputs *in, const h3s_replay_opts *o, cJSON **report) {
    h3s_model *m = NULL, *gm = NULL;
    pass_result a, b, one, gold;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&one, 0, sizeof one);
    memset(&gold, 0, sizeof gold);
    h3s_inputs in1 = item0_inputs(in);
    h3s_status st = h3s_model_create(w, o->backend, &m);
    a.rec.keep_values = o->with_golden;
    /* the repeat run compares every node, batched or not; the item-0 run plants a batch drift */
    h3s_recorder *plant = o->plant_alone ? &one.rec : &b.rec;
    plant->plant_node = o->plant_node;
    gold.rec.keep_values = 1;
    int64_t B = in->hidden_states.shape[0];
    int npass = o->with_golden ? 4 : 3;
    if (st == H3S_OK)
        h3s_progress_line(o->progress, o->progress_ctx, "pass 1/%d: batch %lld, forward and backward", npass,
                          (long long)B);
    if (st == H3S_OK) st = run_pass(m, in, o->cotangent_seed, &a);
    /* the first pass has listed every node (forward and backward): a node to plant a drift in that is not among them
     * is refused now, not after the other passes ran for nothing */
    if (st == H3S_OK && o->plant_node && !has_node(&a.rec, o->plant_node))
        st = h3s_fail(H3S_ERR_INVALID, "replay: no node named '%s' to plant a drift in", o->plant_node);
    if (st == H3S_OK)
        h3s_progress_line(o->progress, o->progress_ctx, "pass 2/%d: batch %lld again (repeat)", npass, (long long)B);
    if (st == H3S_OK) st = run_pass(m, in, o->cotangent_seed, &b);
    if (st == H3S_OK) h3s_progress_line(o->progress, o->progress_ctx, "pass 3/%d: item 0 alone", npass);
    if (st == H3S_OK) st = run_pass(m, &in1, o->cotangent_seed, &one);
    if (st == H3S_OK && o->with_golden) {
        h3s_progress_line(o->progress, o->progress_ctx, "pass 4/%d: FP64 golden, batch %lld", npass, (long long)B);
        st = h3s_model_create(w, H3S_BACKEND_GOLDEN, &gm);
        if (st == H3S_OK) st = run_pass(gm, in, o->cotangent_seed, &gold);
    }
    if (st == H3S_OK && (a.rec.n != b.rec.n || a.rec.n != one.rec.n || (o->with_golden && gold.rec.n != a.rec.n)))
        st = h3s_fail(H3S_ERR_MISMATCH, "replay: the runs emitted different node lists (%lld, %lld, %lld)",
                      (long long)a.rec.n, (long long)b.rec.n, (long long)one.rec.n);
    if (st == H3S_OK && o->plant_node && !plant->planted)
        st = h3s_fail(H3S_ERR_INVALID, "replay: no node named '%s' to plant a drift in", o->plant_node);
    cJSON *doc = NULL;
    if (st == H3S_OK) {
        doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "binding", h3s_backend_name(o->backend));
        cJSON_AddNumberToObject(doc, "batch", (double)in->hidden_states.shape[0]);
        cJSON_AddStringToObject(doc, "order", "forward then backward, execution order");
        if (o->plant_node) cJSON_AddStringToObject(doc, "planted_node", o->plant_node);
        cJSON *nodes = cJSON_AddArrayToObject(doc, "nodes");
        const char *first_drift = NULL, *first_kind = NULL;
        int64_t repeat_bad = 0, batch_bad = 0;
        /* with B = 1 the "batch" run is the same request: comparing it would prove nothing */
        int batch_checked = in->hidden_states.shape[0] > 1;
        double worst_fwd = 0;
        for (int64_t i = 0; i < a.rec.n; i++) {
            const h3s_node_record *ra = &a.rec.rec[i], *rb = &b.rec.rec[i], *r1 = &one.rec.rec[i];
            if (strcmp(ra->name, rb->name) || strcmp(ra->name, r1->name)) {
                st = h3s_fail(H3S_ERR_MISMATCH, "replay: node %lld is %s in one run and %s in another", (long long)i,
                              ra->name, r1->name);
                break;
            }
            cJSON *n = cJSON_CreateObject();
            cJSON_AddStringToObject(n, "name", ra->name);
            cJSON_AddStringToObject(n, "binding", h3s_backend_name(o->backend));
            cJSON_AddStringToObject(n, "dtype", h3s_dtype_name(ra->dtype));
            cJSON_AddStringToObject(n, "sha256", ra->sha256);
            int rep = !strcmp(ra->sha256, rb->sha256);
            cJSON_AddBoolToObject(n, "repeat_equal", rep);
            /* Batch comparison: item 0 of the batch against the request alone.  A node without
             * a batch axis is compared whole when it is a forward node (tables, temb: they must
             * not depend on B at all); backward sums over every item (parameter gradients,
             * dtemb) differ with B by definition and are not compared. */
            int fwd_unbatched = !ra->batched && !strstr(ra->name, ".grad") && strncmp(ra->name, "param.", 6);
            if (batch_checked && (ra->batched || fwd_unbatched)) {
                int beq = !strcmp(ra->batched ? ra->sha256_item0 : ra->sha256, r1->sha256);
                cJSON_AddBoolToObject(n, "batch_equal", beq);
                if (!beq) batch_bad++;
                if (!beq && !first_drift) {
                    first_drift = ra->name;
                    first_kind = "batch";
                }
            } else {
                cJSON_AddNullToObject(n, "batch_equal");
            }
            if (!rep) repeat_bad++;
            if (!rep && !first_drift) {
                first_drift = ra->name;
                first_kind = "repeat";
            }
            if (o->with_golden) {
                double e = rel_l2_f64(&a.rec.values[i], &gold.rec.values[i]);
                if (isfinite(e))
                    cJSON_AddNumberToObject(n, "golden_rel_l2", e);
                else
                    cJSON_AddStringToObject(n, "golden_rel_l2", "inf");
                if (!strstr(ra->name, ".grad") && strncmp(ra->name, "param.", 6) && !(e <= worst_fwd)) worst_fwd = e;
            }
            cJSON_AddItemToArray(nodes, n);
        }
        if (first_drift)
            cJSON_AddStringToObject(doc, "first_drift", first_drift);
        else
            cJSON_AddNullToObject(doc, "first_drift");
        if (first_kind) cJSON_AddStringToObject(doc, "first_drift_kind", first_kind);
        cJSON *sum = cJSON_AddObjectToObject(doc, "summary");
        cJSON_AddNumberToObject(sum, "nodes", (double)a.rec.n);
        cJSON_AddNumberToObject(sum, "repeat_differing", (double)repeat_bad);
        cJSON_AddNumberToObject(sum, "batch_differing", (double)batch_bad);
        cJSON_AddBoolToObject(sum, "batch_checked", batch_checked);
        if (o->with_golden) { /* as the nodes' errors: a number, or "inf" (cJSON would print null) */
            if (isfinite(worst_fwd))
                cJSON_AddNumberToObject(sum, "worst_forward_golden_rel_l2", worst_fwd);
            else
                cJSON_AddStringToObject(sum, "worst_forward_golden_rel_l2", "inf");
        }
    }
    pass_free(&a);
    pass_free(&b);
    pass_free(&one);
    pass_free(&gold);
    h3s_model_free(m);
    h3s_model_free(gm);
    if (st != H3S_OK) {
        cJSON_Delete(doc);
        return st;
    }
    *report = doc;
    return H3S_OK;
}

h3s_status h3s_replay_report(const h3s_weights *w, const h3s_inputs *in, const h3s_replay_opts *o, char **report_json) {
    if (!w || !in || !o || !report_json) return h3s_fail(H3S_ERR_INVALID, "replay: NULL argument");
    cJSON *doc = NULL;
    H3S_TRY(h3s_replay(w, in, o, &doc));
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text) return h3s_fail(H3S_ERR_NOMEM, "replay: out of memory printing the report");
    *report_json = text;
    return H3S_OK;
}

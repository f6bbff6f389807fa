#include "sample/trajectory.h"

#include <stdio.h>

#include "core/core.h"
#include "report/report.h"
#include "sample/scheduler.h"

/* One layout's state: the request(s) being denoised and the model call's inputs. */
typedef struct lane {
    int64_t batch;
    h3s_tensor hv, ha, enc; /* latents and text features, [B, N, W] F32 */
    h3s_inputs in;
    h3s_tensor sample, audio_sample;
    h3s_tape *tape;
    h3s_grads grads;
} lane;

static void lane_free(lane *l) {
    h3s_tensor_free(&l->hv);
    h3s_tensor_free(&l->ha);
    h3s_tensor_free(&l->enc);
    h3s_tensor_free(&l->sample);
    h3s_tensor_free(&l->audio_sample);
    h3s_tape_free(l->tape);
    l->tape = NULL;
    h3s_grads_free(&l->grads);
}

static void lane_bind(lane *l, const h3s_layout *lay, h3s_tensor *timestep, h3s_tensor *ts_idx) {
    memset(&l->in, 0, sizeof l->in);
    l->in.hidden_states = l->hv;
    l->in.audio_hidden_states = l->ha;
    l->in.encoder_hidden_states = l->enc;
    l->in.timestep = *timestep;
    l->in.timestep_indices = *ts_idx;
    l->in.token_tags = lay->token_tags;
    l->in.position_ids = lay->position_ids;
    l->in.video_indices = lay->video_indices;
    l->in.audio_indices = lay->audio_indices;
    l->in.text_indices = lay->text_indices;
}

/* Euler-update the generated rows of every item; condition rows ride unchanged. */
static void lane_step(lane *l, const h3s_layout *lay, float tv, float sv, float sv_next, float ta, float sa,
                      float sa_next) {
    int64_t Nv = l->hv.shape[1], Wv = l->hv.shape[2], Na = l->ha.shape[1], Wa = l->ha.shape[2];
    for (int64_t b = 0; b < l->batch; b++) {
        float *x = (float *)l->hv.data + (b * Nv + lay->n_condition) * Wv;
        const float *v = (const float *)l->sample.data + (b * Nv + lay->n_condition) * Wv;
        h3s_euler_step(x, v, (Nv - lay->n_condition) * Wv, tv, sv, sv_next, x);
        float *xa = (float *)l->ha.data + b * Na * Wa;
        const float *va = (const float *)l->audio_sample.data + b * Na * Wa;
        h3s_euler_step(xa, va, Na * Wa, ta, sa, sa_next, xa);
    }
}

static void add_comparison(cJSON *obj, const char *name, const h3s_tensor *batched, const h3s_tensor *alone,
                           int64_t *count, int64_t *bad) {
    int64_t diff;
    double max_abs;
    h3s_compare_item0(batched, alone, &diff, &max_abs);
    cJSON *c = cJSON_AddObjectToObject(obj, name);
    cJSON_AddBoolToObject(c, "equal", diff == 0);
    /* the values themselves, as digests: two reports are equal only when every compared tensor is */
    char hex[65];
    if (h3s_sha256_hex(alone->data, h3s_tensor_nbytes(alone), hex) == H3S_OK)
        cJSON_AddStringToObject(c, "sha256_alone", hex);
    if (h3s_sha256_hex(batched->data, h3s_tensor_nbytes(batched), hex) == H3S_OK)
        cJSON_AddStringToObject(c, "sha256_batch", hex);
    if (diff) {
        cJSON_AddNumberToObject(c, "differing", (double)diff);
        cJSON_AddNumberToObject(c, "max_abs_diff", max_abs);
    }
    (*count)++;
    if (diff) (*bad)++;
}

static h3s_status lane_forward_backward(h3s_model *m, lane *l, int with_grad, uint64_t ct_seed) {
    h3s_tensor_free(&l->sample);
    h3s_tensor_free(&l->audio_sample);
    h3s_tape_free(l->tape);
    l->tape = NULL;
    H3S_TRY(h3s_model_forward(m, &l->in, NULL, NULL, with_grad ? &l->tape : NULL, &l->sample, &l->audio_sample));
    if (!with_grad) return H3S_OK;
    h3s_tensor ds, da;
    H3S_TRY(h3s_cotangent_random(l->batch, l->sample.shape[1], l->sample.shape[2], l->audio_sample.shape[1],
                                 l->audio_sample.shape[2], ct_seed, &ds, &da));
    h3s_grads_free(&l->grads);
    h3s_status st = h3s_model_backward(m, l->tape, &ds, &da, NULL, NULL, &l->grads);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_tape_free(l->tape);
    l->tape = NULL;
    return st;
}

/* F32 copy of `src` ([B, N, W], any float dtype). */
static h3s_status to_f32(const h3s_tensor *src, h3s_tensor *dst) {
    H3S_TRY(h3s_tensor_alloc(dst, H3S_F32, src->ndim, src->shape));
    h3s_status st = h3s_tensor_convert(src, dst);
    if (st != H3S_OK) h3s_tensor_free(dst);
    return st;
}

/* Overwrite items [at, at + items) of dst ([B, N, W] F32) with the first `items` items of src ([B', N, W] F32). */
static void copy_items(const h3s_tensor *src, int64_t items, h3s_tensor *dst, int64_t at) {
    size_t per_item = (size_t)(src->shape[1] * src->shape[2]) * sizeof(float);
    memcpy((char *)dst->data + per_item * (size_t)at, src->data, per_item * (size_t)items);
}

/* Both files describe the same packed sequence: equal index lists, tags and positions (as F64). */
static h3s_status same_layout(const h3s_layout *a, const h3s_layout *b) {
    const h3s_tensor *ta[5] = {&a->token_tags, &a->position_ids, &a->video_indices, &a->audio_indices,
                               &a->text_indices};
    const h3s_tensor *tb[5] = {&b->token_tags, &b->position_ids, &b->video_indices, &b->audio_indices,
                               &b->text_indices};
    const char *names[5] = {"token_tags", "position_ids", "video_indices", "audio_indices", "text_indices"};
    for (int i = 0; i < 5; i++)
        if (h3s_tensor_nbytes(ta[i]) != h3s_tensor_nbytes(tb[i]) ||
            memcmp(ta[i]->data, tb[i]->data, h3s_tensor_nbytes(ta[i])))
            return h3s_fail(H3S_ERR_SHAPE,
                            "trajectory: the batch file's %s differ from the request's (one layout for "
                            "the whole batch)",
                            names[i]);
    return H3S_OK;
}

/* The user's request: item 0 alone for the rollout, and its items (then seeded ones) for the training batch. */
static h3s_status lanes_from_request(const h3s_inputs *req, const h3s_inputs *others, const h3s_layout *lay,
                                     uint64_t seed, const h3s_config *c, lane *roll, lane *train) {
    h3s_tensor f[3];
    memset(f, 0, sizeof f);
    const h3s_tensor *src[3] = {&req->hidden_states, &req->audio_hidden_states, &req->encoder_hidden_states};
    h3s_status st = H3S_OK;
    for (int i = 0; st == H3S_OK && i < 3; i++)
        st = to_f32(src[i], &f[i]);
    if (st == H3S_OK)
        st = h3s_inputs_random(lay, train->batch, seed, h3s_config_video_width(c), c->audio_in_channels, c->text_dim,
                               &train->hv, &train->ha, &train->enc);
    h3s_tensor *rt[3] = {&roll->hv, &roll->ha, &roll->enc}, *tt[3] = {&train->hv, &train->ha, &train->enc};
    int64_t have = req->hidden_states.shape[0], items = have < train->batch ? have : train->batch;
    for (int i = 0; st == H3S_OK && i < 3; i++) {
        int64_t shape[3] = {1, f[i].shape[1], f[i].shape[2]};
        st = h3s_tensor_alloc(rt[i], H3S_F32, 3, shape);
        if (st == H3S_OK) {
            copy_items(&f[i], 1, rt[i], 0);
            copy_items(&f[i], items, tt[i], 0);
        }
    }
    for (int i = 0; i < 3; i++)
        h3s_tensor_free(&f[i]);
    if (st != H3S_OK || !others || items == train->batch) return st;
    /* then the batch file's items */
    const h3s_tensor *osrc[3] = {&others->hidden_states, &others->audio_hidden_states, &others->encoder_hidden_states};
    int64_t more =
        others->hidden_states.shape[0] < train->batch - items ? others->hidden_states.shape[0] : train->batch - items;
    for (int i = 0; st == H3S_OK && i < 3; i++) {
        h3s_tensor g;
        memset(&g, 0, sizeof g);
        st = to_f32(osrc[i], &g);
        if (st == H3S_OK) copy_items(&g, more, tt[i], items);
        h3s_tensor_free(&g);
    }
    return st;
}

static h3s_status run_seed(h3s_model *m, const h3s_trajectory_opts *o, const h3s_layout *lay, uint64_t seed,
                           const float *sig_v, const float *sig_a, int64_t nsteps, cJSON *seed_obj,
                           h3s_trajectory_totals *tot) {
    const h3s_config *c = h3s_model_config(m);
    lane roll, train;
    memset(&roll, 0, sizeof roll);
    memset(&train, 0, sizeof train);
    roll.batch = 1;
    train.batch = o->batch;
    int64_t Wv = h3s_config_video_width(c);
    h3s_status st;
    if (o->request) {
        st = lanes_from_request(o->request, o->batch_inputs, lay, seed, c, &roll, &train);
    } else {
        st = h3s_inputs_random(lay, 1, seed, Wv, c->audio_in_channels, c->text_dim, &roll.hv, &roll.ha, &roll.enc);
        if (st == H3S_OK)
            st = h3s_inputs_random(lay, o->batch, seed, Wv, c->audio_in_channels, c->text_dim, &train.hv, &train.ha,
                                   &train.enc);
    }
    cJSON *steps = cJSON_AddArrayToObject(seed_obj, "steps");
    for (int64_t i = 0; st == H3S_OK && i < nsteps; i++) {
        float tv = 1.0f - sig_v[i], ta = 1.0f - sig_a[i];
        h3s_tensor timestep, ts_idx;
        st = h3s_layout_timesteps(lay, tv, ta, &timestep, &ts_idx);
        if (st != H3S_OK) break;
        lane_bind(&roll, lay, &timestep, &ts_idx);
        lane_bind(&train, lay, &timestep, &ts_idx);
        uint64_t ct_seed = seed * 1000003ULL + (uint64_t)i;
        h3s_progress_line(o->progress, o->progress_ctx,
                          "seed %llu: step %lld/%lld (t_video %.4f, t_audio %.4f): rollout (batch 1)",
                          (unsigned long long)seed, (long long)(i + 1), (long long)nsteps, tv, ta);
        st = lane_forward_backward(m, &roll, o->with_grad, ct_seed);
        if (st == H3S_OK) {
            h3s_progress_line(o->progress, o->progress_ctx, "seed %llu: step %lld/%lld: training layout (batch %lld)",
                              (unsigned long long)seed, (long long)(i + 1), (long long)nsteps, (long long)o->batch);
            st = lane_forward_backward(m, &train, o->with_grad, ct_seed);
        }
        if (st == H3S_OK) {
            cJSON *so = cJSON_CreateObject();
            cJSON_AddNumberToObject(so, "step", (double)i);
            cJSON_AddNumberToObject(so, "t_video", tv);
            cJSON_AddNumberToObject(so, "t_audio", ta);
            cJSON *cmp = cJSON_AddObjectToObject(so, "comparisons");
            add_comparison(cmp, "video_velocity", &train.sample, &roll.sample, &tot->comparisons, &tot->differing);
            add_comparison(cmp, "audio_velocity", &train.audio_sample, &roll.audio_sample, &tot->comparisons,
                           &tot->differing);
            lane_step(&roll, lay, tv, sig_v[i], sig_v[i + 1], ta, sig_a[i], sig_a[i + 1]);
            lane_step(&train, lay, tv, sig_v[i], sig_v[i + 1], ta, sig_a[i], sig_a[i + 1]);
            add_comparison(cmp, "next_video_latents", &train.hv, &roll.hv, &tot->comparisons, &tot->differing);
            add_comparison(cmp, "next_audio_latents", &train.ha, &roll.ha, &tot->comparisons, &tot->differing);
            if (o->with_grad) {
                cJSON *g = cJSON_AddObjectToObject(so, "gradients");
                add_comparison(g, "hidden_states", &train.grads.hidden_states, &roll.grads.hidden_states,
                               &tot->gradient_comparisons, &tot->gradient_differing);
                add_comparison(g, "audio_hidden_states", &train.grads.audio_hidden_states,
                               &roll.grads.audio_hidden_states, &tot->gradient_comparisons, &tot->gradient_differing);
                add_comparison(g, "encoder_hidden_states", &train.grads.encoder_hidden_states,
                               &roll.grads.encoder_hidden_states, &tot->gradient_comparisons, &tot->gradient_differing);
            }
            cJSON_AddItemToArray(steps, so);
            tot->steps_run++;
        }
        h3s_tensor_free(&timestep);
        h3s_tensor_free(&ts_idx);
    }
    lane_free(&roll);
    lane_free(&train);
    return st;
}

h3s_status h3s_trajectory_run(const h3s_weights *w, const h3s_trajectory_opts *o, cJSON **report,
                              h3s_trajectory_totals *totals) {
    if (!w || !o || !report || !totals) return h3s_fail(H3S_ERR_INVALID, "trajectory: NULL argument");
    if (o->nseeds <= 0 || !o->seeds) return h3s_fail(H3S_ERR_INVALID, "trajectory: no seeds");
    if (o->steps <= 0) return h3s_fail(H3S_ERR_INVALID, "trajectory: --steps must be positive");
    if (o->batch < 2) return h3s_fail(H3S_ERR_INVALID, "trajectory: --batch must be at least 2 (item 0 + others)");
    if (o->backend != H3S_BACKEND_CPU && o->backend != H3S_BACKEND_GOLDEN && o->backend != H3S_BACKEND_CUDA)
        return h3s_fail(H3S_ERR_INVALID, "trajectory: unknown backend %d", (int)o->backend);
    memset(totals, 0, sizeof *totals);
    const h3s_config *c = h3s_weights_config(w);
    if (o->request && o->request->attention_mask.data)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "trajectory: a request with an attention_mask is not supported yet");
    if (o->batch_inputs && !o->request)
        return h3s_fail(H3S_ERR_INVALID, "trajectory: a batch file needs a request file");
    if (o->batch_inputs && o->batch_inputs->attention_mask.data)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "trajectory: a batch file with an attention_mask is not supported yet");
    /* The request and the batch file are read whole below (their latents copied into the lanes' tensors, shaped by
     * the model): both must be valid inputs of this model, every tensor, before any work. */
    const h3s_inputs *files[2] = {o->request, o->batch_inputs};
    static const char *file_names[2] = {"the request", "the batch file"};
    for (int k = 0; k < 2; k++) {
        int64_t items = 0;
        if (files[k]) {
            h3s_status vst = h3s_inputs_validate(c, files[k], &items);
            if (vst != H3S_OK) return h3s_fail_context(vst, "trajectory: %s", file_names[k]);
        }
    }
    if (o->shift_video < 0 || o->shift_audio < 0 || !(o->shift_video < 1e6f) || !(o->shift_audio < 1e6f))
        return h3s_fail(H3S_ERR_INVALID, "trajectory: shifts must be positive (0 = the pipeline's)");
    float shift_v = o->shift_video > 0 ? o->shift_video : H3S_VIDEO_SHIFT;
    float shift_a = o->shift_audio > 0 ? o->shift_audio : H3S_AUDIO_SHIFT;
    h3s_status sst = h3s_schedule_check(o->steps, shift_v);
    if (sst != H3S_OK) return h3s_fail_context(sst, "trajectory: video shift %g", (double)shift_v);
    sst = h3s_schedule_check(o->steps, shift_a);
    if (sst != H3S_OK) return h3s_fail_context(sst, "trajectory: audio shift %g", (double)shift_a);
    h3s_layout lay;
    if (o->request)
        H3S_TRY(h3s_layout_from_inputs(o->request, o->condition_rows, &lay));
    else
        H3S_TRY(h3s_layout_build(&o->layout, c->patch_size[1], c->patch_size[2], &lay));
    int64_t n = o->steps + 1, count_v = 0, count_a = 0;
    float *sig_v = h3s_malloc((size_t)n, sizeof(float)), *sig_a = h3s_malloc((size_t)n, sizeof(float));
    h3s_model *m = NULL;
    h3s_status st = sig_v && sig_a ? H3S_OK : H3S_ERR_NOMEM;
    if (st == H3S_OK && o->batch_inputs) {
        h3s_layout other;
        st = h3s_layout_from_inputs(o->batch_inputs, 0, &other);
        if (st == H3S_OK) st = same_layout(&lay, &other);
        h3s_layout_free(&other);
    }
    if (st == H3S_OK) st = h3s_schedule_sigmas(n, shift_v, sig_v, &count_v);
    if (st == H3S_OK) st = h3s_schedule_sigmas(n, shift_a, sig_a, &count_a);
    /* unique_consecutive may shorten a grid; both modalities step together */
    int64_t nsteps = (count_v < count_a ? count_v : count_a) - 1;
    if (st == H3S_OK) st = h3s_model_create(w, o->backend, &m);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "binding", h3s_backend_name(o->backend));
    cJSON_AddNumberToObject(doc, "batch", (double)o->batch);
    cJSON_AddNumberToObject(doc, "steps", (double)nsteps);
    cJSON *lo = cJSON_AddObjectToObject(doc, "layout");
    cJSON_AddNumberToObject(lo, "S", (double)lay.S);
    cJSON_AddNumberToObject(lo, "video_rows", (double)lay.Nv);
    cJSON_AddNumberToObject(lo, "condition_rows", (double)lay.n_condition);
    cJSON_AddNumberToObject(lo, "audio_rows", (double)lay.Na);
    cJSON_AddNumberToObject(lo, "text_rows", (double)lay.Nt);
    const char *requests = !o->request       ? "seeded"
                           : o->batch_inputs ? "the user's request (item 0), its further items, the batch file's, then "
                                               "seeded"
                                             : "the user's request (item 0), its further items, then seeded";
    cJSON_AddStringToObject(doc, "requests", requests);
    cJSON_AddNumberToObject(doc, "shift_video", shift_v);
    cJSON_AddNumberToObject(doc, "shift_audio", shift_a);
    cJSON *seeds = cJSON_AddArrayToObject(doc, "seeds");
    int64_t nruns = o->request ? 1 : o->nseeds;
    for (int64_t s = 0; st == H3S_OK && s < nruns; s++) {
        cJSON *so = cJSON_CreateObject();
        /* a JSON integer of all its digits (a double would round a seed above 2^53) */
        char seed_text[24];
        snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)o->seeds[s]);
        cJSON_AddRawToObject(so, "seed", seed_text);
        cJSON_AddItemToArray(seeds, so);
        h3s_trajectory_totals before = *totals;
        st = run_seed(m, o, &lay, o->seeds[s], sig_v, sig_a, nsteps, so, totals);
        cJSON_AddNumberToObject(so, "differing", (double)(totals->differing - before.differing));
        cJSON_AddNumberToObject(so, "gradient_differing",
                                (double)(totals->gradient_differing - before.gradient_differing));
    }
    cJSON *sum = cJSON_AddObjectToObject(doc, "summary");
    cJSON_AddNumberToObject(sum, "comparisons", (double)totals->comparisons);
    cJSON_AddNumberToObject(sum, "differing", (double)totals->differing);
    cJSON_AddNumberToObject(sum, "gradient_comparisons", (double)totals->gradient_comparisons);
    cJSON_AddNumberToObject(sum, "gradient_differing", (double)totals->gradient_differing);
    h3s_model_free(m);
    free(sig_v);
    free(sig_a);
    h3s_layout_free(&lay);
    if (st != H3S_OK) {
        cJSON_Delete(doc);
        return st;
    }
    *report = doc;
    return H3S_OK;
}

h3s_status h3s_trajectory(const h3s_weights *w, const h3s_trajectory_opts *o, char **report_json,
                          h3s_trajectory_totals *totals) {
    if (!w || !o || !totals) return h3s_fail(H3S_ERR_INVALID, "trajectory: NULL argument");
    cJSON *doc = NULL;
    h3s_trajectory_totals tot;
    H3S_TRY(h3s_trajectory_run(w, o, &doc, &tot));
    char *text = NULL;
    if (report_json) {
        text = cJSON_Print(doc);
        if (!text) {
            cJSON_Delete(doc);
            return h3s_fail(H3S_ERR_NOMEM, "trajectory: out of memory printing the report");
        }
    }
    cJSON_Delete(doc);
    if (report_json) *report_json = text;
    *totals = tot;
    return H3S_OK;
}

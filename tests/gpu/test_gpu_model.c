/* The whole tiny model on the CUDA backend (--device cuda): accuracy of the forward and of
 * every gradient against the FP64 golden, repeat, batch invariance (item 0 of B = 3 vs B = 1),
 * padding invariance, per-block recomputation (H3S_RECOMPUTE_BLOCKS: outputs and every gradient byte for byte as
 * without it, B = 3 and B = 3 with padding, less device memory held) and the dual trajectory reporting 0 differing
 * comparisons. */
#include "cuda/cuda_ops.h"
#include "model_util.h"
#include "sample/trajectory.h"

/* Device gradients handed over in one block (h3s_grads.block): every requested gradient a view into it, at a
 * multiple of 256 bytes from its start, in canonical order, none overlapping the next or running past the block. */
static void grads_in_block(const h3s_grads *g, const char *what) {
    const uint8_t *b = (const uint8_t *)g->block.data;
    const size_t bytes = h3s_tensor_nbytes(&g->block);
    CHECK(b != NULL && g->block.device == 1, "%s: no device block", what);
    if (!b) return;
    size_t end = 0;
    int64_t inside = 0;
    for (int64_t i = 0; i < g->count; i++) {
        const h3s_tensor *t = &g->params[i];
        if (!t->data) continue;
        const uint8_t *p = (const uint8_t *)t->data;
        const int in = t->device == 1 && !t->owns_data && p >= b && (size_t)(p - b) % 256 == 0 &&
                       (size_t)(p - b) >= end && (size_t)(p - b) + h3s_tensor_nbytes(t) <= bytes;
        CHECK(in, "%s: %s is not a view in the block after the previous one", what, g->names[i]);
        if (in) end = (size_t)(p - b) + h3s_tensor_nbytes(t), inside++;
    }
    printf("gpu %s: %lld gradients in one block of %zu bytes\n", what, (long long)inside, bytes);
}

/* How many of g's device parameter gradients are bit for bit host's (*on_device: how many are on the device). */
static int64_t device_grads_equal(const h3s_grads *g, const h3s_grads *host_grads, int64_t *on_device) {
    int64_t equal = 0;
    *on_device = 0;
    for (int64_t i = 0; i < g->count && i < host_grads->count; i++) {
        const h3s_tensor *t = &g->params[i];
        if (!t->device) continue;
        (*on_device)++;
        h3s_tensor host;
        memset(&host, 0, sizeof host);
        CHECK_OK(h3s_tensor_alloc(&host, t->dtype, t->ndim, t->shape));
        CHECK_OK(h3s_cuda_download(t, &host));
        equal += h3t_bitwise_equal(&host, &host_grads->params[i]);
        h3s_tensor_free(&host);
    }
    return equal;
}

/* Raise the library's index flag on its stream: an AdaLN-modulated RMSNorm whose table index is out of range (the
 * kernel refuses the row and records the index), so that the next wait for the stream reports H3S_ERR_INDEX. */
static void raise_index_flag(void) {
    const int64_t M = 4, H = 32;
    int64_t xs[2] = {M, H}, ts[2] = {1, 2 * H}, is[1] = {M};
    h3s_tensor xh, th, ih, xd, td, id, yd;
    CHECK_OK(h3s_tensor_alloc(&xh, H3S_BF16, 2, xs));
    CHECK_OK(h3s_tensor_alloc(&th, H3S_BF16, 2, ts));
    CHECK_OK(h3s_tensor_alloc(&ih, H3S_I64, 1, is));
    for (int64_t m = 0; m < M; m++)
        ((int64_t *)ih.data)[m] = m == 2 ? 5 : 0; /* the table has one row */
    CHECK_OK(h3s_cuda_tensor_alloc(&xd, H3S_BF16, 2, xs));
    CHECK_OK(h3s_cuda_tensor_alloc(&td, H3S_BF16, 2, ts));
    CHECK_OK(h3s_cuda_tensor_alloc(&id, H3S_I64, 1, is));
    CHECK_OK(h3s_cuda_tensor_alloc(&yd, H3S_BF16, 2, xs));
    CHECK_OK(h3s_cuda_upload(&xh, &xd));
    CHECK_OK(h3s_cuda_upload(&th, &td));
    CHECK_OK(h3s_cuda_upload(&ih, &id));
    h3s_modulation mod = {&td, &id, 0, 1};
    CHECK_OK(h3s_rmsnorm_forward(&xd, NULL, &mod, 1e-5, &yd));
    h3s_cuda_tensor_free(&xd), h3s_cuda_tensor_free(&td), h3s_cuda_tensor_free(&id), h3s_cuda_tensor_free(&yd);
    h3s_tensor_free(&xh), h3s_tensor_free(&th), h3s_tensor_free(&ih);
}

int main(void) {
    if (!h3s_cuda_available()) {
        char reason[512];
        snprintf(reason, sizeof reason, "no CUDA GPU: %s", h3s_last_error());
        h3t_skip(reason);
    }
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&c, 3, &w));
    if (!w) return h3t_finish("test_gpu_model");
    h3s_model *gpu = NULL, *golden = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &gpu));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_GOLDEN, &golden));
    if (!gpu || !golden) return h3t_finish("test_gpu_model");

    request q3, q1, qp;
    make_request(&c, 3, 0, 0, &q3);
    make_request(&c, 1, 0, 0, &q1);
    make_request(&c, 3, 64, 0, &qp);
    run a, b, one, g, p;
    forward_backward(gpu, &q3.in, &a);
    forward_backward(gpu, &q3.in, &b);
    forward_backward(gpu, &q1.in, &one);
    forward_backward(golden, &q3.in, &g);
    forward_backward(gpu, &qp.in, &p);

    /* Same bounds and reasoning as the CPU whole-model test (test_model.c): BF16 activations,
     * ~40 roundings of u = 2^-8 deep, partly cancelling. */
    double e_s = h3t_rel_l2(&a.sample, &g.sample), e_a = h3t_rel_l2(&a.audio, &g.audio);
    double e_gv = h3t_rel_l2(&a.grads.hidden_states, &g.grads.hidden_states);
    double e_ga = h3t_rel_l2(&a.grads.audio_hidden_states, &g.grads.audio_hidden_states);
    double e_gt = h3t_rel_l2(&a.grads.encoder_hidden_states, &g.grads.encoder_hidden_states);
    printf("gpu forward rel-L2: sample %.3e audio %.3e; input grads %.3e %.3e %.3e\n", e_s, e_a, e_gv, e_ga, e_gt);
    CHECK(e_s < 2.5e-2 && e_a < 2.5e-2, "forward rel-L2 %g %g", e_s, e_a);
    CHECK(e_gv < 4e-2 && e_ga < 4e-2 && e_gt < 4e-2, "input gradient rel-L2 %g %g %g", e_gv, e_ga, e_gt);
    double worst = 0;
    const char *worst_name = "";
    for (int64_t i = 0; i < a.grads.count && i < g.grads.count; i++) {
        double e = h3t_rel_l2(&a.grads.params[i], &g.grads.params[i]);
        if (!(e <= worst)) {
            worst = e;
            worst_name = a.grads.names[i];
        }
    }
    printf("gpu parameter gradients: worst rel-L2 %.3e (%s)\n", worst, worst_name);
    CHECK(worst < 4e-2, "worst parameter gradient %g (%s)", worst, worst_name);

    CHECK(runs_equal(&a, &b), "two identical GPU runs differ");
    CHECK(item0_equal(&a.sample, &one.sample), "GPU sample item 0 differs between B=3 and B=1");
    CHECK(item0_equal(&a.audio, &one.audio), "GPU audio item 0 differs between B=3 and B=1");
    CHECK(item0_equal(&a.grads.hidden_states, &one.grads.hidden_states), "GPU d hidden_states item 0 differs");
    CHECK(item0_equal(&a.grads.audio_hidden_states, &one.grads.audio_hidden_states), "GPU d audio item 0 differs");
    CHECK(item0_equal(&a.grads.encoder_hidden_states, &one.grads.encoder_hidden_states),
          "GPU d encoder item 0 differs");
    CHECK(h3t_bitwise_equal(&p.sample, &a.sample), "GPU: padding changed the video output");
    CHECK(h3t_bitwise_equal(&p.grads.hidden_states, &a.grads.hidden_states), "GPU: padding changed d hidden_states");

    /* Per-block recomputation on the device: the same kernels on the same inputs, so the same bits; the model's
     * tensors peak lower (the tape keeps each block's input only). */
    {
        int64_t peak_plain = h3s_model_peak_bytes(gpu);
        h3s_model *rec = NULL;
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &rec));
        CHECK_OK(h3s_model_set_recompute(rec, H3S_RECOMPUTE_BLOCKS));
        run ra, rp;
        forward_backward(rec, &q3.in, &ra);
        forward_backward(rec, &qp.in, &rp);
        CHECK(runs_equal(&a, &ra), "GPU: recomputation changed outputs or gradients (B = 3)");
        CHECK(runs_equal(&p, &rp), "GPU: recomputation changed outputs or gradients (B = 3, padding)");
        printf("gpu recomputation: model tensors peak %lld bytes without, %lld with\n", (long long)peak_plain,
               (long long)h3s_model_peak_bytes(rec));
        CHECK(h3s_model_peak_bytes(rec) < peak_plain, "GPU: recomputation did not lower the peak");
        CHECK(h3s_model_live_bytes(rec) == 0, "GPU: device bytes still counted after the passes");
        run_free(&ra);
        run_free(&rp);
        h3s_model_free(rec);
    }

    /* Device gradients (h3s_model_set_device_grads): the same bits as the host ones, handed over in device memory,
     * released by h3s_grads_free; a partial request hands over only what was asked. */
    {
        h3s_model *dg = NULL;
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &dg));
        CHECK(h3s_model_device_grads(dg) == 0, "device gradients are off by default");
        CHECK_OK(h3s_model_set_device_grads(dg, 1));
        CHECK(h3s_model_device_grads(dg) == 1, "device gradients on");
        run d;
        forward_backward(dg, &q3.in, &d);
        CHECK(h3t_bitwise_equal(&d.sample, &a.sample), "GPU device-gradient model: sample differs");
        /* the input gradients are handed over in device memory too */
        h3s_tensor *din[3] = {&d.grads.hidden_states, &d.grads.audio_hidden_states, &d.grads.encoder_hidden_states};
        const h3s_tensor *ain[3] = {&a.grads.hidden_states, &a.grads.audio_hidden_states,
                                    &a.grads.encoder_hidden_states};
        for (int k = 0; k < 3; k++) {
            CHECK(din[k]->device == 1, "GPU device-gradient model: input gradient %d is not on the device", k);
            if (din[k]->device != 1) continue;
            h3s_tensor host;
            memset(&host, 0, sizeof host);
            CHECK_OK(h3s_tensor_alloc(&host, din[k]->dtype, din[k]->ndim, din[k]->shape));
            CHECK_OK(h3s_cuda_download(din[k], &host));
            CHECK(h3t_bitwise_equal(&host, ain[k]), "GPU device-gradient model: input gradient %d differs", k);
            h3s_tensor_free(&host);
        }
        int64_t on_device = 0, equal = device_grads_equal(&d.grads, &a.grads, &on_device);
        CHECK(a.grads.block.data == NULL, "host gradients: no device block");
        grads_in_block(&d.grads, "F32 device gradients");
        printf("gpu device gradients: %lld of %lld on the device, %lld bit-identical to the host gradients\n",
               (long long)on_device, (long long)d.grads.count, (long long)equal);
        CHECK(on_device == d.grads.count && equal == on_device, "device gradients: %lld on device, %lld equal of %lld",
              (long long)on_device, (long long)equal, (long long)d.grads.count);
        CHECK(h3s_model_live_bytes(dg) == 0, "GPU: handed-over device gradients still counted as the model's");
        run_free(&d);
        CHECK(d.grads.params == NULL, "h3s_grads_free cleared the gradients");
        CHECK_OK(h3s_cuda_sync());
        h3s_model_free(dg);
    }

    /* Deferred backward (h3s_model_set_deferred_backward): a device-gradient backward returns with its pass queued
     * (pending), and after h3s_model_finish its gradients are the synchronous ones of run `a`, bit for bit; the next
     * pass, turning the mode off and freeing the model finish a pending backward; an index error raised on the
     * library's stream while a backward is pending is h3s_model_finish's, and the model's next pass reports it. */
    {
        h3s_model *df = NULL;
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &df));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_deferred_backward(NULL, 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_finish(NULL));
        CHECK(h3s_model_deferred_backward(df) == 0 && h3s_model_pending(df) == 0,
              "deferred backward is off by default");
        CHECK_OK(h3s_model_set_device_grads(df, 1));
        CHECK_OK(h3s_model_set_deferred_backward(df, 1));
        CHECK(h3s_model_deferred_backward(df) == 1, "deferred backward on");
        run d;
        forward_backward(df, &q3.in, &d);
        CHECK(h3s_model_pending(df) == 1, "a deferred backward returned finished");
        CHECK_OK(h3s_model_finish(df));
        CHECK(h3s_model_pending(df) == 0, "finished, still pending");
        CHECK_OK(h3s_model_finish(df)); /* nothing pending: OK */
        CHECK(h3t_bitwise_equal(&d.sample, &a.sample), "deferred backward model: sample differs");
        int64_t on_device = 0, equal = device_grads_equal(&d.grads, &a.grads, &on_device);
        printf("gpu deferred backward: %lld of %lld gradients on the device, %lld bit-identical to the host ones\n",
               (long long)on_device, (long long)d.grads.count, (long long)equal);
        CHECK(on_device == d.grads.count && equal == on_device, "deferred backward: %lld on device, %lld equal of %lld",
              (long long)on_device, (long long)equal, (long long)d.grads.count);
        run_free(&d);
        /* the next pass finishes it: a forward's own check then has nothing pending */
        forward_backward(df, &q1.in, &d);
        CHECK(h3s_model_pending(df) == 1, "second deferred backward not pending");
        run e;
        forward_backward(df, &q1.in, &e);
        CHECK_OK(h3s_model_finish(df));
        int64_t n1 = 0, eq1 = device_grads_equal(&e.grads, &one.grads, &n1);
        CHECK(n1 == e.grads.count && eq1 == n1, "deferred backward after a pending one: %lld of %lld equal",
              (long long)eq1, (long long)n1);
        run_free(&d);
        run_free(&e);
        /* an error on the stream while pending: h3s_model_finish reports it once */
        forward_backward(df, &q1.in, &d);
        raise_index_flag();
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_finish(df));
        CHECK(strstr(h3s_last_error(), "deferred backward") != NULL, "message: %s", h3s_last_error());
        CHECK(h3s_model_pending(df) == 0, "pending after a failed finish");
        CHECK_OK(h3s_cuda_sync());
        run_free(&d);
        /* ... and a pass started while it is pending reports it and does no work */
        forward_backward(df, &q1.in, &d);
        raise_index_flag();
        {
            h3s_tensor s2, a2;
            h3s_tape *t2 = NULL;
            CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(df, &q1.in, NULL, NULL, &t2, &s2, &a2));
            CHECK(t2 == NULL && h3s_model_pending(df) == 0, "a failed pass left a tape or a pending backward");
            CHECK(strstr(h3s_last_error(), "model_forward") != NULL, "message: %s", h3s_last_error());
        }
        run_free(&d);
        /* turning the mode off finishes a pending backward; freeing the model does too */
        forward_backward(df, &q1.in, &d);
        CHECK_OK(h3s_model_set_deferred_backward(df, 0));
        CHECK(h3s_model_pending(df) == 0 && h3s_model_deferred_backward(df) == 0, "mode off: still pending");
        run_free(&d);
        CHECK_OK(h3s_model_set_deferred_backward(df, 1));
        forward_backward(df, &q1.in, &d);
        h3s_model_free(df);
        run_free(&d);
        CHECK_OK(h3s_cuda_sync());
    }

    /* Outputs into the caller's device memory (h3s_model_forward_into) and cotangents from it: the same bits as the
     * host ones of run `a`; a NaN in a device cotangent and a host pointer passed as device memory are refused. */
    {
        h3s_model *dm = NULL;
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &dm));
        h3s_tensor ds_h, da_h, sd, ad, dsd, dad;
        CHECK_OK(h3s_cotangent_random(a.sample.shape[0], a.sample.shape[1], a.sample.shape[2], a.audio.shape[1],
                                      a.audio.shape[2], 99, &ds_h, &da_h)); /* forward_backward's cotangents */
        CHECK_OK(h3s_cuda_tensor_alloc(&sd, H3S_F32, 3, a.sample.shape));
        CHECK_OK(h3s_cuda_tensor_alloc(&ad, H3S_F32, 3, a.audio.shape));
        CHECK_OK(h3s_cuda_tensor_alloc(&dsd, H3S_F32, 3, a.sample.shape));
        CHECK_OK(h3s_cuda_tensor_alloc(&dad, H3S_F32, 3, a.audio.shape));
        CHECK_OK(h3s_cuda_upload(&ds_h, &dsd));
        CHECK_OK(h3s_cuda_upload(&da_h, &dad));
        h3s_tape *tape = NULL;
        CHECK_OK(h3s_model_forward_into(dm, &q3.in, NULL, NULL, &tape, &sd, &ad));
        h3s_tensor sh, ah;
        memset(&sh, 0, sizeof sh), memset(&ah, 0, sizeof ah);
        CHECK_OK(h3s_tensor_alloc(&sh, H3S_F32, 3, a.sample.shape));
        CHECK_OK(h3s_tensor_alloc(&ah, H3S_F32, 3, a.audio.shape));
        CHECK_OK(h3s_cuda_download(&sd, &sh));
        CHECK_OK(h3s_cuda_download(&ad, &ah));
        CHECK(h3t_bitwise_equal(&sh, &a.sample) && h3t_bitwise_equal(&ah, &a.audio),
              "GPU forward into device outputs: sample or audio differs from the host outputs");
        run d;
        memset(&d, 0, sizeof d);
        if (tape) CHECK_OK(h3s_model_backward(dm, tape, &dsd, &dad, NULL, NULL, &d.grads));
        d.sample = sh, d.audio = ah;
        CHECK(runs_equal(&d, &a), "GPU backward from device cotangents: a gradient differs from the host run");
        printf("gpu device outputs and cotangents: outputs and %lld gradients bit-identical to the host run\n",
               (long long)d.grads.count);
        /* a NaN in a device cotangent: refused with its index, as on the host */
        h3s_tensor nan_h;
        memset(&nan_h, 0, sizeof nan_h);
        CHECK_OK(h3s_tensor_alloc(&nan_h, H3S_F32, 3, a.sample.shape));
        memcpy(nan_h.data, ds_h.data, h3s_tensor_nbytes(&ds_h));
        ((float *)nan_h.data)[5] = NAN;
        ((float *)nan_h.data)[9] = INFINITY;
        CHECK_OK(h3s_cuda_upload(&nan_h, &dsd));
        h3s_grads bad;
        memset(&bad, 0, sizeof bad);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(dm, tape, &dsd, &dad, NULL, NULL, &bad));
        CHECK(strstr(h3s_last_error(), "sample[5]") != NULL, "the NaN's index in the message: %s", h3s_last_error());
        /* host memory claimed as device memory; a BF16 device cotangent */
        h3s_tensor fake = ds_h;
        fake.device = 1;
        fake.owns_data = 0;
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_model_backward(dm, tape, &fake, &dad, NULL, NULL, &bad));
        h3s_tensor fake_out = sh;
        fake_out.device = 1;
        fake_out.owns_data = 0;
        h3s_tape *t2 = NULL;
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_model_forward_into(dm, &q3.in, NULL, NULL, &t2, &fake_out, &ad));
        CHECK(t2 == NULL, "no tape after a refused output");
        h3s_tensor bf = dsd;
        bf.dtype = H3S_BF16;
        CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_backward(dm, tape, &bf, &dad, NULL, NULL, &bad));
        h3s_tensor_free(&nan_h);
        h3s_tape_free(tape);
        run_free(&d);
        h3s_tensor_free(&ds_h), h3s_tensor_free(&da_h);
        h3s_cuda_tensor_free(&sd), h3s_cuda_tensor_free(&ad), h3s_cuda_tensor_free(&dsd), h3s_cuda_tensor_free(&dad);
        CHECK_OK(h3s_cuda_sync());
        h3s_model_free(dm);
    }

    /* BF16 parameter gradients (h3s_model_set_grad_dtype), in device memory as the binding takes them and on the
     * host: each the F32 gradient of run `a` rounded to nearest even (the blocks' linear weights rounded by the
     * weight-gradient GEMM as it stores, the others afterwards), the F32 parameters' and the input gradients
     * unchanged. */
    for (int dev = 0; dev < 2; dev++) {
        h3s_model *bm = NULL;
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CUDA, &bm));
        CHECK_OK(h3s_model_set_grad_dtype(bm, H3S_BF16));
        if (dev) CHECK_OK(h3s_model_set_device_grads(bm, 1));
        run d;
        forward_backward(bm, &q3.in, &d);
        h3s_tensor *din[3] = {&d.grads.hidden_states, &d.grads.audio_hidden_states, &d.grads.encoder_hidden_states};
        for (int k = 0; dev && k < 3; k++) { /* the input gradients, in device memory with the parameters' */
            h3s_tensor *t = din[k], host;
            memset(&host, 0, sizeof host);
            CHECK(t->device == 1, "BF16 device gradients: input gradient %d is not on the device", k);
            if (t->device != 1) continue;
            CHECK_OK(h3s_tensor_alloc(&host, t->dtype, t->ndim, t->shape));
            CHECK_OK(h3s_cuda_download(t, &host));
            h3s_cuda_tensor_free(t);
            *t = host;
        }
        if (dev) grads_in_block(&d.grads, "BF16 device gradients");
        for (int64_t i = 0; dev && i < d.grads.count; i++) { /* download the device gradients */
            h3s_tensor *t = &d.grads.params[i], host;
            memset(&host, 0, sizeof host);
            CHECK(t->device == 1, "BF16 device gradients: %s is not on the device", d.grads.names[i]);
            CHECK_OK(h3s_tensor_alloc(&host, t->dtype, t->ndim, t->shape));
            CHECK_OK(h3s_cuda_download(t, &host));
            CHECK_OK(h3s_cuda_sync());
            h3s_cuda_tensor_free(t);
            *t = host;
        }
        int64_t nbf = 0;
        const int ok = grads_bf16_of(&a, &d, &nbf);
        printf("gpu BF16 gradients (%s): %lld of %lld in BF16, each the F32 gradient rounded: %s\n",
               dev ? "device" : "host", (long long)nbf, (long long)d.grads.count, ok ? "yes" : "NO");
        CHECK(ok && nbf > 0, "GPU BF16 gradients (%s) are not the F32 ones rounded", dev ? "device" : "host");
        run_free(&d);
        h3s_model_free(bm);
    }

    /* The dual trajectory on the GPU: the main job's settings. */
    uint64_t seeds[3] = {11, 22, 33};
    h3s_trajectory_opts o;
    memset(&o, 0, sizeof o);
    o.seeds = seeds;
    o.nseeds = 3;
    o.steps = 4;
    o.batch = 4;
    o.backend = H3S_BACKEND_CUDA;
    o.layout = (h3s_layout_opts){6, 2, 4, 6, 4, 1, 0, 0};
    o.with_grad = 1;
    cJSON *doc = NULL;
    h3s_trajectory_totals tot;
    CHECK_OK(h3s_trajectory_run(w, &o, &doc, &tot));
    printf("gpu trajectory: %lld/%lld comparisons differ, %lld/%lld gradient comparisons differ\n",
           (long long)tot.differing, (long long)tot.comparisons, (long long)tot.gradient_differing,
           (long long)tot.gradient_comparisons);
    CHECK(tot.comparisons == 48 && tot.differing == 0, "GPU trajectory: %lld of %lld differ", (long long)tot.differing,
          (long long)tot.comparisons);
    CHECK(tot.gradient_differing == 0, "GPU trajectory gradients: %lld differ", (long long)tot.gradient_differing);
    cJSON_Delete(doc);

    run *all[] = {&a, &b, &one, &g, &p};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        run_free(all[i]);
    request_free(&q3);
    request_free(&q1);
    request_free(&qp);
    h3s_model_free(gpu);
    h3s_model_free(golden);
    h3s_weights_free(w);
    return h3t_finish("test_gpu_model");
}

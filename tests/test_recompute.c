/* Per-block activation recomputation (h3s_model_set_recompute, docs/ARCHITECTURE.md "The graph and its tape") is
 * invisible in the results: a forward + backward with H3S_RECOMPUTE_BLOCKS gives the outputs, the three input
 * gradients, every parameter gradient and every node the hook sees (names in order, SHA-256 of each tensor,
 * forward and backward) byte for byte as without it.  Cases: the tiny preset and a configuration of odd sizes
 * (5 heads of 12, hidden 35, FFN 57, 3 blocks, 2 refiner blocks), batch 1 and batch 2 with padding rows and an
 * attention mask, at 1 and 3 threads, on the strict CPU backend, plus the FP64 golden once; a backward with a
 * choice of gradients; the same tape used twice; the tape keeping the mode it was made with; the memory it saves
 * (h3s_model_peak_bytes); refusals.  (The CUDA backend runs the same block code: tests/gpu/test_gpu_model.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_util.h"

/* Forward + backward (all gradients, or those of want) with the hook logging every node. */
static void run_logged(h3s_model *m, const h3s_inputs *in, const unsigned char *want, run *r, node_log *log) {
    memset(r, 0, sizeof *r);
    h3s_tape *tape = NULL;
    CHECK_OK(h3s_model_forward(m, in, log_node, log, &tape, &r->sample, &r->audio));
    if (!tape) return;
    h3s_tensor ds, da;
    CHECK_OK(h3s_cotangent_random(r->sample.shape[0], r->sample.shape[1], r->sample.shape[2], r->audio.shape[1],
                                  r->audio.shape[2], 99, &ds, &da));
    CHECK_OK(h3s_model_backward_select(m, tape, &ds, &da, want, log_node, log, &r->grads));
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_tape_free(tape);
}

/* Bytes two runs hold in outputs and gradients (what runs_equal compares). */
static int64_t run_bytes(const run *r) {
    int64_t n =
        (int64_t)(h3s_tensor_nbytes(&r->sample) + h3s_tensor_nbytes(&r->audio) +
                  h3s_tensor_nbytes(&r->grads.hidden_states) + h3s_tensor_nbytes(&r->grads.audio_hidden_states) +
                  h3s_tensor_nbytes(&r->grads.encoder_hidden_states));
    for (int64_t i = 0; i < r->grads.count; i++)
        if (r->grads.params[i].data) n += (int64_t)h3s_tensor_nbytes(&r->grads.params[i]);
    return n;
}

/* runs_equal where an unrequested parameter gradient (no data) must be unrequested in both runs. */
static int runs_same(const run *a, const run *b) {
    if (a->grads.count != b->grads.count) return 0;
    run x = *a, y = *b;
    for (int64_t i = 0; i < a->grads.count; i++)
        if (!a->grads.params[i].data || !b->grads.params[i].data)
            if (a->grads.params[i].data || b->grads.params[i].data) return 0;
    /* compare the requested ones (runs_equal reads every entry's data) */
    for (int64_t i = 0; i < a->grads.count; i++)
        if (a->grads.params[i].data && !h3t_bitwise_equal(&a->grads.params[i], &b->grads.params[i])) return 0;
    x.grads.count = y.grads.count = 0;
    return runs_equal(&x, &y);
}

static int64_t g_bytes, g_nodes, g_cases;

/* One case: the model without and with recomputation, everything compared byte for byte. */
static void compare_case(const char *label, h3s_backend_kind kind, const h3s_config *c, int64_t batch, int64_t pad_to,
                         int with_mask, int threads, const unsigned char *want) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(c, 17, &w));
    if (!w) return;
    request q;
    make_request(c, batch, pad_to, with_mask, &q);
    h3s_model *plain = NULL, *rec = NULL;
    CHECK_OK(h3s_model_create(w, kind, &plain));
    CHECK_OK(h3s_model_create(w, kind, &rec));
    if (!plain || !rec) return;
    CHECK_OK(h3s_model_set_recompute(rec, H3S_RECOMPUTE_BLOCKS));
    CHECK(h3s_model_recompute(rec) == H3S_RECOMPUTE_BLOCKS && h3s_model_recompute(plain) == H3S_RECOMPUTE_NONE,
          "[%s] the mode reads back wrong", label);
    h3s_set_num_threads(threads);
    run ra, rr;
    node_log la = {0}, lr = {0};
    run_logged(plain, &q.in, want, &ra, &la);
    run_logged(rec, &q.in, want, &rr, &lr);
    h3s_set_num_threads(0);
    CHECK(runs_same(&ra, &rr), "[%s, %d threads] outputs or gradients differ with recomputation", label, threads);
    CHECK(la.n == lr.n && la.n > 0, "[%s] the hook saw %lld nodes without recomputation, %lld with", label,
          (long long)la.n, (long long)lr.n);
    int64_t first = node_log_first_diff(&la, &lr);
    CHECK(first < 0, "[%s, %d threads] first differing node: %s (with recomputation: %s)", label, threads,
          first >= 0 ? la.names[first] : "", first >= 0 ? lr.names[first] : "");
    /* recomputation keeps less: the peak of the pass is lower (the tape of a multi-block model dominates) */
    CHECK(h3s_model_peak_bytes(rec) < h3s_model_peak_bytes(plain),
          "[%s] peak %lld bytes with recomputation, %lld without", label, (long long)h3s_model_peak_bytes(rec),
          (long long)h3s_model_peak_bytes(plain));
    CHECK(h3s_model_live_bytes(rec) == 0 && h3s_model_live_bytes(plain) == 0,
          "[%s] %lld / %lld bytes still live after the tapes were freed", label, (long long)h3s_model_live_bytes(rec),
          (long long)h3s_model_live_bytes(plain));
    printf("%-58s %d thr: %lld nodes, %lld + %lld bytes equal; peak %lld -> %lld bytes\n", label, threads,
           (long long)la.n, (long long)run_bytes(&ra), (long long)la.bytes, (long long)h3s_model_peak_bytes(plain),
           (long long)h3s_model_peak_bytes(rec));
    g_bytes += run_bytes(&ra) + la.bytes;
    g_nodes += la.n;
    g_cases++;
    /* the comparison can fail: one flipped bit of the last requested parameter gradient is seen */
    for (int64_t i = rr.grads.count - 1; i >= 0; i--) {
        if (!rr.grads.params[i].data) continue;
        ((unsigned char *)rr.grads.params[i].data)[0] ^= 1;
        CHECK(!runs_same(&ra, &rr), "[%s] a flipped gradient bit went unseen", label);
        break;
    }
    run_free(&ra);
    run_free(&rr);
    node_log_free(&la);
    node_log_free(&lr);
    h3s_model_free(plain);
    h3s_model_free(rec);
    request_free(&q);
    h3s_weights_free(w);
}

/* A recomputing tape used for two backwards, kept past its model, and made before a change of mode. */
static void tape_cases(const h3s_config *c) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(c, 5, &w));
    request q;
    make_request(c, 2, 0, 0, &q);
    h3s_model *m = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    if (!m) return;
    run base;
    forward_backward(m, &q.in, &base); /* no recomputation */
    CHECK_OK(h3s_model_set_recompute(m, H3S_RECOMPUTE_BLOCKS));
    h3s_tape *tape = NULL;
    h3s_tensor s = {0}, a = {0}, ds, da;
    CHECK_OK(h3s_model_forward(m, &q.in, NULL, NULL, &tape, &s, &a));
    CHECK(h3t_bitwise_equal(&s, &base.sample) && h3t_bitwise_equal(&a, &base.audio), "recomputing forward differs");
    CHECK_OK(h3s_cotangent_random(s.shape[0], s.shape[1], s.shape[2], a.shape[1], a.shape[2], 99, &ds, &da));
    /* the mode of the tape is the one it was made with: switching the model back changes nothing for it */
    CHECK_OK(h3s_model_set_recompute(m, H3S_RECOMPUTE_NONE));
    for (int k = 0; k < 2; k++) {
        h3s_grads g;
        CHECK_OK(h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        run r = {s, a, g};
        CHECK(runs_equal(&base, &r), "backward %d of a recomputing tape differs", k + 1);
        h3s_grads_free(&g);
    }
    CHECK(h3s_model_live_bytes(m) > 0, "a held tape counts no bytes");
    /* device gradients asked of a CPU model: nothing changes (host tensors, the same bits) */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_device_grads(NULL, 1));
    CHECK(h3s_model_device_grads(NULL) == 0, "a NULL model hands no device gradients over");
    CHECK_OK(h3s_model_set_device_grads(m, 1));
    CHECK(h3s_model_device_grads(m) == 0, "a CPU model reports device gradients");
    {
        h3s_grads g;
        CHECK_OK(h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        run r = {s, a, g};
        CHECK(runs_equal(&base, &r) && g.count > 0 && !g.params[0].device, "CPU model with device gradients asked");
        h3s_grads_free(&g);
    }
    /* a deferred backward asked of a CPU model: nothing changes (the call returns finished work, the same bits) */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_deferred_backward(NULL, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_finish(NULL));
    CHECK(h3s_model_deferred_backward(NULL) == 0 && h3s_model_pending(NULL) == 0, "a NULL model defers nothing");
    CHECK_OK(h3s_model_set_deferred_backward(m, 1));
    CHECK(h3s_model_deferred_backward(m) == 1, "deferred mode not recorded");
    {
        h3s_grads g;
        CHECK_OK(h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        CHECK(h3s_model_pending(m) == 0, "a CPU model's backward left a pass pending");
        CHECK_OK(h3s_model_finish(m));
        run r = {s, a, g};
        CHECK(runs_equal(&base, &r), "CPU model with a deferred backward asked");
        h3s_grads_free(&g);
    }
    h3s_model_free(m); /* the tape outlives its model: freeing it afterwards is safe */
    h3s_tape_free(tape);
    h3s_tensor_free(&s);
    h3s_tensor_free(&a);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    run_free(&base);
    request_free(&q);
    h3s_weights_free(w);
}

int main(void) {
    h3s_config tiny, odd;
    CHECK_OK(h3s_config_preset("tiny", -1, &tiny));
    odd = odd_config(&tiny);

    const struct {
        const char *name;
        const h3s_config *c;
    } cfgs[2] = {{"tiny", &tiny}, {"odd config", &odd}};
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < 2; t++) {
            int threads = t ? 3 : 1;
            char label[96];
            snprintf(label, sizeof label, "%s, batch 1", cfgs[k].name);
            compare_case(label, H3S_BACKEND_CPU, cfgs[k].c, 1, 0, 0, threads, NULL);
            snprintf(label, sizeof label, "%s, batch 2, padding rows and mask", cfgs[k].name);
            compare_case(label, H3S_BACKEND_CPU, cfgs[k].c, 2, 64, 1, threads, NULL);
        }
    compare_case("odd config, batch 2, FP64 golden", H3S_BACKEND_GOLDEN, &odd, 2, 0, 0, 2, NULL);

    /* a choice of gradients: inputs only, and every second parameter */
    {
        h3s_param_spec *specs = NULL;
        int64_t np = 0;
        CHECK_OK(h3s_param_specs(&odd, &specs, &np));
        unsigned char *none = calloc((size_t)np + 1, 1), *half = calloc((size_t)np + 1, 1);
        for (int64_t i = 0; half && i < np; i++)
            half[i] = (unsigned char)(i % 2);
        if (none && half) {
            compare_case("odd config, batch 2, inputs-only gradients", H3S_BACKEND_CPU, &odd, 2, 0, 0, 2, none);
            compare_case("odd config, batch 2, every second parameter", H3S_BACKEND_CPU, &odd, 2, 64, 1, 2, half);
        }
        free(none);
        free(half);
        h3s_free(specs);
    }
    tape_cases(&odd);

    /* refusals and parsing */
    {
        h3s_recompute mode = H3S_RECOMPUTE_NONE;
        CHECK_OK(h3s_recompute_parse("blocks", &mode));
        CHECK(mode == H3S_RECOMPUTE_BLOCKS, "parse blocks");
        CHECK_OK(h3s_recompute_parse("none", &mode));
        CHECK(mode == H3S_RECOMPUTE_NONE, "parse none");
        CHECK_FAILS(H3S_ERR_INVALID, h3s_recompute_parse("layers", &mode));
        CHECK(strstr(h3s_last_error(), "'layers'") != NULL, "the refusal names the value: %s", h3s_last_error());
        CHECK_FAILS(H3S_ERR_INVALID, h3s_recompute_parse(NULL, &mode));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_recompute(NULL, H3S_RECOMPUTE_BLOCKS));
        h3s_weights *w = NULL;
        h3s_model *m = NULL;
        CHECK_OK(h3s_weights_create(&tiny, 1, &w));
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_recompute(m, (h3s_recompute)2));
        CHECK(h3s_model_recompute(m) == H3S_RECOMPUTE_NONE, "a refused mode was kept");
        CHECK(h3s_model_peak_bytes(NULL) == 0 && h3s_model_live_bytes(NULL) == 0, "NULL model bytes");
        h3s_model_free(m);
        /* the process-wide default: models created afterwards take it */
        CHECK_OK(h3s_set_recompute(H3S_RECOMPUTE_BLOCKS));
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
        CHECK(h3s_model_recompute(m) == H3S_RECOMPUTE_BLOCKS, "h3s_set_recompute was not applied");
        h3s_model_free(m);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_set_recompute((h3s_recompute)7));
        CHECK_OK(h3s_set_recompute(H3S_RECOMPUTE_NONE));
        CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
        CHECK(h3s_model_recompute(m) == H3S_RECOMPUTE_NONE, "the default did not return to none");
        h3s_model_free(m);
        h3s_weights_free(w);
    }
    printf("recomputation: %lld cases, %lld hooked nodes, %lld bytes compared, 0 expected to differ\n",
           (long long)g_cases, (long long)g_nodes, (long long)g_bytes);
    return h3t_finish("test_recompute");
}

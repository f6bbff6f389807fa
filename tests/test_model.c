/* Whole-model contracts on the tiny preset: accuracy of the forward and of every gradient
 * against the FP64 golden, batch invariance, repeat, thread invariance, padding invariance
 * and fail-closed input validation. */
#include "model_util.h"

int main(void) {
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&c, 3, &w));
    if (!w) return h3t_finish("test_model");
    h3s_model *strict = NULL, *golden = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &strict));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_GOLDEN, &golden));
    if (!strict || !golden) return h3t_finish("test_model");

    request q3, q1;
    make_request(&c, 3, 0, 0, &q3);
    make_request(&c, 1, 0, 0, &q1);
    run a, b, one, g;
    forward_backward(strict, &q3.in, &a);
    forward_backward(strict, &q3.in, &b);
    forward_backward(strict, &q1.in, &one);
    forward_backward(golden, &q3.in, &g);

    /* Accuracy against the FP64 golden.  The strict model rounds every block activation to
     * BF16 (unit roundoff u = 2^-8 = 3.9e-3; one rounding of many values measures ~1.6e-3 rel-L2); a tiny model chains
     * ~40 such roundings (3 blocks x 13 nodes + pack + refiner final norm), partly cancelling, so the outputs sit near
     * 3-8e-3.  Bound: 2.5e-2 for outputs (4x margin, well under the 1.25x-provider + 1e-3 contract of a BF16 provider
     * that rounds at least as often).  Gradients flow through the same BF16 saved activations plus F32 arithmetic:
     * bound 4e-2. */
    double e_s = h3t_rel_l2(&a.sample, &g.sample), e_a = h3t_rel_l2(&a.audio, &g.audio);
    printf("forward rel-L2 vs golden: sample %.3e, audio_sample %.3e\n", e_s, e_a);
    CHECK(e_s < 2.5e-2, "sample rel-L2 %g", e_s);
    CHECK(e_a < 2.5e-2, "audio_sample rel-L2 %g", e_a);
    double e_gv = h3t_rel_l2(&a.grads.hidden_states, &g.grads.hidden_states);
    double e_ga = h3t_rel_l2(&a.grads.audio_hidden_states, &g.grads.audio_hidden_states);
    double e_gt = h3t_rel_l2(&a.grads.encoder_hidden_states, &g.grads.encoder_hidden_states);
    printf("input-gradient rel-L2: hidden %.3e, audio %.3e, encoder %.3e\n", e_gv, e_ga, e_gt);
    CHECK(e_gv < 4e-2 && e_ga < 4e-2 && e_gt < 4e-2, "input gradients rel-L2 %g %g %g", e_gv, e_ga, e_gt);
    double worst = 0;
    const char *worst_name = "";
    int64_t zero_grads = 0;
    for (int64_t i = 0; i < a.grads.count && i < g.grads.count; i++) {
        double e = h3t_rel_l2(&a.grads.params[i], &g.grads.params[i]);
        if (!(e <= worst)) {
            worst = e;
            worst_name = a.grads.names[i];
        }
        double norm = 0;
        for (int64_t k = 0; k < h3s_tensor_numel(&g.grads.params[i]); k++)
            norm += fabs(h3s_tensor_get_f64(&g.grads.params[i], k));
        if (norm == 0) zero_grads++;
    }
    printf("parameter gradients: %lld, worst rel-L2 %.3e (%s)\n", (long long)a.grads.count, worst, worst_name);
    CHECK(a.grads.count > 30, "parameter gradient count %lld", (long long)a.grads.count);
    CHECK(worst < 4e-2, "worst parameter gradient rel-L2 %g (%s)", worst, worst_name);
    CHECK(zero_grads == 0, "%lld parameter gradients are identically zero in the golden", (long long)zero_grads);

    /* Repeat: bitwise, outputs and every gradient. */
    CHECK(runs_equal(&a, &b), "two identical runs differ");

    /* Batch invariance: item 0 of B = 3 equals B = 1, outputs and input gradients. */
    CHECK(item0_equal(&a.sample, &one.sample), "sample item 0 differs between B=3 and B=1");
    CHECK(item0_equal(&a.audio, &one.audio), "audio_sample item 0 differs between B=3 and B=1");
    CHECK(item0_equal(&a.grads.hidden_states, &one.grads.hidden_states), "d hidden_states item 0 differs");
    CHECK(item0_equal(&a.grads.audio_hidden_states, &one.grads.audio_hidden_states), "d audio item 0 differs");
    CHECK(item0_equal(&a.grads.encoder_hidden_states, &one.grads.encoder_hidden_states), "d encoder item 0 differs");
    /* and the test can fail: item 1 is a different request */
    size_t item_bytes = h3s_tensor_nbytes(&one.sample);
    CHECK(memcmp((char *)a.sample.data + item_bytes, one.sample.data, item_bytes) != 0, "items 0 and 1 coincide");

    /* Thread invariance: 1, 2 and 4 threads. */
    run t1, t2, t4;
    h3s_set_num_threads(1);
    forward_backward(strict, &q3.in, &t1);
    h3s_set_num_threads(2);
    forward_backward(strict, &q3.in, &t2);
    h3s_set_num_threads(4);
    forward_backward(strict, &q3.in, &t4);
    h3s_set_num_threads(0);
    CHECK(runs_equal(&t1, &t2), "1 vs 2 threads differ");
    CHECK(runs_equal(&t1, &t4), "1 vs 4 threads differ");
    CHECK(runs_equal(&t1, &a), "1 thread vs default differ");

    /* Padding rows (tagged -1, own attention document) and, separately, the key-padding
     * mask, leave every live output bitwise unchanged. */
    request qp, qm;
    make_request(&c, 3, 64, 0, &qp);
    make_request(&c, 3, 64, 1, &qm);
    CHECK(qp.lay.S % 64 == 0 && qp.lay.S > q3.lay.S, "padded S %lld", (long long)qp.lay.S);
    run p, pm;
    forward_backward(strict, &qp.in, &p);
    forward_backward(strict, &qm.in, &pm);
    CHECK(h3t_bitwise_equal(&p.sample, &a.sample), "padding changed the video output");
    CHECK(h3t_bitwise_equal(&p.audio, &a.audio), "padding changed the audio output");
    CHECK(h3t_bitwise_equal(&p.grads.hidden_states, &a.grads.hidden_states), "padding changed d hidden_states");
    CHECK(h3t_bitwise_equal(&pm.sample, &a.sample), "attention_mask padding changed the video output");
    CHECK(h3t_bitwise_equal(&pm.grads.encoder_hidden_states, &a.grads.encoder_hidden_states),
          "attention_mask padding changed d encoder_hidden_states");

    /* The key-padding mask hides a text row everywhere, the token refiner included: changing
     * the features of a masked text row changes no video or audio output bit (and, as a check
     * that the test can fail, it does change them without the mask). */
    {
        request qa, qb;
        make_request(&c, 2, 0, 1, &qa);
        make_request(&c, 2, 0, 1, &qb);
        int64_t Nt = qa.lay.Nt, row = ((int64_t *)qa.lay.text_indices.data)[1];
        for (int64_t bb = 0; bb < 2; bb++) {
            ((uint8_t *)qa.mask.data)[bb * qa.lay.S + row] = 0;
            ((uint8_t *)qb.mask.data)[bb * qb.lay.S + row] = 0;
            float *e = (float *)qb.enc.data + (bb * Nt + 1) * c.text_dim;
            for (int64_t k = 0; k < c.text_dim; k++)
                e[k] = e[k] * 3.0f + 0.5f;
        }
        h3s_tensor sa = {0}, aa = {0}, sb = {0}, ab = {0};
        CHECK_OK(h3s_model_forward(strict, &qa.in, NULL, NULL, NULL, &sa, &aa));
        CHECK_OK(h3s_model_forward(strict, &qb.in, NULL, NULL, NULL, &sb, &ab));
        CHECK(h3t_bitwise_equal(&sa, &sb) && h3t_bitwise_equal(&aa, &ab), "a masked text row changed the outputs");
        h3s_tensor_free(&sb);
        h3s_tensor_free(&ab);
        qb.in.attention_mask = (h3s_tensor){0};
        h3s_tensor sa2 = {0}, aa2 = {0};
        qa.in.attention_mask = (h3s_tensor){0};
        CHECK_OK(h3s_model_forward(strict, &qa.in, NULL, NULL, NULL, &sa2, &aa2));
        CHECK_OK(h3s_model_forward(strict, &qb.in, NULL, NULL, NULL, &sb, &ab));
        CHECK(!h3t_bitwise_equal(&sa2, &sb), "without the mask the changed text row had no effect");
        h3s_tensor *all4[] = {&sa, &aa, &sb, &ab, &sa2, &aa2};
        for (size_t i = 0; i < 6; i++)
            h3s_tensor_free(all4[i]);
        request_free(&qa);
        request_free(&qb);
    }

    /* Fail-closed inputs: each bad input is refused before anything is computed. */
    {
        h3s_tensor s0 = {0}, a0 = {0};
        int64_t *vi = q1.lay.video_indices.data;
        int64_t saved = vi[0];
        vi[0] = q1.lay.S; /* out of range */
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        vi[0] = -1;
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        vi[0] = ((int64_t *)q1.lay.text_indices.data)[0]; /* collides with a text row */
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        vi[0] = saved;
        int64_t *tags = q1.lay.token_tags.data;
        int64_t saved_tag = tags[0];
        tags[0] = 3;
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        tags[0] = saved_tag;
        int64_t *tsi = q1.tsi.data;
        int64_t saved_t = tsi[1];
        tsi[1] = q1.ts.shape[0];
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        tsi[1] = saved_t;
        h3s_inputs bad = q1.in;
        bad.hidden_states.shape[2] -= 1;
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_model_forward(strict, &bad, NULL, NULL, NULL, &s0, &a0));
        bad = q1.in;
        bad.video_indices.dtype = H3S_F64;
        CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_forward(strict, &bad, NULL, NULL, NULL, &s0, &a0));
        bad = q1.in;
        bad.text_indices.shape[0] -= 1; /* index length != encoder rows */
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_model_forward(strict, &bad, NULL, NULL, NULL, &s0, &a0));
        /* a live row that no index list names (a padding row re-tagged as text) */
        int64_t *ptags = qp.lay.token_tags.data;
        ptags[qp.lay.S - 1] = 1;
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &qp.in, NULL, NULL, NULL, &s0, &a0));
        ptags[qp.lay.S - 1] = -1;
        /* a video row tagged audio */
        int64_t vrow = ((int64_t *)q1.lay.video_indices.data)[0];
        tags[vrow] = 2;
        CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        tags[vrow] = 0;
        /* attention_mask bytes must be booleans */
        ((uint8_t *)qm.mask.data)[0] = 2;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward(strict, &qm.in, NULL, NULL, NULL, &s0, &a0));
        ((uint8_t *)qm.mask.data)[0] = 1;
        /* timesteps live in [0, 1] */
        float *tsv = q1.ts.data;
        float saved_ts = tsv[0];
        tsv[0] = 1.5f;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        tsv[0] = -0.25f;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        tsv[0] = saved_ts;
        /* position_ids must be F64 or F32 (docs/cli.md) */
        bad = q1.in;
        bad.position_ids.dtype = H3S_BF16;
        CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_forward(strict, &bad, NULL, NULL, NULL, &s0, &a0));
        CHECK(s0.data == NULL && a0.data == NULL, "a refused forward wrote outputs");
        /* and the unmodified request still runs */
        CHECK_OK(h3s_model_forward(strict, &q1.in, NULL, NULL, NULL, &s0, &a0));
        CHECK(h3t_bitwise_equal(&s0, &one.sample), "restored request differs");
        h3s_tensor_free(&s0);
        h3s_tensor_free(&a0);
    }

    run *all[] = {&a, &b, &one, &g, &t1, &t2, &t4, &p, &pm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        run_free(all[i]);
    request_free(&q3);
    request_free(&q1);
    request_free(&qp);
    request_free(&qm);
    h3s_model_free(strict);
    h3s_model_free(golden);
    h3s_weights_free(w);
    return h3t_finish("test_model");
}

/* Per-node replay report: every node repeat- and batch-equal with first_drift null, errors
 * against the golden reported, and a planted one-bit perturbation found as the first drift at
 * exactly the planted node (forward and backward nodes). */
#include "io/modeldir.h"
#include "model/config.h"
#include "report/report.h"
#include "sample/layout.h"
#include "test_util.h"

static cJSON *replay_opts(const h3s_weights *w, const h3s_inputs *in, const char *plant, int golden, int alone) {
    h3s_replay_opts o = {H3S_BACKEND_CPU, 7, golden, plant, NULL, NULL, alone};
    cJSON *doc = NULL;
    CHECK_OK(h3s_replay(w, in, &o, &doc));
    return doc;
}

static cJSON *replay(const h3s_weights *w, const h3s_inputs *in, const char *plant, int golden) {
    h3s_replay_opts o = {H3S_BACKEND_CPU, 7, golden, plant, NULL, NULL, 0};
    cJSON *doc = NULL;
    CHECK_OK(h3s_replay(w, in, &o, &doc));
    return doc;
}

static const char *first_drift(const cJSON *doc) {
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(doc, "first_drift");
    return cJSON_IsString(fd) ? fd->valuestring : NULL;
}

int main(void) {
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&c, 4, &w));
    if (!w) return h3t_finish("test_replay");
    h3s_layout lay;
    h3s_layout_opts lo = {5, 2, 4, 6, 3, 0, 1, 0};
    CHECK_OK(h3s_layout_build(&lo, c.patch_size[1], c.patch_size[2], &lay));
    h3s_tensor hv, ha, enc, ts, tsi;
    CHECK_OK(
        h3s_inputs_random(&lay, 2, 8, h3s_config_video_width(&c), c.audio_in_channels, c.text_dim, &hv, &ha, &enc));
    CHECK_OK(h3s_layout_timesteps(&lay, 0.4f, 0.7f, &ts, &tsi));
    h3s_inputs in = {
        hv, ha, enc, ts, tsi, lay.token_tags, lay.position_ids, lay.video_indices, lay.audio_indices, lay.text_indices,
        {0}};

    cJSON *clean = replay(w, &in, NULL, 1);
    if (clean) {
        CHECK(first_drift(clean) == NULL, "clean replay reports a drift at %s", first_drift(clean));
        const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(clean, "nodes");
        int n = cJSON_GetArraySize(nodes), fwd = 0, with_err = 0;
        const cJSON *node;
        cJSON_ArrayForEach(node, nodes) {
            const char *name = cJSON_GetObjectItemCaseSensitive(node, "name")->valuestring;
            CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(node, "repeat_equal")), "%s not repeat-equal", name);
            const cJSON *be = cJSON_GetObjectItemCaseSensitive(node, "batch_equal");
            CHECK(cJSON_IsNull(be) || cJSON_IsTrue(be), "%s not batch-equal", name);
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(node, "golden_rel_l2");
            if (cJSON_IsNumber(e)) with_err++;
            if (!strstr(name, ".grad") && strncmp(name, "param.", 6)) {
                fwd++;
                /* forward nodes: BF16 activations, a handful of roundings deep (see test_model) */
                CHECK(cJSON_IsNumber(e) && e->valuedouble < 3e-2, "%s golden error %g", name,
                      cJSON_IsNumber(e) ? e->valuedouble : -1.0);
            }
        }
        /* 2 blocks x 17 nodes + 1 refiner x 14 + model-level nodes, then the backward */
        CHECK(fwd >= 2 * 17 + 14 + 9, "only %d forward nodes", fwd);
        CHECK(with_err == n, "%d of %d nodes have a golden error", with_err, n);
        CHECK(cJSON_GetObjectItemCaseSensitive(clean, "summary") != NULL, "no summary");
    }
    /* forward, backward, batched and unbatched nodes: every one must be found */
    const char *plants[] = {
        "block.1.attention", "refiner.0.swiglu",  "timestep_mlp",          "block.0.ffn_down.grad",
        "proj_in.grad",      "timestep_mlp.grad", "param.proj_out.weight", "block.0.adaln_projection.grad"};
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        cJSON *doc = replay(w, &in, plants[i], 0);
        if (!doc) continue;
        const char *fd = first_drift(doc);
        CHECK(fd && !strcmp(fd, plants[i]), "planted drift at %s reported at %s", plants[i], fd ? fd : "(none)");
        cJSON_Delete(doc);
    }
    /* Batch drift: one bit flipped in the run of item 0 alone, so every repeat comparison agrees and only the
     * batch comparison can see it.  It must be reported as a batch drift at exactly the planted node (forward,
     * backward, batched and unbatched forward nodes).  With the batch comparison disabled in h3s_replay this
     * fails ("no drift found"); the repeat-drift plants above cannot catch that. */
    const char *batch_plants[] = {"block.1.attention", "timestep_mlp", "refiner.0.swiglu", "block.0.ffn_down.grad",
                                  "proj_in.grad"};
    for (size_t i = 0; i < sizeof batch_plants / sizeof batch_plants[0]; i++) {
        cJSON *doc = replay_opts(w, &in, batch_plants[i], 0, 1);
        if (!doc) continue;
        const char *fd = first_drift(doc);
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "first_drift_kind");
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(doc, "summary");
        const cJSON *rep = cJSON_GetObjectItemCaseSensitive(sum, "repeat_differing");
        const cJSON *bat = cJSON_GetObjectItemCaseSensitive(sum, "batch_differing");
        CHECK(fd && !strcmp(fd, batch_plants[i]), "planted batch drift at %s reported at %s", batch_plants[i],
              fd ? fd : "(no drift found)");
        CHECK(cJSON_IsString(kind) && !strcmp(kind->valuestring, "batch"), "%s: drift kind %s", batch_plants[i],
              cJSON_IsString(kind) ? kind->valuestring : "(none)");
        CHECK(cJSON_IsNumber(rep) && rep->valuedouble == 0, "%s: a batch plant shows as a repeat drift",
              batch_plants[i]);
        CHECK(cJSON_IsNumber(bat) && bat->valuedouble >= 1, "%s: no batch-differing node", batch_plants[i]);
        cJSON_Delete(doc);
    }
    /* batch-1 inputs: the batch comparison would compare a run with itself, so it is not made */
    {
        h3s_inputs one = in;
        one.hidden_states.shape[0] = one.audio_hidden_states.shape[0] = one.encoder_hidden_states.shape[0] = 1;
        cJSON *doc = replay(w, &one, NULL, 0);
        if (doc) {
            const cJSON *sum = cJSON_GetObjectItemCaseSensitive(doc, "summary");
            CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(sum, "batch_checked")), "B=1 claims a batch check");
            const cJSON *node;
            int compared = 0;
            cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(doc, "nodes")) {
                compared += !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(node, "batch_equal"));
            }
            CHECK(compared == 0, "%d nodes report a batch comparison for B = 1", compared);
            cJSON_Delete(doc);
        }
    }
    /* an unknown node cannot be planted */
    h3s_replay_opts bad = {H3S_BACKEND_CPU, 7, 0, "block.9.nothing", NULL, NULL, 0};
    cJSON *none = NULL;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_replay(w, &in, &bad, &none));
    CHECK(none == NULL, "failed replay returned a report");

    cJSON_Delete(clean);
    h3s_tensor *all[] = {&hv, &ha, &enc, &ts, &tsi};
    for (size_t i = 0; i < 5; i++)
        h3s_tensor_free(all[i]);
    h3s_layout_free(&lay);
    h3s_weights_free(w);
    return h3t_finish("test_replay");
}

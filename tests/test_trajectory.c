/* Dual trajectory on the tiny model: 0 differing comparisons on every seed, identical
 * reports for 1 and 2 threads, and a comparison that can fail (different seeds differ).
 *
 * The thread-equality check compares reports that hold the SHA-256 of every compared tensor
 * (alone and batched), so it compares the values: with a fault planted in the sampler that
 * flips one bit of the next video latents only when 2 threads are used, this test fails
 * ("1-thread and 2-thread reports differ") while the trajectory itself still reports
 * 0 differing comparisons on each run; before the report held digests it passed. */
#include "io/modeldir.h"
#include "model/config.h"
#include "report/report.h"
#include "sample/trajectory.h"
#include "test_util.h"

static char *run_report(const h3s_weights *w, const uint64_t *seeds, int64_t nseeds, int threads,
                        h3s_trajectory_totals *tot) {
    h3s_trajectory_opts o;
    memset(&o, 0, sizeof o);
    o.seeds = seeds;
    o.nseeds = nseeds;
    o.steps = 3;
    o.batch = 3;
    o.backend = H3S_BACKEND_CPU;
    o.layout = (h3s_layout_opts){5, 2, 4, 6, 3, 1, 0, 0};
    o.with_grad = 1;
    h3s_set_num_threads(threads);
    cJSON *doc = NULL;
    CHECK_OK(h3s_trajectory_run(w, &o, &doc, tot));
    h3s_set_num_threads(0);
    if (!doc) return NULL;
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    return text;
}

int main(void) {
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&c, 0, &w));
    if (!w) return h3t_finish("test_trajectory");
    uint64_t seeds[2] = {11, 22};
    h3s_trajectory_totals t1, t2;
    char *r1 = run_report(w, seeds, 2, 1, &t1);
    char *r2 = run_report(w, seeds, 2, 2, &t2);
    CHECK(r1 && r2, "reports missing");
    CHECK(t1.comparisons == 2 * 3 * 4, "comparisons %lld", (long long)t1.comparisons);
    CHECK(t1.gradient_comparisons == 2 * 3 * 3, "gradient comparisons %lld", (long long)t1.gradient_comparisons);
    CHECK(t1.differing == 0, "%lld forward comparisons differ", (long long)t1.differing);
    CHECK(t1.gradient_differing == 0, "%lld gradient comparisons differ", (long long)t1.gradient_differing);
    if (r1 && r2) CHECK(!strcmp(r1, r2), "1-thread and 2-thread reports differ");
    /* the reports carry values, not only flags: one digest per side of every comparison */
    int digests = 0;
    for (const char *p = r1; p && (p = strstr(p, "\"sha256_")) != NULL; p++)
        digests++;
    CHECK(digests == 2 * (2 * 3 * 4 + 2 * 3 * 3), "%d digests in the report, expected %d", digests,
          2 * (2 * 3 * 4 + 2 * 3 * 3));
    if (r1) CHECK(strstr(r1, "\"summary\":{\"comparisons\":24,\"differing\":0") != NULL, "summary missing: %.200s", r1);

    /* The comparison can fail: a rollout and a training item of different requests differ. */
    {
        h3s_layout lay;
        h3s_layout_opts lo = {5, 2, 4, 6, 3, 1, 0, 0};
        CHECK_OK(h3s_layout_build(&lo, 2, 2, &lay));
        h3s_tensor a[3], b[3];
        CHECK_OK(h3s_inputs_random(&lay, 1, 11, h3s_config_video_width(&c), c.audio_in_channels, c.text_dim, &a[0],
                                   &a[1], &a[2]));
        CHECK_OK(h3s_inputs_random(&lay, 1, 12, h3s_config_video_width(&c), c.audio_in_channels, c.text_dim, &b[0],
                                   &b[1], &b[2]));
        int64_t diff;
        double max_abs;
        h3s_compare_item0(&a[0], &b[0], &diff, &max_abs);
        CHECK(diff > 0 && max_abs > 0, "different seeds gave equal latents");
        for (int i = 0; i < 3; i++) {
            h3s_tensor_free(&a[i]);
            h3s_tensor_free(&b[i]);
        }
        h3s_layout_free(&lay);
    }
    free(r1);
    free(r2);
    h3s_weights_free(w);
    return h3t_finish("test_trajectory");
}

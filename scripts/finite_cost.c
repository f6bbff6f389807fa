/* The cost of the NaN/Inf scan h3s_weights_load makes: load a model directory, time the scan of every parameter
 * (pages already in memory, so the figure is the scan itself), and extrapolate to the released geometry by bytes.
 * Built and run by scripts/finite_cost.sh. */
#include <stdio.h>
#include <time.h>

#include "core/core.h"
#include "io/modeldir.h"
#include "model/config.h"
#include "model/params.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: finite_cost MODEL_DIR\n");
        return 2;
    }
    double t0 = now();
    h3s_weights *w = NULL;
    h3s_status st = h3s_weights_load(argv[1], &w); /* includes one scan; also brings the pages in */
    double load = now() - t0;
    if (st != H3S_OK) {
        fprintf(stderr, "load: %s\n", h3s_last_error());
        return 1;
    }
    double bytes = 0;
    for (int64_t i = 0; i < h3s_weights_count(w); i++)
        bytes += (double)h3s_tensor_nbytes(h3s_weights_at(w, i, NULL));
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        int64_t bad = 0;
        for (int64_t i = 0; i < h3s_weights_count(w); i++)
            bad += h3s_tensor_first_nonfinite(h3s_weights_at(w, i, NULL)) >= 0;
        t = now() - t;
        if (bad) return 1;
        if (t < best) best = t;
    }
    h3s_config rel;
    h3s_param_spec *specs = NULL;
    int64_t n = 0;
    double rel_bytes = 0;
    if (h3s_config_preset("h3-33b", -1, &rel) == H3S_OK && h3s_param_specs(&rel, &specs, &n) == H3S_OK)
        for (int64_t i = 0; i < n; i++)
            rel_bytes += (double)h3s_param_spec_numel(&specs[i]) * (double)h3s_dtype_size(specs[i].dtype);
    free(specs);
    double gbs = bytes / best / 1e9;
    printf("model: %lld parameters, %.3f GB\n", (long long)h3s_weights_count(w), bytes / 1e9);
    printf("threads %d: scan of every parameter (warm pages, best of 5): %.3f s = %.2f GB/s\n", h3s_get_num_threads(),
           best, gbs);
    printf("first load including the scan (cold or warm pages as found): %.3f s\n", load);
    printf("released geometry (h3-33b, %.2f GB of parameters): scan estimated at %.1f s at this rate\n",
           rel_bytes / 1e9, rel_bytes / 1e9 / gbs);
    h3s_weights_free(w);
    return 0;
}

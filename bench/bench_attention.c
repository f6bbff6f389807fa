/* Benchmark (not a test): strict attention on the GPU at the H3 shapes, 56 heads x 128, no mask.
 *
 *   build/bench_attention [--reps N] [--warmup N] [--json FILE] [--gather] [--only S B]
 *
 * For S in {12, 925, 1133, 4253, 8349} and B in {1, 4} (or the one pair of --only, e.g. to profile it): the forward
 * (h3s_attention_forward: out and stats) and the backward (h3s_attention_backward: dq, dk, dv from an F32 dout) on
 * device tensors, CUDA events on the backend's stream around each call (the host-side grouping of the keys is inside
 * the timed region), median of --reps (default 10) after --warmup (default 3).  FLOPs are counted as 4 B S^2 H D
 * (forward) and 10 B S^2 H D (backward, with the recomputation).  The PyTorch side of the comparison is
 * bench/provider/sdpa_bench.py; bench/provider/run_attention_bench.sh runs both and writes the ratios.  Without a CUDA
 * device it prints one line and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "cuda/cuda_extra.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

#ifdef H3S_BENCH_CUDART /* built with the CUDA backend and its runtime */
#include <cuda_runtime_api.h>

#define MAX_REPS 100

static void ok(h3s_status st, const char *what) {
    if (st != H3S_OK) {
        fprintf(stderr, "bench_attention: %s: %s\n", what, h3s_last_error());
        exit(2);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = 10, warmup = 3;
    const char *json = NULL;
    long long only_s = 0, only_b = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--gather")) /* every tile gathered, none by the bulk tensor copy */
            h3c_attention_force_gather(1);
        else if (!strcmp(argv[i], "--only") && i + 2 < argc) {
            only_s = atoll(argv[++i]);
            only_b = atoll(argv[++i]);
            if (only_s < 1 || only_s > 1000000 || only_b < 1 || only_b > 64) {
                fprintf(stderr, "bench_attention: --only S B needs 1 <= S <= 1000000 and 1 <= B <= 64\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_attention [--reps N] [--warmup N] [--json FILE] [--gather] [--only S B]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || warmup < 0) {
        fprintf(stderr, "bench_attention: --reps in 1..100, --warmup >= 0\n");
        return 2;
    }
    if (!h3s_cuda_available()) {
        printf("bench_attention: skipped: no CUDA GPU: %s\n", h3s_last_error());
        return 0;
    }
    ok(h3c_init("bench_attention"), "init");
    cudaStream_t s = (cudaStream_t)h3c_stream();
    const int64_t H = 56, D = 128, W = H * D;
    int64_t Ss[5] = {12, 925, 1133, 4253, 8349}, Bs[2] = {1, 4};
    int ns = 5, nb = 2;
    if (only_s) {
        Ss[0] = only_s, Bs[0] = only_b;
        ns = nb = 1;
    }
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (json && !jf) {
        fprintf(stderr, "bench_attention: cannot write %s\n", json);
        return 2;
    }
    if (jf) fprintf(jf, "{\"source_commit\": \"%s\", \"rows\": [\n", H3S_SOURCE_COMMIT);
    printf("%6s %2s %-9s %10s %9s\n", "S", "B", "phase", "strict_ms", "TFLOP/s");
    int first = 1;
    for (int bi = 0; bi < nb; bi++)
        for (int si = 0; si < ns; si++) {
            const int64_t B = Bs[bi], S = Ss[si], M = B * S;
            int64_t shp[2] = {M, W}, sshp[3] = {M, H, 2};
            h3s_tensor q, k, v, g, o, st, dq, dk, dv;
            ok(h3s_cuda_tensor_alloc(&q, H3S_BF16, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&k, H3S_BF16, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&v, H3S_BF16, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&g, H3S_F32, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&o, H3S_BF16, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&st, H3S_F32, 3, sshp), "alloc");
            ok(h3s_cuda_tensor_alloc(&dq, H3S_F32, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&dk, H3S_F32, 2, shp), "alloc");
            ok(h3s_cuda_tensor_alloc(&dv, H3S_F32, 2, shp), "alloc");
            ok(h3s_cuda_fill_random(&q, 1, 1.0f), "fill");
            ok(h3s_cuda_fill_random(&k, 2, 1.0f), "fill");
            ok(h3s_cuda_fill_random(&v, 3, 1.0f), "fill");
            ok(h3s_cuda_fill_random(&g, 4, 1.0f), "fill");
            for (int phase = 0; phase < 2; phase++) {
                float t[MAX_REPS];
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                for (int r = 0; r < warmup + reps; r++) {
                    cudaEventRecord(e0, s);
                    if (phase == 0)
                        ok(h3s_attention_forward(&q, &k, &v, B, H, NULL, &o, &st), "forward");
                    else
                        ok(h3s_attention_backward(&q, &k, &v, &o, &st, B, H, NULL, &g, &dq, &dk, &dv), "backward");
                    cudaEventRecord(e1, s);
                    cudaEventSynchronize(e1);
                    if (r >= warmup) cudaEventElapsedTime(&t[r - warmup], e0, e1);
                }
                ok(h3s_cuda_sync(), "sync");
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
                qsort(t, (size_t)reps, sizeof t[0], cmp_float);
                const float med = reps % 2 ? t[reps / 2] : 0.5f * (t[reps / 2 - 1] + t[reps / 2]);
                const double flop = (phase ? 10.0 : 4.0) * (double)B * (double)S * (double)S * (double)H * (double)D;
                const double tf = flop / (med * 1e-3) * 1e-12;
                printf("%6lld %2lld %-9s %10.4f %9.1f\n", (long long)S, (long long)B, phase ? "backward" : "forward",
                       med, tf);
                if (jf) {
                    fprintf(jf,
                            "%s  {\"S\": %lld, \"B\": %lld, \"phase\": \"%s\", \"strict_ms\": %.5f, \"strict_tflops\": "
                            "%.1f}",
                            first ? "" : ",\n", (long long)S, (long long)B, phase ? "backward" : "forward", med, tf);
                    first = 0;
                }
            }
            h3s_tensor all[9] = {q, k, v, g, o, st, dq, dk, dv};
            for (int i = 0; i < 9; i++)
                h3s_cuda_tensor_free(&all[i]);
        }
    if (jf) {
        fprintf(jf, "\n]}\n");
        fclose(jf);
    }
    return 0;
}
#else
int main(void) {
    printf("bench_attention: skipped: built without the CUDA backend\n");
    return 0;
}
#endif

/* Benchmark (not a test): the strict Hopper GEMM against cuBLASLt on the MiniMax-H3 shapes.
 *
 *   build/bench_gemm [--reps N] [--warmup N] [--quick] [--invariance FILE] [--json FILE] [--only K N M]
 *                    [--phase P] [--config C] [--dw-bf16] [--wgrad-fold] [--wgrad-config C] [--chain N]
 *                    [--gate] [--raster GROUP HINT_A HINT_B] [--map-cache 0|1]
 *
 * One process, side by side: for every shape K -> N (5376->7168, 7168->5376, 5376->28672,
 * 14336->5376, 2688->32256), phase and M in {12, 64, 925, 1133, 4253, 8349, 33396}, the strict
 * kernel and cuBLASLt's default heuristic (its first algorithm) on the same device buffers,
 * timed with CUDA events on one stream: after a settling pass of both (not counted), two halves in the order
 * strict, cuBLASLt, cuBLASLt, strict, each the median of --reps (default 10) after --warmup (default 3) runs, a
 * side's time the mean of its two medians.  Phases and operands (the same for both sides):
 *   forward  y[M, N] (BF16)  = x[M, K] w[N, K]^T         BF16 operands, FP32 accumulation
 *   dgrad    dx[M, K] (F32)  = dy[M, N] w[N, K]           dy in BF16 (the strict linear rounds its F32 dy once,
 *                                                         a separate pass timed as dy_round_ms)
 *   wgrad    dw[N, K] (F32)  = dy^T x, strict with the canonical 256-row tile fold
 * The previous strict kernel (mma.sync; F32 dy split into hi + lo for the gradients) is timed at
 * M <= 1133 for the side column.  --invariance FILE takes row_invariance_differing from the JSON
 * test_gpu_gemm writes.  --config C runs the forward and dgrad in configuration C (0-11,
 * docs/numerics/linear_cuda.md; every configuration gives the same bits) instead of the dispatcher's choice, to
 * compare configurations at one shape and M when tuning the dispatch.  --only K N M takes any M (e.g. the token
 * refiner's 77 text rows).  --dw-bf16: the wgrad writes dw in BF16 on both sides (the strict fold rounded once as it
 * is stored, as the model's BF16 parameter gradients are), recorded as "dw_dtype" in the JSON.  --wgrad-fold runs
 * the wgrad's fold configuration at every M (the dispatcher takes the one-tile configuration at M <= 256; the same
 * bits).  --wgrad-config C forces wgrad configuration C (h3c_gemm_force_wgrad: 0 the fold on 128 x 192 tiles, 1 one
 * tile, 5 configuration 1 with bulk stores, 7 and 8 the overlapped folds, 9 configuration 7 transposed, F32 dw only;
 * 2, 3, 4 and 6 were removed; the same bits).  --phase P
 * (forward, dgrad or wgrad) measures that phase alone.  The run first measures the copy bandwidth (a 256 MiB device
 * to device copy, bytes read plus written: "copy_tbps"); at M <= 64, where a GEMM streams its weight (forward,
 * dgrad) or its weight gradient (wgrad, written), each row records those bytes per second as a fraction of it, for
 * strict and cuBLASLt ("strict_stream_fraction", "cublas_stream_fraction"; columns s_strm, c_strm).  Each row also
 * records the host's time to issue one product, strict's and cuBLASLt's ("strict_host_us", "cublas_host_us", JSON
 * only): in a lone call the device, idle after the start event, waits for it.  --chain N
 * (1-100, default 1) runs each side's product N times back to back between a sample's two events and records the
 * elapsed time over N: the host's work before a launch and the launch's latency then overlap the previous call's
 * kernels, as they do in a model's pass where launches queue ahead of the device (recorded as "chain" in the JSON).
 * --gate holds the stream before each sample's start event (a host function that returns once the host has issued the
 * sample's work), so that the device reaches the start event with every launch of the sample queued: the sample is
 * then the device's time alone, without the host's work before the first launch (recorded as "gate" in the JSON).
 * Rows at M <= 64 record those held times in any case ("strict_device_ms", "cublas_device_ms") and the stream
 * fractions they give ("strict_device_stream_fraction", "cublas_device_stream_fraction"; columns s_dev, c_dev),
 * and the copy bandwidth measured again right after the row ("copy_tbps_row", JSON only): the run's first copy is
 * measured with the device cool, a row late in the table after seconds of the large products.
 * --raster GROUP HINT_A HINT_B sets strict's tile raster (tile-rows per group, default 16) and L2 policies for its
 * operands' copies (0 none, 1 evict-first, 2 evict-last; h3c_gemm_raster), which change no result.  --map-cache 0
 * makes strict encode every tensor map instead of keeping them (h3c_gemm_map_cache; the same maps).
 * Without a CUDA device it prints one line and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>

#include "core/core.h"
#include "cuda/cuda_extra.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_ops.h"
#include "h3s.h"

#ifdef H3S_HAVE_CUBLASLT
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define MAX_REPS 100

static void die(const char *what, const char *detail) {
    fprintf(stderr, "bench_gemm: %s: %s\n", what, detail);
    exit(2);
}

static void ok(h3s_status st, const char *what) {
    if (st != H3S_OK) die(what, h3s_last_error());
}

static void cuok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

static void ltok(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        char buf[64];
        snprintf(buf, sizeof buf, "cublasLt status %d", (int)s);
        die(what, buf);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------------- cuBLASLt plans (column-major) */
typedef struct lt_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lt_plan;

static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t WS_BYTES = 64u << 20;

/* C[m, n] (column-major, ld m) = op(A) op(B); A is (ta ? k x m : m x k) with ld lda, likewise B. */
static lt_plan lt_make(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                       cudaDataType_t ctype) {
    lt_plan p;
    memset(&p, 0, sizeof p);
    ltok(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ltok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa), "transa");
    ltok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob), "transb");
    ltok(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda), "layout a");
    ltok(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb), "layout b");
    ltok(cublasLtMatrixLayoutCreate(&p.c, ctype, m, n, m), "layout c");
    cublasLtMatmulPreference_t pref;
    ltok(cublasLtMatmulPreferenceCreate(&pref), "preference");
    ltok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS_BYTES,
                                              sizeof WS_BYTES),
         "workspace preference");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    ltok(cublasLtMatmulAlgoGetHeuristic(g_lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found), "heuristic");
    if (found < 1) die("heuristic", "no algorithm");
    p.algo = res.algo;
    p.ws = res.workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
    return p;
}

static void lt_run(const lt_plan *p, const void *A, const void *B, void *C, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    ltok(cublasLtMatmul(g_lt, p->op, &one, A, p->a, B, p->b, &zero, C, p->c, C, p->c, &p->algo, g_ws, WS_BYTES, s),
         "matmul");
}

static void lt_free(lt_plan *p) {
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
}

/* ---------------------------------------------------------------- timing */
enum { IMPL_STRICT = 0, IMPL_CUBLAS = 1, IMPL_PREV = 2, IMPL_ROUND = 3, IMPL_COPY = 4 };
/* IMPL_COPY's bytes: a device-to-device copy of the first COPY_BYTES of the weight buffer into dw's */
#define COPY_BYTES ((size_t)256 << 20)
enum { PH_FWD = 0, PH_DGRAD = 1, PH_WGRAD = 2 };
static const char *PHASE[3] = {"forward", "dgrad", "wgrad"};
static int g_dw_bf16 = 0; /* --dw-bf16 */
static int g_chain = 1;   /* --chain N: products per timed sample */
static int g_gate = 0;    /* --gate: every sample held until it is issued (hold_fn) */

typedef struct bufs {
    void *x, *w, *dyb, *y, *dx, *dw;
    float *dy;
} bufs;

static void run_impl(int impl, int phase, int64_t M, int64_t N, int64_t K, const bufs *b, const lt_plan *lp,
                     cudaStream_t s) {
    const char *op = "bench_gemm";
    if (impl == IMPL_CUBLAS) {
        /* row-major Y = X W^T is column-major Y^T[N, M] = W^T(op T of the K x N col-major W) X^T */
        if (phase == PH_FWD) lt_run(lp, b->w, b->x, b->y, s);
        if (phase == PH_DGRAD) lt_run(lp, b->w, b->dyb, b->dx, s);
        if (phase == PH_WGRAD) lt_run(lp, b->x, b->dyb, b->dw, s);
        return;
    }
    if (impl == IMPL_ROUND) {
        ok(h3c_round_bf16(op, M * N, b->dy, b->dyb), "round");
        return;
    }
    if (impl == IMPL_COPY) {
        cuok(cudaMemcpyAsync(b->dw, b->w, COPY_BYTES, cudaMemcpyDeviceToDevice, s), "copy");
        return;
    }
    if (impl == IMPL_STRICT) {
        if (phase == PH_FWD) ok(h3c_gemm_bf16_forward(op, M, N, K, b->x, b->w, NULL, b->y), "strict forward");
        if (phase == PH_DGRAD) ok(h3c_gemm_bf16_dgrad_bf16(op, M, N, K, b->dyb, b->w, b->dx), "strict dgrad");
        if (phase == PH_WGRAD)
            ok(h3c_gemm_bf16_wgrad_bf16(op, M, N, K, b->dyb, b->x, b->dw, g_dw_bf16), "strict wgrad");
        return;
    }
    /* previous strict kernels */
    if (phase == PH_FWD) ok(h3c_gemm_bf16_forward_mma(op, M, N, K, b->x, b->w, NULL, b->y), "previous forward");
    ok(h3s_set_grad_operands(H3S_GRAD_OPERANDS_SPLIT), "mode");
    if (phase == PH_DGRAD)
        ok(h3c_gemm_bf16_backward(op, M, N, K, b->dy, NULL, b->w, NULL, b->dx, NULL, 0), "previous dgrad");
    if (phase == PH_WGRAD)
        ok(h3c_gemm_bf16_backward(op, M, N, K, b->dy, NULL, NULL, b->x, NULL, b->dw, 0), "previous wgrad");
    ok(h3s_set_grad_operands(H3S_GRAD_OPERANDS_BF16), "mode");
}

static double host_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The hold: a host function on the stream before a sample's start event, spinning until the sample's work is issued
 * (g_hold_release), so that the device meets the start event with the whole sample queued behind it. A hold that ends
 * by its timeout (2 s: the product waited for the device, which the hold kept idle) marks the run invalid. */
static atomic_int g_hold_release, g_hold_timed_out;
static void CUDART_CB hold_fn(void *arg) {
    (void)arg;
    const double t0 = host_now();
    while (!atomic_load(&g_hold_release))
        if (host_now() - t0 > 2.0) {
            atomic_store(&g_hold_timed_out, 1);
            return;
        }
}

/* The device time of one product (ms, the median of reps samples) and, in *host_us when not NULL, the host's time to
 * issue it (us, the median over the same samples: from before the first call of a sample to after its last, per
 * product; in a lone call the device waits for that work, since the start event has already run).  held: each sample
 * behind the hold, which leaves the host's work out of the device's time. */
static float time_impl_host(int impl, int phase, int64_t M, int64_t N, int64_t K, const bufs *b, const lt_plan *lp,
                            cudaStream_t s, int warmup, int reps, int held, float *host_us) {
    cudaEvent_t e0, e1;
    cuok(cudaEventCreate(&e0), "event");
    cuok(cudaEventCreate(&e1), "event");
    float t[MAX_REPS], h[MAX_REPS];
    for (int i = 0; i < warmup; i++)
        run_impl(impl, phase, M, N, K, b, lp, s);
    for (int i = 0; i < reps; i++) {
        if (held) {
            atomic_store(&g_hold_release, 0);
            cuok(cudaLaunchHostFunc(s, hold_fn, NULL), "hold");
        }
        cuok(cudaEventRecord(e0, s), "record");
        const double h0 = host_now();
        for (int j = 0; j < g_chain; j++)
            run_impl(impl, phase, M, N, K, b, lp, s);
        h[i] = (float)((host_now() - h0) * 1e6 / g_chain);
        cuok(cudaEventRecord(e1, s), "record");
        atomic_store(&g_hold_release, 1);
        cuok(cudaEventSynchronize(e1), "sync");
        if (atomic_load(&g_hold_timed_out))
            die("hold", "a product waited for the device while its sample was held: the time is not the device's");
        cuok(cudaEventElapsedTime(&t[i], e0, e1), "elapsed");
        t[i] /= (float)g_chain;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (host_us) *host_us = median(h, reps);
    return median(t, reps);
}

static float time_impl(int impl, int phase, int64_t M, int64_t N, int64_t K, const bufs *b, const lt_plan *lp,
                       cudaStream_t s, int warmup, int reps) {
    return time_impl_host(impl, phase, M, N, K, b, lp, s, warmup, reps, g_gate, NULL);
}

/* Both sides of a row: two halves in the order strict, cuBLASLt, cuBLASLt, strict, so that neither always runs first;
 * a side's device time (t[0] strict, t[1] cuBLASLt) and host time (h) the means of its two medians */
static void time_sides(int phase, int64_t M, int64_t N, int64_t K, const bufs *b, const lt_plan *lp, cudaStream_t s,
                       int warmup, int reps, int held, float t[2], float h[2]) {
    t[0] = t[1] = h[0] = h[1] = 0;
    for (int half = 0; half < 2; half++)
        for (int k = 0; k < 2; k++) {
            const int side = half ^ k; /* 0 strict, 1 cuBLASLt */
            float hu = 0;
            t[side] +=
                time_impl_host(side ? IMPL_CUBLAS : IMPL_STRICT, phase, M, N, K, b, lp, s, warmup, reps, held, &hu) / 2;
            h[side] += hu / 2;
        }
}

/* bytes moved in ms milliseconds, as a fraction of the copy bandwidth (TB/s), into out (32 chars, 3 decimals) */
static void stream_fraction(char out[32], double bytes, float ms, double copy_tbps) {
    snprintf(out, 32, "%.3f", bytes / ((double)ms * 1e-3) * 1e-12 / copy_tbps);
}

static int64_t read_invariance(const char *path) {
    if (!path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) die("--invariance", path);
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *k = strstr(buf, "\"row_invariance_differing\":");
    if (!k) die("--invariance", "no row_invariance_differing in the file");
    return strtoll(k + strlen("\"row_invariance_differing\":"), NULL, 10);
}

int main(int argc, char **argv) {
    int reps = 10, warmup = 3, quick = 0;
    const char *json = NULL, *inv_path = NULL;
    int64_t only_k = 0, only_n = 0, only_m = 0; /* --only K N M: one shape and M (profiling) */
    int force_config = -1;                      /* --config C: forward and dgrad in configuration C */
    int raster[3] = {16, 0, 0};                 /* --raster GROUP HINT_A HINT_B: h3c_gemm_raster's settings */
    int wgrad_fold = 0;                         /* --wgrad-fold */
    int wgrad_config = -1;                      /* --wgrad-config C */
    int only_phase = -1;                        /* --phase P */
    int map_cache = 1;                          /* --map-cache 0|1: h3c_gemm_map_cache */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chain") && i + 1 < argc)
            g_chain = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gate"))
            g_gate = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 3 < argc) {
            only_k = atoll(argv[++i]);
            only_n = atoll(argv[++i]);
            only_m = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--invariance") && i + 1 < argc)
            inv_path = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            char *end = NULL;
            force_config = (int)strtol(argv[++i], &end, 10);
            if (!end || *end || force_config < 0 || force_config >= h3c_gemm_config_count()) {
                fprintf(stderr, "bench_gemm: --config takes 0 to %d\n", h3c_gemm_config_count() - 1);
                return 2;
            }
        } else if (!strcmp(argv[i], "--raster") && i + 3 < argc) {
            char *e1 = NULL, *e2 = NULL, *e3 = NULL;
            raster[0] = (int)strtol(argv[++i], &e1, 10);
            raster[1] = (int)strtol(argv[++i], &e2, 10);
            raster[2] = (int)strtol(argv[++i], &e3, 10);
            if (!e1 || *e1 || !e2 || *e2 || !e3 || *e3) {
                fprintf(stderr, "bench_gemm: --raster takes three integers: GROUP HINT_A HINT_B\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--map-cache") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "0") && strcmp(v, "1")) {
                fprintf(stderr, "bench_gemm: --map-cache takes 0 or 1\n");
                return 2;
            }
            map_cache = v[0] == '1';
        } else if (!strcmp(argv[i], "--dw-bf16")) {
            g_dw_bf16 = 1;
        } else if (!strcmp(argv[i], "--wgrad-fold")) {
            wgrad_fold = 1;
        } else if (!strcmp(argv[i], "--phase") && i + 1 < argc) {
            const char *ph = argv[++i];
            only_phase = !strcmp(ph, "forward") ? PH_FWD
                         : !strcmp(ph, "dgrad") ? PH_DGRAD
                         : !strcmp(ph, "wgrad") ? PH_WGRAD
                                                : -2;
            if (only_phase < 0) {
                fprintf(stderr, "bench_gemm: --phase takes forward, dgrad or wgrad\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--wgrad-config") && i + 1 < argc) {
            char *end = NULL;
            wgrad_config = (int)strtol(argv[++i], &end, 10);
            if (!end || *end || wgrad_config < 0 || wgrad_config >= h3c_gemm_wgrad_config_count() ||
                h3c_gemm_wgrad_config_removed(wgrad_config)) {
                fprintf(stderr, "bench_gemm: --wgrad-config takes 0, 1, 5, 7, 8 or 9\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_gemm [--reps N] [--warmup N] [--quick] [--invariance FILE] [--json FILE] "
                            "[--only K N M] [--phase P] [--config C] [--dw-bf16] [--wgrad-fold] [--wgrad-config C] "
                            "[--chain N] [--gate] [--raster GROUP HINT_A HINT_B] [--map-cache 0|1]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || warmup < 0) die("arguments", "--reps in 1..100, --warmup >= 0");
    if (g_chain < 1 || g_chain > 100) die("arguments", "--chain in 1..100");
    if (!h3s_cuda_available()) {
        printf("bench_gemm: skipped: no CUDA GPU: %s\n", h3s_last_error());
        return 0;
    }
    ok(h3c_init("bench_gemm"), "init");
    if (force_config >= 0) {
        ok(h3c_gemm_force_config(force_config), "force_config");
        printf("bench_gemm: forward and dgrad forced to configuration %d\n", force_config);
    }
    if (wgrad_fold || wgrad_config >= 0) {
        const int c = wgrad_config >= 0 ? wgrad_config : 0;
        ok(h3c_gemm_force_wgrad(c), "force_wgrad");
        printf("bench_gemm: wgrad forced to configuration %d\n", c);
    }
    if (raster[0] != 16 || raster[1] || raster[2]) {
        ok(h3c_gemm_raster(raster[0], raster[1], raster[2]), "raster");
        printf("bench_gemm: strict's raster group %d, L2 hints A %d, B %d (0 none, 1 evict-first, 2 evict-last)\n",
               raster[0], raster[1], raster[2]);
    }
    if (g_gate) printf("bench_gemm: each sample held until the host has issued it (--gate)\n");
    if (!map_cache) {
        h3c_gemm_map_cache(0);
        printf("bench_gemm: strict encodes every tensor map (the map cache off)\n");
    }
    const int64_t invariance = read_invariance(inv_path);
    char devname[512] = "";
    ok(h3s_cuda_describe(devname, sizeof devname), "describe");
    cudaStream_t s = (cudaStream_t)h3c_stream();
    ltok(cublasLtCreate(&g_lt), "cublasLtCreate");
    cuok(cudaMalloc(&g_ws, WS_BYTES), "workspace");

    const int64_t shapes[5][2] = {{5376, 7168}, {7168, 5376}, {5376, 28672}, {14336, 5376}, {2688, 32256}};
    const int64_t Ms_all[7] = {12, 64, 925, 1133, 4253, 8349, 33396};
    const int64_t Ms_quick[3] = {12, 925, 8349};
    const int64_t *Ms = quick ? Ms_quick : Ms_all;
    int nM = quick ? 3 : 7;
    if (only_m > 0) { /* any M, alone */
        Ms = &only_m;
        nM = 1;
    }
    if (only_m > (quick ? 8349 : 33396)) die("--only", "M at most 33396 (8349 with --quick)");
    const int64_t MMAX = quick ? 8349 : 33396;
    int64_t maxK = 14336, maxN = 32256;
    bufs b;
    cuok(cudaMalloc(&b.x, (size_t)MMAX * maxK * 2), "x");
    cuok(cudaMalloc(&b.w, (size_t)maxN * 5376 * 2 > (size_t)5376 * 14336 * 2 ? (size_t)maxN * 5376 * 2
                                                                             : (size_t)5376 * 14336 * 2),
         "w");
    cuok(cudaMalloc((void **)&b.dy, (size_t)MMAX * maxN * 4), "dy");
    cuok(cudaMalloc(&b.dyb, (size_t)MMAX * maxN * 2), "dyb");
    cuok(cudaMalloc(&b.y, (size_t)MMAX * maxN * 2), "y");
    cuok(cudaMalloc(&b.dx, (size_t)MMAX * maxK * 4), "dx");
    cuok(cudaMalloc(&b.dw, (size_t)maxN * maxK * 4), "dw");
    ok(h3c_fill_random("bench", MMAX * maxK, 1, 1.0f, b.x, H3S_BF16), "fill x");
    ok(h3c_fill_random("bench", maxN * 5376 > 5376 * 14336 ? maxN * 5376 : 5376 * 14336, 2, 0.02f, b.w, H3S_BF16),
       "fill w");
    ok(h3c_fill_random("bench", MMAX * maxN, 3, 1.0f, b.dy, H3S_F32), "fill dy");
    ok(h3c_round_bf16("bench", MMAX * maxN, b.dy, b.dyb), "round dy");
    cuok(cudaStreamSynchronize(s), "fill");

    /* Copy bandwidth, the yardstick of the memory-bound rows: a device-to-device copy of 256 MiB of the weight
     * buffer, counted as bytes read plus bytes written (as CUDA's bandwidth test counts it), timed as the products are
     * (time_impl: the warm-ups, then the median of --reps samples of --chain copies each) */
    const double copy_tbps =
        2.0 * (double)COPY_BYTES / (time_impl(IMPL_COPY, PH_FWD, 0, 0, 0, &b, NULL, s, warmup, reps) * 1e-3) * 1e-12;
    printf("copy bandwidth: %.2f TB/s (device to device, 256 MiB, read + write)\n", copy_tbps);

    FILE *jf = NULL;
    if (json) {
        jf = fopen(json, "w");
        if (!jf) die("--json", json);
        fprintf(jf, "{\n  \"benchmark\": \"bench_gemm\",\n  \"device\": \"%s\",\n", devname);
        fprintf(jf, "  \"source_commit\": \"%s\",\n", H3S_SOURCE_COMMIT);
        char chain_arg[32] = "";
        if (g_chain > 1) snprintf(chain_arg, sizeof chain_arg, " --chain %d", g_chain);
        fprintf(jf, "  \"command\": \"build/bench_gemm --reps %d --warmup %d%s%s%s%s\",\n", reps, warmup,
                quick ? " --quick" : "", chain_arg, g_gate ? " --gate" : "", map_cache ? "" : " --map-cache 0");
        fprintf(jf, "  \"row_invariance_differing\": %lld,\n", (long long)invariance);
        fprintf(jf, "  \"dw_dtype\": \"%s\",\n", g_dw_bf16 ? "bf16" : "f32");
        fprintf(jf, "  \"chain\": %d,\n", g_chain);
        fprintf(jf, "  \"map_cache\": %d,\n", map_cache);
        fprintf(jf, "  \"gate\": %d,\n", g_gate);
        fprintf(jf, "  \"copy_tbps\": %.3f,\n", copy_tbps);
        fprintf(jf, "  \"rows\": [\n");
    }
    printf("%-12s %-8s %6s %10s %10s %8s %8s %7s %10s %10s %7s %7s %7s %7s\n", "shape", "phase", "M", "strict_ms",
           "cublas_ms", "strict_TF", "cublas_TF", "ratio", "prev_ms", "round_ms", "s_strm", "c_strm", "s_dev", "c_dev");
    int first_row = 1;
    for (int si = 0; si < 5; si++) {
        const int64_t K = shapes[si][0], N = shapes[si][1];
        if (only_k && (K != only_k || N != only_n)) continue;
        for (int mi = 0; mi < nM; mi++) {
            const int64_t M = Ms[mi];
            if (only_m && M != only_m) continue;
            for (int ph = 0; ph < 3; ph++) {
                if (only_phase >= 0 && ph != only_phase) continue;
                lt_plan lp;
                if (ph == PH_FWD) lp = lt_make(1, 0, N, M, K, K, K, CUDA_R_16BF);
                if (ph == PH_DGRAD) lp = lt_make(0, 0, K, M, N, K, N, CUDA_R_32F);
                if (ph == PH_WGRAD) lp = lt_make(0, 1, K, N, M, K, N, g_dw_bf16 ? CUDA_R_16BF : CUDA_R_32F);
                /* A settling pass of both, not counted: the previous row's side columns (the previous strict kernel,
                 * several milliseconds at M <= 1133) leave the clocks low for a while, and whatever this row measured
                 * first paid for it (at c389c4a, the 7168 -> 5376 dgrad at M = 925 read 0.120-0.143 ms in the full
                 * table against 0.113-0.116 ms in processes of its row alone, cuBLASLt 0.111-0.122 against
                 * 0.106-0.113; docs/evidence/gpu/development/config_spread/). */
                (void)time_impl(IMPL_STRICT, ph, M, N, K, &b, &lp, s, warmup, reps);
                (void)time_impl(IMPL_CUBLAS, ph, M, N, K, &b, &lp, s, warmup, reps);
                float t[2], h[2], td[2] = {-1, -1}, hd[2];
                time_sides(ph, M, N, K, &b, &lp, s, warmup, reps, g_gate, t, h);
                /* at M <= 64, where the host's work is a visible part of a lone call, the held times too */
                if (M <= 64) {
                    if (g_gate)
                        td[0] = t[0], td[1] = t[1];
                    else
                        time_sides(ph, M, N, K, &b, &lp, s, warmup, reps, 1, td, hd);
                }
                const float ts = t[0], tc = t[1], hs = h[0], hc = h[1];
                float tp = -1, tr = -1;
                if (M <= 1133 && !only_m) tp = time_impl(IMPL_PREV, ph, M, N, K, &b, &lp, s, 1, 3);
                if (ph != PH_FWD) tr = time_impl(IMPL_ROUND, ph, M, N, K, &b, &lp, s, 1, reps);
                lt_free(&lp);
                const double flop = 2.0 * (double)M * (double)N * (double)K;
                const double stf = flop / (ts * 1e-3) * 1e-12, ctf = flop / (tc * 1e-3) * 1e-12;
                /* At M <= 64 a GEMM streams its weight (forward, dgrad: N x K BF16 read) or its weight gradient
                 * (wgrad: N x K written, F32 or BF16): those bytes per second against the copy bandwidth */
                const int small = M <= 64;
                char sfrac[32] = "null", cfrac[32] = "null", sdev[32] = "null", cdev[32] = "null";
                char sdms[32] = "null", cdms[32] = "null", copy_row[32] = "null";
                if (small) {
                    const float tcopy = time_impl(IMPL_COPY, PH_FWD, 0, 0, 0, &b, NULL, s, warmup, reps);
                    snprintf(copy_row, sizeof copy_row, "%.3f", 2.0 * (double)COPY_BYTES / (tcopy * 1e-3) * 1e-12);
                    const double wb = (double)N * (double)K * (ph == PH_WGRAD && !g_dw_bf16 ? 4.0 : 2.0);
                    stream_fraction(sfrac, wb, ts, copy_tbps);
                    stream_fraction(cfrac, wb, tc, copy_tbps);
                    stream_fraction(sdev, wb, td[0], copy_tbps);
                    stream_fraction(cdev, wb, td[1], copy_tbps);
                    snprintf(sdms, sizeof sdms, "%.5f", td[0]);
                    snprintf(cdms, sizeof cdms, "%.5f", td[1]);
                }
                printf("%5lldx%-6lld %-8s %6lld %10.4f %10.4f %8.1f %8.1f %7.3f %10.4f %10.4f %7s %7s %7s %7s\n",
                       (long long)K, (long long)N, PHASE[ph], (long long)M, ts, tc, stf, ctf, ts / tc, tp, tr,
                       small ? sfrac : "-", small ? cfrac : "-", small ? sdev : "-", small ? cdev : "-");
                fflush(stdout);
                if (jf) {
                    char prev[32] = "null", rnd[32] = "null";
                    if (tp >= 0) snprintf(prev, sizeof prev, "%.5f", tp);
                    if (tr >= 0) snprintf(rnd, sizeof rnd, "%.5f", tr);
                    fprintf(
                        jf,
                        "%s    {\"shape\": \"%lldx%lld\", \"phase\": \"%s\", \"M\": %lld, \"strict_ms\": %.5f, "
                        "\"cublas_ms\": %.5f, \"strict_tflops\": %.1f, \"cublas_tflops\": %.1f, \"ratio\": %.4f, "
                        "\"previous_strict_ms\": %s, \"dy_round_ms\": %s, \"strict_stream_fraction\": %s, "
                        "\"cublas_stream_fraction\": %s, \"strict_host_us\": %.2f, \"cublas_host_us\": %.2f, "
                        "\"strict_device_ms\": %s, \"cublas_device_ms\": %s, \"strict_device_stream_fraction\": %s, "
                        "\"cublas_device_stream_fraction\": %s, \"copy_tbps_row\": %s}",
                        first_row ? "" : ",\n", (long long)K, (long long)N, PHASE[ph], (long long)M, ts, tc, stf, ctf,
                        ts / tc, prev, rnd, sfrac, cfrac, hs, hc, sdms, cdms, sdev, cdev, copy_row);
                    first_row = 0;
                }
            }
        }
    }
    if (jf) {
        fprintf(jf, "\n  ]\n}\n");
        fclose(jf);
    }
    cudaFree(b.x), cudaFree(b.w), cudaFree(b.dy), cudaFree(b.dyb), cudaFree(b.y), cudaFree(b.dx), cudaFree(b.dw);
    cudaFree(g_ws);
    cublasLtDestroy(g_lt);
    return 0;
}
#else
int main(void) {
    printf("bench_gemm: skipped: built without the CUDA backend or cuBLASLt\n");
    return 0;
}
#endif

/* Benchmark (not a test): strict linear vs OpenBLAS sgemm, side by side, same shapes, same
 * thread count, in one run.
 *
 *   build-linear/bench_linear --threads 2 [--reps 7] [--json FILE] [--impl auto|scalar|avx2|avx512]
 *
 * Rows: the strict F32 and BF16 forward against cblas_sgemm computing y = x w^T (row-major,
 * no bias); the strict F32 backward (dx + dw + db) against the two sgemm calls that compute
 * dx = dy w and dw = dy^T x.  Each figure is the median of --reps timed runs after two
 * warm-up runs; GFLOP/s counts 2*M*N*K per GEMM.  Without BLAS (H3S_HAVE_CBLAS undefined) only
 * the strict figures are printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/rng.h"
#include "h3s.h"
#include "ops/linear_internal.h"
#include "ops/ops.h"

#ifdef H3S_HAVE_CBLAS
#include <cblas.h>
/* Present in OpenBLAS, absent in other BLAS: looked up weakly. */
#pragma weak openblas_set_num_threads
#pragma weak openblas_get_corename
#endif

typedef struct shape {
    const char *name;
    int64_t M, K, N;
} shape;

static const shape shapes[] = {
    {"square 1024", 1024, 1024, 1024},
    {"H3-like M=925 K=384 N=1536", 925, 384, 1536},
    {"H3 q_proj slice M=512 K=5376 N=1024", 512, 5376, 1024},
    {"H3 ffn_down slice M=256 K=14336 N=512", 256, 14336, 512},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static h3s_tensor make(h3s_dtype dt, int64_t a, int64_t b, uint64_t seed) {
    h3s_tensor t;
    int64_t s[2] = {a, b};
    if (h3s_tensor_alloc(&t, dt, b < 0 ? 1 : 2, s) != H3S_OK) {
        fprintf(stderr, "bench_linear: %s\n", h3s_last_error());
        exit(2);
    }
    int64_t n = h3s_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        float v = h3s_rng_normal(seed, 5, (uint64_t)i) * 0.5f;
        if (dt == H3S_BF16)
            ((uint16_t *)t.data)[i] = h3s_bf16_round(v);
        else
            ((float *)t.data)[i] = v;
    }
    return t;
}

typedef enum { RUN_F32, RUN_BF16, RUN_BWD_F32, RUN_SGEMM, RUN_SGEMM_BWD } run_kind;

typedef struct bench_ctx {
    int64_t M, K, N;
    h3s_tensor x32, w32, b32, y32, xb, wb, bb, yb, dy, dx, dw, db;
} bench_ctx;

static void run_once(bench_ctx *c, run_kind kind) {
    h3s_status s = H3S_OK;
    switch (kind) {
    case RUN_F32: s = h3s_linear_forward(&c->x32, &c->w32, &c->b32, &c->y32); break;
    case RUN_BF16: s = h3s_linear_forward(&c->xb, &c->wb, &c->bb, &c->yb); break;
    case RUN_BWD_F32: s = h3s_linear_backward(&c->x32, &c->w32, &c->dy, &c->dx, &c->dw, &c->db); break;
#ifdef H3S_HAVE_CBLAS
    case RUN_SGEMM:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->M, (int)c->N, (int)c->K, 1.0f, c->x32.data,
                    (int)c->K, c->w32.data, (int)c->K, 0.0f, c->y32.data, (int)c->N);
        break;
    case RUN_SGEMM_BWD:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->M, (int)c->K, (int)c->N, 1.0f, c->dy.data,
                    (int)c->N, c->w32.data, (int)c->K, 0.0f, c->dx.data, (int)c->K);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c->N, (int)c->K, (int)c->M, 1.0f, c->dy.data,
                    (int)c->N, c->x32.data, (int)c->K, 0.0f, c->dw.data, (int)c->K);
        break;
#else
    case RUN_SGEMM:
    case RUN_SGEMM_BWD: break;
#endif
    }
    if (s != H3S_OK) {
        fprintf(stderr, "bench_linear: %s\n", h3s_last_error());
        exit(2);
    }
}

/* Median seconds of `reps` runs after two warm-ups. */
static double time_median(bench_ctx *c, run_kind kind, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) exit(2);
    run_once(c, kind);
    run_once(c, kind);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        run_once(c, kind);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    return med;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_linear [--threads N] [--reps R] [--json FILE] [--impl auto|scalar|avx2|avx512]\n");
}

int main(int argc, char **argv) {
    int threads = 2, reps = 7;
    const char *json_path = NULL;
    h3s_linear_impl impl = H3S_LINEAR_AUTO;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(argv[i], "--impl") && i + 1 < argc) {
            const char *v = argv[++i];
            impl = !strcmp(v, "scalar")   ? H3S_LINEAR_SCALAR
                   : !strcmp(v, "avx2")   ? H3S_LINEAR_AVX2
                   : !strcmp(v, "avx512") ? H3S_LINEAR_AVX512
                                          : H3S_LINEAR_AUTO;
        } else {
            usage();
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        usage();
        return 2;
    }
    if (h3s_linear_set_impl(impl) != H3S_OK) {
        fprintf(stderr, "bench_linear: %s\n", h3s_last_error());
        return 2;
    }
    h3s_set_num_threads(threads);
    const char *blas = "none (built without BLAS)";
#ifdef H3S_HAVE_CBLAS
    blas = "cblas (unknown vendor)";
    if (openblas_set_num_threads) openblas_set_num_threads(threads);
    if (openblas_get_corename) blas = openblas_get_corename();
#endif
    printf("strict linear vs BLAS sgemm: %d thread(s), median of %d runs, kernel %s, BLAS core %s\n", threads, reps,
           h3s_linear_impl_name(h3s_linear_get_impl()), blas);
    printf("%-40s %-14s %10s %10s %8s\n", "shape (M K N)", "variant", "strict", "sgemm", "sgemm/");
    printf("%-40s %-14s %10s %10s %8s\n", "", "", "GFLOP/s", "GFLOP/s", "strict");

    FILE *jf = NULL;
    if (json_path) {
        jf = fopen(json_path, "w");
        if (!jf) {
            fprintf(stderr, "bench_linear: cannot write %s\n", json_path);
            return 2;
        }
        fprintf(jf, "{\n  \"benchmark\": \"linear\",\n  \"threads\": %d,\n  \"reps\": %d,\n", threads, reps);
        fprintf(jf, "  \"kernel\": \"%s\",\n  \"blas\": \"%s\",\n  \"results\": [",
                h3s_linear_impl_name(h3s_linear_get_impl()), blas);
    }
    int first_json = 1;
    for (int si = 0; si < NSHAPES; si++) {
        const shape *sh = &shapes[si];
        bench_ctx c;
        c.M = sh->M, c.K = sh->K, c.N = sh->N;
        c.x32 = make(H3S_F32, sh->M, sh->K, 1), c.w32 = make(H3S_F32, sh->N, sh->K, 2),
        c.b32 = make(H3S_F32, sh->N, -1, 3);
        c.y32 = make(H3S_F32, sh->M, sh->N, 4);
        c.xb = make(H3S_BF16, sh->M, sh->K, 1), c.wb = make(H3S_BF16, sh->N, sh->K, 2),
        c.bb = make(H3S_BF16, sh->N, -1, 3);
        c.yb = make(H3S_BF16, sh->M, sh->N, 4);
        c.dy = make(H3S_F32, sh->M, sh->N, 5), c.dx = make(H3S_F32, sh->M, sh->K, 6);
        c.dw = make(H3S_F32, sh->N, sh->K, 7), c.db = make(H3S_F32, sh->N, -1, 8);
        const double flop = 2.0 * (double)sh->M * (double)sh->N * (double)sh->K;
        double t_sg = 0, t_sgb = 0;
#ifdef H3S_HAVE_CBLAS
        t_sg = time_median(&c, RUN_SGEMM, reps);
        t_sgb = time_median(&c, RUN_SGEMM_BWD, reps);
#endif
        struct {
            const char *variant;
            run_kind kind;
            double flop, base;
        } rows[3] = {{"forward F32", RUN_F32, flop, t_sg},
                     {"forward BF16", RUN_BF16, flop, t_sg},
                     {"backward F32", RUN_BWD_F32, 2 * flop, t_sgb}};
        char label[64];
        snprintf(label, sizeof label, "%lld %lld %lld", (long long)sh->M, (long long)sh->K, (long long)sh->N);
        for (int r = 0; r < 3; r++) {
            double t = time_median(&c, rows[r].kind, reps);
            double gs = rows[r].flop / t * 1e-9, gb = rows[r].base > 0 ? rows[r].flop / rows[r].base * 1e-9 : 0;
            if (gb > 0)
                printf("%-40s %-14s %10.1f %10.1f %8.2f\n", r ? "" : sh->name, rows[r].variant, gs, gb,
                       gs > 0 ? gb / gs : 0);
            else
                printf("%-40s %-14s %10.1f %10s %8s\n", r ? "" : sh->name, rows[r].variant, gs, "-", "-");
            if (r == 0) printf("%-40s\n", label);
            if (jf) {
                fprintf(jf,
                        "%s\n    {\"shape\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"variant\": \"%s\", "
                        "\"strict_seconds\": %.6e, \"strict_gflops\": %.3f, \"sgemm_seconds\": %.6e, "
                        "\"sgemm_gflops\": %.3f, \"sgemm_over_strict\": %.4f}",
                        first_json ? "" : ",", sh->name, (long long)sh->M, (long long)sh->K, (long long)sh->N,
                        rows[r].variant, t, gs, rows[r].base, gb, gb > 0 ? gb / gs : 0.0);
                first_json = 0;
            }
        }
        h3s_tensor *all[] = {&c.x32, &c.w32, &c.b32, &c.y32, &c.xb, &c.wb, &c.bb, &c.yb, &c.dy, &c.dx, &c.dw, &c.db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            h3s_tensor_free(all[i]);
    }
    if (jf) {
        fprintf(jf, "\n  ]\n}\n");
        fclose(jf);
    }
    return 0;
}

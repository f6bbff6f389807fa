/* Benchmark (not a test): strict linear vs OpenBLAS sgemm, side by side, same shapes, same
 * thread count, in one run.
 *
 *   build-linear/bench_linear --threads 2 [--reps 7] [--json FILE] [--impl auto|scalar|avx2|avx512]
 *
 * Rows: the strict F32 and BF16 forward against cblas_sgemm computing y = x w^T (row-major,
 * no bias); the strict F32 backward (dx + dw + db) against the two sgemm calls that compute
 * dx = dy w and dw = dy^T x.  Each figure is the median of --reps timed runs after two
 * warm-up runs, strict and sgemm timed alternately; GFLOP/s counts 2*M*N*K per GEMM; the last
 * column is strict time / sgemm time (the goal: at most 2).  Without BLAS (H3S_HAVE_CBLAS undefined) only
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
    {"square", 1024, 1024, 1024},
    {"H3-like", 925, 384, 1536},
    {"H3 q_proj slice", 512, 5376, 1024},
    {"H3 ffn_down slice", 256, 14336, 512},
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

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median seconds of `reps` runs of `kind` and of `base` (if base_on), after two warm-ups each.
 * The two are timed alternately, so that a slow spell of a shared machine hits both alike. */
static void time_pair(bench_ctx *c, run_kind kind, run_kind base, int base_on, int reps, double *t_kind,
                      double *t_base) {
    double *a = malloc(sizeof(double) * (size_t)reps), *b = malloc(sizeof(double) * (size_t)reps);
    if (!a || !b) exit(2);
    for (int w = 0; w < 2; w++) {
        run_once(c, kind);
        if (base_on) run_once(c, base);
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        run_once(c, kind);
        a[r] = now_s() - t0;
        if (base_on) {
            t0 = now_s();
            run_once(c, base);
            b[r] = now_s() - t0;
        }
    }
    *t_kind = median(a, reps);
    *t_base = base_on ? median(b, reps) : 0;
    free(a);
    free(b);
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
    printf("%-24s %-17s %-13s %10s %10s %9s\n", "shape", "M K N", "variant", "strict", "sgemm", "strict/");
    printf("%-24s %-17s %-13s %10s %10s %9s\n", "", "", "", "GFLOP/s", "GFLOP/s", "sgemm t");
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
#ifdef H3S_HAVE_CBLAS
        const int have_blas = 1;
#else
        const int have_blas = 0;
#endif
        struct {
            const char *variant;
            run_kind kind, base;
            double flop;
        } rows[3] = {{"forward F32", RUN_F32, RUN_SGEMM, flop},
                     {"forward BF16", RUN_BF16, RUN_SGEMM, flop},
                     {"backward F32", RUN_BWD_F32, RUN_SGEMM_BWD, 2 * flop}};
        char dims[48];
        snprintf(dims, sizeof dims, "%lld %lld %lld", (long long)sh->M, (long long)sh->K, (long long)sh->N);
        for (int r = 0; r < 3; r++) {
            double t, tb;
            time_pair(&c, rows[r].kind, rows[r].base, have_blas, reps, &t, &tb);
            double gs = rows[r].flop / t * 1e-9, gb = tb > 0 ? rows[r].flop / tb * 1e-9 : 0;
            if (tb > 0)
                printf("%-24s %-17s %-13s %10.1f %10.1f %9.2f\n", r ? "" : sh->name, r ? "" : dims, rows[r].variant, gs,
                       gb, t / tb);
            else
                printf("%-24s %-17s %-13s %10.1f %10s %9s\n", r ? "" : sh->name, r ? "" : dims, rows[r].variant, gs,
                       "-", "-");
            if (jf) {
                fprintf(jf,
                        "%s\n    {\"shape\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"variant\": \"%s\", "
                        "\"strict_seconds\": %.6e, \"strict_gflops\": %.3f, \"sgemm_seconds\": %.6e, "
                        "\"sgemm_gflops\": %.3f, \"strict_over_sgemm_time\": %.4f}",
                        first_json ? "" : ",", sh->name, (long long)sh->M, (long long)sh->K, (long long)sh->N,
                        rows[r].variant, t, gs, tb, gb, tb > 0 ? t / tb : 0.0);
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

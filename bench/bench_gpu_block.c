/* Benchmark (not a test): one MiniMax-H3 transformer block at release geometry (hidden 5376,
 * 56 x 128 heads, ffn 14336, time_embed_dim 2688, rope_freq_dim 16), S = 925 rows per item, through
 * the strict CUDA operators on device tensors: forward and backward times for B in {1, 4}.  The
 * PyTorch side of the comparison is bench/provider/h3_block_provider.py; bench/provider/run_gpu_bench.sh
 * runs both in one call and writes the ratios.
 *
 *   build/bench_gpu_block [--reps N] [--warmup N] [--profile-reps N] [--small] [--json FILE]
 *
 * The block is tests/gpu/gpu_block.h (the composition test_gpu_block checks for batch invariance
 * and repeat).  All node tensors are allocated before timing; the rotary table (computed once per
 * model call, not per block) is outside the timed region, as in the provider.  Each figure is the
 * median of --reps runs after --warmup runs, host clock (CLOCK_MONOTONIC) around the queued
 * operators and h3s_cuda_sync().  A per-node breakdown follows (a sync after every operator, median
 * of --profile-reps runs; the sync gaps make its sum a little larger than the unbroken time).  Side
 * numbers, for the table next to the provider's: weight gradients after the first and the last run
 * (count of differing elements), and item 0 of B = 4 against B = 1 (block output and dx).
 *
 * Without a usable CUDA device (or in a build without the CUDA backend) it prints one line and
 * exits 0; with --json it also writes {"skipped": reason}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/gpu/gpu_block.h"

#define MAX_REPS 200
#define MAX_LABELS 32

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double s[MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double vmin(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double vmax(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static void die(const char *what) {
    fprintf(stderr, "bench_gpu_block: %s: %s\n", what, h3s_last_error());
    exit(2);
}

static void ok(h3s_status st, const char *what) {
    if (st != H3S_OK) die(what);
}

/* ------------------------------------------------------------------ per-node profile hook */
typedef struct profile {
    int nlabels;
    const char *label[MAX_LABELS];
    double t[MAX_LABELS][MAX_REPS];
    int rep;
    double last;
} profile;

static void profile_after(void *ctx, const char *node) {
    profile *p = ctx;
    ok(h3s_cuda_sync(), "sync (profile)");
    const double t = now_s();
    int i = 0;
    while (i < p->nlabels && strcmp(p->label[i], node) != 0)
        i++;
    if (i == p->nlabels) {
        if (p->nlabels == MAX_LABELS) die("profile: too many nodes");
        p->label[p->nlabels++] = node;
        for (int r = 0; r < MAX_REPS; r++)
            p->t[i][r] = 0.0;
    }
    p->t[i][p->rep] += t - p->last;
    p->last = t;
}

/* ------------------------------------------------------------------ bitwise comparisons */
static h3s_tensor download(const h3s_tensor *dev, int64_t rows) {
    h3s_tensor v = *dev, h;
    if (rows >= 0) v.shape[0] = rows, v.owns_data = 0;
    ok(h3s_tensor_alloc(&h, v.dtype, v.ndim, v.shape), "host allocation");
    ok(h3s_cuda_download(&v, &h), "download");
    return h;
}

/* Elements whose bits differ (both tensors of the same dtype and size). */
static int64_t count_differ(const h3s_tensor *a, const h3s_tensor *b) {
    const size_t es = h3s_dtype_size(a->dtype);
    const int64_t n = h3s_tensor_numel(a);
    int64_t d = 0;
    if (es == 2) {
        const uint16_t *pa = a->data, *pb = b->data;
        for (int64_t i = 0; i < n; i++)
            d += pa[i] != pb[i];
    } else if (es == 4) {
        const uint32_t *pa = a->data, *pb = b->data;
        for (int64_t i = 0; i < n; i++)
            d += pa[i] != pb[i];
    } else {
        const unsigned char *pa = a->data, *pb = b->data;
        for (int64_t i = 0; i < n; i++)
            d += memcmp(pa + (size_t)i * es, pb + (size_t)i * es, es) != 0;
    }
    return d;
}

/* The 12 parameter gradients (the provider's .grad of its 12 parameters). */
static int weight_grads(gblock_run *r, h3s_tensor **out) {
    h3s_tensor *all[] = {r->dw_ada, r->db_ada, r->dnorm1, r->dnorm2, r->dwq,   r->dwk,
                         r->dwv,    r->dwo,    r->dqnw,   r->dknw,   r->dw_up, r->dw_down};
    const int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++)
        out[i] = all[i];
    return n;
}

/* ------------------------------------------------------------------ FLOP counts (useful work) */
static double flops_forward(const gblock_geom *g, int64_t B) {
    const double M = (double)(B * g->S), H = (double)g->H, QW = (double)(g->heads * g->D), FF = (double)g->ffn;
    const double lin = 2.0 * M * (3.0 * QW * H + H * QW + 2.0 * FF * H + H * FF);
    const double att = 4.0 * (double)B * (double)g->S * (double)g->S * QW; /* QK^T and PV */
    const double ada = 2.0 * (double)g->E * 18.0 * H;
    return lin + att + ada;
}

static double flops_backward(const gblock_geom *g, int64_t B) {
    const double M = (double)(B * g->S), H = (double)g->H, QW = (double)(g->heads * g->D), FF = (double)g->ffn;
    const double lin = 4.0 * M * (3.0 * QW * H + H * QW + 2.0 * FF * H + H * FF); /* dx and dw */
    const double att = 10.0 * (double)B * (double)g->S * (double)g->S * QW;       /* 2.5 x forward */
    const double ada = 4.0 * (double)g->E * 18.0 * H;
    return lin + att + ada;
}

typedef struct result {
    int64_t B;
    double fwd[MAX_REPS], bwd[MAX_REPS], both[MAX_REPS];
    profile pf, pb;
    int64_t grad_elems, grad_differ, out_differ;
    int have_batch;
    int64_t item_elems, item_out_differ, item_dx_differ;
} result;

static void json_stats(FILE *f, const char *key, const double *v, int n, double flops) {
    const double med = median(v, n);
    fprintf(f, "      \"%s\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f, \"tflops\": %.1f},\n", key, 1e3 * med,
            1e3 * vmin(v, n), 1e3 * vmax(v, n), flops / med * 1e-12);
}

static void json_profile(FILE *f, const char *key, const profile *p, int n, int last) {
    fprintf(f, "      \"%s\": [", key);
    for (int i = 0; i < p->nlabels; i++)
        fprintf(f, "%s{\"node\": \"%s\", \"ms\": %.4f}", i ? ", " : "", p->label[i], 1e3 * median(p->t[i], n));
    fprintf(f, "]%s\n", last ? "" : ",");
}

int main(int argc, char **argv) {
    int reps = 15, warmup = 3, preps = 5, small = 0;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profile-reps") && i + 1 < argc)
            preps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--small"))
            small = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr,
                    "usage: bench_gpu_block [--reps N] [--warmup N] [--profile-reps N] [--small] [--json FILE]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || warmup < 0 || preps < 1 || preps > MAX_REPS) {
        fprintf(stderr, "bench_gpu_block: --reps and --profile-reps must be in [1, %d], --warmup >= 0\n", MAX_REPS);
        return 2;
    }
    if (!h3s_cuda_available()) {
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", h3s_last_error());
        for (char *c = reason; *c; c++)
            if (*c == '"' || *c == '\\' || *c == '\n') *c = ' ';
        printf("bench_gpu_block: SKIP: no CUDA GPU: %s\n", reason);
        if (json) {
            FILE *f = fopen(json, "w");
            if (f) fprintf(f, "{\"side\": \"strict\", \"skipped\": \"no CUDA GPU: %s\"}\n", reason), fclose(f);
        }
        return 0;
    }
    char desc[512];
    ok(h3s_cuda_describe(desc, sizeof desc), "describe");
    const gblock_geom g = small ? GBLOCK_SMALL : GBLOCK_RELEASE;
    printf("bench_gpu_block: %s\n", desc);
    printf("block: hidden %lld, %lld x %lld heads, ffn %lld, time_embed_dim %lld, rope_freq_dim %lld, S = %lld; "
           "reps %d, warm-up %d\n",
           (long long)g.H, (long long)g.heads, (long long)g.D, (long long)g.ffn, (long long)g.E, (long long)g.F,
           (long long)g.S, reps, warmup);

    gblock_params p;
    ok(gblock_params_init(&g, &p), "parameters");
    const int64_t Bs[2] = {1, 4};
    static result res[2];
    h3s_tensor item_out = {0}, item_dx = {0}; /* B = 1's rows, for the batch comparison */
    for (int bi = 0; bi < 2; bi++) {
        result *R = &res[bi];
        memset(R, 0, sizeof *R);
        R->B = Bs[bi];
        gblock_run r;
        ok(gblock_setup(&g, R->B, &r), "block setup");
        ok(h3s_cuda_sync(), "sync");
        for (int w = 0; w < warmup; w++) {
            ok(gblock_forward(&g, &p, &r), "forward");
            ok(gblock_backward(&g, &p, &r), "backward");
        }
        ok(h3s_cuda_sync(), "sync");
        /* weight gradients and output of the first run, for the repeat count */
        h3s_tensor *wg[16], first[16];
        const int nwg = weight_grads(&r, wg);
        h3s_tensor out_first = {0};
        for (int rep = 0; rep < reps; rep++) {
            ok(h3s_cuda_sync(), "sync");
            const double t0 = now_s();
            ok(gblock_forward(&g, &p, &r), "forward");
            ok(h3s_cuda_sync(), "forward sync");
            const double t1 = now_s();
            ok(gblock_backward(&g, &p, &r), "backward");
            ok(h3s_cuda_sync(), "backward sync");
            const double t2 = now_s();
            R->fwd[rep] = t1 - t0, R->bwd[rep] = t2 - t1, R->both[rep] = t2 - t0;
            if (rep == 0) {
                for (int i = 0; i < nwg; i++)
                    first[i] = download(wg[i], -1);
                out_first = download(r.x3, -1);
            }
        }
        for (int i = 0; i < nwg; i++) {
            h3s_tensor last = download(wg[i], -1);
            R->grad_elems += h3s_tensor_numel(&last);
            R->grad_differ += count_differ(&first[i], &last);
            h3s_tensor_free(&last), h3s_tensor_free(&first[i]);
        }
        h3s_tensor out_last = download(r.x3, -1);
        R->out_differ = count_differ(&out_first, &out_last);
        h3s_tensor_free(&out_first), h3s_tensor_free(&out_last);
        /* item 0 against B = 1 */
        h3s_tensor o0 = download(r.x3, g.S), d0 = download(r.dx, g.S);
        if (R->B == 1) {
            item_out = o0, item_dx = d0;
        } else {
            R->have_batch = 1;
            R->item_elems = h3s_tensor_numel(&o0);
            R->item_out_differ = count_differ(&item_out, &o0);
            R->item_dx_differ = count_differ(&item_dx, &d0);
            h3s_tensor_free(&o0), h3s_tensor_free(&d0);
        }
        /* per-node breakdown */
        r.after = profile_after;
        for (int rep = 0; rep < preps; rep++) {
            ok(h3s_cuda_sync(), "sync");
            r.ctx = &R->pf, R->pf.rep = rep, R->pf.last = now_s();
            ok(gblock_forward(&g, &p, &r), "forward (profile)");
            r.ctx = &R->pb, R->pb.rep = rep, R->pb.last = now_s();
            ok(gblock_backward(&g, &p, &r), "backward (profile)");
        }
        gblock_free(&r);
        printf("  B = %lld: forward %.2f ms, backward %.2f ms, forward+backward %.2f ms (median of %d); "
               "weight grads first vs last run: %lld of %lld differ\n",
               (long long)R->B, 1e3 * median(R->fwd, reps), 1e3 * median(R->bwd, reps), 1e3 * median(R->both, reps),
               reps, (long long)R->grad_differ, (long long)R->grad_elems);
    }
    h3s_tensor_free(&item_out), h3s_tensor_free(&item_dx);
    gblock_params_free(&p);

    printf("\n%-4s %12s %12s %14s %10s %10s\n", "B", "forward ms", "backward ms", "fwd+bwd ms", "fwd TF/s", "bwd TF/s");
    for (int bi = 0; bi < 2; bi++) {
        const result *R = &res[bi];
        const double f = median(R->fwd, reps), b = median(R->bwd, reps);
        printf("%-4lld %12.2f %12.2f %14.2f %10.1f %10.1f\n", (long long)R->B, 1e3 * f, 1e3 * b,
               1e3 * median(R->both, reps), flops_forward(&g, R->B) / f * 1e-12, flops_backward(&g, R->B) / b * 1e-12);
    }
    for (int bi = 0; bi < 2; bi++) {
        const result *R = &res[bi];
        printf("\nper node, B = %lld (sync after each, median of %d), forward | backward:\n", (long long)R->B, preps);
        for (int i = 0; i < R->pf.nlabels || i < R->pb.nlabels; i++) {
            if (i < R->pf.nlabels)
                printf("  %-24s %9.3f ms", R->pf.label[i], 1e3 * median(R->pf.t[i], preps));
            else
                printf("  %-24s %9s   ", "", "");
            if (i < R->pb.nlabels) printf("   | %-24s %9.3f ms", R->pb.label[i], 1e3 * median(R->pb.t[i], preps));
            printf("\n");
        }
    }
    if (res[1].have_batch)
        printf("\nbatch invariance: item 0 of B = 4 vs B = 1: output %lld of %lld differ, dx %lld of %lld differ\n",
               (long long)res[1].item_out_differ, (long long)res[1].item_elems, (long long)res[1].item_dx_differ,
               (long long)res[1].item_elems);

    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "bench_gpu_block: cannot write %s\n", json);
            return 2;
        }
        fprintf(f, "{\n  \"side\": \"strict\",\n  \"what\": \"h3strict CUDA operators, one H3 block "
                   "(tests/gpu/gpu_block.h)\",\n");
        fprintf(f, "  \"device\": \"%s\",\n", desc);
        fprintf(f,
                "  \"geometry\": {\"hidden\": %lld, \"heads\": %lld, \"head_dim\": %lld, \"ffn\": %lld, "
                "\"time_embed_dim\": %lld, \"rope_freq_dim\": %lld, \"S\": %lld},\n",
                (long long)g.H, (long long)g.heads, (long long)g.D, (long long)g.ffn, (long long)g.E, (long long)g.F,
                (long long)g.S);
        fprintf(f,
                "  \"timing\": \"host clock around queued operators and h3s_cuda_sync, median of %d after %d "
                "warm-up runs; per-node: sync after every operator, median of %d\",\n",
                reps, warmup, preps);
        fprintf(f, "  \"reps\": %d, \"warmup\": %d, \"profile_reps\": %d,\n  \"batches\": [\n", reps, warmup, preps);
        for (int bi = 0; bi < 2; bi++) {
            const result *R = &res[bi];
            fprintf(f, "    {\n      \"B\": %lld,\n", (long long)R->B);
            json_stats(f, "forward_ms", R->fwd, reps, flops_forward(&g, R->B));
            json_stats(f, "backward_ms", R->bwd, reps, flops_backward(&g, R->B));
            json_stats(f, "fwd_bwd_ms", R->both, reps, flops_forward(&g, R->B) + flops_backward(&g, R->B));
            fprintf(f, "      \"flop_forward\": %.6e, \"flop_backward\": %.6e,\n", flops_forward(&g, R->B),
                    flops_backward(&g, R->B));
            fprintf(f,
                    "      \"repeat\": {\"runs_apart\": %d, \"weight_grad_elements\": %lld, "
                    "\"weight_grad_differ\": %lld, \"output_differ\": %lld},\n",
                    reps - 1, (long long)R->grad_elems, (long long)R->grad_differ, (long long)R->out_differ);
            if (R->have_batch)
                fprintf(f,
                        "      \"batch_invariance\": {\"item0_vs_B1_elements\": %lld, \"output_differ\": %lld, "
                        "\"grad_x_differ\": %lld},\n",
                        (long long)R->item_elems, (long long)R->item_out_differ, (long long)R->item_dx_differ);
            json_profile(f, "nodes_forward", &R->pf, preps, 0);
            json_profile(f, "nodes_backward", &R->pb, preps, 1);
            fprintf(f, "    }%s\n", bi == 0 ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        fclose(f);
        printf("wrote %s\n", json);
    }
    return 0;
}

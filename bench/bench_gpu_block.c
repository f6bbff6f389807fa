/* Benchmark (not a test): one MiniMax-H3 transformer block at release geometry (hidden 5376,
 * 56 x 128 heads, ffn 14336, time_embed_dim 2688, rope_freq_dim 16) through the strict CUDA operators on
 * device tensors: forward and backward times for S in {12, 925, 4253, 8349} rows per item (--seqs) and B in
 * {1, 4}.  The PyTorch side of the comparison is bench/provider/h3_block_provider.py;
 * bench/provider/run_gpu_bench.sh runs both in one call and writes the ratios.
 *
 *   build/bench_gpu_block [--seqs 12,925,4253,8349] [--reps N] [--warmup N] [--profile-reps N] [--small]
 *                         [--weight-grads bf16|f32] [--all-f32-grads] [--json FILE]
 *
 * The seven linear weights' gradients are F32 by default (--weight-grads f32); --weight-grads bf16 has the GEMM round
 * them as it stores them (the dtype of the provider's .grad; test_gpu_block checks they are the F32 gradients rounded).
 * It measured slower on the H200 at commit bdc6d44 (the seven BF16 weight-gradient GEMMs 2458 us against about
 * 1984 us in F32 at S = 925); since fa332ca its epilogue goes through shared memory and it is the faster of the two at
 * M <= 1133 (docs/numerics/linear_cuda.md).
 *
 * df, du, dout_o, dq, dk and dv are written only as the BF16 copies their linears read (gblock_setup_lean), as the
 * model runs without a node hook; --all-f32-grads writes their F32 values too (the node hook's setting, and the only
 * one where a linear reads F32 dy: split gradient operands, shapes the tensor-core kernels do not take).
 *
 * `--seqs 925` is the single-S run of earlier versions.  The block is tests/gpu/gpu_block.h (the library's block,
 * src/model/block.c, which the model runs and test_gpu_block checks for batch invariance and repeat); the parameters
 * are allocated once, the node tensors once per (S, B), all before timing.  The rotary table (computed once per model
 * call, not per block) is outside the timed region, as in the provider.  Each figure is the median of --reps runs after
 * --warmup runs, host clock (CLOCK_MONOTONIC) around the queued operators and h3s_cuda_sync().  A per-node breakdown
 * follows (a sync after every operator, median of --profile-reps runs; the sync gaps make its sum a little larger than
 * the unbroken time).  Side numbers, for the table next to the provider's, at every S: weight gradients after the first
 * and the last run (count of differing elements), and item 0 of B = 4 against B = 1 (block output and dx).  Progress
 * lines ("[strict] S = .., B = ..: phase") go to stdout as the run goes; the JSON is rewritten after every S.
 *
 * Without a usable CUDA device (or in a build without the CUDA backend) it prints one line and
 * exits 0; with --json it also writes {"skipped": reason}.  Bad options exit 2 before any device call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/gpu/gpu_block.h"

#define MAX_REPS 200
#define MAX_LABELS 32
#define MAX_SEQS 8
#define MAX_S 65536
#define DEFAULT_SEQS "12,925,4253,8349"

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
    int64_t S, B;
    double fwd[MAX_REPS], bwd[MAX_REPS], both[MAX_REPS];
    profile pf, pb;
    int64_t grad_elems, grad_differ, out_differ;
    int have_batch;
    int64_t item_elems, item_out_differ, item_dx_differ;
} result;

static result g_res[MAX_SEQS * 2]; /* one per (S, B), in the order measured */

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

typedef struct run_opts {
    int reps, warmup, preps, nseqs;
    int wgrad_bf16; /* --weight-grads bf16 (1) or f32 (0, the default) */
    int all_f32;    /* --all-f32-grads: df, du, dout_o, dq, dk, dv in F32 as well (else only their BF16 copies) */
    int64_t seqs[MAX_SEQS];
    const char *desc;
} run_opts;

/* The whole JSON report for the first `nres` results, written to a temporary file and renamed into place, so that
 * a run stopped part-way (a time limit, an out-of-memory failure at a large S) leaves the results of the S values
 * it finished. */
static int write_json(const char *path, const gblock_geom *g0, const run_opts *o, int nres, int complete) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "bench_gpu_block: cannot write %s\n", tmp);
        return 2;
    }
    fprintf(f, "{\n  \"side\": \"strict\",\n  \"what\": \"h3strict CUDA operators, one H3 block "
               "(tests/gpu/gpu_block.h)\",\n");
    fprintf(f, "  \"device\": \"%s\",\n", o->desc);
    fprintf(f,
            "  \"geometry\": {\"hidden\": %lld, \"heads\": %lld, \"head_dim\": %lld, \"ffn\": %lld, "
            "\"time_embed_dim\": %lld, \"rope_freq_dim\": %lld},\n",
            (long long)g0->H, (long long)g0->heads, (long long)g0->D, (long long)g0->ffn, (long long)g0->E,
            (long long)g0->F);
    fprintf(f, "  \"seqs\": [");
    for (int i = 0; i < o->nseqs; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)o->seqs[i]);
    fprintf(f, "],\n  \"complete\": %s,\n", complete ? "true" : "false");
    fprintf(f,
            "  \"timing\": \"host clock around queued operators and h3s_cuda_sync, median of %d after %d "
            "warm-up runs at every S; per-node: sync after every operator, median of %d\",\n",
            o->reps, o->warmup, o->preps);
    fprintf(f, "  \"weight_grads\": \"%s\",\n", o->wgrad_bf16 ? "bf16" : "f32");
    fprintf(f, "  \"f32_grads\": \"%s\",\n",
            o->all_f32 ? "all" : "lean (df, du, dout_o, dq, dk, dv as BF16 copies only)");
    fprintf(f, "  \"reps\": %d, \"warmup\": %d, \"profile_reps\": %d,\n  \"batches\": [\n", o->reps, o->warmup,
            o->preps);
    for (int ri = 0; ri < nres; ri++) {
        const result *R = &g_res[ri];
        gblock_geom g = *g0;
        g.S = R->S;
        fprintf(f, "    {\n      \"S\": %lld,\n      \"B\": %lld,\n", (long long)R->S, (long long)R->B);
        json_stats(f, "forward_ms", R->fwd, o->reps, flops_forward(&g, R->B));
        json_stats(f, "backward_ms", R->bwd, o->reps, flops_backward(&g, R->B));
        json_stats(f, "fwd_bwd_ms", R->both, o->reps, flops_forward(&g, R->B) + flops_backward(&g, R->B));
        fprintf(f, "      \"flop_forward\": %.6e, \"flop_backward\": %.6e,\n", flops_forward(&g, R->B),
                flops_backward(&g, R->B));
        fprintf(f,
                "      \"repeat\": {\"runs_apart\": %d, \"weight_grad_elements\": %lld, "
                "\"weight_grad_differ\": %lld, \"output_differ\": %lld},\n",
                o->reps - 1, (long long)R->grad_elems, (long long)R->grad_differ, (long long)R->out_differ);
        if (R->have_batch)
            fprintf(f,
                    "      \"batch_invariance\": {\"item0_vs_B1_elements\": %lld, \"output_differ\": %lld, "
                    "\"grad_x_differ\": %lld},\n",
                    (long long)R->item_elems, (long long)R->item_out_differ, (long long)R->item_dx_differ);
        json_profile(f, "nodes_forward", &R->pf, o->preps, 0);
        json_profile(f, "nodes_backward", &R->pb, o->preps, 1);
        fprintf(f, "    }%s\n", ri + 1 < nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "bench_gpu_block: cannot write %s\n", path);
        return 2;
    }
    return 0;
}

/* One (S, B): warm-up, timed runs, the repeat and batch counts, the per-node profile.  *item_out / *item_dx hold
 * B = 1's rows at this S (set when B == 1, compared against when B > 1 and they are set). */
static void measure(const gblock_geom *g, const gblock_params *p, const run_opts *o, result *R, h3s_tensor *item_out,
                    h3s_tensor *item_dx) {
    const int64_t S = g->S;
    gblock_run r;
    printf("[strict] S = %lld, B = %lld: setup\n", (long long)S, (long long)R->B);
    ok(o->all_f32 ? gblock_setup_wgrad(g, R->B, o->wgrad_bf16, &r) : gblock_setup_lean(g, R->B, o->wgrad_bf16, &r),
       "block setup");
    ok(h3s_cuda_sync(), "sync");
    printf("[strict] S = %lld, B = %lld: %d warm-up runs (forward + backward)\n", (long long)S, (long long)R->B,
           o->warmup);
    for (int w = 0; w < o->warmup; w++) {
        ok(gblock_forward(g, p, &r), "forward");
        ok(gblock_backward(g, p, &r), "backward");
    }
    ok(h3s_cuda_sync(), "sync");
    printf("[strict] S = %lld, B = %lld: %d timed runs (forward, backward)\n", (long long)S, (long long)R->B, o->reps);
    /* weight gradients and output of the first run, for the repeat count */
    h3s_tensor *wg[16], first[16];
    const int nwg = weight_grads(&r, wg);
    h3s_tensor out_first = {0};
    for (int rep = 0; rep < o->reps; rep++) {
        ok(h3s_cuda_sync(), "sync");
        const double t0 = now_s();
        ok(gblock_forward(g, p, &r), "forward");
        ok(h3s_cuda_sync(), "forward sync");
        const double t1 = now_s();
        ok(gblock_backward(g, p, &r), "backward");
        ok(h3s_cuda_sync(), "backward sync");
        const double t2 = now_s();
        R->fwd[rep] = t1 - t0, R->bwd[rep] = t2 - t1, R->both[rep] = t2 - t0;
        if (rep == 0) {
            for (int i = 0; i < nwg; i++)
                first[i] = download(wg[i], -1);
            out_first = download(r.x3, -1);
        }
    }
    printf("[strict] S = %lld, B = %lld: repeat and batch counts\n", (long long)S, (long long)R->B);
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
    h3s_tensor o0 = download(r.x3, S), d0 = download(r.dx, S);
    if (R->B == 1) {
        h3s_tensor_free(item_out), h3s_tensor_free(item_dx);
        *item_out = o0, *item_dx = d0;
    } else {
        if (item_out->data) {
            R->have_batch = 1;
            R->item_elems = h3s_tensor_numel(&o0);
            R->item_out_differ = count_differ(item_out, &o0);
            R->item_dx_differ = count_differ(item_dx, &d0);
        }
        h3s_tensor_free(&o0), h3s_tensor_free(&d0);
    }
    /* per-node breakdown */
    printf("[strict] S = %lld, B = %lld: per-node profile (%d runs)\n", (long long)S, (long long)R->B, o->preps);
    r.after = profile_after;
    for (int rep = 0; rep < o->preps; rep++) {
        ok(h3s_cuda_sync(), "sync");
        r.ctx = &R->pf, R->pf.rep = rep, R->pf.last = now_s();
        ok(gblock_forward(g, p, &r), "forward (profile)");
        r.ctx = &R->pb, R->pb.rep = rep, R->pb.last = now_s();
        ok(gblock_backward(g, p, &r), "backward (profile)");
    }
    gblock_free(&r);
    printf("[strict] S = %lld, B = %lld: forward %.2f ms, backward %.2f ms, forward+backward %.2f ms (median of "
           "%d); weight grads first vs last run: %lld of %lld differ",
           (long long)S, (long long)R->B, 1e3 * median(R->fwd, o->reps), 1e3 * median(R->bwd, o->reps),
           1e3 * median(R->both, o->reps), o->reps, (long long)R->grad_differ, (long long)R->grad_elems);
    if (R->have_batch)
        printf("; item 0 vs B = 1: output %lld, dx %lld of %lld differ", (long long)R->item_out_differ,
               (long long)R->item_dx_differ, (long long)R->item_elems);
    printf("\n");
}

static const char USAGE[] =
    "usage: bench_gpu_block [--seqs S1,S2,...] [--reps N] [--warmup N] [--profile-reps N] [--small]\n"
    "                       [--weight-grads bf16|f32] [--all-f32-grads] [--json FILE]\n"
    "  --seqs LIST       rows per item, comma-separated, each in [1, %d], at most %d values\n"
    "                    (default %s; with --small, the small block's %lld)\n"
    "  --reps N          timed runs per (S, B), median reported, in [1, %d] (default 15)\n"
    "  --warmup N        untimed runs before them (default 3)\n"
    "  --profile-reps N  runs of the per-node breakdown, in [1, %d] (default 5)\n"
    "  --small           scaled-down block (hidden 64), a quick check\n"
    "  --weight-grads T  the seven linear weights' gradients in f32 (default) or bf16 (the F32 gradient rounded once\n"
    "                    as the GEMM stores it, the dtype of the provider's .grad)\n"
    "  --all-f32-grads   write df, du, dout_o, dq, dk, dv in F32 too (default: only the BF16 copies their linears "
    "read,\n"
    "                    as the model runs without a node hook)\n"
    "  --json FILE       write the results (rewritten after every S, so a stopped run keeps the finished ones)\n";

static void usage(FILE *to) {
    fprintf(to, USAGE, MAX_S, MAX_SEQS, DEFAULT_SEQS, (long long)GBLOCK_SMALL.S, MAX_REPS, MAX_REPS);
}

/* "12,925" -> seqs; 0 on success, else -1 with a message on stderr. */
static int parse_seqs(const char *text, int64_t *seqs, int *n) {
    *n = 0;
    const char *c = text;
    for (;;) {
        char *end = NULL;
        if (*c < '0' || *c > '9') break;
        const long v = strtol(c, &end, 10);
        if (end == c || v < 1 || v > MAX_S || *n == MAX_SEQS) break;
        seqs[(*n)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',') break;
        c = end + 1;
    }
    fprintf(stderr, "bench_gpu_block: --seqs wants 1 to %d comma-separated integers in [1, %d], got \"%s\"\n", MAX_SEQS,
            MAX_S, text);
    return -1;
}

static int parse_int(const char *opt, const char *text, int *out) {
    char *end = NULL;
    const long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < -1000000 || v > 1000000) {
        fprintf(stderr, "bench_gpu_block: %s wants an integer, got \"%s\"\n", opt, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines appear as they happen, also through a pipe */
    run_opts o = {.reps = 15, .warmup = 3, .preps = 5, .wgrad_bf16 = 0};
    int small = 0;
    const char *json = NULL, *seqs_text = NULL;
    for (int i = 1; i < argc; i++) {
        const int has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--small")) {
            small = 1;
        } else if (!strcmp(argv[i], "--all-f32-grads")) {
            o.all_f32 = 1;
        } else if (has_value && !strcmp(argv[i], "--reps")) {
            if (parse_int("--reps", argv[++i], &o.reps)) return 2;
        } else if (has_value && !strcmp(argv[i], "--warmup")) {
            if (parse_int("--warmup", argv[++i], &o.warmup)) return 2;
        } else if (has_value && !strcmp(argv[i], "--profile-reps")) {
            if (parse_int("--profile-reps", argv[++i], &o.preps)) return 2;
        } else if (has_value && !strcmp(argv[i], "--seqs")) {
            seqs_text = argv[++i];
        } else if (has_value && !strcmp(argv[i], "--weight-grads")) {
            const char *v = argv[++i];
            if (!strcmp(v, "bf16") || !strcmp(v, "f32")) {
                o.wgrad_bf16 = !strcmp(v, "bf16");
            } else {
                fprintf(stderr, "bench_gpu_block: --weight-grads wants bf16 or f32, got \"%s\"\n", v);
                return 2;
            }
        } else if (has_value && !strcmp(argv[i], "--json")) {
            json = argv[++i];
        } else {
            fprintf(stderr, "bench_gpu_block: unknown option or missing value: %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (o.reps < 1 || o.reps > MAX_REPS || o.warmup < 0 || o.preps < 1 || o.preps > MAX_REPS) {
        fprintf(stderr, "bench_gpu_block: --reps and --profile-reps must be in [1, %d], --warmup >= 0\n", MAX_REPS);
        return 2;
    }
    if (parse_seqs(seqs_text ? seqs_text : (small ? "37" : DEFAULT_SEQS), o.seqs, &o.nseqs)) return 2;
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
    o.desc = desc;
    const gblock_geom g0 = small ? GBLOCK_SMALL : GBLOCK_RELEASE;
    printf("bench_gpu_block: %s\n", desc);
    printf("block: hidden %lld, %lld x %lld heads, ffn %lld, time_embed_dim %lld, rope_freq_dim %lld, S in {",
           (long long)g0.H, (long long)g0.heads, (long long)g0.D, (long long)g0.ffn, (long long)g0.E, (long long)g0.F);
    for (int i = 0; i < o.nseqs; i++)
        printf("%s%lld", i ? ", " : "", (long long)o.seqs[i]);
    printf("}, B in {1, 4}; reps %d, warm-up %d\n", o.reps, o.warmup);

    gblock_params p;
    ok(gblock_params_init(&g0, &p), "parameters");
    const int64_t Bs[2] = {1, 4};
    int nres = 0;
    for (int si = 0; si < o.nseqs; si++) {
        gblock_geom g = g0;
        g.S = o.seqs[si];
        h3s_tensor item_out = {0}, item_dx = {0}; /* B = 1's rows at this S, for the batch comparison */
        for (int bi = 0; bi < 2; bi++) {
            result *R = &g_res[nres];
            memset(R, 0, sizeof *R);
            R->S = g.S, R->B = Bs[bi];
            measure(&g, &p, &o, R, &item_out, &item_dx);
            nres++;
        }
        h3s_tensor_free(&item_out), h3s_tensor_free(&item_dx);
        if (json && write_json(json, &g0, &o, nres, si + 1 == o.nseqs)) return 2;
    }
    gblock_params_free(&p);

    printf("\n%-6s %-4s %12s %12s %14s %10s %10s\n", "S", "B", "forward ms", "backward ms", "fwd+bwd ms", "fwd TF/s",
           "bwd TF/s");
    for (int ri = 0; ri < nres; ri++) {
        const result *R = &g_res[ri];
        gblock_geom g = g0;
        g.S = R->S;
        const double f = median(R->fwd, o.reps), b = median(R->bwd, o.reps);
        printf("%-6lld %-4lld %12.2f %12.2f %14.2f %10.1f %10.1f\n", (long long)R->S, (long long)R->B, 1e3 * f, 1e3 * b,
               1e3 * median(R->both, o.reps), flops_forward(&g, R->B) / f * 1e-12,
               flops_backward(&g, R->B) / b * 1e-12);
    }
    for (int ri = 0; ri < nres; ri++) {
        const result *R = &g_res[ri];
        printf("\nper node, S = %lld, B = %lld (sync after each, median of %d), forward | backward:\n", (long long)R->S,
               (long long)R->B, o.preps);
        for (int i = 0; i < R->pf.nlabels || i < R->pb.nlabels; i++) {
            if (i < R->pf.nlabels)
                printf("  %-24s %9.3f ms", R->pf.label[i], 1e3 * median(R->pf.t[i], o.preps));
            else
                printf("  %-24s %9s   ", "", "");
            if (i < R->pb.nlabels) printf("   | %-24s %9.3f ms", R->pb.label[i], 1e3 * median(R->pb.t[i], o.preps));
            printf("\n");
        }
    }
    for (int ri = 0; ri < nres; ri++)
        if (g_res[ri].have_batch)
            printf("\nbatch invariance, S = %lld: item 0 of B = %lld vs B = 1: output %lld of %lld differ, dx %lld "
                   "of %lld differ\n",
                   (long long)g_res[ri].S, (long long)g_res[ri].B, (long long)g_res[ri].item_out_differ,
                   (long long)g_res[ri].item_elems, (long long)g_res[ri].item_dx_differ,
                   (long long)g_res[ri].item_elems);
    if (json) printf("wrote %s\n", json);
    return 0;
}

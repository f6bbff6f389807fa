/* One MiniMax-H3 transformer block at release geometry (hidden 5376, 56 x 128 heads, ffn 14336,
 * time_embed_dim 2688, rope_freq_dim 16) and S = 925 packed rows per item, composed from its 17
 * nodes (docs/strict.md section 4) through the public operators on device tensors, forward and
 * backward (the library's block, src/model/block.c, the model's own composition, on the tensors of
 * tests/gpu/gpu_block.h, shared with bench/bench_gpu_block.c):
 *   - batch invariance: item 0 of a batch of B in {1, 2, 4} gets, in every per-row node of the
 *     forward and every per-row gradient of the backward, the bits it gets alone;
 *   - repeat: running B = 2 again gives identical bits in every node, the weight, norm, table
 *     and temb gradients included;
 *   - the linear weights' gradients in BF16 (the bench's setting) are the F32 ones rounded, every other node equal;
 *   - the lean run (df, du, dout_o, dq, dk, dv only as BF16 copies, as the model runs without a node hook) gives every
 *     remaining node the full run's bits.
 * H3S_GPU_TEST_SMALL=1 runs a scaled-down block. */
#include "gpu_block.h"
#include "gpu_util.h"

typedef struct run {
    int n;
    const char *name[GBLOCK_MAX_NODES];
    int per_row[GBLOCK_MAX_NODES]; /* rows are packed [B * S] rows */
    char item0[GBLOCK_MAX_NODES][65], whole[GBLOCK_MAX_NODES][65];
    double fwd_s, bwd_s; /* informational: host clock around the queued nodes and a sync */
} run;

/* Forward and backward of the block (tests/gpu/gpu_block.h) for a batch of B items; item b's
 * inputs come from seeds that depend on b only, so item 0 is the same request for every B. */
static void run_block(const gblock_geom *g, const gblock_params *p, int64_t B, int whole, run *r) {
    memset(r, 0, sizeof *r);
    gblock_run br;
    if (gblock_setup(g, B, &br) != H3S_OK) gpu_die("block setup");
    CHECK_OK(h3s_cuda_sync());
    const double t_fwd = gpu_now();
    CHECK_OK(gblock_forward(g, p, &br));
    CHECK_OK(h3s_cuda_sync());
    r->fwd_s = gpu_now() - t_fwd;
    const double t_bwd = gpu_now();
    CHECK_OK(gblock_backward(g, p, &br));
    CHECK_OK(h3s_cuda_sync());
    r->bwd_s = gpu_now() - t_bwd;

    /* hashes: item 0's rows of every per-row node, and every node whole */
    r->n = br.n;
    for (int i = 0; i < br.n; i++) {
        r->name[i] = br.name[i], r->per_row[i] = br.per_row[i];
        if (br.per_row[i]) ghash(&br.t[i], 0, g->S, r->item0[i]);
        if (whole) ghash(&br.t[i], 0, -1, r->whole[i]);
    }
    gblock_free(&br);
}

/* The block with its seven linear weights' gradients in BF16 (gblock_setup_wgrad: the weight-gradient GEMM rounds its
 * F32 fold as it stores it) against the F32 run on the same inputs: each BF16 gradient is the F32 one rounded to
 * nearest even, every other node is bit for bit the same. */
static void wgrad_bf16_check(const gblock_geom *g, const gblock_params *p) {
    gblock_run rf, rb;
    if (gblock_setup_wgrad(g, 1, 0, &rf) != H3S_OK || gblock_setup_wgrad(g, 1, 1, &rb) != H3S_OK)
        gpu_die("block setup (weight gradients in BF16)");
    CHECK_OK(gblock_forward(g, p, &rf));
    CHECK_OK(gblock_backward(g, p, &rf));
    CHECK_OK(gblock_forward(g, p, &rb));
    CHECK_OK(gblock_backward(g, p, &rb));
    CHECK_OK(h3s_cuda_sync());
    int nbf = 0, bad = 0;
    for (int i = 0; i < rf.n; i++) {
        h3s_tensor a = gdown(&rf.t[i]), b = gdown(&rb.t[i]);
        int same;
        if (b.dtype == H3S_BF16 && a.dtype == H3S_F32) {
            h3s_tensor r;
            memset(&r, 0, sizeof r);
            CHECK_OK(h3s_tensor_alloc(&r, H3S_BF16, b.ndim, b.shape));
            CHECK_OK(h3s_tensor_convert(&a, &r));
            same = h3t_bitwise_equal(&r, &b);
            h3s_tensor_free(&r);
            nbf++;
        } else {
            same = h3t_bitwise_equal(&a, &b);
        }
        CHECK(same, "node %s: the BF16 weight-gradient run differs from the F32 run%s", rf.name[i],
              b.dtype == H3S_BF16 ? " rounded" : "");
        bad += !same;
        h3s_tensor_free(&a), h3s_tensor_free(&b);
    }
    printf("weight gradients in BF16: %d nodes, %d of them BF16 gradients (each the F32 one rounded); %d differ\n",
           rf.n, nbf, bad);
    CHECK(nbf == 7, "expected the seven linear weights' gradients in BF16, got %d", nbf);
    gblock_free(&rf);
    gblock_free(&rb);
}

/* The block as the model runs it without a node hook (gblock_setup_lean: df, du, dout_o, dq, dk, dv written only as the
 * BF16 copies their linears read) against the run that writes them in F32 too: every node of the lean run, BF16 copies
 * and weight gradients included, bit for bit the same-named node of the full run, which has exactly those six more. */
static void lean_check(const gblock_geom *g, const gblock_params *p) {
    if (!gblock_lean_possible(g)) {
        printf("lean gradients: not possible here (a linear reads F32 dy); the full run above is the only one\n");
        return;
    }
    gblock_run rf, rl;
    if (gblock_setup_wgrad(g, 1, 1, &rf) != H3S_OK || gblock_setup_lean(g, 1, 1, &rl) != H3S_OK)
        gpu_die("block setup (lean gradients)");
    CHECK_OK(gblock_forward(g, p, &rf));
    CHECK_OK(gblock_backward(g, p, &rf));
    CHECK_OK(gblock_forward(g, p, &rl));
    CHECK_OK(gblock_backward(g, p, &rl));
    CHECK_OK(h3s_cuda_sync());
    int bad = 0, missing = 0;
    for (int i = 0; i < rl.n; i++) {
        int j = 0;
        while (j < rf.n && strcmp(rf.name[j], rl.name[i]))
            j++;
        CHECK(j < rf.n, "lean node %s is not a node of the full run", rl.name[i]);
        if (j == rf.n) {
            missing++;
            continue;
        }
        h3s_tensor a = gdown(&rf.t[j]), b = gdown(&rl.t[i]);
        const int same = h3t_bitwise_equal(&a, &b);
        CHECK(same, "node %s: the lean run differs from the full run", rl.name[i]);
        bad += !same;
        h3s_tensor_free(&a), h3s_tensor_free(&b);
    }
    printf("lean gradients: %d nodes against the full run's %d: %d differ, %d unmatched\n", rl.n, rf.n, bad, missing);
    CHECK(rf.n - rl.n == 6, "expected the lean run to skip 6 F32 nodes (df, du, dout_o, dq, dk, dv), it has %d fewer",
          rf.n - rl.n);
    CHECK(!rl.df && !rl.du && !rl.dob && !rl.dq && !rl.dk && !rl.dv,
          "the lean run allocated one of its skipped F32 nodes");
    gblock_free(&rf);
    gblock_free(&rl);
}

int main(void) {
    gpu_require();
    const int small = gpu_small();
    const gblock_geom g = small ? GBLOCK_SMALL : GBLOCK_RELEASE;
    printf("block: hidden %lld, %lld x %lld heads, ffn %lld, S = %lld\n", (long long)g.H, (long long)g.heads,
           (long long)g.D, (long long)g.ffn, (long long)g.S);
    gblock_params p;
    if (gblock_params_init(&g, &p) != H3S_OK) gpu_die("block parameters");
    static run runs[4];
    const int64_t Bs[4] = {1, 2, 4, 2};
    for (int i = 0; i < 4; i++) {
        double t0 = gpu_now();
        run_block(&g, &p, Bs[i], Bs[i] == 2, &runs[i]);
        printf("  B = %lld: %d nodes; forward %.1f ms, backward %.1f ms (allocations excluded); with hashing %.2f s\n",
               (long long)Bs[i], runs[i].n, 1e3 * runs[i].fwd_s, 1e3 * runs[i].bwd_s, gpu_now() - t0);
    }
    int batch_diff = 0, repeat_diff = 0, per_row = 0;
    for (int j = 0; j < runs[0].n; j++) {
        if (runs[0].per_row[j]) {
            per_row++;
            for (int i = 1; i < 3; i++) {
                int same = strcmp(runs[0].item0[j], runs[i].item0[j]) == 0;
                CHECK(same, "node %s: item 0 at B = %lld differs from B = 1", runs[0].name[j], (long long)Bs[i]);
                batch_diff += !same;
            }
        }
        int same = strcmp(runs[1].whole[j], runs[3].whole[j]) == 0;
        CHECK(same, "node %s: B = 2 repeat differs", runs[1].name[j]);
        repeat_diff += !same;
        printf("  %-30s %s%s\n", runs[1].name[j], runs[1].whole[j], runs[0].per_row[j] ? "" : "  (cross-row)");
    }
    printf("batch invariance: %d per-row nodes x B in {2, 4}: %d differ; repeat (B = 2): %d nodes, %d differ\n",
           per_row, batch_diff, runs[1].n, repeat_diff);
    wgrad_bf16_check(&g, &p);
    lean_check(&g, &p);
    gblock_params_free(&p);
    return h3t_finish("test_gpu_block");
}

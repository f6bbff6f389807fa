/* One MiniMax-H3 transformer block at release geometry (hidden 5376, 56 x 128 heads, ffn 14336,
 * time_embed_dim 2688, rope_freq_dim 16) and S = 925 packed rows per item, composed from its 17
 * nodes (STRICT.md section 4) through the public operators on device tensors, forward and
 * backward:
 *   - batch invariance: item 0 of a batch of B in {1, 2, 4} gets, in every per-row node of the
 *     forward and every per-row gradient of the backward, the bits it gets alone;
 *   - repeat: running B = 2 again gives identical bits in every node, the weight, norm, table
 *     and temb gradients included.
 * H3S_GPU_TEST_SMALL=1 runs a scaled-down block. */
#include "gpu_util.h"

typedef struct geom {
    int64_t H, heads, D, ffn, E, F, S;
} geom;

typedef struct params {
    h3s_tensor w_ada, b_ada, norm1_w, norm2_w, wq, wk, wv, wo, qn_w, kn_w, w_up, w_down;
} params;

#define MAX_NODES 64

typedef struct run {
    int n;
    const char *name[MAX_NODES];
    h3s_tensor t[MAX_NODES];
    int per_row[MAX_NODES]; /* rows are packed [B * S] rows */
    char item0[MAX_NODES][65], whole[MAX_NODES][65];
    double fwd_s, bwd_s; /* informational: host clock around the queued nodes and a sync */
} run;

static h3s_tensor *node(run *r, const char *name, h3s_dtype dt, int64_t a, int64_t b, int per_row) {
    r->name[r->n] = name;
    r->t[r->n] = b > 0 ? gdev2(dt, a, b) : gdev1(dt, a);
    r->per_row[r->n] = per_row;
    return &r->t[r->n++];
}

static void init_params(const geom *g, params *p) {
    const int64_t H = g->H, QW = g->heads * g->D;
    p->w_ada = gdev2(H3S_BF16, 18 * H, g->E), p->b_ada = gdev1(H3S_BF16, 18 * H);
    p->norm1_w = gdev1(H3S_BF16, H), p->norm2_w = gdev1(H3S_BF16, H);
    p->wq = gdev2(H3S_BF16, QW, H), p->wk = gdev2(H3S_BF16, QW, H), p->wv = gdev2(H3S_BF16, QW, H);
    p->wo = gdev2(H3S_BF16, H, QW), p->qn_w = gdev1(H3S_BF16, g->D), p->kn_w = gdev1(H3S_BF16, g->D);
    p->w_up = gdev2(H3S_BF16, 2 * g->ffn, H), p->w_down = gdev2(H3S_BF16, H, g->ffn);
    gfill(&p->w_ada, 1, 1.0f / sqrtf((float)g->E)), gfill(&p->b_ada, 2, 0.05f);
    gfill(&p->norm1_w, 3, 0.2f), gfill(&p->norm2_w, 4, 0.2f); /* around 0: the test is invariance, not scale */
    gfill(&p->wq, 5, 1.0f / sqrtf((float)H)), gfill(&p->wk, 6, 1.0f / sqrtf((float)H));
    gfill(&p->wv, 7, 1.0f / sqrtf((float)H)), gfill(&p->wo, 8, 1.0f / sqrtf((float)QW));
    gfill(&p->qn_w, 9, 1.0f), gfill(&p->kn_w, 10, 1.0f);
    gfill(&p->w_up, 11, 1.0f / sqrtf((float)H)), gfill(&p->w_down, 12, 1.0f / sqrtf((float)g->ffn));
}

static void free_params(params *p) {
    h3s_tensor *all[] = {&p->w_ada, &p->b_ada, &p->norm1_w, &p->norm2_w, &p->wq,   &p->wk,
                         &p->wv,    &p->wo,    &p->qn_w,    &p->kn_w,    &p->w_up, &p->w_down};
    for (int i = 0; i < 12; i++)
        gfree(all[i]);
}

/* Forward and backward of the block for a batch of B items; item b's inputs come from seeds
 * that depend on b only, so item 0 is the same request for every B. */
static void run_block(const geom *g, const params *p, int64_t B, int whole, run *r) {
    const int64_t S = g->S, M = B * S, H = g->H, QW = g->heads * g->D, F = g->F, E = g->E;
    const double eps = 1e-5;
    memset(r, 0, sizeof *r);
    /* inputs: x, dout per item; temb shared (T = 1); positions and tags per packed position */
    h3s_tensor *x = node(r, "input.x", H3S_BF16, M, H, 1);
    h3s_tensor *dout = node(r, "input.dout", H3S_F32, M, H, 1);
    for (int64_t b = 0; b < B; b++) {
        h3s_tensor xv = grows(x, b * S, S), gv = grows(dout, b * S, S);
        gfill(&xv, 500 + (uint64_t)b, 1.0f);
        gfill(&gv, 600 + (uint64_t)b, 1.0f);
    }
    h3s_tensor *temb = node(r, "input.temb", H3S_F32, 1, E, 0);
    gfill(temb, 700, 1.0f);
    h3s_tensor pos = h3t_alloc2(H3S_F64, S, 3), idx = h3t_alloc1(H3S_I64, M);
    for (int64_t s = 0; s < S; s++) {
        ((double *)pos.data)[s * 3] = (double)(s / 64);
        ((double *)pos.data)[s * 3 + 1] = -16.0 + (double)((s / 8) % 8) * 4.0;
        ((double *)pos.data)[s * 3 + 2] = -16.0 + (double)(s % 8) * 4.0;
    }
    for (int64_t m = 0; m < M; m++) /* adaln_index = timestep_index * 3 + tag, tags 1 | 0 | 2 */
        ((int64_t *)idx.data)[m] = (m % S) < S / 8 ? 1 : ((m % S) < (7 * S) / 8 ? 0 : 2);
    h3s_tensor posd = gup(&pos);
    h3s_tensor *cosT = node(r, "rope_table.cos", H3S_F32, S, 6 * F, 0);
    h3s_tensor *sinT = node(r, "rope_table.sin", H3S_F32, S, 6 * F, 0);
    CHECK_OK(h3s_rope_table(&posd, F, 10000.0, cosT, sinT));

    CHECK_OK(h3s_cuda_sync());
    const double t_fwd = gpu_now();

    /* ------------------------------------------------------------ forward (17 nodes) */
    h3s_tensor *a = node(r, "adaln_projection.a", H3S_BF16, 1, E, 0);
    h3s_tensor *tab = node(r, "adaln_projection", H3S_BF16, 1, 18 * H, 0);
    CHECK_OK(h3s_adaln_projection_forward(temb, &p->w_ada, &p->b_ada, a, tab));
    h3s_tensor tab3 = *tab; /* [T*3, 6H] view of the same bytes */
    tab3.shape[0] = 3, tab3.shape[1] = 6 * H, tab3.owns_data = 0;
    h3s_modulation mod1 = {&tab3, &idx, 0, 1}, mod2 = {&tab3, &idx, 3, 4};
    h3s_tensor *n1 = node(r, "norm1", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_rmsnorm_forward(x, &p->norm1_w, &mod1, eps, n1));
    h3s_tensor *q = node(r, "q_proj", H3S_BF16, M, QW, 1), *k = node(r, "k_proj", H3S_BF16, M, QW, 1);
    h3s_tensor *v = node(r, "v_proj", H3S_BF16, M, QW, 1);
    CHECK_OK(h3s_linear_forward(n1, &p->wq, NULL, q));
    CHECK_OK(h3s_linear_forward(n1, &p->wk, NULL, k));
    CHECK_OK(h3s_linear_forward(n1, &p->wv, NULL, v));
    h3s_tensor *qn = node(r, "q_norm", H3S_BF16, M, QW, 1), *kn = node(r, "k_norm", H3S_BF16, M, QW, 1);
    CHECK_OK(h3s_head_rmsnorm_forward(q, g->heads, &p->qn_w, eps, qn));
    CHECK_OK(h3s_head_rmsnorm_forward(k, g->heads, &p->kn_w, eps, kn));
    h3s_tensor *qr = node(r, "rope_q", H3S_BF16, M, QW, 1), *kr = node(r, "rope_k", H3S_BF16, M, QW, 1);
    CHECK_OK(h3s_rope_forward(qn, g->heads, cosT, sinT, qr));
    CHECK_OK(h3s_rope_forward(kn, g->heads, cosT, sinT, kr));
    h3s_tensor *ao = node(r, "attention", H3S_BF16, M, QW, 1);
    int64_t sd[3] = {M, g->heads, 2};
    r->name[r->n] = "attention.stats", r->t[r->n] = gdev(H3S_F32, 3, sd), r->per_row[r->n] = 1;
    h3s_tensor *stats = &r->t[r->n++];
    CHECK_OK(h3s_attention_forward(qr, kr, v, B, g->heads, NULL, ao, stats));
    h3s_tensor *o = node(r, "o_proj", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_linear_forward(ao, &p->wo, NULL, o));
    h3s_tensor *x2 = node(r, "residual_attn", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_residual_forward(x, o, &tab3, &idx, 2, x2));
    h3s_tensor *n2 = node(r, "norm2", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_rmsnorm_forward(x2, &p->norm2_w, &mod2, eps, n2));
    h3s_tensor *u = node(r, "ffn_gate_up", H3S_BF16, M, 2 * g->ffn, 1);
    CHECK_OK(h3s_linear_forward(n2, &p->w_up, NULL, u));
    h3s_tensor *hs = node(r, "swiglu", H3S_BF16, M, g->ffn, 1);
    CHECK_OK(h3s_swiglu_forward(u, hs));
    h3s_tensor *f = node(r, "ffn_down", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_linear_forward(hs, &p->w_down, NULL, f));
    h3s_tensor *x3 = node(r, "residual_mlp", H3S_BF16, M, H, 1);
    CHECK_OK(h3s_residual_forward(x2, f, &tab3, &idx, 5, x3));

    CHECK_OK(h3s_cuda_sync());
    r->fwd_s = gpu_now() - t_fwd;
    const double t_bwd = gpu_now();

    /* ------------------------------------------------------------ backward */
    h3s_tensor *dtab = node(r, "grad.adaln_table", H3S_F32, 1, 18 * H, 0);
    h3s_tensor dtab3 = *dtab;
    dtab3.shape[0] = 3, dtab3.shape[1] = 6 * H, dtab3.owns_data = 0;
    h3s_tensor *dx2a = node(r, "grad.residual_mlp.dr", H3S_F32, M, H, 1);
    h3s_tensor *df = node(r, "grad.residual_mlp.dy", H3S_F32, M, H, 1);
    CHECK_OK(h3s_residual_backward(f, &tab3, &idx, 5, dout, dx2a, df, &dtab3));
    h3s_tensor *dhs = node(r, "grad.ffn_down.dx", H3S_F32, M, g->ffn, 1);
    h3s_tensor *dw_down = node(r, "grad.ffn_down.dw", H3S_F32, H, g->ffn, 0);
    CHECK_OK(h3s_linear_backward(hs, &p->w_down, df, dhs, dw_down, NULL));
    h3s_tensor *du = node(r, "grad.swiglu", H3S_F32, M, 2 * g->ffn, 1);
    CHECK_OK(h3s_swiglu_backward(u, dhs, du));
    h3s_tensor *dn2 = node(r, "grad.ffn_gate_up.dx", H3S_F32, M, H, 1);
    h3s_tensor *dw_up = node(r, "grad.ffn_gate_up.dw", H3S_F32, 2 * g->ffn, H, 0);
    CHECK_OK(h3s_linear_backward(n2, &p->w_up, du, dn2, dw_up, NULL));
    h3s_tensor *dx2b = node(r, "grad.norm2.dx", H3S_F32, M, H, 1);
    h3s_tensor *dnorm2 = node(r, "grad.norm2.dw", H3S_F32, H, 0, 0);
    CHECK_OK(h3s_rmsnorm_backward(x2, &p->norm2_w, &mod2, eps, dn2, dx2b, dnorm2, &dtab3));
    h3s_tensor *dx2 = node(r, "grad.residual_attn.out", H3S_F32, M, H, 1);
    CHECK_OK(h3s_grad_add(dx2a, dx2b, dx2));
    h3s_tensor *dxa = node(r, "grad.residual_attn.dr", H3S_F32, M, H, 1);
    h3s_tensor *dob = node(r, "grad.residual_attn.dy", H3S_F32, M, H, 1);
    CHECK_OK(h3s_residual_backward(o, &tab3, &idx, 2, dx2, dxa, dob, &dtab3));
    h3s_tensor *dao = node(r, "grad.o_proj.dx", H3S_F32, M, QW, 1);
    h3s_tensor *dwo = node(r, "grad.o_proj.dw", H3S_F32, H, QW, 0);
    CHECK_OK(h3s_linear_backward(ao, &p->wo, dob, dao, dwo, NULL));
    h3s_tensor *dqr = node(r, "grad.attention.dq", H3S_F32, M, QW, 1);
    h3s_tensor *dkr = node(r, "grad.attention.dk", H3S_F32, M, QW, 1);
    h3s_tensor *dv = node(r, "grad.attention.dv", H3S_F32, M, QW, 1);
    CHECK_OK(h3s_attention_backward(qr, kr, v, ao, stats, B, g->heads, NULL, dao, dqr, dkr, dv));
    h3s_tensor *dqn = node(r, "grad.rope_q", H3S_F32, M, QW, 1), *dkn = node(r, "grad.rope_k", H3S_F32, M, QW, 1);
    CHECK_OK(h3s_rope_backward(g->heads, cosT, sinT, dqr, dqn));
    CHECK_OK(h3s_rope_backward(g->heads, cosT, sinT, dkr, dkn));
    h3s_tensor *dq = node(r, "grad.q_norm.dx", H3S_F32, M, QW, 1), *dk = node(r, "grad.k_norm.dx", H3S_F32, M, QW, 1);
    h3s_tensor *dqnw = node(r, "grad.q_norm.dw", H3S_F32, g->D, 0, 0);
    h3s_tensor *dknw = node(r, "grad.k_norm.dw", H3S_F32, g->D, 0, 0);
    CHECK_OK(h3s_head_rmsnorm_backward(q, g->heads, &p->qn_w, eps, dqn, dq, dqnw));
    CHECK_OK(h3s_head_rmsnorm_backward(k, g->heads, &p->kn_w, eps, dkn, dk, dknw));
    h3s_tensor *dn1q = node(r, "grad.q_proj.dx", H3S_F32, M, H, 1), *dn1k = node(r, "grad.k_proj.dx", H3S_F32, M, H, 1);
    h3s_tensor *dn1v = node(r, "grad.v_proj.dx", H3S_F32, M, H, 1);
    h3s_tensor *dwq = node(r, "grad.q_proj.dw", H3S_F32, QW, H, 0), *dwk = node(r, "grad.k_proj.dw", H3S_F32, QW, H, 0);
    h3s_tensor *dwv = node(r, "grad.v_proj.dw", H3S_F32, QW, H, 0);
    CHECK_OK(h3s_linear_backward(n1, &p->wq, dq, dn1q, dwq, NULL));
    CHECK_OK(h3s_linear_backward(n1, &p->wk, dk, dn1k, dwk, NULL));
    CHECK_OK(h3s_linear_backward(n1, &p->wv, dv, dn1v, dwv, NULL));
    h3s_tensor *dn1 = node(r, "grad.norm1.dy", H3S_F32, M, H, 1);
    CHECK_OK(h3s_grad_add(dn1q, dn1k, dn1));
    CHECK_OK(h3s_grad_add(dn1, dn1v, dn1));
    h3s_tensor *dxb = node(r, "grad.norm1.dx", H3S_F32, M, H, 1);
    h3s_tensor *dnorm1 = node(r, "grad.norm1.dw", H3S_F32, H, 0, 0);
    CHECK_OK(h3s_rmsnorm_backward(x, &p->norm1_w, &mod1, eps, dn1, dxb, dnorm1, &dtab3));
    h3s_tensor *dx = node(r, "grad.x", H3S_F32, M, H, 1);
    CHECK_OK(h3s_grad_add(dxa, dxb, dx));
    h3s_tensor *dtemb = node(r, "grad.temb", H3S_F32, 1, E, 0);
    h3s_tensor *dw_ada = node(r, "grad.adaln_projection.dw", H3S_F32, 18 * H, E, 0);
    h3s_tensor *db_ada = node(r, "grad.adaln_projection.db", H3S_F32, 18 * H, 0, 0);
    CHECK_OK(h3s_adaln_projection_backward(temb, a, &p->w_ada, dtab, dtemb, dw_ada, db_ada));
    CHECK_OK(h3s_cuda_sync());
    r->bwd_s = gpu_now() - t_bwd;

    /* hashes: item 0's rows of every per-row node, and every node whole */
    for (int i = 0; i < r->n; i++) {
        if (r->per_row[i]) ghash(&r->t[i], 0, S, r->item0[i]);
        if (whole) ghash(&r->t[i], 0, -1, r->whole[i]);
    }
    for (int i = 0; i < r->n; i++)
        gfree(&r->t[i]);
    gfree(&posd);
    h3s_tensor_free(&pos), h3s_tensor_free(&idx);
}

int main(void) {
    gpu_require();
    const int small = gpu_small();
    const geom g = small ? (geom){64, 2, 32, 96, 48, 4, 37} : (geom){5376, 56, 128, 14336, 2688, 16, 925};
    printf("block: hidden %lld, %lld x %lld heads, ffn %lld, S = %lld\n", (long long)g.H, (long long)g.heads,
           (long long)g.D, (long long)g.ffn, (long long)g.S);
    params p;
    init_params(&g, &p);
    static run runs[4];
    const int64_t Bs[4] = {1, 2, 4, 2};
    for (int i = 0; i < 4; i++) {
        double t0 = gpu_now();
        run_block(&g, &p, Bs[i], Bs[i] == 2, &runs[i]);
        printf("  B = %lld: %d nodes; forward %.1f ms, backward %.1f ms (allocations included); with hashing %.2f s\n",
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
    free_params(&p);
    return h3t_finish("test_gpu_block");
}

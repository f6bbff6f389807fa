/* One MiniMax-H3 transformer block (its 17 nodes, docs/strict.md section 4) on device tensors, forward and
 * backward: the library's own composition (src/model/block.c, the one the model runs) on tensors allocated here.
 * Shared by tests/gpu/test_gpu_block.c (batch invariance and repeat) and bench/bench_gpu_block.c (timing against
 * the PyTorch provider).
 *
 * Header-only and independent of the test helpers (it reports failures as h3s_status, the operator's
 * message in h3s_last_error()), so a benchmark can include it too.  Usage:
 *
 *   gblock_params p;   gblock_params_init(&g, &p);           weights on the device, seeded fills
 *   gblock_run r;      gblock_setup(&g, B, &r);              every node tensor allocated, inputs filled,
 *                                                            rotary table computed (not part of the block)
 *   gblock_forward(&g, &p, &r);  gblock_backward(&g, &p, &r);  queue the nodes (no allocation, no sync)
 *   gblock_free(&r);   gblock_params_free(&p);
 *
 * Item b of a batch gets its inputs from seeds that depend on b only, so item 0 is the same request
 * for every B.  r.after, when set, is called after each operator with its node name (a benchmark
 * syncs there to time the nodes one by one): the forward's node names, and in the backward the node whose
 * backward the operator is, or grad_add.<where> for the sums of gradients (gblock_label). */
#ifndef H3S_GPU_BLOCK_H
#define H3S_GPU_BLOCK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "cuda/cuda_extra.h"
#include "cuda/cuda_ops.h"
#include "h3s.h"
#include "model/block.h"
#include "ops/ops.h"

typedef struct gblock_geom {
    int64_t H, heads, D, ffn, E, F, S;
} gblock_geom;

/* Release geometry (hidden 5376, 56 x 128 heads, ffn 14336, time_embed_dim 2688, rope_freq_dim 16)
 * at S = 925 packed rows per item, and a scaled-down block for sanitizer runs. */
#define GBLOCK_RELEASE ((gblock_geom){5376, 56, 128, 14336, 2688, 16, 925})
#define GBLOCK_SMALL ((gblock_geom){64, 2, 32, 96, 48, 4, 37})

typedef struct gblock_params {
    h3s_tensor w_ada, b_ada, norm1_w, norm2_w, wq, wk, wv, wo, qn_w, kn_w, w_up, w_down;
} gblock_params;

#define GBLOCK_MAX_NODES 80

typedef struct gblock_run {
    int64_t B;
    int wgrad_bf16; /* the 7 linear weights' gradients in BF16 (gblock_setup_wgrad): the F32 fold rounded as stored */
    int lean; /* df, du, dout_o, dq, dk, dv only as their BF16 copies (gblock_setup_lean), as the model runs without a
               * node hook: those six F32 nodes are not allocated, their pointers NULL */
    int n;
    const char *name[GBLOCK_MAX_NODES];
    h3s_tensor t[GBLOCK_MAX_NODES];
    int per_row[GBLOCK_MAX_NODES]; /* rows are packed [B * S] rows */
    /* host layout tensors (the index stays on the host: the device cache serves it) */
    h3s_tensor pos, idx, posd;
    /* the nodes, in allocation order (pointers into t[]) */
    h3s_tensor *x, *dout, *temb, *cosT, *sinT;
    h3s_tensor *a, *tab, *n1, *q, *k, *v, *qn, *kn, *qr, *kr, *ao, *stats, *o, *x2, *n2, *u, *hs, *f, *x3;
    h3s_tensor *dtab, *dx2a, *df, *df_bf16, *dhs, *dw_down, *du, *du_bf16, *dn2, *dw_up, *dnorm2, *dx2, *dxa, *dob,
        *dob_bf16, *dao, *dwo;
    h3s_tensor *dqr, *dkr, *dv, *dv_bf16, *dqn, *dkn, *dq, *dk, *dq_bf16, *dk_bf16, *dqnw, *dknw, *dn1q, *dn1k, *dn1v,
        *dwq, *dwk, *dwv, *dn1;
    h3s_tensor *dnorm1, *dx, *dtemb, *dw_ada, *db_ada;
    void (*after)(void *ctx, const char *node);
    void *ctx;
} gblock_run;

#define GBLOCK_TRY(expr)                                                                                               \
    do {                                                                                                               \
        h3s_status gb_st_ = (expr);                                                                                    \
        if (gb_st_ != H3S_OK) return gb_st_;                                                                           \
    } while (0)

static inline h3s_status gblock_alloc(h3s_tensor *t, h3s_dtype dt, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return h3s_cuda_tensor_alloc(t, dt, b > 0 ? 2 : 1, s);
}

/* Allocate node `name` ([a, b], or [a] when b == 0) as the next entry of r. */
static inline h3s_status gblock_node(gblock_run *r, h3s_tensor **out, const char *name, h3s_dtype dt, int64_t a,
                                     int64_t b, int per_row) {
    if (r->n >= GBLOCK_MAX_NODES) return h3s_fail(H3S_ERR_INVALID, "gblock_node: more than %d nodes", GBLOCK_MAX_NODES);
    r->name[r->n] = name;
    r->per_row[r->n] = per_row;
    GBLOCK_TRY(gblock_alloc(&r->t[r->n], dt, a, b));
    *out = &r->t[r->n++];
    return H3S_OK;
}

static inline void gblock_params_free(gblock_params *p) {
    h3s_tensor *all[] = {&p->w_ada, &p->b_ada, &p->norm1_w, &p->norm2_w, &p->wq,   &p->wk,
                         &p->wv,    &p->wo,    &p->qn_w,    &p->kn_w,    &p->w_up, &p->w_down};
    for (int i = 0; i < 12; i++)
        h3s_cuda_tensor_free(all[i]);
}

static inline h3s_status gblock_params_init(const gblock_geom *g, gblock_params *p) {
    const int64_t H = g->H, QW = g->heads * g->D;
    memset(p, 0, sizeof *p);
    h3s_status st = H3S_OK;
#define GB_P(field, a, b, seed, scale)                                                                                 \
    if (st == H3S_OK) st = gblock_alloc(&p->field, H3S_BF16, a, b);                                                    \
    if (st == H3S_OK) st = h3s_cuda_fill_random(&p->field, seed, scale);
    GB_P(w_ada, 18 * H, g->E, 1, 1.0f / sqrtf((float)g->E))
    GB_P(b_ada, 18 * H, 0, 2, 0.05f)
    GB_P(norm1_w, H, 0, 3, 0.2f) /* around 0: the test is invariance, not scale */
    GB_P(norm2_w, H, 0, 4, 0.2f)
    GB_P(wq, QW, H, 5, 1.0f / sqrtf((float)H))
    GB_P(wk, QW, H, 6, 1.0f / sqrtf((float)H))
    GB_P(wv, QW, H, 7, 1.0f / sqrtf((float)H))
    GB_P(wo, H, QW, 8, 1.0f / sqrtf((float)QW))
    GB_P(qn_w, g->D, 0, 9, 1.0f)
    GB_P(kn_w, g->D, 0, 10, 1.0f)
    GB_P(w_up, 2 * g->ffn, H, 11, 1.0f / sqrtf((float)H))
    GB_P(w_down, H, g->ffn, 12, 1.0f / sqrtf((float)g->ffn))
#undef GB_P
    if (st != H3S_OK) gblock_params_free(p);
    return st;
}

static inline void gblock_free(gblock_run *r) {
    for (int i = 0; i < r->n; i++)
        h3s_cuda_tensor_free(&r->t[i]);
    h3s_cuda_tensor_free(&r->posd);
    h3s_tensor_free(&r->pos);
    h3s_tensor_free(&r->idx);
    r->n = 0;
}

static inline h3s_status gblock_setup_(const gblock_geom *g, int64_t B, gblock_run *r) {
    const int64_t S = g->S, M = B * S, H = g->H, QW = g->heads * g->D, F = g->F, E = g->E, FF = g->ffn;
    const h3s_dtype WGT = r->wgrad_bf16 ? H3S_BF16 : H3S_F32; /* the linear weights' gradients */
    r->B = B;
    /* inputs: x, dout per item; temb shared (T = 1); positions and tags per packed position */
    GBLOCK_TRY(gblock_node(r, &r->x, "input.x", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dout, "input.dout", H3S_F32, M, H, 1));
    for (int64_t b = 0; b < B; b++) {
        h3s_tensor xv = *r->x, gv = *r->dout;
        xv.shape[0] = gv.shape[0] = S, xv.owns_data = gv.owns_data = 0;
        xv.data = (char *)r->x->data + (size_t)(b * S * H) * h3s_dtype_size(H3S_BF16);
        gv.data = (char *)r->dout->data + (size_t)(b * S * H) * h3s_dtype_size(H3S_F32);
        GBLOCK_TRY(h3s_cuda_fill_random(&xv, 500 + (uint64_t)b, 1.0f));
        GBLOCK_TRY(h3s_cuda_fill_random(&gv, 600 + (uint64_t)b, 1.0f));
    }
    GBLOCK_TRY(gblock_node(r, &r->temb, "input.temb", H3S_F32, 1, E, 0));
    GBLOCK_TRY(h3s_cuda_fill_random(r->temb, 700, 1.0f));
    const int64_t ps[2] = {S, 3}, is[1] = {M};
    GBLOCK_TRY(h3s_tensor_alloc(&r->pos, H3S_F64, 2, ps));
    GBLOCK_TRY(h3s_tensor_alloc(&r->idx, H3S_I64, 1, is));
    for (int64_t s = 0; s < S; s++) {
        ((double *)r->pos.data)[s * 3] = (double)(s / 64);
        ((double *)r->pos.data)[s * 3 + 1] = -16.0 + (double)((s / 8) % 8) * 4.0;
        ((double *)r->pos.data)[s * 3 + 2] = -16.0 + (double)(s % 8) * 4.0;
    }
    for (int64_t m = 0; m < M; m++) /* adaln_index = timestep_index * 3 + tag, tags 1 | 0 | 2 */
        ((int64_t *)r->idx.data)[m] = (m % S) < S / 8 ? 1 : ((m % S) < (7 * S) / 8 ? 0 : 2);
    GBLOCK_TRY(gblock_alloc(&r->posd, H3S_F64, S, 3));
    GBLOCK_TRY(h3s_cuda_upload(&r->pos, &r->posd));
    GBLOCK_TRY(gblock_node(r, &r->cosT, "rope_table.cos", H3S_F32, S, 6 * F, 0));
    GBLOCK_TRY(gblock_node(r, &r->sinT, "rope_table.sin", H3S_F32, S, 6 * F, 0));
    GBLOCK_TRY(h3s_rope_table(&r->posd, F, 10000.0, r->cosT, r->sinT));

    /* forward nodes */
    GBLOCK_TRY(gblock_node(r, &r->a, "adaln_projection.a", H3S_BF16, 1, E, 0));
    GBLOCK_TRY(gblock_node(r, &r->tab, "adaln_projection", H3S_BF16, 1, 18 * H, 0));
    GBLOCK_TRY(gblock_node(r, &r->n1, "norm1", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->q, "q_proj", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->k, "k_proj", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->v, "v_proj", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->qn, "q_norm", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->kn, "k_norm", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->qr, "rope_q", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->kr, "rope_k", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->ao, "attention", H3S_BF16, M, QW, 1));
    if (r->n >= GBLOCK_MAX_NODES) return h3s_fail(H3S_ERR_INVALID, "gblock_node: more than %d nodes", GBLOCK_MAX_NODES);
    const int64_t sd[3] = {M, g->heads, 2};
    r->name[r->n] = "attention.stats", r->per_row[r->n] = 1;
    GBLOCK_TRY(h3s_cuda_tensor_alloc(&r->t[r->n], H3S_F32, 3, sd));
    r->stats = &r->t[r->n++];
    GBLOCK_TRY(gblock_node(r, &r->o, "o_proj", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->x2, "residual_attn", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->n2, "norm2", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->u, "ffn_gate_up", H3S_BF16, M, 2 * FF, 1));
    GBLOCK_TRY(gblock_node(r, &r->hs, "swiglu", H3S_BF16, M, FF, 1));
    GBLOCK_TRY(gblock_node(r, &r->f, "ffn_down", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->x3, "residual_mlp", H3S_BF16, M, H, 1));

    /* backward nodes */
    GBLOCK_TRY(gblock_node(r, &r->dtab, "grad.adaln_table", H3S_F32, 1, 18 * H, 0));
    GBLOCK_TRY(gblock_node(r, &r->dx2a, "grad.residual_mlp.dr", H3S_F32, M, H, 1));
    if (!r->lean) GBLOCK_TRY(gblock_node(r, &r->df, "grad.residual_mlp.dy", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->df_bf16, "grad.residual_mlp.dy.bf16", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dhs, "grad.ffn_down.dx", H3S_F32, M, FF, 1));
    GBLOCK_TRY(gblock_node(r, &r->dw_down, "grad.ffn_down.dw", WGT, H, FF, 0));
    if (!r->lean) GBLOCK_TRY(gblock_node(r, &r->du, "grad.swiglu", H3S_F32, M, 2 * FF, 1));
    /* the model's: du rounded in the SwiGLU backward's pass, the gate/up linear's BF16 gradient operand */
    GBLOCK_TRY(gblock_node(r, &r->du_bf16, "grad.swiglu.bf16", H3S_BF16, M, 2 * FF, 1));
    GBLOCK_TRY(gblock_node(r, &r->dn2, "grad.ffn_gate_up.dx", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dw_up, "grad.ffn_gate_up.dw", WGT, 2 * FF, H, 0));
    GBLOCK_TRY(gblock_node(r, &r->dnorm2, "grad.norm2.dw", H3S_F32, H, 0, 0));
    GBLOCK_TRY(gblock_node(r, &r->dx2, "grad.residual_attn.out", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dxa, "grad.residual_attn.dr", H3S_F32, M, H, 1));
    if (!r->lean) GBLOCK_TRY(gblock_node(r, &r->dob, "grad.residual_attn.dy", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dob_bf16, "grad.residual_attn.dy.bf16", H3S_BF16, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dao, "grad.o_proj.dx", H3S_F32, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dwo, "grad.o_proj.dw", WGT, H, QW, 0));
    GBLOCK_TRY(gblock_node(r, &r->dqr, "grad.attention.dq", H3S_F32, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dkr, "grad.attention.dk", H3S_F32, M, QW, 1));
    if (!r->lean) GBLOCK_TRY(gblock_node(r, &r->dv, "grad.attention.dv", H3S_F32, M, QW, 1));
    /* the model's: dv rounded in attention's backward pass, the value projection's operand */
    GBLOCK_TRY(gblock_node(r, &r->dv_bf16, "grad.attention.dv.bf16", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dqn, "grad.rope_q", H3S_F32, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dkn, "grad.rope_k", H3S_F32, M, QW, 1));
    if (!r->lean) {
        GBLOCK_TRY(gblock_node(r, &r->dq, "grad.q_norm.dx", H3S_F32, M, QW, 1));
        GBLOCK_TRY(gblock_node(r, &r->dk, "grad.k_norm.dx", H3S_F32, M, QW, 1));
    }
    /* the model's: dq, dk rounded in the per-head norms' backward pass, the q and k projections' operands */
    GBLOCK_TRY(gblock_node(r, &r->dq_bf16, "grad.q_norm.dx.bf16", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dk_bf16, "grad.k_norm.dx.bf16", H3S_BF16, M, QW, 1));
    GBLOCK_TRY(gblock_node(r, &r->dqnw, "grad.q_norm.dw", H3S_F32, g->D, 0, 0));
    GBLOCK_TRY(gblock_node(r, &r->dknw, "grad.k_norm.dw", H3S_F32, g->D, 0, 0));
    GBLOCK_TRY(gblock_node(r, &r->dn1q, "grad.q_proj.dx", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dn1k, "grad.k_proj.dx", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dn1v, "grad.v_proj.dx", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dwq, "grad.q_proj.dw", WGT, QW, H, 0));
    GBLOCK_TRY(gblock_node(r, &r->dwk, "grad.k_proj.dw", WGT, QW, H, 0));
    GBLOCK_TRY(gblock_node(r, &r->dwv, "grad.v_proj.dw", WGT, QW, H, 0));
    GBLOCK_TRY(gblock_node(r, &r->dn1, "grad.norm1.dy", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dnorm1, "grad.norm1.dw", H3S_F32, H, 0, 0));
    GBLOCK_TRY(gblock_node(r, &r->dx, "grad.x", H3S_F32, M, H, 1));
    GBLOCK_TRY(gblock_node(r, &r->dtemb, "grad.temb", H3S_F32, 1, E, 0));
    GBLOCK_TRY(gblock_node(r, &r->dw_ada, "grad.adaln_projection.dw", WGT, 18 * H, E, 0));
    GBLOCK_TRY(gblock_node(r, &r->db_ada, "grad.adaln_projection.db", H3S_F32, 18 * H, 0, 0));
    return H3S_OK;
}

/* Allocate every node of a batch of B items, fill the inputs and compute the rotary table. */
/* gblock_setup with the seven linear weights' gradients (q, k, v, o, gate_up, down, the AdaLN projection) in BF16
 * (wgrad_bf16 = 1: what a torch user's .grad holds, the F32 gradient rounded once; the weight-gradient GEMM rounds as
 * it stores) or F32 (0). */
static inline h3s_status gblock_setup_wgrad(const gblock_geom *g, int64_t B, int wgrad_bf16, gblock_run *r) {
    memset(r, 0, sizeof *r);
    r->wgrad_bf16 = wgrad_bf16 ? 1 : 0;
    h3s_status st = gblock_setup_(g, B, r);
    if (st != H3S_OK) gblock_free(r);
    return st;
}

static inline h3s_status gblock_setup(const gblock_geom *g, int64_t B, gblock_run *r) {
    return gblock_setup_wgrad(g, B, 0, r);
}

/* 1 when every linear that reads one of df, du, dout_o, dq, dk, dv computes from its BF16 copy alone (BF16 gradient
 * operands, shapes the tensor-core kernels take): the condition for gblock_setup_lean, as h3s_block_lean_grads is
 * the model's. */
static inline int gblock_lean_possible(const gblock_geom *g) {
    const int64_t H = g->H, QW = g->heads * g->D, FF = g->ffn;
    return h3s_cuda_linear_bf16_dy_only(H, FF) && h3s_cuda_linear_bf16_dy_only(2 * FF, H) &&
           h3s_cuda_linear_bf16_dy_only(H, QW) && h3s_cuda_linear_bf16_dy_only(QW, H);
}

/* gblock_setup_wgrad with df, du, dout_o, dq, dk, dv written only as their BF16 copies, as the model runs them without
 * a node hook (refused where gblock_lean_possible is 0). */
static inline h3s_status gblock_setup_lean(const gblock_geom *g, int64_t B, int wgrad_bf16, gblock_run *r) {
    if (!gblock_lean_possible(g))
        return h3s_fail(H3S_ERR_UNSUPPORTED, "gblock_setup_lean: a linear of this block reads F32 dy (split gradient "
                                             "operands, or K or N not a multiple of 8)");
    memset(r, 0, sizeof *r);
    r->wgrad_bf16 = wgrad_bf16 ? 1 : 0;
    r->lean = 1;
    h3s_status st = gblock_setup_(g, B, r);
    if (st != H3S_OK) gblock_free(r);
    return st;
}

/* The label r.after gets for a node of the shared block (model/block.h): the forward's names as they are; in the
 * backward the node whose backward ran, grad_add.<where> for the sums, NULL for the second and third names of the
 * one attention operator. */
static inline const char *gblock_label(const char *name) {
    static const char *const map[][2] = {
        {"residual_mlp.grad", "residual_mlp"},
        {"ffn_down.grad", "ffn_down"},
        {"swiglu.grad", "swiglu"},
        {"ffn_gate_up.grad", "ffn_gate_up"},
        {"norm2.grad", "norm2"},
        {"residual_attn.grad", "residual_attn"},
        {"o_proj.grad", "o_proj"},
        {"attention.grad_q", "attention"},
        {"attention.grad_k", NULL},
        {"attention.grad_v", NULL},
        {"rope_q.grad", "rope_q"},
        {"rope_k.grad", "rope_k"},
        {"q_norm.grad", "q_norm"},
        {"k_norm.grad", "k_norm"},
        {"q_proj.grad", "q_proj"},
        {"k_proj.grad", "k_proj"},
        {"v_proj.grad", "v_proj"},
        {H3S_BLOCK_STEP_NORM1_QKV, "grad_add.norm1"},
        {"norm1.grad", "norm1"},
        {"adaln_projection.grad", "adaln_projection"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], name)) return map[i][1];
    return name;
}

static inline h3s_status gblock_node_cb(void *ctx, const char *name, h3s_tensor *t) {
    (void)t;
    gblock_run *r = ctx;
    const char *label = gblock_label(name);
    if (label) r->after(r->ctx, label);
    return H3S_OK;
}

static inline h3s_block_weights gblock_weights(const gblock_params *p) {
    return (h3s_block_weights){.adaln_w = &p->w_ada,
                               .adaln_b = &p->b_ada,
                               .norm1 = &p->norm1_w,
                               .norm2 = &p->norm2_w,
                               .to_q = &p->wq,
                               .to_k = &p->wk,
                               .to_v = &p->wv,
                               .norm_q = &p->qn_w,
                               .norm_k = &p->kn_w,
                               .to_out = &p->wo,
                               .ff_in = &p->w_up,
                               .ff_out = &p->w_down};
}

/* eps 1e-5 for every norm, no attention mask (every row of an item attends every key of the item). */
static inline h3s_block_ctx gblock_ctx(const gblock_geom *g, gblock_run *r) {
    return (h3s_block_ctx){.refiner = 0,
                           .B = r->B,
                           .heads = g->heads,
                           .norm_eps = 1e-5,
                           .qk_norm_eps = 1e-5,
                           .temb = r->temb,
                           .adaln_rows = &r->idx,
                           .cos = r->cosT,
                           .sin = r->sinT,
                           .mask = NULL,
                           .node = r->after ? gblock_node_cb : NULL,
                           .node_ctx = r};
}

static inline h3s_block_fwd gblock_fwd(const gblock_run *r) {
    return (h3s_block_fwd){.x = r->x,
                           .a_silu = r->a,
                           .table = r->tab,
                           .n1 = r->n1,
                           .q = r->q,
                           .k = r->k,
                           .v = r->v,
                           .qn = r->qn,
                           .kn = r->kn,
                           .qr = r->qr,
                           .kr = r->kr,
                           .att = r->ao,
                           .stats = r->stats,
                           .o = r->o,
                           .x1 = r->x2,
                           .n2 = r->n2,
                           .u = r->u,
                           .h = r->hs,
                           .f = r->f,
                           .x2 = r->x3};
}

/* The 17 forward nodes (queued; call h3s_cuda_sync to wait). */
static inline h3s_status gblock_forward(const gblock_geom *g, const gblock_params *p, gblock_run *r) {
    const h3s_block_weights w = gblock_weights(p);
    const h3s_block_ctx c = gblock_ctx(g, r);
    const h3s_block_fwd f = gblock_fwd(r);
    return h3s_block_forward(&w, &c, &f);
}

/* The backward of the 17 nodes from input.dout (queued; needs the forward's nodes). Every
 * gradient is overwritten, so the backward can be repeated.  q_proj's input gradient has a node of its own
 * (grad.q_proj.dx), summed into grad.norm1.dy. */
static inline h3s_status gblock_backward(const gblock_geom *g, const gblock_params *p, gblock_run *r) {
    const h3s_block_weights w = gblock_weights(p);
    const h3s_block_ctx c = gblock_ctx(g, r);
    const h3s_block_fwd f = gblock_fwd(r);
    const h3s_block_bwd b = {.dout = r->dout,
                             .dtable = r->dtab,
                             .dtemb = r->dtemb,
                             .dx1a = r->dx2a,
                             .df = r->df,
                             .df_bf16 = r->df_bf16,
                             .dh = r->dhs,
                             .du = r->du,
                             .du_bf16 = r->du_bf16,
                             .dn2 = r->dn2,
                             .dx1 = r->dx2,
                             .dxa = r->dxa,
                             .dout_o = r->dob,
                             .dout_o_bf16 = r->dob_bf16,
                             .datt = r->dao,
                             .dqa = r->dqr,
                             .dka = r->dkr,
                             .dv = r->dv,
                             .dv_bf16 = r->dv_bf16,
                             .dqn = r->dqn,
                             .dkn = r->dkn,
                             .dq = r->dq,
                             .dk = r->dk,
                             .dq_bf16 = r->dq_bf16,
                             .dk_bf16 = r->dk_bf16,
                             .dn1q = r->dn1q,
                             .dn1k = r->dn1k,
                             .dn1v = r->dn1v,
                             .dn1 = r->dn1,
                             .dx = r->dx};
    const h3s_block_grads pg = {.adaln_w = r->dw_ada,
                                .adaln_b = r->db_ada,
                                .norm1 = r->dnorm1,
                                .norm2 = r->dnorm2,
                                .to_q = r->dwq,
                                .to_k = r->dwk,
                                .to_v = r->dwv,
                                .norm_q = r->dqnw,
                                .norm_k = r->dknw,
                                .to_out = r->dwo,
                                .ff_in = r->dw_up,
                                .ff_out = r->dw_down};
    return h3s_block_backward(&w, &c, &f, &b, &pg);
}

#endif

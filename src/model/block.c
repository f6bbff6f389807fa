/* The library's transformer block (block.h): the one operator sequence of its forward and backward. */
#include "model/block.h"

#include <stddef.h>

#include "core/core.h"

/* The [T, 18H] AdaLN table (or its gradient) seen as the [T * 3, 6H] table the modulated norms and the gated
 * residuals index (row timestep * 3 + tag, chunk c = columns [c * H, (c + 1) * H)): same bytes, same device. */
static h3s_tensor table_view(const h3s_tensor *t) {
    int64_t s[2] = {t->shape[0] * 3, t->shape[1] / 3};
    h3s_tensor v = h3s_tensor_view(t->data, t->dtype, 2, s);
    v.device = t->device;
    return v;
}

/* Attention's softmax statistics ([M, heads * 2] or [M, heads, 2]) as the [M, heads, 2] tensor it takes. */
h3s_tensor h3s_block_stats_view(const h3s_tensor *stats, int64_t heads) {
    h3s_tensor v = *stats;
    v.ndim = 3;
    v.shape[1] = heads;
    v.shape[2] = 2;
    return v;
}

static h3s_status node(const h3s_block_ctx *c, const char *name, h3s_tensor *t) {
    return c->node ? c->node(c->node_ctx, name, t) : H3S_OK;
}

/* Run one operator, then the node callback (t NULL: a step without an evidence node). */
#define BLOCK_OP(name, t, expr)                                                                                        \
    do {                                                                                                               \
        H3S_TRY(expr);                                                                                                 \
        H3S_TRY(node(c, (name), (t)));                                                                                 \
    } while (0)

h3s_status h3s_block_forward(const h3s_block_weights *w, const h3s_block_ctx *c, const h3s_block_fwd *f) {
    const int refiner = c->refiner;
    const int64_t heads = c->heads;
    h3s_tensor table6;
    h3s_modulation mod1 = {0}, mod2 = {0};
    if (!refiner) {
        BLOCK_OP("adaln_projection", f->table,
                 h3s_adaln_projection_forward(c->temb, w->adaln_w, w->adaln_b, f->a_silu, f->table));
        table6 = table_view(f->table);
        mod1 = (h3s_modulation){&table6, c->adaln_rows, 0, 1};
        mod2 = (h3s_modulation){&table6, c->adaln_rows, 3, 4};
    }
    const h3s_tensor *tab = refiner ? NULL : &table6, *idx = refiner ? NULL : c->adaln_rows;
    BLOCK_OP("norm1", f->n1, h3s_rmsnorm_forward(f->x, w->norm1, refiner ? NULL : &mod1, c->norm_eps, f->n1));
    BLOCK_OP("q_proj", f->q, h3s_linear_forward(f->n1, w->to_q, NULL, f->q));
    BLOCK_OP("k_proj", f->k, h3s_linear_forward(f->n1, w->to_k, NULL, f->k));
    BLOCK_OP("v_proj", f->v, h3s_linear_forward(f->n1, w->to_v, NULL, f->v));
    BLOCK_OP("q_norm", f->qn, h3s_head_rmsnorm_forward(f->q, heads, w->norm_q, c->qk_norm_eps, f->qn));
    BLOCK_OP("k_norm", f->kn, h3s_head_rmsnorm_forward(f->k, heads, w->norm_k, c->qk_norm_eps, f->kn));
    const h3s_tensor *qa = f->qn, *ka = f->kn;
    if (!refiner) {
        BLOCK_OP("rope_q", f->qr, h3s_rope_forward(f->qn, heads, c->cos, c->sin, f->qr));
        BLOCK_OP("rope_k", f->kr, h3s_rope_forward(f->kn, heads, c->cos, c->sin, f->kr));
        qa = f->qr;
        ka = f->kr;
    }
    h3s_tensor stats3 = h3s_block_stats_view(f->stats, heads);
    BLOCK_OP("attention", f->att, h3s_attention_forward(qa, ka, f->v, c->B, heads, c->mask, f->att, &stats3));
    BLOCK_OP("o_proj", f->o, h3s_linear_forward(f->att, w->to_out, NULL, f->o));
    BLOCK_OP("residual_attn", f->x1, h3s_residual_forward(f->x, f->o, tab, idx, 2, f->x1));
    BLOCK_OP("norm2", f->n2, h3s_rmsnorm_forward(f->x1, w->norm2, refiner ? NULL : &mod2, c->norm_eps, f->n2));
    BLOCK_OP("ffn_gate_up", f->u, h3s_linear_forward(f->n2, w->ff_in, NULL, f->u));
    BLOCK_OP("swiglu", f->h, h3s_swiglu_forward(f->u, f->h));
    BLOCK_OP("ffn_down", f->f, h3s_linear_forward(f->h, w->ff_out, NULL, f->f));
    BLOCK_OP("residual_mlp", f->x2, h3s_residual_forward(f->x1, f->f, tab, idx, 5, f->x2));
    return H3S_OK;
}

int h3s_block_lean_grads(const h3s_block_weights *w, const h3s_block_fwd *f) {
    return (h3s_linear_backward_bf16_dy_only(f->h, w->ff_out) ? H3S_BLOCK_LEAN_DF : 0) |
           (h3s_linear_backward_bf16_dy_only(f->n2, w->ff_in) ? H3S_BLOCK_LEAN_DU : 0) |
           (h3s_linear_backward_bf16_dy_only(f->att, w->to_out) ? H3S_BLOCK_LEAN_DOUT_O : 0) |
           (h3s_linear_backward_bf16_dy_only(f->n1, w->to_q) ? H3S_BLOCK_LEAN_DQ : 0) |
           (h3s_linear_backward_bf16_dy_only(f->n1, w->to_k) ? H3S_BLOCK_LEAN_DK : 0) |
           (h3s_linear_backward_bf16_dy_only(f->n1, w->to_v) ? H3S_BLOCK_LEAN_DV : 0);
}

h3s_status h3s_block_backward(const h3s_block_weights *w, const h3s_block_ctx *c, const h3s_block_fwd *f,
                              const h3s_block_bwd *b, const h3s_block_grads *g) {
    static const h3s_block_grads none = {0};
    if (!g) g = &none;
    const int refiner = c->refiner;
    const int64_t heads = c->heads;
    h3s_tensor table6, dtable6;
    h3s_modulation mod1 = {0}, mod2 = {0};
    if (!refiner) {
        table6 = table_view(f->table);
        mod1 = (h3s_modulation){&table6, c->adaln_rows, 0, 1};
        mod2 = (h3s_modulation){&table6, c->adaln_rows, 3, 4};
        dtable6 = table_view(b->dtable);
    }
    const h3s_tensor *tab = refiner ? NULL : &table6, *idx = refiner ? NULL : c->adaln_rows;
    h3s_tensor *dtab = refiner ? NULL : &dtable6;

    BLOCK_OP("residual_mlp.grad", b->df,
             h3s_residual_backward_rounded(f->f, tab, idx, 5, b->dout, b->dx1a, b->df, b->df_bf16, dtab));
    BLOCK_OP("ffn_down.grad", b->dh,
             h3s_linear_backward_rounded(f->h, w->ff_out, b->df, b->df_bf16, b->dh, g->ff_out, NULL));
    BLOCK_OP("swiglu.grad", b->du, h3s_swiglu_backward_rounded(f->u, b->dh, b->du, b->du_bf16));
    BLOCK_OP("ffn_gate_up.grad", b->dn2,
             h3s_linear_backward_rounded(f->n2, w->ff_in, b->du, b->du_bf16, b->dn2, g->ff_in, NULL));
    /* dx1 = dx1a + norm2's dx, summed as the norm writes it */
    BLOCK_OP("norm2.grad", b->dx1,
             h3s_rmsnorm_backward_add(f->x1, w->norm2, refiner ? NULL : &mod2, c->norm_eps, b->dn2, b->dx1a, b->dx1,
                                      g->norm2, dtab));
    BLOCK_OP("residual_attn.grad", b->dout_o,
             h3s_residual_backward_rounded(f->o, tab, idx, 2, b->dx1, b->dxa, b->dout_o, b->dout_o_bf16, dtab));
    BLOCK_OP("o_proj.grad", b->datt,
             h3s_linear_backward_rounded(f->att, w->to_out, b->dout_o, b->dout_o_bf16, b->datt, g->to_out, NULL));
    h3s_tensor stats3 = h3s_block_stats_view(f->stats, heads);
    const h3s_tensor *qa = refiner ? f->qn : f->qr, *ka = refiner ? f->kn : f->kr;
    H3S_TRY(h3s_attention_backward_rounded(qa, ka, f->v, f->att, &stats3, c->B, heads, c->mask, b->datt, b->dqa, b->dka,
                                           b->dv, b->dv_bf16));
    H3S_TRY(node(c, "attention.grad_q", b->dqa));
    H3S_TRY(node(c, "attention.grad_k", b->dka));
    H3S_TRY(node(c, "attention.grad_v", b->dv));
    h3s_tensor *dqn = b->dqa, *dkn = b->dka;
    if (!refiner) {
        BLOCK_OP("rope_q.grad", b->dqn, h3s_rope_backward(heads, c->cos, c->sin, b->dqa, b->dqn));
        BLOCK_OP("rope_k.grad", b->dkn, h3s_rope_backward(heads, c->cos, c->sin, b->dka, b->dkn));
        dqn = b->dqn;
        dkn = b->dkn;
    }
    BLOCK_OP(
        "q_norm.grad", b->dq,
        h3s_head_rmsnorm_backward_rounded(f->q, heads, w->norm_q, c->qk_norm_eps, dqn, b->dq, b->dq_bf16, g->norm_q));
    BLOCK_OP(
        "k_norm.grad", b->dk,
        h3s_head_rmsnorm_backward_rounded(f->k, heads, w->norm_k, c->qk_norm_eps, dkn, b->dk, b->dk_bf16, g->norm_k));
    BLOCK_OP("q_proj.grad", b->dn1q,
             h3s_linear_backward_rounded(f->n1, w->to_q, b->dq, b->dq_bf16, b->dn1q, g->to_q, NULL));
    BLOCK_OP("k_proj.grad", b->dn1k,
             h3s_linear_backward_rounded(f->n1, w->to_k, b->dk, b->dk_bf16, b->dn1k, g->to_k, NULL));
    BLOCK_OP("v_proj.grad", b->dn1v,
             h3s_linear_backward_rounded(f->n1, w->to_v, b->dv, b->dv_bf16, b->dn1v, g->to_v, NULL));
    /* fixed order: (q + k) + v, one pass */
    BLOCK_OP(H3S_BLOCK_STEP_NORM1_QKV, NULL, h3s_grad_add3(b->dn1q, b->dn1k, b->dn1v, b->dn1));
    /* dx = dxa + norm1's dx */
    BLOCK_OP("norm1.grad", b->dx,
             h3s_rmsnorm_backward_add(f->x, w->norm1, refiner ? NULL : &mod1, c->norm_eps, b->dn1, b->dxa, b->dx,
                                      g->norm1, dtab));
    if (!refiner)
        BLOCK_OP(
            "adaln_projection.grad", b->dtemb,
            h3s_adaln_projection_backward(c->temb, f->a_silu, w->adaln_w, b->dtable, b->dtemb, g->adaln_w, g->adaln_b));
    return H3S_OK;
}

/* The library's transformer block: one composition of its 17 nodes (docs/strict.md section 4), forward and
 * backward, through the public operators.  Used by the model's single-device path (src/model/model.c: block and
 * token-refiner blocks, on the CPU and the CUDA backend), by tests/gpu/gpu_block.h (test_gpu_block) and by
 * bench/bench_gpu_block.c, so the graph the benchmark times and the test hashes is the model's.
 *
 * Typed parameters, no name lookups: the caller fills the structs once (weights from the model's resolved block
 * parameters, or its own tensors) and allocates every node tensor; these functions only queue the operators in a
 * fixed order and call `node` after each.  Nothing here allocates, formats or synchronises.
 *
 * The refiner variant (h3s_block_ctx.refiner) has no AdaLN projection, no modulation, no gates and no rope: its
 * norms are plain (weight only), its residuals ungated, its attention reads q_norm and k_norm. */
#ifndef H3S_MODEL_BLOCK_H
#define H3S_MODEL_BLOCK_H

#include <stdint.h>

#include "h3s.h"
#include "ops/ops.h"

/* Called after every operator with the node's name (without a "block.{i}." prefix) and the tensor it wrote.
 * The forward's names are the node names (`adaln_projection`, `norm1`, `q_proj`, ..., `residual_mlp`); the
 * backward's are the gradient names the model emits (`<node>.grad`, `attention.grad_q/_k/_v`, three calls after
 * the one attention operator).  An operator whose output is not a node of the model's evidence (an intermediate
 * sum the next operator consumes) gets t == NULL and one of the names of H3S_BLOCK_STEP_*, so a timer sees every
 * operator and an evidence writer skips them.  A status other than H3S_OK stops the block and is returned. */
typedef h3s_status (*h3s_block_node_fn)(void *ctx, const char *name, h3s_tensor *t);

/* The backward's step without an evidence node (t == NULL). */
#define H3S_BLOCK_STEP_NORM1_QKV "norm1.grad_qkv" /* (q_proj's dx + k_proj's dx) + v_proj's dx */

/* The block's 12 parameters ([out, in] as in the checkpoint).  adaln_w / adaln_b unused in a refiner block. */
typedef struct h3s_block_weights {
    const h3s_tensor *adaln_w, *adaln_b;  /* [18H, E], [18H] */
    const h3s_tensor *norm1, *norm2;      /* [H] */
    const h3s_tensor *to_q, *to_k, *to_v; /* [heads*D, H] */
    const h3s_tensor *norm_q, *norm_k;    /* [D] */
    const h3s_tensor *to_out;             /* [H, heads*D] */
    const h3s_tensor *ff_in, *ff_out;     /* [2F, H] (value and gate rows), [H, F] */
} h3s_block_weights;

/* Their gradients (same fields); NULL: not computed.  Overwritten, never accumulated. */
typedef struct h3s_block_grads {
    h3s_tensor *adaln_w, *adaln_b, *norm1, *norm2, *to_q, *to_k, *to_v, *norm_q, *norm_k, *to_out, *ff_in, *ff_out;
} h3s_block_grads;

/* What the block reads besides its weights and its input. */
typedef struct h3s_block_ctx {
    int refiner;                  /* token refiner block: no AdaLN, no rope */
    int64_t B, heads;             /* items of the packed rows (attention's batch), attention heads */
    double norm_eps, qk_norm_eps; /* norm1 / norm2, q_norm / k_norm */
    const h3s_tensor *temb;       /* [T, E] time embedding (AdaLN projection input) */
    const h3s_tensor *adaln_rows; /* [M] I64: the AdaLN table row (timestep * 3 + tag) of each packed row */
    const h3s_tensor *cos, *sin;  /* rope tables [S, 6F] */
    const h3s_attn_mask *mask;    /* passed to attention as is (NULL: none) */
    h3s_block_node_fn node;       /* NULL: none */
    void *node_ctx;
} h3s_block_ctx;

/* The forward's tensors, [M, W] packed rows unless noted: x the input, every other one an output the caller
 * allocated.  a_silu, table unused in a refiner block ([T, E], [T, 18H]); qr, kr unused there too.  stats is
 * [M, heads * 2] or [M, heads, 2] F32 (attention's softmax statistics). */
typedef struct h3s_block_fwd {
    h3s_tensor *x, *a_silu, *table, *n1, *q, *k, *v, *qn, *kn, *qr, *kr, *att, *stats, *o, *x1, *n2, *u, *h, *f, *x2;
} h3s_block_fwd;

/* The backward's tensors: dout (the gradient of x2) the input, the rest outputs the caller allocated.
 *   dtable [T, 18H] the AdaLN table's gradient (chunks written by the residuals and norms; zero it) and dtemb
 *   [T, E] (unused in a refiner block); dx1a, df the residual_mlp's (into x1, into ffn_down); dh, du, dn2; dx1 =
 *   dx1a + norm2's dx (the norm's backward adds it as it writes, h3s_rmsnorm_backward_add); dxa, dout_o the
 *   residual_attn's; datt; dqa, dka, dv attention's; dqn, dkn the rope's (unused in a refiner block, where q_norm's
 *   backward reads dqa, dka); dq, dk; dn1q, dn1k, dn1v the three projections' dx and dn1 = (dn1q + dn1k) + dn1v (one
 *   pass; dn1q may be dn1: the sum runs in place); dx = dxa + norm1's dx the block input's gradient. */
typedef struct h3s_block_bwd {
    const h3s_tensor *dout;
    h3s_tensor *dtable, *dtemb;
    h3s_tensor *dx1a, *df, *dh, *du, *dn2, *dx1, *dxa, *dout_o, *datt, *dqa, *dka, *dv, *dqn, *dkn, *dq, *dk;
    h3s_tensor *dn1q, *dn1k, *dn1v, *dn1, *dx;
    h3s_tensor *du_bf16; /* NULL, or BF16 [M, 2F]: du rounded as the SwiGLU backward writes it, read by the gate/up
                          * linear's backward instead of its own rounding pass (h3s_linear_backward_rounded) */
    h3s_tensor *dq_bf16, *dk_bf16;     /* NULL, or BF16 [M, heads D]: dq, dk rounded as the per-head norms' backward
                                        * writes them, for the q and k projections' backward */
    h3s_tensor *df_bf16, *dout_o_bf16; /* NULL, or BF16 [M, H]: df, dout_o rounded as the residuals' backward writes
                                        * them, for the ffn_down and o_proj backward */
    h3s_tensor *dv_bf16; /* NULL, or BF16 [M, heads D]: dv rounded as attention's backward writes it, for v_proj's */
    /* With its BF16 copy given, each of df, du, dout_o, dq, dk, dv may be NULL where the linear that reads it computes
     * from the copy alone (h3s_linear_backward_bf16_dy_only): its producer then writes only the copy, the same bits,
     * and the step has no evidence node (the node callback gets NULL).  h3s_block_lean_grads says which. */
} h3s_block_bwd;

/* Which F32 gradients of the backward may be NULL (h3s_block_bwd): the flags H3S_BLOCK_LEAN_DF, _DU, _DOUT_O, _DQ,
 * _DK, _DV of the linears (w, over the forward's inputs f) that compute from the BF16 copy alone. */
enum {
    H3S_BLOCK_LEAN_DF = 1,
    H3S_BLOCK_LEAN_DU = 2,
    H3S_BLOCK_LEAN_DOUT_O = 4,
    H3S_BLOCK_LEAN_DQ = 8,
    H3S_BLOCK_LEAN_DK = 16,
    H3S_BLOCK_LEAN_DV = 32
};
int h3s_block_lean_grads(const h3s_block_weights *w, const h3s_block_fwd *f);

/* Queue the forward of one block (the operators write every output of f). */
/* Attention's softmax statistics buffer ([M, heads * 2] or [M, heads, 2]) as the [M, heads, 2] view it takes. */
h3s_tensor h3s_block_stats_view(const h3s_tensor *stats, int64_t heads);

h3s_status h3s_block_forward(const h3s_block_weights *w, const h3s_block_ctx *c, const h3s_block_fwd *f);

/* Queue the backward of one block from b->dout, reading the forward's tensors f; parameter gradients into g (NULL
 * fields, or g NULL: none). */
h3s_status h3s_block_backward(const h3s_block_weights *w, const h3s_block_ctx *c, const h3s_block_fwd *f,
                              const h3s_block_bwd *b, const h3s_block_grads *g);

#endif

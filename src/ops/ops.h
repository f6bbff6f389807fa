/* Operators: forward and backward of every MiniMax-H3 node.
 *
 * One entry point per operator.  Each validates every argument (dtype, rank, shape, index
 * range) before writing anything, then dispatches on the tensors it was given:
 *   - strict CPU:  activations BF16 (or F32 for the f32 modules), gradients F32;
 *                  FP32 arithmetic, fixed reduction orders, one final rounding.
 *   - golden CPU:  every tensor F64; FP64 arithmetic; the reference the strict results are
 *                  measured against.  Same validation, same semantics, no rounding.
 *   - CUDA:        tensors with device == 1 (src/cuda), strict like the CPU backend.
 * Mixing the golden dtype with strict dtypes in one call is an H3S_ERR_DTYPE error.
 *
 * Conventions.  Activations are 2-D [M, W] row-major: M = B * S packed rows.  Weights are
 * [out, in] as in the checkpoint.  Gradient outputs are overwritten (never accumulated);
 * a NULL gradient output is not computed.  Every reduction across rows uses the canonical
 * tile fold of ops/fold.h.  No operator's result for a row depends on M, on the other rows
 * (except attention, which reads its own document) or on the thread count. */
#ifndef H3S_OPS_H
#define H3S_OPS_H

#include "h3s.h"
#include "h3s_ops.h" /* the forward operators and their argument structs (public) */

/* ---------------------------------------------------------------- linear -------------
 * y[m, n] = sum_k x[m, k] * w[n, k] (+ b[n]).
 * strict BF16: x, w, b BF16 -> y BF16.   strict F32: all F32 (never TF32-like shortcuts).
 * golden: all F64.  K order: ascending k, one FP32 accumulator per output, bias added after
 * the sum, one rounding. */
/* dx = dy @ w [M, K]; dw = dy^T @ x [N, K] (tile fold over M); db = column sums of dy.
 * dy, dx, dw, db: F32 (strict) or F64 (golden).  On the CUDA backend the strict BF16 variant also takes a BF16 dw:
 * the F32 fold rounded once to nearest even as it is stored (bit for bit the F32 dw rounded afterwards). */
h3s_status h3s_linear_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy, h3s_tensor *dx,
                               h3s_tensor *dw, h3s_tensor *db);
/* h3s_linear_backward given also dy_bf16 = dy rounded to BF16 (round to nearest even), as the producer of dy wrote it
 * in the same pass (h3s_swiglu_backward_rounded): the CUDA backend's BF16 gradient operands are then read from it
 * instead of a rounding pass over dy, the same bits when dy_bf16 is dy's rounding.  BF16 variant only; the host and
 * the split operands compute from dy.  dy may be NULL (dy_bf16 alone) where h3s_linear_backward_bf16_dy_only says the
 * backward reads nothing else, and without db; elsewhere that is refused. */
h3s_status h3s_linear_backward_rounded(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                       const h3s_tensor *dy_bf16, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *db);
/* 1 when h3s_linear_backward_rounded(x, w, NULL, dy_bf16, dx, dw, NULL) computes dx and dw from dy_bf16 alone: x and w
 * BF16 in device memory, BF16 gradient operands (h3s_set_grad_operands), K and N multiples of 8.  dy's producer may
 * then write only the BF16 copy (h3s_swiglu_backward_rounded, h3s_residual_backward_rounded and
 * h3s_head_rmsnorm_backward_rounded take a NULL F32 output on the CUDA backend). */
int h3s_linear_backward_bf16_dy_only(const h3s_tensor *x, const h3s_tensor *w);

/* ---------------------------------------------------------------- rmsnorm ------------
 * y = x * rsqrt(mean_k(x^2) + eps) [* w] [* (1 + scale[index[m]]) + shift[index[m]]].
 * Modulation rows come from `table` [R, C*H] (chunk c = columns [c*H, (c+1)*H)) through a
 * per-row `index` [M] (I64, each in [0, R)).  y: BF16 or F32 (strict), F64 (golden). */

/* dx [M,H]; dw [H] (tile fold); dtable [R, C*H]: only the shift and scale chunks are
 * written (tile fold per table row, rows no index names get 0); other chunks untouched.  dx may be dy itself; no
 * output otherwise overlaps an operand or another output (H3S_ERR_INVALID). */
h3s_status h3s_rmsnorm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *dtable);
/* h3s_rmsnorm_backward with dx = dx_add + the norm's dx (one addition per element, dx_add first: the bits of
 * h3s_grad_add(dx_add, dx, dx) after the plain backward); dx_add has dy's shape and dtype and may overlap neither
 * dx nor dy. */
h3s_status h3s_rmsnorm_backward_add(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                    const h3s_tensor *dy, const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw,
                                    h3s_tensor *dtable);

/* Per-head RMSNorm (q_norm / k_norm): x [M, heads*D], w [D]; normalised over each head's D
 * channels.  dw folds over token rows in tiles of 256 rows, inside a tile row-major
 * (ascending row, then ascending head). */
h3s_status h3s_head_rmsnorm_backward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                     const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw);
/* h3s_head_rmsnorm_backward that also writes dx_bf16 = dx rounded to BF16 (round to nearest even), for the
 * projection's h3s_linear_backward_rounded: strict variant, dx_bf16 may overlap no operand.  dx may be NULL on the CUDA
 * backend (the BF16 copy alone, the same bits); the host refuses that. */
h3s_status h3s_head_rmsnorm_backward_rounded(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                             const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dx_bf16, h3s_tensor *dw);

/* ---------------------------------------------------------------- rope ---------------
 * Table from position_ids [S, 3] (F64 or F32; cast to F32 first as the provider does):
 * inv_freq[j] = 1 / theta^(2j / (2F)), angles = (t*inv, h*inv, w*inv) repeated twice (6F),
 * cos/sin [S, 6F]: F32 (strict) or F64 (golden). */
/* Rotate-half rope on the first 6F channels of every head of x [M, heads*D] (M a multiple
 * of S; row m uses table row m % S); channels >= 6F pass through. */
h3s_status h3s_rope_backward(int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *dy,
                             h3s_tensor *dx);

/* ---------------------------------------------------------------- attention ----------
 * Non-causal scaled-dot-product attention, scale 1/sqrt(D), q/k/v/out [B*S, heads*D].
 * Query (b, s) attends key (b, j) iff doc[s] == doc[j] and key_valid[b, j] (either mask may
 * be NULL).  Keys are summed in ascending packed order; a query with no key gets 0.
 * stats [B*S, heads, 2] keeps (row max of the scaled scores, softmax denominator) for the
 * backward: F32 (strict) or F64 (golden).  Workspace is bounded by a fixed tile: no S x S
 * buffer is ever allocated. */

/* dq, dk, dv [B*S, heads*D] gradient dtype; no atomics: dq by query, dk/dv by key, each a
 * sum in ascending packed order. */
h3s_status h3s_attention_backward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, const h3s_tensor *out,
                                  const h3s_tensor *stats, int64_t batch, int64_t heads, const h3s_attn_mask *mask,
                                  const h3s_tensor *dout, h3s_tensor *dq, h3s_tensor *dk, h3s_tensor *dv);
/* h3s_attention_backward that also writes dv_bf16 = dv rounded to BF16 (round to nearest even), for the value
 * projection's h3s_linear_backward_rounded: strict variant, dv_bf16 may overlap no operand.  dv may be NULL on the
 * CUDA backend (the BF16 copy alone, the same bits); the host refuses that. */
h3s_status h3s_attention_backward_rounded(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                          const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t heads,
                                          const h3s_attn_mask *mask, const h3s_tensor *dout, h3s_tensor *dq,
                                          h3s_tensor *dk, h3s_tensor *dv, h3s_tensor *dv_bf16);

/* Sequence-parallel slices of the same computation (strict CPU only).  The slice is the packed rows
 * [row_lo, row_hi) of [batch * seq]; the key side holds the rows [kv_lo, kv_lo + k rows), which must cover every
 * item (seq rows) that a row of the slice belongs to.  Forward: q, out and stats hold the slice's rows.  Backward:
 * q, k, v, out, stats and dout hold the key-side rows; dq, dk and dv the slice's rows.  Every row gets exactly the
 * bits the whole-tensor call gives it (the same per-row chains; work units only start at the slice). */
h3s_status h3s_attention_forward_rows(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                      int64_t seq, int64_t heads, const h3s_attn_mask *mask, int64_t row_lo,
                                      int64_t row_hi, int64_t kv_lo, h3s_tensor *out, h3s_tensor *stats);
h3s_status h3s_attention_backward_rows(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                       const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t seq,
                                       int64_t heads, const h3s_attn_mask *mask, const h3s_tensor *dout, int64_t row_lo,
                                       int64_t row_hi, int64_t kv_lo, h3s_tensor *dq, h3s_tensor *dk, h3s_tensor *dv);

/* ---------------------------------------------------------------- residual -----------
 * out = r + gate[index[m]] * y  (gate = chunk `gate_chunk` of table [R, C*H]);
 * table == NULL: out = r + y.  r, y, out activation dtype. */
/* dr = dout; dy = dout * gate; dtable: only the gate chunk is written (tile fold). */
h3s_status h3s_residual_backward(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index, int gate_chunk,
                                 const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy, h3s_tensor *dtable);
/* h3s_residual_backward that also writes dy_bf16 = dy rounded to BF16 (round to nearest even), for the branch's
 * h3s_linear_backward_rounded: strict variant, dy_bf16 may overlap no operand.  dy may be NULL on the CUDA backend (the
 * BF16 copy alone, the same bits); the host refuses that. */
h3s_status h3s_residual_backward_rounded(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index,
                                         int gate_chunk, const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy,
                                         h3s_tensor *dy_bf16, h3s_tensor *dtable);

/* ---------------------------------------------------------------- swiglu -------------
 * u [M, 2F]: value = u[:, :F], gate = u[:, F:]; h = value * silu(gate) [M, F]. */
h3s_status h3s_swiglu_backward(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du);
/* h3s_swiglu_backward that also writes du_bf16 = du rounded to BF16 (round to nearest even, the rounding of the
 * linear backward's BF16 gradient operands), for h3s_linear_backward_rounded: strict variant.  du may be NULL on the
 * CUDA backend (the BF16 copy alone, the same bits); the host refuses that. */
h3s_status h3s_swiglu_backward_rounded(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du, h3s_tensor *du_bf16);

/* ---------------------------------------------------------------- adaln projection ---
 * silu(temb) in FP32, cast once to BF16 (golden: F64, no cast) -> a [T, E];
 * table = linear(a, w, b) [T, N] (N = 6*3*H for a block, 2*H for norm_out).
 * `a` is kept for the backward. */
/* dtemb [T, E] (through the cast straight, then silu'), dw, db. */
h3s_status h3s_adaln_projection_backward(const h3s_tensor *temb, const h3s_tensor *a, const h3s_tensor *w,
                                         const h3s_tensor *dtable, h3s_tensor *dtemb, h3s_tensor *dw, h3s_tensor *db);

/* ---------------------------------------------------------------- timestep -----------
 * Sinusoid: half = freq_dim/2, freq[k] = exp(-ln(10000) k / half), args = t * freq,
 * out [T, freq_dim] = [cos(args), sin(args)]. t [T] F32 (strict) / F64 (golden). */
h3s_status h3s_timestep_sinusoid_backward(const h3s_tensor *t, const h3s_tensor *dout, h3s_tensor *dt);
/* temb = linear_2(silu(linear_1(features))), all F32 (strict) / F64 (golden); `hidden`
 * [T, Eh] keeps linear_1's output for the backward. */
h3s_status h3s_timestep_mlp_backward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *w2,
                                     const h3s_tensor *hidden, const h3s_tensor *dtemb, h3s_tensor *dfeatures,
                                     h3s_tensor *dw1, h3s_tensor *db1, h3s_tensor *dw2, h3s_tensor *db2);

/* ---------------------------------------------------------------- final adaln out ----
 * shift, scale = halves of norm_out table [T, 2H] (from h3s_adaln_projection_forward);
 * rows by `index` = timestep_indices per packed row; y = rmsnorm(x) * w * (1 + scale) + shift,
 * y F32 (strict) / F64 (golden).  A thin wrapper over h3s_rmsnorm_forward with shift chunk 0,
 * scale chunk 1. */
/* The modulation the final norm applies (shift chunk 0, scale chunk 1 of a [T, 2H] table),
 * after checking that x, w, table and index are given and the table is 2H wide.  Shared by
 * the CPU entry points and their CUDA twins. */
h3s_status h3s_final_norm_modulation(const char *op, const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                     const h3s_tensor *index, h3s_modulation *mod);
h3s_status h3s_final_norm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                   const h3s_tensor *index, double eps, const h3s_tensor *dy, h3s_tensor *dx,
                                   h3s_tensor *dw, h3s_tensor *dtable);

/* ---------------------------------------------------------------- rows & grads -------
 * Batched row gather: dst[b*n + i, :] = src[b*Ss + index[i], :] for b < batch, i < n, with
 * Ss = src rows / batch; converted to dst's dtype (one rounding, e.g. F32 -> BF16). */
/* Batched row scatter: dst[b*Sd + index[i], :] = src[b*n + i, :]; other dst rows untouched;
 * duplicate indices are an error. */
/* out = a + b elementwise (gradient accumulation in a fixed order: a first). */
h3s_status h3s_grad_add(const h3s_tensor *a, const h3s_tensor *b, h3s_tensor *out);
/* out = (a + b) + c: the bits of two h3s_grad_add in that order, in one pass; out may alias any input. */
h3s_status h3s_grad_add3(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out);

/* ---------------------------------------------------------------- rope ---------------
 * Every position of a host F64/F32 [S, 3] tensor finite after the f32 cast and at most H3S_DET_TRIG_MAX in magnitude
 * (H3S_ERR_INVALID naming op and the entry): h3s_rope_table's check, also run by h3s_inputs_validate. */
h3s_status h3s_rope_check_positions(const char *op, const h3s_tensor *pos);
/* h3s_rope_table and h3s_timestep_sinusoid_forward for a caller that checked the positions or timesteps on the host
 * before uploading them (the model, through h3s_inputs_validate): every other check is made, but device values are
 * not copied back and checked a second time, so the host does not wait for the device.  Host values are checked. */
h3s_status h3s_rope_table_prechecked(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta,
                                     h3s_tensor *cos_out, h3s_tensor *sin_out);
h3s_status h3s_timestep_sinusoid_forward_prechecked(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out);

/* ---------------------------------------------------------------- transfer -----------
 * A host copy of a tensor (device or host) in a new allocation `host` (free with h3s_tensor_free): for operators
 * whose arguments must be checked value by value on the host before a device kernel reads them (positions,
 * timesteps).  Waits for the copy. */
h3s_status h3s_tensor_host_copy(const h3s_tensor *src, h3s_tensor *host);

#endif

/* h3strict public API: the forward operators of the MiniMax-H3 nodes, one call per node kind, so that a caller
 * can run a single strict node on inputs of its own (a per-node replay against another implementation runs each
 * strict node on that implementation's inputs: docs/api.md).
 *
 * The operators are the ones the model's passes call (docs/strict.md section 2 gives each node's precision).  Each
 * validates every argument (dtype, rank, shape, index range) before writing anything, then dispatches on the
 * tensors it was given:
 *   - strict: activations BF16 (F32 for the F32 modules), FP32 arithmetic in one fixed order, one final rounding;
 *   - golden: every float tensor F64, FP64 arithmetic (the reference the strict results are measured against);
 *   - CUDA: float tensors in device memory (device == 1, e.g. a CUDA tensor of another framework, after that
 *     framework's queued work is done); the call returns with the work queued: h3s_device_synchronize waits.
 * Mixing the golden dtype with strict dtypes in one call is an H3S_ERR_DTYPE error.  The caller allocates every
 * output (contiguous, the shape and dtype stated); outputs are overwritten.  A host output may overlap no input
 * and no other output (H3S_ERR_INVALID naming both: elements written while another thread still reads them would
 * make the result depend on the thread count), except where a function says an output may be an input itself (the
 * same memory, dtype and size: rope's y, the residual's out).  Activations are 2-D [M, W] row-major
 * (M = B * S packed rows); weights are [out, in] as in the checkpoint.  No operator's result for a row depends on
 * M, on other rows (except attention, which reads its own document) or on the thread count. */
#ifndef H3S_PUBLIC_OPS_H
#define H3S_PUBLIC_OPS_H

#include "h3s.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[m, n] = sum_k x[m, k] * w[n, k] (+ b[n]); K ascending, one FP32 accumulator per output, the bias added after
 * the sum, one rounding.  Strict BF16: x, w, b BF16 -> y BF16; strict F32: all F32 (never TF32); golden: F64. */
H3S_API h3s_status h3s_linear_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *y);

/* Modulation rows of an RMSNorm: `table` [R, C*H] (chunk c = columns [c*H, (c+1)*H)), row `index[m]` (I64, each
 * in [0, R)) serves packed row m. */
typedef struct h3s_modulation {
    const h3s_tensor *table; /* [R, C*H], activation dtype */
    const h3s_tensor *index; /* [M] I64 */
    int shift_chunk;
    int scale_chunk;
} h3s_modulation;

/* y = x * rsqrt(mean_k(x^2) + eps) [* w] [* (1 + scale[index[m]]) + shift[index[m]]]; x [M, H], w [H] or NULL,
 * mod NULL for a plain norm.  y BF16 or F32 (strict), F64 (golden). */
H3S_API h3s_status h3s_rmsnorm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                       h3s_tensor *y);
/* Per-head RMSNorm (q_norm, k_norm): x [M, heads*D], w [D]; normalised over each head's D channels. */
H3S_API h3s_status h3s_head_rmsnorm_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                            h3s_tensor *y);

/* Rotary table from position_ids [S, 3] (F64 or F32; cast to F32 first as the provider does):
 * inv_freq[j] = 1 / theta^(2j / (2F)), angles (t*inv, h*inv, w*inv) twice (6F), cos/sin [S, 6F]: F32 (strict)
 * or F64 (golden). */
H3S_API h3s_status h3s_rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta,
                                  h3s_tensor *cos_out, h3s_tensor *sin_out);
/* Rotate-half rope on the first 6F channels of every head of x [M, heads*D] (M a multiple of S; row m uses table
 * row m % S); channels from 6F on pass through.  y may be x itself (rotated in place, the same bits). */
H3S_API h3s_status h3s_rope_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *cos_t,
                                    const h3s_tensor *sin_t, h3s_tensor *y);

/* Which keys a query may attend (either may be NULL). */
typedef struct h3s_attn_mask {
    const h3s_tensor *doc;       /* [S] I64 document id per packed position, or NULL */
    const h3s_tensor *key_valid; /* [B, S] BOOL, 1 = key may be attended, or NULL */
} h3s_attn_mask;

/* Non-causal scaled-dot-product attention, scale 1/sqrt(D), q/k/v/out [B*S, heads*D]: query (b, s) attends key
 * (b, j) iff doc[s] == doc[j] and key_valid[b, j]; keys summed in ascending packed order; a query with no key gets
 * 0.  stats [B*S, heads, 2] receives (row max of the scaled scores, softmax denominator): F32 (strict), F64
 * (golden). */
H3S_API h3s_status h3s_attention_forward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                         int64_t heads, const h3s_attn_mask *mask, h3s_tensor *out, h3s_tensor *stats);

/* out = r + gate[index[m]] * y (gate = chunk gate_chunk of table [R, C*H]); table == NULL: out = r + y.  out may be
 * r or y itself (the residual stream updated in place, the same bits). */
H3S_API h3s_status h3s_residual_forward(const h3s_tensor *r, const h3s_tensor *y, const h3s_tensor *table,
                                        const h3s_tensor *index, int gate_chunk, h3s_tensor *out);

/* u [M, 2F]: value = u[:, :F], gate = u[:, F:]; h = value * silu(gate) [M, F]. */
H3S_API h3s_status h3s_swiglu_forward(const h3s_tensor *u, h3s_tensor *h);

/* silu(temb) in FP32, cast once to BF16 (golden: F64, no cast) -> a [T, E]; table = linear(a, w, b) [T, N]
 * (N = 6*3*H for a block, 2*H for norm_out).  Like every operator, a failure writes neither a nor table. */
H3S_API h3s_status h3s_adaln_projection_forward(const h3s_tensor *temb, const h3s_tensor *w, const h3s_tensor *b,
                                                h3s_tensor *a, h3s_tensor *table);

/* Sinusoid: half = freq_dim/2, freq[k] = exp(-ln(10000) k / half), args = t * freq, out [T, freq_dim] =
 * [cos(args), sin(args)]; t [T] F32 (strict) / F64 (golden). */
H3S_API h3s_status h3s_timestep_sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out);
/* temb = linear_2(silu(linear_1(features))), F32 (strict) / F64 (golden); hidden [T, Eh] receives linear_1's
 * output (a failure writes neither hidden nor temb). */
H3S_API h3s_status h3s_timestep_mlp_forward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                                            const h3s_tensor *w2, const h3s_tensor *b2, h3s_tensor *hidden,
                                            h3s_tensor *temb);

/* norm_out: shift, scale = halves of a [T, 2H] table (h3s_adaln_projection_forward of norm_out.linear); rows by
 * index = timestep_indices per packed row; y = rmsnorm(x) * w * (1 + scale) + shift, F32 (strict) / F64 (golden). */
H3S_API h3s_status h3s_final_norm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                          const h3s_tensor *index, double eps, h3s_tensor *y);

/* Batched row gather: dst[b*n + i, :] = src[b*Ss + index[i], :] (Ss = src rows / batch), converted to dst's dtype
 * with one rounding.  Scatter: dst[b*Sd + index[i], :] = src[b*n + i, :], other rows untouched, duplicate indices
 * an error (the pack node is three scatters into a zero buffer).  index: host I64 memory. */
H3S_API h3s_status h3s_rows_gather(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst);
H3S_API h3s_status h3s_rows_scatter(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst);

/* Copy between two tensors of the same dtype and element count, each in host or device memory; returns when the
 * bytes are in place (a device -> device copy is refused: H3S_ERR_UNSUPPORTED). */
H3S_API h3s_status h3s_tensor_copy(const h3s_tensor *src, h3s_tensor *dst);
/* Wait for the device work the library queued and report any error of it (H3S_ERR_DEVICE in a build without the
 * CUDA backend or on a machine without a usable GPU). */
H3S_API h3s_status h3s_device_synchronize(void);
/* The CUDA stream (a cudaStream_t) the library queues all its device work on, for a caller that orders its own
 * work after the library's without waiting on the host (an event recorded on it, or torch's Stream.wait_stream on
 * torch.cuda.ExternalStream of it); it lives as long as the process.  H3S_ERR_DEVICE in a build without the CUDA
 * backend or on a machine without a usable GPU (*stream is then NULL). */
H3S_API h3s_status h3s_device_stream(void **stream);

#ifdef __cplusplus
}
#endif
#endif

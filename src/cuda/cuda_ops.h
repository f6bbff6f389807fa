/* CUDA backend entry points (src/cuda).  Each mirrors the operator of the same name in
 * ops/ops.h, takes the same arguments with every float tensor in device memory
 * (device == 1), and is reached only through that operator, after its argument checks.
 * Index tensors (I64/BOOL) may be on the host or the device; kernels bounds-check every
 * index they read and report a violation as H3S_ERR_INDEX.
 *
 * In a build without nvcc every function here fails with H3S_ERR_DEVICE and a clear
 * message (src/cuda/cuda_none.c): strict mode never falls back to another device. */
#ifndef H3S_CUDA_OPS_H
#define H3S_CUDA_OPS_H

#include "ops/ops.h"

/* 1 when this build has the CUDA backend and a usable GPU of an architecture it was built
 * for; 0 otherwise, with the reason in h3s_last_error(). */
int h3s_cuda_available(void);
/* Device memory for a tensor (device == 1, owns_data); h3s_cuda_tensor_free releases it. */
h3s_status h3s_cuda_tensor_alloc(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape);
/* The same in the library's stream order (the model's activations and gradients): taken from the stream-ordered
 * pool and zero-filled by queued work, with no synchronisation, so the host keeps queueing kernels; ready for every
 * library operation (they run on that stream), and for other streams or the host only after h3s_cuda_sync.
 * owns_data is H3S_CUDA_OWNS_ORDERED; h3s_cuda_tensor_free returns it to the pool in stream order. */
h3s_status h3s_cuda_tensor_alloc_ordered(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape);
/* The same without the zero fill, for a tensor its producer writes in full before anything reads it (with
 * H3S_CUDA_POISON_UNINIT=1 in the environment it is filled with 0xff bytes instead: a test knob). */
h3s_status h3s_cuda_tensor_alloc_ordered_uninit(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape);
#define H3S_CUDA_OWNS_ORDERED 2
void h3s_cuda_tensor_free(h3s_tensor *t);
/* Copies between host and device tensors of equal dtype and element count. */
h3s_status h3s_cuda_upload(const h3s_tensor *host, h3s_tensor *dev);
h3s_status h3s_cuda_download(const h3s_tensor *dev, h3s_tensor *host);
/* h3s_cuda_upload in the library's stream order: the host bytes are staged at once (the caller may reuse them on
 * return) and the device copy is queued behind the work already on the stream, without waiting for it; ready for
 * library operations, for others after h3s_cuda_sync.  Tensors over 8 MB take h3s_cuda_upload. */
h3s_status h3s_cuda_upload_ordered(const h3s_tensor *host, h3s_tensor *dev);
/* A caller's device tensor `what` checked as h3s_cuda_copy checks its operands. */
h3s_status h3s_cuda_check_tensor(const char *what, const h3s_tensor *t);
/* A copy between two device tensors of equal dtype and element count, queued in the library's stream order; either
 * may be a caller's (checked: device memory of the library's device, aligned to its elements). */
h3s_status h3s_cuda_copy(const h3s_tensor *src, h3s_tensor *dst);
/* The smallest index of a NaN or infinite element of a device tensor (F32, F64 or BF16; checked as h3s_cuda_copy
 * checks), or -1 when all are finite: h3s_tensor_first_nonfinite for device memory.  Waits for the stream. */
h3s_status h3s_cuda_first_nonfinite(const h3s_tensor *t, int64_t *index);
/* Wait for queued work; report any pending kernel error. */
h3s_status h3s_cuda_sync(void);
/* The library's stream (h3s_device_stream). */
h3s_status h3s_cuda_stream(void **stream);
/* Wait for all work on the device, every stream (the library's and the caller's). */
h3s_status h3s_cuda_device_sync(void);

h3s_status h3s_cuda_linear_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *y);
/* 1 when the CUDA BF16 linear backward of a [N, K] weight computes dx and dw from dy_bf16 alone (BF16 gradient
 * operands, a shape the tensor-core kernels take), so that dy's producer may skip writing F32 dy. */
int h3s_cuda_linear_bf16_dy_only(int64_t N, int64_t K);
h3s_status h3s_cuda_linear_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                    const h3s_tensor *dy_bf16, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *db);
h3s_status h3s_cuda_rmsnorm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                    h3s_tensor *y);
h3s_status h3s_cuda_rmsnorm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                     const h3s_tensor *dy, const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw,
                                     h3s_tensor *dtable);
h3s_status h3s_cuda_head_rmsnorm_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                         h3s_tensor *y);
h3s_status h3s_cuda_head_rmsnorm_backward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                          const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dx_bf16, h3s_tensor *dw);
h3s_status h3s_cuda_rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta, h3s_tensor *cos_out,
                               h3s_tensor *sin_out);
h3s_status h3s_cuda_rope_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t,
                                 h3s_tensor *y);
h3s_status h3s_cuda_rope_backward(int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *dy,
                                  h3s_tensor *dx);
h3s_status h3s_cuda_attention_forward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                      int64_t heads, const h3s_attn_mask *mask, h3s_tensor *out, h3s_tensor *stats);
h3s_status h3s_cuda_attention_backward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                       const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t heads,
                                       const h3s_attn_mask *mask, const h3s_tensor *dout, h3s_tensor *dq,
                                       h3s_tensor *dk, h3s_tensor *dv, h3s_tensor *dv_bf16);
h3s_status h3s_cuda_residual_forward(const h3s_tensor *r, const h3s_tensor *y, const h3s_tensor *table,
                                     const h3s_tensor *index, int gate_chunk, h3s_tensor *out);
h3s_status h3s_cuda_residual_backward(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index,
                                      int gate_chunk, const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy,
                                      h3s_tensor *dy_bf16, h3s_tensor *dtable);
h3s_status h3s_cuda_swiglu_forward(const h3s_tensor *u, h3s_tensor *h);
h3s_status h3s_cuda_swiglu_backward(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du, h3s_tensor *du_bf16);
h3s_status h3s_cuda_adaln_projection_forward(const h3s_tensor *temb, const h3s_tensor *w, const h3s_tensor *b,
                                             h3s_tensor *a, h3s_tensor *table);
h3s_status h3s_cuda_adaln_projection_backward(const h3s_tensor *temb, const h3s_tensor *a, const h3s_tensor *w,
                                              const h3s_tensor *dtable, h3s_tensor *dtemb, h3s_tensor *dw,
                                              h3s_tensor *db);
h3s_status h3s_cuda_timestep_sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out);
h3s_status h3s_cuda_timestep_sinusoid_backward(const h3s_tensor *t, const h3s_tensor *dout, h3s_tensor *dt);
h3s_status h3s_cuda_timestep_mlp_forward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                                         const h3s_tensor *w2, const h3s_tensor *b2, h3s_tensor *hidden,
                                         h3s_tensor *temb);
h3s_status h3s_cuda_timestep_mlp_backward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *w2,
                                          const h3s_tensor *hidden, const h3s_tensor *dtemb, h3s_tensor *dfeatures,
                                          h3s_tensor *dw1, h3s_tensor *db1, h3s_tensor *dw2, h3s_tensor *db2);
h3s_status h3s_cuda_final_norm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                       const h3s_tensor *index, double eps, h3s_tensor *y);
h3s_status h3s_cuda_final_norm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                        const h3s_tensor *index, double eps, const h3s_tensor *dy, h3s_tensor *dx,
                                        h3s_tensor *dw, h3s_tensor *dtable);
h3s_status h3s_cuda_rows_gather(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst);
h3s_status h3s_cuda_rows_scatter(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst);
h3s_status h3s_cuda_grad_add(const h3s_tensor *a, const h3s_tensor *b, h3s_tensor *out);
h3s_status h3s_cuda_grad_add3(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out);
/* dst = bf16(src) elementwise, round to nearest even (the library's rounding); src F32, dst BF16, both on the device,
 * the same element count. */
h3s_status h3s_cuda_round_bf16(const h3s_tensor *src, h3s_tensor *dst);

#endif

/* Build without nvcc: the CUDA backend is absent and every entry point says so. */
#ifndef H3S_WITH_CUDA
#include <stdio.h>

#include "core/core.h"
#include "cuda/cuda_extra.h"
#include "cuda/cuda_ops.h"

/* Why the backend is absent, decided at configure time (CMakeLists.txt): "configured with -DH3S_CUDA=OFF" or
 * "no CUDA compiler (nvcc) was found when the build was configured". */
#ifndef H3S_NO_CUDA_REASON
#define H3S_NO_CUDA_REASON "the build was configured without it"
#endif
#define NO_CUDA(name) h3s_fail(H3S_ERR_DEVICE, "%s: this build has no CUDA backend: %s", name, H3S_NO_CUDA_REASON)

int h3s_cuda_available(void) {
    NO_CUDA("cuda");
    return 0;
}
h3s_status h3s_cuda_tensor_alloc(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    return NO_CUDA("cuda_tensor_alloc");
}
h3s_status h3s_cuda_tensor_alloc_ordered(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    return NO_CUDA("cuda_tensor_alloc");
}
h3s_status h3s_cuda_tensor_alloc_ordered_uninit(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    return h3s_cuda_tensor_alloc_ordered(t, dtype, ndim, shape);
}
void h3s_cuda_tensor_free(h3s_tensor *t) { (void)t; }
h3s_status h3s_cuda_upload(const h3s_tensor *host, h3s_tensor *dev) { return NO_CUDA("cuda_upload"); }
h3s_status h3s_cuda_download(const h3s_tensor *dev, h3s_tensor *host) { return NO_CUDA("cuda_download"); }
h3s_status h3s_cuda_upload_ordered(const h3s_tensor *host, h3s_tensor *dev) { return NO_CUDA("cuda_upload"); }
h3s_status h3s_cuda_copy(const h3s_tensor *src, h3s_tensor *dst) { return NO_CUDA("cuda_copy"); }
h3s_status h3s_cuda_check_tensor(const char *what, const h3s_tensor *t) { return NO_CUDA("cuda_check_tensor"); }
h3s_status h3s_cuda_first_nonfinite(const h3s_tensor *t, int64_t *index) {
    if (index) *index = -1;
    return NO_CUDA("cuda_first_nonfinite");
}
h3s_status h3s_cuda_sync(void) { return NO_CUDA("cuda_sync"); }
h3s_status h3s_cuda_stream(void **stream) {
    if (stream) *stream = NULL;
    return NO_CUDA("device_stream");
}
h3s_status h3s_cuda_device_sync(void) { return NO_CUDA("cuda_device_sync"); }

h3s_status h3s_cuda_linear_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *y) {
    return NO_CUDA("linear_forward");
}
int h3s_cuda_linear_bf16_dy_only(int64_t N, int64_t K) {
    (void)N, (void)K;
    return 0;
}
h3s_status h3s_cuda_linear_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                    const h3s_tensor *dy_bf16, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *db) {
    return NO_CUDA("linear_backward");
}
h3s_status h3s_cuda_rmsnorm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                    h3s_tensor *y) {
    return NO_CUDA("rmsnorm_forward");
}
h3s_status h3s_cuda_rmsnorm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_modulation *mod, double eps,
                                     const h3s_tensor *dy, const h3s_tensor *dx_add, h3s_tensor *dx, h3s_tensor *dw,
                                     h3s_tensor *dtable) {
    return NO_CUDA("rmsnorm_backward");
}
h3s_status h3s_cuda_head_rmsnorm_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                         h3s_tensor *y) {
    return NO_CUDA("head_rmsnorm_forward");
}
h3s_status h3s_cuda_head_rmsnorm_backward(const h3s_tensor *x, int64_t heads, const h3s_tensor *w, double eps,
                                          const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dx_bf16, h3s_tensor *dw) {
    return NO_CUDA("head_rmsnorm_backward");
}
h3s_status h3s_cuda_rope_table(const h3s_tensor *position_ids, int64_t rope_freq_dim, double theta, h3s_tensor *cos_out,
                               h3s_tensor *sin_out) {
    return NO_CUDA("rope_table");
}
h3s_status h3s_cuda_rope_forward(const h3s_tensor *x, int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t,
                                 h3s_tensor *y) {
    return NO_CUDA("rope_forward");
}
h3s_status h3s_cuda_rope_backward(int64_t heads, const h3s_tensor *cos_t, const h3s_tensor *sin_t, const h3s_tensor *dy,
                                  h3s_tensor *dx) {
    return NO_CUDA("rope_backward");
}
h3s_status h3s_cuda_attention_forward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                      int64_t heads, const h3s_attn_mask *mask, h3s_tensor *out, h3s_tensor *stats) {
    return NO_CUDA("attention_forward");
}
h3s_status h3s_cuda_attention_backward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                       const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t heads,
                                       const h3s_attn_mask *mask, const h3s_tensor *dout, h3s_tensor *dq,
                                       h3s_tensor *dk, h3s_tensor *dv, h3s_tensor *dv_bf16) {
    return NO_CUDA("attention_backward");
}
h3s_status h3s_cuda_residual_forward(const h3s_tensor *r, const h3s_tensor *y, const h3s_tensor *table,
                                     const h3s_tensor *index, int gate_chunk, h3s_tensor *out) {
    return NO_CUDA("residual_forward");
}
h3s_status h3s_cuda_residual_backward(const h3s_tensor *y, const h3s_tensor *table, const h3s_tensor *index,
                                      int gate_chunk, const h3s_tensor *dout, h3s_tensor *dr, h3s_tensor *dy,
                                      h3s_tensor *dy_bf16, h3s_tensor *dtable) {
    return NO_CUDA("residual_backward");
}
h3s_status h3s_cuda_swiglu_forward(const h3s_tensor *u, h3s_tensor *h) { return NO_CUDA("swiglu_forward"); }
h3s_status h3s_cuda_swiglu_backward(const h3s_tensor *u, const h3s_tensor *dh, h3s_tensor *du, h3s_tensor *du_bf16) {
    return NO_CUDA("swiglu_backward");
}
h3s_status h3s_cuda_adaln_projection_forward(const h3s_tensor *temb, const h3s_tensor *w, const h3s_tensor *b,
                                             h3s_tensor *a, h3s_tensor *table) {
    return NO_CUDA("adaln_projection_forward");
}
h3s_status h3s_cuda_adaln_projection_backward(const h3s_tensor *temb, const h3s_tensor *a, const h3s_tensor *w,
                                              const h3s_tensor *dtable, h3s_tensor *dtemb, h3s_tensor *dw,
                                              h3s_tensor *db) {
    return NO_CUDA("adaln_projection_backward");
}
h3s_status h3s_cuda_timestep_sinusoid_forward(const h3s_tensor *t, int64_t freq_dim, h3s_tensor *out) {
    return NO_CUDA("timestep_sinusoid_forward");
}
h3s_status h3s_cuda_timestep_sinusoid_backward(const h3s_tensor *t, const h3s_tensor *dout, h3s_tensor *dt) {
    return NO_CUDA("timestep_sinusoid_backward");
}
h3s_status h3s_cuda_timestep_mlp_forward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *b1,
                                         const h3s_tensor *w2, const h3s_tensor *b2, h3s_tensor *hidden,
                                         h3s_tensor *temb) {
    return NO_CUDA("timestep_mlp_forward");
}
h3s_status h3s_cuda_timestep_mlp_backward(const h3s_tensor *features, const h3s_tensor *w1, const h3s_tensor *w2,
                                          const h3s_tensor *hidden, const h3s_tensor *dtemb, h3s_tensor *dfeatures,
                                          h3s_tensor *dw1, h3s_tensor *db1, h3s_tensor *dw2, h3s_tensor *db2) {
    return NO_CUDA("timestep_mlp_backward");
}
h3s_status h3s_cuda_final_norm_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                       const h3s_tensor *index, double eps, h3s_tensor *y) {
    return NO_CUDA("final_norm_forward");
}
h3s_status h3s_cuda_final_norm_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *table,
                                        const h3s_tensor *index, double eps, const h3s_tensor *dy, h3s_tensor *dx,
                                        h3s_tensor *dw, h3s_tensor *dtable) {
    return NO_CUDA("final_norm_backward");
}
h3s_status h3s_cuda_rows_gather(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    return NO_CUDA("rows_gather");
}
h3s_status h3s_cuda_rows_scatter(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    return NO_CUDA("rows_scatter");
}
h3s_status h3s_cuda_grad_add(const h3s_tensor *a, const h3s_tensor *b, h3s_tensor *out) { return NO_CUDA("grad_add"); }
h3s_status h3s_cuda_grad_add3(const h3s_tensor *a, const h3s_tensor *b, const h3s_tensor *c, h3s_tensor *out) {
    return NO_CUDA("grad_add");
}
h3s_status h3s_cuda_round_bf16(const h3s_tensor *src, h3s_tensor *dst) { return NO_CUDA("round_bf16"); }
h3s_status h3s_cuda_describe(char *buf, size_t size) {
    if (!buf || size == 0) return h3s_fail(H3S_ERR_INVALID, "cuda_describe: empty buffer");
    h3s_status st = NO_CUDA("cuda_describe");
    snprintf(buf, size, "unavailable: %s", h3s_last_error());
    return st;
}
h3s_status h3s_cuda_fill_random(h3s_tensor *t, uint64_t seed, float scale) { return NO_CUDA("cuda_fill_random"); }
void h3s_cuda_release_caches(void) {}
#else
typedef int h3s_cuda_none_translation_unit_is_not_empty;
#endif

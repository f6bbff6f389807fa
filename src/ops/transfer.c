/* Tensor copies between host and device memory, and waiting for queued device work: what a caller of the
 * operators of include/h3s_ops.h needs around device tensors. */
#include "core/core.h"
#include "cuda/cuda_ops.h"

h3s_status h3s_tensor_copy(const h3s_tensor *src, h3s_tensor *dst) {
    if (!src || !dst) return h3s_fail(H3S_ERR_INVALID, "tensor_copy: NULL tensor");
    if (src->dtype != dst->dtype)
        return h3s_fail(H3S_ERR_DTYPE, "tensor_copy: %s into %s (convert with h3s_tensor_convert)",
                        h3s_dtype_name(src->dtype), h3s_dtype_name(dst->dtype));
    H3S_TRY(h3s_check_extent("tensor_copy", "src", src));
    H3S_TRY(h3s_check_extent("tensor_copy", "dst", dst));
    int64_t n = h3s_tensor_numel(src);
    if (n != h3s_tensor_numel(dst))
        return h3s_fail(H3S_ERR_SHAPE, "tensor_copy: %lld elements into %lld", (long long)n,
                        (long long)h3s_tensor_numel(dst));
    if (n > 0 && (!src->data || !dst->data)) return h3s_fail(H3S_ERR_INVALID, "tensor_copy: NULL data");
    if (src->device && dst->device)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "tensor_copy: device to device copies are not offered");
    if (src->device) return h3s_cuda_download(src, dst);
    if (dst->device) return h3s_cuda_upload(src, dst);
    if (n > 0) memmove(dst->data, src->data, h3s_tensor_nbytes(src));
    return H3S_OK;
}

h3s_status h3s_tensor_host_copy(const h3s_tensor *src, h3s_tensor *host) {
    if (!src || !host) return h3s_fail(H3S_ERR_INVALID, "tensor_host_copy: NULL tensor");
    if (src->ndim < 0 || src->ndim > H3S_MAX_DIMS)
        return h3s_fail(H3S_ERR_SHAPE, "tensor_host_copy: %d dims (0 to %d)", src->ndim, H3S_MAX_DIMS);
    h3s_tensor t;
    H3S_TRY(h3s_tensor_alloc(&t, src->dtype, src->ndim, src->shape));
    h3s_status st = h3s_tensor_copy(src, &t);
    if (st != H3S_OK) {
        h3s_tensor_free(&t);
        return st;
    }
    *host = t;
    return H3S_OK;
}

h3s_status h3s_device_synchronize(void) { return h3s_cuda_sync(); }

h3s_status h3s_device_stream(void **stream) {
    if (!stream) return h3s_fail(H3S_ERR_INVALID, "device_stream: NULL argument");
    *stream = NULL;
    return h3s_cuda_stream(stream);
}

/* Row gather / scatter between the per-modality row sets and the packed sequence. */
#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

static int is_float_dtype(h3s_dtype d) { return d == H3S_F64 || d == H3S_F32 || d == H3S_BF16; }

/* Copy one row converting between float dtypes; F64 never narrows on a strict path. */
static void convert_row(const void *src, h3s_dtype sd, void *dst, h3s_dtype dd, int64_t w) {
    if (sd == dd) {
        memcpy(dst, src, (size_t)w * h3s_dtype_size(sd));
        return;
    }
    for (int64_t j = 0; j < w; j++) {
        float v = sd == H3S_F32 ? ((const float *)src)[j] : h3s_bf16_value(((const uint16_t *)src)[j]);
        if (dd == H3S_F32)
            ((float *)dst)[j] = v;
        else
            ((uint16_t *)dst)[j] = h3s_bf16_round(v);
    }
}

static h3s_status check_rows(const char *op, const h3s_tensor *src, const h3s_tensor *index, int64_t batch,
                             const h3s_tensor *dst, int scatter) {
    if (!src || !index || !dst) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    if (src->ndim != 2 || dst->ndim != 2)
        return h3s_fail(H3S_ERR_SHAPE, "%s: src and dst must be 2-D (got %d and %d dims)", op, src->ndim, dst->ndim);
    if (!is_float_dtype(src->dtype) || !is_float_dtype(dst->dtype))
        return h3s_fail(H3S_ERR_DTYPE, "%s: src %s / dst %s are not float tensors", op, h3s_dtype_name(src->dtype),
                        h3s_dtype_name(dst->dtype));
    if ((src->dtype == H3S_F64) != (dst->dtype == H3S_F64))
        return h3s_fail(H3S_ERR_DTYPE, "%s: cannot mix golden F64 with %s", op,
                        h3s_dtype_name(src->dtype == H3S_F64 ? dst->dtype : src->dtype));
    /* dims and data (every check_tensor rule) before any of them is used */
    H3S_TRY(h3s_check_tensor(op, "src", src, src->dtype, 2));
    H3S_TRY(h3s_check_tensor(op, "dst", dst, dst->dtype, 2));
    if (src->shape[1] != dst->shape[1])
        return h3s_fail(H3S_ERR_SHAPE, "%s: src width %lld != dst width %lld", op, (long long)src->shape[1],
                        (long long)dst->shape[1]);
    if (batch <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: batch %lld must be positive", op, (long long)batch);
    if (index->ndim != 1) return h3s_fail(H3S_ERR_SHAPE, "%s: index must be 1-D", op);
    if (index->device) return h3s_fail(H3S_ERR_INVALID, "%s: index tensors must be host tensors", op);
    H3S_TRY(h3s_check_tensor(op, "index", index, H3S_I64, 1));
    const h3s_tensor *ts[2] = {src, dst};
    const char *names[2] = {"src", "dst"};
    int on_device = 0;
    H3S_TRY(h3s_check_placement(op, ts, names, 2, &on_device));
    int64_t n = index->shape[0];
    const h3s_tensor *items = scatter ? src : dst, *packed = scatter ? dst : src;
    if (n > 0 && batch > INT64_MAX / n)
        return h3s_fail(H3S_ERR_SHAPE, "%s: batch %lld x index length %lld overflows", op, (long long)batch,
                        (long long)n);
    if (items->shape[0] != batch * n)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %lld rows, expected batch %lld x index length %lld", op,
                        scatter ? "src" : "dst", (long long)items->shape[0], (long long)batch, (long long)n);
    const int64_t packed_rows_total = packed->shape[0];
    if (packed_rows_total % batch != 0)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %lld packed rows not divisible by batch %lld", op,
                        (long long)packed_rows_total, (long long)batch);
    H3S_TRY(h3s_check_index(op, "index", index, packed_rows_total / batch));
    if (!on_device) { /* rows written while other threads read them would make the result depend on the thread count */
        const h3s_tensor *ins[2] = {src, index};
        const char *in_names[2] = {"src", "index"};
        H3S_TRY(h3s_check_disjoint(op, "dst", dst, ins, in_names, 2, 0));
    }
    return H3S_OK;
}

h3s_status h3s_rows_gather(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    H3S_TRY(check_rows("rows_gather", src, index, batch, dst, 0));
    if (src->device) return h3s_cuda_rows_gather(src, index, batch, dst);
    int64_t n = index->shape[0], Ss = src->shape[0] / batch, w = src->shape[1];
    size_t ss = h3s_dtype_size(src->dtype), ds = h3s_dtype_size(dst->dtype);
    const int64_t *idx = (const int64_t *)index->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < batch * n; r++) {
        int64_t b = r / n, i = r % n;
        convert_row((const char *)src->data + (size_t)((b * Ss + idx[i]) * w) * ss, src->dtype,
                    (char *)dst->data + (size_t)(r * w) * ds, dst->dtype, w);
    }
    return H3S_OK;
}

h3s_status h3s_rows_scatter(const h3s_tensor *src, const h3s_tensor *index, int64_t batch, h3s_tensor *dst) {
    H3S_TRY(check_rows("rows_scatter", src, index, batch, dst, 1));
    int64_t n = index->shape[0], Sd = dst->shape[0] / batch, w = src->shape[1];
    const int64_t *idx = (const int64_t *)index->data;
    /* Duplicate targets would make the result depend on write order: refuse them. */
    uint8_t *seen = h3s_calloc((size_t)(Sd > 0 ? Sd : 1), 1);
    if (!seen) return H3S_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        if (seen[idx[i]]) {
            free(seen);
            return h3s_fail(H3S_ERR_INDEX, "rows_scatter: index[%lld] = %lld repeats an earlier row", (long long)i,
                            (long long)idx[i]);
        }
        seen[idx[i]] = 1;
    }
    free(seen);
    if (src->device) return h3s_cuda_rows_scatter(src, index, batch, dst);
    size_t ss = h3s_dtype_size(src->dtype), ds = h3s_dtype_size(dst->dtype);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < batch * n; r++) {
        int64_t b = r / n, i = r % n;
        convert_row((const char *)src->data + (size_t)(r * w) * ss, src->dtype,
                    (char *)dst->data + (size_t)((b * Sd + idx[i]) * w) * ds, dst->dtype, w);
    }
    return H3S_OK;
}

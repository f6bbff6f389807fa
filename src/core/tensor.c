#include <math.h>
#include <stdio.h>

#include "core/core.h"

size_t h3s_dtype_size(h3s_dtype dtype) {
    switch (dtype) {
    case H3S_F64: return 8;
    case H3S_F32: return 4;
    case H3S_BF16: return 2;
    case H3S_F16: return 2;
    case H3S_I64: return 8;
    case H3S_BOOL: return 1;
    }
    return 0;
}

const char *h3s_dtype_name(h3s_dtype dtype) {
    switch (dtype) {
    case H3S_F64: return "F64";
    case H3S_F32: return "F32";
    case H3S_BF16: return "BF16";
    case H3S_F16: return "F16";
    case H3S_I64: return "I64";
    case H3S_BOOL: return "BOOL";
    }
    return "?";
}

uint16_t h3s_bf16_from_f32(float x) { return h3s_bf16_round(x); }
float h3s_bf16_to_f32(uint16_t b) { return h3s_bf16_value(b); }

int64_t h3s_tensor_numel(const h3s_tensor *t) {
    if (!t) return 0;
    if (t->ndim < 0 || t->ndim > H3S_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return -1;
        if (t->shape[d] != 0 && n > INT64_MAX / t->shape[d]) {
            /* the count overflows unless a later dim is 0 */
            for (int e = d + 1; e < t->ndim; e++)
                if (t->shape[e] < 0) return -1;
            for (int e = d + 1; e < t->ndim; e++)
                if (t->shape[e] == 0) return 0;
            return -1;
        }
        n *= t->shape[d];
    }
    return n;
}

size_t h3s_tensor_nbytes(const h3s_tensor *t) {
    int64_t n = h3s_tensor_numel(t);
    size_t size = t ? h3s_dtype_size(t->dtype) : 0;
    if (n <= 0 || size == 0 || (uint64_t)n > SIZE_MAX / size) return 0;
    return (size_t)n * size;
}

h3s_status h3s_check_extent(const char *op, const char *name, const h3s_tensor *t) {
    if (t->ndim < 0 || t->ndim > H3S_MAX_DIMS)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %d dims (0 to %d)", op, name, t->ndim, H3S_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return h3s_fail(H3S_ERR_SHAPE, "%s: %s has a negative dim (shape[%d] = %lld)", op, name, d,
                            (long long)t->shape[d]);
    int64_t n = h3s_tensor_numel(t);
    if (n < 0 || (n > 0 && h3s_tensor_nbytes(t) == 0 && h3s_dtype_size(t->dtype) != 0))
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s has more elements than memory can hold", op, name);
    return H3S_OK;
}

h3s_status h3s_tensor_alloc(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    if (!t) return h3s_fail(H3S_ERR_INVALID, "tensor_alloc: NULL tensor");
    if (ndim < 0 || ndim > H3S_MAX_DIMS)
        return h3s_fail(H3S_ERR_SHAPE, "tensor_alloc: %d dims (at most %d)", ndim, H3S_MAX_DIMS);
    if (h3s_dtype_size(dtype) == 0) return h3s_fail(H3S_ERR_DTYPE, "tensor_alloc: unknown dtype");
    if (ndim > 0 && !shape) return h3s_fail(H3S_ERR_INVALID, "tensor_alloc: NULL shape for %d dims", ndim);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return h3s_fail(H3S_ERR_SHAPE, "tensor_alloc: negative dim %d", d);
        if (shape[d] != 0 && n > INT64_MAX / shape[d])
            return h3s_fail(H3S_ERR_SHAPE, "tensor_alloc: element count overflows");
        n *= shape[d];
    }
    void *data = h3s_calloc((size_t)n, h3s_dtype_size(dtype));
    if (!data) return H3S_ERR_NOMEM;
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->data = data;
    t->owns_data = 1;
    return H3S_OK;
}

h3s_tensor h3s_tensor_view(void *data, h3s_dtype dtype, int ndim, const int64_t *shape) {
    h3s_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = ndim < 0 ? 0 : (ndim > H3S_MAX_DIMS ? H3S_MAX_DIMS : ndim);
    for (int d = 0; d < t.ndim; d++)
        t.shape[d] = shape[d];
    t.data = data;
    return t;
}

void h3s_tensor_free(h3s_tensor *t) {
    if (!t) return;
    if (t->owns_data && t->device == 0) free(t->data);
    memset(t, 0, sizeof *t);
}

static float h3s_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double h3s_tensor_get_f64(const h3s_tensor *t, int64_t i) {
    switch (t->dtype) {
    case H3S_F64: return ((const double *)t->data)[i];
    case H3S_F32: return ((const float *)t->data)[i];
    case H3S_BF16: return h3s_bf16_value(((const uint16_t *)t->data)[i]);
    case H3S_F16: return h3s_f16_to_f32(((const uint16_t *)t->data)[i]);
    case H3S_I64: return (double)((const int64_t *)t->data)[i];
    case H3S_BOOL: return ((const uint8_t *)t->data)[i] ? 1.0 : 0.0;
    }
    return NAN;
}

/* A double rounded once to BF16, to nearest even: rounded to odd into F32 first (toward zero, then the last bit set
 * when inexact), which keeps the 16 bits BF16 drops plus a sticky bit, so the BF16 rounding of that F32 value is the
 * rounding of the double itself.  (float)v rounds to nearest and can land on a BF16 tie that v is not on. */
static uint16_t bf16_from_f64(double v) {
    float t = (float)v;
    if (!isnan(v) && (double)t != v) {
        if (fabs((double)t) > fabs(v)) t = nextafterf(t, 0.0f); /* toward zero (an Inf above FLT_MAX too) */
        uint32_t u;
        memcpy(&u, &t, 4);
        u |= 1u;
        memcpy(&t, &u, 4);
    }
    return h3s_bf16_round(t);
}

static int is_float(h3s_dtype d) { return d == H3S_F64 || d == H3S_F32 || d == H3S_BF16 || d == H3S_F16; }

/* A host tensor this file may read or write whole: a rank in [0, H3S_MAX_DIMS], no negative dim, an element count
 * and a byte count that fit, and data unless it holds no element. */
static h3s_status check_host_tensor(const char *op, const char *name, const h3s_tensor *t) {
    H3S_TRY(h3s_check_extent(op, name, t));
    int64_t n = h3s_tensor_numel(t);
    if (n > 0 && t->device)
        return h3s_fail(H3S_ERR_INVALID, "%s: %s is in device memory (host tensors only)", op, name);
    if (n > 0 && !t->data)
        return h3s_fail(H3S_ERR_INVALID, "%s: %s has %lld elements but no data", op, name, (long long)n);
    return H3S_OK;
}

h3s_status h3s_tensor_convert(const h3s_tensor *src, h3s_tensor *dst) {
    if (!src || !dst) return h3s_fail(H3S_ERR_INVALID, "tensor_convert: NULL tensor");
    H3S_TRY(check_host_tensor("tensor_convert", "src", src));
    H3S_TRY(check_host_tensor("tensor_convert", "dst", dst));
    int64_t n = h3s_tensor_numel(src);
    if (n != h3s_tensor_numel(dst))
        return h3s_fail(H3S_ERR_SHAPE, "tensor_convert: %lld elements into %lld", (long long)n,
                        (long long)h3s_tensor_numel(dst));
    if (src->dtype == dst->dtype) {
        if (n) memmove(dst->data, src->data, h3s_tensor_nbytes(src));
        return H3S_OK;
    }
    /* elements of different widths: a dst that meets src would overwrite values not yet read */
    if (h3s_tensors_overlap(src, dst))
        return h3s_fail(H3S_ERR_INVALID, "tensor_convert: src and dst overlap (%s -> %s needs separate memory)",
                        h3s_dtype_name(src->dtype), h3s_dtype_name(dst->dtype));
    if (!is_float(src->dtype) || !is_float(dst->dtype) || dst->dtype == H3S_F16)
        return h3s_fail(H3S_ERR_DTYPE, "tensor_convert: %s -> %s not supported", h3s_dtype_name(src->dtype),
                        h3s_dtype_name(dst->dtype));
    /* The pairs a pass converts (a model's inputs and outputs) in loops of their own types: the values of the general
     * loop below, since a float widened to double and narrowed back is itself, and a BF16 value is exact in F32. */
    if (src->dtype == H3S_F32 && dst->dtype == H3S_BF16) {
        const float *a = src->data;
        uint16_t *b = dst->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = h3s_bf16_round(a[i]);
        return H3S_OK;
    }
    if (src->dtype == H3S_BF16 && dst->dtype == H3S_F32) {
        const uint16_t *a = src->data;
        float *b = dst->data;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)a[i] << 16;
            /* a NaN leaves quiet, as the general loop's trip through double leaves it */
            if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u |= 0x00400000u;
            memcpy(&b[i], &u, 4);
        }
        return H3S_OK;
    }
    if (src->dtype == H3S_F32 && dst->dtype == H3S_F64) {
        const float *a = src->data;
        double *b = dst->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = (double)a[i];
        return H3S_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = h3s_tensor_get_f64(src, i);
        switch (dst->dtype) {
        case H3S_F64: ((double *)dst->data)[i] = v; break;
        case H3S_F32: ((float *)dst->data)[i] = (float)v; break;
        /* every source dtype but F64 is exact in F32; F64 is rounded once (bf16_from_f64) */
        case H3S_BF16:
            ((uint16_t *)dst->data)[i] = src->dtype == H3S_F64 ? bf16_from_f64(v) : h3s_bf16_round((float)v);
            break;
        default: break;
        }
    }
    return H3S_OK;
}

static h3s_status check_common(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int ndim) {
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, name);
    if (t->dtype != dtype)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, expected %s", op, name, h3s_dtype_name(t->dtype),
                        h3s_dtype_name(dtype));
    if (t->ndim != ndim) return h3s_fail(H3S_ERR_SHAPE, "%s: %s has %d dims, expected %d", op, name, t->ndim, ndim);
    H3S_TRY(h3s_check_extent(op, name, t));
    if (!t->data && h3s_tensor_numel(t) > 0) return h3s_fail(H3S_ERR_INVALID, "%s: %s has no data", op, name);
    return H3S_OK;
}

h3s_status h3s_check_tensor(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int ndim) {
    return check_common(op, name, t, dtype, ndim);
}

h3s_status h3s_check_shape(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int ndim,
                           const int64_t *dims) {
    H3S_TRY(check_common(op, name, t, dtype, ndim));
    for (int d = 0; d < ndim; d++) {
        if (dims[d] >= 0 && t->shape[d] != dims[d])
            return h3s_fail(H3S_ERR_SHAPE, "%s: %s has shape[%d] = %lld, expected %lld", op, name, d,
                            (long long)t->shape[d], (long long)dims[d]);
    }
    return H3S_OK;
}

h3s_status h3s_check_index(const char *op, const char *name, const h3s_tensor *idx, int64_t limit) {
    if (!idx) return h3s_fail(H3S_ERR_INVALID, "%s: %s is NULL", op, name);
    if (idx->dtype != H3S_I64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s has dtype %s, expected I64", op, name, h3s_dtype_name(idx->dtype));
    /* read here, on the host: a rank, dims and data it can read */
    H3S_TRY(check_host_tensor(op, name, idx));
    int64_t n = h3s_tensor_numel(idx);
    const int64_t *v = (const int64_t *)idx->data;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= limit)
            return h3s_fail(H3S_ERR_INDEX, "%s: %s[%lld] = %lld is outside [0, %lld)", op, name, (long long)i,
                            (long long)v[i], (long long)limit);
    }
    return H3S_OK;
}

h3s_status h3s_check_placement(const char *op, const h3s_tensor *const *ts, const char *const *names, int n,
                               int *on_device) {
    int first = -1;
    *on_device = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        if (ts[i]->device != 0 && ts[i]->device != 1)
            return h3s_fail(H3S_ERR_INVALID, "%s: %s has device %d (expected 0 = host or 1 = CUDA)", op, names[i],
                            ts[i]->device);
        if (first < 0) {
            first = i;
            *on_device = ts[i]->device;
        } else if (ts[i]->device != *on_device) {
            return h3s_fail(H3S_ERR_DEVICE, "%s: %s is in %s memory but %s is in %s memory (mixed host/device)", op,
                            names[i], ts[i]->device ? "device" : "host", names[first], *on_device ? "device" : "host");
        }
    }
    return H3S_OK;
}

/* Index of the first non-finite element among [lo, hi) of a host float tensor, or hi. */
static int64_t first_nonfinite_range(const h3s_tensor *t, int64_t lo, int64_t hi) {
    switch (t->dtype) {
    case H3S_F64: {
        const uint64_t *v = t->data;
        for (int64_t i = lo; i < hi; i++)
            if ((v[i] & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL) return i;
        return hi;
    }
    case H3S_F32: {
        const uint32_t *v = t->data;
        for (int64_t i = lo; i < hi; i++)
            if ((v[i] & 0x7f800000u) == 0x7f800000u) return i;
        return hi;
    }
    case H3S_BF16:
    case H3S_F16: {
        const uint16_t *v = t->data;
        uint16_t e = t->dtype == H3S_BF16 ? 0x7f80u : 0x7c00u;
        for (int64_t i = lo; i < hi; i++)
            if ((v[i] & e) == e) return i;
        return hi;
    }
    default: return hi;
    }
}

int64_t h3s_tensor_first_nonfinite(const h3s_tensor *t) {
    if (!t || !t->data || t->device) return -1;
    int64_t n = h3s_tensor_numel(t);
    enum { CHUNK = 1 << 20 };
    if (n <= CHUNK) {
        int64_t i = first_nonfinite_range(t, 0, n);
        return i < n ? i : -1;
    }
    int64_t nchunks = (n + CHUNK - 1) / CHUNK, first = n;
    /* every chunk is scanned; the smallest index wins, so the answer does not depend on the thread count */
#pragma omp parallel for schedule(static) reduction(min : first)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
        int64_t i = first_nonfinite_range(t, lo, hi);
        if (i < hi && i < first) first = i;
    }
    return first < n ? first : -1;
}

int h3s_tensors_overlap(const h3s_tensor *a, const h3s_tensor *b) {
    if (!a || !b || !a->data || !b->data) return 0;
    const size_t na = h3s_tensor_nbytes(a), nb = h3s_tensor_nbytes(b);
    if (na == 0 || nb == 0) return 0;
    const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    return a0 < b0 + nb && b0 < a0 + na;
}

static int same_tensor(const h3s_tensor *a, const h3s_tensor *b) {
    return a->data == b->data && a->dtype == b->dtype && h3s_tensor_nbytes(a) == h3s_tensor_nbytes(b);
}

h3s_status h3s_check_disjoint(const char *op, const char *out_name, const h3s_tensor *out, const h3s_tensor *const *ins,
                              const char *const *in_names, int n, unsigned alias_ok) {
    for (int i = 0; i < n; i++) {
        if (!h3s_tensors_overlap(out, ins[i])) continue;
        if (alias_ok & (1u << i)) {
            if (same_tensor(out, ins[i])) continue;
            return h3s_fail(H3S_ERR_INVALID,
                            "%s: %s overlaps %s without being the same tensor (%s may be %s itself, "
                            "or apart from it)",
                            op, out_name, in_names[i], out_name, in_names[i]);
        }
        return h3s_fail(H3S_ERR_INVALID, "%s: %s overlaps %s", op, out_name, in_names[i]);
    }
    return H3S_OK;
}

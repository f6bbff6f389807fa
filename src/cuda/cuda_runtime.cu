/* Host runtime of the strict CUDA backend: device check, the one stream, device tensors,
 * host <-> device copies, the index error flag, stream-ordered workspace and the cache of
 * device copies of host index tensors.
 *
 * Strict mode refuses a device this build has no native code for: the kernels are compiled
 * for sm_90a only (the Hopper-specific target that wgmma and setmaxnreg need; CMakeLists.txt,
 * no PTX), and a build that also embeds PTX would let the driver
 * JIT-compile it for another architecture, with other instruction selection.  So the check
 * asks the runtime which binary a kernel would load (cudaFuncGetAttributes) and requires its
 * architecture to equal the device's compute capability exactly. */
#include <stdlib.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda/k_common.cuh"

extern "C" {
#include "cuda/cuda_extra.h"
#include "cuda/cuda_ops.h"
}

/* The architecture the kernels were compiled for (nvcc defines __CUDA_ARCH__ only in device
 * passes; the build passes CUDA_ARCHITECTURES 90). */
#define H3C_BUILT_ARCH 90

__global__ void h3k_probe_kernel(int *p) {
    if (p) p[0] = 0;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void stage_release(void);
static int g_state = 0; /* 0 = not tried, 1 = ready, -1 = unusable */
static char g_reason[512];
static int g_device = 0;
static cudaStream_t g_stream = NULL;
static int *g_flag = NULL;
static cudaDeviceProp g_prop;

static h3s_status cuda_fail(const char *op, const char *what, cudaError_t e) {
    return h3s_fail(H3S_ERR_DEVICE, "%s: %s failed: %s (%s)", op, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Called with g_lock held. */
static void init_locked(void) {
    if (g_state != 0) return;
    g_state = -1;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(g_reason, sizeof g_reason, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return;
    }
    if (count == 0) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device is present");
        return;
    }
    e = cudaGetDevice(&g_device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&g_prop, g_device);
    if (e != cudaSuccess) {
        snprintf(g_reason, sizeof g_reason, "cannot query CUDA device: %s", cudaGetErrorString(e));
        return;
    }
    int cc = g_prop.major * 10 + g_prop.minor;
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, h3k_probe_kernel);
    if (e != cudaSuccess) {
        snprintf(g_reason, sizeof g_reason,
                 "device %d (%s, compute capability %d.%d) cannot load this build's kernels (built for sm_%da): %s",
                 g_device, g_prop.name, g_prop.major, g_prop.minor, H3C_BUILT_ARCH, cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    if (attr.binaryVersion != cc || cc != H3C_BUILT_ARCH) {
        snprintf(g_reason, sizeof g_reason,
                 "device %d (%s) has compute capability %d.%d but this build contains native kernels for sm_%da only "
                 "(loaded binary: sm_%d); strict mode refuses an architecture it was not built for",
                 g_device, g_prop.name, g_prop.major, g_prop.minor, H3C_BUILT_ARCH, attr.binaryVersion);
        return;
    }
    e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc((void **)&g_flag, 4 * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(g_flag, 0, 4 * sizeof(int));
    if (e == cudaSuccess) {
        /* Workspace comes from the device's default pool; keep freed blocks cached. */
        cudaMemPool_t pool;
        e = cudaDeviceGetDefaultMemPool(&pool, g_device);
        uint64_t keep = UINT64_MAX;
        if (e == cudaSuccess) e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    if (e != cudaSuccess) {
        snprintf(g_reason, sizeof g_reason, "CUDA initialisation failed: %s", cudaGetErrorString(e));
        return;
    }
    g_state = 1;
}

extern "C" h3s_status h3c_init(const char *op) {
    pthread_mutex_lock(&g_lock);
    init_locked();
    int ok = g_state == 1;
    pthread_mutex_unlock(&g_lock);
    if (!ok) return h3s_fail(H3S_ERR_DEVICE, "%s: CUDA backend unavailable: %s", op, g_reason);
    return H3S_OK;
}

extern "C" int h3s_cuda_available(void) {
    if (h3c_init("cuda") != H3S_OK) return 0;
    return 1;
}

extern "C" void *h3c_stream(void) { return (void *)g_stream; }
extern "C" int *h3c_error_flag(void) { return g_flag; }

extern "C" h3s_status h3c_launch_check(const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(op, "kernel launch", e);
    return H3S_OK;
}

extern "C" h3s_status h3c_ws_alloc(const char *op, size_t bytes, void **ptr) {
    *ptr = NULL;
    if (bytes == 0) bytes = 16;
    cudaError_t e = cudaMallocAsync(ptr, bytes, g_stream);
    if (e != cudaSuccess) {
        *ptr = NULL;
        cudaGetLastError();
        return h3s_fail(e == cudaErrorMemoryAllocation ? H3S_ERR_NOMEM : H3S_ERR_DEVICE,
                        "%s: device workspace of %zu bytes: %s", op, bytes, cudaGetErrorString(e));
    }
    return H3S_OK;
}

extern "C" void h3c_ws_free(void *ptr) {
    if (ptr) cudaFreeAsync(ptr, g_stream);
}

extern "C" h3s_status h3c_memset(const char *op, void *dptr, size_t bytes) {
    if (bytes == 0) return H3S_OK;
    cudaError_t e = cudaMemsetAsync(dptr, 0, bytes, g_stream);
    if (e != cudaSuccess) return cuda_fail(op, "cudaMemsetAsync", e);
    return H3S_OK;
}

extern "C" h3s_status h3c_copy_d2d(const char *op, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return H3S_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream);
    if (e != cudaSuccess) return cuda_fail(op, "cudaMemcpyAsync", e);
    return H3S_OK;
}

/* ------------------------------------------------------------------ index cache
 * Host index and mask tensors (I64, BOOL) are small and reused across many calls (the same
 * AdaLN index by every block).  A device copy is found by content: equal byte length and
 * equal bytes (memcmp against the kept host copy, so a hash collision cannot serve wrong
 * indices).  Least recently used entries are evicted; eviction waits for the stream first,
 * since queued kernels may still read the copy. */
#define H3C_CACHE_SLOTS 64

typedef struct cache_entry {
    size_t bytes;
    void *host; /* malloc'd copy of the content */
    void *dev;
    uint64_t last_use;
} cache_entry;

static cache_entry g_cache[H3C_CACHE_SLOTS];
static uint64_t g_clock = 0;

static void cache_drop(cache_entry *c) {
    free(c->host);
    cudaFree(c->dev);
    memset(c, 0, sizeof *c);
}

extern "C" h3s_status h3c_index_on_device(const char *op, const h3s_tensor *t, const void **dptr) {
    *dptr = NULL;
    if (!t) return H3S_OK;
    if (t->device) {
        *dptr = t->data;
        return H3S_OK;
    }
    size_t bytes = h3s_tensor_nbytes(t);
    if (bytes == 0) return H3S_OK;
    pthread_mutex_lock(&g_lock);
    cache_entry *hit = NULL, *victim = &g_cache[0];
    for (int i = 0; i < H3C_CACHE_SLOTS; i++) {
        cache_entry *c = &g_cache[i];
        if (c->dev && c->bytes == bytes && memcmp(c->host, t->data, bytes) == 0) {
            hit = c;
            break;
        }
        if (!c->dev) {
            if (victim->dev) victim = c;
        } else if (victim->dev && c->last_use < victim->last_use) {
            victim = c;
        }
    }
    h3s_status st = H3S_OK;
    if (!hit) {
        if (victim->dev) {
            cudaError_t e = cudaStreamSynchronize(g_stream);
            if (e != cudaSuccess) st = cuda_fail(op, "cudaStreamSynchronize (index cache eviction)", e);
            if (st == H3S_OK) cache_drop(victim);
        }
        if (st == H3S_OK) {
            void *host = malloc(bytes), *dev = NULL;
            cudaError_t e = host ? cudaMalloc(&dev, bytes) : cudaErrorMemoryAllocation;
            if (e == cudaSuccess) e = cudaMemcpyAsync(dev, t->data, bytes, cudaMemcpyHostToDevice, g_stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
            if (e != cudaSuccess) {
                free(host);
                if (dev) cudaFree(dev);
                cudaGetLastError();
                st = cuda_fail(op, "index upload", e);
            } else {
                memcpy(host, t->data, bytes);
                victim->bytes = bytes;
                victim->host = host;
                victim->dev = dev;
                hit = victim;
            }
        }
    }
    if (hit) {
        hit->last_use = ++g_clock;
        *dptr = hit->dev;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

extern "C" void h3s_cuda_release_caches(void) {
    pthread_mutex_lock(&g_lock);
    if (g_state == 1) {
        cudaStreamSynchronize(g_stream);
        for (int i = 0; i < H3C_CACHE_SLOTS; i++)
            if (g_cache[i].dev) cache_drop(&g_cache[i]);
        stage_release();
    }
    const int ready = g_state == 1;
    pthread_mutex_unlock(&g_lock);
    if (ready) h3c_attention_release_plans();
}

/* ------------------------------------------------------------------ error codes */

extern "C" const char *h3c_code_name(int code) {
    switch (code) {
    case H3C_CODE_RMSNORM_FORWARD: return "rmsnorm_forward";
    case H3C_CODE_RMSNORM_BACKWARD: return "rmsnorm_backward";
    case H3C_CODE_RESIDUAL_FORWARD: return "residual_forward";
    case H3C_CODE_RESIDUAL_BACKWARD: return "residual_backward";
    case H3C_CODE_ROWS_GATHER: return "rows_gather";
    case H3C_CODE_ROWS_SCATTER: return "rows_scatter";
    case H3C_CODE_FINAL_NORM_FORWARD: return "final_norm_forward";
    case H3C_CODE_FINAL_NORM_BACKWARD: return "final_norm_backward";
    default: return "cuda kernel";
    }
}

/* Wait for the stream, then read and clear the index flag. */
static h3s_status sync_and_check(const char *op) {
    cudaError_t e = cudaStreamSynchronize(g_stream);
    if (e != cudaSuccess) return cuda_fail(op, "cudaStreamSynchronize", e);
    int flag[4] = {0, 0, 0, 0};
    e = cudaMemcpy(flag, g_flag, sizeof flag, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return cuda_fail(op, "reading the index error flag", e);
    if (flag[0] != 0) {
        long long value;
        memcpy(&value, &flag[2], sizeof value);
        e = cudaMemset(g_flag, 0, 4 * sizeof(int));
        if (e != cudaSuccess) return cuda_fail(op, "clearing the index error flag", e);
        return h3s_fail(H3S_ERR_INDEX,
                        "%s: a device kernel of %s read index %lld, outside its range (the affected outputs were not "
                        "written)",
                        op, h3c_code_name(flag[0]), value);
    }
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_sync(void) {
    H3S_TRY(h3c_init("cuda_sync"));
    return sync_and_check("cuda_sync");
}

extern "C" h3s_status h3s_cuda_stream(void **stream) {
    H3S_TRY(h3c_init("device_stream"));
    *stream = (void *)g_stream;
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_device_sync(void) {
    H3S_TRY(h3c_init("cuda_device_sync"));
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return cuda_fail("cuda_device_sync", "cudaDeviceSynchronize", e);
    return sync_and_check("cuda_device_sync");
}

/* ------------------------------------------------------------------ tensors */

/* Checks and byte count shared by the two allocators. */
static h3s_status tensor_bytes(const char *op, h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape,
                               size_t *bytes) {
    if (!t) return h3s_fail(H3S_ERR_INVALID, "%s: tensor is NULL", op);
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > H3S_MAX_DIMS)
        return h3s_fail(H3S_ERR_SHAPE, "%s: %d dims (at most %d)", op, ndim, H3S_MAX_DIMS);
    if (ndim > 0 && !shape) return h3s_fail(H3S_ERR_INVALID, "%s: shape is NULL", op);
    if ((int)dtype < (int)H3S_F64 || (int)dtype > (int)H3S_BOOL)
        return h3s_fail(H3S_ERR_DTYPE, "%s: unknown dtype %d", op, (int)dtype);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return h3s_fail(H3S_ERR_SHAPE, "%s: shape[%d] = %lld is negative", op, d, (long long)shape[d]);
        if (shape[d] > 0 && n > SIZE_MAX / 16 / (size_t)shape[d])
            return h3s_fail(H3S_ERR_SHAPE, "%s: tensor size overflows", op);
        n *= (size_t)shape[d];
    }
    H3S_TRY(h3c_init(op));
    *bytes = n * h3s_dtype_size(dtype);
    /* More than the device has can never succeed: refuse it here, with the sizes, rather than as an
     * allocator error (which tools such as compute-sanitizer also report as a failed API call). */
    if (*bytes > (size_t)g_prop.totalGlobalMem)
        return h3s_fail(H3S_ERR_NOMEM, "%s: %zu bytes exceed the device's %zu bytes of memory", op, *bytes,
                        (size_t)g_prop.totalGlobalMem);
    return H3S_OK;
}

static void tensor_set(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape, void *p, int owns) {
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->data = p;
    t->owns_data = owns;
    t->device = 1;
}

extern "C" h3s_status h3s_cuda_tensor_alloc(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    static const char op[] = "cuda_tensor_alloc";
    size_t bytes = 0;
    H3S_TRY(tensor_bytes(op, t, dtype, ndim, shape, &bytes));
    void *p = NULL;
    if (bytes) {
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return h3s_fail(e == cudaErrorMemoryAllocation ? H3S_ERR_NOMEM : H3S_ERR_DEVICE,
                            "%s: cudaMalloc of %zu bytes failed: %s", op, bytes, cudaGetErrorString(e));
        }
        /* zero-filled like h3s_tensor_alloc */
        e = cudaMemsetAsync(p, 0, bytes, g_stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
        if (e != cudaSuccess) {
            cudaFree(p);
            return cuda_fail(op, "zero fill", e);
        }
    }
    tensor_set(t, dtype, ndim, shape, p, 1);
    return H3S_OK;
}

/* H3S_CUDA_POISON_UNINIT=1 (a test knob): memory allocated without a fill is filled with 0xff bytes (NaN in every
 * float format) instead, so that a result that read memory nobody wrote shows as NaN. */
static int poison_uninit(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("H3S_CUDA_POISON_UNINIT");
        v = e && e[0] == '1' ? 1 : 0;
    }
    return v;
}

static h3s_status alloc_ordered(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape, int zero) {
    static const char op[] = "cuda_tensor_alloc";
    size_t bytes = 0;
    H3S_TRY(tensor_bytes(op, t, dtype, ndim, shape, &bytes));
    void *p = NULL;
    if (bytes) {
        cudaError_t e = cudaMallocAsync(&p, bytes, g_stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return h3s_fail(e == cudaErrorMemoryAllocation ? H3S_ERR_NOMEM : H3S_ERR_DEVICE,
                            "%s: device memory of %zu bytes: %s", op, bytes, cudaGetErrorString(e));
        }
        /* zero-filled like h3s_tensor_alloc, in stream order: every later use on the stream sees the zeros */
        if (zero || poison_uninit()) e = cudaMemsetAsync(p, zero ? 0 : 0xff, bytes, g_stream);
        if (e != cudaSuccess) {
            cudaFreeAsync(p, g_stream);
            return cuda_fail(op, "fill", e);
        }
    }
    tensor_set(t, dtype, ndim, shape, p, H3S_CUDA_OWNS_ORDERED);
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_tensor_alloc_ordered(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape) {
    return alloc_ordered(t, dtype, ndim, shape, 1);
}

extern "C" h3s_status h3s_cuda_tensor_alloc_ordered_uninit(h3s_tensor *t, h3s_dtype dtype, int ndim,
                                                           const int64_t *shape) {
    return alloc_ordered(t, dtype, ndim, shape, 0);
}

extern "C" void h3s_cuda_tensor_free(h3s_tensor *t) {
    if (!t) return;
    if (t->device && t->owns_data && t->data) {
        if (t->owns_data == H3S_CUDA_OWNS_ORDERED)
            cudaFreeAsync(t->data, g_stream); /* after every use queued so far on the stream */
        else
            cudaFree(t->data); /* queued kernels may still use it: cudaFree waits for the device */
    }
    t->data = NULL;
    t->owns_data = 0;
}

static h3s_status check_copy(const char *op, const h3s_tensor *host, const h3s_tensor *dev) {
    if (!host || !dev) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    if (host->device != 0) return h3s_fail(H3S_ERR_DEVICE, "%s: the host tensor has device = %d", op, host->device);
    if (dev->device != 1) return h3s_fail(H3S_ERR_DEVICE, "%s: the device tensor has device = %d", op, dev->device);
    if (host->dtype != dev->dtype)
        return h3s_fail(H3S_ERR_DTYPE, "%s: host tensor is %s, device tensor is %s", op, h3s_dtype_name(host->dtype),
                        h3s_dtype_name(dev->dtype));
    H3S_TRY(h3s_check_extent(op, "the host tensor", host));
    H3S_TRY(h3s_check_extent(op, "the device tensor", dev));
    if (h3s_tensor_numel(host) != h3s_tensor_numel(dev))
        return h3s_fail(H3S_ERR_SHAPE, "%s: host tensor has %lld elements, device tensor %lld", op,
                        (long long)h3s_tensor_numel(host), (long long)h3s_tensor_numel(dev));
    if (h3s_tensor_nbytes(host) && (!host->data || !dev->data))
        return h3s_fail(H3S_ERR_INVALID, "%s: tensor data is NULL", op);
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_upload(const h3s_tensor *host, h3s_tensor *dev) {
    static const char op[] = "cuda_upload";
    H3S_TRY(check_copy(op, host, dev));
    H3S_TRY(h3c_init(op));
    size_t bytes = h3s_tensor_nbytes(host);
    if (!bytes) return H3S_OK;
    cudaError_t e = cudaMemcpyAsync(dev->data, host->data, bytes, cudaMemcpyHostToDevice, g_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
    if (e != cudaSuccess) return cuda_fail(op, "host to device copy", e);
    return H3S_OK;
}

/* ------------------------------------------------------------------ uploads in stream order
 * A pass's inputs (a few MB) go through one pinned staging buffer: the host bytes are copied into it at once (the
 * caller may reuse its memory on return), and the copy to the device is queued on the library's stream behind the
 * work already there, with no synchronisation (a copy from pageable memory could wait for that work).  The buffer
 * is filled front to back; before it is reused from the front, the host waits for the event recorded after the last
 * copy queued out of it, so no staged byte is overwritten before the device has read it.  Larger tensors take the
 * synchronous path (h3s_cuda_upload). */
#define H3C_STAGE_BYTES ((size_t)32 << 20)

static uint8_t *g_stage = NULL;
static size_t g_stage_off = 0;
static cudaEvent_t g_stage_done = NULL;
static int g_stage_pending = 0;

static h3s_status stage_take(const char *op, size_t need, uint8_t **at) {
    if (!g_stage) {
        cudaError_t e = cudaHostAlloc((void **)&g_stage, H3C_STAGE_BYTES, cudaHostAllocDefault);
        if (e == cudaSuccess && !g_stage_done) e = cudaEventCreateWithFlags(&g_stage_done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            if (g_stage) cudaFreeHost(g_stage);
            g_stage = NULL;
            cudaGetLastError();
            return cuda_fail(op, "pinned staging buffer", e);
        }
        g_stage_off = 0;
        g_stage_pending = 0;
    }
    if (g_stage_off + need > H3C_STAGE_BYTES) {
        if (g_stage_pending) {
            cudaError_t e = cudaEventSynchronize(g_stage_done);
            if (e != cudaSuccess) return cuda_fail(op, "waiting for the staged copies", e);
            g_stage_pending = 0;
        }
        g_stage_off = 0;
    }
    *at = g_stage + g_stage_off;
    g_stage_off += (need + 255) & ~(size_t)255;
    return H3S_OK;
}

/* Drop the staging buffer (h3s_cuda_release_caches; the caller holds g_lock and has synchronised the stream). */
static void stage_release(void) {
    if (g_stage) cudaFreeHost(g_stage);
    g_stage = NULL;
    g_stage_off = 0;
    g_stage_pending = 0;
}

extern "C" h3s_status h3s_cuda_upload_ordered(const h3s_tensor *host, h3s_tensor *dev) {
    static const char op[] = "cuda_upload";
    H3S_TRY(check_copy(op, host, dev));
    H3S_TRY(h3c_init(op));
    const size_t bytes = h3s_tensor_nbytes(host);
    if (!bytes) return H3S_OK;
    if (bytes > H3C_STAGE_BYTES / 4) return h3s_cuda_upload(host, dev);
    pthread_mutex_lock(&g_lock);
    uint8_t *at = NULL;
    h3s_status st = stage_take(op, bytes, &at);
    if (st == H3S_OK) {
        memcpy(at, host->data, bytes);
        cudaError_t e = cudaMemcpyAsync(dev->data, at, bytes, cudaMemcpyHostToDevice, g_stream);
        if (e == cudaSuccess) e = cudaEventRecord(g_stage_done, g_stream);
        if (e == cudaSuccess)
            g_stage_pending = 1;
        else
            st = cuda_fail(op, "host to device copy", e);
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

extern "C" h3s_status h3s_cuda_download(const h3s_tensor *dev, h3s_tensor *host) {
    static const char op[] = "cuda_download";
    H3S_TRY(check_copy(op, host, dev));
    H3S_TRY(h3c_init(op));
    size_t bytes = h3s_tensor_nbytes(host);
    if (bytes) {
        cudaError_t e = cudaMemcpyAsync(host->data, dev->data, bytes, cudaMemcpyDeviceToHost, g_stream);
        if (e != cudaSuccess) return cuda_fail(op, "device to host copy", e);
    }
    /* the bytes are only meaningful if no kernel before them read a bad index */
    return sync_and_check(op);
}

/* ------------------------------------------------------------------ caller-owned device tensors
 * A caller's device tensor (a torch CUDA tensor handed to the model) is checked before use: its first byte must be
 * device (or managed) memory of the library's device, aligned to its elements.  That its whole extent is the
 * caller's, the CUDA runtime cannot tell; the caller vouches for it, as for any pointer. */
static h3s_status check_caller_device(const char *op, const char *what, const h3s_tensor *t) {
    if (!t || t->device != 1) return h3s_fail(H3S_ERR_DEVICE, "%s: %s is not a device tensor", op, what);
    const size_t bytes = h3s_tensor_nbytes(t);
    if (!bytes) return H3S_OK;
    if (!t->data) return h3s_fail(H3S_ERR_INVALID, "%s: %s has no data", op, what);
    if (((uintptr_t)t->data) % h3s_dtype_size(t->dtype))
        return h3s_fail(H3S_ERR_INVALID, "%s: %s is not aligned to its %s elements", op, what,
                        h3s_dtype_name(t->dtype));
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, t->data);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return h3s_fail(H3S_ERR_DEVICE, "%s: %s: cudaPointerGetAttributes: %s", op, what, cudaGetErrorString(e));
    }
    int dev = -1;
    cudaGetDevice(&dev);
    if ((a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) || a.device != dev)
        return h3s_fail(H3S_ERR_DEVICE, "%s: %s is not memory of the library's CUDA device %d", op, what, dev);
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_check_tensor(const char *what, const h3s_tensor *t) {
    H3S_TRY(h3c_init("cuda_check_tensor"));
    return check_caller_device("model", what, t);
}

/* A stream-ordered copy between two device tensors of equal dtype and element count (the source may be the
 * caller's, the destination the library's, or the other way round). */
extern "C" h3s_status h3s_cuda_copy(const h3s_tensor *src, h3s_tensor *dst) {
    static const char op[] = "cuda_copy";
    if (!src || !dst) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    H3S_TRY(h3c_init(op));
    H3S_TRY(check_caller_device(op, "the source", src));
    H3S_TRY(check_caller_device(op, "the destination", dst));
    if (src->dtype != dst->dtype || h3s_tensor_numel(src) != h3s_tensor_numel(dst))
        return h3s_fail(H3S_ERR_SHAPE, "%s: %s[%lld] into %s[%lld]", op, h3s_dtype_name(src->dtype),
                        (long long)h3s_tensor_numel(src), h3s_dtype_name(dst->dtype), (long long)h3s_tensor_numel(dst));
    return h3c_copy_d2d(op, dst->data, src->data, h3s_tensor_nbytes(src));
}

/* The smallest index of a NaN or infinite element (atomicMin of the indices: the same answer in any order), or
 * INT64_MAX when every element is finite. */
template <typename T> __device__ __forceinline__ bool h3k_finite_at(const T *p, int64_t i);
template <> __device__ __forceinline__ bool h3k_finite_at<float>(const float *p, int64_t i) { return isfinite(p[i]); }
template <> __device__ __forceinline__ bool h3k_finite_at<double>(const double *p, int64_t i) { return isfinite(p[i]); }
template <> __device__ __forceinline__ bool h3k_finite_at<uint16_t>(const uint16_t *p, int64_t i) {
    return (p[i] & 0x7f80u) != 0x7f80u; /* BF16: exponent all ones is Inf or NaN */
}
template <typename T> __global__ void first_nonfinite_kernel(const T *p, int64_t n, unsigned long long *first) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (!h3k_finite_at<T>(p, i)) atomicMin(first, (unsigned long long)i);
}

extern "C" h3s_status h3s_cuda_first_nonfinite(const h3s_tensor *t, int64_t *index) {
    static const char op[] = "cuda_first_nonfinite";
    if (!index) return h3s_fail(H3S_ERR_INVALID, "%s: NULL index", op);
    *index = -1;
    H3S_TRY(h3c_init(op));
    H3S_TRY(check_caller_device(op, "the tensor", t));
    const int64_t n = h3s_tensor_numel(t);
    if (n == 0) return H3S_OK;
    if (t->dtype != H3S_F32 && t->dtype != H3S_F64 && t->dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_DTYPE, "%s: %s is not a float dtype", op, h3s_dtype_name(t->dtype));
    void *w = NULL;
    H3S_TRY(h3c_ws_alloc(op, sizeof(unsigned long long), &w));
    unsigned long long *first = (unsigned long long *)w, host = 0;
    cudaError_t e = cudaMemsetAsync(first, 0xff, sizeof *first, g_stream);
    if (e == cudaSuccess) {
        const unsigned blocks = (unsigned)(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
        if (t->dtype == H3S_F32)
            first_nonfinite_kernel<float><<<blocks, 256, 0, g_stream>>>((const float *)t->data, n, first);
        else if (t->dtype == H3S_F64)
            first_nonfinite_kernel<double><<<blocks, 256, 0, g_stream>>>((const double *)t->data, n, first);
        else
            first_nonfinite_kernel<uint16_t><<<blocks, 256, 0, g_stream>>>((const uint16_t *)t->data, n, first);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, g_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
    h3c_ws_free(w);
    if (e != cudaSuccess) return cuda_fail(op, "the finiteness check", e);
    if (host != ~0ull) *index = (int64_t)host;
    return H3S_OK;
}

extern "C" h3s_status h3s_cuda_describe(char *buf, size_t size) {
    if (!buf || size == 0) return h3s_fail(H3S_ERR_INVALID, "cuda_describe: empty buffer");
    h3s_status st = h3c_init("cuda_describe");
    if (st != H3S_OK) {
        snprintf(buf, size, "unavailable: %s", h3s_last_error());
        return st;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, size, "%s, sm_%d%d, %d SMs, %.1f GiB, driver API %d.%d, runtime %d.%d, kernels built for sm_%da",
             g_prop.name, g_prop.major, g_prop.minor, g_prop.multiProcessorCount,
             (double)g_prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), drv / 1000, (drv % 1000) / 10, rt / 1000,
             (rt % 1000) / 10, H3C_BUILT_ARCH);
    return H3S_OK;
}

/* Helpers shared by the GPU tests (header-only, on top of tests/test_util.h).
 *
 * Every GPU test starts with gpu_require(): without a usable CUDA device (or in a build
 * without the CUDA backend) it prints one "SKIP: no CUDA GPU: <reason>" line and exits 77. */
#ifndef H3S_GPU_UTIL_H
#define H3S_GPU_UTIL_H

#include <time.h>

#include "cuda/cuda_extra.h"
#include "cuda/cuda_ops.h"
#include "ops/fold.h"
#include "ops/ops.h"
#include "test_util.h"

/* Called first by every GPU test: stdout line-buffered, so that a run stopped by a time limit (a device call's, or
 * ctest's) still leaves every line it printed, and then the skip when there is no GPU. */
static inline void gpu_require(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!h3s_cuda_available()) {
        char msg[1200];
        snprintf(msg, sizeof msg, "no CUDA GPU: %s", h3s_last_error());
        h3t_skip(msg);
    }
    char desc[512];
    if (h3s_cuda_describe(desc, sizeof desc) == H3S_OK) printf("device: %s\n", desc);
}

/* Small problem sizes when H3S_GPU_TEST_SMALL is set (the compute-sanitizer runs). */
static inline int gpu_small(void) {
    const char *s = getenv("H3S_GPU_TEST_SMALL");
    return s && s[0] && s[0] != '0';
}

static inline double gpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void gpu_die(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, h3s_last_error());
    exit(2);
}

static inline h3s_tensor gdev(h3s_dtype dt, int ndim, const int64_t *shape) {
    h3s_tensor t;
    if (h3s_cuda_tensor_alloc(&t, dt, ndim, shape) != H3S_OK) gpu_die("device allocation");
    return t;
}
static inline h3s_tensor gdev1(h3s_dtype dt, int64_t a) { return gdev(dt, 1, &a); }
static inline h3s_tensor gdev2(h3s_dtype dt, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return gdev(dt, 2, s);
}

/* Device copy of a host tensor. */
static inline h3s_tensor gup(const h3s_tensor *host) {
    h3s_tensor d = gdev(host->dtype, host->ndim, host->shape);
    if (h3s_cuda_upload(host, &d) != H3S_OK) gpu_die("upload");
    return d;
}

/* Host copy of a device tensor (waits for the stream; a kernel error fails the test). */
static inline h3s_tensor gdown(const h3s_tensor *dev) {
    h3s_tensor h = h3t_alloc(dev->dtype, dev->ndim, dev->shape);
    h3s_status st = h3s_cuda_download(dev, &h);
    CHECK(st == H3S_OK, "download: %s", h3s_last_error());
    return h;
}

/* Rows [r0, r0 + n) of a 2-D device tensor, as a borrowed device view. */
static inline h3s_tensor grows(const h3s_tensor *t, int64_t r0, int64_t n) {
    h3s_tensor v = *t;
    v.shape[0] = n;
    v.data = (char *)t->data + (size_t)(r0 * t->shape[1]) * h3s_dtype_size(t->dtype);
    v.owns_data = 0;
    return v;
}

/* Fill a device tensor with NaN-like poison (0x7f7f bytes) so unwritten outputs show. */
static inline void gpoison(h3s_tensor *dev) {
    h3s_tensor h = h3t_alloc(dev->dtype, dev->ndim, dev->shape);
    h3t_poison(&h);
    if (h3s_cuda_upload(&h, dev) != H3S_OK) gpu_die("poison upload");
    h3s_tensor_free(&h);
}

static inline void gfill(h3s_tensor *dev, uint64_t seed, float scale) {
    if (h3s_cuda_fill_random(dev, seed, scale) != H3S_OK) gpu_die("fill_random");
}

static inline void gfree(h3s_tensor *t) { h3s_cuda_tensor_free(t); }

/* Bitwise equality of a device tensor's download with a host tensor. */
static inline int gequal(const h3s_tensor *dev, const h3s_tensor *host) {
    h3s_tensor h = gdown(dev);
    int eq = h3t_bitwise_equal(&h, host);
    h3s_tensor_free(&h);
    return eq;
}

/* SHA-256 of rows [r0, r0 + n) of a device tensor (the whole tensor when n < 0). */
static inline void ghash(const h3s_tensor *dev, int64_t r0, int64_t n, char out[65]) {
    h3s_tensor v = n < 0 ? *dev : grows(dev, r0, n);
    h3s_tensor h = gdown(&v);
    if (h3s_sha256_hex(h.data, h3s_tensor_nbytes(&h), out) != H3S_OK) gpu_die("sha256");
    h3s_tensor_free(&h);
}

/* Host tensor of `dt` filled with seeded normals (rounded to dt). */
static inline h3s_tensor hrand(h3s_dtype dt, int64_t a, int64_t b, uint64_t seed, float scale) {
    return b > 0 ? h3t_normal2(dt, a, b, seed, scale) : h3t_normal1(dt, a, seed, scale);
}

/* Report and check an accuracy figure: GPU error against the FP64 golden, with the CPU
 * strict backend's error on the same inputs printed beside it. */
static inline void report_err(const char *what, double gpu_err, double cpu_err, double tol) {
    printf("  %-40s gpu rel_l2 %.3e   cpu strict %.3e   (tol %.1e)\n", what, gpu_err, cpu_err, tol);
    CHECK(gpu_err <= tol, "%s: GPU error %.3e exceeds %.1e", what, gpu_err, tol);
    CHECK(gpu_err <= 1.25 * cpu_err + 1e-3, "%s: GPU error %.3e exceeds 1.25 x CPU strict %.3e + 1e-3", what, gpu_err,
          cpu_err);
}

#endif

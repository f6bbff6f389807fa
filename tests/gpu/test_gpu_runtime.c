/* CUDA runtime of the strict backend: device tensors, copies, the fail-closed paths (host or
 * mixed tensors, bad device indices reported by h3s_cuda_sync as H3S_ERR_INDEX), the index
 * cache, the seeded device fill, the stream-ordered uploads through the pinned staging buffer, and the GEMM
 * epilogues' hardware BF16 pack against the software rounding on every F32 bit pattern. */
#include "cuda/cuda_internal.h"
#include "gpu_util.h"

static void test_roundtrip(void) {
    h3s_tensor h = hrand(H3S_F32, 37, 11, 5, 1.0f);
    h3s_tensor d = gup(&h);
    CHECK(d.device == 1 && d.owns_data, "device tensor flags");
    CHECK(gequal(&d, &h), "upload/download round trip");
    h3s_tensor b = hrand(H3S_BF16, 5, 3, 6, 1.0f);
    h3s_tensor db = gup(&b);
    CHECK(gequal(&db, &b), "BF16 round trip");
    /* a fresh device tensor is zero-filled like a host one */
    h3s_tensor z = gdev2(H3S_F32, 4, 4), zh = h3t_alloc2(H3S_F32, 4, 4);
    CHECK(gequal(&z, &zh), "zero fill");
    /* copies check dtype and size */
    h3s_tensor wrong = h3t_alloc2(H3S_F32, 36, 11);
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_cuda_download(&d, &wrong));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_cuda_upload(&b, &d));
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_cuda_upload(&d, &d));
    gfree(&d), gfree(&db), gfree(&z);
    h3s_tensor_free(&h), h3s_tensor_free(&b), h3s_tensor_free(&zh), h3s_tensor_free(&wrong);
}

/* The stream-ordered allocator of the model's activations: zero-filled in stream order, usable by the next
 * operation without a synchronisation, freed in stream order, refused sizes and shapes as the plain one. */
static void test_ordered(void) {
    h3s_tensor o;
    int64_t s[2] = {33, 7};
    CHECK_OK(h3s_cuda_tensor_alloc_ordered(&o, H3S_F32, 2, s));
    CHECK(o.device == 1 && o.owns_data == H3S_CUDA_OWNS_ORDERED && o.data, "ordered tensor flags");
    h3s_tensor zh = h3t_alloc2(H3S_F32, 33, 7);
    CHECK(gequal(&o, &zh), "ordered zero fill");
    /* written by an operation queued right after the allocation, then read back */
    h3s_tensor a = hrand(H3S_F32, 33, 7, 9, 1.0f), b = hrand(H3S_F32, 33, 7, 10, 1.0f);
    h3s_tensor ad = gup(&a), bd = gup(&b);
    CHECK_OK(h3s_grad_add(&ad, &bd, &o));
    h3s_tensor want = h3t_alloc2(H3S_F32, 33, 7);
    CHECK_OK(h3s_grad_add(&a, &b, &want));
    CHECK(gequal(&o, &want), "ordered tensor written by the next operation");
    h3s_cuda_tensor_free(&o);
    CHECK(o.data == NULL && o.owns_data == 0, "ordered free clears the tensor");
    int64_t huge[2] = {(int64_t)1 << 40, 1 << 10}, neg[2] = {-1, 3};
    const h3s_status big = h3s_cuda_tensor_alloc_ordered(&o, H3S_F32, 2, huge); /* 4 PiB */
    CHECK(big == H3S_ERR_NOMEM && o.data == NULL && o.owns_data == 0, "4 PiB refused as NOMEM (got %s: %s)",
          h3s_status_name(big), h3s_last_error());
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_cuda_tensor_alloc_ordered(&o, H3S_F32, 2, neg));
    CHECK_OK(h3s_cuda_sync());
    gfree(&ad), gfree(&bd);
    h3s_tensor_free(&zh), h3s_tensor_free(&a), h3s_tensor_free(&b), h3s_tensor_free(&want);
}

/* Uploads in stream order through the pinned staging buffer (h3s_cuda_upload_ordered, a model pass's inputs): the
 * host bytes are taken at once (the host buffer is overwritten right after each call), 40 uploads of 1 MB pass the
 * buffer's 32 MB so that it is reused from the front, an operation queued right after an upload reads the new bytes,
 * a 9 MB tensor takes the synchronous copy, and bad pairs are refused as by h3s_cuda_upload. */
static void test_upload_ordered(void) {
    enum { N = 40 };
    int64_t s[2] = {512, 512};
    h3s_tensor d[N], want[N];
    h3s_tensor h = h3t_alloc2(H3S_F32, 512, 512);
    for (int i = 0; i < N; i++) {
        want[i] = hrand(H3S_F32, 512, 512, 100 + (uint64_t)i, 1.0f);
        CHECK_OK(h3s_cuda_tensor_alloc_ordered_uninit(&d[i], H3S_F32, 2, s));
        memcpy(h.data, want[i].data, h3s_tensor_nbytes(&h));
        CHECK_OK(h3s_cuda_upload_ordered(&h, &d[i]));
        memset(h.data, 0xff, h3s_tensor_nbytes(&h)); /* the library took its copy */
    }
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += !gequal(&d[i], &want[i]);
    CHECK(bad == 0, "ordered uploads: %d of %d tensors differ from what was uploaded", bad, N);
    /* the next operation on the stream reads the uploaded bytes, with no synchronisation between */
    h3s_tensor a = hrand(H3S_F32, 512, 512, 7, 1.0f), sum = h3t_alloc2(H3S_F32, 512, 512);
    h3s_tensor ad, outd;
    CHECK_OK(h3s_cuda_tensor_alloc_ordered_uninit(&ad, H3S_F32, 2, s));
    CHECK_OK(h3s_cuda_tensor_alloc_ordered(&outd, H3S_F32, 2, s));
    CHECK_OK(h3s_cuda_upload_ordered(&a, &ad));
    CHECK_OK(h3s_grad_add(&ad, &d[0], &outd));
    CHECK_OK(h3s_grad_add(&a, &want[0], &sum));
    CHECK(gequal(&outd, &sum), "an operation queued after an ordered upload reads its bytes");
    /* over 8 MB: the synchronous copy */
    h3s_tensor big = hrand(H3S_F32, 1536, 1536, 8, 1.0f), bigd;
    int64_t sb[2] = {1536, 1536};
    CHECK_OK(h3s_cuda_tensor_alloc_ordered_uninit(&bigd, H3S_F32, 2, sb));
    CHECK_OK(h3s_cuda_upload_ordered(&big, &bigd));
    CHECK(gequal(&bigd, &big), "a 9 MB ordered upload");
    h3s_tensor b16 = hrand(H3S_BF16, 512, 512, 9, 1.0f);
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_cuda_upload_ordered(&b16, &d[1]));
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_cuda_upload_ordered(&d[1], &d[2]));
    CHECK_OK(h3s_cuda_sync());
    for (int i = 0; i < N; i++) {
        h3s_cuda_tensor_free(&d[i]);
        h3s_tensor_free(&want[i]);
    }
    h3s_cuda_tensor_free(&ad), h3s_cuda_tensor_free(&outd), h3s_cuda_tensor_free(&bigd);
    h3s_tensor_free(&h), h3s_tensor_free(&a), h3s_tensor_free(&sum), h3s_tensor_free(&big), h3s_tensor_free(&b16);
}

static void test_fail_closed(void) {
    /* host tensors handed to a CUDA twin directly */
    h3s_tensor x = hrand(H3S_BF16, 8, 16, 1, 1.0f), w = hrand(H3S_BF16, 4, 16, 2, 0.2f);
    h3s_tensor y = h3t_alloc2(H3S_BF16, 8, 4);
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_cuda_linear_forward(&x, &w, NULL, &y));
    /* mixed host/device through the public entry point */
    h3s_tensor xd = gup(&x), yd = gdev2(H3S_BF16, 8, 4);
    h3s_status st = h3s_linear_forward(&xd, &w, NULL, &yd);
    CHECK(st != H3S_OK && h3s_last_error()[0], "mixed host/device linear must fail (got %s)", h3s_status_name(st));
    /* an unsupported dtype on the device */
    h3s_tensor x64 = h3t_to_f64(&x);
    h3s_tensor x64d = gup(&x64);
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_cuda_linear_forward(&x64d, &x64d, NULL, &x64d));
    gfree(&xd), gfree(&yd), gfree(&x64d);
    h3s_tensor_free(&x), h3s_tensor_free(&w), h3s_tensor_free(&y), h3s_tensor_free(&x64);
}

/* A device index outside its range: the op is queued, the kernel refuses the row and raises
 * the flag, h3s_cuda_sync reports H3S_ERR_INDEX once, then the flag is clear again. */
static void test_bad_device_index(void) {
    const int64_t M = 6, H = 32, R = 3;
    h3s_tensor x = hrand(H3S_BF16, M, H, 3, 1.0f), table = hrand(H3S_BF16, R, 2 * H, 4, 0.1f);
    h3s_tensor idx = h3t_alloc1(H3S_I64, M);
    int64_t *iv = (int64_t *)idx.data;
    for (int64_t m = 0; m < M; m++)
        iv[m] = m % R;
    iv[4] = 7; /* out of range */
    h3s_tensor xd = gup(&x), td = gup(&table), id = gup(&idx), yd = gdev2(H3S_BF16, M, H);
    h3s_modulation mod = {&td, &id, 0, 1};
    CHECK_OK(h3s_rmsnorm_forward(&xd, NULL, &mod, 1e-5, &yd));
    CHECK_FAILS(H3S_ERR_INDEX, h3s_cuda_sync());
    CHECK(strstr(h3s_last_error(), "7") != NULL, "message names the bad index: %s", h3s_last_error());
    CHECK_OK(h3s_cuda_sync());
    /* the same through residual and the gather; download reports it too */
    h3s_tensor rd = gup(&x), od = gdev2(H3S_BF16, M, H);
    CHECK_OK(h3s_cuda_residual_forward(&rd, &xd, &td, &id, 1, &od));
    h3s_tensor oh = h3t_alloc2(H3S_BF16, M, H);
    CHECK_FAILS(H3S_ERR_INDEX, h3s_cuda_download(&od, &oh));
    CHECK_OK(h3s_cuda_sync());
    /* a host index outside its range is refused by the entry point before any launch */
    h3s_modulation hmod = {&td, &idx, 0, 1};
    CHECK_FAILS(H3S_ERR_INDEX, h3s_rmsnorm_forward(&xd, NULL, &hmod, 1e-5, &yd));
    CHECK_OK(h3s_cuda_sync());
    gfree(&xd), gfree(&td), gfree(&id), gfree(&yd), gfree(&rd), gfree(&od);
    h3s_tensor_free(&x), h3s_tensor_free(&table), h3s_tensor_free(&idx), h3s_tensor_free(&oh);
}

/* The index cache is keyed by content: changing a host index between calls must change the
 * result (a stale device copy would not). */
static void test_index_cache(void) {
    const int64_t M = 5, H = 16, R = 4;
    h3s_tensor x = hrand(H3S_BF16, M, H, 8, 1.0f), table = hrand(H3S_BF16, R, 2 * H, 9, 0.5f);
    h3s_tensor idx = h3t_alloc1(H3S_I64, M);
    int64_t *iv = (int64_t *)idx.data;
    for (int64_t m = 0; m < M; m++)
        iv[m] = 0;
    h3s_tensor xd = gup(&x), td = gup(&table), y1 = gdev2(H3S_BF16, M, H), y2 = gdev2(H3S_BF16, M, H);
    h3s_modulation mod = {&td, &idx, 0, 1};
    CHECK_OK(h3s_rmsnorm_forward(&xd, NULL, &mod, 1e-5, &y1));
    h3s_tensor a = gdown(&y1);
    iv[2] = 3;
    CHECK_OK(h3s_rmsnorm_forward(&xd, NULL, &mod, 1e-5, &y2));
    h3s_tensor b = gdown(&y2);
    CHECK(h3t_rows_equal(&a, 0, &b, 0, 2) && h3t_rows_equal(&a, 3, &b, 3, 2), "unchanged rows equal");
    CHECK(!h3t_rows_equal(&a, 2, &b, 2, 1), "row 2 follows the changed index");
    /* and back: the first content is served again */
    iv[2] = 0;
    CHECK_OK(h3s_rmsnorm_forward(&xd, NULL, &mod, 1e-5, &y2));
    CHECK(gequal(&y2, &a), "cached index content serves the same bits");
    gfree(&xd), gfree(&td), gfree(&y1), gfree(&y2);
    h3s_tensor_free(&x), h3s_tensor_free(&table), h3s_tensor_free(&idx), h3s_tensor_free(&a), h3s_tensor_free(&b);
}

/* The seeded fill: the same bits for the same (seed, i) whatever the tensor size. */
static void test_fill(void) {
    h3s_tensor a = gdev1(H3S_F32, 1000), b = gdev1(H3S_F32, 300), c = gdev1(H3S_F32, 300);
    gfill(&a, 42, 1.0f);
    gfill(&b, 42, 1.0f);
    gfill(&c, 43, 1.0f);
    h3s_tensor ah = gdown(&a), bh = gdown(&b), ch = gdown(&c);
    CHECK(memcmp(ah.data, bh.data, 300 * sizeof(float)) == 0, "fill is a function of (seed, i)");
    CHECK(memcmp(bh.data, ch.data, 300 * sizeof(float)) != 0, "another seed gives other values");
    double mean = 0, var = 0;
    for (int i = 0; i < 1000; i++)
        mean += ((float *)ah.data)[i] / 1000.0;
    for (int i = 0; i < 1000; i++)
        var += (((float *)ah.data)[i] - mean) * (((float *)ah.data)[i] - mean) / 1000.0;
    CHECK(fabs(mean) < 0.15 && fabs(var - 1.0) < 0.2, "fill mean %g var %g", mean, var);
    gfree(&a), gfree(&b), gfree(&c);
    h3s_tensor_free(&ah), h3s_tensor_free(&bh), h3s_tensor_free(&ch);
}

/* h3k_f2bf2 (one cvt.rn.bf16x2.f32, NaN through the software path) gives h3k_f2bf's bits for all 2^32 inputs
 * (under H3S_GPU_TEST_SMALL, for the sanitizers, every 251st pattern). */
static void test_bf16_pack(void) {
    uint64_t mismatches = 1;
    uint32_t first = 0;
    const uint32_t step = gpu_small() ? 251u : 1u;
    const double t0 = gpu_now();
    CHECK_OK(h3c_bf16_pack_selftest(step, &mismatches, &first));
    printf("bf16 pack: hardware cvt.rn.bf16x2.f32 against the software rounding on %s F32 patterns: %llu "
           "differ (%.2f s)\n",
           step == 1 ? "all 2^32" : "every 251st of the 2^32", (unsigned long long)mismatches, gpu_now() - t0);
    CHECK(mismatches == 0, "bf16 pack: %llu patterns differ, the first 0x%08x", (unsigned long long)mismatches, first);
}

int main(void) {
    gpu_require();
    test_bf16_pack();
    test_roundtrip();
    test_ordered();
    test_upload_ordered();
    test_fail_closed();
    test_bad_device_index();
    test_index_cache();
    test_fill();
    return h3t_finish("test_gpu_runtime");
}

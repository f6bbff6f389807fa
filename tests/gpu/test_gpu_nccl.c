/* The NCCL communicator on one GPU (a world of one): every operation moves device bytes exactly (all-gather,
 * all-to-all, broadcast, split), bad arguments are refused before anything moves, and agreement (a host matter)
 * is refused, and a model's parallel passes refuse a device communicator.  Prints SKIP in a build without NCCL or on
 * a machine without an sm_90 GPU.  Several GPUs (NCCL bootstrapped over MPI) are not exercised here. */
#include "dist/comm.h"
#include "gpu_util.h"
#include "h3s_dist.h"

/* device copy of `host` moved by op into a zeroed device tensor, then compared with `host` */
static void check_moves(h3s_comm *c) {
    h3s_tensor h = hrand(H3S_BF16, 37, 11, 5, 1.0f), h2 = hrand(H3S_F32, 3, 7, 6, 1.0f);
    h3s_tensor src = gup(&h), dst = gdev2(H3S_BF16, 37, 11);
    size_t n = h3s_tensor_nbytes(&h), zero = 0;
    CHECK_OK(h3s_comm_allgatherv(c, src.data, dst.data, &n, &zero));
    CHECK(gequal(&dst, &h), "all-gather of one rank moves the bytes");
    h3s_tensor dst2 = gdev2(H3S_BF16, 37, 11);
    CHECK_OK(h3s_comm_alltoallv(c, src.data, &n, &zero, dst2.data, &n, &zero));
    CHECK(gequal(&dst2, &h), "all-to-all to itself moves the bytes");
    h3s_tensor b = gup(&h2);
    CHECK_OK(h3s_comm_bcast(c, b.data, h3s_tensor_nbytes(&h2), 0));
    CHECK(gequal(&b, &h2), "broadcast from rank 0 leaves the root's bytes");
    /* a part of a buffer, at an offset */
    size_t half = n / 2, off = n - half;
    h3s_tensor dst3 = gdev2(H3S_BF16, 37, 11);
    CHECK_OK(h3s_comm_allgatherv(c, src.data, (char *)dst3.data + off, &half, &zero));
    h3s_tensor back = gdown(&dst3);
    CHECK(memcmp((char *)back.data + off, h.data, half) == 0, "all-gather into an offset");
    CHECK(h3t_all_zero(&(h3s_tensor){.data = back.data, .dtype = H3S_BF16, .ndim = 1, .shape = {(int64_t)(off / 2)}}),
          "bytes before the offset untouched");
    /* refusals, before anything moves */
    CHECK_FAILS(H3S_ERR_INDEX, h3s_comm_bcast(c, b.data, 4, 1));
    CHECK_FAILS(H3S_ERR_INDEX, h3s_comm_send(c, b.data, 4, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_allgatherv(c, src.data, dst.data, NULL, &zero));
    CHECK_FAILS(H3S_ERR_UNSUPPORTED, h3s_comm_agree(c, H3S_OK, NULL));
    gfree(&src), gfree(&dst), gfree(&dst2), gfree(&b), gfree(&dst3);
    h3s_tensor_free(&h), h3s_tensor_free(&h2), h3s_tensor_free(&back);
}

int main(void) {
    if (!h3s_comm_nccl_built()) h3t_skip("this build has no NCCL communicator (nccl.h and libnccl not found)");
    gpu_require();
    h3s_comm *c = NULL;
    CHECK_OK(h3s_comm_nccl_create(NULL, &c));
    if (!c) return h3t_finish("test_gpu_nccl");
    CHECK(h3s_comm_size(c) == 1 && h3s_comm_rank(c) == 0 && c->device == 1, "a world of one on the device");
    check_moves(c);
    h3s_comm *sub = NULL;
    CHECK_OK(h3s_comm_split(c, 0, 0, &sub));
    CHECK(sub && h3s_comm_size(sub) == 1, "a split of one");
    if (sub) check_moves(sub);
    h3s_comm_free(sub);
    /* a model's parallel passes refuse a device communicator */
    h3s_config cfg;
    CHECK_OK(h3s_config_preset("tiny", -1, &cfg));
    h3s_weights *w = NULL;
    h3s_model *m = NULL;
    CHECK_OK(h3s_weights_create(&cfg, 1, &w));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    CHECK_FAILS(H3S_ERR_UNSUPPORTED, h3s_model_set_parallel(m, c, 1, 1));
    h3s_model_free(m);
    h3s_weights_free(w);
    h3s_comm_free(c);
    return h3t_finish("test_gpu_nccl");
}

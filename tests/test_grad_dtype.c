/* Parameter gradients in BF16 (h3s_model_set_grad_dtype): on the strict CPU backend, a forward + backward with
 * BF16 gradients gives the outputs and input gradients of the F32 run bit for bit, every BF16 parameter's gradient
 * is the F32 one rounded to nearest even and every F32 parameter's is unchanged (the tiny preset and a configuration
 * of odd sizes, batch 2 with padding rows and a mask, and with a choice of gradients); refusals (another dtype, the
 * golden model, a NULL model).  The CUDA backend, where the blocks' weight-gradient GEMMs round as they store:
 * tests/gpu/test_gpu_model.c and tests/gpu/test_gpu_linear.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_util.h"

static void run_case(const char *label, const h3s_config *c, int64_t batch, int64_t pad_to, int mask) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(c, 5, &w));
    if (!w) return;
    h3s_model *f = NULL, *b = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &f));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &b));
    if (!f || !b) return;
    CHECK(h3s_model_grad_dtype(b) == H3S_F32, "%s: gradients are F32 by default", label);
    CHECK_OK(h3s_model_set_grad_dtype(b, H3S_BF16));
    CHECK(h3s_model_grad_dtype(b) == H3S_BF16, "%s: grad dtype BF16 was not kept", label);
    request q;
    make_request(c, batch, pad_to, mask, &q);
    run rf, rb;
    forward_backward(f, &q.in, &rf);
    forward_backward(b, &q.in, &rb);
    int64_t nbf = 0;
    const int ok = grads_bf16_of(&rf, &rb, &nbf);
    printf("%s: %lld of %lld parameter gradients in BF16, each the F32 one rounded: %s\n", label, (long long)nbf,
           (long long)rb.grads.count, ok ? "yes" : "NO");
    CHECK(ok, "%s: BF16 gradients are not the F32 ones rounded", label);
    CHECK(nbf > 0, "%s: no gradient came back in BF16", label);
    run_free(&rf);
    run_free(&rb);
    request_free(&q);
    h3s_model_free(f);
    h3s_model_free(b);
    h3s_weights_free(w);
}

int main(void) {
    h3s_config tiny, odd;
    CHECK_OK(h3s_config_preset("tiny", -1, &tiny));
    odd = odd_config(&tiny);
    run_case("tiny, batch 1", &tiny, 1, 0, 0);
    run_case("odd config, batch 2, padding rows and mask", &odd, 2, 64, 1);

    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&tiny, 1, &w));
    h3s_model *m = NULL, *g = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_GOLDEN, &g));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_set_grad_dtype(m, H3S_F16));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_set_grad_dtype(m, H3S_F64));
    CHECK(h3s_model_grad_dtype(m) == H3S_F32, "a refused dtype was kept");
    CHECK_FAILS(H3S_ERR_UNSUPPORTED, h3s_model_set_grad_dtype(g, H3S_BF16));
    CHECK(h3s_model_grad_dtype(g) == H3S_F64, "the golden model's gradients are F64");
    CHECK_OK(h3s_model_set_grad_dtype(g, H3S_F32));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_grad_dtype(NULL, H3S_BF16));
    /* back to F32: the next backward hands F32 over again */
    CHECK_OK(h3s_model_set_grad_dtype(m, H3S_BF16));
    CHECK_OK(h3s_model_set_grad_dtype(m, H3S_F32));
    CHECK(h3s_model_grad_dtype(m) == H3S_F32, "back to F32");
    h3s_model_free(m);
    h3s_model_free(g);
    h3s_weights_free(w);
    return h3t_finish("test_grad_dtype");
}

/* libFuzzer target: cotangent validation.  The input is a cotangent file (safetensors with "sample" and
 * "audio_sample"); it is read as the CLI reads it and handed to h3s_model_backward on a fixed micro request
 * (batch 2, forward taped once).  Properties: no crash/UB/leak; a refusal leaves a printable message; an accepted
 * cotangent gives one gradient per parameter. */
#include "fuzz_common.h"

static h3s_model *model;
static h3s_weights *weights; /* kept reachable for the leak checker */
static h3s_tape *tape;
static fuzz_request req;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    model = fuzz_micro_model(&weights);
    fuzz_request_make(2, 0, 0, &req);
    h3s_tensor s = {0}, a = {0};
    if (h3s_model_forward(model, &req.in, NULL, NULL, &tape, &s, &a) != H3S_OK) fuzz_die("forward");
    h3s_tensor_free(&s);
    h3s_tensor_free(&a);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3s_st_file *f = NULL;
    if (h3s_st_open(fuzz_memfile(data, size), &f) != H3S_OK) return 0;
    const h3s_st_entry *es = h3s_st_find(f, "sample"), *ea = h3s_st_find(f, "audio_sample");
    if (es && ea) {
        h3s_grads g;
        memset(&g, 0, sizeof g);
        if (h3s_model_backward(model, tape, &es->tensor, &ea->tensor, NULL, NULL, &g) != H3S_OK) {
            fuzz_check_message();
        } else {
            if (g.count <= 0 || !g.params) abort();
        }
        h3s_grads_free(&g);
    }
    h3s_st_close(f);
    return 0;
}

/* libFuzzer target: model inputs (a safetensors file under the CLI's names) read and validated against the micro
 * config; a valid small request is also run forward, so that whatever validation lets through is exercised.
 * Properties: no crash/UB/leak; a refusal leaves a printable message. */
#include "fuzz_common.h"

static h3s_model *model;
static h3s_weights *weights; /* kept reachable for the leak checker */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    model = fuzz_micro_model(&weights);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3s_st_file *f = NULL;
    if (h3s_st_open(fuzz_memfile(data, size), &f) != H3S_OK) return 0; /* the reader has its own target */
    h3s_inputs in;
    int64_t batch = 0;
    h3s_config c = fuzz_micro_config();
    h3s_status st = h3s_inputs_from_file(f, &in);
    if (st == H3S_OK) st = h3s_inputs_validate(&c, &in, &batch);
    if (st != H3S_OK) {
        fuzz_check_message();
    } else if (batch * in.position_ids.shape[0] <= 256 && in.timestep.shape[0] <= 64) {
        h3s_tensor s = {0}, a = {0};
        if (h3s_model_forward(model, &in, NULL, NULL, NULL, &s, &a) != H3S_OK) fuzz_check_message();
        h3s_tensor_free(&s);
        h3s_tensor_free(&a);
    }
    h3s_st_close(f);
    return 0;
}

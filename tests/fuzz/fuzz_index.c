/* libFuzzer target: the shard index (diffusion_pytorch_model.safetensors.index.json) of a sharded micro model.
 * The input is the index text; the shards are fixed.  Properties: no crash/UB/leak; an accepted index gives every
 * parameter exactly once; a refusal leaves a printable message. */
#include "fuzz_common.h"

static const char *dir;
static char index_path[700];
static int64_t expected;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    dir = fuzz_micro_sharded_dir(NULL);
    snprintf(index_path, sizeof index_path, "%s/%s", dir, H3S_MODEL_INDEX_FILE);
    h3s_weights *w = NULL;
    if (h3s_weights_load(dir, &w) != H3S_OK) fuzz_die("sharded load");
    expected = h3s_weights_count(w);
    h3s_weights_free(w);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_put_file(index_path, data, size);
    h3s_weights *w = NULL;
    if (h3s_weights_load(dir, &w) != H3S_OK) {
        fuzz_check_message();
        return 0;
    }
    if (h3s_weights_count(w) != expected) abort();
    for (int64_t i = 0; i < expected; i++)
        if (!h3s_weights_at(w, i, NULL)->data && h3s_tensor_numel(h3s_weights_at(w, i, NULL)) > 0) abort();
    h3s_weights_free(w);
    return 0;
}

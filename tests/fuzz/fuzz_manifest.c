/* libFuzzer target: verification against a SHA-256 manifest ({file: sha256}) of the micro model.
 * Properties: no crash/UB/leak; acceptance only with config.json and every weights file listed under their true
 * digests; a refusal leaves a printable message. */
#include "fuzz_common.h"

static const char *dir;
static char manifest[700];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    dir = fuzz_micro_model_dir();
    snprintf(manifest, sizeof manifest, "%s", fuzz_path("manifest.json"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_put_file(manifest, data, size);
    char *report = NULL;
    if (h3s_model_verify(dir, manifest, &report) != H3S_OK) {
        fuzz_check_message();
        if (report) abort(); /* nothing is handed back on failure */
        return 0;
    }
    if (!report || !strstr(report, "verify: OK")) abort();
    free(report);
    return 0;
}

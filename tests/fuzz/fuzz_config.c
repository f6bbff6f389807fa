/* libFuzzer target: config.json parsing (strict JSON, _class_name, every key, validation).
 * Properties: no crash/UB/leak; an accepted config round-trips exactly through h3s_config_to_json; a refusal
 * leaves a printable message. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3s_config c;
    if (h3s_config_parse_json((const char *)data, size, &c) != H3S_OK) {
        fuzz_check_message();
        return 0;
    }
    char *text = NULL;
    if (h3s_config_to_json(&c, &text) != H3S_OK) abort();
    h3s_config back;
    if (h3s_config_parse_json(text, strlen(text), &back) != H3S_OK || memcmp(&c, &back, sizeof c) != 0) abort();
    free(text);
    return 0;
}

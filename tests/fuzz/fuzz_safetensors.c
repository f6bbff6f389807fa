/* libFuzzer target: the safetensors reader (header JSON, offsets, dtypes, shapes, data area) on arbitrary bytes.
 * Properties: no crash, leak or undefined behaviour; an accepted file has every tensor inside the file and
 * findable by name; a refusal leaves a one-line printable message. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3s_st_file *f = NULL;
    if (h3s_st_open(fuzz_memfile(data, size), &f) != H3S_OK) {
        fuzz_check_message();
        return 0;
    }
    uint64_t total = 0;
    unsigned sum = 0;
    for (int64_t i = 0; i < h3s_st_count(f); i++) {
        const h3s_st_entry *e = h3s_st_entry_at(f, i);
        if (!e || h3s_st_find(f, e->name) != e) abort();
        size_t n = h3s_tensor_nbytes(&e->tensor);
        total += n;
        const unsigned char *p = e->tensor.data;
        for (size_t k = 0; k < n; k++) /* every byte is readable (ASan checks the copies, the map is in bounds) */
            sum += p[k];
    }
    if (total > h3s_st_file_size(f)) abort();
    (void)sum;
    h3s_st_close(f);
    return 0;
}

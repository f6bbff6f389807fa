#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <omp.h>

#include "core/core.h"

static _Thread_local char h3s_error_message[1024];

const char *h3s_last_error(void) { return h3s_error_message; }

void h3s_clear_error(void) { h3s_error_message[0] = '\0'; }

h3s_status h3s_fail(h3s_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h3s_error_message, sizeof h3s_error_message, fmt, ap);
    va_end(ap);
    return status;
}

h3s_status h3s_fail_context(h3s_status status, const char *fmt, ...) {
    char prefix[512];
    char old[sizeof h3s_error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, h3s_error_message, sizeof old);
    size_t plen = strlen(prefix);
    if (plen > sizeof h3s_error_message - 3) plen = sizeof h3s_error_message - 3;
    memcpy(h3s_error_message, prefix, plen);
    memcpy(h3s_error_message + plen, ": ", 2);
    size_t room = sizeof h3s_error_message - plen - 3, olen = strlen(old);
    if (olen > room) olen = room;
    memcpy(h3s_error_message + plen + 2, old, olen);
    h3s_error_message[plen + 2 + olen] = '\0';
    return status;
}

const char *h3s_status_name(h3s_status status) {
    switch (status) {
    case H3S_OK: return "ok";
    case H3S_ERR_INVALID: return "invalid argument";
    case H3S_ERR_SHAPE: return "shape mismatch";
    case H3S_ERR_DTYPE: return "dtype mismatch";
    case H3S_ERR_INDEX: return "index out of range";
    case H3S_ERR_NOMEM: return "out of memory";
    case H3S_ERR_IO: return "i/o error";
    case H3S_ERR_FORMAT: return "malformed file";
    case H3S_ERR_UNSUPPORTED: return "unsupported";
    case H3S_ERR_DEVICE: return "device error";
    case H3S_ERR_MISMATCH: return "mismatch";
    }
    return "unknown status";
}

const char *h3s_version(void) { return H3S_VERSION_STRING; }

void *h3s_malloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) {
        h3s_fail(H3S_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    size_t bytes = count * size;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) h3s_fail(H3S_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *h3s_calloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) {
        h3s_fail(H3S_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) h3s_fail(H3S_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

static int h3s_threads_requested = 0;

void h3s_set_num_threads(int n) {
    h3s_threads_requested = n > 0 ? n : 0;
    if (n > 0) omp_set_num_threads(n);
}

int h3s_get_num_threads(void) { return h3s_threads_requested > 0 ? h3s_threads_requested : omp_get_max_threads(); }

static h3s_grad_operands h3s_grad_mode = H3S_GRAD_OPERANDS_BF16;

h3s_status h3s_set_grad_operands(h3s_grad_operands mode) {
    if (mode != H3S_GRAD_OPERANDS_BF16 && mode != H3S_GRAD_OPERANDS_SPLIT)
        return h3s_fail(H3S_ERR_INVALID, "grad operands: unknown mode %d (bf16 = 0, split = 1)", (int)mode);
    h3s_grad_mode = mode;
    return H3S_OK;
}

h3s_grad_operands h3s_get_grad_operands(void) { return h3s_grad_mode; }

h3s_status h3s_grad_operands_parse(const char *name, h3s_grad_operands *mode) {
    if (name && strcmp(name, "bf16") == 0) {
        *mode = H3S_GRAD_OPERANDS_BF16;
        return H3S_OK;
    }
    if (name && strcmp(name, "split") == 0) {
        *mode = H3S_GRAD_OPERANDS_SPLIT;
        return H3S_OK;
    }
    return h3s_fail(H3S_ERR_INVALID, "grad operands: '%s' is not one of bf16, split", name ? name : "(null)");
}

const char *h3s_grad_operands_name(h3s_grad_operands mode) {
    return mode == H3S_GRAD_OPERANDS_SPLIT ? "split" : "bf16";
}

/* Internal core helpers shared by every layer: error reporting, BF16, checked allocation. */
#ifndef H3S_CORE_H
#define H3S_CORE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h3s.h"

#if defined(__GNUC__)
#define H3S_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define H3S_PRINTF(a, b)
#endif

/* Record a failure message for this thread and return `status`.  Use as
 * `return h3s_fail(H3S_ERR_SHAPE, "linear: x has %d dims, expected 2", x->ndim);` (the public h3s_set_error is the
 * same for callers of the library). */
h3s_status h3s_fail(h3s_status status, const char *fmt, ...) H3S_PRINTF(2, 3);
/* Prefix the current message with "context: " (keeps the status). */
h3s_status h3s_fail_context(h3s_status status, const char *fmt, ...) H3S_PRINTF(2, 3);
/* One progress line (fmt and its arguments, at most 255 bytes) to an optional callback; nothing when fn is NULL. */
void h3s_progress_line(void (*fn)(void *ctx, const char *line), void *ctx, const char *fmt, ...) H3S_PRINTF(3, 4);
void h3s_clear_error(void);

/* Escaping used for every error message: bytes < 0x20 and 0x7f, and bytes that are not part of valid UTF-8, become
 * \xNN; the C1 control characters U+0080..U+009F become \uNNNN; everything else is copied.  h3s_escape_into writes
 * the escaped form of s[0..len) and a NUL to out (when out != NULL) and returns its length without the NUL;
 * h3s_escape_dup (public, include/h3s.h) returns a malloc'd escaped copy of a C string. */
size_t h3s_escape_into(const char *s, size_t len, char *out);
/* Length of the valid UTF-8 sequence at p (at most n >= 1 bytes), 0 if there is none (overlong forms, surrogates
 * and code points past U+10FFFF are invalid); *cp receives the code point.  The one decoder of the escaping above
 * and of the strict JSON check (io/json.c). */
size_t h3s_utf8_seq(const unsigned char *p, size_t n, unsigned *cp);

#define H3S_TRY(expr)                                                                                                  \
    do {                                                                                                               \
        h3s_status h3s_try_status_ = (expr);                                                                           \
        if (h3s_try_status_ != H3S_OK) return h3s_try_status_;                                                         \
    } while (0)

/* Checked allocation: NULL means out of memory and the error is already recorded.
 * h3s_calloc zero-fills; sizes are checked for overflow. */
void *h3s_malloc(size_t count, size_t size);
void *h3s_calloc(size_t count, size_t size);

/* A growable string: s[0..len) and a NUL after it.  Zero-initialise it; release s with free.  An append that cannot
 * grow it sets oom, after which every append does nothing: the writer checks oom once, at the end. */
typedef struct h3s_strbuf {
    char *s;
    size_t len, cap;
    int oom;
} h3s_strbuf;
/* Room for `extra` more bytes and the NUL: 1, or 0 when oom is (or now gets) set. */
int h3s_strbuf_reserve(h3s_strbuf *b, size_t extra);

static inline uint16_t h3s_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign and payload top, force quiet */
    }
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb; /* round to nearest, ties to even; Inf stays Inf, overflow goes to Inf */
    return (uint16_t)(u >> 16);
}

static inline float h3s_bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Tensor validation used by every operator before it writes anything. */
h3s_status h3s_check_tensor(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int ndim);
/* Same, and shape[d] must equal `dims[d]` wherever dims[d] >= 0. */
h3s_status h3s_check_shape(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int ndim,
                           const int64_t *dims);
/* Every entry of an I64 index tensor lies in [0, limit); the tensor is read here, so it must be host memory with data
 * for its elements and no negative dim (H3S_ERR_INVALID / H3S_ERR_SHAPE otherwise). */
h3s_status h3s_check_index(const char *op, const char *name, const h3s_tensor *idx, int64_t limit);

/* Every non-NULL tensor of `ts` lives in one memory space (device 0 = host, 1 = CUDA); a
 * mix is H3S_ERR_DEVICE naming both tensors, another device value H3S_ERR_INVALID.
 * *on_device = 1 when they are CUDA tensors (0 when all are NULL). */
h3s_status h3s_check_placement(const char *op, const h3s_tensor *const *ts, const char *const *names, int n,
                               int *on_device);
/* A tensor whose extent can be computed: rank in [0, H3S_MAX_DIMS], no negative dim, an element count that fits in
 * int64 and a byte count that fits in size_t (H3S_ERR_SHAPE naming the tensor otherwise).  h3s_tensor_nbytes gives 0
 * for a tensor that fails this, h3s_tensor_numel -1 unless only its bytes overflow. */
h3s_status h3s_check_extent(const char *op, const char *name, const h3s_tensor *t);
/* The byte ranges of a and b intersect (a NULL tensor, NULL data or 0 bytes never overlaps). */
int h3s_tensors_overlap(const h3s_tensor *a, const h3s_tensor *b);
/* An operator's output `out` against ins[0..n) (NULL entries skipped): H3S_ERR_INVALID naming both when their bytes
 * meet, since an output written while another thread still reads the overlapping input would make the result depend
 * on the thread count.  Bit i of `alias_ok` lets ins[i] be `out` itself (the same data, dtype and byte count), for an
 * operator that reads every element it writes before writing it and documents so; a partial overlap is refused. */
h3s_status h3s_check_disjoint(const char *op, const char *out_name, const h3s_tensor *out, const h3s_tensor *const *ins,
                              const char *const *in_names, int n, unsigned alias_ok);

/* h3s_tensor_first_nonfinite (the first NaN or Inf of a host tensor) is public (include/h3s.h). */

/* Read element i of a float tensor (F64, F32, BF16, F16) as double. */
double h3s_tensor_get_f64(const h3s_tensor *t, int64_t i);

#endif

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <omp.h>

#include "core/core.h"

/* The last failure message of this thread.  Messages are held whole (no fixed-size buffer: a message naming a
 * long path is never cut) and escaped: control bytes, C1 control characters and bytes that are not UTF-8 are
 * written as \xNN or \uNNNN, so a file or argument that holds them cannot make a message lie on a terminal.
 * A thread's buffer is freed when the thread ends. */
static _Thread_local char *h3s_error_message;
static _Thread_local size_t h3s_error_cap;
/* Used when the message cannot be allocated. */
static _Thread_local char h3s_error_fallback[160];

static pthread_key_t h3s_error_key;
static pthread_once_t h3s_error_once = PTHREAD_ONCE_INIT;

static void error_buffer_free(void *p) { free(p); }
static void error_key_create(void) { (void)pthread_key_create(&h3s_error_key, error_buffer_free); }

const char *h3s_last_error(void) {
    if (h3s_error_fallback[0]) return h3s_error_fallback;
    return h3s_error_message ? h3s_error_message : "";
}

void h3s_clear_error(void) {
    h3s_error_fallback[0] = '\0';
    if (h3s_error_message) h3s_error_message[0] = '\0';
}

size_t h3s_utf8_seq(const unsigned char *p, size_t n, unsigned *cp) {
    unsigned c = p[0], min;
    size_t extra;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        extra = 1, min = 0x80, c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        extra = 2, min = 0x800, c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        extra = 3, min = 0x10000, c &= 0x07;
    } else {
        return 0;
    }
    if (extra >= n) return 0;
    for (size_t i = 1; i <= extra; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3fu);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    *cp = c;
    return extra + 1;
}

size_t h3s_escape_into(const char *s, size_t len, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        size_t n = h3s_utf8_seq(p + i, len - i, &cp);
        if (n == 0 || (n == 1 && (cp < 0x20 || cp == 0x7f))) {
            if (out) snprintf(out + o, 5, "\\x%02x", p[i]);
            o += 4;
            i++;
        } else if (cp >= 0x80 && cp <= 0x9f) {
            if (out) snprintf(out + o, 7, "\\u%04x", cp);
            o += 6;
            i += n;
        } else {
            if (out) memcpy(out + o, p + i, n);
            o += n;
            i += n;
        }
    }
    if (out) out[o] = '\0';
    return o;
}

char *h3s_escape_dup(const char *s) {
    if (!s) s = "(null)";
    size_t len = strlen(s), need = h3s_escape_into(s, len, NULL);
    char *out = malloc(need + 1);
    if (out) h3s_escape_into(s, len, out);
    return out;
}

/* Room for `need` bytes in this thread's message buffer: 0, or -1 when out of memory (the buffer unchanged). */
static int reserve_message(size_t need) {
    if (need <= h3s_error_cap) return 0;
    char *p = realloc(h3s_error_message, need);
    if (!p) return -1;
    pthread_once(&h3s_error_once, error_key_create);
    (void)pthread_setspecific(h3s_error_key, p);
    h3s_error_message = p;
    h3s_error_cap = need;
    return 0;
}

/* Store `raw` (len bytes) escaped as this thread's message. */
static void set_message(const char *raw, size_t len) {
    size_t need = h3s_escape_into(raw, len, NULL) + 1;
    if (reserve_message(need)) {
        snprintf(h3s_error_fallback, sizeof h3s_error_fallback, "out of memory recording an error message of %zu bytes",
                 len);
        return;
    }
    h3s_error_fallback[0] = '\0';
    h3s_escape_into(raw, len, h3s_error_message);
}

/* vsnprintf into a malloc'd string; NULL when out of memory. */
static char *vformat(const char *fmt, va_list ap, size_t *len) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) n = 0;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    *len = (size_t)n;
    return s;
}

/* The message fmt and its arguments become the last error; status is returned. */
static h3s_status vfail(h3s_status status, const char *fmt, va_list ap) {
    size_t len = 0;
    char *raw = vformat(fmt, ap, &len);
    if (raw)
        set_message(raw, len);
    else
        snprintf(h3s_error_fallback, sizeof h3s_error_fallback, "out of memory formatting an error message");
    free(raw);
    return status;
}

h3s_status h3s_fail(h3s_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    status = vfail(status, fmt, ap);
    va_end(ap);
    return status;
}

h3s_status h3s_set_error(h3s_status status, const char *fmt, ...) {
    if (!fmt) fmt = "(no message)";
    va_list ap;
    va_start(ap, fmt);
    status = vfail(status, fmt, ap);
    va_end(ap);
    return status;
}

void h3s_progress_line(void (*fn)(void *ctx, const char *line), void *ctx, const char *fmt, ...) {
    if (!fn) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn(ctx, line);
}

h3s_status h3s_fail_context(h3s_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t plen = 0;
    char *prefix = vformat(fmt, ap, &plen);
    va_end(ap);
    if (!prefix) return status; /* keep the message there is */
    /* The old message is already escaped: escape the prefix alone, then join. */
    const char *old = h3s_last_error();
    size_t pesc = h3s_escape_into(prefix, plen, NULL), olen = strlen(old);
    char *joined = malloc(pesc + 2 + olen + 1);
    if (joined) {
        h3s_escape_into(prefix, plen, joined);
        memcpy(joined + pesc, ": ", 2);
        memcpy(joined + pesc + 2, old, olen + 1);
        size_t total = pesc + 2 + olen + 1;
        if (reserve_message(total) == 0) {
            memcpy(h3s_error_message, joined, total);
            h3s_error_fallback[0] = '\0';
        }
        free(joined);
    }
    free(prefix);
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

int h3s_strbuf_reserve(h3s_strbuf *b, size_t extra) {
    if (b->oom) return 0;
    if (b->s && b->len + extra < b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap <= b->len + extra)
        cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->s = p;
    b->cap = cap;
    return 1;
}

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
static int h3s_threads_default = 0; /* OpenMP's own count, read before the library first sets one */

void h3s_set_num_threads(int n) {
    if (h3s_threads_default <= 0) h3s_threads_default = omp_get_max_threads();
    h3s_threads_requested = n > 0 ? n : 0;
    /* 0 goes back to OpenMP's default (it kept the last count set before) */
    omp_set_num_threads(n > 0 ? n : h3s_threads_default);
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
    if (!mode) return h3s_fail(H3S_ERR_INVALID, "grad operands: NULL output");
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

/* Everything the library hands out as plain bytes comes from malloc (cJSON too: its hooks are never changed). */
void h3s_free(void *p) { free(p); }

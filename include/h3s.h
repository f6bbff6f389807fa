/* h3strict: strict-mode (bitwise batch-invariant) MiniMax-H3 forward and backward.
 *
 * The core of the public API (status, tensors, run options); the model, its passes and the sampler are in
 * h3s_model.h and h3s_sample.h.  Every function that can fail returns h3s_status; on failure a
 * one-line message is available from h3s_last_error() (per thread) and nothing the caller
 * passed as an output has been written.
 */
#ifndef H3S_H
#define H3S_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define H3S_VERSION_MAJOR 0
#define H3S_VERSION_MINOR 1
#define H3S_VERSION_PATCH 0
#define H3S_VERSION_STRING "0.1.0"

/* Marks the library's public API: the shared library is built with -fvisibility=hidden and exports
 * exactly the functions declared with H3S_API in include/. */
#if defined(__GNUC__) || defined(__clang__)
#define H3S_API __attribute__((visibility("default")))
#else
#define H3S_API
#endif

typedef enum h3s_status {
    H3S_OK = 0,
    H3S_ERR_INVALID = 1,     /* bad argument (NULL, negative size, unknown option) */
    H3S_ERR_SHAPE = 2,       /* tensor shapes do not agree */
    H3S_ERR_DTYPE = 3,       /* unsupported or mismatched dtype */
    H3S_ERR_INDEX = 4,       /* an index is out of range */
    H3S_ERR_NOMEM = 5,       /* allocation failed */
    H3S_ERR_IO = 6,          /* file could not be opened, read or written */
    H3S_ERR_FORMAT = 7,      /* a file is malformed */
    H3S_ERR_UNSUPPORTED = 8, /* valid request this build or device cannot serve strictly */
    H3S_ERR_DEVICE = 9,      /* device (GPU) failure or absence */
    H3S_ERR_MISMATCH = 10    /* a verification found different bytes */
} h3s_status;

/* Message of the last failure on this thread ("" if none). */
H3S_API const char *h3s_last_error(void);
H3S_API const char *h3s_status_name(h3s_status status);
H3S_API const char *h3s_version(void);
/* Release memory the library allocated for the caller as plain bytes (report text); NULL is fine. */
H3S_API void h3s_free(void *p);

#if defined(__GNUC__) || defined(__clang__)
#define H3S_API_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define H3S_API_PRINTF(a, b)
#endif
/* Record a failure of the caller's own (a node hook, a check before a collective call) as this thread's
 * h3s_last_error() message, formatted as printf does and escaped as every library message is, and return
 * `status`; h3s_comm_agree then carries it to every rank like a library failure.  Use as
 * `return h3s_set_error(H3S_ERR_FORMAT, "%s: no tensor 'sample'", path);` */
H3S_API h3s_status h3s_set_error(h3s_status status, const char *fmt, ...) H3S_API_PRINTF(2, 3);
/* A copy of the C string s (NULL reads "(null)") with the escaping of the library's messages: bytes below 0x20,
 * 0x7f and bytes that are not part of valid UTF-8 become \xNN, the C1 controls U+0080..U+009F \uNNNN, the rest is
 * kept; printed text that came from a file or an argument then stays on one line and cannot pose as other output.
 * Released with h3s_free; NULL when out of memory. */
H3S_API char *h3s_escape_dup(const char *s);

typedef enum h3s_dtype { H3S_F64 = 0, H3S_F32 = 1, H3S_BF16 = 2, H3S_F16 = 3, H3S_I64 = 4, H3S_BOOL = 5 } h3s_dtype;

H3S_API size_t h3s_dtype_size(h3s_dtype dtype);
H3S_API const char *h3s_dtype_name(h3s_dtype dtype); /* safetensors spelling: "F32", "BF16", ... */

#define H3S_MAX_DIMS 4

/* A contiguous row-major tensor.  `data` is owned when `owns_data` is non-zero (then
 * h3s_tensor_free releases it); views borrow.  `device` is 0 for host memory, 1 for CUDA
 * device memory. */
typedef struct h3s_tensor {
    h3s_dtype dtype;
    int ndim;
    int64_t shape[H3S_MAX_DIMS];
    void *data;
    int owns_data;
    int device;
} h3s_tensor;

/* Allocate a zero-filled host tensor (shape: ndim entries, each >= 0; NULL only when ndim is 0). */
H3S_API h3s_status h3s_tensor_alloc(h3s_tensor *t, h3s_dtype dtype, int ndim, const int64_t *shape);
/* A borrowed view of existing host memory (no allocation, cannot fail). */
H3S_API h3s_tensor h3s_tensor_view(void *data, h3s_dtype dtype, int ndim, const int64_t *shape);
H3S_API void h3s_tensor_free(h3s_tensor *t);
/* Elements (the product of the dims) and bytes of a tensor; 0 for NULL.  numel is -1 for a rank outside
 * [0, H3S_MAX_DIMS], a negative dim or a count beyond int64; nbytes is 0 for those and for bytes beyond size_t.
 * Every operator refuses such a tensor with H3S_ERR_SHAPE. */
H3S_API int64_t h3s_tensor_numel(const h3s_tensor *t);
H3S_API size_t h3s_tensor_nbytes(const h3s_tensor *t);
/* Convert every element (F64, F32, BF16 or F16 to F64, F32 or BF16; an F16 destination is H3S_ERR_DTYPE; the same
 * dtype to itself, I64 too).  Shapes must hold the same number of elements.  Float -> BF16 rounds once to nearest
 * even (from F64 too); F64 -> F32 likewise.  Both are host tensors with data for their elements and no negative dim
 * (H3S_ERR_INVALID for missing data or device memory, H3S_ERR_SHAPE for a dim). */
H3S_API h3s_status h3s_tensor_convert(const h3s_tensor *src, h3s_tensor *dst);
/* (src and dst may share memory only for the same dtype, a plain move; between dtypes an overlap is
 * H3S_ERR_INVALID.) */
/* Index of the first NaN or +-Inf element of a host F64/F32/BF16/F16 tensor; -1 when every element is finite, the
 * tensor holds no float dtype, lives in device memory or has no data (t == NULL too): a caller that must know every
 * element is finite checks those first, as h3s_inputs_validate does.  The same index on every thread count. */
H3S_API int64_t h3s_tensor_first_nonfinite(const h3s_tensor *t);

/* BF16 helpers: round to nearest even, NaN stays NaN (quiet), +-Inf stays +-Inf. */
H3S_API uint16_t h3s_bf16_from_f32(float x);
H3S_API float h3s_bf16_to_f32(uint16_t b);

/* SHA-256 of a byte range as 64 lowercase hex digits + NUL (H3S_ERR_INVALID for NULL data with len > 0 or a NULL
 * out_hex). */
H3S_API h3s_status h3s_sha256_hex(const void *data, size_t len, char out_hex[65]);
/* SHA-256 of several byte ranges as one: begin, update (any number of times, any sizes), end.  h3s_sha256_end writes
 * the digest as h3s_sha256_hex does and frees the context, also on failure (then out_hex is untouched). */
typedef struct h3s_sha256_ctx h3s_sha256_ctx;
H3S_API h3s_status h3s_sha256_begin(h3s_sha256_ctx **ctx);
H3S_API h3s_status h3s_sha256_update(h3s_sha256_ctx *ctx, const void *data, size_t len);
H3S_API h3s_status h3s_sha256_end(h3s_sha256_ctx *ctx, char out_hex[65]);
/* SHA-256 of a whole file's bytes, read in bounded pieces (H3S_ERR_IO when it cannot be opened or read, or is not a
 * regular file: a FIFO or device is refused without blocking). */
H3S_API h3s_status h3s_file_sha256_hex(const char *path, char out_hex[65]);

/* Number of OpenMP threads the library uses (0 = OpenMP default, also after another count was set).  Results never
 * depend on it. */
H3S_API void h3s_set_num_threads(int n);
H3S_API int h3s_get_num_threads(void);

/* How the F32 output gradient dy enters the tensor cores in the backward of a BF16 linear on
 * the CUDA backend (a run option; both are strict: one fixed order per output).
 *   H3S_GRAD_OPERANDS_BF16  (default): dy rounded once to BF16, FP32 accumulation, the
 *                           provider's precision at full tensor-core rate;
 *   H3S_GRAD_OPERANDS_SPLIT: dy split exactly into BF16 hi + lo, two products per step (about
 *                           16 significant bits of dy, half the rate).
 * The CPU backend always multiplies the exact F32 dy and ignores the option.  Shapes the
 * Hopper kernels cannot take (K or N not a multiple of 8) always use the split kernel. */
typedef enum h3s_grad_operands { H3S_GRAD_OPERANDS_BF16 = 0, H3S_GRAD_OPERANDS_SPLIT = 1 } h3s_grad_operands;
H3S_API h3s_status h3s_set_grad_operands(h3s_grad_operands mode);
H3S_API h3s_grad_operands h3s_get_grad_operands(void);
/* "bf16" or "split" -> the mode; H3S_ERR_INVALID otherwise (a NULL name or mode too). */
H3S_API h3s_status h3s_grad_operands_parse(const char *name, h3s_grad_operands *mode);
H3S_API const char *h3s_grad_operands_name(h3s_grad_operands mode);

#ifdef __cplusplus
}
#endif
#endif

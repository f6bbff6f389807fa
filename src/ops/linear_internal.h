/* Internal switch of the strict CPU linear kernels (tests and benchmarks only).
 *
 * Every implementation computes the same per-output FP32 FMA chain (docs/numerics/linear.md),
 * so they give identical bits; the switch exists so that tests can prove it, comparing the
 * vector paths with the portable scalar reference. */
#ifndef H3S_LINEAR_INTERNAL_H
#define H3S_LINEAR_INTERNAL_H

#include "h3s.h"

typedef enum h3s_linear_impl {
    H3S_LINEAR_AUTO = 0,   /* the fastest implementation this CPU supports (the default) */
    H3S_LINEAR_SCALAR = 1, /* portable reference: plain loops over fmaf, no packing */
    H3S_LINEAR_AVX2 = 2,   /* packed 6x16 AVX2+FMA microkernel */
    H3S_LINEAR_AVX512 = 3  /* packed 12x32 AVX-512F microkernel */
} h3s_linear_impl;

/* Select the implementation used by later strict (F32/BF16) linear calls of every thread.
 * H3S_ERR_UNSUPPORTED (and no change) when this CPU lacks the instructions.  Not meant to be
 * called while another thread runs a linear. */
h3s_status h3s_linear_set_impl(h3s_linear_impl impl);
/* The implementation AUTO resolves to (or the forced one). */
h3s_linear_impl h3s_linear_get_impl(void);
/* Whether this CPU can run `impl`. */
int h3s_linear_impl_available(h3s_linear_impl impl);
const char *h3s_linear_impl_name(h3s_linear_impl impl);

#endif

/* CUDA backend helpers beyond the operator twins of cuda_ops.h: device description for
 * reports, and seeded device-side fills for tests and benchmarks (filling gigabytes of weights
 * from the host RNG would dominate a GPU test).  In a build without nvcc they fail with
 * H3S_ERR_DEVICE like the rest of the backend (src/cuda/cuda_none.c). */
#ifndef H3S_CUDA_EXTRA_H
#define H3S_CUDA_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#include "h3s.h"
#include "h3s_model.h" /* h3s_cuda_describe, the device's description for reports, is public */

/* Deterministic values into a F32 or BF16 device tensor: element i = scale * u(seed, i) with u
 * uniform on [-sqrt(3), sqrt(3)) (unit variance), from a counter hash of (seed, i); BF16
 * rounds once.  The same bits for the same (seed, i) on every launch and every tensor size. */
h3s_status h3s_cuda_fill_random(h3s_tensor *t, uint64_t seed, float scale);
/* Drop the cached device copies of host index tensors (cuda_internal.h); frees their memory. */
void h3s_cuda_release_caches(void);

#endif

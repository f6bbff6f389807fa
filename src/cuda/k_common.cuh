/* Device helpers shared by the strict CUDA kernels (CUDA C, included by the .cu files).
 *
 * Built with --fmad=false -prec-div=true -prec-sqrt=true -ftz=false: every a * b + c below is
 * two IEEE roundings unless written as __fmaf_rn, division and sqrt are correctly rounded,
 * subnormals are kept.  Device expf/exp/sin/cos are the CUDA math library's IEEE-compliant
 * routines: the same code on every launch, so the same bits every run. */
#ifndef H3S_CUDA_K_COMMON_CUH
#define H3S_CUDA_K_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/core.h"
#include "cuda/cuda_internal.h"
#include "ops/fold.h"
}

/* BF16 <-> F32, bit for bit the host's h3s_bf16_round / h3s_bf16_value. */
__device__ __forceinline__ float h3k_bf2f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ __forceinline__ uint16_t h3k_f2bf(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element i of a BF16 or F32 buffer as float; store with one rounding to the buffer's dtype. */
__device__ __forceinline__ float h3k_ld(const void *p, int dt, int64_t i) {
    return dt == H3S_BF16 ? h3k_bf2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

__device__ __forceinline__ void h3k_st(void *p, int dt, int64_t i, float v) {
    if (dt == H3S_BF16)
        ((uint16_t *)p)[i] = h3k_f2bf(v);
    else
        ((float *)p)[i] = v;
}

/* First bad index wins the flag; its value is kept for the message. */
__device__ __forceinline__ void h3k_report_index(int *flag, int code, int64_t value) {
    if (atomicCAS(flag, 0, code) == 0) *(long long *)(flag + 2) = (long long)value;
}

/* Read index[i] and check it against [0, limit); -1 (after reporting) when outside. */
__device__ __forceinline__ int64_t h3k_index(const int64_t *index, int64_t i, int64_t limit, int *flag, int code) {
    int64_t v = index[i];
    if (v < 0 || v >= limit) {
        h3k_report_index(flag, code, v);
        return -1;
    }
    return v;
}

/* silu and its derivative in double, rounded once to float (the CPU's detmath recipe, with
 * the device's double exp). */
__device__ __forceinline__ float h3k_siluf(float x) {
    double xd = (double)x;
    return (float)(xd / (1.0 + exp(-xd)));
}

__device__ __forceinline__ float h3k_silu_gradf(float x) {
    double xd = (double)x;
    double s = 1.0 / (1.0 + exp(-xd));
    return (float)(s * (1.0 + xd * (1.0 - s)));
}

/* Grid for an elementwise kernel over n items: every item is computed by one thread with a
 * formula of its own inputs only, so the grid size never reaches the bits. */
static inline unsigned h3k_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 65535LL * 32) b = 65535LL * 32; /* grid-stride loops cover the rest */
    if (b < 1) b = 1;
    return (unsigned)b;
}

/* ldmatrix x4 (four 8x8 BF16 matrices, row addresses from the lanes) and the m16n8k16 BF16 MMA with
 * FP32 accumulation, shared by the tensor-core kernels (linear.cu, attention.cu). */
__device__ __forceinline__ void h3k_ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void h3k_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#define H3K_STREAM ((cudaStream_t)h3c_stream())

#endif

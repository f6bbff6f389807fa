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

/* Two values that are neither NaN nor infinite (the caller has checked), rounded as h3k_f2bf rounds them and packed
 * (lo in the lower half): the single cvt.rn.bf16x2.f32, whose bits equal h3k_f2bf's for every non-NaN value (the
 * NaN case is h3k_f2bf2's). */
__device__ __forceinline__ uint32_t h3k_f2bf2_finite(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint32_t)h3k_f2bf(lo) | ((uint32_t)h3k_f2bf(hi) << 16);
#endif
}

/* Two values rounded as h3k_f2bf rounds them, packed (lo in the lower half): one cvt.rn.bf16x2.f32 (round to nearest
 * even, subnormals kept, overflow to infinity: h3k_f2bf's bits for every non-NaN value) instead of about ten integer
 * instructions per value.  A NaN half is then replaced by h3k_f2bf's NaN, which keeps the payload (the instruction
 * gives the canonical NaN), with selects rather than a branch: a branch per pair put a reconvergence point around
 * every pair of a GEMM epilogue (measured: a BF16-output GEMM ran slower than the same GEMM writing twice the
 * bytes in F32).  test_gpu_runtime compares it with h3k_f2bf on every F32 bit pattern. */
__device__ __forceinline__ uint32_t h3k_f2bf2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r = h3k_f2bf2_finite(lo, hi);
    const uint32_t ul = __float_as_uint(lo), uh = __float_as_uint(hi);
    const uint32_t nan_lo = (r & 0xffff0000u) | (ul >> 16) | 0x0040u;
    r = (ul & 0x7fffffffu) > 0x7f800000u ? nan_lo : r;
    const uint32_t nan_hi = (r & 0x0000ffffu) | (uh & 0xffff0000u) | 0x00400000u;
    return (uh & 0x7fffffffu) > 0x7f800000u ? nan_hi : r;
#else
    return (uint32_t)h3k_f2bf(lo) | ((uint32_t)h3k_f2bf(hi) << 16);
#endif
}

/* o[j] = h3k_f2bf(v[j]) for j < VW, two at a time through h3k_f2bf2 (the same bits for every value, NaN payloads
 * included; test_gpu_runtime compares the two on every F32 bit pattern) where VW is even. */
template <int VW> __device__ __forceinline__ void h3k_f2bf_v(const float (&v)[VW], uint16_t (&o)[VW]) {
    if constexpr (VW % 2 == 0) {
#pragma unroll
        for (int j = 0; j < VW; j += 2) {
            const uint32_t r = h3k_f2bf2(v[j], v[j + 1]);
            o[j] = (uint16_t)(r & 0xffffu);
            o[j + 1] = (uint16_t)(r >> 16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < VW; j++)
            o[j] = h3k_f2bf(v[j]);
    }
}

/* VW (1, 2, 4 or 8) consecutive BF16 / F32 elements at p, moved with the widest access the
 * launcher proved aligned: min(VW * element size, 16) bytes (two 16-byte accesses for 8 F32).
 * Stores are written with __stwb (st.global.wb, the default write-back policy) so that the
 * compiler emits one vector store instead of splitting it.
 * Only the width of the memory access changes; each element's bits are moved unchanged, and
 * element j of the array is element j after p (little-endian: the lower half of a 32-bit word
 * is the lower address). */
template <int VW> __device__ __forceinline__ void h3k_ld_bf16v(const uint16_t *p, uint16_t (&v)[VW]) {
    static_assert(VW == 1 || VW == 2 || VW == 4 || VW == 8, "vector width");
    if constexpr (VW == 1) {
        v[0] = p[0];
    } else {
        uint32_t w[VW / 2];
        if constexpr (VW == 8) {
            const uint4 q = *(const uint4 *)p;
            w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
        } else if constexpr (VW == 4) {
            const uint2 q = *(const uint2 *)p;
            w[0] = q.x, w[1] = q.y;
        } else {
            w[0] = *(const uint32_t *)p;
        }
#pragma unroll
        for (int j = 0; j < VW / 2; j++) {
            v[2 * j] = (uint16_t)(w[j] & 0xffffu);
            v[2 * j + 1] = (uint16_t)(w[j] >> 16);
        }
    }
}

template <int VW> __device__ __forceinline__ void h3k_st_bf16v(uint16_t *p, const uint16_t (&v)[VW]) {
    static_assert(VW == 1 || VW == 2 || VW == 4 || VW == 8, "vector width");
    if constexpr (VW == 1) {
        p[0] = v[0];
    } else {
        uint32_t w[VW / 2];
#pragma unroll
        for (int j = 0; j < VW / 2; j++)
            w[j] = (uint32_t)v[2 * j] | ((uint32_t)v[2 * j + 1] << 16);
        if constexpr (VW == 8)
            __stwb((uint4 *)p, make_uint4(w[0], w[1], w[2], w[3]));
        else if constexpr (VW == 4)
            __stwb((uint2 *)p, make_uint2(w[0], w[1]));
        else
            __stwb((unsigned int *)p, w[0]);
    }
}

template <int VW> __device__ __forceinline__ void h3k_ld_f32v(const float *p, float (&v)[VW]) {
    static_assert(VW == 1 || VW == 2 || VW == 4 || VW == 8, "vector width");
    if constexpr (VW == 1) {
        v[0] = p[0];
    } else if constexpr (VW == 2) {
        const float2 q = *(const float2 *)p;
        v[0] = q.x, v[1] = q.y;
    } else {
#pragma unroll
        for (int k = 0; k < VW / 4; k++) {
            const float4 q = ((const float4 *)p)[k];
            v[4 * k] = q.x, v[4 * k + 1] = q.y, v[4 * k + 2] = q.z, v[4 * k + 3] = q.w;
        }
    }
}

template <int VW> __device__ __forceinline__ void h3k_st_f32v(float *p, const float (&v)[VW]) {
    static_assert(VW == 1 || VW == 2 || VW == 4 || VW == 8, "vector width");
    if constexpr (VW == 1) {
        p[0] = v[0];
    } else if constexpr (VW == 2) {
        __stwb((float2 *)p, make_float2(v[0], v[1]));
    } else {
#pragma unroll
        for (int k = 0; k < VW / 4; k++)
            __stwb((float4 *)p + k, make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]));
    }
}

/* Host side: p is aligned for h3k_*v of VW elements of `size` bytes (min(VW * size, 16)). */
static inline int h3k_vec_aligned(const void *p, int VW, int size) {
    const uintptr_t a = (uintptr_t)(VW * size < 16 ? VW * size : 16);
    return ((uintptr_t)p % a) == 0;
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

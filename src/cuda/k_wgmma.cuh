/* Hopper warpgroup MMA primitives shared by the strict CUDA kernels (CUDA C, included by the .cu
 * files that use wgmma: linear.cu, attention.cu).  Everything here moves data or issues one
 * fixed instruction; the orders that make a kernel strict are stated by its caller.
 *   - shared-memory matrix descriptors for the 128-byte swizzle (atoms of 8 rows x 128 bytes,
 *     1024-byte aligned): an element (row r, column c) of a [rows][64] BF16 block sits at byte
 *     r * 128 + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * 2 (h3w_swz below), the layout the bulk
 *     tensor copy (TMA) writes with CU_TENSOR_MAP_SWIZZLE_128B;
 *   - wgmma.mma_async m64nNk16 with both operands in shared memory (wg_mma_nN, mma_k16) and
 *     with A in registers (wg_mma_rs_n128): BF16 operands, FP32 accumulators;
 *   - mbarrier and TMA helpers. */
#ifndef H3S_CUDA_K_WGMMA_CUH
#define H3S_CUDA_K_WGMMA_CUH

#include <cuda.h>
#include <stdint.h>

namespace wg {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}

/* The mbarriers of a ring of n stages: full[s] completes on `producers` arrivals (and the copies' bytes), empty[s] on
 * `consumers` arrivals.  Run by one thread, before the fence and the barrier that publish them. */
__device__ __forceinline__ void ring_bars_init(uint64_t *full, uint64_t *empty, int n, unsigned producers,
                                               unsigned consumers) {
    for (int s = 0; s < n; s++) {
        mbar_init(&full[s], producers);
        mbar_init(&empty[s], consumers);
    }
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

/* Expect `bytes` more of the bulk copies on bar's current phase, without an arrival. */
__device__ __forceinline__ void mbar_expect_tx_only(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    const uint32_t a = smem_u32(bar);
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(a), "r"(parity)
            : "memory");
    }
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
                 "%4}], [%2];\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

/* The same copy delivered to the same shared-memory offset of every CTA of this cluster in `mask` (bit r: the CTA of
 * rank r), each destination's mbarrier at `bar`'s offset receiving the bytes it was sent. */
__device__ __forceinline__ void tma_load_2d_mc(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                               uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}

/* The multicast copy with an L2 eviction policy (a createpolicy operand). */
__device__ __forceinline__ void tma_load_2d_mc_hint(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                                    uint16_t mask, uint64_t pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5, %6;\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(mask), "l"(pol)
                 : "memory");
}

/* One arrival on the mbarrier at `bar`'s offset in the CTA of rank `rank` of this cluster (this CTA's own included),
 * with the arrival's default semantics (release at CTA scope: a cluster-scope release made a clustered GEMM 1.7-2.0x
 * slower, docs/evidence/gpu/development/gemm_cluster.md). */
__device__ __forceinline__ void mbar_arrive_rank(uint64_t *bar, unsigned rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_u32(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

/* Every thread of every CTA of the cluster meets here (release, then acquire, at cluster scope). */
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/* The same copy with an L2 eviction policy (a createpolicy operand): the folded dgrad's split reads its weight
 * once, evict-first, so that the partials it writes (evict-last) stay in L2 for the folding pass. */
__device__ __forceinline__ void tma_load_2d_hint(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                                 uint64_t pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(pol)
                 : "memory");
}
/* L2 eviction policies for the whole access (fraction 1.0): evict-first and evict-last. */
__device__ __forceinline__ uint64_t l2_evict_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t l2_evict_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
/* F32 stores with an L2 eviction policy (one value, or two adjacent ones 8-byte aligned). */
__device__ __forceinline__ void st_f32_hint(float *p, float v, uint64_t pol) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(p), "f"(v), "l"(pol) : "memory");
}
__device__ __forceinline__ void st_f32x2_hint(float *p, float v0, float v1, uint64_t pol) {
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(p), "f"(v0), "f"(v1), "l"(pol)
                 : "memory");
}

/* A bulk tensor store of one box from shared memory (the box's layout as the map's swizzle) to the tensor at
 * (c0, c1); the tensor map clips what lies outside the tensor.  Completion is tracked by bulk groups. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"((uint64_t)map),
                 "r"(smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* Wait until at most N committed bulk groups still read their shared-memory source (READ) or are incomplete. */
template <int N, bool READ> __device__ __forceinline__ void bulk_wait() {
    if constexpr (READ)
        asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
    else
        asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/* Make this thread's generic-proxy shared-memory writes visible to the async proxy (the bulk copies). */
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle (atoms 1024-byte aligned). */
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads/writes across wgmma issue/wait. */
template <int NR> __device__ __forceinline__ void reg_fence(float *d) {
#pragma unroll
    for (int i = 0; i < NR; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* wgmma.mma_async m64nNk16 with both operands in shared memory: acc (N / 2 registers per thread) = A B, plus acc when
 * scale_d != 0.  The instruction's text names every accumulator register, so the operand lists are spelled out once
 * here, in chunks of 16 (H3W_Ra_b: "%a, ..., %b") and as constraint lists (H3W_F16(d, i): d[i] .. d[i + 15]), and
 * each width's wrapper below joins the chunks it needs; P, DA, DB, TA and TB are the operand numbers after the
 * accumulators (the scale predicate, the two descriptors, the two transpose flags). */
#define H3W_R0_15 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define H3W_R16_31 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define H3W_R32_47 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define H3W_R48_63 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define H3W_R64_79 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define H3W_R80_95 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define H3W_R96_111 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define H3W_R112_127 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define H3W_R112_115 "%112, %113, %114, %115"
#define H3W_F4(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define H3W_F16(d, i) H3W_F4(d, i), H3W_F4(d, (i) + 4), H3W_F4(d, (i) + 8), H3W_F4(d, (i) + 12)
#define H3W_MMA_SS(N, REGS, P, DA, DB, TA_, TB_, ...)                                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, %" DA ", %" DB                  \
                 ", p, 1, 1, %" TA_ ", %" TB_ ";\n}\n"                                                                 \
                 : __VA_ARGS__                                                                                         \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n16(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(16, "%0, %1, %2, %3, %4, %5, %6, %7", "10", "8", "9", "11", "12", H3W_F4(d, 0), H3W_F4(d, 4));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n32(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(32, H3W_R0_15, "18", "16", "17", "19", "20", H3W_F16(d, 0));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n64(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(64, H3W_R0_15 ", " H3W_R16_31, "34", "32", "33", "35", "36", H3W_F16(d, 0), H3W_F16(d, 16));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n96(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(96, H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47, "50", "48", "49", "51", "52", H3W_F16(d, 0),
               H3W_F16(d, 16), H3W_F16(d, 32));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n128(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(128, H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47 ", " H3W_R48_63, "66", "64", "65", "67", "68",
               H3W_F16(d, 0), H3W_F16(d, 16), H3W_F16(d, 32), H3W_F16(d, 48));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n160(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(160, H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47 ", " H3W_R48_63 ", " H3W_R64_79, "82", "80", "81", "83",
               "84", H3W_F16(d, 0), H3W_F16(d, 16), H3W_F16(d, 32), H3W_F16(d, 48), H3W_F16(d, 64));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n192(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(192, H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47 ", " H3W_R48_63 ", " H3W_R64_79 ", " H3W_R80_95, "98",
               "96", "97", "99", "100", H3W_F16(d, 0), H3W_F16(d, 16), H3W_F16(d, 32), H3W_F16(d, 48), H3W_F16(d, 64),
               H3W_F16(d, 80));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n232(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(232,
               H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47 ", " H3W_R48_63 ", " H3W_R64_79 ", " H3W_R80_95
                         ", " H3W_R96_111 ", " H3W_R112_115,
               "118", "116", "117", "119", "120", H3W_F16(d, 0), H3W_F16(d, 16), H3W_F16(d, 32), H3W_F16(d, 48),
               H3W_F16(d, 64), H3W_F16(d, 80), H3W_F16(d, 96), H3W_F4(d, 112));
}

template <int TA, int TB> __device__ __forceinline__ void wg_mma_n256(float *d, uint64_t da, uint64_t db, int scale_d) {
    H3W_MMA_SS(256,
               H3W_R0_15 ", " H3W_R16_31 ", " H3W_R32_47 ", " H3W_R48_63 ", " H3W_R64_79 ", " H3W_R80_95
                         ", " H3W_R96_111 ", " H3W_R112_127,
               "130", "128", "129", "131", "132", H3W_F16(d, 0), H3W_F16(d, 16), H3W_F16(d, 32), H3W_F16(d, 48),
               H3W_F16(d, 64), H3W_F16(d, 80), H3W_F16(d, 96), H3W_F16(d, 112));
}

/* acc = A B + (scale_d ? acc : 0) for one k16 step */
template <int BN, int TA, int TB>
__device__ __forceinline__ void mma_k16(float *acc, uint64_t da, uint64_t db, int scale_d) {
    if constexpr (BN == 16)
        wg_mma_n16<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 32)
        wg_mma_n32<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 64)
        wg_mma_n64<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 96)
        wg_mma_n96<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 128)
        wg_mma_n128<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 160)
        wg_mma_n160<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 192)
        wg_mma_n192<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 232)
        wg_mma_n232<TA, TB>(acc, da, db, scale_d);
    else if constexpr (BN == 256)
        wg_mma_n256<TA, TB>(acc, da, db, scale_d);
    else
        static_assert(BN == 256, "mma_k16: no wrapper for this N");
}

/* Byte offset of element (r, c), c in [0, 64), in a [rows][64] BF16 block with the 128-byte swizzle. */
__host__ __device__ __forceinline__ uint32_t h3w_swz(int r, int c) {
    return (uint32_t)(r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2);
}

/* acc = A B + acc (scale_d = 1) or A B (scale_d = 0) for one k16 step, A (64 x 16 BF16) in
 * registers in the accumulator-like fragment layout (4 registers per thread: rows lane/4 and
 * lane/4 + 8 of the warp's 16, columns 2 (lane % 4) + {0, 1} and + 8), B from a descriptor. */
template <int TB>
__device__ __forceinline__ void wg_mma_rs_n128(float *d, const uint32_t *a, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
                   "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
                   "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
                   "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}

} /* namespace wg */

/* A 2-D BF16 tensor map over rows x cols (row stride ld elements) with boxes of box_cols x box_rows, the 128-byte
 * swizzle and zeros outside the tensor (src/cuda/linear.cu; the GEMM's operands and the attention's contiguous
 * tiles). */
h3s_status h3c_tma_map_bf16(const char *op, CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int64_t ld,
                            int box_cols, int box_rows);

#endif

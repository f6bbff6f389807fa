/* Strict GEMMs of the CUDA backend (docs/numerics/cuda.md, "GEMM").
 *
 * One tensor-core kernel computes C[P, Q] = sum_r A(p, r) B(q, r) for the three BF16 linear
 * products (forward, dx, dw) with mma.sync.m16n8k16 (BF16 x BF16 products, FP32 accumulate):
 *   - block tile 128 (p) x 128 (q), reduction step 32 (two k16 steps), 256 threads as 2 x 4
 *     warps of 64 x 32; the tile shape, grid order and reduction order are constants: they
 *     never depend on P (= M, the row count), so an output element sees the same sequence of
 *     MMAs (r = 0, 16, 32, ... ascending, one accumulator) whatever M is and wherever its
 *     row sits in its tile.  Rows beyond P and reduction steps beyond R are loaded as zeros.
 *   - F32 operands (the gradient dy) are split on load into hi = bf16(v) and
 *     lo = bf16(v - hi) and multiplied as two MMAs, hi first, in every k16 step: dy is kept to
 *     about 16 significant bits (relative error <= 2^-17), the products stay exact in FP32.
 *   - dw reduces over rows: the accumulator is restarted at every 256-row tile and the tile
 *     partials are added to a running total in ascending tile order (the canonical fold of
 *     docs/strict.md section 3) in registers; no workspace, no atomics, no split-K.
 * A second kernel does the F32 linear with CUDA-core FMAs only (never TF32): per output one
 * __fmaf_rn chain from +0 in ascending reduction order, the CPU's strict F32 chain. */
#include "cuda/k_common.cuh"

/* ------------------------------------------------------------------ tensor-core kernel */

#define TC_BP 128
#define TC_BQ 128
#define TC_BR 32
#define TC_LD 40 /* smem row stride in BF16 elements: 32 + 8 pad keeps ldmatrix rows conflict-free */
#define TC_THREADS 256
#define TC_TILE_ELEMS (TC_BP * TC_LD)

enum { A_BF16_RC = 0, A_F32_RC = 1, A_F32_PC = 2 }; /* A(p, r) = a[p*lda + r] | a[r*lda + p] */
enum { B_BF16_RC = 0, B_BF16_QC = 1 };              /* B(q, r) = b[q*ldb + r] | b[r*ldb + q] */
enum { EPI_BF16_BIAS = 0, EPI_F32 = 1, EPI_F32_FOLD = 2 };

typedef struct tc_args {
    int64_t P, Q, R;
    const void *a;
    int64_t lda;
    int a_vec; /* 16-byte loads allowed (aligned base and leading dimension) */
    const uint16_t *b;
    int64_t ldb;
    int b_vec;
    const uint16_t *bias; /* BF16 [Q] or NULL (EPI_BF16_BIAS) */
    void *c;
    int64_t ldc;
} tc_args;

__device__ __forceinline__ void split_bf16(float v, uint16_t *hi, uint16_t *lo) {
    uint16_t h = h3k_f2bf(v);
    float hf = h3k_bf2f(h);
    if (isinf(hf) && isfinite(v)) { /* v rounds up to +-Inf in BF16: truncate instead */
        h = (uint16_t)(__float_as_uint(v) >> 16);
        hf = h3k_bf2f(h);
    }
    *hi = h;
    *lo = isfinite(v) ? h3k_f2bf(v - hf) : (uint16_t)0; /* v - hf is exact */
}

__device__ __forceinline__ uint32_t pack2(uint16_t lo_half, uint16_t hi_half) {
    return (uint32_t)lo_half | ((uint32_t)hi_half << 16);
}

/* Register staging of one reduction step's global tiles. */
template <int AM, int BM> struct tc_stage {
    uint4 a16[2];  /* A_BF16_RC: 2 chunks of 8 BF16 */
    float4 a32[4]; /* A_F32_*: 4 chunks of 4 F32 */
    uint4 b16[2];  /* B: 2 chunks of 8 BF16 */
};

__device__ __forceinline__ uint4 load8_bf16(const uint16_t *base, int64_t row, int64_t nrows, int64_t col,
                                            int64_t ncols, int64_t ld, int vec) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row >= nrows) return v;
    const uint16_t *p = base + row * ld + col;
    if (vec && col + 8 <= ncols) return *(const uint4 *)p;
    uint16_t e[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        e[i] = col + i < ncols ? p[i] : (uint16_t)0;
    v.x = pack2(e[0], e[1]);
    v.y = pack2(e[2], e[3]);
    v.z = pack2(e[4], e[5]);
    v.w = pack2(e[6], e[7]);
    return v;
}

__device__ __forceinline__ float4 load4_f32(const float *base, int64_t row, int64_t nrows, int64_t col, int64_t ncols,
                                            int64_t ld, int vec) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row >= nrows) return v;
    const float *p = base + row * ld + col;
    if (vec && col + 4 <= ncols) return *(const float4 *)p;
    if (col + 0 < ncols) v.x = p[0];
    if (col + 1 < ncols) v.y = p[1];
    if (col + 2 < ncols) v.z = p[2];
    if (col + 3 < ncols) v.w = p[3];
    return v;
}

template <int AM, int BM>
__device__ __forceinline__ void tc_load(const tc_args &g, int64_t p0, int64_t q0, int64_t r0, int tid,
                                        tc_stage<AM, BM> &st) {
    if (AM == A_BF16_RC) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, row = c >> 2, col = (c & 3) * 8;
            st.a16[i] = load8_bf16((const uint16_t *)g.a, p0 + row, g.P, r0 + col, g.R, g.lda, g.a_vec);
        }
    } else if (AM == A_F32_RC) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = tid + i * TC_THREADS, row = c >> 3, col = (c & 7) * 4;
            st.a32[i] = load4_f32((const float *)g.a, p0 + row, g.P, r0 + col, g.R, g.lda, g.a_vec);
        }
    } else { /* A_F32_PC: global rows are r, p contiguous; lanes take consecutive r */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = tid + i * TC_THREADS, r = c & 31, pc = c >> 5;
            st.a32[i] = load4_f32((const float *)g.a, r0 + r, g.R, p0 + pc * 4, g.P, g.lda, g.a_vec);
        }
    }
    if (BM == B_BF16_RC) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, row = c >> 2, col = (c & 3) * 8;
            st.b16[i] = load8_bf16(g.b, q0 + row, g.Q, r0 + col, g.R, g.ldb, g.b_vec);
        }
    } else { /* B_BF16_QC: global rows are r, q contiguous */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, r = c & 31, qc = c >> 5;
            st.b16[i] = load8_bf16(g.b, r0 + r, g.R, q0 + qc * 8, g.Q, g.ldb, g.b_vec);
        }
    }
}

/* smem layout of one stage: [A hi][A lo (F32 modes)][B], each [128][TC_LD] BF16, r contiguous. */
template <int AM, int BM> __device__ __forceinline__ void tc_store(uint16_t *sm, int tid, const tc_stage<AM, BM> &st) {
    uint16_t *ahi = sm, *alo = sm + TC_TILE_ELEMS;
    uint16_t *bs = sm + (AM == A_BF16_RC ? 1 : 2) * TC_TILE_ELEMS;
    if (AM == A_BF16_RC) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, row = c >> 2, col = (c & 3) * 8;
            *(uint4 *)(ahi + row * TC_LD + col) = st.a16[i];
        }
    } else if (AM == A_F32_RC) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = tid + i * TC_THREADS, row = c >> 3, col = (c & 7) * 4;
            uint16_t h[4], l[4];
            split_bf16(st.a32[i].x, &h[0], &l[0]);
            split_bf16(st.a32[i].y, &h[1], &l[1]);
            split_bf16(st.a32[i].z, &h[2], &l[2]);
            split_bf16(st.a32[i].w, &h[3], &l[3]);
            *(uint2 *)(ahi + row * TC_LD + col) = make_uint2(pack2(h[0], h[1]), pack2(h[2], h[3]));
            *(uint2 *)(alo + row * TC_LD + col) = make_uint2(pack2(l[0], l[1]), pack2(l[2], l[3]));
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = tid + i * TC_THREADS, r = c & 31, pc = c >> 5;
            float v[4] = {st.a32[i].x, st.a32[i].y, st.a32[i].z, st.a32[i].w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint16_t h, l;
                split_bf16(v[j], &h, &l);
                ahi[(pc * 4 + j) * TC_LD + r] = h;
                alo[(pc * 4 + j) * TC_LD + r] = l;
            }
        }
    }
    if (BM == B_BF16_RC) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, row = c >> 2, col = (c & 3) * 8;
            *(uint4 *)(bs + row * TC_LD + col) = st.b16[i];
        }
    } else {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = tid + i * TC_THREADS, r = c & 31, qc = c >> 5;
            uint32_t w[4] = {st.b16[i].x, st.b16[i].y, st.b16[i].z, st.b16[i].w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bs[(qc * 8 + 2 * j) * TC_LD + r] = (uint16_t)(w[j] & 0xffffu);
                bs[(qc * 8 + 2 * j + 1) * TC_LD + r] = (uint16_t)(w[j] >> 16);
            }
        }
    }
}

template <int AM> __host__ __device__ constexpr int tc_stage_elems() {
    return (AM == A_BF16_RC ? 2 : 3) * TC_TILE_ELEMS;
}

template <int AM, int BM, int EPI>
__global__ void __launch_bounds__(TC_THREADS, EPI == EPI_F32_FOLD ? 1 : 2) tc_gemm_kernel(tc_args g) {
    extern __shared__ __align__(16) uint16_t tc_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wp = warp >> 2, wq = warp & 3; /* warp tile: rows wp*64, cols wq*32 */
    const int64_t p0 = (int64_t)blockIdx.y * TC_BP, q0 = (int64_t)blockIdx.x * TC_BQ;
    constexpr int SPLIT = AM != A_BF16_RC;
    constexpr int STAGE = tc_stage_elems<AM>();

    float acc[4][4][4];
    float tot[4][4][4]; /* running fold total (EPI_F32_FOLD only; dead code otherwise) */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    bool first_tile = true;

    const int64_t nk = (g.R + TC_BR - 1) / TC_BR;
    tc_stage<AM, BM> st;
    if (nk > 0) {
        tc_load<AM, BM>(g, p0, q0, 0, tid, st);
        tc_store<AM, BM>(tc_smem, tid, st);
    }
    __syncthreads();

    for (int64_t kt = 0; kt < nk; kt++) {
        if (kt + 1 < nk) tc_load<AM, BM>(g, p0, q0, (kt + 1) * TC_BR, tid, st);
        const uint16_t *sm = tc_smem + (kt & 1) * STAGE;
        const uint16_t *ahi = sm, *alo = sm + TC_TILE_ELEMS, *bs = sm + (SPLIT ? 2 : 1) * TC_TILE_ELEMS;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t bf[4][2];
#pragma unroll
            for (int np = 0; np < 2; np++) {
                int row = wq * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
                int col = ks * 16 + ((lane >> 3) & 1) * 8;
                uint32_t addr = (uint32_t)__cvta_generic_to_shared(bs + row * TC_LD + col);
                h3k_ldmatrix_x4(addr, bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                int row = wp * 64 + mi * 16 + (lane & 15);
                int col = ks * 16 + (lane >> 4) * 8;
                uint32_t ah[4], al[4];
                h3k_ldmatrix_x4((uint32_t)__cvta_generic_to_shared(ahi + row * TC_LD + col), ah[0], ah[1], ah[2],
                                ah[3]);
                if (SPLIT)
                    h3k_ldmatrix_x4((uint32_t)__cvta_generic_to_shared(alo + row * TC_LD + col), al[0], al[1], al[2],
                                    al[3]);
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    h3k_mma_bf16(acc[mi][ni], ah, bf[ni][0], bf[ni][1]);
                    if (SPLIT) h3k_mma_bf16(acc[mi][ni], al, bf[ni][0], bf[ni][1]);
                }
            }
        }
        if (EPI == EPI_F32_FOLD) {
            /* end of a 256-row tile of the reduction (rows are r here), or of the last one */
            if (((kt + 1) * TC_BR) % H3S_FOLD_TILE == 0 || kt + 1 == nk) {
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            tot[i][j][e] = first_tile ? acc[i][j][e] : tot[i][j][e] + acc[i][j][e];
                            acc[i][j][e] = 0.0f;
                        }
                first_tile = false;
            }
        }
        if (kt + 1 < nk) tc_store<AM, BM>(tc_smem + ((kt + 1) & 1) * STAGE, tid, st);
        __syncthreads();
    }

    const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int64_t p = p0 + wp * 64 + mi * 16 + g8 + (e >> 1) * 8;
                int64_t q = q0 + wq * 32 + ni * 8 + t4 * 2 + (e & 1);
                if (p >= g.P || q >= g.Q) continue;
                float v;
                if (EPI == EPI_F32_FOLD)
                    v = nk > 0 ? tot[mi][ni][e] : 0.0f;
                else
                    v = acc[mi][ni][e];
                if (EPI == EPI_BF16_BIAS) {
                    if (g.bias) v = v + h3k_bf2f(g.bias[q]); /* bias after the sum, only when present */
                    ((uint16_t *)g.c)[p * g.ldc + q] = h3k_f2bf(v);
                } else {
                    ((float *)g.c)[p * g.ldc + q] = v;
                }
            }
        }
    }
}

template <int AM, int BM, int EPI> static h3s_status tc_launch(const char *op, const tc_args &g) {
    if (g.P <= 0 || g.Q <= 0) return H3S_OK;
    const int smem = 2 * tc_stage_elems<AM>() * (int)sizeof(uint16_t);
    static int attr_set = 0; /* one per instantiation */
    if (!attr_set) {
        cudaError_t e =
            cudaFuncSetAttribute(tc_gemm_kernel<AM, BM, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess)
            return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
        attr_set = 1;
    }
    int64_t gq = (g.Q + TC_BQ - 1) / TC_BQ, gp = (g.P + TC_BP - 1) / TC_BP;
    if (gp > 65535 || gq > 0x7fffffff)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: GEMM of %lld x %lld outputs exceeds the grid limits", op,
                        (long long)g.P, (long long)g.Q);
    dim3 grid((unsigned)gq, (unsigned)gp);
    tc_gemm_kernel<AM, BM, EPI><<<grid, TC_THREADS, smem, H3K_STREAM>>>(g);
    return h3c_launch_check(op);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static h3s_status mma_gemm_forward(const char *op, int64_t M, int64_t N, int64_t K, const void *x, const void *w,
                                   const void *b, void *y) {
    tc_args g;
    g.P = M, g.Q = N, g.R = K;
    g.a = x, g.lda = K, g.a_vec = aligned16(x) && K % 8 == 0;
    g.b = (const uint16_t *)w, g.ldb = K, g.b_vec = aligned16(w) && K % 8 == 0;
    g.bias = (const uint16_t *)b;
    g.c = y, g.ldc = N;
    return tc_launch<A_BF16_RC, B_BF16_RC, EPI_BF16_BIAS>(op, g);
}

static h3s_status mma_gemm_dx_split(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *w,
                                    float *dx) {
    /* dx[m, k] = sum_n dy[m, n] w[n, k]: P = M, Q = K, R = N */
    tc_args g;
    g.P = M, g.Q = K, g.R = N;
    g.a = dy, g.lda = N, g.a_vec = aligned16(dy) && N % 4 == 0;
    g.b = (const uint16_t *)w, g.ldb = K, g.b_vec = aligned16(w) && K % 8 == 0;
    g.bias = NULL;
    g.c = dx, g.ldc = K;
    return tc_launch<A_F32_RC, B_BF16_QC, EPI_F32>(op, g);
}

static h3s_status mma_gemm_dw_split(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *x,
                                    float *dw) {
    /* dw[n, k] = sum_m dy[m, n] x[m, k]: P = N, Q = K, R = M (folded in 256-row tiles) */
    tc_args g;
    g.P = N, g.Q = K, g.R = M;
    g.a = dy, g.lda = N, g.a_vec = aligned16(dy) && N % 4 == 0;
    g.b = (const uint16_t *)x, g.ldb = K, g.b_vec = aligned16(x) && K % 8 == 0;
    g.bias = NULL;
    g.c = dw, g.ldc = K;
    return tc_launch<A_F32_PC, B_BF16_QC, EPI_F32_FOLD>(op, g);
}

/* ------------------------------------------------------------------ Hopper kernel (wgmma + TMA)
 *
 * C[P, Q] = sum_r A(p, r) B(q, r), BF16 operands from shared memory, FP32 accumulators in
 * registers (docs/numerics/linear_cuda.md).  One CTA computes one BM x BN output tile:
 *   - warpgroup 0 is the producer: one thread issues the bulk tensor copies (TMA) of the
 *     BM x 64 slice of A and the BN x 64 slice of B of every reduction block into a ring of
 *     STAGES shared-memory stages (128-byte swizzle), completing on an mbarrier;
 *   - warpgroups 1 .. BM/64 are consumers: each owns 64 rows of the tile and issues, per
 *     reduction block, four wgmma.m64nBNk16 in ascending r (r0, r0 + 16, r0 + 32, r0 + 48),
 *     into one accumulator.
 * So every output element sees the same chain whatever the configuration: the k16 products of
 * r = 0, 16, 32, ... added in ascending order to one FP32 accumulator that starts at +0.  The
 * tile shape only decides which CTA (and which 64-row slice of it) issues the chain, never
 * the chain itself; reduction steps beyond R and rows beyond P are zeros written by the copy
 * engine.  Operands are K-major (r contiguous) or MN-major (p or q contiguous, the "transpose"
 * bit of wgmma): the layout moves data, not arithmetic.  FOLD restarts the accumulator every
 * FOLD x 256 reduction rows (the wgrad's 256-row tiles of docs/strict.md section 3, the folded dgrad's
 * H3C_DGRAD_FOLD_TILE) and adds the tile partial to a running total in ascending tile order, in registers. */

#include <mutex>
#include <type_traits>
#include <cuda.h>
#include <cudaTypedefs.h>

#include "cuda/k_wgmma.cuh"

namespace wg {

constexpr int BK = 64; /* reduction block: 64 BF16 = one 128-byte swizzle row */
/* split mode (args::nsplit): reduction blocks per work item, one fold tile of the folded dgrad */
constexpr int64_t SPLIT_BLOCKS = H3C_DGRAD_FOLD_TILE / BK;
/* a reduction of at most this many blocks runs on a persistent grid whatever the configuration (launch) */
constexpr int64_t SHORT_BLOCKS = 32;

/* EPI_BF16_STAGED: BF16 out without bias through a shared-memory buffer per warp (the wgrad's, whose output is
 * large against its work: see the consumer's epilogue). */
/* EPI_BF16_TMA, EPI_F32_TMA: BF16 out (with the bias, when present) or F32 out, staged in shared memory and written by
 * bulk tensor stores that run while the rest of the tile is staged and the next tile's MMAs run (configurations 0
 * and 1 of the forward and the dgrad, on a persistent grid). */
enum { EPI_BF16_BIAS = 0, EPI_F32 = 1, EPI_BF16_STAGED = 2, EPI_BF16_TMA = 3, EPI_F32_TMA = 4 };
/* cfg::L2: none, or the split with its weight as operand A or B */
enum { L2_NONE = 0, L2_SPLIT_A = 1, L2_SPLIT_B = 2 };

struct args {
    int64_t P, Q, R;
    const uint16_t *bias; /* BF16 [Q] or NULL (EPI_BF16_BIAS) */
    void *c;
    int64_t ldc;
    int64_t tiles_p, tiles_q;
    /* Split mode (nsplit > 0, EPI_F32 without FOLD): the reduction is cut into the folded dgrad's fold tiles
     * (H3C_DGRAD_FOLD_TILE rows), each
     * (fold tile t, output tile) a work item of its own whose chain starts at +0 and whose partial goes to
     * c + t * split_stride; a second pass folds them in ascending t (the FOLD configuration's sum, computed
     * apart).  0 = off. */
    int64_t nsplit, split_stride;
    /* Rows of A each reduction block copies (K-major A, BM = 64): 64, or P rounded up to a multiple of 8 (one
     * atom of the 128-byte swizzle, so that the box fills the slot's first a_rows * 128 bytes as the first rows of
     * a full box would) when P < 64, which skips the rows that lie past P; the slot's other rows hold zeros written
     * once at the kernel's start (the zeros the copy engine would write past P), so the MMAs see the same operand. */
    int a_rows;
    /* The raster's group (grouped_origin: tile-rows per group, >= 1) and an L2 policy for each operand's copies in the
     * configurations without cfg::L2 (0 none, 1 evict-first, 2 evict-last): which CTA computes a tile, when, and how
     * long its operands stay in L2, never what the tile computes.  Set by launch from the test hook h3c_gemm_raster
     * (default 16, 0, 0). */
    int group, hint_a, hint_b;
};

/* h3c_gemm_raster's settings, host side (see args::group) */
static int g_raster_group = 16, g_hint_a = 0, g_hint_b = 0;

/* The folded dgrad's fold tile in units of the wgrad's 256-row one (its configurations' FOLD). */
constexpr int DGRAD_FOLD = H3C_DGRAD_FOLD_TILE / H3S_FOLD_TILE;
static_assert(DGRAD_FOLD * H3S_FOLD_TILE == H3C_DGRAD_FOLD_TILE && DGRAD_FOLD > 1, "the dgrad's fold tile");

/* A kernel configuration: every field a compile-time constant.  FOLD: 0 = one chain per element; n > 0 = the fold
 * with its running total in registers, the chain restarted every n x 256 reduction rows (1: the wgrad's fold tile,
 * DGRAD_FOLD: the folded dgrad's). */
template <int BM_, int BN_, int STAGES_, int AMN_, int BMN_, int EPI_, int FOLD_, int MINB_ = 1, int PERSIST_ = 0,
          int OVL_ = 0, int TRANS_ = 0, int KPS_ = 1, int L2_ = 0, int CL_ = 1>
struct cfg {
    static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, AMN = AMN_, BMN = BMN_, EPI = EPI_, FOLD = FOLD_;
    /* reduction rows per fold tile (FOLD > 0; without the fold it is never used) */
    static constexpr int FOLD_ROWS = (FOLD ? FOLD : 1) * H3S_FOLD_TILE;
    /* OVL: the register fold with its drain overlapped (consumer): each block's MMAs as two commit groups, the
     * tile's columns [0, BN - 64) and [BN - 64, BN) */
    static constexpr int OVL = OVL_;
    /* TRANS: the kernel computes the transpose of the caller's output, C^T[P, Q] with the caller's rows as Q (the
     * operands' roles swapped by the launcher), and the epilogue writes C^T[p, q] to out[q * ldc + p] (F32 from
     * registers, or F32 or BF16 by bulk stores; see store_tile) */
    static constexpr int TRANS = TRANS_;
    static constexpr int TRANS_QB = BN % 32 == 0 ? 32 : 8; /* q-rows per bulk-store box of the transposed epilogue */
    static constexpr int MINB = MINB_; /* CTAs per SM; with 2 the register budget is left as launched */
    /* L2: the folded dgrad's split (L2_SPLIT_A or L2_SPLIT_B: which operand is the weight).  The weight's copies
     * carry an evict-first policy and the partials' stores an evict-last one, so that the partials stay in L2 for
     * the folding pass, which discards them there; the kernel lets the folding pass launch early (programmatic
     * dependent launch).  Cache policies only: the same values. */
    static constexpr int L2 = L2_;
    /* CL: CTAs per cluster.  CL = 2 (configuration 11): the two CTAs of a cluster compute vertically adjacent output
     * tiles (the same columns, so the same B block at every reduction step) on a persistent grid; each loads its own
     * A block and half of the common B block, which the bulk copy delivers to both (multicast), and a stage is given
     * back to both CTAs' producers.  Every CTA's shared memory holds, stage by stage, the bytes it would load alone,
     * and the MMAs and the epilogue are its own: the same bits. */
    static constexpr int CL = CL_;
    static constexpr int NC = BM / 64; /* consumer warpgroups */
    static constexpr int THREADS = 128 * (NC + 1);
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    /* KPS: reduction blocks per ring stage (more than one for the small tiles, whose blocks are small while each
     * stage costs a round trip of barriers).  A stage holds its blocks' A slots, then their B slots. */
    static constexpr int KPS = KPS_;
    static constexpr int STAGE = KPS * (A_BYTES + B_BYTES);
    /* the ring stages a tile of nk reduction blocks takes (its last stage may hold fewer than KPS) */
    static constexpr __host__ __device__ int64_t stages(int64_t nk) { return (nk + KPS - 1) / KPS; }
    /* the ring and its mbarriers (full and empty per stage) */
    static constexpr int RING = STAGES * STAGE;
    static constexpr int BARS = 2 * STAGES * 8;
    /* EPI_BF16_STAGED: 16 rows x EPI_COLS BF16 per consumer warp, each row padded by 16 bytes (so that the 8 rows of a
     * fragment's stores fall in distinct banks), after the ring's barriers */
    static constexpr int EPI_COLS = BN;
    static constexpr int EPI_ROW = EPI_COLS * 2 + 16;
    static constexpr int EPI_OFF = (RING + BARS + 127) / 128 * 128;
    static constexpr int EPI_BYTES = EPI == EPI_BF16_STAGED ? NC * 4 * 16 * EPI_ROW : 0;
    /* EPI_BF16_TMA, EPI_F32_TMA: per consumer warpgroup, two staging boxes of its 64 rows by 128 bytes (64 BF16 or
     * 32 F32 columns) in the 128-byte swizzle of the output's tensor map (1024-byte aligned), after the ring's
     * barriers; the tile's columns pass through them in turn */
    static constexpr int TMA_EPI = EPI == EPI_BF16_TMA || EPI == EPI_F32_TMA;
    static constexpr int STG_OFF = (RING + BARS + 1023) / 1024 * 1024;
    static constexpr int STG_BYTES = TMA_EPI ? NC * 2 * 8192 : 0;
    /* a persistent grid (at most one CTA per multiprocessor) for the configurations whose epilogue overlaps the next
     * tile's MMAs; the others run one CTA per tile except for short reductions (launch) */
    /* the fold's long reductions keep one CTA per tile unless PERSIST_ (wgrad configurations 7 and 9) */
    static constexpr int PERSIST = TMA_EPI && (FOLD == 0 || PERSIST_);
    static constexpr int SMEM = TMA_EPI     ? STG_OFF + STG_BYTES + 1024
                                : EPI_BYTES ? EPI_OFF + EPI_BYTES + 1024
                                            : RING + 1024 + BARS;
    static_assert(BM == 64 || BM == 128 || BM == 192, "BM");
    /* registers per thread after setmaxnreg (one CTA per SM): the producer warpgroup keeps PREG; with three consumer
     * warpgroups (512 threads, 128 registers each at launch) the consumers can take only what the producer gives back,
     * 152 each; with one or two, 232 */
    static constexpr int PREG = 40, CREG = NC == 3 ? 152 : 232;
    static_assert(NC != 3 || MINB != 1 || (128 * PREG + 128 * NC * CREG <= THREADS * (65536 / THREADS / 8 * 8)),
                  "setmaxnreg: the consumers' registers come from those the producer releases");
    static_assert(BN == 16 || BN == 32 || BN == 64 || BN == 128 || BN == 160 || BN == 192 || BN == 232 || BN == 256,
                  "BN");
    static_assert(!BMN || BN % 64 == 0, "an MN-major B tile is whole 64-column swizzle atoms");
    static_assert(MINB == 1 || MINB == 2, "MINB");
    static_assert(FOLD == 0 || FOLD == 1 || FOLD == DGRAD_FOLD, "FOLD");
    static_assert(EPI != EPI_BF16_STAGED || (EPI_COLS % 64 == 0 && BN % EPI_COLS == 0),
                  "whole staging chunks of 64-column multiples");
    static_assert(SMEM * MINB <= 227 * 1024, "shared memory");
    static_assert(KPS >= 1 && KPS <= 4, "KPS");
    static_assert(L2 == 0 || (EPI == EPI_F32 && FOLD == 0), "the L2 policies: the folded dgrad's split");
    static_assert(KPS == 1 || (FOLD == 0 && !TMA_EPI && NC == 1), "several blocks per stage: the plain chain only");
    static_assert(!OVL || (FOLD >= 1 && BN >= 128 && BN % (BMN ? 64 : 32) == 0),
                  "the overlapped fold: the register fold, two parts (MN-major B: whole swizzle atoms)");
    static_assert(CL == 1 || (CL == 2 && FOLD == 0 && MINB == 1 && !TRANS && KPS == 1 && L2 == 0 && TMA_EPI &&
                              (BMN ? (BN / 64) % CL == 0 : (BN / CL) % 8 == 0)),
                  "clusters: two CTAs of the bulk-store epilogue's plain chain, B in whole boxes per CTA");
    static_assert(!TMA_EPI || ((BM == 128 || (BM == 192 && !TRANS)) && BN % (TRANS ? 8 : 64) == 0 && MINB == 1),
                  "the bulk-store epilogue: 128-row (or 192-row) tiles of whole 64-column blocks (transposed: 8)");
    static_assert(!TRANS || ((EPI == EPI_F32 || EPI == EPI_F32_TMA || EPI == EPI_BF16_TMA ||
                              (EPI == EPI_BF16_BIAS && BM == 64)) &&
                             BN % 8 == 0),
                  "the transposed epilogue: F32 out, BF16 out from registers (64-row tiles) or bulk stores");
};

/* A barrier of the consumer warpgroups alone (named barrier 1; the producer never waits on it). */
template <int NC> __device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(NC * 128) : "memory");
}

/* A barrier of consumer warpgroup c's 128 threads alone (named barrier 2 + c). */
__device__ __forceinline__ void warpgroup_sync(int c) { asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory"); }

/* BF16 out: the bias, when present, added to a pair of finished values after the sum (Q is a multiple of 8, so
 * q < Q implies q + 1 < Q). */
__device__ __forceinline__ void add_bias_pair(const uint16_t *bias, int64_t q, int64_t Q, float &v0, float &v1) {
    if (bias && q < Q) {
        v0 = v0 + h3k_bf2f(bias[q]);
        v1 = v1 + h3k_bf2f(bias[q + 1]);
    }
}

/* The tile's epilogue: v holds this consumer thread's values of the finished tile (the fold's total, or the one
 * chain's accumulator), as an m64nBN accumulator fragment. */
template <class C>
__device__ __forceinline__ void store_tile(uint8_t *smem, const float (&v)[C::BN / 2], int64_t p0, int64_t q0, int c,
                                           const args &g, int64_t coff, const CUtensorMap *mc, int &seq) {
    constexpr int BN = C::BN, ACC = BN / 2;
    const int t = threadIdx.x & 127;
    uint64_t pol = 0; /* the partials' evict-last policy (cfg::L2) */
    if constexpr (C::L2) pol = l2_evict_last();
    /* epilogue: accumulator fragment of m64nBN: rows w*16 + lane/4 (+8), columns j*8 + 2*(lane%4) (+1) */
    const int w = t >> 5, lane = t & 31;
    const int64_t row0 = p0 + c * 64 + w * 16 + (lane >> 2);
    if constexpr (C::EPI == EPI_BF16_BIAS && C::TRANS) {
        /* Transposed BF16 out from registers (the 64 x 16 configurations, whose output is a few rows q): C^T[p, q]
         * plus the bias of p, rounded by h3k_f2bf2 as in every BF16 epilogue, to out[q * ldc + p].  The values of
         * p and p + 1 (lanes l and l + 4; p even in the first, as p0 is a multiple of 64) are packed by the even
         * lane and stored as one 4-byte write (P is a multiple of 8: p < P implies p + 1 < P). */
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t q = q0 + j * 8 + 2 * (lane & 3) + e;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t p = row0 + 8 * h;
                    float v0 = v[j * 4 + 2 * h + e];
                    if (g.bias && p < g.P) v0 = v0 + h3k_bf2f(g.bias[p]);
                    const float v1 = __shfl_down_sync(0xffffffffu, v0, 4);
                    if (((lane >> 2) & 1) == 0 && q < g.Q && p < g.P)
                        *(uint32_t *)((uint16_t *)g.c + q * g.ldc + p) = h3k_f2bf2(v0, v1);
                }
            }
        }
    } else if constexpr (C::EPI == EPI_BF16_BIAS) {
        /* BF16 out: each value (plus the bias, when present) rounded by h3k_f2bf2, then the four lanes of a row
         * exchange their packed pairs so that each holds 8 consecutive columns, stored as one 16-byte write (every
         * 32-byte sector written whole; 4-byte stores of 2 columns left half-written sectors and ran slower than the
         * F32 epilogue).  Only where the bytes go changes: every value is the one the thread computed. */
        static_assert(BN % 32 == 0, "BF16 epilogue: whole groups of 4 column blocks");
        const int l = lane & 3;
#pragma unroll
        for (int jg = 0; jg < BN / 32; jg++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t wv[4];
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    const int j = jg * 4 + jj;
                    const int64_t q = q0 + j * 8 + 2 * l;
                    float v0 = v[j * 4 + 2 * h];
                    float v1 = v[j * 4 + 2 * h + 1];
                    add_bias_pair(g.bias, q, g.Q, v0, v1);
                    wv[jj] = h3k_f2bf2(v0, v1);
                }
                /* 4 x 4 transpose inside the quad: in round r lane s sends its pair for column block (s + r) % 4
                 * and receives from lane (l - r) % 4 that lane's pair for column block l */
                uint32_t o0 = 0, o1 = 0, o2 = 0, o3 = 0;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int si = (l + r) & 3, src = (l - r) & 3;
                    const uint32_t x = si == 0 ? wv[0] : si == 1 ? wv[1] : si == 2 ? wv[2] : wv[3];
                    const uint32_t y = __shfl_sync(0xffffffffu, x, (lane & ~3) | src);
                    o0 = src == 0 ? y : o0;
                    o1 = src == 1 ? y : o1;
                    o2 = src == 2 ? y : o2;
                    o3 = src == 3 ? y : o3;
                }
                const int64_t p = row0 + 8 * h, qc = q0 + (jg * 4 + l) * 8;
                if (p < g.P && qc < g.Q) *(uint4 *)((uint16_t *)g.c + p * g.ldc + qc) = make_uint4(o0, o1, o2, o3);
            }
        }
    } else if constexpr (C::EPI == EPI_BF16_STAGED) {
        /* BF16 out, no bias.  Each pair is rounded as h3k_f2bf2 rounds it: when none of this thread's values is NaN or
         * infinite (their products with 0 sum to a zero) by the one cvt of h3k_f2bf2_finite, else by h3k_f2bf2 (the
         * same bits for every non-NaN value; NaN keeps its payload).  The packed pairs go to this warp's 16 rows in
         * shared memory, then each lane copies whole 16-byte chunks of those rows to C, consecutive lanes along a row
         * (every 32-byte sector written whole, by one instruction).  Only where the bytes go changes. */
        uint8_t *ebuf = smem + C::EPI_OFF + (c * 4 + w) * 16 * C::EPI_ROW;
        const int qr = lane >> 2, l = lane & 3;
        float chk = 0.0f;
#pragma unroll
        for (int i = 0; i < ACC; i++)
            chk = __fmaf_rn(v[i], 0.0f, chk);
        constexpr int EC = C::EPI_COLS;
        static_assert(BN % EC == 0, "whole staging chunks");
#pragma unroll
        for (int c0 = 0; c0 < BN; c0 += EC) { /* columns [c0, c0 + EC) of the tile */
            auto stage = [&](auto finite) {
#pragma unroll
                for (int j = 0; j < EC / 8; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const float v0 = v[(c0 / 8 + j) * 4 + 2 * h];
                        const float v1 = v[(c0 / 8 + j) * 4 + 2 * h + 1];
                        *(uint32_t *)(ebuf + (qr + 8 * h) * C::EPI_ROW + (j * 8 + 2 * l) * 2) =
                            decltype(finite)::value ? h3k_f2bf2_finite(v0, v1) : h3k_f2bf2(v0, v1);
                    }
            };
            if (chk == 0.0f)
                stage(std::true_type{});
            else
                stage(std::false_type{});
            __syncwarp();
            constexpr int CH = EC / 8; /* 16-byte chunks per row */
            static_assert((16 * CH) % 32 == 0, "whole chunks per lane");
            const int64_t prow = p0 + c * 64 + w * 16;
#pragma unroll 4
            for (int i = 0; i < 16 * CH / 32; i++) {
                const int idx = i * 32 + lane, r = idx / CH, ch = idx % CH;
                const uint4 u = *(const uint4 *)(ebuf + r * C::EPI_ROW + ch * 16);
                const int64_t p = prow + r, q = q0 + c0 + ch * 8;
                if (p < g.P && q < g.Q) *(uint4 *)((uint16_t *)g.c + p * g.ldc + q) = u; /* Q is a multiple of 8 */
            }
            __syncwarp(); /* the buffer is rewritten by this warp's next chunk or tile */
        }
    } else if constexpr (C::TMA_EPI && C::TRANS) {
        /* Transposed: the values of this warpgroup's 64 rows p and the tile's BN columns q go to out[q][p].  In rounds
         * of (up to) 32 q-rows by 128 bytes of p (32 F32 or 64 BF16 values), in the order (q round, p part), the warps
         * holding that p part write the round's staging area (4 KB, the output map's 128-byte swizzle), each value
         * to its place (F32: as accumulated; BF16: plus the bias of its p, when present, then rounded by h3k_f2bf2
         * with its neighbour in q), and thread 0 issues the bulk stores of its boxes of QB q-rows (32, or 8 when BN
         * is no multiple of 32, so that no box reaches past the tile), which clip what lies past P or Q.  For one
         * register a warp's lanes cover 8 consecutive p of 4 even or 4 odd rows q, in distinct 16-byte chunks, so no
         * bank is hit twice.  The two areas alternate as the boxes of the plain case below.  Only where the bytes go
         * changes: every value is the one the thread computed. */
        constexpr bool F32 = C::EPI == EPI_F32_TMA;
        constexpr int ES = F32 ? 4 : 2, PW = 128 / ES, NPART = 64 / PW; /* p per box, parts per q round */
        constexpr int QB = C::TRANS_QB;
        uint8_t *stg = smem + C::STG_OFF + c * 16384;
        const int l = lane & 3;
        float bp[2] = {0.0f, 0.0f}; /* BF16 out: the bias of this thread's two rows p */
        if constexpr (!F32) {
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (g.bias && row0 + 8 * h < g.P) bp[h] = h3k_bf2f(g.bias[row0 + 8 * h]);
        }
#pragma unroll
        for (int qr = 0; qr < (BN + 31) / 32; qr++) {
            const int nrows = BN - qr * 32 < 32 ? BN - qr * 32 : 32; /* q-rows of this round, a multiple of QB */
#pragma unroll
            for (int part = 0; part < NPART; part++, seq++) {
                uint8_t *area = stg + (seq & 1) * 8192;
                if (t == 0) bulk_wait<1, true>();
                warpgroup_sync(c);
                if ((w * 16) / PW == part) {
#pragma unroll
                    for (int jj = 0; jj < 4; jj++) { /* constant trip counts: v is indexed by constants alone */
                        const int j = qr * 4 + jj;
                        if (jj * 8 >= nrows) continue;
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int cb = (w * 16 + (lane >> 2) + 8 * h - part * PW) * ES; /* byte of p in a row */
                            uint32_t pr = 0; /* BF16 out: the pair of rows q and q + 1, rounded */
                            if constexpr (!F32) {
                                float x0 = v[j * 4 + 2 * h], x1 = v[j * 4 + 2 * h + 1];
                                if (g.bias) x0 = x0 + bp[h], x1 = x1 + bp[h];
                                pr = h3k_f2bf2(x0, x1);
                            }
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int r = jj * 8 + 2 * l + e; /* q - (q0 + 32 qr): the area row */
                                uint8_t *dst = area + r * 128 + (((cb >> 4) ^ (r & 7)) << 4) + (cb & 15);
                                if constexpr (F32)
                                    *(float *)dst = v[j * 4 + 2 * h + e];
                                else
                                    *(uint16_t *)dst = (uint16_t)(e ? pr >> 16 : pr);
                            }
                        }
                    }
                }
                fence_proxy_async_smem();
                warpgroup_sync(c);
                if (t == 0) {
#pragma unroll
                    for (int b = 0; b < 32 / QB; b++)
                        if (b * QB < nrows)
                            tma_store_2d(mc, area + b * QB * 128, (int)(p0 + c * 64 + part * PW),
                                         (int)(q0 + qr * 32 + b * QB));
                    bulk_commit();
                }
            }
        }
    } else if constexpr (C::TMA_EPI) {
        /* Each value (BF16 out: plus the bias, when present, then rounded by h3k_f2bf2 as in EPI_BF16_BIAS; F32 out:
         * as accumulated) is written to a staging box of this warpgroup (64 rows x 128 bytes, 128-byte swizzle: the 8
         * rows of a fragment fall in distinct 16-byte chunks, so a warp's writes take the fewest wavefronts), then
         * thread 0 of the warpgroup issues one bulk store per box, which clips what lies past P or Q.  The two boxes
         * alternate over the chunks of BC columns (seq counts the chunks this warpgroup has staged, over all its
         * tiles): before a box is rewritten, the bulk store issued from it two chunks ago has read it.  Only where
         * the bytes go changes: every value is the one the thread computed. */
        constexpr bool F32 = C::EPI == EPI_F32_TMA;
        constexpr int ES = F32 ? 4 : 2, BC = 128 / ES; /* element bytes, columns per box */
        uint8_t *stg = smem + C::STG_OFF + c * 16384;
        const int l = lane & 3;
#pragma unroll
        for (int ch = 0; ch < BN / BC; ch++, seq++) {
            uint8_t *box = stg + (seq & 1) * 8192;
            if (t == 0) bulk_wait<1, true>();
            warpgroup_sync(c);
#pragma unroll
            for (int jj = 0; jj < BC / 8; jj++) {
                const int j = ch * (BC / 8) + jj, cb = (jj * 8 + 2 * l) * ES; /* cb: the byte within the box row */
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float v0 = v[j * 4 + 2 * h], v1 = v[j * 4 + 2 * h + 1];
                    const int r = w * 16 + (lane >> 2) + 8 * h;
                    uint8_t *dst = box + r * 128 + (((cb >> 4) ^ (r & 7)) << 4) + (cb & 15);
                    if constexpr (F32) {
                        *(float2 *)dst = make_float2(v0, v1);
                    } else {
                        const int64_t q = q0 + j * 8 + 2 * l;
                        add_bias_pair(g.bias, q, g.Q, v0, v1);
                        *(uint32_t *)dst = h3k_f2bf2(v0, v1);
                    }
                }
            }
            fence_proxy_async_smem();
            warpgroup_sync(c);
            if (t == 0) {
                tma_store_2d(mc, box, (int)(q0 + ch * BC), (int)(p0 + c * 64));
                bulk_commit();
            }
        }
    } else if constexpr (C::TRANS) {
        /* Transposed F32 out from registers: C^T[p, q] to out[q * ldc + p]; for one register a warp's lanes write 8
         * consecutive p (one 32-byte sector) of each of 4 rows q */
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t q = q0 + j * 8 + 2 * (lane & 3) + e;
                if (q >= g.Q) continue;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t p = row0 + 8 * h;
                    if (p >= g.P) continue;
                    float *dst = (float *)g.c + coff + q * g.ldc + p;
                    if constexpr (C::L2)
                        st_f32_hint(dst, v[j * 4 + 2 * h + e], pol);
                    else
                        *dst = v[j * 4 + 2 * h + e];
                }
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int64_t q = q0 + j * 8 + 2 * (lane & 3);
            if (q >= g.Q) continue; /* Q is a multiple of 8: q < Q implies q + 1 < Q */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t p = row0 + 8 * h;
                if (p >= g.P) continue;
                float *dst = (float *)g.c + coff + p * g.ldc + q;
                if constexpr (C::L2)
                    st_f32x2_hint(dst, v[j * 4 + 2 * h], v[j * 4 + 2 * h + 1], pol);
                else
                    *(float2 *)dst = make_float2(v[j * 4 + 2 * h], v[j * 4 + 2 * h + 1]);
            }
        }
    }
}

/* One reduction block's four k16 steps in ascending r (r0 + 16 kk) into d, an m64nN accumulator: A and B at the
 * shared addresses sa and sb in their layouts (MN-major: 64-column swizzle atoms of 8192 bytes; K-major: 128-byte
 * rows); the first step starts a chain (ignores d) when `start`. */
template <int N, int AMN, int BMN>
__device__ __forceinline__ void block_mmas(float *d, uint32_t sa, uint32_t sb, int start) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const uint64_t da = AMN ? desc(sa + kk * 2048, 8192, 1024) : desc(sa + kk * 32, 16, 1024);
        const uint64_t db = BMN ? desc(sb + kk * 2048, 8192, 1024) : desc(sb + kk * 32, 16, 1024);
        mma_k16<N, AMN, BMN>(d, da, db, (kk == 0 && start) ? 0 : 1);
    }
}

/* A stage given back by a consumer warpgroup: one arrival on its empty barrier, in every CTA of the cluster (each
 * CTA's producer writes this stage of both, its A block to its own and its half of B to both). */
template <int CL> __device__ __forceinline__ void give_back(uint64_t *empty) {
    if constexpr (CL == 1)
        mbar_arrive(empty);
    else
        for (unsigned r = 0; r < (unsigned)CL; r++)
            mbar_arrive_rank(empty, r);
}

/* The consumer warpgroups: warpgroup c owns rows [c * 64, c * 64 + 64) of the tile. */
template <class C>
__device__ __forceinline__ void consumer(uint8_t *smem, uint64_t *full, uint64_t *empty, int64_t nk, int64_t p0,
                                         int64_t q0, int c, const args &g, int64_t base, int64_t coff,
                                         const CUtensorMap *mc, int &seq) {
    constexpr int BN = C::BN, STAGES = C::STAGES, ACC = BN / 2;
    const int t = threadIdx.x & 127;
    float acc[ACC];
    /* the running fold total, in registers (FOLD > 0) */
    constexpr int TR = C::FOLD ? ACC : 1;
    float tot[TR];
#pragma unroll
    for (int i = 0; i < ACC; i++)
        acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TR; i++)
        tot[i] = 0.0f;
    /* Reduction blocks are counted over all the tiles this CTA has run (base = the blocks of the earlier tiles).
     * The ring position of the next block to issue (stage, barrier phase) and of the oldest block not yet given
     * back start from that count and move as running counters (no division per block), the same values in every
     * consumer thread. */
    int s_issue = (int)(base % STAGES), s_rel = s_issue;
    unsigned ph_issue = (unsigned)((base / STAGES) & 1);
    int64_t released = base; /* blocks [.., released) have given their stage back */
    /* One reduction block: four k16 steps in ascending r into acc.  A chain starts (its first
     * step ignores the accumulator) at r = 0, and with FOLD at every fold tile (FOLD_ROWS rows). */
    auto issue = [&](int64_t kb) {
        const int s = s_issue;
        mbar_wait(&full[s], ph_issue);
        if (++s_issue == STAGES) s_issue = 0, ph_issue ^= 1u;
        const uint32_t sa = smem_u32(smem + s * C::STAGE) + c * 8192; /* this warpgroup's 64 rows of A */
        const uint32_t sb = smem_u32(smem + s * C::STAGE + C::A_BYTES);
        const int chain_start = C::FOLD ? ((kb * BK) % C::FOLD_ROWS == 0) : (kb == 0);
        wg_fence();
        block_mmas<BN, C::AMN, C::BMN>(acc, sa, sb, chain_start);
        wg_commit();
    };
    /* Blocks before `done_local` have completed: give their stages back (one arrival per warpgroup, by its thread
     * 0; the loop itself runs in every thread, so the warps stay converged). */
    auto release = [&](int64_t done_local) {
        const int64_t done = base + done_local;
        for (; released < done; released++) {
            if (t == 0) give_back<C::CL>(&empty[s_rel]);
            if (++s_rel == STAGES) s_rel = 0;
        }
    };
    /* One more block has completed: give its stage back (each step of the overlapped fold completes one block; a
     * loop here would hide from ptxas which commit group a later wait retires) */
    auto release_one = [&]() {
        if (t == 0) give_back<C::CL>(&empty[s_rel]);
        if (++s_rel == STAGES) s_rel = 0;
        released++;
    };
    if constexpr (C::OVL) {
        /* The overlapped fold: the same chains and the same additions per element as the register fold below, in
         * another schedule.  Each block's MMAs are two commit groups, first the tile's columns [0, LO) into
         * acc[0, AL), then [LO, BN) into acc[AL, ACC) (an m64nBN fragment is the m64nLO fragment followed by the
         * m64n64 one).  At a fold tile's end the lower part's partial is folded as soon as its own MMAs are complete,
         * while the upper part's last MMAs still run; the upper part's is folded while the next fold tile's first
         * lower MMAs run.  So the tensor cores always hold queued work while a warpgroup adds, and no element's
         * chain or addition changes: a part's columns never meet the other part's. */
        constexpr int TILE_BLOCKS = C::FOLD_ROWS / BK, LO = BN - 64, AL = LO / 2;
        constexpr uint32_t HI_B = C::BMN ? (LO / 64) * 8192 : LO * 128; /* column LO of the B stage */
        int s_cur = 0;
        auto issue_part = [&](int64_t kb, auto hi, bool fence) {
            constexpr bool HI = decltype(hi)::value;
            if constexpr (!HI) { /* the lower part waits for the block's stage; the upper part reads the same */
                s_cur = s_issue;
                mbar_wait(&full[s_cur], ph_issue);
                if (++s_issue == STAGES) s_issue = 0, ph_issue ^= 1u;
            }
            const uint32_t sa = smem_u32(smem + s_cur * C::STAGE) + c * 8192;
            const uint32_t sb = smem_u32(smem + s_cur * C::STAGE + C::A_BYTES) + (HI ? HI_B : 0u);
            const int chain_start = (kb * BK) % C::FOLD_ROWS == 0;
            if (fence) wg_fence();
            if constexpr (HI)
                block_mmas<64, C::AMN, C::BMN>(acc + AL, sa, sb, chain_start);
            else
                block_mmas<LO, C::AMN, C::BMN>(acc, sa, sb, chain_start);
            wg_commit();
        };
        /* fold a part's partial into the total: a copy for the first fold tile, an addition after */
        auto fold_part = [&](auto hi, auto first) {
            constexpr bool HI = decltype(hi)::value, FIRST = decltype(first)::value;
            constexpr int I0 = HI ? AL : 0, I1 = HI ? ACC : AL;
            reg_fence<I1 - I0>(acc + I0);
#pragma unroll
            for (int i = I0; i < I1; i++)
                tot[i] = FIRST ? acc[i] : tot[i] + acc[i];
        };
        /* A fold tile [t0, t0 + TILE_BLOCKS) with another after it: on entry its first block's two groups are the only
         * ones in flight, on exit the next tile's first block's are.  Its blocks are unrolled, and the last fold tile
         * runs apart (last_tile, after the loop): through a loop or a merge of paths with other groups in flight ptxas
         * cannot tell which group a wait retires, and it then serialises every wgmma (C7514). */
        auto fold_tile = [&](int64_t t0, auto first) {
            const int64_t t1 = t0 + TILE_BLOCKS;
#pragma unroll
            for (int j = 1; j < TILE_BLOCKS; j++) {
                issue_part(t0 + j, std::false_type{}, true);
                issue_part(t0 + j, std::true_type{}, false);
                wg_wait<2>(); /* block t0 + j - 1 complete */
                release_one();
            }
            wg_wait<1>(); /* the lower part of block t1 - 1 complete, the upper part's MMAs still running */
            fold_part(std::false_type{}, first);
            issue_part(t1, std::false_type{}, true);
            wg_wait<1>(); /* the upper part of block t1 - 1 complete, the next tile's first lower MMAs running */
            release_one();
            fold_part(std::true_type{}, first);
            issue_part(t1, std::true_type{}, true);
        };
        /* The last fold tile [t0, nk) (whole or not): every group awaited before the fold. */
        auto last_tile = [&](int64_t t0, auto first) {
            for (int64_t kb = t0 + 1; kb < nk; kb++) {
                issue_part(kb, std::false_type{}, true);
                issue_part(kb, std::true_type{}, false);
                wg_wait<2>();
                release_one();
            }
            wg_wait<0>();
            release_one();
            fold_part(std::false_type{}, first);
            fold_part(std::true_type{}, first);
        };
        const int64_t inner = (nk - 1) / TILE_BLOCKS; /* fold tiles with another after them */
        issue_part(0, std::false_type{}, true);
        issue_part(0, std::true_type{}, false);
        if (inner == 0) {
            last_tile(0, std::true_type{});
        } else {
            fold_tile(0, std::true_type{});
            for (int64_t i = 1; i < inner; i++) /* fold tiles, ascending */
                fold_tile(i * TILE_BLOCKS, std::false_type{});
            last_tile(inner * TILE_BLOCKS, std::false_type{});
        }
    } else if (C::FOLD) {
        constexpr int TILE_BLOCKS = C::FOLD_ROWS / BK;
        /* One fold tile's chain into acc, its products awaited, then folded: the first tile's partial is the
         * total (copied), each later tile's is added to it element by element, in ascending tile order.  `first` is
         * a compile-time constant, so neither case carries a select between a copy and an addition per element
         * (which took as many instructions as the additions, run while the tensor cores wait). */
        auto fold_tile = [&](int64_t t0, auto first) {
            constexpr bool FIRST = decltype(first)::value;
            const int64_t t1 = t0 + TILE_BLOCKS < nk ? t0 + TILE_BLOCKS : nk;
            for (int64_t kb = t0; kb < t1; kb++) {
                issue(kb);
                wg_wait<1>();
                release(kb);
            }
            wg_wait<0>();
            reg_fence<ACC>(acc);
            release(t1);
#pragma unroll
            for (int i = 0; i < TR; i++)
                tot[i] = FIRST ? acc[i] : tot[i] + acc[i];
        };
        fold_tile(0, std::true_type{});
        for (int64_t t0 = TILE_BLOCKS; t0 < nk; t0 += TILE_BLOCKS) /* fold tiles, ascending */
            fold_tile(t0, std::false_type{});
    } else if constexpr (C::KPS > 1) {
        /* KPS blocks per stage, their MMAs one commit group; a last stage of fewer blocks runs apart (a merge of
         * paths inside a group would hide from ptxas which group a wait retires) */
        auto issue_stage = [&](int64_t st, auto nb) {
            const int s = s_issue;
            mbar_wait(&full[s], ph_issue);
            if (++s_issue == STAGES) s_issue = 0, ph_issue ^= 1u;
            wg_fence();
#pragma unroll
            for (int j = 0; j < decltype(nb)::value; j++) {
                const uint32_t sa = smem_u32(smem + s * C::STAGE + j * C::A_BYTES);
                const uint32_t sb = smem_u32(smem + s * C::STAGE + C::KPS * C::A_BYTES + j * C::B_BYTES);
                block_mmas<BN, C::AMN, C::BMN>(acc, sa, sb, st == 0 && j == 0);
            }
            wg_commit();
        };
        const int64_t full_st = nk / C::KPS;
        for (int64_t st = 0; st < full_st; st++) {
            issue_stage(st, std::integral_constant<int, C::KPS>{});
            wg_wait<1>();
            release(st);
        }
        /* the last stage's blocks when fewer than KPS (each count a path of its own, its MMAs unrolled) */
        auto last_stage = [&](auto nb) {
            issue_stage(full_st, nb);
            wg_wait<1>();
            release(full_st);
        };
        const int rem = (int)(nk % C::KPS);
        if (rem == 1) last_stage(std::integral_constant<int, 1>{});
        if constexpr (C::KPS > 2)
            if (rem == 2) last_stage(std::integral_constant<int, 2>{});
        if constexpr (C::KPS > 3)
            if (rem == 3) last_stage(std::integral_constant<int, 3>{});
    } else {
        for (int64_t kb = 0; kb < nk; kb++) {
            issue(kb);
            wg_wait<1>();
            release(kb);
        }
    }
    wg_wait<0>();
    reg_fence<ACC>(acc);
    release(C::stages(nk)); /* every stage of this tile is free for the producer's next tile */

    if constexpr (C::FOLD != 0)
        store_tile<C>(smem, tot, p0, q0, c, g, coff, mc, seq);
    else
        store_tile<C>(smem, acc, p0, q0, c, g, coff, mc, seq);
}

/* Output tile `id` in grouped raster order (args::group tile-rows at a time, 16 unless h3c_gemm_raster sets it, for
 * L2 reuse): its origin (p0, q0). */
template <int BM, int BN, int CL = 1>
__device__ __forceinline__ void grouped_origin(const args &g, int64_t id, int64_t &p0, int64_t &q0, unsigned rank = 0) {
    /* with clusters of CL CTAs, `id` numbers pairs (CL) of vertically adjacent tiles, the same order over
     * ceil(tiles_p / CL) pair-rows, group / CL of them at a time (at least one), and `rank` picks the tile of the
     * pair; a tile past P (an odd tile-row count) is computed from the zero rows the copy engine fills in and its
     * bulk stores write nothing */
    const int64_t GROUP = CL == 1            ? g.group
                          : g.group / CL > 0 ? g.group / CL
                                             : 1,
                  rows = (g.tiles_p + CL - 1) / CL, per_group = GROUP * g.tiles_q;
    const int64_t gid = id / per_group, first_p = gid * GROUP;
    const int64_t gsize = rows - first_p < GROUP ? rows - first_p : GROUP;
    const int64_t in = id - gid * per_group;
    p0 = ((first_p + in % gsize) * CL + rank) * BM, q0 = (in / gsize) * BN;
}

/* One operand box into shared memory: with an L2 policy (hint: cfg::L2's for the weight, or h3c_gemm_raster's) or
 * without one. */
__device__ __forceinline__ void load_pol(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, bool hint,
                                         uint64_t pol) {
    if (hint)
        tma_load_2d_hint(dst, map, bar, c0, c1, pol);
    else
        tma_load_2d(dst, map, bar, c0, c1);
}

/* A multicast box (cfg::CL), with an L2 policy (h3c_gemm_raster's) or without one. */
__device__ __forceinline__ void load_mc(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, uint16_t mask,
                                        bool hint, uint64_t pol) {
    if (hint)
        tma_load_2d_mc_hint(dst, map, bar, c0, c1, mask, pol);
    else
        tma_load_2d_mc(dst, map, bar, c0, c1, mask);
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB)
    wg_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, const args g) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = C::BM, BN = C::BN, STAGES = C::STAGES, NC = C::NC;
    extern __shared__ uint8_t wg_smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)wg_smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(smem + STAGES * C::STAGE);
    uint64_t *empty = full + STAGES;

    /* Persistent grid: CTA i runs the output tiles i, i + gridDim.x, ... in that order, each in
     * grouped raster order (args::group tile-rows at a time) for L2 reuse.  This decides only which CTA
     * computes a tile and when, never what the tile computes. */
    constexpr int CL = C::CL;
    const unsigned rank = CL > 1 ? cluster_rank() : 0u;
    /* with clusters, the work items are pairs (CL) of tiles, run by cluster blockIdx.x / CL: both CTAs of a cluster
     * run the same items, so the same reduction blocks, and each its own tile of every pair */
    const int64_t tiles_pq = (g.tiles_p + CL - 1) / CL * g.tiles_q, ntiles = tiles_pq * (g.nsplit > 0 ? g.nsplit : 1);
    const int64_t first = blockIdx.x / CL, step = gridDim.x / CL;
    const int64_t nk_all = (g.R + BK - 1) / BK;
    /* work item id: its output tile, its reduction blocks [kb0, kb0 + nk) and its output offset */
    auto work = [&](int64_t id, int64_t &p0, int64_t &q0, int64_t &kb0, int64_t &nk, int64_t &coff) {
        kb0 = 0, nk = nk_all, coff = 0;
        if (g.nsplit > 0) {
            const int64_t t = id / tiles_pq;
            id -= t * tiles_pq;
            kb0 = t * SPLIT_BLOCKS, nk = nk_all - kb0 < SPLIT_BLOCKS ? nk_all - kb0 : SPLIT_BLOCKS;
            coff = t * g.split_stride;
        }
        grouped_origin<BM, BN, CL>(g, id, p0, q0, rank);
    };

    const int wgi = threadIdx.x / 128;
    /* cfg::L2: the folding pass that follows (launched as a programmatic dependent) may be scheduled now; it waits
     * for this grid's completion before it reads a partial */
    if constexpr (C::L2) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    if (threadIdx.x == 0) {
        ring_bars_init(full, empty, STAGES, 1, NC * CL); /* with clusters, every consumer of the cluster gives back */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (!C::AMN && BM == 64)
        if (g.a_rows < BM) {            /* rows [a_rows, BM) of every A slot: zeros, written once, never copied over */
            constexpr int ROW = BK * 2; /* bytes per swizzled row */
            for (int i = threadIdx.x; i < STAGES * C::KPS * (BM * ROW / 16); i += blockDim.x) {
                const int slot = i / (BM * ROW / 16), off = (i % (BM * ROW / 16)) * 16;
                uint8_t *a = smem + (slot / C::KPS) * C::STAGE + (slot % C::KPS) * C::A_BYTES;
                if (off >= g.a_rows * ROW) *(uint4 *)(a + off) = make_uint4(0, 0, 0, 0);
            }
            fence_proxy_async_smem(); /* visible to the MMAs, which read through the async proxy */
        }
    if constexpr (CL > 1)
        cluster_sync(); /* no copy or arrival reaches a peer's barriers before they are initialised */
    else
        __syncthreads();

    if (wgi == 0) { /* producer */
        if constexpr (C::MINB == 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::PREG));
        if (threadIdx.x == 0) {
            uint64_t wpol = 0; /* cfg::L2: the weight's evict-first policy */
            if constexpr (C::L2) wpol = l2_evict_first();
            /* each operand's policy: cfg::L2's for the weight, else args::hint_a / hint_b (h3c_gemm_raster) */
            uint64_t apol = wpol, bpol = wpol;
            bool ahint = C::L2 == L2_SPLIT_A, bhint = C::L2 == L2_SPLIT_B;
            if constexpr (!C::L2) {
                if (g.hint_a) apol = g.hint_a == 1 ? l2_evict_first() : l2_evict_last(), ahint = true;
                if (g.hint_b) bpol = g.hint_b == 1 ? l2_evict_first() : l2_evict_last(), bhint = true;
            }
            int s = 0;        /* the ring position of the next stage over all this CTA's tiles */
            unsigned ph = 1u; /* the phase its empty barrier must have completed (1: a fresh stage) */
            for (int64_t id = first; id < ntiles; id += step) {
                int64_t p0, q0, kb0, nk, coff;
                work(id, p0, q0, kb0, nk, coff);
                /* one ring stage at a time: its blocks (KPS, or fewer in a tile's last stage), A slots then B slots */
                for (int64_t st = 0; st < C::stages(nk);
                     st++, s = s + 1 == STAGES ? 0 : s + 1, ph ^= s == 0 ? 1u : 0u) {
                    const int nb = C::KPS == 1 ? 1 : (int)(nk - st * C::KPS < C::KPS ? nk - st * C::KPS : C::KPS);
                    mbar_wait(&empty[s], ph);
                    mbar_expect_tx(&full[s], nb * (C::A_BYTES + C::B_BYTES - (BM - g.a_rows) * BK * 2));
#pragma unroll
                    for (int j = 0; j < C::KPS; j++) {
                        if (j >= nb) break;
                        uint8_t *sa = smem + s * C::STAGE + j * C::A_BYTES;
                        uint8_t *sb = smem + s * C::STAGE + C::KPS * C::A_BYTES + j * C::B_BYTES;
                        const int r0 = (int)((kb0 + st * C::KPS + j) * BK);
                        if (C::AMN) {
#pragma unroll
                            for (int i = 0; i < BM / 64; i++)
                                load_pol(sa + i * 8192, &map_a, &full[s], (int)(p0 + i * 64), r0, ahint, apol);
                        } else {
                            load_pol(sa, &map_a, &full[s], r0, (int)p0, ahint, apol);
                        }
                        if constexpr (CL > 1) { /* this CTA's part of B, to every CTA of the cluster */
                            if (C::BMN) {
#pragma unroll
                                for (int i = 0; i < BN / 64; i++) /* 64-column boxes dealt in turn */
                                    if (i % CL == (int)rank)
                                        load_mc(sb + i * 8192, &map_b, &full[s], (int)(q0 + i * 64), r0,
                                                (uint16_t)((1u << CL) - 1), bhint, bpol);
                            } else {
                                constexpr int PART = BN / CL; /* rows of B per CTA, 128 bytes each */
                                load_mc(sb + rank * PART * 128, &map_b, &full[s], r0, (int)(q0 + rank * PART),
                                        (uint16_t)((1u << CL) - 1), bhint, bpol);
                            }
                        } else if (C::BMN) {
#pragma unroll
                            for (int i = 0; i < BN / 64; i++)
                                load_pol(sb + i * 8192, &map_b, &full[s], (int)(q0 + i * 64), r0, bhint, bpol);
                        } else {
                            load_pol(sb, &map_b, &full[s], r0, (int)q0, bhint, bpol);
                        }
                    }
                }
            }
        }
    } else {
        if constexpr (C::MINB == 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::CREG));
        int64_t base = 0;
        int seq = 0; /* the bulk-store epilogue's chunks staged so far */
        for (int64_t id = first; id < ntiles; id += step) {
            int64_t p0, q0, kb0, nk, coff;
            work(id, p0, q0, kb0, nk, coff);
            consumer<C>(smem, full, empty, nk, p0, q0, wgi - 1, g, base, coff, &map_c, seq);
            base += C::stages(nk);
        }
        /* the last bulk stores complete before the CTA leaves */
        if constexpr (C::TMA_EPI)
            if ((threadIdx.x & 127) == 0) bulk_wait<0, false>();
    }
    if constexpr (CL > 1) cluster_sync(); /* no CTA leaves while its peer may still copy to it or arrive on it */
#endif
}

/* dy (F32) rounded once to BF16 (round to nearest even), the tensor cores' operand.  The reference
 * (h3c_elem_force_reference): one element per thread. */
__global__ void round_bf16_ref_kernel(int64_t n, const float *src, uint16_t *dst) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = h3k_f2bf(src[i]);
}

/* VW consecutive elements per thread (16-byte loads, one VW * 2-byte store), each rounded by the
 * same h3k_f2bf, then the n % VW tail elements, one per thread of the grid's first threads. */
template <int VW> __global__ void round_bf16_vec_kernel(int64_t n, const float *src, uint16_t *dst) {
    const int64_t nv = n / VW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
        float x[VW];
        uint16_t o[VW];
        h3k_ld_f32v<VW>(src + i * VW, x);
#pragma unroll
        for (int j = 0; j < VW; j++)
            o[j] = h3k_f2bf(x[j]);
        h3k_st_bf16v<VW>(dst + i * VW, o);
    }
    const int64_t t = nv * VW + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = h3k_f2bf(src[t]);
}

} /* namespace wg */

/* ------------------------------------------------------------------ Hopper launchers and dispatch */

namespace wg {

/* The configurations (docs/numerics/linear_cuda.md).  Which one runs depends on the phase, on
 * M (forward and dgrad, where M is an output dimension) and on nothing else; every one gives
 * the same bits for the same output element (tests/gpu/test_gpu_gemm.c). */
/* 128 x 256 and 128 x 192 tiles with the bulk-store epilogue (EPI_BF16_TMA, EPI_F32_TMA) on a persistent grid: the
 * epilogue's stores run while the next tile's MMAs do.  At 128 x 192 the staging boxes take the room of a ring stage.
 * Until this epilogue these configurations wrote from registers (EPI_BF16_BIAS, EPI_F32, as configurations 2 and 3
 * still do), one CTA per tile, with five stages at 128 x 192: the same values, so the same bits. */
typedef cfg<128, 256, 4, 0, 0, EPI_BF16_TMA, 0> fwd_c0;
typedef cfg<128, 192, 4, 0, 0, EPI_BF16_TMA, 0> fwd_c1;
typedef cfg<64, 64, 3, 0, 0, EPI_BF16_BIAS, 0, 2, 0, 0, 0, 2> fwd_c2;
typedef cfg<128, 256, 4, 0, 1, EPI_F32_TMA, 0> dgrad_c0;
typedef cfg<128, 192, 4, 0, 1, EPI_F32_TMA, 0> dgrad_c1;
typedef cfg<64, 64, 3, 0, 1, EPI_F32, 0, 2, 0, 0, 0, 2> dgrad_c2;
/* 64 x 64 tiles, one CTA per multiprocessor with a ring of 6 stages of two reduction blocks (configuration 2: 3
 * stages, two CTAs per multiprocessor): for M <= 64 when the output has
 * too few tiles to fill the device (e.g. the q/k/v dgrad's 5376 / 64 = 84 tiles, each streaming a
 * slice of the weight), so that more of the weight is in flight per CTA.  (The AdaLN projection's
 * dgrad, a far longer reduction into 42 tiles, folds instead: dgrad_fold below.) */
typedef cfg<64, 64, 6, 0, 0, EPI_BF16_BIAS, 0, 1, 0, 0, 0, 2> fwd_c3;
typedef cfg<64, 64, 6, 0, 1, EPI_F32, 0, 1, 0, 0, 0, 2> dgrad_c3;
typedef cfg<128, 192, 5, 1, 1, EPI_F32, 1> wgrad_fold;
/* The same fold with the total rounded once to BF16 as it is stored (h3k_f2bf2: the bits of h3k_f2bf, the library's
 * round to nearest even):
 * the bits of wgrad_fold's F32 output rounded afterwards, without writing and reading the F32 gradient.  Its
 * epilogue goes through shared memory (EPI_BF16_STAGED), whose buffer (51 KB) takes the room of a ring stage. */
typedef cfg<128, 192, 4, 1, 1, EPI_BF16_STAGED, 1> wgrad_fold_bf16;
/* A reduction of at most 256 rows (M <= H3S_FOLD_TILE: the token refiner's text rows) is one fold tile: the fold's
 * total is that tile's chain, so a configuration without the fold computes the same MMAs from +0 into the same
 * accumulator and gives the same bits (tests/gpu/test_gpu_gemm.c compares them).  Such a wgrad is almost all output
 * writes; these take 128 x 256 tiles, which need no registers for a running total. */
typedef cfg<128, 256, 4, 1, 1, EPI_F32, 0> wgrad_one;
typedef cfg<128, 256, 3, 1, 1, EPI_BF16_STAGED, 0> wgrad_one_bf16;
/* The one-tile wgrad with the bulk-store epilogue (wgrad configuration 5): the same values, the same rounding
 * (h3k_f2bf2, the bits of the staged epilogue's), only the way the tile reaches memory differs; the staging boxes give
 * the BF16 configuration a ring stage back. */
typedef cfg<128, 256, 4, 1, 1, EPI_F32_TMA, 0> wgrad_one_tma;
typedef cfg<128, 256, 4, 1, 1, EPI_BF16_TMA, 0> wgrad_one_bf16_tma;
/* The dgrad of a long reduction into few columns (the AdaLN projection's: N >= 8 K, h3c_gemm_dgrad_folds): the
 * reduction restarts every H3C_DGRAD_FOLD_TILE (1024) rows and the tile partials are added in ascending order, in
 * registers (this configuration) or, at M <= H3C_DGRAD_SPLIT_M, as separate work items of dgrad_c2 (or dgrad_t16b)
 * in split mode folded by split_fold_kernel: the same partials added in the same order, so the same bits, with every
 * multiprocessor streaming the weight instead of one per 64 output columns.  The fold tile is four of the wgrad's
 * (256 rows up to commit 113e0fe): the split writes and reads back a quarter of the partials (22 MB instead
 * of 87 at M = 64 on the GEMM benchmark's AdaLN shape). */
typedef cfg<128, 192, 5, 0, 1, EPI_F32, DGRAD_FOLD> dgrad_fold;
/* The overlapped fold (OVL, consumer): the register fold's chains and additions in a schedule that keeps MMAs queued
 * while a warpgroup adds its partial.  Wgrad configurations 7 (6's) and 8 (0's), and the folded dgrad's. */
typedef cfg<128, 192, 4, 1, 1, EPI_F32_TMA, 1, 1, 1, 1> wgrad_ovl_tma_persist;
typedef cfg<128, 192, 4, 1, 1, EPI_BF16_TMA, 1, 1, 1, 1> wgrad_ovl_bf16_tma_persist;
typedef cfg<128, 192, 5, 1, 1, EPI_F32, 1, 1, 0, 1> wgrad_ovl;
typedef cfg<128, 192, 4, 1, 1, EPI_BF16_STAGED, 1, 1, 0, 1> wgrad_ovl_bf16;
typedef cfg<128, 192, 5, 0, 1, EPI_F32, DGRAD_FOLD, 1, 0, 1> dgrad_fold_ovl;
/* Transposed (TRANS): the same sums with the operands' roles swapped, C^T = B A^T, so that a short M lies along the
 * tile's columns, in 160-column tiles (forward y^T = w x^T and dgrad dx^T = w^T dy^T, B K-major: forward/dgrad
 * configuration 4), or that the tile grid of a wgrad dw^T = x^T dy has fewer waves (wgrad configuration 9).  Each
 * product is the same BF16 x BF16 product and each k16 step adds the same 16 products (the instruction's rows and
 * columns do not enter an element's chain), so the bits are those of the other configurations; test_gpu_gemm
 * compares them. */
typedef cfg<128, 160, 5, 0, 0, EPI_BF16_TMA, 0, 1, 0, 0, 1> fwd_t;
typedef cfg<128, 160, 5, 1, 0, EPI_F32_TMA, 0, 1, 0, 0, 1> dgrad_t;
/* 232 columns: M = 925 in four column tiles (928 columns) instead of eight 128-row tiles (1024 rows) */
typedef cfg<128, 232, 4, 0, 0, EPI_BF16_TMA, 0, 1, 0, 0, 1> fwd_t232;
typedef cfg<128, 232, 4, 1, 0, EPI_F32_TMA, 0, 1, 0, 0, 1> dgrad_t232;
typedef cfg<128, 160, 5, 1, 0, EPI_F32, DGRAD_FOLD, 1, 0, 1, 1> dgrad_fold_ovl_t;
/* 64 x 16 transposed tiles for M <= 16 (forward/dgrad configurations 6 and 7): the weight's 64 rows (forward) or
 * columns (dgrad) as the MMA's A, the few rows of x or dy as its 16 columns, so that each k16 step is an m64n16k16
 * MMA (a quarter of the m64n64k16 of configurations 2 and 3, of which 48 rows or more are padding at M <= 16).  6: a
 * ring of 5 stages of four reduction blocks (KPS), one CTA per multiprocessor (outputs of fewer than 132 tiles); 7:
 * 5 stages of two, two CTAs per multiprocessor (the wide outputs, and the work items of the folded dgrad's split at
 * M <= 16).  Several blocks per stage cut the barrier round trips per byte streamed, which held these kernels back
 * (docs/evidence/gpu/development/small_m.md, calls 36 and 38/39); the MMAs and their order are unchanged. */
typedef cfg<64, 16, 5, 0, 0, EPI_BF16_BIAS, 0, 1, 0, 0, 1, 4> fwd_t16;
typedef cfg<64, 16, 5, 0, 0, EPI_BF16_BIAS, 0, 2, 0, 0, 1, 2> fwd_t16b;
typedef cfg<64, 16, 5, 1, 0, EPI_F32, 0, 1, 0, 0, 1, 4> dgrad_t16;
typedef cfg<64, 16, 5, 1, 0, EPI_F32, 0, 2, 0, 0, 1, 2> dgrad_t16b;
/* The folded dgrad's split (dgrad_folded) in these tiles with the L2 policies (cfg::L2): the weight streamed
 * evict-first, the partials stored evict-last; the same kernels' values. */
typedef cfg<64, 64, 3, 0, 1, EPI_F32, 0, 2, 0, 0, 0, 2, L2_SPLIT_B> dgrad_c2_split;
typedef cfg<64, 16, 5, 1, 0, EPI_F32, 0, 2, 0, 0, 1, 2, L2_SPLIT_A> dgrad_t16b_split;
typedef cfg<128, 192, 4, 1, 1, EPI_F32_TMA, 1, 1, 1, 1, 1> wgrad_ovl_tma_persist_t;
/* Configuration 11 (the dispatcher's instead of 0 from CLUSTER_MIN_ROWS rows on): configuration 0 on 2-CTA clusters
 * sharing the B block by multicast (cfg::CL): vertically adjacent tiles, each CTA loading its A block and half of B
 * (the weight's 128 rows of the forward's tile; two of the dgrad's four 64-column boxes). */
typedef cfg<128, 256, 4, 0, 0, EPI_BF16_TMA, 0, 1, 0, 0, 0, 1, L2_NONE, 2> fwd_c11;
typedef cfg<128, 256, 4, 0, 1, EPI_F32_TMA, 0, 1, 0, 0, 0, 1, L2_NONE, 2> dgrad_c11;
/* Configuration 12: 192 x 192 tiles, three consumer warpgroups (each 64 rows of the tile, as in every configuration),
 * 3 stages (a 4th does not fit beside the bulk stores' boxes), bulk stores, persistent.  Per output element it reads
 * (192 + 192) / (192 x 192) of an operand row from shared memory per step, against (128 + 256) / (128 x 256) in 0: 11%
 * less shared-memory traffic per product. */
typedef cfg<192, 192, 3, 0, 0, EPI_BF16_TMA, 0> fwd_c12;
typedef cfg<192, 192, 3, 0, 1, EPI_F32_TMA, 0> dgrad_c12;

/* out[p, q] = part[0][p, q] + part[1][p, q] + ... in ascending t (the FOLD configuration's running total:
 * tot = partial 0, then tot = tot + partial t); part[t] is [P, Q] at part + t * stride.  The partials are loaded
 * SPLIT_BATCH at a time into registers before they are added (so that a thread has that many loads in flight
 * instead of one), the first batch from partial 0 on, the last one's loads past nsplit not issued, and added one by
 * one in ascending t: the first copied, the others added, the same additions in the same order.  Each partial is
 * read once (streaming loads).  From d4fc25b until this form the batches started at partial 1 and ran only while a
 * whole batch was left, so that with the 1024-row fold tile (32 partials at 32,256 reduction rows) no batch ran and
 * the loads went out one at a time.  nsplit >= 1 at the one call (dgrad_folded: N >= 8 K >= 8 rows, M > 0).
 * The pass is launched as a programmatic dependent of the split (which writes the partials evict-last, cfg::L2), so
 * it waits for the split's completion first; once a warp has added its 32 elements of every partial and stored
 * their totals, it discards those partials' lines from L2 (discard.global.L2: a partial is never read again and its
 * lines need not be written back to memory).  Where a warp's 32 elements are not whole 128-byte lines of every
 * partial (P * Q not a multiple of 32, or part not 128-byte aligned) nothing is discarded. */
constexpr int SPLIT_BATCH = 32;
__global__ void split_fold_kernel(int64_t P, int64_t Q, int64_t nsplit, const float *part, int64_t stride, float *out,
                                  int64_t ldc) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* the split complete and its partials visible */
    /* whole lines: then blockDim (128) and the grid stride keep each warp's 32 elements one line of each partial,
     * and all 32 lanes of a warp run the same iterations */
    const bool lines = stride == P * Q && stride % 32 == 0 && ((uintptr_t)part & 127) == 0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < P * Q; e += (int64_t)gridDim.x * blockDim.x) {
        const float *src = part + e;
        float tot = 0.0f;
        for (int64_t t = 0; t < nsplit; t += SPLIT_BATCH) {
            float b[SPLIT_BATCH];
#pragma unroll
            for (int i = 0; i < SPLIT_BATCH; i++)
                b[i] = t + i < nsplit ? __ldcs(src + (t + i) * stride) : 0.0f;
#pragma unroll
            for (int i = 0; i < SPLIT_BATCH; i++)
                if (t + i < nsplit) tot = t + i == 0 ? b[i] : tot + b[i];
        }
        out[(e / Q) * ldc + e % Q] = tot;
        if (lines) {
            /* every lane's total stored, so every lane's loads of these lines have returned */
            __syncwarp();
            const int64_t e0 = e - (threadIdx.x & 31);
            for (int64_t t = threadIdx.x & 31; t < nsplit; t += 32)
                asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(part + e0 + t * stride) : "memory");
        }
    }
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn = NULL;

static h3s_status get_encode(const char *op) {
    if (encode_fn) return H3S_OK;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
        return h3s_fail(H3S_ERR_DEVICE, "%s: the CUDA driver has no cuTensorMapEncodeTiled (%s)", op,
                        e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
    encode_fn = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    return H3S_OK;
}

/* The tensor maps already encoded, by the arguments of their encoding.  A CUtensorMap is a pure function of those
 * arguments (base address, element type, sizes, row stride, box; the swizzle, promotion and fill are constants here):
 * a map kept from an earlier call with the same arguments is the map the encode would write now, whatever the memory
 * at that address holds by then.  So a kept map changes no copy and no value; it saves the driver call on the host
 * before each launch, which in a lone call the device waits for.  Direct-mapped by a hash of the arguments, one lock
 * for every host thread; a collision or a miss only means an encode.  The attention kernels' maps (h3c_tma_map_bf16)
 * go through the same table.  h3c_gemm_map_cache(0) encodes every map. */
namespace mapc {
struct key {
    const void *base;
    int64_t rows, cols, ld;
    int box_cols, box_rows, dt;
};
struct slot {
    key k;
    int used;
    CUtensorMap m;
};
constexpr int SLOTS = 1024;
static slot g_slots[SLOTS];
static std::mutex g_lock;
static int g_on = 1;
static uint64_t g_hits = 0, g_misses = 0;
static bool same(const key &a, const key &b) {
    return a.base == b.base && a.rows == b.rows && a.cols == b.cols && a.ld == b.ld && a.box_cols == b.box_cols &&
           a.box_rows == b.box_rows && a.dt == b.dt;
}
static int index(const key &k) {
    uint64_t h = (uint64_t)(uintptr_t)k.base;
    const uint64_t v[6] = {(uint64_t)k.rows,     (uint64_t)k.cols,     (uint64_t)k.ld,
                           (uint64_t)k.box_cols, (uint64_t)k.box_rows, (uint64_t)k.dt};
    for (int i = 0; i < 6; i++)
        h = (h ^ v[i]) * 0x100000001b3ull + (h >> 29);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (int)(h % SLOTS);
}
} /* namespace mapc */

/* 2-D tensor map (BF16, or F32 for an F32 output) over rows x cols (row stride ld elements), box box_cols x
 * box_rows, 128-byte swizzle, zeros outside the tensor (a bulk store clips there); a kept one when there is one
 * (mapc above). */
static h3s_status make_map(const char *op, CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int64_t ld,
                           int box_cols, int box_rows, CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16) {
    const mapc::key k = {base, rows, cols, ld, box_cols, box_rows, (int)dt};
    const int at = mapc::index(k);
    {
        std::lock_guard<std::mutex> hold(mapc::g_lock);
        if (mapc::g_on && mapc::g_slots[at].used && mapc::same(mapc::g_slots[at].k, k)) {
            *m = mapc::g_slots[at].m;
            mapc::g_hits++;
            return H3S_OK;
        }
    }
    H3S_TRY(get_encode(op));
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * (dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2)};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t es[2] = {1, 1};
    CUresult r =
        encode_fn(m, dt, 2, (void *)base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return h3s_fail(H3S_ERR_DEVICE, "%s: cuTensorMapEncodeTiled failed (%d) for a %lld x %lld operand", op, (int)r,
                        (long long)rows, (long long)cols);
    std::lock_guard<std::mutex> hold(mapc::g_lock);
    mapc::g_misses++;
    if (mapc::g_on) mapc::g_slots[at] = {k, 1, *m};
    return H3S_OK;
}

/* A(p, r): K-major a[p * lda + r] (rows P, cols R) or MN-major a[r * lda + p] (rows R, cols P);
 * B(q, r) likewise. */
template <class C>
static h3s_status launch(const char *op, int64_t P, int64_t Q, int64_t R, const void *a, int64_t lda, const void *b,
                         int64_t ldb, const void *bias, void *out, int64_t ldc, int64_t nsplit = 0,
                         int64_t split_stride = 0) {
    if (nsplit > 0 && (C::EPI != EPI_F32 || C::FOLD || C::CL > 1))
        return h3s_fail(H3S_ERR_INVALID, "%s: split mode needs an F32 configuration without the fold or clusters", op);
    if (P <= 0 || Q <= 0) return H3S_OK;
    if (P > INT32_MAX - 256 || Q > INT32_MAX - 256 || R > INT32_MAX - 256)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: GEMM dimension beyond 2^31 (%lld x %lld x %lld)", op, (long long)P,
                        (long long)Q, (long long)R);
    CUtensorMap ma, mb;
    /* a short A (P < 64 rows, e.g. one request's few timestep rows): copy only its rows, to a multiple of 8 */
    const int a_rows = !C::AMN && C::BM == 64 && P < 64 ? (int)((P + 7) / 8 * 8) : C::BM;
    if (C::AMN)
        H3S_TRY(make_map(op, &ma, a, R, P, lda, 64, 64));
    else
        H3S_TRY(make_map(op, &ma, a, P, R, lda, 64, a_rows));
    if (C::BMN)
        H3S_TRY(make_map(op, &mb, b, R, Q, ldb, 64, 64));
    else /* with clusters, each CTA copies its part of the B block (BN / CL rows) */
        H3S_TRY(make_map(op, &mb, b, Q, R, ldb, 64, C::BN / C::CL));
    CUtensorMap mc = ma;        /* the output's map: read only by the bulk-store epilogue */
    if constexpr (C::TMA_EPI) { /* out is [P][Q], or [Q][P] transposed: boxes of 64 (TRANS_QB) rows by 128 bytes */
        const int f32 = C::EPI == EPI_F32_TMA;
        H3S_TRY(make_map(op, &mc, out, C::TRANS ? Q : P, C::TRANS ? P : Q, ldc, f32 ? 32 : 64,
                         C::TRANS ? C::TRANS_QB : 64,
                         f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16));
    }
    static int attr_set = 0; /* one per configuration */
    if (!attr_set) {
        const void *fn = (const void *)wg_gemm<C>;
        cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        if (e != cudaSuccess)
            return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
        attr_set = 1;
    }
    args g;
    g.P = P, g.Q = Q, g.R = R;
    g.bias = (const uint16_t *)bias;
    g.c = out, g.ldc = ldc;
    g.tiles_p = (P + C::BM - 1) / C::BM, g.tiles_q = (Q + C::BN - 1) / C::BN;
    g.nsplit = nsplit, g.split_stride = split_stride;
    g.a_rows = C::AMN ? C::BM : a_rows;
    g.group = g_raster_group, g.hint_a = C::L2 ? 0 : g_hint_a, g.hint_b = C::L2 ? 0 : g_hint_b;
    const int64_t tiles = g.tiles_p * g.tiles_q * (nsplit > 0 ? nsplit : 1);
    if (tiles > INT32_MAX)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: GEMM of %lld x %lld outputs exceeds the grid limits", op,
                        (long long)P, (long long)Q);
    /* The bulk-store configurations and a short reduction (at most 32 blocks of 64, e.g. wgrad at
     * M <= 2048) run on a persistent grid, at most as many CTAs as fit on the device at once, so
     * that a tile's epilogue overlaps the next tile's loads (and, with bulk stores, its MMAs); the
     * others' long reductions run one CTA per tile, whose waves start in step and share the
     * operand panels in L2 (measured: a persistent grid loses that at long reductions when the
     * epilogue does not overlap).  The tile -> CTA mapping changes no result. */
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
            return h3s_fail(H3S_ERR_DEVICE, "%s: cannot read the multiprocessor count", op);
    }
    const int64_t slots = (int64_t)sms * C::MINB;
    const int64_t nk = nsplit > 0 ? SPLIT_BLOCKS : (R + BK - 1) / BK; /* reduction blocks per work item */
    const int64_t grid = (C::PERSIST || nk <= SHORT_BLOCKS) && slots < tiles ? slots : tiles;
    if constexpr (C::CL > 1) {
        /* clusters of CL CTAs on a persistent grid: as many clusters as fit on the device at once, each walking
         * its pairs of tiles in order (which cluster runs a pair changes no result) */
        const int64_t pairs = (g.tiles_p + C::CL - 1) / C::CL * g.tiles_q;
        cudaLaunchConfig_t lc = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = C::CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
        lc.blockDim = dim3(C::THREADS), lc.dynamicSmemBytes = C::SMEM, lc.stream = H3K_STREAM;
        lc.attrs = at, lc.numAttrs = 1;
        static int fit = 0; /* clusters resident at once, per configuration */
        if (!fit) {
            lc.gridDim = dim3((unsigned)(C::CL * (sms / C::CL)));
            const cudaError_t e = cudaOccupancyMaxActiveClusters(&fit, (const void *)wg_gemm<C>, &lc);
            if (e != cudaSuccess || fit <= 0) {
                fit = 0;
                return h3s_fail(H3S_ERR_DEVICE, "%s: no cluster of %d CTAs fits on the device (%s)", op, C::CL,
                                e != cudaSuccess ? cudaGetErrorString(e) : "0 clusters");
            }
        }
        lc.gridDim = dim3((unsigned)(C::CL * (pairs < fit ? pairs : fit)));
        const cudaError_t e = cudaLaunchKernelEx(&lc, wg_gemm<C>, ma, mb, mc, g);
        if (e != cudaSuccess) return h3s_fail(H3S_ERR_DEVICE, "%s: cluster launch: %s", op, cudaGetErrorString(e));
        return h3c_launch_check(op);
    }
    wg_gemm<C><<<(unsigned)grid, C::THREADS, C::SMEM, H3K_STREAM>>>(ma, mb, mc, g);
    return h3c_launch_check(op);
}

/* The band (forward/dgrad configurations 8 and 9).  When the 128-row tiles of a configuration fill the last of their
 * waves of BAND_SMS (the build's multiprocessor count, as the dispatcher's waves) only in part, the rows [0, p1) that
 * make whole waves run in that configuration and the rows [p1, P) after them in a configuration of narrower tiles
 * (more of them, so that they spread over the device), a second launch on the same stream.  Each output element is
 * computed by one of the two, and every configuration gives an element the same chain (the k16 steps of its whole
 * reduction in ascending r from +0), so the band gives the bits of either alone; test_gpu_gemm runs it forced on the
 * same rows as the others.  Returns p1, a multiple of 128, or 0 when one launch covers the output (it fills whole
 * waves, or less than one). */
constexpr int64_t BAND_SMS = 132;
static int64_t band_rows(int64_t P, int64_t Q, int64_t BN) {
    const int64_t tp = (P + 127) / 128, tq = (Q + BN - 1) / BN, T = tp * tq;
    if (T <= BAND_SMS || T % BAND_SMS == 0) return 0;
    const int64_t pm = T / BAND_SMS * BAND_SMS / tq; /* whole tile-rows in the whole waves */
    return pm > 0 && pm < tp ? pm * 128 : 0;
}

/* The short band (configuration 10): configuration 0's whole waves as in band_rows, where the rows left are at most
 * BAND_SHORT_ROWS (64), the small-M configurations' range; 0 otherwise. */
constexpr int64_t BAND_SHORT_ROWS = 64;
static int64_t band_short_rows(int64_t P, int64_t Q) {
    const int64_t p1 = band_rows(P, Q, 256);
    return p1 > 0 && P - p1 <= BAND_SHORT_ROWS ? p1 : 0;
}

/* The band of configurations CM (whole waves) and CT (the rest), the arguments as launch's.  The second launch takes
 * A's rows from p1 on (K-major A: p1 rows further; MN-major A: p1 columns), the output's rows from p1 (transposed:
 * its columns, and the bias of p from p1); B and the reduction are the same. */
template <class CM, class CT>
static h3s_status launch_band(const char *op, int64_t P, int64_t Q, int64_t R, const void *a, int64_t lda,
                              const void *b, int64_t ldb, const void *bias, void *out, int64_t ldc) {
    static_assert(CM::BM == 128 && CT::BM == 128 && CM::AMN == CT::AMN && CM::BMN == CT::BMN &&
                      CM::TRANS == CT::TRANS && CM::EPI == CT::EPI && !CM::FOLD && !CT::FOLD,
                  "a band joins two configurations of the same operands, output and orientation");
    const int64_t p1 = band_rows(P, Q, CM::BN);
    if (p1 == 0) return launch<CM>(op, P, Q, R, a, lda, b, ldb, bias, out, ldc);
    H3S_TRY(launch<CM>(op, p1, Q, R, a, lda, b, ldb, bias, out, ldc));
    const size_t eo = CM::EPI == EPI_F32 || CM::EPI == EPI_F32_TMA ? 4 : 2; /* output element bytes */
    const void *a1 = (const uint8_t *)a + (CM::AMN ? (size_t)p1 * 2 : (size_t)p1 * (size_t)lda * 2);
    void *o1 = (uint8_t *)out + (CM::TRANS ? (size_t)p1 * eo : (size_t)p1 * (size_t)ldc * eo);
    const void *bias1 = CM::TRANS && bias ? (const void *)((const uint16_t *)bias + p1) : bias;
    return launch<CT>(op, P - p1, Q, R, a1, lda, b, ldb, bias1, o1, ldc);
}

} /* namespace wg */

h3s_status h3c_tma_map_bf16(const char *op, CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int64_t ld,
                            int box_cols, int box_rows) {
    return wg::make_map(op, m, base, rows, cols, ld, box_cols, box_rows);
}

/* Configuration override for the invariance test: -1 = the dispatcher's choice. */
static int g_force_config = -1;

/* The estimated time of one wave of 128 x 160 (128 x 232) transposed tiles against one of 128 x 256 tiles: the area
 * ratio is 0.625 (0.906) */
#define T160_COST 0.68
#define T232_COST 0.93

extern "C" int h3c_gemm_config_count(void) { return 13; }

extern "C" int64_t h3c_gemm_band_rows(int config, int64_t P, int64_t Q) {
    return config == 8    ? wg::band_rows(P, Q, 256)
           : config == 9  ? wg::band_rows(P, Q, 232)
           : config == 10 ? wg::band_short_rows(P, Q)
                          : 0;
}

/* The wgrad's override: -1 = the dispatcher (F32 dw: configuration 5 at M <= 256, 7 or 9 above; BF16 dw: 1 at
 * M <= 256, 8 above), 0 = the fold on 128 x 192 tiles, 1 = one tile, 5 = 1 with bulk stores on a persistent grid,
 * 7 = 0 with the overlapped fold (OVL) and bulk stores on a persistent grid, 8 = 0 with the overlapped fold, 9 = 7
 * transposed (dw^T = x^T dy; F32 dw only, refused for BF16 dw).  Numbers 2, 3, 4 and 6 named fold configurations that
 * 7 and 8 superseded (128 x 256 tiles with half of the total in shared memory, the column-halved fold, and 0 with bulk
 * stores on one CTA per tile or a persistent grid); they were removed after commit d8880cf and are refused, so that
 * the other numbers keep their meaning in the evidence. */
static int g_force_wgrad = -1;

extern "C" int h3c_gemm_wgrad_config_count(void) { return 10; }

extern "C" int h3c_gemm_wgrad_config_removed(int config) {
    return config == 2 || config == 3 || config == 4 || config == 6;
}

extern "C" h3s_status h3c_gemm_force_wgrad(int config) {
    if (config < -1 || config >= h3c_gemm_wgrad_config_count())
        return h3s_fail(H3S_ERR_INVALID, "gemm: no wgrad configuration %d (0..%d, or -1)", config,
                        h3c_gemm_wgrad_config_count() - 1);
    if (h3c_gemm_wgrad_config_removed(config))
        return h3s_fail(H3S_ERR_INVALID,
                        "gemm: wgrad configuration %d was removed (superseded by the overlapped folds, 7 and 8)",
                        config);
    g_force_wgrad = config;
    return H3S_OK;
}

extern "C" int h3c_gemm_map_cache(int on) {
    std::lock_guard<std::mutex> hold(wg::mapc::g_lock);
    const int was = wg::mapc::g_on;
    if (on == 0 || on == 1) {
        wg::mapc::g_on = on;
        if (!on)
            for (int i = 0; i < wg::mapc::SLOTS; i++)
                wg::mapc::g_slots[i].used = 0;
    }
    return was;
}

extern "C" void h3c_gemm_map_cache_counts(uint64_t *hits, uint64_t *misses) {
    std::lock_guard<std::mutex> hold(wg::mapc::g_lock);
    if (hits) *hits = wg::mapc::g_hits;
    if (misses) *misses = wg::mapc::g_misses;
}

extern "C" h3s_status h3c_gemm_tensor_map(const void *base, int64_t rows, int64_t cols, int64_t ld, int box_cols,
                                          int box_rows, int f32, void *map) {
    if (!base || !map || rows <= 0 || cols <= 0 || ld < cols || box_cols <= 0 || box_rows <= 0)
        return h3s_fail(H3S_ERR_INVALID, "gemm tensor map: bad arguments");
    return wg::make_map("gemm tensor map", (CUtensorMap *)map, base, rows, cols, ld, box_cols, box_rows,
                        f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
}

extern "C" h3s_status h3c_gemm_raster(int group, int hint_a, int hint_b) {
    if (group < 1 || group > 4096 || hint_a < 0 || hint_a > 2 || hint_b < 0 || hint_b > 2)
        return h3s_fail(H3S_ERR_INVALID,
                        "gemm: raster group %d (1..4096) and L2 hints %d, %d (0 none, 1 evict-first, 2 evict-last)",
                        group, hint_a, hint_b);
    wg::g_raster_group = group, wg::g_hint_a = hint_a, wg::g_hint_b = hint_b;
    return H3S_OK;
}

extern "C" h3s_status h3c_gemm_force_config(int config) {
    if (config < -1 || config >= h3c_gemm_config_count())
        return h3s_fail(H3S_ERR_INVALID, "gemm: no configuration %d (0..%d, or -1)", config,
                        h3c_gemm_config_count() - 1);
    g_force_config = config;
    return H3S_OK;
}

/* The Hopper kernels take a shape when every operand row is a whole number of 16-byte chunks
 * (the bulk copy's stride rule): K and N multiples of 8.  Chosen by (K, N) alone. */
extern "C" int h3c_gemm_wgmma_shape(int64_t N, int64_t K) { return K % 8 == 0 && N % 8 == 0 && K > 0 && N > 0; }

static h3s_status need_aligned(const char *op, const char *name, const void *p) {
    if (p && !aligned16(p))
        return h3s_fail(H3S_ERR_UNSUPPORTED,
                        "%s: %s is not 16-byte aligned; the strict tensor-core GEMM needs aligned operands", op, name);
    return H3S_OK;
}

/* Forward and dgrad configurations: 0 = 128 x 256 tiles, 1 = 128 x 192 (both with the bulk-store
 * epilogue on a persistent grid), 2 = 64 x 64 with two CTAs per multiprocessor, for M <= 64,
 * 3 = 64 x 64 with a deep ring, for M <= 64 when the output has fewer than 132 column tiles; 4 - 7 (below) transposed;
 * 8 and 9 the bands (wg::launch_band) of 0 then 1 and of 5 then 4; 10 the short band, 0's whole waves then the
 * small-M configuration of the rows left (at most 64); 11 0's tiles on 2-CTA clusters sharing B by multicast, taken
 * instead of 0 from CLUSTER_MIN_ROWS rows on; 12 192 x 192 tiles, taken where their estimate (C192_COST) is under
 * BAND_GAIN times the choice's.
 * Between 0 and 1 the choice counts waves of 132 tiles (a constant of the build, the H100/H200 SXM
 * multiprocessor count, never read from the device) and takes the one with less estimated time, a
 * 128 x 192 tile costed at 0.77 of a 128 x 256 one (measured with bulk stores: 0.72-0.78 per round,
 * close to the area ratio 0.75; docs/evidence/gpu/development/gemm_epilogue.md).  The choice depends on (M, Q) only,
 * and every configuration gives the same bits (tests/gpu/test_gpu_gemm.c). */
static int64_t waves(int64_t tiles) { return (tiles + wg::BAND_SMS - 1) / wg::BAND_SMS; }
/* the tiles of a P x Q output in BM x BN tiles */
static int64_t tiles(int64_t P, int64_t Q, int64_t BM, int64_t BN) { return ((P + BM - 1) / BM) * ((Q + BN - 1) / BN); }

/* The estimated time of a band (wg::launch_band): the whole waves of the first configuration (BN_M-column tiles, a
 * wave costed at cost_m) and the waves of the second's (BN_T, cost_t) on the rows left; a large number when no band
 * applies. */
static double band_cost(int64_t P, int64_t Q, int64_t bn_m, double cost_m, int64_t bn_t, double cost_t) {
    const int64_t p1 = wg::band_rows(P, Q, bn_m);
    if (p1 == 0) return 1e30;
    return cost_m * (double)waves(tiles(p1, Q, 128, bn_m)) + cost_t * (double)waves(tiles(P - p1, Q, 128, bn_t));
}
#define BAND_GAIN 0.97
/* The estimated time of the short band's second launch (at most 64 rows, a small-M configuration, which streams the
 * Q x R weight once) against one wave of 128 x 256 tiles at the same reduction length R, per output column: the weight
 * read at about 3 TB/s (Q R 2 bytes) against 132 tiles of 128 x 256 x R at about 700 TFLOP/s gives 5.5e-5 per column;
 * the M = 64 rows of bench_gemm.json (0.028 ms at 5376 -> 7168 against a wave of 0.058 ms) give 6.5e-5, taken here. */
#define BAND_SHORT_COST_PER_COLUMN 6.5e-5
/* From this many rows on, the dispatcher runs configuration 0's tiles as configuration 11 (where it does not take 12,
 * below; since 3269725 12 runs most rows at M = 33396). At M = 33396 (calls 65-67):
 * 5376 -> 28672 forward 15.90-16.04 ms against 16.45-16.50 for 0, 5376 -> 7168 forward and dgrad 3.77-3.78 against
 * 3.87-3.88, the 5376 -> 28672 dgrad 15.30-15.47 against 15.62-15.75, the other rows measured within 0.6% either way;
 * at M = 8349 11 was 0.6-3.4% slower on the five rows measured. */
#define CLUSTER_MIN_ROWS 16384
/* The estimated time of one wave of configuration 12's 192 x 192 tiles against one of 128 x 256 tiles (the area ratio
 * is 1.125): 1.08, from call 71 (bench_gemm's whole table forced to 12 against the dispatcher's choice, twice each;
 * docs/evidence/gpu/development/tile192.md), where 1.06 would also take rows that ran no faster in 12 and 1.09 would
 * leave rows that did.
 * With BAND_GAIN it moves to 12 17 of the table's 45 rows at M >= 925 that this dispatcher serves (the forward, and
 * the dgrad of the four shapes that do not fold); in that call 16 of them ran 0.8-6.2% faster in 12, one 2.0%
 * slower. */
#define C192_COST 1.08

/* The small-M configurations: 6 or 7 at M <= 16, 3 or 2 at M <= 64, by whether the output has fewer 64-column tiles
 * than multiprocessors; -1 above 64 rows. */
static int small_config(int64_t M, int64_t Q) {
    const int narrow = (Q + 63) / 64 < 132;
    if (M <= 16) return narrow ? 6 : 7;
    if (M <= 64) return narrow ? 3 : 2;
    return -1;
}

/* The dispatcher's own choice for an M x Q output (forward: Q = N; dgrad: Q = K); pick_config below honours the
 * test override first. */
static int dispatch_config(int64_t M, int64_t Q) {
    if (M <= 64) return small_config(M, Q);
    const double c0 = (double)waves(tiles(M, Q, 128, 256)), c1 = 0.77 * (double)waves(tiles(M, Q, 128, 192));
    /* configuration 4, transposed: Q along 128-row tiles, M along 160 columns */
    const double c4 = T160_COST * (double)waves(tiles(Q, M, 128, 160));
    const double c5 = T232_COST * (double)waves(tiles(Q, M, 128, 232));
    int best = c1 < c0 ? 1 : 0;
    if (c4 < c0 && c4 < c1) best = 4;
    if (c5 < c0 && c5 < c1 && c5 < c4) best = 5;
    const double cb = best == 0 ? c0 : best == 1 ? c1 : best == 4 ? c4 : c5;
    /* the bands: 8 = 0's whole waves, then 1's tiles; 9 = 5's whole waves, then 4's (transposed); taken where their
     * estimate is under BAND_GAIN times the best single configuration's (a second launch costs its own start) */
    const double c8 = band_cost(M, Q, 256, 1.0, 192, 0.77), c9 = band_cost(Q, M, 232, T232_COST, 160, T160_COST);
    int pick = best;
    double cp = cb;
    if (c9 < c8 && c9 < BAND_GAIN * cb) {
        pick = 9;
        cp = c9;
    } else if (c8 < BAND_GAIN * cb) {
        pick = 8;
        cp = c8;
    }
    /* the short band: 0's whole waves, then at most 64 rows in a small-M configuration; the same rule against the
     * choice so far */
    const int64_t p1 = wg::band_short_rows(M, Q);
    if (p1 > 0 && (double)waves(tiles(p1, Q, 128, 256)) + BAND_SHORT_COST_PER_COLUMN * (double)Q < BAND_GAIN * cp)
        return 10;
    /* configuration 12's 192 x 192 tiles, where their estimate is under BAND_GAIN times the choice so far */
    if (C192_COST * (double)waves(tiles(M, Q, 192, 192)) < BAND_GAIN * cp) return 12;
    /* the long rows: configuration 0's tiles on 2-CTA clusters sharing B (11), which reads B through L2 half as often;
     * at the 700 W cap that keeps the clock up (docs/evidence/gpu/development/raster.md) */
    if (pick == 0 && M >= CLUSTER_MIN_ROWS) return 11;
    return pick;
}

static int pick_config(int64_t M, int64_t Q) { return g_force_config >= 0 ? g_force_config : dispatch_config(M, Q); }

extern "C" int h3c_gemm_dispatch_config(int64_t M, int64_t Q) { return M > 0 && Q > 0 ? dispatch_config(M, Q) : -1; }

/* The short band (configuration 10) of an M x Q output whose rows run(c, r0, m) computes in configuration c
 * (rows [r0, r0 + m)): the rows [0, p1) of configuration 0's whole waves in 0, the rest (at most 64) in their small-M
 * configuration; all M rows in 0 where no short band applies. */
template <class F> static h3s_status short_band(int64_t M, int64_t Q, F run) {
    const int64_t p1 = wg::band_short_rows(M, Q);
    if (p1 == 0) return run(0, 0, M);
    H3S_TRY(run(0, 0, p1));
    return run(small_config(M - p1, Q), p1, M - p1);
}

/* The forward in configuration c (aligned operands, a shape the Hopper kernels take). */
static h3s_status forward_config(int c, const char *op, int64_t M, int64_t N, int64_t K, const void *x, const void *w,
                                 const void *b, void *y) {
    switch (c) {
    case 0: return wg::launch<wg::fwd_c0>(op, M, N, K, x, K, w, K, b, y, N);
    case 1: return wg::launch<wg::fwd_c1>(op, M, N, K, x, K, w, K, b, y, N);
    case 2: return wg::launch<wg::fwd_c2>(op, M, N, K, x, K, w, K, b, y, N);
    /* y^T[n, m] = sum_k w[n, k] x[m, k]: P = N, Q = M, both K-major; y[m * N + n] */
    case 4: return wg::launch<wg::fwd_t>(op, N, M, K, w, K, x, K, b, y, N);
    case 5: return wg::launch<wg::fwd_t232>(op, N, M, K, w, K, x, K, b, y, N);
    case 6: return wg::launch<wg::fwd_t16>(op, N, M, K, w, K, x, K, b, y, N);
    case 7: return wg::launch<wg::fwd_t16b>(op, N, M, K, w, K, x, K, b, y, N);
    case 8: return wg::launch_band<wg::fwd_c0, wg::fwd_c1>(op, M, N, K, x, K, w, K, b, y, N);
    case 9: return wg::launch_band<wg::fwd_t232, wg::fwd_t>(op, N, M, K, w, K, x, K, b, y, N);
    case 10:
        return short_band(M, N, [&](int cr, int64_t r0, int64_t m) {
            return forward_config(cr, op, m, N, K, (const uint16_t *)x + r0 * K, w, b, (uint16_t *)y + r0 * N);
        });
    case 3: return wg::launch<wg::fwd_c3>(op, M, N, K, x, K, w, K, b, y, N);
    case 11: return wg::launch<wg::fwd_c11>(op, M, N, K, x, K, w, K, b, y, N);
    case 12: return wg::launch<wg::fwd_c12>(op, M, N, K, x, K, w, K, b, y, N);
    default: return h3s_fail(H3S_ERR_INVALID, "%s: no forward configuration %d", op, c);
    }
}

extern "C" h3s_status h3c_gemm_bf16_forward(const char *op, int64_t M, int64_t N, int64_t K, const void *x,
                                            const void *w, const void *b, void *y) {
    if (!h3c_gemm_wgmma_shape(N, K)) return mma_gemm_forward(op, M, N, K, x, w, b, y);
    H3S_TRY(need_aligned(op, "x", x));
    H3S_TRY(need_aligned(op, "w", w));
    H3S_TRY(need_aligned(op, "y", y));
    return forward_config(pick_config(M, N), op, M, N, K, x, w, b, y);
}

static h3s_status round_to_bf16(const char *op, int64_t n, const float *src, uint16_t *dst) {
    if (n <= 0) return H3S_OK;
    if (h3c_elem_reference())
        wg::round_bf16_ref_kernel<<<h3k_blocks(n, 256), 256, 0, H3K_STREAM>>>(n, src, dst);
    else if (h3k_vec_aligned(src, 8, 4) && h3k_vec_aligned(dst, 8, 2))
        wg::round_bf16_vec_kernel<8><<<h3k_blocks(n / 8 > 0 ? n / 8 : 1, 256), 256, 0, H3K_STREAM>>>(n, src, dst);
    else
        wg::round_bf16_vec_kernel<1><<<h3k_blocks(n, 256), 256, 0, H3K_STREAM>>>(n, src, dst);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_round_bf16(const char *op, int64_t n, const float *src, void *dst) {
    return round_to_bf16(op, n, src, (uint16_t *)dst);
}

/* Self-test of h3k_f2bf2 (the hardware pack of the GEMM epilogues) against h3k_f2bf: the F32 bit patterns
 * u = i * step (mod 2^32) for i < 2^32 / step (step 1: every pattern) as the low value, with u ^ 0x80000001 as the
 * high one; counts the pairs whose packed bits differ and keeps the smallest such u (a test counter: the order of
 * the counts changes nothing). */
__global__ void pack_selftest_kernel(uint32_t step, unsigned long long *count, unsigned int *first) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x, n = (1ull << 32) / step;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint32_t u = (uint32_t)(i * step), v = u ^ 0x80000001u;
        const float lo = __uint_as_float(u), hi = __uint_as_float(v);
        const uint32_t want = (uint32_t)h3k_f2bf(lo) | ((uint32_t)h3k_f2bf(hi) << 16);
        if (h3k_f2bf2(lo, hi) != want) {
            atomicAdd(count, 1ull);
            atomicMin(first, u);
        }
    }
}

extern "C" h3s_status h3c_bf16_pack_selftest(uint32_t step, uint64_t *mismatches, uint32_t *first) {
    static const char op[] = "bf16_pack_selftest";
    H3S_TRY(h3c_init(op));
    if (step == 0 || step % 2 == 0) return h3s_fail(H3S_ERR_INVALID, "%s: step %u must be odd", op, step);
    void *ws = NULL;
    H3S_TRY(h3c_ws_alloc(op, 16, &ws));
    h3s_status st = h3c_memset(op, ws, 8);
    if (st == H3S_OK && cudaMemsetAsync((uint8_t *)ws + 8, 0xff, 4, H3K_STREAM) != cudaSuccess)
        st = h3s_fail(H3S_ERR_DEVICE, "%s: cudaMemsetAsync failed", op);
    if (st == H3S_OK) {
        pack_selftest_kernel<<<1024, 256, 0, H3K_STREAM>>>(step, (unsigned long long *)ws,
                                                           (unsigned int *)((uint8_t *)ws + 8));
        st = h3c_launch_check(op);
    }
    unsigned long long c = 0;
    unsigned int f = 0;
    if (st == H3S_OK && (cudaMemcpyAsync(&c, ws, 8, cudaMemcpyDeviceToHost, H3K_STREAM) != cudaSuccess ||
                         cudaMemcpyAsync(&f, (uint8_t *)ws + 8, 4, cudaMemcpyDeviceToHost, H3K_STREAM) != cudaSuccess ||
                         cudaStreamSynchronize(H3K_STREAM) != cudaSuccess))
        st = h3s_fail(H3S_ERR_DEVICE, "%s: copying the counts back failed", op);
    h3c_ws_free(ws);
    *mismatches = c;
    *first = f;
    return st;
}

/* The dgrad of this shape folds its reduction (chosen by (K, N) alone): N >= 8 K, a reduction at least eight
 * times longer than the output row (the AdaLN projection: 96,768 into 2,688). */
extern "C" int h3c_gemm_dgrad_folds(int64_t N, int64_t K) { return N >= 8 * K; }

/* The folded dgrad: at M <= H3C_DGRAD_SPLIT_M (configuration 3 or the dispatcher's choice) every fold tile of
 * H3C_DGRAD_FOLD_TILE rows is a work item (dgrad_c2 in split mode) and split_fold_kernel adds the partials; otherwise
 * (and forced 0, 2 or 8 to 12) dgrad_fold_ovl adds them in registers with the overlapped fold's schedule, measured
 * 1-9% faster at M = 925 to 8349 (docs/evidence/gpu/development/wgrad_overlap.md); forced 1, dgrad_fold, the same in
 * the plain schedule.  The same bits every way. */
static h3s_status dgrad_folded(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb, const void *w,
                               float *dx) {
    /* past the split, the transposed register fold (128 x 160 tiles along M) where it needs fewer waves, a 128 x 160
     * tile costed at 0.83 of a 128 x 192 one (the area ratio) */
    const int trans = 0.83 * (double)waves(tiles(K, M, 128, 160)) < (double)waves(tiles(M, K, 128, 192));
    const int c = g_force_config >= 0 ? g_force_config : M <= 16 ? 7 : M <= H3C_DGRAD_SPLIT_M ? 3 : trans ? 4 : 0;
    const int split = M > 0 && M <= H3C_DGRAD_SPLIT_M && (c == 3 || c == 6 || c == 7);
    if (c == 1) return wg::launch<wg::dgrad_fold>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    if (c == 4 || c == 5) /* the folded dgrad has one transposed configuration */
        return wg::launch<wg::dgrad_fold_ovl_t>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    if (!split) return wg::launch<wg::dgrad_fold_ovl>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    const int64_t nsplit = (N + H3C_DGRAD_FOLD_TILE - 1) / H3C_DGRAD_FOLD_TILE, stride = M * K;
    void *part = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)nsplit * (size_t)stride * sizeof(float), &part));
    /* the split's work items: 64 x 64 tiles (3), or 64 x 16 transposed ones (6, 7), whose partials land in the same
     * [M][K] layout (dx^T[k, m] at part[m * K + k]) */
    h3s_status st = c == 3 ? wg::launch<wg::dgrad_c2_split>(op, M, K, N, dyb, N, w, K, NULL, part, K, nsplit, stride)
                           : wg::launch<wg::dgrad_t16b_split>(op, K, M, N, w, K, dyb, N, NULL, part, K, nsplit, stride);
    if (st == H3S_OK) {
        /* a programmatic dependent of the split: scheduled while the split runs, it waits for its completion */
        cudaLaunchConfig_t lc = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        lc.gridDim = dim3((unsigned)h3k_blocks(stride, 128)), lc.blockDim = dim3(128), lc.dynamicSmemBytes = 0;
        lc.stream = H3K_STREAM, lc.attrs = at, lc.numAttrs = 1;
        const cudaError_t e =
            cudaLaunchKernelEx(&lc, wg::split_fold_kernel, M, K, nsplit, (const float *)part, stride, dx, (int64_t)K);
        st = e != cudaSuccess ? h3s_fail(H3S_ERR_DEVICE, "%s: folding pass launch: %s", op, cudaGetErrorString(e))
                              : h3c_launch_check(op);
    }
    h3c_ws_free(part);
    return st;
}

/* The dgrad of a shape that does not fold, in configuration c (aligned operands, a shape the Hopper kernels take). */
static h3s_status dgrad_config(int c, const char *op, int64_t M, int64_t N, int64_t K, const void *dyb, const void *w,
                               float *dx) {
    switch (c) {
    case 0: return wg::launch<wg::dgrad_c0>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    case 1: return wg::launch<wg::dgrad_c1>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    case 2: return wg::launch<wg::dgrad_c2>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    /* dx^T[k, m] = sum_n w[n, k] dy[m, n]: P = K, Q = M; A MN-major, B K-major; dx[m * K + k] */
    case 4: return wg::launch<wg::dgrad_t>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    case 5: return wg::launch<wg::dgrad_t232>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    case 6: return wg::launch<wg::dgrad_t16>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    case 7: return wg::launch<wg::dgrad_t16b>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    case 8: return wg::launch_band<wg::dgrad_c0, wg::dgrad_c1>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    case 9: return wg::launch_band<wg::dgrad_t232, wg::dgrad_t>(op, K, M, N, w, K, dyb, N, NULL, dx, K);
    case 10:
        return short_band(M, K, [&](int cr, int64_t r0, int64_t m) {
            return dgrad_config(cr, op, m, N, K, (const uint16_t *)dyb + r0 * N, w, dx + r0 * K);
        });
    case 3: return wg::launch<wg::dgrad_c3>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    case 11: return wg::launch<wg::dgrad_c11>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    case 12: return wg::launch<wg::dgrad_c12>(op, M, K, N, dyb, N, w, K, NULL, dx, K);
    default: return h3s_fail(H3S_ERR_INVALID, "%s: no dgrad configuration %d", op, c);
    }
}

extern "C" h3s_status h3c_gemm_bf16_dgrad_bf16(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb,
                                               const void *w, float *dx) {
    if (!h3c_gemm_wgmma_shape(N, K))
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: K = %lld, N = %lld: the BF16-operand dgrad needs multiples of 8", op,
                        (long long)K, (long long)N);
    /* dx[m, k] = sum_n dy[m, n] w[n, k]: P = M, Q = K, R = N; A K-major, B MN-major */
    if (h3c_gemm_dgrad_folds(N, K)) return dgrad_folded(op, M, N, K, dyb, w, dx);
    return dgrad_config(pick_config(M, K), op, M, N, K, dyb, w, dx);
}

/* dw[n, k] by configuration CF (F32 dw) or CB (BF16 dw): P = N, Q = K, R = M; A = dy (MN-major), B = x */
template <class CF, class CB>
static h3s_status launch_wgrad(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb, const void *x,
                               void *dw, int dw_bf16) {
    if (dw_bf16) return wg::launch<CB>(op, N, K, M, dyb, N, x, K, NULL, dw, K);
    return wg::launch<CF>(op, N, K, M, dyb, N, x, K, NULL, dw, K);
}

extern "C" h3s_status h3c_gemm_bf16_wgrad_bf16(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb,
                                               const void *x, void *dw, int dw_bf16) {
    if (!h3c_gemm_wgmma_shape(N, K))
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: K = %lld, N = %lld: the BF16-operand wgrad needs multiples of 8", op,
                        (long long)K, (long long)N);
    if (M <= 0) /* the empty fold: +0 (BF16 +0 is also all-zero bytes) */
        return h3c_memset(op, dw, (size_t)N * (size_t)K * (dw_bf16 ? 2 : sizeof(float)));
    /* dw[n, k] = fold over 256-row tiles of sum_m dy[m, n] x[m, k]: P = N, Q = K, R = M */
    const int one = g_force_wgrad >= 0 ? g_force_wgrad == 1 || g_force_wgrad == 5 : M <= H3S_FOLD_TILE;
    if (one && M > H3S_FOLD_TILE)
        return h3s_fail(H3S_ERR_INVALID, "%s: the one-tile wgrad takes at most %d rows, not %lld", op, H3S_FOLD_TILE,
                        (long long)M);
    /* with BF16 dw the bulk stores were slower (configuration 5 against 1 by 22-31% at M = 12 and 64, configuration 4
     * against 0 by up to 8% at M = 925 and 2048: docs/evidence/gpu/development/wgrad_tma.md), with F32 dw faster */
    if (one && (g_force_wgrad == 1 || (g_force_wgrad < 0 && dw_bf16)))
        return launch_wgrad<wg::wgrad_one, wg::wgrad_one_bf16>(op, M, N, K, dyb, x, dw, dw_bf16);
    if (one) /* configuration 5, the dispatcher's: bulk stores on a persistent grid */
        return launch_wgrad<wg::wgrad_one_tma, wg::wgrad_one_bf16_tma>(op, M, N, K, dyb, x, dw, dw_bf16);
    /* Past one fold tile the overlapped fold (configurations 7 and 8: the register fold's chains and additions with
     * the tensor cores fed while a warpgroup adds its partial), measured faster than every other fold configuration
     * (the removed 2, 3, 4 and 6 among them) at every H3 shape and M from 925 to 33396: F32 dw 7 against 4 by 2-6% at
     * M <= 2048, against 6 by 2-11% at
     * M = 4253 and 8349 and against the wide fold by 10-19% at 33396; BF16 dw 8 against 0 by 6-9%
     * (docs/evidence/gpu/development/wgrad_overlap.md) */
    /* F32 dw: transposed (configuration 9) where its grid of 128 x 192 tiles has fewer waves, a rule of (N, K)
     * alone (7168 -> 5376: 1568 tiles of dw^T against 1596 of dw, 12 waves of 132 against 13) */
    const int trans = waves(tiles(K, N, 128, 192)) < waves(tiles(N, K, 128, 192));
    switch (g_force_wgrad >= 0 ? g_force_wgrad : dw_bf16 ? 8 : trans ? 9 : 7) {
    case 9:
        if (dw_bf16) return h3s_fail(H3S_ERR_INVALID, "%s: wgrad configuration 9 (transposed) writes F32 dw only", op);
        /* dw^T[k, n] = fold of sum_m x[m, k] dy[m, n]: P = K, Q = N, R = M; both MN-major; dw[n * K + k] */
        return wg::launch<wg::wgrad_ovl_tma_persist_t>(op, K, N, M, x, K, dyb, N, NULL, dw, K);
    case 7:
        return launch_wgrad<wg::wgrad_ovl_tma_persist, wg::wgrad_ovl_bf16_tma_persist>(op, M, N, K, dyb, x, dw,
                                                                                       dw_bf16);
    case 8: return launch_wgrad<wg::wgrad_ovl, wg::wgrad_ovl_bf16>(op, M, N, K, dyb, x, dw, dw_bf16);
    default: return launch_wgrad<wg::wgrad_fold, wg::wgrad_fold_bf16>(op, M, N, K, dyb, x, dw, dw_bf16);
    }
}

extern "C" h3s_status h3c_gemm_bf16_backward(const char *op, int64_t M, int64_t N, int64_t K, const float *dy,
                                             const void *dyb_given, const void *w, const void *x, float *dx, void *dw,
                                             int dw_bf16) {
    if (!h3c_gemm_wgmma_shape(N, K) || h3s_get_grad_operands() == H3S_GRAD_OPERANDS_SPLIT) {
        if (dx) H3S_TRY(mma_gemm_dx_split(op, M, N, K, dy, w, dx));
        if (dw && !dw_bf16) H3S_TRY(mma_gemm_dw_split(op, M, N, K, dy, x, (float *)dw));
        if (dw && dw_bf16) { /* the F32 fold in a workspace, then one rounding: the same bits as F32 then round */
            void *f = NULL;
            H3S_TRY(h3c_ws_alloc(op, (size_t)N * (size_t)K * sizeof(float), &f));
            h3s_status st = mma_gemm_dw_split(op, M, N, K, dy, x, (float *)f);
            if (st == H3S_OK) st = round_to_bf16(op, N * K, (const float *)f, (uint16_t *)dw);
            h3c_ws_free(f);
            return st;
        }
        return H3S_OK;
    }
    H3S_TRY(need_aligned(op, "dy", dy));
    H3S_TRY(need_aligned(op, "w", w));
    if (dw) H3S_TRY(need_aligned(op, "x", x));
    H3S_TRY(need_aligned(op, "dx", dx));
    H3S_TRY(need_aligned(op, "dw", dw));
    if (M <= 0) { /* no rows: dw is the empty fold, +0 */
        if (dw) H3S_TRY(h3c_memset(op, dw, (size_t)N * (size_t)K * (dw_bf16 ? 2 : sizeof(float))));
        return H3S_OK;
    }
    if (dyb_given) { /* rounded by dy's producer: the bits of the pass below */
        H3S_TRY(need_aligned(op, "dy_bf16", dyb_given));
        if (dx) H3S_TRY(h3c_gemm_bf16_dgrad_bf16(op, M, N, K, dyb_given, w, dx));
        if (dw) H3S_TRY(h3c_gemm_bf16_wgrad_bf16(op, M, N, K, dyb_given, x, dw, dw_bf16));
        return H3S_OK;
    }
    void *dyb = NULL;
    H3S_TRY(h3c_ws_alloc(op, (size_t)M * (size_t)N * 2, &dyb));
    h3s_status st = round_to_bf16(op, M * N, dy, (uint16_t *)dyb); /* once, for both products */
    if (st == H3S_OK && dx) st = h3c_gemm_bf16_dgrad_bf16(op, M, N, K, dyb, w, dx);
    if (st == H3S_OK && dw) st = h3c_gemm_bf16_wgrad_bf16(op, M, N, K, dyb, x, dw, dw_bf16);
    h3c_ws_free(dyb);
    return st;
}

extern "C" h3s_status h3c_gemm_bf16_dx(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *w,
                                       float *dx) {
    return h3c_gemm_bf16_backward(op, M, N, K, dy, NULL, w, NULL, dx, NULL, 0);
}

extern "C" h3s_status h3c_gemm_bf16_dw(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *x,
                                       float *dw) {
    return h3c_gemm_bf16_backward(op, M, N, K, dy, NULL, NULL, x, NULL, dw, 0);
}

/* The previous strict kernel (mma.sync), for the benchmark's side-by-side column. */
extern "C" h3s_status h3c_gemm_bf16_forward_mma(const char *op, int64_t M, int64_t N, int64_t K, const void *x,
                                                const void *w, const void *b, void *y) {
    return mma_gemm_forward(op, M, N, K, x, w, b, y);
}

/* ------------------------------------------------------------------ FP32 FFMA kernel */

/* C[P, Q] = sum_r A(p, r) B(q, r) in F32 for the model's F32 modules.  Every output element is one __fmaf_rn chain
 * from +0 over r ascending (with fold: restarted every H3S_FOLD_TILE rows, the partials added in ascending tile
 * order), the CPU's strict chain.  Tiles only decide which thread runs which chains and when the operands reach
 * shared memory, so every tile configuration gives the same bits (tests/gpu/test_gpu_ops.c runs each one on the
 * same operands).  A TB x TB output tile per CTA of 256 threads, TT x TT outputs per thread (TB = 16 TT); the
 * reduction in steps of sg_rows(TB) rows (32, 64, 128: eight elements of each operand per thread and step), the
 * next step's operands loaded into registers during this step's FMAs. */
#define SG_THREADS 256
#define SG_TILES 3 /* TB = 64, 32, 16 */
__host__ __device__ constexpr int sg_rows(int tb) { return SG_THREADS * 8 / tb; }
static_assert(H3S_FOLD_TILE % sg_rows(16) == 0 && H3S_FOLD_TILE % sg_rows(64) == 0, "a fold tile is whole steps");

typedef struct sg_args {
    int64_t P, Q, R;
    const float *a;
    int64_t a_sp, a_sr; /* A(p, r) = a[p*a_sp + r*a_sr] */
    const float *b;
    int64_t b_sq, b_sr; /* B(q, r) = b[q*b_sq + r*b_sr] */
    const float *bias;  /* [Q] or NULL */
    float *c;
    int64_t ldc;
    int fold; /* restart the chain every 256 reduction rows, fold the partials */
} sg_args;

/* This thread's share of one operand's TB x sg_rows(TB) tiles: element i sits at (o, r) = (o1 + i dox, r1 + i drx), the
 * fastest-varying thread index following the contiguous global dimension so that the loads coalesce.  Its address
 * is one pointer and one stride (the step moves it), not recomputed per element. */
template <int TB> struct sg_share {
    static constexpr int SR = sg_rows(TB), PER = TB * SR / SG_THREADS;
    const float *p; /* element 0 at r = 0 */
    int64_t di, sr; /* address step from element i to i + 1; per reduction row */
    int64_t o_lim;  /* element i exists while i * dox < o_lim (outputs beyond the operand are zeros) */
    int o1, r1, dox, drx;
};

template <int TB>
__device__ __forceinline__ sg_share<TB> sg_share_of(const float *src, int64_t s_outer, int64_t s_r, int64_t n_outer,
                                                    int64_t o0, int tid) {
    sg_share<TB> h;
    constexpr int SR = sg_rows(TB);
    if (s_r == 1) { /* rows contiguous along r: SR threads along r */
        h.o1 = tid / SR, h.r1 = tid % SR, h.dox = SG_THREADS / SR, h.drx = 0;
    } else { /* contiguous along o: TB threads along o */
        h.o1 = tid % TB, h.r1 = tid / TB, h.dox = 0, h.drx = SG_THREADS / TB;
    }
    h.o_lim = n_outer - o0 - h.o1;
    h.p = src + (h.o_lim > 0 ? (o0 + h.o1) * s_outer : 0) + (int64_t)h.r1 * s_r;
    h.di = (int64_t)h.dox * s_outer + (int64_t)h.drx * s_r;
    h.sr = s_r;
    return h;
}

/* Global -> registers, zeros outside the operand. */
template <int TB>
__device__ __forceinline__ void sg_fetch(const sg_share<TB> &h, int64_t R, int64_t r0, float (&v)[sg_share<TB>::PER]) {
    const float *q = h.p + r0 * h.sr;
#pragma unroll
    for (int i = 0; i < sg_share<TB>::PER; i++)
        v[i] = ((int64_t)i * h.dox < h.o_lim && r0 + h.r1 + i * h.drx < R) ? q[i * h.di] : 0.0f;
}

template <int TB>
__device__ __forceinline__ void sg_stash(const sg_share<TB> &h, const float (&v)[sg_share<TB>::PER],
                                         float (*tile)[TB + 4]) {
#pragma unroll
    for (int i = 0; i < sg_share<TB>::PER; i++)
        tile[h.r1 + i * h.drx][h.o1 + i * h.dox] = v[i];
}

template <int TB> __global__ void __launch_bounds__(SG_THREADS) sgemm_kernel(sg_args g) {
    constexpr int TT = TB / 16, SR = sg_rows(TB), PER = sg_share<TB>::PER;
    __shared__ __align__(16) float As[2][SR][TB + 4];
    __shared__ __align__(16) float Bs[2][SR][TB + 4];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int64_t p0 = (int64_t)blockIdx.y * TB, q0 = (int64_t)blockIdx.x * TB;
    float acc[TT][TT], tot[TT][TT];
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int j = 0; j < TT; j++)
            acc[i][j] = 0.0f, tot[i][j] = 0.0f;
    bool first_tile = true;
    const sg_share<TB> ha = sg_share_of<TB>(g.a, g.a_sp, g.a_sr, g.P, p0, tid),
                       hb = sg_share_of<TB>(g.b, g.b_sq, g.b_sr, g.Q, q0, tid);
    float va[PER], vb[PER];
    sg_fetch<TB>(ha, g.R, 0, va);
    sg_fetch<TB>(hb, g.R, 0, vb);
    sg_stash<TB>(ha, va, As[0]);
    sg_stash<TB>(hb, vb, Bs[0]);
    __syncthreads();
    int cur = 0;
    for (int64_t r0 = 0; r0 < g.R; r0 += SR) {
        const bool more = r0 + SR < g.R;
        if (more) { /* the next step's operands, in flight during this step's FMAs */
            sg_fetch<TB>(ha, g.R, r0 + SR, va);
            sg_fetch<TB>(hb, g.R, r0 + SR, vb);
        }
        const int rmax = g.R - r0 < SR ? (int)(g.R - r0) : SR; /* the chain stops at R exactly */
        auto row = [&](int r) {
            float a[TT], b[TT];
            h3k_ld_f32v<TT>(&As[cur][r][ty * TT], a); /* one vector load where TT allows */
            h3k_ld_f32v<TT>(&Bs[cur][r][tx * TT], b);
#pragma unroll
            for (int i = 0; i < TT; i++)
#pragma unroll
                for (int j = 0; j < TT; j++)
                    acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        };
        if (rmax == SR) {
#pragma unroll
            for (int r = 0; r < SR; r++)
                row(r);
        } else {
            for (int r = 0; r < rmax; r++)
                row(r);
        }
        if (g.fold && ((r0 + SR) % H3S_FOLD_TILE == 0 || !more)) {
#pragma unroll
            for (int i = 0; i < TT; i++)
#pragma unroll
                for (int j = 0; j < TT; j++) {
                    tot[i][j] = first_tile ? acc[i][j] : tot[i][j] + acc[i][j];
                    acc[i][j] = 0.0f;
                }
            first_tile = false;
        }
        if (more) { /* the other buffer was last read in the previous step, which every thread has left */
            sg_stash<TB>(ha, va, As[cur ^ 1]);
            sg_stash<TB>(hb, vb, Bs[cur ^ 1]);
        }
        __syncthreads();
        cur ^= 1;
    }
    /* each thread's TT outputs of a row are adjacent: one vector store where they are all inside C and aligned */
    const int64_t q = q0 + tx * TT;
    const bool vec = TT > 1 && q + TT <= g.Q && g.ldc % TT == 0 && ((uintptr_t)g.c % (4 * TT)) == 0;
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const int64_t p = p0 + ty * TT + i;
        if (p >= g.P) continue;
        float v[TT];
#pragma unroll
        for (int j = 0; j < TT; j++) {
            v[j] = g.fold ? tot[i][j] : acc[i][j];
            if (g.bias && q + j < g.Q) v[j] = v[j] + g.bias[q + j];
        }
        float *dst = g.c + p * g.ldc + q;
        if constexpr (TT == 4) {
            if (vec) {
                *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
                continue;
            }
        } else if constexpr (TT == 2) {
            if (vec) {
                *(float2 *)dst = make_float2(v[0], v[1]);
                continue;
            }
        }
#pragma unroll
        for (int j = 0; j < TT; j++)
            if (q + j < g.Q) dst[j] = v[j];
    }
}

/* Tile override for the configuration test: -1 = the dispatcher's choice, else 0, 1, 2 = 64, 32, 16. */
static int g_force_sg_tile = -1;

extern "C" int h3c_sgemm_config_count(void) { return SG_TILES; }

extern "C" h3s_status h3c_sgemm_force_config(int config) {
    if (config < -1 || config >= SG_TILES)
        return h3s_fail(H3S_ERR_INVALID, "sgemm: no configuration %d (0..%d, or -1)", config, SG_TILES - 1);
    g_force_sg_tile = config;
    return H3S_OK;
}

/* The dispatcher: 64 x 64 tiles when they make two waves of 132 CTAs (the H100/H200 SXM multiprocessor count, a
 * constant of the build), else 32 x 32 when those make at least 64 CTAs, else 16 x 16 (measured on the H200 over the
 * model's F32 shapes: docs/evidence/gpu/development/sgemm_wgrad_a778658.md).  The choice depends on (P, Q) only and
 * changes no bit (every output is the same chain whatever the tile). */
static int sg_pick(int64_t P, int64_t Q) {
    const int64_t n64 = ((P + 63) / 64) * ((Q + 63) / 64), n32 = ((P + 31) / 32) * ((Q + 31) / 32);
    return n64 >= 2 * 132 ? 0 : n32 >= 64 ? 1 : 2;
}

static h3s_status sg_launch(const char *op, const sg_args &g) {
    if (g.P <= 0 || g.Q <= 0) return H3S_OK;
    const int c = g_force_sg_tile >= 0 ? g_force_sg_tile : sg_pick(g.P, g.Q);
    const int64_t tb = 64 >> c, gq = (g.Q + tb - 1) / tb, gp = (g.P + tb - 1) / tb;
    if (gp > 65535 || gq > 0x7fffffff)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: GEMM of %lld x %lld outputs exceeds the grid limits", op,
                        (long long)g.P, (long long)g.Q);
    dim3 grid((unsigned)gq, (unsigned)gp);
    if (c == 0)
        sgemm_kernel<64><<<grid, SG_THREADS, 0, H3K_STREAM>>>(g);
    else if (c == 1)
        sgemm_kernel<32><<<grid, SG_THREADS, 0, H3K_STREAM>>>(g);
    else
        sgemm_kernel<16><<<grid, SG_THREADS, 0, H3K_STREAM>>>(g);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_sgemm_forward(const char *op, int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                                        const float *b, float *y) {
    sg_args g = {M, N, K, x, K, 1, w, K, 1, b, y, N, 0};
    return sg_launch(op, g);
}

extern "C" h3s_status h3c_sgemm_dx(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const float *w,
                                   float *dx) {
    /* dx[m, k] = chain over n of dy[m, n] w[n, k] */
    sg_args g = {M, K, N, dy, N, 1, w, 1, K, NULL, dx, K, 0};
    return sg_launch(op, g);
}

extern "C" h3s_status h3c_sgemm_dw(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const float *x,
                                   float *dw) {
    /* dw[n, k] = fold over 256-row tiles of the chain over m of dy[m, n] x[m, k] */
    sg_args g = {N, K, M, dy, 1, N, x, 1, K, NULL, dw, K, 1};
    return sg_launch(op, g);
}

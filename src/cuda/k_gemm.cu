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
 *     STRICT.md section 3) in registers; no workspace, no atomics, no split-K.
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

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
                ldmatrix_x4(addr, bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                int row = wp * 64 + mi * 16 + (lane & 15);
                int col = ks * 16 + (lane >> 4) * 8;
                uint32_t ah[4], al[4];
                ldmatrix_x4((uint32_t)__cvta_generic_to_shared(ahi + row * TC_LD + col), ah[0], ah[1], ah[2], ah[3]);
                if (SPLIT)
                    ldmatrix_x4((uint32_t)__cvta_generic_to_shared(alo + row * TC_LD + col), al[0], al[1], al[2],
                                al[3]);
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    mma_bf16(acc[mi][ni], ah, bf[ni][0], bf[ni][1]);
                    if (SPLIT) mma_bf16(acc[mi][ni], al, bf[ni][0], bf[ni][1]);
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

extern "C" h3s_status h3c_gemm_bf16_forward(const char *op, int64_t M, int64_t N, int64_t K, const void *x,
                                            const void *w, const void *b, void *y) {
    tc_args g;
    g.P = M, g.Q = N, g.R = K;
    g.a = x, g.lda = K, g.a_vec = aligned16(x) && K % 8 == 0;
    g.b = (const uint16_t *)w, g.ldb = K, g.b_vec = aligned16(w) && K % 8 == 0;
    g.bias = (const uint16_t *)b;
    g.c = y, g.ldc = N;
    return tc_launch<A_BF16_RC, B_BF16_RC, EPI_BF16_BIAS>(op, g);
}

extern "C" h3s_status h3c_gemm_bf16_dx(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *w,
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

extern "C" h3s_status h3c_gemm_bf16_dw(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *x,
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

/* ------------------------------------------------------------------ FP32 FFMA kernel */

#define SG_B 64
#define SG_R 16
#define SG_THREADS 256

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

__device__ __forceinline__ void sg_load_tile(const float *src, int64_t s_outer, int64_t s_r, int64_t n_outer, int64_t R,
                                             int64_t o0, int64_t r0, float (*tile)[SG_B + 4], int tid) {
    /* 64 x 16 elements, 4 per thread; the fastest-varying thread index follows the contiguous
     * global dimension so the loads coalesce */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int e = tid + i * SG_THREADS, o, r;
        if (s_r == 1) {
            r = e & (SG_R - 1);
            o = e >> 4;
        } else {
            o = e & (SG_B - 1);
            r = e >> 6;
        }
        float v = 0.0f;
        if (o0 + o < n_outer && r0 + r < R) v = src[(o0 + o) * s_outer + (r0 + r) * s_r];
        tile[r][o] = v;
    }
}

__global__ void __launch_bounds__(SG_THREADS) sgemm_kernel(sg_args g) {
    __shared__ float As[SG_R][SG_B + 4];
    __shared__ float Bs[SG_R][SG_B + 4];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int64_t p0 = (int64_t)blockIdx.y * SG_B, q0 = (int64_t)blockIdx.x * SG_B;
    float acc[4][4], tot[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f, tot[i][j] = 0.0f;
    bool first_tile = true;
    for (int64_t r0 = 0; r0 < g.R; r0 += SG_R) {
        sg_load_tile(g.a, g.a_sp, g.a_sr, g.P, g.R, p0, r0, As, tid);
        sg_load_tile(g.b, g.b_sq, g.b_sr, g.Q, g.R, q0, r0, Bs, tid);
        __syncthreads();
        const int rmax = g.R - r0 < SG_R ? (int)(g.R - r0) : SG_R; /* the chain stops at R exactly */
        for (int r = 0; r < rmax; r++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                a[i] = As[r][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++)
                b[j] = Bs[r][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
        if (g.fold && ((r0 + SG_R) % H3S_FOLD_TILE == 0 || r0 + SG_R >= g.R)) {
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    tot[i][j] = first_tile ? acc[i][j] : tot[i][j] + acc[i][j];
                    acc[i][j] = 0.0f;
                }
            first_tile = false;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t p = p0 + ty + 16 * i, q = q0 + tx + 16 * j;
            if (p >= g.P || q >= g.Q) continue;
            float v = g.fold ? tot[i][j] : acc[i][j];
            if (g.bias) v = v + g.bias[q];
            g.c[p * g.ldc + q] = v;
        }
    }
}

static h3s_status sg_launch(const char *op, const sg_args &g) {
    if (g.P <= 0 || g.Q <= 0) return H3S_OK;
    int64_t gq = (g.Q + SG_B - 1) / SG_B, gp = (g.P + SG_B - 1) / SG_B;
    if (gp > 65535 || gq > 0x7fffffff)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: GEMM of %lld x %lld outputs exceeds the grid limits", op,
                        (long long)g.P, (long long)g.Q);
    dim3 grid((unsigned)gq, (unsigned)gp);
    sgemm_kernel<<<grid, SG_THREADS, 0, H3K_STREAM>>>(g);
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

/* RMSNorm family on the GPU (docs/numerics/cuda.md, "Norms").
 *
 * Row norms (rmsnorm, final norm): one block of 256 threads per row.  The sum of squares is a
 * fixed two-level order: thread t runs an FMA chain over the columns t, t + 256, ... in
 * ascending order, then the 256 partials are added by a fixed binary tree in shared memory.
 * The block size is a constant, so a row's bits depend only on the row.  The element formula
 * is the CPU's, one IEEE operation at a time:
 *   inv = 1 / sqrt(ss / H + eps);  t = x * inv;  t = t * w;  t = t * (1 + scale);  t = t + shift.
 * Per-head norms (q_norm, k_norm): one warp per (row, head); lane chains over d = lane,
 * lane + 32, ..., then a butterfly of shuffles (every lane ends with the same bits).
 * Backward: the row kernels recompute inv with the forward's code (same bits), write dx and
 * keep inv per row for the cross-row folds (k_fold.cu). */
#include "cuda/k_common.cuh"

#define NORM_THREADS 256
#define NORM_REG_NV 24 /* rows of up to 6144 columns held in registers (the release hidden size: 5376) */

/* test hook: 1 = the generic form of the kernels that can hold a row or a head in registers (every pass reads
 * memory) */
static int g_norm_generic = 0;
extern "C" void h3c_norm_force_generic(int on) { g_norm_generic = on ? 1 : 0; }

/* Sum over the block of one value per thread, fixed tree; every thread gets the result. */
__device__ __forceinline__ float block_sum(float v, float *sm) {
    const int tid = threadIdx.x;
    sm[tid] = v;
    __syncthreads();
#pragma unroll
    for (int s = NORM_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) sm[tid] = sm[tid] + sm[tid + s];
        __syncthreads();
    }
    float r = sm[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = v + __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float row_inv_rms(const uint16_t *x, int64_t H, float eps, float *sm) {
    float ss = 0.0f;
    for (int64_t k = threadIdx.x; k < H; k += NORM_THREADS) {
        float v = h3k_bf2f(x[k]);
        ss = __fmaf_rn(v, v, ss);
    }
    ss = block_sum(ss, sm);
    return 1.0f / sqrtf(ss / (float)H + eps);
}

typedef struct norm_args {
    int64_t M, H;
    const uint16_t *x, *w, *table;
    const int64_t *index;
    int64_t R, ld_table, shift_off, scale_off;
    float eps;
    void *y;
    int y_dt;
    const float *dy, *dx_add; /* dx = dx_add + the norm's dx when dx_add is not NULL (the block's residual sum) */
    float *dx, *inv;
    int code;
    int *flag;
} norm_args;

/* VEC = 0: one column per thread in both passes.  VEC = 1 (the launcher checked H, the rows and the table offsets
 * multiples of 8 and every pointer 16-byte aligned): the sum of squares as above (it fixes which thread adds which
 * column), then each thread writes 8 consecutive columns at a time from 16-byte loads of x, w, shift and scale, BF16
 * outputs rounded two at a time (h3k_f2bf_v: h3k_f2bf's bits).  The second pass sums nothing, so which thread
 * computes a column cannot move its bits; the element formula is the same. */
template <int VEC> __global__ void __launch_bounds__(NORM_THREADS) rmsnorm_forward_kernel(norm_args a) {
    __shared__ float sm[NORM_THREADS];
    __shared__ int64_t row_sh;
    const int64_t m = blockIdx.x;
    const uint16_t *xr = a.x + m * a.H;
    if (threadIdx.x == 0) row_sh = a.table ? h3k_index(a.index, m, a.R, a.flag, a.code) : 0;
    float inv = row_inv_rms(xr, a.H, a.eps, sm); /* its barriers publish row_sh */
    const int64_t row = row_sh;
    if (row < 0) return; /* bad index: reported, row left unwritten */
    const uint16_t *sh = a.table ? a.table + row * a.ld_table + a.shift_off : NULL;
    const uint16_t *sc = a.table ? a.table + row * a.ld_table + a.scale_off : NULL;
    if constexpr (VEC) {
        for (int64_t c = threadIdx.x; c < a.H / 8; c += NORM_THREADS) {
            const int64_t k = c * 8;
            uint16_t xv[8], wv[8], scv[8], shv[8];
            h3k_ld_bf16v<8>(xr + k, xv);
            if (a.w) h3k_ld_bf16v<8>(a.w + k, wv);
            if (sc) {
                h3k_ld_bf16v<8>(sc + k, scv);
                h3k_ld_bf16v<8>(sh + k, shv);
            }
            float t[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                t[j] = h3k_bf2f(xv[j]) * inv;
                if (a.w) t[j] = t[j] * h3k_bf2f(wv[j]);
                if (sc) {
                    float s = 1.0f + h3k_bf2f(scv[j]);
                    t[j] = t[j] * s;
                    t[j] = t[j] + h3k_bf2f(shv[j]);
                }
            }
            if (a.y_dt == H3S_BF16) {
                uint16_t o[8];
                h3k_f2bf_v<8>(t, o);
                h3k_st_bf16v<8>((uint16_t *)a.y + m * a.H + k, o);
            } else {
                h3k_st_f32v<8>((float *)a.y + m * a.H + k, t);
            }
        }
    } else {
        for (int64_t k = threadIdx.x; k < a.H; k += NORM_THREADS) {
            float t = h3k_bf2f(xr[k]) * inv;
            if (a.w) t = t * h3k_bf2f(a.w[k]);
            if (sc) {
                float s = 1.0f + h3k_bf2f(sc[k]);
                t = t * s;
                t = t + h3k_bf2f(sh[k]);
            }
            h3k_st(a.y, a.y_dt, m * a.H + k, t);
        }
    }
}

/* NV > 0: a row of at most NV * NORM_THREADS columns kept in registers (thread t's columns t, t + 256, ..., loaded
 * once: x, and the products xh = x inv and gx = dy s w of the dot, which dx uses again); NV = 0: read from memory
 * in each pass.  The same operations on the same values in the same order either way: the same bits. */
template <int NV> __global__ void __launch_bounds__(NORM_THREADS) rmsnorm_backward_rows_kernel(norm_args a) {
    __shared__ float sm[NORM_THREADS];
    __shared__ int64_t row_sh;
    constexpr int RV = NV > 0 ? NV : 1;
    /* NV > 0 with dx_add: the row of dx_add, copied to shared memory (each thread its own columns, asynchronously, as
     * the row's loads and sums run) and read back by the thread that adds it: one load latency per row, no
     * registers.  (Read at the store, each load waited for the store before it: 329 against 196 us a row pass.) */
    __shared__ float add_sm[NV > 0 ? RV * NORM_THREADS : 1];
    const int64_t m = blockIdx.x;
    const uint16_t *xr = a.x + m * a.H;
    const float *dyr = a.dy + m * a.H;
    if (threadIdx.x == 0) row_sh = a.table ? h3k_index(a.index, m, a.R, a.flag, a.code) : 0;
    float inv;
    float xv[RV], gxv[RV];
    if constexpr (NV > 0) {
        if (a.dx_add) {
#pragma unroll
            for (int j = 0; j < NV; j++) {
                const int64_t k = threadIdx.x + (int64_t)j * NORM_THREADS;
                if (k < a.H) {
                    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(&add_sm[threadIdx.x + j * NORM_THREADS]);
                    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(a.dx_add + m * a.H + k)
                                 : "memory");
                }
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        }
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int64_t k = threadIdx.x + (int64_t)j * NORM_THREADS;
            xv[j] = k < a.H ? h3k_bf2f(xr[k]) : 0.0f;
            gxv[j] = k < a.H ? dyr[k] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (threadIdx.x + (int64_t)j * NORM_THREADS < a.H) ss = __fmaf_rn(xv[j], xv[j], ss); /* row_inv_rms */
        ss = block_sum(ss, sm);
        inv = 1.0f / sqrtf(ss / (float)a.H + a.eps);
    } else {
        inv = row_inv_rms(xr, a.H, a.eps, sm);
    }
    const int64_t row = row_sh;
    if (threadIdx.x == 0) a.inv[m] = inv;
    if (row < 0) { /* a bad index (reported): no copy may still be in flight when the block ends */
        if (NV > 0 && a.dx_add) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        return;
    }
    const uint16_t *sc = a.table ? a.table + row * a.ld_table + a.scale_off : NULL;
    float dot = 0.0f;
    if constexpr (NV > 0) {
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int64_t k = threadIdx.x + (int64_t)j * NORM_THREADS;
            if (k < a.H) {
                const float xh = xv[j] * inv;
                const float wk = a.w ? h3k_bf2f(a.w[k]) : 1.0f;
                const float s = sc ? 1.0f + h3k_bf2f(sc[k]) : 1.0f;
                const float g = gxv[j] * s; /* dL/d(xhat * w) */
                const float gx = g * wk;    /* dL/d(xhat) */
                dot = __fmaf_rn(gx, xh, dot);
                xv[j] = xh, gxv[j] = gx;
            }
        }
    } else {
        for (int64_t k = threadIdx.x; k < a.H; k += NORM_THREADS) {
            float xh = h3k_bf2f(xr[k]) * inv;
            float wk = a.w ? h3k_bf2f(a.w[k]) : 1.0f;
            float s = sc ? 1.0f + h3k_bf2f(sc[k]) : 1.0f;
            float g = dyr[k] * s; /* dL/d(xhat * w) */
            float gx = g * wk;    /* dL/d(xhat) */
            dot = __fmaf_rn(gx, xh, dot);
        }
    }
    dot = block_sum(dot, sm);
    if (!a.dx) return;
    const float mean = dot / (float)a.H;
    if constexpr (NV > 0) {
        if (a.dx_add) asm volatile("cp.async.wait_group 0;\n" ::: "memory"); /* this thread's own copies */
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int64_t k = threadIdx.x + (int64_t)j * NORM_THREADS;
            if (k < a.H) {
                const float d = inv * (gxv[j] - xv[j] * mean);
                a.dx[m * a.H + k] = a.dx_add ? add_sm[threadIdx.x + j * NORM_THREADS] + d : d;
            }
        }
    } else {
        for (int64_t k = threadIdx.x; k < a.H; k += NORM_THREADS) {
            float xh = h3k_bf2f(xr[k]) * inv;
            float wk = a.w ? h3k_bf2f(a.w[k]) : 1.0f;
            float s = sc ? 1.0f + h3k_bf2f(sc[k]) : 1.0f;
            float gx = (dyr[k] * s) * wk;
            const float d = inv * (gx - xh * mean);
            a.dx[m * a.H + k] = a.dx_add ? a.dx_add[m * a.H + k] + d : d;
        }
    }
}

static h3s_status norm_launch_check(const char *op, int64_t M) {
    if (M > 0x7fffffffLL) return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: %lld rows exceed the grid limit", op, (long long)M);
    return H3S_OK;
}

extern "C" h3s_status h3c_rmsnorm_forward(const char *op, int code, int64_t M, int64_t H, const void *x, const void *w,
                                          const void *table, const int64_t *index, int64_t R, int64_t ld_table,
                                          int64_t shift_off, int64_t scale_off, float eps, void *y, int y_dt) {
    if (M <= 0) return H3S_OK;
    H3S_TRY(norm_launch_check(op, M));
    norm_args a;
    memset(&a, 0, sizeof a);
    a.M = M, a.H = H, a.x = (const uint16_t *)x, a.w = (const uint16_t *)w, a.table = (const uint16_t *)table;
    a.index = index, a.R = R, a.ld_table = ld_table, a.shift_off = shift_off, a.scale_off = scale_off;
    a.eps = eps, a.y = y, a.y_dt = y_dt, a.code = code, a.flag = h3c_error_flag();
    /* (x held in registers, as the backward does, measured slower here: 156 against 112 us at 8349 x 5376) */
    const int vec =
        !g_norm_generic && H % 8 == 0 && h3k_vec_aligned(x, 8, 2) && (!w || h3k_vec_aligned(w, 8, 2)) &&
        (y_dt == H3S_BF16 ? h3k_vec_aligned(y, 8, 2) : h3k_vec_aligned(y, 8, 4)) &&
        (!table || (h3k_vec_aligned(table, 8, 2) && ld_table % 8 == 0 && shift_off % 8 == 0 && scale_off % 8 == 0));
    if (vec)
        rmsnorm_forward_kernel<1><<<(unsigned)M, NORM_THREADS, 0, H3K_STREAM>>>(a);
    else
        rmsnorm_forward_kernel<0><<<(unsigned)M, NORM_THREADS, 0, H3K_STREAM>>>(a);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_rmsnorm_backward_rows(const char *op, int code, int64_t M, int64_t H, const void *x,
                                                const void *w, const void *table, const int64_t *index, int64_t R,
                                                int64_t ld_table, int64_t scale_off, float eps, const float *dy,
                                                const float *dx_add, float *dx, float *inv) {
    if (M <= 0) return H3S_OK;
    H3S_TRY(norm_launch_check(op, M));
    norm_args a;
    memset(&a, 0, sizeof a);
    a.M = M, a.H = H, a.x = (const uint16_t *)x, a.w = (const uint16_t *)w, a.table = (const uint16_t *)table;
    a.index = index, a.R = R, a.ld_table = ld_table, a.scale_off = scale_off;
    a.eps = eps, a.dy = dy, a.dx_add = dx_add, a.dx = dx, a.inv = inv, a.code = code, a.flag = h3c_error_flag();
    if (H <= (int64_t)NORM_REG_NV * NORM_THREADS && !g_norm_generic)
        rmsnorm_backward_rows_kernel<NORM_REG_NV><<<(unsigned)M, NORM_THREADS, 0, H3K_STREAM>>>(a);
    else
        rmsnorm_backward_rows_kernel<0><<<(unsigned)M, NORM_THREADS, 0, H3K_STREAM>>>(a);
    return h3c_launch_check(op);
}

/* ------------------------------------------------------------------ per-head norm */

typedef struct head_args {
    int64_t pairs, heads, D;
    const uint16_t *x, *w;
    float eps;
    uint16_t *y;
    const float *dy;
    float *dx, *inv;
    uint16_t *dxb; /* backward: dx rounded to BF16 as well (h3k_f2bf), or NULL */
} head_args;

__device__ __forceinline__ float head_inv_rms(const uint16_t *xr, int64_t D, float eps, int lane) {
    float ss = 0.0f;
    for (int64_t d = lane; d < D; d += 32) {
        float v = h3k_bf2f(xr[d]);
        ss = __fmaf_rn(v, v, ss);
    }
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / (float)D + eps);
}

/* head_inv_rms over the lane's values d = lane, lane + 32, ... already in registers (D = 32 NV) */
template <int NV> __device__ __forceinline__ float head_inv_rms_regs(const float (&xv)[NV], int64_t D, float eps) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++)
        ss = __fmaf_rn(xv[j], xv[j], ss);
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / (float)D + eps);
}

/* NV > 0 (D = 32 NV, x, w and y aligned to NV elements): the lane's values of x for the sum of squares loaded
 * together; NV = 0: one column at a time in each pass. */
template <int NV> __global__ void __launch_bounds__(256) head_rmsnorm_forward_kernel(head_args a) {
    const int lane = threadIdx.x & 31;
    const int64_t p = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); /* (row, head) pair */
    if (p >= a.pairs) return;                                       /* whole warps leave together */
    const uint16_t *xr = a.x + p * a.D;
    if constexpr (NV > 0) {
        float xv[NV];
#pragma unroll
        for (int j = 0; j < NV; j++)
            xv[j] = h3k_bf2f(xr[lane + 32 * j]);
        const float inv = head_inv_rms_regs<NV>(xv, a.D, a.eps);
        /* the outputs: lane's NV consecutive columns from NV-wide loads of x (again) and w, rounded two at a time
         * (h3k_f2bf's bits); nothing is summed, so the columns' assignment to lanes cannot move a bit */
        uint16_t xc[NV], wc[NV], o[NV];
        h3k_ld_bf16v<NV>(xr + NV * lane, xc);
        h3k_ld_bf16v<NV>(a.w + NV * lane, wc);
        float t[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) {
            t[j] = h3k_bf2f(xc[j]) * inv;
            t[j] = t[j] * h3k_bf2f(wc[j]);
        }
        h3k_f2bf_v<NV>(t, o);
        h3k_st_bf16v<NV>(a.y + p * a.D + NV * lane, o);
    } else {
        float inv = head_inv_rms(xr, a.D, a.eps, lane);
        for (int64_t d = lane; d < a.D; d += 32) {
            float t = h3k_bf2f(xr[d]) * inv;
            t = t * h3k_bf2f(a.w[d]);
            a.y[p * a.D + d] = h3k_f2bf(t);
        }
    }
}

/* NV > 0 (D = 32 NV): lane's values d = lane, lane + 32, ... held in registers from one load (x, then xh and gx,
 * which dx uses again); NV = 0: read from memory in each pass.  The same operations in the same order: the same
 * bits. */
template <int NV> __global__ void __launch_bounds__(256) head_rmsnorm_backward_kernel(head_args a) {
    const int lane = threadIdx.x & 31;
    const int64_t p = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (p >= a.pairs) return;
    const uint16_t *xr = a.x + p * a.D;
    const float *dyr = a.dy + p * a.D;
    if constexpr (NV > 0) {
        float xv[NV], gv[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) {
            xv[j] = h3k_bf2f(xr[lane + 32 * j]);
            gv[j] = dyr[lane + 32 * j];
        }
        const float inv = head_inv_rms_regs<NV>(xv, a.D, a.eps);
        if (lane == 0) a.inv[p] = inv;
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const float xh = xv[j] * inv;
            const float gx = gv[j] * h3k_bf2f(a.w[lane + 32 * j]);
            dot = __fmaf_rn(gx, xh, dot);
            xv[j] = xh, gv[j] = gx;
        }
        dot = warp_sum(dot);
        if (!a.dx && !a.dxb) return;
        const float mean = dot / (float)a.D;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const float v = inv * (gv[j] - xv[j] * mean);
            if (a.dx) a.dx[p * a.D + lane + 32 * j] = v;
            if (a.dxb) a.dxb[p * a.D + lane + 32 * j] = h3k_f2bf(v);
        }
    } else {
        float inv = head_inv_rms(xr, a.D, a.eps, lane);
        if (lane == 0) a.inv[p] = inv;
        float dot = 0.0f;
        for (int64_t d = lane; d < a.D; d += 32) {
            float xh = h3k_bf2f(xr[d]) * inv;
            float gx = dyr[d] * h3k_bf2f(a.w[d]);
            dot = __fmaf_rn(gx, xh, dot);
        }
        dot = warp_sum(dot);
        if (!a.dx && !a.dxb) return;
        const float mean = dot / (float)a.D;
        for (int64_t d = lane; d < a.D; d += 32) {
            float xh = h3k_bf2f(xr[d]) * inv;
            float gx = dyr[d] * h3k_bf2f(a.w[d]);
            const float v = inv * (gx - xh * mean);
            if (a.dx) a.dx[p * a.D + d] = v;
            if (a.dxb) a.dxb[p * a.D + d] = h3k_f2bf(v);
        }
    }
}

static h3s_status head_launch(const char *op, int backward, const head_args &a) {
    if (a.pairs <= 0) return H3S_OK;
    int64_t blocks = (a.pairs + 7) / 8;
    if (blocks > 0x7fffffffLL) return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: too many rows for the grid", op);
    if (backward)
        if (a.D == 128 && !g_norm_generic)
            head_rmsnorm_backward_kernel<4><<<(unsigned)blocks, 256, 0, H3K_STREAM>>>(a);
        else
            head_rmsnorm_backward_kernel<0><<<(unsigned)blocks, 256, 0, H3K_STREAM>>>(a);
    else if (a.D == 128 && !g_norm_generic && h3k_vec_aligned(a.x, 4, 2) && h3k_vec_aligned(a.w, 4, 2) &&
             h3k_vec_aligned(a.y, 4, 2))
        head_rmsnorm_forward_kernel<4><<<(unsigned)blocks, 256, 0, H3K_STREAM>>>(a);
    else
        head_rmsnorm_forward_kernel<0><<<(unsigned)blocks, 256, 0, H3K_STREAM>>>(a);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_head_rmsnorm_forward(const char *op, int64_t M, int64_t heads, int64_t D, const void *x,
                                               const void *w, float eps, void *y) {
    head_args a;
    memset(&a, 0, sizeof a);
    a.pairs = M * heads, a.heads = heads, a.D = D, a.x = (const uint16_t *)x, a.w = (const uint16_t *)w;
    a.eps = eps, a.y = (uint16_t *)y;
    return head_launch(op, 0, a);
}

extern "C" h3s_status h3c_head_rmsnorm_backward_rows(const char *op, int64_t M, int64_t heads, int64_t D, const void *x,
                                                     const void *w, float eps, const float *dy, float *dx, void *dxb,
                                                     float *inv) {
    head_args a;
    memset(&a, 0, sizeof a);
    a.pairs = M * heads, a.heads = heads, a.D = D, a.x = (const uint16_t *)x, a.w = (const uint16_t *)w;
    a.eps = eps, a.dy = dy, a.dx = dx, a.dxb = (uint16_t *)dxb, a.inv = inv;
    return head_launch(op, 1, a);
}

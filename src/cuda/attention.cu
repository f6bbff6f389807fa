/* Strict attention on the GPU (docs/numerics/cuda.md, "Attention").
 *
 * Non-causal, scale 1/sqrt(D), per (item, head); query s attends key j of its own item iff
 * doc[s] == doc[j] and key_valid[b, j].  Every quantity is one fixed chain over the
 * attendable keys (or queries) in ascending packed order, so it depends neither on tiling nor
 * on how many masked keys lie between them (a padded sequence gives live rows the unpadded
 * bits), nor on the batch size:
 *   s_ij = (qk_i . k_j) * scale, where the dot product is computed by a quad of 4 threads:
 *          lane l chains d = l, l + 4, ... with FMAs from 0, then (p0 + p1) + (p2 + p3);
 *   m_i  = max over attendable j of s_ij               (pass 1 over the key tiles)
 *   p_ij = expf(s_ij - m_i);  l_i = sum_j p_ij;  acc_i = FMA chain of p_ij v_j   (pass 2)
 *   out_i = bf16(acc_i / l_i); stats_i = (m_i, l_i).  A query with no key: out 0, (-inf, 0).
 * Two passes instead of an online softmax: the online rescaling would make the bits depend on
 * where the tile boundaries fall among the attendable keys.  No S x S buffer: keys stream
 * through shared memory in tiles of 32.  Backward (no atomics):
 *   delta_i = FMA chain over d of dout_id * out_id;  P_ij = expf(s_ij - m_i) / l_i;
 *   dS_ij = P_ij * (dout_i . v_j - delta_i);
 *   dq_i = scale * (chain over attendable j ascending of dS_ij k_j)   -- by query blocks;
 *   dk_j = scale * (chain over attendable i ascending of dS_ij q_i),
 *   dv_j = chain over attendable i ascending of P_ij dout_i           -- by key blocks.
 * Each quad owns one query (or key) and D/4 of its channels (d = lane, lane + 4, ...). */
#include <math.h>
#include <string.h>

#include <map>
#include <mutex>
#include <vector>

#include "cuda/k_common.cuh"

#define AT_THREADS 256
#define AT_ROWS (AT_THREADS / 4) /* queries (forward, dq) or keys (dk/dv) per block */
#define AT_TILE 32               /* keys (or queries) per shared-memory tile */

/* Dot product of the quad's D/4-channel slices; all 4 lanes return the same bits. */
template <int DPT> __device__ __forceinline__ float quad_dot(const float *mine, const float *other_row, int ql) {
    float p = 0.0f;
#pragma unroll
    for (int i = 0; i < DPT; i++)
        p = __fmaf_rn(mine[i], other_row[ql + 4 * i], p);
    p = p + __shfl_xor_sync(0xffffffffu, p, 1);
    p = p + __shfl_xor_sync(0xffffffffu, p, 2);
    return p;
}

/* Load `count` rows (BF16 or F32) of one head into a float tile [AT_TILE][4 * DPT]; rows past
 * the end and channels past D are zero. */
template <int DPT>
__device__ __forceinline__ void load_tile(float (*tile)[4 * DPT], const void *src, int is_bf16, int64_t row0,
                                          int64_t count, int64_t W, int64_t col0, int64_t D) {
    for (int e = threadIdx.x; e < AT_TILE * 4 * DPT; e += AT_THREADS) {
        int j = e / (4 * DPT), d = e % (4 * DPT);
        float v = 0.0f;
        if (j < count && d < D) {
            int64_t idx = (row0 + j) * W + col0 + d;
            v = is_bf16 ? h3k_bf2f(((const uint16_t *)src)[idx]) : ((const float *)src)[idx];
        }
        tile[j][d] = v;
    }
}

template <int DPT> __global__ void __launch_bounds__(AT_THREADS) attn_forward_kernel(h3c_attn_args a) {
    __shared__ float Ks[AT_TILE][4 * DPT];
    __shared__ float Vs[AT_TILE][4 * DPT];
    __shared__ int64_t kdoc[AT_TILE];
    __shared__ int kok[AT_TILE];
    const int tid = threadIdx.x, ql = tid & 3;
    const int64_t b = blockIdx.z, h = blockIdx.y, S = a.S, D = a.D, W = a.heads * a.D;
    const int64_t s = (int64_t)blockIdx.x * AT_ROWS + (tid >> 2);
    const bool live = s < S;
    const int64_t row = b * S + s;
    float q[DPT], acc[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        q[i] = (live && d < D) ? h3k_bf2f(((const uint16_t *)a.q)[row * W + h * D + d]) : 0.0f;
        acc[i] = 0.0f;
    }
    const int64_t qdoc = (live && a.doc) ? a.doc[s] : 0;
    float m = -INFINITY, l = 0.0f;
    const int64_t ntiles = (S + AT_TILE - 1) / AT_TILE;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t t = 0; t < ntiles; t++) {
            const int64_t k0 = t * AT_TILE, cnt = S - k0 < AT_TILE ? S - k0 : AT_TILE;
            __syncthreads(); /* the previous tile is consumed */
            load_tile<DPT>(Ks, a.k, 1, b * S + k0, cnt, W, h * D, D);
            if (pass == 1) load_tile<DPT>(Vs, a.v, 1, b * S + k0, cnt, W, h * D, D);
            if (tid < AT_TILE) {
                bool ok = tid < cnt && (!a.kv || a.kv[b * S + k0 + tid]);
                kok[tid] = ok;
                kdoc[tid] = (ok && a.doc) ? a.doc[k0 + tid] : 0;
            }
            __syncthreads();
            /* a tile no query of this block may attend is skipped (it contributes nothing) */
            bool any = false;
            if (live)
                for (int j = 0; j < AT_TILE; j++)
                    any = any || (kok[j] && kdoc[j] == qdoc);
            if (!__syncthreads_or(any)) continue;
            for (int j = 0; j < AT_TILE; j++) {
                float sc = quad_dot<DPT>(q, Ks[j], ql) * a.scale;
                if (!(live && kok[j] && kdoc[j] == qdoc)) continue;
                if (pass == 0) {
                    if (sc > m) m = sc;
                } else {
                    float p = expf(sc - m);
                    l = l + p;
#pragma unroll
                    for (int i = 0; i < DPT; i++)
                        acc[i] = __fmaf_rn(p, Vs[j][ql + 4 * i], acc[i]);
                }
            }
        }
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        if (d < D) ((uint16_t *)a.out)[row * W + h * D + d] = h3k_f2bf(l > 0.0f ? acc[i] / l : 0.0f);
    }
    if (ql == 0) {
        a.stats[(row * a.heads + h) * 2] = m;
        a.stats[(row * a.heads + h) * 2 + 1] = l;
    }
}

/* delta[row, h] = FMA chain over d ascending of dout * out (one thread per (row, head)). */
__global__ void attn_delta_kernel(h3c_attn_args a, int64_t pairs) {
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = p / a.heads, h = p % a.heads, W = a.heads * a.D;
        const uint16_t *o = (const uint16_t *)a.out_in + row * W + h * a.D;
        const float *g = a.dout + row * W + h * a.D;
        float acc = 0.0f;
        for (int64_t d = 0; d < a.D; d++)
            acc = __fmaf_rn(g[d], h3k_bf2f(o[d]), acc);
        a.delta_out[p] = acc;
    }
}

template <int DPT> __global__ void __launch_bounds__(AT_THREADS) attn_dq_kernel(h3c_attn_args a) {
    __shared__ float Ks[AT_TILE][4 * DPT];
    __shared__ float Vs[AT_TILE][4 * DPT];
    __shared__ int64_t kdoc[AT_TILE];
    __shared__ int kok[AT_TILE];
    const int tid = threadIdx.x, ql = tid & 3;
    const int64_t b = blockIdx.z, h = blockIdx.y, S = a.S, D = a.D, W = a.heads * a.D;
    const int64_t s = (int64_t)blockIdx.x * AT_ROWS + (tid >> 2);
    const int64_t row = b * S + s;
    float q[DPT], g[DPT], dq[DPT];
    const float lq = s < S ? a.stats_in[(row * a.heads + h) * 2 + 1] : 0.0f;
    const bool live = s < S && lq > 0.0f; /* a query with no key has no gradient */
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        bool in = live && d < D;
        q[i] = in ? h3k_bf2f(((const uint16_t *)a.q)[row * W + h * D + d]) : 0.0f;
        g[i] = in ? a.dout[row * W + h * D + d] : 0.0f;
        dq[i] = 0.0f;
    }
    const float mq = live ? a.stats_in[(row * a.heads + h) * 2] : 0.0f;
    const float delta = live ? a.delta[row * a.heads + h] : 0.0f;
    const int64_t qdoc = (live && a.doc) ? a.doc[s] : 0;
    const int64_t ntiles = (S + AT_TILE - 1) / AT_TILE;
    for (int64_t t = 0; t < ntiles; t++) {
        const int64_t k0 = t * AT_TILE, cnt = S - k0 < AT_TILE ? S - k0 : AT_TILE;
        __syncthreads();
        load_tile<DPT>(Ks, a.k, 1, b * S + k0, cnt, W, h * D, D);
        load_tile<DPT>(Vs, a.v, 1, b * S + k0, cnt, W, h * D, D);
        if (tid < AT_TILE) {
            bool ok = tid < cnt && (!a.kv || a.kv[b * S + k0 + tid]);
            kok[tid] = ok;
            kdoc[tid] = (ok && a.doc) ? a.doc[k0 + tid] : 0;
        }
        __syncthreads();
        bool any = false;
        if (live)
            for (int j = 0; j < AT_TILE; j++)
                any = any || (kok[j] && kdoc[j] == qdoc);
        if (!__syncthreads_or(any)) continue;
        for (int j = 0; j < AT_TILE; j++) {
            float sc = quad_dot<DPT>(q, Ks[j], ql) * a.scale;
            float dp = quad_dot<DPT>(g, Vs[j], ql);
            if (!(live && kok[j] && kdoc[j] == qdoc)) continue;
            float p = expf(sc - mq) / lq;
            float ds = p * (dp - delta);
#pragma unroll
            for (int i = 0; i < DPT; i++)
                dq[i] = __fmaf_rn(ds, Ks[j][ql + 4 * i], dq[i]);
        }
    }
    if (s >= S) return;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        if (d < D) a.dq[row * W + h * D + d] = dq[i] * a.scale;
    }
}

template <int DPT> __global__ void __launch_bounds__(AT_THREADS) attn_dkdv_kernel(h3c_attn_args a) {
    __shared__ float Qs[AT_TILE][4 * DPT];
    __shared__ float Gs[AT_TILE][4 * DPT];
    __shared__ float qm[AT_TILE], ql_sum[AT_TILE], qdelta[AT_TILE];
    __shared__ int64_t qdoc[AT_TILE];
    __shared__ int qok[AT_TILE];
    const int tid = threadIdx.x, ql = tid & 3;
    const int64_t b = blockIdx.z, h = blockIdx.y, S = a.S, D = a.D, W = a.heads * a.D;
    const int64_t j = (int64_t)blockIdx.x * AT_ROWS + (tid >> 2); /* this quad's key */
    const int64_t krow = b * S + j;
    const bool live = j < S && (!a.kv || a.kv[b * S + j]);
    const int64_t kd = (live && a.doc) ? a.doc[j] : 0;
    float k[DPT], v[DPT], dk[DPT], dv[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        bool in = live && d < D;
        k[i] = in ? h3k_bf2f(((const uint16_t *)a.k)[krow * W + h * D + d]) : 0.0f;
        v[i] = in ? h3k_bf2f(((const uint16_t *)a.v)[krow * W + h * D + d]) : 0.0f;
        dk[i] = 0.0f;
        dv[i] = 0.0f;
    }
    const int64_t ntiles = (S + AT_TILE - 1) / AT_TILE;
    for (int64_t t = 0; t < ntiles; t++) {
        const int64_t i0 = t * AT_TILE, cnt = S - i0 < AT_TILE ? S - i0 : AT_TILE;
        __syncthreads();
        load_tile<DPT>(Qs, a.q, 1, b * S + i0, cnt, W, h * D, D);
        load_tile<DPT>(Gs, a.dout, 0, b * S + i0, cnt, W, h * D, D);
        if (tid < AT_TILE) {
            int64_t r = b * S + i0 + tid;
            float lq = tid < cnt ? a.stats_in[(r * a.heads + h) * 2 + 1] : 0.0f;
            bool ok = tid < cnt && lq > 0.0f;
            qok[tid] = ok;
            qm[tid] = ok ? a.stats_in[(r * a.heads + h) * 2] : 0.0f;
            ql_sum[tid] = ok ? lq : 1.0f;
            qdelta[tid] = ok ? a.delta[r * a.heads + h] : 0.0f;
            qdoc[tid] = (ok && a.doc) ? a.doc[i0 + tid] : 0;
        }
        __syncthreads();
        bool any = false;
        if (live)
            for (int i = 0; i < AT_TILE; i++)
                any = any || (qok[i] && qdoc[i] == kd);
        if (!__syncthreads_or(any)) continue;
        for (int i = 0; i < AT_TILE; i++) {
            float sc = quad_dot<DPT>(k, Qs[i], ql) * a.scale;
            float dp = quad_dot<DPT>(v, Gs[i], ql);
            if (!(live && qok[i] && qdoc[i] == kd)) continue;
            float p = expf(sc - qm[i]) / ql_sum[i];
            float ds = p * (dp - qdelta[i]);
#pragma unroll
            for (int c = 0; c < DPT; c++) {
                dv[c] = __fmaf_rn(p, Gs[i][ql + 4 * c], dv[c]);
                dk[c] = __fmaf_rn(ds, Qs[i][ql + 4 * c], dk[c]);
            }
        }
    }
    if (j >= S) return;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        int64_t d = ql + 4 * i;
        if (d < D) {
            if (a.dk) a.dk[krow * W + h * D + d] = dk[i] * a.scale;
            if (a.dv) a.dv[krow * W + h * D + d] = dv[i];
            if (a.dvb) a.dvb[krow * W + h * D + d] = h3k_f2bf(dv[i]);
        }
    }
}

/* ================================================================== tensor-core path (D = 128)
 *
 * The same function as above on the tensor cores (Hopper warpgroup MMA, wgmma.m64nNk16: BF16
 * operands from shared memory or registers, FP32 accumulation), for head_dim 128
 * (docs/numerics/attention_cuda.md).  What keeps it strict:
 *   - compaction: every (item, document) pair is a group; its attendable keys are listed in
 *     ascending position (masked keys are not in the list) and its queries likewise.  Key and
 *     query tiles are cut from these lists, anchored at their first entry, so the tile a live key
 *     falls into, and its slot in the tile, depend only on the live keys before it: inserting or
 *     removing masked keys anywhere moves no tile boundary.  A query row's arithmetic does not
 *     depend on its slot either (every row of an MMA runs the same instructions).
 *   - forward: online softmax over the group's key tiles (128 keys) in ascending order:
 *     s = (q . k) * scale (the products of a key over d in ascending k16 steps), the row maximum
 *     (exact), p = exp(s - m), l = l * exp(m_old - m) + (the row's sum of p in a fixed lane order),
 *     o = o * exp(m_old - m) + bf16(p) v; out = bf16(o / l); stats = (m, l).  exp(x) is
 *     ex2.approx(x * log2 e), one fixed hardware instruction after one FP32 rounding.
 *   - backward: delta as above; P = exp(s - m) / l from the stored stats; dS = P (dP - delta);
 *     dq over the group's key tiles (128) ascending (one CTA per query tile, no atomics); dk and dv
 *     over the group's participating queries (l > 0 and a non-zero dout row for the head,
 *     compacted per head) in ascending tiles of 64 (one CTA per key tile).  bf16(P), bf16(dS) and
 *     bf16(dout) enter the tensor cores, as in the provider's flash kernels.
 * Nothing depends on B, on the number of multiprocessors or on scheduling. */

#include "cuda/k_wgmma.cuh"

#define TC_D 128
#define TC_FQ 128        /* forward: queries per CTA (two warpgroups of 64) */
#define TC_FTHREADS 256  /* forward: threads per CTA */
#define TC_FK 128        /* forward: keys per tile */
#define TC_FSTAGES 3     /* forward: shared-memory stages of (K, V) */
#define TC_DQ 128        /* backward: queries per CTA (dq; two warpgroups of 64) */
#define TC_DQTHREADS 256 /* backward dq: threads per CTA */
#define TC_BK 128        /* backward: keys per tile (dq) */
#define TC_BQ 64         /* backward: queries per tile (dk/dv) */
#define TC_KV 128        /* backward: keys per CTA (dk/dv; two warpgroups of 64) */
#define TC_KVTHREADS 256 /* backward dk/dv: threads per CTA */
#define TC_KVSTAGES 3    /* backward dk/dv: shared-memory stages of (Q, bf16(dout)) */
#define TC_LOG2E 1.4426950408889634f

struct tc_groups {
    int ngroups;
    const int *g_item, *g_qoff, *g_qcnt, *g_koff, *g_kcnt; /* [ngroups] */
    const int *qrows, *krows;                              /* packed row indices, per group contiguous */
    const int *work;                                       /* (group, tile) pairs */
    int nwork;
    /* backward: participating queries per (group, head), compacted */
    const int *bq;     /* [heads][total queries] */
    const int *bq_cnt; /* [ngroups][heads] */
    int total_q;
    /* rows in no group's key list (their keys are masked everywhere): their dk and dv are +0 */
    const int *urows;
    int nurows;
};

/* A tile of R rows x 128 BF16 columns in shared memory, the layout wgmma reads: two [R][64]
 * blocks (columns 0-63, then 64-127), each with the 128-byte swizzle (wg::h3w_swz), the tile
 * 1024-byte aligned.  The same bytes serve as a K-major operand (the reduction over the 128
 * columns: q k^T, dout v^T) and as an MN-major B operand (the reduction over the rows: p v, dS k). */
template <int R> struct tc_tile { static constexpr int HALF = R * 128, BYTES = 2 * HALF; };

__device__ __forceinline__ uint32_t tc_pack(float lo, float hi) {
    return (uint32_t)h3k_f2bf(lo) | ((uint32_t)h3k_f2bf(hi) << 16);
}

/* The same rounding for an MMA operand (P, dS), in one hardware instruction for two values:
 * cvt.rn.bf16x2.f32 is round-to-nearest-even, subnormals kept, so every non-NaN value gets the bits
 * of tc_pack; a NaN becomes the canonical NaN, and any NaN operand makes the product NaN either way.
 * (tc_pack, which keeps a NaN's payload, writes the node outputs.) */
__device__ __forceinline__ uint32_t tc_pack_op(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 16 bytes from global memory to shared address `dst` (cp.async), or 16 zero bytes when `bytes` is 0
 * (the copy's zero fill: nothing is read). */
__device__ __forceinline__ void tc_cp16z(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

/* Gather `count` BF16 rows (this head's 128 columns) into R-row tiles, one per source (NS = 1, or 2 for K
 * and V, Q and dout: the same rows), with asynchronous 16-byte copies (cp.async; the caller commits the
 * group); rows past `count` are zero (the copy's zero fill).  NT threads (the CTA) share the work:
 * thread t moves 16-byte piece t % 16 of rows t / 16, t / 16 + NT / 16, ...  The row indices are loaded
 * first, all at once, so that their latencies overlap instead of following each copy; each copy then
 * costs one address product and the copy itself.  Visible to the tensor cores after tc_wait,
 * tc_fence_async and __syncthreads. */
template <int R, int NT, int NS>
__device__ __forceinline__ void tc_gather_n(uint8_t *const *tiles, const uint16_t *const *srcs, const int *rowidx,
                                            int count, int64_t W, int64_t col0, unsigned tid = threadIdx.x) {
    static_assert(NT % 16 == 0 && (R * 16) % NT == 0, "gather shape");
    constexpr int PER = R * 16 / NT, STEP = NT / 16;
    const int ch = tid & 15, r0 = tid >> 4;
    const int wb = (int)(W * 2); /* row stride in bytes (W <= 65535 x 128) */
    int rows[PER];
#pragma unroll
    for (int k = 0; k < PER; k++)
        rows[k] = r0 + k * STEP < count ? rowidx[r0 + k * STEP] : -1;
#pragma unroll
    for (int n = 0; n < NS; n++) {
        const char *base = (const char *)(srcs[n] + col0 + ch * 8);
        const uint32_t t = wg::smem_u32(tiles[n]) + (ch >> 3) * tc_tile<R>::HALF;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const bool live = rows[k] >= 0;
            tc_cp16z(t + wg::h3w_swz(r0 + k * STEP, (ch & 7) * 8), base + (int64_t)(live ? rows[k] : 0) * wb,
                     live ? 16 : 0);
        }
    }
}

template <int R, int NT>
__device__ __forceinline__ void tc_gather_async(uint8_t *tile, const uint16_t *src, const int *rowidx, int count,
                                                int64_t W, int64_t col0, unsigned tid = threadIdx.x) {
    uint8_t *t[1] = {tile};
    const uint16_t *sp[1] = {src};
    tc_gather_n<R, NT, 1>(t, sp, rowidx, count, W, col0, tid);
}

/* Two tiles of the same rows from two sources (K and V): the row indices are loaded once.  tid: this
 * thread's rank among the NT that share the gather (threadIdx.x unless a subset of the CTA copies). */
template <int R, int NT>
__device__ __forceinline__ void tc_gather2_async(uint8_t *t0, const uint16_t *s0, uint8_t *t1, const uint16_t *s1,
                                                 const int *rowidx, int count, int64_t W, int64_t col0,
                                                 unsigned tid = threadIdx.x) {
    uint8_t *t[2] = {t0, t1};
    const uint16_t *sp[2] = {s0, s1};
    tc_gather_n<R, NT, 2>(t, sp, rowidx, count, W, col0, tid);
}

__device__ __forceinline__ void tc_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void tc_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* This thread's shared-memory writes (cp.async, stores) become visible to the tensor cores' async proxy. */
__device__ __forceinline__ void tc_fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Whether entries [0, R) of an ascending list of distinct row indices with `count` entries are R consecutive rows
 * (the last minus the first is R - 1): such a tile is one box of each tensor. */
template <int R> __device__ __forceinline__ bool tc_consecutive(const int *rowidx, int count) {
    return count == R && rowidx[R - 1] - rowidx[0] == R - 1;
}

/* The first and last entries of a tile of `count` listed rows when it is whole (count == R), else (0, -1): read
 * ahead of tc_stage_fill, so that the loads' latency passes under other work; the tile is consecutive rows iff
 * y - x == R - 1. */
template <int R> __device__ __forceinline__ int2 tc_tile_ends(const int *rowidx, int count) {
    return count == R ? make_int2(rowidx[0], rowidx[R - 1]) : make_int2(0, -1);
}

/* The bulk tensor copy of NS R-row tiles of the consecutive rows [r0, r0 + R) (this head's 128 columns as two boxes
 * of 64 columns x R rows, from the tensor maps' 128-byte swizzle: the bytes and layout tc_gather_n writes), counted
 * in bar's transaction bytes (NS x tc_tile<R>::BYTES, which the caller expects).  One thread issues it. */
template <int R, int NS>
__device__ __forceinline__ void tc_bulk_rows(uint8_t *const *tiles, const CUtensorMap *const *maps, int r0,
                                             int64_t col0, uint64_t *bar) {
#pragma unroll
    for (int n = 0; n < NS; n++) {
        wg::tma_load_2d(tiles[n], maps[n], bar, (int)col0, r0);
        wg::tma_load_2d(tiles[n] + tc_tile<R>::HALF, maps[n], bar, (int)col0 + 64, r0);
    }
}

/* K-major operand: the tile's rows from byte `row_off` of each block, reduction step kk (of 8) over the columns. */
template <int R> __device__ __forceinline__ uint64_t tc_desc_k(const uint8_t *tile, int row_off, int kk) {
    return wg::desc(wg::smem_u32(tile) + (kk >> 2) * tc_tile<R>::HALF + row_off + (kk & 3) * 32, 16, 1024);
}
/* MN-major B operand (N = the 128 columns): reduction rows [16 kk, 16 kk + 16) of the tile. */
template <int R> __device__ __forceinline__ uint64_t tc_desc_mn(const uint8_t *tile, int kk) {
    return wg::desc(wg::smem_u32(tile) + kk * 2048, tc_tile<R>::HALF, 1024);
}

/* 2^x: the hardware's ex2 (a fixed instruction; relative error about 2^-22). */
__device__ __forceinline__ float tc_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* log2(x): the hardware's lg2 (a fixed instruction). */
__device__ __forceinline__ float tc_lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Accumulator fragment (m64nN, FP32: d[j * 4 + e] at row lane/4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2)
 * to BF16 A fragments of the k16 steps over those N columns. */
/* acc += A B over the R rows of an MN-major tile: A (64 x R, BF16) from registers in k16 fragments, the
 * R / 16 k16 steps in ascending order (the accumulator updates o += bf16(p) v, dq += bf16(dS) k,
 * dv += bf16(P^T) dout, dk += bf16(dS^T) q).  The caller fences before and commits after. */
template <int R>
__device__ __forceinline__ void tc_acc_update(float *acc, const uint32_t (*a)[4], const uint8_t *tile) {
#pragma unroll
    for (int kc = 0; kc < R / 16; kc++)
        wg::wg_mma_rs_n128<1>(acc, a[kc], tc_desc_mn<R>(tile, kc), 1);
}

template <int N> __device__ __forceinline__ void tc_to_a(const float *d, uint32_t (*a)[4]) {
#pragma unroll
    for (int kc = 0; kc < N / 16; kc++) {
        a[kc][0] = tc_pack_op(d[8 * kc + 0], d[8 * kc + 1]);
        a[kc][1] = tc_pack_op(d[8 * kc + 2], d[8 * kc + 3]);
        a[kc][2] = tc_pack_op(d[8 * kc + 4], d[8 * kc + 5]);
        a[kc][3] = tc_pack_op(d[8 * kc + 6], d[8 * kc + 7]);
    }
}

/* Sum over the quad of lanes holding one row: (a0 + a1) + (a2 + a3) on every lane. */
__device__ __forceinline__ float tc_quad_sum(float v) {
    v = v + __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ float tc_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_SM90 1
#else
#define TC_SM90 0
#endif

__device__ __forceinline__ uint8_t *tc_smem_base(uint8_t *raw) {
    return (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}

/* One step of the forward's online softmax over a key tile (the tensor-core kernels': this thread's TC_FK / 2 scores of
 * its two rows in s, in the m64nTC_FK accumulator layout).  Keys past kn (a group's last tile) become -inf; m and l,
 * the rows' running maximum and sum, are updated; s is replaced by p = 2^(s c1 - m2); alpha is the factor by which
 * the output accumulated so far is rescaled.  Both forward kernels run exactly these steps. */
__device__ __forceinline__ void tc_softmax_step(float (&s)[TC_FK / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                int kn, int lane, float c1) {
    /* the running maximum of the raw products (keys past the list's end, in a group's last tile: -inf) */
    float mx[2] = {-INFINITY, -INFINITY};
    if (kn == TC_FK) {
#pragma unroll
        for (int j = 0; j < TC_FK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j * 4 + e]);
    } else {
#pragma unroll
        for (int j = 0; j < TC_FK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j * 8 + (lane & 3) * 2 + (e & 1);
                const float v = key < kn ? s[j * 4 + e] : -INFINITY;
                s[j * 4 + e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
    }
    /* alpha = 2^(m2_old - m2_new) with m2 = m c1; the exponent base mb = m2, or 0 while the row has no
     * finite score (then every p is 2^-inf = 0, as a masked key's) */
    float mb[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float mn = fmaxf(m[r], tc_quad_max(mx[r]));
        alpha[r] = m[r] == -INFINITY ? 0.0f : tc_ex2(m[r] * c1 - mn * c1);
        m[r] = mn;
        mb[r] = mn == -INFINITY ? 0.0f : mn * c1;
    }
    /* p = 2^(s c1 - m2): one fma, one ex2 */
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < TC_FK / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = tc_ex2(__fmaf_rn(s[j * 4 + e], c1, -mb[e >> 1]));
            s[j * 4 + e] = p;
            rs[e >> 1] = rs[e >> 1] + p;
        }
#pragma unroll
    for (int r = 0; r < 2; r++)
        l[r] = l[r] * alpha[r] + tc_quad_sum(rs[r]);
}

/* The forward kernels' epilogue, per thread: out = bf16(o / l) for its two query rows (qi = q16 + lane / 4 and 8 more,
 * q16 its warp's first of 16), and their stats (m scale, l); a query with no key: 0 and (-inf, 0). */
__device__ __forceinline__ void tc_forward_store(const h3c_attn_args &a, const float (&o)[TC_D / 2],
                                                 const float (&m)[2], const float (&l)[2], const int *qrows, int qcnt,
                                                 int q16, int lane, int64_t W, int64_t col0, int64_t h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int qi = q16 + (lane >> 2) + 8 * r;
        if (qi >= qcnt) continue;
        const int64_t row = qrows[qi];
        uint16_t *dst = (uint16_t *)a.out + row * W + col0;
#pragma unroll
        for (int j = 0; j < TC_D / 8; j++) {
            const int d = j * 8 + (lane & 3) * 2;
            const float v0 = l[r] > 0.0f ? o[j * 4 + 2 * r] / l[r] : 0.0f;
            const float v1 = l[r] > 0.0f ? o[j * 4 + 2 * r + 1] / l[r] : 0.0f;
            *(uint32_t *)(dst + d) = tc_pack(v0, v1);
        }
        if ((lane & 3) == 0) {
            /* the maximum score: m scale (rounding is monotonic, so this is the maximum of the rounded scores) */
            a.stats[(row * a.heads + h) * 2] = m[r] * a.scale;
            a.stats[(row * a.heads + h) * 2 + 1] = l[r];
        }
    }
}

/* Forward: one CTA per tile of 128 of a group's queries (warpgroup w owns rows [64 w, 64 w + 64)).
 *
 * Software pipeline inside each warpgroup: at key tile i the MMA of s_i = q k_i^T and the MMA of
 * o += bf16(p_{i-1}) v_{i-1} are issued together, and the softmax of s_i (exp, row sums) runs while the
 * tensor cores still work on the second; o is rescaled by alpha_i only after that MMA has completed.  So
 * every operation on o, m and l is the one of the plain loop, in the same order (o_i = alpha_i o_{i-1} +
 * bf16(p_i) v_i): only when the tensor cores do it changes.  Key tiles go through a ring of three
 * shared-memory stages (tile i + 1 is copied while s_i reads tile i and the o update reads tile i - 1). */
__global__ void __launch_bounds__(TC_FTHREADS, 1) attn_tc_forward_kernel(h3c_attn_args a, tc_groups G) {
#if TC_SM90
    extern __shared__ uint8_t tc_smem_raw[];
    constexpr int KB = tc_tile<TC_FK>::BYTES;
    /* Q, then TC_FSTAGES stages of (K, V) */
    uint8_t *Qs = tc_smem_base(tc_smem_raw), *KV = Qs + tc_tile<TC_FQ>::BYTES;
    const int g = G.work[2 * blockIdx.x], t0 = G.work[2 * blockIdx.x + 1] * TC_FQ;
    const int64_t h = blockIdx.y, W = a.heads * TC_D, col0 = h * TC_D;
    const int qcnt = min(G.g_qcnt[g] - t0, TC_FQ), kcnt = G.g_kcnt[g];
    const int *qrows = G.qrows + G.g_qoff[g] + t0, *krows = G.krows + G.g_koff[g];
    const int wgi = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    auto issue_kv = [&](int k0, int stage) {
        uint8_t *Kb = KV + stage * 2 * KB, *Vb = Kb + KB;
        const int kn = min(kcnt - k0, TC_FK);
        tc_gather2_async<TC_FK, TC_FTHREADS>(Kb, (const uint16_t *)a.k, Vb, (const uint16_t *)a.v, krows + k0, kn, W,
                                             col0);
    };
    tc_gather_async<TC_FQ, TC_FTHREADS>(Qs, (const uint16_t *)a.q, qrows, qcnt, W, col0);
    if (kcnt > 0) issue_kv(0, 0);
    tc_commit();
    float o[TC_D / 2], s[TC_FK / 2];
    uint32_t pa[TC_FK / 16][4]; /* bf16(p) of the previous tile, read by its o update */
#pragma unroll
    for (int i = 0; i < TC_D / 2; i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_FK / 2; i++)
        s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_FK / 16; i++)
        pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0u;
    /* m: the row's running maximum of the raw products q . k (the scores are s = (q . k) scale) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float c1 = a.scale * TC_LOG2E; /* 2^(x c1) = exp(x scale) */
    const int ntiles = (kcnt + TC_FK - 1) / TC_FK;
    for (int it = 0; it < ntiles; it++) {
        const int k0 = it * TC_FK, kn = min(kcnt - k0, TC_FK);
        tc_wait<0>(); /* tile it has landed (this thread's copies) */
        tc_fence_async();
        /* Every thread's copies of tile it are visible, and both warpgroups have finished iteration it - 1,
         * whose last wait retired the o update that read stage (it + 1) % 3 (tile it - 2). */
        __syncthreads();
        if (it + 1 < ntiles) {
            issue_kv(k0 + TC_FK, (it + 1) % TC_FSTAGES);
            tc_commit();
        }
        const uint8_t *Ks = KV + (it % TC_FSTAGES) * 2 * KB;
        /* s = q k^T over d in ascending k16 steps, from +0 */
        wg::wg_fence();
#pragma unroll
        for (int kk = 0; kk < TC_D / 16; kk++)
            wg::mma_k16<TC_FK, 0, 0>(s, tc_desc_k<TC_FQ>(Qs, wgi * 64 * 128, kk), tc_desc_k<TC_FK>(Ks, 0, kk), kk > 0);
        wg::wg_commit();
        if (it > 0) {
            /* o += bf16(p_{it-1}) v_{it-1} over that tile's keys in ascending k16 steps */
            const uint8_t *Vp = KV + ((it - 1) % TC_FSTAGES) * 2 * KB + KB;
            tc_acc_update<TC_FK>(o, pa, Vp);
            wg::wg_commit();
            wg::wg_wait<1>(); /* s is ready; the o update may still run */
        } else {
            wg::wg_wait<0>();
        }
        wg::reg_fence<TC_FK / 2>(s);
        float alpha[2];
        tc_softmax_step(s, m, l, alpha, kn, lane, c1);
        wg::wg_wait<0>(); /* the o update of tile it - 1 has completed: o and pa are free */
        wg::reg_fence<TC_D / 2>(o);
#pragma unroll
        for (int j = 0; j < TC_D / 8; j++) {
            o[j * 4 + 0] = o[j * 4 + 0] * alpha[0], o[j * 4 + 1] = o[j * 4 + 1] * alpha[0];
            o[j * 4 + 2] = o[j * 4 + 2] * alpha[1], o[j * 4 + 3] = o[j * 4 + 3] * alpha[1];
        }
        tc_to_a<TC_FK>(s, pa);
    }
    if (ntiles > 0) {
        const uint8_t *Vp = KV + ((ntiles - 1) % TC_FSTAGES) * 2 * KB + KB;
        wg::wg_fence();
        tc_acc_update<TC_FK>(o, pa, Vp);
        wg::wg_commit();
        wg::wg_wait<0>();
        wg::reg_fence<TC_D / 2>(o);
    }
    tc_wait<0>();
    tc_forward_store(a, o, m, l, qrows, qcnt, wgi * 64 + warp * 16, lane, W, col0, h);
#endif
}

/* Forward, warp-specialised (the default since it ran on the H200: same bits as attn_tc_forward_kernel, 9-11% faster at
 * S >= 4253; h3c_attention_force_fwd_v1(1) selects the first kernel, which the tests compare it with): the same per-row
 * arithmetic as attn_tc_forward_kernel, in the same order, with other threads moving the data and a different issue
 * schedule.
 *   - Roles: threads [0, 256) are the two consumer warpgroups (warpgroup w owns query rows [64 w, 64 w + 64) of the
 *     tile, as above); threads [256, 384) are the producers (NP = 128, one warpgroup; it gives registers to the
 * consumers with setmaxnreg: 40 per producer thread, 232 per consumer thread, launched at 168).  The producers gather Q
 * (once) and the key tiles' K and V (the bytes of the same zero-filling cp.async gathers, tc_gather_chunked, in chunks
 * of 32 rows) into TC_FSTAGES stages.
 *   - mbarriers: qfull (count NP) and, per stage s, full[s] (count NP) and empty[s] (count TC_WS_EMPTY = 8, lane 0 of
 *     each consumer warp).  A producer arms a stage's full barrier with cp.async.mbarrier.arrive.noinc: it completes
 *     once every producer's copies into the stage have landed.  Tile j goes to stage j % TC_FSTAGES as use
 *     u = j / TC_FSTAGES: consumers wait on full with parity u & 1; before use u >= 1 the producers wait on empty with
 *     parity (u - 1) & 1.  Neither barrier can run more than one phase ahead of its waiter, so parities are
 *     unambiguous.  After the wait a consumer fences the async proxy (fence.proxy.async) before its MMAs read the
 *     stage.
 *   - Stage lifetime: tile j's K is read by the MMA s_j (issued in iteration j, complete at that iteration's first
 *     wait), its V by the o update issued in iteration j + 1 (complete at iteration j + 1's wgmma.wait_group 0).  So
 *     each consumer warp arrives on empty[(j) % TC_FSTAGES] in iteration j + 1, after that wait; the last tile's stage
 *     is never released (nothing refills it).
 *   - Ping-pong: named barrier 1 + w is "warpgroup w may issue".  Warpgroup w waits on it (bar.sync, 256: its 128
 *     threads and the other warpgroup's 128 arrivals), issues s_i = q k_i^T and o += bf16(p_{i-1}) v_{i-1}, waits
 *     for s_i, then arrives on the other's (bar.arrive 2 - w, 256) and does the softmax of s_i, which so runs while
 *     its own o update and the other warpgroup's MMAs occupy the tensor cores (and the two softmaxes are staggered).
 * Warpgroup 1 opens with one arrival on barrier 1 (warpgroup 0 goes first) and skips its arrival after its last tile,
 * so every barrier's arrivals are consumed (both warpgroups run the same ntiles iterations).  Only issue order across
 * independent warpgroups changes.
 *   - No __syncthreads after the barriers' initialisation. */
#ifndef TC_FWD_V1_DEFAULT
#define TC_FWD_V1_DEFAULT                                                                                              \
    0 /* 0: the forward runs attn_tc_forward_ws_kernel (1: attn_tc_forward_kernel) unless the test hook says otherwise \
       */
#endif
#define TC_WS_EMPTY 8 /* arrivals that release a stage: lane 0 of each of the 8 consumer warps */
#define TC_WS_NP 128  /* producer threads of the warp-specialised forward (one warpgroup) */
#ifndef TC_WS_PREG
#define TC_WS_PREG 40 /* registers per producer thread after setmaxnreg.dec (NP = 128) */
#endif
#ifndef TC_WS_CREG
#define TC_WS_CREG 232 /* registers per consumer thread after setmaxnreg.inc */
#endif
/* setmaxnreg.inc only takes registers that the .dec gave back: the CTA holds 384 x TC_WS_LREG = 384 x 168 = 64512 at
 * launch (65536 / 384 rounded down to the allocation unit of 8: what __launch_bounds__(384, 1) gives, and ptxas
 * reports 168), so 128 x PREG + 256 x CREG must not exceed 64512 (not 65536), or the consumers' .inc waits forever. */
#define TC_WS_LREG (65536 / (TC_FTHREADS + TC_WS_NP) / 8 * 8)
static_assert(TC_WS_PREG % 8 == 0 && TC_WS_CREG % 8 == 0 && TC_WS_PREG >= 24 && TC_WS_CREG <= 256 &&
                  TC_WS_PREG <= TC_WS_LREG && TC_WS_CREG >= TC_WS_LREG,
              "setmaxnreg counts: multiples of 8 in [24, 256], on either side of the launch count");
static_assert(TC_WS_NP * TC_WS_PREG + TC_FTHREADS * TC_WS_CREG <= (TC_FTHREADS + TC_WS_NP) * TC_WS_LREG,
              "setmaxnreg: the consumers' registers must come from those the producers release");
#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)
#ifndef TC_WS_CHUNK
#define TC_WS_CHUNK 32 /* rows per chunk of the producers' gathers */
#endif
#define TC_WS_BAR_BYTES 64 /* qfull, full[TC_FSTAGES], empty[TC_FSTAGES] after the stages */
static_assert((2 * TC_FSTAGES + 1) * 8 <= TC_WS_BAR_BYTES, "forward mbarriers");

/* An arrival on bar once every cp.async this thread has issued so far has landed (.noinc: counted in the
 * barrier's expected count). */
__device__ __forceinline__ void tc_cp_arrive(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(wg::smem_u32(bar)) : "memory");
}
/* Thread 0 sets up n mbarriers of `count` arrivals each; then the CTA waits until they are set up. */
__device__ __forceinline__ void tc_bars_init(uint64_t *bars, int n, unsigned count) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n; i++)
            wg::mbar_init(&bars[i], count);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
}

/* Fill a stage with NS R-row tiles of the same listed rows (tile n at dst + n * tile_bytes, from srcs[n] or
 * maps[n]) by NT threads (this one of rank tid), then this thread's arrival on the stage's barrier bar (count: the NT
 * threads; an arrival that completes once this thread's earlier copies have landed, so the barrier also covers any
 * copies the caller issued before).  A tile of R consecutive rows (ends: its tc_tile_ends) goes by the bulk tensor copy
 * (rank 0 issues it, after adding its bytes to bar's expected transactions) unless `bulk` is 0; the others are gathered
 * by all NT threads.  Every thread has read the same two indices, so all take the same path.  The same bytes land
 * either way. */
template <int R, int NT, int NS>
__device__ __forceinline__ void tc_stage_fill(uint8_t *dst, int tile_bytes, const uint16_t *const *srcs,
                                              const CUtensorMap *const *maps, const int *rowidx, int count, int2 ends,
                                              int64_t W, int64_t col0, int bulk, uint64_t *bar,
                                              unsigned tid = threadIdx.x) {
    uint8_t *tiles[NS];
#pragma unroll
    for (int n = 0; n < NS; n++)
        tiles[n] = dst + n * tile_bytes;
    if (bulk && ends.y - ends.x == R - 1) {
        if (tid == 0) {
            wg::mbar_expect_tx_only(bar, NS * tc_tile<R>::BYTES);
            tc_bulk_rows<R, NS>(tiles, maps, ends.x, col0, bar);
        }
    } else {
        tc_gather_n<R, NT, NS>(tiles, srcs, rowidx, count, W, col0, tid);
    }
    tc_cp_arrive(bar);
}

/* Named barrier ID (1 or 2) for the 256 consumer threads: wait (bar.sync) or arrive without waiting (bar.arrive). */
template <int ID> __device__ __forceinline__ void tc_bar_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(2 * 128) : "memory");
}
/* bar.arrive 2 (warpgroup 1's turn) if to_wg1, bar.arrive 1 (warpgroup 0's turn) if to_wg0: predicated, no branch */
__device__ __forceinline__ void tc_bar_arrive_if(bool to_wg1, bool to_wg0) {
    asm volatile("{\n.reg .pred p1, p2;\nsetp.ne.b32 p1, %0, 0;\nsetp.ne.b32 p2, %1, 0;\n@p1 bar.arrive 2, 256;\n@p2 "
                 "bar.arrive 1, 256;\n}\n" ::"r"((int)to_wg1),
                 "r"((int)to_wg0)
                 : "memory");
}
template <int ID> __device__ __forceinline__ void tc_bar_arrive() {
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(2 * 128) : "memory");
}

/* The producers' gather: the bytes of tc_gather_n (every row of the R-row tiles, rows past `count` zero), NS tiles
 * of the same rows, by the NP producers (rank tid), in chunks of CH rows (the chunk's row indices loaded first, all
 * at once), so that few addresses are live at a time in the producers' small register budget. */
template <int R, int NP, int NS, int CH>
__device__ __forceinline__ void tc_gather_chunked(uint8_t *const *tiles, const uint16_t *const *srcs, const int *rowidx,
                                                  int count, int64_t W, int64_t col0, unsigned tid) {
    static_assert(NP % 16 == 0 && (CH * 16) % NP == 0 && R % CH == 0, "gather shape");
    constexpr int PER = CH * 16 / NP, STEP = NP / 16;
    const int ch = tid & 15, r0 = tid >> 4;
    const int wb = (int)(W * 2); /* row stride in bytes (W <= 65535 x 128) */
    int rows[PER], next[PER];
#pragma unroll
    for (int k = 0; k < PER; k++)
        next[k] = r0 + k * STEP < count ? rowidx[r0 + k * STEP] : -1;
#pragma unroll 1
    for (int c0 = 0; c0 < R; c0 += CH) {
        /* this chunk's indices; the next chunk's are loaded before this chunk's copies are issued */
#pragma unroll
        for (int k = 0; k < PER; k++)
            rows[k] = next[k];
        if (c0 + CH < R) {
#pragma unroll
            for (int k = 0; k < PER; k++)
                next[k] = c0 + CH + r0 + k * STEP < count ? rowidx[c0 + CH + r0 + k * STEP] : -1;
        }
#pragma unroll
        for (int n = 0; n < NS; n++) {
            const char *base = (const char *)(srcs[n] + col0 + ch * 8);
            const uint32_t t = wg::smem_u32(tiles[n]) + (ch >> 3) * tc_tile<R>::HALF;
#pragma unroll
            for (int k = 0; k < PER; k++) {
                const bool live = rows[k] >= 0;
                tc_cp16z(t + wg::h3w_swz(c0 + r0 + k * STEP, (ch & 7) * 8), base + (int64_t)(live ? rows[k] : 0) * wb,
                         live ? 16 : 0);
            }
        }
    }
}

template <int NP>
__global__ void __launch_bounds__(TC_FTHREADS + NP, 1)
    attn_tc_forward_ws_kernel(h3c_attn_args a, tc_groups G, const __grid_constant__ CUtensorMap map_k,
                              const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_q,
                              int bulk) {
#if TC_SM90
    /* one producer warpgroup: setmaxnreg needs whole warpgroups, and with 9 warps (one producer warp) every thread
     * would be held to 168 registers all the same (three warps on one of the four schedulers), which spills the
     * consumers */
    static_assert(NP == 128, "producer threads");
    extern __shared__ uint8_t tc_smem_raw[];
    constexpr int KB = tc_tile<TC_FK>::BYTES;
    /* Q, then TC_FSTAGES stages of (K, V), then the mbarriers */
    uint8_t *Qs = tc_smem_base(tc_smem_raw), *KV = Qs + tc_tile<TC_FQ>::BYTES;
    uint64_t *bars = (uint64_t *)(KV + TC_FSTAGES * 2 * KB);
    uint64_t *qfull = bars, *full = bars + 1, *empty = bars + 1 + TC_FSTAGES;
    const int g = G.work[2 * blockIdx.x], t0 = G.work[2 * blockIdx.x + 1] * TC_FQ;
    const int64_t h = blockIdx.y, W = a.heads * TC_D, col0 = h * TC_D;
    const int qcnt = min(G.g_qcnt[g] - t0, TC_FQ), kcnt = G.g_kcnt[g];
    const int *qrows = G.qrows + G.g_qoff[g] + t0, *krows = G.krows + G.g_koff[g];
    const int ntiles = (kcnt + TC_FK - 1) / TC_FK;
    if (threadIdx.x == 0) {
        wg::mbar_init(qfull, NP);
        wg::ring_bars_init(full, empty, TC_FSTAGES, NP, TC_WS_EMPTY);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= TC_FTHREADS) { /* the producers */
        if constexpr (NP == 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 " TC_STR(TC_WS_PREG) ";\n");
        const unsigned pt = threadIdx.x - TC_FTHREADS;
        uint8_t *tq[1] = {Qs};
        if (bulk && tc_consecutive<TC_FQ>(qrows, qcnt)) { /* Q as one box of consecutive rows, as a key tile */
            if (pt == 0) {
                const CUtensorMap *maps[1] = {&map_q};
                wg::mbar_expect_tx(qfull, tc_tile<TC_FQ>::BYTES);
                tc_bulk_rows<TC_FQ, 1>(tq, maps, qrows[0], col0, qfull);
            } else {
                wg::mbar_arrive(qfull);
            }
        } else {
            const uint16_t *sq[1] = {(const uint16_t *)a.q};
            tc_gather_chunked<TC_FQ, NP, 1, TC_WS_CHUNK>(tq, sq, qrows, qcnt, W, col0, pt);
            tc_cp_arrive(qfull);
        }
        for (int j = 0, s = 0, u = 0; j < ntiles; j++) {
            if (u > 0) wg::mbar_wait(&empty[s], (unsigned)(u - 1) & 1u); /* use u - 1 of stage s has been read */
            uint8_t *tkv[2] = {KV + s * 2 * KB, KV + s * 2 * KB + KB};
            const int k0 = j * TC_FK, kn = min(kcnt - k0, TC_FK);
            /* A whole tile of consecutive rows (ascending distinct indices: the last minus the first is TC_FK - 1) is
             * one box of each tensor: thread 0 has the bulk tensor copy engine write the bytes the gather would
             * (the same swizzled layout) and the others arrive at once; every producer reads the same two indices,
             * so all take the same path and full[s] still counts NP arrivals. */
            if (bulk && tc_consecutive<TC_FK>(krows + k0, kn)) {
                if (pt == 0) {
                    const CUtensorMap *maps[2] = {&map_k, &map_v};
                    wg::mbar_expect_tx(&full[s], 2 * KB);
                    tc_bulk_rows<TC_FK, 2>(tkv, maps, krows[k0], col0, &full[s]);
                } else {
                    wg::mbar_arrive(&full[s]);
                }
            } else {
                const uint16_t *skv[2] = {(const uint16_t *)a.k, (const uint16_t *)a.v};
                tc_gather_chunked<TC_FK, NP, 2, TC_WS_CHUNK>(tkv, skv, krows + k0, kn, W, col0, pt);
                tc_cp_arrive(&full[s]);
            }
            if (++s == TC_FSTAGES) s = 0, u++;
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }
    if constexpr (NP == 128) asm volatile("setmaxnreg.inc.sync.aligned.u32 " TC_STR(TC_WS_CREG) ";\n");
    const int wgi = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float o[TC_D / 2], s[TC_FK / 2];
    uint32_t pa[TC_FK / 16][4]; /* bf16(p) of the previous tile, read by its o update */
#pragma unroll
    for (int i = 0; i < TC_D / 2; i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_FK / 2; i++)
        s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_FK / 16; i++)
        pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0u;
    /* m: the row's running maximum of the raw products q . k (the scores are s = (q . k) scale) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float c1 = a.scale * TC_LOG2E; /* 2^(x c1) = exp(x scale) */
    wg::mbar_wait(qfull, 0u); /* Q has landed (waited even with no key tile: every armed barrier is waited on) */
    if (wgi == 1 && ntiles > 0) tc_bar_arrive<1>(); /* warpgroup 0 issues first */
    for (int it = 0, st = 0, u = 0; it < ntiles; it++) {
        const int kn = min(kcnt - it * TC_FK, TC_FK);
        wg::mbar_wait(&full[st], (unsigned)u & 1u); /* tile it has landed in stage st (every producer's copies) */
        tc_fence_async();                           /* ... and is visible to the tensor cores (and so is Q) */
        const uint8_t *Ks = KV + st * 2 * KB;
        const int pst = st == 0 ? TC_FSTAGES - 1 : st - 1; /* the stage of tile it - 1 */
        if (wgi == 0)                                      /* this warpgroup's turn to issue */
            tc_bar_sync<1>();
        else
            tc_bar_sync<2>();
        /* s = q k^T over d in ascending k16 steps, from +0 */
        wg::wg_fence();
#pragma unroll
        for (int kk = 0; kk < TC_D / 16; kk++)
            wg::mma_k16<TC_FK, 0, 0>(s, tc_desc_k<TC_FQ>(Qs, wgi * 64 * 128, kk), tc_desc_k<TC_FK>(Ks, 0, kk), kk > 0);
        wg::wg_commit();
        if (it > 0) {
            /* o += bf16(p_{it-1}) v_{it-1} over that tile's keys in ascending k16 steps */
            tc_acc_update<TC_FK>(o, pa, KV + pst * 2 * KB + KB);
            wg::wg_commit();
        }
        if (it > 0)
            wg::wg_wait<1>(); /* s is ready; the o update may still run */
        else
            wg::wg_wait<0>();
        wg::reg_fence<TC_FK / 2>(s);
        /* the other warpgroup's turn, now that s_it has completed (its MMAs queue behind this warpgroup's o update
         * while this one does the softmax).  Not earlier: an arrival between the o update's commit and this wait makes
         * ptxas serialise the wgmma (C7514); one between s's commit and the o update's issue compiles clean but lets
         * the other warpgroup's s_it run alongside this one's, so the two softmaxes would start together again. */
        tc_bar_arrive_if(wgi == 0, wgi == 1 && it + 1 < ntiles);
        float alpha[2];
        tc_softmax_step(s, m, l, alpha, kn, lane, c1);
        wg::wg_wait<0>(); /* the o update of tile it - 1 has completed: o and pa are free, and stage pst is read */
        wg::reg_fence<TC_D / 2>(o);
        if (it > 0) {
            __syncwarp();
            if (lane == 0) wg::mbar_arrive(&empty[pst]); /* this warp is done with tile it - 1's K and V */
        }
#pragma unroll
        for (int j = 0; j < TC_D / 8; j++) {
            o[j * 4 + 0] = o[j * 4 + 0] * alpha[0], o[j * 4 + 1] = o[j * 4 + 1] * alpha[0];
            o[j * 4 + 2] = o[j * 4 + 2] * alpha[1], o[j * 4 + 3] = o[j * 4 + 3] * alpha[1];
        }
        tc_to_a<TC_FK>(s, pa);
        if (++st == TC_FSTAGES) st = 0, u++;
    }
    if (ntiles > 0) {
        const uint8_t *Vp = KV + ((ntiles - 1) % TC_FSTAGES) * 2 * KB + KB;
        wg::wg_fence();
        tc_acc_update<TC_FK>(o, pa, Vp);
        wg::wg_commit();
        wg::wg_wait<0>();
        wg::reg_fence<TC_D / 2>(o);
    }
    tc_forward_store(a, o, m, l, qrows, qcnt, wgi * 64 + warp * 16, lane, W, col0, h);
#endif
}

/* delta[row, h] (as attn_delta_kernel: the FMA chain over d ascending), the participation flag
 * (l > 0 and a non-zero dout row), and dout rounded once to BF16 (the tensor cores' operand, the
 * rounding the gathers used to do per tile).
 * One warp per 32 consecutive (row, head) pairs (pair p's 128 values at p * 128: W = heads * 128).  The warp
 * copies the pairs' dout and out, 32 columns at a time, into shared memory with loads that are consecutive across
 * the lanes (one 128-byte row of dout per instruction), writing bf16(dout) as it goes; then lane i runs pair i's
 * chain over those 32 columns.  The chain is the plain one: acc = fma(dout_e, out_e, acc) for e = 0, 1, ..., 127
 * from +0, one thread per pair, so the layout changes where values are read, not the arithmetic.  (One thread
 * per pair reading its own 768 bytes made every load instruction touch 32 lines and ran at a sixth of the
 * memory bandwidth.) */
#define TC_DW 2 /* warps per block of the delta kernel */
__global__ void __launch_bounds__(32 * TC_DW)
    attn_tc_delta_kernel(h3c_attn_args a, int64_t pairs, uint8_t *part, uint16_t *gb, float *lse) {
    __shared__ float sg[TC_DW][32][33], so[TC_DW][32][33]; /* [pair][column of the chunk], padded: no conflicts */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint16_t *out = (const uint16_t *)a.out_in;
    for (int64_t p0 = ((int64_t)blockIdx.x * TC_DW + w) * 32; p0 < pairs; p0 += (int64_t)gridDim.x * TC_DW * 32) {
        const int np = pairs - p0 < 32 ? (int)(pairs - p0) : 32; /* pairs of this warp (uniform) */
        float acc = 0.0f;
        unsigned nzbits = 0; /* bit i: pair i has a nonzero dout */
        for (int c0 = 0; c0 < TC_D; c0 += 32) {
            /* 16 pairs' loads in flight before the first store (a store to gb could alias dout as far as the compiler
             * knows, so it would keep later loads behind it) */
            for (int i0 = 0; i0 < np; i0 += 16) {
                float gv[16];
                uint16_t ov[16];
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    const int64_t at = (p0 + min(i0 + u, np - 1)) * TC_D + c0 + lane; /* past np: a row again */
                    gv[u] = a.dout[at];
                    ov[u] = out[at];
                }
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    const int i = i0 + u;
                    if (i < np) {
                        sg[w][i][lane] = gv[u];
                        so[w][i][lane] = h3k_bf2f(ov[u]);
                        gb[(p0 + i) * TC_D + c0 + lane] = h3k_f2bf(gv[u]); /* tc_pack's rounding, one at a time */
                        if (__ballot_sync(0xffffffffu, gv[u] != 0.0f)) nzbits |= 1u << i;
                    }
                }
            }
            __syncwarp();
            if (lane < np) {
#pragma unroll 8
                for (int e = 0; e < 32; e++)
                    acc = __fmaf_rn(sg[w][lane][e], so[w][lane][e], acc);
            }
            __syncwarp(); /* the chunk is read before the next overwrites it */
        }
        const int64_t p = p0 + lane;
        bool takes_part = false;
        if (lane < np) {
            a.delta_out[p] = acc;
            const float l = a.stats_in[p * 2 + 1];
            takes_part = ((nzbits >> lane) & 1u) && l > 0.0f;
            part[p] = takes_part;
            /* log2 of the softmax denominator, m log2 e + log2 l (one fma): P = 2^(s scale log2 e - lse) */
            lse[p] = l > 0.0f ? __fmaf_rn(a.stats_in[p * 2], TC_LOG2E, tc_lg2(l)) : 0.0f;
        }
        /* a pair that takes no part gets dq +0 here, the warp writing its 512 bytes together; the dq kernel writes
         * every other pair's (every row is a query of exactly one group), so dq needs no clearing beforehand */
        unsigned zero = __ballot_sync(0xffffffffu, lane < np && !takes_part);
        if (a.dq)
            for (; zero; zero &= zero - 1) {
                const int i = __ffs(zero) - 1;
                *(float4 *)(a.dq + (p0 + i) * TC_D + 4 * lane) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
    }
}

/* dk and dv of the rows in no group's key list: +0 (every listed key's rows are written by the dk/dv kernel, so
 * nothing else needs clearing).  One float4 per thread of the n x W values. */
__global__ void attn_tc_zero_rows_kernel(const int *rows, int n, int64_t W, float *dk, float *dv, uint16_t *dvb) {
    const int64_t per = W / 4, total = (int64_t)n * per;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t off = (int64_t)rows[e / per] * W + (e % per) * 4;
        if (dk) *(float4 *)(dk + off) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (dv) *(float4 *)(dv + off) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (dvb) *(uint2 *)(dvb + off) = make_uint2(0u, 0u);
    }
}

/* Participating queries of each (group, head), ascending: one block per pair.  Each of the TC_CW warps takes a
 * contiguous run of the group's query rows, counts its participants (pass 1), and after the block has added the
 * counts of the warps before it, writes them from that offset (pass 2): the list of the one-warp scan, with 32
 * warps' loads in flight instead of one (a long sequence has one group: one warp per head walked all its rows). */
#define TC_CW 32
__global__ void __launch_bounds__(32 * TC_CW)
    attn_tc_compact_kernel(tc_groups G, int64_t heads, const uint8_t *part, int *bq, int *bq_cnt) {
    __shared__ int wcount[TC_CW];
    const int g = blockIdx.x, h = blockIdx.y, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int off = G.g_qoff[g], cnt = G.g_qcnt[g];
    const int steps = (cnt + 31) / 32, per = (steps + TC_CW - 1) / TC_CW; /* steps of 32 rows, per warp */
    const int s0 = min(w * per, steps), s1 = min(s0 + per, steps);
    auto flag = [&](int i, int &row) {
        row = i < cnt ? G.qrows[off + i] : 0;
        return i < cnt && part[(int64_t)row * heads + h] != 0;
    };
    int n = 0;
    for (int s = s0; s < s1; s++) {
        int row;
        n += __popc(__ballot_sync(0xffffffffu, flag(s * 32 + lane, row)));
    }
    if (lane == 0) wcount[w] = n;
    __syncthreads();
    int base = 0;
    for (int k = 0; k < w; k++)
        base += wcount[k];
    for (int s = s0; s < s1; s++) {
        int row;
        const bool f = flag(s * 32 + lane, row);
        const unsigned bal = __ballot_sync(0xffffffffu, f);
        if (f) bq[(int64_t)h * G.total_q + off + base + __popc(bal & ((1u << lane) - 1u))] = row;
        base += __popc(bal);
    }
    if (threadIdx.x == 0) {
        int total = 0;
        for (int k = 0; k < TC_CW; k++)
            total += wcount[k];
        bq_cnt[g * heads + h] = total;
    }
}

/* ------------------------------------------------------------------ the stored bf16(dS)
 *
 * The dk/dv kernel forms bf16(dS^T) for every (key, query) pair of a group and head: dq's operand too.  It stores
 * it, and the dq kernel reads it back instead of forming s, dP and dS again (two of its three products).  The
 * layout is the dq MMA's own: 16 x 16 blocks of (16 queries, 16 keys), 512 bytes each, lane l's 16 bytes being its
 * four A registers of that k16 step (rows lane/4 and lane/4 + 8, keys 2 (lane % 4) + {0, 1} and + 8), so that a warp
 * stores or loads one block in one coalesced instruction.  Block (Qi, Ki) of group g and head h (Qi: queries
 * [16 Qi, 16 Qi + 16) of the (group, head)'s compacted query list; Ki: keys [16 Ki, 16 Ki + 16) of the group's key
 * list) is block Qi nk + Ki of the pair's region, nq = 4 ceil(qcnt / 64) and nk = 4 ceil(kcnt / 64) (the dk/dv
 * kernel writes whole tiles of 64 queries and of 64 keys); the regions of a chunk of heads [h0, h0 + nh) follow
 * each other, group by group, head by head inside a group. */
/* The stored dS's 16-row blocks along a group's queries or keys: whole 64-row tiles, four blocks each.  A group's
 * region per head is tc_ds_blocks16(queries) x tc_ds_blocks16(keys) blocks (tc_plan_build counts them, tc_ds_region
 * finds them; scripts/memory_plan.py counts the same). */
__host__ __device__ __forceinline__ int tc_ds_blocks16(int count) { return 4 * ((count + 63) / 64); }

struct tc_ds {
    uint4 *base;           /* the chunk's blocks, or NULL (no dq asked for: nothing is stored) */
    const long long *goff; /* [ngroups] blocks of the groups before, per head */
    int h0, nh;            /* the chunk's heads */
};

__device__ __forceinline__ uint4 *tc_ds_region(const tc_ds &D, const tc_groups &G, int g, int h, int *nk) {
    const int nq = tc_ds_blocks16(G.g_qcnt[g]);
    *nk = tc_ds_blocks16(G.g_kcnt[g]);
    return D.base + (D.goff[g] * D.nh + (long long)(h - D.h0) * nq * *nk) * 32;
}

/* One 8 x 8 block of 16-bit values in the MMA fragment layout (lane l: row l/4, columns 2 (l % 4) + {0, 1}),
 * transposed across the warp (a data movement: no value changes). */
__device__ __forceinline__ uint32_t tc_trans8(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

#define TC_DSSTAGES 4                          /* dq: shared-memory stages of K */
#define TC_DSTHREADS (TC_DQTHREADS + TC_WS_NP) /* dq: two consumer warpgroups and a producer warpgroup */

/* dq for one tile of 128 of a group's participating queries (of head h; warpgroup w owns rows [64 w, 64 w + 64)),
 * over the group's key tiles of 128 in ascending order: dq += bf16(dS_i) k_i, the tile's keys in eight ascending
 * k16 steps, bf16(dS) as the dk/dv kernel stored it.  Keys past the list's end (a group's last tile) enter as
 * dS = +0 against zero-filled K rows; queries past the tile's end read +0 and are not written.
 *
 * A producer warpgroup fills a ring of TC_DSSTAGES stages of K (the bulk tensor copy, or gathered) on full[s]; the
 * consumers' eight warps release a stage on empty[s].  The registers move to the consumers as in the warp-specialised
 * forward (setmaxnreg: TC_WS_PREG per producer, TC_WS_CREG per consumer), which their three dS buffers need.  Each
 * consumer warp loads its own dS blocks straight into registers (one coalesced 512-byte load per block), two key tiles
 * ahead of the MMAs that read them.  Each row's dq is its warpgroup's one chain over the same tiles in the same order,
 * whichever stage or load brings them. */
__global__ void __launch_bounds__(TC_DSTHREADS, 1)
    attn_tc_dq_kernel(h3c_attn_args a, tc_groups G, tc_ds D, const __grid_constant__ CUtensorMap map_k, int bulk) {
#if TC_SM90
    extern __shared__ uint8_t tc_smem_raw[];
    constexpr int KB = tc_tile<TC_BK>::BYTES;
    uint8_t *ring = tc_smem_base(tc_smem_raw);
    __shared__ __align__(8) uint64_t full[TC_DSSTAGES], empty[TC_DSSTAGES];
    const int g = G.work[2 * blockIdx.x], t0 = G.work[2 * blockIdx.x + 1] * TC_DQ;
    const int h = D.h0 + (int)blockIdx.y;
    const int64_t W = a.heads * TC_D, col0 = (int64_t)h * TC_D;
    const int qcnt = G.bq_cnt[g * a.heads + h], qn = min(qcnt - t0, TC_DQ);
    if (qn <= 0) return;
    const int *qrows = G.bq + (int64_t)h * G.total_q + G.g_qoff[g] + t0, *krows = G.krows + G.g_koff[g];
    const int kcnt = G.g_kcnt[g], ntiles = (kcnt + TC_BK - 1) / TC_BK;
    const int warp_all = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        wg::ring_bars_init(full, empty, TC_DSSTAGES, TC_WS_NP, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= TC_DQTHREADS) { /* the producers: K */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 " TC_STR(TC_WS_PREG) ";\n");
        const unsigned pt = threadIdx.x - TC_DQTHREADS;
        const uint16_t *srcs[1] = {(const uint16_t *)a.k};
        for (int it = 0; it < ntiles; it++) {
            const int st = it % TC_DSSTAGES, k0 = it * TC_BK, kn = min(kcnt - k0, TC_BK);
            if (it >= TC_DSSTAGES) wg::mbar_wait(&empty[st], (unsigned)(it / TC_DSSTAGES - 1) & 1u);
            uint8_t *tk[1] = {ring + st * KB};
            /* a whole tile of consecutive rows is one box (producer 0 issues it, the others arrive at once); every
             * producer reads the same two indices, so all take the same path and full[st] counts TC_WS_NP arrivals */
            if (bulk && tc_consecutive<TC_BK>(krows + k0, kn)) {
                if (pt == 0) {
                    const CUtensorMap *maps[1] = {&map_k};
                    wg::mbar_expect_tx(&full[st], KB);
                    tc_bulk_rows<TC_BK, 1>(tk, maps, krows[k0], col0, &full[st]);
                } else {
                    wg::mbar_arrive(&full[st]);
                }
            } else {
                tc_gather_chunked<TC_BK, TC_WS_NP, 1, TC_WS_CHUNK>(tk, srcs, krows + k0, kn, W, col0, pt);
                tc_cp_arrive(&full[st]);
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " TC_STR(TC_WS_CREG) ";\n");
    const int wgi = warp_all >> 2, warp = warp_all & 3;
    int nk;
    /* this warp's row of dS blocks: its 16 queries (block t0 / 16 + 4 wgi + warp of the pair's list) against every
     * key block; only blocks with a live query and a listed key are read (the dk/dv kernel wrote those) */
    const uint4 *dsrow = tc_ds_region(D, G, g, h, &nk);
    const int qb = wgi * 4 + warp;
    const bool wlive = qb * 16 < qn;
    const int nk_live = (kcnt + 15) / 16;
    dsrow += (int64_t)(t0 / 16 + qb) * nk * 32 + lane;
    auto load = [&](uint4(&f)[TC_BK / 16], int it) {
#pragma unroll
        for (int kc = 0; kc < TC_BK / 16; kc++) {
            const int kb = it * (TC_BK / 16) + kc;
            f[kc] = wlive && kb < nk_live ? __ldcs(dsrow + (int64_t)kb * 32) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    float dq[TC_D / 2];
#pragma unroll
    for (int i = 0; i < TC_D / 2; i++)
        dq[i] = 0.0f;
    auto step = [&](int it, uint4(&f)[TC_BK / 16]) {
        const int st = it % TC_DSSTAGES, k0 = it * TC_BK;
        if (k0 + TC_BK > kcnt) { /* a group's last tile: the dS of keys past the list's end is +0 */
#pragma unroll
            for (int kc = 0; kc < TC_BK / 16; kc++) {
                const int klo = k0 + kc * 16 + (lane & 3) * 2; /* the keys of registers 0, 1; + 8 for 2, 3 */
                const uint32_t m0 = (klo < kcnt ? 0xffffu : 0u) | (klo + 1 < kcnt ? 0xffff0000u : 0u);
                const uint32_t m1 = (klo + 8 < kcnt ? 0xffffu : 0u) | (klo + 9 < kcnt ? 0xffff0000u : 0u);
                f[kc].x &= m0, f[kc].y &= m0, f[kc].z &= m1, f[kc].w &= m1;
            }
        }
        wg::mbar_wait(&full[st], (unsigned)(it / TC_DSSTAGES) & 1u);
        tc_fence_async();
        wg::wg_fence();
#pragma unroll
        for (int kc = 0; kc < TC_BK / 16; kc++) {
            const uint32_t r[4] = {f[kc].x, f[kc].y, f[kc].z, f[kc].w};
            wg::wg_mma_rs_n128<1>(dq, r, tc_desc_mn<TC_BK>(ring + st * KB, kc), 1);
        }
        wg::wg_commit();
        wg::wg_wait<0>();
        wg::reg_fence<TC_D / 2>(dq);
        __syncwarp();
        if (lane == 0) wg::mbar_arrive(&empty[st]); /* this warp is done with stage st */
    };
    /* three register buffers of dS: tile it's in use while tiles it + 1 and it + 2 are loading */
    uint4 fa[TC_BK / 16], fb[TC_BK / 16], fc[TC_BK / 16];
    load(fa, 0);
    load(fb, 1);
    for (int it = 0; it < ntiles; it += 3) {
        load(fc, it + 2);
        step(it, fa);
        if (it + 1 >= ntiles) break;
        load(fa, it + 3);
        step(it + 1, fb);
        if (it + 2 >= ntiles) break;
        load(fb, it + 4);
        step(it + 2, fc);
    }
    const int qrow0 = wgi * 64;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int qi = qrow0 + warp * 16 + (lane >> 2) + 8 * r;
        if (qi >= qn) continue;
        float *dst = a.dq + (int64_t)qrows[qi] * W + col0;
#pragma unroll
        for (int j = 0; j < TC_D / 8; j++)
            *(float2 *)(dst + j * 8 + (lane & 3) * 2) =
                make_float2(dq[j * 4 + 2 * r] * a.scale, dq[j * 4 + 2 * r + 1] * a.scale);
    }
#endif
}

/* dk, dv for one tile of 128 of a group's keys, warpgroup w owning keys [64 w, 64 w + 64) of the tile, over
 * the group's participating queries (head h) in ascending tiles of 64; both warpgroups share every gathered
 * Q, bf16(dout), lse and delta tile (each is gathered once per 128 keys).
 *
 * Which warpgroup or CTA computes a key changes none of its bits.  The key tiles of 128 are cut from the
 * group's list at its first entry, so warpgroup w's keys are exactly a tile of 64 cut the same way (keys
 * [t0 + 64 w, t0 + 64 w + 64) of the list), each in the same row of its warpgroup's 64 (and in the same
 * swizzle phase: 64 is a multiple of 8).  A key's dk and dv are its own rows of the MMAs: s^T and dP^T are
 * its row of K (V) against the query tile over d in eight ascending k16 steps from +0; P^T and dS^T are
 * formed from them and the queries' lse and delta alone; dv and dk add bf16(P^T) bf16(dout) and bf16(dS^T) q
 * over the query tiles in ascending order, four ascending k16 steps each; then dk * scale.  No other key
 * enters, so neither the other warpgroup nor the CTA (nor whether the tile's other half exists) can move
 * a bit.  A last tile of at most 64 keys leaves warpgroup 1 with no key: it only helps with the copies.
 *
 * Software pipeline inside each warpgroup, as in dq: the MMAs of s^T_i and dP^T_i are issued with the dv/dk
 * update of query tile i - 1, and P^T_i, dS^T_i are formed while that update runs; dv and dk see the same
 * additions in the same order as the plain loop (tile i's update is issued only after tile i - 1's has
 * completed).  Query tiles go through three shared-memory stages: tile i + 1 is copied while s^T_i reads
 * tile i and the update of tile i - 1 reads its stage. */
__global__ void __launch_bounds__(TC_KVTHREADS, 1)
    attn_tc_dkdv_kernel(h3c_attn_args a, tc_groups G, const uint16_t *gb, const float *lse, tc_ds D,
                        const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_g,
                        const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                        int bulk) {
#if TC_SM90
    extern __shared__ uint8_t tc_smem_raw[];
    constexpr int KB = tc_tile<TC_KV>::BYTES, QB = tc_tile<TC_BQ>::BYTES;
    /* K, V (128 rows), then TC_KVSTAGES stages of (Q, bf16(dout)) and of the queries' lse and delta */
    uint8_t *Ks = tc_smem_base(tc_smem_raw), *Vs = Ks + KB, *QG = Vs + KB;
    __shared__ __align__(16) float qlse_buf[TC_KVSTAGES][TC_BQ];
    __shared__ __align__(16) float qdel_buf[TC_KVSTAGES][TC_BQ];
    /* qfull[s]: stage s's Q, bf16(dout), lse, delta have landed; qfull[TC_KVSTAGES]: K and V */
    __shared__ __align__(8) uint64_t qfull[TC_KVSTAGES + 1];
    const int g = G.work[2 * blockIdx.x], t0 = G.work[2 * blockIdx.x + 1] * TC_KV;
    const int64_t h = D.h0 + (int64_t)blockIdx.y, W = a.heads * TC_D, col0 = h * TC_D;
    const int kn = min(G.g_kcnt[g] - t0, TC_KV);
    const int *krows = G.krows + G.g_koff[g] + t0, *qrows = G.bq + h * G.total_q + G.g_qoff[g];
    const int qcnt = G.bq_cnt[g * a.heads + h];
    const int wgi = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int krow0 = wgi * 64; /* this warpgroup's rows of the K and V tiles */
    /* whether this warpgroup has a key (uniform over it; read through a shuffle so that the compiler knows it
     * is uniform over the warp: a branch it thinks divergent around the MMAs makes ptxas serialise them) */
    const bool active = __shfl_sync(0xffffffffu, (int)(kn > krow0), 0) != 0;
    /* where this warp's bf16(dS^T) goes, for dq: its 16 keys are key block kb of the group, and query tile it is
     * query blocks 4 it .. 4 it + 3 (NULL: no dq asked for) */
    int ds_nk = 0;
    uint4 *ds_at = NULL;
    /* uniform over the CTA, and read through a shuffle so that the compiler knows it (see `active`) */
    const bool ds_on = __shfl_sync(0xffffffffu, (int)(D.base != NULL), 0) != 0;
    if (ds_on) {
        const int kb = (t0 + krow0 + warp * 16) / 16;
        ds_at = tc_ds_region(D, G, g, (int)h, &ds_nk) + (int64_t)kb * 32 + lane;
    }
    tc_bars_init(qfull, TC_KVSTAGES + 1, TC_KVTHREADS);
    /* Q, bf16(dout), lse and delta of query tile q0 into `stage`, then this thread's arrival on its barrier */
    auto ends_q = [&](int q0) { return tc_tile_ends<TC_BQ>(qrows + q0, min(qcnt - q0, TC_BQ)); };
    auto issue_q = [&](int q0, int stage, int2 ends) {
        uint8_t *Qb = QG + stage * 2 * QB;
        const int qn = min(qcnt - q0, TC_BQ);
        if (threadIdx.x < TC_BQ) {
            const int i = threadIdx.x;
            if (i < qn) {
                const int64_t row = qrows[q0 + i];
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                 (uint32_t)__cvta_generic_to_shared(&qlse_buf[stage][i])),
                             "l"(lse + row * a.heads + h)
                             : "memory");
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                 (uint32_t)__cvta_generic_to_shared(&qdel_buf[stage][i])),
                             "l"(a.delta + row * a.heads + h)
                             : "memory");
            } else {
                qlse_buf[stage][i] = 0.0f;
                qdel_buf[stage][i] = 0.0f;
            }
        }
        const uint16_t *srcs[2] = {(const uint16_t *)a.q, gb};
        const CUtensorMap *maps[2] = {&map_q, &map_g};
        tc_stage_fill<TC_BQ, TC_KVTHREADS, 2>(Qb, QB, srcs, maps, qrows + q0, qn, ends, W, col0, bulk, &qfull[stage]);
    };
    { /* K and V, on their own barrier */
        const uint16_t *srcs[2] = {(const uint16_t *)a.k, (const uint16_t *)a.v};
        const CUtensorMap *maps[2] = {&map_k, &map_v};
        tc_stage_fill<TC_KV, TC_KVTHREADS, 2>(Ks, KB, srcs, maps, krows, kn, tc_tile_ends<TC_KV>(krows, kn), W, col0,
                                              bulk, &qfull[TC_KVSTAGES]);
    }
    if (qcnt > 0) issue_q(0, 0, ends_q(0));
    float dk[TC_D / 2], dv[TC_D / 2], st[TC_BQ / 2], dpt[TC_BQ / 2];
    uint32_t pa[TC_BQ / 16][4], da[TC_BQ / 16][4]; /* bf16(P^T), bf16(dS^T) of the previous query tile */
#pragma unroll
    for (int i = 0; i < TC_D / 2; i++)
        dk[i] = dv[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_BQ / 2; i++)
        st[i] = dpt[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < TC_BQ / 16; i++)
        pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = da[i][0] = da[i][1] = da[i][2] = da[i][3] = 0u;
    static_assert(TC_KVSTAGES == 3, "dk/dv: the pipeline reads two query-tile stages while a third is copied");
    wg::mbar_wait(&qfull[TC_KVSTAGES], 0u); /* K and V have landed (waited even with no query tile) */
    const float c1 = a.scale * TC_LOG2E;
    const int ntiles = (qcnt + TC_BQ - 1) / TC_BQ;
    for (int it = 0; it < ntiles; it++) {
        const int2 next = it + 1 < ntiles ? ends_q((it + 1) * TC_BQ) : make_int2(0, -1); /* loads under the waits */
        wg::mbar_wait(&qfull[it % TC_KVSTAGES], (unsigned)(it / TC_KVSTAGES) & 1u);      /* query tile it has landed */
        tc_fence_async();
        /* Every thread's copies of tile it are visible, and both warpgroups have finished iteration it - 1,
         * whose last wait retired the dv/dk update of tile it - 2, the last reader of stage (it + 1) % 3
         * (three stages: tile it + 1 is copied while tile it is read by s^T, dP^T and tile it - 1 by the update). */
        __syncthreads();
        if (it + 1 < ntiles) issue_q((it + 1) * TC_BQ, (it + 1) % TC_KVSTAGES, next);
        if (!active) continue;
        const uint8_t *Qs = QG + (it % TC_KVSTAGES) * 2 * QB, *Gs = Qs + QB;
        const float *qlse = qlse_buf[it % TC_KVSTAGES];
        const float *qdel = qdel_buf[it % TC_KVSTAGES];
        /* transposed scores: rows are this warpgroup's 64 keys, columns the query tile's 64 queries */
        wg::wg_fence();
#pragma unroll
        for (int kk = 0; kk < TC_D / 16; kk++)
            wg::mma_k16<TC_BQ, 0, 0>(st, tc_desc_k<TC_KV>(Ks, krow0 * 128, kk), tc_desc_k<TC_BQ>(Qs, 0, kk), kk > 0);
#pragma unroll
        for (int kk = 0; kk < TC_D / 16; kk++)
            wg::mma_k16<TC_BQ, 0, 0>(dpt, tc_desc_k<TC_KV>(Vs, krow0 * 128, kk), tc_desc_k<TC_BQ>(Gs, 0, kk), kk > 0);
        wg::wg_commit();
        if (it > 0) {
            /* dv += bf16(P^T) bf16(dout), dk += bf16(dS^T) q of tile it - 1, over its queries in ascending k16
             * steps */
            const uint8_t *Qp = QG + ((it - 1) % TC_KVSTAGES) * 2 * QB, *Gp = Qp + QB;
            tc_acc_update<TC_BQ>(dv, pa, Gp);
            tc_acc_update<TC_BQ>(dk, da, Qp);
            wg::wg_commit();
            wg::wg_wait<1>(); /* s^T and dP^T are ready; the dv/dk update may still run */
        } else {
            wg::wg_wait<0>();
        }
        wg::reg_fence<TC_BQ / 2>(st);
        wg::reg_fence<TC_BQ / 2>(dpt);
        /* P^T = 2^(s^T scale log2 e - lse), dS^T = P^T (dP^T - delta), with no mask: a key's dk and dv
         * (a row here) depend on its own row only, and a query slot past the tile's end has Q and dout
         * rows of +0 and lse = delta = 0, so s = dP = +0, P = 1, dS = +0, and (finite inputs) its products with
         * those +0 rows add +0, as a masked zero would. */
#pragma unroll
        for (int j = 0; j < TC_BQ / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = j * 8 + (lane & 3) * 2 + (e & 1);
                const float p = tc_ex2(__fmaf_rn(st[j * 4 + e], c1, -qlse[qi]));
                dpt[j * 4 + e] = p * (dpt[j * 4 + e] - qdel[qi]);
                st[j * 4 + e] = p;
            }
        wg::wg_wait<0>(); /* the dv/dk update of tile it - 1 has completed: pa and da are free */
        wg::reg_fence<TC_D / 2>(dv);
        wg::reg_fence<TC_D / 2>(dk);
        tc_to_a<TC_BQ>(st, pa);
        tc_to_a<TC_BQ>(dpt, da);
        if (ds_on) {
            /* dq's operand: each 8 x 8 block of bf16(dS^T) transposed into bf16(dS) (rows queries, columns keys),
             * the four of a (16 queries, 16 keys) block in the order of dq's A registers, one 512-byte store per
             * block (streaming: read once, by the dq kernel) */
#pragma unroll
            for (int kc = 0; kc < TC_BQ / 16; kc++)
                __stcs(
                    ds_at + (int64_t)(it * (TC_BQ / 16) + kc) * ds_nk * 32,
                    make_uint4(tc_trans8(da[kc][0]), tc_trans8(da[kc][2]), tc_trans8(da[kc][1]), tc_trans8(da[kc][3])));
        }
    }
    if (ntiles > 0 && active) {
        /* the last tile's update */
        const uint8_t *Qp = QG + ((ntiles - 1) % TC_KVSTAGES) * 2 * QB, *Gp = Qp + QB;
        wg::wg_fence();
        tc_acc_update<TC_BQ>(dv, pa, Gp);
        tc_acc_update<TC_BQ>(dk, da, Qp);
        wg::wg_commit();
        wg::wg_wait<0>();
        wg::reg_fence<TC_D / 2>(dv);
        wg::reg_fence<TC_D / 2>(dk);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (!active) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int kj = krow0 + warp * 16 + (lane >> 2) + 8 * r;
        if (kj >= kn) continue; /* rows past the list's end (zero-filled K, V) are not written */
        const int64_t row = krows[kj];
#pragma unroll
        for (int j = 0; j < TC_D / 8; j++) {
            const int d = j * 8 + (lane & 3) * 2;
            if (a.dk)
                *(float2 *)(a.dk + row * W + col0 + d) =
                    make_float2(dk[j * 4 + 2 * r] * a.scale, dk[j * 4 + 2 * r + 1] * a.scale);
            if (a.dv) *(float2 *)(a.dv + row * W + col0 + d) = make_float2(dv[j * 4 + 2 * r], dv[j * 4 + 2 * r + 1]);
            if (a.dvb) /* h3k_f2bf's bits, two values per cvt */
                *(uint32_t *)(a.dvb + row * W + col0 + d) = h3k_f2bf2(dv[j * 4 + 2 * r], dv[j * 4 + 2 * r + 1]);
        }
    }
#endif
}

/* ------------------------------------------------------------------ groups (host) */

struct tc_plan {
    void *ws;
    tc_groups G;
    int nfwd, ndq, nkv;
    const int *fwork, *dqwork, *kvwork;
    const long long *ds_goff; /* backward: each group's first block of the stored dS, per head (tc_ds) */
    long long ds_blocks;      /* backward: the stored dS's 512-byte blocks per head */
};

/* Groups of (item, document), their query and attendable-key rows in ascending position, and the
 * work lists; built on the host from doc and key_valid (copied from the device when they live
 * there: one synchronisation) and uploaded in one workspace. */
/* The masks on the host: the caller's own host tensors (the model's case: no copy, no synchronisation), else
 * copied from the device into docv / kvv (one synchronisation). */
static h3s_status tc_masks_host(const char *op, const h3c_attn_args *a, std::vector<int64_t> &docv,
                                std::vector<uint8_t> &kvv, const int64_t **doc_out, const uint8_t **kv_out) {
    const int64_t B = a->B, S = a->S;
    const int64_t *doc = a->doc_host;
    const uint8_t *kv = a->kv_host;
    if (a->doc && !doc) {
        docv.resize((size_t)S);
        cudaError_t e = cudaMemcpyAsync(docv.data(), a->doc, (size_t)S * 8, cudaMemcpyDeviceToHost, H3K_STREAM);
        if (e != cudaSuccess) return h3s_fail(H3S_ERR_DEVICE, "%s: mask.doc copy: %s", op, cudaGetErrorString(e));
        doc = docv.data();
    }
    if (a->kv && !kv) {
        kvv.resize((size_t)(B * S));
        cudaError_t e = cudaMemcpyAsync(kvv.data(), a->kv, (size_t)(B * S), cudaMemcpyDeviceToHost, H3K_STREAM);
        if (e != cudaSuccess) return h3s_fail(H3S_ERR_DEVICE, "%s: mask.key_valid copy: %s", op, cudaGetErrorString(e));
        kv = kvv.data();
    }
    if ((a->doc && !a->doc_host) || (a->kv && !a->kv_host)) {
        cudaError_t e = cudaStreamSynchronize(H3K_STREAM);
        if (e != cudaSuccess) return h3s_fail(H3S_ERR_DEVICE, "%s: %s", op, cudaGetErrorString(e));
    }
    *doc_out = a->doc ? doc : NULL;
    *kv_out = a->kv ? kv : NULL;
    return H3S_OK;
}

static h3s_status tc_plan_build(const char *op, const h3c_attn_args *a, int backward, const int64_t *doc,
                                const uint8_t *kv, tc_plan *P) {
    memset(P, 0, sizeof *P);
    const int64_t B = a->B, S = a->S;
    if (B * S > INT32_MAX / 2)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: %lld rows exceed the tensor-core attention's 2^30 limit", op,
                        (long long)(B * S));
    /* documents: positions of each distinct value, ascending (values in order of first use) */
    std::vector<std::vector<int>> docs;
    if (doc) {
        std::map<int64_t, size_t> slot;
        for (int64_t s = 0; s < S; s++) {
            auto it = slot.find(doc[(size_t)s]);
            if (it == slot.end()) {
                slot[doc[(size_t)s]] = docs.size();
                docs.push_back(std::vector<int>());
                docs.back().push_back((int)s);
            } else {
                docs[it->second].push_back((int)s);
            }
        }
    } else {
        docs.push_back(std::vector<int>());
        for (int64_t s = 0; s < S; s++)
            docs[0].push_back((int)s);
    }
    std::vector<int> gi, gqo, gqc, gko, gkc, qrows, krows, urows, fw, dw, kw;
    for (int64_t b = 0; b < B; b++)
        for (size_t d = 0; d < docs.size(); d++) {
            const int g = (int)gi.size();
            gi.push_back((int)b);
            gqo.push_back((int)qrows.size());
            gko.push_back((int)krows.size());
            for (int s : docs[d]) {
                const int row = (int)(b * S + s);
                qrows.push_back(row);
                if (!kv || kv[(size_t)row])
                    krows.push_back(row);
                else
                    urows.push_back(row);
            }
            gqc.push_back((int)qrows.size() - gqo.back());
            gkc.push_back((int)krows.size() - gko.back());
            for (int t = 0; t * TC_FQ < gqc.back(); t++)
                fw.push_back(g), fw.push_back(t);
            for (int t = 0; t * TC_DQ < gqc.back(); t++)
                dw.push_back(g), dw.push_back(t);
            for (int t = 0; t * TC_KV < gkc.back(); t++)
                kw.push_back(g), kw.push_back(t);
        }
    const int ng = (int)gi.size(), nq = (int)qrows.size(), nk = (int)krows.size();
    if ((int64_t)fw.size() / 2 > INT32_MAX || a->heads > 65535)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: %lld heads exceed the grid limits", op, (long long)a->heads);
    std::vector<int> all;
    auto put = [&](const std::vector<int> &v) {
        size_t off = all.size();
        all.insert(all.end(), v.begin(), v.end());
        all.resize((all.size() + 3) & ~(size_t)3);
        return off;
    };
    const size_t o_gi = put(gi), o_gqo = put(gqo), o_gqc = put(gqc), o_gko = put(gko), o_gkc = put(gkc);
    const size_t o_qr = put(qrows), o_kr = put(krows), o_ur = put(urows), o_fw = put(fw), o_dw = put(dw),
                 o_kw = put(kw);
    /* the stored dS (tc_ds): each group's blocks per head, 4 ceil(queries / 64) x 4 ceil(keys / 64), and where
     * they start, as 64-bit counts (two ints each, the list starting on 16 bytes) */
    std::vector<int> goff;
    long long ds_blocks = 0;
    for (int g = 0; g < (int)gi.size(); g++) {
        goff.push_back((int)(ds_blocks & 0xffffffffLL)), goff.push_back((int)(ds_blocks >> 32));
        ds_blocks += (long long)tc_ds_blocks16(gqc[(size_t)g]) * tc_ds_blocks16(gkc[(size_t)g]);
    }
    const size_t o_go = put(goff);
    size_t bytes = all.size() * sizeof(int);
    const size_t o_bq = all.size(), n_bq = backward ? (size_t)a->heads * (size_t)(nq > 0 ? nq : 1) : 0;
    const size_t o_bc = o_bq + n_bq, n_bc = backward ? (size_t)ng * (size_t)a->heads : 0;
    bytes += (n_bq + n_bc) * sizeof(int);
    H3S_TRY(h3c_ws_alloc(op, bytes > 0 ? bytes : 4, &P->ws));
    int *base = (int *)P->ws;
    cudaError_t e = cudaMemcpyAsync(base, all.data(), all.size() * sizeof(int), cudaMemcpyHostToDevice, H3K_STREAM);
    if (e == cudaSuccess) e = cudaStreamSynchronize(H3K_STREAM); /* the host vectors go out of scope */
    if (e != cudaSuccess) {
        h3c_ws_free(P->ws);
        P->ws = NULL;
        return h3s_fail(H3S_ERR_DEVICE, "%s: attention plan upload: %s", op, cudaGetErrorString(e));
    }
    P->G.ngroups = ng;
    P->G.g_item = base + o_gi, P->G.g_qoff = base + o_gqo, P->G.g_qcnt = base + o_gqc;
    P->G.g_koff = base + o_gko, P->G.g_kcnt = base + o_gkc;
    P->G.qrows = base + o_qr, P->G.krows = base + o_kr;
    P->G.total_q = nq;
    P->G.urows = base + o_ur, P->G.nurows = (int)urows.size();
    P->G.bq = backward ? base + o_bq : NULL;
    P->G.bq_cnt = backward ? base + o_bc : NULL;
    P->nfwd = (int)fw.size() / 2, P->ndq = (int)dw.size() / 2, P->nkv = (int)kw.size() / 2;
    P->fwork = base + o_fw, P->dqwork = base + o_dw, P->kvwork = base + o_kw;
    P->ds_goff = (const long long *)(base + o_go);
    P->ds_blocks = ds_blocks;
    (void)nk;
    return H3S_OK;
}

/* Plans by content.  Every block of a model pass calls attention with the same masks and geometry, so the plan
 * (group lists, work lists) is built and uploaded once and found again by its key: the geometry, forward or
 * backward, and the mask bytes themselves (kept in the entry and compared in full, so another mask can never be
 * served a stale plan).  A backward plan's compacted-query region is rewritten by every backward call, in stream
 * order.  At most TC_PLAN_SLOTS entries, least recently used evicted; an evicted plan's device memory goes back
 * to the pool in stream order (kernels queued before still read it safely).  The plan decides which CTA does
 * what, never an output's arithmetic, so a cached plan gives the bits a fresh one gives.  g_plan_lock is held
 * from the lookup to the last launch that reads the plan. */
#define TC_PLAN_SLOTS 16

struct tc_plan_entry {
    std::vector<uint8_t> key;
    tc_plan P;
    uint64_t used;
};

static std::mutex g_plan_lock;
static std::vector<tc_plan_entry> g_plans;
static uint64_t g_plan_tick = 0;

template <class T> static void key_put(std::vector<uint8_t> &k, const T *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    k.insert(k.end(), b, b + n * sizeof(T));
}

/* The plan for this call, from the cache or built and inserted (the caller holds g_plan_lock). */
static h3s_status tc_plan_get(const char *op, const h3c_attn_args *a, int backward, tc_plan *P) {
    std::vector<int64_t> docv;
    std::vector<uint8_t> kvv;
    const int64_t *doc = NULL;
    const uint8_t *kv = NULL;
    H3S_TRY(tc_masks_host(op, a, docv, kvv, &doc, &kv));
    std::vector<uint8_t> key;
    const int64_t head[6] = {a->B, a->S, a->heads, backward, doc != NULL, kv != NULL};
    key_put(key, head, 6);
    if (doc) key_put(key, doc, (size_t)a->S);
    if (kv) key_put(key, kv, (size_t)(a->B * a->S));
    for (tc_plan_entry &e : g_plans)
        if (e.key == key) {
            e.used = ++g_plan_tick;
            *P = e.P;
            return H3S_OK;
        }
    H3S_TRY(tc_plan_build(op, a, backward, doc, kv, P));
    if (g_plans.size() >= TC_PLAN_SLOTS) {
        size_t lru = 0;
        for (size_t i = 1; i < g_plans.size(); i++)
            if (g_plans[i].used < g_plans[lru].used) lru = i;
        h3c_ws_free(g_plans[lru].P.ws);
        g_plans.erase(g_plans.begin() + (long)lru);
    }
    g_plans.push_back(tc_plan_entry{key, *P, ++g_plan_tick});
    return H3S_OK;
}

/* Drop every cached plan (h3s_cuda_release_caches; the caller has synchronised the stream). */
extern "C" void h3c_attention_release_plans(void) {
    std::lock_guard<std::mutex> lk(g_plan_lock);
    for (tc_plan_entry &e : g_plans)
        h3c_ws_free(e.P.ws);
    g_plans.clear();
}

/* dynamic shared memory (+ 1024 for the alignment of the swizzled tiles): forward Q (128 rows) + TC_FSTAGES x (K, V)
 * of 128 rows; dq TC_DSSTAGES x K of 128 rows; dk/dv K, V (128 rows) +
 * TC_KVSTAGES x (Q, bf16(dout)) of 64 rows.  All within the 227 KB a CTA may use (static_assert below). */
#define TC_SMEM_FWD (1024 + tc_tile<TC_FQ>::BYTES + 2 * TC_FSTAGES * tc_tile<TC_FK>::BYTES)
#define TC_SMEM_DQ (1024 + TC_DSSTAGES * tc_tile<TC_BK>::BYTES)
#define TC_SMEM_KV (1024 + 2 * tc_tile<TC_KV>::BYTES + 2 * TC_KVSTAGES * tc_tile<TC_BQ>::BYTES)
/* the warp-specialised forward: the same, then its mbarriers */
#define TC_SMEM_FWS (TC_SMEM_FWD + TC_WS_BAR_BYTES)

static_assert(TC_SMEM_FWS <= 227 * 1024 && TC_SMEM_DQ <= 227 * 1024 &&
                  TC_SMEM_KV + 2 * TC_KVSTAGES * TC_BQ * 4 <= 227 * 1024,
              "tensor-core attention: shared memory per CTA");

static h3s_status tc_smem_attr(const char *op) {
    static int done = 0;
    if (done) return H3S_OK;
    const void *ks[4] = {(const void *)attn_tc_forward_kernel, (const void *)attn_tc_dq_kernel,
                         (const void *)attn_tc_dkdv_kernel, (const void *)attn_tc_forward_ws_kernel<TC_WS_NP>};
    const int bytes[4] = {TC_SMEM_FWD, TC_SMEM_DQ, TC_SMEM_KV, TC_SMEM_FWS};
    for (int i = 0; i < 4; i++) {
        cudaError_t e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, bytes[i]);
        if (e != cudaSuccess)
            return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
    }
    done = 1;
    return H3S_OK;
}

/* The tensor-core kernels move rows in 16-byte pieces: every row operand must start on 16 bytes
 * (row strides are multiples of 256 bytes at head_dim 128). */
static h3s_status tc_aligned(const char *op, const h3c_attn_args *a, int backward) {
    uintptr_t u = (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v;
    if (backward)
        u |= (uintptr_t)a->out_in | (uintptr_t)a->dout | (uintptr_t)a->dq | (uintptr_t)a->dk | (uintptr_t)a->dv |
             (uintptr_t)a->dvb;
    else
        u |= (uintptr_t)a->out;
    if (u & 15u)
        return h3s_fail(H3S_ERR_UNSUPPORTED,
                        "%s: an attention operand is not 16-byte aligned; the tensor-core kernels need aligned rows",
                        op);
    return H3S_OK;
}

/* Test hook: on > 0 = the forward through attn_tc_forward_kernel (every thread copies, one barrier per key tile),
 * 0 = through the warp-specialised attn_tc_forward_ws_kernel, < 0 = the build's default (TC_FWD_V1_DEFAULT); the
 * same bits either way. */
static int g_attn_fwd_v1 = TC_FWD_V1_DEFAULT;
extern "C" void h3c_attention_force_fwd_v1(int on) { g_attn_fwd_v1 = on < 0 ? TC_FWD_V1_DEFAULT : on > 0 ? 1 : 0; }

/* Test hook: on = every tile of the warp-specialised forward and of the backward gathered by the threads' copies,
 * none by the bulk tensor copy (the same bytes in shared memory, so the same bits). */
static int g_attn_gather_only = 0;
extern "C" void h3c_attention_force_gather(int on) { g_attn_gather_only = on ? 1 : 0; }

/* Whether tiles of consecutive rows may go by the bulk tensor copy: not under the test hook, nor where a row or
 * column index would not fit the copy engine's 32-bit coordinates. */
static int tc_bulk_ok(const h3c_attn_args *a) {
    return !g_attn_gather_only && a->B * a->S <= INT32_MAX && a->heads * TC_D <= INT32_MAX;
}

static h3s_status tc_forward(const char *op, const h3c_attn_args *a) {
    H3S_TRY(tc_aligned(op, a, 0));
    H3S_TRY(tc_smem_attr(op));
    std::lock_guard<std::mutex> lk(g_plan_lock);
    tc_plan P;
    H3S_TRY(tc_plan_get(op, a, 0, &P));
    h3s_status st = H3S_OK;
    if (P.nfwd > 0) {
        tc_groups G = P.G;
        G.work = P.fwork, G.nwork = P.nfwd;
        const dim3 grid((unsigned)P.nfwd, (unsigned)a->heads);
        if (g_attn_fwd_v1)
            attn_tc_forward_kernel<<<grid, TC_FTHREADS, TC_SMEM_FWD, H3K_STREAM>>>(*a, G);
        else {
            /* tensor maps over K and V ([B S, heads 128], boxes of 64 columns x TC_FK rows) for the key tiles of
             * consecutive rows */
            const int64_t rows = a->B * a->S, W = a->heads * TC_D;
            const int bulk = tc_bulk_ok(a);
            CUtensorMap mk, mv, mq;
            memset(&mk, 0, sizeof mk), memset(&mv, 0, sizeof mv), memset(&mq, 0, sizeof mq);
            if (bulk) {
                H3S_TRY(h3c_tma_map_bf16(op, &mk, a->k, rows, W, W, 64, TC_FK));
                H3S_TRY(h3c_tma_map_bf16(op, &mv, a->v, rows, W, W, 64, TC_FK));
                H3S_TRY(h3c_tma_map_bf16(op, &mq, a->q, rows, W, W, 64, TC_FQ));
            }
            attn_tc_forward_ws_kernel<TC_WS_NP>
                <<<grid, TC_FTHREADS + TC_WS_NP, TC_SMEM_FWS, H3K_STREAM>>>(*a, G, mk, mv, mq, bulk);
        }
        st = h3c_launch_check(op);
    }
    return st;
}

/* The stored dS's budget (tc_ds): heads go through the dk/dv and dq kernels in chunks whose blocks fit in it (at
 * least one head per chunk).  A chunk decides which launch computes a head, never a value: the same bits for any
 * budget (test_gpu_ops runs one head per chunk against the default). */
#define TC_DS_BUDGET_DEFAULT (8ull << 30)
static unsigned long long g_ds_budget = TC_DS_BUDGET_DEFAULT;
extern "C" void h3c_attention_set_ds_budget(unsigned long long bytes) {
    g_ds_budget = bytes ? bytes : TC_DS_BUDGET_DEFAULT;
}

static h3s_status tc_backward(const char *op, const h3c_attn_args *a) {
    H3S_TRY(tc_aligned(op, a, 1));
    H3S_TRY(tc_smem_attr(op));
    const int64_t rows = a->B * a->S, W = a->heads * TC_D, pairs = rows * a->heads;
    std::lock_guard<std::mutex> lk(g_plan_lock);
    tc_plan P;
    H3S_TRY(tc_plan_get(op, a, 1, &P));
    /* heads per chunk of the stored dS: as many as the budget holds, the chunks then evened out */
    const int heads = (int)a->heads;
    const unsigned long long per_head = (unsigned long long)P.ds_blocks * 512ull;
    int hpc = heads;
    if (a->dq && per_head > 0) {
        const unsigned long long fit = g_ds_budget / per_head;
        hpc = fit < 1 ? 1 : fit < (unsigned long long)heads ? (int)fit : heads;
        const int nchunks = (heads + hpc - 1) / hpc;
        hpc = (heads + nchunks - 1) / nchunks;
    }
    /* one workspace: bf16(dout) [rows, W], the rows' lse [pairs], the participation flags [pairs], then one
     * chunk's stored dS */
    void *ws = NULL;
    const size_t gb_bytes = ((size_t)(rows * W) * 2 + 255) & ~(size_t)255;
    const size_t lse_bytes = ((size_t)pairs * sizeof(float) + 255) & ~(size_t)255;
    const size_t part_bytes = ((size_t)(pairs > 0 ? pairs : 1) + 255) & ~(size_t)255;
    const size_t ds_bytes = a->dq ? (size_t)per_head * (size_t)hpc : 0;
    h3s_status st = h3c_ws_alloc(op, gb_bytes + lse_bytes + part_bytes + ds_bytes, &ws);
    uint16_t *gb = (uint16_t *)ws;
    float *lse = ws ? (float *)((uint8_t *)ws + gb_bytes) : NULL;
    uint8_t *part = ws ? (uint8_t *)ws + gb_bytes + lse_bytes : NULL;
    uint4 *ds = ws && ds_bytes ? (uint4 *)((uint8_t *)ws + gb_bytes + lse_bytes + part_bytes) : NULL;
    /* tensor maps for the tiles of consecutive rows (boxes of 64 columns): K (dq's key tiles of 128 rows), Q and
     * bf16(dout) (dk/dv's query tiles of 64), K and V (dk/dv's once-per-CTA tiles of 128) */
    const int bulk = tc_bulk_ok(a);
    CUtensorMap mk, mq, mg, mk1, mv1;
    memset(&mk, 0, sizeof mk), memset(&mq, 0, sizeof mq), memset(&mg, 0, sizeof mg);
    memset(&mk1, 0, sizeof mk1), memset(&mv1, 0, sizeof mv1);
    if (st == H3S_OK && bulk) {
        st = h3c_tma_map_bf16(op, &mk, a->k, rows, W, W, 64, TC_BK);
        if (st == H3S_OK) st = h3c_tma_map_bf16(op, &mq, a->q, rows, W, W, 64, TC_BQ);
        if (st == H3S_OK) st = h3c_tma_map_bf16(op, &mg, gb, rows, W, W, 64, TC_BQ);
        if (st == H3S_OK) st = h3c_tma_map_bf16(op, &mk1, a->k, rows, W, W, 64, TC_KV);
        if (st == H3S_OK) st = h3c_tma_map_bf16(op, &mv1, a->v, rows, W, W, 64, TC_KV);
    }
    if (st == H3S_OK) {
        attn_tc_delta_kernel<<<h3k_blocks((pairs + 31) / 32, TC_DW), 32 * TC_DW, 0, H3K_STREAM>>>(*a, pairs, part, gb,
                                                                                                  lse);
        st = h3c_launch_check(op);
    }
    /* rows no kernel writes are +0: dq of the (row, head) pairs that take no part (the delta kernel above), dk and dv
     * of the rows whose key is masked everywhere (here) */
    if (st == H3S_OK && (a->dk || a->dv || a->dvb) && P.G.nurows > 0) {
        attn_tc_zero_rows_kernel<<<h3k_blocks((int64_t)P.G.nurows * (W / 4), 256), 256, 0, H3K_STREAM>>>(
            P.G.urows, P.G.nurows, W, a->dk, a->dv, a->dvb);
        st = h3c_launch_check(op);
    }
    if (st == H3S_OK && P.G.ngroups > 0) {
        attn_tc_compact_kernel<<<dim3((unsigned)P.G.ngroups, (unsigned)a->heads), 32 * TC_CW, 0, H3K_STREAM>>>(
            P.G, a->heads, part, (int *)P.G.bq, (int *)P.G.bq_cnt);
        st = h3c_launch_check(op);
    }
    /* per chunk of heads: dk, dv and the stored bf16(dS) (the dk/dv kernel), then dq from it */
    const int need_kv = (a->dk || a->dv || a->dvb || a->dq) && P.nkv > 0;
    for (int h0 = 0; st == H3S_OK && need_kv && h0 < heads; h0 += hpc) {
        const int nh = heads - h0 < hpc ? heads - h0 : hpc;
        tc_ds D;
        D.base = ds, D.goff = P.ds_goff, D.h0 = h0, D.nh = nh;
        tc_groups G = P.G;
        G.work = P.kvwork, G.nwork = P.nkv;
        attn_tc_dkdv_kernel<<<dim3((unsigned)P.nkv, (unsigned)nh), TC_KVTHREADS, TC_SMEM_KV, H3K_STREAM>>>(
            *a, G, gb, lse, D, mq, mg, mk1, mv1, bulk);
        st = h3c_launch_check(op);
        if (st == H3S_OK && a->dq && P.ndq > 0) {
            G.work = P.dqwork, G.nwork = P.ndq;
            attn_tc_dq_kernel<<<dim3((unsigned)P.ndq, (unsigned)nh), TC_DSTHREADS, TC_SMEM_DQ, H3K_STREAM>>>(*a, G, D,
                                                                                                             mk, bulk);
            st = h3c_launch_check(op);
        }
    }
    if (ws) h3c_ws_free(ws);
    return st;
}

static h3s_status attn_grid(const char *op, const h3c_attn_args *a, dim3 *grid) {
    int64_t bx = (a->S + AT_ROWS - 1) / AT_ROWS;
    if (bx > 0x7fffffffLL || a->heads > 65535 || a->B > 65535)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: %lld items x %lld heads exceed the grid limits", op, (long long)a->B,
                        (long long)a->heads);
    *grid = dim3((unsigned)bx, (unsigned)a->heads, (unsigned)a->B);
    return H3S_OK;
}

#define AT_DISPATCH(KERNEL, D, ...)                                                                                    \
    do {                                                                                                               \
        if ((D) <= 16)                                                                                                 \
            KERNEL<4><<<__VA_ARGS__>>>(*a);                                                                            \
        else if ((D) <= 32)                                                                                            \
            KERNEL<8><<<__VA_ARGS__>>>(*a);                                                                            \
        else if ((D) <= 64)                                                                                            \
            KERNEL<16><<<__VA_ARGS__>>>(*a);                                                                           \
        else                                                                                                           \
            KERNEL<32><<<__VA_ARGS__>>>(*a);                                                                           \
    } while (0)

/* Test hook: 1 = head_dim 128 through the two-pass CUDA-core kernels (the comparison baseline). */
static int g_attn_reference = 0;
extern "C" void h3c_attention_force_reference(int on) { g_attn_reference = on ? 1 : 0; }

extern "C" h3s_status h3c_attention_forward(const char *op, const h3c_attn_args *a) {
    if (a->D < 1 || a->D > 128)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: head_dim %lld is outside the CUDA kernels' range [1, 128]", op,
                        (long long)a->D);
    if (a->B <= 0 || a->S <= 0) return H3S_OK;
    if (a->D == TC_D && !g_attn_reference) return tc_forward(op, a);
    dim3 grid;
    H3S_TRY(attn_grid(op, a, &grid));
    AT_DISPATCH(attn_forward_kernel, a->D, grid, AT_THREADS, 0, H3K_STREAM);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_attention_backward(const char *op, const h3c_attn_args *a) {
    if (a->D < 1 || a->D > 128)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: head_dim %lld is outside the CUDA kernels' range [1, 128]", op,
                        (long long)a->D);
    if (a->B <= 0 || a->S <= 0) return H3S_OK;
    if (a->D == TC_D && !g_attn_reference) return tc_backward(op, a);
    dim3 grid;
    H3S_TRY(attn_grid(op, a, &grid));
    const int64_t pairs = a->B * a->S * a->heads;
    attn_delta_kernel<<<h3k_blocks(pairs, 256), 256, 0, H3K_STREAM>>>(*a, pairs);
    H3S_TRY(h3c_launch_check(op));
    if (a->dq) {
        AT_DISPATCH(attn_dq_kernel, a->D, grid, AT_THREADS, 0, H3K_STREAM);
        H3S_TRY(h3c_launch_check(op));
    }
    if (a->dk || a->dv || a->dvb) {
        AT_DISPATCH(attn_dkdv_kernel, a->D, grid, AT_THREADS, 0, H3K_STREAM);
        H3S_TRY(h3c_launch_check(op));
    }
    return H3S_OK;
}

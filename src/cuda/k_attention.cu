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
        }
    }
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

extern "C" h3s_status h3c_attention_forward(const char *op, const h3c_attn_args *a) {
    if (a->D < 1 || a->D > 128)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: head_dim %lld is outside the CUDA kernels' range [1, 128]", op,
                        (long long)a->D);
    if (a->B <= 0 || a->S <= 0) return H3S_OK;
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
    dim3 grid;
    H3S_TRY(attn_grid(op, a, &grid));
    const int64_t pairs = a->B * a->S * a->heads;
    attn_delta_kernel<<<h3k_blocks(pairs, 256), 256, 0, H3K_STREAM>>>(*a, pairs);
    H3S_TRY(h3c_launch_check(op));
    if (a->dq) {
        AT_DISPATCH(attn_dq_kernel, a->D, grid, AT_THREADS, 0, H3K_STREAM);
        H3S_TRY(h3c_launch_check(op));
    }
    if (a->dk || a->dv) {
        AT_DISPATCH(attn_dkdv_kernel, a->D, grid, AT_THREADS, 0, H3K_STREAM);
        H3S_TRY(h3c_launch_check(op));
    }
    return H3S_OK;
}

/* The canonical cross-row reduction on the GPU (STRICT.md section 3, ops/fold.h).
 *
 * Two kernels, no atomics:
 *   1. partial: one block per (column block of 128, 256-row tile, table row); each thread owns
 *      one column and runs over the tile's rows in ascending order, starting from the first
 *      contributing row's value, and writes the tile partial to a workspace
 *      [tiles][rows of the output][N] with a "tile has a contributing row" flag;
 *   2. final: one thread per output element folds the partials in ascending tile order,
 *      starting from the first contributing tile's partial; an output row no tile
 *      contributes to gets 0.
 * Contributions are computed on the fly from the operator's inputs (mode), so the workspace
 * is tiles x rows x N floats, never M x N.  The tile (256 rows) and the orders are constants:
 * the bits do not depend on the launch shape, and equal the CPU fold's structure. */
#include "cuda/k_common.cuh"

#define FOLD_COLS 128

__device__ __forceinline__ float fold_contrib(const h3c_fold_args &a, int64_t m, int64_t n, int64_t row_index) {
    switch (a.mode) {
    case H3C_FOLD_COPY: return a.dy[m * a.ld_dy + n];
    case H3C_FOLD_RMS_DW: {
        float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]) * a.inv[m];
        float s =
            a.table ? 1.0f + h3k_bf2f(((const uint16_t *)a.table)[row_index * a.ld_table + a.scale_off + n]) : 1.0f;
        float g = a.dy[m * a.ld_dy + n] * s;
        return g * xh;
    }
    case H3C_FOLD_RMS_DSCALE: {
        float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]) * a.inv[m];
        float wk = a.w ? h3k_bf2f(((const uint16_t *)a.w)[n]) : 1.0f;
        return a.dy[m * a.ld_dy + n] * (xh * wk);
    }
    case H3C_FOLD_PRODUCT: return a.dy[m * a.ld_dy + n] * h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]);
    default: return 0.0f;
    }
}

__global__ void __launch_bounds__(FOLD_COLS)
    fold_partial_kernel(h3c_fold_args a, float *partial, uint8_t *has, int64_t rows_out, int *flag) {
    const int64_t n = (int64_t)blockIdx.x * FOLD_COLS + threadIdx.x;
    const int64_t tile = blockIdx.y, r = blockIdx.z;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    float part = 0.0f;
    bool have = false;
    for (int64_t m = m0; m < m1; m++) {
        int64_t row_index = 0;
        if (a.index) {
            row_index = a.index[m];
            if (row_index < 0 || row_index >= a.index_limit) {
                if (threadIdx.x == 0) h3k_report_index(flag, a.code, row_index);
                continue;
            }
            if (a.indexed && row_index != r) continue;
        }
        if (n < a.N) {
            float c;
            if (a.mode == H3C_FOLD_HEAD_DW) {
                /* the (row, head) pairs of row m, heads ascending, each one chain step */
                for (int64_t h = 0; h < a.heads; h++) {
                    int64_t col = h * a.head_dim + n;
                    float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + col]) * a.inv[m * a.heads + h];
                    c = a.dy[m * a.ld_dy + col] * xh;
                    part = have ? part + c : c;
                    have = true;
                }
                continue;
            }
            c = fold_contrib(a, m, n, row_index);
            part = have ? part + c : c;
        }
        have = true;
    }
    if (n < a.N) partial[(tile * rows_out + r) * a.N + n] = part;
    if (blockIdx.x == 0 && threadIdx.x == 0) has[tile * rows_out + r] = have ? 1 : 0;
}

__global__ void __launch_bounds__(FOLD_COLS)
    fold_final_kernel(h3c_fold_args a, const float *partial, const uint8_t *has, int64_t tiles, int64_t rows_out) {
    const int64_t n = (int64_t)blockIdx.x * FOLD_COLS + threadIdx.x, r = blockIdx.y;
    if (n >= a.N) return;
    float total = 0.0f;
    bool have = false;
    for (int64_t t = 0; t < tiles; t++) {
        if (!has[t * rows_out + r]) continue;
        float v = partial[(t * rows_out + r) * a.N + n];
        total = have ? total + v : v;
        have = true;
    }
    a.out[r * a.ldo + n] = have ? total : 0.0f;
}

/* HEAD_DW partials: the same chain as fold_partial_kernel (one thread per column, the (row, head)
 * pairs of the tile in ascending order, each one step), with the contributions computed ahead
 * by the block's other 224 threads into a double-buffered shared-memory ring.  The chain
 * warp only adds, so the loads of a tile's 256 x heads steps are in flight together instead
 * of one step at a time, and a block takes 32 columns so that 4 x as many multiprocessors share a
 * tile's loads.  Same operations, same order: the same bits. */
#define HD_CHAIN 32    /* columns per block: one chain warp */
#define HD_THREADS 256 /* the other seven warps compute contributions */
#define HD_STEPS 64

__global__ void __launch_bounds__(HD_THREADS) fold_head_dw_kernel(h3c_fold_args a, float *partial, uint8_t *has) {
    __shared__ float buf[2][HD_STEPS][HD_CHAIN];
    const int tid = threadIdx.x;
    const int64_t n0 = (int64_t)blockIdx.x * HD_CHAIN, tile = blockIdx.y;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    const int heads = (int)a.heads;
    const int L = (int)(m1 - m0) * heads; /* chain steps of this tile (<= 256 x 65535) */
    const int nchunks = (L + HD_STEPS - 1) / HD_STEPS;
    auto load = [&](int k) { /* contributions of steps [k * HD_STEPS, +HD_STEPS) */
                             for (int e = tid - HD_CHAIN; e < HD_STEPS * HD_CHAIN; e += HD_THREADS - HD_CHAIN) {
                                 const int j = e / HD_CHAIN, col = e % HD_CHAIN;
                                 const int st = k * HD_STEPS + j;
                                 const int64_t n = n0 + col;
                                 if (st >= L || n >= a.N) continue;
                                 const int64_t m = m0 + st / heads, h = st % heads, c = h * a.head_dim + n;
                                 const float xh =
                                     h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + c]) * a.inv[m * a.heads + h];
                                 buf[k & 1][j][col] = a.dy[m * a.ld_dy + c] * xh;
                             }
    };
    if (tid >= HD_CHAIN && nchunks > 0) load(0);
    __syncthreads();
    float part = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        if (tid >= HD_CHAIN) {
            if (k + 1 < nchunks) load(k + 1);
        } else {
            const int steps = L - k * HD_STEPS < HD_STEPS ? L - k * HD_STEPS : HD_STEPS;
            for (int j = 0; j < steps; j++) {
                const float c = buf[k & 1][j][tid];
                part = (k == 0 && j == 0) ? c : part + c;
            }
        }
        __syncthreads();
    }
    const int64_t n = n0 + tid;
    if (tid < HD_CHAIN && n < a.N) partial[tile * a.N + n] = part;
    if (blockIdx.x == 0 && tid == 0) has[tile] = L > 0 ? 1 : 0;
}

static int g_fold_generic = 0; /* test hook: 1 = HEAD_DW through the generic partial kernel */

extern "C" void h3c_fold_force_generic(int on) { g_fold_generic = on ? 1 : 0; }

extern "C" h3s_status h3c_fold(const char *op, const h3c_fold_args *a) {
    if (a->N <= 0) return H3S_OK;
    const int64_t rows_out = a->indexed ? a->R : 1;
    if (rows_out <= 0) return H3S_OK;
    const int64_t tiles = (a->M + H3S_FOLD_TILE - 1) / H3S_FOLD_TILE;
    const int64_t cb = (a->N + FOLD_COLS - 1) / FOLD_COLS;
    if (tiles > 65535 || rows_out > 65535)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: fold of %lld rows into %lld table rows exceeds the grid limits", op,
                        (long long)a->M, (long long)rows_out);
    float *partial = NULL;
    uint8_t *has = NULL;
    if (tiles > 0) {
        size_t pbytes = (size_t)tiles * (size_t)rows_out * (size_t)a->N * sizeof(float);
        pbytes = (pbytes + 255) & ~(size_t)255;
        void *ws = NULL;
        H3S_TRY(h3c_ws_alloc(op, pbytes + (size_t)tiles * (size_t)rows_out, &ws));
        partial = (float *)ws;
        has = (uint8_t *)ws + pbytes;
        if (a->mode == H3C_FOLD_HEAD_DW && !a->index && rows_out == 1 && !g_fold_generic && a->heads <= 65535) {
            dim3 grid((unsigned)((a->N + HD_CHAIN - 1) / HD_CHAIN), (unsigned)tiles);
            fold_head_dw_kernel<<<grid, HD_THREADS, 0, H3K_STREAM>>>(*a, partial, has);
        } else {
            dim3 grid((unsigned)cb, (unsigned)tiles, (unsigned)rows_out);
            fold_partial_kernel<<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, rows_out, h3c_error_flag());
        }
        h3s_status st = h3c_launch_check(op);
        if (st != H3S_OK) {
            h3c_ws_free(ws);
            return st;
        }
    }
    dim3 grid2((unsigned)cb, (unsigned)rows_out);
    fold_final_kernel<<<grid2, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, tiles, rows_out);
    h3s_status st = h3c_launch_check(op);
    if (partial) h3c_ws_free(partial);
    return st;
}

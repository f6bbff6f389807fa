/* The canonical cross-row reduction on the GPU (docs/strict.md section 3, ops/fold.h).
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
#include "cuda/k_wgmma.cuh"

#define FOLD_COLS 128

template <int MODE>
__device__ __forceinline__ float fold_contrib(const h3c_fold_args &a, int64_t m, int64_t n, int64_t row_index) {
    if (MODE == H3C_FOLD_COPY) return a.dy[m * a.ld_dy + n];
    if (MODE == H3C_FOLD_RMS_DW) {
        float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]) * a.inv[m];
        float s =
            a.table ? 1.0f + h3k_bf2f(((const uint16_t *)a.table)[row_index * a.ld_table + a.scale_off + n]) : 1.0f;
        float g = a.dy[m * a.ld_dy + n] * s;
        return g * xh;
    }
    if (MODE == H3C_FOLD_RMS_DSCALE) {
        float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]) * a.inv[m];
        float wk = a.w ? h3k_bf2f(((const uint16_t *)a.w)[n]) : 1.0f;
        return a.dy[m * a.ld_dy + n] * (xh * wk);
    }
    if (MODE == H3C_FOLD_PRODUCT) return a.dy[m * a.ld_dy + n] * h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + n]);
    return 0.0f;
}

/* Partial kernel for the one-value-per-(row, column) modes.  The chain is the definition above
 * (rows ascending, the first contributing row's value, then part + c).  The block first lists the
 * tile's contributing rows in shared memory (index read and checked once per row, not once per
 * column; a bad index is reported once and its row skipped), in ascending order, then runs the
 * chain over that list in batches of FOLD_BATCH rows whose loads are all in flight together.
 * Same contributions, same order: the same bits. */
#ifndef FOLD_BATCH
#define FOLD_BATCH 64
#endif

template <int MODE>
__global__ void __launch_bounds__(FOLD_COLS)
    fold_partial_kernel(h3c_fold_args a, float *partial, uint8_t *has, int64_t rows_out, int *flag) {
    __shared__ int list[H3S_FOLD_TILE];   /* contributing rows, tile-relative, ascending */
    __shared__ int rix[H3S_FOLD_TILE];    /* their table row index */
    __shared__ uint8_t ok[H3S_FOLD_TILE]; /* row takes part */
    __shared__ int idx_sm[H3S_FOLD_TILE];
    __shared__ int count;
    const int tid = threadIdx.x, lane = tid & 31;
    const int64_t n = (int64_t)blockIdx.x * FOLD_COLS + tid;
    const int64_t tile = blockIdx.y, r = blockIdx.z;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    const int rows = (int)(m1 - m0);
    for (int i = tid; i < H3S_FOLD_TILE; i += FOLD_COLS) {
        bool take = i < rows;
        int ri = 0;
        if (take && a.index) {
            const int64_t v = a.index[m0 + i];
            if (v < 0 || v >= a.index_limit) {
                if (blockIdx.x == 0) h3k_report_index(flag, a.code, v);
                take = false;
            } else {
                ri = (int)v;
                if (a.indexed && v != r) take = false;
            }
        }
        ok[i] = take ? 1 : 0;
        idx_sm[i] = ri;
    }
    __syncthreads();
    if (tid < 32) { /* order-preserving compaction, 32 rows per step */
        int c = 0;
        for (int i0 = 0; i0 < H3S_FOLD_TILE; i0 += 32) {
            const bool f = ok[i0 + lane] != 0;
            const unsigned bal = __ballot_sync(0xffffffffu, f);
            if (f) {
                const int at = c + __popc(bal & ((1u << lane) - 1u));
                list[at] = i0 + lane;
                rix[at] = idx_sm[i0 + lane];
            }
            c += __popc(bal);
        }
        if (lane == 0) count = c;
    }
    __syncthreads();
    const int cnt = count;
    float part = 0.0f;
    if (n < a.N) {
        for (int j0 = 0; j0 < cnt; j0 += FOLD_BATCH) {
            /* every load of the batch unconditional (past the list's end: its last row again, not
             * used), so that they are all issued before the first add waits on one */
            float c[FOLD_BATCH];
#pragma unroll
            for (int u = 0; u < FOLD_BATCH; u++) {
                const int j = min(j0 + u, cnt - 1);
                c[u] = fold_contrib<MODE>(a, m0 + list[j], n, rix[j]);
            }
#pragma unroll
            for (int u = 0; u < FOLD_BATCH; u++)
                if (j0 + u < cnt) part = j0 + u == 0 ? c[u] : part + c[u];
        }
        partial[(tile * rows_out + r) * a.N + n] = part;
    }
    if (blockIdx.x == 0 && tid == 0) has[tile * rows_out + r] = cnt > 0 ? 1 : 0;
}

/* HEAD_DW partials, generic form (the reference the streamed kernel below is tested against):
 * one thread per column, the (row, head) pairs of the tile in ascending order, each one step. */
__global__ void __launch_bounds__(FOLD_COLS)
    fold_head_dw_generic_kernel(h3c_fold_args a, float *partial, uint8_t *has, int *flag) {
    const int64_t n = (int64_t)blockIdx.x * FOLD_COLS + threadIdx.x;
    const int64_t tile = blockIdx.y;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    float part = 0.0f;
    bool have = false;
    (void)flag;
    for (int64_t m = m0; m < m1; m++) {
        if (n < a.N) {
            for (int64_t h = 0; h < a.heads; h++) {
                int64_t col = h * a.head_dim + n;
                float xh = h3k_bf2f(((const uint16_t *)a.x)[m * a.ld_x + col]) * a.inv[m * a.heads + h];
                float c = a.dy[m * a.ld_dy + col] * xh;
                part = have ? part + c : c;
                have = true;
            }
        }
        have = true;
    }
    if (n < a.N) partial[tile * a.N + n] = part;
    if (blockIdx.x == 0 && threadIdx.x == 0) has[tile] = m1 > m0 ? 1 : 0;
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

/* HEAD_DW partials, in two steps.
 *   1. head_contrib_kernel writes every contribution c = dy * (x * inv) (the two products of the
 *      generic kernel, one rounding each) to a workspace laid out like dy, with all of the GPU.
 *   2. fold_head_dw_kernel runs the chain of fold_head_dw_generic_kernel over them (one chain per
 *      column, the (row, head) pairs of the tile in ascending order: part = c for the first step,
 *      part = part + c after).  A block takes HD_COLS columns of one 256-row tile.  Phases of HD_G
 *      rows (these columns of every head: HD_G x heads x HD_COLS floats, (row, head) pairs in chain
 *      order) go through a ring of `slots` shared-memory slots.  Warps 1-3 (the producers) copy
 *      phase ph into slot ph % slots with cp.async and arm the slot's "full" mbarrier with
 *      cp.async.mbarrier.arrive.noinc (it completes when all 96 producers' copies have landed);
 *      before the slot's next use they wait on its "empty" mbarrier, which warp 0 completes after
 *      it has read the slot.  Warp 0 (the consumer) runs the chain: it waits on the slot's "full"
 *      barrier, then loads the next HD_B values into registers while it adds the current HD_B,
 *      so each addition waits only on the one before (lanes 16-31 repeat lanes 0-15's chain and
 *      store nothing).  Use u = ph / slots of a slot is phase u of both its barriers: the consumer
 *      waits on "full" with parity u & 1, a producer waits on "empty" with parity (u - 1) & 1
 *      before use u >= 1; neither barrier can be more than one phase ahead of its waiter, so the
 *      parity is unambiguous.  A partial last phase copies and chains only its rows; every
 *      producer arrives on every phase's "full" barrier, whether or not it copied anything.
 *      Same operations, same order: the same bits (tested against the generic kernel).
 * Rows are taken in chunks of HD_CHUNK_TILES tiles, so the workspace stays bounded. */
#define HD_COLS 16
#define HD_THREADS 128
#define HD_PRODUCERS (HD_THREADS - 32)
#define HD_G 8
#define HD_B 16 /* the consumer's batch: loaded one batch ahead of the additions */
#define HD_MAX_SLOTS 8
#define HD_BAR_BYTES 128 /* the 2 x HD_MAX_SLOTS mbarriers, before the slots */
#define HD_SMEM_LIMIT (200 * 1024)
#define HD_CHUNK_TILES 16
static_assert(HD_BAR_BYTES >= 2 * HD_MAX_SLOTS * 8 && HD_BAR_BYTES % 16 == 0, "mbarriers before the slots");
static_assert(HD_MAX_SLOTS <= 32 && HD_PRODUCERS > 0 && HD_COLS % 4 == 0, "fold_head_dw_kernel layout");

__device__ __forceinline__ void hd_cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}

/* An arrival on bar once every cp.async this thread has issued so far has landed (counted in the
 * barrier's expected count: .noinc). */
__device__ __forceinline__ void hd_cp_arrive(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
}

/* v[u] = s[min(k + u, cnt - 1) * HD_COLS]: never past the cnt values the slot holds. */
__device__ __forceinline__ void hd_ld_clamped(float (&v)[HD_B], const float *s, int k, int cnt) {
#pragma unroll
    for (int u = 0; u < HD_B; u++)
        v[u] = s[min(k + u, cnt - 1) * HD_COLS];
}

/* part + v[0] + ... + v[HD_B - 1], in that order (start: the batch starts the chain, v[0] + v[1] + ...); then the
 * next batch w moves into v. */
__device__ __forceinline__ float hd_add_shift(float part, float (&v)[HD_B], const float (&w)[HD_B],
                                              bool start = false) {
#pragma unroll
    for (int u = 0; u < HD_B; u++)
        part = start && u == 0 ? v[0] : part + v[u];
#pragma unroll
    for (int u = 0; u < HD_B; u++)
        v[u] = w[u];
    return part;
}

/* The chain over the cnt >= 1 values s[0], s[HD_COLS], ... of one slot, in that order, continuing
 * part; if first, s[0] is the tile's first value and starts the chain (part = s[0]).  The values
 * are taken in batches of HD_B, and batch i + 1 is loaded into registers before batch i is added. */
__device__ __forceinline__ float hd_chain(const float *s, int cnt, bool first, float part) {
    float v[HD_B], w[HD_B];
    int k = 0; /* v holds values k .. k + HD_B - 1 (those below cnt) */
    hd_ld_clamped(v, s, 0, cnt);
    if (first && cnt >= HD_B) {
        hd_ld_clamped(w, s, HD_B, cnt);
        part = hd_add_shift(part, v, w, true);
        k = HD_B;
        first = false;
    }
    for (; k + 2 * HD_B <= cnt; k += HD_B) { /* the next batch is whole */
        const float *q = s + (k + HD_B) * HD_COLS;
#pragma unroll
        for (int u = 0; u < HD_B; u++)
            w[u] = q[u * HD_COLS];
        part = hd_add_shift(part, v, w);
    }
    if (k + HD_B <= cnt) { /* the last whole batch; the rest (if any) loaded clamped */
        hd_ld_clamped(w, s, k + HD_B, cnt);
        part = hd_add_shift(part, v, w);
        k += HD_B;
    }
    if (k < cnt) { /* fewer than HD_B left */
#pragma unroll
        for (int u = 0; u < HD_B; u++)
            if (k + u < cnt) part = (first && u == 0) ? v[0] : part + v[u];
    }
    return part;
}

/* c[(m - row0) * W + k] = dy[m * ld_dy + k] * (x[m * ld_x + k] * inv[m * heads + k / D]), rows [row0, row1),
 * four columns per thread (D is a multiple of 16, so the four share a head). */
__global__ void head_contrib_kernel(h3c_fold_args a, int64_t row0, int64_t row1, float *c) {
    const int64_t W = a.heads * a.head_dim, W4 = W / 4, n4 = (row1 - row0) * W4;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n4; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / W4, k = (e - r * W4) * 4, m = row0 + r;
        const float4 g = *(const float4 *)(a.dy + m * a.ld_dy + k);
        const uint2 xv = *(const uint2 *)((const uint16_t *)a.x + m * a.ld_x + k);
        const float inv = a.inv[m * a.heads + k / a.head_dim];
        float4 o;
        o.x = g.x * (h3k_bf2f((uint16_t)(xv.x & 0xffffu)) * inv);
        o.y = g.y * (h3k_bf2f((uint16_t)(xv.x >> 16)) * inv);
        o.z = g.z * (h3k_bf2f((uint16_t)(xv.y & 0xffffu)) * inv);
        o.w = g.w * (h3k_bf2f((uint16_t)(xv.y >> 16)) * inv);
        *(float4 *)(c + r * W + k) = o;
    }
}

/* Dynamic shared memory: HD_BAR_BYTES of mbarriers (full[HD_MAX_SLOTS], empty[HD_MAX_SLOTS]), then
 * `slots` slots of HD_G * heads * HD_COLS floats (hd_slots: 2 <= slots <= HD_MAX_SLOTS). */
__global__ void __launch_bounds__(HD_THREADS)
    fold_head_dw_kernel(h3c_fold_args a, const float *c, int64_t row0, int64_t tile0, int slots, float *partial,
                        uint8_t *has) {
    extern __shared__ __align__(16) unsigned char hd_smem[];
    uint64_t *full = (uint64_t *)hd_smem, *empty = full + HD_MAX_SLOTS;
    float *ring = (float *)(hd_smem + HD_BAR_BYTES);
    const int H = (int)a.heads, hd = (int)a.head_dim, slot_floats = HD_G * H * HD_COLS;
    const int64_t W = a.heads * a.head_dim;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t n0 = (int64_t)blockIdx.x * HD_COLS, tile = tile0 + blockIdx.y;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    const int rows = (int)(m1 - m0), phases = (rows + HD_G - 1) / HD_G;
    if (tid < slots) {
        wg::mbar_init(&full[tid], HD_PRODUCERS);
        wg::mbar_init(&empty[tid], 32);
    }
    __syncthreads();
    if (warp == 0) { /* the consumer: the chain, phases ascending */
        float part = 0.0f;
        for (int ph = 0, s = 0, u = 0; ph < phases; ph++) {
            wg::mbar_wait(&full[s], (unsigned)u & 1u); /* use u of slot s has landed */
            const int g_n = min(HD_G, rows - ph * HD_G);
            part = hd_chain(ring + s * slot_floats + lane % HD_COLS, g_n * H, ph == 0, part);
            wg::mbar_arrive(&empty[s]); /* every lane has read use u of slot s */
            if (++s == slots) s = 0, u++;
        }
        const int64_t n = n0 + lane;
        if (lane < HD_COLS && n < a.N) partial[tile * a.N + n] = part;
        if (blockIdx.x == 0 && tid == 0) has[tile] = rows > 0 ? 1 : 0;
    } else { /* the producers: phase ph into slot ph % slots */
        const int pt = tid - 32;
        for (int ph = 0, s = 0, u = 0; ph < phases; ph++) {
            if (u > 0) wg::mbar_wait(&empty[s], (unsigned)(u - 1) & 1u); /* use u - 1 has been read */
            const int g_n = min(HD_G, rows - ph * HD_G), ne = g_n * H * (HD_COLS / 4);
            float *sl = ring + s * slot_floats;
            const float *src = c + (m0 + ph * HD_G - row0) * W + n0;
            for (int e = pt; e < ne; e += HD_PRODUCERS) { /* 16 bytes: (row g, head h), columns 4j .. 4j + 3 */
                const int gh = e / (HD_COLS / 4), j = e % (HD_COLS / 4), g = gh / H, h = gh - g * H;
                hd_cp16(sl + gh * HD_COLS + j * 4, src + g * W + (int64_t)h * hd + j * 4);
            }
            hd_cp_arrive(&full[s]);
            if (++s == slots) s = 0, u++;
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
}

/* Slots of fold_head_dw_kernel's ring for this shape (at least 2, at most HD_MAX_SLOTS, within
 * HD_SMEM_LIMIT); 0 when the shape does not suit it. */
static int hd_slots(const h3c_fold_args *a) {
    if (a->heads < 1 || a->heads > 256 || a->head_dim % HD_COLS || a->N != a->head_dim) return 0;
    if (((uintptr_t)a->dy | (uintptr_t)a->x) & 15u) return 0;
    if ((a->ld_dy * 4) % 16 || (a->ld_x * 2) % 16) return 0;
    const size_t slot = (size_t)HD_G * (size_t)a->heads * HD_COLS * 4;
    const size_t n = (HD_SMEM_LIMIT - HD_BAR_BYTES) / slot;
    return n < 2 ? 0 : n > HD_MAX_SLOTS ? HD_MAX_SLOTS : (int)n;
}

static size_t hd_smem_bytes(const h3c_fold_args *a, int slots) {
    return HD_BAR_BYTES + (size_t)slots * HD_G * (size_t)a->heads * HD_COLS * 4;
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
        const int hd_nslots = a->mode == H3C_FOLD_HEAD_DW ? hd_slots(a) : 0;
        if (a->mode == H3C_FOLD_HEAD_DW && (a->index || rows_out != 1)) {
            h3c_ws_free(ws);
            return h3s_fail(H3S_ERR_INVALID, "%s: the per-head fold takes no index", op);
        }
        if (hd_nslots > 0 && !g_fold_generic) {
            static int attr_set = 0;
            if (!attr_set) {
                cudaError_t e = cudaFuncSetAttribute(fold_head_dw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     HD_SMEM_LIMIT);
                if (e != cudaSuccess) {
                    h3c_ws_free(ws);
                    return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
                }
                attr_set = 1;
            }
            const int64_t W = a->heads * a->head_dim, chunk = (int64_t)HD_CHUNK_TILES * H3S_FOLD_TILE;
            const int64_t crow = a->M < chunk ? a->M : chunk;
            void *cws = NULL;
            h3s_status st = h3c_ws_alloc(op, (size_t)(crow * W) * sizeof(float), &cws);
            if (st != H3S_OK) {
                h3c_ws_free(ws);
                return st;
            }
            for (int64_t t0 = 0; t0 < tiles; t0 += HD_CHUNK_TILES) {
                const int64_t nt = tiles - t0 < HD_CHUNK_TILES ? tiles - t0 : HD_CHUNK_TILES;
                const int64_t r0 = t0 * H3S_FOLD_TILE,
                              r1 = r0 + nt * H3S_FOLD_TILE < a->M ? r0 + nt * H3S_FOLD_TILE : a->M;
                head_contrib_kernel<<<h3k_blocks((r1 - r0) * W / 4, 256), 256, 0, H3K_STREAM>>>(*a, r0, r1,
                                                                                                (float *)cws);
                dim3 grid((unsigned)(a->N / HD_COLS), (unsigned)nt);
                fold_head_dw_kernel<<<grid, HD_THREADS, hd_smem_bytes(a, hd_nslots), H3K_STREAM>>>(
                    *a, (const float *)cws, r0, t0, hd_nslots, partial, has);
            }
            h3c_ws_free(cws);
        } else {
            dim3 grid((unsigned)cb, (unsigned)tiles, (unsigned)rows_out);
            int *flag = h3c_error_flag();
            switch (a->mode) {
            case H3C_FOLD_COPY:
                fold_partial_kernel<H3C_FOLD_COPY>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, rows_out, flag);
                break;
            case H3C_FOLD_RMS_DW:
                fold_partial_kernel<H3C_FOLD_RMS_DW>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, rows_out, flag);
                break;
            case H3C_FOLD_RMS_DSCALE:
                fold_partial_kernel<H3C_FOLD_RMS_DSCALE>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, rows_out, flag);
                break;
            case H3C_FOLD_PRODUCT:
                fold_partial_kernel<H3C_FOLD_PRODUCT>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, rows_out, flag);
                break;
            case H3C_FOLD_HEAD_DW:
                fold_head_dw_generic_kernel<<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, flag);
                break;
            default: h3c_ws_free(ws); return h3s_fail(H3S_ERR_INVALID, "%s: unknown fold mode %d", op, a->mode);
            }
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

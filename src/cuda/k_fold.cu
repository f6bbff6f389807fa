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

/* Partial kernel for the one-value-per-(row, column) modes.  The chain is the definition above
 * (rows ascending, the first contributing row's value, then part + c).  The block first lists the
 * tile's contributing rows in shared memory (index read and checked once per row, not once per
 * column; a bad index is reported once and its row skipped), in ascending order, with each row's
 * inverse norm where the mode uses it, then runs the chain over that list in batches of fold_batch<MODE>
 * rows: every load of a batch into registers first (fold_load), then the contributions (fold_value) and the
 * additions in order.  The RMS modes (three or four loads a contribution) take batches of 16 rows, so that
 * the batch's loads fit the registers and are all in flight together: at 64 rows the compiler issued most
 * of them one at a time, each add waiting on its load (H200, 8349 x 5376: RMS_DW 196 -> 157 us, RMS_DSCALE
 * 161 -> 127 us; the product at 32 rows took 100 against 93 us at 64).  Same contributions, same order: the
 * same bits. */
template <int MODE> __host__ __device__ constexpr int fold_batch() {
    return MODE == H3C_FOLD_COPY || MODE == H3C_FOLD_PRODUCT ? 64 : 16;
}

/* The modes that read x with the row's inverse norm. */
template <int MODE> __host__ __device__ constexpr bool fold_rms() {
    return MODE == H3C_FOLD_RMS_DW || MODE == H3C_FOLD_RMS_DSCALE || MODE == H3C_FOLD_SHIFT_SCALE;
}

/* The loads of one contribution (row m, column n, table row ri). */
struct fold_raw {
    float dy;
    uint16_t x, t;
};

template <int MODE>
__device__ __forceinline__ fold_raw fold_load(const h3c_fold_args &a, int64_t m, int64_t n, int64_t ri) {
    fold_raw r;
    r.dy = a.dy[m * a.ld_dy + n];
    r.x = MODE == H3C_FOLD_COPY ? (uint16_t)0 : ((const uint16_t *)a.x)[m * a.ld_x + n];
    r.t = MODE == H3C_FOLD_RMS_DW && a.table ? ((const uint16_t *)a.table)[ri * a.ld_table + a.scale_off + n]
                                             : (uint16_t)0;
    return r;
}

/* A contribution from its loaded operands (inv: the row's inverse norm; wk: the column's weight or 1), each with
 * the CPU's formula: dy (COPY), (dy * (1 + scale)) * (x * inv) (RMS_DW), dy * ((x * inv) * w) (RMS_DSCALE),
 * dy * x (PRODUCT). */
template <int MODE>
__device__ __forceinline__ float fold_value(const h3c_fold_args &a, const fold_raw &r, float inv, float wk) {
    if (MODE == H3C_FOLD_COPY) return r.dy;
    if (MODE == H3C_FOLD_RMS_DW) {
        float xh = h3k_bf2f(r.x) * inv;
        float s = a.table ? 1.0f + h3k_bf2f(r.t) : 1.0f;
        float g = r.dy * s;
        return g * xh;
    }
    if (MODE == H3C_FOLD_RMS_DSCALE || MODE == H3C_FOLD_SHIFT_SCALE) { /* SHIFT_SCALE: its second chain */
        float xh = h3k_bf2f(r.x) * inv;
        return r.dy * (xh * wk);
    }
    if (MODE == H3C_FOLD_PRODUCT) return r.dy * h3k_bf2f(r.x);
    return 0.0f;
}

/* The loads of a batch of FB listed rows starting at list entry j0, every one unconditional (past the list's end:
 * its last row again, not used), so that they are all issued before the first add waits on one. */
template <int MODE, int FB>
__device__ __forceinline__ void fold_load_batch(const h3c_fold_args &a, int64_t m0, const int *list, const int *rix,
                                                int j0, int cnt, int64_t n, fold_raw (&v)[FB]) {
#pragma unroll
    for (int u = 0; u < FB; u++) {
        const int j = min(j0 + u, cnt - 1);
        v[u] = fold_load<MODE>(a, m0 + list[j], n, rix[j]);
    }
}

/* SHIFT_SCALE runs the COPY chain (dy) into partial and the RMS_DSCALE chain into partial2 over the same rows, from
 * the same loads: each chain is the one its own mode runs, so the bits of the two folds apart. */
template <int MODE>
__global__ void __launch_bounds__(FOLD_COLS)
    fold_partial_kernel(h3c_fold_args a, float *partial, float *partial2, uint8_t *has, int64_t rows_out, int *flag) {
    __shared__ int list[H3S_FOLD_TILE];   /* contributing rows, tile-relative, ascending */
    __shared__ int rix[H3S_FOLD_TILE];    /* their table row index */
    __shared__ uint8_t ok[H3S_FOLD_TILE]; /* row takes part */
    __shared__ int idx_sm[H3S_FOLD_TILE];
    __shared__ float ivl[H3S_FOLD_TILE]; /* the listed rows' inverse norms (the RMS modes) */
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
                if (fold_rms<MODE>()) ivl[at] = a.inv[m0 + i0 + lane];
            }
            c += __popc(bal);
        }
        if (lane == 0) count = c;
    }
    __syncthreads();
    const int cnt = count;
    float part = 0.0f, part2 = 0.0f;
    if (n < a.N) {
        constexpr int FB = fold_batch<MODE>();
        const float wk = (MODE == H3C_FOLD_RMS_DSCALE || MODE == H3C_FOLD_SHIFT_SCALE) && a.w
                             ? h3k_bf2f(((const uint16_t *)a.w)[n])
                             : 1.0f;
        for (int j0 = 0; j0 < cnt; j0 += FB) {
            fold_raw v[FB];
            fold_load_batch<MODE, FB>(a, m0, list, rix, j0, cnt, n, v);
#pragma unroll
            for (int u = 0; u < FB; u++)
                if (j0 + u < cnt) {
                    const float iv = fold_rms<MODE>() ? ivl[min(j0 + u, cnt - 1)] : 0.0f;
                    const float c = fold_value<MODE>(a, v[u], iv, wk);
                    if (MODE == H3C_FOLD_SHIFT_SCALE) {
                        const float c0 = v[u].dy; /* the COPY chain's contribution */
                        part = j0 + u == 0 ? c0 : part + c0;
                        part2 = j0 + u == 0 ? c : part2 + c;
                    } else {
                        part = j0 + u == 0 ? c : part + c;
                    }
                }
        }
        partial[(tile * rows_out + r) * a.N + n] = part;
        if (MODE == H3C_FOLD_SHIFT_SCALE) partial2[(tile * rows_out + r) * a.N + n] = part2;
    }
    if (blockIdx.x == 0 && tid == 0) has[tile * rows_out + r] = cnt > 0 ? 1 : 0;
}

/* NORM_ALL partials: a modulated norm's three cross-row sums in one pass over dy and x.  The tile's rows with a valid
 * index are listed ascending (as fold_partial_kernel lists them), each with its table row ri and inverse norm; each
 * thread (one column) then runs the RMS_DW chain over every listed row and, for each table row q, the COPY and the
 * RMS_DSCALE chains over the listed rows with ri == q.  Each chain is the one its own mode's kernel runs: the same
 * contributions (fold_value's expressions), in the same order, from the same first row, so the bits of the three folds
 * apart.  RMAX bounds the table rows at compile time so that the per-row chains stay in registers. */
template <int RMAX>
__global__ void __launch_bounds__(FOLD_COLS) fold_norm_all_kernel(h3c_fold_args a, float *pdw, float *psh, float *psc,
                                                                  uint8_t *has_dw, uint8_t *has_r, int *flag) {
    __shared__ int list[H3S_FOLD_TILE];
    __shared__ int rix[H3S_FOLD_TILE];
    __shared__ uint8_t ok[H3S_FOLD_TILE];
    __shared__ int idx_sm[H3S_FOLD_TILE];
    __shared__ float ivl[H3S_FOLD_TILE];
    __shared__ int count, rcount[RMAX];
    const int tid = threadIdx.x, lane = tid & 31;
    const int64_t n = (int64_t)blockIdx.x * FOLD_COLS + tid;
    const int64_t tile = blockIdx.y;
    const int64_t m0 = tile * H3S_FOLD_TILE, m1 = m0 + H3S_FOLD_TILE < a.M ? m0 + H3S_FOLD_TILE : a.M;
    const int rows = (int)(m1 - m0), R = (int)a.R;
    for (int i = tid; i < H3S_FOLD_TILE; i += FOLD_COLS) {
        bool take = i < rows;
        int ri = 0;
        if (take) {
            const int64_t v = a.index[m0 + i];
            if (v < 0 || v >= a.index_limit) {
                if (blockIdx.x == 0) h3k_report_index(flag, a.code, v);
                take = false;
            } else {
                ri = (int)v;
            }
        }
        ok[i] = take ? 1 : 0;
        idx_sm[i] = ri;
    }
    __syncthreads();
    if (tid < 32) { /* order-preserving compaction, 32 rows per step, and the rows of each table row */
        int c = 0, rc[RMAX];
#pragma unroll
        for (int q = 0; q < RMAX; q++)
            rc[q] = 0;
        for (int i0 = 0; i0 < H3S_FOLD_TILE; i0 += 32) {
            const bool f = ok[i0 + lane] != 0;
            const int ri = idx_sm[i0 + lane];
            const unsigned bal = __ballot_sync(0xffffffffu, f);
            if (f) {
                const int at = c + __popc(bal & ((1u << lane) - 1u));
                list[at] = i0 + lane;
                rix[at] = ri;
                ivl[at] = a.inv[m0 + i0 + lane];
            }
            c += __popc(bal);
#pragma unroll
            for (int q = 0; q < RMAX; q++)
                rc[q] += __popc(__ballot_sync(0xffffffffu, f && ri == q));
        }
        if (lane == 0) {
            count = c;
#pragma unroll
            for (int q = 0; q < RMAX; q++)
                rcount[q] = rc[q];
        }
    }
    __syncthreads();
    const int cnt = count;
    if (n < a.N) {
        constexpr int FB = 16; /* fold_batch of the RMS modes */
        const float wk = a.w ? h3k_bf2f(((const uint16_t *)a.w)[n]) : 1.0f;
        float dw = 0.0f, sh[RMAX], sc[RMAX];
#pragma unroll
        for (int q = 0; q < RMAX; q++)
            sh[q] = 0.0f, sc[q] = 0.0f;
        unsigned seen = 0; /* bit q: table row q's chains have their first row */
        for (int j0 = 0; j0 < cnt; j0 += FB) {
            fold_raw v[FB];
            fold_load_batch<H3C_FOLD_RMS_DW, FB>(a, m0, list, rix, j0, cnt, n, v);
#pragma unroll
            for (int u = 0; u < FB; u++)
                if (j0 + u < cnt) {
                    const int j = j0 + u, ri = rix[j];
                    const float iv = ivl[j];
                    const float cdw = fold_value<H3C_FOLD_RMS_DW>(a, v[u], iv, 1.0f);
                    const float csc = fold_value<H3C_FOLD_RMS_DSCALE>(a, v[u], iv, wk);
                    dw = j == 0 ? cdw : dw + cdw;
                    const bool first = !((seen >> ri) & 1u);
#pragma unroll
                    for (int q = 0; q < RMAX; q++)
                        if (ri == q) {
                            sh[q] = first ? v[u].dy : sh[q] + v[u].dy;
                            sc[q] = first ? csc : sc[q] + csc;
                        }
                    seen |= 1u << ri;
                }
        }
        pdw[tile * a.N + n] = dw;
#pragma unroll
        for (int q = 0; q < RMAX; q++)
            if (q < R) {
                psh[(tile * R + q) * a.N + n] = sh[q];
                psc[(tile * R + q) * a.N + n] = sc[q];
            }
    }
    if (blockIdx.x == 0 && tid == 0) {
        has_dw[tile] = cnt > 0 ? 1 : 0;
        for (int q = 0; q < R; q++)
            has_r[tile * R + q] = rcount[q] > 0 ? 1 : 0;
    }
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

/* HEAD_DW partials, in one launch over all tiles, with no contribution workspace.  fold_head_dw_kernel
 * runs the chain of fold_head_dw_generic_kernel (one chain per column, the (row, head) pairs of the tile
 * in ascending order: part = c for the first step, part = part + c after).  A block takes HD_COLS
 * columns of one 256-row tile.  Phases of HD_G rows (these columns of every head: HD_G x heads x HD_COLS
 * floats, (row, head) pairs in chain order) go through a ring of `slots` shared-memory slots.
 *   - Warps 1-3 (the producers) compute phase ph's contributions themselves: in passes of up to HD_PB
 *     groups of four columns per thread (16 bytes of dy, 8 of x and the (row, head)'s inverse norm: the
 *     four columns share a head, head_dim being a multiple of HD_COLS), every load of a pass issued into
 *     registers before the first is used; before the first stores of use u >= 1 of slot ph % slots they
 *     wait on its "empty" mbarrier (parity (u - 1) & 1), which warp 0 completes after it has read use
 *     u - 1; then they store c = dy * (x * inv) into the slot with ordinary shared stores and arrive on
 *     the slot's "full" mbarrier (release; expected count HD_PRODUCERS: every producer arrives once per
 *     phase, whether or not it stored anything, and only after its stores).
 *   - Warp 0 (the consumer) runs the chain: it waits on the slot's "full" barrier (parity u & 1;
 *     acquire: all HD_PRODUCERS arrivals, so all of the phase's stores, are visible), then loads the
 *     next HD_B values into registers while it adds the current HD_B, so each addition waits only on
 *     the one before (lanes 16-31 repeat lanes 0-15's chain and store nothing), and arrives on "empty".
 * Use u = ph / slots of a slot is phase u of both its barriers; neither barrier can be more than one
 * phase ahead of its waiter, so the parity is unambiguous.  A partial last phase (rows - ph * HD_G rows)
 * computes and chains only its rows.
 * Same bits as the generic kernel (tested): each contribution is its two products in its order, one
 * rounding each (xh = x * inv, then c = dy * xh; built with --fmad=false, so nothing is contracted), and
 * the chain adds them in its order.  The ring is sized for two blocks per SM (HD_SMEM_TARGET: 3 slots at
 * 56 heads x 128); a shape whose two slots do not fit there but fit HD_SMEM_LIMIT gets two slots (and
 * fewer blocks per SM). */
#define HD_COLS 16
#define HD_THREADS 128
#define HD_PRODUCERS (HD_THREADS - 32)
#define HD_G 8
#define HD_B 16 /* the consumer's batch: loaded one batch ahead of the additions */
#define HD_MAX_SLOTS 8
#define HD_BAR_BYTES 128 /* the 2 x HD_MAX_SLOTS mbarriers, before the slots */
#define HD_PB 19 /* a producer's pass: ceil(HD_G * 56 heads * (HD_COLS / 4) / HD_PRODUCERS), a release phase in one */
#define HD_SMEM_TARGET (100 * 1024) /* barriers + ring: two blocks in an SM's 228 KB */
#define HD_SMEM_LIMIT (200 * 1024)  /* the most it takes: two slots, one block per SM */
static_assert(HD_BAR_BYTES >= 2 * HD_MAX_SLOTS * 8 && HD_BAR_BYTES % 16 == 0, "mbarriers before the slots");
static_assert(HD_MAX_SLOTS <= 32 && HD_PRODUCERS > 0 && HD_COLS % 4 == 0, "fold_head_dw_kernel layout");
static_assert(HD_PRODUCERS % (HD_COLS / 4) == 0, "a producer's groups all have the same four columns");

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

/* Dynamic shared memory: HD_BAR_BYTES of mbarriers (full[HD_MAX_SLOTS], empty[HD_MAX_SLOTS]), then
 * `slots` slots of HD_G * heads * HD_COLS floats (hd_slots: 2 <= slots <= HD_MAX_SLOTS). */
__global__ void __launch_bounds__(HD_THREADS)
    fold_head_dw_kernel(h3c_fold_args a, int slots, float *partial, uint8_t *has) {
    extern __shared__ __align__(16) unsigned char hd_smem[];
    uint64_t *full = (uint64_t *)hd_smem, *empty = full + HD_MAX_SLOTS;
    float *ring = (float *)(hd_smem + HD_BAR_BYTES);
    const int H = (int)a.heads, hd = (int)a.head_dim, slot_floats = HD_G * H * HD_COLS;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t n0 = (int64_t)blockIdx.x * HD_COLS, tile = blockIdx.y;
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
    } else { /* the producers: phase ph's contributions into slot ph % slots */
        /* Group e < ne of a phase: (row r of the phase, head h) = pair gh = e / (HD_COLS / 4) = r * H + h,
         * columns n0 + 4j .. n0 + 4j + 3 of head h (j = e % (HD_COLS / 4)); its slot floats
         * gh * HD_COLS + 4j .. + 3 are 4e .. 4e + 3.  A thread's groups are e = e0 + i * HD_PRODUCERS + pt:
         * all with the same j, pairs GS apart; (r, h) goes from one to the next without a division. */
        const int pt = tid - 32, j = pt % (HD_COLS / 4), GS = HD_PRODUCERS / (HD_COLS / 4);
        const int dr = GS / H, dh = GS - dr * H; /* GS = dr * H + dh pairs */
        for (int ph = 0, s = 0, u = 0; ph < phases; ph++) {
            const int g_n = min(HD_G, rows - ph * HD_G), ne = g_n * H * (HD_COLS / 4);
            const int64_t mp = m0 + (int64_t)ph * HD_G; /* the phase's first row */
            const float *dyp = a.dy + mp * a.ld_dy + n0 + j * 4;
            const uint16_t *xp = (const uint16_t *)a.x + mp * a.ld_x + n0 + j * 4;
            const float *ivp = a.inv + mp * a.heads;
            float *sl = ring + s * slot_floats;
            /* every producer takes every pass (the bound is the same for all), so each waits on "empty"
             * before its arrival on "full", even with nothing to store */
            for (int e0 = 0; e0 < ne; e0 += HD_PB * HD_PRODUCERS) {
                float4 d[HD_PB];
                uint2 xv[HD_PB];
                float iv[HD_PB];
                int r = (e0 + pt) / (HD_COLS / 4) / H, h = (e0 + pt) / (HD_COLS / 4) - r * H; /* group i = 0 */
#pragma unroll
                for (int i = 0; i < HD_PB; i++) { /* the loads, all in flight together */
                    const int e = e0 + i * HD_PRODUCERS + pt;
                    if (e < ne) { /* r < g_n */
                        d[i] = *(const float4 *)(dyp + r * a.ld_dy + (int64_t)h * hd);
                        xv[i] = *(const uint2 *)(xp + r * a.ld_x + (int64_t)h * hd);
                        iv[i] = ivp[r * a.heads + h];
                    }
                    r += dr, h += dh; /* the next group: GS pairs on */
                    if (h >= H) r++, h -= H;
                }
                if (e0 == 0 && u > 0) wg::mbar_wait(&empty[s], (unsigned)(u - 1) & 1u); /* use u - 1 has been read */
#pragma unroll
                for (int i = 0; i < HD_PB; i++) { /* c = dy * (x * inv): the generic kernel's two roundings */
                    const int e = e0 + i * HD_PRODUCERS + pt;
                    if (e < ne) {
                        float4 c;
                        c.x = d[i].x * (h3k_bf2f((uint16_t)(xv[i].x & 0xffffu)) * iv[i]);
                        c.y = d[i].y * (h3k_bf2f((uint16_t)(xv[i].x >> 16)) * iv[i]);
                        c.z = d[i].z * (h3k_bf2f((uint16_t)(xv[i].y & 0xffffu)) * iv[i]);
                        c.w = d[i].w * (h3k_bf2f((uint16_t)(xv[i].y >> 16)) * iv[i]);
                        *(float4 *)(sl + e * 4) = c;
                    }
                }
            }
            wg::mbar_arrive(&full[s]); /* release: this thread's stores of the phase come before it */
            if (++s == slots) s = 0, u++;
        }
    }
}

/* Slots of fold_head_dw_kernel's ring for this shape: as many as fit HD_SMEM_TARGET (two blocks per
 * SM), at most HD_MAX_SLOTS; else 2 if two fit HD_SMEM_LIMIT; 0 (the generic kernel) when the shape
 * does not suit it. */
static int hd_slots(const h3c_fold_args *a) {
    if (a->heads < 1 || a->heads > 256 || a->head_dim % HD_COLS || a->N != a->head_dim) return 0;
    if (((uintptr_t)a->dy | (uintptr_t)a->x) & 15u) return 0;
    if ((a->ld_dy * 4) % 16 || (a->ld_x * 2) % 16) return 0;
    const size_t slot = (size_t)HD_G * (size_t)a->heads * HD_COLS * 4;
    const size_t n = (HD_SMEM_TARGET - HD_BAR_BYTES) / slot;
    if (n < 2) return 2 * slot <= HD_SMEM_LIMIT - HD_BAR_BYTES ? 2 : 0;
    return n > HD_MAX_SLOTS ? HD_MAX_SLOTS : (int)n;
}

static size_t hd_smem_bytes(const h3c_fold_args *a, int slots) {
    return HD_BAR_BYTES + (size_t)slots * HD_G * (size_t)a->heads * HD_COLS * 4;
}

static int g_fold_generic = 0; /* test hook: 1 = HEAD_DW through the generic partial kernel */

extern "C" void h3c_fold_force_generic(int on) { g_fold_generic = on ? 1 : 0; }

#define NORM_ALL_RMAX 12 /* table rows the one-pass kernel takes (4 timesteps of 3 tags); more: the folds apart */

/* NORM_ALL: the one-pass kernel (RMAX 3 or 12, by R), or the three folds apart (the test hook, more table rows). */
static h3s_status fold_norm_all(const char *op, const h3c_fold_args *a) {
    if (!a->out || !a->out2 || !a->out3 || !a->index || !a->indexed)
        return h3s_fail(H3S_ERR_INVALID, "%s: the norm's three folds need out, out2, out3 and an index", op);
    if (g_fold_generic || a->R > NORM_ALL_RMAX) {
        h3c_fold_args b = *a;
        b.mode = H3C_FOLD_RMS_DW, b.R = 1, b.indexed = 0, b.out = a->out3;
        H3S_TRY(h3c_fold(op, &b));
        b = *a;
        b.mode = H3C_FOLD_SHIFT_SCALE, b.table = NULL;
        return h3c_fold(op, &b);
    }
    const int64_t R = a->R;
    if (R <= 0) return H3S_OK;
    const int64_t tiles = (a->M + H3S_FOLD_TILE - 1) / H3S_FOLD_TILE;
    const int64_t cb = (a->N + FOLD_COLS - 1) / FOLD_COLS;
    if (tiles > 65535)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: fold of %lld rows exceeds the grid limits", op, (long long)a->M);
    float *pdw = NULL, *psh = NULL, *psc = NULL;
    uint8_t *has_dw = NULL, *has_r = NULL;
    void *ws = NULL;
    if (tiles > 0) {
        const size_t b1 = ((size_t)tiles * (size_t)a->N * sizeof(float) + 255) & ~(size_t)255;
        const size_t br = ((size_t)tiles * (size_t)R * (size_t)a->N * sizeof(float) + 255) & ~(size_t)255;
        H3S_TRY(h3c_ws_alloc(op, b1 + 2 * br + (size_t)tiles * (size_t)(R + 1), &ws));
        pdw = (float *)ws;
        psh = (float *)((uint8_t *)ws + b1);
        psc = (float *)((uint8_t *)ws + b1 + br);
        has_dw = (uint8_t *)ws + b1 + 2 * br;
        has_r = has_dw + tiles;
        dim3 grid((unsigned)cb, (unsigned)tiles);
        int *flag = h3c_error_flag();
        if (R <= 3)
            fold_norm_all_kernel<3><<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, pdw, psh, psc, has_dw, has_r, flag);
        else
            fold_norm_all_kernel<NORM_ALL_RMAX>
                <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, pdw, psh, psc, has_dw, has_r, flag);
        h3s_status st = h3c_launch_check(op);
        if (st != H3S_OK) {
            h3c_ws_free(ws);
            return st;
        }
    }
    h3c_fold_args b = *a;
    b.out = a->out3;
    fold_final_kernel<<<dim3((unsigned)cb, 1u), FOLD_COLS, 0, H3K_STREAM>>>(b, pdw, has_dw, tiles, 1);
    fold_final_kernel<<<dim3((unsigned)cb, (unsigned)R), FOLD_COLS, 0, H3K_STREAM>>>(*a, psh, has_r, tiles, R);
    b = *a;
    b.out = a->out2;
    fold_final_kernel<<<dim3((unsigned)cb, (unsigned)R), FOLD_COLS, 0, H3K_STREAM>>>(b, psc, has_r, tiles, R);
    h3s_status st = h3c_launch_check(op);
    if (ws) h3c_ws_free(ws);
    return st;
}

extern "C" h3s_status h3c_fold(const char *op, const h3c_fold_args *a) {
    if (a->N <= 0) return H3S_OK;
    if (a->mode == H3C_FOLD_NORM_ALL) return fold_norm_all(op, a);
    const int two = a->mode == H3C_FOLD_SHIFT_SCALE;
    if (two && !a->out2) return h3s_fail(H3S_ERR_INVALID, "%s: the shift and scale fold needs out2", op);
    if (two && g_fold_generic) { /* the reference: the two folds apart */
        h3c_fold_args b = *a;
        b.mode = H3C_FOLD_COPY;
        H3S_TRY(h3c_fold(op, &b));
        b.mode = H3C_FOLD_RMS_DSCALE, b.out = a->out2;
        return h3c_fold(op, &b);
    }
    const int64_t rows_out = a->indexed ? a->R : 1;
    if (rows_out <= 0) return H3S_OK;
    const int64_t tiles = (a->M + H3S_FOLD_TILE - 1) / H3S_FOLD_TILE;
    const int64_t cb = (a->N + FOLD_COLS - 1) / FOLD_COLS;
    if (tiles > 65535 || rows_out > 65535)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: fold of %lld rows into %lld table rows exceeds the grid limits", op,
                        (long long)a->M, (long long)rows_out);
    float *partial = NULL, *partial2 = NULL;
    uint8_t *has = NULL;
    if (tiles > 0) {
        size_t pbytes = (size_t)tiles * (size_t)rows_out * (size_t)a->N * sizeof(float);
        pbytes = (pbytes + 255) & ~(size_t)255;
        void *ws = NULL;
        H3S_TRY(h3c_ws_alloc(op, (two ? 2 : 1) * pbytes + (size_t)tiles * (size_t)rows_out, &ws));
        partial = (float *)ws;
        if (two) partial2 = (float *)((uint8_t *)ws + pbytes);
        has = (uint8_t *)ws + (two ? 2 : 1) * pbytes;
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
                if (e == cudaSuccess) /* the largest carveout: room for two blocks' rings */
                    e = cudaFuncSetAttribute(fold_head_dw_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
                if (e != cudaSuccess) {
                    h3c_ws_free(ws);
                    return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
                }
                attr_set = 1;
            }
            dim3 grid((unsigned)(a->N / HD_COLS), (unsigned)tiles);
            fold_head_dw_kernel<<<grid, HD_THREADS, hd_smem_bytes(a, hd_nslots), H3K_STREAM>>>(*a, hd_nslots, partial,
                                                                                               has);
        } else {
            dim3 grid((unsigned)cb, (unsigned)tiles, (unsigned)rows_out);
            int *flag = h3c_error_flag();
            switch (a->mode) {
            case H3C_FOLD_COPY:
                fold_partial_kernel<H3C_FOLD_COPY>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, NULL, has, rows_out, flag);
                break;
            case H3C_FOLD_RMS_DW:
                fold_partial_kernel<H3C_FOLD_RMS_DW>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, NULL, has, rows_out, flag);
                break;
            case H3C_FOLD_RMS_DSCALE:
                fold_partial_kernel<H3C_FOLD_RMS_DSCALE>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, NULL, has, rows_out, flag);
                break;
            case H3C_FOLD_PRODUCT:
                fold_partial_kernel<H3C_FOLD_PRODUCT>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, NULL, has, rows_out, flag);
                break;
            case H3C_FOLD_HEAD_DW:
                fold_head_dw_generic_kernel<<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, has, flag);
                break;
            case H3C_FOLD_SHIFT_SCALE:
                fold_partial_kernel<H3C_FOLD_SHIFT_SCALE>
                    <<<grid, FOLD_COLS, 0, H3K_STREAM>>>(*a, partial, partial2, has, rows_out, flag);
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
    if (two) { /* the scale chain's partials, into out2 */
        h3c_fold_args b = *a;
        b.out = a->out2;
        fold_final_kernel<<<grid2, FOLD_COLS, 0, H3K_STREAM>>>(b, partial2, has, tiles, rows_out);
    }
    h3s_status st = h3c_launch_check(op);
    if (partial) h3c_ws_free(partial);
    return st;
}

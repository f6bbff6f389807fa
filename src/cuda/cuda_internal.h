/* Internal interface of the strict CUDA backend (src/cuda), shared by the C wrappers
 * (cuda_ops.c) and the CUDA translation units (*.cu).  Plain C types only, so that the C
 * side needs no CUDA header; every function returns an h3s_status with the message already
 * recorded (h3s_fail), CUDA failures as H3S_ERR_DEVICE with the CUDA error string.
 *
 * Execution model: one device (the current CUDA device when the backend first initialises),
 * one non-blocking stream, every kernel, copy and workspace allocation queued on it in
 * program order.  Nothing here waits for the device except the index cache on a miss, the
 * copies between host and device, and h3s_cuda_sync.  docs/numerics/cuda.md describes the
 * kernels. */
#ifndef H3S_CUDA_INTERNAL_H
#define H3S_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "h3s.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ runtime */

/* Initialise on first use (device check, stream, error flag, memory pool). */
h3s_status h3c_init(const char *op);
/* The backend's stream (a cudaStream_t). */
void *h3c_stream(void);
/* Device int[4]: [0] = first failing kernel's code (h3c_code), [2..3] = the bad index value. */
int *h3c_error_flag(void);
/* After a launch: any launch error becomes H3S_ERR_DEVICE naming `op`. */
h3s_status h3c_launch_check(const char *op);
/* Stream-ordered workspace (cudaMallocAsync on the backend stream; freed in stream order). */
h3s_status h3c_ws_alloc(const char *op, size_t bytes, void **ptr);
void h3c_ws_free(void *ptr);
h3s_status h3c_memset(const char *op, void *dptr, size_t bytes);
h3s_status h3c_copy_d2d(const char *op, void *dst, const void *src, size_t bytes);
/* Device copy of an index or mask tensor.  A device tensor is returned as it is (its kernel
 * bounds-checks it); a host tensor is looked up by content (byte length + exact bytes) in a
 * small cache of device copies and uploaded on a miss. */
h3s_status h3c_index_on_device(const char *op, const h3s_tensor *t, const void **dptr);

/* Codes a kernel writes into the error flag when it meets an index outside its range. */
enum h3c_code {
    H3C_CODE_NONE = 0,
    H3C_CODE_RMSNORM_FORWARD = 1,
    H3C_CODE_RMSNORM_BACKWARD = 2,
    H3C_CODE_RESIDUAL_FORWARD = 3,
    H3C_CODE_RESIDUAL_BACKWARD = 4,
    H3C_CODE_ROWS_GATHER = 5,
    H3C_CODE_ROWS_SCATTER = 6,
    H3C_CODE_FINAL_NORM_FORWARD = 7,
    H3C_CODE_FINAL_NORM_BACKWARD = 8,
    H3C_CODE_COUNT = 9
};
const char *h3c_code_name(int code);

/* ------------------------------------------------------------------ GEMM (tensor cores)
 * C[P, Q] = sum_r A(p, r) B(q, r), BF16 operands, FP32 accumulation, one fixed reduction order
 * for every output element (docs/numerics/linear_cuda.md).  Shapes with K and N multiples of 8
 * run on the Hopper kernels (wgmma fed by TMA); the others on the mma.sync kernel.  The choice
 * depends on (K, N) and the build only. */

/* y[M, N] = bf16(x[M, K] w[N, K]^T (+ b[N])).  x, w, b, y BF16. */
h3s_status h3c_gemm_bf16_forward(const char *op, int64_t M, int64_t N, int64_t K, const void *x, const void *w,
                                 const void *b, void *y);
/* dx[M, K] = dy[M, N] w[N, K] and dw[N, K] = tile fold over 256-row tiles of dy^T x (either
 * output may be NULL); dy F32, w and x BF16, dx F32, dw F32 (dw_bf16 = 0) or BF16 (dw_bf16 = 1: the F32 fold
 * rounded once to nearest even, bit for bit the F32 result rounded).  dy enters the tensor cores as
 * h3s_get_grad_operands() says (rounded once to BF16, converted once for both products, or
 * split into hi + lo).  dyb (may be NULL): dy already rounded to BF16 by its producer, read instead of the rounding
 * pass when the operands are BF16 (the same bits). */
h3s_status h3c_gemm_bf16_backward(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *dyb,
                                  const void *w, const void *x, float *dx, void *dw, int dw_bf16);
h3s_status h3c_gemm_bf16_dx(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *w, float *dx);
h3s_status h3c_gemm_bf16_dw(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const void *x, float *dw);
/* The two products with dy already in BF16 (dyb [M, N]); K and N multiples of 8. */
h3s_status h3c_gemm_bf16_dgrad_bf16(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb, const void *w,
                                    float *dx);
h3s_status h3c_gemm_bf16_wgrad_bf16(const char *op, int64_t M, int64_t N, int64_t K, const void *dyb, const void *x,
                                    void *dw, int dw_bf16);
/* The GEMM epilogues' hardware BF16 pack (h3k_f2bf2) against the software rounding (h3k_f2bf) on the F32 bit patterns
 * i * step (step odd; 1: all 2^32): *mismatches pairs differ, the smallest differing pattern in *first (0xffffffff
 * when none). */
h3s_status h3c_bf16_pack_selftest(uint32_t step, uint64_t *mismatches, uint32_t *first);
/* dst[i] = bf16(src[i]) (round to nearest even), n elements. */
h3s_status h3c_round_bf16(const char *op, int64_t n, const float *src, void *dst);
/* 1 when (N, K) runs on the Hopper kernels. */
int h3c_gemm_wgmma_shape(int64_t N, int64_t K);
/* 1 when the dgrad of (N, K) folds its reduction every H3C_DGRAD_FOLD_TILE rows (N >= 8 K: a long reduction into
 * few columns, the AdaLN projection's); such a dgrad runs split across the multiprocessors at M <= H3C_DGRAD_SPLIT_M.
 */
int h3c_gemm_dgrad_folds(int64_t N, int64_t K);
#define H3C_DGRAD_SPLIT_M 64
/* The folded dgrad's fold tile: its chain restarts every 1024 reduction rows (a multiple of the wgrad's 256-row
 * H3S_FOLD_TILE), the tile partials added in ascending order.  A constant of the build, never of M. */
#define H3C_DGRAD_FOLD_TILE 1024
/* Test hooks: the number of forward/dgrad configurations the dispatcher can pick (0 and 1: 128 x 256 and 128 x 192
 * tiles; 2 and 3: 64 x 64 tiles for 16 < M <= 64; 4 and 5: transposed, M along 160- and 232-column tiles; 6 and 7:
 * transposed 64 x 16 tiles for M <= 16; 8 and 9: the bands, 0's or 5's whole waves and then 1's or 4's tiles on the
 * rows left; 10: the short band, 0's whole waves and then the rows left, at most 64, in their small-M configuration;
 * 11: 0 on 2-CTA clusters sharing the B block by multicast, which the dispatcher takes instead of 0 from 16384 rows
 * on; 12: 192 x 192 tiles on three consumer warpgroups, where their estimate wins by 3%), and an override (-1 = the
 * dispatcher's own choice by M). */
int h3c_gemm_config_count(void);
h3s_status h3c_gemm_force_config(int config);
/* Test hook: the forward/dgrad/wgrad kernels' tile raster (tile-rows per group of the grouped order, default 16) and an
 * L2 policy for the copies of operand A and of operand B (0 none, the default; 1 evict-first; 2 evict-last) in every
 * configuration but the folded dgrad's split (whose weight is evict-first).  Which CTA computes a tile, when, and how
 * long the operands stay in L2: never a result.  H3S_ERR_INVALID outside 1..4096 and 0..2. */
h3s_status h3c_gemm_raster(int group, int hint_a, int hint_b);
/* The kept tensor maps of the GEMMs and attention (src/cuda/linear.cu, make_map): h3c_gemm_map_cache(1) keeps them
 * (the default), 0 encodes every map and forgets the kept ones, any other value only asks; returns the setting
 * before.  The counts are of lookups that found a kept map and of encodes since the start.  h3c_gemm_tensor_map
 * writes into map (128 bytes, 64-byte aligned) the map the GEMMs would use for a BF16 (f32 = 0) or F32 operand of
 * rows x cols, row stride ld elements, box box_cols x box_rows: for tests that compare a kept map with a fresh
 * encode. */
int h3c_gemm_map_cache(int on);
void h3c_gemm_map_cache_counts(uint64_t *hits, uint64_t *misses);
h3s_status h3c_gemm_tensor_map(const void *base, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows,
                               int f32, void *map);
/* Test hook: the rows of a band's first launch (forward/dgrad configurations 8 and 10: P = the output's rows, Q its
 * columns; 9, transposed: P = the output's columns, Q its rows), 0 when the band runs as one launch. */
int64_t h3c_gemm_band_rows(int config, int64_t P, int64_t Q);
/* Test hook: the configuration the forward/dgrad dispatcher takes for an M x Q output (forward: Q = N, dgrad of a
 * shape that does not fold: Q = K), without the override; a function of (M, Q) alone, host code (no device).  -1 for
 * M or Q <= 0. */
int h3c_gemm_dispatch_config(int64_t M, int64_t Q);
/* The wgrad's override: -1 = the dispatcher's choice (one fold tile without the fold at M <= 256), 0 = the fold on
 * 128 x 192 tiles, 1 = the one-tile configuration (refused at M > 256), 5 = 1 with bulk stores (refused at M > 256),
 * 7 and 8 = the overlapped folds, 9 = 7 transposed (F32 dw only, refused for BF16 dw).  All give the same bits where
 * they apply.  2, 3, 4 and 6 were removed (h3c_gemm_wgrad_config_removed) and are refused. */
int h3c_gemm_wgrad_config_count(void);
int h3c_gemm_wgrad_config_removed(int config);
h3s_status h3c_gemm_force_wgrad(int config);
/* The previous strict forward kernel (mma.sync), for side-by-side benchmarks. */
h3s_status h3c_gemm_bf16_forward_mma(const char *op, int64_t M, int64_t N, int64_t K, const void *x, const void *w,
                                     const void *b, void *y);

/* ------------------------------------------------------------------ GEMM (FP32 FFMA)
 * All F32, one FMA chain per output in ascending reduction order from +0 (the same chain as
 * the CPU's strict F32 linear). */
h3s_status h3c_sgemm_forward(const char *op, int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                             const float *b, float *y);
h3s_status h3c_sgemm_dx(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const float *w, float *dx);
h3s_status h3c_sgemm_dw(const char *op, int64_t M, int64_t N, int64_t K, const float *dy, const float *x, float *dw);
/* Test hooks: the number of tile configurations (64, 32, 16 outputs square per CTA) and an override (-1 = the
 * dispatcher's choice by the output's size).  Every configuration gives the same bits. */
int h3c_sgemm_config_count(void);
h3s_status h3c_sgemm_force_config(int config);

/* ------------------------------------------------------------------ canonical tile fold
 * out[r * ldo + n] (n < N, r < R) = fold over 256-row tiles (ascending) of the per-tile
 * partial (rows ascending) of contrib(m, n).  Indexed folds only take rows with
 * index[m] == r; a table row no index names gets 0.  Non-indexed: R = 1. */
enum h3c_fold_mode {
    H3C_FOLD_COPY = 0,        /* dy[m, n] */
    H3C_FOLD_RMS_DW = 1,      /* (dy * (1 + scale)) * (x * inv[m]) */
    H3C_FOLD_RMS_DSCALE = 2,  /* dy * ((x * inv[m]) * w) */
    H3C_FOLD_PRODUCT = 3,     /* dy * x (residual gate: dout * y) */
    H3C_FOLD_HEAD_DW = 4,     /* chain over heads h of dy[m, h, n] * (x[m, h, n] * inv[m, h]) */
    H3C_FOLD_SHIFT_SCALE = 5, /* COPY into out and RMS_DSCALE into out2 (same rows, same ldo), in one pass */
    H3C_FOLD_NORM_ALL = 6     /* SHIFT_SCALE (indexed, into out and out2) and RMS_DW (over every row, into out3 [N],
                               * with table) in one pass: a modulated norm's three cross-row sums */
};

typedef struct h3c_fold_args {
    int mode;
    int code;             /* error code for a bad index */
    int64_t M, N;         /* rows, output columns */
    int64_t R;            /* table rows of an indexed fold (output rows); 1 otherwise */
    int indexed;          /* fold per table row through `index` */
    const int64_t *index; /* [M] device: the fold's index and/or the scale table's row index */
    int64_t index_limit;  /* valid index range [0, index_limit) */
    const float *dy;
    int64_t ld_dy;
    const void *x; /* BF16 */
    int64_t ld_x;
    const float *inv;  /* [M] (or [M * heads] for HEAD_DW) */
    const void *w;     /* BF16 [N] or NULL */
    const void *table; /* BF16 scale rows for RMS_DW: table[index[m] * ld_table + scale_off + n], or NULL */
    int64_t ld_table, scale_off;
    int64_t heads, head_dim; /* HEAD_DW: x/dy columns h * head_dim + n */
    float *out;
    int64_t ldo;
    float *out2; /* SHIFT_SCALE, NORM_ALL: the RMS_DSCALE output */
    float *out3; /* NORM_ALL: the RMS_DW output [N] */
} h3c_fold_args;

h3s_status h3c_fold(const char *op, const h3c_fold_args *a);
/* Test hook: nonzero routes HEAD_DW through the generic partial kernel, SHIFT_SCALE through two separate folds
 * (COPY, RMS_DSCALE) and NORM_ALL through three (RMS_DW, COPY, RMS_DSCALE): the references the dedicated kernels must
 * equal bit for bit. */
void h3c_fold_force_generic(int on);

/* ------------------------------------------------------------------ norms */
/* Test hook: nonzero makes the RMSNorm and per-head norm kernels (forward and backward) take one column at a time in
 * every pass instead of holding a row (or a head) in registers and writing the forward's outputs several columns at
 * a time (the same bits; the tests compare the two). */
void h3c_norm_force_generic(int on);
/* x, w, table BF16 (w / table may be NULL); y BF16 or F32 (y_dt). index device or NULL. */
h3s_status h3c_rmsnorm_forward(const char *op, int code, int64_t M, int64_t H, const void *x, const void *w,
                               const void *table, const int64_t *index, int64_t R, int64_t ld_table, int64_t shift_off,
                               int64_t scale_off, float eps, void *y, int y_dt);
/* dx (F32, may be NULL; dx_add + the norm's dx when dx_add is not NULL) and inv[M] (F32 workspace, always
 * written). */
h3s_status h3c_rmsnorm_backward_rows(const char *op, int code, int64_t M, int64_t H, const void *x, const void *w,
                                     const void *table, const int64_t *index, int64_t R, int64_t ld_table,
                                     int64_t scale_off, float eps, const float *dy, const float *dx_add, float *dx,
                                     float *inv);
h3s_status h3c_head_rmsnorm_forward(const char *op, int64_t M, int64_t heads, int64_t D, const void *x, const void *w,
                                    float eps, void *y);
/* dx (may be NULL), dxb (dx rounded to BF16 as well; NULL, or only with dx) and inv[M * heads] (always written). */
h3s_status h3c_head_rmsnorm_backward_rows(const char *op, int64_t M, int64_t heads, int64_t D, const void *x,
                                          const void *w, float eps, const float *dy, float *dx, void *dxb, float *inv);

/* ------------------------------------------------------------------ attention */
typedef struct h3c_attn_args {
    int64_t B, S, heads, D;
    float scale;
    const void *q, *k, *v;     /* BF16 [B*S, heads*D] */
    const int64_t *doc;        /* device [S] or NULL */
    const uint8_t *kv;         /* device [B*S] or NULL */
    void *out;                 /* BF16 */
    float *stats;              /* [B*S, heads, 2] */
    const void *out_in;        /* backward: forward output (BF16) */
    const float *stats_in;     /* backward */
    const float *dout, *delta; /* backward: F32 [B*S, heads*D]; delta workspace [B*S*heads] */
    float *dq, *dk, *dv;
    uint16_t *dvb; /* backward: dv rounded to BF16 (h3k_f2bf) as it is stored, or NULL; dv itself may then be NULL */
    float *delta_out;
    /* the masks' host data when the caller gave host tensors (the plan is built from them, with no copy back and
     * no synchronisation); NULL otherwise */
    const int64_t *doc_host;
    const uint8_t *kv_host;
} h3c_attn_args;

/* Supported head dims: 1..128; 128 runs on the tensor cores (src/cuda/attention.cu), the others on
 * the two-pass CUDA-core kernels.  The test hook routes 128 to the CUDA-core kernels too. */
void h3c_attention_force_reference(int on);
/* Test hook: on > 0 runs head_dim 128's forward through the first tensor-core kernel (every thread copies, a CTA
 * barrier per key tile), on = 0 through the warp-specialised one, on < 0 the build's default (the first kernel
 * until the other has been measured on a GPU); both give the same bits. */
void h3c_attention_force_fwd_v1(int on);
/* Test hook: on = 1 makes the warp-specialised forward and the backward gather every tile with the threads' copies
 * instead of loading tiles of consecutive rows with the bulk tensor copy; the same bits either way. */
void h3c_attention_force_gather(int on);
/* Test hook: the budget in bytes of the backward's stored bf16(dS) (heads go through the dk/dv and dq kernels in
 * chunks that fit in it, at least one head each); 0 restores the default (8 GiB).  The same bits for any budget. */
void h3c_attention_set_ds_budget(unsigned long long bytes);
h3s_status h3c_attention_forward(const char *op, const h3c_attn_args *a);
/* Frees the tensor-core attention's cached plans (h3s_cuda_release_caches). */
void h3c_attention_release_plans(void);
h3s_status h3c_attention_backward(const char *op, const h3c_attn_args *a);

/* ------------------------------------------------------------------ elementwise */
/* Test hook: on = 1 runs the one-thread-per-element reference kernels instead of the row kernels
 * (rope apply, residual, swiglu, grad_add, and h3c_round_bf16), which must give the same bits;
 * h3c_elem_reference() reads the setting. */
void h3c_elem_force_reference(int on);
int h3c_elem_reference(void);
h3s_status h3c_rope_table(const char *op, int64_t S, int64_t F, double theta, const void *pos, int pos_dt,
                          float *cos_out, float *sin_out);
/* forward: BF16 x -> BF16 y; backward: F32 dy -> F32 dx (in may alias out). */
h3s_status h3c_rope_apply(const char *op, int backward, int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R,
                          const float *cos_t, const float *sin_t, const void *in, void *out);
h3s_status h3c_residual_forward(const char *op, int64_t M, int64_t H, const void *r, const void *y, const void *table,
                                const int64_t *index, int64_t R, int64_t ld_table, int64_t gate_off, void *out);
/* dy = dout * gate (or dout without a table); dr = dout; dy_bf16 (may be NULL; only with dy) = dy rounded to BF16. */
h3s_status h3c_residual_backward_rows(const char *op, int64_t M, int64_t H, const void *table, const int64_t *index,
                                      int64_t R, int64_t ld_table, int64_t gate_off, const float *dout, float *dr,
                                      float *dy, void *dy_bf16);
h3s_status h3c_swiglu_forward(const char *op, int64_t M, int64_t F, const void *u, void *h);
/* du_bf16 (may be NULL): du rounded to BF16 as well, in the same pass. */
h3s_status h3c_swiglu_backward(const char *op, int64_t M, int64_t F, const void *u, const float *dh, float *du,
                               void *du_bf16);
/* a = bf16(float(silu(temb))) elementwise. */
h3s_status h3c_silu_to_bf16(const char *op, int64_t n, const float *temb, void *a);
/* s = float(silu(h)) elementwise (F32 -> F32). */
h3s_status h3c_silu_f32(const char *op, int64_t n, const float *h, float *s);
/* g[i] = g[i] * float(silu'(h[i])) in place. */
h3s_status h3c_mul_silu_grad(const char *op, int64_t n, const float *h, float *g);
h3s_status h3c_timestep_sinusoid_forward(const char *op, int64_t T, int64_t freq_dim, const float *t, float *out);
h3s_status h3c_timestep_sinusoid_backward(const char *op, int64_t T, int64_t freq_dim, const float *t,
                                          const float *dout, float *dt);
/* Batched row copy: scatter = 0: dst[b*n + i] = src[b*Ss + index[i]]; scatter = 1:
 * dst[b*Sd + index[i]] = src[b*n + i].  src/dst F32 or BF16 (converted, one rounding). */
h3s_status h3c_rows_copy(const char *op, int scatter, int code, int64_t batch, int64_t n, int64_t src_rows,
                         int64_t dst_rows, int64_t width, const void *src, int src_dt, void *dst, int dst_dt,
                         const int64_t *index);
/* out = a + b, or (a + b) + c when c is not NULL; out may alias any input (element by element). */
h3s_status h3c_add_f32(const char *op, int64_t n, const float *a, const float *b, const float *c, float *out);
/* Seeded values (uniform in [-scale, scale) times sqrt(3): unit variance for scale 1) into a
 * F32 or BF16 device buffer; a counter hash of (seed, i), the same on every launch. */
h3s_status h3c_fill_random(const char *op, int64_t n, uint64_t seed, float scale, void *dst, int dst_dt);

#ifdef __cplusplus
}
#endif
#endif

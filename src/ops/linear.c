/* Linear (GEMM) forward and backward: strict BF16, strict F32 and the F64 golden.
 *
 * The one rule every strict path obeys (docs/numerics/linear.md): each output element is one
 * FP32 FMA chain that starts at +0 and runs over the reduction index in ascending order,
 * acc = fmaf(a, b, acc); the forward then adds the bias in FP32 and rounds once to the
 * output dtype.  The weight gradient runs that chain inside each 256-row tile and folds the
 * tile partials in ascending tile order (ops/fold.h).  Packing, K blocking (the FP32
 * accumulator is stored and reloaded exactly between K blocks), register tiles, cache blocks
 * and threads only decide *where* a chain is computed, never its order, so the bits depend
 * neither on M, nor on a row's position, nor on the thread count, nor on the kernel
 * (scalar, AVX2 or AVX-512: an FMA lane rounds exactly like fmaf). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LIN_X86 1
#else
#define LIN_X86 0
#endif

#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "ops/fold.h"
#include "ops/linear_internal.h"
#include "ops/ops.h"

/* Cache blocking of the packed path.  None of these reaches the bits. */
#ifndef LIN_KC
#define LIN_KC 256 /* reduction block */
#endif
#ifndef LIN_MC
#define LIN_MC 96 /* rows per work item, at most (a multiple of every kernel's MR) */
#endif
#ifndef LIN_NC
#define LIN_NC 2048 /* columns per chunk: the packed B block LIN_KC x LIN_NC is shared by the threads */
#endif
#ifndef LIN_B_BYTES
#define LIN_B_BYTES (4u << 20) /* packed B block: as many LIN_KC blocks as fit, one barrier per block */
#endif
#ifndef LIN_ACC_BYTES
#define LIN_ACC_BYTES (4u << 20) /* FP32 accumulators of one row superblock x one column chunk */
#endif
#ifndef LIN_DW_MC
#define LIN_DW_MC 192 /* dw: output rows (n) per work item, at most (a multiple of every MR) */
#endif
#ifndef LIN_DW_NB
#define LIN_DW_NB 512 /* dw: output columns (k) per work item, at most */
#endif

/* ------------------------------------------------------------------ implementation switch */

static int lin_forced = H3S_LINEAR_AUTO;

int h3s_linear_impl_available(h3s_linear_impl impl) {
    switch (impl) {
    case H3S_LINEAR_AUTO:
    case H3S_LINEAR_SCALAR: return 1;
#if LIN_X86
    case H3S_LINEAR_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case H3S_LINEAR_AVX512: return __builtin_cpu_supports("avx512f") != 0;
#else
    case H3S_LINEAR_AVX2:
    case H3S_LINEAR_AVX512: return 0;
#endif
    }
    return 0;
}

const char *h3s_linear_impl_name(h3s_linear_impl impl) {
    switch (impl) {
    case H3S_LINEAR_AUTO: return "auto";
    case H3S_LINEAR_SCALAR: return "scalar";
    case H3S_LINEAR_AVX2: return "avx2-6x16";
    case H3S_LINEAR_AVX512: return "avx512-12x32";
    }
    return "?";
}

h3s_status h3s_linear_set_impl(h3s_linear_impl impl) {
    if ((int)impl < H3S_LINEAR_AUTO || (int)impl > H3S_LINEAR_AVX512)
        return h3s_fail(H3S_ERR_INVALID, "linear_set_impl: unknown implementation %d", (int)impl);
    if (!h3s_linear_impl_available(impl))
        return h3s_fail(H3S_ERR_UNSUPPORTED, "linear_set_impl: this CPU cannot run the %s kernel",
                        h3s_linear_impl_name(impl));
    lin_forced = impl;
    return H3S_OK;
}

h3s_linear_impl h3s_linear_get_impl(void) {
    if (lin_forced != H3S_LINEAR_AUTO) return (h3s_linear_impl)lin_forced;
    if (h3s_linear_impl_available(H3S_LINEAR_AVX512)) return H3S_LINEAR_AVX512;
    if (h3s_linear_impl_available(H3S_LINEAR_AVX2)) return H3S_LINEAR_AVX2;
    return H3S_LINEAR_SCALAR;
}

/* ------------------------------------------------------------------ element access */

static inline float load_f32(const void *p, h3s_dtype dt, int64_t i) {
    return dt == H3S_BF16 ? h3s_bf16_value(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void store_f32(void *p, h3s_dtype dt, int64_t i, float v) {
    if (dt == H3S_BF16)
        ((uint16_t *)p)[i] = h3s_bf16_round(v);
    else
        ((float *)p)[i] = v;
}

/* C[M, N] = A[M, K] B[K, N] (+ bias[N]) with A(i, p) = a[i*a_si + p*a_sp] and
 * B(p, j) = b[p*b_sp + j*b_sj]; A and B F32 or BF16, C F32 or BF16 with row stride ldc. */
typedef struct gemm_problem {
    int64_t M, N, K;
    const void *a;
    h3s_dtype adt;
    int64_t a_si, a_sp;
    const void *b;
    h3s_dtype bdt;
    int64_t b_sp, b_sj;
    const void *bias; /* [N] in bias_dt, or NULL */
    h3s_dtype bias_dt;
    void *c;
    h3s_dtype cdt;
    int64_t ldc;
} gemm_problem;

/* The end of every forward/dx chain: bias after the sum (only when there is one: adding +0
 * would turn a -0 sum into +0), then the one rounding. */
static inline void gemm_finish(const gemm_problem *g, int64_t i, int64_t j, float acc) {
    float v = acc;
    if (g->bias) v = v + load_f32(g->bias, g->bias_dt, j);
    store_f32(g->c, g->cdt, i * g->ldc + j, v);
}

/* h3s_bf16_round written without a branch, so that a row of them vectorises (checked equal
 * to h3s_bf16_round on all 2^32 inputs when it was written; the tests compare both paths). */
static inline uint16_t bf16_round_branchless(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* gemm_finish over cols consecutive outputs of row i from the FP32 chain results t[]: the
 * same two operations per element, written as loops the compiler can vectorise. */
static void gemm_finish_row(const gemm_problem *g, int64_t i, int64_t j0, int64_t cols, const float *t) {
    if (g->cdt == H3S_F32) {
        float *o = (float *)g->c + i * g->ldc + j0;
        if (g->bias && g->bias_dt == H3S_F32) {
            const float *b = (const float *)g->bias + j0;
            for (int64_t c = 0; c < cols; c++)
                o[c] = t[c] + b[c];
            return;
        }
        if (!g->bias) {
            memcpy(o, t, (size_t)cols * sizeof(float));
            return;
        }
    } else if (g->cdt == H3S_BF16) {
        uint16_t *o = (uint16_t *)g->c + i * g->ldc + j0;
        if (g->bias && g->bias_dt == H3S_BF16) {
            const uint16_t *b = (const uint16_t *)g->bias + j0;
            for (int64_t c = 0; c < cols; c++)
                o[c] = bf16_round_branchless(t[c] + h3s_bf16_value(b[c]));
            return;
        }
        if (!g->bias) {
            for (int64_t c = 0; c < cols; c++)
                o[c] = bf16_round_branchless(t[c]);
            return;
        }
    }
    for (int64_t c = 0; c < cols; c++) /* any other combination */
        gemm_finish(g, i, j0 + c, t[c]);
}

/* ------------------------------------------------------------------ scalar reference */

static void gemm_scalar(const gemm_problem *g, int nt) {
    const int64_t M = g->M, N = g->N, K = g->K;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < K; p++)
                acc = fmaf(load_f32(g->a, g->adt, i * g->a_si + p * g->a_sp),
                           load_f32(g->b, g->bdt, p * g->b_sp + j * g->b_sj), acc);
            gemm_finish(g, i, j, acc);
        }
    }
}

/* dw[n, k] = fold over 256-row tiles of (FMA chain over the tile's rows m ascending, from +0,
 * of dy[m, n] * x[m, k]); tile partials folded in ascending tile order, from tile 0's. */
static void dw_scalar(const float *dy, const void *x, h3s_dtype xdt, int64_t M, int64_t N, int64_t K, float *dw,
                      int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            float total = 0.0f;
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {
                int64_t t1 = t0 + H3S_FOLD_TILE < M ? t0 + H3S_FOLD_TILE : M;
                float part = 0.0f;
                for (int64_t m = t0; m < t1; m++)
                    part = fmaf(dy[m * N + n], load_f32(x, xdt, m * K + k), part);
                total = t0 == 0 ? part : total + part;
            }
            dw[n * K + k] = total;
        }
    }
}

/* ------------------------------------------------------------------ packed kernels
 * A microkernel computes an MR x NR register tile over L reduction steps:
 *   acc[r*NR + c] = fma chain over p < L of ap[p*MR + r] * bp[p*NR + c],
 * starting from +0 (first) or from the FP32 values already in acc (a later K block). */
typedef void (*lin_kernel_fn)(int64_t L, const float *ap, const float *bp, float *acc, int first);

typedef struct lin_kernel {
    int mr, nr;
    lin_kernel_fn fn;
} lin_kernel;

#if LIN_X86
#define AVX2_ROW(r)                                                                                                    \
    do {                                                                                                               \
        __m256 a_ = _mm256_broadcast_ss(ap + (r));                                                                     \
        c##r##0 = _mm256_fmadd_ps(a_, b0, c##r##0);                                                                    \
        c##r##1 = _mm256_fmadd_ps(a_, b1, c##r##1);                                                                    \
    } while (0)

__attribute__((target("avx2,fma"))) static void kernel_avx2_6x16(int64_t L, const float *ap, const float *bp,
                                                                 float *acc, int first) {
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (first) {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    } else {
        c00 = _mm256_loadu_ps(acc + 0), c01 = _mm256_loadu_ps(acc + 8);
        c10 = _mm256_loadu_ps(acc + 16), c11 = _mm256_loadu_ps(acc + 24);
        c20 = _mm256_loadu_ps(acc + 32), c21 = _mm256_loadu_ps(acc + 40);
        c30 = _mm256_loadu_ps(acc + 48), c31 = _mm256_loadu_ps(acc + 56);
        c40 = _mm256_loadu_ps(acc + 64), c41 = _mm256_loadu_ps(acc + 72);
        c50 = _mm256_loadu_ps(acc + 80), c51 = _mm256_loadu_ps(acc + 88);
    }
    for (int64_t p = 0; p < L; p++) {
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        AVX2_ROW(0);
        AVX2_ROW(1);
        AVX2_ROW(2);
        AVX2_ROW(3);
        AVX2_ROW(4);
        AVX2_ROW(5);
        ap += 6;
        bp += 16;
    }
    _mm256_storeu_ps(acc + 0, c00), _mm256_storeu_ps(acc + 8, c01);
    _mm256_storeu_ps(acc + 16, c10), _mm256_storeu_ps(acc + 24, c11);
    _mm256_storeu_ps(acc + 32, c20), _mm256_storeu_ps(acc + 40, c21);
    _mm256_storeu_ps(acc + 48, c30), _mm256_storeu_ps(acc + 56, c31);
    _mm256_storeu_ps(acc + 64, c40), _mm256_storeu_ps(acc + 72, c41);
    _mm256_storeu_ps(acc + 80, c50), _mm256_storeu_ps(acc + 88, c51);
}
#undef AVX2_ROW

/* 12 x 32: 24 zmm accumulators, two B vectors, one broadcast. */
#define AVX512_ROW(r)                                                                                                  \
    do {                                                                                                               \
        __m512 a_ = _mm512_set1_ps(ap[r]);                                                                             \
        c[2 * (r)] = _mm512_fmadd_ps(a_, b0, c[2 * (r)]);                                                              \
        c[2 * (r) + 1] = _mm512_fmadd_ps(a_, b1, c[2 * (r) + 1]);                                                      \
    } while (0)

__attribute__((target("avx512f"))) static void kernel_avx512_12x32(int64_t L, const float *ap, const float *bp,
                                                                   float *acc, int first) {
    __m512 c[24];
    for (int i = 0; i < 24; i++)
        c[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 16 * i);
    for (int64_t p = 0; p < L; p++) {
        __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
        AVX512_ROW(0);
        AVX512_ROW(1);
        AVX512_ROW(2);
        AVX512_ROW(3);
        AVX512_ROW(4);
        AVX512_ROW(5);
        AVX512_ROW(6);
        AVX512_ROW(7);
        AVX512_ROW(8);
        AVX512_ROW(9);
        AVX512_ROW(10);
        AVX512_ROW(11);
        ap += 12;
        bp += 32;
    }
    for (int i = 0; i < 24; i++)
        _mm512_storeu_ps(acc + 16 * i, c[i]);
}
#undef AVX512_ROW
#endif

static int lin_kernel_for(h3s_linear_impl impl, lin_kernel *k) {
#if LIN_X86
    if (impl == H3S_LINEAR_AVX2) {
        *k = (lin_kernel){6, 16, kernel_avx2_6x16};
        return 1;
    }
    if (impl == H3S_LINEAR_AVX512) {
        *k = (lin_kernel){12, 32, kernel_avx512_12x32};
        return 1;
    }
#endif
    (void)impl;
    (void)k;
    return 0;
}

/* dst[p*W + r] = S(r, p) for r < R, 0 for R <= r < W, p < L, with S(r, p) = src[r*sr + p*sp]
 * (elements of dtype dt; BF16 widened exactly). */
static inline const void *elem_ptr(const void *base, h3s_dtype dt, int64_t i) {
    return (const char *)base + (size_t)i * h3s_dtype_size(dt);
}

#if LIN_X86
/* Rows r0..r0+7 of a p-contiguous source, 8 steps at a time: eight row loads, an 8 x 8
 * transpose, eight stores of 8 consecutive r.  Moves values only (BF16 widened exactly). */
__attribute__((target("avx2"))) static void pack_rows8_avx2(const void *src, h3s_dtype dt, int64_t sr, int W, int64_t L,
                                                            float *dst) {
    int64_t p = 0;
    for (; p + 8 <= L; p += 8) {
        __m256 v[8];
        for (int i = 0; i < 8; i++) {
            if (dt == H3S_BF16) {
                __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i * sr + p));
                v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            } else {
                v[i] = _mm256_loadu_ps((const float *)src + i * sr + p);
            }
        }
        __m256 a0 = _mm256_unpacklo_ps(v[0], v[1]), a1 = _mm256_unpackhi_ps(v[0], v[1]);
        __m256 a2 = _mm256_unpacklo_ps(v[2], v[3]), a3 = _mm256_unpackhi_ps(v[2], v[3]);
        __m256 a4 = _mm256_unpacklo_ps(v[4], v[5]), a5 = _mm256_unpackhi_ps(v[4], v[5]);
        __m256 a6 = _mm256_unpacklo_ps(v[6], v[7]), a7 = _mm256_unpackhi_ps(v[6], v[7]);
        __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
        __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
        __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
        __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
        _mm256_storeu_ps(dst + (p + 0) * W, _mm256_permute2f128_ps(b0, b4, 0x20));
        _mm256_storeu_ps(dst + (p + 1) * W, _mm256_permute2f128_ps(b1, b5, 0x20));
        _mm256_storeu_ps(dst + (p + 2) * W, _mm256_permute2f128_ps(b2, b6, 0x20));
        _mm256_storeu_ps(dst + (p + 3) * W, _mm256_permute2f128_ps(b3, b7, 0x20));
        _mm256_storeu_ps(dst + (p + 4) * W, _mm256_permute2f128_ps(b0, b4, 0x31));
        _mm256_storeu_ps(dst + (p + 5) * W, _mm256_permute2f128_ps(b1, b5, 0x31));
        _mm256_storeu_ps(dst + (p + 6) * W, _mm256_permute2f128_ps(b2, b6, 0x31));
        _mm256_storeu_ps(dst + (p + 7) * W, _mm256_permute2f128_ps(b3, b7, 0x31));
    }
    for (; p < L; p++)
        for (int i = 0; i < 8; i++)
            dst[p * W + i] =
                dt == H3S_BF16 ? h3s_bf16_value(((const uint16_t *)src)[i * sr + p]) : ((const float *)src)[i * sr + p];
}
#endif

static void pack_panel(const void *src, h3s_dtype dt, int64_t sr, int64_t sp, int64_t R, int W, int64_t L, float *dst) {
    int64_t r_done = 0; /* rows [0, r_done) already packed */
#if LIN_X86
    if (sp == 1 && R >= 8 && __builtin_cpu_supports("avx2"))
        for (; r_done + 8 <= R; r_done += 8)
            pack_rows8_avx2(elem_ptr(src, dt, r_done * sr), dt, sr, W, L, dst + r_done);
#endif
    if (dt == H3S_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        if (sp == 1) {
            for (int64_t r = r_done; r < R; r++)
                for (int64_t p = 0; p < L; p++)
                    dst[p * W + r] = h3s_bf16_value(s[r * sr + p]);
        } else if (sr == 1) { /* r contiguous: a row copy per step */
            for (int64_t p = 0; p < L; p++) {
                const uint16_t *sp_row = s + p * sp;
                float *d = dst + p * W;
                for (int64_t r = r_done; r < R; r++)
                    d[r] = h3s_bf16_value(sp_row[r]);
            }
        } else {
            for (int64_t p = 0; p < L; p++)
                for (int64_t r = r_done; r < R; r++)
                    dst[p * W + r] = h3s_bf16_value(s[r * sr + p * sp]);
        }
    } else {
        const float *s = (const float *)src;
        if (sp == 1) {
            for (int64_t r = r_done; r < R; r++)
                for (int64_t p = 0; p < L; p++)
                    dst[p * W + r] = s[r * sr + p];
        } else if (sr == 1) {
            for (int64_t p = 0; p < L; p++)
                memcpy(dst + p * W + r_done, s + p * sp + r_done, (size_t)(R - r_done) * sizeof(float));
        } else {
            for (int64_t p = 0; p < L; p++)
                for (int64_t r = r_done; r < R; r++)
                    dst[p * W + r] = s[r * sr + p * sp];
        }
    }
    if (R < W)
        for (int64_t p = 0; p < L; p++)
            for (int64_t r = R; r < W; r++)
                dst[p * W + r] = 0.0f;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Workspace: one checked allocation made before any output is written, carved into 64-byte
 * aligned float buffers. */
typedef struct lin_ws {
    void *raw;
    float *base;
} lin_ws;

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static h3s_status ws_alloc(lin_ws *ws, size_t floats, const char *what) {
    ws->raw = h3s_malloc(floats + 16, sizeof(float));
    if (!ws->raw) return h3s_fail_context(H3S_ERR_NOMEM, "%s workspace", what);
    ws->base = (float *)(((uintptr_t)ws->raw + 63) & ~(uintptr_t)63);
    return H3S_OK;
}

/* Goto-style plan: columns in chunks of at most LIN_NC, rows in superblocks whose FP32
 * accumulators (superblock x chunk) fit LIN_ACC_BYTES; superblocks of one M are equal in size
 * to within a register panel. */
typedef struct gemm_plan {
    int64_t mpanels, npanels; /* register panels of rows (MR) and columns (NR) */
    int64_t chunk;            /* column panels per chunk */
    int64_t super;            /* row panels per superblock */
    int64_t kb;               /* reduction steps per packed B block (a multiple of LIN_KC) */
} gemm_plan;

static gemm_plan plan_gemm(const gemm_problem *g, const lin_kernel *kd) {
    gemm_plan p;
    p.mpanels = ceil_div(g->M, kd->mr);
    p.npanels = ceil_div(g->N, kd->nr);
    p.chunk = min64(p.npanels, LIN_NC / kd->nr);
    int64_t most = (int64_t)(LIN_ACC_BYTES / sizeof(float)) / (p.chunk * kd->nr * kd->mr);
    if (most < LIN_MC / kd->mr) most = LIN_MC / kd->mr;
    p.super = ceil_div(p.mpanels, ceil_div(p.mpanels, most));
    p.kb = (int64_t)(LIN_B_BYTES / sizeof(float)) / (p.chunk * kd->nr) / LIN_KC * LIN_KC;
    if (p.kb < LIN_KC) p.kb = LIN_KC;
    if (p.kb > ceil_div(g->K, LIN_KC) * LIN_KC) p.kb = ceil_div(g->K, LIN_KC) * LIN_KC;
    return p;
}

static size_t few_rows_ws_floats(const gemm_problem *g, const lin_kernel *kd, int nt);

static size_t gemm_ws_floats(const gemm_problem *g, const lin_kernel *kd, int nt) {
    if (g->M <= LIN_MC) return few_rows_ws_floats(g, kd, nt);
    const gemm_plan p = plan_gemm(g, kd);
    return round16((size_t)(p.kb * p.chunk * kd->nr)) + round16((size_t)nt * LIN_MC * LIN_KC) +
           (size_t)(p.super * kd->mr * p.chunk * kd->nr);
}

#define DW_TILE_FLOATS 1024 /* >= MR * NR of every kernel */

static size_t dw_ws_floats(int nt) {
    return (size_t)nt * (LIN_DW_MC * H3S_FOLD_TILE + H3S_FOLD_TILE * LIN_DW_NB + DW_TILE_FLOATS);
}

/* Cut an m_units x n_units grid of register panels into work items of bm x bn panels (at most
 * max_m x max_n), shrinking rows first, so that every thread gets several items; items are
 * handed out dynamically.  Which thread computes an item never reaches the bits. */
static void split_work(int64_t m_units, int64_t n_units, int64_t max_m, int64_t max_n, int nt, int64_t *bm,
                       int64_t *bn) {
    const int64_t want = nt > 1 ? 4 * (int64_t)nt : 1;
    int64_t a = min64(max_m, m_units), b = min64(max_n, n_units);
    const int64_t nbc = ceil_div(n_units, b), need_m = ceil_div(want, nbc);
    if (ceil_div(m_units, a) < need_m) a = ceil_div(m_units, need_m);
    const int64_t mbc = ceil_div(m_units, a);
    if (mbc * nbc < want) b = ceil_div(n_units, ceil_div(want, mbc));
    *bm = a > 0 ? a : 1;
    *bn = b > 0 ? b : 1;
}

/* Goto order: for each column chunk and row superblock, walk K in blocks of plan.kb.  Per
 * block the threads pack the B block (plan.kb x chunk) together (one barrier), then share out
 * work items (at most LIN_MC rows x the chunk); each walks the block in LIN_KC steps, packing
 * its A block and running the microkernel on every register tile, carrying the tile's FP32
 * accumulators from one K step to the next in the superblock's accumulator buffer.  After the last K block each
 * accumulator ends its chain (bias, rounding) into C. */
static void gemm_packed(const gemm_problem *g, const lin_kernel *kd, int nt, float *ws) {
    const int MR = kd->mr, NR = kd->nr;
    const int64_t M = g->M, N = g->N, K = g->K, TILE = (int64_t)MR * NR;
    const gemm_plan plan = plan_gemm(g, kd);
    float *bbuf = ws, *abuf = bbuf + round16((size_t)(plan.kb * plan.chunk * NR));
    float *accbuf = abuf + round16((size_t)nt * LIN_MC * LIN_KC);
#pragma omp parallel num_threads(nt)
    {
        float *ap = abuf + (size_t)omp_get_thread_num() * LIN_MC * LIN_KC;
        for (int64_t c0 = 0; c0 < plan.npanels; c0 += plan.chunk) {
            const int64_t cp = min64(plan.chunk, plan.npanels - c0);
            for (int64_t s0 = 0; s0 < plan.mpanels; s0 += plan.super) {
                const int64_t sp = min64(plan.super, plan.mpanels - s0);
                int64_t bm, bn;
                split_work(sp, cp, LIN_MC / MR, cp, nt, &bm, &bn);
                const int64_t nmb = ceil_div(sp, bm), nnb = ceil_div(cp, bn);
                for (int64_t kb0 = 0; kb0 < K; kb0 += plan.kb) {
                    const int64_t kbl = min64(plan.kb, K - kb0);
#pragma omp for schedule(static)
                    for (int64_t q = 0; q < cp; q++) {
                        const int64_t j0 = (c0 + q) * NR;
                        pack_panel(elem_ptr(g->b, g->bdt, kb0 * g->b_sp + j0 * g->b_sj), g->bdt, g->b_sj, g->b_sp,
                                   min64(NR, N - j0), NR, kbl, bbuf + (size_t)(q * plan.kb * NR));
                    }
#pragma omp for schedule(dynamic, 1)
                    for (int64_t it = 0; it < nmb * nnb; it++) {
                        const int64_t p0 = (it / nnb) * bm, q0 = (it % nnb) * bn;
                        const int64_t mpan = min64(bm, sp - p0), qn = min64(bn, cp - q0);
                        for (int64_t k0 = kb0; k0 < kb0 + kbl; k0 += LIN_KC) {
                            const int64_t kl = min64(LIN_KC, kb0 + kbl - k0);
                            for (int64_t ii = 0; ii < mpan; ii++) {
                                const int64_t r0 = (s0 + p0 + ii) * MR;
                                pack_panel(elem_ptr(g->a, g->adt, r0 * g->a_si + k0 * g->a_sp), g->adt, g->a_si,
                                           g->a_sp, min64(MR, M - r0), MR, kl, ap + ii * MR * LIN_KC);
                            }
                            for (int64_t qq = q0; qq < q0 + qn; qq++) {
                                const float *bp = bbuf + (size_t)(qq * plan.kb * NR + (k0 - kb0) * NR);
                                for (int64_t ii = 0; ii < mpan; ii++)
                                    kd->fn(kl, ap + ii * MR * LIN_KC, bp, accbuf + ((p0 + ii) * cp + qq) * TILE,
                                           k0 == 0);
                            }
                        }
                    }
                }
#pragma omp for schedule(static)
                for (int64_t ii = 0; ii < sp; ii++) {
                    const int64_t r0 = (s0 + ii) * MR, rows = min64(MR, M - r0);
                    for (int64_t qq = 0; qq < cp; qq++) {
                        const int64_t j0 = (c0 + qq) * NR;
                        const float *t = accbuf + (ii * cp + qq) * TILE;
                        for (int64_t r = 0; r < rows; r++)
                            gemm_finish_row(g, r0 + r, j0, min64(NR, N - j0), t + r * NR);
                    }
                }
            }
        }
    }
}

/* Few rows (M <= LIN_MC): every B panel serves only these rows, so nothing is worth sharing.
 * Work items are column groups; each packs its own A block and B panels per LIN_KC step and
 * keeps its own accumulators: no barrier between threads at all.  Same chains as above. */
static void gemm_packed_few_rows(const gemm_problem *g, const lin_kernel *kd, int nt, float *ws) {
    const int MR = kd->mr, NR = kd->nr;
    const int64_t M = g->M, N = g->N, K = g->K, TILE = (int64_t)MR * NR;
    const int64_t mpan = ceil_div(M, MR), npanels = ceil_div(N, NR);
    int64_t bm, bn;
    split_work(1, npanels, 1, LIN_NC / NR, nt, &bm, &bn);
    const int64_t per_thread =
        round16((size_t)LIN_MC * LIN_KC) + round16((size_t)(LIN_KC * bn * NR)) + round16((size_t)(mpan * bn * TILE));
#pragma omp parallel num_threads(nt)
    {
        float *ap = ws + (size_t)omp_get_thread_num() * (size_t)per_thread;
        float *bp = ap + round16((size_t)LIN_MC * LIN_KC), *acc = bp + round16((size_t)(LIN_KC * bn * NR));
#pragma omp for schedule(dynamic, 1)
        for (int64_t q0 = 0; q0 < npanels; q0 += bn) {
            const int64_t qn = min64(bn, npanels - q0);
            for (int64_t k0 = 0; k0 < K; k0 += LIN_KC) {
                const int64_t kl = min64(LIN_KC, K - k0);
                for (int64_t ii = 0; ii < mpan; ii++)
                    pack_panel(elem_ptr(g->a, g->adt, ii * MR * g->a_si + k0 * g->a_sp), g->adt, g->a_si, g->a_sp,
                               min64(MR, M - ii * MR), MR, kl, ap + ii * MR * LIN_KC);
                for (int64_t qq = 0; qq < qn; qq++) {
                    const int64_t j0 = (q0 + qq) * NR;
                    pack_panel(elem_ptr(g->b, g->bdt, k0 * g->b_sp + j0 * g->b_sj), g->bdt, g->b_sj, g->b_sp,
                               min64(NR, N - j0), NR, kl, bp + qq * LIN_KC * NR);
                    for (int64_t ii = 0; ii < mpan; ii++)
                        kd->fn(kl, ap + ii * MR * LIN_KC, bp + qq * LIN_KC * NR, acc + (ii * qn + qq) * TILE, k0 == 0);
                }
            }
            for (int64_t ii = 0; ii < mpan; ii++)
                for (int64_t qq = 0; qq < qn; qq++) {
                    const int64_t j0 = (q0 + qq) * NR;
                    for (int64_t r = 0; r < min64(MR, M - ii * MR); r++)
                        gemm_finish_row(g, ii * MR + r, j0, min64(NR, N - j0), acc + (ii * qn + qq) * TILE + r * NR);
                }
        }
    }
}

static size_t few_rows_ws_floats(const gemm_problem *g, const lin_kernel *kd, int nt) {
    int64_t bm, bn;
    split_work(1, ceil_div(g->N, kd->nr), 1, LIN_NC / kd->nr, nt, &bm, &bn);
    return (size_t)nt * (round16((size_t)LIN_MC * LIN_KC) + round16((size_t)(LIN_KC * bn * kd->nr)) +
                         round16((size_t)(ceil_div(g->M, kd->mr) * bn * kd->mr * kd->nr))) +
           16;
}

/* dw by tiles: for each block of (n, k) outputs, the tile partial dy_tile^T x_tile is one
 * packed GEMM over the tile's rows (A(n, m) = dy[m, n], B(m, k) = x[m, k]), folded into dw
 * in ascending tile order.  No [tiles, N, K] buffer: a block's thread walks every tile. */
static void dw_packed(const float *dy, const void *x, h3s_dtype xdt, int64_t M, int64_t N, int64_t K, float *dw,
                      const lin_kernel *kd, int nt, float *ws) {
    const int MR = kd->mr, NR = kd->nr;
    const int64_t T = H3S_FOLD_TILE;
    float *abuf = ws, *bbuf = abuf + (size_t)nt * LIN_DW_MC * T, *tbuf = bbuf + (size_t)nt * T * LIN_DW_NB;
    int64_t bm, bn;
    split_work(ceil_div(N, MR), ceil_div(K, NR), LIN_DW_MC / MR, LIN_DW_NB / NR, nt, &bm, &bn);
    const int64_t nbn = ceil_div(ceil_div(N, MR), bm), nbk = ceil_div(ceil_div(K, NR), bn);
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num();
        float *ap = abuf + (size_t)tid * LIN_DW_MC * T, *bp = bbuf + (size_t)tid * T * LIN_DW_NB;
        float *tile = tbuf + (size_t)tid * DW_TILE_FLOATS;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < nbn * nbk; it++) {
            const int64_t n0 = (it / nbk) * bm * MR, k0 = (it % nbk) * bn * NR;
            const int64_t nrows = min64(bm * MR, N - n0), kcols = min64(bn * NR, K - k0);
            const int64_t npan = ceil_div(nrows, MR), kpan = ceil_div(kcols, NR);
            for (int64_t t0 = 0; t0 < M; t0 += T) {
                const int64_t L = min64(T, M - t0);
                for (int64_t ii = 0; ii < npan; ii++)
                    pack_panel(dy + t0 * N + n0 + ii * MR, H3S_F32, 1, N, min64(MR, nrows - ii * MR), MR, L,
                               ap + ii * MR * T);
                for (int64_t qq = 0; qq < kpan; qq++)
                    pack_panel(elem_ptr(x, xdt, t0 * K + k0 + qq * NR), xdt, 1, K, min64(NR, kcols - qq * NR), NR, L,
                               bp + qq * NR * T);
                for (int64_t qq = 0; qq < kpan; qq++) {
                    const int64_t kk0 = k0 + qq * NR, cols = min64(NR, K - kk0);
                    for (int64_t ii = 0; ii < npan; ii++) {
                        const int64_t nn0 = n0 + ii * MR, rows = min64(MR, N - nn0);
                        kd->fn(L, ap + ii * MR * T, bp + qq * NR * T, tile, 1);
                        for (int64_t r = 0; r < rows; r++) {
                            float *d = dw + (nn0 + r) * K + kk0;
                            const float *s = tile + r * NR;
                            if (t0 == 0)
                                for (int64_t c = 0; c < cols; c++)
                                    d[c] = s[c];
                            else
                                for (int64_t c = 0; c < cols; c++)
                                    d[c] = d[c] + s[c];
                        }
                    }
                }
            }
        }
    }
}

/* Whether g takes the packed path (K == 0: every chain is the empty sum +0, then the bias:
 * nothing to pack). */
static int gemm_is_packed(const gemm_problem *g, const lin_kernel *kd, int have_kernel) {
    (void)kd;
    return have_kernel && g->M > 0 && g->N > 0 && g->K > 0;
}

static void gemm_run(const gemm_problem *g, const lin_kernel *kd, int have_kernel, int nt, float *ws) {
    if (g->M == 0 || g->N == 0) return;
    if (gemm_is_packed(g, kd, have_kernel) && g->M <= LIN_MC)
        gemm_packed_few_rows(g, kd, nt, ws);
    else if (gemm_is_packed(g, kd, have_kernel))
        gemm_packed(g, kd, nt, ws);
    else
        gemm_scalar(g, nt);
}

/* ------------------------------------------------------------------ golden (F64) */

static void forward_golden(const double *x, const double *w, const double *b, double *y, int64_t M, int64_t N,
                           int64_t K, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++)
                acc = acc + x[m * K + k] * w[n * K + k];
            if (b) acc = acc + b[n];
            y[m * N + n] = acc;
        }
    }
}

/* dx[m, :] accumulated row-wise: the same per-element order (n ascending) as the strict path. */
static void dx_golden(const double *dy, const double *w, double *dx, int64_t M, int64_t N, int64_t K, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t m = 0; m < M; m++) {
        double *row = dx + m * K;
        for (int64_t k = 0; k < K; k++)
            row[k] = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const double d = dy[m * N + n];
            for (int64_t k = 0; k < K; k++)
                row[k] = row[k] + d * w[n * K + k];
        }
    }
}

/* dw with the same tile structure as the strict path, in FP64. */
static h3s_status dw_golden(const double *dy, const double *x, double *dw, int64_t M, int64_t N, int64_t K, int nt) {
    double *part = h3s_malloc((size_t)nt * (size_t)(K > 0 ? K : 1), sizeof(double));
    if (!part) return h3s_fail_context(H3S_ERR_NOMEM, "linear_backward: golden dw");
#pragma omp parallel num_threads(nt)
    {
        double *pk = part + (size_t)omp_get_thread_num() * (size_t)(K > 0 ? K : 1);
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            double *row = dw + n * K;
            for (int64_t k = 0; k < K; k++)
                row[k] = 0.0;
            for (int64_t t0 = 0; t0 < M; t0 += H3S_FOLD_TILE) {
                int64_t t1 = t0 + H3S_FOLD_TILE < M ? t0 + H3S_FOLD_TILE : M;
                for (int64_t k = 0; k < K; k++)
                    pk[k] = 0.0;
                for (int64_t m = t0; m < t1; m++) {
                    const double d = dy[m * N + n];
                    for (int64_t k = 0; k < K; k++)
                        pk[k] = pk[k] + d * x[m * K + k];
                }
                for (int64_t k = 0; k < K; k++)
                    row[k] = t0 == 0 ? pk[k] : row[k] + pk[k];
            }
        }
    }
    free(part);
    return H3S_OK;
}

/* ------------------------------------------------------------------ validation */

/* Every tensor on the host (0) or every one on the device (1); *device gets which. */
static h3s_status check_devices(const char *op, const h3s_tensor *const *t, const char *const *names, int n,
                                int *device) {
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        if (t[i]->device != 0 && t[i]->device != 1)
            return h3s_fail(H3S_ERR_INVALID, "%s: %s has device %d (expected 0 = host or 1 = CUDA)", op, names[i],
                            t[i]->device);
        if (first < 0) {
            first = i;
        } else if (t[i]->device != t[first]->device) {
            return h3s_fail(H3S_ERR_DEVICE, "%s: %s is on the %s but %s is on the %s", op, names[first],
                            t[first]->device ? "device" : "host", names[i], t[i]->device ? "device" : "host");
        }
    }
    *device = first < 0 ? 0 : t[first]->device;
    return H3S_OK;
}

static h3s_status check_variant_dtype(const char *op, const h3s_tensor *x) {
    if (!x) return h3s_fail(H3S_ERR_INVALID, "%s: x is NULL", op);
    if (x->dtype != H3S_BF16 && x->dtype != H3S_F32 && x->dtype != H3S_F64)
        return h3s_fail(H3S_ERR_DTYPE, "%s: x has dtype %s; expected BF16 or F32 (strict) or F64 (golden)", op,
                        h3s_dtype_name(x->dtype));
    return H3S_OK;
}

static const char *variant_name(h3s_dtype xdt) {
    return xdt == H3S_F64 ? "golden F64" : xdt == H3S_F32 ? "strict F32" : "strict BF16";
}

h3s_status h3s_linear_forward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *b, h3s_tensor *y) {
    static const char *op = "linear_forward";
    H3S_TRY(check_variant_dtype(op, x));
    const h3s_dtype dt = x->dtype;
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    if (!y) return h3s_fail(H3S_ERR_INVALID, "%s: y is NULL", op);
    h3s_status s = h3s_check_tensor(op, "x", x, dt, 2);
    if (s == H3S_OK) s = h3s_check_shape(op, "w", w, dt, 2, (const int64_t[]){-1, x->shape[1]});
    if (s == H3S_OK && b) s = h3s_check_shape(op, "b", b, dt, 1, (const int64_t[]){w->shape[0]});
    if (s == H3S_OK) s = h3s_check_shape(op, "y", y, dt, 2, (const int64_t[]){x->shape[0], w->shape[0]});
    if (s != H3S_OK) return h3s_fail_context(s, "%s variant (x is %s)", variant_name(dt), h3s_dtype_name(dt));

    int device = 0;
    const h3s_tensor *all[4] = {x, w, b, y};
    const char *names[4] = {"x", "w", "b", "y"};
    H3S_TRY(check_devices(op, all, names, 4, &device));
    if (device) return h3s_cuda_linear_forward(x, w, b, y);
    for (int i = 0; i < 3; i++)
        if (h3s_tensors_overlap(y, all[i])) return h3s_fail(H3S_ERR_INVALID, "%s: y overlaps %s", op, names[i]);

    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (dt == H3S_F64) {
        forward_golden(x->data, w->data, b ? b->data : NULL, y->data, M, N, K, h3s_get_num_threads());
        return H3S_OK;
    }
    gemm_problem g = {.M = M,
                      .N = N,
                      .K = K,
                      .a = x->data,
                      .adt = dt,
                      .a_si = K,
                      .a_sp = 1,
                      .b = w->data,
                      .bdt = dt,
                      .b_sp = 1,
                      .b_sj = K,
                      .bias = b ? b->data : NULL,
                      .bias_dt = dt,
                      .c = y->data,
                      .cdt = dt,
                      .ldc = N};
    const int nt = h3s_get_num_threads();
    lin_kernel kd;
    const int have = lin_kernel_for(h3s_linear_get_impl(), &kd);
    lin_ws ws = {NULL, NULL};
    if (gemm_is_packed(&g, &kd, have)) H3S_TRY(ws_alloc(&ws, gemm_ws_floats(&g, &kd, nt), op));
    gemm_run(&g, &kd, have, nt, ws.base);
    free(ws.raw);
    return H3S_OK;
}

int h3s_linear_backward_bf16_dy_only(const h3s_tensor *x, const h3s_tensor *w) {
    return x && w && x->device && w->device && x->dtype == H3S_BF16 && w->dtype == H3S_BF16 && x->ndim == 2 &&
           w->ndim == 2 && w->shape[1] == x->shape[1] && h3s_cuda_linear_bf16_dy_only(w->shape[0], w->shape[1]);
}

h3s_status h3s_linear_backward(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy, h3s_tensor *dx,
                               h3s_tensor *dw, h3s_tensor *db) {
    return h3s_linear_backward_rounded(x, w, dy, NULL, dx, dw, db);
}

h3s_status h3s_linear_backward_rounded(const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                       const h3s_tensor *dy_bf16, h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *db) {
    static const char *op = "linear_backward";
    H3S_TRY(check_variant_dtype(op, x));
    const h3s_dtype dt = x->dtype, gt = dt == H3S_F64 ? H3S_F64 : H3S_F32;
    if (!w) return h3s_fail(H3S_ERR_INVALID, "%s: w is NULL", op);
    if (!dy && !dy_bf16) return h3s_fail(H3S_ERR_INVALID, "%s: dy is NULL", op);
    h3s_status s = h3s_check_tensor(op, "x", x, dt, 2);
    if (s == H3S_OK) s = h3s_check_shape(op, "w", w, dt, 2, (const int64_t[]){-1, x->shape[1]});
    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (s == H3S_OK && dy) s = h3s_check_shape(op, "dy", dy, gt, 2, (const int64_t[]){M, N});
    if (s == H3S_OK && dx) s = h3s_check_shape(op, "dx", dx, gt, 2, (const int64_t[]){M, K});
    /* dw may be BF16 in the BF16 variant on the CUDA backend: the F32 fold rounded once as it is stored */
    const h3s_dtype wt = dw && dt == H3S_BF16 && dw->dtype == H3S_BF16 && dw->device ? H3S_BF16 : gt;
    if (s == H3S_OK && dw) s = h3s_check_shape(op, "dw", dw, wt, 2, (const int64_t[]){N, K});
    if (s == H3S_OK && db) s = h3s_check_shape(op, "db", db, gt, 1, (const int64_t[]){N});
    if (s == H3S_OK && dy_bf16 && dt != H3S_BF16)
        s = h3s_fail(H3S_ERR_INVALID, "%s: dy_bf16 is for the BF16 variant only", op);
    if (s == H3S_OK && dy_bf16) s = h3s_check_shape(op, "dy_bf16", dy_bf16, H3S_BF16, 2, (const int64_t[]){M, N});
    if (s != H3S_OK) return h3s_fail_context(s, "%s variant (x is %s)", variant_name(dt), h3s_dtype_name(dt));

    int device = 0;
    const h3s_tensor *all[7] = {x, w, dy, dx, dw, db, dy_bf16};
    const char *names[7] = {"x", "w", "dy", "dx", "dw", "db", "dy_bf16"};
    H3S_TRY(check_devices(op, all, names, 7, &device));
    for (int o = 3; dy_bf16 && o < 6; o++)
        if (h3s_tensors_overlap(all[o], dy_bf16))
            return h3s_fail(H3S_ERR_INVALID, "%s: %s overlaps dy_bf16", op, names[o]);
    if (device) return h3s_cuda_linear_backward(x, w, dy, dy_bf16, dx, dw, db);
    if (!dy)
        return h3s_fail(H3S_ERR_INVALID,
                        "%s: dy is NULL; computing from dy_bf16 alone is a CUDA-backend option (the host reads dy)",
                        op);
    /* the host computes from dy itself: dy_bf16 (dy's rounding, checked above) adds nothing there */
    for (int o = 3; o < 6; o++)
        for (int i = 0; i < o; i++)
            if (h3s_tensors_overlap(all[o], all[i]))
                return h3s_fail(H3S_ERR_INVALID, "%s: %s overlaps %s", op, names[o], names[i]);

    const int nt = h3s_get_num_threads();
    if (dt == H3S_F64) {
        /* allocate before writing anything */
        if (dw) H3S_TRY(dw_golden(dy->data, x->data, dw->data, M, N, K, nt));
        if (dx) dx_golden(dy->data, w->data, dx->data, M, N, K, nt);
        if (db) h3s_fold_columns_f64(dy->data, M, N, N, db->data);
        return H3S_OK;
    }

    /* dx[m, k] = sum_n dy[m, n] w[n, k]: the forward GEMM with A = dy and B(n, k) = w[n, k]. */
    gemm_problem g = {.M = M,
                      .N = K,
                      .K = N,
                      .a = dy->data,
                      .adt = H3S_F32,
                      .a_si = N,
                      .a_sp = 1,
                      .b = w->data,
                      .bdt = dt,
                      .b_sp = K,
                      .b_sj = 1,
                      .bias = NULL,
                      .bias_dt = H3S_F32,
                      .c = dx ? dx->data : NULL,
                      .cdt = H3S_F32,
                      .ldc = K};
    lin_kernel kd;
    const int have = lin_kernel_for(h3s_linear_get_impl(), &kd);
    const int dw_fast = dw && have && M > 0 && N > 0 && K > 0, dx_fast = dx && gemm_is_packed(&g, &kd, have);
    size_t need = 0;
    if (dw_fast) need = dw_ws_floats(nt);
    if (dx_fast && gemm_ws_floats(&g, &kd, nt) > need) need = gemm_ws_floats(&g, &kd, nt);
    lin_ws ws = {NULL, NULL};
    if (need) H3S_TRY(ws_alloc(&ws, need, op)); /* the only allocation: nothing is written before it */

    if (dw) {
        if (M == 0 || N == 0 || K == 0) {
            if (h3s_tensor_nbytes(dw)) memset(dw->data, 0, h3s_tensor_nbytes(dw)); /* empty sums: +0 */
        } else if (dw_fast)
            dw_packed(dy->data, x->data, dt, M, N, K, dw->data, &kd, nt, ws.base);
        else
            dw_scalar(dy->data, x->data, dt, M, N, K, dw->data, nt);
    }
    if (dx) gemm_run(&g, &kd, have, nt, ws.base);
    free(ws.raw);
    if (db) h3s_fold_columns_f32(dy->data, M, N, N, db->data);
    return H3S_OK;
}

/* Non-causal scaled-dot-product attention, forward and backward (docs/numerics/attention.md).
 *
 * Strict CPU backend: BF16 q, k, v, out; F32 stats and gradients.  Every scalar is defined by
 * a fixed chain that does not depend on tiling, batch size or thread count:
 *   s_ij  = (FMA chain over d ascending of q_id * k_jd, from 0) * scale
 *   m_i   = max over attendable j (ascending, `s > m`)
 *   p_ij  = h3s_det_expf(s_ij - m_i)
 *   l_i   = sum over attendable j ascending of p_ij
 *   acc_i = FMA chain over attendable j ascending of p_ij * v_j
 *   out_i = bf16(acc_i / l_i)
 * Keys that query i may not attend are skipped (never added as zeros), so a padded sequence
 * gives live rows exactly the bits of the unpadded one.  Work is cut into (item, head, block
 * of queries) units for the forward and dq, (item, head, block of keys) units for dk and dv;
 * one thread computes a unit start to end, so no output is shared between threads.  Key and
 * query tiles only decide what is loaded into the per-thread workspace, never an order.
 *
 * Golden backend: the same function in F64 with libm exp, plain loops.
 *
 * The AVX2/FMA kernels produce the same bits as the portable ones: FMA is exactly rounded
 * whichever instruction computes it, and the vector exp below is an operation-for-operation
 * copy of h3s_det_exp on the range where it is used. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "core/core.h"
#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_HAVE_X86 1
#else
#define ATTN_HAVE_X86 0
#endif

/* Tile sizes: they bound the workspace and decide what is loaded together; the bits do not
 * depend on them.  Block sizes must be multiples of 4 and tile sizes multiples of 16 (the
 * score kernel computes 4 x 16 blocks). */
#define ATTN_QB 64 /* queries per forward / dq work unit */
#define ATTN_KT 64 /* keys per tile loaded by a forward / dq unit */
#define ATTN_KB 64 /* keys per dk / dv work unit */
#define ATTN_QT 64 /* queries per tile loaded by a dk / dv unit */
_Static_assert(ATTN_QB % 4 == 0 && ATTN_KB % 4 == 0 && ATTN_KT % 16 == 0 && ATTN_QT % 16 == 0, "tile shapes");
_Static_assert(ATTN_QB == ATTN_KB && ATTN_QT >= ATTN_KT, "the backward workspace is shared by dq and dk/dv units");

typedef struct attn_geom {
    int64_t B, S, H, D, W; /* items, positions per item, heads, head dim, width = H * D */
    const int64_t *doc;    /* [S] or NULL */
    const uint8_t *kv;     /* [B, S] or NULL */
    /* Row bases (0 for a whole call): packed row r of the query-side tensors (q; in the backward also out, stats,
     * dout) is at r - qb, of k and v at r - kb, of the outputs at r - ob; qrows query-side rows are held. */
    int64_t qb, kb, ob, qrows;
} attn_geom;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ kernels ----------- */

typedef struct attn_kernels {
    /* out[r * ldo + c] = (FMA chain over d ascending of a[r * D + d] * bt[d * ldb + c], from 0)
     * for r < rows (a multiple of 4), c < cols (a multiple of 16). */
    void (*scores)(const float *a, int64_t rows, int64_t D, const float *bt, int64_t cols, int64_t ldb, float *out,
                   int64_t ldo);
    /* acc[d] = fmaf(coef[t], base[idx[t] * ld + d], acc[d]) for t = 0 .. n-1 in order, d < D. */
    void (*accum)(float *acc, int64_t D, const float *coef, const int32_t *idx, int64_t n, const float *base,
                  int64_t ld);
    /* y[t] = h3s_det_expf(x[t]). */
    void (*exp_row)(const float *x, float *y, int64_t n);
    /* FMA chain over d ascending of a[d] * bf16 b[d], from 0. */
    float (*dot_bf16)(const float *a, const uint16_t *b, int64_t D);
    /* dst[d * ldt + i] = src[(row0 + i) * W + col0 + d] as float for i < n, d < D; columns
     * n .. pcol-1 of dst zero.  Pure data movement. */
    void (*trans_bf16)(const uint16_t *src, int64_t W, int64_t row0, int64_t n, int64_t pcol, int64_t col0, int64_t D,
                       float *dst, int64_t ldt);
    void (*trans_f32)(const float *src, int64_t W, int64_t row0, int64_t n, int64_t pcol, int64_t col0, int64_t D,
                      float *dst, int64_t ldt);
} attn_kernels;

static void scores_portable(const float *a, int64_t rows, int64_t D, const float *bt, int64_t cols, int64_t ldb,
                            float *out, int64_t ldo) {
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ldo;
        for (int64_t c = 0; c < cols; c++)
            o[c] = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            float x = a[r * D + d];
            const float *b = bt + d * ldb;
            for (int64_t c = 0; c < cols; c++)
                o[c] = fmaf(x, b[c], o[c]);
        }
    }
}

static void accum_portable(float *acc, int64_t D, const float *coef, const int32_t *idx, int64_t n, const float *base,
                           int64_t ld) {
    for (int64_t t = 0; t < n; t++) {
        float c = coef[t];
        const float *row = base + (int64_t)idx[t] * ld;
        for (int64_t d = 0; d < D; d++)
            acc[d] = fmaf(c, row[d], acc[d]);
    }
}

static void exp_row_portable(const float *x, float *y, int64_t n) {
    for (int64_t t = 0; t < n; t++)
        y[t] = h3s_det_expf(x[t]);
}

/* Element i of a BF16 (bf16 != 0) or F32 array, as float. */
static inline float elem_f32(const void *src, int bf16, int64_t i) {
    return bf16 ? h3s_bf16_value(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}

/* The trans_bf16 / trans_f32 kernel of attn_kernels for a BF16 or F32 source. */
static inline void trans_portable(const void *src, int bf16, int64_t W, int64_t row0, int64_t n, int64_t pcol,
                                  int64_t col0, int64_t D, float *dst, int64_t ldt) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = (row0 + i) * W + col0;
        for (int64_t d = 0; d < D; d++)
            dst[d * ldt + i] = elem_f32(src, bf16, s + d);
    }
    for (int64_t d = 0; d < D; d++)
        for (int64_t i = n; i < pcol; i++)
            dst[d * ldt + i] = 0.0f;
}
static void trans_bf16_portable(const uint16_t *src, int64_t W, int64_t row0, int64_t n, int64_t pcol, int64_t col0,
                                int64_t D, float *dst, int64_t ldt) {
    trans_portable(src, 1, W, row0, n, pcol, col0, D, dst, ldt);
}
static void trans_f32_portable(const float *src, int64_t W, int64_t row0, int64_t n, int64_t pcol, int64_t col0,
                               int64_t D, float *dst, int64_t ldt) {
    trans_portable(src, 0, W, row0, n, pcol, col0, D, dst, ldt);
}

static float dot_bf16_portable(const float *a, const uint16_t *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++)
        s = fmaf(a[d], h3s_bf16_value(b[d]), s);
    return s;
}

#if ATTN_HAVE_X86
#define ATTN_AVX2 __attribute__((target("avx2,fma")))

ATTN_AVX2 static void scores_avx2(const float *a, int64_t rows, int64_t D, const float *bt, int64_t cols, int64_t ldb,
                                  float *out, int64_t ldo) {
    for (int64_t r = 0; r < rows; r += 4) {
        const float *a0 = a + r * D, *a1 = a0 + D, *a2 = a1 + D, *a3 = a2 + D;
        for (int64_t c = 0; c < cols; c += 16) {
            __m256 s00 = _mm256_setzero_ps(), s01 = _mm256_setzero_ps(), s10 = _mm256_setzero_ps(),
                   s11 = _mm256_setzero_ps(), s20 = _mm256_setzero_ps(), s21 = _mm256_setzero_ps(),
                   s30 = _mm256_setzero_ps(), s31 = _mm256_setzero_ps();
            const float *b = bt + c;
            for (int64_t d = 0; d < D; d++, b += ldb) {
                __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                __m256 x = _mm256_broadcast_ss(a0 + d);
                s00 = _mm256_fmadd_ps(x, b0, s00);
                s01 = _mm256_fmadd_ps(x, b1, s01);
                x = _mm256_broadcast_ss(a1 + d);
                s10 = _mm256_fmadd_ps(x, b0, s10);
                s11 = _mm256_fmadd_ps(x, b1, s11);
                x = _mm256_broadcast_ss(a2 + d);
                s20 = _mm256_fmadd_ps(x, b0, s20);
                s21 = _mm256_fmadd_ps(x, b1, s21);
                x = _mm256_broadcast_ss(a3 + d);
                s30 = _mm256_fmadd_ps(x, b0, s30);
                s31 = _mm256_fmadd_ps(x, b1, s31);
            }
            float *o = out + r * ldo + c;
            _mm256_storeu_ps(o, s00);
            _mm256_storeu_ps(o + 8, s01);
            _mm256_storeu_ps(o + ldo, s10);
            _mm256_storeu_ps(o + ldo + 8, s11);
            _mm256_storeu_ps(o + 2 * ldo, s20);
            _mm256_storeu_ps(o + 2 * ldo + 8, s21);
            _mm256_storeu_ps(o + 3 * ldo, s30);
            _mm256_storeu_ps(o + 3 * ldo + 8, s31);
        }
    }
}

ATTN_AVX2 static void accum_avx2(float *acc, int64_t D, const float *coef, const int32_t *idx, int64_t n,
                                 const float *base, int64_t ld) {
    int64_t d = 0;
    /* 64 channels at a time: eight independent FMA chains keep both FMA pipes busy */
    for (; d + 64 <= D; d += 64) {
        __m256 a[8];
        for (int r = 0; r < 8; r++)
            a[r] = _mm256_loadu_ps(acc + d + 8 * r);
        for (int64_t t = 0; t < n; t++) {
            const float *row = base + (int64_t)idx[t] * ld + d;
            __m256 c = _mm256_broadcast_ss(coef + t);
            for (int r = 0; r < 8; r++)
                a[r] = _mm256_fmadd_ps(c, _mm256_loadu_ps(row + 8 * r), a[r]);
        }
        for (int r = 0; r < 8; r++)
            _mm256_storeu_ps(acc + d + 8 * r, a[r]);
    }
    for (; d + 32 <= D; d += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8), a2 = _mm256_loadu_ps(acc + d + 16),
               a3 = _mm256_loadu_ps(acc + d + 24);
        for (int64_t t = 0; t < n; t++) {
            const float *row = base + (int64_t)idx[t] * ld + d;
            __m256 c = _mm256_broadcast_ss(coef + t);
            a0 = _mm256_fmadd_ps(c, _mm256_loadu_ps(row), a0);
            a1 = _mm256_fmadd_ps(c, _mm256_loadu_ps(row + 8), a1);
            a2 = _mm256_fmadd_ps(c, _mm256_loadu_ps(row + 16), a2);
            a3 = _mm256_fmadd_ps(c, _mm256_loadu_ps(row + 24), a3);
        }
        _mm256_storeu_ps(acc + d, a0);
        _mm256_storeu_ps(acc + d + 8, a1);
        _mm256_storeu_ps(acc + d + 16, a2);
        _mm256_storeu_ps(acc + d + 24, a3);
    }
    for (; d + 8 <= D; d += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + d);
        for (int64_t t = 0; t < n; t++)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + t), _mm256_loadu_ps(base + (int64_t)idx[t] * ld + d), a0);
        _mm256_storeu_ps(acc + d, a0);
    }
    for (; d < D; d++) {
        float s = acc[d];
        for (int64_t t = 0; t < n; t++)
            s = fmaf(coef[t], base[(int64_t)idx[t] * ld + d], s);
        acc[d] = s;
    }
}

/* h3s_det_exp (src/core/detmath.c) evaluated on four doubles, operation for operation:
 * k = nearbyint(x / ln2) (here by the 1.5 * 2^52 shifter, which rounds to nearest even
 * exactly like nearbyint in the default rounding mode for |x / ln2| < 2^51), the two-part
 * Cody-Waite reduction, the same Horner polynomial (separate multiply and add), and the
 * scaling by 2^k, which is exact (as ldexp is) while the result is a normal double, i.e. for
 * x >= -708.  Lanes outside [-708, 0] (and NaN) are recomputed by the scalar function, so
 * the values equal h3s_det_expf everywhere (checked against it in tests/test_attention.c). */
static const double exp_poly[] = H3S_DET_EXP_POLY;

/* nv <= EXP_GROUPS groups of four values at once (independent chains hide the latency of the
 * polynomial). */
#define EXP_GROUPS 4

ATTN_AVX2 static inline void exp_groups_avx2(const float *x, float *y, int nv) {
    const __m256d inv_ln2 = _mm256_set1_pd(H3S_DET_INV_LN2);
    const __m256d ln2_hi = _mm256_set1_pd(H3S_DET_LN2_HI);
    const __m256d ln2_lo = _mm256_set1_pd(H3S_DET_LN2_LO);
    const __m256d shifter = _mm256_set1_pd(6755399441055744.0); /* 1.5 * 2^52 */
    __m256d r[EXP_GROUPS], p[EXP_GROUPS];
    __m256i e[EXP_GROUPS];
    for (int g = 0; g < nv; g++) {
        __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * g));
        __m256d kk = _mm256_add_pd(_mm256_mul_pd(xd, inv_ln2), shifter);
        /* 2^k: the low bits of the shifted value hold k in two's complement */
        e[g] = _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(kk), _mm256_set1_epi64x(1023)), 52);
        kk = _mm256_sub_pd(kk, shifter);
        r[g] = _mm256_sub_pd(_mm256_sub_pd(xd, _mm256_mul_pd(kk, ln2_hi)), _mm256_mul_pd(kk, ln2_lo));
        p[g] = _mm256_set1_pd(H3S_DET_EXP_C14);
    }
    for (unsigned i = 0; i < sizeof exp_poly / sizeof exp_poly[0]; i++) {
        __m256d c = _mm256_set1_pd(exp_poly[i]);
        for (int g = 0; g < nv; g++)
            p[g] = _mm256_add_pd(_mm256_mul_pd(p[g], r[g]), c);
    }
    const __m128 lo_lim = _mm_set1_ps(-708.0f), hi_lim = _mm_setzero_ps();
    for (int g = 0; g < nv; g++) {
        __m128 xf = _mm_loadu_ps(x + 4 * g);
        _mm_storeu_ps(y + 4 * g, _mm256_cvtpd_ps(_mm256_mul_pd(p[g], _mm256_castsi256_pd(e[g]))));
        __m128 ok = _mm_and_ps(_mm_cmpge_ps(xf, lo_lim), _mm_cmple_ps(xf, hi_lim));
        if (_mm_movemask_ps(ok) != 0xf) {
            for (int u = 4 * g; u < 4 * g + 4; u++)
                if (!(x[u] >= -708.0f && x[u] <= 0.0f)) y[u] = h3s_det_expf(x[u]);
        }
    }
}

/* y = h3s_det_expf(x), sixteen values at a time, then four, then the scalar function. */
ATTN_AVX2 static void exp_row_avx2(const float *x, float *y, int64_t n) {
    int64_t t = 0;
    for (; t + 4 * EXP_GROUPS <= n; t += 4 * EXP_GROUPS)
        exp_groups_avx2(x + t, y + t, EXP_GROUPS);
    for (; t + 4 <= n; t += 4)
        exp_groups_avx2(x + t, y + t, 1);
    for (; t < n; t++)
        y[t] = h3s_det_expf(x[t]);
}

/* The same chain as the portable twin; compiled here so that fmaf is one instruction. */
ATTN_AVX2 static float dot_bf16_avx2(const float *a, const uint16_t *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++)
        s = fmaf(a[d], h3s_bf16_value(b[d]), s);
    return s;
}

/* 8 x 8 transpose of r[0..7] (rows) into columns. */
ATTN_AVX2 static inline void transpose8_avx2(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

ATTN_AVX2 static inline __m256 bf16x8_avx2(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Eight consecutive elements of a BF16 (bf16 != 0) or F32 array, as floats. */
ATTN_AVX2 static inline __m256 load8_avx2(const void *src, int bf16, int64_t i) {
    return bf16 ? bf16x8_avx2((const uint16_t *)src + i) : _mm256_loadu_ps((const float *)src + i);
}

/* trans_portable in 8 x 8 blocks; the rows left over go through trans_portable.  Always
 * inlined, so that each of the two kernels below is compiled for its source dtype. */
ATTN_AVX2 static inline __attribute__((always_inline)) void trans_avx2(const void *src, int bf16, int64_t W,
                                                                       int64_t row0, int64_t n, int64_t pcol,
                                                                       int64_t col0, int64_t D, float *dst,
                                                                       int64_t ldt) {
    int64_t i0 = 0, D8 = D / 8 * 8;
    for (; i0 + 8 <= n; i0 += 8) {
        const int64_t s0 = (row0 + i0) * W + col0;
        for (int64_t d0 = 0; d0 < D8; d0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = load8_avx2(src, bf16, s0 + i * W + d0);
            transpose8_avx2(r);
            for (int d = 0; d < 8; d++)
                _mm256_storeu_ps(dst + (d0 + d) * ldt + i0, r[d]);
        }
        for (int64_t d = D8; d < D; d++)
            for (int i = 0; i < 8; i++)
                dst[d * ldt + i0 + i] = elem_f32(src, bf16, s0 + i * W + d);
    }
    trans_portable(src, bf16, W, row0 + i0, n - i0, pcol - i0, col0, D, dst + i0, ldt);
}
ATTN_AVX2 static void trans_bf16_avx2(const uint16_t *src, int64_t W, int64_t row0, int64_t n, int64_t pcol,
                                      int64_t col0, int64_t D, float *dst, int64_t ldt) {
    trans_avx2(src, 1, W, row0, n, pcol, col0, D, dst, ldt);
}
ATTN_AVX2 static void trans_f32_avx2(const float *src, int64_t W, int64_t row0, int64_t n, int64_t pcol, int64_t col0,
                                     int64_t D, float *dst, int64_t ldt) {
    trans_avx2(src, 0, W, row0, n, pcol, col0, D, dst, ldt);
}

static const attn_kernels kernels_avx2 = {scores_avx2,   accum_avx2,      exp_row_avx2,
                                          dot_bf16_avx2, trans_bf16_avx2, trans_f32_avx2};
#endif

static const attn_kernels kernels_portable = {scores_portable,   accum_portable,      exp_row_portable,
                                              dot_bf16_portable, trans_bf16_portable, trans_f32_portable};

static int attn_force_portable = 0;

/* Test hooks (not part of ops.h; declared by tests/test_attention.c): force the portable
 * kernels on a machine that has AVX2, and run the row exp of the kernels in use. */
void h3s_attention_use_portable_kernels(int on);
void h3s_attention_exp_row_for_test(const float *x, float *y, int64_t n);

void h3s_attention_use_portable_kernels(int on) { attn_force_portable = on != 0; }

static const attn_kernels *attn_pick_kernels(void) {
#if ATTN_HAVE_X86
    if (!attn_force_portable) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kernels_avx2;
    }
#endif
    return &kernels_portable;
}

void h3s_attention_exp_row_for_test(const float *x, float *y, int64_t n) { attn_pick_kernels()->exp_row(x, y, n); }

/* ------------------------------------------------------------------ helpers ----------- */

/* Per-row lists of allowed partners inside one tile.  Rows are positions r0 .. r0+nr-1,
 * columns c0 .. c0+nc-1 of one item; row r may pair with column c iff row_ok[r - r0],
 * col_ok[c - c0] (either NULL = all) and doc[r] == doc[c] (doc NULL = all).  lst[i * ldl + n]
 * holds the n-th allowed column offset of row i, ascending.  Returns the total count. */
static int64_t build_lists(const int64_t *doc, int64_t r0, int64_t nr, const uint8_t *row_ok, int64_t c0, int64_t nc,
                           const uint8_t *col_ok, int32_t *lst, int64_t ldl, int32_t *cnt) {
    int64_t total = 0;
    for (int64_t i = 0; i < nr; i++) {
        int32_t n = 0;
        if (!row_ok || row_ok[i]) {
            int32_t *l = lst + i * ldl;
            if (doc) {
                int64_t di = doc[r0 + i];
                for (int64_t c = 0; c < nc; c++)
                    if ((!col_ok || col_ok[c]) && doc[c0 + c] == di) l[n++] = (int32_t)c;
            } else {
                for (int64_t c = 0; c < nc; c++)
                    if (!col_ok || col_ok[c]) l[n++] = (int32_t)c;
            }
        }
        cnt[i] = n;
        total += n;
    }
    return total;
}

/* n rows x D channels (from column col0) of a [.., W] BF16 / F32 tensor as floats [n][D],
 * rows padded with zeros up to prow. */
static void load_rows_bf16(const uint16_t *src, int64_t W, int64_t row0, int64_t n, int64_t prow, int64_t col0,
                           int64_t D, float *dst) {
    for (int64_t i = 0; i < n; i++) {
        const uint16_t *s = src + (row0 + i) * W + col0;
        for (int64_t d = 0; d < D; d++)
            dst[i * D + d] = h3s_bf16_value(s[d]);
    }
    if (prow > n) memset(dst + n * D, 0, (size_t)((prow - n) * D) * sizeof(float));
}
static void load_rows_f32(const float *src, int64_t W, int64_t row0, int64_t n, int64_t prow, int64_t col0, int64_t D,
                          float *dst) {
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * D, src + (row0 + i) * W + col0, (size_t)D * sizeof(float));
    if (prow > n) memset(dst + n * D, 0, (size_t)((prow - n) * D) * sizeof(float));
}

/* Workspace carving: one block per thread, 64-byte aligned pieces.  With base == NULL it
 * only measures. */
typedef struct carve {
    char *base;
    size_t off;
} carve;
static void *take(carve *c, size_t count, size_t size) {
    size_t o = (c->off + 63) & ~(size_t)63;
    c->off = o + count * size;
    return c->base ? c->base + o : NULL;
}

/* Per (row, head), computed once before the backward units: D_i = FMA chain over d ascending
 * of dout_id * out_id (out as saved, BF16), and whether query i takes part: l_i != 0 and a
 * non-zero dout row.  A query whose dout row is all zero contributes exactly zero to every
 * gradient and is skipped, so padding rows, whose outputs are never read, leave no trace,
 * not even the sign of a zero. */
static void query_terms(const attn_kernels *kn, const attn_geom *g, const uint16_t *out, const float *stats,
                        const float *dout, float *Dt, uint8_t *live) {
    const int64_t units = g->qrows * g->H;
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; u++) {
        int64_t row = u / g->H, h = u % g->H;
        const float *go = dout + row * g->W + h * g->D;
        int nonzero = 0;
        for (int64_t d = 0; d < g->D; d++)
            nonzero |= go[d] != 0.0f;
        Dt[u] = kn->dot_bf16(go, out + row * g->W + h * g->D, g->D);
        live[u] = (uint8_t)(nonzero && stats[u * 2 + 1] != 0.0f);
    }
}

/* m, l, D, live of n consecutive queries (rows row0 ..) of head h. */
static void load_query_terms(const attn_geom *g, const float *stats, const float *Dt, const uint8_t *live_t,
                             int64_t row0, int64_t n, int64_t h, float *m, float *l, float *Di, uint8_t *live) {
    for (int64_t i = 0; i < n; i++) {
        int64_t u = (row0 + i) * g->H + h;
        m[i] = stats[u * 2];
        l[i] = stats[u * 2 + 1];
        Di[i] = Dt[u];
        live[i] = live_t[u];
    }
}

/* ------------------------------------------------------------------ strict forward ---- */

typedef struct fwd_ws {
    float *qf, *kt, *vr, *sc, *m, *l, *acc, *xs, *ps;
    int32_t *lst, *cnt;
} fwd_ws;

static size_t fwd_ws_layout(fwd_ws *w, char *base, int64_t D) {
    carve c = {base, 0};
    w->qf = take(&c, (size_t)(ATTN_QB * D), sizeof(float));
    w->kt = take(&c, (size_t)(D * ATTN_KT), sizeof(float));
    w->vr = take(&c, (size_t)(ATTN_KT * D), sizeof(float));
    w->sc = take(&c, ATTN_QB * ATTN_KT, sizeof(float));
    w->m = take(&c, ATTN_QB, sizeof(float));
    w->l = take(&c, ATTN_QB, sizeof(float));
    w->acc = take(&c, (size_t)(ATTN_QB * D), sizeof(float));
    w->xs = take(&c, ATTN_KT, sizeof(float));
    w->ps = take(&c, ATTN_KT, sizeof(float));
    w->lst = take(&c, ATTN_QB * ATTN_KT, sizeof(int32_t));
    w->cnt = take(&c, ATTN_QB, sizeof(int32_t));
    return c.off + 64;
}

static void fwd_unit(const attn_kernels *kn, const attn_geom *g, float scale, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, uint16_t *out, float *stats, int64_t b, int64_t h, int64_t i0, int64_t nq,
                     const fwd_ws *w) {
    const int64_t D = g->D, W = g->W, S = g->S, row0 = b * S, col = h * D, rq = round_up(nq, 4);
    const uint8_t *kv = g->kv ? g->kv + b * S : NULL;
    int64_t seen[ATTN_QB];
    load_rows_bf16(q, W, row0 + i0 - g->qb, nq, rq, col, D, w->qf);
    for (int64_t i = 0; i < nq; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
        seen[i] = 0;
    }
    memset(w->acc, 0, (size_t)(nq * D) * sizeof(float));
    /* pass 1: row maxima of the scaled scores over attendable keys */
    for (int64_t j0 = 0; j0 < S; j0 += ATTN_KT) {
        int64_t nk = min64(ATTN_KT, S - j0), pk = round_up(nk, 16);
        if (!build_lists(g->doc, i0, nq, NULL, j0, nk, kv ? kv + j0 : NULL, w->lst, ATTN_KT, w->cnt)) continue;
        kn->trans_bf16(k, W, row0 + j0 - g->kb, nk, pk, col, D, w->kt, ATTN_KT);
        kn->scores(w->qf, rq, D, w->kt, pk, ATTN_KT, w->sc, ATTN_KT);
        for (int64_t i = 0; i < nq; i++) {
            const int32_t *l = w->lst + i * ATTN_KT;
            const float *s = w->sc + i * ATTN_KT;
            float m = w->m[i];
            for (int32_t t = 0; t < w->cnt[i]; t++) {
                float x = s[l[t]] * scale;
                if (x > m) m = x;
            }
            w->m[i] = m;
            seen[i] += w->cnt[i];
        }
    }
    /* pass 2: p = exp(s - m), l and p * v summed over keys in ascending order */
    for (int64_t j0 = 0; j0 < S; j0 += ATTN_KT) {
        int64_t nk = min64(ATTN_KT, S - j0), pk = round_up(nk, 16);
        if (!build_lists(g->doc, i0, nq, NULL, j0, nk, kv ? kv + j0 : NULL, w->lst, ATTN_KT, w->cnt)) continue;
        kn->trans_bf16(k, W, row0 + j0 - g->kb, nk, pk, col, D, w->kt, ATTN_KT);
        load_rows_bf16(v, W, row0 + j0 - g->kb, nk, nk, col, D, w->vr);
        kn->scores(w->qf, rq, D, w->kt, pk, ATTN_KT, w->sc, ATTN_KT);
        for (int64_t i = 0; i < nq; i++) {
            const int32_t *l = w->lst + i * ATTN_KT;
            const float *s = w->sc + i * ATTN_KT;
            int32_t n = w->cnt[i];
            if (!n) continue;
            float m = w->m[i];
            for (int32_t t = 0; t < n; t++)
                w->xs[t] = s[l[t]] * scale - m;
            kn->exp_row(w->xs, w->ps, n);
            float sum = w->l[i];
            for (int32_t t = 0; t < n; t++)
                sum += w->ps[t];
            w->l[i] = sum;
            kn->accum(w->acc + i * D, D, w->ps, l, n, w->vr, D);
        }
    }
    for (int64_t i = 0; i < nq; i++) {
        uint16_t *o = out + (row0 + i0 + i - g->ob) * W + col;
        float *st = stats + ((row0 + i0 + i - g->ob) * g->H + h) * 2;
        if (!seen[i]) {
            memset(o, 0, (size_t)D * sizeof(uint16_t));
            st[0] = 0.0f;
            st[1] = 0.0f;
            continue;
        }
        float l = w->l[i];
        for (int64_t d = 0; d < D; d++)
            o[d] = h3s_bf16_round(w->acc[i * D + d] / l);
        st[0] = w->m[i];
        st[1] = l;
    }
}

/* ------------------------------------------------------------------ strict backward --- */

typedef struct bwd_ws {
    /* dq units */
    float *qf, *gf, *kt, *vt, *kr, *sc, *dp, *m, *l, *Di, *acc, *xs, *ps, *pn, *ds;
    uint8_t *live;
    int32_t *lst, *cnt;
    /* dk / dv units */
    float *kf, *vf, *qt, *gt, *qr, *gr, *mq, *lq, *Dq, *dk, *dv;
    uint8_t *liveq;
} bwd_ws;

static size_t bwd_ws_layout(bwd_ws *w, char *base, int64_t D) {
    carve c = {base, 0};
    w->qf = take(&c, (size_t)(ATTN_QB * D), sizeof(float));
    w->gf = take(&c, (size_t)(ATTN_QB * D), sizeof(float));
    w->kt = take(&c, (size_t)(D * ATTN_KT), sizeof(float));
    w->vt = take(&c, (size_t)(D * ATTN_KT), sizeof(float));
    w->kr = take(&c, (size_t)(ATTN_KT * D), sizeof(float));
    w->sc = take(&c, ATTN_QB * ATTN_KT, sizeof(float));
    w->dp = take(&c, ATTN_QB * ATTN_KT, sizeof(float));
    w->m = take(&c, ATTN_QB, sizeof(float));
    w->l = take(&c, ATTN_QB, sizeof(float));
    w->Di = take(&c, ATTN_QB, sizeof(float));
    w->acc = take(&c, (size_t)(ATTN_QB * D), sizeof(float));
    w->xs = take(&c, ATTN_QT, sizeof(float)); /* ATTN_QT >= ATTN_KT: shared by both units */
    w->ps = take(&c, ATTN_QT, sizeof(float));
    w->pn = take(&c, ATTN_QT, sizeof(float));
    w->ds = take(&c, ATTN_QT, sizeof(float));
    w->live = take(&c, ATTN_QB, 1);
    w->lst = take(&c, ATTN_QB * ATTN_QT, sizeof(int32_t)); /* >= ATTN_KB * ATTN_QT too */
    w->cnt = take(&c, ATTN_QB, sizeof(int32_t));
    w->kf = take(&c, (size_t)(ATTN_KB * D), sizeof(float));
    w->vf = take(&c, (size_t)(ATTN_KB * D), sizeof(float));
    w->qt = take(&c, (size_t)(D * ATTN_QT), sizeof(float));
    w->gt = take(&c, (size_t)(D * ATTN_QT), sizeof(float));
    w->qr = take(&c, (size_t)(ATTN_QT * D), sizeof(float));
    w->gr = take(&c, (size_t)(ATTN_QT * D), sizeof(float));
    w->mq = take(&c, ATTN_QT, sizeof(float));
    w->lq = take(&c, ATTN_QT, sizeof(float));
    w->Dq = take(&c, ATTN_QT, sizeof(float));
    w->dk = take(&c, (size_t)(ATTN_KB * D), sizeof(float));
    w->dv = take(&c, (size_t)(ATTN_KB * D), sizeof(float));
    w->liveq = take(&c, ATTN_QT, 1);
    return c.off + 64;
}

/* P_ij = exp(s_ij - m_i) / l_i and dS_ij = P_ij * (dP_ij - D_i) for the n listed partners of
 * one row.  s, dp: the row's scores (unscaled) and dout . v dots, indexed by partner offset;
 * for a query row m, l, Di are scalars (mv = NULL), for a key row they come per partner from
 * mv, lv, Dv.  Writes pn = P and, when dp is given, ds = dS. */
static void probs(const attn_kernels *kn, float scale, const float *s, const float *dp, const int32_t *lst, int32_t n,
                  float m, float l, float Di, const float *mv, const float *lv, const float *Dv, const bwd_ws *w) {
    if (mv) {
        for (int32_t t = 0; t < n; t++)
            w->xs[t] = s[lst[t]] * scale - mv[lst[t]];
    } else {
        for (int32_t t = 0; t < n; t++)
            w->xs[t] = s[lst[t]] * scale - m;
    }
    kn->exp_row(w->xs, w->ps, n);
    for (int32_t t = 0; t < n; t++) {
        float li = mv ? lv[lst[t]] : l, di = mv ? Dv[lst[t]] : Di;
        float P = w->ps[t] / li;
        w->pn[t] = P;
        if (dp) w->ds[t] = P * (dp[lst[t]] - di);
    }
}

static void dq_unit(const attn_kernels *kn, const attn_geom *g, float scale, const uint16_t *q, const uint16_t *k,
                    const uint16_t *v, const float *stats, const float *Dt, const uint8_t *live_t, const float *dout,
                    float *dq, int64_t b, int64_t h, int64_t i0, int64_t nq, const bwd_ws *w) {
    const int64_t D = g->D, W = g->W, S = g->S, row0 = b * S, col = h * D, rq = round_up(nq, 4);
    const uint8_t *kv = g->kv ? g->kv + b * S : NULL;
    load_rows_bf16(q, W, row0 + i0 - g->qb, nq, rq, col, D, w->qf);
    load_rows_f32(dout, W, row0 + i0 - g->qb, nq, rq, col, D, w->gf);
    load_query_terms(g, stats, Dt, live_t, row0 + i0 - g->qb, nq, h, w->m, w->l, w->Di, w->live);
    memset(w->acc, 0, (size_t)(nq * D) * sizeof(float));
    for (int64_t j0 = 0; j0 < S; j0 += ATTN_KT) {
        int64_t nk = min64(ATTN_KT, S - j0), pk = round_up(nk, 16);
        if (!build_lists(g->doc, i0, nq, w->live, j0, nk, kv ? kv + j0 : NULL, w->lst, ATTN_KT, w->cnt)) continue;
        kn->trans_bf16(k, W, row0 + j0 - g->kb, nk, pk, col, D, w->kt, ATTN_KT);
        kn->trans_bf16(v, W, row0 + j0 - g->kb, nk, pk, col, D, w->vt, ATTN_KT);
        load_rows_bf16(k, W, row0 + j0 - g->kb, nk, nk, col, D, w->kr);
        kn->scores(w->qf, rq, D, w->kt, pk, ATTN_KT, w->sc, ATTN_KT);
        kn->scores(w->gf, rq, D, w->vt, pk, ATTN_KT, w->dp, ATTN_KT);
        for (int64_t i = 0; i < nq; i++) {
            int32_t n = w->cnt[i];
            if (!n) continue;
            const int32_t *l = w->lst + i * ATTN_KT;
            probs(kn, scale, w->sc + i * ATTN_KT, w->dp + i * ATTN_KT, l, n, w->m[i], w->l[i], w->Di[i], NULL, NULL,
                  NULL, w);
            kn->accum(w->acc + i * D, D, w->ds, l, n, w->kr, D);
        }
    }
    for (int64_t i = 0; i < nq; i++) {
        float *o = dq + (row0 + i0 + i - g->ob) * W + col;
        for (int64_t d = 0; d < D; d++)
            o[d] = scale * w->acc[i * D + d];
    }
}

static void dkdv_unit(const attn_kernels *kn, const attn_geom *g, float scale, const uint16_t *q, const uint16_t *k,
                      const uint16_t *v, const float *stats, const float *Dt, const uint8_t *live_t, const float *dout,
                      float *dk, float *dv, int64_t b, int64_t h, int64_t j0, int64_t nk, const bwd_ws *w) {
    const int64_t D = g->D, W = g->W, S = g->S, row0 = b * S, col = h * D, rk = round_up(nk, 4);
    const uint8_t *kv = g->kv ? g->kv + b * S + j0 : NULL;
    load_rows_bf16(k, W, row0 + j0 - g->kb, nk, rk, col, D, w->kf);
    if (dk) load_rows_bf16(v, W, row0 + j0 - g->kb, nk, rk, col, D, w->vf);
    memset(w->dk, 0, (size_t)(nk * D) * sizeof(float));
    memset(w->dv, 0, (size_t)(nk * D) * sizeof(float));
    for (int64_t i0 = 0; i0 < S; i0 += ATTN_QT) {
        int64_t nq = min64(ATTN_QT, S - i0), pq = round_up(nq, 16);
        load_query_terms(g, stats, Dt, live_t, row0 + i0 - g->qb, nq, h, w->mq, w->lq, w->Dq, w->liveq);
        if (!build_lists(g->doc, j0, nk, kv, i0, nq, w->liveq, w->lst, ATTN_QT, w->cnt)) continue;
        kn->trans_bf16(q, W, row0 + i0 - g->qb, nq, pq, col, D, w->qt, ATTN_QT);
        kn->scores(w->kf, rk, D, w->qt, pq, ATTN_QT, w->sc, ATTN_QT);
        if (dk) {
            kn->trans_f32(dout, W, row0 + i0 - g->qb, nq, pq, col, D, w->gt, ATTN_QT);
            load_rows_bf16(q, W, row0 + i0 - g->qb, nq, nq, col, D, w->qr);
            kn->scores(w->vf, rk, D, w->gt, pq, ATTN_QT, w->dp, ATTN_QT);
        }
        if (dv) load_rows_f32(dout, W, row0 + i0 - g->qb, nq, nq, col, D, w->gr);
        for (int64_t j = 0; j < nk; j++) {
            int32_t n = w->cnt[j];
            if (!n) continue;
            const int32_t *l = w->lst + j * ATTN_QT;
            probs(kn, scale, w->sc + j * ATTN_QT, dk ? w->dp + j * ATTN_QT : NULL, l, n, 0, 0, 0, w->mq, w->lq, w->Dq,
                  w);
            if (dv) kn->accum(w->dv + j * D, D, w->pn, l, n, w->gr, D);
            if (dk) kn->accum(w->dk + j * D, D, w->ds, l, n, w->qr, D);
        }
    }
    for (int64_t j = 0; j < nk; j++) {
        if (dk) {
            float *o = dk + (row0 + j0 + j - g->ob) * W + col;
            for (int64_t d = 0; d < D; d++)
                o[d] = scale * w->dk[j * D + d];
        }
        if (dv) memcpy(dv + (row0 + j0 + j - g->ob) * W + col, w->dv + j * D, (size_t)D * sizeof(float));
    }
}

/* ------------------------------------------------------------------ golden (F64) ------ */

static int allowed(const attn_geom *g, int64_t b, int64_t i, int64_t j) {
    return (!g->kv || g->kv[b * g->S + j]) && (!g->doc || g->doc[i] == g->doc[j]);
}

static double dot64(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

static void golden_forward(const attn_geom *g, const double *q, const double *k, const double *v, double *out,
                           double *stats) {
    const int64_t S = g->S, H = g->H, D = g->D, W = g->W;
    const double scale = 1.0 / sqrt((double)D);
    int64_t units = g->B * S * H;
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; u++) {
        int64_t row = u / H, h = u % H, b = row / S, i = row % S, col = h * D;
        const double *qi = q + row * W + col;
        double *o = out + row * W + col, *st = stats + (row * H + h) * 2;
        double m = -INFINITY;
        int any = 0;
        for (int64_t j = 0; j < S; j++) {
            if (!allowed(g, b, i, j)) continue;
            double s = dot64(qi, k + (b * S + j) * W + col, D) * scale;
            if (s > m) m = s;
            any = 1;
        }
        for (int64_t d = 0; d < D; d++)
            o[d] = 0.0;
        st[0] = st[1] = 0.0;
        if (!any) continue;
        double l = 0.0;
        for (int64_t j = 0; j < S; j++) {
            if (!allowed(g, b, i, j)) continue;
            double p = exp(dot64(qi, k + (b * S + j) * W + col, D) * scale - m);
            const double *vj = v + (b * S + j) * W + col;
            l += p;
            for (int64_t d = 0; d < D; d++)
                o[d] += p * vj[d];
        }
        for (int64_t d = 0; d < D; d++)
            o[d] /= l;
        st[0] = m;
        st[1] = l;
    }
}

/* dS_ij for one (query, key) pair, or 0 with *P = 0 when the query has no key. */
static double golden_ds(const attn_geom *g, double scale, const double *q, const double *k, const double *v,
                        const double *out, const double *stats, const double *dout, int64_t b, int64_t h, int64_t i,
                        int64_t j, double *P) {
    const int64_t S = g->S, D = g->D, W = g->W, col = h * D, ri = b * S + i, rj = b * S + j;
    const double *st = stats + (ri * g->H + h) * 2;
    if (st[1] == 0.0) {
        *P = 0.0;
        return 0.0;
    }
    double p = exp(dot64(q + ri * W + col, k + rj * W + col, D) * scale - st[0]) / st[1];
    double Di = dot64(dout + ri * W + col, out + ri * W + col, D);
    double dP = dot64(dout + ri * W + col, v + rj * W + col, D);
    *P = p;
    return p * (dP - Di);
}

static void golden_backward(const attn_geom *g, const double *q, const double *k, const double *v, const double *out,
                            const double *stats, const double *dout, double *dq, double *dk, double *dv) {
    const int64_t S = g->S, H = g->H, D = g->D, W = g->W;
    const double scale = 1.0 / sqrt((double)D);
    int64_t units = g->B * S * H;
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; u++) {
        int64_t row = u / H, h = u % H, b = row / S, x = row % S, col = h * D;
        double P;
        if (dq) { /* row = query x */
            double *o = dq + row * W + col;
            for (int64_t d = 0; d < D; d++)
                o[d] = 0.0;
            for (int64_t j = 0; j < S; j++) {
                if (!allowed(g, b, x, j)) continue;
                double ds = golden_ds(g, scale, q, k, v, out, stats, dout, b, h, x, j, &P);
                const double *kj = k + (b * S + j) * W + col;
                for (int64_t d = 0; d < D; d++)
                    o[d] += ds * kj[d];
            }
            for (int64_t d = 0; d < D; d++)
                o[d] *= scale;
        }
        if (dk || dv) { /* row = key x */
            double *ok = dk ? dk + row * W + col : NULL, *ov = dv ? dv + row * W + col : NULL;
            for (int64_t d = 0; d < D; d++) {
                if (ok) ok[d] = 0.0;
                if (ov) ov[d] = 0.0;
            }
            for (int64_t i = 0; i < S; i++) {
                if (!allowed(g, b, i, x)) continue;
                double ds = golden_ds(g, scale, q, k, v, out, stats, dout, b, h, i, x, &P);
                const double *qi = q + (b * S + i) * W + col, *gi = dout + (b * S + i) * W + col;
                for (int64_t d = 0; d < D; d++) {
                    if (ok) ok[d] += ds * qi[d];
                    if (ov) ov[d] += P * gi[d];
                }
            }
            if (ok)
                for (int64_t d = 0; d < D; d++)
                    ok[d] *= scale;
        }
    }
}

/* ------------------------------------------------------------------ validation -------- */

typedef struct attn_mode {
    int golden;
    h3s_dtype act, stat, grad;
} attn_mode;

static h3s_status check_same(const char *op, const char *name, const h3s_tensor *t, h3s_dtype dtype, int64_t rows,
                             int64_t width) {
    int64_t dims[2] = {rows, width};
    return h3s_check_shape(op, name, t, dtype, 2, dims);
}

/* Checks q, k, v, batch, heads, the mask and the forward's out and stats (outputs of the
 * forward, inputs of the backward); fills the geometry (data pointers of the mask only) and
 * the mode. */
static h3s_status check_common(const char *op, const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                               int64_t batch, int64_t heads, const h3s_attn_mask *mask, const h3s_tensor *out,
                               const h3s_tensor *stats, attn_mode *mode, attn_geom *g) {
    if (!q) return h3s_fail(H3S_ERR_INVALID, "%s: q is NULL", op);
    if (q->dtype == H3S_F64) {
        *mode = (attn_mode){1, H3S_F64, H3S_F64, H3S_F64};
    } else if (q->dtype == H3S_BF16) {
        *mode = (attn_mode){0, H3S_BF16, H3S_F32, H3S_F32};
    } else {
        return h3s_fail(H3S_ERR_DTYPE, "%s: q has dtype %s, expected BF16 (strict) or F64 (golden)", op,
                        h3s_dtype_name(q->dtype));
    }
    H3S_TRY(h3s_check_tensor(op, "q", q, mode->act, 2));
    if (batch <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: batch = %lld, must be positive", op, (long long)batch);
    if (heads <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: heads = %lld, must be positive", op, (long long)heads);
    int64_t rows = q->shape[0], width = q->shape[1];
    if (rows % batch)
        return h3s_fail(H3S_ERR_SHAPE, "%s: q has %lld rows, not a multiple of batch = %lld", op, (long long)rows,
                        (long long)batch);
    if (width == 0) return h3s_fail(H3S_ERR_SHAPE, "%s: q has width 0 (head dim must be positive)", op);
    if (width % heads)
        return h3s_fail(H3S_ERR_SHAPE, "%s: q width %lld is not a multiple of heads = %lld", op, (long long)width,
                        (long long)heads);
    H3S_TRY(check_same(op, "k", k, mode->act, rows, width));
    H3S_TRY(check_same(op, "v", v, mode->act, rows, width));
    g->B = batch;
    g->S = rows / batch;
    g->H = heads;
    g->D = width / heads;
    g->W = width;
    g->doc = NULL;
    g->kv = NULL;
    g->qb = g->kb = g->ob = 0;
    g->qrows = rows;
    if (mask && mask->doc) {
        int64_t dims[1] = {g->S};
        H3S_TRY(h3s_check_shape(op, "mask.doc", mask->doc, H3S_I64, 1, dims));
        g->doc = (const int64_t *)mask->doc->data;
    }
    if (mask && mask->key_valid) {
        int64_t dims[2] = {g->B, g->S};
        H3S_TRY(h3s_check_shape(op, "mask.key_valid", mask->key_valid, H3S_BOOL, 2, dims));
        g->kv = (const uint8_t *)mask->key_valid->data;
    }
    H3S_TRY(check_same(op, "out", out, mode->act, rows, width));
    int64_t sdims[3] = {rows, heads, 2};
    return h3s_check_shape(op, "stats", stats, mode->stat, 3, sdims);
}

/* Every float tensor on one side (host or device: a mix is H3S_ERR_DEVICE); mask tensors on
 * the host for the CPU backends.  Returns the device flag through *device. */
static h3s_status check_devices(const char *op, const h3s_tensor *const *t, const char *const *names, int n,
                                const h3s_attn_mask *mask, int *device) {
    H3S_TRY(h3s_check_placement(op, t, names, n, device));
    if (!*device && mask) {
        if (mask->doc && mask->doc->device)
            return h3s_fail(H3S_ERR_INVALID, "%s: mask.doc is on the device but the tensors are on the host", op);
        if (mask->key_valid && mask->key_valid->device)
            return h3s_fail(H3S_ERR_INVALID, "%s: mask.key_valid is on the device but the tensors are on the host", op);
    }
    return H3S_OK;
}

static h3s_status check_no_overlap(const char *op, const h3s_tensor *const *outs, const char *const *out_names,
                                   int nout, const h3s_tensor *const *ins, const char *const *in_names, int nin) {
    for (int i = 0; i < nout; i++) {
        for (int j = 0; j < nin; j++)
            if (h3s_tensors_overlap(outs[i], ins[j]))
                return h3s_fail(H3S_ERR_INVALID, "%s: output %s overlaps input %s", op, out_names[i], in_names[j]);
        for (int j = 0; j < i; j++)
            if (h3s_tensors_overlap(outs[i], outs[j]))
                return h3s_fail(H3S_ERR_INVALID, "%s: outputs %s and %s overlap", op, out_names[j], out_names[i]);
    }
    return H3S_OK;
}

/* ------------------------------------------------------------------ strict drivers ---- */

/* Work units over the packed rows [lo, hi): (item, head, block) with blocks of `blk` consecutive positions of the
 * item starting at the item's first row inside [lo, hi).  A unit's rows are computed start to end by one thread
 * and no position's result depends on which others share its block, so any cut gives the same bits. */
typedef struct unit_grid {
    int64_t b0, nb, nblk, blk, lo, hi;
} unit_grid;

static unit_grid make_grid(const attn_geom *g, int64_t lo, int64_t hi, int64_t blk) {
    unit_grid u = {0, 0, 0, blk, lo, hi};
    if (hi <= lo) return u;
    u.b0 = lo / g->S;
    u.nb = (hi - 1) / g->S - u.b0 + 1;
    u.nblk = (g->S + blk - 1) / blk;
    return u;
}

/* Unit x of the grid: item b, head h, first position i0 and count n (n == 0: an empty unit). */
static void grid_unit(const attn_geom *g, const unit_grid *u, int64_t x, int64_t *b, int64_t *h, int64_t *i0,
                      int64_t *n) {
    *b = u->b0 + x / (g->H * u->nblk);
    *h = (x / u->nblk) % g->H;
    int64_t base = *b * g->S, s_lo = u->lo > base ? u->lo - base : 0, s_hi = u->hi - base < g->S ? u->hi - base : g->S;
    *i0 = s_lo + (x % u->nblk) * u->blk;
    *n = *i0 < s_hi ? min64(u->blk, s_hi - *i0) : 0;
}

static h3s_status strict_forward(const char *op, const attn_geom *g, const uint16_t *q, const uint16_t *k,
                                 const uint16_t *v, uint16_t *out, float *stats, int64_t lo, int64_t hi) {
    const attn_kernels *kn = attn_pick_kernels();
    const float scale = (float)(1.0 / sqrt((double)g->D));
    fwd_ws lay;
    size_t per = fwd_ws_layout(&lay, NULL, g->D);
    int nt = omp_get_max_threads();
    char *ws = h3s_malloc((size_t)nt, per);
    if (!ws) return h3s_fail_context(H3S_ERR_NOMEM, "%s: workspace", op);
    const unit_grid grid = make_grid(g, lo, hi, ATTN_QB);
    const int64_t units = grid.nb * g->H * grid.nblk;
#pragma omp parallel num_threads(nt)
    {
        fwd_ws w;
        fwd_ws_layout(&w, ws + (size_t)omp_get_thread_num() * per, g->D);
        /* Any schedule gives the same bits: a unit is computed start to end by one thread. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            int64_t b, h, i0, n;
            grid_unit(g, &grid, u, &b, &h, &i0, &n);
            if (n) fwd_unit(kn, g, scale, q, k, v, out, stats, b, h, i0, n, &w);
        }
    }
    free(ws);
    return H3S_OK;
}

static h3s_status strict_backward(const char *op, const attn_geom *g, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, const uint16_t *out, const float *stats, const float *dout,
                                  float *pdq, float *pdk, float *pdv, int64_t lo, int64_t hi) {
    const attn_kernels *kn = attn_pick_kernels();
    const float scale = (float)(1.0 / sqrt((double)g->D));
    bwd_ws lay;
    size_t per = bwd_ws_layout(&lay, NULL, g->D);
    int nt = omp_get_max_threads();
    char *ws = h3s_malloc((size_t)nt, per);
    if (!ws) return h3s_fail_context(H3S_ERR_NOMEM, "%s: workspace", op);
    const unit_grid gq = make_grid(g, lo, hi, ATTN_QB), gk = make_grid(g, lo, hi, ATTN_KB);
    const int64_t uq = pdq ? gq.nb * g->H * gq.nblk : 0, uk = (pdk || pdv) ? gk.nb * g->H * gk.nblk : 0;
    /* D_i and the live flag of every (query-side row, head): rows * heads * 5 bytes */
    float *Dt = h3s_malloc((size_t)(g->qrows * g->H), sizeof(float));
    uint8_t *live_t = Dt ? h3s_malloc((size_t)(g->qrows * g->H), 1) : NULL;
    if (!live_t) {
        free(Dt);
        free(ws);
        return h3s_fail_context(H3S_ERR_NOMEM, "%s: workspace", op);
    }
#pragma omp parallel num_threads(nt)
    {
        bwd_ws w;
        bwd_ws_layout(&w, ws + (size_t)omp_get_thread_num() * per, g->D);
        query_terms(kn, g, out, stats, dout, Dt, live_t); /* ends with a barrier */
        /* dq units (by query) and dk/dv units (by key) write disjoint outputs; any schedule
         * gives the same bits. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < uq + uk; u++) {
            int64_t b, h, i0, n;
            if (u < uq) {
                grid_unit(g, &gq, u, &b, &h, &i0, &n);
                if (n) dq_unit(kn, g, scale, q, k, v, stats, Dt, live_t, dout, pdq, b, h, i0, n, &w);
            } else {
                grid_unit(g, &gk, u - uq, &b, &h, &i0, &n);
                if (n) dkdv_unit(kn, g, scale, q, k, v, stats, Dt, live_t, dout, pdk, pdv, b, h, i0, n, &w);
            }
        }
    }
    free(live_t);
    free(Dt);
    free(ws);
    return H3S_OK;
}

/* ------------------------------------------------------------------ entry points ------ */

h3s_status h3s_attention_forward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                 int64_t heads, const h3s_attn_mask *mask, h3s_tensor *out, h3s_tensor *stats) {
    static const char *op = "attention_forward";
    attn_mode mode = {0, H3S_F64, H3S_F64, H3S_F64};
    attn_geom g;
    H3S_TRY(check_common(op, q, k, v, batch, heads, mask, out, stats, &mode, &g));
    const int64_t rows = g.B * g.S;
    const h3s_tensor *all[] = {q, k, v, out, stats};
    const char *names[] = {"q", "k", "v", "out", "stats"};
    int device;
    H3S_TRY(check_devices(op, all, names, 5, mask, &device));
    if (!device) {
        const h3s_tensor *ins[] = {q, k, v, mask ? mask->doc : NULL, mask ? mask->key_valid : NULL};
        const char *in_names[] = {"q", "k", "v", "mask.doc", "mask.key_valid"};
        const h3s_tensor *outs[] = {out, stats};
        const char *out_names[] = {"out", "stats"};
        H3S_TRY(check_no_overlap(op, outs, out_names, 2, ins, in_names, 5));
    }
    if (device) return h3s_cuda_attention_forward(q, k, v, batch, heads, mask, out, stats);
    if (rows == 0) return H3S_OK;

    if (mode.golden) {
        golden_forward(&g, q->data, k->data, v->data, out->data, stats->data);
        return H3S_OK;
    }
    return strict_forward(op, &g, q->data, k->data, v->data, out->data, stats->data, 0, rows);
}

h3s_status h3s_attention_backward(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, const h3s_tensor *out,
                                  const h3s_tensor *stats, int64_t batch, int64_t heads, const h3s_attn_mask *mask,
                                  const h3s_tensor *dout, h3s_tensor *dq, h3s_tensor *dk, h3s_tensor *dv) {
    return h3s_attention_backward_rounded(q, k, v, out, stats, batch, heads, mask, dout, dq, dk, dv, NULL);
}

h3s_status h3s_attention_backward_rounded(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                          const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t heads,
                                          const h3s_attn_mask *mask, const h3s_tensor *dout, h3s_tensor *dq,
                                          h3s_tensor *dk, h3s_tensor *dv, h3s_tensor *dv_bf16) {
    static const char *op = "attention_backward";
    attn_mode mode = {0, H3S_F64, H3S_F64, H3S_F64};
    attn_geom g;
    H3S_TRY(check_common(op, q, k, v, batch, heads, mask, out, stats, &mode, &g));
    const int64_t rows = g.B * g.S;
    H3S_TRY(check_same(op, "dout", dout, mode.grad, rows, g.W));
    if (dq) H3S_TRY(check_same(op, "dq", dq, mode.grad, rows, g.W));
    if (dk) H3S_TRY(check_same(op, "dk", dk, mode.grad, rows, g.W));
    if (dv) H3S_TRY(check_same(op, "dv", dv, mode.grad, rows, g.W));
    if (dv_bf16 && mode.golden) return h3s_fail(H3S_ERR_INVALID, "%s: dv_bf16 needs the strict variant", op);
    if (dv_bf16) H3S_TRY(check_same(op, "dv_bf16", dv_bf16, H3S_BF16, rows, g.W));
    const h3s_tensor *all[] = {q, k, v, out, stats, dout, dq, dk, dv, dv_bf16};
    const char *names[] = {"q", "k", "v", "out", "stats", "dout", "dq", "dk", "dv", "dv_bf16"};
    int device;
    H3S_TRY(check_devices(op, all, names, 10, mask, &device));
    if (dv_bf16) { /* checked on both backends: no output may overlap the copy */
        const h3s_tensor *ins[] = {q, k, v, out, stats, dout, dq, dk, dv};
        const h3s_tensor *outs[] = {dv_bf16};
        const char *out_names[] = {"dv_bf16"};
        H3S_TRY(check_no_overlap(op, outs, out_names, 1, ins, names, 9));
    }
    if (!device) {
        const h3s_tensor *ins[] = {q, k, v, out, stats, dout, mask ? mask->doc : NULL, mask ? mask->key_valid : NULL};
        const char *in_names[] = {"q", "k", "v", "out", "stats", "dout", "mask.doc", "mask.key_valid"};
        const h3s_tensor *outs[] = {dq, dk, dv};
        const char *out_names[] = {"dq", "dk", "dv"};
        H3S_TRY(check_no_overlap(op, outs, out_names, 3, ins, in_names, 8));
        if (dv_bf16 && !dv)
            return h3s_fail(H3S_ERR_INVALID,
                            "%s: dv is NULL; dv_bf16 alone is a CUDA-backend option (the host writes dv)", op);
    }
    if (device) return h3s_cuda_attention_backward(q, k, v, out, stats, batch, heads, mask, dout, dq, dk, dv, dv_bf16);
    if (rows == 0 || (!dq && !dk && !dv)) return H3S_OK;
    if (dv_bf16) { /* dv, then its rounding (h3s_tensor_convert rounds to nearest even, as the kernels do) */
        H3S_TRY(strict_backward(op, &g, q->data, k->data, v->data, out->data, stats->data, dout->data,
                                dq ? dq->data : NULL, dk ? dk->data : NULL, dv->data, 0, rows));
        return h3s_tensor_convert(dv, dv_bf16);
    }

    if (mode.golden) {
        golden_backward(&g, q->data, k->data, v->data, out->data, stats->data, dout->data, dq ? dq->data : NULL,
                        dk ? dk->data : NULL, dv ? dv->data : NULL);
        return H3S_OK;
    }
    return strict_backward(op, &g, q->data, k->data, v->data, out->data, stats->data, dout->data, dq ? dq->data : NULL,
                           dk ? dk->data : NULL, dv ? dv->data : NULL, 0, rows);
}

/* ------------------------------------------------------------------ row slices -------- */

/* The geometry of a slice call: rows [lo, hi) of the packed [batch * seq] axis, the key side [kv_lo, kv_lo + nk)
 * covering every item a row of the slice belongs to. */
static h3s_status check_slice(const char *op, const h3s_tensor *q, int64_t batch, int64_t seq, int64_t heads,
                              const h3s_attn_mask *mask, int64_t lo, int64_t hi, int64_t kv_lo, int64_t nk,
                              attn_geom *g) {
    if (!q) return h3s_fail(H3S_ERR_INVALID, "%s: q is NULL", op);
    if (q->device || q->dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: row slices run on the strict CPU backend only (BF16 host tensors)",
                        op);
    H3S_TRY(h3s_check_tensor(op, "q", q, H3S_BF16, 2));
    if (batch <= 0 || seq <= 0 || heads <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: batch %lld, seq %lld, heads %lld must be positive", op, (long long)batch,
                        (long long)seq, (long long)heads);
    int64_t width = q->shape[1];
    if (width == 0 || width % heads)
        return h3s_fail(H3S_ERR_SHAPE, "%s: width %lld is not a positive multiple of heads = %lld", op,
                        (long long)width, (long long)heads);
    if (lo < 0 || hi <= lo || hi > batch * seq)
        return h3s_fail(H3S_ERR_INDEX, "%s: rows [%lld, %lld) are not a non-empty range of [0, %lld)", op,
                        (long long)lo, (long long)hi, (long long)(batch * seq));
    int64_t first = lo / seq * seq, last = ((hi - 1) / seq + 1) * seq;
    if (kv_lo < 0 || nk < 0 || kv_lo > first || kv_lo + nk < last || kv_lo + nk > batch * seq)
        return h3s_fail(H3S_ERR_INDEX,
                        "%s: key rows [%lld, %lld) do not cover the items [%lld, %lld) of rows [%lld, %lld) inside "
                        "[0, %lld)",
                        op, (long long)kv_lo, (long long)(kv_lo + nk), (long long)first, (long long)last, (long long)lo,
                        (long long)hi, (long long)(batch * seq));
    *g = (attn_geom){batch, seq, heads, width / heads, width, NULL, NULL, 0, kv_lo, lo, 0};
    if (mask && mask->doc) {
        int64_t dims[1] = {seq};
        H3S_TRY(h3s_check_shape(op, "mask.doc", mask->doc, H3S_I64, 1, dims));
        if (mask->doc->device) return h3s_fail(H3S_ERR_INVALID, "%s: mask.doc must be a host tensor", op);
        g->doc = (const int64_t *)mask->doc->data;
    }
    if (mask && mask->key_valid) {
        int64_t dims[2] = {batch, seq};
        H3S_TRY(h3s_check_shape(op, "mask.key_valid", mask->key_valid, H3S_BOOL, 2, dims));
        if (mask->key_valid->device) return h3s_fail(H3S_ERR_INVALID, "%s: mask.key_valid must be a host tensor", op);
        g->kv = (const uint8_t *)mask->key_valid->data;
    }
    return H3S_OK;
}

static h3s_status check_host(const char *op, const h3s_tensor *const *t, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->device)
            return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: %s is a device tensor; row slices run on the CPU only", op,
                            names[i]);
    return H3S_OK;
}

h3s_status h3s_attention_forward_rows(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v, int64_t batch,
                                      int64_t seq, int64_t heads, const h3s_attn_mask *mask, int64_t row_lo,
                                      int64_t row_hi, int64_t kv_lo, h3s_tensor *out, h3s_tensor *stats) {
    static const char *op = "attention_forward_rows";
    attn_geom g;
    if (!k || !v || !out || !stats) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    H3S_TRY(check_slice(op, q, batch, seq, heads, mask, row_lo, row_hi, kv_lo, k->shape[0], &g));
    const int64_t nq = row_hi - row_lo, nk = k->shape[0];
    H3S_TRY(check_same(op, "q", q, H3S_BF16, nq, g.W));
    H3S_TRY(check_same(op, "k", k, H3S_BF16, nk, g.W));
    H3S_TRY(check_same(op, "v", v, H3S_BF16, nk, g.W));
    H3S_TRY(check_same(op, "out", out, H3S_BF16, nq, g.W));
    int64_t sdims[3] = {nq, heads, 2};
    H3S_TRY(h3s_check_shape(op, "stats", stats, H3S_F32, 3, sdims));
    const h3s_tensor *all[] = {q, k, v, out, stats};
    const char *names[] = {"q", "k", "v", "out", "stats"};
    H3S_TRY(check_host(op, all, names, 5));
    const h3s_tensor *outs[] = {out, stats};
    const char *out_names[] = {"out", "stats"};
    H3S_TRY(check_no_overlap(op, outs, out_names, 2, all, names, 3));
    g.qb = row_lo;
    g.ob = row_lo;
    g.kb = kv_lo;
    g.qrows = nq;
    return strict_forward(op, &g, q->data, k->data, v->data, out->data, stats->data, row_lo, row_hi);
}

h3s_status h3s_attention_backward_rows(const h3s_tensor *q, const h3s_tensor *k, const h3s_tensor *v,
                                       const h3s_tensor *out, const h3s_tensor *stats, int64_t batch, int64_t seq,
                                       int64_t heads, const h3s_attn_mask *mask, const h3s_tensor *dout, int64_t row_lo,
                                       int64_t row_hi, int64_t kv_lo, h3s_tensor *dq, h3s_tensor *dk, h3s_tensor *dv) {
    static const char *op = "attention_backward_rows";
    attn_geom g;
    if (!k || !v || !out || !stats || !dout) return h3s_fail(H3S_ERR_INVALID, "%s: NULL tensor", op);
    H3S_TRY(check_slice(op, q, batch, seq, heads, mask, row_lo, row_hi, kv_lo, q->shape[0], &g));
    const int64_t nq = row_hi - row_lo, nk = q->shape[0];
    H3S_TRY(check_same(op, "k", k, H3S_BF16, nk, g.W));
    H3S_TRY(check_same(op, "v", v, H3S_BF16, nk, g.W));
    H3S_TRY(check_same(op, "out", out, H3S_BF16, nk, g.W));
    H3S_TRY(check_same(op, "dout", dout, H3S_F32, nk, g.W));
    int64_t sdims[3] = {nk, heads, 2};
    H3S_TRY(h3s_check_shape(op, "stats", stats, H3S_F32, 3, sdims));
    if (dq) H3S_TRY(check_same(op, "dq", dq, H3S_F32, nq, g.W));
    if (dk) H3S_TRY(check_same(op, "dk", dk, H3S_F32, nq, g.W));
    if (dv) H3S_TRY(check_same(op, "dv", dv, H3S_F32, nq, g.W));
    const h3s_tensor *all[] = {q, k, v, out, stats, dout, dq, dk, dv};
    const char *names[] = {"q", "k", "v", "out", "stats", "dout", "dq", "dk", "dv"};
    H3S_TRY(check_host(op, all, names, 9));
    const h3s_tensor *outs[] = {dq, dk, dv};
    const char *out_names[] = {"dq", "dk", "dv"};
    H3S_TRY(check_no_overlap(op, outs, out_names, 3, all, names, 6));
    if (!dq && !dk && !dv) return H3S_OK;
    g.qb = kv_lo;
    g.kb = kv_lo;
    g.ob = row_lo;
    g.qrows = nk;
    return strict_backward(op, &g, q->data, k->data, v->data, out->data, stats->data, dout->data, dq ? dq->data : NULL,
                           dk ? dk->data : NULL, dv ? dv->data : NULL, row_lo, row_hi);
}

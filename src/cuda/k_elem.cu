/* Elementwise and row-wise operators on the GPU (docs/numerics/cuda.md): rope table and
 * rotation, gated residual, SwiGLU, the SiLU pieces of the AdaLN projection and the timestep
 * MLP, the timestep sinusoid, batched row gather/scatter, gradient addition, seeded fills.
 *
 * Every output element is computed by one thread from its own inputs with the CPU's formula,
 * one IEEE FP32 operation at a time (the build has --fmad=false); transcendental functions are
 * the CPU's double recipes with the device's double exp/log/sin/cos, rounded once to float.
 * Grids are grid-stride loops: the launch shape never reaches the bits.  The memory-bound row
 * kernels (rope apply, residual, swiglu, grad_add) give a thread VW consecutive elements instead
 * of one, each still computed alone with the same expression (docs/numerics/cuda.md, "Row
 * kernels"). */
#include <math.h>

#include <type_traits>

#include "cuda/k_common.cuh"

#define EL_THREADS 256
#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, n, ...)                                                                                         \
    do {                                                                                                               \
        if ((n) > 0) {                                                                                                 \
            kernel<<<h3k_blocks((n), EL_THREADS), EL_THREADS, 0, H3K_STREAM>>>(__VA_ARGS__);                           \
            return h3c_launch_check(op);                                                                               \
        }                                                                                                              \
        return H3S_OK;                                                                                                 \
    } while (0)

/* The row kernels (rope apply, residual, swiglu) run on a 2-D grid: blockIdx.y walks the rows
 * (grid-stride when there are more than 65,535), blockIdx.x and threadIdx.x walk a row's chunks
 * of VW consecutive elements (grid-stride too; not unrolled, which would make the compiler divide
 * for the trip count at every row).  The row and column come from the grid, not from
 * dividing a flat 64-bit index by the row width (a 64-bit division is a long emulated sequence
 * on the GPU, and these kernels did several per element).  Per row, blocks_x = ceil(chunks /
 * 256) blocks of the fewest whole warps that cover the chunks, so few threads idle. */
#define ROW_LOOP(m, M) _Pragma("unroll 1") for (int64_t m = blockIdx.y; m < (M); m += gridDim.y)
#define COL_LOOP(c, n)                                                                                                 \
    _Pragma("unroll 1") for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < (n);                      \
                             c += (int64_t)gridDim.x * blockDim.x)

struct el_grid {
    dim3 grid, block;
};

static el_grid el_rows(int64_t M, int64_t chunks) {
    int64_t bx = (chunks + EL_THREADS - 1) / EL_THREADS;
    if (bx > 65535) bx = 65535; /* COL_LOOP covers the rest */
    if (bx < 1) bx = 1;
    int64_t t = (chunks + bx - 1) / bx;
    t = (t + 31) / 32 * 32;
    if (t > EL_THREADS) t = EL_THREADS;
    if (t < 32) t = 32;
    const int64_t gy = M > 65535 ? 65535 : (M < 1 ? 1 : M); /* ROW_LOOP covers the rest */
    el_grid g;
    g.grid = dim3((unsigned)bx, (unsigned)gy, 1);
    g.block = dim3((unsigned)t, 1, 1);
    return g;
}

/* The widest VW in {8, 4, 2, 1} (at most vmax) for which every access of a row kernel is aligned:
 * `ok(VW)` checks the shape (the row widths and offsets are multiples of VW) and the pointers.
 * The choice depends on shapes and addresses only, never on data. */
template <typename OK> static int el_pick_vw(int vmax, OK ok) {
    for (int vw = vmax; vw > 1; vw /= 2)
        if (ok(vw)) return vw;
    return 1;
}

/* Test hook (tests/gpu/test_gpu_ops.c): on = 1 runs the previous one-thread-per-element kernels
 * (the *_ref_kernel below, round_bf16_ref_kernel in linear.cu), which the row kernels must match
 * bit for bit. */
static int g_elem_reference = 0;

extern "C" void h3c_elem_force_reference(int on) { g_elem_reference = on != 0; }

extern "C" int h3c_elem_reference(void) { return g_elem_reference; }

/* ------------------------------------------------------------------ rope */

/* The provider's f32 recipe (as the CPU computes it): e = f32(2j) / f32(2F);
 * p = f32(exp(e * ln(f32(theta)))); inv = 1 / p; angle = f32(pos) * inv; cos/sin in double,
 * rounded once.  Columns [0, 3F) and [3F, 6F) repeat the same angles. */
__global__ void rope_table_kernel(int64_t S, int64_t F, double theta, const void *pos, int pos_dt, float *co,
                                  float *so) {
    const double ln_theta = log((double)(float)theta);
    GRID_STRIDE(e, S * 3 * F) {
        const int64_t s = e / (3 * F), rem = e % (3 * F), axis = rem / F, j = rem % F;
        const float ex = (float)(2 * j) / (float)(2 * F);
        const float p = (float)exp((double)ex * ln_theta);
        const float inv = 1.0f / p;
        const double pd =
            pos_dt == H3S_F64 ? ((const double *)pos)[s * 3 + axis] : (double)((const float *)pos)[s * 3 + axis];
        const float a = (float)pd * inv;
        const float c = (float)cos((double)a), sn = (float)sin((double)a);
        const int64_t W = 6 * F, col = axis * F + j;
        co[s * W + col] = c;
        co[s * W + 3 * F + col] = c;
        so[s * W + col] = sn;
        so[s * W + 3 * F + col] = sn;
    }
}

extern "C" h3s_status h3c_rope_table(const char *op, int64_t S, int64_t F, double theta, const void *pos, int pos_dt,
                                     float *cos_out, float *sin_out) {
    LAUNCH(rope_table_kernel, S * 3 * F, S, F, theta, pos, pos_dt, cos_out, sin_out);
}

/* The reference (h3c_elem_force_reference): one thread per (row, head, slot): slots < half rotate
 * the pair (i, half + i), reading both before writing either (so out may alias in); later slots
 * copy a pass-through channel. */
__global__ void rope_apply_ref_kernel(int backward, int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R,
                                      const float *ct, const float *st, const void *in, void *out) {
    const int64_t half = R / 2, slots = half + (D - R), W = heads * D;
    GRID_STRIDE(e, M * heads * slots) {
        const int64_t m = e / (heads * slots), rem = e % (heads * slots), h = rem / slots, sl = rem % slots;
        const int64_t base = m * W + h * D;
        const float *c = ct + (m % S) * R, *s = st + (m % S) * R;
        if (sl < half) {
            const int64_t i = sl;
            if (!backward) {
                const uint16_t *x = (const uint16_t *)in + base;
                uint16_t *y = (uint16_t *)out + base;
                float x1 = h3k_bf2f(x[i]), x2 = h3k_bf2f(x[half + i]);
                float p1 = x1 * c[i], p2 = x2 * s[i];
                float q1 = x2 * c[half + i], q2 = x1 * s[half + i];
                y[i] = h3k_f2bf(p1 - p2);
                y[half + i] = h3k_f2bf(q1 + q2);
            } else {
                const float *g = (const float *)in + base;
                float *dx = (float *)out + base;
                float g1 = g[i], g2 = g[half + i];
                float p1 = g1 * c[i], p2 = g2 * s[half + i];
                float q1 = g2 * c[half + i], q2 = g1 * s[i];
                dx[i] = p1 + p2;
                dx[half + i] = q1 - q2;
            }
        } else if (in != out) {
            const int64_t d = R + (sl - half);
            if (!backward)
                ((uint16_t *)out)[base + d] = ((const uint16_t *)in)[base + d];
            else
                ((float *)out)[base + d] = ((const float *)in)[base + d];
        }
    }
}

/* The row kernel: one thread per (row, head, chunk).  A head's chunks are first the pair chunks
 * (VW consecutive pairs (i, half + i), i = k VW ... k VW + VW - 1) and then, unless out is in, the
 * pass-through chunks (VW channels from R + (k - pc) VW).  Every pair is computed with the
 * reference's expressions, in its order, with its roundings; the thread reads both halves of all
 * its pairs before it writes any, and no other thread touches them, so out may still alias in.
 * The head and chunk come from one division of the chunk index by cph (chunks per head), and the
 * table row from m % S once per row a thread visits, both in I: 32-bit unsigned when the launcher
 * checked M, S and heads D below 2^31, else 64-bit. */
template <int VW, typename T> __device__ __forceinline__ void rope_load(const T *p, T (&v)[VW]) {
    if constexpr (sizeof(T) == 2)
        h3k_ld_bf16v<VW>(p, v);
    else
        h3k_ld_f32v<VW>(p, v);
}

template <int VW, typename T> __device__ __forceinline__ void rope_store(T *p, const T (&v)[VW]) {
    if constexpr (sizeof(T) == 2)
        h3k_st_bf16v<VW>(p, v);
    else
        h3k_st_f32v<VW>(p, v);
}

template <int VW, typename I, int BACKWARD>
__global__ void rope_apply_vec_kernel(int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R, I pc, I cph,
                                      const float *ct, const float *st, const void *in, void *out) {
    typedef typename std::conditional<BACKWARD, float, uint16_t>::type T;
    const int64_t half = R / 2, W = heads * D;
    const int64_t chunks = heads * (int64_t)cph;
    ROW_LOOP(m, M) {
        const int64_t ms = (int64_t)((I)m % (I)S);
        const float *c = ct + ms * R, *s = st + ms * R;
        COL_LOOP(t, chunks) {
            const I h = (I)t / cph, k = (I)t - h * cph;
            const int64_t base = m * W + (int64_t)h * D;
            const T *x = (const T *)in + base;
            T *y = (T *)out + base;
            if (k < pc) {
                const int64_t i = (int64_t)k * VW;
                T a[VW], b[VW], ya[VW], yb[VW];
                float c1[VW], s1[VW], c2[VW], s2[VW];
                rope_load<VW>(x + i, a);
                rope_load<VW>(x + half + i, b);
                h3k_ld_f32v<VW>(c + i, c1);
                h3k_ld_f32v<VW>(s + i, s1);
                h3k_ld_f32v<VW>(c + half + i, c2);
                h3k_ld_f32v<VW>(s + half + i, s2);
                if constexpr (!BACKWARD) {
                    float fa[VW], fb[VW];
#pragma unroll
                    for (int j = 0; j < VW; j++) {
                        float x1 = h3k_bf2f(a[j]), x2 = h3k_bf2f(b[j]);
                        float p1 = x1 * c1[j], p2 = x2 * s1[j];
                        float q1 = x2 * c2[j], q2 = x1 * s2[j];
                        fa[j] = p1 - p2;
                        fb[j] = q1 + q2;
                    }
                    h3k_f2bf_v<VW>(fa, ya); /* h3k_f2bf's bits, two values per cvt */
                    h3k_f2bf_v<VW>(fb, yb);
                } else {
#pragma unroll
                    for (int j = 0; j < VW; j++) {
                        float g1 = a[j], g2 = b[j];
                        float p1 = g1 * c1[j], p2 = g2 * s2[j];
                        float q1 = g2 * c2[j], q2 = g1 * s1[j];
                        ya[j] = p1 + p2;
                        yb[j] = q1 - q2;
                    }
                }
                rope_store<VW>(y + i, ya);
                rope_store<VW>(y + half + i, yb);
            } else {
                const int64_t d = R + (int64_t)(k - pc) * VW;
                T v[VW];
                rope_load<VW>(x + d, v);
                rope_store<VW>(y + d, v);
            }
        }
    }
}

template <int VW, typename I, int BACKWARD>
static void rope_apply_launch(int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R, const float *cos_t,
                              const float *sin_t, const void *in, void *out) {
    const int64_t pc = R / 2 / VW, cph = pc + (in != out ? (D - R) / VW : 0);
    const el_grid g = el_rows(M, heads * cph);
    rope_apply_vec_kernel<VW, I, BACKWARD>
        <<<g.grid, g.block, 0, H3K_STREAM>>>(M, S, heads, D, R, (I)pc, (I)cph, cos_t, sin_t, in, out);
}

template <typename I, int BACKWARD>
static void rope_apply_vw(int vw, int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R, const float *cos_t,
                          const float *sin_t, const void *in, void *out) {
    switch (vw) {
    case 8: /* picked for the BF16 forward only: F32 stays at 4 (16 bytes an access) */
        if constexpr (!BACKWARD) rope_apply_launch<8, I, BACKWARD>(M, S, heads, D, R, cos_t, sin_t, in, out);
        break;
    case 4: rope_apply_launch<4, I, BACKWARD>(M, S, heads, D, R, cos_t, sin_t, in, out); break;
    case 2: rope_apply_launch<2, I, BACKWARD>(M, S, heads, D, R, cos_t, sin_t, in, out); break;
    default: rope_apply_launch<1, I, BACKWARD>(M, S, heads, D, R, cos_t, sin_t, in, out); break;
    }
}

extern "C" h3s_status h3c_rope_apply(const char *op, int backward, int64_t M, int64_t S, int64_t heads, int64_t D,
                                     int64_t R, const float *cos_t, const float *sin_t, const void *in, void *out) {
    const int64_t n = M * heads * (R / 2 + (D - R));
    if (g_elem_reference) LAUNCH(rope_apply_ref_kernel, n, backward, M, S, heads, D, R, cos_t, sin_t, in, out);
    if (n <= 0) return H3S_OK;
    /* VW pairs per chunk: half and the pass-through width multiples of VW (so are R, D, every head's
     * base and every chunk's offset), the data (BF16 forward, F32 backward) and the tables aligned. */
    const int esz = backward ? 4 : 2;
    const int vw = el_pick_vw(backward ? 4 : 8, [&](int v) {
        return (R / 2) % v == 0 && (D - R) % v == 0 && h3k_vec_aligned(in, v, esz) && h3k_vec_aligned(out, v, esz) &&
               h3k_vec_aligned(cos_t, v, 4) && h3k_vec_aligned(sin_t, v, 4);
    });
    const int64_t lim = (int64_t)1 << 31;
    const int narrow = M < lim && S < lim && heads * D < lim;
    if (narrow && backward)
        rope_apply_vw<uint32_t, 1>(vw, M, S, heads, D, R, cos_t, sin_t, in, out);
    else if (narrow)
        rope_apply_vw<uint32_t, 0>(vw, M, S, heads, D, R, cos_t, sin_t, in, out);
    else if (backward)
        rope_apply_vw<uint64_t, 1>(vw, M, S, heads, D, R, cos_t, sin_t, in, out);
    else
        rope_apply_vw<uint64_t, 0>(vw, M, S, heads, D, R, cos_t, sin_t, in, out);
    return h3c_launch_check(op);
}

/* ------------------------------------------------------------------ residual
 * The *_ref_kernel are the reference (h3c_elem_force_reference): one thread per element.  The
 * row kernels give each thread VW consecutive elements of one row, each with the reference's
 * expression; a row with a bad table index is reported (h3k_index, as the reference does for each
 * of its elements) and skipped.  out may alias r or y, and dr or dy may alias dout: a thread reads
 * its elements before it writes them, and no other thread touches them. */

__global__ void residual_forward_ref_kernel(int64_t M, int64_t H, const uint16_t *r, const uint16_t *y,
                                            const uint16_t *table, const int64_t *index, int64_t R, int64_t ld_table,
                                            int64_t gate_off, uint16_t *out, int *flag) {
    GRID_STRIDE(e, M * H) {
        const int64_t m = e / H, k = e % H;
        float v = h3k_bf2f(y[e]);
        if (table) {
            const int64_t row = h3k_index(index, m, R, flag, H3C_CODE_RESIDUAL_FORWARD);
            if (row < 0) continue;
            v = h3k_bf2f(table[row * ld_table + gate_off + k]) * v; /* exact: 8-bit x 8-bit significands */
        }
        out[e] = h3k_f2bf(h3k_bf2f(r[e]) + v);
    }
}

template <int VW>
__global__ void residual_forward_vec_kernel(int64_t M, int64_t H, const uint16_t *r, const uint16_t *y,
                                            const uint16_t *table, const int64_t *index, int64_t R, int64_t ld_table,
                                            int64_t gate_off, uint16_t *out, int *flag) {
    ROW_LOOP(m, M) {
        COL_LOOP(c, H / VW) {
            const int64_t k = c * VW, e = m * H + k;
            uint16_t rv[VW], yv[VW], tv[VW], o[VW];
            h3k_ld_bf16v<VW>(r + e, rv);
            h3k_ld_bf16v<VW>(y + e, yv);
            if (table) {
                const int64_t row = h3k_index(index, m, R, flag, H3C_CODE_RESIDUAL_FORWARD);
                if (row < 0) continue;
                h3k_ld_bf16v<VW>(table + row * ld_table + gate_off + k, tv);
            }
            float f[VW];
#pragma unroll
            for (int j = 0; j < VW; j++) {
                float v = h3k_bf2f(yv[j]);
                if (table) v = h3k_bf2f(tv[j]) * v; /* exact: 8-bit x 8-bit significands */
                f[j] = h3k_bf2f(rv[j]) + v;
            }
            h3k_f2bf_v<VW>(f, o); /* h3k_f2bf's bits, two values per cvt */
            h3k_st_bf16v<VW>(out + e, o);
        }
    }
}

template <int VW>
static void residual_forward_launch(int64_t M, int64_t H, const uint16_t *r, const uint16_t *y, const uint16_t *table,
                                    const int64_t *index, int64_t R, int64_t ld_table, int64_t gate_off,
                                    uint16_t *out) {
    const el_grid g = el_rows(M, H / VW);
    residual_forward_vec_kernel<VW>
        <<<g.grid, g.block, 0, H3K_STREAM>>>(M, H, r, y, table, index, R, ld_table, gate_off, out, h3c_error_flag());
}

extern "C" h3s_status h3c_residual_forward(const char *op, int64_t M, int64_t H, const void *r, const void *y,
                                           const void *table, const int64_t *index, int64_t R, int64_t ld_table,
                                           int64_t gate_off, void *out) {
    const uint16_t *r16 = (const uint16_t *)r, *y16 = (const uint16_t *)y, *t16 = (const uint16_t *)table;
    uint16_t *o16 = (uint16_t *)out;
    if (g_elem_reference)
        LAUNCH(residual_forward_ref_kernel, M * H, M, H, r16, y16, t16, index, R, ld_table, gate_off, o16,
               h3c_error_flag());
    if (M * H <= 0) return H3S_OK;
    const int vw = el_pick_vw(8, [&](int v) {
        return H % v == 0 && h3k_vec_aligned(r, v, 2) && h3k_vec_aligned(y, v, 2) && h3k_vec_aligned(out, v, 2) &&
               (!table || (ld_table % v == 0 && gate_off % v == 0 && h3k_vec_aligned(table, v, 2)));
    });
    switch (vw) {
    case 8: residual_forward_launch<8>(M, H, r16, y16, t16, index, R, ld_table, gate_off, o16); break;
    case 4: residual_forward_launch<4>(M, H, r16, y16, t16, index, R, ld_table, gate_off, o16); break;
    case 2: residual_forward_launch<2>(M, H, r16, y16, t16, index, R, ld_table, gate_off, o16); break;
    default: residual_forward_launch<1>(M, H, r16, y16, t16, index, R, ld_table, gate_off, o16); break;
    }
    return h3c_launch_check(op);
}

__global__ void residual_backward_ref_kernel(int64_t M, int64_t H, const uint16_t *table, const int64_t *index,
                                             int64_t R, int64_t ld_table, int64_t gate_off, const float *dout,
                                             float *dr, float *dy, uint16_t *dyb, int *flag) {
    GRID_STRIDE(e, M * H) {
        const int64_t m = e / H, k = e % H;
        const float g = dout[e];
        float gy = g;
        if (table && (dy || dyb)) {
            const int64_t row = h3k_index(index, m, R, flag, H3C_CODE_RESIDUAL_BACKWARD);
            if (row < 0) continue;
            gy = g * h3k_bf2f(table[row * ld_table + gate_off + k]);
        }
        if (dr) dr[e] = g;
        if (dy) dy[e] = gy;
        if (dyb) dyb[e] = h3k_f2bf(gy);
    }
}

template <int VW>
__global__ void residual_backward_vec_kernel(int64_t M, int64_t H, const uint16_t *table, const int64_t *index,
                                             int64_t R, int64_t ld_table, int64_t gate_off, const float *dout,
                                             float *dr, float *dy, uint16_t *dyb, int *flag) {
    ROW_LOOP(m, M) {
        COL_LOOP(c, H / VW) {
            const int64_t k = c * VW, e = m * H + k;
            float g[VW], gy[VW];
            h3k_ld_f32v<VW>(dout + e, g);
#pragma unroll
            for (int j = 0; j < VW; j++)
                gy[j] = g[j];
            if (table && (dy || dyb)) {
                const int64_t row = h3k_index(index, m, R, flag, H3C_CODE_RESIDUAL_BACKWARD);
                if (row < 0) continue;
                uint16_t tv[VW];
                h3k_ld_bf16v<VW>(table + row * ld_table + gate_off + k, tv);
#pragma unroll
                for (int j = 0; j < VW; j++)
                    gy[j] = g[j] * h3k_bf2f(tv[j]);
            }
            if (dr) h3k_st_f32v<VW>(dr + e, g);
            if (dy) h3k_st_f32v<VW>(dy + e, gy);
            if (dyb) { /* dy rounded as h3k_f2bf rounds it, for the linear backward's BF16 operands */
                uint16_t o[VW];
                h3k_f2bf_v<VW>(gy, o);
                h3k_st_bf16v<VW>(dyb + e, o);
            }
        }
    }
}

template <int VW>
static void residual_backward_launch(int64_t M, int64_t H, const uint16_t *table, const int64_t *index, int64_t R,
                                     int64_t ld_table, int64_t gate_off, const float *dout, float *dr, float *dy,
                                     uint16_t *dyb) {
    const el_grid g = el_rows(M, H / VW);
    residual_backward_vec_kernel<VW><<<g.grid, g.block, 0, H3K_STREAM>>>(M, H, table, index, R, ld_table, gate_off,
                                                                         dout, dr, dy, dyb, h3c_error_flag());
}

extern "C" h3s_status h3c_residual_backward_rows(const char *op, int64_t M, int64_t H, const void *table,
                                                 const int64_t *index, int64_t R, int64_t ld_table, int64_t gate_off,
                                                 const float *dout, float *dr, float *dy, void *dy_bf16) {
    if (!dr && !dy && !dy_bf16) return H3S_OK;
    const uint16_t *t16 = (const uint16_t *)table;
    uint16_t *dyb = (uint16_t *)dy_bf16; /* with dy NULL: the branch gradient in BF16 only */
    if (g_elem_reference)
        LAUNCH(residual_backward_ref_kernel, M * H, M, H, t16, index, R, ld_table, gate_off, dout, dr, dy, dyb,
               h3c_error_flag());
    if (M * H <= 0) return H3S_OK;
    const int vw = el_pick_vw(4, [&](int v) {
        return H % v == 0 && h3k_vec_aligned(dout, v, 4) && (!dr || h3k_vec_aligned(dr, v, 4)) &&
               (!dy || h3k_vec_aligned(dy, v, 4)) && (!dyb || h3k_vec_aligned(dyb, v, 2)) &&
               (!table || (ld_table % v == 0 && gate_off % v == 0 && h3k_vec_aligned(table, v, 2)));
    });
    switch (vw) {
    case 4: residual_backward_launch<4>(M, H, t16, index, R, ld_table, gate_off, dout, dr, dy, dyb); break;
    case 2: residual_backward_launch<2>(M, H, t16, index, R, ld_table, gate_off, dout, dr, dy, dyb); break;
    default: residual_backward_launch<1>(M, H, t16, index, R, ld_table, gate_off, dout, dr, dy, dyb); break;
    }
    return h3c_launch_check(op);
}

/* ------------------------------------------------------------------ swiglu and silu
 * The row kernels give each thread VW consecutive f of one row: value and gate chunks at
 * u[m, f] and u[m, F + f], the reference's expressions element by element. */

__global__ void swiglu_forward_ref_kernel(int64_t M, int64_t F, const uint16_t *u, uint16_t *h) {
    GRID_STRIDE(e, M * F) {
        const int64_t m = e / F, f = e % F;
        float v = h3k_bf2f(u[m * 2 * F + f]), g = h3k_bf2f(u[m * 2 * F + F + f]);
        h[e] = h3k_f2bf(v * h3k_siluf(g));
    }
}

/* SiLU of a BF16 gate through a table.  A gate is a BF16 value, so h3k_siluf(g) and h3k_silu_gradf(g) (FP64 exp
 * and division, about as many FP64 instructions per element as the kernels had cycles to spare for a whole row:
 * Nsight Compute had them issue-bound) take one of at most 65,536 values.  Before each swiglu launch a small
 * kernel evaluates both, with those same device functions, for the 8,192 gates whose magnitude lies in
 * [2^-16, 2^16) (exponent field SILU_E0 .. SILU_E0 + 31, both signs); every CTA copies the table into shared
 * memory and looks a gate up, and a gate outside that range (zero, tiny, huge, infinite, NaN) is computed
 * directly, as before.  Each element therefore gets the float the direct computation returns: the table only
 * remembers results.  test_gpu_ops runs all 65,536 gate patterns against the reference kernels. */
#define SILU_E0 111u
#define SILU_NE 32u
#define SILU_N (2 * SILU_NE * 128) /* entries: sign x exponent x 7-bit mantissa */

/* The table slot of gate bits b: the magnitude's bits minus those of the first gate in the table (below 4096 = 32
 * binades of 128 inside it), the sign above them; -1 outside the table. */
__device__ __forceinline__ int silu_slot(uint16_t b) {
    const unsigned k = ((unsigned)b & 0x7fffu) - (SILU_E0 << 7);
    return k < SILU_NE * 128 ? (int)(k | (((unsigned)b >> 3) & 0x1000u)) : -1;
}

/* tab[i] = (silu(g), silu'(g)) for the gate g of slot i (grad 0: the first only, as floats) */
__global__ void silu_table_kernel(float *tab, int grad) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (int)SILU_N; i += gridDim.x * blockDim.x) {
        const unsigned b = ((unsigned)(i >> 12) << 15) | ((SILU_E0 + (((unsigned)i >> 7) & 31u)) << 7) | (i & 127u);
        const float g = h3k_bf2f((uint16_t)b);
        if (grad) {
            tab[2 * i] = h3k_siluf(g);
            tab[2 * i + 1] = h3k_silu_gradf(g);
        } else {
            tab[i] = h3k_siluf(g);
        }
    }
}

/* Every CTA's copy of the table (n floats, 16-byte pieces) into shared memory. */
__device__ __forceinline__ void silu_table_stage(float *sm, const float *tab, int n) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
        ((float4 *)sm)[i] = ((const float4 *)tab)[i];
    __syncthreads();
}

/* A thread takes the same chunk of VW columns in the rows blockIdx.y, blockIdx.y + gridDim.y, ... and loads the next
 * row's operands before computing the current one (one row's loads in flight per thread left the kernels waiting on
 * memory, Nsight Compute); a chunk whose gates are all in the table takes the branch without FP64 code.  Each
 * element is still computed alone, by the same expression. */
/* VW consecutive BF16 values kept packed as loaded (two per 32-bit word, element j in the lower half of word j / 2
 * when j is even): the prefetched row of the SwiGLU kernels holds half the registers it would unpacked. */
template <int VW> struct bf_pack {
    uint32_t w[VW > 1 ? VW / 2 : 1];
    __device__ __forceinline__ void load(const uint16_t *p) {
        if constexpr (VW == 1) {
            w[0] = p[0];
        } else if constexpr (VW == 2) {
            w[0] = *(const uint32_t *)p;
        } else if constexpr (VW == 4) {
            const uint2 q = *(const uint2 *)p;
            w[0] = q.x, w[1] = q.y;
        } else {
            static_assert(VW == 8, "vector width");
            const uint4 q = *(const uint4 *)p;
            w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
        }
    }
    __device__ __forceinline__ uint16_t bits(int j) const {
        return (uint16_t)(j & 1 ? w[j / 2] >> 16 : w[j / 2] & 0xffffu);
    }
};

/* The table slots of a chunk's gates (-1 outside the table); 1 when every gate is in the table. */
template <int VW> __device__ __forceinline__ int silu_slots(const bf_pack<VW> &g, int (&k)[VW]) {
    int all = 1;
#pragma unroll
    for (int j = 0; j < VW; j++) {
        k[j] = silu_slot(g.bits(j));
        all &= k[j] >= 0;
    }
    return all;
}

template <int VW>
__global__ void swiglu_forward_vec_kernel(int64_t M, int64_t F, const uint16_t *u, const float *tab, uint16_t *h) {
    __shared__ __align__(16) float st[SILU_N];
    silu_table_stage(st, tab, SILU_N);
    COL_LOOP(c, F / VW) {
        const int64_t f = c * VW;
        int64_t m = blockIdx.y;
        if (m >= M) continue;
        bf_pack<VW> vv, gv, vn, gn;
        vv.load(u + m * 2 * F + f);
        gv.load(u + m * 2 * F + F + f);
#pragma unroll 1
        for (; m < M; m += gridDim.y) {
            const int64_t mn = m + gridDim.y;
            if (mn < M) {
                vn.load(u + mn * 2 * F + f);
                gn.load(u + mn * 2 * F + F + f);
            }
            int k[VW];
            const int all = silu_slots<VW>(gv, k);
            float y[VW];
            if (all) {
#pragma unroll
                for (int j = 0; j < VW; j++)
                    y[j] = h3k_bf2f(vv.bits(j)) * st[k[j]];
            } else {
#pragma unroll
                for (int j = 0; j < VW; j++)
                    y[j] = h3k_bf2f(vv.bits(j)) * (k[j] >= 0 ? st[k[j]] : h3k_siluf(h3k_bf2f(gv.bits(j))));
            }
            uint16_t o[VW];
            h3k_f2bf_v<VW>(y, o); /* h3k_f2bf's bits, two values per cvt */
            h3k_st_bf16v<VW>(h + m * F + f, o);
            vv = vn, gv = gn;
        }
    }
}

/* The row grid of el_rows with at most as many CTAs as are resident at once (each copies the table once and then
 * walks rows): which CTA computes an element changes none of its arithmetic. */
template <typename K> static el_grid silu_rows(K kernel, int64_t M, int64_t chunks, size_t smem) {
    el_grid g = el_rows(M, chunks);
    static int sms = 0, per = 0, threads = 0; /* per instantiation, for the last block size asked */
    if (threads != (int)g.block.x) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, (int)g.block.x, smem) != cudaSuccess ||
            sms < 1 || per < 1) {
            cudaGetLastError();
            threads = 0;
            return g; /* the uncapped grid: more CTAs, each copying the table */
        }
        threads = (int)g.block.x;
    }
    const int64_t cap = ((int64_t)sms * per + g.grid.x - 1) / g.grid.x;
    if ((int64_t)g.grid.y > cap) g.grid.y = (unsigned)(cap < 1 ? 1 : cap);
    return g;
}

static h3s_status silu_table(const char *op, int grad, float **tab) {
    H3S_TRY(h3c_ws_alloc(op, (size_t)SILU_N * (grad ? 2 : 1) * sizeof(float), (void **)tab));
    silu_table_kernel<<<SILU_N / 256, 256, 0, H3K_STREAM>>>(*tab, grad);
    h3s_status st = h3c_launch_check(op);
    if (st != H3S_OK) h3c_ws_free(*tab);
    return st;
}

template <int VW>
static void swiglu_forward_launch(int64_t M, int64_t F, const uint16_t *u, const float *tab, uint16_t *h) {
    const el_grid g = silu_rows(swiglu_forward_vec_kernel<VW>, M, F / VW, 0);
    swiglu_forward_vec_kernel<VW><<<g.grid, g.block, 0, H3K_STREAM>>>(M, F, u, tab, h);
}

extern "C" h3s_status h3c_swiglu_forward(const char *op, int64_t M, int64_t F, const void *u, void *h) {
    const uint16_t *u16 = (const uint16_t *)u;
    uint16_t *h16 = (uint16_t *)h;
    if (g_elem_reference) LAUNCH(swiglu_forward_ref_kernel, M * F, M, F, u16, h16);
    if (M * F <= 0) return H3S_OK;
    const int vw =
        el_pick_vw(8, [&](int v) { return F % v == 0 && h3k_vec_aligned(u, v, 2) && h3k_vec_aligned(h, v, 2); });
    float *tab = NULL;
    H3S_TRY(silu_table(op, 0, &tab));
    switch (vw) {
    case 8: swiglu_forward_launch<8>(M, F, u16, tab, h16); break;
    case 4: swiglu_forward_launch<4>(M, F, u16, tab, h16); break;
    case 2: swiglu_forward_launch<2>(M, F, u16, tab, h16); break;
    default: swiglu_forward_launch<1>(M, F, u16, tab, h16); break;
    }
    h3s_status st = h3c_launch_check(op);
    h3c_ws_free(tab);
    return st;
}

__global__ void swiglu_backward_ref_kernel(int64_t M, int64_t F, const uint16_t *u, const float *dh, float *du,
                                           uint16_t *dub) {
    GRID_STRIDE(e, M * F) {
        const int64_t m = e / F, f = e % F;
        float v = h3k_bf2f(u[m * 2 * F + f]), g = h3k_bf2f(u[m * 2 * F + F + f]);
        float d = dh[e];
        const float a = d * h3k_siluf(g), b = (d * v) * h3k_silu_gradf(g);
        if (du) {
            du[m * 2 * F + f] = a;
            du[m * 2 * F + F + f] = b;
        }
        if (dub) {
            dub[m * 2 * F + f] = h3k_f2bf(a);
            dub[m * 2 * F + F + f] = h3k_f2bf(b);
        }
    }
}

#define SILU_BWD_SMEM (SILU_N * 2 * sizeof(float)) /* (silu, silu') pairs: 64 KB */

template <int VW>
__global__ void swiglu_backward_vec_kernel(int64_t M, int64_t F, const uint16_t *u, const float *dh, const float *tab,
                                           float *du, uint16_t *dub) {
    extern __shared__ __align__(16) float st2[];
    silu_table_stage(st2, tab, 2 * SILU_N);
    const float2 *pt = (const float2 *)st2;
    COL_LOOP(c, F / VW) {
        const int64_t f = c * VW;
        int64_t m = blockIdx.y;
        if (m >= M) continue;
        bf_pack<VW> vv, gv, vn, gn;
        float dv[VW], dn[VW];
        vv.load(u + m * 2 * F + f);
        gv.load(u + m * 2 * F + F + f);
        h3k_ld_f32v<VW>(dh + m * F + f, dv);
#pragma unroll 1
        for (; m < M; m += gridDim.y) {
            const int64_t mn = m + gridDim.y;
            if (mn < M) {
                vn.load(u + mn * 2 * F + f);
                gn.load(u + mn * 2 * F + F + f);
                h3k_ld_f32v<VW>(dh + mn * F + f, dn);
            }
            int k[VW];
            const int all = silu_slots<VW>(gv, k);
            float a[VW], b[VW];
            if (all) {
#pragma unroll
                for (int j = 0; j < VW; j++) {
                    const float2 t = pt[k[j]];
                    a[j] = dv[j] * t.x;
                    b[j] = (dv[j] * h3k_bf2f(vv.bits(j))) * t.y;
                }
            } else {
#pragma unroll
                for (int j = 0; j < VW; j++) {
                    const float g = h3k_bf2f(gv.bits(j));
                    const float2 t = k[j] >= 0 ? pt[k[j]] : make_float2(h3k_siluf(g), h3k_silu_gradf(g));
                    a[j] = dv[j] * t.x;
                    b[j] = (dv[j] * h3k_bf2f(vv.bits(j))) * t.y;
                }
            }
            if (du) { /* NULL: only the BF16 copy is read (h3s_swiglu_backward_rounded) */
                h3k_st_f32v<VW>(du + m * 2 * F + f, a);
                h3k_st_f32v<VW>(du + m * 2 * F + F + f, b);
            }
            if (dub) { /* du rounded as h3k_f2bf rounds it, for the linear backward's BF16 operands */
                uint16_t ra[VW], rb[VW];
                h3k_f2bf_v<VW>(a, ra);
                h3k_f2bf_v<VW>(b, rb);
                h3k_st_bf16v<VW>(dub + m * 2 * F + f, ra);
                h3k_st_bf16v<VW>(dub + m * 2 * F + F + f, rb);
            }
            vv = vn, gv = gn;
#pragma unroll
            for (int j = 0; j < VW; j++)
                dv[j] = dn[j];
        }
    }
}

template <int VW>
static h3s_status swiglu_backward_launch(const char *op, int64_t M, int64_t F, const uint16_t *u, const float *dh,
                                         const float *tab, float *du, uint16_t *dub) {
    static int attr = 0; /* one per vector width */
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(swiglu_backward_vec_kernel<VW>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SILU_BWD_SMEM);
        if (e != cudaSuccess)
            return h3s_fail(H3S_ERR_DEVICE, "%s: cudaFuncSetAttribute: %s", op, cudaGetErrorString(e));
        attr = 1;
    }
    const el_grid g = silu_rows(swiglu_backward_vec_kernel<VW>, M, F / VW, SILU_BWD_SMEM);
    swiglu_backward_vec_kernel<VW><<<g.grid, g.block, SILU_BWD_SMEM, H3K_STREAM>>>(M, F, u, dh, tab, du, dub);
    return h3c_launch_check(op);
}

extern "C" h3s_status h3c_swiglu_backward(const char *op, int64_t M, int64_t F, const void *u, const float *dh,
                                          float *du, void *du_bf16) {
    const uint16_t *u16 = (const uint16_t *)u;
    uint16_t *dub = (uint16_t *)du_bf16;
    if (g_elem_reference) LAUNCH(swiglu_backward_ref_kernel, M * F, M, F, u16, dh, du, dub);
    if (M * F <= 0) return H3S_OK;
    const int vw = el_pick_vw(8, [&](int v) {
        return F % v == 0 && h3k_vec_aligned(u, v, 2) && h3k_vec_aligned(dh, v, 4) && h3k_vec_aligned(du, v, 4) &&
               (!dub || h3k_vec_aligned(dub, v, 2));
    });
    float *tab = NULL;
    H3S_TRY(silu_table(op, 1, &tab));
    h3s_status st;
    switch (vw) {
    case 8: st = swiglu_backward_launch<8>(op, M, F, u16, dh, tab, du, dub); break;
    case 4: st = swiglu_backward_launch<4>(op, M, F, u16, dh, tab, du, dub); break;
    case 2: st = swiglu_backward_launch<2>(op, M, F, u16, dh, tab, du, dub); break;
    default: st = swiglu_backward_launch<1>(op, M, F, u16, dh, tab, du, dub); break;
    }
    h3c_ws_free(tab);
    return st;
}

__global__ void silu_to_bf16_kernel(int64_t n, const float *t, uint16_t *a) {
    GRID_STRIDE(i, n) { a[i] = h3k_f2bf(h3k_siluf(t[i])); }
}

extern "C" h3s_status h3c_silu_to_bf16(const char *op, int64_t n, const float *temb, void *a) {
    LAUNCH(silu_to_bf16_kernel, n, n, temb, (uint16_t *)a);
}

__global__ void silu_f32_kernel(int64_t n, const float *h, float *s) {
    GRID_STRIDE(i, n) { s[i] = h3k_siluf(h[i]); }
}

extern "C" h3s_status h3c_silu_f32(const char *op, int64_t n, const float *h, float *s) {
    LAUNCH(silu_f32_kernel, n, n, h, s);
}

__global__ void mul_silu_grad_kernel(int64_t n, const float *h, float *g) {
    GRID_STRIDE(i, n) { g[i] = g[i] * h3k_silu_gradf(h[i]); }
}

extern "C" h3s_status h3c_mul_silu_grad(const char *op, int64_t n, const float *h, float *g) {
    LAUNCH(mul_silu_grad_kernel, n, n, h, g);
}

/* ------------------------------------------------------------------ timestep sinusoid
 * freq[k] = f32(exp(f32(f32(-ln 10000) * k) / half)), args = t * freq (f32), out = [cos | sin]. */

__device__ __forceinline__ float ts_freq(int64_t k, int64_t half) {
    const float neg_ln = (float)(-9.210340371976184);
    float e = neg_ln * (float)k;
    e = e / (float)half;
    return (float)exp((double)e);
}

__global__ void ts_forward_kernel(int64_t T, int64_t freq_dim, const float *t, float *out) {
    const int64_t half = freq_dim / 2;
    GRID_STRIDE(e, T * half) {
        const int64_t i = e / half, k = e % half;
        float a = t[i] * ts_freq(k, half);
        out[i * freq_dim + k] = (float)cos((double)a);
        out[i * freq_dim + half + k] = (float)sin((double)a);
    }
}

extern "C" h3s_status h3c_timestep_sinusoid_forward(const char *op, int64_t T, int64_t freq_dim, const float *t,
                                                    float *out) {
    LAUNCH(ts_forward_kernel, T * (freq_dim / 2), T, freq_dim, t, out);
}

/* dt[i] = chain over k ascending of ((dsin * cos) - (dcos * sin)) * freq, one thread per row. */
__global__ void ts_backward_kernel(int64_t T, int64_t freq_dim, const float *t, const float *dout, float *dt) {
    const int64_t half = freq_dim / 2;
    GRID_STRIDE(i, T) {
        float acc = 0.0f;
        for (int64_t k = 0; k < half; k++) {
            float f = ts_freq(k, half);
            float a = t[i] * f;
            float c = (float)cos((double)a), s = (float)sin((double)a);
            float gc = dout[i * freq_dim + k], gs = dout[i * freq_dim + half + k];
            float p_sin = gs * c, p_cos = gc * s;
            float term = (p_sin - p_cos) * f;
            acc = acc + term;
        }
        dt[i] = acc;
    }
}

extern "C" h3s_status h3c_timestep_sinusoid_backward(const char *op, int64_t T, int64_t freq_dim, const float *t,
                                                     const float *dout, float *dt) {
    LAUNCH(ts_backward_kernel, T, T, freq_dim, t, dout, dt);
}

/* ------------------------------------------------------------------ rows, add, fill */

__global__ void rows_copy_kernel(int scatter, int code, int64_t batch, int64_t n, int64_t src_rows, int64_t dst_rows,
                                 int64_t width, const void *src, int src_dt, void *dst, int dst_dt,
                                 const int64_t *index, int *flag) {
    const int64_t other = (scatter ? dst_rows : src_rows) / batch; /* rows per item of the packed side */
    GRID_STRIDE(e, batch * n * width) {
        const int64_t r = e / width, col = e % width, b = r / n, i = r % n;
        const int64_t idx = h3k_index(index, i, other, flag, code);
        if (idx < 0) continue;
        const int64_t s_off = scatter ? r * width + col : (b * other + idx) * width + col;
        const int64_t d_off = scatter ? (b * other + idx) * width + col : r * width + col;
        if (src_dt == dst_dt) {
            if (src_dt == H3S_BF16)
                ((uint16_t *)dst)[d_off] = ((const uint16_t *)src)[s_off];
            else
                ((float *)dst)[d_off] = ((const float *)src)[s_off];
        } else {
            h3k_st(dst, dst_dt, d_off, h3k_ld(src, src_dt, s_off));
        }
    }
}

extern "C" h3s_status h3c_rows_copy(const char *op, int scatter, int code, int64_t batch, int64_t n, int64_t src_rows,
                                    int64_t dst_rows, int64_t width, const void *src, int src_dt, void *dst, int dst_dt,
                                    const int64_t *index) {
    if (batch <= 0) return H3S_OK;
    LAUNCH(rows_copy_kernel, batch * n * width, scatter, code, batch, n, src_rows, dst_rows, width, src, src_dt, dst,
           dst_dt, index, h3c_error_flag());
}

/* out = a + b, or (a + b) + c when c is given (two IEEE additions in that order: the bits of two grad_adds). */
__global__ void add_f32_ref_kernel(int64_t n, const float *a, const float *b, const float *c, float *out) {
    GRID_STRIDE(i, n) { out[i] = c ? (a[i] + b[i]) + c[i] : a[i] + b[i]; }
}

template <int VW, int THREE>
__global__ void add_f32_vec_kernel(int64_t n, const float *a, const float *b, const float *c, float *out) {
    const int64_t nv = n / VW;
    GRID_STRIDE(i, nv) {
        float x[VW], y[VW], z[VW], o[VW];
        h3k_ld_f32v<VW>(a + i * VW, x);
        h3k_ld_f32v<VW>(b + i * VW, y);
        if (THREE) h3k_ld_f32v<VW>(c + i * VW, z);
#pragma unroll
        for (int j = 0; j < VW; j++)
            o[j] = THREE ? (x[j] + y[j]) + z[j] : x[j] + y[j];
        h3k_st_f32v<VW>(out + i * VW, o);
    }
    const int64_t t = nv * VW + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) out[t] = THREE ? (a[t] + b[t]) + c[t] : a[t] + b[t];
}

template <int THREE> static void add_f32_launch(int64_t n, const float *a, const float *b, const float *c, float *out) {
    if (h3k_vec_aligned(a, 4, 4) && h3k_vec_aligned(b, 4, 4) && (!THREE || h3k_vec_aligned(c, 4, 4)) &&
        h3k_vec_aligned(out, 4, 4))
        add_f32_vec_kernel<4, THREE>
            <<<h3k_blocks(n / 4 > 0 ? n / 4 : 1, EL_THREADS), EL_THREADS, 0, H3K_STREAM>>>(n, a, b, c, out);
    else
        add_f32_vec_kernel<1, THREE><<<h3k_blocks(n, EL_THREADS), EL_THREADS, 0, H3K_STREAM>>>(n, a, b, c, out);
}

extern "C" h3s_status h3c_add_f32(const char *op, int64_t n, const float *a, const float *b, const float *c,
                                  float *out) {
    if (g_elem_reference) LAUNCH(add_f32_ref_kernel, n, n, a, b, c, out);
    if (n <= 0) return H3S_OK;
    if (c)
        add_f32_launch<1>(n, a, b, c, out);
    else
        add_f32_launch<0>(n, a, b, NULL, out);
    return h3c_launch_check(op);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_random_kernel(int64_t n, uint64_t seed, float scale, void *dst, int dst_dt) {
    const uint64_t key = splitmix64(seed);
    GRID_STRIDE(i, n) {
        uint64_t h = splitmix64(key ^ splitmix64((uint64_t)i));
        float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1), exact */
        float v = (u * 2.0f - 1.0f) * 1.7320508f * scale;
        h3k_st(dst, dst_dt, i, v);
    }
}

extern "C" h3s_status h3c_fill_random(const char *op, int64_t n, uint64_t seed, float scale, void *dst, int dst_dt) {
    LAUNCH(fill_random_kernel, n, n, seed, scale, dst, dst_dt);
}

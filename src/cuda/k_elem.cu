/* Elementwise and row-wise operators on the GPU (docs/numerics/cuda.md): rope table and
 * rotation, gated residual, SwiGLU, the SiLU pieces of the AdaLN projection and the timestep
 * MLP, the timestep sinusoid, batched row gather/scatter, gradient addition, seeded fills.
 *
 * Every output element is computed by one thread from its own inputs with the CPU's formula,
 * one IEEE FP32 operation at a time (the build has --fmad=false); transcendental functions are
 * the CPU's double recipes with the device's double exp/log/sin/cos, rounded once to float.
 * Grids are grid-stride loops: the launch shape never reaches the bits. */
#include <math.h>

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

/* One thread per (row, head, slot): slots < half rotate the pair (i, half + i), reading both
 * before writing either (so out may alias in); later slots copy a pass-through channel. */
__global__ void rope_apply_kernel(int backward, int64_t M, int64_t S, int64_t heads, int64_t D, int64_t R,
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

extern "C" h3s_status h3c_rope_apply(const char *op, int backward, int64_t M, int64_t S, int64_t heads, int64_t D,
                                     int64_t R, const float *cos_t, const float *sin_t, const void *in, void *out) {
    const int64_t n = M * heads * (R / 2 + (D - R));
    LAUNCH(rope_apply_kernel, n, backward, M, S, heads, D, R, cos_t, sin_t, in, out);
}

/* ------------------------------------------------------------------ residual */

__global__ void residual_forward_kernel(int64_t M, int64_t H, const uint16_t *r, const uint16_t *y,
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

extern "C" h3s_status h3c_residual_forward(const char *op, int64_t M, int64_t H, const void *r, const void *y,
                                           const void *table, const int64_t *index, int64_t R, int64_t ld_table,
                                           int64_t gate_off, void *out) {
    LAUNCH(residual_forward_kernel, M * H, M, H, (const uint16_t *)r, (const uint16_t *)y, (const uint16_t *)table,
           index, R, ld_table, gate_off, (uint16_t *)out, h3c_error_flag());
}

__global__ void residual_backward_kernel(int64_t M, int64_t H, const uint16_t *table, const int64_t *index, int64_t R,
                                         int64_t ld_table, int64_t gate_off, const float *dout, float *dr, float *dy,
                                         int *flag) {
    GRID_STRIDE(e, M * H) {
        const int64_t m = e / H, k = e % H;
        const float g = dout[e];
        float gy = g;
        if (table && dy) {
            const int64_t row = h3k_index(index, m, R, flag, H3C_CODE_RESIDUAL_BACKWARD);
            if (row < 0) continue;
            gy = g * h3k_bf2f(table[row * ld_table + gate_off + k]);
        }
        if (dr) dr[e] = g;
        if (dy) dy[e] = gy;
    }
}

extern "C" h3s_status h3c_residual_backward_rows(const char *op, int64_t M, int64_t H, const void *table,
                                                 const int64_t *index, int64_t R, int64_t ld_table, int64_t gate_off,
                                                 const float *dout, float *dr, float *dy) {
    if (!dr && !dy) return H3S_OK;
    LAUNCH(residual_backward_kernel, M * H, M, H, (const uint16_t *)table, index, R, ld_table, gate_off, dout, dr, dy,
           h3c_error_flag());
}

/* ------------------------------------------------------------------ swiglu and silu */

__global__ void swiglu_forward_kernel(int64_t M, int64_t F, const uint16_t *u, uint16_t *h) {
    GRID_STRIDE(e, M * F) {
        const int64_t m = e / F, f = e % F;
        float v = h3k_bf2f(u[m * 2 * F + f]), g = h3k_bf2f(u[m * 2 * F + F + f]);
        h[e] = h3k_f2bf(v * h3k_siluf(g));
    }
}

extern "C" h3s_status h3c_swiglu_forward(const char *op, int64_t M, int64_t F, const void *u, void *h) {
    LAUNCH(swiglu_forward_kernel, M * F, M, F, (const uint16_t *)u, (uint16_t *)h);
}

__global__ void swiglu_backward_kernel(int64_t M, int64_t F, const uint16_t *u, const float *dh, float *du) {
    GRID_STRIDE(e, M * F) {
        const int64_t m = e / F, f = e % F;
        float v = h3k_bf2f(u[m * 2 * F + f]), g = h3k_bf2f(u[m * 2 * F + F + f]);
        float d = dh[e];
        du[m * 2 * F + f] = d * h3k_siluf(g);
        du[m * 2 * F + F + f] = (d * v) * h3k_silu_gradf(g);
    }
}

extern "C" h3s_status h3c_swiglu_backward(const char *op, int64_t M, int64_t F, const void *u, const float *dh,
                                          float *du) {
    LAUNCH(swiglu_backward_kernel, M * F, M, F, (const uint16_t *)u, dh, du);
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

__global__ void add_f32_kernel(int64_t n, const float *a, const float *b, float *out) {
    GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

extern "C" h3s_status h3c_add_f32(const char *op, int64_t n, const float *a, const float *b, float *out) {
    LAUNCH(add_f32_kernel, n, n, a, b, out);
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

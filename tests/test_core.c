/* Core: BF16 rounding, deterministic math, RNG reproducibility, SHA-256, tensor checks. */
#include <float.h>
#include <math.h>

#include "core/detmath.h"
#include "h3s_ops.h"
#include "test_util.h"

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    CHECK(h3s_bf16_round(1.0f) == 0x3f80, "1.0");
    /* 1 + 2^-8 is exactly halfway between bf16 1.0 and 1+2^-7: ties to even -> 1.0 */
    CHECK(h3s_bf16_round(1.0f + 1.0f / 256) == 0x3f80, "tie to even down");
    /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): -> 1+2^-6 */
    CHECK(h3s_bf16_round(1.0f + 3.0f / 256) == 0x3f82, "tie to even up");
    CHECK(h3s_bf16_round(1.0f + 1.0f / 256 + 1.0f / 65536) == 0x3f81, "above tie rounds up");
    CHECK(h3s_bf16_round(INFINITY) == 0x7f80, "+inf");
    CHECK(h3s_bf16_round(-INFINITY) == 0xff80, "-inf");
    CHECK(h3s_bf16_round(FLT_MAX) == 0x7f80, "FLT_MAX rounds to inf");
    uint16_t n = h3s_bf16_round(NAN);
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "NaN stays NaN (%04x)", n);
    /* a NaN whose payload lives only in the low 16 bits must not become Inf */
    uint16_t n2 = h3s_bf16_round(f32_from_bits(0x7f800001u));
    CHECK((n2 & 0x7f) != 0, "low-payload NaN stays NaN (%04x)", n2);
    CHECK(h3s_bf16_round(-0.0f) == 0x8000, "-0 kept");
    CHECK(h3s_bf16_value(0x3f80) == 1.0f, "decode 1.0");
    /* exhaustive: decode then encode is the identity on every non-NaN bf16 */
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float v = h3s_bf16_value((uint16_t)b);
        if (isnan(v)) continue;
        if (h3s_bf16_round(v) != b) bad++;
    }
    CHECK(bad == 0, "%d bf16 values do not round-trip", bad);
}

static void test_detmath(void) {
    double worst_exp = 0, worst_log = 0, worst_sin = 0, worst_cos = 0;
    for (int i = -2000; i <= 2000; i++) {
        double x = i * 0.0373;
        double e = h3s_det_exp(x), r = exp(x);
        worst_exp = fmax(worst_exp, fabs(e - r) / r);
        double s = h3s_det_sin(x * 10), c = h3s_det_cos(x * 10);
        worst_sin = fmax(worst_sin, fabs(s - sin(x * 10)));
        worst_cos = fmax(worst_cos, fabs(c - cos(x * 10)));
        if (i > 0) {
            double l = h3s_det_log(x * 7.3), lr = log(x * 7.3);
            worst_log = fmax(worst_log, fabs(l - lr) / fmax(1.0, fabs(lr)));
        }
    }
    CHECK(worst_exp < 1e-14, "exp relative error %g", worst_exp);
    CHECK(worst_log < 1e-14, "log error %g", worst_log);
    CHECK(worst_sin < 1e-13, "sin error %g", worst_sin);
    CHECK(worst_cos < 1e-13, "cos error %g", worst_cos);
    CHECK(h3s_det_exp(-1000) == 0 && isinf(h3s_det_exp(1000)), "exp range ends");
    CHECK(isnan(h3s_det_log(-1)) && isinf(h3s_det_log(0)), "log domain ends");
    CHECK(fabs(h3s_det_siluf(2.0f) - (float)(2.0 / (1.0 + exp(-2.0)))) <= 1e-7, "silu");
}

static void test_rng(void) {
    /* Philox4x32-10 known-answer vector (Random123 kat_vectors: counter 0, key 0). */
    uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0}, out[4];
    h3s_philox4x32_10(ctr, key, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u,
          "philox KAT zero: %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    uint32_t ctr2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, key2[2] = {0xa4093822u, 0x299f31d0u};
    h3s_philox4x32_10(ctr2, key2, out);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u,
          "philox KAT pi: %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    /* statistics of the normal generator */
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double v = h3s_rng_normal(42, 1, (uint64_t)i);
        s += v;
        s2 += v * v;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    CHECK(fabs(mean) < 0.01 && fabs(var - 1) < 0.02, "normal mean %g var %g", mean, var);
    /* counter-based: value i does not depend on how the range is chunked */
    float a[100], b[100];
    h3s_rng_fill_normal(7, 3, 0, 100, 1.0f, a);
    h3s_rng_fill_normal(7, 3, 40, 60, 1.0f, b + 40);
    h3s_rng_fill_normal(7, 3, 0, 40, 1.0f, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "chunked fill differs");
    CHECK(h3s_rng_normal(7, 3, 5) != h3s_rng_normal(8, 3, 5), "seed changes value");
    CHECK(h3s_rng_normal(7, 3, 5) != h3s_rng_normal(7, 4, 5), "stream changes value");
    /* A pinned value: the same bits on every machine. */
    float pinned = h3s_rng_normal(11, 0, 0);
    uint32_t pb;
    memcpy(&pb, &pinned, 4);
    printf("rng pinned value normal(11,0,0) = %.9g (0x%08x)\n", pinned, pb);
}

static void test_sha256(void) {
    char hex[65];
    CHECK_OK(h3s_sha256_hex("abc", 3, hex));
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "sha256(abc) %s", hex);
    CHECK_OK(h3s_sha256_hex("", 0, hex));
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "sha256('') %s", hex);
}

static void test_tensor_checks(void) {
    h3s_tensor t = h3t_alloc2(H3S_BF16, 3, 4);
    int64_t want[2] = {3, 5};
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_check_shape("op", "x", &t, H3S_BF16, 2, want));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_check_shape("op", "x", &t, H3S_F32, 2, want));
    CHECK(strstr(h3s_last_error(), "x") != NULL, "message names the tensor: %s", h3s_last_error());
    int64_t idxv[3] = {0, 2, 3};
    int64_t n3 = 3;
    h3s_tensor idx = h3s_tensor_view(idxv, H3S_I64, 1, &n3);
    CHECK_FAILS(H3S_ERR_INDEX, h3s_check_index("op", "index", &idx, 3));
    idxv[2] = -1;
    CHECK_FAILS(H3S_ERR_INDEX, h3s_check_index("op", "index", &idx, 3));
    idxv[2] = 1;
    CHECK_OK(h3s_check_index("op", "index", &idx, 3));
    int64_t neg[1] = {-1};
    h3s_tensor u;
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_tensor_alloc(&u, H3S_F32, 1, neg));
    /* extents that cannot be computed: numel -1 and nbytes 0, and refused by the checks and the copies (the product
     * used to wrap: 2^40 x 2^40 counted as 0 elements) */
    int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, wide[1] = {(int64_t)1 << 61}, nine[9] = {1};
    h3s_tensor big = h3s_tensor_view(t.data, H3S_BF16, 2, huge), wide8 = h3s_tensor_view(t.data, H3S_F64, 1, wide);
    CHECK(h3s_tensor_numel(&big) == -1 && h3s_tensor_nbytes(&big) == 0, "2^80 elements: numel %lld",
          (long long)h3s_tensor_numel(&big));
    CHECK(h3s_tensor_numel(&wide8) == wide[0] && h3s_tensor_nbytes(&wide8) == 0, "2^64 bytes: nbytes %zu",
          h3s_tensor_nbytes(&wide8));
    int64_t any[2] = {-1, -1};
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_check_shape("op", "x", &big, H3S_BF16, 2, any));
    CHECK(strstr(h3s_last_error(), "memory"), "overflow message: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_check_tensor("op", "x", &wide8, H3S_F64, 1));
    h3s_tensor small8 = h3t_alloc2(H3S_F64, 2, 2);
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_tensor_copy(&big, &big));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_tensor_copy(&wide8, &wide8));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_tensor_convert(&wide8, &small8));
    huge[1] = 0; /* a zero dim makes the product 0 whatever comes before */
    CHECK(h3s_tensor_numel(&big) == -1, "the view copied the shape");
    h3s_tensor zero = h3s_tensor_view(NULL, H3S_BF16, 2, huge);
    CHECK(h3s_tensor_numel(&zero) == 0 && h3s_tensor_nbytes(&zero) == 0, "2^40 x 0: numel %lld",
          (long long)h3s_tensor_numel(&zero));
    h3s_tensor r9 = h3s_tensor_view(t.data, H3S_BF16, 1, nine);
    r9.ndim = 9; /* past H3S_MAX_DIMS: never read beyond shape[] */
    CHECK(h3s_tensor_numel(&r9) == -1 && h3s_tensor_nbytes(&r9) == 0, "9 dims: numel %lld",
          (long long)h3s_tensor_numel(&r9));
    /* converting between dtypes in overlapping memory would overwrite unread values */
    h3s_tensor f32v = h3t_alloc2(H3S_F32, 2, 2);
    h3s_tensor as_bf = h3s_tensor_view(f32v.data, H3S_BF16, 2, f32v.shape);
    h3s_tensor as_f64 = h3s_tensor_view(small8.data, H3S_F64, 2, f32v.shape);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_tensor_convert(&f32v, &as_bf));
    CHECK(strstr(h3s_last_error(), "overlap"), "overlap message: %s", h3s_last_error());
    CHECK_OK(h3s_tensor_convert(&f32v, &as_f64));
    CHECK_OK(h3s_tensor_convert(&f32v, &f32v)); /* same dtype: a move, allowed */
    /* F64 -> BF16 rounds once: 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7, so it rounds up; through
     * F32 (nearest) it lands on the tie and rounds to even, down.  Also below the tie, exact ties, halfway in the
     * subnormals, above FLT_MAX and the specials. */
    {
        const double v[10] = {1.0 + 0x1p-8 + 0x1p-30,
                              -(1.0 + 0x1p-8 + 0x1p-30),
                              1.0 + 0x1p-8 - 0x1p-40,
                              1.0 + 0x1p-8,
                              1.0 + 3 * 0x1p-8,
                              0x1p-134 + 0x1p-160,
                              1e300,
                              -1e300,
                              INFINITY,
                              0.0};
        const uint16_t want16[10] = {0x3f81, 0xbf81, 0x3f80, 0x3f80, 0x3f82, 0x0001, 0x7f80, 0xff80, 0x7f80, 0x0000};
        int64_t n10 = 10;
        h3s_tensor src = h3s_tensor_view((void *)v, H3S_F64, 1, &n10), dst;
        CHECK_OK(h3s_tensor_alloc(&dst, H3S_BF16, 1, &n10));
        CHECK_OK(h3s_tensor_convert(&src, &dst));
        for (int i = 0; i < 10; i++)
            CHECK(((uint16_t *)dst.data)[i] == want16[i], "F64 %a -> BF16 0x%04x, expected 0x%04x", v[i],
                  ((uint16_t *)dst.data)[i], want16[i]);
        h3s_tensor_free(&dst);
        double nan = NAN;
        int64_t n1 = 1;
        h3s_tensor sn = h3s_tensor_view(&nan, H3S_F64, 1, &n1), dn;
        CHECK_OK(h3s_tensor_alloc(&dn, H3S_BF16, 1, &n1));
        CHECK_OK(h3s_tensor_convert(&sn, &dn));
        CHECK((((uint16_t *)dn.data)[0] & 0x7fff) > 0x7f80, "F64 NaN -> BF16 NaN: 0x%04x", ((uint16_t *)dn.data)[0]);
        h3s_tensor_free(&dn);
    }
    h3s_tensor_free(&f32v);
    h3s_tensor_free(&small8);
    h3s_tensor_free(&t);
}

/* h3s_tensor_convert's typed loops (F32 -> BF16, BF16 -> F32, F32 -> F64) give, bit for bit, what the element-wise
 * definition gives: the value widened to double (h3s_tensor_get_f64), then narrowed (to F32, then rounded to BF16).
 * Every BF16 pattern, and F32 patterns over the whole range (a stride through the 2^32 patterns, plus every NaN
 * payload boundary, infinities, zeros, subnormals and ties). */
static void test_convert_fast_paths(void) {
    enum { NF = 1 << 20 };
    int64_t nf = NF + 16, nb = 65536;
    h3s_tensor f32, f32b, bf, bfb, f64;
    CHECK_OK(h3s_tensor_alloc(&f32, H3S_F32, 1, &nf));
    CHECK_OK(h3s_tensor_alloc(&f32b, H3S_F32, 1, &nb));
    CHECK_OK(h3s_tensor_alloc(&bf, H3S_BF16, 1, &nf));
    CHECK_OK(h3s_tensor_alloc(&bfb, H3S_BF16, 1, &nb));
    CHECK_OK(h3s_tensor_alloc(&f64, H3S_F64, 1, &nf));
    uint32_t *u = f32.data;
    for (int64_t i = 0; i < NF; i++)
        u[i] = (uint32_t)(i * 4093u); /* 4093 is odd: the stride reaches every low bit pattern */
    const uint32_t special[16] = {0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0xffffffffu,
                                  0x00000001u, 0x80000001u, 0x007fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu,
                                  0x00000000u, 0x80000000u, 0x7f7fffffu, 0x7fa00000u};
    memcpy(u + NF, special, sizeof special);
    CHECK_OK(h3s_tensor_convert(&f32, &bf));
    CHECK_OK(h3s_tensor_convert(&f32, &f64));
    int64_t bad_bf = 0, bad_64 = 0, bad_f = 0;
    for (int64_t i = 0; i < nf; i++) {
        const double v = h3s_tensor_get_f64(&f32, i);
        bad_bf += ((uint16_t *)bf.data)[i] != h3s_bf16_round((float)v);
        bad_64 += memcmp(&((double *)f64.data)[i], &v, 8) != 0;
    }
    for (int64_t b = 0; b < nb; b++)
        ((uint16_t *)bfb.data)[b] = (uint16_t)b;
    CHECK_OK(h3s_tensor_convert(&bfb, &f32b));
    for (int64_t b = 0; b < nb; b++) {
        const float want = (float)h3s_tensor_get_f64(&bfb, b);
        bad_f += memcmp(&((float *)f32b.data)[b], &want, 4) != 0;
    }
    CHECK(bad_bf == 0 && bad_64 == 0 && bad_f == 0,
          "typed conversions differ from the element-wise definition: F32->BF16 %lld, F32->F64 %lld, BF16->F32 %lld",
          (long long)bad_bf, (long long)bad_64, (long long)bad_f);
    h3s_tensor_free(&f32), h3s_tensor_free(&f32b), h3s_tensor_free(&bf), h3s_tensor_free(&bfb), h3s_tensor_free(&f64);
}

/* h3s_set_num_threads(0) goes back to OpenMP's own count, whatever was set before */
static void test_threads_default(void) {
    const int def = h3s_get_num_threads();
    h3s_set_num_threads(def + 3);
    CHECK(h3s_get_num_threads() == def + 3, "set: %d", h3s_get_num_threads());
    h3s_set_num_threads(0);
    CHECK(h3s_get_num_threads() == def, "0 restores the default %d: %d", def, h3s_get_num_threads());
}

int main(void) {
    test_threads_default();
    test_bf16();
    test_convert_fast_paths();
    test_detmath();
    test_rng();
    test_sha256();
    test_tensor_checks();
    return h3t_finish("test_core");
}

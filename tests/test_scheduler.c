/* Scheduler: torch.linspace semantics, shifted sigma grids (with and without collapsed duplicates),
 * timesteps = 1 - sigma, the Euler step's data-ward plus sign and its F32 rounding points,
 * scale_noise, the condition timestep, argument validation.
 *
 * Reference bit patterns marked "torch" were produced by torch 2.11 on an x86-64 AVX512 CPU
 * (and, for scale_noise, an H200) evaluating the reference scheduler's expressions; the others are
 * derived by hand in the comments. */
#include "sample/scheduler.h"
#include "test_util.h"

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void check_sigmas(const char *what, int64_t n, float shift, const uint32_t *want, int64_t want_count) {
    float s[64];
    int64_t count = -1;
    CHECK_OK(h3s_schedule_sigmas(n, shift, s, &count));
    CHECK(count == want_count, "%s: count %lld, expected %lld", what, (long long)count, (long long)want_count);
    for (int64_t i = 0; i < count && i < want_count; i++)
        CHECK(bits(s[i]) == want[i], "%s: sigma[%lld] = %08x (%.9g), expected %08x (%.9g)", what, (long long)i,
              bits(s[i]), (double)s[i], want[i], (double)fbits(want[i]));
}

static void test_linspace(void) {
    float b[16];
    /* n = 4: step = -1/3 in f32 = -0x1.555556p-2; halfway = 2.
     * i = 0: 1;  i = 1: 1 - 0x1.555556p-2 = 0x1.555555p-1 exactly, a tie between 0x1.555554p-1 and
     * 0x1.555556p-1 that rounds to the even 0x1.555554p-1;  i = 2: 0 - step*1 = 0x1.555556p-2;  i = 3: 0. */
    h3s_torch_linspace_f32(1.0f, 0.0f, 4, b);
    CHECK(b[0] == 1.0f && b[1] == 0x1.555554p-1f && b[2] == 0x1.555556p-2f && b[3] == 0.0f,
          "linspace(1, 0, 4) = %a %a %a %a", (double)b[0], (double)b[1], (double)b[2], (double)b[3]);
    /* n = 10 (torch): element 3 is where a fused multiply-add (torch's AVX2/AVX512 kernels) and a
     * separately rounded product differ: fma(-1/9, 3, 1) = 0x1.555556p-1, while
     * 1 + round(3 * -1/9) = 0x1.555554p-1. */
    static const uint32_t want10[10] = {0x3f800000, 0x3f638e39, 0x3f471c72, 0x3f2aaaab, 0x3f0e38e4,
                                        0x3ee38e39, 0x3eaaaaab, 0x3e638e39, 0x3de38e39, 0x00000000};
    h3s_torch_linspace_f32(1.0f, 0.0f, 10, b);
    for (int i = 0; i < 10; i++)
        CHECK(bits(b[i]) == want10[i], "linspace(1, 0, 10)[%d] = %08x, torch %08x", i, bits(b[i]), want10[i]);
    float step = -1.0f / 9.0f, prod = step * 3.0f;
    CHECK(1.0f + prod != fbits(want10[3]), "the n = 10 case must separate fused from unfused evaluation");
    h3s_torch_linspace_f32(1.0f, 0.0f, 1, b);
    CHECK(b[0] == 1.0f, "linspace n = 1 gives start");
    h3s_torch_linspace_f32(1.0f, 0.0f, 2, b);
    CHECK(b[0] == 1.0f && b[1] == 0.0f, "linspace n = 2 gives the end points");
}

static void test_sigmas(void) {
    /* shift 12, n = 3: b = (1, 0.5, 0): 12*0.5 = 6, 1 + 11*0.5 = 6.5, 6/6.5 = 0.923076923 -> 0x3f6c4ec5. */
    static const uint32_t s12n3[3] = {0x3f800000, 0x3f6c4ec5, 0x00000000};
    check_sigmas("shift 12, n 3", 3, 12.0f, s12n3, 3);
    /* shift 12, n = 5: b = (1, .75, .5, .25, 0) exactly; every product and sum exact:
     * 9/9.25 = 0.972972973 -> 0x3f7914c2, 6/6.5 -> 0x3f6c4ec5, 3/3.75 = 0.8 -> 0x3f4ccccd. */
    static const uint32_t s12n5[5] = {0x3f800000, 0x3f7914c2, 0x3f6c4ec5, 0x3f4ccccd, 0x00000000};
    check_sigmas("shift 12, n 5", 5, 12.0f, s12n5, 5);
    /* shift 3, n = 5: 2.25/2.5 = 0.9 -> 0x3f666666, 1.5/2 = 0.75, 0.75/1.5 = 0.5. */
    static const uint32_t s3n5[5] = {0x3f800000, 0x3f666666, 0x3f400000, 0x3f000000, 0x00000000};
    check_sigmas("shift 3, n 5", 5, 3.0f, s3n5, 5);
    /* shift 12 and 3 at n = 10 and 30 (torch): n = 10 is the smallest grid where the fused linspace
     * changes a shift-12 sigma (element 3), n = 30 a longer grid; no duplicates. */
    static const uint32_t s12n10[10] = {0x3f800000, 0x3f7d5c60, 0x3f7a0bea, 0x3f75c28e, 0x3f700000,
                                        0x3f67d95c, 0x3f5b6db6, 0x3f46318d, 0x3f199999, 0x00000000};
    check_sigmas("shift 12, n 10", 10, 12.0f, s12n10, 10);
    static const uint32_t s3n10[10] = {0x3f800000, 0x3f75c290, 0x3f69bd39, 0x3f5b6db6, 0x3f4a1af3,
                                       0x3f34b4b5, 0x3f199999, 0x3eec4ec6, 0x3e8ba2e9, 0x00000000};
    check_sigmas("shift 3, n 10", 10, 3.0f, s3n10, 10);
    static const uint32_t s12n30[30] = {0x3f800000, 0x3f7f3d88, 0x3f7e6df0, 0x3f7d8fda, 0x3f7ca1af, 0x3f7ba1a3,
                                        0x3f7a8d9e, 0x3f79632f, 0x3f781f83, 0x3f76bf3b, 0x3f753e65, 0x3f73983f,
                                        0x3f71c71d, 0x3f6fc40f, 0x3f6d8699, 0x3f6b0432, 0x3f682fa1, 0x3f64f80d,
                                        0x3f6147ad, 0x3f5d01d8, 0x3f57ffff, 0x3f520d20, 0x3f4ade30, 0x3f420564,
                                        0x3f36db6e, 0x3f285429, 0x3f14a52a, 0x3ef0f0f0, 0x3e999999, 0x00000000};
    check_sigmas("shift 12, n 30", 30, 12.0f, s12n30, 30);
    static const uint32_t s3n30[30] = {0x3f800000, 0x3f7cfcfc, 0x3f79d4d1, 0x3f7684be, 0x3f7309ba, 0x3f6f606c,
                                       0x3f6b851f, 0x3f6773b9, 0x3f6327aa, 0x3f5e9bd3, 0x3f59ca83, 0x3f54ad4b,
                                       0x3f4f3cf4, 0x3f49714e, 0x3f434115, 0x3f3ca1ae, 0x3f3586fc, 0x3f2de305,
                                       0x3f25a5a5, 0x3f1cbc14, 0x3f131057, 0x3f088888, 0x3efa0be7, 0x3ee0c7ce,
                                       0x3ec4ec4e, 0x3ea60dd6, 0x3e83a83a, 0x3e3a2e8c, 0x3dc6318b, 0x00000000};
    check_sigmas("shift 3, n 30", 30, 3.0f, s3n30, 30);

    /* Duplicates collapse.  With shifts 12 and 3 float32 first makes two consecutive sigmas equal
     * only around n ~ 1e6 (the slope at sigma = 1 is 1/shift), so a large shift is used.
     * shift 1e7, n = 4: b = (1, 0x1.555554p-1, 0x1.555556p-2, 0).
     *  b1: s*b1 = 1e7 * 0.666666627 = 6666666.27 -> f32 (spacing 0.5) 6666666.5;
     *      (s-1)*b1 = 9999999 * 0.666666627 = 6666665.60 -> 6666665.5; + 1 = 6666666.5;
     *      ratio 1 -> equals sigma(b0) = 1: collapsed.
     *  b2: s*b2 = 3333333.43 -> 3333333.5 (spacing 0.25); (s-1)*b2 = 3333333.10 -> 3333333.0; + 1 = 3333334;
     *      3333333.5 / 3333334 = 1 - 1.4999998e-7 -> 1 - 3 * 2^-24 = 0x1.fffffap-1. */
    static const uint32_t dup4[3] = {0x3f800000, 0x3f7ffffd, 0x00000000};
    check_sigmas("shift 1e7, n 4 (one duplicate)", 4, 1e7f, dup4, 3);
    /* shift 1e8, n = 3: (s-1) rounds to s in f32, so sigma(0.5) = 5e7 / (1 + 5e7) = 5e7 / 5e7 = 1. */
    static const uint32_t dup3[2] = {0x3f800000, 0x00000000};
    check_sigmas("shift 1e8, n 3 (middle collapses)", 3, 1e8f, dup3, 2);

    /* Without duplicates: a long shift-12 grid keeps all n points, strictly decreasing from 1 to 0. */
    float s[200];
    int64_t count = 0;
    CHECK_OK(h3s_schedule_sigmas(200, H3S_VIDEO_SHIFT, s, &count));
    CHECK(count == 200, "shift 12, n 200: count %lld", (long long)count);
    int mono = 1;
    for (int64_t i = 1; i < count; i++)
        if (!(s[i] < s[i - 1])) mono = 0;
    CHECK(mono && s[0] == 1.0f && s[count - 1] == 0.0f, "shift 12 grid is strictly decreasing from 1 to 0");
    /* video sigmas lie above audio sigmas on the same grid (shift 12 > 3) */
    float a[200];
    int64_t ca = 0;
    CHECK_OK(h3s_schedule_sigmas(200, H3S_AUDIO_SHIFT, a, &ca));
    int above = ca == count;
    for (int64_t i = 1; above && i + 1 < count; i++)
        if (!(s[i] > a[i])) above = 0;
    CHECK(above, "video (shift 12) sigmas lie above audio (shift 3) sigmas");
}

static void test_timesteps(void) {
    /* shift 3, n = 5: sigmas (1, 0x3f666666, 0.75, 0.5, 0) -> t = 1 - sigma for the first four:
     * 0, 1 - 0.899999976 = 0.100000024 (exact, Sterbenz) = 0x3dccccd0, 0.25, 0.5. */
    float sig[5], t[4];
    int64_t count = 0;
    CHECK_OK(h3s_schedule_sigmas(5, 3.0f, sig, &count));
    for (int i = 0; i < 4; i++)
        t[i] = -1.0f;
    CHECK_OK(h3s_schedule_timesteps(sig, count, t));
    CHECK(t[0] == 0.0f && bits(t[1]) == 0x3dccccd0 && t[2] == 0.25f && t[3] == 0.5f, "timesteps %a %a %a %a",
          (double)t[0], (double)t[1], (double)t[2], (double)t[3]);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_timesteps(sig, 1, t));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_timesteps(NULL, 5, t));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_timesteps(sig, 5, NULL));
}

static void test_euler(void) {
    /* The plus sign.  x = 2, v = 4, t = 0.5 (sigma_t = 0.5), sigma = 1, sigma_next = 0.5 (r = 0.5):
     * x0 = 2 + 0.5*4 = 4, x_next = 0.5*2 + 0.5*4 = 3 (all exact).  A minus sign would give x0 = 0, x_next = 1. */
    float x[2] = {2.0f, -1.0f}, v[2] = {4.0f, 8.0f}, y[2] = {0, 0};
    h3s_euler_step(x, v, 2, 0.5f, 1.0f, 0.5f, y);
    CHECK(y[0] == 3.0f, "euler(2, 4, t .5, 1 -> .5) = %g, expected 3", (double)y[0]);
    /* x = -1, v = 8: x0 = -1 + 4 = 3; x_next = -0.5 + 1.5 = 1. */
    CHECK(y[1] == 1.0f, "euler(-1, 8) = %g, expected 1", (double)y[1]);
    /* terminal step: sigma_next = 0 -> r = 0 -> x_next = x0 = x + (1 - t) v */
    float z[1];
    float x1[1] = {1.5f}, v1[1] = {-2.0f};
    h3s_euler_step(x1, v1, 1, 0.75f, 0.25f, 0.0f, z);
    CHECK(z[0] == 1.0f, "terminal euler = %g, expected 1.5 - 0.25*2 = 1", (double)z[0]);
    /* in place */
    h3s_euler_step(x, v, 2, 0.5f, 1.0f, 0.5f, x);
    CHECK(x[0] == 3.0f && x[1] == 1.0f, "euler in place");

    /* Rounding points (torch, CPU): shift 12, 30-point grid, step 5: t = 1 - sigma_5 = 0x3c8bcba0,
     * sigma = 0x3f7ba1a3, sigma_next = 0x3f7a8d9e.  Elements chosen where a fused x0, a fused final
     * blend, or the algebraically equal x + (sigma_next - sigma) v would each give other bits. */
    static const uint32_t ex[8] = {0x404f830e, 0xbe8b6930, 0xbe75aad2, 0xc0855a81,
                                   0xc0a8a9ba, 0x4056b231, 0x3f4ba40b, 0xc017d602};
    static const uint32_t ev[8] = {0x40ab54a8, 0x4085007a, 0x3f3e5dc3, 0x3fc2235d,
                                   0xc0a8aa07, 0x3fa5a0ab, 0xc00b6484, 0xbff3eddc};
    static const uint32_t ep[8] = {0x4050f483, 0xbe8272bc, 0xbe7275cf, 0xc085262d,
                                   0xc0a95f94, 0x40570b7c, 0x3f494ade, 0xc0185983};
    float X[8], V[8], P[8];
    for (int i = 0; i < 8; i++) {
        X[i] = fbits(ex[i]);
        V[i] = fbits(ev[i]);
    }
    h3s_euler_step(X, V, 8, fbits(0x3c8bcba0), fbits(0x3f7ba1a3), fbits(0x3f7a8d9e), P);
    for (int i = 0; i < 8; i++)
        CHECK(bits(P[i]) == ep[i], "euler element %d: %08x, torch %08x", i, bits(P[i]), ep[i]);
}

static void test_scale_noise(void) {
    /* x0 = 2, noise = -1, t = 0.999f = 0x3f7fbe77: t*x0 = 1.99800002574920654 (exact, doubling);
     * 1 - t = 0.00099998712539673 (exact), times -1 exact; sum 1.99700003862380981 -> f32 1.99699998
     * = 0x3fff9db2. */
    float x0[1] = {2.0f}, nz[1] = {-1.0f}, y[1];
    h3s_scale_noise(x0, nz, 1, H3S_KEYFRAME_NOISE_AUG, y);
    CHECK(bits(y[0]) == 0x3fff9db2, "scale_noise(2, -1, .999) = %08x (%.9g)", bits(y[0]), (double)y[0]);
    CHECK(y[0] == h3s_scale_noise1(2.0f, -1.0f, H3S_KEYFRAME_NOISE_AUG), "scalar and array forms agree");
    /* t = 1 returns x0, t = 0 returns the noise */
    float a[2] = {0.3f, -7.0f}, b[2] = {5.0f, 2.0f}, c[2];
    h3s_scale_noise(a, b, 2, 1.0f, c);
    CHECK(c[0] == 0.3f && c[1] == -7.0f, "scale_noise t = 1");
    h3s_scale_noise(a, b, 2, 0.0f, c);
    CHECK(c[0] == 5.0f && c[1] == 2.0f, "scale_noise t = 0");
    /* Rounding points (torch, CUDA, t = 0.999): elements where a fused t*x0 + ... or x0 + (1-t)(n - x0)
     * would give other bits. */
    static const uint32_t sx[4] = {0x3ed3d57c, 0xbe91c480, 0xbf02891a, 0xbf07d096};
    static const uint32_t sn[4] = {0xbc395dd4, 0x3d30b395, 0x3f839b4a, 0xbe3d5a74};
    static const uint32_t sp[4] = {0x3ed39dc5, 0xbe919987, 0xbf02244d, 0xbf07b9ef};
    float X[4], N[4], P[4];
    for (int i = 0; i < 4; i++) {
        X[i] = fbits(sx[i]);
        N[i] = fbits(sn[i]);
    }
    h3s_scale_noise(X, N, 4, H3S_KEYFRAME_NOISE_AUG, P);
    for (int i = 0; i < 4; i++)
        CHECK(bits(P[i]) == sp[i], "scale_noise element %d: %08x, torch %08x", i, bits(P[i]), sp[i]);
}

static void test_condition_timestep(void) {
    CHECK(h3s_condition_timestep(0.0f) == H3S_KEYFRAME_NOISE_AUG, "t = 0 -> 0.999");
    CHECK(h3s_condition_timestep(0.5f) == H3S_KEYFRAME_NOISE_AUG, "t = 0.5 -> 0.999");
    CHECK(h3s_condition_timestep(0.9995f) == 0.9995f, "t = 0.9995 -> t");
    CHECK(h3s_condition_timestep(1.0f) == 1.0f, "t = 1 -> 1");
    CHECK(bits(H3S_KEYFRAME_NOISE_AUG) == 0x3f7fbe77, "0.999f");
}

static void test_validation(void) {
    float s[8];
    int64_t c = 0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(1, 12.0f, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(0, 12.0f, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(-5, 12.0f, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, 0.0f, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, -3.0f, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, NAN, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, INFINITY, s, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, 12.0f, NULL, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(5, 12.0f, s, NULL));
    /* nothing written on failure */
    c = 77;
    s[0] = 42.0f;
    h3s_schedule_sigmas(1, 12.0f, s, &c);
    CHECK(c == 77 && s[0] == 42.0f, "failed call wrote its outputs");
}

int main(void) {
    test_linspace();
    test_sigmas();
    test_timesteps();
    test_euler();
    test_scale_noise();
    test_condition_timestep();
    test_validation();
    return h3t_finish("test_scheduler");
}

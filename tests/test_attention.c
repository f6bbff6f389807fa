/* Attention: accuracy against the golden, bit-exact conformance with the documented orders
 * (docs/numerics/attention.md), repeat / batch / thread / kernel invariance, padding
 * invariance (tail document, key_valid tail and middle), queries with no key, bad input,
 * boundaries, and a long sequence (S = 4096) that runs in a fixed per-thread workspace.
 *
 * Error bounds (u = 2^-8: the unit roundoff of BF16, whose significand has 8 bits, so one
 * round-to-nearest changes a value by at most 2^-8 of itself, ~0.42 u in rel-L2 over many
 * values; e = 2^-24, the F32 unit roundoff).  The strict inputs are BF16 and are converted
 * exactly to F64 for the golden, so input rounding does not count.
 *  - out = bf16(acc / l).  The F32 part: each score is a chain of D FMAs (<= D e relative to
 *    sum_d |q k|, which moves p by <= ~2 D e here since |s| stays below ~5), exp adds e, l and
 *    acc are chains over at most S = 97 keys (<= S e relative to sum p |v|), the division e:
 *    <= (S + 2D + 3) e ~ 1.1e-5 relative to sum_j p_j |v_j| / l, which for averages of unit
 *    normals is at most ~5x |out| in L2, so <= 6e-5.  Then exactly one BF16 rounding (<= u per
 *    element).  rel-L2 <= u + 1e-4.
 *  - stats (m, l) are F32 results of the same chains: rel-L2 <= 1e-5.
 *  - dv = sum_i P_ij dout_i: no BF16 rounding enters (P and dout are F32 values), F32 chains
 *    only (<= (S + 2D + 4) e before cancellation): rel-L2 <= 1e-5.
 *  - dq, dk flow through dS = P (dP - D_i) with D_i = dout_i . out_i taken from the BF16 out,
 *    as the backward must (the forward saves out in BF16).  That single rounding enters D_i
 *    (|dD_i| <= u sum_d |dout_id out_id|) and is amplified by the cancellation in dP - D_i.
 *    So it is measured separately: the golden backward fed the same BF16 out differs from the
 *    strict one by F32 arithmetic only (chains of <= S + D terms, <= 1.2e-5 relative to the
 *    absolute terms, times the cancellation ratio |dP| / |dP - D_i| ~ 5 in L2: bound 1e-4);
 *    against the golden fed the exact F64 out the strict error must be within that inherent
 *    BF16 effect + 1e-4, and the inherent effect itself must stay below 2u (one rounding of
 *    out, <= u, amplified at most 2x by the cancellation for these unit-normal data). */
#include <math.h>

#include "core/detmath.h"
#include "cuda/cuda_ops.h"
#include "ops/ops.h"
#include "test_util.h"

/* Test hooks exported by src/ops/attention.c (not part of ops.h). */
void h3s_attention_use_portable_kernels(int on);
void h3s_attention_exp_row_for_test(const float *x, float *y, int64_t n);

#define U_BF16 (1.0 / 256.0)

typedef struct attn_case {
    int64_t B, S, H, D;
    h3s_tensor q, k, v, out, stats, dout, dq, dk, dv;
} attn_case;

static attn_case case_alloc(int64_t B, int64_t S, int64_t H, int64_t D, int golden) {
    attn_case c = {B, S, H, D, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
    h3s_dtype act = golden ? H3S_F64 : H3S_BF16, f = golden ? H3S_F64 : H3S_F32;
    int64_t sh[3] = {B * S, H, 2};
    c.q = h3t_alloc2(act, B * S, H * D);
    c.k = h3t_alloc2(act, B * S, H * D);
    c.v = h3t_alloc2(act, B * S, H * D);
    c.out = h3t_alloc2(act, B * S, H * D);
    c.stats = h3t_alloc(f, 3, sh);
    c.dout = h3t_alloc2(f, B * S, H * D);
    c.dq = h3t_alloc2(f, B * S, H * D);
    c.dk = h3t_alloc2(f, B * S, H * D);
    c.dv = h3t_alloc2(f, B * S, H * D);
    return c;
}

static void case_free(attn_case *c) {
    h3s_tensor *t[] = {&c->q, &c->k, &c->v, &c->out, &c->stats, &c->dout, &c->dq, &c->dk, &c->dv};
    for (int i = 0; i < 9; i++)
        h3s_tensor_free(t[i]);
}

static void case_fill(attn_case *c, uint64_t seed, float qscale) {
    h3t_fill_normal(&c->q, seed, qscale);
    h3t_fill_normal(&c->k, seed + 1, 1.0f);
    h3t_fill_normal(&c->v, seed + 2, 1.0f);
    h3t_fill_normal(&c->dout, seed + 3, 1.0f);
}

/* Strict (or golden) forward then backward of a case; poisons the outputs first. */
static void case_run(attn_case *c, const h3s_attn_mask *mask) {
    h3s_tensor *o[] = {&c->out, &c->stats, &c->dq, &c->dk, &c->dv};
    for (int i = 0; i < 5; i++)
        h3t_poison(o[i]);
    CHECK_OK(h3s_attention_forward(&c->q, &c->k, &c->v, c->B, c->H, mask, &c->out, &c->stats));
    CHECK_OK(h3s_attention_backward(&c->q, &c->k, &c->v, &c->out, &c->stats, c->B, c->H, mask, &c->dout, &c->dq, &c->dk,
                                    &c->dv));
}

/* n rows of every output of a (from row ra) equal those of b (from row rb), bitwise. */
static int outputs_rows_equal(const attn_case *a, int64_t ra, const attn_case *b, int64_t rb, int64_t n) {
    size_t srow = (size_t)a->H * 2 * sizeof(float);
    int st = memcmp((const char *)a->stats.data + (size_t)ra * srow, (const char *)b->stats.data + (size_t)rb * srow,
                    srow * (size_t)n) == 0;
    return st && h3t_rows_equal(&a->out, ra, &b->out, rb, n) && h3t_rows_equal(&a->dq, ra, &b->dq, rb, n) &&
           h3t_rows_equal(&a->dk, ra, &b->dk, rb, n) && h3t_rows_equal(&a->dv, ra, &b->dv, rb, n);
}

static int outputs_equal(const attn_case *a, const attn_case *b) {
    return a->B * a->S == b->B * b->S && outputs_rows_equal(a, 0, b, 0, a->B * a->S);
}

static void copy_rows(h3s_tensor *dst, int64_t rd, const h3s_tensor *src, int64_t rs, int64_t n) {
    size_t row = (size_t)src->shape[1] * h3s_dtype_size(src->dtype);
    memcpy((char *)dst->data + (size_t)rd * row, (const char *)src->data + (size_t)rs * row, row * (size_t)n);
}
static void copy_input_rows(attn_case *dst, int64_t rd, const attn_case *src, int64_t rs, int64_t n) {
    copy_rows(&dst->q, rd, &src->q, rs, n);
    copy_rows(&dst->k, rd, &src->k, rs, n);
    copy_rows(&dst->v, rd, &src->v, rs, n);
    copy_rows(&dst->dout, rd, &src->dout, rs, n);
}

static h3s_tensor doc_tensor(int64_t S, const int64_t *ids) {
    h3s_tensor d = h3t_alloc1(H3S_I64, S);
    if (S) memcpy(d.data, ids, (size_t)S * sizeof(int64_t));
    return d;
}

/* Documents of uneven lengths: ids 5, 5, ..., 9, ..., -3, ... (any values are allowed). */
static h3s_tensor doc_uneven(int64_t S) {
    h3s_tensor d = h3t_alloc1(H3S_I64, S);
    int64_t *v = (int64_t *)d.data;
    for (int64_t s = 0; s < S; s++)
        v[s] = s < S / 3 ? 5 : s < S - 7 ? 9 : -3;
    return d;
}

/* key_valid with a deterministic scatter of invalid keys (about 1 in 5). */
static h3s_tensor kv_scatter(int64_t B, int64_t S, uint64_t seed) {
    h3s_tensor t = h3t_alloc2(H3S_BOOL, B, S);
    uint8_t *v = (uint8_t *)t.data;
    for (int64_t i = 0; i < B * S; i++)
        v[i] = h3s_rng_normal(seed, 3, (uint64_t)i) > -0.85f;
    return t;
}

/* ------------------------------------------------------------------ accuracy ---------- */

static void check_accuracy(int64_t B, int64_t S, int64_t H, int64_t D, int masked, uint64_t seed) {
    attn_case c = case_alloc(B, S, H, D, 0);
    case_fill(&c, seed, 1.0f);
    h3s_tensor doc = doc_uneven(S), kv = kv_scatter(B, S, seed + 9);
    h3s_attn_mask mask = {&doc, &kv}, *mp = masked ? &mask : NULL;
    case_run(&c, mp);

    attn_case g = case_alloc(B, S, H, D, 1), gs = case_alloc(B, S, H, D, 1);
    h3s_tensor *src[] = {&c.q, &c.k, &c.v, &c.dout}, *dst[] = {&g.q, &g.k, &g.v, &g.dout},
               *dst2[] = {&gs.q, &gs.k, &gs.v, &gs.dout};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(h3s_tensor_convert(src[i], dst[i]));
        CHECK_OK(h3s_tensor_convert(src[i], dst2[i]));
    }
    case_run(&g, mp);
    /* golden backward fed the strict (BF16) out and the golden stats */
    CHECK_OK(h3s_tensor_convert(&c.out, &gs.out));
    CHECK_OK(h3s_tensor_convert(&g.stats, &gs.stats));
    CHECK_OK(
        h3s_attention_backward(&gs.q, &gs.k, &gs.v, &gs.out, &gs.stats, B, H, mp, &gs.dout, &gs.dq, &gs.dk, &gs.dv));

    double e_out = h3t_rel_l2(&c.out, &g.out), e_st = h3t_rel_l2(&c.stats, &g.stats);
    double e_dv = h3t_rel_l2(&c.dv, &g.dv);
    double e_dq_same = h3t_rel_l2(&c.dq, &gs.dq), e_dk_same = h3t_rel_l2(&c.dk, &gs.dk);
    double e_dq = h3t_rel_l2(&c.dq, &g.dq), e_dk = h3t_rel_l2(&c.dk, &g.dk);
    double inh_dq = h3t_rel_l2(&gs.dq, &g.dq), inh_dk = h3t_rel_l2(&gs.dk, &g.dk);
    printf("accuracy B=%lld S=%lld H=%lld D=%lld masked=%d: out %.3g stats %.3g dv %.3g | dq %.3g (same out %.3g, "
           "inherent %.3g) dk %.3g (same out %.3g, inherent %.3g)\n",
           (long long)B, (long long)S, (long long)H, (long long)D, masked, e_out, e_st, e_dv, e_dq, e_dq_same, inh_dq,
           e_dk, e_dk_same, inh_dk);
    CHECK(e_out <= U_BF16 + 1e-4, "out rel-L2 %g", e_out);
    CHECK(e_st <= 1e-5, "stats rel-L2 %g", e_st);
    CHECK(e_dv <= 1e-5, "dv rel-L2 %g", e_dv);
    CHECK(e_dq_same <= 1e-4, "dq vs golden on the same BF16 out: %g", e_dq_same);
    CHECK(e_dk_same <= 1e-4, "dk vs golden on the same BF16 out: %g", e_dk_same);
    CHECK(inh_dq <= 2 * U_BF16 && inh_dk <= 2 * U_BF16, "inherent BF16-out effect dq %g dk %g", inh_dq, inh_dk);
    CHECK(e_dq <= inh_dq + 1e-4, "dq rel-L2 %g (inherent %g)", e_dq, inh_dq);
    CHECK(e_dk <= inh_dk + 1e-4, "dk rel-L2 %g (inherent %g)", e_dk, inh_dk);
    case_free(&c);
    case_free(&g);
    case_free(&gs);
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv);
}

static void test_accuracy(void) {
    check_accuracy(2, 37, 3, 20, 0, 100);
    check_accuracy(2, 61, 3, 20, 1, 200);
    check_accuracy(1, 61, 1, 45, 1, 300);
}

/* ------------------------------------------------------------------ conformance ------- */

/* A plain scalar transcription of the orders in docs/numerics/attention.md. */
static int ref_allowed(const h3s_attn_mask *mk, int64_t S, int64_t b, int64_t i, int64_t j) {
    if (!mk) return 1;
    if (mk->key_valid && !((const uint8_t *)mk->key_valid->data)[b * S + j]) return 0;
    if (mk->doc && ((const int64_t *)mk->doc->data)[i] != ((const int64_t *)mk->doc->data)[j]) return 0;
    return 1;
}

static float ref_dot_bf16(const uint16_t *a, const uint16_t *b, int64_t D) {
    float acc = 0.0f;
    for (int64_t d = 0; d < D; d++)
        acc = fmaf(h3s_bf16_value(a[d]), h3s_bf16_value(b[d]), acc);
    return acc;
}
static float ref_dot_mixed(const float *a, const uint16_t *b, int64_t D) {
    float acc = 0.0f;
    for (int64_t d = 0; d < D; d++)
        acc = fmaf(a[d], h3s_bf16_value(b[d]), acc);
    return acc;
}

static void ref_forward(const attn_case *c, const h3s_attn_mask *mk, uint16_t *out, float *stats) {
    const int64_t S = c->S, H = c->H, D = c->D, W = H * D;
    const float scale = (float)(1.0 / sqrt((double)D));
    const uint16_t *q = c->q.data, *k = c->k.data, *v = c->v.data;
    float *acc = malloc((size_t)D * sizeof(float));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t ri = (b * S + i) * W + h * D;
                float m = -INFINITY, l = 0.0f;
                int any = 0;
                for (int64_t j = 0; j < S; j++) {
                    if (!ref_allowed(mk, S, b, i, j)) continue;
                    float s = ref_dot_bf16(q + ri, k + (b * S + j) * W + h * D, D) * scale;
                    if (s > m) m = s;
                    any = 1;
                }
                float *st = stats + ((b * S + i) * H + h) * 2;
                if (!any) {
                    memset(out + ri, 0, (size_t)D * 2);
                    st[0] = st[1] = 0.0f;
                    continue;
                }
                for (int64_t d = 0; d < D; d++)
                    acc[d] = 0.0f;
                for (int64_t j = 0; j < S; j++) {
                    if (!ref_allowed(mk, S, b, i, j)) continue;
                    const int64_t rj = (b * S + j) * W + h * D;
                    float p = h3s_det_expf(ref_dot_bf16(q + ri, k + rj, D) * scale - m);
                    l += p;
                    for (int64_t d = 0; d < D; d++)
                        acc[d] = fmaf(p, h3s_bf16_value(v[rj + d]), acc[d]);
                }
                for (int64_t d = 0; d < D; d++)
                    out[ri + d] = h3s_bf16_round(acc[d] / l);
                st[0] = m;
                st[1] = l;
            }
    free(acc);
}

/* P_ij and dS_ij as documented; returns 0 when query i does not take part. */
static int ref_pair(const attn_case *c, int64_t b, int64_t h, int64_t i, int64_t j, float *P, float *dS) {
    const int64_t S = c->S, H = c->H, D = c->D, W = H * D, ri = (b * S + i) * W + h * D, rj = (b * S + j) * W + h * D;
    const float scale = (float)(1.0 / sqrt((double)D));
    const float *st = (const float *)c->stats.data + ((b * S + i) * H + h) * 2, *g = (const float *)c->dout.data + ri;
    int nonzero = 0;
    for (int64_t d = 0; d < D; d++)
        nonzero |= g[d] != 0.0f;
    if (!nonzero || st[1] == 0.0f) return 0;
    float Di = ref_dot_mixed(g, (const uint16_t *)c->out.data + ri, D);
    float s = ref_dot_bf16((const uint16_t *)c->q.data + ri, (const uint16_t *)c->k.data + rj, D) * scale;
    *P = h3s_det_expf(s - st[0]) / st[1];
    *dS = *P * (ref_dot_mixed(g, (const uint16_t *)c->v.data + rj, D) - Di);
    return 1;
}

static void ref_backward(const attn_case *c, const h3s_attn_mask *mk, float *dq, float *dk, float *dv) {
    const int64_t S = c->S, H = c->H, D = c->D, W = H * D;
    const float scale = (float)(1.0 / sqrt((double)D));
    const uint16_t *q = c->q.data, *k = c->k.data;
    const float *g = c->dout.data;
    float *a = malloc((size_t)D * sizeof(float)), *a2 = malloc((size_t)D * sizeof(float)), P, dS;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t x = 0; x < S; x++) {
                const int64_t rx = (b * S + x) * W + h * D;
                for (int64_t d = 0; d < D; d++)
                    a[d] = 0.0f;
                for (int64_t j = 0; j < S; j++) /* dq of query x */
                    if (ref_allowed(mk, S, b, x, j) && ref_pair(c, b, h, x, j, &P, &dS))
                        for (int64_t d = 0; d < D; d++)
                            a[d] = fmaf(dS, h3s_bf16_value(k[(b * S + j) * W + h * D + d]), a[d]);
                for (int64_t d = 0; d < D; d++)
                    dq[rx + d] = scale * a[d];
                for (int64_t d = 0; d < D; d++)
                    a[d] = a2[d] = 0.0f;
                for (int64_t i = 0; i < S; i++) /* dk, dv of key x */
                    if (ref_allowed(mk, S, b, i, x) && ref_pair(c, b, h, i, x, &P, &dS))
                        for (int64_t d = 0; d < D; d++) {
                            a[d] = fmaf(dS, h3s_bf16_value(q[(b * S + i) * W + h * D + d]), a[d]);
                            a2[d] = fmaf(P, g[(b * S + i) * W + h * D + d], a2[d]);
                        }
                for (int64_t d = 0; d < D; d++) {
                    dk[rx + d] = scale * a[d];
                    dv[rx + d] = a2[d];
                }
            }
    free(a);
    free(a2);
}

static void check_conformance(int64_t B, int64_t S, int64_t H, int64_t D, float qscale, int masked, uint64_t seed) {
    attn_case c = case_alloc(B, S, H, D, 0), r = case_alloc(B, S, H, D, 0);
    case_fill(&c, seed, qscale);
    /* a few zero dout rows (they are skipped, as padding rows would be) */
    memset((float *)c.dout.data + 3 * H * D, 0, (size_t)(H * D) * sizeof(float));
    h3s_tensor doc = doc_uneven(S), kv = kv_scatter(B, S, seed + 5);
    h3s_attn_mask mask = {&doc, &kv}, *mp = masked ? &mask : NULL;
    for (int portable = 0; portable < 2; portable++) {
        h3s_attention_use_portable_kernels(portable);
        case_run(&c, mp);
        ref_forward(&c, mp, r.out.data, r.stats.data);
        CHECK(h3t_bitwise_equal(&c.out, &r.out) && h3t_bitwise_equal(&c.stats, &r.stats),
              "forward differs from the documented order (S=%lld D=%lld portable=%d)", (long long)S, (long long)D,
              portable);
        ref_backward(&c, mp, r.dq.data, r.dk.data, r.dv.data);
        CHECK(h3t_bitwise_equal(&c.dq, &r.dq) && h3t_bitwise_equal(&c.dk, &r.dk) && h3t_bitwise_equal(&c.dv, &r.dv),
              "backward differs from the documented order (S=%lld D=%lld portable=%d)", (long long)S, (long long)D,
              portable);
    }
    h3s_attention_use_portable_kernels(0);
    case_free(&c);
    case_free(&r);
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv);
}

static void test_conformance(void) {
    check_conformance(2, 37, 3, 20, 1.0f, 1, 11);
    check_conformance(1, 70, 2, 7, 6.0f, 1, 12);  /* D < 8: scalar tails; wide exp range */
    check_conformance(1, 45, 1, 45, 3.0f, 0, 13); /* D = 32 + 8 + 5 */
}

/* The vector exp equals h3s_det_expf everywhere, including its range ends. */
static void test_exp_row(void) {
    enum { N = 20011 };
    static float x[N], y[N];
    for (int i = 0; i < N - 11; i++)
        x[i] = -800.0f + (float)i * 0.04123f;
    const float special[11] = {NAN,        -INFINITY, INFINITY, -0.0f,  0.0f,   -708.0f,
                               -708.0001f, -103.97f,  -87.33f,  1e-30f, -1e-30f};
    memcpy(x + N - 11, special, sizeof special);
    for (int portable = 0; portable < 2; portable++) {
        h3s_attention_use_portable_kernels(portable);
        h3s_attention_exp_row_for_test(x, y, N);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float r = h3s_det_expf(x[i]);
            if (memcmp(&r, &y[i], 4) != 0 && !(isnan(r) && isnan(y[i]))) {
                if (bad < 5) fprintf(stderr, "exp(%a): %a, det_expf %a\n", x[i], y[i], r);
                bad++;
            }
        }
        CHECK(bad == 0, "%d row exp values differ from h3s_det_expf (portable=%d)", bad, portable);
    }
    h3s_attention_use_portable_kernels(0);
}

/* ------------------------------------------------------------------ invariance -------- */

static void test_repeat_and_partial(void) {
    attn_case a = case_alloc(2, 53, 3, 20, 0), b = case_alloc(2, 53, 3, 20, 0);
    case_fill(&a, 21, 1.0f);
    case_fill(&b, 21, 1.0f);
    h3s_tensor doc = doc_uneven(53), kv = kv_scatter(2, 53, 8);
    h3s_attn_mask mask = {&doc, &kv};
    case_run(&a, &mask);
    case_run(&b, &mask);
    CHECK(outputs_equal(&a, &b), "two identical calls differ");
    /* gradients requested one at a time equal the full call */
    h3s_tensor g = h3t_alloc2(H3S_F32, 2 * 53, 60);
    h3t_poison(&g);
    CHECK_OK(h3s_attention_backward(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout, NULL, &g, NULL));
    CHECK(h3t_bitwise_equal(&g, &b.dk), "dk alone differs");
    h3t_poison(&g);
    CHECK_OK(h3s_attention_backward(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout, NULL, NULL, &g));
    CHECK(h3t_bitwise_equal(&g, &b.dv), "dv alone differs");
    h3t_poison(&g);
    CHECK_OK(h3s_attention_backward(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout, &g, NULL, NULL));
    CHECK(h3t_bitwise_equal(&g, &b.dq), "dq alone differs");
    /* dv with its BF16 rounding (the value projection's operand on the GPU): dv unchanged, the copy dv rounded to
     * nearest even; the copy alone is a CUDA-backend option, refused here with nothing written */
    {
        h3s_tensor vb = h3t_alloc2(H3S_BF16, 2 * 53, 60), want = h3t_alloc2(H3S_BF16, 2 * 53, 60);
        CHECK_OK(h3s_tensor_convert(&b.dv, &want));
        h3t_poison(&g);
        CHECK_OK(h3s_attention_backward_rounded(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout, NULL, NULL,
                                                &g, &vb));
        CHECK(h3t_bitwise_equal(&g, &b.dv) && h3t_bitwise_equal(&vb, &want),
              "attention_backward_rounded on the host: dv changed or dv_bf16 is not dv rounded");
        h3t_outs oo = {{&g, &vb}, {0}};
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                              h3s_attention_backward_rounded(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout,
                                                             NULL, &g, NULL, &vb));
        h3s_tensor over = g; /* dv_bf16 over dv's bytes */
        over.dtype = H3S_BF16;
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                              h3s_attention_backward_rounded(&a.q, &a.k, &a.v, &a.out, &a.stats, 2, 3, &mask, &a.dout,
                                                             NULL, NULL, &g, &over));
        h3s_tensor_free(&vb), h3s_tensor_free(&want);
    }
    h3s_tensor_free(&g);
    case_free(&a);
    case_free(&b);
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv);
}

/* One item alone equals the same item in slot `slot` of a batch of B (other items differ). */
static void test_batch_invariance(void) {
    const int64_t S = 41, H = 3, D = 20;
    attn_case one = case_alloc(1, S, H, D, 0);
    case_fill(&one, 31, 1.0f);
    h3s_tensor doc = doc_uneven(S), kv1 = kv_scatter(1, S, 4);
    h3s_attn_mask m1 = {&doc, &kv1};
    case_run(&one, &m1);
    const int64_t Bs[3] = {3, 3, 7}, slots[3] = {0, 2, 3};
    for (int t = 0; t < 3; t++) {
        int64_t B = Bs[t], slot = slots[t];
        attn_case many = case_alloc(B, S, H, D, 0);
        case_fill(&many, 40 + (uint64_t)t, 1.0f);
        copy_input_rows(&many, slot * S, &one, 0, S);
        h3s_tensor kv = kv_scatter(B, S, 50 + (uint64_t)t);
        memcpy((uint8_t *)kv.data + slot * S, kv1.data, (size_t)S);
        h3s_attn_mask mb = {&doc, &kv};
        case_run(&many, &mb);
        CHECK(outputs_rows_equal(&one, 0, &many, slot * S, S), "item alone != item in slot %lld of B=%lld",
              (long long)slot, (long long)B);
        /* and without masks */
        case_run(&one, NULL);
        case_run(&many, NULL);
        CHECK(outputs_rows_equal(&one, 0, &many, slot * S, S), "unmasked: item alone != slot %lld of B=%lld",
              (long long)slot, (long long)B);
        case_run(&one, &m1);
        case_free(&many);
        h3s_tensor_free(&kv);
    }
    case_free(&one);
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv1);
}

static void test_threads(void) {
    const int64_t B = 2, S = 150, H = 3, D = 20;
    attn_case ref = case_alloc(B, S, H, D, 0), c = case_alloc(B, S, H, D, 0);
    case_fill(&ref, 61, 1.0f);
    case_fill(&c, 61, 1.0f);
    h3s_tensor doc = doc_uneven(S), kv = kv_scatter(B, S, 6);
    h3s_attn_mask mask = {&doc, &kv};
    h3s_set_num_threads(1);
    case_run(&ref, &mask);
    const int threads[2] = {2, 4};
    for (int t = 0; t < 2; t++) {
        h3s_set_num_threads(threads[t]);
        case_run(&c, &mask);
        CHECK(outputs_equal(&ref, &c), "%d threads differ from 1 thread", threads[t]);
    }
    /* golden too */
    attn_case g1 = case_alloc(B, S, H, D, 1), g4 = case_alloc(B, S, H, D, 1);
    h3s_tensor *src[] = {&ref.q, &ref.k, &ref.v, &ref.dout}, *d1[] = {&g1.q, &g1.k, &g1.v, &g1.dout},
               *d4[] = {&g4.q, &g4.k, &g4.v, &g4.dout};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(h3s_tensor_convert(src[i], d1[i]));
        CHECK_OK(h3s_tensor_convert(src[i], d4[i]));
    }
    h3s_set_num_threads(1);
    case_run(&g1, &mask);
    h3s_set_num_threads(4);
    case_run(&g4, &mask);
    CHECK(outputs_equal(&g1, &g4), "golden: 4 threads differ from 1 thread");
    h3s_set_num_threads(0);
    case_free(&ref);
    case_free(&c);
    case_free(&g1);
    case_free(&g4);
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv);
}

/* ------------------------------------------------------------------ padding ----------- */

/* Live rows of a padded sequence (positions pos[0..S) of Sp, per item) against the unpadded
 * sequence: every output row bitwise; padding keys get exactly zero dk, dv when they are
 * masked for every query (zero_pad_grads). */
static void check_padded(const attn_case *u, const attn_case *p, const int64_t *pos, int zero_pad_grads,
                         const char *what) {
    int bad = 0;
    for (int64_t b = 0; b < u->B; b++)
        for (int64_t s = 0; s < u->S; s++)
            bad += !outputs_rows_equal(u, b * u->S + s, p, b * p->S + pos[b * u->S + s], 1);
    CHECK(bad == 0, "%s: %d live rows differ from the unpadded sequence", what, bad);
    if (zero_pad_grads) {
        int nonzero = 0;
        const float *dk = p->dk.data, *dv = p->dv.data;
        int64_t W = p->H * p->D;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t r = 0; r < p->S; r++) {
                int live = 0;
                for (int64_t s = 0; s < u->S; s++)
                    live |= pos[b * u->S + s] == r;
                if (live) continue;
                for (int64_t x = 0; x < W; x++)
                    nonzero += dk[(b * p->S + r) * W + x] != 0.0f || dv[(b * p->S + r) * W + x] != 0.0f;
            }
        CHECK(nonzero == 0, "%s: %d dk/dv values of padding keys are not 0", what, nonzero);
    }
}

/* Padding rows masked by key_valid: kind 0 and 3 = tail, 1 = middle and front (different per
 * item), 2 = middle, the same for both items, combined with the live documents. */
static int is_pad(int kind, int64_t b, int64_t r, int64_t S) {
    static const int64_t pad0[16] = {0, 4, 8, 12, 16, 17, 18, 19, 25, 30, 31, 32, 40, 41, 44, 47};
    static const int64_t pad1[16] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 35, 36, 50, 51};
    if (kind == 0 || kind == 3) return r >= S;
    const int64_t *pads = (kind == 1 && b == 1) ? pad1 : pad0;
    for (int i = 0; i < 16; i++)
        if (pads[i] == r) return 1;
    return 0;
}

static void test_padding(void) {
    const int64_t B = 2, S = 37, H = 3, D = 20;
    attn_case u = case_alloc(B, S, H, D, 0), ud = case_alloc(B, S, H, D, 0), ut = case_alloc(B, S, H, D, 0);
    case_fill(&u, 71, 1.0f);
    case_fill(&ud, 71, 1.0f);
    /* tiny q and dout: the dk products underflow to signed zeros, so a key's dk is a zero whose
     * sign the last query decides; padding queries (after the live ones) must not flip it */
    case_fill(&ut, 70, 1e-24f);
    h3t_fill_normal(&ut.dout, 69, 1e-24f);
    int64_t ids[37];
    for (int64_t s = 0; s < S; s++)
        ids[s] = s < 20 ? 0 : 1; /* two documents in the live sequence */
    h3s_tensor udoc = doc_tensor(S, ids);
    h3s_attn_mask um = {&udoc, NULL};
    case_run(&u, NULL);
    case_run(&ud, &um);
    case_run(&ut, NULL);

    /* (a) tail padding to 64 rows tagged as document -1; padding rows carry random data and
     * non-zero dout (they cannot reach live rows). */
    {
        const int64_t Sp = 64;
        attn_case p = case_alloc(B, Sp, H, D, 0);
        case_fill(&p, 72, 1.0f);
        int64_t pids[64], pos[2 * 37];
        for (int64_t s = 0; s < Sp; s++)
            pids[s] = s < S ? ids[s] : -1;
        for (int64_t b = 0; b < B; b++) {
            copy_input_rows(&p, b * Sp, &ud, b * S, S);
            for (int64_t s = 0; s < S; s++)
                pos[b * S + s] = s;
        }
        h3s_tensor pdoc = doc_tensor(Sp, pids);
        h3s_attn_mask pm = {&pdoc, NULL};
        case_run(&p, &pm);
        check_padded(&ud, &p, pos, 0, "tail document");
        case_free(&p);
        h3s_tensor_free(&pdoc);
    }
    /* (b) key_valid padding.  Padding rows attend live keys, so their dout is 0 (their
     * outputs are never read); their q, k, v are random. */
    static const char *names[4] = {"key_valid tail", "key_valid middle", "key_valid middle + documents",
                                   "key_valid tail, underflowing gradients"};
    for (int kind = 0; kind < 4; kind++) {
        const int64_t Sp = kind == 0 || kind == 3 ? 48 : 53;
        attn_case p = case_alloc(B, Sp, H, D, 0);
        case_fill(&p, 73 + (uint64_t)kind, 1.0f);
        memset(p.dout.data, 0, h3s_tensor_nbytes(&p.dout));
        h3s_tensor kv = h3t_alloc2(H3S_BOOL, B, Sp);
        uint8_t *kvd = (uint8_t *)kv.data;
        int64_t pids[64], pos[2 * 37];
        const attn_case *ref = kind == 2 ? &ud : kind == 3 ? &ut : &u;
        for (int64_t b = 0; b < B; b++) {
            int64_t s = 0;
            for (int64_t r = 0; r < Sp; r++) {
                int pad = is_pad(kind, b, r, S);
                kvd[b * Sp + r] = (uint8_t)!pad;
                if (b == 0) pids[r] = pad ? 7 : ids[s];
                if (pad) continue;
                pos[b * S + s] = r;
                copy_input_rows(&p, b * Sp + r, ref, b * S + s, 1);
                s++;
            }
            CHECK(s == S, "padding pattern %d of item %lld keeps %lld live rows", kind, (long long)b, (long long)s);
        }
        h3s_tensor pdoc = doc_tensor(Sp, pids);
        h3s_attn_mask pm = {kind == 2 ? &pdoc : NULL, &kv};
        case_run(&p, &pm);
        check_padded(ref, &p, pos, 1, names[kind]);
        case_free(&p);
        h3s_tensor_free(&kv);
        h3s_tensor_free(&pdoc);
    }
    case_free(&u);
    case_free(&ud);
    case_free(&ut);
    h3s_tensor_free(&udoc);
}

/* ------------------------------------------------------------------ no key ------------ */

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

static void test_no_key(void) {
    const int64_t B = 2, S = 9, H = 2, D = 8, W = H * D;
    int64_t ids[9] = {0, 0, 1, 1, 1, 1, 2, 2, 2};
    h3s_tensor doc = doc_tensor(S, ids), kv = h3t_alloc2(H3S_BOOL, B, S);
    uint8_t *k = (uint8_t *)kv.data;
    for (int64_t i = 0; i < B * S; i++)
        k[i] = 1;
    k[0] = k[1] = 0; /* item 0: document 0 has no valid key */
    for (int64_t s = 0; s < S; s++)
        k[S + s] = 0; /* item 1: no valid key at all */
    h3s_attn_mask mask = {&doc, &kv};
    for (int golden = 0; golden < 2; golden++) {
        attn_case c = case_alloc(B, S, H, D, golden);
        case_fill(&c, 81, 1.0f);
        case_run(&c, &mask);
        size_t es = h3s_dtype_size(c.out.dtype), gs = h3s_dtype_size(c.dq.dtype);
        CHECK(all_zero(c.out.data, 2 * W * es), "rows without a key must output 0 (golden=%d)", golden);
        CHECK(all_zero((char *)c.out.data + S * W * es, S * W * es), "item without keys must output 0");
        CHECK(!all_zero((char *)c.out.data + 2 * W * es, W * es), "rows with keys must not be 0");
        CHECK(all_zero(c.stats.data, 2 * H * 2 * gs), "stats of rows without a key are (0, 0)");
        CHECK(all_zero(c.dq.data, 2 * W * gs) && all_zero((char *)c.dq.data + S * W * gs, S * W * gs),
              "dq of rows without a key must be 0");
        CHECK(all_zero(c.dk.data, 2 * W * gs) && all_zero(c.dv.data, 2 * W * gs), "masked keys get dk = dv = 0");
        CHECK(all_zero((char *)c.dk.data + S * W * gs, S * W * gs), "item without keys: dk = 0");
        case_free(&c);
    }
    h3s_tensor_free(&doc);
    h3s_tensor_free(&kv);
}

/* ------------------------------------------------------------------ bad input --------- */

static int poisoned(const h3s_tensor *t) {
    const unsigned char *b = t->data;
    for (size_t i = 0; i < h3s_tensor_nbytes(t); i++)
        if (b[i] != 0x7f) return 0;
    return 1;
}

static void test_bad_input(void) {
    const int64_t B = 2, S = 5, H = 3, D = 4, W = H * D;
    attn_case c = case_alloc(B, S, H, D, 0);
    case_fill(&c, 91, 1.0f);
    CHECK_OK(h3s_attention_forward(&c.q, &c.k, &c.v, B, H, NULL, &c.out, &c.stats));
    h3s_tensor doc = doc_uneven(S), kv = kv_scatter(B, S, 1);
    h3s_tensor q32 = h3t_alloc2(H3S_F32, B * S, W), k64 = h3t_alloc2(H3S_F64, B * S, W);
    h3s_tensor kshort = h3t_alloc2(H3S_BF16, B * S - 1, W), vwide = h3t_alloc2(H3S_BF16, B * S, W + 1);
    int64_t sbad[3] = {B * S, H, 1};
    h3s_tensor stats_bad = h3t_alloc(H3S_F32, 3, sbad), stats64 = h3t_alloc(H3S_F64, 3, c.stats.shape);
    h3s_tensor stats2d = h3t_alloc2(H3S_F32, B * S, H * 2), out_bad = h3t_alloc2(H3S_BF16, B * S, W - 1);
    h3s_tensor doc_short = h3t_alloc1(H3S_I64, S - 1), doc_f64 = h3t_alloc1(H3S_F64, S);
    h3s_tensor kv_i64 = h3t_alloc2(H3S_I64, B, S), kv_wide = h3t_alloc2(H3S_BOOL, B, S + 1),
               kv_one = h3t_alloc2(H3S_BOOL, 1, S), kv_flat = h3t_alloc1(H3S_BOOL, B * S);
    h3s_tensor dout_bf = h3t_alloc2(H3S_BF16, B * S, W), dq_bad = h3t_alloc2(H3S_F32, B * S, W + 3),
               dk64 = h3t_alloc2(H3S_F64, B * S, W);
    h3s_tensor out = h3t_alloc2(H3S_BF16, B * S, W), st = h3t_alloc(H3S_F32, 3, c.stats.shape);
    h3s_tensor dq = h3t_alloc2(H3S_F32, B * S, W), dk = h3t_alloc2(H3S_F32, B * S, W),
               dv = h3t_alloc2(H3S_F32, B * S, W);
    h3s_attn_mask m_ok = {&doc, &kv}, m_doc_short = {&doc_short, NULL}, m_doc_f64 = {&doc_f64, NULL},
                  m_kv_i64 = {NULL, &kv_i64}, m_kv_wide = {NULL, &kv_wide}, m_kv_one = {NULL, &kv_one},
                  m_kv_flat = {NULL, &kv_flat};
    h3t_poison(&out);
    h3t_poison(&st);
    h3t_poison(&dq);
    h3t_poison(&dk);
    h3t_poison(&dv);

#define FWD(qq, kk, vv, bb, hh, mm, oo, ss) h3s_attention_forward(qq, kk, vv, bb, hh, mm, oo, ss)
    CHECK_FAILS(H3S_ERR_INVALID, FWD(NULL, &c.k, &c.v, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, NULL, &c.v, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, NULL, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, B, H, NULL, NULL, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, B, H, NULL, &out, NULL));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&q32, &c.k, &c.v, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&c.q, &k64, &c.v, B, H, NULL, &out, &st)); /* mixed golden / strict */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&c.q, &c.k, &c.v, B, H, NULL, &out, &stats64));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &kshort, &c.v, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &vwide, B, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, NULL, &out_bad, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, NULL, &out, &stats_bad));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, NULL, &out, &stats2d));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, 5, NULL, &out, &st)); /* 5 does not divide 12 */
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, 3, H, NULL, &out, &st)); /* 3 does not divide 10 rows */
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, B, 0, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, B, -3, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, 0, H, NULL, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, &m_doc_short, &out, &st));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&c.q, &c.k, &c.v, B, H, &m_doc_f64, &out, &st));
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&c.q, &c.k, &c.v, B, H, &m_kv_i64, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, &m_kv_wide, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, &m_kv_one, &out, &st));
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, &m_kv_flat, &out, &st));
    /* the doc is per position, so with B = 2 a doc of length B * S is wrong */
    h3s_tensor doc_long = h3t_alloc1(H3S_I64, B * S);
    h3s_attn_mask m_doc_long = {&doc_long, NULL};
    CHECK_FAILS(H3S_ERR_SHAPE, FWD(&c.q, &c.k, &c.v, B, H, &m_doc_long, &out, &st));
    /* an output aliasing an input */
    h3s_tensor alias = h3s_tensor_view(c.k.data, H3S_BF16, 2, c.k.shape);
    CHECK_FAILS(H3S_ERR_INVALID, FWD(&c.q, &c.k, &c.v, B, H, NULL, &alias, &st));
    /* a device tensor among host tensors; all on the device goes to CUDA (absent here) */
    h3s_tensor qd = c.q;
    qd.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, FWD(&qd, &c.k, &c.v, B, H, NULL, &out, &st));
    CHECK(poisoned(&out) && poisoned(&st), "failed forward calls wrote an output");

#define BWD(oo, ss, gg, a, b2, c2) h3s_attention_backward(&c.q, &c.k, &c.v, oo, ss, B, H, &m_ok, gg, a, b2, c2)
    CHECK_FAILS(H3S_ERR_INVALID, BWD(NULL, &c.stats, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&c.out, NULL, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&c.out, &c.stats, NULL, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&c.out, &c.stats, &dout_bf, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&c.out, &stats64, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_DTYPE, BWD(&c.out, &c.stats, &c.dout, &dq, &dk64, &dv));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&c.out, &c.stats, &c.dout, &dq_bad, &dk, &dv));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&out_bad, &c.stats, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_SHAPE, BWD(&c.out, &stats_bad, &c.dout, &dq, &dk, &dv));
    h3s_tensor dqa = h3s_tensor_view(c.dout.data, H3S_F32, 2, c.dout.shape);
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&c.out, &c.stats, &c.dout, &dqa, &dk, &dv));
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&c.out, &c.stats, &c.dout, &dq, &dq, &dv)); /* two outputs in one buffer */
    CHECK_FAILS(H3S_ERR_SHAPE,
                h3s_attention_backward(&c.q, &c.k, &c.v, &c.out, &c.stats, B, H, &m_doc_short, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_DTYPE,
                h3s_attention_backward(&c.q, &c.k, &c.v, &c.out, &c.stats, B, H, &m_kv_i64, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_SHAPE,
                h3s_attention_backward(&c.q, &c.k, &c.v, &c.out, &c.stats, B, 5, &m_ok, &c.dout, &dq, &dk, &dv));
    CHECK_FAILS(H3S_ERR_SHAPE,
                h3s_attention_backward(&c.q, &c.k, &c.v, &c.out, &c.stats, 3, H, NULL, &c.dout, &dq, &dk, &dv));
    h3s_tensor dvd = dv;
    dvd.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, BWD(&c.out, &c.stats, &c.dout, &dq, &dk, &dvd));
    CHECK(poisoned(&dq) && poisoned(&dk) && poisoned(&dv), "failed backward calls wrote a gradient");

    /* every tensor on the device goes to the CUDA backend: without one, a clear device error
     * (with one, these host buffers must not be handed to it) */
    if (!h3s_cuda_available()) {
        attn_case cd = c;
        h3s_tensor *dev[] = {&cd.q, &cd.k, &cd.v, &cd.out, &cd.stats};
        for (int i = 0; i < 5; i++)
            dev[i]->device = 1;
        CHECK_FAILS(H3S_ERR_DEVICE, FWD(&cd.q, &cd.k, &cd.v, B, H, NULL, &cd.out, &cd.stats));
    }

    /* golden calls with a strict tensor among them */
    attn_case g = case_alloc(B, S, H, D, 1);
    h3t_poison(&g.out);
    h3t_poison(&g.dq);
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.q, &g.k, &g.v, B, H, NULL, &g.out, &st)); /* F32 stats */
    CHECK_FAILS(H3S_ERR_DTYPE, FWD(&g.q, &g.k, &c.v, B, H, NULL, &g.out, &g.stats));
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_attention_backward(&g.q, &g.k, &g.v, &g.out, &g.stats, B, H, NULL, &c.dout, &g.dq,
                                                      NULL, NULL)); /* F32 dout */
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_attention_backward(&g.q, &g.k, &g.v, &g.out, &g.stats, B, H, NULL, &g.dout, &g.dq,
                                                      &dk, NULL)); /* F32 dk */
    CHECK(poisoned(&g.out) && poisoned(&g.dq), "failed golden calls wrote an output");
    case_free(&g);

    h3s_tensor *fr[] = {&doc,     &kv,        &q32,     &k64,    &kshort,  &vwide,  &stats_bad, &stats64, &stats2d,
                        &out_bad, &doc_short, &doc_f64, &kv_i64, &kv_wide, &kv_one, &kv_flat,   &dout_bf, &dq_bad,
                        &dk64,    &out,       &st,      &dq,     &dk,      &dv,     &doc_long};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        h3s_tensor_free(fr[i]);
    case_free(&c);
#undef FWD
#undef BWD
}

/* ------------------------------------------------------------------ boundaries -------- */

static void test_boundaries(void) {
    /* S = 1: every query attends only itself: out = v, dv = dout, dq = dk = 0 exactly. */
    attn_case c = case_alloc(3, 1, 2, 20, 0);
    case_fill(&c, 101, 1.0f);
    case_run(&c, NULL);
    CHECK(h3t_bitwise_equal(&c.out, &c.v), "S = 1: out must equal v");
    CHECK(h3t_bitwise_equal(&c.dv, &c.dout), "S = 1: dv must equal dout");
    CHECK(all_zero(c.dq.data, h3s_tensor_nbytes(&c.dq)) && all_zero(c.dk.data, h3s_tensor_nbytes(&c.dk)),
          "S = 1: dq = dk = 0");
    float *st = c.stats.data;
    CHECK(st[1] == 1.0f, "S = 1: l = 1 (got %g)", st[1]);
    case_free(&c);

    /* zero rows (B = 1 and B = 3), with a zero-length doc and [B, 0] key_valid */
    for (int golden = 0; golden < 2; golden++) {
        const int64_t Bs[2] = {1, 3};
        for (int t = 0; t < 2; t++) {
            attn_case z = case_alloc(Bs[t], 0, 2, 8, golden);
            h3s_tensor doc = h3t_alloc1(H3S_I64, 0), kv = h3t_alloc2(H3S_BOOL, Bs[t], 0);
            h3s_attn_mask m = {&doc, &kv};
            CHECK_OK(h3s_attention_forward(&z.q, &z.k, &z.v, Bs[t], 2, &m, &z.out, &z.stats));
            CHECK_OK(
                h3s_attention_backward(&z.q, &z.k, &z.v, &z.out, &z.stats, Bs[t], 2, &m, &z.dout, &z.dq, &z.dk, &z.dv));
            case_free(&z);
            h3s_tensor_free(&doc);
            h3s_tensor_free(&kv);
        }
    }
    /* S not a multiple of any tile, single head of odd width, golden and strict agree */
    attn_case o = case_alloc(1, 97, 1, 37, 0);
    case_fill(&o, 102, 1.0f);
    case_run(&o, NULL);
    attn_case og = case_alloc(1, 97, 1, 37, 1);
    CHECK_OK(h3s_tensor_convert(&o.q, &og.q));
    CHECK_OK(h3s_tensor_convert(&o.k, &og.k));
    CHECK_OK(h3s_tensor_convert(&o.v, &og.v));
    CHECK_OK(h3s_tensor_convert(&o.dout, &og.dout));
    case_run(&og, NULL);
    CHECK(h3t_rel_l2(&o.out, &og.out) <= U_BF16 + 1e-4, "S = 97, D = 37: out rel-L2 %g", h3t_rel_l2(&o.out, &og.out));
    CHECK(h3t_rel_l2(&o.dv, &og.dv) <= 1e-5, "S = 97, D = 37: dv rel-L2 %g", h3t_rel_l2(&o.dv, &og.dv));
    case_free(&o);
    case_free(&og);
}

/* A long sequence: S = 4096 runs in the fixed per-thread workspace (no S x S buffer). */
static void test_long_sequence(void) {
    const int64_t S = 4096, D = 16;
    h3s_tensor q = h3t_alloc2(H3S_BF16, S, D), k = h3t_alloc2(H3S_BF16, S, D), v = h3t_alloc2(H3S_BF16, S, D);
    h3s_tensor out = h3t_alloc2(H3S_BF16, S, D);
    int64_t sh[3] = {S, 1, 2};
    h3s_tensor st = h3t_alloc(H3S_F32, 3, sh);
    h3t_fill_normal(&q, 111, 1.0f);
    h3t_fill_normal(&k, 112, 1.0f);
    h3t_fill_normal(&v, 113, 1.0f);
    CHECK_OK(h3s_attention_forward(&q, &k, &v, 1, 1, NULL, &out, &st));
    const float *s = st.data;
    int finite = 1;
    for (int64_t i = 0; i < S; i++)
        finite &= isfinite(s[2 * i]) && s[2 * i + 1] >= 1.0f;
    CHECK(finite, "S = 4096: stats must be finite with l >= 1");
    h3s_tensor *fr[] = {&q, &k, &v, &out, &st};
    for (int i = 0; i < 5; i++)
        h3s_tensor_free(fr[i]);
}

int main(void) {
    test_exp_row();
    test_conformance();
    test_accuracy();
    test_repeat_and_partial();
    test_batch_invariance();
    test_threads();
    test_padding();
    test_no_key();
    test_bad_input();
    test_boundaries();
    test_long_sequence();
    return h3t_finish("test_attention");
}

/* Gated and plain residual (h3s_residual_*) and gradient accumulation (h3s_grad_add).
 *
 * Error bounds.  BF16 has p = 8 significand bits: one round-to-nearest has unit roundoff
 * u_bf16 = 2^-8 (every element's relative error at most u_bf16, hence rel-L2 at most u_bf16;
 * RMS about 0.4 u_bf16 for random data).  FP32: u_f32 = 2^-24.  Strict and golden read the
 * same BF16 inputs (exact F64 copies), so gradients carry FP32 roundings only. */
#include "ops/fold.h"
#include "ops/ops.h"
#include "test_util.h"

#define U_BF16 (1.0 / 256.0)
#define U_F32 (1.0 / 16777216.0)
/* out = bf16(r + g*y): g*y is exact in FP32 (8-bit x 8-bit significands), the FP32 sum adds
 * u_f32, then one BF16 rounding: u_bf16 + u_f32 per element. */
#define BOUND_OUT (U_BF16 + 2 * U_F32)
/* dy = dout * g: one FP32 rounding, at most u_f32 per element. */
#define BOUND_DY (1.0001 * U_F32)
/* dtable gate chunk: each contribution dout*y carries u_f32; a fold of n <= 60 rows adds at
 * most (n - 1) u_f32 sum |c| ~ (n - 1) sqrt(n) u_f32 |sum c| for zero-mean random terms:
 * 60 * 8 * 6e-8 = 2.9e-5 -> 1e-4. */
#define BOUND_FOLD 1e-4
/* Only golden values within ~u_f32 of a BF16 tie can round differently (see test_rmsnorm). */
#define MIN_CORRECTLY_ROUNDED 0.99

static h3s_tensor make_index(int64_t M, int64_t R, uint64_t seed) {
    h3s_tensor t = h3t_alloc1(H3S_I64, M);
    for (int64_t m = 0; m < M; m++) {
        uint64_t h = (uint64_t)m * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        ((int64_t *)t.data)[m] = (int64_t)(h % (uint64_t)R);
    }
    return t;
}

/* ---------------------------------------------------------------- a residual problem */

enum { C_CHUNKS = 6, GATE = 5 }; /* gate_mlp: the last chunk of the block table */

typedef struct res_case {
    int gated;
    int64_t M, H, R;
    h3s_tensor r, y, table, index, dout;
} res_case;

static void case_init(res_case *c, int gated, int64_t M, int64_t H, int64_t R, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->gated = gated;
    c->M = M;
    c->H = H;
    c->R = R;
    c->r = h3t_normal2(H3S_BF16, M, H, seed, 2.0f);
    c->y = h3t_normal2(H3S_BF16, M, H, seed + 1, 1.0f);
    c->dout = h3t_normal2(H3S_F32, M, H, seed + 2, 1.0f);
    if (gated) {
        c->table = h3t_normal2(H3S_BF16, R, C_CHUNKS * H, seed + 3, 0.7f);
        c->index = make_index(M, R, seed + 4);
    }
}

static void case_free(res_case *c) {
    h3s_tensor *ts[5] = {&c->r, &c->y, &c->table, &c->index, &c->dout};
    for (int i = 0; i < 5; i++)
        h3s_tensor_free(ts[i]);
}

typedef struct res_result {
    h3s_tensor out, dr, dy, dtable;
} res_result;

static void result_free(res_result *r) {
    h3s_tensor_free(&r->out);
    h3s_tensor_free(&r->dr);
    h3s_tensor_free(&r->dy);
    h3s_tensor_free(&r->dtable);
}

/* dtable is poisoned before the call so untouched chunks can be checked afterwards. */
static void case_run(const res_case *c, int golden, res_result *o) {
    h3s_tensor r = c->r, y = c->y, table = c->table, dout = c->dout;
    if (golden) {
        r = h3t_to_f64(&c->r);
        y = h3t_to_f64(&c->y);
        dout = h3t_to_f64(&c->dout);
        if (c->gated) table = h3t_to_f64(&c->table);
    }
    h3s_dtype g = golden ? H3S_F64 : H3S_F32;
    memset(o, 0, sizeof *o);
    o->out = h3t_alloc2(golden ? H3S_F64 : H3S_BF16, c->M, c->H);
    o->dr = h3t_alloc2(g, c->M, c->H);
    o->dy = h3t_alloc2(g, c->M, c->H);
    const h3s_tensor *tp = c->gated ? &table : NULL, *ip = c->gated ? &c->index : NULL;
    h3s_tensor *dtp = NULL;
    if (c->gated) {
        o->dtable = h3t_alloc2(g, c->R, C_CHUNKS * c->H);
        h3t_poison(&o->dtable);
        dtp = &o->dtable;
    }
    CHECK_OK(h3s_residual_forward(&r, &y, tp, ip, GATE, &o->out));
    CHECK_OK(h3s_residual_backward(&y, tp, ip, GATE, &dout, &o->dr, &o->dy, dtp));
    if (golden) {
        h3s_tensor_free(&r);
        h3s_tensor_free(&y);
        h3s_tensor_free(&dout);
        if (c->gated) h3s_tensor_free(&table);
    }
}

static int results_equal(const res_result *a, const res_result *b, int gated) {
    int ok =
        h3t_bitwise_equal(&a->out, &b->out) && h3t_bitwise_equal(&a->dr, &b->dr) && h3t_bitwise_equal(&a->dy, &b->dy);
    return gated ? ok && h3t_bitwise_equal(&a->dtable, &b->dtable) : ok;
}

/* ---------------------------------------------------------------- 1. accuracy ------- */

static void check_accuracy(int gated, int64_t M, int64_t H) {
    res_case c;
    res_result s, g;
    case_init(&c, gated, M, H, 4, 10 + (uint64_t)H + (uint64_t)gated);
    case_run(&c, 0, &s);
    case_run(&c, 1, &g);
    const char *kn = gated ? "gated" : "plain";
    char what[96];
    snprintf(what, sizeof what, "%s M=%lld H=%lld out", kn, (long long)M, (long long)H);
    double e = h3t_measured(what, h3t_rel_l2(&s.out, &g.out), BOUND_OUT);
    CHECK(e <= BOUND_OUT, "%s M=%lld H=%lld: out rel-L2 %.3g", kn, (long long)M, (long long)H, e);
    double f = h3t_frac_correctly_rounded(&s.out, &g.out);
    CHECK(f >= MIN_CORRECTLY_ROUNDED, "%s H=%lld: only %.4f of out correctly rounded", kn, (long long)H, f);
    /* dr is dout itself: exact. */
    CHECK(h3t_bitwise_equal(&s.dr, &c.dout), "%s: dr is not a copy of dout", kn);
    CHECK(h3t_rel_l2(&s.dr, &g.dr) == 0, "%s: dr differs from golden", kn);
    if (gated) {
        snprintf(what, sizeof what, "%s M=%lld H=%lld dy", kn, (long long)M, (long long)H);
        e = h3t_measured(what, h3t_rel_l2(&s.dy, &g.dy), BOUND_DY);
        CHECK(e <= BOUND_DY, "%s M=%lld H=%lld: dy rel-L2 %.3g", kn, (long long)M, (long long)H, e);
        h3s_tensor a = h3t_columns(&s.dtable, GATE * H, H), b = h3t_columns(&g.dtable, GATE * H, H);
        snprintf(what, sizeof what, "%s M=%lld H=%lld dtable gate", kn, (long long)M, (long long)H);
        e = h3t_measured(what, h3t_rel_l2(&a, &b), BOUND_FOLD);
        CHECK(e <= BOUND_FOLD, "%s M=%lld H=%lld: dtable gate rel-L2 %.3g", kn, (long long)M, (long long)H, e);
        h3s_tensor_free(&a);
        h3s_tensor_free(&b);
        /* chunks other than the gate keep the poison */
        int64_t kept_bad = 0;
        for (int64_t i = 0; i < c.R * C_CHUNKS * H; i++) {
            if ((i % (C_CHUNKS * H)) / H == GATE) continue;
            kept_bad += ((uint32_t *)s.dtable.data)[i] != 0x7f7f7f7fu;
        }
        CHECK(kept_bad == 0, "%s: %lld non-gate dtable entries were written", kn, (long long)kept_bad);
    } else {
        CHECK(h3t_bitwise_equal(&s.dy, &c.dout), "plain: dy is not a copy of dout");
    }
    result_free(&s);
    result_free(&g);
    case_free(&c);
}

/* The documented formula, evaluated here, gives the library's bits. */
static void check_documented_formula(void) {
    const int64_t M = 600, H = 70, R = 5;
    res_case c;
    res_result s;
    case_init(&c, 1, M, H, R, 4040);
    case_run(&c, 0, &s);
    const int64_t *idx = (const int64_t *)c.index.data;
    float *contrib = malloc(sizeof(float) * (size_t)(M * H));
    int64_t bad_out = 0, bad_dy = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < H; k++) {
            int64_t i = m * H + k;
            float g = h3s_tensor_get_f64(&c.table, idx[m] * C_CHUNKS * H + GATE * H + k);
            float r = h3s_tensor_get_f64(&c.r, i), y = h3s_tensor_get_f64(&c.y, i);
            float d = ((float *)c.dout.data)[i];
            bad_out += ((uint16_t *)s.out.data)[i] != h3s_bf16_round(r + g * y);
            float dy = d * g;
            bad_dy += memcmp(&dy, (float *)s.dy.data + i, 4) != 0;
            contrib[i] = d * y;
        }
    CHECK(bad_out == 0, "%lld out elements differ from bf16(r + g*y)", (long long)bad_out);
    CHECK(bad_dy == 0, "%lld dy elements differ from dout*g", (long long)bad_dy);
    float *ref = malloc(sizeof(float) * (size_t)(R * C_CHUNKS * H));
    h3s_fold_indexed_f32(contrib, idx, M, H, H, R, ref + GATE * H, C_CHUNKS * H);
    int64_t bad_t = 0;
    for (int64_t r = 0; r < R; r++)
        bad_t += memcmp(ref + r * C_CHUNKS * H + GATE * H, (float *)s.dtable.data + r * C_CHUNKS * H + GATE * H,
                        sizeof(float) * (size_t)H) != 0;
    CHECK(bad_t == 0, "%lld dtable gate rows are not the canonical indexed fold of dout*y", (long long)bad_t);
    free(contrib);
    free(ref);
    result_free(&s);
    case_free(&c);
}

/* ---------------------------------------------------------------- 2-5. invariance --- */

static void check_repeat(int gated) {
    res_case c;
    res_result a, b;
    case_init(&c, gated, 300, 60, 4, 77);
    h3s_set_num_threads(2);
    case_run(&c, 0, &a);
    case_run(&c, 0, &b);
    h3s_set_num_threads(1);
    CHECK(results_equal(&a, &b, gated), "%s: two identical calls differ", gated ? "gated" : "plain");
    result_free(&a);
    result_free(&b);
    case_free(&c);
}

static void copy_row(const res_case *src, int64_t from, res_case *dst, int64_t to) {
    int64_t H = src->H;
    memcpy((uint16_t *)dst->r.data + to * H, (uint16_t *)src->r.data + from * H, 2 * (size_t)H);
    memcpy((uint16_t *)dst->y.data + to * H, (uint16_t *)src->y.data + from * H, 2 * (size_t)H);
    memcpy((float *)dst->dout.data + to * H, (float *)src->dout.data + from * H, 4 * (size_t)H);
    if (src->gated) ((int64_t *)dst->index.data)[to] = ((int64_t *)src->index.data)[from];
}

static void check_row_invariance(int gated) {
    res_case big, mid, one;
    case_init(&big, gated, 300, 60, 4, 31);
    case_init(&mid, gated, 7, 60, 4, 32);
    case_init(&one, gated, 1, 60, 4, 33);
    if (gated) {
        memcpy(mid.table.data, big.table.data, h3s_tensor_nbytes(&big.table));
        memcpy(one.table.data, big.table.data, h3s_tensor_nbytes(&big.table));
    }
    copy_row(&big, 211, &mid, 3);
    copy_row(&big, 211, &one, 0);
    res_result rb, rm, r1;
    case_run(&big, 0, &rb);
    case_run(&mid, 0, &rm);
    case_run(&one, 0, &r1);
    const char *kn = gated ? "gated" : "plain";
    CHECK(h3t_rows_equal(&rb.out, 211, &rm.out, 3, 1) && h3t_rows_equal(&rb.out, 211, &r1.out, 0, 1),
          "%s: out row depends on M or position", kn);
    CHECK(h3t_rows_equal(&rb.dy, 211, &rm.dy, 3, 1) && h3t_rows_equal(&rb.dy, 211, &r1.dy, 0, 1),
          "%s: dy row depends on M or position", kn);
    CHECK(h3t_rows_equal(&rb.dr, 211, &rm.dr, 3, 1) && h3t_rows_equal(&rb.dr, 211, &r1.dr, 0, 1),
          "%s: dr row depends on M or position", kn);
    result_free(&rb);
    result_free(&rm);
    result_free(&r1);
    case_free(&big);
    case_free(&mid);
    case_free(&one);
}

/* Item 0 of B = 3 (rows [0, S), gate rows by the shared layout index) equals B = 1. */
static void check_batch_invariance(void) {
    const int64_t S = 40, H = 60, R = 6;
    res_case one, three;
    case_init(&one, 1, S, H, R, 300);
    case_init(&three, 1, 3 * S, H, R, 400);
    memcpy(three.table.data, one.table.data, h3s_tensor_nbytes(&one.table));
    for (int64_t b = 0; b < 3; b++)
        for (int64_t s = 0; s < S; s++) {
            if (b == 0) copy_row(&one, s, &three, s);
            ((int64_t *)three.index.data)[b * S + s] = ((int64_t *)one.index.data)[s];
        }
    res_result r1, r3;
    case_run(&one, 0, &r1);
    case_run(&three, 0, &r3);
    CHECK(h3t_rows_equal(&r1.out, 0, &r3.out, 0, S), "out of item 0 in B=3 != B=1");
    CHECK(h3t_rows_equal(&r1.dy, 0, &r3.dy, 0, S), "dy of item 0 in B=3 != B=1");
    result_free(&r1);
    result_free(&r3);
    case_free(&one);
    case_free(&three);
}

/* M = 600 (three fold tiles), H = 130 (three 64-column blocks). */
static void check_thread_invariance(int gated) {
    res_case c;
    res_result r[3];
    int threads[3] = {1, 2, 4};
    case_init(&c, gated, 600, 130, 5, 500);
    for (int i = 0; i < 3; i++) {
        h3s_set_num_threads(threads[i]);
        case_run(&c, 0, &r[i]);
    }
    h3s_set_num_threads(1);
    for (int i = 1; i < 3; i++)
        CHECK(results_equal(&r[0], &r[i], gated), "%s: %d threads differ from 1", gated ? "gated" : "plain",
              threads[i]);
    for (int i = 0; i < 3; i++)
        result_free(&r[i]);
    case_free(&c);
}

/* ---------------------------------------------------------------- 7. boundaries ----- */

static void check_zero_rows(void) {
    res_case c;
    res_result o;
    case_init(&c, 1, 0, 37, 3, 600);
    case_run(&c, 0, &o); /* dtable poisoned inside */
    int64_t bad_zero = 0, bad_kept = 0;
    for (int64_t i = 0; i < 3 * C_CHUNKS * 37; i++) {
        uint32_t v = ((uint32_t *)o.dtable.data)[i];
        if ((i % (C_CHUNKS * 37)) / 37 == GATE)
            bad_zero += v != 0;
        else
            bad_kept += v != 0x7f7f7f7fu;
    }
    CHECK(bad_zero == 0, "M=0: %lld gate entries of dtable are not 0", (long long)bad_zero);
    CHECK(bad_kept == 0, "M=0: %lld entries of other chunks were written", (long long)bad_kept);
    result_free(&o);
    case_free(&c);
}

/* out may alias r (the residual stream updated in place); dy may alias dout. */
static void check_aliasing(void) {
    res_case c;
    res_result ref;
    case_init(&c, 1, 20, 37, 3, 700);
    case_run(&c, 0, &ref);
    h3s_tensor r2 = h3t_alloc2(H3S_BF16, 20, 37), d2 = h3t_alloc2(H3S_F32, 20, 37), dr = h3t_alloc2(H3S_F32, 20, 37);
    memcpy(r2.data, c.r.data, h3s_tensor_nbytes(&r2));
    memcpy(d2.data, c.dout.data, h3s_tensor_nbytes(&d2));
    CHECK_OK(h3s_residual_forward(&r2, &c.y, &c.table, &c.index, GATE, &r2));
    CHECK(h3t_bitwise_equal(&r2, &ref.out), "in-place out (aliasing r) differs");
    CHECK_OK(h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &d2, &dr, &d2, NULL));
    CHECK(h3t_bitwise_equal(&d2, &ref.dy) && h3t_bitwise_equal(&dr, &ref.dr), "dy aliasing dout differs");
    h3s_tensor_free(&r2);
    h3s_tensor_free(&d2);
    h3s_tensor_free(&dr);
    result_free(&ref);
    case_free(&c);
}

/* ---------------------------------------------------------------- 6. bad input ------ */

static void check_bad_input(void) {
    const int64_t M = 6, H = 8, R = 3;
    res_case c;
    case_init(&c, 1, M, H, R, 1234);
    h3s_tensor out = h3t_alloc2(H3S_BF16, M, H), dr = h3t_alloc2(H3S_F32, M, H), dy = h3t_alloc2(H3S_F32, M, H);
    h3s_tensor dt = h3t_alloc2(H3S_F32, R, C_CHUNKS * H);
    h3t_outs fo = {{&out}, {0}}, bo = {{&dr, &dy, &dt}, {0}};
    h3s_tensor r32 = h3t_alloc2(H3S_F32, M, H), y64 = h3t_to_f64(&c.y), t64 = h3t_to_f64(&c.table);
    h3s_tensor r64 = h3t_to_f64(&c.r), out64 = h3t_alloc2(H3S_F64, M, H), ybad = h3t_alloc2(H3S_BF16, M, H + 1);
    h3s_tensor outbad = h3t_alloc2(H3S_BF16, M + 1, H), tbad = h3t_alloc2(H3S_BF16, R, C_CHUNKS * H + 1);
    h3t_outs fo64 = {{&out64}, {0}}, fob = {{&outbad}, {0}};

    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(NULL, &c.y, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, NULL, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_residual_forward(&r32, &c.y, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_residual_forward(&c.r, &y64, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_residual_forward(&c.r, &c.y, &t64, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo64, h3s_residual_forward(&r64, &y64, &c.table, &c.index, GATE, &out64));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo64, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, &out64));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_residual_forward(&c.r, &ybad, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fob, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, &outbad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_residual_forward(&c.r, &c.y, &tbad, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, C_CHUNKS, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, -1, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, NULL, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_residual_forward(&c.r, &c.y, NULL, &c.index, GATE, &out));
    int64_t *idx = (int64_t *)c.index.data, keep = idx[4];
    idx[4] = R;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dt));
    idx[4] = -2;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dt));
    idx[4] = keep;
    h3s_tensor ishort = make_index(M - 1, R, 9);
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &ishort, GATE, &out));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bo,
                          h3s_residual_backward(&c.y, &c.table, &ishort, GATE, &c.dout, &dr, &dy, &dt));
    out.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &fo, h3s_residual_forward(&c.r, &c.y, &c.table, &c.index, GATE, &out));
    out.device = 0;

    h3s_tensor d16 = h3t_alloc2(H3S_BF16, M, H), d64 = h3t_to_f64(&c.dout), dybad = h3t_alloc2(H3S_F32, M, H - 1);
    h3s_tensor dtbad = h3t_alloc2(H3S_F32, R, C_CHUNKS * H - H), dt64 = h3t_alloc2(H3S_F64, R, C_CHUNKS * H);
    h3t_outs bob = {{&dr, &dybad}, {0}}, bot = {{&dr, &dy, &dtbad}, {0}}, bot64 = {{&dr, &dy, &dt64}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, NULL, &dr, &dy, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &d16, &dr, &dy, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &d64, &dr, &dy, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bot64,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dt64));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bob,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dybad, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bot,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dtbad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo,
                          h3s_residual_backward(NULL, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_residual_backward(&c.y, NULL, NULL, GATE, &c.dout, &dr, &dy, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, 7, &c.dout, &dr, &dy, &dt));
    dt.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &bo,
                          h3s_residual_backward(&c.y, &c.table, &c.index, GATE, &c.dout, &dr, &dy, &dt));
    dt.device = 0;

    h3s_tensor *frees[] = {&out,  &dr,     &dy,   &dt,     &r32, &y64, &t64,   &r64,   &out64,
                           &ybad, &outbad, &tbad, &ishort, &d16, &d64, &dybad, &dtbad, &dt64};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
    case_free(&c);
}

/* ---------------------------------------------------------------- grad_add ---------- */

/* residual_backward_rounded on the host: dr, dy and dtable as the plain backward, dy_bf16 = dy converted to BF16;
 * refused without dy, for the golden variant and over an operand. */
static void check_backward_rounded(void) {
    const int64_t M = 12, H = 40, R = 3;
    h3s_tensor y = h3t_normal2(H3S_BF16, M, H, 960, 1.0f), table = h3t_normal2(H3S_BF16, R, 6 * H, 961, 0.5f);
    h3s_tensor dout = h3t_normal2(H3S_F32, M, H, 962, 1.0f), idx = h3t_alloc1(H3S_I64, M);
    for (int64_t m = 0; m < M; m++)
        ((int64_t *)idx.data)[m] = m % R;
    h3s_tensor dr1 = h3t_alloc2(H3S_F32, M, H), dy1 = h3t_alloc2(H3S_F32, M, H), dt1 = h3t_alloc2(H3S_F32, R, 6 * H);
    h3s_tensor dr2 = h3t_alloc2(H3S_F32, M, H), dy2 = h3t_alloc2(H3S_F32, M, H), dt2 = h3t_alloc2(H3S_F32, R, 6 * H);
    h3s_tensor dyb = h3t_alloc2(H3S_BF16, M, H), want = h3t_alloc2(H3S_BF16, M, H);
    CHECK_OK(h3s_residual_backward(&y, &table, &idx, 5, &dout, &dr1, &dy1, &dt1));
    CHECK_OK(h3s_residual_backward_rounded(&y, &table, &idx, 5, &dout, &dr2, &dy2, &dyb, &dt2));
    CHECK_OK(h3s_tensor_convert(&dy1, &want));
    CHECK(h3t_bitwise_equal(&dr1, &dr2) && h3t_bitwise_equal(&dy1, &dy2) && h3t_bitwise_equal(&dt1, &dt2) &&
              h3t_bitwise_equal(&dyb, &want),
          "residual_backward_rounded: not the plain backward with dy rounded to BF16");
    h3s_tensor yview = y; /* dy_bf16 over y's bytes */
    h3t_outs oo = {{&dr2, &dy2, &dt2, &dyb}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_residual_backward_rounded(&y, &table, &idx, 5, &dout, &dr2, NULL, &dyb, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_residual_backward_rounded(&y, &table, &idx, 5, &dout, &dr2, &dy2, &yview, NULL));
    h3s_tensor *frees[] = {&y, &table, &dout, &idx, &dr1, &dy1, &dt1, &dr2, &dy2, &dt2, &dyb, &want};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

/* grad_add3: (a + b) + c, the bits of two grad_adds, F32 and F64, in place over a; bad c refused. */
static void check_grad_add3(void) {
    for (int golden = 0; golden < 2; golden++) {
        h3s_tensor a = h3t_normal2(H3S_F32, 70, 33, 11, 1.0f), b = h3t_normal2(H3S_F32, 70, 33, 12, 2.0f);
        h3s_tensor c = h3t_normal2(H3S_F32, 70, 33, 13, 3.0f);
        if (golden) {
            h3s_tensor t[3] = {h3t_to_f64(&a), h3t_to_f64(&b), h3t_to_f64(&c)};
            h3s_tensor_free(&a), h3s_tensor_free(&b), h3s_tensor_free(&c);
            a = t[0], b = t[1], c = t[2];
        }
        h3s_tensor two = h3t_alloc2(a.dtype, 70, 33), one = h3t_alloc2(a.dtype, 70, 33);
        CHECK_OK(h3s_grad_add(&a, &b, &two));
        CHECK_OK(h3s_grad_add(&two, &c, &two));
        CHECK_OK(h3s_grad_add3(&a, &b, &c, &one));
        CHECK(h3t_bitwise_equal(&one, &two), "grad_add3 (%s) differs from two grad_adds", golden ? "F64" : "F32");
        CHECK_OK(h3s_grad_add3(&a, &b, &c, &a));
        CHECK(h3t_bitwise_equal(&a, &two), "grad_add3 in place (out = a) differs");
        h3s_tensor wrong = h3t_alloc2(a.dtype, 71, 33), dev = c;
        dev.device = 1;
        h3t_outs oo = {{&one}, {0}};
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_grad_add3(&a, &b, NULL, &one));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &oo, h3s_grad_add3(&a, &b, &wrong, &one));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &oo, h3s_grad_add3(&a, &b, &dev, &one));
        h3s_tensor *frees[] = {&a, &b, &c, &two, &one, &wrong};
        for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
            h3s_tensor_free(frees[i]);
    }
}

static void check_grad_add(void) {
    /* accuracy: one FP32 addition, at most u_f32 per element; F64 is exact to u_f64. */
    int64_t shape3[3] = {4, 5, 37};
    h3s_tensor a = h3t_alloc(H3S_F32, 3, shape3), b = h3t_alloc(H3S_F32, 3, shape3), o = h3t_alloc(H3S_F32, 3, shape3);
    h3t_fill_normal(&a, 1, 1.0f);
    h3t_fill_normal(&b, 2, 3.0f);
    h3s_tensor a64 = h3t_to_f64(&a), b64 = h3t_to_f64(&b), o64 = h3t_alloc(H3S_F64, 3, shape3);
    CHECK_OK(h3s_grad_add(&a, &b, &o));
    CHECK_OK(h3s_grad_add(&a64, &b64, &o64));
    double e = h3t_measured("grad_add F32 vs F64", h3t_rel_l2(&o, &o64), 1.0001 * U_F32);
    CHECK(e <= 1.0001 * U_F32, "grad_add rel-L2 %.3g", e);
    int64_t n = h3s_tensor_numel(&a), bad = 0, bad64 = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = ((float *)a.data)[i] + ((float *)b.data)[i];
        bad += memcmp(&want, (float *)o.data + i, 4) != 0;
        double want64 = ((double *)a64.data)[i] + ((double *)b64.data)[i];
        bad64 += want64 != ((double *)o64.data)[i];
    }
    CHECK(bad == 0 && bad64 == 0, "grad_add is not one IEEE addition per element (%lld, %lld)", (long long)bad,
          (long long)bad64);
    /* repeat, threads, in place (out aliasing a) */
    h3s_tensor big_a = h3t_normal2(H3S_F32, 700, 130, 5, 1.0f), big_b = h3t_normal2(H3S_F32, 700, 130, 6, 1.0f);
    h3s_tensor r1 = h3t_alloc2(H3S_F32, 700, 130), r4 = h3t_alloc2(H3S_F32, 700, 130);
    h3s_set_num_threads(1);
    CHECK_OK(h3s_grad_add(&big_a, &big_b, &r1));
    h3s_set_num_threads(4);
    CHECK_OK(h3s_grad_add(&big_a, &big_b, &r4));
    h3s_set_num_threads(1);
    CHECK(h3t_bitwise_equal(&r1, &r4), "grad_add: 4 threads differ from 1");
    CHECK_OK(h3s_grad_add(&big_a, &big_b, &big_a));
    CHECK(h3t_bitwise_equal(&big_a, &r1), "grad_add in place (out = a) differs");
    /* zero elements */
    h3s_tensor z1 = h3t_alloc2(H3S_F32, 0, 7), z2 = h3t_alloc2(H3S_F32, 0, 7), z3 = h3t_alloc2(H3S_F32, 0, 7);
    CHECK_OK(h3s_grad_add(&z1, &z2, &z3));
    /* bad input */
    h3s_tensor bf = h3t_alloc(H3S_BF16, 3, shape3), wrong = h3t_alloc2(H3S_F32, 20, 37);
    h3t_outs oo = {{&o}, {0}}, oo64 = {{&o64}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_grad_add(NULL, &b, &o));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_grad_add(&a, NULL, &o));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo, h3s_grad_add(&a, &b, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &oo, h3s_grad_add(&a, &b64, &o));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &oo64, h3s_grad_add(&a, &b, &o64));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &oo, h3s_grad_add(&bf, &bf, &o));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &oo, h3s_grad_add(&a, &wrong, &o));
    b.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &oo, h3s_grad_add(&a, &b, &o));
    b.device = 0;
    h3s_tensor *frees[] = {&a, &b, &o, &a64, &b64, &o64, &big_a, &big_b, &r1, &r4, &z1, &z2, &z3, &bf, &wrong};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

int main(void) {
    /* One thread except where threads are the subject (thread invariance, repeat): OpenMP
     * barriers on an oversubscribed 2-core CI runner cost milliseconds each. */
    h3s_set_num_threads(1);
    for (int gated = 0; gated <= 1; gated++) {
        check_accuracy(gated, 50, 60);
        check_accuracy(gated, 50, 37);
        check_accuracy(gated, 60, 100);
        check_accuracy(gated, 1, 37);
        check_repeat(gated);
        check_row_invariance(gated);
        check_thread_invariance(gated);
    }
    check_documented_formula();
    check_batch_invariance();
    check_zero_rows();
    check_aliasing();
    check_bad_input();
    check_grad_add();
    check_grad_add3();
    check_backward_rounded();
    return h3t_finish("test_residual");
}

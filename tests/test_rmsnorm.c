/* RMSNorm family: h3s_rmsnorm_* (plain, weighted, AdaLN-modulated; BF16 or F32 y),
 * h3s_final_norm_* and h3s_head_rmsnorm_*.
 *
 * Error bounds.  BF16 has p = 8 significand bits, so one round-to-nearest of an output has
 * unit roundoff u_bf16 = 2^-8 = 3.9e-3 (relative error of every element at most u_bf16, hence
 * rel-L2 at most u_bf16); for random data the RMS relative error of one rounding is about
 * 0.4 u_bf16 = 1.5e-3.  FP32 has u_f32 = 2^-24 = 6e-8.  The strict and golden backends read
 * the same BF16 input values (converted exactly to F64), so no BF16 rounding enters any
 * gradient: gradients carry FP32 rounding errors only. */
#include "ops/fold.h"
#include "ops/ops.h"
#include "test_util.h"

#define U_BF16 (1.0 / 256.0)
#define U_F32 (1.0 / 16777216.0)
#define EPS 1e-5

/* y BF16: u_bf16 from the one output rounding plus the FP32 error before it, at most
 * (H/2 + 6) u_f32 for H <= 100 (sum of squares chain, sqrt, division, 4 products/sums),
 * i.e. < 4e-6.  A computation that rounded twice to BF16 still meets this (each rounding is
 * <= u_bf16 only in the worst case), so accuracy is also pinned by the fraction of elements
 * that equal the correctly rounded golden value (see frac_correctly_rounded). */
#define BOUND_Y_BF16 (U_BF16 + 1e-5)
/* y F32: (H/2 + 6) u_f32 <= 56 u_f32 = 3.3e-6 relative to |t(1+scale)| + |shift|, whose norm
 * is below sqrt(2) ||y|| for independent random terms: 4.7e-6 -> 1e-5. */
#define BOUND_Y_F32 1e-5
/* dx: inv carries (H/2 + 2) u_f32, the dot product chain H u_f32 relative to sum |gx xhat|,
 * the last three operations 3 u_f32: about (1.5 H + 5) u_f32 = 5.7e-6 for H = 60 relative
 * to ||gx|| (which ||dx|| / inv matches for random dy): bound 2e-5. */
#define BOUND_DX 2e-5
/* dw, dtable chunks: each contribution carries (H/2 + 5) u_f32; a fold of n terms adds at
 * most (n - 1) u_f32 sum |c|, and for zero-mean random contributions sum |c| ~ sqrt(n) |sum c|,
 * so with n <= 60 rows: (35 + 59 * 8) u_f32 = 3e-5 -> 1e-4. */
#define BOUND_FOLD 1e-4
/* Mismatches with the correctly rounded golden occur only where the golden value lies within
 * the FP32 error (~1e-6 relative) of a BF16 rounding tie, probability ~ 1e-6 / 2^-8 per
 * element, or where modulation cancels (y near 0): far below 1 %.  Rounding twice (e.g.
 * xhat to BF16 before * w) mismatches ~ 25 % of elements. */
#define MIN_CORRECTLY_ROUNDED 0.99

/* ---------------------------------------------------------------- helpers ----------- */

/* index[m] in [0, R), pseudo-random but never naming row `skip` (skip < 0: any row). */
static h3s_tensor make_index(int64_t M, int64_t R, uint64_t seed, int64_t skip) {
    h3s_tensor t = h3t_alloc1(H3S_I64, M);
    int64_t *v = (int64_t *)t.data;
    for (int64_t m = 0; m < M; m++) {
        uint64_t h = (uint64_t)m * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        int64_t r = (int64_t)(h % (uint64_t)R);
        if (r == skip) r = (r + 1) % R;
        v[m] = r;
    }
    return t;
}

/* ---------------------------------------------------------------- a norm problem ---- */

typedef enum norm_kind {
    NORM_PLAIN,    /* rmsnorm, no weight, no modulation, y BF16 */
    NORM_WEIGHTED, /* rmsnorm with w, y BF16 */
    NORM_MOD_BF16, /* rmsnorm with w and modulation (chunks 3, 4 of 6), y BF16 */
    NORM_MOD_F32,  /* the same, y F32 */
    NORM_MOD_NOW,  /* modulation without weight, y BF16 */
    NORM_FINAL,    /* final_norm: w, table [R, 2H] (shift | scale), y F32 */
    NORM_KINDS
} norm_kind;

static const char *kind_name[NORM_KINDS] = {"plain", "weighted", "mod-bf16", "mod-f32", "mod-noweight", "final"};

typedef struct norm_case {
    norm_kind kind;
    int64_t M, H, R, C;
    int has_w, has_mod;
    h3s_dtype ydt;
    h3s_tensor x, w, table, index, dy;
    h3s_modulation mod;
} norm_case;

static void case_init(norm_case *c, norm_kind kind, int64_t M, int64_t H, int64_t R, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->M = M;
    c->H = H;
    c->R = R;
    c->has_w = kind != NORM_PLAIN && kind != NORM_MOD_NOW;
    c->has_mod = kind >= NORM_MOD_BF16;
    c->C = kind == NORM_FINAL ? 2 : 6;
    c->ydt = (kind == NORM_MOD_F32 || kind == NORM_FINAL) ? H3S_F32 : H3S_BF16;
    c->x = h3t_normal2(H3S_BF16, M, H, seed, 1.5f);
    c->dy = h3t_normal2(H3S_F32, M, H, seed + 1, 1.0f);
    if (c->has_w) c->w = h3t_normal1(H3S_BF16, H, seed + 2, 0.8f);
    if (c->has_mod) {
        c->table = h3t_normal2(H3S_BF16, R, c->C * H, seed + 3, 0.5f);
        c->index = make_index(M, R, seed + 4, -1);
        c->mod.table = &c->table;
        c->mod.index = &c->index;
        c->mod.shift_chunk = kind == NORM_FINAL ? 0 : 3;
        c->mod.scale_chunk = kind == NORM_FINAL ? 1 : 4;
    }
}

static void case_free(norm_case *c) {
    h3s_tensor_free(&c->x);
    h3s_tensor_free(&c->dy);
    h3s_tensor_free(&c->w);
    h3s_tensor_free(&c->table);
    h3s_tensor_free(&c->index);
}

typedef struct norm_result {
    h3s_tensor y, dx, dw, dtable;
} norm_result;

static void result_free(norm_result *r) {
    h3s_tensor_free(&r->y);
    h3s_tensor_free(&r->dx);
    h3s_tensor_free(&r->dw);
    h3s_tensor_free(&r->dtable);
}

/* Forward and backward of a case; golden != 0 runs on F64 copies of the same values. */
static void case_run(const norm_case *c, int golden, norm_result *r) {
    h3s_tensor x = c->x, w = c->w, table = c->table, dy = c->dy;
    if (golden) {
        x = h3t_to_f64(&c->x);
        dy = h3t_to_f64(&c->dy);
        if (c->has_w) w = h3t_to_f64(&c->w);
        if (c->has_mod) table = h3t_to_f64(&c->table);
    }
    h3s_dtype g = golden ? H3S_F64 : H3S_F32;
    h3s_modulation mod = c->mod;
    mod.table = &table;
    memset(r, 0, sizeof *r);
    r->y = h3t_alloc2(golden ? H3S_F64 : c->ydt, c->M, c->H);
    r->dx = h3t_alloc2(g, c->M, c->H);
    if (c->has_w) r->dw = h3t_alloc1(g, c->H);
    if (c->has_mod) r->dtable = h3t_alloc2(g, c->R, c->C * c->H);
    const h3s_tensor *wp = c->has_w ? &w : NULL;
    h3s_tensor *dwp = c->has_w ? &r->dw : NULL, *dtp = c->has_mod ? &r->dtable : NULL;
    if (c->kind == NORM_FINAL) {
        CHECK_OK(h3s_final_norm_forward(&x, wp, &table, &c->index, EPS, &r->y));
        CHECK_OK(h3s_final_norm_backward(&x, wp, &table, &c->index, EPS, &dy, &r->dx, dwp, dtp));
    } else {
        const h3s_modulation *mp = c->has_mod ? &mod : NULL;
        CHECK_OK(h3s_rmsnorm_forward(&x, wp, mp, EPS, &r->y));
        CHECK_OK(h3s_rmsnorm_backward(&x, wp, mp, EPS, &dy, &r->dx, dwp, dtp));
    }
    if (golden) {
        h3s_tensor_free(&x);
        h3s_tensor_free(&dy);
        if (c->has_w) h3s_tensor_free(&w);
        if (c->has_mod) h3s_tensor_free(&table);
    }
}

/* ---------------------------------------------------------------- 1. accuracy ------- */

static void check_accuracy(norm_kind kind, int64_t M, int64_t H) {
    norm_case c;
    norm_result s, g;
    case_init(&c, kind, M, H, 4, 100 + (uint64_t)(H * 10 + kind));
    case_run(&c, 0, &s);
    case_run(&c, 1, &g);
    const char *kn = kind_name[kind];
    char what[96];
    snprintf(what, sizeof what, "%s M=%lld H=%lld y", kind_name[kind], (long long)M, (long long)H);
    double e = h3t_measured(what, h3t_rel_l2(&s.y, &g.y), c.ydt == H3S_BF16 ? BOUND_Y_BF16 : BOUND_Y_F32);
    if (c.ydt == H3S_BF16) {
        CHECK(e <= BOUND_Y_BF16, "%s M=%lld H=%lld: y rel-L2 %.3g > %.3g", kn, (long long)M, (long long)H, e,
              BOUND_Y_BF16);
        snprintf(what, sizeof what, "%s M=%lld H=%lld y correctly rounded", kn, (long long)M, (long long)H);
        double f = h3t_measured(what, h3t_frac_correctly_rounded(&s.y, &g.y), MIN_CORRECTLY_ROUNDED);
        CHECK(f >= MIN_CORRECTLY_ROUNDED, "%s H=%lld: only %.4f of y correctly rounded", kn, (long long)H, f);
    } else {
        CHECK(e <= BOUND_Y_F32, "%s M=%lld H=%lld: y (F32) rel-L2 %.3g > %.3g", kn, (long long)M, (long long)H, e,
              BOUND_Y_F32);
    }
    snprintf(what, sizeof what, "%s M=%lld H=%lld dx", kn, (long long)M, (long long)H);
    e = h3t_measured(what, h3t_rel_l2(&s.dx, &g.dx), BOUND_DX);
    CHECK(e <= BOUND_DX, "%s M=%lld H=%lld: dx rel-L2 %.3g > %.3g", kn, (long long)M, (long long)H, e, BOUND_DX);
    if (c.has_w) {
        snprintf(what, sizeof what, "%s M=%lld H=%lld dw", kn, (long long)M, (long long)H);
        e = h3t_measured(what, h3t_rel_l2(&s.dw, &g.dw), BOUND_FOLD);
        CHECK(e <= BOUND_FOLD, "%s M=%lld H=%lld: dw rel-L2 %.3g", kn, (long long)M, (long long)H, e);
    }
    if (c.has_mod) {
        int chunks[2] = {c.mod.shift_chunk, c.mod.scale_chunk};
        for (int i = 0; i < 2; i++) {
            h3s_tensor a = h3t_columns(&s.dtable, chunks[i] * H, H), b = h3t_columns(&g.dtable, chunks[i] * H, H);
            snprintf(what, sizeof what, "%s M=%lld H=%lld dtable chunk %d", kn, (long long)M, (long long)H, chunks[i]);
            e = h3t_measured(what, h3t_rel_l2(&a, &b), BOUND_FOLD);
            CHECK(e <= BOUND_FOLD, "%s M=%lld H=%lld: dtable chunk %d rel-L2 %.3g", kn, (long long)M, (long long)H,
                  chunks[i], e);
            h3s_tensor_free(&a);
            h3s_tensor_free(&b);
        }
    }
    result_free(&s);
    result_free(&g);
    case_free(&c);
}

/* The documented strict formula (docs/numerics/norms.md), evaluated here independently,
 * gives the library's bits: forward y, dx, and dw / dtable as canonical folds of the
 * documented per-row contributions. */
static void check_documented_formula(norm_kind kind) {
    norm_case c;
    norm_result s;
    const int64_t M = 600, H = 70;
    case_init(&c, kind, M, H, 5, 4242 + kind);
    case_run(&c, 0, &s);
    float *y = malloc(sizeof(float) * (size_t)(M * H)), *dx = malloc(sizeof(float) * (size_t)(M * H));
    float *cdw = malloc(sizeof(float) * (size_t)(M * H)), *csc = malloc(sizeof(float) * (size_t)(M * H));
    const float *dy = (const float *)c.dy.data;
    for (int64_t m = 0; m < M; m++) {
        float ss = 0.0f;
        for (int64_t k = 0; k < H; k++) {
            float v = h3s_tensor_get_f64(&c.x, m * H + k);
            ss = fmaf(v, v, ss);
        }
        float inv = 1.0f / sqrtf(ss / (float)H + (float)EPS), dot = 0.0f;
        int64_t row = c.has_mod ? ((int64_t *)c.index.data)[m] : 0;
        for (int pass = 0; pass < 2; pass++) {
            float mean = dot / (float)H;
            for (int64_t k = 0; k < H; k++) {
                float xh = (float)h3s_tensor_get_f64(&c.x, m * H + k) * inv;
                float wk = c.has_w ? (float)h3s_tensor_get_f64(&c.w, k) : 1.0f;
                float a = 1.0f, sh = 0.0f;
                if (c.has_mod) {
                    a = 1.0f + (float)h3s_tensor_get_f64(&c.table, row * c.C * H + c.mod.scale_chunk * H + k);
                    sh = (float)h3s_tensor_get_f64(&c.table, row * c.C * H + c.mod.shift_chunk * H + k);
                }
                float t = xh;
                if (c.has_w) t = t * wk;
                if (c.has_mod) t = t * a + sh; /* two roundings: built with -ffp-contract=off */
                float g = dy[m * H + k] * a, gx = g * wk;
                if (pass == 0) {
                    y[m * H + k] = t;
                    dot = fmaf(gx, xh, dot);
                    cdw[m * H + k] = g * xh;
                    csc[m * H + k] = dy[m * H + k] * (xh * wk);
                } else {
                    dx[m * H + k] = inv * (gx - xh * mean);
                }
            }
        }
    }
    int64_t bad_y = 0, bad_dx = 0;
    for (int64_t i = 0; i < M * H; i++) {
        if (c.ydt == H3S_F32)
            bad_y += memcmp(&((float *)s.y.data)[i], &y[i], 4) != 0;
        else
            bad_y += ((uint16_t *)s.y.data)[i] != h3s_bf16_round(y[i]);
        bad_dx += memcmp(&((float *)s.dx.data)[i], &dx[i], 4) != 0;
    }
    CHECK(bad_y == 0, "%s: %lld y elements differ from the documented formula", kind_name[kind], (long long)bad_y);
    CHECK(bad_dx == 0, "%s: %lld dx elements differ from the documented formula", kind_name[kind], (long long)bad_dx);
    if (c.has_w) {
        float ref[70];
        h3s_fold_columns_f32(cdw, M, H, H, ref);
        CHECK(memcmp(ref, s.dw.data, sizeof(float) * (size_t)H) == 0, "%s: dw is not the canonical fold",
              kind_name[kind]);
    }
    if (c.has_mod) {
        float *ref = calloc((size_t)(c.R * c.C * H), sizeof(float));
        h3s_fold_indexed_f32(dy, (int64_t *)c.index.data, M, H, H, c.R, ref + c.mod.shift_chunk * H, c.C * H);
        h3s_fold_indexed_f32(csc, (int64_t *)c.index.data, M, H, H, c.R, ref + c.mod.scale_chunk * H, c.C * H);
        int64_t bad = 0;
        for (int64_t r = 0; r < c.R; r++)
            for (int ch = 0; ch < 2; ch++) {
                int64_t off = r * c.C * H + (ch ? c.mod.scale_chunk : c.mod.shift_chunk) * H;
                bad += memcmp(ref + off, (float *)s.dtable.data + off, sizeof(float) * (size_t)H) != 0;
            }
        CHECK(bad == 0, "%s: %lld dtable chunk rows are not the canonical indexed fold", kind_name[kind],
              (long long)bad);
        free(ref);
    }
    free(y);
    free(dx);
    free(cdw);
    free(csc);
    result_free(&s);
    case_free(&c);
}

/* ---------------------------------------------------------------- 2. repeat --------- */

static int results_equal(const norm_result *a, const norm_result *b, const norm_case *c) {
    int ok = h3t_bitwise_equal(&a->y, &b->y) && h3t_bitwise_equal(&a->dx, &b->dx);
    if (c->has_w) ok = ok && h3t_bitwise_equal(&a->dw, &b->dw);
    if (c->has_mod) ok = ok && h3t_bitwise_equal(&a->dtable, &b->dtable);
    return ok;
}

static void check_repeat(norm_kind kind) {
    norm_case c;
    norm_result a, b;
    case_init(&c, kind, 300, 60, 4, 7 + kind);
    h3s_set_num_threads(2);
    case_run(&c, 0, &a);
    case_run(&c, 0, &b);
    h3s_set_num_threads(1);
    CHECK(results_equal(&a, &b, &c), "%s: two identical calls differ", kind_name[kind]);
    result_free(&a);
    result_free(&b);
    case_free(&c);
}

/* ---------------------------------------------------------------- 3. rows ----------- */

/* Copy row `from` of the source case (x, dy, index) into row `to` of dst. */
static void copy_row(const norm_case *src, int64_t from, norm_case *dst, int64_t to) {
    int64_t H = src->H;
    memcpy((uint16_t *)dst->x.data + to * H, (uint16_t *)src->x.data + from * H, 2 * (size_t)H);
    memcpy((float *)dst->dy.data + to * H, (float *)src->dy.data + from * H, 4 * (size_t)H);
    if (src->has_mod) ((int64_t *)dst->index.data)[to] = ((int64_t *)src->index.data)[from];
}

static void share_params(const norm_case *src, norm_case *dst) {
    if (src->has_w) memcpy(dst->w.data, src->w.data, h3s_tensor_nbytes(&src->w));
    if (src->has_mod) memcpy(dst->table.data, src->table.data, h3s_tensor_nbytes(&src->table));
}

static void check_row_invariance(norm_kind kind) {
    const int64_t H = 60, R = 4;
    norm_case big, mid, one;
    case_init(&big, kind, 300, H, R, 31 + kind);
    case_init(&mid, kind, 7, H, R, 57 + kind);
    case_init(&one, kind, 1, H, R, 91 + kind);
    share_params(&big, &mid);
    share_params(&big, &one);
    copy_row(&big, 211, &mid, 3);
    copy_row(&big, 211, &one, 0);
    norm_result rb, rm, r1;
    case_run(&big, 0, &rb);
    case_run(&mid, 0, &rm);
    case_run(&one, 0, &r1);
    CHECK(h3t_rows_equal(&rb.y, 211, &rm.y, 3, 1), "%s: y row 211 of M=300 != row 3 of M=7", kind_name[kind]);
    CHECK(h3t_rows_equal(&rb.y, 211, &r1.y, 0, 1), "%s: y row 211 of M=300 != row 0 of M=1", kind_name[kind]);
    CHECK(h3t_rows_equal(&rb.dx, 211, &rm.dx, 3, 1), "%s: dx row 211 of M=300 != row 3 of M=7", kind_name[kind]);
    CHECK(h3t_rows_equal(&rb.dx, 211, &r1.dx, 0, 1), "%s: dx row 211 of M=300 != row 0 of M=1", kind_name[kind]);
    result_free(&rb);
    result_free(&rm);
    result_free(&r1);
    case_free(&big);
    case_free(&mid);
    case_free(&one);
}

/* ---------------------------------------------------------------- 4. batch ---------- */

/* Item 0 of a B = 3 batch (rows [0, S), modulation rows by the shared layout index) equals
 * the same item alone. */
static void check_batch_invariance(norm_kind kind) {
    const int64_t S = 40, H = 60, R = 6;
    norm_case one, three;
    case_init(&one, kind, S, H, R, 300 + kind);
    case_init(&three, kind, 3 * S, H, R, 400 + kind);
    share_params(&one, &three);
    for (int64_t b = 0; b < 3; b++)
        for (int64_t s = 0; s < S; s++) {
            if (b == 0) copy_row(&one, s, &three, s);
            if (one.has_mod) ((int64_t *)three.index.data)[b * S + s] = ((int64_t *)one.index.data)[s];
        }
    norm_result r1, r3;
    case_run(&one, 0, &r1);
    case_run(&three, 0, &r3);
    CHECK(h3t_rows_equal(&r1.y, 0, &r3.y, 0, S), "%s: y of item 0 in B=3 != B=1", kind_name[kind]);
    CHECK(h3t_rows_equal(&r1.dx, 0, &r3.dx, 0, S), "%s: dx of item 0 in B=3 != B=1", kind_name[kind]);
    result_free(&r1);
    result_free(&r3);
    case_free(&one);
    case_free(&three);
}

/* ---------------------------------------------------------------- 5. threads -------- */

/* M = 600: three fold tiles; H = 130: three 64-column blocks, so threads really split. */
static void check_thread_invariance(norm_kind kind) {
    norm_case c;
    norm_result r[3];
    int threads[3] = {1, 2, 4};
    case_init(&c, kind, 600, 130, 5, 500 + kind);
    for (int i = 0; i < 3; i++) {
        h3s_set_num_threads(threads[i]);
        case_run(&c, 0, &r[i]);
    }
    for (int i = 1; i < 3; i++)
        CHECK(results_equal(&r[0], &r[i], &c), "%s: %d threads differ from 1 thread (y, dx, dw or dtable)",
              kind_name[kind], threads[i]);
    h3s_set_num_threads(1);
    for (int i = 0; i < 3; i++)
        result_free(&r[i]);
    case_free(&c);
}

/* ---------------------------------------------------------------- 7. boundaries ----- */

/* M = 0: success, dw = 0, the shift/scale chunks of dtable = 0, other chunks untouched. */
static void check_zero_rows(norm_kind kind) {
    norm_case c;
    case_init(&c, kind, 0, 37, 3, 600 + kind);
    h3s_tensor y = h3t_alloc2(c.ydt, 0, 37), dx = h3t_alloc2(H3S_F32, 0, 37);
    h3s_tensor dw = h3t_alloc1(H3S_F32, 37), dt = h3t_alloc2(H3S_F32, 3, c.C * 37);
    h3t_poison(&dw);
    h3t_poison(&dt);
    void *dt0 = h3t_snapshot(&dt);
    const h3s_tensor *wp = c.has_w ? &c.w : NULL;
    h3s_tensor *dwp = c.has_w ? &dw : NULL, *dtp = c.has_mod ? &dt : NULL;
    if (kind == NORM_FINAL) {
        CHECK_OK(h3s_final_norm_forward(&c.x, wp, &c.table, &c.index, EPS, &y));
        CHECK_OK(h3s_final_norm_backward(&c.x, wp, &c.table, &c.index, EPS, &c.dy, &dx, dwp, dtp));
    } else {
        const h3s_modulation *mp = c.has_mod ? &c.mod : NULL;
        CHECK_OK(h3s_rmsnorm_forward(&c.x, wp, mp, EPS, &y));
        CHECK_OK(h3s_rmsnorm_backward(&c.x, wp, mp, EPS, &c.dy, &dx, dwp, dtp));
    }
    if (c.has_w) {
        int nz = 0;
        for (int k = 0; k < 37; k++)
            nz += ((float *)dw.data)[k] != 0.0f;
        CHECK(nz == 0, "%s M=0: %d dw entries are not 0", kind_name[kind], nz);
    }
    if (c.has_mod) {
        int bad_zero = 0, bad_kept = 0;
        for (int64_t r = 0; r < 3; r++)
            for (int64_t j = 0; j < c.C * 37; j++) {
                int64_t chunk = j / 37, i = r * c.C * 37 + j;
                if (chunk == c.mod.shift_chunk || chunk == c.mod.scale_chunk)
                    bad_zero += ((float *)dt.data)[i] != 0.0f;
                else
                    bad_kept += memcmp((float *)dt.data + i, (float *)dt0 + i, 4) != 0;
            }
        CHECK(bad_zero == 0, "%s M=0: %d shift/scale dtable entries are not 0", kind_name[kind], bad_zero);
        CHECK(bad_kept == 0, "%s M=0: %d entries of other dtable chunks were written", kind_name[kind], bad_kept);
    }
    free(dt0);
    h3s_tensor_free(&y);
    h3s_tensor_free(&dx);
    h3s_tensor_free(&dw);
    h3s_tensor_free(&dt);
    case_free(&c);
}

/* dtable chunks other than shift/scale keep their (poisoned) bytes; table rows that no
 * index names get exactly 0 in the shift and scale chunks; the written chunks match golden. */
static void check_dtable_chunks(void) {
    const int64_t M = 50, H = 37, R = 4, C = 6;
    norm_case c;
    case_init(&c, NORM_MOD_BF16, M, H, R, 777);
    int64_t *idx = (int64_t *)c.index.data;
    for (int64_t m = 0; m < M; m++)
        idx[m] = (m % 3 == 0) ? 2 : 0; /* rows 1 and 3 are never named */
    h3s_tensor dt = h3t_alloc2(H3S_F32, R, C * H), dx = h3t_alloc2(H3S_F32, M, H), dw = h3t_alloc1(H3S_F32, H);
    h3t_poison(&dt);
    void *dt0 = h3t_snapshot(&dt);
    CHECK_OK(h3s_rmsnorm_backward(&c.x, &c.w, &c.mod, EPS, &c.dy, &dx, &dw, &dt));
    int bad_kept = 0, bad_unnamed = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C * H; j++) {
            int64_t chunk = j / H, i = r * C * H + j;
            float v = ((float *)dt.data)[i];
            if (chunk == 3 || chunk == 4) {
                if (r == 1 || r == 3) bad_unnamed += v != 0.0f;
            } else {
                bad_kept += memcmp(&v, (float *)dt0 + i, 4) != 0;
            }
        }
    CHECK(bad_kept == 0, "%d entries of dtable chunks other than shift/scale were written", bad_kept);
    CHECK(bad_unnamed == 0, "%d shift/scale entries of unnamed table rows are not 0", bad_unnamed);
    /* golden of the written chunks */
    h3s_tensor x64 = h3t_to_f64(&c.x), w64 = h3t_to_f64(&c.w), t64 = h3t_to_f64(&c.table), dy64 = h3t_to_f64(&c.dy);
    h3s_tensor dt64 = h3t_alloc2(H3S_F64, R, C * H);
    h3s_modulation mod64 = c.mod;
    mod64.table = &t64;
    CHECK_OK(h3s_rmsnorm_backward(&x64, &w64, &mod64, EPS, &dy64, NULL, NULL, &dt64));
    for (int ch = 3; ch <= 4; ch++) {
        h3s_tensor a = h3t_columns(&dt, ch * H, H), b = h3t_columns(&dt64, ch * H, H);
        double e = h3t_rel_l2(&a, &b);
        CHECK(e <= BOUND_FOLD, "dtable chunk %d rel-L2 %.3g", ch, e);
        h3s_tensor_free(&a);
        h3s_tensor_free(&b);
    }
    free(dt0);
    h3s_tensor_free(&dt);
    h3s_tensor_free(&dx);
    h3s_tensor_free(&dw);
    h3s_tensor_free(&x64);
    h3s_tensor_free(&w64);
    h3s_tensor_free(&t64);
    h3s_tensor_free(&dy64);
    h3s_tensor_free(&dt64);
    case_free(&c);
}

/* final_norm is rmsnorm with shift chunk 0, scale chunk 1 and F32 y: the same bits. */
static void check_final_is_rmsnorm(void) {
    norm_case c;
    norm_result f;
    case_init(&c, NORM_FINAL, 300, 60, 3, 999);
    case_run(&c, 0, &f);
    norm_result r;
    memset(&r, 0, sizeof r);
    r.y = h3t_alloc2(H3S_F32, 300, 60);
    r.dx = h3t_alloc2(H3S_F32, 300, 60);
    r.dw = h3t_alloc1(H3S_F32, 60);
    r.dtable = h3t_alloc2(H3S_F32, 3, 120);
    CHECK_OK(h3s_rmsnorm_forward(&c.x, &c.w, &c.mod, EPS, &r.y));
    CHECK_OK(h3s_rmsnorm_backward(&c.x, &c.w, &c.mod, EPS, &c.dy, &r.dx, &r.dw, &r.dtable));
    CHECK(results_equal(&f, &r, &c), "final_norm differs from rmsnorm(shift 0, scale 1, y F32)");
    result_free(&f);
    result_free(&r);
    case_free(&c);
}

/* ---------------------------------------------------------------- 6. bad input ------ */

static void check_bad_rmsnorm(void) {
    const int64_t M = 6, H = 8, R = 3, C = 6;
    norm_case c;
    case_init(&c, NORM_MOD_BF16, M, H, R, 1234);
    h3s_tensor y = h3t_alloc2(H3S_BF16, M, H), dx = h3t_alloc2(H3S_F32, M, H), dw = h3t_alloc1(H3S_F32, H);
    h3s_tensor dt = h3t_alloc2(H3S_F32, R, C * H);
    h3t_outs fo = {{&y}, {0}}, bo = {{&dx, &dw, &dt}, {0}};
    h3s_modulation mod = c.mod;

    /* forward */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(NULL, &c.w, &mod, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, NULL));
    h3s_tensor x32 = h3t_alloc2(H3S_F32, M, H), x64 = h3t_to_f64(&c.x), w64 = h3t_to_f64(&c.w);
    h3s_tensor y64 = h3t_alloc2(H3S_F64, M, H), y16 = h3t_alloc2(H3S_F16, M, H);
    h3t_outs fo64 = {{&y64}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_rmsnorm_forward(&x32, &c.w, &mod, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_rmsnorm_forward(&c.x, &w64, &mod, EPS, &y)); /* strict x, golden w */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo64,
                          h3s_rmsnorm_forward(&x64, &c.w, NULL, EPS, &y64)); /* golden x, strict w */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo64,
                          h3s_rmsnorm_forward(&x64, &w64, &mod, EPS, &y64)); /* golden x, strict table */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo,
                          h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y64)); /* strict x, golden y */
    h3t_outs fo16 = {{&y16}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo16, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y16));
    h3s_tensor wbad = h3t_alloc1(H3S_BF16, H + 1), ybad = h3t_alloc2(H3S_BF16, M, H + 1);
    h3s_tensor ybad2 = h3t_alloc2(H3S_BF16, M + 1, H);
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_rmsnorm_forward(&c.x, &wbad, &mod, EPS, &y));
    h3t_outs fob = {{&ybad}, {0}}, fob2 = {{&ybad2}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fob, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &ybad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fob2, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &ybad2));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, 0.0, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, -1e-5, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, NAN, &y));
    /* eps is added as (float)eps: finite and > 0 in double is not enough (1e-300 rounds to 0, 1e39 and 1e300 to
     * +inf, which would silently change y); FLT_MAX itself is accepted */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, 1e-300, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, 1e39, &y));
    CHECK(strstr(h3s_last_error(), "FP32"), "eps 1e39: %s", h3s_last_error());
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, 1e300, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, 1e39, &c.dy, &dx, &dw, &dt));
    CHECK_OK(h3s_rmsnorm_forward(&c.x, &c.w, &mod, 3.4028234663852886e38, &y));
    /* modulation */
    h3s_tensor tbad = h3t_alloc2(H3S_BF16, R, C * H + 3);
    mod.table = &tbad;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod.table = NULL;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    mod.index = NULL;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    mod.shift_chunk = (int)C;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    mod.scale_chunk = -1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    mod.scale_chunk = mod.shift_chunk;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    int64_t *idx = (int64_t *)c.index.data, keep = idx[5];
    idx[5] = R; /* one past the end */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dt));
    idx[5] = -1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dt));
    idx[5] = keep;
    h3s_tensor ishort = make_index(M - 1, R, 5, -1), if32 = h3t_alloc1(H3S_F32, M);
    mod.index = &ishort;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dt));
    mod.index = &if32;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    mod = c.mod;
    /* host/device mix (fails in validation, before any dispatch) */
    y.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &fo, h3s_rmsnorm_forward(&c.x, &c.w, &mod, EPS, &y));
    y.device = 0;

    /* backward */
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, NULL, &dx, &dw, &dt));
    h3s_tensor dy16 = h3t_alloc2(H3S_BF16, M, H), dy64 = h3t_to_f64(&c.dy), dxbad = h3t_alloc2(H3S_F32, M, H + 1);
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &dy16, &dx, &dw, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &dy64, &dx, &dw, &dt));
    h3t_outs bob = {{&dxbad, &dw, &dt}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bob, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dxbad, &dw, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_rmsnorm_backward(&c.x, NULL, &mod, EPS, &c.dy, &dx, &dw, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_rmsnorm_backward(&c.x, &c.w, NULL, EPS, &c.dy, &dx, &dw, &dt));
    h3s_tensor dtbad = h3t_alloc2(H3S_F32, R + 1, C * H), dt16 = h3t_alloc2(H3S_BF16, R, C * H);
    h3t_outs bot = {{&dx, &dw, &dtbad}, {0}}, bot16 = {{&dx, &dw, &dt16}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bot, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dtbad));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bot16, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dt16));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, 0.0, &c.dy, &dx, &dw, &dt));
    dw.device = 1;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &bo, h3s_rmsnorm_backward(&c.x, &c.w, &mod, EPS, &c.dy, &dx, &dw, &dt));
    dw.device = 0;

    h3s_tensor *frees[] = {&y,    &dx,    &dw,   &dt,     &x32,  &x64,  &w64,  &y64,   &y16,   &wbad,
                           &ybad, &ybad2, &tbad, &ishort, &if32, &dy16, &dy64, &dxbad, &dtbad, &dt16};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
    case_free(&c);
}

static void check_bad_final_norm(void) {
    const int64_t M = 5, H = 8, T = 2;
    norm_case c;
    case_init(&c, NORM_FINAL, M, H, T, 4321);
    h3s_tensor y = h3t_alloc2(H3S_F32, M, H), ybf = h3t_alloc2(H3S_BF16, M, H), dx = h3t_alloc2(H3S_F32, M, H);
    h3s_tensor dw = h3t_alloc1(H3S_F32, H), dt = h3t_alloc2(H3S_F32, T, 2 * H), t3 = h3t_alloc2(H3S_BF16, T, 3 * H);
    h3t_outs fo = {{&y}, {0}}, fbf = {{&ybf}, {0}}, bo = {{&dx, &dw, &dt}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_final_norm_forward(&c.x, &c.w, &t3, &c.index, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fbf, h3s_final_norm_forward(&c.x, &c.w, &c.table, &c.index, EPS, &ybf));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_final_norm_forward(&c.x, NULL, &c.table, &c.index, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_final_norm_forward(&c.x, &c.w, NULL, &c.index, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_final_norm_forward(&c.x, &c.w, &c.table, NULL, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_final_norm_forward(NULL, &c.w, &c.table, &c.index, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_final_norm_forward(&c.x, &c.w, &c.table, &c.index, 1e39, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &c.index, 1e300, &c.dy, &dx, &dw, &dt));
    int64_t *idx = (int64_t *)c.index.data, keep = idx[2];
    idx[2] = T;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &fo, h3s_final_norm_forward(&c.x, &c.w, &c.table, &c.index, EPS, &y));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &c.index, EPS, &c.dy, &dx, &dw, &dt));
    idx[2] = -3;
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INDEX, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &c.index, EPS, &c.dy, &dx, &dw, &dt));
    idx[2] = keep;
    h3s_tensor ilong = make_index(M + 1, T, 3, -1), dy64 = h3t_to_f64(&c.dy);
    CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &ilong, EPS, &c.dy, &dx, &dw, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &c.index, EPS, &dy64, &dx, &dw, &dt));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo,
                          h3s_final_norm_backward(&c.x, &c.w, &c.table, &c.index, EPS, NULL, &dx, &dw, &dt));
    h3s_tensor *frees[] = {&y, &ybf, &dx, &dw, &dt, &t3, &ilong, &dy64};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
    case_free(&c);
}

/* ---------------------------------------------------------------- per-head norm ----- */

typedef struct head_case {
    int64_t M, heads, D;
    h3s_tensor x, w, dy;
} head_case;

static void head_init(head_case *c, int64_t M, int64_t heads, int64_t D, uint64_t seed) {
    c->M = M;
    c->heads = heads;
    c->D = D;
    c->x = h3t_normal2(H3S_BF16, M, heads * D, seed, 2.0f);
    c->w = h3t_normal1(H3S_BF16, D, seed + 1, 0.8f);
    c->dy = h3t_normal2(H3S_F32, M, heads * D, seed + 2, 1.0f);
}

static void head_free(head_case *c) {
    h3s_tensor_free(&c->x);
    h3s_tensor_free(&c->w);
    h3s_tensor_free(&c->dy);
}

static void head_run(const head_case *c, int golden, norm_result *r) {
    h3s_tensor x = c->x, w = c->w, dy = c->dy;
    if (golden) {
        x = h3t_to_f64(&c->x);
        w = h3t_to_f64(&c->w);
        dy = h3t_to_f64(&c->dy);
    }
    memset(r, 0, sizeof *r);
    r->y = h3t_alloc2(golden ? H3S_F64 : H3S_BF16, c->M, c->heads * c->D);
    r->dx = h3t_alloc2(golden ? H3S_F64 : H3S_F32, c->M, c->heads * c->D);
    r->dw = h3t_alloc1(golden ? H3S_F64 : H3S_F32, c->D);
    CHECK_OK(h3s_head_rmsnorm_forward(&x, c->heads, &w, EPS, &r->y));
    CHECK_OK(h3s_head_rmsnorm_backward(&x, c->heads, &w, EPS, &dy, &r->dx, &r->dw));
    if (golden) {
        h3s_tensor_free(&x);
        h3s_tensor_free(&w);
        h3s_tensor_free(&dy);
    }
}

static int head_equal(const norm_result *a, const norm_result *b) {
    return h3t_bitwise_equal(&a->y, &b->y) && h3t_bitwise_equal(&a->dx, &b->dx) && h3t_bitwise_equal(&a->dw, &b->dw);
}

/* head_rmsnorm_backward_rounded on the host: dx and dw as the plain backward, dx_bf16 = dx converted to BF16; refused
 * for the golden variant, without dx, and over an operand. */
static void check_head_rounded(void) {
    const int64_t M = 30, heads = 3, D = 40, Wd = heads * D;
    h3s_tensor x = h3t_normal2(H3S_BF16, M, Wd, 950, 1.5f), w = h3t_normal1(H3S_BF16, D, 951, 0.8f);
    h3s_tensor dy = h3t_normal2(H3S_F32, M, Wd, 952, 1.0f);
    h3s_tensor dx1 = h3t_alloc2(H3S_F32, M, Wd), dx2 = h3t_alloc2(H3S_F32, M, Wd);
    h3s_tensor dw1 = h3t_alloc1(H3S_F32, D), dw2 = h3t_alloc1(H3S_F32, D);
    h3s_tensor dxb = h3t_alloc2(H3S_BF16, M, Wd), want = h3t_alloc2(H3S_BF16, M, Wd);
    CHECK_OK(h3s_head_rmsnorm_backward(&x, heads, &w, EPS, &dy, &dx1, &dw1));
    CHECK_OK(h3s_head_rmsnorm_backward_rounded(&x, heads, &w, EPS, &dy, &dx2, &dxb, &dw2));
    CHECK_OK(h3s_tensor_convert(&dx1, &want));
    CHECK(h3t_bitwise_equal(&dx1, &dx2) && h3t_bitwise_equal(&dw1, &dw2) && h3t_bitwise_equal(&dxb, &want),
          "head_rmsnorm_backward_rounded: not the plain backward with dx rounded to BF16");
    h3s_tensor x64 = h3t_to_f64(&x), w64 = h3t_to_f64(&w), dy64 = h3t_to_f64(&dy), dx64 = h3t_alloc2(H3S_F64, M, Wd);
    h3s_tensor xview = x; /* dx_bf16 over x's bytes */
    h3t_outs oo = {{&dx2, &dxb, &dx64}, {0}};
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_head_rmsnorm_backward_rounded(&x64, heads, &w64, EPS, &dy64, &dx64, &dxb, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_head_rmsnorm_backward_rounded(&x, heads, &w, EPS, &dy, NULL, &dxb, NULL));
    CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                          h3s_head_rmsnorm_backward_rounded(&x, heads, &w, EPS, &dy, &dx2, &xview, NULL));
    h3s_tensor *frees[] = {&x, &w, &dy, &dx1, &dx2, &dw1, &dw2, &dxb, &want, &x64, &w64, &dy64, &dx64};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
        h3s_tensor_free(frees[i]);
}

static void check_head(void) {
    /* 1. accuracy; D = 37, 60 (non-powers of two), M = 50 and M = 1.  dw folds M * heads
     * contributions (n <= 200): the fold bound above with n = 200 is (D/2 + 5 + 199 * 14)
     * u_f32 = 1.7e-4 worst-case-like; random contributions give ~ sqrt(n) u_f32.  Bound 2e-4. */
    int64_t shapes[4][3] = {{50, 3, 37}, {50, 4, 60}, {1, 3, 37}, {1, 2, 60}};
    for (int i = 0; i < 4; i++) {
        head_case c;
        norm_result s, g;
        head_init(&c, shapes[i][0], shapes[i][1], shapes[i][2], 70 + (uint64_t)i);
        head_run(&c, 0, &s);
        head_run(&c, 1, &g);
        char what[96];
        snprintf(what, sizeof what, "head M=%lld heads=%lld D=%lld y", (long long)c.M, (long long)c.heads,
                 (long long)c.D);
        double e = h3t_measured(what, h3t_rel_l2(&s.y, &g.y), BOUND_Y_BF16);
        CHECK(e <= BOUND_Y_BF16, "head M=%lld D=%lld: y rel-L2 %.3g", (long long)c.M, (long long)c.D, e);
        double f = h3t_frac_correctly_rounded(&s.y, &g.y);
        CHECK(f >= MIN_CORRECTLY_ROUNDED, "head D=%lld: only %.4f correctly rounded", (long long)c.D, f);
        snprintf(what, sizeof what, "head M=%lld D=%lld dx", (long long)c.M, (long long)c.D);
        e = h3t_measured(what, h3t_rel_l2(&s.dx, &g.dx), BOUND_DX);
        CHECK(e <= BOUND_DX, "head M=%lld D=%lld: dx rel-L2 %.3g", (long long)c.M, (long long)c.D, e);
        snprintf(what, sizeof what, "head M=%lld D=%lld dw", (long long)c.M, (long long)c.D);
        e = h3t_measured(what, h3t_rel_l2(&s.dw, &g.dw), 2e-4);
        CHECK(e <= 2e-4, "head M=%lld D=%lld: dw rel-L2 %.3g", (long long)c.M, (long long)c.D, e);
        result_free(&s);
        result_free(&g);
        head_free(&c);
    }

    /* 2. repeat, 5. threads (M = 600: three tiles; D = 100: two column blocks), and the
     * documented dw order: tiles of 256 token rows, inside a tile one chain over (row, head)
     * pairs, row-major, tile partials folded in ascending order. */
    {
        head_case c;
        norm_result r[4];
        head_init(&c, 600, 3, 100, 808);
        int threads[3] = {1, 2, 4};
        for (int i = 0; i < 3; i++) {
            h3s_set_num_threads(threads[i]);
            head_run(&c, 0, &r[i]);
        }
        h3s_set_num_threads(1);
        head_run(&c, 0, &r[3]);
        CHECK(head_equal(&r[0], &r[3]), "head: two identical calls differ");
        for (int i = 1; i < 3; i++)
            CHECK(head_equal(&r[0], &r[i]), "head: %d threads differ from 1", threads[i]);
        const int64_t M = 600, Hh = 3, D = 100;
        double ref_ok = 1;
        float total[100], part[100];
        for (int64_t t0 = 0; t0 < M; t0 += 256) {
            int64_t t1 = t0 + 256 < M ? t0 + 256 : M;
            int first = 1;
            for (int64_t m = t0; m < t1; m++)
                for (int64_t h = 0; h < Hh; h++) {
                    const uint16_t *xr = (const uint16_t *)c.x.data + (m * Hh + h) * D;
                    const float *dyr = (const float *)c.dy.data + (m * Hh + h) * D;
                    float ss = 0.0f;
                    for (int64_t d = 0; d < D; d++)
                        ss = fmaf(h3s_bf16_value(xr[d]), h3s_bf16_value(xr[d]), ss);
                    float inv = 1.0f / sqrtf(ss / (float)D + (float)EPS);
                    for (int64_t d = 0; d < D; d++) {
                        float v = dyr[d] * (h3s_bf16_value(xr[d]) * inv);
                        part[d] = first ? v : part[d] + v;
                    }
                    first = 0;
                }
            for (int64_t d = 0; d < D; d++)
                total[d] = t0 == 0 ? part[d] : total[d] + part[d];
        }
        ref_ok = memcmp(total, r[0].dw.data, sizeof total) == 0;
        CHECK(ref_ok, "head dw does not follow the documented order (256-row tiles, row then head)");
        for (int i = 0; i < 4; i++)
            result_free(&r[i]);
        head_free(&c);
    }

    /* 3. rows: row 211 of M=300 == row 3 of M=7 == row 0 of M=1 (y, dx). */
    {
        head_case big, mid, one;
        head_init(&big, 300, 4, 60, 900);
        head_init(&mid, 7, 4, 60, 901);
        head_init(&one, 1, 4, 60, 902);
        memcpy(mid.w.data, big.w.data, h3s_tensor_nbytes(&big.w));
        memcpy(one.w.data, big.w.data, h3s_tensor_nbytes(&big.w));
        size_t rx = 2 * 240, rd = 4 * 240;
        memcpy((char *)mid.x.data + 3 * rx, (char *)big.x.data + 211 * rx, rx);
        memcpy((char *)one.x.data, (char *)big.x.data + 211 * rx, rx);
        memcpy((char *)mid.dy.data + 3 * rd, (char *)big.dy.data + 211 * rd, rd);
        memcpy((char *)one.dy.data, (char *)big.dy.data + 211 * rd, rd);
        norm_result rb, rm, r1;
        head_run(&big, 0, &rb);
        head_run(&mid, 0, &rm);
        head_run(&one, 0, &r1);
        CHECK(h3t_rows_equal(&rb.y, 211, &rm.y, 3, 1) && h3t_rows_equal(&rb.y, 211, &r1.y, 0, 1),
              "head: y row depends on M or position");
        CHECK(h3t_rows_equal(&rb.dx, 211, &rm.dx, 3, 1) && h3t_rows_equal(&rb.dx, 211, &r1.dx, 0, 1),
              "head: dx row depends on M or position");
        result_free(&rb);
        result_free(&rm);
        result_free(&r1);
        head_free(&big);
        head_free(&mid);
        head_free(&one);
    }

    /* 7. M = 0: success, dw = 0. */
    {
        head_case c;
        head_init(&c, 0, 2, 37, 950);
        h3s_tensor y = h3t_alloc2(H3S_BF16, 0, 74), dx = h3t_alloc2(H3S_F32, 0, 74), dw = h3t_alloc1(H3S_F32, 37);
        h3t_poison(&dw);
        CHECK_OK(h3s_head_rmsnorm_forward(&c.x, 2, &c.w, EPS, &y));
        CHECK_OK(h3s_head_rmsnorm_backward(&c.x, 2, &c.w, EPS, &c.dy, &dx, &dw));
        int nz = 0;
        for (int d = 0; d < 37; d++)
            nz += ((float *)dw.data)[d] != 0.0f;
        CHECK(nz == 0, "head M=0: %d dw entries not 0", nz);
        h3s_tensor_free(&y);
        h3s_tensor_free(&dx);
        h3s_tensor_free(&dw);
        head_free(&c);
    }

    /* 6. bad input */
    {
        head_case c;
        head_init(&c, 4, 3, 8, 960);
        h3s_tensor y = h3t_alloc2(H3S_BF16, 4, 24), dx = h3t_alloc2(H3S_F32, 4, 24), dw = h3t_alloc1(H3S_F32, 8);
        h3s_tensor y32 = h3t_alloc2(H3S_F32, 4, 24), wbad = h3t_alloc1(H3S_BF16, 9), w64 = h3t_to_f64(&c.w);
        h3s_tensor dwbad = h3t_alloc1(H3S_F32, 24), dy16 = h3t_alloc2(H3S_BF16, 4, 24);
        h3t_outs fo = {{&y}, {0}}, f32o = {{&y32}, {0}}, bo = {{&dx, &dw}, {0}}, bob = {{&dx, &dwbad}, {0}};
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(&c.x, 0, &c.w, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_head_rmsnorm_forward(&c.x, 5, &c.w, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &fo, h3s_head_rmsnorm_forward(&c.x, 3, &wbad, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(&c.x, 3, NULL, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &fo, h3s_head_rmsnorm_forward(&c.x, 3, &w64, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &f32o, h3s_head_rmsnorm_forward(&c.x, 3, &c.w, EPS, &y32));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(&c.x, 3, &c.w, 0.0, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(&c.x, 3, &c.w, 1e39, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(&c.x, 3, &c.w, 1e-300, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_head_rmsnorm_backward(&c.x, 3, &c.w, 1e300, &c.dy, &dx, &dw));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &fo, h3s_head_rmsnorm_forward(NULL, 3, &c.w, EPS, &y));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &bo, h3s_head_rmsnorm_backward(&c.x, 3, &c.w, EPS, NULL, &dx, &dw));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DTYPE, &bo, h3s_head_rmsnorm_backward(&c.x, 3, &c.w, EPS, &dy16, &dx, &dw));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bob, h3s_head_rmsnorm_backward(&c.x, 3, &c.w, EPS, &c.dy, &dx, &dwbad));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &bo, h3s_head_rmsnorm_backward(&c.x, 6, &c.w, EPS, &c.dy, &dx, &dw));
        dx.device = 1;
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &bo, h3s_head_rmsnorm_backward(&c.x, 3, &c.w, EPS, &c.dy, &dx, &dw));
        dx.device = 0;
        h3s_tensor *frees[] = {&y, &dx, &dw, &y32, &wbad, &w64, &dwbad, &dy16};
        for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
            h3s_tensor_free(frees[i]);
        head_free(&c);
    }
}

/* rmsnorm_backward_add: dx = dx_add + the backward's dx, the bits of the backward followed by grad_add(dx_add, dx),
 * strict and golden, every other output unchanged; dx_add without dx, of another shape or over dx is refused. */
static void check_backward_add(norm_kind kind) {
    norm_case c;
    case_init(&c, kind, 40, 52, 3, 900);
    for (int golden = 0; golden < 2; golden++) {
        h3s_tensor x = golden ? h3t_to_f64(&c.x) : c.x, dy = golden ? h3t_to_f64(&c.dy) : c.dy;
        h3s_tensor w = c.has_w && golden ? h3t_to_f64(&c.w) : c.w;
        h3s_tensor table = c.has_mod && golden ? h3t_to_f64(&c.table) : c.table;
        h3s_modulation mod = c.mod;
        mod.table = &table;
        const h3s_tensor *wp = c.has_w ? &w : NULL;
        const h3s_modulation *mp = c.has_mod ? &mod : NULL;
        const h3s_dtype g = golden ? H3S_F64 : H3S_F32;
        h3s_tensor add = h3t_normal2(H3S_F32, c.M, c.H, 901, 1.0f);
        if (golden) {
            h3s_tensor t = h3t_to_f64(&add);
            h3s_tensor_free(&add);
            add = t;
        }
        h3s_tensor dx1 = h3t_alloc2(g, c.M, c.H), dx2 = h3t_alloc2(g, c.M, c.H);
        h3s_tensor dw1 = h3t_alloc1(g, c.H), dw2 = h3t_alloc1(g, c.H);
        h3s_tensor dt1 = h3t_alloc2(g, c.R, c.C * c.H), dt2 = h3t_alloc2(g, c.R, c.C * c.H);
        h3s_tensor *dw1p = c.has_w ? &dw1 : NULL, *dw2p = c.has_w ? &dw2 : NULL;
        h3s_tensor *dt1p = c.has_mod ? &dt1 : NULL, *dt2p = c.has_mod ? &dt2 : NULL;
        CHECK_OK(h3s_rmsnorm_backward(&x, wp, mp, EPS, &dy, &dx1, dw1p, dt1p));
        CHECK_OK(h3s_grad_add(&add, &dx1, &dx1));
        CHECK_OK(h3s_rmsnorm_backward_add(&x, wp, mp, EPS, &dy, &add, &dx2, dw2p, dt2p));
        CHECK(h3t_bitwise_equal(&dx1, &dx2) && h3t_bitwise_equal(&dw1, &dw2) && h3t_bitwise_equal(&dt1, &dt2),
              "rmsnorm_backward_add (%s, %s): not the backward followed by grad_add", kind_name[kind],
              golden ? "golden" : "strict");
        h3s_tensor wrong = h3t_alloc2(g, c.M + 1, c.H);
        h3t_outs oo = {{&dx2}, {0}};
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                              h3s_rmsnorm_backward_add(&x, wp, mp, EPS, &dy, &add, NULL, NULL, NULL));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_SHAPE, &oo,
                              h3s_rmsnorm_backward_add(&x, wp, mp, EPS, &dy, &wrong, &dx2, NULL, NULL));
        CHECK_FAILS_UNWRITTEN(H3S_ERR_INVALID, &oo,
                              h3s_rmsnorm_backward_add(&x, wp, mp, EPS, &dy, &dx2, &dx2, NULL, NULL));
        h3s_tensor add_dev = add; /* dx_add said to be in device memory, dx on the host */
        add_dev.device = 1;
        CHECK_FAILS_UNWRITTEN(H3S_ERR_DEVICE, &oo,
                              h3s_rmsnorm_backward_add(&x, wp, mp, EPS, &dy, &add_dev, &dx2, NULL, NULL));
        h3s_tensor *frees[] = {&add, &dx1, &dx2, &dw1, &dw2, &dt1, &dt2, &wrong};
        for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
            h3s_tensor_free(frees[i]);
        if (golden) {
            h3s_tensor_free(&x), h3s_tensor_free(&dy);
            if (c.has_w) h3s_tensor_free(&w);
            if (c.has_mod) h3s_tensor_free(&table);
        }
    }
    case_free(&c);
}

/* y may overlap no operand (a row of y written while another thread still read x or a modulation row under it made
 * the bits depend on the thread count; y == x was accepted too): refused naming both, every operand as it was. */
static void check_overlap_refused(void) {
    norm_case c, f;
    case_init(&c, NORM_MOD_BF16, 6, 8, 3, 990);
    case_init(&f, NORM_FINAL, 2, 8, 8, 991);
    head_case hc;
    head_init(&hc, 4, 2, 8, 992);
    void *x0 = h3t_snapshot(&c.x), *t0 = h3t_snapshot(&c.table), *f0 = h3t_snapshot(&f.table),
         *h0 = h3t_snapshot(&hc.x);
    h3s_tensor y_x = h3s_tensor_view(c.x.data, H3S_BF16, 2, c.x.shape); /* y == x */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rmsnorm_forward(&c.x, &c.w, &c.mod, EPS, &y_x));
    CHECK(strstr(h3s_last_error(), "rmsnorm_forward: y overlaps x"), "names both: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rmsnorm_forward(&c.x, NULL, NULL, EPS, &y_x));         /* a plain norm too */
    h3s_tensor y_t = h3s_tensor_view((uint16_t *)c.table.data + 8, H3S_BF16, 2, c.x.shape); /* inside the table */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rmsnorm_forward(&c.x, &c.w, &c.mod, EPS, &y_t));
    CHECK(strstr(h3s_last_error(), "y overlaps table"), "names both: %s", h3s_last_error());
    h3s_tensor fy_t = h3s_tensor_view(f.table.data, H3S_F32, 2, f.x.shape);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_final_norm_forward(&f.x, &f.w, &f.table, &f.index, EPS, &fy_t));
    CHECK(strstr(h3s_last_error(), "final_norm_forward: y overlaps table"), "names both: %s", h3s_last_error());
    h3s_tensor hy_x = h3s_tensor_view(hc.x.data, H3S_BF16, 2, hc.x.shape);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_head_rmsnorm_forward(&hc.x, hc.heads, &hc.w, EPS, &hy_x));
    CHECK(strstr(h3s_last_error(), "head_rmsnorm_forward: y overlaps x"), "names both: %s", h3s_last_error());
    CHECK(!memcmp(c.x.data, x0, h3s_tensor_nbytes(&c.x)) && !memcmp(c.table.data, t0, h3s_tensor_nbytes(&c.table)) &&
              !memcmp(f.table.data, f0, h3s_tensor_nbytes(&f.table)) &&
              !memcmp(hc.x.data, h0, h3s_tensor_nbytes(&hc.x)),
          "a refused norm wrote over an operand");
    free(x0);
    free(t0);
    free(f0);
    free(h0);
    head_free(&hc);
    case_free(&c);
    case_free(&f);
}

/* The backward in place (dx == dy, as the CUDA backend also takes it) gives the bits of a separate dx, and the same
 * dtable and dw: the shift chunk (the fold of dy) used to read dy after dx was written over it.  Strict and golden,
 * rmsnorm and final norm.  A partial overlap of dx with dy, or any overlap of dx, dw or dtable with another operand,
 * is refused with every operand as it was. */
static void check_backward_in_place(norm_kind kind, int golden) {
    norm_case c;
    case_init(&c, kind, 24, 16, 5, 1200 + (uint64_t)kind);
    h3s_tensor x = golden ? h3t_to_f64(&c.x) : c.x, w = golden && c.has_w ? h3t_to_f64(&c.w) : c.w;
    h3s_tensor table = golden && c.has_mod ? h3t_to_f64(&c.table) : c.table;
    h3s_tensor dy = golden ? h3t_to_f64(&c.dy) : c.dy;
    h3s_dtype g = golden ? H3S_F64 : H3S_F32;
    h3s_modulation mod = c.mod;
    mod.table = &table;
    const h3s_tensor *wp = c.has_w ? &w : NULL;
    const h3s_modulation *mp = c.has_mod ? &mod : NULL;
    h3s_tensor dx = h3t_alloc2(g, c.M, c.H), dw = h3t_alloc1(g, c.H), dt = h3t_alloc2(g, c.R, c.C * c.H);
    h3s_tensor dw2 = h3t_alloc1(g, c.H), dt2 = h3t_alloc2(g, c.R, c.C * c.H);
    h3s_tensor io = h3t_alloc2(g, c.M, c.H);
    memcpy(io.data, dy.data, h3s_tensor_nbytes(&dy));
    h3s_tensor *dwp = c.has_w ? &dw : NULL, *dtp = c.has_mod ? &dt : NULL;
    h3s_tensor *dwp2 = c.has_w ? &dw2 : NULL, *dtp2 = c.has_mod ? &dt2 : NULL;
#define BWD(dy_, dx_, dw_, dt_)                                                                                        \
    (kind == NORM_FINAL ? h3s_final_norm_backward(&x, wp, &table, &c.index, EPS, dy_, dx_, dw_, dt_)                   \
                        : h3s_rmsnorm_backward(&x, wp, mp, EPS, dy_, dx_, dw_, dt_))
    CHECK_OK(BWD(&dy, &dx, dwp, dtp));
    CHECK_OK(BWD(&io, &io, dwp2, dtp2));
    CHECK(h3t_bitwise_equal(&io, &dx), "%s%s: dx in place differs", kind_name[kind], golden ? " golden" : "");
    if (c.has_w) CHECK(h3t_bitwise_equal(&dw, &dw2), "%s: dw with dx in place differs", kind_name[kind]);
    if (c.has_mod)
        CHECK(h3t_bitwise_equal(&dt, &dt2), "%s%s: dtable with dx in place differs", kind_name[kind],
              golden ? " golden" : "");
    /* overlaps refused: dx one row into dy; dx over x's bytes; dtable over dy */
    void *dy0 = h3t_snapshot(&dy);
    size_t es = h3s_dtype_size(g);
    h3s_tensor big = h3t_alloc2(g, c.M + 1, c.H);
    memcpy(big.data, dy.data, h3s_tensor_nbytes(&dy));
    h3s_tensor dy_in_big = h3s_tensor_view(big.data, g, 2, dy.shape);
    h3s_tensor dx_in_big = h3s_tensor_view((char *)big.data + (size_t)c.H * es, g, 2, dy.shape);
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&dy_in_big, &dx_in_big, dwp, dtp)); /* dx one row past dy: a partial overlap */
    CHECK(strstr(h3s_last_error(), "dx overlaps dy"), "names both: %s", h3s_last_error());
    h3s_tensor dx_x = h3s_tensor_view(x.data, g, 2, dy.shape); /* over x's bytes (and past them: x is BF16) */
    CHECK_FAILS(H3S_ERR_INVALID, BWD(&dy, &dx_x, dwp, dtp));
    /* the golden x has dx's bytes exactly; the strict BF16 x is half of them, the rest past it (dy may lie there) */
    CHECK(strstr(h3s_last_error(), golden ? "dx overlaps x" : "dx overlaps"), "names both: %s", h3s_last_error());
    if (c.has_mod) {
        h3s_tensor dt_dy = h3s_tensor_view(dy.data, g, 2, dt.shape);
        if (h3s_tensor_nbytes(&dt_dy) <= h3s_tensor_nbytes(&dy)) {
            CHECK_FAILS(H3S_ERR_INVALID, BWD(&dy, &dx, dwp, &dt_dy));
            CHECK(strstr(h3s_last_error(), "dtable overlaps dy"), "names both: %s", h3s_last_error());
        }
    }
    CHECK(!memcmp(dy.data, dy0, h3s_tensor_nbytes(&dy)), "a refused backward wrote over dy");
    free(dy0);
#undef BWD
    h3s_tensor_free(&big);
    h3s_tensor_free(&dx);
    h3s_tensor_free(&dw);
    h3s_tensor_free(&dt);
    h3s_tensor_free(&dw2);
    h3s_tensor_free(&dt2);
    h3s_tensor_free(&io);
    if (golden) {
        h3s_tensor_free(&x);
        h3s_tensor_free(&dy);
        if (c.has_w) h3s_tensor_free(&w);
        if (c.has_mod) h3s_tensor_free(&table);
    }
    case_free(&c);
}

int main(void) {
    /* One thread except where threads are the subject (thread invariance, repeat): OpenMP
     * barriers on an oversubscribed 2-core CI runner cost milliseconds each. */
    h3s_set_num_threads(1);
    for (int k = 0; k < NORM_KINDS; k++) {
        check_accuracy((norm_kind)k, 50, 60);
        check_accuracy((norm_kind)k, 50, 37);
        check_accuracy((norm_kind)k, 1, 60);
        check_accuracy((norm_kind)k, 60, 100);
        check_repeat((norm_kind)k);
        check_row_invariance((norm_kind)k);
        check_batch_invariance((norm_kind)k);
        check_thread_invariance((norm_kind)k);
        check_zero_rows((norm_kind)k);
        check_documented_formula((norm_kind)k);
        if (k != NORM_FINAL) check_backward_add((norm_kind)k);
    }
    check_dtable_chunks();
    check_final_is_rmsnorm();
    check_bad_rmsnorm();
    check_bad_final_norm();
    check_head();
    check_head_rounded();
    check_overlap_refused();
    for (int k = 0; k < NORM_KINDS; k++) {
        check_backward_in_place((norm_kind)k, 0);
        check_backward_in_place((norm_kind)k, 1);
    }
    return h3t_finish("test_rmsnorm");
}

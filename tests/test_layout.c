/* Packed layout: counts, tags, index lists, float64 rotary positions (bit-exact against the reference's
 * numpy/torch arithmetic), keyframes, padding, option validation; row timesteps; seeded inputs. */
#include "sample/layout.h"
#include "sample/scheduler.h"
#include "test_util.h"

static h3s_layout build(int64_t nt, int64_t f, int64_t h, int64_t w, int64_t a, int first, int last, int64_t pad) {
    h3s_layout_opts o = {nt, f, h, w, a, first, last, pad};
    h3s_layout l;
    memset(&l, 0, sizeof l);
    h3s_status st = h3s_layout_build(&o, 2, 2, &l);
    if (st != H3S_OK) {
        fprintf(stderr, "layout_build failed: %s\n", h3s_last_error());
        exit(2);
    }
    return l;
}

static const int64_t *I(const h3s_tensor *t) { return (const int64_t *)t->data; }
static const double *P(const h3s_layout *l) { return (const double *)l->position_ids.data; }

/* Exact value check with an independent long-double sanity bound (the hex pins the rounding, the bound
 * pins the formula). */
static void check_pos(const char *what, double got, double want_bits, long double exact) {
    CHECK(got == want_bits, "%s = %a, expected %a", what, got, want_bits);
    long double err = fabsl((long double)got - exact);
    CHECK(err <= 4e-15L * (1.0L + fabsl(exact)), "%s = %.17g is not near the exact %.17Lg", what, got, exact);
}

/* Structural invariants of any layout. */
static void check_structure(const char *what, const h3s_layout *l) {
    const int64_t live = l->Nt + l->Nv + l->Na;
    CHECK(l->S == live + l->n_pad, "%s: S %lld != Nt + Nv + Na + pad", what, (long long)l->S);
    CHECK(l->token_tags.dtype == H3S_I64 && l->token_tags.ndim == 1 && l->token_tags.shape[0] == l->S,
          "%s: token_tags shape", what);
    CHECK(l->position_ids.dtype == H3S_F64 && l->position_ids.ndim == 2 && l->position_ids.shape[0] == l->S &&
              l->position_ids.shape[1] == 3,
          "%s: position_ids shape", what);
    CHECK(l->video_indices.shape[0] == l->Nv && l->audio_indices.shape[0] == l->Na &&
              l->text_indices.shape[0] == l->Nt && l->timestep_indices.shape[0] == l->S && l->row_kind.shape[0] == l->S,
          "%s: index list lengths", what);
    /* disjoint and covering the live rows; padding rows in no list */
    int *seen = calloc((size_t)l->S, sizeof(int));
    int bad_range = 0;
    const h3s_tensor *lists[3] = {&l->video_indices, &l->audio_indices, &l->text_indices};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < lists[k]->shape[0]; i++) {
            int64_t r = I(lists[k])[i];
            if (r < 0 || r >= l->S)
                bad_range++;
            else
                seen[r]++;
        }
    int once = 1, pad_free = 1;
    for (int64_t r = 0; r < l->S; r++) {
        if (r < live && seen[r] != 1) once = 0;
        if (r >= live && seen[r] != 0) pad_free = 0;
    }
    free(seen);
    CHECK(bad_range == 0 && once, "%s: index lists are not a disjoint cover of the live rows", what);
    CHECK(pad_free, "%s: a padding row appears in an index list", what);
    /* ordering: text rows first, then condition, audio, target video; lists ascending */
    int order = 1, tags_ok = 1;
    for (int64_t i = 0; i < l->Nt; i++)
        if (I(&l->text_indices)[i] != i) order = 0;
    for (int64_t i = 0; i < l->Na; i++)
        if (I(&l->audio_indices)[i] != l->Nt + l->n_condition + i) order = 0;
    for (int64_t i = 0; i < l->Nv; i++) {
        int64_t want = i < l->n_condition ? l->Nt + i : l->Nt + l->Na + i;
        if (I(&l->video_indices)[i] != want) order = 0;
    }
    CHECK(order, "%s: packed order is not [text | condition | audio | video]", what);
    for (int64_t r = 0; r < l->S; r++) {
        int64_t tag = I(&l->token_tags)[r], kind = I(&l->row_kind)[r];
        int64_t want_tag = kind == H3S_ROW_TEXT ? 1 : kind == H3S_ROW_AUDIO ? 2 : kind == H3S_ROW_PAD ? -1 : 0;
        int64_t want_kind = r < l->Nt                            ? H3S_ROW_TEXT
                            : r < l->Nt + l->n_condition         ? H3S_ROW_CONDITION
                            : r < l->Nt + l->n_condition + l->Na ? H3S_ROW_AUDIO
                            : r < live                           ? H3S_ROW_VIDEO
                                                                 : H3S_ROW_PAD;
        if (tag != want_tag || kind != want_kind) tags_ok = 0;
    }
    CHECK(tags_ok, "%s: tags / row kinds wrong", what);
}

static void test_t2va_positions(void) {
    /* Nt = 3 text rows, 2 latent frames of 4x6 (patch 2: 2x3 = 6 rows per frame), A = 2 audio latents.
     * S = 3 + 0 + 4 + 12 = 19. */
    h3s_layout l = build(3, 2, 4, 6, 2, 0, 0, 0);
    CHECK(l.S == 19 && l.Nt == 3 && l.Na == 4 && l.Nv == 12 && l.n_condition == 0 && l.n_pad == 0,
          "t2va counts S %lld Nt %lld Na %lld Nv %lld", (long long)l.S, (long long)l.Nt, (long long)l.Na,
          (long long)l.Nv);
    CHECK(l.rows_per_frame == 6, "rows per frame %lld", (long long)l.rows_per_frame);
    check_structure("t2va", &l);

    /* Spatial grid, by hand: sqrt_area = sqrt(24) = 4.898979485566356.
     * h: ratio = 4/sqrt(24) = 0.816496580927726, left = (1 - ratio)/2 = 0.091751709536137,
     *    step = ((left + ratio) - left)/2 = 0.408248290463863; coords*32 = 2.936054705156384, 16 (left + step = 1/2).
     * w: ratio = 6/sqrt(24) = 1.224744871391589, left = -0.112372435695794, step = 0.408248290463863;
     *    coords*32 = -3.595917942265424, 9.464101615137754, 22.524121172540933. */
    const long double sa = sqrtl(24.0L), rh = 4.0L / sa, rw = 6.0L / sa;
    const long double lh = (1.0L - rh) / 2.0L, lw = (1.0L - rw) / 2.0L;
    const long double hx[2] = {32.0L * lh, 32.0L * (lh + rh / 2.0L)};
    const long double wx[3] = {32.0L * lw, 32.0L * (lw + rw / 3.0L), 32.0L * (lw + 2.0L * rw / 3.0L)};
    const double hb[2] = {0x1.77d0a3fcf4f04p+1, 0x1p+4};
    const double wb[3] = {-0x1.cc470a0490978p+1, 0x1.2efa147f9e9e2p+3, 0x1.6882f5c030b11p+4};
    const double *p = P(&l);
    char what[96];
    /* text rows: (i, 0, 0) */
    for (int i = 0; i < 3; i++)
        CHECK(p[3 * i] == i && p[3 * i + 1] == 0 && p[3 * i + 2] == 0, "text row %d position", i);
    /* audio rows 3..6: channel 0 latents 0, 1 at t = 3, 4 with w = first width coordinate; channel 1 w = last */
    for (int c = 0; c < 2; c++)
        for (int a = 0; a < 2; a++) {
            int r = 3 + 2 * c + a;
            CHECK(p[3 * r] == 3.0 + a && p[3 * r + 1] == 0.0, "audio row %d (t, h)", r);
            snprintf(what, sizeof what, "audio row %d w", r);
            check_pos(what, p[3 * r + 2], c == 0 ? wb[0] : wb[2], c == 0 ? wx[0] : wx[2]);
        }
    /* video rows 7..18: frame 0 at t = 3, frame 1 at t = 3 + 5/3 = 4.666666666666667 (0x1.2aaaaaaaaaaabp+2) */
    for (int f = 0; f < 2; f++)
        for (int r = 0; r < 6; r++) {
            int row = 7 + 6 * f + r;
            snprintf(what, sizeof what, "video row %d t", row);
            check_pos(what, p[3 * row], f == 0 ? 3.0 : 0x1.2aaaaaaaaaaabp+2, f == 0 ? 3.0L : 3.0L + 5.0L / 3.0L);
            snprintf(what, sizeof what, "video row %d h", row);
            check_pos(what, p[3 * row + 1], hb[r / 3], hx[r / 3]);
            snprintf(what, sizeof what, "video row %d w", row);
            check_pos(what, p[3 * row + 2], wb[r % 3], wx[r % 3]);
        }
    /* static group plan: text + video = group 0, audio = group 1 */
    CHECK(l.T == 2, "t2va T = %lld", (long long)l.T);
    CHECK(I(&l.timestep_indices)[0] == 0 && I(&l.timestep_indices)[3] == 1 && I(&l.timestep_indices)[18] == 0,
          "t2va group plan");
    h3s_layout_free(&l);
    CHECK(l.token_tags.data == NULL && l.S == 0, "layout_free clears the struct");
    h3s_layout_free(&l); /* twice is harmless */
}

static void test_fl2va(void) {
    const double hb[2] = {0x1.77d0a3fcf4f04p+1, 0x1p+4};
    const double wb[3] = {-0x1.cc470a0490978p+1, 0x1.2efa147f9e9e2p+3, 0x1.6882f5c030b11p+4};
    /* "last" anchor for Nt = 3, F = 2: spans (5/3, 20/3), pairwise sum 25/3; 3 + 25/3 - 5/3 = 9.666666666666668 */
    const double last_t = 0x1.3555555555556p+3;
    struct {
        int first, last;
        const char *name;
    } cases[3] = {{1, 0, "fl2va first"}, {0, 1, "fl2va last"}, {1, 1, "fl2va first+last"}};
    for (int c = 0; c < 3; c++) {
        h3s_layout l = build(3, 2, 4, 6, 2, cases[c].first, cases[c].last, 0);
        int nk = cases[c].first + cases[c].last;
        CHECK(l.n_condition == 6 * nk && l.Nv == 12 + 6 * nk && l.S == 19 + 6 * nk && l.n_keyframes == nk,
              "%s counts: n_condition %lld Nv %lld S %lld", cases[c].name, (long long)l.n_condition, (long long)l.Nv,
              (long long)l.S);
        check_structure(cases[c].name, &l);
        const double *p = P(&l);
        int ok = 1;
        for (int k = 0; k < nk; k++) {
            double want_t = (cases[c].first && k == 0) ? 3.0 : last_t;
            for (int r = 0; r < 6; r++) {
                int row = 3 + 6 * k + r;
                if (p[3 * row] != want_t || p[3 * row + 1] != hb[r / 3] || p[3 * row + 2] != wb[r % 3]) ok = 0;
            }
        }
        CHECK(ok, "%s: condition rows carry the anchor time and the target frame grid", cases[c].name);
        /* audio and target video keep the t2va times */
        int64_t a0 = 3 + 6 * nk, v0 = a0 + 4;
        CHECK(p[3 * a0] == 3.0 && p[3 * (a0 + 1)] == 4.0 && p[3 * (a0 + 2)] == 3.0, "%s audio times", cases[c].name);
        CHECK(p[3 * v0] == 3.0 && p[3 * (v0 + 6)] == 0x1.2aaaaaaaaaaabp+2, "%s video times", cases[c].name);
        /* group plan: text+video 0, condition 1, audio 2 */
        CHECK(l.T == 3 && I(&l.timestep_indices)[0] == 0 && I(&l.timestep_indices)[3] == 1 &&
                  I(&l.timestep_indices)[a0] == 2 && I(&l.timestep_indices)[v0] == 0,
              "%s group plan", cases[c].name);
        h3s_layout_free(&l);
    }
}

static void test_temporal(void) {
    /* Frame times are a sequential float64 cumsum: Nt = 5, 7 frames of a 6x10 latent:
     * 5, 5 + 5/3, + 20/3, ... -> 5, 6.666666666666667, 13.333333333333334, 20, 26.666666666666668,
     * 33.333333333333336, 35 (0x1.18p+5). */
    h3s_layout l = build(5, 7, 6, 10, 3, 1, 1, 0);
    check_structure("6x10 fl2va", &l);
    const double ft[7] = {0x1.4p+2, 0x1.aaaaaaaaaaaabp+2, 0x1.aaaaaaaaaaaabp+3,
                          0x1.4p+4, 0x1.aaaaaaaaaaaabp+4, 0x1.0aaaaaaaaaaabp+5,
                          0x1.18p+5};
    const double *p = P(&l);
    int64_t v0 = 5 + l.n_condition + l.Na;
    for (int f = 0; f < 7; f++)
        CHECK(p[3 * (v0 + f * 15)] == ft[f], "frame %d time %a, expected %a", f, p[3 * (v0 + f * 15)], ft[f]);
    /* The two axes are separate numpy grids: the same mathematical coordinate 11.8688... comes out as
     * 0x1.7bcd5ae958493p+3 on the height axis (6 / sqrt(60)) and 0x1.7bcd5ae958492p+3 on the width axis. */
    CHECK(p[3 * (v0 + 5) + 1] == 0x1.7bcd5ae958493p+3, "h[1] of 6x10 = %a", p[3 * (v0 + 5) + 1]);
    CHECK(p[3 * (v0 + 2) + 2] == 0x1.7bcd5ae958492p+3, "w[2] of 6x10 = %a", p[3 * (v0 + 2) + 2]);
    CHECK(p[3 * (v0 + 4) + 2] == 0x1.c64bf7a1fb923p+4, "w[4] of 6x10 = %a", p[3 * (v0 + 4) + 2]);
    h3s_layout_free(&l);

    /* numpy's linspace multiplies k by the rounded step (k * step + start), not k * delta / num: for a 2x10
     * latent the width coordinate 3 is 0x1.727c9716ffb78p+4 (numpy 2.4); k * delta / num would give
     * ...ffb76p+4. */
    double wg[5];
    h3s_spatial_grid(10, 2, 2, 10, wg);
    CHECK(wg[3] == 0x1.727c9716ffb78p+4, "2x10 width grid[3] = %a", wg[3]);
    l = build(1, 1, 2, 10, 1, 0, 0, 0);
    CHECK(P(&l)[3 * (1 + 2 + 3) + 2] == 0x1.727c9716ffb78p+4, "2x10 layout w of patch column 3");
    h3s_layout_free(&l);

    /* "last" anchor uses numpy's pairwise sum: for 16 frames the spans sum to 85 exactly by pairwise
     * summation (8 accumulators) but to 85.00000000000001 sequentially. */
    CHECK(h3s_keyframe_last_time(7, 16) == 0x1.7p+6, "last anchor, 16 frames: %a, expected 92",
          h3s_keyframe_last_time(7, 16));
    double seq = 0;
    for (int f = 0; f < 16; f++)
        seq += h3s_frame_span(f);
    CHECK(7.0 + seq - 5.0 / 3.0 != 0x1.7p+6, "the 16-frame case must separate pairwise from sequential summation");
    CHECK(h3s_keyframe_last_time(7, 17) == 0x1.8aaaaaaaaaaabp+6, "last anchor, 17 frames: %a",
          h3s_keyframe_last_time(7, 17));
    CHECK(h3s_keyframe_last_time(3, 1) == 3.0, "last anchor of a single frame is the first frame");
    /* numpy pairwise sum branches: < 8 plain, <= 128 eight accumulators, > 128 split at a multiple of 8 */
    double ones[300];
    for (int i = 0; i < 300; i++)
        ones[i] = 0.1 * (i % 3 + 1);
    double s7 = 0;
    for (int i = 0; i < 7; i++)
        s7 += ones[i];
    CHECK(h3s_np_sum_f64(ones, 7) == s7, "np sum below 8 elements is sequential");
    CHECK(h3s_np_sum_f64(ones, 0) == 0.0, "np sum of nothing");
    /* 0.1, 0.2, 0.30000000000000004 repeated: values from numpy 2.4 (np.array(...).sum()); the sequential
     * sums are 0x1.8cccccccccccfp+1 and 0x1.e00000000000ep+5 */
    CHECK(h3s_np_sum_f64(ones, 16) == 0x1.8cccccccccccdp+1, "np sum 16 = %a", h3s_np_sum_f64(ones, 16));
    CHECK(h3s_np_sum_f64(ones, 300) == 0x1.e000000000002p+5, "np sum 300 = %a", h3s_np_sum_f64(ones, 300));
}

static void test_padding(void) {
    h3s_layout l = build(3, 2, 4, 6, 2, 1, 0, 64); /* live 25 rows -> 64 */
    CHECK(l.S == 64 && l.n_pad == 39, "padded S %lld pad %lld", (long long)l.S, (long long)l.n_pad);
    check_structure("padded", &l);
    int ok = 1;
    for (int64_t r = 25; r < 64; r++)
        if (I(&l.token_tags)[r] != -1 || I(&l.row_kind)[r] != -1 || I(&l.timestep_indices)[r] != 0 ||
            P(&l)[3 * r] != 0 || P(&l)[3 * r + 1] != 0 || P(&l)[3 * r + 2] != 0)
            ok = 0;
    CHECK(ok, "padding rows: tag -1, kind -1, position (0, 0, 0), group 0");
    CHECK(I(&l.token_tags)[24] == 0, "last live row is target video");
    h3s_layout_free(&l);
    l = build(3, 2, 4, 6, 2, 0, 0, 19); /* already a multiple */
    CHECK(l.S == 19 && l.n_pad == 0, "pad_to dividing S adds nothing");
    h3s_layout_free(&l);
    l = build(3, 2, 4, 6, 2, 0, 0, 1);
    CHECK(l.S == 19 && l.n_pad == 0, "pad_to 1 adds nothing");
    h3s_layout_free(&l);
    l = build(3, 2, 4, 6, 2, 0, 0, 20);
    CHECK(l.S == 20 && l.n_pad == 1 && I(&l.token_tags)[19] == -1, "pad_to 20 adds one row");
    h3s_layout_free(&l);
}

static void test_bad_options(void) {
    h3s_layout_opts good = {3, 2, 4, 6, 2, 0, 0, 0};
    h3s_layout l, before;
    memset(&l, 0xab, sizeof l);
    before = l;
    h3s_layout_opts o;
#define BAD(field, value)                                                                                              \
    do {                                                                                                               \
        o = good;                                                                                                      \
        o.field = value;                                                                                               \
        CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_build(&o, 2, 2, &l));                                                  \
    } while (0)
    BAD(text_tokens, 0);
    BAD(text_tokens, -3);
    BAD(frames, 0);
    BAD(frames, -1);
    BAD(latent_height, 0);
    BAD(latent_width, -2);
    BAD(audio_latents, 0);
    BAD(latent_height, 5); /* not divisible by the patch */
    BAD(latent_width, 7);
    BAD(keyframe_first, 2);
    BAD(keyframe_last, -1);
    BAD(pad_to, -64);
    BAD(frames, (int64_t)1 << 45); /* absurdly long */
#undef BAD
    CHECK(strstr((o = good, o.latent_width = 7, h3s_layout_build(&o, 2, 2, &l), h3s_last_error()), "divisible"),
          "message names the divisibility problem: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_build(NULL, 2, 2, &l));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_build(&good, 2, 2, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_build(&good, 0, 2, &l));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_build(&good, 2, -1, &l));
    CHECK(memcmp(&l, &before, sizeof l) == 0, "a failed build wrote its output");
    /* patch 1 is fine (any latent size) */
    h3s_layout_opts p1 = {2, 1, 3, 5, 1, 0, 0, 0};
    CHECK_OK(h3s_layout_build(&p1, 1, 1, &l));
    CHECK(l.rows_per_frame == 15 && l.S == 2 + 2 + 15, "patch 1 layout");
    h3s_layout_free(&l);
}

static void check_ts(const char *what, const h3s_tensor *ts, const h3s_tensor *ti, int64_t T, const float *vals) {
    CHECK(ts->dtype == H3S_F32 && ts->ndim == 1 && ts->shape[0] == T, "%s: timestep shape [%lld], expected [%lld]",
          what, (long long)ts->shape[0], (long long)T);
    for (int64_t i = 0; i < T && i < ts->shape[0]; i++)
        CHECK(((const float *)ts->data)[i] == vals[i], "%s: timestep[%lld] = %.9g, expected %.9g", what, (long long)i,
              (double)((const float *)ts->data)[i], (double)vals[i]);
    CHECK(ti->dtype == H3S_I64 && ti->ndim == 1, "%s: timestep_indices dtype", what);
}

static void test_row_timesteps(void) {
    h3s_tensor ts, ti;
    /* t2va: text + video at t_video, audio at t_audio; sorted ascending */
    h3s_layout l = build(3, 2, 4, 6, 2, 0, 0, 0);
    CHECK_OK(h3s_layout_timesteps(&l, 0.25f, 0.5f, &ts, &ti));
    check_ts("t2va", &ts, &ti, 2, (const float[]){0.25f, 0.5f});
    CHECK(I(&ti)[0] == 0 && I(&ti)[2] == 0 && I(&ti)[3] == 1 && I(&ti)[6] == 1 && I(&ti)[7] == 0 && I(&ti)[18] == 0,
          "t2va row indices");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);
    /* step 0: both schedules start at sigma = 1 -> t = 0 for video and audio: one distinct value */
    CHECK_OK(h3s_layout_timesteps(&l, 0.0f, 0.0f, &ts, &ti));
    check_ts("t2va step 0", &ts, &ti, 1, (const float[]){0.0f});
    CHECK(I(&ti)[3] == 0 && I(&ti)[10] == 0, "all rows index 0");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);
    h3s_layout_free(&l);

    /* fl2va with both keyframes and padding: condition rows at max(t_video, 0.999) */
    l = build(3, 2, 4, 6, 2, 1, 1, 64);
    const int64_t c0 = 3, a0 = 15, v0 = 19, pad0 = 31;
    CHECK_OK(h3s_layout_timesteps(&l, 0.25f, 0.5f, &ts, &ti));
    check_ts("fl2va", &ts, &ti, 3, (const float[]){0.25f, 0.5f, 0.999f});
    CHECK(I(&ti)[0] == 0 && I(&ti)[c0] == 2 && I(&ti)[c0 + 11] == 2 && I(&ti)[a0] == 1 && I(&ti)[v0] == 0 &&
              I(&ti)[pad0] == 0 && I(&ti)[63] == 0,
          "fl2va row indices");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);
    /* audio above the condition level: order follows the values */
    CHECK_OK(h3s_layout_timesteps(&l, 0.9f, 0.99999f, &ts, &ti));
    check_ts("fl2va audio > condition", &ts, &ti, 3, (const float[]){0.9f, 0.999f, 0.99999f});
    CHECK(I(&ti)[c0] == 1 && I(&ti)[a0] == 2 && I(&ti)[v0] == 0, "fl2va indices follow sorted values");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);
    /* video past the condition level: condition rows follow t_video and share its slot */
    CHECK_OK(h3s_layout_timesteps(&l, 0.9995f, 0.99999f, &ts, &ti));
    check_ts("fl2va t_video > 0.999", &ts, &ti, 2, (const float[]){0.9995f, 0.99999f});
    CHECK(I(&ti)[c0] == 0 && I(&ti)[v0] == 0 && I(&ti)[a0] == 1, "condition shares the video slot");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);
    /* explicit condition timestep */
    CHECK_OK(h3s_layout_timesteps_ex(&l, 0.5f, 0.75f, 0.125f, &ts, &ti));
    check_ts("explicit condition", &ts, &ti, 3, (const float[]){0.125f, 0.5f, 0.75f});
    CHECK(I(&ti)[c0] == 0 && I(&ti)[v0] == 1 && I(&ti)[a0] == 2, "explicit condition indices");
    h3s_tensor_free(&ts);
    h3s_tensor_free(&ti);

    /* validation: nothing written on failure */
    h3s_tensor keep_ts = {.ndim = 7}, keep_ti = {.ndim = 9};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, NAN, 0.5f, &keep_ts, &keep_ti));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, 0.5f, 1.5f, &keep_ts, &keep_ti));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, -0.1f, 0.5f, &keep_ts, &keep_ti));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(NULL, 0.5f, 0.5f, &keep_ts, &keep_ti));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, 0.5f, 0.5f, NULL, &keep_ti));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, 0.5f, 0.5f, &keep_ts, NULL));
    CHECK(keep_ts.ndim == 7 && keep_ti.ndim == 9, "failed layout_timesteps wrote its outputs");
    ((int64_t *)l.row_kind.data)[5] = 9;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&l, 0.5f, 0.5f, &keep_ts, &keep_ti));
    h3s_layout_free(&l);
    h3s_layout empty;
    memset(&empty, 0, sizeof empty);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_timesteps(&empty, 0.5f, 0.5f, &keep_ts, &keep_ti));
}

static void test_inputs_random(void) {
    h3s_layout l = build(3, 2, 4, 6, 2, 1, 0, 0); /* Nv = 18 (6 condition), Na = 4, Nt = 3 */
    h3s_tensor v1, a1, e1, v3, a3, e3;
    CHECK_OK(h3s_inputs_random(&l, 1, 11, 96, 32, 40, &v1, &a1, &e1));
    CHECK_OK(h3s_inputs_random(&l, 3, 11, 96, 32, 40, &v3, &a3, &e3));
    CHECK(v3.ndim == 3 && v3.shape[0] == 3 && v3.shape[1] == 18 && v3.shape[2] == 96 && v3.dtype == H3S_F32,
          "hidden_states shape");
    CHECK(a3.shape[0] == 3 && a3.shape[1] == 4 && a3.shape[2] == 32, "audio_hidden_states shape");
    CHECK(e3.shape[0] == 3 && e3.shape[1] == 3 && e3.shape[2] == 40, "encoder_hidden_states shape");
    /* item 0 is the same for B = 1 and B = 3 */
    CHECK(memcmp(v1.data, v3.data, h3s_tensor_nbytes(&v1)) == 0, "hidden_states item 0 depends on B");
    CHECK(memcmp(a1.data, a3.data, h3s_tensor_nbytes(&a1)) == 0, "audio item 0 depends on B");
    CHECK(memcmp(e1.data, e3.data, h3s_tensor_nbytes(&e1)) == 0, "text item 0 depends on B");
    /* items differ from each other */
    const h3s_tensor *all[3] = {&v3, &a3, &e3};
    for (int k = 0; k < 3; k++) {
        size_t item = h3s_tensor_nbytes(all[k]) / 3;
        const char *d = all[k]->data;
        CHECK(memcmp(d, d + item, item) != 0 && memcmp(d + item, d + 2 * item, item) != 0 &&
                  memcmp(d, d + 2 * item, item) != 0,
              "tensor %d: batch items are not distinct", k);
    }
    /* another seed gives other data */
    h3s_tensor v2, a2, e2;
    CHECK_OK(h3s_inputs_random(&l, 1, 12, 96, 32, 40, &v2, &a2, &e2));
    CHECK(memcmp(v1.data, v2.data, h3s_tensor_nbytes(&v1)) != 0 && memcmp(e1.data, e2.data, 40 * 4) != 0,
          "seed changes the data");
    /* condition rows: x0 and noise on their own streams, mixed once at t = 0.999 */
    const float *vd = v1.data;
    int cond_ok = 1;
    for (int i = 0; i < 6 * 96; i++) {
        float x0 = h3s_rng_normal(11, h3s_inputs_stream("keyframe_latents", 0), (uint64_t)i);
        float nz = h3s_rng_normal(11, h3s_inputs_stream("keyframe_noise", 0), (uint64_t)i);
        if (vd[i] != h3s_scale_noise1(x0, nz, 0.999f)) cond_ok = 0;
    }
    CHECK(cond_ok, "condition rows are scale_noise(x0, noise, 0.999)");
    /* target video noise is the same with and without keyframes */
    h3s_layout lt = build(3, 2, 4, 6, 2, 0, 0, 0);
    h3s_tensor tv, ta, te;
    CHECK_OK(h3s_inputs_random(&lt, 1, 11, 96, 32, 40, &tv, &ta, &te));
    CHECK(memcmp(tv.data, vd + 6 * 96, 12 * 96 * 4) == 0, "target noise independent of keyframes");
    CHECK(memcmp(ta.data, a1.data, h3s_tensor_nbytes(&ta)) == 0, "audio noise independent of keyframes");
    /* roughly standard normal */
    double s = 0, s2 = 0;
    int64_t n = 12 * 96;
    for (int64_t i = 0; i < n; i++) {
        double x = ((const float *)tv.data)[i];
        s += x;
        s2 += x * x;
    }
    CHECK(fabs(s / n) < 0.15 && fabs(s2 / n - 1.0) < 0.15, "target noise mean %g var %g", s / n, s2 / n);
    /* thread count does not matter */
    h3s_tensor w1, w2, w3;
    h3s_set_num_threads(1);
    CHECK_OK(h3s_inputs_random(&l, 3, 11, 96, 32, 40, &w1, &w2, &w3));
    h3s_set_num_threads(0);
    CHECK(h3t_bitwise_equal(&w1, &v3) && h3t_bitwise_equal(&w2, &a3) && h3t_bitwise_equal(&w3, &e3),
          "inputs depend on the thread count");
    /* validation */
    h3s_tensor x = {.ndim = 5}, y = {.ndim = 5}, z = {.ndim = 5};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, 0, 11, 96, 32, 40, &x, &y, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, 1, 11, 0, 32, 40, &x, &y, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, 1, 11, 96, -1, 40, &x, &y, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, 1, 11, 96, 32, 0, &x, &y, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(NULL, 1, 11, 96, 32, 40, &x, &y, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, 1, 11, 96, 32, 40, &x, NULL, &z));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_random(&l, (int64_t)1 << 40, 11, 96, 32, 40, &x, &y, &z));
    CHECK(x.ndim == 5 && y.ndim == 5 && z.ndim == 5, "failed inputs_random wrote its outputs");
    CHECK(h3s_inputs_stream("hidden_states", 0) == h3s_rng_stream_id("hidden_states") &&
              h3s_inputs_stream("hidden_states", 1) != h3s_inputs_stream("hidden_states", 2),
          "stream ids");

    h3s_tensor *ts[] = {&v1, &a1, &e1, &v3, &a3, &e3, &v2, &a2, &e2, &tv, &ta, &te, &w1, &w2, &w3};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        h3s_tensor_free(ts[i]);
    h3s_layout_free(&l);
    h3s_layout_free(&lt);
}

/* h3s_layout_count computes the row counts without building the layout: a count far beyond memory is answered at
 * once (it allocated the whole layout before: 2^36 text tokens ran out of memory, 2^24 took 900 MB), and for every
 * layout small enough to build the counts are the built layout's. */
static void test_count(void) {
    const int64_t huge = (int64_t)1 << 36;
    h3s_layout_opts big = {huge, 3, 4, 6, 5, 1, 1, 1000};
    h3s_layout_rows r;
    memset(&r, 0, sizeof r);
    CHECK_OK(h3s_layout_count(&big, 2, 2, &r));
    const int64_t rpf = (4 / 2) * (6 / 2), live = huge + 2 * rpf + 3 * rpf + 2 * 5;
    CHECK(r.text == huge && r.condition == 2 * rpf && r.video == 5 * rpf && r.audio == 10 &&
              r.rows == (live + 999) / 1000 * 1000 && r.padding == r.rows - live,
          "count of a 2^36-token layout: rows %lld text %lld video %lld condition %lld audio %lld padding %lld",
          (long long)r.rows, (long long)r.text, (long long)r.video, (long long)r.condition, (long long)r.audio,
          (long long)r.padding);
    /* the build's limits and checks hold for the count too */
    h3s_layout_rows before = r;
    big.frames = (int64_t)1 << 45;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_count(&big, 2, 2, &r));
    big.frames = 3;
    big.latent_width = 7;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_count(&big, 2, 2, &r));
    CHECK(strstr(h3s_last_error(), "layout_count") && strstr(h3s_last_error(), "latent_width"),
          "the count's message names itself and the option: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_count(NULL, 2, 2, &r));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_count(&big, 0, 2, &r));
    CHECK(memcmp(&r, &before, sizeof r) == 0, "a failed count wrote its output");
    /* the count agrees with the build, option by option */
    int agree = 1, cases = 0;
    for (int kf = 0; kf < 4; kf++)
        for (int64_t pad = 0; pad <= 64; pad += 7)
            for (int64_t frames = 1; frames <= 6; frames += 5)
                for (int64_t hw = 2; hw <= 6; hw += 2) {
                    h3s_layout_opts o = {3 + pad % 5, frames, hw, 8 - hw, 1 + frames % 3, kf & 1, kf >> 1, pad};
                    h3s_layout l;
                    h3s_layout_rows c;
                    if (h3s_layout_build(&o, 2, 2, &l) != H3S_OK || h3s_layout_count(&o, 2, 2, &c) != H3S_OK) {
                        agree = 0;
                        continue;
                    }
                    agree &= c.rows == l.S && c.text == l.Nt && c.video == l.Nv && c.condition == l.n_condition &&
                             c.audio == l.Na && c.padding == l.n_pad && c.rows == l.token_tags.shape[0] &&
                             c.video == l.video_indices.shape[0] && c.audio == l.audio_indices.shape[0];
                    cases++;
                    h3s_layout_free(&l);
                }
    CHECK(agree && cases == 4 * 10 * 2 * 3, "h3s_layout_count == h3s_layout_build on %d layouts", cases);
}

int main(void) {
    test_t2va_positions();
    test_fl2va();
    test_temporal();
    test_padding();
    test_bad_options();
    test_count();
    test_row_timesteps();
    test_inputs_random();
    return h3t_finish("test_layout");
}

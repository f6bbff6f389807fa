/* Packed t2va / fl2va layout, row timesteps and seeded inputs.
 *
 * Float64 coordinates follow the reference pipeline operation by operation (compiled with
 * -ffp-contract=off, so no multiply-add is fused):
 *   spatial axis   numpy.linspace(left, left + ratio, d/p, endpoint=False) * 32
 *   frame time     Nt + torch.cumsum(spans)[f - 1]        (sequential float64 sum)
 *   "last" anchor  (Nt + numpy.sum(spans)) - 5/3          (numpy pairwise sum) */
#include "sample/layout.h"

#include <math.h>

#include "core/core.h"
#include "core/rng.h"
#include "model/model.h"
#include "sample/scheduler.h"

/* Largest packed sequence accepted: far beyond any real request, small enough that every row index
 * and every rotary time (Nt + a, an integer) is exact in float64 and no size product overflows. */
#define H3S_LAYOUT_MAX_ROWS ((int64_t)1 << 40)

static const double k_frame_rescale = 5.0 / 3.0;
static const int64_t k_frames_per_latent[5] = {1, 4, 4, 4, 4};
static const double k_spatial_scale = 32.0;

/* ------------------------------------------------------------------ numpy / torch helpers */

void h3s_np_linspace_noend(double start, double stop, int64_t num, double *out) {
    if (num <= 0 || !out) return;
    const double div = (double)num;
    const double delta = stop - start;
    const double step = delta / div;
    if (step == 0.0) {
        /* numpy's branch for a zero (underflowed) step: y = y / div * delta + start */
        for (int64_t k = 0; k < num; k++) {
            double y = (double)k / div;
            y = y * delta;
            out[k] = y + start;
        }
        return;
    }
    for (int64_t k = 0; k < num; k++) {
        double y = (double)k * step;
        out[k] = y + start;
    }
}

/* numpy's pairwise_sum for float64 (loops_utils.h.src): below 8 elements a plain running sum from
 * 0.0; up to PW_BLOCKSIZE = 128 eight interleaved accumulators combined as
 * ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the n % 8 tail added one by one; above that the array
 * is split at n2 = n/2 rounded down to a multiple of 8 and the halves summed recursively. */
static double np_pairwise_sum(const double *a, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8) {
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        }
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return np_pairwise_sum(a, n2) + np_pairwise_sum(a + n2, n - n2);
}

double h3s_np_sum_f64(const double *a, int64_t n) {
    /* add.reduce starts from the identity 0.0 and adds the pairwise sum of the whole array. */
    double acc = 0.0;
    if (n > 0) acc += np_pairwise_sum(a, n);
    return acc;
}

double h3s_frame_span(int64_t f) { return k_frame_rescale * (double)k_frames_per_latent[f % 5]; }

void h3s_spatial_grid(int64_t dim, int64_t patch, int64_t latent_height, int64_t latent_width, double *out) {
    const double sqrt_area = sqrt((double)(latent_height * latent_width));
    const double ratio = (double)dim / sqrt_area;
    const double left = (1.0 - ratio) / 2.0;
    const double stop = left + ratio;
    const int64_t num = dim / patch;
    h3s_np_linspace_noend(left, stop, num, out);
    for (int64_t k = 0; k < num; k++)
        out[k] = out[k] * k_spatial_scale;
}

static double frames_span_numpy(int64_t frames, h3s_status *st) {
    double *spans = h3s_malloc((size_t)frames, sizeof(double));
    if (!spans) {
        *st = H3S_ERR_NOMEM;
        return 0.0;
    }
    for (int64_t f = 0; f < frames; f++)
        spans[f] = h3s_frame_span(f);
    double s = h3s_np_sum_f64(spans, frames);
    free(spans);
    *st = H3S_OK;
    return s;
}

double h3s_keyframe_last_time(int64_t text_tokens, int64_t frames) {
    h3s_status st;
    double span = frames_span_numpy(frames, &st);
    if (st != H3S_OK) return NAN;
    double t = (double)text_tokens + span;
    return t - k_frame_rescale;
}

/* ------------------------------------------------------------------ layout */

static int add_ok(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0 || a > H3S_LAYOUT_MAX_ROWS - b) return 0;
    *r = a + b;
    return 1;
}
static int mul_ok(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > H3S_LAYOUT_MAX_ROWS / a) return 0;
    *r = a * b;
    return 1;
}

void h3s_layout_free(h3s_layout *l) {
    if (!l) return;
    h3s_tensor_free(&l->token_tags);
    h3s_tensor_free(&l->position_ids);
    h3s_tensor_free(&l->video_indices);
    h3s_tensor_free(&l->audio_indices);
    h3s_tensor_free(&l->text_indices);
    h3s_tensor_free(&l->timestep_indices);
    h3s_tensor_free(&l->row_kind);
    memset(l, 0, sizeof *l);
}

static h3s_status alloc1(h3s_tensor *t, h3s_dtype dtype, int64_t n) { return h3s_tensor_alloc(t, dtype, 1, &n); }

/* An owning copy of a host tensor (same dtype, or F64 from a float tensor when to_f64). */
static h3s_status copy_tensor(const h3s_tensor *src, int to_f64, h3s_tensor *dst) {
    if (src->device != 0 || !src->data) return h3s_fail(H3S_ERR_INVALID, "layout_from_inputs: a tensor is missing");
    H3S_TRY(h3s_tensor_alloc(dst, to_f64 ? H3S_F64 : src->dtype, src->ndim, src->shape));
    h3s_status st = H3S_OK;
    if (to_f64 && src->dtype != H3S_F64)
        st = h3s_tensor_convert(src, dst);
    else
        memcpy(dst->data, src->data, h3s_tensor_nbytes(src));
    if (st != H3S_OK) h3s_tensor_free(dst);
    return st;
}

h3s_status h3s_layout_from_inputs(const struct h3s_inputs *in, int64_t n_condition, h3s_layout *out) {
    const char *op = "layout_from_inputs";
    if (!in || !out) return h3s_fail(H3S_ERR_INVALID, "%s: NULL argument", op);
    const h3s_tensor *idx[4] = {&in->token_tags, &in->video_indices, &in->audio_indices, &in->text_indices};
    for (int i = 0; i < 4; i++)
        if (idx[i]->dtype != H3S_I64 || idx[i]->ndim != 1)
            return h3s_fail(H3S_ERR_DTYPE, "%s: index tensors must be 1-D I64 (validate the inputs first)", op);
    const int64_t S = in->token_tags.shape[0], Nv = in->video_indices.shape[0], Na = in->audio_indices.shape[0],
                  Nt = in->text_indices.shape[0];
    if (n_condition < 0 || n_condition > Nv)
        return h3s_fail(H3S_ERR_INVALID, "%s: %lld condition rows, but the file has %lld video rows", op,
                        (long long)n_condition, (long long)Nv);
    h3s_layout l;
    memset(&l, 0, sizeof l);
    h3s_status st = copy_tensor(&in->token_tags, 0, &l.token_tags);
    if (st == H3S_OK) st = copy_tensor(&in->position_ids, 1, &l.position_ids);
    if (st == H3S_OK) st = copy_tensor(&in->video_indices, 0, &l.video_indices);
    if (st == H3S_OK) st = copy_tensor(&in->audio_indices, 0, &l.audio_indices);
    if (st == H3S_OK) st = copy_tensor(&in->text_indices, 0, &l.text_indices);
    if (st == H3S_OK) st = copy_tensor(&in->timestep_indices, 0, &l.timestep_indices);
    if (st == H3S_OK) st = alloc1(&l.row_kind, H3S_I64, S);
    if (st != H3S_OK) {
        h3s_layout_free(&l);
        return st;
    }
    int64_t *kind = l.row_kind.data;
    const int64_t *vi = l.video_indices.data, *ai = l.audio_indices.data, *ti = l.text_indices.data;
    for (int64_t r = 0; r < S; r++)
        kind[r] = H3S_ROW_PAD;
    const int64_t *lists[3] = {ti, vi, ai};
    const int64_t counts[3] = {Nt, Nv, Na};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < counts[k]; i++)
            if (lists[k][i] < 0 || lists[k][i] >= S) {
                h3s_layout_free(&l);
                return h3s_fail(H3S_ERR_INDEX, "%s: an index is outside [0, %lld) (validate the inputs first)", op,
                                (long long)S);
            }
    for (int64_t i = 0; i < Nt; i++)
        kind[ti[i]] = H3S_ROW_TEXT;
    for (int64_t i = 0; i < Nv; i++)
        kind[vi[i]] = i < n_condition ? H3S_ROW_CONDITION : H3S_ROW_VIDEO;
    for (int64_t i = 0; i < Na; i++)
        kind[ai[i]] = H3S_ROW_AUDIO;
    l.S = S;
    l.Nv = Nv;
    l.Na = Na;
    l.Nt = Nt;
    l.T = in->timestep.ndim == 1 ? in->timestep.shape[0] : 0;
    l.n_condition = n_condition;
    l.n_pad = S - Nt - Nv - Na;
    *out = l;
    return H3S_OK;
}

int64_t h3s_layout_condition_rows(const h3s_inputs *in) {
    if (!in || in->text_indices.ndim != 1 || in->text_indices.shape[0] < 1 || in->video_indices.ndim != 1) return 0;
    /* a public entry: anything it cannot read (types, placement, missing data) gives 0, as documented */
    const h3s_tensor *need[3] = {&in->text_indices, &in->video_indices, &in->timestep_indices};
    for (int k = 0; k < 3; k++)
        if (need[k]->dtype != H3S_I64 || need[k]->ndim != 1 || need[k]->device || !need[k]->data) return 0;
    const h3s_dtype tdt = in->timestep.dtype;
    if ((tdt != H3S_F32 && tdt != H3S_BF16 && tdt != H3S_F64) || in->timestep.ndim != 1 || in->timestep.device ||
        !in->timestep.data)
        return 0;
    const int64_t *ti = in->text_indices.data, *vi = in->video_indices.data, *tsi = in->timestep_indices.data;
    const int64_t S = in->timestep_indices.shape[0], T = in->timestep.shape[0];
    if (ti[0] < 0 || ti[0] >= S || tsi[ti[0]] < 0 || tsi[ti[0]] >= T) return 0;
    const double t_text = h3s_tensor_get_f64(&in->timestep, tsi[ti[0]]);
    int64_t n = 0;
    for (; n < in->video_indices.shape[0]; n++) {
        int64_t r = vi[n];
        if (r < 0 || r >= S || tsi[r] < 0 || tsi[r] >= T) break;
        if (h3s_tensor_get_f64(&in->timestep, tsi[r]) == t_text) break;
    }
    return n;
}

/* The row counts of a layout, from its options alone (checked here, H3S_ERR_INVALID naming the option): what
 * h3s_layout_build allocates and h3s_layout_count reports, computed once for both. */
typedef struct layout_counts {
    int64_t hp, wp;           /* patch rows and columns of a frame */
    int64_t rpf;              /* rows per frame: hp * wp */
    int64_t n_cond, n_target; /* keyframe condition rows, target video rows */
    int64_t Nv, Na, Nt;       /* video (condition + target), audio and text rows */
    int64_t S_live, S;        /* live rows; rows with the padding */
    int nkey;                 /* condition frames */
} layout_counts;

static h3s_status count_layout(const char *op, const h3s_layout_opts *o, int64_t patch_h, int64_t patch_w,
                               layout_counts *k) {
    if (!o) return h3s_fail(H3S_ERR_INVALID, "%s: options are NULL", op);
    if (patch_h <= 0 || patch_w <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: patch %lldx%lld must be positive", op, (long long)patch_h,
                        (long long)patch_w);
    if (o->text_tokens <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: text_tokens = %lld must be positive", op, (long long)o->text_tokens);
    if (o->frames <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: frames = %lld must be positive", op, (long long)o->frames);
    if (o->latent_height <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: latent_height = %lld must be positive", op, (long long)o->latent_height);
    if (o->latent_width <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: latent_width = %lld must be positive", op, (long long)o->latent_width);
    if (o->audio_latents <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: audio_latents = %lld must be positive", op, (long long)o->audio_latents);
    if (o->latent_height % patch_h != 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: latent_height = %lld is not divisible by the patch height %lld", op,
                        (long long)o->latent_height, (long long)patch_h);
    if (o->latent_width % patch_w != 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: latent_width = %lld is not divisible by the patch width %lld", op,
                        (long long)o->latent_width, (long long)patch_w);
    if ((o->keyframe_first != 0 && o->keyframe_first != 1) || (o->keyframe_last != 0 && o->keyframe_last != 1))
        return h3s_fail(H3S_ERR_INVALID, "%s: keyframe_first = %d, keyframe_last = %d must each be 0 or 1", op,
                        o->keyframe_first, o->keyframe_last);
    if (o->pad_to < 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: pad_to = %lld must be 0 (no padding) or positive", op,
                        (long long)o->pad_to);

    memset(k, 0, sizeof *k);
    k->hp = o->latent_height / patch_h;
    k->wp = o->latent_width / patch_w;
    k->nkey = o->keyframe_first + o->keyframe_last;
    k->Nt = o->text_tokens;
    int64_t hw, S;
    if (!mul_ok(k->hp, k->wp, &k->rpf) || !mul_ok(o->latent_height, o->latent_width, &hw) ||
        !mul_ok(k->rpf, k->nkey, &k->n_cond) || !mul_ok(k->rpf, o->frames, &k->n_target) ||
        !add_ok(k->n_cond, k->n_target, &k->Nv) || !mul_ok(o->audio_latents, H3S_AUDIO_CHANNELS, &k->Na) ||
        !add_ok(k->Nt, k->Nv, &S) || !add_ok(S, k->Na, &S))
        return h3s_fail(H3S_ERR_INVALID, "%s: the packed sequence is too long (more than %lld rows)", op,
                        (long long)H3S_LAYOUT_MAX_ROWS);
    k->S_live = S;
    if (o->pad_to > 0 && S % o->pad_to != 0) {
        int64_t extra = o->pad_to - S % o->pad_to;
        if (!add_ok(S, extra, &S))
            return h3s_fail(H3S_ERR_INVALID, "%s: padding to a multiple of %lld overflows", op, (long long)o->pad_to);
    }
    k->S = S;
    return H3S_OK;
}

h3s_status h3s_layout_build(const h3s_layout_opts *o, int64_t patch_h, int64_t patch_w, h3s_layout *out) {
    const char *op = "layout_build";
    if (!o) return h3s_fail(H3S_ERR_INVALID, "%s: options are NULL", op);
    if (!out) return h3s_fail(H3S_ERR_INVALID, "%s: output layout is NULL", op);
    layout_counts lc;
    H3S_TRY(count_layout(op, o, patch_h, patch_w, &lc));
    const int64_t hp = lc.hp, wp = lc.wp, rpf = lc.rpf, n_cond = lc.n_cond, n_target = lc.n_target, Nv = lc.Nv,
                  Na = lc.Na, Nt = lc.Nt, S_live = lc.S_live, S = lc.S;
    const int nkey = lc.nkey;

    h3s_layout l;
    memset(&l, 0, sizeof l);
    l.S = S;
    l.Nv = Nv;
    l.Na = Na;
    l.Nt = Nt;
    l.n_condition = n_cond;
    l.n_pad = S - S_live;
    l.rows_per_frame = rpf;
    l.frames = o->frames;
    l.latent_height = o->latent_height;
    l.latent_width = o->latent_width;
    l.audio_latents = o->audio_latents;
    l.patch_h = patch_h;
    l.patch_w = patch_w;
    l.n_keyframes = nkey;
    l.keyframe_first = o->keyframe_first;
    l.keyframe_last = o->keyframe_last;

    double *hgrid = NULL, *wgrid = NULL;
    h3s_status st = H3S_OK;
    int64_t pshape[2] = {S, 3};
    if ((st = alloc1(&l.token_tags, H3S_I64, S)) != H3S_OK || (st = alloc1(&l.row_kind, H3S_I64, S)) != H3S_OK ||
        (st = alloc1(&l.timestep_indices, H3S_I64, S)) != H3S_OK ||
        (st = h3s_tensor_alloc(&l.position_ids, H3S_F64, 2, pshape)) != H3S_OK ||
        (st = alloc1(&l.video_indices, H3S_I64, Nv)) != H3S_OK ||
        (st = alloc1(&l.audio_indices, H3S_I64, Na)) != H3S_OK || (st = alloc1(&l.text_indices, H3S_I64, Nt)) != H3S_OK)
        goto fail;
    hgrid = h3s_malloc((size_t)hp, sizeof(double));
    wgrid = h3s_malloc((size_t)wp, sizeof(double));
    if (!hgrid || !wgrid) {
        st = H3S_ERR_NOMEM;
        goto fail;
    }
    h3s_spatial_grid(o->latent_height, patch_h, o->latent_height, o->latent_width, hgrid);
    h3s_spatial_grid(o->latent_width, patch_w, o->latent_height, o->latent_width, wgrid);

    int64_t *tags = l.token_tags.data, *kind = l.row_kind.data, *tsi = l.timestep_indices.data;
    double *pos = l.position_ids.data; /* zero-filled by the allocation: padding rows stay (0, 0, 0) */
    int64_t *vidx = l.video_indices.data, *aidx = l.audio_indices.data, *tidx = l.text_indices.data;
    const double nt = (double)Nt;
    const int64_t cond_start = Nt, audio_start = Nt + n_cond, video_start = audio_start + Na;

    /* text: rows [0, Nt), position (i, 0, 0), tag 1 */
    for (int64_t i = 0; i < Nt; i++) {
        pos[3 * i] = (double)i;
        tags[i] = H3S_TAG_TEXT;
        kind[i] = H3S_ROW_TEXT;
        tidx[i] = i;
    }
    /* keyframe condition frames, in packed order "first" then "last" */
    {
        double anchors[2];
        int na = 0;
        if (o->keyframe_first) anchors[na++] = nt;
        if (o->keyframe_last) {
            h3s_status s2;
            double span = frames_span_numpy(o->frames, &s2);
            if (s2 != H3S_OK) {
                st = s2;
                goto fail;
            }
            double t = nt + span;
            anchors[na++] = t - k_frame_rescale;
        }
        for (int k = 0; k < na; k++) {
            for (int64_t r = 0; r < rpf; r++) {
                int64_t row = cond_start + k * rpf + r;
                pos[3 * row] = anchors[k];
                pos[3 * row + 1] = hgrid[r / wp];
                pos[3 * row + 2] = wgrid[r % wp];
                tags[row] = H3S_TAG_VIDEO;
                kind[row] = H3S_ROW_CONDITION;
            }
        }
    }
    /* target audio: channel-major, latent a of either channel at time Nt + a, h = 0, w = first / last width coord */
    for (int64_t c = 0; c < H3S_AUDIO_CHANNELS; c++) {
        for (int64_t a = 0; a < o->audio_latents; a++) {
            int64_t row = audio_start + c * o->audio_latents + a;
            pos[3 * row] = nt + (double)a;
            pos[3 * row + 1] = 0.0;
            pos[3 * row + 2] = c == 0 ? wgrid[0] : wgrid[wp - 1];
            tags[row] = H3S_TAG_AUDIO;
            kind[row] = H3S_ROW_AUDIO;
        }
    }
    /* target video: frame-major, then row-major over the (h, w) patch grid */
    {
        double cum = 0.0; /* torch.cumsum of the spans of the frames before f, sequential float64 */
        for (int64_t f = 0; f < o->frames; f++) {
            if (f > 0) cum += h3s_frame_span(f - 1);
            const double tf = nt + cum;
            for (int64_t r = 0; r < rpf; r++) {
                int64_t row = video_start + f * rpf + r;
                pos[3 * row] = tf;
                pos[3 * row + 1] = hgrid[r / wp];
                pos[3 * row + 2] = wgrid[r % wp];
                tags[row] = H3S_TAG_VIDEO;
                kind[row] = H3S_ROW_VIDEO;
            }
        }
    }
    /* padding */
    for (int64_t row = S_live; row < S; row++) {
        tags[row] = H3S_TAG_PAD;
        kind[row] = H3S_ROW_PAD;
    }
    /* index lists: video = condition rows then target video rows */
    for (int64_t i = 0; i < n_cond; i++)
        vidx[i] = cond_start + i;
    for (int64_t i = 0; i < n_target; i++)
        vidx[n_cond + i] = video_start + i;
    for (int64_t i = 0; i < Na; i++)
        aidx[i] = audio_start + i;

    /* static row-group plan: groups numbered by first appearance in packed order */
    {
        int64_t group_of_key[3] = {-1, -1, -1}; /* key 0: text + target video, 1: condition, 2: target audio */
        int64_t T = 0;
        for (int64_t row = 0; row < S; row++) {
            int key;
            switch (kind[row]) {
            case H3S_ROW_TEXT:
            case H3S_ROW_VIDEO: key = 0; break;
            case H3S_ROW_CONDITION: key = 1; break;
            case H3S_ROW_AUDIO: key = 2; break;
            default: key = -1; break;
            }
            if (key < 0) {
                tsi[row] = 0;
                continue;
            }
            if (group_of_key[key] < 0) group_of_key[key] = T++;
            tsi[row] = group_of_key[key];
        }
        l.T = T;
    }

    free(hgrid);
    free(wgrid);
    *out = l;
    return H3S_OK;

fail:
    free(hgrid);
    free(wgrid);
    h3s_layout_free(&l);
    return st;
}

/* ------------------------------------------------------------------ row timesteps */

static h3s_status check_layout(const char *op, const h3s_layout *l) {
    if (!l) return h3s_fail(H3S_ERR_INVALID, "%s: layout is NULL", op);
    if (l->S <= 0 || l->Nt <= 0 || l->Nv < 0 || l->Na < 0 || l->n_condition < 0 || l->n_condition > l->Nv ||
        l->Nt + l->Nv + l->Na > l->S)
        return h3s_fail(H3S_ERR_INVALID,
                        "%s: layout counts are inconsistent (S = %lld, Nt = %lld, Nv = %lld, Na = %lld, "
                        "n_condition = %lld); build it with h3s_layout_build",
                        op, (long long)l->S, (long long)l->Nt, (long long)l->Nv, (long long)l->Na,
                        (long long)l->n_condition);
    int64_t sdim[1] = {l->S};
    H3S_TRY(h3s_check_shape(op, "layout.row_kind", &l->row_kind, H3S_I64, 1, sdim));
    if (l->row_kind.device != 0) return h3s_fail(H3S_ERR_INVALID, "%s: layout.row_kind is not host memory", op);
    return H3S_OK;
}

h3s_status h3s_layout_timesteps_ex(const h3s_layout *l, float t_video, float t_audio, float t_condition,
                                   h3s_tensor *timestep, h3s_tensor *timestep_indices) {
    const char *op = "layout_timesteps";
    H3S_TRY(check_layout(op, l));
    if (!timestep) return h3s_fail(H3S_ERR_INVALID, "%s: timestep output is NULL", op);
    if (!timestep_indices) return h3s_fail(H3S_ERR_INVALID, "%s: timestep_indices output is NULL", op);
    const float tv[3] = {t_video, t_audio, t_condition};
    const char *tn[3] = {"t_video", "t_audio", "t_condition"};
    for (int i = 0; i < 3; i++)
        if (!(tv[i] >= 0.0f && tv[i] <= 1.0f))
            return h3s_fail(H3S_ERR_INVALID, "%s: %s = %g is outside [0, 1]", op, tn[i], (double)tv[i]);
    const int64_t *kind = l->row_kind.data;
    for (int64_t row = 0; row < l->S; row++)
        if (kind[row] < H3S_ROW_PAD || kind[row] > H3S_ROW_VIDEO)
            return h3s_fail(H3S_ERR_INVALID, "%s: layout.row_kind[%lld] = %lld is not a row kind", op, (long long)row,
                            (long long)kind[row]);

    /* Which values occur among the live rows. */
    int used[3] = {0, 0, 0}; /* t_video (text, target video), t_audio, t_condition */
    for (int64_t row = 0; row < l->S; row++) {
        switch (kind[row]) {
        case H3S_ROW_TEXT:
        case H3S_ROW_VIDEO: used[0] = 1; break;
        case H3S_ROW_AUDIO: used[1] = 1; break;
        case H3S_ROW_CONDITION: used[2] = 1; break;
        default: break;
        }
    }
    /* Distinct values sorted ascending (torch.unique(sorted=True)). */
    float vals[3] = {0, 0, 0};
    int64_t T = 0;
    for (int i = 0; i < 3; i++) {
        if (!used[i]) continue;
        int dup = 0;
        for (int64_t j = 0; j < T; j++)
            if (vals[j] == tv[i]) dup = 1;
        if (!dup) vals[T++] = tv[i];
    }
    for (int64_t i = 1; i < T; i++) /* insertion sort of at most 3 values */
        for (int64_t j = i; j > 0 && vals[j - 1] > vals[j]; j--) {
            float tmp = vals[j];
            vals[j] = vals[j - 1];
            vals[j - 1] = tmp;
        }
    int64_t slot[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < T; j++)
            if (vals[j] == tv[i]) slot[i] = j;

    h3s_tensor ts, ti;
    h3s_status st = alloc1(&ts, H3S_F32, T);
    if (st != H3S_OK) return st;
    st = alloc1(&ti, H3S_I64, l->S);
    if (st != H3S_OK) {
        h3s_tensor_free(&ts);
        return st;
    }
    memcpy(ts.data, vals, (size_t)T * sizeof(float));
    int64_t *idx = ti.data;
    for (int64_t row = 0; row < l->S; row++) {
        switch (kind[row]) {
        case H3S_ROW_TEXT:
        case H3S_ROW_VIDEO: idx[row] = slot[0]; break;
        case H3S_ROW_AUDIO: idx[row] = slot[1]; break;
        case H3S_ROW_CONDITION: idx[row] = slot[2]; break;
        default: idx[row] = 0; break;
        }
    }
    *timestep = ts;
    *timestep_indices = ti;
    return H3S_OK;
}

h3s_status h3s_layout_timesteps(const h3s_layout *l, float t_video, float t_audio, h3s_tensor *timestep,
                                h3s_tensor *timestep_indices) {
    if (!(t_video >= 0.0f && t_video <= 1.0f))
        return h3s_fail(H3S_ERR_INVALID, "layout_timesteps: t_video = %g is outside [0, 1]", (double)t_video);
    return h3s_layout_timesteps_ex(l, t_video, t_audio, h3s_condition_timestep(t_video), timestep, timestep_indices);
}

/* ------------------------------------------------------------------ seeded inputs */

uint64_t h3s_inputs_stream(const char *name, int64_t item) {
    /* An odd multiplier is a bijection of the 64-bit integers, so distinct items get distinct streams
     * and item 0 keeps the plain stream of the name. */
    return h3s_rng_stream_id(name) ^ ((uint64_t)item * 0x9E3779B97F4A7C15ULL);
}

static h3s_status alloc3(h3s_tensor *t, int64_t a, int64_t b, int64_t c) {
    int64_t s[3] = {a, b, c};
    return h3s_tensor_alloc(t, H3S_F32, 3, s);
}

h3s_status h3s_inputs_random(const h3s_layout *l, int64_t batch, uint64_t seed, int64_t video_width,
                             int64_t audio_channels, int64_t text_dim, h3s_tensor *hidden_states,
                             h3s_tensor *audio_hidden_states, h3s_tensor *encoder_hidden_states) {
    const char *op = "inputs_random";
    H3S_TRY(check_layout(op, l));
    if (!hidden_states || !audio_hidden_states || !encoder_hidden_states)
        return h3s_fail(H3S_ERR_INVALID, "%s: an output tensor is NULL", op);
    if (batch <= 0) return h3s_fail(H3S_ERR_INVALID, "%s: batch = %lld must be positive", op, (long long)batch);
    if (video_width <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: video_width = %lld must be positive", op, (long long)video_width);
    if (audio_channels <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: audio_channels = %lld must be positive", op, (long long)audio_channels);
    if (text_dim <= 0)
        return h3s_fail(H3S_ERR_INVALID, "%s: text_dim = %lld must be positive", op, (long long)text_dim);
    /* per-item element counts; the whole batch must stay far inside int64 / size_t */
    const int64_t limit = (int64_t)1 << 50;
    if (l->Nv > limit / video_width || l->Na > limit / audio_channels || l->Nt > limit / text_dim)
        return h3s_fail(H3S_ERR_INVALID, "%s: the requested tensors are too large", op);
    const int64_t nv = l->Nv * video_width, na = l->Na * audio_channels, nt = l->Nt * text_dim;
    if (nv > limit / batch || na > limit / batch || nt > limit / batch)
        return h3s_fail(H3S_ERR_INVALID, "%s: the requested tensors are too large", op);

    h3s_tensor hs, ahs, ehs;
    memset(&hs, 0, sizeof hs);
    memset(&ahs, 0, sizeof ahs);
    memset(&ehs, 0, sizeof ehs);
    h3s_status st;
    if ((st = alloc3(&hs, batch, l->Nv, video_width)) != H3S_OK ||
        (st = alloc3(&ahs, batch, l->Na, audio_channels)) != H3S_OK ||
        (st = alloc3(&ehs, batch, l->Nt, text_dim)) != H3S_OK) {
        h3s_tensor_free(&hs);
        h3s_tensor_free(&ahs);
        h3s_tensor_free(&ehs);
        return st;
    }
    const int64_t n_cond_el = l->n_condition * video_width;
    const float t_cond = H3S_KEYFRAME_NOISE_AUG;
    for (int64_t b = 0; b < batch; b++) {
        float *v = (float *)hs.data + b * nv;
        float *a = (float *)ahs.data + b * na;
        float *e = (float *)ehs.data + b * nt;
        const uint64_t s_v = h3s_inputs_stream("hidden_states", b), s_a = h3s_inputs_stream("audio_hidden_states", b),
                       s_e = h3s_inputs_stream("encoder_hidden_states", b),
                       s_x0 = h3s_inputs_stream("keyframe_latents", b), s_n = h3s_inputs_stream("keyframe_noise", b);
        /* Condition rows: clean latent x0 noised once at t = 0.999 (h3s_scale_noise's arithmetic).  Target rows are
         * indexed from the first target row, so the target noise of a seed is the same with and without keyframes. */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_cond_el; i++) {
            v[i] = h3s_scale_noise1(h3s_rng_normal(seed, s_x0, (uint64_t)i), h3s_rng_normal(seed, s_n, (uint64_t)i),
                                    t_cond);
        }
#pragma omp parallel for schedule(static)
        for (int64_t i = n_cond_el; i < nv; i++)
            v[i] = h3s_rng_normal(seed, s_v, (uint64_t)(i - n_cond_el));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < na; i++)
            a[i] = h3s_rng_normal(seed, s_a, (uint64_t)i);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nt; i++)
            e[i] = h3s_rng_normal(seed, s_e, (uint64_t)i);
    }
    *hidden_states = hs;
    *audio_hidden_states = ahs;
    *encoder_hidden_states = ehs;
    return H3S_OK;
}

h3s_status h3s_inputs_seeded(const h3s_config *c, const h3s_layout_opts *lo, int64_t batch, uint64_t seed,
                             float t_video, float t_audio, h3s_inputs *out) {
    if (!c || !lo || !out) return h3s_fail(H3S_ERR_INVALID, "inputs_seeded: NULL argument");
    if (batch < 1) return h3s_fail(H3S_ERR_INVALID, "inputs_seeded: batch must be at least 1");
    H3S_TRY(h3s_config_validate(c));
    h3s_layout lay;
    H3S_TRY(h3s_layout_build(lo, c->patch_size[1], c->patch_size[2], &lay));
    h3s_inputs in;
    memset(&in, 0, sizeof in);
    h3s_status st = h3s_inputs_random(&lay, batch, seed, h3s_config_video_width(c), c->audio_in_channels, c->text_dim,
                                      &in.hidden_states, &in.audio_hidden_states, &in.encoder_hidden_states);
    if (st == H3S_OK) st = h3s_layout_timesteps(&lay, t_video, t_audio, &in.timestep, &in.timestep_indices);
    if (st == H3S_OK) {
        /* the layout's tensors move into `in` */
        in.token_tags = lay.token_tags;
        in.position_ids = lay.position_ids;
        in.video_indices = lay.video_indices;
        in.audio_indices = lay.audio_indices;
        in.text_indices = lay.text_indices;
        memset(&lay.token_tags, 0, sizeof lay.token_tags);
        memset(&lay.position_ids, 0, sizeof lay.position_ids);
        memset(&lay.video_indices, 0, sizeof lay.video_indices);
        memset(&lay.audio_indices, 0, sizeof lay.audio_indices);
        memset(&lay.text_indices, 0, sizeof lay.text_indices);
    }
    h3s_layout_free(&lay);
    if (st != H3S_OK) {
        h3s_inputs_free(&in);
        return st;
    }
    *out = in;
    return H3S_OK;
}

h3s_status h3s_layout_count(const h3s_layout_opts *o, int64_t patch_h, int64_t patch_w, h3s_layout_rows *out) {
    if (!out) return h3s_fail(H3S_ERR_INVALID, "layout_count: output is NULL");
    /* the counts h3s_layout_build would allocate, without allocating them: any layout it accepts is counted at once */
    layout_counts k;
    H3S_TRY(count_layout("layout_count", o, patch_h, patch_w, &k));
    h3s_layout_rows r = {k.S, k.Nt, k.Nv, k.n_cond, k.Na, k.S - k.S_live};
    *out = r;
    return H3S_OK;
}

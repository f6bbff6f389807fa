/* The public C API (include/h3s*.h), linked against the shared library: this file may call only what the
 * library exports.  Load (model directory and pipeline snapshot), resident parameters, forward, backward with a
 * choice of gradients, node hooks, seeded and file inputs, the scheduler, the dual trajectory, fail-closed
 * errors; the files, tables and helpers the CLI is built on (safetensors, output checks, manifests, the replay). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h3s.h"
#include "h3s_dist.h"
#include "h3s_io.h"
#include "h3s_model.h"
#include "h3s_ops.h"
#include "h3s_replay.h"
#include "h3s_sample.h"

#include "check.h"

static int same_bytes(const h3s_tensor *a, const h3s_tensor *b) {
    if (!a->data || !b->data || a->dtype != b->dtype || h3s_tensor_nbytes(a) != h3s_tensor_nbytes(b)) return 0;
    return memcmp(a->data, b->data, h3s_tensor_nbytes(a)) == 0;
}

/* item 0 of a [B, ...] tensor against a [1, ...] tensor, bitwise */
static int item0_equal(const h3s_tensor *batched, const h3s_tensor *alone) {
    size_t n = h3s_tensor_nbytes(alone);
    return batched->data && alone->data && memcmp(batched->data, alone->data, n) == 0;
}

typedef struct hook_log {
    int forward_nodes, backward_nodes, saw_attention, saw_param_grad, fail_at;
    int64_t param_grads;
    const char *fail_name; /* the hook fails at the node of this name (forward or backward) */
} hook_log;

static h3s_status hook(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item) {
    hook_log *l = ctx;
    (void)batched;
    (void)rows_per_item;
    if (strstr(name, ".grad") || !strncmp(name, "param.", 6)) {
        l->backward_nodes++;
        if (!strncmp(name, "param.", 6)) l->param_grads++;
    } else {
        l->forward_nodes++;
    }
    if (!strcmp(name, "block.0.attention") && out->data) l->saw_attention = 1;
    if (l->fail_at && l->forward_nodes == l->fail_at) return H3S_ERR_MISMATCH;
    if (l->fail_name && !strcmp(name, l->fail_name)) return h3s_set_error(H3S_ERR_MISMATCH, "hook: stop at %s", name);
    return H3S_OK;
}

/* The last error message names every one of the (up to three) words. */
static int message_names(const char *a, const char *b, const char *c) {
    const char *e = h3s_last_error();
    return strstr(e, a) && (!b || strstr(e, b)) && (!c || strstr(e, c));
}

/* Arguments the library dereferenced unchecked (a crash) or accepted: now H3S_ERR_INVALID, nothing written, and the
 * documented values of the getters for NULL. */
static void check_null_arguments(void) {
    char hex[65];
    memset(hex, 'x', sizeof hex);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_sha256_hex("abc", 3, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_sha256_hex(NULL, 3, hex));
    CHECK(hex[0] == 'x', "sha256: nothing written on failure");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_grad_operands_parse("bf16", NULL));
    h3s_grad_operands mode = H3S_GRAD_OPERANDS_SPLIT;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_grad_operands_parse(NULL, &mode));
    CHECK(mode == H3S_GRAD_OPERANDS_SPLIT, "grad_operands_parse: nothing written on failure");
    h3s_tensor t, keep;
    memset(&t, 0x5a, sizeof t);
    keep = t;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_tensor_alloc(&t, H3S_F32, 2, NULL));
    CHECK(!memcmp(&t, &keep, sizeof t), "tensor_alloc: nothing written on failure");
    CHECK_OK(h3s_tensor_alloc(&t, H3S_F32, 0, NULL)); /* a scalar needs no shape */
    CHECK(h3s_tensor_numel(&t) == 1, "a 0-dim tensor holds one element");
    h3s_tensor_free(&t);
    /* convert: missing data, device memory and negative dims are refused before a byte is moved */
    int64_t four = 4, neg[2] = {-2, -2};
    float out[4] = {1, 2, 3, 4}, in[4] = {5, 6, 7, 8};
    h3s_tensor src = h3s_tensor_view(NULL, H3S_F32, 1, &four), dst = h3s_tensor_view(out, H3S_F32, 1, &four);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_tensor_convert(&src, &dst));
    CHECK(message_names("src", "no data", NULL), "convert names the missing data: %s", h3s_last_error());
    src = h3s_tensor_view(in, H3S_F32, 1, &four);
    src.device = 1;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_tensor_convert(&src, &dst));
    src = h3s_tensor_view(in, H3S_F32, 2, neg); /* (-2) x (-2) = 4 elements */
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_tensor_convert(&src, &dst));
    h3s_tensor nodst = h3s_tensor_view(NULL, H3S_BF16, 1, &four);
    src = h3s_tensor_view(in, H3S_F32, 1, &four);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_tensor_convert(&src, &nodst));
    CHECK(out[0] == 1 && out[3] == 4, "convert: nothing written on failure");
    CHECK(h3s_tensor_numel(NULL) == 0 && h3s_tensor_nbytes(NULL) == 0, "numel and nbytes of NULL are 0");
    /* getters of a NULL model: the documented values */
    CHECK(h3s_model_config(NULL) == NULL, "h3s_model_config(NULL) is NULL");
    CHECK(h3s_model_backend(NULL) == (h3s_backend_kind)-1, "h3s_model_backend(NULL) is -1");
}

/* Inputs the forward dereferenced or trusted: NULL data, device memory (never scanned for NaN), negative dims (-1 was
 * also check_i64_input's "any length"); refused by h3s_inputs_validate, hence by every forward and backward. */
static void check_inputs_refused(h3s_model *m, const h3s_inputs *in1, h3s_tape *tape1, const h3s_tensor *ct_s,
                                 const h3s_tensor *ct_a) {
    const h3s_config *c = h3s_model_config(m);
    int64_t B = -7;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, NULL, &B));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, in1, NULL));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(NULL, in1, &B));
    CHECK(B == -7, "inputs_validate: B written on failure");
    h3s_tensor s_keep, a_keep;
    memset(&s_keep, 0x33, sizeof s_keep);
    memset(&a_keep, 0x44, sizeof a_keep);
    h3s_tensor s_x = s_keep, a_x = a_keep;
    h3s_inputs bad = *in1; /* views of in1's tensors: never freed */
#define REFUSED(want, field, msg)                                                                                      \
    do {                                                                                                               \
        CHECK_FAILS(want, h3s_inputs_validate(c, &bad, &B));                                                           \
        CHECK(message_names(#field, msg, NULL), "validate names " #field ": %s", h3s_last_error());                    \
        CHECK_FAILS(want, h3s_model_forward(m, &bad, NULL, NULL, NULL, &s_x, &a_x));                                   \
        CHECK(!memcmp(&s_x, &s_keep, sizeof s_x) && !memcmp(&a_x, &a_keep, sizeof a_x), "forward wrote an output");    \
        bad = *in1;                                                                                                    \
    } while (0)
    bad.hidden_states.data = NULL;
    REFUSED(H3S_ERR_INVALID, hidden_states, "no data");
    bad.encoder_hidden_states.data = NULL;
    REFUSED(H3S_ERR_INVALID, encoder_hidden_states, "no data");
    bad.timestep.data = NULL;
    REFUSED(H3S_ERR_INVALID, timestep, "no data");
    bad.position_ids.data = NULL;
    REFUSED(H3S_ERR_INVALID, position_ids, "no data");
    bad.token_tags.data = NULL;
    REFUSED(H3S_ERR_INVALID, token_tags, "no data");
    bad.text_indices.data = NULL;
    REFUSED(H3S_ERR_INVALID, text_indices, "no data");
    /* a device tensor is not read on the host: refused, not passed unscanned (here with a NaN in it) */
    h3s_tensor nan_hs;
    CHECK_OK(h3s_tensor_alloc(&nan_hs, in1->hidden_states.dtype, in1->hidden_states.ndim, in1->hidden_states.shape));
    memcpy(nan_hs.data, in1->hidden_states.data, h3s_tensor_nbytes(&nan_hs));
    ((float *)nan_hs.data)[3] = NAN;
    bad.hidden_states = nan_hs;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, &bad, &B)); /* on the host: the NaN */
    bad.hidden_states.device = 1;
    REFUSED(H3S_ERR_INVALID, hidden_states, "device memory");
    h3s_tensor_free(&nan_hs);
    bad.audio_hidden_states.device = 1;
    REFUSED(H3S_ERR_INVALID, audio_hidden_states, "device memory");
    /* negative dims: shape[1] = -1 was the "any length" of the index lists */
    bad.hidden_states.shape[1] = -1;
    REFUSED(H3S_ERR_SHAPE, hidden_states, "negative");
    bad.audio_hidden_states.shape[1] = -1;
    REFUSED(H3S_ERR_SHAPE, audio_hidden_states, "negative");
    bad.encoder_hidden_states.shape[0] = -1;
    REFUSED(H3S_ERR_SHAPE, encoder_hidden_states, "negative");
    /* positions: refused on the host for either backend when the f32 cast overflows or the angle bound is passed
     * (the device rope table would otherwise compute Inf or NaN angles) */
    h3s_tensor pos64;
    CHECK_OK(h3s_tensor_alloc(&pos64, H3S_F64, 2, in1->position_ids.shape));
    for (int64_t i = 0; i < h3s_tensor_numel(&pos64); i++)
        ((double *)pos64.data)[i] = in1->position_ids.dtype == H3S_F64 ? ((const double *)in1->position_ids.data)[i]
                                                                       : ((const float *)in1->position_ids.data)[i];
    bad.position_ids = pos64;
    CHECK_OK(h3s_inputs_validate(c, &bad, &B));
    ((double *)pos64.data)[4] = 1e39; /* finite in F64, Inf in f32 */
    REFUSED(H3S_ERR_INVALID, position_ids, "f32");
    bad.position_ids = pos64;
    ((double *)pos64.data)[4] = -2e6; /* beyond the accurate range of the deterministic sin/cos */
    REFUSED(H3S_ERR_INVALID, position_ids, "exceeds");
    h3s_tensor_free(&pos64);
#undef REFUSED
    CHECK_OK(h3s_inputs_validate(c, in1, &B));
    /* a cotangent without data */
    h3s_grads g;
    memset(&g, 0x5a, sizeof g);
    h3s_grads g_keep = g;
    h3s_tensor ct_none = *ct_s;
    ct_none.data = NULL;
    ct_none.owns_data = 0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(m, tape1, &ct_none, ct_a, NULL, NULL, &g));
    CHECK(message_names("cotangent", "sample", "no data"), "backward names the cotangent: %s", h3s_last_error());
    CHECK(!memcmp(&g, &g_keep, sizeof g), "a refused backward wrote its output");
}

/* Row gather / scatter, rope and the residual: every tensor checked before use (NULL data and negative dims crashed
 * the row operators), and no output may overlap an input -- except where documented: rope's y may be x itself and
 * the residual's out r or y itself, with the bits of a separate output. */
static void check_operator_args(void) {
    /* rows: src [B * 3, 4] -> dst [B * 2, 4], index {2, 0}, B = 2 */
    int64_t ss[2] = {6, 4}, ds[2] = {4, 4}, two = 2;
    h3s_tensor src, dst, idx;
    CHECK_OK(h3s_tensor_alloc(&src, H3S_F32, 2, ss));
    CHECK_OK(h3s_tensor_alloc(&dst, H3S_F32, 2, ds));
    CHECK_OK(h3s_tensor_alloc(&idx, H3S_I64, 1, &two));
    for (int i = 0; i < 24; i++)
        ((float *)src.data)[i] = (float)i;
    ((int64_t *)idx.data)[0] = 2;
    CHECK_OK(h3s_rows_gather(&src, &idx, 2, &dst));
    CHECK(((float *)dst.data)[0] == 8.0f && ((float *)dst.data)[12] == 12.0f, "rows_gather picks rows 2, 0 of each");
    memset(dst.data, 0x7f, h3s_tensor_nbytes(&dst));
    h3s_tensor bsrc = src, bidx = idx, bdst = dst;
    bsrc.data = NULL;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_gather(&bsrc, &idx, 2, &dst));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_scatter(&dst, &idx, 2, &bsrc));
    bidx.data = NULL;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_gather(&src, &bidx, 2, &dst));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_scatter(&dst, &bidx, 2, &src));
    bsrc = src;
    bsrc.shape[1] = -4;
    bdst.shape[1] = -4;
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rows_gather(&bsrc, &idx, 2, &bdst));
    CHECK(message_names("negative", NULL, NULL), "rows names the negative dim: %s", h3s_last_error());
    bidx.data = idx.data;
    bidx.shape[0] = -2;
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_rows_gather(&src, &bidx, 2, &dst));
    h3s_tensor over = h3s_tensor_view((float *)src.data + 4, H3S_F32, 2, ds); /* dst over rows 1..4 of src */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_gather(&src, &idx, 2, &over));
    CHECK(message_names("dst overlaps src", NULL, NULL), "rows names both: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rows_scatter(&over, &idx, 2, &src));
    CHECK(message_names("dst overlaps src", NULL, NULL), "rows names both: %s", h3s_last_error());
    int untouched = 1;
    for (int i = 0; i < 24; i++)
        untouched &= ((float *)src.data)[i] == (float)i;
    for (int i = 0; i < 16; i++)
        untouched &= ((uint32_t *)dst.data)[i] == 0x7f7f7f7fu;
    CHECK(untouched, "a refused row operator wrote its output");

    /* rope: x [4, 2 heads x 8] BF16 (rows 0..3 of a 5-row buffer), tables of 2 positions, F = 1 */
    const int64_t M = 4, W = 16, heads = 2, S = 2;
    int64_t xs[2] = {M + 1, W}, x4[2] = {M, W}, ps[2] = {S, 3}, ts[2] = {S, 6};
    h3s_tensor buf, pos, cs, sn, y, y2;
    CHECK_OK(h3s_tensor_alloc(&buf, H3S_BF16, 2, xs));
    CHECK_OK(h3s_tensor_alloc(&pos, H3S_F64, 2, ps));
    CHECK_OK(h3s_tensor_alloc(&cs, H3S_F32, 2, ts));
    CHECK_OK(h3s_tensor_alloc(&sn, H3S_F32, 2, ts));
    CHECK_OK(h3s_tensor_alloc(&y, H3S_BF16, 2, x4));
    CHECK_OK(h3s_tensor_alloc(&y2, H3S_BF16, 2, x4));
    for (int i = 0; i < (M + 1) * W; i++)
        ((uint16_t *)buf.data)[i] = h3s_bf16_from_f32((float)((i * 7) % 13) / 4.0f - 1.5f);
    for (int i = 0; i < S * 3; i++)
        ((double *)pos.data)[i] = (double)(i + 1);
    h3s_tensor x = h3s_tensor_view(buf.data, H3S_BF16, 2, x4);
    CHECK_OK(h3s_rope_table(&pos, 1, 10000.0, &cs, &sn));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, 1, 10000.0, &cs, &cs));
    CHECK(message_names("sin_out overlaps cos_out", NULL, NULL), "rope_table names both: %s", h3s_last_error());
    h3s_tensor over_pos = h3s_tensor_view(pos.data, H3S_F32, 2, ts); /* 48 bytes over the positions' 48 */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_table(&pos, 1, 10000.0, &over_pos, &sn));
    CHECK(message_names("cos_out overlaps position_ids", NULL, NULL), "rope_table names both: %s", h3s_last_error());
    CHECK_OK(h3s_rope_forward(&x, heads, &cs, &sn, &y));
    memcpy(y2.data, x.data, h3s_tensor_nbytes(&y2));
    CHECK_OK(h3s_rope_forward(&y2, heads, &cs, &sn, &y2)); /* documented: y may be x itself */
    CHECK(!memcmp(y2.data, y.data, h3s_tensor_nbytes(&y)), "rope in place: the bits of a separate output");
    h3s_tensor shifted = h3s_tensor_view((uint16_t *)buf.data + W, H3S_BF16, 2, x4); /* rows 1..4: partial overlap */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, heads, &cs, &sn, &shifted));
    CHECK(message_names("y overlaps x", NULL, NULL), "rope names both: %s", h3s_last_error());
    /* a cos table inside a larger buffer, y starting inside the table */
    int64_t tbn = S * 6 + 32;
    h3s_tensor tbuf;
    CHECK_OK(h3s_tensor_alloc(&tbuf, H3S_F32, 1, &tbn));
    memcpy(tbuf.data, cs.data, h3s_tensor_nbytes(&cs));
    h3s_tensor cs_in = h3s_tensor_view(tbuf.data, H3S_F32, 2, ts);
    h3s_tensor y_over = h3s_tensor_view((float *)tbuf.data + 6, H3S_BF16, 2, x4);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_rope_forward(&x, heads, &cs_in, &sn, &y_over));
    CHECK(message_names("y overlaps cos", NULL, NULL), "rope names both: %s", h3s_last_error());
    h3s_tensor_free(&tbuf);

    /* residual: out = r + y, BF16 [4, 16], no gate */
    h3s_tensor r = h3s_tensor_view(buf.data, H3S_BF16, 2, x4), out, r2, yy2;
    CHECK_OK(h3s_tensor_alloc(&out, H3S_BF16, 2, x4));
    CHECK_OK(h3s_tensor_alloc(&r2, H3S_BF16, 2, x4));
    CHECK_OK(h3s_tensor_alloc(&yy2, H3S_BF16, 2, x4));
    CHECK_OK(h3s_residual_forward(&r, &y, NULL, NULL, 0, &out));
    memcpy(r2.data, r.data, h3s_tensor_nbytes(&r2));
    CHECK_OK(h3s_residual_forward(&r2, &y, NULL, NULL, 0, &r2)); /* documented: out may be r */
    memcpy(yy2.data, y.data, h3s_tensor_nbytes(&yy2));
    CHECK_OK(h3s_residual_forward(&r, &yy2, NULL, NULL, 0, &yy2)); /* or y */
    CHECK(!memcmp(r2.data, out.data, h3s_tensor_nbytes(&out)) && !memcmp(yy2.data, out.data, h3s_tensor_nbytes(&out)),
          "residual in place: the bits of a separate output");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_residual_forward(&r, &y, NULL, NULL, 0, &shifted));
    CHECK(message_names("out overlaps r", NULL, NULL), "residual names both: %s", h3s_last_error());

    h3s_tensor *frees[] = {&src, &dst, &idx, &buf, &pos, &cs, &sn, &y, &y2, &out, &r2, &yy2};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        h3s_tensor_free(frees[i]);
}

/* Init progress: calls counted, the last (done, total) kept. */
typedef struct init_seen {
    int calls;
    uint64_t done, total;
} init_seen;
static void init_progress(void *ctx, uint64_t done, uint64_t total) {
    init_seen *s = ctx;
    s->calls++;
    s->done = done;
    s->total = total;
}

static const h3s_layout_opts LAYOUT = {6, 2, 4, 6, 4, 0, 0, 0}; /* `h3strict inputs` defaults */

int main(void) {
    char dir[] = "/tmp/h3s_test_api_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char model_dir[512], snap_dir[512], snap_tr[512];
    snprintf(model_dir, sizeof model_dir, "%s/m", dir);
    snprintf(snap_dir, sizeof snap_dir, "%s/snap", dir);
    snprintf(snap_tr, sizeof snap_tr, "%s/snap/transformer", dir);

    CHECK(!strcmp(h3s_version(), H3S_VERSION_STRING), "version %s", h3s_version());
    check_null_arguments();
    check_operator_args();

    /* backends */
    h3s_backend_kind kind;
    CHECK_OK(h3s_backend_parse("cuda", &kind));
    CHECK(kind == H3S_BACKEND_CUDA, "cuda parses to %d", (int)kind);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_backend_parse("tpu", &kind));
    CHECK_OK(h3s_backend_check(H3S_BACKEND_CPU));
    const char *cuda_built = getenv("H3S_CUDA_BUILT");
    if (cuda_built && !strcmp(cuda_built, "OFF")) {
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_backend_check(H3S_BACKEND_CUDA));
        const char *e = h3s_last_error();
        CHECK(strstr(e, "this build has no CUDA backend: ") &&
                  (strstr(e, "configured with -DH3S_CUDA=OFF") || strstr(e, "no CUDA compiler (nvcc) was found")),
              "the no-CUDA message names its cause: %s", e);
        h3s_model *none = NULL;
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_model_load(dir, H3S_BACKEND_CUDA, 0, &none));
        CHECK(none == NULL, "no model on failure");
    }

    /* load: a model directory and a pipeline snapshot holding transformer/ */
    CHECK_OK(h3s_model_init("tiny", -1, 5, model_dir));
    mkdir(snap_dir, 0700);
    CHECK_OK(h3s_model_init("tiny", -1, 5, snap_tr));
    h3s_model *m = NULL, *snap = NULL, *own = NULL;
    CHECK_OK(h3s_model_load(model_dir, H3S_BACKEND_CPU, 0, &m));
    CHECK_OK(h3s_model_load(snap_dir, H3S_BACKEND_CPU, 0, &snap));
    CHECK_OK(h3s_model_load(model_dir, H3S_BACKEND_CPU, H3S_LOAD_OWN_WEIGHTS, &own));
    if (!m || !snap || !own) {
        fprintf(stderr, "cannot go on without the models\n");
        return 1;
    }
    const h3s_config *c = h3s_model_config(m);
    CHECK(c->hidden_size == 48 && c->num_layers == 2, "tiny config: hidden %lld layers %lld", (long long)c->hidden_size,
          (long long)c->num_layers);
    CHECK(h3s_model_backend(m) == H3S_BACKEND_CPU, "backend");
    const int64_t np = h3s_model_param_count(m);
    CHECK(np == 52 && h3s_model_param_count(snap) == np, "52 parameters, got %lld", (long long)np);
    int views_equal = 1, own_distinct = 1;
    for (int64_t i = 0; i < np; i++) {
        const char *n1 = NULL, *n2 = NULL;
        h3s_tensor v1, v2;
        CHECK_OK(h3s_model_param(m, i, &n1, &v1));
        CHECK_OK(h3s_model_param(own, i, &n2, &v2));
        views_equal &= !strcmp(n1, n2) && same_bytes(&v1, &v2) && !v1.owns_data && v1.device == 0;
        own_distinct &= v1.data != v2.data;
    }
    CHECK(views_equal, "parameter views: same names and bytes in the mapped and the owned model");
    CHECK(own_distinct, "H3S_LOAD_OWN_WEIGHTS gives the model its own memory");
    const char *pname = NULL;
    h3s_tensor pv;
    CHECK_OK(h3s_model_param(m, 0, &pname, &pv));
    CHECK(!strcmp(pname, "proj_in.weight") && pv.dtype == H3S_F32 && pv.ndim == 2 && pv.shape[1] == 96 / 4,
          "param 0 is proj_in.weight [48, 24] F32 (tiny: 6 channels x 4), got %s", pname);
    CHECK_FAILS(H3S_ERR_INDEX, h3s_model_param(m, np, &pname, &pv));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_load(model_dir, H3S_BACKEND_CPU, 8u, &snap));
    h3s_model *bad = NULL;
    CHECK_FAILS(H3S_ERR_IO, h3s_model_load(dir, H3S_BACKEND_CPU, 0, &bad));
    CHECK(bad == NULL, "no model on failure");

    /* forward: batch 3 and batch 1 of the same seeded request */
    h3s_inputs in3, in1;
    CHECK_OK(h3s_inputs_seeded(c, &LAYOUT, 3, 7, 0.25f, 0.6f, &in3));
    CHECK_OK(h3s_inputs_seeded(c, &LAYOUT, 1, 7, 0.25f, 0.6f, &in1));
    int64_t B = 0;
    CHECK_OK(h3s_inputs_validate(c, &in3, &B));
    CHECK(B == 3, "batch %lld", (long long)B);
    hook_log log = {0};
    h3s_tape *tape3 = NULL, *tape1 = NULL;
    h3s_tensor s3, a3, s1, a1, s_own, a_own, s_snap, a_snap;
    CHECK_OK(h3s_model_forward(m, &in3, hook, &log, &tape3, &s3, &a3));
    CHECK(log.forward_nodes > 40 && log.saw_attention, "hook saw %d forward nodes", log.forward_nodes);
    CHECK_OK(h3s_model_forward(m, &in1, NULL, NULL, &tape1, &s1, &a1));
    CHECK(item0_equal(&s3, &s1) && item0_equal(&a3, &a1), "item 0 of batch 3 equals batch 1, bitwise");
    CHECK_OK(h3s_model_forward(own, &in1, NULL, NULL, NULL, &s_own, &a_own));
    CHECK_OK(h3s_model_forward(snap, &in1, NULL, NULL, NULL, &s_snap, &a_snap));
    CHECK(same_bytes(&s_own, &s1) && same_bytes(&a_own, &a1), "owned weights give the same bits");
    CHECK(same_bytes(&s_snap, &s1) && same_bytes(&a_snap, &a1), "the snapshot's transformer/ gives the same bits");

    /* writing an owned parameter changes the next forward; writing it back restores the bits */
    h3s_tensor bias;
    int64_t bias_i = -1;
    for (int64_t i = 0; i < np; i++) {
        const char *n = NULL;
        CHECK_OK(h3s_model_param(own, i, &n, &bias));
        if (!strcmp(n, "proj_out.bias")) {
            bias_i = i;
            break;
        }
    }
    CHECK(bias_i >= 0 && bias.dtype == H3S_F32, "proj_out.bias found");
    if (bias_i >= 0) {
        float *bw = bias.data, saved = bw[0];
        bw[0] = saved + 1.0f;
        h3s_tensor s2, a2;
        CHECK_OK(h3s_model_forward(own, &in1, NULL, NULL, NULL, &s2, &a2));
        CHECK(!same_bytes(&s2, &s1), "a changed weight changes the sample");
        h3s_tensor_free(&s2);
        h3s_tensor_free(&a2);
        bw[0] = saved;
        CHECK_OK(h3s_model_forward(own, &in1, NULL, NULL, NULL, &s2, &a2));
        CHECK(same_bytes(&s2, &s1) && same_bytes(&a2, &a1), "restored weight, restored bits");
        h3s_tensor_free(&s2);
        h3s_tensor_free(&a2);
    }

    /* a hook that fails aborts the pass with its status and writes no output */
    hook_log stop = {0};
    stop.fail_at = 5;
    h3s_tensor s_x = {0}, a_x = {0};
    h3s_set_error(H3S_ERR_SHAPE, "an older failure"); /* the hook sets no message: that one must not be reported */
    CHECK(h3s_model_forward(m, &in1, hook, &stop, NULL, &s_x, &a_x) == H3S_ERR_MISMATCH, "hook status returned");
    CHECK(message_names("hook", "without a message", NULL) && !strstr(h3s_last_error(), "older"),
          "a silent hook's failure is named: %s", h3s_last_error());
    CHECK(s_x.data == NULL && a_x.data == NULL, "no output after an aborted pass");
    { /* ... and leaves the caller's structs as they were, here holding an earlier result (they were zeroed) */
        hook_log at_out = {0};
        at_out.fail_name = "proj_out";
        h3s_tensor s_held = s1, a_held = a1;
        h3s_tape *t_held = (h3s_tape *)&at_out;
        CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_forward(m, &in1, hook, &at_out, &t_held, &s_held, &a_held));
        CHECK(message_names("stop at proj_out", NULL, NULL), "the hook's message: %s", h3s_last_error());
        CHECK(!memcmp(&s_held, &s1, sizeof s1) && !memcmp(&a_held, &a1, sizeof a1) && t_held == (h3s_tape *)&at_out,
              "a pass stopped at proj_out replaced the caller's sample, audio_sample or tape");
    }

    /* bad input: a wrong dtype is refused, nothing written */
    h3s_inputs wrong = in1;
    wrong.hidden_states.dtype = H3S_I64;
    h3s_tensor s_w = {0}, a_w = {0};
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_forward(m, &wrong, NULL, NULL, NULL, &s_w, &a_w));
    CHECK(s_w.data == NULL && a_w.data == NULL, "no output on a refused input");
    wrong = in1;
    ((int64_t *)wrong.video_indices.data)[0] += 1000;
    CHECK_FAILS(H3S_ERR_INDEX, h3s_model_forward(m, &wrong, NULL, NULL, NULL, &s_w, &a_w));
    ((int64_t *)wrong.video_indices.data)[0] -= 1000;

    /* forward into the caller's host tensors: the bits of h3s_model_forward; refused before any work when an output
     * has the wrong dtype or shape, overlaps an input or the other output, or claims device memory on a host model */
    {
        h3s_tensor si, ai;
        CHECK_OK(h3s_tensor_alloc(&si, H3S_F32, s1.ndim, s1.shape));
        CHECK_OK(h3s_tensor_alloc(&ai, H3S_F32, a1.ndim, a1.shape));
        h3s_tape *ti = NULL;
        CHECK_OK(h3s_model_forward_into(m, &in1, NULL, NULL, &ti, &si, &ai));
        CHECK(ti != NULL && same_bytes(&si, &s1) && same_bytes(&ai, &a1), "forward_into: the bits of forward");
        h3s_tape_free(ti);
        h3s_tensor wrong_out = si;
        wrong_out.dtype = H3S_BF16;
        CHECK_FAILS(H3S_ERR_DTYPE, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, &wrong_out, &ai));
        wrong_out = si;
        wrong_out.shape[1] -= 1;
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, &wrong_out, &ai));
        wrong_out = si;
        wrong_out.device = 1;
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, &wrong_out, &ai));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, &si, &si));
        CHECK(in1.hidden_states.dtype == H3S_F32, "seeded hidden_states are F32, the sample's dtype");
        h3s_tensor over = in1.hidden_states; /* the same shape and dtype as sample: an output over the input */
        over.owns_data = 0;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, &over, &ai));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward_into(m, &in1, NULL, NULL, NULL, NULL, &ai));
        /* an output over the caller's integer inputs (the forward works on private copies of them, and the check
         * looked only at those): refused, the tags as they were */
        {
            h3s_tensor buf;
            CHECK_OK(h3s_tensor_alloc(&buf, H3S_F32, si.ndim, si.shape));
            CHECK(h3s_tensor_nbytes(&buf) >= h3s_tensor_nbytes(&in1.token_tags), "the sample holds the tags");
            if (h3s_tensor_nbytes(&buf) >= h3s_tensor_nbytes(&in1.token_tags))
                memcpy(buf.data, in1.token_tags.data, h3s_tensor_nbytes(&in1.token_tags));
            h3s_inputs in_tags = in1;
            in_tags.token_tags.data = buf.data;
            h3s_tensor over_tags = buf;
            over_tags.owns_data = 0;
            CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward_into(m, &in_tags, NULL, NULL, NULL, &over_tags, &ai));
            CHECK(strstr(h3s_last_error(), "overlaps the input token_tags"), "names the tags: %s", h3s_last_error());
            CHECK(!memcmp(buf.data, in1.token_tags.data, h3s_tensor_nbytes(&in1.token_tags)),
                  "a refused forward_into wrote over the caller's token_tags");
            h3s_tensor_free(&buf);
        }
        h3s_tensor_free(&si);
        h3s_tensor_free(&ai);
    }

    /* backward: every gradient, then a choice; requested ones carry the same bits, the others none */
    h3s_tensor ct_s, ct_a;
    CHECK_OK(h3s_tensor_alloc(&ct_s, H3S_F32, s1.ndim, s1.shape));
    CHECK_OK(h3s_tensor_alloc(&ct_a, H3S_F32, a1.ndim, a1.shape));
    for (int64_t i = 0; i < h3s_tensor_numel(&ct_s); i++)
        ((float *)ct_s.data)[i] = (float)((i * 37) % 11 - 5) / 8.0f;
    for (int64_t i = 0; i < h3s_tensor_numel(&ct_a); i++)
        ((float *)ct_a.data)[i] = (float)((i * 13) % 7 - 3) / 4.0f;
    { /* a device cotangent on a host model is refused before any work */
        h3s_tensor dev_ct = ct_s;
        dev_ct.device = 1;
        dev_ct.owns_data = 0;
        h3s_grads none;
        memset(&none, 0, sizeof none);
        CHECK_FAILS(H3S_ERR_DEVICE, h3s_model_backward(m, tape1, &dev_ct, &ct_a, NULL, NULL, &none));
    }
    check_inputs_refused(m, &in1, tape1, &ct_s, &ct_a);
    { /* a backward stopped by its hook leaves the caller's h3s_grads as it was (it was zeroed) */
        hook_log at_grad = {0};
        at_grad.fail_name = "proj_out.grad";
        h3s_grads held;
        memset(&held, 0x5a, sizeof held);
        h3s_grads held_keep = held;
        CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_backward(m, tape1, &ct_s, &ct_a, hook, &at_grad, &held));
        CHECK(!memcmp(&held, &held_keep, sizeof held), "a backward stopped at proj_out.grad wrote *out");
        at_grad.fail_name = "param.proj_in.weight"; /* a parameter's node: every gradient has been computed */
        CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_backward_select(m, tape1, &ct_s, &ct_a, NULL, hook, &at_grad, &held));
        CHECK(!memcmp(&held, &held_keep, sizeof held), "a backward stopped at its last node wrote *out");
    }
    h3s_grads all, some, again;
    hook_log blog = {0};
    CHECK_OK(h3s_model_backward(m, tape1, &ct_s, &ct_a, hook, &blog, &all));
    CHECK(all.count == np && blog.param_grads == np, "every parameter gradient (%lld emitted)",
          (long long)blog.param_grads);
    unsigned char *want = calloc((size_t)np, 1);
    int64_t nwant = 0;
    for (int64_t i = 0; i < np; i++) {
        const char *n = all.names[i];
        if (!strcmp(n, "proj_out.weight") || !strcmp(n, "transformer_blocks.1.attn.to_q.weight") ||
            !strcmp(n, "time_embedder.linear_1.bias") || !strcmp(n, "token_refiner.final_norm.weight")) {
            want[i] = 1;
            nwant++;
        }
    }
    CHECK(nwant == 4, "four parameters chosen");
    hook_log slog = {0};
    CHECK_OK(h3s_model_backward_select(m, tape1, &ct_s, &ct_a, want, hook, &slog, &some));
    CHECK(slog.param_grads == nwant, "only the chosen parameter gradients are emitted (%lld)",
          (long long)slog.param_grads);
    int chosen_equal = 1, others_empty = 1, nonzero = 0;
    for (int64_t i = 0; i < np; i++) {
        if (want[i]) {
            chosen_equal &= same_bytes(&some.params[i], &all.params[i]);
            for (int64_t k = 0; k < h3s_tensor_numel(&all.params[i]); k++)
                nonzero |= ((const float *)all.params[i].data)[k] != 0.0f;
        } else {
            others_empty &= some.params[i].data == NULL && some.params[i].ndim == all.params[i].ndim &&
                            some.params[i].shape[0] == all.params[i].shape[0];
        }
    }
    CHECK(chosen_equal && nonzero, "chosen gradients bitwise equal to the full backward's (and not all zero)");
    CHECK(others_empty, "gradients not chosen: no data, checkpoint shape");
    CHECK(same_bytes(&some.hidden_states, &all.hidden_states) &&
              same_bytes(&some.audio_hidden_states, &all.audio_hidden_states) &&
              same_bytes(&some.encoder_hidden_states, &all.encoder_hidden_states),
          "input gradients unchanged by the choice");
    CHECK_OK(h3s_model_backward(m, tape1, &ct_s, &ct_a, NULL, NULL, &again));
    int repeat = 1;
    for (int64_t i = 0; i < np; i++)
        repeat &= same_bytes(&again.params[i], &all.params[i]);
    CHECK(repeat && same_bytes(&again.hidden_states, &all.hidden_states), "the tape is reusable: same bits again");
    h3s_tensor bad_ct;
    int64_t bad_shape[3] = {2, s1.shape[1], s1.shape[2]};
    CHECK_OK(h3s_tensor_alloc(&bad_ct, H3S_F32, 3, bad_shape));
    h3s_grads none;
    memset(&none, 0, sizeof none);
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_model_backward(m, tape1, &bad_ct, &ct_a, NULL, NULL, &none));
    CHECK(none.params == NULL && none.hidden_states.data == NULL, "no gradients on a refused cotangent");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(own, tape1, &ct_s, &ct_a, NULL, NULL, &none));

    /* the CUDA backend, where this build and machine have it: resident weights in device memory, the same
     * invariance and gradient choice */
    if (h3s_backend_check(H3S_BACKEND_CUDA) == H3S_OK) {
        h3s_model *g = NULL;
        CHECK_OK(h3s_model_load(model_dir, H3S_BACKEND_CUDA, 0, &g));
        if (g) {
            h3s_tensor gv;
            CHECK_OK(h3s_model_param(g, 0, NULL, &gv));
            CHECK(gv.device == 1 && gv.data != NULL, "CUDA parameters live in device memory");
            h3s_tensor gs3, ga3, gs1, ga1;
            h3s_tape *gt = NULL;
            CHECK_OK(h3s_model_forward(g, &in3, NULL, NULL, NULL, &gs3, &ga3));
            CHECK_OK(h3s_model_forward(g, &in1, NULL, NULL, &gt, &gs1, &ga1));
            CHECK(item0_equal(&gs3, &gs1) && item0_equal(&ga3, &ga1), "CUDA: item 0 of batch 3 equals batch 1");
            h3s_grads gall, gsome;
            CHECK_OK(h3s_model_backward(g, gt, &ct_s, &ct_a, NULL, NULL, &gall));
            CHECK_OK(h3s_model_backward_select(g, gt, &ct_s, &ct_a, want, NULL, NULL, &gsome));
            int geq = 1;
            for (int64_t i = 0; i < np; i++)
                geq &= want[i] ? same_bytes(&gsome.params[i], &gall.params[i]) : gsome.params[i].data == NULL;
            CHECK(geq && same_bytes(&gsome.hidden_states, &gall.hidden_states), "CUDA: chosen gradients, same bits");
            h3s_grads_free(&gall);
            h3s_grads_free(&gsome);
            h3s_tape_free(gt);
            h3s_tensor *gouts[] = {&gs3, &ga3, &gs1, &ga1};
            for (size_t i = 0; i < 4; i++)
                h3s_tensor_free(gouts[i]);
            h3s_model_free(g);
        }
    } else {
        printf("test_api: CUDA part skipped: %s\n", h3s_last_error());
    }

    /* inputs read from a file `h3strict inputs` wrote are the seeded inputs, tensor for tensor */
    const char *cli = getenv("H3S_CLI");
    if (cli) {
        char cmd[2048], path[600];
        snprintf(path, sizeof path, "%s/in.safetensors", dir);
        snprintf(cmd, sizeof cmd, "'%s' inputs --model '%s' --seed 7 --batch 3 --out '%s' --quiet >/dev/null", cli,
                 model_dir, path);
        CHECK(system(cmd) == 0, "%s", cmd);
        h3s_inputs rd;
        CHECK_OK(h3s_inputs_read(path, &rd));
        const h3s_tensor *x = &rd.hidden_states, *y = &in3.hidden_states;
        int equal = 1;
        for (int k = 0; k < 10; k++)
            equal &= same_bytes(&x[k], &y[k]);
        CHECK(equal && rd.attention_mask.data == NULL, "h3s_inputs_read == h3s_inputs_seeded for the same request");
        h3s_inputs_free(&rd);
        h3s_inputs none_in;
        CHECK_FAILS(H3S_ERR_IO, h3s_inputs_read(snap_dir, &none_in));
    }

    /* scheduler */
    float sig[9], ts[8];
    int64_t count = 0;
    CHECK_OK(h3s_schedule_sigmas(9, H3S_VIDEO_SHIFT, sig, &count));
    CHECK(count == 9 && sig[0] == 1.0f && sig[count - 1] == 0.0f, "sigmas: %lld from 1 to 0", (long long)count);
    CHECK_OK(h3s_schedule_timesteps(sig, count, ts));
    CHECK(ts[0] == 0.0f && ts[1] == 1.0f - sig[1], "timesteps = 1 - sigmas");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_sigmas(1, H3S_VIDEO_SHIFT, sig, &count));
    /* a schedule a trajectory can run: the pipeline's shifts pass; 0.001 rounds sigma 0 to 1.00001287 (float: 1 +
     * (0.001 - 1) is not 0.001), a negative timestep, and is refused naming the sigma */
    CHECK_OK(h3s_schedule_check(2, H3S_VIDEO_SHIFT));
    CHECK_OK(h3s_schedule_check(48, H3S_AUDIO_SHIFT));
    CHECK_OK(h3s_schedule_check(2, 0.5f));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_check(2, 0.001f));
    CHECK(message_names("rounds sigma 0 to 1.00001287, above 1", NULL, NULL), "schedule_check: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_check(0, H3S_VIDEO_SHIFT));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_schedule_check(2, 0.0f));
    float x[2] = {1.0f, -2.0f}, v[2] = {0.5f, 0.25f}, xn[2];
    h3s_euler_step(x, v, 2, ts[1], sig[1], sig[2], xn);
    CHECK(xn[0] != x[0] && xn[1] != x[1], "an Euler step moves the latents");

    /* the dual trajectory on the model's weights */
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(model_dir, &w));
    if (w) {
        uint64_t seeds[1] = {11};
        h3s_trajectory_opts o;
        memset(&o, 0, sizeof o);
        o.seeds = seeds;
        o.nseeds = 1;
        o.steps = 2;
        o.batch = 3;
        o.backend = H3S_BACKEND_CPU;
        o.layout = LAYOUT;
        o.with_grad = 1;
        h3s_trajectory_totals tot;
        char *json = NULL;
        CHECK_OK(h3s_trajectory(w, &o, &json, &tot));
        CHECK(tot.comparisons == 8 && tot.differing == 0 && tot.gradient_comparisons == 6 &&
                  tot.gradient_differing == 0,
              "trajectory: %lld/%lld differ, gradients %lld/%lld", (long long)tot.differing, (long long)tot.comparisons,
              (long long)tot.gradient_differing, (long long)tot.gradient_comparisons);
        CHECK(json && strstr(json, "\"summary\""), "trajectory report as JSON text");
        h3s_free(json);
        o.batch = 1;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_trajectory(w, &o, &json, &tot));

        /* a seed above 2^53 is written with all its digits (a JSON number: a double printed 9.00719925474099e+15) */
        uint64_t big_seed[1] = {9007199254740993ULL};
        o.seeds = big_seed;
        o.steps = 1;
        o.batch = 2;
        o.with_grad = 0;
        json = NULL;
        CHECK_OK(h3s_trajectory(w, &o, &json, &tot));
        CHECK(json && strstr(json, "\"seed\":\t9007199254740993,"), "the seed as written: %.300s",
              json ? strstr(json, "\"seeds\"") : "(no report)");
        h3s_free(json);
        json = NULL;

        /* an unknown backend is refused by everything that makes a model from it */
        const h3s_backend_kind nope = (h3s_backend_kind)7;
        h3s_model *nm = NULL;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_create(w, nope, &nm));
        CHECK(nm == NULL && message_names("unknown backend 7", NULL, NULL), "model_create: %s", h3s_last_error());
        o.backend = nope;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_trajectory(w, &o, &json, &tot));
        CHECK(json == NULL, "no report on failure");
        o.backend = H3S_BACKEND_CPU;

        /* a shift whose schedule rounds a sigma above 1 is refused before any work, naming the modality */
        o.shift_audio = 0.001f;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_trajectory(w, &o, &json, &tot));
        CHECK(json == NULL && message_names("trajectory: audio shift 0.001: with 1 steps", "above 1", NULL),
              "trajectory: %s", h3s_last_error());
        o.shift_audio = 0.0f;

        /* the user's request and batch file are validated against the model before any work: float tensors of
         * another width were copied into the lanes' tensors (a heap overflow) */
        h3s_inputs req, more;
        CHECK_OK(h3s_inputs_seeded(c, &LAYOUT, 2, 13, 0.0f, 0.0f, &req));
        CHECK_OK(h3s_inputs_seeded(c, &LAYOUT, 2, 14, 0.0f, 0.0f, &more));
        int64_t narrow_shape[3] = {2, req.hidden_states.shape[1], req.hidden_states.shape[2] - 4};
        h3s_tensor narrow, wide_hs = req.hidden_states, wide_enc = more.encoder_hidden_states;
        CHECK_OK(h3s_tensor_alloc(&narrow, H3S_F32, 3, narrow_shape));
        o.request = &req;
        o.batch = 4;
        req.hidden_states = narrow;
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_trajectory(w, &o, &json, &tot));
        CHECK(json == NULL && message_names("the request", "hidden_states", NULL), "request refused: %s",
              h3s_last_error());
        req.hidden_states = wide_hs;
        o.batch_inputs = &more;
        int64_t enc_shape[3] = {2, more.encoder_hidden_states.shape[1], more.encoder_hidden_states.shape[2] + 8};
        h3s_tensor enc_wide;
        CHECK_OK(h3s_tensor_alloc(&enc_wide, H3S_F32, 3, enc_shape));
        more.encoder_hidden_states = enc_wide;
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_trajectory(w, &o, &json, &tot));
        CHECK(json == NULL && message_names("the batch file", "encoder_hidden_states", NULL), "batch file refused: %s",
              h3s_last_error());
        more.encoder_hidden_states = wide_enc;
        void *more_audio = more.audio_hidden_states.data;
        more.audio_hidden_states.data = NULL;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_trajectory(w, &o, &json, &tot));
        CHECK(json == NULL && message_names("the batch file", "audio_hidden_states", "no data"),
              "batch file refused: %s", h3s_last_error());
        more.audio_hidden_states.data = more_audio;
        h3s_tensor_free(&narrow);
        h3s_tensor_free(&enc_wide);
        h3s_inputs_free(&req);
        h3s_inputs_free(&more);
        h3s_weights_free(w);
    }

    /* the files, tables and helpers the CLI is built on */
    {
        /* a caller's own failure, escaped like the library's messages */
        CHECK(h3s_set_error(H3S_ERR_FORMAT, "hook %d: %s", 7, "bad\nline") == H3S_ERR_FORMAT, "set_error's status");
        CHECK(!strcmp(h3s_last_error(), "hook 7: bad\\x0aline"), "set_error message: %s", h3s_last_error());
        char *esc = h3s_escape_dup("a\x01"
                                   "b\xc3\xa9\xff");
        CHECK(esc && !strcmp(esc, "a\\x01"
                                  "b\xc3\xa9\\xff"),
              "escape_dup: %s", esc ? esc : "(null)");
        h3s_free(esc);

        /* SHA-256 in pieces = of the whole = of the file written atomically */
        const char text[] = "strict mode, bit for bit";
        char whole[65] = "", pieces[65] = "", of_file[65] = "", path[600];
        CHECK_OK(h3s_sha256_hex(text, strlen(text), whole));
        h3s_sha256_ctx *ctx = NULL;
        CHECK_OK(h3s_sha256_begin(&ctx));
        CHECK_OK(h3s_sha256_update(ctx, text, 6));
        CHECK_OK(h3s_sha256_update(ctx, text + 6, strlen(text) - 6));
        CHECK_OK(h3s_sha256_end(ctx, pieces));
        CHECK(!strcmp(whole, pieces), "sha256 in pieces %s, whole %s", pieces, whole);
        snprintf(path, sizeof path, "%s/text.txt", dir);
        CHECK_OK(h3s_io_write_file_atomic(path, text, strlen(text)));
        CHECK_OK(h3s_file_sha256_hex(path, of_file));
        CHECK(!strcmp(whole, of_file), "sha256 of the file %s, of the bytes %s", of_file, whole);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_write_file_atomic(dir, text, 1)); /* a directory is never replaced */

        /* the same atomic write through a descriptor: the file reads back before the commit, the output keeps its old
         * bytes until the rename, a discard leaves nothing, and a directory put at the path meanwhile is kept */
        {
            char dpath[700], dtmp_copy[700];
            snprintf(dpath, sizeof dpath, "%s/through_fd.txt", dir);
            CHECK_OK(h3s_io_write_file_atomic(dpath, "old", 3));
            int fd = -1;
            char *tmp = NULL;
            CHECK_OK(h3s_io_temp_open(dpath, &fd, &tmp));
            char back[4] = "";
            CHECK(fd >= 0 && tmp && write(fd, "new", 3) == 3 && pread(fd, back, 3, 0) == 3 && !memcmp(back, "new", 3),
                  "temp_open: a file open for reading and writing");
            CHECK(tmp && strstr(tmp, "/.through_fd.txt.tmp-"), "temporary name %s", tmp ? tmp : "(null)");
            char *got = NULL;
            size_t got_len = 0;
            CHECK_OK(h3s_io_read_small_file(dpath, 16, &got, &got_len));
            CHECK(got && got_len == 3 && !memcmp(got, "old", 3), "the output is untouched before the commit");
            h3s_free(got);
            got = NULL;
            CHECK_OK(h3s_io_temp_commit(fd, tmp, dpath));
            CHECK_OK(h3s_io_read_small_file(dpath, 16, &got, &got_len));
            CHECK(got && got_len == 3 && !memcmp(got, "new", 3), "the commit renames the file onto the output");
            h3s_free(got);
            CHECK_OK(h3s_io_temp_open(dpath, &fd, &tmp));
            snprintf(dtmp_copy, sizeof dtmp_copy, "%s", tmp);
            h3s_io_temp_discard(fd, tmp);
            CHECK(access(dtmp_copy, F_OK) != 0, "a discarded temporary file is removed");
            char dsub[700];
            snprintf(dsub, sizeof dsub, "%s/then_a_dir", dir);
            CHECK_OK(h3s_io_temp_open(dsub, &fd, &tmp));
            snprintf(dtmp_copy, sizeof dtmp_copy, "%s", tmp);
            CHECK(mkdir(dsub, 0700) == 0, "mkdir %s", dsub);
            CHECK_FAILS(H3S_ERR_INVALID, h3s_io_temp_commit(fd, tmp, dsub));
            struct stat dsb;
            CHECK(stat(dsub, &dsb) == 0 && S_ISDIR(dsb.st_mode) && access(dtmp_copy, F_OK) != 0,
                  "a failed commit keeps what is at the path and removes the temporary file");
            rmdir(dsub);
            CHECK_FAILS(H3S_ERR_INVALID, h3s_io_temp_open(dir, &fd, &tmp)); /* a directory is never replaced */
            CHECK_FAILS(H3S_ERR_INVALID, h3s_io_temp_open(NULL, &fd, &tmp));
            unlink(dpath);
        }

        /* output checks: an input is never an output, nothing is written inside a model directory */
        const char *ins[2] = {NULL, path}, *dirs[1] = {model_dir};
        char in_model[600], fresh[600];
        snprintf(in_model, sizeof in_model, "%s/out.json", model_dir);
        snprintf(fresh, sizeof fresh, "%s/fresh.bin", dir);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(path, ins, 2, dirs, 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(in_model, ins, 2, dirs, 1));
        CHECK_OK(h3s_io_check_output(fresh, ins, 2, dirs, 1));
        /* a NULL array with a positive count (it was dereferenced) or a negative count */
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(fresh, NULL, 2, dirs, 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(fresh, ins, 2, NULL, 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(fresh, ins, -1, dirs, 1));
        CHECK_OK(h3s_io_check_output(fresh, NULL, 0, NULL, 0));

        /* strict JSON */
        const char *good = "{\"a\": [1, 2.5e3, \"x\"]}", *twice = "{\"a\": 1, \"a\": 2}", *trail = "{} x";
        CHECK_OK(h3s_json_check(good, strlen(good), "good"));
        CHECK_FAILS(H3S_ERR_FORMAT, h3s_json_check(twice, strlen(twice), "twice"));
        CHECK_FAILS(H3S_ERR_FORMAT, h3s_json_check(trail, strlen(trail), "trail"));

        /* the parameter table is the model's parameters; the config's JSON names the class */
        h3s_config tc;
        CHECK_OK(h3s_config_preset("tiny", -1, &tc));
        h3s_param_spec *specs = NULL;
        int64_t nspecs = 0;
        CHECK_OK(h3s_param_specs(&tc, &specs, &nspecs));
        CHECK(nspecs == h3s_model_param_count(m), "%lld specs, %lld parameters", (long long)nspecs,
              (long long)h3s_model_param_count(m));
        for (int64_t i = 0; specs && i < nspecs && i < h3s_model_param_count(m); i++) {
            const char *spec_name = NULL;
            h3s_tensor view;
            CHECK_OK(h3s_model_param(m, i, &spec_name, &view));
            CHECK(spec_name && !strcmp(spec_name, specs[i].name) &&
                      h3s_param_spec_numel(&specs[i]) == h3s_tensor_numel(&view),
                  "spec %lld is %s", (long long)i, specs[i].name);
        }
        h3s_free(specs);
        char *cj = NULL;
        CHECK_OK(h3s_config_to_json(&tc, &cj));
        CHECK(cj && strstr(cj, "\"MiniMaxH3Transformer3DModel\""), "config JSON: %s", cj ? cj : "(null)");
        h3s_free(cj);

        /* model directories: verify, a manifest, verify against it; another seed's weights are a mismatch */
        char man[600], other[600];
        snprintf(man, sizeof man, "%s/manifest.json", dir);
        snprintf(other, sizeof other, "%s/other", dir);
        char *summary = NULL;
        CHECK_OK(h3s_model_verify(model_dir, NULL, &summary));
        CHECK(summary && summary[0], "verify summary");
        h3s_free(summary);
        CHECK_OK(h3s_model_manifest_write(model_dir, man));
        CHECK_OK(h3s_model_verify(model_dir, man, NULL));
        init_seen seen = {0, 0, 0};
        CHECK_OK(h3s_model_init_config_progress(&tc, 6, other, init_progress, &seen));
        CHECK(seen.calls > 0 && seen.done == seen.total && seen.total > 0, "init progress: %d calls, %llu/%llu",
              seen.calls, (unsigned long long)seen.done, (unsigned long long)seen.total);
        CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(other, man, NULL));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_manifest_write(model_dir, in_model));

        /* seeded inputs through a safetensors file with metadata, read back in place */
        h3s_inputs in;
        CHECK_OK(h3s_inputs_seeded(&tc, &LAYOUT, 2, 9, 0.25f, 0.6f, &in));
        h3s_st_meta meta[1] = {{"made_by", "test_api"}};
        char st_path[600];
        snprintf(st_path, sizeof st_path, "%s/in.safetensors", dir);
        CHECK_OK(h3s_inputs_write(st_path, &in, meta, 1));
        h3s_st_file *f = NULL;
        CHECK_OK(h3s_st_open(st_path, &f));
        CHECK(h3s_st_count(f) == 10, "%lld entries", (long long)h3s_st_count(f));
        const h3s_st_entry *tags = h3s_st_find(f, "token_tags");
        CHECK(tags && same_bytes(&tags->tensor, &in.token_tags), "token_tags read back");
        CHECK(h3s_st_entry_at(f, 10) == NULL && h3s_st_entry_at(f, -1) == NULL && h3s_st_find(f, "nope") == NULL,
              "out-of-range entries are NULL");
        h3s_inputs views;
        CHECK_OK(h3s_inputs_from_file(f, &views));
        CHECK(same_bytes(&views.hidden_states, &in.hidden_states) && same_bytes(&views.position_ids, &in.position_ids),
              "inputs read in place");
        h3s_st_close(f);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_write(dir, &in, NULL, 0));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_write(NULL, &in, NULL, 0));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_write(st_path, NULL, NULL, 0));

        /* with a mask: eleven tensors, in h3s_inputs' order, the mask last; read back, every tensor the same */
        int64_t mask_shape[2] = {2, in.token_tags.shape[0]};
        CHECK_OK(h3s_tensor_alloc(&in.attention_mask, H3S_BOOL, 2, mask_shape));
        memset(in.attention_mask.data, 1, h3s_tensor_nbytes(&in.attention_mask));
        CHECK_OK(h3s_inputs_write(st_path, &in, NULL, 0));
        CHECK_OK(h3s_st_open(st_path, &f));
        static const char *const order[11] = {"hidden_states", "audio_hidden_states", "encoder_hidden_states",
                                              "timestep",      "timestep_indices",    "token_tags",
                                              "position_ids",  "video_indices",       "audio_indices",
                                              "text_indices",  "attention_mask"};
        int in_order = h3s_st_count(f) == 11;
        for (int64_t i = 0; in_order && i < 11; i++)
            in_order = !strcmp(h3s_st_entry_at(f, i)->name, order[i]);
        CHECK(in_order, "inputs_write: the tensors in h3s_inputs' order, the mask last");
        h3s_st_close(f);
        h3s_inputs back;
        CHECK_OK(h3s_inputs_read(st_path, &back));
        const h3s_tensor *wrote = &in.hidden_states, *read = &back.hidden_states;
        int all_same = 1;
        for (int k = 0; k < 11; k++)
            all_same &= same_bytes(&wrote[k], &read[k]);
        CHECK(all_same, "inputs_write then inputs_read: every tensor the same");
        h3s_inputs_free(&back);
        h3s_tensor_free(&in.attention_mask); /* what follows runs the unmasked request */

        /* layout row counts, and the condition rows a keyframed request's timesteps give away */
        h3s_layout_rows rows;
        CHECK_OK(h3s_layout_count(&LAYOUT, tc.patch_size[1], tc.patch_size[2], &rows));
        CHECK(rows.rows == in.token_tags.shape[0] && rows.text == in.text_indices.shape[0] &&
                  rows.video == in.video_indices.shape[0] && rows.audio == in.audio_indices.shape[0] &&
                  rows.condition == 0 && rows.padding == 0,
              "layout rows %lld (%lld text, %lld video, %lld audio)", (long long)rows.rows, (long long)rows.text,
              (long long)rows.video, (long long)rows.audio);
        CHECK(h3s_layout_condition_rows(&in) == 0, "t2va has no condition rows");
        h3s_layout_opts kf = LAYOUT;
        kf.keyframe_first = 1;
        kf.pad_to = 32;
        h3s_inputs in_kf;
        CHECK_OK(h3s_layout_count(&kf, tc.patch_size[1], tc.patch_size[2], &rows));
        CHECK_OK(h3s_inputs_seeded(&tc, &kf, 1, 9, 0.25f, 0.6f, &in_kf));
        CHECK(rows.condition > 0 && h3s_layout_condition_rows(&in_kf) == rows.condition && rows.rows % 32 == 0 &&
                  rows.rows == rows.text + rows.video + rows.audio + rows.padding,
              "keyframed: %lld condition rows, %lld inferred", (long long)rows.condition,
              (long long)h3s_layout_condition_rows(&in_kf));
        kf.latent_height = 3;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_layout_count(&kf, tc.patch_size[1], tc.patch_size[2], &rows));
        h3s_inputs_free(&in_kf);

        /* a seeded cotangent: item 0 does not depend on the batch */
        h3s_tensor cs1 = {0}, ca1 = {0}, cs3 = {0}, ca3 = {0};
        CHECK_OK(h3s_cotangent_random(1, 5, 3, 2, 4, 11, &cs1, &ca1));
        CHECK_OK(h3s_cotangent_random(3, 5, 3, 2, 4, 11, &cs3, &ca3));
        CHECK(item0_equal(&cs3, &cs1) && item0_equal(&ca3, &ca1), "cotangent item 0 depends on the batch");
        CHECK_FAILS(H3S_ERR_INVALID, h3s_cotangent_random(0, 5, 3, 2, 4, 11, &cs1, &ca1));
        h3s_tensor *cts[] = {&cs1, &ca1, &cs3, &ca3};
        for (int k = 0; k < 4; k++)
            h3s_tensor_free(cts[k]);

        /* the first non-finite element */
        float vals[4] = {1.0f, -2.0f, NAN, INFINITY};
        int64_t four = 4;
        h3s_tensor tv = h3s_tensor_view(vals, H3S_F32, 1, &four);
        CHECK(h3s_tensor_first_nonfinite(&tv) == 2, "first non-finite at %lld",
              (long long)h3s_tensor_first_nonfinite(&tv));
        vals[2] = 0.0f;
        vals[3] = 1.0f;
        CHECK(h3s_tensor_first_nonfinite(&tv) == -1 && h3s_tensor_first_nonfinite(NULL) == -1, "all finite");

        /* the replay as JSON text; a planted drift is named as the first */
        h3s_weights *rw = NULL;
        CHECK_OK(h3s_weights_load(model_dir, &rw));
        h3s_replay_opts ro = {H3S_BACKEND_CPU, 1234, 0, NULL, NULL, NULL, 0};
        char *rj = NULL;
        CHECK_OK(h3s_replay_report(rw, &in, &ro, &rj));
        CHECK(rj && strstr(rj, "\"nodes\"") && strstr(rj, "\"first_drift\":\tnull"), "clean replay report");
        h3s_free(rj);
        rj = NULL;
        ro.plant_node = "block.1.attention";
        CHECK_OK(h3s_replay_report(rw, &in, &ro, &rj));
        CHECK(rj && strstr(rj, "\"first_drift\":\t\"block.1.attention\""), "planted drift named first");
        h3s_free(rj);
        rj = NULL;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_replay_report(NULL, &in, &ro, &rj));
        CHECK(rj == NULL, "no report on failure");
        ro.plant_node = NULL;
        ro.backend = (h3s_backend_kind)7; /* ran as a backend named "?" */
        CHECK_FAILS(H3S_ERR_INVALID, h3s_replay_report(rw, &in, &ro, &rj));
        CHECK(rj == NULL, "no report for an unknown backend");
        h3s_weights_free(rw);
        h3s_inputs_free(&in);

        /* the device's description for reports; communicator calls refuse a NULL communicator */
        char desc[256];
        CHECK_FAILS(H3S_ERR_INVALID, h3s_cuda_describe(NULL, 0));
        if (cuda_built && !strcmp(cuda_built, "OFF")) {
            CHECK_FAILS(H3S_ERR_DEVICE, h3s_cuda_describe(desc, sizeof desc));
            CHECK(!strncmp(desc, "unavailable: ", 13), "no device: %s", desc);
        }
        size_t counts[1] = {1}, displs[1] = {0};
        char one_byte = 'x', got = 0;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_allgatherv(NULL, &one_byte, &got, counts, displs));
    }

    free(want);
    h3s_grads_free(&all);
    h3s_grads_free(&some);
    h3s_grads_free(&again);
    h3s_tensor *outs[] = {&s3, &a3, &s1, &a1, &s_own, &a_own, &s_snap, &a_snap, &ct_s, &ct_a, &bad_ct};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h3s_tensor_free(outs[i]);
    h3s_tape_free(tape3);
    h3s_tape_free(tape1);
    h3s_inputs_free(&in3);
    h3s_inputs_free(&in1);
    h3s_model_free(m);
    h3s_model_free(snap);
    h3s_model_free(own);
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return h3t_finish("test_api");
}

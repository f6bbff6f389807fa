/* Shared by the whole-model tests (CPU and GPU): a seeded tiny request, one forward +
 * backward, and bitwise comparisons of two runs. */
#ifndef H3S_MODEL_UTIL_H
#define H3S_MODEL_UTIL_H

#include "io/modeldir.h"
#include "model/config.h"
#include "model/model.h"
#include "report/report.h"
#include "sample/layout.h"
#include "test_util.h"

typedef struct run {
    h3s_tensor sample, audio;
    h3s_grads grads;
} run;

static inline void run_free(run *r) {
    h3s_tensor_free(&r->sample);
    h3s_tensor_free(&r->audio);
    h3s_grads_free(&r->grads);
}

typedef struct request {
    h3s_layout lay;
    h3s_tensor hv, ha, enc, ts, tsi, mask;
    h3s_inputs in;
} request;

static inline void request_free(request *q) {
    h3s_tensor *t[] = {&q->hv, &q->ha, &q->enc, &q->ts, &q->tsi, &q->mask};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        h3s_tensor_free(t[i]);
    h3s_layout_free(&q->lay);
}

static inline void make_request(const h3s_config *c, int64_t batch, int64_t pad_to, int with_mask, request *q) {
    memset(q, 0, sizeof *q);
    h3s_layout_opts lo = {5, 2, 4, 6, 3, 1, 0, pad_to};
    CHECK_OK(h3s_layout_build(&lo, c->patch_size[1], c->patch_size[2], &q->lay));
    CHECK_OK(h3s_inputs_random(&q->lay, batch, 21, h3s_config_video_width(c), c->audio_in_channels, c->text_dim, &q->hv,
                               &q->ha, &q->enc));
    CHECK_OK(h3s_layout_timesteps(&q->lay, 0.3f, 0.55f, &q->ts, &q->tsi));
    q->in.hidden_states = q->hv;
    q->in.audio_hidden_states = q->ha;
    q->in.encoder_hidden_states = q->enc;
    q->in.timestep = q->ts;
    q->in.timestep_indices = q->tsi;
    q->in.token_tags = q->lay.token_tags;
    q->in.position_ids = q->lay.position_ids;
    q->in.video_indices = q->lay.video_indices;
    q->in.audio_indices = q->lay.audio_indices;
    q->in.text_indices = q->lay.text_indices;
    if (with_mask) {
        int64_t s2[2] = {batch, q->lay.S};
        q->mask = h3t_alloc(H3S_BOOL, 2, s2);
        const int64_t *tags = q->lay.token_tags.data;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t s = 0; s < q->lay.S; s++)
                ((uint8_t *)q->mask.data)[b * q->lay.S + s] = tags[s] != -1;
        q->in.attention_mask = q->mask;
    }
}

static inline void forward_backward(h3s_model *m, const h3s_inputs *in, run *r) {
    memset(r, 0, sizeof *r);
    h3s_tape *tape = NULL;
    CHECK_OK(h3s_model_forward(m, in, NULL, NULL, &tape, &r->sample, &r->audio));
    if (!tape) return;
    h3s_tensor ds, da;
    CHECK_OK(h3s_cotangent_random(r->sample.shape[0], r->sample.shape[1], r->sample.shape[2], r->audio.shape[1],
                                  r->audio.shape[2], 99, &ds, &da));
    CHECK_OK(h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &r->grads));
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_tape_free(tape);
}

static inline int runs_equal(const run *a, const run *b) {
    if (!h3t_bitwise_equal(&a->sample, &b->sample) || !h3t_bitwise_equal(&a->audio, &b->audio)) return 0;
    if (!h3t_bitwise_equal(&a->grads.hidden_states, &b->grads.hidden_states)) return 0;
    if (!h3t_bitwise_equal(&a->grads.audio_hidden_states, &b->grads.audio_hidden_states)) return 0;
    if (!h3t_bitwise_equal(&a->grads.encoder_hidden_states, &b->grads.encoder_hidden_states)) return 0;
    if (a->grads.count != b->grads.count) return 0;
    for (int64_t i = 0; i < a->grads.count; i++)
        if (!h3t_bitwise_equal(&a->grads.params[i], &b->grads.params[i])) return 0;
    return 1;
}

/* A run with BF16 parameter gradients (h3s_model_set_grad_dtype) against the same run in F32 (host tensors): the
 * outputs and input gradients bit for bit equal, each BF16 gradient the F32 one rounded to nearest even, every other
 * gradient equal; *nbf16 counts the BF16 ones.  0 on any difference. */
static inline int grads_bf16_of(const run *f32, const run *bf, int64_t *nbf16) {
    *nbf16 = 0;
    if (!h3t_bitwise_equal(&f32->sample, &bf->sample) || !h3t_bitwise_equal(&f32->audio, &bf->audio)) return 0;
    if (!h3t_bitwise_equal(&f32->grads.hidden_states, &bf->grads.hidden_states)) return 0;
    if (!h3t_bitwise_equal(&f32->grads.audio_hidden_states, &bf->grads.audio_hidden_states)) return 0;
    if (!h3t_bitwise_equal(&f32->grads.encoder_hidden_states, &bf->grads.encoder_hidden_states)) return 0;
    if (f32->grads.count != bf->grads.count) return 0;
    for (int64_t i = 0; i < bf->grads.count; i++) {
        const h3s_tensor *a = &f32->grads.params[i], *b = &bf->grads.params[i];
        if (b->dtype != H3S_BF16) {
            if (!h3t_bitwise_equal(a, b)) return 0;
            continue;
        }
        if (a->dtype != H3S_F32 || h3s_tensor_numel(a) != h3s_tensor_numel(b)) return 0;
        h3s_tensor r;
        memset(&r, 0, sizeof r);
        if (h3s_tensor_alloc(&r, H3S_BF16, b->ndim, b->shape) != H3S_OK) return 0;
        const int same = h3s_tensor_convert(a, &r) == H3S_OK && h3t_bitwise_equal(&r, b);
        h3s_tensor_free(&r);
        if (!same) return 0;
        (*nbf16)++;
    }
    return 1;
}

/* First `n` bytes-worth of item 0 equal? (item 0 = leading rows) */
static inline int item0_equal(const h3s_tensor *batched, const h3s_tensor *alone) {
    return memcmp(batched->data, alone->data, h3s_tensor_nbytes(alone)) == 0;
}

/* Every node a hook sees, in order: its name, the SHA-256 of its bytes, and the bytes in all (log_node is the hook,
 * its context a zeroed node_log). */
typedef struct node_log {
    int64_t n, cap, bytes;
    char (*names)[200];
    char (*sha)[65];
} node_log;

static inline h3s_status log_node(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item) {
    (void)batched, (void)rows_per_item;
    node_log *l = ctx;
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 256;
        void *a = realloc(l->names, (size_t)cap * sizeof *l->names), *b = a ? realloc(l->sha, (size_t)cap * 65) : NULL;
        if (a) l->names = a;
        if (!b) return H3S_ERR_NOMEM;
        l->sha = b;
        l->cap = cap;
    }
    snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
    H3S_TRY(h3s_sha256_hex(out->data, h3s_tensor_nbytes(out), l->sha[l->n]));
    l->bytes += (int64_t)h3s_tensor_nbytes(out);
    l->n++;
    return H3S_OK;
}

static inline void node_log_free(node_log *l) {
    free(l->names);
    free(l->sha);
    memset(l, 0, sizeof *l);
}

/* The first node where two logs differ in name or bytes; -1 when none does (the counts are the caller's check). */
static inline int64_t node_log_first_diff(const node_log *a, const node_log *b) {
    for (int64_t i = 0; i < a->n && i < b->n; i++)
        if (strcmp(a->names[i], b->names[i]) || strcmp(a->sha[i], b->sha[i])) return i;
    return -1;
}

/* The tiny config with odd sizes everywhere: 5 heads of 12 (rope on 12 of them), hidden 35, FFN 57, 3 blocks, 2
 * refiner blocks (checked valid). */
static inline h3s_config odd_config(const h3s_config *tiny) {
    h3s_config odd = *tiny;
    odd.num_attention_heads = 5;
    odd.attention_head_dim = 12;
    odd.rope_freq_dim = 2;
    odd.hidden_size = 35;
    odd.ffn_dim = 57;
    odd.num_layers = 3;
    odd.num_refiner_layers = 2;
    odd.text_dim = 23;
    odd.time_embed_dim = 29;
    odd.time_embed_hidden_dim = 31;
    CHECK_OK(h3s_config_validate(&odd));
    return odd;
}

#endif

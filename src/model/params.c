#include "model/params.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/core.h"

enum { BLOCK_PARAMS = 10, ADALN_PARAMS = 2, TOP_PARAMS = 10 + 1 + 3 + 4 };

int64_t h3s_param_count(const h3s_config *c) {
    if (!c) return 0;
    return TOP_PARAMS + c->num_refiner_layers * BLOCK_PARAMS + c->num_layers * (BLOCK_PARAMS + ADALN_PARAMS);
}

int64_t h3s_param_spec_numel(const h3s_param_spec *p) {
    if (!p || p->ndim < 0 || p->ndim > 2) return 0;
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++)
        n *= p->shape[d];
    return n;
}

typedef struct {
    h3s_param_spec *specs;
    int64_t n;
} spec_list;

static void add(spec_list *l, h3s_dtype dtype, int64_t d0, int64_t d1, const char *fmt, ...) H3S_PRINTF(5, 6);

/* d1 < 0 makes a 1-D parameter.  Names are at most ~50 characters, far below the 160 of the struct. */
static void add(spec_list *l, h3s_dtype dtype, int64_t d0, int64_t d1, const char *fmt, ...) {
    h3s_param_spec *p = &l->specs[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->dtype = dtype;
    p->ndim = d1 < 0 ? 1 : 2;
    p->shape[0] = d0;
    p->shape[1] = d1 < 0 ? 0 : d1;
}

static void add_block(spec_list *l, const h3s_config *c, const char *prefix, int64_t i, int adaln) {
    const int64_t H = c->hidden_size, inner = c->num_attention_heads * c->attention_head_dim;
    const h3s_dtype B = H3S_BF16;
    add(l, B, H, -1, "%s.%lld.norm1.weight", prefix, (long long)i);
    add(l, B, inner, H, "%s.%lld.attn.to_q.weight", prefix, (long long)i);
    add(l, B, inner, H, "%s.%lld.attn.to_k.weight", prefix, (long long)i);
    add(l, B, inner, H, "%s.%lld.attn.to_v.weight", prefix, (long long)i);
    add(l, B, c->attention_head_dim, -1, "%s.%lld.attn.norm_q.weight", prefix, (long long)i);
    add(l, B, c->attention_head_dim, -1, "%s.%lld.attn.norm_k.weight", prefix, (long long)i);
    add(l, B, H, inner, "%s.%lld.attn.to_out.0.weight", prefix, (long long)i);
    add(l, B, H, -1, "%s.%lld.norm2.weight", prefix, (long long)i);
    add(l, B, 2 * c->ffn_dim, H, "%s.%lld.ff.net.0.proj.weight", prefix, (long long)i);
    add(l, B, H, c->ffn_dim, "%s.%lld.ff.net.2.weight", prefix, (long long)i);
    if (adaln) {
        add(l, B, 18 * H, c->time_embed_dim, "%s.%lld.adaln_proj.linear.weight", prefix, (long long)i);
        add(l, B, 18 * H, -1, "%s.%lld.adaln_proj.linear.bias", prefix, (long long)i);
    }
}

h3s_status h3s_param_specs(const h3s_config *c, h3s_param_spec **out, int64_t *count) {
    if (!c || !out || !count) return h3s_fail(H3S_ERR_INVALID, "param_specs: NULL argument");
    H3S_TRY(h3s_config_validate(c));
    const int64_t total = h3s_param_count(c);
    spec_list l = {h3s_calloc((size_t)total, sizeof(h3s_param_spec)), 0};
    if (!l.specs) return H3S_ERR_NOMEM;
    const int64_t H = c->hidden_size, VW = h3s_config_video_width(c), A = c->audio_in_channels;
    const h3s_dtype F = H3S_F32, B = H3S_BF16;
    add(&l, F, H, VW, "proj_in.weight");
    add(&l, F, H, -1, "proj_in.bias");
    add(&l, F, H, A, "audio_proj_in.weight");
    add(&l, F, H, -1, "audio_proj_in.bias");
    add(&l, B, H, c->text_dim, "context_embedder.weight");
    add(&l, B, H, -1, "context_embedder.bias");
    add(&l, F, c->time_embed_hidden_dim, c->freq_dim, "time_embedder.linear_1.weight");
    add(&l, F, c->time_embed_hidden_dim, -1, "time_embedder.linear_1.bias");
    add(&l, F, c->time_embed_dim, c->time_embed_hidden_dim, "time_embedder.linear_2.weight");
    add(&l, F, c->time_embed_dim, -1, "time_embedder.linear_2.bias");
    for (int64_t i = 0; i < c->num_refiner_layers; i++)
        add_block(&l, c, "token_refiner.refiner_blocks", i, 0);
    add(&l, B, H, -1, "token_refiner.final_norm.weight");
    for (int64_t i = 0; i < c->num_layers; i++)
        add_block(&l, c, "transformer_blocks", i, 1);
    add(&l, B, H, -1, "norm_out.norm.weight");
    add(&l, B, 2 * H, c->time_embed_dim, "norm_out.linear.weight");
    add(&l, B, 2 * H, -1, "norm_out.linear.bias");
    add(&l, F, VW, H, "proj_out.weight");
    add(&l, F, VW, -1, "proj_out.bias");
    add(&l, F, A, H, "audio_proj_out.weight");
    add(&l, F, A, -1, "audio_proj_out.bias");
    if (l.n != total) { /* the count formula and the table must agree */
        free(l.specs);
        return h3s_fail(H3S_ERR_INVALID, "param_specs: built %lld parameters, expected %lld", (long long)l.n,
                        (long long)total);
    }
    *out = l.specs;
    *count = total;
    return H3S_OK;
}

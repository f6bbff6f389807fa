/* The MiniMax-H3 graph: forward and backward of the whole model over the operator API.
 *
 * Every node's output is a tensor on the tape; the hook sees each one, in execution order,
 * under its docs/strict.md section 4 name.  Backward nodes are named "<node>.grad" and carry the
 * gradient flowing into the node's main input. */
#include "model/model.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "core/core.h"
#include "cuda/cuda_ops.h"
#include "dist/sp.h"
#include "h3s_dist.h"
#include "io/safetensors.h"
#include "model/block.h"
#include "model/params.h"
#include "ops/ops.h"

const char *h3s_backend_name(h3s_backend_kind kind) {
    switch (kind) {
    case H3S_BACKEND_CPU: return "cpu-strict";
    case H3S_BACKEND_GOLDEN: return "cpu-golden-f64";
    case H3S_BACKEND_CUDA: return "cuda-strict";
    }
    return "?";
}

h3s_status h3s_backend_parse(const char *name, h3s_backend_kind *kind) {
    if (!name || !kind) return h3s_fail(H3S_ERR_INVALID, "backend_parse: NULL argument");
    static const struct {
        const char *name;
        h3s_backend_kind kind;
    } names[] = {{"cpu", H3S_BACKEND_CPU}, {"golden", H3S_BACKEND_GOLDEN}, {"cuda", H3S_BACKEND_CUDA}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *kind = names[i].kind;
            return H3S_OK;
        }
    return h3s_fail(H3S_ERR_INVALID, "unknown backend '%s' (expected cpu, golden or cuda)", name);
}

h3s_status h3s_backend_check(h3s_backend_kind kind) {
    switch (kind) {
    case H3S_BACKEND_CPU:
    case H3S_BACKEND_GOLDEN: return H3S_OK;
    /* h3s_cuda_available leaves the reason ("cuda: this build has no CUDA backend: ...", "cuda: no CUDA GPU ...") */
    case H3S_BACKEND_CUDA: return h3s_cuda_available() ? H3S_OK : H3S_ERR_DEVICE;
    }
    return h3s_fail(H3S_ERR_INVALID, "backend_check: unknown backend %d", (int)kind);
}

/* The parameters outside the blocks, by the index of their name in g_global_param_names. */
enum {
    GP_TIME_EMBEDDER_LINEAR_1_WEIGHT,
    GP_TIME_EMBEDDER_LINEAR_1_BIAS,
    GP_TIME_EMBEDDER_LINEAR_2_WEIGHT,
    GP_TIME_EMBEDDER_LINEAR_2_BIAS,
    GP_PROJ_IN_WEIGHT,
    GP_PROJ_IN_BIAS,
    GP_AUDIO_PROJ_IN_WEIGHT,
    GP_AUDIO_PROJ_IN_BIAS,
    GP_CONTEXT_EMBEDDER_WEIGHT,
    GP_CONTEXT_EMBEDDER_BIAS,
    GP_TOKEN_REFINER_FINAL_NORM_WEIGHT,
    GP_NORM_OUT_LINEAR_WEIGHT,
    GP_NORM_OUT_LINEAR_BIAS,
    GP_NORM_OUT_NORM_WEIGHT,
    GP_PROJ_OUT_WEIGHT,
    GP_PROJ_OUT_BIAS,
    GP_AUDIO_PROJ_OUT_WEIGHT,
    GP_AUDIO_PROJ_OUT_BIAS,
    GP_COUNT
};
static const char *const g_global_param_names[GP_COUNT] = {
    "time_embedder.linear_1.weight",
    "time_embedder.linear_1.bias",
    "time_embedder.linear_2.weight",
    "time_embedder.linear_2.bias",
    "proj_in.weight",
    "proj_in.bias",
    "audio_proj_in.weight",
    "audio_proj_in.bias",
    "context_embedder.weight",
    "context_embedder.bias",
    "token_refiner.final_norm.weight",
    "norm_out.linear.weight",
    "norm_out.linear.bias",
    "norm_out.norm.weight",
    "proj_out.weight",
    "proj_out.bias",
    "audio_proj_out.weight",
    "audio_proj_out.bias",
};

/* The parameters of one block, as indices into the model's weights (m->w) and a backward's gradients (spec
 * order), resolved once when the model is created: a pass reads them by field, never by name. */
typedef struct block_params {
    int64_t adaln_w, adaln_b; /* the AdaLN projection (transformer blocks; -1 in a token-refiner block) */
    int64_t norm1, norm2;
    int64_t to[3];      /* attn.to_q, to_k, to_v */
    int64_t norm_qk[2]; /* attn.norm_q, norm_k */
    int64_t to_out;     /* attn.to_out.0 */
    int64_t ff_in;      /* ff.net.0.proj (gate and up) */
    int64_t ff_out;     /* ff.net.2 (down) */
} block_params;

struct h3s_model {
    h3s_config cfg;
    h3s_backend_kind kind;
    int device;     /* 1: tensors live on the GPU */
    h3s_dtype act;  /* block activations: BF16 / F64 */
    h3s_dtype f32;  /* f32 modules, rope tables, temb: F32 / F64 */
    h3s_dtype grad; /* gradients: F32 / F64 */
    int64_t nparams;
    h3s_param_spec *specs;
    h3s_tensor *w;               /* weights in the backend's form, spec order */
    h3s_weights *own_weights;    /* h3s_model_load: the loaded weights, when m->w borrows them */
    block_params *bp, *rbp;      /* [num_layers] transformer blocks, [num_refiner_layers] token-refiner blocks */
    h3s_block_weights *bw, *rbw; /* the same blocks as model/block.h weights (pointers into m->w) */
    int64_t gp[GP_COUNT];        /* the parameters outside the blocks (spec order index, -1 when the config has none) */
    /* parallel execution (h3s_model_set_parallel): comm == NULL runs in this process alone */
    h3s_comm *comm;
    int sp, tp;
    h3s_comm *spc, *tpc; /* the ranks of this rank's sequence-parallel and tensor-parallel groups */
    int own_spc, own_tpc;
    struct tp_geom *tpg; /* tensor parallel: this rank's ranges and weight slices (NULL when tp == 1) */
    int64_t *sp_sizes;   /* h3s_model_set_sp_slices: explicit slice sizes, or NULL for the even split */
    uint64_t par_gen;    /* counts h3s_model_set_parallel's changes: a tape from before one is refused */
    int64_t sp_nsizes;
    h3s_recompute recompute; /* h3s_model_set_recompute: what the next forwards keep for their backward */
    int device_grads;        /* h3s_model_set_device_grads: parameter gradients handed over in device memory */
    int grads_bf16;          /* h3s_model_set_grad_dtype(BF16): a BF16 parameter's gradient handed over in BF16 */
    int deferred;            /* h3s_model_set_deferred_backward: a device-gradient backward returns once queued */
    int pending;             /* a deferred backward not yet waited for (h3s_model_finish) */
    struct mem_meter *meter; /* bytes the passes hold (h3s_model_peak_bytes) */
};

/* ------------------------------------------------------------------ tensors & arena ---- */

/* Activations and gradients: on the GPU in the library's stream order (no synchronisation per tensor, so the host
 * queues a whole pass ahead of the device); the weights are uploaded with the synchronous allocator (to_backend).
 * fill = 0 is for a tensor its producer writes in full: a parameter gradient (a weight gradient's folded GEMM
 * stores its result, the folds of norm weights, biases, AdaLN tables and gates write every output, an output no
 * tile names as 0) or a block's row-wise node (NEW_OUT below), so on the GPU it is not zero-filled first.
 * H3S_CUDA_POISON_UNINIT=1 fills it with NaN instead (test_gpu_model_poison): any element left unwritten would
 * show in every output and gradient check.  Host memory is always zero-filled. */
static h3s_status backend_alloc_as(const h3s_model *m, h3s_tensor *t, h3s_dtype dt, int ndim, const int64_t *shape,
                                   int fill) {
    if (m->device)
        return fill ? h3s_cuda_tensor_alloc_ordered(t, dt, ndim, shape)
                    : h3s_cuda_tensor_alloc_ordered_uninit(t, dt, ndim, shape);
    return h3s_tensor_alloc(t, dt, ndim, shape);
}

static void backend_free(const h3s_model *m, h3s_tensor *t) {
    if (t->device)
        h3s_cuda_tensor_free(t);
    else
        h3s_tensor_free(t);
}

/* A borrowed 2-D view of `t` with another row split (same bytes, same device). */
static h3s_tensor view2(const h3s_tensor *t, int64_t rows, int64_t cols) {
    int64_t s[2] = {rows, cols};
    h3s_tensor v = h3s_tensor_view(t->data, t->dtype, 2, s);
    v.device = t->device;
    return v;
}

/* A new device tensor [rows, cols] of dtype dt holding the bytes of host tensor src (same dtype and size).  A weight
 * (ordered = 0): its own allocation, copied before the call returns.  A pass's input (ordered = 1): from the
 * stream-ordered pool, the copy queued on the library's stream without waiting for the work already there. */
static h3s_status upload_new(const h3s_tensor *src, h3s_dtype dt, const int64_t *s, int ordered, h3s_tensor *out) {
    if (ordered) {
        H3S_TRY(h3s_cuda_tensor_alloc_ordered_uninit(out, dt, 2, s));
    } else {
        H3S_TRY(h3s_cuda_tensor_alloc(out, dt, 2, s));
    }
    h3s_status st = ordered ? h3s_cuda_upload_ordered(src, out) : h3s_cuda_upload(src, out);
    if (st != H3S_OK) h3s_cuda_tensor_free(out);
    return st;
}

/* Copy a host tensor into backend memory with dtype `dt` (one conversion on the host where the dtypes differ);
 * ordered as in upload_new. */
static h3s_status to_backend(const h3s_model *m, const h3s_tensor *host, h3s_dtype dt, int64_t rows, int64_t cols,
                             int ordered, h3s_tensor *out) {
    int64_t s[2] = {rows, cols};
    if (host->device) { /* a caller's device tensor (a CUDA model's cotangent): copied in stream order, no cast */
        if (!m->device)
            return h3s_fail(H3S_ERR_DEVICE, "model: a device tensor was given to a model on the host backend");
        if (host->dtype != dt || h3s_tensor_numel(host) != rows * cols)
            return h3s_fail(H3S_ERR_DTYPE, "model: a device tensor must be %s with %lld elements (got %s with %lld)",
                            h3s_dtype_name(dt), (long long)(rows * cols), h3s_dtype_name(host->dtype),
                            (long long)h3s_tensor_numel(host));
        H3S_TRY(h3s_cuda_tensor_alloc_ordered_uninit(out, dt, 2, s));
        h3s_tensor src = view2(host, rows, cols);
        h3s_status st = h3s_cuda_copy(&src, out);
        if (st != H3S_OK) h3s_cuda_tensor_free(out);
        return st;
    }
    if (m->device && host->dtype == dt && h3s_tensor_numel(host) == rows * cols) {
        /* already in the backend's dtype: uploaded straight from the caller's memory (for a loaded model, the
         * mapped file), no host copy */
        h3s_tensor src = view2(host, rows, cols);
        return upload_new(&src, dt, s, ordered, out);
    }
    h3s_tensor tmp;
    H3S_TRY(h3s_tensor_alloc(&tmp, dt, 2, s));
    h3s_status st = h3s_tensor_convert(host, &tmp);
    if (st == H3S_OK && m->device) {
        st = upload_new(&tmp, dt, s, ordered, out);
        h3s_tensor_free(&tmp);
        return st;
    }
    if (st != H3S_OK) {
        h3s_tensor_free(&tmp);
        return st;
    }
    *out = tmp;
    return H3S_OK;
}

/* Host copy of a backend tensor (a plain copy when it already is on the host). */
static h3s_status to_host(const h3s_tensor *t, h3s_tensor *out) {
    H3S_TRY(h3s_tensor_alloc(out, t->dtype, t->ndim, t->shape));
    h3s_status st = t->device ? h3s_cuda_download(t, out) : h3s_tensor_convert(t, out);
    if (st != H3S_OK) h3s_tensor_free(out);
    return st;
}

/* Bytes of the tensors a model's passes hold (tapes, backward temporaries, parameter gradients in backend memory;
 * not the weights): live now and the most since the model was created or h3s_model_reset_peak_bytes.  Shared by the
 * model and every tape it made (a tape may be freed after its model), freed with the last of them. */
typedef struct mem_meter {
    int64_t live, peak;
    int refs;
} mem_meter;

static void meter_add(mem_meter *mm, const h3s_tensor *t) {
    if (!mm || !t->owns_data) return;
    mm->live += (int64_t)h3s_tensor_nbytes(t);
    if (mm->live > mm->peak) mm->peak = mm->live;
}

static void meter_sub(mem_meter *mm, const h3s_tensor *t) {
    if (mm && t->owns_data) mm->live -= (int64_t)h3s_tensor_nbytes(t);
}

static void meter_release(mem_meter *mm) {
    if (mm && --mm->refs == 0) free(mm);
}

typedef struct arena {
    const h3s_model *m;
    mem_meter *meter; /* may be NULL */
    h3s_tensor **items;
    int64_t n, cap;
} arena;

/* Take ownership of a tensor built elsewhere (moved into a fresh slot). */
static h3s_tensor *arena_adopt(arena *a, h3s_tensor *t) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        h3s_tensor **items = realloc(a->items, (size_t)cap * sizeof *items);
        if (!items) {
            h3s_fail(H3S_ERR_NOMEM, "out of memory growing the activation tape");
            return NULL;
        }
        a->items = items;
        a->cap = cap;
    }
    h3s_tensor *slot = h3s_calloc(1, sizeof *slot);
    if (!slot) return NULL;
    *slot = *t;
    a->items[a->n++] = slot;
    meter_add(a->meter, slot);
    return slot;
}

static h3s_tensor *arena_new_as(arena *a, h3s_dtype dt, int64_t rows, int64_t cols, int fill) {
    h3s_tensor t;
    int64_t s[2] = {rows, cols};
    if (backend_alloc_as(a->m, &t, dt, 2, s, fill) != H3S_OK) return NULL;
    h3s_tensor *slot = arena_adopt(a, &t);
    if (!slot) backend_free(a->m, &t);
    return slot;
}

static h3s_tensor *arena_new(arena *a, h3s_dtype dt, int64_t rows, int64_t cols) {
    return arena_new_as(a, dt, rows, cols, 1);
}

static void arena_free(arena *a) {
    for (int64_t i = 0; i < a->n; i++) {
        meter_sub(a->meter, a->items[i]);
        backend_free(a->m, a->items[i]);
        free(a->items[i]);
    }
    free(a->items);
    a->items = NULL;
    a->n = a->cap = 0;
}

/* An empty arena over the same model and meter as `like`. */
static arena arena_empty(const arena *like) { return (arena){like->m, like->meter, NULL, 0, 0}; }

/* Move the slot `t` (a tensor `from` holds) into `to`: the pointer stays valid, the tensor is not copied.  The
 * slot is searched from the end (the tensor moved is one of the last made). */
static h3s_status arena_move(arena *from, h3s_tensor *t, arena *to) {
    for (int64_t i = from->n - 1; i >= 0; i--) {
        if (from->items[i] != t) continue;
        if (to->n == to->cap) {
            int64_t cap = to->cap ? 2 * to->cap : 64;
            h3s_tensor **items = realloc(to->items, (size_t)cap * sizeof *items);
            if (!items) return h3s_fail(H3S_ERR_NOMEM, "out of memory growing the activation tape");
            to->items = items;
            to->cap = cap;
        }
        memmove(from->items + i, from->items + i + 1, (size_t)(from->n - i - 1) * sizeof *from->items);
        from->n--;
        to->items[to->n++] = t;
        return H3S_OK;
    }
    return h3s_fail(H3S_ERR_INVALID, "model: a tensor to keep is not in the scratch arena");
}

/* Release one tensor of the arena now (its slot pointer becomes invalid); a tensor it does not hold is left. */
static void arena_drop(arena *a, h3s_tensor *t) {
    for (int64_t i = a->n - 1; i >= 0; i--) {
        if (a->items[i] != t) continue;
        meter_sub(a->meter, t);
        backend_free(a->m, t);
        free(t);
        memmove(a->items + i, a->items + i + 1, (size_t)(a->n - i - 1) * sizeof *a->items);
        a->n--;
        return;
    }
}

/* ------------------------------------------------------------------ model ------------- */

const h3s_config *h3s_model_config(const h3s_model *m) { return m ? &m->cfg : NULL; }
h3s_backend_kind h3s_model_backend(const h3s_model *m) { return m ? m->kind : (h3s_backend_kind)-1; }

static void parallel_release(h3s_model *m);

void h3s_model_free(h3s_model *m) {
    if (!m) return;
    if (m->pending) (void)h3s_model_finish(m); /* its error, if any, goes with the model */
    for (int64_t i = 0; i < m->nparams; i++) {
        if (m->w[i].owns_data) backend_free(m, &m->w[i]);
    }
    free(m->w);
    free(m->bp);
    free(m->rbp);
    free(m->bw);
    free(m->rbw);
    free(m->specs);
    free(m->sp_sizes);
    parallel_release(m);
    h3s_weights_free(m->own_weights);
    meter_release(m->meter);
    free(m);
}

/* h3s_set_parallel: the communicator every strict CPU model created afterwards runs over (process-wide, like the
 * thread count). */
static h3s_comm *g_default_comm;
static int g_default_sp = 1, g_default_tp = 1;
/* h3s_set_recompute: the recomputation mode of every model created afterwards */
static h3s_recompute g_default_recompute = H3S_RECOMPUTE_NONE;

/* Index of the parameter "<pre>.<i>.<suffix>" in spec order, or -1. */
static int64_t block_param_index(const h3s_model *m, const char *pre, int64_t i, const char *suffix) {
    char name[160];
    snprintf(name, sizeof name, "%s.%lld.%s", pre, (long long)i, suffix);
    for (int64_t k = 0; k < m->nparams; k++)
        if (!strcmp(m->specs[k].name, name)) return k;
    return -1;
}

/* m->bp, m->rbp (and their weights m->bw, m->rbw) and m->gp from the parameter specs; a block missing a parameter is
 * a format error naming it. */
static h3s_status resolve_block_params(h3s_model *m) {
    const int64_t nb = m->cfg.num_layers, nr = m->cfg.num_refiner_layers;
    m->bp = h3s_calloc((size_t)(nb > 0 ? nb : 1), sizeof *m->bp);
    m->rbp = h3s_calloc((size_t)(nr > 0 ? nr : 1), sizeof *m->rbp);
    m->bw = h3s_calloc((size_t)(nb > 0 ? nb : 1), sizeof *m->bw);
    m->rbw = h3s_calloc((size_t)(nr > 0 ? nr : 1), sizeof *m->rbw);
    if (!m->bp || !m->rbp || !m->bw || !m->rbw) return H3S_ERR_NOMEM;
    static const char *const suffix[] = {
        "adaln_proj.linear.weight", "adaln_proj.linear.bias", "norm1.weight",         "norm2.weight",
        "attn.to_q.weight",         "attn.to_k.weight",       "attn.to_v.weight",     "attn.norm_q.weight",
        "attn.norm_k.weight",       "attn.to_out.0.weight",   "ff.net.0.proj.weight", "ff.net.2.weight"};
    for (int refiner = 0; refiner < 2; refiner++) {
        const char *pre = refiner ? "token_refiner.refiner_blocks" : "transformer_blocks";
        for (int64_t i = 0; i < (refiner ? nr : nb); i++) {
            block_params *b = refiner ? &m->rbp[i] : &m->bp[i];
            int64_t *field[] = {&b->adaln_w, &b->adaln_b,    &b->norm1,      &b->norm2,  &b->to[0], &b->to[1],
                                &b->to[2],   &b->norm_qk[0], &b->norm_qk[1], &b->to_out, &b->ff_in, &b->ff_out};
            for (size_t f = 0; f < sizeof suffix / sizeof suffix[0]; f++) {
                *field[f] = block_param_index(m, pre, i, suffix[f]);
                if (*field[f] < 0 && !(refiner && f < 2))
                    return h3s_fail(H3S_ERR_FORMAT, "model: no parameter named %s.%lld.%s", pre, (long long)i,
                                    suffix[f]);
            }
            h3s_block_weights *w = refiner ? &m->rbw[i] : &m->bw[i];
            *w = (h3s_block_weights){.adaln_w = b->adaln_w >= 0 ? &m->w[b->adaln_w] : NULL,
                                     .adaln_b = b->adaln_b >= 0 ? &m->w[b->adaln_b] : NULL,
                                     .norm1 = &m->w[b->norm1],
                                     .norm2 = &m->w[b->norm2],
                                     .to_q = &m->w[b->to[0]],
                                     .to_k = &m->w[b->to[1]],
                                     .to_v = &m->w[b->to[2]],
                                     .norm_q = &m->w[b->norm_qk[0]],
                                     .norm_k = &m->w[b->norm_qk[1]],
                                     .to_out = &m->w[b->to_out],
                                     .ff_in = &m->w[b->ff_in],
                                     .ff_out = &m->w[b->ff_out]};
        }
    }
    for (int k = 0; k < GP_COUNT; k++) {
        m->gp[k] = -1;
        for (int64_t j = 0; j < m->nparams && m->gp[k] < 0; j++)
            if (!strcmp(m->specs[j].name, g_global_param_names[k])) m->gp[k] = j;
    }
    return H3S_OK;
}

/* The model on this process (everything but the parallel set-up). */
static h3s_status model_create_local(const h3s_weights *wts, h3s_backend_kind kind, h3s_model **out) {
    if (!wts || !out) return h3s_fail(H3S_ERR_INVALID, "model_create: NULL argument");
    if (kind != H3S_BACKEND_CPU && kind != H3S_BACKEND_GOLDEN && kind != H3S_BACKEND_CUDA)
        return h3s_fail(H3S_ERR_INVALID, "model_create: unknown backend %d", (int)kind);
    if (kind == H3S_BACKEND_CUDA && !h3s_cuda_available()) return h3s_fail_context(H3S_ERR_DEVICE, "--device cuda");
    h3s_model *m = h3s_calloc(1, sizeof *m);
    if (!m) return H3S_ERR_NOMEM;
    m->cfg = *h3s_weights_config(wts);
    m->kind = kind;
    m->device = kind == H3S_BACKEND_CUDA;
    m->act = kind == H3S_BACKEND_GOLDEN ? H3S_F64 : H3S_BF16;
    m->f32 = kind == H3S_BACKEND_GOLDEN ? H3S_F64 : H3S_F32;
    m->grad = m->f32;
    m->recompute = g_default_recompute;
    m->meter = h3s_calloc(1, sizeof *m->meter);
    if (!m->meter) {
        free(m);
        return H3S_ERR_NOMEM;
    }
    m->meter->refs = 1;
    h3s_status st = h3s_param_specs(&m->cfg, &m->specs, &m->nparams);
    if (st != H3S_OK) {
        meter_release(m->meter);
        free(m);
        return st;
    }
    m->w = h3s_calloc((size_t)m->nparams, sizeof *m->w);
    if (!m->w) {
        h3s_model_free(m);
        return H3S_ERR_NOMEM;
    }
    st = resolve_block_params(m);
    if (st != H3S_OK) {
        h3s_model_free(m);
        return st;
    }
    for (int64_t i = 0; i < m->nparams; i++) {
        const h3s_tensor *src = h3s_weights_get(wts, m->specs[i].name);
        if (!src) {
            h3s_model_free(m);
            return h3s_fail(H3S_ERR_FORMAT, "model_create: parameter %s missing", m->specs[i].name);
        }
        if (kind == H3S_BACKEND_CPU) {
            m->w[i] = *src; /* borrowed view of the mapping */
            m->w[i].owns_data = 0;
            continue;
        }
        h3s_dtype dt = kind == H3S_BACKEND_GOLDEN ? H3S_F64 : src->dtype;
        int64_t rows = src->shape[0], cols = src->ndim == 2 ? src->shape[1] : 1;
        st = to_backend(m, src, dt, rows, cols, 0, &m->w[i]);
        if (st != H3S_OK) {
            h3s_model_free(m);
            return h3s_fail_context(st, "model_create: %s", m->specs[i].name);
        }
        /* keep the checkpoint's rank */
        m->w[i].ndim = src->ndim;
        m->w[i].shape[0] = src->shape[0];
        if (src->ndim == 2) m->w[i].shape[1] = src->shape[1];
    }
    *out = m;
    return H3S_OK;
}

h3s_status h3s_model_create(const h3s_weights *wts, h3s_backend_kind kind, h3s_model **out) {
    h3s_model *m = NULL;
    h3s_status st = model_create_local(wts, kind, &m);
    if (g_default_comm && kind == H3S_BACKEND_CPU) {
        /* the set-up is collective: every rank's model first, agreed, so that a rank failing alone (a bad path,
         * memory) makes every rank fail with its message instead of leaving the others waiting in it */
        st = h3s_comm_agree(g_default_comm, st, NULL);
        if (st == H3S_OK) st = h3s_model_set_parallel(m, g_default_comm, g_default_sp, g_default_tp);
    }
    if (st != H3S_OK) {
        h3s_model_free(m);
        return st;
    }
    *out = m;
    return H3S_OK;
}

h3s_status h3s_model_load(const char *dir, h3s_backend_kind kind, unsigned flags, h3s_model **out) {
    if (!dir || !out) return h3s_fail(H3S_ERR_INVALID, "model_load: NULL argument");
    if (flags & ~H3S_LOAD_OWN_WEIGHTS) return h3s_fail(H3S_ERR_INVALID, "model_load: unknown flags 0x%x", flags);
    if (kind != H3S_BACKEND_CPU && kind != H3S_BACKEND_GOLDEN && kind != H3S_BACKEND_CUDA)
        return h3s_fail(H3S_ERR_INVALID, "model_load: unknown backend %d", (int)kind);
    /* before the files are read: a missing backend is the first thing to say */
    H3S_TRY(h3s_backend_check(kind));
    h3s_weights *w = NULL;
    h3s_model *m = NULL;
    const int agreed = g_default_comm && kind == H3S_BACKEND_CPU; /* h3s_model_create is collective then */
    h3s_status st = h3s_weights_load(dir, &w);
    if (st == H3S_OK)
        st = h3s_model_create(w, kind, &m);
    else if (agreed)
        st = h3s_comm_agree(g_default_comm, st, NULL); /* the create's first step on the other ranks */
    if (st != H3S_OK) {
        h3s_weights_free(w);
        return st;
    }
    if (kind != H3S_BACKEND_CPU) {
        h3s_weights_free(w); /* every weight was copied */
    } else if (flags & H3S_LOAD_OWN_WEIGHTS) {
        for (int64_t i = 0; i < m->nparams && st == H3S_OK; i++) {
            h3s_tensor copy;
            st = h3s_tensor_alloc(&copy, m->w[i].dtype, m->w[i].ndim, m->w[i].shape);
            if (st != H3S_OK) break;
            memcpy(copy.data, m->w[i].data, h3s_tensor_nbytes(&copy));
            m->w[i] = copy;
        }
        h3s_weights_free(w);
        if (st != H3S_OK) st = h3s_fail_context(st, "model_load: copying the weights");
        if (agreed) st = h3s_comm_agree(g_default_comm, st, NULL); /* no rank goes on alone */
        if (st != H3S_OK) {
            h3s_model_free(m);
            return st;
        }
    } else {
        m->own_weights = w; /* m->w are views of its mappings */
    }
    *out = m;
    return H3S_OK;
}

int64_t h3s_model_param_count(const h3s_model *m) { return m ? m->nparams : 0; }

h3s_status h3s_model_param(const h3s_model *m, int64_t i, const char **name, h3s_tensor *view) {
    if (!m || !view) return h3s_fail(H3S_ERR_INVALID, "model_param: NULL argument");
    if (i < 0 || i >= m->nparams)
        return h3s_fail(H3S_ERR_INDEX, "model_param: index %lld out of range [0, %lld)", (long long)i,
                        (long long)m->nparams);
    *view = m->w[i];
    view->owns_data = 0;
    if (name) *name = m->specs[i].name;
    return H3S_OK;
}

h3s_status h3s_recompute_parse(const char *name, h3s_recompute *out) {
    if (!name || !out) return h3s_fail(H3S_ERR_INVALID, "recompute_parse: NULL argument");
    if (!strcmp(name, "none")) {
        *out = H3S_RECOMPUTE_NONE;
    } else if (!strcmp(name, "blocks")) {
        *out = H3S_RECOMPUTE_BLOCKS;
    } else {
        return h3s_fail(H3S_ERR_INVALID, "recompute must be blocks or none, got '%s'", name);
    }
    return H3S_OK;
}

h3s_status h3s_model_set_device_grads(h3s_model *m, int on) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_set_device_grads: NULL model");
    m->device_grads = on ? 1 : 0;
    return H3S_OK;
}

int h3s_model_device_grads(const h3s_model *m) { return m && m->device_grads && m->device; }

h3s_status h3s_model_set_deferred_backward(h3s_model *m, int on) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_set_deferred_backward: NULL model");
    if (!on && m->pending) H3S_TRY(h3s_model_finish(m));
    m->deferred = on ? 1 : 0;
    return H3S_OK;
}

int h3s_model_deferred_backward(const h3s_model *m) { return m && m->deferred; }

int h3s_model_pending(const h3s_model *m) { return m && m->pending; }

h3s_status h3s_model_finish(h3s_model *m) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_finish: NULL model");
    if (!m->pending) return H3S_OK;
    m->pending = 0;
    h3s_status st = h3s_cuda_sync();
    if (st != H3S_OK) return h3s_fail_context(st, "model_finish: the deferred backward failed on the device");
    return H3S_OK;
}

/* A pass on a model whose deferred backward has not been waited for waits for it first, so that its error (if any)
 * is reported, by this call, before any new work. */
static h3s_status finish_pending(h3s_model *m, const char *op) {
    if (!m->pending) return H3S_OK;
    h3s_status st = h3s_model_finish(m);
    if (st != H3S_OK) return h3s_fail_context(st, "%s", op);
    return H3S_OK;
}

h3s_status h3s_model_set_grad_dtype(h3s_model *m, h3s_dtype dtype) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_set_grad_dtype: NULL model");
    if (dtype != H3S_F32 && dtype != H3S_BF16)
        return h3s_fail(H3S_ERR_DTYPE, "model_set_grad_dtype: %s; the parameter gradients are F32 or BF16",
                        h3s_dtype_name(dtype));
    if (dtype == H3S_BF16 && m->kind == H3S_BACKEND_GOLDEN)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "model_set_grad_dtype: the golden model's gradients stay F64");
    m->grads_bf16 = dtype == H3S_BF16;
    return H3S_OK;
}

h3s_dtype h3s_model_grad_dtype(const h3s_model *m) {
    return !m ? H3S_F32 : m->kind == H3S_BACKEND_GOLDEN ? H3S_F64 : m->grads_bf16 ? H3S_BF16 : H3S_F32;
}

/* Whether parameter i's gradient is handed over in BF16 (h3s_model_set_grad_dtype). */
static int grad_in_bf16(const h3s_model *m, int64_t i) { return m->grads_bf16 && m->w[i].dtype == H3S_BF16; }

/* Whether the backward writes parameter i's BF16 gradient directly (a CUDA model without sequence or tensor
 * parallel, i a block's linear weight, its AdaLN projection's or norm_out's: the weight-gradient GEMM rounds its F32
 * fold as it stores it); every other BF16 gradient is computed in F32 and rounded once afterwards
 * (round_grads_bf16).  Both give the bits of the F32 gradient rounded to nearest even. */
static int grad_direct_bf16(const h3s_model *m, int parallel, int64_t i) {
    if (!grad_in_bf16(m, i) || !m->device || parallel) return 0;
    if (i == m->gp[GP_NORM_OUT_LINEAR_WEIGHT]) return 1;
    const int64_t nb[2] = {m->cfg.num_layers, m->cfg.num_refiner_layers};
    for (int r = 0; r < 2; r++)
        for (int64_t b = 0; b < nb[r]; b++) {
            const block_params *bp = r ? &m->rbp[b] : &m->bp[b];
            if (i == bp->to[0] || i == bp->to[1] || i == bp->to[2] || i == bp->to_out || i == bp->ff_in ||
                i == bp->ff_out || (!r && i == bp->adaln_w))
                return 1;
        }
    return 0;
}

/* The BF16 parameters' gradients computed in F32, rounded once to nearest even into BF16 tensors (the F32 ones
 * released; a view into the device block gets the BF16 bits in its own place). */
static h3s_status round_grads_bf16(h3s_model *m, h3s_tensor *pg) {
    for (int64_t i = 0; i < m->nparams; i++) {
        if (!pg[i].data || !grad_in_bf16(m, i) || pg[i].dtype == H3S_BF16) continue;
        h3s_tensor b;
        memset(&b, 0, sizeof b);
        H3S_TRY(backend_alloc_as(m, &b, H3S_BF16, pg[i].ndim, pg[i].shape, 0));
        h3s_status st = m->device ? h3s_cuda_round_bf16(&pg[i], &b) : h3s_tensor_convert(&pg[i], &b);
        if (st != H3S_OK) {
            backend_free(m, &b);
            return st;
        }
        if (pg[i].device && !pg[i].owns_data) {
            /* a view into the handed-over block (h3s_grads.block): the BF16 bits go back to the view's place, so the
             * gradient stays in the block */
            h3s_tensor v = pg[i];
            v.dtype = H3S_BF16;
            st = h3s_cuda_copy(&b, &v);
            backend_free(m, &b);
            if (st != H3S_OK) return st;
            pg[i] = v;
            continue;
        }
        meter_sub(m->meter, &pg[i]);
        backend_free(m, &pg[i]);
        pg[i] = b;
        meter_add(m->meter, &pg[i]);
    }
    return H3S_OK;
}

h3s_status h3s_model_set_recompute(h3s_model *m, h3s_recompute mode) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_set_recompute: NULL model");
    if (mode != H3S_RECOMPUTE_NONE && mode != H3S_RECOMPUTE_BLOCKS)
        return h3s_fail(H3S_ERR_INVALID, "model_set_recompute: unknown mode %d (expected none 0 or blocks 1)",
                        (int)mode);
    m->recompute = mode;
    return H3S_OK;
}

h3s_status h3s_set_recompute(h3s_recompute mode) {
    if (mode != H3S_RECOMPUTE_NONE && mode != H3S_RECOMPUTE_BLOCKS)
        return h3s_fail(H3S_ERR_INVALID, "set_recompute: unknown mode %d (expected none 0 or blocks 1)", (int)mode);
    g_default_recompute = mode;
    return H3S_OK;
}

h3s_recompute h3s_model_recompute(const h3s_model *m) { return m ? m->recompute : H3S_RECOMPUTE_NONE; }

int64_t h3s_model_peak_bytes(const h3s_model *m) { return m && m->meter ? m->meter->peak : 0; }

int64_t h3s_model_live_bytes(const h3s_model *m) { return m && m->meter ? m->meter->live : 0; }

void h3s_model_reset_peak_bytes(h3s_model *m) {
    if (m && m->meter) m->meter->peak = m->meter->live;
}

/* ------------------------------------------------------------------ inputs ------------ */

/* The tensors of an inputs file, the one list of their names: h3s_inputs' fields in order, which is the order
 * h3s_inputs_write writes them in; the last, attention_mask, is optional. */
static const struct {
    const char *name;
    size_t offset;
} INPUT_FIELDS[] = {{"hidden_states", offsetof(h3s_inputs, hidden_states)},
                    {"audio_hidden_states", offsetof(h3s_inputs, audio_hidden_states)},
                    {"encoder_hidden_states", offsetof(h3s_inputs, encoder_hidden_states)},
                    {"timestep", offsetof(h3s_inputs, timestep)},
                    {"timestep_indices", offsetof(h3s_inputs, timestep_indices)},
                    {"token_tags", offsetof(h3s_inputs, token_tags)},
                    {"position_ids", offsetof(h3s_inputs, position_ids)},
                    {"video_indices", offsetof(h3s_inputs, video_indices)},
                    {"audio_indices", offsetof(h3s_inputs, audio_indices)},
                    {"text_indices", offsetof(h3s_inputs, text_indices)},
                    {"attention_mask", offsetof(h3s_inputs, attention_mask)}};
enum { N_INPUT_FIELDS = (int)(sizeof INPUT_FIELDS / sizeof INPUT_FIELDS[0]), INPUT_MASK = N_INPUT_FIELDS - 1 };
_Static_assert(sizeof(h3s_inputs) == sizeof INPUT_FIELDS / sizeof INPUT_FIELDS[0] * sizeof(h3s_tensor),
               "INPUT_FIELDS names every field of h3s_inputs");

static h3s_tensor *input_field(h3s_inputs *in, int k) { return (h3s_tensor *)((char *)in + INPUT_FIELDS[k].offset); }

static const h3s_tensor *input_field_c(const h3s_inputs *in, int k) {
    return (const h3s_tensor *)((const char *)in + INPUT_FIELDS[k].offset);
}

h3s_status h3s_inputs_from_file(const h3s_st_file *f, h3s_inputs *in) {
    if (!f || !in) return h3s_fail(H3S_ERR_INVALID, "inputs_from_file: NULL argument");
    memset(in, 0, sizeof *in);
    for (int k = 0; k < N_INPUT_FIELDS; k++) {
        const h3s_st_entry *e = h3s_st_find(f, INPUT_FIELDS[k].name);
        if (e)
            *input_field(in, k) = e->tensor;
        else if (k != INPUT_MASK)
            return h3s_fail(H3S_ERR_FORMAT, "inputs: tensor '%s' is missing", INPUT_FIELDS[k].name);
    }
    for (int64_t i = 0; i < h3s_st_count(f); i++) {
        const char *name = h3s_st_entry_at(f, i)->name;
        int known = 0;
        for (int k = 0; k < N_INPUT_FIELDS; k++)
            known |= !strcmp(name, INPUT_FIELDS[k].name);
        if (!known) return h3s_fail(H3S_ERR_FORMAT, "inputs: unexpected tensor '%s'", name);
    }
    return H3S_OK;
}

h3s_status h3s_inputs_write(const char *path, const h3s_inputs *in, const h3s_st_meta *meta, int64_t nmeta) {
    if (!path || !in) return h3s_fail(H3S_ERR_INVALID, "inputs_write: NULL argument");
    h3s_st_entry e[N_INPUT_FIELDS];
    int64_t n = 0;
    for (int k = 0; k < N_INPUT_FIELDS; k++)
        if (k != INPUT_MASK || in->attention_mask.data)
            e[n++] = (h3s_st_entry){INPUT_FIELDS[k].name, *input_field_c(in, k)};
    return h3s_st_write_meta(path, e, n, meta, nmeta);
}

h3s_status h3s_inputs_read(const char *path, h3s_inputs *out) {
    if (!path || !out) return h3s_fail(H3S_ERR_INVALID, "inputs_read: NULL argument");
    h3s_st_file *f = NULL;
    H3S_TRY(h3s_st_open(path, &f));
    h3s_inputs views, own;
    memset(&own, 0, sizeof own);
    h3s_status st = h3s_inputs_from_file(f, &views);
    for (int k = 0; st == H3S_OK && k < N_INPUT_FIELDS; k++) {
        const h3s_tensor *src = input_field_c(&views, k);
        h3s_tensor *dst = input_field(&own, k);
        if (k == INPUT_MASK && !src->data) continue; /* no attention_mask */
        st = h3s_tensor_alloc(dst, src->dtype, src->ndim, src->shape);
        if (st == H3S_OK && h3s_tensor_nbytes(src)) memcpy(dst->data, src->data, h3s_tensor_nbytes(src));
    }
    h3s_st_close(f);
    if (st != H3S_OK) {
        h3s_inputs_free(&own);
        return h3s_fail_context(st, "%s", path);
    }
    *out = own;
    return H3S_OK;
}

void h3s_inputs_free(h3s_inputs *in) {
    if (!in) return;
    for (int k = 0; k < N_INPUT_FIELDS; k++) {
        h3s_tensor *t = input_field(in, k);
        if (t->owns_data) h3s_tensor_free(t);
    }
    memset(in, 0, sizeof *in);
}

/* Rank, dims and data of an input tensor the host reads whole: host memory (the inputs are validated on the host
 * before any work, so a device tensor is refused rather than copied: docs/api.md), no negative dim, an element count
 * that fits, and data for its elements. */
static h3s_status check_input_memory(const char *name, const h3s_tensor *t) {
    if (t->device)
        return h3s_fail(H3S_ERR_INVALID, "inputs: %s is in device memory (device %d); inputs are host tensors", name,
                        t->device);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return h3s_fail(H3S_ERR_SHAPE, "inputs: %s has a negative dim (shape[%d] = %lld)", name, d,
                            (long long)t->shape[d]);
        if (t->shape[d] != 0 && n > (INT64_MAX / 8) / t->shape[d])
            return h3s_fail(H3S_ERR_SHAPE, "inputs: %s has more elements than memory holds", name);
        n *= t->shape[d];
    }
    if (n > 0 && !t->data)
        return h3s_fail(H3S_ERR_INVALID, "inputs: %s has %lld elements but no data", name, (long long)n);
    return H3S_OK;
}

static h3s_status check_float_input(const char *name, const h3s_tensor *t, int ndim, int allow_f64) {
    if (t->ndim != ndim) return h3s_fail(H3S_ERR_SHAPE, "inputs: %s has %d dims, expected %d", name, t->ndim, ndim);
    if (!(t->dtype == H3S_F32 || t->dtype == H3S_BF16 || (allow_f64 && t->dtype == H3S_F64)))
        return h3s_fail(H3S_ERR_DTYPE, "inputs: %s has dtype %s, expected F32 or BF16%s", name,
                        h3s_dtype_name(t->dtype), allow_f64 ? " or F64" : "");
    H3S_TRY(check_input_memory(name, t)); /* so that the scan below sees every element */
    int64_t bad = h3s_tensor_first_nonfinite(t);
    if (bad >= 0) return h3s_fail(H3S_ERR_INVALID, "inputs: %s[%lld] is not finite", name, (long long)bad);
    return H3S_OK;
}

/* A 1-D I64 input of exactly `len` entries, each in [lo, hi]. */
static h3s_status check_i64_input(const char *name, const h3s_tensor *t, int64_t len, int64_t lo, int64_t hi) {
    if (t->dtype != H3S_I64)
        return h3s_fail(H3S_ERR_DTYPE, "inputs: %s has dtype %s, expected I64", name, h3s_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != len)
        return h3s_fail(H3S_ERR_SHAPE, "inputs: %s must be 1-D of length %lld", name, (long long)len);
    H3S_TRY(check_input_memory(name, t));
    const int64_t *v = t->data;
    for (int64_t i = 0; i < t->shape[0]; i++)
        if (v[i] < lo || v[i] > hi)
            return h3s_fail(H3S_ERR_INDEX, "inputs: %s[%lld] = %lld is outside [%lld, %lld]", name, (long long)i,
                            (long long)v[i], (long long)lo, (long long)hi);
    return H3S_OK;
}

h3s_status h3s_inputs_validate(const h3s_config *c, const h3s_inputs *in, int64_t *batch) {
    if (!c || !in || !batch) return h3s_fail(H3S_ERR_INVALID, "inputs_validate: NULL argument");
    H3S_TRY(check_float_input("hidden_states", &in->hidden_states, 3, 0));
    H3S_TRY(check_float_input("audio_hidden_states", &in->audio_hidden_states, 3, 0));
    H3S_TRY(check_float_input("encoder_hidden_states", &in->encoder_hidden_states, 3, 0));
    H3S_TRY(check_float_input("timestep", &in->timestep, 1, 1));
    for (int64_t i = 0; i < h3s_tensor_numel(&in->timestep); i++) {
        double t = h3s_tensor_get_f64(&in->timestep, i);
        if (!(t >= 0 && t <= 1))
            return h3s_fail(H3S_ERR_INVALID, "inputs: timestep[%lld] = %g is outside [0, 1] (1 = clean)", (long long)i,
                            t);
    }
    if (in->position_ids.ndim != 2 || in->position_ids.shape[1] != 3)
        return h3s_fail(H3S_ERR_SHAPE, "inputs: position_ids must be [S, 3]");
    if (in->position_ids.dtype != H3S_F64 && in->position_ids.dtype != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "inputs: position_ids has dtype %s, expected F64 or F32",
                        h3s_dtype_name(in->position_ids.dtype));
    H3S_TRY(check_float_input("position_ids", &in->position_ids, 2, 1));
    /* The model casts positions to f32 and rope_theta >= 1 keeps every angle within its position: the rope table's
     * bound, checked here on the host once for either backend. */
    H3S_TRY(h3s_rope_check_positions("inputs", &in->position_ids));
    int64_t B = in->hidden_states.shape[0], S = in->position_ids.shape[0], T = in->timestep.shape[0];
    int64_t Nv = in->hidden_states.shape[1], Na = in->audio_hidden_states.shape[1];
    int64_t Nt = in->encoder_hidden_states.shape[1];
    if (B <= 0) return h3s_fail(H3S_ERR_SHAPE, "inputs: batch size must be positive");
    if (S <= 0 || T <= 0) return h3s_fail(H3S_ERR_SHAPE, "inputs: empty sequence or no timestep");
    if (in->audio_hidden_states.shape[0] != B || in->encoder_hidden_states.shape[0] != B)
        return h3s_fail(H3S_ERR_SHAPE,
                        "inputs: hidden_states, audio_hidden_states and encoder_hidden_states "
                        "disagree on the batch size (%lld, %lld, %lld)",
                        (long long)B, (long long)in->audio_hidden_states.shape[0],
                        (long long)in->encoder_hidden_states.shape[0]);
    if (in->hidden_states.shape[2] != h3s_config_video_width(c))
        return h3s_fail(H3S_ERR_SHAPE, "inputs: hidden_states rows have %lld channels, the model expects %lld",
                        (long long)in->hidden_states.shape[2], (long long)h3s_config_video_width(c));
    if (in->audio_hidden_states.shape[2] != c->audio_in_channels)
        return h3s_fail(H3S_ERR_SHAPE, "inputs: audio_hidden_states rows have %lld channels, the model expects %lld",
                        (long long)in->audio_hidden_states.shape[2], (long long)c->audio_in_channels);
    if (in->encoder_hidden_states.shape[2] != c->text_dim)
        return h3s_fail(H3S_ERR_SHAPE, "inputs: encoder_hidden_states rows have %lld channels, the model expects %lld",
                        (long long)in->encoder_hidden_states.shape[2], (long long)c->text_dim);
    H3S_TRY(check_i64_input("timestep_indices", &in->timestep_indices, S, 0, T - 1));
    H3S_TRY(check_i64_input("token_tags", &in->token_tags, S, -1, 2));
    H3S_TRY(check_i64_input("video_indices", &in->video_indices, Nv, 0, S - 1));
    H3S_TRY(check_i64_input("audio_indices", &in->audio_indices, Na, 0, S - 1));
    H3S_TRY(check_i64_input("text_indices", &in->text_indices, Nt, 0, S - 1));
    if (Nt == 0) return h3s_fail(H3S_ERR_SHAPE, "inputs: at least one text row is required");
    /* The three row sets are disjoint, every live row belongs to one of them, and each
     * row's tag matches its set (video 0; audio 2; text 1, or 0 for a keyframe's vision
     * block inside the prompt).  A row outside every set would enter the pack as a live
     * zero row that every query attends to. */
    int8_t *owner = h3s_calloc((size_t)S, 1);
    if (!owner) return H3S_ERR_NOMEM;
    const h3s_tensor *sets[3] = {&in->video_indices, &in->text_indices, &in->audio_indices};
    static const char *set_names[3] = {"video_indices", "text_indices", "audio_indices"};
    const int64_t *tags = in->token_tags.data;
    h3s_status st = H3S_OK;
    for (int k = 0; k < 3 && st == H3S_OK; k++) {
        const int64_t *v = sets[k]->data;
        for (int64_t i = 0; i < sets[k]->shape[0] && st == H3S_OK; i++) {
            int64_t row = v[i], tag = tags[row];
            int tag_ok = k == 0 ? tag == 0 : (k == 1 ? (tag == 1 || tag == 0) : tag == 2);
            if (owner[row])
                st = h3s_fail(H3S_ERR_INDEX, "inputs: %s[%lld] = %lld names a row already used by %s", set_names[k],
                              (long long)i, (long long)row, set_names[owner[row] - 1]);
            else if (!tag_ok)
                st = h3s_fail(H3S_ERR_INDEX, "inputs: %s[%lld] = %lld names a row tagged %lld", set_names[k],
                              (long long)i, (long long)row, (long long)tag);
            owner[row] = (int8_t)(k + 1);
        }
    }
    for (int64_t s = 0; s < S && st == H3S_OK; s++)
        if (!owner[s] && tags[s] != -1)
            st = h3s_fail(H3S_ERR_INDEX, "inputs: row %lld (tag %lld) is in no index list and not padding (tag -1)",
                          (long long)s, (long long)tags[s]);
    free(owner);
    if (st != H3S_OK) return st;
    const h3s_tensor *am = &in->attention_mask;
    if (am->data) {
        if (am->dtype != H3S_BOOL)
            return h3s_fail(H3S_ERR_DTYPE, "inputs: attention_mask has dtype %s, expected BOOL",
                            h3s_dtype_name(am->dtype));
        int ok2 = am->ndim == 2 && am->shape[0] == B && am->shape[1] == S;
        int ok4 = am->ndim == 4 && am->shape[0] == B && am->shape[1] == 1 && am->shape[2] == 1 && am->shape[3] == S;
        if (!ok2 && !ok4) return h3s_fail(H3S_ERR_SHAPE, "inputs: attention_mask must be [B, S] or [B, 1, 1, S]");
        H3S_TRY(check_input_memory("attention_mask", am));
        const uint8_t *mv = am->data;
        for (int64_t i = 0; i < B * S; i++)
            if (mv[i] > 1)
                return h3s_fail(H3S_ERR_INVALID, "inputs: attention_mask[%lld] = %u is not a boolean (0 or 1)",
                                (long long)i, (unsigned)mv[i]);
        /* A query whose every key is hidden has no softmax: the reference gives NaN, a kernel that skips the
         * empty sum gives 0.  Neither is an answer, so such a mask is refused.  Live rows (tag != -1) form one
         * attention document per item, so they all see the same keys: the live rows the mask keeps.  Padding
         * rows (their own document) are never read, so a padding query without keys is harmless.  The token
         * refiner attends over the text rows only, under the same mask gathered at text_indices. */
        const int64_t *ti = in->text_indices.data;
        for (int64_t b = 0; b < B; b++) {
            const uint8_t *row = mv + b * S;
            int64_t first_live = -1, visible = 0;
            for (int64_t s = 0; s < S; s++) {
                if (tags[s] == -1) continue;
                if (first_live < 0) first_live = s;
                visible += row[s];
            }
            if (first_live >= 0 && visible == 0)
                return h3s_fail(H3S_ERR_INVALID,
                                "inputs: attention_mask hides every key from the queries of item %lld (row %lld and "
                                "every other live row would attend to nothing)",
                                (long long)b, (long long)first_live);
            if (c->num_refiner_layers > 0) {
                int64_t text_visible = 0;
                for (int64_t j = 0; j < Nt; j++)
                    text_visible += row[ti[j]];
                if (text_visible == 0)
                    return h3s_fail(H3S_ERR_INVALID,
                                    "inputs: attention_mask hides every text row of item %lld (the token refiner's "
                                    "query row %lld and every other text row would attend to nothing)",
                                    (long long)b, (long long)ti[0]);
            }
        }
    }
    *batch = B;
    return H3S_OK;
}

/* ------------------------------------------------------------------ tape -------------- */

typedef struct block_acts {
    h3s_tensor *x_in, *a_silu, *table, *n1, *q, *k, *v, *qn, *kn, *qr, *kr, *att, *stats, *o, *x1, *n2, *u, *h, *f, *x2;
    h3s_tensor *att_full, *h_full; /* tensor parallel: every head's attention output, the whole FFN inner row */
} block_acts;

struct h3s_tape {
    h3s_model *m;
    arena ar;
    int64_t B, S, Nv, Na, Nt, T;
    int64_t in_shape_v[3], in_shape_a[3], in_shape_t[3];
    /* host index tensors (checked once) */
    h3s_tensor adaln_rows, ts_rows, doc, key_valid, text_key_valid, video_idx, audio_idx, text_idx;
    int has_doc, has_mask;
    h3s_tensor *cos_t, *sin_t, *hv, *ha, *enc, *video_emb, *audio_emb, *text_emb, *text_pre_final, *text_final, *packed,
        *feats, *mlp_hidden, *temb, *a_out, *table_out, *y, *yv, *ya, *x_last;
    block_acts *refiner, *blocks;
    /* sequence parallel: this rank's slice of the packed rows, its rope tables and AdaLN rows (h3s_model_set_parallel)
     */
    int sp, tpar;
    uint64_t par_gen; /* the model's par_gen at the forward: its plan points into that setup's communicators */
    h3s_sp_plan plan;
    h3s_tensor cos_l, sin_l, adaln_l;
    /* H3S_RECOMPUTE_BLOCKS: every block (and refiner block) kept only its input, a->x_in; the backward runs the
     * block's forward again into a scratch arena (block_backward_kept) */
    h3s_recompute recompute;
};

void h3s_tape_free(h3s_tape *t) {
    if (!t) return;
    arena_free(&t->ar);
    meter_release(t->ar.meter);
    h3s_tensor *host[] = {&t->adaln_rows,     &t->ts_rows,   &t->doc,       &t->key_valid,
                          &t->text_key_valid, &t->video_idx, &t->audio_idx, &t->text_idx};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        h3s_tensor_free(host[i]);
    free(t->refiner);
    free(t->blocks);
    h3s_sp_plan_free(&t->plan);
    h3s_tensor_free(&t->cos_l);
    h3s_tensor_free(&t->sin_l);
    free(t);
}

typedef struct run_ctx {
    h3s_tape *tp;
    h3s_node_hook hook;
    void *hook_ctx;
} run_ctx;

/* The caller's hook on one node.  A hook that fails without a message of its own (h3s_set_error) gets one naming the
 * node, so that the failed pass never reports an older, unrelated message. */
static h3s_status call_hook(const run_ctx *r, const char *name, h3s_tensor *t, int batched, int64_t rows_per_item) {
    h3s_clear_error();
    h3s_status st = r->hook(r->hook_ctx, name, t, batched, rows_per_item);
    if (st != H3S_OK && !h3s_last_error()[0])
        return h3s_fail(st, "node hook: the hook returned %s at node '%s' without a message", h3s_status_name(st),
                        name);
    return st;
}

static h3s_status emit(run_ctx *r, h3s_tensor *t, int batched, int64_t rows_per_item, const char *fmt, ...)
    H3S_PRINTF(5, 6);
static h3s_status emit(run_ctx *r, h3s_tensor *t, int batched, int64_t rows_per_item, const char *fmt, ...) {
    if (!r->hook) return H3S_OK;
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return call_hook(r, name, t, batched, rows_per_item);
}

#define NEW(var, dt, rows, cols)                                                                                       \
    do {                                                                                                               \
        (var) = arena_new(&tp->ar, (dt), (rows), (cols));                                                              \
        if (!(var)) return H3S_ERR_NOMEM;                                                                              \
    } while (0)
/* The same without the zero fill, for an output its operator writes in every row and column (linear and its
 * dgrad, norms, rope, SwiGLU, residuals, grad_add, the AdaLN projection, and their backward); attention's outputs
 * and gradients and the AdaLN table gradient (written chunk by chunk by several operators) keep the fill. */
#define NEW_OUT(var, dt, rows, cols)                                                                                   \
    do {                                                                                                               \
        (var) = arena_new_as(&tp->ar, (dt), (rows), (cols), 0);                                                        \
        if (!(var)) return H3S_ERR_NOMEM;                                                                              \
    } while (0)

/* Parameter lookup by formatted name.  h3s_model_create checked that every parameter of
 * the spec list exists, so a NULL here is a naming bug in this file; the operator it is
 * passed to then fails with "NULL tensor" rather than reading anything. */
/* A parameter outside the blocks (NULL when the config has none). */
static const h3s_tensor *gweight(const h3s_model *m, int k) { return m->gp[k] >= 0 ? &m->w[m->gp[k]] : NULL; }

/* Blocks attend within their document (padding rows form their own); both blocks and the
 * refiner honour the key-padding mask (the refiner's is the mask at text_indices: a masked
 * row is never attended to, wherever it runs). */
static h3s_attn_mask block_mask(const h3s_tape *tp, int refiner) {
    h3s_attn_mask mask = {NULL, NULL};
    if (refiner) {
        mask.key_valid = tp->has_mask ? &tp->text_key_valid : NULL;
    } else {
        mask.doc = tp->has_doc ? &tp->doc : NULL;
        mask.key_valid = tp->has_mask ? &tp->key_valid : NULL;
    }
    return mask;
}

/* The shared block's node callback: the model's evidence node `<prefix>.{i}.<name>` (the AdaLN projection and its
 * gradient per timestep, every other node per packed row); the backward's steps without a node pass. */
typedef struct block_emit {
    run_ctx *r;
    const char *prefix;
    long long i;
    int64_t S;
    const h3s_tensor *per_timestep; /* the node emitted unbatched (the AdaLN table, dtemb) */
} block_emit;

static h3s_status block_node(void *ctx, const char *name, h3s_tensor *t) {
    block_emit *e = ctx;
    if (!t) return H3S_OK;
    const int rows = t != e->per_timestep;
    return emit(e->r, t, rows, rows ? e->S : 0, "%s.%lld.%s", e->prefix, e->i, name);
}

/* The shared block's context for block (or refiner block) i of this tape, single device. */
static h3s_block_ctx block_ctx(const h3s_tape *tp, int refiner, const h3s_attn_mask *mask, block_emit *e) {
    const h3s_config *c = &tp->m->cfg;
    return (h3s_block_ctx){.refiner = refiner,
                           .B = tp->B,
                           .heads = c->num_attention_heads,
                           .norm_eps = c->norm_eps,
                           .qk_norm_eps = c->qk_norm_eps,
                           .temb = tp->temb,
                           .adaln_rows = &tp->adaln_rows,
                           .cos = tp->cos_t,
                           .sin = tp->sin_t,
                           .mask = mask,
                           .node = block_node,
                           .node_ctx = e};
}

static h3s_block_fwd block_fwd_of(const block_acts *a) {
    return (h3s_block_fwd){a->x_in, a->a_silu, a->table, a->n1, a->q,  a->k,  a->v, a->qn, a->kn, a->qr,
                           a->kr,   a->att,    a->stats, a->o,  a->x1, a->n2, a->u, a->h,  a->f,  a->x2};
}

/* Single device: allocate the block's nodes on the tape, then the shared block (model/block.c). */
static h3s_status block_forward(run_ctx *r, int refiner, int64_t i, h3s_tensor *x, int64_t S, block_acts *a,
                                h3s_tensor **x_out) {
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    int64_t B = tp->B, M = B * S, H = c->hidden_size, heads = c->num_attention_heads;
    int64_t HD = heads * c->attention_head_dim, F = c->ffn_dim;
    a->x_in = x;
    if (!refiner) {
        NEW_OUT(a->a_silu, m->act, tp->T, c->time_embed_dim);
        NEW_OUT(a->table, m->act, tp->T, 18 * H);
    }
    NEW_OUT(a->n1, m->act, M, H);
    NEW_OUT(a->q, m->act, M, HD);
    NEW_OUT(a->k, m->act, M, HD);
    NEW_OUT(a->v, m->act, M, HD);
    NEW_OUT(a->qn, m->act, M, HD);
    NEW_OUT(a->kn, m->act, M, HD);
    if (!refiner) {
        NEW_OUT(a->qr, m->act, M, HD);
        NEW_OUT(a->kr, m->act, M, HD);
    }
    NEW(a->att, m->act, M, HD);
    NEW(a->stats, m->f32, M, heads * 2);
    NEW_OUT(a->o, m->act, M, H);
    NEW_OUT(a->x1, m->act, M, H);
    NEW_OUT(a->n2, m->act, M, H);
    NEW_OUT(a->u, m->act, M, 2 * F);
    NEW_OUT(a->h, m->act, M, F);
    NEW_OUT(a->f, m->act, M, H);
    NEW_OUT(a->x2, m->act, M, H);
    block_emit e = {r, refiner ? "refiner" : "block", (long long)i, S, a->table};
    h3s_attn_mask mask = block_mask(tp, refiner);
    h3s_block_ctx bc = block_ctx(tp, refiner, &mask, &e);
    h3s_block_fwd f = block_fwd_of(a);
    H3S_TRY(h3s_block_forward(refiner ? &m->rbw[i] : &m->bw[i], &bc, &f));
    *x_out = a->x2;
    return H3S_OK;
}

/* ------------------------------------------------------------------ tensor parallel ---- */

/* One rank's slices of a transformer block's weights (tensor parallel): rows of the outputs it computes, and the
 * columns its input-gradient GEMMs need (the reduction axis of those GEMMs is whole in each). */
typedef struct tp_block {
    h3s_tensor wq, wk, wv;        /* rows of this rank's heads [hl * D, H] */
    h3s_tensor wq_c, wk_c, wv_c;  /* columns of this rank's hidden range [heads * D, cl] */
    h3s_tensor wo, wo_c;          /* rows of its hidden range [cl, heads * D]; columns of its heads [H, hl * D] */
    h3s_tensor w0, w0_c;          /* value and gate rows of its FFN range [2 fl, H]; columns [2F, cl] */
    h3s_tensor w2, w2_c;          /* rows [cl, F]; columns of its FFN range [H, fl] */
    h3s_tensor ada, ada_b, ada_c; /* AdaLN rows [al, E] and bias [al]; columns of its embedding range [18H, el] */
} tp_block;

typedef struct tp_geom {
    h3s_comm *c;
    h3s_comm *world; /* the model's whole communicator: set-up steps agree over it before each collective */
    int n, rank;
    int64_t *heads, *hid, *ffn, *ada, *emb; /* n + 1 bounds each: heads, H columns, F columns, 18H columns, E columns */
    tp_block *blocks;
} tp_geom;

static void tp_block_free(tp_block *b) {
    h3s_tensor *t[] = {&b->wq, &b->wk,   &b->wv, &b->wq_c, &b->wk_c, &b->wv_c,  &b->wo,   &b->wo_c,
                       &b->w0, &b->w0_c, &b->w2, &b->w2_c, &b->ada,  &b->ada_b, &b->ada_c};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        h3s_tensor_free(t[i]);
}

static void tp_geom_free(tp_geom *g, int64_t layers) {
    if (!g) return;
    if (g->blocks)
        for (int64_t i = 0; i < layers; i++)
            tp_block_free(&g->blocks[i]);
    free(g->blocks);
    free(g->heads);
    free(g->hid);
    free(g->ffn);
    free(g->ada);
    free(g->emb);
    free(g);
}

/* The even split of `total` over n ranks (the first total % n one more). */
static int64_t *split_bounds(int64_t total, int n) {
    int64_t *b = h3s_malloc((size_t)n + 1, sizeof *b);
    if (!b) return NULL;
    b[0] = 0;
    for (int r = 0; r < n; r++)
        b[r + 1] = b[r] + total / n + (r < total % n ? 1 : 0);
    return b;
}

/* Rows [r0, r1) (and, when b0 < b1, rows [b0, b1) after them) of a 1-D or 2-D host tensor, copied. */
static h3s_status copy_rows(const h3s_tensor *w, int64_t r0, int64_t r1, int64_t b0, int64_t b1, h3s_tensor *out) {
    int64_t cols = w->ndim == 2 ? w->shape[1] : 1, n = (r1 - r0) + (b1 - b0);
    int64_t shape[2] = {n, cols};
    H3S_TRY(h3s_tensor_alloc(out, w->dtype, w->ndim, shape));
    size_t rb = (size_t)cols * h3s_dtype_size(w->dtype);
    memcpy(out->data, (const char *)w->data + (size_t)r0 * rb, (size_t)(r1 - r0) * rb);
    if (b1 > b0)
        memcpy((char *)out->data + (size_t)(r1 - r0) * rb, (const char *)w->data + (size_t)b0 * rb,
               (size_t)(b1 - b0) * rb);
    return H3S_OK;
}

/* Columns [c0, c1) of a 2-D host tensor, copied. */
static h3s_status copy_cols(const h3s_tensor *w, int64_t c0, int64_t c1, h3s_tensor *out) {
    int64_t shape[2] = {w->shape[0], c1 - c0};
    H3S_TRY(h3s_tensor_alloc(out, w->dtype, 2, shape));
    size_t es = h3s_dtype_size(w->dtype), rb = (size_t)w->shape[1] * es, ob = (size_t)(c1 - c0) * es;
    for (int64_t r = 0; r < w->shape[0]; r++)
        memcpy((char *)out->data + (size_t)r * ob, (const char *)w->data + (size_t)r * rb + (size_t)c0 * es, ob);
    return H3S_OK;
}

/* This rank's column slice of a weight whose rows are split over the group: every rank sends each other rank the
 * columns [cb[j] * cunit, cb[j + 1] * cunit) of its own rows (an all-to-all, a copy), and the blocks are stacked in
 * the weight's row order (two: each rank's rows are a value half then a gate half, placed at rb[r] and at
 * half_rows + rb[r]).  No rank reads another rank's rows of the checkpoint. */
static h3s_status tp_col_slice(const tp_geom *g, const h3s_tensor *local, const int64_t *rb, int64_t runit, int two,
                               int64_t half_rows, const int64_t *cb, int64_t cunit, h3s_tensor *out) {
    const int n = g->n, me = g->rank;
    const size_t es = h3s_dtype_size(local->dtype);
    const int64_t K = local->shape[1], myrows = local->shape[0], cl = (cb[me + 1] - cb[me]) * cunit;
    int64_t total = 0;
    for (int r = 0; r < n; r++)
        total += (rb[r + 1] - rb[r]) * runit * (two ? 2 : 1);
    int64_t shape[2] = {total, cl};
    h3s_status st = h3s_tensor_alloc(out, local->dtype, 2, shape);
    size_t *v = st == H3S_OK ? h3s_calloc((size_t)n * 4, sizeof *v) : NULL;
    char *sendb = v ? h3s_malloc((size_t)(myrows * K > 0 ? myrows * K : 1), es) : NULL;
    char *recvb = sendb ? h3s_malloc((size_t)(total * cl > 0 ? total * cl : 1), es) : NULL;
    if (st == H3S_OK && !recvb) st = H3S_ERR_NOMEM;
    size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, so = 0, ro = 0;
    for (int j = 0; st == H3S_OK && j < n; j++) {
        int64_t c0 = cb[j] * cunit, w = (cb[j + 1] - cb[j]) * cunit;
        for (int64_t m = 0; m < myrows; m++)
            memcpy(sendb + so + (size_t)(m * w) * es, (const char *)local->data + (size_t)(m * K + c0) * es,
                   (size_t)w * es);
        sc[j] = (size_t)(myrows * w) * es;
        sd[j] = so;
        so += sc[j];
        rc[j] = (size_t)((rb[j + 1] - rb[j]) * runit * (two ? 2 : 1) * cl) * es;
        rd[j] = ro;
        ro += rc[j];
    }
    /* a rank that could not allocate must not leave the others waiting in the all-to-all */
    st = h3s_comm_agree(g->world, st, NULL);
    if (st == H3S_OK) st = h3s_comm_alltoallv(g->c, sendb, sc, sd, recvb, rc, rd);
    for (int r = 0; st == H3S_OK && r < n; r++) {
        int64_t rows = (rb[r + 1] - rb[r]) * runit, row0 = rb[r] * runit;
        const char *src = recvb + rd[r];
        const size_t block = (size_t)(rows * cl) * es;
        memcpy((char *)out->data + (size_t)(row0 * cl) * es, src, block);
        if (two) memcpy((char *)out->data + (size_t)((half_rows + row0) * cl) * es, src + block, block);
    }
    free(recvb);
    free(sendb);
    free(v);
    if (st != H3S_OK) h3s_tensor_free(out);
    return st;
}

/* Column layouts of a tensor-parallel activation: whole, this rank's heads (x D), its FFN columns, or its FFN
 * columns twice (SwiGLU's value and gate halves, [value | gate] locally). */
enum { COL_FULL, COL_HEADS, COL_FFN, COL_SWIGLU, COL_HID, COL_ADA, COL_EMB };

static const int64_t *tp_bounds(const tp_geom *g, int kind, int64_t *unit) {
    *unit = 1;
    switch (kind) {
    case COL_HEADS: return g->heads;
    case COL_FFN:
    case COL_SWIGLU: return g->ffn;
    case COL_HID: return g->hid;
    case COL_ADA: return g->ada;
    case COL_EMB: return g->emb;
    }
    return NULL;
}

/* Every rank's columns of `local` [M, w_r] into `full` [M, W] (allocated here): an all-gather, then a copy into
 * place.  unit: columns per bound unit (D for heads). */
static h3s_status tp_gather_cols(const tp_geom *g, const h3s_tensor *local, int kind, int64_t unit, int64_t W,
                                 h3s_tensor *full) {
    int64_t u;
    const int64_t *b = tp_bounds(g, kind, &u);
    const int two = kind == COL_SWIGLU;
    const int64_t M = local->shape[0];
    const size_t es = h3s_dtype_size(local->dtype);
    int64_t shape[2] = {M, W};
    H3S_TRY(h3s_tensor_alloc(full, local->dtype, 2, shape));
    size_t *v = h3s_calloc((size_t)g->n * 2, sizeof *v);
    int64_t total = 0;
    for (int r = 0; r < g->n; r++)
        total += (b[r + 1] - b[r]) * unit * (two ? 2 : 1);
    char *buf = v ? h3s_malloc((size_t)(M * total > 0 ? M * total : 1), es) : NULL;
    h3s_status st = buf ? H3S_OK : H3S_ERR_NOMEM;
    size_t off = 0;
    for (int r = 0; st == H3S_OK && r < g->n; r++) {
        v[r] = (size_t)(M * (b[r + 1] - b[r]) * unit * (two ? 2 : 1)) * es;
        v[g->n + r] = off;
        off += v[r];
    }
    if (st == H3S_OK && local->shape[1] != (b[g->rank + 1] - b[g->rank]) * unit * (two ? 2 : 1))
        st = h3s_fail(H3S_ERR_SHAPE, "tp: a slice of %lld columns, this rank holds %lld", (long long)local->shape[1],
                      (long long)((b[g->rank + 1] - b[g->rank]) * unit * (two ? 2 : 1)));
    if (st == H3S_OK) st = h3s_comm_allgatherv(g->c, local->data, buf, v, v + g->n);
    for (int r = 0; st == H3S_OK && r < g->n; r++) {
        int64_t w = (b[r + 1] - b[r]) * unit, c0 = b[r] * unit, lw = w * (two ? 2 : 1);
        const char *src = buf + v[g->n + r];
        for (int64_t m = 0; m < M; m++) {
            char *dst = (char *)full->data + (size_t)(m * W) * es;
            memcpy(dst + (size_t)c0 * es, src + (size_t)(m * lw) * es, (size_t)w * es);
            if (two) memcpy(dst + (size_t)(W / 2 + c0) * es, src + (size_t)(m * lw + w) * es, (size_t)w * es);
        }
    }
    free(buf);
    free(v);
    if (st != H3S_OK) h3s_tensor_free(full);
    return st;
}

/* tp_gather_cols into `dst` [M, W], memory the caller holds (a tape tensor). */
static h3s_status tp_gather_into(const tp_geom *g, const h3s_tensor *local, int kind, int64_t unit, int64_t W,
                                 h3s_tensor *dst) {
    h3s_tensor whole;
    H3S_TRY(tp_gather_cols(g, local, kind, unit, W, &whole));
    memcpy(dst->data, whole.data, h3s_tensor_nbytes(&whole));
    h3s_tensor_free(&whole);
    return H3S_OK;
}

/* tp_gather_cols into a tensor the tape holds from now on (*out). */
static h3s_status tp_gather_keep(h3s_tape *tp, const h3s_tensor *local, int kind, int64_t unit, int64_t W,
                                 h3s_tensor **out) {
    h3s_tensor whole;
    H3S_TRY(tp_gather_cols(tp->m->tpg, local, kind, unit, W, &whole));
    *out = arena_adopt(&tp->ar, &whole);
    if (!*out) {
        h3s_tensor_free(&whole);
        return H3S_ERR_NOMEM;
    }
    return H3S_OK;
}

/* Every rank's rows of a parameter gradient `local` [n_r, K] (or [n_r]) into `dst` [N, K]; unit: rows per bound
 * unit (D for heads). */
static h3s_status tp_gather_rows(const tp_geom *g, const h3s_tensor *local, int kind, int64_t unit, h3s_tensor *dst) {
    int64_t u;
    const int64_t *b0 = tp_bounds(g, kind, &u);
    int64_t *b = h3s_malloc((size_t)g->n + 1, sizeof *b);
    if (!b) return H3S_ERR_NOMEM;
    for (int r = 0; r <= g->n; r++)
        b[r] = b0[r] * unit;
    const int two = kind == COL_SWIGLU;
    const int64_t K = local->ndim == 2 ? local->shape[1] : 1, N = dst->shape[0];
    h3s_tensor tmp = {0};
    int64_t shape[2] = {N, K};
    h3s_status ast = h3s_tensor_alloc(&tmp, local->dtype, 2, shape);
    if (ast != H3S_OK) {
        free(b);
        return ast;
    }
    size_t *v = h3s_calloc((size_t)g->n * 2, sizeof *v);
    h3s_status st = v ? H3S_OK : H3S_ERR_NOMEM;
    const size_t rb = (size_t)K * h3s_dtype_size(local->dtype);
    size_t off = 0;
    for (int r = 0; st == H3S_OK && r < g->n; r++) {
        v[r] = (size_t)((b[r + 1] - b[r]) * (two ? 2 : 1)) * rb;
        v[g->n + r] = off;
        off += v[r];
    }
    if (st == H3S_OK) st = h3s_comm_allgatherv(g->c, local->data, tmp.data, v, v + g->n);
    for (int r = 0; st == H3S_OK && r < g->n; r++) {
        int64_t w = b[r + 1] - b[r];
        const char *src = (const char *)tmp.data + v[g->n + r];
        memcpy((char *)dst->data + (size_t)b[r] * rb, src, (size_t)w * rb);
        if (two) memcpy((char *)dst->data + (size_t)(N / 2 + b[r]) * rb, src + (size_t)w * rb, (size_t)w * rb);
    }
    free(v);
    free(b);
    h3s_tensor_free(&tmp);
    return st;
}

/* Columns of a host activation or gradient [M, W] as a contiguous copy. */
static h3s_status cols_of(const h3s_tensor *t, int64_t c0, int64_t c1, h3s_tensor *out) {
    return copy_cols(t, c0, c1, out);
}

/* dx = dy @ w for w [N, K]: the input-gradient half of h3s_linear_backward.  `like` lends memory of at least
 * [M, K] of w's dtype for the x argument, which is read only for dw (not requested here). */
static h3s_status dgrad(const h3s_tensor *dy, const h3s_tensor *w, h3s_tensor *dx, const h3s_tensor *like) {
    int64_t shape[2] = {dy->shape[0], w->shape[1]};
    if (like->dtype != w->dtype || h3s_tensor_numel(like) < shape[0] * shape[1])
        return h3s_fail(H3S_ERR_INVALID, "tp: no stand-in for the linear's input");
    h3s_tensor x = h3s_tensor_view(like->data, w->dtype, 2, shape);
    return h3s_linear_backward(&x, w, dy, dx, NULL, NULL);
}

/* ------------------------------------------------------------------ sequence parallel -- */

/* The AdaLN row index of this rank's rows. */
static const h3s_tensor *par_adaln_rows(const h3s_tape *tp) { return tp->sp ? &tp->adaln_l : &tp->adaln_rows; }

/* This rank's part of a transformer block (h3s_model_set_parallel): M packed rows from row lo (all B * S without
 * sequence parallel) with their rope tables, hl heads, fl FFN columns and cl hidden columns (all of them without
 * tensor parallel). */
typedef struct par_part {
    int64_t M, lo, hl, fl, cl;
    const h3s_tensor *cos, *sin;
} par_part;

static par_part par_part_of(const h3s_tape *tp) {
    const h3s_config *c = &tp->m->cfg;
    const tp_geom *g = tp->m->tpg;
    par_part p;
    p.M = tp->sp ? h3s_sp_rows(&tp->plan) : tp->B * tp->S;
    p.lo = tp->sp ? h3s_sp_lo(&tp->plan) : 0;
    p.hl = g ? g->heads[g->rank + 1] - g->heads[g->rank] : c->num_attention_heads;
    p.fl = g ? g->ffn[g->rank + 1] - g->ffn[g->rank] : c->ffn_dim;
    p.cl = g ? g->hid[g->rank + 1] - g->hid[g->rank] : c->hidden_size;
    p.cos = tp->sp ? &tp->cos_l : tp->cos_t;
    p.sin = tp->sp ? &tp->sin_l : tp->sin_t;
    return p;
}

/* Rows [row0, row0 + n) of a 2-D host tensor, borrowed. */
static h3s_tensor rows_view(const h3s_tensor *t, int64_t row0, int64_t n) {
    int64_t shape[2] = {n, t->ndim == 2 ? t->shape[1] : 1};
    size_t rb = (size_t)shape[1] * h3s_dtype_size(t->dtype);
    return h3s_tensor_view((char *)t->data + (size_t)row0 * rb, t->dtype, 2, shape);
}

static void tensors_free(h3s_tensor *t, int n) {
    for (int k = 0; k < n; k++)
        h3s_tensor_free(&t[k]);
}

/* The rows of every item this rank's slice touches (attention reads its whole document), of each of the n tensors
 * local[k] into out[k] (copies; on failure none is left); *kv_lo: the first row gathered. */
static h3s_status gather_items(const h3s_tape *tp, int n, const h3s_tensor *const *local, h3s_tensor *out,
                               int64_t *kv_lo) {
    const h3s_sp_plan *p = &tp->plan;
    memset(out, 0, (size_t)n * sizeof *out);
    int64_t *need = h3s_malloc((size_t)p->n * 2, sizeof *need);
    if (!need) return H3S_ERR_NOMEM;
    h3s_sp_item_ranges(p, tp->S, need, need + p->n);
    *kv_lo = need[p->rank];
    h3s_status st = H3S_OK;
    for (int k = 0; st == H3S_OK && k < n; k++)
        st = h3s_sp_exchange_rows(p, local[k], need, need + p->n, &out[k]);
    free(need);
    if (st != H3S_OK) tensors_free(out, n);
    return st;
}

/* One node's cross-row sums, computed per owned 256-row tile by the operator itself (a tile is a whole call: the
 * operator's fold over one tile is that tile's partial). */
typedef struct tile_op {
    int kind; /* TILE_LINEAR, TILE_RESIDUAL, TILE_NORM, TILE_HEAD_NORM */
    const h3s_tape *tp;
    const h3s_tensor *w, *table6;
    int64_t heads;
    double eps;
    int chunk, shift, scale, has_dw;
} tile_op;
enum { TILE_LINEAR, TILE_RESIDUAL, TILE_NORM, TILE_HEAD_NORM };

static h3s_status tile_partial(void *ctx, int64_t row0, int64_t n, const h3s_tensor *in, h3s_tensor *parts) {
    const tile_op *o = ctx;
    h3s_tensor idx = o->tp->adaln_rows;
    idx.data = (int64_t *)o->tp->adaln_rows.data + row0;
    idx.shape[0] = n;
    idx.owns_data = 0;
    switch (o->kind) {
    case TILE_LINEAR: return h3s_linear_backward(&in[0], o->w, &in[1], NULL, &parts[0], NULL);
    case TILE_RESIDUAL: return h3s_residual_backward(&in[0], o->table6, &idx, o->chunk, &in[1], NULL, NULL, &parts[0]);
    case TILE_NORM: {
        h3s_modulation mod = {o->table6, &idx, o->shift, o->scale};
        return h3s_rmsnorm_backward(&in[0], o->w, &mod, o->eps, &in[1], NULL, o->has_dw ? &parts[0] : NULL,
                                    &parts[o->has_dw ? 1 : 0]);
    }
    case TILE_HEAD_NORM: return h3s_head_rmsnorm_backward(&in[0], o->heads, o->w, o->eps, &in[1], NULL, &parts[0]);
    }
    return h3s_fail(H3S_ERR_INVALID, "sp: unknown tile operator %d", o->kind);
}

/* One node's cross-row sums over this rank's owned tiles of x and dy (in that order, the operator's inputs). */
static h3s_status tile_sums(tile_op *o, const h3s_tensor *x, const h3s_tensor *dy, h3s_sp_sum *sums, int nsums) {
    const h3s_tensor *in[2] = {x, dy};
    return h3s_sp_tile_sums(&o->tp->plan, in, 2, sums, nsums, tile_partial, o);
}

static h3s_sp_sum whole_sum(h3s_tensor *dst) {
    int64_t n = h3s_tensor_numel(dst);
    return (h3s_sp_sum){dst, NULL, 1, n, 1, {0, 0}, n};
}

static h3s_sp_sum table_sum(const h3s_tape *tp, h3s_tensor *dtable6, int c0, int c1, int ncols) {
    int64_t H = tp->m->cfg.hidden_size;
    return (h3s_sp_sum){dtable6, tp->adaln_rows.data, tp->T * 3, 6 * H, ncols, {c0 * H, c1 * H}, H};
}

/* dW of a block linear: x [rows, K] and dy [rows, N] are this rank's slices. */
/* Bytes of tile partials a rank holds at once for a weight gradient (h3s_model_set_sp_fold_budget). */
static int64_t g_fold_budget = (int64_t)256 << 20;

h3s_status h3s_model_set_sp_fold_budget(int64_t bytes) {
    if (bytes < 1) return h3s_fail(H3S_ERR_INVALID, "sp fold budget: %lld bytes", (long long)bytes);
    g_fold_budget = bytes;
    return H3S_OK;
}

/* A weight gradient dW [N, K] by owned tiles, in chunks of its rows (output features): each chunk's partials (the
 * rank's tiles of dy's chunk columns against x) are computed by all ranks at once and folded along the ranks
 * before the next chunk, so a rank holds at most the budget of partials.  A row of dW is one chain per tile
 * whatever the chunk, so the chunking (the same on every rank) never changes a bit. */
static h3s_status sp_linear_dw(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                               h3s_tensor *dw) {
    if (!dw) return H3S_OK;
    const int64_t N = w->shape[0], K = w->shape[1], tiles = h3s_sp_max_owned_tiles(&tp->plan);
    int64_t rows = tiles > 0 && K > 0 ? g_fold_budget / (tiles * K * (int64_t)sizeof(float)) : N;
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    const size_t wrow = (size_t)K * h3s_dtype_size(w->dtype);
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t n1 = n0 + rows < N ? n0 + rows : N, ws[2] = {n1 - n0, K};
        h3s_tensor wv = h3s_tensor_view((char *)w->data + (size_t)n0 * wrow, w->dtype, 2, ws);
        h3s_tensor dwv = h3s_tensor_view((float *)dw->data + n0 * K, H3S_F32, 2, ws);
        h3s_tensor dyc = {0};
        const h3s_tensor *dyp = dy;
        if (rows < N) {
            H3S_TRY(copy_cols(dy, n0, n1, &dyc));
            dyp = &dyc;
        }
        tile_op o = {TILE_LINEAR, tp, &wv, NULL, 0, 0, 0, 0, 0, 0};
        h3s_sp_sum sum = whole_sum(&dwv);
        h3s_status st = tile_sums(&o, x, dyp, &sum, 1);
        h3s_tensor_free(&dyc);
        H3S_TRY(st);
    }
    return H3S_OK;
}

/* The slice of this pass: the plan over the B*S packed rows, and the per-row tables of the slice (rope rows
 * expanded over the batch, AdaLN rows a view). */
static h3s_status sp_prepare(h3s_tape *tp) {
    h3s_model *m = tp->m;
    const int64_t *sizes = NULL;
    if (m->sp_sizes && m->sp_nsizes != m->sp)
        return h3s_fail(H3S_ERR_INVALID, "sequence parallel: %lld slice sizes were set for %d ranks",
                        (long long)m->sp_nsizes, m->sp);
    sizes = m->sp_sizes;
    H3S_TRY(h3s_sp_plan_make(m->spc, tp->B * tp->S, sizes, &tp->plan));
    int64_t lo = h3s_sp_lo(&tp->plan), n = h3s_sp_rows(&tp->plan), Wr = tp->cos_t->shape[1];
    int64_t shape[2] = {n, Wr};
    H3S_TRY(h3s_tensor_alloc(&tp->cos_l, H3S_F32, 2, shape));
    H3S_TRY(h3s_tensor_alloc(&tp->sin_l, H3S_F32, 2, shape));
    for (int64_t i = 0; i < n; i++) {
        int64_t src = (lo + i) % tp->S;
        memcpy((float *)tp->cos_l.data + i * Wr, (const float *)tp->cos_t->data + src * Wr, (size_t)Wr * sizeof(float));
        memcpy((float *)tp->sin_l.data + i * Wr, (const float *)tp->sin_t->data + src * Wr, (size_t)Wr * sizeof(float));
    }
    tp->adaln_l = tp->adaln_rows;
    tp->adaln_l.owns_data = 0;
    tp->adaln_l.data = (int64_t *)tp->adaln_rows.data + lo;
    tp->adaln_l.shape[0] = n;
    return H3S_OK;
}

/* A node output held as this rank's part (its rows under sequence parallel, its columns under tensor parallel):
 * the hook sees the whole tensor, gathered (a copy), exactly what one process emits.  Without a hook nothing
 * moves. */
static h3s_status emit_par(run_ctx *r, h3s_tensor *local, int kind, int64_t W, int64_t S, const char *fmt, ...)
    H3S_PRINTF(6, 7);
static h3s_status emit_par(run_ctx *r, h3s_tensor *local, int kind, int64_t W, int64_t S, const char *fmt, ...) {
    if (!r->hook) return H3S_OK;
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const h3s_tape *tp = r->tp;
    const tp_geom *g = tp->m->tpg;
    h3s_tensor cols = {0}, rows = {0};
    const h3s_tensor *t = local;
    h3s_status st = H3S_OK;
    if (g && kind != COL_FULL) {
        int64_t unit = kind == COL_HEADS ? tp->m->cfg.attention_head_dim : 1;
        st = tp_gather_cols(g, local, kind, unit, W, &cols);
        t = &cols;
    }
    if (st == H3S_OK && tp->sp) {
        st = h3s_sp_allgather_rows(&tp->plan, t, &rows);
        t = &rows;
    }
    if (st == H3S_OK) st = call_hook(r, name, (h3s_tensor *)t, 1, S);
    h3s_tensor_free(&cols);
    h3s_tensor_free(&rows);
    return st;
}

/* dW of a block linear over this rank's rows: by owned tiles under sequence parallel, else the operator's own
 * fold over all rows. */
static h3s_status par_linear_dw(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *w, const h3s_tensor *dy,
                                h3s_tensor *dw) {
    if (!dw) return H3S_OK;
    if (tp->sp) return sp_linear_dw(tp, x, w, dy, dw);
    return h3s_linear_backward(x, w, dy, NULL, dw, NULL);
}

/* A linear whose reduction axis is split over the tensor-parallel ranks (o_proj over the heads, ffn_down over the FFN
 * width), forward on this rank's part: x (columns of layout kind, unit columns per bound unit, K in all) gathered
 * whole and kept on the tape (*x_full, for the backward), this rank's output columns against its weight rows w,
 * then every rank's columns into y.  Without tensor parallel, y = x w^T with w whole. */
static h3s_status par_hid_linear_forward(h3s_tape *tp, const h3s_tensor *x, int kind, int64_t unit, int64_t K,
                                         const h3s_tensor *w, h3s_tensor **x_full, h3s_tensor *y) {
    const tp_geom *g = tp->m->tpg;
    if (!g) return h3s_linear_forward(x, w, NULL, y);
    h3s_tensor *part;
    H3S_TRY(tp_gather_keep(tp, x, kind, unit, K, x_full));
    NEW(part, tp->m->act, y->shape[0], g->hid[g->rank + 1] - g->hid[g->rank]);
    H3S_TRY(h3s_linear_forward(*x_full, w, NULL, part));
    return tp_gather_into(g, part, COL_HID, 1, y->shape[1], y);
}

static h3s_status block_forward_par(run_ctx *r, int64_t i, h3s_tensor *x, block_acts *a, h3s_tensor **x_out) {
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    long long li = (long long)i;
    const tp_geom *g = m->tpg;
    const tp_block *tb = g ? &g->blocks[i] : NULL;
    int64_t S = tp->S, H = c->hidden_size, heads = c->num_attention_heads, Dh = c->attention_head_dim;
    int64_t HD = heads * Dh, F = c->ffn_dim;
    const par_part p = par_part_of(tp);
    int64_t M = p.M, lo = p.lo, hl = p.hl, HDl = hl * Dh, fl = p.fl;
    const h3s_tensor *idx = par_adaln_rows(tp), *cos_r = p.cos, *sin_r = p.sin;
    a->x_in = x;
    NEW(a->a_silu, m->act, tp->T, c->time_embed_dim);
    NEW(a->table, m->act, tp->T, 18 * H);
    if (g) {
        /* this rank's columns of the table, then every rank's (a copy) */
        h3s_tensor *part;
        NEW(part, m->act, tp->T, g->ada[g->rank + 1] - g->ada[g->rank]);
        H3S_TRY(h3s_adaln_projection_forward(tp->temb, &tb->ada, &tb->ada_b, a->a_silu, part));
        H3S_TRY(tp_gather_into(g, part, COL_ADA, 1, 18 * H, a->table));
    } else {
        H3S_TRY(h3s_adaln_projection_forward(tp->temb, &m->w[(&m->bp[li])->adaln_w], &m->w[(&m->bp[li])->adaln_b],
                                             a->a_silu, a->table));
    }
    H3S_TRY(emit(r, a->table, 0, 0, "block.%lld.adaln_projection", li));
    h3s_tensor table6 = view2(a->table, tp->T * 3, 6 * H);
    h3s_modulation mod1 = {&table6, idx, 0, 1}, mod2 = {&table6, idx, 3, 4};
    NEW(a->n1, m->act, M, H);
    H3S_TRY(h3s_rmsnorm_forward(x, &m->w[(&m->bp[li])->norm1], &mod1, c->norm_eps, a->n1));
    H3S_TRY(emit_par(r, a->n1, COL_FULL, H, S, "block.%lld.norm1", li));
    NEW(a->q, m->act, M, HDl);
    NEW(a->k, m->act, M, HDl);
    NEW(a->v, m->act, M, HDl);
    H3S_TRY(h3s_linear_forward(a->n1, g ? &tb->wq : &m->w[(&m->bp[li])->to[0]], NULL, a->q));
    H3S_TRY(emit_par(r, a->q, COL_HEADS, HD, S, "block.%lld.q_proj", li));
    H3S_TRY(h3s_linear_forward(a->n1, g ? &tb->wk : &m->w[(&m->bp[li])->to[1]], NULL, a->k));
    H3S_TRY(emit_par(r, a->k, COL_HEADS, HD, S, "block.%lld.k_proj", li));
    H3S_TRY(h3s_linear_forward(a->n1, g ? &tb->wv : &m->w[(&m->bp[li])->to[2]], NULL, a->v));
    H3S_TRY(emit_par(r, a->v, COL_HEADS, HD, S, "block.%lld.v_proj", li));
    NEW(a->qn, m->act, M, HDl);
    NEW(a->kn, m->act, M, HDl);
    H3S_TRY(h3s_head_rmsnorm_forward(a->q, hl, &m->w[(&m->bp[li])->norm_qk[0]], c->qk_norm_eps, a->qn));
    H3S_TRY(emit_par(r, a->qn, COL_HEADS, HD, S, "block.%lld.q_norm", li));
    H3S_TRY(h3s_head_rmsnorm_forward(a->k, hl, &m->w[(&m->bp[li])->norm_qk[1]], c->qk_norm_eps, a->kn));
    H3S_TRY(emit_par(r, a->kn, COL_HEADS, HD, S, "block.%lld.k_norm", li));
    NEW(a->qr, m->act, M, HDl);
    NEW(a->kr, m->act, M, HDl);
    H3S_TRY(h3s_rope_forward(a->qn, hl, cos_r, sin_r, a->qr));
    H3S_TRY(emit_par(r, a->qr, COL_HEADS, HD, S, "block.%lld.rope_q", li));
    H3S_TRY(h3s_rope_forward(a->kn, hl, cos_r, sin_r, a->kr));
    H3S_TRY(emit_par(r, a->kr, COL_HEADS, HD, S, "block.%lld.rope_k", li));
    NEW(a->att, m->act, M, HDl);
    NEW(a->stats, m->f32, M, hl * 2);
    h3s_tensor stats3 = h3s_block_stats_view(a->stats, hl);
    h3s_attn_mask mask = block_mask(tp, 0);
    if (tp->sp) {
        const h3s_tensor *kv_local[2] = {a->kr, a->v};
        h3s_tensor kv[2];
        int64_t kv_lo = 0;
        H3S_TRY(gather_items(tp, 2, kv_local, kv, &kv_lo));
        h3s_status st =
            h3s_attention_forward_rows(a->qr, &kv[0], &kv[1], tp->B, S, hl, &mask, lo, lo + M, kv_lo, a->att, &stats3);
        tensors_free(kv, 2);
        H3S_TRY(st);
    } else {
        H3S_TRY(h3s_attention_forward(a->qr, a->kr, a->v, tp->B, hl, &mask, a->att, &stats3));
    }
    H3S_TRY(emit_par(r, a->att, COL_HEADS, HD, S, "block.%lld.attention", li));
    NEW(a->o, m->act, M, H);
    /* o_proj sums over every head */
    H3S_TRY(par_hid_linear_forward(tp, a->att, COL_HEADS, Dh, HD, g ? &tb->wo : &m->w[(&m->bp[li])->to_out],
                                   &a->att_full, a->o));
    H3S_TRY(emit_par(r, a->o, COL_FULL, H, S, "block.%lld.o_proj", li));
    NEW(a->x1, m->act, M, H);
    H3S_TRY(h3s_residual_forward(x, a->o, &table6, idx, 2, a->x1));
    H3S_TRY(emit_par(r, a->x1, COL_FULL, H, S, "block.%lld.residual_attn", li));
    NEW(a->n2, m->act, M, H);
    H3S_TRY(h3s_rmsnorm_forward(a->x1, &m->w[(&m->bp[li])->norm2], &mod2, c->norm_eps, a->n2));
    H3S_TRY(emit_par(r, a->n2, COL_FULL, H, S, "block.%lld.norm2", li));
    NEW(a->u, m->act, M, 2 * fl);
    H3S_TRY(h3s_linear_forward(a->n2, g ? &tb->w0 : &m->w[(&m->bp[li])->ff_in], NULL, a->u));
    H3S_TRY(emit_par(r, a->u, COL_SWIGLU, 2 * F, S, "block.%lld.ffn_gate_up", li));
    NEW(a->h, m->act, M, fl);
    H3S_TRY(h3s_swiglu_forward(a->u, a->h));
    H3S_TRY(emit_par(r, a->h, COL_FFN, F, S, "block.%lld.swiglu", li));
    NEW(a->f, m->act, M, H);
    /* ffn_down sums over the whole inner width */
    H3S_TRY(
        par_hid_linear_forward(tp, a->h, COL_FFN, 1, F, g ? &tb->w2 : &m->w[(&m->bp[li])->ff_out], &a->h_full, a->f));
    H3S_TRY(emit_par(r, a->f, COL_FULL, H, S, "block.%lld.ffn_down", li));
    NEW(a->x2, m->act, M, H);
    H3S_TRY(h3s_residual_forward(a->x1, a->f, &table6, idx, 5, a->x2));
    H3S_TRY(emit_par(r, a->x2, COL_FULL, H, S, "block.%lld.residual_mlp", li));
    *x_out = a->x2;
    return H3S_OK;
}

/* Which block graph a block runs: a token-refiner block, a transformer block in this process, or a transformer
 * block's part on this rank (h3s_model_set_parallel). */
enum { BLK_REFINER, BLK_PLAIN, BLK_PAR };

static h3s_status run_block_forward(run_ctx *r, int kind, int64_t i, h3s_tensor *x, int64_t S, block_acts *a,
                                    h3s_tensor **x_out) {
    switch (kind) {
    case BLK_REFINER: return block_forward(r, 1, i, x, S, a, x_out);
    case BLK_PLAIN: return block_forward(r, 0, i, x, S, a, x_out);
    default: return block_forward_par(r, i, x, a, x_out);
    }
}

/* Sequence parallel: this rank's slice of the packed rows of `full`, as a view the tape's arena holds. */
static h3s_status sp_local_rows(h3s_tape *tp, h3s_tensor *full, h3s_tensor **out) {
    h3s_tensor view = rows_view(full, h3s_sp_lo(&tp->plan), h3s_sp_rows(&tp->plan));
    *out = arena_adopt(&tp->ar, &view);
    return *out ? H3S_OK : H3S_ERR_NOMEM;
}

/* Sequence parallel: every rank's slice gathered into the full packed rows, held by the tape's arena. */
static h3s_status sp_all_rows(h3s_tape *tp, const h3s_tensor *local, h3s_tensor **out) {
    h3s_tensor full;
    H3S_TRY(h3s_sp_allgather_rows(&tp->plan, local, &full));
    *out = arena_adopt(&tp->ar, &full);
    if (*out) return H3S_OK;
    h3s_tensor_free(&full);
    return H3S_ERR_NOMEM;
}

/* A block's forward as the tape keeps it.  Without recomputation every activation stays on the tape.  With
 * H3S_RECOMPUTE_BLOCKS the block runs into a scratch arena, its output moves to the tape (the next block's input)
 * and the rest is released: the block keeps only a->x_in.  The shared tensors (rope tables, temb, index tensors)
 * are the tape's own and stay. */
static h3s_status block_forward_kept(run_ctx *r, int kind, int64_t i, h3s_tensor *x, int64_t S, block_acts *a,
                                     h3s_tensor **x_out) {
    h3s_tape *tp = r->tp;
    if (tp->recompute == H3S_RECOMPUTE_NONE) return run_block_forward(r, kind, i, x, S, a, x_out);
    arena keep = tp->ar;
    tp->ar = arena_empty(&keep);
    h3s_status st = run_block_forward(r, kind, i, x, S, a, x_out);
    arena scratch = tp->ar;
    tp->ar = keep;
    if (st == H3S_OK) st = arena_move(&scratch, *x_out, &tp->ar);
    arena_free(&scratch);
    memset(a, 0, sizeof *a);
    a->x_in = x;
    return st;
}

/* Host index tensors shared by every node of a pass. */
static h3s_status build_indices(h3s_tape *tp, const h3s_inputs *in) {
    int64_t B = tp->B, S = tp->S;
    int64_t s1[1] = {B * S};
    H3S_TRY(h3s_tensor_alloc(&tp->adaln_rows, H3S_I64, 1, s1));
    H3S_TRY(h3s_tensor_alloc(&tp->ts_rows, H3S_I64, 1, s1));
    const int64_t *tsi = in->timestep_indices.data, *tags = in->token_tags.data;
    int64_t *ar = tp->adaln_rows.data, *tr = tp->ts_rows.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++) {
            ar[b * S + s] = tsi[s] * 3 + (tags[s] > 0 ? tags[s] : 0);
            tr[b * S + s] = tsi[s];
        }
    int64_t sS[1] = {S};
    H3S_TRY(h3s_tensor_alloc(&tp->doc, H3S_I64, 1, sS));
    int64_t *doc = tp->doc.data;
    for (int64_t s = 0; s < S; s++) {
        doc[s] = tags[s] == -1 ? 1 : 0;
        tp->has_doc |= tags[s] == -1;
    }
    if (in->attention_mask.data) {
        int64_t s2[2] = {B, S};
        H3S_TRY(h3s_tensor_alloc(&tp->key_valid, H3S_BOOL, 2, s2));
        memcpy(tp->key_valid.data, in->attention_mask.data, (size_t)(B * S));
        tp->has_mask = 1;
        /* the refiner attends over the text rows only: the same mask, gathered at text_indices */
        int64_t Nt = in->text_indices.shape[0], st2[2] = {B, Nt};
        H3S_TRY(h3s_tensor_alloc(&tp->text_key_valid, H3S_BOOL, 2, st2));
        const int64_t *ti = in->text_indices.data;
        const uint8_t *kv = tp->key_valid.data;
        uint8_t *tk = tp->text_key_valid.data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Nt; j++)
                tk[b * Nt + j] = kv[b * S + ti[j]];
    }
    const h3s_tensor *src[3] = {&in->video_indices, &in->audio_indices, &in->text_indices};
    h3s_tensor *dst[3] = {&tp->video_idx, &tp->audio_idx, &tp->text_idx};
    for (int k = 0; k < 3; k++) {
        H3S_TRY(h3s_tensor_alloc(dst[k], H3S_I64, 1, src[k]->shape));
        if (src[k]->shape[0]) memcpy(dst[k]->data, src[k]->data, (size_t)src[k]->shape[0] * 8);
    }
    return H3S_OK;
}

static h3s_status upload_input(h3s_tape *tp, const h3s_tensor *host, h3s_dtype dt, int64_t rows, int64_t cols,
                               h3s_tensor **out) {
    h3s_tensor t;
    H3S_TRY(to_backend(tp->m, host, dt, rows, cols, 1, &t));
    *out = arena_adopt(&tp->ar, &t);
    if (!*out) {
        backend_free(tp->m, &t);
        return H3S_ERR_NOMEM;
    }
    return H3S_OK;
}

/* The forward's output into a caller's tensor of its dtype and element count (h3s_model_forward_into): device memory
 * of a CUDA model (a stream-ordered copy) or host memory. */
static h3s_status copy_out(const h3s_tensor *t, h3s_tensor *out) {
    if (out->device) return h3s_cuda_copy(t, out);
    if (t->device) return h3s_cuda_download(t, out);
    return h3s_tensor_convert(t, out);
}

static h3s_status model_forward(run_ctx *r, const h3s_inputs *in, int into, h3s_tensor *sample,
                                h3s_tensor *audio_sample) {
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    int64_t B = tp->B, S = tp->S, Nv = tp->Nv, Na = tp->Na, Nt = tp->Nt, T = tp->T, H = c->hidden_size;
    int64_t Wv = h3s_config_video_width(c), Wa = c->audio_in_channels;
    H3S_TRY(build_indices(tp, in));

    /* rope table */
    NEW(tp->cos_t, m->f32, S, 6 * c->rope_freq_dim);
    NEW(tp->sin_t, m->f32, S, 6 * c->rope_freq_dim);
    h3s_tensor pos;
    if (m->device) {
        h3s_tensor *p;
        H3S_TRY(upload_input(tp, &in->position_ids, in->position_ids.dtype, S, 3, &p));
        pos = *p;
    } else {
        pos = in->position_ids;
        if (m->kind == H3S_BACKEND_GOLDEN && pos.dtype != H3S_F64) {
            h3s_tensor *p;
            H3S_TRY(upload_input(tp, &in->position_ids, H3S_F64, S, 3, &p));
            pos = *p;
        }
    }
    H3S_TRY(h3s_rope_table_prechecked(&pos, c->rope_freq_dim, c->rope_theta, tp->cos_t, tp->sin_t));
    H3S_TRY(emit(r, tp->cos_t, 0, 0, "rope_table"));

    /* timestep embedding */
    h3s_tensor *tstep;
    H3S_TRY(upload_input(tp, &in->timestep, m->f32, T, 1, &tstep));
    h3s_tensor tvec = *tstep;
    tvec.ndim = 1;
    NEW(tp->feats, m->f32, T, c->freq_dim);
    H3S_TRY(h3s_timestep_sinusoid_forward_prechecked(&tvec, c->freq_dim, tp->feats));
    H3S_TRY(emit(r, tp->feats, 0, 0, "timestep_sinusoid"));
    NEW(tp->mlp_hidden, m->f32, T, c->time_embed_hidden_dim);
    NEW(tp->temb, m->f32, T, c->time_embed_dim);
    H3S_TRY(h3s_timestep_mlp_forward(tp->feats, gweight(m, GP_TIME_EMBEDDER_LINEAR_1_WEIGHT),
                                     gweight(m, GP_TIME_EMBEDDER_LINEAR_1_BIAS),
                                     gweight(m, GP_TIME_EMBEDDER_LINEAR_2_WEIGHT),
                                     gweight(m, GP_TIME_EMBEDDER_LINEAR_2_BIAS), tp->mlp_hidden, tp->temb));
    H3S_TRY(emit(r, tp->temb, 0, 0, "timestep_mlp"));

    /* input projections */
    H3S_TRY(upload_input(tp, &in->hidden_states, m->f32, B * Nv, Wv, &tp->hv));
    H3S_TRY(upload_input(tp, &in->audio_hidden_states, m->f32, B * Na, Wa, &tp->ha));
    H3S_TRY(upload_input(tp, &in->encoder_hidden_states, m->act, B * Nt, c->text_dim, &tp->enc));
    NEW(tp->video_emb, m->f32, B * Nv, H);
    H3S_TRY(h3s_linear_forward(tp->hv, gweight(m, GP_PROJ_IN_WEIGHT), gweight(m, GP_PROJ_IN_BIAS), tp->video_emb));
    H3S_TRY(emit(r, tp->video_emb, 1, Nv, "proj_in"));
    NEW(tp->audio_emb, m->f32, B * Na, H);
    H3S_TRY(h3s_linear_forward(tp->ha, gweight(m, GP_AUDIO_PROJ_IN_WEIGHT), gweight(m, GP_AUDIO_PROJ_IN_BIAS),
                               tp->audio_emb));
    H3S_TRY(emit(r, tp->audio_emb, 1, Na, "audio_proj_in"));
    NEW(tp->text_emb, m->act, B * Nt, H);
    H3S_TRY(h3s_linear_forward(tp->enc, gweight(m, GP_CONTEXT_EMBEDDER_WEIGHT), gweight(m, GP_CONTEXT_EMBEDDER_BIAS),
                               tp->text_emb));
    H3S_TRY(emit(r, tp->text_emb, 1, Nt, "context_embedder"));

    /* token refiner over the text rows */
    h3s_tensor *x = tp->text_emb;
    for (int64_t i = 0; i < c->num_refiner_layers; i++)
        H3S_TRY(block_forward_kept(r, BLK_REFINER, i, x, Nt, &tp->refiner[i], &x));
    tp->text_pre_final = x;
    NEW(tp->text_final, m->act, B * Nt, H);
    H3S_TRY(h3s_rmsnorm_forward(x, gweight(m, GP_TOKEN_REFINER_FINAL_NORM_WEIGHT), NULL, c->final_norm_eps,
                                tp->text_final));
    H3S_TRY(emit(r, tp->text_final, 1, Nt, "refiner.final_norm"));

    /* pack */
    NEW(tp->packed, m->act, B * S, H);
    H3S_TRY(h3s_rows_scatter(tp->text_final, &tp->text_idx, B, tp->packed));
    H3S_TRY(h3s_rows_scatter(tp->video_emb, &tp->video_idx, B, tp->packed));
    H3S_TRY(h3s_rows_scatter(tp->audio_emb, &tp->audio_idx, B, tp->packed));
    H3S_TRY(emit(r, tp->packed, 1, S, "pack"));

    x = tp->packed;
    if (tp->sp) {
        /* this rank's slice through every block, then the whole residual stream again (a copy) */
        H3S_TRY(sp_prepare(tp));
        H3S_TRY(sp_local_rows(tp, tp->packed, &x));
        for (int64_t i = 0; i < c->num_layers; i++)
            H3S_TRY(block_forward_kept(r, BLK_PAR, i, x, S, &tp->blocks[i], &x));
        H3S_TRY(sp_all_rows(tp, x, &x));
    } else if (tp->tpar) {
        for (int64_t i = 0; i < c->num_layers; i++)
            H3S_TRY(block_forward_kept(r, BLK_PAR, i, x, S, &tp->blocks[i], &x));
    } else {
        for (int64_t i = 0; i < c->num_layers; i++)
            H3S_TRY(block_forward_kept(r, BLK_PLAIN, i, x, S, &tp->blocks[i], &x));
    }
    tp->x_last = x;

    /* output norm and heads */
    NEW(tp->a_out, m->act, T, c->time_embed_dim);
    NEW(tp->table_out, m->act, T, 2 * H);
    H3S_TRY(h3s_adaln_projection_forward(tp->temb, gweight(m, GP_NORM_OUT_LINEAR_WEIGHT),
                                         gweight(m, GP_NORM_OUT_LINEAR_BIAS), tp->a_out, tp->table_out));
    NEW(tp->y, m->f32, B * S, H);
    H3S_TRY(h3s_final_norm_forward(x, gweight(m, GP_NORM_OUT_NORM_WEIGHT), tp->table_out, &tp->ts_rows,
                                   c->final_norm_eps, tp->y));
    H3S_TRY(emit(r, tp->y, 1, S, "norm_out"));
    NEW(tp->yv, m->f32, B * Nv, H);
    NEW(tp->ya, m->f32, B * Na, H);
    H3S_TRY(h3s_rows_gather(tp->y, &tp->video_idx, B, tp->yv));
    H3S_TRY(h3s_rows_gather(tp->y, &tp->audio_idx, B, tp->ya));
    h3s_tensor *sv, *sa;
    NEW(sv, m->f32, B * Nv, Wv);
    NEW(sa, m->f32, B * Na, Wa);
    H3S_TRY(h3s_linear_forward(tp->yv, gweight(m, GP_PROJ_OUT_WEIGHT), gweight(m, GP_PROJ_OUT_BIAS), sv));
    H3S_TRY(emit(r, sv, 1, Nv, "proj_out"));
    H3S_TRY(h3s_linear_forward(tp->ya, gweight(m, GP_AUDIO_PROJ_OUT_WEIGHT), gweight(m, GP_AUDIO_PROJ_OUT_BIAS), sa));
    H3S_TRY(emit(r, sa, 1, Na, "audio_proj_out"));
    if (into) {
        H3S_TRY(copy_out(sv, sample));
        return copy_out(sa, audio_sample);
    }
    H3S_TRY(to_host(sv, sample));
    h3s_status st = to_host(sa, audio_sample);
    if (st != H3S_OK) {
        h3s_tensor_free(sample);
        return st;
    }
    sample->ndim = 3;
    sample->shape[0] = B;
    sample->shape[1] = Nv;
    sample->shape[2] = Wv;
    audio_sample->ndim = 3;
    audio_sample->shape[0] = B;
    audio_sample->shape[1] = Na;
    audio_sample->shape[2] = Wa;
    return H3S_OK;
}

static h3s_status forward_validated(h3s_model *m, const h3s_inputs *in, const h3s_inputs *caller, h3s_node_hook hook,
                                    void *hook_ctx, h3s_tape **tape, int into, h3s_tensor *sample,
                                    h3s_tensor *audio_sample);

static h3s_status forward_entry(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx, h3s_tape **tape,
                                int into, h3s_tensor *sample, h3s_tensor *audio_sample) {
    if (!m || !in || !sample || !audio_sample) return h3s_fail(H3S_ERR_INVALID, "model_forward: NULL argument");
    /* Validate and use private copies of the integer inputs, the positions and the timesteps, so what is checked is
     * exactly what is dereferenced or uploaded even if the caller's memory (a file mapping, a tensor another thread
     * writes) changes meanwhile: the device rope table and timestep sinusoid take these values as checked
     * (h3s_rope_table_prechecked, h3s_timestep_sinusoid_forward_prechecked). */
    enum { N_COPIES = 8 };
    h3s_inputs local = *in;
    h3s_tensor copies[N_COPIES];
    memset(copies, 0, sizeof copies);
    h3s_tensor *fields[N_COPIES] = {&local.timestep_indices, &local.token_tags,   &local.video_indices,
                                    &local.audio_indices,    &local.text_indices, &local.attention_mask,
                                    &local.position_ids,     &local.timestep};
    h3s_status cst = H3S_OK;
    for (int k = 0; k < N_COPIES && cst == H3S_OK; k++) {
        /* a tensor with no data or bad extents or dims (nbytes 0) is left for h3s_inputs_validate to refuse by name */
        if (!fields[k]->data || !h3s_tensor_nbytes(fields[k])) continue;
        if (fields[k]->device) {
            cst = h3s_fail(H3S_ERR_INVALID, "model_forward: inputs must be host tensors");
            break;
        }
        cst = h3s_tensor_alloc(&copies[k], fields[k]->dtype, fields[k]->ndim, fields[k]->shape);
        if (cst == H3S_OK) {
            if (h3s_tensor_nbytes(fields[k])) memcpy(copies[k].data, fields[k]->data, h3s_tensor_nbytes(fields[k]));
            *fields[k] = copies[k];
        }
    }
    h3s_status st = cst;
    if (st == H3S_OK) st = forward_validated(m, &local, in, hook, hook_ctx, tape, into, sample, audio_sample);
    for (int k = 0; k < N_COPIES; k++)
        h3s_tensor_free(&copies[k]);
    return st;
}

h3s_status h3s_model_forward(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx, h3s_tape **tape,
                             h3s_tensor *sample, h3s_tensor *audio_sample) {
    return forward_entry(m, in, hook, hook_ctx, tape, 0, sample, audio_sample);
}

h3s_status h3s_model_forward_into(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx,
                                  h3s_tape **tape, h3s_tensor *sample, h3s_tensor *audio_sample) {
    return forward_entry(m, in, hook, hook_ctx, tape, 1, sample, audio_sample);
}

/* A caller's output tensor for h3s_model_forward_into: the forward's dtype and shape, host memory or (CUDA model)
 * device memory of the library's device, apart from every input and from the other output.  `in` is the caller's
 * inputs as given (not the forward's private copies of the integer inputs: an output over the caller's token_tags
 * must be refused too). */
static h3s_status check_output(const h3s_model *m, const char *name, const h3s_tensor *t, int64_t B, int64_t N,
                               int64_t W, const h3s_inputs *in, const h3s_tensor *other) {
    if (t->dtype != m->f32)
        return h3s_fail(H3S_ERR_DTYPE, "model_forward_into: %s is %s, expected %s", name, h3s_dtype_name(t->dtype),
                        h3s_dtype_name(m->f32));
    if (t->ndim != 3 || t->shape[0] != B || t->shape[1] != N || t->shape[2] != W)
        return h3s_fail(H3S_ERR_SHAPE, "model_forward_into: %s must be [%lld, %lld, %lld]", name, (long long)B,
                        (long long)N, (long long)W);
    if (h3s_tensor_nbytes(t) && !t->data) return h3s_fail(H3S_ERR_INVALID, "model_forward_into: %s has no data", name);
    if (t->device) {
        if (!m->device)
            return h3s_fail(H3S_ERR_DEVICE, "model_forward_into: %s is a device tensor, but the model runs on the host",
                            name);
        return h3s_cuda_check_tensor(name, t);
    }
    for (int k = 0; k < N_INPUT_FIELDS; k++)
        if (h3s_tensors_overlap(t, input_field_c(in, k)))
            return h3s_fail(H3S_ERR_INVALID, "model_forward_into: %s overlaps the input %s", name,
                            INPUT_FIELDS[k].name);
    if (h3s_tensors_overlap(t, other))
        return h3s_fail(H3S_ERR_INVALID, "model_forward_into: sample and audio_sample overlap");
    return H3S_OK;
}

static h3s_status forward_validated(h3s_model *m, const h3s_inputs *in, const h3s_inputs *caller, h3s_node_hook hook,
                                    void *hook_ctx, h3s_tape **tape, int into, h3s_tensor *sample,
                                    h3s_tensor *audio_sample) {
    int64_t B;
    H3S_TRY(finish_pending(m, into ? "model_forward_into" : "model_forward"));
    H3S_TRY(h3s_inputs_validate(&m->cfg, in, &B));
    if (into) {
        H3S_TRY(check_output(m, "sample", sample, B, in->hidden_states.shape[1], h3s_config_video_width(&m->cfg),
                             caller, audio_sample));
        H3S_TRY(check_output(m, "audio_sample", audio_sample, B, in->audio_hidden_states.shape[1],
                             m->cfg.audio_in_channels, caller, sample));
    }
    h3s_tape *tp = h3s_calloc(1, sizeof *tp);
    if (!tp) return H3S_ERR_NOMEM;
    tp->m = m;
    tp->ar.m = m;
    tp->ar.meter = m->meter;
    m->meter->refs++;
    tp->recompute = m->recompute;
    tp->B = B;
    tp->S = in->position_ids.shape[0];
    tp->Nv = in->hidden_states.shape[1];
    tp->Na = in->audio_hidden_states.shape[1];
    tp->Nt = in->encoder_hidden_states.shape[1];
    tp->T = in->timestep.shape[0];
    memcpy(tp->in_shape_v, in->hidden_states.shape, sizeof tp->in_shape_v);
    memcpy(tp->in_shape_a, in->audio_hidden_states.shape, sizeof tp->in_shape_a);
    memcpy(tp->in_shape_t, in->encoder_hidden_states.shape, sizeof tp->in_shape_t);
    tp->sp = m->spc != NULL;
    tp->tpar = m->tpg != NULL;
    tp->par_gen = m->par_gen;
    tp->refiner = h3s_calloc((size_t)(m->cfg.num_refiner_layers + 1), sizeof *tp->refiner);
    tp->blocks = h3s_calloc((size_t)(m->cfg.num_layers + 1), sizeof *tp->blocks);
    if (!tp->refiner || !tp->blocks) {
        h3s_tape_free(tp);
        return H3S_ERR_NOMEM;
    }
    run_ctx r = {tp, hook, hook_ctx};
    /* h3s_model_forward: the outputs are built here and handed to the caller only on success (a failing pass, a hook's
     * refusal included, leaves the caller's structs as they were); h3s_model_forward_into writes the caller's own
     * tensors, whose contents are unspecified after an error */
    h3s_tensor s_new, a_new;
    memset(&s_new, 0, sizeof s_new);
    memset(&a_new, 0, sizeof a_new);
    h3s_tensor *s_out = into ? sample : &s_new, *a_out = into ? audio_sample : &a_new;
    h3s_status st = model_forward(&r, in, into, s_out, a_out);
    if (st == H3S_OK && m->device) st = h3s_cuda_sync();
    if (st != H3S_OK) {
        h3s_tensor_free(&s_new);
        h3s_tensor_free(&a_new);
        h3s_tape_free(tp);
        return st;
    }
    if (!into) {
        *sample = s_new;
        *audio_sample = a_new;
    }
    if (tape)
        *tape = tp;
    else
        h3s_tape_free(tp);
    return H3S_OK;
}

/* ------------------------------------------------------------------ backward ---------- */

typedef struct grad_ctx {
    run_ctx r;
    h3s_tensor *pg; /* parameter gradients in backend memory, spec order */
    h3s_tensor *dtemb;
    h3s_tensor *d_hv, *d_ha, *d_enc; /* input gradients in backend memory */
    const unsigned char *want;       /* NULL: every parameter gradient; else want[i] selects parameter i */
} grad_ctx;

/* The gradient of parameter `i` (spec order, a resolved block_params index), or NULL when not requested. */
static h3s_tensor *pgi(grad_ctx *g, int64_t i) { return g->want && !g->want[i] ? NULL : &g->pg[i]; }

/* The gradient of a parameter outside the blocks, or NULL when not requested (or the config has none). */
static h3s_tensor *gpgrad(grad_ctx *g, int k) {
    const int64_t i = g->r.tp->m->gp[k];
    return i < 0 ? NULL : pgi(g, i);
}

/* dtemb += contribution.  The first contribution is adopted: it is norm_out's, which lives in the backward's own
 * arena until the backward ends; a block's contribution lives in the block's scratch arena (block_backward_kept)
 * and is only ever added. */
static h3s_status accumulate_dtemb(grad_ctx *g, h3s_tensor *contrib) {
    if (!g->dtemb) {
        g->dtemb = contrib;
        return H3S_OK;
    }
    return h3s_grad_add(g->dtemb, contrib, g->dtemb);
}

static h3s_status block_backward(grad_ctx *g, int refiner, int64_t i, int64_t S, block_acts *a, h3s_tensor *dx2,
                                 h3s_tensor **dx_out) {
    run_ctx *r = &g->r;
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    int64_t B = tp->B, M = B * S, H = c->hidden_size, heads = c->num_attention_heads;
    int64_t HD = heads * c->attention_head_dim, F = c->ffn_dim;
    h3s_dtype gd = m->grad;
    h3s_block_bwd d = {.dout = dx2};
    const h3s_block_weights *bw = refiner ? &m->rbw[i] : &m->bw[i];
    h3s_block_fwd f = block_fwd_of(a);
    /* du rounded to BF16 by the SwiGLU backward in the same pass, the gate/up linear's gradient operand on the GPU
     * (BF16 activations, BF16 operands); elsewhere the linear computes from du itself.  Likewise df, dout_o, dq, dk,
     * and dv (by attention's backward).  Where the linear reads the BF16 copy alone and no node hook wants the F32
     * gradient, the F32 one is neither allocated nor written (h3s_block_lean_grads): the same bits everywhere else. */
    const int rounded =
        m->device && a->u && a->u->dtype == H3S_BF16 && h3s_get_grad_operands() == H3S_GRAD_OPERANDS_BF16;
    const int lean = rounded && !r->hook ? h3s_block_lean_grads(bw, &f) : 0;
    if (!refiner) NEW(d.dtable, gd, tp->T, 18 * H);
    NEW_OUT(d.dx1a, gd, M, H);
    if (!(lean & H3S_BLOCK_LEAN_DF)) NEW_OUT(d.df, gd, M, H);
    NEW_OUT(d.dh, gd, M, F);
    if (!(lean & H3S_BLOCK_LEAN_DU)) NEW_OUT(d.du, gd, M, 2 * F);
    if (rounded) {
        NEW_OUT(d.du_bf16, H3S_BF16, M, 2 * F);
        NEW_OUT(d.df_bf16, H3S_BF16, M, H);
        NEW_OUT(d.dout_o_bf16, H3S_BF16, M, H);
    }
    NEW_OUT(d.dn2, gd, M, H);
    NEW_OUT(d.dx1, gd, M, H);
    NEW_OUT(d.dxa, gd, M, H);
    if (!(lean & H3S_BLOCK_LEAN_DOUT_O)) NEW_OUT(d.dout_o, gd, M, H);
    NEW_OUT(d.datt, gd, M, HD);
    NEW(d.dqa, gd, M, HD);
    NEW(d.dka, gd, M, HD);
    if (!(lean & H3S_BLOCK_LEAN_DV)) NEW(d.dv, gd, M, HD);
    if (rounded) NEW(d.dv_bf16, H3S_BF16, M, HD); /* dv rounded by attention's backward, for v_proj's */
    if (!refiner) {
        NEW_OUT(d.dqn, gd, M, HD);
        NEW_OUT(d.dkn, gd, M, HD);
    }
    if (!(lean & H3S_BLOCK_LEAN_DQ)) NEW_OUT(d.dq, gd, M, HD);
    if (!(lean & H3S_BLOCK_LEAN_DK)) NEW_OUT(d.dk, gd, M, HD);
    if (rounded) { /* dq and dk likewise, by the per-head norms' backward */
        NEW_OUT(d.dq_bf16, H3S_BF16, M, HD);
        NEW_OUT(d.dk_bf16, H3S_BF16, M, HD);
    }
    NEW_OUT(d.dn1, gd, M, H);
    d.dn1q = d.dn1; /* q_proj's dx is written into the sum, which then runs in place */
    NEW_OUT(d.dn1k, gd, M, H);
    NEW_OUT(d.dn1v, gd, M, H);
    NEW_OUT(d.dx, gd, M, H);
    if (!refiner) NEW_OUT(d.dtemb, gd, tp->T, c->time_embed_dim);
    const block_params *bp = refiner ? &m->rbp[i] : &m->bp[i];
    h3s_block_grads pg = {.norm1 = pgi(g, bp->norm1),
                          .norm2 = pgi(g, bp->norm2),
                          .to_q = pgi(g, bp->to[0]),
                          .to_k = pgi(g, bp->to[1]),
                          .to_v = pgi(g, bp->to[2]),
                          .norm_q = pgi(g, bp->norm_qk[0]),
                          .norm_k = pgi(g, bp->norm_qk[1]),
                          .to_out = pgi(g, bp->to_out),
                          .ff_in = pgi(g, bp->ff_in),
                          .ff_out = pgi(g, bp->ff_out)};
    if (!refiner) {
        pg.adaln_w = pgi(g, bp->adaln_w);
        pg.adaln_b = pgi(g, bp->adaln_b);
    }
    block_emit e = {r, refiner ? "refiner" : "block", (long long)i, S, d.dtemb};
    h3s_attn_mask mask = block_mask(tp, refiner);
    h3s_block_ctx bc = block_ctx(tp, refiner, &mask, &e);
    H3S_TRY(h3s_block_backward(bw, &bc, &f, &d, &pg));
    if (!refiner) H3S_TRY(accumulate_dtemb(g, d.dtemb));
    *dx_out = d.dx;
    return H3S_OK;
}

/* The backward of a block's node on this rank's part: the row-wise gradients on its rows, then the cross-row sums
 * by owned tiles under sequence parallel, else by the operator's own fold.  A gated residual: dx and dbranch, then
 * the gate's table gradient. */
static h3s_status par_residual_backward(const h3s_tape *tp, const h3s_tensor *y, const h3s_tensor *dout,
                                        const h3s_tensor *table6, int chunk, h3s_tensor *dx, h3s_tensor *dbranch,
                                        h3s_tensor *dtable6) {
    H3S_TRY(h3s_residual_backward(y, table6, par_adaln_rows(tp), chunk, dout, dx, dbranch, NULL));
    if (!tp->sp) return h3s_residual_backward(y, table6, &tp->adaln_rows, chunk, dout, NULL, NULL, dtable6);
    tile_op res = {TILE_RESIDUAL, tp, NULL, table6, 0, 0, chunk, 0, 0, 0};
    h3s_sp_sum gate = table_sum(tp, dtable6, chunk, chunk, 1);
    return tile_sums(&res, y, dout, &gate, 1);
}

/* An AdaLN-modulated RMSNorm (shift and scale chunks of table6): dx, then the weight's and the table's gradients. */
static h3s_status par_norm_backward(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *w,
                                    const h3s_tensor *table6, int shift, int scale, double eps, const h3s_tensor *dy,
                                    h3s_tensor *dx, h3s_tensor *dw, h3s_tensor *dtable6) {
    h3s_modulation rows = {table6, par_adaln_rows(tp), shift, scale};
    H3S_TRY(h3s_rmsnorm_backward(x, w, &rows, eps, dy, dx, NULL, NULL));
    if (!tp->sp) {
        h3s_modulation mod = {table6, &tp->adaln_rows, shift, scale};
        return h3s_rmsnorm_backward(x, w, &mod, eps, dy, NULL, dw, dtable6);
    }
    tile_op o = {TILE_NORM, tp, w, table6, 0, eps, 0, shift, scale, dw != NULL};
    h3s_sp_sum sums[2];
    int ns = 0;
    if (dw) sums[ns++] = whole_sum(dw);
    sums[ns++] = table_sum(tp, dtable6, shift, scale, 2);
    return tile_sums(&o, x, dy, sums, ns);
}

static h3s_status par_head_norm_dw(const h3s_tape *tp, const h3s_tensor *x, int64_t heads, const h3s_tensor *w,
                                   double eps, const h3s_tensor *dy, h3s_tensor *dw) {
    if (!dw) return H3S_OK;
    if (!tp->sp) return h3s_head_rmsnorm_backward(x, heads, w, eps, dy, NULL, dw);
    tile_op o = {TILE_HEAD_NORM, tp, w, NULL, heads, eps, 0, 0, 0, 1};
    h3s_sp_sum sum = whole_sum(dw);
    return tile_sums(&o, x, dy, &sum, 1);
}

/* A tensor-parallel weight gradient: this rank's rows (dw_local, from fn's inputs) computed over its rows of the
 * sequence, then every rank's rows into the whole gradient `dst` (NULL: not requested, nothing computed). */
static h3s_status par_slice_dw(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *w_slice, const h3s_tensor *dy,
                               int kind, h3s_tensor *dst) {
    int64_t unit = kind == COL_HEADS ? tp->m->cfg.attention_head_dim : 1;
    if (!dst) return H3S_OK;
    h3s_tensor local = {0};
    H3S_TRY(h3s_tensor_alloc(&local, H3S_F32, 2, w_slice->shape));
    h3s_status st = par_linear_dw(tp, x, w_slice, dy, &local);
    if (st == H3S_OK) st = tp_gather_rows(tp->m->tpg, &local, kind, unit, dst);
    h3s_tensor_free(&local);
    return st;
}

/* A block linear's backward on this rank's rows, its weight whole: dx row by row, dW as par_linear_dw. */
static h3s_status par_linear_backward(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *w,
                                      const h3s_tensor *dy, h3s_tensor *dx, h3s_tensor *dw) {
    H3S_TRY(h3s_linear_backward(x, w, dy, dx, NULL, NULL));
    return par_linear_dw(tp, x, w, dy, dw);
}

/* par_hid_linear_forward's backward under tensor parallel: dx, this rank's columns of x, from every output column of
 * dy (whole) against the weight's columns w_cols; the gradient of its weight rows w_rows from dy's columns of its
 * range against the whole input x_full (dw NULL: not requested). */
static h3s_status tp_hid_linear_backward(const h3s_tape *tp, const h3s_tensor *x, const h3s_tensor *x_full,
                                         const h3s_tensor *w_rows, const h3s_tensor *w_cols, const h3s_tensor *dy,
                                         h3s_tensor *dx, h3s_tensor *dw) {
    const tp_geom *g = tp->m->tpg;
    H3S_TRY(dgrad(dy, w_cols, dx, x));
    if (!dw) return H3S_OK;
    h3s_tensor dyc;
    H3S_TRY(cols_of(dy, g->hid[g->rank], g->hid[g->rank + 1], &dyc));
    h3s_status st = par_slice_dw(tp, x_full, w_rows, &dyc, COL_HID, dw);
    h3s_tensor_free(&dyc);
    return st;
}

/* A transformer block's backward on this rank's part (h3s_model_set_parallel): row-wise gradients on its rows,
 * attention over the gathered rows of its items, input gradients of the tensor-parallel GEMMs by output columns
 * over the whole reduction axis, every cross-row sum by owned tiles. */
static h3s_status block_backward_par(grad_ctx *g, int64_t i, block_acts *a, h3s_tensor *dx2, h3s_tensor **dx_out) {
    run_ctx *r = &g->r;
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    long long li = (long long)i;
    const tp_geom *tg = m->tpg;
    const tp_block *tb = tg ? &tg->blocks[i] : NULL;
    int64_t S = tp->S, H = c->hidden_size, heads = c->num_attention_heads, Dh = c->attention_head_dim;
    int64_t HD = heads * Dh, F = c->ffn_dim, E = c->time_embed_dim;
    const par_part p = par_part_of(tp);
    int64_t M = p.M, lo = p.lo, hl = p.hl, HDl = hl * Dh, fl = p.fl, cl = p.cl;
    const h3s_tensor *cos_r = p.cos, *sin_r = p.sin;
    h3s_dtype gd = m->grad;
    h3s_tensor table6 = view2(a->table, tp->T * 3, 6 * H), *dtable, dtable6;
    NEW(dtable, gd, tp->T, 18 * H);
    dtable6 = view2(dtable, tp->T * 3, 6 * H);

    h3s_tensor *dx1a, *df, *dh, *du, *dn2, *dx1b, *dx1, *dxa, *dout_o, *datt, *dqa, *dka, *dv, *dqn, *dkn, *dq, *dk;
    h3s_tensor *dn1, *dn1k, *dn1v, *dxb, *dx;
    NEW(dx1a, gd, M, H);
    NEW(df, gd, M, H);
    H3S_TRY(par_residual_backward(tp, a->f, dx2, &table6, 5, dx1a, df, &dtable6));
    H3S_TRY(emit_par(r, df, COL_FULL, H, S, "block.%lld.residual_mlp.grad", li));
    NEW(dh, gd, M, fl);
    if (tg) {
        /* dh of this rank's FFN columns: every output column of ffn_down (df is whole) against its weight columns */
        H3S_TRY(tp_hid_linear_backward(tp, a->h, a->h_full, &tb->w2, &tb->w2_c, df, dh, pgi(g, (&m->bp[li])->ff_out)));
    } else {
        H3S_TRY(par_linear_backward(tp, a->h, &m->w[(&m->bp[li])->ff_out], df, dh, pgi(g, (&m->bp[li])->ff_out)));
    }
    H3S_TRY(emit_par(r, dh, COL_FFN, F, S, "block.%lld.ffn_down.grad", li));
    NEW(du, gd, M, 2 * fl);
    H3S_TRY(h3s_swiglu_backward(a->u, dh, du));
    H3S_TRY(emit_par(r, du, COL_SWIGLU, 2 * F, S, "block.%lld.swiglu.grad", li));
    NEW(dn2, gd, M, H);
    if (tg) {
        /* dn2 sums over the whole inner width: du gathered, this rank's hidden columns, then all columns */
        h3s_tensor *duf, *part;
        H3S_TRY(tp_gather_keep(tp, du, COL_SWIGLU, 1, 2 * F, &duf));
        NEW(part, gd, M, cl);
        H3S_TRY(dgrad(duf, &tb->w0_c, part, a->n2));
        H3S_TRY(tp_gather_into(tg, part, COL_HID, 1, H, dn2));
        H3S_TRY(par_slice_dw(tp, a->n2, &tb->w0, du, COL_SWIGLU, pgi(g, (&m->bp[li])->ff_in)));
    } else {
        H3S_TRY(par_linear_backward(tp, a->n2, &m->w[(&m->bp[li])->ff_in], du, dn2, pgi(g, (&m->bp[li])->ff_in)));
    }
    H3S_TRY(emit_par(r, dn2, COL_FULL, H, S, "block.%lld.ffn_gate_up.grad", li));
    NEW(dx1b, gd, M, H);
    H3S_TRY(par_norm_backward(tp, a->x1, &m->w[(&m->bp[li])->norm2], &table6, 3, 4, c->norm_eps, dn2, dx1b,
                              pgi(g, (&m->bp[li])->norm2), &dtable6));
    NEW(dx1, gd, M, H);
    H3S_TRY(h3s_grad_add(dx1a, dx1b, dx1));
    H3S_TRY(emit_par(r, dx1, COL_FULL, H, S, "block.%lld.norm2.grad", li));
    NEW(dxa, gd, M, H);
    NEW(dout_o, gd, M, H);
    H3S_TRY(par_residual_backward(tp, a->o, dx1, &table6, 2, dxa, dout_o, &dtable6));
    H3S_TRY(emit_par(r, dout_o, COL_FULL, H, S, "block.%lld.residual_attn.grad", li));
    NEW(datt, gd, M, HDl);
    if (tg) {
        /* datt of this rank's heads: every output column of o_proj (dout_o is whole) against its weight columns */
        H3S_TRY(tp_hid_linear_backward(tp, a->att, a->att_full, &tb->wo, &tb->wo_c, dout_o, datt,
                                       pgi(g, (&m->bp[li])->to_out)));
    } else {
        H3S_TRY(
            par_linear_backward(tp, a->att, &m->w[(&m->bp[li])->to_out], dout_o, datt, pgi(g, (&m->bp[li])->to_out)));
    }
    H3S_TRY(emit_par(r, datt, COL_HEADS, HD, S, "block.%lld.o_proj.grad", li));
    NEW(dqa, gd, M, HDl);
    NEW(dka, gd, M, HDl);
    NEW(dv, gd, M, HDl);
    h3s_attn_mask mask = block_mask(tp, 0);
    if (tp->sp) {
        /* the owner of a key row sums over every query of its item: queries, outputs, statistics and output
         * gradients of the slice's items are gathered (copies) */
        const h3s_tensor *local[6] = {a->qr, a->kr, a->v, a->att, a->stats, datt};
        h3s_tensor gq[6]; /* q, k, v, o, statistics, d_o */
        int64_t kv_lo = 0;
        H3S_TRY(gather_items(tp, 6, local, gq, &kv_lo));
        h3s_tensor s3 = h3s_block_stats_view(&gq[4], hl);
        h3s_status st = h3s_attention_backward_rows(&gq[0], &gq[1], &gq[2], &gq[3], &s3, tp->B, S, hl, &mask, &gq[5],
                                                    lo, lo + M, kv_lo, dqa, dka, dv);
        tensors_free(gq, 6);
        H3S_TRY(st);
    } else {
        h3s_tensor s3 = h3s_block_stats_view(a->stats, hl);
        H3S_TRY(h3s_attention_backward(a->qr, a->kr, a->v, a->att, &s3, tp->B, hl, &mask, datt, dqa, dka, dv));
    }
    H3S_TRY(emit_par(r, dqa, COL_HEADS, HD, S, "block.%lld.attention.grad_q", li));
    H3S_TRY(emit_par(r, dka, COL_HEADS, HD, S, "block.%lld.attention.grad_k", li));
    H3S_TRY(emit_par(r, dv, COL_HEADS, HD, S, "block.%lld.attention.grad_v", li));
    NEW(dqn, gd, M, HDl);
    NEW(dkn, gd, M, HDl);
    H3S_TRY(h3s_rope_backward(hl, cos_r, sin_r, dqa, dqn));
    H3S_TRY(emit_par(r, dqn, COL_HEADS, HD, S, "block.%lld.rope_q.grad", li));
    H3S_TRY(h3s_rope_backward(hl, cos_r, sin_r, dka, dkn));
    H3S_TRY(emit_par(r, dkn, COL_HEADS, HD, S, "block.%lld.rope_k.grad", li));
    NEW(dq, gd, M, HDl);
    NEW(dk, gd, M, HDl);
    const char *qk[2] = {"q", "k"};
    h3s_tensor *xs[2] = {a->q, a->k}, *dys[2] = {dqn, dkn}, *dxs[2] = {dq, dk};
    for (int k = 0; k < 2; k++) {
        const h3s_tensor *wn = &m->w[(&m->bp[li])->norm_qk[k]];
        H3S_TRY(h3s_head_rmsnorm_backward(xs[k], hl, wn, c->qk_norm_eps, dys[k], dxs[k], NULL));
        h3s_tensor *dw = pgi(g, (&m->bp[li])->norm_qk[k]);
        if (dw && tg) {
            /* the norm weight's sum runs over (row, head) pairs, heads inside rows: every head's columns */
            h3s_tensor xf = {0}, dyf = {0};
            h3s_status st = tp_gather_cols(tg, xs[k], COL_HEADS, Dh, HD, &xf);
            if (st == H3S_OK) st = tp_gather_cols(tg, dys[k], COL_HEADS, Dh, HD, &dyf);
            if (st == H3S_OK) st = par_head_norm_dw(tp, &xf, heads, wn, c->qk_norm_eps, &dyf, dw);
            h3s_tensor_free(&xf);
            h3s_tensor_free(&dyf);
            H3S_TRY(st);
        } else if (dw) {
            H3S_TRY(par_head_norm_dw(tp, xs[k], heads, wn, c->qk_norm_eps, dys[k], dw));
        }
        H3S_TRY(emit_par(r, dxs[k], COL_HEADS, HD, S, "block.%lld.%s_norm.grad", li, qk[k]));
    }
    NEW(dn1, gd, M, H);
    NEW(dn1k, gd, M, H);
    NEW(dn1v, gd, M, H);
    const char *proj[3] = {"q", "k", "v"};
    h3s_tensor *dps[3] = {dq, dk, dv}, *dns[3] = {dn1, dn1k, dn1v};
    for (int k = 0; k < 3; k++) {
        if (tg) {
            /* dn1 sums over every head: the projection's gradient gathered, this rank's hidden columns, then all */
            const h3s_tensor *wr = k == 0 ? &tb->wq : k == 1 ? &tb->wk : &tb->wv;
            const h3s_tensor *wc = k == 0 ? &tb->wq_c : k == 1 ? &tb->wk_c : &tb->wv_c;
            h3s_tensor *full, *part;
            H3S_TRY(tp_gather_keep(tp, dps[k], COL_HEADS, Dh, HD, &full));
            NEW(part, gd, M, cl);
            H3S_TRY(dgrad(full, wc, part, a->n1));
            H3S_TRY(tp_gather_into(tg, part, COL_HID, 1, H, dns[k]));
            H3S_TRY(par_slice_dw(tp, a->n1, wr, dps[k], COL_HEADS, pgi(g, (&m->bp[li])->to[k])));
        } else {
            H3S_TRY(par_linear_backward(tp, a->n1, &m->w[(&m->bp[li])->to[k]], dps[k], dns[k],
                                        pgi(g, (&m->bp[li])->to[k])));
        }
        H3S_TRY(emit_par(r, dns[k], COL_FULL, H, S, "block.%lld.%s_proj.grad", li, proj[k]));
    }
    /* fixed order: (q + k) + v */
    H3S_TRY(h3s_grad_add(dn1, dn1k, dn1));
    H3S_TRY(h3s_grad_add(dn1, dn1v, dn1));
    NEW(dxb, gd, M, H);
    H3S_TRY(par_norm_backward(tp, a->x_in, &m->w[(&m->bp[li])->norm1], &table6, 0, 1, c->norm_eps, dn1, dxb,
                              pgi(g, (&m->bp[li])->norm1), &dtable6));
    NEW(dx, gd, M, H);
    H3S_TRY(h3s_grad_add(dxa, dxb, dx));
    H3S_TRY(emit_par(r, dx, COL_FULL, H, S, "block.%lld.norm1.grad", li));
    h3s_tensor *dtemb;
    NEW(dtemb, gd, tp->T, E);
    h3s_tensor *dwa = pgi(g, (&m->bp[li])->adaln_w), *dba = pgi(g, (&m->bp[li])->adaln_b);
    if (tg) {
        /* dtemb sums over the table's columns: this rank's embedding columns against the weight's columns, then
         * all; the weight and bias gradients of this rank's table columns */
        int64_t e0 = tg->emb[tg->rank], e1 = tg->emb[tg->rank + 1];
        h3s_tensor tc = {0}, ac = {0}, part = {0};
        h3s_status st = cols_of(tp->temb, e0, e1, &tc);
        if (st == H3S_OK) st = cols_of(a->a_silu, e0, e1, &ac);
        int64_t ps[2] = {tp->T, e1 - e0};
        if (st == H3S_OK) st = h3s_tensor_alloc(&part, gd, 2, ps);
        if (st == H3S_OK) st = h3s_adaln_projection_backward(&tc, &ac, &tb->ada_c, dtable, &part, NULL, NULL);
        if (st == H3S_OK) st = tp_gather_into(tg, &part, COL_EMB, 1, E, dtemb);
        h3s_tensor_free(&tc);
        h3s_tensor_free(&ac);
        h3s_tensor_free(&part);
        H3S_TRY(st);
        if (dwa || dba) {
            int64_t a0 = tg->ada[tg->rank], a1 = tg->ada[tg->rank + 1];
            h3s_tensor dtc = {0}, lw = {0}, lb = {0};
            st = cols_of(dtable, a0, a1, &dtc);
            if (st == H3S_OK) st = h3s_tensor_alloc(&lw, gd, 2, tb->ada.shape);
            if (st == H3S_OK) st = h3s_tensor_alloc(&lb, gd, 1, tb->ada_b.shape);
            if (st == H3S_OK)
                st = h3s_adaln_projection_backward(tp->temb, a->a_silu, &tb->ada, &dtc, NULL, dwa ? &lw : NULL,
                                                   dba ? &lb : NULL);
            if (st == H3S_OK && dwa) st = tp_gather_rows(tg, &lw, COL_ADA, 1, dwa);
            if (st == H3S_OK && dba) st = tp_gather_rows(tg, &lb, COL_ADA, 1, dba);
            h3s_tensor_free(&dtc);
            h3s_tensor_free(&lw);
            h3s_tensor_free(&lb);
            H3S_TRY(st);
        }
    } else {
        H3S_TRY(
            h3s_adaln_projection_backward(tp->temb, a->a_silu, &m->w[(&m->bp[li])->adaln_w], dtable, dtemb, dwa, dba));
    }
    H3S_TRY(emit(r, dtemb, 0, 0, "block.%lld.adaln_projection.grad", li));
    H3S_TRY(accumulate_dtemb(g, dtemb));
    *dx_out = dx;
    return H3S_OK;
}

static h3s_status run_block_backward(grad_ctx *g, int kind, int64_t i, int64_t S, block_acts *a, h3s_tensor *dx2,
                                     h3s_tensor **dx_out) {
    switch (kind) {
    case BLK_REFINER: return block_backward(g, 1, i, S, a, dx2, dx_out);
    case BLK_PLAIN: return block_backward(g, 0, i, S, a, dx2, dx_out);
    default: return block_backward_par(g, i, a, dx2, dx_out);
    }
}

/* A block's backward, its temporaries in a scratch arena released when it ends: only its input gradient *dx_out
 * moves to the backward's arena, and the gradient it started from (dx2, the later block's output) is released
 * there.  On a tape made with H3S_RECOMPUTE_BLOCKS the block's forward runs again first, into the same scratch
 * arena, from the kept input: the same operators on the same inputs in the same order, so the same bits, and
 * without the hook (it saw the block's forward nodes in the forward), so the hook sees exactly the backward nodes
 * it sees without recomputation.  Under h3s_model_set_parallel every rank runs the recomputation at the same
 * point, so its collectives pair up as in the forward. */
static h3s_status block_backward_kept(grad_ctx *g, int kind, int64_t i, int64_t S, block_acts *a, h3s_tensor *dx2,
                                      h3s_tensor **dx_out) {
    h3s_tape *tp = g->r.tp;
    arena outer = tp->ar;
    tp->ar = arena_empty(&outer);
    block_acts re;
    block_acts *use = a;
    h3s_status st = H3S_OK;
    if (tp->recompute != H3S_RECOMPUTE_NONE) {
        run_ctx quiet = {tp, NULL, NULL};
        h3s_tensor *x2 = NULL;
        memset(&re, 0, sizeof re);
        st = run_block_forward(&quiet, kind, i, a->x_in, S, &re, &x2);
        use = &re;
    }
    if (st == H3S_OK) st = run_block_backward(g, kind, i, S, use, dx2, dx_out);
    arena scratch = tp->ar;
    tp->ar = outer;
    if (st == H3S_OK) st = arena_move(&scratch, *dx_out, &tp->ar);
    arena_free(&scratch);
    if (st == H3S_OK) arena_drop(&tp->ar, dx2);
    return st;
}

static h3s_status model_backward(grad_ctx *g, const h3s_tensor *d_sample, const h3s_tensor *d_audio) {
    run_ctx *r = &g->r;
    h3s_tape *tp = r->tp;
    h3s_model *m = tp->m;
    const h3s_config *c = &m->cfg;
    int64_t B = tp->B, S = tp->S, Nv = tp->Nv, Na = tp->Na, Nt = tp->Nt, H = c->hidden_size;
    int64_t Wv = h3s_config_video_width(c), Wa = c->audio_in_channels;
    h3s_dtype gd = m->grad;
    h3s_tensor *dsv, *dsa;
    H3S_TRY(upload_input(tp, d_sample, gd, B * Nv, Wv, &dsv));
    H3S_TRY(upload_input(tp, d_audio, gd, B * Na, Wa, &dsa));

    h3s_tensor *dyv, *dya, *dy, *dx;
    NEW(dyv, gd, B * Nv, H);
    NEW(dya, gd, B * Na, H);
    H3S_TRY(h3s_linear_backward(tp->yv, gweight(m, GP_PROJ_OUT_WEIGHT), dsv, dyv, gpgrad(g, GP_PROJ_OUT_WEIGHT),
                                gpgrad(g, GP_PROJ_OUT_BIAS)));
    H3S_TRY(emit(r, dyv, 1, Nv, "proj_out.grad"));
    H3S_TRY(h3s_linear_backward(tp->ya, gweight(m, GP_AUDIO_PROJ_OUT_WEIGHT), dsa, dya,
                                gpgrad(g, GP_AUDIO_PROJ_OUT_WEIGHT), gpgrad(g, GP_AUDIO_PROJ_OUT_BIAS)));
    H3S_TRY(emit(r, dya, 1, Na, "audio_proj_out.grad"));
    NEW(dy, gd, B * S, H); /* zero: rows no head reads get no gradient */
    H3S_TRY(h3s_rows_scatter(dyv, &tp->video_idx, B, dy));
    H3S_TRY(h3s_rows_scatter(dya, &tp->audio_idx, B, dy));
    h3s_tensor *dtable_out, *dtemb_out;
    NEW(dx, gd, B * S, H);
    NEW(dtable_out, gd, tp->T, 2 * H);
    H3S_TRY(h3s_final_norm_backward(tp->x_last, gweight(m, GP_NORM_OUT_NORM_WEIGHT), tp->table_out, &tp->ts_rows,
                                    c->final_norm_eps, dy, dx, gpgrad(g, GP_NORM_OUT_NORM_WEIGHT), dtable_out));
    H3S_TRY(emit(r, dx, 1, S, "norm_out.grad"));
    NEW(dtemb_out, gd, tp->T, c->time_embed_dim);
    H3S_TRY(h3s_adaln_projection_backward(tp->temb, tp->a_out, gweight(m, GP_NORM_OUT_LINEAR_WEIGHT), dtable_out,
                                          dtemb_out, gpgrad(g, GP_NORM_OUT_LINEAR_WEIGHT),
                                          gpgrad(g, GP_NORM_OUT_LINEAR_BIAS)));
    H3S_TRY(accumulate_dtemb(g, dtemb_out));

    if (tp->sp) {
        H3S_TRY(sp_local_rows(tp, dx, &dx));
        for (int64_t i = c->num_layers - 1; i >= 0; i--)
            H3S_TRY(block_backward_kept(g, BLK_PAR, i, S, &tp->blocks[i], dx, &dx));
        H3S_TRY(sp_all_rows(tp, dx, &dx));
    } else if (tp->tpar) {
        for (int64_t i = c->num_layers - 1; i >= 0; i--)
            H3S_TRY(block_backward_kept(g, BLK_PAR, i, S, &tp->blocks[i], dx, &dx));
    } else {
        for (int64_t i = c->num_layers - 1; i >= 0; i--)
            H3S_TRY(block_backward_kept(g, BLK_PLAIN, i, S, &tp->blocks[i], dx, &dx));
    }
    H3S_TRY(emit(r, dx, 1, S, "pack.grad"));

    h3s_tensor *dtext, *dvid, *daud;
    NEW(dtext, gd, B * Nt, H);
    NEW(dvid, gd, B * Nv, H);
    NEW(daud, gd, B * Na, H);
    H3S_TRY(h3s_rows_gather(dx, &tp->text_idx, B, dtext));
    H3S_TRY(h3s_rows_gather(dx, &tp->video_idx, B, dvid));
    H3S_TRY(h3s_rows_gather(dx, &tp->audio_idx, B, daud));
    h3s_tensor *dt;
    NEW(dt, gd, B * Nt, H);
    H3S_TRY(h3s_rmsnorm_backward(tp->text_pre_final, gweight(m, GP_TOKEN_REFINER_FINAL_NORM_WEIGHT), NULL,
                                 c->final_norm_eps, dtext, dt, gpgrad(g, GP_TOKEN_REFINER_FINAL_NORM_WEIGHT), NULL));
    H3S_TRY(emit(r, dt, 1, Nt, "refiner.final_norm.grad"));
    for (int64_t i = c->num_refiner_layers - 1; i >= 0; i--)
        H3S_TRY(block_backward_kept(g, BLK_REFINER, i, Nt, &tp->refiner[i], dt, &dt));

    h3s_tensor *denc, *dhv, *dha;
    NEW(denc, gd, B * Nt, c->text_dim);
    H3S_TRY(h3s_linear_backward(tp->enc, gweight(m, GP_CONTEXT_EMBEDDER_WEIGHT), dt, denc,
                                gpgrad(g, GP_CONTEXT_EMBEDDER_WEIGHT), gpgrad(g, GP_CONTEXT_EMBEDDER_BIAS)));
    H3S_TRY(emit(r, denc, 1, Nt, "context_embedder.grad"));
    NEW(dhv, gd, B * Nv, Wv);
    H3S_TRY(h3s_linear_backward(tp->hv, gweight(m, GP_PROJ_IN_WEIGHT), dvid, dhv, gpgrad(g, GP_PROJ_IN_WEIGHT),
                                gpgrad(g, GP_PROJ_IN_BIAS)));
    H3S_TRY(emit(r, dhv, 1, Nv, "proj_in.grad"));
    NEW(dha, gd, B * Na, Wa);
    H3S_TRY(h3s_linear_backward(tp->ha, gweight(m, GP_AUDIO_PROJ_IN_WEIGHT), daud, dha,
                                gpgrad(g, GP_AUDIO_PROJ_IN_WEIGHT), gpgrad(g, GP_AUDIO_PROJ_IN_BIAS)));
    H3S_TRY(emit(r, dha, 1, Na, "audio_proj_in.grad"));

    H3S_TRY(emit(r, g->dtemb, 0, 0, "timestep_mlp.grad"));
    H3S_TRY(h3s_timestep_mlp_backward(
        tp->feats, gweight(m, GP_TIME_EMBEDDER_LINEAR_1_WEIGHT), gweight(m, GP_TIME_EMBEDDER_LINEAR_2_WEIGHT),
        tp->mlp_hidden, g->dtemb, NULL, gpgrad(g, GP_TIME_EMBEDDER_LINEAR_1_WEIGHT),
        gpgrad(g, GP_TIME_EMBEDDER_LINEAR_1_BIAS), gpgrad(g, GP_TIME_EMBEDDER_LINEAR_2_WEIGHT),
        gpgrad(g, GP_TIME_EMBEDDER_LINEAR_2_BIAS)));
    if (m->grads_bf16) H3S_TRY(round_grads_bf16(m, g->pg));
    for (int64_t i = 0; i < m->nparams; i++) {
        if (g->want && !g->want[i]) continue;
        H3S_TRY(emit(r, &g->pg[i], 0, 0, "param.%s", m->specs[i].name));
    }
    g->d_hv = dhv;
    g->d_ha = dha;
    g->d_enc = denc;
    return H3S_OK;
}

void h3s_grads_free(h3s_grads *g) {
    if (!g) return;
    /* device gradients may still be read by work the caller queued on other streams: wait for the device once,
     * then release them (h3s_model_set_device_grads) */
    int synced = 0;
    h3s_tensor *ins[3] = {&g->hidden_states, &g->audio_hidden_states, &g->encoder_hidden_states};
    for (int k = 0; k < 3; k++) {
        if (ins[k]->device && ins[k]->data) {
            if (!synced) (void)h3s_cuda_device_sync();
            synced = 1;
            h3s_cuda_tensor_free(ins[k]);
        } else {
            h3s_tensor_free(ins[k]);
        }
    }
    if (g->params) {
        for (int64_t i = 0; i < g->count; i++) {
            if (g->params[i].device && g->params[i].data) {
                if (!synced) (void)h3s_cuda_device_sync();
                synced = 1;
                h3s_cuda_tensor_free(&g->params[i]); /* a view into g->block: nothing to release */
            } else {
                h3s_tensor_free(&g->params[i]);
            }
        }
    }
    if (g->block.data) {
        if (!synced) (void)h3s_cuda_device_sync();
        h3s_cuda_tensor_free(&g->block);
    }
    free(g->params);
    free(g->names);
    memset(g, 0, sizeof *g);
}

static h3s_status host_shaped(const h3s_tensor *t, int ndim, const int64_t *shape, h3s_tensor *out) {
    H3S_TRY(to_host(t, out));
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        out->shape[d] = shape[d];
    return H3S_OK;
}

/* An input gradient handed over in device memory (h3s_model_set_device_grads): a stream-ordered copy out of the
 * backward's arena, which is released when the call ends, shaped like the input. */
static h3s_status device_shaped(const h3s_tensor *t, int ndim, const int64_t *shape, h3s_tensor *out) {
    H3S_TRY(h3s_cuda_tensor_alloc_ordered_uninit(out, t->dtype, ndim, shape));
    h3s_status st = h3s_cuda_copy(t, out);
    if (st != H3S_OK) h3s_cuda_tensor_free(out);
    return st;
}

/* The three input gradients, shaped like the inputs: in device memory (device_shaped) or on the host (host_shaped). */
static h3s_status hand_input_grads(const grad_ctx *g, const h3s_tape *tape, int device, h3s_grads *out) {
    h3s_status (*hand)(const h3s_tensor *, int, const int64_t *, h3s_tensor *) = device ? device_shaped : host_shaped;
    H3S_TRY(hand(g->d_hv, 3, tape->in_shape_v, &out->hidden_states));
    H3S_TRY(hand(g->d_ha, 3, tape->in_shape_a, &out->audio_hidden_states));
    return hand(g->d_enc, 3, tape->in_shape_t, &out->encoder_hidden_states);
}

h3s_status h3s_model_backward(h3s_model *m, h3s_tape *tape, const h3s_tensor *d_sample,
                              const h3s_tensor *d_audio_sample, h3s_node_hook hook, void *hook_ctx, h3s_grads *out) {
    return h3s_model_backward_select(m, tape, d_sample, d_audio_sample, NULL, hook, hook_ctx, out);
}

h3s_status h3s_model_backward_select(h3s_model *m, h3s_tape *tape, const h3s_tensor *d_sample,
                                     const h3s_tensor *d_audio_sample, const unsigned char *want_params,
                                     h3s_node_hook hook, void *hook_ctx, h3s_grads *out) {
    if (!m || !tape || !d_sample || !d_audio_sample || !out)
        return h3s_fail(H3S_ERR_INVALID, "model_backward: NULL argument");
    if (tape->m != m) return h3s_fail(H3S_ERR_INVALID, "model_backward: the tape belongs to another model");
    if (tape->par_gen != m->par_gen)
        return h3s_fail(H3S_ERR_INVALID, "model_backward: the model's parallel setup changed (h3s_model_set_parallel) "
                                         "after this tape's forward; run the forward again");
    H3S_TRY(finish_pending(m, "model_backward"));
    int64_t Wv = h3s_config_video_width(&m->cfg), Wa = m->cfg.audio_in_channels;
    const h3s_tensor *cts[2] = {d_sample, d_audio_sample};
    int64_t want[2][3] = {{tape->B, tape->Nv, Wv}, {tape->B, tape->Na, Wa}};
    static const char *ct_names[2] = {"sample", "audio_sample"};
    for (int k = 0; k < 2; k++) {
        const h3s_tensor *t = cts[k];
        if (!(t->dtype == H3S_F32 || t->dtype == H3S_F64 || t->dtype == H3S_BF16))
            return h3s_fail(H3S_ERR_DTYPE, "cotangent: %s has dtype %s, expected F32", ct_names[k],
                            h3s_dtype_name(t->dtype));
        if (t->ndim != 3 || t->shape[0] != want[k][0] || t->shape[1] != want[k][1] || t->shape[2] != want[k][2])
            return h3s_fail(H3S_ERR_SHAPE, "cotangent: %s must be [%lld, %lld, %lld]", ct_names[k],
                            (long long)want[k][0], (long long)want[k][1], (long long)want[k][2]);
        if (!t->data && h3s_tensor_numel(t) > 0)
            return h3s_fail(H3S_ERR_INVALID, "cotangent: %s has %lld elements but no data", ct_names[k],
                            (long long)h3s_tensor_numel(t));
        /* a NaN or Inf here would spread to every gradient while the call reports success */
        int64_t bad = -1;
        if (t->device) { /* a device cotangent (CUDA model): F32 in the gradient dtype, checked on the device */
            if (!m->device)
                return h3s_fail(H3S_ERR_DEVICE, "cotangent: %s is a device tensor, but the model runs on the host",
                                ct_names[k]);
            if (t->dtype != m->grad)
                return h3s_fail(H3S_ERR_DTYPE, "cotangent: %s is a device tensor of dtype %s, expected %s", ct_names[k],
                                h3s_dtype_name(t->dtype), h3s_dtype_name(m->grad));
            H3S_TRY(h3s_cuda_first_nonfinite(t, &bad));
        } else {
            bad = h3s_tensor_first_nonfinite(t);
        }
        if (bad >= 0)
            return h3s_fail(H3S_ERR_INVALID, "cotangent: %s[%lld] is not finite", ct_names[k], (long long)bad);
    }
    /* the gradients are built in `res` and handed to the caller only on success: a failure (a hook's refusal
     * included) leaves *out as it was */
    h3s_grads res;
    memset(&res, 0, sizeof res);
    grad_ctx g;
    memset(&g, 0, sizeof g);
    g.r = (run_ctx){tape, hook, hook_ctx};
    g.want = want_params;
    /* Backward temporaries live in their own arena so the forward tape stays reusable. */
    arena fwd = tape->ar;
    tape->ar = arena_empty(&fwd);
    g.pg = h3s_calloc((size_t)m->nparams, sizeof *g.pg);
    h3s_status st = g.pg ? H3S_OK : H3S_ERR_NOMEM;
    /* device gradients handed over: one block, the gradients views into it at 256-byte offsets (h3s_grads.block) */
    const int dev_block = m->device && m->device_grads;
    h3s_tensor block;
    memset(&block, 0, sizeof block);
    size_t block_bytes = 0;
    for (int64_t i = 0; st == H3S_OK && i < m->nparams; i++) {
        if (want_params && !want_params[i]) continue;
        int64_t shape[2] = {m->specs[i].shape[0], m->specs[i].ndim == 2 ? m->specs[i].shape[1] : 1};
        const h3s_dtype dt = grad_direct_bf16(m, tape->sp || tape->tpar, i) ? H3S_BF16 : m->grad;
        if (dev_block) { /* the view's place in the block for now (as an offset); its data once the block exists */
            g.pg[i] = h3s_tensor_view((void *)(uintptr_t)block_bytes, dt, m->specs[i].ndim, shape);
            g.pg[i].device = 1;
            block_bytes += (h3s_tensor_nbytes(&g.pg[i]) + 255) & ~(size_t)255;
            continue;
        }
        st = backend_alloc_as(m, &g.pg[i], dt, m->specs[i].ndim, shape, 0);
        if (st == H3S_OK) meter_add(m->meter, &g.pg[i]);
    }
    if (st == H3S_OK && dev_block && block_bytes > 0) {
        int64_t n = (int64_t)(block_bytes / 4);
        st = h3s_cuda_tensor_alloc_ordered_uninit(&block, H3S_F32, 1, &n);
        if (st == H3S_OK) meter_add(m->meter, &block);
        for (int64_t i = 0; st == H3S_OK && i < m->nparams; i++)
            if (g.pg[i].device) /* a placed view (an entry not requested stays zeroed) */
                g.pg[i].data = (uint8_t *)block.data + (uintptr_t)g.pg[i].data;
    }
    if (st != H3S_OK && dev_block) /* no view may outlive a block that does not exist */
        for (int64_t i = 0; g.pg && i < m->nparams; i++)
            memset(&g.pg[i], 0, sizeof g.pg[i]);
    if (st == H3S_OK) st = model_backward(&g, d_sample, d_audio_sample);
    /* with device gradients the input gradients stay in device memory too (copied before the stream is waited for,
     * so they are ready when the call returns); otherwise they come to the host */
    if (dev_block && st == H3S_OK) st = hand_input_grads(&g, tape, 1, &res);
    /* every use of the temporaries is queued: release them in stream order now, so that the host's releases overlap
     * the device's work instead of following the wait */
    if (dev_block && st == H3S_OK) arena_free(&tape->ar);
    if (st == H3S_OK && dev_block && m->deferred)
        m->pending = 1; /* h3s_model_finish (or the model's next pass) waits and reads the index checks */
    else if (st == H3S_OK && m->device)
        st = h3s_cuda_sync();
    if (!dev_block && st == H3S_OK) st = hand_input_grads(&g, tape, 0, &res);
    if (st == H3S_OK) {
        res.count = m->nparams;
        res.names = h3s_calloc((size_t)m->nparams, sizeof *res.names);
        res.params = h3s_calloc((size_t)m->nparams, sizeof *res.params);
        if (!res.names || !res.params) st = H3S_ERR_NOMEM;
        for (int64_t i = 0; st == H3S_OK && i < m->nparams; i++) {
            memcpy(res.names[i], m->specs[i].name, sizeof res.names[i]);
            if (want_params && !want_params[i]) {
                res.params[i].dtype = grad_in_bf16(m, i) ? H3S_BF16 : m->grad; /* no data: not requested */
                res.params[i].ndim = m->specs[i].ndim;
                memcpy(res.params[i].shape, m->specs[i].shape, sizeof m->specs[i].shape);
                continue;
            }
            if (g.pg[i].device && !m->device_grads) {
                st = to_host(&g.pg[i], &res.params[i]);
                meter_sub(m->meter, &g.pg[i]);
                backend_free(m, &g.pg[i]);
            } else {
                /* host memory already, or device memory the caller asked for (h3s_model_set_device_grads):
                 * handed over, not copied (no second copy of every gradient) */
                meter_sub(m->meter, &g.pg[i]);
                res.params[i] = g.pg[i];
                memset(&g.pg[i], 0, sizeof g.pg[i]);
            }
        }
    }
    if (g.pg)
        for (int64_t i = 0; i < m->nparams; i++) {
            meter_sub(m->meter, &g.pg[i]);
            backend_free(m, &g.pg[i]);
        }
    free(g.pg);
    /* the block goes with the gradients it holds, or back to the pool */
    meter_sub(m->meter, &block);
    if (st == H3S_OK)
        res.block = block;
    else if (block.data)
        h3s_cuda_tensor_free(&block);
    arena_free(&tape->ar);
    tape->ar = fwd;
    if (st != H3S_OK) {
        h3s_grads_free(&res);
        return st;
    }
    *out = res;
    return H3S_OK;
}

/* ------------------------------------------------------------------ parallel execution */

/* Sub-communicators and tensor-parallel slices of a parallel model, released. */
static void parallel_release(h3s_model *m) {
    tp_geom_free(m->tpg, m->cfg.num_layers);
    m->tpg = NULL;
    if (m->own_spc) h3s_comm_free(m->spc);
    if (m->own_tpc) h3s_comm_free(m->tpc);
    m->spc = m->tpc = NULL;
    m->own_spc = m->own_tpc = 0;
    m->comm = NULL;
    m->sp = m->tp = 1;
}

/* This rank's ranges and weight slices (tensor parallel).  Every rank of the model's communicator runs the same
 * steps; the local ones (the limits, the row slices' copies) are agreed over it before the all-to-alls of the
 * column slices, so that a rank failing alone (memory) makes every rank fail with its message instead of leaving
 * them waiting. */
static h3s_status tp_setup(h3s_model *m) {
    const h3s_config *c = &m->cfg;
    int n = m->tpc->size;
    int64_t H = c->hidden_size, heads = c->num_attention_heads, F = c->ffn_dim, E = c->time_embed_dim;
    int64_t D = c->attention_head_dim;
    H3S_TRY(h3s_comm_agree(m->comm, h3s_parallel_check(c, m->sp, n, 0), NULL));
    tp_geom *g = h3s_calloc(1, sizeof *g);
    h3s_status st = g ? H3S_OK : H3S_ERR_NOMEM;
    m->tpg = g;
    if (g) {
        g->c = m->tpc;
        g->world = m->comm;
        g->n = n;
        g->rank = m->tpc->rank;
        g->heads = split_bounds(heads, n);
        g->hid = split_bounds(H, n);
        g->ffn = split_bounds(F, n);
        g->ada = split_bounds(18 * H, n);
        g->emb = split_bounds(E, n);
        g->blocks = h3s_calloc((size_t)c->num_layers + 1, sizeof *g->blocks);
        if (!g->heads || !g->hid || !g->ffn || !g->ada || !g->emb || !g->blocks) st = H3S_ERR_NOMEM;
    }
    const int r = g ? g->rank : 0;
    for (int64_t i = 0; st == H3S_OK && i < c->num_layers; i++) {
        tp_block *b = &g->blocks[i];
        const block_params *bp = &m->bp[i]; /* every index resolved (and checked) when the model was created */
        const h3s_tensor *wq = &m->w[bp->to[0]], *wk = &m->w[bp->to[1]], *wv = &m->w[bp->to[2]];
        const h3s_tensor *wo = &m->w[bp->to_out], *w0 = &m->w[bp->ff_in], *w2 = &m->w[bp->ff_out];
        const h3s_tensor *wa = &m->w[bp->adaln_w], *ba = &m->w[bp->adaln_b];
        int64_t h0 = g->heads[r] * D, h1 = g->heads[r + 1] * D, c0 = g->hid[r], c1 = g->hid[r + 1];
        int64_t f0 = g->ffn[r], f1 = g->ffn[r + 1], a0 = g->ada[r], a1 = g->ada[r + 1];
        st = copy_rows(wq, h0, h1, 0, 0, &b->wq);
        if (st == H3S_OK) st = copy_rows(wk, h0, h1, 0, 0, &b->wk);
        if (st == H3S_OK) st = copy_rows(wv, h0, h1, 0, 0, &b->wv);
        if (st == H3S_OK) st = copy_rows(wo, c0, c1, 0, 0, &b->wo);
        if (st == H3S_OK) st = copy_rows(w0, f0, f1, F + f0, F + f1, &b->w0);
        if (st == H3S_OK) st = copy_rows(w2, c0, c1, 0, 0, &b->w2);
        if (st == H3S_OK) st = copy_rows(wa, a0, a1, 0, 0, &b->ada);
        if (st == H3S_OK) st = copy_rows(ba, a0, a1, 0, 0, &b->ada_b);
    }
    H3S_TRY(h3s_comm_agree(m->comm, st, NULL));
    /* the column slices, from every rank's rows: this rank reads only its own rows of the checkpoint (each
     * tp_col_slice agrees on its allocations before its all-to-all) */
    for (int64_t i = 0; i < c->num_layers; i++) {
        tp_block *b = &g->blocks[i];
        H3S_TRY(tp_col_slice(g, &b->wq, g->heads, D, 0, 0, g->hid, 1, &b->wq_c));
        H3S_TRY(tp_col_slice(g, &b->wk, g->heads, D, 0, 0, g->hid, 1, &b->wk_c));
        H3S_TRY(tp_col_slice(g, &b->wv, g->heads, D, 0, 0, g->hid, 1, &b->wv_c));
        H3S_TRY(tp_col_slice(g, &b->wo, g->hid, 1, 0, 0, g->heads, D, &b->wo_c));
        H3S_TRY(tp_col_slice(g, &b->w0, g->ffn, 1, 1, F, g->hid, 1, &b->w0_c));
        H3S_TRY(tp_col_slice(g, &b->w2, g->hid, 1, 0, 0, g->ffn, 1, &b->w2_c));
        H3S_TRY(tp_col_slice(g, &b->ada, g->ada, 1, 0, 0, g->emb, 1, &b->ada_c));
    }
    return H3S_OK;
}

h3s_status h3s_parallel_check(const h3s_config *c, int sp, int tp, int64_t packed_rows) {
    if (!c) return h3s_fail(H3S_ERR_INVALID, "parallel_check: NULL config");
    if (sp < 1 || tp < 1)
        return h3s_fail(H3S_ERR_INVALID, "parallel_check: --sp %d and --tp %d must be at least 1", sp, tp);
    if (packed_rows < 0) return h3s_fail(H3S_ERR_INVALID, "parallel_check: %lld packed rows", (long long)packed_rows);
    int64_t H = c->hidden_size, heads = c->num_attention_heads, F = c->ffn_dim, E = c->time_embed_dim;
    if (heads < tp || H < tp || F < tp || E < tp)
        return h3s_fail(H3S_ERR_INVALID,
                        "tensor parallel: --tp %d exceeds the heads (%lld), hidden width (%lld), FFN width (%lld) or "
                        "time-embedding width (%lld) it splits",
                        tp, (long long)heads, (long long)H, (long long)F, (long long)E);
    if (packed_rows > 0 && packed_rows < sp)
        return h3s_fail(H3S_ERR_SHAPE,
                        "sequence parallel: %lld packed rows cannot be cut into %d non-empty slices (--sp %d)",
                        (long long)packed_rows, sp, sp);
    return H3S_OK;
}

h3s_status h3s_model_set_parallel(h3s_model *m, h3s_comm *comm, int sp, int tp) {
    if (!m) return h3s_fail(H3S_ERR_INVALID, "model_set_parallel: NULL model");
    if (!comm) {
        if (m->comm) m->par_gen++;
        parallel_release(m);
        return H3S_OK;
    }
    if (sp < 1 || tp < 1)
        return h3s_fail(H3S_ERR_INVALID, "model_set_parallel: --sp %d and --tp %d must be at least 1", sp, tp);
    if ((int64_t)sp * tp != comm->size)
        return h3s_fail(H3S_ERR_INVALID, "model_set_parallel: --sp %d x --tp %d = %lld ranks, but the world has %d", sp,
                        tp, (long long)sp * tp, comm->size);
    if (comm->device)
        return h3s_fail(H3S_ERR_UNSUPPORTED,
                        "model_set_parallel: the parallel passes run over host memory: give an MPI "
                        "communicator, not a %s one",
                        comm->ops ? comm->ops->name : "device");
    if (m->kind != H3S_BACKEND_CPU)
        return h3s_fail(H3S_ERR_UNSUPPORTED,
                        "model_set_parallel: parallel execution runs on the strict CPU backend only "
                        "(this model is %s)",
                        h3s_backend_name(m->kind));
    if (!m->w) return H3S_OK; /* h3s_set_parallel's check of the arguments alone */
    parallel_release(m);
    m->par_gen++;
    /* rank = sequence-parallel rank * tp + tensor-parallel rank: a tensor-parallel group holds the same rows */
    int sp_rank = comm->rank / tp, tp_rank = comm->rank % tp;
    h3s_status st = H3S_OK;
    if (tp == 1) {
        m->spc = sp > 1 ? comm : NULL;
    } else if (sp == 1) {
        m->tpc = comm;
    } else {
        st = h3s_comm_split(comm, tp_rank, sp_rank, &m->spc);
        m->own_spc = m->spc != NULL;
        if (st == H3S_OK) st = h3s_comm_split(comm, sp_rank, tp_rank, &m->tpc);
        m->own_tpc = m->tpc != NULL;
    }
    m->comm = comm;
    m->sp = sp;
    m->tp = tp;
    if (st == H3S_OK && tp > 1) st = tp_setup(m);
    if (st != H3S_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", h3s_last_error());
        parallel_release(m);
        return h3s_fail(st, "%s", msg);
    }
    return H3S_OK;
}

h3s_status h3s_set_parallel(h3s_comm *comm, int sp, int tp) {
    if (!comm) {
        g_default_comm = NULL;
        g_default_sp = g_default_tp = 1;
        return H3S_OK;
    }
    /* the same checks a model makes, on a model of no weights */
    h3s_model probe;
    memset(&probe, 0, sizeof probe);
    probe.kind = H3S_BACKEND_CPU;
    H3S_TRY(h3s_model_set_parallel(&probe, comm, sp, tp));
    g_default_comm = comm;
    g_default_sp = sp;
    g_default_tp = tp;
    return H3S_OK;
}

h3s_status h3s_model_set_sp_slices(h3s_model *m, const int64_t *sizes, int64_t n) {
    if (!m || (n && !sizes) || n < 0) return h3s_fail(H3S_ERR_INVALID, "model_set_sp_slices: bad arguments");
    free(m->sp_sizes);
    m->sp_sizes = NULL;
    m->sp_nsizes = 0;
    if (!n) return H3S_OK;
    m->sp_sizes = h3s_malloc((size_t)n, sizeof *sizes);
    if (!m->sp_sizes) return H3S_ERR_NOMEM;
    memcpy(m->sp_sizes, sizes, (size_t)n * sizeof *sizes);
    m->sp_nsizes = n;
    return H3S_OK;
}

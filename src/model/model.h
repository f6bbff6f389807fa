/* The whole MiniMax-H3 transformer as a graph of named nodes: forward, backward, node hooks.
 *
 * One graph serves every backend: the backend only decides the dtypes and the memory the
 * nodes' tensors live in (strict CPU: BF16 activations / F32 gradients in host memory;
 * golden: F64 everywhere; CUDA: strict dtypes in device memory).  Every activation the
 * backward needs is kept on the tape (no recomputation); see docs/ARCHITECTURE.md for the
 * memory this costs. */
#ifndef H3S_MODEL_H
#define H3S_MODEL_H

#include "h3s.h"
#include "io/modeldir.h"
#include "model/config.h"

typedef enum h3s_backend_kind { H3S_BACKEND_CPU = 0, H3S_BACKEND_GOLDEN = 1, H3S_BACKEND_CUDA = 2 } h3s_backend_kind;
const char *h3s_backend_name(h3s_backend_kind kind);

/* The forward arguments, host tensors, under their diffusers names (docs/cli.md). */
typedef struct h3s_inputs {
    h3s_tensor hidden_states;         /* [B, Nv, video_width] F32 or BF16 */
    h3s_tensor audio_hidden_states;   /* [B, Na, audio_in_channels] F32 or BF16 */
    h3s_tensor encoder_hidden_states; /* [B, Nt, text_dim] F32 or BF16 */
    h3s_tensor timestep;              /* [T] F32, BF16 or F64 */
    h3s_tensor timestep_indices;      /* [S] I64 */
    h3s_tensor token_tags;            /* [S] I64 */
    h3s_tensor position_ids;          /* [S, 3] F64 or F32 */
    h3s_tensor video_indices;         /* [Nv] I64 */
    h3s_tensor audio_indices;         /* [Na] I64 */
    h3s_tensor text_indices;          /* [Nt] I64 */
    h3s_tensor attention_mask;        /* optional [B, S] or [B, 1, 1, S] BOOL; data == NULL when absent */
} h3s_inputs;

/* Fill `in` with views of the tensors of a safetensors file (names as docs/cli.md); the file
 * must stay open while `in` is used. */
struct h3s_st_file;
h3s_status h3s_inputs_from_file(const struct h3s_st_file *f, h3s_inputs *in);
/* Check every shape, dtype and index of `in` against the config (fail-closed); B out. */
h3s_status h3s_inputs_validate(const h3s_config *c, const h3s_inputs *in, int64_t *batch);

/* Called after every node, in execution order (forward, then backward), with the node's
 * name and its output.  `batched` is 1 when the output's rows are [B * rows_per_item]
 * (so item 0 is the first rows_per_item rows), 0 when it has no batch axis (tables,
 * parameter gradients).  The hook may read the tensor; a test-only hook may modify it
 * (planted drift).  Returning non-OK aborts the pass with that status. */
typedef h3s_status (*h3s_node_hook)(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item);

typedef struct h3s_model h3s_model;
/* Prepare the weights for a backend (golden: F64 copies; CUDA: uploaded once). */
h3s_status h3s_model_create(const h3s_weights *w, h3s_backend_kind kind, h3s_model **out);
void h3s_model_free(h3s_model *m);
const h3s_config *h3s_model_config(const h3s_model *m);
h3s_backend_kind h3s_model_backend(const h3s_model *m);

typedef struct h3s_tape h3s_tape;
void h3s_tape_free(h3s_tape *t);

/* Forward.  sample [B, Nv, video_width] and audio_sample [B, Na, audio_in] are allocated by
 * the call as host tensors (F32 strict, F64 golden).  When tape != NULL the activations
 * are kept for h3s_model_backward. */
h3s_status h3s_model_forward(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx, h3s_tape **tape,
                             h3s_tensor *sample, h3s_tensor *audio_sample);

/* Gradients: the three input gradients and one entry per parameter, in canonical order. */
typedef struct h3s_grads {
    h3s_tensor hidden_states, audio_hidden_states, encoder_hidden_states; /* shapes of the inputs */
    int64_t count;
    char (*names)[160];
    h3s_tensor *params; /* host tensors, F32 strict / F64 golden, checkpoint shapes */
} h3s_grads;
void h3s_grads_free(h3s_grads *g);

/* Backward from the cotangents (host tensors shaped like sample / audio_sample, F32 or
 * F64).  Consumes nothing: the tape can be freed afterwards. */
h3s_status h3s_model_backward(h3s_model *m, h3s_tape *tape, const h3s_tensor *d_sample,
                              const h3s_tensor *d_audio_sample, h3s_node_hook hook, void *hook_ctx, h3s_grads *out);

#endif

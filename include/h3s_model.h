/* h3strict public API: the MiniMax-H3 transformer -- configuration, weights, a model resident on a backend,
 * forward, backward with a choice of gradients, node hooks.
 *
 * Ownership: every handle (h3s_weights, h3s_model, h3s_tape) is created by one call and released by its _free
 * (NULL is accepted); tensors that a call allocates for the caller (outputs, gradients) are owned by the caller
 * and released with h3s_tensor_free / h3s_grads_free.  Input tensors are borrowed for the duration of the call.
 * Every call that can fail returns h3s_status, leaves a one-line message for h3s_last_error() and writes none of
 * its outputs.  A model may be used by one thread at a time (the run options of h3s.h are process-wide).
 * Results never depend on the thread count (h3s_set_num_threads), the batch size or an item's slot in the batch
 * (docs/strict.md). */
#ifndef H3S_PUBLIC_MODEL_H
#define H3S_PUBLIC_MODEL_H

#include "h3s.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ configuration
 * The diffusers config.json of MiniMaxH3Transformer3DModel (docs/model.md section 1). */
typedef struct h3s_config {
    int64_t num_attention_heads, attention_head_dim, hidden_size, num_layers, num_refiner_layers, ffn_dim;
    int64_t in_channels, audio_in_channels, patch_size[3], text_dim, freq_dim, time_embed_hidden_dim, time_embed_dim;
    int64_t rope_freq_dim;
    double rope_theta, norm_eps, qk_norm_eps, final_norm_eps;
} h3s_config;

/* Width of one packed video row: in_channels * pt * ph * pw (96 for the released model). */
H3S_API int64_t h3s_config_video_width(const h3s_config *c);
/* Named presets: "h3-33b" (the released geometry), "small", "tiny" (the built-in test model).  layers = -1 keeps
 * the preset's depth, otherwise it must be >= 1. */
H3S_API h3s_status h3s_config_preset(const char *name, int64_t layers, h3s_config *out);

/* The config as diffusers writes config.json: pretty JSON, keys sorted, with "_class_name":
 * "MiniMaxH3Transformer3DModel".  *out_text is the caller's (h3s_free).  Its SHA-256 names a geometry in reports. */
H3S_API h3s_status h3s_config_to_json(const h3s_config *c, char **out_text);

/* The parameter table of a config (docs/model.md section 2): every checkpoint tensor's name, dtype and shape, in
 * canonical order.  The config is validated first; *out (count entries) is the caller's (h3s_free). */
typedef struct h3s_param_spec {
    char name[160];
    h3s_dtype dtype;
    int ndim;
    int64_t shape[2];
} h3s_param_spec;
H3S_API h3s_status h3s_param_specs(const h3s_config *c, h3s_param_spec **out, int64_t *count);
/* Elements of one parameter (the product of its shape; 0 for NULL). */
H3S_API int64_t h3s_param_spec_numel(const h3s_param_spec *p);

/* ------------------------------------------------------------------ weights */
typedef struct h3s_weights h3s_weights;

/* Load a model directory in diffusers layout (config.json and diffusion_pytorch_model.safetensors, or shards
 * listed by diffusion_pytorch_model.safetensors.index.json), or a pipeline snapshot whose transformer/ subfolder
 * is one.  Every tensor is checked against the parameter table (a missing, extra, mis-shaped or mis-typed tensor
 * is an error naming it).  The tensors stay in their checkpoint dtype, mapped read-only from the files. */
H3S_API h3s_status h3s_weights_load(const char *dir, h3s_weights **out);
/* In-memory weights of a config, seeded exactly as h3s_model_init writes them (no file involved). */
H3S_API h3s_status h3s_weights_create(const h3s_config *c, uint64_t seed, h3s_weights **out);
H3S_API void h3s_weights_free(h3s_weights *w);
H3S_API const h3s_config *h3s_weights_config(const h3s_weights *w);
/* The tensor of a checkpoint name (borrowed, valid while w lives); NULL if absent. */
H3S_API const h3s_tensor *h3s_weights_get(const h3s_weights *w, const char *name);
/* Parameters in canonical order (the order PyTorch registers them): count, and the i-th with its name
 * (borrowed); NULL if i is out of range. */
H3S_API int64_t h3s_weights_count(const h3s_weights *w);
H3S_API const h3s_tensor *h3s_weights_at(const h3s_weights *w, int64_t i, const char **name);
/* The directory holding config.json (the directory given or its transformer/); NULL for in-memory weights. */
H3S_API const char *h3s_weights_dir(const h3s_weights *w);

/* Write a seeded model directory (config.json + diffusion_pytorch_model.safetensors) of a preset, atomically;
 * byte-reproducible from (preset, layers, seed).  See docs/cli.md, `h3strict init`. */
H3S_API h3s_status h3s_model_init(const char *preset, int64_t layers, uint64_t seed, const char *out_dir);
/* The same for any config, calling progress(ctx, bytes written, total bytes) after every piece of the weights (about
 * 4 MiB; progress may be NULL).  The weights are generated and written in bounded pieces: memory use does not grow
 * with the model.  out_dir may be absent, an empty directory, or a model directory of this project's shape (then
 * swapped with the new one atomically; if something was put into it while the new model was written, it is swapped
 * back as it is then and the call fails with H3S_ERR_INVALID); anything else is H3S_ERR_INVALID and nothing is
 * touched. */
typedef void (*h3s_init_progress_fn)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
H3S_API h3s_status h3s_model_init_config_progress(const h3s_config *c, uint64_t seed, const char *out_dir,
                                                  h3s_init_progress_fn progress, void *progress_ctx);

/* Verify a model directory (or a pipeline snapshot): config.json and every weights file (every shard) open and
 * validate, and the tensors match the parameter table.  With manifest_path (a JSON object {file: sha256hex}, files
 * relative to the directory holding config.json or to dir) every listed file must be a regular file with that SHA-256,
 * and config.json, the index when sharded and every weights file must be listed; a difference is H3S_ERR_MISMATCH
 * naming the file.  On success *report (report may be
 * NULL) receives a human summary, the caller's (h3s_free); on failure it is untouched. */
H3S_API h3s_status h3s_model_verify(const char *dir, const char *manifest_path, char **report);
/* Write the manifest of a model directory: the SHA-256 of config.json, the index (if any) and every weights file,
 * keys relative to the directory holding config.json, sorted.  The model is verified first; written atomically. */
H3S_API h3s_status h3s_model_manifest_write(const char *dir, const char *manifest_path);

/* ------------------------------------------------------------------ backends */
typedef enum h3s_backend_kind {
    H3S_BACKEND_CPU = 0,    /* strict CPU: BF16 activations, F32 accumulation and gradients */
    H3S_BACKEND_GOLDEN = 1, /* FP64 reference of the same graph */
    H3S_BACKEND_CUDA = 2    /* strict CUDA (sm_90a): weights and activations in device memory */
} h3s_backend_kind;
/* "cpu-strict", "cpu-golden-f64", "cuda-strict". */
H3S_API const char *h3s_backend_name(h3s_backend_kind kind);
/* "cpu", "golden" or "cuda" -> the kind; H3S_ERR_INVALID otherwise. */
H3S_API h3s_status h3s_backend_parse(const char *name, h3s_backend_kind *kind);
/* H3S_OK when this build and machine can run the backend; else H3S_ERR_DEVICE with the reason (no CUDA backend
 * in this build and why, no GPU, an architecture the build does not contain). */
H3S_API h3s_status h3s_backend_check(h3s_backend_kind kind);
/* One line naming the CUDA device for reports (its name, compute capability, SMs, memory, driver and runtime
 * versions) into buf (at most size - 1 bytes and a NUL).  When there is none to describe (no CUDA backend in this
 * build, no GPU) buf receives "unavailable: <reason>" and the status is H3S_ERR_DEVICE; buf NULL or size 0 is
 * H3S_ERR_INVALID. */
H3S_API h3s_status h3s_cuda_describe(char *buf, size_t size);

/* ------------------------------------------------------------------ inputs
 * The forward arguments under their diffusers names, host tensors, contiguous row-major (docs/cli.md). */
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

/* Read an inputs file (safetensors with the tensors above under their names, as `h3strict inputs` writes): every
 * tensor is copied into memory `out` owns (release with h3s_inputs_free).  Unknown or missing tensors are errors;
 * the values are checked by the forward (or h3s_inputs_validate). */
H3S_API h3s_status h3s_inputs_read(const char *path, h3s_inputs *out);
/* Release the tensors an h3s_inputs owns (those with owns_data set); the struct is zeroed.  NULL is fine. */
H3S_API void h3s_inputs_free(h3s_inputs *in);

/* Check every shape, dtype and index of `in` against the config (what every forward checks first); B out.  Every
 * tensor is host memory (a device tensor is H3S_ERR_INVALID: the host reads every index and value before any
 * work), has no negative dim (H3S_ERR_SHAPE) and has data for its elements (NULL data is H3S_ERR_INVALID unless it
 * holds none); every float value is finite.  H3S_ERR_INVALID for a NULL argument. */
H3S_API h3s_status h3s_inputs_validate(const h3s_config *c, const h3s_inputs *in, int64_t *batch);

/* ------------------------------------------------------------------ node hooks
 * Called after every node, in execution order (forward, then backward), with the node's name (docs/strict.md
 * section 4; backward nodes "<node>.grad", parameter gradients "param.<checkpoint name>") and its output, which
 * may live in device memory (out->device).  `batched` is 1 when the rows are [B * rows_per_item] (item 0 is the
 * first rows_per_item rows), 0 for tensors without a batch axis.  The tensor is borrowed for the call and must
 * not be modified; returning non-OK aborts the pass with that status, and with the hook's own message
 * (h3s_set_error) or, when it set none, one naming the node. */
typedef h3s_status (*h3s_node_hook)(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item);

/* ------------------------------------------------------------------ the resident model */
typedef struct h3s_model h3s_model;

/* Load flags. */
#define H3S_LOAD_OWN_WEIGHTS 1u /* copy the CPU weights into memory the model owns (writable, see h3s_model_param) */

/* Load a model directory (as h3s_weights_load) and make it resident on a backend: CPU weights stay mapped from
 * the files (or are copied with H3S_LOAD_OWN_WEIGHTS), golden weights are F64 copies, CUDA weights are uploaded
 * once.  The model owns everything it loaded.  An unknown backend kind is H3S_ERR_INVALID (h3s_model_create too). */
H3S_API h3s_status h3s_model_load(const char *dir, h3s_backend_kind kind, unsigned flags, h3s_model **out);
/* A model over weights the caller keeps: on the CPU backend the model borrows the weights' memory, so `w` must
 * outlive the model; other backends copy. */
H3S_API h3s_status h3s_model_create(const h3s_weights *w, h3s_backend_kind kind, h3s_model **out);
H3S_API void h3s_model_free(h3s_model *m);
/* The model's config (borrowed, valid while m lives); NULL for NULL. */
H3S_API const h3s_config *h3s_model_config(const h3s_model *m);
/* The model's backend; (h3s_backend_kind)-1, no backend, for NULL. */
H3S_API h3s_backend_kind h3s_model_backend(const h3s_model *m);
/* The resident parameters in canonical order: count, and a borrowed view of the i-th (host memory, or device
 * memory when view->device is 1), with its checkpoint name, shape and dtype.  The memory is the one every pass
 * reads: writing to it between passes (an optimizer step) changes the model; that is allowed only for CPU models
 * loaded with H3S_LOAD_OWN_WEIGHTS and for CUDA models, and never while a pass runs or a tape from before the
 * write is still to be used by h3s_model_backward. */
H3S_API int64_t h3s_model_param_count(const h3s_model *m);
H3S_API h3s_status h3s_model_param(const h3s_model *m, int64_t i, const char **name, h3s_tensor *view);

/* The activations a forward keeps for its backward.  A tape holds a reference to its model's memory meter, so it
 * may be freed before or after the model; it is used with the model that made it only. */
typedef struct h3s_tape h3s_tape;
H3S_API void h3s_tape_free(h3s_tape *t);

/* ------------------------------------------------------------------ memory plan
 * Per-block activation recomputation (docs/ARCHITECTURE.md, "The graph and its tape").  With
 * H3S_RECOMPUTE_BLOCKS a forward that makes a tape keeps, of every transformer block and every token-refiner
 * block, only the block's input (one BF16 row of the hidden width per packed row; the rope tables, the time
 * embedding and the index tensors are the tape's own and stay); the backward runs each block's forward again (the
 * same code path, the same kernels, without the node hook) into a scratch arena just before that block's backward
 * and releases it after.  The gradients, and every node the hook sees in the backward, are bit-identical to the
 * run without recomputation (tests/test_recompute.c); the hook sees each forward node once, in the forward.  The
 * mode is the model's and applies to the forwards made after the call; a tape remembers the mode it was made
 * with, so a backward always matches its forward.  It combines with h3s_model_set_parallel (every rank runs the
 * recomputation at the same point, so its collectives pair up as in the forward; byte-identical to one process,
 * tests/test_sp.c), with every backend (the block code is the CPU and CUDA backends' shared graph) and with
 * h3s_model_backward_select.  Whatever the mode, a block's backward releases its own temporaries when it ends:
 * the backward holds one block's gradients at a time. */
typedef enum h3s_recompute {
    H3S_RECOMPUTE_NONE = 0,  /* every activation a backward needs stays on the tape (the default) */
    H3S_RECOMPUTE_BLOCKS = 1 /* each block keeps its input; its forward runs again in the backward */
} h3s_recompute;
/* "none" or "blocks" -> the mode; H3S_ERR_INVALID (naming what was given) otherwise. */
H3S_API h3s_status h3s_recompute_parse(const char *name, h3s_recompute *out);
/* Set the mode for the model's next forwards; H3S_ERR_INVALID for a NULL model or an unknown mode. */
H3S_API h3s_status h3s_model_set_recompute(h3s_model *m, h3s_recompute mode);
/* The mode of every model created from now on in this process (h3s_model_create, h3s_model_load, and the models
 * h3s_trajectory and the replay create), process-wide like the thread count; H3S_RECOMPUTE_NONE until set.
 * H3S_ERR_INVALID for an unknown mode. */
H3S_API h3s_status h3s_set_recompute(h3s_recompute mode);
/* The model's mode (H3S_RECOMPUTE_NONE for NULL). */
H3S_API h3s_recompute h3s_model_recompute(const h3s_model *m);
/* Bytes of the tensors the model's passes hold in backend memory (device memory on CUDA, host memory otherwise):
 * activations on tapes, the backward's temporaries and its parameter gradients before they are handed to the
 * caller.  Not counted: the weights, the caller's outputs (sample, gradients on the host), index tensors, the
 * CUDA kernels' own workspace and index cache.  live: now (tapes still held count); peak: the most since the model
 * was created or the last h3s_model_reset_peak_bytes.  0 for NULL. */
H3S_API int64_t h3s_model_live_bytes(const h3s_model *m);
H3S_API int64_t h3s_model_peak_bytes(const h3s_model *m);
/* Start a new peak from the bytes live now. */
H3S_API void h3s_model_reset_peak_bytes(h3s_model *m);

/* Forward.  sample [B, Nv, video_width] and audio_sample [B, Na, audio_in_channels] are allocated by the call as
 * host tensors (F32 strict, F64 golden) owned by the caller; on failure (a hook's status included) both structs are
 * left as they were.  hook may be NULL.  When tape != NULL the
 * activations are kept for h3s_model_backward (the caller frees *tape); the inputs are copied where needed, so
 * they may be released after the call. */
H3S_API h3s_status h3s_model_forward(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx,
                                     h3s_tape **tape, h3s_tensor *sample, h3s_tensor *audio_sample);
/* The same forward, its outputs written into the caller's tensors: sample [B, Nv, video_width] and audio_sample
 * [B, Na, audio_in_channels] (F32 strict, F64 golden), each host memory or, on a CUDA model, device memory of the
 * library's device (device == 1: a device pointer the caller owns, e.g. a torch CUDA tensor's), so that a caller
 * training on the GPU gets its outputs without a round trip through the host.  The bytes are those
 * h3s_model_forward returns.  Dtype, shape, placement (a device tensor's memory is checked with the CUDA runtime)
 * and overlap (with every input and with each other) are checked before any work; on an error their contents are
 * unspecified.  The outputs are ready when the call returns (the library's stream has been synchronised). */
H3S_API h3s_status h3s_model_forward_into(h3s_model *m, const h3s_inputs *in, h3s_node_hook hook, void *hook_ctx,
                                          h3s_tape **tape, h3s_tensor *sample, h3s_tensor *audio_sample);

/* Gradients: the three input gradients and one entry per parameter, in canonical order.  A parameter whose
 * gradient was not requested has params[i].data == NULL (no memory, no computation). */
typedef struct h3s_grads {
    h3s_tensor hidden_states, audio_hidden_states, encoder_hidden_states; /* shapes of the inputs; host tensors (device
                                                                           * ones with h3s_model_set_device_grads) */
    int64_t count;
    char (*names)[160];
    h3s_tensor *params; /* host tensors (device ones with h3s_model_set_device_grads), F32 strict (BF16 ones with
                         * h3s_model_set_grad_dtype) / F64 golden, checkpoint shapes */
    /* With device gradients (h3s_model_set_device_grads): one device allocation holding every requested parameter
     * gradient, a 1-D F32 tensor; params[i] are views into it (owns_data 0), each starting a multiple of 256 bytes
     * from its start, in canonical order, so that a caller can view the block once and slice it.  Empty (data NULL)
     * otherwise.  h3s_grads_free releases it. */
    h3s_tensor block;
} h3s_grads;
H3S_API void h3s_grads_free(h3s_grads *g);

/* Where the backward hands the parameter gradients over.  on = 0 (the default): host tensors, as above.  on = 1:
 * on a CUDA model, the gradients stay in the device memory the pass computed them in and are handed over as they
 * are (params[i].device == 1, params[i].data a device pointer; no copy to the host and no host memory), for a
 * caller that trains on the GPU (the PyTorch binding sets it for its CUDA models).  The three input gradients are then
 * device tensors as well (copied out of the backward's memory, device == 1), so that none of them goes through the
 * host unless the caller moves it.  The bits are the same either way.  CPU and golden models are not affected.  Once
 * handed over, device gradients are the caller's and no longer counted by h3s_model_live_bytes; h3s_grads_free releases
 * them, after waiting for all work on the device (other streams may still be reading them).  The parameters' device
 * gradients are views into h3s_grads.block (owns_data 0): none may be kept past h3s_grads_free.  H3S_ERR_INVALID for
 * a NULL model. */
H3S_API h3s_status h3s_model_set_device_grads(h3s_model *m, int on);
/* 1 when the model's backward hands device gradients over (a CUDA model with h3s_model_set_device_grads on). */
H3S_API int h3s_model_device_grads(const h3s_model *m);

/* How a backward with device gradients ends (a CUDA model with h3s_model_set_device_grads on; other models are not
 * affected and always return finished work).  on = 0 (the default): h3s_model_backward(_select) returns once the
 * device has done the pass and its kernels' index checks have been read, so every gradient is ready and every error
 * is the call's.  on = 1 (deferred): the call returns as soon as the pass is queued on the library's stream
 * (h3s_device_stream), having checked everything the host can check; the gradients it hands over are then being
 * written.  The caller orders any work that reads them after that stream (an event, or torch's wait_stream) and
 * calls h3s_model_finish before it relies on the pass: that waits for the stream and returns the error a device
 * kernel of the pass reported (H3S_ERR_INDEX, H3S_ERR_DEVICE).  The model's next pass, h3s_model_free and turning the
 * mode off finish a pending backward first (a pass then returns the pending error, and does no work).  The bits
 * are the same in both modes.  H3S_ERR_INVALID for a NULL model. */
H3S_API h3s_status h3s_model_set_deferred_backward(h3s_model *m, int on);
/* 1 when the mode is on. */
H3S_API int h3s_model_deferred_backward(const h3s_model *m);
/* 1 while a deferred backward has not been finished. */
H3S_API int h3s_model_pending(const h3s_model *m);
/* Wait for the model's deferred backward, if one is pending, and return its device error (H3S_OK when none is
 * pending).  The pending state is cleared either way.  H3S_ERR_INVALID for a NULL model. */
H3S_API h3s_status h3s_model_finish(h3s_model *m);

/* The dtype of the parameter gradients the backward hands over.  H3S_F32 (the default): every gradient in F32.
 * H3S_BF16: a parameter stored in BF16 gets its gradient in BF16, the F32 gradient rounded once to nearest even (bit
 * for bit what rounding the F32 result gives; the F32 parameters' gradients stay F32); half the memory, and on a CUDA
 * model the blocks' weight-gradient GEMMs round as they store, so the F32 gradients of those weights are never
 * written.  This is what a torch user gets for a BF16 parameter's .grad.  H3S_ERR_DTYPE for another dtype,
 * H3S_ERR_UNSUPPORTED with BF16 on the golden model (its gradients are F64), H3S_ERR_INVALID for a NULL model. */
H3S_API h3s_status h3s_model_set_grad_dtype(h3s_model *m, h3s_dtype dtype);
/* H3S_F32 or H3S_BF16 as set (H3S_F64 for the golden model). */
H3S_API h3s_dtype h3s_model_grad_dtype(const h3s_model *m);

/* Backward from the cotangents (host tensors shaped like sample / audio_sample; F32, BF16 or F64; finite; with
 * data), every parameter gradient into *out, which is written only on success (a failure, a hook's status
 * included, leaves it as it was; it is not freed first, so release an earlier result with h3s_grads_free).  On a CUDA
 * model a cotangent may also be a device tensor of the gradient dtype (F32), checked for NaN and infinities on the
 * device; it is copied in the library's stream order, so work of the caller's that writes it must be complete before
 * the call (torch.cuda.synchronize()).  The tape is not consumed: it may be used again, then freed. */
H3S_API h3s_status h3s_model_backward(h3s_model *m, h3s_tape *tape, const h3s_tensor *d_sample,
                                      const h3s_tensor *d_audio_sample, h3s_node_hook hook, void *hook_ctx,
                                      h3s_grads *out);
/* The same with a choice of parameter gradients: want_params[i] non-zero requests parameter i (canonical order,
 * h3s_model_param_count entries); NULL requests all.  The three input gradients are always returned.  A
 * requested gradient has exactly the bits h3s_model_backward gives it. */
H3S_API h3s_status h3s_model_backward_select(h3s_model *m, h3s_tape *tape, const h3s_tensor *d_sample,
                                             const h3s_tensor *d_audio_sample, const unsigned char *want_params,
                                             h3s_node_hook hook, void *hook_ctx, h3s_grads *out);

#ifdef __cplusplus
}
#endif
#endif

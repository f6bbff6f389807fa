/* Model directories in diffusers layout: loading (validated against the parameter table), seeded init, and
 * verification against a SHA-256 manifest.
 *
 * A model directory holds config.json and either diffusion_pytorch_model.safetensors or the shards listed by
 * diffusion_pytorch_model.safetensors.index.json ({"weight_map": {name: file}}).  A pipeline snapshot whose
 * transformer/ subfolder is such a directory is accepted wherever a model directory is. */
#ifndef H3S_IO_MODELDIR_H
#define H3S_IO_MODELDIR_H

#include <stdint.h>

#include "h3s.h"
#include "model/config.h"
#include "model/params.h"

#define H3S_MODEL_CONFIG_FILE "config.json"
#define H3S_MODEL_WEIGHTS_FILE "diffusion_pytorch_model.safetensors"
#define H3S_MODEL_INDEX_FILE "diffusion_pytorch_model.safetensors.index.json"

typedef struct h3s_weights h3s_weights;

/* Read config.json, then the single weights file or every shard of the index (every shard named must exist and
 * hold exactly the tensors mapped to it; both a single file and an index present is an error).  Every tensor is
 * checked against h3s_param_specs: a missing or extra parameter (H3S_ERR_FORMAT), a wrong dtype (H3S_ERR_DTYPE) or
 * shape (H3S_ERR_SHAPE) is an error naming the tensor.  Weights stay in their checkpoint dtype, mmap'd, no copy. */
h3s_status h3s_weights_load(const char *dir, h3s_weights **out);

/* In-memory weights holding exactly the values h3s_model_init_config(c, seed, ...) writes (no file involved). */
h3s_status h3s_weights_create(const h3s_config *c, uint64_t seed, h3s_weights **out);

const h3s_config *h3s_weights_config(const h3s_weights *w);
const h3s_tensor *h3s_weights_get(const h3s_weights *w, const char *name); /* NULL if absent */
/* Parameters in the canonical order of h3s_param_specs: count, and the i-th (NULL if out of range). */
int64_t h3s_weights_count(const h3s_weights *w);
const h3s_tensor *h3s_weights_at(const h3s_weights *w, int64_t i, const char **name);
/* The directory that holds config.json (dir itself or dir/transformer); NULL for in-memory weights. */
const char *h3s_weights_dir(const h3s_weights *w);
void h3s_weights_free(h3s_weights *w); /* NULL is fine */

/* Seeded init of a whole model directory: config.json + diffusion_pytorch_model.safetensors (parameters in the
 * canonical order).  Byte-reproducible: the same preset, layers and seed give identical files on every machine;
 * element i of parameter p is a function of (seed, h3s_rng_stream_id(p's name), i) alone.  Values are generated
 * and written in bounded chunks, so memory use does not grow with the model.
 *
 * Atomic: both files are written into a fresh temporary directory next to out_dir, then published by one rename.
 * out_dir may be absent or an empty directory.  An existing directory is overwritten only when it is a model
 * directory of this project's shape (regular files config.json and diffusion_pytorch_model.safetensors and nothing
 * else, config.json a valid MiniMax-H3 config); it is then swapped with the new one atomically (renameat2
 * RENAME_EXCHANGE; on file systems without it the two files are renamed into place one by one, each atomically).
 * Anything else (other files, shards, a non-directory) is H3S_ERR_INVALID and nothing is touched. */
h3s_status h3s_model_init(const char *preset, int64_t layers, uint64_t seed, const char *out_dir);
h3s_status h3s_model_init_config(const h3s_config *c, uint64_t seed, const char *out_dir);
/* Same, calling progress(ctx, bytes written, total bytes) after every piece of the weights (about 4 MiB). */
typedef void (*h3s_init_progress_fn)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
h3s_status h3s_model_init_config_progress(const h3s_config *c, uint64_t seed, const char *out_dir,
                                          h3s_init_progress_fn progress, void *progress_ctx);

/* Verify: config.json and every weights file (every shard) open and validate, and the tensors match the parameter
 * table (as h3s_weights_load).  When manifest_path != NULL it is a JSON object {file: sha256hex}; a file is a path
 * relative to the directory holding config.json, or relative to dir itself (so a snapshot's manifest may say
 * "transformer/..."); every listed file must exist with that SHA-256 and every weights file (every shard) must be
 * listed.  A difference is H3S_ERR_MISMATCH naming the file.  On success `report` (may be NULL) receives a malloc'd
 * human summary; on failure it is left untouched. */
h3s_status h3s_model_verify(const char *dir, const char *manifest_path, char **report);

/* Write a manifest for the model directory: SHA-256 of config.json, the index (if any) and every weights file,
 * keys relative to the directory holding config.json, sorted.  The model is verified first; written atomically. */
h3s_status h3s_model_manifest_write(const char *dir, const char *manifest_path);

/* SHA-256 of a whole file, read in bounded pieces. */
h3s_status h3s_file_sha256_hex(const char *path, char out_hex[65]);

#endif

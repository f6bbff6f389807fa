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
#include "h3s_model.h"
#include "model/config.h"
#include "model/params.h"

#define H3S_MODEL_CONFIG_FILE "config.json"
#define H3S_MODEL_WEIGHTS_FILE "diffusion_pytorch_model.safetensors"
#define H3S_MODEL_INDEX_FILE "diffusion_pytorch_model.safetensors.index.json"

/* h3s_weights and its load / create / accessors / free are public (include/h3s_model.h). */

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
/* h3s_model_init(preset, layers, seed, out_dir) (public) is this for a named preset. */
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

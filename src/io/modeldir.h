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

/* Remove the entries of a directory without subdirectories, then the directory (best effort): init's temporary
 * directory, by init itself on failure and by h3s_io_remove_temporaries. */
void h3s_io_remove_tree_flat(const char *dir);

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
 * Anything else (other files, shards, a non-directory) is H3S_ERR_INVALID and nothing is touched.  An out_dir
 * ending in "." or ".." is resolved to its real path first.  What replaces an existing directory (and, over a model,
 * each file) keeps its permission bits; the new directory is private while the model is written
 * (docs/numerics/io.md). */
/* h3s_model_init(preset, layers, seed, out_dir) (public) is this for a named preset; h3s_model_init_config_progress
 * (public, include/h3s_model.h) is this with a progress callback. */
h3s_status h3s_model_init_config(const h3s_config *c, uint64_t seed, const char *out_dir);

/* h3s_model_verify, h3s_model_manifest_write and h3s_file_sha256_hex are public (include/h3s_model.h, h3s.h). */

#endif

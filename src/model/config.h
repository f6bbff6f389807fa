/* MiniMax-H3 transformer configuration: the diffusers `config.json` of MiniMaxH3Transformer3DModel
 * (docs/model.md section 1), its validation, and the named presets the CLI offers. */
#ifndef H3S_MODEL_CONFIG_H
#define H3S_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "h3s.h"
#include "h3s_model.h"

/* h3s_config, h3s_config_video_width and h3s_config_preset are public (include/h3s_model.h). */

/* Every size positive (num_refiner_layers may be 0), head_dim even, 6 * rope_freq_dim <= head_dim, freq_dim even,
 * theta and the epsilons finite and > 0, sizes small enough that every parameter's element count fits.
 * Failure: H3S_ERR_INVALID with the offending key named. */
h3s_status h3s_config_validate(const h3s_config *c);

#define H3S_CONFIG_CLASS_NAME "MiniMaxH3Transformer3DModel"

/* Parse a diffusers config.json.  Strict JSON (io/json.h: one value, nothing after it, no member named twice, no
 * control bytes; else H3S_ERR_FORMAT).  "_class_name" must be H3S_CONFIG_CLASS_NAME and every key of docs/model.md
 * section 1 is required; a wrong JSON type is an error naming the key (H3S_ERR_INVALID); other keys
 * ("_diffusers_version", ...) are ignored; then validated. */
h3s_status h3s_config_parse_json(const char *text, size_t len, h3s_config *out);
h3s_status h3s_config_load(const char *path, h3s_config *out);

/* h3s_config_to_json (pretty JSON as diffusers writes it) is public (include/h3s_model.h). */

#endif

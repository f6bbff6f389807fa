/* The parameter table of MiniMax-H3 (docs/model.md section 2): every checkpoint tensor's name, shape and dtype, in
 * one canonical order (the order PyTorch registers the modules: proj_in, audio_proj_in, context_embedder,
 * time_embedder, token_refiner blocks and final_norm, transformer_blocks, norm_out, proj_out, audio_proj_out;
 * inside a block norm1, attn.to_q/to_k/to_v, attn.norm_q/norm_k, attn.to_out.0, norm2, ff.net.0.proj, ff.net.2,
 * adaln_proj.linear). */
#ifndef H3S_MODEL_PARAMS_H
#define H3S_MODEL_PARAMS_H

#include "h3s.h"
#include "model/config.h"

/* h3s_param_spec, h3s_param_specs (every parameter of a config in canonical order; the config is validated first;
 * F32 modules: proj_in, audio_proj_in, time_embedder, proj_out, audio_proj_out; everything else BF16) and
 * h3s_param_spec_numel are public (include/h3s_model.h). */

/* Number of parameters h3s_param_specs returns for this config (no validation; 0 for NULL). */
int64_t h3s_param_count(const h3s_config *c);

#endif

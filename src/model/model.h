/* The whole MiniMax-H3 transformer as a graph of named nodes: forward, backward, node hooks.
 *
 * One graph serves every backend: the backend only decides the dtypes and the memory the
 * nodes' tensors live in (strict CPU: BF16 activations / F32 gradients in host memory;
 * golden: F64 everywhere; CUDA: strict dtypes in device memory).  Every activation the
 * backward needs is kept on the tape, or, with h3s_model_set_recompute(m, H3S_RECOMPUTE_BLOCKS),
 * only each block's input, the block's forward running again in the backward; see
 * docs/ARCHITECTURE.md for the memory either costs. */
#ifndef H3S_MODEL_H
#define H3S_MODEL_H

#include "h3s.h"
#include "h3s_io.h"
#include "h3s_model.h"
#include "io/modeldir.h"
#include "model/config.h"

/* The public part (backend kinds, inputs, node hooks, the model, tape, forward, gradients, backward) is
 * include/h3s_model.h; what follows is internal. */

/* h3s_inputs_from_file (views of an open inputs file's tensors) is public (include/h3s_io.h). */

/* Sequence-parallel slice sizes for the next passes of a parallel model: rank r holds sizes[r] packed rows (n must
 * equal --sp and the sizes must sum to B*S, each >= 1, or the pass fails); n == 0 returns to the even split.  For
 * tests of uneven cuts. */
h3s_status h3s_model_set_sp_slices(h3s_model *m, const int64_t *sizes, int64_t n);
/* Bytes of tile partials a sequence-parallel rank holds at once for one weight gradient (default 256 MiB; the
 * gradient is folded in chunks of its rows that fit).  Process-wide; the bits never depend on it (for tests). */
h3s_status h3s_model_set_sp_fold_budget(int64_t bytes);

#endif

/* The engine's runner over a model folder or a synthetic:ARCH spec on the CPU backend
 * (see runner.h for the contract). The KV pool's rows: engine/forward.h. */
#ifndef NB_ENGINE_MODEL_RUNNER_H
#define NB_ENGINE_MODEL_RUNNER_H

#include "engine/runner.h"

/* Load `spec` (folder or synthetic:...) with `threads` CPU threads (0: all cores) and a KV
 * pool whose MLA latent rows are kept as `kv` says (nibble.h; NB_ERR_INVALID_ARG for bfloat16
 * on a model without MLA). A synthetic model whose weights would exceed max_weight_bytes (> 0)
 * is refused with NB_ERR_OUT_OF_MEMORY before anything is generated. */
nb_status nb_model_runner_create(const char *spec, int threads, nb_kv_cache_dtype kv, double max_weight_bytes,
                                 nb_runner **out);

#endif

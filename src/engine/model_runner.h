/* The engine's runner over a model folder or a synthetic:ARCH spec on the CPU backend
 * (see runner.h for the contract). The KV pool is float32 rows (engine/forward.h). */
#ifndef NB_ENGINE_MODEL_RUNNER_H
#define NB_ENGINE_MODEL_RUNNER_H

#include "engine/runner.h"

/* Load `spec` (folder or synthetic:...) with `threads` CPU threads (0: all cores). A
 * synthetic model whose weights would exceed max_weight_bytes (> 0) is refused with
 * NB_ERR_OUT_OF_MEMORY before anything is generated. */
nb_status nb_model_runner_create(const char *spec, int threads, double max_weight_bytes, nb_runner **out);

#endif

/* The engine's runner on one GPU (see runner.h for the contract; cuda_runner.c). */
#ifndef NB_ENGINE_CUDA_RUNNER_H
#define NB_ENGINE_CUDA_RUNNER_H

#include "engine/runner.h"

/* Load `spec` (folder or synthetic:...), copy its weights to GPU `device` and make a runner
 * whose KV pool lives there. *kv_budget_bytes: the GPU's memory (the runner's weight_bytes is
 * all device memory in use once the model is resident, so the engine's budget * fraction -
 * weights leaves the rest to the KV pool). mem_fraction is unused here. NB_ERR_CUDA /
 * NB_ERR_UNSUPPORTED without a GPU or a CUDA build. */
nb_status nb_cuda_runner_create(const char *spec, int device, double mem_fraction, nb_runner **out,
                                double *kv_budget_bytes);

/* The pieces of the runner, for nibble score and tests: the host-bound model and its device
 * twin (cfg / ck / owns_cfg are filled for synthetic specs, to be freed after both models). */
nb_status nb_cuda_model_load(const char *spec, int device, nb_model **host, nb_model **dev, nb_model_config *cfg,
                             nb_checkpoint **ck, int *owns_cfg);

/* A KV pool (engine/forward.h layout) in the memory of `ops`'s backend, zeroed. */
nb_status nb_kv_pool_init_on(nb_kv_pool *pool, const nb_model_config *cfg, int64_t n_slots, nb_ops_ctx *ops);
void nb_kv_pool_free_on(nb_kv_pool *pool, nb_ops_ctx *ops);

#endif

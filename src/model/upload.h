/* Weights to the GPU: a device twin of a bound model. Every checkpoint tensor is copied once
 * into the memory of `ctx`'s device (through the backend's upload, pinned staging on CUDA),
 * with a progress bar; every nb_weight, norm vector and bias of the twin points into that
 * copy, and its ops context is `ctx`, so nb_forward runs the same recipe on the device.
 * NVFP4 routed experts whose shapes tile are also registered in their repacked form for the
 * MoE kernels (ops/cuda/cuda_ops.h; repacked on the device from the uploaded copies, or on the
 * host with NIBBLE_MOE_REPACK=host), unless NIBBLE_CUDA_MOE=generic. Synthetic models
 * can skip the host copy altogether (nb_model_upload_deferred).
 * Exercised by the CUDA runner (engine/cuda_runner.c), nibble score --backend cuda and
 * tests/cuda_ops/test_cuda_forward.c. */
#ifndef NB_MODEL_UPLOAD_H
#define NB_MODEL_UPLOAD_H

#include "model/model.h"

/* `host` must stay alive (its checkpoint and config are shared) until the twin is freed.
 * The twin takes ownership of ctx. NB_ERR_OUT_OF_MEMORY when the device is full. */
nb_status nb_model_upload(const nb_model *host, nb_ops_ctx *ctx, nb_model **out);
/* The same for a model bound on a deferred synthetic checkpoint (model/synthetic.h): every
 * deferred tensor is generated straight into device memory (its host bytes are never read)
 * and the NVFP4 experts are repacked on the device, so nothing of the model's size is ever
 * resident on the host. The twin does not own `plan`; it is only used during the call. */
struct nb_synth_deferred;
nb_status nb_model_upload_deferred(const nb_model *host, const struct nb_synth_deferred *plan, nb_ops_ctx *ctx,
                                   nb_model **out);
/* Free the twin, its device memory and its context (not the host model). */
void nb_model_upload_free(nb_model *dev);

#endif

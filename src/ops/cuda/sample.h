/* GPU sampling: the CUDA backend of nb_op_sample (ops.h), dispatched by ops/ops.c. Semantics
 * and arithmetic are those of the CPU op (ops/cpu/sample.c, ops/sample_math.h); the kernel is
 * in ops/cuda/sample.cu. Test: tests/cuda_ops/test_cuda_sample.c. */
#ifndef NB_OPS_CUDA_SAMPLE_H
#define NB_OPS_CUDA_SAMPLE_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues one block per row on the context's stream; no host synchronization. The raw values
 * of penalized tokens go to hist->raw, or (NULL) to scratch slot 0 (hist->n_entries floats). */
nb_status nb_cuda_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                         const nb_sample_hist *hist, nb_sample_out *out);

#ifdef __cplusplus
}
#endif
#endif

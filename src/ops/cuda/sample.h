/* GPU sampling: the CUDA backend of nb_op_sample (ops.h), dispatched by ops/ops.c. Semantics
 * and arithmetic are those of the CPU op (ops/cpu/sample.c, ops/sample_math.h); the kernel is
 * in ops/cuda/sample.cu. Test: tests/cuda_ops/test_cuda_sample.c. */
#ifndef NB_OPS_CUDA_SAMPLE_H
#define NB_OPS_CUDA_SAMPLE_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues the sampling of every row on the context's stream (a cluster of blocks per row where
 * nb_cuda_sample_cluster applies, else one block per row); no host synchronization. The raw values
 * of penalized tokens go to hist->raw, or (NULL) to scratch slot 0 (hist->n_entries floats). */
nb_status nb_cuda_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                         const nb_sample_hist *hist, nb_sample_out *out);

/* The cluster kernel (sample_cluster.cu): a cluster of 8 or 16 blocks per row on sm_90+, the
 * row's slices in shared memory. Returns 0 without launching where it does not apply (an older
 * device, a slice over the shared-memory limit, NIBBLE_CUDA_SAMPLE=block); else 1, with the
 * launch's status in *st. Same arguments as the one-block kernel. */
int nb_cuda_sample_cluster(nb_ops_ctx *ctx, float *logits, int64_t rows, int V, const nb_sample_params *params,
                           const int32_t *off, const int32_t *htok, const int32_t *hcnt, long long n_entries,
                           float *orig, nb_sample_out *out, nb_status *st);

#ifdef __cplusplus
}
#endif
#endif

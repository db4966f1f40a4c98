/* CPU sampling (nb_op_sample of ops.h): the reference the CUDA op must reproduce token for
 * token, and the sampler of the engine's host path (engine/sampling.c calls the row function).
 * Tests: tests/engine/test_sampling.c, tests/cuda_ops/test_cuda_sample.c. */
#ifndef NB_OPS_CPU_SAMPLE_H
#define NB_OPS_CPU_SAMPLE_H

#include <stdint.h>

#include "ops/ops.h"

/* Scratch nb_cpu_sample_row needs for a vocabulary of `vocab` tokens, in uint64_t. */
#define NB_CPU_SAMPLE_SCRATCH(vocab) (2 * (size_t)(vocab))

/* Sample one row (x: [vocab] logits, penalized in place) with the row's history entries
 * (tok[j], cnt[j]), j < n_hist (distinct tokens; ids outside [0, vocab) are ignored).
 * scratch: NB_CPU_SAMPLE_SCRATCH(vocab) elements. Fills out (token, logprob, top-n). */
void nb_cpu_sample_row(float *x, int vocab, const nb_sample_params *p, const int32_t *tok, const int32_t *cnt,
                       int n_hist, uint64_t *scratch, nb_sample_out *out);

nb_status nb_cpu_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                        const nb_sample_hist *hist, nb_sample_out *out);

#endif

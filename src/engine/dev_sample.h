/* Sampling where the logits are (the runner.h sample hook of a backend runner): the step's
 * requests and penalty histories go to the backend's memory in one upload, nb_op_sample runs
 * there over the logits the last forward left, and only the results (ids, log-probabilities:
 * sizeof(nb_sample_out) = 172 bytes a row) come back. Backend-neutral (nb_ops_* calls only);
 * used by engine/cuda_runner.c. Tests: tests/cuda_ops/test_cuda_sample.c (the op),
 * tests/engine/test_engine_sample_hook.c (the engine side of the hook). */
#ifndef NB_ENGINE_DEV_SAMPLE_H
#define NB_ENGINE_DEV_SAMPLE_H

#include "ops/ops.h"

typedef struct nb_dev_sampler {
    void *buf;   /* backend memory: params, results, CSR arrays */
    size_t cap;
} nb_dev_sampler;

/* Sample rows 0..n-1 of logits ([avail_rows, vocab] F32 in the memory of ops's backend,
 * penalized in place) with the host arrays params[n] / hist (off[n + 1]) into out[n] (host).
 * Waits for the results. NB_ERR_INTERNAL when n > avail_rows or logits is NULL. */
nb_status nb_dev_sample(nb_dev_sampler *s, nb_ops_ctx *ops, float *logits, int avail_rows, int vocab, int n,
                        const nb_sample_params *params, const nb_sample_hist *hist, nb_sample_out *out);
void nb_dev_sampler_free(nb_dev_sampler *s, nb_ops_ctx *ops);

#endif

/* The synthetic weight streams (model/synthetic_fill.h) on the GPU: one kernel writes a
 * job's bytes straight into device memory, the same bytes nb_synth_fill_range writes on the
 * host (integer hashing, the Irwin-Hall sum in float32 without contraction, the same BF16
 * rounding and E2M1 code table). Host C code includes this header only when
 * NIBBLE_HAVE_CUDA is 1. Tests: tests/model/test_synth_gpu.c (byte equality with the host
 * generator on whole synthetic models). */
#ifndef NB_MODEL_CUDA_SYNTH_FILL_CUDA_H
#define NB_MODEL_CUDA_SYNTH_FILL_CUDA_H

#include "model/synthetic_fill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue the fill of job `j` on `stream` (a cudaStream_t; NULL = the legacy default
 * stream): j->data is device memory of the current device holding j->n elements (bytes for
 * the NVFP4 kinds). No host synchronization. NB_ERR_CUDA names the job kind when the launch
 * fails (an invalid pointer shows up at the next synchronization). */
nb_status nb_synth_fill_cuda(const nb_synth_job *j, void *stream);

#ifdef __cplusplus
}
#endif
#endif

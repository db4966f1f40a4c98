/* CUDA graphs over an ops context's stream and pinned staging for per-step copies
 * (graph.cu; scratch pointers from ctx.cu). C declarations, for engine/cuda_runner.c, which
 * captures one decode step per batch size and replays it. Exercised by
 * tests/cuda_ops/test_cuda_graph.c (ctest -L gpu). Include only in NIBBLE_HAVE_CUDA builds.
 *
 * Capture is per thread (cudaStreamCaptureModeThreadLocal). While a capture runs, ops must
 * neither wait for the device nor allocate: nb_cuda_scratch refuses to grow a slot then
 * (NULL, with an error naming the slot), so a caller runs the same work eagerly once before
 * capturing it (which grows every slot and creates every lazily made table). */
#ifndef NB_OPS_CUDA_GRAPH_H
#define NB_OPS_CUDA_GRAPH_H

#include <stddef.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_cuda_graph nb_cuda_graph;
/* Start capturing the context's stream. */
nb_status nb_cuda_graph_begin(nb_ops_ctx *ctx);
/* End the capture and instantiate it. `ok` 0 (the captured calls failed): the capture is
 * ended and dropped, *out NULL, NB_OK. NB_ERR_CUDA when ending or instantiating fails. */
nb_status nb_cuda_graph_end(nb_ops_ctx *ctx, int ok, nb_cuda_graph **out);
/* Enqueue a replay on the context's stream (no wait). */
nb_status nb_cuda_graph_launch(nb_ops_ctx *ctx, nb_cuda_graph *g);
void nb_cuda_graph_free(nb_cuda_graph *g);
/* Nodes of the graph (kernels, copies, memsets), for logs and tests. */
int nb_cuda_graph_nodes(const nb_cuda_graph *g);

/* The current buffer of every scratch slot (NULL where never grown). A graph that captured
 * ops reading scratch stays valid while these pointers do not change (a slot only moves
 * when it grows). */
#define NB_CUDA_SCRATCH_PTRS 12 /* ops.h's 8 slots, and the side branch's own 4 */
void nb_cuda_scratch_ptrs(nb_ops_ctx *ctx, void *out[NB_CUDA_SCRATCH_PTRS]);

/* Pinned host staging for per-step copies that must not wait: the host writes it after
 * nb_cuda_staging_wait; nb_cuda_staging_copy queues the copy to the device and marks it. */
typedef struct nb_cuda_staging nb_cuda_staging;
nb_status nb_cuda_staging_new(size_t bytes, nb_cuda_staging **out);
void *nb_cuda_staging_host(nb_cuda_staging *s);
/* Wait until the device has done the last copy out of the staging area. */
nb_status nb_cuda_staging_wait(nb_cuda_staging *s);
/* Queue a copy of the first `bytes` of the staging area to dst (device) on ctx's stream. */
nb_status nb_cuda_staging_copy(nb_ops_ctx *ctx, nb_cuda_staging *s, void *dst, size_t bytes);
void nb_cuda_staging_free(nb_cuda_staging *s);

#ifdef __cplusplus
}
#endif
#endif

// CUDA graphs over an ops context's stream, and pinned staging for per-step copies
// (declarations and contracts: ops/cuda/graph.h). Used by engine/cuda_runner.c to
// capture a decode step once per batch size and replay it. Exercised by
// tests/cuda_ops/test_cuda_graph.c (ctest -L gpu).
#include <stdlib.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/graph.h"

struct nb_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int nodes;
};

struct nb_cuda_staging {
    void *host;
    size_t bytes;
    cudaEvent_t copied;
    int pending;
};

extern "C" nb_status nb_cuda_graph_begin(nb_ops_ctx *ctx)
{
    // Thread-local mode: other threads (another engine, a test) may use CUDA meanwhile.
    NB_CUDA_TRY(cudaStreamBeginCapture(nb_cuda_stream(ctx), cudaStreamCaptureModeThreadLocal));
    return NB_OK;
}

extern "C" nb_status nb_cuda_graph_end(nb_ops_ctx *ctx, int ok, nb_cuda_graph **out)
{
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(nb_cuda_stream(ctx), &g);
    if (!ok || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); // a failed capture leaves a sticky launch error behind otherwise
        if (ok) return nb_error(NB_ERR_CUDA, "cuda graph: capture failed: %s", cudaGetErrorString(e));
        return NB_OK;
    }
    nb_cuda_graph *r = (nb_cuda_graph *)calloc(1, sizeof *r);
    if (!r) {
        cudaGraphDestroy(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda graph");
    }
    r->graph = g;
    size_t n = 0;
    cudaGraphGetNodes(g, NULL, &n);
    r->nodes = (int)n;
    e = cudaGraphInstantiateWithFlags(&r->exec, g, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(g);
        free(r);
        return nb_error(NB_ERR_CUDA, "cuda graph: instantiating %zu nodes failed: %s", n, cudaGetErrorString(e));
    }
    *out = r;
    return NB_OK;
}

extern "C" nb_status nb_cuda_graph_launch(nb_ops_ctx *ctx, nb_cuda_graph *g)
{
    NB_CUDA_TRY(cudaGraphLaunch(g->exec, nb_cuda_stream(ctx)));
    return NB_OK;
}

extern "C" void nb_cuda_graph_free(nb_cuda_graph *g)
{
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

extern "C" int nb_cuda_graph_nodes(const nb_cuda_graph *g) { return g ? g->nodes : 0; }

extern "C" nb_status nb_cuda_staging_new(size_t bytes, nb_cuda_staging **out)
{
    *out = NULL;
    nb_cuda_staging *s = (nb_cuda_staging *)calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda staging");
    if (cudaHostAlloc(&s->host, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        free(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda staging: %zu bytes of pinned host memory", bytes);
    }
    if (cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(s->host);
        free(s);
        return nb_error(NB_ERR_CUDA, "cuda staging: cudaEventCreate failed");
    }
    s->bytes = bytes;
    *out = s;
    return NB_OK;
}

extern "C" void *nb_cuda_staging_host(nb_cuda_staging *s) { return s->host; }

extern "C" nb_status nb_cuda_staging_wait(nb_cuda_staging *s)
{
    if (!s->pending) return NB_OK;
    NB_CUDA_TRY(cudaEventSynchronize(s->copied));
    s->pending = 0;
    return NB_OK;
}

extern "C" nb_status nb_cuda_staging_copy(nb_ops_ctx *ctx, nb_cuda_staging *s, void *dst, size_t bytes)
{
    if (bytes > s->bytes)
        return nb_error(NB_ERR_INVALID_ARG, "cuda staging: copy of %zu bytes from %zu", bytes, s->bytes);
    cudaStream_t st = nb_cuda_stream(ctx);
    NB_CUDA_TRY(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, st));
    NB_CUDA_TRY(cudaEventRecord(s->copied, st));
    s->pending = 1;
    return NB_OK;
}

extern "C" void nb_cuda_staging_free(nb_cuda_staging *s)
{
    if (!s) return;
    if (s->pending) cudaEventSynchronize(s->copied);
    cudaEventDestroy(s->copied);
    cudaFreeHost(s->host);
    free(s);
}

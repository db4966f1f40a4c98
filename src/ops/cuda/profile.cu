// CUDA part of the per-op profiler (ops/profile.h): a pool of timing events recorded on the
// context's stream around each op, read once at the end of the step, and pinned space for
// asynchronous copies of moe_experts' expert ids (to count the experts a call touched).
// Exercised by `nibble bench-offline --backend cuda --profile-ops N` (scripts/device-profile.sh).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/profile.h"

#define PROF_PINNED_CHUNKS 16

struct nb_cuda_prof {
    cudaEvent_t *ev;
    int n_ev;
    // pinned chunks for the id copies; a chunk is only added, never moved, during a step
    int32_t *chunk[PROF_PINNED_CHUNKS];
    int64_t chunk_cap[PROF_PINNED_CHUNKS];
    int cur;        // chunk being filled
    int64_t used;   // int32 entries used in it
};

static nb_status grow_events(nb_cuda_prof *p, int want)
{
    if (want <= p->n_ev) return NB_OK;
    int n = p->n_ev ? p->n_ev : 4096;
    while (n < want) n *= 2;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(p->ev, (size_t)n * sizeof *ev);
    if (!ev) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda profile: %d events", n);
    p->ev = ev;
    for (int i = p->n_ev; i < n; i++) {
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) { // default flags: timing on
            cudaGetLastError();
            p->n_ev = i;
            return nb_error(NB_ERR_CUDA, "cuda profile: cudaEventCreate (event %d)", i);
        }
    }
    p->n_ev = n;
    return NB_OK;
}

extern "C" nb_status nb_cuda_prof_new(nb_cuda_prof **out)
{
    *out = NULL;
    nb_cuda_prof *p = (nb_cuda_prof *)calloc(1, sizeof *p);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda profile: state");
    nb_status st = grow_events(p, 4096); // a GLM-5 decode step is ~2000 ops: no growth inside it
    // the first chunk of id copies now, not inside a timed step (1 Mi ids: 1000 tokens x top-8
    // x 78 MoE layers fit; cudaHostAlloc can take milliseconds)
    if (st == NB_OK && cudaHostAlloc((void **)&p->chunk[0], ((size_t)1 << 20) * sizeof(int32_t),
                                     cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        p->chunk[0] = NULL;
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "cuda profile: 4 MiB of pinned memory");
    }
    if (st == NB_OK) p->chunk_cap[0] = (int64_t)1 << 20;
    if (st != NB_OK) {
        nb_cuda_prof_free(p);
        return st;
    }
    *out = p;
    return NB_OK;
}

extern "C" void nb_cuda_prof_free(nb_cuda_prof *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_ev; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    for (int i = 0; i < PROF_PINNED_CHUNKS; i++)
        if (p->chunk[i]) cudaFreeHost(p->chunk[i]);
    free(p);
}

extern "C" void nb_cuda_prof_range(int on)
{
    static int env = -1; // read once; the runner's thread is the only caller
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_PROFILER_RANGE");
        env = e && !strcmp(e, "1");
    }
    if (!env) return;
    // failures only mean no profiler range; the step itself is unaffected
    if ((on ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) cudaGetLastError();
}

extern "C" void nb_cuda_prof_reset(nb_cuda_prof *p)
{
    p->cur = 0;
    p->used = 0;
}

extern "C" nb_status nb_cuda_prof_mark(nb_cuda_prof *p, void *stream, int i)
{
    NB_TRY(grow_events(p, i + 1));
    if (cudaEventRecord(p->ev[i], (cudaStream_t)stream) != cudaSuccess) {
        cudaGetLastError();
        return nb_error(NB_ERR_CUDA, "cuda profile: cudaEventRecord (event %d)", i);
    }
    return NB_OK;
}

extern "C" nb_status nb_cuda_prof_copy_ids(nb_cuda_prof *p, void *stream, const int32_t *src, int64_t n,
                                           const int32_t **host)
{
    *host = NULL;
    while (p->cur < PROF_PINNED_CHUNKS) {
        if (!p->chunk[p->cur]) {
            int64_t cap = p->cur ? p->chunk_cap[p->cur - 1] * 2 : ((int64_t)1 << 20);
            while (cap < n) cap *= 2;
            if (cudaHostAlloc((void **)&p->chunk[p->cur], (size_t)cap * sizeof(int32_t), cudaHostAllocDefault) !=
                cudaSuccess) {
                cudaGetLastError();
                p->chunk[p->cur] = NULL;
                return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda profile: %lld bytes of pinned memory",
                                (long long)cap * 4);
            }
            p->chunk_cap[p->cur] = cap;
        }
        if (p->used + n <= p->chunk_cap[p->cur]) break;
        p->cur++;
        p->used = 0;
    }
    if (p->cur == PROF_PINNED_CHUNKS) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda profile: id copies full");
    int32_t *dst = p->chunk[p->cur] + p->used;
    if (cudaMemcpyAsync(dst, src, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, (cudaStream_t)stream) !=
        cudaSuccess) {
        cudaGetLastError();
        return nb_error(NB_ERR_CUDA, "cuda profile: copy of %lld expert ids", (long long)n);
    }
    p->used += n;
    *host = dst;
    return NB_OK;
}

extern "C" nb_status nb_cuda_prof_finish(nb_cuda_prof *p, int n_marks, double *ms)
{
    if (n_marks <= 0) return NB_OK;
    if (n_marks > p->n_ev) return nb_error(NB_ERR_INTERNAL, "cuda profile: %d marks, %d events", n_marks, p->n_ev);
    // events complete in stream order: the last one done means every one is
    cudaError_t e = cudaEventSynchronize(p->ev[n_marks - 1]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return nb_error(NB_ERR_CUDA, "cuda profile: waiting for the step: %s", cudaGetErrorString(e));
    }
    for (int i = 0; 2 * i + 1 < n_marks; i++) {
        float t = 0;
        e = cudaEventElapsedTime(&t, p->ev[2 * i], p->ev[2 * i + 1]);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return nb_error(NB_ERR_CUDA, "cuda profile: elapsed time of op %d: %s", i, cudaGetErrorString(e));
        }
        ms[i] = t;
    }
    return NB_OK;
}

// CUDA context state (ops/cuda/cuda_ops.h): stream, cuBLASLt handle, device scratch slots,
// backend memory helpers and the shape checks the CUDA ops share.
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (ctest -L gpu).
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/graph.h"

// cuBLASLt workspace per context (gemm_lt.h: plenty on Hopper).
#define NB_CUDA_LT_WORKSPACE (32u << 20)

void nb_cuda_moe_release_all(nb_ops_ctx *ctx); // experts.cu

extern "C" nb_status nb_cuda_ctx_init(nb_ops_ctx *ctx, int device)
{
    int n = nb_cuda_device_count();
    if (n <= 0) return nb_error(NB_ERR_CUDA, "cuda: no CUDA device");
    if (device < 0 || device >= n) return nb_error(NB_ERR_INVALID_ARG, "cuda: device %d of %d", device, n);
    NB_CUDA_TRY(cudaSetDevice(device));
    nb_cuda_state *s = (nb_cuda_state *)calloc(1, sizeof *s);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda: context state");
    s->device = device;
    cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, device);
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) {
        free(s);
        return nb_error(NB_ERR_CUDA, "cuda: cudaStreamCreate failed");
    }
    if (cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&s->ev_fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&s->ev_join, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        if (s->ev_fork) cudaEventDestroy(s->ev_fork);
        if (s->side) cudaStreamDestroy(s->side);
        cudaStreamDestroy(s->stream);
        free(s);
        return nb_error(NB_ERR_CUDA, "cuda: side stream or its events");
    }
    s->main = s->stream;
    nb_status st = nb_cuda_gemm_create(&s->gemm, NB_CUDA_LT_WORKSPACE);
    if (st != NB_OK) {
        cudaEventDestroy(s->ev_fork);
        cudaEventDestroy(s->ev_join);
        cudaStreamDestroy(s->side);
        cudaStreamDestroy(s->stream);
        free(s);
        return st;
    }
    ctx->cuda = s;
    ctx->stream = s->stream;
    return NB_OK;
}

extern "C" void nb_cuda_ctx_release(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (!s) return;
    cudaStreamSynchronize(s->side);
    cudaStreamSynchronize(s->main);
    nb_cuda_moe_release_all(ctx);
    nb_cuda_mla_release(ctx);
    for (int i = 0; i < 2; i++)
        if (s->pinned[i]) {
            cudaFreeHost(s->pinned[i]);
            cudaEventDestroy(s->staged[i]);
        }
    for (int i = 0; i < NB_CUDA_SCRATCH_SLOTS; i++) cudaFree(s->scratch[i]);
    nb_cuda_gemm_destroy(s->gemm);
    cudaEventDestroy(s->ev_fork);
    cudaEventDestroy(s->ev_join);
    cudaStreamDestroy(s->side);
    cudaStreamDestroy(s->main);
    free(s);
    ctx->cuda = NULL;
    ctx->stream = NULL;
}

extern "C" void *nb_cuda_scratch(nb_ops_ctx *ctx, int slot, size_t bytes)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (bytes == 0) bytes = 1;
    if (s->branch == 1 && slot < 4) slot += NB_CUDA_SIDE_SLOT0; // the side's own op scratch
    if (s->scratch_size[slot] < bytes) {
        // A graph being captured would keep the old pointer and the wait below would end the
        // capture: refuse, so the caller runs the step eagerly (which grows the slot) first.
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone) {
            nb_error(NB_ERR_INTERNAL, "cuda: scratch slot %d would grow from %zu to %zu bytes during a CUDA graph capture",
                     slot, s->scratch_size[slot], bytes);
            return NULL;
        }
        size_t want = bytes > s->scratch_size[slot] + s->scratch_size[slot] / 2 ? bytes
                                                                                : s->scratch_size[slot] + s->scratch_size[slot] / 2;
        want = (want + 255) / 256 * 256;
        void *p = NULL;
        // The old buffer may still be read by queued kernels: wait, then free it first (its
        // contents are not kept), so old and new never need room together.
        cudaStreamSynchronize(s->stream);
        cudaFree(s->scratch[slot]);
        s->scratch[slot] = NULL;
        s->scratch_size[slot] = 0;
        if (cudaMalloc(&p, want) != cudaSuccess) {
            cudaGetLastError();
            // the 1.5x headroom did not fit: the exact size may
            const size_t exact = (bytes + 255) / 256 * 256;
            if (exact == want || cudaMalloc(&p, exact) != cudaSuccess) {
                cudaGetLastError();
                nb_error(NB_ERR_OUT_OF_MEMORY, "cuda: scratch slot %d: %zu bytes of device memory", slot, exact);
                return NULL;
            }
            want = exact;
        }
        s->scratch[slot] = p;
        s->scratch_size[slot] = want;
    }
    return s->scratch[slot];
}

extern "C" void nb_cuda_scratch_ptrs(nb_ops_ctx *ctx, void *out[NB_CUDA_SCRATCH_PTRS])
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    for (int i = 0; i < NB_CUDA_SCRATCH_PTRS; i++) out[i] = i < NB_CUDA_SCRATCH_SLOTS ? s->scratch[i] : NULL;
}

// ---- branches (ops.h nb_ops_branch) ----------------------------------------------------------
// Events order the side stream after the main stream's work so far (fork) and the main stream
// after the side's (join); under a graph capture the same calls make the side stream part of
// the capture and merge it back. While ops go to the side, nb_cuda_scratch hands out slots
// 8-11 for the ops' slots 0-3, so the two queues never share an op's scratch.

static int g_branch_env = -1;

extern "C" int nb_cuda_can_branch(nb_ops_ctx *ctx)
{
    (void)ctx;
    if (g_branch_env < 0) {
        const char *e = getenv("NIBBLE_CUDA_BRANCH");
        g_branch_env = !(e && !strcmp(e, "0"));
    }
    return g_branch_env;
}

extern "C" int nb_cuda_st_branch(nb_ops_ctx *ctx) { return nb_cuda_st(ctx)->branch; }

extern "C" nb_status nb_cuda_branch(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (s->branch) return nb_error(NB_ERR_INTERNAL, "cuda: a branch inside a branch");
    NB_CUDA_TRY(cudaEventRecord(s->ev_fork, s->main));
    NB_CUDA_TRY(cudaStreamWaitEvent(s->side, s->ev_fork, 0));
    s->branch = 1;
    s->stream = s->side;
    ctx->stream = s->side;
    return NB_OK;
}

extern "C" nb_status nb_cuda_branch_main(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (s->branch != 1) return nb_error(NB_ERR_INTERNAL, "cuda: back to the main queue outside a branch");
    s->branch = 2;
    s->stream = s->main;
    ctx->stream = s->main;
    return NB_OK;
}

extern "C" nb_status nb_cuda_join(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (s->branch == 1) NB_TRY(nb_cuda_branch_main(ctx));
    if (s->branch != 2) return nb_error(NB_ERR_INTERNAL, "cuda: join outside a branch");
    s->branch = 0;
    NB_CUDA_TRY(cudaEventRecord(s->ev_join, s->side));
    NB_CUDA_TRY(cudaStreamWaitEvent(s->main, s->ev_join, 0));
    return NB_OK;
}

extern "C" void *nb_cuda_mem_alloc(nb_ops_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        nb_error(NB_ERR_OUT_OF_MEMORY, "cuda: %zu bytes of device memory", bytes);
        return NULL;
    }
    return p;
}

extern "C" void nb_cuda_mem_free(nb_ops_ctx *ctx, void *p)
{
    if (!p) return;
    cudaStreamSynchronize(nb_cuda_stream(ctx));
    cudaFree(p);
}

// Large uploads go through two pinned staging buffers: the host copy into one overlaps
// the DMA out of the other (pageable memory would be staged by the driver one piece at a
// time, at a fraction of the bus rate).
static nb_status upload_staged(nb_cuda_state *s, void *dst, const void *src, size_t bytes)
{
    if (!s->pinned[0]) {
        for (int i = 0; i < 2; i++) {
            if (cudaHostAlloc(&s->pinned[i], NB_CUDA_STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();
                if (i == 1) {
                    cudaFreeHost(s->pinned[0]);
                    cudaEventDestroy(s->staged[0]);
                }
                s->pinned[0] = s->pinned[1] = NULL;
                return NB_ERR_OUT_OF_MEMORY; /* caller falls back to a plain copy */
            }
            NB_CUDA_TRY(cudaEventCreateWithFlags(&s->staged[i], cudaEventDisableTiming));
        }
    }
    for (size_t off = 0, i = 0; off < bytes; off += NB_CUDA_STAGE_BYTES, i ^= 1) {
        size_t n = bytes - off < NB_CUDA_STAGE_BYTES ? bytes - off : NB_CUDA_STAGE_BYTES;
        NB_CUDA_TRY(cudaEventSynchronize(s->staged[i]));
        memcpy(s->pinned[i], (const char *)src + off, n);
        NB_CUDA_TRY(cudaMemcpyAsync((char *)dst + off, s->pinned[i], n, cudaMemcpyHostToDevice, s->stream));
        NB_CUDA_TRY(cudaEventRecord(s->staged[i], s->stream));
    }
    NB_CUDA_TRY(cudaStreamSynchronize(s->stream));
    return NB_OK;
}

extern "C" nb_status nb_cuda_mem_upload(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return NB_OK;
    nb_cuda_state *s = nb_cuda_st(ctx);
    if (bytes >= ((size_t)1 << 20)) {
        nb_status st = upload_staged(s, dst, src, bytes);
        if (st != NB_ERR_OUT_OF_MEMORY) return st;
    }
    NB_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, nb_cuda_stream(ctx)));
    // Pageable sources are staged before the call returns, pinned ones are not: wait so the
    // caller may reuse src either way.
    NB_CUDA_TRY(cudaStreamSynchronize(nb_cuda_stream(ctx)));
    return NB_OK;
}

extern "C" nb_status nb_cuda_mem_download(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return NB_OK;
    NB_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, nb_cuda_stream(ctx)));
    NB_CUDA_TRY(cudaStreamSynchronize(nb_cuda_stream(ctx)));
    return NB_OK;
}

extern "C" nb_status nb_cuda_mem_set(nb_ops_ctx *ctx, void *dst, int byte, size_t bytes)
{
    if (!bytes) return NB_OK;
    NB_CUDA_TRY(cudaMemsetAsync(dst, byte, bytes, nb_cuda_stream(ctx)));
    return NB_OK;
}

extern "C" nb_status nb_cuda_sync(nb_ops_ctx *ctx)
{
    nb_cuda_state *s = nb_cuda_st(ctx);
    NB_CUDA_TRY(cudaStreamSynchronize(s->side));
    NB_CUDA_TRY(cudaStreamSynchronize(s->main));
    return NB_OK;
}

nb_status nb_cuda_check_f32(const char *op, const char *param, const nb_tensor *t, int ndim)
{
    if (!t || !t->data) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is NULL", op, param);
    if (t->dtype != NB_DTYPE_F32) return nb_error(NB_ERR_INVALID_ARG, "%s: %s must be F32", op, param);
    if (t->device != NB_DEVICE_CUDA) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is not in device memory", op, param);
    if (ndim && t->ndim != ndim)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s has %d dims, expected %d", op, param, t->ndim, ndim);
    if (t->stride[t->ndim - 1] != 1 && t->shape[t->ndim - 1] > 1)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s last dim is not contiguous", op, param);
    return NB_OK;
}

nb_status nb_cuda_check_f32_bf16(const char *op, const char *param, const nb_tensor *t, int ndim)
{
    if (t && t->dtype == NB_DTYPE_BF16) {
        nb_tensor f = *t; /* the same checks, dtype aside */
        f.dtype = NB_DTYPE_F32;
        return nb_cuda_check_f32(op, param, &f, ndim);
    }
    if (t && t->data && t->dtype != NB_DTYPE_F32)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s must be F32 or BF16", op, param);
    return nb_cuda_check_f32(op, param, t, ndim);
}

nb_status nb_cuda_check_weight(const char *op, const nb_weight *w)
{
    NB_TRY(nb_weight_check(w, op));
    if (w->device != NB_DEVICE_CUDA) return nb_error(NB_ERR_INVALID_ARG, "%s: weight is not in device memory", op);
    return NB_OK;
}

// Programmatic dependent launch (sm_90) for the small kernels of a decode step: a kernel
// launched with nb_pdl_launch may be scheduled before the kernel ahead of it on the stream
// has finished; it calls nb_pdl_wait() before its first global memory access (read or
// write), which returns once every earlier kernel has completed and its writes are visible,
// so the result is that of plain stream order while the launch latency (~1 us per graph
// node at decode) overlaps the previous kernel's tail. nb_pdl_trigger() lets the next such
// kernel be scheduled at once. Outside a PDL launch both are no-ops.
// NIBBLE_CUDA_PDL=0 (or NIBBLE_CUDA_SMALL_OPS=legacy) launches plainly, for A/B timings.
// Included by ops/cuda/elementwise.cu and moe_router.cu; exercised by
// tests/cuda_ops/test_cuda_small_ops.c (--bench times both) and every test of these ops.
#ifndef NB_OPS_CUDA_PDL_CUH
#define NB_OPS_CUDA_PDL_CUH

#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"

__device__ __forceinline__ void nb_pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void nb_pdl_trigger(void) { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Launch `kernel` (its parameters in `args`, as cudaLaunchKernel takes them) on `stream`,
// with PDL when `pdl` is set.
static inline cudaError_t nb_pdl_launch_if(const void *kernel, dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t stream, void **args, int pdl)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

// The same with PDL when nb_cuda_pdl_on() (ops/cuda/cuda_ops.h).
static inline cudaError_t nb_pdl_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                        void **args)
{
    return nb_pdl_launch_if(kernel, grid, block, smem, stream, args, nb_cuda_pdl_on());
}

#endif

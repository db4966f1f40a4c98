// Device helpers shared by the linear kernels (linear_gemv.cu, linear_mma.cu, linear_sk.cu):
// the streaming weight load, the BF16 tensor-core step and the split of float32 activations
// into BF16 terms.
#ifndef NB_OPS_CUDA_LINEAR_DEV_CUH
#define NB_OPS_CUDA_LINEAR_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops/cuda/linear.h"
#include "ops/cuda/pdl.cuh"

// The vector GEMV with activations SiLU(gate) * up read from rows [gate | up] of ldx >= 2 k
// floats (linear_gemv.cu): 1 when it took the call (BF16, the second version, not staged).
int nb_cuda_gemv_vec_silu(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                          int64_t ldy, int accumulate);

// 16 bytes of a weight row: read once per call, so not kept in L1.
__device__ __forceinline__ uint4 nb_lin_ld_stream(const void *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// c += A (16x16 BF16, row) . B (16x8 BF16, col), F32 accumulators.
__device__ __forceinline__ void nb_lin_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                           uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as packed BF16 (first in the low half); each keeps what rounding left of it.
__device__ __forceinline__ uint32_t nb_lin_split(float &x0, float &x1)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    x0 -= __low2float(h);
    x1 -= __high2float(h);
    return *reinterpret_cast<uint32_t *>(&h);
}

// Launch a linear kernel (parameters in args, as cudaLaunchKernel takes them), as a
// programmatic dependent of the kernel ahead when pdl (and nb_cuda_linear_pdl_on()): only
// kernels that call nb_pdl_wait() (pdl.cuh) before the first access to anything an earlier
// kernel writes (activations, outputs, scratch); weights may be read before it.
static inline cudaError_t nb_lin_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                        void **args, int pdl)
{
    return nb_pdl_launch_if(kernel, grid, block, smem, stream, args, pdl && nb_cuda_linear_pdl_on());
}

#endif

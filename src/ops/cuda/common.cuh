// Device helpers shared by the CUDA ops (ops/cuda/cuda_ops.h): the context state, weight
// decoding in every nb_weight format (the same arithmetic as nb_weight_dequant_rows, so a
// float32 kernel reproduces the CPU op to accumulation order), warp reductions and launch
// checks. Included by the ops' .cu files only.
#ifndef NB_OPS_CUDA_COMMON_CUH
#define NB_OPS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_lt.h"

#define NB_CUDA_SCRATCH_SLOTS 12 /* 0-7 as ops.h says; 8-11: ops slots 0-3 on the side branch */
#define NB_CUDA_SIDE_SLOT0 8
#define NB_CUDA_MOE_REG_MAX 256

struct nb_cuda_moe_reg; // ops/cuda/experts.cu
struct nb_cuda_mla;     // ops/cuda/mla_gemm.cu

typedef struct nb_cuda_state {
    int device, sm_count;
    cudaStream_t stream;      /* where ops enqueue now: main, or side inside a branch */
    cudaStream_t main, side;  /* nb_ops_branch (ops.h): the second queue and its two events */
    cudaEvent_t ev_fork, ev_join;
    int branch;               /* 0 none, 1 ops go to side, 2 side running, ops back on main */
    nb_cuda_gemm *gemm;
    void *scratch[NB_CUDA_SCRATCH_SLOTS];
    size_t scratch_size[NB_CUDA_SCRATCH_SLOTS];
    struct nb_cuda_moe_reg *moe[NB_CUDA_MOE_REG_MAX];
    int n_moe;
    struct nb_cuda_mla *mla; /* MLA's resident kv_b forms and batched-GEMM handle (mla.h) */
    void *pinned[2];        /* staging buffers of large uploads (NB_CUDA_STAGE_BYTES each) */
    cudaEvent_t staged[2];  /* their last copy out */
} nb_cuda_state;

#define NB_CUDA_STAGE_BYTES ((size_t)64 << 20)

static inline nb_cuda_state *nb_cuda_st(nb_ops_ctx *ctx) { return (nb_cuda_state *)ctx->cuda; }
static inline cudaStream_t nb_cuda_stream(nb_ops_ctx *ctx) { return nb_cuda_st(ctx)->stream; }

// After a launch: a configuration error becomes NB_ERR_CUDA naming the op.
#define NB_CUDA_LAUNCHED(op)                                                                    \
    do {                                                                                       \
        cudaError_t nb_le_ = cudaGetLastError();                                               \
        if (nb_le_ != cudaSuccess)                                                             \
            return nb_error(NB_ERR_CUDA, "%s: kernel launch failed: %s", op, cudaGetErrorString(nb_le_)); \
    } while (0)

// Shape checks for device tensors: F32, last dim contiguous, on the CUDA device.
nb_status nb_cuda_check_f32(const char *op, const char *param, const nb_tensor *t, int ndim);
/* The same for a tensor that may be F32 or BF16 (the KV pool's rows, ops.h nb_op_set_rows). */
nb_status nb_cuda_check_f32_bf16(const char *op, const char *param, const nb_tensor *t, int ndim);
nb_status nb_cuda_check_weight(const char *op, const nb_weight *w);

__device__ __forceinline__ float nb_d_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t nb_d_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                             // round to nearest even
    return (uint16_t)(u >> 16);
}

// E4M3 (fn): 0x7f / 0xff are NaN; subnormals m * 2^-9.
__device__ __forceinline__ float nb_d_e4m3(uint8_t v)
{
    int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    float f;
    if (e == 15 && m == 7) f = __int_as_float(0x7fc00000);
    else if (e == 0) f = (float)m * 0.001953125f;
    else f = __int_as_float(((e + 120) << 23) | (m << 20));
    return s ? -f : f;
}

// E2M1 by bits (a table would live in local memory): 0, 0.5, then 1.5 * 2^e forms.
__device__ __forceinline__ float nb_d_e2m1(uint8_t c)
{
    uint32_t m = c & 7u;
    float f = m >= 2 ? __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22)) : (m ? 0.5f : 0.0f);
    return (c & 8) ? -f : f;
}

__device__ __forceinline__ int64_t nb_d_row_bytes(const nb_weight &w)
{
    if (w.row_stride) return w.row_stride;
    switch (w.fmt) {
    case NB_WFMT_F32: return w.k * 4;
    case NB_WFMT_BF16: return w.k * 2;
    case NB_WFMT_NVFP4: return w.k / 2;
    default: return w.k;
    }
}

__device__ __forceinline__ int64_t nb_d_scale_row_bytes(const nb_weight &w)
{
    if (w.scale_row_stride) return w.scale_row_stride;
    if (w.fmt == NB_WFMT_NVFP4) return w.k / 16;
    if (w.fmt == NB_WFMT_FP8_BLOCK) return (w.k + w.block_k - 1) / w.block_k * 4;
    return 0;
}

// One weight element (row r, column j) as nb_weight_dequant_rows computes it.
__device__ __forceinline__ float nb_d_wload1(const nb_weight &w, int64_t r, int64_t j)
{
    const uint8_t *row = (const uint8_t *)w.data + r * nb_d_row_bytes(w);
    switch (w.fmt) {
    case NB_WFMT_F32: return ((const float *)row)[j];
    case NB_WFMT_BF16: return nb_d_bf16(((const uint16_t *)row)[j]);
    case NB_WFMT_NVFP4: {
        const uint8_t *sc = (const uint8_t *)w.scale + r * nb_d_scale_row_bytes(w);
        float s = nb_d_e4m3(sc[j / 16]) * w.global_scale;
        uint8_t b = row[j / 2];
        return nb_d_e2m1((j & 1) ? (b >> 4) : (b & 15)) * s;
    }
    default: {
        const float *sc = (const float *)((const uint8_t *)w.scale + (r / w.block_n) * nb_d_scale_row_bytes(w));
        return nb_d_e4m3(row[j]) * sc[j / w.block_k];
    }
    }
}

// Sixteen consecutive weights j0..j0+15 of row r (j0 % 16 == 0, j0 + 16 <= k). Vector loads
// when the bytes are aligned (dense rows of the usual widths), element loads otherwise.
__device__ __forceinline__ void nb_d_wload16(const nb_weight &w, int64_t r, int64_t j0, float *o)
{
    const uint8_t *row = (const uint8_t *)w.data + r * nb_d_row_bytes(w);
    switch (w.fmt) {
    case NB_WFMT_F32: {
        const float *p = (const float *)row + j0;
        if ((((uintptr_t)p) & 15) == 0) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 v = ((const float4 *)p)[i];
                o[4 * i] = v.x, o[4 * i + 1] = v.y, o[4 * i + 2] = v.z, o[4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) o[i] = p[i];
        }
        break;
    }
    case NB_WFMT_BF16: {
        const uint16_t *p = (const uint16_t *)row + j0;
        if ((((uintptr_t)p) & 15) == 0) {
            uint4 a = ((const uint4 *)p)[0], b = ((const uint4 *)p)[1];
            const uint32_t u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 8; i++) {
                o[2 * i] = __uint_as_float(u[i] << 16);
                o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) o[i] = nb_d_bf16(p[i]);
        }
        break;
    }
    case NB_WFMT_NVFP4: {
        const uint8_t *sc = (const uint8_t *)w.scale + r * nb_d_scale_row_bytes(w);
        float s = nb_d_e4m3(sc[j0 / 16]) * w.global_scale;
        const uint8_t *p = row + j0 / 2;
        uint8_t bytes[8];
        if ((((uintptr_t)p) & 7) == 0) {
            uint2 v = *(const uint2 *)p;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                bytes[i] = (uint8_t)(v.x >> (8 * i));
                bytes[4 + i] = (uint8_t)(v.y >> (8 * i));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) bytes[i] = p[i];
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o[2 * i] = nb_d_e2m1(bytes[i] & 15) * s;
            o[2 * i + 1] = nb_d_e2m1(bytes[i] >> 4) * s;
        }
        break;
    }
    default: {
        const float *sc = (const float *)((const uint8_t *)w.scale + (r / w.block_n) * nb_d_scale_row_bytes(w));
        const uint8_t *p = row + j0;
        uint8_t bytes[16];
        if ((((uintptr_t)p) & 15) == 0) {
            uint4 v = *(const uint4 *)p;
            const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 16; i++) bytes[i] = (uint8_t)(u[i / 4] >> (8 * (i % 4)));
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) bytes[i] = p[i];
        }
#pragma unroll
        for (int i = 0; i < 16; i++) o[i] = nb_d_e4m3(bytes[i]) * sc[(j0 + i) / w.block_k];
        break;
    }
    }
}

__device__ __forceinline__ float nb_d_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double nb_d_warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float nb_d_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Dequantize rows [0, n) of w to BF16 (out [n, k] dense) or F32 (out_f32), on the stream.
nb_status nb_cuda_dequant(nb_ops_ctx *ctx, const nb_weight *w, uint16_t *out_bf16, float *out_f32);
// y[T, n] (ldy) (+)= x[T, k] (ldx) W^T (+ bias): the linear op on raw device pointers.
nb_status nb_cuda_linear_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                             int64_t ldy, int accumulate);
// The vector GEMV (linear_gemv.cu): enqueues and returns 1 when the weight's format and
// alignment and T suit it, else 0 and nothing is enqueued.
int nb_cuda_gemv_vec(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                     int64_t ldy, int accumulate);

#endif

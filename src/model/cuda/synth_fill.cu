// Device port of the synthetic weight streams (model/cuda/synth_fill_cuda.h; the streams are
// specified in model/synthetic_fill.h). One grid-stride kernel per job: a thread takes one
// hash of the stream (one element, or the 4 code bytes / 8 scale bytes one hash feeds) and
// writes what nb_synth_fill_range writes for it. Float steps use _rn intrinsics so nvcc
// cannot contract them into an FMA the host code does not do.
// Tests: tests/model/test_synth_gpu.c.
#include <cuda_runtime.h>
#include <stdint.h>

#include "base/error.h"
#include "model/cuda/synth_fill_cuda.h"

#define NB_SYNTH_SCALE_BASE 0x72
#define NB_SYNTH_IH_MEAN 131070.0f
#define NB_SYNTH_IH_INV_SD 2.642903e-05f

typedef struct nb_code_table {
    uint8_t c[256];
} nb_code_table;

__device__ __forceinline__ uint64_t nb_d_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ uint64_t nb_d_at(uint64_t key, uint64_t i)
{
    return nb_d_mix(key + (i + 1) * 0x9E3779B97F4A7C15ULL);
}

__device__ __forceinline__ float nb_d_normal(uint64_t h, float sd)
{
    uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) + (uint32_t)((h >> 32) & 0xffff) +
                 (uint32_t)(h >> 48);
    float z = __fmul_rn(__fsub_rn((float)s, NB_SYNTH_IH_MEAN), NB_SYNTH_IH_INV_SD);
    return __fmul_rn(z, sd);
}

// format/numerics.h's nb_f32_to_bf16: quiet NaNs, round to nearest even.
__device__ __forceinline__ uint16_t nb_d_bf16_rne(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__global__ void k_synth_fill(int kind, uint64_t key, float value, uint64_t n, void *data, nb_code_table tab)
{
    __shared__ uint8_t c8[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) c8[i] = tab.c[i];
    __syncthreads();
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    switch (kind) {
    case NB_SYNTH_CONST_F32:
        for (; u < n; u += stride) ((float *)data)[u] = value;
        break;
    case NB_SYNTH_NORMAL_F32:
        for (; u < n; u += stride) ((float *)data)[u] = nb_d_normal(nb_d_at(key, u), value);
        break;
    case NB_SYNTH_NORMAL_BF16:
        for (; u < n; u += stride) ((uint16_t *)data)[u] = nb_d_bf16_rne(nb_d_normal(nb_d_at(key, u), value));
        break;
    case NB_SYNTH_NVFP4_CODES: { // hash u feeds bytes 4u .. 4u+3, one 16-bit field each
        uint8_t *d = (uint8_t *)data;
        const bool aligned = ((uintptr_t)d & 3) == 0;
        for (; 4 * u < n; u += stride) {
            uint64_t h = nb_d_at(key, u);
            uint32_t w = 0;
            for (int m = 0; m < 4; m++) {
                uint32_t f = (uint32_t)(h >> (16 * m)) & 0xffffu;
                w |= (uint32_t)(c8[f & 255] | (c8[f >> 8] << 4)) << (8 * m);
            }
            if (aligned && 4 * u + 4 <= n) {
                *(uint32_t *)(d + 4 * u) = w;
            } else {
                for (int m = 0; m < 4 && 4 * u + m < n; m++) d[4 * u + m] = (uint8_t)(w >> (8 * m));
            }
        }
        break;
    }
    case NB_SYNTH_NVFP4_SCALES: { // hash u feeds bytes 8u .. 8u+7, low 3 bits of each byte
        uint8_t *d = (uint8_t *)data;
        for (; 8 * u < n; u += stride) {
            uint64_t h = nb_d_at(key, u);
            for (int m = 0; m < 8 && 8 * u + m < n; m++)
                d[8 * u + m] = (uint8_t)(NB_SYNTH_SCALE_BASE + ((h >> (8 * m)) & 7));
        }
        break;
    }
    }
}

extern "C" nb_status nb_synth_fill_cuda(const nb_synth_job *j, void *stream)
{
    if (!j->n) return NB_OK;
    nb_code_table tab;
    nb_synth_code_table(tab.c);
    uint64_t units = j->n;
    if (j->kind == NB_SYNTH_NVFP4_CODES) units = (j->n + 3) / 4;
    else if (j->kind == NB_SYNTH_NVFP4_SCALES) units = (j->n + 7) / 8;
    const int threads = 256;
    uint64_t blocks = (units + threads - 1) / threads;
    if (blocks > 8192) blocks = 8192; // grid-stride beyond: enough blocks to fill every SM
    k_synth_fill<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>((int)j->kind, j->key, j->value,
                                                                         (uint64_t)j->n, j->data, tab);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return nb_error(NB_ERR_CUDA, "synthetic fill (kind %d, %zu elements): launch failed: %s", (int)j->kind, j->n,
                        cudaGetErrorString(e));
    return NB_OK;
}

// GPU repack of NVFP4 matrices into the MoE kernels' layout (ops/cuda/synth_repack.h). The
// layout is moe_repack.c's, read from the output side: one thread per 32-bit code word
// (8 codes: rows g and g+8 of a 16-row tile, 4 consecutive k of a lane's 16) and one thread
// per scale byte, each gathering its source bytes, so every output byte is written once.
// Tests: tests/model/test_synth_gpu.c (byte equality with nb_moe_repack_nvfp4).
#include <cuda_runtime.h>

#include "base/error.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/synth_repack.h"

typedef struct nb_rows_pair {
    nb_nvfp4_dev_rows a, b;
} nb_rows_pair;

__device__ __forceinline__ const uint8_t *nb_code_row(const nb_rows_pair &p, int row, int k)
{
    if (row < p.a.rows) return p.a.codes + (int64_t)row * (p.a.code_stride ? p.a.code_stride : k / 2);
    row -= p.a.rows;
    return p.b.codes + (int64_t)row * (p.b.code_stride ? p.b.code_stride : k / 2);
}

__device__ __forceinline__ const uint8_t *nb_scale_row(const nb_rows_pair &p, int row, int k)
{
    if (row < p.a.rows) return p.a.scales + (int64_t)row * (p.a.scale_stride ? p.a.scale_stride : k / 16);
    row -= p.a.rows;
    return p.b.scales + (int64_t)row * (p.b.scale_stride ? p.b.scale_stride : k / 16);
}

// Bit of code bit b (m, e0, e1, sign) for pair p, half hi: moe_repack.c's nb_moe_bitpos.
__device__ __forceinline__ int nb_bitpos(int p, int hi, int b)
{
    const int base[4][4] = {{6, 7, 8, 15}, {2, 3, 4, 11}, {28, 29, 30, 5}, {0, 1, 26, 9}};
    return (base[p][b] + 16 * hi) & 31;
}

__global__ void k_repack_codes(nb_rows_pair p, int k, uint64_t n_words, uint32_t *out)
{
    const uint64_t kt = (uint64_t)(k / 64);
    for (uint64_t wi = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; wi < n_words;
         wi += (uint64_t)gridDim.x * blockDim.x) {
        int s = (int)(wi & 3), lane = (int)((wi >> 2) & 31);
        uint64_t rest = wi >> 7;
        int q = (int)(rest % kt), nt = (int)(rest / kt);
        int g = lane / 4, t = lane % 4;
        int c0 = q * 64 + t * 16 + s * 4; // even: its 4 codes are 2 whole bytes
        uint32_t w = 0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t *src = nb_code_row(p, nt * 16 + g + 8 * h, k) + c0 / 2;
            uint32_t two = (uint32_t)src[0] | ((uint32_t)src[1] << 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t code = (two >> (4 * j)) & 15u;
                int pr = (j >> 1) * 2 + h, hi = j & 1;
#pragma unroll
                for (int b = 0; b < 4; b++)
                    if (code >> b & 1u) w |= 1u << nb_bitpos(pr, hi, b);
            }
        }
        out[wi] = w;
    }
}

__global__ void k_repack_scales(nb_rows_pair p, int k, uint64_t n_bytes, uint8_t *out)
{
    const uint64_t kg = (uint64_t)(k / 256);
    for (uint64_t o = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_bytes;
         o += (uint64_t)gridDim.x * blockDim.x) {
        int h = (int)(o & 1), qq = (int)((o >> 1) & 3), lane = (int)((o >> 3) & 31);
        uint64_t rest = o >> 8;
        int qg = (int)(rest % kg), nt = (int)(rest / kg);
        int g = lane / 4, t = lane % 4;
        int row = nt * 16 + g + 8 * h, grp = (qg * 4 + qq) * 4 + t;
        out[o] = nb_scale_row(p, row, k)[grp];
    }
}

static unsigned nb_blocks(uint64_t units)
{
    uint64_t b = (units + 255) / 256;
    return (unsigned)(b > 8192 ? 8192 : b ? b : 1);
}

extern "C" nb_status nb_moe_repack_nvfp4_cuda(const char *name, const nb_nvfp4_dev_rows *a, const nb_nvfp4_dev_rows *b,
                                              int n, int k, uint8_t *out_w, uint8_t *out_s, void *stream)
{
    nb_rows_pair p;
    p.a = *a;
    if (b) p.b = *b;
    else p.b = nb_nvfp4_dev_rows{NULL, NULL, 0, 0, 0};
    if (n <= 0 || k <= 0 || n % NB_MOE_ROW_TILE || k % NB_MOE_K_GROUP)
        return nb_error(NB_ERR_INVALID_ARG,
                        "moe repack (device): tensor '%s' [%d, %d]: rows must be a multiple of %d and columns of %d",
                        name ? name : "?", n, k, NB_MOE_ROW_TILE, NB_MOE_K_GROUP);
    if (p.a.rows < 0 || p.b.rows < 0 || p.a.rows + p.b.rows != n)
        return nb_error(NB_ERR_INVALID_ARG, "moe repack (device): tensor '%s': %d + %d source rows for %d",
                        name ? name : "?", p.a.rows, p.b.rows, n);
    cudaStream_t s = (cudaStream_t)stream;
    uint64_t words = nb_moe_packed_weight_bytes(n, k) / 4, sbytes = nb_moe_packed_scale_bytes(n, k);
    k_repack_codes<<<nb_blocks(words), 256, 0, s>>>(p, k, words, (uint32_t *)out_w);
    k_repack_scales<<<nb_blocks(sbytes), 256, 0, s>>>(p, k, sbytes, out_s);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return nb_error(NB_ERR_CUDA, "moe repack (device): tensor '%s': launch failed: %s", name ? name : "?",
                        cudaGetErrorString(e));
    return NB_OK;
}

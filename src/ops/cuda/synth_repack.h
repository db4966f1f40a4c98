/* The NVFP4 repack of ops/cuda/moe.h (ModelOpt layout -> the MoE kernels' fragment layout)
 * done on the GPU, for weights that only exist in device memory (synthetic models generated
 * on the GPU: model/cuda/synth_fill_cuda.h). Byte for byte what nb_moe_repack_nvfp4
 * (moe_repack.c) writes from the same codes and scales. Used by nb_cuda_moe_register when it
 * is given no host copy. Tests: tests/model/test_synth_gpu.c (against nb_moe_repack_nvfp4). */
#ifndef NB_OPS_CUDA_SYNTH_REPACK_H
#define NB_OPS_CUDA_SYNTH_REPACK_H

#include <stdint.h>

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One ModelOpt NVFP4 matrix in device memory: codes U8 [rows, k/2] with `code_stride` bytes
 * between rows (0: k/2), scales E4M3 [rows, k/16] with `scale_stride` (0: k/16). */
typedef struct nb_nvfp4_dev_rows {
    const uint8_t *codes, *scales;
    int64_t code_stride, scale_stride;
    int rows;
} nb_nvfp4_dev_rows;

/* Repack the [n, k] matrix made of `a`'s rows followed by `b`'s (b.rows may be 0: then a
 * alone; gate and up stack into one gate_up matrix this way) into out_w
 * (nb_moe_packed_weight_bytes(n, k)) and out_s (nb_moe_packed_scale_bytes(n, k)), device
 * memory. Enqueued on `stream` (cudaStream_t; NULL = legacy default), no host sync.
 * NB_ERR_INVALID_ARG (naming `name`) when n % 16 or k % 256 is not 0 or the rows do not add
 * up to n; NB_ERR_CUDA on a failed launch. */
nb_status nb_moe_repack_nvfp4_cuda(const char *name, const nb_nvfp4_dev_rows *a, const nb_nvfp4_dev_rows *b, int n,
                                   int k, uint8_t *out_w, uint8_t *out_s, void *stream);

#ifdef __cplusplus
}
#endif
#endif

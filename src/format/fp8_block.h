/* FP8 block-scaled weights, as in the DeepSeek-V3 and GLM-5-FP8 checkpoints
 * (config.json quantization_config: quant_method "fp8", fmt "e4m3",
 * weight_block_size [bn, bk], normally [128, 128]):
 *   <m>.weight            F8_E4M3 [N, K]
 *   <m>.weight_scale_inv  F32     [ceil(N/bn), ceil(K/bk)]
 *   W[n][k] = e4m3(weight[n][k]) * weight_scale_inv[n/bn][k/bk]
 * ("_inv" is historical: it multiplies on dequantization). Edge blocks are partial when
 * N or K is not a multiple of the block; their scale covers only the elements present.
 * Tests: tests/format/test_nvfp4.c (fp8 cases). */
#ifndef NB_FORMAT_FP8_BLOCK_H
#define NB_FORMAT_FP8_BLOCK_H

#include <stdint.h>

#include "nibble.h"

/* Rows and columns of the scale grid. */
static inline int64_t nb_fp8_block_count(int64_t n, int64_t block) { return (n + block - 1) / block; }

/* Check that a weight [n, k] and its scale grid [sn, sk] agree with block [bn, bk];
 * NB_ERR_FORMAT naming `what` otherwise. */
nb_status nb_fp8_block_check(const char *what, int64_t n, int64_t k, int64_t sn, int64_t sk, int bn, int bk);

/* Dequantize rows [row0, row0 + rows) of an [n, k] F8_E4M3 weight into out [rows, k]. */
void nb_fp8_block_dequant_rows(const uint8_t *w, const float *scale_inv, int64_t k, int bn, int bk, int64_t row0,
                               int64_t rows, float *out);

/* Reference quantizer (for tests and conversions): per block, scale_inv = amax / 448
 * (1 for an all-zero block), weight = e4m3(W / scale_inv) with RNE. */
void nb_fp8_block_quantize_ref(const float *w, int64_t n, int64_t k, int bn, int bk, uint8_t *q, float *scale_inv);

#endif

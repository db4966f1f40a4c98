/* Quantization configs: ModelOpt NVFP4 (hf_quant_config.json, or config.json →
 * quantization_config with quant_algo NVFP4, group_size 16, exclude_modules globs) and
 * FP8 block (quant_method fp8, weight_block_size [128, 128]; tensors weight F8_E4M3 +
 * weight_scale_inv F32), as in the official GLM-5-FP8 and DeepSeek-V3 checkpoints. */
#ifndef NB_FORMAT_QUANT_CONFIG_H
#define NB_FORMAT_QUANT_CONFIG_H

#include "nibble.h"

typedef enum nb_quant_algo { NB_QUANT_NONE = 0, NB_QUANT_NVFP4, NB_QUANT_FP8_BLOCK } nb_quant_algo;

typedef struct nb_quant_config {
    nb_quant_algo algo;
    int group_size;               /* NVFP4: 16 */
    int block_n, block_k;         /* FP8 block: 128, 128 */
    char **exclude;               /* module-name globs left unquantized (fnmatch) */
    int n_exclude;
} nb_quant_config;

/* 1 when `module` (e.g. "model.layers.3.self_attn.q_proj") matches an exclude glob. */
int nb_quant_excluded(const nb_quant_config *q, const char *module);

#endif

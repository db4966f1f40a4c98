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

/* 1 when `module` (e.g. "model.layers.3.self_attn.q_proj") matches an exclude glob.
 * A tensor name ("....q_proj.weight") is also accepted: its last component is dropped
 * when the full name does not match. */
int nb_quant_excluded(const nb_quant_config *q, const char *module);

struct cJSON;
/* Read the quantization of a model folder: DIR/hf_quant_config.json ({"quantization":
 * {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": [..]}}) when present, else
 * `config_json`'s "quantization_config" (quant_method "modelopt" with quant_algo NVFP4, or
 * quant_method "fp8" with weight_block_size). Neither: algo NB_QUANT_NONE. `dir` may be
 * NULL (only config_json is read); config_json may be NULL. Anything else (another
 * method, NVFP4 group size != 16, per-tensor FP8) is NB_ERR_UNSUPPORTED naming it. */
nb_status nb_quant_config_load(const char *dir, const struct cJSON *config_json, nb_quant_config *q);
/* Parse one quantization object: a "quantization" block of hf_quant_config.json or a
 * config.json "quantization_config"; `what` names it in errors. */
nb_status nb_quant_config_parse(const char *what, const struct cJSON *obj, nb_quant_config *q);
void nb_quant_config_free(nb_quant_config *q);
/* "none", "nvfp4", "fp8-block". */
const char *nb_quant_algo_name(nb_quant_algo a);

#endif

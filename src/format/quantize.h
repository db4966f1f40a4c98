/* Checkpoint conversion: a BF16 / F16 / F32 HF checkpoint -> a ModelOpt-layout NVFP4
 * checkpoint (format/nvfp4.h), streamed tensor by tensor so memory stays bounded (a few
 * MB of row buffers plus one tensor's block scales, 1/32 of its BF16 size).
 *
 * What is quantized (only 2-D ".weight" tensors of linear layers, K % 16 == 0):
 *   default        routed experts (mlp.experts.E.{gate,up,down}_proj)
 *   all_linear     also attention projections (q/k/v/o, q_a/q_b, kv_a/kv_b), shared experts
 *                  and dense MLPs
 *   never          router (mlp.gate), norms, embeddings, lm_head, biases, the DSA indexer
 *                  (its scores drive a top-k; GLM-5's reference keeps weights_proj in high
 *                  precision), MTP-only projections (eh_proj, ...), anything matching an
 *                  `exclude` glob (module name, i.e. the tensor name without ".weight")
 * A linear weight whose K is not a multiple of 16 stays unquantized (logged).
 * Fused expert tensors (transformers 5's in-memory layout, save_original_format=False:
 * mlp.experts.gate_up_proj [E, 2I, H], gate rows first, and mlp.experts.down_proj [E, H, I])
 * are written per expert (mlp.experts.E.{gate,up,down}_proj), as ModelOpt exports them;
 * the output of a fused and an unfused copy of one model is identical.
 * Gate and up of one MLP share one weight_scale_2 (max of their amax) when share_gate_up,
 * so a fused gate/up GEMM can use one global scale. No input_scale is written: this is
 * weight-only quantization without activation calibration.
 *
 * Output: OUT_DIR/model-0000i-of-0000n.safetensors (shards of <= shard_bytes, tensors in
 * name order), model.safetensors.index.json, config.json with "quantization_config"
 * (quant_method modelopt, quant_algo NVFP4, group_size 16, exclude_modules), and
 * hf_quant_config.json; tokenizer and generation files are copied.
 * exclude_modules lists every linear module left unquantized, with layer and expert
 * numbers generalized to '*' where the glob then matches no quantized module.
 * Tests: tests/format/test_tools.c (quantize). CLI: apps/cmd_quantize.c. */
#ifndef NB_FORMAT_QUANTIZE_H
#define NB_FORMAT_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "format/safetensors.h"
#include "nibble.h"

typedef struct nb_quantize_params {
    const char *const *exclude; /* extra module globs never quantized */
    int n_exclude;
    int all_linear;
    int share_gate_up;          /* default 1 */
    uint64_t shard_bytes;       /* default 4 GiB */
    int progress;               /* draw a progress bar (on a TTY) */
    int threads;                /* quantizing threads (default: online CPUs, at most 16); the
                                   output does not depend on it */
} nb_quantize_params;

nb_quantize_params nb_quantize_default_params(void);

/* Convert IN_DIR to OUT_DIR (created; existing model files there are overwritten).
 * NB_ERR_UNSUPPORTED when the input is already quantized. */
nb_status nb_quantize_checkpoint(const char *in_dir, const char *out_dir, const nb_quantize_params *p);

/* Rows [row0, row0 + rows) of a 2-D BF16/F16/F32 tensor as float32 (out: rows x cols). */
nb_status nb_st_rows_to_f32(const nb_st_tensor *t, int64_t row0, int64_t rows, float *out);

#endif

/* Synthetic models: any supported architecture with deterministic random weights and no
 * files. A spec is
 *   synthetic:ARCH[:key=value,key=value,...]
 * ARCH is glm5 (GLM-5's real shape), glm5-tiny (a small GLM-5-shaped model with a
 * byte-level tokenizer and a GLM-style chat template, fast on 2 CPU cores), deepseek-v3,
 * glm4-moe, qwen3-moe (the published shapes of DeepSeek-V3, GLM-4.5 and Qwen3-235B-A22B).
 * Keys override config.json fields (num_hidden_layers=8, hidden_size=1024; integers,
 * floats, true/false, null or strings), except three that steer the generator:
 *   seed=N        weights seed (default 0; same spec + seed = same bytes)
 *   experts=bf16|nvfp4   routed experts' storage (default nvfp4 for glm5, whose release
 *                 users serve is NVFP4; bf16 for the others); nvfp4 draws them directly
 *                 as ModelOpt-layout NVFP4 (random E2M1 codes shaped like a quantized
 *                 Gaussian, random E4M3 block scales, one weight_scale_2; no BF16 pass)
 *                 and declares quantization_config
 *   init_std=X    standard deviation of linear weights (default 0.02); norms are 1
 * Weights are counter-based random streams of (seed, tensor name, element index) filled by
 * every core (synthetic_fill.h), so the bytes never depend on the thread count.
 * The weights go into an in-memory checkpoint under their HF names, so the normal loader
 * (nb_model_from_checkpoint) binds them exactly as it binds a folder.
 * Tests: tests/engine/test_synthetic.c; try: nibble generate --model synthetic:glm5-tiny. */
#ifndef NB_MODEL_SYNTHETIC_H
#define NB_MODEL_SYNTHETIC_H

#include <stddef.h>

#include "format/model_config.h"
#include "format/safetensors.h"
#include "model/synthetic_fill.h"
#include "nibble.h"

/* 1 when spec starts with "synthetic:". */
int nb_synthetic_is(const char *spec);

/* The config.json text for a spec (malloc'd). NB_ERR_INVALID_ARG names an unknown
 * architecture (listing the known ones) or a malformed key=value. */
nb_status nb_synthetic_config_json(const char *spec, char **json);

/* Parse the spec's config and fill an in-memory checkpoint with random weights. On
 * success the caller owns *ck (nb_checkpoint_close) and cfg (nb_model_config_free). Uses
 * every online core. */
nb_status nb_synthetic_build(const char *spec, nb_model_config *cfg, nb_checkpoint **ck);

/* The same with `threads` filling threads (<= 0: every online core) and chunks of `chunk`
 * elements per work item (0: the default); the bytes are identical for any choice. */
nb_status nb_synthetic_build_threads(const char *spec, int threads, size_t chunk, nb_model_config *cfg,
                                     nb_checkpoint **ck);

/* A deferred build, for a GPU that generates the weights itself: the same checkpoint as
 * nb_synthetic_build (names, shapes, dtypes; F32 tensors filled on the host, since the
 * binder reads them), but the large tensors (BF16 weights, NVFP4 codes and scales) are left
 * unwritten: their host buffers are malloc'd address space whose pages are never touched
 * (so never resident), and *plan holds the stream of each. nb_synthetic_deferred_fill then
 * writes a tensor's bytes into device memory: byte for byte what nb_synthetic_build writes
 * on the host (tests/model/test_synth_gpu.c). Reading a deferred tensor's host bytes is a
 * bug (they are unspecified). The caller owns *ck, cfg and *plan (nb_synthetic_deferred_free). */
typedef struct nb_synth_deferred nb_synth_deferred;
nb_status nb_synthetic_build_deferred(const char *spec, nb_model_config *cfg, nb_checkpoint **ck,
                                      nb_synth_deferred **plan);
void nb_synthetic_deferred_free(nb_synth_deferred *plan);
/* Deferred tensors and their bytes. */
size_t nb_synthetic_deferred_count(const nb_synth_deferred *plan);
double nb_synthetic_deferred_bytes(const nb_synth_deferred *plan);
/* The job of the deferred tensor whose host buffer starts at `host` (its size in *bytes), or
 * NULL when `host` is not the start of a deferred tensor. */
const nb_synth_job *nb_synthetic_deferred_find(const nb_synth_deferred *plan, const void *host, size_t *bytes);
/* When `host` starts a deferred tensor: enqueue the fill of its `bytes` bytes into device
 * memory `dev` on `stream` (cudaStream_t) and set *done = 1; otherwise *done = 0 and nothing
 * happens. NB_ERR_INVALID_ARG when bytes is not the tensor's size; NB_ERR_UNSUPPORTED
 * without CUDA; NB_ERR_CUDA when the launch fails. */
nb_status nb_synthetic_deferred_fill(const nb_synth_deferred *plan, const void *host, void *dev, size_t bytes,
                                     void *stream, int *done);

/* Bytes the weights of a config take (BF16, or NVFP4 routed experts when quantized): to
 * refuse a spec that cannot fit before generating it. */
double nb_synthetic_weight_bytes(const nb_model_config *cfg);

/* 1 when the spec's architecture comes with the built-in byte tokenizer (glm5-tiny). */
int nb_synthetic_has_builtin_tokenizer(const char *spec);

/* The special tokens of the built-in tokenizer (ids 256 + i) and the GLM-style chat
 * template written for it (Jinja). */
const char *const *nb_synthetic_specials(size_t *n);
const char *nb_synthetic_chat_template(void);

#endif

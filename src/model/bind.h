/* Binding helpers shared by the family files: find a tensor by HF name, check its dtype and
 * shape, and describe it as an nb_weight in its stored format (BF16 / F32 / NVFP4 from
 * ModelOpt's weight + weight_scale + weight_scale_2 / FP8-block from weight +
 * weight_scale_inv). Every failure names the tensor. Internal to src/model/. */
#ifndef NB_MODEL_BIND_H
#define NB_MODEL_BIND_H

#include "model/model.h"

/* Take ownership of a malloc'd pointer (freed with the model). Returns p (NULL on failure). */
void *nb_model_own(nb_model *m, void *p);

/* Bind linear `prefix` (prefix.weight [n, k], its scales, an optional prefix.bias). */
nb_status nb_bind_linear(nb_model *m, const char *prefix, int64_t n, int64_t k, nb_weight *w);
/* A float32 copy of a vector tensor `name` of n elements (F32 / BF16 / F16). */
nb_status nb_bind_vec(nb_model *m, const char *name, int64_t n, float **out);
/* 1 when a tensor of this name exists. */
int nb_bind_has(const nb_model *m, const char *name);

/* Pieces shared by families (layer l; prefix "model.layers.<l>."). */
nb_status nb_bind_mla(nb_model *m, int l);
nb_status nb_bind_dsa_indexer(nb_model *m, int l);
nb_status nb_bind_gqa(nb_model *m, int l);
nb_status nb_bind_dense_mlp(nb_model *m, int l, const char *sub, int64_t inter, nb_weight *g, nb_weight *u,
                            nb_weight *d);
nb_status nb_bind_moe(nb_model *m, int l, int with_shared);

/* Family entry points (one file each): bind layer l, and set the family's rope / attention
 * scale / routing parameters on the model after all layers are bound. */
nb_status nb_glm_moe_dsa_bind(nb_model *m, int l);
nb_status nb_glm_moe_dsa_setup(nb_model *m);
nb_status nb_deepseek_v3_bind(nb_model *m, int l);
nb_status nb_deepseek_v3_setup(nb_model *m);
nb_status nb_glm4_moe_bind(nb_model *m, int l);
nb_status nb_glm4_moe_setup(nb_model *m);
nb_status nb_qwen3_moe_bind(nb_model *m, int l);
nb_status nb_qwen3_moe_setup(nb_model *m);

/* MLA softmax scale: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under yarn
 * (HF yarn_apply_mscale; deepseek_v3 and glm_moe_dsa). */
float nb_mla_softmax_scale(const nb_model_config *c);

#endif

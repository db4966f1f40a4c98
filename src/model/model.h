/* nb_model: a model config plus its weights bound by HF tensor names, kept in their stored
 * format (BF16 / F32 / NVFP4 / FP8-block) and dequantized on the fly by the ops. Only small
 * vectors (norm weights, biases, router correction bias) are copied to float32.
 *
 * The checkpoint may be a folder (nb_checkpoint_open) or an in-memory checkpoint (synthetic
 * models); experts may be per-expert (mlp.experts.N.gate_proj.weight, as published) or fused
 * (mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I], transformers 5).
 * A missing or mis-shaped tensor is NB_ERR_FORMAT / NB_ERR_NOT_FOUND naming it.
 * One file per family (glm_moe_dsa.c, deepseek_v3.c, glm4_moe.c, qwen3_moe.c) says which
 * tensors it has. Exercised by tests/model/ and nibble score. */
#ifndef NB_MODEL_MODEL_H
#define NB_MODEL_MODEL_H

#include "format/model_config.h"
#include "format/safetensors.h"
#include "nibble.h"
#include "ops/ops.h"

typedef struct nb_layer {
    int is_moe;
    float *input_norm, *post_attn_norm;          /* [hidden] */

    /* GQA */
    nb_weight q_proj, k_proj, v_proj, o_proj;    /* biases (attention_bias) in .bias */
    float *q_norm, *k_norm;                      /* [head_dim] when qk_norm */

    /* MLA (q_proj above when q_lora_rank == 0) */
    nb_weight q_a_proj, q_b_proj, kv_a_proj, kv_b_proj;
    float *q_a_norm, *kv_a_norm;

    /* DSA indexer (has_indexer: this layer computes its own selection) */
    int has_indexer;
    nb_weight idx_wq_b, idx_wk, idx_weights_proj;
    float *idx_k_norm_w, *idx_k_norm_b;

    /* The projections of the attention input concatenated by rows on a device twin
     * (model/upload.c): [q_a_proj; kv_a_proj; idx_wk; idx_weights_proj] (those present), one
     * linear instead of up to four; the parts above then point into it. a_cat.n == 0: none. */
    nb_weight a_cat;

    /* dense MLP (is_moe == 0) */
    nb_weight gate_proj, up_proj, down_proj;

    /* MoE (is_moe == 1) */
    nb_weight router;                            /* mlp.gate.weight [E, hidden] */
    float *router_bias;                          /* e_score_correction_bias or NULL */
    nb_weight *exp_gate, *exp_up, *exp_down;     /* [n_routed_experts] each */
    int has_shared;
    nb_weight sh_gate, sh_up, sh_down;
} nb_layer;

typedef struct nb_model_params {
    nb_device device;   /* NB_DEVICE_CPU */
    int n_threads;      /* 0: all cores */
    nb_mla_mode mla_mode; /* NB_MLA_ABSORBED by default; NB_MLA=naive overrides */
} nb_model_params;

nb_model_params nb_model_default_params(void);

typedef struct nb_model {
    nb_model_config cfg;
    nb_checkpoint *ck;        /* owned when loaded from a path */
    int owns_ck;
    nb_model_params params;
    nb_ops_ctx *ops;
    nb_weight embed, lm_head;
    float *final_norm;
    nb_layer layers[NB_MAX_LAYERS];
    nb_rope rope;             /* main attention */
    nb_rope index_rope;       /* DSA indexer (half-split) */
    float attn_scale;         /* softmax scale of the main attention */
    float latent_norm_eps;    /* q_a_layernorm / kv_a_layernorm eps (HF: the RMSNorm default 1e-6) */
    nb_router_params router;  /* routing of every MoE layer (correction_bias set per layer) */
    void *owned;              /* f32 copies, freed with the model */
    size_t n_owned, cap_owned;
} nb_model;

/* Open DIR (config.json + safetensors) and bind every weight. */
nb_status nb_model_load(const char *dir, const nb_model_params *p, nb_model **out);
/* Bind an already-parsed config and an open checkpoint (in-memory or file). The model does
 * not take ownership of cfg's allocations or of ck: both must outlive it. */
nb_status nb_model_from_checkpoint(const nb_model_config *cfg, nb_checkpoint *ck, const nb_model_params *p,
                                   nb_model **out);
void nb_model_free(nb_model *m);

#endif

/* HF config.json (+ hf_quant_config.json) → a typed model spec: every field that changes
 * the math for the supported families. The reference semantics are HF transformers'
 * configuration_*.py / modeling_*.py for glm_moe_dsa (GLM-5), deepseek_v3, glm4_moe
 * (GLM-4.5) and qwen3_moe.
 *
 * An unknown architecture or a missing required field is NB_ERR_UNSUPPORTED / NB_ERR_FORMAT
 * with a message naming the field and listing the supported model types.
 * Tests: tests/format/test_model_config.c. */
#ifndef NB_FORMAT_MODEL_CONFIG_H
#define NB_FORMAT_MODEL_CONFIG_H

#include <stdint.h>

#include "format/quant_config.h"
#include "format/tensor_role.h"
#include "nibble.h"

#define NB_MAX_LAYERS 256
#define NB_MAX_EOS 8

typedef enum nb_arch {
    NB_ARCH_GLM_MOE_DSA = 0, /* GLM-5: MLA + DSA indexer + MoE */
    NB_ARCH_DEEPSEEK_V3,     /* MLA + MoE */
    NB_ARCH_GLM4_MOE,        /* GLM-4.5: GQA (partial rotary, qk-norm option, bias) + MoE */
    NB_ARCH_QWEN3_MOE,       /* GQA with q/k RMSNorm + MoE (no shared expert) */
    NB_ARCH_COUNT
} nb_arch;

typedef enum nb_attn_kind { NB_ATTN_MLA = 0, NB_ATTN_GQA } nb_attn_kind;

typedef enum nb_rope_type { NB_ROPE_DEFAULT = 0, NB_ROPE_YARN } nb_rope_type;

typedef enum nb_moe_scoring { NB_SCORE_SOFTMAX = 0, NB_SCORE_SIGMOID } nb_moe_scoring;

typedef enum nb_topk_method {
    NB_TOPK_GREEDY = 0,        /* plain top-k over scores */
    NB_TOPK_GROUP_LIMITED,     /* "group_limited_greedy": groups ranked by their max score */
    NB_TOPK_NOAUX_TC,          /* "noaux_tc": scores + e_score_correction_bias, groups ranked by top-2 sum */
} nb_topk_method;

typedef struct nb_rope_config {
    nb_rope_type type;
    double theta;                 /* rope_theta (base) */
    int rotary_dim;               /* dims rotated per head (partial rotary: < head dim) */
    int interleave;               /* 1: pairs (2i, 2i+1) (rope_interleave / DeepSeek layout); 0: halves */
    /* yarn */
    double factor;
    double original_max_position_embeddings;
    double beta_fast, beta_slow;
    double mscale, mscale_all_dim;
    double attention_factor;      /* 0 = derive as HF does */
} nb_rope_config;

typedef struct nb_model_config {
    nb_arch arch;
    char model_type[32];          /* config.json "model_type" */
    nb_attn_kind attn;

    int vocab_size;
    int hidden_size;
    int num_layers;
    int num_heads;
    int num_kv_heads;             /* GQA; MLA: = num_heads */
    int head_dim;                 /* GQA head size; MLA: qk_nope + qk_rope */
    int max_position_embeddings;
    double rms_norm_eps;
    int tie_word_embeddings;
    int attention_bias;           /* q/k/v projections have biases */
    int qk_norm;                  /* per-head RMSNorm on q and k (qwen3_moe; glm4_moe use_qk_norm) */

    /* MLA (glm_moe_dsa, deepseek_v3) */
    int q_lora_rank;              /* 0: plain q_proj */
    int kv_lora_rank;
    int qk_nope_head_dim;
    int qk_rope_head_dim;
    int v_head_dim;

    /* dense MLP layers */
    int intermediate_size;

    /* MoE */
    int n_routed_experts;
    int n_shared_experts;         /* 0 when none */
    int num_experts_per_tok;
    int moe_intermediate_size;
    int shared_intermediate_size; /* per shared block; usually moe_intermediate_size * n_shared */
    int n_group, topk_group;
    int norm_topk_prob;
    double routed_scaling_factor;
    nb_moe_scoring scoring;
    nb_topk_method topk_method;
    int has_score_correction_bias; /* mlp.gate.e_score_correction_bias exists */
    uint8_t layer_is_moe[NB_MAX_LAYERS]; /* from first_k_dense_replace / mlp_layer_types / decoder_sparse_step / mlp_only_layers */

    /* DSA indexer (glm_moe_dsa) */
    int index_n_heads;
    int index_head_dim;
    int index_topk;
    uint8_t layer_has_indexer[NB_MAX_LAYERS]; /* glm_moe_dsa: 1 = "full" (own indexer weights, computes
                                                 its top-k), 0 = "shared" (reuses the previous full
                                                 layer's top-k); from indexer_types / index_topk_pattern /
                                                 index_topk_freq; all 1 when absent. 0 for other archs. */

    nb_rope_config rope;

    int eos_ids[NB_MAX_EOS];
    int n_eos;
    int bos_id;                   /* -1 when none */
    int pad_id;                   /* -1 when none */

    nb_quant_config quant;        /* NB_QUANT_NONE for plain checkpoints */

    /* Added by the format layer (informational; not part of the forward pass): */
    int num_nextn_predict_layers; /* MTP layers stored after the decoder layers (GLM, DeepSeek); 0 if none */
    int n_moe_layers;             /* count of layer_is_moe */
    char dtype[16];               /* "torch_dtype" / "dtype" as written ("bfloat16"); "" when absent */
} nb_model_config;

/* Read DIR/config.json (and DIR/hf_quant_config.json when present). eos ids listed in
 * DIR/generation_config.json are merged in (real checkpoints list the chat stop tokens
 * there). The struct owns heap memory (quant.exclude): copies share it; free once. */
nb_status nb_model_config_load(const char *dir, nb_model_config *cfg);
/* Parse config.json text (for tests and synthetic models); `what` names it in errors. */
nb_status nb_model_config_parse(const char *what, const char *json, nb_model_config *cfg);
/* Release what parse allocated (quant exclude globs). */
void nb_model_config_free(nb_model_config *cfg);

/* "glm_moe_dsa", ... */
const char *nb_arch_name(nb_arch a);
/* Comma-separated list of the supported model_type values, for error messages. */
const char *nb_arch_supported_list(void);

/* Parameter count of the whole model (embeddings, attention, experts, norms, lm_head). */
int64_t nb_model_config_param_count(const nb_model_config *cfg);
/* The same count split by tensor role (format/tensor_role.h); MTP layers not included. */
void nb_model_config_param_breakdown(const nb_model_config *cfg, int64_t out[NB_ROLE_COUNT]);

#endif

/* What a checkpoint tensor is, from its HF name: the role (embedding, attention, routed
 * expert, ...), its layer and expert index, and whether it is a quantization side tensor.
 * Used by `nibble inspect` (memory per GPU under TP/EP) and `nibble quantize` (what to
 * quantize). Names follow the HF checkpoints of the four families:
 *   model.embed_tokens.weight, lm_head.weight, model.norm.weight
 *   model.layers.L.{input,post_attention}_layernorm.weight
 *   model.layers.L.self_attn.{q,k,v,o}_proj | q_a_proj | q_b_proj | kv_a_proj_with_mqa | kv_b_proj
 *   model.layers.L.self_attn.indexer.{wq_b, wk, k_norm, weights_proj}       (GLM-5 DSA)
 *   model.layers.L.mlp.gate.{weight, e_score_correction_bias}              (router)
 *   model.layers.L.mlp.experts.E.{gate,up,down}_proj                       (routed experts)
 *   model.layers.L.mlp.experts.{gate_up_proj, down_proj}  [E, ..]          (fused, HF 5 in memory)
 *   model.layers.L.mlp.shared_experts.{gate,up,down}_proj
 *   model.layers.L.mlp.{gate,up,down}_proj                                 (dense MLP)
 * Tests: tests/format/test_tools.c. */
#ifndef NB_FORMAT_TENSOR_ROLE_H
#define NB_FORMAT_TENSOR_ROLE_H

#include <stddef.h>

typedef enum nb_tensor_role {
    NB_ROLE_EMBED = 0,
    NB_ROLE_LM_HEAD,
    NB_ROLE_NORM,          /* every *norm* weight/bias (RMSNorm, LayerNorm, q/k norms) */
    NB_ROLE_ATTN_HEADS,    /* per-head projections: q_proj, q_b_proj, k/v_proj, kv_b_proj, o_proj (+ biases) */
    NB_ROLE_ATTN_LATENT,   /* MLA latent projections: q_a_proj, kv_a_proj_with_mqa */
    NB_ROLE_INDEXER,       /* DSA indexer linears */
    NB_ROLE_ROUTER,        /* mlp.gate.weight, e_score_correction_bias */
    NB_ROLE_EXPERT,        /* routed experts */
    NB_ROLE_SHARED_EXPERT,
    NB_ROLE_DENSE_MLP,
    NB_ROLE_OTHER,         /* anything else (MTP's eh_proj, ...) */
    NB_ROLE_COUNT
} nb_tensor_role;

typedef struct nb_tensor_info {
    nb_tensor_role role;
    int layer;        /* -1 outside model.layers */
    int expert;       /* routed expert index; -1 otherwise (and for fused [E, ..] tensors) */
    int quant_aux;    /* weight_scale, weight_scale_2, input_scale, weight_scale_inv */
    int is_weight;    /* the name ends in ".weight" (a linear's or norm's main tensor) */
} nb_tensor_info;

nb_tensor_info nb_tensor_info_of(const char *name);
/* "embed", "lm_head", ... */
const char *nb_tensor_role_name(nb_tensor_role r);
/* 1 for the roles made of linear layers (what NVFP4 can quantize). */
int nb_tensor_role_is_linear(nb_tensor_role r);

#endif

/* GLM-4.5 (model_type glm4_moe): GQA with q/k/v biases (attention_bias), optional per-head
 * q/k RMSNorm (use_qk_norm), partial rotary (partial_rotary_factor, default 0.5) in the
 * half-split layout on the first rotary_dim dims of each head; MoE with a shared expert,
 * sigmoid + e_score_correction_bias routing, groups ranked by top-2 sum. As transformers
 * 5.24's modeling_glm4_moe.py. Exercised by tests/golden (glm4_moe fixture). */
#include <math.h>

#include "base/error.h"
#include "model/bind.h"

nb_status nb_glm4_moe_bind(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    NB_TRY(nb_bind_gqa(m, l));
    if (c->layer_is_moe[l]) return nb_bind_moe(m, l, 1);
    nb_layer *L = &m->layers[l];
    return nb_bind_dense_mlp(m, l, "mlp", c->intermediate_size, &L->gate_proj, &L->up_proj, &L->down_proj);
}

nb_status nb_glm4_moe_setup(nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    nb_rope_config rc = c->rope;
    rc.interleave = 0;
    NB_TRY(nb_rope_init(&rc, c->rope.rotary_dim, &m->rope));
    m->attn_scale = (float)(1.0 / sqrt((double)c->head_dim));
    m->router = (nb_router_params){.n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
                                   .score = NB_ROUTER_SIGMOID, .group = NB_ROUTER_GROUP_TOP2,
                                   .n_group = c->n_group > 0 ? c->n_group : 1,
                                   .topk_group = c->topk_group > 0 ? c->topk_group : 1,
                                   .norm_topk_prob = c->norm_topk_prob,
                                   .routed_scaling_factor = (float)c->routed_scaling_factor};
    return NB_OK;
}

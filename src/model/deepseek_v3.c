/* DeepSeek-V3 (model_type deepseek_v3): MLA (q_lora_rank, or a plain q_proj when it is
 * null), MoE with shared experts behind first_k_dense_replace dense layers. As
 * transformers 5.24's modeling_deepseek_v3.py: RoPE interleaved when rope_interleave (the
 * default), yarn's mscale(factor, mscale_all_dim)^2 multiplies the softmax scale, routing by
 * sigmoid + e_score_correction_bias with groups ranked by their top-2 sum (noaux_tc).
 * Exercised by tests/golden (deepseek_v3 fixture). */
#include "base/error.h"
#include "model/bind.h"

nb_status nb_deepseek_v3_bind(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    NB_TRY(nb_bind_mla(m, l));
    if (c->layer_is_moe[l]) return nb_bind_moe(m, l, 1);
    nb_layer *L = &m->layers[l];
    return nb_bind_dense_mlp(m, l, "mlp", c->intermediate_size, &L->gate_proj, &L->up_proj, &L->down_proj);
}

nb_status nb_deepseek_v3_setup(nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    NB_TRY(nb_rope_init(&c->rope, c->qk_rope_head_dim, &m->rope));
    m->attn_scale = nb_mla_softmax_scale(c);
    m->router = (nb_router_params){.n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
                                   .score = NB_ROUTER_SIGMOID, .group = NB_ROUTER_GROUP_TOP2,
                                   .n_group = c->n_group > 0 ? c->n_group : 1,
                                   .topk_group = c->topk_group > 0 ? c->topk_group : 1,
                                   .norm_topk_prob = c->norm_topk_prob,
                                   .routed_scaling_factor = (float)c->routed_scaling_factor};
    return NB_OK;
}

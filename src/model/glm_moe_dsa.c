/* GLM-5 (model_type glm_moe_dsa): MLA with q_lora_rank, the DSA indexer, MoE with a shared
 * expert behind first_k_dense_replace dense layers. Tensor names and recipe parameters as in
 * transformers 5.24's modeling_glm_moe_dsa.py:
 *   - RoPE is interleaved (pairs 2i, 2i+1) in attention and indexer alike, whatever
 *     config.json's rope_interleave says (the modeling code never reads it);
 *   - a layer whose indexer_types entry is "shared" (cfg.layer_has_indexer == 0) has no
 *     indexer weights and reuses the previous full layer's top-k selection;
 *   - q_a_layernorm / kv_a_layernorm use eps 1e-6, the indexer's k_norm is a LayerNorm (1e-6);
 *   - routing: sigmoid, e_score_correction_bias for the choice, groups ranked by top-2 sum.
 * Exercised by tests/golden (glm_moe_dsa fixture). */
#include "base/error.h"
#include "model/bind.h"

nb_status nb_glm_moe_dsa_bind(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    NB_TRY(nb_bind_mla(m, l));
    if (c->layer_has_indexer[l]) {
        NB_TRY(nb_bind_dsa_indexer(m, l));
    } else {
        int prev = 0;
        for (int i = 0; i < l; i++) prev |= m->layers[i].has_indexer;
        if (!prev)
            return nb_error(NB_ERR_FORMAT, "model: layer %d is a \"shared\" DSA layer but no earlier layer has an "
                            "indexer whose selection it could reuse", l);
    }
    if (c->layer_is_moe[l]) return nb_bind_moe(m, l, 1);
    nb_layer *L = &m->layers[l];
    return nb_bind_dense_mlp(m, l, "mlp", c->intermediate_size, &L->gate_proj, &L->up_proj, &L->down_proj);
}

nb_status nb_glm_moe_dsa_setup(nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    nb_rope_config rc = c->rope;
    rc.interleave = 1;
    NB_TRY(nb_rope_init(&rc, c->qk_rope_head_dim, &m->rope));
    m->index_rope = m->rope;
    m->attn_scale = nb_mla_softmax_scale(c);
    m->router = (nb_router_params){.n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
                                   .score = NB_ROUTER_SIGMOID, .group = NB_ROUTER_GROUP_TOP2,
                                   .n_group = c->n_group > 0 ? c->n_group : 1,
                                   .topk_group = c->topk_group > 0 ? c->topk_group : 1,
                                   .norm_topk_prob = c->norm_topk_prob,
                                   .routed_scaling_factor = (float)c->routed_scaling_factor};
    return NB_OK;
}

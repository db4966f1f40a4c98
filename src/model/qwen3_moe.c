/* Qwen3-MoE (model_type qwen3_moe): GQA with per-head q/k RMSNorm before RoPE (full rotary,
 * half-split), MoE layers chosen by decoder_sparse_step / mlp_only_layers, softmax routing
 * over all experts, top-k, renormalized when norm_topk_prob, no shared expert and no
 * routed scaling. As transformers 5.24's modeling_qwen3_moe.py.
 * Exercised by tests/golden (qwen3_moe fixture). */
#include <math.h>

#include "base/error.h"
#include "model/bind.h"

nb_status nb_qwen3_moe_bind(nb_model *m, int l)
{
    const nb_model_config *c = &m->cfg;
    NB_TRY(nb_bind_gqa(m, l));
    if (c->layer_is_moe[l]) return nb_bind_moe(m, l, 0);
    nb_layer *L = &m->layers[l];
    return nb_bind_dense_mlp(m, l, "mlp", c->intermediate_size, &L->gate_proj, &L->up_proj, &L->down_proj);
}

nb_status nb_qwen3_moe_setup(nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    nb_rope_config rc = c->rope;
    rc.interleave = 0;
    NB_TRY(nb_rope_init(&rc, c->rope.rotary_dim, &m->rope));
    m->attn_scale = (float)(1.0 / sqrt((double)c->head_dim));
    m->router = (nb_router_params){.n_experts = c->n_routed_experts, .top_k = c->num_experts_per_tok,
                                   .score = NB_ROUTER_SOFTMAX, .group = NB_ROUTER_GREEDY, .n_group = 1,
                                   .topk_group = 1, .norm_topk_prob = c->norm_topk_prob,
                                   .routed_scaling_factor = 1.0f};
    return NB_OK;
}

/* Tensor roles from HF names (format/tensor_role.h). Exercise: build-fmt/tests/test_tools. */
#include "format/tensor_role.h"

#include <stdio.h>
#include <string.h>

static const char *const nb_role_names[NB_ROLE_COUNT] = {
    [NB_ROLE_EMBED] = "embed",           [NB_ROLE_LM_HEAD] = "lm_head",
    [NB_ROLE_NORM] = "norm",             [NB_ROLE_ATTN_HEADS] = "attn_heads",
    [NB_ROLE_ATTN_LATENT] = "attn_latent", [NB_ROLE_INDEXER] = "indexer",
    [NB_ROLE_ROUTER] = "router",         [NB_ROLE_EXPERT] = "expert",
    [NB_ROLE_SHARED_EXPERT] = "shared_expert", [NB_ROLE_DENSE_MLP] = "dense_mlp",
    [NB_ROLE_OTHER] = "other",
};

const char *nb_tensor_role_name(nb_tensor_role r) { return (unsigned)r < NB_ROLE_COUNT ? nb_role_names[r] : "?"; }

int nb_tensor_role_is_linear(nb_tensor_role r)
{
    return r == NB_ROLE_LM_HEAD || r == NB_ROLE_ATTN_HEADS || r == NB_ROLE_ATTN_LATENT || r == NB_ROLE_INDEXER ||
           r == NB_ROLE_ROUTER || r == NB_ROLE_EXPERT || r == NB_ROLE_SHARED_EXPERT || r == NB_ROLE_DENSE_MLP;
}

static int nb_ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

nb_tensor_info nb_tensor_info_of(const char *name)
{
    nb_tensor_info ti = {NB_ROLE_OTHER, -1, -1, 0, 0};
    ti.is_weight = nb_ends(name, ".weight");
    ti.quant_aux = nb_ends(name, ".weight_scale") || nb_ends(name, ".weight_scale_2") ||
                   nb_ends(name, ".input_scale") || nb_ends(name, ".weight_scale_inv");
    if (!strncmp(name, "model.embed_tokens.", 19)) {
        ti.role = NB_ROLE_EMBED;
        return ti;
    }
    if (!strncmp(name, "lm_head.", 8)) {
        ti.role = NB_ROLE_LM_HEAD;
        return ti;
    }
    int layer, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &n) == 1 && n > 0) {
        ti.layer = layer;
        name += n;
    }
    /* the last dotted components before the suffix decide the role */
    if (strstr(name, "norm.") || strstr(name, "norm_") || !strncmp(name, "norm", 4)) {
        ti.role = NB_ROLE_NORM;
    } else if (!strncmp(name, "self_attn.indexer.", 18)) {
        ti.role = NB_ROLE_INDEXER;
    } else if (!strncmp(name, "self_attn.q_a_proj.", 19) || !strncmp(name, "self_attn.kv_a_proj_with_mqa.", 29)) {
        ti.role = NB_ROLE_ATTN_LATENT;
    } else if (!strncmp(name, "self_attn.", 10)) {
        ti.role = NB_ROLE_ATTN_HEADS;
    } else if (!strncmp(name, "mlp.gate.", 9)) {
        ti.role = NB_ROLE_ROUTER;
    } else if (!strncmp(name, "mlp.experts.", 12)) {
        ti.role = NB_ROLE_EXPERT;
        int e, m = 0;
        if (sscanf(name + 12, "%d.%n", &e, &m) == 1 && m > 0) ti.expert = e;
    } else if (!strncmp(name, "mlp.shared_experts.", 19) || !strncmp(name, "mlp.shared_expert.", 18)) {
        ti.role = NB_ROLE_SHARED_EXPERT;
    } else if (!strncmp(name, "mlp.gate_proj.", 14) || !strncmp(name, "mlp.up_proj.", 12) ||
               !strncmp(name, "mlp.down_proj.", 14)) {
        ti.role = NB_ROLE_DENSE_MLP;
    } else if (ti.layer < 0 && !strncmp(name, "model.norm.", 11)) {
        ti.role = NB_ROLE_NORM;
    }
    return ti;
}

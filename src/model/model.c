/* nb_model: load a checkpoint folder or bind an open (in-memory) checkpoint, per family.
 * Exercised by nibble score / generate and tests/model/. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/bind.h"

nb_model_params nb_model_default_params(void)
{
    nb_model_params p;
    memset(&p, 0, sizeof p);
    p.device = NB_DEVICE_CPU;
    p.n_threads = 0;
    p.mla_mode = NB_MLA_ABSORBED;
    const char *e = getenv("NB_MLA");
    if (e && !strcmp(e, "naive")) p.mla_mode = NB_MLA_NAIVE;
    return p;
}

void nb_model_free(nb_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_owned; i++) free(((void **)m->owned)[i]);
    free(m->owned);
    nb_ops_ctx_free(m->ops);
    if (m->owns_ck) {
        nb_checkpoint_close(m->ck);
        nb_model_config_free(&m->cfg);
    }
    free(m);
}

static nb_status bind_all(nb_model *m)
{
    const nb_model_config *c = &m->cfg;
    const int64_t V = c->vocab_size, H = c->hidden_size;
    NB_TRY(nb_bind_linear(m, "model.embed_tokens", V, H, &m->embed));
    NB_TRY(nb_bind_vec(m, "model.norm.weight", H, &m->final_norm));
    if (nb_bind_has(m, "lm_head.weight"))
        NB_TRY(nb_bind_linear(m, "lm_head", V, H, &m->lm_head));
    else if (c->tie_word_embeddings)
        m->lm_head = m->embed;
    else
        return nb_error(NB_ERR_NOT_FOUND, "model: tensor 'lm_head.weight' is missing (tie_word_embeddings is false)");
    m->latent_norm_eps = 1e-6f;
    for (int l = 0; l < c->num_layers; l++) {
        char p[128];
        snprintf(p, sizeof p, "model.layers.%d.input_layernorm.weight", l);
        NB_TRY(nb_bind_vec(m, p, H, &m->layers[l].input_norm));
        snprintf(p, sizeof p, "model.layers.%d.post_attention_layernorm.weight", l);
        NB_TRY(nb_bind_vec(m, p, H, &m->layers[l].post_attn_norm));
        switch (c->arch) {
        case NB_ARCH_GLM_MOE_DSA: NB_TRY(nb_glm_moe_dsa_bind(m, l)); break;
        case NB_ARCH_DEEPSEEK_V3: NB_TRY(nb_deepseek_v3_bind(m, l)); break;
        case NB_ARCH_GLM4_MOE: NB_TRY(nb_glm4_moe_bind(m, l)); break;
        case NB_ARCH_QWEN3_MOE: NB_TRY(nb_qwen3_moe_bind(m, l)); break;
        default: return nb_error(NB_ERR_UNSUPPORTED, "model: architecture %d", (int)c->arch);
        }
    }
    switch (c->arch) {
    case NB_ARCH_GLM_MOE_DSA: return nb_glm_moe_dsa_setup(m);
    case NB_ARCH_DEEPSEEK_V3: return nb_deepseek_v3_setup(m);
    case NB_ARCH_GLM4_MOE: return nb_glm4_moe_setup(m);
    case NB_ARCH_QWEN3_MOE: return nb_qwen3_moe_setup(m);
    default: return nb_error(NB_ERR_UNSUPPORTED, "model: architecture %d", (int)c->arch);
    }
}

nb_status nb_model_from_checkpoint(const nb_model_config *cfg, nb_checkpoint *ck, const nb_model_params *p,
                                   nb_model **out)
{
    *out = NULL;
    if (cfg->num_layers <= 0 || cfg->num_layers > NB_MAX_LAYERS)
        return nb_error(NB_ERR_UNSUPPORTED, "model: %d layers (1..%d supported)", cfg->num_layers, NB_MAX_LAYERS);
    nb_model *m = calloc(1, sizeof *m);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "model");
    m->cfg = *cfg;
    m->ck = ck;
    m->params = p ? *p : nb_model_default_params();
    if (m->params.device != NB_DEVICE_CPU) {
        nb_model_free(m);
        return nb_error(NB_ERR_UNSUPPORTED, "model: only the CPU backend exists so far");
    }
    nb_status s = nb_ops_ctx_new_cpu(m->params.n_threads, &m->ops);
    if (s == NB_OK) s = bind_all(m);
    if (s != NB_OK) {
        nb_model_free(m);
        return nb_error_wrap(s, "binding %s", nb_checkpoint_dir(ck) ? nb_checkpoint_dir(ck) : "checkpoint");
    }
    *out = m;
    return NB_OK;
}

nb_status nb_model_load(const char *dir, const nb_model_params *p, nb_model **out)
{
    *out = NULL;
    nb_model_config cfg;
    NB_TRY(nb_model_config_load(dir, &cfg));
    nb_checkpoint *ck = NULL;
    nb_status s = nb_checkpoint_open(dir, &ck);
    if (s != NB_OK) {
        nb_model_config_free(&cfg);
        return s;
    }
    s = nb_model_from_checkpoint(&cfg, ck, p, out);
    if (s != NB_OK) {
        nb_checkpoint_close(ck);
        nb_model_config_free(&cfg);
        return s;
    }
    (*out)->owns_ck = 1;
    NB_LOG_INFO("model", "%s: %s, %d layers, hidden %d, vocab %d, %s weights", dir, nb_arch_name(cfg.arch),
                cfg.num_layers, cfg.hidden_size, cfg.vocab_size, nb_quant_algo_name(cfg.quant.algo));
    return NB_OK;
}

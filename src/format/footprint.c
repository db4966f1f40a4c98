/* Weight footprint and per-GPU memory under TP/EP (format/footprint.h).
 * Exercise: build-fmt/tests/test_tools footprint; build-fmt/nibble inspect tests/fixtures/glm_moe_dsa */
#include "format/footprint.h"

#include <stdio.h>
#include <string.h>

static void nb_fp_common(const nb_model_config *cfg, nb_footprint *fp)
{
    fp->n_experts = cfg->n_routed_experts;
    if (cfg->attn == NB_ATTN_GQA) {
        double q = (double)cfg->num_heads * cfg->head_dim, kv = (double)cfg->num_kv_heads * cfg->head_dim;
        fp->kv_fraction = 2 * kv / (2 * q + 2 * kv); /* q and o vs k and v, all hidden x dim */
        fp->n_kv_heads = cfg->num_kv_heads;
    }
}

void nb_footprint_from_checkpoint(const nb_model_config *cfg, const nb_checkpoint *ck, nb_footprint *fp)
{
    memset(fp, 0, sizeof *fp);
    fp->exact = 1;
    nb_fp_common(cfg, fp);
    const int n = nb_checkpoint_count(ck);
    for (int i = 0; i < n; i++) {
        const nb_st_tensor *t = nb_checkpoint_at(ck, i);
        const nb_tensor_info ti = nb_tensor_info_of(t->name);
        int64_t elems = nb_st_numel(t), params = ti.quant_aux ? 0 : elems;
        /* an NVFP4 weight: U8 with a sibling weight_scale holds two weights a byte */
        if (t->dtype == NB_DTYPE_U8 && ti.is_weight) {
            char sib[1024];
            snprintf(sib, sizeof sib, "%s_scale", t->name);
            if (nb_checkpoint_find(ck, sib)) params = 2 * elems;
        }
        fp->n_tensors++;
        fp->dtype_tensors[t->dtype]++;
        fp->dtype_elems[t->dtype] += elems;
        fp->dtype_bytes[t->dtype] += (int64_t)t->nbytes;
        if (ti.layer >= cfg->num_layers) {
            fp->mtp_params += params;
            fp->mtp_bytes += (int64_t)t->nbytes;
            continue;
        }
        fp->params[ti.role] += params;
        fp->bytes[ti.role] += (int64_t)t->nbytes;
    }
}

/* A module name standing for a role, to test against quantization exclude globs. */
static void nb_fp_module_of(const nb_model_config *cfg, nb_tensor_role r, char *buf, size_t n)
{
    int moe = 0, dense = 0;
    for (int l = cfg->num_layers - 1; l >= 0; l--) {
        if (cfg->layer_is_moe[l]) moe = l;
        else dense = l;
    }
    const char *m = NULL;
    int layer = moe;
    switch (r) {
    case NB_ROLE_ATTN_HEADS: m = cfg->attn == NB_ATTN_MLA ? "self_attn.kv_b_proj" : "self_attn.q_proj"; break;
    case NB_ROLE_ATTN_LATENT: m = "self_attn.kv_a_proj_with_mqa"; break;
    case NB_ROLE_INDEXER: m = "self_attn.indexer.wk"; break;
    case NB_ROLE_ROUTER: m = "mlp.gate"; break;
    case NB_ROLE_EXPERT: m = "mlp.experts.0.down_proj"; break;
    case NB_ROLE_SHARED_EXPERT: m = "mlp.shared_experts.down_proj"; break;
    case NB_ROLE_DENSE_MLP: m = "mlp.down_proj"; layer = dense; break;
    case NB_ROLE_LM_HEAD: snprintf(buf, n, "lm_head"); return;
    default: snprintf(buf, n, "?"); return;
    }
    snprintf(buf, n, "model.layers.%d.%s", layer, m);
}

void nb_footprint_from_config(const nb_model_config *cfg, int elem_bytes, nb_footprint *fp)
{
    memset(fp, 0, sizeof *fp);
    nb_fp_common(cfg, fp);
    nb_model_config_param_breakdown(cfg, fp->params);
    const nb_quant_config *q = &cfg->quant;
    for (int r = 0; r < NB_ROLE_COUNT; r++) {
        double b = (double)fp->params[r] * elem_bytes;
        /* quantized checkpoints keep embeddings, norms and routers in high precision;
         * lm_head only when not excluded (ModelOpt excludes it by default) */
        int quantizable = nb_tensor_role_is_linear((nb_tensor_role)r) && r != NB_ROLE_ROUTER;
        if (quantizable && q->algo != NB_QUANT_NONE) {
            char mod[256];
            nb_fp_module_of(cfg, (nb_tensor_role)r, mod, sizeof mod);
            if (!nb_quant_excluded(q, mod)) {
                if (q->algo == NB_QUANT_NVFP4) b = (double)fp->params[r] * (0.5 + 1.0 / 16);
                else b = (double)fp->params[r] * (1.0 + 4.0 / ((double)q->block_n * q->block_k));
            }
        }
        fp->bytes[r] = (int64_t)b;
    }
}

int64_t nb_footprint_total_params(const nb_footprint *fp)
{
    int64_t s = 0;
    for (int r = 0; r < NB_ROLE_COUNT; r++) s += fp->params[r];
    return s;
}

int64_t nb_footprint_total_bytes(const nb_footprint *fp)
{
    int64_t s = 0;
    for (int r = 0; r < NB_ROLE_COUNT; r++) s += fp->bytes[r];
    return s;
}

int64_t nb_footprint_per_gpu(const nb_footprint *fp, int tp, int ep)
{
    const int64_t *b = fp->bytes;
    double rep = (double)(b[NB_ROLE_EMBED] + b[NB_ROLE_LM_HEAD] + b[NB_ROLE_NORM] + b[NB_ROLE_ROUTER] +
                          b[NB_ROLE_ATTN_LATENT] + b[NB_ROLE_INDEXER] + b[NB_ROLE_OTHER]);
    double ffn = (double)(b[NB_ROLE_SHARED_EXPERT] + b[NB_ROLE_DENSE_MLP]), attn = (double)b[NB_ROLE_ATTN_HEADS];
    double experts = (double)b[NB_ROLE_EXPERT];
    if (tp > 1) {
        int kv_split = fp->n_kv_heads ? (tp < fp->n_kv_heads ? tp : fp->n_kv_heads) : tp;
        attn = attn * (1 - fp->kv_fraction) / tp + attn * fp->kv_fraction / kv_split;
        ffn /= tp;
        experts /= tp;
    } else if (ep > 1 && fp->n_experts > 0) {
        int per = (fp->n_experts + ep - 1) / ep;
        experts = experts * per / fp->n_experts;
    }
    return (int64_t)(rep + ffn + attn + experts + 0.5);
}

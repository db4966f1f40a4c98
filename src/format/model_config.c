/* config.json → nb_model_config (format/model_config.h) for glm_moe_dsa, deepseek_v3,
 * glm4_moe and qwen3_moe. Defaults are those of HF transformers 5.x's configuration
 * classes; the core dimensions have no default here (a tiny test config silently taking
 * the 671B defaults would be worse than an error). What the modeling files actually do
 * wins over what a config key claims (see rope.interleave for glm_moe_dsa). Reference:
 * transformers 5.24, the version the tests/fixtures checkpoints were made with.
 * Exercise: build-fmt/tests/test_model_config. */
#include "format/model_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"

static const char *const nb_arch_names[NB_ARCH_COUNT] = {
    [NB_ARCH_GLM_MOE_DSA] = "glm_moe_dsa",
    [NB_ARCH_DEEPSEEK_V3] = "deepseek_v3",
    [NB_ARCH_GLM4_MOE] = "glm4_moe",
    [NB_ARCH_QWEN3_MOE] = "qwen3_moe",
};
/* HF class names, for configs without model_type. */
static const char *const nb_arch_classes[NB_ARCH_COUNT] = {
    [NB_ARCH_GLM_MOE_DSA] = "GlmMoeDsaForCausalLM",
    [NB_ARCH_DEEPSEEK_V3] = "DeepseekV3ForCausalLM",
    [NB_ARCH_GLM4_MOE] = "Glm4MoeForCausalLM",
    [NB_ARCH_QWEN3_MOE] = "Qwen3MoeForCausalLM",
};

const char *nb_arch_name(nb_arch a) { return (unsigned)a < NB_ARCH_COUNT ? nb_arch_names[a] : "?"; }

const char *nb_arch_supported_list(void) { return "glm_moe_dsa, deepseek_v3, glm4_moe, qwen3_moe"; }

void nb_model_config_free(nb_model_config *cfg)
{
    if (cfg) nb_quant_config_free(&cfg->quant);
}

/* An integer field that must be present and within [lo, hi]. */
static nb_status nb_cfg_req(const cJSON *j, const char *key, int lo, int hi, int *out, const char *what)
{
    int64_t v;
    int found;
    NB_TRY(nb_json_int(j, key, 0, &v, what, &found));
    if (!found)
        return nb_error(NB_ERR_FORMAT, "%s: required field '%s' is missing (model_type %s)", what, key,
                        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "model_type")));
    if (v < lo || v > hi) return nb_error(NB_ERR_FORMAT, "%s: '%s' = %lld out of range [%d, %d]", what, key, (long long)v, lo, hi);
    *out = (int)v;
    return NB_OK;
}

/* An optional integer field (null counts as absent) within [lo, hi]. */
static nb_status nb_cfg_opt(const cJSON *j, const char *key, int dflt, int lo, int hi, int *out, const char *what)
{
    int64_t v;
    NB_TRY(nb_json_int(j, key, dflt, &v, what, NULL));
    if (v < lo || v > hi) return nb_error(NB_ERR_FORMAT, "%s: '%s' = %lld out of range [%d, %d]", what, key, (long long)v, lo, hi);
    *out = (int)v;
    return NB_OK;
}

/* eos_token_id: an int or a list of ints; appended to cfg->eos_ids without repeats. */
static nb_status nb_cfg_add_eos(nb_model_config *cfg, const cJSON *v, const char *what)
{
    if (!v || cJSON_IsNull(v)) return NB_OK;
    const cJSON *one = cJSON_IsArray(v) ? v->child : v;
    for (; one; one = cJSON_IsArray(v) ? one->next : NULL) {
        if (!cJSON_IsNumber(one) || one->valuedouble < 0 || one->valuedouble > 1e9 ||
            one->valuedouble != floor(one->valuedouble))
            return nb_error(NB_ERR_FORMAT, "%s: 'eos_token_id' must be a token id or a list of them", what);
        int id = (int)one->valuedouble, dup = 0;
        for (int i = 0; i < cfg->n_eos; i++) dup |= cfg->eos_ids[i] == id;
        if (dup) continue;
        if (cfg->n_eos == NB_MAX_EOS) return nb_error(NB_ERR_UNSUPPORTED, "%s: more than %d eos ids", what, NB_MAX_EOS);
        cfg->eos_ids[cfg->n_eos++] = id;
    }
    return NB_OK;
}

/* rope_parameters (transformers 5) or rope_scaling + rope_theta (older files). */
static nb_status nb_cfg_rope(const cJSON *j, nb_model_config *c, int rope_head_dim, double dflt_partial, const char *what)
{
    nb_rope_config *r = &c->rope;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    double theta, partial;
    NB_TRY(nb_json_num(j, "rope_theta", 10000.0, &theta, what, NULL));
    NB_TRY(nb_json_num(rp, "rope_theta", theta, &r->theta, what, NULL));
    NB_TRY(nb_json_num(j, "partial_rotary_factor", dflt_partial, &partial, what, NULL));
    NB_TRY(nb_json_num(rp, "partial_rotary_factor", partial, &partial, what, NULL));
    if (!(r->theta > 0)) return nb_error(NB_ERR_FORMAT, "%s: rope_theta must be positive", what);
    if (!(partial > 0 && partial <= 1)) return nb_error(NB_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", what);
    r->rotary_dim = (int)(rope_head_dim * partial); /* int() truncation, as HF */
    if (r->rotary_dim < 2 || r->rotary_dim % 2)
        return nb_error(NB_ERR_FORMAT, "%s: rotary dimension %d (head %d x partial_rotary_factor %g) must be even and >= 2",
                        what, r->rotary_dim, rope_head_dim, partial);
    const char *type;
    NB_TRY(nb_json_str(rp, "type", "default", &type, what, NULL));
    NB_TRY(nb_json_str(rp, "rope_type", type, &type, what, NULL));
    if (!strcmp(type, "default")) {
        r->type = NB_ROPE_DEFAULT;
        r->factor = 1.0;
        return NB_OK;
    }
    if (strcmp(type, "yarn"))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: rope type '%s' (supported: default, yarn)", what, type);
    r->type = NB_ROPE_YARN;
    double omp;
    int found;
    NB_TRY(nb_json_num(rp, "factor", 0, &r->factor, what, &found));
    NB_TRY(nb_json_num(j, "original_max_position_embeddings", c->max_position_embeddings, &omp, what, NULL));
    NB_TRY(nb_json_num(rp, "original_max_position_embeddings", omp, &r->original_max_position_embeddings, what, NULL));
    if (!found) r->factor = c->max_position_embeddings / r->original_max_position_embeddings; /* HF's fallback */
    NB_TRY(nb_json_num(rp, "beta_fast", 32.0, &r->beta_fast, what, NULL));
    NB_TRY(nb_json_num(rp, "beta_slow", 1.0, &r->beta_slow, what, NULL));
    NB_TRY(nb_json_num(rp, "mscale", 0.0, &r->mscale, what, NULL));
    NB_TRY(nb_json_num(rp, "mscale_all_dim", 0.0, &r->mscale_all_dim, what, NULL));
    NB_TRY(nb_json_num(rp, "attention_factor", 0.0, &r->attention_factor, what, NULL));
    if (!(r->factor > 0) || !(r->original_max_position_embeddings > 0))
        return nb_error(NB_ERR_FORMAT, "%s: yarn needs a positive factor and original_max_position_embeddings", what);
    return NB_OK;
}

/* layer_is_moe from mlp_layer_types ("dense" / "sparse"), when the config has it. */
static nb_status nb_cfg_layer_types(const cJSON *j, nb_model_config *c, int *found, const char *what)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
    *found = 0;
    if (!lt || cJSON_IsNull(lt)) return NB_OK;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->num_layers)
        return nb_error(NB_ERR_FORMAT, "%s: 'mlp_layer_types' must list one type per layer (%d)", what, c->num_layers);
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
        const char *s = cJSON_GetStringValue(e);
        if (s && !strcmp(s, "dense")) c->layer_is_moe[i] = 0;
        else if (s && (!strcmp(s, "sparse") || !strcmp(s, "moe"))) c->layer_is_moe[i] = 1;
        else return nb_error(NB_ERR_FORMAT, "%s: mlp_layer_types[%d] must be \"dense\" or \"sparse\"", what, i);
    }
    *found = 1;
    return NB_OK;
}

/* DSA indexer per layer (transformers >= 5.24): indexer_types[i] "full" runs the layer's
 * own indexer (it has indexer weights); "shared" reuses the previous full layer's top-k
 * (no indexer weights). Absent: index_topk_pattern ("FSSF..." or a list), else the
 * schedule full iff max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0
 * (defaults 2 and 1: every layer full). */
static nb_status nb_cfg_indexer_types(const cJSON *j, nb_model_config *c, const char *what)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, "indexer_types");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "index_topk_pattern");
    if (it && !cJSON_IsNull(it)) {
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != c->num_layers)
            return nb_error(NB_ERR_FORMAT, "%s: 'indexer_types' must list one entry per layer (%d)", what, c->num_layers);
        int i = 0;
        for (const cJSON *e = it->child; e; e = e->next, i++) {
            const char *s = cJSON_GetStringValue(e);
            if (s && !strcmp(s, "full")) c->layer_has_indexer[i] = 1;
            else if (s && !strcmp(s, "shared")) c->layer_has_indexer[i] = 0;
            else return nb_error(NB_ERR_FORMAT, "%s: indexer_types[%d] must be \"full\" or \"shared\"", what, i);
        }
    } else if (cJSON_IsString(pat)) {
        const char *p = pat->valuestring;
        if ((int)strlen(p) != c->num_layers)
            return nb_error(NB_ERR_FORMAT, "%s: 'index_topk_pattern' must have one letter per layer (%d)", what, c->num_layers);
        for (int i = 0; i < c->num_layers; i++) {
            if (p[i] != 'F' && p[i] != 'S')
                return nb_error(NB_ERR_FORMAT, "%s: index_topk_pattern[%d] must be F or S", what, i);
            c->layer_has_indexer[i] = p[i] == 'F';
        }
    } else {
        int freq = 1, off = 2;
        NB_TRY(nb_cfg_opt(j, "index_topk_freq", 1, -(1 << 20), 1 << 20, &freq, what));
        NB_TRY(nb_cfg_opt(j, "index_skip_topk_offset", 2, -(1 << 20), 1 << 20, &off, what));
        if (freq < 1) freq = 1;
        for (int i = 0; i < c->num_layers; i++) c->layer_has_indexer[i] = NB_MAX(i - off + 1, 0) % freq == 0;
    }
    if (c->num_layers > 0 && !c->layer_has_indexer[0])
        return nb_error(NB_ERR_FORMAT, "%s: layer 0's indexer is \"shared\" but no earlier layer runs one", what);
    return NB_OK;
}

static nb_status nb_cfg_moe(const cJSON *j, nb_model_config *c, const char *what)
{
    const nb_arch a = c->arch;
    const int qwen = a == NB_ARCH_QWEN3_MOE;
    /* the expert count under its family name or an alias transformers maps onto it */
    const char *ekey = qwen ? "num_experts" : "n_routed_experts";
    static const char *const alias[] = {"num_local_experts", "num_experts", "n_routed_experts"};
    for (size_t i = 0; i < NB_ARRAY_LEN(alias) && !cJSON_GetObjectItemCaseSensitive(j, ekey); i++)
        if (cJSON_GetObjectItemCaseSensitive(j, alias[i])) ekey = alias[i];
    NB_TRY(nb_cfg_req(j, ekey, 1, 1 << 16, &c->n_routed_experts, what));
    NB_TRY(nb_cfg_req(j, "num_experts_per_tok", 1, c->n_routed_experts, &c->num_experts_per_tok, what));
    NB_TRY(nb_cfg_req(j, "moe_intermediate_size", 1, 1 << 24, &c->moe_intermediate_size, what));
    NB_TRY(nb_cfg_opt(j, "n_shared_experts", qwen ? 0 : 1, 0, 64, &c->n_shared_experts, what));
    if (qwen) c->n_shared_experts = 0; /* Qwen3-MoE has no shared expert whatever the file says */
    c->shared_intermediate_size = c->moe_intermediate_size * c->n_shared_experts;
    const int ds = a == NB_ARCH_DEEPSEEK_V3;
    NB_TRY(nb_cfg_opt(j, "n_group", ds ? 8 : 1, 1, c->n_routed_experts, &c->n_group, what));
    NB_TRY(nb_cfg_opt(j, "topk_group", ds ? 4 : 1, 1, c->n_group, &c->topk_group, what));
    if (c->n_routed_experts % c->n_group)
        return nb_error(NB_ERR_FORMAT, "%s: n_routed_experts %d is not a multiple of n_group %d", what,
                        c->n_routed_experts, c->n_group);
    NB_TRY(nb_json_bool(j, "norm_topk_prob", !qwen, &c->norm_topk_prob, what, NULL));
    NB_TRY(nb_json_num(j, "routed_scaling_factor", (a == NB_ARCH_GLM_MOE_DSA || ds) ? 2.5 : 1.0,
                       &c->routed_scaling_factor, what, NULL));
    const char *sf, *tm;
    NB_TRY(nb_json_str(j, "scoring_func", qwen ? "softmax" : "sigmoid", &sf, what, NULL));
    if (!strcmp(sf, "sigmoid")) c->scoring = NB_SCORE_SIGMOID;
    else if (!strcmp(sf, "softmax")) c->scoring = NB_SCORE_SOFTMAX;
    else return nb_error(NB_ERR_UNSUPPORTED, "%s: scoring_func '%s' (supported: sigmoid, softmax)", what, sf);
    NB_TRY(nb_json_str(j, "topk_method", qwen ? "greedy" : "noaux_tc", &tm, what, NULL));
    if (!strcmp(tm, "noaux_tc")) c->topk_method = NB_TOPK_NOAUX_TC;
    else if (!strcmp(tm, "group_limited_greedy")) c->topk_method = NB_TOPK_GROUP_LIMITED;
    else if (!strcmp(tm, "greedy")) c->topk_method = NB_TOPK_GREEDY;
    else return nb_error(NB_ERR_UNSUPPORTED, "%s: topk_method '%s' (supported: noaux_tc, group_limited_greedy, greedy)", what, tm);
    c->has_score_correction_bias = c->topk_method == NB_TOPK_NOAUX_TC;

    /* which layers are MoE */
    int found;
    NB_TRY(nb_cfg_layer_types(j, c, &found, what));
    if (found) return NB_OK;
    if (qwen) {
        int step = 1;
        NB_TRY(nb_cfg_opt(j, "decoder_sparse_step", 1, 1, 1 << 20, &step, what));
        for (int i = 0; i < c->num_layers; i++) c->layer_is_moe[i] = (i + 1) % step == 0;
        const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (only && !cJSON_IsNull(only)) {
            if (!cJSON_IsArray(only)) return nb_error(NB_ERR_FORMAT, "%s: 'mlp_only_layers' must be a list of layer indices", what);
            for (const cJSON *e = only->child; e; e = e->next) {
                if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= c->num_layers ||
                    e->valuedouble != floor(e->valuedouble))
                    return nb_error(NB_ERR_FORMAT, "%s: mlp_only_layers holds %g, not a layer index", what, e->valuedouble);
                c->layer_is_moe[(int)e->valuedouble] = 0;
            }
        }
        return NB_OK;
    }
    int fk = 0, freq = 1;
    NB_TRY(nb_cfg_opt(j, "first_k_dense_replace", a == NB_ARCH_GLM4_MOE ? 1 : 3, 0, 1 << 20, &fk, what));
    NB_TRY(nb_cfg_opt(j, "moe_layer_freq", 1, 1, 1 << 20, &freq, what));
    for (int i = 0; i < c->num_layers; i++) c->layer_is_moe[i] = i >= fk && i % freq == 0;
    return NB_OK;
}

static nb_status nb_cfg_arch(const cJSON *j, nb_model_config *c, const char *what)
{
    const char *mt;
    NB_TRY(nb_json_str(j, "model_type", NULL, &mt, what, NULL));
    if (!mt) {
        const cJSON *archs = cJSON_GetObjectItemCaseSensitive(j, "architectures");
        const char *cls = cJSON_IsArray(archs) ? cJSON_GetStringValue(archs->child) : NULL;
        for (int a = 0; cls && a < NB_ARCH_COUNT; a++)
            if (!strcmp(cls, nb_arch_classes[a])) mt = nb_arch_names[a];
        if (!mt)
            return nb_error(NB_ERR_UNSUPPORTED, "%s: no 'model_type' (supported model types: %s)", what,
                            nb_arch_supported_list());
    }
    for (int a = 0; a < NB_ARCH_COUNT; a++) {
        if (!strcmp(mt, nb_arch_names[a])) {
            c->arch = (nb_arch)a;
            snprintf(c->model_type, sizeof c->model_type, "%s", mt);
            return NB_OK;
        }
    }
    return nb_error(NB_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (supported: %s)", what, mt,
                    nb_arch_supported_list());
}

static nb_status nb_cfg_parse_tree(const char *what, const cJSON *j, nb_model_config *c)
{
    if (!cJSON_IsObject(j)) return nb_error(NB_ERR_FORMAT, "%s: not a JSON object", what);
    NB_TRY(nb_cfg_arch(j, c, what));
    const nb_arch a = c->arch;
    const int mla = a == NB_ARCH_GLM_MOE_DSA || a == NB_ARCH_DEEPSEEK_V3;
    c->attn = mla ? NB_ATTN_MLA : NB_ATTN_GQA;

    const char *dt;
    NB_TRY(nb_json_str(j, "dtype", "", &dt, what, NULL));
    NB_TRY(nb_json_str(j, "torch_dtype", dt, &dt, what, NULL));
    snprintf(c->dtype, sizeof c->dtype, "%s", dt);
    const char *act;
    NB_TRY(nb_json_str(j, "hidden_act", "silu", &act, what, NULL));
    if (strcmp(act, "silu")) return nb_error(NB_ERR_UNSUPPORTED, "%s: hidden_act '%s' (supported: silu)", what, act);

    NB_TRY(nb_cfg_req(j, "vocab_size", 1, 1 << 30, &c->vocab_size, what));
    NB_TRY(nb_cfg_req(j, "hidden_size", 1, 1 << 20, &c->hidden_size, what));
    NB_TRY(nb_cfg_req(j, "num_hidden_layers", 1, 1 << 20, &c->num_layers, what));
    if (c->num_layers > NB_MAX_LAYERS)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %d layers (at most %d)", what, c->num_layers, NB_MAX_LAYERS);
    NB_TRY(nb_cfg_req(j, "num_attention_heads", 1, 1 << 16, &c->num_heads, what));
    static const int max_pos[NB_ARCH_COUNT] = {202752, 4096, 131072, 32768};
    NB_TRY(nb_cfg_opt(j, "max_position_embeddings", max_pos[a], 1, 1 << 30, &c->max_position_embeddings, what));
    NB_TRY(nb_json_num(j, "rms_norm_eps", (a == NB_ARCH_DEEPSEEK_V3 || a == NB_ARCH_QWEN3_MOE) ? 1e-6 : 1e-5,
                       &c->rms_norm_eps, what, NULL));
    if (!(c->rms_norm_eps > 0)) return nb_error(NB_ERR_FORMAT, "%s: rms_norm_eps must be positive", what);
    NB_TRY(nb_json_bool(j, "tie_word_embeddings", 0, &c->tie_word_embeddings, what, NULL));
    NB_TRY(nb_json_bool(j, "attention_bias", 0, &c->attention_bias, what, NULL));
    /* num_nextn_predict_layers (checkpoints) or num_mtp_layers (transformers >= 5.24) */
    NB_TRY(nb_cfg_opt(j, "num_mtp_layers", 0, 0, 64, &c->num_nextn_predict_layers, what));
    NB_TRY(nb_cfg_opt(j, "num_nextn_predict_layers", c->num_nextn_predict_layers, 0, 64, &c->num_nextn_predict_layers, what));

    if (mla) {
        NB_TRY(nb_cfg_opt(j, "q_lora_rank", 0, 0, 1 << 20, &c->q_lora_rank, what)); /* null: plain q_proj */
        NB_TRY(nb_cfg_req(j, "kv_lora_rank", 1, 1 << 20, &c->kv_lora_rank, what));
        NB_TRY(nb_cfg_req(j, "qk_nope_head_dim", 0, 1 << 16, &c->qk_nope_head_dim, what));
        NB_TRY(nb_cfg_req(j, "qk_rope_head_dim", 2, 1 << 16, &c->qk_rope_head_dim, what));
        NB_TRY(nb_cfg_req(j, "v_head_dim", 1, 1 << 16, &c->v_head_dim, what));
        c->num_kv_heads = c->num_heads;
        c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
        NB_TRY(nb_cfg_rope(j, c, c->qk_rope_head_dim, 1.0, what));
        /* DeepSeek-V3: HF applies the interleaved (pairwise) layout when rope_interleave
         * (default true). GLM-5: transformers 5.24 (the fixtures' version) always rotates
         * interleaved pairs, in attention and indexer alike, whatever rope_interleave
         * says (5.2 rotated halves: a reference bug it fixed). */
        if (a == NB_ARCH_DEEPSEEK_V3) NB_TRY(nb_json_bool(j, "rope_interleave", 1, &c->rope.interleave, what, NULL));
        else c->rope.interleave = 1;
    } else {
        NB_TRY(nb_cfg_opt(j, "num_key_value_heads", c->num_heads, 1, c->num_heads, &c->num_kv_heads, what));
        if (c->num_heads % c->num_kv_heads)
            return nb_error(NB_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", what,
                            c->num_heads, c->num_kv_heads);
        NB_TRY(nb_cfg_opt(j, "head_dim", c->hidden_size / c->num_heads, 2, 1 << 16, &c->head_dim, what));
        if (a == NB_ARCH_QWEN3_MOE) c->qk_norm = 1;
        else NB_TRY(nb_json_bool(j, "use_qk_norm", 0, &c->qk_norm, what, NULL));
        NB_TRY(nb_cfg_rope(j, c, c->head_dim, a == NB_ARCH_GLM4_MOE ? 0.5 : 1.0, what));
        c->rope.interleave = 0;
    }

    NB_TRY(nb_cfg_moe(j, c, what));
    c->n_moe_layers = 0;
    for (int i = 0; i < c->num_layers; i++) c->n_moe_layers += c->layer_is_moe[i];
    if (c->n_moe_layers < c->num_layers) NB_TRY(nb_cfg_req(j, "intermediate_size", 1, 1 << 24, &c->intermediate_size, what));
    else NB_TRY(nb_cfg_opt(j, "intermediate_size", 0, 0, 1 << 24, &c->intermediate_size, what));

    if (a == NB_ARCH_GLM_MOE_DSA) {
        NB_TRY(nb_cfg_opt(j, "index_n_heads", 32, 1, 1 << 12, &c->index_n_heads, what));
        NB_TRY(nb_cfg_opt(j, "index_head_dim", 128, 2, 1 << 14, &c->index_head_dim, what));
        NB_TRY(nb_cfg_opt(j, "index_topk", 2048, 1, 1 << 30, &c->index_topk, what));
        if (c->q_lora_rank == 0) return nb_error(NB_ERR_FORMAT, "%s: glm_moe_dsa needs q_lora_rank (the indexer reads q_a's output)", what);
        if (c->index_head_dim < c->qk_rope_head_dim)
            return nb_error(NB_ERR_FORMAT, "%s: index_head_dim %d is smaller than qk_rope_head_dim %d", what,
                            c->index_head_dim, c->qk_rope_head_dim);
        NB_TRY(nb_cfg_indexer_types(j, c, what));
    }

    int64_t bos, pad;
    const int ds_like = mla;
    NB_TRY(nb_json_int(j, "bos_token_id", ds_like ? 0 : -1, &bos, what, NULL));
    NB_TRY(nb_json_int(j, "pad_token_id", -1, &pad, what, NULL));
    c->bos_id = (int)bos;
    c->pad_id = (int)pad;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    if (eos) NB_TRY(nb_cfg_add_eos(c, eos, what));
    else if (ds_like) c->eos_ids[c->n_eos++] = 1; /* HF class default */
    return NB_OK;
}

nb_status nb_model_config_parse(const char *what, const char *json, nb_model_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *j;
    NB_TRY(nb_json_parse(what, json, strlen(json), &j));
    nb_status s = nb_cfg_parse_tree(what, j, cfg);
    if (!s) s = nb_quant_config_load(NULL, j, &cfg->quant);
    cJSON_Delete(j);
    if (s) nb_model_config_free(cfg);
    return s;
}

nb_status nb_model_config_load(const char *dir, nb_model_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    char path[4096];
    nb_path_join(path, sizeof path, dir, "config.json");
    cJSON *j;
    NB_TRY(nb_json_load_file(path, &j));
    nb_status s = nb_cfg_parse_tree(path, j, cfg);
    if (!s) s = nb_quant_config_load(dir, j, &cfg->quant);
    cJSON_Delete(j);
    if (!s) {
        nb_path_join(path, sizeof path, dir, "generation_config.json");
        if (nb_path_exists(path)) {
            cJSON *g;
            s = nb_json_load_file(path, &g);
            if (!s) s = nb_cfg_add_eos(cfg, cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"), path);
            cJSON_Delete(g);
        }
    }
    if (s) nb_model_config_free(cfg);
    return s;
}

void nb_model_config_param_breakdown(const nb_model_config *c, int64_t out[NB_ROLE_COUNT])
{
    const int64_t H = c->hidden_size, V = c->vocab_size;
    for (int r = 0; r < NB_ROLE_COUNT; r++) out[r] = 0;
    out[NB_ROLE_EMBED] = V * H;
    out[NB_ROLE_NORM] = H; /* final norm */
    if (!c->tie_word_embeddings) out[NB_ROLE_LM_HEAD] = V * H;
    for (int l = 0; l < c->num_layers; l++) {
        out[NB_ROLE_NORM] += 2 * H; /* input and post-attention norms */
        if (c->attn == NB_ATTN_MLA) {
            const int64_t nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
            if (c->q_lora_rank) {
                out[NB_ROLE_ATTN_LATENT] += H * c->q_lora_rank + (c->attention_bias ? c->q_lora_rank : 0);
                out[NB_ROLE_NORM] += c->q_lora_rank;
                out[NB_ROLE_ATTN_HEADS] += (int64_t)c->q_lora_rank * nh * qk;
            } else {
                out[NB_ROLE_ATTN_HEADS] += H * nh * qk;
            }
            out[NB_ROLE_ATTN_LATENT] += H * (c->kv_lora_rank + c->qk_rope_head_dim);
            if (c->attention_bias) out[NB_ROLE_ATTN_LATENT] += c->kv_lora_rank + c->qk_rope_head_dim;
            out[NB_ROLE_NORM] += c->kv_lora_rank;
            out[NB_ROLE_ATTN_HEADS] += (int64_t)c->kv_lora_rank * nh * (c->qk_nope_head_dim + c->v_head_dim);
            out[NB_ROLE_ATTN_HEADS] += nh * c->v_head_dim * H + (c->attention_bias ? H : 0);
            if (c->arch == NB_ARCH_GLM_MOE_DSA && c->layer_has_indexer[l]) {
                const int64_t ih = c->index_n_heads, id = c->index_head_dim;
                out[NB_ROLE_INDEXER] += (int64_t)c->q_lora_rank * ih * id + H * id + H * ih; /* wq_b, wk, weights_proj */
                out[NB_ROLE_NORM] += 2 * id;                                                 /* k_norm (LayerNorm) */
            }
        } else {
            const int64_t q = (int64_t)c->num_heads * c->head_dim, kv = (int64_t)c->num_kv_heads * c->head_dim;
            out[NB_ROLE_ATTN_HEADS] += H * q + 2 * H * kv + q * H;
            if (c->attention_bias) out[NB_ROLE_ATTN_HEADS] += q + 2 * kv + (c->arch == NB_ARCH_QWEN3_MOE ? H : 0);
            if (c->qk_norm) out[NB_ROLE_NORM] += 2 * c->head_dim;
        }
        if (c->layer_is_moe[l]) {
            out[NB_ROLE_ROUTER] += (int64_t)c->n_routed_experts * H + (c->has_score_correction_bias ? c->n_routed_experts : 0);
            out[NB_ROLE_EXPERT] += (int64_t)c->n_routed_experts * 3 * H * c->moe_intermediate_size;
            out[NB_ROLE_SHARED_EXPERT] += 3 * H * c->shared_intermediate_size;
        } else {
            out[NB_ROLE_DENSE_MLP] += 3 * H * c->intermediate_size;
        }
    }
}

int64_t nb_model_config_param_count(const nb_model_config *c)
{
    int64_t by[NB_ROLE_COUNT], n = 0;
    nb_model_config_param_breakdown(c, by);
    for (int r = 0; r < NB_ROLE_COUNT; r++) n += by[r];
    return n;
}

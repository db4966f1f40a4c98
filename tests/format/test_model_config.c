/* Unit tests for config.json → nb_model_config and the quantization configs, on
 * real-shaped configs in tests/format/data/ (GLM-5, DeepSeek-V3, GLM-4.5, Qwen3-30B-A3B)
 * plus hand-made variants for each optional form.
 * Run from the repository root: build-fmt/tests/test_model_config [NAME_SUBSTRING] */
#include "nbtest.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "format/model_config.h"
#include "format/safetensors.h"

static char *slurp(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "tests/format/data/%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "  cannot read %s\n", path);
        return NULL;
    }
    char *buf = malloc(1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* Parse `base` with one key replaced/added: "key": value (value as JSON text). */
static nb_status parse_with(const char *base_file, const char *key, const char *value, nb_model_config *c)
{
    char *b = slurp(base_file);
    if (!b) return NB_ERR_IO;
    char *text = malloc(strlen(b) + strlen(key) + (value ? strlen(value) : 0) + 64);
    if (!text) {
        free(b);
        return NB_ERR_OUT_OF_MEMORY;
    }
    /* a later duplicate key would be ambiguous; cJSON returns the first, so put ours first */
    const char *rest = strchr(b, '{');
    if (value) sprintf(text, "{\"%s\": %s, %s", key, value, rest ? rest + 1 : "}");
    else strcpy(text, b);
    if (value) {
        /* drop the original occurrence by renaming it */
        char pat[128];
        snprintf(pat, sizeof pat, "\n  \"%s\"", key);
        char *p = strstr(text, pat);
        if (p) p[4] = 'X';
    }
    nb_status s = nb_model_config_parse(base_file, text, c);
    free(text);
    free(b);
    return s;
}

static void test_glm5(void)
{
    nb_model_config c;
    char *j = slurp("glm5_config.json");
    NB_CHECK_OK(nb_model_config_parse("glm5", j, &c));
    free(j);
    NB_CHECK(c.arch == NB_ARCH_GLM_MOE_DSA && c.attn == NB_ATTN_MLA && !strcmp(c.model_type, "glm_moe_dsa"));
    NB_CHECK(c.hidden_size == 6144 && c.num_layers == 78 && c.num_heads == 64 && c.num_kv_heads == 64);
    NB_CHECK(c.q_lora_rank == 2048 && c.kv_lora_rank == 512 && c.qk_nope_head_dim == 192 && c.qk_rope_head_dim == 64);
    NB_CHECK(c.v_head_dim == 256 && c.head_dim == 256 && c.vocab_size == 154880);
    NB_CHECK(c.n_routed_experts == 256 && c.num_experts_per_tok == 8 && c.n_shared_experts == 1);
    NB_CHECK(c.moe_intermediate_size == 2048 && c.shared_intermediate_size == 2048 && c.intermediate_size == 12288);
    NB_CHECK(c.index_n_heads == 32 && c.index_head_dim == 128 && c.index_topk == 2048);
    NB_CHECK(c.scoring == NB_SCORE_SIGMOID && c.topk_method == NB_TOPK_NOAUX_TC && c.has_score_correction_bias);
    NB_CHECK(c.norm_topk_prob && c.routed_scaling_factor == 2.5 && c.n_group == 1 && c.topk_group == 1);
    for (int i = 0; i < 78; i++) {
        NB_CHECK(c.layer_is_moe[i] == (i >= 3));
        NB_CHECK(c.layer_has_indexer[i]);
    }
    NB_CHECK(c.n_moe_layers == 75 && c.num_nextn_predict_layers == 1);
    NB_CHECK(c.rope.type == NB_ROPE_DEFAULT && c.rope.theta == 1e6 && c.rope.rotary_dim == 64 && c.rope.interleave == 1);
    NB_CHECK(c.n_eos == 3 && c.eos_ids[0] == 154820 && c.eos_ids[2] == 154829 && c.bos_id == 0 && c.pad_id == 154820);
    NB_CHECK(c.rms_norm_eps == 1e-5 && !c.tie_word_embeddings && c.quant.algo == NB_QUANT_NONE);
    /* GLM-5 is announced as a ~744B-parameter model (the MTP layer not counted here) */
    double p = (double)nb_model_config_param_count(&c);
    NB_CHECK_MSG(p > 730e9 && p < 760e9, "GLM-5 parameters %.1fB", p / 1e9);
    nb_model_config_free(&c);

    /* mlp_layer_types wins over first_k_dense_replace; indexer_types per layer */
    char types[78 * 10 + 8] = "[", ind[78 * 10 + 8] = "[";
    for (int i = 0; i < 78; i++) {
        strcat(types, i % 2 ? "\"sparse\"" : "\"dense\"");
        strcat(ind, i % 3 == 0 ? "\"full\"" : "\"shared\"");
        strcat(types, i < 77 ? "," : "]");
        strcat(ind, i < 77 ? "," : "]");
    }
    NB_CHECK_OK(parse_with("glm5_config.json", "mlp_layer_types", types, &c));
    for (int i = 0; i < 78; i++) NB_CHECK(c.layer_is_moe[i] == (i % 2));
    NB_CHECK(c.n_moe_layers == 39);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("glm5_config.json", "indexer_types", ind, &c));
    for (int i = 0; i < 78; i++) NB_CHECK(c.layer_has_indexer[i] == (i % 3 == 0));
    nb_model_config_free(&c);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "indexer_types", types, &c), NB_ERR_FORMAT);
    /* the schedule without a list: full iff max(i - offset + 1, 0) % freq == 0 */
    NB_CHECK_OK(parse_with("glm5_config.json", "index_topk_freq", "4", &c));
    for (int i = 0; i < 78; i++) NB_CHECK(c.layer_has_indexer[i] == (i <= 1 || (i - 1) % 4 == 0));
    nb_model_config_free(&c);
    char pat[80];
    for (int i = 0; i < 78; i++) pat[i] = i % 2 ? 'S' : 'F';
    pat[78] = 0;
    char quoted[90];
    snprintf(quoted, sizeof quoted, "\"%s\"", pat);
    NB_CHECK_OK(parse_with("glm5_config.json", "index_topk_pattern", quoted, &c));
    for (int i = 0; i < 78; i++) NB_CHECK(c.layer_has_indexer[i] == !(i % 2));
    nb_model_config_free(&c);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "mlp_layer_types", "[\"dense\"]", &c), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "mlp_layer_types") != NULL);
    /* without first_k_dense_replace: the HF default of 3 dense layers */
    NB_CHECK_OK(parse_with("glm5_config.json", "first_k_dense_replace", "null", &c));
    NB_CHECK(c.n_moe_layers == 75 && !c.layer_is_moe[2] && c.layer_is_moe[3]);
    nb_model_config_free(&c);
}

static void test_deepseek_v3(void)
{
    nb_model_config c;
    char *j = slurp("deepseek_v3_config.json");
    NB_CHECK_OK(nb_model_config_parse("dsv3", j, &c));
    free(j);
    NB_CHECK(c.arch == NB_ARCH_DEEPSEEK_V3 && c.attn == NB_ATTN_MLA && c.q_lora_rank == 1536 && c.head_dim == 192);
    NB_CHECK(c.n_group == 8 && c.topk_group == 4 && c.topk_method == NB_TOPK_NOAUX_TC);
    NB_CHECK(c.rope.type == NB_ROPE_YARN && c.rope.factor == 40 && c.rope.original_max_position_embeddings == 4096);
    NB_CHECK(c.rope.beta_fast == 32 && c.rope.beta_slow == 1 && c.rope.mscale == 1 && c.rope.mscale_all_dim == 1);
    NB_CHECK(c.rope.theta == 10000 && c.rope.interleave == 1 && c.rope.rotary_dim == 64);
    NB_CHECK(c.n_eos == 1 && c.eos_ids[0] == 1 && c.index_n_heads == 0);
    NB_CHECK(c.quant.algo == NB_QUANT_FP8_BLOCK && c.quant.block_n == 128 && c.quant.block_k == 128);
    /* DeepSeek-V3: 671B parameters in the main model */
    double p = (double)nb_model_config_param_count(&c);
    NB_CHECK_MSG(p > 665e9 && p < 677e9, "DeepSeek-V3 parameters %.1fB", p / 1e9);
    nb_model_config_free(&c);
    /* transformers 5 form: rope_parameters holds theta and the yarn fields */
    NB_CHECK_OK(parse_with("deepseek_v3_config.json", "rope_scaling",
                           "{\"rope_type\": \"yarn\", \"rope_theta\": 50000, \"factor\": 4.0, "
                           "\"original_max_position_embeddings\": 8192}",
                           &c));
    NB_CHECK(c.rope.type == NB_ROPE_YARN && c.rope.theta == 50000 && c.rope.factor == 4 && c.rope.beta_fast == 32);
    NB_CHECK(c.rope.original_max_position_embeddings == 8192 && c.rope.mscale == 0);
    nb_model_config_free(&c);
    NB_CHECK_STATUS(parse_with("deepseek_v3_config.json", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", &c),
                    NB_ERR_UNSUPPORTED);
    NB_CHECK(strstr(nb_last_error(), "linear") != NULL);
    NB_CHECK_OK(parse_with("deepseek_v3_config.json", "rope_interleave", "false", &c));
    NB_CHECK(c.rope.interleave == 0);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("deepseek_v3_config.json", "q_lora_rank", "null", &c));
    NB_CHECK(c.q_lora_rank == 0);
    nb_model_config_free(&c);
    NB_CHECK_STATUS(parse_with("deepseek_v3_config.json", "topk_group", "9", &c), NB_ERR_FORMAT);
    NB_CHECK_STATUS(parse_with("deepseek_v3_config.json", "scoring_func", "\"tanh\"", &c), NB_ERR_UNSUPPORTED);
    NB_CHECK_OK(parse_with("deepseek_v3_config.json", "topk_method", "\"group_limited_greedy\"", &c));
    NB_CHECK(c.topk_method == NB_TOPK_GROUP_LIMITED && !c.has_score_correction_bias);
    nb_model_config_free(&c);
}

static void test_glm4_moe(void)
{
    nb_model_config c;
    char *j = slurp("glm4_moe_config.json");
    NB_CHECK_OK(nb_model_config_parse("glm4", j, &c));
    free(j);
    NB_CHECK(c.arch == NB_ARCH_GLM4_MOE && c.attn == NB_ATTN_GQA && c.num_heads == 96 && c.num_kv_heads == 8);
    NB_CHECK(c.head_dim == 128 && c.rope.rotary_dim == 64 && c.rope.interleave == 0 && c.rope.theta == 1e6);
    NB_CHECK(c.attention_bias && c.qk_norm && c.n_routed_experts == 160 && c.n_shared_experts == 1);
    NB_CHECK(c.n_moe_layers == 89 && !c.layer_is_moe[2] && c.layer_is_moe[3]);
    NB_CHECK(c.n_eos == 3 && c.eos_ids[1] == 151336 && c.bos_id == -1);
    NB_CHECK(c.scoring == NB_SCORE_SIGMOID && c.has_score_correction_bias && c.routed_scaling_factor == 2.5);
    /* GLM-4.5: 355B total parameters (its MTP layer included in that figure) */
    double p = (double)nb_model_config_param_count(&c);
    NB_CHECK_MSG(p > 340e9 && p < 360e9, "GLM-4.5 parameters %.1fB", p / 1e9);
    nb_model_config_free(&c);
    /* partial_rotary_factor absent: GLM-4.5's class default 0.5; inside rope_parameters too */
    NB_CHECK_OK(parse_with("glm4_moe_config.json", "partial_rotary_factor", "null", &c));
    NB_CHECK(c.rope.rotary_dim == 64);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("glm4_moe_config.json", "rope_parameters",
                           "{\"rope_type\": \"default\", \"rope_theta\": 5000, \"partial_rotary_factor\": 1.0}", &c));
    NB_CHECK(c.rope.rotary_dim == 128 && c.rope.theta == 5000);
    nb_model_config_free(&c);
}

static void test_qwen3_moe(void)
{
    nb_model_config c;
    char *j = slurp("qwen3_moe_config.json");
    NB_CHECK_OK(nb_model_config_parse("qwen3", j, &c));
    free(j);
    NB_CHECK(c.arch == NB_ARCH_QWEN3_MOE && c.attn == NB_ATTN_GQA && c.qk_norm && c.n_shared_experts == 0);
    NB_CHECK(c.n_routed_experts == 128 && c.num_experts_per_tok == 8 && c.n_moe_layers == 48);
    NB_CHECK(c.scoring == NB_SCORE_SOFTMAX && c.topk_method == NB_TOPK_GREEDY && !c.has_score_correction_bias);
    NB_CHECK(c.norm_topk_prob && c.rope.rotary_dim == 128 && c.n_eos == 1 && c.eos_ids[0] == 151645);
    /* Qwen3-30B-A3B: 30.5B parameters */
    double p = (double)nb_model_config_param_count(&c);
    NB_CHECK_MSG(p > 30.0e9 && p < 31.0e9, "Qwen3-30B-A3B parameters %.2fB", p / 1e9);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("qwen3_moe_config.json", "mlp_only_layers", "[0, 5]", &c));
    NB_CHECK(!c.layer_is_moe[0] && !c.layer_is_moe[5] && c.layer_is_moe[1] && c.n_moe_layers == 46);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("qwen3_moe_config.json", "decoder_sparse_step", "2", &c));
    NB_CHECK(!c.layer_is_moe[0] && c.layer_is_moe[1] && !c.layer_is_moe[2] && c.n_moe_layers == 24);
    nb_model_config_free(&c);
    /* norm_topk_prob defaults to false for Qwen3-MoE */
    NB_CHECK_OK(parse_with("qwen3_moe_config.json", "norm_topk_prob", "null", &c));
    NB_CHECK(!c.norm_topk_prob);
    nb_model_config_free(&c);
    NB_CHECK_OK(parse_with("qwen3_moe_config.json", "eos_token_id", "[7, 9, 7]", &c));
    NB_CHECK(c.n_eos == 2 && c.eos_ids[0] == 7 && c.eos_ids[1] == 9);
    nb_model_config_free(&c);
}

static void test_errors(void)
{
    nb_model_config c;
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "model_type", "\"llama\"", &c), NB_ERR_UNSUPPORTED);
    NB_CHECK_MSG(strstr(nb_last_error(), "'llama'") && strstr(nb_last_error(), "glm_moe_dsa, deepseek_v3, glm4_moe, qwen3_moe"),
                 "%s", nb_last_error());
    NB_CHECK_STATUS(parse_with("glm5_config.json", "hidden_size", "null", &c), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), "'hidden_size'") && strstr(nb_last_error(), "missing"), "%s", nb_last_error());
    NB_CHECK_STATUS(parse_with("glm5_config.json", "kv_lora_rank", "null", &c), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "'kv_lora_rank'") != NULL);
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "num_experts", "null", &c), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "'num_experts'") != NULL);
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "hidden_size", "\"big\"", &c), NB_ERR_FORMAT);
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "num_hidden_layers", "1000", &c), NB_ERR_UNSUPPORTED);
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "hidden_act", "\"gelu\"", &c), NB_ERR_UNSUPPORTED);
    NB_CHECK_STATUS(parse_with("qwen3_moe_config.json", "num_key_value_heads", "5", &c), NB_ERR_FORMAT);
    NB_CHECK_STATUS(nb_model_config_parse("x", "{not json", &c), NB_ERR_FORMAT);
    NB_CHECK_STATUS(nb_model_config_parse("x", "{}", &c), NB_ERR_UNSUPPORTED);
    NB_CHECK(strstr(nb_last_error(), "qwen3_moe") != NULL);
    /* model_type absent but the HF class named */
    NB_CHECK_OK(parse_with("qwen3_moe_config.json", "model_type", "null", &c));
    NB_CHECK(c.arch == NB_ARCH_QWEN3_MOE);
    nb_model_config_free(&c);
}

static void test_quant(void)
{
    nb_model_config c;
    NB_CHECK_OK(parse_with("glm5_config.json", "quantization_config",
                           "{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", \"group_size\": 16, "
                           "\"exclude_modules\": [\"lm_head\", \"model.layers.*.self_attn*\", \"*mlp.gate\"]}",
                           &c));
    NB_CHECK(c.quant.algo == NB_QUANT_NVFP4 && c.quant.group_size == 16 && c.quant.n_exclude == 3);
    NB_CHECK(nb_quant_excluded(&c.quant, "lm_head"));
    NB_CHECK(nb_quant_excluded(&c.quant, "lm_head.weight"));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.7.self_attn.q_a_proj"));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.7.mlp.gate.weight"));
    NB_CHECK(!nb_quant_excluded(&c.quant, "model.layers.7.mlp.experts.3.up_proj"));
    NB_CHECK(!nb_quant_excluded(&c.quant, "model.layers.7.mlp.gate_proj.weight"));
    nb_model_config_free(&c);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "quantization_config",
                               "{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", \"group_size\": 32}", &c),
                    NB_ERR_UNSUPPORTED);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "quantization_config", "{\"quant_method\": \"awq\"}", &c),
                    NB_ERR_UNSUPPORTED);
    NB_CHECK(strstr(nb_last_error(), "awq") != NULL);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "quantization_config", "{\"quant_method\": \"fp8\"}", &c),
                    NB_ERR_UNSUPPORTED);
    NB_CHECK_STATUS(parse_with("glm5_config.json", "quantization_config",
                               "{\"quant_method\": \"fp8\", \"weight_block_size\": [0, 128]}", &c),
                    NB_ERR_FORMAT);

    /* a folder: hf_quant_config.json wins over config.json; generation_config eos merged */
    char dir[] = "/tmp/nb_test_cfg_XXXXXX", path[600];
    NB_ASSERT(mkdtemp(dir));
    char *j = slurp("deepseek_v3_config.json");
    NB_CHECK_OK(nb_write_file(nb_path_join(path, sizeof path, dir, "config.json"), j, strlen(j)));
    free(j);
    const char *hq = "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": "
                     "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"group_size\": 16, "
                     "\"exclude_modules\": [\"lm_head\"]}}";
    NB_CHECK_OK(nb_write_file(nb_path_join(path, sizeof path, dir, "hf_quant_config.json"), hq, strlen(hq)));
    const char *gc = "{\"bos_token_id\": 0, \"eos_token_id\": [1, 42]}";
    NB_CHECK_OK(nb_write_file(nb_path_join(path, sizeof path, dir, "generation_config.json"), gc, strlen(gc)));
    NB_CHECK_OK(nb_model_config_load(dir, &c));
    NB_CHECK(c.quant.algo == NB_QUANT_NVFP4 && c.quant.n_exclude == 1 && nb_quant_excluded(&c.quant, "lm_head"));
    NB_CHECK(c.n_eos == 2 && c.eos_ids[0] == 1 && c.eos_ids[1] == 42);
    nb_model_config_free(&c);
    remove(path);
    remove(nb_path_join(path, sizeof path, dir, "hf_quant_config.json"));
    NB_CHECK_OK(nb_model_config_load(dir, &c));
    NB_CHECK(c.quant.algo == NB_QUANT_FP8_BLOCK && c.n_eos == 1);
    nb_model_config_free(&c);
    remove(nb_path_join(path, sizeof path, dir, "config.json"));
    NB_CHECK_STATUS(nb_model_config_load(dir, &c), NB_ERR_IO);
    NB_CHECK(strstr(nb_last_error(), "config.json") != NULL);
    rmdir(dir);
}

/* The fixture checkpoints (tests/fixtures/<family>/, made by HF transformers): the parameter
 * count from config.json equals the elements in the file, and the per-layer MoE / indexer
 * flags match the tensors present. */
static void test_fixtures(void)
{
    static const char *const fams[] = {"glm_moe_dsa", "deepseek_v3", "glm4_moe", "qwen3_moe", "qwen3_moe_fused"};
    int seen = 0;
    for (size_t f = 0; f < NB_ARRAY_LEN(fams); f++) {
        char dir[256], path[300];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", fams[f]);
        if (!nb_path_exists(nb_path_join(path, sizeof path, dir, "model.safetensors"))) continue;
        seen++;
        nb_model_config c;
        nb_checkpoint *ck;
        NB_CHECK_OK(nb_model_config_load(dir, &c));
        NB_CHECK_OK(nb_checkpoint_open(dir, &ck));
        if (!ck) continue;
        NB_CHECK(!strncmp(fams[f], c.model_type, strlen(c.model_type)));
        int64_t total = 0, by_role[NB_ROLE_COUNT] = {0}, want_role[NB_ROLE_COUNT];
        for (int i = 0; i < nb_checkpoint_count(ck); i++) {
            const nb_st_tensor *t = nb_checkpoint_at(ck, i);
            nb_tensor_info ti = nb_tensor_info_of(t->name);
            if (ti.layer >= c.num_layers) continue; /* MTP */
            total += nb_st_numel(t);
            by_role[ti.role] += nb_st_numel(t);
        }
        nb_model_config_param_breakdown(&c, want_role);
        for (int r = 0; r < NB_ROLE_COUNT; r++)
            NB_CHECK_MSG(by_role[r] == want_role[r], "%s: role %s: checkpoint %lld, config %lld", fams[f],
                         nb_tensor_role_name((nb_tensor_role)r), (long long)by_role[r], (long long)want_role[r]);
        int64_t want = nb_model_config_param_count(&c);
        NB_CHECK_MSG(total == want, "%s: checkpoint holds %lld parameters, config says %lld", fams[f], (long long)total,
                     (long long)want);
        for (int l = 0; l < c.num_layers; l++) {
            char n[128];
            snprintf(n, sizeof n, "model.layers.%d.mlp.gate.weight", l);
            NB_CHECK_MSG((nb_checkpoint_find(ck, n) != NULL) == c.layer_is_moe[l], "%s layer %d moe", fams[f], l);
            snprintf(n, sizeof n, "model.layers.%d.self_attn.indexer.wk.weight", l);
            NB_CHECK_MSG((nb_checkpoint_find(ck, n) != NULL) == c.layer_has_indexer[l], "%s layer %d indexer", fams[f], l);
        }
        nb_checkpoint_close(ck);
        nb_model_config_free(&c);
    }
    if (!seen) nb_test_skip("no tests/fixtures/*/model.safetensors");
}

static const nb_test tests[] = {
    {"fixtures", test_fixtures},
    {"glm5", test_glm5},         {"deepseek_v3", test_deepseek_v3}, {"glm4_moe", test_glm4_moe},
    {"qwen3_moe", test_qwen3_moe}, {"errors", test_errors},         {"quant", test_quant},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

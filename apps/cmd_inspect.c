/* `nibble inspect MODEL_DIR`: what a model folder holds. Architecture and layer plan from
 * config.json; parameters and bytes by dtype and by role from the safetensors headers
 * (nothing is read beyond them), or estimated from config.json when the folder has no
 * weights; the KV cache's bytes per token; and the weight memory per GPU under --tp N / --ep N
 * for N = 1, 2, 4, 8.
 * Try: build/nibble inspect tests/fixtures/glm_moe_dsa */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/progress.h"
#include "engine/forward.h"
#include "format/footprint.h"
#include "format/model_config.h"
#include "format/safetensors.h"

const char nb_cmd_inspect_summary[] = "describe a model folder: architecture, parameters, memory per GPU under TP/EP";

static void nb_inspect_usage(FILE *f)
{
    fprintf(f, "usage: nibble inspect MODEL_DIR\n\n"
               "Reads MODEL_DIR/config.json (+ hf_quant_config.json) and the safetensors headers;\n"
               "with config.json alone, sizes are estimated from the config.\n");
}

static const char *nb_topk_name(nb_topk_method m)
{
    return m == NB_TOPK_NOAUX_TC ? "noaux_tc" : m == NB_TOPK_GROUP_LIMITED ? "group_limited_greedy" : "greedy";
}

static void nb_print_arch(const nb_model_config *c)
{
    printf("architecture   %s\n", c->model_type);
    if (c->attn == NB_ATTN_MLA)
        printf("attention      MLA: %d heads, q_lora %d, kv_lora %d, qk %d nope + %d rope, v %d\n", c->num_heads,
               c->q_lora_rank, c->kv_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim);
    else
        printf("attention      GQA: %d heads, %d kv heads, head dim %d%s%s\n", c->num_heads, c->num_kv_heads,
               c->head_dim, c->attention_bias ? ", qkv bias" : "", c->qk_norm ? ", q/k norm" : "");
    printf("rope           %s, theta %g, rotary dim %d, %s", c->rope.type == NB_ROPE_YARN ? "yarn" : "default",
           c->rope.theta, c->rope.rotary_dim, c->rope.interleave ? "interleaved pairs" : "halves");
    if (c->rope.type == NB_ROPE_YARN)
        printf(" (factor %g, original %g)", c->rope.factor, c->rope.original_max_position_embeddings);
    printf("\n");
    int moe = c->n_moe_layers, full = 0;
    for (int l = 0; l < c->num_layers; l++) full += c->layer_has_indexer[l];
    printf("layers         %d: %d dense, %d MoE", c->num_layers, c->num_layers - moe, moe);
    if (c->arch == NB_ARCH_GLM_MOE_DSA)
        printf("; DSA indexer in every layer (%d full, %d shared), %d heads x %d, top-%d", full, c->num_layers - full,
               c->index_n_heads, c->index_head_dim, c->index_topk);
    if (c->num_nextn_predict_layers) printf("; + %d MTP layer(s)", c->num_nextn_predict_layers);
    printf("\n");
    printf("experts        %d routed (top-%d, intermediate %d)", c->n_routed_experts, c->num_experts_per_tok,
           c->moe_intermediate_size);
    if (c->n_shared_experts) printf(" + %d shared (intermediate %d)", c->n_shared_experts, c->shared_intermediate_size);
    printf("; %s scores, %s, groups %d/%d, %snormalized, scale %g\n", c->scoring == NB_SCORE_SIGMOID ? "sigmoid" : "softmax",
           nb_topk_name(c->topk_method), c->topk_group, c->n_group, c->norm_topk_prob ? "" : "not ", c->routed_scaling_factor);
    printf("sizes          hidden %d, dense intermediate %d, vocab %d, max positions %d%s\n", c->hidden_size,
           c->intermediate_size, c->vocab_size, c->max_position_embeddings, c->tie_word_embeddings ? ", tied embeddings" : "");
    printf("quantization   %s", nb_quant_algo_name(c->quant.algo));
    if (c->quant.algo == NB_QUANT_NVFP4) printf(" (group %d, %d exclude globs)", c->quant.group_size, c->quant.n_exclude);
    if (c->quant.algo == NB_QUANT_FP8_BLOCK) printf(" (blocks %dx%d)", c->quant.block_n, c->quant.block_k);
    printf("\n");
}

/* The KV cache's bytes per token over all layers (engine/forward.h's row layout): float32 rows,
 * and for MLA models BF16 latent rows (--kv-cache-dtype bfloat16, the GPU's default). */
static void nb_print_kv(const nb_model_config *c)
{
    nb_kv_layout f32, bf16;
    if (nb_kv_layout_for(c, NB_DTYPE_F32, &f32) != NB_OK) return;
    const int64_t b32 = nb_kv_layout_bytes(&f32);
    printf("kv cache       %lld bytes per token over %d layers in float32 rows (%lld tokens per GiB)", (long long)b32,
           c->num_layers, (long long)(1073741824 / b32));
    if (c->attn == NB_ATTN_MLA && nb_kv_layout_for(c, NB_DTYPE_BF16, &bf16) == NB_OK) {
        const int64_t b16 = nb_kv_layout_bytes(&bf16);
        printf(", %lld with BF16 latent rows (%lld per GiB; --kv-cache-dtype, the GPU's default)", (long long)b16,
               (long long)(1073741824 / b16));
    }
    printf("\n");
}

static void nb_print_footprint(const nb_footprint *fp)
{
    char b1[32];
    int64_t tp = nb_footprint_total_params(fp), tb = nb_footprint_total_bytes(fp);
    printf("\nparameters     %.3f B (%lld)%s, weights %s\n", (double)tp / 1e9, (long long)tp,
           fp->exact ? "" : " [estimated from config.json]", nb_format_bytes((double)tb, b1, sizeof b1));
    if (fp->mtp_bytes)
        printf("MTP layers     %.3f B parameters, %s (not counted above)\n", (double)fp->mtp_params / 1e9,
               nb_format_bytes((double)fp->mtp_bytes, b1, sizeof b1));
    if (fp->exact) {
        printf("\n%-9s %9s %16s %12s\n", "dtype", "tensors", "elements", "bytes");
        for (int d = 0; d < NB_DTYPE_COUNT; d++) {
            if (!fp->dtype_tensors[d]) continue;
            printf("%-9s %9lld %16lld %12s\n", nb_dtype_name((nb_dtype)d), (long long)fp->dtype_tensors[d],
                   (long long)fp->dtype_elems[d], nb_format_bytes((double)fp->dtype_bytes[d], b1, sizeof b1));
        }
    }
    printf("\n%-14s %16s %12s\n", "role", "parameters", "bytes");
    for (int r = 0; r < NB_ROLE_COUNT; r++) {
        if (!fp->params[r] && !fp->bytes[r]) continue;
        printf("%-14s %16lld %12s\n", nb_tensor_role_name((nb_tensor_role)r), (long long)fp->params[r],
               nb_format_bytes((double)fp->bytes[r], b1, sizeof b1));
    }
    static const int ns[4] = {1, 2, 4, 8};
    printf("\nweights per GPU (fullest GPU)%s\n%-8s", fp->exact ? "" : " [estimated]", "");
    for (int i = 0; i < 4; i++) printf(" %11s%d", "N=", ns[i]);
    printf("\n%-8s", "--tp N");
    for (int i = 0; i < 4; i++) printf(" %12s", nb_format_bytes((double)nb_footprint_per_gpu(fp, ns[i], 0), b1, sizeof b1));
    printf("\n%-8s", "--ep N");
    for (int i = 0; i < 4; i++) printf(" %12s", nb_format_bytes((double)nb_footprint_per_gpu(fp, 0, ns[i]), b1, sizeof b1));
    printf("\n\nassumptions: TP splits attention heads (GQA k/v by at most the kv-head count), routed and\n"
           "shared experts and dense MLPs along their intermediate dimension; replicates embeddings,\n"
           "lm_head, norms, routers, MLA latent projections and the DSA indexer. EP places whole routed\n"
           "experts (ceil(E/N) on the fullest GPU) and replicates everything else. MTP layers excluded;\n"
           "KV cache and activations not included.\n");
}

int nb_cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            nb_inspect_usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' || dir) {
            nb_inspect_usage(stderr);
            return 2;
        }
        dir = argv[i];
    }
    if (!dir) {
        nb_inspect_usage(stderr);
        return 2;
    }
    nb_model_config cfg;
    if (nb_model_config_load(dir, &cfg) != NB_OK) {
        fprintf(stderr, "nibble inspect: %s\n", nb_last_error());
        return 1;
    }
    printf("model          %s\n", dir);
    nb_print_arch(&cfg);
    nb_print_kv(&cfg);
    nb_checkpoint *ck = NULL;
    nb_status s = nb_checkpoint_open(dir, &ck);
    nb_footprint fp;
    if (s == NB_OK) {
        printf("checkpoint     %d tensors in %d shard(s)\n", nb_checkpoint_count(ck), nb_checkpoint_shard_count(ck));
        nb_footprint_from_checkpoint(&cfg, ck, &fp);
        nb_checkpoint_close(ck);
    } else if (s == NB_ERR_NOT_FOUND) {
        int eb = !strcmp(cfg.dtype, "float32") ? 4 : 2;
        printf("checkpoint     none (no safetensors): sizes estimated from config.json, %s weights\n",
               eb == 4 ? "float32" : cfg.dtype[0] ? cfg.dtype : "bfloat16");
        nb_footprint_from_config(&cfg, eb, &fp);
    } else {
        fprintf(stderr, "nibble inspect: %s\n", nb_last_error());
        nb_model_config_free(&cfg);
        return 1;
    }
    nb_print_footprint(&fp);
    nb_model_config_free(&cfg);
    return 0;
}

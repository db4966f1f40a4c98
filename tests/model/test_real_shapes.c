/* The forward pass at GLM-5's real per-head attention shapes (kv_lora_rank 512, qk_nope 192,
 * qk_rope 64 interleaved, v 256, DSA 32 heads x 128 with a top-k that bites) on a synthetic
 * model narrowed elsewhere (16 heads instead of 64, q_lora_rank 512, 2 layers, hidden 1024,
 * 8 NVFP4 experts, vocab 1024) so two cores run it in seconds: absorbed MLA == naive MLA on the
 * whole model, and decoding with the cache == recomputing. The fixtures cover HF agreement;
 * this covers the real dims.
 * Run: build-x/tests/test_real_shapes. */
#include "fixture_util.h"
#include "model/synthetic.h"

#define NB_TOL_FORMS 1e-5

static const char spec[] =
    "synthetic:glm5:num_hidden_layers=2,first_k_dense_replace=1,hidden_size=1024,intermediate_size=1024,"
    "num_attention_heads=16,num_key_value_heads=16,q_lora_rank=512,"
    "moe_intermediate_size=256,n_routed_experts=8,num_experts_per_tok=2,vocab_size=1024,index_topk=12,"
    "experts=nvfp4,init_std=0.03,seed=7";

static void test_glm5_shapes(void)
{
    nb_model_config cfg;
    nb_checkpoint *ck = NULL;
    NB_CHECK_OK(nb_synthetic_build(spec, &cfg, &ck));
    if (!ck) return;
    NB_CHECK(cfg.kv_lora_rank == 512 && cfg.qk_rope_head_dim == 64 && cfg.qk_nope_head_dim == 192 &&
             cfg.v_head_dim == 256 && cfg.index_head_dim == 128 && cfg.index_n_heads == 32);
    nb_model *ab = NULL, *nv = NULL;
    nb_model_params p = nb_model_default_params();
    p.mla_mode = NB_MLA_ABSORBED;
    NB_CHECK_OK(nb_model_from_checkpoint(&cfg, ck, &p, &ab));
    p.mla_mode = NB_MLA_NAIVE;
    NB_CHECK_OK(nb_model_from_checkpoint(&cfg, ck, &p, &nv));
    enum { N = 20 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 389 + 17) % cfg.vocab_size;
    float *la = ab ? fx_score(ab, ids, N) : NULL, *ln = nv ? fx_score(nv, ids, N) : NULL;
    const int V = cfg.vocab_size;
    double forms = 0, dec = 0;
    for (int i = 0; la && ln && i < N; i++) forms = fmax(forms, fx_rel_err(la + (int64_t)i * V, ln + (int64_t)i * V, V));
    /* decode the last 4 positions one at a time after a prefill of the rest */
    nb_kv_pool pool;
    NB_CHECK_OK(nb_kv_pool_init(&pool, &cfg, NB_DTYPE_F32, N));
    int32_t slots[N];
    for (int i = 0; i < N; i++) slots[i] = N - 1 - i; /* reversed rows */
    float *row = malloc(sizeof(float) * (size_t)V);
    nb_seq_step st = {ids, N - 4, 0, slots, 0};
    nb_batch b = {1, &st};
    NB_CHECK_OK(nb_forward(ab, &pool, &b, row));
    if (la) dec = fx_rel_err(row, la + (int64_t)(N - 5) * V, V);
    for (int q = N - 4; q < N && la; q++) {
        nb_seq_step d = {ids + q, 1, q, slots, 0};
        nb_batch db = {1, &d};
        NB_CHECK_OK(nb_forward(ab, &pool, &db, row));
        dec = fmax(dec, fx_rel_err(row, la + (int64_t)q * V, V));
    }
    fprintf(stderr, "  GLM-5 attention shapes: absorbed vs naive max rel err %.3g; decode vs recompute %.3g\n", forms,
            dec);
    NB_CHECK_MSG(forms <= NB_TOL_FORMS, "%.3g", forms);
    NB_CHECK_MSG(dec <= NB_TOL_FORMS, "%.3g", dec);
    free(row), free(la), free(ln);
    nb_kv_pool_free(&pool);
    nb_model_free(ab);
    nb_model_free(nv);
    nb_checkpoint_close(ck);
    nb_model_config_free(&cfg);
}

static const nb_test tests[] = {
    {"glm5_shapes", test_glm5_shapes},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

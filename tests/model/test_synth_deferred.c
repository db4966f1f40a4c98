/* Deferred synthetic builds (model/synthetic.h), the host side that needs no GPU: the same
 * tensor table as the host build (names, dtypes, shapes, order), the F32 vectors filled with
 * the same bytes, every BF16 / NVFP4 tensor left to the device and found by its host
 * address (and nothing else found), sizes that add up, a fill of the wrong size refused,
 * and a model that binds on it. The device fill itself: tests/model/test_synth_gpu.c.
 * Run: build-y/tests/test_synth_deferred */
#include <string.h>

#include "model/model.h"
#include "model/synthetic.h"
#include "nbtest.h"

static const char *const specs[] = {
    "synthetic:glm5-tiny:experts=nvfp4,seed=3",
    "synthetic:glm4-moe:hidden_size=64,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=128,"
    "moe_intermediate_size=32,n_routed_experts=8,num_experts_per_tok=2,num_attention_heads=4,num_key_value_heads=2,"
    "head_dim=16,vocab_size=300,seed=11",
};

static void test_table(void)
{
    for (size_t s = 0; s < NB_ARRAY_LEN(specs); s++) {
        nb_model_config c1, c2;
        nb_checkpoint *host = NULL, *def = NULL;
        nb_synth_deferred *plan = NULL;
        NB_CHECK_OK(nb_synthetic_build(specs[s], &c1, &host));
        NB_CHECK_OK(nb_synthetic_build_deferred(specs[s], &c2, &def, &plan));
        if (!host || !def) return;
        NB_CHECK(nb_checkpoint_count(host) == nb_checkpoint_count(def));
        size_t n_def = 0;
        double bytes = 0;
        for (int i = 0; i < nb_checkpoint_count(def) && i < nb_checkpoint_count(host); i++) {
            const nb_st_tensor *a = nb_checkpoint_at(host, i), *b = nb_checkpoint_at(def, i);
            NB_CHECK_MSG(!strcmp(a->name, b->name) && a->dtype == b->dtype && a->ndim == b->ndim &&
                             a->nbytes == b->nbytes && !memcmp(a->shape, b->shape, sizeof a->shape),
                         "%s: tensor %d (%s)", specs[s], i, a->name);
            size_t want = 0;
            const nb_synth_job *j = nb_synthetic_deferred_find(plan, b->data, &want);
            int large = b->dtype == NB_DTYPE_BF16 || b->dtype == NB_DTYPE_U8 || b->dtype == NB_DTYPE_F8_E4M3;
            NB_CHECK_MSG(!!j == large, "%s: %s deferred %d", specs[s], b->name, !!j);
            if (j) {
                NB_CHECK(want == b->nbytes);
                n_def++;
                bytes += (double)want;
                /* an address inside the tensor is not its start */
                if (b->nbytes > 1) NB_CHECK(!nb_synthetic_deferred_find(plan, (const char *)b->data + 1, NULL));
                int done = 1;
                NB_CHECK_STATUS(nb_synthetic_deferred_fill(plan, b->data, NULL, b->nbytes + 1, NULL, &done),
                                NB_ERR_INVALID_ARG);
                NB_CHECK(done == 0);
            } else {
                NB_CHECK_MSG(!memcmp(a->data, b->data, a->nbytes), "%s: %s bytes", specs[s], a->name);
            }
        }
        NB_CHECK(n_def == nb_synthetic_deferred_count(plan) && n_def > 0);
        NB_CHECK(bytes == nb_synthetic_deferred_bytes(plan));
        /* a host pointer that is no tensor: not deferred, nothing done */
        int done = 1, x = 0;
        NB_CHECK_OK(nb_synthetic_deferred_fill(plan, &x, NULL, 4, NULL, &done));
        NB_CHECK(done == 0);
        /* the binder reads only the F32 vectors: a model binds on the deferred checkpoint */
        nb_model_params mp = nb_model_default_params();
        mp.n_threads = 1;
        nb_model *m = NULL;
        NB_CHECK_OK(nb_model_from_checkpoint(&c2, def, &mp, &m));
        nb_model_free(m);
        nb_synthetic_deferred_free(plan);
        nb_checkpoint_close(host);
        nb_checkpoint_close(def);
        nb_model_config_free(&c1);
        nb_model_config_free(&c2);
    }
}

static void test_errors(void)
{
    nb_model_config c;
    nb_checkpoint *ck = (nb_checkpoint *)1;
    nb_synth_deferred *plan = (nb_synth_deferred *)1;
    NB_CHECK_STATUS(nb_synthetic_build_deferred("synthetic:nope", &c, &ck, &plan), NB_ERR_INVALID_ARG);
    NB_CHECK(plan == NULL && ck == NULL);
    NB_CHECK(nb_synthetic_deferred_count(NULL) == 0);
    NB_CHECK(!nb_synthetic_deferred_find(NULL, &c, NULL));
    nb_synthetic_deferred_free(NULL);
}

int main(int argc, char **argv)
{
    static const nb_test tests[] = {{"table", test_table}, {"errors", test_errors}};
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}

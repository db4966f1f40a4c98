/* Binding by HF names: a missing or mis-shaped tensor is a clear error naming it; fused
 * transformers-5 experts (experts.gate_up_proj / experts.down_proj) bind to the same model as
 * per-expert tensors; a glm_moe_dsa layer without indexer weights shares the previous
 * layer's selection, and a first layer without them is refused; score / generate CLI
 * helpers' .npy round trip. Run: build-x/tests/test_model_bind. */
#include <unistd.h>

#include "fixture_util.h"
#include "format/npy.h"

typedef struct edit {
    const char *drop;    /* tensor to leave out */
    const char *reshape; /* tensor whose last dim shrinks by one */
    int fuse;            /* fuse per-expert tensors */
    const nb_model_config *cfg;
} edit;

static int edit_xform(nb_checkpoint *dst, const nb_st_tensor *t, void *user)
{
    edit *e = user;
    if (e->drop && !strcmp(t->name, e->drop)) return 1;
    if (e->reshape && !strcmp(t->name, e->reshape)) {
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof shape);
        shape[t->ndim - 1] -= 1;
        size_t bytes = (size_t)nb_dtype_size(t->dtype);
        for (int i = 0; i < t->ndim; i++) bytes *= (size_t)shape[i];
        void *d = calloc(1, bytes);
        NB_CHECK_OK(nb_checkpoint_add(dst, t->name, t->dtype, t->ndim, shape, d));
        return 1;
    }
    return 0;
}

static nb_status build(const nb_checkpoint *src, edit *e, nb_checkpoint **out)
{
    if (!e->fuse) return fx_copy_checkpoint(src, edit_xform, e, out);
    /* fused copy: every non-expert tensor as is, then per MoE layer the fused pair */
    NB_TRY(nb_checkpoint_new_memory(out, nb_checkpoint_dir(src)));
    for (int i = 0; i < nb_checkpoint_count(src); i++) {
        const nb_st_tensor *t = nb_checkpoint_at(src, i);
        if (strstr(t->name, ".mlp.experts.")) continue;
        void *d = malloc(t->nbytes);
        memcpy(d, t->data, t->nbytes);
        NB_TRY(nb_checkpoint_add(*out, t->name, t->dtype, t->ndim, t->shape, d));
    }
    const nb_model_config *c = e->cfg;
    const int64_t E = c->n_routed_experts, H = c->hidden_size, I = c->moe_intermediate_size;
    for (int l = 0; l < c->num_layers; l++) {
        if (!c->layer_is_moe[l]) continue;
        uint16_t *gu = malloc(sizeof(uint16_t) * (size_t)(E * 2 * I * H)), *dn = malloc(sizeof(uint16_t) * (size_t)(E * H * I));
        for (int64_t x = 0; x < E; x++) {
            char n[160];
            const nb_st_tensor *g, *u, *d;
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%lld.gate_proj.weight", l, (long long)x);
            NB_TRY(nb_checkpoint_get(src, n, &g));
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%lld.up_proj.weight", l, (long long)x);
            NB_TRY(nb_checkpoint_get(src, n, &u));
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%lld.down_proj.weight", l, (long long)x);
            NB_TRY(nb_checkpoint_get(src, n, &d));
            memcpy(gu + x * 2 * I * H, g->data, g->nbytes);
            memcpy(gu + x * 2 * I * H + I * H, u->data, u->nbytes);
            memcpy(dn + x * H * I, d->data, d->nbytes);
        }
        char n[160];
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj", l);
        NB_TRY(nb_checkpoint_add(*out, n, NB_DTYPE_BF16, 3, (int64_t[]){E, 2 * I, H}, gu));
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj", l);
        NB_TRY(nb_checkpoint_add(*out, n, NB_DTYPE_BF16, 3, (int64_t[]){E, H, I}, dn));
    }
    return NB_OK;
}

static nb_status try_bind(const char *family, edit *e, nb_model **m, nb_checkpoint **ck, nb_model_config *cfg,
                          nb_checkpoint **src)
{
    char dir[128];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", family);
    NB_TRY(nb_model_config_load(dir, cfg));
    NB_TRY(nb_checkpoint_open(dir, src));
    e->cfg = cfg;
    NB_TRY(build(*src, e, ck));
    nb_model_params p = nb_model_default_params();
    return nb_model_from_checkpoint(cfg, *ck, &p, m);
}

static void cleanup(nb_model *m, nb_checkpoint *ck, nb_model_config *cfg, nb_checkpoint *src)
{
    nb_model_free(m);
    nb_checkpoint_close(ck);
    nb_checkpoint_close(src);
    nb_model_config_free(cfg);
}

static void test_missing_tensor(void)
{
    edit e = {.drop = "model.layers.1.mlp.experts.7.up_proj.weight"};
    nb_model *m = NULL;
    nb_checkpoint *ck = NULL, *src = NULL;
    nb_model_config cfg;
    NB_CHECK_STATUS(try_bind("glm_moe_dsa", &e, &m, &ck, &cfg, &src), NB_ERR_NOT_FOUND);
    NB_CHECK_MSG(strstr(nb_last_error(), e.drop) != NULL, "message: %s", nb_last_error());
    NB_CHECK(m == NULL);
    cleanup(m, ck, &cfg, src);
}

static void test_misshaped_tensor(void)
{
    edit e = {.reshape = "model.layers.0.self_attn.kv_b_proj.weight"};
    nb_model *m = NULL;
    nb_checkpoint *ck = NULL, *src = NULL;
    nb_model_config cfg;
    NB_CHECK_STATUS(try_bind("deepseek_v3", &e, &m, &ck, &cfg, &src), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), e.reshape) && strstr(nb_last_error(), "[224, 31]"), "message: %s",
                 nb_last_error());
    cleanup(m, ck, &cfg, src);
    edit e2 = {.reshape = "model.layers.2.self_attn.q_norm.weight"};
    NB_CHECK_STATUS(try_bind("qwen3_moe", &e2, &m, &ck, &cfg, &src), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), e2.reshape) != NULL, "message: %s", nb_last_error());
    cleanup(m, ck, &cfg, src);
}

static void test_first_layer_without_indexer(void)
{
    edit e = {.drop = "model.layers.0.self_attn.indexer.wq_b.weight"};
    nb_model *m = NULL;
    nb_checkpoint *ck = NULL, *src = NULL;
    nb_model_config cfg;
    NB_CHECK_STATUS(try_bind("glm_moe_dsa", &e, &m, &ck, &cfg, &src), NB_ERR_NOT_FOUND);
    NB_CHECK_MSG(strstr(nb_last_error(), "indexer.wq_b") != NULL, "message: %s", nb_last_error());
    cleanup(m, ck, &cfg, src);
    /* the fixture's layer 2 is "shared": it has no indexer and binds as such */
    edit none = {0};
    NB_CHECK_OK(try_bind("glm_moe_dsa", &none, &m, &ck, &cfg, &src));
    if (m) NB_CHECK(m->layers[0].has_indexer && m->layers[1].has_indexer && !m->layers[2].has_indexer);
    cleanup(m, ck, &cfg, src);
}

static void test_fused_experts(void)
{
    const char *fams[] = {"glm_moe_dsa", "qwen3_moe"};
    for (int f = 0; f < 2; f++) {
        edit e = {.fuse = 1};
        nb_model *m = NULL;
        nb_checkpoint *ck = NULL, *src = NULL;
        nb_model_config cfg;
        NB_CHECK_OK(try_bind(fams[f], &e, &m, &ck, &cfg, &src));
        NB_CHECK(ck && nb_checkpoint_find(ck, "model.layers.1.mlp.experts.3.gate_proj.weight") == NULL);
        int32_t ids[64];
        int n = fx_long_ids(fams[f], ids, 64);
        float *fused = m ? fx_score(m, ids, n) : NULL;
        nb_model *pm = NULL;
        nb_model_params p = nb_model_default_params();
        NB_CHECK_OK(nb_model_from_checkpoint(&cfg, src, &p, &pm));
        float *per = pm ? fx_score(pm, ids, n) : NULL;
        NB_CHECK(fused && per && !memcmp(fused, per, sizeof(float) * (size_t)n * (size_t)cfg.vocab_size));
        free(fused), free(per);
        nb_model_free(pm);
        cleanup(m, ck, &cfg, src);
    }
}

static void test_npy_round_trip(void)
{
    float v[6] = {1, -2, 3.5f, 0, 1e-30f, 7};
    char path[128]; /* per process: several build folders may run this test at once */
    snprintf(path, sizeof path, "/tmp/nb_test_npy_round_trip.%d.npy", (int)getpid());
    NB_CHECK_OK(nb_npy_write_f32(path, v, 2, (int64_t[]){2, 3}));
    float *r = NULL;
    int nd = 0;
    int64_t shape[8];
    NB_CHECK_OK(nb_npy_read_f32(path, &r, &nd, shape));
    NB_CHECK(r && nd == 2 && shape[0] == 2 && shape[1] == 3 && !memcmp(r, v, sizeof v));
    free(r);
    /* a fixture written by numpy reads back with the documented shape */
    NB_CHECK_OK(nb_npy_read_f32("tests/fixtures/qwen3_moe/logits_short.npy", &r, &nd, shape));
    NB_CHECK(nd == 2 && shape[0] == 5 && shape[1] == 256);
    free(r);
    NB_CHECK_STATUS(nb_npy_read_f32("tests/fixtures/qwen3_moe/config.json", &r, &nd, shape), NB_ERR_FORMAT);
    remove(path);
}

static const nb_test tests[] = {
    {"missing_tensor", test_missing_tensor},
    {"misshaped_tensor", test_misshaped_tensor},
    {"first_layer_without_indexer", test_first_layer_without_indexer},
    {"fused_experts", test_fused_experts},
    {"npy_round_trip", test_npy_round_trip},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

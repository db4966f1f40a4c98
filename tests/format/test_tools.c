/* Tests for the checkpoint tools: tensor roles, the TP/EP footprint, and the NVFP4
 * quantizer end to end (a tiny BF16 checkpoint written here, then the fixture
 * checkpoints): every dequantized weight lies within the E2M1 grid of its source, the
 * scales follow the recipe, everything else is byte-identical.
 * Run from the repository root: build-fmt/tests/test_tools [NAME_SUBSTRING] */
#include "nbtest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "format/footprint.h"
#include "format/model_config.h"
#include "format/numerics.h"
#include "format/nvfp4.h"
#include "format/quantize.h"
#include "format/tensor_role.h"

#include <ftw.h>
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
/* rm -rf of a test's temporary folder */
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_roles(void)
{
    struct {
        const char *name;
        nb_tensor_role role;
        int layer, expert, aux;
    } cases[] = {
        {"model.embed_tokens.weight", NB_ROLE_EMBED, -1, -1, 0},
        {"lm_head.weight", NB_ROLE_LM_HEAD, -1, -1, 0},
        {"model.norm.weight", NB_ROLE_NORM, -1, -1, 0},
        {"model.layers.3.input_layernorm.weight", NB_ROLE_NORM, 3, -1, 0},
        {"model.layers.3.self_attn.kv_a_layernorm.weight", NB_ROLE_NORM, 3, -1, 0},
        {"model.layers.3.self_attn.q_norm.weight", NB_ROLE_NORM, 3, -1, 0},
        {"model.layers.3.self_attn.indexer.k_norm.bias", NB_ROLE_NORM, 3, -1, 0},
        {"model.layers.3.self_attn.indexer.wq_b.weight", NB_ROLE_INDEXER, 3, -1, 0},
        {"model.layers.3.self_attn.q_a_proj.weight", NB_ROLE_ATTN_LATENT, 3, -1, 0},
        {"model.layers.3.self_attn.kv_a_proj_with_mqa.weight_scale_inv", NB_ROLE_ATTN_LATENT, 3, -1, 1},
        {"model.layers.3.self_attn.kv_b_proj.weight", NB_ROLE_ATTN_HEADS, 3, -1, 0},
        {"model.layers.12.self_attn.k_proj.bias", NB_ROLE_ATTN_HEADS, 12, -1, 0},
        {"model.layers.3.mlp.gate.weight", NB_ROLE_ROUTER, 3, -1, 0},
        {"model.layers.3.mlp.gate.e_score_correction_bias", NB_ROLE_ROUTER, 3, -1, 0},
        {"model.layers.3.mlp.experts.255.down_proj.weight_scale_2", NB_ROLE_EXPERT, 3, 255, 1},
        {"model.layers.3.mlp.experts.gate_up_proj", NB_ROLE_EXPERT, 3, -1, 0},
        {"model.layers.3.mlp.shared_experts.up_proj.weight", NB_ROLE_SHARED_EXPERT, 3, -1, 0},
        {"model.layers.0.mlp.gate_proj.weight", NB_ROLE_DENSE_MLP, 0, -1, 0},
        {"model.layers.78.eh_proj.weight", NB_ROLE_OTHER, 78, -1, 0},
    };
    for (size_t i = 0; i < NB_ARRAY_LEN(cases); i++) {
        nb_tensor_info ti = nb_tensor_info_of(cases[i].name);
        NB_CHECK_MSG(ti.role == cases[i].role && ti.layer == cases[i].layer && ti.expert == cases[i].expert &&
                         ti.quant_aux == cases[i].aux,
                     "%s: role %s layer %d expert %d aux %d", cases[i].name, nb_tensor_role_name(ti.role), ti.layer,
                     ti.expert, ti.quant_aux);
    }
}

/* A tiny glm4_moe-shaped model: hidden 32, 2 layers (0 dense, 1 MoE with 4 experts of
 * intermediate 16, one shared expert), GQA 4 heads / 2 kv heads of 8. */
static const char *tiny_config =
    "{\"model_type\": \"glm4_moe\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 8, \"vocab_size\": 64, \"intermediate_size\": 48,"
    " \"moe_intermediate_size\": 16, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"n_shared_experts\": 1,"
    " \"first_k_dense_replace\": 1, \"attention_bias\": true, \"partial_rotary_factor\": 0.5, \"rope_theta\": 10000,"
    " \"torch_dtype\": \"bfloat16\", \"eos_token_id\": [3]}";

typedef struct tiny_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
} tiny_tensor;

static int tiny_tensors(tiny_tensor *t)
{
    int n = 0;
#define T1(nm, a) (snprintf(t[n].name, 96, "%s", nm), t[n].ndim = 1, t[n].shape[0] = a, n++)
#define T2(nm, a, b) (snprintf(t[n].name, 96, "%s", nm), t[n].ndim = 2, t[n].shape[0] = a, t[n].shape[1] = b, n++)
    T2("model.embed_tokens.weight", 64, 32);
    T2("lm_head.weight", 64, 32);
    T1("model.norm.weight", 32);
    char b[96];
    for (int l = 0; l < 2; l++) {
#define NM(fmt) (snprintf(b, sizeof b, "model.layers.%d." fmt, l), b)
        T1(NM("input_layernorm.weight"), 32);
        T1(NM("post_attention_layernorm.weight"), 32);
        T2(NM("self_attn.q_proj.weight"), 32, 32);
        T1(NM("self_attn.q_proj.bias"), 32);
        T2(NM("self_attn.k_proj.weight"), 16, 32);
        T1(NM("self_attn.k_proj.bias"), 16);
        T2(NM("self_attn.v_proj.weight"), 16, 32);
        T1(NM("self_attn.v_proj.bias"), 16);
        T2(NM("self_attn.o_proj.weight"), 32, 32);
        if (l == 0) {
            T2(NM("mlp.gate_proj.weight"), 48, 32);
            T2(NM("mlp.up_proj.weight"), 48, 32);
            T2(NM("mlp.down_proj.weight"), 32, 48);
            continue;
        }
        T2(NM("mlp.gate.weight"), 4, 32);
        T1(NM("mlp.gate.e_score_correction_bias"), 4);
        for (int e = 0; e < 4; e++) {
            snprintf(b, sizeof b, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            T2(b, 16, 32);
            snprintf(b, sizeof b, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            T2(b, 16, 32);
            snprintf(b, sizeof b, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            T2(b, 32, 16);
        }
        T2(NM("mlp.shared_experts.gate_proj.weight"), 16, 32);
        T2(NM("mlp.shared_experts.up_proj.weight"), 16, 32);
        T2(NM("mlp.shared_experts.down_proj.weight"), 32, 16);
#undef NM
    }
    return n;
}

/* Write the tiny model (BF16; the router bias F32) into dir. */
static void write_tiny(const char *dir)
{
    char path[600];
    NB_CHECK_OK(nb_mkdirs(dir));
    NB_CHECK_OK(nb_write_file(nb_path_join(path, sizeof path, dir, "config.json"), tiny_config, strlen(tiny_config)));
    const char *tok = "{\"model\": {\"type\": \"BPE\"}}";
    NB_CHECK_OK(nb_write_file(nb_path_join(path, sizeof path, dir, "tokenizer.json"), tok, strlen(tok)));
    tiny_tensor t[128];
    int n = tiny_tensors(t);
    const char *names[128];
    nb_dtype dt[128];
    int64_t shapes[128][NB_MAX_DIMS] = {{0}};
    int nd[128];
    for (int i = 0; i < n; i++) {
        names[i] = t[i].name;
        dt[i] = strstr(t[i].name, "e_score") ? NB_DTYPE_F32 : NB_DTYPE_BF16;
        nd[i] = t[i].ndim;
        shapes[i][0] = t[i].shape[0];
        shapes[i][1] = t[i].shape[1];
    }
    nb_st_writer *w;
    NB_CHECK_OK(nb_st_writer_open(&w, nb_path_join(path, sizeof path, dir, "model.safetensors"), n, names, dt,
                                  (const int64_t(*)[NB_MAX_DIMS])shapes, nd, NULL));
    if (!w) return;
    for (int i = 0; i < n; i++) {
        int64_t el = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
        float scale = strstr(t[i].name, "experts.2.") ? 3.0f : 0.05f; /* experts differ in range */
        if (dt[i] == NB_DTYPE_F32) {
            float v[4] = {0.1f, -0.2f, 0.3f, 0.0f};
            NB_CHECK_OK(nb_st_writer_write(w, v, sizeof v));
            continue;
        }
        for (int64_t k = 0; k < el; k++) {
            nb_bf16 h = nb_f32_to_bf16(frand() * scale);
            NB_CHECK_OK(nb_st_writer_write(w, &h, 2));
        }
    }
    NB_CHECK_OK(nb_st_writer_close(w));
}

/* Check a quantized output against its source: within the E2M1 grid, scales as the recipe
 * with `ws2`; returns the number of bad elements. */
static int check_quantized(const nb_st_tensor *src, const nb_checkpoint *out, float want_ws2)
{
    char m[600], nm[640];
    size_t l = strlen(src->name);
    snprintf(m, sizeof m, "%.*s", (int)(l - 7), src->name);
    const nb_st_tensor *w, *s, *s2;
    snprintf(nm, sizeof nm, "%s.weight", m);
    w = nb_checkpoint_find(out, nm);
    snprintf(nm, sizeof nm, "%s.weight_scale", m);
    s = nb_checkpoint_find(out, nm);
    snprintf(nm, sizeof nm, "%s.weight_scale_2", m);
    s2 = nb_checkpoint_find(out, nm);
    if (!w || !s || !s2 || w->dtype != NB_DTYPE_U8 || s->dtype != NB_DTYPE_F8_E4M3 || s2->dtype != NB_DTYPE_F32 ||
        s2->ndim != 0) {
        fprintf(stderr, "  %s: quantized tensors missing or mistyped\n", m);
        return 1;
    }
    const int64_t n = src->shape[0], k = src->shape[1];
    if (w->shape[0] != n || w->shape[1] != k / 2 || s->shape[0] != n || s->shape[1] != k / 16) return 1;
    float ws2;
    memcpy(&ws2, s2->data, 4);
    int bad = 0;
    if (want_ws2 > 0 && ws2 != want_ws2) {
        fprintf(stderr, "  %s: weight_scale_2 %.9g, want %.9g\n", m, ws2, want_ws2);
        bad++;
    }
    float *x = malloc(sizeof(float) * (size_t)(n * k)), *d = malloc(sizeof(float) * (size_t)(n * k));
    NB_CHECK_OK(nb_st_rows_to_f32(src, 0, n, x));
    nb_nvfp4_dequant_rows(w->data, s->data, ws2, k, 0, n, d);
    const uint8_t *sc = s->data;
    for (int64_t r = 0; r < n; r++) {
        for (int64_t g = 0; g < k / 16; g++) {
            float bamax = nb_absmax_f32(x + r * k + g * 16, 16);
            float want = bamax / (6.0f * ws2);
            if (want == 0) want = 1.0f;
            if (want < NB_NVFP4_SCALE_MIN) want = NB_NVFP4_SCALE_MIN;
            if (sc[r * (k / 16) + g] != nb_f32_to_e4m3(want)) bad++;
            float q = nb_e4m3_to_f32(sc[r * (k / 16) + g]) * ws2;
            for (int j = 0; j < 16; j++) {
                int64_t i = r * k + g * 16 + j;
                float a = fabsf(x[i]) / q;
                float half = a < 2 ? 0.25f : a < 4 ? 0.5f : 1.0f;
                float sat = a > 6 ? a - 6 : 0;
                if (fabsf(d[i] - x[i]) > (half + sat) * q * (1 + 1e-6f)) bad++;
            }
        }
    }
    free(x);
    free(d);
    return bad;
}

/* Quantize `in` to `out` and verify every tensor; returns the count of quantized ones. */
static int quantize_and_verify(const char *in, const char *out, const nb_quantize_params *p)
{
    NB_CHECK_OK(nb_quantize_checkpoint(in, out, p));
    nb_checkpoint *ci = NULL, *co = NULL;
    NB_CHECK_OK(nb_checkpoint_open(in, &ci));
    NB_CHECK_OK(nb_checkpoint_open(out, &co)); /* through model.safetensors.index.json */
    if (!ci || !co) {
        nb_checkpoint_close(ci);
        nb_checkpoint_close(co);
        return -1;
    }
    int quantized = 0, bad = 0;
    for (int i = 0; i < nb_checkpoint_count(ci); i++) {
        const nb_st_tensor *t = nb_checkpoint_at(ci, i);
        const nb_st_tensor *o = nb_checkpoint_find(co, t->name);
        if (o && o->dtype == t->dtype) { /* copied: byte-identical */
            if (o->nbytes != t->nbytes || memcmp(o->data, t->data, t->nbytes) || o->ndim != t->ndim) {
                fprintf(stderr, "  %s: copy differs\n", t->name);
                bad++;
            }
            continue;
        }
        /* gate/up share weight_scale_2 = max amax / 2688 when p->share_gate_up */
        float want = 0;
        size_t l = strlen(t->name);
        const char *g = strstr(t->name, "gate_proj.weight"), *u = strstr(t->name, "up_proj.weight");
        if (p->share_gate_up && (g || u) && l < 600) {
            char other[640];
            if (g) snprintf(other, sizeof other, "%.*sup_proj.weight", (int)(g - t->name), t->name);
            else snprintf(other, sizeof other, "%.*sgate_proj.weight", (int)(u - t->name), t->name);
            const nb_st_tensor *ot = nb_checkpoint_find(ci, other);
            int64_t n1 = nb_st_numel(t), n2 = ot ? nb_st_numel(ot) : 0;
            float *a = malloc(sizeof(float) * (size_t)(n1 + n2));
            NB_CHECK_OK(nb_st_rows_to_f32(t, 0, t->shape[0], a));
            if (ot) NB_CHECK_OK(nb_st_rows_to_f32(ot, 0, ot->shape[0], a + n1));
            want = nb_nvfp4_global_scale(nb_absmax_f32(a, (size_t)(n1 + n2)));
            free(a);
        } else {
            float *a = malloc(sizeof(float) * (size_t)nb_st_numel(t));
            NB_CHECK_OK(nb_st_rows_to_f32(t, 0, t->shape[0], a));
            want = nb_nvfp4_global_scale(nb_absmax_f32(a, (size_t)nb_st_numel(t)));
            free(a);
        }
        int b = check_quantized(t, co, want);
        if (b) fprintf(stderr, "  %s: %d bad elements or scales\n", t->name, b);
        bad += b;
        quantized++;
    }
    NB_CHECK_MSG(bad == 0, "%s: %d mismatches", out, bad);
    /* every output tensor accounted for: copies + 3 per quantized */
    NB_CHECK(nb_checkpoint_count(co) == nb_checkpoint_count(ci) + 2 * quantized);
    nb_checkpoint_close(ci);
    nb_checkpoint_close(co);
    return quantized;
}

static void test_quantize_tiny(void)
{
    char in[] = "/tmp/nb_test_q_XXXXXX", out[600], path[700];
    NB_ASSERT(mkdtemp(in));
    char src[600];
    snprintf(src, sizeof src, "%s/bf16", in);
    write_tiny(src);
    /* default: routed experts only (12 tensors) */
    nb_quantize_params p = nb_quantize_default_params();
    p.progress = 0;
    snprintf(out, sizeof out, "%s/nvfp4", in);
    NB_CHECK(quantize_and_verify(src, out, &p) == 12);
    NB_CHECK(nb_path_exists(nb_path_join(path, sizeof path, out, "tokenizer.json")));
    NB_CHECK(nb_path_exists(nb_path_join(path, sizeof path, out, "hf_quant_config.json")));
    nb_model_config c;
    NB_CHECK_OK(nb_model_config_load(out, &c));
    NB_CHECK(c.quant.algo == NB_QUANT_NVFP4 && c.quant.group_size == 16 && c.n_eos == 1);
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.1.self_attn.q_proj"));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.0.mlp.down_proj"));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.1.mlp.gate"));
    NB_CHECK(nb_quant_excluded(&c.quant, "lm_head"));
    NB_CHECK(!nb_quant_excluded(&c.quant, "model.layers.1.mlp.experts.2.down_proj"));
    nb_model_config_free(&c);
    /* the config.json form agrees (parsed without hf_quant_config.json) */
    char *cj;
    size_t cl;
    NB_CHECK_OK(nb_read_file(nb_path_join(path, sizeof path, out, "config.json"), &cj, &cl, 0));
    if (cj) {
        NB_CHECK_OK(nb_model_config_parse("out config.json", cj, &c));
        NB_CHECK(c.quant.algo == NB_QUANT_NVFP4 && nb_quant_excluded(&c.quant, "lm_head"));
        nb_model_config_free(&c);
        free(cj);
    }
    /* the output refuses to be quantized again */
    char again[600];
    snprintf(again, sizeof again, "%s/again", in);
    NB_CHECK_STATUS(nb_quantize_checkpoint(out, again, &p), NB_ERR_UNSUPPORTED);
    /* the same folder under another spelling is refused */
    char same[700];
    snprintf(same, sizeof same, "%s/../bf16/.", src);
    NB_CHECK_STATUS(nb_quantize_checkpoint(src, same, &p), NB_ERR_INVALID_ARG);

    /* --all-linear, an --exclude glob, no gate/up sharing, and tiny shards */
    const char *ex[] = {"model.layers.1.mlp.experts.3.*", "model.layers.0.self_attn.o_proj"};
    p.all_linear = 1;
    p.exclude = ex;
    p.n_exclude = 2;
    p.share_gate_up = 0;
    p.shard_bytes = 4096;
    snprintf(out, sizeof out, "%s/all", in);
    /* 2 layers x 4 attention - 1 excluded + 3 dense + 9 experts + 3 shared */
    NB_CHECK(quantize_and_verify(src, out, &p) == 22);
    nb_checkpoint *ck;
    NB_CHECK_OK(nb_checkpoint_open(out, &ck));
    if (ck) {
        NB_CHECK(nb_checkpoint_shard_count(ck) > 3);
        const nb_st_tensor *t = nb_checkpoint_find(ck, "model.layers.1.mlp.experts.3.up_proj.weight");
        NB_CHECK(t && t->dtype == NB_DTYPE_BF16);
        t = nb_checkpoint_find(ck, "model.layers.1.mlp.gate.weight");
        NB_CHECK(t && t->dtype == NB_DTYPE_BF16);
        nb_checkpoint_close(ck);
    }
    NB_CHECK_OK(nb_model_config_load(out, &c));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.1.mlp.experts.3.up_proj"));
    NB_CHECK(nb_quant_excluded(&c.quant, "model.layers.0.self_attn.o_proj"));
    NB_CHECK(!nb_quant_excluded(&c.quant, "model.layers.1.self_attn.o_proj"));
    NB_CHECK(!nb_quant_excluded(&c.quant, "model.layers.1.mlp.experts.2.up_proj"));
    nb_model_config_free(&c);
    rm_rf(in);
}

/* TP/EP arithmetic on a synthetic footprint. */
static void test_footprint(void)
{
    nb_footprint fp;
    memset(&fp, 0, sizeof fp);
    fp.bytes[NB_ROLE_EMBED] = 1000;
    fp.bytes[NB_ROLE_ATTN_HEADS] = 800; /* GQA: k/v a quarter */
    fp.kv_fraction = 0.25;
    fp.n_kv_heads = 2;
    fp.bytes[NB_ROLE_EXPERT] = 6400; /* 10 experts */
    fp.n_experts = 10;
    fp.bytes[NB_ROLE_DENSE_MLP] = 400;
    NB_CHECK(nb_footprint_total_bytes(&fp) == 8600);
    NB_CHECK(nb_footprint_per_gpu(&fp, 1, 0) == 8600);
    /* TP 4: 1000 + 600/4 + 200/2 (k/v split only by 2 kv heads) + 6400/4 + 400/4 */
    NB_CHECK(nb_footprint_per_gpu(&fp, 4, 0) == 1000 + 150 + 100 + 1600 + 100);
    /* EP 4: ceil(10/4) = 3 experts on the fullest GPU */
    NB_CHECK(nb_footprint_per_gpu(&fp, 0, 4) == 1000 + 800 + 1920 + 400);
    /* from a real config: the per-role estimate adds up to the config's parameter count */
    nb_model_config c;
    NB_CHECK_OK(nb_model_config_parse("tiny", tiny_config, &c));
    nb_footprint_from_config(&c, 2, &fp);
    NB_CHECK(nb_footprint_total_params(&fp) == nb_model_config_param_count(&c));
    NB_CHECK(nb_footprint_total_bytes(&fp) == 2 * nb_model_config_param_count(&c));
    nb_model_config_free(&c);
}

/* Two checkpoints hold the same tensors (names, dtypes, shapes, bytes). */
static int same_checkpoint(const char *a_dir, const char *b_dir)
{
    nb_checkpoint *a = NULL, *b = NULL;
    NB_CHECK_OK(nb_checkpoint_open(a_dir, &a));
    NB_CHECK_OK(nb_checkpoint_open(b_dir, &b));
    int diff = !a || !b || nb_checkpoint_count(a) != nb_checkpoint_count(b);
    for (int i = 0; !diff && i < nb_checkpoint_count(a); i++) {
        const nb_st_tensor *x = nb_checkpoint_at(a, i), *y = nb_checkpoint_find(b, x->name);
        diff = !y || y->dtype != x->dtype || y->ndim != x->ndim || y->nbytes != x->nbytes ||
               memcmp(y->shape, x->shape, sizeof x->shape) || memcmp(y->data, x->data, x->nbytes);
        if (diff) fprintf(stderr, "  %s: differs between %s and %s\n", x->name, a_dir, b_dir);
    }
    nb_checkpoint_close(a);
    nb_checkpoint_close(b);
    return !diff;
}

/* inspect and quantize on the fixture checkpoints, when present */
static void test_fixtures_quantize(void)
{
    static const char *const fams[] = {"glm_moe_dsa", "deepseek_v3", "glm4_moe", "qwen3_moe"};
    char tmp[] = "/tmp/nb_test_qf_XXXXXX";
    NB_ASSERT(mkdtemp(tmp));
    int seen = 0;
    for (size_t f = 0; f < NB_ARRAY_LEN(fams); f++) {
        char in[256], out[600], path[700];
        snprintf(in, sizeof in, "tests/fixtures/%s", fams[f]);
        if (!nb_path_exists(nb_path_join(path, sizeof path, in, "model.safetensors"))) continue;
        seen++;
        nb_quantize_params p = nb_quantize_default_params();
        p.progress = 0;
        p.all_linear = f % 2; /* both modes across the families */
        snprintf(out, sizeof out, "%s/%s", tmp, fams[f]);
        int q = quantize_and_verify(in, out, &p);
        NB_CHECK_MSG(q > 0, "%s: %d tensors quantized", fams[f], q);
        nb_model_config ci, co;
        NB_CHECK_OK(nb_model_config_load(in, &ci));
        NB_CHECK_OK(nb_model_config_load(out, &co));
        NB_CHECK(co.quant.algo == NB_QUANT_NVFP4 && co.num_layers == ci.num_layers && co.n_eos == ci.n_eos);
        /* the footprint keeps the parameter count and shrinks the bytes */
        nb_checkpoint *a, *b;
        NB_CHECK_OK(nb_checkpoint_open(in, &a));
        NB_CHECK_OK(nb_checkpoint_open(out, &b));
        if (a && b) {
            nb_footprint fa, fb;
            nb_footprint_from_checkpoint(&ci, a, &fa);
            nb_footprint_from_checkpoint(&co, b, &fb);
            NB_CHECK(nb_footprint_total_params(&fa) == nb_footprint_total_params(&fb));
            NB_CHECK(nb_footprint_total_bytes(&fb) < nb_footprint_total_bytes(&fa));
            NB_CHECK(fa.params[NB_ROLE_EXPERT] == fb.params[NB_ROLE_EXPERT]);
        }
        nb_checkpoint_close(a);
        nb_checkpoint_close(b);
        nb_model_config_free(&ci);
        nb_model_config_free(&co);
    }
    /* fused experts ([E, 2I, H] gate_up_proj, [E, H, I] down_proj) come out per expert,
     * identical to the quantized unfused copy of the same weights */
    char fused_in[] = "tests/fixtures/qwen3_moe_fused", path[700], out[600], out2[600];
    if (nb_path_exists(nb_path_join(path, sizeof path, fused_in, "model.safetensors")) &&
        nb_path_exists("tests/fixtures/qwen3_moe/model.safetensors")) {
        nb_quantize_params p = nb_quantize_default_params();
        p.progress = 0;
        snprintf(out, sizeof out, "%s/fused", tmp);
        snprintf(out2, sizeof out2, "%s/unfused", tmp);
        NB_CHECK_OK(nb_quantize_checkpoint(fused_in, out, &p));
        NB_CHECK_OK(nb_quantize_checkpoint("tests/fixtures/qwen3_moe", out2, &p));
        NB_CHECK(same_checkpoint(out, out2));
        nb_checkpoint *ck;
        NB_CHECK_OK(nb_checkpoint_open(out, &ck));
        if (ck) {
            const nb_st_tensor *t = nb_checkpoint_find(ck, "model.layers.0.mlp.experts.7.up_proj.weight");
            NB_CHECK(t && t->dtype == NB_DTYPE_U8);
            NB_CHECK(nb_checkpoint_find(ck, "model.layers.0.mlp.experts.gate_up_proj") == NULL);
            nb_checkpoint_close(ck);
        }
    }
    /* the thread count does not change a byte */
    if (nb_path_exists("tests/fixtures/glm_moe_dsa/model.safetensors")) {
        nb_quantize_params p = nb_quantize_default_params();
        p.progress = 0;
        p.all_linear = 1;
        p.threads = 1;
        snprintf(out, sizeof out, "%s/t1", tmp);
        snprintf(out2, sizeof out2, "%s/t5", tmp);
        NB_CHECK_OK(nb_quantize_checkpoint("tests/fixtures/glm_moe_dsa", out, &p));
        p.threads = 5;
        NB_CHECK_OK(nb_quantize_checkpoint("tests/fixtures/glm_moe_dsa", out2, &p));
        NB_CHECK(same_checkpoint(out, out2));
    }
    rm_rf(tmp);
    if (!seen) nb_test_skip("no tests/fixtures/*/model.safetensors");
}

static const nb_test tests[] = {
    {"roles", test_roles},
    {"footprint", test_footprint},
    {"quantize_tiny", test_quantize_tiny},
    {"fixtures_quantize", test_fixtures_quantize},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

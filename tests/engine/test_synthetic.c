/* Synthetic weights (src/model/synthetic_fill.h): the bytes are the same for any thread
 * count and chunk size, they are the documented counter-based streams (recomputed here from
 * the formulas, independently of the generator), and their statistics are what init_std
 * asks for (BF16 and NVFP4 alike).
 * Run: build-syn/tests/test_synthetic */
#include <math.h>
#include <string.h>

#include "format/numerics.h"
#include "engine/forward.h"
#include "model/synthetic.h"
#include "nbtest.h"

static const char *const specs[] = {
    "synthetic:glm5-tiny:num_hidden_layers=2,experts=nvfp4,seed=5",
    /* GQA with attention biases (F32 normal streams), BF16 experts */
    "synthetic:glm4-moe:hidden_size=64,num_hidden_layers=2,first_k_dense_replace=1,intermediate_size=128,"
    "moe_intermediate_size=32,n_routed_experts=8,num_experts_per_tok=2,num_attention_heads=4,num_key_value_heads=2,"
    "head_dim=16,vocab_size=300,seed=11",
};

/* 1 when both checkpoints hold the same names in the same order with the same bytes. */
static int same_bytes(const nb_checkpoint *a, const nb_checkpoint *b)
{
    if (nb_checkpoint_count(a) != nb_checkpoint_count(b)) return 0;
    for (int i = 0; i < nb_checkpoint_count(a); i++) {
        const nb_st_tensor *x = nb_checkpoint_at(a, i), *y = nb_checkpoint_at(b, i);
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->nbytes != y->nbytes ||
            memcmp(x->data, y->data, x->nbytes))
            return 0;
    }
    return 1;
}

static void test_thread_invariance(void)
{
    /* chunks of 8 and 24 elements split every tensor across threads at odd places */
    const struct {
        int threads;
        size_t chunk;
    } runs[] = {{2, 0}, {3, 8}, {5, 24}, {8, 1000}, {0, 0}};
    for (size_t s = 0; s < NB_ARRAY_LEN(specs); s++) {
        nb_model_config c0;
        nb_checkpoint *k0 = NULL;
        NB_CHECK_OK(nb_synthetic_build_threads(specs[s], 1, 0, &c0, &k0));
        if (!k0) continue;
        NB_CHECK(nb_checkpoint_count(k0) > 20);
        for (size_t r = 0; r < NB_ARRAY_LEN(runs); r++) {
            nb_model_config c;
            nb_checkpoint *k = NULL;
            NB_CHECK_OK(nb_synthetic_build_threads(specs[s], runs[r].threads, runs[r].chunk, &c, &k));
            if (!k) continue;
            NB_CHECK_MSG(same_bytes(k0, k), "%s: %d threads, chunk %zu differ from 1 thread", specs[s],
                         runs[r].threads, runs[r].chunk);
            nb_checkpoint_close(k);
            nb_model_config_free(&c);
        }
        nb_checkpoint_close(k0);
        nb_model_config_free(&c0);
    }
    /* another seed gives other weights */
    nb_model_config a, b;
    nb_checkpoint *ka = NULL, *kb = NULL;
    NB_CHECK_OK(nb_synthetic_build("synthetic:glm5-tiny:num_hidden_layers=1,seed=1", &a, &ka));
    NB_CHECK_OK(nb_synthetic_build("synthetic:glm5-tiny:num_hidden_layers=1,seed=2", &b, &kb));
    if (ka && kb) NB_CHECK(!same_bytes(ka, kb));
    if (ka) nb_checkpoint_close(ka), nb_model_config_free(&a);
    if (kb) nb_checkpoint_close(kb), nb_model_config_free(&b);
}

/* The streams as synthetic_fill.h documents them, written out again. */
static uint64_t ref_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t ref_key(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 1099511628211ULL;
    return ref_mix(seed * 0xD6E8FEB86659FD93ULL ^ h);
}

static uint64_t ref_h(uint64_t key, uint64_t i) { return ref_mix(key + (i + 1) * 0x9E3779B97F4A7C15ULL); }

static float ref_normal(uint64_t key, uint64_t i, float std)
{
    uint64_t h = ref_h(key, i);
    double s = (double)(h & 0xffff) + (double)((h >> 16) & 0xffff) + (double)((h >> 32) & 0xffff) + (double)(h >> 48);
    return (float)((s - 131070.0) / sqrt((4294967296.0 - 1) / 3)) * std;
}

static void test_streams(void)
{
    nb_model_config c;
    nb_checkpoint *k = NULL;
    NB_CHECK_OK(nb_synthetic_build_threads(specs[0], 2, 64, &c, &k));
    if (!k) return;
    /* BF16 normal: every element of the embedding within one BF16 rounding step of the
     * formula (the generator rounds a float product; the reference a double) */
    const nb_st_tensor *e = nb_checkpoint_find(k, "model.embed_tokens.weight");
    NB_CHECK(e && e->dtype == NB_DTYPE_BF16 && e->shape[0] == 272 && e->shape[1] == 256);
    uint64_t key = ref_key(5, "model.embed_tokens.weight");
    const nb_bf16 *eb = e->data;
    int64_t n = 272 * 256, bad = 0;
    double sum = 0, sq = 0;
    for (int64_t i = 0; e && i < n; i++) {
        float want = ref_normal(key, (uint64_t)i, 0.02f), got = nb_bf16_to_f32(eb[i]);
        bad += fabsf(got - want) > fabsf(want) * (1.0f / 128) + 1e-12f;
        sum += got;
        sq += (double)got * got;
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    fprintf(stderr, "  embed: mean %.2e std %.5f (init_std 0.02), %lld off the formula\n", mean, sd, (long long)bad);
    NB_CHECK(bad == 0);
    NB_CHECK_MSG(fabs(mean) < 3e-4 && fabs(sd - 0.02) < 0.0004, "mean %g std %g", mean, sd);

    /* NVFP4: code and scale bytes are the documented fields; dequantized std = init_std */
    const nb_st_tensor *w = nb_checkpoint_find(k, "model.layers.1.mlp.experts.3.gate_proj.weight");
    const nb_st_tensor *sc = nb_checkpoint_find(k, "model.layers.1.mlp.experts.3.gate_proj.weight_scale");
    const nb_st_tensor *g2 = nb_checkpoint_find(k, "model.layers.1.mlp.experts.3.gate_proj.weight_scale_2");
    const nb_st_tensor *u2 = nb_checkpoint_find(k, "model.layers.1.mlp.experts.3.up_proj.weight_scale_2");
    NB_CHECK(w && sc && g2 && u2);
    if (!w || !sc || !g2 || !u2) goto out;
    NB_CHECK(w->dtype == NB_DTYPE_U8 && w->shape[0] == 128 && w->shape[1] == 128);
    NB_CHECK(sc->dtype == NB_DTYPE_F8_E4M3 && sc->shape[0] == 128 && sc->shape[1] == 16);
    float gs = *(const float *)g2->data;
    NB_CHECK(gs > 0 && gs == *(const float *)u2->data); /* gate and up share weight_scale_2 */
    uint64_t wk = ref_key(5, "model.layers.1.mlp.experts.3.gate_proj.weight");
    uint64_t sk = ref_key(5, "model.layers.1.mlp.experts.3.gate_proj.weight/scale");
    const uint8_t *q = w->data, *s = sc->data;
    int scale_bad = 0, sat = 0, zero = 0, same_byte_bits = 1;
    for (int j = 0; j < 128 * 16; j++) {
        int want = 0x72 + (int)((ref_h(sk, (uint64_t)j / 8) >> (8 * (j % 8))) & 7);
        scale_bad += s[j] != want;
    }
    /* a code byte is a function of its 16-bit field: equal fields give equal bytes, and
     * the low byte of the field sets the low nibble */
    uint8_t seen[65536];
    memset(seen, 0, sizeof seen);
    uint8_t byte_of[65536];
    uint8_t low_of[256];
    memset(low_of, 0xff, sizeof low_of);
    sum = sq = 0;
    for (int j = 0; j < 128 * 64; j++) {
        unsigned f = (unsigned)((ref_h(wk, (uint64_t)j / 4) >> (16 * (j % 4))) & 0xffff);
        if (seen[f]) same_byte_bits &= byte_of[f] == q[j];
        seen[f] = 1, byte_of[f] = q[j];
        if (low_of[f & 255] != 0xff) same_byte_bits &= low_of[f & 255] == (q[j] & 15);
        low_of[f & 255] = q[j] & 15;
        for (int h = 0; h < 2; h++) {
            uint8_t code = (uint8_t)((q[j] >> (4 * h)) & 15);
            sat += (code & 7) == 7;
            zero += (code & 7) == 0;
            double v = nb_e2m1_to_f32(code) * (nb_e4m3_to_f32(s[(j * 2 + h) / 16]) * gs);
            sum += v;
            sq += v * v;
        }
    }
    n = 128 * 128;
    mean = sum / n, sd = sqrt(sq / n - mean * mean);
    fprintf(stderr, "  NVFP4 expert: mean %.2e std %.5f, %.1f%% codes at +-6, %.1f%% at 0\n", mean, sd,
            100.0 * sat / n, 100.0 * zero / n);
    NB_CHECK(scale_bad == 0 && same_byte_bits);
    NB_CHECK_MSG(fabs(mean) < 6e-4 && fabs(sd - 0.02) < 0.001, "mean %g std %g", mean, sd);
    NB_CHECK_MSG(sat > n / 50 && sat < n / 8 && zero > n / 40 && zero < n / 4, "saturated %d zero %d", sat, zero);
out:
    nb_checkpoint_close(k);
    nb_model_config_free(&c);
}

/* The activation block the engine sets aside (nb_fwd_act_bytes, the size fwd_setup carves): on
 * the H100 the 8-layer GLM-5 slice's first 8256-token step failed to grow scratch slot 4 to
 * 5020632320 bytes, 1.5x its previous size (ops/cuda/ctx.cu's growth), so the step needed between
 * 5020632320 / 1.5 and 5020632320 bytes (bench/RESULTS.md, issue 8, seventeenth session); and the
 * block grows with T and R. */
static void test_act_bytes(void)
{
    nb_model_config c;
    nb_checkpoint *k = NULL;
    nb_synth_deferred *plan = NULL;
    NB_CHECK(nb_synthetic_build_deferred("synthetic:glm5:num_hidden_layers=8", &c, &k, &plan) == NB_OK);
    if (!k) return;
    const size_t lo = nb_fwd_act_bytes(&c, 8256, 1), hi = nb_fwd_act_bytes(&c, 8256, 1064);
    NB_CHECK_MSG(lo * 3 >= 5020632320u * 2 && hi <= 5020632320u, "8256 tokens: %zu-%zu bytes", lo, hi);
    NB_CHECK(nb_fwd_act_bytes(&c, 8257, 1) > nb_fwd_act_bytes(&c, 8256, 1));
    NB_CHECK(nb_fwd_act_bytes(&c, 8256, 2) > nb_fwd_act_bytes(&c, 8256, 1));
    nb_synthetic_deferred_free(plan);
    nb_checkpoint_close(k);
    nb_model_config_free(&c);
}

int main(int argc, char **argv)
{
    static const nb_test tests[] = {
        {"thread_invariance", test_thread_invariance},
        {"streams", test_streams},
        {"act_bytes", test_act_bytes},
    };
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}

/* Golden tests: nibble's CPU forward pass against HF transformers on the tiny fixtures of
 * tests/fixtures/<family>/ (reference.json, logits_<seq>.npy, model.safetensors).
 * For every family and sequence: the per-position relative error ||ours - ref|| / ||ref||
 * of the logits <= NB_TOL_GOLDEN (in both MLA forms for the MLA families), and the greedy
 * continuation computed with the KV cache (prefill, then one token per step) identical to
 * HF's. Run: build-x/tests/test_golden [family]. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "engine/forward.h"
#include "format/npy.h"
#include "model/model.h"
#include "nbtest.h"

/* HF's float32 eager forward vs ours: both float32, different summation orders; 1e-3 is the
 * issue's bound (observed ~1e-6). */
#define NB_TOL_GOLDEN 1e-3
/* the BF16 latent cache (--kv-cache-dtype bfloat16): issue 9's per-position bound for BF16
 * paths; measured 2.1e-3 .. 4.6e-3 on these fixtures (float32 rows: ~1e-6) */
#define NB_TOL_GOLDEN_BF16_KV 1e-2

static double rel_err(const float *a, const float *b, int n)
{
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (sqrt(r) + 1e-30);
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) b = v[i] > v[b] ? i : b;
    return b;
}

static int json_ints(const cJSON *arr, int32_t *out, int cap)
{
    int n = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e && n < cap; e = e->next) out[n++] = (int32_t)e->valuedouble;
    return n;
}

static void check_sequence(nb_model *m, const char *dir, const cJSON *seq, nb_dtype lat)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(seq, "name"));
    const char *lf = cJSON_GetStringValue(cJSON_GetObjectItem(seq, "logits_file"));
    int32_t ids[1024], greedy[64];
    int n = json_ints(cJSON_GetObjectItem(seq, "ids"), ids, 1024);
    int ng = json_ints(cJSON_GetObjectItem(seq, "greedy"), greedy, 64);
    NB_CHECK(name && lf && n > 0 && ng > 0);
    if (!name || !lf || n <= 0) return;
    const int V = m->cfg.vocab_size;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, lf);
    float *ref = NULL;
    int nd = 0;
    int64_t shape[8];
    NB_CHECK_OK(nb_npy_read_f32(path, &ref, &nd, shape));
    if (!ref) return;
    NB_CHECK(nd == 2 && shape[0] == n && shape[1] == V);

    nb_kv_pool pool;
    NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, lat, n + ng));
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)(n + ng));
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    for (int i = 0; i < n + ng; i++) slots[i] = i;

    /* every position in one prefill step */
    nb_seq_step st = {ids, n, 0, slots, 1};
    nb_batch b = {1, &st};
    NB_CHECK_OK(nb_forward(m, &pool, &b, logits));
    double worst = 0;
    int worst_at = 0;
    for (int p = 0; p < n; p++) {
        double e = rel_err(logits + (int64_t)p * V, ref + (int64_t)p * V, V);
        if (e > worst) worst = e, worst_at = p;
    }
    fprintf(stderr, "  %s/%s (%s%s): %d positions, max rel err %.3g at position %d\n", m->cfg.model_type, name,
            m->cfg.attn != NB_ATTN_MLA ? "GQA" : m->params.mla_mode == NB_MLA_NAIVE ? "naive MLA" : "absorbed MLA",
            lat == NB_DTYPE_BF16 ? ", BF16 latent cache" : "", n, worst, worst_at);
    NB_CHECK_MSG(worst <= (lat == NB_DTYPE_BF16 ? NB_TOL_GOLDEN_BF16_KV : NB_TOL_GOLDEN),
                 "%s/%s: logits rel err %.3g at position %d", m->cfg.model_type, name, worst, worst_at);

    /* greedy with the cache: the prefill above already wrote rows 0..n-1 */
    int32_t seqv[1100];
    memcpy(seqv, ids, sizeof(int32_t) * (size_t)n);
    int len = n;
    int tok = argmax(logits + (int64_t)(n - 1) * V, V);
    int mismatch = -1;
    for (int s = 0; s < ng; s++) {
        if (tok != greedy[s] && mismatch < 0) mismatch = s;
        seqv[len] = tok;
        if (s + 1 == ng) break;
        nb_seq_step d = {seqv + len, 1, len, slots, 0};
        nb_batch db = {1, &d};
        len++;
        NB_CHECK_OK(nb_forward(m, &pool, &db, logits));
        tok = argmax(logits, V);
    }
    NB_CHECK_MSG(mismatch < 0, "%s/%s: greedy token %d differs from HF's", m->cfg.model_type, name, mismatch);
    free(slots);
    free(logits);
    free(ref);
    nb_kv_pool_free(&pool);
}

static void run_family(const char *family)
{
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", family);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    cJSON *ref = NULL;
    NB_CHECK_OK(nb_json_load_file(path, &ref));
    if (!ref) return;
    /* MLA: absorbed and naive over float32 latent rows, then absorbed over BF16 rows
     * (--kv-cache-dtype bfloat16) against the same references */
    for (int mode = 0; mode < 3; mode++) {
        nb_model_params p = nb_model_default_params();
        p.mla_mode = mode == 1 ? NB_MLA_NAIVE : NB_MLA_ABSORBED;
        nb_model *m = NULL;
        NB_CHECK_OK(nb_model_load(dir, &p, &m));
        if (!m) break;
        int mla = m->cfg.attn == NB_ATTN_MLA;
        const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
        for (const cJSON *s = seqs ? seqs->child : NULL; s; s = s->next)
            check_sequence(m, dir, s, mode == 2 ? NB_DTYPE_BF16 : NB_DTYPE_F32);
        nb_model_free(m);
        if (!mla) break; /* GQA has one form */
    }
    cJSON_Delete(ref);
}

static void test_glm_moe_dsa(void) { run_family("glm_moe_dsa"); }

/* The long glm_moe_dsa sequence really depends on the sparse selection: with index_topk
 * raised past its length (dense attention) the positions up to index_topk still match HF,
 * and the later ones do not. */
static void test_dsa_selection_matters(void)
{
    nb_model *m = NULL;
    nb_model_params p = nb_model_default_params();
    NB_CHECK_OK(nb_model_load("tests/fixtures/glm_moe_dsa", &p, &m));
    cJSON *ref = NULL;
    NB_CHECK_OK(nb_json_load_file("tests/fixtures/glm_moe_dsa/reference.json", &ref));
    if (!m || !ref) return;
    const cJSON *seq = cJSON_GetObjectItem(ref, "sequences")->child->next;
    int32_t ids[1024];
    int n = json_ints(cJSON_GetObjectItem(seq, "ids"), ids, 1024);
    const int topk = m->cfg.index_topk, V = m->cfg.vocab_size;
    NB_CHECK(n > topk);
    float *refl = NULL;
    int nd;
    int64_t shape[8];
    NB_CHECK_OK(nb_npy_read_f32("tests/fixtures/glm_moe_dsa/logits_long.npy", &refl, &nd, shape));
    m->cfg.index_topk = 1 << 20;
    nb_kv_pool pool;
    NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, NB_DTYPE_F32, n));
    int32_t slots[1024];
    for (int i = 0; i < n; i++) slots[i] = i;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
    nb_seq_step st = {ids, n, 0, slots, 1};
    nb_batch b = {1, &st};
    NB_CHECK_OK(nb_forward(m, &pool, &b, lg));
    double early = 0, late = 0;
    for (int q = 0; refl && q < n; q++) {
        double e = rel_err(lg + (int64_t)q * V, refl + (int64_t)q * V, V);
        if (q < topk) early = fmax(early, e);
        else late = fmax(late, e);
    }
    fprintf(stderr, "  dense instead of top-%d: max rel err %.3g before position %d, %.3g after\n", topk, early, topk,
            late);
    NB_CHECK(early <= NB_TOL_GOLDEN);
    NB_CHECK(late > 100 * NB_TOL_GOLDEN);
    free(lg);
    free(refl);
    nb_kv_pool_free(&pool);
    cJSON_Delete(ref);
    nb_model_free(m);
}
static void test_deepseek_v3(void) { run_family("deepseek_v3"); }
static void test_glm4_moe(void) { run_family("glm4_moe"); }
static void test_qwen3_moe(void) { run_family("qwen3_moe"); }

static const nb_test tests[] = {
    {"glm_moe_dsa", test_glm_moe_dsa},
    {"dsa_selection_matters", test_dsa_selection_matters},
    {"deepseek_v3", test_deepseek_v3},
    {"glm4_moe", test_glm4_moe},
    {"qwen3_moe", test_qwen3_moe},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

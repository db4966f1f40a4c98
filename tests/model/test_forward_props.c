/* Properties of the forward pass on the golden fixtures' models (every family):
 *   - decode with the KV cache (one token per step) == recomputing the whole sequence;
 *   - chunked prefill == one prefill;
 *   - a batch mixing a prefill chunk, a continued chunk and a decode of three sequences over
 *     shuffled slots of one shared pool == each sequence alone;
 * for glm_moe_dsa the sequence is longer than index_topk, so these hold with sparse
 * selection (the indexer's own key cache included). Run: build-x/tests/test_forward_props. */
#include "fixture_util.h"

/* Same float32 math in a different grouping of tokens per call: only BLAS blocking changes. */
#define NB_TOL_RECOMPUTE 1e-5

static const char *const families[] = {"glm_moe_dsa", "deepseek_v3", "glm4_moe", "qwen3_moe"};

static nb_model *load(const char *family)
{
    char dir[128];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", family);
    nb_model *m = NULL;
    nb_model_params p = nb_model_default_params();
    NB_CHECK_OK(nb_model_load(dir, &p, &m));
    return m;
}

/* Decode steps over the cache == one recompute, per family; MLA families also with the BF16
 * latent cache (both sides read the same rounded rows). */
static void test_decode_equals_recompute(void)
{
    for (size_t f = 0; f < 2 * NB_ARRAY_LEN(families); f++) {
        const int bf = f >= NB_ARRAY_LEN(families);
        const char *fam = families[f % NB_ARRAY_LEN(families)];
        nb_model *m = load(fam);
        if (!m) continue;
        if (bf && m->cfg.attn != NB_ATTN_MLA) {
            nb_model_free(m);
            continue;
        }
        const nb_dtype lat = bf ? NB_DTYPE_BF16 : NB_DTYPE_F32;
        int32_t ids[64];
        int n = fx_long_ids(fam, ids, 64);
        NB_CHECK(n > 8);
        const int V = m->cfg.vocab_size;
        float *full = fx_score_dt(m, ids, n, lat);
        nb_kv_pool pool;
        NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, lat, n));
        int32_t slots[64];
        for (int i = 0; i < n; i++) slots[i] = i;
        float *row = malloc(sizeof(float) * (size_t)V);
        double worst = 0;
        for (int p = 0; p < n && full; p++) { /* position 0 is a 1-token prefill */
            nb_seq_step st = {ids + p, 1, p, slots, 0};
            nb_batch b = {1, &st};
            NB_CHECK_OK(nb_forward(m, &pool, &b, row));
            worst = fmax(worst, fx_rel_err(row, full + (int64_t)p * V, V));
        }
        fprintf(stderr, "  %s%s: %d decode steps vs recompute, max rel err %.3g\n", fam, bf ? " (BF16 latent cache)" : "",
                n, worst);
        NB_CHECK_MSG(worst <= NB_TOL_RECOMPUTE, "%s: %.3g", fam, worst);
        free(row);
        free(full);
        nb_kv_pool_free(&pool);
        nb_model_free(m);
    }
}

static void test_chunked_prefill(void)
{
    for (size_t f = 0; f < NB_ARRAY_LEN(families); f++) {
        nb_model *m = load(families[f]);
        if (!m) continue;
        int32_t ids[64];
        int n = fx_long_ids(families[f], ids, 64);
        const int V = m->cfg.vocab_size;
        float *full = fx_score(m, ids, n);
        nb_kv_pool pool;
        NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, NB_DTYPE_F32, n));
        int32_t slots[64];
        for (int i = 0; i < n; i++) slots[i] = i;
        float *part = malloc(sizeof(float) * (size_t)n * (size_t)V);
        double worst = 0;
        for (int p = 0; p < n && full;) {
            int c = NB_MIN(7, n - p);
            nb_seq_step st = {ids + p, c, p, slots, 1};
            nb_batch b = {1, &st};
            NB_CHECK_OK(nb_forward(m, &pool, &b, part));
            for (int i = 0; i < c; i++)
                worst = fmax(worst, fx_rel_err(part + (int64_t)i * V, full + (int64_t)(p + i) * V, V));
            p += c;
        }
        fprintf(stderr, "  %s: chunks of 7 vs one prefill, max rel err %.3g\n", families[f], worst);
        NB_CHECK_MSG(worst <= NB_TOL_RECOMPUTE, "%s: %.3g", families[f], worst);
        free(part);
        free(full);
        nb_kv_pool_free(&pool);
        nb_model_free(m);
    }
}

static void test_batch_equals_alone(void)
{
    for (size_t f = 0; f < NB_ARRAY_LEN(families); f++) {
        nb_model *m = load(families[f]);
        if (!m) continue;
        int32_t base[64];
        int n = fx_long_ids(families[f], base, 64);
        const int V = m->cfg.vocab_size;
        /* three sequences: A = base[0..n), B = a rotation of it, C = its first 13 reversed */
        int32_t A[64], B[64], C[16];
        int la = n, lb = n - 3, lc = 13;
        for (int i = 0; i < la; i++) A[i] = base[i];
        for (int i = 0; i < lb; i++) B[i] = base[(i + 5) % n];
        for (int i = 0; i < lc; i++) C[i] = base[lc - 1 - i];
        float *ra = fx_score(m, A, la), *rb = fx_score(m, B, lb), *rc = fx_score(m, C, lc);
        /* one shared pool; rows handed out in a scrambled order (i * 7 mod rows, a bijection
         * when 7 does not divide rows, else reversed), so sequences interleave */
        const int rows = la + lb + lc;
        int perm[200];
        for (int i = 0; i < rows; i++) perm[i] = rows % 7 ? (i * 7) % rows : rows - 1 - i;
        int32_t sa[64], sb[64], sc[16];
        int k = 0;
        for (int i = 0; i < la; i++) sa[i] = perm[k++];
        for (int i = 0; i < lb; i++) sb[i] = perm[k++];
        for (int i = 0; i < lc; i++) sc[i] = perm[k++];
        nb_kv_pool pool;
        NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, NB_DTYPE_F32, rows));
        /* step 1: A prefill [0, la-1), B prefill [0, 10), C prefill [0, 6) */
        nb_seq_step s1[3] = {{A, la - 1, 0, sa, 1}, {B, 10, 0, sb, 1}, {C, 6, 0, sc, 0}};
        nb_batch b1 = {3, s1};
        float *o1 = malloc(sizeof(float) * (size_t)nb_batch_logit_rows(&b1) * (size_t)V);
        NB_CHECK_OK(nb_forward(m, &pool, &b1, o1));
        /* step 2: A decodes its last token, B continues with the rest, C with the rest */
        nb_seq_step s2[3] = {{A + la - 1, 1, la - 1, sa, 0}, {B + 10, lb - 10, 10, sb, 1}, {C + 6, lc - 6, 6, sc, 1}};
        nb_batch b2 = {3, s2};
        float *o2 = malloc(sizeof(float) * (size_t)nb_batch_logit_rows(&b2) * (size_t)V);
        NB_CHECK_OK(nb_forward(m, &pool, &b2, o2));
        double worst = 0;
        if (ra && rb && rc) {
            int r = 0;
            for (int i = 0; i < la - 1; i++, r++) worst = fmax(worst, fx_rel_err(o1 + (int64_t)r * V, ra + (int64_t)i * V, V));
            for (int i = 0; i < 10; i++, r++) worst = fmax(worst, fx_rel_err(o1 + (int64_t)r * V, rb + (int64_t)i * V, V));
            worst = fmax(worst, fx_rel_err(o1 + (int64_t)r * V, rc + (int64_t)5 * V, V)); /* C: last only */
            r = 0;
            worst = fmax(worst, fx_rel_err(o2 + (int64_t)r++ * V, ra + (int64_t)(la - 1) * V, V));
            for (int i = 10; i < lb; i++, r++) worst = fmax(worst, fx_rel_err(o2 + (int64_t)r * V, rb + (int64_t)i * V, V));
            for (int i = 6; i < lc; i++, r++) worst = fmax(worst, fx_rel_err(o2 + (int64_t)r * V, rc + (int64_t)i * V, V));
        }
        fprintf(stderr, "  %s: 3-sequence mixed batches over shuffled slots vs alone, max rel err %.3g\n",
                families[f], worst);
        NB_CHECK_MSG(worst <= NB_TOL_RECOMPUTE, "%s: %.3g", families[f], worst);
        free(o1), free(o2), free(ra), free(rb), free(rc);
        nb_kv_pool_free(&pool);
        nb_model_free(m);
    }
}

static void test_bad_batches(void)
{
    nb_model *m = load("qwen3_moe");
    if (!m) return;
    nb_kv_pool pool;
    NB_CHECK_OK(nb_kv_pool_init(&pool, &m->cfg, NB_DTYPE_F32, 4));
    int32_t ids[2] = {9, 10}, slots[2] = {0, 4};
    float lg[2 * 512];
    nb_seq_step st = {ids, 2, 0, slots, 1};
    nb_batch b = {1, &st};
    NB_CHECK_STATUS(nb_forward(m, &pool, &b, lg), NB_ERR_INVALID_ARG); /* slot 4 of a 4-slot pool */
    NB_CHECK(strstr(nb_last_error(), "slots[1]") != NULL);
    slots[1] = 1;
    ids[1] = m->cfg.vocab_size;
    NB_CHECK_STATUS(nb_forward(m, &pool, &b, lg), NB_ERR_INVALID_ARG); /* id past the vocabulary */
    NB_CHECK(strstr(nb_last_error(), "vocabulary") != NULL);
    nb_kv_pool_free(&pool);
    /* a pool laid out for another model is refused */
    nb_model *other = load("glm4_moe");
    if (other) {
        NB_CHECK_OK(nb_kv_pool_init(&pool, &other->cfg, NB_DTYPE_F32, 4));
        ids[1] = 10;
        NB_CHECK_STATUS(nb_forward(m, &pool, &b, lg), NB_ERR_INVALID_ARG);
        NB_CHECK(strstr(nb_last_error(), "another model") != NULL);
        nb_kv_pool_free(&pool);
        nb_model_free(other);
    }
    nb_model_free(m);
}

/* Row layouts of the KV contract (engine/forward.h) for each fixture's config, in bytes, with
 * float32 and BF16 latent rows (BF16: 16-byte aligned parts; GQA models refuse BF16). */
static void test_kv_layout(void)
{
    const struct {
        const char *family;
        int64_t row[3], row16[3]; /* bytes: float32 rows, BF16 latent rows (0: refused) */
    } want[] = {
        /* latent 32, k_pe 16, indexer key 32 ("shared" layer 2: none); BF16: 64 + 32, the key
         * at 96, 224 bytes */
        {"glm_moe_dsa", {4 * 80, 4 * 80, 4 * 48}, {224, 224, 96}},
        {"deepseek_v3", {4 * 48, 4 * 48, 4 * 48}, {96, 96, 96}},
        {"glm4_moe", {4 * 2 * 2 * 48, 4 * 2 * 2 * 48, 4 * 2 * 2 * 48}, {0, 0, 0}}, /* K and V of 2 kv heads x 48 */
        {"qwen3_moe", {4 * 2 * 2 * 40, 4 * 2 * 2 * 40, 4 * 2 * 2 * 40}, {0, 0, 0}},
    };
    for (size_t f = 0; f < NB_ARRAY_LEN(want); f++) {
        char dir[128];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", want[f].family);
        nb_model_config cfg;
        NB_CHECK_OK(nb_model_config_load(dir, &cfg));
        for (int bf = 0; bf < 2; bf++) {
            const nb_dtype dt = bf ? NB_DTYPE_BF16 : NB_DTYPE_F32;
            const int64_t *row = bf ? want[f].row16 : want[f].row;
            nb_kv_pool pool;
            if (!row[0]) {
                NB_CHECK_STATUS(nb_kv_pool_init(&pool, &cfg, dt, 3), NB_ERR_INVALID_ARG);
                nb_dtype lat;
                NB_CHECK_STATUS(nb_kv_lat_dtype(NB_KV_CACHE_BF16, &cfg, 1, &lat), NB_ERR_INVALID_ARG);
                NB_CHECK_MSG(strstr(nb_last_error(), "MLA") != NULL, "%s", nb_last_error());
                NB_CHECK_OK(nb_kv_lat_dtype(NB_KV_CACHE_AUTO, &cfg, 1, &lat)); /* GQA: float32 everywhere */
                NB_CHECK(lat == NB_DTYPE_F32);
                continue;
            }
            NB_CHECK_OK(nb_kv_pool_init(&pool, &cfg, dt, 3));
            nb_dtype lat = NB_DTYPE_F16;
            NB_CHECK_OK(nb_kv_lat_dtype(NB_KV_CACHE_AUTO, &cfg, bf, &lat)); /* auto: BF16 on the GPU, float32 on the CPU */
            NB_CHECK(lat == dt);
            NB_CHECK_OK(nb_kv_lat_dtype(bf ? NB_KV_CACHE_BF16 : NB_KV_CACHE_F32, &cfg, !bf, &lat));
            NB_CHECK(lat == dt);
            size_t total = 0;
            for (int l = 0; l < 3; l++) {
                NB_CHECK_MSG((int64_t)nb_kv_row_bytes(&pool, l) == row[l], "%s %s layer %d: %lld bytes",
                             want[f].family, nb_dtype_name(dt), l, (long long)nb_kv_row_bytes(&pool, l));
                total += (size_t)row[l];
            }
            NB_CHECK(nb_kv_bytes_per_slot(&pool) == total);
            const nb_kv_layer_layout *L = &pool.layout.layer[0];
            if (cfg.attn == NB_ATTN_MLA) {
                const int64_t es = bf ? 2 : 4;
                NB_CHECK(L->lat_dtype == dt && L->latent_at == 0 && L->kpe_at == cfg.kv_lora_rank * es && L->k_at < 0);
                if (L->index_at >= 0) NB_CHECK(L->index_at % 16 == 0 && L->index_at >= (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * es);
            } else {
                NB_CHECK(L->k_at == 0 && L->v_at == (int64_t)cfg.num_kv_heads * cfg.head_dim * 4 && L->latent_at < 0);
            }
            nb_kv_pool_free(&pool);
        }
        nb_model_config_free(&cfg);
    }
    nb_kv_layout lay;
    nb_model_config cfg;
    NB_CHECK_OK(nb_model_config_load("tests/fixtures/deepseek_v3", &cfg));
    NB_CHECK_STATUS(nb_kv_layout_for(&cfg, NB_DTYPE_F16, &lay), NB_ERR_INVALID_ARG);
    nb_model_config_free(&cfg);
}

static const nb_test tests[] = {
    {"kv_layout", test_kv_layout},
    {"decode_equals_recompute", test_decode_equals_recompute},
    {"chunked_prefill", test_chunked_prefill},
    {"batch_equals_alone", test_batch_equals_alone},
    {"bad_batches", test_bad_batches},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

/* KV page allocator and capacity arithmetic (src/engine/kv_pages.h).
 * Run: build-eng/tests/test_kv_pages */
#include "engine/kv_pages.h"
#include "nbtest.h"

static void test_alloc_release(void)
{
    nb_kv_pages kv;
    NB_CHECK_OK(nb_kv_pages_init(&kv, 5, 4));
    int seen[5] = {0};
    int32_t got[5];
    for (int i = 0; i < 5; i++) {
        got[i] = nb_kv_pages_alloc(&kv);
        NB_CHECK(got[i] >= 0 && got[i] < 5);
        if (got[i] >= 0 && got[i] < 5) seen[got[i]]++;
    }
    for (int i = 0; i < 5; i++) NB_CHECK(seen[i] == 1);
    NB_CHECK(nb_kv_pages_alloc(&kv) == -1);
    NB_CHECK(nb_kv_pages_used(&kv) == 5);
    nb_kv_pages_release(&kv, got[2]);
    NB_CHECK(nb_kv_pages_alloc(&kv) == got[2]);
    /* a shared page is free only after its last holder lets go */
    nb_kv_pages_share(&kv, got[1]);
    nb_kv_pages_share(&kv, got[1]);
    nb_kv_pages_release(&kv, got[1]);
    nb_kv_pages_release(&kv, got[1]);
    NB_CHECK(kv.n_free == 0 && kv.ref[got[1]] == 1);
    for (int i = 0; i < 5; i++) nb_kv_pages_release(&kv, got[i]);
    NB_CHECK(kv.n_free == 5);
    nb_kv_pages_free_all(&kv);
    NB_CHECK_STATUS(nb_kv_pages_init(&kv, 0, 4), NB_ERR_INVALID_ARG);
}

static void test_capacity(void)
{
    int64_t t = 0;
    /* explicit --max-total-tokens rounds down to pages */
    NB_CHECK_OK(nb_kv_capacity(1000, 0, 0.9, 0, 100, 64, &t));
    NB_CHECK(t == 960);
    /* budget: (10 GiB * 0.5 - 1 GiB) / 1 MiB per token = 4096 tokens */
    double gib = 1073741824.0;
    NB_CHECK_OK(nb_kv_capacity(0, 10 * gib, 0.5, 1 * gib, 1 << 20, 64, &t));
    NB_CHECK(t == 4096);
    NB_CHECK_STATUS(nb_kv_capacity(0, 1 * gib, 0.5, 1 * gib, 1 << 20, 64, &t), NB_ERR_OUT_OF_MEMORY);
    NB_CHECK_STATUS(nb_kv_capacity(0, 1 * gib, 1.5, 0, 1 << 20, 64, &t), NB_ERR_INVALID_ARG);
    NB_CHECK_STATUS(nb_kv_capacity(10, 0, 0.9, 0, 100, 64, &t), NB_ERR_INVALID_ARG);
}

static void test_line(void)
{
    char buf[160];
    /* the seeds' figures: 495,488 tokens, 37.8 GiB, 1,935 requests of 256 tokens */
    nb_kv_format_line(buf, sizeof buf, 495488, 37.8 * 1073741824.0, 256);
    NB_CHECK_MSG(!strcmp(buf, "KV cache: 495,488 tokens (37.8 GiB); 1,935 requests of 256 tokens"), "%s", buf);
    nb_format_thousands(buf, sizeof buf, 999);
    NB_CHECK(!strcmp(buf, "999"));
    nb_format_thousands(buf, sizeof buf, 1000);
    NB_CHECK(!strcmp(buf, "1,000"));
    nb_format_thousands(buf, sizeof buf, -1234567);
    NB_CHECK(!strcmp(buf, "-1,234,567"));
}

static void test_bytes_per_token(void)
{
    nb_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = NB_ARCH_GLM_MOE_DSA;
    c.attn = NB_ATTN_MLA;
    c.num_layers = 78;
    c.kv_lora_rank = 512;
    c.qk_rope_head_dim = 64;
    c.index_head_dim = 128;
    c.index_topk = 2048;
    for (int l = 0; l < 78; l++) c.layer_has_indexer[l] = 1;
    /* GLM-5, BF16: 78 x (512 + 64 + 128) x 2 bytes */
    NB_CHECK(nb_kv_bytes_per_token(&c, 2) == 78LL * 704 * 2);
    nb_model_config g;
    memset(&g, 0, sizeof g);
    g.arch = NB_ARCH_QWEN3_MOE;
    g.attn = NB_ATTN_GQA;
    g.num_layers = 48;
    g.num_kv_heads = 4;
    g.head_dim = 128;
    NB_CHECK(nb_kv_bytes_per_token(&g, 2) == 48LL * 2 * 4 * 128 * 2);
}

static const nb_test tests[] = {
    {"alloc_release", test_alloc_release},
    {"capacity", test_capacity},
    {"line", test_line},
    {"bytes_per_token", test_bytes_per_token},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

/* The shared-memory planner (tools/tile_plan.h): byte sums of known tiles, the seeds'
 * 128x256x128 FP4 verdict on sm_120, and the refusal message. Run: build/tests/test_tile_plan */
#include "nbtest.h"
#include "ops/cuda/moe.h"
#include "tools/tile_plan.h"

static void test_sums(void)
{
    NB_CHECK(nb_tile_smem_limit(90) == 232448);
    NB_CHECK(nb_tile_smem_limit(120) == 101376);
    NB_CHECK(nb_tile_smem_limit(75) == 0);
    /* FP4 128x256x128: A 8 KiB + B 16 KiB + scales (128+256)*128/16 = 3 KiB per stage; the
     * BF16 output staging is 128*256*2 = 64 KiB. */
    nb_tile_config c = {"t", 128, 256, 128, 0.5, 0.5, 16, 1, NB_EPI_BF16, 0};
    nb_tile_budget b = nb_tile_plan(&c);
    NB_CHECK(b.stage == 27648);
    NB_CHECK(b.epilogue == 65536);
    NB_CHECK(b.total == 27648 + 65536 + 16);
    NB_CHECK_OK(nb_tile_check(&c, 120)); /* one stage fits 99 KiB ... */
    c.stages = 2;
    NB_CHECK_STATUS(nb_tile_check(&c, 120), NB_ERR_UNSUPPORTED); /* ... a pipeline does not */
    NB_CHECK(strstr(nb_last_error(), "101376") != NULL);
    NB_CHECK_OK(nb_tile_check(&c, 90));
    c.epi = NB_EPI_F32;
    NB_CHECK(nb_tile_plan(&c).epilogue == 131072);
    NB_CHECK_STATUS(nb_tile_check(&c, 121), NB_ERR_INVALID_ARG);
    /* The wgmma kernel: stages of 64 tokens x 128 k x 2 bytes + 8 warps x (2 KiB codes + 512 B
     * scales), 4 of them + 2 x 32 KiB of expanded weights, or 5; + 1 KiB alignment + 64 row
     * offsets + 2 item slots + the down epilogue's column table (128 x (token, weight)). Both
     * fit sm_90's 227 KiB, neither sm_120's 99 KiB. */
    NB_CHECK(NB_MOE_WG_COLTAB_BYTES == 1024);
    NB_CHECK(nb_moe_wg_smem_total(64, 1) == 4 * (16384 + 20480) + 65536 + 1024 + 512 + 8 + 1024);
    NB_CHECK(nb_moe_wg_smem_total(64, 0) == 5 * (16384 + 20480) + 1024 + 512 + 8 + 1024);
    NB_CHECK(nb_moe_wg_smem_total(64, 1) <= nb_tile_smem_limit(90));
    NB_CHECK(nb_moe_wg_smem_total(64, 0) > nb_tile_smem_limit(120));
    /* Its 16-warp blocks: 4 stages of tokens + 16 warps x 2.5 KiB; even 64-token tiles fit
     * sm_90 (226.5 KiB), none sm_120. */
    NB_CHECK(nb_moe_wg16_smem_total(48) == 4 * (12288 + 40960) + 1024 + 384 + 8 + 1024);
    NB_CHECK(nb_moe_wg16_smem_total(64) == 4 * (16384 + 40960) + 1024 + 512 + 8 + 1024);
    NB_CHECK(nb_moe_wg16_smem_total(64) <= nb_tile_smem_limit(90));
    NB_CHECK(nb_moe_wg16_smem_total(16) > nb_tile_smem_limit(120));
    /* The wide form: 4 stages of 128 tokens + 16 warps x 1.25 KiB (one row tile each): 211 KiB. */
    NB_CHECK(nb_moe_wgw_smem_total(NB_MOE_WG_WIDE_TILE) == 4 * (32768 + 20480) + 1024 + 1024 + 8 + 1024);
    NB_CHECK(nb_moe_wgw_smem_total(NB_MOE_WG_WIDE_TILE) <= nb_tile_smem_limit(90));
}

static void test_table(void)
{
    FILE *f = tmpfile();
    NB_CHECK(f != NULL);
    if (!f) return;
    NB_CHECK_OK(nb_tile_print_table(f, 120));
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    NB_CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    NB_CHECK(strstr(buf, "unusable here") != NULL);
    NB_CHECK(strstr(buf, "moe stream (8 tokens)") != NULL);
    NB_CHECK(strstr(buf, "moe wgmma, A in smem") != NULL);
    NB_CHECK(strstr(buf, "moe wgmma 16 warps") != NULL);
    NB_CHECK(strstr(buf, "moe wgmma 16 warps, wide") != NULL);
    free(buf);
    fclose(f);
    NB_CHECK_STATUS(nb_tile_print_table(stdout, 7), NB_ERR_INVALID_ARG);
}

static const nb_test tests[] = {{"sums", test_sums}, {"table", test_table}};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

/* Tile / shared-memory planner (tools/tile_plan.h). Exercise: nibble plan-tiles --sm 120. */
#include "tools/tile_plan.h"

#include <math.h>

#include "base/error.h"

/* Included for nb_moe_smem_bytes (static inline arithmetic: no CUDA needed). */
#include "ops/cuda/moe.h"

size_t nb_tile_smem_limit(int sm)
{
    switch (sm) {
    case 90:
    case 100: return 232448; /* 227 KiB opt-in per block (H100/H200, B200) */
    case 120: return 101376; /* 99 KiB (RTX PRO 6000 / RTX 50xx Blackwell) */
    default: return 0;
    }
}

nb_tile_budget nb_tile_plan(const nb_tile_config *c)
{
    nb_tile_budget b = {0, 0, 0, 0, 0};
    double a = (double)c->m * c->k * c->a_bytes_per_elem, bb = (double)c->n * c->k * c->b_bytes_per_elem;
    double sf = c->scale_vec ? (double)(c->m + c->n) * c->k / c->scale_vec : 0.0; /* one byte each */
    b.stage = (size_t)ceil(a + bb + sf);
    b.mainloop = b.stage * (size_t)c->stages;
    b.barriers = (size_t)c->stages * 16; /* a full and an empty mbarrier per stage */
    b.epilogue = c->epi == NB_EPI_BF16 ? (size_t)c->m * c->n * 2 : c->epi == NB_EPI_F32 ? (size_t)c->m * c->n * 4 : 0;
    b.total = b.mainloop + b.barriers + b.epilogue + c->extra;
    return b;
}

nb_status nb_tile_check(const nb_tile_config *c, int sm)
{
    size_t lim = nb_tile_smem_limit(sm);
    if (!lim) return nb_error(NB_ERR_INVALID_ARG, "plan-tiles: unknown sm %d (90, 100 or 120)", sm);
    nb_tile_budget b = nb_tile_plan(c);
    if (b.total > lim)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "tile %s (%dx%dx%d, %d stages): %zu bytes of shared memory > %zu allowed per block on sm_%d",
                        c->name, c->m, c->n, c->k, c->stages, b.total, lim, sm);
    return NB_OK;
}

static const char *epi_name(nb_tile_epilogue e)
{
    return e == NB_EPI_BF16 ? "bf16" : e == NB_EPI_F32 ? "f32" : "regs";
}

static void row(FILE *f, const nb_tile_config *c, size_t lim)
{
    nb_tile_budget b = nb_tile_plan(c);
    fprintf(f, "  %-26s %4dx%-4dx%-4d %6d %5s %9.1f %9.1f %8.1f %9.1f  %5.0f%%  %s\n", c->name, c->m, c->n, c->k,
            c->stages, epi_name(c->epi), b.stage / 1024.0, b.mainloop / 1024.0, b.epilogue / 1024.0,
            b.total / 1024.0, 100.0 * (double)b.total / (double)lim, b.total <= lim ? "fits" : "DOES NOT FIT");
}

nb_status nb_tile_print_table(FILE *f, int sm)
{
    size_t lim = nb_tile_smem_limit(sm);
    if (!lim) return nb_error(NB_ERR_INVALID_ARG, "plan-tiles: unknown sm %d (90, 100 or 120)", sm);
    fprintf(f, "shared memory per block on sm_%d: %zu bytes (%.0f KiB) opt-in limit\n\n", sm, lim, lim / 1024.0);
    fprintf(f, "  %-26s %-14s %6s %5s %9s %9s %8s %9s  %6s\n", "config", "MxNxK", "stages", "epi", "stage KiB",
            "main KiB", "epi KiB", "total KiB", "limit");

    /* nibble's MoE kernels: no staged main loop (operands go global -> registers); shared
     * memory holds the split-K partial sums only. m = weight rows, n = tokens per tile. */
    fprintf(f, "nibble MoE kernels (ops/cuda/moe_ffn.cu, moe_wgmma.cu)\n");
    const int ntv[4] = {1, 2, NB_MOE_NT_MMA, 2 * NB_MOE_NT_MMA};
    const char *names[4] = {"moe stream (8 tokens)", "moe stream (16 tokens)", "moe mma (32 tokens)",
                            "moe mma (64 tokens)"};
    for (int r = 0; r < 4; r++) {
        /* each warp: two 16-row tiles (gate+up, or two of down), K split over the block */
        nb_tile_config c = {names[r], 32, 8 * ntv[r], 64, 0.5, 2.0, 16, 0, NB_EPI_NONE, nb_moe_smem_bytes(ntv[r], 1)};
        row(f, &c, lim);
    }

    /* The wgmma kernel (ops/cuda/moe_wgmma.cu): a ring of 128-wide k-slices of the token tile
     * (BF16) and the block's NVFP4 codes + scales; the weights are expanded in registers
     * (wgmma's A from registers). The whole block's shared memory, as the launcher checks it.
     * m = weight rows per block (8 warps x 2 row tiles x 16). */
    nb_tile_config wg = {"moe wgmma, A in smem", 16 * 2 * NB_MOE_WG_WARPS, NB_MOE_WG_TILE, 128, 0.5625, 2.0, 16,
                         0, NB_EPI_NONE, nb_moe_wg_smem_total(NB_MOE_WG_TILE, 1)};
    row(f, &wg, lim);
    wg.name = "moe wgmma, A in regs";
    wg.extra = nb_moe_wg_smem_total(NB_MOE_WG_TILE, 0);
    row(f, &wg, lim);
    /* Its 16-warp blocks (4 stages), per token-tile width; m = 16 warps x 2 row tiles x 16. */
    for (int r = 0; r < 4; r++) {
        nb_tile_config c = {"moe wgmma 16 warps", 16 * 2 * 16, 16 * (r + 1), 128, 0.5625, 2.0, 16, 0, NB_EPI_NONE,
                            nb_moe_wg16_smem_total(16 * (r + 1))};
        row(f, &c, lim);
    }
    /* Their wide form (one row tile per warp, tiles of up to 128 tokens); m = 16 warps x 16. */
    nb_tile_config wide = {"moe wgmma 16 warps, wide", 16 * 16, NB_MOE_WG_WIDE_TILE, 128, 0.5625, 2.0, 16, 0,
                           NB_EPI_NONE, nb_moe_wgw_smem_total(NB_MOE_WG_WIDE_TILE)};
    row(f, &wide, lim);

    /* Block-scaled FP4 x FP4 tiles (NVFP4, 16-element scale vectors), as CUTLASS's SM100/SM120
     * grouped GEMMs lay them out: the seeds' candidates. */
    fprintf(f, "block-scaled FP4 tensor-core tiles (A, B FP4 + E4M3 scales per 16 along K)\n");
    const int shapes[][3] = {{128, 128, 128}, {128, 128, 256}, {128, 256, 128}, {256, 128, 128}};
    const nb_tile_epilogue epis[3] = {NB_EPI_NONE, NB_EPI_BF16, NB_EPI_F32};
    for (size_t s = 0; s < NB_ARRAY_LEN(shapes); s++)
        for (int e = 0; e < 3; e++)
            for (int st = 1; st <= 4; st++) {
                nb_tile_config c = {"fp4 block-scaled", shapes[s][0], shapes[s][1], shapes[s][2], 0.5, 0.5, 16, st,
                                    epis[e], 0};
                row(f, &c, lim);
            }

    /* W4A16 on Hopper (what a wgmma version of the mma regime would stage): FP4 weights
     * expanded to BF16 in shared memory for wgmma's B operand, BF16 activations. */
    fprintf(f, "W4A16 wgmma candidates (weights staged as FP4 + a BF16 copy, BF16 tokens)\n");
    const int w4[][3] = {{128, 128, 64}, {128, 256, 64}, {256, 128, 64}};
    for (size_t s = 0; s < NB_ARRAY_LEN(w4); s++)
        for (int st = 2; st <= 6; st += 2) {
            /* per stage: FP4 weights + scales (0.5625 B) plus their BF16 expansion (2 B) */
            nb_tile_config c = {"w4a16 wgmma", w4[s][0], w4[s][1], w4[s][2], 2.5625, 2.0, 0, st, NB_EPI_NONE, 0};
            row(f, &c, lim);
        }

    /* The seeds' verdict, recomputed. */
    nb_tile_config big = {"fp4 128x256x128", 128, 256, 128, 0.5, 0.5, 16, 1, NB_EPI_BF16, 0};
    nb_tile_budget one = nb_tile_plan(&big);
    big.stages = 2;
    nb_tile_budget two = nb_tile_plan(&big);
    big.epi = NB_EPI_F32;
    nb_tile_budget fin = nb_tile_plan(&big);
    fprintf(f,
            "\nFP4 128x256x128 on sm_%d: one stage of A+B+scales is %.1f KiB; the BF16 output staging alone is "
            "%.1f KiB.\n  1 stage + BF16 epilogue = %.1f KiB (%s), 2 stages + BF16 = %.1f KiB (%s), "
            "2 stages + F32 finalize = %.1f KiB (%s).\n",
            sm, one.stage / 1024.0, one.epilogue / 1024.0, one.total / 1024.0, one.total <= lim ? "fits" : "does not fit",
            two.total / 1024.0, two.total <= lim ? "fits" : "does not fit", fin.total / 1024.0,
            fin.total <= lim ? "fits" : "does not fit");
    fprintf(f, "  A pipelined main loop needs >= 2 stages, so %s.\n",
            two.total <= lim ? "the tile is usable here" : "the tile is unusable here: the epilogue staging leaves no room");
    return NB_OK;
}

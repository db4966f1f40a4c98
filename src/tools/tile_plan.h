/* Tile / shared-memory planner: what one GEMM block's shared memory costs (main-loop
 * stages + epilogue staging + pipeline barriers) against a device's opt-in limit per block.
 * Covers nibble's own MoE kernels (ops/cuda/moe.h) and the classic block-scaled
 * tensor-core tile family (CUTLASS-style: A, B and their scale factors per stage), so the
 * seeds' "a 128x256x128 FP4 tile cannot fit in 99 KB on SM120" is a computed row, not a
 * memory. `nibble plan-tiles --sm 90|100|120` prints the table; tests/cuda_moe/test_tile_plan.c
 * checks the sums. */
#ifndef NB_TOOLS_TILE_PLAN_H
#define NB_TOOLS_TILE_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "nibble.h"

/* Opt-in shared memory per block, bytes: 232448 (227 KiB) on sm_90 / sm_100, 101376
 * (99 KiB) on sm_120. 0 for an architecture the planner does not know. */
size_t nb_tile_smem_limit(int sm);

typedef enum nb_tile_epilogue {
    NB_EPI_NONE = 0,   /* accumulators leave from registers (nibble's MoE kernels) */
    NB_EPI_BF16,       /* the output tile staged in shared memory as BF16 (M*N*2) */
    NB_EPI_F32,        /* staged as F32 (M*N*4): a "finalize" epilogue that reduces in place */
} nb_tile_epilogue;

typedef struct nb_tile_config {
    const char *name;
    int m, n, k;          /* block tile */
    double a_bytes_per_elem, b_bytes_per_elem; /* 0.5 FP4, 1 FP8, 2 BF16 */
    int scale_vec;        /* elements per scale factor along K (16 NVFP4, 32 MXFP4), 0 none */
    int stages;
    nb_tile_epilogue epi;
    size_t extra;         /* anything else the kernel keeps in shared memory */
} nb_tile_config;

typedef struct nb_tile_budget {
    size_t stage, mainloop, epilogue, barriers, total;
} nb_tile_budget;

/* The shared memory of one block of `c`. */
nb_tile_budget nb_tile_plan(const nb_tile_config *c);

/* NB_OK when `c` fits the opt-in limit of sm; NB_ERR_UNSUPPORTED naming the config, its
 * total and the limit otherwise; NB_ERR_INVALID_ARG for an unknown sm. */
nb_status nb_tile_check(const nb_tile_config *c, int sm);

/* Print every configuration nibble knows (its MoE kernels, then the block-scaled family at
 * 1..4 stages and each epilogue) against sm's limit, and the seeds' 128x256x128 verdict. */
nb_status nb_tile_print_table(FILE *f, int sm);

#endif

// Host-side choices of the wgmma MoE kernel (ops/cuda/moe_wgmma.cu) that its caller
// (moe_ffn.cu) needs before launching it: the token-tile width the routing kernel cuts.
// C++ (nvcc) only, like moe_dev.h. Exercised by tests/cuda_moe/test_moe.c (kernel "wgmma")
// and nibble bench-moe --kernel wgmma.
#ifndef NB_OPS_CUDA_MOE_WGMMA_H
#define NB_OPS_CUDA_MOE_WGMMA_H

// Tokens per tile (16, 32, 48, 64, or NB_MOE_WG_WIDE_TILE: the wide form) for a step with
// `tokens_per_expert` slots per expert on average (`slots` in all), of experts with these
// hidden and inter sizes; moe_launch_wg must then be called with this nmax. NIBBLE_MOE_WG=old
// (or NIBBLE_MOE_WG_A=smem) gives the second session's 64; NIBBLE_MOE_WG_N forces a width;
// NIBBLE_MOE_WG_WIDE=0|1|2 the wide form never / from 52 tokens per expert and 4 waves of
// items / always.
// NIBBLE_MOE_WG_N8=1 (instruction widths in steps of 8 per tile) leaves the tile width as is.
int moe_wg_tile_tokens(double tokens_per_expert, int slots, int hidden, int inter);

#endif

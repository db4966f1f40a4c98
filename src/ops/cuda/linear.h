/* Knobs of the CUDA linear layer (ops/cuda/linear.cu, linear_gemv.cu) for tests and the
 * lab (`nibble bench-linear`): which GEMV shape runs, how many BF16 terms the cuBLASLt path
 * splits activations into. C-only; the op itself is nb_op_linear (ops.h).
 *
 * Paths, read top to bottom (nb_cuda_linear_path_name names the one a call takes):
 *   The MLP's gate and up at 3 <= T <= 16 when both are BF16 and together at least
 *     NB_CUDA_MLP_FUSED_MIN_MB: one launch of the stream-K skinny GEMM (linear_sk.cu) with
 *     SiLU(gate) * up in its epilogue (every warp of one full wave streams an equal share of
 *     (tile, 32-K step) units; partial tiles summed in warp order by the last warp to arrive;
 *     two BF16 activation terms), then down on the ladder below. Plain linears do not take
 *     that kernel by default (measured slower than the paths below: bench/RESULTS.md);
 *     NIBBLE_CUDA_LINEAR_SK=1 routes them to it (3..16 tokens, and 1-2 tokens with three terms
 *     for weights up to NB_CUDA_LINEAR_SK_SMALL_MB), 2 everywhere it runs, 0 never (not even
 *     the MLP pair: the ladder before it).
 *   Only when NIBBLE_CUDA_LINEAR_MMR=1|3: the register-fed tensor-core kernel (linear_mmr.cu)
 *     for BF16 at 1..16 (3..16) tokens; measured slower than the paths below on every GLM-5
 *     shape (bench/RESULTS.md, fourth session), so off.
 *   BF16 weights (16-byte aligned rows, K a multiple of 32) at 3 <= T <= 16 (<= 64 when the
 *     weight has at most 1024 rows): the tensor-core skinny GEMM (linear_mma.cu):
 *     weights as mma.sync A operands straight from global memory, activations as two BF16
 *     terms (hi + lo, ~16 mantissa bits: within the float32 tolerance; one term on request,
 *     NIBBLE_CUDA_LINEAR_MMA_TERMS=1), split-K.
 *   T <= NB_CUDA_LINEAR_GEMV_MAX_TOKENS: GEMV, float32 products, the CPU op's arithmetic.
 *     BF16 / NVFP4 rows that are 16-byte aligned run the vector GEMV: each lane loads 16
 *     bytes per row per step (8 BF16 or 32 NVFP4 weights), several steps in flight, R rows
 *     per warp sharing each activation load (R grows with T; 4 at 1-2 tokens on BF16 weights
 *     of more than 1024 rows, NIBBLE_CUDA_GEMV_R4), K split over W warps of a
 *     block when there are too few rows to fill the GPU (and from 3 tokens, so that each
 *     warp's share of the activations stays in L1), and NVFP4 activations staged per K
 *     tile through shared memory. Other formats/layouts: the generic one-warp-per-row kernel.
 *   More tokens: cuBLASLt BF16. Activations are one BF16 term, or two (hi + lo, about 16
 *     mantissa bits, twice the tensor work) for weights flagged NB_WEIGHT_FEEDS_TOPK.
 *     Weights not stored as BF16 are expanded to BF16 once and cached when the weight is
 *     NB_WEIGHT_RESIDENT and device memory allows, else expanded into scratch per call.
 * The GEMV, mma, mmr kernels, the mma split-K sum and the MLP's SiLU pass are launched as
 * programmatic dependents (PDL): each loads its first weights before it waits for the kernel
 * ahead (NIBBLE_CUDA_LINEAR_PDL=0 launches them plainly). */
#ifndef NB_OPS_CUDA_LINEAR_H
#define NB_OPS_CUDA_LINEAR_H

#include <stdint.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMV plan for one call: rows per warp, K-split warps per row group, tokens per pass
 * (the compile-time register tile), 0 in `vector` when the generic kernel runs. */
typedef struct nb_cuda_gemv_plan {
    int vector, rows_per_warp, ksplit, tile_tokens;
    int staged; /* activations staged through shared memory per K tile */
} nb_cuda_gemv_plan;
nb_cuda_gemv_plan nb_cuda_gemv_plan_for(const nb_weight *w, int64_t T, int sm_count);

/* Overrides for A/B runs and tests; 0 restores the automatic choice.
 * ksplit: 1, 2, 4 or 8 warps per row group (vector GEMV only).
 * terms: 1 or 2 BF16 activation terms in the cuBLASLt path, for every weight. */
void nb_cuda_linear_force_ksplit(int ksplit);
/* staged: 1 never stage activations through shared memory, 2 always (when it fits). */
void nb_cuda_linear_force_staged(int staged);
void nb_cuda_linear_force_terms(int terms);
/* Two terms as one GEMM of 2T rows ([hi; lo] x W^T into F32 scratch, beta 0) and a pass that
 * adds the halves (and bias, and y when accumulating) instead of two GEMMs, the second with
 * beta 1. Measured no faster (as fast on [2784 x 6144], up to 26% slower elsewhere at 616-1000
 * tokens, bench/RESULTS.md): kept for A/B runs. 1 on, 0 off, -1 NIBBLE_CUDA_LINEAR_STACK
 * ("1" on; default off). */
void nb_cuda_linear_force_stack(int on);

/* The tensor-core skinny GEMM for BF16 weights (linear_mma.cu), supported for 1..64 tokens.
 * Taken automatically from MIN_TOKENS to AUTO_MAX_TOKENS (it beat the float32 GEMV, which is
 * instruction-bound there, on every GLM-5 shape from 3 tokens), and up to MAX_TOKENS for
 * weights of at most SMALL_N rows (kv_a [576 x 6144] at 32 and 64 tokens beat cuBLASLt;
 * larger weights ran faster on cuBLASLt's one-term BF16 GEMM there): bench/RESULTS.md. */
#define NB_CUDA_LINEAR_MMA_MIN_TOKENS 3
#define NB_CUDA_LINEAR_MMA_AUTO_MAX_TOKENS 16
#define NB_CUDA_LINEAR_MMA_MAX_TOKENS 64
#define NB_CUDA_LINEAR_MMA_SMALL_N 1024

/* The launch plan of one call: token_tiles n8 tiles (T <= 8 * token_tiles), terms BF16
 * activation terms, warps per block (16 rows each), blocks_n along the rows, ksplit K ranges
 * of kr elements each (ksplit > 1: partial sums in scratch, a second kernel adds them), smem
 * dynamic shared bytes. */
typedef struct nb_cuda_mma_plan {
    int token_tiles, terms, warps, blocks_n, ksplit;
    int64_t kr;
    size_t smem;
} nb_cuda_mma_plan;
nb_cuda_mma_plan nb_cuda_mma_plan_for(const nb_weight *w, int64_t T, int sm_count);

/* Whether a call goes to the skinny GEMM: a BF16 weight with 16-byte aligned rows and K % 32
 * == 0, activations (x may be NULL: not checked) 16-byte aligned with ldx % 4 == 0, and T in
 * the automatic range above (1..NB_CUDA_LINEAR_MMA_MAX_TOKENS when forced). */
int nb_cuda_linear_mma_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
/* mma: 0 automatic, 1 never (the GEMV / cuBLASLt ladder as before it), 2 for every T in
 * 1..NB_CUDA_LINEAR_MMA_MAX_TOKENS it supports. terms: 0 automatic (2), 1 (BF16 activations,
 * the BF16 bound 1e-2; NB_WEIGHT_FEEDS_TOPK weights keep 2), 2 or 3 (exact float32
 * activations); NIBBLE_CUDA_LINEAR_MMA_TERMS=1|2|3 does the same from the environment. */
#ifndef NB_CUDA_LINEAR_MMA_TERMS_DEFAULT
#define NB_CUDA_LINEAR_MMA_TERMS_DEFAULT 2
#endif
void nb_cuda_linear_force_mma(int mode);
void nb_cuda_linear_force_mma_terms(int terms);

/* The path a call with these arguments takes: "sk", "mma", "gemv" or "lt" (NIBBLE_CUDA_LINEAR=
 * gemv|lt|mma forces one; mma falls back to the ladder where it cannot run). */
const char *nb_cuda_linear_path_name(const nb_weight *w, const float *x, int64_t ldx, int64_t T);

/* The stream-K skinny GEMM (linear_sk.cu), 1..SK_MAX_TOKENS tokens. */
#define NB_CUDA_LINEAR_SK_MAX_TOKENS 16
#define NB_CUDA_LINEAR_SK_SMALL_MB 96 /* the sk ladder at 1-2 tokens: weights up to this size (MiB) */
#define NB_CUDA_MLP_FUSED_MIN_MB 128  /* default policy: fused gate+up for pairs of at least this size */

/* The launch of one call: token_tiles n8 tiles, terms BF16 activation terms, tile_rows rows
 * per tile (32; 16 of gate and of up for the pair), tiles of them, warps in the grid, each
 * owning about steps_per_warp (tile, 32-K step) units. */
typedef struct nb_cuda_sk_plan {
    int token_tiles, terms, tile_rows;
    int64_t tiles, warps, steps_per_warp;
} nb_cuda_sk_plan;
nb_cuda_sk_plan nb_cuda_sk_plan_for(const nb_weight *w, int64_t T, int pair, int sm_count);
/* Whether the kernel can run this call (BF16, K % 32 == 0, 16-byte aligned rows and
 * activations with ldx % 4 == 0, T <= NB_CUDA_LINEAR_SK_MAX_TOKENS), and whether the ladder
 * takes it (x may be NULL: not checked). */
int nb_cuda_linear_sk_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
int nb_cuda_linear_sk_should(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
/* mode: 0 the environment's choice (NIBBLE_CUDA_LINEAR_SK, default policy above), 1 never
 * (the ladder before it), 2 every call it supports, 3 the sk ladder (as =1). warps: the grid's
 * warp count (tests: ranges that split tiles in every way), 0 automatic. */
void nb_cuda_linear_force_sk(int mode);
void nb_cuda_linear_force_sk_warps(int warps);
/* The MLP's fused gate+up launch: -1 automatic (on unless NIBBLE_CUDA_MLP_FUSED=0), 0 off
 * (gate and up as two linears and a SiLU pass), 1 on. Where it runs: default policy, pairs of
 * >= NB_CUDA_MLP_FUSED_MIN_MB at 3..16 tokens; sk ladder, where it would take a weight of
 * both matrices' size; never with mode 1. */
void nb_cuda_mlp_force_fused(int on);
int nb_cuda_mlp_fused_on(void);
int nb_cuda_gate_up_sk_can(const nb_weight *gate, const nb_weight *up, const float *x, int64_t ldx, int64_t T);

/* The register-fed tensor-core linear (linear_mmr.cu) for BF16 weights at 1..16 tokens: one
 * 16-row tile per block, kw warps along K, each keeping the next group of `unroll` 32-K steps
 * of weights in flight while it multiplies the current one; activations as `terms` BF16 terms
 * (1: BF16 activations, the BF16 bound 1e-2; 2: hi + lo, the float32 bound; 2 at 1-2 tokens and
 * for NB_WEIGHT_FEEDS_TOPK weights). NIBBLE_CUDA_LINEAR_MMR: 0 off, 1 at 1..16 tokens, 3 at
 * 3..16 tokens (before the mma kernel and the GEMV on the ladder; after the MLP's fused
 * gate+up); NIBBLE_CUDA_LINEAR_MMR_TERMS=1|2, _W=1..16, _U=2|4 override the plan. */
#ifndef NB_CUDA_LINEAR_MMR_DEFAULT
#define NB_CUDA_LINEAR_MMR_DEFAULT 0
#endif
typedef struct nb_cuda_mmr_plan {
    int token_tiles, terms, kw, unroll;
    int64_t tiles;
} nb_cuda_mmr_plan;
nb_cuda_mmr_plan nb_cuda_mmr_plan_for(const nb_weight *w, int64_t T, int sm_count);
int nb_cuda_linear_mmr_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
int nb_cuda_linear_mmr_should(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
/* mode: -1 the environment's choice, else as NIBBLE_CUDA_LINEAR_MMR (0, 1, 3); 2 counts as 1.
 * kw, terms, unroll: 0 the plan's choice. */
void nb_cuda_linear_force_mmr(int mode);
void nb_cuda_linear_force_mmr_kw(int kw);
void nb_cuda_linear_force_mmr_terms(int terms);
void nb_cuda_linear_force_mmr_unroll(int unroll);

/* Programmatic dependent launch of the linear kernels (GEMV, mma, mmr and the mma split-K
 * sum): each loads its first weights, then waits for the kernel ahead (ops/cuda/pdl.cuh), so
 * weight streaming starts during the previous kernel's tail. On unless NIBBLE_CUDA_LINEAR_PDL=0
 * or NIBBLE_CUDA_PDL=0; force: -1 the environment, 0 off, 1 on. */
#ifndef NB_CUDA_LINEAR_PDL_DEFAULT
#define NB_CUDA_LINEAR_PDL_DEFAULT 1
#endif
int nb_cuda_linear_pdl_on(void);
void nb_cuda_linear_force_pdl(int on);
/* The vector GEMV, second version (linear_gemv.cu V = 1): PDL-aware (first weights before the
 * wait) and the BF16 1-2 token instances held to 64 registers (4 blocks of 8 warps per SM; the
 * 2-token instance took 73 registers, 3 blocks). NIBBLE_CUDA_GEMV_V2=0 the previous kernel;
 * force: -1 the environment, 0 previous, 1 second version. */
#ifndef NB_CUDA_GEMV_V2_DEFAULT
#define NB_CUDA_GEMV_V2_DEFAULT 1
#endif
void nb_cuda_linear_force_gemv_v2(int on);
/* With the second version, BF16 at up to max_tokens (0, 1, 2) tokens: four rows per warp and
 * two steps in flight (instead of two and four), so each activation load serves twice the
 * rows. NIBBLE_CUDA_GEMV_R4=0|1|2; force: -1 the environment, else max_tokens. */
#ifndef NB_CUDA_GEMV_R4_DEFAULT
#define NB_CUDA_GEMV_R4_DEFAULT 2
#endif
void nb_cuda_linear_force_gemv_r4(int max_tokens);

/* The MLP with gate and up adjacent (one [2I, H] linear): down computes SiLU(gate) * up as it
 * reads its activations instead of a separate pass. NIBBLE_CUDA_MLP_SILU_FUSED=0 off, 1 on the
 * vector GEMV v2 and the mma kernel, 2 on the mma kernel only (other routes keep the pass).
 * Default off: with one mma term it measured 35 us faster per 8-layer step at batch 10 and the
 * GEMV form slower at 1-2 tokens; with the default two terms not measured. force: -1 the
 * environment, else the mode. */
#ifndef NB_CUDA_MLP_SILU_FUSED_DEFAULT
#define NB_CUDA_MLP_SILU_FUSED_DEFAULT 0
#endif
void nb_cuda_mlp_force_silu_fused(int mode);

/* BF16 copies cached for NB_WEIGHT_RESIDENT weights on a context: count and bytes. The
 * cache grows while free device memory stays above NIBBLE_CUDA_LINEAR_CACHE_RESERVE_MB
 * (default 8192) and its total stays under NIBBLE_CUDA_LINEAR_CACHE_MB (default: no cap;
 * 0 disables it). Entries are freed with the context. */
void nb_cuda_linear_cache_stats(nb_ops_ctx *ctx, int *entries, size_t *bytes);
/* The context's cuBLASLt handle: heuristic queries and warm-up launches so far
 * (gemm_lt.h, nb_cuda_gemm_set_warm); warm: 1 / 0 sets the warm-up, -1 leaves it. */
void nb_cuda_linear_gemm_stats(nb_ops_ctx *ctx, int warm, long *queries, long *warm_launches);

/* The adjacent gate|up pair's SiLU pass (NIBBLE_CUDA_MLP_SILU4): 2 four pairs per thread and,
 * when the down projection runs on cuBLASLt with one term, BF16 straight into its input; 1 four
 * pairs per thread, F32; 0 one pair per thread; -1 the variable or the default (2). */
void nb_cuda_mlp_force_silu4(int mode);

/* Rows of float32 activations to BF16 on a stream (a cudaStream_t): hi[t][j] = bf16(x[t][j]),
 * lo (NULL: none) the rounding remainder as a second term; dense [T][k] outputs. Four floats
 * per load where nb_cuda_to_bf16_vec says the strides and pointers allow. Used by the cuBLASLt
 * linear and the routed experts' input. */
int nb_cuda_to_bf16_vec(const float *x, int64_t ldx, int64_t k, const uint16_t *hi, const uint16_t *lo);
void nb_cuda_to_bf16(void *stream, const float *x, int64_t ldx, int64_t T, int64_t k, uint16_t *hi, uint16_t *lo);

#ifdef __cplusplus
}
#endif
#endif

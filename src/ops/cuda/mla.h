/* MLA on the GPU, internal to ops/cuda (the op itself is nb_cuda_mla_attention in
 * cuda_ops.h). The absorbed form in three steps:
 *   q_lat[h] = q_nope[h] . W_uk[h]            batched GEMM over heads (mla_gemm.cu)
 *   o_lat[h] = softmax(q.[latent|k_pe]) latent  one block per (token, 16 heads, KV split) (mla.cu),
 *                                              or (token, 32 heads, KV split) on tensor cores
 *   out[h]   = o_lat[h] . W_uv[h]^T             batched GEMM over heads (mla_gemm.cu)
 * kv_b ([n_heads * (nope + v), rank], per head nope rows of W_uk then v rows of W_uv) is kept
 * per layer in the form the GEMMs read, prepared once by nb_cuda_mla_register (cuda_ops.h),
 * or per call in scratch for an unregistered weight. */
#ifndef NB_OPS_CUDA_MLA_H
#define NB_OPS_CUDA_MLA_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kv_b as the GEMMs read it: dense [n, rank] BF16 (bf16 = 1) or F32, times alpha. */
typedef struct nb_cuda_mla_w {
    const void *key; /* the nb_weight's data pointer it was prepared from */
    void *w;
    int bf16, owned;
    float alpha;
} nb_cuda_mla_w;

/* The registered form of kv_b; else kv_b itself when dense BF16 / F32; else a form prepared
 * now (on the context's stream) in scratch slot `slot`, valid until that slot is reused. */
nb_status nb_cuda_mla_weights(nb_ops_ctx *ctx, const nb_weight *kv_b, int slot, nb_cuda_mla_w *out);

/* Column-major, cuBLAS terms, for b < batch: C_b[m, n] = alpha * op(A_b)[m, k] . B_b[k, n].
 * A is stored [m, k] (trans_a 0) or [k, m] (trans_a 1) with leading dimension lda; A and B
 * are BF16 (bf16 = 1) or F32, C is F32 (overwritten). Strides in elements between batches. */
nb_status nb_cuda_mla_gemm(nb_ops_ctx *ctx, int bf16, int trans_a, int m, int n, int k, const void *A, int64_t lda,
                           int64_t sa, const void *B, int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc,
                           int batch, float alpha);

/* Tokens per pass of nb_cuda_mla_attention: its per-head buffers (q_lat, o_lat, their BF16
 * terms: ~0.57 MB per token on GLM-5, ~0.6 GB at this many tokens) are sized for one tile,
 * so a long prefill step runs in tiles (a 1024-token tile still fills the GPU: 4096 blocks
 * on GLM-5). Decode batches up to this size, and every captured graph, are one pass. */
#define NB_CUDA_MLA_TOKEN_TILE 1024
/* Tests: a smaller tile (0: back to NB_CUDA_MLA_TOKEN_TILE). */
void nb_cuda_mla_force_token_tile(int tokens);

/* The attention step's kernel: float32 on CUDA cores, or BF16 mma.sync (q, the latent rows
 * and the probabilities rounded to BF16; scores, softmax and sums in F32; ~2e-3 relative to
 * the CPU op). NIBBLE_CUDA_MLA=f32 | mma in the environment forces one; otherwise (auto) the
 * tensor-core kernel runs for token counts at which the float32 kernel would not split the KV
 * rows (>= 33 tokens at 64 heads on 132 SMs), the float32 kernel below. */
#define NB_CUDA_MLA_F32 0
#define NB_CUDA_MLA_MMA 1
/* The decode kernel for many tokens (mla_decode.cu): all 64 heads of a token per block, so each
 * latent row is read from HBM once per token, the next chunks of rows on their way (bulk copies
 * into shared memory, L2 prefetch) while the current one is computed; BF16 mma.sync like
 * NB_CUDA_MLA_MMA (same error). Rank a multiple of 32 up to 512; NIBBLE_CUDA_MLA=dec forces it
 * (else mma where it does not take the shapes); automatic in place of the mma kernel (the token
 * counts at which that one ran; measured faster at 64, 256 and 1000 tokens, bench/RESULTS.md). */
#define NB_CUDA_MLA_DEC 2
/* Tests and timings: how the decode kernel copies pool rows into shared memory: 1 the bulk-copy
 * engine (cp.async.bulk completing on an mbarrier), 0 cp.async (anything else: back to
 * NIBBLE_CUDA_MLA_DEC_COPY=bulk|async, default bulk). Rows not 16-byte aligned take cp.async. */
void nb_cuda_mla_dec_force_copy(int bulk);
/* Tests and timings: force a kernel (anything else: back to the environment / automatic). */
void nb_cuda_mla_force_kernel(int kernel);
/* 1 when a call (or token tile) of n_tokens tokens with these dims runs the tensor-core kernel
 * (selected, and its shapes: rank a multiple of 32 up to 512), else 0 (float32 kernel). */
int nb_cuda_mla_uses_mma(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens);
/* Which attention kernel such a call runs: NB_CUDA_MLA_F32, _MMA or _DEC (nonzero: BF16). */
int nb_cuda_mla_kernel(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens);

#ifdef __cplusplus
}
#endif
#endif

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
/* The same with BF16 A and B and a BF16 C (each element the F32 sum rounded to nearest). */
nb_status nb_cuda_mla_gemm_c16(nb_ops_ctx *ctx, int trans_a, int m, int n, int k, const void *A, int64_t lda,
                               int64_t sa, const void *B, int64_t ldb, int64_t sb, uint16_t *C, int64_t ldc,
                               int64_t sc, int batch, float alpha);

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
/* The decode kernel for many tokens (mla_decode.cu; F32 pools only, mma on BF16 ones): all 64
 * heads of a token per block, so each
 * latent row is read from HBM once per token, the next chunks of rows on their way (bulk copies
 * into shared memory, L2 prefetch) while the current one is computed; BF16 mma.sync like
 * NB_CUDA_MLA_MMA (same error). Rank a multiple of 32 up to 512; NIBBLE_CUDA_MLA=dec forces it
 * (else mma where it does not take the shapes); automatic in place of the mma kernel (the token
 * counts at which that one ran; measured faster at 64, 256 and 1000 tokens, bench/RESULTS.md). */
#define NB_CUDA_MLA_DEC 2
/* The wgmma decode kernel (mla_wg.cu, sm_90a, rank 512 and rope 64 only): one block of a
 * producer warpgroup (float32 rows -> BF16 128-byte swizzled tiles in shared memory; BF16
 * pool rows copied there by cp.async, nb_cuda_mla_kernel_pool) and two
 * consumer warpgroups (S = q.rows^T and P.latent on wgmma, the online softmax in registers);
 * same error as NB_CUDA_MLA_DEC. NIBBLE_CUDA_MLA=wg forces it (dec where it does not take the
 * shapes, or a pool whose rows are not 16-byte aligned). */
#define NB_CUDA_MLA_WG 3
/* Tests and timings: the wg kernel's rows in flight per producer warp, 2 or 4 (anything else:
 * back to NIBBLE_CUDA_MLA_WG_RB=2|4, else the default in mla_wg.cu). F32 rows only: on BF16
 * rows every producer warp has its whole 16 rows of a chunk in flight by cp.async. */
void nb_cuda_mla_wg_force_rows(int rows);
/* Tests and timings: the wg kernel's grid, 1 persistent (one block per SM looping over the
 * (token, head group, split) items, the producer streaming the next item's rows while the
 * consumers finish the last) or 0 one block per item (anything else: back to
 * NIBBLE_CUDA_MLA_WG_PERSIST=0|1, else the default in mla_wg.cu). */
void nb_cuda_mla_wg_force_persist(int on);
/* The wg kernel's two consumer warpgroups splitting each chunk's scores by rows (each scores 32
 * of the 64 rows for all heads, the row maxima and P exchanged through shared memory; 1) or
 * each scoring all 64 (0). BF16 pool rows with the BF16 q and direct outputs only (the
 * automatic instance at 3+ tokens), and only where the opt-in shared memory holds its extra
 * 8.7 KB. NIBBLE_CUDA_MLA_WG_SHARE=0|1; unset: 1 where the op runs without KV splits (the
 * batch fills the GPU; WG_SHARE_AUTO in mla_wg.cu); nb_cuda_mla_wg_force_share for tests and
 * timings (0, 1; else back to the environment / automatic). */
void nb_cuda_mla_wg_force_share(int on);
/* Timings only: run only the steps of the GEMM path (not the small path) whose bits are set
 * (1 the q split and first GEMM, 2 the attention kernel, 4 the split merge, 8 the second GEMM
 * and the hi/lo sum; 0 or 15: all), so a graph of the op can be timed step by step; the
 * outputs are then meaningless. */
void nb_cuda_mla_force_gemm_steps(int mask);
/* The BF16 GEMM path's activations (q_nope into the first GEMM, o_lat into the second): two
 * BF16 terms hi + lo (the F32 value to ~2^-17), or one (hi only: ~2^-9, the same rounding the
 * attention kernels apply to q_lat, P and the rows; no lo rows, and the second GEMM writes the
 * output directly instead of through a sum kernel). NIBBLE_CUDA_MLA_TERMS=1|2 in the
 * environment, else one term where the attention kernel is NB_CUDA_MLA_DEC or _WG (their
 * q, rows and P are BF16 already; measured faster on the H200 at 64-1000 tokens, ~2.5e-3
 * against the CPU op instead of ~2e-3: bench/RESULTS.md, fourth session) and two elsewhere;
 * nb_cuda_mla_force_terms for tests (1, 2; else back to the environment / default). */
void nb_cuda_mla_force_terms(int terms);
/* The wg kernel's q (one BF16 term only): the first GEMM writes q_lat in BF16 and a small
 * kernel q_pe beside it ([H][T][r + rope], the rounding the kernel applied itself when it
 * loaded F32), so the kernel copies a token's q by cp.async while it finishes the previous
 * item (P.latent and the outputs) instead of loading and converting it in between.
 * NIBBLE_CUDA_MLA_QLAT16=0|1 (default NB_CUDA_MLA_QLAT16_DEFAULT);
 * nb_cuda_mla_force_qlat16 for tests and timings (0, 1; else back to the environment). */
void nb_cuda_mla_force_qlat16(int on);
#define NB_CUDA_MLA_QLAT16_DEFAULT 1
/* NIBBLE_CUDA_MLA_QFOLD=0|1: with the BF16 q, q_nope's split and q_pe's copy in one kernel
 * (k_mla_split_q4pe) instead of two (default NB_CUDA_MLA_QFOLD_DEFAULT). */
#define NB_CUDA_MLA_QFOLD_DEFAULT 1
/* With the BF16 q (and one term, no KV split): the wg kernel's outputs written through shared
 * memory (the last chunk's tile) and stored in whole 512-byte rows, instead of 4-byte stores
 * straight from the accumulators. NIBBLE_CUDA_MLA_WG_STAGE=0|1 (default
 * NB_CUDA_MLA_WG_STAGE_DEFAULT); nb_cuda_mla_wg_force_stage for tests (0, 1; else back). */
void nb_cuda_mla_wg_force_stage(int on);
#define NB_CUDA_MLA_WG_STAGE_DEFAULT 0
/* The wg kernel's producer prefetching rows into L2 (`cp.async.bulk.prefetch.L2`: an item's
 * first two chunks at its start, then the chunk after next; 1) or not (0, the default since the
 * nineteenth session: the op 3-11 % faster at context 192, 35-37 % at 2048 with 256-1000 tokens
 * on an H100; docs/cuda-backend.md): NIBBLE_CUDA_MLA_WG_PF (default NB_CUDA_MLA_WG_PF_DEFAULT);
 * nb_cuda_mla_wg_force_prefetch for tests (0, 1; else back). */
void nb_cuda_mla_wg_force_prefetch(int on);
#define NB_CUDA_MLA_WG_PF_DEFAULT 0
/* The same for the dec kernel (warp 6 prefetching the chunk after next into L2): 1, or 0 (the
 * default since the twentieth session: the op 1-4 % faster without at contexts 192 and 2048,
 * 64-1000 tokens, on an H100): NIBBLE_CUDA_MLA_DEC_PF; nb_cuda_mla_dec_force_prefetch for tests
 * (0, 1; else back). */
void nb_cuda_mla_dec_force_prefetch(int on);
#define NB_CUDA_MLA_DEC_PF_DEFAULT 0
/* Tests and timings: how the decode kernel copies pool rows into shared memory: 1 the bulk-copy
 * engine (cp.async.bulk completing on an mbarrier), 0 cp.async (anything else: back to
 * NIBBLE_CUDA_MLA_DEC_COPY=bulk|async, default bulk). Rows not 16-byte aligned take cp.async. */
void nb_cuda_mla_dec_force_copy(int bulk);
/* Tests and timings: force a kernel (anything else: back to the environment / automatic). */
void nb_cuda_mla_force_kernel(int kernel);
/* 1 when a call (or token tile) of n_tokens tokens with these dims runs the tensor-core kernel
 * (selected, and its shapes: rank a multiple of 32 up to 512), else 0 (float32 kernel). */
int nb_cuda_mla_uses_mma(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens);
/* Which attention kernel such a call runs on F32 pools: NB_CUDA_MLA_F32, _MMA, _DEC or _WG
 * (nonzero: BF16 arithmetic). */
int nb_cuda_mla_kernel(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens);
/* The same for F32 (pool_bf16 0) or BF16 pools (1, ops.h nb_op_mla_attention: the pool's
 * `--kv-cache-dtype bf16`). Every kernel but dec reads BF16 rows: the float32 kernel stages
 * them by cp.async and widens them in shared memory, mma copies them as they are, wg copies
 * them by cp.async straight into its swizzled tiles (no producer registers, no conversion);
 * where dec would run (automatic or forced) a BF16 pool runs mma. A pool whose rows are not
 * 16-byte aligned (BF16: or rank / rope not multiples of 8) runs mma instead of wg inside the
 * op (F32: dec), which this does not see. */
int nb_cuda_mla_kernel_pool(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens, int pool_bf16);
/* The same where the step attends to many positions (`long_ctx`: a live DSA selection, up to
 * index_topk positions per token, or the index's long_ctx hint, ops.h) or not. Automatic on
 * BF16 pools where the wgmma kernel takes the shapes: the float32 kernel for short steps of
 * 1..NB_CUDA_MLA_F32_MAX_TOKENS tokens, wg otherwise (measured, mla.cu); on F32 pools the
 * float32 kernel while tokens x head groups < SMs. */
int nb_cuda_mla_kernel_for(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens, int pool_bf16, int long_ctx);
/* Tests: the kernel (NB_CUDA_MLA_*) the op's last tile ran; -1 before any. */
int nb_cuda_mla_last_kernel(void);
#define NB_CUDA_MLA_F32_MAX_TOKENS 2

/* The small-batch path (mla_small.cu): at 1..NB_CUDA_MLA_SMALL_MAX tokens the two absorption
 * steps can be kernels of their own instead of the batched GEMMs: each reads kv_b once and uses
 * every weight element for all the tokens, with float32 activations and sums (no BF16 hi/lo
 * terms, so no split / sum kernels). The split merge is folded into the output step at up to
 * NB_CUDA_MLA_FOLD_MAX tokens, else k_mla_merge. Optionally (PDL) the attention kernel (float32)
 * and the output step are launched as programmatic dependents, so they start while the previous
 * grid drains (the output step prefetches its weights meanwhile): measured slower on the H200
 * (bench/RESULTS.md), so off unless asked for.
 * By default the path runs up to NB_CUDA_MLA_SMALL_DEFAULT tokens: on the H200 (GLM-5 shapes,
 * context 128 and 256) it beat the GEMM path at 1 and 2 tokens and lost from 4 up (its
 * absorption kernels take 12-14 us at 1-2 tokens against the GEMMs' 9, and 28 us at 10 against
 * 10; the win at 1-2 is the three launches it saves).
 * The environment: NIBBLE_CUDA_MLA_SMALL unset: up to NB_CUDA_MLA_SMALL_DEFAULT tokens; 0:
 * never (the GEMM path); N: up to N tokens. NIBBLE_CUDA_MLA_MERGE=fold | kernel forces the merge
 * form. NIBBLE_CUDA_MLA_PDL=1: programmatic dependent launches. */
/* pdl modes (NIBBLE_CUDA_MLA_PDL=0|1|2|3): NB_CUDA_MLA_PDL_OFF plain launches; _START the
 * attention and output steps launched early, each waiting at its start (the output step
 * prefetching W_uv into L2 meanwhile); _CHAIN all three steps launched early, each doing before
 * its wait only what no preceding kernel of the step writes: the input step loads its first
 * W_uk rows, the attention step looks up its first chunk's pool rows and copies those of
 * positions before the step's tokens (earlier steps wrote them; dense attention only), the
 * output step loads its whole W_uv slice into registers (BF16, rank <= 512); _EARLY the
 * _CHAIN kernels with plain launches (their waits are no-ops), for A/B timings. */
#define NB_CUDA_MLA_PDL_OFF 0
#define NB_CUDA_MLA_PDL_START 1
#define NB_CUDA_MLA_PDL_CHAIN 2
#define NB_CUDA_MLA_PDL_EARLY 3
#define NB_CUDA_MLA_SMALL_MAX 32
#define NB_CUDA_MLA_SMALL_DEFAULT 2
#define NB_CUDA_MLA_FOLD_MAX 4
#define NB_CUDA_MLA_MERGE_FOLD 0
#define NB_CUDA_MLA_MERGE_KERNEL 1
/* Tests and timings: up to max_tokens tokens (0: never; < 0: the environment); merge
 * NB_CUDA_MLA_MERGE_* (else automatic / the environment); pdl NB_CUDA_MLA_PDL_* (else the
 * environment). */
void nb_cuda_mla_force_small(int max_tokens, int merge, int pdl);
/* Timings only: run only the steps of the small path whose bits are set (1 input, 2 attention,
 * 4 split merge kernel, 8 output; 0 or 15: all), so a graph of the op can be timed step by
 * step. The outputs are then meaningless. */
void nb_cuda_mla_force_stages(int mask);
int nb_cuda_mla_stages(void);
/* 1 when a call (or token tile) of n_tokens tokens runs the small path with the kv_b form at w
 * (nb_cuda_mla_w.w: its 16-byte alignment counts; the rank a multiple of 8); sets *merge and
 * *pdl (either may be NULL) to the merge form and launch mode it runs with. A function of the
 * token count, dims and settings only, so a captured graph keeps its path. */
int nb_cuda_mla_uses_small(const nb_mla_dims *d, const void *w, int n_tokens, int *merge, int *pdl);
/* q_lat [H][T][r] F32 = alpha * q_nope[t, h, :] . W_uk[h] for the T = q->shape[0] tokens of q
 * ([T, H, nope + rope] F32 on the device). Enqueued on the context's stream (a plain launch
 * that lets the next grid launch early). */
nb_status nb_cuda_mla_small_in(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *w, const nb_tensor *q,
                               float *qlat);
nb_status nb_cuda_mla_small_in_pdl(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *w, const nb_tensor *q,
                                   float *qlat, int pdl);
/* out[t, h, :] (out [T, H, v] F32) = alpha * o_lat[h][t][:] . W_uv[h]^T, o_lat read from olat
 * ([H][T][r] normalized) when splits <= 1, else merged from the attention kernel's partials
 * part ([T][H][splits][2 + r]: m, l, unnormalized sum; an empty split has m = -inf). pdl
 * (NB_CUDA_MLA_PDL_*): launched as a programmatic dependent of the preceding grid (kv_b must
 * be ready before that grid started: it is read before the wait). nb_cuda_mla_small_in takes
 * the same modes through nb_cuda_mla_small_in_pdl (plain: 0). */
nb_status nb_cuda_mla_small_out(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *w, const float *olat,
                                const float *part, int splits, int pdl, nb_tensor *out);
/* The float32 attention kernel's heads per warp for the scores: 2 (8 warps per block) up to
 * NB_CUDA_MLA_F32_H2_MAX tokens, 4 (4 warps, the only form before 2026-11-30) above;
 * NIBBLE_CUDA_MLA_F32_HEADS=2|4 in the environment forces one, and so does this for tests and
 * timings (anything else: back to the environment / automatic). */
#define NB_CUDA_MLA_F32_H2_MAX 4
void nb_cuda_mla_force_f32_heads(int heads_per_warp);
/* The float32 attention kernel's heads per block: 16 (the form of before), or 8 (2 per warp) or
 * 4 (1 per warp) in 4 warps: more blocks over the SMs at a few tokens, each reading its chunk of
 * rows from shared memory fewer times. NB_CUDA_MLA_F32_G_DEFAULT up to NB_CUDA_MLA_F32_G_MAX
 * tokens, 16 above; NIBBLE_CUDA_MLA_F32_G=4|8|16 picks the count up to that many tokens
 * (NIBBLE_CUDA_MLA_F32_G_MAX=N: up to N), and this forces one at every token count for tests
 * and timings (anything else: back to the environment / automatic). Measured on the H200
 * (bench/RESULTS.md, GLM-5 shapes, context 192, graph): attention step 15.3 -> 9.8 us at one
 * token, 15.6 -> 13.0 at two (4 heads vs 16), slower from 4 tokens (16.2 -> 22.0 at 4). */
#define NB_CUDA_MLA_F32_G_DEFAULT 4
#define NB_CUDA_MLA_F32_G_MAX 2
void nb_cuda_mla_force_f32_group(int heads);

#ifdef __cplusplus
}
#endif
#endif

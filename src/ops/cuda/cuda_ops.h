/* CUDA backend of ops.h: nb_cuda_<op> for every nb_op_<op>, reached through the dispatch in
 * ops/ops.c for contexts made by nb_ops_ctx_new_cuda, and the context's state (stream,
 * cuBLASLt handle, device scratch, registered MoE weights). Every pointer an op receives
 * (tensor data, weights, norm vectors, index arrays) is device memory of the context's GPU.
 * Ops only enqueue work on the context's stream: no host synchronization, except where a
 * comment says so. Semantics are those of the CPU op (ops.h); tests/cuda_ops/test_cuda_vs_cpu.c
 * runs each against its CPU op. Notes: docs/cuda-backend.md. */
#ifndef NB_OPS_CUDA_CUDA_OPS_H
#define NB_OPS_CUDA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Context state: called by nb_ops_ctx_new_cuda / nb_ops_ctx_free (ops.c). */
nb_status nb_cuda_ctx_init(nb_ops_ctx *ctx, int device);
void nb_cuda_ctx_release(nb_ops_ctx *ctx);
/* Device scratch slots 0..7 (same contract as nb_ops_scratch; inside a branch's side queue
 * slots 0..3 are the side's own, 8..11). Growing a slot frees the old
 * buffer, which waits for the device; grow before capturing a CUDA graph. */
void *nb_cuda_scratch(nb_ops_ctx *ctx, int slot, size_t bytes);
void *nb_cuda_mem_alloc(nb_ops_ctx *ctx, size_t bytes);
void nb_cuda_mem_free(nb_ops_ctx *ctx, void *p);
nb_status nb_cuda_mem_upload(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes);
nb_status nb_cuda_mem_download(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes);
nb_status nb_cuda_mem_set(nb_ops_ctx *ctx, void *dst, int byte, size_t bytes);
nb_status nb_cuda_sync(nb_ops_ctx *ctx);
/* nb_ops_branch and friends (ops.h) on the context's side stream (ctx.cu). */
int nb_cuda_can_branch(nb_ops_ctx *ctx);
nb_status nb_cuda_branch(nb_ops_ctx *ctx);
nb_status nb_cuda_branch_main(nb_ops_ctx *ctx);
nb_status nb_cuda_join(nb_ops_ctx *ctx);
int nb_cuda_st_branch(nb_ops_ctx *ctx); /* 0 none open, 1 ops on the side, 2 side running */

/* Linear layers with more tokens than this go through cuBLASLt in BF16 (activations rounded
 * to BF16, the weight dequantized to BF16 in scratch when not stored so); fewer run the
 * float32 dequant-in-kernel GEMV, which matches the CPU op to float32 rounding.
 * NIBBLE_CUDA_LINEAR=gemv|lt forces one path (A/B runs, tests). */
#define NB_CUDA_LINEAR_GEMV_MAX_TOKENS 16
int nb_cuda_linear_should_use_lt(int64_t tokens, nb_wfmt fmt);

/* Routed experts in repacked NVFP4 (ops/cuda/moe.h) for one layer's nb_moe_weights: after
 * registration, nb_cuda_moe_experts on weights whose `gate` array is `dev->gate` runs the
 * MoE engineer's W4A16 kernels (BF16 activations) instead of the generic float32 kernel.
 * `host` holds the same experts in host memory (ModelOpt layout) for the repack, or is NULL:
 * then the repack runs on the GPU from `dev`'s copies (ops/cuda/synth_repack.h); every
 * expert must be NVFP4 with inter % 16 == 0 and hidden % 256 == 0 (else NB_ERR_UNSUPPORTED,
 * and the generic path stays in use). Synchronous (uploads). */
nb_status nb_cuda_moe_register(nb_ops_ctx *ctx, const nb_moe_weights *dev, const nb_moe_weights *host);
/* 1 when `w` has a registered repacked form in this context. */
int nb_cuda_moe_is_registered(nb_ops_ctx *ctx, const nb_moe_weights *w);

nb_status nb_cuda_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n, nb_tensor *out);
nb_status nb_cuda_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps, nb_tensor *out);
nb_status nb_cuda_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual, const float *weight,
                              float eps, nb_tensor *out);
nb_status nb_cuda_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias, float eps,
                            nb_tensor *out);
nb_status nb_cuda_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y);
nb_status nb_cuda_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope);
nb_status nb_cuda_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst);
nb_status nb_cuda_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out);
nb_status nb_cuda_scale(nb_ops_ctx *ctx, nb_tensor *x, float s);
/* Device-to-device copy of bytes on the context's stream. */
nb_status nb_cuda_copy_d2d(nb_ops_ctx *ctx, void *dst, const void *src, size_t bytes);
/* fused launches (ops.h), one kernel each */
nb_status nb_cuda_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos, const nb_rope *const *rope);
/* nb_cuda_rope_n's kernel: 1 a thread per (token, pair, 8 heads) (cos / sin computed once per
 * 8 heads), 0 a thread per (token, pair, head); else (< 0) NIBBLE_CUDA_ROPE_HEADS=0|1, or by
 * the token count (the first from 64 tokens). Tests and A/B timings. */
void nb_cuda_rope_force_heads(int on);
nb_status nb_cuda_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts);
nb_status nb_cuda_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                          nb_tensor *const *dst);
/* One kernel, one block per token (norms by warp groups, then ropes, then the writes); the
 * three launches above where the parts do not fit it (unaligned or very wide rows), or with
 * NIBBLE_CUDA_KV_PREP=0 / nb_cuda_norm_rope_set_force(0) (A/B timings; < 0: the environment). */
nb_status nb_cuda_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *p);
void nb_cuda_norm_rope_set_force(int fused);
nb_status nb_cuda_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y);
nb_status nb_cuda_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                      const nb_weight *down, int accumulate, nb_tensor *out);
nb_status nb_cuda_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                            const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);
/* MLA's kv_b ([n_heads * (nope + v), rank]) prepared once in the form the batched GEMMs read
 * (ops/cuda/mla.h: BF16 in place or NVFP4 -> BF16 exactly; F32 in place or FP8 -> F32) and
 * kept until the context is freed; later nb_cuda_mla_attention calls on this weight (same
 * data pointer) skip the per-call preparation. Synchronous; call before any graph capture. */
nb_status nb_cuda_mla_register(nb_ops_ctx *ctx, const nb_weight *kv_b, const nb_mla_dims *d);
/* Free what nb_cuda_mla_register kept (called by nb_cuda_ctx_release). */
void nb_cuda_mla_release(nb_ops_ctx *ctx);
nb_status nb_cuda_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d, const nb_tensor *q,
                                const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_weight *kv_b,
                                const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);
nb_status nb_cuda_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                             const nb_tensor *key_pool, const nb_attn_index *idx, int topk, int32_t *sel_pos,
                             int32_t *sel_count);
/* Tests and timings: dsa_select's scoring form (dsa.cu): 2 mma (tensor cores in TF32 split
 * three ways; head dim 128, else as 1), 1 a lane per position (where the rows are 16-byte
 * aligned and there are 32 or 64 heads; else the warp form), 0 a warp per position; anything
 * else: back to NIBBLE_CUDA_DSA=mma|lanes|warp (default lanes where it applies: ~9x the warp
 * form on an H200, docs/cuda-backend.md). */
void nb_cuda_dsa_force_form(int form);
/* Tests and timings: dsa_select's split form (dsa.cu: G blocks per token score ranges of the
 * context, one more block per token merges their candidates; the same output). 0 never; 1
 * automatic (G from the token count and the SM count, split where G >= 2); G >= 2 exactly
 * that many splits (at most 512, and only while tokens x G <= 2048); < 0: back to
 * NIBBLE_CUDA_DSA_SPLIT=0|1|G (unset: automatic). Read at each call. */
void nb_cuda_dsa_force_split(int split);
/* The splits per token of the last nb_cuda_dsa_select call (1: one block per token). */
int nb_cuda_dsa_last_splits(void);
/* The scoring form the last nb_cuda_dsa_select call ran: 4 the prefill tiles on wgmma, 3 the
 * prefill tiles on mma.sync (nb_cuda_dsa_force_tile), 2 mma, 1 lanes, 0 warp. */
int nb_cuda_dsa_last_form(void);
/* Tests and timings: dsa_select's prefill form (dsa.cu: a block scores 128 positions for up to
 * 32 tokens, then the split merge; 32 heads of 128, 16-byte aligned rows, topk a multiple of 16,
 * and idx->max_ctx set: never inside a CUDA graph). 1 k_dsa_tile (mma.sync, the mma form's scores
 * bit for bit), 2 k_dsa_tile_wg (wgmma, compute capability 9; elsewhere k_dsa_tile), forced at any
 * token count; 0 off; anything else: back to NIBBLE_CUDA_DSA_TILE=0|1|2 (unset: 2; from 64 tokens;
 * the variable is read once, the forced value at each call). Its scores are the mma form's
 * whatever NIBBLE_CUDA_DSA asks for the other paths. */
void nb_cuda_dsa_force_tile(int on);
/* Tests: the prefill form's tokens per launch pair (k_dsa_tile + merge); 0: as many as 256 MiB
 * of candidates hold. */
void nb_cuda_dsa_force_tile_group(int tokens);
/* Tests and timings: the split merge's shared-memory room for the first radix digit's bin, in
 * keys (dsa.cu k_dsa_merge): 0 runs every digit over the candidates in global memory; a small
 * count forces that fallback where the bin is larger; -1 restores the automatic room (up to
 * 16384 keys); -2 (timing only) launches no merge, leaving the selection unwritten. */
void nb_cuda_dsa_force_merge_cap(int keys);
/* Tests and timings: the merge's passes, 1 warp-aggregated shared atomics (match.any per
 * histogram digit, a ballot per append), 0 one shared atomic per counted or kept key (the
 * default); anything else: back to NIBBLE_CUDA_DSA_HIST=match|atomic. */
void nb_cuda_dsa_force_hist(int match);
nb_status nb_cuda_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                            nb_tensor *weights);
/* nb_cuda_linear then nb_cuda_moe_route. With NIBBLE_CUDA_GATE_ROUTE=fused (or the force
 * below) the router gate GEMV and the expert choice run in one launch for up to 16 tokens
 * (BF16 gate rows, hidden % 8 == 0, at most 512 experts: ops/cuda/moe_router.h): an
 * experiment, off by default because it measured slower than the two launches on the H200
 * (bench/RESULTS.md, "Small ops of a decode step, engineer C"). */
nb_status nb_cuda_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, nb_tensor *logits,
                                 const nb_router_params *p, nb_tensor *ids, nb_tensor *weights);
/* Fused launches nb_cuda_moe_gate_route made so far in this process (tests check the path taken). */
long long nb_cuda_moe_gate_route_fused_launches(void);
/* 1: the fused launch where it fits; 0: the two launches; -1: back to NIBBLE_CUDA_GATE_ROUTE. */
void nb_cuda_moe_gate_route_force(int fused);
/* The small ops' kernels of before issue 9's third round (rope: one block per token looping
 * over its pairs; embedding: one block per row; norms: weights loaded after the reductions;
 * router: lane 0 ranking the expert groups alone; no PDL), for A/B runs: 1 forces them, 0 the current ones, -1 back
 * to NIBBLE_CUDA_SMALL_OPS=legacy|new (default new). Read at each launch. */
void nb_cuda_small_ops_force_legacy(int legacy);
int nb_cuda_small_ops_legacy(void);
/* The small kernels (norms, rope, row moves, embedding, router) launch with programmatic
 * dependent launch (ops/cuda/pdl.cuh) unless NIBBLE_CUDA_PDL=0 or the legacy kernels are on;
 * force: 1 on, 0 off, -1 back to the environment. */
void nb_cuda_pdl_force(int on);
int nb_cuda_pdl_on(void);
nb_status nb_cuda_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                              const nb_moe_weights *w, int accumulate, nb_tensor *out);

#ifdef __cplusplus
}
#endif
#endif

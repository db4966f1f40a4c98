/* CPU backend of ops.h: the reference implementations (nb_cpu_<op>) and the helpers they
 * share (context internals, a parallel-for over rows, per-thread scratch). ops.c dispatches
 * nb_op_<op> here for CPU contexts; the registry test calls nb_cpu_<op> directly to compare
 * a CUDA op with it. Tests: tests/ops/test_ops_*.c. */
#ifndef NB_OPS_CPU_CPU_OPS_H
#define NB_OPS_CPU_CPU_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

#define NB_OPS_SCRATCH_SLOTS 8

struct nb_ops_ctx {
    nb_device device;
    int n_threads;
    void *scratch[NB_OPS_SCRATCH_SLOTS];
    size_t scratch_size[NB_OPS_SCRATCH_SLOTS];
    void *stream; /* CUDA stream of a CUDA context; NULL on CPU */
    void *cuda;   /* CUDA backend state (ops/cuda/cuda_ops.h); NULL on CPU */
};

/* Run fn(arg, begin, end, thread) over [0, n) split into contiguous ranges, one per thread
 * (thread < ctx->n_threads). Runs inline when n is below `min_per_thread` * 2. */
typedef void (*nb_cpu_range_fn)(void *arg, int64_t begin, int64_t end, int thread);
void nb_cpu_parallel_for(nb_ops_ctx *ctx, int64_t n, int64_t min_per_thread, nb_cpu_range_fn fn, void *arg);

/* Dequantize rows [r0, r0+nr) of w into dst [nr, k] using the context's threads. */
nb_status nb_cpu_dequant_rows(nb_ops_ctx *ctx, const nb_weight *w, int64_t r0, int64_t nr, float *dst);

/* Shape checks shared by the ops; each returns NB_ERR_INVALID_ARG naming op and param. */
nb_status nb_cpu_check_f32(const char *op, const char *param, const nb_tensor *t, int ndim);
/* The same, F32 or BF16 (the KV pool's latent rows). */
nb_status nb_cpu_check_f32_bf16(const char *op, const char *param, const nb_tensor *t, int ndim);

/* y[T, n] (row stride ldy) = x[T, k] (ldx) W^T (+ bias), or y += when accumulate.
 * Uses scratch slot 0 for blocks of dequantized rows. */
nb_status nb_cpu_linear_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                            int64_t ldy, int accumulate);
/* y (ldy) = or += down(silu(gate x) * up x); g, u: caller's buffers [T, gate->n]. */
nb_status nb_cpu_swiglu_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *gate,
                            const nb_weight *up, const nb_weight *down, float *g, float *u, float *y, int64_t ldy,
                            int accumulate);

static inline float nb_cpu_silu(float x) { return x / (1.0f + expf(-x)); }

nb_status nb_cpu_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n, nb_tensor *out);
nb_status nb_cpu_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps, nb_tensor *out);
nb_status nb_cpu_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual, const float *weight,
                             float eps, nb_tensor *out);
nb_status nb_cpu_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias, float eps,
                           nb_tensor *out);
nb_status nb_cpu_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y);
nb_status nb_cpu_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope);
nb_status nb_cpu_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y);
nb_status nb_cpu_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                     const nb_weight *down, int accumulate, nb_tensor *out);
nb_status nb_cpu_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                           const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);
nb_status nb_cpu_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d, const nb_tensor *q,
                               const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_weight *kv_b,
                               const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);
nb_status nb_cpu_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                            const nb_tensor *key_pool, const nb_attn_index *idx, int topk, int32_t *sel_pos,
                            int32_t *sel_count);
nb_status nb_cpu_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                           nb_tensor *weights);
/* fused (ops.h): nb_cpu_linear then nb_cpu_moe_route */
nb_status nb_cpu_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, nb_tensor *logits,
                                const nb_router_params *p, nb_tensor *ids, nb_tensor *weights);
nb_status nb_cpu_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst);
nb_status nb_cpu_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out);
nb_status nb_cpu_scale(nb_ops_ctx *ctx, nb_tensor *x, float s);
/* fused launches (ops.h); on the CPU the composition of the ops they name */
nb_status nb_cpu_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos, const nb_rope *const *rope);
nb_status nb_cpu_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts);
nb_status nb_cpu_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                          nb_tensor *const *dst);
nb_status nb_cpu_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *p);
nb_status nb_cpu_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                             const nb_moe_weights *w, int accumulate, nb_tensor *out);

#endif

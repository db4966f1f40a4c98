/* The op interface: one signature per op of the forward pass, over a small tensor struct.
 * The CPU backend (src/ops/cpu/, the specification: plain float32 accumulation) implements
 * every op; a CUDA backend implements the same signatures, and a registry test runs each
 * CUDA op against its CPU op on the same inputs.
 * Tests: tests/ops/ (test_ops_basic, test_ops_attention, test_ops_moe).
 *
 * Conventions shared by every op:
 * - Activations are float32 unless a parameter says otherwise; shapes are given as
 *   [rows, cols] in the comments; strides are in elements (not bytes); the last dimension of
 *   an activation is contiguous (stride 1) unless the op says otherwise.
 * - Weights of linear layers are nb_weight: out x in ([N, K], as HF nn.Linear stores them) in
 *   their stored format (F32, BF16, NVFP4, FP8-block), dequantized on the fly block by block;
 *   nothing expands a whole model to float32.
 * - Every tensor and weight names the device its data lives on; an op refuses (NB_ERR_INVALID_ARG)
 *   data on another device than its context's.
 * - Every op takes an nb_ops_ctx: the backend (CPU threads / CUDA stream) and its scratch
 *   memory. Ops are not reentrant on one context; use one context per thread.
 * - Errors: NB_ERR_INVALID_ARG for shape/dtype mismatches (the message names the op and the
 *   parameter), NB_ERR_OUT_OF_MEMORY when scratch cannot grow, NB_ERR_UNSUPPORTED for a
 *   format the backend lacks. */
#ifndef NB_OPS_OPS_H
#define NB_OPS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "format/dtype.h"
#include "nibble.h"

#ifdef __cplusplus /* the CUDA ops (.cu, compiled as C++) include this header */
extern "C" {
#endif

#define NB_TENSOR_MAX_DIMS 4

typedef enum nb_device { NB_DEVICE_CPU = 0, NB_DEVICE_CUDA } nb_device;

/* A view: data is not owned. shape[i] elements along dim i, stride[i] elements between
 * consecutive indices of dim i. */
typedef struct nb_tensor {
    void *data;
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_TENSOR_MAX_DIMS];
    int64_t stride[NB_TENSOR_MAX_DIMS];
    nb_device device;
} nb_tensor;

/* Contiguous row-major views (device CPU; set .device for others). */
nb_tensor nb_tensor_1d(void *data, nb_dtype dt, int64_t n0);
nb_tensor nb_tensor_2d(void *data, nb_dtype dt, int64_t n0, int64_t n1);
nb_tensor nb_tensor_3d(void *data, nb_dtype dt, int64_t n0, int64_t n1, int64_t n2);
/* Number of elements. */
int64_t nb_tensor_numel(const nb_tensor *t);
/* 1 when the view is dense row-major. */
int nb_tensor_is_contiguous(const nb_tensor *t);

/* ---- weights ------------------------------------------------------------------------- */

typedef enum nb_wfmt {
    NB_WFMT_F32 = 0,  /* data: F32 [n, k] */
    NB_WFMT_BF16,     /* data: BF16 [n, k] */
    NB_WFMT_NVFP4,    /* data: U8 [n, k/2], two E2M1 codes per byte, low nibble = even k;
                         scale: E4M3 [n, k/16], one per 16 consecutive k; global_scale: F32
                         (weight_scale_2). value = e2m1 * (e4m3 * global_scale), the scales
                         multiplied first in float32 (ModelOpt; format/nvfp4.h). */
    NB_WFMT_FP8_BLOCK /* data: E4M3 [n, k]; scale: F32 [ceil(n/block_n), ceil(k/block_k)]
                         (weight_scale_inv); value = e4m3 * scale[i/block_n][j/block_k]. */
} nb_wfmt;

/* A linear layer's weight [n, k] (out x in) in its stored format. Row r of the matrix may be
 * a slice of a larger stored tensor (fused gate_up, per-expert slices of [E, n, k]):
 * data/scale then point at row r0 and row_stride* give the distance between rows. */
typedef struct nb_weight {
    nb_wfmt fmt;
    int64_t n, k;
    const void *data;
    const void *scale;       /* NVFP4: E4M3 block scales; FP8_BLOCK: F32 block scales; else NULL */
    float global_scale;      /* NVFP4 weight_scale_2; 1 otherwise */
    int block_n, block_k;    /* FP8_BLOCK (128, 128); NVFP4: block_k 16 */
    int64_t row_stride;      /* bytes between rows of data (0: dense, computed from fmt and k) */
    int64_t scale_row_stride;/* bytes between rows of scale blocks (0: dense) */
    const float *bias;       /* optional F32 [n] */
    nb_device device;
    unsigned flags;          /* NB_WEIGHT_* hints for backends; 0 by default */
    const char *name;        /* short static role ("q_a_proj", "mlp.shared_experts.gate_proj",
                                "lm_head") for the per-op profile (ops/profile.h); NULL: unnamed */
} nb_weight;

/* The layer's output feeds a discrete choice (DSA top-k, MoE top-k): a backend that rounds
 * activations to BF16 for speed keeps float32-level precision for it (set at bind time). */
#define NB_WEIGHT_FEEDS_TOPK 1u
/* data/scale live as long as the ops context (a model's device twin): a backend may cache
 * derived copies (a BF16 expansion) keyed by the pointers. Never set on short-lived weights. */
#define NB_WEIGHT_RESIDENT 2u
/* Set with NB_WEIGHT_FEEDS_TOPK on weights whose output reaches a discrete choice only
 * through the DSA indexer (the indexer's projections and everything upstream of them). In a
 * step where no token attends beyond index_topk the selection takes every position whatever
 * the scores, so the forward pass clears both bits on its copy of the weight for that step
 * (engine/forward.c) and the backend runs it at its usual precision. */
#define NB_WEIGHT_FEEDS_DSA 4u

/* Bytes of one dense row of `data` for this format and k (k/2 for NVFP4). */
int64_t nb_weight_row_bytes(nb_wfmt fmt, int64_t k);
/* Dequantize rows [r0, r0+nr) to float32 dst [nr, k] (CPU data only). Bias not added. */
nb_status nb_weight_dequant_rows(const nb_weight *w, int64_t r0, int64_t nr, float *dst);
/* Validate internal consistency (sizes, block divisibility); names `what` in the error. */
nb_status nb_weight_check(const nb_weight *w, const char *what);

/* ---- context -------------------------------------------------------------------------- */

typedef struct nb_ops_ctx nb_ops_ctx;

/* A CPU context running its loops on n_threads threads (0: all cores). OpenBLAS keeps its
 * own threads for the matmuls. */
nb_status nb_ops_ctx_new_cpu(int n_threads, nb_ops_ctx **out);
void nb_ops_ctx_free(nb_ops_ctx *ctx);
nb_device nb_ops_ctx_device(const nb_ops_ctx *ctx);
/* Scratch memory owned by the context, valid until the next call that asks for scratch
 * with the same slot (slots 0..7 are independent). Ops use slots 0..3; callers (the
 * forward pass) may use 4..7. NULL on allocation failure (error set). */
void *nb_ops_scratch(nb_ops_ctx *ctx, int slot, size_t bytes);

/* A CUDA context on GPU `device`: its own stream, cuBLASLt handle and device scratch. The
 * tensors, weights and index arrays (pos, slot tables, ids, selections, norm weights)
 * given to its ops live in that GPU's memory; ops enqueue work on the stream and return
 * without waiting. Indices in device memory are not validated (that would need a host
 * round trip): kernels skip out-of-range rows instead of faulting, and callers (the
 * forward pass) validate on the host first. NB_ERR_UNSUPPORTED in builds without CUDA,
 * NB_ERR_CUDA without a usable GPU. */
nb_status nb_ops_ctx_new_cuda(int device, nb_ops_ctx **out);

/* Memory of the context's backend: host memory on CPU, device memory on CUDA (NULL and an
 * error when it cannot be had). upload copies host bytes in, in stream order (src may be
 * reused on return); download waits for the stream and copies bytes out; sync waits. */
void *nb_ops_alloc(nb_ops_ctx *ctx, size_t bytes);
void nb_ops_free(nb_ops_ctx *ctx, void *p);
nb_status nb_ops_upload(nb_ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
nb_status nb_ops_download(nb_ops_ctx *ctx, void *dst_host, const void *src, size_t bytes);
nb_status nb_ops_memset(nb_ops_ctx *ctx, void *dst, int byte, size_t bytes);
nb_status nb_ops_sync(nb_ops_ctx *ctx);

/* A branch: two queues of ops that may run side by side. nb_ops_branch sends the ops that
 * follow to a second queue, which starts after everything enqueued so far;
 * nb_ops_branch_main sends later ops back to the first queue while the second one runs;
 * nb_ops_join makes every later op wait for both. The caller keeps the two queues' ops
 * independent (no op of one reads what the other writes before the join). Ops on the second
 * queue get scratch of their own (nb_ops_scratch slots 0-3); callers' slots 4-7 are shared.
 * A CUDA graph captured across a branch holds both queues. nb_ops_can_branch: 1 where the
 * queues can overlap (CUDA, unless NIBBLE_CUDA_BRANCH=0, and not while ops are profiled);
 * elsewhere the three calls do nothing and ops run in order. */
int nb_ops_can_branch(nb_ops_ctx *ctx);
nb_status nb_ops_branch(nb_ops_ctx *ctx);
nb_status nb_ops_branch_main(nb_ops_ctx *ctx);
nb_status nb_ops_join(nb_ops_ctx *ctx);

/* ---- row movement (the KV pool writes and the logit rows of the forward pass) --------- */

/* dst[rows[t], :] = src[t, :]. src: F32 [T, w]; dst: F32 or BF16 [n, w] (row stride free; a
 * BF16 dst takes each value rounded to nearest even: the KV pool's BF16 latent rows, forward.h);
 * rows: I32 [T] on the op's device. A row outside [0, n) is NB_ERR_INVALID_ARG on CPU, skipped
 * on CUDA. */
nb_status nb_op_set_rows(nb_ops_ctx *ctx, const nb_tensor *src, const int32_t *rows, nb_tensor *dst);
/* out[r, :] = x[rows[r], :]. x: F32 [T, w]; out: F32 [R, w]; rows I32 [R] on the op's device. */
nb_status nb_op_get_rows(nb_ops_ctx *ctx, const nb_tensor *x, const int32_t *rows, nb_tensor *out);
/* x *= s elementwise. x: F32 [rows, cols]. */
nb_status nb_op_scale(nb_ops_ctx *ctx, nb_tensor *x, float s);

/* ---- elementwise and norms -------------------------------------------------------------- */

/* out[t, :] = table row ids[t] (table: any nb_weight format, [vocab, hidden]).
 * An id outside [0, vocab) is NB_ERR_INVALID_ARG. out: F32 [n, hidden]. */
nb_status nb_op_embedding(nb_ops_ctx *ctx, const nb_weight *table, const int32_t *ids, int n, nb_tensor *out);

/* out = x / sqrt(mean(x^2) + eps) * weight, row by row. x, out: F32 [rows, d] (may alias);
 * weight F32 [d]. Also used per head (view q as [T*heads, head_dim]). */
nb_status nb_op_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, float eps, nb_tensor *out);

/* Fused residual add: residual += x; out = rmsnorm(residual) * weight.
 * residual, x, out: F32 [rows, d]; out may alias x. */
nb_status nb_op_add_rmsnorm(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *residual, const float *weight, float eps,
                            nb_tensor *out);

/* out = (x - mean) / sqrt(var + eps) * weight + bias (biased variance, as nn.LayerNorm).
 * bias may be NULL. x, out: F32 [rows, d]. */
nb_status nb_op_layernorm(nb_ops_ctx *ctx, const nb_tensor *x, const float *weight, const float *bias, float eps,
                          nb_tensor *out);

/* y += x elementwise (F32, same shape). */
nb_status nb_op_add(nb_ops_ctx *ctx, const nb_tensor *x, nb_tensor *y);

/* ---- rotary embedding ------------------------------------------------------------------ */

/* Rotary tables computed once per model from its config (HF rope_init for default / yarn). */
#define NB_ROPE_MAX_PAIRS 256 /* rotated dims per head <= 512 */
typedef struct nb_rope {
    int dim;               /* rotated dims per head (even) */
    int interleave;        /* 1: pairs (2i, 2i+1); 0: halves (i, i + dim/2) */
    float attention_scaling; /* multiplies cos and sin (yarn mscale; 1 for default) */
    float inv_freq[NB_ROPE_MAX_PAIRS]; /* dim/2 used */
} nb_rope;

struct nb_rope_config;
/* Build tables for `rotary_dim` dims from the config (type default or yarn). */
nb_status nb_rope_init(const struct nb_rope_config *rc, int rotary_dim, nb_rope *out);

/* Rotate the first rope->dim elements of every head in place, at positions pos[t].
 * x: F32 [T, heads, >= dim] (stride[2] == 1; stride[0], stride[1] free).
 * The angle is computed as float(pos) * inv_freq in float32, as HF does. */
nb_status nb_op_rope(nb_ops_ctx *ctx, nb_tensor *x, const int32_t *pos, const nb_rope *rope);

/* ---- fused launches ------------------------------------------------------------------
 * Each is exactly the composition of the ops it names, applied to parts that do not overlap
 * (the CPU backend runs that composition; a GPU backend runs all parts in one launch, so a
 * decode step pays one launch instead of several). The parts' views follow their op's rules. */
#define NB_FUSED_MAX 4

/* nb_op_rope(x[i], pos, rope[i]) for i < n (n in 1..NB_FUSED_MAX). All x[i] have the same
 * number of tokens; on a GPU at most two distinct rope tables (pointers) among them. */
nb_status nb_op_rope_n(nb_ops_ctx *ctx, int n, nb_tensor *const *x, const int32_t *pos, const nb_rope *const *rope);

/* One part of nb_op_norm_n: RMS = nb_op_rmsnorm(x, weight, eps, out); LAYER =
 * nb_op_layernorm(x, weight, bias, eps, out); SCALE = nb_op_scale(x, s) (out must be x). */
typedef enum nb_norm_kind { NB_NORM_RMS = 0, NB_NORM_LAYER, NB_NORM_SCALE } nb_norm_kind;
typedef struct nb_norm_part {
    nb_norm_kind kind;
    const nb_tensor *x;
    nb_tensor *out;
    const float *weight, *bias; /* RMS: weight; LAYER: weight and optional bias */
    float eps, s;               /* eps for RMS / LAYER, s for SCALE */
} nb_norm_part;
/* The n parts (1..NB_FUSED_MAX) in one launch; every part has the same number of rows. */
nb_status nb_op_norm_n(nb_ops_ctx *ctx, int n, const nb_norm_part *parts);

/* nb_op_set_rows(src[i], rows, dst[i]) for i < n (1..NB_FUSED_MAX), the same rows for all. */
nb_status nb_op_set_rows_n(nb_ops_ctx *ctx, int n, const nb_tensor *const *src, const int32_t *rows,
                           nb_tensor *const *dst);

/* nb_op_norm_n(n_norm, norms), then nb_op_rope_n(n_rope, rope_x, pos, rope), then
 * nb_op_set_rows_n(n_set, src, rows, dst), in that order: a rope part may lie inside a norm
 * part's output and a source of the writes inside either (an MLA layer's key side: the
 * latent's norm, k_pe's rope, the pool write of [latent | k_pe]). Counts 0..NB_FUSED_MAX,
 * at least one part; every part has the same number of rows (tokens). */
typedef struct nb_norm_rope_set {
    int n_norm;
    const nb_norm_part *norms;
    int n_rope;
    nb_tensor *const *rope_x;
    const int32_t *pos;
    const nb_rope *const *rope;
    int n_set;
    const nb_tensor *const *src;
    const int32_t *rows;
    nb_tensor *const *dst;
} nb_norm_rope_set;
nb_status nb_op_norm_rope_set_n(nb_ops_ctx *ctx, const nb_norm_rope_set *p);

/* ---- dense linear layers -------------------------------------------------------------- */

/* y = x @ w^T (+ bias). x: F32 [T, k] (row stride free), y: F32 [T, n]. BLAS on CPU after
 * dequantizing w in row blocks. */
nb_status nb_op_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y);

/* SwiGLU MLP: out = down(silu(gate(x)) * up(x)). x: F32 [T, hidden], out: F32 [T, hidden]
 * (out must not alias x). If accumulate, out += result; else out = result. */
nb_status nb_op_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                    const nb_weight *down, int accumulate, nb_tensor *out);

/* ---- attention over a slot-addressed KV pool ------------------------------------------ */

/* Where each query token's keys live. Query token i sits at position pos[i] of its sequence;
 * that sequence's token at position p is row slot_table[slot_base[i] + p] of the pool.
 * Token i attends causally to positions 0..pos[i] (its own row must already be written).
 * Tokens of one sequence share slot_base; the arrays live on the op's device. */
typedef struct nb_attn_index {
    int n_tokens;
    const int32_t *pos;        /* [n_tokens] */
    const int32_t *slot_base;  /* [n_tokens] offsets into slot_table */
    const int32_t *slot_table; /* rows of the pool */
    /* A hint from the host for kernel choices, never for results: 1 when some token of the
     * step attends to many positions (engine/forward.h nb_forward_long_ctx), 0 otherwise or
     * unknown. A backend picks its kernels from it (CUDA graphs are keyed on it), so results
     * may differ in rounding with it, never in meaning. */
    int long_ctx;
    /* 0, or a bound the host knows: every token's pos + 1 <= max_ctx. A CUDA graph's step passes
     * 0 (a replay runs at other contexts), so an op sizes work by it only where it is not 0 (the
     * CUDA DSA select's prefill form, dsa.cu). */
    int max_ctx;
} nb_attn_index;

/* Optional sparse selection (DSA): token i attends only to positions sel[i*sel_stride + j],
 * j < sel_count[i] (each <= pos[i]); NULL = dense causal. */
typedef struct nb_attn_select {
    const int32_t *pos;        /* [n_tokens * stride] */
    const int32_t *count;      /* [n_tokens] */
    int stride;
} nb_attn_select;

/* Grouped-query attention. q: F32 [T, n_heads, head_dim]; k_pool: F32 [rows, n_kv, head_dim]
 * and v_pool: F32 [rows, n_kv, v_dim] (row stride free: they are views into one pool row);
 * out: F32 [T, n_heads, v_dim]. Head h reads kv head h / (n_heads / n_kv).
 * softmax(q.k * scale) in float32 over the attended positions. */
nb_status nb_op_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                          const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);

/* MLA attention over the compressed cache (GLM-5, DeepSeek-V3).
 * q: F32 [T, n_heads, nope + rope] (q_pe already rotated);
 * latent_pool: [rows, kv_lora_rank] (kv_a_layernorm output); kpe_pool: [rows, rope] (rotated
 * k_pe); both F32 or both BF16 (the pool's `--kv-cache-dtype`; row strides free);
 * kv_b: [n_heads * (nope + v), kv_lora_rank];
 * out: F32 [T, n_heads, v].
 * NAIVE expands each attended latent through kv_b_proj into per-head k_nope and v (as HF
 * does); ABSORBED folds kv_b into the query (q_nope . W_uk) and the output (W_uv . o_lat)
 * and attends over the latent + rope key. Both compute the same function. */
typedef enum nb_mla_mode { NB_MLA_ABSORBED = 0, NB_MLA_NAIVE } nb_mla_mode;
typedef struct nb_mla_dims {
    int n_heads, qk_nope, qk_rope, v_dim, kv_lora_rank;
} nb_mla_dims;
nb_status nb_op_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d, const nb_tensor *q,
                              const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_weight *kv_b,
                              const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out);

/* DSA indexer scores and causal top-k selection (transformers' GlmMoeDsaIndexer):
 *   score[i, p] = sum_h w[i, h] * relu(q[i, h, :] . key[p, :] * softmax_scale), p <= pos[i]
 * where the caller passes w = weights_proj(x) * n_heads^-0.5 and softmax_scale = head_dim^-0.5.
 * q: F32 [T, n_heads, head_dim] (rotated); key_pool: F32 [rows, head_dim] (rotated,
 * LayerNorm'd keys). Writes min(topk, pos[i]+1) positions of token i into
 * sel_pos[i*topk ...] (highest score first; ties to the lower position) and the count into
 * sel_count[i]. When pos[i]+1 <= topk every position is selected: they are written in
 * ascending order and no score is computed for that token (the same set; attention over it
 * then sums in the dense causal order). */
nb_status nb_op_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                           const nb_tensor *key_pool, const nb_attn_index *idx, int topk, int32_t *sel_pos,
                           int32_t *sel_count);

/* ---- mixture of experts --------------------------------------------------------------- */

typedef enum nb_router_score { NB_ROUTER_SOFTMAX = 0, NB_ROUTER_SIGMOID } nb_router_score;
typedef enum nb_router_group { NB_ROUTER_GREEDY = 0, NB_ROUTER_GROUP_MAX, NB_ROUTER_GROUP_TOP2 } nb_router_group;

typedef struct nb_router_params {
    int n_experts, top_k;
    nb_router_score score;
    nb_router_group group;     /* GROUP_MAX: groups ranked by max score (group_limited_greedy);
                                  GROUP_TOP2: by the sum of their two best (noaux_tc) */
    int n_group, topk_group;   /* 1, 1 when ungrouped */
    const float *correction_bias; /* e_score_correction_bias [n_experts] or NULL: added to the
                                     scores for selection only */
    int norm_topk_prob;        /* renormalize the chosen weights to sum 1 (+1e-20) */
    float routed_scaling_factor;
} nb_router_params;

/* logits: F32 [T, n_experts] (router_logits = x @ gate^T in float32). Writes ids I32 [T, k]
 * and weights F32 [T, k] (ids sorted by selection score, descending). */
nb_status nb_op_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                          nb_tensor *weights);

/* The router's logits and choice in one call: nb_op_linear(x, gate, logits) then
 * nb_op_moe_route(logits, p, ids, weights), exactly (the CPU backend runs that composition; a
 * GPU backend may run both in one launch for a few tokens, the GEMV in float32 as the linear
 * op's GEMV does). x: F32 [T, hidden]; gate: [n_experts, hidden] (+ optional bias); logits:
 * F32 [T, n_experts], written (the expert choice reads it, NB_DUMP and tests may too). */
nb_status nb_op_moe_gate_route(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, nb_tensor *logits,
                               const nb_router_params *p, nb_tensor *ids, nb_tensor *weights);

/* Routed SwiGLU experts, each [inter, hidden] gate/up and [hidden, inter] down, in any
 * nb_weight format (per expert, so fused [E, 2I, H] tensors are slices). */
typedef struct nb_moe_weights {
    int n_experts, hidden, inter;
    const nb_weight *gate;  /* [n_experts] */
    const nb_weight *up;    /* [n_experts] */
    const nb_weight *down;  /* [n_experts] */
} nb_moe_weights;

/* out[t] (+)= sum_j weights[t, j] * expert_{ids[t, j]}(x[t]).
 * x: F32 [T, hidden]; ids: I32 [T, k] (an id < 0 is skipped; >= n_experts is an error);
 * weights: F32 [T, k]; out: F32 [T, hidden], not aliasing x. Each expert touched in the call is
 * dequantized once (block of rows at a time) for all the tokens routed to it. */
nb_status nb_op_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                            const nb_moe_weights *w, int accumulate, nb_tensor *out);

/* ---- sampling -------------------------------------------------------------------------- */

/* One logits row's sampling request (engine/sampling.h has the semantics; the arithmetic is
 * ops/sample_math.h, shared by both backends so they draw the same token). */
typedef struct nb_sample_params {
    float temperature;        /* <= 0: greedy (argmax of the penalized logits, lowest id on ties) */
    float top_p;              /* (0, 1]; >= 1: off */
    float min_p;              /* [0, 1]; 0: off */
    float repetition_penalty; /* 1: off */
    float frequency_penalty;  /* 0: off */
    float presence_penalty;   /* 0: off */
    int32_t top_k;            /* <= 0 or >= vocab: off */
    int32_t n_top;            /* top log-probabilities wanted, 0..NB_MAX_TOP_LOGPROBS */
    int32_t want_logprob;     /* 1: the log-probability of the drawn token */
    int32_t skip;             /* 1: this row is not sampled (its out entry is left alone) */
    uint64_t seed;
    uint64_t k;               /* counter of the draw: index of the output token being drawn */
} nb_sample_params;

typedef struct nb_sample_out {
    int32_t token;
    float logprob;            /* of token under log_softmax(raw logits); 0 unless want_logprob */
    int32_t n_top;            /* min(n_top, vocab) */
    int32_t top_id[NB_MAX_TOP_LOGPROBS];      /* best first (raw logits; ties: lower id) */
    float top_logprob[NB_MAX_TOP_LOGPROBS];
} nb_sample_out;

/* The penalty history in CSR form: row r's entries are [off[r], off[r+1]); each is a distinct
 * token of the row's prompt or output and its number of occurrences in the output (0: only in
 * the prompt). n_entries = off[rows] (host-known, for scratch). A row without penalties may
 * have entries: they are not used. Arrays on the op's device; NULL arrays with n_entries 0
 * mean no history. raw: optional scratch [n_entries] for the raw logits of penalized tokens
 * (NULL: the backend takes it from its own scratch; a caller replaying CUDA graphs passes its
 * own so that the op never moves the context's scratch). */
typedef struct nb_sample_hist {
    const int32_t *off;       /* [rows + 1] */
    const int32_t *token;     /* [n_entries] */
    const int32_t *count;     /* [n_entries] */
    int64_t n_entries;
    float *raw;               /* [n_entries] scratch, or NULL */
} nb_sample_hist;

/* ids fit the keys' low 20 bits, and vocab * 2^44 (the largest total weight) fits 63 bits
 * (ops/sample_math.h) */
#define NB_SAMPLE_MAX_VOCAB (1 << 19)

/* Per row r of logits (F32 [rows, vocab], contiguous; penalties are applied to it in place):
 * penalties → greedy argmax, or p = softmax(l / T) → kept set by top_k, top_p, min_p → one
 * draw with u = uniform(seed, k); out[r] gets the token and the requested log-probabilities
 * (of the raw logits, before penalties). params, hist and out live on the op's device; the
 * params are not validated there (engine/sampling.c validates requests; entries out of range
 * are clamped or skipped, never read out of bounds). NB_ERR_INVALID_ARG for a vocabulary above
 * NB_SAMPLE_MAX_VOCAB or a logits tensor of the wrong shape or device. */
nb_status nb_op_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                       const nb_sample_hist *hist, nb_sample_out *out);

#ifdef __cplusplus
}
#endif

#endif

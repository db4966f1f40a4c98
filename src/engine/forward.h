/* The forward pass: each family's recipe written once over ops.h, for a batch of sequences
 * that mixes prefill chunks and single-token decodes, reading and writing a slot-addressed
 * KV pool. Exercised by: nibble score / nibble generate, tests/golden/, tests/model/.
 *
 * KV pool contract (the paged cache of src/engine builds on it):
 * - Per layer, a pool of rows, one row per token slot, `row_bytes` bytes each. A row holds
 *   the family's per-token entry:
 *     MLA (glm_moe_dsa, deepseek_v3): [kv_lora_rank latent (after kv_a_layernorm)]
 *                                     [qk_rope_head_dim roped k_pe]
 *                                     [index_head_dim indexer key (roped, LayerNorm'd), only
 *                                      when the layer computes its own DSA selection]
 *     GQA (glm4_moe, qwen3_moe):      [K of all kv heads (normed, roped)][V of all kv heads]
 *   The MLA latent and k_pe are float32 or BF16 (`lat_dtype`, --kv-cache-dtype); the indexer
 *   key and GQA's K and V are always float32 (a BF16 indexer key flips glm_moe_dsa's top-k:
 *   docs/cuda-backend.md). The byte offsets are in nb_kv_layout; every part starts on a
 *   16-byte boundary where the dims allow it (GLM-5: latent 0, k_pe 1024, key 1152 of 1664
 *   bytes in BF16; 0, 2048, 2304 of 2816 in float32).
 * - A sequence's token at position p lives at row slots[p]; the caller owns the slot array
 *   (a contiguous cache is slots[p] = base + p). The forward pass writes the rows of this
 *   step's tokens and reads every earlier row through the same array; it never reads a row
 *   for a position >= the token's own position + 1. */
#ifndef NB_ENGINE_FORWARD_H
#define NB_ENGINE_FORWARD_H

#include <stdint.h>

#include "format/model_config.h"
#include "model/model.h"
#include "nibble.h"
#include "ops/ops.h"

/* Offsets in bytes inside one row; -1 when the layer lacks that part. */
typedef struct nb_kv_layer_layout {
    int64_t row_bytes;
    int64_t latent_at, kpe_at, index_at; /* MLA: latent and k_pe of lat_dtype, key float32 */
    int64_t k_at, v_at;                  /* GQA: float32 */
    nb_dtype lat_dtype;                  /* MLA: F32 or BF16 (GQA layers: F32) */
} nb_kv_layer_layout;

typedef struct nb_kv_layout {
    int n_layers;
    nb_kv_layer_layout layer[NB_MAX_LAYERS];
} nb_kv_layout;

/* The per-token row layout of every layer for this config with MLA latent rows of lat_dtype
 * (F32 or BF16; NB_ERR_INVALID_ARG for anything else, and for BF16 with a GQA model, whose
 * rows are float32 only). */
nb_status nb_kv_layout_for(const nb_model_config *cfg, nb_dtype lat_dtype, nb_kv_layout *out);
/* The dtype of a pool's MLA latent rows for --kv-cache-dtype kv on this model (nibble.h):
 * F32 or BF16. auto: BF16 for an MLA model on the GPU (on_gpu; the kernels round rows to BF16
 * anyway, docs/engine.md), float32 otherwise (the CPU reference, GQA models). Sets *out. */
nb_status nb_kv_lat_dtype(nb_kv_cache_dtype kv, const nb_model_config *cfg, int on_gpu, nb_dtype *out);
/* Bytes per token slot summed over the layers of a layout. */
int64_t nb_kv_layout_bytes(const nb_kv_layout *lay);

typedef struct nb_kv_pool {
    nb_kv_layout layout;
    int64_t n_slots;
    nb_device device;
    unsigned char *layer[NB_MAX_LAYERS]; /* [n_slots, row_bytes] per layer */
} nb_kv_pool;

/* Allocate a pool of n_slots rows per layer (zeroed) on the CPU. */
nb_status nb_kv_pool_init(nb_kv_pool *pool, const nb_model_config *cfg, nb_dtype lat_dtype, int64_t n_slots);
void nb_kv_pool_free(nb_kv_pool *pool);
/* Bytes of one row of one layer; bytes summed over layers per token slot. */
size_t nb_kv_row_bytes(const nb_kv_pool *pool, int layer);
size_t nb_kv_bytes_per_slot(const nb_kv_pool *pool);

/* One sequence's part of a step. */
typedef struct nb_seq_step {
    const int32_t *tokens;  /* this step's token ids (a prefill chunk or one decode token) */
    int n_tokens;           /* >= 1 */
    int start_pos;          /* position of tokens[0]; the rows of 0..start_pos-1 are in the pool */
    const int32_t *slots;   /* rows for positions [0, start_pos + n_tokens) */
    int all_logits;         /* 1: logits for every token of the chunk; 0: only the last */
} nb_seq_step;

typedef struct nb_batch {
    int n_seqs;
    const nb_seq_step *seqs;
} nb_batch;

/* Rows of logits nb_forward writes for this batch: sum over sequences of n_tokens (all_logits)
 * or 1. */
int nb_batch_logit_rows(const nb_batch *b);

/* Run one step (one call at a time per model: the model's op context holds the scratch).
 * Writes the KV rows of every token of the batch, then logits F32
 * [nb_batch_logit_rows(b), vocab] in sequence order (host memory). Sequences of one batch must
 * not share slots. Errors: NB_ERR_INVALID_ARG naming the sequence and field (token id out of
 * range, slot out of the pool, positions beyond max_position_embeddings). */
nb_status nb_forward(nb_model *m, nb_kv_pool *pool, const nb_batch *b, float *logits);

/* nb_forward, but the logits stay in the model's memory (device memory on CUDA): *logits
 * points at [nb_batch_logit_rows(b), vocab] F32 in scratch slot NB_FWD_LOGITS_SLOT of the
 * model's ops context, valid until the next step on this model. The work may still be
 * running on the context's stream when it returns. */
nb_status nb_forward_keep(nb_model *m, nb_kv_pool *pool, const nb_batch *b, float **logits);

/* Scratch slots of the model's ops context that the forward pass uses (ops.h leaves 4..7 to
 * callers): activations (sized by tokens and logit rows only), the eager path's index
 * arrays, the eager path's logits. */
#define NB_FWD_ACT_SLOT 4
#define NB_FWD_INDEX_SLOT 5
#define NB_FWD_LOGITS_SLOT 6

/* Bytes of the activation block (NB_FWD_ACT_SLOT) of a step of T tokens and R logit rows: what
 * the engine sets aside for the largest step before it sizes the KV pool. */
size_t nb_fwd_act_bytes(const nb_model_config *cfg, int64_t T, int64_t R);

/* ---- the pieces, for callers that move the index arrays themselves (CUDA graphs,
 * engine/cuda_runner.c) ---- */

/* The checks of nb_forward: *T tokens in the batch, *n_slots slot-table entries (the sum of
 * every sequence's start_pos + n_tokens). NB_ERR_INVALID_ARG as nb_forward. */
nb_status nb_forward_check(const nb_model *m, const nb_kv_pool *pool, const nb_batch *b, int *T, int64_t *n_slots);

/* Build b's index arrays on the host: ids, pos, slot_base, rows [T]; slot_table [n_slots]
 * (each sequence's slots concatenated; slot_base[t] = where its sequence's part starts);
 * lrows [nb_batch_logit_rows(b)] (token index of each logits row). */
void nb_forward_fill_index(const nb_batch *b, int32_t *ids, int32_t *pos, int32_t *slot_base, int32_t *slot_table,
                           int32_t *rows, int32_t *lrows);

/* The step's index arrays in the model's memory (device memory on CUDA). */
typedef struct nb_fwd_index {
    const int32_t *ids, *pos, *slot_base, *slot_table, *rows, *lrows;
    int dsa_live; /* nb_forward_dsa_live of the step's batch */
    int long_ctx; /* nb_forward_long_ctx of the step's batch (nb_attn_index.long_ctx) */
    int max_ctx;  /* nb_attn_index.max_ctx: the batch's largest start_pos + n_tokens, or 0 (graphs) */
} nb_fwd_index;

/* 1 when some token of the batch sits at a position >= index_topk on a DSA model, so its
 * selection can leave positions out; 0 otherwise (every token attends to every earlier
 * position whatever the index scores): the pass then skips the indexer's query side and
 * runs the weights flagged NB_WEIGHT_FEEDS_DSA at the backend's usual precision (ops.h). */
int nb_forward_dsa_live(const nb_model *m, const nb_batch *b);

/* 1 when some token of the batch attends to at least nb_forward_long_ctx_default(its heads,
 * the step's tokens) positions (its position + 1; NIBBLE_MLA_LONG_CTX=N sets one threshold for
 * every shape, nb_forward_force_long_ctx another still) on an MLA model (GLM-5, DeepSeek-V3); 0
 * otherwise. The attention op's hint (ops.h nb_attn_index.long_ctx): on BF16 pools the CUDA
 * backend runs its float32 MLA kernel for steps of 1-2 tokens over short contexts and its
 * wgmma kernel over long ones (docs/cuda-backend.md, "The automatic MLA kernel on BF16 pools"). */
int nb_forward_long_ctx(const nb_model *m, const nb_batch *b);
/* Where wgmma overtakes float32, measured on an H100 (bench/RESULTS.md, issue 9, "Twenty-fifth
 * session"): float32's time steps up every 256 positions (two tokens, or 128 heads) or jumps past
 * 512 (one token at 64 heads), while wgmma's grows slowly. Two tokens, or one at 128+ heads:
 * NB_FWD_LONG_CTX_WIDE; one token at fewer heads, and 3+ tokens (wgmma whatever the hint; the
 * threshold only keys graphs there): NB_FWD_LONG_CTX. */
#define NB_FWD_LONG_CTX 512
#define NB_FWD_LONG_CTX_WIDE 257
int nb_forward_long_ctx_default(int n_heads, int64_t n_tokens);

/* Tests: the threshold of nb_forward_long_ctx (positions >= 1), or <= 0 for the environment's
 * or the default. */
void nb_forward_force_long_ctx(int positions);

/* Enqueue one step of T tokens whose index arrays are already in the model's memory,
 * writing R logit rows to `logits` ([R, vocab], model memory). The activations live in
 * scratch slot NB_FWD_ACT_SLOT sized by T and R alone, so for a fixed (T, R) and scratch
 * that has already grown to this size every pointer is the same from call to call, nothing
 * is allocated and nothing waits for the device: a CUDA graph can capture the call and
 * replay it with new index contents. Index contents are not validated here
 * (nb_forward_check is the caller's). No NB_DUMP output. */
nb_status nb_forward_enqueue(nb_model *m, nb_kv_pool *pool, int T, int R, const nb_fwd_index *ix, float *logits);

#endif

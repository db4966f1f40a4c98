/* The engine's runner on one GPU (see runner.h for the contract; cuda_runner.c). */
#ifndef NB_ENGINE_CUDA_RUNNER_H
#define NB_ENGINE_CUDA_RUNNER_H

#include "engine/runner.h"

/* How the runner runs steps. */
typedef struct nb_cuda_runner_opts {
    int device;          /* CUDA device ordinal */
    int graph_max_bs;    /* --cuda-graph-max-bs: largest decode batch replayed from a CUDA graph;
                            0: NB_CUDA_GRAPH_DEFAULT_MAX_BS (256) */
    int disable_graph;   /* --disable-cuda-graph: every step eager */
    nb_kv_cache_dtype kv_cache_dtype; /* --kv-cache-dtype: the pool's MLA latent rows */
} nb_cuda_runner_opts;

/* Load `spec` (folder or synthetic:...), copy its weights to GPU o->device and make a runner
 * whose KV pool lives there. *kv_budget_bytes: the GPU's memory (the runner's weight_bytes is
 * all device memory in use once the model is resident, so the engine's budget * fraction -
 * weights leaves the rest to the KV pool). mem_fraction is unused here. NB_ERR_CUDA /
 * NB_ERR_UNSUPPORTED without a GPU or a CUDA build; NB_ERR_INVALID_ARG for graph_max_bs out
 * of range.
 * Steps: decode-only batches (one token per sequence) of up to graph_max_bs sequences replay
 * a CUDA graph of the next captured size (engine/cuda_graph.h: sizes, padding), captured
 * lazily the first time a size is used with the batch's attention class (a dense step over
 * short or long contexts, or a live DSA selection: the kernels differ; that step runs eagerly,
 * then the capture follows);
 * other steps run eagerly (nb_forward). forward(r, b, NULL) keeps the logits on the device:
 * nb_cuda_runner_logits then gives them. The KV pool has one slot more than reserve_kv asks
 * for: the padding rows' scratch slot. */
nb_status nb_cuda_runner_create(const char *spec, const nb_cuda_runner_opts *o, double mem_fraction, nb_runner **out,
                                double *kv_budget_bytes);

/* The last step's logits in device memory, [*rows, vocab] F32 (row i: sequence i of that
 * batch), valid until the next forward; NULL before the first step or after a failed one.
 * After forward(r, b, NULL) they may still be being computed on the stream of
 * nb_cuda_runner_ops(r): read them with work queued on that stream, or after nb_ops_sync /
 * through nb_ops_download on that context. */
const float *nb_cuda_runner_logits(const nb_runner *r, int *rows);
/* The ops context (stream, scratch) the runner's model runs on. */
nb_ops_ctx *nb_cuda_runner_ops(const nb_runner *r);

/* What the runner did with CUDA graphs so far (for logs, tests and benchmarks). */
typedef struct nb_cuda_graph_stats {
    int enabled;             /* graphs on (a CUDA runner without --disable-cuda-graph) */
    int max_bs, n_sizes;     /* largest captured size, number of sizes */
    int captured;            /* graphs held now (a size holds one per attention class: cuda_runner.c) */
    int64_t replays;         /* steps run by replaying a graph */
    int64_t captures;        /* captures made (a size is captured again when scratch moved) */
    int64_t capture_failures;
    int64_t eager_steps;     /* steps run eagerly (prefill, mixed, too large, first use of a size) */
    int64_t padded_rows;     /* dummy rows replayed in all */
    double capture_ms;       /* time spent capturing and instantiating, in all */
} nb_cuda_graph_stats;
void nb_cuda_runner_graph_stats(const nb_runner *r, nb_cuda_graph_stats *out);

/* The pieces of the runner, for nibble score and tests: the host-bound model and its device
 * twin (cfg / ck / owns_cfg are filled for synthetic specs, to be freed after both models). */
nb_status nb_cuda_model_load(const char *spec, int device, nb_model **host, nb_model **dev, nb_model_config *cfg,
                             nb_checkpoint **ck, int *owns_cfg);

/* A KV pool (engine/forward.h layout) in the memory of `ops`'s backend, zeroed. */
nb_status nb_kv_pool_init_on(nb_kv_pool *pool, const nb_model_config *cfg, nb_dtype lat_dtype, int64_t n_slots,
                             nb_ops_ctx *ops);
void nb_kv_pool_free_on(nb_kv_pool *pool, nb_ops_ctx *ops);

#endif

/* The engine's runner on one GPU (runner.h contract): the model is bound on the host as the
 * CPU runner does (a folder mapped from disk, or a synthetic checkpoint generated in host
 * memory), then its device twin is made by nb_model_upload (model/upload.h) and the KV pool
 * is allocated in device memory; nb_forward runs every op on the GPU and only the logits
 * come back. Decode-only steps replay CUDA graphs (one per captured batch size, see
 * engine/cuda_graph.h for the sizes and the padding): the step's index arrays go through a
 * pinned staging area with one asynchronous copy to a fixed device area the graph reads,
 * then the graph is launched; the logits stay in a fixed device buffer.
 * Built by nb_engine_create for --backend cuda. Exercised by nibble generate /
 * bench-offline / serve --backend cuda and tests/cuda_ops/test_cuda_graph.c. */
#include "engine/cuda_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/cuda_graph.h"
#include "engine/dev_sample.h"
#include "engine/fwd_dump.h"
#include "model/synthetic.h"
#include "model/upload.h"
#include "ops/profile.h"
#if NIBBLE_HAVE_CUDA
#include "ops/cuda/device.h"
#include "ops/cuda/graph.h"
#endif

/* Scratch slots a captured step reads (the ops' 0..3, the activations, and the ops' slots of
 * a side branch, 8..11: graph.h): the graph is valid while none of them has moved. */
#define CR_GRAPH_SLOTS (NB_FWD_ACT_SLOT + 1)
#if NIBBLE_HAVE_CUDA
#define CR_SCRATCH_KEY (CR_GRAPH_SLOTS + NB_CUDA_SCRATCH_PTRS - 8)
#else
#define CR_SCRATCH_KEY CR_GRAPH_SLOTS
#endif

/* A size holds up to three graphs, one per attention class of the step's batch (the kernels a
 * step captures follow it: forward.h nb_forward_dsa_live, nb_forward_long_ctx): 0 dense over
 * short contexts, 1 dense over long ones, 2 a live DSA selection (long by construction). */
#define CR_CLASSES 3
#if NIBBLE_HAVE_CUDA
static int cr_class(int dsa_live, int long_ctx) { return dsa_live ? 2 : long_ctx ? 1 : 0; }
#endif

typedef struct cr_graph {
#if NIBBLE_HAVE_CUDA
    nb_cuda_graph *g;
#endif
    void *scratch[CR_SCRATCH_KEY]; /* scratch pointers at capture (cr_scratch_key) */
    int failed;                    /* capture failed: this size runs eagerly */
} cr_graph;

typedef struct nb_cuda_runner {
    nb_runner base;
    nb_model *host, *dev;
    nb_model_config cfg; /* synthetic: owned here */
    nb_checkpoint *ck;   /* synthetic: owned here */
    int owns_cfg;
    nb_kv_pool pool;     /* device memory; n_slots = engine_slots + 1 (the dummy rows' slot) */
    int64_t engine_slots;
    const float *last_logits;
    int last_rows;
    /* CUDA graphs */
    int graphs_on;
    nb_graph_sizes sizes;
    cr_graph graph[CR_CLASSES * NB_CUDA_GRAPH_MAX_SIZES]; /* [size index * CR_CLASSES + cr_class] */
    int max_bs;
    int64_t slot_cap;   /* slot-table entries the index image holds */
    int32_t *gidx;      /* device index image (cuda_graph.h layout) */
    float *glogits;     /* device [max_bs, vocab] */
#if NIBBLE_HAVE_CUDA
    nb_cuda_staging *stage; /* pinned host twin of gidx */
#endif
    nb_cuda_graph_stats stats;
    nb_dev_sampler smp; /* GPU sampling (runner.h sample hook, engine/dev_sample.h) */
    nb_dtype lat_dtype; /* the pool's MLA latent rows (--kv-cache-dtype) */
} nb_cuda_runner;

nb_status nb_kv_pool_init_on(nb_kv_pool *pool, const nb_model_config *cfg, nb_dtype lat_dtype, int64_t n_slots,
                             nb_ops_ctx *ops)
{
    memset(pool, 0, sizeof *pool);
    if (n_slots <= 0) return nb_error(NB_ERR_INVALID_ARG, "kv: pool of %lld slots", (long long)n_slots);
    NB_TRY(nb_kv_layout_for(cfg, lat_dtype, &pool->layout));
    pool->n_slots = n_slots;
    pool->device = nb_ops_ctx_device(ops);
    for (int l = 0; l < pool->layout.n_layers; l++) {
        size_t bytes = (size_t)n_slots * (size_t)pool->layout.layer[l].row_bytes;
        pool->layer[l] = nb_ops_alloc(ops, bytes);
        if (!pool->layer[l] || nb_ops_memset(ops, pool->layer[l], 0, bytes) != NB_OK) {
            nb_kv_pool_free_on(pool, ops);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "kv: %lld slots x %lld bytes for layer %d on the device",
                            (long long)n_slots, (long long)pool->layout.layer[l].row_bytes, l);
        }
    }
    return NB_OK;
}

void nb_kv_pool_free_on(nb_kv_pool *pool, nb_ops_ctx *ops)
{
    for (int l = 0; l < NB_MAX_LAYERS; l++) {
        nb_ops_free(ops, pool->layer[l]);
        pool->layer[l] = NULL;
    }
    pool->n_slots = 0;
}

static void cr_drop_graphs(nb_cuda_runner *m)
{
    int any = 0;
#if NIBBLE_HAVE_CUDA
    for (int i = 0; i < CR_CLASSES * NB_CUDA_GRAPH_MAX_SIZES; i++) any |= m->graph[i].g != NULL;
    /* a replay may still be running: let it finish before its executable goes */
    if (any && m->dev) nb_ops_sync(m->dev->ops);
#endif
    for (int i = 0; i < CR_CLASSES * NB_CUDA_GRAPH_MAX_SIZES; i++) {
#if NIBBLE_HAVE_CUDA
        nb_cuda_graph_free(m->graph[i].g);
#endif
        memset(&m->graph[i], 0, sizeof m->graph[i]);
    }
    (void)any;
}

static void cr_free_graph_buffers(nb_cuda_runner *m)
{
    cr_drop_graphs(m);
    if (!m->dev) return;
    nb_ops_free(m->dev->ops, m->gidx);
    nb_ops_free(m->dev->ops, m->glogits);
    m->gidx = NULL;
    m->glogits = NULL;
#if NIBBLE_HAVE_CUDA
    nb_cuda_staging_free(m->stage);
    m->stage = NULL;
#endif
    m->slot_cap = 0;
}

#if NIBBLE_HAVE_CUDA
/* The index image's device area and pinned twin, for at least `entries` slot-table entries.
 * Graphs hold the old area's address: growing drops them. */
static nb_status cr_index_area(nb_cuda_runner *m, int64_t entries)
{
    if (entries <= m->slot_cap && m->gidx) return NB_OK;
    /* first 64 Ki entries (or the whole pool once, if smaller), then doubling. Sizing it for
     * the pool at once (10 M entries on a 4-layer GLM-5 with 106 GiB of KV) cost ~10 ms of
     * pinning in the first decode step on the H200 (decode p99 6 -> 15 ms). */
    const int64_t first = NB_MIN(m->engine_slots + m->max_bs + 1, (int64_t)1 << 16);
    int64_t cap = m->gidx ? NB_MAX(entries, 2 * m->slot_cap) : NB_MAX(entries, first);
    nb_ops_ctx *ops = m->dev->ops;
    if (m->gidx) NB_LOG_DEBUG("cuda", "graph index area: %lld -> %lld slot entries; graphs recaptured",
                              (long long)m->slot_cap, (long long)cap);
    cr_drop_graphs(m);
    nb_ops_free(ops, m->gidx);
    nb_cuda_staging_free(m->stage);
    m->gidx = NULL;
    m->stage = NULL;
    m->slot_cap = 0;
    const size_t bytes = (size_t)(nb_graph_image_layout_for(m->max_bs).slot_table + cap) * sizeof(int32_t);
    NB_TRY(nb_cuda_staging_new(bytes, &m->stage));
    m->gidx = nb_ops_alloc(ops, bytes);
    if (!m->gidx) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "cuda graph: index area of %zu bytes", bytes);
    m->slot_cap = cap;
    return NB_OK;
}

static void cr_scratch_key(nb_ops_ctx *ops, void *key[CR_SCRATCH_KEY])
{
    void *now[NB_CUDA_SCRATCH_PTRS];
    nb_cuda_scratch_ptrs(ops, now);
    for (int i = 0; i < CR_GRAPH_SLOTS; i++) key[i] = now[i];
    for (int i = 8; i < NB_CUDA_SCRATCH_PTRS; i++) key[CR_GRAPH_SLOTS + i - 8] = now[i];
}

static int cr_graph_fresh(nb_cuda_runner *m, const cr_graph *g)
{
    void *now[CR_SCRATCH_KEY];
    cr_scratch_key(m->dev->ops, now);
    return !memcmp(now, g->scratch, sizeof g->scratch);
}

/* Capture the step already run eagerly at this size (the eager run grew every scratch slot
 * and made every lazily created table, so the capture neither allocates nor waits). A
 * failure leaves the size eager for good, with a warning. */
static void cr_capture(nb_cuda_runner *m, int gi, const nb_fwd_index *ix)
{
    cr_graph *g = &m->graph[CR_CLASSES * gi + cr_class(ix->dsa_live, ix->long_ctx)];
    const int bs = m->sizes.bs[gi];
    nb_ops_ctx *ops = m->dev->ops;
    int64_t t0 = nb_now_ns();
    nb_status st = nb_cuda_graph_begin(ops);
    char why[256] = "";
    if (st == NB_OK) {
        nb_status fs = nb_forward_enqueue(m->dev, &m->pool, bs, bs, ix, m->glogits);
        if (fs != NB_OK) snprintf(why, sizeof why, "%s", nb_last_error());
        st = nb_cuda_graph_end(ops, fs == NB_OK, &g->g);
        if (st == NB_OK && !g->g) st = NB_ERR_CUDA;
    }
    if (st != NB_OK || !g->g) {
        if (!why[0]) snprintf(why, sizeof why, "%s", nb_last_error());
        g->failed = 1;
        m->stats.capture_failures++;
        NB_LOG_WARN("cuda", "no CUDA graph for decode batch %d (%s): those steps run eagerly", bs, why);
        return;
    }
    cr_scratch_key(ops, g->scratch);
    const double ms = (double)(nb_now_ns() - t0) * 1e-6;
    m->stats.captures++;
    m->stats.capture_ms += ms;
    NB_LOG_INFO("cuda", "CUDA graph for decode batch %d%s: %d nodes captured in %.1f ms", bs,
                ix->dsa_live ? " (DSA selection live)" : ix->long_ctx ? " (long context)" : "", nb_cuda_graph_nodes(g->g),
                ms);
}

/* A decode-only step of n <= max_bs sequences through the graph of size bucket gi. */
static nb_status cr_graph_step(nb_cuda_runner *m, const nb_batch *b, int gi, float *logits)
{
    nb_ops_ctx *ops = m->dev->ops;
    const int bs = m->sizes.bs[gi], n = b->n_seqs, V = m->dev->cfg.vocab_size;
    /* the engine's slots only: the dummy slot is ours */
    nb_kv_pool check_pool = m->pool;
    check_pool.n_slots = m->engine_slots;
    int T;
    int64_t n_slots;
    NB_TRY(nb_forward_check(m->dev, &check_pool, b, &T, &n_slots));
    NB_TRY(cr_index_area(m, nb_graph_slot_entries(b)));
    NB_TRY(nb_cuda_staging_wait(m->stage)); /* the previous step's copy has left the staging area */
    int64_t elems;
    NB_TRY(nb_graph_fill_image(b, bs, m->max_bs, (int32_t)m->engine_slots, nb_cuda_staging_host(m->stage), m->slot_cap,
                               &elems));
    NB_TRY(nb_cuda_staging_copy(ops, m->stage, m->gidx, (size_t)elems * sizeof(int32_t)));
    const nb_graph_image_layout L = nb_graph_image_layout_for(m->max_bs);
    const nb_fwd_index ix = {m->gidx + L.ids,        m->gidx + L.pos,  m->gidx + L.slot_base,
                             m->gidx + L.slot_table, m->gidx + L.rows, m->gidx + L.lrows,
                             nb_forward_dsa_live(m->dev, b), nb_forward_long_ctx(m->dev, b), 0};
    cr_graph *g = &m->graph[CR_CLASSES * gi + cr_class(ix.dsa_live, ix.long_ctx)];
    if (g->g && !cr_graph_fresh(m, g)) { /* an eager step grew the scratch it reads */
        NB_TRY(nb_ops_sync(ops));          /* its last replay may still be running */
        nb_cuda_graph_free(g->g);
        g->g = NULL;
    }
    if (g->g) {
        NB_TRY(nb_cuda_graph_launch(ops, g->g));
        m->stats.replays++;
        m->stats.padded_rows += bs - n;
    } else {
        NB_TRY(nb_forward_enqueue(m->dev, &m->pool, bs, bs, &ix, m->glogits));
        m->stats.eager_steps++;
        cr_capture(m, gi, &ix);
    }
    m->last_logits = m->glogits;
    m->last_rows = n;
    if (logits) return nb_ops_download(ops, logits, m->glogits, (size_t)n * (size_t)V * sizeof(float));
    return NB_OK;
}
#endif

static nb_status cr_forward(nb_runner *r, const nb_batch *b, float *logits)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    m->last_logits = NULL;
    m->last_rows = 0;
    /* a profiled step (ops/profile.h) runs eagerly: events inside a capture would time nothing */
    const int prof = nb_ops_profile_step_begin(m->dev->ops, nb_graph_batch_is_decode(b), b->n_seqs);
#if NIBBLE_HAVE_CUDA
    /* NB_DUMP needs the eager pass (it downloads intermediates) */
    if (!prof && m->graphs_on && nb_graph_batch_is_decode(b) && !nb_dump_enabled()) {
        int gi = nb_graph_bucket(&m->sizes, b->n_seqs);
        const int cl = cr_class(nb_forward_dsa_live(m->dev, b), nb_forward_long_ctx(m->dev, b));
        if (gi >= 0 && !m->graph[CR_CLASSES * gi + cl].failed)
            return cr_graph_step(m, b, gi, logits);
    }
#endif
    float *dl;
    nb_status fs = nb_forward_keep(m->dev, &m->pool, b, &dl);
    if (prof) {
        nb_status ps = nb_ops_profile_step_end(m->dev->ops);
        if (fs == NB_OK) fs = ps;
    }
    NB_TRY(fs);
    m->stats.eager_steps++;
    m->last_logits = dl;
    m->last_rows = nb_batch_logit_rows(b);
    if (logits)
        return nb_ops_download(m->dev->ops, logits, dl, (size_t)m->last_rows * (size_t)m->dev->cfg.vocab_size * sizeof(float));
    return NB_OK;
}

/* Sampling on the GPU over the logits the last forward(NULL) left there (runner.h). */
static nb_status cr_sample(nb_runner *r, int n, const nb_sample_params *params, const nb_sample_hist *hist,
                           nb_sample_out *out)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    return nb_dev_sample(&m->smp, m->dev->ops, (float *)m->last_logits, m->last_rows, m->dev->cfg.vocab_size, n,
                         params, hist, out);
}

static nb_status cr_reserve(nb_runner *r, int64_t n_slots)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    cr_free_graph_buffers(m); /* graphs hold the old pool's addresses */
    nb_kv_pool_free_on(&m->pool, m->dev->ops);
    m->engine_slots = 0;
    if (n_slots <= 0) return nb_error(NB_ERR_INVALID_ARG, "kv: pool of %lld slots", (long long)n_slots);
    NB_TRY(nb_kv_pool_init_on(&m->pool, &m->dev->cfg, m->lat_dtype, n_slots + 1, m->dev->ops));
    m->engine_slots = n_slots;
    if (m->graphs_on) {
        m->glogits = nb_ops_alloc(m->dev->ops, (size_t)m->max_bs * (size_t)m->dev->cfg.vocab_size * sizeof(float));
        if (!m->glogits) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "cuda graph: logits of %d rows", m->max_bs);
    }
    return NB_OK;
}

static void cr_destroy(nb_runner *r)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    if (m->graphs_on && (m->stats.replays || m->stats.captures))
        NB_LOG_INFO("cuda", "CUDA graphs: %lld replays, %lld eager steps, %lld captures (%.0f ms), %lld padding rows",
                    (long long)m->stats.replays, (long long)m->stats.eager_steps, (long long)m->stats.captures,
                    m->stats.capture_ms, (long long)m->stats.padded_rows);
    if (m->dev) {
        cr_free_graph_buffers(m);
        nb_dev_sampler_free(&m->smp, m->dev->ops);
        nb_kv_pool_free_on(&m->pool, m->dev->ops);
        nb_model_upload_free(m->dev);
    }
    nb_model_free(m->host);
    if (m->owns_cfg) {
        nb_checkpoint_close(m->ck);
        nb_model_config_free(&m->cfg);
    }
    free(m);
}

nb_ops_ctx *nb_cuda_runner_ops(const nb_runner *r) { return ((const nb_cuda_runner *)r)->dev->ops; }

const float *nb_cuda_runner_logits(const nb_runner *r, int *rows)
{
    const nb_cuda_runner *m = (const nb_cuda_runner *)r;
    if (rows) *rows = m->last_rows;
    return m->last_logits;
}

void nb_cuda_runner_graph_stats(const nb_runner *r, nb_cuda_graph_stats *out)
{
    const nb_cuda_runner *m = (const nb_cuda_runner *)r;
    *out = m->stats;
    out->enabled = m->graphs_on;
    out->max_bs = m->graphs_on ? m->max_bs : 0;
    out->n_sizes = m->graphs_on ? m->sizes.n : 0;
    out->captured = 0;
#if NIBBLE_HAVE_CUDA
    for (int i = 0; i < CR_CLASSES * m->sizes.n; i++) out->captured += m->graph[i].g != NULL;
#endif
}

nb_status nb_cuda_model_load(const char *spec, int device, nb_model **host, nb_model **dev, nb_model_config *cfg,
                             nb_checkpoint **ck, int *owns_cfg)
{
    *host = *dev = NULL;
    *owns_cfg = 0;
    nb_model_params mp = nb_model_default_params();
    mp.n_threads = 1;
    nb_status st;
    nb_synth_deferred *plan = NULL;
    if (nb_synthetic_is(spec)) {
        /* Generated on the GPU, nothing of the model's size on the host (model/synthetic.h);
         * NIBBLE_SYNTHETIC_ON_HOST=1 keeps the host generator and the upload, for A/B runs. */
        const char *on_host = getenv("NIBBLE_SYNTHETIC_ON_HOST");
        st = on_host && !strcmp(on_host, "1") ? nb_synthetic_build(spec, cfg, ck)
                                               : nb_synthetic_build_deferred(spec, cfg, ck, &plan);
        if (st == NB_OK) {
            *owns_cfg = 1;
            st = nb_model_from_checkpoint(cfg, *ck, &mp, host);
        }
    } else {
        st = nb_model_load(spec, &mp, host);
    }
    nb_ops_ctx *ctx = NULL;
    if (st == NB_OK) st = nb_ops_ctx_new_cuda(device, &ctx);
    if (st == NB_OK) st = plan ? nb_model_upload_deferred(*host, plan, ctx, dev) : nb_model_upload(*host, ctx, dev);
    nb_synthetic_deferred_free(plan);
    return st;
}

nb_status nb_cuda_runner_create(const char *spec, const nb_cuda_runner_opts *o, double mem_fraction, nb_runner **out,
                                double *kv_budget_bytes)
{
    *out = NULL;
    const int device = o->device;
    nb_graph_sizes sizes;
    NB_TRY(nb_graph_sizes_for(o->graph_max_bs, &sizes)); /* the flag is checked before the model loads */
    nb_cuda_runner *m = calloc(1, sizeof *m);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda runner");
    m->sizes = sizes;
    m->max_bs = sizes.bs[sizes.n - 1];
    m->graphs_on = !o->disable_graph;
    nb_status st = nb_cuda_model_load(spec, device, &m->host, &m->dev, &m->cfg, &m->ck, &m->owns_cfg);
    if (st != NB_OK) {
        cr_destroy(&m->base);
        return st;
    }
    const nb_model_config *c = &m->dev->cfg;
    nb_kv_layout lay;
    st = nb_kv_lat_dtype(o->kv_cache_dtype, c, 1, &m->lat_dtype);
    if (st == NB_OK) st = nb_kv_layout_for(c, m->lat_dtype, &lay);
    if (st == NB_OK && c->attn == NB_ATTN_MLA)
        NB_LOG_INFO("cuda", "KV cache: MLA latent and rope key in %s, DSA index keys float32 (--kv-cache-dtype)",
                    m->lat_dtype == NB_DTYPE_BF16 ? "bfloat16" : "float32");
    if (st != NB_OK) {
        cr_destroy(&m->base);
        return st;
    }
    const int64_t per_token = nb_kv_layout_bytes(&lay);
    /* The engine sizes the KV pool as budget * mem_fraction - weight_bytes: the budget is the
     * GPU's memory and "weights" all that is in use once the model is resident. */
    double in_use = 0;
    *kv_budget_bytes = 0;
#if NIBBLE_HAVE_CUDA
    size_t fr = 0, tot = 0;
    if (nb_cuda_mem_info(device, &fr, &tot) == NB_OK) {
        *kv_budget_bytes = (double)tot;
        in_use = (double)(tot - fr);
    }
#endif
    (void)mem_fraction;
    nb_runner *r = &m->base;
    r->forward = cr_forward;
    r->sample = cr_sample;
    r->reserve_kv = cr_reserve;
    r->destroy = cr_destroy;
    r->vocab_size = c->vocab_size;
    r->context_length = c->max_position_embeddings;
    r->kv_bytes_per_token = per_token;
    r->weight_bytes = in_use;
    /* the forward's activation block per token (a logit row each: an upper bound) */
    r->act_bytes_per_token = (int64_t)(nb_fwd_act_bytes(c, 4096, 4096) / 4096) + 1;
    r->n_eos = NB_MIN(c->n_eos, 8);
    memcpy(r->eos_ids, c->eos_ids, (size_t)r->n_eos * sizeof(int));
    r->bos_id = c->bos_id;
    snprintf(r->model_type, sizeof r->model_type, "%s", c->model_type[0] ? c->model_type : nb_arch_name(c->arch));
    if (m->graphs_on)
        NB_LOG_INFO("cuda", "CUDA graphs for decode steps of up to %d sequences (%d sizes, each captured on first use)",
                    m->max_bs, m->sizes.n);
    else
        NB_LOG_INFO("cuda", "CUDA graphs off (--disable-cuda-graph): every step runs eagerly");
    *out = r;
    return NB_OK;
}

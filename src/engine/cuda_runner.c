/* The engine's runner on one GPU (runner.h contract): the model is bound on the host as the
 * CPU runner does (a folder mapped from disk, or a synthetic checkpoint generated in host
 * memory), then its device twin is made by nb_model_upload (model/upload.h) and the KV pool
 * is allocated in device memory; nb_forward runs every op on the GPU and only the logits
 * come back. Built by nb_engine_create for --backend cuda. Exercised by nibble generate /
 * bench-offline / serve --backend cuda and tests/cuda_ops/test_cuda_forward.c. */
#include "engine/cuda_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/synthetic.h"
#include "model/upload.h"
#if NIBBLE_HAVE_CUDA
#include "ops/cuda/device.h"
#endif

typedef struct nb_cuda_runner {
    nb_runner base;
    nb_model *host, *dev;
    nb_model_config cfg; /* synthetic: owned here */
    nb_checkpoint *ck;   /* synthetic: owned here */
    int owns_cfg;
    nb_kv_pool pool;     /* device memory */
} nb_cuda_runner;

nb_status nb_kv_pool_init_on(nb_kv_pool *pool, const nb_model_config *cfg, int64_t n_slots, nb_ops_ctx *ops)
{
    memset(pool, 0, sizeof *pool);
    if (n_slots <= 0) return nb_error(NB_ERR_INVALID_ARG, "kv: pool of %lld slots", (long long)n_slots);
    NB_TRY(nb_kv_layout_for(cfg, &pool->layout));
    pool->n_slots = n_slots;
    pool->device = nb_ops_ctx_device(ops);
    pool->dtype = NB_DTYPE_F32;
    for (int l = 0; l < pool->layout.n_layers; l++) {
        size_t bytes = (size_t)n_slots * (size_t)pool->layout.layer[l].row_floats * sizeof(float);
        pool->layer[l] = nb_ops_alloc(ops, bytes);
        if (!pool->layer[l] || nb_ops_memset(ops, pool->layer[l], 0, bytes) != NB_OK) {
            nb_kv_pool_free_on(pool, ops);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "kv: %lld slots x %lld floats for layer %d on the device",
                            (long long)n_slots, (long long)pool->layout.layer[l].row_floats, l);
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

static nb_status cr_forward(nb_runner *r, const nb_batch *b, float *logits)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    return nb_forward(m->dev, &m->pool, b, logits);
}

static nb_status cr_reserve(nb_runner *r, int64_t n_slots)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    nb_kv_pool_free_on(&m->pool, m->dev->ops);
    return nb_kv_pool_init_on(&m->pool, &m->dev->cfg, n_slots, m->dev->ops);
}

static void cr_destroy(nb_runner *r)
{
    nb_cuda_runner *m = (nb_cuda_runner *)r;
    if (m->dev) {
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

nb_status nb_cuda_model_load(const char *spec, int device, nb_model **host, nb_model **dev, nb_model_config *cfg,
                             nb_checkpoint **ck, int *owns_cfg)
{
    *host = *dev = NULL;
    *owns_cfg = 0;
    nb_model_params mp = nb_model_default_params();
    mp.n_threads = 1;
    nb_status st;
    if (nb_synthetic_is(spec)) {
        st = nb_synthetic_build(spec, cfg, ck);
        if (st == NB_OK) {
            *owns_cfg = 1;
            st = nb_model_from_checkpoint(cfg, *ck, &mp, host);
        }
    } else {
        st = nb_model_load(spec, &mp, host);
    }
    if (st != NB_OK) return st;
    nb_ops_ctx *ctx;
    NB_TRY(nb_ops_ctx_new_cuda(device, &ctx));
    return nb_model_upload(*host, ctx, dev);
}

nb_status nb_cuda_runner_create(const char *spec, int device, double mem_fraction, nb_runner **out,
                                double *kv_budget_bytes)
{
    *out = NULL;
    nb_cuda_runner *m = calloc(1, sizeof *m);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "cuda runner");
    nb_status st = nb_cuda_model_load(spec, device, &m->host, &m->dev, &m->cfg, &m->ck, &m->owns_cfg);
    if (st != NB_OK) {
        cr_destroy(&m->base);
        return st;
    }
    const nb_model_config *c = &m->dev->cfg;
    nb_kv_layout lay;
    st = nb_kv_layout_for(c, &lay);
    if (st != NB_OK) {
        cr_destroy(&m->base);
        return st;
    }
    int64_t per_token = 0;
    for (int l = 0; l < lay.n_layers; l++) per_token += lay.layer[l].row_floats * (int64_t)sizeof(float);
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
    r->reserve_kv = cr_reserve;
    r->destroy = cr_destroy;
    r->vocab_size = c->vocab_size;
    r->context_length = c->max_position_embeddings;
    r->kv_bytes_per_token = per_token;
    r->weight_bytes = in_use;
    r->n_eos = NB_MIN(c->n_eos, 8);
    memcpy(r->eos_ids, c->eos_ids, (size_t)r->n_eos * sizeof(int));
    r->bos_id = c->bos_id;
    snprintf(r->model_type, sizeof r->model_type, "%s", c->model_type[0] ? c->model_type : nb_arch_name(c->arch));
    *out = r;
    return NB_OK;
}

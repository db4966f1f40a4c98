/* The runner over a real model on the CPU backend: nb_forward (engine/forward.h) on a
 * loaded or synthetic model, with the KV pool sized by the engine. Built by
 * nb_model_runner_create (engine_create.c). Exercised by tests/engine/test_engine_cpu.c
 * and nibble generate / bench-offline. */
#include "engine/model_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/synthetic.h"
#include "ops/profile.h"

typedef struct nb_model_runner {
    nb_runner base;
    nb_model *model;
    nb_model_config cfg;  /* synthetic: owned here (the model borrows it) */
    nb_checkpoint *ck;    /* synthetic: owned here */
    int owns_cfg;
    nb_dtype lat_dtype; /* the pool's MLA latent rows */
    nb_kv_pool pool;
} nb_model_runner;

static nb_status nb_mr_forward(nb_runner *r, const nb_batch *b, float *logits)
{
    nb_model_runner *m = (nb_model_runner *)r;
    int decode_only = b->n_seqs > 0; /* bench-offline --profile-ops profiles decode-only steps */
    for (int s = 0; s < b->n_seqs; s++) decode_only &= b->seqs[s].n_tokens == 1;
    if (!nb_ops_profile_step_begin(m->model->ops, decode_only, b->n_seqs))
        return nb_forward(m->model, &m->pool, b, logits);
    nb_status st = nb_forward(m->model, &m->pool, b, logits);
    nb_status ps = nb_ops_profile_step_end(m->model->ops);
    return st != NB_OK ? st : ps;
}

static nb_status nb_mr_reserve(nb_runner *r, int64_t n_slots)
{
    nb_model_runner *m = (nb_model_runner *)r;
    nb_kv_pool_free(&m->pool);
    return nb_kv_pool_init(&m->pool, &m->model->cfg, m->lat_dtype, n_slots);
}

static void nb_mr_destroy(nb_runner *r)
{
    nb_model_runner *m = (nb_model_runner *)r;
    nb_kv_pool_free(&m->pool);
    nb_model_free(m->model);
    if (m->owns_cfg) {
        nb_checkpoint_close(m->ck);
        nb_model_config_free(&m->cfg);
    }
    free(m);
}

/* Parse a synthetic spec's config only, to size it before generating anything. */
static nb_status nb_synthetic_check_size(const char *spec, double max_bytes)
{
    if (max_bytes <= 0) return NB_OK;
    char *json = NULL;
    NB_TRY(nb_synthetic_config_json(spec, &json));
    nb_model_config c;
    nb_status st = nb_model_config_parse(spec, json, &c);
    free(json);
    if (st != NB_OK) return st;
    double need = nb_synthetic_weight_bytes(&c);
    nb_model_config_free(&c);
    if (need > max_bytes)
        return nb_error(NB_ERR_OUT_OF_MEMORY,
                        "model '%s': %.1f GiB of weights do not fit the %.1f GiB budget (raise --cpu-mem-gb or "
                        "shrink it, e.g. :num_hidden_layers=2,n_routed_experts=16)",
                        spec, need / 1073741824.0, max_bytes / 1073741824.0);
    return NB_OK;
}

nb_status nb_model_runner_create(const char *spec, int threads, nb_kv_cache_dtype kv, double max_weight_bytes,
                                 nb_runner **out)
{
    *out = NULL;
    nb_model_runner *m = calloc(1, sizeof *m);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "model runner");
    nb_model_params mp = nb_model_default_params();
    mp.n_threads = threads;
    nb_status st;
    if (nb_synthetic_is(spec)) {
        st = nb_synthetic_check_size(spec, max_weight_bytes);
        if (st == NB_OK) st = nb_synthetic_build(spec, &m->cfg, &m->ck);
        if (st == NB_OK) {
            m->owns_cfg = 1;
            st = nb_model_from_checkpoint(&m->cfg, m->ck, &mp, &m->model);
        }
    } else {
        st = nb_model_load(spec, &mp, &m->model);
    }
    if (st != NB_OK) {
        nb_mr_destroy(&m->base);
        return st;
    }
    const nb_model_config *c = &m->model->cfg;
    nb_kv_layout lay;
    st = nb_kv_lat_dtype(kv, c, 0, &m->lat_dtype);
    if (st == NB_OK) st = nb_kv_layout_for(c, m->lat_dtype, &lay);
    if (st != NB_OK) {
        nb_mr_destroy(&m->base);
        return st;
    }
    const int64_t per_token = nb_kv_layout_bytes(&lay);
    double wb = 0;
    const nb_checkpoint *ck = m->model->ck;
    for (int i = 0; i < nb_checkpoint_count(ck); i++) wb += (double)nb_checkpoint_at(ck, i)->nbytes;

    nb_runner *r = &m->base;
    r->forward = nb_mr_forward;
    r->reserve_kv = nb_mr_reserve;
    r->destroy = nb_mr_destroy;
    r->vocab_size = c->vocab_size;
    r->context_length = c->max_position_embeddings;
    r->kv_bytes_per_token = per_token;
    r->weight_bytes = wb;
    r->n_eos = NB_MIN(c->n_eos, 8);
    memcpy(r->eos_ids, c->eos_ids, (size_t)r->n_eos * sizeof(int));
    r->bos_id = c->bos_id;
    snprintf(r->model_type, sizeof r->model_type, "%s", c->model_type[0] ? c->model_type : nb_arch_name(c->arch));
    *out = r;
    return NB_OK;
}

/* The KV pool of engine/forward.h: per-layer row layouts for each family, and a pool of
 * rows in host memory. A contiguous per-sequence cache is a slot array base + p over it.
 * Exercised by tests/model/test_forward_props.c. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/forward.h"

nb_status nb_kv_layout_for(const nb_model_config *cfg, nb_kv_layout *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->num_layers <= 0 || cfg->num_layers > NB_MAX_LAYERS)
        return nb_error(NB_ERR_INVALID_ARG, "kv: %d layers", cfg->num_layers);
    out->n_layers = cfg->num_layers;
    for (int l = 0; l < cfg->num_layers; l++) {
        nb_kv_layer_layout *L = &out->layer[l];
        L->latent_off = L->kpe_off = L->index_off = L->k_off = L->v_off = -1;
        if (cfg->attn == NB_ATTN_MLA) {
            L->latent_off = 0;
            L->kpe_off = cfg->kv_lora_rank;
            L->row_floats = cfg->kv_lora_rank + cfg->qk_rope_head_dim;
            /* The indexer key only where the layer runs its own indexer ("full"); a "shared"
             * layer reuses the previous full layer's selection and keeps no keys. */
            if (cfg->arch == NB_ARCH_GLM_MOE_DSA && cfg->layer_has_indexer[l] && cfg->index_head_dim > 0) {
                L->index_off = L->row_floats;
                L->row_floats += cfg->index_head_dim;
            }
        } else {
            int64_t kv = (int64_t)cfg->num_kv_heads * cfg->head_dim;
            L->k_off = 0;
            L->v_off = kv;
            L->row_floats = 2 * kv;
        }
    }
    return NB_OK;
}

nb_status nb_kv_pool_init(nb_kv_pool *pool, const nb_model_config *cfg, int64_t n_slots)
{
    memset(pool, 0, sizeof *pool);
    if (n_slots <= 0) return nb_error(NB_ERR_INVALID_ARG, "kv: pool of %lld slots", (long long)n_slots);
    NB_TRY(nb_kv_layout_for(cfg, &pool->layout));
    pool->n_slots = n_slots;
    pool->device = NB_DEVICE_CPU;
    pool->dtype = NB_DTYPE_F32;
    for (int l = 0; l < pool->layout.n_layers; l++) {
        pool->layer[l] = calloc((size_t)n_slots * (size_t)pool->layout.layer[l].row_floats, sizeof(float));
        if (!pool->layer[l]) {
            nb_kv_pool_free(pool);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "kv: %lld slots x %lld floats for layer %d", (long long)n_slots,
                            (long long)pool->layout.layer[l].row_floats, l);
        }
    }
    return NB_OK;
}

void nb_kv_pool_free(nb_kv_pool *pool)
{
    for (int l = 0; l < NB_MAX_LAYERS; l++) {
        free(pool->layer[l]);
        pool->layer[l] = NULL;
    }
    pool->n_slots = 0;
}

int64_t nb_kv_row_floats(const nb_kv_pool *pool, int layer) { return pool->layout.layer[layer].row_floats; }
size_t nb_kv_row_bytes(const nb_kv_pool *pool, int layer)
{
    return (size_t)pool->layout.layer[layer].row_floats * nb_dtype_size(pool->dtype);
}
size_t nb_kv_bytes_per_slot(const nb_kv_pool *pool)
{
    size_t b = 0;
    for (int l = 0; l < pool->layout.n_layers; l++) b += nb_kv_row_bytes(pool, l);
    return b;
}

int nb_batch_logit_rows(const nb_batch *b)
{
    int r = 0;
    for (int s = 0; s < b->n_seqs; s++) r += b->seqs[s].all_logits ? b->seqs[s].n_tokens : 1;
    return r;
}

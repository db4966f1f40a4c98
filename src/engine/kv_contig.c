/* The KV pool of engine/forward.h: per-layer row layouts for each family, and a pool of
 * rows in host memory. A contiguous per-sequence cache is a slot array base + p over it.
 * Exercised by tests/model/test_forward_props.c. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/forward.h"

/* n bytes rounded up to a 16-byte boundary when the row's dims allow it (they do for every
 * family's real dims; a tiny test config may leave a part unaligned, which the kernels check). */
static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

nb_status nb_kv_layout_for(const nb_model_config *cfg, nb_dtype lat_dtype, nb_kv_layout *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->num_layers <= 0 || cfg->num_layers > NB_MAX_LAYERS)
        return nb_error(NB_ERR_INVALID_ARG, "kv: %d layers", cfg->num_layers);
    if (lat_dtype != NB_DTYPE_F32 && lat_dtype != NB_DTYPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "kv: latent rows of %s (float32 or bfloat16)", nb_dtype_name(lat_dtype));
    if (lat_dtype == NB_DTYPE_BF16 && cfg->attn != NB_ATTN_MLA)
        return nb_error(NB_ERR_INVALID_ARG, "--kv-cache-dtype bfloat16: only MLA models keep BF16 rows (this one's "
                                            "attention keeps float32 K and V)");
    out->n_layers = cfg->num_layers;
    const int64_t es = (int64_t)nb_dtype_size(lat_dtype);
    for (int l = 0; l < cfg->num_layers; l++) {
        nb_kv_layer_layout *L = &out->layer[l];
        L->latent_at = L->kpe_at = L->index_at = L->k_at = L->v_at = -1;
        L->lat_dtype = NB_DTYPE_F32;
        if (cfg->attn == NB_ATTN_MLA) {
            L->lat_dtype = lat_dtype;
            L->latent_at = 0;
            L->kpe_at = (int64_t)cfg->kv_lora_rank * es;
            L->row_bytes = (int64_t)(cfg->kv_lora_rank + cfg->qk_rope_head_dim) * es;
            /* The indexer key only where the layer runs its own indexer ("full"); a "shared"
             * layer reuses the previous full layer's selection and keeps no keys. Float32, on
             * a 16-byte boundary where the latent part leaves one (always with F32 rows). */
            if (cfg->arch == NB_ARCH_GLM_MOE_DSA && cfg->layer_has_indexer[l] && cfg->index_head_dim > 0) {
                L->index_at = es == 4 ? L->row_bytes : up16(L->row_bytes);
                L->row_bytes = L->index_at + (int64_t)cfg->index_head_dim * 4;
            }
            /* BF16 rows padded to 16 bytes: the kernels' 16-byte row copies (float32 rows are
             * left as they were: GLM-5's and DeepSeek-V3's are multiples of 16 already) */
            if (es == 2) L->row_bytes = up16(L->row_bytes);
        } else {
            int64_t kv = (int64_t)cfg->num_kv_heads * cfg->head_dim * 4;
            L->k_at = 0;
            L->v_at = kv;
            L->row_bytes = 2 * kv;
        }
    }
    return NB_OK;
}

nb_status nb_kv_lat_dtype(nb_kv_cache_dtype kv, const nb_model_config *cfg, int on_gpu, nb_dtype *out)
{
    switch (kv) {
    case NB_KV_CACHE_AUTO: *out = on_gpu && cfg->attn == NB_ATTN_MLA ? NB_DTYPE_BF16 : NB_DTYPE_F32; return NB_OK;
    case NB_KV_CACHE_F32: *out = NB_DTYPE_F32; return NB_OK;
    case NB_KV_CACHE_BF16:
        if (cfg->attn != NB_ATTN_MLA)
            return nb_error(NB_ERR_INVALID_ARG, "--kv-cache-dtype bfloat16: only MLA models (glm_moe_dsa, "
                                                "deepseek_v3) keep BF16 rows; this model's K and V stay float32");
        *out = NB_DTYPE_BF16;
        return NB_OK;
    }
    return nb_error(NB_ERR_INVALID_ARG, "--kv-cache-dtype %d: unknown", (int)kv);
}

int64_t nb_kv_layout_bytes(const nb_kv_layout *lay)
{
    int64_t b = 0;
    for (int l = 0; l < lay->n_layers; l++) b += lay->layer[l].row_bytes;
    return b;
}

nb_status nb_kv_pool_init(nb_kv_pool *pool, const nb_model_config *cfg, nb_dtype lat_dtype, int64_t n_slots)
{
    memset(pool, 0, sizeof *pool);
    if (n_slots <= 0) return nb_error(NB_ERR_INVALID_ARG, "kv: pool of %lld slots", (long long)n_slots);
    NB_TRY(nb_kv_layout_for(cfg, lat_dtype, &pool->layout));
    pool->n_slots = n_slots;
    pool->device = NB_DEVICE_CPU;
    for (int l = 0; l < pool->layout.n_layers; l++) {
        pool->layer[l] = calloc((size_t)n_slots, (size_t)pool->layout.layer[l].row_bytes);
        if (!pool->layer[l]) {
            nb_kv_pool_free(pool);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "kv: %lld slots x %lld bytes for layer %d", (long long)n_slots,
                            (long long)pool->layout.layer[l].row_bytes, l);
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

size_t nb_kv_row_bytes(const nb_kv_pool *pool, int layer) { return (size_t)pool->layout.layer[layer].row_bytes; }
size_t nb_kv_bytes_per_slot(const nb_kv_pool *pool) { return (size_t)nb_kv_layout_bytes(&pool->layout); }

int nb_batch_logit_rows(const nb_batch *b)
{
    int r = 0;
    for (int s = 0; s < b->n_seqs; s++) r += b->seqs[s].all_logits ? b->seqs[s].n_tokens : 1;
    return r;
}

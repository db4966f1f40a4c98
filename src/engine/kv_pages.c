/* Paged KV cache bookkeeping (see kv_pages.h). Tests: tests/sched/test_kv_pages.c. */
#include "engine/kv_pages.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

nb_status nb_kv_pages_init(nb_kv_pages *kv, int n_pages, int page_size)
{
    *kv = (nb_kv_pages){0};
    if (n_pages < 1) return nb_error(NB_ERR_INVALID_ARG, "kv cache: %d pages (need at least 1)", n_pages);
    if (page_size < 1) return nb_error(NB_ERR_INVALID_ARG, "--page-size %d: must be >= 1", page_size);
    kv->free_list = malloc((size_t)n_pages * sizeof *kv->free_list);
    kv->ref = calloc((size_t)n_pages, sizeof *kv->ref);
    if (!kv->free_list || !kv->ref) {
        nb_kv_pages_free_all(kv);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "kv cache: page tables for %d pages", n_pages);
    }
    kv->page_size = page_size;
    kv->n_pages = n_pages;
    kv->n_free = n_pages;
    /* Stack order: page 0 is handed out first, which keeps small runs easy to read. */
    for (int i = 0; i < n_pages; i++) kv->free_list[i] = n_pages - 1 - i;
    return NB_OK;
}

void nb_kv_pages_free_all(nb_kv_pages *kv)
{
    free(kv->free_list);
    free(kv->ref);
    *kv = (nb_kv_pages){0};
}

int32_t nb_kv_pages_alloc(nb_kv_pages *kv)
{
    if (kv->n_free == 0) return -1;
    int32_t p = kv->free_list[--kv->n_free];
    NB_ASSERT(kv->ref[p] == 0);
    kv->ref[p] = 1;
    return p;
}

void nb_kv_pages_share(nb_kv_pages *kv, int32_t page)
{
    NB_ASSERT(page >= 0 && page < kv->n_pages);
    NB_ASSERT(kv->ref[page] > 0);
    kv->ref[page]++;
}

void nb_kv_pages_release(nb_kv_pages *kv, int32_t page)
{
    NB_ASSERT(page >= 0 && page < kv->n_pages);
    NB_ASSERT(kv->ref[page] > 0);
    if (--kv->ref[page] == 0) kv->free_list[kv->n_free++] = page;
}

int64_t nb_kv_bytes_per_token(const nb_model_config *cfg, int elem_bytes)
{
    int64_t total = 0;
    for (int l = 0; l < cfg->num_layers; l++) {
        int64_t per = 0;
        if (cfg->attn == NB_ATTN_MLA) {
            per = cfg->kv_lora_rank + cfg->qk_rope_head_dim;
            if (cfg->arch == NB_ARCH_GLM_MOE_DSA && cfg->index_topk > 0 && cfg->layer_has_indexer[l])
                per += cfg->index_head_dim;
        } else {
            per = 2LL * cfg->num_kv_heads * cfg->head_dim;
        }
        total += per * elem_bytes;
    }
    return total;
}

nb_status nb_kv_capacity(int64_t max_total_tokens, double budget_bytes, double mem_fraction,
                         double weight_bytes, int64_t bytes_per_token, int page_size,
                         int64_t *tokens_out)
{
    int64_t tokens;
    if (page_size < 1) return nb_error(NB_ERR_INVALID_ARG, "--page-size %d: must be >= 1", page_size);
    if (bytes_per_token < 1) return nb_error(NB_ERR_INVALID_ARG, "kv cache: %lld bytes per token", (long long)bytes_per_token);
    if (max_total_tokens > 0) {
        tokens = max_total_tokens;
    } else {
        if (mem_fraction <= 0 || mem_fraction > 1)
            return nb_error(NB_ERR_INVALID_ARG, "--mem-fraction-static %g: must be in (0, 1]", mem_fraction);
        double avail = budget_bytes * mem_fraction - weight_bytes;
        if (avail < (double)bytes_per_token * page_size)
            return nb_error(NB_ERR_OUT_OF_MEMORY,
                            "kv cache: budget %.2f GiB x mem-fraction-static %.2f leaves %.3f GiB after "
                            "%.2f GiB of weights (and the largest step's activations), less than one page of %d tokens x %lld bytes",
                            budget_bytes / 1073741824.0, mem_fraction, avail / 1073741824.0,
                            weight_bytes / 1073741824.0, page_size, (long long)bytes_per_token);
        tokens = (int64_t)(avail / (double)bytes_per_token);
    }
    tokens = tokens / page_size * page_size;
    if (tokens < page_size)
        return nb_error(NB_ERR_INVALID_ARG, "--max-total-tokens %lld: less than one page of %d tokens",
                        (long long)max_total_tokens, page_size);
    *tokens_out = tokens;
    return NB_OK;
}

void nb_format_thousands(char *buf, size_t cap, int64_t v)
{
    char digits[32];
    int neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
    int n = snprintf(digits, sizeof digits, "%llu", u);
    char out[48];
    int o = 0;
    if (neg) out[o++] = '-';
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0) out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = 0;
    snprintf(buf, cap, "%s", out);
}

void nb_kv_format_line(char *buf, size_t cap, int64_t tokens, double bytes, int request_len)
{
    char t[48], r[48];
    nb_format_thousands(t, sizeof t, tokens);
    nb_format_thousands(r, sizeof r, request_len > 0 ? tokens / request_len : 0);
    snprintf(buf, cap, "KV cache: %s tokens (%.1f GiB); %s requests of %d tokens", t, bytes / 1073741824.0, r,
             request_len);
}

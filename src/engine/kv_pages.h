/* Paged KV cache bookkeeping: fixed-size pages of `page_size` token slots, a free list,
 * and the capacity arithmetic (bytes per token per model family, tokens from a memory
 * budget, the start-up line). The KV rows themselves belong to the backend (the forward
 * pass writes row `slot` of each layer's pool); here a slot is just
 *   slot = page_id * page_size + offset.
 * Tests: tests/sched/test_kv_pages.c (build-eng/tests/test_kv_pages). */
#ifndef NB_ENGINE_KV_PAGES_H
#define NB_ENGINE_KV_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "format/model_config.h"
#include "nibble.h"

typedef struct nb_kv_pages {
    int page_size;
    int n_pages;
    int n_free;
    int32_t *free_list; /* stack of free page ids; [0, n_free) valid */
    int32_t *ref;       /* per page: holders (0 = free); pages of a common prompt prefix
                           are shared between the choices of one request */
} nb_kv_pages;

/* n_pages >= 1, page_size >= 1. NB_ERR_INVALID_ARG / NB_ERR_OUT_OF_MEMORY. */
nb_status nb_kv_pages_init(nb_kv_pages *kv, int n_pages, int page_size);
void nb_kv_pages_free_all(nb_kv_pages *kv);

/* A free page id (one holder), or -1 when none is left. */
int32_t nb_kv_pages_alloc(nb_kv_pages *kv);
/* One more holder of an allocated page (its rows are then read-only for everyone). */
void nb_kv_pages_share(nb_kv_pages *kv, int32_t page);
/* Drop one holder; the page is free when none is left. Releasing a free page is a bug
 * (asserts). */
void nb_kv_pages_release(nb_kv_pages *kv, int32_t page);

static inline int nb_kv_pages_used(const nb_kv_pages *kv) { return kv->n_pages - kv->n_free; }

/* KV bytes one token occupies over all layers, for an element of `elem_bytes` (2 for
 * BF16 caches): MLA stores the normalized latent (kv_lora_rank) plus the rope key
 * (qk_rope_head_dim), and the DSA indexer key (index_head_dim) on layers that have an
 * indexer; GQA stores K and V for every KV head. */
int64_t nb_kv_bytes_per_token(const nb_model_config *cfg, int elem_bytes);

/* Capacity in tokens, a whole number of pages: max_total_tokens when > 0 (rounded down
 * to pages), else (budget_bytes * mem_fraction - weight_bytes) / bytes_per_token.
 * NB_ERR_OUT_OF_MEMORY (message with the figures) when not even one page fits. */
nb_status nb_kv_capacity(int64_t max_total_tokens, double budget_bytes, double mem_fraction,
                         double weight_bytes, int64_t bytes_per_token, int page_size,
                         int64_t *tokens_out);

/* "KV cache: 495,488 tokens (37.8 GiB); 1,935 requests of 256 tokens" into buf. */
void nb_kv_format_line(char *buf, size_t cap, int64_t tokens, double bytes, int request_len);

/* 1234567 -> "1,234,567" */
void nb_format_thousands(char *buf, size_t cap, int64_t v);

#endif

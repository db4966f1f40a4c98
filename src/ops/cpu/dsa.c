/* CPU reference: the DSA indexer's scoring and causal top-k selection, exactly as
 * transformers' GlmMoeDsaIndexer computes it in bf16/fp32 mode (no Hadamard rotation or FP8
 * quantization: the rotation preserves dot products and FP8 is a precision shortcut):
 *   score[i, p] = sum_h w[i, h] * relu(softmax_scale * q[i, h, :] . key[p, :]),  p <= pos[i]
 * then the top index_topk positions (all of them, in order and unscored, while the sequence
 * is no longer than index_topk).
 * Exercised by tests/ops/test_ops_attention.c. */
#include <stdlib.h>

#include "base/error.h"
#include "ops/cpu/attn_common.h"
#include "ops/cpu/cpu_ops.h"

typedef struct scored {
    float s;
    int32_t p;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->s > y->s) return -1;
    if (x->s < y->s) return 1;
    return (x->p > y->p) - (x->p < y->p);
}

typedef struct dsa_job {
    const nb_tensor *q, *w, *key;
    float sm;
    const nb_attn_index *idx;
    int topk, max_len;
    int32_t *sel_pos, *sel_count;
    scored *scratch;
} dsa_job;

static void dsa_range(void *arg, int64_t b, int64_t e, int thread)
{
    dsa_job *j = arg;
    const int64_t nh = j->q->shape[1], hd = j->q->shape[2];
    scored *sc = j->scratch + (int64_t)thread * j->max_len;
    for (int64_t i = b; i < e; i++) {
        int n = j->idx->pos[i] + 1;
        if (n <= j->topk) { /* every position is selected: no scores needed (ops.h) */
            for (int t = 0; t < n; t++) j->sel_pos[i * j->topk + t] = t;
            j->sel_count[i] = n;
            continue;
        }
        const int32_t *slots = j->idx->slot_table + j->idx->slot_base[i];
        const float *wi = (const float *)j->w->data + i * j->w->stride[0];
        for (int p = 0; p < n; p++) {
            const float *k = (const float *)j->key->data + (int64_t)slots[p] * j->key->stride[0];
            float total = 0;
            for (int64_t h = 0; h < nh; h++) {
                const float *q = (const float *)j->q->data + i * j->q->stride[0] + h * j->q->stride[1];
                float d = 0;
                for (int64_t c = 0; c < hd; c++) d += q[c] * k[c];
                d *= j->sm;
                if (d > 0) total += d * wi[h];
            }
            sc[p] = (scored){total, p};
        }
        qsort(sc, (size_t)n, sizeof *sc, by_score_desc);
        int m = n < j->topk ? n : j->topk;
        for (int t = 0; t < m; t++) j->sel_pos[i * j->topk + t] = sc[t].p;
        j->sel_count[i] = m;
    }
}

nb_status nb_cpu_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                            const nb_tensor *key_pool, const nb_attn_index *idx, int topk, int32_t *sel_pos,
                            int32_t *sel_count)
{
    NB_TRY(nb_cpu_check_f32("dsa_select", "q", q, 3));
    NB_TRY(nb_cpu_check_f32("dsa_select", "w", w, 2));
    NB_TRY(nb_cpu_check_f32("dsa_select", "key_pool", key_pool, 2));
    const int64_t T = q->shape[0];
    int max_len;
    NB_TRY(nb_cpu_attn_check_index("dsa_select", idx, NULL, key_pool->shape[0], &max_len));
    scored *scratch = nb_ops_scratch(ctx, 1, (size_t)ctx->n_threads * (size_t)max_len * sizeof(scored));
    if (!scratch) return NB_ERR_OUT_OF_MEMORY;
    dsa_job j = {q, w, key_pool, softmax_scale, idx, topk, max_len, sel_pos, sel_count, scratch};
    nb_cpu_parallel_for(ctx, T, 1, dsa_range, &j);
    return NB_OK;
}

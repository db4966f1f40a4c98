/* CPU reference: grouped-query attention over a slot-addressed KV pool (GLM-4.5, Qwen3-MoE),
 * causal or restricted to a DSA selection; shared helpers that validate an nb_attn_index.
 * softmax in float32 with the max subtracted, as torch does. Threads over (token, head).
 * Exercised by tests/ops/test_ops_attention.c. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/attn_common.h"
#include "ops/cpu/cpu_ops.h"

nb_status nb_cpu_attn_check_index(const char *op, const nb_attn_index *idx, const nb_attn_select *sel,
                                  int64_t pool_rows, int *max_len)
{
    int ml = 1;
    for (int i = 0; i < idx->n_tokens; i++) {
        int pos = idx->pos[i];
        if (pos < 0) return nb_error(NB_ERR_INVALID_ARG, "%s: token %d has position %d", op, i, pos);
        int n = sel ? sel->count[i] : pos + 1;
        if (sel && (n < 0 || n > sel->stride))
            return nb_error(NB_ERR_INVALID_ARG, "%s: token %d selects %d positions (stride %d)", op, i, n, sel->stride);
        for (int j = 0; j < n; j++) {
            int p = sel ? sel->pos[(int64_t)i * sel->stride + j] : j;
            if (p < 0 || p > pos)
                return nb_error(NB_ERR_INVALID_ARG, "%s: token %d at position %d selects position %d", op, i, pos, p);
            int32_t row = idx->slot_table[idx->slot_base[i] + p];
            if (row < 0 || row >= pool_rows)
                return nb_error(NB_ERR_INVALID_ARG, "%s: token %d: slot %d of position %d outside the pool of %lld rows",
                                op, i, row, p, (long long)pool_rows);
        }
        if (n > ml) ml = n;
    }
    *max_len = ml;
    return NB_OK;
}

void nb_cpu_softmax_inplace(float *s, int n)
{
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    double sum = 0;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) s[j] *= inv;
}

typedef struct gqa_job {
    const nb_tensor *q, *k, *v;
    nb_tensor *out;
    const nb_attn_index *idx;
    const nb_attn_select *sel;
    float scale;
    int n_heads, group, max_len;
    float *scores; /* [threads, max_len] */
} gqa_job;

static void gqa_range(void *arg, int64_t b, int64_t e, int thread)
{
    gqa_job *j = arg;
    const int64_t hd = j->q->shape[2], vd = j->v->shape[2];
    float *sc = j->scores + (int64_t)thread * j->max_len;
    for (int64_t w = b; w < e; w++) {
        int i = (int)(w / j->n_heads), h = (int)(w % j->n_heads), kvh = h / j->group;
        int pos = j->idx->pos[i];
        int n = j->sel ? j->sel->count[i] : pos + 1;
        const float *q = (const float *)j->q->data + i * j->q->stride[0] + h * j->q->stride[1];
        const int32_t *slots = j->idx->slot_table + j->idx->slot_base[i];
        for (int t = 0; t < n; t++) {
            int p = j->sel ? j->sel->pos[(int64_t)i * j->sel->stride + t] : t;
            const float *k = (const float *)j->k->data + (int64_t)slots[p] * j->k->stride[0] + kvh * j->k->stride[1];
            float d = 0;
            for (int64_t c = 0; c < hd; c++) d += q[c] * k[c];
            sc[t] = d * j->scale;
        }
        nb_cpu_softmax_inplace(sc, n);
        float *o = (float *)j->out->data + i * j->out->stride[0] + h * j->out->stride[1];
        memset(o, 0, (size_t)vd * sizeof(float));
        for (int t = 0; t < n; t++) {
            int p = j->sel ? j->sel->pos[(int64_t)i * j->sel->stride + t] : t;
            const float *v = (const float *)j->v->data + (int64_t)slots[p] * j->v->stride[0] + kvh * j->v->stride[1];
            for (int64_t c = 0; c < vd; c++) o[c] += sc[t] * v[c];
        }
    }
}

nb_status nb_cpu_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool, const nb_tensor *v_pool,
                           const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out)
{
    NB_TRY(nb_cpu_check_f32("attention", "q", q, 3));
    NB_TRY(nb_cpu_check_f32("attention", "k_pool", k_pool, 3));
    NB_TRY(nb_cpu_check_f32("attention", "v_pool", v_pool, 3));
    NB_TRY(nb_cpu_check_f32("attention", "out", out, 3));
    const int64_t T = q->shape[0], nh = q->shape[1], nkv = k_pool->shape[1];
    int max_len;
    NB_TRY(nb_cpu_attn_check_index("attention", idx, sel, k_pool->shape[0], &max_len));
    float *scores = nb_ops_scratch(ctx, 1, (size_t)ctx->n_threads * (size_t)max_len * sizeof(float));
    if (!scores) return NB_ERR_OUT_OF_MEMORY;
    gqa_job j = {q, k_pool, v_pool, out, idx, sel, scale, (int)nh, (int)(nh / nkv), max_len, scores};
    nb_cpu_parallel_for(ctx, T * nh, 1, gqa_range, &j);
    return NB_OK;
}

/* CPU reference: multi-head latent attention (DeepSeek-V3, GLM-5) over the compressed cache
 * (normalized kv latent + roped k_pe per token), in two forms that must agree:
 *   naive:    k_nope, v = kv_b_proj(latent) per attended token, then ordinary attention over
 *             [k_nope ; k_pe] (what HF computes);
 *   absorbed: q_lat = W_uk^T q_nope, score = q_lat . latent + q_pe . k_pe, o_lat = sum p latent,
 *             out = W_uv o_lat (what a serving kernel computes; kv_b never meets the cache).
 * kv_b_proj rows are laid out per head as [nope rows (W_uk) ; v rows (W_uv)].
 * Exercised by tests/ops/test_ops_attention.c (naive == absorbed, sparse selections). */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "format/numerics.h"
#include "ops/cpu/attn_common.h"
#include "ops/cpu/cpu_ops.h"

typedef struct mla_job {
    const nb_mla_dims *d;
    const nb_tensor *q, *lat, *kpe;
    nb_tensor *out;
    const nb_attn_index *idx;
    const nb_attn_select *sel;
    float scale;
    int max_len;
    const float *w;    /* kv_b dequantized [n_heads * (nope + v), r] (absorbed) */
    const float *kv;   /* naive: expanded [L, n_heads * (nope + v)] for the current run */
    int64_t tok0;      /* naive: first token of the run */
    float *scratch;    /* per thread */
    int64_t scratch_per_thread;
} mla_job;

static inline int sel_pos(const mla_job *j, int i, int t)
{
    return j->sel ? j->sel->pos[(int64_t)i * j->sel->stride + t] : t;
}

/* Row `row` of a pool view (F32 or BF16, [rows, n]) as floats: the row itself, or its BF16
 * values widened into tmp[n]. */
static inline const float *pool_row(const nb_tensor *t, int64_t row, int n, float *tmp)
{
    if (t->dtype == NB_DTYPE_F32) return (const float *)t->data + row * t->stride[0];
    const nb_bf16 *b = (const nb_bf16 *)t->data + row * t->stride[0];
    for (int c = 0; c < n; c++) tmp[c] = nb_bf16_to_f32(b[c]);
    return tmp;
}

static void absorbed_range(void *arg, int64_t b, int64_t e, int thread)
{
    mla_job *j = arg;
    const nb_mla_dims *d = j->d;
    const int r = d->kv_lora_rank, hs = d->qk_nope + d->v_dim;
    float *q_lat = j->scratch + thread * j->scratch_per_thread;
    float *o_lat = q_lat + r;
    float *lt = o_lat + r, *kt = lt + r; /* a BF16 pool's latent and k_pe rows, widened */
    float *sc = kt + d->qk_rope;
    for (int64_t w = b; w < e; w++) {
        int i = (int)(w / d->n_heads), h = (int)(w % d->n_heads);
        const float *q = (const float *)j->q->data + i * j->q->stride[0] + h * j->q->stride[1];
        const float *wuk = j->w + (int64_t)h * hs * r;
        const float *wuv = wuk + (int64_t)d->qk_nope * r;
        for (int c = 0; c < r; c++) q_lat[c] = 0;
        for (int a = 0; a < d->qk_nope; a++) {
            float qa = q[a];
            const float *row = wuk + (int64_t)a * r;
            for (int c = 0; c < r; c++) q_lat[c] += qa * row[c];
        }
        const float *q_pe = q + d->qk_nope;
        int n = j->sel ? j->sel->count[i] : j->idx->pos[i] + 1;
        const int32_t *slots = j->idx->slot_table + j->idx->slot_base[i];
        for (int t = 0; t < n; t++) {
            int64_t row = slots[sel_pos(j, i, t)];
            const float *l = pool_row(j->lat, row, r, lt), *kp = pool_row(j->kpe, row, d->qk_rope, kt);
            float s = 0;
            for (int c = 0; c < r; c++) s += q_lat[c] * l[c];
            for (int c = 0; c < d->qk_rope; c++) s += q_pe[c] * kp[c];
            sc[t] = s * j->scale;
        }
        nb_cpu_softmax_inplace(sc, n);
        for (int c = 0; c < r; c++) o_lat[c] = 0;
        for (int t = 0; t < n; t++) {
            const float *l = pool_row(j->lat, slots[sel_pos(j, i, t)], r, lt);
            for (int c = 0; c < r; c++) o_lat[c] += sc[t] * l[c];
        }
        float *o = (float *)j->out->data + i * j->out->stride[0] + h * j->out->stride[1];
        for (int v = 0; v < d->v_dim; v++) {
            const float *row = wuv + (int64_t)v * r;
            float s = 0;
            for (int c = 0; c < r; c++) s += row[c] * o_lat[c];
            o[v] = s;
        }
    }
}

static void naive_range(void *arg, int64_t b, int64_t e, int thread)
{
    mla_job *j = arg;
    const nb_mla_dims *d = j->d;
    const int hs = d->qk_nope + d->v_dim;
    const int64_t kvw = (int64_t)d->n_heads * hs;
    float *kt = j->scratch + thread * j->scratch_per_thread; /* a BF16 pool's k_pe row, widened */
    float *sc = kt + d->qk_rope;
    for (int64_t w = b; w < e; w++) {
        int i = (int)(j->tok0 + w / d->n_heads), h = (int)(w % d->n_heads);
        const float *q = (const float *)j->q->data + i * j->q->stride[0] + h * j->q->stride[1];
        int n = j->sel ? j->sel->count[i] : j->idx->pos[i] + 1;
        const int32_t *slots = j->idx->slot_table + j->idx->slot_base[i];
        for (int t = 0; t < n; t++) {
            int p = sel_pos(j, i, t);
            const float *kn = j->kv + p * kvw + (int64_t)h * hs;
            const float *kp = pool_row(j->kpe, slots[p], d->qk_rope, kt);
            float s = 0;
            for (int c = 0; c < d->qk_nope; c++) s += q[c] * kn[c];
            for (int c = 0; c < d->qk_rope; c++) s += q[d->qk_nope + c] * kp[c];
            sc[t] = s * j->scale;
        }
        nb_cpu_softmax_inplace(sc, n);
        float *o = (float *)j->out->data + i * j->out->stride[0] + h * j->out->stride[1];
        memset(o, 0, (size_t)d->v_dim * sizeof(float));
        for (int t = 0; t < n; t++) {
            const float *v = j->kv + sel_pos(j, i, t) * kvw + (int64_t)h * hs + d->qk_nope;
            for (int c = 0; c < d->v_dim; c++) o[c] += sc[t] * v[c];
        }
    }
}

nb_status nb_cpu_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d, const nb_tensor *q,
                               const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_weight *kv_b,
                               const nb_attn_index *idx, const nb_attn_select *sel, float scale, nb_tensor *out)
{
    NB_TRY(nb_cpu_check_f32("mla_attention", "q", q, 3));
    NB_TRY(nb_cpu_check_f32_bf16("mla_attention", "latent_pool", latent_pool, 2));
    NB_TRY(nb_cpu_check_f32_bf16("mla_attention", "kpe_pool", kpe_pool, 2));
    if (latent_pool->dtype != kpe_pool->dtype)
        return nb_error(NB_ERR_INVALID_ARG, "mla_attention: latent_pool is %s and kpe_pool %s (the same dtype)",
                        nb_dtype_name(latent_pool->dtype), nb_dtype_name(kpe_pool->dtype));
    NB_TRY(nb_cpu_check_f32("mla_attention", "out", out, 3));
    NB_TRY(nb_weight_check(kv_b, "mla_attention kv_b"));
    const int64_t T = q->shape[0];
    const int r = d->kv_lora_rank;
    int max_len;
    NB_TRY(nb_cpu_attn_check_index("mla_attention", idx, sel, latent_pool->shape[0], &max_len));
    mla_job j = {.d = d, .q = q, .lat = latent_pool, .kpe = kpe_pool, .out = out, .idx = idx, .sel = sel,
                 .scale = scale, .max_len = max_len};
    if (mode == NB_MLA_ABSORBED) {
        float *w = nb_ops_scratch(ctx, 2, (size_t)kv_b->n * (size_t)r * sizeof(float));
        if (!w) return NB_ERR_OUT_OF_MEMORY;
        NB_TRY(nb_cpu_dequant_rows(ctx, kv_b, 0, kv_b->n, w));
        j.w = w;
        j.scratch_per_thread = 3 * (int64_t)r + d->qk_rope + max_len;
        j.scratch = nb_ops_scratch(ctx, 1, (size_t)(ctx->n_threads * j.scratch_per_thread) * sizeof(float));
        if (!j.scratch) return NB_ERR_OUT_OF_MEMORY;
        nb_cpu_parallel_for(ctx, T * d->n_heads, 1, absorbed_range, &j);
        return NB_OK;
    }
    j.scratch_per_thread = d->qk_rope + max_len;
    j.scratch = nb_ops_scratch(ctx, 1, (size_t)(ctx->n_threads * j.scratch_per_thread) * sizeof(float));
    if (!j.scratch) return NB_ERR_OUT_OF_MEMORY;
    /* One expansion of positions 0..L-1 per run of consecutive tokens of one sequence. */
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && idx->slot_base[t1] == idx->slot_base[t0]) t1++;
        int L = 0;
        for (int64_t t = t0; t < t1; t++) L = NB_MAX(L, idx->pos[t] + 1);
        float *lat = nb_ops_scratch(ctx, 3, (size_t)L * (size_t)r * sizeof(float));
        float *kv = nb_ops_scratch(ctx, 2, (size_t)L * (size_t)kv_b->n * sizeof(float));
        if (!lat || !kv) return NB_ERR_OUT_OF_MEMORY;
        const int32_t *slots = idx->slot_table + idx->slot_base[t0];
        for (int p = 0; p < L; p++) {
            if (slots[p] < 0 || slots[p] >= latent_pool->shape[0])
                return nb_error(NB_ERR_INVALID_ARG, "mla_attention: token %lld: slot %d of position %d outside the pool",
                                (long long)t0, slots[p], p);
            const float *l = pool_row(latent_pool, slots[p], r, lat + (int64_t)p * r);
            if (l != lat + (int64_t)p * r) memcpy(lat + (int64_t)p * r, l, (size_t)r * sizeof(float));
        }
        NB_TRY(nb_cpu_linear_raw(ctx, lat, r, L, kv_b, kv, kv_b->n, 0));
        j.kv = kv;
        j.tok0 = t0;
        nb_cpu_parallel_for(ctx, (t1 - t0) * d->n_heads, 1, naive_range, &j);
        t0 = t1;
    }
    return NB_OK;
}

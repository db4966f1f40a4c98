/* CPU reference: the MoE router (softmax or sigmoid scores, e_score_correction_bias for the
 * choice only, group-limited top-k, norm_topk_prob, routed_scaling_factor) and the routed
 * SwiGLU experts in any weight format. The experts op groups tokens by expert and
 * dequantizes each touched expert once per call for all of its tokens, then adds
 * weight * expert(x) into the output in expert order (as HF's index_add_ loop does).
 * Exercised by tests/ops/test_ops_moe.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"

/* Index of the largest v[i] with mask[i] set (ties: lowest index); -1 if none. */
static int argmax_masked(const float *v, const uint8_t *mask, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (mask[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

nb_status nb_cpu_moe_route(nb_ops_ctx *ctx, const nb_tensor *logits, const nb_router_params *p, nb_tensor *ids,
                           nb_tensor *weights)
{
    NB_TRY(nb_cpu_check_f32("moe_route", "logits", logits, 2));
    NB_TRY(nb_cpu_check_f32("moe_route", "weights", weights, 2));
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2)
        return nb_error(NB_ERR_INVALID_ARG, "moe_route: ids must be I32 [T, k]");
    const int E = p->n_experts, K = p->top_k;
    const int64_t T = logits->shape[0];
    const int ng = p->group == NB_ROUTER_GREEDY ? 1 : p->n_group;
    const int tg = p->group == NB_ROUTER_GREEDY ? 1 : p->topk_group;
    if (E <= 0 || E > 4096 || K <= 0 || K > E || logits->shape[1] != E || ids->shape[0] != T || ids->shape[1] != K ||
        weights->shape[0] != T || weights->shape[1] != K)
        return nb_error(NB_ERR_INVALID_ARG, "moe_route: %d experts, top_k %d, logits [%lld, %lld], ids [%lld, %lld]", E,
                        K, (long long)T, (long long)logits->shape[1], (long long)ids->shape[0],
                        (long long)ids->shape[1]);
    if (ng <= 0 || E % ng || tg <= 0 || tg > ng || (int64_t)tg * (E / ng) < K)
        return nb_error(NB_ERR_INVALID_ARG, "moe_route: n_group %d, topk_group %d do not fit %d experts, top_k %d", ng,
                        tg, E, K);
    float score[4096], choice[4096], gscore[4096];
    uint8_t mask[4096], gmask[4096];
    const int per = E / ng;
    for (int64_t t = 0; t < T; t++) {
        const float *l = (const float *)logits->data + t * logits->stride[0];
        if (p->score == NB_ROUTER_SOFTMAX) {
            memcpy(score, l, (size_t)E * sizeof(float));
            /* softmax over all experts (float32, as HF with dtype=torch.float) */
            float m = -INFINITY;
            for (int e = 0; e < E; e++) m = score[e] > m ? score[e] : m;
            double sum = 0;
            for (int e = 0; e < E; e++) {
                score[e] = expf(score[e] - m);
                sum += score[e];
            }
            for (int e = 0; e < E; e++) score[e] = (float)(score[e] / sum);
        } else {
            for (int e = 0; e < E; e++) score[e] = 1.0f / (1.0f + expf(-l[e]));
        }
        for (int e = 0; e < E; e++) choice[e] = score[e] + (p->correction_bias ? p->correction_bias[e] : 0.0f);
        /* Rank groups, keep topk_group of them. */
        for (int g = 0; g < ng; g++) {
            const float *c = choice + g * per;
            if (p->group == NB_ROUTER_GROUP_TOP2 && per >= 2) {
                int a = 0;
                for (int i = 1; i < per; i++) a = c[i] > c[a] ? i : a;
                int b2 = a == 0 ? 1 : 0;
                for (int i = 0; i < per; i++)
                    if (i != a && c[i] > c[b2]) b2 = i;
                gscore[g] = c[a] + c[b2];
            } else {
                float m = c[0];
                for (int i = 1; i < per; i++) m = c[i] > m ? c[i] : m;
                gscore[g] = m;
            }
            gmask[g] = 1;
        }
        memset(mask, 0, (size_t)E);
        for (int s = 0; s < tg; s++) {
            int g = argmax_masked(gscore, gmask, ng);
            gmask[g] = 0;
            memset(mask + g * per, 1, (size_t)per);
        }
        int32_t *oid = (int32_t *)ids->data + t * ids->stride[0];
        float *ow = (float *)weights->data + t * weights->stride[0];
        double sum = 0;
        for (int s = 0; s < K; s++) {
            int e = argmax_masked(choice, mask, E);
            mask[e] = 0;
            oid[s] = e;
            ow[s] = score[e];
            sum += score[e];
        }
        if (p->norm_topk_prob) {
            float den = (float)sum + 1e-20f;
            for (int s = 0; s < K; s++) ow[s] /= den;
        }
        for (int s = 0; s < K; s++) ow[s] *= p->routed_scaling_factor;
    }
    return NB_OK;
}

nb_status nb_cpu_moe_experts(nb_ops_ctx *ctx, const nb_tensor *x, const nb_tensor *ids, const nb_tensor *weights,
                             const nb_moe_weights *w, int accumulate, nb_tensor *out)
{
    NB_TRY(nb_cpu_check_f32("moe_experts", "x", x, 2));
    NB_TRY(nb_cpu_check_f32("moe_experts", "weights", weights, 2));
    NB_TRY(nb_cpu_check_f32("moe_experts", "out", out, 2));
    if (!ids || ids->dtype != NB_DTYPE_I32 || ids->ndim != 2)
        return nb_error(NB_ERR_INVALID_ARG, "moe_experts: ids must be I32 [T, k]");
    const int64_t T = x->shape[0], H = w->hidden, I = w->inter, K = ids->shape[1];
    if (!accumulate)
        for (int64_t t = 0; t < T; t++) memset((float *)out->data + t * out->stride[0], 0, (size_t)H * sizeof(float));
    /* Bucket (token, slot) pairs by expert: counting sort. */
    int *count = calloc((size_t)w->n_experts + 1, sizeof(int));
    int *order = malloc((size_t)(T * K + 1) * sizeof(int));
    if (!count || !order) {
        free(count);
        free(order);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "moe_experts: routing tables");
    }
    nb_status st = NB_OK;
    for (int64_t a = 0; a < T * K; a++) {
        int32_t e = ((const int32_t *)ids->data)[(a / K) * ids->stride[0] + a % K];
        if (e >= w->n_experts) {
            st = nb_error(NB_ERR_INVALID_ARG, "moe_experts: token %lld routed to expert %d of %d", (long long)(a / K), e,
                          w->n_experts);
            goto done;
        }
        if (e >= 0) count[e + 1]++;
    }
    for (int e = 0; e < w->n_experts; e++) count[e + 1] += count[e];
    {
        int *fill = calloc((size_t)w->n_experts, sizeof(int));
        if (!fill) {
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "moe_experts: routing tables");
            goto done;
        }
        for (int64_t a = 0; a < T * K; a++) {
            int32_t e = ((const int32_t *)ids->data)[(a / K) * ids->stride[0] + a % K];
            if (e >= 0) order[count[e] + fill[e]++] = (int)a;
        }
        free(fill);
    }
    for (int e = 0; e < w->n_experts; e++) {
        int n = count[e + 1] - count[e];
        if (n == 0) continue;
        const nb_weight *g = &w->gate[e], *u = &w->up[e], *dn = &w->down[e];
        if (g->n != I || g->k != H || u->n != I || u->k != H || dn->n != H || dn->k != I) {
            st = nb_error(NB_ERR_INVALID_ARG, "moe_experts: expert %d weights do not match hidden %lld, inter %lld", e,
                          (long long)H, (long long)I);
            goto done;
        }
        float *buf = nb_ops_scratch(ctx, 1, (size_t)n * (size_t)(2 * H + 2 * I) * sizeof(float));
        if (!buf) {
            st = NB_ERR_OUT_OF_MEMORY;
            goto done;
        }
        float *xs = buf, *gb = xs + n * H, *ub = gb + n * I, *ys = ub + n * I;
        for (int r = 0; r < n; r++)
            memcpy(xs + r * H, (const float *)x->data + (order[count[e] + r] / K) * x->stride[0],
                   (size_t)H * sizeof(float));
        st = nb_cpu_swiglu_raw(ctx, xs, H, n, g, u, dn, gb, ub, ys, H, 0);
        if (st != NB_OK) goto done;
        for (int r = 0; r < n; r++) {
            int a = order[count[e] + r];
            float wt = ((const float *)weights->data)[(a / K) * weights->stride[0] + a % K];
            float *o = (float *)out->data + (a / K) * out->stride[0];
            for (int64_t c = 0; c < H; c++) o[c] += ys[r * H + c] * wt;
        }
    }
done:
    free(count);
    free(order);
    return st;
}

// GPU MoE router top-k (ops/cuda/moe.h: nb_moe_router): softmax or sigmoid scores, the
// e_score_correction_bias for the choice only, group-limited selection (groups ranked by
// their max or by the sum of their two best), norm_topk_prob and routed_scaling_factor; the
// same function as the CPU reference nb_cpu_moe_route (ops/cpu/moe.c).
// One warp per token; the token's scores live in shared memory. Tested against a float64
// CPU computation by tests/cuda_moe/test_moe.c (router cases).
#include <math.h>

#include "base/error.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"

#define ROUTER_WARPS 4
#define ROUTER_MAX_E 1024
#define ROUTER_MAX_GROUPS 32

// (value, index) argmax across the warp; ties go to the lower index. Lanes with no
// candidate pass index -1.
__device__ __forceinline__ void warp_argmax(float &v, int &i)
{
    for (int o = 16; o; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        bool take = oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i));
        if (take) v = ov, i = oi;
    }
}

__global__ void __launch_bounds__(ROUTER_WARPS * 32) moe_router_kernel(nb_moe_router_desc d)
{
    __shared__ float score_s[ROUTER_WARPS][ROUTER_MAX_E], choice_s[ROUTER_WARPS][ROUTER_MAX_E];
    __shared__ unsigned char mask_s[ROUTER_WARPS][ROUTER_MAX_E];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tok = blockIdx.x * ROUTER_WARPS + warp;
    if (tok >= d.tokens) return;
    const int E = d.experts;
    float *score = score_s[warp], *choice = choice_s[warp];
    unsigned char *mask = mask_s[warp];
    const float *l = d.logits + (size_t)tok * E;

    if (d.score == 0) {
        float m = -INFINITY;
        for (int e = lane; e < E; e += 32) m = fmaxf(m, l[e]);
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float sum = 0.0f;
        for (int e = lane; e < E; e += 32) {
            float v = expf(l[e] - m);
            score[e] = v;
            sum += v;
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int e = lane; e < E; e += 32) score[e] = score[e] / sum;
    } else {
        for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-l[e]));
    }
    for (int e = lane; e < E; e += 32) {
        choice[e] = score[e] + (d.bias ? d.bias[e] : 0.0f);
        mask[e] = d.group == 0;
    }
    __syncwarp();

    if (d.group != 0) {
        // Lane g scores group g; then the best topk_group groups unmask their experts.
        const int ng = d.n_group, per = E / ng;
        float gs = -INFINITY;
        int gi = -1;
        if (lane < ng) {
            const float *c = choice + lane * per;
            if (d.group == 2 && per >= 2) {
                int a = 0;
                for (int i = 1; i < per; i++) a = c[i] > c[a] ? i : a;
                int b = a == 0 ? 1 : 0;
                for (int i = 0; i < per; i++)
                    if (i != a && c[i] > c[b]) b = i;
                gs = c[a] + c[b];
            } else {
                gs = c[0];
                for (int i = 1; i < per; i++) gs = fmaxf(gs, c[i]);
            }
            gi = lane;
        }
        for (int s = 0; s < d.topk_group; s++) {
            float v = gs;
            int i = gi;
            warp_argmax(v, i);
            for (int e = lane; e < per; e += 32) mask[i * per + e] = 1;
            if (lane == i) gi = -1;  // chosen: out of the running
        }
        __syncwarp();
    }

    float mine = 0.0f;  // lane s keeps the weight of pick s
    int mine_id = -1;
    float wsum = 0.0f;
    for (int s = 0; s < d.topk; s++) {
        float v = -INFINITY;
        int i = -1;
        for (int e = lane; e < E; e += 32)
            if (mask[e] && (i < 0 || choice[e] > v)) v = choice[e], i = e;
        warp_argmax(v, i);
        if (lane == 0) mask[i] = 0;
        __syncwarp();
        float sc = score[i];
        wsum += sc;
        if (lane == s) mine = sc, mine_id = i;
    }
    if (lane < d.topk) {
        if (d.norm_topk_prob) mine /= wsum + 1e-20f;
        d.ids[(size_t)tok * d.topk + lane] = mine_id;
        d.weights[(size_t)tok * d.topk + lane] = mine * d.routed_scaling_factor;
    }
}

extern "C" nb_status nb_moe_router(const nb_moe_router_desc *d, void *stream)
{
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "moe router: NULL descriptor");
    const int ng = d->group ? d->n_group : 1, tg = d->group ? d->topk_group : 1;
    if (d->experts < 1 || d->experts > ROUTER_MAX_E || d->topk < 1 || d->topk > 32 || d->topk > d->experts)
        return nb_error(NB_ERR_INVALID_ARG, "moe router: %d experts, top_k %d (experts <= %d, top_k <= 32)",
                        d->experts, d->topk, ROUTER_MAX_E);
    if (d->score < 0 || d->score > 1 || d->group < 0 || d->group > 2)
        return nb_error(NB_ERR_INVALID_ARG, "moe router: score %d / group %d unknown", d->score, d->group);
    if (ng < 1 || ng > ROUTER_MAX_GROUPS || d->experts % ng || tg < 1 || tg > ng ||
        (long)tg * (d->experts / ng) < d->topk)
        return nb_error(NB_ERR_INVALID_ARG, "moe router: n_group %d, topk_group %d do not fit %d experts, top_k %d",
                        ng, tg, d->experts, d->topk);
    if (d->tokens < 0 || (d->tokens && (!d->logits || !d->ids || !d->weights)))
        return nb_error(NB_ERR_INVALID_ARG, "moe router: tokens %d with a NULL pointer", d->tokens);
    if (!d->tokens) return NB_OK;
    nb_moe_router_desc k = *d;
    k.n_group = ng, k.topk_group = tg;
    int blocks = (d->tokens + ROUTER_WARPS - 1) / ROUTER_WARPS;
    moe_router_kernel<<<blocks, ROUTER_WARPS * 32, 0, (cudaStream_t)stream>>>(k);
    NB_CUDA_TRY(cudaGetLastError());
    return NB_OK;
}

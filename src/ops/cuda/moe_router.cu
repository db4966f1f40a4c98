// GPU MoE router top-k (ops/cuda/moe.h: nb_moe_router): softmax or sigmoid scores, the
// e_score_correction_bias for the choice only, group-limited selection (groups ranked by
// their max or by the sum of their two best), norm_topk_prob and routed_scaling_factor; the
// same function as the CPU reference nb_cpu_moe_route (ops/cpu/moe.c).
// One warp per token; the token's scores live in shared memory. Tested against a float64
// CPU computation by tests/cuda_moe/test_moe.c (router cases).
// Also the gate GEMV fused with that choice (ops/cuda/moe_router.h), an experiment off by
// default: blocks of the gate's rows compute the logits and the last block to finish routes,
// one launch instead of two. On the H200 it measured slower than the linear op's GEMV plus
// this router (12.0 vs 10.9 us at 1 token, 66 vs 13.6 at 10): each warp's loads of x wait one
// after another (tests/cuda_ops/test_cuda_small_ops.c --bench, bench/RESULTS.md).
#include <math.h>

#include "base/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_router.h"
#include "ops/cuda/pdl.cuh"

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

// Route token `tok` with one warp; score, choice and mask: E entries of this warp's shared
// memory. Logits are read through L2 (ld.cg): the fused launch reads rows other blocks wrote.
__device__ void route_token(const nb_moe_router_desc &d, int tok, float *score, float *choice, unsigned char *mask,
                            bool legacy)
{
    const int lane = threadIdx.x & 31;
    const int E = d.experts;
    const float *l = d.logits + (size_t)tok * E;

    if (d.score == 0) {
        float m = -INFINITY;
        for (int e = lane; e < E; e += 32) m = fmaxf(m, __ldcg(l + e));
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float sum = 0.0f;
        for (int e = lane; e < E; e += 32) {
            float v = expf(__ldcg(l + e) - m);
            score[e] = v;
            sum += v;
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int e = lane; e < E; e += 32) score[e] = score[e] / sum;
    } else {
        for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-__ldcg(l + e)));
    }
    for (int e = lane; e < E; e += 32) {
        choice[e] = score[e] + (d.bias ? d.bias[e] : 0.0f);
        mask[e] = d.group == 0;
    }
    __syncwarp();

    // Groups: when every group is kept (topk_group == n_group, GLM-5's and GLM-4.5's n_group
    // 1) the ranking cannot remove an expert, so it is skipped: it used to cost lane 0 two
    // serial passes over all 256 experts (~15 us of the ~22 us router at decode).
    if (d.group != 0 && d.topk_group < d.n_group && !legacy) {
        // Each group's score by the whole warp (max, or the sum of its two best: the best
        // value, then the best of the others, ties to the lower index), kept by lane g.
        const int ng = d.n_group, per = E / ng;
        float gs = -INFINITY;
        int gi = -1;
        for (int g = 0; g < ng; g++) {
            const float *c = choice + g * per;
            float v1 = -INFINITY;
            int i1 = -1;
            for (int i = lane; i < per; i += 32)
                if (i1 < 0 || c[i] > v1) v1 = c[i], i1 = i;
            warp_argmax(v1, i1);
            float val = v1;
            if (d.group == 2 && per >= 2) {
                float v2 = -INFINITY;
                int i2 = -1;
                for (int i = lane; i < per; i += 32)
                    if (i != i1 && (i2 < 0 || c[i] > v2)) v2 = c[i], i2 = i;
                warp_argmax(v2, i2);
                val = v1 + v2;
            }
            if (lane == g) gs = val, gi = g;
        }
        // Then the best topk_group groups unmask their experts.
        for (int s = 0; s < d.topk_group; s++) {
            float v = gs;
            int i = gi;
            warp_argmax(v, i);
            for (int e = lane; e < per; e += 32) mask[i * per + e] = 1;
            if (lane == i) gi = -1;  // chosen: out of the running
        }
        __syncwarp();
    } else if (d.group != 0 && !legacy) {
        for (int e = lane; e < E; e += 32) mask[e] = 1;
        __syncwarp();
    } else if (d.group != 0) {
        // Legacy (NIBBLE_CUDA_SMALL_OPS=legacy, for A/B timings): lane g scores group g alone.
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
            if (lane == i) gi = -1;
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

__global__ void __launch_bounds__(ROUTER_WARPS * 32) moe_router_kernel(nb_moe_router_desc d, bool legacy)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    __shared__ float score_s[ROUTER_WARPS][ROUTER_MAX_E], choice_s[ROUTER_WARPS][ROUTER_MAX_E];
    __shared__ unsigned char mask_s[ROUTER_WARPS][ROUTER_MAX_E];
    const int warp = threadIdx.x >> 5;
    const int tok = blockIdx.x * ROUTER_WARPS + warp;
    if (tok >= d.tokens) return;
    route_token(d, tok, score_s[warp], choice_s[warp], mask_s[warp], legacy);
}

// The checks nb_moe_router makes; *ng, *tg: the groups in effect (1, 1 when greedy).
static nb_status router_check(const nb_moe_router_desc *d, int *ng_out, int *tg_out)
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
    *ng_out = ng;
    *tg_out = tg;
    return NB_OK;
}

extern "C" nb_status nb_moe_router(const nb_moe_router_desc *d, void *stream)
{
    int ng = 1, tg = 1;
    NB_TRY(router_check(d, &ng, &tg));
    if (!d->tokens) return NB_OK;
    nb_moe_router_desc k = *d;
    k.n_group = ng, k.topk_group = tg;
    int blocks = (d->tokens + ROUTER_WARPS - 1) / ROUTER_WARPS;
    bool legacy = nb_cuda_small_ops_legacy() != 0;
    void *args[] = {&k, &legacy};
    NB_CUDA_TRY(nb_pdl_launch((const void *)moe_router_kernel, dim3(blocks), dim3(ROUTER_WARPS * 32), 0,
                              (cudaStream_t)stream, args));
    return NB_OK;
}

// ---- gate GEMV + choice in one launch ------------------------------------------------------

#define GR_WARPS 8
#define GR_VEC 8 // 16-byte weight loads in flight per lane before the first use

__device__ unsigned int gr_done[NB_GATE_ROUTE_SLOTS];

// Block b: rows [b * rpb, (b + 1) * rpb) of the gate, rpb = GR_WARPS / ks, each row's dot
// products split over ks warps (lanes of the row's group stride by 8 BF16 through the row),
// all T tokens at once. Then the block's rows go to logits, and the last block to finish
// (a counter that atomicInc wraps back to 0 for the next launch) routes every token.
// ks trades L2 traffic (every block reads all of x: blocks x T x hidden x 4 bytes) against
// the number of SMs pulling the gate's bytes: the host picks it from T.
__global__ void __launch_bounds__(GR_WARPS * 32) gate_router_kernel(nb_moe_gate_router_desc g, int ks)
{
    nb_pdl_wait(); // before any global access (ops/cuda/pdl.cuh)
    nb_pdl_trigger();
    __shared__ float part[GR_WARPS][NB_GATE_ROUTE_MAX_TOKENS];
    __shared__ float score_s[GR_WARPS][NB_GATE_ROUTE_MAX_E], choice_s[GR_WARPS][NB_GATE_ROUTE_MAX_E];
    __shared__ unsigned char mask_s[GR_WARPS][NB_GATE_ROUTE_MAX_E];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rpb = GR_WARPS / ks, T = g.r.tokens, E = g.r.experts;
    const int row = blockIdx.x * rpb + warp / ks;
    const int gl = (warp % ks) * 32 + lane, G = ks * 32, nv = g.hidden / 8;
    float acc[NB_GATE_ROUTE_MAX_TOKENS];
#pragma unroll
    for (int t = 0; t < NB_GATE_ROUTE_MAX_TOKENS; t++) acc[t] = 0.0f;
    if (row < E) {
        const uint4 *w = (const uint4 *)(g.gate + (int64_t)row * g.gate_ld);
        for (int v0 = gl; v0 < nv; v0 += G * GR_VEC) {
            uint4 wv[GR_VEC];
#pragma unroll
            for (int u = 0; u < GR_VEC; u++) {
                int v = v0 + u * G;
                wv[u] = v < nv ? __ldcs(w + v) : make_uint4(0, 0, 0, 0); // streamed: read once per launch
            }
#pragma unroll
            for (int u = 0; u < GR_VEC; u++) {
                int v = v0 + u * G;
                if (v >= nv) break;
                const float w0 = __uint_as_float(wv[u].x << 16), w1 = __uint_as_float(wv[u].x & 0xffff0000u);
                const float w2 = __uint_as_float(wv[u].y << 16), w3 = __uint_as_float(wv[u].y & 0xffff0000u);
                const float w4 = __uint_as_float(wv[u].z << 16), w5 = __uint_as_float(wv[u].z & 0xffff0000u);
                const float w6 = __uint_as_float(wv[u].w << 16), w7 = __uint_as_float(wv[u].w & 0xffff0000u);
#pragma unroll
                for (int t = 0; t < NB_GATE_ROUTE_MAX_TOKENS; t++) {
                    if (t >= T) break;
                    const float4 *xp = (const float4 *)(g.x + (int64_t)t * g.ldx + (int64_t)v * 8);
                    const float4 a = xp[0], b = xp[1];
                    acc[t] += w0 * a.x + w1 * a.y + w2 * a.z + w3 * a.w + w4 * b.x + w5 * b.y + w6 * b.z + w7 * b.w;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NB_GATE_ROUTE_MAX_TOKENS; t++) {
        if (t >= T) break;
        float sum = acc[t];
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) part[warp][t] = sum;
    }
    __syncthreads();
    if ((int)threadIdx.x < rpb * T) {
        const int r = threadIdx.x / T, t = threadIdx.x % T, orow = blockIdx.x * rpb + r;
        if (orow < E) {
            float sum = 0.0f;
            for (int k = 0; k < ks; k++) sum += part[r * ks + k][t];
            if (g.gate_bias) sum += g.gate_bias[orow];
            ((float *)g.r.logits)[(int64_t)t * E + orow] = sum;
        }
    }
    __threadfence(); // this block's logits are visible before the counter says so
    __syncthreads();
    if (threadIdx.x == 0) last = atomicInc(&gr_done[g.slot], gridDim.x - 1) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int tok = warp; tok < T; tok += GR_WARPS) route_token(g.r, tok, score_s[warp], choice_s[warp], mask_s[warp], false);
}

// Warps per gate row for T tokens (see gate_router_kernel).
static int gate_router_ks(int T) { return T <= 2 ? 4 : T <= 6 ? 2 : 1; }

extern "C" int nb_moe_gate_router_fits(const nb_moe_gate_router_desc *d)
{
    return d && d->r.tokens >= 1 && d->r.tokens <= NB_GATE_ROUTE_MAX_TOKENS && d->r.experts >= 1 &&
           d->r.experts <= NB_GATE_ROUTE_MAX_E && d->hidden > 0 && d->hidden % 8 == 0 && d->ldx % 4 == 0 &&
           d->gate_ld % 8 == 0 && d->x && d->gate && ((uintptr_t)d->x % 16) == 0 && ((uintptr_t)d->gate % 16) == 0 &&
           d->slot >= 0 && d->slot < NB_GATE_ROUTE_SLOTS;
}

extern "C" nb_status nb_moe_gate_router(const nb_moe_gate_router_desc *d, void *stream)
{
    int ng = 1, tg = 1;
    NB_TRY(router_check(d ? &d->r : NULL, &ng, &tg));
    if (!nb_moe_gate_router_fits(d))
        return nb_error(NB_ERR_UNSUPPORTED, "moe gate router: %d tokens, %d experts, hidden %d do not fit the fused launch",
                        d->r.tokens, d->r.experts, d->hidden);
    nb_moe_gate_router_desc k = *d;
    k.r.n_group = ng, k.r.topk_group = tg;
    const int ks = gate_router_ks(d->r.tokens), rpb = GR_WARPS / ks;
    const int blocks = (d->r.experts + rpb - 1) / rpb;
    int ksv = ks;
    void *args[] = {&k, &ksv};
    NB_CUDA_TRY(nb_pdl_launch((const void *)gate_router_kernel, dim3(blocks), dim3(GR_WARPS * 32), 0,
                              (cudaStream_t)stream, args));
    return NB_OK;
}

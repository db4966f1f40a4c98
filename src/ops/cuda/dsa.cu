// The DSA indexer's scores and per-token top-k over the slot-addressed pool (ops.h
// nb_op_dsa_select): score[i, p] = sum_h w[i, h] relu(scale q[i, h] . key[p]).
// One block of 8 warps per token. A token whose context fits in topk selects every position in
// order (ops.h) without scoring any. Otherwise the block keeps the best `topk` keys
// (~ordered(score) << 32 | position, so ascending order is the CPU op's: score descending, ties
// to the lower position) in shared memory and merges each chunk of S - topk new positions into
// them by a bitonic sort of S keys (S: the power of two >= 2 topk, >= 1024).
// Scoring, two forms:
//   lanes (NIBBLE_CUDA_DSA=lanes, where it applies: 16-byte aligned key rows, head dim a
//     multiple of 4, 32 or 64 heads; not the default until measured on a GPU): a lane scores
//     one position. It streams its key row in float4s and keeps
//     one accumulator per head; the queries come from shared memory by broadcast loads. About
//     160 instructions per position at GLM-5's 32 x 128, and no shuffles.
//   warp (any shape; the default): a warp scores one position, one head at a
//     time, each head's dot product summed across the warp by shuffles (the shuffle unit bounds
//     it: ~190 shuffles and ~550 instructions per position at 32 x 128).
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (dsa_select: both forms against the CPU op).
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"

#define NB_DSA_WARPS 8
#define NB_DSA_MAXD 8 /* the warp form's index head dims per lane: up to 256 */

// Ascending order of the key = descending score, then ascending position. -0 counts as +0.
__device__ __forceinline__ unsigned long long dsa_key(float s, int p)
{
    uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)(~ord) << 32) | (uint32_t)p;
}

// Bitonic sort (ascending) of the block's S keys in shared memory; ends with a barrier.
__device__ __forceinline__ void dsa_sort(unsigned long long *cand, int S)
{
    for (int kk = 2; kk <= S; kk <<= 1)
        for (int jj = kk >> 1; jj > 0; jj >>= 1) {
            for (int e = threadIdx.x; e < S; e += blockDim.x) {
                int o = e ^ jj;
                if (o > e) {
                    unsigned long long a = cand[e], b = cand[o];
                    bool up = (e & kk) == 0;
                    if ((a > b) == up) {
                        cand[e] = b;
                        cand[o] = a;
                    }
                }
            }
            __syncthreads();
        }
}

// The pool row of position p of token i, or -1 (outside the pool: not scored, never selected).
__device__ __forceinline__ int64_t dsa_row(const int32_t *slots, int p, int64_t pool_rows)
{
    int64_t row = slots[p];
    return row >= 0 && row < pool_rows ? row : -1;
}

// Score of one key row for the lanes form: NH accumulators, the row in float4s, q[h] (hd
// floats per head, 16-byte aligned) broadcast from shared memory.
template <int NH>
__device__ __forceinline__ float dsa_score_lane(const float *qs, const float *wsh, float sm, const float4 *kr, int hd4)
{
    float acc[NH > 0 ? NH : 1]; /* NH 0 (the warp form) never calls this */
#pragma unroll
    for (int h = 0; h < NH; h++) acc[h] = 0.0f;
#pragma unroll 2
    for (int d4 = 0; d4 < hd4; d4++) {
        const float4 kv = __ldg(kr + d4);
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const float4 q4 = *(const float4 *)(qs + (h * hd4 + d4) * 4);
            acc[h] += q4.x * kv.x + q4.y * kv.y + q4.z * kv.z + q4.w * kv.w;
        }
    }
    float total = 0.0f;
#pragma unroll
    for (int h = 0; h < NH; h++) {
        const float d = acc[h] * sm;
        if (d > 0) total += d * wsh[h];
    }
    return total;
}

// NH > 0: the lanes form for NH heads; NH == 0: the warp form.
template <int NH>
__global__ void __launch_bounds__(32 * NB_DSA_WARPS) k_dsa(const float *q, int64_t qs0, int64_t qs1, const float *wt,
                                                          int64_t ws0, float sm, const float *key, int64_t ks0, int nh,
                                                          int hd, nb_attn_index idx, int topk, int S, int64_t pool_rows,
                                                          int32_t *sel_pos, int32_t *sel_count)
{
    extern __shared__ unsigned long long cand[]; /* [S], then q [nh * hd] and w [nh] floats */
    float *qs = (float *)(cand + S), *wsh = qs + nh * hd;
    const int i = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (idx.pos[i] + 1 <= topk) { /* every position, in order: no scores needed (ops.h) */
        const int n = idx.pos[i] + 1;
        for (int t = threadIdx.x; t < n; t += blockDim.x) sel_pos[(int64_t)i * topk + t] = t;
        if (threadIdx.x == 0) sel_count[i] = n;
        return;
    }
    for (int e = threadIdx.x; e < nh * hd; e += blockDim.x)
        qs[e] = q[(int64_t)i * qs0 + (int64_t)(e / hd) * qs1 + e % hd];
    for (int e = threadIdx.x; e < nh; e += blockDim.x) wsh[e] = wt[(int64_t)i * ws0 + e];
    for (int e = threadIdx.x; e < topk; e += blockDim.x) cand[e] = ~0ull;
    __syncthreads();
    const int n = idx.pos[i] + 1, CH = S - topk;
    const int32_t *slots = idx.slot_table + idx.slot_base[i];
    for (int c0 = 0; c0 < n; c0 += CH) {
        if (NH > 0) {
            for (int j = threadIdx.x; j < CH; j += blockDim.x) {
                const int p = c0 + j;
                const int64_t row = p < n ? dsa_row(slots, p, pool_rows) : -1;
                cand[topk + j] =
                    row < 0 ? ~0ull : dsa_key(dsa_score_lane<NH>(qs, wsh, sm, (const float4 *)(key + row * ks0), hd / 4), p);
            }
        } else {
            for (int j = w; j < CH; j += NB_DSA_WARPS) {
                const int p = c0 + j;
                unsigned long long k = ~0ull;
                const int64_t row = p < n ? dsa_row(slots, p, pool_rows) : -1;
                if (row >= 0) {
                    const float *kr = key + row * ks0;
                    float kv[NB_DSA_MAXD];
#pragma unroll
                    for (int m = 0; m < NB_DSA_MAXD; m++) kv[m] = lane + 32 * m < hd ? kr[lane + 32 * m] : 0.0f;
                    float total = 0;
                    for (int h = 0; h < nh; h++) {
                        float dsum = 0;
#pragma unroll
                        for (int m = 0; m < NB_DSA_MAXD; m++)
                            if (lane + 32 * m < hd) dsum += qs[h * hd + lane + 32 * m] * kv[m];
                        dsum = __shfl_sync(0xffffffffu, nb_d_warp_sum(dsum), 0) * sm;
                        if (dsum > 0) total += dsum * wsh[h];
                    }
                    k = dsa_key(total, p);
                }
                if (lane == 0) cand[topk + j] = k;
            }
        }
        __syncthreads();
        dsa_sort(cand, S);
    }
    for (int t = threadIdx.x; t < topk; t += blockDim.x) {
        unsigned long long k = cand[t];
        if (k != ~0ull) sel_pos[(int64_t)i * topk + t] = (int32_t)(k & 0xffffffffu);
    }
    if (threadIdx.x == 0) {
        int cnt = 0;
        while (cnt < topk && cand[cnt] != ~0ull) cnt++;
        sel_count[i] = cnt;
    }
}

static int g_form = -1; /* nb_cuda_dsa_force_form; -1: NIBBLE_CUDA_DSA, else automatic */

extern "C" void nb_cuda_dsa_force_form(int form) { g_form = form == 0 || form == 1 ? form : -1; }

// 1: the lanes form, 0: the warp form (forced, else NIBBLE_CUDA_DSA=warp|lanes, else
// NB_CUDA_DSA_LANES_DEFAULT). The lanes form stays opt-in until it has run on a GPU.
#define NB_CUDA_DSA_LANES_DEFAULT 0
static int dsa_lanes(void)
{
    if (g_form >= 0) return g_form;
    static int env = -1; /* a benign race reads the same value */
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_DSA");
        env = e && !strcmp(e, "warp") ? 0 : e && !strcmp(e, "lanes") ? 1 : NB_CUDA_DSA_LANES_DEFAULT;
    }
    return env;
}

extern "C" nb_status nb_cuda_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                                        const nb_tensor *key_pool, const nb_attn_index *idx, int topk,
                                        int32_t *sel_pos, int32_t *sel_count)
{
    NB_TRY(nb_cuda_check_f32("dsa_select", "q", q, 3));
    NB_TRY(nb_cuda_check_f32("dsa_select", "w", w, 2));
    NB_TRY(nb_cuda_check_f32("dsa_select", "key_pool", key_pool, 2));
    const int64_t T = q->shape[0];
    const int nh = (int)q->shape[1], hd = (int)q->shape[2];
    if (hd > 32 * NB_DSA_MAXD) return nb_error(NB_ERR_UNSUPPORTED, "dsa_select: head dim %d above %d", hd, 32 * NB_DSA_MAXD);
    int S = 1024;
    while (S < 2 * topk) S <<= 1;
    size_t smem = (size_t)S * 8 + ((size_t)nh * hd + nh) * sizeof(float);
    int dev = nb_cuda_st(ctx)->device, max_smem = 0;
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (smem > (size_t)max_smem)
        return nb_error(NB_ERR_UNSUPPORTED, "dsa_select: index_topk %d with %d heads x %d needs %zu bytes of shared memory (%d)",
                        topk, nh, hd, smem, max_smem);
    if (T == 0) return NB_OK;
    /* the lanes form: float4 rows (16-byte aligned base and stride) and 32 or 64 heads */
    const int aligned = (uintptr_t)key_pool->data % 16 == 0 && key_pool->stride[0] % 4 == 0 && hd % 4 == 0;
    void (*kern)(const float *, int64_t, int64_t, const float *, int64_t, float, const float *, int64_t, int, int,
                 nb_attn_index, int, int, int64_t, int32_t *, int32_t *) = k_dsa<0>;
    if (dsa_lanes() && aligned && nh == 32) kern = k_dsa<32>;
    if (dsa_lanes() && aligned && nh == 64) kern = k_dsa<64>;
    NB_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<(unsigned)T, 32 * NB_DSA_WARPS, smem, nb_cuda_stream(ctx)>>>(
        (const float *)q->data, q->stride[0], q->stride[1], (const float *)w->data, w->stride[0], softmax_scale,
        (const float *)key_pool->data, key_pool->stride[0], nh, hd, *idx, topk, S, key_pool->shape[0], sel_pos,
        sel_count);
    NB_CUDA_LAUNCHED("dsa_select");
    return NB_OK;
}

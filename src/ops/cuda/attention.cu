// CUDA attention over the slot-addressed KV pool (ops.h): grouped-query attention (MLA is in
// mla.cu, the DSA indexer's scores and top-k in dsa.cu).
// Attention kernels use one block per (token, head); each warp walks a share of the attended
// positions with an online softmax (running max, sum and output), and the warps' partial
// results are merged at the end, so no score buffer sized by the context is needed. Head
// dimensions live in registers, 32 lanes x NB_ATT_MAXD.
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (attention*).
#include <math.h>

#include "ops/cuda/common.cuh"

#define NB_ATT_WARPS 4
#define NB_ATT_MAXD 16 /* head / latent dims per lane: up to 512 */

typedef struct att_sel {
    const int32_t *pos, *count;
    int stride;
} att_sel;

// Position index t of token i's attended list -> pool row, or -1 to skip.
__device__ __forceinline__ int64_t att_row(const nb_attn_index &idx, const att_sel &sel, int i, int t, int pos,
                                           int64_t pool_rows)
{
    int p = sel.pos ? sel.pos[(int64_t)i * sel.stride + t] : t;
    if (p < 0 || p > pos) return -1;
    int64_t row = idx.slot_table[idx.slot_base[i] + p];
    return row >= 0 && row < pool_rows ? row : -1;
}

__device__ __forceinline__ int att_count(const nb_attn_index &idx, const att_sel &sel, int i)
{
    if (!sel.pos) return idx.pos[i] + 1;
    int n = sel.count[i];
    return n < 0 ? 0 : n > sel.stride ? sel.stride : n;
}

// Merge the warps' (m, l, acc[dims]) into out[dims] (normalized). sh: NB_ATT_WARPS * (2 +
// dims) floats. Called by every thread of the block.
__device__ void att_merge(float m, float l, const float *acc, int dims, float *sh, float *out)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *sm = sh, *sl = sh + NB_ATT_WARPS, *sa = sh + 2 * NB_ATT_WARPS;
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
#pragma unroll
    for (int j = 0; j < NB_ATT_MAXD; j++) {
        int c = lane + 32 * j;
        if (c < dims) sa[w * dims + c] = acc[j];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < NB_ATT_WARPS; i++) M = fmaxf(M, sm[i]);
    float L = 0;
    for (int i = 0; i < NB_ATT_WARPS; i++)
        if (sm[i] > -INFINITY) L += sl[i] * expf(sm[i] - M);
    for (int c = threadIdx.x; c < dims; c += blockDim.x) {
        float s = 0;
        for (int i = 0; i < NB_ATT_WARPS; i++)
            if (sm[i] > -INFINITY) s += sa[i * dims + c] * expf(sm[i] - M);
        out[c] = L > 0 ? s / L : 0.0f;
    }
}

__global__ void k_gqa(const float *q, int64_t qs0, int64_t qs1, const float *kp, int64_t ks0, int64_t ks1,
                      const float *vp, int64_t vs0, int64_t vs1, int hd, int vd, int n_heads, int group,
                      nb_attn_index idx, att_sel sel, float scale, int64_t pool_rows, float *out, int64_t os0,
                      int64_t os1)
{
    extern __shared__ float sh[];
    const int i = blockIdx.x / n_heads, h = blockIdx.x % n_heads, kvh = h / group;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *qr = q + (int64_t)i * qs0 + (int64_t)h * qs1;
    float qv[NB_ATT_MAXD], acc[NB_ATT_MAXD];
#pragma unroll
    for (int j = 0; j < NB_ATT_MAXD; j++) {
        int c = lane + 32 * j;
        qv[j] = c < hd ? qr[c] : 0.0f;
        acc[j] = 0.0f;
    }
    const int pos = idx.pos[i], n = att_count(idx, sel, i);
    float m = -INFINITY, l = 0.0f;
    for (int t = w; t < n; t += NB_ATT_WARPS) {
        int64_t row = att_row(idx, sel, i, t, pos, pool_rows);
        if (row < 0) continue;
        const float *kr = kp + row * ks0 + (int64_t)kvh * ks1;
        float s = 0;
#pragma unroll
        for (int j = 0; j < NB_ATT_MAXD; j++) {
            int c = lane + 32 * j;
            if (c < hd) s += qv[j] * kr[c];
        }
        s = __shfl_sync(0xffffffffu, nb_d_warp_sum(s), 0) * scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), pe = expf(s - mn);
        l = l * corr + pe;
        const float *vr = vp + row * vs0 + (int64_t)kvh * vs1;
#pragma unroll
        for (int j = 0; j < NB_ATT_MAXD; j++) {
            int c = lane + 32 * j;
            if (c < vd) acc[j] = acc[j] * corr + pe * vr[c];
        }
        m = mn;
    }
    att_merge(m, l, acc, vd, sh, out + (int64_t)i * os0 + (int64_t)h * os1);
}

static att_sel make_sel(const nb_attn_select *sel)
{
    att_sel s = {NULL, NULL, 0};
    if (sel) s = (att_sel){sel->pos, sel->count, sel->stride};
    return s;
}

static size_t merge_smem(int dims) { return (size_t)NB_ATT_WARPS * (2 + (size_t)dims) * sizeof(float); }

extern "C" nb_status nb_cuda_attention(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *k_pool,
                                       const nb_tensor *v_pool, const nb_attn_index *idx, const nb_attn_select *sel,
                                       float scale, nb_tensor *out)
{
    NB_TRY(nb_cuda_check_f32("attention", "q", q, 3));
    NB_TRY(nb_cuda_check_f32("attention", "k_pool", k_pool, 3));
    NB_TRY(nb_cuda_check_f32("attention", "v_pool", v_pool, 3));
    NB_TRY(nb_cuda_check_f32("attention", "out", out, 3));
    const int64_t T = q->shape[0], nh = q->shape[1], nkv = k_pool->shape[1];
    const int hd = (int)q->shape[2], vd = (int)v_pool->shape[2];
    if (hd > 32 * NB_ATT_MAXD || vd > 32 * NB_ATT_MAXD)
        return nb_error(NB_ERR_UNSUPPORTED, "attention: head dims %d / %d above %d", hd, vd, 32 * NB_ATT_MAXD);
    if (T == 0) return NB_OK;
    k_gqa<<<(unsigned)(T * nh), 32 * NB_ATT_WARPS, merge_smem(vd), nb_cuda_stream(ctx)>>>(
        (const float *)q->data, q->stride[0], q->stride[1], (const float *)k_pool->data, k_pool->stride[0],
        k_pool->stride[1], (const float *)v_pool->data, v_pool->stride[0], v_pool->stride[1], hd, vd, (int)nh,
        (int)(nh / nkv), *idx, make_sel(sel), scale, k_pool->shape[0], (float *)out->data, out->stride[0],
        out->stride[1]);
    NB_CUDA_LAUNCHED("attention");
    return NB_OK;
}

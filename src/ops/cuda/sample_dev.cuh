// Device helpers shared by the two GPU samplers (sample.cu: one block per row;
// sample_cluster.cu: a cluster of blocks per row): the per-token key and weight, warp and
// block reductions, the block scan. Every block-wide helper begins with a barrier so the
// shared scratch it is given is free, and returns the result to every thread.
#ifndef NB_OPS_CUDA_SAMPLE_DEV_CUH
#define NB_OPS_CUDA_SAMPLE_DEV_CUH

#include "ops/cuda/common.cuh"
#include "ops/sample_math.h"

#define NB_SB 512
#define NB_NWARP (NB_SB / 32)
#define NB_DIG 10
#define NB_NBK (1 << NB_DIG)
#define NB_CHUNK 1024
#define NB_MAX_CHUNKS (NB_SAMPLE_MAX_VOCAB / NB_CHUNK)

typedef unsigned long long u64;

static_assert(NB_NBK == 2 * NB_SB, "each thread owns two buckets in the bucket scan");

// mode 0: keys of the logits themselves (top-n, greedy); mode 1: sampling weights. xv is the
// logit of token id.
__device__ __forceinline__ void nb_smp_elemv(int mode, float xv, int id, float m, float inv_t, float min_p, u64 *key,
                                             u64 *w, int *cand)
{
    float c = nb_sm_clean(xv);
    if (mode == 0) {
        *key = nb_sm_key(nb_sm_fkey(c), id);
        *w = 0;
        *cand = 1;
    } else {
        float e = nb_sm_weight_e(c, m, inv_t);
        *key = nb_sm_key(__float_as_uint(e), id);
        *w = nb_sm_weight(e);
        *cand = e >= min_p;
    }
}

__device__ __forceinline__ void nb_smp_elem(int mode, const float *x, int i, float m, float inv_t, float min_p,
                                            u64 *key, u64 *w, int *cand)
{
    nb_smp_elemv(mode, x[i], i, m, inv_t, min_p, key, w, cand);
}

__device__ __forceinline__ u64 nb_warp_sum_u64(u64 v)
{
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block reductions: every thread gets the result. They begin with a barrier so the shared
// scratch of a previous reduction is free.
__device__ static u64 nb_blk_sum_u64(u64 v, u64 *red)
{
    v = nb_warp_sum_u64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = 0;
    for (int i = 0; i < NB_NWARP; i++) t += red[i];
    return t;
}

__device__ static u64 nb_blk_max_u64(u64 v, u64 *red)
{
    for (int o = 16; o; o >>= 1) {
        u64 y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = 0;
    for (int i = 0; i < NB_NWARP; i++) t = red[i] > t ? red[i] : t;
    return t;
}

// Max that ignores NaN, as the CPU's "x > m ? x : m" loop does.
__device__ static float nb_blk_max_f(float v, float *red)
{
    for (int o = 16; o; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int i = 0; i < NB_NWARP; i++) t = red[i] > t ? red[i] : t;
    return t;
}

__device__ static double nb_blk_sum_d(double v, double *red)
{
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < NB_NWARP; i++) t += red[i];
    return t;
}

// Exclusive prefix sums over threads (in threadIdx order) of a (count, weight) pair.
__device__ static void nb_blk_scan2(u64 c, u64 w, u64 *ce, u64 *we, u64 *red, u64 *red2)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 ci = c, wi = w;
    for (int o = 1; o < 32; o <<= 1) {
        u64 cy = __shfl_up_sync(0xffffffffu, ci, o), wy = __shfl_up_sync(0xffffffffu, wi, o);
        if (lane >= o) {
            ci += cy;
            wi += wy;
        }
    }
    __syncthreads();
    if (lane == 31) {
        red[warp] = ci;
        red2[warp] = wi;
    }
    __syncthreads();
    u64 cb = 0, wb = 0;
    for (int i = 0; i < warp; i++) {
        cb += red[i];
        wb += red2[i];
    }
    *ce = cb + ci - c;
    *we = wb + wi - w;
}

// Warp-wide inclusive prefix sum of v in lane order.
__device__ __forceinline__ u64 nb_warp_incl_u64(u64 v)
{
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        u64 y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

// One round of a running-total walk over 32 values in lane order, *base the total before
// lane 0: the first lane whose running total exceeds target (*excl: the total before it), or
// -1 with *base advanced past the round. Every lane gets the same answer.
__device__ __forceinline__ int nb_warp_walk(u64 v, u64 *base, u64 target, u64 *excl)
{
    const u64 incl = nb_warp_incl_u64(v);
    const unsigned hit = __ballot_sync(0xffffffffu, *base + incl > target);
    if (hit) {
        const int f = __ffs(hit) - 1;
        *excl = *base + __shfl_sync(0xffffffffu, incl - v, f);
        return f;
    }
    *base += __shfl_sync(0xffffffffu, incl, 31);
    return -1;
}

#endif

// The register-fed tensor-core linear of the CUDA op (ops/cuda/linear.h): y[T, n] (+)= x[T, k] W^T
// (+ bias) for BF16 weights at 1..16 tokens, bandwidth-bound: the goal is that every warp
// keeps weight loads in flight from its first cycle to its last.
//   - A block is one 16-row tile and KW warps along K; warp ks streams groups of U
//     consecutive 32-K steps (groups ks, ks + KW, ...), so the warps of a block read adjacent
//     K at the same time. Weights are the m16n8k16 A operand straight from global memory
//     (16 bytes per lane per row per step, the mma kernel's K order), never staged.
//   - The next group's loads are issued before the current group's mmas (two register
//     buffers), so a warp always has U steps (U KB) of weights in flight; no shared memory in
//     the loop and no barriers: warps never wait for each other until the end.
//   - Activations (float32) are the B operand: each lane reads its token's 8 values of a step
//     from L1/L2 and rounds them in registers to TERMS BF16 terms (one: BF16 activations, the
//     cuBLASLt path's precision, ~2e-3 relative on a dot product, within the BF16 bound 1e-2;
//     two: hi + lo, ~16 mantissa bits, within the float32 bound 1e-5 as the mma kernel).
//   - The first group's weights are loaded before the programmatic-dependent wait
//     (ops/cuda/pdl.cuh), so with PDL the loads overlap the previous kernel's tail.
//   - The KW warps of a tile add their sums through shared memory in warp order (fixed
//     order: results do not depend on scheduling); no partials in global memory, no second
//     launch.
// Where it stands (H200, bench/RESULTS.md, fourth session): slower than the vector GEMV at
// 1-2 tokens and than the mma kernel at 3-16 on every GLM-5 shape (o_proj 66 % of copy at 1
// token where the GEMV reads at 95 %; 52 % at 10 tokens where the mma kernel reads at 80 %).
// Each load instruction covers 16 rows x 64 bytes (the m16n8k16 A layout), where the GEMV's
// covers 512 contiguous bytes of one row; more groups in flight did not make up for it.
// Off unless NIBBLE_CUDA_LINEAR_MMR=1|3.
// Exercised by tests/cuda_ops/test_cuda_linear.c (linear_mmr); timed by nibble bench-linear.
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/linear_dev.cuh"

#define MR_MAX_KW 16

static int g_force_mmr = -1; // -1 the environment's choice, else a NIBBLE_CUDA_LINEAR_MMR value
static int g_force_kw, g_force_terms, g_force_u;

extern "C" void nb_cuda_linear_force_mmr(int mode) { g_force_mmr = mode >= 0 && mode <= 3 ? mode : -1; }
extern "C" void nb_cuda_linear_force_mmr_kw(int kw) { g_force_kw = kw == 1 || kw == 2 || kw == 4 || kw == 8 || kw == 16 ? kw : 0; }
extern "C" void nb_cuda_linear_force_mmr_terms(int terms) { g_force_terms = terms == 1 || terms == 2 ? terms : 0; }
extern "C" void nb_cuda_linear_force_mmr_unroll(int u) { g_force_u = u == 2 || u == 4 ? u : 0; }

static int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

// NIBBLE_CUDA_LINEAR_MMR: 0 off, 1 at 1..16 tokens, 3 at 3..16 tokens (1-2 tokens keep the GEMV).
static int mr_mode(void)
{
    static int env = -1;
    if (env < 0) {
        env = env_int("NIBBLE_CUDA_LINEAR_MMR", NB_CUDA_LINEAR_MMR_DEFAULT);
        if (env != 0 && env != 1 && env != 3) env = NB_CUDA_LINEAR_MMR_DEFAULT;
    }
    return g_force_mmr >= 0 ? g_force_mmr : env;
}

extern "C" int nb_cuda_linear_mmr_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    if (T < 1 || T > 16) return 0;
    if (w->fmt != NB_WFMT_BF16 || w->k % 32 || ((uintptr_t)w->data & 15)) return 0;
    if (w->row_stride && w->row_stride % 16) return 0;
    if (x && (ldx % 4 || ((uintptr_t)x & 15))) return 0;
    return 1;
}

extern "C" int nb_cuda_linear_mmr_should(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    const int m = mr_mode();
    if (m == 0 || (m == 3 && T < 3)) return 0;
    return nb_cuda_linear_mmr_can(w, x, ldx, T);
}

extern "C" nb_cuda_mmr_plan nb_cuda_mmr_plan_for(const nb_weight *w, int64_t T, int sm_count)
{
    nb_cuda_mmr_plan p;
    p.token_tiles = T <= 8 ? 1 : 2;
    // One term from 3 tokens (BF16 activations, as cuBLASLt above 16 tokens), two at 1-2
    // tokens (the mmas cost nothing there and the float32 contract holds) and for weights
    // whose output picks a top-k (ops.h NB_WEIGHT_FEEDS_TOPK).
    static int env_terms = -1, env_kw = -1, env_u = -1;
    if (env_terms < 0) {
        env_terms = env_int("NIBBLE_CUDA_LINEAR_MMR_TERMS", 0);
        env_kw = env_int("NIBBLE_CUDA_LINEAR_MMR_W", 0);
        env_u = env_int("NIBBLE_CUDA_LINEAR_MMR_U", 0);
    }
    p.terms = (T <= 2 || (w->flags & NB_WEIGHT_FEEDS_TOPK)) ? 2 : 1;
    if (env_terms == 1 || env_terms == 2) p.terms = env_terms;
    if (g_force_terms) p.terms = g_force_terms;
    p.unroll = g_force_u ? g_force_u : env_u == 2 || env_u == 4 ? env_u : 4;
    p.tiles = (w->n + 15) / 16;
    const int64_t steps = w->k / 32;
    // K warps per tile: the fewest that put ~8 streaming warps per SM in one wave (each
    // keeps U to 2U KB in flight), each warp keeping at least two groups to pipeline.
    const int64_t want = (int64_t)(sm_count > 0 ? sm_count : 132) * 8;
    p.kw = 1;
    while (p.kw < MR_MAX_KW && p.tiles * p.kw < want && steps >= (int64_t)p.kw * 2 * p.unroll * 2) p.kw *= 2;
    const int fkw = g_force_kw ? g_force_kw : (env_kw == 1 || env_kw == 2 || env_kw == 4 || env_kw == 8 || env_kw == 16) ? env_kw : 0;
    if (fkw) p.kw = fkw;
    return p;
}

// Lane (g, q) of a step holds rows g and g + 8 at k = 8q..8q+7 (words 0-1: the first mma's
// a0/a2 with a1/a3 from row g + 8, words 2-3 the second's) and token 8j + g's activations at
// the same k for B: A and B agree on the K order inside each mma, which is all it needs.
template <int U>
__device__ __forceinline__ void mr_load(uint4 (*a)[2], const uint16_t *w0, const uint16_t *w1, bool ok0, bool ok1,
                                        int64_t s0, int64_t steps)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t s = s0 + u;
        const bool in = s < steps;
        a[u][0] = in && ok0 ? nb_lin_ld_stream(w0 + s * 32) : make_uint4(0, 0, 0, 0);
        a[u][1] = in && ok1 ? nb_lin_ld_stream(w1 + s * 32) : make_uint4(0, 0, 0, 0);
    }
}

template <int NT, int TERMS, int U>
__global__ void __launch_bounds__(MR_MAX_KW * 32)
    k_linear_mmr(const uint16_t *__restrict__ W, int64_t ldw, int64_t n, int64_t k, const float *__restrict__ x,
                 int64_t ldx, int T, float *y, int64_t ldy, int accumulate, const float *bias)
{
    __shared__ float red[MR_MAX_KW][NT * 4][32];
    const int lane = threadIdx.x & 31, ks = threadIdx.x >> 5, KW = blockDim.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * 16 + g;
    const bool ok0 = r0 < n, ok1 = r0 + 8 < n;
    const uint16_t *w0 = W + (ok0 ? r0 : 0) * ldw + 8 * q, *w1 = W + (ok1 ? r0 + 8 : 0) * ldw + 8 * q;
    const int64_t steps = k / 32, groups = (steps + U - 1) / U;

    uint4 cur[U][2], nxt[U][2];
    mr_load<U>(cur, w0, w1, ok0, ok1, (int64_t)ks * U, steps);
    nb_pdl_wait(); // activations and outputs only after the kernel ahead has finished
    nb_pdl_trigger();

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const float *xq = x + 8 * q;
    for (int64_t gi = ks; gi < groups; gi += KW) {
        const bool more = gi + KW < groups;
        if (more) mr_load<U>(nxt, w0, w1, ok0, ok1, (gi + KW) * U, steps);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t s = gi * U + u;
            if (s >= steps) break;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int t = 8 * j + g;
                float v[8];
                if (t < T) {
                    const float4 *src = (const float4 *)(xq + (int64_t)t * ldx + s * 32);
                    const float4 p0 = __ldg(src), p1 = __ldg(src + 1);
                    v[0] = p0.x, v[1] = p0.y, v[2] = p0.z, v[3] = p0.w;
                    v[4] = p1.x, v[5] = p1.y, v[6] = p1.z, v[7] = p1.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) v[e] = 0.0f;
                }
#pragma unroll
                for (int term = 0; term < TERMS; term++) {
                    const uint32_t b0 = nb_lin_split(v[0], v[1]), b1 = nb_lin_split(v[2], v[3]);
                    const uint32_t b2 = nb_lin_split(v[4], v[5]), b3 = nb_lin_split(v[6], v[7]);
                    nb_lin_mma(acc[j], cur[u][0].x, cur[u][1].x, cur[u][0].y, cur[u][1].y, b0, b1);
                    nb_lin_mma(acc[j], cur[u][0].z, cur[u][1].z, cur[u][0].w, cur[u][1].w, b2, b3);
                }
            }
        }
        if (more) {
#pragma unroll
            for (int u = 0; u < U; u++) cur[u][0] = nxt[u][0], cur[u][1] = nxt[u][1];
        }
    }

    if (KW > 1) {
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[ks][j * 4 + e][lane] = acc[j][e];
        __syncthreads();
        if (ks != 0) return;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float s = 0.0f;
                for (int i = 0; i < KW; i++) s += red[i][j * 4 + e][lane];
                acc[j][e] = s;
            }
    }
    // c0/c1: row r0, tokens 8j + 2q (+1); c2/c3: row r0 + 8.
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = 8 * j + 2 * q + (e & 1);
            const int64_t row = r0 + (e >> 1) * 8;
            if (t >= T || row >= n) continue;
            float *o = y + (int64_t)t * ldy + row;
            *o = (accumulate ? *o : 0.0f) + acc[j][e] + (bias ? bias[row] : 0.0f);
        }
}

template <int NT, int TERMS, int U>
static cudaError_t mr_launch(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                             int accumulate, const nb_cuda_mmr_plan *p, cudaStream_t s)
{
    const uint16_t *W = (const uint16_t *)w->data;
    int64_t ldw = w->row_stride ? w->row_stride / 2 : w->k, n = w->n, k = w->k;
    const float *bias = w->bias;
    void *args[] = {(void *)&W, &ldw, &n, &k, (void *)&x, &ldx, &T, &y, &ldy, &accumulate, (void *)&bias};
    return nb_lin_launch((const void *)k_linear_mmr<NT, TERMS, U>, dim3((unsigned)p->tiles), dim3(32 * p->kw), 0, s,
                         args, 1);
}

extern "C" nb_status nb_cuda_linear_mmr(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                        float *y, int64_t ldy, int accumulate)
{
    const nb_cuda_mmr_plan p = nb_cuda_mmr_plan_for(w, T, nb_cuda_st(ctx)->sm_count);
    cudaStream_t s = nb_cuda_stream(ctx);
    const int t = (int)T;
    cudaError_t e;
#define MR_CASE(NT, TERMS, U) e = mr_launch<NT, TERMS, U>(w, x, ldx, t, y, ldy, accumulate, &p, s)
    if (p.unroll == 2) {
        if (p.token_tiles == 1) {
            if (p.terms == 1) MR_CASE(1, 1, 2);
            else MR_CASE(1, 2, 2);
        } else {
            if (p.terms == 1) MR_CASE(2, 1, 2);
            else MR_CASE(2, 2, 2);
        }
    } else {
        if (p.token_tiles == 1) {
            if (p.terms == 1) MR_CASE(1, 1, 4);
            else MR_CASE(1, 2, 4);
        } else {
            if (p.terms == 1) MR_CASE(2, 1, 4);
            else MR_CASE(2, 2, 4);
        }
    }
#undef MR_CASE
    if (e != cudaSuccess)
        return nb_error(NB_ERR_CUDA, "linear (mmr) [%lld x %lld] T=%lld: %s", (long long)w->n, (long long)w->k,
                        (long long)T, cudaGetErrorString(e));
    return NB_OK;
}

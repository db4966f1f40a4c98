// The tensor-core skinny GEMM of the CUDA linear op (ops/cuda/linear.h): y[T, n] (+)= x[T, k] W^T
// (+ bias) for BF16 weights and 3 <= T <= 64 tokens, bandwidth-bound like the GEMV but with
// the products on mma.sync instead of float32 FMAs (the GEMV is instruction-bound from ~10
// tokens: each weight feeds T FMAs plus its decode).
//   - Weights are the m16n8k16 A operand, loaded straight from global memory: a lane reads 16
//     bytes (8 consecutive BF16) of a row per 32-wide K step, no shared memory, each weight
//     byte read once per call. The K order inside an mma does not matter as long as A and B
//     agree, so lane (g, q) of a step holds row g's k = 8q..8q+7 and row g+8's: words 0-1 are
//     the first mma's a0/a2 (a1/a3 from row g+8), words 2-3 the second's.
//   - Tokens are the B operand (n8 per fragment). Activations are float32: each chunk of 256
//     K is split into TERMS BF16 terms (hi = bf16(x), lo = bf16(x - hi), [third = the rest])
//     by the whole block into shared memory, in the same per-lane order, so one 16-byte
//     shared load is two mmas' B fragment. hi + lo keeps ~16 mantissa bits (~4e-6 relative
//     RMS on a dot product), within the registry's float32 tolerance of 1e-5; three terms
//     are exact float32 inputs. The extra mmas are free while the kernel waits on HBM.
//   - F32 accumulation. Split-K: a block (8 warps, one 16-row tile each) walks a K range;
//     ranges (blockIdx.y) are chosen so that every SM streams; with more than one range the
//     partial sums go to scratch and a second kernel adds them in a fixed order (no atomics:
//     results do not depend on scheduling).
//   - PDL (the default when the linears are PDL-launched): the first chunk's weights are
//     loaded before griddepcontrol.wait; the split-K sum waits before reading partials.
//   - TERMS = 1 (NIBBLE_CUDA_LINEAR_MMA_TERMS=1, NB_WEIGHT_FEEDS_TOPK weights keep 2): BF16
//     activations, ~1e-3 relative; faster (8-layer step at batch 10: 4.768 -> 4.643 ms) but
//     it failed the glm_moe_dsa/long fixture (0.271 vs HF), so two terms stay the default.
//   - SILU (nb_cuda_linear_mma_silu): the staging reads SiLU(gate) * up from rows [gate | up].
// Exercised by tests/cuda_ops/test_cuda_linear.c (linear_mma, linear_v2, mlp_silu); timed by
// nibble bench-linear.
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/linear_dev.cuh"

#define LM_KC 256                 // K per staged chunk (8 steps of 32)
#define LM_PITCH (LM_KC + 32)     // shared row pitch in BF16: 576 bytes = 64 mod 128, conflict-free
#define LM_MAX_WARPS 8
#define LM_PARTIAL_BYTES (32u << 20) // split-K partials: sized once, never grown per T
// nb_cuda_scratch slot of the partials. Ops own slots 0-3 (callers 4-7: the engine's
// activations and index arrays). Slot 1 holds only the lt path's per-call weight expansion
// (linear.cu), never an input of a linear call, and lt and this kernel never share a call.
#define LM_PARTIAL_SLOT 1

static int g_force_mma;   // 0 auto, 1 never, 2 for every supported T in 1..64
static int g_force_terms; // 0 auto (2), 2 or 3

extern "C" void nb_cuda_linear_force_mma(int mode) { g_force_mma = mode == 1 || mode == 2 ? mode : 0; }
extern "C" void nb_cuda_linear_force_mma_terms(int terms) { g_force_terms = terms >= 1 && terms <= 3 ? terms : 0; }

// The block stages chunk [kc, kc + LM_KC) of every token's activations into shared memory as
// TERMS BF16 terms: 8 activations (two float4) per thread step -> TERMS x 16 bytes. SILU: the
// activations are SiLU(gate) * up of rows [gate | up] (up at +k), as the MLP's pass computes.
template <int NT, int TERMS, bool SILU = false>
__device__ __forceinline__ void lm_stage(uint16_t *xs, const float *__restrict__ x, int64_t ldx, int T, int64_t kc,
                                         int64_t ke, int64_t k)
{
    constexpr int TOK = 8 * NT;
    for (int e = threadIdx.x; e < TOK * (LM_KC / 8); e += blockDim.x) {
        const int t = e / (LM_KC / 8), c8 = (e % (LM_KC / 8)) * 8;
        float v[8];
        if (t < T && kc + c8 < ke) {
            const float4 *src = (const float4 *)(x + (int64_t)t * ldx + kc + c8);
            const float4 p0 = __ldg(src), p1 = __ldg(src + 1);
            v[0] = p0.x, v[1] = p0.y, v[2] = p0.z, v[3] = p0.w, v[4] = p1.x, v[5] = p1.y, v[6] = p1.z, v[7] = p1.w;
            if constexpr (SILU) {
                const float4 u0 = __ldg((const float4 *)((const float *)src + k)), u1 = __ldg((const float4 *)((const float *)src + k) + 1);
                const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = v[i] / (1.0f + expf(-v[i])) * u[i];
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
        }
#pragma unroll
        for (int term = 0; term < TERMS; term++) {
            uint4 o;
            o.x = nb_lin_split(v[0], v[1]);
            o.y = nb_lin_split(v[2], v[3]);
            o.z = nb_lin_split(v[4], v[5]);
            o.w = nb_lin_split(v[6], v[7]);
            *(uint4 *)(xs + ((int64_t)term * TOK + t) * LM_PITCH + c8) = o;
        }
    }
}

// S consecutive 32-wide K steps from k0 of this lane's two rows (zeros past ke or the rows).
template <int S>
__device__ __forceinline__ void lm_load(uint4 *a, uint4 *b, const uint16_t *w0, const uint16_t *w1, bool ok0, bool ok1,
                                        int64_t k0, int64_t ke)
{
#pragma unroll
    for (int s = 0; s < S; s++) {
        const int64_t kk = k0 + s * 32;
        const bool in = kk < ke;
        a[s] = in && ok0 ? nb_lin_ld_stream(w0 + kk) : make_uint4(0, 0, 0, 0);
        b[s] = in && ok1 ? nb_lin_ld_stream(w1 + kk) : make_uint4(0, 0, 0, 0);
    }
}

// The mmas of S steps starting at step s0 of the staged chunk kc.
template <int NT, int TERMS, int S>
__device__ __forceinline__ void lm_compute(float (*acc)[4], const uint4 *a, const uint4 *b, const uint16_t *xs, int s0,
                                           int64_t kc, int64_t ke, int g, int q)
{
    constexpr int TOK = 8 * NT;
#pragma unroll
    for (int s = 0; s < S; s++) {
        if (kc + (s0 + s) * 32 >= ke) break;
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int term = 0; term < TERMS; term++) {
                const uint4 bf =
                    *(const uint4 *)(xs + ((int64_t)term * TOK + 8 * j + g) * LM_PITCH + (s0 + s) * 32 + 8 * q);
                nb_lin_mma(acc[j], a[s].x, b[s].x, a[s].y, b[s].y, bf.x, bf.y);
                nb_lin_mma(acc[j], a[s].z, b[s].z, a[s].w, b[s].w, bf.z, bf.w);
            }
        }
    }
}

// NT: n8 token tiles (T <= 8 NT), TERMS: BF16 activation terms. Block: blockDim.x / 32 warps,
// warp w owns rows [(blockIdx.x * warps + w) * 16, +16); blockIdx.y the K range
// [y * kr, min(k, (y + 1) * kr)), kr a multiple of LM_KC. Shared: TERMS x 8NT x LM_PITCH BF16.
// part != NULL: write this range's sums to part[(y * T + t) * n + row], else finish into y.
// PIPE: the chunk's weights in two halves of 4 steps, the next half's loads issued before the
// current half's mmas (the next chunk's first half before the second half's mmas and the
// staging), so a warp's loads stay in flight through its math and the barriers; the same
// registers as one 8-step batch. Not PIPE: a chunk's 8 steps loaded, then used. PIPE measured
// slower on the H200 (8-layer GLM-5 decode step at batch 10: 5.118 vs 4.942 ms, same call,
// bench/RESULTS.md), so it is off unless NIBBLE_CUDA_LINEAR_MMA_PIPE=1.
// PDL (with PIPE off): the first chunk's weights are loaded before the programmatic-dependent
// wait (ops/cuda/linear_dev.cuh), the rest as without it.
template <int NT, int TERMS, bool PIPE, bool PDL, bool SILU = false>
__global__ void __launch_bounds__(LM_MAX_WARPS * 32)
    k_linear_mma(const uint16_t *__restrict__ W, int64_t ldw, int64_t n, int64_t k, const float *__restrict__ x,
                 int64_t ldx, int T, int64_t kr, float *y, int64_t ldy, int accumulate, const float *bias, float *part)
{
    extern __shared__ uint4 lm_smem[];
    uint16_t *xs = (uint16_t *)lm_smem;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 16 + g;
    const bool ok0 = r0 < n, ok1 = r0 + 8 < n;
    const uint16_t *w0 = W + (ok0 ? r0 : 0) * ldw + 8 * q, *w1 = W + (ok1 ? r0 + 8 : 0) * ldw + 8 * q;
    const int64_t kb = (int64_t)blockIdx.y * kr, ke = kb + kr < k ? kb + kr : k;

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    if (PIPE) {
        uint4 a0[4], b0[4], a1[4], b1[4];
        lm_load<4>(a0, b0, w0, w1, ok0, ok1, kb, ke);
        for (int64_t kc = kb; kc < ke; kc += LM_KC) {
            __syncthreads(); // the previous chunk's shared reads are done
            lm_stage<NT, TERMS>(xs, x, ldx, T, kc, ke, k);
            __syncthreads();
            lm_load<4>(a1, b1, w0, w1, ok0, ok1, kc + LM_KC / 2, ke);
            lm_compute<NT, TERMS, 4>(acc, a0, b0, xs, 0, kc, ke, g, q);
            if (kc + LM_KC < ke) lm_load<4>(a0, b0, w0, w1, ok0, ok1, kc + LM_KC, ke);
            lm_compute<NT, TERMS, 4>(acc, a1, b1, xs, 4, kc, ke, g, q);
        }
    } else {
        for (int64_t kc = kb; kc < ke; kc += LM_KC) {
            // This chunk's weights first, so that their latency overlaps the activation staging.
            uint4 a[8], b[8];
            lm_load<8>(a, b, w0, w1, ok0, ok1, kc, ke);
            if (PDL && kc == kb) {
                nb_pdl_wait();
                nb_pdl_trigger();
            }
            __syncthreads(); // the previous chunk's shared reads are done
            lm_stage<NT, TERMS, SILU>(xs, x, ldx, T, kc, ke, k);
            __syncthreads();
            lm_compute<NT, TERMS, 8>(acc, a, b, xs, 0, kc, ke, g, q);
        }
    }

    if (PDL) nb_pdl_wait(); // at once when the loop waited (an empty range skipped it)
    // c0/c1: row r0, tokens 8j + 2q (+1); c2/c3: row r0 + 8.
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int t = 8 * j + 2 * q + (i & 1);
            const int64_t row = r0 + (i >> 1) * 8;
            if (t >= T || row >= n) continue;
            if (part) {
                part[((int64_t)blockIdx.y * T + t) * n + row] = acc[j][i];
            } else {
                float *o = y + (int64_t)t * ldy + row;
                *o = (accumulate ? *o : 0.0f) + acc[j][i] + (bias ? bias[row] : 0.0f);
            }
        }
    }
}

// y[t, row] (+)= sum over the ks ranges of part (+ bias), ranges added in order.
__global__ void k_linear_mma_finish(const float *part, int ks, int T, int64_t n, float *y, int64_t ldy, int accumulate,
                                    const float *bias)
{
    nb_pdl_wait(); // a no-op unless launched as a programmatic dependent
    const int64_t total = (int64_t)T * n;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / n, row = e % n;
        float s = 0.0f;
        for (int i = 0; i < ks; i++) s += part[(int64_t)i * total + e];
        float *o = y + t * ldy + row;
        *o = (accumulate ? *o : 0.0f) + s + (bias ? bias[row] : 0.0f);
    }
}

extern "C" int nb_cuda_linear_mma_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    if (g_force_mma == 1 || T < 1 || T > NB_CUDA_LINEAR_MMA_MAX_TOKENS) return 0;
    if (g_force_mma != 2 && (T < NB_CUDA_LINEAR_MMA_MIN_TOKENS ||
                             (T > NB_CUDA_LINEAR_MMA_AUTO_MAX_TOKENS && w->n > NB_CUDA_LINEAR_MMA_SMALL_N)))
        return 0;
    if (w->fmt != NB_WFMT_BF16 || w->k % 32 || ((uintptr_t)w->data & 15)) return 0;
    if (w->row_stride && w->row_stride % 16) return 0;
    if (x && (ldx % 4 || ((uintptr_t)x & 15))) return 0;
    return 1;
}

static int lm_terms(void)
{
    static int env = -1; // NIBBLE_CUDA_LINEAR_MMA_TERMS=2|3 for A/B runs
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_MMA_TERMS");
        env = e && (!strcmp(e, "1") || !strcmp(e, "2") || !strcmp(e, "3")) ? atoi(e) : 0;
    }
    return g_force_terms ? g_force_terms : env ? env : NB_CUDA_LINEAR_MMA_TERMS_DEFAULT;
}

extern "C" nb_cuda_mma_plan nb_cuda_mma_plan_for(const nb_weight *w, int64_t T, int sm_count)
{
    nb_cuda_mma_plan p;
    p.token_tiles = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    p.terms = lm_terms();
    // One term (BF16 activations) only where no top-k hangs on the output (ops.h).
    if (p.terms == 1 && (w->flags & NB_WEIGHT_FEEDS_TOPK)) p.terms = 2;
    const int64_t tiles = (w->n + 15) / 16;
    p.warps = tiles < LM_MAX_WARPS ? (int)tiles : LM_MAX_WARPS;
    const int64_t blocks_n = (tiles + p.warps - 1) / p.warps;
    const int64_t chunks = (w->k + LM_KC - 1) / LM_KC;
    // About 16 streaming warps per SM (each holds 8 KB of weight loads per chunk in flight;
    // two 8-warp blocks fit an SM at 107-128 registers): split K into as many ranges as keep
    // the grid within that one wave, bounded by the chunks and the partials. Rounding the
    // range count up instead (the old plan, NIBBLE_CUDA_LINEAR_MMA_WAVE=up) gave most GLM-5
    // shapes 288 blocks for 264 slots: a second wave of 24 blocks, each as long as the first.
    const int64_t want = (sm_count > 0 ? sm_count : 132) * 16;
    static int wave_up = -1;
    if (wave_up < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_MMA_WAVE");
        wave_up = e && !strcmp(e, "up");
    }
    int64_t ks = wave_up ? (want + blocks_n * p.warps - 1) / (blocks_n * p.warps) : want / (blocks_n * p.warps);
    if (ks > chunks) ks = chunks;
    const int64_t cap = LM_PARTIAL_BYTES / ((int64_t)T * w->n * 4);
    if (ks > cap) ks = cap;
    if (ks < 1) ks = 1;
    const int64_t per = (chunks + ks - 1) / ks; // chunks per range
    p.kr = per * LM_KC;
    p.ksplit = (int)((chunks + per - 1) / per);
    p.blocks_n = (int)blocks_n;
    p.smem = (size_t)p.terms * 8 * p.token_tiles * LM_PITCH * 2;
    return p;
}

// NIBBLE_CUDA_LINEAR_MMA_PIPE=1: the pipelined main loop (k_linear_mma PIPE), for A/B runs.
static int lm_pipe(void)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_MMA_PIPE");
        env = e && !strcmp(e, "1");
    }
    return env;
}

template <int NT, int TERMS, bool PIPE, bool PDL, bool SILU = false>
static void lm_launch_p(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int accumulate,
                        const nb_cuda_mma_plan *p, float *part, cudaStream_t s)
{
    static int optin; // more than the 48 KB default for 64 tokens
    if (!optin) {
        cudaFuncSetAttribute(k_linear_mma<NT, TERMS, PIPE, PDL, SILU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             3 * 8 * 8 * LM_PITCH * 2);
        optin = 1;
    }
    const uint16_t *W = (const uint16_t *)w->data;
    int64_t ldw = w->row_stride ? w->row_stride / 2 : w->k, n = w->n, k = w->k, kr = p->kr;
    const float *bias = w->bias;
    void *args[] = {(void *)&W, &ldw, &n, &k, (void *)&x, &ldx, &T, &kr, &y, &ldy, &accumulate, (void *)&bias, &part};
    nb_lin_launch((const void *)k_linear_mma<NT, TERMS, PIPE, PDL, SILU>, dim3((unsigned)p->blocks_n, (unsigned)p->ksplit),
                  dim3(32 * p->warps), p->smem, s, args, PDL);
}

template <int NT, int TERMS>
static void lm_launch(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int accumulate,
                      const nb_cuda_mma_plan *p, float *part, cudaStream_t s, int silu)
{
    if constexpr (NT <= 2) {
        if (silu) { // nb_cuda_linear_mma_silu_can: not PIPE, at most 16 tokens
            if (nb_cuda_linear_pdl_on()) lm_launch_p<NT, TERMS, false, true, true>(w, x, ldx, T, y, ldy, accumulate, p, part, s);
            else lm_launch_p<NT, TERMS, false, false, true>(w, x, ldx, T, y, ldy, accumulate, p, part, s);
            return;
        }
    }
    if (lm_pipe()) lm_launch_p<NT, TERMS, true, false>(w, x, ldx, T, y, ldy, accumulate, p, part, s);
    else if (nb_cuda_linear_pdl_on()) lm_launch_p<NT, TERMS, false, true>(w, x, ldx, T, y, ldy, accumulate, p, part, s);
    else lm_launch_p<NT, TERMS, false, false>(w, x, ldx, T, y, ldy, accumulate, p, part, s);
}

template <int TERMS>
static void lm_launch_t(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int accumulate,
                        const nb_cuda_mma_plan *p, float *part, cudaStream_t s, int silu)
{
    switch (p->token_tiles) {
    case 1: lm_launch<1, TERMS>(w, x, ldx, T, y, ldy, accumulate, p, part, s, silu); break;
    case 2: lm_launch<2, TERMS>(w, x, ldx, T, y, ldy, accumulate, p, part, s, silu); break;
    case 4: lm_launch<4, TERMS>(w, x, ldx, T, y, ldy, accumulate, p, part, s, 0); break;
    default: lm_launch<8, TERMS>(w, x, ldx, T, y, ldy, accumulate, p, part, s, 0); break;
    }
}

// Whether nb_cuda_linear_mma_silu can run this call: the mma kernel's conditions, at most 16
// tokens, rows [gate | up] of at least 2k floats, the unpipelined loop.
extern "C" int nb_cuda_linear_mma_silu_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    return T <= 16 && ldx >= 2 * w->k && !lm_pipe() && nb_cuda_linear_mma_can(w, x, ldx, T);
}

static nb_status lm_run(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                        int64_t ldy, int accumulate, int silu);

extern "C" nb_status nb_cuda_linear_mma(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                        float *y, int64_t ldy, int accumulate)
{
    return lm_run(ctx, x, ldx, T, w, y, ldy, accumulate, 0);
}

// The same with activations SiLU(gate) * up of rows [gate | up] (nb_cuda_linear_mma_silu_can).
extern "C" nb_status nb_cuda_linear_mma_silu(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T,
                                             const nb_weight *w, float *y, int64_t ldy, int accumulate)
{
    return lm_run(ctx, x, ldx, T, w, y, ldy, accumulate, 1);
}

static nb_status lm_run(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                        int64_t ldy, int accumulate, int silu)
{
    nb_cuda_mma_plan p = nb_cuda_mma_plan_for(w, T, nb_cuda_st(ctx)->sm_count);
    cudaStream_t s = nb_cuda_stream(ctx);
    float *part = NULL;
    if (p.ksplit > 1) {
        // A fixed size (not T-dependent), so the slot is allocated once; when that first
        // request falls inside a graph capture the slot cannot grow: run unsplit instead.
        part = (float *)nb_cuda_scratch(ctx, LM_PARTIAL_SLOT, LM_PARTIAL_BYTES);
        if (!part) {
            nb_error_clear();
            p.kr = (w->k + LM_KC - 1) / LM_KC * LM_KC;
            p.ksplit = 1;
        }
    }
    if (p.terms == 3) lm_launch_t<3>(w, x, ldx, (int)T, y, ldy, accumulate, &p, part, s, silu);
    else if (p.terms == 1) lm_launch_t<1>(w, x, ldx, (int)T, y, ldy, accumulate, &p, part, s, silu);
    else lm_launch_t<2>(w, x, ldx, (int)T, y, ldy, accumulate, &p, part, s, silu);
    NB_CUDA_LAUNCHED("linear (mma)");
    if (part) {
        const int64_t total = T * w->n;
        int blocks = (int)((total + 255) / 256);
        int ks = p.ksplit, t = (int)T;
        int64_t n = w->n;
        const float *bias = w->bias;
        void *args[] = {&part, &ks, &t, &n, &y, &ldy, &accumulate, (void *)&bias};
        nb_lin_launch((const void *)k_linear_mma_finish, dim3(blocks < 4096 ? blocks : 4096), dim3(256), 0, s, args,
                      !lm_pipe());
        NB_CUDA_LAUNCHED("linear (mma split-K sum)");
    }
    return NB_OK;
}

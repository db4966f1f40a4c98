// CUDA dense linear layers and the SwiGLU MLP over weights in any nb_weight format.
// Five paths (nb_cuda_linear_path_name); ops/cuda/linear.h has the ladder and the knobs:
//   mmr:  BF16 weights at 1..16 tokens when NIBBLE_CUDA_LINEAR_MMR says so: the register-fed
//         tensor-core kernel of linear_mmr.cu.
//   sk:   the stream-K skinny GEMM of linear_sk.cu: the MLP's fused gate+up launch by default,
//         plain BF16 linears only on request (NIBBLE_CUDA_LINEAR_SK=1|2).
//   mma:  BF16 weights at 3..64 tokens: the tensor-core skinny GEMM of linear_mma.cu.
//   gemv: up to 16 tokens, float32 products (the CPU op's arithmetic). BF16 and NVFP4 rows
//         run the vector kernel of linear_gemv.cu (16-byte loads, rows per warp by T,
//         split-K when rows are few); other formats and odd layouts the generic kernel
//         below (one warp per row, 16 weights decoded per lane step).
//   lt:   cuBLASLt BF16 with float32 output. Activations are rounded to one BF16 term, or
//         split into two (hi = bf16(x), lo = bf16(x - hi), about 16 mantissa bits, twice
//         the tensor work) for weights flagged NB_WEIGHT_FEEDS_TOPK: one term flipped the
//         DSA top-k on the glm_moe_dsa fixture (0.248 relative error; index scores 2.3e-3
//         apart, BF16 moves them ~4e-3) and pushed qwen3_moe past 1e-2 through the router.
//         The weight is used in place when stored as BF16; otherwise its BF16 expansion is
//         cached per resident weight (NB_WEIGHT_RESIDENT) while device memory allows, else
//         expanded into scratch on every call.
// Exercised by tests/cuda_ops/test_cuda_linear.c (linear_gemv*, linear_lt*, mlp, mlp_silu).
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/linear_dev.cuh"

#define NB_GEMV_WARPS 4
#define NB_GEMV_TT 16 /* tokens per pass over the weight: a decode batch of up to 16 reads each weight once */

// One warp computes R consecutive output rows for up to NB_GEMV_TT tokens: each lane step
// decodes 16 weights of each row, loads 16 activations of each token once and uses them for
// all R rows (R > 1 when there are several tokens, so activations are not re-read per row).
template <int R>
__global__ void k_gemv(nb_weight w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int accumulate)
{
    const int lane = threadIdx.x & 31;
    const int64_t n0 = ((int64_t)blockIdx.x * NB_GEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= w.n) return;
    const int nr = w.n - n0 < R ? (int)(w.n - n0) : R;
    const int64_t nb = w.k / 16;
    for (int t0 = 0; t0 < T; t0 += NB_GEMV_TT) {
        const int nt = T - t0 < NB_GEMV_TT ? T - t0 : NB_GEMV_TT;
        float acc[NB_GEMV_TT][R];
#pragma unroll
        for (int t = 0; t < NB_GEMV_TT; t++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[t][r] = 0.0f;
        for (int64_t b = lane; b < nb; b += 32) {
            float wv[R][16];
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < nr) nb_d_wload16(w, n0 + r, b * 16, wv[r]);
                else
#pragma unroll
                    for (int i = 0; i < 16; i++) wv[r][i] = 0.0f;
            }
#pragma unroll
            for (int t = 0; t < NB_GEMV_TT; t++) {
                if (t < nt) {
                    const float *xs = x + (int64_t)(t0 + t) * ldx + b * 16;
                    float xv[16];
                    if ((((uintptr_t)xs) & 15) == 0) {
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            float4 v = ((const float4 *)xs)[i];
                            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < 16; i++) xv[i] = xs[i];
                    }
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float s = 0.0f;
#pragma unroll
                        for (int i = 0; i < 16; i++) s += xv[i] * wv[r][i];
                        acc[t][r] += s;
                    }
                }
            }
        }
        // Loops below are unrolled with guards so acc stays in registers.
        for (int64_t j = nb * 16 + lane; j < w.k; j += 32)
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < nr) {
                    float wv = nb_d_wload1(w, n0 + r, j);
#pragma unroll
                    for (int t = 0; t < NB_GEMV_TT; t++)
                        if (t < nt) acc[t][r] += x[(int64_t)(t0 + t) * ldx + j] * wv;
                }
            }
#pragma unroll
        for (int t = 0; t < NB_GEMV_TT; t++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[t][r] = nb_d_warp_sum(acc[t][r]);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= nr) continue;
                const float b = w.bias ? w.bias[n0 + r] : 0.0f;
#pragma unroll
                for (int t = 0; t < NB_GEMV_TT; t++) {
                    if (t >= nt) continue;
                    float *o = y + (int64_t)(t0 + t) * ldy + n0 + r;
                    float v = accumulate ? *o + acc[t][r] : acc[t][r];
                    *o = v + b;
                }
            }
        }
    }
}

__global__ void k_dequant(nb_weight w, uint16_t *ob, float *of)
{
    const int64_t r = blockIdx.x;
    for (int64_t j = threadIdx.x; j < w.k; j += blockDim.x) {
        float v = nb_d_wload1(w, r, j);
        if (ob) ob[r * w.k + j] = nb_d_to_bf16(v);
        else of[r * w.k + j] = v;
    }
}

nb_status nb_cuda_dequant(nb_ops_ctx *ctx, const nb_weight *w, uint16_t *out_bf16, float *out_f32)
{
    k_dequant<<<(unsigned)w->n, 256, 0, nb_cuda_stream(ctx)>>>(*w, out_bf16, out_f32);
    NB_CUDA_LAUNCHED("dequant");
    return NB_OK;
}

// hi[t, j] = bf16(x), lo[t, j] = bf16(x - hi) (lo may be NULL). One block per row; VEC:
// four floats per load and four BF16 per store (x, ldx and k multiples of 4, x 16-byte and hi,
// lo 8-byte aligned: nb_cuda_to_bf16_vec), which the scalar form reached only ~2.2 TB/s of
// (bench/RESULTS.md, issue 9, tenth session).
__device__ __forceinline__ uint32_t bf16_pair(float a, float b)
{
    return (uint32_t)nb_d_to_bf16(a) | ((uint32_t)nb_d_to_bf16(b) << 16);
}

template <bool VEC>
__global__ void k_to_bf16(const float *x, int64_t ldx, int64_t k, uint16_t *hi, uint16_t *lo)
{
    const float *xr = x + blockIdx.x * ldx;
    if (!VEC) {
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
            uint16_t h = nb_d_to_bf16(xr[j]);
            hi[blockIdx.x * k + j] = h;
            if (lo) lo[blockIdx.x * k + j] = nb_d_to_bf16(xr[j] - nb_d_bf16(h));
        }
        return;
    }
    uint2 *h2 = (uint2 *)(hi + blockIdx.x * k), *l2 = lo ? (uint2 *)(lo + blockIdx.x * k) : NULL;
    for (int64_t j = threadIdx.x; j < k / 4; j += blockDim.x) {
        const float4 v = ((const float4 *)xr)[j];
        const uint2 h = make_uint2(bf16_pair(v.x, v.y), bf16_pair(v.z, v.w));
        h2[j] = h;
        if (l2)
            l2[j] = make_uint2(bf16_pair(v.x - nb_d_bf16((uint16_t)h.x), v.y - nb_d_bf16((uint16_t)(h.x >> 16))),
                               bf16_pair(v.z - nb_d_bf16((uint16_t)h.y), v.w - nb_d_bf16((uint16_t)(h.y >> 16))));
    }
}

extern "C" int nb_cuda_to_bf16_vec(const float *x, int64_t ldx, int64_t k, const uint16_t *hi, const uint16_t *lo)
{
    return ldx % 4 == 0 && k % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)hi % 8 == 0 && (uintptr_t)lo % 8 == 0;
}

extern "C" void nb_cuda_to_bf16(void *stream, const float *x, int64_t ldx, int64_t T, int64_t k, uint16_t *hi,
                                uint16_t *lo)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (nb_cuda_to_bf16_vec(x, ldx, k, hi, lo)) k_to_bf16<true><<<(unsigned)T, 256, 0, s>>>(x, ldx, k, hi, lo);
    else k_to_bf16<false><<<(unsigned)T, 256, 0, s>>>(x, ldx, k, hi, lo);
}

// y[t] = (accumulate ? y[t] : 0) + c[t] + c[T + t] (+ bias): the halves of a stacked two-term GEMM.
__global__ void k_sum_terms(const float *c, int64_t T, int64_t n, float *y, int64_t ldy, int accumulate,
                            const float *bias)
{
    const float *a = c + blockIdx.x * n, *b = c + (T + blockIdx.x) * n;
    float *o = y + blockIdx.x * ldy;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = (accumulate ? o[j] + a[j] : a[j]) + b[j];
        o[j] = bias ? v + bias[j] : v;
    }
}

__global__ void k_add_bias(float *y, int64_t ldy, const float *bias, int64_t n)
{
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[blockIdx.x * ldy + j] += bias[j];
}

static int env_forced(void)
{
    static int forced = -1; /* -1: not read yet; 0 none; 1 gemv; 2 lt; 3 mma */
    if (forced < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR");
        forced = !e ? 0 : !strcmp(e, "gemv") ? 1 : !strcmp(e, "lt") ? 2 : !strcmp(e, "mma") ? 3 : 0;
        if (forced == 3) nb_cuda_linear_force_mma(2);
    }
    return forced;
}

extern "C" int nb_cuda_linear_should_use_lt(int64_t tokens, nb_wfmt fmt)
{
    const int forced = env_forced();
    if (forced == 1 || forced == 2) return forced == 2;
    (void)fmt;
    return tokens > NB_CUDA_LINEAR_GEMV_MAX_TOKENS;
}

// 0 gemv, 1 lt, 2 mma, 3 sk, 4 mmr.
static int pick(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    const int forced = env_forced();
    if (!forced && nb_cuda_linear_sk_should(w, x, ldx, T)) return 3;
    if (!forced && nb_cuda_linear_mmr_should(w, x, ldx, T)) return 4;
    if (forced != 1 && forced != 2 && nb_cuda_linear_mma_can(w, x, ldx, T)) return 2;
    return nb_cuda_linear_should_use_lt(T, w->fmt);
}

extern "C" const char *nb_cuda_linear_path_name(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    static const char *const names[] = {"gemv", "lt", "mma", "sk", "mmr"};
    return names[pick(w, x, ldx, T)];
}

static int g_force_pdl = -1;

extern "C" void nb_cuda_linear_force_pdl(int on) { g_force_pdl = on < 0 ? -1 : !!on; }

extern "C" int nb_cuda_linear_pdl_on(void)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_PDL");
        env = e && *e ? strcmp(e, "0") != 0 : NB_CUDA_LINEAR_PDL_DEFAULT;
    }
    return (g_force_pdl >= 0 ? g_force_pdl : env) && nb_cuda_pdl_on();
}

// Rows per warp: 1 for a token or two (every warp streams its own row: more warps in flight
// on narrow matrices), NB_GEMV_ROWS for more tokens (activations reused across rows).
#define NB_GEMV_ROWS 4
#define NB_GEMV_ROWS_MIN_TOKENS 3

extern "C" nb_status nb_cuda_linear_mma(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                        float *y, int64_t ldy, int accumulate);
extern "C" nb_status nb_cuda_linear_mmr(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                        float *y, int64_t ldy, int accumulate);
extern "C" nb_status nb_cuda_linear_sk(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                       float *y, int64_t ldy, int accumulate);
extern "C" nb_status nb_cuda_gate_up_sk(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T,
                                        const nb_weight *gate, const nb_weight *up, float *h, int64_t ldh);

static nb_status gemv(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                      int64_t ldy, int accumulate)
{
    cudaStream_t s = nb_cuda_stream(ctx);
    if (nb_cuda_gemv_vec(ctx, x, ldx, T, w, y, ldy, accumulate)) {
        NB_CUDA_LAUNCHED("linear (vector gemv)");
        return NB_OK;
    }
    if (T >= NB_GEMV_ROWS_MIN_TOKENS) {
        const int64_t per = (int64_t)NB_GEMV_WARPS * NB_GEMV_ROWS;
        k_gemv<NB_GEMV_ROWS><<<(unsigned)((w->n + per - 1) / per), 32 * NB_GEMV_WARPS, 0, s>>>(*w, x, ldx, (int)T, y,
                                                                                           ldy, accumulate);
    } else {
        k_gemv<1><<<(unsigned)((w->n + NB_GEMV_WARPS - 1) / NB_GEMV_WARPS), 32 * NB_GEMV_WARPS, 0, s>>>(
            *w, x, ldx, (int)T, y, ldy, accumulate);
    }
    NB_CUDA_LAUNCHED("linear (gemv)");
    return NB_OK;
}

static int g_force_terms;

extern "C" void nb_cuda_linear_force_terms(int terms) { g_force_terms = terms == 1 || terms == 2 ? terms : 0; }

static int g_stack = -1;

extern "C" void nb_cuda_linear_force_stack(int on) { g_stack = on < 0 ? -1 : !!on; }

static int stack_on(void)
{
    static int env = -1;
    if (g_stack >= 0) return g_stack;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_STACK");
        env = e && !strcmp(e, "1");
    }
    return env;
}

static size_t env_mb(const char *name, size_t dflt)
{
    const char *e = getenv(name);
    return e && *e ? (size_t)strtoull(e, NULL, 10) << 20 : dflt;
}

// A resident weight's BF16 expansion: cached in the context's GEMM handle when the cap and
// the free-memory reserve allow and the stream is not being captured (no cudaMalloc inside
// a graph). NULL: expand into scratch instead.
static const uint16_t *cached_bf16(nb_ops_ctx *ctx, const nb_weight *w, size_t bytes)
{
    if (!(w->flags & NB_WEIGHT_RESIDENT)) return NULL;
    nb_cuda_gemm *g = nb_cuda_st(ctx)->gemm;
    void *hit = nb_cuda_gemm_cache_get(g, w->data, bytes);
    if (hit) return (const uint16_t *)hit;
    static size_t cap = (size_t)-1, reserve;
    static int read_env;
    if (!read_env) {
        cap = env_mb("NIBBLE_CUDA_LINEAR_CACHE_MB", (size_t)-1);
        reserve = env_mb("NIBBLE_CUDA_LINEAR_CACHE_RESERVE_MB", (size_t)8192 << 20);
        read_env = 1;
    }
    if (nb_cuda_gemm_cache_bytes(g, NULL) + bytes > cap) return NULL;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(nb_cuda_stream(ctx), &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return NULL;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < bytes + reserve) return NULL;
    void *buf = NULL;
    if (cudaMalloc(&buf, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (nb_cuda_dequant(ctx, w, (uint16_t *)buf, NULL) != NB_OK ||
        nb_cuda_gemm_cache_put(g, w->data, buf, bytes) != NB_OK) {
        cudaStreamSynchronize(nb_cuda_stream(ctx));
        cudaFree(buf);
        return NULL;
    }
    NB_LOG_DEBUG("cuda", "linear: cached a BF16 copy of a [%lld, %lld] weight (%zu bytes)", (long long)w->n,
                 (long long)w->k, bytes);
    return (const uint16_t *)buf;
}

extern "C" void nb_cuda_linear_cache_stats(nb_ops_ctx *ctx, int *entries, size_t *bytes)
{
    size_t b = nb_cuda_gemm_cache_bytes(nb_cuda_st(ctx)->gemm, entries);
    if (bytes) *bytes = b;
}

extern "C" void nb_cuda_linear_gemm_stats(nb_ops_ctx *ctx, int warm, long *queries, long *warm_launches)
{
    nb_cuda_gemm *g = nb_cuda_st(ctx)->gemm;
    if (warm >= 0) nb_cuda_gemm_set_warm(g, warm);
    if (queries) *queries = nb_cuda_gemm_queries(g);
    if (warm_launches) *warm_launches = nb_cuda_gemm_warm_launches(g);
}

// BF16 activation terms of the cuBLASLt path for w.
static int lt_terms(const nb_weight *w)
{
    static int env_terms = -1; // NIBBLE_CUDA_LINEAR_TERMS=1|2: every weight, for A/B runs
    if (env_terms < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_TERMS");
        env_terms = e && (!strcmp(e, "1") || !strcmp(e, "2")) ? atoi(e) : 0;
    }
    const int forced = g_force_terms ? g_force_terms : env_terms;
    return forced ? forced : (w->flags & NB_WEIGHT_FEEDS_TOPK) ? 2 : 1;
}

// Bytes of the BF16 activations the cuBLASLt path keeps in scratch slot 0 (one term per T x k).
static size_t lt_act_bytes(int terms, int64_t T, int64_t k) { return ((size_t)(terms * T * k) * 2 + 255) / 256 * 256; }

// pre: NULL, or the activations already in BF16 (one term, dense [T][k], in scratch slot 0 as
// lt_act_bytes sized it; x is then not read).
static nb_status lt(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                    int64_t ldy, int accumulate, const uint16_t *pre)
{
    const int64_t n = w->n, k = w->k;
    cudaStream_t s = nb_cuda_stream(ctx);
    const int terms = pre ? 1 : lt_terms(w);
    NB_LOG_DEBUG("cuda", "linear lt: T=%lld [%lld, %lld] %s, %d BF16 term%s", (long long)T, (long long)n, (long long)k,
                 w->fmt == NB_WFMT_BF16 ? "bf16" : "expanded", terms, terms > 1 ? "s" : "");
    // Stacked two terms: the F32 halves follow the activations in the same slot (one request,
    // so growing the slot cannot move the activations after they are written).
    const int stack = terms == 2 && stack_on();
    const size_t xbytes = lt_act_bytes(terms, T, k);
    uint16_t *xb = pre ? (uint16_t *)pre : (uint16_t *)nb_cuda_scratch(ctx, 0, xbytes + (stack ? (size_t)(2 * T * n) * 4 : 0));
    if (!xb) return NB_ERR_OUT_OF_MEMORY;
    uint16_t *xlo = terms == 2 ? xb + T * k : NULL;
    if (!pre) {
        nb_cuda_to_bf16(s, x, ldx, T, k, xb, xlo);
        NB_CUDA_LAUNCHED("linear (to bf16)");
    }
    const void *wp = w->data;
    int64_t ldw = k;
    if (w->fmt == NB_WFMT_BF16 && (w->row_stride == 0 || w->row_stride % 2 == 0) && ((uintptr_t)w->data & 15) == 0) {
        ldw = w->row_stride ? w->row_stride / 2 : k;
    } else if (!(wp = cached_bf16(ctx, w, (size_t)(n * k) * 2))) {
        uint16_t *wb = (uint16_t *)nb_cuda_scratch(ctx, 1, (size_t)(n * k) * 2);
        if (!wb) return NB_ERR_OUT_OF_MEMORY;
        NB_TRY(nb_cuda_dequant(ctx, w, wb, NULL));
        wp = wb;
    }
    nb_cuda_gemm *g = nb_cuda_st(ctx)->gemm;
    if (stack) {
        float *c = (float *)((uint8_t *)xb + xbytes);
        NB_TRY(nb_cuda_gemm_bf16(g, s, (int)(2 * T), (int)n, (int)k, xb, (int)k, wp, (int)ldw, c, (int)n, 1, 1.0f, 0.0f));
        k_sum_terms<<<(unsigned)T, 256, 0, s>>>(c, T, n, y, ldy, accumulate, w->bias);
        NB_CUDA_LAUNCHED("linear (sum of stacked terms)");
        return NB_OK;
    }
    NB_TRY(nb_cuda_gemm_bf16(g, s, (int)T, (int)n, (int)k, xb, (int)k, wp, (int)ldw, y, (int)ldy, 1, 1.0f,
                             accumulate ? 1.0f : 0.0f));
    if (xlo)
        NB_TRY(nb_cuda_gemm_bf16(g, s, (int)T, (int)n, (int)k, xlo, (int)k, wp, (int)ldw, y, (int)ldy, 1, 1.0f, 1.0f));
    if (w->bias) {
        k_add_bias<<<(unsigned)T, 256, 0, s>>>(y, ldy, w->bias, n);
        NB_CUDA_LAUNCHED("linear (bias)");
    }
    return NB_OK;
}

nb_status nb_cuda_linear_raw(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                             int64_t ldy, int accumulate)
{
    if (T == 0) return NB_OK;
    switch (pick(w, x, ldx, T)) {
    case 4: return nb_cuda_linear_mmr(ctx, x, ldx, T, w, y, ldy, accumulate);
    case 3: return nb_cuda_linear_sk(ctx, x, ldx, T, w, y, ldy, accumulate);
    case 2: return nb_cuda_linear_mma(ctx, x, ldx, T, w, y, ldy, accumulate);
    case 1: return lt(ctx, x, ldx, T, w, y, ldy, accumulate, NULL);
    default: return gemv(ctx, x, ldx, T, w, y, ldy, accumulate);
    }
}

extern "C" nb_status nb_cuda_linear(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *w, nb_tensor *y)
{
    NB_TRY(nb_cuda_check_f32("linear", "x", x, 2));
    NB_TRY(nb_cuda_check_f32("linear", "y", y, 2));
    NB_TRY(nb_cuda_check_weight("linear", w));
    if (x->shape[1] != w->k || y->shape[1] != w->n || y->shape[0] != x->shape[0])
        return nb_error(NB_ERR_INVALID_ARG, "linear: x [%lld, %lld] W [%lld, %lld] y [%lld, %lld] do not agree",
                        (long long)x->shape[0], (long long)x->shape[1], (long long)w->n, (long long)w->k,
                        (long long)y->shape[0], (long long)y->shape[1]);
    return nb_cuda_linear_raw(ctx, (const float *)x->data, x->stride[0], x->shape[0], w, (float *)y->data,
                              y->stride[0], 0);
}

__global__ void k_silu_mul(float *g, const float *u, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = g[i];
        g[i] = a / (1.0f + expf(-a)) * u[i];
    }
}

// Rows of [T, 2I] holding gate then up: the gate half becomes SiLU(gate) * up. Launched as
// a programmatic dependent when the linears are (so the down projection behind it, and this
// kernel behind gate|up, start during the tail of the kernel ahead).
__global__ void k_silu_mul_pairs(float *gu, int64_t T, int64_t I)
{
    nb_pdl_wait();
    nb_pdl_trigger();
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < T * I; e += (int64_t)gridDim.x * blockDim.x) {
        float *g = gu + (e / I) * 2 * I + e % I;
        const float a = g[0];
        g[0] = a / (1.0f + expf(-a)) * g[I];
    }
}

extern "C" int nb_cuda_linear_mma_silu_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T);
extern "C" nb_status nb_cuda_linear_mma_silu(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T,
                                             const nb_weight *w, float *y, int64_t ldy, int accumulate);

// The same over four pairs per thread (I % 4 == 0, gu 16-byte aligned, T * I / 4 < 2^31), with
// one 32-bit division per four pairs instead of a 64-bit one per pair. bf: NULL, or a dense
// [T][I] BF16 output instead of the gate half (the cuBLASLt down projection's one-term input:
// the F32 pass and its conversion in one; the same rounding as the two).
__global__ void k_silu_mul_pairs4(float *gu, uint32_t T, uint32_t I, uint16_t *bf)
{
    nb_pdl_wait();
    nb_pdl_trigger();
    const uint32_t q = I / 4, n = T * q;
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) {
        const uint32_t t = e / q, c = e - t * q;
        float4 *g = (float4 *)(gu + (size_t)t * 2 * I) + c;
        const float4 a = g[0], u = g[q];
        float4 r;
        r.x = a.x / (1.0f + expf(-a.x)) * u.x;
        r.y = a.y / (1.0f + expf(-a.y)) * u.y;
        r.z = a.z / (1.0f + expf(-a.z)) * u.z;
        r.w = a.w / (1.0f + expf(-a.w)) * u.w;
        if (bf) ((uint2 *)(bf + (size_t)t * I))[c] = make_uint2(bf16_pair(r.x, r.y), bf16_pair(r.z, r.w));
        else g[0] = r;
    }
}

static int g_silu4 = -1;

extern "C" void nb_cuda_mlp_force_silu4(int mode) { g_silu4 = mode >= 0 && mode <= 2 ? mode : -1; }

// The SiLU pass of the adjacent pair: 2 four pairs per thread, and BF16 straight into the
// cuBLASLt down projection's input when that path takes it with one term; 1 four pairs per
// thread, F32 only; 0 the one-pair kernel (NIBBLE_CUDA_MLP_SILU4, default 2).
static int silu4_mode(void)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLP_SILU4");
        env = e && (!strcmp(e, "0") || !strcmp(e, "1") || !strcmp(e, "2")) ? atoi(e) : 2;
    }
    return g_silu4 >= 0 ? g_silu4 : env;
}

static int g_force_silu = -1;

extern "C" void nb_cuda_mlp_force_silu_fused(int mode) { g_force_silu = mode >= 0 && mode <= 2 ? mode : -1; }

// The down projection of the adjacent gate|up pair computes SiLU(gate) * up while it reads its
// activations instead of after a separate pass over them: 0 never, 1 on the vector GEMV v2 and
// the mma routes, 2 on the mma route only (the GEMV recomputes the SiLU in every warp that
// reads an activation: measured slower at 1-2 tokens, bench/RESULTS.md).
static int silu_fused_mode(void)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLP_SILU_FUSED");
        env = e && *e ? atoi(e) : NB_CUDA_MLP_SILU_FUSED_DEFAULT;
        if (env < 0 || env > 2) env = NB_CUDA_MLP_SILU_FUSED_DEFAULT;
    }
    return g_force_silu >= 0 ? g_force_silu : env;
}

// gate and up as adjacent rows of one dense BF16 allocation (model/upload.c lays the device
// twin's MLPs out so): one [2I, H] linear reads both. NIBBLE_CUDA_MLP_CAT=0 turns it off.
static int gate_up_adjacent(const nb_weight *gate, const nb_weight *up)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLP_CAT");
        off = e && !strcmp(e, "0");
    }
    if (off || gate->fmt != NB_WFMT_BF16 || up->fmt != NB_WFMT_BF16 || gate->bias || up->bias) return 0;
    const int64_t rb = gate->k * 2;
    if ((gate->row_stride && gate->row_stride != rb) || (up->row_stride && up->row_stride != rb)) return 0;
    return (const char *)up->data == (const char *)gate->data + gate->n * rb;
}

extern "C" nb_status nb_cuda_mlp(nb_ops_ctx *ctx, const nb_tensor *x, const nb_weight *gate, const nb_weight *up,
                                 const nb_weight *down, int accumulate, nb_tensor *out)
{
    NB_TRY(nb_cuda_check_f32("mlp", "x", x, 2));
    NB_TRY(nb_cuda_check_f32("mlp", "out", out, 2));
    NB_TRY(nb_cuda_check_weight("mlp gate", gate));
    NB_TRY(nb_cuda_check_weight("mlp up", up));
    NB_TRY(nb_cuda_check_weight("mlp down", down));
    const int64_t T = x->shape[0], H = x->shape[1], I = gate->n;
    if (gate->k != H || up->k != H || up->n != I || down->k != I || down->n != H || out->shape[0] != T ||
        out->shape[1] != H)
        return nb_error(NB_ERR_INVALID_ARG, "mlp: x [%lld, %lld], gate [%lld, %lld], up [%lld, %lld], down [%lld, %lld]",
                        (long long)T, (long long)H, (long long)gate->n, (long long)gate->k, (long long)up->n,
                        (long long)up->k, (long long)down->n, (long long)down->k);
    if (T == 0) return NB_OK;
    float *g = (float *)nb_cuda_scratch(ctx, 2, (size_t)(2 * T * I) * sizeof(float));
    if (!g) return NB_ERR_OUT_OF_MEMORY;
    float *u = g + T * I;
    const float *xp = (const float *)x->data;
    if (nb_cuda_gate_up_sk_can(gate, up, xp, x->stride[0], T)) {
        // One launch for gate and up with SiLU(gate) * up in its epilogue, then down.
        NB_TRY(nb_cuda_gate_up_sk(ctx, xp, x->stride[0], T, gate, up, g, I));
        return nb_cuda_linear_raw(ctx, g, I, T, down, (float *)out->data, out->stride[0], accumulate);
    }
    if (gate_up_adjacent(gate, up)) {
        // One linear for both halves (one weight stream, one launch), SiLU(gate) * up in place
        // of the gate half, down reading that half with a row stride of 2I.
        nb_weight gu = *gate;
        gu.n = 2 * I;
        gu.flags = gate->flags | up->flags;
        NB_TRY(nb_cuda_linear_raw(ctx, xp, x->stride[0], T, &gu, g, 2 * I, 0));
        const int silu = silu_fused_mode();
        if (silu) {
            // down reads SiLU(gate) * up straight from the pairs: no separate pass.
            const int route = pick(down, g, 2 * I, T);
            if (route == 2 && nb_cuda_linear_mma_silu_can(down, g, 2 * I, T))
                return nb_cuda_linear_mma_silu(ctx, g, 2 * I, T, down, (float *)out->data, out->stride[0], accumulate);
            if (silu == 1 && route == 0 && nb_cuda_gemv_vec_silu(ctx, g, 2 * I, T, down, (float *)out->data, out->stride[0],
                                                    accumulate)) {
                NB_CUDA_LAUNCHED("mlp (down, SiLU of the pairs fused)");
                return NB_OK;
            }
        }
        /* four pairs per thread where the shapes allow; with down on cuBLASLt with one term,
         * SiLU(gate) * up goes to its BF16 input directly */
        const int s4 = I % 4 == 0 && (uintptr_t)g % 16 == 0 && T * I / 4 < ((int64_t)1 << 31) ? silu4_mode() : 0;
        const int pre = s4 == 2 && pick(down, g, 2 * I, T) == 1 && lt_terms(down) == 1;
        uint16_t *xb = pre ? (uint16_t *)nb_cuda_scratch(ctx, 0, lt_act_bytes(1, T, I)) : NULL;
        if (pre && !xb) return NB_ERR_OUT_OF_MEMORY;
        const int64_t n = s4 ? T * I / 4 : T * I, blocks = (n + 255) / 256;
        int64_t t = T, i = I;
        uint32_t t32 = (uint32_t)T, i32 = (uint32_t)I;
        void *args1[] = {&g, &t, &i}, *args4[] = {&g, &t32, &i32, &xb};
        nb_lin_launch(s4 ? (const void *)k_silu_mul_pairs4 : (const void *)k_silu_mul_pairs,
                      dim3((unsigned)(blocks < 65535 ? blocks : 65535)), dim3(256), 0, nb_cuda_stream(ctx),
                      s4 ? args4 : args1, 1);
        NB_CUDA_LAUNCHED("mlp (silu of the pairs)");
        if (pre) return lt(ctx, NULL, 0, T, down, (float *)out->data, out->stride[0], accumulate, xb);
        return nb_cuda_linear_raw(ctx, g, 2 * I, T, down, (float *)out->data, out->stride[0], accumulate);
    }
    NB_TRY(nb_cuda_linear_raw(ctx, xp, x->stride[0], T, gate, g, I, 0));
    NB_TRY(nb_cuda_linear_raw(ctx, xp, x->stride[0], T, up, u, I, 0));
    int blocks = (int)((T * I + 255) / 256);
    k_silu_mul<<<blocks < 65535 ? blocks : 65535, 256, 0, nb_cuda_stream(ctx)>>>(g, u, T * I);
    NB_CUDA_LAUNCHED("mlp (silu)");
    return nb_cuda_linear_raw(ctx, g, I, T, down, (float *)out->data, out->stride[0], accumulate);
}

// The vector GEMV of the CUDA linear op (ops/cuda/linear.h): y[T, n] (+)= x[T, k] W^T for
// T <= 16 tokens over BF16 or NVFP4 rows, float32 products and sums, bandwidth-bound.
//   - Each lane loads 16 bytes of a row per step (8 BF16 / 32 NVFP4 weights) with a
//     no-L1-allocate load, U steps issued before the first use; a warp reads 512 contiguous
//     bytes per row per step, so a row group streams whole 128-byte lines.
//   - R rows per warp share each activation load (activations are float32 and re-read
//     from L1 per row otherwise); R = 2 for one or two tokens, 4 from three. The second
//     version (V = 1, the default; NIBBLE_CUDA_GEMV_V2=0 the first) runs BF16 at 1-2 tokens
//     with R = 4 and two steps in flight on weights of more than 1024 rows (same bytes in
//     flight, half the activation reads: at 2 tokens on long rows those outgrow L1 and were
//     what made T = 2 slower than T = 1 on the same bytes), at most 64 registers, and loads
//     its first weights before the programmatic-dependent wait (PDL).
//   - SILU (nb_cuda_gemv_vec_silu, the MLP's down projection when asked for): activations
//     read as SiLU(gate) * up from rows [gate | up]; every warp recomputes the SiLU of what
//     it reads (measured slower than the separate pass at 1-2 tokens: off by default).
//   - K split over W warps of a 256-thread block (the same rows, interleaved 512-byte
//     steps) when rows alone would not put enough warps on the SMs, and from 3 tokens
//     (T * K activation floats outgrow L1; a quarter of them per warp does not); partial
//     sums meet in shared memory, no atomics, so results do not depend on scheduling.
//   - NVFP4: the activations of each K tile are staged through shared memory (swizzled,
//     double-buffered), because a lane's 128 strided bytes per token read from L1 cost a
//     pass per load; BF16 reads them straight from L1 (staging measured slower there).
//   - Per-lane sums are reduced by a butterfly that halves the values each step (TT*R
//     values in about TT*R shuffles, not 5 per value).
//   - NVFP4: two E2M1 codes become one half2 by bit moves (an fp16 with the code's bits
//     in place is the value times 2^-14, subnormals included), then float; the 16-weight
//     block sum is multiplied by its E4M3 scale, the row by global_scale * 2^14 at the end.
// Exercised by tests/cuda_ops/test_cuda_linear.c (linear_gemv*, linear_v2); timed by nibble bench-linear.
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/linear_dev.cuh"

#define GV_WARPS 8

static int g_force_ksplit;

extern "C" void nb_cuda_linear_force_ksplit(int ksplit) { g_force_ksplit = ksplit; }

// Eight E2M1 codes of one 32-bit word (code i in bits 4i..4i+3) as floats times 2^-14,
// ordered so that f[j] is code j and f[4 + j] code 4 + j.
__device__ __forceinline__ void gv_e2m1x8(uint32_t v, float *f)
{
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t n = (v >> (4 * j)) & 0x000F000Fu; // codes j and j + 4
        uint32_t h = ((n & 0x00070007u) << 9) | ((n & 0x00080008u) << 12);
        float2 p = __half22float2(*reinterpret_cast<__half2 *>(&h));
        f[j] = p.x;
        f[4 + j] = p.y;
    }
}

// Sum each of N per-lane values over the warp. N a power of two. Afterwards lane l holds
// the totals of the values with indices gv_index<N>(l) + i, i < max(1, N / 32), and only
// lanes with gv_writer<N>(l) need to store them.
template <int CNT, int O> __device__ __forceinline__ void gv_reduce_from(float *v, int lane)
{
    if constexpr (O == 0) {
        return;
    } else if constexpr (CNT >= 2) {
        constexpr int half = CNT / 2;
        const bool up = (lane & O) != 0;
#pragma unroll
        for (int i = 0; i < half; i++) {
            float send = up ? v[i] : v[i + half];
            float keep = up ? v[i + half] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        gv_reduce_from<half, O / 2>(v, lane);
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
        gv_reduce_from<1, O / 2>(v, lane);
    }
}

template <int N> __device__ __forceinline__ void gv_reduce(float *v, int lane) { gv_reduce_from<N, 16>(v, lane); }

template <int N> __device__ __forceinline__ int gv_index(int lane)
{
    int idx = 0;
#pragma unroll
    for (int lvl = 0; lvl < 5; lvl++)
        if ((N >> lvl) >= 2 && (lane & (16 >> lvl))) idx += (N >> lvl) / 2;
    return idx;
}

template <int N> __device__ __forceinline__ bool gv_writer(int lane)
{
    // Levels after the values ran out summed plain: lanes differing only there agree.
    int free_bits = 0;
#pragma unroll
    for (int lvl = 0; lvl < 5; lvl++)
        if ((N >> lvl) < 2) free_bits |= 16 >> lvl;
    return (lane & free_bits) == 0;
}

// Float4 unit i of chunk cl in a staged activation tile, swizzled so that the eight lanes
// of a quarter warp (consecutive chunks) read eight different 16-byte bank groups.
template <int U4> __device__ __forceinline__ int gv_swz(int64_t cl, int i)
{
    return U4 == 8 ? i ^ (int)(cl & 7) : i ^ (int)((cl >> 2) & 1);
}

// FMT: NB_WFMT_BF16 or NB_WFMT_NVFP4. TT: tokens per pass (register tile), R: rows per
// warp, U: 16-byte steps in flight per row. Block: GV_WARPS warps = (GV_WARPS / W) row
// groups of R rows, each split over W warps along K. The K loop walks tiles of W * U * 32
// chunks. STG: the tile's activations are first copied by the whole block into shared
// memory (double-buffered, one barrier per tile; dynamic smem 2 * T * tile floats), so a
// lane's 32 or 128 strided bytes per token come from conflict-free shared memory instead
// of L1 lines shared by few lanes (NVFP4) or from L2 when T * K floats overflow L1 (many
// tokens). Without STG, lanes read activations with __ldg.
// V: 0 the previous kernel (no PDL wait, no register bound), 1 the current one: the first
// tile's weights are loaded before the programmatic-dependent wait, and the BF16 1-2 token
// instances are held to 64 registers (4 blocks of 8 warps per SM: the 2-token instance took
// 73, so 3 blocks, 24 warps, where 1 token ran 32: the T = 2 rows ran ~10 % slower).
// SILU (BF16, not staged, V = 1): the activations are the gate halves of rows [gate | up] of
// 2K floats (ldx >= 2K): each value read is SiLU(gate) * up, computed as the MLP's pass does.
template <int FMT, int TT, int R, int U, bool STG, int V, bool SILU = false>
__global__ void __launch_bounds__(GV_WARPS * 32, (V && FMT == NB_WFMT_BF16 && TT <= 2 && !STG) ? 4 : 0)
    k_gemv_vec(nb_weight w, const float *__restrict__ x, int64_t ldx,
                                                            int T, float *y, int64_t ldy, int accumulate, int W)
{
    constexpr int N = TT * R;
    constexpr int CE = FMT == NB_WFMT_BF16 ? 8 : 32; // weights per 16-byte chunk
    constexpr int U4 = CE / 4;                        // float4 activation units per chunk
    __shared__ float red[GV_WARPS][N];
    extern __shared__ float4 gv_xs[];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int g = wi / W, ks = wi % W;
    const int groups = GV_WARPS / W;
    const int64_t n0 = ((int64_t)blockIdx.x * groups + g) * R;
    const int nr = n0 >= w.n ? 0 : (w.n - n0 < R ? (int)(w.n - n0) : R);
    const int64_t rb = nb_d_row_bytes(w), srb = nb_d_scale_row_bytes(w);
    const int64_t S = w.k / CE; // chunks per row
    const int CW = W * U * 32;  // chunks per tile
    const uint8_t *rows = (const uint8_t *)w.data + (nr ? n0 : 0) * rb;
    const uint8_t *srows = FMT == NB_WFMT_NVFP4 ? (const uint8_t *)w.scale + (nr ? n0 : 0) * srb : NULL;

    float acc[N];
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.0f;

    int64_t j = 0;
    for (int64_t c0 = 0; c0 < S; c0 += CW, j++) {
        uint4 raw[U][R];
        uint32_t sc[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)(u * W + ks) * 32 + lane;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const bool ok = c < S && r < nr;
                raw[u][r] = ok ? nb_lin_ld_stream(rows + r * rb + c * 16) : make_uint4(0, 0, 0, 0);
                if (FMT == NB_WFMT_NVFP4) sc[u][r] = ok ? *(const uint16_t *)(srows + r * srb + c * 2) : 0u;
            }
        }
        if (V && c0 == 0) {
            // The first tile's weights are in flight: now wait for the kernel ahead (PDL)
            // before touching activations or outputs.
            nb_pdl_wait();
            nb_pdl_trigger();
        }
        float4 *xb = gv_xs + ((j & 1) ? (int64_t)T * CW * U4 : 0);
        if constexpr (STG) {
            // Buffer j & 1 was last read in tile j - 2, before every warp reached the barrier
            // of tile j - 1: one barrier per tile suffices.
            const int per_t = CW * U4, lg = __ffs(per_t) - 1; // a power of two
            const int units = T * per_t;
            for (int e = threadIdx.x; e < units; e += blockDim.x) {
                const int t = e >> lg, rem = e & (per_t - 1), cl = rem / U4, i = rem % U4;
                const int64_t c = c0 + cl;
                xb[(t * CW + cl) * U4 + gv_swz<U4>(cl, i)] =
                    c < S ? __ldg((const float4 *)(x + (int64_t)t * ldx + c * CE) + i)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            __syncthreads();
        }
        if (nr == 0) continue;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t cl = (int64_t)(u * W + ks) * 32 + lane, c = c0 + cl;
            if (c >= S) continue;
            // Activation unit i (float4) of this chunk for token t.
            auto xu = [&](int t, int i) -> float4 {
                if constexpr (STG) return xb[((int64_t)t * CW + cl) * U4 + gv_swz<U4>(cl, i)];
                else {
                    const float *xs = x + (int64_t)t * ldx + c * CE;
                    float4 a = __ldg((const float4 *)xs + i);
                    if constexpr (SILU) {
                        const float4 u = __ldg((const float4 *)(xs + w.k) + i);
                        a.x = a.x / (1.0f + expf(-a.x)) * u.x;
                        a.y = a.y / (1.0f + expf(-a.y)) * u.y;
                        a.z = a.z / (1.0f + expf(-a.z)) * u.z;
                        a.w = a.w / (1.0f + expf(-a.w)) * u.w;
                    }
                    return a;
                }
            };
            if (FMT == NB_WFMT_BF16) {
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    if (TT > 1 && t >= T) continue;
                    const float4 a = xu(t, 0), b = xu(t, 1);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const uint4 q = raw[u][r];
                        float s = acc[t * R + r];
                        s = fmaf(__uint_as_float(q.x << 16), a.x, s);
                        s = fmaf(__uint_as_float(q.x & 0xffff0000u), a.y, s);
                        s = fmaf(__uint_as_float(q.y << 16), a.z, s);
                        s = fmaf(__uint_as_float(q.y & 0xffff0000u), a.w, s);
                        s = fmaf(__uint_as_float(q.z << 16), b.x, s);
                        s = fmaf(__uint_as_float(q.z & 0xffff0000u), b.y, s);
                        s = fmaf(__uint_as_float(q.w << 16), b.z, s);
                        s = fmaf(__uint_as_float(q.w & 0xffff0000u), b.w, s);
                        acc[t * R + r] = s;
                    }
                }
            } else {
                // Two 16-weight blocks per chunk (words 0-1 and 2-3), one scale each.
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float wf[R][16], scl[R];
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const uint4 q = raw[u][r];
                        scl[r] = nb_d_e4m3((uint8_t)(sc[u][r] >> (8 * h)));
                        gv_e2m1x8(h ? q.z : q.x, wf[r]);
                        gv_e2m1x8(h ? q.w : q.y, wf[r] + 8);
                    }
#pragma unroll
                    for (int t = 0; t < TT; t++) {
                        if (TT > 1 && t >= T) continue;
                        const float4 a = xu(t, 4 * h), b = xu(t, 4 * h + 1);
                        const float4 cc = xu(t, 4 * h + 2), d = xu(t, 4 * h + 3);
                        const float xv[16] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w,
                                              cc.x, cc.y, cc.z, cc.w, d.x, d.y, d.z, d.w};
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            float s = 0.0f;
#pragma unroll
                            for (int i = 0; i < 16; i++) s = fmaf(wf[r][i], xv[i], s);
                            acc[t * R + r] = fmaf(s, scl[r], acc[t * R + r]);
                        }
                    }
                }
            }
        }
    }

    if (V) nb_pdl_wait(); // returns at once when the loop waited already (S == 0 skipped it)
    gv_reduce<N>(acc, lane);
    if (gv_writer<N>(lane)) {
        const int base = gv_index<N>(lane);
#pragma unroll
        for (int i = 0; i < (N >= 32 ? N / 32 : 1); i++) red[wi][base + i] = acc[i];
    }
    __syncthreads();
    const float post = FMT == NB_WFMT_NVFP4 ? w.global_scale * 16384.0f : 1.0f;
    for (int e = threadIdx.x; e < groups * N; e += blockDim.x) {
        const int gg = e / N, v = e % N, t = v / R, r = v % R;
        const int64_t row = ((int64_t)blockIdx.x * groups + gg) * R + r;
        if (t >= T || row >= w.n) continue;
        float s = 0.0f;
        for (int j = 0; j < W; j++) s += red[gg * W + j][v];
        s *= post;
        float *o = y + (int64_t)t * ldy + row;
        const float b = w.bias ? w.bias[row] : 0.0f;
        *o = (accumulate ? *o + s : s) + b;
    }
}

// Whether the vector kernel can read this weight and these activations as 16-byte vectors.
static int gv_can(const nb_weight *w, const float *x, int64_t ldx)
{
    if (w->fmt != NB_WFMT_BF16 && w->fmt != NB_WFMT_NVFP4) return 0;
    const int64_t ce = w->fmt == NB_WFMT_BF16 ? 8 : 32;
    const int64_t rb = w->row_stride ? w->row_stride : nb_weight_row_bytes(w->fmt, w->k);
    if (w->k % ce || rb % 16 || ((uintptr_t)w->data & 15)) return 0;
    if (w->fmt == NB_WFMT_NVFP4) {
        const int64_t srb = w->scale_row_stride ? w->scale_row_stride : w->k / 16;
        if (srb % 2 || ((uintptr_t)w->scale & 1)) return 0;
    }
    return ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
}

static int gv_tile(int64_t T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : 16; }
static int gv_rows(int tt) { return tt <= 2 ? 2 : 4; }
static int gv_unroll(nb_wfmt f, int tt) { return f == NB_WFMT_BF16 ? (tt <= 4 ? 4 : 2) : (tt <= 2 ? 2 : 1); }

#define GV_STAGE_MAX_BYTES (64 << 10) // K split stops growing the staged tile here
#define GV_STAGE_OPTIN_BYTES (160 << 10)

// Dynamic shared memory of the staged kernel: two tiles of T x (W * U * 32 chunks) floats.
static size_t gv_stage_bytes(nb_wfmt f, int64_t T, int W, int U)
{
    const size_t ce = f == NB_WFMT_BF16 ? 8 : 32;
    return 2u * (size_t)T * (size_t)W * (size_t)U * 32u * ce * sizeof(float);
}

static int g_force_v2 = -1;

extern "C" void nb_cuda_linear_force_gemv_v2(int on) { g_force_v2 = on < 0 ? -1 : !!on; }

static int gv_v2_on(void)
{
    static int env = -1; // NIBBLE_CUDA_GEMV_V2=0|1: the previous / current kernel, for A/B runs
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_GEMV_V2");
        env = e && *e ? strcmp(e, "0") != 0 : NB_CUDA_GEMV_V2_DEFAULT;
    }
    return g_force_v2 >= 0 ? g_force_v2 : env;
}

static int g_force_r4 = -1;

extern "C" void nb_cuda_linear_force_gemv_r4(int max_tokens) { g_force_r4 = max_tokens >= 0 && max_tokens <= 2 ? max_tokens : -1; }

// Four rows per warp (two 16-byte steps in flight per row) instead of two (four steps) for
// BF16 in the second version at up to this many tokens (0, 1 or 2): the same bytes in flight
// per warp, each activation load shared by twice the rows (at 2 tokens on long rows the
// activations outgrow L1 and their L2 reads compete with the weights). NIBBLE_CUDA_GEMV_R4.
static int gv_r4_max(void)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_GEMV_R4");
        env = e && *e ? atoi(e) : NB_CUDA_GEMV_R4_DEFAULT;
        if (env < 0 || env > 2) env = NB_CUDA_GEMV_R4_DEFAULT;
    }
    return g_force_r4 >= 0 ? g_force_r4 : env;
}

static int g_force_staged; // 0 auto, 1 off, 2 on

extern "C" void nb_cuda_linear_force_staged(int mode) { g_force_staged = mode == 1 || mode == 2 ? mode : 0; }

extern "C" nb_cuda_gemv_plan nb_cuda_gemv_plan_for(const nb_weight *w, int64_t T, int sm_count)
{
    nb_cuda_gemv_plan p = {0, 1, 1, 0, 0};
    if (T < 1 || T > NB_CUDA_LINEAR_GEMV_MAX_TOKENS) return p;
    p.vector = 1;
    p.tile_tokens = gv_tile(T);
    p.rows_per_warp = gv_rows(p.tile_tokens);
    // Four rows per warp (gv_r4_max): on the H200 faster on every GLM-5 BF16 shape at 1-2
    // tokens but the router (256 rows: too few warps), so automatically only above 1024 rows.
    const int r4 = w->fmt == NB_WFMT_BF16 && T <= gv_r4_max() && g_force_staged != 2 && gv_v2_on() &&
                   (g_force_r4 >= 0 || w->n > 1024);
    if (r4) p.rows_per_warp = 4;
    // The ladder below was read off `nibble bench-linear --sweep` on the H200 (bench/RESULTS.md).
    // Staged activations: NVFP4 (a lane's 128 activation bytes per token otherwise cost a
    // full L1 pass per load: staging doubled NVFP4 throughput); BF16 reads them from L1.
    p.staged = w->fmt == NB_WFMT_NVFP4;
    if (g_force_staged) p.staged = g_force_staged == 2;
    const int U = r4 ? 2 : gv_unroll(w->fmt, p.tile_tokens);
    const int64_t ce = w->fmt == NB_WFMT_BF16 ? 8 : 32;
    const int64_t steps = w->k / ce / 32; // 512-byte warp steps per row
    const int64_t groups = (w->n + p.rows_per_warp - 1) / p.rows_per_warp;
    const int64_t sms = sm_count > 0 ? sm_count : 132;
    if (p.staged) {
        // Few warps per SM suffice (the tile is shared by the block); split K only while
        // rows give fewer than ~2 blocks per SM and the tile stays small.
        while (p.ksplit < GV_WARPS && groups * p.ksplit < sms * 15 && steps >= 2 * p.ksplit &&
               gv_stage_bytes(w->fmt, T, 2 * p.ksplit, U) <= GV_STAGE_MAX_BYTES)
            p.ksplit *= 2;
    } else if (p.tile_tokens <= 2) {
        // Enough warps for the bytes in flight that hide HBM latency (about 48 per SM),
        // each K-split warp keeping at least four 512-byte steps per row.
        while (p.ksplit < GV_WARPS && groups * p.ksplit < sms * 48 && steps >= 4 * p.ksplit) p.ksplit *= 2;
    } else {
        // From 3 tokens T * K activation floats outgrow L1: four warps per row group each
        // read a quarter of them (measured best at 10 tokens on every GLM-5 shape).
        while (p.ksplit < 4 && steps >= 2 * (2 * p.ksplit)) p.ksplit *= 2;
    }
    if (g_force_ksplit == 1 || g_force_ksplit == 2 || g_force_ksplit == 4 || g_force_ksplit == 8)
        p.ksplit = g_force_ksplit;
    if (p.staged && gv_stage_bytes(w->fmt, T, p.ksplit, U) > GV_STAGE_OPTIN_BYTES) p.staged = 0;
    return p;
}

// R4: four rows per warp, two steps in flight (gv_r4_max), BF16 at 1-2 tokens, V = 1 only.
// SILU: BF16, V = 1, not staged (k_gemv_vec).
template <int FMT, int TT, int V, bool R4 = false, bool SILU = false>
static cudaError_t gv_launch_b(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                               int accumulate, const nb_cuda_gemv_plan *p, cudaStream_t s)
{
    constexpr int R = R4 || TT > 2 ? 4 : 2;
    constexpr int U = R4 ? 2 : FMT == NB_WFMT_BF16 ? (TT <= 4 ? 4 : 2) : (TT <= 2 ? 2 : 1);
    int W = p->ksplit;
    const int64_t per_block = (int64_t)(GV_WARPS / W) * R;
    const unsigned blocks = (unsigned)((w->n + per_block - 1) / per_block);
    nb_weight wv = *w;
    void *args[] = {&wv, (void *)&x, &ldx, &T, &y, &ldy, &accumulate, &W};
    if (!SILU && p->staged) {
        static int optin; // the staged tile may pass the 48 KB default
        if (!optin) {
            cudaFuncSetAttribute(k_gemv_vec<FMT, TT, R, U, true, V, SILU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 GV_STAGE_OPTIN_BYTES);
            optin = 1;
        }
        const size_t smem = gv_stage_bytes((nb_wfmt)FMT, T, W, U);
        return nb_lin_launch((const void *)k_gemv_vec<FMT, TT, R, U, true, V, SILU>, dim3(blocks), dim3(GV_WARPS * 32),
                             smem, s, args, V);
    }
    return nb_lin_launch((const void *)k_gemv_vec<FMT, TT, R, U, false, V, SILU>, dim3(blocks), dim3(GV_WARPS * 32), 0, s,
                         args, V);
}

template <int FMT, int TT>
static void gv_launch(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int accumulate,
                      const nb_cuda_gemv_plan *p, cudaStream_t s, int silu)
{
    if constexpr (FMT == NB_WFMT_BF16) {
        const bool r4 = TT <= 2 && p->rows_per_warp == 4 && !p->staged; // the plan chose four rows (gv_r4_max)
        if (silu) { // nb_cuda_gemv_vec_silu checked: BF16, v2, not staged
            if constexpr (TT <= 2) {
                if (r4) {
                    gv_launch_b<FMT, TT, 1, true, true>(w, x, ldx, T, y, ldy, accumulate, p, s);
                    return;
                }
            }
            gv_launch_b<FMT, TT, 1, false, true>(w, x, ldx, T, y, ldy, accumulate, p, s);
            return;
        }
        if constexpr (TT <= 2) {
            if (r4) {
                gv_launch_b<FMT, TT, 1, true>(w, x, ldx, T, y, ldy, accumulate, p, s);
                return;
            }
        }
    }
    if (gv_v2_on()) gv_launch_b<FMT, TT, 1>(w, x, ldx, T, y, ldy, accumulate, p, s);
    else gv_launch_b<FMT, TT, 0>(w, x, ldx, T, y, ldy, accumulate, p, s);
}

template <int FMT>
static void gv_launch_fmt(const nb_weight *w, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                          int accumulate, const nb_cuda_gemv_plan *p, cudaStream_t s, int silu)
{
    switch (p->tile_tokens) {
    case 1: gv_launch<FMT, 1>(w, x, ldx, T, y, ldy, accumulate, p, s, silu); break;
    case 2: gv_launch<FMT, 2>(w, x, ldx, T, y, ldy, accumulate, p, s, silu); break;
    case 4: gv_launch<FMT, 4>(w, x, ldx, T, y, ldy, accumulate, p, s, silu); break;
    case 8: gv_launch<FMT, 8>(w, x, ldx, T, y, ldy, accumulate, p, s, silu); break;
    default: gv_launch<FMT, 16>(w, x, ldx, T, y, ldy, accumulate, p, s, silu); break;
    }
}

// 1 when the vector kernel took the call (launch errors are checked by the caller).
int nb_cuda_gemv_vec(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                     int64_t ldy, int accumulate)
{
    if (!gv_can(w, x, ldx)) return 0;
    nb_cuda_gemv_plan p = nb_cuda_gemv_plan_for(w, T, nb_cuda_st(ctx)->sm_count);
    if (!p.vector) return 0;
    cudaStream_t s = nb_cuda_stream(ctx);
    if (w->fmt == NB_WFMT_BF16) gv_launch_fmt<NB_WFMT_BF16>(w, x, ldx, (int)T, y, ldy, accumulate, &p, s, 0);
    else gv_launch_fmt<NB_WFMT_NVFP4>(w, x, ldx, (int)T, y, ldy, accumulate, &p, s, 0);
    return 1;
}

// The same with activations SiLU(gate) * up read from rows [gate | up] (ldx >= 2 w->k): BF16
// weights on the second version's unstaged kernel only; 0 when it cannot take the call.
int nb_cuda_gemv_vec_silu(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w, float *y,
                          int64_t ldy, int accumulate)
{
    if (w->fmt != NB_WFMT_BF16 || !gv_v2_on() || ldx < 2 * w->k || !gv_can(w, x, ldx)) return 0;
    nb_cuda_gemv_plan p = nb_cuda_gemv_plan_for(w, T, nb_cuda_st(ctx)->sm_count);
    if (!p.vector || p.staged) return 0;
    gv_launch_fmt<NB_WFMT_BF16>(w, x, ldx, (int)T, y, ldy, accumulate, &p, nb_cuda_stream(ctx), 1);
    return 1;
}

// The stream-K skinny GEMM of the CUDA linear op (ops/cuda/linear.h): y[T, n] (+)= x[T, k] W^T
// (+ bias) for BF16 weights at 1..16 tokens, and the MLP's gate and up projections in one
// pass with SiLU(gate) * up computed before anything is stored. Bandwidth-bound: the goal is
// that every SM streams weights from the first cycle to the last.
//   - Work is cut in units of (row tile, 32-K step); each warp of the grid owns one
//     contiguous range of U / warps units (+-1), so all warps finish together whatever the
//     shape: no wave tail (the mma kernel's 288 blocks over 264 slots ran a second wave of 24
//     on o_proj), and small matrices still spread over every SM. A range starts and ends
//     anywhere inside a tile, so at most its first and last tiles are partial.
//   - A row tile is 32 rows (two m16 tiles sharing each activation fragment) or, for the
//     gate/up pair, 16 rows of gate and the same 16 of up. Weights are the m16n8k16 A operand
//     straight from global memory (16 bytes per lane per row per step, SK_UB steps in flight
//     per warp), no shared memory and no barriers: warps never wait for each other.
//   - Activations (float32) are the B operand: each lane loads its token's 8 values of a step
//     from L1/L2 and splits them in registers into TERMS BF16 terms (hi, lo[, rest]): two keep
//     ~16 mantissa bits (the mma kernel's contract, ~4e-6 relative on a dot product), three
//     are the float32 activations exactly (used at 1-2 tokens, where the float32 GEMV's
//     contract applies).
//   - A partial tile's sums go to scratch (lane-major, coalesced); the warp that arrives last
//     at the tile (a per-tile counter) adds every contributor's sums in warp order (fixed:
//     results do not depend on scheduling), applies the epilogue and resets the counter. No
//     second launch. The counters are one device array, zero at load and left zero by every
//     call; two streams must not run this kernel at once on one device.
// Where it stands (H200, bench/RESULTS.md): as one launch for the MLP's gate and up with the
// epilogue above it beats two linears + a SiLU pass on GLM-5's dense MLP (the default route,
// linear.h); as a plain linear it streams at 30-76% of copy and lost to the vector GEMV and the
// mma kernel on every GLM-5 shape but a few ties, so plain linears take it only on request
// (NIBBLE_CUDA_LINEAR_SK=1|2). Its latency is the weak point: each warp waits for a batch of
// loads, then multiplies it with nothing in flight; a cp.async ring (3 batches in flight, 6
// warps per SM) was tried and measured slower still (bench/RESULTS.md).
// Exercised by tests/cuda_ops/test_cuda_linear.c (linear_sk, mlp_fused); timed by nibble bench-linear.
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear.h"
#include "ops/cuda/linear_dev.cuh"

#define SK_WARPS 4                 // warps per block
#define SK_UB 4                    // 32-K steps loaded before the first is used
#define SK_MAX_TILES (1 << 16)     // per-tile counters
#define SK_PART_SLOT 1             // the mma kernel's partials slot (linear_mma.cu says why slot 1)
#define SK_PART_BYTES (32u << 20)  // the same size, so the slot is allocated once for both
#define SK_MIN_STEPS 16            // a range shorter than this spends more on its partials than it streams

__device__ unsigned int g_sk_count[SK_MAX_TILES];

static int g_force_sk;     // 0 the environment's choice, 1 never, 2 every T it supports, 3 the sk ladder
static int g_force_warps;  // total warps of the grid (tests); 0 automatic
static int g_force_fused = -1;

extern "C" void nb_cuda_linear_force_sk(int mode) { g_force_sk = mode >= 1 && mode <= 3 ? mode : 0; }
extern "C" void nb_cuda_linear_force_sk_warps(int warps) { g_force_warps = warps > 0 ? warps : 0; }
extern "C" void nb_cuda_mlp_force_fused(int on) { g_force_fused = on < 0 ? -1 : !!on; }

static int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

// 0: the default policy (linear.h: only the MLP's large gate+up pairs); 1 never; 2 always;
// 3 the sk ladder (every linear at 3..16 tokens, small ones at 1-2, every MLP pair).
static int sk_mode(void)
{
    static int env = -1; // NIBBLE_CUDA_LINEAR_SK: unset default, 0 never, 1 the sk ladder, 2 always
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_LINEAR_SK");
        env = !e || !*e ? 0 : !strcmp(e, "0") ? 1 : !strcmp(e, "2") ? 2 : 3;
    }
    return g_force_sk ? g_force_sk : env;
}

extern "C" int nb_cuda_mlp_fused_on(void)
{
    static int env = -1;
    if (env < 0) env = env_int("NIBBLE_CUDA_MLP_FUSED", 1) != 0;
    return sk_mode() != 1 && (g_force_fused >= 0 ? g_force_fused : env);
}

struct sk_args {
    const uint16_t *wa, *wb; // m-tile 0 rows from wa, m-tile 1 rows from wb
    int64_t lda, ldb;        // row strides in BF16 elements
    int64_t n, S, units;     // output rows, 32-K steps per row, tiles * S
    int off1, tile_rows;     // m-tile 1's first row in a tile (16; 0 for the pair), rows per tile
    int64_t nwarps;          // warps that own a range
    const float *x;
    int64_t ldx;
    int T;
    float *y;
    int64_t ldy;
    int accumulate;
    const float *bias_a, *bias_b;
    float *part; // NULL: every range is whole tiles
};

// First unit of warp j's range, and the warp whose range holds unit u.
__host__ __device__ __forceinline__ int64_t sk_start(int64_t units, int64_t warps, int64_t j)
{
    return units * j / warps;
}
__device__ __forceinline__ int64_t sk_owner(int64_t units, int64_t warps, int64_t u)
{
    return ((u + 1) * warps + units - 1) / units - 1;
}

// Partial sums of warp j's slot (0: its first tile, 1: its last), lane-major.
template <int NT> __device__ __forceinline__ float *sk_part(const sk_args &a, int64_t j, int slot, int lane)
{
    return a.part + ((j * 2 + slot) * (2 * NT * 4)) * 32 + lane;
}

// NT: n8 token tiles (T <= 8 NT); TERMS: BF16 activation terms; PAIR: m-tile 0 is gate, 1 up,
// and the output is SiLU(gate) * up (accumulate ignored). Lane (g, q) of a step holds rows g
// and g + 8 of each m-tile at k = 8q..8q+7 (A and B agree on this K order, which is all the
// mma needs); c0/c1 are row g, tokens 2q, 2q+1 of the n8 tile, c2/c3 row g + 8.
template <int NT, int TERMS, bool PAIR>
__global__ void __launch_bounds__(SK_WARPS * 32, 4) k_linear_sk(sk_args a)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t j = (int64_t)blockIdx.x * SK_WARPS + (threadIdx.x >> 5);
    if (j >= a.nwarps) return;
    const int64_t ub = sk_start(a.units, a.nwarps, j), ue = sk_start(a.units, a.nwarps, j + 1);
    const int64_t first_tile = ub / a.S;
    for (int64_t u = ub; u < ue;) {
        const int64_t tile = u / a.S, s0 = u - tile * a.S;
        const int64_t s1 = a.S < s0 + (ue - u) ? a.S : s0 + (ue - u);
        const int64_t base = tile * a.tile_rows;
        const uint16_t *wp[2][2];
        bool ok[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t row = base + (mt ? a.off1 : 0) + g + 8 * h;
                ok[mt][h] = row < a.n;
                wp[mt][h] = (mt ? a.wb : a.wa) + (ok[mt][h] ? row : 0) * (mt ? a.ldb : a.lda) + 8 * q;
            }
        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int jt = 0; jt < NT; jt++) acc[mt][jt][0] = acc[mt][jt][1] = acc[mt][jt][2] = acc[mt][jt][3] = 0.0f;

        for (int64_t s = s0; s < s1; s += SK_UB) {
            uint4 w[SK_UB][2][2];
#pragma unroll
            for (int i = 0; i < SK_UB; i++) {
                const bool in = s + i < s1;
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        w[i][mt][h] = in && ok[mt][h] ? nb_lin_ld_stream(wp[mt][h] + (s + i) * 32) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int i = 0; i < SK_UB; i++) {
                if (s + i >= s1) break;
                const int64_t k0 = (s + i) * 32 + 8 * q;
#pragma unroll
                for (int jt = 0; jt < NT; jt++) {
                    const int t = 8 * jt + g;
                    float v[8];
                    if (t < a.T) {
                        const float4 *src = (const float4 *)(a.x + (int64_t)t * a.ldx + k0);
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
#pragma unroll
                        for (int mt = 0; mt < 2; mt++) {
                            const uint4 r0 = w[i][mt][0], r1 = w[i][mt][1];
                            nb_lin_mma(acc[mt][jt], r0.x, r1.x, r0.y, r1.y, b0, b1);
                            nb_lin_mma(acc[mt][jt], r0.z, r1.z, r0.w, r1.w, b2, b3);
                        }
                    }
                }
            }
        }

        const int64_t done = s1 - s0;
        if (!(s0 == 0 && s1 == a.S)) {
            // A partial tile (a.part != NULL here: without it every range is whole tiles).
            const int slot = tile == first_tile ? 0 : 1;
            float *pp = sk_part<NT>(a, j, slot, lane);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int jt = 0; jt < NT; jt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) __stcg(pp + ((mt * NT + jt) * 4 + e) * 32, acc[mt][jt][e]);
            __threadfence();
            __syncwarp();
            const int64_t jf = sk_owner(a.units, a.nwarps, tile * a.S);
            const int64_t jl = sk_owner(a.units, a.nwarps, tile * a.S + a.S - 1);
            unsigned old = 0;
            if (lane == 0) old = atomicAdd(&g_sk_count[tile], 1u);
            old = __shfl_sync(0xffffffffu, old, 0);
            if ((int64_t)old != jl - jf) {
                u += done;
                continue;
            }
            __threadfence();
            float tot[2][NT][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int jt = 0; jt < NT; jt++) tot[mt][jt][0] = tot[mt][jt][1] = tot[mt][jt][2] = tot[mt][jt][3] = 0.0f;
            for (int64_t jj = jf; jj <= jl; jj++) {
                const int sl = tile == sk_start(a.units, a.nwarps, jj) / a.S ? 0 : 1;
                const float *qp = sk_part<NT>(a, jj, sl, lane);
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int jt = 0; jt < NT; jt++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            tot[mt][jt][e] += jj == j ? acc[mt][jt][e] : __ldcg(qp + ((mt * NT + jt) * 4 + e) * 32);
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int jt = 0; jt < NT; jt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][jt][e] = tot[mt][jt][e];
            if (lane == 0) g_sk_count[tile] = 0;
        }

#pragma unroll
        for (int jt = 0; jt < NT; jt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = 8 * jt + 2 * q + (e & 1);
                if (t >= a.T) continue;
                float *yr = a.y + (int64_t)t * a.ldy;
                if (PAIR) {
                    const int64_t row = base + g + 8 * (e >> 1);
                    if (row >= a.n) continue;
                    const float gv = acc[0][jt][e] + (a.bias_a ? a.bias_a[row] : 0.0f);
                    const float uv = acc[1][jt][e] + (a.bias_b ? a.bias_b[row] : 0.0f);
                    yr[row] = gv / (1.0f + expf(-gv)) * uv;
                } else {
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        const int64_t row = base + 16 * mt + g + 8 * (e >> 1);
                        if (row >= a.n) continue;
                        const float v = acc[mt][jt][e];
                        yr[row] = (a.accumulate ? yr[row] + v : v) + (a.bias_a ? a.bias_a[row] : 0.0f);
                    }
                }
            }
        u += done;
    }
}

extern "C" int nb_cuda_linear_sk_can(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    if (T < 1 || T > NB_CUDA_LINEAR_SK_MAX_TOKENS) return 0;
    if (w->fmt != NB_WFMT_BF16 || w->k % 32 || w->k < 32 || ((uintptr_t)w->data & 15)) return 0;
    if (w->row_stride && w->row_stride % 16) return 0;
    if ((w->n + 15) / 16 > SK_MAX_TILES) return 0;
    if (x && (ldx % 4 || ((uintptr_t)x & 15))) return 0;
    return 1;
}

extern "C" int nb_cuda_linear_sk_should(const nb_weight *w, const float *x, int64_t ldx, int64_t T)
{
    const int mode = sk_mode();
    // The default policy routes no plain linear here: the old ladder measured faster on every
    // GLM-5 shape but a few ties (bench/RESULTS.md, 2026-11-30 ~04:10).
    if (mode == 0 || mode == 1 || !nb_cuda_linear_sk_can(w, x, ldx, T)) return 0;
    if (mode == 2 || T >= 3) return 1;
    // The sk ladder at 1-2 tokens: only weights too small for the GEMV to fill the GPU.
    static int64_t small = -1;
    if (small < 0) small = (int64_t)env_int("NIBBLE_CUDA_LINEAR_SK_SMALL_MB", NB_CUDA_LINEAR_SK_SMALL_MB) << 20;
    return w->n * w->k * 2 <= small;
}

// Resident warps per SM of one instance (cached), for the grid size.
template <int NT, int TERMS, bool PAIR> static int sk_resident_warps(void)
{
    static int cached;
    if (!cached) {
        int blocks = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_linear_sk<NT, TERMS, PAIR>, SK_WARPS * 32, 0) !=
                cudaSuccess ||
            blocks < 1) {
            cudaGetLastError();
            blocks = 4;
        }
        cached = blocks * SK_WARPS;
    }
    return cached;
}

static int sk_terms_for(int64_t T)
{
    if (T <= 2) return 3;
    const int e = env_int("NIBBLE_CUDA_LINEAR_MMA_TERMS", 0);
    return e == 3 ? 3 : 2;
}

static int sk_warps_per_sm(int nt, int terms, int pair)
{
    const int e = env_int("NIBBLE_CUDA_SK_WARPS", 0); // A/B runs: resident warps per SM to use
    if (e > 0) return e;
    if (nt == 1) {
        if (terms == 3) return pair ? sk_resident_warps<1, 3, true>() : sk_resident_warps<1, 3, false>();
        return pair ? sk_resident_warps<1, 2, true>() : sk_resident_warps<1, 2, false>();
    }
    if (terms == 3) return pair ? sk_resident_warps<2, 3, true>() : sk_resident_warps<2, 3, false>();
    return pair ? sk_resident_warps<2, 2, true>() : sk_resident_warps<2, 2, false>();
}

static nb_cuda_sk_plan sk_plan(int64_t n, int64_t k, int64_t T, int pair, int sm_count)
{
    nb_cuda_sk_plan p;
    p.token_tiles = T <= 8 ? 1 : 2;
    p.terms = sk_terms_for(T);
    p.tile_rows = pair ? 16 : 32;
    p.tiles = (n + p.tile_rows - 1) / p.tile_rows;
    const int64_t S = k / 32, units = p.tiles * S;
    static int min_steps = -1;
    if (min_steps < 0) {
        min_steps = env_int("NIBBLE_CUDA_SK_MIN_STEPS", SK_MIN_STEPS);
        if (min_steps < 1) min_steps = 1;
    }
    int64_t want = (int64_t)(sm_count > 0 ? sm_count : 132) * sk_warps_per_sm(p.token_tiles, p.terms, pair);
    if (g_force_warps) want = g_force_warps;
    const int64_t by_len = units / min_steps;
    if (!g_force_warps && want > by_len) want = by_len;
    const int64_t part_cap = SK_PART_BYTES / ((int64_t)2 * 2 * p.token_tiles * 4 * 32 * 4);
    if (want > part_cap) want = part_cap;
    if (want > units) want = units;
    if (want < 1) want = 1;
    p.warps = want;
    p.steps_per_warp = (units + want - 1) / want;
    return p;
}

extern "C" nb_cuda_sk_plan nb_cuda_sk_plan_for(const nb_weight *w, int64_t T, int pair, int sm_count)
{
    return sk_plan(w->n, w->k, T, pair, sm_count);
}

template <int NT, int TERMS, bool PAIR>
static void sk_launch_3(const sk_args *a, cudaStream_t s)
{
    const unsigned blocks = (unsigned)((a->nwarps + SK_WARPS - 1) / SK_WARPS);
    k_linear_sk<NT, TERMS, PAIR><<<blocks, SK_WARPS * 32, 0, s>>>(*a);
}

template <bool PAIR> static void sk_launch(const sk_args *a, int nt, int terms, cudaStream_t s)
{
    if (nt == 1) {
        if (terms == 3) sk_launch_3<1, 3, PAIR>(a, s);
        else sk_launch_3<1, 2, PAIR>(a, s);
    } else {
        if (terms == 3) sk_launch_3<2, 3, PAIR>(a, s);
        else sk_launch_3<2, 2, PAIR>(a, s);
    }
}

static int64_t sk_ldw(const nb_weight *w) { return w->row_stride ? w->row_stride / 2 : w->k; }

// Shared by both entry points: plan, partials, launch. wb == NULL: a plain linear.
static nb_status sk_run(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *wa,
                        const nb_weight *wb, float *y, int64_t ldy, int accumulate)
{
    const int pair = wb != NULL;
    nb_cuda_sk_plan p = sk_plan(wa->n, wa->k, T, pair, nb_cuda_st(ctx)->sm_count);
    sk_args a;
    memset(&a, 0, sizeof a);
    a.wa = (const uint16_t *)wa->data;
    a.wb = (const uint16_t *)(pair ? wb->data : wa->data);
    a.lda = sk_ldw(wa);
    a.ldb = pair ? sk_ldw(wb) : a.lda;
    a.n = wa->n;
    a.S = wa->k / 32;
    a.units = p.tiles * a.S;
    a.off1 = pair ? 0 : 16;
    a.tile_rows = p.tile_rows;
    a.x = x, a.ldx = ldx, a.T = (int)T;
    a.y = y, a.ldy = ldy, a.accumulate = accumulate;
    a.bias_a = wa->bias;
    a.bias_b = pair ? wb->bias : NULL;
    a.nwarps = p.warps;
    if (a.units % p.warps || (a.units / p.warps) % a.S) {
        // Ranges that split tiles need the partials; when the slot cannot be had (its first
        // request inside a graph capture), fall back to one warp per tile.
        a.part = (float *)nb_cuda_scratch(ctx, SK_PART_SLOT, SK_PART_BYTES);
        if (!a.part) {
            nb_error_clear();
            a.nwarps = p.tiles;
        }
    }
    NB_LOG_DEBUG("cuda", "linear sk: T=%lld [%lld, %lld]%s, %d terms, %lld warps, ~%lld steps each", (long long)T,
                 (long long)wa->n, (long long)wa->k, pair ? " gate+up" : "", p.terms, (long long)a.nwarps,
                 (long long)p.steps_per_warp);
    cudaStream_t s = nb_cuda_stream(ctx);
    if (pair) sk_launch<true>(&a, p.token_tiles, p.terms, s);
    else sk_launch<false>(&a, p.token_tiles, p.terms, s);
    NB_CUDA_LAUNCHED(pair ? "mlp (gate+up sk)" : "linear (sk)");
    return NB_OK;
}

extern "C" nb_status nb_cuda_linear_sk(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T, const nb_weight *w,
                                       float *y, int64_t ldy, int accumulate)
{
    return sk_run(ctx, x, ldx, T, w, NULL, y, ldy, accumulate);
}

extern "C" int nb_cuda_gate_up_sk_can(const nb_weight *gate, const nb_weight *up, const float *x, int64_t ldx,
                                      int64_t T)
{
    if (!nb_cuda_mlp_fused_on()) return 0;
    if (up->n != gate->n || up->k != gate->k) return 0;
    if (!nb_cuda_linear_sk_can(gate, x, ldx, T) || !nb_cuda_linear_sk_can(up, x, ldx, T)) return 0;
    const int mode = sk_mode();
    if (mode == 2) return 1;
    if (mode == 0) // measured faster on the dense layer's pair (302 MB), slower on the shared expert's (50 MB)
        return T >= 3 && gate->n * gate->k * 4 >= ((int64_t)NB_CUDA_MLP_FUSED_MIN_MB << 20);
    if (T >= 3) return 1;
    nb_weight both = *gate;
    both.n = gate->n * 2; // the sk ladder's size rule on the pair's bytes
    return nb_cuda_linear_sk_should(&both, x, ldx, T);
}

extern "C" nb_status nb_cuda_gate_up_sk(nb_ops_ctx *ctx, const float *x, int64_t ldx, int64_t T,
                                        const nb_weight *gate, const nb_weight *up, float *h, int64_t ldh)
{
    return sk_run(ctx, x, ldx, T, gate, up, h, ldh, 0);
}

// NVFP4 routed-expert FFN kernels and their launcher (ops/cuda/moe.h).
//
// Three launches per step, none waiting on the host:
//   moe_route_kernel   one block: count slots per expert, scatter slot ids into expert order,
//                      cut each expert's slots into token tiles (the work list);
//   moe_gemm_kernel<NT, true>   gate_up: per (tile, 16 rows) item, acts = SiLU(x W1^T) * (x W3^T)
//                      written as BF16 in expert order;
//   moe_gemm_kernel<NT, false>  down: out[token] += route_weight * (acts W2^T), F32 atomics.
// The GEMM kernel is persistent (a grid that fills the GPU loops over the items) with 4 warps
// per block that split K; each warp holds a 16-row x (8*NT)-token accumulator of
// mma.sync.m16n8k16 (BF16 in, F32 accumulate). A lane loads its own A fragments as 16 bytes
// of E2M1 codes per 64-wide k-tile, already in fragment order (moe_repack.c), and expands
// them with a mask, a shift and one BF16 multiply by the block scale (exact: e2m1*e4m3 fits
// BF16). The multiply carries 2^-7 of the two exponent corrections; the epilogue restores it
// with weight_scale_2.
// Tested by tests/cuda_moe/test_moe.c; timed by `nibble bench-moe`.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"

#define MOE_WARPS NB_MOE_WARPS
#define MOE_THREADS (MOE_WARPS * 32)
#define MOE_MIN_TILE 8   // tokens per tile of the stream kernel (smallest)
#define MOE_MAX_EXPERTS 1024
#define MOE_ACC_FIX 128.0f  // 2^7: undoes the 2^-7 left in the expanded weights

// ---- device helpers --------------------------------------------------------------------

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Streamed once: keep it out of L1.
__device__ __forceinline__ uint4 ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint2 ld_stream2(const void *p)
{
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

// Two E4M3 scale bytes (row g in bits 0..7, row g+8 in bits 8..15) -> BF16x2 broadcasts of
// scale * 2^119 for each row. The bytes are first placed as BF16 bit patterns equal to
// e4m3 * 2^-120 (E4M3 subnormals land on BF16 subnormals, still exact), then scaled by
// 2^120 and 2^119 (0x7B80, 0x7B00).
__device__ __forceinline__ void expand_scales(uint32_t two, uint32_t &sg, uint32_t &sg8)
{
    uint32_t v = __byte_perm(two, 0, 0x4140);
    uint32_t h = ((v << 4) & 0x07F007F0u) | ((v << 8) & 0x80008000u);
    h = bf16x2_mul(bf16x2_mul(h, 0x7B807B80u), 0x7B007B00u);
    sg = __byte_perm(h, 0, 0x1010);
    sg8 = __byte_perm(h, 0, 0x3232);
}

// One word of 8 codes -> the four A registers of one k-step (moe_repack.c's pairs P0..P3),
// each e2m1 * e4m3 * 2^-7 in BF16.
__device__ __forceinline__ void expand_codes(uint32_t w, uint32_t sg, uint32_t sg8, uint32_t a[4])
{
    uint32_t r0 = w & 0x81C081C0u;
    uint32_t r1 = (w << 3) & 0x81C081C0u;
    uint32_t r2 = (w << 6) & 0x81C081C0u;
    uint32_t r3 = ((w >> 4) & 0x00C000C0u) | ((w >> 5) & 0x01000100u) | ((w << 1) & 0x80008000u);
    a[0] = bf16x2_mul(r0, sg);
    a[1] = bf16x2_mul(r1, sg8);
    a[2] = bf16x2_mul(r2, sg);
    a[3] = bf16x2_mul(r3, sg8);
}

__device__ __forceinline__ uint16_t f32_to_bf16_rn(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ---- routing: slots into expert order, token tiles -----------------------------------------

struct moe_ws {
    int *n_tiles;    // [1]
    int *offsets;    // [E + 1] first sorted position of each expert
    int *sorted;     // [T*k] slot ids (t*k + j) in expert order
    int4 *tiles;     // [max_tiles] (expert, first sorted position, count, 0)
    uint16_t *act;   // [T*k, inter] BF16, in expert order
};

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t moe_max_tiles(int slots, int experts) { return (size_t)slots / MOE_MIN_TILE + (size_t)experts + 1; }

static size_t moe_ws_layout(int experts, int inter, int slots, char *base, moe_ws *ws)
{
    size_t off = 0;
    if (ws) ws->n_tiles = (int *)(base + off);
    off += align256(sizeof(int));
    if (ws) ws->offsets = (int *)(base + off);
    off += align256(sizeof(int) * (size_t)(experts + 1));
    if (ws) ws->sorted = (int *)(base + off);
    off += align256(sizeof(int) * (size_t)slots);
    if (ws) ws->tiles = (int4 *)(base + off);
    off += align256(sizeof(int4) * moe_max_tiles(slots, experts));
    if (ws) ws->act = (uint16_t *)(base + off);
    off += align256(sizeof(uint16_t) * (size_t)slots * (size_t)inter);
    return off;
}

// One block of 1024 threads. ids == NULL: dense mode (slot t -> expert 0).
__global__ void __launch_bounds__(1024) moe_route_kernel(const int32_t *ids, int slots, int experts, int tile,
                                                         moe_ws ws)
{
    __shared__ int cnt[MOE_MAX_EXPERTS], cur[MOE_MAX_EXPERTS], tsc[MOE_MAX_EXPERTS], csc[MOE_MAX_EXPERTS];
    const int tid = threadIdx.x;
    for (int e = tid; e < MOE_MAX_EXPERTS; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < slots; i += blockDim.x) {
        int e = ids ? ids[i] : 0;
        if (e >= 0 && e < experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // Inclusive scans (Hillis-Steele) of the counts and of the tiles per expert.
    int c = tid < experts ? cnt[tid] : 0;
    int nt = (c + tile - 1) / tile;
    csc[tid] = c;
    tsc[tid] = nt;
    __syncthreads();
    for (int d = 1; d < MOE_MAX_EXPERTS; d <<= 1) {
        int a = tid >= d ? csc[tid - d] : 0, b = tid >= d ? tsc[tid - d] : 0;
        __syncthreads();
        csc[tid] += a;
        tsc[tid] += b;
        __syncthreads();
    }
    int first = csc[tid] - c, tfirst = tsc[tid] - nt;
    if (tid < experts) {
        cur[tid] = first;
        ws.offsets[tid] = first;
        for (int j = 0; j < nt; j++)
            ws.tiles[tfirst + j] = make_int4(tid, first + j * tile, min(tile, c - j * tile), 0);
    }
    if (tid == MOE_MAX_EXPERTS - 1) {
        ws.offsets[experts] = csc[tid];
        *ws.n_tiles = tsc[tid];
    }
    __syncthreads();
    for (int i = tid; i < slots; i += blockDim.x) {
        int e = ids ? ids[i] : 0;
        if (e >= 0 && e < experts) ws.sorted[atomicAdd(&cur[e], 1)] = i;
    }
}

// ---- the GEMMs ------------------------------------------------------------------------

struct moe_gemm_params {
    const uint8_t *w, *s;   // repacked matrices of all experts
    const float *gs;        // weight_scale_2: gate_up [E][2], down [E]
    int n, k;               // rows and columns of one expert's matrix (gate_up: n = 2*inter)
    const uint16_t *in;     // gate_up: x [T, hidden]; down: act [slots, inter] in expert order
    const int *sorted;
    const int4 *tiles;
    const int *n_tiles;
    int topk;
    const float *route_w;   // [T*k] or NULL
    uint16_t *act;          // gate_up output
    float *out;             // down output [T, hidden]
    int n_rb;               // 16-row blocks per tile: inter/16 (gate_up) or hidden/16 (down)
};

// One 64-wide k-tile of one warp: expand the codes of 1 (down) or 2 (gate, up) row tiles and
// multiply with NT token fragments whose 16 BF16 per lane are in b[NT][8] words.
template <int NT, bool GU>
__device__ __forceinline__ void moe_ktile(const uint4 &wg, const uint4 &wu, uint32_t scg, uint32_t scu,
                                          const uint32_t (*b)[8], float (*accg)[4], float (*accu)[4])
{
    uint32_t sg, sg8, ug = 0, ug8 = 0;
    expand_scales(scg, sg, sg8);
    if (GU) expand_scales(scu, ug, ug8);
    const uint32_t wgw[4] = {wg.x, wg.y, wg.z, wg.w};
    const uint32_t wuw[4] = {wu.x, wu.y, wu.z, wu.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t a[4];
        expand_codes(wgw[s], sg, sg8, a);
#pragma unroll
        for (int j = 0; j < NT; j++) mma_bf16(accg[j], a[0], a[1], a[2], a[3], b[j][2 * s], b[j][2 * s + 1]);
        if (GU) {
            expand_codes(wuw[s], ug, ug8, a);
#pragma unroll
            for (int j = 0; j < NT; j++) mma_bf16(accu[j], a[0], a[1], a[2], a[3], b[j][2 * s], b[j][2 * s + 1]);
        }
    }
}

// The kernel's shared array, named so the launcher can compare it with nb_moe_smem_bytes.
template <int NT, bool GU>
struct moe_smem_probe {
    float red[MOE_WARPS - 1][GU ? 2 : 1][NT][4][32];
};

template <int NT, bool GU>
__global__ void __launch_bounds__(MOE_THREADS) moe_gemm_kernel(moe_gemm_params p)
{
    __shared__ moe_smem_probe<NT, GU> sm;
    auto &red = sm.red;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int ktiles = p.k / 64, kgroups = p.k / 256;
    const int kg0 = warp * kgroups / MOE_WARPS, kg1 = (warp + 1) * kgroups / MOE_WARPS;
    const size_t mat_w = (size_t)p.n * p.k / 2, mat_s = (size_t)p.n * p.k / 16;
    const int items = *p.n_tiles * p.n_rb;

    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const int4 tl = p.tiles[item / p.n_rb];
        const int rb = item % p.n_rb, e = tl.x, start = tl.y, cnt = tl.z;
        // Row tiles: gate (and up, inter rows further) or down.
        const int ntg = rb, ntu = rb + p.n / 32;
        const uint8_t *wbase = p.w + (size_t)e * mat_w;
        const uint8_t *sbase = p.s + (size_t)e * mat_s;
        const uint8_t *wgp = wbase + ((size_t)ntg * ktiles * 32 + lane) * 16;
        const uint8_t *wup = wbase + ((size_t)ntu * ktiles * 32 + lane) * 16;
        const uint8_t *sgp = sbase + ((size_t)ntg * kgroups * 32 + lane) * 8;
        const uint8_t *sup = sbase + ((size_t)ntu * kgroups * 32 + lane) * 8;
        // This lane's B rows: token column j*8 + g of each fragment.
        const uint16_t *brow[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            int col = j * 8 + g;
            brow[j] = nullptr;
            if (col < cnt) {
                int pos = start + col;
                brow[j] = GU ? p.in + (size_t)(p.sorted[pos] / p.topk) * p.k : p.in + (size_t)pos * p.k;
                brow[j] += t * 16;
            }
        }
        float accg[NT][4], accu[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) accg[j][i] = accu[j][i] = 0.0f;

        uint4 cw[4], cu[4], nw[4], nu[4];
        uint2 cs = make_uint2(0, 0), csu = make_uint2(0, 0), ns = cs, nsu = cs;
        if (kg0 < kg1) {
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                cw[qq] = ld_stream(wgp + (size_t)(kg0 * 4 + qq) * 512);
                if (GU) cu[qq] = ld_stream(wup + (size_t)(kg0 * 4 + qq) * 512);
            }
            cs = ld_stream2(sgp + (size_t)kg0 * 256);
            if (GU) csu = ld_stream2(sup + (size_t)kg0 * 256);
        }
        for (int kg = kg0; kg < kg1; kg++) {
            if (kg + 1 < kg1) {
#pragma unroll
                for (int qq = 0; qq < 4; qq++) {
                    nw[qq] = ld_stream(wgp + (size_t)((kg + 1) * 4 + qq) * 512);
                    if (GU) nu[qq] = ld_stream(wup + (size_t)((kg + 1) * 4 + qq) * 512);
                }
                ns = ld_stream2(sgp + (size_t)(kg + 1) * 256);
                if (GU) nsu = ld_stream2(sup + (size_t)(kg + 1) * 256);
            }
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                uint32_t b[NT][8];
                const int q = kg * 4 + qq;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
                    if (brow[j]) {
                        lo = __ldg((const uint4 *)(brow[j] + q * 64));
                        hi = __ldg((const uint4 *)(brow[j] + q * 64 + 8));
                    }
                    b[j][0] = lo.x, b[j][1] = lo.y, b[j][2] = lo.z, b[j][3] = lo.w;
                    b[j][4] = hi.x, b[j][5] = hi.y, b[j][6] = hi.z, b[j][7] = hi.w;
                }
                uint32_t sc2 = (qq < 2 ? cs.x : cs.y) >> ((qq & 1) * 16);
                uint32_t su2 = (qq < 2 ? csu.x : csu.y) >> ((qq & 1) * 16);
                moe_ktile<NT, GU>(cw[qq], cu[qq], sc2, su2, b, accg, accu);
            }
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                cw[qq] = nw[qq];
                if (GU) cu[qq] = nu[qq];
            }
            cs = ns;
            csu = nsu;
        }

        // Split-K reduction: warps 1..3 hand their partial sums to warp 0.
        if (warp > 0) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    red[warp - 1][0][j][i][lane] = accg[j][i];
                    if (GU) red[warp - 1][GU ? 1 : 0][j][i][lane] = accu[j][i];
                }
        }
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int wv = 0; wv < MOE_WARPS - 1; wv++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        accg[j][i] += red[wv][0][j][i][lane];
                        if (GU) accu[j][i] += red[wv][GU ? 1 : 0][j][i][lane];
                    }
            if (GU) {
                const int inter = p.n / 2;
                const float fg = MOE_ACC_FIX * p.gs[2 * e], fu = MOE_ACC_FIX * p.gs[2 * e + 1];
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int col = j * 8 + 2 * t + (i & 1), row = rb * 16 + g + (i >> 1) * 8;
                        if (col < cnt) {
                            float gv = accg[j][i] * fg, uv = accu[j][i] * fu;
                            float a = gv / (1.0f + __expf(-gv)) * uv;
                            p.act[(size_t)(start + col) * inter + row] = f32_to_bf16_rn(a);
                        }
                    }
            } else {
                const float f = MOE_ACC_FIX * p.gs[e];
                const int hidden = p.n;
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int col = j * 8 + 2 * t + (i & 1), row = rb * 16 + g + (i >> 1) * 8;
                        if (col < cnt) {
                            int slot = p.sorted[start + col];
                            float rw = p.route_w ? p.route_w[slot] : 1.0f;
                            atomicAdd(p.out + (size_t)(slot / p.topk) * hidden + row, accg[j][i] * f * rw);
                        }
                    }
            }
        }
        __syncthreads();
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" size_t nb_moe_workspace_bytes(const nb_moe_weights_dev *w, int tokens, int topk)
{
    return moe_ws_layout(w->experts, w->inter, tokens * topk, NULL, NULL);
}

extern "C" const char *nb_moe_kernel_name(nb_moe_kernel k)
{
    return k == NB_MOE_KERNEL_STREAM ? "stream" : k == NB_MOE_KERNEL_MMA ? "mma" : "auto";
}

extern "C" int nb_moe_should_use_stream(double tokens_per_expert, int n, int k, int sm)
{
    (void)n, (void)k, (void)sm;
    // A token tile of 8 is one n8 fragment: with <= 8 tokens per expert nothing is reused
    // across fragments, and streaming with the most parallelism (split K) wins.
    return tokens_per_expert <= 8.0;
}

extern "C" nb_moe_kernel nb_moe_pick_kernel(int tokens, int topk, int experts, int hidden, int inter, int sm)
{
    const char *env = getenv("NIBBLE_MOE_KERNEL");
    nb_moe_kernel k;
    const char *why;
    if (env && !strcmp(env, "stream")) {
        k = NB_MOE_KERNEL_STREAM, why = "NIBBLE_MOE_KERNEL";
    } else if (env && !strcmp(env, "mma")) {
        k = NB_MOE_KERNEL_MMA, why = "NIBBLE_MOE_KERNEL";
    } else {
        double tpe = (double)tokens * topk / (experts > 0 ? experts : 1);
        if (nb_moe_should_use_stream(tpe, inter, hidden, sm))
            k = NB_MOE_KERNEL_STREAM, why = "should_use_stream (<= 8 tokens per expert)";
        else
            k = NB_MOE_KERNEL_MMA, why = "default";
    }
    NB_LOG_DEBUG("cuda", "moe: %d tokens x top-%d over %d experts -> %s kernel (%s)", tokens, topk, experts,
                 nb_moe_kernel_name(k), why);
    return k;
}

static int moe_sm_count(void)
{
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 132;
    }
    return sms;
}

template <int NT, bool GU>
static nb_status moe_launch_gemm(const moe_gemm_params &p, cudaStream_t st)
{
    static int per_sm = 0, optin = 0;
    if (!optin) {
        int dev = 0;
        NB_CUDA_TRY(cudaGetDevice(&dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    size_t smem = nb_moe_smem_bytes(NT, GU);
    if (smem != sizeof(((moe_smem_probe<NT, GU> *)0)->red) || smem > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED, "moe: %s kernel with %d token fragments needs %zu bytes of shared memory, "
                        "the device allows %d per block", GU ? "gate_up" : "down", NT, smem, optin);
    if (!per_sm) {
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_gemm_kernel<NT, GU>, MOE_THREADS, 0));
        if (per_sm < 1) return nb_error(NB_ERR_CUDA, "moe: gemm kernel<%d,%d> cannot be resident", NT, (int)GU);
    }
    moe_gemm_kernel<NT, GU><<<moe_sm_count() * per_sm, MOE_THREADS, 0, st>>>(p);
    NB_CUDA_TRY(cudaGetLastError());
    return NB_OK;
}

template <int NT>
static nb_status moe_run(const nb_moe_weights_dev *w, const nb_moe_desc *d, int topk, const moe_ws &ws,
                         cudaStream_t st)
{
    moe_gemm_params p;
    memset(&p, 0, sizeof p);
    p.sorted = ws.sorted, p.tiles = ws.tiles, p.n_tiles = ws.n_tiles, p.topk = topk;
    p.w = w->w13, p.s = w->s13, p.gs = w->g13, p.n = 2 * w->inter, p.k = w->hidden;
    p.in = d->x, p.act = ws.act, p.n_rb = w->inter / 16;
    NB_TRY((moe_launch_gemm<NT, true>(p, st)));
    p.w = w->w2, p.s = w->s2, p.gs = w->g2, p.n = w->hidden, p.k = w->inter;
    p.in = ws.act, p.route_w = d->weights, p.out = d->out, p.n_rb = w->hidden / 16;
    return moe_launch_gemm<NT, false>(p, st);
}

static nb_status moe_check(const nb_moe_weights_dev *w, const nb_moe_desc *d, int topk)
{
    if (!w || !d) return nb_error(NB_ERR_INVALID_ARG, "moe: NULL weights or descriptor");
    if (w->experts < 1 || w->experts > MOE_MAX_EXPERTS)
        return nb_error(NB_ERR_INVALID_ARG, "moe: experts = %d (1..%d)", w->experts, MOE_MAX_EXPERTS);
    if (w->hidden % NB_MOE_K_GROUP || w->inter % NB_MOE_K_GROUP || w->hidden <= 0 || w->inter <= 0)
        return nb_error(NB_ERR_INVALID_ARG, "moe: hidden %d and inter %d must be positive multiples of %d",
                        w->hidden, w->inter, NB_MOE_K_GROUP);
    if (!w->w13 || !w->s13 || !w->w2 || !w->s2 || !w->g13 || !w->g2)
        return nb_error(NB_ERR_INVALID_ARG, "moe: a weight pointer is NULL");
    if (d->tokens < 0 || topk < 1 || topk > w->experts)
        return nb_error(NB_ERR_INVALID_ARG, "moe: tokens %d, topk %d of %d experts", d->tokens, topk, w->experts);
    if ((int64_t)d->tokens * topk > (int64_t)1 << 24)
        return nb_error(NB_ERR_INVALID_ARG, "moe: %d tokens x top-%d slots is too many", d->tokens, topk);
    if (d->tokens && (!d->x || !d->out))
        return nb_error(NB_ERR_INVALID_ARG, "moe: x or out is NULL");
    size_t need = moe_ws_layout(w->experts, w->inter, d->tokens * topk, NULL, NULL);
    if (!d->workspace || d->workspace_bytes < need)
        return nb_error(NB_ERR_INVALID_ARG, "moe: workspace of %zu bytes, %zu needed for %d tokens",
                        d->workspace_bytes, need, d->tokens);
    return NB_OK;
}

static nb_status moe_forward_impl(const nb_moe_weights_dev *w, const nb_moe_desc *d, int topk, cudaStream_t st)
{
    NB_TRY(moe_check(w, d, topk));
    if (!d->accumulate && d->tokens)
        NB_CUDA_TRY(cudaMemsetAsync(d->out, 0, sizeof(float) * (size_t)d->tokens * w->hidden, st));
    if (!d->tokens) return NB_OK;
    moe_ws ws;
    moe_ws_layout(w->experts, w->inter, d->tokens * topk, (char *)d->workspace, &ws);
    nb_moe_kernel k = d->kernel != NB_MOE_KERNEL_AUTO
                          ? d->kernel
                          : nb_moe_pick_kernel(d->tokens, topk, w->experts, w->hidden, w->inter, 90);
    const int tile = 8 * (k == NB_MOE_KERNEL_STREAM ? NB_MOE_NT_STREAM : NB_MOE_NT_MMA);
    moe_route_kernel<<<1, 1024, 0, st>>>(d->ids, d->tokens * topk, w->experts, tile, ws);
    NB_CUDA_TRY(cudaGetLastError());
    if (k == NB_MOE_KERNEL_STREAM) return moe_run<NB_MOE_NT_STREAM>(w, d, topk, ws, st);
    return moe_run<NB_MOE_NT_MMA>(w, d, topk, ws, st);
}

extern "C" nb_status nb_moe_forward(const nb_moe_weights_dev *w, const nb_moe_desc *d, void *stream)
{
    if (d && !d->ids && d->topk != 1)
        return nb_error(NB_ERR_INVALID_ARG, "moe: dense mode (ids NULL) needs topk 1, got %d", d->topk);
    return moe_forward_impl(w, d, d ? d->topk : 0, (cudaStream_t)stream);
}

extern "C" nb_status nb_moe_shared_forward(const nb_moe_weights_dev *w, const uint16_t *x, int tokens, float *out,
                                           int accumulate, void *workspace, size_t workspace_bytes, void *stream)
{
    if (!w || w->experts != 1)
        return nb_error(NB_ERR_INVALID_ARG, "moe shared expert: weights must hold exactly 1 expert");
    nb_moe_desc d;
    memset(&d, 0, sizeof d);
    d.tokens = tokens, d.topk = 1, d.x = x, d.out = out, d.accumulate = accumulate;
    d.workspace = workspace, d.workspace_bytes = workspace_bytes;
    // A dense FFN is the routed path with every token on expert 0; pick by tokens per expert.
    return moe_forward_impl(w, &d, 1, (cudaStream_t)stream);
}

// The small-step NVFP4 MoE FFN scheduled per warp (ops/cuda/moe.h; steps of at most
// MOE_SMALL_SLOTS slots, NIBBLE_MOE_SMALL=2): moe_ffn_small_kernel's work in units small and
// many enough that every warp streams until the end of the step.
//
// Why: at 1 token of GLM-5 (8 experts, 170 MB) the block-item kernels spend ~10 of their 53 us
// in two gaps (bench/RESULTS.md, issue 8, twelfth session): the hand-off, where a tile's down
// items wait for its slowest gate_up item while the bandwidth drops to half, and the tail, where
// down items end over 6.5 us on SMs that hold 2 or 3 of them. Here a unit is one warp's work: a
// row-tile pair (gate + up rows, or two 16-row tiles of W2) times a chunk of G k-groups (G ~ 2
// at 1 token: ~9 units per warp), taken in order:
//   [gate_up units: tile, pair, chunk] [down units: tile, pair, chunk]
// The first ~3/4 of the units are dealt round-robin (unit w + i * warps to warp w, no atomics),
// the rest from one counter, one unit ahead. A down unit waits until every gate_up pair of its
// tile is complete; since all gate_up units precede all down units, the first down units are
// taken when only the last tiles' gate_up units are still running: no phase-wide hand-off.
//   gate_up chunks: each stores its F32 partial (deterministically, at a slot of its own: the
//     sums do not depend on which warp finishes last) and counts itself on the pair's counter;
//     the warp completing a pair adds the chunks' partials in chunk order, writes SiLU(gate) *
//     up as BF16 into act and counts the pair on its tile. A pair in one chunk skips the
//     partials.
//   down chunks: out[token] += route_weight * partial (F32 atomics, as every stream kernel).
// Loads never restart at a unit boundary: the next unit's first k-group is loaded while the
// current unit's last one is multiplied (the double buffer of moe_ffn_small_kernel's loop 2,
// continued across units), and its id is fetched one unit earlier still.
// No deadlock: a warp holds its current unit and the next (a later one); a down unit waits only
// for gate_up units, which wait for nothing and precede every down unit in both the dealt and
// the counted order; the launcher keeps the whole grid resident (as for moe_ffn_small_kernel).
// Counters (moe_route_kernel resets them): work[0] the dynamic units taken, work[1] warps that
// zeroed their slice of out, done[tile] pairs of the tile complete, pdone[tile][pair] chunks
// of the pair complete. Nothing here waits for the routing kernel before its first counter
// operation (griddepcontrol.wait there), so streaming starts at launch.
// Tests: tests/cuda_moe/test_moe.c (moe_stream_variants, "warp-scheduled" rows); timing:
// NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_SMALL=1 NIBBLE_MOE_SMALL=2" nibble bench-moe --tokens 1,2,4,8.
#include <stdint.h>

#include "base/error.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"
#include "ops/cuda/moe_stream.cuh"

#define MW_BLOCKS(nt) ((nt) == 1 ? 4 : 3)  // blocks per SM: moe_ffn_small_kernel's

// The step's plan: the same in every block (each computes it from its own routing).
struct mw_plan {
    int n_tiles, nwarps, pairs_gu, pairs_dn, kg_gu, kg_dn, nc_gu, nc_dn, n_gu, total, n_dealt;
};

// One unit: gate_up (dn 0) or down (dn 1) pair `pair` of tile `ti`, chunk c: k-groups [kg0, kg1).
struct mw_unit {
    int u, dn, ti, pair, c, kg0, kg1;
};

// The chunking: G k-groups per unit for ~p.warp_units (NB_MOE_WARP_UNITS) units per warp over
// both phases (the last units are what the tail is made of); gate_up
// chunks beyond the partial buffer's room (p.part_units) are merged.
__device__ __forceinline__ mw_plan mw_make_plan(const moe_params &p, int n_tiles)
{
    mw_plan q;
    q.n_tiles = n_tiles;
    q.nwarps = gridDim.x * MOE_WARPS;
    q.pairs_gu = p.inter / 16, q.pairs_dn = p.hidden / 32;
    q.kg_gu = p.hidden / 256, q.kg_dn = p.inter / 256;
    const long long kgs = (long long)n_tiles * ((long long)q.pairs_gu * q.kg_gu + (long long)q.pairs_dn * q.kg_dn);
    const long long per = (long long)max(1, p.warp_units) * q.nwarps;
    const int g = (int)max(1LL, (kgs + per - 1) / per);
    q.nc_gu = (q.kg_gu + g - 1) / g, q.nc_dn = (q.kg_dn + g - 1) / g;
    const long long room = (long long)n_tiles * q.pairs_gu;
    if (room * q.nc_gu > p.part_units) q.nc_gu = room > p.part_units ? 1 : (int)(p.part_units / room);
    q.n_gu = n_tiles * q.pairs_gu * q.nc_gu;
    q.total = q.n_gu + n_tiles * q.pairs_dn * q.nc_dn;
    q.n_dealt = q.total * 3 / 4 / q.nwarps * q.nwarps;
    return q;
}

__device__ __forceinline__ mw_unit mw_decode(const mw_plan &q, int u)
{
    mw_unit x;
    x.u = u, x.dn = u >= q.n_gu;
    int v = x.dn ? u - q.n_gu : u;
    const int nc = x.dn ? q.nc_dn : q.nc_gu, pairs = x.dn ? q.pairs_dn : q.pairs_gu, kg = x.dn ? q.kg_dn : q.kg_gu;
    x.c = v % nc, v /= nc;
    x.pair = v % pairs, x.ti = v / pairs;
    x.kg0 = x.c * kg / nc, x.kg1 = (x.c + 1) * kg / nc;
    return x;
}

// This lane's code and scale sources of a unit's k-group kg (moe_item's pointers).
struct mw_src {
    const uint8_t *pa, *pb, *qa, *qb;
};

__device__ __forceinline__ mw_src mw_source(const moe_params &p, const mw_unit &x, int e, int kg)
{
    const int lane = threadIdx.x & 31;
    const int n = x.dn ? p.hidden : 2 * p.inter, K = x.dn ? p.inter : p.hidden;
    const int ktiles = K / 64, kgroups = K / 256;
    const int nta = x.dn ? 2 * x.pair : x.pair, ntb = x.dn ? 2 * x.pair + 1 : x.pair + p.inter / 16;
    const uint8_t *wbase = (x.dn ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
    const uint8_t *sbase = (x.dn ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
    mw_src s;
    s.pa = wbase + ((size_t)nta * ktiles * 32 + lane) * 16 + (size_t)kg * 2048;
    s.pb = wbase + ((size_t)ntb * ktiles * 32 + lane) * 16 + (size_t)kg * 2048;
    s.qa = sbase + ((size_t)nta * kgroups * 32 + lane) * 8 + (size_t)kg * 256;
    s.qb = sbase + ((size_t)ntb * kgroups * 32 + lane) * 8 + (size_t)kg * 256;
    return s;
}

// One k-group's codes and scales of both row tiles (a register set of the double buffer).
struct mw_regs {
    uint4 a[4], b[4];
    uint2 sa, sb;
};

__device__ __forceinline__ void mw_load(mw_src &s, mw_regs &r)
{
    moe_load_group(s.pa, s.pb, s.qa, s.qb, 0, r.a, r.b, r.sa, r.sb);
    s.pa += 2048, s.pb += 2048, s.qa += 256, s.qb += 256;
}

// Per-warp state. The hot loop keeps only the load sources, the token rows and the k-groups
// left in registers; the unit ids and the bookkeeping live in shared memory (one slot per
// warp, written by lane 0, read at unit boundaries). Units come from the plan's deal (w, w +
// warps, ...) and then the counter; `pend` (lane 0's register) is the id after `nxt`, which
// may still be in flight from the counter.
struct mw_warp {
    int cur, nxt, dealt, started;
};

template <int NT>
struct mw_hot {
    int left, dn, pend;       // k-groups of cur after the one being multiplied; cur is down; see above
    mw_src src;               // the next k-group to load (cur's, or nxt's once cur's are all loaded)
    const uint16_t *bk[NT];   // cur's token rows at the k-group being multiplied
};

__device__ __forceinline__ void mw_set(int &field, int v)
{
    __syncwarp();
    if ((threadIdx.x & 31) == 0) field = v;
    __syncwarp();
}

// Before a warp's first counter operation: the routing kernel (which resets the counters) has
// finished, and this warp's slice of out, zeroed at the start, is counted (work[1]).
__device__ __forceinline__ void mw_start(const moe_params &p, mw_warp &ws)
{
    if (ws.started) return;
    griddep_wait();
    mw_set(ws.started, 1);
    if (p.zero_elems && (threadIdx.x & 31) == 0) add_release(p.work + 1, 1);
}

// The id of the warp's next unit but one (lane 0's value counts).
__device__ __forceinline__ int mw_fetch(const moe_params &p, const mw_plan &q, mw_warp &ws)
{
    const int u = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5) + ws.dealt * q.nwarps;
    if (u < q.n_dealt) {
        mw_set(ws.dealt, ws.dealt + 1);
        return u;
    }
    mw_start(p, ws);
    return (threadIdx.x & 31) == 0 ? q.n_dealt + atomicAdd(p.work, 1) : 0;
}

// Unit u becomes the one to multiply (its first k-group is loaded or in flight): its token
// rows and, for a down unit, its dependencies.
template <int NT>
__device__ __forceinline__ void mw_begin(const moe_params &p, const mw_plan &q, const moe_small_route_smem &rt,
                                         mw_warp &ws, mw_hot<NT> &h, int u)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const mw_unit x = mw_decode(q, u);
    const int4 tl = rt.tiles[x.ti];
    mw_set(ws.cur, u);
    h.left = x.kg1 - x.kg0 - 1, h.dn = x.dn;
    const uint16_t *bbase = x.dn ? p.act : p.x;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int r = j * 8 + g < tl.z ? j * 8 + g : 0;  // lanes past the tile read its first row
        const long long row = x.dn ? (long long)(tl.y + r) * p.inter : (long long)(rt.sorted[tl.y + r] / p.topk) * p.hidden;
        h.bk[j] = bbase + row + t * 16 + (size_t)x.kg0 * 256;
    }
    if (x.dn) {
        mw_start(p, ws);
        if (lane == 0) {
            moe_wait_geq(p.done + x.ti, q.pairs_gu);
            if (p.zero_elems) moe_wait_geq(p.work + 1, q.nwarps);
        }
        __syncwarp();
    }
}

__device__ __forceinline__ int mw_atom_add_acq_rel(int *p, int v)
{
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ float4 mw_ld_cg(const float *p)
{
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// The end of unit u: its down products, or its gate_up partial, or its pair's SiLU(gate) * up.
template <int NT>
__device__ __forceinline__ void mw_finish(const moe_params &p, const mw_plan &q, const moe_small_route_smem &rt,
                                          mw_warp &ws, int u, float (*acca)[4], float (*accb)[4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const mw_unit x = mw_decode(q, u);
    const int4 tl = rt.tiles[x.ti];
    const int e = tl.x, start = tl.y, cnt = tl.z;
    mw_start(p, ws);
    if (x.dn) {
        const float f = MOE_ACC_FIX * p.g2[e];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = j * 8 + 2 * t + (i & 1), r = 2 * x.pair * 16 + g + (i >> 1) * 8;
                if (col < cnt) {
                    const int slot = rt.sorted[start + col];
                    const float rw = (p.route_w ? p.route_w[slot] : 1.0f) * f;
                    float *o = p.out + (size_t)(slot / p.topk) * p.hidden + r;
                    atomicAdd(o, acca[j][i] * rw);
                    atomicAdd(o + 16, accb[j][i] * rw);
                }
            }
        return;
    }
    if (q.nc_gu > 1) {
        // This chunk's partial at its own slot ([chunk][gate | up][fragment][lane] float4s),
        // then the pair's count; the warp that completes the pair adds all chunks in order.
        float *part = p.part + (size_t)(u - x.c) * (2 * NT * 128);
#pragma unroll
        for (int j = 0; j < NT; j++)
            if (j * 8 + 2 * t < cnt) {
                *(float4 *)(part + ((size_t)x.c * 2 * NT + j) * 128 + lane * 4) =
                    make_float4(acca[j][0], acca[j][1], acca[j][2], acca[j][3]);
                *(float4 *)(part + ((size_t)x.c * 2 * NT + NT + j) * 128 + lane * 4) =
                    make_float4(accb[j][0], accb[j][1], accb[j][2], accb[j][3]);
            }
        __syncwarp();
        int old = 0;
        if (lane == 0) old = mw_atom_add_acq_rel(p.pdone + x.ti * q.pairs_gu + x.pair, 1);
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old != q.nc_gu - 1) return;
        __syncwarp();  // lane 0's acquire before every lane's loads
        if (cnt <= 2) {
            // Only lanes t == 0 hold columns (fragment 0): the four lanes of a row group each add
            // the chunks c = t, t + 4, ... of lane (g, 0) and combine by shuffles in a fixed order
            // (a quarter of the dependent L2 loads of the general path below).
            float4 ga = make_float4(0.0f, 0.0f, 0.0f, 0.0f), ua = ga;
            for (int c = t; c < q.nc_gu; c += 4) {
                const float4 va = mw_ld_cg(part + ((size_t)c * 2 * NT) * 128 + g * 16);
                const float4 vb = mw_ld_cg(part + ((size_t)c * 2 * NT + NT) * 128 + g * 16);
                ga.x += va.x, ga.y += va.y, ga.z += va.z, ga.w += va.w;
                ua.x += vb.x, ua.y += vb.y, ua.z += vb.z, ua.w += vb.w;
            }
#pragma unroll
            for (int m = 1; m <= 2; m <<= 1) {
                ga.x += __shfl_xor_sync(0xffffffffu, ga.x, m), ga.y += __shfl_xor_sync(0xffffffffu, ga.y, m);
                ga.z += __shfl_xor_sync(0xffffffffu, ga.z, m), ga.w += __shfl_xor_sync(0xffffffffu, ga.w, m);
                ua.x += __shfl_xor_sync(0xffffffffu, ua.x, m), ua.y += __shfl_xor_sync(0xffffffffu, ua.y, m);
                ua.z += __shfl_xor_sync(0xffffffffu, ua.z, m), ua.w += __shfl_xor_sync(0xffffffffu, ua.w, m);
            }
            acca[0][0] = ga.x, acca[0][1] = ga.y, acca[0][2] = ga.z, acca[0][3] = ga.w;
            accb[0][0] = ua.x, accb[0][1] = ua.y, accb[0][2] = ua.z, accb[0][3] = ua.w;
        } else {
            float sa[NT][4], sb[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) sa[j][i] = sb[j][i] = 0.0f;
            for (int c = 0; c < q.nc_gu; c++)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    if (j * 8 + 2 * t < cnt) {
                        float4 va, vb;
                        if (c == x.c) {
                            va = make_float4(acca[j][0], acca[j][1], acca[j][2], acca[j][3]);
                            vb = make_float4(accb[j][0], accb[j][1], accb[j][2], accb[j][3]);
                        } else {
                            va = mw_ld_cg(part + ((size_t)c * 2 * NT + j) * 128 + lane * 4);
                            vb = mw_ld_cg(part + ((size_t)c * 2 * NT + NT + j) * 128 + lane * 4);
                        }
                        sa[j][0] += va.x, sa[j][1] += va.y, sa[j][2] += va.z, sa[j][3] += va.w;
                        sb[j][0] += vb.x, sb[j][1] += vb.y, sb[j][2] += vb.z, sb[j][3] += vb.w;
                    }
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acca[j][i] = sa[j][i], accb[j][i] = sb[j][i];
        }
    }
    const float fg = MOE_ACC_FIX * p.g13[2 * e], fu = MOE_ACC_FIX * p.g13[2 * e + 1];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int col = j * 8 + 2 * t + (i & 1), r = x.pair * 16 + g + (i >> 1) * 8;
            if (col < cnt) {
                const float gv = acca[j][i] * fg, uv = accb[j][i] * fu;
                const float a = gv / (1.0f + __expf(-gv)) * uv;
                p.act[(size_t)(start + col) * p.inter + r] = f32_to_bf16_rn(a);
            }
        }
    __syncwarp();  // every lane's act rows before lane 0's cumulative release
    if (lane == 0) add_release(p.done + x.ti, 1);
}

// One k-group: load the one after it into nr (cur's next, or the next unit's first), multiply
// the current one from cr, and at the unit's end run its epilogue and move to the next unit.
// Returns 0 once the warp has no unit left.
template <int NT>
__device__ __forceinline__ int mw_step(const moe_params &p, const mw_plan &q, const moe_small_route_smem &rt,
                                       mw_warp &ws, mw_hot<NT> &h, const mw_regs &cr, mw_regs &nr, float (*acca)[4],
                                       float (*accb)[4])
{
    if (h.left > 0) {
        mw_load(h.src, nr);
    } else if (ws.nxt < q.total) {
        const mw_unit x = mw_decode(q, ws.nxt);
        h.src = mw_source(p, x, rt.tiles[x.ti].x, x.kg0);
        mw_load(h.src, nr);
    }
    moe_group<NT, false, true>(cr.a, cr.b, cr.sa, cr.sb, h.bk, nullptr, h.dn, 0, acca, accb);
#pragma unroll
    for (int j = 0; j < NT; j++) h.bk[j] += 256;
    if (h.left-- > 0) return 1;
    mw_finish<NT>(p, q, rt, ws, ws.cur, acca, accb);
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acca[j][i] = accb[j][i] = 0.0f;
    const int u = ws.nxt;
    if (u >= q.total) return 0;
    const int v = __shfl_sync(0xffffffffu, h.pend, 0);
    mw_set(ws.nxt, v < q.total ? v : q.total);
    if (v < q.total) h.pend = mw_fetch(p, q, ws);
    mw_begin<NT>(p, q, rt, ws, h, u);
    return 1;
}

template <int NT>
__global__ void __launch_bounds__(MOE_THREADS, MW_BLOCKS(NT)) moe_ffn_warp_kernel(moe_params p)
{
    __shared__ moe_small_route_smem rt;
    __shared__ mw_plan sq;
    __shared__ mw_warp s_warp[MOE_WARPS];
    const int n_tiles = moe_small_route(p, rt);
    if (threadIdx.x == 0) sq = mw_make_plan(p, n_tiles);
    if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = mw_warp{0, 0, 0, 0};
    __syncthreads();
    const mw_plan &q = sq;
    mw_warp &ws = s_warp[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31, w = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);

    mw_hot<NT> h;
    h.pend = 0;
    float acca[NT][4], accb[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acca[j][i] = accb[j][i] = 0.0f;
    mw_regs ra, rb;
    int first = __shfl_sync(0xffffffffu, mw_fetch(p, q, ws), 0);  // dealt: w; else from the counter
    if (first < q.total) {
        const mw_unit x = mw_decode(q, first);
        h.src = mw_source(p, x, rt.tiles[x.ti].x, x.kg0);
        mw_load(h.src, ra);
    }
    // This warp's slice of out, while the first loads are in flight (counted in mw_start).
    if (p.zero_elems) {
        const size_t per = (p.zero_elems + (size_t)q.nwarps * 128 - 1) / ((size_t)q.nwarps * 128) * 128;
        const size_t end = min(p.zero_elems, (size_t)w * per + per);
        for (size_t i = (size_t)w * per + lane * 4; i < end; i += 128) *(float4 *)(p.out + i) = make_float4(0, 0, 0, 0);
    }
    if (first < q.total) {
        const int u1 = __shfl_sync(0xffffffffu, mw_fetch(p, q, ws), 0);
        mw_set(ws.nxt, u1 < q.total ? u1 : q.total);
        if (u1 < q.total) h.pend = mw_fetch(p, q, ws);
        mw_begin<NT>(p, q, rt, ws, h, first);
        while (mw_step<NT>(p, q, rt, ws, h, ra, rb, acca, accb) && mw_step<NT>(p, q, rt, ws, h, rb, ra, acca, accb)) {
        }
    }
    mw_start(p, ws);  // a warp without units still counts its slice of out
}

nb_status moe_launch_warp(const moe_params &p, int nt, int sms, cudaStream_t st)
{
    static int per_sm[3] = {0, 0, 0};
    void (*k)(moe_params) = nt == 1 ? moe_ffn_warp_kernel<1> : moe_ffn_warp_kernel<2>;
    if (nt != 1 && nt != 2) return nb_error(NB_ERR_INVALID_ARG, "moe: warp-scheduled kernel with %d fragments", nt);
    if (!per_sm[nt]) {
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[nt], k, MOE_THREADS, 0));
        if (per_sm[nt] < 1) return nb_error(NB_ERR_CUDA, "moe: warp-scheduled kernel<%d> cannot be resident", nt);
    }
    // the whole grid resident at once (see the top)
    NB_CUDA_TRY(moe_launch_pdl(k, (unsigned)(sms * per_sm[nt]), MOE_THREADS, 0, st, p));
    return NB_OK;
}

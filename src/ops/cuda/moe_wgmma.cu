// The wgmma regime of the NVFP4 MoE FFN (ops/cuda/moe.h): many tokens per expert, sm_90a.
//
// Same persistent item loop as moe_ffn.cu's kernels (items taken in order from one
// counter, down items waiting on their tile's gate_up items), blocks of W warps (8 or 16:
// two or four warpgroups, one block per SM), with the multiply done by Hopper's
// asynchronous warpgroup MMA:
//   A (weights, 64 rows per instruction = 16 per warp): expanded from NVFP4 in registers
//     with the same repacked layout and expand_codes as the mma.sync kernels, once per
//     token tile; wgmma reads A fragments from registers in mma.sync's m16n8k16 order.
//   B (the token tile, N = 16..64 tokens): BF16 in shared memory, 128-byte swizzled
//     K-major, staged by cp.async in a ring of 128-wide k-slices (with the warps' codes
//     and scales).
//   D: F32 in registers. An expert's tiles run side by side (items ordered row block, then
//     tile), so the weights of a many-token expert come from HBM about once and from L2 for
//     the other tiles.
// Variants (template parameters; moe_launch_wg picks one, NIBBLE_MOE_WG_* force one):
//   tile width NW (the routing kernel cuts tiles of NW tokens, moe_wg_tile_tokens) and the
//   instruction width: NW, or NS for tiles of at most NS tokens, or (NS = -1, the second
//   session's kernel, 64-token tiles) the narrowest of 16/32/48/64 that covers the tile;
//   D k-steps in flight per warp, C accumulator chains, W warps, and L: the lean slice loop
//   (moe_wg_item_lean, the default since the sixth session) or the third session's
//   (moe_wg_item, NIBBLE_MOE_WG_LEAN=0). Measured on an H200 (bench/
//   RESULTS.md, issue 8, third session): the cost per k-step is ~200 cycles plus the
//   tensor time, and what lowers it is more warps per scheduler (W 16: 2.87 -> 2.55 ms at
//   1000 tokens), not deeper wgmma queues (D 4/8) or split accumulators (C 2), which
//   gained 4-7 % at 8 warps and need registers 16 warps do not have (128 per thread).
// The repacked layout permutes K inside each 64-wide k-tile (lane t of k-step s holds
// k = 16t + 4s + 0..3), so B must be stored in the same order: "wgmma order", where element
// 16s + 8h + 2u + j of a k-tile holds real k 16u + 4s + 2h + j. x is rewritten in that order
// by the kernel's own first items (into the workspace), and the gate_up epilogue writes the
// SiLU(gate)*up intermediate in it directly, so both GEMMs stage B with plain 16-byte copies.
// Tests: tests/cuda_moe/test_moe.c (kernel "wgmma", moe_wgmma_variants, moe_wgmma_n8); timing:
// nibble bench-moe --kernel wgmma, scripts/device-moe-wg.sh (old and new side by side),
// scripts/device-moe-n8.sh (NIBBLE_MOE_WG_N8=0 vs 1).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"
#include "ops/cuda/moe_wgmma.h"
#include "ops/cuda/moe_wgmma_ops.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WG_ARCH 1  // this device pass can issue wgmma
#else
#define MOE_WG_ARCH 0
#endif

// W warps per block: NB_MOE_WG_WARPS (8, two warpgroups) or 16 (four warpgroups, at most
// 128 registers per thread, four warps per scheduler to hide the expansion's latencies).
#define MOE_WG_RING(as, w) ((as) ? NB_MOE_WG_SS_STAGES : (w) > 8 ? NB_MOE_WG16_STAGES : NB_MOE_WG_STAGES)
#define MOE_WG_ABUF 32768  // one k-tile of expanded A: 2 warpgroups x (gate, up) x 64 rows x 128 B
#define MOE_WG_SLICE 128                                  // k per ring stage (two k-tiles)
#define MOE_WG_PERM_KTILES(w) ((w) * 64)                  // 64-wide k-tiles of x one permuting item rewrites

// ---- items ---------------------------------------------------------------------------------

// A down item's column table, written by moe_wg_kernel when it takes the item and read by the
// epilogues: each column's token (slot / topk) and its routing weight times the accumulator's
// scale, one division and two loads per column instead of per thread and value (Nsight
// Compute on the wide form at 8192 tokens: the down epilogue's address work and dependent
// loads were ~10 % of the warps' stall samples). Sized for the widest tile; counted in
// moe.h's shared-memory totals (NB_MOE_WG_COLTAB_BYTES).
__shared__ int moe_wg_tok[NB_MOE_WG_WIDE_TILE];
__shared__ float moe_wg_rw[NB_MOE_WG_WIDE_TILE];
static_assert(NB_MOE_WG_COLTAB_BYTES == 8 * NB_MOE_WG_WIDE_TILE, "moe.h counts the column table");

// Rewrites MOE_WG_PERM_KTILES k-tiles of x (from k-tile `first` on) in wgmma order into xp:
// word 8u + 2s + h of a k-tile (real k 16u + 4s + 2h, +1) goes to word 8s + 4h + u.
template <int W>
__device__ __forceinline__ void moe_wg_permute(const moe_params &p, long long first, long long n_ktiles)
{
    for (int m = 0; m < MOE_WG_PERM_KTILES(W) / (W * 32); m++) {
        const long long kt = first + threadIdx.x + (long long)m * (W * 32);
        if (kt >= n_ktiles) break;
        const uint4 *src = (const uint4 *)(p.x + kt * 64);
        uint4 *dst = (uint4 *)(p.xpw + kt * 64);
        uint32_t in[32], o[32];
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const uint4 q = __ldg(src + v);
            in[4 * v] = q.x, in[4 * v + 1] = q.y, in[4 * v + 2] = q.z, in[4 * v + 3] = q.w;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int s = 0; s < 4; s++)
#pragma unroll
                for (int h = 0; h < 2; h++) o[8 * s + 4 * h + u] = in[8 * u + 2 * s + h];
#pragma unroll
        for (int v = 0; v < 8; v++) dst[v] = make_uint4(o[4 * v], o[4 * v + 1], o[4 * v + 2], o[4 * v + 3]);
    }
}

// Bytes of one ring stage for a tile of N tokens: the token k-slice (2 k-tiles x N rows x
// 128 bytes, 128-byte swizzled), then each warp's weight codes (2 row tiles x 2 k-tiles x 512
// bytes) and scales (2 row tiles x 256 bytes: the whole k-group, re-read for its second
// slice). A multiple of 1024, so every stage's token part stays 1024-aligned.
#define MOE_WG_CODES_OFF(N) ((N) * 256)
#define MOE_WG_SCALES_OFF(N, w) ((N) * 256 + (w) * 2048)
#define MOE_WG_STAGE_BYTES(N, w) ((N) * 256 + (w) * 2560)

// Everything k-slice `sl` needs into ring stage `buf`, one cp.async group:
//   tokens (all threads): per k-tile q, row r's 16-byte chunk c at chunk c ^ (r % 8) of the
//     row's 128 bytes; rows past the tile (row[r] < 0) are zeros;
//   codes (each warp its own): 4 x 16 bytes per lane; scales: lanes 0-15 row tile a, 16-31 b.
template <int N, int W>
__device__ __forceinline__ void moe_wg_stage(char *buf, const uint16_t *base, const long long *row, int sl,
                                             const uint8_t *wa, const uint8_t *wb, const uint8_t *sa,
                                             const uint8_t *sb)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < (N * 16 + W * 32 - 1) / (W * 32); m++) {
        const int c = threadIdx.x + m * (W * 32), r = c >> 4, q = (c >> 3) & 1, ch = c & 7;
        if (N * 16 % (W * 32) != 0 && c >= N * 16) break;
        const long long off = row[r];
        char *dst = buf + q * (N * 128) + (r >> 3) * 1024 + (r & 7) * 128 + ((ch ^ (r & 7)) << 4);
        cp_async16(dst, base + (off < 0 ? 0 : off) + (2 * sl + q) * 64 + ch * 8, off >= 0);
    }
    char *cw = buf + MOE_WG_CODES_OFF(N) + warp * 2048 + lane * 16;
#pragma unroll
    for (int q = 0; q < 2; q++) {
        cp_async16(cw + q * 512, wa + (size_t)(2 * sl + q) * 512 + lane * 16, true);
        cp_async16(cw + 1024 + q * 512, wb + (size_t)(2 * sl + q) * 512 + lane * 16, true);
    }
    char *cs = buf + MOE_WG_SCALES_OFF(N, W) + warp * 512 + lane * 16;
    cp_async16(cs, (lane < 16 ? sa : sb - 256) + (size_t)(sl >> 1) * 256 + lane * 16, true);
    cp_async_commit();
}

// One item's weight rows: this warp's pair of 16-row tiles (below), the first k-tile of their
// codes (wa, wb) and scales (sa, sb), and the K loop's 128-wide slices.
struct moe_wg_rows {
    int pair, slices;
    const uint8_t *wa, *wb, *sa, *sb;
};

template <bool DN, int W>
__device__ __forceinline__ moe_wg_rows moe_wg_item_rows(const moe_params &p, int e, int rb, int warp)
{
    moe_wg_rows r;
    r.pair = rb * W + warp;
    const int n = DN ? p.hidden : 2 * p.inter, K = DN ? p.inter : p.hidden;
    const int ktiles = K / 64, kgroups = K / 256;
    r.slices = K / MOE_WG_SLICE;
    const int nta = DN ? 2 * r.pair : r.pair, ntb = DN ? 2 * r.pair + 1 : r.pair + p.inter / 16;
    const uint8_t *wbase = (DN ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
    const uint8_t *sbase = (DN ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
    r.wa = wbase + (size_t)nta * ktiles * 512, r.wb = wbase + (size_t)ntb * ktiles * 512;
    r.sa = sbase + (size_t)nta * kgroups * 256, r.sb = sbase + (size_t)ntb * kgroups * 256;
    return r;
}

// One item on a tile of cnt <= N tokens: 8 pairs of 16-row tiles (one per warp; warps 0-3
// and 4-7 are the two warpgroups, each issuing its own wgmmas on the shared token stage)
// times the whole K.
//   DN == false: gate_up, pair (r, r + inter/16) of W13, r = 8 rb + warp; writes act.
//   DN == true:  down, pair (2r, 2r+1) of W2; adds into out.
template <int N, bool DN, int AS, int D, int C, int W>
__device__ __forceinline__ void moe_wg_item(const moe_params &p, char *ring, char *abuf, const long long *row,
                                            int e, int start, int cnt, int rb)
{
#if MOE_WG_ARCH
    static_assert(W == 8 || (W == 16 && !AS), "8 warps, or 16 on the register path");
    constexpr int STAGES = MOE_WG_RING(AS, W), AHEAD = STAGES - 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const moe_wg_rows wr = moe_wg_item_rows<DN, W>(p, e, rb, warp);
    const int pair = wr.pair, slices = wr.slices;
    const uint8_t *wa = wr.wa, *wb = wr.wb, *sa = wr.sa, *sb = wr.sb;
    const uint16_t *bbase = DN ? p.act : p.xp;
    const int stage_bytes = MOE_WG_STAGE_BYTES(N, W);
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    static_assert(D == 1 || D == 2 || D == 4 || D == 8, "wgmma depth must divide a slice's 8 k-steps");
    static_assert(C == 1 || (C == 2 && !AS), "accumulator chains: 1, or 2 on the register path");
    // C independent accumulator chains per operand (k-step j adds into chain j % C, summed in
    // the epilogue): consecutive wgmmas into one accumulator wait on each other's result.
    float da[C][N / 2], db[C][N / 2];
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) da[c][i] = db[c][i] = 0.0f;
    uint32_t ar[D][4], br[D][4];  // A fragments of the D k-steps in flight (register path)

    // AHEAD slices in flight ahead of the one being multiplied.
#pragma unroll
    for (int i = 0; i < AHEAD; i++) {
        if (i < slices)
            moe_wg_stage<N, W>(ring + i * stage_bytes, bbase, row, i, wa, wb, sa, sb);
        else
            cp_async_commit();
    }
#pragma unroll 1
    for (int sl = 0; sl < slices; sl++) {
        // Slice sl has landed for every thread. The stage refilled below last held slice
        // sl - 2, whose wgmmas every warp has completed (each warp keeps at most 2 k-steps,
        // or one k-tile with A in shared memory, in flight, and all are past slice sl - 1).
        cp_async_wait<AHEAD - 1>();
        fence_proxy_async();
        __syncthreads();
        if (sl + AHEAD < slices)
            moe_wg_stage<N, W>(ring + ((sl + AHEAD) % STAGES) * stage_bytes, bbase, row, sl + AHEAD, wa, wb, sa, sb);
        else
            cp_async_commit();  // an empty group keeps wait_group's count uniform
        const char *stg = ring + (sl % STAGES) * stage_bytes;
        const uint32_t sbuf = ring_s + (uint32_t)((sl % STAGES) * stage_bytes);
        const uint2 sca = *(const uint2 *)(stg + MOE_WG_SCALES_OFF(N, W) + warp * 512 + lane * 8);
        const uint2 scb = *(const uint2 *)(stg + MOE_WG_SCALES_OFF(N, W) + warp * 512 + 256 + lane * 8);
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const uint4 ca = *(const uint4 *)(stg + MOE_WG_CODES_OFF(N) + warp * 2048 + q * 512 + lane * 16);
            const uint4 cb = *(const uint4 *)(stg + MOE_WG_CODES_OFF(N) + warp * 2048 + 1024 + q * 512 + lane * 16);
            uint32_t xa, xa8, xb, xb8;
            // k-tile 2 (sl & 1) + q of the k-group: its two scale bytes per row tile
            expand_scales(((sl & 1) ? sca.y : sca.x) >> (q * 16), xa, xa8);
            expand_scales(((sl & 1) ? scb.y : scb.x) >> (q * 16), xb, xb8);
            const uint32_t wwa[4] = {ca.x, ca.y, ca.z, ca.w};
            const uint32_t wwb[4] = {cb.x, cb.y, cb.z, cb.w};
            if constexpr (!AS) {  // constexpr: the n8 widths have no shared-memory-A wrappers
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    // k-step j of the slice writes A set j % D, whose last reader (k-step
                    // j - D) has completed: wait_group D - 1 after every commit. D divides
                    // the slice's 8 k-steps, so the set index is a compile-time constant.
                    const int j = (4 * q + s) % D, c = s % C;
                    expand_codes(wwa[s], xa, xa8, ar[j]);
                    expand_codes(wwb[s], xb, xb8, br[j]);
                    const uint64_t desc = wg_desc(sbuf + (uint32_t)(q * N * 128 + s * 32));
                    wg_fence();
                    moe_wg_mma<N>::run(da[c], ar[j][0], ar[j][1], ar[j][2], ar[j][3], desc);
                    moe_wg_mma<N>::run(db[c], br[j][0], br[j][1], br[j][2], br[j][3], desc);
                    wg_commit();
                    wg_wait<D - 1>();
                }
            } else {
                // A in shared memory: this warp's 2 x 16 rows of k-tile kt, expanded once
                // into buffer kt & 1 (its previous reader, k-tile kt - 2, has completed:
                // wait_group 1 after k-tile kt - 1), then one wgmma group per k-tile.
                const int wg = warp >> 2, wl = warp & 3, kt = 2 * sl + q;
                char *am = abuf + (kt & 1) * MOE_WG_ABUF + wg * (MOE_WG_ABUF / 2);
                const uint32_t am_s = (uint32_t)__cvta_generic_to_shared(am);
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    uint32_t a[4], b[4];
                    expand_codes(wwa[s], xa, xa8, a);
                    expand_codes(wwb[s], xb, xb8, b);
                    // rows 16 wl + g (+8): atom 2 wl (+1), row g of it; k-step s is the
                    // row's 16-byte chunks 2s (cols 0-7) and 2s+1 (cols 8-15), swizzled.
                    const int o0 = (2 * wl) * 1024 + g * 128 + 4 * t, o1 = o0 + 1024;
                    const int c0 = ((2 * s) ^ g) << 4, c1 = ((2 * s + 1) ^ g) << 4;
                    *(uint32_t *)(am + o0 + c0) = a[0];
                    *(uint32_t *)(am + o1 + c0) = a[1];
                    *(uint32_t *)(am + o0 + c1) = a[2];
                    *(uint32_t *)(am + o1 + c1) = a[3];
                    *(uint32_t *)(am + 8192 + o0 + c0) = b[0];
                    *(uint32_t *)(am + 8192 + o1 + c0) = b[1];
                    *(uint32_t *)(am + 8192 + o0 + c1) = b[2];
                    *(uint32_t *)(am + 8192 + o1 + c1) = b[3];
                }
                fence_proxy_async();
                asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");  // the warpgroup's 64 rows
                wg_fence();
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const uint64_t bdesc = wg_desc(sbuf + (uint32_t)(q * N * 128 + s * 32));
                    moe_wg_mma_ss<N>::run(da[0], wg_desc(am_s + (uint32_t)(s * 32)), bdesc);
                    moe_wg_mma_ss<N>::run(db[0], wg_desc(am_s + 8192u + (uint32_t)(s * 32)), bdesc);
                }
                wg_commit();
                wg_wait<1>();
            }
        }
    }
    wg_wait<0>();
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) wg_pin(da[c][i]), wg_pin(db[c][i]);
#pragma unroll
    for (int c = 1; c < C; c++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) da[0][i] += da[c][i], db[0][i] += db[c][i];

    moe_wg_epilogue<N, DN>(p, da[0], db[0], e, start, cnt, pair, moe_wg_tok, moe_wg_rw);
    __syncthreads();  // the ring and row[] are reused by the next item
#else
    __trap();  // launched only on sm_90 devices of an sm_90a build (moe_launch_wg)
#endif
}

// ---- the lean register path (the default; NIBBLE_MOE_WG_LEAN=0 for moe_wg_item's) ----------
//
// moe_wg_item's register path (D = 2, C = 1: the defaults) with its per-slice overhead cut.
// The multiplying warps also issue the ring's copies, so every instruction around the
// expansion takes an issue slot from it: the third session's loop spent ~454 instructions per
// warp and slice against ~340 for the probe's rse4 loop (bench/lab/hopper_probe.cu, the same
// expansion and wgmmas), and ran ~1.4x slower than it. Here:
//   - each thread's copy sources and shared-memory destinations are computed once per item
//     (token chunk pointers and swizzled offsets, code and scale pointers); a slice adds its
//     offset;
//   - the wgmma descriptor is built once per slice and a k-step adds its 16-byte units to the
//     low word (the address field cannot carry: shared addresses stay below 256 KB);
//   - a k-group's scales are copied and read once, by its first slice (the third session's
//     loop copied the whole k-group's 512 bytes again for the second slice);
//   - two slices per loop trip, so the k-group half and the scale word are compile-time.
// The ring, its stage layout and the wgmma sequence are moe_wg_item's.
// Per-thread copy plan of one item: TM token chunks (source, swizzled offset, 16 or 0 bytes),
// this lane's code and scale sources and their offsets in a stage.
template <int TM>
struct moe_wg_plan {
    const char *tsrc[TM];
    uint32_t tdst[TM], tsz[TM];
    const uint8_t *pa, *pb, *ps;
    uint32_t cw, cs;
};

// Slice sl's copies into the stage at shared address st, then the plan's sources advance to
// slice sl + 1 (scales: to the next k-group after its second slice).
template <int N, int W, int TM>
__device__ __forceinline__ void moe_wg_lean_stage(moe_wg_plan<TM> &pl, uint32_t st, bool scales, bool odd)
{
    constexpr bool PART = N * 16 % (W * 32) != 0;  // the last chunk round leaves threads idle
#pragma unroll
    for (int m = 0; m < TM; m++) {
        if (!PART || m < TM - 1 || threadIdx.x + m * (W * 32) < N * 16)
            cp_async16_sz(st + pl.tdst[m], pl.tsrc[m], pl.tsz[m]);
        pl.tsrc[m] += 256;
    }
    cp_async16_s(st + pl.cw, pl.pa);
    cp_async16_s(st + pl.cw + 512, pl.pa + 512);
    cp_async16_s(st + pl.cw + 1024, pl.pb);
    cp_async16_s(st + pl.cw + 1536, pl.pb + 512);
    if (scales) cp_async16_s(st + pl.cs, pl.ps);
    pl.pa += 1024, pl.pb += 1024;
    if (odd) pl.ps += 256;
    cp_async_commit();
}

// The ring's turn at slice sl (the lean loop and the wide form): wait until slice sl has landed
// for every thread, then say whether the caller is to stage slice sl + AHEAD. Its stage last
// held slice sl - 2, whose wgmmas every warp has completed (two k-steps in flight per warp).
// Past the last slice an empty group is committed instead, which keeps wait_group's count
// uniform.
template <int AHEAD>
__device__ __forceinline__ bool moe_wg_ring_turn(int sl, int slices)
{
    cp_async_wait<AHEAD - 1>();
    fence_proxy_async();
    __syncthreads();
    if (sl + AHEAD < slices) return true;
    cp_async_commit();
    return false;
}

// The ring's hand-off by mbarriers instead (MB, bit 4 of the kernel's L: the wide form always,
// the lean loop's 16-warp defaults unless NIBBLE_MOE_WG_MBAR=0):
// mbar[s] says stage s is full (W * 32 arrivals: every thread's copies of the slice,
// cp.async.mbarrier.arrive.noinc), mbar[STAGES + s] that it is empty (W arrivals: each warp once
// the wgmmas that read the slice have completed, i.e. after the first k-step of the next slice,
// whose wait leaves only that k-step in flight). Slice g of the block (counted across items, so
// the phases run on) lives in stage g % STAGES, phase g / STAGES. A warp stages slice g + AHEAD
// once slice g + AHEAD - STAGES is empty, so it may run up to about a slice ahead of the slowest
// warp instead of meeting every warp at every slice.
template <int STAGES>
__device__ __forceinline__ void moe_mb_wait_empty(uint32_t mb, uint32_t g)
{
    wg_mbar_wait(mb + 8u * (STAGES + g % STAGES), ((g / STAGES) & 1u) ^ 1u);  // a fresh barrier passes parity 1
}
template <int STAGES>
__device__ __forceinline__ void moe_mb_filled(uint32_t mb, uint32_t g)
{
    wg_mbar_cp_arrive(mb + 8u * (g % STAGES));
}
template <int STAGES>
__device__ __forceinline__ void moe_mb_wait_full(uint32_t mb, uint32_t g)
{
    wg_mbar_wait(mb + 8u * (g % STAGES), (g / STAGES) & 1u);
    fence_proxy_async();  // the slice came by cp.async (generic proxy); wgmma reads it
}
template <int STAGES>
__device__ __forceinline__ void moe_mb_release(uint32_t mb, uint32_t g)
{
    __syncwarp();  // every lane's reads of the stage are done
    if ((threadIdx.x & 31) == 0) wg_mbar_arrive(mb + 8u * (STAGES + g % STAGES));
}

template <int N, bool DN, int W, bool MB>
__device__ __forceinline__ void moe_wg_item_lean(const moe_params &p, char *ring, const long long *row, int e,
                                                 int start, int cnt, int rb, uint64_t *mbar, uint32_t &gsl)
{
#if MOE_WG_ARCH
    constexpr int STAGES = MOE_WG_RING(0, W), AHEAD = STAGES - 2, SB = MOE_WG_STAGE_BYTES(N, W);
    constexpr int TM = (N * 16 + W * 32 - 1) / (W * 32);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const moe_wg_rows wr = moe_wg_item_rows<DN, W>(p, e, rb, warp);
    const int pair = wr.pair, slices = wr.slices;
    const uint16_t *bbase = DN ? p.act : p.xp;
    moe_wg_plan<TM> pl;
#pragma unroll
    for (int m = 0; m < TM; m++) {
        const int c = tid + m * (W * 32), r = (c >> 4) % N, q = (c >> 3) & 1, ch = c & 7;
        const long long off = row[r];
        pl.tsrc[m] = (const char *)(bbase + (off < 0 ? 0 : off) + q * 64 + ch * 8);
        pl.tsz[m] = off >= 0 ? 16u : 0u;
        pl.tdst[m] = (uint32_t)(q * (N * 128) + (r >> 3) * 1024 + (r & 7) * 128 + ((ch ^ (r & 7)) << 4));
    }
    pl.pa = wr.wa + lane * 16;
    pl.pb = wr.wb + lane * 16;
    pl.ps = (lane < 16 ? wr.sa : wr.sb - 256) + lane * 16;
    pl.cw = (uint32_t)(MOE_WG_CODES_OFF(N) + warp * 2048 + lane * 16);
    pl.cs = (uint32_t)(MOE_WG_SCALES_OFF(N, W) + warp * 512 + lane * 16);
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    float da[N / 2], db[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) da[i] = db[i] = 0.0f;
    uint32_t ar[2][4], br[2][4];
    const uint32_t mb = MB ? (uint32_t)__cvta_generic_to_shared(mbar) : 0u, g0 = gsl;

#pragma unroll
    for (int i = 0; i < AHEAD; i++) {
        if (MB && i < slices) {
            moe_mb_wait_empty<STAGES>(mb, g0 + i);
            moe_wg_lean_stage<N, W, TM>(pl, ring_s + (g0 + i) % STAGES * SB, (i & 1) == 0, (i & 1) == 1);
            moe_mb_filled<STAGES>(mb, g0 + i);
        } else if (i < slices) {
            moe_wg_lean_stage<N, W, TM>(pl, ring_s + i * SB, (i & 1) == 0, (i & 1) == 1);
        } else if (!MB) {
            cp_async_commit();
        }
    }
#pragma unroll 1
    for (int sl0 = 0; sl0 < slices; sl0 += 2) {
        uint2 sca, scb;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int sl = sl0 + h;
            int sti;
            if constexpr (MB) {
                const uint32_t gn = g0 + sl + AHEAD;
                if (sl + AHEAD < slices) {
                    moe_mb_wait_empty<STAGES>(mb, gn);
                    moe_wg_lean_stage<N, W, TM>(pl, ring_s + gn % STAGES * SB, ((h + AHEAD) & 1) == 0,
                                                ((h + AHEAD) & 1) == 1);
                    moe_mb_filled<STAGES>(mb, gn);
                }
                sti = (int)((g0 + sl) % STAGES);
                moe_mb_wait_full<STAGES>(mb, g0 + sl);
            } else {
                if (moe_wg_ring_turn<AHEAD>(sl, slices))
                    moe_wg_lean_stage<N, W, TM>(pl, ring_s + ((sl + AHEAD) % STAGES) * SB, ((h + AHEAD) & 1) == 0,
                                                ((h + AHEAD) & 1) == 1);
                sti = sl % STAGES;
            }
            const char *stg = ring + sti * SB;
            if (h == 0) {
                sca = *(const uint2 *)(stg + MOE_WG_SCALES_OFF(N, W) + warp * 512 + lane * 8);
                scb = *(const uint2 *)(stg + MOE_WG_SCALES_OFF(N, W) + warp * 512 + 256 + lane * 8);
            }
            const uint64_t d0 = wg_desc(ring_s + (uint32_t)(sti * SB));
            uint64_t dk[2][4];
#pragma unroll
            for (int q = 0; q < 2; q++)
#pragma unroll
                for (int s = 0; s < 4; s++) dk[q][s] = wg_desc_add(d0, (uint32_t)((q * N * 128 + s * 32) >> 4));
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const uint4 ca = *(const uint4 *)(stg + MOE_WG_CODES_OFF(N) + warp * 2048 + q * 512 + lane * 16);
                const uint4 cb = *(const uint4 *)(stg + MOE_WG_CODES_OFF(N) + warp * 2048 + 1024 + q * 512 + lane * 16);
                uint32_t xa, xa8, xb, xb8;
                expand_scales((h ? sca.y : sca.x) >> (q * 16), xa, xa8);
                expand_scales((h ? scb.y : scb.x) >> (q * 16), xb, xb8);
                const uint32_t wwa[4] = {ca.x, ca.y, ca.z, ca.w};
                const uint32_t wwb[4] = {cb.x, cb.y, cb.z, cb.w};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const int j = s & 1;  // A set j: its last reader (two k-steps back) has completed
                    expand_codes(wwa[s], xa, xa8, ar[j]);
                    expand_codes(wwb[s], xb, xb8, br[j]);
                    const uint64_t desc = dk[q][s];
                    wg_fence();
                    moe_wg_mma<N>::run(da, ar[j][0], ar[j][1], ar[j][2], ar[j][3], desc);
                    moe_wg_mma<N>::run(db, br[j][0], br[j][1], br[j][2], br[j][3], desc);
                    wg_commit();
                    wg_wait<1>();
                    // MB: only this k-step's wgmmas are in flight, slice sl - 1 is done with
                    if (MB && q == 0 && s == 0 && sl > 0) moe_mb_release<STAGES>(mb, g0 + sl - 1);
                }
            }
        }
    }
    wg_wait<0>();
    if constexpr (MB) {
        moe_mb_release<STAGES>(mb, g0 + slices - 1);
        gsl = g0 + slices;
    }
#pragma unroll
    for (int i = 0; i < N / 2; i++) wg_pin(da[i]), wg_pin(db[i]);
    moe_wg_epilogue<N, DN>(p, da, db, e, start, cnt, pair, moe_wg_tok, moe_wg_rw);
    __syncthreads();  // the ring and row[] are reused by the next item
#else
    __trap();
#endif
}

#include "ops/cuda/moe_wgmma_wide.cuh"

// NIBBLE_MOE_WG_N8 (NS == -8): the tile's token count rounded up to a multiple of 8, N
// from 8 up to NW (the wgmma m64nNk16 widths in steps of 8), so a 31-token tile issues n32
// and a 20-token one n24 instead of the 16-step widths' n32. A chain of tests rather than a
// switch so that only the widths up to NW are instantiated.
template <int N, bool DN, int AS, int NW, int D, int C, int W>
__device__ __forceinline__ void moe_wg_item_n8(const moe_params &p, char *ring, char *abuf, const long long *row,
                                               int4 tl, int rb)
{
    if constexpr (N < NW) {
        if (tl.z > N) {
            moe_wg_item_n8<N + 8, DN, AS, NW, D, C, W>(p, ring, abuf, row, tl, rb);
            return;
        }
    }
    moe_wg_item<N, DN, AS, D, C, W>(p, ring, abuf, row, tl.x, tl.y, tl.z, rb);
}

// One item at instruction width N: the lean loop (L = 1, 5 with the mbarrier ring) or
// moe_wg_item's.
template <int N, bool DN, int AS, int D, int C, int W, int L>
__device__ __forceinline__ void moe_wg_item_at(const moe_params &p, char *ring, char *abuf, const long long *row,
                                               int4 tl, int rb, uint64_t *mbar, uint32_t &gsl)
{
    if constexpr (L)
        moe_wg_item_lean<N, DN, W, (L & 4) != 0>(p, ring, row, tl.x, tl.y, tl.z, rb, mbar, gsl);
    else
        moe_wg_item<N, DN, AS, D, C, W>(p, ring, abuf, row, tl.x, tl.y, tl.z, rb);
}

// Tile widths of one kernel instance: NS == -8: multiples of 8 (moe_wg_item_n8); NS == -1
// (the second session's kernel): the narrowest of 16/32/48/64 that covers the tile; NS == 0: always NW (tiles are cut at NW); NS > 0:
// NS for tiles of at most NS tokens (an expert's remainder), else NW. Each width is its own
// inlined copy of the main loop, and ptxas allocates registers for all of them together:
// with four widths it serializes the wgmmas (C7512) at any depth above 2.
template <bool DN, int AS, int NW, int NS, int D, int C, int W, int L>
__device__ __forceinline__ void moe_wg_dispatch(const moe_params &p, char *ring, char *abuf, const long long *row,
                                                int4 tl, int rb, uint64_t *mbar, uint32_t &gsl)
{
    static_assert(!L || (AS == 0 && D == 2 && C == 1 && NS != -8), "the lean loop is the register path at D 2, C 1");
    if constexpr ((L & 3) == 2) {
        // the wide form: widths per tile, NS the middle one (always the mbarrier ring)
        static_assert(L & 4, "the wide form hands its stages over by mbarriers");
        moe_wgw_dispatch<DN, W, NS>(p, ring, row, tl, rb, mbar, gsl);
    } else if constexpr (NS == -8) {
        moe_wg_item_n8<8, DN, AS, NW, D, C, W>(p, ring, abuf, row, tl, rb);
    } else if constexpr (NS < 0) {
        switch ((tl.z + 15) >> 4) {
        case 1: moe_wg_item_at<16, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl); break;
        case 2: moe_wg_item_at<32, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl); break;
        case 3: moe_wg_item_at<48, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl); break;
        default: moe_wg_item_at<64, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl); break;
        }
    } else if constexpr (NS > 0) {
        if (tl.z <= NS)
            moe_wg_item_at<NS, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl);
        else
            moe_wg_item_at<NW, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl);
    } else {
        moe_wg_item_at<NW, DN, AS, D, C, W, L>(p, ring, abuf, row, tl, rb, mbar, gsl);
    }
}

// Persistent, dynamically scheduled, items in this order:
//   [zeroing chunks of out] [permuting chunks of x -> xp] [gate_up items, tile-major]
//   [down items, tile-major]
// gate_up items wait for all zeroing and permuting items; a down item of tile i also for
// tile i's gate_up items. The deadlock argument of moe_ffn_kernel holds unchanged (items
// are taken in order; a block holds its current item and one later one).
// L: 0 moe_wg_item, 1 the lean loop, 2 the wide form; | 4: the ring's stages handed over by
// mbarriers (moe_mb_*) instead of a block barrier per slice (5 and 6 are built).
template <int NMAX, int NS, int AS, int D, int C, int W, int L>
__global__ void __launch_bounds__(W * 32, 1) moe_wg_kernel(moe_params p)
{
    extern __shared__ uint4 moe_wg_smem[];
    __shared__ int s_item[2];
    __shared__ long long s_row[NMAX];
    // L & 4: the ring's full and empty mbarriers (moe_mb_*), and the block's slices so far
    __shared__ uint64_t s_mbar[L & 4 ? 2 * MOE_WG_RING(0, W) : 1];
    uint32_t gsl = 0;
    // The swizzle atoms must be 1024-aligned in the shared window.
    char *abuf = (char *)moe_wg_smem;
    abuf += (1024 - ((uint32_t)__cvta_generic_to_shared(abuf) & 1023)) & 1023;
    char *ring = abuf + (AS ? 2 * MOE_WG_ABUF : 0);  // [A buffers (AS)] [ring]
    griddep_wait();
    const int n_tiles = *p.n_tiles;
    // Items per tile: pairs of 16-row tiles per warp, or one (the wide form, L & 3 == 2).
    constexpr bool WIDE = (L & 3) == 2;
    const int rb_gu = p.inter / 16 / (WIDE ? W / 2 : W), rb_dn = p.hidden / (WIDE ? 16 : 32) / W;
    const long long n_ktiles = (long long)p.tokens * p.hidden / 64;
    const int n_z = (int)((p.zero_elems + MOE_ZERO_CHUNK - 1) / MOE_ZERO_CHUNK);
    const int n_pre = n_z + (int)((n_ktiles + MOE_WG_PERM_KTILES(W) - 1) / MOE_WG_PERM_KTILES(W));
    const int n_gu = n_tiles * rb_gu, total = n_pre + n_gu + n_tiles * rb_dn;
    if (threadIdx.x == 0) s_item[0] = atomicAdd(p.work, 1);
#if MOE_WG_ARCH
    if ((L & 4) && threadIdx.x == 0) {
        const uint32_t mb = (uint32_t)__cvta_generic_to_shared(s_mbar);
        for (int i = 0; i < MOE_WG_RING(0, W); i++) {
            wg_mbar_init(mb + 8u * i, W * 32);                  // full: every thread's copies
            wg_mbar_init(mb + 8u * (MOE_WG_RING(0, W) + i), W);  // empty: every warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#endif
    __syncthreads();
    for (int it = 0;; it ^= 1) {
        const int item = s_item[it];
        if (item >= total) break;
        if (threadIdx.x == 0) s_item[it ^ 1] = atomicAdd(p.work, 1);  // the next, fetched early
        if (item < n_pre) {
            if (item < n_z) {
                const size_t base = (size_t)item * MOE_ZERO_CHUNK;
                for (int i = threadIdx.x * 4; i < MOE_ZERO_CHUNK; i += W * 32 * 4)
                    if (base + i < p.zero_elems) *(float4 *)(p.out + base + i) = make_float4(0, 0, 0, 0);
            } else {
                moe_wg_permute<W>(p, (long long)(item - n_z) * MOE_WG_PERM_KTILES(W), n_ktiles);
            }
            __syncthreads();
            if (threadIdx.x == 0) add_release(p.work + 1, 1);
            continue;
        }
        const bool dn = item >= n_pre + n_gu;
        const int ii = dn ? item - n_pre - n_gu : item - n_pre, per = dn ? rb_dn : rb_gu;
        // An expert's tiles side by side: its items run (rb 0: tile 0, 1, ..), (rb 1: ..), so
        // blocks working on the same weight rows of different tiles run together and all but
        // the first read the weights from L2.
        const int tq = ii / per, w = p.tiles[tq].w, nt = w >> 16, ti0 = tq - (w & 0xffff);
        const int local = ii - ti0 * per, rb = local / nt, ti = ti0 + local % nt;
        const int4 tl = p.tiles[ti];
        if (threadIdx.x < NMAX) {
            const int r = threadIdx.x, pos = tl.y + r;
            const int slot = r < tl.z ? p.sorted[pos] : 0;
            s_row[r] = r >= tl.z ? -1 : dn ? (long long)pos * p.inter : (long long)(slot / p.topk) * p.hidden;
            // The down epilogue's column table: one division and two loads per column and item
            // instead of per thread and value.
            if (dn && r < tl.z) {
                moe_wg_tok[r] = slot / p.topk;
                moe_wg_rw[r] = (p.route_w ? p.route_w[slot] : 1.0f) * (MOE_ACC_FIX * p.g2[tl.x]);
            }
        }
        if (threadIdx.x == 0) {
            if (dn)
                while (ld_acquire(p.done + ti) < rb_gu) __nanosleep(64);
            while (ld_acquire(p.work + 1) < n_pre) __nanosleep(64);
        }
        __syncthreads();
        if (dn) {
            moe_wg_dispatch<true, AS, NMAX, NS, D, C, W, L>(p, ring, abuf, s_row, tl, rb, s_mbar, gsl);
        } else {
            moe_wg_dispatch<false, AS, NMAX, NS, D, C, W, L>(p, ring, abuf, s_row, tl, rb, s_mbar, gsl);
            if (threadIdx.x == 0) add_release(p.done + ti, 1);
        }
    }
}

// ---- launcher ------------------------------------------------------------------------------

size_t moe_wg_dyn_smem(int nmax, int a_smem) { return nb_moe_wg_smem_bytes(nmax, a_smem) + 1024; }

// Dynamic shared memory of a block of w warps (the ring, the expanded-A buffers, 1 KB of
// alignment slack); what moe.h's nb_moe_wg_smem_total / nb_moe_wg16_smem_total /
// nb_moe_wgw_smem_total (nibble plan-tiles) count, less the static row offsets, item slots and
// column table.
static size_t moe_wg_dyn_smem_w(int nmax, int a_smem, int w, int wide)
{
    const size_t stage = (size_t)(wide ? MOE_WGW_STAGE_BYTES(nmax, w) : MOE_WG_STAGE_BYTES(nmax, w));
    return (size_t)MOE_WG_RING(a_smem, w) * stage + (a_smem ? 2u * MOE_WG_ABUF : 0u) + 1024u;
}

template <int NMAX, int NS, int AS, int D, int C, int W, int L>
static nb_status moe_launch_wg_t(const moe_params &p, int sms, cudaStream_t st)
{
    static int per_sm = 0, optin = 0, major = 0, minor = 0;
    if (!optin) {
        int dev = 0;
        NB_CUDA_TRY(cudaGetDevice(&dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    }
    if (major != 9 || minor != 0)
        return nb_error(NB_ERR_UNSUPPORTED, "moe: the wgmma kernel needs an sm_90 device (H100/H200), this is sm_%d%d",
                        major, minor);
    if ((p.inter / 16) % W || (p.hidden / 32) % W)
        return nb_error(NB_ERR_UNSUPPORTED, "moe: wgmma kernel of %d warps needs inter %% %d == 0 and hidden %% %d == 0 "
                        "(inter %d, hidden %d)", W, 16 * W, 32 * W, p.inter, p.hidden);
    const size_t dyn = moe_wg_dyn_smem_w(NMAX, AS, W, (L & 3) == 2);
    const size_t smem = dyn + sizeof(long long) * NMAX + 2 * sizeof(int) + NB_MOE_WG_COLTAB_BYTES;  // + s_row, s_item
    NB_ASSERT(smem == ((L & 3) == 2 ? nb_moe_wgw_smem_total(NMAX)
                       : W == 16 ? nb_moe_wg16_smem_total(NMAX)
                                 : nb_moe_wg_smem_total(NMAX, AS)));
    if (smem > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: wgmma kernel with %d-token tiles and %d warps needs %zu bytes of shared memory, the "
                        "device allows %d per block",
                        NMAX, W, smem, optin);
    if (!per_sm) {
        NB_CUDA_TRY(cudaFuncSetAttribute(moe_wg_kernel<NMAX, NS, AS, D, C, W, L>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_wg_kernel<NMAX, NS, AS, D, C, W, L>, W * 32, dyn));
        if (per_sm < 1) return nb_error(NB_ERR_CUDA, "moe: wgmma kernel<%d> cannot be resident", NMAX);
    }
    NB_CUDA_TRY(moe_launch_pdl(moe_wg_kernel<NMAX, NS, AS, D, C, W, L>, (unsigned)(sms * per_sm), W * 32, dyn, st, p));
    return NB_OK;
}

// The compiled variants of the many-token kernel: tile width NW, remainder width NS (0: none,
// -1: the second session's narrowest-of-four, -8: multiples of 8 up to NW, NIBBLE_MOE_WG_N8=1),
// A in shared memory, k-steps in flight D,
// accumulator chains C. Which one a step runs: moe_wg_pick.
typedef nb_status (*moe_wg_launch_fn)(const moe_params &, int, cudaStream_t);
struct moe_wg_variant {
    int nw, ns, as, d, c, w, lean;
    moe_wg_launch_fn fn;
};
#define MOE_WG_V(NW, NS, AS, D, C, W) {NW, NS, AS, D, C, W, 0, moe_launch_wg_t<NW, NS, AS, D, C, W, 0>}
#define MOE_WG_VL(NW, NS, W) {NW, NS, 0, 2, 1, W, 1, moe_launch_wg_t<NW, NS, 0, 2, 1, W, 1>}
#define MOE_WG_VLM(NW, NS) {NW, NS, 0, 2, 1, 16, 5, moe_launch_wg_t<NW, NS, 0, 2, 1, 16, 5>}
#define MOE_WG_VW(NW, MID) {NW, MID, 0, 2, 1, 16, 6, moe_launch_wg_t<NW, MID, 0, 2, 1, 16, 6>}
static const moe_wg_variant moe_wg_variants[] = {
    MOE_WG_V(64, -1, 0, 2, 1, 8),  MOE_WG_V(64, -1, 1, 2, 1, 8),  // old: registers / shared-memory A
    MOE_WG_V(16, 0, 0, 2, 1, 8),   MOE_WG_V(32, 0, 0, 2, 1, 8),   MOE_WG_V(48, 0, 0, 2, 1, 8),
    MOE_WG_V(48, 0, 0, 4, 2, 8),   MOE_WG_V(64, 16, 0, 2, 1, 8),  MOE_WG_V(16, 0, 0, 2, 1, 16),
    MOE_WG_V(32, 0, 0, 2, 1, 16),  MOE_WG_V(48, 0, 0, 2, 1, 16),  MOE_WG_V(32, 16, 0, 2, 1, 16),
    MOE_WG_V(48, 32, 0, 2, 1, 16),
    // NIBBLE_MOE_WG_N8=1: the same tile widths and warps as the defaults above, the
    // instruction width chosen per tile in steps of 8.
    MOE_WG_V(16, -8, 0, 2, 1, 16), MOE_WG_V(32, -8, 0, 2, 1, 16), MOE_WG_V(48, -8, 0, 2, 1, 16),
    MOE_WG_V(16, -8, 0, 2, 1, 8),  MOE_WG_V(32, -8, 0, 2, 1, 8),  MOE_WG_V(48, -8, 0, 2, 1, 8),
    MOE_WG_V(64, -8, 0, 2, 1, 8),
    // The lean loop (moe_wg_item_lean; NIBBLE_MOE_WG_LEAN=0 runs the rows above instead) for
    // every default configuration: the 16-warp widths, 64-token tiles at 8 warps, and the
    // 8-warp widths of shapes the 16-warp kernel cannot take.
    MOE_WG_VL(16, 0, 16),  MOE_WG_VL(32, 16, 16), MOE_WG_VL(48, 32, 16), MOE_WG_VL(32, 0, 16),
    MOE_WG_VL(48, 0, 16),  MOE_WG_VL(64, -1, 8),  MOE_WG_VL(16, 0, 8),   MOE_WG_VL(32, 0, 8),
    MOE_WG_VL(48, 0, 8),
    // The 16-warp defaults with the mbarrier ring (lean 5 = 1 | 4; NIBBLE_MOE_WG_MBAR=0: the rows
    // above instead).
    MOE_WG_VLM(16, 0), MOE_WG_VLM(32, 16), MOE_WG_VLM(48, 32),
    // The wide form (moe_wgmma_wide.cuh): one row tile per warp, 128-token tiles, widths per
    // tile n64, n96 or n128 (ns: the middle width), or n64, n80 or n128.
    // Its ring hands stages over by mbarriers (lean 6 = 2 | 4).
    MOE_WG_VW(NB_MOE_WG_WIDE_TILE, 96), MOE_WG_VW(NB_MOE_WG_WIDE_TILE, 80),
};

static int moe_wg_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

// 1 for the second session's kernel (NIBBLE_MOE_WG=old, or A in shared memory), which cuts
// 64-token tiles and picks the width per tile.
static int moe_wg_old(int *as)
{
    const char *a = getenv("NIBBLE_MOE_WG_A"), *wg = getenv("NIBBLE_MOE_WG");
    *as = a && !strcmp(a, "smem");
    return *as || (wg && !strcmp(wg, "old"));
}

// 1 for the producer/consumer kernel (moe_wgpc.cu): NIBBLE_MOE_WG=pc; NIBBLE_MOE_WG=rs (or old)
// keeps the third session's kernel (or the second's).
static int moe_wg_pc(void)
{
    const char *wg = getenv("NIBBLE_MOE_WG");
    return wg && !strcmp(wg, "pc");
}

// NIBBLE_MOE_WG_WIDE: 0 never the wide form, 1 (the default) from more than
// MOE_WG_WIDE_FROM tokens per expert with at least 4 waves of its items, 2 wherever the
// 16-warp kernel can run (A/B runs). H200, GLM-5 layer, uniform routing, before the column
// table (bench/RESULTS.md, issue 8, ninth session, call 1): 1536 tokens (48 per expert) 3.18
// -> 3.40 ms, 2048 (64) 4.26 -> 3.87, 8192 13.5 -> 12.2; one dense expert (bench-gemm) 1024
// tokens, 2.4 waves, 0.24 -> 0.31, 2048 tokens 0.44 -> 0.38. With the mbarrier ring (H100,
// seventeenth session, one run): 1280 tokens (40 per expert) 2.78 -> 2.94, 1536 (48) 3.00 ->
// 3.07, 1792 (56, which the ladder gave to the 64-token kernel) 3.71 -> 3.51: from 52 on.
#define MOE_WG_WIDE_FROM 52.0
// The wide form's middle width n80 (moe_wgw_dispatch) up to this many tokens per expert (the
// mean over all experts): measured faster at 64 and 72 (2048 and 2304 tokens of GLM-5), slower
// at 80 and 96.
#define MOE_WG_WIDE_MID80 72.0
// NIBBLE_MOE_WG_MBAR: 1 (the default) the lean loop's ring hands its stages over by mbarriers
// (moe_mb_*) where that is built, 0 by a block barrier per slice. H100, GLM-5 layer (bench/RESULTS.md,
// issue 8, seventeenth session): 512 tokens 1 % faster, 1024-1536 even. The wide form always
// uses them (2048 tokens 5 %, 4096 9 % faster).
static int moe_wg_mbar(void) { return moe_wg_env_int("NIBBLE_MOE_WG_MBAR", 1) != 0; }

static int moe_wg_wide(void)
{
    const int v = moe_wg_env_int("NIBBLE_MOE_WG_WIDE", NB_MOE_WG_WIDE_DEFAULT);
    return v >= 0 && v <= 2 ? v : NB_MOE_WG_WIDE_DEFAULT;
}

int moe_wg_tile_tokens(double tokens_per_expert, int slots, int hidden, int inter)
{
    int as;
    if (moe_wg_old(&as)) return NB_MOE_WG_TILE;
    const int forced = moe_wg_env_int("NIBBLE_MOE_WG_N", 0);
    if (forced == 16 || forced == 32 || forced == 48 || forced == 64 || forced == NB_MOE_WG_WIDE_TILE) return forced;
    const int wide = moe_wg_wide(), w16 = inter % 256 == 0 && hidden % 512 == 0;
    // At least slots / 128 tiles, each inter / 128 + hidden / 256 items.
    const double items = ceil((double)slots / NB_MOE_WG_WIDE_TILE) * (inter / 128 + hidden / 256);
    if (w16 && !moe_wg_pc() &&
        (wide == 2 || (wide == 1 && tokens_per_expert > MOE_WG_WIDE_FROM && items >= 4.0 * 132)))
        return NB_MOE_WG_WIDE_TILE;
    // The producer/consumer kernel has at most 112 registers per consumer thread: 48-token
    // tiles at most (64 would serialize its wgmmas).
    if (moe_wg_pc()) return tokens_per_expert <= 10.0 ? 16 : tokens_per_expert <= 24.0 ? 32 : 48;
    // The tile holds most experts' tokens, so few experts pay for their weights twice (H200,
    // GLM-5 layer: 256 tokens 16, 512 tokens 32, 1000-1024 tokens 48, 2048 tokens the old
    // kernel's 64; the bounds between those points were not measured).
    const double t = tokens_per_expert;
    return t <= 10.0 ? 16 : t <= 24.0 ? 32 : t <= 36.0 ? 48 : 64;
}

nb_status moe_launch_wg(const moe_params &p, int nmax, double tokens_per_expert, int sms, cudaStream_t st)
{
    int as, nw = nmax, ns, d, c, w;
    // Shapes it cannot take (inter % 256, hidden % 512) stay on this file's kernels.
    if (!moe_wg_old(&as) && moe_wg_pc() && moe_wgpc_fits(p.hidden, p.inter)) return moe_launch_wgpc(p, nmax, sms, st);
    if (nw == NB_MOE_WG_WIDE_TILE && !moe_wg_old(&as)) {
        // The wide form: one build (16 warps, widths per tile); the 16-warp shapes only.
        if (p.inter % 256 || p.hidden % 512)
            return nb_error(NB_ERR_UNSUPPORTED, "moe: %d-token wgmma tiles need inter %% 256 == 0 and hidden %% 512 == 0 "
                            "(inter %d, hidden %d)", nw, p.inter, p.hidden);
        // Its middle width: n80 up to MOE_WG_WIDE_MID80 tokens per expert, else n96;
        // NIBBLE_MOE_WG_WIDE_MID=80|96 forces one (A/B runs).
        const int mid = moe_wg_env_int("NIBBLE_MOE_WG_WIDE_MID", tokens_per_expert <= MOE_WG_WIDE_MID80 ? 80 : 96);
        for (size_t i = 0; i < sizeof moe_wg_variants / sizeof moe_wg_variants[0]; i++)
            if (moe_wg_variants[i].lean == 6 && moe_wg_variants[i].nw == nw && moe_wg_variants[i].ns == mid)
                return moe_wg_variants[i].fn(p, sms, st);
        return nb_error(NB_ERR_INVALID_ARG, "moe: NIBBLE_MOE_WG_WIDE_MID=%d: the wide form is built with 80 and 96", mid);
    }
    if (moe_wg_old(&as)) {
        if (nmax != NB_MOE_WG_TILE)
            return nb_error(NB_ERR_INVALID_ARG, "moe: the old wgmma kernel takes %d-token tiles, not %d",
                            NB_MOE_WG_TILE, nmax);
        ns = -1, d = 2, c = 1, w = NB_MOE_WG_WARPS;
    } else {
        // Per tile width: 16 warps where the shape allows it (inter % 256, hidden % 512), the
        // remainder tiles of 32- and 48-token tiles at 16 and 32 (measured best at 512 and
        // 1000 tokens), else the 8-warp kernel of the same width; 64-token tiles: the old
        // kernel's narrowest-of-four widths.
        const int w16 = p.inter % 256 == 0 && p.hidden % 512 == 0;
        w = nw < 64 && w16 ? 16 : 8;
        ns = nw == 64 ? -1 : w == 16 && nw >= 32 ? nw - 16 : 0, d = 2, c = 1;
        // NIBBLE_MOE_WG_N8=1 (not the default until measured): widths in steps of 8 per tile,
        // the same as NIBBLE_MOE_WG_NS=-8.
        if (moe_wg_env_int("NIBBLE_MOE_WG_N8", 0) == 1) ns = -8;
        ns = moe_wg_env_int("NIBBLE_MOE_WG_NS", ns);
        d = moe_wg_env_int("NIBBLE_MOE_WG_D", d);
        c = moe_wg_env_int("NIBBLE_MOE_WG_C", c);
        w = moe_wg_env_int("NIBBLE_MOE_WG_W", w);
    }
    // In order of preference: the lean loop with the mbarrier ring (built for the 16-warp
    // defaults; not with NIBBLE_MOE_WG_MBAR=0), the lean loop with a block barrier per slice
    // (every default), moe_wg_item (NIBBLE_MOE_WG_LEAN=0 or the second session's kernel).
    const int lean = !moe_wg_old(&as) && moe_wg_env_int("NIBBLE_MOE_WG_LEAN", 1) != 0;
    const int levels[3] = {lean && moe_wg_mbar() ? 5 : -1, lean ? 1 : -1, 0};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; levels[k] >= 0 && i < sizeof moe_wg_variants / sizeof moe_wg_variants[0]; i++) {
            const moe_wg_variant *v = &moe_wg_variants[i];
            if (v->nw == nw && v->ns == ns && v->as == as && v->d == d && v->c == c && v->w == w &&
                v->lean == levels[k])
                return v->fn(p, sms, st);
        }
    return nb_error(NB_ERR_INVALID_ARG,
                    "moe: no wgmma kernel built for %d-token tiles, remainder width %d, depth %d, %d chains, %d warps "
                    "(NIBBLE_MOE_WG_N / _NS / _D / _C / _W / _N8)",
                    nw, ns, d, c, w);
}

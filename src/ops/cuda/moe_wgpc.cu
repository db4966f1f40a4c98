// The NVFP4 MoE FFN's wgmma kernel with a producer warpgroup (ops/cuda/moe.h; sm_90a, 16-48
// tokens per tile): moe_wgmma.cu's 16-warp kernel with the loading taken out of the
// multiplying warps. Selected with NIBBLE_MOE_WG=pc; not the default (below).
//
// Block = 16 consumer warps (four warpgroups, one 16-row tile pair each, as the 16-warp
// kernel of moe_wgmma.cu) + a producer warpgroup, one block per SM (setmaxnreg: producer 32
// registers, consumers 112), a 4-stage ring of 128-wide k-slices in shared memory with a
// full and an empty mbarrier per stage:
//   producer: takes the items from the counter (same order, same dependency rules as
//     moe_wgmma.cu), waits for a stage's empty barrier, writes the stage's metadata (item
//     kind, expert, tile, row block) beside the ring with thread 0's arrive (release), and
//     moves the slice in: every consumer warp's NVFP4 codes and scales and the token rows
//     (128-byte-swizzled B tile) by 16-byte cp.async from all 128 threads, completing on the
//     full barrier (cp.async.mbarrier.arrive.noinc). It waits for the consumers only for a
//     free stage, so it runs ahead across item boundaries (no pipeline restart per item).
//     NIBBLE_MOE_WG_PC_BULK=1: codes and scales by per-lane cp.async.bulk from one warp
//     instead (the first version; 2x slower: SASS serializes the lanes' bulk copies).
//   consumers: wait for the full barrier, expand the codes into wgmma A fragments in
//     registers (the repacked layout and expand_codes of the mma kernels), issue RS wgmma
//     m64nNk16 (two k-steps in flight), and arrive (every thread) on the stage's empty
//     barrier once the wgmmas reading it have completed; no __syncthreads in the loop.
//   Items that are not matrix work (zeroing out, rewriting x in wgmma K order) go through the
//   ring as data-less message stages and are done by the 512 consumer threads.
// Measured on an H200 (bench/RESULTS.md, issue 8, fourth session; the version before the
// consumers' lane-0 broadcasts, which were added after and not re-measured): 0.6-10 % slower
// than the 16-warp kernel at 256-1024 tokens; with the producer's weight loads switched off
// (NIBBLE_MOE_WG_PC_LAB=1, timing only) the consumers alone take about as long as the whole
// 16-warp kernel, so the multiplying warps, not the loads, are the limit.
// Tests: tests/cuda_moe/test_moe.c moe_wgpc; timing: scripts/device-moe-pc.sh (bench-moe with
// NIBBLE_BENCH_MOE_VARIANTS="NIBBLE_MOE_WG=rs NIBBLE_MOE_WG=pc").
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"
#include "ops/cuda/moe_wgmma_ops.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PC_ARCH 1
#else
#define PC_ARCH 0
#endif

#define PC_CW 16                      // consumer warps (four warpgroups)
#define PC_THREADS ((PC_CW + 4) * 32)  // + the producer warpgroup
#define PC_REG_CONSUMER 112            // setmaxnreg: 96 at launch (640 threads), producer down to 32
#define PC_REG_PRODUCER 32
#define PC_STAGES 4
#define PC_CODES_OFF(n) ((n) * 256)                 // after the token slice (2 k-tiles x n rows x 128 B)
#define PC_SCALES_OFF(n) ((n) * 256 + PC_CW * 2048)  // after 16 warps x 2 row tiles x 2 k-tiles x 512 B
#define PC_STAGE_BYTES(n) ((n) * 256 + PC_CW * 2560)
#define PC_TX_BYTES (PC_CW * 2560)                 // bulk bytes per stage (codes + scales)
#define PC_PRODUCERS 128                           // the producer warpgroup's threads
#define PC_FULL_ARRIVALS (PC_PRODUCERS + 1)        // their cp.async noinc arrivals + thread 0's (expect_tx)
#define PC_ZERO 16384                              // floats of out per zeroing item
#define PC_PERM 512                                // 64-wide k-tiles of x per permuting item
#define PC_MSG_PRE 2                               // meta kind: a zeroing / permuting item
#define PC_MSG_END (-1)

// ---- mbarrier / bulk-copy plumbing -----------------------------------------------------------

__device__ __forceinline__ uint32_t pc_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void pc_bar_init(uint64_t *b, int count) { wg_mbar_init(pc_saddr(b), count); }

// Returns once the phase of parity `parity` has completed (acquire, CTA scope).
__device__ __forceinline__ void pc_bar_wait(uint64_t *b, uint32_t parity) { wg_mbar_wait(pc_saddr(b), parity); }

__device__ __forceinline__ void pc_bar_arrive(uint64_t *b) { wg_mbar_arrive(pc_saddr(b)); }

__device__ __forceinline__ void pc_bar_arrive_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(pc_saddr(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void pc_cp_async_arrive(uint64_t *b) { wg_mbar_cp_arrive(pc_saddr(b)); }

__device__ __forceinline__ void pc_bulk(uint32_t dst, const void *src, uint32_t bytes, uint64_t *b)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(pc_saddr(b))
                 : "memory");
}

__device__ __forceinline__ void pc_consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(PC_CW * 32) : "memory"); }

// Item bookkeeping shared by the producer (which takes items) and the consumers (which need
// the counts for the message items).
struct pc_plan {
    int n_z, n_pre, n_gu, total, rb_gu, rb_dn;
    long long n_ktiles;
};

__device__ __forceinline__ pc_plan pc_make_plan(const moe_params &p)
{
    pc_plan q;
    const int n_tiles = *p.n_tiles;
    q.rb_gu = p.inter / 16 / PC_CW, q.rb_dn = p.hidden / 32 / PC_CW;
    q.n_ktiles = (long long)p.tokens * p.hidden / 64;
    q.n_z = (int)((p.zero_elems + PC_ZERO - 1) / PC_ZERO);
    q.n_pre = q.n_z + (int)((q.n_ktiles + PC_PERM - 1) / PC_PERM);
    q.n_gu = n_tiles * q.rb_gu;
    q.total = q.n_pre + q.n_gu + n_tiles * q.rb_dn;
    return q;
}

// ---- producer ------------------------------------------------------------------------------

__device__ __forceinline__ void pc_producer_sync() { asm volatile("bar.sync 2, %0;" ::"n"(PC_PRODUCERS) : "memory"); }

// Waits (every producer thread) for ring slot cnt's stage to be free; thread 0 publishes the
// stage's metadata with its arrive (release), announcing the bytes the bulk copies will bring.
// Every producer thread then fills its part and ends with pc_cp_async_arrive.
__device__ __forceinline__ void pc_stage_open(uint64_t *full, uint64_t *empty, int4 (*meta)[2], uint32_t cnt, int4 m0,
                                              int4 m1, uint32_t tx)
{
    const int st = cnt % PC_STAGES;
    pc_bar_wait(empty + st, ((cnt / PC_STAGES) & 1) ^ 1);
    if (threadIdx.x == PC_CW * 32) {
        meta[st][0] = m0, meta[st][1] = m1;
        pc_bar_arrive_tx(full + st, tx);
    }
    __syncwarp();  // warp 0's bulk copies complete_tx only after thread 0's expect_tx
}

// The producer warpgroup (PC_PRODUCERS threads, pt = its thread index). BULK: warp 0 brings
// every consumer warp's codes (1 KB per row tile) and scales (256 B) with one cp.async.bulk
// per lane and row tile (64 per stage); else all 128 threads bring them with 16-byte
// cp.async, 20 per thread per stage. Token rows: 16-byte cp.async by all 128 threads.
template <int NW, int NS, bool BULK>
__device__ __forceinline__ void pc_producer(const moe_params &p, char *ring, uint64_t *full, uint64_t *empty,
                                            int4 (*meta)[2], long long *s_row, int *s_item)
{
    const int pt = threadIdx.x - PC_CW * 32;
    const pc_plan q = pc_make_plan(p);
    const uint32_t ring_s = pc_saddr(ring);
    uint32_t cnt = 0;
    for (int it = 0;; it ^= 1) {
        if (pt == 0) s_item[it] = atomicAdd(p.work, 1);
        pc_producer_sync();  // (also: every thread is done with the previous item's s_row)
        const int item = s_item[it];
        if (item >= q.total) break;
        if (item < q.n_pre) {  // the consumers do it
            pc_stage_open(full, empty, meta, cnt, make_int4(PC_MSG_PRE, item, 0, 0), make_int4(0, 0, 0, 0), 0);
            pc_cp_async_arrive(full + cnt % PC_STAGES);
            cnt++;
            continue;
        }
        const bool dn = item >= q.n_pre + q.n_gu;
        const int ii = dn ? item - q.n_pre - q.n_gu : item - q.n_pre, per = dn ? q.rb_dn : q.rb_gu;
        // An expert's tiles side by side (row block, then tile), as moe_wgmma.cu.
        const int tq = ii / per, w = p.tiles[tq].w, nt = w >> 16, ti0 = tq - (w & 0xffff);
        const int local = ii - ti0 * per, rb = local / nt, ti = ti0 + local % nt;
        const int4 tl = p.tiles[ti];
        const int wide = !(NS > 0 && tl.z <= NS), nw = wide ? NW : (NS > 0 ? NS : NW);
        if (pt < NW) {
            const int pos = tl.y + pt;
            s_row[pt] = pt >= tl.z ? -1
                        : dn       ? (long long)pos * p.inter
                                   : (long long)(p.sorted[pos] / p.topk) * p.hidden;
        }
        if (pt == 0) {
            if (dn)
                while (ld_acquire(p.done + ti) < q.rb_gu) __nanosleep(64);
            while (ld_acquire(p.work + 1) < q.n_pre) __nanosleep(64);
        }
        pc_producer_sync();
        const int e = tl.x, n = dn ? p.hidden : 2 * p.inter, K = dn ? p.inter : p.hidden;
        const uint8_t *wexp = (dn ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
        const uint8_t *sexp = (dn ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
        // Row tile of consumer warp m, half h (gate/up, or the pair's two down tiles):
        // rt0(h) + m * rt_step.
        const int pair0 = rb * PC_CW, rt_step = dn ? 2 : 1;
        const size_t wrt = (size_t)(K / 64) * 512, srt = (size_t)(K / 256) * 256;  // bytes per row tile
        // cp.async path: thread pt moves, for every consumer warp m, the 16 bytes at (pt & 63) * 16
        // of row tile half pt >> 6's codes, and for warps 4 j + (pt >> 5) the scale bytes at
        // (pt & 15) * 16 of half (pt >> 4) & 1.
        const int hc = pt >> 6, hs = (pt >> 4) & 1;
        const int rtc = dn ? 2 * pair0 + hc : pair0 + (hc ? p.inter / 16 : 0);
        const int rts = dn ? 2 * (pair0 + (pt >> 5)) + hs : pair0 + (pt >> 5) + (hs ? p.inter / 16 : 0);
        const uint8_t *wsrc = wexp + (size_t)rtc * wrt + (pt & 63) * 16;
        const uint8_t *ssrc = sexp + (size_t)rts * srt + (pt & 15) * 16;
        // Bulk path: lane l of warp 0 brings consumer warp l / 2's half l & 1.
        const int lb = pt & 31, hb = lb & 1, mb = lb >> 1;
        const int rtb = dn ? 2 * (pair0 + mb) + hb : pair0 + mb + (hb ? p.inter / 16 : 0);
        const uint8_t *wbulk = wexp + (size_t)rtb * wrt, *sbulk = sexp + (size_t)rtb * srt;
        // Token chunks pt + 128 j: row (pt >> 4) + 8 j, k-tile (pt >> 3) & 1, 16-byte chunk pt & 7,
        // stored at chunk (pt & 7) ^ (row % 8) of the row's 128 bytes in the 128-byte swizzle.
        const int tr = pt >> 4, th = (pt >> 3) & 1, tch = pt & 7;
        const int tdst = th * (NW * 128) + tr * 128 + ((tch ^ tr) << 4);
        const uint16_t *tok = (dn ? p.act : p.xp) + th * 64 + tch * 8;
        const int slices = K / 128;
        const int4 m0 = make_int4(dn, e, tl.y, tl.z), m1 = make_int4(rb, ti, wide, 0);
        for (int sl = 0; sl < slices; sl++, cnt++) {
            const int st = cnt % PC_STAGES;
            pc_stage_open(full, empty, meta, cnt, m0, m1, BULK && !(p.pc_lab & 1) ? PC_TX_BYTES : 0);
            char *stg = ring + st * PC_STAGE_BYTES(NW);
            if (p.pc_lab & 1) {
                // lab: consumers multiply whatever the stage holds (timing of the rest only)
            } else if (BULK) {
                if (pt < 32) {
                    const uint32_t sb = ring_s + (uint32_t)(st * PC_STAGE_BYTES(NW));
                    pc_bulk(sb + PC_CODES_OFF(NW) + mb * 2048 + hb * 1024, wbulk + (size_t)sl * 1024, 1024, full + st);
                    pc_bulk(sb + PC_SCALES_OFF(NW) + mb * 512 + hb * 256, sbulk + (size_t)(sl >> 1) * 256, 256,
                            full + st);
                }
            } else {
#pragma unroll
                for (int m = 0; m < PC_CW; m++)
                    cp_async16(stg + PC_CODES_OFF(NW) + m * 2048 + pt * 16,
                               wsrc + (size_t)m * rt_step * wrt + (size_t)sl * 1024, true);
#pragma unroll
                for (int j = 0; j < PC_CW / 4; j++)
                    cp_async16(stg + PC_SCALES_OFF(NW) + j * 2048 + pt * 16,
                               ssrc + (size_t)(4 * j) * rt_step * srt + (size_t)(sl >> 1) * 256, true);
            }
            // Rows past the tile are left as they are: they only feed accumulator columns
            // the epilogue never writes.
            for (int j = 0; j < nw / 8 && !(p.pc_lab & 2); j++) {
                const long long off = s_row[tr + 8 * j];
                if (off >= 0) cp_async16(stg + tdst + j * 1024, tok + off + sl * 128, true);
            }
            pc_cp_async_arrive(full + st);
        }
    }
    pc_stage_open(full, empty, meta, cnt, make_int4(PC_MSG_END, 0, 0, 0), make_int4(0, 0, 0, 0), 0);
    pc_cp_async_arrive(full + cnt % PC_STAGES);
}

// ---- consumers -----------------------------------------------------------------------------

// A message item, by the 512 consumer threads: zero a chunk of out, or rewrite PC_PERM k-tiles
// of x in wgmma order into xp (word 8u + v of a k-tile goes to word 4v + u).
__device__ __forceinline__ void pc_pre(const moe_params &p, const pc_plan &q, int item)
{
    const int tid = threadIdx.x;
    if (item < q.n_z) {
        const size_t base = (size_t)item * PC_ZERO;
#pragma unroll 4
        for (int i = tid * 4; i < PC_ZERO; i += PC_CW * 32 * 4)
            if (base + i < p.zero_elems) *(float4 *)(p.out + base + i) = make_float4(0, 0, 0, 0);
        return;
    }
    const long long first = (long long)(item - q.n_z) * PC_PERM;
#pragma unroll 4
    for (int c = tid; c < PC_PERM * 8; c += PC_CW * 32) {
        const long long kt = first + (c >> 3);
        const int v = c & 7;
        if (kt >= q.n_ktiles) break;
        const uint32_t *src = (const uint32_t *)(p.x + kt * 64);
        const uint4 o = make_uint4(__ldg(src + v), __ldg(src + 8 + v), __ldg(src + 16 + v), __ldg(src + 24 + v));
        ((uint4 *)(p.xpw + kt * 64))[v] = o;
    }
}

// One item on a tile of tl_cnt <= N tokens for this warp's 16-row tile pair, all slices of K
// from the ring (the first one's full barrier already waited by the caller).
//   DN == false: gate_up, pair (r, r + inter/16) of W13, r = 16 rb + warp; writes act.
//   DN == true:  down, pair (2r, 2r+1) of W2; adds into out.
template <int NMAX, int N, bool DN>
__device__ __forceinline__ void pc_item(const moe_params &p, char *ring, uint64_t *full, uint64_t *empty,
                                        uint32_t &cnt, int4 m0, int4 m1)
{
#if PC_ARCH
    const int lane = threadIdx.x & 31, cw = threadIdx.x >> 5;
    const int e = m0.y, start = m0.z, tcnt = m0.w, pair = m1.x * PC_CW + cw;
    const int slices = (DN ? p.inter : p.hidden) / 128;
    const uint32_t ring_s = pc_saddr(ring);
    float da[N / 2], db[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) da[i] = db[i] = 0.0f;
    uint32_t ar[2][4], br[2][4];  // A fragments of the two k-steps in flight
#pragma unroll 1
    for (int sl = 0; sl < slices; sl++, cnt++) {
        // Equal in every lane already; the broadcast lets the compiler keep the stage address and
        // the wgmma descriptors in uniform registers (without it: 4 R2UR per k-step in SASS).
        cnt = __shfl_sync(0xffffffffu, cnt, 0);
        const int st = cnt % PC_STAGES;
        if (sl) pc_bar_wait(full + st, (cnt / PC_STAGES) & 1);
        fence_proxy_async();  // the token rows came by cp.async (generic proxy); wgmma reads them
        const char *stg = ring + st * PC_STAGE_BYTES(NMAX);
        const uint32_t sbuf = ring_s + (uint32_t)(st * PC_STAGE_BYTES(NMAX));
        const uint2 sca = *(const uint2 *)(stg + PC_SCALES_OFF(NMAX) + cw * 512 + lane * 8);
        const uint2 scb = *(const uint2 *)(stg + PC_SCALES_OFF(NMAX) + cw * 512 + 256 + lane * 8);
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const uint4 ca = *(const uint4 *)(stg + PC_CODES_OFF(NMAX) + cw * 2048 + q * 512 + lane * 16);
            const uint4 cb = *(const uint4 *)(stg + PC_CODES_OFF(NMAX) + cw * 2048 + 1024 + q * 512 + lane * 16);
            uint32_t xa, xa8, xb, xb8;
            expand_scales(((sl & 1) ? sca.y : sca.x) >> (q * 16), xa, xa8);
            expand_scales(((sl & 1) ? scb.y : scb.x) >> (q * 16), xb, xb8);
            const uint32_t wwa[4] = {ca.x, ca.y, ca.z, ca.w};
            const uint32_t wwb[4] = {cb.x, cb.y, cb.z, cb.w};
#pragma unroll
            for (int s = 0; s < 4; s++) {
                // k-step j writes A set j & 1, whose last reader (k-step j - 2) completed at the
                // wait_group 1 after k-step j - 1.
                const int j = s & 1;
                expand_codes(wwa[s], xa, xa8, ar[j]);
                expand_codes(wwb[s], xb, xb8, br[j]);
                const uint64_t desc = wg_desc(sbuf + (uint32_t)(q * NMAX * 128 + s * 32));
                wg_fence();
                moe_wg_mma<N>::run(da, ar[j][0], ar[j][1], ar[j][2], ar[j][3], desc);
                moe_wg_mma<N>::run(db, br[j][0], br[j][1], br[j][2], br[j][3], desc);
                wg_commit();
                wg_wait<1>();
                // Everything but this k-step has completed: the previous slice's stage is free.
                // Every thread arrives (a lane-0 branch here makes ptxas serialize the wgmmas,
                // warning C7513).
                if (q == 0 && s == 0 && sl > 0) pc_bar_arrive(empty + (cnt - 1) % PC_STAGES);
            }
        }
    }
    wg_wait<0>();
    pc_bar_arrive(empty + (cnt - 1) % PC_STAGES);
#pragma unroll
    for (int i = 0; i < N / 2; i++) wg_pin(da[i]), wg_pin(db[i]);

    moe_wg_epilogue<N, DN>(p, da, db, e, start, tcnt, pair);
#else
    __trap();  // launched only on sm_90 devices of an sm_90a build
#endif
}

template <int NW, int NS, bool DN>
__device__ __forceinline__ void pc_dispatch(const moe_params &p, char *ring, uint64_t *full, uint64_t *empty,
                                            uint32_t &cnt, int4 m0, int4 m1)
{
    if constexpr (NS > 0) {
        if (!m1.z) {
            pc_item<NW, NS, DN>(p, ring, full, empty, cnt, m0, m1);
            return;
        }
    }
    pc_item<NW, NW, DN>(p, ring, full, empty, cnt, m0, m1);
}

template <int NW, int NS>
__device__ __forceinline__ void pc_consumer(const moe_params &p, char *ring, uint64_t *full, uint64_t *empty,
                                            int4 (*meta)[2])
{
    const pc_plan q = pc_make_plan(p);
    uint32_t cnt = 0;
    for (;;) {
        const int st = cnt % PC_STAGES;
        pc_bar_wait(full + st, (cnt / PC_STAGES) & 1);
        // Broadcast from lane 0 (every lane read the same values): the compiler then knows the
        // item loop, and with it the ring counter, to be warp-uniform.
        int4 m0 = meta[st][0], m1 = meta[st][1];
        m0.x = __shfl_sync(0xffffffffu, m0.x, 0), m0.y = __shfl_sync(0xffffffffu, m0.y, 0);
        m0.z = __shfl_sync(0xffffffffu, m0.z, 0), m0.w = __shfl_sync(0xffffffffu, m0.w, 0);
        m1.x = __shfl_sync(0xffffffffu, m1.x, 0), m1.y = __shfl_sync(0xffffffffu, m1.y, 0);
        m1.z = __shfl_sync(0xffffffffu, m1.z, 0);
        if (m0.x == PC_MSG_END) break;
        if (m0.x == PC_MSG_PRE) {
            pc_bar_arrive(empty + st);
            cnt++;
            pc_pre(p, q, m0.y);
            pc_consumer_sync();
            if (threadIdx.x == 0) add_release(p.work + 1, 1);
            continue;
        }
        if (m0.x) {
            pc_dispatch<NW, NS, true>(p, ring, full, empty, cnt, m0, m1);
        } else {
            pc_dispatch<NW, NS, false>(p, ring, full, empty, cnt, m0, m1);
            pc_consumer_sync();  // every warp's act rows written
            if (threadIdx.x == 0) add_release(p.done + m1.y, 1);
        }
    }
}

// Items in moe_wgmma.cu's order: [zeroing chunks of out] [permuting chunks of x -> xp]
// [gate_up items, tile-major] [down items]; gate_up items wait (in the producer) for all
// zeroing and permuting items, a down item of tile i also for tile i's gate_up items. No
// deadlock: items are taken in order, a producer waits only for free stages of its own ring
// (which its consumers free without waiting on anything but already-issued stages) and for
// items taken before its current one, whose producers have moved all their stages in.
template <int NW, int NS, bool BULK>
__global__ void __launch_bounds__(PC_THREADS, 1) moe_pc_kernel(moe_params p)
{
    extern __shared__ uint4 moe_pc_smem[];
    __shared__ __align__(8) uint64_t s_full[PC_STAGES], s_empty[PC_STAGES];
    __shared__ int4 s_meta[PC_STAGES][2];
    __shared__ long long s_row[NW];
    __shared__ int s_item[2];
    char *ring = (char *)moe_pc_smem;
    ring += (1024 - (pc_saddr(ring) & 1023)) & 1023;  // swizzle atoms 1024-aligned
    if (threadIdx.x == 0) {
        for (int s = 0; s < PC_STAGES; s++) pc_bar_init(s_full + s, PC_FULL_ARRIVALS), pc_bar_init(s_empty + s, PC_CW * 32);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    griddep_wait();
    // Registers move from the producer warpgroup to the consumers (per SM sub-partition: one
    // producer warp gives 64 x 32, four consumer warps take 16 x 32 each).
    if (threadIdx.x >= PC_CW * 32) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PC_REG_PRODUCER));
        pc_producer<NW, NS, BULK>(p, ring, s_full, s_empty, s_meta, s_row, s_item);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(PC_REG_CONSUMER));
        pc_consumer<NW, NS>(p, ring, s_full, s_empty, s_meta);
    }
}

// ---- launcher ------------------------------------------------------------------------------

static size_t pc_dyn_smem(int nw) { return (size_t)PC_STAGES * PC_STAGE_BYTES(nw) + 1024u; }

template <int NW, int NS, bool BULK>
static nb_status pc_launch_t(const moe_params &p, int sms, cudaStream_t st)
{
    static int per_sm = 0, optin = 0;
    if (!optin) {
        int dev = 0;
        NB_CUDA_TRY(cudaGetDevice(&dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    const size_t dyn = pc_dyn_smem(NW);
    const size_t smem = dyn + 2 * PC_STAGES * 8 + PC_STAGES * 32 + 8 * NW + 8;
    if (smem > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: producer/consumer wgmma kernel with %d-token tiles needs %zu bytes of shared memory, "
                        "the device allows %d per block",
                        NW, smem, optin);
    if (!per_sm) {
        NB_CUDA_TRY(cudaFuncSetAttribute(moe_pc_kernel<NW, NS, BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_pc_kernel<NW, NS, BULK>, PC_THREADS, dyn));
        if (per_sm < 1) return nb_error(NB_ERR_CUDA, "moe: producer/consumer wgmma kernel<%d> cannot be resident", NW);
    }
    NB_CUDA_TRY(moe_launch_pdl(moe_pc_kernel<NW, NS, BULK>, (unsigned)(sms * per_sm), PC_THREADS, dyn, st, p));
    return NB_OK;
}

int moe_wgpc_fits(int hidden, int inter) { return inter % (16 * PC_CW) == 0 && hidden % (32 * PC_CW) == 0; }

static nb_status pc_launch_pick(const moe_params &p, int nw, int ns, int bulk, int sms, cudaStream_t st);

nb_status moe_launch_wgpc(const moe_params &p, int nw, int sms, cudaStream_t st)
{
    if (!moe_wgpc_fits(p.hidden, p.inter))
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: the producer/consumer wgmma kernel needs inter %% %d == 0 and hidden %% %d == 0 "
                        "(inter %d, hidden %d)",
                        16 * PC_CW, 32 * PC_CW, p.inter, p.hidden);
    // Remainder width: an expert's last tile of at most 16 tokens runs at n16 with 32-token
    // tiles. Not with 48-token tiles: 48 + 32 in one kernel needs more than 112 registers
    // (ptxas serializes its wgmmas, C7512); NIBBLE_MOE_WG_NS=32 still builds it for A/B.
    const char *v = getenv("NIBBLE_MOE_WG_NS");
    const int ns = v && *v ? atoi(v) : nw == 32 ? 16 : 0;
    // NIBBLE_MOE_WG_PC_BULK=1: codes and scales by cp.async.bulk from one warp (64 copies of
    // 1 KB / 256 B per stage) instead of cp.async from the whole producer warpgroup.
    const char *b = getenv("NIBBLE_MOE_WG_PC_BULK");
    const int bulk = b && !strcmp(b, "1");
    // Lab only (timing, wrong results): NIBBLE_MOE_WG_PC_LAB=1 skips the producer's weight
    // loads, 2 its token loads, 3 both: what is left is the consumers' own time.
    const char *lab = getenv("NIBBLE_MOE_WG_PC_LAB");
    if (lab && *lab) {
        moe_params q = p;
        q.pc_lab = atoi(lab) & 3;
        static int warned = 0;
        if (!warned++) NB_LOG_WARN("cuda", "moe: NIBBLE_MOE_WG_PC_LAB=%d: producer skips loads, results are wrong", q.pc_lab);
        return pc_launch_pick(q, nw, ns, bulk, sms, st);
    }
    return pc_launch_pick(p, nw, ns, bulk, sms, st);
}

static nb_status pc_launch_pick(const moe_params &p, int nw, int ns, int bulk, int sms, cudaStream_t st)
{
    if (nw == 16 && ns == 0) return bulk ? pc_launch_t<16, 0, true>(p, sms, st) : pc_launch_t<16, 0, false>(p, sms, st);
    if (nw == 32 && ns == 16) return bulk ? pc_launch_t<32, 16, true>(p, sms, st) : pc_launch_t<32, 16, false>(p, sms, st);
    if (nw == 48 && ns == 0) return bulk ? pc_launch_t<48, 0, true>(p, sms, st) : pc_launch_t<48, 0, false>(p, sms, st);
    if (!bulk && nw == 32 && ns == 0) return pc_launch_t<32, 0, false>(p, sms, st);
    if (!bulk && nw == 48 && ns == 32) return pc_launch_t<48, 32, false>(p, sms, st);
    return nb_error(NB_ERR_INVALID_ARG,
                    "moe: no producer/consumer wgmma kernel built for %d-token tiles with remainder width %d%s "
                    "(16/0, 32/16, 32/0, 48/0, 48/32; bulk: 16/0, 32/16, 48/0)",
                    nw, ns, bulk ? " and bulk copies" : "");
}

// NVFP4 routed-expert FFN kernels and their launcher (ops/cuda/moe.h).
//
// Two launches per step, none waiting on the host:
//   moe_route_kernel   one block: count slots per expert, scatter slot ids into expert order,
//                      cut each expert's slots into token tiles (the work list), reset counters;
//   moe_ffn_kernel<NT> persistent (programmatic dependent launch): zeroing items for out,
//                      gate_up items (acts = SiLU(x W1^T) * (x W3^T), BF16, expert order),
//                      down items (out[token] += route_weight * (acts W2^T), F32 atomics),
//                      a down item waiting on its tile's gate_up items through counters.
// Each warp holds a 16-row x (8*NT)-token accumulator for two row tiles of
// mma.sync.m16n8k16 (BF16 in, F32 accumulate). A lane loads its own A fragments as 16 bytes
// of E2M1 codes per 64-wide k-tile, already in fragment order (moe_repack.c), and expands
// them with a mask, a shift and one BF16 multiply by the block scale (exact: e2m1*e4m3 fits
// BF16). The multiply carries 2^-7 of the two exponent corrections; the epilogue restores it
// with weight_scale_2. docs/moe-kernels.md has the layout, the measurements and the history.
// Tested by tests/cuda_moe/test_moe.c; timed by `nibble bench-moe`.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"
#include "ops/cuda/moe_stream.cuh"
#include "ops/cuda/moe_wgmma.h"

// ---- workspace, routing: slots into expert order, token tiles ------------------------------

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t moe_max_tiles(int slots, int experts) { return (size_t)slots / MOE_MIN_TILE + (size_t)experts + 1; }

static size_t moe_ws_layout(int experts, int hidden, int inter, int tokens, int slots, char *base, moe_ws *ws)
{
    size_t off = 0, mt = moe_max_tiles(slots, experts);
#define MOE_WS_PART(field, type, count)                                                   \
    do {                                                                                  \
        if (ws) ws->field = (type *)(base + off);                                         \
        off += align256(sizeof(type) * (size_t)(count));                                  \
    } while (0)
    MOE_WS_PART(n_tiles, int, 1);
    MOE_WS_PART(work, int, 2);
    MOE_WS_PART(offsets, int, experts + 1);
    MOE_WS_PART(sorted, int, slots);
    MOE_WS_PART(tiles, int4, mt);
    MOE_WS_PART(done, int, mt);
    MOE_WS_PART(act, uint16_t, (size_t)slots * (size_t)inter);
    MOE_WS_PART(xp, uint16_t, (size_t)tokens * (size_t)hidden);
#undef MOE_WS_PART
    return off;
}

// One block of 1024 threads. ids == NULL: dense mode (slot t -> expert 0). Also resets the
// FFN kernel's work counters. fast: the two inclusive scans by warp shuffles (4 barriers);
// else the first version's shared-memory Hillis-Steele scans (20 barriers), kept for A/B runs.
__global__ void __launch_bounds__(1024) moe_route_kernel(const int32_t *ids, int slots, int experts, int tile,
                                                         moe_ws ws, int fast)
{
    __shared__ int cnt[MOE_MAX_EXPERTS], cur[MOE_MAX_EXPERTS], tsc[MOE_MAX_EXPERTS], csc[MOE_MAX_EXPERTS];
    griddep_launch_dependents();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e < MOE_MAX_EXPERTS; e += blockDim.x) cnt[e] = 0;
    if (tid < 2) ws.work[tid] = 0;
    __syncthreads();
    for (int i = tid; i < slots; i += blockDim.x) {
        int e = ids ? ids[i] : 0;
        if (e >= 0 && e < experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int c = tid < experts ? cnt[tid] : 0;
    int nt = (c + tile - 1) / tile;
    if (fast) {
        // Inclusive scans within each warp, then of the 32 warp totals by warp 0.
        int a = c, b = nt;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int ua = __shfl_up_sync(0xffffffffu, a, d), ub = __shfl_up_sync(0xffffffffu, b, d);
            if (lane >= d) a += ua, b += ub;
        }
        if (lane == 31) csc[warp] = a, tsc[warp] = b;
        __syncthreads();
        if (warp == 0) {
            int wa = csc[lane], wb = tsc[lane];
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int ua = __shfl_up_sync(0xffffffffu, wa, d), ub = __shfl_up_sync(0xffffffffu, wb, d);
                if (lane >= d) wa += ua, wb += ub;
            }
            cur[lane] = wa, cnt[lane] = wb;  // cnt and cur are free until the scatter below
        }
        __syncthreads();
        const int pa = warp ? cur[warp - 1] : 0, pb = warp ? cnt[warp - 1] : 0;
        __syncthreads();  // cur is rewritten below
        csc[tid] = a + pa, tsc[tid] = b + pb;  // only this thread's own entries are read back
    } else {
        // Inclusive scans (Hillis-Steele) of the counts and of the tiles per expert.
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
    }
    int first = csc[tid] - c, tfirst = tsc[tid] - nt;
    if (tid < experts) {
        cur[tid] = first;
        ws.offsets[tid] = first;
        // .w: the tile's index among its expert's tiles and their number (the wgmma kernel
        // runs an expert's tiles side by side so that their weights come from HBM once).
        for (int j = 0; j < nt; j++) {
            ws.tiles[tfirst + j] = make_int4(tid, first + j * tile, min(tile, c - j * tile), j | (nt << 16));
            ws.done[tfirst + j] = 0;
        }
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

// ---- the FFN kernel ------------------------------------------------------------------------

// One item of the block: 4 / ks pairs of 16-row tiles, each pair's K split over ks warps
// (ks = 1, 2 or 4; more splitting when few experts are touched, so that all SMs stream).
//   DN == false: gate_up, pair (r, r + inter/16) of W13 for r = rb*(4/ks) + warp/ks; acts.
//   DN == true:  down, pair (2r, 2r+1) of W2; adds into out.
// row[r]: element offset of token row r of the tile in x (gate_up) or act (down), -1 past
// the tile's count. The warp with part 0 of each pair reduces and runs the epilogue.
// sorted: the step's slot ids in expert order (p.sorted, or the small-step kernel's own copy).
template <int NT, bool DN, int LOOP = NB_MOE_STREAM_LOOP_DEFAULT>
__device__ __forceinline__ void moe_item(const moe_params &p, moe_smem_probe<NT> &sm, char *stage,
                                         const long long *row, int e, int start, int cnt, int rb, int ks,
                                         const int *sorted)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int part = warp % ks, pair = rb * (MOE_WARPS / ks) + warp / ks;
    const int n = DN ? p.hidden : 2 * p.inter, K = DN ? p.inter : p.hidden;
    const int ktiles = K / 64, kgroups = K / 256;
    const int kg0 = part * kgroups / ks, kg1 = (part + 1) * kgroups / ks;
    const int nta = DN ? 2 * pair : pair, ntb = DN ? 2 * pair + 1 : pair + p.inter / 16;
    const uint8_t *wbase = (DN ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
    const uint8_t *sbase = (DN ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
    const uint8_t *wap = wbase + ((size_t)nta * ktiles * 32 + lane) * 16;
    const uint8_t *wbp = wbase + ((size_t)ntb * ktiles * 32 + lane) * 16;
    const uint8_t *sap = sbase + ((size_t)nta * kgroups * 32 + lane) * 8;
    const uint8_t *sbp = sbase + ((size_t)ntb * kgroups * 32 + lane) * 8;
    const uint16_t *bbase = DN ? p.act : p.x;
    const uint16_t *brow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) brow[j] = row[j * 8 + g] < 0 ? nullptr : bbase + row[j * 8 + g] + t * 16;
    float acca[NT][4], accb[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acca[j][i] = accb[j][i] = 0.0f;

    // Double buffer of one k-group per lane (8 x 16 bytes of codes, 2 x 8 of scales): the
    // next group's loads are in flight while this one is expanded and multiplied.
    uint4 ca[4], cb[4], na[4], nb[4];
    uint2 csa = make_uint2(0, 0), csb = csa, nsa = csa, nsb = csa;
    if (MOE_STAGED(NT)) {
        // Staged tokens (the launcher sets ks = 1): every warp runs the same k-groups, so the
        // barriers are uniform.
        char *const bufs[2] = {stage, stage + 8 * NT * MOE_BROW};
        moe_stage_tokens<NT>(bufs[0], bbase, row, 0);
        moe_load_group(wap, wbp, sap, sbp, 0, ca, cb, csa, csb);
        for (int kg = 0; kg < kgroups; kg++) {
            if (kg + 1 < kgroups) {
                moe_stage_tokens<NT>(bufs[(kg + 1) & 1], bbase, row, kg + 1);
                moe_load_group(wap, wbp, sap, sbp, kg + 1, na, nb, nsa, nsb);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            moe_group<NT, true>(ca, cb, csa, csb, brow, bufs[kg & 1], DN, kg, acca, accb);
            __syncthreads();  // before the next-but-one group overwrites this buffer
#pragma unroll
            for (int qq = 0; qq < 4; qq++) ca[qq] = na[qq], cb[qq] = nb[qq];
            csa = nsa, csb = nsb;
        }
    } else if (LOOP == 0) {
        // The loop before the seventh session (NIBBLE_MOE_STREAM_LOOP=0): every load address
        // rebuilt from the item's indices and the k-group.
        if (kg0 < kg1) moe_load_group(wap, wbp, sap, sbp, kg0, ca, cb, csa, csb);
        for (int kg = kg0; kg < kg1; kg++) {
            if (kg + 1 < kg1) moe_load_group(wap, wbp, sap, sbp, kg + 1, na, nb, nsa, nsb);
            moe_group<NT, false>(ca, cb, csa, csb, brow, nullptr, DN, kg, acca, accb);
#pragma unroll
            for (int qq = 0; qq < 4; qq++) ca[qq] = na[qq], cb[qq] = nb[qq];
            csa = nsa, csb = nsb;
        }
    } else if (LOOP == 2) {
        // LOOP 1's pointers, and two k-groups per trip with the two register sets swapping
        // roles (no copy of the next group's codes into the current set: 36 moves per group),
        // and lanes past the tile reading the tile's first row instead of zeros (no zeroing,
        // no predicated loads: moe_load_b's PAD). 681 -> 615 instructions per k-group at NT 1,
        // 741 -> 657 at NT 2; 3-5 % faster than LOOP 1 at 1-10 tokens (RESULTS.md, seventh
        // session). The default.
        const uint8_t *pa = wap + (size_t)kg0 * 2048, *pb = wbp + (size_t)kg0 * 2048;
        const uint8_t *qa = sap + (size_t)kg0 * 256, *qb = sbp + (size_t)kg0 * 256;
        const uint16_t *bk[NT];
        const uint16_t *pad = bbase + row[0] + t * 16;  // a tile holds at least one token
#pragma unroll
        for (int j = 0; j < NT; j++) bk[j] = (brow[j] ? brow[j] : pad) + (size_t)kg0 * 256;
        if (kg0 < kg1) moe_load_group(pa, pb, qa, qb, 0, ca, cb, csa, csb);
        for (int kg = kg0; kg < kg1; kg += 2) {
            if (kg + 1 < kg1) moe_load_group(pa + 2048, pb + 2048, qa + 256, qb + 256, 0, na, nb, nsa, nsb);
            moe_group<NT, false, true>(ca, cb, csa, csb, bk, nullptr, DN, 0, acca, accb);
#pragma unroll
            for (int j = 0; j < NT; j++) bk[j] += 256;
            if (kg + 1 >= kg1) break;
            if (kg + 2 < kg1) moe_load_group(pa + 4096, pb + 4096, qa + 512, qb + 512, 0, ca, cb, csa, csb);
            moe_group<NT, false, true>(na, nb, nsa, nsb, bk, nullptr, DN, 0, acca, accb);
#pragma unroll
            for (int j = 0; j < NT; j++) bk[j] += 256;
            pa += 4096, pb += 4096, qa += 512, qb += 512;
        }
    } else {
        // Sources advanced by a constant per k-group (the loads use immediate offsets from
        // them), so the loop does not rebuild 64-bit addresses from the item's indices: 768 ->
        // 681 instructions per warp and k-group at NT 1 (scripts/sass-loop.sh), 10-14 % faster
        // at 1-64 tokens (bench/RESULTS.md, issue 8, seventh session).
        const uint8_t *pa = wap + (size_t)kg0 * 2048, *pb = wbp + (size_t)kg0 * 2048;
        const uint8_t *qa = sap + (size_t)kg0 * 256, *qb = sbp + (size_t)kg0 * 256;
        const uint16_t *bk[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) bk[j] = brow[j] ? brow[j] + (size_t)kg0 * 256 : nullptr;
        if (kg0 < kg1) moe_load_group(pa, pb, qa, qb, 0, ca, cb, csa, csb);
        for (int kg = kg0; kg < kg1; kg++) {
            pa += 2048, pb += 2048, qa += 256, qb += 256;
            if (kg + 1 < kg1) moe_load_group(pa, pb, qa, qb, 0, na, nb, nsa, nsb);
            moe_group<NT, false>(ca, cb, csa, csb, bk, nullptr, DN, 0, acca, accb);
#pragma unroll
            for (int j = 0; j < NT; j++)
                if (bk[j]) bk[j] += 256;
#pragma unroll
            for (int qq = 0; qq < 4; qq++) ca[qq] = na[qq], cb[qq] = nb[qq];
            csa = nsa, csb = nsb;
        }
    }

    // Split-K reduction: parts 1.. of each pair hand their sums to part 0.
    if (ks > 1) {
        if (part > 0) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    sm.red[warp][0][j][i][lane] = acca[j][i];
                    sm.red[warp][1][j][i][lane] = accb[j][i];
                }
        }
        __syncthreads();
        if (part == 0)
            for (int wv = warp + 1; wv < warp + ks; wv++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        acca[j][i] += sm.red[wv][0][j][i][lane];
                        accb[j][i] += sm.red[wv][1][j][i][lane];
                    }
    }
    if (part == 0) {
        if (!DN) {
            const float fg = MOE_ACC_FIX * p.g13[2 * e], fu = MOE_ACC_FIX * p.g13[2 * e + 1];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int col = j * 8 + 2 * t + (i & 1), r = pair * 16 + g + (i >> 1) * 8;
                    if (col < cnt) {
                        float gv = acca[j][i] * fg, uv = accb[j][i] * fu;
                        float a = gv / (1.0f + __expf(-gv)) * uv;
                        p.act[(size_t)(start + col) * p.inter + r] = f32_to_bf16_rn(a);
                    }
                }
        } else {
            const float f = MOE_ACC_FIX * p.g2[e];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int col = j * 8 + 2 * t + (i & 1), r = 2 * pair * 16 + g + (i >> 1) * 8;
                    if (col < cnt) {
                        int slot = sorted[start + col];
                        float rw = (p.route_w ? p.route_w[slot] : 1.0f) * f;
                        float *o = p.out + (size_t)(slot / p.topk) * p.hidden + r;
                        atomicAdd(o, acca[j][i] * rw);
                        atomicAdd(o + 16, accb[j][i] * rw);
                    }
                }
        }
    }
    __syncthreads();
}

// Blocks per SM the register budget is cut for: as many as possible for the stream kernel
// (many independent loads in flight), fewer as the accumulators grow.
#define MOE_MIN_BLOCKS(nt) ((nt) == 1 ? 4 : (nt) == 2 ? 3 : (nt) == 4 ? 2 : 1)

// A gate_up or down item (item >= n_z) -> its tile and row block (tile-major).
__device__ __forceinline__ void moe_locate(int item, int n_z, int n_gu, int rb_gu, int rb_dn, bool &dn, int &ti,
                                           int &rb)
{
    dn = item >= n_z + n_gu;
    const int ii = dn ? item - n_z - n_gu : item - n_z, per = dn ? rb_dn : rb_gu;
    ti = ii / per, rb = ii % per;
}

// Persistent, dynamically scheduled: blocks take items in order from one counter:
//   [zeroing chunks of out] [gate_up items, tile-major] [down items, tile-major].
// A down item of tile i waits until the gate_up items of tile i and all zeroing are done.
// Items are taken in order by running blocks, and a block holds at most the item it works on
// and the next one (always a later one), so everything waited on is held by a running block
// that does not wait for it: no deadlock whatever the grid size.
template <int NT, int LOOP = NB_MOE_STREAM_LOOP_DEFAULT>
__global__ void __launch_bounds__(MOE_THREADS, MOE_MIN_BLOCKS(NT)) moe_ffn_kernel(moe_params p)
{
    __shared__ moe_smem_probe<NT> sm;
    __shared__ int s_item[2];
    __shared__ long long s_row[8 * NT];
    extern __shared__ uint4 moe_stage_smem[];  // token staging (mma regime), 0 bytes otherwise
    char *stage = (char *)moe_stage_smem;
    griddep_wait();
    const int n_tiles = *p.n_tiles;
    const int rb_gu = p.inter / 16 / (MOE_WARPS / p.ks_gu), rb_dn = p.hidden / 32 / (MOE_WARPS / p.ks_dn);
    const int n_z = (int)((p.zero_elems + MOE_ZERO_CHUNK - 1) / MOE_ZERO_CHUNK);
    const int n_gu = n_tiles * rb_gu, total = n_z + n_gu + n_tiles * rb_dn;
    if (threadIdx.x == 0) s_item[0] = atomicAdd(p.work, 1);
    __syncthreads();
    for (int it = 0;; it ^= 1) {
        const int item = s_item[it];
        if (item >= total) break;
        if (threadIdx.x == 0) s_item[it ^ 1] = atomicAdd(p.work, 1);  // the next, fetched early
        if (item < n_z) {
            size_t base = (size_t)item * MOE_ZERO_CHUNK;
            for (int i = threadIdx.x * 4; i < MOE_ZERO_CHUNK; i += MOE_THREADS * 4)
                if (base + i < p.zero_elems) *(float4 *)(p.out + base + i) = make_float4(0, 0, 0, 0);
            __syncthreads();
            if (threadIdx.x == 0) add_release(p.work + 1, 1);
            continue;
        }
        bool dn;
        int ti, rb;
        moe_locate(item, n_z, n_gu, rb_gu, rb_dn, dn, ti, rb);
        const int4 tl = p.tiles[ti];
        if (threadIdx.x < 8 * NT) {
            const int r = threadIdx.x, pos = tl.y + r;
            s_row[r] = r >= tl.z ? -1
                       : dn      ? (long long)pos * p.inter
                                 : (long long)(p.sorted[pos] / p.topk) * p.hidden;
        }
        if (dn && threadIdx.x == 0) {
            moe_wait_geq(p.done + ti, rb_gu);
            moe_wait_geq(p.work + 1, n_z);
        }
        __syncthreads();
        if (dn) {
            moe_item<NT, true, LOOP>(p, sm, stage, s_row, tl.x, tl.y, tl.z, rb, p.ks_dn, p.sorted);
        } else {
            moe_item<NT, false, LOOP>(p, sm, stage, s_row, tl.x, tl.y, tl.z, rb, p.ks_gu, p.sorted);
            if (threadIdx.x == 0) add_release(p.done + ti, 1);
        }
    }
}

// Small steps (at most MOE_SMALL_SLOTS slots, p.slots of them; p.tile tokens per tile): the
// FFN without waiting for the routing kernel's work list. Every block routes the ids itself
// into shared memory, in the order moe_route_kernel's tiles have (experts ascending, an
// expert's slots by slot id: deterministic, so all blocks agree on every act row), and takes
// items round-robin (item blockIdx.x + k * gridDim.x) instead of from the counter. Only the
// counters (done, work[1]), which the routing kernel resets, need it finished: thread 0 waits
// for it (griddepcontrol.wait) before its first release or acquire, by then long finished, so
// gate_up streaming starts at launch. The ids are complete before that wait: the routing
// kernel, launched without programmatic serialization after their producer, has started.
// Round-robin cannot deadlock while the grid is resident at once (the launcher sizes it so):
// a block reaches a down item only after its own gate_up items, and every gate_up item
// precedes every down item.
template <int NT, int LOOP = NB_MOE_STREAM_LOOP_DEFAULT>
__global__ void __launch_bounds__(MOE_THREADS, MOE_MIN_BLOCKS(NT)) moe_ffn_small_kernel(moe_params p)
{
    __shared__ moe_smem_probe<NT> sm;
    __shared__ long long s_row[8 * NT];
    __shared__ moe_small_route_smem rt;
    const int tid = threadIdx.x;
    const int n_tiles = moe_small_route(p, rt);
    const int rb_gu = p.inter / 16 / (MOE_WARPS / p.ks_gu), rb_dn = p.hidden / 32 / (MOE_WARPS / p.ks_dn);
    const int n_z = (int)((p.zero_elems + MOE_ZERO_CHUNK - 1) / MOE_ZERO_CHUNK);
    const int n_gu = n_tiles * rb_gu, total = n_z + n_gu + n_tiles * rb_dn;
    bool waited = false;  // thread 0's griddepcontrol.wait done
    for (int item = blockIdx.x; item < total; item += gridDim.x) {
        if (item < n_z) {
            size_t base = (size_t)item * MOE_ZERO_CHUNK;
            for (int i = tid * 4; i < MOE_ZERO_CHUNK; i += MOE_THREADS * 4)
                if (base + i < p.zero_elems) *(float4 *)(p.out + base + i) = make_float4(0, 0, 0, 0);
            __syncthreads();
            if (tid == 0) {
                if (!waited) griddep_wait(), waited = true;
                add_release(p.work + 1, 1);
            }
            continue;
        }
        bool dn;
        int ti, rb;
        moe_locate(item, n_z, n_gu, rb_gu, rb_dn, dn, ti, rb);
        const int4 tl = rt.tiles[ti];
        if (tid < 8 * NT) {
            const int r = tid, pos = tl.y + r;
            s_row[r] = r >= tl.z ? -1
                       : dn      ? (long long)pos * p.inter
                                 : (long long)(rt.sorted[pos] / p.topk) * p.hidden;
        }
        if (dn && tid == 0) {
            if (!waited) griddep_wait(), waited = true;
            moe_wait_geq(p.done + ti, rb_gu);
            moe_wait_geq(p.work + 1, n_z);
        }
        __syncthreads();
        if (dn) {
            moe_item<NT, true, LOOP>(p, sm, nullptr, s_row, tl.x, tl.y, tl.z, rb, p.ks_dn, rt.sorted);
        } else {
            moe_item<NT, false, LOOP>(p, sm, nullptr, s_row, tl.x, tl.y, tl.z, rb, p.ks_gu, rt.sorted);
            if (tid == 0) {
                if (!waited) griddep_wait(), waited = true;
                add_release(p.done + ti, 1);
            }
        }
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" size_t nb_moe_workspace_bytes(const nb_moe_weights_dev *w, int tokens, int topk)
{
    return moe_ws_layout(w->experts, w->hidden, w->inter, tokens, tokens * topk, NULL, NULL);
}

extern "C" const char *nb_moe_kernel_name(nb_moe_kernel k)
{
    return k == NB_MOE_KERNEL_STREAM ? "stream"
           : k == NB_MOE_KERNEL_MMA  ? "mma"
           : k == NB_MOE_KERNEL_WGMMA ? "wgmma"
                                      : "auto";
}

extern "C" int nb_moe_should_use_stream(double tokens_per_expert, int n, int k, int sm)
{
    // Up to 16 tokens (two n8 fragments) per expert, the weight bytes dominate: stream them
    // with the most parallelism (K split over 4 warps, all experts' items over all SMs).
    // Where the 16-warp wgmma kernel can take the step (sm 90 passed, n = inter % 256,
    // k = hidden % 512) it wins from ~12 tokens per expert. H200, GLM-5 layer, the two
    // kernels interleaved in one process (bench/RESULTS.md, issue 8, eleventh session): 192 /
    // 256 / 320 tokens (6 / 8 / 10 per expert) 1.65 / 1.71-1.73 / 1.85 ms streamed against
    // 1.79 / 1.80-1.85 / 1.95 on wgmma's 16-token tiles; 384 tokens (12) 1.99-2.06 against
    // 1.88-1.99. (The third session's kernels put the bound at 4: 256 tokens 2.06 against
    // 1.90; the stream kernel's loop has lost a quarter of its instructions since.)
    if (sm == 90 && n % 256 == 0 && k % 512 == 0) return tokens_per_expert <= 10.0;
    return tokens_per_expert <= 12.0;
}

extern "C" int nb_moe_should_use_wgmma(int tokens, int topk, int experts, int hidden, int inter, int sm)
{
    if (sm != 90 || tokens <= 0 || experts <= 0) return 0;
    // Its items are big (a 64-token tile x 256 weight rows x all of K) and K is not split:
    // only worth it with enough of them to keep 132 SMs busy through several waves; a single
    // dense expert below ~1000 tokens (bench-gemm, the shared expert) has too few.
    const double k = topk < experts ? topk : experts;
    const double touched = experts * (1.0 - pow(1.0 - k / experts, (double)tokens));
    const double per = (double)tokens * k / (touched > 0 ? touched : 1);
    const double tiles = touched * ceil(per / NB_MOE_WG_TILE);
    const double items = tiles * (inter / (16.0 * NB_MOE_WG_WARPS) + hidden / (32.0 * NB_MOE_WG_WARPS));
    return items >= 4.0 * 132;
}

// Warps that split K per row-tile pair of a phase with `pairs` pairs per expert (gate_up:
// inter/16, down: hidden/32): enough pair-tasks over the expected touched experts for ~16
// warps on each of 132 SMs without splitting, else split 2 or 4 ways. The down phase (K =
// inter, the shorter) splits only below ~8 warps' worth per SM, and gate_up splits 4 ways
// only below 4: at 1 token of a GLM-5 layer that is gate_up 2 / down 1 instead of 4 / 2,
// 4 % faster (H200, interleaved in one process, bench/RESULTS.md, issue 8, eleventh session:
// 0.0527 against 0.0550 ms; gate_up 2 alone 0.0535, down 1 alone 0.0541). From 2 tokens
// on nothing changes (2 tokens: 2 / 1, every other split within 1-2 %).
// A/B runs: NIBBLE_MOE_KSPLIT forces 1, 2 or 4 for both phases, NIBBLE_MOE_KSPLIT_GU and
// NIBBLE_MOE_KSPLIT_DN one phase each (they win over NIBBLE_MOE_KSPLIT).
static int moe_k_split(int tokens, int topk, int experts, int pairs, int down)
{
    const char *env = getenv(down ? "NIBBLE_MOE_KSPLIT_DN" : "NIBBLE_MOE_KSPLIT_GU");
    if (!env || !*env) env = getenv("NIBBLE_MOE_KSPLIT");
    if (env && (!strcmp(env, "1") || !strcmp(env, "2") || !strcmp(env, "4"))) return atoi(env);
    double touched = experts * (1.0 - pow(1.0 - (double)topk / experts, (double)tokens));
    double tasks = touched * pairs;
    return tasks >= 132 * (down ? 8 : 16) ? 1 : tasks >= 132 * 4 ? 2 : 4;
}

// The stream kernel's switches, read once from the environment (A/B runs of one binary):
//   NIBBLE_MOE_STREAM=v1  the first sessions' stream path: the routing kernel's shared-memory
//                         scans, no small-step kernel;
//   NIBBLE_MOE_SMALL=0|1  steps of at most MOE_SMALL_SLOTS slots on moe_ffn_small_kernel
//                         (default 1);
//   NIBBLE_MOE_NT=1|2     token fragments per warp (8- or 16-token tiles), whatever the step;
//   NIBBLE_MOE_STREAM_LOOP=0|1|2  the k-group loop (moe_item): 0 the loop before the seventh
//                         session, 1 load pointers advanced by constants, 2 that with two
//                         k-groups per trip and no zero rows (default NB_MOE_STREAM_LOOP_DEFAULT).
typedef struct {
    int nt, fast_route, small, loop;
} moe_stream_cfg;

static int moe_env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        NB_LOG_WARN("cuda", "moe: ignoring %s=%s (expected %d..%d)", name, v, lo, hi);
        return def;
    }
    return (int)x;
}

static moe_stream_cfg moe_cfg;
static int moe_cfg_init = 0;

extern "C" void nb_moe_stream_set(int small, int nt, int fast_route, int loop)
{
    if (small < 0) {
        moe_cfg_init = 0;
        return;
    }
    moe_cfg.small = small, moe_cfg.nt = nt, moe_cfg.fast_route = fast_route, moe_cfg.loop = loop;
    moe_cfg_init = 1;
}

static const moe_stream_cfg *moe_stream_config(void)
{
    moe_stream_cfg &c = moe_cfg;
    if (!moe_cfg_init) {
        const char *v = getenv("NIBBLE_MOE_STREAM");
        const int v1 = v && !strcmp(v, "v1");
        c.small = moe_env_int("NIBBLE_MOE_SMALL", v1 ? 0 : 1, 0, 1);
        c.nt = moe_env_int("NIBBLE_MOE_NT", 0, 0, 2);
        c.fast_route = !v1;
        c.loop = moe_env_int("NIBBLE_MOE_STREAM_LOOP", NB_MOE_STREAM_LOOP_DEFAULT, 0, 2);
        moe_cfg_init = 1;
        NB_LOG_DEBUG("cuda", "moe stream kernel: small-step kernel %d, NT %d, fast route %d, k-group loop %d", c.small,
                     c.nt, c.fast_route, c.loop);
    }
    return &c;
}

// Token fragments per warp: 1 in the stream kernel up to 6 tokens per expert, else 2 (H200,
// GLM-5 layer, interleaved: 192 tokens, 6 per expert, 1.63 ms at 8-token tiles against 1.74
// at 16; but 256 tokens, 8 per expert, 2.06 at 8-token tiles against 1.88 at 16;
// bench/RESULTS.md, issue 8, eleventh session); the
// mma kernel 4, or 8 (64-token tiles) from 48 tokens per expert; the wgmma kernel 64-token
// tiles (each multiplied at the narrowest width that covers it).
static int moe_nt(nb_moe_kernel k, double tokens_per_expert, int slots, int hidden, int inter)
{
    if (k == NB_MOE_KERNEL_WGMMA) return moe_wg_tile_tokens(tokens_per_expert, slots, hidden, inter) / 8;
    if (k == NB_MOE_KERNEL_MMA) return tokens_per_expert >= 48.0 ? 2 * NB_MOE_NT_MMA : NB_MOE_NT_MMA;
    if (moe_stream_config()->nt) return moe_stream_config()->nt;
    return tokens_per_expert <= 6.0 ? 1 : 2;
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
    } else if (env && !strcmp(env, "wgmma")) {
        k = NB_MOE_KERNEL_WGMMA, why = "NIBBLE_MOE_KERNEL";
    } else {
        double tpe = (double)tokens * topk / (experts > 0 ? experts : 1);
        const int wg = nb_moe_should_use_wgmma(tokens, topk, experts, hidden, inter, sm);
        if (nb_moe_should_use_stream(tpe, inter, hidden, wg ? sm : 0))
            k = NB_MOE_KERNEL_STREAM, why = "should_use_stream (<= 12 tokens per expert, <= 4 beside wgmma)";
        else if (wg)
            k = NB_MOE_KERNEL_WGMMA, why = "should_use_wgmma (sm_90, >= 4 waves of items)";
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

// Compute capability as 10 * major + minor (90 on H100/H200).
static int moe_sm_arch(void)
{
    static int arch = 0;
    if (!arch) {
        int dev = 0, major = 0, minor = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
            return 0;
        arch = 10 * major + minor;
    }
    return arch;
}

// The stream kernels' grid: every block that can be resident, or fewer where NIBBLE_MOE_BLOCKS
// caps it (A/B runs of the item balance; the small-step kernel needs only that all its blocks
// be resident, which fewer are).
static int moe_grid_blocks(int resident)
{
    const int cap = moe_env_int("NIBBLE_MOE_BLOCKS", 0, 0, 1 << 20);
    return cap > 0 && cap < resident ? cap : resident;
}

template <int NT, bool SMALL, int LOOP>
static void (*moe_kern(void))(moe_params)
{
    return SMALL ? moe_ffn_small_kernel<NT, LOOP> : moe_ffn_kernel<NT, LOOP>;
}

template <int NT, bool SMALL, int LOOP = NB_MOE_STREAM_LOOP_DEFAULT>
static nb_status moe_launch_ffn(const moe_params &p, cudaStream_t st)
{
    static int per_sm = 0, optin = 0;
    if (!optin) {
        int dev = 0;
        NB_CUDA_TRY(cudaGetDevice(&dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    const size_t dyn = MOE_STAGED(NT) ? (size_t)2 * 8 * NT * MOE_BROW : 0;
    const size_t smem = nb_moe_smem_bytes(NT, 1);
    if (smem != sizeof(moe_smem_probe<NT>) + dyn || smem > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: FFN kernel with %d token fragments needs %zu bytes of shared memory, the device allows "
                        "%d per block",
                        NT, smem, optin);
    if (!per_sm) {
        if (dyn)
            NB_CUDA_TRY(cudaFuncSetAttribute(moe_kern<NT, SMALL, LOOP>(), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_kern<NT, SMALL, LOOP>(), MOE_THREADS, dyn));
        if (per_sm < 1) return nb_error(NB_ERR_CUDA, "moe: FFN kernel<%d> cannot be resident", NT);
    }
    NB_CUDA_TRY(moe_launch_pdl(moe_kern<NT, SMALL, LOOP>(), (unsigned)moe_grid_blocks(moe_sm_count() * per_sm), MOE_THREADS, dyn, st, p));
    return NB_OK;
}

// The stream kernel (NT 1 or 2) with its k-group loop (NIBBLE_MOE_STREAM_LOOP).
template <int NT>
static nb_status moe_launch_stream(const moe_params &p, int small, int loop, cudaStream_t st)
{
    switch (loop) {
    case 0: return small ? moe_launch_ffn<NT, true, 0>(p, st) : moe_launch_ffn<NT, false, 0>(p, st);
    case 1: return small ? moe_launch_ffn<NT, true, 1>(p, st) : moe_launch_ffn<NT, false, 1>(p, st);
    default: return small ? moe_launch_ffn<NT, true, 2>(p, st) : moe_launch_ffn<NT, false, 2>(p, st);
    }
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
    size_t need = moe_ws_layout(w->experts, w->hidden, w->inter, d->tokens, d->tokens * topk, NULL, NULL);
    if (!d->workspace || d->workspace_bytes < need)
        return nb_error(NB_ERR_INVALID_ARG, "moe: workspace of %zu bytes, %zu needed for %d tokens",
                        d->workspace_bytes, need, d->tokens);
    return NB_OK;
}

static nb_status moe_forward_impl(const nb_moe_weights_dev *w, const nb_moe_desc *d, int topk, cudaStream_t st)
{
    NB_TRY(moe_check(w, d, topk));
    if (!d->tokens) return NB_OK;
    moe_ws ws;
    moe_ws_layout(w->experts, w->hidden, w->inter, d->tokens, d->tokens * topk, (char *)d->workspace, &ws);
    nb_moe_kernel k = d->kernel != NB_MOE_KERNEL_AUTO
                          ? d->kernel
                          : nb_moe_pick_kernel(d->tokens, topk, w->experts, w->hidden, w->inter, moe_sm_arch());
    const int nt = moe_nt(k, (double)d->tokens * topk / w->experts, d->tokens * topk, w->hidden, w->inter);
    const moe_stream_cfg *cfg = moe_stream_config();
    // A plain launch, never a programmatic (PDL) one: moe_ffn_small_kernel reads the ids before
    // its griddepcontrol.wait, relying on this kernel starting only once their producer is done.
    moe_route_kernel<<<1, 1024, 0, st>>>(d->ids, d->tokens * topk, w->experts, 8 * nt, ws, cfg->fast_route);
    NB_CUDA_TRY(cudaGetLastError());
    moe_params p;
    memset(&p, 0, sizeof p);
    p.w13 = w->w13, p.s13 = w->s13, p.w2 = w->w2, p.s2 = w->s2, p.g13 = w->g13, p.g2 = w->g2;
    p.hidden = w->hidden, p.inter = w->inter, p.topk = topk;
    p.x = d->x, p.act = ws.act, p.sorted = ws.sorted, p.tiles = ws.tiles, p.n_tiles = ws.n_tiles;
    p.route_w = d->weights, p.out = d->out, p.work = ws.work, p.done = ws.done;
    p.zero_elems = d->accumulate ? 0 : (size_t)d->tokens * w->hidden;
    p.ks_gu = moe_k_split(d->tokens, topk, w->experts, w->inter / 16, 0);
    p.ks_dn = moe_k_split(d->tokens, topk, w->experts, w->hidden / 32, 1);
    if (nt >= NB_MOE_NT_MMA) p.ks_gu = p.ks_dn = 1;  // the mma kernel stages tokens per block
    int small = 0;                                    // moe_ffn_small_kernel
    if (k == NB_MOE_KERNEL_STREAM && d->tokens * topk <= MOE_SMALL_SLOTS && cfg->small) {
        small = 1;
        p.ids = d->ids, p.slots = d->tokens * topk, p.experts = w->experts, p.tile = 8 * nt;
    }
    NB_LOG_DEBUG("cuda", "moe: %s kernel%s, %d-token tiles, K split gate_up %d / down %d", nb_moe_kernel_name(k),
                 small ? " (small-step)" : "", 8 * nt, p.ks_gu, p.ks_dn);
    if (k == NB_MOE_KERNEL_WGMMA) {
        p.xp = ws.xp, p.xpw = ws.xp, p.tokens = d->tokens;
        return moe_launch_wg(p, 8 * nt, (double)d->tokens * topk / w->experts, moe_sm_count(), st);
    }
    switch (nt) {
    case 1: return moe_launch_stream<1>(p, small, cfg->loop, st);
    case 2: return moe_launch_stream<2>(p, small, cfg->loop, st);
    case NB_MOE_NT_MMA: return moe_launch_ffn<NB_MOE_NT_MMA, false>(p, st);
    default: return moe_launch_ffn<2 * NB_MOE_NT_MMA, false>(p, st);
    }
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

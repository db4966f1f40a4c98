// Device helpers of the stream and mma MoE kernels (moe_ffn.cu: moe_ffn_kernel,
// moe_ffn_small_kernel; bench/lab/moe-warp.patch's moe_ffn_warp_kernel too): the m16n8k16
// multiply of one k-group of two 16-row weight tiles against NT token fragments, the token
// fragment loads, the mma regime's token staging, and the small-step kernel's own routing.
// Include from .cu files only.
// Exercised by tests/cuda_moe/test_moe.c (kernels "stream" and "mma", moe_stream_variants).
#ifndef NB_OPS_CUDA_MOE_STREAM_CUH
#define NB_OPS_CUDA_MOE_STREAM_CUH

#include <stdint.h>

#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"

__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 64-wide k-tile of one warp: expand the codes of two 16-row tiles (gate and up rows,
// or two down tiles) and multiply with NT token fragments whose 16 BF16 per lane are in
// b[NT][8] words.
template <int NT>
__device__ __forceinline__ void moe_ktile(const uint4 &wa, const uint4 &wb, uint32_t sca, uint32_t scb,
                                          const uint32_t (*b)[8], float (*acca)[4], float (*accb)[4])
{
    uint32_t sa, sa8, sb, sb8;
    expand_scales(sca, sa, sa8);
    expand_scales(scb, sb, sb8);
    const uint32_t wwa[4] = {wa.x, wa.y, wa.z, wa.w};
    const uint32_t wwb[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t a[4];
        expand_codes(wwa[s], sa, sa8, a);
#pragma unroll
        for (int j = 0; j < NT; j++) mma_bf16(acca[j], a[0], a[1], a[2], a[3], b[j][2 * s], b[j][2 * s + 1]);
        expand_codes(wwb[s], sb, sb8, a);
#pragma unroll
        for (int j = 0; j < NT; j++) mma_bf16(accb[j], a[0], a[1], a[2], a[3], b[j][2 * s], b[j][2 * s + 1]);
    }
}

// The kernel's shared array, named so the launcher can compare it with nb_moe_smem_bytes.
template <int NT>
struct moe_smem_probe {
    float red[MOE_WARPS][2][NT][4][32];
};

// The activations, written by this same kernel (gate_up items), read by the down items
// through L1 (.ca): a block's 4 warps multiply the same token tile at the same k-groups, so
// three of them find the rows there. Safe because a down item reads its tile's act only after
// the acquire of the tile's counter (moe_wait_geq), which invalidates the SM's L1 (an acquire
// load is LDG.STRONG.GPU + CCTL.IVALL; a line left from an earlier launch goes with it too),
// and no act row of a tile is written after its counter is complete. Through L2 only (.cg,
// before the thirteenth session) the 256-token layer kept the L2 83 % busy and ran 7-8 %
// longer at 256-320 tokens (H200, bench/RESULTS.md, issue 8, thirteenth session).
__device__ __forceinline__ uint4 ld_act(const uint16_t *p)
{
    uint4 v;
    asm volatile("ld.global.ca.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Token staging for the mma regime (ks == 1: the block's 4 warps share tokens and K range):
// per k-group, the tile's [8*NT tokens][256 k] BF16 lands in shared memory once (cp.async,
// one k-group ahead, double-buffered) instead of each warp reading it from L2. Rows are
// padded to MOE_BROW bytes so that the fragment reads (16 bytes at row*528 + 32*t) of a
// quarter-warp hit distinct banks.
#define MOE_BROW NB_MOE_B_ROW_BYTES
#define MOE_STAGED(nt) ((nt) >= NB_MOE_NT_MMA)

// All threads of the block: token rows of k-group kg into buf (rows past the tile: zeros).
template <int NT>
__device__ __forceinline__ void moe_stage_tokens(char *buf, const uint16_t *base, const long long *row, int kg)
{
#pragma unroll
    for (int m = 0; m < 8 * NT * 32 / MOE_THREADS; m++) {
        const int c = threadIdx.x + m * MOE_THREADS, r = c >> 5, col = c & 31;
        const long long off = row[r];
        cp_async16(buf + r * MOE_BROW + col * 16, base + (off < 0 ? 0 : off) + kg * 256 + col * 8, off >= 0);
    }
    cp_async_commit();
}
// PAD: no row is NULL (lanes past the tile read a real row, whose products land only in
// output columns the epilogue never stores), so no zeroing and no predicated loads.
template <int NT, bool DN, bool PAD = false>
__device__ __forceinline__ void moe_load_b(const uint16_t *const *brow, int q, uint32_t (*b)[8])
{
#pragma unroll
    for (int j = 0; j < NT; j++) {
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (PAD || brow[j]) {
            if (DN) {
                lo = ld_act(brow[j] + q * 64);
                hi = ld_act(brow[j] + q * 64 + 8);
            } else {
                lo = __ldg((const uint4 *)(brow[j] + q * 64));
                hi = __ldg((const uint4 *)(brow[j] + q * 64 + 8));
            }
        }
        b[j][0] = lo.x, b[j][1] = lo.y, b[j][2] = lo.z, b[j][3] = lo.w;
        b[j][4] = hi.x, b[j][5] = hi.y, b[j][6] = hi.z, b[j][7] = hi.w;
    }
}

// bsm: the block's staged tokens of this k-group (rows of MOE_BROW bytes), or NULL to load
// this lane's fragments from global memory.
template <int NT, bool SMEM, bool PAD = false>
__device__ __forceinline__ void moe_group(const uint4 (&wa)[4], const uint4 (&wb)[4], uint2 sa, uint2 sb,
                                          const uint16_t *const *brow, const char *bsm, bool dn, int kg,
                                          float (*acca)[4], float (*accb)[4])
{
#pragma unroll
    for (int qq = 0; qq < 4; qq++) {
        uint32_t b[NT][8];
        if (SMEM) {
            // Half a k-tile (two k-steps) of tokens at a time: 4 registers per fragment.
            const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
            uint32_t sga, sga8, sgb, sgb8;
            expand_scales((qq < 2 ? sa.x : sa.y) >> ((qq & 1) * 16), sga, sga8);
            expand_scales((qq < 2 ? sb.x : sb.y) >> ((qq & 1) * 16), sgb, sgb8);
            const uint32_t wwa[4] = {wa[qq].x, wa[qq].y, wa[qq].z, wa[qq].w};
            const uint32_t wwb[4] = {wb[qq].x, wb[qq].y, wb[qq].z, wb[qq].w};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t bh[NT][4];
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint4 v = *(const uint4 *)(bsm + (j * 8 + g) * MOE_BROW + qq * 128 + t * 32 + h * 16);
                    bh[j][0] = v.x, bh[j][1] = v.y, bh[j][2] = v.z, bh[j][3] = v.w;
                }
#pragma unroll
                for (int s2 = 0; s2 < 2; s2++) {
                    uint32_t a[4];
                    expand_codes(wwa[2 * h + s2], sga, sga8, a);
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma_bf16(acca[j], a[0], a[1], a[2], a[3], bh[j][2 * s2], bh[j][2 * s2 + 1]);
                    expand_codes(wwb[2 * h + s2], sgb, sgb8, a);
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma_bf16(accb[j], a[0], a[1], a[2], a[3], bh[j][2 * s2], bh[j][2 * s2 + 1]);
                }
            }
            continue;
        } else if (dn) {
            moe_load_b<NT, true, PAD>(brow, kg * 4 + qq, b);
        } else {
            moe_load_b<NT, false, PAD>(brow, kg * 4 + qq, b);
        }
        uint32_t s2a = (qq < 2 ? sa.x : sa.y) >> ((qq & 1) * 16);
        uint32_t s2b = (qq < 2 ? sb.x : sb.y) >> ((qq & 1) * 16);
        moe_ktile<NT>(wa[qq], wb[qq], s2a, s2b, b, acca, accb);
    }
}


// The small-step kernels' routing (steps of at most MOE_SMALL_SLOTS slots), done by every block
// into shared memory so that the FFN does not wait for moe_route_kernel's work list: the tiles
// in the order moe_route_kernel cuts them (experts ascending, an expert's slots by slot id:
// deterministic, so all blocks agree on every act row). All threads of the block call it; it
// ends with a barrier. Returns the number of tiles.
struct moe_small_route_smem {
    int e[MOE_SMALL_SLOTS], sorted[MOE_SMALL_SLOTS], nt[MOE_SMALL_SLOTS], ntiles;
    int4 tiles[MOE_SMALL_SLOTS];
};

__device__ __forceinline__ int moe_small_route(const moe_params &p, moe_small_route_smem &s)
{
    const int tid = threadIdx.x;
    if (tid < MOE_SMALL_SLOTS) {
        int e = -1;
        if (tid < p.slots) e = p.ids ? p.ids[tid] : 0;
        s.e[tid] = e >= 0 && e < p.experts ? e : -1;
    }
    __syncthreads();
    int e = -1, cnt = 0, below = 0;
    if (tid < MOE_SMALL_SLOTS) {
        e = s.e[tid];
        int rank = 0;
        for (int j = 0; j < p.slots; j++) {
            const int ej = s.e[j];
            cnt += ej == e;
            rank += ej == e && j < tid;
            below += ej >= 0 && ej < e;
        }
        if (e >= 0) s.sorted[below + rank] = tid;
        s.nt[tid] = e >= 0 && rank == 0 ? (cnt + p.tile - 1) / p.tile : 0;
    }
    __syncthreads();
    if (tid < MOE_SMALL_SLOTS && s.nt[tid] > 0) {
        int tfirst = 0;
        for (int j = 0; j < p.slots; j++) tfirst += s.e[j] >= 0 && s.e[j] < e ? s.nt[j] : 0;
        const int nt = s.nt[tid];
        for (int jj = 0; jj < nt; jj++)
            s.tiles[tfirst + jj] = make_int4(e, below + jj * p.tile, min(p.tile, cnt - jj * p.tile), jj | (nt << 16));
    }
    if (tid == 0) {
        int n = 0;
        for (int j = 0; j < p.slots; j++) n += s.nt[j];
        s.ntiles = n;
    }
    __syncthreads();
    return s.ntiles;
}

#endif

// Device helpers, workspace and parameter block shared by the NVFP4 MoE kernels
// (moe_ffn.cu: routing, stream and mma kernels, launcher; moe_wgmma.cu: the wgmma kernel).
// Internal to src/ops/cuda: include from .cu files only (device code). Exercised through
// nb_moe_forward by tests/cuda_moe/test_moe.c.
#ifndef NB_OPS_CUDA_MOE_DEV_H
#define NB_OPS_CUDA_MOE_DEV_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "nibble.h"
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

// D += A B for one m16n8k16 BF16 fragment (F32 accumulate).
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

__device__ __forceinline__ uint16_t f32_to_bf16_rn(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ---- workspace -----------------------------------------------------------------------------

struct moe_ws {
    int *n_tiles;    // [1]
    int *work;       // [2] next item to take; zeroing (and permuting) items finished
    int *offsets;    // [E + 1] first sorted position of each expert
    int *sorted;     // [T*k] slot ids (t*k + j) in expert order
    int4 *tiles;     // [max_tiles] (expert, first sorted position, count, 0)
    int *done;       // [max_tiles] gate_up items finished per tile
    uint16_t *act;   // [T*k, inter] BF16, in expert order
    uint16_t *xp;    // [T, hidden] BF16: x with K in wgmma order (the wgmma kernel only)
};


// Programmatic dependent launch (sm_90+): let the next kernel in the stream start its
// launch now / wait here until the previous kernel has finished and its writes are visible.
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }


struct moe_params {
    const uint8_t *w13, *s13, *w2, *s2;  // repacked matrices of all experts
    const float *g13, *g2;               // weight_scale_2: gate/up [E][2], down [E]
    int hidden, inter, topk;
    const uint16_t *x;                   // [T, hidden]
    uint16_t *act;                       // [slots, inter] in expert order
    const int *sorted;
    const int4 *tiles;
    const int *n_tiles;
    const float *route_w;                // [T*k] or NULL
    float *out;                          // [T, hidden]
    size_t zero_elems;                   // floats of out to zero first (0: accumulate)
    int *work, *done;
    int ks_gu, ks_dn;                    // warps splitting K per row-tile pair: 1, 2 or 4
    const uint16_t *xp;                  // wgmma kernel: x in wgmma K order, written by its own items
    uint16_t *xpw;
    int tokens;
    // moe_ffn_small_kernel only (steps of at most MOE_SMALL_SLOTS slots; zero elsewhere): the
    // ids it routes itself, their number, the experts and the tokens per tile.
    int slots, experts, tile;
    const int32_t *ids;
    // moe_wgpc.cu lab switch (NIBBLE_MOE_WG_PC_LAB, timing only, wrong results; 0 elsewhere):
    // bit 0: the producer moves no codes/scales, bit 1: no token rows.
    int pc_lab;
    // moe_slice.cu lab switch (NIBBLE_MOE_SLICE_LAB, timing only, wrong results; 0 elsewhere):
    // bit 0: no atomics into out, bit 1: no expansion or multiply (the loads only).
    int slice_lab;
};
#define MOE_SMALL_SLOTS 64

// The routing of a step of at most MOE_SMALL_SLOTS slots, done by every block of a small-step
// kernel into shared memory (no routing kernel to wait for): slots in expert order, experts
// ascending and an expert's slots by slot id (deterministic, so every block agrees), cut into
// tiles of `tile` slots as moe_route_kernel cuts them. ids == NULL: dense mode (expert 0).
struct moe_small_route {
    int e[MOE_SMALL_SLOTS];       // the slot's expert, -1 when skipped
    int sorted[MOE_SMALL_SLOTS];  // slot ids in expert order
    int nt[MOE_SMALL_SLOTS];      // tiles of the slot's expert, on its first slot only
    int4 tiles[MOE_SMALL_SLOTS];  // (expert, first sorted position, count, index | tiles << 16)
    int ntiles;
};

// All threads of the block (at least MOE_SMALL_SLOTS); ends with a barrier.
__device__ __forceinline__ void moe_route_small(const int32_t *ids, int slots, int experts, int tile,
                                                moe_small_route &r)
{
    const int tid = threadIdx.x;
    if (tid < MOE_SMALL_SLOTS) {
        int e = -1;
        if (tid < slots) e = ids ? ids[tid] : 0;
        r.e[tid] = e >= 0 && e < experts ? e : -1;
    }
    __syncthreads();
    int e = -1, cnt = 0, below = 0;
    if (tid < MOE_SMALL_SLOTS) {
        e = r.e[tid];
        int rank = 0;
        for (int j = 0; j < slots; j++) {
            const int ej = r.e[j];
            cnt += ej == e;
            rank += ej == e && j < tid;
            below += ej >= 0 && ej < e;
        }
        if (e >= 0) r.sorted[below + rank] = tid;
        r.nt[tid] = e >= 0 && rank == 0 ? (cnt + tile - 1) / tile : 0;
    }
    __syncthreads();
    if (tid < MOE_SMALL_SLOTS && r.nt[tid] > 0) {
        int tfirst = 0;
        for (int j = 0; j < slots; j++) tfirst += r.e[j] >= 0 && r.e[j] < e ? r.nt[j] : 0;
        const int nt = r.nt[tid];
        for (int jj = 0; jj < nt; jj++)
            r.tiles[tfirst + jj] = make_int4(e, below + jj * tile, min(tile, cnt - jj * tile), jj | (nt << 16));
    }
    if (tid == 0) {
        int n = 0;
        for (int j = 0; j < slots; j++) n += r.nt[j];
        r.ntiles = n;
    }
    __syncthreads();
}

// Floats of `out` one zeroing item clears (8 float4 per thread).
#define MOE_ZERO_CHUNK (MOE_THREADS * 4 * 8)


__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Weight codes and scales of k-group kg of both row tiles into registers (this lane's
// 2 x 64 + 2 x 8 bytes).
__device__ __forceinline__ void moe_load_group(const uint8_t *wap, const uint8_t *wbp, const uint8_t *sap,
                                               const uint8_t *sbp, int kg, uint4 (&wa)[4], uint4 (&wb)[4], uint2 &sa,
                                               uint2 &sb)
{
#pragma unroll
    for (int qq = 0; qq < 4; qq++) {
        wa[qq] = ld_stream(wap + (size_t)(kg * 4 + qq) * 512);
        wb[qq] = ld_stream(wbp + (size_t)(kg * 4 + qq) * 512);
    }
    sa = ld_stream2(sap + (size_t)kg * 256);
    sb = ld_stream2(sbp + (size_t)kg * 256);
}


__device__ __forceinline__ int ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// After a __syncthreads: publishes the block's writes (cumulative release at GPU scope).
__device__ __forceinline__ void add_release(int *p, int v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}


// The wgmma kernel's launcher (moe_wgmma.cu): token tiles of up to nmax (NB_MOE_WG_TILE) tokens.
nb_status moe_launch_wg(const moe_params &p, int nmax, int sms, cudaStream_t st);
// Its dynamic shared memory for tiles of up to nmax tokens (nb_moe_wg_smem_bytes + alignment).
size_t moe_wg_dyn_smem(int nmax, int a_smem);
// The producer/consumer variant (moe_wgpc.cu; moe_launch_wg calls it under NIBBLE_MOE_WG=pc):
// tiles of nw = 16, 32 or 48 tokens, 16 consumer warps + 1 producer warp per block; refuses
// shapes where moe_wgpc_fits is 0 (inter % 256, hidden % 512).
nb_status moe_launch_wgpc(const moe_params &p, int nw, int sms, cudaStream_t st);
int moe_wgpc_fits(int hidden, int inter);

// The slice kernel (moe_slice.cu) for steps of at most 8 tokens with ids: whether it takes
// the step (NIBBLE_MOE_SLICE / nb_moe_slice_set, and enough items to cover `sms` SMs), and
// its launch (a one-block kernel zeroing out, then the slice kernel; p.ids, p.slots,
// p.experts and p.tokens set).
int moe_slice_wanted(int tokens, int topk, int experts, int inter, int has_ids, int sms);
nb_status moe_launch_slice(const moe_params &p, int sms, cudaStream_t st);

#endif

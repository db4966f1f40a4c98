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
    uint32_t r1 = (w << 4) & 0x81C081C0u;
    uint32_t r2 = __funnelshift_l(w, w, 10) & 0x81C081C0u;
    uint32_t r3 = ((w << 6) & 0x80C080C0u) | (__funnelshift_l(w, w, 14) & 0x01000100u);
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
};
#define MOE_SMALL_SLOTS 64

// Floats of `out` one zeroing item clears (8 float4 per thread).
#define MOE_ZERO_CHUNK (MOE_THREADS * 4 * 8)


// 16 bytes global -> shared (address in the shared window) by cp.async, of which `bytes` (16 or
// 0) are read and the rest zero-filled; cp_async16_s: all 16, no fill.
__device__ __forceinline__ void cp_async16_sz(uint32_t s, const void *gmem, uint32_t bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16_s(uint32_t s, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    cp_async16_sz((uint32_t)__cvta_generic_to_shared(smem), gmem, valid ? 16u : 0u);
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

__device__ __forceinline__ int ld_relaxed(const int *p)
{
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Spins until the counter *p reaches v: relaxed polls, then one acquire load. An acquire load
// is LDG.STRONG.GPU + CCTL.IVALL in SASS (nvcc 13.0, sm_90a): it drops the SM's whole L1,
// where the other blocks' warps on that SM keep the token rows they read (x by __ldg), so a
// block polling by acquire loads invalidates its neighbours' L1 at every poll. Counters only
// grow, so the acquire reads a value >= v. (Measured even against acquire polls at 1-64
// tokens on an H200, twelfth session; kept for the neighbours' sake.) The stream kernels
// (moe_ffn.cu) wait this way; the wgmma kernels' waits still poll by acquire (not measured
// with this).
__device__ __forceinline__ void moe_wait_geq(const int *p, int v)
{
    while (ld_relaxed(p) < v) __nanosleep(64);
    (void)ld_acquire(p);
}

// After a __syncthreads: publishes the block's writes (cumulative release at GPU scope).
__device__ __forceinline__ void add_release(int *p, int v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}


// Launches a MoE kernel with programmatic stream serialization (PDL): its blocks may start
// while the kernel before it in the stream runs; they wait (griddepcontrol.wait) where they
// need its results.
static inline cudaError_t moe_launch_pdl(void (*k)(moe_params), unsigned grid, unsigned block, size_t smem,
                                         cudaStream_t st, const moe_params &p)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, p);
}

// The wgmma kernel's launcher (moe_wgmma.cu): token tiles of up to nmax (NB_MOE_WG_TILE) tokens;
// tokens_per_expert, the step's slots over all experts, picks the wide form's middle width.
nb_status moe_launch_wg(const moe_params &p, int nmax, double tokens_per_expert, int sms, cudaStream_t st);
// Its dynamic shared memory for tiles of up to nmax tokens (nb_moe_wg_smem_bytes + alignment).
size_t moe_wg_dyn_smem(int nmax, int a_smem);
// The producer/consumer variant (moe_wgpc.cu; moe_launch_wg calls it under NIBBLE_MOE_WG=pc):
// tiles of nw = 16, 32 or 48 tokens, 16 consumer warps + 1 producer warp per block; refuses
// shapes where moe_wgpc_fits is 0 (inter % 256, hidden % 512).
nb_status moe_launch_wgpc(const moe_params &p, int nw, int sms, cudaStream_t st);
int moe_wgpc_fits(int hidden, int inter);

#endif

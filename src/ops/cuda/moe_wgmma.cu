// The wgmma regime of the NVFP4 MoE FFN (ops/cuda/moe.h): many tokens per expert, sm_90a.
//
// Same persistent item loop as moe_ffn.cu's kernels (one block = one warpgroup of 4 warps,
// items taken in order from one counter, down items waiting on their tile's gate_up items),
// with the multiply done by Hopper's asynchronous warpgroup MMA:
//   A (weights, 64 rows per instruction = 16 per warp): expanded from NVFP4 in registers
//     with the same repacked layout and expand_codes as the mma.sync kernels, once per
//     token tile; wgmma reads A fragments from registers in mma.sync's m16n8k16 order.
//   B (the token tile, N = 16..64 tokens): BF16 in shared memory, 128-byte swizzled
//     K-major, staged by cp.async in a 3-deep ring of 128-wide k-slices.
//   D: F32 in registers; N is picked per tile (the narrowest multiple of 16 that covers
//     the tile), so a 70-token expert costs an n64 and an n16 instruction, not 2 x n64. An
//     expert's tiles run side by side (items ordered row block, then tile), so the weights
//     of a many-token expert come from HBM about once and from L2 for the other tiles.
// The repacked layout permutes K inside each 64-wide k-tile (lane t of k-step s holds
// k = 16t + 4s + 0..3), so B must be stored in the same order: "wgmma order", where element
// 16s + 8h + 2u + j of a k-tile holds real k 16u + 4s + 2h + j. x is rewritten in that order
// by the kernel's own first items (into the workspace), and the gate_up epilogue writes the
// SiLU(gate)*up intermediate in it directly, so both GEMMs stage B with plain 16-byte copies.
// Tests: tests/cuda_moe/test_moe.c (kernel "wgmma"); timing: nibble bench-moe --kernel wgmma.
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"
#include "ops/cuda/moe_wgmma_ops.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WG_ARCH 1  // this device pass can issue wgmma
#else
#define MOE_WG_ARCH 0
#endif

#define MOE_WG_STAGES NB_MOE_WG_STAGES
#define MOE_WG_SLICE 128                                  // k per ring stage (two k-tiles)
#define MOE_WG_PERM_KTILES (MOE_THREADS * 4)              // 64-wide k-tiles of x one permuting item rewrites

// ---- wgmma plumbing ------------------------------------------------------------------------

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins an accumulator in program order relative to the asm around it (reads after a wait
// must not be hoisted above it).
__device__ __forceinline__ void wg_pin(float &r) { asm volatile("" : "+f"(r)::"memory"); }
// cp.async writes reach the tensor cores' (async proxy) view of shared memory only after this.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Shared-memory matrix descriptor of a K-major BF16 operand in the 128-byte swizzle: rows of
// 64 elements (128 bytes), 8-row atoms of 1024 bytes (stride byte offset), atoms 1024-aligned;
// the k-step s of a k-tile starts 32*s bytes into the row (the hardware applies the swizzle
// to the full address). Leading byte offset unused for swizzled K-major (set to 1).
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

// Position of real k (0..63 inside a k-tile) in wgmma order.
__device__ __forceinline__ int wg_pos64(int x)
{
    return ((x >> 2) & 3) * 16 + ((x >> 1) & 1) * 8 + (x >> 4) * 2 + (x & 1);
}

// ---- items ---------------------------------------------------------------------------------

// Rewrites MOE_WG_PERM_KTILES k-tiles of x (from k-tile `first` on) in wgmma order into xp:
// word 8u + 2s + h of a k-tile (real k 16u + 4s + 2h, +1) goes to word 8s + 4h + u.
__device__ __forceinline__ void moe_wg_permute(const moe_params &p, long long first, long long n_ktiles)
{
    for (int m = 0; m < 4; m++) {
        const long long kt = first + threadIdx.x + (long long)m * MOE_THREADS;
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

// All 128 threads: the token rows of k-slice `sl` (k-tiles 2sl, 2sl+1, wgmma order in global
// memory) into ring stage `buf`: per k-tile N rows of 128 bytes, 16-byte chunk c of row r at
// chunk c ^ (r % 8) (the 128-byte swizzle). Rows past the tile (row[r] < 0) are zeros.
template <int N>
__device__ __forceinline__ void moe_wg_stage(char *buf, const uint16_t *base, const long long *row, int sl)
{
#pragma unroll
    for (int m = 0; m < N * 16 / MOE_THREADS; m++) {
        const int c = threadIdx.x + m * MOE_THREADS, r = c >> 4, q = (c >> 3) & 1, ch = c & 7;
        const long long off = row[r];
        char *dst = buf + q * (N * 128) + (r >> 3) * 1024 + (r & 7) * 128 + ((ch ^ (r & 7)) << 4);
        cp_async16(dst, base + (off < 0 ? 0 : off) + (2 * sl + q) * 64 + ch * 8, off >= 0);
    }
    cp_async_commit();
}

// This lane's codes of k-slice sl (k-tiles 2sl, 2sl+1) of both row tiles.
__device__ __forceinline__ void moe_load_slice(const uint8_t *wap, const uint8_t *wbp, int sl, uint4 (&wa)[2],
                                               uint4 (&wb)[2])
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        wa[q] = ld_stream(wap + (size_t)(2 * sl + q) * 512);
        wb[q] = ld_stream(wbp + (size_t)(2 * sl + q) * 512);
    }
}

// One item on a tile of cnt <= N tokens: 4 pairs of 16-row tiles (one per warp, as the mma
// kernels with ks = 1) times the whole K.
//   DN == false: gate_up, pair (r, r + inter/16) of W13, r = 4 rb + warp; writes act.
//   DN == true:  down, pair (2r, 2r+1) of W2; adds into out.
template <int N, bool DN>
__device__ __forceinline__ void moe_wg_item(const moe_params &p, char *ring, const long long *row, int e,
                                            int start, int cnt, int rb)
{
#if MOE_WG_ARCH
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int pair = rb * MOE_WARPS + warp;
    const int n = DN ? p.hidden : 2 * p.inter, K = DN ? p.inter : p.hidden;
    const int ktiles = K / 64, kgroups = K / 256, slices = K / MOE_WG_SLICE;
    const int nta = DN ? 2 * pair : pair, ntb = DN ? 2 * pair + 1 : pair + p.inter / 16;
    const uint8_t *wbase = (DN ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
    const uint8_t *sbase = (DN ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
    const uint8_t *wap = wbase + ((size_t)nta * ktiles * 32 + lane) * 16;
    const uint8_t *wbp = wbase + ((size_t)ntb * ktiles * 32 + lane) * 16;
    const uint8_t *sap = sbase + ((size_t)nta * kgroups * 32 + lane) * 8;
    const uint8_t *sbp = sbase + ((size_t)ntb * kgroups * 32 + lane) * 8;
    const uint16_t *bbase = DN ? p.act : p.xp;
    const int stage_bytes = 2 * N * 128;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    float da[N / 2], db[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) da[i] = db[i] = 0.0f;

    moe_wg_stage<N>(ring, bbase, row, 0);
    if (slices > 1)
        moe_wg_stage<N>(ring + stage_bytes, bbase, row, 1);
    else
        cp_async_commit();
    // Weight codes one k-slice ahead in registers (this lane's 2 x 32 bytes), scales one
    // k-group ahead (2 x 8 bytes): the accumulators leave no room for more.
    uint4 ca[2], cb[2], na[2], nb[2];
    uint2 csa, csb, nsa = make_uint2(0, 0), nsb = nsa;
    moe_load_slice(wap, wbp, 0, ca, cb);
    csa = ld_stream2(sap), csb = ld_stream2(sbp);
    for (int kg = 0; kg < kgroups; kg++) {
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int sl = 2 * kg + h2;
            if (h2 == 0) {
                moe_load_slice(wap, wbp, sl + 1, na, nb);
            } else if (kg + 1 < kgroups) {
                moe_load_slice(wap, wbp, sl + 1, na, nb);
                nsa = ld_stream2(sap + (size_t)(kg + 1) * 256), nsb = ld_stream2(sbp + (size_t)(kg + 1) * 256);
            }
            // Slice sl has landed (one later group may still be in flight); every warp's
            // wgmmas on the stage about to be refilled (slice sl - 1) are complete.
            cp_async_wait<1>();
            fence_proxy_async();
            wg_wait<0>();
            __syncthreads();
            if (sl + 2 < slices)
                moe_wg_stage<N>(ring + ((sl + 2) % MOE_WG_STAGES) * stage_bytes, bbase, row, sl + 2);
            else
                cp_async_commit();  // an empty group keeps wait_group's count uniform
            const uint32_t sbuf = ring_s + (uint32_t)((sl % MOE_WG_STAGES) * stage_bytes);
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const int qq = 2 * h2 + q;
                uint32_t sa, sa8, sb, sb8;
                expand_scales((qq < 2 ? csa.x : csa.y) >> ((qq & 1) * 16), sa, sa8);
                expand_scales((qq < 2 ? csb.x : csb.y) >> ((qq & 1) * 16), sb, sb8);
                const uint32_t wwa[4] = {ca[q].x, ca[q].y, ca[q].z, ca[q].w};
                const uint32_t wwb[4] = {cb[q].x, cb[q].y, cb[q].z, cb[q].w};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    uint32_t a[4], b[4];
                    expand_codes(wwa[s], sa, sa8, a);
                    expand_codes(wwb[s], sb, sb8, b);
                    const uint64_t desc = wg_desc(sbuf + (uint32_t)(q * N * 128 + s * 32));
                    wg_fence();
                    moe_wg_mma<N>::run(da, a[0], a[1], a[2], a[3], desc);
                    moe_wg_mma<N>::run(db, b[0], b[1], b[2], b[3], desc);
                    wg_commit();
                    wg_wait<1>();
                }
            }
            ca[0] = na[0], ca[1] = na[1], cb[0] = nb[0], cb[1] = nb[1];
        }
        csa = nsa, csb = nsb;
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < N / 2; i++) wg_pin(da[i]), wg_pin(db[i]);

    // D fragment of warp w: n8 block j, i = 0..3 -> row g + 8 (i >> 1), token 8j + 2t + (i & 1)
    // (mma.sync's C layout per n8 block), rows of this warp's own 16-row tiles.
    if (!DN) {
        const float fg = MOE_ACC_FIX * p.g13[2 * e], fu = MOE_ACC_FIX * p.g13[2 * e + 1];
#pragma unroll
        for (int j = 0; j < N / 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = j * 8 + 2 * t + (i & 1), r = pair * 16 + g + (i >> 1) * 8;
                if (col < cnt) {
                    const float gv = da[4 * j + i] * fg, uv = db[4 * j + i] * fu;
                    const float a = gv / (1.0f + __expf(-gv)) * uv;
                    p.act[(size_t)(start + col) * p.inter + (r & ~63) + wg_pos64(r & 63)] = f32_to_bf16_rn(a);
                }
            }
    } else {
        const float f = MOE_ACC_FIX * p.g2[e];
#pragma unroll
        for (int j = 0; j < N / 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = j * 8 + 2 * t + (i & 1), r = 2 * pair * 16 + g + (i >> 1) * 8;
                if (col < cnt) {
                    const int slot = p.sorted[start + col];
                    const float rw = (p.route_w ? p.route_w[slot] : 1.0f) * f;
                    float *o = p.out + (size_t)(slot / p.topk) * p.hidden + r;
                    atomicAdd(o, da[4 * j + i] * rw);
                    atomicAdd(o + 16, db[4 * j + i] * rw);
                }
            }
    }
    __syncthreads();  // the ring and row[] are reused by the next item
#else
    __trap();  // launched only on sm_90 devices of an sm_90a build (moe_launch_wg)
#endif
}

template <bool DN>
__device__ __forceinline__ void moe_wg_dispatch(const moe_params &p, char *ring, const long long *row, int4 tl,
                                                int rb)
{
    // The narrowest instruction that covers the tile (tiles hold 1..64 tokens).
    switch ((tl.z + 15) >> 4) {
    case 1: moe_wg_item<16, DN>(p, ring, row, tl.x, tl.y, tl.z, rb); break;
    case 2: moe_wg_item<32, DN>(p, ring, row, tl.x, tl.y, tl.z, rb); break;
    case 3: moe_wg_item<48, DN>(p, ring, row, tl.x, tl.y, tl.z, rb); break;
    default: moe_wg_item<64, DN>(p, ring, row, tl.x, tl.y, tl.z, rb); break;
    }
}

// Persistent, dynamically scheduled, items in this order:
//   [zeroing chunks of out] [permuting chunks of x -> xp] [gate_up items, tile-major]
//   [down items, tile-major]
// gate_up items wait for all zeroing and permuting items; a down item of tile i also for
// tile i's gate_up items. The deadlock argument of moe_ffn_kernel holds unchanged (items
// are taken in order; a block holds its current item and one later one).
template <int NMAX>
__global__ void __launch_bounds__(MOE_THREADS, 2) moe_wg_kernel(moe_params p)
{
    extern __shared__ uint4 moe_wg_smem[];
    __shared__ int s_item[2];
    __shared__ long long s_row[NMAX];
    // The swizzle atoms must be 1024-aligned in the shared window.
    char *ring = (char *)moe_wg_smem;
    ring += (1024 - ((uint32_t)__cvta_generic_to_shared(ring) & 1023)) & 1023;
    griddep_wait();
    const int n_tiles = *p.n_tiles;
    const int rb_gu = p.inter / 16 / MOE_WARPS, rb_dn = p.hidden / 32 / MOE_WARPS;
    const long long n_ktiles = (long long)p.tokens * p.hidden / 64;
    const int n_z = (int)((p.zero_elems + MOE_ZERO_CHUNK - 1) / MOE_ZERO_CHUNK);
    const int n_pre = n_z + (int)((n_ktiles + MOE_WG_PERM_KTILES - 1) / MOE_WG_PERM_KTILES);
    const int n_gu = n_tiles * rb_gu, total = n_pre + n_gu + n_tiles * rb_dn;
    if (threadIdx.x == 0) s_item[0] = atomicAdd(p.work, 1);
    __syncthreads();
    for (int it = 0;; it ^= 1) {
        const int item = s_item[it];
        if (item >= total) break;
        if (threadIdx.x == 0) s_item[it ^ 1] = atomicAdd(p.work, 1);  // the next, fetched early
        if (item < n_pre) {
            if (item < n_z) {
                const size_t base = (size_t)item * MOE_ZERO_CHUNK;
                for (int i = threadIdx.x * 4; i < MOE_ZERO_CHUNK; i += MOE_THREADS * 4)
                    if (base + i < p.zero_elems) *(float4 *)(p.out + base + i) = make_float4(0, 0, 0, 0);
            } else {
                moe_wg_permute(p, (long long)(item - n_z) * MOE_WG_PERM_KTILES, n_ktiles);
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
            s_row[r] = r >= tl.z ? -1
                       : dn      ? (long long)pos * p.inter
                                 : (long long)(p.sorted[pos] / p.topk) * p.hidden;
        }
        if (threadIdx.x == 0) {
            if (dn)
                while (ld_acquire(p.done + ti) < rb_gu) __nanosleep(64);
            while (ld_acquire(p.work + 1) < n_pre) __nanosleep(64);
        }
        __syncthreads();
        if (dn) {
            moe_wg_dispatch<true>(p, ring, s_row, tl, rb);
        } else {
            moe_wg_dispatch<false>(p, ring, s_row, tl, rb);
            if (threadIdx.x == 0) add_release(p.done + ti, 1);
        }
    }
}

// ---- launcher ------------------------------------------------------------------------------

size_t moe_wg_dyn_smem(int nmax) { return nb_moe_wg_smem_bytes(nmax) + 1024; }

template <int NMAX>
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
    const size_t dyn = moe_wg_dyn_smem(NMAX);
    const size_t smem = nb_moe_wg_smem_total(NMAX);  // = dyn + s_row + s_item
    NB_ASSERT(smem == dyn + sizeof(long long) * NMAX + 2 * sizeof(int));
    if (smem > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: wgmma kernel with %d-token tiles needs %zu bytes of shared memory, the device allows %d "
                        "per block",
                        NMAX, smem, optin);
    if (!per_sm) {
        NB_CUDA_TRY(cudaFuncSetAttribute(moe_wg_kernel<NMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_wg_kernel<NMAX>, MOE_THREADS, dyn));
        if (per_sm < 1) return nb_error(NB_ERR_CUDA, "moe: wgmma kernel<%d> cannot be resident", NMAX);
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(sms * per_sm));
    cfg.blockDim = dim3(MOE_THREADS);
    cfg.dynamicSmemBytes = dyn;
    cfg.stream = st;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    NB_CUDA_TRY(cudaLaunchKernelEx(&cfg, moe_wg_kernel<NMAX>, p));
    return NB_OK;
}

nb_status moe_launch_wg(const moe_params &p, int nmax, int sms, cudaStream_t st)
{
    if (nmax != NB_MOE_WG_TILE)
        return nb_error(NB_ERR_INVALID_ARG, "moe: wgmma tiles of %d tokens (built for %d)", nmax, NB_MOE_WG_TILE);
    return moe_launch_wg_t<NB_MOE_WG_TILE>(p, sms, st);
}

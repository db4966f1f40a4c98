// bench/lab/hopper_probe.cu: standalone Hopper (sm_90a) microbenchmark, three questions.
//
// Part 1, streaming-read bandwidth: what read bandwidth can a kernel that streams NVFP4
// weights once reach, and which loading scheme gets there? Two 4 GiB buffers of random
// bytes, used in turn, so the 60 MiB L2 holds nothing useful between runs. Rows:
//   copy    device-to-device cudaMemcpy of 2 GiB; (read + write) / time = "copy bandwidth"
//   ld.nc   pure read, ld.global.nc.L1::no_allocate.v4.u32, U 16-byte loads in flight per
//           lane, grid SMs x k blocks of T threads, one contiguous chunk per warp
//   moe     each warp task streams 2 row tiles of 48 KiB in 2 KiB steps (4 x 16 B per lane
//           per tile per step), next step's loads issued before this step is consumed (db=1)
//   cp.async  16-byte cp.async.cg into a per-warp ring of S stages of 1 KiB, read back
//   bulk    one thread per block issues cp.async.bulk of B bytes into a ring of mbarrier-
//           guarded stages; 8 consumer warps read each stage back and arrive on "empty"
// GB/s = bytes read / time (1 GB = 1e9 B); "xcopy" = GB/s / copy bandwidth.
//
// Part 3, short streams (run after part 1): a pure read of a decode step's MoE bytes (164 MB
// to 1.3 GB), timed per run between events with runs queued back to back, as stream launches
// and as CUDA-graph replays (bench-moe's protocol): what launch, ramp-up and tail cost.
//
// Part 2, wgmma cost at small N: cycles per wgmma.mma_async.m64nNk16.f32.bf16.bf16 per SM,
// one block per SM (132) of 1, 2 or 4 warpgroups, each issuing a long chain of wgmmas into
// its accumulators (operands: small random BF16 in shared memory, K-major, 128-byte swizzle):
//   ss4     A, B from shared memory; fence, 4 wgmmas (the 4 k-steps of a 64-wide k-tile, so
//           the descriptors advance), commit, wait_group 0
//   ss4c    as ss4 with the same descriptors for all 4 (no descriptor moves in the loop: the
//           bare instruction cost; ss4 - ss4c = what ptxas's descriptor moves cost)
//   ss1     as ss4, commit after each wgmma, wait_group 1 (two in flight)
//   ss4x2   as ss4, the 4 wgmmas alternating between 2 accumulator sets (independent chains)
//   rs4, rs4c, rs1   the same with A from registers (4 x bf16x2 per thread)
//   rsx     as rs1, each A register multiplied (mul.rn.bf16x2) before its wgmma, 2 A sets:
//           expanding weights in registers before each wgmma
//   rse     as rsx with the MoE kernels' real NVFP4 expansion (expand_codes: 12 integer ops
//           + 4 mul.rn.bf16x2 per A set) of a fresh word per k-step
//   rse2    as rse with two A sets and two accumulators per k-step (gate and up rows, as
//           the wgmma MoE kernel issues them); cycles counted per wgmma
//   rse3    as rse2 with each k-tile's codes read from shared memory (a 16-byte word per row
//           tile and lane) and its two scale words expanded, as the wgmma MoE kernel does
//   rse4    as rse3 plus a block barrier every 2 k-tiles (the kernel's one per slice)
//   rsed4, rse3d4   rse, rse3 with four A sets and wait_group 3 (three k-steps in flight while
//           the next is expanded)
//   rseb2, rse3b2   rse, rse3 with k-steps in pairs: both expanded, one fence, two wgmmas (four
//           for rse3b2), one commit, wait_group 1
// cyc/wgmma = SM cycles (clock64 around the loop, median block) / wgmmas per SM; tensor time
// is N/2 cycles (dense peak ~990 TFLOP/s = 4096 FLOP per cycle per SM at ~1.83 GHz);
// TFLOP/s from events; GHz = cycles / event time.
//
// Part 4, the swapped form: tokens as A (m64) and the weights as B (n256), expanded from NVFP4
// into a shared-memory ring by producer warpgroups, consumed by SS wgmmas: cycles per stage (one
// 64-wide k-tile of 256 weight rows) against its 512 tensor cycles (k_swp, part 4's comment).
//
// Build and run:    bash bench/lab/hopper_probe.sh run      (build only: without `run`)
// One part only:    bash bench/lab/hopper_probe.sh run 1    (parts 1 and 3; or 2, or 4)
// About 5-15 s on an H200 (under 60 s). Any CUDA error exits non-zero. bench/lab/README.md.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/moe_dev.h"        // expand_codes / expand_scales: the MoE kernels' NVFP4 expansion
#include "ops/cuda/moe_wgmma_ops.h"  // wgmma fence / commit / wait, wg_desc

#define CK(x)                                                                                        \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)), exit(1); \
    } while (0)
#define CKL() CK(cudaGetLastError())

#define BUF_BYTES (4ull << 30)  // each of the two buffers
#define WARM 2
#define REPS 11

static int g_sms;
static char *g_buf[2];
static uint32_t *g_out;  // one word per block (part 1), one float per thread (part 2)
static cudaEvent_t g_e0, g_e1;

static float median(const float *v, int n)  // n <= 1024
{
    float s[1024];
    memcpy(s, v, (size_t)n * sizeof(float));
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            float t = s[j];
            s[j] = s[j - 1], s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : 0.5f * (s[n / 2 - 1] + s[n / 2]);
}

// Times LAUNCH (a statement that may use `src`, the buffer of this run, and `dst`, the other
// one) WARM + REPS times with events; MS gets the median of the REPS timed runs.
#define TIME_MEDIAN(MS, LAUNCH)                                                                      \
    do {                                                                                             \
        float t_[REPS];                                                                              \
        for (int r_ = 0; r_ < WARM + REPS; r_++) {                                                   \
            [[maybe_unused]] char *src = g_buf[r_ & 1], *dst = g_buf[(r_ & 1) ^ 1];                  \
            CK(cudaEventRecord(g_e0));                                                               \
            LAUNCH;                                                                                  \
            CKL();                                                                                   \
            CK(cudaEventRecord(g_e1));                                                               \
            CK(cudaEventSynchronize(g_e1));                                                          \
            if (r_ >= WARM) CK(cudaEventElapsedTime(&t_[r_ - WARM], g_e0, g_e1));                    \
        }                                                                                            \
        MS = median(t_, REPS);                                                                       \
    } while (0)

__host__ __device__ static inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return x;
}

// ================================ Part 1: streaming reads ================================

__global__ void k_fill(uint4 *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t b = (uint32_t)i * 4u ^ seed;
        p[i] = make_uint4(hash32(b), hash32(b + 1), hash32(b + 2), hash32(b + 3));
    }
}

// 16-byte streaming loads: ld_stream (ld.global.nc.L1::no_allocate.v4) from ops/cuda/moe_dev.h,
// the MoE kernels' own.
__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// XOR of acc over the block, one word per block to out: keeps the loads live.
__device__ __forceinline__ void block_out(uint32_t acc, uint32_t *out)
{
    __shared__ uint32_t s_acc;
    if (threadIdx.x == 0) s_acc = 0;
    __syncthreads();
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicXor(&s_acc, acc);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s_acc;
}

// (a) Each warp reads chunk16 uint4 (a multiple of 32 U) from src + warp * chunk16. The
// launch bound gives ptxas room for all U loads in flight (at 32 registers it interleaves
// them with the XORs); where that costs occupancy, the row's occ column shows it.
template <int U>
__global__ void __launch_bounds__(512, 1) k_read(const uint4 *__restrict__ src, size_t chunk16, uint32_t *out)
{
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    const uint4 *p = src + warp * chunk16 + (threadIdx.x & 31);
    uint32_t acc = 0;
#pragma unroll 1
    for (size_t i = 0; i < chunk16; i += 32 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = ld_stream(p + i + 32 * u);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= fold(v[u]);
    }
    block_out(acc, out);
}

// (b) Task t (0 <= t < ntasks) = row tiles t and ntasks + t, 48 KiB each, 24 steps of 2 KiB.
#define MOE_TILE16 (48 * 1024 / 16)
#define MOE_STEPS 24
__device__ __forceinline__ void moe_load(uint4 (&c)[8], const uint4 *pa, const uint4 *pb)
{
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = ld_stream(pa + j * 32), c[4 + j] = ld_stream(pb + j * 32);
}
__device__ __forceinline__ uint32_t fold8(const uint4 (&c)[8])
{
    uint32_t x = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) x ^= fold(c[j]);
    return x;
}
template <int DB>
__global__ void __launch_bounds__(512, 1) k_moe(const uint4 *__restrict__ src, int ntasks, uint32_t *out)
{
    const int nwarps = gridDim.x * blockDim.x / 32, lane = threadIdx.x & 31;
    uint32_t acc = 0;
    for (int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32; t < ntasks; t += nwarps) {
        // one step = 128 uint4 per tile
        const uint4 *pa = src + (size_t)t * MOE_TILE16 + lane, *pb = src + (size_t)(ntasks + t) * MOE_TILE16 + lane;
        uint4 c0[8], c1[8];
        if (DB) {  // straight-line pairs: step s + 1 is in flight while step s is consumed
            moe_load(c0, pa, pb);
#pragma unroll 1
            for (int s = 0; s < MOE_STEPS - 2; s += 2, pa += 256, pb += 256) {
                // __syncwarp: a scheduling fence; without it ptxas hoists the XORs of the loop-
                // carried c0 above the loads of c1 (checked in the SASS)
                moe_load(c1, pa + 128, pb + 128);
                __syncwarp();
                acc ^= fold8(c0);
                moe_load(c0, pa + 256, pb + 256);
                __syncwarp();
                acc ^= fold8(c1);
            }
            moe_load(c1, pa + 128, pb + 128);
            acc ^= fold8(c0) ^ fold8(c1);
        } else {
#pragma unroll 1
            for (int s = 0; s < MOE_STEPS; s++, pa += 128, pb += 128) {
                moe_load(c0, pa, pb);
                acc ^= fold8(c0);
            }
        }
    }
    block_out(acc, out);
}

// (c) Per-warp ring of S stages of 1 KiB (64 uint4: 2 per lane); each warp streams
// `stages` stages from its contiguous chunk; a lane reads back its neighbour's 32 bytes.
__device__ __forceinline__ void cp_async16(uint32_t saddr, const void *g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
template <int S>
__global__ void k_cpasync(const uint4 *__restrict__ src, int stages, uint32_t *out)
{
    extern __shared__ uint4 cp_smem[];
    const int lane = threadIdx.x & 31, l2 = (lane + 1) & 31;
    const uint4 *ring = cp_smem + (threadIdx.x >> 5) * S * 64;
    const uint32_t sring = (uint32_t)__cvta_generic_to_shared(ring);
    const uint4 *p = src + (size_t)((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * stages * 64 + lane;
    uint32_t acc = 0;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < stages) {
            cp_async16(sring + (uint32_t)((i % S) * 64 + lane) * 16u, p + (size_t)i * 64);
            cp_async16(sring + (uint32_t)((i % S) * 64 + 32 + lane) * 16u, p + (size_t)i * 64 + 32);
        }
        cp_commit();
    }
#pragma unroll 1
    for (int i = 0; i < stages; i++) {
        cp_wait<S - 2>();  // stage i has landed (this lane's part) ...
        __syncwarp();      // ... and every lane's; every lane is done with stage i - 1
        const uint4 *st = ring + (i % S) * 64;
        acc ^= fold(st[l2]) ^ fold(st[32 + l2]);
        const int j = i + S - 1;  // refills slot (i - 1) % S
        if (j < stages) {
            cp_async16(sring + (uint32_t)((j % S) * 64 + lane) * 16u, p + (size_t)j * 64);
            cp_async16(sring + (uint32_t)((j % S) * 64 + 32 + lane) * 16u, p + (size_t)j * 64 + 32);
        }
        cp_commit();
    }
    block_out(acc, out);
}

// (d) Warps 0..7 consume, warp 8's lane 0 produces. Shared: full[8], empty[8] mbarriers,
// then the ring (128-byte aligned) of ns stages of `bytes`; block b streams `stages` stages
// from src + b * stages * bytes.
#define BULK_CW 8
__device__ __forceinline__ void mbar_init(uint32_t a, uint32_t n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_arrive(uint32_t a) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint32_t a, uint32_t tx)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(tx) : "memory");
}

__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t mbar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(mbar)
                 : "memory");
}
__global__ void __launch_bounds__((BULK_CW + 1) * 32) k_bulk(const char *__restrict__ src, int bytes, int ns, int stages,
                                                             uint32_t *out)
{
    extern __shared__ __align__(128) char bulk_smem[];
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(bulk_smem);
    const uint32_t full = base, empty = base + 64, ring = base + 128;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns; s++) mbar_init(full + 8 * s, 1), mbar_init(empty + 8 * s, BULK_CW);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const char *blk = src + (size_t)blockIdx.x * stages * bytes;
    uint32_t acc = 0;
    if (warp == BULK_CW) {
        if (lane == 0) {
            for (int i = 0, slot = 0, ph = 0; i < stages; i++) {
                if (i >= ns) wg_mbar_wait(empty + 8 * slot, ph ^ 1);  // round i / ns - 1 consumed
                mbar_expect_tx(full + 8 * slot, (uint32_t)bytes);
                bulk_g2s(ring + (uint32_t)(slot * bytes), blk + (size_t)i * bytes, (uint32_t)bytes, full + 8 * slot);
                if (++slot == ns) slot = 0, ph ^= 1;
            }
        }
    } else {
        const int per = bytes / 16 / (BULK_CW * 32);
        for (int i = 0, slot = 0, ph = 0; i < stages; i++) {
            wg_mbar_wait(full + 8 * slot, ph);
            const uint4 *st = (const uint4 *)(bulk_smem + 128 + (size_t)slot * bytes);
            for (int j = 0; j < per; j++) acc ^= fold(st[j * BULK_CW * 32 + threadIdx.x]);
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + 8 * slot);
            if (++slot == ns) slot = 0, ph ^= 1;
        }
    }
    block_out(acc, out);
}

// ================================ Part 2: wgmma at small N ================================


// wgmma plumbing (wg_fence, wg_commit, wg_wait, wg_pin) and the shared-memory descriptor
// (wg_desc: K-major BF16, 128-byte swizzle, SBO 1024, k-step s at +32 s bytes) come from the
// MoE kernels' header, src/ops/cuda/moe_wgmma_ops.h, so the probe times the same encoding.
#define A4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define A8(d, i) A4(d, i), A4(d, i + 4)
#define A16(d, i) A8(d, i), A8(d, i + 8)
#define A32(d, i) A16(d, i), A16(d, i + 16)
#define A64(d, i) A32(d, i), A32(d, i + 32)
// "%<k>" = the operand that holds 1 (scale-d predicate); the rest of the mnemonic follows.
#define WG_P(k) "{\n.reg .pred p;\nsetp.ne.b32 p, %" k ", 0;\nwgmma.mma_async.sync.aligned."
template <int N>
struct wg_op;
template <>
struct wg_op<8> {
    static __device__ __forceinline__ void ss(float (&d)[4], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("6") "m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                     : A4(d, 0) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[4], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("9") "m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                     : A4(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <>
struct wg_op<16> {
    static __device__ __forceinline__ void ss(float (&d)[8], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("10") "m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                     : A8(d, 0) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("13") "m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                     : A8(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <>
struct wg_op<32> {
    static __device__ __forceinline__ void ss(float (&d)[16], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("18") "m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                     : A16(d, 0) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[16], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("21") "m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                     : A16(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <>
struct wg_op<64> {
    static __device__ __forceinline__ void ss(float (&d)[32], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("34") "m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : A32(d, 0) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("37") "m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                     : A32(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <>
struct wg_op<128> {
    static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("66") "m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : A64(d, 0) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("69") "m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                     : A64(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <>
struct wg_op<256> {
    static __device__ __forceinline__ void ss(float (&d)[128], uint64_t a, uint64_t b)
    {
        asm volatile(WG_P("130") "m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : A64(d, 0), A64(d, 64) : "l"(a), "l"(b), "r"(1));
    }
    static __device__ __forceinline__ void rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b)
    {
        asm volatile(WG_P("133") "m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
                     : A64(d, 0), A64(d, 64) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};


enum { V_SS4, V_SS4C, V_SS1, V_SS4X2, V_RS4, V_RS4C, V_RS1, V_RSX, V_RSE, V_RSE2, V_RSE3, V_RSE4,
       V_RSED4, V_RSEB2, V_RSE3D4, V_RSE3B2, V_COUNT };
static const char *const v_name[V_COUNT] = {"ss4",  "ss4c",   "ss1",   "ss4x2",   "rs4",    "rs4c",
                                            "rs1",  "rsx",    "rse",   "rse2",    "rse3",   "rse4",
                                            "rsed4", "rseb2", "rse3d4", "rse3b2"};
// Variants that issue two wgmmas per k-step (two row tiles: gate and up).
__host__ __device__ constexpr bool v_x2(int v)
{
    return v == V_SS4X2 || v == V_RSE2 || v == V_RSE3 || v == V_RSE4 || v == V_RSE3D4 || v == V_RSE3B2;
}

__device__ __forceinline__ uint32_t rand_bf16x2(uint32_t i)
{
    // two BF16 of magnitude [1/32, 1/2), random sign and mantissa
    const uint32_t h = hash32(i);
    const uint32_t lo = ((h & 1u) << 15) | ((122u + ((h >> 1) & 3u)) << 7) | ((h >> 3) & 0x7Fu);
    const uint32_t hi = (((h >> 10) & 1u) << 15) | ((122u + ((h >> 11) & 3u)) << 7) | ((h >> 13) & 0x7Fu);
    return lo | (hi << 16);
}
__device__ __forceinline__ uint32_t bmul2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm volatile("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// Shared memory: B (N x 64 BF16, up to 32 KiB) at 0, then A (64 x 64 BF16, 8 KiB) at 32 KiB,
// one A tile for all warpgroups so that every descriptor is block-uniform and ptxas keeps
// them in uniform registers (a per-warpgroup A costs two R2UR per wgmma; the tensor cores
// read A once per wgmma either way). The launch asks for WG_SMEM so that only one block
// fits on an SM.
#define WG_SMEM (120 * 1024)
#define WG_ITERS(N) (4096 * ((N) < 64 ? 64 / (N) : 1))  // k-tiles (4 wgmmas) per warpgroup, launch

template <int N, int V>
__global__ void k_wgmma(int iters, uint32_t mul, float *out, long long *cyc)
{
    constexpr bool X2 = v_x2(V), FIXED = V == V_SS4C || V == V_RS4C;
    extern __shared__ uint4 wg_smem[];
    char *sm = (char *)wg_smem;
    sm += (1024 - ((uint32_t)__cvta_generic_to_shared(sm) & 1023)) & 1023;  // swizzle atoms
    const int tid = threadIdx.x;
    for (int i = tid; i < (32768 + 8192) / 4; i += blockDim.x) ((uint32_t *)sm)[i] = rand_bf16x2(i * 977u + blockIdx.x);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma's view
    __syncthreads();
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm), sa = sb + 32768u;
    // k-step s of the k-tile: 32 s bytes into each 128-byte row (FIXED: always k-step 0, so
    // the loop has no descriptor moves at all: the pure instruction cost)
    uint64_t bd[4], ad[4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
        bd[s] = wg_desc(sb + (FIXED ? 0u : 32u * s)), ad[s] = wg_desc(sa + (FIXED ? 0u : 32u * s));
        asm volatile("" : "+l"(bd[s]), "+l"(ad[s]));  // computed once here, not again in the loop
    }
    uint32_t a[4][4];  // A sets: 2, or 4 for the deep variants (rsed4, rseb2, rse3d4, rse3b2)
#pragma unroll
    for (int j = 0; j < 16; j++) a[j >> 2][j & 3] = rand_bf16x2(0x9000u + tid * 8u + j);
    // rse3/rse4: two k-tiles of every thread's codes (16 bytes per row tile) past the tiles
    uint4 *cw = (uint4 *)(sm + 48 * 1024);
    for (int i = tid; i < 4 * (int)blockDim.x; i += blockDim.x)
        cw[i] = make_uint4(rand_bf16x2(4 * i), rand_bf16x2(4 * i + 1), rand_bf16x2(4 * i + 2), rand_bf16x2(4 * i + 3));
    __syncthreads();
    uint32_t b2[4][4], wa = 0x9E3779B9u ^ (uint32_t)tid, wb = 0x7F4A7C15u ^ (uint32_t)tid, wsc = 0x3C38u;
#pragma unroll
    for (int j = 0; j < 16; j++) b2[j >> 2][j & 3] = a[j >> 2][j & 3];
    float d[N / 2], e[X2 ? N / 2 : 1];
#pragma unroll
    for (int i = 0; i < N / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int i = 0; i < (X2 ? N / 2 : 1); i++) e[i] = 0.f;
    __syncthreads();
    const long long t0 = clock64();
#pragma unroll 1
    for (int it = 0; it < iters; it++) {
        if constexpr (V == V_SS4 || V == V_SS4C) {
            wg_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) wg_op<N>::ss(d, ad[s], bd[s]);
            wg_commit();
            wg_wait<0>();
        } else if constexpr (V == V_SS1) {
#pragma unroll
            for (int s = 0; s < 4; s++) {
                wg_fence();
                wg_op<N>::ss(d, ad[s], bd[s]);
                wg_commit();
                wg_wait<1>();
            }
        } else if constexpr (V == V_SS4X2) {
            wg_fence();
            wg_op<N>::ss(d, ad[0], bd[0]);
            wg_op<N>::ss(e, ad[1], bd[1]);
            wg_op<N>::ss(d, ad[2], bd[2]);
            wg_op<N>::ss(e, ad[3], bd[3]);
            wg_commit();
            wg_wait<0>();
        } else if constexpr (V == V_RS4 || V == V_RS4C) {
            wg_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) wg_op<N>::rs(d, a[0], bd[s]);
            wg_commit();
            wg_wait<0>();
        } else if constexpr (V == V_RS1) {
#pragma unroll
            for (int s = 0; s < 4; s++) {
                wg_fence();
                wg_op<N>::rs(d, a[0], bd[s]);
                wg_commit();
                wg_wait<1>();
            }
        } else if constexpr (V == V_RSE || V == V_RSE2 || V == V_RSED4 || V == V_RSEB2) {
            // the MoE kernels' real expansion (ops/cuda/moe_dev.h) of a new word of 8 codes
            // per A set and k-step (one IMAD stands in for the kernel's load of the word);
            // rse2: two A sets and two accumulators per k-step, as the gate/up wgmma kernel
            uint32_t sg, sg8, tg, tg8;
            expand_scales(wsc ^ (uint32_t)it, sg, sg8);
            if constexpr (V == V_RSE2) expand_scales(wsc ^ (uint32_t)it ^ 0x0101u, tg, tg8);
            if constexpr (V == V_RSE || V == V_RSE2) {
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    wa = wa * 1664525u + 1013904223u;
                    expand_codes(wa, sg, sg8, a[s & 1]);
                    if constexpr (V == V_RSE2) {
                        wb = wb * 1664525u + 1013904223u;
                        expand_codes(wb, tg, tg8, b2[s & 1]);
                    }
                    wg_fence();
                    wg_op<N>::rs(d, a[s & 1], bd[s]);
                    if constexpr (V == V_RSE2) wg_op<N>::rs(e, b2[s & 1], bd[s]);
                    wg_commit();
                    wg_wait<1>();
                }
            } else if constexpr (V == V_RSED4) {
                // a deeper A ring: four sets, wait_group 3 (set s was last read four k-steps back)
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    wa = wa * 1664525u + 1013904223u;
                    expand_codes(wa, sg, sg8, a[s]);
                    wg_fence();
                    wg_op<N>::rs(d, a[s], bd[s]);
                    wg_commit();
                    wg_wait<3>();
                }
            } else {
                // rseb2: k-steps in pairs, both expanded before one fence, two wgmmas, one
                // commit, wait_group 1 (set s was last read by the group before the previous one)
#pragma unroll
                for (int s = 0; s < 4; s += 2) {
                    wa = wa * 1664525u + 1013904223u;
                    expand_codes(wa, sg, sg8, a[s]);
                    wa = wa * 1664525u + 1013904223u;
                    expand_codes(wa, sg, sg8, a[s + 1]);
                    wg_fence();
                    wg_op<N>::rs(d, a[s], bd[s]);
                    wg_op<N>::rs(d, a[s + 1], bd[s + 1]);
                    wg_commit();
                    wg_wait<1>();
                }
            }
        } else if constexpr (V == V_RSE3 || V == V_RSE4 || V == V_RSE3D4 || V == V_RSE3B2) {
            // rse2 with the codes of the k-tile read from shared memory (one 16-byte word per
            // row tile and lane, as the wgmma MoE kernel's ring stages hold them) and both
            // scale words expanded per k-tile; rse4: plus a block barrier every 2 k-tiles
            // (the 16-warp kernel's __syncthreads per 128-wide slice); rse3d4 / rse3b2: four
            // A sets per tile, one k-step per group and wait_group 3 / two per group, wait 1
            const uint4 ca = cw[(it & 1) * 2 * blockDim.x + tid], cb = cw[(it & 1) * 2 * blockDim.x + blockDim.x + tid];
            uint32_t sg, sg8, tg, tg8;
            expand_scales(ca.x >> 16 ^ (uint32_t)it, sg, sg8);
            expand_scales(cb.x >> 16 ^ (uint32_t)it, tg, tg8);
            const uint32_t wwa[4] = {ca.x, ca.y, ca.z, ca.w}, wwb[4] = {cb.x, cb.y, cb.z, cb.w};
            if constexpr (V == V_RSE3 || V == V_RSE4) {
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    expand_codes(wwa[s], sg, sg8, a[s & 1]);
                    expand_codes(wwb[s], tg, tg8, b2[s & 1]);
                    wg_fence();
                    wg_op<N>::rs(d, a[s & 1], bd[s]);
                    wg_op<N>::rs(e, b2[s & 1], bd[s]);
                    wg_commit();
                    wg_wait<1>();
                }
                if constexpr (V == V_RSE4)
                    if (it & 1) __syncthreads();
            } else if constexpr (V == V_RSE3D4) {
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    expand_codes(wwa[s], sg, sg8, a[s]);
                    expand_codes(wwb[s], tg, tg8, b2[s]);
                    wg_fence();
                    wg_op<N>::rs(d, a[s], bd[s]);
                    wg_op<N>::rs(e, b2[s], bd[s]);
                    wg_commit();
                    wg_wait<3>();
                }
            } else {
#pragma unroll
                for (int s = 0; s < 4; s += 2) {
                    expand_codes(wwa[s], sg, sg8, a[s]);
                    expand_codes(wwb[s], tg, tg8, b2[s]);
                    expand_codes(wwa[s + 1], sg, sg8, a[s + 1]);
                    expand_codes(wwb[s + 1], tg, tg8, b2[s + 1]);
                    wg_fence();
                    wg_op<N>::rs(d, a[s], bd[s]);
                    wg_op<N>::rs(e, b2[s], bd[s]);
                    wg_op<N>::rs(d, a[s + 1], bd[s + 1]);
                    wg_op<N>::rs(e, b2[s + 1], bd[s + 1]);
                    wg_commit();
                    wg_wait<1>();
                }
            }
        } else {  // V_RSX: set s & 1 was last read by the wgmma of k-step s - 2, complete by now
#pragma unroll
            for (int s = 0; s < 4; s++) {
#pragma unroll
                for (int r = 0; r < 4; r++) a[s & 1][r] = bmul2(a[s & 1][r], mul);
                wg_fence();
                wg_op<N>::rs(d, a[s & 1], bd[s]);
                wg_commit();
                wg_wait<1>();
            }
        }
    }
    wg_wait<0>();
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < N / 2; i++) wg_pin(d[i]), sum += d[i];
    if constexpr (X2) {
#pragma unroll
        for (int i = 0; i < N / 2; i++) wg_pin(e[i]), sum += e[i];
    }
    __syncthreads();
    const long long t1 = clock64();
    if (tid == 0) cyc[blockIdx.x] = t1 - t0;
    out[blockIdx.x * blockDim.x + tid] = sum;  // never read back; keeps the results live
}

// ======================================== host ========================================

static double g_copy_gbs;

// One result row. req = blocks per SM asked for (0: not a kernel), f/threads/smem: the kernel,
// for its registers and how many of its blocks fit on an SM (res < req: fewer ran at once).
static void row1(const char *scheme, const char *params, const void *f, int threads, size_t smem, int req, double bytes,
                 float ms)
{
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    char occ[48] = "";
    if (f) {
        cudaFuncAttributes fa;
        int res = 0;
        CK(cudaFuncGetAttributes(&fa, f));
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&res, f, threads, smem));
        snprintf(occ, sizeof occ, "regs=%d res=%d/%d", fa.numRegs, res < req ? res : req, req);
    }
    printf("%-9s %-24s %-15s %8.1f GB/s  x%.3f  %7.3f ms\n", scheme, params, occ, gbs, g_copy_gbs > 0 ? gbs / g_copy_gbs : 1.0,
           ms);
}

static void set_smem(const void *f, size_t smem)
{
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int U>
static void case_read(int threads, int k)
{
    const int grid = g_sms * k, nw = grid * threads / 32;
    const size_t chunk16 = (BUF_BYTES / 16 / nw) / (32 * U) * (32 * U);
    float ms;
    TIME_MEDIAN(ms, (k_read<U><<<grid, threads>>>((const uint4 *)src, chunk16, g_out)));
    char p[64];
    snprintf(p, sizeof p, "T=%d k=%d U=%d", threads, k, U);
    row1("ld.nc", p, (const void *)k_read<U>, threads, 0, k, (double)chunk16 * 16 * nw, ms);
}

template <int DB>
static void case_moe(int bps, int threads)
{
    const int grid = g_sms * bps, nw = grid * threads / 32;
    const int ntasks = (int)(BUF_BYTES / (2 * 48 * 1024)) / nw * nw;
    float ms;
    TIME_MEDIAN(ms, (k_moe<DB><<<grid, threads>>>((const uint4 *)src, ntasks, g_out)));
    char p[64];
    snprintf(p, sizeof p, "%dx%d db=%d", bps, threads, DB);
    row1("moe", p, (const void *)k_moe<DB>, threads, 0, bps, (double)ntasks * 2 * 48 * 1024, ms);
}

template <int S>
static void case_cpasync(int bps, int threads)
{
    const int grid = g_sms * bps, nw = grid * threads / 32;
    const int stages = (int)(BUF_BYTES / 1024 / nw);
    const size_t smem = (size_t)(threads / 32) * S * 1024;
    set_smem((const void *)k_cpasync<S>, smem);
    float ms;
    TIME_MEDIAN(ms, (k_cpasync<S><<<grid, threads, smem>>>((const uint4 *)src, stages, g_out)));
    char p[64];
    snprintf(p, sizeof p, "%dx%d S=%d", bps, threads, S);
    row1("cp.async", p, (const void *)k_cpasync<S>, threads, smem, bps, (double)stages * 1024 * nw, ms);
}

static void case_bulk(int bps, int bytes)
{
    const int grid = g_sms * bps, threads = (BULK_CW + 1) * 32;
    const int per_block = (228 * 1024) / bps - 1024 - 128 - 64;  // SM shared memory / blocks, less reserves
    const int ns = per_block / bytes < 6 ? per_block / bytes : 6;
    const int stages = (int)(BUF_BYTES / (size_t)bytes / grid);
    const size_t smem = 128 + (size_t)ns * bytes;
    set_smem((const void *)k_bulk, smem);
    float ms;
    TIME_MEDIAN(ms, (k_bulk<<<grid, threads, smem>>>(src, bytes, ns, stages, g_out)));
    char p[64];
    snprintf(p, sizeof p, "bps=%d B=%dK ring=%d", bps, bytes / 1024, ns);
    row1("bulk", p, (const void *)k_bulk, threads, smem, bps, (double)stages * bytes * grid, ms);
}

static void part1(void)
{
    for (int b = 0; b < 2; b++) {
        k_fill<<<g_sms * 8, 512>>>((uint4 *)g_buf[b], BUF_BYTES / 16, 0x1234567u * (b + 1));
        CKL();
    }
    CK(cudaDeviceSynchronize());
    printf("\n== Part 1: streaming reads, 2 x 4 GiB buffers used in turn, median of %d ==\n", REPS);
    const size_t cp = 2ull << 30;
    float ms;
    TIME_MEDIAN(ms, CK(cudaMemcpyAsync(dst + cp, src, cp, cudaMemcpyDeviceToDevice)));
    g_copy_gbs = 2.0 * cp / (ms * 1e-3) / 1e9;
    row1("copy", "D2D 2 GiB, (r+w)/time", NULL, 0, 0, 0, 2.0 * cp, ms);
    printf("-- (a) pure read: grid SMs x k blocks of T threads, U 16-B loads in flight per lane\n");
    for (int t = 256; t <= 512; t *= 2)
        for (int k = 1; k * t <= 2048; k *= 2) {
            case_read<1>(t, k), case_read<2>(t, k), case_read<4>(t, k), case_read<8>(t, k);
        }
    printf("-- (b) MoE-like: 2 row tiles of 48 KiB per warp task, 2 KiB steps (blocks/SM x threads)\n");
    case_moe<1>(4, 128), case_moe<1>(2, 256), case_moe<1>(1, 512);
    case_moe<0>(4, 128), case_moe<0>(2, 256), case_moe<0>(1, 512);
    printf("-- (c) cp.async 16 B into a per-warp ring of S x 1 KiB (blocks/SM x threads)\n");
    case_cpasync<2>(4, 128), case_cpasync<4>(4, 128), case_cpasync<8>(4, 128);
    case_cpasync<2>(2, 256), case_cpasync<4>(2, 256), case_cpasync<8>(2, 256);
    printf("-- (d) cp.async.bulk by one thread, ring of mbarrier stages, 8 consumer warps (bps = blocks/SM)\n");
    for (int bps = 1; bps <= 2; bps++)
        for (int b = 4096; b <= 32768; b *= 2) case_bulk(bps, b);
}

// The median over SMs of the last run's clock64 cycles (one value per block, one block per SM).
static double sm_cycles(const long long *cyc)
{
    long long h[1024];
    float hc[1024];
    CK(cudaMemcpy(h, cyc, (size_t)g_sms * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < g_sms; i++) hc[i] = (float)h[i];
    return median(hc, g_sms);
}

template <int N, int V>
static void case_wgmma(int wgs, long long *cyc)
{
    const void *f = (const void *)k_wgmma<N, V>;
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, f));
    const int threads = 128 * wgs;
    if (fa.numRegs * threads > 65536) {
        printf("%-6s %4d %3d %5d  skipped: %d registers x %d threads > 64K\n", v_name[V], N, wgs, fa.numRegs, fa.numRegs,
               threads);
        return;
    }
    set_smem(f, WG_SMEM);
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, threads, WG_SMEM));
    if (occ != 1) {
        fprintf(stderr, "k_wgmma<%d,%d>: %d blocks per SM, expected 1\n", N, V, occ);
        exit(1);
    }
    float ms;
    // mul = 1.0 in both BF16 halves: rsx's A values stay what they were
    TIME_MEDIAN(ms, (k_wgmma<N, V><<<g_sms, threads, WG_SMEM>>>(WG_ITERS(N), 0x3F803F80u, (float *)g_out, cyc)));
    const double cycles = sm_cycles(cyc), n_wg = (double)WG_ITERS(N) * 4 * wgs * (v_x2(V) && V != V_SS4X2 ? 2 : 1);  // per SM
    const double flop = 2.0 * 64 * N * 16 * n_wg * g_sms;
    const double cpw = cycles / n_wg, tflops = flop / (ms * 1e-3) / 1e12;
    printf("%-6s %4d %3d %5d %9.2f %6.1f %7.2f %8.1f %6.1f%% %6.3f\n", v_name[V], N, wgs, fa.numRegs, cpw, N / 2.0,
           cpw / (N / 2.0), tflops, 100.0 * tflops / 990.0, cycles / (ms * 1e-3) / 1e9);
}

template <int V>
static void wgmma_variant(long long *cyc)
{
    for (int wgs = 1; wgs <= 4; wgs *= 2) {
        case_wgmma<8, V>(wgs, cyc), case_wgmma<16, V>(wgs, cyc), case_wgmma<32, V>(wgs, cyc);
        case_wgmma<64, V>(wgs, cyc), case_wgmma<128, V>(wgs, cyc);
        if constexpr (!v_x2(V)) case_wgmma<256, V>(wgs, cyc);  // 2 x 128 accumulators do not fit
    }
}

static void part2(void)
{
    long long *cyc;
    CK(cudaMalloc(&cyc, (size_t)g_sms * sizeof(long long)));
    printf("\n== Part 2: wgmma m64nNk16 bf16 -> f32, 1 block per SM of WG warpgroups, %d (N >= 64) to %d (N = 8) "
           "wgmmas per warpgroup ==\n",
           WG_ITERS(64) * 4, WG_ITERS(8) * 4);
    printf("var       N  WG  regs cyc/wgmma  N/2   ratio   TFLOP/s  %%990   GHz   (cyc/wgmma per SM; ratio = cyc/(N/2))\n");
    wgmma_variant<V_SS4>(cyc), wgmma_variant<V_SS4C>(cyc), wgmma_variant<V_SS1>(cyc), wgmma_variant<V_SS4X2>(cyc);
    wgmma_variant<V_RS4>(cyc), wgmma_variant<V_RS4C>(cyc), wgmma_variant<V_RS1>(cyc), wgmma_variant<V_RSX>(cyc);
    wgmma_variant<V_RSE>(cyc), wgmma_variant<V_RSE2>(cyc), wgmma_variant<V_RSE3>(cyc), wgmma_variant<V_RSE4>(cyc);
    wgmma_variant<V_RSED4>(cyc), wgmma_variant<V_RSEB2>(cyc), wgmma_variant<V_RSE3D4>(cyc), wgmma_variant<V_RSE3B2>(cyc);
    CK(cudaFree(cyc));
}

// ============ Part 4: the swapped form, weights expanded into shared memory (SS) ============

// Tokens as A (M = 64: one expert's tile of up to 64 tokens, K-major in shared memory) and the
// NVFP4 weights as B (N = 256 rows per stage, expanded to BF16 into a shared-memory ring by
// producer warpgroups): is wgmma m64n256k16 fed from an expanding producer faster per weight
// than the RS kernels' m64nNk16 at N = 32-64 tokens? Per stage (one 64-wide k-tile of 256
// weight rows, 32 KiB of BF16) the consumers' tensor time is 4 x 128 = 512 cycles; the
// producers expand 2048 words of 8 codes (expand_codes; one expand_scales per two words), each
// into one 16-byte swizzled store, and the wgmmas read those 32 KiB back, so shared memory
// carries 64 KiB of weights (+ 8 KiB per consumer warpgroup of tokens) per stage against its
// 128 bytes per cycle: ~512-576 cycles. Block: CW consumer warpgroups, PW producer
// warpgroups, SW_STAGES stages with full / empty mbarriers.
//   CW 1: one consumer, m64n256k16 on the whole stage; CW 2: each consumer takes 128 rows
//   (m64n128k16) of every stage. EXP 0: the producers store a constant (no expansion: the
//   shared-memory and barrier cost alone). TOK 1: the producers also write an 8 KiB token
//   tile per stage (A changes with k, as it would in the kernel).
#define SW_STAGES 4
#define SW_B 32768                     // 256 rows x 64 k x 2 bytes
#define SW_STAGE (SW_B + 8192)         // + the stage's token tile (TOK)
#define SW_SMEM (SW_STAGES * SW_STAGE + 8192 + 1024 + 256)  // ring, the fixed token tile, alignment, barriers

template <int CW, int PW, int EXP, int TOK>
__global__ void __launch_bounds__((CW + PW) * 128, 1) k_swp(int stages, float *out, long long *cyc)
{
    extern __shared__ uint4 sw_smem[];
    char *sm = (char *)sw_smem;
    sm += (1024 - ((uint32_t)__cvta_generic_to_shared(sm) & 1023)) & 1023;
    uint64_t *full = (uint64_t *)(sm + SW_STAGES * SW_STAGE + 8192), *empty = full + SW_STAGES;
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t ring = (uint32_t)__cvta_generic_to_shared(sm), tok0 = ring + SW_STAGES * SW_STAGE;
    for (int i = tid; i < 8192 / 4; i += blockDim.x) ((uint32_t *)(sm + SW_STAGES * SW_STAGE))[i] = rand_bf16x2(i);
    if (tid == 0) {
        for (int i = 0; i < SW_STAGES; i++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((uint32_t)__cvta_generic_to_shared(full + i)),
                         "r"(PW * 128));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((uint32_t)__cvta_generic_to_shared(empty + i)),
                         "r"(CW * 128));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const long long t0 = clock64();
    float sum = 0.f;
    if (wg < CW) {  // consumer
        constexpr int NN = 256 / CW;
        float d[NN / 2];
#pragma unroll
        for (int i = 0; i < NN / 2; i++) d[i] = 0.f;
#pragma unroll 1
        for (int t = 0; t < stages; t++) {
            const int st = t % SW_STAGES;
            wg_mbar_wait((uint32_t)__cvta_generic_to_shared(full + st), (t / SW_STAGES) & 1);
            const uint32_t sb = ring + st * SW_STAGE + wg * (NN * 128), sa = TOK ? ring + st * SW_STAGE + SW_B : tok0;
            wg_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) wg_op<NN>::ss(d, wg_desc(sa + 32u * s), wg_desc(sb + 32u * s));
            wg_commit();
            wg_wait<1>();  // stage t - 1's wgmmas are complete: free it
            if (t > 0)
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                                 (uint32_t)__cvta_generic_to_shared(empty + (t - 1) % SW_STAGES))
                             : "memory");
        }
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < NN / 2; i++) wg_pin(d[i]), sum += d[i];
    } else {  // producer
        const int p = tid - CW * 128;  // 0 .. PW*128-1
        constexpr int WORDS = 2048 / (PW * 128);  // words of 8 codes per thread per stage
        uint32_t w = 0x9E3779B9u ^ (uint32_t)p, sc = 0x3C38u;
#pragma unroll 1
        for (int t = 0; t < stages; t++) {
            const int st = t % SW_STAGES;
            wg_mbar_wait((uint32_t)__cvta_generic_to_shared(empty + st), ((t / SW_STAGES) & 1) ^ 1);
            char *stage = sm + st * SW_STAGE;
#pragma unroll
            for (int i = 0; i < WORDS; i += 2) {
                // words i, i+1: chunks 2c, 2c+1 (one 16-wide scale group) of row r
                const int q = p + (i >> 1) * (PW * 128), r = q >> 2, c = (q & 3) * 2;
                uint32_t sg = 0x3F803F80u, sg8 = sg;
                if (EXP) expand_scales(sc ^ (uint32_t)(t + i), sg, sg8);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t a[4] = {w, w, w, w};
                    w = w * 1664525u + 1013904223u;
                    if (EXP) expand_codes(w, sg, sg8, a);
                    *(uint4 *)(stage + (r >> 3) * 1024 + (r & 7) * 128 + (((c + h) ^ (r & 7)) << 4)) =
                        make_uint4(a[0], a[1], a[2], a[3]);
                }
            }
            if (TOK) {
                uint4 *tk = (uint4 *)(stage + SW_B);
                for (int i = p; i < 8192 / 16; i += PW * 128) tk[i] = make_uint4(w, w + 1, w + 2, w + 3);
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"((uint32_t)__cvta_generic_to_shared(full + st))
                         : "memory");
        }
        sum = (float)w;
    }
    __syncthreads();
    const long long t1 = clock64();
    if (tid == 0) cyc[blockIdx.x] = t1 - t0;
    out[blockIdx.x * blockDim.x + tid] = sum;
}

template <int CW, int PW, int EXP, int TOK>
static void case_swp(long long *cyc)
{
    const void *f = (const void *)k_swp<CW, PW, EXP, TOK>;
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, f));
    const int threads = (CW + PW) * 128, stages = 2048;
    set_smem(f, SW_SMEM);
    float ms;
    TIME_MEDIAN(ms, (k_swp<CW, PW, EXP, TOK><<<g_sms, threads, SW_SMEM>>>(stages, (float *)g_out, cyc)));
    const double cycles = sm_cycles(cyc), cps = cycles / stages;
    const double flop = 2.0 * 64 * 256 * 64 * (double)stages * g_sms, tflops = flop / (ms * 1e-3) / 1e12;
    printf("swp CW%d PW%d exp%d tok%d regs=%3d  %8.1f cyc/stage  ratio %5.2f  %7.1f TFLOP/s  %5.1f%%990  %6.3f GHz\n", CW, PW,
           EXP, TOK, fa.numRegs, cps, cps / 512.0, tflops, 100.0 * tflops / 990.0, cycles / (ms * 1e-3) / 1e9);
}

static void part4(void)
{
    long long *cyc;
    CK(cudaMalloc(&cyc, (size_t)g_sms * sizeof(long long)));
    printf("\n== Part 4: swapped SS form: m64 (tokens) x n256 (weights expanded into a %d-stage ring) x k64 per stage, "
           "tensor 512 cycles per stage ==\n",
           SW_STAGES);
    case_swp<1, 1, 0, 0>(cyc), case_swp<1, 2, 0, 0>(cyc), case_swp<1, 1, 1, 0>(cyc), case_swp<1, 2, 1, 0>(cyc);
    case_swp<2, 1, 1, 0>(cyc), case_swp<2, 2, 1, 0>(cyc), case_swp<1, 2, 1, 1>(cyc), case_swp<2, 2, 1, 1>(cyc);
    case_swp<2, 1, 1, 1>(cyc);
    CK(cudaFree(cyc));
}

// ============================ Part 3: short streams, as a step ============================

// A decode step's MoE reads 170 MB (1 token of a GLM-5 layer: 8 experts) to 1.3 GB: how long
// does a kernel that only reads that many bytes take, timed the way bench-moe times a step
// (each run between two events, runs queued back to back, as stream launches and as CUDA
// graph replays, offsets rotating through 8 GiB)? The difference to bytes / bandwidth is
// launch, ramp-up and tail: what no MoE kernel of that size can avoid.
static void part3(void)
{
    printf("\n== Part 3: short pure-read kernels (ld.nc, 512 threads x 2 blocks per SM, 4 loads in flight per lane), "
           "median of 30 runs queued back to back ==\n");
    printf("bytes          stream ms   GB/s   graph ms   GB/s   graph us - bytes/(copy x 1.09)\n");
    const size_t sizes[] = {170000000ull, 326000000ull, 680000000ull, 1300000000ull};
    const int threads = 512, k = 2, U = 4, nw = g_sms * k * threads / 32, RUNS = 30, SETS = 16;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t ev[2 * RUNS];
    for (int i = 0; i < 2 * RUNS; i++) CK(cudaEventCreate(&ev[i]));
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t chunk16 = (sizes[si] / 16 / nw) / (32 * U) * (32 * U), bytes = chunk16 * 16 * nw;
        const uint4 *srcs[SETS];
        for (int j = 0; j < SETS; j++) {  // offsets spread over both buffers, 4 KiB aligned
            const size_t span = BUF_BYTES - bytes, off = ((size_t)j * 0x9E3779B97F4A7C15ull >> 20) % span & ~(size_t)4095;
            srcs[j] = (const uint4 *)(g_buf[j & 1] + off);
        }
        float ms[2];
        for (int mode = 0; mode < 2; mode++) {
            cudaGraphExec_t gx[SETS];
            if (mode == 1)
                for (int j = 0; j < SETS; j++) {
                    cudaGraph_t gr;
                    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                    k_read<U><<<g_sms * k, threads, 0, st>>>(srcs[j], chunk16, g_out);
                    CK(cudaStreamEndCapture(st, &gr));
                    CK(cudaGraphInstantiate(&gx[j], gr, 0));
                    CK(cudaGraphDestroy(gr));
                }
            for (int w = 0; w < SETS; w++) {  // warm-up
                if (mode == 1) CK(cudaGraphLaunch(gx[w], st));
                else k_read<U><<<g_sms * k, threads, 0, st>>>(srcs[w], chunk16, g_out);
            }
            for (int i = 0; i < RUNS; i++) {
                CK(cudaEventRecord(ev[2 * i], st));
                if (mode == 1) CK(cudaGraphLaunch(gx[i % SETS], st));
                else k_read<U><<<g_sms * k, threads, 0, st>>>(srcs[i % SETS], chunk16, g_out);
                CK(cudaEventRecord(ev[2 * i + 1], st));
            }
            CK(cudaStreamSynchronize(st));
            CKL();
            float t[RUNS];
            for (int i = 0; i < RUNS; i++) CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
            ms[mode] = median(t, RUNS);
            if (mode == 1)
                for (int j = 0; j < SETS; j++) CK(cudaGraphExecDestroy(gx[j]));
        }
        const double ideal_us = bytes / (g_copy_gbs * 1.09e9) * 1e6;
        printf("%-12zu %9.4f %7.0f %9.4f %7.0f   %6.1f\n", bytes, ms[0], bytes / (ms[0] * 1e6), ms[1], bytes / (ms[1] * 1e6),
               ms[1] * 1e3 - ideal_us);
    }
    for (int i = 0; i < 2 * RUNS; i++) CK(cudaEventDestroy(ev[i]));
    CK(cudaStreamDestroy(st));
}

int main(int argc, char **argv)
{
    const int part = argc > 1 ? atoi(argv[1]) : 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    printf("hopper_probe: %s, sm_%d%d, %d SMs, L2 %d MiB, %.1f GiB\n", prop.name, prop.major, prop.minor, g_sms,
           l2 >> 20, prop.totalGlobalMem / 1073741824.0);
    if (prop.major != 9) {
        fprintf(stderr, "needs an sm_90 (Hopper) GPU\n");
        return 1;
    }
    if (g_sms > 1024) return 1;
    CK(cudaEventCreate(&g_e0));
    CK(cudaEventCreate(&g_e1));
    CK(cudaMalloc(&g_out, (size_t)g_sms * 8 * 512 * sizeof(uint32_t)));
    if (part == 0 || part == 1) {
        CK(cudaMalloc(&g_buf[0], BUF_BYTES));
        CK(cudaMalloc(&g_buf[1], BUF_BYTES));
        part1();
        part3();
        CK(cudaFree(g_buf[0]));
        CK(cudaFree(g_buf[1]));
    }
    if (part == 0 || part == 2) part2();
    if (part == 0 || part == 4) part4();
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    printf("\nhopper_probe: done\n");
    return 0;
}

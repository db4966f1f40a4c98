// The slice kernel of the NVFP4 MoE FFN (ops/cuda/moe.h): steps of at most 8 tokens
// (decode at batch 1-8), where the step's time is the touched experts' weight bytes.
//
// The other stream kernels run gate_up and down as separate items with a dependency between
// them (a tile's down items wait for all of its gate_up items, through counters), so the
// down weights start streaming only after the slowest gate_up item of their expert. Here one
// item is (tile of an expert's slots, 64-row slice of the intermediate) and does both GEMMs
// of its slice in one block:
//   gate_up: the slice's 4 gate + 4 up row tiles x all of K (8 warps: a gate/up pair and a
//            half of K each), SiLU(gate) * up rounded to BF16 into shared memory;
//   down:    W2's 64-wide k-tile of the slice, every one of its row tiles, against those 64
//            values, times the routing weight, added into out with F32 atomics (the sum over
//            the 32 slices of an expert and over the top-k slots).
// No item waits on another, so the HBM stream never stops for a hand-off. Each warp streams
// its weights through its own ring of SL_STAGES 1 KB stages in shared memory (16-byte
// cp.async per lane, each lane reading back only its own bytes: no barrier), one sequence
// across gate_up, down and the next item, so ~9 KB per warp stay in flight at 90 registers
// (a register double buffer holds 4-8 KB at 128 and spills). The tokens (x, at most 8 rows)
// are staged in shared memory once per block. Every block routes the ids itself (moe_route_small); a
// one-block kernel before it zeroes out (unless accumulating) and this kernel, launched with
// programmatic dependent launch, waits for it (griddepcontrol.wait) only before its first
// atomic, so weight streaming starts at launch. Items are taken round-robin; the grid is two
// blocks of 8 warps per SM.
// Same numerics as the other kernels except the order of the F32 sum over the intermediate
// (32 partial sums of 64 added by atomics instead of one sum of 2048).
// Tests: tests/cuda_moe/test_moe.c (moe_slice); timing: nibble bench-moe --tokens 1,2,
// NIBBLE_MOE_SLICE=0|1|2 (off, auto, forced where it applies) for A/B runs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_dev.h"

#define SL_WARPS 8
#define SL_THREADS (SL_WARPS * 32)
#define SL_ROWS 64       // intermediate rows per item: one 64-wide k-tile of W2
#define SL_TOKENS 8      // tokens of a step (one n8 fragment per tile)
#define SL_STAGES 10     // stages of each warp's cp.async ring
#define SL_STAGE 1024    // bytes of one stage of a warp (32 per lane)
#define SL_ACT_ROW 144   // bytes per token row of the slice's activations (64 BF16 + padding)

// Dynamic shared memory: each warp's ring of weight stages, x rows (hidden BF16 + 16 bytes of
// padding each, so that the fragment reads of 8 token rows hit distinct banks), the slice's
// activations, the K-half partial sums.
static inline __host__ __device__ size_t sl_x_row(int hidden) { return (size_t)hidden * 2 + 16; }
static inline size_t sl_smem(int tokens, int hidden)
{
    return (size_t)SL_WARPS * SL_STAGES * SL_STAGE + (size_t)tokens * sl_x_row(hidden) + SL_TOKENS * SL_ACT_ROW +
           4 * 2 * 4 * 32 * sizeof(float);
}

// Zeroes out (unless accumulating) and lets the slice kernel start at once.
__global__ void __launch_bounds__(1024) moe_slice_prep_kernel(float *out, size_t n)
{
    griddep_launch_dependents();
    for (size_t i = threadIdx.x * 4; i < n; i += 1024 * 4) *(float4 *)(out + i) = make_float4(0, 0, 0, 0);
}

// Token fragment of k-tile kt for lane (g, t): 16 BF16 of its staged x row at k 64 kt + 16 t.
__device__ __forceinline__ void sl_load_b(const char *xrow, int kt, uint32_t (&b)[1][8])
{
    const uint4 lo = *(const uint4 *)(xrow + kt * 128), hi = *(const uint4 *)(xrow + kt * 128 + 16);
    b[0][0] = lo.x, b[0][1] = lo.y, b[0][2] = lo.z, b[0][3] = lo.w;
    b[0][4] = hi.x, b[0][5] = hi.y, b[0][6] = hi.z, b[0][7] = hi.w;
}

__device__ __forceinline__ void cp_async8(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(gmem) : "memory");
}

// A warp's weight loads, in the order it consumes them, item after item (items blockIdx.x +
// k gridDim.x): j < nkt: k-tile kt0 + j of its gate and up row tiles (two 512-byte fragment
// blocks); then j = nkt + m: row tile warp + 8 m of W2's k-tile sl (512 bytes of codes and
// the 256 bytes of scales of the tile's k-group). This lane's source pointers advance by
// constant strides within an item and are recomputed once per item.
struct sl_prod {
    const uint8_t *a, *b, *c, *s;
    int item, j;
};

__device__ __forceinline__ void sl_prod_item(const moe_params &p, const moe_small_route &rt, int n_items, int pr,
                                             int kt0, sl_prod &q)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, H = p.hidden, I = p.inter, S = I / SL_ROWS;
    q.j = 0;
    if (q.item >= n_items) return;
    const int e = rt.tiles[q.item / S].x, sl = q.item % S;
    const uint8_t *wbase = p.w13 + (size_t)e * ((size_t)I * H);
    const size_t ktiles = H / 64, nta = sl * 4 + pr, ntb = I / 16 + sl * 4 + pr;
    q.a = wbase + (nta * ktiles + kt0) * 512 + lane * 16;
    q.b = wbase + (ntb * ktiles + kt0) * 512 + lane * 16;
    q.c = p.w2 + (size_t)e * ((size_t)H * I / 2) + ((size_t)warp * (I / 64) + sl) * 512 + lane * 16;
    q.s = p.s2 + (size_t)e * ((size_t)H * I / 16) + ((size_t)warp * (I / 256) + (sl >> 2)) * 256 + lane * 8;
}

// One ring stage: this lane's pieces of the next stage of the sequence into `slot` (1 KB
// per warp; each lane reads back only its own bytes, so no barrier is needed), as one
// cp.async group (an empty one past the last item, keeping wait_group's count uniform).
__device__ __forceinline__ void sl_issue(const moe_params &p, const moe_small_route &rt, int n_items, int pr, int kt0,
                                         int nkt, int mtiles, sl_prod &q, char *slot)
{
    const int lane = threadIdx.x & 31;
    if (q.item < n_items) {
        if (q.j < nkt) {
            cp_async16(slot + lane * 16, q.a, true);
            cp_async16(slot + 512 + lane * 16, q.b, true);
            q.a += 512, q.b += 512;
        } else {
            cp_async16(slot + lane * 16, q.c, true);
            cp_async8(slot + 512 + lane * 8, q.s);
            q.c += (size_t)SL_WARPS * (p.inter / 64) * 512, q.s += (size_t)SL_WARPS * (p.inter / 256) * 256;
        }
        if (++q.j == nkt + mtiles) {
            q.item += gridDim.x;
            sl_prod_item(p, rt, n_items, pr, kt0, q);
        }
    }
    cp_async_commit();
}

// This lane's 8 bytes of scales of k-group kg of pair pr (gate row tile 4 sl + pr, up row
// tile inter/16 + 4 sl + pr) of expert e's W13.
__device__ __forceinline__ void sl_gu_scales(const moe_params &p, int e, int sl, int pr, int kg, uint2 &sa,
                                             uint2 &sb)
{
    const int lane = threadIdx.x & 31, H = p.hidden, I = p.inter, kgroups = H / 256;
    const uint8_t *sbase = p.s13 + (size_t)e * ((size_t)2 * I * H / 16);
    const size_t nta = sl * 4 + pr, ntb = I / 16 + sl * 4 + pr;
    sa = ld_stream2(sbase + (nta * kgroups + kg) * 256 + lane * 8);
    sb = ld_stream2(sbase + (ntb * kgroups + kg) * 256 + lane * 8);
}

__global__ void __launch_bounds__(SL_THREADS, 2) moe_slice_kernel(moe_params p)
{
    extern __shared__ uint4 sl_dyn[];
    __shared__ moe_small_route rt;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int H = p.hidden, I = p.inter, S = I / SL_ROWS;
    char *ring = (char *)sl_dyn + (size_t)warp * SL_STAGES * SL_STAGE;
    char *xs = (char *)sl_dyn + (size_t)SL_WARPS * SL_STAGES * SL_STAGE;
    char *acts = xs + (size_t)p.tokens * sl_x_row(H);
    float *red = (float *)(acts + SL_TOKENS * SL_ACT_ROW);

    // gate_up geometry of this warp: pair (warp & 3) of the slice, K half (warp >> 2)
    const int kgroups_gu = H / 256, half = warp >> 2, pr = warp & 3;
    const int kg0 = half * kgroups_gu / 2, kg1 = (half + 1) * kgroups_gu / 2, kt0 = 4 * kg0, nkt = 4 * (kg1 - kg0);
    // down geometry: row tiles warp + 8 m, m < mtiles, of W2's k-tile (the slice)
    const int mtiles = (H / 16 - warp + SL_WARPS - 1) / SL_WARPS;

    moe_route_small(p.ids, p.slots, p.experts, SL_TOKENS, rt);
    const int n_items = rt.ntiles * S;
    if ((int)blockIdx.x >= n_items) return;
    // The step's token rows (16-byte cp.async chunks, the oldest group), then the first
    // SL_STAGES - 1 stages of the weights.
    {
        const int chunks = H / 8;  // 16-byte chunks per row
        for (int c = tid; c < p.tokens * chunks; c += SL_THREADS) {
            const int r = c / chunks, k = c % chunks;
            cp_async16(xs + (size_t)r * sl_x_row(H) + k * 16, p.x + (size_t)r * H + k * 8, true);
        }
        cp_async_commit();
    }
    sl_prod cur;
    cur.item = blockIdx.x;
    sl_prod_item(p, rt, n_items, pr, kt0, cur);
#pragma unroll 1
    for (int i = 0; i < SL_STAGES - 1; i++) sl_issue(p, rt, n_items, pr, kt0, nkt, mtiles, cur, ring + i * SL_STAGE);
    int ld = SL_STAGES - 1, use = 0;  // ring slots of the next stage issued / consumed
    uint2 nsa = make_uint2(0, 0), nsb = nsa;  // scales of the next k-group to consume
    if (nkt) sl_gu_scales(p, rt.tiles[blockIdx.x / S].x, blockIdx.x % S, pr, kg0, nsa, nsb);
    cp_async_wait<SL_STAGES - 1>();  // the x rows (the oldest group), of every thread
    __syncthreads();

    bool waited = false;  // griddepcontrol.wait done (out zeroed by the prep kernel)
    for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int4 tl = rt.tiles[item / S];
        const int e = tl.x, first_slot = tl.y, cnt = tl.z, sl = item % S, next = item + gridDim.x;
        // This lane's token column g of the tile: its staged x row (column 0's for columns
        // past the tile: their outputs are never used).
        const char *xrow = xs + (size_t)(rt.sorted[first_slot + (g < cnt ? g : 0)] / p.topk) * sl_x_row(H) + t * 32;

        // ---- gate_up: pair pr, k-tiles kt0 .. kt0 + nkt ----
        float acca[1][4] = {{0, 0, 0, 0}}, accb[1][4] = {{0, 0, 0, 0}};
        for (int j0 = 0; j0 < nkt; j0 += 4) {
            const uint2 csa = nsa, csb = nsb;
            if (j0 + 4 < nkt)
                sl_gu_scales(p, e, sl, pr, kg0 + j0 / 4 + 1, nsa, nsb);
            else if (next < n_items)
                sl_gu_scales(p, rt.tiles[next / S].x, next % S, pr, kg0, nsa, nsb);
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                sl_issue(p, rt, n_items, pr, kt0, nkt, mtiles, cur, ring + ld * SL_STAGE);
                ld = ld + 1 == SL_STAGES ? 0 : ld + 1;
                cp_async_wait<SL_STAGES - 1>();
                const char *st = ring + use * SL_STAGE;
                use = use + 1 == SL_STAGES ? 0 : use + 1;
                const uint4 wa = *(const uint4 *)(st + lane * 16), wb = *(const uint4 *)(st + 512 + lane * 16);
                uint32_t b[1][8];
                sl_load_b(xrow, kt0 + j0 + qq, b);
                const uint32_t s2a = (qq < 2 ? csa.x : csa.y) >> ((qq & 1) * 16);
                const uint32_t s2b = (qq < 2 ? csb.x : csb.y) >> ((qq & 1) * 16);
                if (!(p.slice_lab & 2))
                    moe_ktile<1>(wa, wb, s2a, s2b, b, acca, accb);
                else  // lab: the loads only
                    acca[0][0] += __uint_as_float((wa.x ^ wb.y ^ b[0][0] ^ s2a ^ s2b) & 0x3f800000u);
            }
        }

        // ---- K halves -> SiLU(gate) * up, BF16, into the slice's activations ----
        if (half) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                red[((pr * 2 + 0) * 4 + i) * 32 + lane] = acca[0][i];
                red[((pr * 2 + 1) * 4 + i) * 32 + lane] = accb[0][i];
            }
        }
        __syncthreads();
        if (!half) {
            const float fg = MOE_ACC_FIX * p.g13[2 * e], fu = MOE_ACC_FIX * p.g13[2 * e + 1];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = 2 * t + (i & 1), r = pr * 16 + g + (i >> 1) * 8;
                const float gv = (acca[0][i] + red[((pr * 2 + 0) * 4 + i) * 32 + lane]) * fg;
                const float uv = (accb[0][i] + red[((pr * 2 + 1) * 4 + i) * 32 + lane]) * fu;
                const float a = gv / (1.0f + __expf(-gv)) * uv;
                *(uint16_t *)(acts + col * SL_ACT_ROW + r * 2) = col < cnt ? f32_to_bf16_rn(a) : 0;
            }
        }
        __syncthreads();

        // ---- down: row tiles warp + 8 m of W2's k-tile sl against the 64 activations ----
        uint32_t b[8];
        {
            const uint4 lo = *(const uint4 *)(acts + g * SL_ACT_ROW + t * 32);
            const uint4 hi = *(const uint4 *)(acts + g * SL_ACT_ROW + t * 32 + 16);
            b[0] = lo.x, b[1] = lo.y, b[2] = lo.z, b[3] = lo.w, b[4] = hi.x, b[5] = hi.y, b[6] = hi.z, b[7] = hi.w;
        }
        // Output rows of this lane's columns: token and routing weight (times the down
        // matrix's global scale and the expansion's 2^-7 fix).
        const float f = MOE_ACC_FIX * p.g2[e];
        float rw[2];
        float *orow[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int col = 2 * t + h;
            const int slot = col < cnt ? rt.sorted[first_slot + col] : 0;
            rw[h] = col < cnt ? (p.route_w ? p.route_w[slot] : 1.0f) * f : 0.0f;
            orow[h] = col < cnt ? p.out + (size_t)(slot / p.topk) * H : nullptr;
        }
        if (!waited) griddep_wait(), waited = true;
        for (int m = 0; m < mtiles; m++) {
            sl_issue(p, rt, n_items, pr, kt0, nkt, mtiles, cur, ring + ld * SL_STAGE);
            ld = ld + 1 == SL_STAGES ? 0 : ld + 1;
            cp_async_wait<SL_STAGES - 1>();
            const char *st = ring + use * SL_STAGE;
            use = use + 1 == SL_STAGES ? 0 : use + 1;
            const uint4 w = *(const uint4 *)(st + lane * 16);
            const uint2 sc = *(const uint2 *)(st + 512 + lane * 8);
            uint32_t sg, sg8;
            expand_scales(((sl & 2) ? sc.y : sc.x) >> ((sl & 1) * 16), sg, sg8);
            const uint32_t w4[4] = {w.x, w.y, w.z, w.w};
            float c[4] = {0, 0, 0, 0};
            if (!(p.slice_lab & 2)) {
#pragma unroll
                for (int s4 = 0; s4 < 4; s4++) {
                    uint32_t a[4];
                    expand_codes(w4[s4], sg, sg8, a);
                    mma_bf16(c, a[0], a[1], a[2], a[3], b[2 * s4], b[2 * s4 + 1]);
                }
            } else {  // lab: the loads only
                c[0] = __uint_as_float((w4[0] ^ w4[3] ^ sg) & 0x3f800000u);
            }
            const int r = (warp + SL_WARPS * m) * 16 + g;
            if (!(p.slice_lab & 1)) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (orow[i & 1]) atomicAdd(orow[i & 1] + r + (i >> 1) * 8, c[i] * rw[i & 1]);
            } else if (c[0] == 12345.0f && orow[0]) {  // lab: no atomics (keeps c alive)
                orow[0][r] = c[1] + c[2] + c[3];
            }
        }
        __syncthreads();  // acts and red are rewritten by the next item
    }
}

// ---- launcher ----------------------------------------------------------------------------

static int sl_forced = -1;  // nb_moe_slice_set; -1: NIBBLE_MOE_SLICE

extern "C" void nb_moe_slice_set(int mode) { sl_forced = mode; }

// 0 off, 1 auto (steps that fill the GPU), 2 wherever it can run.
static int sl_mode(void)
{
    if (sl_forced >= 0) return sl_forced;
    const char *v = getenv("NIBBLE_MOE_SLICE");
    if (!v || !*v) return 0;  // measured slower than the small-step kernel at 1-8 tokens
    if (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "2")) return atoi(v);
    NB_LOG_WARN("cuda", "moe: ignoring NIBBLE_MOE_SLICE=%s (expected 0, 1 or 2)", v);
    return 0;
}

int moe_slice_wanted(int tokens, int topk, int experts, int inter, int has_ids, int sms)
{
    const int mode = sl_mode();
    if (!mode || !has_ids || tokens < 1 || tokens > SL_TOKENS || tokens * topk > MOE_SMALL_SLOTS) return 0;
    if (mode == 2) return 1;
    // Expected items (touched experts x slices) should cover every SM at least once.
    double touched = experts * (1.0 - pow(1.0 - (double)topk / experts, (double)tokens));
    return touched * (inter / SL_ROWS) >= sms;
}

nb_status moe_launch_slice(const moe_params &p, int sms, cudaStream_t st)
{
    static int optin = 0, dyn_set = 0, per_sm[SL_TOKENS + 1], per_sm_h[SL_TOKENS + 1];
    if (!optin) {
        int dev = 0;
        NB_CUDA_TRY(cudaGetDevice(&dev));
        NB_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    const size_t dyn = sl_smem(p.tokens, p.hidden);
    if (dyn + sizeof(moe_small_route) > (size_t)optin)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "moe: slice kernel needs %zu bytes of shared memory for %d tokens of hidden %d, the device "
                        "allows %d per block",
                        dyn + sizeof(moe_small_route), p.tokens, p.hidden, optin);
    if ((int)dyn > dyn_set) {
        NB_CUDA_TRY(cudaFuncSetAttribute(moe_slice_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        dyn_set = (int)dyn;
    }
    int &occ = per_sm[p.tokens];
    if (!occ || per_sm_h[p.tokens] != p.hidden) {
        NB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, moe_slice_kernel, SL_THREADS, dyn));
        if (occ < 1) return nb_error(NB_ERR_CUDA, "moe: slice kernel cannot be resident (%zu bytes)", dyn);
        per_sm_h[p.tokens] = p.hidden;
    }
    // A plain launch: the slice kernel reads x and ids before its griddepcontrol.wait, relying
    // on this kernel starting only once their producers are done.
    moe_params q = p;
    const char *lab = getenv("NIBBLE_MOE_SLICE_LAB");  // timing only: wrong results
    q.slice_lab = lab ? atoi(lab) & 3 : 0;
    moe_slice_prep_kernel<<<1, 1024, 0, st>>>(p.out, p.zero_elems);
    NB_CUDA_TRY(cudaGetLastError());
    const int max_items = p.slots * (p.inter / SL_ROWS);
    int grid = sms * occ;
    if (grid > max_items) grid = max_items;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(SL_THREADS);
    cfg.dynamicSmemBytes = dyn;
    cfg.stream = st;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    NB_CUDA_TRY(cudaLaunchKernelEx(&cfg, moe_slice_kernel, q));
    return NB_OK;
}

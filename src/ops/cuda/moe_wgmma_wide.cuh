// The wide form of the 16-warp wgmma MoE kernel (moe_wgmma.cu, L == 2; NIBBLE_MOE_WG_WIDE):
// token tiles of up to NB_MOE_WG_WIDE_TILE (128) tokens, each multiplied at n64, n80 / n96 or n128
// (the narrowest that covers it), and ONE 16-row weight tile per warp instead of two.
//
// Why: the expansion of a weight (expand_codes, 16 instructions per word of 8 codes) is paid
// once per token tile. With two row tiles per warp (gate and up, or two of down) the 16-warp
// block's accumulators are 2 x N/2 registers, which caps its tiles at 48 tokens in 128
// registers; from ~40 tokens per expert on, the ladder then fell back to the 8-warp kernel's
// 64-token tiles, and an expert of 70 tokens paid its expansion twice (64 + 6) at two warps
// per scheduler. One tile per warp halves the accumulators, so the same 128 registers hold
// n128 (64 F32), and the tensor time per expansion doubles: at n128 a warpgroup's wgmma is 64
// tensor cycles against ~16 issue cycles of expansion.
//
// Rows: a gate_up item is 8 intermediate tiles (warps 2i and 2i + 1: the gate and the up
// tile of intermediate tile 8 rb + i); the two halves meet in the epilogue through shared
// memory (the ring, idle by then). A down item is 16 tiles of W2 (256 output rows). The ring
// and its stage order are the lean loop's (moe_wg_item_lean), with a stage of the token
// slice, each warp's codes of its one tile (2 k-tiles x 512 B) and its k-group's scales
// (256 B, copied by the group's first slice).
// The ring hands its stages over by mbarriers (moe_wgmma.cu, moe_mb_*), not by a block barrier
// per slice (5-9 % faster at 2048-4096 tokens; bench/RESULTS.md, issue 8, seventeenth session);
// the item boundaries keep their block barriers.
// Included by moe_wgmma.cu only (it needs that file's MOE_WG_ARCH, moe_wg_rows, moe_mb_* and
// the column table).
#ifndef NB_OPS_CUDA_MOE_WGMMA_WIDE_CUH
#define NB_OPS_CUDA_MOE_WGMMA_WIDE_CUH

#define MOE_WGW_CODES_OFF(N) ((N) * 256)
#define MOE_WGW_SCALES_OFF(N, w) ((N) * 256 + (w) * 1024)
#define MOE_WGW_STAGE_BYTES(N, w) ((N) * 256 + (w) * 1280)  // a multiple of 1024 for W % 4 == 0

// This warp's one tile of an item: gate_up rb covers intermediate tiles W/2 rb .. W/2 rb + W/2 - 1
// (warp 2i: gate, 2i + 1: up, `pair` = the intermediate tile); down rb covers W2 tiles
// W rb .. W rb + W - 1 (`pair` = the W2 tile). wb / sb stay unused.
template <bool DN, int W>
__device__ __forceinline__ moe_wg_rows moe_wgw_item_rows(const moe_params &p, int e, int rb, int warp)
{
    moe_wg_rows r;
    const int n = DN ? p.hidden : 2 * p.inter, K = DN ? p.inter : p.hidden;
    const int ktiles = K / 64, kgroups = K / 256;
    r.slices = K / MOE_WG_SLICE;
    r.pair = DN ? rb * W + warp : rb * (W / 2) + (warp >> 1);
    const int nt = DN ? r.pair : r.pair + ((warp & 1) ? p.inter / 16 : 0);
    const uint8_t *wbase = (DN ? p.w2 : p.w13) + (size_t)e * ((size_t)n * K / 2);
    const uint8_t *sbase = (DN ? p.s2 : p.s13) + (size_t)e * ((size_t)n * K / 16);
    r.wa = wbase + (size_t)nt * ktiles * 512, r.sa = sbase + (size_t)nt * kgroups * 256;
    r.wb = r.sb = nullptr;
    return r;
}

// Per-thread copy plan of one item (moe_wg_plan, compacted for the 128 registers n128 leaves):
// token chunk m of this thread is row r0 + 32 m of the tile (512 threads, 16 chunks per row),
// so its swizzled offset is tdst + 4096 m, and bit m of tsz says whether the row exists.
template <int TM>
struct moe_wgw_plan {
    const char *tsrc[TM];
    uint32_t tdst, tsz;
    const uint8_t *pa, *ps;
    uint32_t cw, cs;
};

// Slice copies into the stage at shared address st (moe_wg_lean_stage with one code tile and
// 256 bytes of scales, lanes 0-15), then the sources advance to the next slice.
template <int N, int W, int TM>
__device__ __forceinline__ void moe_wgw_stage(moe_wgw_plan<TM> &pl, uint32_t st, bool scales, bool odd)
{
    constexpr bool PART = N * 16 % (W * 32) != 0;
#pragma unroll
    for (int m = 0; m < TM; m++) {
        if (!PART || m < TM - 1 || threadIdx.x + m * (W * 32) < N * 16)
            cp_async16_sz(st + pl.tdst + 4096u * m, pl.tsrc[m], ((pl.tsz >> m) & 1u) << 4);
        pl.tsrc[m] += 256;
    }
    cp_async16_s(st + pl.cw, pl.pa);
    cp_async16_s(st + pl.cw + 512, pl.pa + 512);
    if (scales && (threadIdx.x & 31) < 16) cp_async16_s(st + pl.cs, pl.ps);
    pl.pa += 1024;
    if (odd) pl.ps += 256;
    cp_async_commit();
}

// The item's results. down: the routing weight times the W2 tile's rows into out (atomics:
// the sum over the k slots), columns looked up in the kernel's table (moe_wg_tok / moe_wg_rw).
// gate_up: the two warps of a pair swap halves through the ring ([pair][register][lane]
// floats, conflict-free): the gate warp hands over its gate values of the upper half of the
// columns and takes the up values of the lower half, the up warp the reverse, and each writes
// SiLU(gate) * up of its half into act in wgmma order (both warps busy, not one of two).
template <int N, bool DN, int W>
__device__ __forceinline__ void moe_wgw_epilogue(const moe_params &p, const float (&d)[N / 2], char *ring, int e,
                                                 int start, int cnt, int pair)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    if constexpr (DN) {
#pragma unroll
        for (int j = 0; j < N / 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = j * 8 + 2 * t + (i & 1), r = pair * 16 + g + (i >> 1) * 8;
                if (col < cnt) atomicAdd(p.out + (size_t)moe_wg_tok[col] * p.hidden + r, d[4 * j + i] * moe_wg_rw[col]);
            }
    } else {
        constexpr int HJ = N / 16;  // column groups of 8 in each half
        float *xb = (float *)ring + (warp >> 1) * (N / 2) * 32 + lane;
        const bool up = warp & 1;
        __syncthreads();  // every warpgroup's wgmmas are done with the ring (wait_group 0)
        // Hand over the other half: the gate warp its groups HJ.., the up warp its groups 0..HJ-1.
        // (indices stay compile-time: a runtime index into d would put it in local memory)
#pragma unroll
        for (int j = 0; j < HJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (up)
                    xb[(4 * j + i) * 32] = d[4 * j + i];
                else
                    xb[(4 * (j + HJ) + i) * 32] = d[4 * (j + HJ) + i];
            }
        __syncthreads();
        const float fg = MOE_ACC_FIX * p.g13[2 * e], fu = MOE_ACC_FIX * p.g13[2 * e + 1];
#pragma unroll
        for (int j = 0; j < HJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int jj = up ? j + HJ : j;  // this warp's own half
                const int col = jj * 8 + 2 * t + (i & 1), r = pair * 16 + g + (i >> 1) * 8;
                if (col < cnt) {
                    const float mine = up ? d[4 * (j + HJ) + i] : d[4 * j + i], other = xb[(4 * jj + i) * 32];
                    const float gv = (up ? other : mine) * fg, uv = (up ? mine : other) * fu;
                    const float a = gv / (1.0f + __expf(-gv)) * uv;
                    p.act[(size_t)(start + col) * p.inter + (r & ~63) + wg_pos64(r & 63)] = f32_to_bf16_rn(a);
                }
            }
    }
}

// One item at instruction width N (>= the tile's cnt tokens), accumulating in dall's first N/2.
template <int N, bool DN, int W>
__device__ __forceinline__ void moe_wgw_item(const moe_params &p, char *ring, const long long *row, int e, int start,
                                             int cnt, int rb, float (&dall)[NB_MOE_WG_WIDE_TILE / 2], uint64_t *mbar,
                                             uint32_t &gsl)
{
#if MOE_WG_ARCH
    static_assert(W == 16, "the wide form is the 16-warp kernel's");
    constexpr int STAGES = NB_MOE_WG16_STAGES, AHEAD = STAGES - 2, SB = MOE_WGW_STAGE_BYTES(N, W);
    constexpr int TM = (N * 16 + W * 32 - 1) / (W * 32);
    static_assert(SB % 1024 == 0, "token slices must stay 1024-aligned");
    static_assert((N / 2) * 32 * 4 * (W / 2) <= STAGES * SB, "the epilogue's hand-off fits the ring");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const moe_wg_rows wr = moe_wgw_item_rows<DN, W>(p, e, rb, warp);
    const int slices = wr.slices;
    const uint16_t *bbase = DN ? p.act : p.xp;
    static_assert(W * 32 == 512, "chunk m of a thread is row r0 + 32 m");
    moe_wgw_plan<TM> pl;
    const int r0 = tid >> 4, q0 = (tid >> 3) & 1, ch = tid & 7;
    pl.tdst = (uint32_t)(q0 * (N * 128) + (r0 >> 3) * 1024 + (r0 & 7) * 128 + ((ch ^ (r0 & 7)) << 4));
    pl.tsz = 0;
#pragma unroll
    for (int m = 0; m < TM; m++) {
        const int r = (r0 + 32 * m) % N;  // rows past N (the last round's idle threads) copy nothing
        const long long off = row[r];
        pl.tsrc[m] = (const char *)(bbase + (off < 0 ? 0 : off) + q0 * 64 + ch * 8);
        pl.tsz |= (off >= 0 ? 1u : 0u) << m;
    }
    pl.pa = wr.wa + lane * 16;
    pl.ps = wr.sa + (lane & 15) * 16;
    pl.cw = (uint32_t)(MOE_WGW_CODES_OFF(N) + warp * 1024 + lane * 16);
    pl.cs = (uint32_t)(MOE_WGW_SCALES_OFF(N, W) + warp * 256 + (lane & 15) * 16);
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    float(&d)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(&dall[0]);
#pragma unroll
    for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
    uint32_t ar[2][4];

    const uint32_t mb = (uint32_t)__cvta_generic_to_shared(mbar), g0 = gsl;
#pragma unroll
    for (int i = 0; i < AHEAD; i++) {
        if (i < slices) {
            moe_mb_wait_empty<STAGES>(mb, g0 + i);
            moe_wgw_stage<N, W, TM>(pl, ring_s + (g0 + i) % STAGES * SB, (i & 1) == 0, (i & 1) == 1);
            moe_mb_filled<STAGES>(mb, g0 + i);
        }
    }
#pragma unroll 1
    for (int sl0 = 0; sl0 < slices; sl0 += 2) {
        uint2 sc;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int sl = sl0 + h;
            const uint32_t gn = g0 + sl + AHEAD;
            if (sl + AHEAD < slices) {
                moe_mb_wait_empty<STAGES>(mb, gn);
                moe_wgw_stage<N, W, TM>(pl, ring_s + gn % STAGES * SB, ((h + AHEAD) & 1) == 0,
                                        ((h + AHEAD) & 1) == 1);
                moe_mb_filled<STAGES>(mb, gn);
            }
            const int sti = (int)((g0 + sl) % STAGES);
            moe_mb_wait_full<STAGES>(mb, g0 + sl);
            const char *stg = ring + sti * SB;
            if (h == 0) sc = *(const uint2 *)(stg + MOE_WGW_SCALES_OFF(N, W) + warp * 256 + lane * 8);
            const uint64_t d0 = wg_desc(ring_s + (uint32_t)(sti * SB));
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const uint4 ca = *(const uint4 *)(stg + MOE_WGW_CODES_OFF(N) + warp * 1024 + q * 512 + lane * 16);
                uint32_t xa, xa8;
                expand_scales((h ? sc.y : sc.x) >> (q * 16), xa, xa8);
                const uint32_t ww[4] = {ca.x, ca.y, ca.z, ca.w};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const int j = s & 1;  // A set j: its last reader (two k-steps back) has completed
                    expand_codes(ww[s], xa, xa8, ar[j]);
                    const uint64_t desc = wg_desc_add(d0, (uint32_t)((q * N * 128 + s * 32) >> 4));
                    wg_fence();
                    moe_wg_mma<N>::run(d, ar[j][0], ar[j][1], ar[j][2], ar[j][3], desc);
                    wg_commit();
                    wg_wait<1>();
                    // only this k-step's wgmma is in flight: slice sl - 1 is done with
                    if (q == 0 && s == 0 && sl > 0) moe_mb_release<STAGES>(mb, g0 + sl - 1);
                }
            }
        }
    }
    wg_wait<0>();
    moe_mb_release<STAGES>(mb, g0 + slices - 1);
    gsl = g0 + slices;
#pragma unroll
    for (int i = 0; i < N / 2; i++) wg_pin(d[i]);
    moe_wgw_epilogue<N, DN, W>(p, d, ring, e, start, cnt, wr.pair);
    __syncthreads();  // the ring and row[] are reused by the next item
#else
    __trap();
#endif
}

// The width per tile: n64, MID (96 or 80) or n128, the narrowest that covers it. Compiled by
// nvcc 13.0 for sm_90a, three widths keep the main loops free of spills. Four ({32 or 80}, 64,
// 96, 128) spill inside the n128 loop. Five or eight (every multiple of 16) make ptxas
// serialize the wgmmas (C7512), and so do four k-steps in flight at n64 / n96 (4 A register
// sets there, 2 at n128). MID 80 is for steps of up to ~72 tokens per expert (2048 tokens of
// GLM-5: 64 +- 8 per expert, so about half the experts need more than 64 and hardly any more
// than 80; 3.3 % faster than MID 96 there, 1.3 % at 2304, 7 % slower at 2560 tokens;
// bench/RESULTS.md, issue 8, thirteenth session).
template <bool DN, int W, int MID>
__device__ __forceinline__ void moe_wgw_dispatch(const moe_params &p, char *ring, const long long *row, int4 tl,
                                                 int rb, uint64_t *mbar, uint32_t &gsl)
{
    static_assert(MID == 80 || MID == 96, "the wide form's middle width");
    // One accumulator array for every width (each uses its first N/2 floats).
    float d[NB_MOE_WG_WIDE_TILE / 2];
    if (tl.z <= 64)
        moe_wgw_item<64, DN, W>(p, ring, row, tl.x, tl.y, tl.z, rb, d, mbar, gsl);
    else if (tl.z <= MID)
        moe_wgw_item<MID, DN, W>(p, ring, row, tl.x, tl.y, tl.z, rb, d, mbar, gsl);
    else
        moe_wgw_item<128, DN, W>(p, ring, row, tl.x, tl.y, tl.z, rb, d, mbar, gsl);
}

#endif

// MLA attention on the GPU in the absorbed form (ops.h nb_op_mla_attention; plan in mla.h).
// Both NB_MLA_NAIVE and NB_MLA_ABSORBED run it (the same function, ops.h).
// The attention kernel works on the latent only, FlashMLA's way: one block per (token, group
// of 16 heads, KV split); each chunk of 32 attended rows [latent | k_pe] is read once into
// shared memory and serves all 16 heads (scores: lane = row, 4 heads per warp; weighted sum:
// 4 latent columns x 16 heads per thread; or, up to NB_CUDA_MLA_F32_H2_MAX tokens, 2 heads per
// warp and 8 heads per thread in 8 warps), with an online softmax per head. A decode batch
// too small to fill the GPU splits each token's rows over blocks (chosen from the token count
// and SM count only, so a captured graph stays valid as contexts grow); a second kernel
// merges the splits. The absorption GEMMs around it are batched over heads (mla_gemm.cu), or
// at 1-2 tokens kernels of their own that also fold in the merge (mla_small.cu, mla.h).
// A tensor-core variant of the attention kernel (k_mla_attend_mma, BF16 mma.sync, 32 heads per
// block) runs where nb_cuda_mla_uses_mma (mla.h) says: NIBBLE_CUDA_MLA=f32|mma, else by
// token count.
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (mla*), timed by
// tests/cuda_ops/test_cuda_vs_cpu_mla_timing.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/mla_dev.cuh"

#define MLA_G 16       /* heads per block */
#define MLA_P 32       /* attended rows per chunk (= lanes) */
#define MLA_THREADS 128
#define MLA_MAX_SPLITS 64

// Asynchronous global -> shared copies (sm_80+): a chunk's rows are all in flight at once
// instead of one dependent load per element.
__device__ __forceinline__ void mla_cp16(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void mla_cp4(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void mla_cp_wait(void)
{
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// A BF16 pool row (a.lat16, a.vec) is staged by cp.async in the tail of its float slot in
// shared memory, at this element offset (BF16 units, 16-byte aligned; the slot holds 2 Dp of
// them) and widened in place once it has landed (mla_widen_row).
__device__ __forceinline__ int mla_stage16(int Dp, int D) { return (2 * Dp - D) & ~7; }

// Row `row` of the pool ([latent | k_pe], or zeros for -1) into dst, by the calling warp. R16,
// a BF16 pool: with 16-byte rows staged (mla_stage16) for mla_widen_row; other BF16 rows are
// loaded and widened here (synchronously).
template <bool R16>
__device__ __forceinline__ void mla_copy_row(const mla_args &a, float *dst, int64_t row, int lane)
{
    const int D = a.r + a.rope, D4 = D / 4, r4 = a.r / 4;
    if (row < 0) {
        for (int c = lane; c < D; c += 32) dst[c] = 0.0f;
        return;
    }
    if (R16) {
        if (a.vec) {
            uint16_t *st = (uint16_t *)dst + mla_stage16(a.Dp, D);
            for (int c8 = lane; c8 < D / 8; c8 += 32) mla_cp16(st + 8 * c8, mla_row16(a, row, 8 * c8));
        } else {
            for (int c = lane; c < D; c += 32) dst[c] = nb_d_bf16(*mla_row16(a, row, c));
        }
        return;
    }
    const float *lr = a.lat + row * a.ls0, *pr = a.kpe + row * a.ps0;
    if (a.vec) {
        for (int c4 = lane; c4 < D4; c4 += 32) mla_cp16(dst + 4 * c4, c4 < r4 ? lr + 4 * c4 : pr + 4 * (c4 - r4));
    } else {
        for (int c = lane; c < D; c += 32) mla_cp4(dst + c, c < a.r ? lr + c : pr + (c - a.r));
    }
}

// The staged BF16 row in dst's slot (mla_copy_row) -> floats in place, by the calling warp, in
// steps of 128 floats: step k reads BF16 elements stage + 128k .. stage + 128k + 127 and
// writes floats 128k .., i.e. BF16 units below 256 (k + 1). A step's stores reach no element
// a later step reads (128 (k + 1) <= stage for every step that has a later one: stage >= D - 7
// and both are multiples of 8), so only a step's own loads and stores are separated.
__device__ __forceinline__ void mla_widen_row(const mla_args &a, float *dst, int lane)
{
    const int D4 = (a.r + a.rope) / 4;
    const uint16_t *st = (const uint16_t *)dst + mla_stage16(a.Dp, a.r + a.rope);
    for (int c0 = 0; c0 < D4; c0 += 32) {
        const int c4 = c0 + lane;
        uint2 u = make_uint2(0u, 0u);
        if (c4 < D4) u = *(const uint2 *)(st + 4 * c4);
        __syncwarp(); /* every lane's loads of this step before any of its stores */
        if (c4 < D4)
            *(float4 *)(dst + 4 * c4) = make_float4(nb_d_bf16((uint16_t)(u.x & 0xffffu)), nb_d_bf16((uint16_t)(u.x >> 16)),
                                                    nb_d_bf16((uint16_t)(u.y & 0xffffu)), nb_d_bf16((uint16_t)(u.y >> 16)));
    }
}

// HPW heads per warp for the scores: 4 (4 warps, a thread accumulates 4 latent columns of all
// 16 heads) or 2 (8 warps, a thread 4 columns of 8 heads): half the serial work per warp and
// twice the warps per chunk, for the few-chunk blocks of small batches.
// G heads per block: 16, or fewer at small token counts (f32_group: more blocks, each reading
// its chunk from shared memory fewer times); NW = G / HPW warps, at least 4 (P.latent's 128
// column threads).
// EARLY (the small path's NB_CUDA_MLA_PDL_CHAIN / _EARLY, mla.h): the first chunk's pool rows
// are looked up and those of positions before the step's tokens (written by earlier steps)
// copied before griddepcontrol.wait, the rest and q (the input step's) after it, so on a
// programmatic launch the row loads overlap the input step; dense attention only (a DSA
// selection is this layer's: then it waits first). Same arithmetic either way.
// R16: BF16 pool rows (a.lat16), widened to float in shared memory (mla_copy_row); a separate
// instance, so that the F32 ones compile as before (ptxas: the runtime branch cost them
// registers and spills).
template <int G, int HPW, bool EARLY, bool R16>
__global__ void __launch_bounds__(32 * G / HPW) k_mla_attend(mla_args a)
{
    constexpr int NW = G / HPW, NT = 32 * NW, GH = 4 * HPW; /* GH: heads per thread in P.latent */
    /* launched as a programmatic dependent (the small path, mla.h): everything it reads is the
     * preceding grids'; then the output step may be scheduled (it waits for this grid). No-ops
     * on a plain launch. */
    bool waited = !EARLY || a.sel_pos;
    if (waited) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    extern __shared__ float4 sh4[];
    const int Dp = a.Dp, D = a.r + a.rope, D4 = D / 4;
    float *qs = (float *)sh4;         /* [G][Dp] */
    float *ks = qs + G * Dp;      /* [P][Dp] */
    float *ps = ks + MLA_P * Dp;      /* [P][G] probabilities */
    float *corr = ps + MLA_P * G; /* [G] */
    float *mfin = corr + G, *lfin = mfin + G;
    int *rowid = (int *)(lfin + G); /* [P] */
    // the head groups of one token are neighbours in the grid: its rows are read from HBM
    // once and served from L2 to the other groups
    const int groups = (a.H + G - 1) / G;
    const int t = blockIdx.x / groups, h0 = (blockIdx.x - t * groups) * G, s = blockIdx.y, S = gridDim.y;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int T2 = a.two * a.T;
    const int ct = tid % MLA_THREADS, hg = (tid / MLA_THREADS) * GH; /* P.latent: columns, first head */

    const int pos = a.idx.pos[t], n = mla_count(a, t);
    const int nch = (n + MLA_P - 1) / MLA_P, cps = (nch + S - 1) / S;
    const int ch0 = s * cps, ch1 = min(nch, ch0 + cps);
    if (S > 1 && ch0 >= ch1) { /* an empty split: the merge reads only its (m, l) */
        if (!waited) asm volatile("griddepcontrol.wait;\n" ::: "memory");
        if (tid < G && h0 + tid < a.H) {
            float *pr = a.part + (((int64_t)t * a.H + h0 + tid) * S + s) * (2 + a.r);
            pr[0] = -INFINITY, pr[1] = 0.0f;
        }
        return;
    }
    const int r4 = a.r / 4;
    if (EARLY && ch0 < ch1) {
        if (tid < MLA_P) {
            int j = ch0 * MLA_P + tid;
            rowid[tid] = j < n ? (int)mla_row(a, t, j, pos) : -1;
        }
        __syncthreads();
        /* positions below pos - T + 1 precede every token of this step: earlier steps wrote them */
        const int safe = waited ? MLA_P : min(MLA_P, max(0, pos - a.T + 1 - ch0 * MLA_P));
        for (int p = w; p < safe; p += NW) mla_copy_row<R16>(a, ks + p * Dp, rowid[p], lane);
        if (!waited) asm volatile("griddepcontrol.wait;\n" ::: "memory");
        for (int p = safe + w; p < MLA_P; p += NW) mla_copy_row<R16>(a, ks + p * Dp, rowid[p], lane);
    }
#pragma unroll 4
    for (int e = tid; e < G * r4; e += NT) {
        const int g = e / r4, c4 = e - g * r4, h = h0 + g;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (h < a.H) {
            const float4 *ql = (const float4 *)(a.qlat + ((int64_t)h * T2 + t) * a.r) + c4;
            v = ql[0];
            if (a.two == 2) {
                float4 u = ql[(int64_t)a.T * r4];
                v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
            }
        }
        *(float4 *)(qs + g * Dp + 4 * c4) = v;
    }
#pragma unroll 4
    for (int e = tid; e < G * a.rope; e += NT) {
        const int g = e / a.rope, c = e - g * a.rope, h = h0 + g;
        qs[g * Dp + a.r + c] = h < a.H ? a.q[(int64_t)t * a.qs0 + (int64_t)h * a.qs1 + a.nope + c] : 0.0f;
    }
    float m[HPW], l[HPW];
#pragma unroll
    for (int j = 0; j < HPW; j++) m[j] = -INFINITY, l[j] = 0.0f;
    float acc[GH][4];
#pragma unroll
    for (int g = 0; g < GH; g++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[g][i] = 0.0f;
    const int col = ct * 4;
    const bool has_col = col < a.r;

    for (int ch = ch0; ch < ch1; ch++) {
        if (!EARLY || ch != ch0) { /* EARLY: the first chunk's copies were issued above */
            __syncthreads(); /* the previous chunk's rows and probabilities are consumed */
            if (tid < MLA_P) {
                int j = ch * MLA_P + tid;
                rowid[tid] = j < n ? (int)mla_row(a, t, j, pos) : -1;
            }
            __syncthreads();
            for (int p = w; p < MLA_P; p += NW) mla_copy_row<R16>(a, ks + p * Dp, rowid[p], lane);
        }
        mla_cp_wait();
        __syncthreads();
        if (R16 && a.vec) { /* BF16 rows staged by cp.async (by any warp): widened in place */
            for (int p = w; p < MLA_P; p += NW)
                if (rowid[p] >= 0) mla_widen_row(a, ks + p * Dp, lane);
            __syncthreads();
        }
        // scores of row `lane` for heads HPW w .. HPW w + HPW - 1 (Dp / 4 is odd: conflict-free rows)
        float sc[HPW];
#pragma unroll
        for (int j = 0; j < HPW; j++) sc[j] = 0.0f;
        const float4 *kr = (const float4 *)(ks + lane * Dp);
        const float4 *qr = (const float4 *)(qs + HPW * w * Dp);
        const int dq = Dp / 4;
        for (int d4 = 0; d4 < D4; d4++) {
            float4 k = kr[d4];
#pragma unroll
            for (int j = 0; j < HPW; j++) {
                float4 q = qr[j * dq + d4];
                sc[j] += q.x * k.x + q.y * k.y + q.z * k.z + q.w * k.w;
            }
        }
        const bool valid = rowid[lane] >= 0;
#pragma unroll
        for (int j = 0; j < HPW; j++) {
            float sv = valid ? sc[j] * a.scale : -INFINITY;
            float mn = fmaxf(m[j], nb_d_warp_max(sv));
            float cr = m[j] == -INFINITY ? 0.0f : expf(m[j] - mn);
            float pe = sv == -INFINITY ? 0.0f : expf(sv - mn);
            l[j] = l[j] * cr + nb_d_warp_sum(pe);
            m[j] = mn;
            ps[lane * G + HPW * w + j] = pe;
            if (lane == 0) corr[HPW * w + j] = cr;
        }
        __syncthreads();
        if (has_col) {
#pragma unroll
            for (int g = 0; g < GH; g++) {
                float cr = corr[hg + g];
#pragma unroll
                for (int i = 0; i < 4; i++) acc[g][i] *= cr;
            }
            for (int p = 0; p < MLA_P; p++) {
                float4 k = *(const float4 *)(ks + p * Dp + col);
                const float4 *pp = (const float4 *)(ps + p * G + hg);
#pragma unroll
                for (int g4 = 0; g4 < GH / 4; g4++) {
                    float4 pr = pp[g4];
                    const float pv[4] = {pr.x, pr.y, pr.z, pr.w};
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        acc[4 * g4 + j][0] += pv[j] * k.x;
                        acc[4 * g4 + j][1] += pv[j] * k.y;
                        acc[4 * g4 + j][2] += pv[j] * k.z;
                        acc[4 * g4 + j][3] += pv[j] * k.w;
                    }
                }
            }
        }
    }
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < HPW; j++) mfin[HPW * w + j] = m[j], lfin[HPW * w + j] = l[j];
    __syncthreads();
    if (!has_col) return;
#pragma unroll
    for (int g = 0; g < GH; g++) {
        const int h = h0 + hg + g;
        if (h >= a.H) break;
        if (S == 1) {
            const float L = lfin[hg + g];
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (col + i < a.r) mla_put(a, h, t, col + i, L > 0 ? acc[g][i] / L : 0.0f);
        } else {
            float *pr = a.part + (((int64_t)t * a.H + h) * S + s) * (2 + a.r);
            if (ct == 0) pr[0] = mfin[hg + g], pr[1] = lfin[hg + g];
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (col + i < a.r) pr[2 + col + i] = acc[g][i];
        }
    }
}

// ---- tensor-core variant (mla.h nb_cuda_mla_uses_mma says when it runs) -------------------
// One block per (token, 32 heads, KV split), 8 warps. Warp w owns head tile mt = w & 1 (16
// heads: the M dimension of mma.sync m16n8k16) and quarter qd = w >> 1. Per chunk of 32
// attended rows: the rows are converted F32 -> BF16 into shared memory once for the block
// (row pitch Dk + 8 elements: ldmatrix rows land on distinct banks); warp (mt, qd) computes
// the scores of its 16 heads x the 8 positions of quarter qd over [latent | k_pe] (q in BF16)
// into shared memory; every warp then reads its heads' 32 scores back as the A operand of
// P.latent (online softmax in registers, P in BF16) and accumulates latent columns
// [qd * r / 4, (qd + 1) * r / 4). Rows, softmax statistics and outputs stay F32.
#define MMA_G 32
#define MMA_P 32
#define MMA_THREADS 256
#define MMA_NT 16 /* n8 tiles of the output per warp: r / 32, so r <= 512 */
#define MMA_SCL (MMA_P + 1)

// mma_pack, mma_16816 and ldsm_x4 are in mla_dev.cuh (shared with mla_decode.cu).
__device__ __forceinline__ void ldsm_x2(uint32_t *r, const void *p)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

__device__ __forceinline__ void ldsm_x2_t(uint32_t *r, const void *p)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// Row `row` of a BF16 pool (zeros for -1, and past D up to Dk) into dst by the calling warp:
// 16-byte pieces where the rows allow (a.vec), else pairs of elements.
__device__ __forceinline__ void mma_row16(const mla_args &a, uint16_t *dst, int64_t row, int D, int Dk, int lane)
{
    const int Dk8 = Dk / 8;
    if (a.vec) {
        uint4 v[3]; /* every load of the row issued before its stores */
#pragma unroll
        for (int i = 0; i < 3; i++) {
            const int c8 = lane + 32 * i;
            v[i] = make_uint4(0u, 0u, 0u, 0u);
            if (row >= 0 && 8 * c8 < D) v[i] = __ldg((const uint4 *)mla_row16(a, row, 8 * c8));
        }
#pragma unroll
        for (int i = 0; i < 3; i++) {
            const int c8 = lane + 32 * i;
            if (c8 < Dk8) *(uint4 *)(dst + 8 * c8) = v[i];
        }
        for (int c8 = lane + 96; c8 < Dk8; c8 += 32) { /* wider than GLM-5's 576 */
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (row >= 0 && 8 * c8 < D) u = __ldg((const uint4 *)mla_row16(a, row, 8 * c8));
            *(uint4 *)(dst + 8 * c8) = u;
        }
        return;
    }
    for (int c = 2 * lane; c < Dk; c += 64) {
        uint32_t x = 0, y = 0; /* D is a multiple of 4: c and c + 1 on the same side */
        if (row >= 0 && c < D) x = *mla_row16(a, row, c), y = *mla_row16(a, row, c + 1);
        *(uint32_t *)(dst + c) = x | y << 16;
    }
}

__global__ void __launch_bounds__(MMA_THREADS, 1) k_mla_attend_mma(mla_args a)
{
    extern __shared__ float4 sh4[];
    const int D = a.r + a.rope, Dk = (D + 15) & ~15, Ld = Dk + 8;
    float *sc = (float *)sh4;                     /* [G][SCL] scaled scores */
    int *rowid = (int *)(sc + MMA_G * MMA_SCL);   /* [P] */
    uint16_t *qs = (uint16_t *)(rowid + MMA_P);   /* [G][Ld] BF16 */
    uint16_t *ks = qs + MMA_G * Ld;               /* [P][Ld] BF16 */
    const int groups = (a.H + MMA_G - 1) / MMA_G;
    const int t = blockIdx.x / groups, h0 = (blockIdx.x - t * groups) * MMA_G, s = blockIdx.y, S = gridDim.y;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, mt = w & 1, qd = w >> 1;
    const int g4 = lane >> 2, q4 = lane & 3;
    const int T2 = a.two * a.T, r4 = a.r / 4, D4 = D / 4, Dk4 = Dk / 4;

    for (int e = tid; e < MMA_G * Dk4; e += MMA_THREADS) {
        const int g = e / Dk4, c4 = e - g * Dk4, h = h0 + g;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (h < a.H && c4 < r4) {
            const float4 *ql = (const float4 *)(a.qlat + ((int64_t)h * T2 + t) * a.r) + c4;
            v = ql[0];
            if (a.two == 2) {
                float4 u = ql[(int64_t)a.T * r4];
                v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
            }
        } else if (h < a.H && c4 < D4) {
            const float *qp = a.q + (int64_t)t * a.qs0 + (int64_t)h * a.qs1 + a.nope + 4 * (c4 - r4);
            v = make_float4(qp[0], qp[1], qp[2], qp[3]);
        }
        *(uint2 *)(qs + g * Ld + 4 * c4) = make_uint2(mma_pack(v.x, v.y), mma_pack(v.z, v.w));
    }

    const int pos = a.idx.pos[t], n = mla_count(a, t);
    const int nch = (n + MMA_P - 1) / MMA_P, cps = (nch + S - 1) / S;
    const int ch0 = s * cps, ch1 = min(nch, ch0 + cps);
    const int NQ = a.r / 32, c0 = qd * (a.r / 4); /* this warp's output columns */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[MMA_NT][4];
#pragma unroll
    for (int i = 0; i < MMA_NT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int ch = ch0; ch < ch1; ch++) {
        __syncthreads(); /* the previous chunk's rows and scores are consumed */
        if (tid < MMA_P) {
            int j = ch * MMA_P + tid;
            rowid[tid] = j < n ? (int)mla_row(a, t, j, pos) : -1;
        }
        __syncthreads();
        // rows -> BF16: warp w converts rows w, w + 8, ... (every load of a row issued
        // before its stores)
        for (int p = w; p < MMA_P; p += MMA_THREADS / 32) {
            const int64_t row = rowid[p];
            uint16_t *dst = ks + p * Ld;
            if (a.lat16) { /* a BF16 pool: the rows as they are */
                mma_row16(a, dst, row, D, Dk, lane);
                continue;
            }
            const float *lr = a.lat + (row < 0 ? 0 : row) * a.ls0, *pr = a.kpe + (row < 0 ? 0 : row) * a.ps0;
            if (a.vec) {
                float4 v[5];
#pragma unroll
                for (int i = 0; i < 5; i++) {
                    const int c4 = lane + 32 * i;
                    v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (row >= 0 && c4 < D4)
                        v[i] = __ldg((const float4 *)(c4 < r4 ? lr + 4 * c4 : pr + 4 * (c4 - r4)));
                }
#pragma unroll
                for (int i = 0; i < 5; i++) {
                    const int c4 = lane + 32 * i;
                    if (c4 < Dk4)
                        *(uint2 *)(dst + 4 * c4) = make_uint2(mma_pack(v[i].x, v[i].y), mma_pack(v[i].z, v[i].w));
                }
                for (int c4 = lane + 160; c4 < Dk4; c4 += 32) { /* wider than GLM-5's 576 */
                    float4 u = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (row >= 0 && c4 < D4) u = __ldg((const float4 *)(c4 < r4 ? lr + 4 * c4 : pr + 4 * (c4 - r4)));
                    *(uint2 *)(dst + 4 * c4) = make_uint2(mma_pack(u.x, u.y), mma_pack(u.z, u.w));
                }
            } else {
                for (int c = 2 * lane; c < Dk; c += 64) {
                    float x = 0.0f, y = 0.0f; /* D is a multiple of 4: c and c + 1 on the same side */
                    if (row >= 0 && c < D) {
                        x = c < a.r ? lr[c] : pr[c - a.r];
                        y = c + 1 < a.r ? lr[c + 1] : pr[c + 1 - a.r];
                    }
                    *(uint32_t *)(dst + c) = mma_pack(x, y);
                }
            }
        }
        __syncthreads();
        // scores: heads of tile mt x positions 8 qd .. 8 qd + 7
        {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const uint16_t *qa = qs + (mt * 16 + (lane & 15)) * Ld + (lane >> 4) * 8;
            const uint16_t *kb = ks + (qd * 8 + (lane & 7)) * Ld + ((lane >> 3) & 1) * 8;
            for (int k0 = 0; k0 < Dk; k0 += 16) {
                uint32_t af[4], bf[2];
                ldsm_x4(af, qa + k0);
                ldsm_x2(bf, kb + k0);
                mma_16816(c, af, bf[0], bf[1]);
            }
            const int pc = qd * 8 + 2 * q4;
            float *r0 = sc + (mt * 16 + g4) * MMA_SCL, *r1 = r0 + 8 * MMA_SCL;
            r0[pc] = rowid[pc] >= 0 ? c[0] * a.scale : -INFINITY;
            r0[pc + 1] = rowid[pc + 1] >= 0 ? c[1] * a.scale : -INFINITY;
            r1[pc] = rowid[pc] >= 0 ? c[2] * a.scale : -INFINITY;
            r1[pc + 1] = rowid[pc + 1] >= 0 ? c[3] * a.scale : -INFINITY;
        }
        __syncthreads();
        // online softmax of rows g4 and g4 + 8 of tile mt (the four quarter warps of a tile
        // compute the same statistics), then P.latent for this warp's columns
        float sv[2][8];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float *sr = sc + (mt * 16 + g4 + 8 * rr) * MMA_SCL;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                sv[rr][4 * kk + 0] = sr[16 * kk + 2 * q4];
                sv[rr][4 * kk + 1] = sr[16 * kk + 2 * q4 + 1];
                sv[rr][4 * kk + 2] = sr[16 * kk + 2 * q4 + 8];
                sv[rr][4 * kk + 3] = sr[16 * kk + 2 * q4 + 9];
            }
            const float cr = mla_softmax8(sv[rr], m[rr], l[rr]);
#pragma unroll
            for (int i = 0; i < MMA_NT; i++) acc[i][2 * rr] *= cr, acc[i][2 * rr + 1] *= cr;
        }
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            uint32_t af[4] = {mma_pack(sv[0][4 * kk], sv[0][4 * kk + 1]), mma_pack(sv[1][4 * kk], sv[1][4 * kk + 1]),
                              mma_pack(sv[0][4 * kk + 2], sv[0][4 * kk + 3]),
                              mma_pack(sv[1][4 * kk + 2], sv[1][4 * kk + 3])};
            const uint16_t *vb = ks + (16 * kk + (lane & 15)) * Ld + c0;
#pragma unroll
            for (int i = 0; i < MMA_NT; i++) {
                if (i < NQ) {
                    uint32_t bf[2];
                    ldsm_x2_t(bf, vb + 8 * i);
                    mma_16816(acc[i], af, bf[0], bf[1]);
                }
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int h = h0 + mt * 16 + g4 + 8 * rr;
        if (h >= a.H) continue;
        if (S == 1) {
            const float inv = l[rr] > 0 ? 1.0f / l[rr] : 0.0f;
#pragma unroll
            for (int i = 0; i < MMA_NT; i++)
                if (i < NQ) {
                    const int col = c0 + 8 * i + 2 * q4;
                    mla_put(a, h, t, col, acc[i][2 * rr] * inv);
                    mla_put(a, h, t, col + 1, acc[i][2 * rr + 1] * inv);
                }
        } else {
            float *pr = a.part + (((int64_t)t * a.H + h) * S + s) * (2 + a.r);
            if (qd == 0 && q4 == 0) pr[0] = m[rr], pr[1] = l[rr];
#pragma unroll
            for (int i = 0; i < MMA_NT; i++)
                if (i < NQ) {
                    const int col = c0 + 8 * i + 2 * q4;
                    pr[2 + col] = acc[i][2 * rr];
                    pr[3 + col] = acc[i][2 * rr + 1];
                }
        }
    }
}

// Merge the splits of (token blockIdx.x, head blockIdx.y) as att_merge does for warps.
__global__ void k_mla_merge(mla_args a, int S)
{
    __shared__ float e[MLA_MAX_SPLITS]; /* exp(m_s - M), 0 for an empty split */
    __shared__ float Lsh;
    const int t = blockIdx.x, h = blockIdx.y;
    const int64_t st = 2 + a.r;
    const float *base = a.part + ((int64_t)t * a.H + h) * S * st;
    if (threadIdx.x < 32) {
        float M = -INFINITY;
        for (int s = threadIdx.x; s < S; s += 32) M = fmaxf(M, base[s * st]);
        M = nb_d_warp_max(M);
        float L = 0.0f;
        for (int s = threadIdx.x; s < S; s += 32) {
            const float ms = base[s * st], es = ms > -INFINITY ? expf(ms - M) : 0.0f;
            e[s] = es;
            if (es != 0.0f) L += base[s * st + 1] * es;
        }
        L = nb_d_warp_sum(L);
        if (threadIdx.x == 0) Lsh = L;
    }
    __syncthreads();
    const float L = Lsh;
    for (int c = threadIdx.x; c < a.r; c += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < S; s++)
            if (e[s] != 0.0f) v += base[s * st + 2 + c] * e[s]; /* empty splits' sums are never read */
        mla_put(a, h, t, c, L > 0 ? v / L : 0.0f);
    }
}

// q_nope -> two BF16 terms [H][2T][nope] (hi rows 0..T-1, lo rows T..2T-1 of each head), or
// (two 1) the hi term alone [H][T][nope].
__global__ void k_mla_split_q(const float *q, int64_t qs0, int64_t qs1, int T, int H, int nope, uint16_t *qb, int two)
{
    const int64_t total = (int64_t)H * T * nope;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t h = e / ((int64_t)T * nope), rem = e - h * T * nope;
        int t = (int)(rem / nope), c = (int)(rem - (int64_t)t * nope);
        float v = q[(int64_t)t * qs0 + h * qs1 + c];
        uint16_t hi = nb_d_to_bf16(v);
        qb[(h * two * T + t) * nope + c] = hi;
        if (two == 2) qb[(h * 2 * T + T + t) * nope + c] = nb_d_to_bf16(v - nb_d_bf16(hi));
    }
}

// Element e of a walk over q's (head, token) rows in groups of four floats, n4 groups per row
// (head-major): those four floats, their row *ht = h * T + t, head *h, token *t and first
// column *c.
__device__ __forceinline__ float4 mla_q4_at(const float *q, int64_t qs0, int64_t qs1, int T, int n4, int64_t e,
                                            int64_t *ht, int *h, int *t, int *c)
{
    *ht = e / n4;
    *c = 4 * (int)(e - *ht * n4);
    *h = (int)(*ht / T);
    *t = (int)(*ht - (int64_t)*h * T);
    return *(const float4 *)(q + (int64_t)*t * qs0 + (int64_t)*h * qs1 + *c);
}

// The same four elements per thread (nope % 4 == 0, q and its strides 16-byte aligned): one
// float4 load per thread instead of four scalar loads and four 64-bit index divisions.
__global__ void k_mla_split_q4(const float *q, int64_t qs0, int64_t qs1, int T, int H, int nope, uint16_t *qb, int two)
{
    const int n4 = nope / 4;
    const int64_t total = (int64_t)H * T * n4;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t ht;
        int h, t, c;
        const float4 v = mla_q4_at(q, qs0, qs1, T, n4, e, &ht, &h, &t, &c);
        const float x[4] = {v.x, v.y, v.z, v.w};
        uint16_t hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            hi[i] = nb_d_to_bf16(x[i]);
            lo[i] = nb_d_to_bf16(x[i] - nb_d_bf16(hi[i]));
        }
        uint16_t *o = qb + ((int64_t)h * two * T + t) * nope + c;
        *(uint2 *)o = make_uint2(hi[0] | (uint32_t)hi[1] << 16, hi[2] | (uint32_t)hi[3] << 16);
        if (two == 2)
            *(uint2 *)(o + (int64_t)T * nope) = make_uint2(lo[0] | (uint32_t)lo[1] << 16, lo[2] | (uint32_t)lo[3] << 16);
    }
}

// k_mla_split_q4 and k_mla_qpe16 in one pass over q (NIBBLE_CUDA_MLA_QFOLD, with the BF16 q of
// the wg kernel): four elements of a (token, head) row's nope + rope floats per thread; the
// nope part goes to the BF16 terms [H][two T][nope], the rope part to columns r .. of q16
// ([H][T][r + rope]), both rounded to nearest as before. Needs nope, rope and r % 4 == 0 and
// q 16-byte aligned. Each kernel alone read its part of q with its own index arithmetic (H200,
// ncu, 1024 tokens x 64 heads: 22 + 25 us).
__global__ void k_mla_split_q4pe(const float *q, int64_t qs0, int64_t qs1, int T, int H, int nope, int rope, int r,
                                 uint16_t *qb, int two, uint16_t *q16)
{
    const int n4 = (nope + rope) / 4;
    const int64_t total = (int64_t)H * T * n4;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t ht;
        int h, t, c;
        const float4 v = mla_q4_at(q, qs0, qs1, T, n4, e, &ht, &h, &t, &c);
        const float x[4] = {v.x, v.y, v.z, v.w};
        uint16_t hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) hi[i] = nb_d_to_bf16(x[i]);
        const uint2 hv = make_uint2(hi[0] | (uint32_t)hi[1] << 16, hi[2] | (uint32_t)hi[3] << 16);
        if (c >= nope) {
            *(uint2 *)(q16 + ht * (r + rope) + r + (c - nope)) = hv;
            continue;
        }
        uint16_t *o = qb + ((int64_t)h * two * T + t) * nope + c;
        *(uint2 *)o = hv;
        if (two == 2) {
            uint16_t lo[4];
#pragma unroll
            for (int i = 0; i < 4; i++) lo[i] = nb_d_to_bf16(x[i] - nb_d_bf16(hi[i]));
            *(uint2 *)(o + (int64_t)T * nope) = make_uint2(lo[0] | (uint32_t)lo[1] << 16, lo[2] | (uint32_t)lo[3] << 16);
        }
    }
}

// out[t, h, :] = hi-term row + lo-term row of [H][2T][v].
__global__ void k_mla_sum_out(const float *o2, int T, int H, int v, float *out, int64_t os0, int64_t os1)
{
    const int64_t total = (int64_t)H * T * v;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t h = e / ((int64_t)T * v), rem = e - h * T * v;
        int t = (int)(rem / v), c = (int)(rem - (int64_t)t * v);
        out[(int64_t)t * os0 + h * os1 + c] = o2[(h * 2 * T + t) * v + c] + o2[(h * 2 * T + T + t) * v + c];
    }
}

static int grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// q_pe -> BF16 columns r .. r + rope - 1 of the wg kernel's q rows ([H][T][r + rope], q_lat in
// columns 0 .. r - 1 from the first GEMM), rounded to nearest as the kernel rounded it itself.
__global__ void k_mla_qpe16(const float *q, int64_t qs0, int64_t qs1, int T, int H, int nope, int rope, int r,
                            uint16_t *q16)
{
    const int64_t n = (int64_t)H * T * rope;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % rope);
        const int64_t ht = i / rope;
        const int t = (int)(ht % T), h = (int)(ht / T);
        q16[ht * (r + rope) + r + c] = nb_d_to_bf16(q[(int64_t)t * qs0 + (int64_t)h * qs1 + nope + c]);
    }
}

// Splits of each token's rows: enough blocks for two waves when the batch alone is not, at
// most NIBBLE_CUDA_MLA_SPLITS (default 16, at most MLA_MAX_SPLITS). The count depends on T
// only (a graph stays valid as contexts grow), so at a short context most of 64 splits had
// no 32-row chunk: at batch 1, 58 of 66 blocks per head group loaded their 16 heads' q_lat
// (37 KB each) to write an empty partial, and the merge read them all.
static int mla_splits(int T, int groups, int sm_count)
{
    static int cap = -1;
    if (cap < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLA_SPLITS");
        const int v = e ? atoi(e) : 0;
        cap = v >= 1 && v <= MLA_MAX_SPLITS ? v : 16;
    }
    int64_t base = (int64_t)T * groups;
    if (base >= sm_count) return 1;
    int64_t s = (2 * (int64_t)sm_count + base - 1) / base;
    return (int)(s > cap ? cap : s);
}

// Carve 256-byte aligned pieces from one scratch buffer.
static size_t carve(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off += (bytes + 255) / 256 * 256;
    return at;
}

static int g_token_tile; /* nb_cuda_mla_force_token_tile; 0: NB_CUDA_MLA_TOKEN_TILE */

extern "C" void nb_cuda_mla_force_token_tile(int tokens) { g_token_tile = tokens > 0 ? tokens : 0; }

static int g_kernel = -1; /* nb_cuda_mla_force_kernel; -1: NIBBLE_CUDA_MLA, else automatic */

extern "C" void nb_cuda_mla_force_kernel(int kernel)
{
    g_kernel = kernel == NB_CUDA_MLA_F32 || kernel == NB_CUDA_MLA_MMA || kernel == NB_CUDA_MLA_DEC ||
                       kernel == NB_CUDA_MLA_WG
                   ? kernel
                   : -1;
}

static int g_steps; /* nb_cuda_mla_force_gemm_steps; 0: all */
static int g_terms; /* nb_cuda_mla_force_terms; 0: NIBBLE_CUDA_MLA_TERMS, else 2 */

extern "C" void nb_cuda_mla_force_terms(int terms) { g_terms = terms == 1 || terms == 2 ? terms : 0; }

// BF16 activation terms of the GEMM path with attention kernel kern (mla.h).
static int mla_terms(int kern)
{
    if (g_terms) return g_terms;
    const char *e = getenv("NIBBLE_CUDA_MLA_TERMS");
    if (e && (!strcmp(e, "1") || !strcmp(e, "2"))) return e[0] - '0';
    return kern == NB_CUDA_MLA_DEC || kern == NB_CUDA_MLA_WG ? 1 : 2;
}

extern "C" void nb_cuda_mla_force_gemm_steps(int mask) { g_steps = mask > 0 && mask < 15 ? mask : 0; }

// A 0/1 switch: the test's force (0, 1) if set, else the environment variable (read once; a
// benign race reads the same value), else def.
static int switch01(int force, const char *name, int *env, int def)
{
    if (force >= 0) return force;
    if (*env < 0) {
        const char *e = getenv(name);
        *env = e && (!strcmp(e, "0") || !strcmp(e, "1")) ? e[0] - '0' : def;
    }
    return *env;
}

static int g_qlat16 = -1; /* nb_cuda_mla_force_qlat16; -1: NIBBLE_CUDA_MLA_QLAT16, else the default */

extern "C" void nb_cuda_mla_force_qlat16(int on) { g_qlat16 = on == 0 || on == 1 ? on : -1; }

static int qlat16_on(void)
{
    static int env = -1;
    return switch01(g_qlat16, "NIBBLE_CUDA_MLA_QLAT16", &env, NB_CUDA_MLA_QLAT16_DEFAULT);
}

static int qfold_on(void)
{
    static int env = -1;
    return switch01(-1, "NIBBLE_CUDA_MLA_QFOLD", &env, NB_CUDA_MLA_QFOLD_DEFAULT);
}

static int g_wgst = -1; /* nb_cuda_mla_wg_force_stage; -1: NIBBLE_CUDA_MLA_WG_STAGE, else the default */

extern "C" void nb_cuda_mla_wg_force_stage(int on) { g_wgst = on == 0 || on == 1 ? on : -1; }

static int wg_stage_on(void)
{
    static int env = -1;
    return switch01(g_wgst, "NIBBLE_CUDA_MLA_WG_STAGE", &env, NB_CUDA_MLA_WG_STAGE_DEFAULT);
}

static int g_wgpf = -1; /* nb_cuda_mla_wg_force_prefetch; -1: NIBBLE_CUDA_MLA_WG_PF, else the default */

extern "C" void nb_cuda_mla_wg_force_prefetch(int on) { g_wgpf = on == 0 || on == 1 ? on : -1; }

static int wg_prefetch_on(void)
{
    static int env = -1;
    return switch01(g_wgpf, "NIBBLE_CUDA_MLA_WG_PF", &env, NB_CUDA_MLA_WG_PF_DEFAULT);
}

static int g_decpf = -1; /* nb_cuda_mla_dec_force_prefetch; -1: NIBBLE_CUDA_MLA_DEC_PF, else the default */

extern "C" void nb_cuda_mla_dec_force_prefetch(int on) { g_decpf = on == 0 || on == 1 ? on : -1; }

static int dec_prefetch_on(void)
{
    static int env = -1;
    return switch01(g_decpf, "NIBBLE_CUDA_MLA_DEC_PF", &env, NB_CUDA_MLA_DEC_PF_DEFAULT);
}

static size_t mma_smem(int r, int rope)
{
    const int Dk = (r + rope + 15) & ~15;
    return (size_t)MMA_G * MMA_SCL * 4 + MMA_P * 4 + (size_t)(MMA_G + MMA_P) * (Dk + 8) * 2;
}

extern "C" int nb_cuda_mla_kernel(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens)
{
    return nb_cuda_mla_kernel_pool(ctx, d, n_tokens, 0);
}

extern "C" int nb_cuda_mla_kernel_pool(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens, int pool_bf16)
{
    return nb_cuda_mla_kernel_for(ctx, d, n_tokens, pool_bf16, 0);
}

static int g_last_kernel = -1; /* nb_cuda_mla_last_kernel */

extern "C" int nb_cuda_mla_last_kernel(void) { return g_last_kernel; }

extern "C" int nb_cuda_mla_kernel_for(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens, int pool_bf16, int long_ctx)
{
    int max_smem = 0;
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, nb_cuda_st(ctx)->device);
    /* the 32-head tensor-core kernel's shapes: 32-column output tiles per warp quarter, <= 16
     * of them; 79 KB of shared memory at GLM-5's 576 */
    const int mma_ok = !(d->kv_lora_rank % 32 || d->kv_lora_rank > 32 * MMA_NT || d->qk_rope % 4 ||
                         mma_smem(d->kv_lora_rank, d->qk_rope) > 200 * 1024);
    /* the decode kernel reads F32 rows only: a BF16 pool runs mma where it would run */
    const int dec_ok = !pool_bf16 && nb_cuda_mla_dec_smem(d->kv_lora_rank, d->qk_rope, max_smem) > 0;
    int cc_major = 0;
    cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, nb_cuda_st(ctx)->device);
    const int wg_ok = nb_cuda_mla_wg_ok(d->kv_lora_rank, d->qk_rope, cc_major, max_smem);
    int k = g_kernel;
    if (k < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLA");
        k = !e                  ? -1
            : !strcmp(e, "f32") ? NB_CUDA_MLA_F32
            : !strcmp(e, "mma") ? NB_CUDA_MLA_MMA
            : !strcmp(e, "dec") ? NB_CUDA_MLA_DEC
            : !strcmp(e, "wg")  ? NB_CUDA_MLA_WG
                                : -1;
    }
    if (k == NB_CUDA_MLA_WG && !wg_ok) k = NB_CUDA_MLA_DEC; /* shapes or device the wgmma kernel does not take */
    if (k == NB_CUDA_MLA_DEC && !dec_ok) k = NB_CUDA_MLA_MMA; /* shapes (or a BF16 pool) dec does not take */
    if (k == NB_CUDA_MLA_MMA && !mma_ok) k = NB_CUDA_MLA_F32;
    if (k >= 0) return k;
    /* automatic: on the H200 at context 256 (bench/RESULTS.md) the float32 kernel is faster
     * at 1 and 10 tokens (KV-split batches), the tensor-core ones at 1000; the switch is where
     * the float32 kernel stops splitting (a function of the token count only, so a captured
     * graph keeps its kernel). Between 10 and 64 tokens not measured; the decode kernel beat
     * the mma kernel at 64, 256 and 1000 tokens (contexts 256 and 2048), and the wgmma kernel
     * beat the decode kernel at 64, 256 and 1000 tokens (context 256; bench/RESULTS.md, fourth
     * session), so it runs where it takes the shapes. */
    const int tc = wg_ok ? NB_CUDA_MLA_WG : dec_ok ? NB_CUDA_MLA_DEC : mma_ok ? NB_CUDA_MLA_MMA : NB_CUDA_MLA_F32;
    /* BF16 pools (the GPU's default cache, twenty-second session, H100, GLM-5 shapes, the op as
     * a graph): wg beat f32 at every batch of 2-64 tokens and context 128-2048 but 1-2 tokens
     * at context 128-192 (27-33 us against 32-36) and 1 token at 512 (31 against 33); at context
     * 2048 (a live DSA selection attends up to index_topk = 2048 positions) it is 1.6-7x faster
     * (B 1: 38 against 61 us; B 32: 0.118 against 0.834 ms), at 512 even at B 2 (37 against 43)
     * and close at B 1 (33 against 31; the two cross near 640 by the slopes). So f32 keeps 1-2
     * tokens over short contexts, wg takes the rest: sparse steps and dense ones where a token
     * attends to 512 positions or more, 257 at 2 tokens or 128+ heads (the engine's hint,
     * engine/forward.h nb_forward_long_ctx_default; known when a graph is captured: cuda_runner.c
     * keys graphs on it). */
    if (pool_bf16 && tc == NB_CUDA_MLA_WG)
        return !long_ctx && n_tokens <= NB_CUDA_MLA_F32_MAX_TOKENS ? NB_CUDA_MLA_F32 : NB_CUDA_MLA_WG;
    if ((int64_t)n_tokens * ((d->n_heads + MLA_G - 1) / MLA_G) < nb_cuda_st(ctx)->sm_count) return NB_CUDA_MLA_F32;
    return tc;
}

extern "C" int nb_cuda_mla_uses_mma(nb_ops_ctx *ctx, const nb_mla_dims *d, int n_tokens)
{
    return nb_cuda_mla_kernel(ctx, d, n_tokens) != NB_CUDA_MLA_F32;
}

static int g_hpw; /* nb_cuda_mla_force_f32_heads; 0: NIBBLE_CUDA_MLA_F32_HEADS, else automatic */

extern "C" void nb_cuda_mla_force_f32_heads(int heads_per_warp)
{
    g_hpw = heads_per_warp == 2 || heads_per_warp == 4 ? heads_per_warp : 0;
}

// The float32 kernel's heads per warp (k_mla_attend) for a tile of T tokens: forced, else
// NIBBLE_CUDA_MLA_F32_HEADS=2|4, else 2 up to NB_CUDA_MLA_F32_H2_MAX tokens (measured ahead at
// 1, 2 and 4 tokens on the H200, even or slightly behind at 10 to 32: bench/RESULTS.md), 4 above.
static int f32_heads_per_warp(int T)
{
    if (g_hpw) return g_hpw;
    const char *e = getenv("NIBBLE_CUDA_MLA_F32_HEADS");
    if (e && (!strcmp(e, "2") || !strcmp(e, "4"))) return e[0] - '0';
    return T <= NB_CUDA_MLA_F32_H2_MAX ? 2 : 4;
}

static int g_f32_group; /* nb_cuda_mla_force_f32_group; 0: NIBBLE_CUDA_MLA_F32_G, else automatic */

extern "C" void nb_cuda_mla_force_f32_group(int heads)
{
    g_f32_group = heads == 4 || heads == 8 || heads == 16 ? heads : 0;
}

// The float32 kernel's heads per block for a tile of T tokens: forced (every T), else up to
// NIBBLE_CUDA_MLA_F32_G_MAX tokens (default NB_CUDA_MLA_F32_G_MAX) NIBBLE_CUDA_MLA_F32_G=4|8|16
// or NB_CUDA_MLA_F32_G_DEFAULT, and 16 above (mla.h).
static int f32_group(int T)
{
    if (g_f32_group) return g_f32_group;
    const char *e = getenv("NIBBLE_CUDA_MLA_F32_G"), *em = getenv("NIBBLE_CUDA_MLA_F32_G_MAX");
    const int v = e ? atoi(e) : 0, mx = em ? atoi(em) : NB_CUDA_MLA_F32_G_MAX;
    if (T > mx) return MLA_G;
    return v == 4 || v == 8 || v == 16 ? v : NB_CUDA_MLA_F32_G_DEFAULT;
}

// The float32 kernel's instance for fg heads per block, hpw per warp (16 heads: 4 or 2; 8: 2;
// 4: 1), the small path's EARLY form (16 heads only) and R16 (BF16 pool rows).
template <bool R16>
static const void *f32_kernel(int fg, int hpw, int early)
{
    if (fg == 4) return (const void *)k_mla_attend<4, 1, false, R16>;
    if (fg == 8) return (const void *)k_mla_attend<8, 2, false, R16>;
    if (early) return hpw == 4 ? (const void *)k_mla_attend<MLA_G, 4, true, R16> : (const void *)k_mla_attend<MLA_G, 2, true, R16>;
    return hpw == 4 ? (const void *)k_mla_attend<MLA_G, 4, false, R16> : (const void *)k_mla_attend<MLA_G, 2, false, R16>;
}

// Dynamic shared memory of k_mla_attend with G heads per block.
static size_t f32_smem(int G, int Dp) { return ((size_t)(G + MLA_P) * Dp + MLA_P * G + 3 * G + MLA_P) * sizeof(float); }

// The three steps for T tokens (views already offset to the tile).
static nb_status mla_tile(nb_ops_ctx *ctx, const nb_mla_dims *d, const nb_cuda_mla_w *Wp, const nb_tensor *q,
                          const nb_tensor *latent_pool, const nb_tensor *kpe_pool, const nb_attn_index *idx,
                          const nb_attn_select *sel, float scale, nb_tensor *out, int Dp, size_t smem, int max_smem)
{
    nb_cuda_state *cs = nb_cuda_st(ctx);
    const nb_cuda_mla_w W = *Wp;
    const int T = (int)q->shape[0], H = d->n_heads, r = d->kv_lora_rank, rope = d->qk_rope, nope = d->qk_nope,
              vd = d->v_dim;
    /* the pools' dtype (both F32 or both BF16: nb_cuda_mla_attention) and whether their rows
     * are 16-byte aligned: the wg kernel's condition; dec, mma and f32 then copy 16-byte
     * pieces, which for BF16 rows must not straddle latent and k_pe (rank, rope % 8) */
    const int p16 = latent_pool->dtype == NB_DTYPE_BF16, pes = p16 ? 2 : 4;
    const int vec = ((uintptr_t)latent_pool->data % 16 == 0) && latent_pool->stride[0] * pes % 16 == 0 &&
                    ((uintptr_t)kpe_pool->data % 16 == 0) && kpe_pool->stride[0] * pes % 16 == 0 &&
                    (!p16 || (r % 8 == 0 && rope % 8 == 0));
    /* a device whose opt-in shared memory is below the mma kernel's runs the float32 one; wg
     * on rows that are not 16-byte aligned runs dec (F32 rows) or mma (BF16 rows) */
    int kern = nb_cuda_mla_kernel_for(ctx, d, T, p16, sel != NULL || idx->long_ctx);
    if (kern == NB_CUDA_MLA_WG && !vec) kern = p16 ? NB_CUDA_MLA_MMA : NB_CUDA_MLA_DEC;
    const int wg = kern == NB_CUDA_MLA_WG;
    const int dec = kern == NB_CUDA_MLA_DEC || wg; /* wg: the same grid (dec where rows are unaligned) */
    const int mma = kern == NB_CUDA_MLA_MMA && mma_smem(r, rope) <= (size_t)max_smem,
              fg = f32_group(T), G = dec ? MLA_DEC_G : mma ? MMA_G : fg;
    g_last_kernel = wg ? NB_CUDA_MLA_WG : dec ? NB_CUDA_MLA_DEC : mma ? NB_CUDA_MLA_MMA : NB_CUDA_MLA_F32;
    const int steps = g_steps ? g_steps : 15; /* timings: nb_cuda_mla_force_gemm_steps */
    const int groups = (H + G - 1) / G, S = mla_splits(T, groups, cs->sm_count);
    /* small: the absorption kernels of mla_small.cu (mla.h), float32 q_lat / o_lat, the split
     * merge folded into the output step unless sep_merge; pdl: programmatic dependent launches */
    int merge = 0, pdl = 0;
    const int small = nb_cuda_mla_uses_small(d, W.w, T, &merge, &pdl);
    const int sep_merge = merge == NB_CUDA_MLA_MERGE_KERNEL;
    /* timings only (nb_cuda_mla_force_stages): the small path's steps one by one */
    const int stages = small ? nb_cuda_mla_stages() : 15;
    /* the attention kernel's EARLY form and programmatic launch (mla.h NB_CUDA_MLA_PDL_*) */
    const int early = small && fg == MLA_G && (pdl == NB_CUDA_MLA_PDL_CHAIN || pdl == NB_CUDA_MLA_PDL_EARLY);
    const int att_pdl = small && (pdl == NB_CUDA_MLA_PDL_START || pdl == NB_CUDA_MLA_PDL_CHAIN);
    const int bf = W.bf16 && !small; /* the BF16 GEMMs' two-term activations */
    const int one = bf && mla_terms(kern) == 1; /* or one term (mla.h nb_cuda_mla_force_terms) */
    const int two = bf && !one ? 2 : 1, hs = nope + vd;
    const int64_t T2 = (int64_t)two * T;
    /* the wg kernel with one term: q_lat in BF16 straight from the first GEMM (mla.h) */
    const int q16 = wg && vec && one && qlat16_on();
    const int64_t qw = q16 ? r + rope : r; /* q16: [H][T][r + rope] BF16, q_pe BF16 in columns r .. */

    size_t off = 0;
    const size_t o_qb = bf ? carve(&off, (size_t)H * T2 * nope * 2) : 0;
    const size_t o_ql = carve(&off, (size_t)H * T2 * qw * (q16 ? 2 : 4));
    const size_t o_ol = carve(&off, (size_t)H * T2 * r * (bf ? 2 : 4));
    const size_t o_o2 = bf && !one ? carve(&off, (size_t)H * T2 * vd * 4) : 0;
    const size_t o_pt = S > 1 ? carve(&off, (size_t)T * H * S * (2 + r) * 4) : 0;
    char *scr = (char *)nb_cuda_scratch(ctx, 3, off);
    if (!scr) return NB_ERR_OUT_OF_MEMORY;
    cudaStream_t stream = nb_cuda_stream(ctx);
    const char *wb = (const char *)W.w;
    const int64_t es = W.bf16 ? 2 : 4;

    // 1. q_lat[h] (col-major r x T2) = W_uk[h] (stored [nope, r] = col-major r x nope) . q_nope[h]
    float *qlat = (float *)(scr + o_ql);
    if (small) {
        if (stages & 1) NB_TRY(nb_cuda_mla_small_in_pdl(ctx, d, &W, q, qlat, pdl));
    } else if (!(steps & 1)) {
    } else if (W.bf16) {
        uint16_t *qb = (uint16_t *)(scr + o_qb);
        const int vec4 = nope % 4 == 0 && (uintptr_t)q->data % 16 == 0 && q->stride[0] % 4 == 0 && q->stride[1] % 4 == 0;
        const int fold = q16 && vec4 && rope % 4 == 0 && r % 4 == 0 && qfold_on();
        if (fold)
            k_mla_split_q4pe<<<grid_for((int64_t)H * T * (nope + rope) / 4), 256, 0, stream>>>(
                (const float *)q->data, q->stride[0], q->stride[1], T, H, nope, rope, r, qb, two, (uint16_t *)qlat);
        else if (vec4)
            k_mla_split_q4<<<grid_for((int64_t)H * T * nope / 4), 256, 0, stream>>>(
                (const float *)q->data, q->stride[0], q->stride[1], T, H, nope, qb, two);
        else
            k_mla_split_q<<<grid_for((int64_t)H * T * nope), 256, 0, stream>>>((const float *)q->data, q->stride[0],
                                                                                q->stride[1], T, H, nope, qb, two);
        NB_CUDA_LAUNCHED("mla_attention split q");
        if (q16) {
            if (!fold) {
                k_mla_qpe16<<<grid_for((int64_t)H * T * rope), 256, 0, stream>>>(
                    (const float *)q->data, q->stride[0], q->stride[1], T, H, nope, rope, r, (uint16_t *)qlat);
                NB_CUDA_LAUNCHED("mla_attention q_pe bf16");
            }
            NB_TRY(nb_cuda_mla_gemm_c16(ctx, 0, r, (int)T2, nope, wb, r, (int64_t)hs * r, qb, nope, T2 * nope,
                                        (uint16_t *)qlat, qw, T2 * qw, H, W.alpha));
        } else
            NB_TRY(nb_cuda_mla_gemm(ctx, 1, 0, r, (int)T2, nope, wb, r, (int64_t)hs * r, qb, nope, T2 * nope, qlat,
                                    r, T2 * r, H, W.alpha));
    } else {
        NB_TRY(nb_cuda_mla_gemm(ctx, 0, 0, r, T, nope, wb, r, (int64_t)hs * r, q->data, q->stride[0], q->stride[1],
                                qlat, r, (int64_t)T * r, H, W.alpha));
    }

    // 2. attention over the latent
    mla_args a;
    a.q = (const float *)q->data;
    a.qs0 = q->stride[0];
    a.qs1 = q->stride[1];
    a.qlat = q16 ? NULL : qlat;
    a.qlat16 = q16 ? (const uint16_t *)qlat : NULL;
    a.two = two;
    a.lat = p16 ? NULL : (const float *)latent_pool->data;
    a.kpe = p16 ? NULL : (const float *)kpe_pool->data;
    a.lat16 = p16 ? (const uint16_t *)latent_pool->data : NULL;
    a.kpe16 = p16 ? (const uint16_t *)kpe_pool->data : NULL;
    a.ls0 = latent_pool->stride[0];
    a.ps0 = kpe_pool->stride[0];
    a.pool_rows = latent_pool->shape[0];
    a.idx = *idx;
    a.sel_pos = sel ? sel->pos : NULL;
    a.sel_count = sel ? sel->count : NULL;
    a.sel_stride = sel ? sel->stride : 0;
    a.scale = scale;
    a.T = T, a.H = H, a.r = r, a.rope = rope, a.nope = nope, a.Dp = Dp;
    a.vec = vec;
    a.part = S > 1 ? (float *)(scr + o_pt) : NULL;
    a.o32 = bf ? NULL : (float *)(scr + o_ol);
    a.ob = bf ? (uint16_t *)(scr + o_ol) : NULL;
    a.ob1 = one;
    a.wgst = q16 && wg_stage_on();
    a.l2pf = wg && a.vec ? wg_prefetch_on() : dec_prefetch_on();
    static int attr_dev = -1, mma_attr_dev = -1; /* attributes set once per process for the opt-in maximum */
    if (!small && !(steps & 2)) {
    } else if (wg && a.vec) {
        NB_TRY(nb_cuda_mla_wg_launch(&a, groups, S, cs->device, stream));
    } else if (dec) {
        NB_TRY(nb_cuda_mla_dec_launch(&a, groups, S, cs->device, max_smem, stream));
    } else if (mma) {
        if (mma_attr_dev != cs->device) {
            NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_attend_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
            NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_attend_mma, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
            mma_attr_dev = cs->device;
        }
        k_mla_attend_mma<<<dim3((unsigned)((int64_t)T * groups), (unsigned)S), MMA_THREADS,
                           mma_smem(r, rope), stream>>>(a);
        NB_CUDA_LAUNCHED("mla_attention mma");
    } else if (attr_dev != cs->device) {
        /* every instance: (G, HPW) 16/4, 16/2, 8/2, 4/1, EARLY at 16, F32 and BF16 rows */
        static const int forms[6][3] = {{MLA_G, 4, 0}, {MLA_G, 2, 0}, {MLA_G, 4, 1}, {MLA_G, 2, 1}, {8, 2, 0}, {4, 1, 0}};
        for (int i = 0; i < 12; i++) {
            const int *f = forms[i % 6];
            const void *fn = i < 6 ? f32_kernel<false>(f[0], f[1], f[2]) : f32_kernel<true>(f[0], f[1], f[2]);
            NB_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
            /* GLM-5's 114 KB per block: two blocks per SM when the carveout is all shared memory */
            NB_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        }
        attr_dev = cs->device;
    }
    if (!mma && !dec && (small ? (stages & 2) : (steps & 2))) {
        /* on the small path a programmatic dependent of the input step (it waits at its start) */
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)((int64_t)T * groups), (unsigned)S);
        /* fewer heads per block: 8 with 2 per warp, 4 with 1 (4 warps either way) */
        const int hpw = fg == 4 ? 1 : fg == 8 ? 2 : f32_heads_per_warp(T);
        cfg.blockDim = dim3(32 * fg / hpw);
        cfg.dynamicSmemBytes = fg == MLA_G ? smem : f32_smem(fg, Dp);
        cfg.stream = stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = att_pdl ? 1 : 0;
        void *args[] = {&a};
        NB_CUDA_TRY(cudaLaunchKernelExC(&cfg, p16 ? f32_kernel<true>(fg, hpw, early) : f32_kernel<false>(fg, hpw, early),
                                        args));
        NB_CUDA_LAUNCHED("mla_attention");
    }
    if (S > 1 && (!small || sep_merge) && (small ? (stages & 4) : (steps & 4))) {
        k_mla_merge<<<dim3((unsigned)T, (unsigned)H), 128, 0, stream>>>(a, S);
        NB_CUDA_LAUNCHED("mla_attention merge");
    }

    // 3. out[h] (col-major v x T2) = W_uv[h] (stored [v, r] = col-major r x v, transposed) . o_lat[h]
    const char *wuv = wb + (int64_t)nope * r * es;
    if (small) {
        if (stages & 8) NB_TRY(nb_cuda_mla_small_out(ctx, d, &W, a.o32, a.part, sep_merge ? 1 : S, pdl, out));
    } else if (!(steps & 8)) {
    } else if (W.bf16 && one) { /* one term: straight into out */
        NB_TRY(nb_cuda_mla_gemm(ctx, 1, 1, vd, T, r, wuv, r, (int64_t)hs * r, a.ob, r, (int64_t)T * r,
                                (float *)out->data, out->stride[0], out->stride[1], H, W.alpha));
    } else if (W.bf16) {
        float *o2 = (float *)(scr + o_o2);
        NB_TRY(nb_cuda_mla_gemm(ctx, 1, 1, vd, (int)T2, r, wuv, r, (int64_t)hs * r, a.ob, r, T2 * r, o2, vd, T2 * vd, H,
                                W.alpha));
        k_mla_sum_out<<<grid_for((int64_t)H * T * vd), 256, 0, stream>>>(o2, T, H, vd, (float *)out->data,
                                                                         out->stride[0], out->stride[1]);
        NB_CUDA_LAUNCHED("mla_attention sum");
    } else {
        NB_TRY(nb_cuda_mla_gemm(ctx, 0, 1, vd, T, r, wuv, r, (int64_t)hs * r, a.o32, r, (int64_t)T * r,
                                (float *)out->data, out->stride[0], out->stride[1], H, W.alpha));
    }
    return NB_OK;
}

extern "C" nb_status nb_cuda_mla_attention(nb_ops_ctx *ctx, nb_mla_mode mode, const nb_mla_dims *d,
                                           const nb_tensor *q, const nb_tensor *latent_pool, const nb_tensor *kpe_pool,
                                           const nb_weight *kv_b, const nb_attn_index *idx, const nb_attn_select *sel,
                                           float scale, nb_tensor *out)
{
    NB_TRY(nb_cuda_check_f32("mla_attention", "q", q, 3));
    NB_TRY(nb_cuda_check_f32_bf16("mla_attention", "latent_pool", latent_pool, 2));
    NB_TRY(nb_cuda_check_f32_bf16("mla_attention", "kpe_pool", kpe_pool, 2));
    if (latent_pool->dtype != kpe_pool->dtype)
        return nb_error(NB_ERR_INVALID_ARG, "mla_attention: latent_pool is %s and kpe_pool %s: both F32 or both BF16",
                        latent_pool->dtype == NB_DTYPE_BF16 ? "BF16" : "F32",
                        kpe_pool->dtype == NB_DTYPE_BF16 ? "BF16" : "F32");
    NB_TRY(nb_cuda_check_f32("mla_attention", "out", out, 3));
    NB_TRY(nb_cuda_check_weight("mla_attention kv_b", kv_b));
    (void)mode; /* both forms run the absorbed path: the same function (ops.h) */
    const int T = (int)q->shape[0], r = d->kv_lora_rank, rope = d->qk_rope;
    if (r > 4 * MLA_THREADS || r % 4 || rope % 4)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "mla_attention: kv_lora_rank %d (max %d) and rope dim %d must be multiples of 4", r,
                        4 * MLA_THREADS, rope);
    if (T == 0) return NB_OK;
    const int D = r + rope, Dp = (D / 4) % 2 ? D : D + 4;
    const size_t smem = ((size_t)(MLA_G + MLA_P) * Dp + MLA_P * MLA_G + 3 * MLA_G + MLA_P) * sizeof(float);
    int max_smem = 0;
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, nb_cuda_st(ctx)->device);
    if (smem > (size_t)max_smem)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "mla_attention: latent %d + rope %d needs %zu bytes of shared memory (%d)", r, rope, smem,
                        max_smem);
    // The weights: registered (resident) or prepared now into scratch slot 2.
    nb_cuda_mla_w W;
    NB_TRY(nb_cuda_mla_weights(ctx, kv_b, 2, &W));
    // Token tiles bound the per-head buffers (mla.h) for long prefills; every token's work is
    // independent of the others'.
    const int tile = g_token_tile ? g_token_tile : NB_CUDA_MLA_TOKEN_TILE;
    for (int t0 = 0; t0 < T; t0 += tile) {
        const int n = T - t0 < tile ? T - t0 : tile;
        nb_tensor qv = *q, ov = *out;
        qv.data = (float *)q->data + (int64_t)t0 * q->stride[0];
        qv.shape[0] = n;
        ov.data = (float *)out->data + (int64_t)t0 * out->stride[0];
        ov.shape[0] = n;
        nb_attn_index iv = *idx;
        iv.n_tokens = n;
        iv.pos += t0;
        iv.slot_base += t0;
        nb_attn_select sv;
        if (sel) {
            sv = *sel;
            sv.pos += (int64_t)t0 * sel->stride;
            sv.count += t0;
        }
        NB_TRY(mla_tile(ctx, d, &W, &qv, latent_pool, kpe_pool, &iv, sel ? &sv : NULL, scale, &ov, Dp, smem, max_smem));
    }
    return NB_OK;
}

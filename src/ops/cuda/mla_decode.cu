// MLA decode attention for many tokens: the attention step of nb_cuda_mla_attention (mla.h)
// with all 64 heads of a token in one block, so each attended latent row crosses HBM once
// per token (the 32-head kernel in mla.cu reads and converts it twice on GLM-5), and the next
// chunks of rows on their way while the current one is computed.
//
// One block of 8 warps per (token, group of 64 heads, KV split); 1 block per SM.
// Shared memory (GLM-5: 227 KB): two stages of 32 raw float32 rows [latent | k_pe] (row pitch
// = 4 mod 32 floats), filled by the bulk-copy engine (warp 0 issues one cp.async.bulk per row
// piece, completion on a per-stage mbarrier) or by cp.async where rows are not 16-byte aligned;
// q of the 64 heads in BF16 (16-byte units XOR swizzled so that ldmatrix is conflict-free
// without padding); the chunk's scores; a ring of four chunks' pool row ids. While chunk c is
// computed, chunk c + 1 is being copied, chunk c + 2 is prefetched into L2, and warp 7 looks up
// the rows of chunk c + 3 from registers loaded an iteration earlier (no table load is waited).
// Per chunk: warp (mp = w & 1, nq = w >> 1) computes the scores of heads 32mp..32mp+31 x
// rows 8nq..8nq+7 with mma.sync m16n8k16 (BF16 in, F32 out): q from ldmatrix, the rows read
// as float4 straight from the float32 stage and packed with cvt (the K order inside each 16
// is permuted the same way in q and rows, so one float4 is one B fragment; the rows of an n8
// tile are permuted so a quarter warp's float4s hit distinct banks). Then warp (mp, cq)
// runs the online softmax of its 32 heads over the chunk (F32) and accumulates P.latent for
// column groups cq, cq + 4, cq + 8, cq + 12 of 32 columns (a float4 of a row gives one column
// of four n8 tiles). Outputs go through shared memory to coalesced stores.
// Selected by nb_cuda_mla_kernel (mla.cu): NIBBLE_CUDA_MLA=dec, or automatically for large
// batches; NIBBLE_CUDA_MLA_DEC_COPY=bulk|async picks the row copy. Checked and timed by
// tests/cuda_ops/test_cuda_mla_decode.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/mla_dev.cuh"

#define DEC_P 32 /* rows per chunk */
#define DEC_THREADS 256
#define DEC_SCL 36 /* score row pitch in floats (float2 reads) */
#define DEC_MAXG 4 /* 32-column groups per warp: r <= 512 */
#define DEC_RING 4 /* chunks of pool row ids kept: in use, copying, prefetched to L2, next */
#define DEC_QU 9   /* q loads in flight per thread in the prologue */

typedef struct dec_layout {
    int D, Dk, Lr, Lq, swz;
} dec_layout;

__host__ __device__ static inline dec_layout dec_dims(int r, int rope)
{
    dec_layout L;
    L.D = r + rope;
    L.Dk = (L.D + 15) & ~15;
    L.Lr = L.Dk + (36 - L.Dk % 32) % 32; /* = 4 mod 32 */
    L.swz = L.Dk % 64 == 0;              /* whole groups of 8 units per row: swizzle in place */
    L.Lq = L.swz ? L.Dk : L.Dk + 8;      /* else an odd number of 16-byte units */
    return L;
}

__host__ __device__ static inline size_t dec_bytes(const dec_layout &L)
{
    return (size_t)2 * DEC_P * L.Lr * 4 + (size_t)MLA_DEC_G * L.Lq * 2 + (size_t)MLA_DEC_G * DEC_SCL * 4 +
           DEC_RING * DEC_P * 4 + 2 * 8;
}

// cp.async with zero fill: bytes 0 writes zeros (an unattended row).
__device__ __forceinline__ void dec_cp16(void *dst, const void *src, int bytes)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void dec_cp4(void *dst, const void *src, int bytes)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void dec_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void dec_wait0(void) { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void dec_bar(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// A row's latent and k_pe pieces into L2 (no shared memory): the chunk after the one being
// copied, so its HBM latency is hidden behind two chunks of work.
__device__ __forceinline__ void dec_prefetch(const mla_args &a, int64_t row)
{
    const char *lr = (const char *)(a.lat + row * a.ls0), *pr = (const char *)(a.kpe + row * a.ps0);
    if (a.vec) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(lr), "r"(a.r * 4) : "memory");
        if (a.rope) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(pr), "r"(a.rope * 4) : "memory");
    } else {
        for (int o = 0; o < a.r * 4; o += 128) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(lr + o));
        for (int o = 0; o < a.rope * 4; o += 128) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(pr + o));
    }
}

// The bulk-copy engine (sm_90): a contiguous piece global -> shared, completing on an mbarrier.
__device__ __forceinline__ void dec_bulk(void *dst, const void *src, int bytes, uint64_t *bar)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst), b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(d),
                 "l"(src), "r"(bytes), "r"(b)
                 : "memory");
}
__device__ __forceinline__ void dec_expect(uint64_t *bar, int bytes)
{
    unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
}

// Rows of one chunk into a stage by the bulk-copy engine (16-byte aligned pool rows): warp 0,
// lane p issues row p's latent and k_pe pieces; unattended rows are zeroed by the warp.
__device__ __forceinline__ void dec_issue_bulk(const mla_args &a, const dec_layout &L, float *st, const int *rid,
                                               uint64_t *bar, int lane)
{
    const int row = rid[lane];
    const unsigned valid = __ballot_sync(0xffffffffu, row >= 0);
    /* this stage's earlier zero stores (generic proxy) before the copy engine writes it */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    if (lane == 0) dec_expect(bar, __popc(valid) * L.D * 4);
    __syncwarp();
    float *dst = st + lane * L.Lr;
    if (row >= 0) {
        dec_bulk(dst, a.lat + (int64_t)row * a.ls0, a.r * 4, bar);
        if (a.rope) dec_bulk(dst + a.r, a.kpe + (int64_t)row * a.ps0, a.rope * 4, bar);
    }
    for (unsigned inv = ~valid; inv;) {
        const int p = __ffs(inv) - 1;
        inv &= inv - 1;
        for (int c4 = lane; c4 < L.D / 4; c4 += 32) *(float4 *)(st + p * L.Lr + 4 * c4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// Rows of one chunk into a stage by cp.async (any alignment): warp w copies rows w, w + 8, ...
__device__ __forceinline__ void dec_issue(const mla_args &a, const dec_layout &L, float *st, const int *rid, int w,
                                          int lane)
{
    const int r4 = a.r / 4, D4 = L.D / 4;
#pragma unroll
    for (int p = w; p < DEC_P; p += DEC_THREADS / 32) {
        const int row = rid[p];
        const int64_t rr = row < 0 ? 0 : row;
        float *dst = st + p * L.Lr;
        const float *lr = a.lat + rr * a.ls0, *pr = a.kpe + rr * a.ps0;
        if (a.vec) {
            const int nb = row < 0 ? 0 : 16;
            for (int c4 = lane; c4 < D4; c4 += 32) dec_cp16(dst + 4 * c4, c4 < r4 ? lr + 4 * c4 : pr + 4 * (c4 - r4), nb);
        } else {
            const int nb = row < 0 ? 0 : 4;
            for (int c = lane; c < L.D; c += 32) dec_cp4(dst + c, c < a.r ? lr + c : pr + (c - a.r), nb);
        }
    }
}

// bulk: rows by the bulk-copy engine (16-byte aligned rows), else by cp.async.
__global__ void __launch_bounds__(DEC_THREADS, 1) k_mla_decode(mla_args a, int bulk)
{
    extern __shared__ float4 dsh[];
    const dec_layout L = dec_dims(a.r, a.rope);
    float *stg = (float *)dsh;                       /* [2][P][Lr] */
    uint16_t *qs = (uint16_t *)(stg + 2 * DEC_P * L.Lr); /* [64][Lq] BF16, permuted + swizzled */
    float *sc = (float *)(qs + MLA_DEC_G * L.Lq);     /* [64][SCL] scaled scores of the chunk */
    int *ring = (int *)(sc + MLA_DEC_G * DEC_SCL);    /* [RING][P] pool rows of chunks */
    uint64_t *bar = (uint64_t *)(ring + DEC_RING * DEC_P); /* [2] stage filled (bulk) */
    const int groups = (a.H + MLA_DEC_G - 1) / MLA_DEC_G;
    const int t = blockIdx.x / groups, h0 = (blockIdx.x - t * groups) * MLA_DEC_G, s = blockIdx.y, S = gridDim.y;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g4 = lane >> 2, q4 = lane & 3;
    const int mp = w & 1, nq = w >> 1, cq = w >> 1;
    const int HT = min(4, (a.H - h0 + 15) / 16); /* m16 head tiles of this group */
    const int NG = a.r / 32;                     /* 32-column groups */
    const int pos = a.idx.pos[t], n = mla_count(a, t), sbase = a.idx.slot_base[t];
    const int nch = (n + DEC_P - 1) / DEC_P, cps = (nch + S - 1) / S;
    const int ch0 = s * cps, ch1 = min(nch, ch0 + cps);

    // prologue: row ids of the first three chunks (warps 5, 6, 7 at once), zero the K padding
    // of the stages
    int pcur = 0;
    if (w >= 5 && ch0 < ch1) {
        const int k = w - 5, j = (ch0 + k) * DEC_P + lane;
        ring[k * DEC_P + lane] = ch0 + k < ch1 && j < n ? (int)mla_row(a, t, j, pos) : -1;
        if (w == 7) {
            const int j3 = (ch0 + 3) * DEC_P + lane;
            pcur = a.sel_pos && ch0 + 3 < ch1 && j3 < n ? a.sel_pos[(int64_t)t * a.sel_stride + j3] : j3;
        }
    }
    if (L.Dk > L.D)
        for (int e = tid; e < 2 * DEC_P * (L.Dk - L.D); e += DEC_THREADS) {
            const int p = e / (L.Dk - L.D);
            stg[p * L.Lr + L.D + (e - p * (L.Dk - L.D))] = 0.0f;
        }
    if (bulk && tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"((unsigned)__cvta_generic_to_shared(bar + 1)));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (ch0 < ch1) {
        if (!bulk) dec_issue(a, L, stg, ring, w, lane);
        else if (w == 0) dec_issue_bulk(a, L, stg, ring, bar, lane);
    }
    dec_commit();
    if (a.l2pf && w == 6 && ch0 + 1 < ch1 && ring[DEC_P + lane] >= 0) dec_prefetch(a, ring[DEC_P + lane]);

    // q of the group's heads -> BF16: natural dims 4c..4c+3 of a 16-wide block b go to
    // positions (2c, 2c + 1) and (8 + 2c, 9 + 2c), the order of a row's float4 in the B fragment
    {
        const int T2 = a.two * a.T, r4 = a.r / 4, D4 = L.D / 4, Dk4 = L.Dk / 4, Lqu = L.Lq / 8;
        const int total = 16 * HT * Dk4;
        // DEC_QU elements per thread loaded before any is stored: one memory latency per
        // DEC_QU elements instead of one per element
        for (int e0 = tid; e0 < total; e0 += DEC_THREADS * DEC_QU) {
            float4 v[DEC_QU], u[DEC_QU];
#pragma unroll
            for (int k = 0; k < DEC_QU; k++) {
                const int e = e0 + k * DEC_THREADS, hr = e / Dk4, c4 = e - hr * Dk4, h = h0 + hr;
                v[k] = u[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (e < total && h < a.H && c4 < r4) {
                    const float4 *ql = (const float4 *)(a.qlat + ((int64_t)h * T2 + t) * a.r) + c4;
                    v[k] = ql[0];
                    if (a.two == 2) u[k] = ql[(int64_t)a.T * r4];
                } else if (e < total && h < a.H && c4 < D4) {
                    const float *qp = a.q + (int64_t)t * a.qs0 + (int64_t)h * a.qs1 + a.nope + 4 * (c4 - r4);
                    v[k] = make_float4(qp[0], qp[1], qp[2], qp[3]);
                }
            }
#pragma unroll
            for (int k = 0; k < DEC_QU; k++) {
                const int e = e0 + k * DEC_THREADS, hr = e / Dk4, c4 = e - hr * Dk4;
                if (e >= total) break;
                const float4 x = make_float4(v[k].x + u[k].x, v[k].y + u[k].y, v[k].z + u[k].z, v[k].w + u[k].w);
                int u0 = 2 * (c4 >> 2), u1 = u0 + 1;
                if (L.swz) u0 ^= hr & 7, u1 ^= hr & 7;
                uint16_t *qr = qs + (int64_t)hr * Lqu * 8 + 2 * (c4 & 3);
                *(uint32_t *)(qr + 8 * u0) = mma_pack(x.x, x.y);
                *(uint32_t *)(qr + 8 * u1) = mma_pack(x.z, x.w);
            }
        }
    }

    float m[2][2], l[2][2];
    float acc[2][DEC_MAXG][4][4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        m[j][0] = m[j][1] = -INFINITY;
        l[j][0] = l[j][1] = 0.0f;
#pragma unroll
        for (int gi = 0; gi < DEC_MAXG; gi++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[j][gi][i][0] = acc[j][gi][i][1] = acc[j][gi][i][2] = acc[j][gi][i][3] = 0.0f;
    }
    const bool work = 2 * mp < HT; /* this warp has at least one head tile */
    const int nk = L.Dk / 16;

    for (int c = ch0; c < ch1; c++) {
        const int it = c - ch0;
        const float *st = stg + (it & 1) * DEC_P * L.Lr;
        const int *rid = ring + (it % DEC_RING) * DEC_P;
        if (bulk)
            mla_mwait(bar + (it & 1), (it >> 1) & 1);
        else
            dec_wait0();
        __syncthreads(); /* chunk c landed for everyone; chunk c - 1's stage and scores are free */
        if (c + 1 < ch1) {
            float *nst = stg + ((it + 1) & 1) * DEC_P * L.Lr;
            const int *nrid = ring + ((it + 1) % DEC_RING) * DEC_P;
            if (!bulk) dec_issue(a, L, nst, nrid, w, lane);
            else if (w == 0) dec_issue_bulk(a, L, nst, nrid, bar + ((it + 1) & 1), lane);
        }
        dec_commit();
        // warp 6: chunk c + 2 into L2; warp 7: the table lookup of chunk c + 3 (its selected
        // position came last iteration) and the selected position of chunk c + 4, stored into
        // the ring after this chunk
        if (a.l2pf && w == 6 && c + 2 < ch1) {
            const int row = ring[((it + 2) % DEC_RING) * DEC_P + lane];
            if (row >= 0) dec_prefetch(a, row);
        }
        int nrow = -1, pnext = 0;
        bool ok3 = false;
        if (w == 7) {
            const int j3 = (c + 3) * DEC_P + lane, j4 = j3 + DEC_P;
            ok3 = c + 3 < ch1 && j3 < n && pcur >= 0 && pcur <= pos;
            if (ok3) nrow = a.idx.slot_table[sbase + pcur];
            pnext = a.sel_pos && c + 4 < ch1 && j4 < n ? a.sel_pos[(int64_t)t * a.sel_stride + j4] : j4;
        }

        // scores: heads of tiles 2mp, 2mp + 1 x rows 8nq + (0 4 1 5 2 6 3 7)[n]
        if (work) {
            float cs[2][4], cz[2][4]; /* even and odd k-steps: two independent mma chains per tile */
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) cs[j][i] = cz[j][i] = 0.0f;
            const float *kr = st + (8 * nq + (g4 >> 1) + 4 * (g4 & 1)) * L.Lr + 4 * q4;
            const int hq0 = 32 * mp + (lane & 15), hq1 = hq0 + 16, ub = lane >> 4;
            const uint16_t *qa0 = qs + (int64_t)hq0 * L.Lq, *qa1 = qs + (int64_t)hq1 * L.Lq;
            const int x0 = L.swz ? hq0 & 7 : 0, x1 = L.swz ? hq1 & 7 : 0;
            const bool two_t = 2 * mp + 1 < HT;
#pragma unroll 2
            for (int kk = 0; kk < nk; kk += 2) {
                const bool odd = kk + 1 < nk;
                const float4 v = *(const float4 *)(kr + 16 * kk);
                float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (odd) y = *(const float4 *)(kr + 16 * kk + 16);
                const uint32_t b0 = mma_pack(v.x, v.y), b1 = mma_pack(v.z, v.w);
                const uint32_t d0 = mma_pack(y.x, y.y), d1 = mma_pack(y.z, y.w);
                const int u = 2 * kk + ub;
                uint32_t af[4], ag[4];
                ldsm_x4(af, qa0 + 8 * (u ^ x0));
                mma_16816(cs[0], af, b0, b1);
                if (odd) {
                    ldsm_x4(ag, qa0 + 8 * ((u + 2) ^ x0));
                    mma_16816(cz[0], ag, d0, d1);
                }
                if (two_t) {
                    ldsm_x4(af, qa1 + 8 * (u ^ x1));
                    mma_16816(cs[1], af, b0, b1);
                    if (odd) {
                        ldsm_x4(ag, qa1 + 8 * ((u + 2) ^ x1));
                        mma_16816(cz[1], ag, d0, d1);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) cs[j][i] += cz[j][i];
            const int R0 = 8 * nq + q4, R1 = R0 + 4;
            const bool v0 = rid[R0] >= 0, v1 = rid[R1] >= 0;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (2 * mp + j >= HT) continue;
                float *s0 = sc + (32 * mp + 16 * j + g4) * DEC_SCL, *s1 = s0 + 8 * DEC_SCL;
                s0[R0] = v0 ? cs[j][0] * a.scale : -INFINITY;
                s0[R1] = v1 ? cs[j][1] * a.scale : -INFINITY;
                s1[R0] = v0 ? cs[j][2] * a.scale : -INFINITY;
                s1[R1] = v1 ? cs[j][3] * a.scale : -INFINITY;
            }
        }
        dec_bar(1 + mp, 128); /* the four warps of mp: the chunk's scores of their heads */

        // online softmax of this warp's heads (the four cq warps of mp compute the same
        // statistics), then P.latent on its column groups
        if (work) {
            uint32_t af[2][2][4];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (2 * mp + j >= HT) continue;
                float sv[2][8];
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
                    const float *sr = sc + (32 * mp + 16 * j + g4 + 8 * rr) * DEC_SCL;
#pragma unroll
                    for (int kk = 0; kk < 2; kk++) {
                        const float2 x = *(const float2 *)(sr + 16 * kk + 2 * q4);
                        const float2 y = *(const float2 *)(sr + 16 * kk + 8 + 2 * q4);
                        sv[rr][4 * kk + 0] = x.x, sv[rr][4 * kk + 1] = x.y;
                        sv[rr][4 * kk + 2] = y.x, sv[rr][4 * kk + 3] = y.y;
                    }
                    const float cr = mla_softmax8(sv[rr], m[j][rr], l[j][rr]);
#pragma unroll
                    for (int gi = 0; gi < DEC_MAXG; gi++)
#pragma unroll
                        for (int i = 0; i < 4; i++) acc[j][gi][i][2 * rr] *= cr, acc[j][gi][i][2 * rr + 1] *= cr;
                }
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    af[j][kk][0] = mma_pack(sv[0][4 * kk], sv[0][4 * kk + 1]);
                    af[j][kk][1] = mma_pack(sv[1][4 * kk], sv[1][4 * kk + 1]);
                    af[j][kk][2] = mma_pack(sv[0][4 * kk + 2], sv[0][4 * kk + 3]);
                    af[j][kk][3] = mma_pack(sv[1][4 * kk + 2], sv[1][4 * kk + 3]);
                }
            }
            const bool two_t = 2 * mp + 1 < HT;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
#pragma unroll
                for (int gi = 0; gi < DEC_MAXG; gi++) {
                    const int g = cq + 4 * gi;
                    if (g >= NG) continue;
                    const float *vb = st + (16 * kk + 2 * q4) * L.Lr + 32 * g + 4 * g4;
                    const float4 v0 = *(const float4 *)vb, v1 = *(const float4 *)(vb + L.Lr);
                    const float4 v2 = *(const float4 *)(vb + 8 * L.Lr), v3 = *(const float4 *)(vb + 9 * L.Lr);
                    const uint32_t bx0 = mma_pack(v0.x, v1.x), bx1 = mma_pack(v2.x, v3.x);
                    const uint32_t by0 = mma_pack(v0.y, v1.y), by1 = mma_pack(v2.y, v3.y);
                    const uint32_t bz0 = mma_pack(v0.z, v1.z), bz1 = mma_pack(v2.z, v3.z);
                    const uint32_t bw0 = mma_pack(v0.w, v1.w), bw1 = mma_pack(v2.w, v3.w);
                    mma_16816(acc[0][gi][0], af[0][kk], bx0, bx1);
                    mma_16816(acc[0][gi][1], af[0][kk], by0, by1);
                    mma_16816(acc[0][gi][2], af[0][kk], bz0, bz1);
                    mma_16816(acc[0][gi][3], af[0][kk], bw0, bw1);
                    if (two_t) {
                        mma_16816(acc[1][gi][0], af[1][kk], bx0, bx1);
                        mma_16816(acc[1][gi][1], af[1][kk], by0, by1);
                        mma_16816(acc[1][gi][2], af[1][kk], bz0, bz1);
                        mma_16816(acc[1][gi][3], af[1][kk], bw0, bw1);
                    }
                }
            }
        }
        if (w == 7) {
            ring[((it + 3) % DEC_RING) * DEC_P + lane] = ok3 && nrow >= 0 && nrow < a.pool_rows ? nrow : -1;
            pcur = pnext;
        }
    }

    // outputs: accumulators (normalized when unsplit) -> shared [64][r + 4] -> coalesced stores
    dec_wait0();
    __syncthreads();
    const int Lo = a.r + 4;
    float *osh = stg, *msh = sc, *lsh = sc + MLA_DEC_G;
    if (work) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (2 * mp + j >= HT) continue;
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const int hr = 32 * mp + 16 * j + g4 + 8 * rr;
                const float f = S > 1 ? 1.0f : l[j][rr] > 0 ? 1.0f / l[j][rr] : 0.0f;
                if (cq == 0 && q4 == 0) msh[hr] = m[j][rr], lsh[hr] = l[j][rr];
#pragma unroll
                for (int gi = 0; gi < DEC_MAXG; gi++) {
                    const int g = cq + 4 * gi;
                    if (g >= NG) continue;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float *o = osh + hr * Lo + 32 * g + 8 * q4 + i;
                        o[0] = acc[j][gi][i][2 * rr] * f;
                        o[4] = acc[j][gi][i][2 * rr + 1] * f;
                    }
                }
            }
        }
    }
    __syncthreads();
    const int nh = min(MLA_DEC_G, a.H - h0), r4 = a.r / 4;
    for (int e = tid; e < nh * r4; e += DEC_THREADS) {
        const int hr = e / r4, c4 = e - hr * r4, h = h0 + hr;
        const float4 v = *(const float4 *)(osh + hr * Lo + 4 * c4);
        if (S > 1) {
            float *pr = a.part + (((int64_t)t * a.H + h) * S + s) * (2 + a.r);
            if (c4 == 0) pr[0] = msh[hr], pr[1] = lsh[hr];
            pr[2 + 4 * c4] = v.x, pr[3 + 4 * c4] = v.y, pr[4 + 4 * c4] = v.z, pr[5 + 4 * c4] = v.w;
        } else if (a.ob) {
            const float x[4] = {v.x, v.y, v.z, v.w};
            uint16_t hi[4], lo[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                hi[i] = nb_d_to_bf16(x[i]);
                lo[i] = nb_d_to_bf16(x[i] - nb_d_bf16(hi[i]));
            }
            uint16_t *oh = a.ob + ((int64_t)h * (a.ob1 ? 1 : 2) * a.T + t) * a.r + 4 * c4;
            *(uint2 *)oh = make_uint2(hi[0] | (uint32_t)hi[1] << 16, hi[2] | (uint32_t)hi[3] << 16);
            if (!a.ob1)
                *(uint2 *)(oh + (int64_t)a.T * a.r) =
                    make_uint2(lo[0] | (uint32_t)lo[1] << 16, lo[2] | (uint32_t)lo[3] << 16);
        } else {
            *(float4 *)(a.o32 + ((int64_t)h * a.T + t) * a.r + 4 * c4) = v;
        }
    }
}

extern "C" size_t nb_cuda_mla_dec_smem(int r, int rope, int max_smem)
{
    if (r <= 0 || r % 32 || r > 32 * 4 * DEC_MAXG || rope < 0 || rope % 4) return 0;
    const size_t b = dec_bytes(dec_dims(r, rope));
    return b <= (size_t)max_smem ? b : 0;
}

static int g_copy = -1; /* nb_cuda_mla_dec_force_copy; -1: NIBBLE_CUDA_MLA_DEC_COPY, else bulk */

extern "C" void nb_cuda_mla_dec_force_copy(int bulk) { g_copy = bulk == 0 || bulk == 1 ? bulk : -1; }

extern "C" nb_status nb_cuda_mla_dec_launch(const mla_args *a, int groups, int S, int device, int max_smem,
                                            cudaStream_t stream)
{
    static int attr_dev = -1; /* the opt-in maximum, set once per process and device */
    if (a->lat16) /* BF16 pools run mma in its place (mla.h nb_cuda_mla_kernel_pool) */
        return nb_error(NB_ERR_UNSUPPORTED, "mla_attention dec: F32 pool rows only");
    const size_t smem = nb_cuda_mla_dec_smem(a->r, a->rope, max_smem);
    if (!smem)
        return nb_error(NB_ERR_UNSUPPORTED, "mla_attention dec: rank %d / rope %d not taken by the decode kernel", a->r,
                        a->rope);
    if (attr_dev != device) {
        NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_decode, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
        NB_CUDA_TRY(cudaFuncSetAttribute(k_mla_decode, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        attr_dev = device;
    }
    int bulk = g_copy;
    if (bulk < 0) {
        const char *e = getenv("NIBBLE_CUDA_MLA_DEC_COPY");
        bulk = !(e && !strcmp(e, "async"));
    }
    k_mla_decode<<<dim3((unsigned)((int64_t)a->T * groups), (unsigned)S), DEC_THREADS, smem, stream>>>(*a, bulk && a->vec);
    NB_CUDA_LAUNCHED("mla_attention dec");
    return NB_OK;
}

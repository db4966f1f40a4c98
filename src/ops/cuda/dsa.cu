// The DSA indexer's scores and per-token top-k over the slot-addressed pool (ops.h
// nb_op_dsa_select): score[i, p] = sum_h w[i, h] relu(scale q[i, h] . key[p]).
// A token whose context fits in topk selects every position in order (ops.h) without scoring
// any. Otherwise the best `topk` keys (~ordered(score) << 32 | position: unique, and ascending
// order is the CPU op's: score descending, ties to the lower position) are found in one of
// three ways, the first two with identical results (the same scoring code, exact selection),
// the third with the mma form's (below, "The prefill form"):
//   one block per token (k_dsa, 8 warps): the block keeps its best keys in shared memory and
//     merges each chunk of S - topk new positions into them by a bitonic sort of S keys (S: the
//     power of two >= 2 topk, >= 1024).
//   split (k_dsa_part + k_dsa_merge), for small batches (NIBBLE_CUDA_DSA_SPLIT): G blocks per
//     token, G from the token count alone (enough k_dsa_part blocks for one wave; a captured graph
//     replays at other contexts), each scoring a contiguous range of ceil(n / G) positions (rounded
//     up to 32) and keeping its best `topk` keys the same way, into device scratch; then one block
//     of 1024 threads per token finds the topk-th smallest of the candidates by a radix select
//     (11-bit digits of the score word, then of the position's significant bits, each pass over
//     the keys matching the digits found so far; it stops once the digit's bucket is taken whole),
//     gathers the keys at or below it and sorts them. Only the first digit passes over every
//     candidate in global memory: the next pass sends the keys below its bin to the selection and
//     those in it to shared memory, where the lower digits run.
// Scoring, three forms:
//   lanes (the default where it applies: 16-byte aligned key rows, head dim a multiple of 4,
//     32 or 64 heads; ~9x the warp form on an H200, docs/cuda-backend.md): a lane scores one
//     position. It streams its key row in float4s and
//     keeps one accumulator per head; the queries come from shared memory by broadcast loads.
//     About 160 instructions per position at GLM-5's 32 x 128, and no shuffles.
//   mma (NIBBLE_CUDA_DSA=mma; lanes' conditions and head dim 128): tensor cores. A warp scores
//     16 positions by mma.sync m16n8k8 in TF32 with both operands split in two (hi + lo, three
//     products): about float32's accuracy at a fifth of the lanes form's instructions.
//   warp (any shape; NIBBLE_CUDA_DSA=warp forces it): a warp scores one position, one head at a
//     time, each head's dot product summed across the warp by shuffles (the shuffle unit bounds
//     it: ~190 shuffles and ~550 instructions per position at 32 x 128).
// Exercised by tests/cuda_ops/test_cuda_vs_cpu.c (dsa_select: both forms, one block per token
// and split, against the CPU op and each other; `dsa-time T CTX [G]` times them).
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"

#define NB_DSA_WARPS 8
#define NB_DSA_MAXD 8                /* the warp form's index head dims per lane: up to 256 */
#define NB_DSA_MERGE_THREADS 1024    /* k_dsa_merge: a lone block per token streams the candidates */
#define NB_DSA_DIGIT 11              /* radix select digit bits (a 2048-bin shared histogram) */
#define NB_DSA_SPLIT_MAX 512         /* splits per token at most */
#define NB_DSA_SPLIT_MAX_BLOCKS 2048 /* tokens x splits at most: bounds the scratch (x topk x 8 bytes) */
#define NB_DSA_MERGE_WCAP 16384      /* k_dsa_merge: keys of the first digit's bin kept in shared memory */
#define NB_DSA_MERGE_OWN_SMEM 12288  /* k_dsa_merge's static shared memory, rounded up */
// nb_cuda_scratch slot of the split candidates. Ops own slots 0-3 (callers 4-7 hold the engine's
// activations and index arrays, this op's inputs); the candidates live only within this call.
// Slot 1 is the linear kernels' fixed 32 MiB split-K partials at the same small batches
// (linear_mma.cu), which the candidates (at most ~9 MiB at GLM-5's topk) fit without growing it.
#define NB_DSA_SCRATCH_SLOT 1

typedef struct dsa_args {
    const float *q, *w, *key;
    int64_t qs0, qs1, ws0, ks0, pool_rows;
    float sm;
    int nh, hd, topk, S;
    nb_attn_index idx;
    int32_t *sel_pos, *sel_count;
} dsa_args;

// Ascending order of the key = descending score, then ascending position. -0 counts as +0.
__device__ __forceinline__ unsigned long long dsa_key(float s, int p)
{
    uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)(~ord) << 32) | (uint32_t)p;
}

// Bitonic sort (ascending) of the block's S keys in shared memory; ends with a barrier.
__device__ __forceinline__ void dsa_sort(unsigned long long *cand, int S)
{
    for (int kk = 2; kk <= S; kk <<= 1)
        for (int jj = kk >> 1; jj > 0; jj >>= 1) {
            for (int e = threadIdx.x; e < S; e += blockDim.x) {
                int o = e ^ jj;
                if (o > e) {
                    unsigned long long a = cand[e], b = cand[o];
                    bool up = (e & kk) == 0;
                    if ((a > b) == up) {
                        cand[e] = b;
                        cand[o] = a;
                    }
                }
            }
            __syncthreads();
        }
}

// The pool row of position p of token i, or -1 (outside the pool: not scored, never selected).
__device__ __forceinline__ int64_t dsa_row(const int32_t *slots, int p, int64_t pool_rows)
{
    int64_t row = slots[p];
    return row >= 0 && row < pool_rows ? row : -1;
}

// Score of one key row for the lanes form: NH accumulators, the row in float4s, q[h] (hd
// floats per head, 16-byte aligned) broadcast from shared memory.
template <int NH>
__device__ __forceinline__ float dsa_score_lane(const float *qs, const float *wsh, float sm, const float4 *kr, int hd4)
{
    float acc[NH > 0 ? NH : 1]; /* NH <= 0 (the warp and mma forms) never calls this */
#pragma unroll
    for (int h = 0; h < NH; h++) acc[h] = 0.0f;
#pragma unroll 2
    for (int d4 = 0; d4 < hd4; d4++) {
        const float4 kv = __ldg(kr + d4);
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const float4 q4 = *(const float4 *)(qs + (h * hd4 + d4) * 4);
            acc[h] += q4.x * kv.x + q4.y * kv.y + q4.z * kv.z + q4.w * kv.w;
        }
    }
    float total = 0.0f;
#pragma unroll
    for (int h = 0; h < NH; h++) {
        const float d = acc[h] * sm;
        if (d > 0) total += d * wsh[h];
    }
    return total;
}

// TF32 (the float with its low 13 mantissa bits rounded off) and the rest, also TF32: hi + lo
// carries ~21 significant bits.
__device__ __forceinline__ void dsa_tf32_split(float x, uint32_t *hi, uint32_t *lo)
{
    uint32_t h, l;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(l) : "f"(x - __uint_as_float(h)));
    *hi = h, *lo = l;
}

// Floats of shared memory the query takes: the mma form keeps it split, in fragment order.
__host__ __device__ __forceinline__ int dsa_query_floats(int mma, int nh, int hd) { return (mma ? 2 : 1) * nh * hd; }

// Token i's queries and weights [nh] into shared memory (no barrier). NH >= 0: [nh * hd] as they
// are. NH < 0 (the mma form, hd 128): the B fragments of mma.m16n8k8 per k-step s (16) and head
// tile nt (nh / 8): lane (g, t) = (lane / 4, lane % 4) holds head 8 nt + g at dims 32 t + 2 s and
// + 1 (the k order is permuted alike for keys and queries: lane t's key dims are contiguous),
// as {hi, hi, lo, lo}.
template <int NH>
__device__ __forceinline__ void dsa_load_query(float *qs, float *wsh, const dsa_args &a, int i)
{
    if (NH < 0) {
        const int NT = (NH < 0 ? -NH : 8) / 8;
        for (int e = threadIdx.x; e < 16 * NT * 32; e += blockDim.x) {
            const int l = e & 31, nt = (e >> 5) % NT, st = (e >> 5) / NT;
            const float *qh = a.q + (int64_t)i * a.qs0 + (int64_t)(8 * nt + (l >> 2)) * a.qs1 + 32 * (l & 3) + 2 * st;
            uint32_t h0, l0, h1, l1;
            dsa_tf32_split(qh[0], &h0, &l0);
            dsa_tf32_split(qh[1], &h1, &l1);
            ((uint4 *)qs)[e] = make_uint4(h0, h1, l0, l1);
        }
    } else {
        for (int e = threadIdx.x; e < a.nh * a.hd; e += blockDim.x)
            qs[e] = a.q[(int64_t)i * a.qs0 + (int64_t)(e / a.hd) * a.qs1 + e % a.hd];
    }
    for (int e = threadIdx.x; e < a.nh; e += blockDim.x) wsh[e] = a.w[(int64_t)i * a.ws0 + e];
}

__device__ __forceinline__ void dsa_mma_tf32(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The mma form's scores: a warp takes 16 positions at a time, the key rows as the A operand
// (rows g and g + 8 of the tile per lane, dims 32 t .. 32 t + 31: eight 16-byte loads each) and
// the query heads as B, in TF32 split three ways (lo.hi + hi.lo + hi.hi: about float32 accuracy).
// A lane ends with heads 8 nt + 2 t and + 1 of positions g and g + 8; relu, scale, the head
// weights, and two shuffles over t give the totals. out[j] for j < m as dsa_score_keys.
template <int NH>
__device__ __forceinline__ void dsa_score_mma(unsigned long long *out, int m, int p0, int end, const dsa_args &a,
                                              const int32_t *slots, const float *qs, const float *wsh)
{
    constexpr int NT = (NH < 0 ? -NH : 8) / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint4 *qf = (const uint4 *)qs;
    for (int j0 = (threadIdx.x >> 5) * 16; j0 < m; j0 += NB_DSA_WARPS * 16) {
        const int ja = j0 + g, jb = ja + 8;
        const int64_t ra = ja < m && p0 + ja < end ? dsa_row(slots, p0 + ja, a.pool_rows) : -1;
        const int64_t rb = jb < m && p0 + jb < end ? dsa_row(slots, p0 + jb, a.pool_rows) : -1;
        const float4 *ka = (const float4 *)(a.key + (ra < 0 ? 0 : ra) * a.ks0) + 8 * t;
        const float4 *kb = (const float4 *)(a.key + (rb < 0 ? 0 : rb) * a.ks0) + 8 * t;
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float va[16], vb[16];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float4 x = ra >= 0 ? __ldg(ka + 4 * half + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                const float4 y = rb >= 0 ? __ldg(kb + 4 * half + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                va[4 * c] = x.x, va[4 * c + 1] = x.y, va[4 * c + 2] = x.z, va[4 * c + 3] = x.w;
                vb[4 * c] = y.x, vb[4 * c + 1] = y.y, vb[4 * c + 2] = y.z, vb[4 * c + 3] = y.w;
            }
#pragma unroll
            for (int s2 = 0; s2 < 8; s2++) {
                /* a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4): dims 2 s and 2 s + 1 */
                uint32_t h0, h1, h2, h3, l0, l1, l2, l3;
                dsa_tf32_split(va[2 * s2], &h0, &l0);
                dsa_tf32_split(vb[2 * s2], &h1, &l1);
                dsa_tf32_split(va[2 * s2 + 1], &h2, &l2);
                dsa_tf32_split(vb[2 * s2 + 1], &h3, &l3);
                uint4 b[NT];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) b[nt] = qf[((8 * half + s2) * NT + nt) * 32 + lane];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], l0, l1, l2, l3, b[nt].x, b[nt].y);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], h0, h1, h2, h3, b[nt].z, b[nt].w);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], h0, h1, h2, h3, b[nt].x, b[nt].y);
            }
        }
        float ta = 0.0f, tb = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float wh = wsh[8 * nt + 2 * t + e];
                const float da = acc[nt][e] * a.sm, db = acc[nt][2 + e] * a.sm;
                if (da > 0) ta += da * wh;
                if (db > 0) tb += db * wh;
            }
        ta += __shfl_xor_sync(0xffffffffu, ta, 1);
        tb += __shfl_xor_sync(0xffffffffu, tb, 1);
        ta += __shfl_xor_sync(0xffffffffu, ta, 2);
        tb += __shfl_xor_sync(0xffffffffu, tb, 2);
        if (t == 0) {
            if (ja < m) out[ja] = ra < 0 ? ~0ull : dsa_key(ta, p0 + ja);
            if (jb < m) out[jb] = rb < 0 ? ~0ull : dsa_key(tb, p0 + jb);
        }
    }
}

// out[j] = the key of position p0 + j for j < m: ~0 at or past `end` and for rows outside the
// pool. NH > 0: a lane per position (dsa_score_lane); NH == 0: a warp per position; NH < 0: the
// mma form (dsa_score_mma). The one
// scoring code of both kernels, so their scores agree bit for bit. No barrier.
template <int NH>
__device__ __forceinline__ void dsa_score_keys(unsigned long long *out, int m, int p0, int end, const dsa_args &a,
                                               const int32_t *slots, const float *qs, const float *wsh)
{
    if (NH < 0) {
        dsa_score_mma<NH>(out, m, p0, end, a, slots, qs, wsh);
        return;
    }
    if (NH > 0) {
        for (int j = threadIdx.x; j < m; j += blockDim.x) {
            const int p = p0 + j;
            const int64_t row = p < end ? dsa_row(slots, p, a.pool_rows) : -1;
            out[j] = row < 0 ? ~0ull
                             : dsa_key(dsa_score_lane<NH>(qs, wsh, a.sm, (const float4 *)(a.key + row * a.ks0), a.hd / 4), p);
        }
        return;
    }
    const int lane = threadIdx.x & 31, hd = a.hd;
    for (int j = threadIdx.x >> 5; j < m; j += NB_DSA_WARPS) {
        const int p = p0 + j;
        unsigned long long k = ~0ull;
        const int64_t row = p < end ? dsa_row(slots, p, a.pool_rows) : -1;
        if (row >= 0) {
            const float *kr = a.key + row * a.ks0;
            float kv[NB_DSA_MAXD];
#pragma unroll
            for (int c = 0; c < NB_DSA_MAXD; c++) kv[c] = lane + 32 * c < hd ? kr[lane + 32 * c] : 0.0f;
            float total = 0;
            for (int h = 0; h < a.nh; h++) {
                float dsum = 0;
#pragma unroll
                for (int c = 0; c < NB_DSA_MAXD; c++)
                    if (lane + 32 * c < hd) dsum += qs[h * hd + lane + 32 * c] * kv[c];
                dsum = __shfl_sync(0xffffffffu, nb_d_warp_sum(dsum), 0) * a.sm;
                if (dsum > 0) total += dsum * wsh[h];
            }
            k = dsa_key(total, p);
        }
        if (lane == 0) out[j] = k;
    }
}

// The best `topk` keys of positions [b, e) into cand[0, min(e - b, topk)), ~0 for rows outside
// the pool or where there are fewer: each chunk of S - topk positions is scored into
// cand[topk, S) and merged by a sort (ascending order); a range of at most topk positions is
// scored into cand[0, e - b) as it is, unsorted.
// Begins with a barrier (the query's load is ordered before the scoring); ends with one.
template <int NH>
__device__ __forceinline__ void dsa_best(unsigned long long *cand, int b, int e, const dsa_args &a, const int32_t *slots,
                                         const float *qs, const float *wsh)
{
    const int topk = a.topk, one = e - b <= topk;
    if (!one)
        for (int t = threadIdx.x; t < topk; t += blockDim.x) cand[t] = ~0ull;
    __syncthreads();
    const int CH = one ? e - b : a.S - topk;
    for (int c0 = b; c0 < e; c0 += CH) {
        dsa_score_keys<NH>(cand + (one ? 0 : topk), CH, c0, e, a, slots, qs, wsh);
        __syncthreads();
        if (!one) dsa_sort(cand, a.S);
    }
}

// A context that fits in topk: every position, in order, no scores (ops.h).
__device__ __forceinline__ void dsa_write_all(const dsa_args &a, int i, int n)
{
    for (int t = threadIdx.x; t < n; t += blockDim.x) a.sel_pos[(int64_t)i * a.topk + t] = t;
    if (threadIdx.x == 0) a.sel_count[i] = n;
}

// Append k to out[] where keep, at slots counted by *count (shared memory). Called by whole
// warps together; the order of the appended keys is arbitrary.
__device__ __forceinline__ void dsa_append(unsigned long long *out, int *count, unsigned long long k, bool keep)
{
    const int lane = threadIdx.x & 31;
    const unsigned m = __ballot_sync(0xffffffffu, keep);
    int base = 0;
    if (lane == 0 && m) base = atomicAdd(count, __popc(m));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (keep) out[base + __popc(m & ((1u << lane) - 1))] = k;
}

// Exclusive prefix sum of v over the block (whole warps, at most 32); *total (if not NULL) gets
// the sum. wsum: 32 ints of shared memory. Begins and ends with a barrier.
__device__ __forceinline__ int dsa_block_scan(int v, int *wsum, int *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads(); /* wsum's previous readers are done */
    if (lane == 31) wsum[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int t = lane < nw ? wsum[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        wsum[lane] = t;
    }
    __syncthreads();
    if (total) *total = wsum[nw - 1];
    const int r = x - v + (warp ? wsum[warp - 1] : 0);
    __syncthreads();
    return r;
}

// NH > 0: the lanes form for NH heads; NH == 0: the warp form; NH < 0: the mma form for -NH
// heads. One block per token.
template <int NH>
__global__ void __launch_bounds__(32 * NB_DSA_WARPS) k_dsa(const __grid_constant__ dsa_args a)
{
    extern __shared__ unsigned long long cand[]; /* [S], then q [nh * hd] and w [nh] floats */
    float *qs = (float *)(cand + a.S), *wsh = qs + dsa_query_floats(NH < 0, a.nh, a.hd);
    const nb_attn_index idx = a.idx;
    int32_t *sel_pos = a.sel_pos, *sel_count = a.sel_count;
    const int i = blockIdx.x, topk = a.topk;
    if (idx.pos[i] + 1 <= topk) {
        dsa_write_all(a, i, idx.pos[i] + 1);
        return;
    }
    dsa_load_query<NH>(qs, wsh, a, i);
    const int n = idx.pos[i] + 1;
    dsa_best<NH>(cand, 0, n, a, idx.slot_table + idx.slot_base[i], qs, wsh);
    for (int t = threadIdx.x; t < topk; t += blockDim.x) {
        unsigned long long k = cand[t];
        if (k != ~0ull) sel_pos[(int64_t)i * topk + t] = (int32_t)(k & 0xffffffffu);
    }
    if (threadIdx.x == 0) {
        int cnt = 0;
        while (cnt < topk && cand[cnt] != ~0ull) cnt++;
        sel_count[i] = cnt;
    }
}

// Split form, first kernel: block (s, i) keeps the best `topk` keys of token i's positions
// [s L, (s + 1) L) (L = ceil(n / G) rounded up to 32; the last blocks may get none), writes them
// (any order, none ~0) to cand_g[(i G + s) topk ...] and their number to cnt_g[i G + s]. A
// token whose context fits in topk is written whole by its block 0, as k_dsa does.
template <int NH>
__global__ void __launch_bounds__(32 * NB_DSA_WARPS)
    k_dsa_part(const __grid_constant__ dsa_args a, int G, unsigned long long *cand_g, int *cnt_g)
{
    extern __shared__ unsigned long long cand[]; /* as k_dsa's */
    __shared__ int kept;
    const nb_attn_index idx = a.idx;
    const int s = blockIdx.x, i = blockIdx.y, n = idx.pos[i] + 1, topk = a.topk;
    if (n <= topk) {
        if (s == 0) dsa_write_all(a, i, n);
        return;
    }
    const int L = ((n - 1) / G + 32) & ~31;
    const int b = (int)min((int64_t)s * L, (int64_t)n), e = (int)min((int64_t)b + L, (int64_t)n);
    int *cnt = cnt_g + (int64_t)i * G + s;
    if (b == e) {
        if (threadIdx.x == 0) *cnt = 0;
        return;
    }
    float *qs = (float *)(cand + a.S), *wsh = qs + dsa_query_floats(NH < 0, a.nh, a.hd);
    dsa_load_query<NH>(qs, wsh, a, i);
    if (threadIdx.x == 0) kept = 0;
    dsa_best<NH>(cand, b, e, a, idx.slot_table + idx.slot_base[i], qs, wsh);
    unsigned long long *out = cand_g + ((int64_t)i * G + s) * topk;
    const int m = min(e - b, topk);
    for (int j0 = 0; j0 < m; j0 += blockDim.x) {
        const int j = j0 + threadIdx.x;
        const unsigned long long k = j < m ? cand[j] : ~0ull;
        dsa_append(out, &kept, k, k != ~0ull);
    }
    __syncthreads();
    if (threadIdx.x == 0) *cnt = kept;
}

// The prefill form (k_dsa_tile; NIBBLE_CUDA_DSA_TILE=1, and where k_dsa_tile_wg cannot run): the mma
// form's scores, bit for bit (the same fragments, products and sums per position), for many
// tokens at a time. A block of NB_DSA_WARPS warps takes NB_DSA_TILE_P positions and a group of up
// to NB_DSA_TILE_T tokens; each warp splits its 16 key rows into TF32 hi / lo A fragments once
// and keeps them in registers (128 of them) while it scores them for every token of the group
// that reaches them. The queries pass through shared memory, double buffered: the next token's
// raw values are loaded before the current one is scored and split into the other buffer after.
// A warp reloads its rows only where the token's sequence changes (slot_base) or where its
// context grew into rows not loaded yet (the diagonal of a prefill chunk). Every key at or below
// the token's position is appended, unordered, to split s = p / topk of that token ([T][G][topk]
// keys, counts [T][G] zeroed before the launch), which k_dsa_merge then selects from as it does
// the part kernel's candidates; rows outside the pool are left out (never selected). Tokens whose
// context fits in topk are written whole by the blocks of position tile 0. 32 heads of 128 only.
#define NB_DSA_TILE_P (16 * NB_DSA_WARPS) /* positions per block */
#define NB_DSA_TILE_T 32                  /* tokens per block */
#define NB_DSA_TILE_NH 32
#define NB_DSA_TILE_QF (2 * NB_DSA_TILE_NH * 128)                    /* a query's split floats */
#define NB_DSA_TILE_RAW (NB_DSA_TILE_QF / 4 / (32 * NB_DSA_WARPS)) /* fragment entries per thread */
static_assert(NB_DSA_TILE_QF / 4 % (32 * NB_DSA_WARPS) == 0, "a query's fragment entries spread evenly over the block");
static_assert(NB_DSA_TILE_NH <= 32 * NB_DSA_WARPS, "one head weight per thread");

// The warp's 16 key rows (positions pw + g and pw + g + 8 of the token's slots, those below n)
// as TF32 hi / lo A fragments, in dsa_score_mma's order; *oka / *okb: the lane's rows exist.
__device__ __forceinline__ void dsa_tile_rows(uint32_t (*ah)[8][4], uint32_t (*al)[8][4], const dsa_args &a,
                                              const int32_t *slots, int pw, int n, bool *oka, bool *okb)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t ra = pw + g < n ? dsa_row(slots, pw + g, a.pool_rows) : -1;
    const int64_t rb = pw + g + 8 < n ? dsa_row(slots, pw + g + 8, a.pool_rows) : -1;
    *oka = ra >= 0, *okb = rb >= 0;
    const float4 *ka = (const float4 *)(a.key + (ra < 0 ? 0 : ra) * a.ks0) + 8 * t;
    const float4 *kb = (const float4 *)(a.key + (rb < 0 ? 0 : rb) * a.ks0) + 8 * t;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float va[16], vb[16];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float4 x = ra >= 0 ? __ldg(ka + 4 * half + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 y = rb >= 0 ? __ldg(kb + 4 * half + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            va[4 * c] = x.x, va[4 * c + 1] = x.y, va[4 * c + 2] = x.z, va[4 * c + 3] = x.w;
            vb[4 * c] = y.x, vb[4 * c + 1] = y.y, vb[4 * c + 2] = y.z, vb[4 * c + 3] = y.w;
        }
#pragma unroll
        for (int s2 = 0; s2 < 8; s2++) {
            dsa_tf32_split(va[2 * s2], &ah[half][s2][0], &al[half][s2][0]);
            dsa_tf32_split(vb[2 * s2], &ah[half][s2][1], &al[half][s2][1]);
            dsa_tf32_split(va[2 * s2 + 1], &ah[half][s2][2], &al[half][s2][2]);
            dsa_tf32_split(vb[2 * s2 + 1], &ah[half][s2][3], &al[half][s2][3]);
        }
    }
}

// The next token after i in [i, i1) with work in a block whose positions start at pb (its
// context beyond topk and beyond pb); i1 where none.
__device__ __forceinline__ int dsa_tile_next(const int32_t *pos, int i, int i1, int topk, int pb)
{
    for (i++; i < i1; i++) {
        const int n = pos[i] + 1;
        if (n > topk && n > pb) return i;
    }
    return i1;
}

// A prefill block's start: the blocks of position tile 0 write the tokens of [i0, i1) whose
// context fits in topk whole; returns the first token with work at pb (i1 where none).
// idx: the kernel's copy of a.idx (reading the parameter's instead changes the kernels' registers).
__device__ __forceinline__ int dsa_tile_first(const dsa_args &a, const nb_attn_index &idx, int topk, int i0, int i1, int pb)
{
    if (blockIdx.x == 0)
        for (int i = i0; i < i1; i++)
            if (idx.pos[i] + 1 <= topk) dsa_write_all(a, i, idx.pos[i] + 1);
    return dsa_tile_next(idx.pos, i0 - 1, i1, topk, pb);
}

// Token tok's query as this thread's share of the fragment entries (dsa_load_query's order),
// raw, and its head weight (threads below the head count).
__device__ __forceinline__ void dsa_tile_load(float2 *raw, float *wraw, const dsa_args &a, int tok)
{
    constexpr int NT = NB_DSA_TILE_NH / 8;
#pragma unroll
    for (int r = 0; r < NB_DSA_TILE_RAW; r++) {
        const int e = threadIdx.x + r * 32 * NB_DSA_WARPS, l = e & 31, nt = (e >> 5) % NT, st = (e >> 5) / NT;
        const float *qh = a.q + (int64_t)tok * a.qs0 + (int64_t)(8 * nt + (l >> 2)) * a.qs1 + 32 * (l & 3) + 2 * st;
        raw[r] = make_float2(__ldg(qh), __ldg(qh + 1));
    }
    if (threadIdx.x < NB_DSA_TILE_NH) *wraw = __ldg(a.w + (int64_t)tok * a.ws0 + threadIdx.x);
}

// The loaded query split into TF32 {hi, hi, lo, lo} entries of buffer buf (no barrier).
__device__ __forceinline__ void dsa_tile_store(uint4 *tq, float *wq, int buf, const float2 *raw, float wraw)
{
#pragma unroll
    for (int r = 0; r < NB_DSA_TILE_RAW; r++) {
        uint32_t h0, l0, h1, l1;
        dsa_tf32_split(raw[r].x, &h0, &l0);
        dsa_tf32_split(raw[r].y, &h1, &l1);
        tq[buf * (NB_DSA_TILE_QF / 4) + threadIdx.x + r * 32 * NB_DSA_WARPS] = make_uint4(h0, h1, l0, l1);
    }
    if (threadIdx.x < NB_DSA_TILE_NH) wq[buf * NB_DSA_TILE_NH + threadIdx.x] = wraw;
}

__global__ void __launch_bounds__(32 * NB_DSA_WARPS, 1)
    k_dsa_tile(const __grid_constant__ dsa_args a, int t0, int t1, int G, unsigned long long *cand_g, int *cnt_g)
{
    constexpr int NT = NB_DSA_TILE_NH / 8;
    extern __shared__ uint4 tile_q[]; /* two queries in fragment order, then two weight rows */
    float *wq = (float *)(tile_q + 2 * NB_DSA_TILE_QF / 4);
    const nb_attn_index idx = a.idx;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5, topk = a.topk;
    const int i0 = t0 + (int)blockIdx.y * NB_DSA_TILE_T, i1 = min(i0 + NB_DSA_TILE_T, t1);
    const int pb = (int)blockIdx.x * NB_DSA_TILE_P, pw = pb + 16 * warp;
    int i = dsa_tile_first(a, idx, topk, i0, i1, pb);
    if (i >= i1) return;
    /* the first query, split into buffer 0 */
    float2 raw[NB_DSA_TILE_RAW];
    float wraw = 0.0f;
    dsa_tile_load(raw, &wraw, a, i);
    dsa_tile_store(tile_q, wq, 0, raw, wraw);
    __syncthreads();
    uint32_t ah[2][8][4], al[2][8][4];
    bool oka = false, okb = false;
    int cur_base = -1, loaded_n = 0;
    for (int buf = 0; i < i1; buf ^= 1) {
        const int inext = dsa_tile_next(idx.pos, i, i1, topk, pb);
        if (inext < i1) dsa_tile_load(raw, &wraw, a, inext);
        const int n = idx.pos[i] + 1, sb = idx.slot_base[i];
        if (pw < n) { /* the warp's rows reach this token's context */
            if (sb != cur_base || (n > loaded_n && pw + 16 > loaded_n)) {
                dsa_tile_rows(ah, al, a, idx.slot_table + sb, pw, n, &oka, &okb);
                cur_base = sb, loaded_n = n;
            }
            /* dsa_score_mma's k-loop and totals, written out again on purpose: shared helpers
             * compiled to other register allocations (k_dsa_part<-32>: 104 -> 80 registers and a
             * spill) in kernels already timed; test_cuda_vs_cpu dsa_select checks the two id for id */
            const uint4 *qf = tile_q + buf * (NB_DSA_TILE_QF / 4);
            const float *wsh = wq + buf * NB_DSA_TILE_NH;
            float acc[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
            for (int half = 0; half < 2; half++)
#pragma unroll
                for (int s2 = 0; s2 < 8; s2++) {
                    uint4 b[NT];
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) b[nt] = qf[((8 * half + s2) * NT + nt) * 32 + lane];
                    const uint32_t *h = ah[half][s2], *l = al[half][s2];
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], l[0], l[1], l[2], l[3], b[nt].x, b[nt].y);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], h[0], h[1], h[2], h[3], b[nt].z, b[nt].w);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) dsa_mma_tf32(acc[nt], h[0], h[1], h[2], h[3], b[nt].x, b[nt].y);
                }
            float ta = 0.0f, tb = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float wh = wsh[8 * nt + 2 * t + e];
                    const float da = acc[nt][e] * a.sm, db = acc[nt][2 + e] * a.sm;
                    if (da > 0) ta += da * wh;
                    if (db > 0) tb += db * wh;
                }
            ta += __shfl_xor_sync(0xffffffffu, ta, 1);
            tb += __shfl_xor_sync(0xffffffffu, tb, 1);
            ta += __shfl_xor_sync(0xffffffffu, ta, 2);
            tb += __shfl_xor_sync(0xffffffffu, tb, 2);
            /* the keys of this token's split s: rows that exist, positions below n */
            const int p_a = pw + g, p_b = p_a + 8, s = pw / topk; /* one split: topk % 16 == 0 */
            /* s < G holds where the host's bound does (pos + 1 <= max_ctx); past it, nothing is written */
            const bool ka = t == 0 && oka && p_a < n && s < G, kb = t == 0 && okb && p_b < n && s < G;
            const unsigned ma = __ballot_sync(0xffffffffu, ka), mb = __ballot_sync(0xffffffffu, kb);
            unsigned long long *out = cand_g + ((int64_t)(i - t0) * G + s) * topk;
            int base = 0;
            if (lane == 0 && (ma | mb)) base = atomicAdd(cnt_g + (int64_t)(i - t0) * G + s, __popc(ma) + __popc(mb));
            base = __shfl_sync(0xffffffffu, base, 0);
            const unsigned below = (1u << lane) - 1;
            if (ka) out[base + __popc(ma & below)] = dsa_key(ta, p_a);
            if (kb) out[base + __popc(ma) + __popc(mb & below)] = dsa_key(tb, p_b);
        }
        if (inext < i1) dsa_tile_store(tile_q, wq, buf ^ 1, raw, wraw);
        __syncthreads();
        i = inext;
    }
}

// The prefill form on warpgroup MMAs (k_dsa_tile_wg; NIBBLE_CUDA_DSA_TILE=2, sm_90a): the same
// block shape as k_dsa_tile (128 positions x up to 32 tokens, 8 warps) as two warpgroups of 64
// positions. A warp keeps its 16 key rows as TF32 hi / lo A fragments in registers (dsa_tile_rows:
// the fragment order of mma.m16n8k8 is a wgmma A fragment's per warp), and the queries of two
// tokens of one sequence at a time are B, in shared memory (K-major, 128-byte swizzle), split hi /
// lo: per k-step three wgmma.m64n64k8 (lo.hi, hi.lo, hi.hi, the mma form's order). The tensor
// cores read B straight from shared memory, where k_dsa_tile's warps each loaded every token's
// 32 KB of fragments through the register file for 192 mma.sync; the next pair's queries are
// loaded, split and stored while the current pair's wgmmas run. Keys go to fixed slots (position
// p of split s at p - s topk; rows outside the pool as ~0, counted in cnt_g), so no atomic round
// trip per token: the merge takes its counts from the contexts (dense mode). Scores equal the mma
// form's up to the tensor cores' accumulation order.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSA_WG_ARCH 1
#else
#define DSA_WG_ARCH 0
#endif
#define NB_DSA_WG_U 2                                 /* tokens per wgmma group */
#define NB_DSA_WG_N (NB_DSA_WG_U * NB_DSA_TILE_NH)    /* B's rows: token-major heads */
#define NB_DSA_WG_OPND (4 * NB_DSA_WG_N * 128)        /* one half (hi or lo): 4 k-tiles x N rows x 128 B */
#define NB_DSA_WG_STAGE (2 * NB_DSA_WG_OPND)          /* hi, then lo */
#define NB_DSA_WG_SMEM (2 * NB_DSA_WG_STAGE + 2 * NB_DSA_WG_N * 4 + 1024) /* two stages, weights, alignment */

__device__ __forceinline__ uint64_t dsa_wg_desc(uint32_t saddr) /* K-major, 128-byte swizzle, 8-row atoms 1 KB apart */
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// D (64 x 64, F32) += A . B^T in TF32, A (this warp's 16 rows, m16n8k8 order) in registers.
__device__ __forceinline__ void dsa_wg_rs(float (&d)[32], const uint32_t *a, uint64_t desc)
{
#if DSA_WG_ARCH
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
                 "%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
#endif
}

// The token after i in [i, i1) with work in the block at pb that shares i's sequence, else -1.
__device__ __forceinline__ int dsa_wg_pair(const nb_attn_index &idx, int i, int i1, int topk, int pb)
{
    const int j = dsa_tile_next(idx.pos, i, i1, topk, pb);
    return j < i1 && idx.slot_base[j] == idx.slot_base[i] ? j : -1;
}

// Tokens i and j (j < 0: none; its rows zero, never read back) into stage buf: B row 32 v + h
// is token v's head h; logical k 8 ks + t + 4 e is dim 32 t + 2 ks + e
// (the key fragments' order), so lane l's dims 32 t + l (t < 4: coalesced loads) are logical k
// 4 l .. 4 l + 3, one 16-byte unit: k-tile l / 8, unit l % 8 of the row's 128 bytes, swizzled.
__device__ __forceinline__ void dsa_wg_store_q(unsigned char *sm, float *wq, int buf, const dsa_args &a, int i, int j)
{
    constexpr int RW = NB_DSA_WG_N / NB_DSA_WARPS; /* rows per warp */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float v[RW][4];
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const int row = warp + NB_DSA_WARPS * r, tok = row < NB_DSA_TILE_NH ? i : j, h = row % NB_DSA_TILE_NH;
        const float *qh = a.q + (int64_t)(tok < 0 ? i : tok) * a.qs0 + (int64_t)h * a.qs1 + lane;
#pragma unroll
        for (int t = 0; t < 4; t++) v[r][t] = tok < 0 ? 0.0f : __ldg(qh + 32 * t);
    }
    unsigned char *st = sm + buf * NB_DSA_WG_STAGE;
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const int row = warp + NB_DSA_WARPS * r;
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int t = 0; t < 4; t++) dsa_tf32_split(v[r][t], &hi[t], &lo[t]);
        const int off = (lane >> 3) * (NB_DSA_WG_N * 128) + row * 128 + (((lane & 7) ^ (row & 7)) << 4);
        *(uint4 *)(st + off) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *(uint4 *)(st + NB_DSA_WG_OPND + off) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    if (threadIdx.x < NB_DSA_WG_N) {
        const int tok = threadIdx.x < NB_DSA_TILE_NH ? i : j;
        wq[buf * NB_DSA_WG_N + threadIdx.x] = tok < 0 ? 0.0f : __ldg(a.w + (int64_t)tok * a.ws0 + threadIdx.x % NB_DSA_TILE_NH);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the wgmmas read these stores */
}

__global__ void __launch_bounds__(32 * NB_DSA_WARPS, 1)
    k_dsa_tile_wg(const __grid_constant__ dsa_args a, int t0, int t1, int G, unsigned long long *cand_g, int *cnt_g)
{
#if DSA_WG_ARCH
    extern __shared__ unsigned char dsa_wg_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)dsa_wg_raw + 1023) & ~(uintptr_t)1023);
    float *wq = (float *)(sm + 2 * NB_DSA_WG_STAGE);
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sm);
    const nb_attn_index idx = a.idx;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5, topk = a.topk;
    const int i0 = t0 + (int)blockIdx.y * NB_DSA_TILE_T, i1 = min(i0 + NB_DSA_TILE_T, t1);
    const int pb = (int)blockIdx.x * NB_DSA_TILE_P, pw = pb + 16 * warp;
    int i = dsa_tile_first(a, idx, topk, i0, i1, pb);
    if (i >= i1) return;
    int j = dsa_wg_pair(idx, i, i1, topk, pb);
    dsa_wg_store_q(sm, wq, 0, a, i, j);
    __syncthreads();
    uint32_t ah[16][4], al[16][4];
#pragma unroll
    for (int s = 0; s < 16; s++) ah[s][0] = ah[s][1] = ah[s][2] = ah[s][3] = al[s][0] = al[s][1] = al[s][2] = al[s][3] = 0;
    bool oka = false, okb = false;
    int cur_base = -1, loaded_n = 0;
    for (int buf = 0; i < i1; buf ^= 1) {
        const int inext = dsa_tile_next(idx.pos, j >= 0 ? j : i, i1, topk, pb);
        const int jnext = inext < i1 ? dsa_wg_pair(idx, inext, i1, topk, pb) : -1;
        const int n0 = idx.pos[i] + 1, n1 = j >= 0 ? idx.pos[j] + 1 : 0, nmax = max(n0, n1), sb = idx.slot_base[i];
        if (pw < nmax && (sb != cur_base || (nmax > loaded_n && pw + 16 > loaded_n))) {
            dsa_tile_rows((uint32_t (*)[8][4])ah, (uint32_t (*)[8][4])al, a, idx.slot_table + sb, pw, nmax, &oka, &okb);
            cur_base = sb, loaded_n = nmax;
        }
        /* every warpgroup issues its wgmmas, even one whose rows are all past the pair's contexts
         * (a diagonal block's last): under a branch ptxas serializes them (C7518) */
        float acc[32];
#pragma unroll
        for (int e = 0; e < 32; e++) acc[e] = 0.0f;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        const uint32_t qb = sbase + buf * NB_DSA_WG_STAGE;
#pragma unroll
        for (int ks = 0; ks < 16; ks++) {
            const uint32_t off = (ks >> 2) * (NB_DSA_WG_N * 128) + (ks & 3) * 32;
            dsa_wg_rs(acc, al[ks], dsa_wg_desc(qb + off));
            dsa_wg_rs(acc, ah[ks], dsa_wg_desc(qb + NB_DSA_WG_OPND + off));
            dsa_wg_rs(acc, ah[ks], dsa_wg_desc(qb + off));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (inext < i1) dsa_wg_store_q(sm, wq, buf ^ 1, a, inext, jnext);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int e = 0; e < 32; e++) asm volatile("" : "+f"(acc[e])::"memory");
        if (pw < nmax) { /* the warp's rows reach a token of the pair */
            const int p_a = pw + g, p_b = p_a + 8, s = pw / topk; /* one split: topk % 16 == 0 */
#pragma unroll
            for (int v = 0; v < NB_DSA_WG_U; v++) {
                const int tok = v ? j : i, n = v ? n1 : n0;
                float ta = 0.0f, tb = 0.0f;
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float wh = wq[buf * NB_DSA_WG_N + 32 * v + 8 * nt + 2 * t + e];
                        const float da = acc[4 * (4 * v + nt) + e] * a.sm, db = acc[4 * (4 * v + nt) + 2 + e] * a.sm;
                        if (da > 0) ta += da * wh;
                        if (db > 0) tb += db * wh;
                    }
                ta += __shfl_xor_sync(0xffffffffu, ta, 1);
                tb += __shfl_xor_sync(0xffffffffu, tb, 1);
                ta += __shfl_xor_sync(0xffffffffu, ta, 2);
                tb += __shfl_xor_sync(0xffffffffu, tb, 2);
                /* s < G holds where the host's bound does (pos + 1 <= max_ctx); past it, nothing is written */
                if (tok < 0 || t != 0 || s >= G) continue;
                unsigned long long *out = cand_g + ((int64_t)(tok - t0) * G + s) * topk - (int64_t)s * topk;
                int *bad = cnt_g + (int64_t)(tok - t0) * G + s;
                if (p_a < n) {
                    out[p_a] = oka ? dsa_key(ta, p_a) : ~0ull;
                    if (!oka) atomicAdd(bad, 1);
                }
                if (p_b < n) {
                    out[p_b] = okb ? dsa_key(tb, p_b) : ~0ull;
                    if (!okb) atomicAdd(bad, 1);
                }
            }
        }
        __syncthreads(); /* this stage's wgmmas are done; the next stage is stored */
        i = inext, j = jnext;
    }
#else
    __trap(); /* launched only on compute capability 9 devices of an sm_90a build (dsa_tile_wg_ok) */
#endif
}

// The merge's passes over candidates. Every call is made by whole warps together.
#define NB_DSA_HIST 0   /* histogram the digit at sh of the keys matching prefix */
#define NB_DSA_GATHER 1 /* keys at or below prefix (on mask's bits) -> sel */
#define NB_DSA_SPLIT 2  /* keys below prefix -> sel, keys matching it -> w */
typedef struct dsa_pass {
    unsigned long long prefix, mask;
    int sh;
    unsigned dm;
    int match; /* 1: warp-aggregated atomics (match.any, ballots), 0: one shared atomic per key */
    unsigned *hist;
    unsigned long long *sel, *w;
    int *nsel, *nw;
} dsa_pass;

__device__ __forceinline__ void dsa_visit(int mode, unsigned long long k, bool ok, const dsa_pass &p)
{
    const unsigned long long m = k & p.mask;
    if (mode == NB_DSA_HIST) {
        const bool in = ok && m == p.prefix;
        const unsigned d = in ? (unsigned)(k >> p.sh) & p.dm : ~0u;
        if (!p.match) {
            if (in) atomicAdd(&p.hist[d], 1u);
            return;
        }
        const unsigned peers = __match_any_sync(0xffffffffu, d); /* one atomic per digit */
        if (in && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&p.hist[d], (unsigned)__popc(peers));
    } else if (!p.match) { /* no warp collectives: a shared atomic per kept key */
        if (ok && (mode == NB_DSA_GATHER ? m <= p.prefix : m < p.prefix)) p.sel[atomicAdd(p.nsel, 1)] = k;
        if (ok && mode == NB_DSA_SPLIT && m == p.prefix) p.w[atomicAdd(p.nw, 1)] = k;
    } else if (mode == NB_DSA_GATHER) {
        dsa_append(p.sel, p.nsel, k, ok && m <= p.prefix);
    } else {
        dsa_append(p.sel, p.nsel, k, ok && m < p.prefix);
        dsa_append(p.w, p.nw, k, ok && m == p.prefix);
    }
}

#define NB_DSA_MERGE_U 8 /* candidate loads in flight per lane: a pass is a chain of L2 round trips */

// One pass over the G splits' candidates in global memory (counts in shared memory): a warp per
// split, NB_DSA_MERGE_U x 32 keys loaded before any is used.
__device__ __forceinline__ void dsa_pass_splits(int mode, const unsigned long long *cand, const int *scnt, int G,
                                                int topk, const dsa_pass &p)
{
    const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    for (int s = threadIdx.x >> 5; s < G; s += nwarps) {
        const int cs = scnt[s];
        const unsigned long long *src = cand + (int64_t)s * topk;
        for (int j0 = 0; j0 < cs; j0 += 32 * NB_DSA_MERGE_U) {
            unsigned long long k[NB_DSA_MERGE_U];
#pragma unroll
            for (int u = 0; u < NB_DSA_MERGE_U; u++) {
                const int j = j0 + 32 * u + lane;
                k[u] = j < cs ? __ldcg(src + j) : ~0ull;
            }
#pragma unroll
            for (int u = 0; u < NB_DSA_MERGE_U; u++)
                if (j0 + 32 * u < cs) dsa_visit(mode, k[u], k[u] != ~0ull, p); /* ~0: a row outside the pool (dense) */
        }
    }
}

// One pass over n keys in shared memory.
__device__ __forceinline__ void dsa_pass_smem(int mode, const unsigned long long *w, int n, const dsa_pass &p)
{
    for (int j0 = threadIdx.x & ~31; j0 < n; j0 += blockDim.x) {
        const int j = j0 + (threadIdx.x & 31);
        dsa_visit(mode, j < n ? w[j] : ~0ull, j < n, p);
    }
}

// The next digit of the topk-th smallest key: histogram the keys matching p->prefix (from the
// splits, or from w[0, nw) where w is not NULL), find the bin where the running count reaches
// *need, and narrow p->prefix / p->mask to it. Returns whether that bin is taken whole (no lower
// digit matters). *top: the digit's top bit, lowered past it.
__device__ __forceinline__ bool dsa_digit(dsa_pass *p, int *top, int pb, int *need, const unsigned long long *cand,
                                          const int *scnt, int G, int topk, const unsigned long long *w, int nw,
                                          int *wsum, int *found)
{
    if (*top == 32) *top = pb;
    const int wd = min(NB_DSA_DIGIT, *top > 32 ? *top - 32 : *top), nb = 1 << wd;
    p->sh = *top - wd;
    p->dm = (unsigned)nb - 1;
    for (int e = threadIdx.x; e < nb; e += blockDim.x) p->hist[e] = 0;
    __syncthreads();
    if (w)
        dsa_pass_smem(NB_DSA_HIST, w, nw, *p);
    else
        dsa_pass_splits(NB_DSA_HIST, cand, scnt, G, topk, *p);
    __syncthreads();
    const int per = (nb + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per;
    int loc = 0;
    for (int e = e0; e < e0 + per && e < nb; e++) loc += (int)p->hist[e];
    const int ex = dsa_block_scan(loc, wsum, NULL);
    if (ex < *need && ex + loc >= *need) { /* the bin where the running count reaches need */
        int run = ex, e = e0;
        while (run + (int)p->hist[e] < *need) run += (int)p->hist[e++];
        found[0] = e, found[1] = run, found[2] = (int)p->hist[e];
    }
    __syncthreads();
    p->prefix |= (unsigned long long)found[0] << p->sh;
    p->mask |= (unsigned long long)p->dm << p->sh;
    *need -= found[1];
    *top = p->sh;
    return found[2] == *need;
}

// Split form, second kernel: one block per token selects the topk smallest of its G splits'
// candidates (all of them when there are no more than topk), sorts them ascending and writes
// them as k_dsa does. The keys are unique, so the topk-th smallest bounds exactly topk keys.
// Radix select, most significant digit first: the score word in 11 + 11 + 10 bits, then the
// position's bits below pb (the ones above are 0 in every key), 11 at a time. After the first
// digit's pass over the candidates in global memory, one more pass sends the keys below its bin
// to sel and the keys in it to shared memory (when at most wcap: the bin of the topk-th score
// holds a small share of the candidates); the lower digits then run there. Otherwise (or wcap
// 0) every digit passes over the global candidates, and a last pass gathers the selection.
// dense (k_dsa_tile_wg's candidates): split s holds every position from s topk below the
// token's context at its slot, ~0 for rows outside the pool, and cnt_g counts those ~0 keys.
__global__ void __launch_bounds__(NB_DSA_MERGE_THREADS)
    k_dsa_merge(const unsigned long long *cand_g, const int *cnt_g, int G, const int32_t *pos, int topk, int P,
                int wcap, int match, int dense, int32_t *sel_pos, int32_t *sel_count)
{
    extern __shared__ unsigned long long sel[]; /* [P], then the bin's keys [wcap] */
    __shared__ unsigned hist[1 << NB_DSA_DIGIT];
    __shared__ int scnt[NB_DSA_SPLIT_MAX], wsum[32], found[3], nsel, nwk;
    const int i = blockIdx.x, n = pos[i] + 1;
    if (n <= topk) return; /* k_dsa_part wrote every position */
    const unsigned long long *cand = cand_g + (int64_t)i * G * topk;
    unsigned long long *wk = sel + P;
    int c = 0, C;
    for (int s = threadIdx.x; s < G; s += blockDim.x) {
        if (dense) { /* k_dsa_tile_wg: split s holds positions s topk .. below n, cnt_g the ~0 keys among them */
            scnt[s] = min(max(n - s * topk, 0), topk);
            c += scnt[s] - cnt_g[(int64_t)i * G + s];
        } else {
            c += scnt[s] = cnt_g[(int64_t)i * G + s];
        }
    }
    if (threadIdx.x == 0) nsel = 0, nwk = 0;
    dsa_block_scan(c, wsum, &C); /* its barriers publish scnt, nsel and nwk */
    dsa_pass p = {0, 0, 0, 0, match, hist, sel, wk, &nsel, &nwk};
    bool gathered = false;
    if (C > topk) {
        const int pb = 32 - __clz(n - 1);
        int need = topk, top = 64; /* need: its rank among the keys that match prefix */
        bool whole = dsa_digit(&p, &top, pb, &need, cand, scnt, G, topk, NULL, 0, wsum, found);
        if (!whole && found[2] <= wcap) {
            dsa_pass_splits(NB_DSA_SPLIT, cand, scnt, G, topk, p);
            __syncthreads();
            const int nw = nwk;
            while (top > 0 && !dsa_digit(&p, &top, pb, &need, cand, scnt, G, topk, wk, nw, wsum, found)) {
            }
            dsa_pass_smem(NB_DSA_GATHER, wk, nw, p);
            gathered = true;
        } else {
            while (!whole && top > 0) whole = dsa_digit(&p, &top, pb, &need, cand, scnt, G, topk, NULL, 0, wsum, found);
        }
    }
    if (!gathered) dsa_pass_splits(NB_DSA_GATHER, cand, scnt, G, topk, p);
    __syncthreads();
    const int m = nsel; /* min(C, topk) */
    int Q = 1;
    while (Q < m) Q <<= 1;
    for (int e = m + threadIdx.x; e < Q; e += blockDim.x) sel[e] = ~0ull;
    __syncthreads();
    dsa_sort(sel, Q);
    for (int t = threadIdx.x; t < m; t += blockDim.x) sel_pos[(int64_t)i * topk + t] = (int32_t)(sel[t] & 0xffffffffu);
    if (threadIdx.x == 0) sel_count[i] = m;
}

static int g_form = -1;  /* nb_cuda_dsa_force_form; -1: NIBBLE_CUDA_DSA, else automatic */
static int g_split = -1; /* nb_cuda_dsa_force_split; -1: NIBBLE_CUDA_DSA_SPLIT */
static int g_last_splits = 1;
static int g_last_form = 0;
static int g_merge_cap = -1; /* nb_cuda_dsa_force_merge_cap; -1: automatic, -2: no merge (timing) */
static int g_hist = -1;      /* nb_cuda_dsa_force_hist; -1: NIBBLE_CUDA_DSA_HIST */

extern "C" void nb_cuda_dsa_force_form(int form) { g_form = form >= 0 && form <= 2 ? form : -1; }
extern "C" void nb_cuda_dsa_force_split(int split) { g_split = split >= 0 ? split : -1; }
extern "C" int nb_cuda_dsa_last_splits(void) { return g_last_splits; }
extern "C" int nb_cuda_dsa_last_form(void) { return g_last_form; }
extern "C" void nb_cuda_dsa_force_merge_cap(int keys) { g_merge_cap = keys >= -2 ? keys : -1; }
extern "C" void nb_cuda_dsa_force_hist(int match) { g_hist = match == 0 || match == 1 ? match : -1; }

static int g_tile = -1; /* nb_cuda_dsa_force_tile; -1: NIBBLE_CUDA_DSA_TILE */
extern "C" void nb_cuda_dsa_force_tile(int on) { g_tile = on >= 0 && on <= 2 ? on : -1; }
static int g_tile_group; /* nb_cuda_dsa_force_tile_group; 0: from NB_DSA_TILE_SCRATCH */
extern "C" void nb_cuda_dsa_force_tile_group(int tokens) { g_tile_group = tokens > 0 ? tokens : 0; }

// A switch forced by a test (force >= 0), else the environment variable `name` read once into
// *env: the index of its value in names[n], else def. A benign race reads the same value.
static int dsa_switch(int force, const char *name, const char *const *names, int n, int *env, int def)
{
    if (force >= 0) return force;
    if (*env < 0) {
        const char *e = getenv(name);
        int v = def;
        for (int i = 0; e && i < n; i++)
            if (!strcmp(e, names[i])) v = i;
        *env = v;
    }
    return *env;
}

// The merge's passes: 1 warp-aggregated shared atomics (a histogram bin's by match.any, an
// append's by a ballot), 0 one shared atomic per counted or kept key, no warp collective
// (forced, else NIBBLE_CUDA_DSA_HIST=atomic|match, else NB_CUDA_DSA_HIST_MATCH_DEFAULT).
#define NB_CUDA_DSA_HIST_MATCH_DEFAULT 0
static int dsa_hist_match(void)
{
    static const char *const names[] = {"atomic", "match"};
    static int env = -1;
    return dsa_switch(g_hist, "NIBBLE_CUDA_DSA_HIST", names, 2, &env, NB_CUDA_DSA_HIST_MATCH_DEFAULT);
}

// The preferred scoring form: 2 mma, 1 lanes, 0 warp (forced, else NIBBLE_CUDA_DSA=warp|lanes|mma,
// else NB_CUDA_DSA_DEFAULT_FORM: lanes, ~9x the warp form one block per token on an H200,
// docs/cuda-backend.md). A form falls back to the next where the shape does not take it: mma
// needs lanes' conditions and a head dim of 128; the warp form takes any shape.
#define NB_CUDA_DSA_DEFAULT_FORM 1
static int dsa_form(void)
{
    static const char *const names[] = {"warp", "lanes", "mma"};
    static int env = -1;
    return dsa_switch(g_form, "NIBBLE_CUDA_DSA", names, 3, &env, NB_CUDA_DSA_DEFAULT_FORM);
}

// 0: never split, 1: automatic, G >= 2: that many splits (forced, else NIBBLE_CUDA_DSA_SPLIT).
static int dsa_split_mode(void)
{
    if (g_split >= 0) return g_split;
    static int env = -1; /* a benign race reads the same value */
    if (env < 0) {
        const char *e = getenv("NIBBLE_CUDA_DSA_SPLIT");
        env = e && !strcmp(e, "0") ? 0 : e && atoi(e) >= 2 ? atoi(e) : 1;
    }
    return env;
}

// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) only where a kernel needs more than it was
// given on this device (the call costs host time at every op outside a graph).
static cudaError_t dsa_smem_attr(const void *fn, int dev, size_t bytes)
{
    static struct {
        const void *fn;
        int dev;
        size_t bytes;
    } memo[64]; /* the five kernels' thirteen instances on up to four devices; a race only repeats a call */
    int i = 0;
    while (i < 64 && memo[i].fn && !(memo[i].fn == fn && memo[i].dev == dev)) i++;
    if (i < 64 && memo[i].fn && memo[i].bytes >= bytes) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && i < 64) memo[i].fn = fn, memo[i].dev = dev, memo[i].bytes = bytes;
    return e;
}

// The prefill form: 1 (k_dsa_tile, mma.sync) or 2 (k_dsa_tile_wg, wgmma; k_dsa_tile on devices
// other than compute capability 9) forced on at any token count, 0 off, else
// NIBBLE_CUDA_DSA_TILE=0|1|2 (from NB_DSA_TILE_MIN_TOKENS tokens), else NB_CUDA_DSA_TILE_DEFAULT:
// 2 since the twenty-fifth session (H100: the op 2.8-3.5x the lanes form at 2048 x 8192 to 1024 x
// 100k, a 16k prompt's prefill 1.29x; the same ids as the mma form in every test case).
#define NB_CUDA_DSA_TILE_DEFAULT 2
#define NB_DSA_TILE_MIN_TOKENS 64
static int dsa_tile_mode(void)
{
    if (g_tile >= 0) return g_tile;
    static const char *const names[] = {"0", "1", "2"};
    static int env = -1;
    return dsa_switch(-1, "NIBBLE_CUDA_DSA_TILE", names, 3, &env, NB_CUDA_DSA_TILE_DEFAULT);
}
#define NB_DSA_TILE_SCRATCH ((size_t)256 << 20) /* candidates per launch pair at most (tokens in groups) */
#define NB_DSA_TILE_SLOT 3 /* the MLA op's and the experts' big slot: already large at prefill sizes */
static int dsa_tile_min_tokens(void) { return !dsa_tile_mode() ? 0 : g_tile >= 0 ? 1 : NB_DSA_TILE_MIN_TOKENS; }

// k_dsa_tile_wg runs here: compute capability 9 (its sm_90a code; other devices trap in it).
static int dsa_tile_wg_ok(int dev)
{
    static int major[16]; /* per device, 0: not asked yet */
    int m = dev >= 0 && dev < 16 ? major[dev] : 0;
    if (m <= 0) {
        if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) cudaGetLastError(), m = -1;
        if (dev >= 0 && dev < 16) major[dev] = m;
    }
    return m == 9;
}

// k_dsa_merge over T tokens' candidates [T][G][topk] (counts [T][G]); pos, sel_pos and sel_count
// already offset to the first of them.
static nb_status dsa_merge_launch(cudaStream_t stream, int dev, int max_smem, const unsigned long long *cand, const int *cnt,
                                  int G, int64_t T, const int32_t *pos, int topk, int dense, int32_t *sel_pos,
                                  int32_t *sel_count)
{
    int P = 1; /* the merge's sort: P <= S / 2 keys, so P * 8 + its ~11 KiB of its own fit where k_dsa does */
    while (P < topk) P <<= 1;
    /* the first digit's bin in shared memory: whatever room is left, up to NB_DSA_MERGE_WCAP keys */
    int64_t wcap = ((int64_t)max_smem - P * 8 - NB_DSA_MERGE_OWN_SMEM) / 8;
    wcap = g_merge_cap >= 0 ? g_merge_cap : wcap > NB_DSA_MERGE_WCAP ? NB_DSA_MERGE_WCAP : wcap < 0 ? 0 : wcap;
    const size_t msmem = (size_t)(P + wcap) * 8;
    if (msmem + NB_DSA_MERGE_OWN_SMEM > (size_t)max_smem)
        return nb_error(NB_ERR_INVALID_ARG, "dsa_select: merge capacity %lld keys does not fit shared memory", (long long)wcap);
    NB_CUDA_TRY(dsa_smem_attr((const void *)k_dsa_merge, dev, msmem));
    k_dsa_merge<<<(unsigned)T, NB_DSA_MERGE_THREADS, msmem, stream>>>(cand, cnt, G, pos, topk, P, (int)wcap,
                                                                       dsa_hist_match(), dense, sel_pos, sel_count);
    NB_CUDA_LAUNCHED("dsa_select (merge)");
    return NB_OK;
}

// The prefill form for T tokens whose contexts are at most max_ctx: G = ceil(max_ctx / topk)
// splits per token, the tokens in groups whose candidates fit NB_DSA_TILE_SCRATCH, each group a
// k_dsa_tile (wg: k_dsa_tile_wg) launch and a k_dsa_merge launch.
static nb_status dsa_tile_run(nb_ops_ctx *ctx, const dsa_args &a, int64_t T, int G, int dev, int max_smem, int wg)
{
    const size_t per = (size_t)G * a.topk * 8 + (size_t)G * sizeof(int);
    int64_t Tg = g_tile_group ? g_tile_group : (int64_t)(NB_DSA_TILE_SCRATCH / per);
    Tg = Tg < 1 ? 1 : Tg > T ? T : Tg;
    char *scr = (char *)nb_cuda_scratch(ctx, NB_DSA_TILE_SLOT, (size_t)Tg * per);
    if (!scr) return NB_ERR_OUT_OF_MEMORY; /* nb_cuda_scratch said why */
    unsigned long long *cand = (unsigned long long *)scr;
    int *cnt = (int *)(scr + (size_t)Tg * G * a.topk * 8);
    const size_t smem = wg ? (size_t)NB_DSA_WG_SMEM : (size_t)(2 * NB_DSA_TILE_QF + 2 * NB_DSA_TILE_NH) * sizeof(float);
    if (smem > (size_t)max_smem) return nb_error(NB_ERR_UNSUPPORTED, "dsa_select: the prefill form needs %zu bytes of shared memory", smem);
    NB_CUDA_TRY(dsa_smem_attr(wg ? (const void *)k_dsa_tile_wg : (const void *)k_dsa_tile, dev, smem));
    cudaStream_t stream = nb_cuda_stream(ctx);
    const unsigned px = (unsigned)((a.idx.max_ctx + NB_DSA_TILE_P - 1) / NB_DSA_TILE_P);
    for (int64_t t0 = 0; t0 < T; t0 += Tg) {
        const int64_t t1 = t0 + Tg < T ? t0 + Tg : T;
        NB_CUDA_TRY(cudaMemsetAsync(cnt, 0, (size_t)(t1 - t0) * G * sizeof(int), stream));
        const unsigned py = (unsigned)((t1 - t0 + NB_DSA_TILE_T - 1) / NB_DSA_TILE_T);
        if (wg)
            k_dsa_tile_wg<<<dim3(px, py), 32 * NB_DSA_WARPS, smem, stream>>>(a, (int)t0, (int)t1, G, cand, cnt);
        else
            k_dsa_tile<<<dim3(px, py), 32 * NB_DSA_WARPS, smem, stream>>>(a, (int)t0, (int)t1, G, cand, cnt);
        NB_CUDA_LAUNCHED("dsa_select (prefill tiles)");
        if (g_merge_cap == -2) continue; /* timing the scoring alone */
        NB_TRY(dsa_merge_launch(stream, dev, max_smem, cand, cnt, G, t1 - t0, a.idx.pos + t0, a.topk, wg,
                                a.sel_pos + t0 * a.topk, a.sel_count + t0));
    }
    return NB_OK;
}

typedef void (*dsa_kernel)(dsa_args);
typedef void (*dsa_part_kernel)(dsa_args, int, unsigned long long *, int *);

// Splits per token for T tokens; 1: one block per token (k_dsa). Automatic: the k_dsa_part
// blocks that fit on the GPU at once (its occupancy at this shared memory times the SMs) over
// T, from the token count alone, as a captured graph replays at other contexts (the positions
// are on the device). A forced count holds where T x G <= NB_DSA_SPLIT_MAX_BLOCKS.
static int dsa_splits(nb_ops_ctx *ctx, int64_t T, dsa_part_kernel part, size_t smem)
{
    const int mode = dsa_split_mode();
    if (mode == 0) return 1;
    int64_t G = mode;
    if (mode == 1) {
        static struct {
            dsa_part_kernel f;
            size_t smem;
            int dev, occ;
        } memo; /* the last query (one form and topk per model); a race only costs a query */
        const int dev = nb_cuda_st(ctx)->device;
        if (memo.f != part || memo.smem != smem || memo.dev != dev) {
            int occ = 0;
            if (dsa_smem_attr((const void *)part, dev, smem) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, part, 32 * NB_DSA_WARPS, smem) != cudaSuccess) {
                cudaGetLastError();
                occ = 0;
            }
            memo.f = part, memo.smem = smem, memo.dev = dev, memo.occ = occ;
        }
        G = (int64_t)memo.occ * nb_cuda_st(ctx)->sm_count / T;
    }
    if (G > NB_DSA_SPLIT_MAX) G = NB_DSA_SPLIT_MAX;
    return G < 2 || T * G > NB_DSA_SPLIT_MAX_BLOCKS ? 1 : (int)G;
}

extern "C" nb_status nb_cuda_dsa_select(nb_ops_ctx *ctx, const nb_tensor *q, const nb_tensor *w, float softmax_scale,
                                        const nb_tensor *key_pool, const nb_attn_index *idx, int topk,
                                        int32_t *sel_pos, int32_t *sel_count)
{
    NB_TRY(nb_cuda_check_f32("dsa_select", "q", q, 3));
    NB_TRY(nb_cuda_check_f32("dsa_select", "w", w, 2));
    NB_TRY(nb_cuda_check_f32("dsa_select", "key_pool", key_pool, 2));
    const int64_t T = q->shape[0];
    const int nh = (int)q->shape[1], hd = (int)q->shape[2];
    if (hd > 32 * NB_DSA_MAXD) return nb_error(NB_ERR_UNSUPPORTED, "dsa_select: head dim %d above %d", hd, 32 * NB_DSA_MAXD);
    /* lanes: float4 rows (16-byte aligned base and stride) and 32 or 64 heads; mma: also hd 128 */
    const int aligned = (uintptr_t)key_pool->data % 16 == 0 && key_pool->stride[0] % 4 == 0 && hd % 4 == 0;
    const int want = dsa_form(), lanes = aligned && (nh == 32 || nh == 64) ? want : 0;
    const int mma = lanes == 2 && hd == 128;
    int S = 1024;
    while (S < 2 * topk) S <<= 1;
    size_t smem = (size_t)S * 8 + ((size_t)dsa_query_floats(mma, nh, hd) + nh) * sizeof(float);
    static int opt_in[16]; /* per device, 0: not asked yet (one word: a race asks again) */
    const int dev = nb_cuda_st(ctx)->device;
    int max_smem = dev >= 0 && dev < 16 ? opt_in[dev] : 0;
    if (max_smem <= 0) {
        cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (dev >= 0 && dev < 16) opt_in[dev] = max_smem;
    }
    if (smem > (size_t)max_smem)
        return nb_error(NB_ERR_UNSUPPORTED, "dsa_select: index_topk %d with %d heads x %d needs %zu bytes of shared memory (%d)",
                        topk, nh, hd, smem, max_smem);
    if (T == 0) return NB_OK;
    const int fh = mma ? -nh : lanes ? nh : 0; /* the kernels' NH */
    dsa_kernel kern = fh == 32 ? k_dsa<32> : fh == 64 ? k_dsa<64> : fh == -32 ? k_dsa<-32> : fh == -64 ? k_dsa<-64> : k_dsa<0>;
    dsa_part_kernel part = fh == 32    ? k_dsa_part<32>
                           : fh == 64  ? k_dsa_part<64>
                           : fh == -32 ? k_dsa_part<-32>
                           : fh == -64 ? k_dsa_part<-64>
                                       : k_dsa_part<0>;
    g_last_form = fh < 0 ? 2 : fh > 0 ? 1 : 0;
    const dsa_args a = {(const float *)q->data, (const float *)w->data, (const float *)key_pool->data,
                        q->stride[0], q->stride[1], w->stride[0], key_pool->stride[0], key_pool->shape[0],
                        softmax_scale, nh, hd, topk, S, *idx, sel_pos, sel_count};
    cudaStream_t stream = nb_cuda_stream(ctx);
    /* the prefill form: many tokens, contexts bounded by the host, never inside a graph (its
     * grid and scratch follow max_ctx, which a replay would not: graph steps pass 0, and a
     * capture is refused here whatever the caller passed) */
    const int tile_min = dsa_tile_min_tokens();
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (tile_min && T >= tile_min && aligned && nh == NB_DSA_TILE_NH && hd == 128 && topk % 16 == 0 &&
        idx->max_ctx > topk && ((int64_t)idx->max_ctx + topk - 1) / topk <= NB_DSA_SPLIT_MAX &&
        cudaStreamIsCapturing(stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) {
        const int Gt = (int)(((int64_t)idx->max_ctx + topk - 1) / topk);
        const int wg = dsa_tile_mode() == 2 && dsa_tile_wg_ok(dev);
        g_last_form = wg ? 4 : 3;
        g_last_splits = Gt;
        return dsa_tile_run(ctx, a, T, Gt, dev, max_smem, wg);
    }
    const int G = smem + 64 <= (size_t)max_smem ? dsa_splits(ctx, T, part, smem) : 1; /* + k_dsa_part's own */
    g_last_splits = G;
    if (G < 2) {
        NB_CUDA_TRY(dsa_smem_attr((const void *)kern, dev, smem));
        kern<<<(unsigned)T, 32 * NB_DSA_WARPS, smem, stream>>>(a);
        NB_CUDA_LAUNCHED("dsa_select");
        return NB_OK;
    }
    /* the candidates [T][G][topk] keys, then their counts [T][G] */
    const size_t cbytes = (size_t)T * G * topk * 8;
    char *scr = (char *)nb_cuda_scratch(ctx, NB_DSA_SCRATCH_SLOT, cbytes + (size_t)T * G * sizeof(int));
    if (!scr) return NB_ERR_OUT_OF_MEMORY; /* nb_cuda_scratch said why (no memory, or growth in a capture) */
    unsigned long long *cand = (unsigned long long *)scr;
    int *cnt = (int *)(scr + cbytes);
    NB_CUDA_TRY(dsa_smem_attr((const void *)part, dev, smem));
    part<<<dim3((unsigned)G, (unsigned)T), 32 * NB_DSA_WARPS, smem, stream>>>(a, G, cand, cnt);
    NB_CUDA_LAUNCHED("dsa_select (split)");
    if (g_merge_cap == -2) return NB_OK; /* timing the part kernel alone */
    return dsa_merge_launch(stream, dev, max_smem, cand, cnt, G, T, idx->pos, topk, 0, sel_pos, sel_count);
}

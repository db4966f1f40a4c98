// GPU sampling with a cluster of blocks per logits row (sm_90 and later): the same decisions as
// the one-block kernel of sample.cu (and the CPU op), at a fraction of its latency.
//
// The one-block kernel re-reads its 620 KB row (GLM-5's vocabulary) from L2 or HBM on every
// pass (max, total weight, 2-3 radix levels, chunk sums) with one SM: 0.43 ms per row with
// top-p. Here a cluster of C blocks (16 up to 16 rows, else 8; up to 256 rows, where the
// one-block kernel's rows do not yet fill the GPU) shares a row: block r copies ids
// [r S, r S + S) once into its shared memory (S a multiple of the draw's 1024-id chunks) and
// every later pass reads that copy; a draw computes each token's weight once, in place. What the passes decide on is exchanged through distributed
// shared memory (mapa + ld.shared::cluster) after a cluster barrier:
//   - reductions (max, sums): each block's value goes to its own slot (one slot per reduction,
//     never reused in a launch, so one barrier each), and every warp combines the C slots in
//     the same shuffle tree, so all blocks hold the same (bit-identical) result;
//   - radix-select levels: each block histograms its slice into one of two alternating
//     buffers; after a barrier block r sums the C histograms over its 1/C of the buckets
//     (reduce-scatter), and after a second one every block reads the merged buckets it scans
//     (8 remote loads per thread instead of 4 C). A buffer is rewritten two levels later,
//     after a barrier every block reaches only once it has finished reading it;
//   - the draw: each block sums its own chunks; every block scans all chunk sums (so all
//     agree on the chunk) and the block owning the chunk walks it to the token;
//   - top-n log-probabilities: each block lists its keys above the boundary with their raw
//     logits; rank 0 gathers, sorts and writes them.
// Penalties are applied by the block owning each penalized id, to its copy and to the row in
// global memory (which the API returns penalized). Integer weights and keys make every
// decision independent of the summation order; the log-sum-exp (double) is reported only.
// Every block passes the same sequence of cluster barriers (decisions are identical) and a
// last one before exiting, so no block leaves while another may read its shared memory.
// Launched by nb_cuda_sample (sample.cu) when the device takes clusters and the slice fits;
// NIBBLE_CUDA_SAMPLE=block keeps the one-block kernel. Test: tests/cuda_ops/test_cuda_sample.c.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/sample.h"
#include "ops/cuda/sample_dev.cuh"

#define CL_SLOTS 8 /* reductions per launch: at most 5 */
#define CL_MAX_LCH 64

typedef struct cl_smem {
    unsigned int cnt[2][NB_NBK];
    u64 mass[2][NB_NBK];
    int any[2][NB_NBK];
    unsigned int mcnt[2][NB_NBK / 2]; // the merged counts and weights of this block's bucket range
    u64 mmass[2][NB_NBK / 2];
    u64 red[NB_NWARP], red2[NB_NWARP];
    double dred[NB_NWARP];
    float fred[NB_NWARP];
    u64 slot[CL_SLOTS];
    u64 cmass[CL_MAX_LCH];
    u64 top_key[NB_MAX_TOP_LOGPROBS];
    float top_raw[NB_MAX_TOP_LOGPROBS];
    int ntop;
    int bstar;
    unsigned int bcnt;
    u64 bmass, above_cnt, above_mass;
    int token;
    float raw;
} cl_smem;

// The same shared variable in block r of the cluster. Loads through it are ordinary loads (the
// compiler may keep several in flight); cl_sync orders them against the other blocks' writes.
template <typename T> __device__ __forceinline__ T *cl_at(T *p, int r)
{
    return (T *)__cluster_map_shared_rank((const void *)p, (unsigned)r);
}

__device__ __forceinline__ void cl_sync(void)
{
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}

enum { CL_MAXF, CL_MAXU, CL_SUMU, CL_SUMD };

// One cluster-wide reduction of a value every thread of the block holds the block's result of
// (s->slot[*k] is this reduction's slot). Lane r of every warp loads block r's value; the warp
// combines them in one fixed tree, so every thread of every block gets the same bits.
__device__ static u64 cl_combine(int op, u64 bits, cl_smem *s, int *k, int C)
{
    const int j = (*k)++, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) s->slot[j] = bits;
    cl_sync();
    u64 v = lane < C ? *cl_at(&s->slot[j], lane)
                     : op == CL_MAXF ? (u64)__float_as_uint(-INFINITY)
                     : op == CL_SUMD ? (u64)__double_as_longlong(0.0)
                                     : 0ull;
    for (int o = 16; o; o >>= 1) {
        u64 y = __shfl_xor_sync(0xffffffffu, v, o);
        switch (op) {
        case CL_MAXF: {
            // block maxima are never NaN; ties (+0, -0) broken by the bits, so both lanes agree
            float a = __uint_as_float((unsigned)v), b = __uint_as_float((unsigned)y);
            if (b > a || (b == a && (unsigned)y > (unsigned)v)) v = y;
            break;
        }
        case CL_MAXU: v = y > v ? y : v; break;
        case CL_SUMU: v += y; break;
        default: // a + b == b + a: both lanes of a pair hold the same sum
            v = (u64)__double_as_longlong(__longlong_as_double((long long)v) + __longlong_as_double((long long)y));
        }
    }
    return v;
}

__device__ static float cl_max_f(float v, cl_smem *s, int *k, int C)
{
    float b = nb_blk_max_f(v, s->fred);
    return __uint_as_float((unsigned)cl_combine(CL_MAXF, (u64)__float_as_uint(b), s, k, C));
}

__device__ static u64 cl_sum_u64(u64 v, cl_smem *s, int *k, int C)
{
    return cl_combine(CL_SUMU, nb_blk_sum_u64(v, s->red), s, k, C);
}

__device__ static u64 cl_max_u64(u64 v, cl_smem *s, int *k, int C)
{
    return cl_combine(CL_MAXU, nb_blk_max_u64(v, s->red), s, k, C);
}

__device__ static double cl_sum_d(double v, cl_smem *s, int *k, int C)
{
    double b = nb_blk_sum_d(v, s->dred);
    return __longlong_as_double((long long)cl_combine(CL_SUMD, (u64)__double_as_longlong(b), s, k, C));
}

// Key, weight and candidacy of token id whose shared copy holds v: mode 0 the logit (top-n,
// greedy keys); mode 1 its sampling weight e = exp((l - m) / T), computed once per draw
// (sample.cu recomputes it in every pass).
__device__ __forceinline__ void cl_elem(int mode, float v, int id, float min_p, u64 *key, u64 *w, int *cand)
{
    if (mode == 0) {
        nb_smp_elemv(0, v, id, 0, 0, 0, key, w, cand);
    } else {
        *key = nb_sm_key(__float_as_uint(v), id);
        *w = nb_sm_weight(v);
        *cand = v >= min_p;
    }
}

// The radix select of sample.cu over the cluster's slices: the smallest key among candidates
// whose ranked-above count is < K and ranked-above weight <= L; *kept_mass is the weight of
// every candidate with a key >= it (mode 1). *lvl alternates the histogram buffers.
__device__ static u64 cl_select(cl_smem *s, const float *xs, int lo, int n, int S, int C, int rank, int mode, int nbits,
                                float min_p, u64 K, u64 L, u64 *kept_mass, int *lvl)
{
    u64 prefix = 0, above_c = 0, above_m = 0;
    int shift = nbits;
    const int tid = threadIdx.x;
    for (;;) {
        const int d = shift < NB_DIG ? shift : NB_DIG;
        shift -= d;
        const int h = (*lvl)++ & 1;
        __syncthreads(); // the previous level's readers of bstar / bcnt are done
        for (int b = tid; b < NB_NBK; b += NB_SB) {
            s->cnt[h][b] = 0;
            s->mass[h][b] = 0;
        }
        if (tid == 0) s->bstar = NB_NBK;
        __syncthreads();
        for (int i = tid; i < n; i += NB_SB) {
            u64 key, w;
            int cand;
            cl_elem(mode, xs[i], lo + i, min_p, &key, &w, &cand);
            if (!cand) continue;
            if ((key >> (shift + d)) != prefix) continue;
            int b = (int)((key >> shift) & (u64)((1u << d) - 1u));
            atomicAdd(&s->cnt[h][b], 1u);
            if (mode == 1) atomicAdd(&s->mass[h][b], w);
            s->any[h][b] = lo + i;
        }
        cl_sync();
        // reduce-scatter: block r sums buckets [r R, r R + R) over the cluster ...
        const int R = (NB_NBK + C - 1) / C, base = rank * R;
        for (int e = tid; e < R && base + e < NB_NBK; e += NB_SB) {
            unsigned int c = 0;
            u64 w = 0;
            for (int r = 0; r < C; r++) {
                c += *cl_at(&s->cnt[h][base + e], r);
                if (mode == 1) w += *cl_at(&s->mass[h][base + e], r);
            }
            s->mcnt[h][e] = c;
            s->mmass[h][e] = w;
        }
        cl_sync();
        // ... and thread t reads buckets b1 = NBK-1-2t and b1-1 (descending key order) merged
        const int b1 = NB_NBK - 1 - 2 * tid, b0 = b1 - 1;
        const u64 c1 = *cl_at(&s->mcnt[h][b1 % R], b1 / R), c0 = *cl_at(&s->mcnt[h][b0 % R], b0 / R);
        const u64 m1 = mode == 1 ? *cl_at(&s->mmass[h][b1 % R], b1 / R) : 0;
        const u64 m0 = mode == 1 ? *cl_at(&s->mmass[h][b0 % R], b0 / R) : 0;
        u64 ce, me;
        nb_blk_scan2(c1 + c0, m1 + m0, &ce, &me, s->red, s->red2);
        const u64 ac = above_c + ce, am = above_m + me;
        if (c0 && ac + c1 < K && am + m1 <= L)
            atomicMin(&s->bstar, b0);
        else if (c1 && ac < K && am <= L)
            atomicMin(&s->bstar, b1);
        __syncthreads();
        const int b = s->bstar;
        if (b == b0) {
            s->above_cnt = ac + c1;
            s->above_mass = am + m1;
            s->bcnt = (unsigned)c0;
            s->bmass = m0;
        } else if (b == b1) {
            s->above_cnt = ac;
            s->above_mass = am;
            s->bcnt = (unsigned)c1;
            s->bmass = m1;
        }
        __syncthreads();
        above_c = s->above_cnt;
        above_m = s->above_mass;
        prefix = (prefix << d) | (u64)b;
        if (s->bcnt == 1 || shift == 0) {
            // keys are distinct: the bucket holds one token; find the block that has it
            int id = 0, owner = 0;
            for (int r = 0; r < C; r++)
                if (*cl_at(&s->cnt[h][b], r)) {
                    id = *cl_at(&s->any[h][b], r);
                    owner = r;
                    break;
                }
            const float xv = *cl_at(&xs[id - owner * S], owner);
            u64 key, w;
            int cand;
            cl_elem(mode, xv, id, min_p, &key, &w, &cand);
            *kept_mass = above_m + s->bmass;
            return key;
        }
    }
}

__global__ void __launch_bounds__(NB_SB) nb_sample_cl_kernel(float *logits, int V, int S, const nb_sample_params *params,
                                                             const int32_t *off, const int32_t *htok,
                                                             const int32_t *hcnt, long long n_entries, float *orig,
                                                             nb_sample_out *outs)
{
    extern __shared__ float4 cl_dyn[];
    float *xs = (float *)cl_dyn;
    __shared__ cl_smem s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int C = (int)__clusterSizeInBlocks(), rank = (int)__clusterRelativeBlockRank(), row = (int)(blockIdx.x / (unsigned)C);
    const nb_sample_params p = params[row];
    if (p.skip) return; // the whole cluster: same row
    float *x = logits + (size_t)row * (size_t)V;
    nb_sample_out *out = &outs[row];
    const int lo = rank * S, n = V - lo < S ? (V - lo > 0 ? V - lo : 0) : S;
    int k = 0, lvl = 0;

    // this block's slice of the row, once
    if ((((uintptr_t)(x + lo)) & 15) == 0) {
        const float4 *x4 = (const float4 *)(x + lo);
        for (int i = tid; i < n / 4; i += NB_SB) cl_dyn[i] = x4[i];
        for (int i = (n & ~3) + tid; i < n; i += NB_SB) xs[i] = x[lo + i];
    } else {
        for (int i = tid; i < n; i += NB_SB) xs[i] = x[lo + i];
    }
    if (tid == 0) s.ntop = 0;
    __syncthreads();

    int n_top = p.n_top < 0 ? 0 : p.n_top > NB_MAX_TOP_LOGPROBS ? NB_MAX_TOP_LOGPROBS : p.n_top;
    if (n_top > V) n_top = V;
    const int want_lp = p.want_logprob != 0 || n_top > 0;

    // 1. log-probabilities of the raw logits
    double lse = 0;
    if (want_lp) {
        float mt = -INFINITY;
        for (int i = tid; i < n; i += NB_SB) mt = xs[i] > mt ? xs[i] : mt;
        const float m = cl_max_f(mt, &s, &k, C);
        double zt = 0;
        for (int i = tid; i < n; i += NB_SB) zt += exp((double)xs[i] - m);
        lse = m + log(cl_sum_d(zt, &s, &k, C));
        if (n_top > 0) {
            u64 km;
            const u64 kstar = cl_select(&s, xs, lo, n, S, C, rank, 0, 32 + NB_SM_ID_BITS, 0, (u64)n_top, ~0ull, &km,
                                        &lvl);
            for (int i = tid; i < n; i += NB_SB) {
                u64 key = nb_sm_key(nb_sm_fkey(nb_sm_clean(xs[i])), lo + i);
                if (key >= kstar) {
                    int slot = atomicAdd(&s.ntop, 1);
                    if (slot < NB_MAX_TOP_LOGPROBS) {
                        s.top_key[slot] = key;
                        s.top_raw[slot] = xs[i];
                    }
                }
            }
            cl_sync();
            if (rank == 0 && tid == 0) {
                // gather every block's list (at most n_top keys in all: they are distinct)
                u64 key[NB_MAX_TOP_LOGPROBS];
                float raw[NB_MAX_TOP_LOGPROBS];
                int got = 0;
                for (int r = 0; r < C; r++) {
                    int c = *cl_at(&s.ntop, r);
                    c = c < NB_MAX_TOP_LOGPROBS ? c : NB_MAX_TOP_LOGPROBS;
                    for (int j = 0; j < c && got < NB_MAX_TOP_LOGPROBS; j++, got++) {
                        key[got] = *cl_at(&s.top_key[j], r);
                        raw[got] = *cl_at(&s.top_raw[j], r);
                    }
                }
                for (int a = 1; a < got; a++)
                    for (int b = a; b > 0 && key[b] > key[b - 1]; b--) {
                        u64 t = key[b];
                        key[b] = key[b - 1];
                        key[b - 1] = t;
                        float u = raw[b];
                        raw[b] = raw[b - 1];
                        raw[b - 1] = u;
                    }
                const int nt = got < n_top ? got : n_top;
                for (int j = 0; j < nt; j++) {
                    out->top_id[j] = nb_sm_key_id(key[j]);
                    out->top_logprob[j] = (float)((double)raw[j] - lse);
                }
                out->n_top = nt;
            }
        }
    }
    if (rank == 0 && tid == 0 && n_top == 0) out->n_top = 0;

    // 2. penalties, in place: each id by the block whose slice holds it
    const int pen = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    long long h0 = 0, h1 = 0;
    if (pen && off && n_entries > 0) {
        h0 = off[row];
        h1 = off[row + 1];
        if (h0 < 0 || h1 < h0 || h1 > n_entries) h0 = h1 = 0;
    }
    __syncthreads(); // every thread has read the raw values it needed
    for (long long j = h0 + tid; j < h1; j += NB_SB) {
        const int t = htok[j];
        if (t < lo || t >= lo + n) continue;
        const float raw = xs[t - lo];
        if (orig) orig[j] = raw;
        const float v = nb_sm_penalize(raw, hcnt[j], p.repetition_penalty, p.frequency_penalty, p.presence_penalty);
        xs[t - lo] = v;
        x[t] = v;
    }
    __syncthreads();

    int token = -1;
    if (!(p.temperature > 0.0f)) {
        // 3. greedy
        u64 bk = 0;
        for (int i = tid; i < n; i += NB_SB) {
            u64 kk = nb_sm_key(nb_sm_fkey(nb_sm_clean(xs[i])), lo + i);
            bk = kk > bk ? kk : bk;
        }
        token = nb_sm_key_id(cl_max_u64(bk, &s, &k, C));
    } else {
        // 4. draw
        float mt = -INFINITY;
        for (int i = tid; i < n; i += NB_SB) {
            float c = nb_sm_clean(xs[i]);
            mt = c > mt ? c : mt;
        }
        const float m = cl_max_f(mt, &s, &k, C);
        const float inv_t = __fdiv_rn(1.0f, p.temperature), min_p = p.min_p;
        // the copy now holds each token's weight e (the penalized logits stay in global memory)
        for (int i = tid; i < n; i += NB_SB) xs[i] = nb_sm_weight_e(nb_sm_clean(xs[i]), m, inv_t);
        __syncthreads();
        u64 M, kstar = 0;
        const u64 K = p.top_k > 0 && p.top_k < V ? (u64)p.top_k : ~0ull;
        const int top_p_on = p.top_p < 1.0f;
        if (K == ~0ull && !top_p_on) { // kept: every candidate (e >= min_p)
            u64 zct = 0;
            for (int i = tid; i < n; i += NB_SB) {
                u64 key, w;
                int cand;
                cl_elem(1, xs[i], lo + i, min_p, &key, &w, &cand);
                if (cand) zct += w;
            }
            M = cl_sum_u64(zct, &s, &k, C);
        } else {
            u64 L = ~0ull;
            if (top_p_on) { // the limit is a fraction of the total weight of all tokens
                u64 zt = 0;
                for (int i = tid; i < n; i += NB_SB) {
                    u64 key, w;
                    int cand;
                    cl_elem(1, xs[i], lo + i, min_p, &key, &w, &cand);
                    zt += w;
                }
                L = nb_sm_top_p_limit(p.top_p, cl_sum_u64(zt, &s, &k, C));
            }
            kstar = cl_select(&s, xs, lo, n, S, C, rank, 1, 30 + NB_SM_ID_BITS, min_p, K, L, &M, &lvl);
        }
        const u64 target = nb_sm_target(nb_sm_uniform(p.seed, p.k), M);
        // this block's chunk sums of the kept weights, one warp per chunk of 1024 ids
        const int cps = S / NB_CHUNK, nch_l = (n + NB_CHUNK - 1) / NB_CHUNK;
        for (int c = warp; c < nch_l; c += NB_NWARP) {
            u64 acc = 0;
            for (int j = 0; j < 32; j++) {
                int i = c * NB_CHUNK + j * 32 + lane;
                if (i >= n) break;
                u64 key, w;
                int cand;
                cl_elem(1, xs[i], lo + i, min_p, &key, &w, &cand);
                if (cand && key >= kstar) acc += w;
            }
            acc = nb_warp_sum_u64(acc);
            if (lane == 0) s.cmass[c] = acc;
        }
        cl_sync();
        if (warp == 0) {
            // every block: the chunk where the running kept weight first exceeds the target
            const int nch = (V + NB_CHUNK - 1) / NB_CHUNK;
            u64 base = 0, resid = 0;
            int chunk = nch - 1;
            for (int r0 = 0; r0 * 32 < nch; r0++) {
                const int c = r0 * 32 + lane;
                const u64 v = c < nch ? *cl_at(&s.cmass[c % cps], c / cps) : 0;
                u64 exc;
                const int f = nb_warp_walk(v, &base, target, &exc);
                if (f >= 0) {
                    chunk = r0 * 32 + f;
                    resid = target - exc;
                    break;
                }
            }
            // the block holding that chunk walks it, in id order
            int tok = -2; // not this block's
            if (chunk / cps == rank) {
                u64 run = 0;
                tok = -1;
                const int c0 = (chunk - rank * cps) * NB_CHUNK;
                for (int j = 0; j < 32; j++) {
                    const int i = c0 + j * 32 + lane;
                    u64 v = 0;
                    if (i < n) {
                        u64 key, w;
                        int cand;
                        cl_elem(1, xs[i], lo + i, min_p, &key, &w, &cand);
                        if (cand && key >= kstar) v = w;
                    }
                    u64 exc;
                    const int f = nb_warp_walk(v, &run, resid, &exc);
                    if (f >= 0) {
                        tok = lo + i - lane + f;
                        break;
                    }
                }
            }
            if (lane == 0) s.token = tok;
        }
        __syncthreads();
        token = s.token;
        if (token == -2) token = INT32_MIN; // another block's token (it reports it)
    }

    // the block holding the token reports it (an impossible out-of-range draw: the block that
    // drew it, or rank 0 for greedy, where every block has the same token)
    const int draw = p.temperature > 0.0f;
    if (token >= lo && token < lo + n) {
        // its log-probability from its raw logit (the penalties kept that in orig)
        if (p.want_logprob) {
            if (tid == 0) s.raw = x[token]; // penalized (a draw left weights in the copy)
            __syncthreads();
            for (long long j = h0 + tid; orig && j < h1; j += NB_SB)
                if (htok[j] == token) s.raw = orig[j];
            __syncthreads();
        }
        if (tid == 0) {
            out->logprob = p.want_logprob ? (float)((double)s.raw - lse) : 0.0f;
            out->token = token;
        }
    } else if (token != INT32_MIN && (token < 0 || token >= V) && (draw || rank == 0) && tid == 0) {
        out->logprob = 0;
        out->token = -1;
    }
    cl_sync(); // no block leaves while another may still read its shared memory
}

// ---- launcher ------------------------------------------------------------------------------

// Cluster sizes tried, largest first where the rows alone would not fill the GPU; whether a
// (vocabulary, size) launches is asked once (cudaOccupancyMaxActiveClusters) and remembered.
#define CL_CACHE 8
static struct {
    int device, V, C, ok;
} g_cl_cache[CL_CACHE];
static int g_cl_n;
static pthread_mutex_t g_cl_lock = PTHREAD_MUTEX_INITIALIZER; /* contexts may sample from several threads */

static int cl_slice(int V, int C)
{
    const int chunks = (V + NB_CHUNK - 1) / NB_CHUNK, cps = (chunks + C - 1) / C;
    return cps * NB_CHUNK;
}

static int cl_usable_locked(int device, int V, int C)
{
    for (int i = 0; i < g_cl_n; i++)
        if (g_cl_cache[i].device == device && g_cl_cache[i].V == V && g_cl_cache[i].C == C) return g_cl_cache[i].ok;
    int ok = 0, major = 0, optin = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    const size_t dyn = (size_t)cl_slice(V, C) * sizeof(float);
    if (major >= 9 && C <= 16 && cl_slice(V, C) / NB_CHUNK <= CL_MAX_LCH && dyn + sizeof(cl_smem) <= (size_t)optin) {
        // the kernel's limits are set once to the most any launch may ask (a per-launch value
        // would be overwritten by the next vocabulary's)
        cudaError_t e = cudaFuncSetAttribute(nb_sample_cl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             optin - (int)sizeof(cl_smem));
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(nb_sample_cl_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (e == cudaSuccess) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = (unsigned)C;
            at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3((unsigned)C, 1, 1);
            cfg.blockDim = dim3(NB_SB, 1, 1);
            cfg.dynamicSmemBytes = dyn;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            int nclusters = 0;
            e = cudaOccupancyMaxActiveClusters(&nclusters, nb_sample_cl_kernel, &cfg);
            ok = e == cudaSuccess && nclusters > 0;
        }
        cudaGetLastError(); // a refusal here only means the one-block kernel runs
    }
    if (g_cl_n < CL_CACHE) g_cl_cache[g_cl_n++] = {device, V, C, ok};
    return ok;
}

static int cl_usable(int device, int V, int C)
{
    pthread_mutex_lock(&g_cl_lock);
    const int ok = cl_usable_locked(device, V, C);
    pthread_mutex_unlock(&g_cl_lock);
    return ok;
}

// Up to this many rows the cluster kernel runs (H200, vocab 154880, T 0.7 top-p 0.9: 0.04 vs
// 0.43 ms at 1 row, 0.34 vs 0.66 at 100); above it the one-block kernel's rows fill the GPU
// and it is faster (2.8 vs 3.2 ms at 1000 rows; greedy 0.25 vs 0.48).
#define CL_MAX_ROWS 256

// The cluster size for rows x V on this device: 16 while the rows alone leave SMs idle, else
// 8 (two 512-thread blocks per SM); 0 = the one-block kernel (more than CL_MAX_ROWS rows,
// NIBBLE_CUDA_SAMPLE=block, or a device or vocabulary the cluster kernel does not take).
// NIBBLE_CUDA_SAMPLE=8|16 forces a size at any row count.
static int cl_pick(int device, int sm_count, int64_t rows, int V)
{
    const char *e = getenv("NIBBLE_CUDA_SAMPLE");
    int forced = 0;
    if (e && *e) {
        if (!strcmp(e, "block")) return 0;
        forced = atoi(e);
    }
    const int chunks = (V + NB_CHUNK - 1) / NB_CHUNK;
    if (chunks < 2) return 0; // a row of one chunk: nothing to share
    if (!forced && rows > CL_MAX_ROWS) return 0;
    const int want = forced ? forced : rows * 16 <= 2 * (int64_t)sm_count ? 16 : 8;
    for (int C = want; C >= 2; C /= 2) {
        const int Cc = C < chunks ? C : chunks;
        if (cl_usable(device, V, Cc)) return Cc;
    }
    return 0;
}

extern "C" int nb_cuda_sample_cluster(nb_ops_ctx *ctx, float *logits, int64_t rows, int V,
                                      const nb_sample_params *params, const int32_t *off, const int32_t *htok,
                                      const int32_t *hcnt, long long n_entries, float *orig, nb_sample_out *out,
                                      nb_status *st)
{
    nb_cuda_state *cs = nb_cuda_st(ctx);
    const int C = cl_pick(cs->device, cs->sm_count, rows, V);
    if (C == 0 || rows * C > 0x7fffffff) return 0;
    const int S = cl_slice(V, C);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)C;
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)(rows * C), 1, 1);
    cfg.blockDim = dim3(NB_SB, 1, 1);
    cfg.dynamicSmemBytes = (size_t)S * sizeof(float);
    cfg.stream = nb_cuda_stream(ctx);
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, nb_sample_cl_kernel, logits, V, S, params, off, htok, hcnt, n_entries,
                                       orig, out);
    if (e != cudaSuccess) cudaGetLastError(); // not left for the next launch's check
    *st = e == cudaSuccess ? NB_OK
                           : nb_error(NB_ERR_CUDA, "sample: cluster kernel launch (%lld rows x %d blocks) failed: %s",
                                      (long long)rows, C, cudaGetErrorString(e));
    return 1;
}

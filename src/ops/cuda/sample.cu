// GPU sampling (ops/cuda/sample.h): one block of 512 threads per logits row, no sort.
//   1. log-probabilities (when asked): max, sum of exp in double, and the top-n found by the
//      radix select below with "fewer than n ranked above" as its predicate, then gathered;
//   2. penalties in place over the row's CSR history (raw values kept in scratch);
//   3. greedy: the largest key (value, then lowest id) of the penalized row; or
//   4. weights e = exp((l - m) / T) and w = e * 2^44 (ops/sample_math.h); their total when
//      top_p needs it; the kept set's boundary key by radix select; the draw
//      by chunk sums (one warp per 1024-token chunk) then a warp scan inside the chosen chunk.
// Radix select: keys are 50 bits (weight bits, then the id complement) or 52 (logit order
// bits, id). Each level histograms the next 10 bits of the keys that share the prefix found
// so far (count and weight per bucket, shared-memory atomics), then a block scan from the top
// bucket down finds the lowest bucket whose best token still satisfies the predicate
// "ranked-above count < top_k and ranked-above weight <= top_p limit" (monotone in the key,
// so the kept set is every key >= the boundary). It stops when that bucket holds one token;
// keys are distinct, so at most 6 levels. The row (620 KB at GLM-5's vocabulary) is re-read
// from L2 at each level; the weights are recomputed rather than stored.
// Test and timing: tests/cuda_ops/test_cuda_sample.c.
#include "ops/cuda/sample.h"
#include "ops/cuda/sample_dev.cuh"

static_assert(NB_MAX_CHUNKS <= NB_NBK, "the draw's chunk sums reuse the histogram's weight array");

typedef struct nb_smp_smem {
    unsigned int cnt[NB_NBK];
    u64 mass[NB_NBK]; // histogram weights; then the draw's chunk sums
    int any[NB_NBK];
    u64 red[NB_NWARP], red2[NB_NWARP];
    double dred[NB_NWARP];
    float fred[NB_NWARP];
    u64 top[NB_MAX_TOP_LOGPROBS];
    int ntop;
    int bstar;
    u64 above_cnt, above_mass;
    int chunk;
    u64 resid;
    int token;
    float raw;
} nb_smp_smem;

// The smallest key among candidates whose ranked-above count is < K and ranked-above weight
// <= L (the best candidate always qualifies); *kept_mass: the weight of every candidate with a
// key >= it (mode 1).
__device__ u64 nb_smp_select(nb_smp_smem *s, int mode, int nbits, const float *x, int V, float m, float inv_t,
                             float min_p, u64 K, u64 L, u64 *kept_mass)
{
    u64 prefix = 0, above_c = 0, above_m = 0;
    int shift = nbits;
    for (;;) {
        int d = shift < NB_DIG ? shift : NB_DIG;
        shift -= d;
        __syncthreads(); // the previous level's readers are done
        for (int b = threadIdx.x; b < NB_NBK; b += NB_SB) {
            s->cnt[b] = 0;
            s->mass[b] = 0;
        }
        if (threadIdx.x == 0) s->bstar = NB_NBK;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += NB_SB) {
            u64 key, w;
            int cand;
            nb_smp_elem(mode, x, i, m, inv_t, min_p, &key, &w, &cand);
            if (!cand) continue;
            if ((key >> (shift + d)) != prefix) continue;
            int b = (int)((key >> shift) & (u64)((1u << d) - 1u));
            atomicAdd(&s->cnt[b], 1u);
            if (mode == 1) atomicAdd(&s->mass[b], w);
            s->any[b] = i;
        }
        __syncthreads();
        // thread t owns buckets b1 = NBK-1-2t and b1-1: threadIdx order is descending key order
        int b1 = NB_NBK - 1 - 2 * (int)threadIdx.x, b0 = b1 - 1;
        u64 c1 = s->cnt[b1], c0 = s->cnt[b0], m1 = s->mass[b1], m0 = s->mass[b0];
        u64 ce, me;
        nb_blk_scan2(c1 + c0, m1 + m0, &ce, &me, s->red, s->red2);
        u64 ac = above_c + ce, am = above_m + me;
        if (c0 && ac + c1 < K && am + m1 <= L)
            atomicMin(&s->bstar, b0);
        else if (c1 && ac < K && am <= L)
            atomicMin(&s->bstar, b1);
        __syncthreads();
        int b = s->bstar;
        if (b == b0) {
            s->above_cnt = ac + c1;
            s->above_mass = am + m1;
        } else if (b == b1) {
            s->above_cnt = ac;
            s->above_mass = am;
        }
        __syncthreads();
        above_c = s->above_cnt;
        above_m = s->above_mass;
        prefix = (prefix << d) | (u64)b;
        if (s->cnt[b] == 1 || shift == 0) {
            u64 key, w;
            int cand;
            nb_smp_elem(mode, x, s->any[b], m, inv_t, min_p, &key, &w, &cand);
            *kept_mass = above_m + s->mass[b];
            return key;
        }
    }
}

__global__ void __launch_bounds__(NB_SB) nb_sample_kernel(float *logits, int V, const nb_sample_params *params,
                                                          const int32_t *off, const int32_t *htok,
                                                          const int32_t *hcnt, long long n_entries, float *orig,
                                                          nb_sample_out *outs)
{
    __shared__ nb_smp_smem s;
    const nb_sample_params p = params[blockIdx.x];
    if (p.skip) return;
    float *x = logits + (size_t)blockIdx.x * (size_t)V;
    nb_sample_out *out = &outs[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int n_top = p.n_top < 0 ? 0 : p.n_top > NB_MAX_TOP_LOGPROBS ? NB_MAX_TOP_LOGPROBS : p.n_top;
    if (n_top > V) n_top = V;
    const int want_lp = p.want_logprob != 0 || n_top > 0;

    // 1. log-probabilities of the raw logits
    double lse = 0;
    if (want_lp) {
        float mt = -INFINITY;
        for (int i = tid; i < V; i += NB_SB) mt = x[i] > mt ? x[i] : mt;
        float m = nb_blk_max_f(mt, s.fred);
        double zt = 0;
        for (int i = tid; i < V; i += NB_SB) zt += exp((double)x[i] - m);
        lse = m + log(nb_blk_sum_d(zt, s.dred));
        if (n_top > 0) {
            u64 km;
            u64 kstar = nb_smp_select(&s, 0, 32 + NB_SM_ID_BITS, x, V, 0, 0, 0, (u64)n_top, ~0ull, &km);
            if (tid == 0) s.ntop = 0;
            __syncthreads();
            for (int i = tid; i < V; i += NB_SB) {
                u64 key = nb_sm_key(nb_sm_fkey(nb_sm_clean(x[i])), i);
                if (key >= kstar) {
                    int slot = atomicAdd(&s.ntop, 1);
                    if (slot < NB_MAX_TOP_LOGPROBS) s.top[slot] = key;
                }
            }
            __syncthreads();
            if (tid == 0) {
                int n = s.ntop < n_top ? s.ntop : n_top;
                for (int a = 1; a < n; a++)
                    for (int b = a; b > 0 && s.top[b] > s.top[b - 1]; b--) {
                        u64 t = s.top[b];
                        s.top[b] = s.top[b - 1];
                        s.top[b - 1] = t;
                    }
                for (int j = 0; j < n; j++) {
                    int id = nb_sm_key_id(s.top[j]);
                    out->top_id[j] = id;
                    out->top_logprob[j] = (float)((double)x[id] - lse);
                }
                out->n_top = n;
            }
        }
    }
    if (tid == 0) {
        out->logprob = 0;
        if (n_top == 0) out->n_top = 0;
    }

    // 2. penalties, in place
    const int pen = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    long long h0 = 0, h1 = 0;
    if (pen && off && n_entries > 0) {
        h0 = off[blockIdx.x];
        h1 = off[blockIdx.x + 1];
        if (h0 < 0 || h1 < h0 || h1 > n_entries) h0 = h1 = 0;
    }
    __syncthreads(); // every thread has read the raw values it needed
    for (long long j = h0 + tid; j < h1; j += NB_SB) {
        int t = htok[j];
        if (t < 0 || t >= V) continue;
        if (orig) orig[j] = x[t];
        x[t] = nb_sm_penalize(x[t], hcnt[j], p.repetition_penalty, p.frequency_penalty, p.presence_penalty);
    }
    __syncthreads();

    int token;
    if (!(p.temperature > 0.0f)) {
        // 3. greedy
        u64 bk = 0;
        for (int i = tid; i < V; i += NB_SB) {
            u64 k = nb_sm_key(nb_sm_fkey(nb_sm_clean(x[i])), i);
            bk = k > bk ? k : bk;
        }
        token = nb_sm_key_id(nb_blk_max_u64(bk, s.red));
    } else {
        // 4. draw
        float mt = -INFINITY;
        for (int i = tid; i < V; i += NB_SB) {
            float c = nb_sm_clean(x[i]);
            mt = c > mt ? c : mt;
        }
        const float m = nb_blk_max_f(mt, s.fred);
        const float inv_t = __fdiv_rn(1.0f, p.temperature), min_p = p.min_p;
        u64 M, kstar = 0;
        const u64 K = p.top_k > 0 && p.top_k < V ? (u64)p.top_k : ~0ull;
        const int top_p_on = p.top_p < 1.0f;
        if (K == ~0ull && !top_p_on) { // kept: every candidate (e >= min_p)
            u64 zct = 0;
            for (int i = tid; i < V; i += NB_SB) {
                u64 key, w;
                int cand;
                nb_smp_elem(1, x, i, m, inv_t, min_p, &key, &w, &cand);
                if (cand) zct += w;
            }
            M = nb_blk_sum_u64(zct, s.red);
        } else {
            u64 L = ~0ull;
            if (top_p_on) { // the limit is a fraction of the total weight of all tokens
                u64 zt = 0;
                for (int i = tid; i < V; i += NB_SB) {
                    u64 key, w;
                    int cand;
                    nb_smp_elem(1, x, i, m, inv_t, min_p, &key, &w, &cand);
                    zt += w;
                }
                L = nb_sm_top_p_limit(p.top_p, nb_blk_sum_u64(zt, s.red));
            }
            kstar = nb_smp_select(&s, 1, 30 + NB_SM_ID_BITS, x, V, m, inv_t, min_p, K, L, &M);
        }
        const u64 target = nb_sm_target(nb_sm_uniform(p.seed, p.k), M);
        // chunk sums of the kept weights, one warp per chunk of 1024 ids
        const int nch = (V + NB_CHUNK - 1) / NB_CHUNK;
        __syncthreads();
        for (int c = warp; c < nch; c += NB_NWARP) {
            u64 acc = 0;
            for (int j = 0; j < 32; j++) {
                int i = c * NB_CHUNK + j * 32 + lane;
                if (i >= V) break;
                u64 key, w;
                int cand;
                nb_smp_elem(1, x, i, m, inv_t, min_p, &key, &w, &cand);
                if (cand && key >= kstar) acc += w;
            }
            acc = nb_warp_sum_u64(acc);
            if (lane == 0) s.mass[c] = acc;
        }
        __syncthreads();
        if (warp == 0) {
            // the chunk where the running kept weight first exceeds the target
            u64 base = 0;
            int chunk = nch - 1;
            u64 resid = 0;
            for (int r = 0; r * 32 < nch; r++) {
                int c = r * 32 + lane;
                u64 v = c < nch ? s.mass[c] : 0, exc;
                const int f = nb_warp_walk(v, &base, target, &exc);
                if (f >= 0) {
                    chunk = r * 32 + f;
                    resid = target - exc;
                    break;
                }
            }
            // then the token inside it, in id order
            u64 run = 0;
            int tok = -1;
            for (int j = 0; j < 32; j++) {
                int i = chunk * NB_CHUNK + j * 32 + lane;
                u64 v = 0;
                if (i < V) {
                    u64 key, w;
                    int cand;
                    nb_smp_elem(1, x, i, m, inv_t, min_p, &key, &w, &cand);
                    if (cand && key >= kstar) v = w;
                }
                u64 exc;
                const int f = nb_warp_walk(v, &run, resid, &exc);
                if (f >= 0) {
                    tok = chunk * NB_CHUNK + j * 32 + f;
                    break;
                }
            }
            if (lane == 0) s.token = tok;
        }
        __syncthreads();
        token = s.token;
    }

    if (token < 0 || token >= V) { // cannot happen (the target is below the kept mass): say so
        if (tid == 0) out->token = -1;
        return;
    }
    // the drawn token's log-probability, from its raw logit
    if (p.want_logprob) {
        if (tid == 0) s.raw = x[token];
        __syncthreads();
        for (long long j = h0 + tid; orig && j < h1; j += NB_SB)
            if (htok[j] == token) s.raw = orig[j];
        __syncthreads();
        if (tid == 0) out->logprob = (float)((double)s.raw - lse);
    }
    if (tid == 0) out->token = token;
}

extern "C" nb_status nb_cuda_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                                    const nb_sample_hist *hist, nb_sample_out *out)
{
    NB_TRY(nb_cuda_check_f32("sample", "logits", logits, 2));
    const int64_t rows = logits->shape[0];
    const int V = (int)logits->shape[1];
    if (rows == 0) return NB_OK;
    if (rows > 0x7fffffff) return nb_error(NB_ERR_INVALID_ARG, "sample: %lld rows", (long long)rows);
    long long n = hist ? (long long)hist->n_entries : 0;
    float *orig = NULL;
    if (n > 0 && hist->raw) {
        orig = hist->raw;
    } else if (n > 0) {
        orig = (float *)nb_cuda_scratch(ctx, 0, (size_t)n * sizeof(float));
        if (!orig) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "sample: %lld history entries", n);
    }
    const int32_t *hoff = n > 0 ? hist->off : NULL, *htok = n > 0 ? hist->token : NULL,
                  *hcnt = n > 0 ? hist->count : NULL;
    nb_status st;
    if (nb_cuda_sample_cluster(ctx, (float *)logits->data, rows, V, params, hoff, htok, hcnt, n, orig, out, &st))
        return st;
    nb_sample_kernel<<<(unsigned)rows, NB_SB, 0, nb_cuda_stream(ctx)>>>(
        (float *)logits->data, V, params, hoff, htok, hcnt, n, orig, out);
    NB_CUDA_LAUNCHED("sample");
    return NB_OK;
}

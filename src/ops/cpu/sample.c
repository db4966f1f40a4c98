/* CPU sampling (ops/cpu/sample.h): per row, log-probabilities of the raw logits, penalties,
 * then greedy argmax or a seeded draw from the kept set. The kept set is found by gathering
 * the tokens above a weight threshold, lowered until the gathered prefix (in key order) is
 * known to contain the boundary, and sorting that prefix; the GPU finds the same boundary by
 * a radix select (ops/cuda/sample.cu). Both use the arithmetic of ops/sample_math.h.
 * Tests: tests/engine/test_sampling.c (distributions), tests/cuda_ops/test_cuda_sample.c. */
#include "ops/cpu/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/sample_math.h"

static int nb_cmp_key_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

static float nb_key_e(uint64_t key) { return NB_SM_BITSF((uint32_t)(key >> NB_SM_ID_BITS)); }

/* Log-sum-exp and the n best (key order) of the raw logits. */
static double nb_raw_logprobs(const float *x, int V, int n_top, nb_sample_out *out)
{
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)x[i] - m);
    double lse = m + log(z);
    uint64_t best[NB_MAX_TOP_LOGPROBS];
    int n = 0;
    for (int i = 0; i < V && n_top > 0; i++) {
        uint64_t k = nb_sm_key(nb_sm_fkey(nb_sm_clean(x[i])), i);
        if (n == n_top && k <= best[n - 1]) continue;
        int j = n < n_top ? n++ : n - 1;
        while (j > 0 && k > best[j - 1]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = k;
    }
    for (int j = 0; j < n; j++) {
        int id = nb_sm_key_id(best[j]);
        out->top_id[j] = id;
        out->top_logprob[j] = (float)((double)x[id] - lse);
    }
    out->n_top = n;
    return lse;
}

/* The smallest kept key (kept: key >= it among candidates e >= min_p) and the kept mass.
 * keys: [V] the keys of every token; cand: [V] scratch. */
static uint64_t nb_kept_boundary(const uint64_t *keys, int V, float min_p, uint64_t K, uint64_t L, uint64_t *cand,
                                 uint64_t *mass_out)
{
    float t = 0.125f;
    for (;;) {
        float lo = t > min_p ? t : min_p;
        int n = 0;
        for (int i = 0; i < V; i++)
            if (nb_key_e(keys[i]) >= lo) cand[n++] = keys[i];
        qsort(cand, (size_t)n, sizeof *cand, nb_cmp_key_desc);
        uint64_t mass = 0;
        for (int r = 0; r < n; r++) {
            if (!((uint64_t)r < K && mass <= L)) {
                *mass_out = mass;
                return cand[r - 1]; /* r >= 1: the best token is always kept */
            }
            mass += nb_sm_weight(nb_key_e(cand[r]));
        }
        if (lo <= min_p || n == V) { /* every candidate gathered, all kept */
            *mass_out = mass;
            return cand[n - 1];
        }
        t *= 0.0625f;
        if (t < 1e-30f) t = 0.0f;
    }
}

void nb_cpu_sample_row(float *x, int V, const nb_sample_params *p, const int32_t *tok, const int32_t *cnt,
                       int n_hist, uint64_t *scratch, nb_sample_out *out)
{
    int n_top = p->n_top < 0 ? 0 : p->n_top > NB_MAX_TOP_LOGPROBS ? NB_MAX_TOP_LOGPROBS : p->n_top;
    if (n_top > V) n_top = V;
    int want_lp = p->want_logprob != 0 || n_top > 0;
    out->logprob = 0;
    out->n_top = 0;
    double lse = want_lp ? nb_raw_logprobs(x, V, n_top, out) : 0;

    int pen = p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    float *orig = NULL;
    if (pen && n_hist > 0) {
        if (p->want_logprob) orig = malloc((size_t)n_hist * sizeof *orig);
        for (int j = 0; j < n_hist; j++) {
            int32_t t = tok[j];
            if (t < 0 || t >= V) continue;
            if (orig) orig[j] = x[t];
            x[t] = nb_sm_penalize(x[t], cnt[j], p->repetition_penalty, p->frequency_penalty, p->presence_penalty);
        }
    }

    int32_t best = 0;
    if (!(p->temperature > 0.0f)) {
        uint64_t bk = 0;
        for (int i = 0; i < V; i++) {
            uint64_t k = nb_sm_key(nb_sm_fkey(nb_sm_clean(x[i])), i);
            if (k > bk) bk = k;
        }
        best = nb_sm_key_id(bk);
    } else {
        uint64_t *keys = scratch, *cand = scratch + V;
        float m = -INFINITY;
        for (int i = 0; i < V; i++) {
            float c = nb_sm_clean(x[i]);
            m = c > m ? c : m;
        }
        float inv_t = NB_SM_DIV(1.0f, p->temperature);
        uint64_t Z = 0, Zc = 0;
        for (int i = 0; i < V; i++) {
            float e = nb_sm_weight_e(nb_sm_clean(x[i]), m, inv_t);
            keys[i] = nb_sm_key(NB_SM_FBITS(e), i);
            uint64_t w = nb_sm_weight(e);
            Z += w;
            if (e >= p->min_p) Zc += w;
        }
        uint64_t K = p->top_k > 0 && p->top_k < V ? (uint64_t)p->top_k : UINT64_MAX;
        uint64_t L = nb_sm_top_p_limit(p->top_p, Z);
        uint64_t kstar = 0, M = Zc;
        if (K != UINT64_MAX || L != UINT64_MAX) kstar = nb_kept_boundary(keys, V, p->min_p, K, L, cand, &M);
        uint64_t target = nb_sm_target(nb_sm_uniform(p->seed, p->k), M);
        uint64_t c = 0;
        best = -1;
        for (int i = 0; i < V; i++) {
            float e = nb_key_e(keys[i]);
            if (!(e >= p->min_p) || keys[i] < kstar) continue;
            c += nb_sm_weight(e);
            if (c > target) {
                best = i;
                break;
            }
        }
        NB_ASSERT(best >= 0); /* target < M = the kept mass */
    }
    out->token = best;
    if (p->want_logprob) {
        float raw = x[best];
        for (int j = 0; orig && j < n_hist; j++)
            if (tok[j] == best) raw = orig[j];
        out->logprob = (float)((double)raw - lse);
    }
    free(orig);
}

typedef struct {
    float *x;
    int V;
    const nb_sample_params *params;
    const nb_sample_hist *hist;
    nb_sample_out *out;
    uint64_t *scratch;
} nb_sample_job;

static void nb_sample_range(void *arg, int64_t begin, int64_t end, int thread)
{
    nb_sample_job *j = arg;
    uint64_t *scr = j->scratch + (size_t)thread * NB_CPU_SAMPLE_SCRATCH(j->V);
    for (int64_t r = begin; r < end; r++) {
        const nb_sample_params *p = &j->params[r];
        if (p->skip) continue;
        const int32_t *tok = NULL, *cnt = NULL;
        int n = 0;
        const nb_sample_hist *h = j->hist;
        if (h && h->off && h->n_entries > 0) {
            int64_t a = h->off[r], b = h->off[r + 1];
            if (a >= 0 && a <= b && b <= h->n_entries) {
                tok = h->token + a;
                cnt = h->count + a;
                n = (int)(b - a);
            }
        }
        nb_cpu_sample_row(j->x + (size_t)r * (size_t)j->V, j->V, p, tok, cnt, n, scr, &j->out[r]);
    }
}

nb_status nb_cpu_sample(nb_ops_ctx *ctx, nb_tensor *logits, const nb_sample_params *params,
                        const nb_sample_hist *hist, nb_sample_out *out)
{
    NB_TRY(nb_cpu_check_f32("sample", "logits", logits, 2));
    int64_t rows = logits->shape[0];
    int V = (int)logits->shape[1];
    int threads = (int)NB_MIN((int64_t)ctx->n_threads, rows);
    if (threads < 1) return NB_OK;
    uint64_t *scr = nb_ops_scratch(ctx, 0, (size_t)threads * NB_CPU_SAMPLE_SCRATCH(V) * sizeof(uint64_t));
    if (!scr) return nb_error_wrap(NB_ERR_OUT_OF_MEMORY, "sample: scratch for %d threads", threads);
    nb_sample_job j = {logits->data, V, params, hist, out, scr};
    nb_cpu_parallel_for(ctx, rows, 1, nb_sample_range, &j);
    return NB_OK;
}

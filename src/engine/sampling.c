/* Host-side sampling (see sampling.h). Tests: tests/engine/test_sampling.c. */
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

uint64_t nb_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

double nb_rng_uniform(uint64_t seed, uint64_t k)
{
    uint64_t r = nb_mix64(nb_mix64(seed) ^ nb_mix64(k * 0xD1B54A32D192ED03ULL + 1));
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

nb_sampling_params nb_sampling_default_params(void)
{
    nb_sampling_params s;
    memset(&s, 0, sizeof s);
    s.temperature = 1.0f;
    s.top_k = -1;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.repetition_penalty = 1.0f;
    s.seed = -1;
    s.max_tokens = -1;
    s.n = 1;
    s.skip_special_tokens = 1;
    return s;
}

nb_status nb_sampler_init(nb_sampler *s, int vocab)
{
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->p = malloc((size_t)vocab * sizeof *s->p);
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->stamp = calloc((size_t)vocab, sizeof *s->stamp);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    if (!s->p || !s->idx || !s->stamp || !s->count) {
        nb_sampler_free(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "sampler scratch for vocab %d", vocab);
    }
    return NB_OK;
}

void nb_sampler_free(nb_sampler *s)
{
    free(s->p);
    free(s->idx);
    free(s->stamp);
    free(s->count);
    memset(s, 0, sizeof *s);
}

nb_status nb_sampling_validate(const nb_sampling_params *sp, int vocab)
{
#define NB_BAD(field, fmt, v) return nb_error(NB_ERR_INVALID_ARG, "sampling: %s " fmt, field, v)
    if (!(sp->temperature >= 0) || !isfinite(sp->temperature)) NB_BAD("temperature", "%g: must be >= 0", sp->temperature);
    if (sp->top_k < -1) NB_BAD("top_k", "%d: must be -1, 0 (off) or positive", sp->top_k);
    if (!(sp->top_p > 0 && sp->top_p <= 1)) NB_BAD("top_p", "%g: must be in (0, 1]", sp->top_p);
    if (!(sp->min_p >= 0 && sp->min_p <= 1)) NB_BAD("min_p", "%g: must be in [0, 1]", sp->min_p);
    if (!(sp->repetition_penalty > 0) || !isfinite(sp->repetition_penalty))
        NB_BAD("repetition_penalty", "%g: must be > 0", sp->repetition_penalty);
    if (!(fabsf(sp->frequency_penalty) <= 2)) NB_BAD("frequency_penalty", "%g: must be in [-2, 2]", sp->frequency_penalty);
    if (!(fabsf(sp->presence_penalty) <= 2)) NB_BAD("presence_penalty", "%g: must be in [-2, 2]", sp->presence_penalty);
    if (sp->max_tokens < -1) NB_BAD("max_tokens", "%d: must be >= 0 or -1 (up to the context)", sp->max_tokens);
    if (sp->n < 1 || sp->n > 128) NB_BAD("n", "%d: must be in [1, 128]", sp->n);
    if (sp->top_logprobs < 0 || sp->top_logprobs > NB_MAX_TOP_LOGPROBS)
        NB_BAD("top_logprobs", "%d: must be in [0, 20]", sp->top_logprobs);
    if (sp->n_stop_token_ids < 0 || (sp->n_stop_token_ids > 0 && !sp->stop_token_ids))
        NB_BAD("stop_token_ids", "count %d without ids", sp->n_stop_token_ids);
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] < 0 || sp->stop_token_ids[i] >= vocab)
            return nb_error(NB_ERR_INVALID_ARG, "sampling: stop_token_ids[%d] = %d: outside the vocabulary of %d", i,
                            sp->stop_token_ids[i], vocab);
    if (sp->n_stop < 0 || (sp->n_stop > 0 && !sp->stop)) NB_BAD("stop", "count %d without strings", sp->n_stop);
    for (int i = 0; i < sp->n_stop; i++)
        if (!sp->stop[i] || !sp->stop[i][0]) return nb_error(NB_ERR_INVALID_ARG, "sampling: stop[%d] is empty", i);
#undef NB_BAD
    return NB_OK;
}

/* Sort key: probability descending, then id ascending (deterministic order). */
static int nb_cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *p = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float px = p[x], py = p[y];
    if (px != py) return px > py ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void nb_apply_penalties(nb_sampler *s, float *logits, const nb_sampling_params *sp, const int32_t *tokens,
                               int prompt_len, int len)
{
    int rep = sp->repetition_penalty != 1.0f;
    int fp = sp->frequency_penalty != 0.0f || sp->presence_penalty != 0.0f;
    if (!rep && !fp) return;
    if (++s->cur == 0) { /* stamp wrapped: clear once every 4 billion calls */
        memset(s->stamp, 0, (size_t)s->vocab * sizeof *s->stamp);
        s->cur = 1;
    }
    /* count output occurrences; mark prompt tokens with count 0 */
    for (int i = 0; i < len; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= s->vocab) continue;
        if (s->stamp[t] != s->cur) {
            s->stamp[t] = s->cur;
            s->count[t] = 0;
        }
        if (i >= prompt_len) s->count[t]++;
    }
    for (int i = 0; i < len; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= s->vocab || s->stamp[t] != s->cur) continue;
        s->stamp[t] = s->cur - 1; /* apply once per distinct token */
        float l = logits[t];
        if (rep) l = l > 0 ? l / sp->repetition_penalty : l * sp->repetition_penalty;
        int c = s->count[t];
        if (c > 0) l -= sp->frequency_penalty * (float)c + sp->presence_penalty;
        logits[t] = l;
    }
}

static void nb_logprobs(nb_sampler *s, const float *logits, int top_n, nb_sample *out)
{
    int V = s->vocab;
    double m = -INFINITY;
    for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)logits[i] - m);
    double lse = m + log(z);
    out->logprob = (float)((double)logits[out->token] - lse);
    out->n_top = 0;
    /* insertion into a short sorted list: O(V) when most logits lose at the first compare */
    int n = 0;
    for (int i = 0; i < V && top_n > 0; i++) {
        float l = logits[i];
        if (n == top_n && !(l > logits[out->top[n - 1].id])) continue;
        int j = n < top_n ? n++ : n - 1;
        while (j > 0 && l > logits[out->top[j - 1].id]) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].id = i;
    }
    for (int k = 0; k < n; k++) out->top[k].logprob = (float)((double)logits[out->top[k].id] - lse);
    out->n_top = n;
}

void nb_sample_token(nb_sampler *s, float *logits, const nb_sampling_params *sp, uint64_t seed,
                     const int32_t *tokens, int prompt_len, int len, nb_sample *out)
{
    int V = s->vocab;
    int want_lp = sp->logprobs || sp->top_logprobs > 0;
    float *raw = NULL;
    if (want_lp && (sp->repetition_penalty != 1.0f || sp->frequency_penalty != 0.0f || sp->presence_penalty != 0.0f)) {
        raw = malloc((size_t)V * sizeof *raw);
        if (raw) memcpy(raw, logits, (size_t)V * sizeof *raw);
    }
    nb_apply_penalties(s, logits, sp, tokens, prompt_len, len);

    int32_t tok = 0;
    if (sp->temperature <= 0.0f) {
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[tok]) tok = i;
    } else {
        float m = -INFINITY;
        for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
        double z = 0;
        float inv_t = 1.0f / sp->temperature;
        for (int i = 0; i < V; i++) {
            s->p[i] = expf((logits[i] - m) * inv_t);
            z += s->p[i];
        }
        for (int i = 0; i < V; i++) s->p[i] = (float)(s->p[i] / z);
        double u = nb_rng_uniform(seed, (uint64_t)(len - prompt_len));
        int filtered = (sp->top_k > 0 && sp->top_k < V) || sp->top_p < 1.0f || sp->min_p > 0.0f;
        if (!filtered) {
            double c = 0, target = u;
            tok = V - 1;
            for (int i = 0; i < V; i++) {
                c += s->p[i];
                if (target < c) {
                    tok = i;
                    break;
                }
            }
            /* rounding may leave c slightly below 1: the tail falls on the last nonzero */
            if (target >= c)
                for (int i = V - 1; i >= 0; i--)
                    if (s->p[i] > 0) {
                        tok = i;
                        break;
                    }
        } else {
            /* Sorting the whole vocabulary per token is far too slow at 150k entries.
             * The kept set is a prefix of the order by p, so gather the tokens above a
             * threshold t, lowering t until that candidate set provably contains the kept
             * prefix: it holds >= top_k tokens, or more than top_p of the mass, or t has
             * reached the min_p cut-off (below which nothing is kept anyway). */
            float pmax = 0;
            for (int i = 0; i < V; i++) pmax = s->p[i] > pmax ? s->p[i] : pmax;
            float lo = sp->min_p > 0 ? sp->min_p * pmax : 0;
            float t = NB_MAX(pmax * 0.125f, lo);
            int n;
            for (;;) {
                double mass = 0;
                n = 0;
                for (int i = 0; i < V; i++)
                    if (s->p[i] >= t && s->p[i] > 0) {
                        s->idx[n++] = i;
                        mass += s->p[i];
                    }
                if (t <= lo || (sp->top_k > 0 && n >= sp->top_k) || (sp->top_p < 1.0f && mass > sp->top_p)) break;
                t *= 0.0625f;
                if (t < lo || t < 1e-30f) t = lo;
            }
            qsort_r(s->idx, (size_t)n, sizeof *s->idx, nb_cmp_desc, s->p);
            int keep = n;
            if (sp->top_k > 0 && sp->top_k < keep) keep = sp->top_k;
            double before = 0;
            int k = 0;
            for (; k < keep; k++) {
                float pk = s->p[s->idx[k]];
                if (k > 0 && sp->top_p < 1.0f && before > sp->top_p) break;
                if (k > 0 && pk < sp->min_p * pmax) break;
                before += pk;
            }
            keep = k > 0 ? k : 1;
            double mass = 0;
            for (int i = 0; i < keep; i++) mass += s->p[s->idx[i]];
            double target = u * mass, c = 0;
            tok = s->idx[keep - 1];
            for (int i = 0; i < keep; i++) {
                c += s->p[s->idx[i]];
                if (target < c) {
                    tok = s->idx[i];
                    break;
                }
            }
        }
    }
    out->token = tok;
    out->logprob = 0;
    out->n_top = 0;
    if (want_lp) nb_logprobs(s, raw ? raw : logits, sp->top_logprobs, out);
    free(raw);
}

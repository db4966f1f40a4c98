/* Host-side sampling and the request → nb_op_sample glue (see sampling.h); the draw itself is
 * nb_cpu_sample_row (ops/cpu/sample.c). Tests: tests/engine/test_sampling.c. */
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/cpu/sample.h"
#include "ops/sample_math.h"

uint64_t nb_mix64(uint64_t x) { return nb_sm_mix64(x); }

double nb_rng_uniform(uint64_t seed, uint64_t k) { return nb_sm_uniform(seed, k); }

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
    s->scratch = malloc(NB_CPU_SAMPLE_SCRATCH(vocab) * sizeof *s->scratch);
    s->htok = malloc((size_t)vocab * sizeof *s->htok);
    s->hcnt = malloc((size_t)vocab * sizeof *s->hcnt);
    s->stamp = calloc((size_t)vocab, sizeof *s->stamp);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    if (!s->scratch || !s->htok || !s->hcnt || !s->stamp || !s->count) {
        nb_sampler_free(s);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "sampler scratch for vocab %d", vocab);
    }
    return NB_OK;
}

void nb_sampler_free(nb_sampler *s)
{
    free(s->scratch);
    free(s->htok);
    free(s->hcnt);
    free(s->stamp);
    free(s->count);
    memset(s, 0, sizeof *s);
}

nb_status nb_sampling_validate(const nb_sampling_params *sp, int vocab)
{
#define NB_BAD(field, fmt, v) return nb_error(NB_ERR_INVALID_ARG, "sampling: %s " fmt, field, v)
    if (!(sp->temperature >= 0) || !isfinite(sp->temperature))
        NB_BAD("temperature", "%g: must be >= 0", sp->temperature);
    if (sp->top_k < -1) NB_BAD("top_k", "%d: must be -1, 0 (off) or positive", sp->top_k);
    if (!(sp->top_p > 0 && sp->top_p <= 1)) NB_BAD("top_p", "%g: must be in (0, 1]", sp->top_p);
    if (!(sp->min_p >= 0 && sp->min_p <= 1)) NB_BAD("min_p", "%g: must be in [0, 1]", sp->min_p);
    if (!(sp->repetition_penalty > 0) || !isfinite(sp->repetition_penalty))
        NB_BAD("repetition_penalty", "%g: must be > 0", sp->repetition_penalty);
    if (!(fabsf(sp->frequency_penalty) <= 2))
        NB_BAD("frequency_penalty", "%g: must be in [-2, 2]", sp->frequency_penalty);
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

nb_sample_params nb_sample_params_for(const nb_sampling_params *sp, uint64_t seed, uint64_t k)
{
    nb_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = sp->temperature;
    p.top_p = sp->top_p;
    p.min_p = sp->min_p;
    p.repetition_penalty = sp->repetition_penalty;
    p.frequency_penalty = sp->frequency_penalty;
    p.presence_penalty = sp->presence_penalty;
    p.top_k = sp->top_k;
    p.n_top = sp->top_logprobs;
    p.want_logprob = sp->logprobs || sp->top_logprobs > 0;
    p.seed = seed;
    p.k = k;
    return p;
}

int nb_sampler_history(nb_sampler *s, const nb_sampling_params *sp, const int32_t *tokens, int prompt_len, int len,
                       int32_t *tok, int32_t *cnt)
{
    if (sp->repetition_penalty == 1.0f && sp->frequency_penalty == 0.0f && sp->presence_penalty == 0.0f) return 0;
    if (++s->cur == 0) { /* stamp wrapped: clear once every 4 billion calls */
        memset(s->stamp, 0, (size_t)s->vocab * sizeof *s->stamp);
        s->cur = 1;
    }
    /* count output occurrences; prompt tokens get count 0 */
    int n = 0;
    for (int i = 0; i < len; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= s->vocab) continue;
        if (s->stamp[t] != s->cur) {
            s->stamp[t] = s->cur;
            s->count[t] = n; /* slot of t in tok/cnt */
            tok[n] = t;
            cnt[n++] = 0;
        }
        if (i >= prompt_len) cnt[s->count[t]]++;
    }
    return n;
}

void nb_sample_from_out(const nb_sample_out *o, nb_sample *out)
{
    out->token = o->token;
    out->logprob = o->logprob;
    out->n_top = o->n_top;
    for (int j = 0; j < o->n_top && j < NB_MAX_TOP_LOGPROBS; j++)
        out->top[j] = (nb_token_logprob){o->top_id[j], o->top_logprob[j]};
}

void nb_sample_token(nb_sampler *s, float *logits, const nb_sampling_params *sp, uint64_t seed,
                     const int32_t *tokens, int prompt_len, int len, nb_sample *out)
{
    nb_sample_params p = nb_sample_params_for(sp, seed, (uint64_t)(len - prompt_len));
    int n = nb_sampler_history(s, sp, tokens, prompt_len, len, s->htok, s->hcnt);
    nb_sample_out o;
    nb_cpu_sample_row(logits, s->vocab, &p, s->htok, s->hcnt, n, s->scratch, &o);
    nb_sample_from_out(&o, out);
}

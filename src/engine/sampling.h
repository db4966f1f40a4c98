/* Host-side sampling of one token from one row of logits.
 *
 * Order, as SGLang's reference sampler: penalties (repetition over prompt and output;
 * frequency and presence over the output) → temperature 0: argmax (lowest id on ties) →
 * else p = softmax(logits / T), tokens sorted by p (desc, then id) and token i kept when
 * i < top_k, the mass of the tokens before it <= top_p, and p_i >= min_p * p_max; the
 * kept ones are renormalized and one is drawn with u = nb_rng_uniform(seed, k), where k
 * is the index of the output token being drawn. That makes a request's output depend on
 * its seed and its own tokens only, never on batching, timing or preemption.
 * Log-probabilities are those of the raw logits (log-softmax before any penalty/filter).
 * Tests: tests/engine/test_sampling.c (chi-square against the filters, seeds). */
#ifndef NB_ENGINE_SAMPLING_H
#define NB_ENGINE_SAMPLING_H

#include <stdint.h>

#include "nibble.h"

typedef struct nb_sampler {
    int vocab;
    float *p;          /* [vocab] scratch */
    int32_t *idx;      /* [vocab] scratch */
    uint32_t *stamp;   /* [vocab]: penalty de-duplication */
    int32_t *count;    /* [vocab]: output counts, valid where stamp == cur */
    uint32_t cur;
} nb_sampler;

typedef struct nb_sample {
    int32_t token;
    float logprob;                               /* of token, raw logits */
    nb_token_logprob top[NB_MAX_TOP_LOGPROBS];   /* best first */
    int n_top;
} nb_sample;

nb_status nb_sampler_init(nb_sampler *s, int vocab);
void nb_sampler_free(nb_sampler *s);

/* Check a params struct: NB_ERR_INVALID_ARG naming the field. */
nb_status nb_sampling_validate(const nb_sampling_params *sp, int vocab);

/* Draw one token. `logits` ([vocab]) is modified. tokens[0..prompt_len) is the prompt,
 * tokens[prompt_len..len) the output so far (k = len - prompt_len). */
void nb_sample_token(nb_sampler *s, float *logits, const nb_sampling_params *sp, uint64_t seed,
                     const int32_t *tokens, int prompt_len, int len, nb_sample *out);

/* Uniform double in [0, 1) from (seed, k): a counter-based generator (splitmix64). */
double nb_rng_uniform(uint64_t seed, uint64_t k);
uint64_t nb_mix64(uint64_t x);

#endif

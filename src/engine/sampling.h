/* Sampling of one token from one row of logits: the engine's host path, and the request →
 * op parameters glue for the GPU path (ops.h nb_op_sample; both run the same arithmetic,
 * ops/sample_math.h, and draw the same token).
 *
 * Order, as SGLang's reference sampler: penalties (repetition over prompt and output;
 * frequency and presence over the output) → temperature 0: argmax (lowest id on ties) →
 * else weights e_i = exp((l_i - max l) / T) (e = 1 at the max), w_i = floor(e_i * 2^44) as
 * integers; tokens ranked by e (desc, then id asc) and the token of rank r kept when
 * r < top_k, the weight of the ranks before it <= top_p * sum(w), and e_r >= min_p (e_max is 1,
 * so this is p_r >= min_p * p_max); the best token is always kept. Draw: target =
 * floor(u * kept mass) with u = nb_rng_uniform(seed, k), k the index of the output token
 * being drawn; the drawn token is the first kept token in id order whose running kept weight
 * exceeds the target (id order, not rank order: a GPU walks it without sorting). That makes a
 * request's output depend on its seed and its own tokens only, never on batching, timing or
 * preemption, nor on the backend.
 * Log-probabilities are those of the raw logits (log-softmax before any penalty/filter).
 * Tests: tests/engine/test_sampling.c (chi-square against the filters, seeds). */
#ifndef NB_ENGINE_SAMPLING_H
#define NB_ENGINE_SAMPLING_H

#include <stdint.h>

#include "nibble.h"
#include "ops/ops.h"

typedef struct nb_sampler {
    int vocab;
    uint64_t *scratch; /* NB_CPU_SAMPLE_SCRATCH(vocab) */
    int32_t *htok, *hcnt; /* [vocab]: one row's penalty history */
    uint32_t *stamp;   /* [vocab]: penalty de-duplication */
    int32_t *count;    /* [vocab]: entry of a token in the history, valid where stamp == cur */
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

/* The op's parameters for one draw of a request (k: index of the output token being drawn). */
nb_sample_params nb_sample_params_for(const nb_sampling_params *sp, uint64_t seed, uint64_t k);

/* The penalty history of a sequence (tokens[0..prompt_len) prompt, [prompt_len..len) output)
 * as distinct tokens and their output counts, in order of first occurrence; 0 entries when the
 * request has no penalty. tok, cnt: room for min(len, vocab) entries. */
int nb_sampler_history(nb_sampler *s, const nb_sampling_params *sp, const int32_t *tokens, int prompt_len, int len,
                       int32_t *tok, int32_t *cnt);

/* The op's result as the engine's nb_sample. */
void nb_sample_from_out(const nb_sample_out *o, nb_sample *out);

/* Uniform double in [0, 1) from (seed, k): a counter-based generator (splitmix64). */
double nb_rng_uniform(uint64_t seed, uint64_t k);
uint64_t nb_mix64(uint64_t x);

#endif

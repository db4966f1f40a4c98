/* Benchmark workloads: random prompts (fresh random token ids per request) and ShareGPT
 * conversations. Lengths: `--range-ratio R` draws each length uniformly from
 * [max(floor(R*L),1), L] as SGLang's --random-range-ratio does; R = 1 is exact.
 * With a tokenizer (--tokenizer MODEL_DIR) a random prompt is text: random ids decoded,
 * re-encoded, trimmed and decoded again until the text encodes to exactly L tokens
 * (prompts that cannot be made exact in a few rounds are redrawn).
 * Without a tokenizer a random prompt is an array of token ids (sent as the /v1/completions
 * `prompt`, so its length is exact on a server that takes ids) or, for chat, random
 * lowercase text of L bytes (one token per byte on a byte-level tokenizer; on BPE models
 * the server's usage.prompt_tokens is what the report counts).
 * Exercised by tests/bench/test_bench_metrics.c and `nibble bench --dataset ...`. */
#ifndef NB_TOOLS_BENCH_DATASET_H
#define NB_TOOLS_BENCH_DATASET_H

#include <stdint.h>
#include "nibble.h"

typedef struct nb_bench_prompt {
    int *ids;       /* token ids (random dataset, completions backend), or NULL */
    int n_ids;
    char *text;     /* text prompt (chat backend or ShareGPT), or NULL */
    int prompt_len; /* tokens as the client counts them (exact for ids) */
    int output_len; /* max_tokens to ask for */
} nb_bench_prompt;

struct nb_tokenizer;

typedef struct nb_bench_dataset_cfg {
    int random;             /* 1: random dataset, 0: ShareGPT file */
    const char *sharegpt;   /* ShareGPT JSON path */
    int input_len, output_len;
    double range_ratio;     /* 0..1 */
    int vocab_size;         /* ids are drawn from [0, vocab_size) */
    int as_text;            /* random dataset as text (chat backend) */
    int output_len_given;   /* ShareGPT: use output_len instead of the reply's length */
    const struct nb_tokenizer *tok; /* --tokenizer: text prompts of exactly L tokens; ShareGPT
                                       lengths counted, not estimated */
} nb_bench_dataset_cfg;

/* Small deterministic generator (splitmix64). */
static inline uint64_t nb_bench_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int nb_bench_rng_range(uint64_t *s, int lo, int hi)
{
    return lo + (int)(nb_bench_rng(s) % (uint64_t)(hi - lo + 1));
}

/* The length drawn for a nominal L under ratio R (SGLang's convention). */
int nb_bench_draw_len(uint64_t *rng, int len, double range_ratio);

/* Build n prompts. For ShareGPT, conversations are read once, filtered as SGLang does
 * (prompt and reply >= 4 tokens, prompt <= 1024, total <= 2048; tokens approximated as
 * bytes/4 without a tokenizer) and sampled with the seed. Errors name the file. */
nb_status nb_bench_dataset_make(const nb_bench_dataset_cfg *cfg, int n, uint64_t seed, nb_bench_prompt **out);
void nb_bench_dataset_free(nb_bench_prompt *p, int n);

#endif

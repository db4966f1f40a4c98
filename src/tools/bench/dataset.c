/* Benchmark workloads (tools/bench/dataset.h). Exercised by: nibble bench --help. */
#include "tools/bench/dataset.h"
#include "base/error.h"
#include "base/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int nb_bench_draw_len(uint64_t *rng, int len, double range_ratio)
{
    int lo = (int)floor((double)len * range_ratio);
    if (lo < 1) lo = 1;
    if (lo >= len) return len;
    return nb_bench_rng_range(rng, lo, len);
}

void nb_bench_dataset_free(nb_bench_prompt *p, int n)
{
    if (!p) return;
    for (int i = 0; i < n; i++) {
        free(p[i].ids);
        free(p[i].text);
    }
    free(p);
}

static nb_status nb_make_random(const nb_bench_dataset_cfg *cfg, int n, uint64_t seed, nb_bench_prompt *p)
{
    uint64_t rng = seed * 0x2545f4914f6cdd1dULL + 1;
    int vocab = cfg->vocab_size > 0 ? cfg->vocab_size : 256;
    for (int i = 0; i < n; i++) {
        int in = nb_bench_draw_len(&rng, cfg->input_len, cfg->range_ratio);
        p[i].output_len = nb_bench_draw_len(&rng, cfg->output_len, cfg->range_ratio);
        p[i].prompt_len = in;
        if (cfg->as_text) {
            p[i].text = malloc((size_t)in + 1);
            if (!p[i].text) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: prompt of %d bytes", in);
            /* Words of 1-8 letters: no two requests share a prefix beyond chance. */
            for (int k = 0; k < in; k++) {
                int r = (int)(nb_bench_rng(&rng) % 32);
                p[i].text[k] = (k > 0 && r >= 26 && p[i].text[k - 1] != ' ') ? ' ' : (char)('a' + r % 26);
            }
            p[i].text[in] = 0;
        } else {
            p[i].ids = malloc((size_t)in * sizeof(int));
            if (!p[i].ids) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: prompt of %d ids", in);
            for (int k = 0; k < in; k++) p[i].ids[k] = (int)(nb_bench_rng(&rng) % (uint64_t)vocab);
            p[i].n_ids = in;
        }
    }
    return NB_OK;
}

typedef struct nb_conv {
    const char *prompt;
    int prompt_len, reply_len;
} nb_conv;

static nb_status nb_make_sharegpt(const nb_bench_dataset_cfg *cfg, int n, uint64_t seed, nb_bench_prompt *p)
{
    cJSON *root;
    NB_TRY(nb_json_load_file(cfg->sharegpt, &root));
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return nb_error(NB_ERR_FORMAT, "%s: expected a JSON array of conversations", cfg->sharegpt);
    }
    int total = cJSON_GetArraySize(root), kept = 0;
    nb_conv *convs = malloc(((size_t)total + 1) * sizeof *convs);
    if (!convs) {
        cJSON_Delete(root);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: %d conversations", cfg->sharegpt, total);
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, root)
    {
        const cJSON *turns = cJSON_GetObjectItemCaseSensitive(c, "conversations");
        if (!cJSON_IsArray(turns) || cJSON_GetArraySize(turns) < 2) continue;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, 0), "value");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(turns, 1), "value");
        if (!cJSON_IsString(a) || !cJSON_IsString(b)) continue;
        /* No tokenizer: about four bytes per token for English BPE vocabularies. */
        int pl = (int)((strlen(a->valuestring) + 3) / 4), rl = (int)((strlen(b->valuestring) + 3) / 4);
        if (cfg->output_len_given) rl = cfg->output_len;
        if (pl < 4 || rl < 4 || pl > 1024 || pl + rl > 2048) continue;
        convs[kept++] = (nb_conv){a->valuestring, pl, rl};
    }
    nb_status s = NB_OK;
    if (kept == 0) {
        s = nb_error(NB_ERR_FORMAT, "%s: no usable conversation (need 'conversations' with two 'value' turns)",
                     cfg->sharegpt);
    } else {
        uint64_t rng = seed * 0x2545f4914f6cdd1dULL + 7;
        for (int i = 0; i < n && s == NB_OK; i++) {
            const nb_conv *v = &convs[nb_bench_rng(&rng) % (uint64_t)kept];
            p[i].text = strdup(v->prompt);
            if (!p[i].text) s = nb_error(NB_ERR_OUT_OF_MEMORY, "bench: ShareGPT prompt");
            p[i].prompt_len = v->prompt_len;
            p[i].output_len = v->reply_len;
        }
    }
    free(convs);
    cJSON_Delete(root);
    return s;
}

nb_status nb_bench_dataset_make(const nb_bench_dataset_cfg *cfg, int n, uint64_t seed, nb_bench_prompt **out)
{
    *out = NULL;
    if (n <= 0) return nb_error(NB_ERR_INVALID_ARG, "bench: --num-prompts must be positive (got %d)", n);
    if (cfg->random && (cfg->input_len < 1 || cfg->output_len < 1))
        return nb_error(NB_ERR_INVALID_ARG, "bench: --input-len and --output-len must be >= 1");
    if (!(cfg->range_ratio >= 0 && cfg->range_ratio <= 1))
        return nb_error(NB_ERR_INVALID_ARG, "bench: --range-ratio must be in [0, 1] (got %g)", cfg->range_ratio);
    nb_bench_prompt *p = calloc((size_t)n, sizeof *p);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: %d prompts", n);
    nb_status s = cfg->random ? nb_make_random(cfg, n, seed, p) : nb_make_sharegpt(cfg, n, seed, p);
    if (s != NB_OK) {
        nb_bench_dataset_free(p, n);
        return s;
    }
    *out = p;
    return NB_OK;
}

/* Benchmark workloads (tools/bench/dataset.h). Exercised by: nibble bench --help. */
#include "tools/bench/dataset.h"
#include "base/error.h"
#include "base/json.h"
#include "tokenizer/tokenizer.h"

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

/* Ids whose text stands alone: not special, non-empty, no U+FFFD (so not a fragment of a
 * multi-byte character). Drawing prompts from these keeps every decode exact. */
static nb_status nb_safe_ids(const nb_tokenizer *tok, int32_t **out, int *n)
{
    int v = nb_tokenizer_vocab_size(tok), k = 0;
    int32_t *ids = malloc(((size_t)v + 1) * sizeof *ids);
    if (!ids) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: vocabulary of %d", v);
    for (int32_t id = 0; id < v; id++) {
        char *t = NULL;
        size_t tl = 0;
        if (nb_tokenizer_is_special(tok, id) || nb_tokenizer_decode(tok, &id, 1, 1, &t, &tl) != NB_OK) {
            nb_error_clear();
            continue;
        }
        if (tl > 0 && !memmem(t, tl, "\xef\xbf\xbd", 3) && strlen(t) == tl) ids[k++] = id;
        free(t);
    }
    if (k == 0) {
        free(ids);
        return nb_error(NB_ERR_FORMAT, "bench: the tokenizer has no token that decodes to text on its own");
    }
    *out = ids;
    *n = k;
    return NB_OK;
}

/* Text that the tokenizer encodes to exactly `len` tokens: draw safe ids, decode,
 * re-encode (merges change the count), then trim or top up with fresh draws and repeat. */
static nb_status nb_exact_text(const nb_tokenizer *tok, const int32_t *safe, int n_safe, uint64_t *rng, int len,
                               char **out)
{
    int32_t *ids = malloc(((size_t)len + 1) * sizeof *ids);
    if (!ids) return nb_error(NB_ERR_OUT_OF_MEMORY, "bench: prompt of %d ids", len);
    for (int attempt = 0; attempt < 16; attempt++) {
        int n = 0;
        while (n < len) ids[n++] = safe[nb_bench_rng(rng) % (uint64_t)n_safe];
        for (int round = 0; round < 8; round++) {
            char *text = NULL;
            size_t tl = 0, m = 0;
            int32_t *re = NULL;
            if (nb_tokenizer_decode(tok, ids, (size_t)n, 1, &text, &tl) != NB_OK ||
                nb_tokenizer_encode(tok, text, tl, 0, &re, &m) != NB_OK) {
                free(text);
                nb_error_clear();
                break;
            }
            if ((int)m == len && strlen(text) == tl && !memmem(text, tl, "\xef\xbf\xbd", 3)) {
                free(re);
                free(ids);
                *out = text;
                return NB_OK;
            }
            free(text);
            n = (int)m < len ? (int)m : len;
            memcpy(ids, re, (size_t)n * sizeof *ids);
            free(re);
            while (n < len) ids[n++] = safe[nb_bench_rng(rng) % (uint64_t)n_safe];
        }
    }
    free(ids);
    return nb_error(NB_ERR_INTERNAL, "bench: no text of exactly %d tokens found in 16 draws", len);
}

static nb_status nb_make_random(const nb_bench_dataset_cfg *cfg, int n, uint64_t seed, nb_bench_prompt *p)
{
    uint64_t rng = seed * 0x2545f4914f6cdd1dULL + 1;
    int vocab = cfg->vocab_size > 0 ? cfg->vocab_size : 256;
    int32_t *safe = NULL;
    int n_safe = 0;
    if (cfg->tok) NB_TRY(nb_safe_ids(cfg->tok, &safe, &n_safe));
    nb_status st = NB_OK;
    for (int i = 0; i < n; i++) {
        int in = nb_bench_draw_len(&rng, cfg->input_len, cfg->range_ratio);
        p[i].output_len = nb_bench_draw_len(&rng, cfg->output_len, cfg->range_ratio);
        p[i].prompt_len = in;
        if (cfg->tok) {
            if ((st = nb_exact_text(cfg->tok, safe, n_safe, &rng, in, &p[i].text)) != NB_OK) break;
        } else if (cfg->as_text) {
            p[i].text = malloc((size_t)in + 1);
            if (!p[i].text) {
                st = nb_error(NB_ERR_OUT_OF_MEMORY, "bench: prompt of %d bytes", in);
                break;
            }
            /* Words of 1-8 letters: no two requests share a prefix beyond chance. */
            for (int k = 0; k < in; k++) {
                int r = (int)(nb_bench_rng(&rng) % 32);
                p[i].text[k] = (k > 0 && r >= 26 && p[i].text[k - 1] != ' ') ? ' ' : (char)('a' + r % 26);
            }
            p[i].text[in] = 0;
        } else {
            p[i].ids = malloc((size_t)in * sizeof(int));
            if (!p[i].ids) {
                st = nb_error(NB_ERR_OUT_OF_MEMORY, "bench: prompt of %d ids", in);
                break;
            }
            for (int k = 0; k < in; k++) p[i].ids[k] = (int)(nb_bench_rng(&rng) % (uint64_t)vocab);
            p[i].n_ids = in;
        }
    }
    free(safe);
    return st;
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
        if (cfg->tok) {
            int32_t *ids;
            size_t m;
            if (nb_tokenizer_encode(cfg->tok, a->valuestring, strlen(a->valuestring), 0, &ids, &m) == NB_OK)
                pl = (int)m, free(ids);
            if (nb_tokenizer_encode(cfg->tok, b->valuestring, strlen(b->valuestring), 0, &ids, &m) == NB_OK)
                rl = (int)m, free(ids);
            nb_error_clear();
        }
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

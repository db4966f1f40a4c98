/* nibble generate --model DIR --ids 5,17,42 --max-tokens N --temperature 0 [--ignore-eos]
 *                 [--print-ids] [--backend cpu] [--threads N]
 * Greedy continuation with a KV cache: one prefill step, then one decode step per token,
 * stopping at an eos id (printed, as HF includes it) unless --ignore-eos. With --print-ids the
 * last line of stdout is the generated ids, comma-separated. The engine will take over this
 * command later with the same flags; this is the direct path over nb_forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "model/model.h"
#include "model_cli.h"
#include "nibble.h"

const char nb_cmd_generate_summary[] = "greedy continuation of a token sequence";

static int usage(void)
{
    fprintf(stderr, "usage: nibble generate --model DIR --ids 5,17,42 --max-tokens N --temperature 0 [--ignore-eos] "
                    "[--print-ids] [--backend cpu] [--threads N]\n");
    return 2;
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) b = v[i] > v[b] ? i : b;
    return b;
}

int nb_cmd_generate(int argc, char **argv)
{
    const char *model_dir = NULL, *ids_s = NULL, *backend = NULL;
    int max_tokens = 16, ignore_eos = 0, print_ids = 0, threads = 0;
    double temperature = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = 1; continue; }
        if (!strcmp(a, "--print-ids")) { print_ids = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage() - 2;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--ids")) ids_s = v;
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(a, "--temperature")) temperature = atof(v);
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else return usage();
        i++;
    }
    if (!model_dir || !ids_s || max_tokens < 0 || nb_cli_check_backend(backend)) return usage();
    if (temperature != 0) {
        fprintf(stderr, "nibble generate: only greedy decoding (--temperature 0) is implemented on this path\n");
        return 2;
    }
    int32_t *ids;
    int n;
    if (nb_cli_parse_ids(ids_s, &ids, &n)) return 2;
    int total = n + max_tokens;
    int32_t *seq = malloc((size_t)total * sizeof *seq), *slots = malloc((size_t)total * sizeof *slots);
    nb_model_params p = nb_model_default_params();
    p.n_threads = threads;
    nb_model *m = NULL;
    nb_kv_pool pool = {0};
    float *logits = NULL;
    int produced = 0, rc = 1;
    nb_status s = seq && slots ? nb_model_load(model_dir, &p, &m) : NB_ERR_OUT_OF_MEMORY;
    if (s == NB_OK) s = nb_kv_pool_init(&pool, &m->cfg, total > 0 ? total : 1);
    if (s == NB_OK && !(logits = malloc((size_t)m->cfg.vocab_size * sizeof(float)))) s = NB_ERR_OUT_OF_MEMORY;
    if (s == NB_OK) {
        memcpy(seq, ids, (size_t)n * sizeof *seq);
        for (int i = 0; i < total; i++) slots[i] = i;
        int len = n, start = 0;
        while (s == NB_OK && produced < max_tokens) {
            nb_seq_step st = {seq + start, len - start, start, slots, 0};
            nb_batch b = {1, &st};
            s = nb_forward(m, &pool, &b, logits);
            if (s != NB_OK) break;
            int tok = argmax(logits, m->cfg.vocab_size);
            seq[len] = tok;
            start = len++;
            produced++;
            int eos = 0;
            for (int e = 0; e < m->cfg.n_eos; e++) eos |= tok == m->cfg.eos_ids[e];
            if (eos && !ignore_eos) break;
        }
    }
    if (s == NB_OK) {
        rc = 0;
        if (print_ids) {
            for (int i = 0; i < produced; i++) printf("%s%d", i ? "," : "", seq[n + i]);
            printf("\n");
        }
    } else {
        fprintf(stderr, "nibble generate: %s: %s\n", nb_strerror(s), nb_last_error());
    }
    free(logits);
    free(seq);
    free(slots);
    free(ids);
    nb_kv_pool_free(&pool);
    nb_model_free(m);
    return rc;
}

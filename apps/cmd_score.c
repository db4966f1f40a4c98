/* nibble score --model DIR --ids 5,17,42 --out logits.npy [--backend cpu|cuda] [--threads N]
 *              [--kv-cache-dtype auto|float32|bfloat16]
 * Logits at every position of one sequence, as float32 .npy [n_ids, vocab]: the command the
 * golden checks and other tools drive. One prefill step through nb_forward (on the GPU with
 * --backend cuda: the model's device twin, engine/cuda_runner.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda_runner.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "format/npy.h"
#include "model/model.h"
#include "model/upload.h"
#include "model_cli.h"
#include "nibble.h"

const char nb_cmd_score_summary[] = "logits of every position of a token sequence, as a float32 .npy";

static int usage(void)
{
    fprintf(stderr, "usage: nibble score --model DIR --ids 5,17,42 --out logits.npy [--backend cpu|cuda] [--threads N]\n"
                    "       [--kv-cache-dtype auto|float32|bfloat16] (the KV pool's MLA latent rows)\n"
                    "       [--cuda-graph-max-bs N] [--disable-cuda-graph] (accepted; one prefill pass has no decode step to graph)\n");
    return 2;
}

int nb_cmd_score(int argc, char **argv)
{
    const char *model_dir = NULL, *ids_s = NULL, *out = NULL, *backend = NULL;
    int threads = 0, kv = NB_KV_CACHE_AUTO;
    for (int i = 1, step = 2; i < argc; i += step) { /* every option but --disable-cuda-graph takes a value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        step = 2;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage() - 2;
        /* CUDA graphs serve decode steps; score runs one prefill pass, so the graph flags are
         * accepted (the same command lines as generate/serve) and change nothing */
        if (!strcmp(a, "--disable-cuda-graph")) {
            step = 1;
            continue;
        }
        if (!v) return usage();
        if (!strcmp(a, "--cuda-graph-max-bs")) {
            if (atoi(v) < 1 || atoi(v) > 4096) return usage();
            continue;
        }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--ids")) ids_s = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--kv-cache-dtype")) {
            if ((kv = nb_kv_cache_dtype_parse(v)) < 0) {
                fprintf(stderr, "nibble score: --kv-cache-dtype '%s': auto, float32 (fp32) or bfloat16 (bf16)\n", v);
                return 2;
            }
        } else return usage();
    }
    const int cuda = backend && !strcmp(backend, "cuda");
    if (!model_dir || !ids_s || !out || (!cuda && nb_cli_check_backend(backend))) return usage();
    int32_t *ids;
    int n;
    if (nb_cli_parse_ids(ids_s, &ids, &n)) return 2;
    nb_model_params p = nb_model_default_params();
    p.n_threads = threads;
    nb_model *m = NULL, *host = NULL;
    nb_model_config scfg;
    nb_checkpoint *sck = NULL;
    int owns_cfg = 0;
    nb_kv_pool pool = {0};
    float *logits = NULL;
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    int rc = 1;
    nb_status s = !slots ? NB_ERR_OUT_OF_MEMORY
                  : cuda  ? nb_cuda_model_load(model_dir, 0, &host, &m, &scfg, &sck, &owns_cfg)
                          : nb_model_load(model_dir, &p, &m);
    nb_dtype lat = NB_DTYPE_F32;
    if (s == NB_OK) s = nb_kv_lat_dtype((nb_kv_cache_dtype)kv, &m->cfg, cuda, &lat);
    if (s == NB_OK)
        s = cuda ? nb_kv_pool_init_on(&pool, &m->cfg, lat, n, m->ops) : nb_kv_pool_init(&pool, &m->cfg, lat, n);
    if (s == NB_OK) {
        logits = malloc((size_t)n * (size_t)m->cfg.vocab_size * sizeof(float));
        if (!logits) s = NB_ERR_OUT_OF_MEMORY;
    }
    if (s == NB_OK) {
        for (int i = 0; i < n; i++) slots[i] = i;
        nb_seq_step seq = {ids, n, 0, slots, 1};
        nb_batch b = {1, &seq};
        s = nb_forward(m, &pool, &b, logits);
    }
    if (s == NB_OK) s = nb_npy_write_f32(out, logits, 2, (int64_t[]){n, m->cfg.vocab_size});
    if (s == NB_OK)
        rc = 0;
    else
        fprintf(stderr, "nibble score: %s: %s\n", nb_strerror(s), nb_last_error());
    free(logits);
    free(slots);
    free(ids);
    if (cuda) {
        if (m) nb_kv_pool_free_on(&pool, m->ops);
        nb_model_upload_free(m);
        nb_model_free(host);
        if (owns_cfg) {
            nb_checkpoint_close(sck);
            nb_model_config_free(&scfg);
        }
    } else {
        nb_kv_pool_free(&pool);
        nb_model_free(m);
    }
    return rc;
}

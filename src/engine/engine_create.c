/* nb_engine_create: resolve the model spec into a runner, a tokenizer and a chat
 * template, pick the memory budget, then hand over to nb_engine_create_from_parts
 * (engine.c). Kept apart so tests over a fake runner do not link the model code.
 * Exercised by nibble generate / bench-offline and tests/engine/test_engine_cpu.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/cuda_runner.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

static double nb_phys_mem_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
    return pages > 0 && ps > 0 ? (double)pages * (double)ps : 8.0 * 1073741824.0;
}

static int nb_file_exists(const char *dir, const char *name)
{
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

nb_status nb_engine_create(const nb_engine_params *p, nb_engine **out)
{
    *out = NULL;
    if (!p || !p->model || !p->model[0]) return nb_error(NB_ERR_INVALID_ARG, "--model: required");
    if (p->cpu_mem_gb < 0) return nb_error(NB_ERR_INVALID_ARG, "--cpu-mem-gb %g: must be >= 0", p->cpu_mem_gb);
    nb_engine_parts parts;
    memset(&parts, 0, sizeof parts);
    parts.mem_budget_bytes = p->cpu_mem_gb > 0 ? p->cpu_mem_gb * 1073741824.0 : nb_phys_mem_bytes() / 2;
    double frac = p->mem_fraction_static > 0 && p->mem_fraction_static <= 1 ? p->mem_fraction_static : 1.0;
    if (p->backend == NB_BACKEND_CUDA) { /* weights and KV on the GPU (engine/cuda_runner.h) */
        nb_cuda_runner_opts co = {p->device, p->cuda_graph_max_bs, p->disable_cuda_graph, p->kv_cache_dtype};
        NB_TRY(nb_cuda_runner_create(p->model, &co, frac, &parts.runner, &parts.mem_budget_bytes));
    } else {
        if (p->cuda_graph_max_bs || p->disable_cuda_graph)
            NB_LOG_DEBUG("engine", "--cuda-graph-max-bs / --disable-cuda-graph: ignored on the CPU backend");
        NB_TRY(nb_model_runner_create(p->model, p->threads, p->kv_cache_dtype, parts.mem_budget_bytes * frac,
                                      &parts.runner));
    }
    const char *base = strrchr(p->model, '/');
    snprintf(parts.model_name, sizeof parts.model_name, "%s", nb_synthetic_is(p->model) || !base || !base[1] ? p->model : base + 1);

    nb_status st = NB_OK;
    const char *tokdir = p->tokenizer ? p->tokenizer : nb_synthetic_is(p->model) ? NULL : p->model;
    if (tokdir) {
        if (p->tokenizer || nb_file_exists(tokdir, "tokenizer.json")) {
            st = nb_tokenizer_load(tokdir, &parts.tokenizer);
            if (st != NB_OK) st = nb_error_wrap(st, "tokenizer");
        } else {
            NB_LOG_WARN("engine", "%s has no tokenizer.json: token ids only (no text, no stop strings)", tokdir);
        }
    } else if (nb_synthetic_has_builtin_tokenizer(p->model)) {
        size_t n;
        const char *const *sp = nb_synthetic_specials(&n);
        st = nb_tokenizer_builtin_bytes(sp, n, &parts.tokenizer);
        if (st == NB_OK && !(parts.chat_template = strdup(nb_synthetic_chat_template())))
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "chat template");
    }
    if (st == NB_OK && parts.tokenizer && !parts.chat_template) {
        const char *t = nb_tokenizer_chat_template(parts.tokenizer, NULL);
        if (t && !(parts.chat_template = strdup(t))) st = nb_error(NB_ERR_OUT_OF_MEMORY, "chat template");
    }
    if (st == NB_OK && parts.tokenizer) {
        /* stop ids: the config's eos ids plus the tokenizer's (generation_config.json) */
        nb_runner *r = parts.runner;
        const int32_t *ids;
        size_t n = nb_tokenizer_eos_ids(parts.tokenizer, &ids);
        for (size_t i = 0; i < n; i++) {
            int dup = 0;
            for (int j = 0; j < r->n_eos; j++) dup |= r->eos_ids[j] == ids[i];
            if (!dup && r->n_eos < 8 && ids[i] < r->vocab_size) r->eos_ids[r->n_eos++] = ids[i];
        }
    }
    if (st != NB_OK) {
        parts.runner->destroy(parts.runner);
        if (parts.tokenizer) nb_tokenizer_free(parts.tokenizer);
        free(parts.chat_template);
        return st;
    }
    return nb_engine_create_from_parts(p, &parts, out);
}

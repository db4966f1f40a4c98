/* `nibble quantize IN_DIR OUT_DIR [--exclude GLOB]... [--all-linear]`: a BF16/F16/F32 HF
 * checkpoint -> ModelOpt-layout NVFP4 checkpoint (routed experts by default). What is and
 * is never quantized, and the output layout: src/format/quantize.h.
 * Try: build/nibble quantize tests/fixtures/qwen3_moe /tmp/qwen3_nvfp4 && build/nibble inspect /tmp/qwen3_nvfp4 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/quantize.h"

const char nb_cmd_quantize_summary[] = "convert a BF16 checkpoint to NVFP4 (ModelOpt layout)";

static void nb_quantize_usage(FILE *f)
{
    fprintf(f, "usage: nibble quantize IN_DIR OUT_DIR [--exclude GLOB]... [--all-linear]\n"
               "                      [--no-share-gate-up] [--shard-size GIB] [--threads N]\n\n"
               "  --exclude GLOB       leave modules matching GLOB (fnmatch, e.g. 'model.layers.0.*') unquantized\n"
               "  --all-linear         also quantize attention projections, shared experts and dense MLPs\n"
               "                       (router, norms, embeddings, lm_head and the DSA indexer never are)\n"
               "  --no-share-gate-up   give gate and up of one MLP their own weight_scale_2\n"
               "  --shard-size GIB     largest output shard (default 4)\n"
               "  --threads N          quantizing threads (default: online CPUs, at most 16)\n");
}

int nb_cmd_quantize(int argc, char **argv)
{
    nb_quantize_params p = nb_quantize_default_params();
    const char *in = NULL, *out = NULL;
    const char **ex = calloc((size_t)argc + 1, sizeof *ex);
    int nex = 0;
    if (!ex) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            nb_quantize_usage(stdout);
            free(ex);
            return 0;
        } else if (!strcmp(a, "--exclude") && i + 1 < argc) {
            ex[nex++] = argv[++i];
        } else if (!strcmp(a, "--all-linear")) {
            p.all_linear = 1;
        } else if (!strcmp(a, "--no-share-gate-up")) {
            p.share_gate_up = 0;
        } else if (!strcmp(a, "--shard-size") && i + 1 < argc) {
            double g = atof(argv[++i]);
            if (!(g > 0)) {
                fprintf(stderr, "nibble quantize: --shard-size must be a positive number of GiB\n");
                free(ex);
                return 2;
            }
            p.shard_bytes = (uint64_t)(g * (double)(1ull << 30));
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            p.threads = atoi(argv[++i]);
            if (p.threads < 1) {
                fprintf(stderr, "nibble quantize: --threads must be at least 1\n");
                free(ex);
                return 2;
            }
        } else if (a[0] != '-' && !in) {
            in = a;
        } else if (a[0] != '-' && !out) {
            out = a;
        } else {
            nb_quantize_usage(stderr);
            free(ex);
            return 2;
        }
    }
    if (!in || !out) {
        nb_quantize_usage(stderr);
        free(ex);
        return 2;
    }
    p.exclude = ex;
    p.n_exclude = nex;
    nb_status s = nb_quantize_checkpoint(in, out, &p);
    free(ex);
    if (s != NB_OK) {
        fprintf(stderr, "nibble quantize: %s\n", nb_last_error());
        return 1;
    }
    printf("wrote %s\n", out);
    return 0;
}

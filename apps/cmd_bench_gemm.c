/* nibble bench-gemm: one dense NVFP4 expert FFN at GLM-5's shapes for M = 1..8192 tokens,
 * TFLOP/s and % of the floor, beside cuBLASLt BF16 (tools/lab/moe_bench.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble.h"
#if NIBBLE_HAVE_CUDA
#include "tools/lab/moe_bench.h"
#endif

const char nb_cmd_bench_gemm_summary[] = "time one NVFP4 expert's GEMMs for M = 1..8192 vs floor and cuBLASLt BF16";

int nb_cmd_bench_gemm(int argc, char **argv)
{
#if NIBBLE_HAVE_CUDA
    nb_bench_gemm_params p = nb_bench_gemm_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: nibble bench-gemm [--hidden 6144] [--inter 2048] [--iters 30] [--json F]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench-gemm: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--hidden")) p.hidden = atoi(v);
        else if (!strcmp(a, "--inter")) p.inter = atoi(v);
        else if (!strcmp(a, "--iters")) p.iters = atoi(v);
        else if (!strcmp(a, "--json")) p.json = v;
        else {
            fprintf(stderr, "bench-gemm: bad argument %s (try --help)\n", a);
            return 2;
        }
    }
    if (nb_bench_gemm_run(&p) != NB_OK) {
        fprintf(stderr, "bench-gemm: %s\n", nb_last_error());
        return 1;
    }
    return 0;
#else
    (void)argc, (void)argv;
    fprintf(stderr, "bench-gemm: this nibble was built without CUDA\n");
    return 1;
#endif
}

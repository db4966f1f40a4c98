/* nibble bench-moe: the NVFP4 routed-expert FFN per token count against the device's
 * measured floor (tools/lab/moe_bench.h). Needs a CUDA build and a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble.h"
#if NIBBLE_HAVE_CUDA
#include "tools/lab/moe_bench.h"
#endif

const char nb_cmd_bench_moe_summary[] = "time the NVFP4 MoE layer per token count vs the copy/matmul floor";

#if NIBBLE_HAVE_CUDA
/* "1,2,10" -> ints; returns the count or -1. */
static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || n == max) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}
#endif

int nb_cmd_bench_moe(int argc, char **argv)
{
#if NIBBLE_HAVE_CUDA
    nb_bench_moe_params p = nb_bench_moe_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: nibble bench-moe [--hidden 6144] [--inter 2048] [--experts 256] [--topk 8]\n"
                   "                        [--tokens 1,2,10,64,256,1024,2048] [--routing uniform|zipf]\n"
                   "                        [--kernel auto|stream|mma|wgmma] [--iters 30] [--weight-sets N] [--json F]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench-moe: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--hidden")) p.hidden = atoi(v);
        else if (!strcmp(a, "--inter")) p.inter = atoi(v);
        else if (!strcmp(a, "--experts")) p.experts = atoi(v);
        else if (!strcmp(a, "--topk")) p.topk = atoi(v);
        else if (!strcmp(a, "--iters")) p.iters = atoi(v);
        else if (!strcmp(a, "--weight-sets")) p.weight_sets = atoi(v);
        else if (!strcmp(a, "--json")) p.json = v;
        else if (!strcmp(a, "--kernel")) p.kernel = v;
        else if (!strcmp(a, "--routing") && (!strcmp(v, "uniform") || !strcmp(v, "zipf"))) p.zipf = !strcmp(v, "zipf");
        else if (!strcmp(a, "--tokens") && (p.n_tokens = parse_list(v, p.tokens, NB_BENCH_MAX_TOKENS)) > 0) continue;
        else {
            fprintf(stderr, "bench-moe: bad argument %s %s (try --help)\n", a, v);
            return 2;
        }
    }
    if (strcmp(p.kernel, "auto") && strcmp(p.kernel, "stream") && strcmp(p.kernel, "mma") && strcmp(p.kernel, "wgmma")) {
        fprintf(stderr, "bench-moe: --kernel %s (auto, stream, mma or wgmma)\n", p.kernel);
        return 2;
    }
    if (nb_bench_moe_run(&p) != NB_OK) {
        fprintf(stderr, "bench-moe: %s\n", nb_last_error());
        return 1;
    }
    return 0;
#else
    (void)argc, (void)argv;
    fprintf(stderr, "bench-moe: this nibble was built without CUDA\n");
    return 1;
#endif
}

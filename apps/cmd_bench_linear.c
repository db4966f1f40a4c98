/* nibble bench-linear: the CUDA linear op on GLM-5's dense shapes (BF16 and NVFP4 weights)
 * at decode token counts (GEMV) and prefill token counts (cuBLASLt), in us, GB/s and TFLOP/s
 * against the measured copy and BF16 ceilings (tools/lab/linear_bench.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble.h"
#if NIBBLE_HAVE_CUDA
#include "tools/lab/linear_bench.h"
#endif

const char nb_cmd_bench_linear_summary[] = "time the CUDA linear op on GLM-5 shapes: GB/s, TFLOP/s, % of ceilings";

#if NIBBLE_HAVE_CUDA
/* "1,2,10" -> list; an empty string or "none" -> no entries. */
static int parse_list(const char *s, int *out, int max, int *n)
{
    *n = 0;
    if (!strcmp(s, "none") || !*s) return 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || *n >= max) return -1;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return 0;
}
#endif

int nb_cmd_bench_linear(int argc, char **argv)
{
#if NIBBLE_HAVE_CUDA
    nb_bench_linear_params p = nb_bench_linear_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: nibble bench-linear [--tokens 1,2,10] [--lt-tokens 512,4096|none] [--ab] [--only S]\n"
                   "                           [--format bf16|nvfp4|all]\n"
                   "                           [--sweep] [--lt-host] [--lt-cold] [--iters 10]\n"
                   "  --tokens  decode token counts 1..64 (GEMV, or the skinny tensor-core GEMM for BF16\n"
                   "            from 3; its rows also time the route before it and three terms)\n"
                   "  --lt-host host time per cuBLASLt call at T = 600..799, algorithms keyed by exact T\n"
                   "            (before) and by T bucket\n"
                   "  --lt-cold eager decode steps at T = 808, 744, 680, 616 on the cuBLASLt shapes, each call\n"
                   "            timed between two events (first use vs cached; NIBBLE_CUDA_GEMM_WARM=0: no warm-up)\n"
                   "  --sweep   also time each forced GEMV K split (1, 2, 4, 8 warps per row group), with and\n"
                   "            without activations staged through shared memory (with --ab: every mmr K split)\n"
                   "  --only S  only the shapes whose name contains S (e.g. lm_head, \"shared mlp\")\n"
                   "  --ab      BF16 decode rows as old (the previous kernels, no PDL) against each new\n"
                   "            variant: vector GEMV v2, mma with one term, mmr (register-fed mma), PDL on/off\n");
            return 0;
        }
        if (!strcmp(a, "--sweep")) {
            p.sweep = 1;
            continue;
        }
        if (!strcmp(a, "--ab")) {
            p.ab = 1;
            continue;
        }
        if (!strcmp(a, "--lt-host")) {
            p.lt_host = 1;
            continue;
        }
        if (!strcmp(a, "--lt-cold")) {
            p.lt_cold = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench-linear: %s needs a value\n", a);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "--tokens")) {
            bad = parse_list(v, p.tokens, NB_BENCH_LINEAR_MAX, &p.n_tokens) != 0;
            for (int j = 0; j < p.n_tokens; j++) bad |= p.tokens[j] > 64;
        } else if (!strcmp(a, "--lt-tokens")) {
            bad = parse_list(v, p.lt_tokens, NB_BENCH_LINEAR_MAX, &p.n_lt_tokens) != 0;
            for (int j = 0; j < p.n_lt_tokens; j++) bad |= p.lt_tokens[j] <= 16 || p.lt_tokens[j] > 16384;
        } else if (!strcmp(a, "--format")) {
            p.bf16 = !strcmp(v, "bf16") || !strcmp(v, "all");
            p.nvfp4 = !strcmp(v, "nvfp4") || !strcmp(v, "all");
            bad = !p.bf16 && !p.nvfp4;
        } else if (!strcmp(a, "--only")) {
            bad = strlen(v) >= sizeof p.only;
            if (!bad) strcpy(p.only, v);
        } else if (!strcmp(a, "--iters")) {
            p.iters = atoi(v);
            bad = p.iters < 1 || p.iters > 64;
        } else {
            fprintf(stderr, "bench-linear: unknown argument %s (try --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "bench-linear: bad value '%s' for %s (tokens 1..64, lt tokens 17..16384, "
                    "iters 1..64)\n", v, a);
            return 2;
        }
    }
    if (nb_bench_linear_run(&p) != NB_OK) {
        fprintf(stderr, "bench-linear: %s\n", nb_last_error());
        return 1;
    }
    return 0;
#else
    (void)argc, (void)argv;
    fprintf(stderr, "bench-linear: this nibble was built without CUDA\n");
    return 1;
#endif
}

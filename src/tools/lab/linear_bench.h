/* Lab timing of the CUDA linear op (nb_op_linear on a CUDA context, ops/cuda/linear.h) on
 * GLM-5's dense shapes: measures the device's copy bandwidth and cuBLASLt BF16 rate first,
 * then for each weight format, shape and token count times the op (the skinny tensor-core
 * GEMM's rows also with the route before it, "mma off", and with three activation terms) (CUDA-graph replay of a
 * batch of calls over rotating weight copies that L2 cannot hold; median over repeats) and
 * prints microseconds, GB/s (weight + activation + output bytes), TFLOP/s and both as % of
 * the measured ceilings. The many-token rows time the cuBLASLt path with one and two BF16
 * activation terms, and for NVFP4 weights the cached BF16 expansion against expansion per
 * call; --lt-cold replays the cuBLASLt calls of eager decode steps and times each call as the
 * per-op profiler does, to show first-use costs (heuristic query, kernel module load). Front end: `nibble bench-linear` (apps/cmd_bench_linear.c). Correctness of the same
 * paths is tests/cuda_ops/test_cuda_linear. */
#ifndef NB_TOOLS_LAB_LINEAR_BENCH_H
#define NB_TOOLS_LAB_LINEAR_BENCH_H

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_BENCH_LINEAR_MAX 16

typedef struct nb_bench_linear_params {
    int tokens[NB_BENCH_LINEAR_MAX]; /* decode token counts, 1..64 (default 1, 2, 10): GEMV, skinny GEMM */
    int n_tokens;
    int lt_tokens[NB_BENCH_LINEAR_MAX]; /* cuBLASLt token counts (default 512, 4096; none: 0 entries) */
    int n_lt_tokens;
    int bf16, nvfp4;                  /* formats to time (default both) */
    int sweep;                        /* also time every forced K split (1, 2, 4, 8) per GEMV point */
    int ab;                           /* BF16 decode rows: old kernels vs each new variant (lb_ab_rows) */
    char only[32];                    /* non-empty: only shapes whose name contains it ("mlp": the MLP rows) */
    int iters;                        /* timed graph replays per point (median) */
    int lt_host;                      /* time the cuBLASLt path's host cost at T = 600..799 (q_a, BF16) */
    int lt_cold;                      /* replay eager steps at T = 808..616 per call, first use vs cached */
} nb_bench_linear_params;

nb_bench_linear_params nb_bench_linear_default_params(void);
nb_status nb_bench_linear_run(const nb_bench_linear_params *p);

#ifdef __cplusplus
}
#endif
#endif

/* Kernel lab harness for the NVFP4 MoE kernels (ops/cuda/moe.h): measures the device's two
 * ceilings first (device-to-device copy bandwidth, cuBLASLt BF16 matmul rate), then times
 * the routed FFN per token count (CUDA-graph replays and plain stream launches, median of
 * >= 20 CUDA-event timings after warm-up, rotating weight sets and routings so L2 cannot
 * hold the experts) and prints achieved GB/s, TFLOP/s, the floor and time / floor.
 * Front ends: `nibble bench-moe`, `nibble bench-gemm` (apps/cmd_bench_*.c). */
#ifndef NB_TOOLS_LAB_MOE_BENCH_H
#define NB_TOOLS_LAB_MOE_BENCH_H

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_BENCH_MAX_TOKENS 32

typedef struct nb_bench_moe_params {
    int hidden, inter, experts, topk;
    int tokens[NB_BENCH_MAX_TOKENS];
    int n_tokens;
    int zipf;            /* 0 uniform routing, 1 Zipf(1.0) expert popularity */
    int iters;           /* timed runs per point (>= 20) */
    int weight_sets;     /* distinct weight copies rotated (0: as many as L2 needs, >= 2) */
    const char *kernel;  /* "auto", "stream" or "mma" */
    const char *json;    /* write the table here too, or NULL */
} nb_bench_moe_params;

nb_bench_moe_params nb_bench_moe_default_params(void);
nb_status nb_bench_moe_run(const nb_bench_moe_params *p);

typedef struct nb_bench_gemm_params {
    int hidden, inter;
    int m[NB_BENCH_MAX_TOKENS];
    int n_m;
    int iters;
    const char *json;
} nb_bench_gemm_params;

nb_bench_gemm_params nb_bench_gemm_default_params(void);
/* One dense NVFP4 expert FFN (gate_up N=2*inter K=hidden, then down N=hidden K=inter) for M
 * tokens on nibble's kernels, beside cuBLASLt BF16 on the same shapes. */
nb_status nb_bench_gemm_run(const nb_bench_gemm_params *p);

/* The two ceilings above, measured now on device 0 (about 4 GiB of device memory for a
 * moment; prints one line): copy bandwidth in GB/s (2 GiB device-to-device, read + write)
 * and the cuBLASLt BF16 matmul rate in TFLOP/s (8192^3), medians of 10 after warm-up.
 * `device` (cap bytes) gets the device description. NB_ERR_CUDA without a GPU. */
nb_status nb_bench_ceilings(double *copy_GBps, double *bf16_TFLOPs, char *device, int cap);

#ifdef __cplusplus
}
#endif
#endif

/* Dense BF16 GEMMs through cuBLASLt, in PyTorch's Linear layout:
 *   C[M,N] = alpha * A[M,K] · W[N,K]^T + beta * C      (all row-major)
 * A and W are BF16; C is BF16 or F32. Algorithms come from cuBLASLt's heuristic, cached
 * per shape with M rounded up to a bucket (nb_cuda_gemm_bucket), so that a token count that
 * changes every step does not query again; an M the bucket's algorithm refuses is queried
 * exactly, once. A shape's first bucket miss warms all its buckets (nb_cuda_gemm_set_warm).
 * Optionally the entry's algorithm is chosen by timing (nb_cuda_gemm_set_tune). cuBLASLt is also the upper bound every hand-written dense kernel is judged
 * against (bench-gemm). Test: tests/cuda_ops/test_gemm_lt.c (label gpu). */
#ifndef NB_OPS_CUDA_GEMM_LT_H
#define NB_OPS_CUDA_GEMM_LT_H

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_cuda_gemm nb_cuda_gemm;

/* workspace_bytes: cuBLASLt scratch (32 MiB is plenty on Hopper). A handle caches
 * algorithms without locking: use one per thread. */
nb_status nb_cuda_gemm_create(nb_cuda_gemm **out, size_t workspace_bytes);
void nb_cuda_gemm_destroy(nb_cuda_gemm *g);

/* Leading dimensions in elements (lda >= K, ldw >= K, ldc >= N). stream: a cudaStream_t. */
nb_status nb_cuda_gemm_bf16(nb_cuda_gemm *g, void *stream, int M, int N, int K, const void *A, int lda,
                            const void *W, int ldw, void *C, int ldc, int c_is_f32, float alpha, float beta);

/* M as the algorithm cache keys it: exact up to 16, then rounded up to 64, 128 or 1024. */
int nb_cuda_gemm_bucket(int M);
/* 1: key the cache by exact M (a heuristic query for every new M: the behaviour before
 * buckets, kept for A/B timing); 0: buckets (default). Changing it empties the cache. */
void nb_cuda_gemm_force_exact(nb_cuda_gemm *g, int exact);
/* Heuristic queries issued by this handle so far (tests, bench-linear), and their host time;
 * tuning's own candidate queries are not counted (nb_cuda_gemm_tune_ms includes them). */
long nb_cuda_gemm_queries(const nb_cuda_gemm *g);
double nb_cuda_gemm_query_us(const nb_cuda_gemm *g);
/* Warm-up of a shape on its first bucket miss (M > 16, not capturing): every bucket up to
 * M = 16384 is queried and its algorithm launched once on 16 rows into a handle-owned C, so
 * later bucket changes neither query nor load a kernel module mid-step. on: 1 / 0, or -1 to
 * follow NIBBLE_CUDA_GEMM_WARM (default on; "0" off). Launch count for bench-linear. */
void nb_cuda_gemm_set_warm(nb_cuda_gemm *g, int on);
long nb_cuda_gemm_warm_launches(const nb_cuda_gemm *g);
/* Autotuning (issue 9): the first eager call (stream not capturing) that uses a cache entry
 * times up to 12 heuristic candidates on its own operands at its exact M and keeps the
 * fastest in the entry; the call's result is the chosen algorithm's. Candidates write the
 * caller's C when beta == 0 (it is overwritten by the final launch), a handle-owned buffer
 * otherwise (C over 256 MiB with beta != 0: not tuned). During a capture an entry is used as
 * it stands. on: 1 / 0, or -1 to follow NIBBLE_CUDA_LT_TUNE ("1" on; default off). Entries
 * tuned so far, and the host time spent (queries, launches and waits) for tests and logs. */
void nb_cuda_gemm_set_tune(nb_cuda_gemm *g, int on);
long nb_cuda_gemm_tunes(const nb_cuda_gemm *g);
double nb_cuda_gemm_tune_ms(const nb_cuda_gemm *g);

/* Device buffers the handle owns, found by (key, bytes): BF16 expansions of weights kept as
 * GEMM operands (ops/cuda/linear.h). put takes ownership of `buf` (cudaMalloc'd) or
 * returns an error and leaves it to the caller; all are freed by nb_cuda_gemm_destroy. */
void *nb_cuda_gemm_cache_get(nb_cuda_gemm *g, const void *key, size_t bytes);
nb_status nb_cuda_gemm_cache_put(nb_cuda_gemm *g, const void *key, void *buf, size_t bytes);
size_t nb_cuda_gemm_cache_bytes(const nb_cuda_gemm *g, int *entries);

#ifdef __cplusplus
}
#endif
#endif

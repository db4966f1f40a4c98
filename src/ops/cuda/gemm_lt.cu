// cuBLASLt BF16 GEMM in Linear layout (ops/cuda/gemm_lt.h).
//
// Row-major C[M,N] = A[M,K] W[N,K]^T is, read column-major, C^T[N,M] = W[N,K] A^T: so W is
// cuBLAS's "A" operand transposed (col-major K x N with op T) and A is "B" untransposed
// (col-major K x M). No copies, only the reinterpretation.
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_lt.h"

#define NB_GEMM_CACHE 64

typedef struct {
    int M, N, K, lda, ldw, ldc, c_f32, valid;
    cublasLtMatmulAlgo_t algo;
} nb_gemm_algo_entry;

typedef struct {
    const void *key;
    void *buf;
    size_t bytes;
} nb_gemm_buf_entry;

struct nb_cuda_gemm {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    nb_gemm_algo_entry cache[NB_GEMM_CACHE];
    int next;
    nb_gemm_buf_entry *bufs; /* owned operand buffers (nb_cuda_gemm_cache_*) */
    int n_bufs, cap_bufs;
    size_t buf_bytes;
};

#define NB_LT_TRY(call)                                                                        \
    do {                                                                                       \
        cublasStatus_t nb_ls_ = (call);                                                        \
        if (nb_ls_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            st = nb_error(NB_ERR_CUDA, "%s failed: cuBLAS status %d (%s:%d)", #call,           \
                          (int)nb_ls_, __FILE__, __LINE__);                                    \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

extern "C" nb_status nb_cuda_gemm_create(nb_cuda_gemm **out, size_t workspace_bytes)
{
    *out = NULL;
    nb_cuda_gemm *g = (nb_cuda_gemm *)calloc(1, sizeof *g);
    if (!g) return nb_error(NB_ERR_OUT_OF_MEMORY, "gemm: cannot allocate handle");
    if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return nb_error(NB_ERR_CUDA, "cublasLtCreate failed");
    }
    g->workspace_bytes = workspace_bytes;
    if (workspace_bytes && cudaMalloc(&g->workspace, workspace_bytes) != cudaSuccess) {
        cublasLtDestroy(g->lt);
        free(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "gemm: cannot allocate %zu bytes of workspace", workspace_bytes);
    }
    *out = g;
    return NB_OK;
}

extern "C" void nb_cuda_gemm_destroy(nb_cuda_gemm *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_bufs; i++) cudaFree(g->bufs[i].buf);
    free(g->bufs);
    cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    free(g);
}

extern "C" nb_status nb_cuda_gemm_bf16(nb_cuda_gemm *g, void *stream, int M, int N, int K, const void *A,
                                       int lda, const void *W, int ldw, void *C, int ldc, int c_is_f32,
                                       float alpha, float beta)
{
    if (M <= 0 || N <= 0 || K <= 0 || lda < K || ldw < K || ldc < N)
        return nb_error(NB_ERR_INVALID_ARG, "gemm: bad shape M=%d N=%d K=%d lda=%d ldw=%d ldc=%d", M, N, K,
                        lda, ldw, ldc);
    nb_status st = NB_OK;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t lw = NULL, la = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cudaDataType_t ct = c_is_f32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    nb_gemm_algo_entry *hit = NULL;

    NB_LT_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    NB_LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    NB_LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16BF, K, N, ldw)); // W^T viewed col-major K x N
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, M, lda)); // A^T viewed col-major K x M
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&lc, ct, N, M, ldc));

    for (int i = 0; i < NB_GEMM_CACHE; i++) {
        nb_gemm_algo_entry *e = &g->cache[i];
        if (e->valid && e->M == M && e->N == N && e->K == K && e->lda == lda && e->ldw == ldw &&
            e->ldc == ldc && e->c_f32 == c_is_f32) {
            hit = e;
            break;
        }
    }
    if (!hit) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        NB_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
        NB_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &g->workspace_bytes, sizeof g->workspace_bytes));
        NB_LT_TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, desc, lw, la, lc, lc, pref, 1, &res, &found));
        if (!found) {
            st = nb_error(NB_ERR_UNSUPPORTED, "gemm: cuBLASLt has no algorithm for M=%d N=%d K=%d", M, N, K);
            goto done;
        }
        hit = &g->cache[g->next];
        g->next = (g->next + 1) % NB_GEMM_CACHE;
        *hit = (nb_gemm_algo_entry){M, N, K, lda, ldw, ldc, c_is_f32, 1, res.algo};
    }
    NB_LT_TRY(cublasLtMatmul(g->lt, desc, &alpha, W, lw, A, la, &beta, C, lc, C, lc, &hit->algo, g->workspace,
                             g->workspace_bytes, (cudaStream_t)stream));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lw) cublasLtMatrixLayoutDestroy(lw);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

extern "C" void *nb_cuda_gemm_cache_get(nb_cuda_gemm *g, const void *key, size_t bytes)
{
    for (int i = 0; i < g->n_bufs; i++)
        if (g->bufs[i].key == key && g->bufs[i].bytes == bytes) return g->bufs[i].buf;
    return NULL;
}

extern "C" nb_status nb_cuda_gemm_cache_put(nb_cuda_gemm *g, const void *key, void *buf, size_t bytes)
{
    if (g->n_bufs == g->cap_bufs) {
        int cap = g->cap_bufs ? 2 * g->cap_bufs : 64;
        nb_gemm_buf_entry *b = (nb_gemm_buf_entry *)realloc(g->bufs, (size_t)cap * sizeof *b);
        if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "gemm: operand cache table of %d entries", cap);
        g->bufs = b;
        g->cap_bufs = cap;
    }
    g->bufs[g->n_bufs++] = (nb_gemm_buf_entry){key, buf, bytes};
    g->buf_bytes += bytes;
    return NB_OK;
}

extern "C" size_t nb_cuda_gemm_cache_bytes(const nb_cuda_gemm *g, int *entries)
{
    if (entries) *entries = g->n_bufs;
    return g->buf_bytes;
}

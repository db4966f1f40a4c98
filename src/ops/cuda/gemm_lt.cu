// cuBLASLt BF16 GEMM in Linear layout (ops/cuda/gemm_lt.h).
//
// Row-major C[M,N] = A[M,K] W[N,K]^T is, read column-major, C^T[N,M] = W[N,K] A^T: so W is
// cuBLAS's "A" operand transposed (col-major K x N with op T) and A is "B" untransposed
// (col-major K x M). No copies, only the reinterpretation.
//
// Host cost per call: continuous batching changes M (the token count) almost every decode
// step, and cublasLtMatmulAlgoGetHeuristic costs far more host time than the GEMM of a
// skinny weight takes on the GPU, so algorithms are cached by M rounded up to a bucket
// (nb_cuda_gemm_bucket) and the bucket's algorithm runs the exact M. When cuBLASLt refuses it for
// that M, the exact M is queried once and cached as its own entry. Descriptors and layouts
// live in the handle and are only re-pointed per call (attribute sets, no creates).
//
// Warm-up per shape (issue 9): the first call of a cold bucket was measured at ~1 ms or more in
// the per-op profile of an eager decode step (the heuristic query on the host, and CUDA's lazy
// loading of the module of a cuBLAS kernel the process had not launched yet, while the device
// drained its queue). So the first miss of a shape (N, K, strides, C type) queries every bucket
// up to NB_GEMM_WARM_MAX_M at once and launches each bucket's algorithm once on min(M, 16) rows
// of the caller's A into the handle's own C buffer (loads its module; the caller's C is not
// touched). Later bucket changes of that shape then cost a cache lookup. Skipped while a graph
// is being captured (the launches would join the graph); NIBBLE_CUDA_GEMM_WARM=0 turns it off.
// Measured (bench-linear --lt-cold, bench/RESULTS.md): new-bucket steps +14 ms instead of
// +32-41 ms, for ~390 ms once; some first calls per bucket still cost 3-5 ms (not explained:
// perhaps a kernel the real size launches and the 16-row launch does not).
//
// Autotuning (NIBBLE_CUDA_LT_TUNE=1, off by default; nb_cuda_gemm_set_tune): the heuristic's
// first answer is often not the fastest for the large-batch linears (issue 9: 480-540 of the 800
// TFLOP/s cuBLASLt reaches at 8192^3). So the first eager call that uses a cache entry asks for
// up to NB_GEMM_TUNE_ALGOS candidates for the entry's M, times each on the call's own operands
// at the call's exact M (CUDA events: one untimed launch to load the kernel's module, then 1-3
// timed ones queued behind a short spin kernel, so host launch cost does not enter the timing), keeps the fastest in the entry and only then runs the caller's product with it.
// Candidates write the caller's C when beta is 0 (write-only there, and overwritten by the final
// launch) and a handle-owned buffer otherwise; none is timed while the stream is capturing a
// graph (a capture uses the entry as it is: the decode runner's eager step at the graph's batch
// size comes first and tunes it). Every candidate has the handle's one descriptor (F32 compute,
// BF16 operands), so the numerics contract is the heuristic's; only the summation order (tile,
// split-K) differs, and a tuned run may pick another algorithm than an untuned one (timing noise
// can make two processes differ in the last bits).
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_lt.h"

#define NB_GEMM_CACHE 2048 /* ~48 buckets x shapes x C strides: the ring must not evict in a run */
#define NB_GEMM_WARM_MAX_M 16384
#define NB_GEMM_WARM_ROWS 16
#define NB_GEMM_TUNE_ALGOS 12
#define NB_GEMM_TUNE_HOLD_CYCLES 200000LL /* ~100 us at H200 clocks: longer than enqueuing 3 launches */
#define NB_GEMM_TUNE_SCRATCH_MAX ((size_t)256 << 20) /* beta != 0 with a bigger C: left untuned */

typedef struct {
    int M, N, K, lda, ldw, ldc, c_f32, valid;
    int exact; /* M is the exact token count (the bucket's algorithm was refused for it) */
    int tuned; /* 1: the algorithm was timed against the other candidates (or that was tried) */
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
    int used; /* entries ever filled: find scans only these */
    int force_exact; /* nb_cuda_gemm_force_exact: key by exact M (the pre-bucket behaviour) */
    long queries;    /* heuristic queries so far */
    double query_us; /* host time spent in them */
    int warm;        /* -1: NIBBLE_CUDA_GEMM_WARM not read yet; 0 off; 1 on */
    long warm_launches;
    void *warm_c; /* C of the warm-up launches */
    size_t warm_c_bytes;
    int tune;   /* -1: NIBBLE_CUDA_LT_TUNE not read yet; 0 off; 1 on */
    long tunes; /* entries tuned */
    double tune_ms; /* host time spent tuning */
    void *tune_c; /* C of the timed candidates when the caller's C is also an input */
    size_t tune_c_bytes;
    cudaEvent_t ev[2];
    cublasLtMatmulDesc_t desc;      /* compute F32, W transposed: the same for every call */
    cublasLtMatrixLayout_t lw, la, lc[2]; /* re-pointed per call; lc[c_is_f32] */
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
    g->warm = -1;
    g->tune = -1;
    if (workspace_bytes && cudaMalloc(&g->workspace, workspace_bytes) != cudaSuccess) {
        cublasLtDestroy(g->lt);
        free(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "gemm: cannot allocate %zu bytes of workspace", workspace_bytes);
    }
    nb_status st = NB_OK;
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    NB_LT_TRY(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    NB_LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    NB_LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    // Placeholder sizes: every call sets rows, columns and leading dimension.
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&g->lw, CUDA_R_16BF, 1, 1, 1));
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, 1, 1, 1));
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&g->lc[0], CUDA_R_16BF, 1, 1, 1));
    NB_LT_TRY(cublasLtMatrixLayoutCreate(&g->lc[1], CUDA_R_32F, 1, 1, 1));
done:
    if (st != NB_OK) {
        nb_cuda_gemm_destroy(g);
        return st;
    }
    *out = g;
    return NB_OK;
}

extern "C" void nb_cuda_gemm_force_exact(nb_cuda_gemm *g, int exact)
{
    if (g->force_exact != !!exact) {
        for (int i = 0; i < NB_GEMM_CACHE; i++) g->cache[i].valid = 0;
        g->next = g->used = 0;
    }
    g->force_exact = !!exact;
}

extern "C" long nb_cuda_gemm_queries(const nb_cuda_gemm *g) { return g->queries; }

extern "C" double nb_cuda_gemm_query_us(const nb_cuda_gemm *g) { return g->query_us; }

extern "C" long nb_cuda_gemm_warm_launches(const nb_cuda_gemm *g) { return g->warm_launches; }

extern "C" void nb_cuda_gemm_set_warm(nb_cuda_gemm *g, int on) { g->warm = on < 0 ? -1 : !!on; }

extern "C" void nb_cuda_gemm_set_tune(nb_cuda_gemm *g, int on) { g->tune = on < 0 ? -1 : !!on; }

extern "C" long nb_cuda_gemm_tunes(const nb_cuda_gemm *g) { return g->tunes; }

extern "C" double nb_cuda_gemm_tune_ms(const nb_cuda_gemm *g) { return g->tune_ms; }

static int tune_on(nb_cuda_gemm *g)
{
    if (g->tune < 0) {
        const char *e = getenv("NIBBLE_CUDA_LT_TUNE");
        g->tune = e && !strcmp(e, "1");
    }
    return g->tune;
}

static int warm_on(nb_cuda_gemm *g)
{
    if (g->warm < 0) {
        const char *e = getenv("NIBBLE_CUDA_GEMM_WARM");
        g->warm = !(e && !strcmp(e, "0"));
    }
    return g->warm;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

extern "C" int nb_cuda_gemm_bucket(int M)
{
    // Coarse enough that a continuous-batching decode (M drifting by a few tokens a step)
    // stays in one bucket for many steps; fine enough that the tile shape the heuristic
    // picks for the bucket's top still suits its bottom (a factor <= 1.125 from 512 on).
    if (M <= 16) return M;
    if (M <= 512) return (M + 63) / 64 * 64;
    if (M <= 4096) return (M + 127) / 128 * 128;
    return (M + 1023) / 1024 * 1024;
}

static nb_status set_layout(cublasLtMatrixLayout_t l, uint64_t rows, uint64_t cols, int64_t ld)
{
    if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld) != CUBLAS_STATUS_SUCCESS)
        return nb_error(NB_ERR_CUDA, "gemm: cannot set a matrix layout to %llu x %llu (ld %lld)",
                        (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    return NB_OK;
}

extern "C" void nb_cuda_gemm_destroy(nb_cuda_gemm *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_bufs; i++) cudaFree(g->bufs[i].buf);
    free(g->bufs);
    if (g->lc[1]) cublasLtMatrixLayoutDestroy(g->lc[1]);
    if (g->lc[0]) cublasLtMatrixLayoutDestroy(g->lc[0]);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lw) cublasLtMatrixLayoutDestroy(g->lw);
    if (g->desc) cublasLtMatmulDescDestroy(g->desc);
    cudaFree(g->workspace);
    cudaFree(g->warm_c);
    cudaFree(g->tune_c);
    if (g->ev[0]) cudaEventDestroy(g->ev[0]);
    if (g->ev[1]) cudaEventDestroy(g->ev[1]);
    cublasLtDestroy(g->lt);
    free(g);
}

// The cached entry for (M, N, K, ...) or NULL.
static nb_gemm_algo_entry *find(nb_cuda_gemm *g, int M, int exact, int N, int K, int lda, int ldw, int ldc, int c_f32)
{
    for (int i = 0; i < g->used; i++) {
        nb_gemm_algo_entry *e = &g->cache[i];
        if (e->valid && e->N == N && e->K == K && e->M == M && e->exact == exact && e->lda == lda &&
            e->ldw == ldw && e->ldc == ldc && e->c_f32 == c_f32)
            return e;
    }
    return NULL;
}

// Asks the heuristic for the layouts currently set (rows = Mq) and caches the answer.
static nb_status query(nb_cuda_gemm *g, int Mq, int exact, int N, int K, int lda, int ldw, int ldc, int c_f32,
                       nb_gemm_algo_entry **out)
{
    nb_status st = NB_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasLtMatrixLayout_t lc = g->lc[c_f32 ? 1 : 0];
    NB_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    NB_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->workspace_bytes,
                                                   sizeof g->workspace_bytes));
    {
        const double t0 = now_us();
        cublasStatus_t r = cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->lw, g->la, lc, lc, pref, 1, &res, &found);
        g->query_us += now_us() - t0;
        NB_LT_TRY(r);
    }
    g->queries++;
    if (!found) {
        st = nb_error(NB_ERR_UNSUPPORTED, "gemm: cuBLASLt has no algorithm for M=%d N=%d K=%d", Mq, N, K);
        goto done;
    }
    *out = &g->cache[g->next];
    if (g->next >= g->used) g->used = g->next + 1;
    g->next = (g->next + 1) % NB_GEMM_CACHE;
    **out = (nb_gemm_algo_entry){Mq, N, K, lda, ldw, ldc, c_f32, 1, exact, 0, res.algo};
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

// The warm-up of a shape's first miss (file comment). Errors are not the caller's: a bucket
// whose query or launch fails is left to the ordinary path, which reports its own failure.
static void warm_shape(nb_cuda_gemm *g, cudaStream_t stream, int M, int N, int K, const void *A, int lda,
                       const void *W, int ldw, int ldc, int cf)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return;
    }
    const int rows = M < NB_GEMM_WARM_ROWS ? M : NB_GEMM_WARM_ROWS;
    const size_t cb = (size_t)rows * (size_t)ldc * (cf ? 4 : 2);
    if (g->warm_c_bytes < cb) {
        void *p = NULL;
        cudaStreamSynchronize(stream); // the old buffer may still be written by a queued launch
        if (cudaMalloc(&p, cb) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        cudaFree(g->warm_c);
        g->warm_c = p;
        g->warm_c_bytes = cb;
    }
    cublasLtMatrixLayout_t lc = g->lc[cf];
    const float one = 1.0f, zero = 0.0f;
    int prev = 0;
    for (int m = NB_GEMM_WARM_ROWS + 1; m <= NB_GEMM_WARM_MAX_M; m++) {
        const int b = nb_cuda_gemm_bucket(m);
        if (b == prev) continue;
        prev = b;
        nb_gemm_algo_entry *e = find(g, b, 0, N, K, lda, ldw, ldc, cf);
        if (!e) {
            if (set_layout(g->la, (uint64_t)K, (uint64_t)b, lda) != NB_OK ||
                set_layout(lc, (uint64_t)N, (uint64_t)b, ldc) != NB_OK ||
                query(g, b, 0, N, K, lda, ldw, ldc, cf, &e) != NB_OK) {
                nb_error_clear();
                continue;
            }
        }
        if (set_layout(g->la, (uint64_t)K, (uint64_t)rows, lda) != NB_OK ||
            set_layout(lc, (uint64_t)N, (uint64_t)rows, ldc) != NB_OK) {
            nb_error_clear();
            continue;
        }
        if (cublasLtMatmul(g->lt, g->desc, &one, W, g->lw, A, g->la, &zero, g->warm_c, lc, g->warm_c, lc, &e->algo,
                           g->workspace, g->workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS)
            g->warm_launches++;
    }
    cudaGetLastError();
}

static int capturing(cudaStream_t stream)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) {
        cudaGetLastError();
        return 1; // unknown: do not risk launching timed work into a capture
    }
    return cs != cudaStreamCaptureStatusNone;
}

// Holds the stream for ~`cycles` clocks, so that the timed launches queue up behind it and run
// back to back: a skinny GEMM takes less device time than its launch takes on the host.
static __global__ void k_tune_hold(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

// Mean device time of `reps` launches of `algo` in ms, or a negative value when cuBLASLt refuses it.
static float time_algo(nb_cuda_gemm *g, cudaStream_t stream, const cublasLtMatmulAlgo_t *algo, int reps,
                       const float *alpha, const void *W, const void *A, const float *beta, void *C,
                       cublasLtMatrixLayout_t lc)
{
    k_tune_hold<<<1, 1, 0, stream>>>(NB_GEMM_TUNE_HOLD_CYCLES);
    if (cudaGetLastError() != cudaSuccess || cudaEventRecord(g->ev[0], stream) != cudaSuccess) return -1.0f;
    for (int r = 0; r < reps; r++)
        if (cublasLtMatmul(g->lt, g->desc, alpha, W, g->lw, A, g->la, beta, C, lc, C, lc, algo, g->workspace,
                           g->workspace_bytes, stream) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
    float ms = -1.0f;
    if (cudaEventRecord(g->ev[1], stream) != cudaSuccess || cudaEventSynchronize(g->ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, g->ev[0], g->ev[1]) != cudaSuccess)
        return -1.0f;
    return ms / (float)reps;
}

#define NB_TUNE_TRY(call)                                                                      \
    do {                                                                                       \
        if ((st = (call)) != NB_OK) goto done;                                                 \
    } while (0)

// The tuning of entry e at the call's exact M (file comment). Leaves g->la and the C layout set
// for M. A candidate cuBLASLt refuses is skipped; when none can be timed the entry keeps the
// heuristic's answer. Marks e tuned either way, so that a shape is timed once.
static nb_status tune_entry(nb_cuda_gemm *g, cudaStream_t stream, nb_gemm_algo_entry *e, int M, int N, int K,
                            const void *A, const void *W, void *C, int ldc, int cf, float alpha, float beta)
{
    const double t0 = now_us();
    cublasLtMatrixLayout_t lc = g->lc[cf];
    void *dst = C;
    if (beta != 0.0f) {
        const size_t cb = (size_t)M * (size_t)ldc * (cf ? 4 : 2);
        if (cb > NB_GEMM_TUNE_SCRATCH_MAX) return NB_OK; // left untuned: a later beta = 0 call may tune it
        if (g->tune_c_bytes < cb) {
            void *p = NULL;
            cudaStreamSynchronize(stream);
            if (cudaMalloc(&p, cb) != cudaSuccess) {
                cudaGetLastError();
                return NB_OK;
            }
            cudaFree(g->tune_c);
            g->tune_c = p;
            g->tune_c_bytes = cb;
        }
        dst = g->tune_c;
    }
    for (int i = 0; i < 2; i++)
        if (!g->ev[i] && cudaEventCreate(&g->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            return NB_OK;
        }
    e->tuned = 1;
    nb_status st = NB_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[NB_GEMM_TUNE_ALGOS];
    int found = 0, best = -1;
    float best_ms = 0.0f, first_ms = -1.0f;
    NB_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    NB_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->workspace_bytes,
                                                   sizeof g->workspace_bytes));
    // Candidates for the entry's M (the bucket's top), as the heuristic answered the entry.
    NB_TUNE_TRY(set_layout(g->la, (uint64_t)K, (uint64_t)e->M, e->lda));
    NB_TUNE_TRY(set_layout(lc, (uint64_t)N, (uint64_t)e->M, ldc));
    {
        // Not counted in g->queries: that counts the step path's queries (tests bound it).
        cublasStatus_t r = cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->lw, g->la, lc, lc, pref,
                                                          NB_GEMM_TUNE_ALGOS, res, &found);
        NB_LT_TRY(r);
    }
    NB_TUNE_TRY(set_layout(g->la, (uint64_t)K, (uint64_t)M, e->lda));
    NB_TUNE_TRY(set_layout(lc, (uint64_t)N, (uint64_t)M, ldc));
    for (int i = 0; i < found; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > g->workspace_bytes) continue;
        // An untimed launch first: the kernel's module loads on its first launch.
        if (time_algo(g, stream, &res[i].algo, 1, &alpha, W, A, &beta, dst, lc) < 0.0f) {
            cudaGetLastError();
            continue;
        }
        float ms = time_algo(g, stream, &res[i].algo, 1, &alpha, W, A, &beta, dst, lc);
        if (ms >= 0.0f && ms < 1.0f) ms = time_algo(g, stream, &res[i].algo, 3, &alpha, W, A, &beta, dst, lc);
        if (ms < 0.0f) {
            cudaGetLastError();
            continue;
        }
        if (i == 0) first_ms = ms;
        if (best < 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
    if (best >= 0) {
        e->algo = res[best].algo;
        g->tunes++;
        int id = -1, tile = -1, splitk = -1;
        cublasLtMatmulAlgoConfigGetAttribute(&e->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&e->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&e->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, NULL);
        NB_LOG_DEBUG("cuda",
                     "gemm tune: M=%d (entry M=%d%s) N=%d K=%d c_%s: %d candidates, heuristic's first %.1f us, "
                     "chose #%d %.1f us (algo id %d, tile %d, split-k %d)",
                     M, e->M, e->exact ? " exact" : "", N, K, cf ? "f32" : "bf16", found, first_ms * 1e3, best,
                     best_ms * 1e3, id, tile, splitk);
    } else {
        NB_LOG_DEBUG("cuda", "gemm tune: M=%d N=%d K=%d: no candidate could be timed, heuristic's answer kept", M, N, K);
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    g->tune_ms += (now_us() - t0) * 1e-3;
    return st;
}

// Tuning is an optimisation: its failure leaves the heuristic's answer, with a warning.
static void maybe_tune(nb_cuda_gemm *g, cudaStream_t stream, nb_gemm_algo_entry *e, int M, int N, int K,
                       const void *A, const void *W, void *C, int ldc, int cf, float alpha, float beta)
{
    if (tune_entry(g, stream, e, M, N, K, A, W, C, ldc, cf, alpha, beta) != NB_OK) {
        NB_LOG_WARN("cuda", "gemm tune: M=%d N=%d K=%d left to the heuristic: %s", M, N, K, nb_last_error());
        nb_error_clear();
        cudaGetLastError();
    }
}

extern "C" nb_status nb_cuda_gemm_bf16(nb_cuda_gemm *g, void *stream, int M, int N, int K, const void *A,
                                       int lda, const void *W, int ldw, void *C, int ldc, int c_is_f32,
                                       float alpha, float beta)
{
    if (M <= 0 || N <= 0 || K <= 0 || lda < K || ldw < K || ldc < N)
        return nb_error(NB_ERR_INVALID_ARG, "gemm: bad shape M=%d N=%d K=%d lda=%d ldw=%d ldc=%d", M, N, K,
                        lda, ldw, ldc);
    nb_status st = NB_OK;
    const int cf = c_is_f32 ? 1 : 0;
    cublasLtMatrixLayout_t lc = g->lc[cf];
    const int Mb = g->force_exact ? M : nb_cuda_gemm_bucket(M);
    NB_TRY(set_layout(g->lw, (uint64_t)K, (uint64_t)N, ldw)); // W^T viewed col-major K x N
    nb_gemm_algo_entry *hit = find(g, M, 1, N, K, lda, ldw, ldc, cf);
    if (!hit) hit = find(g, Mb, 0, N, K, lda, ldw, ldc, cf);
    if (!hit && !g->force_exact && M > NB_GEMM_WARM_ROWS && warm_on(g)) {
        warm_shape(g, (cudaStream_t)stream, M, N, K, A, lda, W, ldw, ldc, cf);
        hit = find(g, Mb, 0, N, K, lda, ldw, ldc, cf);
    }
    if (!hit) {
        // Query at the bucket's top: layouts sized for Mb (A is only described, not read).
        NB_TRY(set_layout(g->la, (uint64_t)K, (uint64_t)Mb, lda));
        NB_TRY(set_layout(lc, (uint64_t)N, (uint64_t)Mb, ldc));
        NB_TRY(query(g, Mb, Mb == M && g->force_exact, N, K, lda, ldw, ldc, cf, &hit));
    }
    if (!hit->tuned && tune_on(g) && !capturing((cudaStream_t)stream))
        maybe_tune(g, (cudaStream_t)stream, hit, M, N, K, A, W, C, ldc, cf, alpha, beta);
    NB_TRY(set_layout(g->la, (uint64_t)K, (uint64_t)M, lda)); // A^T viewed col-major K x M
    NB_TRY(set_layout(lc, (uint64_t)N, (uint64_t)M, ldc));
    cublasStatus_t r = cublasLtMatmul(g->lt, g->desc, &alpha, W, g->lw, A, g->la, &beta, C, lc, C, lc, &hit->algo,
                                      g->workspace, g->workspace_bytes, (cudaStream_t)stream);
    if (r != CUBLAS_STATUS_SUCCESS && !hit->exact) {
        // The bucket's algorithm does not take this M: ask for the exact M once.
        NB_LOG_DEBUG("cuda", "gemm: bucket M=%d algorithm refused for M=%d N=%d K=%d (status %d): exact query",
                     hit->M, M, N, K, (int)r);
        NB_TRY(query(g, M, 1, N, K, lda, ldw, ldc, cf, &hit));
        if (tune_on(g) && !capturing((cudaStream_t)stream))
            maybe_tune(g, (cudaStream_t)stream, hit, M, N, K, A, W, C, ldc, cf, alpha, beta);
        r = cublasLtMatmul(g->lt, g->desc, &alpha, W, g->lw, A, g->la, &beta, C, lc, C, lc, &hit->algo, g->workspace,
                           g->workspace_bytes, (cudaStream_t)stream);
    }
    if (r != CUBLAS_STATUS_SUCCESS)
        st = nb_error(NB_ERR_CUDA, "gemm: cublasLtMatmul failed for M=%d N=%d K=%d: cuBLAS status %d", M, N, K, (int)r);
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

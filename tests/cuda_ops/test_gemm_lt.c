/* cuBLASLt BF16 GEMM (ops/cuda/gemm_lt.h) against a float64 CPU product on fresh random
 * inputs, outputs poisoned with NaN first (or, accumulating, preset to random values); the
 * second case with autotuning on (nb_cuda_gemm_set_tune), including a call inside a graph
 * capture, which must not tune. Run on the GPU machine: ctest -L gpu, or
 * build/tests/test_gemm_lt [gemm_lt_bf16|gemm_lt_tune]. `test_gemm_lt --bench` times issue 9's
 * large-batch BF16 linears (GLM-5 shapes, F32 out as linear.cu calls them) with the heuristic's
 * first answer and with the tuned choice, one handle each, and prints a row per shape. */
#include <cuda_runtime_api.h>
#include <time.h>

#include "nbtest.h"
#include "format/numerics.h"
#include "ops/cuda/device.h"
#include "ops/cuda/gemm_lt.h"

/* A tolerance for BF16 inputs with F32 accumulation, compared with float64 on the same
 * (already rounded) BF16 inputs: only accumulation order differs. */
#define NB_TOL_GEMM_BF16_F32OUT 1e-5
/* BF16 output adds one rounding (2^-8 relative). */
#define NB_TOL_GEMM_BF16_BF16OUT 5e-3

static uint64_t rng_state;
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* C = A W^T (beta 0) or C0 + A W^T (beta 1) on `stream`; capture: through a CUDA graph of
 * the call, replayed after C was set. */
static void run_case_ex(nb_cuda_gemm *g, cudaStream_t stream, int M, int N, int K, int c_f32, float beta,
                        int capture)
{
    size_t na = (size_t)M * K, nw = (size_t)N * K, nc = (size_t)M * N;
    uint16_t *A = malloc(na * 2), *W = malloc(nw * 2);
    float *C = malloc(nc * 4);
    uint16_t *Cb = malloc(nc * 2);
    double *C0 = calloc(nc, sizeof *C0);
    for (size_t i = 0; i < na; i++) A[i] = nb_f32_to_bf16(frand());
    for (size_t i = 0; i < nw; i++) W[i] = nb_f32_to_bf16(frand());
    void *dA, *dW, *dC;
    NB_CHECK(cudaMalloc(&dA, na * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dW, nw * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dC, nc * 4) == cudaSuccess);
    cudaMemcpy(dA, A, na * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dW, W, nw * 2, cudaMemcpyHostToDevice);
    if (beta != 0.0f) {
        for (size_t i = 0; i < nc; i++) {
            Cb[i] = nb_f32_to_bf16(frand());
            C0[i] = nb_bf16_to_f32(Cb[i]);
            C[i] = (float)C0[i];
        }
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (capture) {
        NB_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        nb_status cs = nb_cuda_gemm_bf16(g, stream, M, N, K, dA, K, dW, K, dC, N, c_f32, 1.0f, beta);
        NB_CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
        NB_CHECK_OK(cs);
        NB_CHECK(graph && cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess);
    }
    if (beta != 0.0f) {
        if (c_f32)
            cudaMemcpy(dC, C, nc * 4, cudaMemcpyHostToDevice);
        else
            cudaMemcpy(dC, Cb, nc * 2, cudaMemcpyHostToDevice);
    } else {
        cudaMemset(dC, 0xff, nc * 4); /* NaN poison: unwritten outputs fail */
    }
    /* the copies and the memset ran on the legacy stream, which a non-blocking one ignores */
    NB_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (capture) {
        NB_CHECK(exec && cudaGraphLaunch(exec, stream) == cudaSuccess);
    } else {
        NB_CHECK_OK(nb_cuda_gemm_bf16(g, stream, M, N, K, dA, K, dW, K, dC, N, c_f32, 1.0f, beta));
    }
    NB_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (c_f32)
        cudaMemcpy(C, dC, nc * 4, cudaMemcpyDeviceToHost);
    else {
        cudaMemcpy(Cb, dC, nc * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < nc; i++) C[i] = nb_bf16_to_f32(Cb[i]);
    }
    double err = 0, ref = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = C0[(size_t)m * N + n];
            for (int k = 0; k < K; k++)
                s += (double)nb_bf16_to_f32(A[(size_t)m * K + k]) * nb_bf16_to_f32(W[(size_t)n * K + k]);
            double d = C[(size_t)m * N + n] - s;
            err += d * d;
            ref += s * s;
        }
    double rel = sqrt(err / ref);
    double tol = c_f32 ? NB_TOL_GEMM_BF16_F32OUT : NB_TOL_GEMM_BF16_BF16OUT;
    NB_CHECK_MSG(rel <= tol, "M=%d N=%d K=%d c_f32=%d beta=%g%s: rel err %.3g > %.3g", M, N, K, c_f32, beta,
                 capture ? " (graph)" : "", rel, tol);
    fprintf(stderr, "  M=%d N=%d K=%d %s beta=%g%s: rel err %.3g\n", M, N, K, c_f32 ? "f32" : "bf16", beta,
            capture ? " (graph)" : "", rel);
    cudaFree(dA);
    cudaFree(dW);
    cudaFree(dC);
    free(A);
    free(W);
    free(C);
    free(Cb);
    free(C0);
}

static void run_case(nb_cuda_gemm *g, int M, int N, int K, int c_f32)
{
    run_case_ex(g, NULL, M, N, K, c_f32, 0.0f, 0);
}

static void test_gemm(void)
{
    if (!nb_cuda_test_require_gpu()) {
        nb_test_skip("no GPU");
        return;
    }
    rng_state = (uint64_t)time(NULL);
    nb_cuda_gemm *g;
    NB_CHECK_OK(nb_cuda_gemm_create(&g, 32u << 20));
    static const int shapes[][3] = {{1, 64, 64}, {3, 200, 136}, {17, 512, 384}, {128, 1024, 768}, {257, 96, 2048}};
    for (size_t i = 0; i < NB_ARRAY_LEN(shapes); i++)
        for (int f = 0; f < 2; f++) run_case(g, shapes[i][0], shapes[i][1], shapes[i][2], f);
    NB_CHECK_STATUS(nb_cuda_gemm_bf16(g, NULL, 0, 8, 8, NULL, 8, NULL, 8, NULL, 8, 1, 1, 0), NB_ERR_INVALID_ARG);
    nb_cuda_gemm_destroy(g);
}

/* Autotuning on: each first eager use of an entry tunes it once (the count proves the timing
 * ran), the results are the reference's, and a call inside a graph capture tunes nothing. */
static void test_gemm_tune(void)
{
    if (!nb_cuda_test_require_gpu()) {
        nb_test_skip("no GPU");
        return;
    }
    rng_state = (uint64_t)time(NULL) ^ 0x5eedULL;
    nb_cuda_gemm *g;
    NB_CHECK_OK(nb_cuda_gemm_create(&g, 32u << 20));
    nb_cuda_gemm_set_tune(g, 1);
    cudaStream_t s;
    NB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    /* beta 0 (candidates write the caller's C), then the same bucket again: no new tuning */
    run_case_ex(g, s, 300, 1536, 1024, 1, 0.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 1, "tunes %ld after the first shape, expected 1", nb_cuda_gemm_tunes(g));
    run_case_ex(g, s, 310, 1536, 1024, 1, 1.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 1, "tunes %ld after the same bucket, expected 1", nb_cuda_gemm_tunes(g));
    /* a new shape first seen accumulating (candidates write the handle's buffer), both C types */
    run_case_ex(g, s, 200, 512, 768, 1, 1.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 2, "tunes %ld, expected 2", nb_cuda_gemm_tunes(g));
    run_case_ex(g, s, 130, 1024, 512, 0, 1.0f, 0);
    run_case_ex(g, s, 130, 1024, 512, 0, 0.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 3, "tunes %ld, expected 3", nb_cuda_gemm_tunes(g));
    /* small exact-M entries (M <= 16) too */
    run_case_ex(g, s, 5, 2048, 256, 0, 0.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 4, "tunes %ld, expected 4", nb_cuda_gemm_tunes(g));
    /* inside a capture: a new shape takes the heuristic's answer, untimed; afterwards the first
     * eager call of that entry tunes it */
    run_case_ex(g, s, 96, 640, 256, 1, 0.0f, 1);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 4, "tunes %ld after a captured call, expected 4", nb_cuda_gemm_tunes(g));
    run_case_ex(g, s, 96, 640, 256, 1, 1.0f, 1);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 4, "tunes %ld after a captured call, expected 4", nb_cuda_gemm_tunes(g));
    run_case_ex(g, s, 96, 640, 256, 1, 0.0f, 0);
    NB_CHECK_MSG(nb_cuda_gemm_tunes(g) == 5, "tunes %ld after the eager call, expected 5", nb_cuda_gemm_tunes(g));
    /* the tuned entry inside a capture again */
    run_case_ex(g, s, 90, 640, 256, 1, 1.0f, 1);
    fprintf(stderr, "  %ld entries tuned in %.1f ms of host time\n", nb_cuda_gemm_tunes(g), nb_cuda_gemm_tune_ms(g));
    /* off again: new shapes are not timed */
    nb_cuda_gemm_set_tune(g, 0);
    run_case_ex(g, s, 64, 768, 512, 1, 0.0f, 0);
    NB_CHECK(nb_cuda_gemm_tunes(g) == 5);
    cudaStreamDestroy(s);
    nb_cuda_gemm_destroy(g);
}

/* Fills n BF16 values on the device with a repeated random block (cheap for 1.9 GB of lm_head). */
static int fill_random(void *d, size_t n)
{
    enum { BLOCK = 1 << 22 };
    static uint16_t *h;
    if (!h) {
        if (!(h = malloc((size_t)BLOCK * 2))) return 0;
        for (size_t i = 0; i < BLOCK; i++) h[i] = nb_f32_to_bf16(frand());
    }
    for (size_t o = 0; o < n; o += BLOCK) {
        size_t c = n - o < BLOCK ? n - o : BLOCK;
        if (cudaMemcpy((uint16_t *)d + o, h, c * 2, cudaMemcpyHostToDevice) != cudaSuccess) return 0;
    }
    return 1;
}

/* Mean ms of `iters` calls through handle g (after one untimed call, which tunes when g does). */
static double bench_ms(nb_cuda_gemm *g, cudaStream_t s, int M, int N, int K, void *A, void *W, void *C, int iters)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double ms = -1;
    if (nb_cuda_gemm_bf16(g, s, M, N, K, A, K, W, K, C, N, 1, 1.0f, 0.0f) == NB_OK) {
        cudaEventRecord(e0, s);
        int ok = 1;
        for (int i = 0; i < iters && ok; i++)
            ok = nb_cuda_gemm_bf16(g, s, M, N, K, A, K, W, K, C, N, 1, 1.0f, 0.0f) == NB_OK;
        cudaEventRecord(e1, s);
        float t = 0;
        if (ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&t, e0, e1) == cudaSuccess)
            ms = t / iters;
    }
    if (ms < 0) fprintf(stderr, "bench: M=%d N=%d K=%d failed: %s\n", M, N, K, nb_last_error());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms;
}

static int bench(void)
{
    if (!nb_cuda_test_require_gpu()) return 77;
    /* issue 9's linears of the 8-layer GLM-5 slice: name, N, K */
    static const struct {
        const char *name;
        int N, K;
    } shapes[] = {{"o_proj", 6144, 16384},        {"q_b_proj", 16384, 2048},   {"q_a+kv_a (concat)", 2784, 6144},
                  {"mlp gate|up", 24576, 6144},   {"mlp down", 6144, 12288},   {"shared gate|up", 4096, 6144},
                  {"shared down", 6144, 2048},    {"lm_head", 154880, 6144}};
    static const int Ms[] = {808, 1000, 1024, 8192};
    rng_state = 42;
    nb_cuda_gemm *g0, *g1;
    if (nb_cuda_gemm_create(&g0, 32u << 20) != NB_OK || nb_cuda_gemm_create(&g1, 32u << 20) != NB_OK) {
        fprintf(stderr, "bench: %s\n", nb_last_error());
        return 1;
    }
    nb_cuda_gemm_set_tune(g0, 0);
    nb_cuda_gemm_set_tune(g1, 1);
    nb_cuda_gemm_set_warm(g0, 0);
    nb_cuda_gemm_set_warm(g1, 0);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    printf("%-18s %6s %6s %6s  %9s %7s  %9s %7s  %7s %8s\n", "shape", "M", "N", "K", "heur_ms", "TFLOP/s", "tuned_ms",
           "TFLOP/s", "speedup", "tune_ms");
    int rc = 0;
    for (size_t i = 0; i < NB_ARRAY_LEN(shapes); i++) {
        const int N = shapes[i].N, K = shapes[i].K;
        void *A = NULL, *W = NULL, *C = NULL;
        const int Mmax = shapes[i].N > 100000 ? 1024 : 8192; /* lm_head runs on the last tokens only */
        if (cudaMalloc(&A, (size_t)Mmax * K * 2) != cudaSuccess || cudaMalloc(&W, (size_t)N * K * 2) != cudaSuccess ||
            cudaMalloc(&C, (size_t)Mmax * N * 4) != cudaSuccess || !fill_random(A, (size_t)Mmax * K) ||
            !fill_random(W, (size_t)N * K)) {
            fprintf(stderr, "bench: cannot set up %s\n", shapes[i].name);
            rc = 1;
        } else {
            cudaDeviceSynchronize(); /* the fills ran on the legacy stream, s does not wait for it */
            for (size_t j = 0; j < NB_ARRAY_LEN(Ms); j++) {
                const int M = Ms[j];
                if (M > Mmax) continue;
                const double flop = 2.0 * M * N * K;
                const int iters = flop > 5e11 ? 5 : 20;
                const double t0 = nb_cuda_gemm_tune_ms(g1);
                const double a = bench_ms(g0, s, M, N, K, A, W, C, iters);
                const double b = bench_ms(g1, s, M, N, K, A, W, C, iters);
                if (a <= 0 || b <= 0) {
                    rc = 1;
                    continue;
                }
                printf("%-18s %6d %6d %6d  %9.4f %7.1f  %9.4f %7.1f  %7.3f %8.1f\n", shapes[i].name, M, N, K, a,
                       flop / a * 1e-9, b, flop / b * 1e-9, a / b, nb_cuda_gemm_tune_ms(g1) - t0);
                fflush(stdout);
            }
        }
        cudaFree(A);
        cudaFree(W);
        cudaFree(C);
    }
    printf("bench: %ld entries tuned, %.1f ms of host time in tuning\n", nb_cuda_gemm_tunes(g1), nb_cuda_gemm_tune_ms(g1));
    cudaStreamDestroy(s);
    nb_cuda_gemm_destroy(g0);
    nb_cuda_gemm_destroy(g1);
    return rc;
}

static const nb_test tests[] = {{"gemm_lt_bf16", test_gemm}, {"gemm_lt_tune", test_gemm_tune}};

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
    return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv);
}

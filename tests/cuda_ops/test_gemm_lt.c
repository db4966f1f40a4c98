/* cuBLASLt BF16 GEMM (ops/cuda/gemm_lt.h) against a float64 CPU product on fresh random
 * inputs, outputs poisoned with NaN first. Run on the GPU machine: ctest -L gpu. */
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

static void run_case(nb_cuda_gemm *g, int M, int N, int K, int c_f32)
{
    size_t na = (size_t)M * K, nw = (size_t)N * K, nc = (size_t)M * N;
    uint16_t *A = malloc(na * 2), *W = malloc(nw * 2);
    float *C = malloc(nc * 4);
    uint16_t *Cb = malloc(nc * 2);
    for (size_t i = 0; i < na; i++) A[i] = nb_f32_to_bf16(frand());
    for (size_t i = 0; i < nw; i++) W[i] = nb_f32_to_bf16(frand());
    void *dA, *dW, *dC;
    NB_CHECK(cudaMalloc(&dA, na * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dW, nw * 2) == cudaSuccess);
    NB_CHECK(cudaMalloc(&dC, nc * 4) == cudaSuccess);
    cudaMemcpy(dA, A, na * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dW, W, nw * 2, cudaMemcpyHostToDevice);
    cudaMemset(dC, 0xff, nc * 4); /* NaN poison: unwritten outputs fail */
    NB_CHECK_OK(nb_cuda_gemm_bf16(g, NULL, M, N, K, dA, K, dW, K, dC, N, c_f32, 1.0f, 0.0f));
    NB_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (c_f32)
        cudaMemcpy(C, dC, nc * 4, cudaMemcpyDeviceToHost);
    else {
        cudaMemcpy(Cb, dC, nc * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < nc; i++) C[i] = nb_bf16_to_f32(Cb[i]);
    }
    double err = 0, ref = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)nb_bf16_to_f32(A[(size_t)m * K + k]) * nb_bf16_to_f32(W[(size_t)n * K + k]);
            double d = C[(size_t)m * N + n] - s;
            err += d * d;
            ref += s * s;
        }
    double rel = sqrt(err / ref);
    double tol = c_f32 ? NB_TOL_GEMM_BF16_F32OUT : NB_TOL_GEMM_BF16_BF16OUT;
    NB_CHECK_MSG(rel <= tol, "M=%d N=%d K=%d c_f32=%d: rel err %.3g > %.3g", M, N, K, c_f32, rel, tol);
    fprintf(stderr, "  M=%d N=%d K=%d %s: rel err %.3g\n", M, N, K, c_f32 ? "f32" : "bf16", rel);
    cudaFree(dA);
    cudaFree(dW);
    cudaFree(dC);
    free(A);
    free(W);
    free(C);
    free(Cb);
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

static const nb_test tests[] = {{"gemm_lt_bf16", test_gemm}};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }

// CUDA device discovery (ops/cuda/device.h).
#include <stdio.h>

#include "base/error.h"
#include "ops/cuda/device.h"

extern "C" int nb_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" nb_status nb_cuda_device_describe(int dev, char *buf, int n)
{
    cudaDeviceProp p;
    NB_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, (size_t)n, "%s, sm_%d%d, %d SMs, %.1f GiB, %zu KiB smem/block opt-in, %d MiB L2",
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30),
             p.sharedMemPerBlockOptin / 1024, p.l2CacheSize >> 20);
    return NB_OK;
}

extern "C" int nb_cuda_test_require_gpu(void)
{
    if (nb_cuda_device_count() > 0) return 1;
    fprintf(stderr, "SKIP: no CUDA device (this test runs on the GPU machine: ctest -L gpu)\n");
    return 0;
}

extern "C" nb_status nb_cuda_mem_info(int dev, size_t *free_bytes, size_t *total_bytes)
{
    NB_CUDA_TRY(cudaSetDevice(dev));
    NB_CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return NB_OK;
}

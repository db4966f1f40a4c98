// How much of the GPU thread-block clusters get (nineteenth session; bench/lab/README.md,
// "cluster_probe.cu"). For cluster sizes 1, 2, 4, 8 (and 16, non-portable) and two block
// shapes (128 threads with 4 blocks per SM; 512 threads with 1 block per SM, held there by its
// shared memory), prints what cudaOccupancyMaxActiveClusters says and what a launch shows:
// every block records its SM (%smid) and the clusters spin until all blocks of the grid have
// arrived (or ~50 ms pass), so a grid larger than what can be resident at once shows up as
// blocks that never met the others. Build and run (sm_90a):
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a bench/lab/cluster_probe.cu -o /tmp/cluster_probe
//   /tmp/cluster_probe
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void probe(int *arrived, int *smid, int *met, int total)
{
    extern __shared__ char pad[];
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        smid[blockIdx.x] = (int)s;
        pad[0] = 1;
        atomicAdd(arrived, 1);
        long long t0 = clock64();
        int ok = 0;
        while (clock64() - t0 < 100000000LL) {  // ~50 ms at ~2 GHz
            if (atomicAdd(arrived, 0) >= total) {
                ok = 1;
                break;
            }
        }
        met[blockIdx.x] = ok;
    }
}

static void run(int cl, int threads, size_t smem, int grid_clusters)
{
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    if (cl > 8) cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cfg.gridDim = dim3(cl * 64);
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &cfg);
    if (e != cudaSuccess) {
        printf("cluster %2d, %3d threads, %6zu B smem: query failed (%s)\n", cl, threads, smem, cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    const int clusters = grid_clusters > 0 ? grid_clusters : n, blocks = clusters * cl;
    int *arrived, *smid, *met;
    cudaMalloc(&arrived, 4);
    cudaMalloc(&smid, 4 * blocks);
    cudaMalloc(&met, 4 * blocks);
    cudaMemset(arrived, 0, 4);
    cfg.gridDim = dim3(blocks);
    e = cudaLaunchKernelEx(&cfg, probe, arrived, smid, met, blocks);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    int *hs = (int *)malloc(4 * blocks), *hm = (int *)malloc(4 * blocks), sms[1024] = {0};
    cudaMemcpy(hs, smid, 4 * blocks, cudaMemcpyDeviceToHost);
    cudaMemcpy(hm, met, 4 * blocks, cudaMemcpyDeviceToHost);
    int nmet = 0, nsm = 0;
    for (int i = 0; i < blocks; i++) {
        nmet += hm[i];
        if (hs[i] >= 0 && hs[i] < 1024 && !sms[hs[i]]++) nsm++;
    }
    printf("cluster %2d, %3d threads, %6zu B smem: query %3d clusters (%4d blocks); launched %3d: %4d of %4d blocks "
           "co-resident, on %3d SMs%s\n",
           cl, threads, smem, n, n * cl, clusters, nmet, blocks, nsm, e == cudaSuccess ? "" : cudaGetErrorString(e));
    free(hs), free(hm);
    cudaFree(arrived), cudaFree(smid), cudaFree(met);
}

int main(void)
{
    int dev = 0, sms = 0;
    cudaDeviceProp pr;
    cudaGetDeviceProperties(&pr, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    printf("%s, %d SMs\n", pr.name, sms);
    const int cls[] = {1, 2, 4, 8, 16};
    for (int i = 0; i < 5; i++) {
        run(cls[i], 128, 48 * 1024, 0);   // 4 blocks per SM (shared memory bound)
        run(cls[i], 512, 120 * 1024, 0);  // 1 block per SM
    }
    // One cluster per SM's worth of slots: do they all fit at once?
    run(4, 128, 48 * 1024, sms);
    run(2, 512, 120 * 1024, sms / 2);
    return 0;
}

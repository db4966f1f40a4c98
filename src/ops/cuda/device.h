/* CUDA device discovery and error checking shared by every CUDA file.
 * Host C code includes this header only in NIBBLE_HAVE_CUDA builds. */
#ifndef NB_OPS_CUDA_DEVICE_H
#define NB_OPS_CUDA_DEVICE_H

#include "nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no GPU (never fails). */
int nb_cuda_device_count(void);

/* Fill a one-line description ("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, 227 KiB smem/block"). */
nb_status nb_cuda_device_describe(int dev, char *buf, int n);

/* Free and total bytes of device memory on `dev` (cudaMemGetInfo). */
nb_status nb_cuda_mem_info(int dev, size_t *free_bytes, size_t *total_bytes);

/* For GPU tests: returns 1 when a device is present; otherwise prints why the test
 * skips and returns 0 (the caller then exits 77). */
int nb_cuda_test_require_gpu(void);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
/* Record a failing CUDA call (with the expression and location) and return NB_ERR_CUDA. */
#define NB_CUDA_TRY(call)                                                                     \
    do {                                                                                      \
        cudaError_t nb_ce_ = (call);                                                          \
        if (nb_ce_ != cudaSuccess)                                                            \
            return nb_error(NB_ERR_CUDA, "%s failed: %s (%s:%d)", #call,                      \
                            cudaGetErrorString(nb_ce_), __FILE__, __LINE__);                  \
    } while (0)
#endif

#endif

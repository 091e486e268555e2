/*
 * Every CUDA runtime and cuBLAS status becomes an osp_error (INTERNAL) that
 * names the call, the file and the line:
 *
 *     err = OSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s));
 *     if (err != NULL)
 *         goto out;
 *
 * Kernel launchers (kernels.h) return cudaGetLastError() right after the
 * launch, so wrapping a launcher checks the launch.
 */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when status is cudaSuccess. A failing status is also cleared from
 * the thread's "last error", so a later cudaGetLastError() after a launch
 * reports that launch and not this call. */
osp_error *cuda_status_error(cudaError_t status, const char *call,
                             const char *file, int line);
/* NULL when status is CUBLAS_STATUS_SUCCESS. */
osp_error *cublas_status_error(cublasStatus_t status, const char *call,
                               const char *file, int line);

#define OSP_CUDA_CHECK(call)                                                   \
    cuda_status_error((call), #call, __FILE__, __LINE__)
#define OSP_CUBLAS_CHECK(call)                                                 \
    cublas_status_error((call), #call, __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

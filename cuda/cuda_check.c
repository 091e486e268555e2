#include "cuda_check.h"

osp_error *cuda_status_error(cudaError_t status, const char *call,
                             const char *file, int line) {
    if (status == cudaSuccess)
        return NULL;
    (void)cudaGetLastError(); /* clears non-sticky errors */
    return osp_error_new(OSP_ERROR_INTERNAL, "%s failed: %s (%s) at %s:%d",
                         call, cudaGetErrorString(status),
                         cudaGetErrorName(status), file, line);
}

osp_error *cublas_status_error(cublasStatus_t status, const char *call,
                               const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS)
        return NULL;
    return osp_error_new(OSP_ERROR_INTERNAL, "%s failed: %s (%d) at %s:%d",
                         call, cublasGetStatusString(status), (int)status, file,
                         line);
}

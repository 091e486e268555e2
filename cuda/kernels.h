/*
 * Launchers for the kernels in kernels_*.cu. Each enqueues its kernel on
 * `stream` and returns cudaGetLastError() (wrap it in OSP_CUDA_CHECK).
 * Arguments were validated by the dispatcher (server/device/device.c); the
 * launchers only handle shapes the dispatcher lets through.
 */
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = a[i] op b[i]; dtype INT32, INT64, FP32 or FP16. Integer
 * overflow wraps; FP16 computes in FP32 and rounds once. */
cudaError_t osp_cuda_launch_binary(cudaStream_t stream, osp_binary_op op,
                                   osp_datatype dtype, const void *a,
                                   const void *b, void *out, size_t n);

cudaError_t osp_cuda_launch_bias_activation(cudaStream_t stream, float *x,
                                            const float *bias, int64_t rows,
                                            int64_t cols, osp_activation act);

cudaError_t osp_cuda_launch_softmax_rows(cudaStream_t stream, const float *x,
                                         float *out, int64_t rows,
                                         int64_t cols);

/* Same rules as the CPU device's cast (server/device/cpu_device.c). */
cudaError_t osp_cuda_launch_cast(cudaStream_t stream, const void *src,
                                 osp_datatype src_dtype, void *dst,
                                 osp_datatype dst_dtype, size_t n);

#ifdef __cplusplus
}
#endif

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
#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = a[i] op b[i]; dtype INT32, INT64, FP32 or FP16. Integer
 * overflow wraps; FP16 computes in FP32 and rounds once. */
cudaError_t cuda_launch_binary(cudaStream_t stream, osp_binary_op op,
                               osp_datatype dtype, const void *a, const void *b,
                               void *out, size_t n);

cudaError_t cuda_launch_bias_activation(cudaStream_t stream, float *x,
                                        const float *bias, int64_t rows,
                                        int64_t cols, osp_activation act);

cudaError_t cuda_launch_softmax_rows(cudaStream_t stream, const float *x,
                                     float *out, int64_t rows, int64_t cols);

/* Same rules as the CPU device's cast (server/device/cpu_device.c). */
cudaError_t cuda_launch_cast(cudaStream_t stream, const void *src,
                             osp_datatype src_dtype, void *dst,
                             osp_datatype dst_dtype, size_t n);

/* The elementwise and data-movement tensor ops of osprey/tensor_ops.h,
 * each with the CPU device's rules (the per-element math is shared:
 * unary_rules.h, binary_rules.h, pad_rules.h). args as the dispatcher
 * validated them (never zero elements); borrowed for the call. Where the
 * contract leaves a choice to devices that cannot report before
 * returning, these take it: gather writes zeros for an index out of
 * range, scatter skips it, and scatter NONE with repeated indices keeps
 * any one update. topk always sorts. */
cudaError_t cuda_launch_unary(cudaStream_t stream, const osp_unary_args *args);
cudaError_t cuda_launch_binary_nd(cudaStream_t stream,
                                  const osp_binary_nd_args *args);
cudaError_t cuda_launch_where(cudaStream_t stream, const osp_where_args *args);
cudaError_t cuda_launch_copy_strided(cudaStream_t stream,
                                     const osp_copy_strided_args *args);
cudaError_t cuda_launch_fill(cudaStream_t stream, const osp_fill_args *args);
cudaError_t cuda_launch_pad(cudaStream_t stream, const osp_pad_args *args);
cudaError_t cuda_launch_gather(cudaStream_t stream,
                               const osp_gather_args *args);
cudaError_t cuda_launch_scatter(cudaStream_t stream,
                                const osp_scatter_args *args);
cudaError_t cuda_launch_topk(cudaStream_t stream, const osp_topk_args *args);
cudaError_t cuda_launch_cumsum(cudaStream_t stream,
                               const osp_cumsum_args *args);

#ifdef __cplusplus
}
#endif

/*
 * Launchers of the neural-network kernels (kernels_gemm.cu, kernels_conv.cu,
 * kernels_pool.cu, kernels_reduce.cu, kernels_norm.cu) behind the CUDA
 * device's tensor-op slots (cuda_gemm.c, cuda_ops_nn.c). Each takes the slot's
 * args (borrowed for the call; the launcher copies what its kernels need by
 * value), already validated by the dispatcher (server/device/tensor_ops*.c, so
 * no zero-element output reaches them), enqueues on `stream` and returns the
 * launch's cudaError_t (wrap it in OSP_CUDA_CHECK). Each matches the CPU
 * device's slot (server/device/cpu_ops_*.c) up to float rounding.
 */
#pragma once

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gemm_ex's epilogue on C after the GEMM: C_b = act(C_b + bias[col] +
 * residual_b), FP32 or FP16 C (computed in FP32). */
cudaError_t cuda_launch_gemm_epilogue(cudaStream_t stream,
                                      const osp_gemm_ex_args *args);

/* conv as an implicit GEMM (any groups, strides, pads, dilations), or the
 * depthwise kernel (in_channels == group > 1), epilogue fused. */
cudaError_t cuda_launch_conv(cudaStream_t stream, const osp_conv_args *a);

/* The im2col matrix of conv a's images [b0, b0 + nb) and output
 * positions [p0, p0 + np) into col: col[img][group][k][p], k over the
 * group's input channels x taps (channel-major, as w's rows), np
 * positions a row; FP16 (rounded to nearest even) when fp16, else FP32;
 * zeros where a tap falls in the padding. col (device memory of nb *
 * in_channels * taps * np elements) is the caller's. */
cudaError_t cuda_launch_conv_im2col(cudaStream_t stream, const osp_conv_args *a,
                                    int64_t b0, int64_t nb, int64_t p0,
                                    int64_t np, bool fp16, void *col);

/* conv's epilogue alone, on y already holding the convolution (the
 * cuBLAS routes: pointwise, im2col). */
cudaError_t cuda_launch_conv_epilogue(cudaStream_t stream,
                                      const osp_conv_args *a);

/* conv_transpose, each output gathering its inputs (no atomics). */
cudaError_t cuda_launch_conv_transpose(cudaStream_t stream,
                                       const osp_conv_args *a);

cudaError_t cuda_launch_pool(cudaStream_t stream, const osp_pool_args *a);

cudaError_t cuda_launch_reduce(cudaStream_t stream, const osp_reduce_args *a);

cudaError_t cuda_launch_softmax(cudaStream_t stream, const osp_softmax_args *a);

cudaError_t cuda_launch_layer_norm(cudaStream_t stream,
                                   const osp_layer_norm_args *a);

cudaError_t cuda_launch_channel_affine(cudaStream_t stream,
                                       const osp_channel_affine_args *a);

#ifdef __cplusplus
}
#endif

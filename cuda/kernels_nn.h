/*
 * Launchers of the neural-network kernels (kernels_gemm.cu) behind the CUDA device's tensor-op
 * slots (cuda_gemm.c). Each takes the slot's args (borrowed
 * for the call; the launcher copies what its kernels need by value),
 * already validated by the dispatcher (server/device/tensor_ops*.c, so no
 * zero-element output reaches them), enqueues on `stream` and returns the
 * launch's cudaError_t (wrap it in OSP_CUDA_CHECK). Each matches the CPU
 * device's slot (server/device/cpu_ops_*.c) up to float rounding.
 */
#pragma once

#include <cuda_runtime_api.h>

#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gemm_ex's epilogue on C after the GEMM: C_b = act(C_b + bias[col] +
 * residual_b), FP32 or FP16 C (computed in FP32). */
cudaError_t osp_cuda_launch_gemm_epilogue(cudaStream_t stream,
                                          const osp_gemm_ex_args *args);

#ifdef __cplusplus
}
#endif

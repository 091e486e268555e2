/*
 * gemm_ex's epilogue (osprey/tensor_ops.h) after cuBLAS's GEMM: C_b =
 * act(C_b + bias[col] + residual_b), bias and residual FP32 and each
 * optional, C (its c_dtype) FP32 or FP16 (computed in FP32, rounded once
 * here). C and
 * the residual are addressed through ldc and stride_c.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels_launch.cuh"
#include "kernels_nn.h"
#include "unary_rules.h"

typedef struct gemm_epilogue {
    int64_t batch, m, n, ldc, stride_c;
    const float *bias;
    const float *residual;
    osp_unary_op act;
    float alpha, beta;
} gemm_epilogue;

__device__ float epilogue_value(const gemm_epilogue &e, float v, int64_t col,
                                size_t at) {
    if (e.bias != NULL)
        v = v + e.bias[col];
    if (e.residual != NULL)
        v = v + e.residual[at];
    return unary_apply_f32(e.act, v, e.alpha, e.beta);
}

template <typename T> __device__ float to_float(T v);
template <> __device__ float to_float<float>(float v) {
    return v;
}
template <> __device__ float to_float<__half>(__half v) {
    return __half2float(v);
}
template <typename T> __device__ T from_float(float v);
template <> __device__ float from_float<float>(float v) {
    return v;
}
template <> __device__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}

template <typename T>
__global__ void gemm_epilogue_kernel(T *c, gemm_epilogue e) {
    size_t per = (size_t)e.m * (size_t)e.n, count = per * (size_t)e.batch;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t b = (int64_t)(i / per), r = (int64_t)(i % per / (size_t)e.n),
                col = (int64_t)(i % (size_t)e.n);
        size_t at = (size_t)(b * e.stride_c + r * e.ldc + col);
        c[at] = from_float<T>(epilogue_value(e, to_float<T>(c[at]), col, at));
    }
}

extern "C" cudaError_t cuda_launch_gemm_epilogue(cudaStream_t stream,
                                                 const osp_gemm_ex_args *args) {
    const osp_gemm_args *g = &args->gemm;
    gemm_epilogue e;
    e.batch = args->batch_count > 1 ? args->batch_count : 1;
    e.m = g->m;
    e.n = g->n;
    e.ldc = g->ldc;
    e.stride_c = e.batch > 1 ? args->stride_c : 0;
    e.act = args->act;
    e.alpha = args->act_alpha;
    e.beta = args->act_beta;
    /* Elements C spans: the last matrix's last element, plus one. */
    size_t span =
        (size_t)((e.batch - 1) * e.stride_c + (e.m - 1) * e.ldc + e.n);
    size_t count = (size_t)(e.batch * e.m * e.n);
    e.bias = args->bias != NULL ? OSP_DEVICE_ARG(stream, args->bias,
                                                 (size_t)e.n * sizeof(float))
                                : NULL;
    e.residual = args->residual != NULL ? OSP_DEVICE_ARG(stream, args->residual,
                                                         span * sizeof(float))
                                        : NULL;
    if (osp_gemm_c_dtype(g) == OSP_TYPE_FP16) {
        __half *c = OSP_DEVICE_ARG(stream, (__half *)g->c, span * 2);
        return OSP_LAUNCH(gemm_epilogue_kernel<__half>, cuda_grid_for(count),
                          OSP_CUDA_BLOCK, 0, stream, c, e);
    }
    float *c = OSP_DEVICE_ARG(stream, (float *)g->c, span * 4);
    return OSP_LAUNCH(gemm_epilogue_kernel<float>, cuda_grid_for(count),
                      OSP_CUDA_BLOCK, 0, stream, c, e);
}

/*
 * Elementwise kernels: binary ops, fused bias + activation, row softmax.
 * Each mirrors the CPU device's loop so results agree to rounding.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "activation_rules.h"
#include "kernels.h"
#include "kernels_launch.cuh"

/* ---- binary ------------------------------------------------------------ */

template <typename T> struct wrap_unsigned;
template <> struct wrap_unsigned<int32_t> { typedef uint32_t type; };
template <> struct wrap_unsigned<int64_t> { typedef uint64_t type; };

template <typename T> __device__ T apply_binary(osp_binary_op op, T x, T y) {
    switch (op) {
    case OSP_BINARY_ADD:
        return x + y;
    case OSP_BINARY_SUB:
        return x - y;
    default:
        return x * y;
    }
}

/* Integers: unsigned arithmetic so overflow wraps, as on the CPU. */
template <typename T>
__global__ void binary_int_kernel(osp_binary_op op, const T *a, const T *b,
                                  T *out, size_t n) {
    typedef typename wrap_unsigned<T>::type U;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = (T)apply_binary<U>(op, (U)a[i], (U)b[i]);
}

__global__ void binary_fp32_kernel(osp_binary_op op, const float *a,
                                   const float *b, float *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = apply_binary<float>(op, a[i], b[i]);
}

__global__ void binary_fp16_kernel(osp_binary_op op, const __half *a,
                                   const __half *b, __half *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2half_rn(
            apply_binary<float>(op, __half2float(a[i]), __half2float(b[i])));
}

extern "C" cudaError_t cuda_launch_binary(cudaStream_t stream, osp_binary_op op,
                                          osp_datatype dtype, const void *a,
                                          const void *b, void *out, size_t n) {
    unsigned grid = cuda_grid_for(n);
    a = OSP_DEVICE_ARG(stream, a, n * osp_datatype_byte_size(dtype));
    b = OSP_DEVICE_ARG(stream, b, n * osp_datatype_byte_size(dtype));
    out = OSP_DEVICE_ARG(stream, out, n * osp_datatype_byte_size(dtype));
    switch (dtype) {
    case OSP_TYPE_INT32:
        return OSP_LAUNCH(binary_int_kernel<int32_t>, grid, OSP_CUDA_BLOCK, 0,
                          stream, op, (const int32_t *)a, (const int32_t *)b,
                          (int32_t *)out, n);
    case OSP_TYPE_INT64:
        return OSP_LAUNCH(binary_int_kernel<int64_t>, grid, OSP_CUDA_BLOCK, 0,
                          stream, op, (const int64_t *)a, (const int64_t *)b,
                          (int64_t *)out, n);
    case OSP_TYPE_FP32:
        return OSP_LAUNCH(binary_fp32_kernel, grid, OSP_CUDA_BLOCK, 0, stream,
                          op, (const float *)a, (const float *)b,
                          (float *)out, n);
    case OSP_TYPE_FP16:
        return OSP_LAUNCH(binary_fp16_kernel, grid, OSP_CUDA_BLOCK, 0, stream,
                          op, (const __half *)a, (const __half *)b,
                          (__half *)out, n);
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- bias + activation ------------------------------------------------- */

__global__ void bias_activation_kernel(float *x, const float *bias,
                                       size_t count, size_t cols,
                                       osp_activation act) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = activation_apply(act,
                                x[i] + (bias != NULL ? bias[i % cols] : 0.0f));
}

extern "C" cudaError_t cuda_launch_bias_activation(cudaStream_t stream,
                                                   float *x, const float *bias,
                                                   int64_t rows, int64_t cols,
                                                   osp_activation act) {
    size_t count = (size_t)rows * (size_t)cols;
    x = OSP_DEVICE_ARG(stream, x, count * sizeof(float));
    if (bias != NULL)
        bias = OSP_DEVICE_ARG(stream, bias, (size_t)cols * sizeof(float));
    return OSP_LAUNCH(bias_activation_kernel, cuda_grid_for(count),
                      OSP_CUDA_BLOCK, 0, stream, x, bias, count, (size_t)cols,
                      act);
}

/* ---- row softmax ------------------------------------------------------- */

/* Reduces v over the block (blockDim.x == OSP_CUDA_BLOCK, a power of two)
 * with max (is_max) or sum; every thread gets the result. */
__device__ float block_reduce(float v, bool is_max) {
    __shared__ float buf[OSP_CUDA_BLOCK];
    unsigned tid = threadIdx.x;
    buf[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            buf[tid] = is_max ? fmaxf(buf[tid], buf[tid + s])
                              : buf[tid] + buf[tid + s];
        __syncthreads();
    }
    float result = buf[0];
    __syncthreads(); /* buf is reused by the next call */
    return result;
}

/* One block per row (grid-stride over rows). out may alias x: each element
 * is read and then written by the same thread, after both reductions. */
__global__ void softmax_rows_kernel(const float *x, float *out, size_t rows,
                                    size_t cols) {
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *in_row = x + r * cols;
        float *out_row = out + r * cols;
        float m = -INFINITY;
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
            m = fmaxf(m, in_row[c]);
        m = block_reduce(m, true);
        float sum = 0.0f;
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
            sum += expf(in_row[c] - m);
        sum = block_reduce(sum, false);
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
            out_row[c] = expf(in_row[c] - m) / sum;
    }
}

extern "C" cudaError_t cuda_launch_softmax_rows(cudaStream_t stream,
                                                const float *x, float *out,
                                                int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) /* a 0-block grid is a launch error */
        return cudaSuccess;
    unsigned grid = rows > 65535 ? 65535u : (unsigned)rows;
    x = OSP_DEVICE_ARG(stream, x, (size_t)rows * (size_t)cols * sizeof(float));
    out = OSP_DEVICE_ARG(stream, out,
                         (size_t)rows * (size_t)cols * sizeof(float));
    return OSP_LAUNCH_BLOCK_SYNC(softmax_rows_kernel, grid, OSP_CUDA_BLOCK, 0,
                                 stream, x, out, (size_t)rows, (size_t)cols);
}

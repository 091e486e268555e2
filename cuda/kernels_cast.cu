/*
 * Casts between every numeric datatype, with the CPU device's rules
 * (server/core/cpu_device.c): float -> integer truncates toward zero and
 * saturates (NaN -> 0), integer -> integer wraps, float -> FP16/BF16 goes
 * through FP32 rounding to nearest even, anything -> BOOL is x != 0.
 *
 * One kernel reads each element into the widest type of its family and
 * writes it out; the datatypes are uniform across the grid, so the
 * switches do not diverge.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels.h"
#include "kernels_launch.cuh"

enum cast_family { CAST_FLOAT, CAST_SIGNED, CAST_UNSIGNED };

struct cast_value {
    cast_family family;
    double f;
    int64_t i;
    uint64_t u;
};

__device__ cast_value cast_load(const void *src, osp_datatype dt, size_t idx) {
    cast_value v = {CAST_UNSIGNED, 0.0, 0, 0};
    switch (dt) {
    case OSP_TYPE_BOOL:
    case OSP_TYPE_UINT8:
        v.u = ((const uint8_t *)src)[idx];
        break;
    case OSP_TYPE_UINT16:
        v.u = ((const uint16_t *)src)[idx];
        break;
    case OSP_TYPE_UINT32:
        v.u = ((const uint32_t *)src)[idx];
        break;
    case OSP_TYPE_UINT64:
        v.u = ((const uint64_t *)src)[idx];
        break;
    case OSP_TYPE_INT8:
        v.family = CAST_SIGNED;
        v.i = ((const int8_t *)src)[idx];
        break;
    case OSP_TYPE_INT16:
        v.family = CAST_SIGNED;
        v.i = ((const int16_t *)src)[idx];
        break;
    case OSP_TYPE_INT32:
        v.family = CAST_SIGNED;
        v.i = ((const int32_t *)src)[idx];
        break;
    case OSP_TYPE_INT64:
        v.family = CAST_SIGNED;
        v.i = ((const int64_t *)src)[idx];
        break;
    case OSP_TYPE_FP16:
        v.family = CAST_FLOAT;
        v.f = __half2float(((const __half *)src)[idx]);
        break;
    case OSP_TYPE_BF16:
        v.family = CAST_FLOAT;
        v.f = __bfloat162float(((const __nv_bfloat16 *)src)[idx]);
        break;
    case OSP_TYPE_FP32:
        v.family = CAST_FLOAT;
        v.f = ((const float *)src)[idx];
        break;
    case OSP_TYPE_FP64:
        v.family = CAST_FLOAT;
        v.f = ((const double *)src)[idx];
        break;
    default:
        break;
    }
    return v;
}

/* See saturate_signed in cpu_device.c for why comparing in double is
 * exact, including at the 64-bit bounds. */
__device__ int64_t saturate_signed(double x, int64_t lo, int64_t hi) {
    if (isnan(x))
        return 0;
    double t = trunc(x);
    if (t <= (double)lo)
        return lo;
    if (t >= (double)hi)
        return hi;
    return (int64_t)t;
}

__device__ uint64_t saturate_unsigned(double x, uint64_t hi) {
    if (isnan(x))
        return 0;
    double t = trunc(x);
    if (t <= 0.0)
        return 0;
    if (t >= (double)hi)
        return hi;
    return (uint64_t)t;
}

__device__ uint64_t cast_to_int_bits(cast_value v, bool is_signed, int64_t lo,
                                     uint64_t hi) {
    if (v.family == CAST_SIGNED)
        return (uint64_t)v.i;
    if (v.family == CAST_UNSIGNED)
        return v.u;
    if (is_signed)
        return (uint64_t)saturate_signed(v.f, lo, (int64_t)hi);
    return saturate_unsigned(v.f, hi);
}

__device__ float cast_to_float(cast_value v) {
    if (v.family == CAST_SIGNED)
        return (float)v.i;
    if (v.family == CAST_UNSIGNED)
        return (float)v.u;
    return (float)v.f;
}

__device__ double cast_to_double(cast_value v) {
    if (v.family == CAST_SIGNED)
        return (double)v.i;
    if (v.family == CAST_UNSIGNED)
        return (double)v.u;
    return v.f;
}

__device__ void cast_store(void *dst, osp_datatype dt, size_t idx,
                           cast_value v) {
    switch (dt) {
    case OSP_TYPE_BOOL: {
        bool nonzero = v.family == CAST_FLOAT    ? v.f != 0.0
                       : v.family == CAST_SIGNED ? v.i != 0
                                                 : v.u != 0;
        ((uint8_t *)dst)[idx] = nonzero ? 1 : 0;
        break;
    }
    case OSP_TYPE_UINT8:
        ((uint8_t *)dst)[idx] =
            (uint8_t)cast_to_int_bits(v, false, 0, UINT8_MAX);
        break;
    case OSP_TYPE_UINT16:
        ((uint16_t *)dst)[idx] =
            (uint16_t)cast_to_int_bits(v, false, 0, UINT16_MAX);
        break;
    case OSP_TYPE_UINT32:
        ((uint32_t *)dst)[idx] =
            (uint32_t)cast_to_int_bits(v, false, 0, UINT32_MAX);
        break;
    case OSP_TYPE_UINT64:
        ((uint64_t *)dst)[idx] = cast_to_int_bits(v, false, 0, UINT64_MAX);
        break;
    case OSP_TYPE_INT8:
        ((int8_t *)dst)[idx] =
            (int8_t)cast_to_int_bits(v, true, INT8_MIN, INT8_MAX);
        break;
    case OSP_TYPE_INT16:
        ((int16_t *)dst)[idx] =
            (int16_t)cast_to_int_bits(v, true, INT16_MIN, INT16_MAX);
        break;
    case OSP_TYPE_INT32:
        ((int32_t *)dst)[idx] =
            (int32_t)cast_to_int_bits(v, true, INT32_MIN, INT32_MAX);
        break;
    case OSP_TYPE_INT64:
        ((int64_t *)dst)[idx] =
            (int64_t)cast_to_int_bits(v, true, INT64_MIN, INT64_MAX);
        break;
    case OSP_TYPE_FP16:
        ((__half *)dst)[idx] = __float2half_rn(cast_to_float(v));
        break;
    case OSP_TYPE_BF16:
        ((__nv_bfloat16 *)dst)[idx] = __float2bfloat16_rn(cast_to_float(v));
        break;
    case OSP_TYPE_FP32:
        ((float *)dst)[idx] = cast_to_float(v);
        break;
    case OSP_TYPE_FP64:
        ((double *)dst)[idx] = cast_to_double(v);
        break;
    default:
        break;
    }
}

__global__ void cast_kernel(const void *src, osp_datatype src_dtype, void *dst,
                            osp_datatype dst_dtype, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        cast_store(dst, dst_dtype, i, cast_load(src, src_dtype, i));
}

extern "C" cudaError_t osp_cuda_launch_cast(cudaStream_t stream,
                                            const void *src,
                                            osp_datatype src_dtype, void *dst,
                                            osp_datatype dst_dtype, size_t n) {
    cast_kernel<<<osp_cuda_grid_for(n), OSP_CUDA_BLOCK, 0, stream>>>(
        src, src_dtype, dst, dst_dtype, n);
    return cudaGetLastError();
}

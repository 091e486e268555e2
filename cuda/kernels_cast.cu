/*
 * Casts between every numeric datatype, with the rules of
 * server/device/cast_rules.h, shared with the CPU device: float -> integer
 * truncates toward zero and saturates (NaN -> 0), integer -> integer wraps,
 * float -> FP16/BF16 goes through FP32 rounding to nearest even, anything
 * -> BOOL is x != 0.
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

/* How half types are read and written on the device. */
#define OSP_CAST_FP16_TO_FLOAT(p, i) __half2float(((const __half *)(p))[i])
#define OSP_CAST_BF16_TO_FLOAT(p, i)                                           \
    __bfloat162float(((const __nv_bfloat16 *)(p))[i])
#define OSP_CAST_STORE_FP16(p, i, f) (((__half *)(p))[i] = __float2half_rn(f))
#define OSP_CAST_STORE_BF16(p, i, f)                                           \
    (((__nv_bfloat16 *)(p))[i] = __float2bfloat16_rn(f))
#include "cast_rules.h"

__global__ void cast_kernel(const void *src, osp_datatype src_dtype, void *dst,
                            osp_datatype dst_dtype, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        cast_store(dst, dst_dtype, i, cast_load(src, src_dtype, i));
}

extern "C" cudaError_t cuda_launch_cast(cudaStream_t stream, const void *src,
                                        osp_datatype src_dtype, void *dst,
                                        osp_datatype dst_dtype, size_t n) {
    src = OSP_DEVICE_ARG(stream, src, n * osp_datatype_byte_size(src_dtype));
    dst = OSP_DEVICE_ARG(stream, dst, n * osp_datatype_byte_size(dst_dtype));
    return OSP_LAUNCH(cast_kernel, cuda_grid_for(n), OSP_CUDA_BLOCK, 0, stream,
                      src, src_dtype, dst, dst_dtype, n);
}

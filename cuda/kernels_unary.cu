/*
 * The unary kernels (osp_op_unary). The per-element math is
 * server/device/unary_rules.h, the CPU device's own: one kernel per FP32
 * op (the rule inlined, no switch per element), one per signed integer
 * type (the op uniform across the grid), and the BOOL-out tests. y may be
 * x: each element is read, then written, by one thread.
 */
#include <stdint.h>

#include "kernels.h"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"
#include "unary_rules.h"

/* y[i] = F(x[i], alpha, beta), F one of OSP_UNARY_F32_OPS. */
template <float (*F)(float, float, float)>
__global__ void unary_f32_kernel(const float *x, float *y, size_t n,
                                 float alpha, float beta) {
    OSP_GRID_STRIDE(size_t, i, n) {
        y[i] = F(x[i], alpha, beta);
    }
}

/* ISNAN (is_nan) or ISINF: FP32 in, BOOL out. */
__global__ void unary_test_f32_kernel(const float *x, uint8_t *y, size_t n,
                                      bool is_nan, bool pos, bool neg) {
    OSP_GRID_STRIDE(size_t, i, n) {
        float v = x[i];
        y[i] = is_nan ? unary_isnan_f32(v) : unary_isinf_f32(v, pos, neg);
    }
}

/* NOT of BOOL bytes (0 or 1). */
__global__ void unary_not_kernel(const uint8_t *x, uint8_t *y, size_t n) {
    OSP_GRID_STRIDE(size_t, i, n) {
        y[i] = x[i] ^ 1u;
    }
}

/* ABS, NEG, SIGN, RELU and CLIP (bounds lo, hi already in T) of a signed
 * type. */
#define UNARY_SIGNED_KERNEL(T, sfx)                                            \
    __global__ void unary_##sfx##_kernel(osp_unary_op op, const T *x, T *y,    \
                                         size_t n, T lo, T hi) {               \
        OSP_GRID_STRIDE(size_t, i, n) {                                        \
            T v = x[i], r;                                                     \
            switch (op) {                                                      \
            case OSP_UNARY_ABS:                                                \
                r = unary_abs_##sfx(v);                                        \
                break;                                                         \
            case OSP_UNARY_NEG:                                                \
                r = unary_neg_##sfx(v);                                        \
                break;                                                         \
            case OSP_UNARY_SIGN:                                               \
                r = unary_sign_##sfx(v);                                       \
                break;                                                         \
            case OSP_UNARY_RELU:                                               \
                r = unary_relu_##sfx(v);                                       \
                break;                                                         \
            default:                                                           \
                r = unary_clip_##sfx(v, lo, hi);                               \
                break;                                                         \
            }                                                                  \
            y[i] = r;                                                          \
        }                                                                      \
    }
UNARY_SIGNED_KERNEL(int8_t, i8)
UNARY_SIGNED_KERNEL(int16_t, i16)
UNARY_SIGNED_KERNEL(int32_t, i32)
UNARY_SIGNED_KERNEL(int64_t, i64)
#undef UNARY_SIGNED_KERNEL

static bool unary_signed_op(osp_unary_op op) {
    return op == OSP_UNARY_ABS || op == OSP_UNARY_NEG || op == OSP_UNARY_SIGN ||
           op == OSP_UNARY_RELU || op == OSP_UNARY_CLIP;
}

extern "C" cudaError_t cuda_launch_unary(cudaStream_t stream,
                                         const osp_unary_args *args) {
    size_t n = args->n, es = osp_datatype_byte_size(args->dtype);
    osp_unary_op op = args->op;
    bool is_unsigned =
        args->dtype == OSP_TYPE_UINT8 || args->dtype == OSP_TYPE_UINT16 ||
        args->dtype == OSP_TYPE_UINT32 || args->dtype == OSP_TYPE_UINT64;
    /* A copy: IDENTITY of anything, |x| of an unsigned x. */
    if (op == OSP_UNARY_IDENTITY || (op == OSP_UNARY_ABS && is_unsigned)) {
        if (args->x == args->y)
            return cudaSuccess;
        return cudaMemcpyAsync(args->y, args->x, n * es,
                               cudaMemcpyDeviceToDevice, stream);
    }
    bool bool_out = op == OSP_UNARY_ISNAN || op == OSP_UNARY_ISINF;
    const void *x = OSP_DEVICE_ARG(stream, args->x, n * es);
    void *y = OSP_DEVICE_ARG(stream, args->y, n * (bool_out ? 1 : es));
    unsigned grid = cuda_grid_for(n);
    float alpha = args->alpha, beta = args->beta;
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        if (bool_out)
            return OSP_LAUNCH(unary_test_f32_kernel, grid, OSP_CUDA_BLOCK, 0,
                              stream, (const float *)x, (uint8_t *)y, n,
                              op == OSP_UNARY_ISNAN, alpha != 0.0f,
                              beta != 0.0f);
        switch (op) {
#define UNARY_F32_CASE(o, fn)                                                  \
    case o:                                                                    \
        return OSP_LAUNCH(unary_f32_kernel<fn>, grid, OSP_CUDA_BLOCK, 0,       \
                          stream, (const float *)x, (float *)y, n, alpha,      \
                          beta);
            OSP_UNARY_F32_OPS(UNARY_F32_CASE)
#undef UNARY_F32_CASE
        default:
            return cudaErrorInvalidValue;
        }
    case OSP_TYPE_BOOL:
        if (op != OSP_UNARY_NOT)
            return cudaErrorInvalidValue;
        return OSP_LAUNCH(unary_not_kernel, grid, OSP_CUDA_BLOCK, 0, stream,
                          (const uint8_t *)x, (uint8_t *)y, n);
#define UNARY_SIGNED_CASE(DT, T, sfx, TMIN, TMAX)                              \
    case DT:                                                                   \
        if (!unary_signed_op(op))                                              \
            return cudaErrorInvalidValue;                                      \
        return OSP_LAUNCH(unary_##sfx##_kernel, grid, OSP_CUDA_BLOCK, 0,       \
                          stream, op, (const T *)x, (T *)y, n,                 \
                          unary_clip_bound_##sfx(alpha, TMIN),                 \
                          unary_clip_bound_##sfx(beta, TMAX));
        UNARY_SIGNED_CASE(OSP_TYPE_INT8, int8_t, i8, INT8_MIN, INT8_MAX)
        UNARY_SIGNED_CASE(OSP_TYPE_INT16, int16_t, i16, INT16_MIN, INT16_MAX)
        UNARY_SIGNED_CASE(OSP_TYPE_INT32, int32_t, i32, INT32_MIN, INT32_MAX)
        UNARY_SIGNED_CASE(OSP_TYPE_INT64, int64_t, i64, INT64_MIN, INT64_MAX)
#undef UNARY_SIGNED_CASE
    default:
        return cudaErrorInvalidValue;
    }
}

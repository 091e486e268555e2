/*
 * The cast rules of osp_op_cast, shared by the CPU device (the reference)
 * and the CUDA kernels so that both follow one definition. Each source
 * value is read into the widest type of its family, then written to the
 * destination type:
 *   float -> integer: truncate toward zero, saturate at the type's range,
 *                     NaN -> 0 (what CUDA's conversions do; C leaves
 *                     out-of-range conversions undefined);
 *   integer -> integer: modulo 2^bits (two's complement wrap);
 *   float -> FP16/BF16: through FP32, rounded to nearest even;
 *   anything -> BOOL: x != 0 (NaN is true).
 *
 * Compiles as C and as CUDA (host + device). The includer defines how half
 * types are read and written, before including this header:
 *   OSP_CAST_FP16_TO_FLOAT(const void *p, size_t i) -> float
 *   OSP_CAST_BF16_TO_FLOAT(const void *p, size_t i) -> float
 *   OSP_CAST_STORE_FP16(void *p, size_t i, float f)
 *   OSP_CAST_STORE_BF16(void *p, size_t i, float f)
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"

#ifdef __CUDACC__
#define OSP_CAST_FN static __host__ __device__ inline
#else
#define OSP_CAST_FN static inline
#endif

typedef enum cast_family { CAST_FLOAT, CAST_SIGNED, CAST_UNSIGNED } cast_family;

typedef struct cast_value {
    cast_family family;
    double f;
    int64_t i;
    uint64_t u;
} cast_value;

OSP_CAST_FN cast_value cast_load(const void *src, osp_datatype dt, size_t idx) {
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
        v.f = OSP_CAST_FP16_TO_FLOAT(src, idx);
        break;
    case OSP_TYPE_BF16:
        v.family = CAST_FLOAT;
        v.f = OSP_CAST_BF16_TO_FLOAT(src, idx);
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
        break; /* excluded by the dispatcher */
    }
    return v;
}

/* Truncates x toward zero and clamps it to [lo, hi]; NaN -> 0. Comparing in
 * double is exact for every bound up to 32 bits; for the 64-bit bounds,
 * (double)hi rounds up to 2^63 or 2^64, so `t >= hi` catches exactly the
 * values that do not fit. */
OSP_CAST_FN int64_t saturate_signed(double x, int64_t lo, int64_t hi) {
    if (isnan(x))
        return 0;
    double t = trunc(x);
    if (t <= (double)lo)
        return lo;
    if (t >= (double)hi)
        return hi;
    return (int64_t)t;
}

OSP_CAST_FN uint64_t saturate_unsigned(double x, uint64_t hi) {
    if (isnan(x))
        return 0;
    double t = trunc(x);
    if (t <= 0.0)
        return 0;
    if (t >= (double)hi)
        return hi;
    return (uint64_t)t;
}

/* The value as an integer of the destination's width: wrapped for integer
 * sources, saturated for float sources. Returned as uint64 bits; the caller
 * keeps the low bits it needs. */
OSP_CAST_FN uint64_t cast_to_int_bits(cast_value v, bool is_signed, int64_t lo,
                                      uint64_t hi) {
    if (v.family == CAST_SIGNED)
        return (uint64_t)v.i;
    if (v.family == CAST_UNSIGNED)
        return v.u;
    if (is_signed)
        return (uint64_t)saturate_signed(v.f, lo, (int64_t)hi);
    return saturate_unsigned(v.f, hi);
}

OSP_CAST_FN double cast_to_double(cast_value v) {
    if (v.family == CAST_SIGNED)
        return (double)v.i;
    if (v.family == CAST_UNSIGNED)
        return (double)v.u;
    return v.f;
}

/* Integer sources convert to FP32 directly (one rounding), floats through
 * double (exact for every float source but FP64). */
OSP_CAST_FN float cast_to_float(cast_value v) {
    if (v.family == CAST_SIGNED)
        return (float)v.i;
    if (v.family == CAST_UNSIGNED)
        return (float)v.u;
    return (float)v.f;
}

OSP_CAST_FN void cast_store(void *dst, osp_datatype dt, size_t idx,
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
        OSP_CAST_STORE_FP16(dst, idx, cast_to_float(v));
        break;
    case OSP_TYPE_BF16:
        OSP_CAST_STORE_BF16(dst, idx, cast_to_float(v));
        break;
    case OSP_TYPE_FP32:
        ((float *)dst)[idx] = cast_to_float(v);
        break;
    case OSP_TYPE_FP64:
        ((double *)dst)[idx] = cast_to_double(v);
        break;
    default:
        break; /* excluded by the dispatcher */
    }
}

/*
 * The scalar math of osp_op_binary_nd (osprey/tensor_ops.h) beyond plain
 * + - * / and comparisons, shared by the CPU device (the reference,
 * cpu_ops_elementwise.c) and the CUDA kernels (cuda/kernels_broadcast.cu)
 * so that both follow one definition. Compiles as C and as CUDA (host +
 * device).
 *
 * Integer rules: arithmetic that could overflow runs in AU, an unsigned
 * type at least as wide as T and as unsigned int, so that it wraps;
 * division truncates toward zero, TMIN / -1 wraps to TMIN, and every
 * division or remainder by zero is 0 (never a trap). Float MAX and MIN
 * propagate NaN from either side (numpy's maximum).
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define OSP_BINARY_FN static __host__ __device__ inline
#else
#define OSP_BINARY_FN static inline
#endif

/* ---- floats -------------------------------------------------------------
 */

/* c ? a : b on the bits, a and b both computed: a select GCC keeps
 * branch-free (as unary_select_f32), for PRELU's x * y. */
OSP_BINARY_FN double binary_select_f64(bool c, double a, double b) {
    uint64_t ab, bb, mask = c ? ~(uint64_t)0 : 0;
    memcpy(&ab, &a, 8);
    memcpy(&bb, &b, 8);
    ab = (ab & mask) | (bb & ~mask);
    memcpy(&a, &ab, 8);
    return a;
}

/* Python's % (MOD): the remainder takes the divisor's sign. */
OSP_BINARY_FN float binary_mod_f32(float x, float y) {
    float r = fmodf(x, y);
    return r != 0.0f && ((r < 0.0f) != (y < 0.0f)) ? r + y : r;
}

OSP_BINARY_FN double binary_mod_f64(double x, double y) {
    double r = fmod(x, y);
    return r != 0.0 && ((r < 0.0) != (y < 0.0)) ? r + y : r;
}

#define OSP_BINARY_FLOAT_RULES(T, sfx)                                         \
    OSP_BINARY_FN T binary_max_##sfx(T x, T y) {                               \
        return (x >= y || x != x) ? x : y;                                     \
    }                                                                          \
    OSP_BINARY_FN T binary_min_##sfx(T x, T y) {                               \
        return (x <= y || x != x) ? x : y;                                     \
    }
OSP_BINARY_FLOAT_RULES(float, f32)
OSP_BINARY_FLOAT_RULES(double, f64)
#undef OSP_BINARY_FLOAT_RULES

/* ---- integers -----------------------------------------------------------
 */

/* x^y of an unsigned type, by squaring, wrapping. */
OSP_BINARY_FN uint64_t binary_pow_u64(uint64_t x, uint64_t y) {
    uint64_t r = 1;
    for (; y != 0; y >>= 1) {
        if (y & 1)
            r *= x;
        x *= x;
    }
    return r;
}

/* DIV, FMOD, MOD and POW of a signed type T. */
#define OSP_BINARY_SIGNED_RULES(T, AU, sfx)                                    \
    OSP_BINARY_FN T binary_div_##sfx(T x, T y) {                               \
        if (y == 0)                                                            \
            return 0;                                                          \
        if (y == -1)                                                           \
            return (T)(0u - (AU)x);                                            \
        return (T)(x / y);                                                     \
    }                                                                          \
    OSP_BINARY_FN T binary_fmod_##sfx(T x, T y) {                              \
        return y == 0 || y == -1 ? 0 : (T)(x % y);                             \
    }                                                                          \
    OSP_BINARY_FN T binary_mod_##sfx(T x, T y) {                               \
        T r = binary_fmod_##sfx(x, y);                                         \
        return r != 0 && ((r < 0) != (y < 0)) ? (T)((AU)r + (AU)y) : r;        \
    }                                                                          \
    /* x^y by squaring, wrapping; a negative y truncates 1 / x^|y| toward      \
     * zero (0 unless x is 1 or -1). */                                        \
    OSP_BINARY_FN T binary_pow_##sfx(T x, T y) {                               \
        if (y < 0)                                                             \
            return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;              \
        AU r = 1, base = (AU)x;                                                \
        for (uint64_t e = (uint64_t)y; e != 0; e >>= 1) {                      \
            if (e & 1)                                                         \
                r *= base;                                                     \
            base *= base;                                                      \
        }                                                                      \
        return (T)r;                                                           \
    }
OSP_BINARY_SIGNED_RULES(int8_t, uint32_t, i8)
OSP_BINARY_SIGNED_RULES(int16_t, uint32_t, i16)
OSP_BINARY_SIGNED_RULES(int32_t, uint32_t, i32)
OSP_BINARY_SIGNED_RULES(int64_t, uint64_t, i64)
#undef OSP_BINARY_SIGNED_RULES

/* DIV, MOD (FMOD is the same) and the shifts of an unsigned type T of
 * BITS bits: shifts by BITS or more give 0. */
#define OSP_BINARY_UNSIGNED_RULES(T, AU, sfx, BITS)                            \
    OSP_BINARY_FN T binary_div_##sfx(T x, T y) {                               \
        return y == 0 ? 0 : (T)(x / y);                                        \
    }                                                                          \
    OSP_BINARY_FN T binary_mod_##sfx(T x, T y) {                               \
        return y == 0 ? 0 : (T)(x % y);                                        \
    }                                                                          \
    OSP_BINARY_FN T binary_shl_##sfx(T x, T y) {                               \
        return y >= (BITS) ? 0 : (T)((AU)x << y);                              \
    }                                                                          \
    OSP_BINARY_FN T binary_shr_##sfx(T x, T y) {                               \
        return y >= (BITS) ? 0 : (T)(x >> y);                                  \
    }
OSP_BINARY_UNSIGNED_RULES(uint8_t, uint32_t, u8, 8)
OSP_BINARY_UNSIGNED_RULES(uint16_t, uint32_t, u16, 16)
OSP_BINARY_UNSIGNED_RULES(uint32_t, uint32_t, u32, 32)
OSP_BINARY_UNSIGNED_RULES(uint64_t, uint64_t, u64, 64)
#undef OSP_BINARY_UNSIGNED_RULES

/*
 * The scalar math of osp_op_unary (osprey/tensor_ops.h), shared by the CPU
 * device (the reference) and the CUDA kernels so that both follow one
 * definition. Compiles as C and as CUDA (host + device).
 *
 * Every FP32 -> FP32 op is a function of (x, alpha, beta), whatever
 * parameters it uses, and OSP_UNARY_F32_OPS lists them as X(op, function)
 * pairs: a loop can switch on the op once and run the function inline for
 * every element (no call through a pointer per element). The integer rules
 * follow, one set per signed type, computed in the unsigned type where C
 * would otherwise overflow.
 *
 * The rules are written so that a loop over them vectorises at -O2 where
 * it can: exp, tanh, erf and erfc are unary_expf, unary_tanhf,
 * unary_erff and unary_erfcf (no libm call, no branch), and a
 * choice between two computed values is unary_select_f32 (GCC would
 * otherwise move the float op of one side into a branch, which stops the
 * loop from vectorising). The other transcendental functions are
 * libm's.
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "osprey/tensor_ops.h"

#ifdef __CUDACC__
#define OSP_UNARY_FN static __host__ __device__ inline
#else
#define OSP_UNARY_FN static inline
#endif

/* ---- FP32 ----------------------------------------------------------------
 */

/* c ? a : b, chosen on the bits: a and b are both computed whatever c. */
OSP_UNARY_FN float unary_select_f32(bool c, float a, float b) {
    uint32_t ab, bb, mask = c ? 0xffffffffu : 0u;
    memcpy(&ab, &a, 4);
    memcpy(&bb, &b, 4);
    ab = (ab & mask) | (bb & ~mask);
    memcpy(&a, &ab, 4);
    return a;
}

/* 2^k for -126 <= k <= 127, from the exponent bits. */
OSP_UNARY_FN float unary_pow2i(int32_t k) {
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* e^x within 1 ulp (8.3e-8 relative at most over the floats where the
 * result is normal; denormal results within one denormal step), with
 * expf's specials: +inf above 88.7228, 0 below -103.97, NaN for NaN.
 * Cephes' expf: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts,
 * Cody and Waite), e^r by a degree-7 polynomial, times 2^n built from
 * the exponent bits in two halves (so that n = -150 .. 128 all fit, and
 * results past FLT_MAX round to inf by themselves). x is clamped to
 * [-104, 88.8] on its bits (a sign-magnitude min, which catches NaN too)
 * and NaN put back at the end on the bits: no branch anywhere. */
OSP_UNARY_FN float unary_expf(float x) {
    uint32_t bits, clamped;
    memcpy(&bits, &x, 4);
    uint32_t limit = (int32_t)bits < 0 ? 0xC2D00000u /* -104 */
                                       : 0x42B1999Au /* 88.8 */;
    clamped = bits < limit ? bits : limit;
    float c;
    memcpy(&c, &clamped, 4);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: rounds to integers */
    float n = (c * 1.44269504088896341f + shifter) - shifter;
    float r = c - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t k = (int32_t)n, half = k >> 1;
    float y = p * unary_pow2i(half) * unary_pow2i(k - half);
    uint32_t ybits;
    memcpy(&ybits, &y, 4);
    ybits |= (bits & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : 0u;
    memcpy(&y, &ybits, 4);
    return y;
}

OSP_UNARY_FN float unary_identity_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return x;
}

OSP_UNARY_FN float unary_abs_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return fabsf(x);
}

OSP_UNARY_FN float unary_neg_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return -x;
}

/* 1, -1, or x itself for zeros and NaN (numpy's sign). */
OSP_UNARY_FN float unary_sign_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
}

/* NaN passes through (numpy's maximum(x, 0)). */
OSP_UNARY_FN float unary_relu_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return x < 0.0f ? 0.0f : x;
}

/* min(max(x, a), b) as ONNX Clip: b wins when a > b; NaN passes through. */
OSP_UNARY_FN float unary_clip_f32(float x, float a, float b) {
    float t = x < a ? a : x;
    return t > b ? b : t;
}

/* tanh within 1.5e-7 relative: Cephes' tanhf, an odd polynomial below
 * |x| = 0.625 and 1 - 2 / (e^2|x| + 1) above (e^2|x| may overflow to inf:
 * then 1), both computed and one chosen. */
OSP_UNARY_FN float unary_tanhf(float x) {
    float ax = fabsf(x);
    float e = unary_expf(2.0f * ax);
    float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    return unary_select_f32(ax >= 0.625f, big, small);
}

/* erf within 5e-7 (absolute, and relative for normal results): the
 * rational approximation of XLA and Eigen, x P(x^2) / Q(x^2) on x clamped
 * to [-4, 4] (erf is +-1 in float beyond), the clamp on the bits as in
 * unary_expf (NaN passes through it). */
OSP_UNARY_FN float unary_erff(float x) {
    uint32_t bits, clamped;
    memcpy(&bits, &x, 4);
    uint32_t limit = (int32_t)bits < 0 ? 0xC0800000u /* -4 */
                                       : 0x40800000u /* 4 */;
    clamped = (bits & 0x7fffffffu) > 0x7f800000u ? bits
              : bits < limit                     ? bits
                                                 : limit;
    float c;
    memcpy(&c, &clamped, 4);
    float x2 = c * c;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return c * p / q;
}

OSP_UNARY_FN float unary_exp_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return unary_expf(x);
}

OSP_UNARY_FN float unary_log_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return logf(x);
}

OSP_UNARY_FN float unary_sqrt_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return sqrtf(x);
}

OSP_UNARY_FN float unary_reciprocal_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return 1.0f / x;
}

OSP_UNARY_FN float unary_floor_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return floorf(x);
}

OSP_UNARY_FN float unary_ceil_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return ceilf(x);
}

/* Half to even: rintf in the default rounding mode. */
OSP_UNARY_FN float unary_round_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return rintf(x);
}

/* From e = exp(-|x|) <= 1, so that exp never overflows: 1 / (1 + e) for
 * x >= 0, e / (1 + e) for negative x. */
OSP_UNARY_FN float unary_sigmoid_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    float e = unary_expf(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return unary_select_f32(x >= 0.0f, r, e * r);
}

OSP_UNARY_FN float unary_tanh_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return unary_tanhf(x);
}

OSP_UNARY_FN float unary_erf_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return unary_erff(x);
}

/* erfc within 1.6e-6 relative for |x| <= 4 and 6e-6 up to 8 (the
 * rounding of the exponent -x^2 + P grows with it), results down to the
 * denormals past 9, 0 past 10.05: Numerical Recipes' erfcc, t exp(-x^2 +
 * P(t)) with t = 1 / (1 + |x| / 2) (a Chebyshev fit, 1.2e-7 relative in
 * exact arithmetic), for |x|, and 2 - that for negative x. No
 * cancellation and no branch: 1 + erf(x) for very negative x keeps its
 * tiny value (GELU's tail). inf gives 0 (2 for -inf), NaN NaN. */
OSP_UNARY_FN float unary_erfcf(float x) {
    float ax = fabsf(x);
    float t = 1.0f / (1.0f + 0.5f * ax);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float r = t * unary_expf(p - ax * ax);
    return unary_select_f32(x < 0.0f, 2.0f - r, r);
}

/* 0.5 x (1 + erf(x / sqrt 2)), written with erfc so that large negative x
 * keeps its tiny result instead of cancelling to 0: within 2.5e-6
 * relative down to x = -5.7, below which rounding x / sqrt 2 alone costs
 * some x^2 6e-8 (the results are under 1e-7 there). */
OSP_UNARY_FN float unary_gelu_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return 0.5f * x * unary_erfcf(-x * 0.70710678118654752f);
}

/* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written as
 * x / (1 + exp(-2u)) (as activation_rules.h): no cancellation for
 * negative x. */
OSP_UNARY_FN float unary_gelu_tanh_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    float u = k * (x + 0.044715f * x * x * x);
    return x / (1.0f + unary_expf(-2.0f * u));
}

OSP_UNARY_FN float unary_silu_f32(float x, float a, float b) {
    return x * unary_sigmoid_f32(x, a, b);
}

/* log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow. */
OSP_UNARY_FN float unary_softplus_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
}

OSP_UNARY_FN float unary_softsign_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return x / (1.0f + fabsf(x));
}

OSP_UNARY_FN float unary_mish_f32(float x, float a, float b) {
    return x * unary_tanhf(unary_softplus_f32(x, a, b));
}

/* exp(x) - 1 as expm1 throughout: exact near 0. */
OSP_UNARY_FN float unary_elu_f32(float x, float a, float b) {
    (void)b;
    return x < 0.0f ? a * expm1f(x) : x;
}

OSP_UNARY_FN float unary_celu_f32(float x, float a, float b) {
    (void)b;
    float neg = a * expm1f(x / a);
    return (x > 0.0f ? x : 0.0f) + (neg < 0.0f ? neg : 0.0f);
}

/* a is SELU's alpha, b its gamma. */
OSP_UNARY_FN float unary_selu_f32(float x, float a, float b) {
    return b * (x <= 0.0f ? a * expm1f(x) : x);
}

OSP_UNARY_FN float unary_leaky_relu_f32(float x, float a, float b) {
    (void)b;
    return unary_select_f32(x < 0.0f, a * x, x);
}

OSP_UNARY_FN float unary_thresholded_relu_f32(float x, float a, float b) {
    (void)b;
    return x > a ? x : 0.0f;
}

OSP_UNARY_FN float unary_hard_sigmoid_f32(float x, float a, float b) {
    float t = a * x + b;
    t = unary_select_f32(t < 1.0f, t, 1.0f);
    return unary_select_f32(t > 0.0f, t, 0.0f);
}

OSP_UNARY_FN float unary_hard_swish_f32(float x, float a, float b) {
    (void)a;
    (void)b;
    return x * unary_hard_sigmoid_f32(x, 1.0f / 6.0f, 0.5f);
}

#define OSP_UNARY_LIBM_F32(name, fn)                                           \
    OSP_UNARY_FN float unary_##name##_f32(float x, float a, float b) {         \
        (void)a;                                                               \
        (void)b;                                                               \
        return fn(x);                                                          \
    }
OSP_UNARY_LIBM_F32(sin, sinf)
OSP_UNARY_LIBM_F32(cos, cosf)
OSP_UNARY_LIBM_F32(tan, tanf)
OSP_UNARY_LIBM_F32(asin, asinf)
OSP_UNARY_LIBM_F32(acos, acosf)
OSP_UNARY_LIBM_F32(atan, atanf)
OSP_UNARY_LIBM_F32(sinh, sinhf)
OSP_UNARY_LIBM_F32(cosh, coshf)
OSP_UNARY_LIBM_F32(asinh, asinhf)
OSP_UNARY_LIBM_F32(acosh, acoshf)
OSP_UNARY_LIBM_F32(atanh, atanhf)
#undef OSP_UNARY_LIBM_F32

/* Every FP32 -> FP32 op with its function, for X-macro switches:
 *   #define CASE(op, fn) case op: ... fn(x, alpha, beta) ...; break;
 *   switch (op) { OSP_UNARY_F32_OPS(CASE) default: ... }
 * ISNAN and ISINF (BOOL out) and NOT (BOOL) are not in it. */
#define OSP_UNARY_F32_OPS(X)                                                   \
    X(OSP_UNARY_IDENTITY, unary_identity_f32)                                  \
    X(OSP_UNARY_ABS, unary_abs_f32)                                            \
    X(OSP_UNARY_NEG, unary_neg_f32)                                            \
    X(OSP_UNARY_SIGN, unary_sign_f32)                                          \
    X(OSP_UNARY_RELU, unary_relu_f32)                                          \
    X(OSP_UNARY_CLIP, unary_clip_f32)                                          \
    X(OSP_UNARY_EXP, unary_exp_f32)                                            \
    X(OSP_UNARY_LOG, unary_log_f32)                                            \
    X(OSP_UNARY_SQRT, unary_sqrt_f32)                                          \
    X(OSP_UNARY_RECIPROCAL, unary_reciprocal_f32)                              \
    X(OSP_UNARY_FLOOR, unary_floor_f32)                                        \
    X(OSP_UNARY_CEIL, unary_ceil_f32)                                          \
    X(OSP_UNARY_ROUND, unary_round_f32)                                        \
    X(OSP_UNARY_SIGMOID, unary_sigmoid_f32)                                    \
    X(OSP_UNARY_TANH, unary_tanh_f32)                                          \
    X(OSP_UNARY_ERF, unary_erf_f32)                                            \
    X(OSP_UNARY_GELU, unary_gelu_f32)                                          \
    X(OSP_UNARY_GELU_TANH, unary_gelu_tanh_f32)                                \
    X(OSP_UNARY_SILU, unary_silu_f32)                                          \
    X(OSP_UNARY_SOFTPLUS, unary_softplus_f32)                                  \
    X(OSP_UNARY_SOFTSIGN, unary_softsign_f32)                                  \
    X(OSP_UNARY_MISH, unary_mish_f32)                                          \
    X(OSP_UNARY_ELU, unary_elu_f32)                                            \
    X(OSP_UNARY_CELU, unary_celu_f32)                                          \
    X(OSP_UNARY_SELU, unary_selu_f32)                                          \
    X(OSP_UNARY_LEAKY_RELU, unary_leaky_relu_f32)                              \
    X(OSP_UNARY_THRESHOLDED_RELU, unary_thresholded_relu_f32)                  \
    X(OSP_UNARY_HARD_SIGMOID, unary_hard_sigmoid_f32)                          \
    X(OSP_UNARY_HARD_SWISH, unary_hard_swish_f32)                              \
    X(OSP_UNARY_SIN, unary_sin_f32)                                            \
    X(OSP_UNARY_COS, unary_cos_f32)                                            \
    X(OSP_UNARY_TAN, unary_tan_f32)                                            \
    X(OSP_UNARY_ASIN, unary_asin_f32)                                          \
    X(OSP_UNARY_ACOS, unary_acos_f32)                                          \
    X(OSP_UNARY_ATAN, unary_atan_f32)                                          \
    X(OSP_UNARY_SINH, unary_sinh_f32)                                          \
    X(OSP_UNARY_COSH, unary_cosh_f32)                                          \
    X(OSP_UNARY_ASINH, unary_asinh_f32)                                        \
    X(OSP_UNARY_ACOSH, unary_acosh_f32)                                        \
    X(OSP_UNARY_ATANH, unary_atanh_f32)

/* Whether op maps FP32 to FP32 (the ops OSP_UNARY_F32_OPS lists): what an
 * epilogue's activation (gemm_ex, conv, channel_affine) may be. */
OSP_UNARY_FN bool unary_is_f32_op(osp_unary_op op) {
    return op >= OSP_UNARY_IDENTITY && op < OSP_UNARY_OP_COUNT_ &&
           op != OSP_UNARY_NOT && op != OSP_UNARY_ISNAN &&
           op != OSP_UNARY_ISINF;
}

/* One element of any FP32 -> FP32 op, for code that applies an op to a
 * few values (an epilogue per element on a GPU); loops over many should
 * switch once outside with OSP_UNARY_F32_OPS instead. Other ops give x. */
OSP_UNARY_FN float unary_apply_f32(osp_unary_op op, float x, float alpha,
                                   float beta) {
#define OSP_UNARY_F32_CASE(o, fn)                                              \
    case o:                                                                    \
        return fn(x, alpha, beta);
    switch (op) {
        OSP_UNARY_F32_OPS(OSP_UNARY_F32_CASE)
    default:
        return x;
    }
#undef OSP_UNARY_F32_CASE
}

OSP_UNARY_FN bool unary_isnan_f32(float x) {
    return x != x;
}

/* detect_pos / detect_neg: ISINF's alpha != 0 and beta != 0. */
OSP_UNARY_FN bool unary_isinf_f32(float x, bool detect_pos, bool detect_neg) {
    return (detect_pos && x == INFINITY) || (detect_neg && x == -INFINITY);
}

/* ---- integers ------------------------------------------------------------
 */

/* ABS, NEG, SIGN, RELU and CLIP of a signed integer type T (U its unsigned
 * twin): ABS and NEG of the most negative value wrap to itself (two's
 * complement, as a GPU does) instead of overflowing. CLIP takes bounds
 * already converted with unary_clip_bound_<sfx>. */
#define OSP_UNARY_INT_RULES(T, U, sfx, TMIN, TMAX)                             \
    OSP_UNARY_FN T unary_abs_##sfx(T x) {                                      \
        return x < 0 ? (T)(0u - (U)x) : x;                                     \
    }                                                                          \
    OSP_UNARY_FN T unary_neg_##sfx(T x) {                                      \
        return (T)(0u - (U)x);                                                 \
    }                                                                          \
    OSP_UNARY_FN T unary_sign_##sfx(T x) {                                     \
        return (T)((x > 0) - (x < 0));                                         \
    }                                                                          \
    OSP_UNARY_FN T unary_relu_##sfx(T x) {                                     \
        return x < 0 ? 0 : x;                                                  \
    }                                                                          \
    OSP_UNARY_FN T unary_clip_##sfx(T x, T lo, T hi) {                         \
        T t = x < lo ? lo : x;                                                 \
        return t > hi ? hi : t;                                                \
    }                                                                          \
    /* A float bound in T: saturated to T's range, truncated toward zero;      \
     * NaN (no bound) gives `none`. */                                         \
    OSP_UNARY_FN T unary_clip_bound_##sfx(float v, T none) {                   \
        if (v != v)                                                            \
            return none;                                                       \
        if ((double)v <= (double)(TMIN))                                       \
            return (TMIN);                                                     \
        if ((double)v >= (double)(TMAX))                                       \
            return (TMAX);                                                     \
        return (T)v;                                                           \
    }

OSP_UNARY_INT_RULES(int8_t, uint8_t, i8, INT8_MIN, INT8_MAX)
OSP_UNARY_INT_RULES(int16_t, uint16_t, i16, INT16_MIN, INT16_MAX)
OSP_UNARY_INT_RULES(int32_t, uint32_t, i32, INT32_MIN, INT32_MAX)
OSP_UNARY_INT_RULES(int64_t, uint64_t, i64, INT64_MIN, INT64_MAX)
#undef OSP_UNARY_INT_RULES

/*
 * IEEE binary16 (FP16) and bfloat16 (BF16) <-> binary32 conversions in
 * plain C, for devices that store half types but compute in float.
 *
 * Narrowing rounds to nearest, ties to even; infinities stay infinities,
 * NaNs stay NaNs (quiet), subnormals are produced and read exactly, and
 * values past the largest finite half round to infinity. Header-only so the
 * CPU device and the unit tests share one definition.
 */
#pragma once

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint32_t half_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Shifts `mant` right by `shift` (1..31) bits, rounding to nearest even. */
static inline uint32_t half_shift_round_even(uint32_t mant, int shift) {
    uint32_t kept = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1u)))
        kept++;
    return kept;
}

static inline uint16_t fp32_to_fp16(float f) {
    uint32_t x = half_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7fffffffu;

    if (absx > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    if (absx >= 0x477ff000u) /* >= 65520 (or inf): rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absx >= 0x38800000u) {
        /* Normal half: rebias the exponent (127 -> 15), round 13 bits off.
         * A carry out of the mantissa correctly bumps the exponent. */
        uint32_t h = half_shift_round_even(absx, 13) - (112u << 10);
        return (uint16_t)(sign | h);
    }
    if (absx < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 ties to 0) */
        return sign;
    /* Subnormal half: value = mant * 2^(e-150) = h * 2^-24. The result may
     * round up to 0x400, the smallest normal, which is the right encoding. */
    uint32_t e = absx >> 23;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | half_shift_round_even(mant, (int)(126u - e)));
}

static inline float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (e == 0x1fu) /* inf / NaN */
        return half_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (e != 0)
        return half_f32_from_bits(sign | ((e + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return half_f32_from_bits(sign);
    /* Subnormal: normalise into a float exponent. */
    e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return half_f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

static inline uint16_t fp32_to_bf16(float f) {
    uint32_t x = half_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    /* Round to nearest even; overflow carries into infinity. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float bf16_to_fp32(uint16_t b) {
    return half_f32_from_bits((uint32_t)b << 16);
}

#ifdef __cplusplus
}
#endif

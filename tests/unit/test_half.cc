// server/common/half.h: FP16 and BF16 conversions, checked against known
// encodings, exhaustively on every 16-bit pattern, and against a
// brute-force nearest-value search on random floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "half.h"

namespace {

// The exact value of an FP16 pattern, from the IEEE definition.
double Fp16Value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return sign ? -mag : mag;
}

// Nearest FP16 to x by search over the positive finite patterns (ordered
// like their values), ties to the even pattern; infinity at >= 65520.
uint16_t NearestFp16(float x) {
    uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    double ax = std::fabs((double)x);
    if (ax >= 65520.0)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7bff; // largest pattern with value <= ax
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (Fp16Value(mid) <= ax)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff)
        return sign | lo;
    double below = ax - Fp16Value(lo), above = Fp16Value(lo + 1) - ax;
    if (above < below || (above == below && (lo & 1)))
        lo++;
    return sign | lo;
}

TEST(Half, KnownFp16Encodings) {
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00); // ties to even: infinity
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
    uint16_t nan = fp32_to_fp16(NAN);
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400); // min normal
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001); // min subnormal
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000); // tie -> even 0
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0000001f, -25)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002); // tie -> even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.0f, -24)), 0x03ff);
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -40)), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -40)), 0x8000);
}

TEST(Half, EveryFp16PatternWidensExactlyAndRoundTrips) {
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = fp16_to_fp32((uint16_t)h);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << h;
            continue;
        }
        if ((h & 0x7fff) == 0x7c00)
            EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY);
        else
            ASSERT_EQ((double)f, Fp16Value((uint16_t)h)) << std::hex << h;
        ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
    }
}

TEST(Half, RandomFloatsRoundToNearestEven) {
    std::mt19937 gen(std::random_device{}());
    std::uniform_int_distribution<int> exp(-30, 17);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    for (int i = 0; i < 200000; i++) {
        float x = std::ldexp(mant(gen), exp(gen)) * (gen() & 1 ? 1 : -1);
        ASSERT_EQ(fp32_to_fp16(x), NearestFp16(x)) << x;
    }
    // Exact midpoints between neighbouring halves: ties go to even.
    for (uint16_t h = 0; h < 0x7bff; h += 7) {
        float mid = (float)((Fp16Value(h) + Fp16Value(h + 1)) / 2);
        ASSERT_EQ(fp32_to_fp16(mid), (h & 1) ? h + 1 : h) << h;
    }
}

TEST(Half, Bf16) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
    EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7f80);
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
    // A NaN whose payload sits only in the low bits stays NaN.
    uint32_t low_nan_bits = 0x7f800001;
    float low_nan;
    memcpy(&low_nan, &low_nan_bits, 4);
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(low_nan))));
    EXPECT_EQ(fp32_to_bf16(half_f32_from_bits(0x3f808000)), 0x3f80); // tie
    EXPECT_EQ(fp32_to_bf16(half_f32_from_bits(0x3f818000)), 0x3f82); // tie
    EXPECT_EQ(fp32_to_bf16(half_f32_from_bits(0x3f808001)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(half_f32_from_bits(0x7f7fffff)),
              0x7f80); // overflow
    EXPECT_EQ(fp32_to_bf16(half_f32_from_bits(0x00010000)),
              0x0001); // subnormal
    for (uint32_t b = 0; b <= 0xffff; b++) {
        float f = bf16_to_fp32((uint16_t)b);
        if (std::isnan(f))
            continue;
        ASSERT_EQ(fp32_to_bf16(f), b) << std::hex << b;
    }
}

} // namespace

// The tensor ops of osprey/tensor_ops.h on the CPU device (the reference
// every other device is tested against), checked against the plain loops
// below: elementwise (unary, binary_nd, where), data movement
// (copy_strided, gather, fill, pad), reductions and normalisations
// (reduce, softmax, layer_norm, channel_affine), topk and cumsum. Then the
// dispatchers: their argument checks, UNSUPPORTED for a device without a
// slot, and osp_device_supports_op.
//
// Random data comes from a fixed seed, printed with each failure; set
// OSPREY_TEST_SEED to try another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#include "osprey/tensor_ops.h"

namespace {

// ---- harness --------------------------------------------------------------

using Dims = std::vector<int64_t>;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

class TensorOps : public ::testing::Test {
  protected:
    void SetUp() override {
        seed_ = TestSeed(20240611);
        gen_.seed(seed_);
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(osp_device_cpu(), &s));
        stream_.reset(s);
    }

    osp_stream *stream() {
        return stream_.get();
    }

    std::vector<float> Floats(size_t n, float lo = -3.0f, float hi = 3.0f) {
        std::uniform_real_distribution<float> dist(lo, hi);
        std::vector<float> v(n);
        for (auto &x : v)
            x = dist(gen_);
        return v;
    }

    template <typename T> std::vector<T> Ints(size_t n, T lo, T hi) {
        std::uniform_int_distribution<int64_t> dist(lo, hi);
        std::vector<T> v(n);
        for (auto &x : v)
            x = (T)dist(gen_);
        return v;
    }

    int64_t Int(int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
    }

    uint64_t seed_ = 0;
    std::mt19937_64 gen_;
    StreamPtr stream_;
};

#define TRACE_SEED() SCOPED_TRACE("OSPREY_TEST_SEED=" + std::to_string(seed_))

int64_t Count(const Dims &dims) {
    int64_t n = 1;
    for (int64_t d : dims)
        n *= d;
    return n;
}

Dims Contiguous(const Dims &dims) {
    Dims s(dims.size());
    int64_t step = 1;
    for (size_t d = dims.size(); d-- > 0;) {
        s[d] = step;
        step *= dims[d];
    }
    return s;
}

// Calls f(index) for every index of the box dims, row-major.
template <typename F> void ForEachIndex(const Dims &dims, F f) {
    int64_t count = Count(dims);
    Dims idx(dims.size(), 0);
    for (int64_t n = 0; n < count; n++) {
        f(idx);
        for (size_t d = dims.size(); d-- > 0;) {
            if (++idx[d] < dims[d])
                break;
            idx[d] = 0;
        }
    }
}

int64_t Offset(const Dims &idx, const Dims &strides) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); d++)
        off += idx[d] * strides[d];
    return off;
}

void Expect(bool ok, double got, double want, const std::string &what) {
    EXPECT_TRUE(ok) << what << ": got " << got << ", want " << want;
}

// |got - want| <= rel |want| + abs, NaN only where NaN is wanted.
bool Close(double got, double want, double rel = 1e-5, double abs = 1e-6) {
    if (std::isnan(want) || std::isnan(got))
        return std::isnan(want) && std::isnan(got);
    if (std::isinf(want) || std::isinf(got))
        return got == want;
    return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}

// ---- unary ----------------------------------------------------------------

struct UnaryCase {
    osp_unary_op op;
    const char *name;
    float lo, hi;      // the domain sampled
    float alpha, beta; // the op's parameters
    double (*ref)(double x, double a, double b);
};

double Sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

double Softplus(double x) {
    return std::log1p(std::exp(x));
}

const UnaryCase kFloatUnary[] = {
    {OSP_UNARY_IDENTITY, "identity", -3, 3, 0, 0,
     [](double x, double, double) { return x; }},
    {OSP_UNARY_ABS, "abs", -3, 3, 0, 0,
     [](double x, double, double) { return std::fabs(x); }},
    {OSP_UNARY_NEG, "neg", -3, 3, 0, 0,
     [](double x, double, double) { return -x; }},
    {OSP_UNARY_SIGN, "sign", -3, 3, 0, 0,
     [](double x, double, double) { return x > 0   ? 1.0
                                           : x < 0 ? -1.0
                                                   : 0.0; }},
    {OSP_UNARY_RELU, "relu", -3, 3, 0, 0,
     [](double x, double, double) { return std::max(x, 0.0); }},
    {OSP_UNARY_CLIP, "clip", -3, 3, -1.0f, 1.5f,
     [](double x, double a, double b) { return std::min(std::max(x, a), b); }},
    {OSP_UNARY_EXP, "exp", -5, 5, 0, 0,
     [](double x, double, double) { return std::exp(x); }},
    {OSP_UNARY_LOG, "log", 0.05f, 5, 0, 0,
     [](double x, double, double) { return std::log(x); }},
    {OSP_UNARY_SQRT, "sqrt", 0, 5, 0, 0,
     [](double x, double, double) { return std::sqrt(x); }},
    {OSP_UNARY_RECIPROCAL, "reciprocal", 0.05f, 5, 0, 0,
     [](double x, double, double) { return 1.0 / x; }},
    {OSP_UNARY_FLOOR, "floor", -3, 3, 0, 0,
     [](double x, double, double) { return std::floor(x); }},
    {OSP_UNARY_CEIL, "ceil", -3, 3, 0, 0,
     [](double x, double, double) { return std::ceil(x); }},
    {OSP_UNARY_ROUND, "round", -3, 3, 0, 0,
     [](double x, double, double) { return std::nearbyint(x); }},
    {OSP_UNARY_SIGMOID, "sigmoid", -20, 20, 0, 0,
     [](double x, double, double) { return Sigmoid(x); }},
    {OSP_UNARY_TANH, "tanh", -5, 5, 0, 0,
     [](double x, double, double) { return std::tanh(x); }},
    {OSP_UNARY_ERF, "erf", -3, 3, 0, 0,
     [](double x, double, double) { return std::erf(x); }},
    {OSP_UNARY_GELU, "gelu", -5, 5, 0, 0,
     [](double x, double, double) {
         return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
     }},
    {OSP_UNARY_GELU_TANH, "gelu_tanh", -5, 5, 0, 0,
     [](double x, double, double) {
         double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
         return 0.5 * x * (1.0 + std::tanh(u));
     }},
    {OSP_UNARY_SILU, "silu", -8, 8, 0, 0,
     [](double x, double, double) { return x * Sigmoid(x); }},
    {OSP_UNARY_SOFTPLUS, "softplus", -20, 20, 0, 0,
     [](double x, double, double) { return Softplus(x); }},
    {OSP_UNARY_SOFTSIGN, "softsign", -5, 5, 0, 0,
     [](double x, double, double) { return x / (1.0 + std::fabs(x)); }},
    {OSP_UNARY_MISH, "mish", -8, 8, 0, 0,
     [](double x, double, double) { return x * std::tanh(Softplus(x)); }},
    {OSP_UNARY_ELU, "elu", -4, 4, 0.7f, 0,
     [](double x, double a, double) {
         return x < 0 ? a * (std::exp(x) - 1) : x;
     }},
    {OSP_UNARY_CELU, "celu", -4, 4, 1.3f, 0,
     [](double x, double a, double) {
         return std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1));
     }},
    {OSP_UNARY_SELU, "selu", -4, 4, 1.6732632f, 1.0507009f,
     [](double x, double a, double b) {
         return b * (x <= 0 ? a * (std::exp(x) - 1) : x);
     }},
    {OSP_UNARY_LEAKY_RELU, "leaky_relu", -3, 3, 0.1f, 0,
     [](double x, double a, double) { return x < 0 ? a * x : x; }},
    {OSP_UNARY_THRESHOLDED_RELU, "thresholded_relu", -3, 3, 0.5f, 0,
     [](double x, double a, double) { return x > a ? x : 0.0; }},
    {OSP_UNARY_HARD_SIGMOID, "hard_sigmoid", -6, 6, 0.2f, 0.5f,
     [](double x, double a, double b) {
         return std::max(0.0, std::min(1.0, a * x + b));
     }},
    {OSP_UNARY_HARD_SWISH, "hard_swish", -6, 6, 0, 0,
     [](double x, double, double) {
         return x * std::max(0.0, std::min(1.0, x / 6 + 0.5));
     }},
    {OSP_UNARY_SIN, "sin", -3, 3, 0, 0,
     [](double x, double, double) { return std::sin(x); }},
    {OSP_UNARY_COS, "cos", -3, 3, 0, 0,
     [](double x, double, double) { return std::cos(x); }},
    {OSP_UNARY_TAN, "tan", -1.2f, 1.2f, 0, 0,
     [](double x, double, double) { return std::tan(x); }},
    {OSP_UNARY_ASIN, "asin", -0.95f, 0.95f, 0, 0,
     [](double x, double, double) { return std::asin(x); }},
    {OSP_UNARY_ACOS, "acos", -0.95f, 0.95f, 0, 0,
     [](double x, double, double) { return std::acos(x); }},
    {OSP_UNARY_ATAN, "atan", -5, 5, 0, 0,
     [](double x, double, double) { return std::atan(x); }},
    {OSP_UNARY_SINH, "sinh", -4, 4, 0, 0,
     [](double x, double, double) { return std::sinh(x); }},
    {OSP_UNARY_COSH, "cosh", -4, 4, 0, 0,
     [](double x, double, double) { return std::cosh(x); }},
    {OSP_UNARY_ASINH, "asinh", -5, 5, 0, 0,
     [](double x, double, double) { return std::asinh(x); }},
    {OSP_UNARY_ACOSH, "acosh", 1.05f, 5, 0, 0,
     [](double x, double, double) { return std::acosh(x); }},
    {OSP_UNARY_ATANH, "atanh", -0.95f, 0.95f, 0, 0,
     [](double x, double, double) { return std::atanh(x); }},
};

osp_unary_args UnaryArgs(osp_unary_op op, osp_datatype dtype, const void *x,
                         void *y, size_t n, float alpha = 0, float beta = 0) {
    osp_unary_args a{};
    a.op = op;
    a.dtype = dtype;
    a.x = x;
    a.y = y;
    a.n = n;
    a.alpha = alpha;
    a.beta = beta;
    return a;
}

TEST_F(TensorOps, UnaryFloatOpsMatchReference) {
    TRACE_SEED();
    // Every FP32 -> FP32 op is listed once.
    EXPECT_EQ(std::size(kFloatUnary), (size_t)OSP_UNARY_OP_COUNT_ - 3);
    for (const UnaryCase &c : kFloatUnary) {
        SCOPED_TRACE(c.name);
        std::vector<float> x = Floats(1000, c.lo, c.hi), y(x.size());
        auto args = UnaryArgs(c.op, OSP_TYPE_FP32, x.data(), y.data(), x.size(),
                              c.alpha, c.beta);
        ASSERT_OK(osp_op_unary(stream(), &args));
        for (size_t i = 0; i < x.size(); i++) {
            double want = c.ref(x[i], c.alpha, c.beta);
            Expect(Close(y[i], want), y[i], want,
                   std::string(c.name) + "(" + std::to_string(x[i]) + ")");
        }
    }
}

TEST_F(TensorOps, UnaryEdgeValues) {
    // Half to even; NaN through RELU and CLIP; no overflow in sigmoid,
    // softplus and GELU's tails.
    std::vector<float> x = {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f};
    std::vector<float> y(x.size());
    auto args =
        UnaryArgs(OSP_UNARY_ROUND, OSP_TYPE_FP32, x.data(), y.data(), x.size());
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(y, (std::vector<float>{-2, -2, -0.0f, 0, 2, 2}));

    float nan_in[2] = {kNan, -1.0f}, out[2];
    args = UnaryArgs(OSP_UNARY_RELU, OSP_TYPE_FP32, nan_in, out, 2);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], 0.0f);
    args = UnaryArgs(OSP_UNARY_CLIP, OSP_TYPE_FP32, nan_in, out, 2, 0, 1);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], 0.0f);

    float big[3] = {-200.0f, 200.0f, -10.0f}, r[3];
    args = UnaryArgs(OSP_UNARY_SIGMOID, OSP_TYPE_FP32, big, r, 2);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(r[0], 0.0f);
    EXPECT_EQ(r[1], 1.0f);
    args = UnaryArgs(OSP_UNARY_SOFTPLUS, OSP_TYPE_FP32, big, r, 2);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(r[0], 0.0f);
    EXPECT_EQ(r[1], 200.0f);
    args = UnaryArgs(OSP_UNARY_GELU, OSP_TYPE_FP32, big + 2, r, 1);
    ASSERT_OK(osp_op_unary(stream(), &args));
    // About -7.6e-23: 1 + erf(x) would cancel to 0.
    EXPECT_TRUE(
        Close(r[0], 0.5 * -10.0 * std::erfc(10.0 / std::sqrt(2.0)), 1e-4, 0))
        << r[0];
}

// exp, tanh, erf, sigmoid and GELU's erfc are the device's own
// (branch-free, so that they vectorise) rather than libm's: a dense sweep
// against double precision, and their special values.
TEST_F(TensorOps, UnaryTranscendentalsSweep) {
    std::vector<float> x;
    for (double v = -103.0; v <= 88.7; v += 0.00097)
        x.push_back((float)v);
    for (float v : {1e-30f, -1e-30f, 1e-7f, -3e-4f, 0.625f, -0.625f})
        x.push_back(v);
    std::vector<float> y(x.size());
    struct {
        osp_unary_op op;
        const char *name;
        double (*ref)(double);
        double rel, abs;
    } cases[] = {
        {OSP_UNARY_EXP, "exp", [](double v) { return std::exp(v); }, 3e-7,
         2e-45},
        {OSP_UNARY_TANH, "tanh", [](double v) { return std::tanh(v); }, 3e-7,
         0},
        {OSP_UNARY_ERF, "erf", [](double v) { return std::erf(v); }, 1e-6,
         1e-37},
        {OSP_UNARY_SIGMOID, "sigmoid", [](double v) { return Sigmoid(v); },
         1e-6, 2e-45},
        // 2.5e-6 down to x = -5.7, then looser as x^2 grows (rounding
        // x / sqrt 2 alone costs x^2 6e-8); below 1e-30 only absolutely.
        {OSP_UNARY_GELU, "gelu",
         [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); },
         2e-5, 1e-30},
    };
    for (const auto &c : cases) {
        auto args =
            UnaryArgs(c.op, OSP_TYPE_FP32, x.data(), y.data(), x.size());
        ASSERT_OK(osp_op_unary(stream(), &args));
        for (size_t i = 0; i < x.size(); i++) {
            double want = c.ref(x[i]);
            ASSERT_TRUE(std::fabs(y[i] - want) <=
                        c.rel * std::fabs(want) + c.abs)
                << c.name << "(" << x[i] << ") = " << y[i] << ", want " << want;
        }
    }
    struct {
        osp_unary_op op;
        float in, want;
    } specials[] = {
        {OSP_UNARY_EXP, 88.8f, kInf},         {OSP_UNARY_EXP, 1e30f, kInf},
        {OSP_UNARY_EXP, kInf, kInf},          {OSP_UNARY_EXP, -104.0f, 0.0f},
        {OSP_UNARY_EXP, -kInf, 0.0f},         {OSP_UNARY_EXP, 0.0f, 1.0f},
        {OSP_UNARY_TANH, kInf, 1.0f},         {OSP_UNARY_TANH, -kInf, -1.0f},
        {OSP_UNARY_TANH, 50.0f, 1.0f},        {OSP_UNARY_ERF, kInf, 1.0f},
        {OSP_UNARY_ERF, -kInf, -1.0f},        {OSP_UNARY_ERF, 0.0f, 0.0f},
        {OSP_UNARY_SIGMOID, kInf, 1.0f},      {OSP_UNARY_SIGMOID, -kInf, 0.0f},
        {OSP_UNARY_SIGMOID, -120.0f, 0.0f},   {OSP_UNARY_SILU, kInf, kInf},
        {OSP_UNARY_GELU, kInf, kInf},         {OSP_UNARY_GELU, -20.0f, -0.0f},
        {OSP_UNARY_GELU, 0.0f, 0.0f},         {OSP_UNARY_GELU, 100.0f, 100.0f},
        {OSP_UNARY_LEAKY_RELU, -kInf, -kInf}, {OSP_UNARY_HARD_SWISH, 7, 7},
    };
    for (const auto &c : specials) {
        float out = -42;
        auto args = UnaryArgs(c.op, OSP_TYPE_FP32, &c.in, &out, 1, 0.1f);
        ASSERT_OK(osp_op_unary(stream(), &args));
        EXPECT_EQ(out, c.want) << "op " << c.op << "(" << c.in << ")";
    }
    for (osp_unary_op op : {OSP_UNARY_EXP, OSP_UNARY_TANH, OSP_UNARY_ERF,
                            OSP_UNARY_SIGMOID, OSP_UNARY_SILU, OSP_UNARY_GELU,
                            OSP_UNARY_GELU_TANH, OSP_UNARY_LEAKY_RELU}) {
        float nan = kNan, out = 0;
        auto args = UnaryArgs(op, OSP_TYPE_FP32, &nan, &out, 1, 0.1f);
        ASSERT_OK(osp_op_unary(stream(), &args));
        EXPECT_TRUE(std::isnan(out)) << "op " << op << " of NaN: " << out;
    }
}

TEST_F(TensorOps, UnaryInPlace) {
    std::vector<float> x = Floats(257), want(x.size());
    for (size_t i = 0; i < x.size(); i++)
        want[i] = x[i] < 0 ? 0.1f * x[i] : x[i];
    auto args = UnaryArgs(OSP_UNARY_LEAKY_RELU, OSP_TYPE_FP32, x.data(),
                          x.data(), x.size(), 0.1f);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(x, want);
}

template <typename T> void CheckSignedUnary(osp_stream *stream) {
    SCOPED_TRACE(sizeof(T));
    const T lo = std::numeric_limits<T>::min(),
            hi = std::numeric_limits<T>::max();
    std::vector<T> x = {lo, (T)(lo + 1), -7, -1, 0, 1, 7, hi};
    std::vector<T> y(x.size());
    auto run = [&](osp_unary_op op, float a = 0, float b = 0) {
        auto args = UnaryArgs(op,
                              sizeof(T) == 1   ? OSP_TYPE_INT8
                              : sizeof(T) == 2 ? OSP_TYPE_INT16
                              : sizeof(T) == 4 ? OSP_TYPE_INT32
                                               : OSP_TYPE_INT64,
                              x.data(), y.data(), x.size(), a, b);
        osp_error *err = osp_op_unary(stream, &args);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
    };
    run(OSP_UNARY_ABS);
    // |min| wraps to min (two's complement), as on a GPU.
    EXPECT_EQ(y, (std::vector<T>{lo, hi, 7, 1, 0, 1, 7, hi}));
    run(OSP_UNARY_NEG);
    EXPECT_EQ(y, (std::vector<T>{lo, hi, 7, 1, 0, -1, -7, (T)(lo + 1)}));
    run(OSP_UNARY_SIGN);
    EXPECT_EQ(y, (std::vector<T>{-1, -1, -1, -1, 0, 1, 1, 1}));
    run(OSP_UNARY_RELU);
    EXPECT_EQ(y, (std::vector<T>{0, 0, 0, 0, 0, 1, 7, hi}));
    run(OSP_UNARY_CLIP, -1.0f, 5.0f);
    EXPECT_EQ(y, (std::vector<T>{-1, -1, -1, -1, 0, 1, 5, 5}));
    // Bounds beyond the type saturate instead of overflowing.
    run(OSP_UNARY_CLIP, -1e30f, 1e30f);
    EXPECT_EQ(y, x);
}

TEST_F(TensorOps, UnarySignedIntegers) {
    CheckSignedUnary<int8_t>(stream());
    CheckSignedUnary<int16_t>(stream());
    CheckSignedUnary<int32_t>(stream());
    CheckSignedUnary<int64_t>(stream());
    uint8_t u[3] = {0, 7, 255}, v[3];
    auto args = UnaryArgs(OSP_UNARY_ABS, OSP_TYPE_UINT8, u, v, 3);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(memcmp(u, v, 3), 0);
}

TEST_F(TensorOps, UnaryBoolResults) {
    bool b[3] = {true, false, true}, nb[3];
    auto args = UnaryArgs(OSP_UNARY_NOT, OSP_TYPE_BOOL, b, nb, 3);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_TRUE(!nb[0] && nb[1] && !nb[2]);

    float x[5] = {1.0f, kNan, kInf, -kInf, -0.0f};
    bool r[5];
    args = UnaryArgs(OSP_UNARY_ISNAN, OSP_TYPE_FP32, x, r, 5);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(std::vector<bool>(r, r + 5),
              (std::vector<bool>{false, true, false, false, false}));
    struct {
        float pos, neg;
        std::vector<bool> want;
    } cases[] = {
        {1, 1, {false, false, true, true, false}},
        {1, 0, {false, false, true, false, false}},
        {0, 1, {false, false, false, true, false}},
        {0, 0, {false, false, false, false, false}},
    };
    for (const auto &c : cases) {
        args = UnaryArgs(OSP_UNARY_ISINF, OSP_TYPE_FP32, x, r, 5, c.pos, c.neg);
        ASSERT_OK(osp_op_unary(stream(), &args));
        EXPECT_EQ(std::vector<bool>(r, r + 5), c.want) << c.pos << " " << c.neg;
    }
}

TEST_F(TensorOps, UnaryIdentityCopiesAnyType) {
    uint16_t half[4] = {0x3c00, 0xc000, 0x7e00, 1}, out[4] = {};
    auto args = UnaryArgs(OSP_UNARY_IDENTITY, OSP_TYPE_FP16, half, out, 4);
    ASSERT_OK(osp_op_unary(stream(), &args));
    EXPECT_EQ(memcmp(half, out, sizeof half), 0);
}

TEST_F(TensorOps, UnaryChecks) {
    float x[2] = {1, 2}, y[2];
    auto args = UnaryArgs(OSP_UNARY_EXP, OSP_TYPE_INT32, x, y, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = UnaryArgs(OSP_UNARY_NOT, OSP_TYPE_FP32, x, y, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = UnaryArgs(OSP_UNARY_NEG, OSP_TYPE_UINT8, x, y, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = UnaryArgs(OSP_UNARY_OP_COUNT_, OSP_TYPE_FP32, x, y, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = UnaryArgs(OSP_UNARY_EXP, OSP_TYPE_FP32, nullptr, y, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = UnaryArgs(OSP_UNARY_EXP, OSP_TYPE_FP32, x, nullptr, 2);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), &args), OSP_ERROR_INVALID_ARG);
    // Zero elements: nothing to read, so NULL pointers are fine.
    args = UnaryArgs(OSP_UNARY_EXP, OSP_TYPE_FP32, nullptr, nullptr, 0);
    ASSERT_OK(osp_op_unary(stream(), &args));
}

// ---- binary_nd ------------------------------------------------------------

// An operand of binary_nd or where: its own data, and the strides through
// which the op reads it over the output shape (0 where it broadcasts,
// negative where it is a reversed view).
template <typename T> struct Operand {
    std::vector<T> data;
    Dims strides;
    int64_t base = 0; // element of data at index 0

    const T *ptr() const {
        return data.data() + base;
    }
    T at(const Dims &idx) const {
        return data[(size_t)(base + Offset(idx, strides))];
    }
};

// An operand over `out` that broadcasts along the dimensions in `bcast`
// and runs backwards along those in `reverse`, with values from gen.
template <typename T, typename G>
Operand<T> MakeOperand(const Dims &out, const std::vector<bool> &bcast,
                       const std::vector<bool> &reverse, G gen) {
    Dims own = out;
    for (size_t d = 0; d < out.size(); d++)
        if (bcast[d])
            own[d] = 1;
    Operand<T> op;
    op.strides = Contiguous(own);
    for (size_t d = 0; d < out.size(); d++) {
        if (bcast[d]) {
            op.strides[d] = 0;
        } else if (reverse[d]) {
            op.base += (own[d] - 1) * op.strides[d];
            op.strides[d] = -op.strides[d];
        }
    }
    op.data.resize((size_t)Count(own));
    for (auto &v : op.data)
        v = gen();
    return op;
}

osp_binary_nd_args BinaryArgs(osp_binary_nd_op op, osp_datatype dtype,
                              const Dims &dims, const void *a, const Dims &sa,
                              const void *b, const Dims &sb, void *out) {
    osp_binary_nd_args args{};
    args.op = op;
    args.dtype = dtype;
    args.rank = (int)dims.size();
    std::copy(dims.begin(), dims.end(), args.dims);
    std::copy(sa.begin(), sa.end(), args.a_strides);
    std::copy(sb.begin(), sb.end(), args.b_strides);
    args.a = a;
    args.b = b;
    args.out = out;
    return args;
}

float RefBinaryF32(osp_binary_nd_op op, float x, float y) {
    switch (op) {
    case OSP_BINARY_ND_ADD:
        return x + y;
    case OSP_BINARY_ND_SUB:
        return x - y;
    case OSP_BINARY_ND_MUL:
        return x * y;
    case OSP_BINARY_ND_DIV:
        return x / y;
    case OSP_BINARY_ND_POW:
        return std::pow(x, y);
    case OSP_BINARY_ND_MAX:
        return std::max(x, y);
    case OSP_BINARY_ND_MIN:
        return std::min(x, y);
    case OSP_BINARY_ND_MOD: {
        float r = std::fmod(x, y);
        return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
    }
    case OSP_BINARY_ND_FMOD:
        return std::fmod(x, y);
    case OSP_BINARY_ND_PRELU:
        return x < 0 ? x * y : x;
    default:
        return 0;
    }
}

bool RefCompare(osp_binary_nd_op op, double x, double y) {
    switch (op) {
    case OSP_BINARY_ND_EQUAL:
        return x == y;
    case OSP_BINARY_ND_LESS:
        return x < y;
    case OSP_BINARY_ND_LESS_EQUAL:
        return x <= y;
    case OSP_BINARY_ND_GREATER:
        return x > y;
    default:
        return x >= y;
    }
}

// Random shapes of rank 0 to 5, each input broadcasting and reversed along
// random dimensions, every FP32 op and comparison.
TEST_F(TensorOps, BinaryNdBroadcastFloat) {
    TRACE_SEED();
    const osp_binary_nd_op ops[] = {
        OSP_BINARY_ND_ADD,           OSP_BINARY_ND_SUB,
        OSP_BINARY_ND_MUL,           OSP_BINARY_ND_DIV,
        OSP_BINARY_ND_POW,           OSP_BINARY_ND_MAX,
        OSP_BINARY_ND_MIN,           OSP_BINARY_ND_MOD,
        OSP_BINARY_ND_FMOD,          OSP_BINARY_ND_PRELU,
        OSP_BINARY_ND_EQUAL,         OSP_BINARY_ND_LESS,
        OSP_BINARY_ND_LESS_EQUAL,    OSP_BINARY_ND_GREATER,
        OSP_BINARY_ND_GREATER_EQUAL,
    };
    for (int trial = 0; trial < 300; trial++) {
        osp_binary_nd_op op = ops[trial % std::size(ops)];
        int rank = (int)Int(0, 5);
        Dims dims(rank);
        std::vector<bool> ba(rank), bb(rank), ra(rank), rb(rank);
        for (int d = 0; d < rank; d++) {
            dims[d] = Int(1, 6);
            ba[d] = Int(0, 3) == 0;
            bb[d] = Int(0, 3) == 0;
            ra[d] = Int(0, 4) == 0;
            rb[d] = Int(0, 4) == 0;
        }
        bool pow = op == OSP_BINARY_ND_POW;
        std::uniform_real_distribution<float> pos(0.5f, 2.0f), any(-3, 3);
        // Small integers make EQUAL and the comparisons hit ties.
        auto gen = [&] {
            return pow ? pos(gen_) : (float)Int(-4, 4) + (Int(0, 1) ? 0.5f : 0);
        };
        auto a = MakeOperand<float>(dims, ba, ra, gen);
        auto b = MakeOperand<float>(dims, bb, rb, [&] {
            float v = gen();
            return v == 0 ? 1.5f : v; // no division by zero
        });
        bool cmp = op >= OSP_BINARY_ND_EQUAL;
        std::vector<float> out((size_t)Count(dims));
        std::vector<uint8_t> out_b(out.size());
        auto args =
            BinaryArgs(op, OSP_TYPE_FP32, dims, a.ptr(), a.strides, b.ptr(),
                       b.strides, cmp ? (void *)out_b.data() : out.data());
        ASSERT_OK(osp_op_binary_nd(stream(), &args));
        int64_t i = 0;
        ForEachIndex(dims, [&](const Dims &idx) {
            float x = a.at(idx), y = b.at(idx);
            if (cmp)
                EXPECT_EQ(out_b[i], RefCompare(op, x, y))
                    << "op " << op << " " << x << " " << y;
            else
                EXPECT_FLOAT_EQ(out[i], RefBinaryF32(op, x, y))
                    << "op " << op << " " << x << " " << y;
            i++;
        });
        if (HasFailure())
            FAIL() << "trial " << trial << " rank " << rank;
    }
}

// The row shapes with loops of their own: both inputs contiguous, one a
// broadcast scalar (per-channel bias), a row vector broadcast over rows,
// and a strided (transposed) input.
TEST_F(TensorOps, BinaryNdFastPaths) {
    Dims dims = {3, 16, 37};
    struct Shape {
        const char *name;
        std::vector<bool> ba, bb, ra, rb;
    } shapes[] = {
        {"contiguous", {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
        {"channel bias", {0, 0, 0}, {1, 0, 1}, {0, 0, 0}, {0, 0, 0}},
        {"scalar a", {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
        {"row vector", {0, 0, 0}, {1, 1, 0}, {0, 0, 0}, {0, 0, 0}},
        {"reversed", {0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 1}},
    };
    for (const Shape &s : shapes) {
        SCOPED_TRACE(s.name);
        auto a =
            MakeOperand<float>(dims, s.ba, s.ra, [&] { return Floats(1)[0]; });
        auto b =
            MakeOperand<float>(dims, s.bb, s.rb, [&] { return Floats(1)[0]; });
        std::vector<float> out((size_t)Count(dims));
        auto args = BinaryArgs(OSP_BINARY_ND_MUL, OSP_TYPE_FP32, dims, a.ptr(),
                               a.strides, b.ptr(), b.strides, out.data());
        ASSERT_OK(osp_op_binary_nd(stream(), &args));
        int64_t i = 0;
        ForEachIndex(dims, [&](const Dims &idx) {
            ASSERT_EQ(out[i], a.at(idx) * b.at(idx)) << i;
            i++;
        });
    }
    // A transposed a: its strides are not row-major at all.
    std::vector<float> at = Floats(16 * 37), bt = Floats(16 * 37), out(16 * 37);
    auto args = BinaryArgs(OSP_BINARY_ND_SUB, OSP_TYPE_FP32, {16, 37},
                           at.data(), {1, 16}, bt.data(), {37, 1}, out.data());
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 37; c++)
            ASSERT_EQ(out[r * 37 + c], at[c * 16 + r] - bt[r * 37 + c]);
}

TEST_F(TensorOps, BinaryNdRankZeroAndEmpty) {
    float a = 3, b = 4, out = 0;
    auto args =
        BinaryArgs(OSP_BINARY_ND_POW, OSP_TYPE_FP32, {}, &a, {}, &b, {}, &out);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(out, 81.0f);
    // Zero output elements: succeeds without touching (NULL) operands.
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {3, 0, 2}, nullptr,
                      {0, 0, 0}, nullptr, {0, 0, 0}, nullptr);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
}

TEST_F(TensorOps, BinaryNdIntegerDivision) {
    const int32_t mn = INT32_MIN;
    std::vector<int32_t> a = {7, -7, 7, -7, 5, mn, mn, 3, 0, -1};
    std::vector<int32_t> b = {2, 2, -2, -2, 0, -1, 1, 0, 0, 0};
    std::vector<int32_t> out(a.size());
    Dims dims = {(int64_t)a.size()};
    auto run = [&](osp_binary_nd_op op) {
        auto args = BinaryArgs(op, OSP_TYPE_INT32, dims, a.data(), {1},
                               b.data(), {1}, out.data());
        osp_error *err = osp_op_binary_nd(stream(), &args);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
    };
    run(OSP_BINARY_ND_DIV); // truncates; / 0 gives 0; min / -1 wraps
    EXPECT_EQ(out, (std::vector<int32_t>{3, -3, -3, 3, 0, mn, mn, 0, 0, 0}));
    run(OSP_BINARY_ND_MOD); // the divisor's sign
    EXPECT_EQ(out, (std::vector<int32_t>{1, 1, -1, -1, 0, 0, 0, 0, 0, 0}));
    run(OSP_BINARY_ND_FMOD); // the dividend's sign
    EXPECT_EQ(out, (std::vector<int32_t>{1, -1, 1, -1, 0, 0, 0, 0, 0, 0}));

    // Overflow wraps.
    int32_t big[2] = {INT32_MAX, mn}, one[2] = {1, 1}, r[2];
    auto args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_INT32, {2}, big, {1},
                           one, {1}, r);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(r[0], mn);
    args = BinaryArgs(OSP_BINARY_ND_SUB, OSP_TYPE_INT32, {2}, big, {1}, one,
                      {1}, r);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(r[1], INT32_MAX);

    // Narrow types: int8 and uint8, including the -128 / -1 corner.
    int8_t a8[5] = {-128, -128, 100, -7, 9}, b8[5] = {-1, 0, 100, 2, -4};
    int8_t o8[5];
    args =
        BinaryArgs(OSP_BINARY_ND_DIV, OSP_TYPE_INT8, {5}, a8, {1}, b8, {1}, o8);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<int8_t>(o8, o8 + 5),
              (std::vector<int8_t>{-128, 0, 1, -3, -2}));
    args =
        BinaryArgs(OSP_BINARY_ND_MUL, OSP_TYPE_INT8, {5}, a8, {1}, b8, {1}, o8);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<int8_t>(o8, o8 + 5),
              (std::vector<int8_t>{-128, 0, 16, -14, -36}));
    args =
        BinaryArgs(OSP_BINARY_ND_MOD, OSP_TYPE_INT8, {5}, a8, {1}, b8, {1}, o8);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<int8_t>(o8, o8 + 5),
              (std::vector<int8_t>{0, 0, 0, 1, -3}));
    uint16_t u[3] = {65535, 10, 9}, v[3] = {65535, 0, 4}, w[3];
    args =
        BinaryArgs(OSP_BINARY_ND_MUL, OSP_TYPE_UINT16, {3}, u, {1}, v, {1}, w);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(w[0], 1); // 65535^2 mod 2^16, with no signed overflow
    args =
        BinaryArgs(OSP_BINARY_ND_DIV, OSP_TYPE_UINT16, {3}, u, {1}, v, {1}, w);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<uint16_t>(w, w + 3),
              (std::vector<uint16_t>{1, 0, 2}));
}

TEST_F(TensorOps, BinaryNdIntegerPowAndBroadcast) {
    int64_t base[6] = {2, -2, 2, -1, -1, 3}, exp[6] = {10, 3, -1, -3, -2, 0};
    int64_t out[6];
    auto args = BinaryArgs(OSP_BINARY_ND_POW, OSP_TYPE_INT64, {6}, base, {1},
                           exp, {1}, out);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<int64_t>(out, out + 6),
              (std::vector<int64_t>{1024, -8, 0, -1, 1, 1}));

    // [4, 5] + [5] and [4, 1] over every integer type via int32 and uint64.
    TRACE_SEED();
    Dims dims = {4, 5};
    auto a = MakeOperand<int32_t>(dims, {0, 0}, {0, 0},
                                  [&] { return (int32_t)Int(-100, 100); });
    auto b = MakeOperand<int32_t>(dims, {1, 0}, {0, 1},
                                  [&] { return (int32_t)Int(-100, 100); });
    for (osp_binary_nd_op op :
         {OSP_BINARY_ND_ADD, OSP_BINARY_ND_MAX, OSP_BINARY_ND_MIN,
          OSP_BINARY_ND_PRELU, OSP_BINARY_ND_LESS}) {
        std::vector<int32_t> o(20);
        std::vector<uint8_t> ob(20);
        bool cmp = op == OSP_BINARY_ND_LESS;
        args = BinaryArgs(op, OSP_TYPE_INT32, dims, a.ptr(), a.strides, b.ptr(),
                          b.strides, cmp ? (void *)ob.data() : o.data());
        ASSERT_OK(osp_op_binary_nd(stream(), &args));
        int i = 0;
        ForEachIndex(dims, [&](const Dims &idx) {
            int32_t x = a.at(idx), y = b.at(idx);
            int32_t want = op == OSP_BINARY_ND_ADD   ? x + y
                           : op == OSP_BINARY_ND_MAX ? std::max(x, y)
                           : op == OSP_BINARY_ND_MIN ? std::min(x, y)
                           : x < 0                   ? x * y
                                                     : x;
            if (cmp)
                EXPECT_EQ(ob[i], x < y);
            else
                EXPECT_EQ(o[i], want) << "op " << op;
            i++;
        });
    }
}

TEST_F(TensorOps, BinaryNdBoolShiftsAndDouble) {
    bool a[4] = {false, false, true, true}, b[4] = {false, true, false, true};
    bool r[4];
    struct {
        osp_binary_nd_op op;
        std::vector<bool> want;
    } logic[] = {
        {OSP_BINARY_ND_AND, {false, false, false, true}},
        {OSP_BINARY_ND_OR, {false, true, true, true}},
        {OSP_BINARY_ND_XOR, {false, true, true, false}},
        {OSP_BINARY_ND_EQUAL, {true, false, false, true}},
    };
    for (const auto &c : logic) {
        auto args = BinaryArgs(c.op, OSP_TYPE_BOOL, {4}, a, {1}, b, {1}, r);
        ASSERT_OK(osp_op_binary_nd(stream(), &args));
        EXPECT_EQ(std::vector<bool>(r, r + 4), c.want) << "op " << c.op;
    }

    uint8_t x[4] = {0x81, 0x81, 0x81, 0x81}, s[4] = {1, 7, 8, 200}, y[4];
    auto args = BinaryArgs(OSP_BINARY_ND_BITSHIFT_LEFT, OSP_TYPE_UINT8, {4}, x,
                           {1}, s, {1}, y);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<uint8_t>(y, y + 4),
              (std::vector<uint8_t>{0x02, 0x80, 0, 0}));
    args = BinaryArgs(OSP_BINARY_ND_BITSHIFT_RIGHT, OSP_TYPE_UINT8, {4}, x, {1},
                      s, {1}, y);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(std::vector<uint8_t>(y, y + 4),
              (std::vector<uint8_t>{0x40, 0x01, 0, 0}));
    uint64_t big = 1, sh = 63, o64;
    args = BinaryArgs(OSP_BINARY_ND_BITSHIFT_LEFT, OSP_TYPE_UINT64, {}, &big,
                      {}, &sh, {}, &o64);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(o64, uint64_t{1} << 63);

    double d[3] = {0.1, 1e300, -2}, e[3] = {0.2, 1e300, 0.5}, f[3];
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP64, {3}, d, {1}, e, {1}, f);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_EQ(f[0], 0.1 + 0.2);
    EXPECT_EQ(f[1], 2e300);
    args = BinaryArgs(OSP_BINARY_ND_POW, OSP_TYPE_FP64, {3}, d, {1}, e, {1}, f);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_TRUE(std::isnan(f[2]));

    float nan[2] = {kNan, 1}, one[2] = {1, kNan}, m[2];
    args = BinaryArgs(OSP_BINARY_ND_MAX, OSP_TYPE_FP32, {2}, nan, {1}, one, {1},
                      m);
    ASSERT_OK(osp_op_binary_nd(stream(), &args));
    EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1])); // NaN propagates
}

TEST_F(TensorOps, BinaryNdChecks) {
    float a[4] = {}, b[4] = {}, out[4];
    auto args =
        BinaryArgs(OSP_BINARY_ND_AND, OSP_TYPE_FP32, {4}, a, {1}, b, {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = BinaryArgs(OSP_BINARY_ND_BITSHIFT_LEFT, OSP_TYPE_INT32, {4}, a, {1},
                      b, {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args =
        BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP16, {4}, a, {1}, b, {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = BinaryArgs(OSP_BINARY_ND_OP_COUNT_, OSP_TYPE_FP32, {4}, a, {1}, b,
                      {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    args =
        BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {4}, a, {1}, b, {1}, out);
    args.rank = OSP_MAX_DIMS + 1;
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.rank = -1;
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {4, -1}, a, {1, 1}, b,
                      {1, 1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {4}, a, {1}, nullptr,
                      {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    // An element count or a stride that cannot be addressed.
    Dims huge(8, 1 << 20);
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, huge, a, Dims(8, 0), b,
                      Dims(8, 0), out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {4}, a, {INT64_MAX / 2},
                      b, {1}, out);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), &args), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_binary_nd(nullptr, &args), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), nullptr),
                      OSP_ERROR_INVALID_ARG);
}

// ---- where ----------------------------------------------------------------

TEST_F(TensorOps, WhereBroadcasts) {
    TRACE_SEED();
    for (size_t es : {1, 2, 4, 8}) {
        SCOPED_TRACE(es);
        // cond [2, 1, 40], x [1, 3, 40] reversed along the last axis, y a
        // scalar, out [2, 3, 40]; then all contiguous.
        for (int shape = 0; shape < 2; shape++) {
            Dims dims = {2, 3, 40};
            std::vector<bool> none = {0, 0, 0};
            auto cond = MakeOperand<uint8_t>(
                dims, shape == 0 ? std::vector<bool>{0, 1, 0} : none, none,
                [&] { return (uint8_t)Int(0, 1); });
            auto x = MakeOperand<uint64_t>(
                dims, shape == 0 ? std::vector<bool>{1, 0, 0} : none,
                shape == 0 ? std::vector<bool>{0, 0, 1} : none,
                [&] { return (uint64_t)gen_(); });
            auto y = MakeOperand<uint64_t>(
                dims, shape == 0 ? std::vector<bool>{1, 1, 1} : none, none,
                [&] { return (uint64_t)gen_(); });
            // Elements of es bytes: the low es bytes of each uint64, packed.
            auto pack = [&](const Operand<uint64_t> &op) {
                std::vector<unsigned char> bytes(op.data.size() * es);
                for (size_t i = 0; i < op.data.size(); i++)
                    memcpy(&bytes[i * es], &op.data[i], es);
                return bytes;
            };
            auto xb = pack(x), yb = pack(y);
            std::vector<unsigned char> out((size_t)Count(dims) * es);
            osp_where_args args{};
            args.elem_size = es;
            args.rank = 3;
            std::copy(dims.begin(), dims.end(), args.dims);
            args.cond = (const bool *)cond.ptr();
            std::copy(cond.strides.begin(), cond.strides.end(),
                      args.cond_strides);
            args.x = xb.data() + x.base * es;
            std::copy(x.strides.begin(), x.strides.end(), args.x_strides);
            args.y = yb.data() + y.base * es;
            std::copy(y.strides.begin(), y.strides.end(), args.y_strides);
            args.out = out.data();
            ASSERT_OK(osp_op_where(stream(), &args));
            int64_t i = 0;
            ForEachIndex(dims, [&](const Dims &idx) {
                uint64_t want = cond.at(idx) ? x.at(idx) : y.at(idx), got = 0;
                memcpy(&got, &out[i * es], es);
                uint64_t mask =
                    es == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * es)) - 1;
                ASSERT_EQ(got, want & mask) << i;
                i++;
            });
        }
    }
}

TEST_F(TensorOps, WhereChecks) {
    osp_where_args args{};
    args.elem_size = 3;
    args.rank = 0;
    bool c = true;
    float x = 1, y = 2, out = 0;
    args.cond = &c;
    args.x = &x;
    args.y = &y;
    args.out = &out;
    EXPECT_ERROR_CODE(osp_op_where(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.elem_size = 4;
    ASSERT_OK(osp_op_where(stream(), &args)); // rank 0: one element
    EXPECT_EQ(out, 1.0f);
    args.x = nullptr;
    EXPECT_ERROR_CODE(osp_op_where(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.rank = 1;
    args.dims[0] = 0; // empty: nothing read
    ASSERT_OK(osp_op_where(stream(), &args));
}

// ---- copy_strided ---------------------------------------------------------

osp_copy_strided_args CopyArgs(size_t es, const Dims &dims, const void *src,
                               const Dims &ss, void *dst, const Dims &ds) {
    osp_copy_strided_args a{};
    a.elem_size = es;
    a.rank = (int)dims.size();
    std::copy(dims.begin(), dims.end(), a.dims);
    std::copy(ss.begin(), ss.end(), a.src_strides);
    std::copy(ds.begin(), ds.end(), a.dst_strides);
    a.src = src;
    a.dst = dst;
    return a;
}

// Transposes (random permutations of 2-d to 4-d shapes, some large enough
// for the tiled path) for every element size, checked element by element.
TEST_F(TensorOps, CopyStridedPermutations) {
    TRACE_SEED();
    for (int trial = 0; trial < 40; trial++) {
        size_t es = size_t{1} << (trial % 5); // 1, 2, 4, 8, 16
        int rank = 2 + trial % 3;
        Dims in(rank);
        for (int d = 0; d < rank; d++)
            in[d] = trial < 10 && rank == 2 ? Int(30, 70) : Int(1, 9);
        std::vector<int> perm(rank);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), gen_);
        Dims out(rank), ss(rank), in_strides = Contiguous(in);
        for (int d = 0; d < rank; d++) {
            out[d] = in[perm[d]];
            ss[d] = in_strides[perm[d]];
        }
        std::vector<unsigned char> src((size_t)Count(in) * es), dst(src.size());
        for (auto &c : src)
            c = (unsigned char)gen_();
        auto args =
            CopyArgs(es, out, src.data(), ss, dst.data(), Contiguous(out));
        ASSERT_OK(osp_op_copy_strided(stream(), &args));
        int64_t i = 0;
        ForEachIndex(out, [&](const Dims &idx) {
            ASSERT_EQ(memcmp(&dst[i * es], &src[Offset(idx, ss) * es], es), 0)
                << "trial " << trial << " element " << i;
            i++;
        });
    }
}

TEST_F(TensorOps, CopyStridedSliceExpandReverseConcat) {
    std::vector<int32_t> src(6 * 10);
    std::iota(src.begin(), src.end(), 0);
    // Reversed rows and every second column, reversed: x[::-1, 8:0:-2].
    std::vector<int32_t> dst(6 * 4);
    auto args = CopyArgs(4, {6, 4}, src.data() + 5 * 10 + 8, {-10, -2},
                         dst.data(), {4, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 4; c++)
            ASSERT_EQ(dst[r * 4 + c], (5 - r) * 10 + 8 - 2 * c);
    // Expand: a row broadcast over 3 rows (stride 0), long enough for
    // memcpy-sized runs.
    std::vector<int32_t> wide(3 * 60);
    args = CopyArgs(4, {3, 60}, src.data(), {0, 1}, wide.data(), {60, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 60; c++)
            ASSERT_EQ(wide[r * 60 + c], c);
    // Expand of a scalar along the innermost axis.
    args = CopyArgs(4, {2, 7}, src.data() + 3, {10, 0}, wide.data(), {7, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    for (int i = 0; i < 14; i++)
        ASSERT_EQ(wide[i], i < 7 ? 3 : 13);
    // Concat: two [2, 3] blocks into the columns of a [2, 7] (with one
    // column left alone), dst rows strided.
    std::vector<int32_t> cat(14, -1);
    args = CopyArgs(4, {2, 3}, src.data(), {10, 1}, cat.data(), {7, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    args =
        CopyArgs(4, {2, 3}, src.data() + 20, {10, 1}, cat.data() + 3, {7, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    EXPECT_EQ(cat, (std::vector<int32_t>{0, 1, 2, 20, 21, 22, -1, 10, 11, 12,
                                         30, 31, 32, -1}));
    // Rank 0: one element.
    int32_t one = 0;
    args = CopyArgs(4, {}, src.data() + 42, {}, &one, {});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    EXPECT_EQ(one, 42);
}

TEST_F(TensorOps, CopyStridedChecks) {
    int32_t a[4] = {}, b[4] = {};
    auto args = CopyArgs(4, {2, 2}, a, {2, 1}, b, {0, 1});
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream(), &args),
                      OSP_ERROR_INVALID_ARG); // dst stride 0
    args = CopyArgs(4, {2, 2}, a, {2, 1}, b, {-2, 1});
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream(), &args),
                      OSP_ERROR_INVALID_ARG); // dst stride negative
    args = CopyArgs(3, {2, 2}, a, {2, 1}, b, {2, 1});
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream(), &args),
                      OSP_ERROR_INVALID_ARG); // element size
    args = CopyArgs(4, {2, 2}, nullptr, {2, 1}, b, {2, 1});
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream(), &args),
                      OSP_ERROR_INVALID_ARG);
    args = CopyArgs(4, {2, 0}, nullptr, {2, 1}, nullptr, {2, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
    // A size-1 dimension's dst stride does not matter.
    args = CopyArgs(4, {1, 4}, a, {0, 1}, b, {0, 1});
    ASSERT_OK(osp_op_copy_strided(stream(), &args));
}

// ---- gather ---------------------------------------------------------------

TEST_F(TensorOps, GatherRowsAndScalars) {
    TRACE_SEED();
    for (int64_t inner : {1, 3, 40}) {
        for (osp_datatype idt : {OSP_TYPE_INT32, OSP_TYPE_INT64}) {
            SCOPED_TRACE(std::to_string(inner) + " " +
                         osp_datatype_wire_name(idt));
            const int64_t outer = 3, len = 7, n_idx = 9;
            std::vector<float> data = Floats(outer * len * inner);
            std::vector<int64_t> idx(n_idx);
            for (auto &v : idx)
                v = Int(-len, len - 1);
            idx[0] = -len; // both ends of the range
            idx[1] = len - 1;
            std::vector<int32_t> idx32(idx.begin(), idx.end());
            std::vector<float> out(outer * n_idx * inner);
            osp_gather_args args{};
            args.elem_size = 4;
            args.data = data.data();
            args.outer = outer;
            args.axis_len = len;
            args.inner = inner;
            args.index_dtype = idt;
            args.indices =
                idt == OSP_TYPE_INT32 ? (const void *)idx32.data() : idx.data();
            args.n_indices = n_idx;
            args.out = out.data();
            ASSERT_OK(osp_op_gather(stream(), &args));
            for (int64_t o = 0; o < outer; o++)
                for (int64_t j = 0; j < n_idx; j++) {
                    int64_t row = idx[j] < 0 ? idx[j] + len : idx[j];
                    for (int64_t i = 0; i < inner; i++)
                        ASSERT_EQ(out[(o * n_idx + j) * inner + i],
                                  data[(o * len + row) * inner + i]);
                }
        }
    }
}

TEST_F(TensorOps, GatherOutOfRange) {
    std::vector<double> data = {1, 2, 3, 4};
    for (int64_t bad : {int64_t{4}, int64_t{-5}, INT64_MAX, INT64_MIN}) {
        int64_t idx[3] = {0, bad, 1};
        double out[3] = {-1, -1, -1};
        osp_gather_args args{};
        args.elem_size = 8;
        args.data = data.data();
        args.outer = 1;
        args.axis_len = 4;
        args.inner = 1;
        args.index_dtype = OSP_TYPE_INT64;
        args.indices = idx;
        args.n_indices = 3;
        args.out = out;
        osp_error *err = osp_op_gather(stream(), &args);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        std::string msg = TakeMessage(err);
        EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
        EXPECT_NE(msg.find("[-4, 4)"), std::string::npos) << msg;
        EXPECT_EQ(out[0], -1) << "nothing written before the check";
    }
    // No indices: nothing to do.
    osp_gather_args args{};
    args.elem_size = 4;
    args.outer = 2;
    args.axis_len = 3;
    args.inner = 2;
    args.index_dtype = OSP_TYPE_INT32;
    args.n_indices = 0;
    ASSERT_OK(osp_op_gather(stream(), &args));
    args.index_dtype = OSP_TYPE_FP32;
    EXPECT_ERROR_CODE(osp_op_gather(stream(), &args), OSP_ERROR_UNSUPPORTED);
}

// ---- fill -----------------------------------------------------------------

TEST_F(TensorOps, FillEveryElementSize) {
    for (size_t es : {1, 2, 4, 8}) {
        for (bool uniform : {false, true}) {
            osp_fill_args args{};
            args.elem_size = es;
            for (size_t i = 0; i < 8; i++)
                args.value[i] = uniform ? 0xab : (uint8_t)(0x11 * (i + 1));
            std::vector<unsigned char> dst(es * 37 + 3, 0xee);
            args.dst = dst.data();
            args.n = 37;
            ASSERT_OK(osp_op_fill(stream(), &args));
            for (size_t i = 0; i < 37 * es; i++)
                ASSERT_EQ(dst[i], args.value[i % es]) << es << " " << i;
            for (size_t i = 37 * es; i < dst.size(); i++)
                ASSERT_EQ(dst[i], 0xee) << "past the end";
        }
    }
    osp_fill_args args{};
    args.elem_size = 16;
    args.n = 1;
    unsigned char d[16];
    args.dst = d;
    EXPECT_ERROR_CODE(osp_op_fill(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.elem_size = 4;
    args.dst = nullptr;
    EXPECT_ERROR_CODE(osp_op_fill(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.n = 0;
    ASSERT_OK(osp_op_fill(stream(), &args));
}

// ---- pad ------------------------------------------------------------------

osp_pad_args PadArgs(osp_pad_mode mode, const Dims &in, const Dims &begin,
                     const Dims &end, const void *x, void *y, size_t es = 4) {
    osp_pad_args a{};
    a.mode = mode;
    a.elem_size = es;
    a.rank = (int)in.size();
    std::copy(in.begin(), in.end(), a.in_dims);
    std::copy(begin.begin(), begin.end(), a.pad_begin);
    std::copy(end.begin(), end.end(), a.pad_end);
    a.x = x;
    a.y = y;
    return a;
}

std::vector<float> Pad1d(osp_stream *stream, osp_pad_mode mode,
                         const std::vector<float> &x, int64_t b, int64_t e,
                         float value = 0) {
    std::vector<float> y((size_t)((int64_t)x.size() + b + e));
    auto args =
        PadArgs(mode, {(int64_t)x.size()}, {b}, {e}, x.data(), y.data());
    memcpy(args.value, &value, 4);
    osp_error *err = osp_op_pad(stream, &args);
    EXPECT_EQ(err, nullptr) << TakeMessage(err);
    return y;
}

TEST_F(TensorOps, PadModesOneDimension) {
    std::vector<float> x = {1, 2, 3, 4};
    using V = std::vector<float>;
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_CONSTANT, x, 2, 1, 9),
              (V{9, 9, 1, 2, 3, 4, 9}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_REFLECT, x, 3, 3),
              (V{4, 3, 2, 1, 2, 3, 4, 3, 2, 1}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_EDGE, x, 2, 2),
              (V{1, 1, 1, 2, 3, 4, 4, 4}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_WRAP, x, 2, 3),
              (V{3, 4, 1, 2, 3, 4, 1, 2, 3}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_WRAP, x, 6, 0),
              (V{3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
    // Negative pads crop first; the other side pads from what is left.
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_CONSTANT, x, -1, 2, 7),
              (V{2, 3, 4, 7, 7}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_REFLECT, x, -1, 2), (V{2, 3, 4, 3, 2}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_EDGE, x, 1, -2), (V{1, 1, 2}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_WRAP, x, -2, 1), (V{3, 4, 3}));
    EXPECT_EQ(Pad1d(stream(), OSP_PAD_CONSTANT, x, -2, -2), (V{}));
}

// numpy.pad's rules, one output element at a time.
int64_t RefPadSource(osp_pad_mode mode, int64_t o, int64_t in, int64_t b,
                     int64_t e) {
    int64_t lo = std::max<int64_t>(-b, 0);
    int64_t kept = in - lo - std::max<int64_t>(-e, 0);
    int64_t j = o - std::max<int64_t>(b, 0);
    if (j >= 0 && j < kept)
        return lo + j;
    switch (mode) {
    case OSP_PAD_EDGE:
        return lo + std::clamp<int64_t>(j, 0, kept - 1);
    case OSP_PAD_WRAP:
        return lo + ((j % kept) + kept) % kept;
    case OSP_PAD_REFLECT:
        return lo + (j < 0 ? -j : 2 * (kept - 1) - j);
    default:
        return -1;
    }
}

TEST_F(TensorOps, PadModesThreeDimensions) {
    TRACE_SEED();
    for (int trial = 0; trial < 60; trial++) {
        osp_pad_mode mode = (osp_pad_mode)(trial % 4);
        size_t es = trial % 8 < 4 ? 4 : 2;
        Dims in = {Int(1, 4), Int(2, 5), Int(2, 9)}, b(3), e(3), out(3);
        for (int d = 0; d < 3; d++) {
            int64_t lo = mode == OSP_PAD_CONSTANT ? -in[d] / 2 : -1;
            b[d] = Int(lo, mode == OSP_PAD_REFLECT ? in[d] - 2 : 3);
            e[d] = Int(lo, mode == OSP_PAD_REFLECT ? in[d] - 2 : 3);
            if (in[d] + std::min<int64_t>(b[d], 0) +
                    std::min<int64_t>(e[d], 0) <
                2) {
                b[d] = std::max<int64_t>(b[d], 0);
                e[d] = std::max<int64_t>(e[d], 0);
            }
            if (mode == OSP_PAD_REFLECT) {
                int64_t kept = in[d] + std::min<int64_t>(b[d], 0) +
                               std::min<int64_t>(e[d], 0);
                b[d] = std::min(b[d], kept - 1);
                e[d] = std::min(e[d], kept - 1);
            }
            out[d] = in[d] + b[d] + e[d];
        }
        std::vector<uint32_t> x((size_t)Count(in));
        for (auto &v : x)
            v = (uint32_t)gen_();
        std::vector<uint32_t> y((size_t)Count(out));
        // es == 2: the same bytes seen as twice as many 2-byte elements
        // along the last axis would change its meaning, so 2-byte cases
        // use values below 2^16 in a packed copy instead.
        std::vector<uint16_t> x16(x.size()), y16(y.size());
        for (size_t i = 0; i < x.size(); i++)
            x16[i] = (uint16_t)x[i];
        auto args = PadArgs(mode, in, b, e,
                            es == 4 ? (const void *)x.data() : x16.data(),
                            es == 4 ? (void *)y.data() : y16.data(), es);
        uint32_t value = 0xdeadbeef;
        memcpy(args.value, &value, 4);
        ASSERT_OK(osp_op_pad(stream(), &args));
        Dims in_strides = Contiguous(in);
        int64_t i = 0;
        ForEachIndex(out, [&](const Dims &idx) {
            int64_t src = 0;
            bool constant = false;
            for (int d = 0; d < 3; d++) {
                int64_t s = RefPadSource(mode, idx[d], in[d], b[d], e[d]);
                constant = constant || s < 0;
                src += s * in_strides[d];
            }
            uint32_t want = constant ? (es == 4 ? value : (value & 0xffff))
                                     : (es == 4 ? x[src] : x16[src]);
            uint32_t got = es == 4 ? y[i] : y16[i];
            ASSERT_EQ(got, want) << "trial " << trial << " element " << i;
            i++;
        });
    }
}

TEST_F(TensorOps, PadChecks) {
    float x[4] = {1, 2, 3, 4}, y[16];
    auto args = PadArgs(OSP_PAD_REFLECT, {4}, {4}, {0}, x, y);
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = PadArgs(OSP_PAD_REFLECT, {4}, {-2}, {2}, x, y); // 2 left
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = PadArgs(OSP_PAD_CONSTANT, {4}, {-3}, {-2}, x, y); // crops 5 of 4
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = PadArgs(OSP_PAD_EDGE, {4}, {-4}, {1}, x, y); // nothing to copy
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = PadArgs((osp_pad_mode)7, {4}, {1}, {1}, x, y);
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = PadArgs(OSP_PAD_CONSTANT, {4}, {1}, {1}, x, y, 16);
    EXPECT_ERROR_CODE(osp_op_pad(stream(), &args), OSP_ERROR_INVALID_ARG);
    // Constant padding of an empty input needs no input.
    float v = 5;
    args = PadArgs(OSP_PAD_CONSTANT, {2, 0}, {0, 1}, {0, 2}, nullptr, y);
    memcpy(args.value, &v, 4);
    ASSERT_OK(osp_op_pad(stream(), &args));
    for (int i = 0; i < 6; i++)
        EXPECT_EQ(y[i], 5.0f);
    // Rank 0 copies the scalar.
    args = PadArgs(OSP_PAD_EDGE, {}, {}, {}, x + 2, y);
    ASSERT_OK(osp_op_pad(stream(), &args));
    EXPECT_EQ(y[0], 3.0f);
}

// ---- reduce ---------------------------------------------------------------

osp_reduce_args ReduceArgs(osp_reduce_op op, osp_datatype dt, const void *x,
                           int64_t outer, int64_t n, int64_t inner, void *out,
                           bool last = false) {
    osp_reduce_args a{};
    a.op = op;
    a.dtype = dt;
    a.x = x;
    a.outer = outer;
    a.n = n;
    a.inner = inner;
    a.out = out;
    a.select_last_index = last;
    return a;
}

double RefReduce(osp_reduce_op op, const std::vector<double> &v) {
    double s = 0, p = 1, m = -INFINITY, mn = INFINITY;
    for (double x : v) {
        m = std::max(m, x);
        mn = std::min(mn, x);
    }
    switch (op) {
    case OSP_REDUCE_SUM:
        for (double x : v)
            s += x;
        return s;
    case OSP_REDUCE_MEAN:
        for (double x : v)
            s += x;
        return s / (double)v.size();
    case OSP_REDUCE_MAX:
        return m;
    case OSP_REDUCE_MIN:
        return mn;
    case OSP_REDUCE_PROD:
        for (double x : v)
            p *= x;
        return p;
    case OSP_REDUCE_L1:
        for (double x : v)
            s += std::fabs(x);
        return s;
    case OSP_REDUCE_L2:
        for (double x : v)
            s += x * x;
        return std::sqrt(s);
    case OSP_REDUCE_LOG_SUM:
        for (double x : v)
            s += x;
        return std::log(s);
    case OSP_REDUCE_LOG_SUM_EXP:
        for (double x : v)
            s += std::exp(x - m);
        return v.empty() ? -INFINITY : m + std::log(s);
    case OSP_REDUCE_SUM_SQUARE:
        for (double x : v)
            s += x * x;
        return s;
    default:
        return 0;
    }
}

// Every FP32 reduction over contiguous lines (inner 1) and over columns
// (inner > 1, more than one block of them), against double references.
TEST_F(TensorOps, ReduceFloatMatchesReference) {
    TRACE_SEED();
    struct Shape {
        int64_t outer, n, inner;
    } shapes[] = {{3, 1000, 1}, {2, 37, 300}, {1, 5, 3}, {4, 1, 2}};
    for (int op_i = 0; op_i < OSP_REDUCE_ARGMAX; op_i++) {
        osp_reduce_op op = (osp_reduce_op)op_i;
        for (const Shape &s : shapes) {
            SCOPED_TRACE("op " + std::to_string(op) + " shape " +
                         std::to_string(s.outer) + "x" + std::to_string(s.n) +
                         "x" + std::to_string(s.inner));
            // PROD over 1000 elements stays finite near 1; LOG_SUM needs a
            // positive sum.
            float lo = op == OSP_REDUCE_PROD      ? 0.9f
                       : op == OSP_REDUCE_LOG_SUM ? 0.0f
                                                  : -3.0f;
            float hi = op == OSP_REDUCE_PROD ? 1.1f : 3.0f;
            std::vector<float> x = Floats(s.outer * s.n * s.inner, lo, hi);
            std::vector<float> out(s.outer * s.inner);
            auto args = ReduceArgs(op, OSP_TYPE_FP32, x.data(), s.outer, s.n,
                                   s.inner, out.data());
            ASSERT_OK(osp_op_reduce(stream(), &args));
            for (int64_t o = 0; o < s.outer; o++)
                for (int64_t i = 0; i < s.inner; i++) {
                    std::vector<double> v;
                    for (int64_t k = 0; k < s.n; k++)
                        v.push_back(x[(o * s.n + k) * s.inner + i]);
                    double want = RefReduce(op, v);
                    float got = out[o * s.inner + i];
                    // Sums of mixed signs: relative to the sum of |x|.
                    double scale = 0;
                    for (double e : v)
                        scale += std::fabs(e);
                    bool ok = op == OSP_REDUCE_SUM || op == OSP_REDUCE_MEAN
                                  ? std::fabs(got - want) <= 1e-6 * scale + 1e-6
                                  : Close(got, want, 1e-5, 1e-6);
                    ASSERT_TRUE(ok) << "got " << got << " want " << want
                                    << " at " << o << "," << i;
                }
        }
    }
}

TEST_F(TensorOps, ReduceEmptyAxisGivesIdentity) {
    struct {
        osp_reduce_op op;
        float want;
    } cases[] = {
        {OSP_REDUCE_SUM, 0},         {OSP_REDUCE_PROD, 1},
        {OSP_REDUCE_MAX, -kInf},     {OSP_REDUCE_MIN, kInf},
        {OSP_REDUCE_L1, 0},          {OSP_REDUCE_L2, 0},
        {OSP_REDUCE_SUM_SQUARE, 0},  {OSP_REDUCE_LOG_SUM_EXP, -kInf},
        {OSP_REDUCE_LOG_SUM, -kInf},
    };
    for (int64_t inner : {1, 3}) {
        for (const auto &c : cases) {
            std::vector<float> out(2 * inner, 42);
            auto args = ReduceArgs(c.op, OSP_TYPE_FP32, nullptr, 2, 0, inner,
                                   out.data());
            ASSERT_OK(osp_op_reduce(stream(), &args));
            for (float v : out)
                EXPECT_EQ(v, c.want) << "op " << c.op << " inner " << inner;
        }
        std::vector<float> out(2 * inner, 42);
        auto args = ReduceArgs(OSP_REDUCE_MEAN, OSP_TYPE_FP32, nullptr, 2, 0,
                               inner, out.data());
        ASSERT_OK(osp_op_reduce(stream(), &args));
        EXPECT_TRUE(std::isnan(out[0])); // 0 / 0, as numpy's mean
        int32_t iout[3] = {7, 7, 7};
        args =
            ReduceArgs(OSP_REDUCE_MAX, OSP_TYPE_INT32, nullptr, 1, 0, 3, iout);
        ASSERT_OK(osp_op_reduce(stream(), &args));
        EXPECT_EQ(iout[0], INT32_MIN);
        args =
            ReduceArgs(OSP_REDUCE_PROD, OSP_TYPE_INT32, nullptr, 1, 0, 3, iout);
        ASSERT_OK(osp_op_reduce(stream(), &args));
        EXPECT_EQ(iout[2], 1);
        int64_t idx[3];
        args = ReduceArgs(OSP_REDUCE_ARGMAX, OSP_TYPE_FP32, nullptr, 1, 0,
                          inner, idx);
        EXPECT_ERROR_CODE(osp_op_reduce(stream(), &args),
                          OSP_ERROR_INVALID_ARG);
    }
    // No outputs at all: fine, even for argmax.
    auto args =
        ReduceArgs(OSP_REDUCE_ARGMAX, OSP_TYPE_FP32, nullptr, 0, 0, 3, nullptr);
    ASSERT_OK(osp_op_reduce(stream(), &args));
}

TEST_F(TensorOps, ReduceArgTies) {
    // Lines [1, 5, 2, 5, 0, 0]: max 5 at 1 (first) or 3 (last), min 0 at 4
    // or 5; laid out as inner 1 and as the columns of inner 2.
    const float line[6] = {1, 5, 2, 5, 0, 0};
    std::vector<float> rows(line, line + 6), cols(12);
    for (int k = 0; k < 6; k++) {
        cols[k * 2] = line[k];
        cols[k * 2 + 1] = -line[k];
    }
    struct {
        osp_reduce_op op;
        bool last;
        int64_t want, want_neg;
    } cases[] = {
        {OSP_REDUCE_ARGMAX, false, 1, 4},
        {OSP_REDUCE_ARGMAX, true, 3, 5},
        {OSP_REDUCE_ARGMIN, false, 4, 1},
        {OSP_REDUCE_ARGMIN, true, 5, 3},
    };
    for (const auto &c : cases) {
        int64_t out[2] = {-1, -1};
        auto args =
            ReduceArgs(c.op, OSP_TYPE_FP32, rows.data(), 1, 6, 1, out, c.last);
        ASSERT_OK(osp_op_reduce(stream(), &args));
        EXPECT_EQ(out[0], c.want) << c.op << " " << c.last;
        args =
            ReduceArgs(c.op, OSP_TYPE_FP32, cols.data(), 1, 6, 2, out, c.last);
        ASSERT_OK(osp_op_reduce(stream(), &args));
        EXPECT_EQ(out[0], c.want) << c.op << " " << c.last;
        EXPECT_EQ(out[1], c.want_neg) << c.op << " " << c.last;
        for (osp_datatype dt : {OSP_TYPE_INT32, OSP_TYPE_INT64}) {
            std::vector<int64_t> c64(cols.begin(), cols.end());
            std::vector<int32_t> c32(cols.begin(), cols.end());
            args = ReduceArgs(c.op, dt,
                              dt == OSP_TYPE_INT32 ? (const void *)c32.data()
                                                   : c64.data(),
                              1, 6, 2, out, c.last);
            ASSERT_OK(osp_op_reduce(stream(), &args));
            EXPECT_EQ(out[0], c.want);
            EXPECT_EQ(out[1], c.want_neg);
        }
    }
}

TEST_F(TensorOps, ReduceIntegers) {
    TRACE_SEED();
    for (int64_t inner : {1, 5}) {
        const int64_t outer = 2, n = 9;
        std::vector<int64_t> x = Ints<int64_t>(outer * n * inner, -9, 9);
        std::vector<int32_t> x32(x.begin(), x.end());
        for (osp_reduce_op op : {OSP_REDUCE_SUM, OSP_REDUCE_PROD,
                                 OSP_REDUCE_MAX, OSP_REDUCE_MIN}) {
            std::vector<int64_t> out(outer * inner);
            std::vector<int32_t> out32(outer * inner);
            auto args = ReduceArgs(op, OSP_TYPE_INT64, x.data(), outer, n,
                                   inner, out.data());
            ASSERT_OK(osp_op_reduce(stream(), &args));
            args = ReduceArgs(op, OSP_TYPE_INT32, x32.data(), outer, n, inner,
                              out32.data());
            ASSERT_OK(osp_op_reduce(stream(), &args));
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t want = op == OSP_REDUCE_PROD  ? 1
                                   : op == OSP_REDUCE_MAX ? INT64_MIN
                                   : op == OSP_REDUCE_MIN ? INT64_MAX
                                                          : 0;
                    for (int64_t k = 0; k < n; k++) {
                        int64_t v = x[(o * n + k) * inner + i];
                        want = op == OSP_REDUCE_SUM    ? want + v
                               : op == OSP_REDUCE_PROD ? want * v
                               : op == OSP_REDUCE_MAX  ? std::max(want, v)
                                                       : std::min(want, v);
                    }
                    EXPECT_EQ(out[o * inner + i], want) << "op " << op;
                    EXPECT_EQ(out32[o * inner + i], (int32_t)(uint32_t)want)
                        << "op " << op;
                }
        }
    }
    // Sums wrap instead of overflowing.
    int32_t big[2] = {INT32_MAX, 1}, r;
    auto args = ReduceArgs(OSP_REDUCE_SUM, OSP_TYPE_INT32, big, 1, 2, 1, &r);
    ASSERT_OK(osp_op_reduce(stream(), &args));
    EXPECT_EQ(r, INT32_MIN);
    // Ops integers do not take.
    args = ReduceArgs(OSP_REDUCE_MEAN, OSP_TYPE_INT32, big, 1, 2, 1, &r);
    EXPECT_ERROR_CODE(osp_op_reduce(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = ReduceArgs(OSP_REDUCE_SUM, OSP_TYPE_FP64, big, 1, 2, 1, &r);
    EXPECT_ERROR_CODE(osp_op_reduce(stream(), &args), OSP_ERROR_UNSUPPORTED);
    args = ReduceArgs(OSP_REDUCE_OP_COUNT_, OSP_TYPE_FP32, big, 1, 2, 1, &r);
    EXPECT_ERROR_CODE(osp_op_reduce(stream(), &args), OSP_ERROR_INVALID_ARG);
    args = ReduceArgs(OSP_REDUCE_SUM, OSP_TYPE_INT32, big, 1, -2, 1, &r);
    EXPECT_ERROR_CODE(osp_op_reduce(stream(), &args), OSP_ERROR_INVALID_ARG);
}

TEST_F(TensorOps, ReduceLogSumExpLargeValues) {
    float x[3] = {1000, 1000, 999}, out;
    auto args =
        ReduceArgs(OSP_REDUCE_LOG_SUM_EXP, OSP_TYPE_FP32, x, 1, 3, 1, &out);
    ASSERT_OK(osp_op_reduce(stream(), &args));
    double want = 1000 + std::log(2 + std::exp(-1.0));
    EXPECT_TRUE(Close(out, want)) << out;
    float cols[4] = {1000, -kInf, 999, -kInf}, o2[2];
    args = ReduceArgs(OSP_REDUCE_LOG_SUM_EXP, OSP_TYPE_FP32, cols, 1, 2, 2, o2);
    ASSERT_OK(osp_op_reduce(stream(), &args));
    EXPECT_TRUE(Close(o2[0], 1000 + std::log(1 + std::exp(-1.0)))) << o2[0];
    EXPECT_EQ(o2[1], -kInf);
}

// ---- softmax --------------------------------------------------------------

void RefSoftmax(const std::vector<float> &x, int64_t outer, int64_t n,
                int64_t inner, bool log_, std::vector<double> *out) {
    out->assign(x.size(), 0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < n; k++)
                m = std::max(m, (double)x[at(k)]);
            for (int64_t k = 0; k < n; k++)
                s += std::exp(x[at(k)] - m);
            for (int64_t k = 0; k < n; k++)
                (*out)[at(k)] = log_ ? x[at(k)] - m - std::log(s)
                                     : std::exp(x[at(k)] - m) / s;
        }
}

TEST_F(TensorOps, SoftmaxMatchesReference) {
    TRACE_SEED();
    struct Shape {
        int64_t outer, n, inner;
    } shapes[] = {{4, 100, 1}, {2, 17, 300}, {3, 1, 5}, {1, 7, 2}};
    for (const Shape &s : shapes)
        for (bool log_ : {false, true})
            for (bool in_place : {false, true}) {
                SCOPED_TRACE(std::to_string(s.n) + "x" +
                             std::to_string(s.inner) + (log_ ? " log" : "") +
                             (in_place ? " in place" : ""));
                // Large values: only the max subtracted keeps exp finite.
                std::vector<float> x =
                    Floats(s.outer * s.n * s.inner, 500.0f, 520.0f);
                std::vector<double> want;
                RefSoftmax(x, s.outer, s.n, s.inner, log_, &want);
                std::vector<float> out(x.size());
                osp_softmax_args args{};
                args.x = x.data();
                args.out = in_place ? x.data() : out.data();
                args.outer = s.outer;
                args.n = s.n;
                args.inner = s.inner;
                args.log = log_;
                ASSERT_OK(osp_op_softmax(stream(), &args));
                const std::vector<float> &got = in_place ? x : out;
                for (size_t i = 0; i < got.size(); i++)
                    ASSERT_TRUE(Close(got[i], want[i], 1e-5, 1e-7))
                        << i << ": got " << got[i] << " want " << want[i];
            }
}

TEST_F(TensorOps, SoftmaxChecks) {
    osp_softmax_args args{};
    args.outer = 1;
    args.n = 4;
    args.inner = 1;
    EXPECT_ERROR_CODE(osp_op_softmax(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.n = 0;
    ASSERT_OK(osp_op_softmax(stream(), &args));
    args.n = -1;
    EXPECT_ERROR_CODE(osp_op_softmax(stream(), &args), OSP_ERROR_INVALID_ARG);
}

// ---- layer_norm -----------------------------------------------------------

TEST_F(TensorOps, LayerNormMatchesReference) {
    TRACE_SEED();
    const int64_t rows = 5, cols = 301;
    for (int variant = 0; variant < 5; variant++) {
        bool with_scale = variant & 1, with_bias = variant & 2;
        bool in_place = variant == 4;
        SCOPED_TRACE(variant);
        std::vector<float> x = Floats(rows * cols, 10.0f, 12.0f);
        std::vector<float> scale = Floats(cols), bias = Floats(cols);
        std::vector<float> out(x.size()), mean(rows), inv_std(rows);
        std::vector<float> x0 = x;
        osp_layer_norm_args args{};
        args.x = x.data();
        args.scale = with_scale ? scale.data() : nullptr;
        args.bias = with_bias ? bias.data() : nullptr;
        args.out = in_place ? x.data() : out.data();
        args.rows = rows;
        args.cols = cols;
        args.epsilon = 1e-5f;
        args.mean = mean.data();
        args.inv_std = variant == 3 ? nullptr : inv_std.data();
        ASSERT_OK(osp_op_layer_norm(stream(), &args));
        const std::vector<float> &got = in_place ? x : out;
        for (int64_t r = 0; r < rows; r++) {
            double m = 0, v = 0;
            for (int64_t c = 0; c < cols; c++)
                m += x0[r * cols + c];
            m /= cols;
            for (int64_t c = 0; c < cols; c++)
                v += (x0[r * cols + c] - m) * (x0[r * cols + c] - m);
            v /= cols;
            double inv = 1 / std::sqrt(v + 1e-5);
            EXPECT_TRUE(Close(mean[r], m)) << mean[r] << " " << m;
            if (variant != 3) {
                EXPECT_TRUE(Close(inv_std[r], inv)) << inv_std[r] << " " << inv;
            }
            for (int64_t c = 0; c < cols; c++) {
                double want = (x0[r * cols + c] - m) * inv *
                                  (with_scale ? scale[c] : 1.0) +
                              (with_bias ? bias[c] : 0.0);
                ASSERT_TRUE(Close(got[r * cols + c], want, 1e-4, 1e-5))
                    << r << "," << c << ": " << got[r * cols + c] << " vs "
                    << want;
            }
        }
    }
}

TEST_F(TensorOps, LayerNormEmptyRows) {
    float mean[2] = {9, 9}, inv_std[2] = {9, 9};
    osp_layer_norm_args args{};
    args.rows = 2;
    args.cols = 0;
    args.epsilon = 0.25f;
    args.mean = mean;
    args.inv_std = inv_std;
    ASSERT_OK(osp_op_layer_norm(stream(), &args));
    EXPECT_EQ(mean[0], 0.0f);
    EXPECT_EQ(inv_std[1], 2.0f);
    args.cols = 3;
    EXPECT_ERROR_CODE(osp_op_layer_norm(stream(), &args),
                      OSP_ERROR_INVALID_ARG); // x and out NULL
}

// ---- channel_affine -------------------------------------------------------

TEST_F(TensorOps, ChannelAffineWithActivations) {
    TRACE_SEED();
    const int64_t batch = 2, channels = 3, spatial = 50;
    for (osp_unary_op act :
         {OSP_UNARY_IDENTITY, OSP_UNARY_RELU, OSP_UNARY_SIGMOID,
          OSP_UNARY_LEAKY_RELU, OSP_UNARY_CLIP}) {
        for (int variant = 0; variant < 4; variant++) {
            bool with_scale = variant & 1, with_shift = variant & 2;
            SCOPED_TRACE(std::to_string(act) + " " + std::to_string(variant));
            std::vector<float> x = Floats(batch * channels * spatial);
            std::vector<float> x0 = x, scale = Floats(channels),
                               shift = Floats(channels);
            osp_channel_affine_args args{};
            args.x = x.data();
            args.out = x.data(); // in place
            args.batch = batch;
            args.channels = channels;
            args.spatial = spatial;
            args.scale = with_scale ? scale.data() : nullptr;
            args.shift = with_shift ? shift.data() : nullptr;
            args.act = act;
            args.act_alpha = act == OSP_UNARY_CLIP ? 0.0f : 0.2f;
            args.act_beta = 1.0f;
            ASSERT_OK(osp_op_channel_affine(stream(), &args));
            for (int64_t b = 0; b < batch; b++)
                for (int64_t c = 0; c < channels; c++)
                    for (int64_t s = 0; s < spatial; s++) {
                        int64_t i = (b * channels + c) * spatial + s;
                        double v = x0[i] * (with_scale ? scale[c] : 1.0f) +
                                   (with_shift ? shift[c] : 0.0f);
                        double want = act == OSP_UNARY_RELU ? std::max(v, 0.0)
                                      : act == OSP_UNARY_SIGMOID ? Sigmoid(v)
                                      : act == OSP_UNARY_LEAKY_RELU
                                          ? (v < 0 ? 0.2 * v : v)
                                      : act == OSP_UNARY_CLIP
                                          ? std::clamp(v, 0.0, 1.0)
                                          : v;
                        ASSERT_TRUE(Close(x[i], want)) << x[i] << " " << want;
                    }
        }
    }
    osp_channel_affine_args args{};
    args.batch = args.channels = args.spatial = 1;
    float v = 1;
    args.x = args.out = &v;
    args.act = OSP_UNARY_ISNAN;
    EXPECT_ERROR_CODE(osp_op_channel_affine(stream(), &args),
                      OSP_ERROR_INVALID_ARG);
}

// ---- topk -----------------------------------------------------------------

template <typename T>
void RefTopk(const std::vector<T> &x, int64_t outer, int64_t n, int64_t inner,
             int64_t k, bool largest, std::vector<T> *values,
             std::vector<int64_t> *indices) {
    values->assign(outer * k * inner, 0);
    indices->assign(outer * k * inner, 0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            std::vector<int64_t> order(n);
            std::iota(order.begin(), order.end(), 0);
            auto v = [&](int64_t j) { return x[(o * n + j) * inner + i]; };
            std::stable_sort(order.begin(), order.end(),
                             [&](int64_t a, int64_t b) {
                                 return largest ? v(a) > v(b) : v(a) < v(b);
                             });
            for (int64_t j = 0; j < k; j++) {
                (*values)[(o * k + j) * inner + i] = v(order[j]);
                (*indices)[(o * k + j) * inner + i] = order[j];
            }
        }
}

TEST_F(TensorOps, TopkTiesAndOrder) {
    TRACE_SEED();
    struct Shape {
        int64_t outer, n, inner, k;
    } shapes[] = {{2, 50, 1, 5},
                  {3, 20, 4, 20},
                  {1, 9, 2, 1},
                  {2, 1000, 1, 37},
                  {1, 6, 3, 0}};
    for (const Shape &s : shapes)
        for (bool largest : {true, false}) {
            SCOPED_TRACE(std::to_string(s.n) + " k=" + std::to_string(s.k) +
                         (largest ? " largest" : " smallest"));
            // Few distinct values: many ties, broken by the lower index.
            std::vector<float> x(s.outer * s.n * s.inner);
            for (auto &v : x)
                v = (float)Int(-5, 5);
            std::vector<int64_t> x64(x.begin(), x.end());
            std::vector<float> want_v;
            std::vector<int64_t> want_i;
            RefTopk(x, s.outer, s.n, s.inner, s.k, largest, &want_v, &want_i);
            for (osp_datatype dt : {OSP_TYPE_FP32, OSP_TYPE_INT64}) {
                std::vector<float> values(want_v.size(), -99);
                std::vector<int64_t> values64(want_v.size(), -99),
                    indices(want_i.size(), -1);
                osp_topk_args args{};
                args.dtype = dt;
                args.x =
                    dt == OSP_TYPE_FP32 ? (const void *)x.data() : x64.data();
                args.outer = s.outer;
                args.n = s.n;
                args.inner = s.inner;
                args.k = s.k;
                args.largest = largest;
                args.sorted = true;
                args.values = dt == OSP_TYPE_FP32 ? (void *)values.data()
                                                  : values64.data();
                args.indices = indices.data();
                ASSERT_OK(osp_op_topk(stream(), &args));
                EXPECT_EQ(indices, want_i);
                if (dt == OSP_TYPE_FP32)
                    EXPECT_EQ(values, want_v);
                else
                    EXPECT_EQ(
                        std::vector<float>(values64.begin(), values64.end()),
                        want_v);
            }
        }
}

TEST_F(TensorOps, TopkUnsortedHoldsTheSameSet) {
    std::vector<float> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    std::vector<float> values(4);
    std::vector<int64_t> indices(4);
    osp_topk_args args{};
    args.dtype = OSP_TYPE_FP32;
    args.x = x.data();
    args.outer = 1;
    args.n = 10;
    args.inner = 1;
    args.k = 4;
    args.largest = true;
    args.sorted = false;
    args.values = values.data();
    args.indices = indices.data();
    ASSERT_OK(osp_op_topk(stream(), &args));
    EXPECT_EQ(std::set<int64_t>(indices.begin(), indices.end()),
              (std::set<int64_t>{4, 5, 7, 8}));
    for (int j = 0; j < 4; j++)
        EXPECT_EQ(values[j], x[indices[j]]);
    args.k = 11;
    EXPECT_ERROR_CODE(osp_op_topk(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.k = -1;
    EXPECT_ERROR_CODE(osp_op_topk(stream(), &args), OSP_ERROR_INVALID_ARG);
    args.k = 2;
    args.dtype = OSP_TYPE_INT32;
    EXPECT_ERROR_CODE(osp_op_topk(stream(), &args), OSP_ERROR_UNSUPPORTED);
}

// ---- cumsum ---------------------------------------------------------------

TEST_F(TensorOps, CumsumVariants) {
    TRACE_SEED();
    for (int64_t inner : {1, 4})
        for (int variant = 0; variant < 4; variant++) {
            bool exclusive = variant & 1, reverse = variant & 2;
            SCOPED_TRACE(std::to_string(inner) +
                         (exclusive ? " exclusive" : "") +
                         (reverse ? " reverse" : ""));
            const int64_t outer = 2, n = 6;
            std::vector<int64_t> x = Ints<int64_t>(outer * n * inner, -50, 50);
            std::vector<int64_t> want(x.size());
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t acc = 0;
                    for (int64_t t = 0; t < n; t++) {
                        int64_t k = reverse ? n - 1 - t : t;
                        int64_t at = (o * n + k) * inner + i;
                        if (exclusive) {
                            want[at] = acc;
                            acc += x[at];
                        } else {
                            acc += x[at];
                            want[at] = acc;
                        }
                    }
                }
            std::vector<float> xf(x.begin(), x.end()), yf(x.size());
            std::vector<int32_t> x32(x.begin(), x.end()), y32(x.size());
            std::vector<int64_t> y64(x.size());
            for (osp_datatype dt :
                 {OSP_TYPE_FP32, OSP_TYPE_INT32, OSP_TYPE_INT64}) {
                osp_cumsum_args args{};
                args.dtype = dt;
                args.x = dt == OSP_TYPE_FP32    ? (const void *)xf.data()
                         : dt == OSP_TYPE_INT32 ? (const void *)x32.data()
                                                : (const void *)x.data();
                args.y = dt == OSP_TYPE_FP32    ? (void *)yf.data()
                         : dt == OSP_TYPE_INT32 ? (void *)y32.data()
                                                : (void *)y64.data();
                args.outer = outer;
                args.n = n;
                args.inner = inner;
                args.exclusive = exclusive;
                args.reverse = reverse;
                ASSERT_OK(osp_op_cumsum(stream(), &args));
            }
            EXPECT_EQ(y64, want);
            EXPECT_EQ(std::vector<int64_t>(y32.begin(), y32.end()), want);
            EXPECT_EQ(std::vector<int64_t>(yf.begin(), yf.end()), want);
        }
    int32_t big[2] = {INT32_MAX, 1}, y[2];
    osp_cumsum_args args{};
    args.dtype = OSP_TYPE_INT32;
    args.x = big;
    args.y = y;
    args.outer = 1;
    args.n = 2;
    args.inner = 1;
    ASSERT_OK(osp_op_cumsum(stream(), &args));
    EXPECT_EQ(y[1], INT32_MIN); // wraps
    args.dtype = OSP_TYPE_FP64;
    EXPECT_ERROR_CODE(osp_op_cumsum(stream(), &args), OSP_ERROR_UNSUPPORTED);
}

// ---- dispatch -------------------------------------------------------------

TEST_F(TensorOps, CpuSupportsEveryOp) {
    std::set<std::string> names;
    for (int k = OSP_OP_GEMM; k < OSP_OP_KIND_COUNT_; k++) {
        osp_op_kind kind = (osp_op_kind)k;
        EXPECT_TRUE(osp_device_supports_op(osp_device_cpu(), kind))
            << osp_op_kind_name(kind);
        names.insert(osp_op_kind_name(kind));
    }
    EXPECT_EQ(names.size(), (size_t)OSP_OP_KIND_COUNT_ - 1)
        << "names are unique";
    EXPECT_EQ(names.count("unknown"), 0u);
    EXPECT_STREQ(osp_op_kind_name(OSP_OP_GATHER), "gather");
    EXPECT_STREQ(osp_op_kind_name(OSP_OP_CONV), "conv");
    EXPECT_STREQ(osp_op_kind_name(OSP_OP_NONE), "none");
    EXPECT_FALSE(osp_device_supports_op(osp_device_cpu(), OSP_OP_NONE));
    EXPECT_STREQ(osp_op_kind_name(OSP_OP_KIND_COUNT_), "unknown");
    EXPECT_STREQ(osp_op_kind_name((osp_op_kind)-1), "unknown");
    EXPECT_FALSE(osp_device_supports_op(osp_device_cpu(), OSP_OP_KIND_COUNT_));
    EXPECT_FALSE(osp_device_supports_op(nullptr, OSP_OP_GEMM));
}

// A device whose table is the CPU's with some slots emptied (device_impl.h
// allows any tensor-op slot to be NULL).
class FakeDevice {
  public:
    FakeDevice() {
        ops_ = *osp_device_cpu()->ops;
        dev_.ops = &ops_;
        dev_.info = osp_device_cpu()->info;
        snprintf(dev_.info.name, sizeof dev_.info.name, "fake");
        dev_.impl = nullptr;
    }
    osp_device_ops &ops() {
        return ops_;
    }
    osp_device *device() {
        return &dev_;
    }

  private:
    osp_device_ops ops_;
    osp_device dev_;
};

TEST_F(TensorOps, MissingSlotsAreUnsupported) {
    FakeDevice fake;
    osp_device_ops &o = fake.ops();
    o.unary = nullptr;
    o.binary_nd = nullptr;
    o.where = nullptr;
    o.copy_strided = nullptr;
    o.gather = nullptr;
    o.fill = nullptr;
    o.pad = nullptr;
    o.reduce = nullptr;
    o.softmax = nullptr;
    o.layer_norm = nullptr;
    o.channel_affine = nullptr;
    o.topk = nullptr;
    o.cumsum = nullptr;
    o.gemm_ex = nullptr;
    osp_stream *raw = nullptr;
    ASSERT_OK(osp_stream_new(fake.device(), &raw));
    StreamPtr s(raw);

    for (osp_op_kind k :
         {OSP_OP_UNARY, OSP_OP_BINARY_ND, OSP_OP_WHERE, OSP_OP_COPY_STRIDED,
          OSP_OP_GATHER, OSP_OP_FILL, OSP_OP_PAD, OSP_OP_REDUCE, OSP_OP_SOFTMAX,
          OSP_OP_LAYER_NORM, OSP_OP_CHANNEL_AFFINE, OSP_OP_TOPK, OSP_OP_CUMSUM})
        EXPECT_FALSE(osp_device_supports_op(fake.device(), k))
            << osp_op_kind_name(k);
    // gemm_ex falls back to gemm; without either it is gone too.
    EXPECT_TRUE(osp_device_supports_op(fake.device(), OSP_OP_GEMM_EX));
    EXPECT_TRUE(osp_device_supports_op(fake.device(), OSP_OP_CONV));
    o.gemm = nullptr;
    EXPECT_FALSE(osp_device_supports_op(fake.device(), OSP_OP_GEMM_EX));

    float f[4] = {1, 2, 3, 4}, g[4];
    int64_t idx[1] = {0};
    auto expect_unsupported = [&](osp_error *err, const char *name) {
        ASSERT_NE(err, nullptr) << name;
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED) << name;
        EXPECT_EQ(TakeMessage(err),
                  std::string("device fake has no ") + name + " op");
    };
    auto ua = UnaryArgs(OSP_UNARY_EXP, OSP_TYPE_FP32, f, g, 4);
    expect_unsupported(osp_op_unary(s.get(), &ua), "unary");
    auto ba =
        BinaryArgs(OSP_BINARY_ND_ADD, OSP_TYPE_FP32, {4}, f, {1}, f, {1}, g);
    expect_unsupported(osp_op_binary_nd(s.get(), &ba), "binary_nd");
    bool cond[1] = {true};
    osp_where_args wa{};
    wa.elem_size = 4;
    wa.cond = cond;
    wa.x = f;
    wa.y = f;
    wa.out = g;
    expect_unsupported(osp_op_where(s.get(), &wa), "where");
    auto ca = CopyArgs(4, {4}, f, {1}, g, {1});
    expect_unsupported(osp_op_copy_strided(s.get(), &ca), "copy_strided");
    osp_gather_args ga{};
    ga.elem_size = 4;
    ga.data = f;
    ga.outer = ga.inner = 1;
    ga.axis_len = 4;
    ga.index_dtype = OSP_TYPE_INT64;
    ga.indices = idx;
    ga.n_indices = 1;
    ga.out = g;
    expect_unsupported(osp_op_gather(s.get(), &ga), "gather");
    osp_fill_args fa{};
    fa.elem_size = 4;
    fa.dst = g;
    fa.n = 4;
    expect_unsupported(osp_op_fill(s.get(), &fa), "fill");
    auto pa = PadArgs(OSP_PAD_CONSTANT, {2}, {1}, {1}, f, g);
    expect_unsupported(osp_op_pad(s.get(), &pa), "pad");
    auto ra = ReduceArgs(OSP_REDUCE_SUM, OSP_TYPE_FP32, f, 1, 4, 1, g);
    expect_unsupported(osp_op_reduce(s.get(), &ra), "reduce");
    osp_softmax_args sa{f, g, 1, 4, 1, false};
    expect_unsupported(osp_op_softmax(s.get(), &sa), "softmax");
    osp_layer_norm_args la{};
    la.x = f;
    la.out = g;
    la.rows = 1;
    la.cols = 4;
    expect_unsupported(osp_op_layer_norm(s.get(), &la), "layer_norm");
    osp_channel_affine_args aa{};
    aa.x = f;
    aa.out = g;
    aa.batch = aa.channels = 1;
    aa.spatial = 4;
    expect_unsupported(osp_op_channel_affine(s.get(), &aa), "channel_affine");
    int64_t ti[1];
    osp_topk_args ta{};
    ta.dtype = OSP_TYPE_FP32;
    ta.x = f;
    ta.outer = ta.inner = 1;
    ta.n = 4;
    ta.k = 1;
    ta.values = g;
    ta.indices = ti;
    expect_unsupported(osp_op_topk(s.get(), &ta), "topk");
    osp_cumsum_args cs{};
    cs.dtype = OSP_TYPE_FP32;
    cs.x = f;
    cs.y = g;
    cs.outer = cs.inner = 1;
    cs.n = 4;
    expect_unsupported(osp_op_cumsum(s.get(), &cs), "cumsum");
    // Argument errors come first; empty ops succeed without the slot.
    ua.x = nullptr;
    EXPECT_ERROR_CODE(osp_op_unary(s.get(), &ua), OSP_ERROR_INVALID_ARG);
    ua.n = 0;
    ASSERT_OK(osp_op_unary(s.get(), &ua));
}

TEST_F(TensorOps, NullStreamOrArgs) {
    EXPECT_ERROR_CODE(osp_op_unary(nullptr, nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_unary(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream(), nullptr),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_where(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream(), nullptr),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_gather(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_fill(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_pad(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_reduce(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_softmax(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_layer_norm(stream(), nullptr),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_channel_affine(stream(), nullptr),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_topk(stream(), nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_cumsum(nullptr, nullptr), OSP_ERROR_INVALID_ARG);
}

} // namespace

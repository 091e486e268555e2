// backends/onnx/onnx_ops_elementwise.c and onnx_ops_activation.c: each op
// built on a hand-made node, inferred on host descs and run on the CPU
// device, its outputs checked against values computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "half.h"
#include "onnx_op_harness.h"

extern "C" const onnx_op_family onnx_ops_elementwise_family;

namespace {

using namespace onnx_test;

// ---- harness (onnx_op_harness.h) -------------------------------------------

Tensor F16(const std::vector<int64_t> &d, const std::vector<float> &v) {
    std::vector<uint16_t> h;
    for (float f : v)
        h.push_back(fp32_to_fp16(f));
    return Make<uint16_t>(OSP_TYPE_FP16, d, h);
}
std::vector<float> F16Values(const Tensor &t) {
    std::vector<float> out;
    for (uint16_t h : t.Values<uint16_t>())
        out.push_back(fp16_to_fp32(h));
    return out;
}

const onnx_op *Find(const char *op_type, int64_t opset) {
    return FindOp(onnx_ops_elementwise_family, "", op_type, opset);
}

// RunCall of op_type at opset with `attrs` on `ins` (nullptr for an
// omitted input).
osp_error *RunOp(const char *op_type, int64_t opset,
                 std::vector<onnx_attr> attrs,
                 const std::vector<const Tensor *> &ins, OpResult *run,
                 size_t n_outputs = 1) {
    return RunCall(onnx_ops_elementwise_family,
                   Call(op_type, opset, "", n_outputs), Attrs(std::move(attrs)),
                   ins, run);
}

// The error code of a run expected to fail (and its message in *msg).
osp_error_code FailCode(const char *op_type, int64_t opset,
                        std::vector<onnx_attr> attrs,
                        const std::vector<const Tensor *> &ins,
                        std::string *msg = nullptr) {
    return FailCall(onnx_ops_elementwise_family, Call(op_type, opset),
                    Attrs(std::move(attrs)), ins, msg);
}

// Reference numpy broadcasting: f(a[ia], b[ib]) over the broadcast shape.
template <typename A, typename B, typename R>
std::vector<R> Ref2(const Tensor &a, const Tensor &b,
                    const std::function<R(A, B)> &f,
                    std::vector<int64_t> *out_dims) {
    int rank = std::max(a.shape.rank, b.shape.rank);
    std::vector<int64_t> dims(rank);
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a.shape.rank), ib = i - (rank - b.shape.rank);
        int64_t da = ia >= 0 ? a.shape.dims[ia] : 1;
        int64_t db = ib >= 0 ? b.shape.dims[ib] : 1;
        dims[i] = da == 1 ? db : da;
    }
    int64_t n = 1;
    for (int64_t d : dims)
        n *= d;
    std::vector<A> av = a.Values<A>();
    std::vector<B> bv = b.Values<B>();
    std::vector<R> out;
    for (int64_t flat = 0; flat < n; flat++) {
        int64_t rem = flat, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int i = rank - 1; i >= 0; i--) {
            int64_t idx = rem % dims[i];
            rem /= dims[i];
            int ia = i - (rank - a.shape.rank), ib = i - (rank - b.shape.rank);
            if (ia >= 0) {
                if (a.shape.dims[ia] != 1)
                    oa += idx * sa;
                sa *= a.shape.dims[ia];
            }
            if (ib >= 0) {
                if (b.shape.dims[ib] != 1)
                    ob += idx * sb;
                sb *= b.shape.dims[ib];
            }
        }
        out.push_back(f(av[oa], bv[ob]));
    }
    if (out_dims)
        *out_dims = dims;
    return out;
}

std::vector<float> Iota(int64_t n, float start = 0.0f, float step = 1.0f) {
    std::vector<float> v;
    for (int64_t i = 0; i < n; i++)
        v.push_back(start + step * (float)i);
    return v;
}

void ExpectNear(const std::vector<float> &got, const std::vector<float> &want,
                float tol = 1e-5f) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++) {
        if (std::isnan(want[i])) {
            EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
            continue;
        }
        EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i])))
            << "at " << i;
    }
}

// Runs a float binary op on a and b and checks it against f with numpy
// broadcasting.
void CheckFloatBinary(const char *op_type, const Tensor &a, const Tensor &b,
                      std::function<float(float, float)> f, int64_t opset = 14,
                      std::vector<onnx_attr> attrs = {}) {
    OpResult run;
    ASSERT_OK(RunOp(op_type, opset, attrs, {&a, &b}, &run));
    std::vector<int64_t> dims;
    std::vector<float> want = Ref2<float, float, float>(a, b, f, &dims);
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(run.outs[0].Dims(), dims);
    ExpectNear(run.outs[0].Values<float>(), want);
}

// ---- binary ops ------------------------------------------------------------

TEST(OnnxOpsElementwise, AddBroadcastsAScalar) {
    Tensor a = F32({2, 3}, Iota(6)), b = F32({}, {10.0f});
    CheckFloatBinary("Add", a, b, [](float x, float y) { return x + y; });
    CheckFloatBinary("Add", b, a, [](float x, float y) { return x + y; });
}

TEST(OnnxOpsElementwise, AddBroadcastsColumnByRow) {
    Tensor a = F32({3, 1}, {1, 2, 3}), b = F32({1, 4}, {10, 20, 30, 40});
    CheckFloatBinary("Add", a, b, [](float x, float y) { return x + y; });
    OpResult run;
    ASSERT_OK(RunOp("Add", 7, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(run.outs[0].Values<float>()[5], 22.0f); // [1][1] = 2 + 20
}

TEST(OnnxOpsElementwise, BroadcastsAcrossRanks) {
    Tensor a = F32({2, 3, 4}, Iota(24)), b = F32({4}, {1, -1, 2, -2});
    CheckFloatBinary("Mul", a, b, [](float x, float y) { return x * y; });
    CheckFloatBinary("Sub", b, a, [](float x, float y) { return x - y; });
    // A per-channel operand as conv biases have it, [C, 1, 1] on NCHW.
    Tensor x = F32({2, 3, 2, 2}, Iota(24, -5.0f)),
           c = F32({3, 1, 1}, {1, 2, 3});
    CheckFloatBinary("Add", x, c, [](float p, float q) { return p + q; });
    CheckFloatBinary("Div", x, c, [](float p, float q) { return p / q; });
    // Both operands broadcast in different dims, rank 4 vs 2.
    Tensor d = F32({2, 1, 3, 1}, Iota(6)), e = F32({1, 2}, {5, 7});
    CheckFloatBinary("Sub", d, e, [](float p, float q) { return p - q; });
}

TEST(OnnxOpsElementwise, EmptyOutputsRunNothing) {
    Tensor a = F32({0, 3}, {}), b = F32({3}, {1, 2, 3});
    OpResult run;
    ASSERT_OK(RunOp("Add", 13, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{0, 3}));
}

TEST(OnnxOpsElementwise, IntegerDivisionTruncatesTowardZero) {
    Tensor a = I32({4}, {7, -7, 7, -7}), b = I32({4}, {2, 2, -2, -2});
    OpResult run;
    ASSERT_OK(RunOp("Div", 14, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_INT32);
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{3, -3, -3, 3}));
    Tensor c = I64({2, 1}, {9, -9}), d = I64({3}, {4, 0, -4});
    ASSERT_OK(RunOp("Div", 14, {}, {&c, &d}, &run));
    // division by zero gives 0 rather than a trap
    EXPECT_EQ(run.outs[0].Values<int64_t>(),
              (std::vector<int64_t>{2, 0, -2, -2, 0, 2}));
}

TEST(OnnxOpsElementwise, ModFollowsFmod) {
    Tensor a = I32({4}, {-7, 7, -7, 7}), b = I32({4}, {3, 3, -3, -3});
    OpResult run;
    ASSERT_OK(RunOp("Mod", 13, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{2, 1, -1, -2})); // divisor's sign
    ASSERT_OK(RunOp("Mod", 13, {AttrInt("fmod", 1)}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{-1, 1, -1, 1})); // dividend's sign
    Tensor x = F32({2}, {-7.5f, 7.5f}), y = F32({1}, {2.0f});
    CheckFloatBinary("Mod", x, y,
                     [](float p, float q) { return std::fmod(p, q); }, 13,
                     {AttrInt("fmod", 1)});
    EXPECT_EQ(FailCode("Mod", 13, {}, {&x, &y}), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode("Mod", 13, {AttrInt("fmod", 2)}, {&a, &b}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, PowCastsTheExponent) {
    Tensor base = F32({3}, {1.5f, 2.0f, -3.0f}), e64 = I64({3}, {2, 3, 3});
    OpResult run;
    ASSERT_OK(RunOp("Pow", 15, {}, {&base, &e64}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP32);
    EXPECT_GT(run.workspace, 0u);
    ExpectNear(run.outs[0].Values<float>(), {2.25f, 8.0f, -27.0f});
    Tensor ibase = I32({3}, {1, 2, 3}), fexp = F32({3}, {4, 5, 6});
    ASSERT_OK(RunOp("Pow", 15, {}, {&ibase, &fexp}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_INT32);
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{1, 32, 729}));
    Tensor x = F32({2, 2}, {1, 2, 3, 4}), half = F32({}, {0.5f});
    CheckFloatBinary("Pow", x, half,
                     [](float p, float q) { return std::pow(p, q); });
}

TEST(OnnxOpsElementwise, PReluBroadcastsTheSlopeOneWay) {
    Tensor x = F32({2, 3, 2}, Iota(12, -6.0f)),
           slope = F32({3, 1}, {0.1f, 0.2f, 0.3f});
    CheckFloatBinary(
        "PRelu", x, slope, [](float p, float s) { return p < 0 ? p * s : p; },
        9);
    Tensor big = F32({2, 2, 3, 2}, Iota(24));
    EXPECT_EQ(FailCode("PRelu", 9, {}, {&x, &big}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, ComparisonsGiveBool) {
    Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6}), b = F32({3}, {2, 2, 5});
    struct Case {
        const char *op;
        int64_t opset;
        std::function<uint8_t(float, float)> f;
    } cases[] = {
        {"Equal", 11, [](float x, float y) -> uint8_t { return x == y; }},
        {"Less", 9, [](float x, float y) -> uint8_t { return x < y; }},
        {"LessOrEqual", 12, [](float x, float y) -> uint8_t { return x <= y; }},
        {"Greater", 9, [](float x, float y) -> uint8_t { return x > y; }},
        {"GreaterOrEqual", 12,
         [](float x, float y) -> uint8_t { return x >= y; }},
    };
    for (const Case &c : cases) {
        OpResult run;
        ASSERT_OK(RunOp(c.op, c.opset, {}, {&a, &b}, &run));
        EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_BOOL) << c.op;
        EXPECT_EQ(run.outs[0].Values<uint8_t>(),
                  (Ref2<float, float, uint8_t>(a, b, c.f, nullptr)))
            << c.op;
    }
    Tensor p = I64({3}, {-1, 5, 7}), q = I64({}, {5});
    OpResult run;
    ASSERT_OK(RunOp("Less", 13, {}, {&p, &q}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{1, 0, 0}));
    Tensor t = Bool({3}, {1, 0, 1}), u = Bool({1}, {1});
    ASSERT_OK(RunOp("Equal", 13, {}, {&t, &u}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
    // LessOrEqual begins at opset 12
    EXPECT_EQ(FailCode("LessOrEqual", 11, {}, {&a, &b}), OSP_ERROR_NOT_FOUND);
}

TEST(OnnxOpsElementwise, LogicTakesBool) {
    Tensor a = Bool({2, 2}, {0, 0, 1, 1}), b = Bool({2}, {0, 1});
    const std::pair<const char *, std::vector<uint8_t>> cases[] = {
        {"And", {0, 0, 0, 1}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 1, 0}}};
    for (const auto &c : cases) {
        OpResult run;
        ASSERT_OK(RunOp(c.first, 7, {}, {&a, &b}, &run));
        EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_BOOL);
        EXPECT_EQ(run.outs[0].Values<uint8_t>(), c.second) << c.first;
    }
    Tensor i = I32({2}, {1, 0});
    EXPECT_EQ(FailCode("And", 7, {}, {&i, &i}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, BitShiftFollowsDirection) {
    Tensor a = U8({3}, {16, 4, 1}), b = U8({3}, {1, 2, 3});
    OpResult run;
    ASSERT_OK(RunOp("BitShift", 11, {AttrString("direction", "LEFT")}, {&a, &b},
                    &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{32, 16, 8}));
    ASSERT_OK(RunOp("BitShift", 11, {AttrString("direction", "RIGHT")},
                    {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{8, 1, 0}));
    EXPECT_EQ(FailCode("BitShift", 11, {}, {&a, &b}), OSP_ERROR_INVALID_ARG);
    Tensor s = I32({3}, {1, 2, 3});
    EXPECT_EQ(
        FailCode("BitShift", 11, {AttrString("direction", "LEFT")}, {&s, &s}),
        OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, MixedDtypesAreRefusedNamingBoth) {
    Tensor a = F32({2}, {1, 2}), b = I64({2}, {1, 2});
    std::string msg;
    EXPECT_EQ(FailCode("Add", 14, {}, {&a, &b}, &msg), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("FP32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("INT64"), std::string::npos) << msg;
    Tensor c = F32({3}, {1, 2, 3});
    EXPECT_EQ(FailCode("Add", 14, {}, {&a, &c}), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode("Add", 14, {}, {&a}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, HalfInputsComputeInFp32) {
    Tensor a = F16({2, 2}, {1.5f, -2.0f, 0.25f, 100.0f}),
           b = F16({2}, {0.5f, 2.0f});
    OpResult run;
    ASSERT_OK(RunOp("Add", 14, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP16);
    ExpectNear(F16Values(run.outs[0]), {2.0f, 0.0f, 0.75f, 102.0f});
    ASSERT_OK(RunOp("Greater", 13, {}, {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{1, 0, 0, 1}));
}

TEST(OnnxOpsElementwise, DoubleIsNative) {
    Tensor a = F64({3}, {1e300, 2.0, -1.0}), b = F64({}, {0.5});
    OpResult run;
    ASSERT_OK(RunOp("Mul", 14, {}, {&a, &b}, &run));
    EXPECT_EQ(run.workspace, 0u);
    EXPECT_EQ(run.outs[0].Values<double>(),
              (std::vector<double>{5e299, 1.0, -0.5}));
}

// ---- variadic ops ----------------------------------------------------------

TEST(OnnxOpsElementwise, MeanOfThreeBroadcasts) {
    Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6}), b = F32({3}, {3, 6, 9}),
           c = F32({2, 1}, {-3, 30});
    OpResult run;
    ASSERT_OK(RunOp("Mean", 13, {}, {&a, &b, &c}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(run.outs[0].Values<float>(),
               {1.0f / 3, 5.0f / 3, 3.0f, 37.0f / 3, 41.0f / 3, 15.0f});
    ASSERT_OK(RunOp("Mean", 8, {}, {&b}, &run));
    ExpectNear(run.outs[0].Values<float>(), {3, 6, 9});
    ASSERT_OK(RunOp("Mean", 13, {}, {&b, &b}, &run));
    ExpectNear(run.outs[0].Values<float>(), {3, 6, 9});
}

TEST(OnnxOpsElementwise, SumMaxMinChain) {
    Tensor a = F32({2, 2}, {1, 2, 3, 4}), b = F32({2}, {10, 20}),
           c = F32({2, 1}, {100, 200}), d = F32({}, {1000});
    OpResult run;
    ASSERT_OK(RunOp("Sum", 13, {}, {&a, &b, &c, &d}, &run));
    ExpectNear(run.outs[0].Values<float>(), {1111, 1122, 1213, 1224});
    ASSERT_OK(RunOp("Sum", 13, {}, {&a, &b, &c}, &run));
    ExpectNear(run.outs[0].Values<float>(), {111, 122, 213, 224});
    ASSERT_OK(RunOp("Sum", 13, {}, {&a}, &run));
    ExpectNear(run.outs[0].Values<float>(), {1, 2, 3, 4});
    Tensor i = I32({3}, {5, -1, 7}), j = I32({3}, {2, 3, 9}), k = I32({}, {4});
    ASSERT_OK(RunOp("Max", 13, {}, {&i, &j, &k}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(), (std::vector<int32_t>{5, 4, 9}));
    ASSERT_OK(RunOp("Min", 13, {}, {&i, &j, &k}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(), (std::vector<int32_t>{2, -1, 4}));
    ASSERT_OK(RunOp("Max", 13, {}, {&i}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(), (std::vector<int32_t>{5, -1, 7}));
    EXPECT_EQ(FailCode("Mean", 13, {}, {&i, &j}), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode("Max", 13, {}, {&i, &a}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, HalfMeanAndMax) {
    Tensor a = F16({2}, {1.0f, 4.0f}), b = F16({2}, {2.0f, 3.0f}),
           c = F16({1}, {6.0f});
    OpResult run;
    ASSERT_OK(RunOp("Mean", 13, {}, {&a, &b, &c}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP16);
    ExpectNear(F16Values(run.outs[0]), {3.0f, 13.0f / 3}, 1e-3f);
    ASSERT_OK(RunOp("Max", 13, {}, {&a, &b}, &run));
    ExpectNear(F16Values(run.outs[0]), {2.0f, 4.0f});
}

// ---- Clip ------------------------------------------------------------------

TEST(OnnxOpsElementwise, ClipBeforeOpset11ReadsAttributes) {
    Tensor x = F32({5}, {-3, -1, 0, 1, 3});
    OpResult run;
    ASSERT_OK(RunOp("Clip", 7, {AttrFloat("min", -1.5f), AttrFloat("max", 2)},
                    {&x}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-1.5f, -1, 0, 1, 2});
    ASSERT_OK(RunOp("Clip", 10, {AttrFloat("max", 0.5f)}, {&x}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-3, -1, 0, 0.5f, 0.5f});
    Tensor d = F64({3}, {-2, 0, 2});
    ASSERT_OK(RunOp("Clip", 7, {AttrFloat("min", -1), AttrFloat("max", 1)},
                    {&d}, &run));
    EXPECT_EQ(run.outs[0].Values<double>(), (std::vector<double>{-1, 0, 1}));
}

TEST(OnnxOpsElementwise, ClipFromOpset11ReadsInputs) {
    Tensor x = F32({2, 3}, {-3, -1, 0, 1, 3, 5});
    Tensor lo = F32({}, {-2}, true), hi = F32({}, {4}, true);
    OpResult run;
    ASSERT_OK(RunOp("Clip", 11, {}, {&x, &lo, &hi}, &run));
    EXPECT_EQ(run.workspace, 0u); // one unary CLIP
    ExpectNear(run.outs[0].Values<float>(), {-2, -1, 0, 1, 3, 4});
    ASSERT_OK(RunOp("Clip", 12, {}, {&x, nullptr, &hi}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-3, -1, 0, 1, 3, 4});
    ASSERT_OK(RunOp("Clip", 13, {}, {&x}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-3, -1, 0, 1, 3, 5});
    // min > max: every value becomes max
    Tensor lo5 = F32({}, {5}, true), hi1 = F32({}, {1}, true);
    ASSERT_OK(RunOp("Clip", 13, {}, {&x, &lo5, &hi1}, &run));
    ExpectNear(run.outs[0].Values<float>(), {1, 1, 1, 1, 1, 1});
}

TEST(OnnxOpsElementwise, ClipWithBoundsOnlyOnTheDevice) {
    Tensor x = F32({2, 3}, {-3, -1, 0, 1, 3, 5});
    Tensor lo = F32({}, {-2}), hi = F32({1}, {4}); // not known at planning
    OpResult run;
    ASSERT_OK(RunOp("Clip", 11, {}, {&x, &lo, &hi}, &run));
    EXPECT_GT(run.workspace, 0u);
    ExpectNear(run.outs[0].Values<float>(), {-2, -1, 0, 1, 3, 4});
    ASSERT_OK(RunOp("Clip", 11, {}, {&x, &lo}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-2, -1, 0, 1, 3, 5});
    Tensor big = F32({2}, {1, 2});
    EXPECT_EQ(FailCode("Clip", 11, {}, {&x, &big}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, ClipIntegers) {
    Tensor x = I32({4}, {-100, -5, 5, 100}), lo = I32({}, {-10}, true),
           hi = I32({}, {10}, true);
    OpResult run;
    ASSERT_OK(RunOp("Clip", 12, {}, {&x, &lo, &hi}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{-10, -5, 5, 10}));
    // A bound FP32 cannot hold exactly goes through binary_nd.
    const int64_t b = (int64_t(1) << 40) + 1;
    Tensor y = I64({3}, {0, b - 1, b + 1}), lo64 = I64({}, {b}, true);
    ASSERT_OK(RunOp("Clip", 13, {}, {&y, &lo64}, &run));
    EXPECT_EQ(run.outs[0].Values<int64_t>(),
              (std::vector<int64_t>{b, b, b + 1}));
    Tensor u = U8({3}, {0, 100, 255}), ulo = U8({}, {10}, true),
           uhi = U8({}, {200}, true);
    ASSERT_OK(RunOp("Clip", 13, {}, {&u, &ulo, &uhi}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{10, 100, 200}));
    ASSERT_OK(RunOp("Clip", 13, {}, {&u}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{0, 100, 255}));
    Tensor flo = F32({}, {1}, true);
    EXPECT_EQ(FailCode("Clip", 13, {}, {&x, &flo}), OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsElementwise, ClipHalf) {
    Tensor x = F16({4}, {-8, -1, 2, 9}), lo = F16({}, {0}), hi = F16({}, {6});
    lo.known = hi.known = true;
    OpResult run;
    ASSERT_OK(RunOp("Clip", 13, {}, {&x, &lo, &hi}, &run));
    ExpectNear(F16Values(run.outs[0]), {0, 0, 2, 6});
    lo.known = false;
    EXPECT_EQ(FailCode("Clip", 13, {}, {&x, &lo, &hi}), OSP_ERROR_INVALID_ARG);
}

// ---- Where -----------------------------------------------------------------

TEST(OnnxOpsElementwise, WhereBroadcastsAllThree) {
    Tensor c = Bool({3, 1}, {1, 0, 1}), x = F32({1, 4}, {1, 2, 3, 4}),
           y = F32({}, {-1});
    OpResult run;
    ASSERT_OK(RunOp("Where", 9, {}, {&c, &x, &y}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{3, 4}));
    ExpectNear(run.outs[0].Values<float>(),
               {1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
    Tensor c2 = Bool({2, 2}, {1, 0, 0, 1}), a = I64({2, 2}, {1, 2, 3, 4}),
           b = I64({2}, {9, 8});
    ASSERT_OK(RunOp("Where", 16, {}, {&c2, &a, &b}, &run));
    EXPECT_EQ(run.outs[0].Values<int64_t>(),
              (std::vector<int64_t>{1, 8, 9, 4}));
    EXPECT_EQ(FailCode("Where", 16, {}, {&x, &x, &x}), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode("Where", 16, {}, {&c, &x, &a}), OSP_ERROR_INVALID_ARG);
}

// ---- Cast ------------------------------------------------------------------

TEST(OnnxOpsElementwise, CastConverts) {
    Tensor x = F32({5}, {-2.7f, -0.5f, 0.0f, 1.5f, 3.9f});
    OpResult run;
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 7)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_INT64);
    EXPECT_EQ(run.outs[0].Values<int64_t>(),
              (std::vector<int64_t>{-2, 0, 0, 1, 3}));
    Tensor back = run.outs[0];
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 1)}, {&back}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-2, 0, 0, 1, 3});
    ASSERT_OK(RunOp("Cast", 9, {AttrInt("to", 9)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_BOOL);
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{1, 1, 0, 1, 1}));
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 10)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP16);
    Tensor h = run.outs[0];
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 1)}, {&h}, &run));
    ExpectNear(run.outs[0].Values<float>(), {-2.7f, -0.5f, 0.0f, 1.5f, 3.9f},
               1e-3f);
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 1)}, {&x}, &run)); // a copy
    ExpectNear(run.outs[0].Values<float>(), {-2.7f, -0.5f, 0.0f, 1.5f, 3.9f});
    ASSERT_OK(RunOp("Cast", 13, {AttrInt("to", 11)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP64);
    EXPECT_EQ(run.outs[0].Values<double>()[3], 1.5);
}

TEST(OnnxOpsElementwise, CastLikeTakesTheSecondInputsDtype) {
    Tensor x = I32({2}, {3, -4}), like = F64({1}, {0});
    OpResult run;
    ASSERT_OK(RunOp("CastLike", 15, {}, {&x, &like}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP64);
    EXPECT_EQ(run.outs[0].Values<double>(), (std::vector<double>{3, -4}));
    EXPECT_EQ(FailCode("CastLike", 13, {}, {&x, &like}), OSP_ERROR_NOT_FOUND);
}

// Cast to and from STRING (to = 8) is served (onnx_ops_strings.c; its
// text rules in test_onnx_strings.cc, through the server against
// onnxruntime in tests/integration/test_onnx_strings.py).
TEST(OnnxOpsElementwise, CastRefusesWhatItCannotDo) {
    Tensor x = F32({1}, {1});
    std::string msg;
    EXPECT_EQ(FailCode("Cast", 13, {AttrInt("to", 99)}, {&x}, &msg),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_NE(msg.find("99"), std::string::npos) << msg;
    EXPECT_EQ(FailCode("Cast", 13, {AttrInt("to", 99)}, {&x}),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode("Cast", 13, {}, {&x}), OSP_ERROR_INVALID_ARG);
}

// ---- unary ops -------------------------------------------------------------

struct UnaryCase {
    const char *op;
    int64_t opset;
    std::vector<onnx_attr> attrs;
    std::function<float(float)> f;
};

float Sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}
float Softplus(float x) {
    return std::log1p(std::exp(x));
}

TEST(OnnxOpsActivation, FloatOpsMatchTheirDefinitions) {
    const float selu_a = 1.67326319217681884765625f,
                selu_g = 1.05070102214813232421875f;
    const UnaryCase cases[] = {
        {"Abs", 13, {}, [](float x) { return std::fabs(x); }},
        {"Neg", 13, {}, [](float x) { return -x; }},
        {"Sign", 13, {}, [](float x) { return (float)((x > 0) - (x < 0)); }},
        {"Relu", 14, {}, [](float x) { return x < 0 ? 0.0f : x; }},
        {"Exp", 13, {}, [](float x) { return std::exp(x); }},
        {"Floor", 13, {}, [](float x) { return std::floor(x); }},
        {"Ceil", 13, {}, [](float x) { return std::ceil(x); }},
        {"Round", 11, {}, [](float x) { return std::nearbyint(x); }},
        {"Sigmoid", 13, {}, Sigmoid},
        {"Tanh", 13, {}, [](float x) { return std::tanh(x); }},
        {"Erf", 13, {}, [](float x) { return std::erf(x); }},
        {"Softplus", 7, {}, Softplus},
        {"Softsign", 7, {}, [](float x) { return x / (1 + std::fabs(x)); }},
        {"Elu", 7, {}, [](float x) { return x < 0 ? std::expm1(x) : x; }},
        {"Elu",
         7,
         {AttrFloat("alpha", 0.5f)},
         [](float x) { return x < 0 ? 0.5f * std::expm1(x) : x; }},
        {"Celu",
         12,
         {AttrFloat("alpha", 2.0f)},
         [](float x) {
             return std::max(0.0f, x) +
                    std::min(0.0f, 2.0f * std::expm1(x / 2.0f));
         }},
        {"Selu",
         7,
         {},
         [=](float x) {
             return selu_g * (x <= 0 ? selu_a * std::expm1(x) : x);
         }},
        {"Selu",
         7,
         {AttrFloat("alpha", 2.0f), AttrFloat("gamma", 3.0f)},
         [](float x) { return 3.0f * (x <= 0 ? 2.0f * std::expm1(x) : x); }},
        {"LeakyRelu", 7, {}, [](float x) { return x < 0 ? 0.01f * x : x; }},
        {"LeakyRelu",
         16,
         {AttrFloat("alpha", 0.2f)},
         [](float x) { return x < 0 ? 0.2f * x : x; }},
        {"ThresholdedRelu", 10, {}, [](float x) { return x > 1 ? x : 0.0f; }},
        {"HardSigmoid",
         7,
         {},
         [](float x) {
             return std::max(0.0f, std::min(1.0f, 0.2f * x + 0.5f));
         }},
        {"HardSigmoid",
         7,
         {AttrFloat("alpha", 0.5f), AttrFloat("beta", 0.25f)},
         [](float x) {
             return std::max(0.0f, std::min(1.0f, 0.5f * x + 0.25f));
         }},
        {"HardSwish",
         14,
         {},
         [](float x) {
             return x * std::max(0.0f, std::min(1.0f, x / 6 + 0.5f));
         }},
        {"Mish", 18, {}, [](float x) { return x * std::tanh(Softplus(x)); }},
        {"Sin", 7, {}, [](float x) { return std::sin(x); }},
        {"Cos", 7, {}, [](float x) { return std::cos(x); }},
        {"Tan", 7, {}, [](float x) { return std::tan(x); }},
        {"Atan", 7, {}, [](float x) { return std::atan(x); }},
        {"Sinh", 9, {}, [](float x) { return std::sinh(x); }},
        {"Cosh", 9, {}, [](float x) { return std::cosh(x); }},
        {"Asinh", 9, {}, [](float x) { return std::asinh(x); }},
        {"Gelu",
         20,
         {},
         [](float x) {
             return 0.5f * x * (1 + std::erf(x / std::sqrt(2.0f)));
         }},
        {"Gelu",
         20,
         {AttrString("approximate", "tanh")},
         [](float x) {
             return 0.5f * x *
                    (1 +
                     std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
         }},
    };
    Tensor x =
        F32({2, 5}, {-3.5f, -2, -1.25f, -0.5f, 0, 0.5f, 1.25f, 2, 2.5f, 3.5f});
    for (const UnaryCase &c : cases) {
        OpResult run;
        ASSERT_OK(RunOp(c.op, c.opset, c.attrs, {&x}, &run));
        EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP32);
        EXPECT_EQ(run.outs[0].Dims(), x.Dims());
        std::vector<float> want;
        for (float v : x.Values<float>())
            want.push_back(c.f(v));
        SCOPED_TRACE(c.op);
        ExpectNear(run.outs[0].Values<float>(), want, 1e-5f);
    }
}

TEST(OnnxOpsActivation, DomainLimitedOps) {
    const UnaryCase cases[] = {
        {"Log", 13, {}, [](float x) { return std::log(x); }},
        {"Sqrt", 13, {}, [](float x) { return std::sqrt(x); }},
        {"Reciprocal", 13, {}, [](float x) { return 1 / x; }},
        {"Asin", 7, {}, [](float x) { return std::asin(x / 4); }},
        {"Acos", 7, {}, [](float x) { return std::acos(x / 4); }},
        {"Atanh", 9, {}, [](float x) { return std::atanh(x / 4); }},
        {"Acosh", 9, {}, [](float x) { return std::acosh(x); }},
    };
    Tensor x = F32({4}, {1, 1.5f, 2, 3});
    Tensor quarter = F32({4}, {0.25f, 0.375f, 0.5f, 0.75f});
    for (const UnaryCase &c : cases) {
        bool scaled = c.op[0] == 'A' && strcmp(c.op, "Acosh") != 0;
        OpResult run;
        ASSERT_OK(
            RunOp(c.op, c.opset, c.attrs, {scaled ? &quarter : &x}, &run));
        std::vector<float> want;
        for (float v : x.Values<float>())
            want.push_back(c.f(v));
        SCOPED_TRACE(c.op);
        ExpectNear(run.outs[0].Values<float>(), want, 1e-5f);
    }
}

TEST(OnnxOpsActivation, IsNanIsInfGiveBool) {
    const float inf = std::numeric_limits<float>::infinity();
    Tensor x = F32({4}, {1, std::nanf(""), inf, -inf});
    OpResult run;
    ASSERT_OK(RunOp("IsNaN", 13, {}, {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_BOOL);
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{0, 1, 0, 0}));
    ASSERT_OK(RunOp("IsInf", 10, {}, {&x}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{0, 0, 1, 1}));
    ASSERT_OK(RunOp("IsInf", 10, {AttrInt("detect_negative", 0)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{0, 0, 1, 0}));
    ASSERT_OK(RunOp("IsInf", 10, {AttrInt("detect_positive", 0)}, {&x}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(),
              (std::vector<uint8_t>{0, 0, 0, 1}));
    Tensor h = F16({3}, {1, std::nanf(""), inf});
    ASSERT_OK(RunOp("IsNaN", 13, {}, {&h}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
}

TEST(OnnxOpsActivation, IntegerAndBoolOps) {
    Tensor i = I32({4}, {-7, 0, 3, std::numeric_limits<int32_t>::min() + 1});
    OpResult run;
    ASSERT_OK(RunOp("Abs", 13, {}, {&i}, &run));
    EXPECT_EQ(
        run.outs[0].Values<int32_t>(),
        (std::vector<int32_t>{7, 0, 3, std::numeric_limits<int32_t>::max()}));
    ASSERT_OK(RunOp("Neg", 13, {}, {&i}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>()[0], 7);
    ASSERT_OK(RunOp("Sign", 13, {}, {&i}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{-1, 0, 1, -1}));
    ASSERT_OK(RunOp("Relu", 14, {}, {&i}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{0, 0, 3, 0}));
    Tensor l = I64({2}, {-5, 5});
    ASSERT_OK(RunOp("Abs", 13, {}, {&l}, &run));
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{5, 5}));
    Tensor b = Bool({3}, {1, 0, 1});
    ASSERT_OK(RunOp("Not", 7, {}, {&b}, &run));
    EXPECT_EQ(run.outs[0].Values<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
    EXPECT_EQ(FailCode("Exp", 13, {}, {&i}), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode("Not", 7, {}, {&i}), OSP_ERROR_UNSUPPORTED);
    Tensor u = U8({2}, {1, 2});
    EXPECT_EQ(FailCode("Neg", 13, {}, {&u}), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode("Gelu", 20, {AttrString("approximate", "fast")}, {&u}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsActivation, HalfRunsInFp32) {
    Tensor h = F16({4}, {-2, -0.5f, 0.5f, 2});
    OpResult run;
    ASSERT_OK(RunOp("Sigmoid", 13, {}, {&h}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP16);
    EXPECT_GE(run.workspace, 4 * sizeof(float));
    ExpectNear(F16Values(run.outs[0]),
               {Sigmoid(-2), Sigmoid(-0.5f), Sigmoid(0.5f), Sigmoid(2)}, 1e-3f);
    ASSERT_OK(RunOp("Relu", 14, {}, {&h}, &run));
    ExpectNear(F16Values(run.outs[0]), {0, 0, 0.5f, 2});
}

TEST(OnnxOpsActivation, OpsBeforeTheirOpsetAreNotServed) {
    EXPECT_EQ(Find("Celu", 11), nullptr);
    EXPECT_EQ(Find("HardSwish", 13), nullptr);
    EXPECT_NE(Find("HardSwish", 14), nullptr);
    EXPECT_NE(Find("Relu", 7), nullptr);
    EXPECT_EQ(Find("Relu", 6), nullptr);
}

// Every entry names the device ops it runs, terminated within the array.
TEST(OnnxOpsElementwise, EveryOpListsItsDeviceOps) {
    const onnx_op_family &fam = onnx_ops_elementwise_family;
    for (size_t i = 0; i < fam.n_ops; i++) {
        const onnx_op &op = fam.ops[i];
        size_t n = 0;
        while (n < 8 && op.uses[n] != OSP_OP_KIND_COUNT_)
            n++;
        EXPECT_LT(n, 8u) << op.op_type;
        EXPECT_GT(n, 0u) << op.op_type;
        EXPECT_NE(op.infer, nullptr) << op.op_type;
        EXPECT_NE(op.run, nullptr) << op.op_type;
        // one entry per op type: a second would never be found
        for (size_t j = 0; j < i; j++)
            EXPECT_STRNE(fam.ops[j].op_type, op.op_type);
    }
}

} // namespace

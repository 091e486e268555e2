// The ONNX runtime's shape and data-movement ops (backends/onnx/
// onnx_ops_shape.c, onnx_ops_movement.c) and the op helpers
// (onnx_ops_util.c), each driven like the planner drives it: a node built
// by hand, onnx_op_find, prepare, infer on descs (with host values where
// the op needs them), then run on the CPU device, compared with values
// computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "onnx_op_harness.h"

namespace {

using namespace onnx_test;

// ---- a small harness (onnx_op_harness.h) -----------------------------------

// 0, 1, 2, ... as floats.
std::vector<float> Iota(int64_t n, float start = 0) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[(size_t)i] = start + (float)i;
    return v;
}

struct Result {
    osp_error_code code = OSP_ERROR_UNKNOWN; // of the error, if any
    std::string error;                       // "" on success
    std::vector<Tensor> outputs;
    bool aliased = false;
    bool ok() const {
        return error.empty();
    }
};

// RunNode of n's op as onnx_op_find picks it, on `inputs` (Absent() for an
// omitted one).
Result RunOp(Node &n, std::vector<Tensor> inputs) {
    std::vector<const Tensor *> ins;
    for (const Tensor &t : inputs)
        ins.push_back(&t);
    OpResult res;
    Result r;
    if (osp_error *err = RunNode(nullptr, n, ins, &res)) {
        r.code = osp_error_get_code(err);
        r.error = TakeMessage(err);
    }
    r.outputs = std::move(res.outs);
    r.aliased = res.aliased;
    return r;
}

#define ASSERT_RUN_OK(r) ASSERT_TRUE((r).ok()) << (r).error

using Dims = std::vector<int64_t>;

// Row-major strides of dims.
Dims Strides(const Dims &d) {
    Dims s(d.size(), 1);
    for (int i = (int)d.size() - 2; i >= 0; i--)
        s[i] = s[i + 1] * d[i + 1];
    return s;
}

// Calls f(index) for every multi-index of dims, in row-major order.
template <typename F> void ForEach(const Dims &dims, F f) {
    int64_t n = 1;
    for (auto d : dims)
        n *= d;
    Dims idx(dims.size(), 0);
    for (int64_t k = 0; k < n; k++) {
        f(idx);
        for (int i = (int)dims.size() - 1; i >= 0; i--) {
            if (++idx[i] < dims[i])
                break;
            idx[i] = 0;
        }
    }
}

// ---- helpers (onnx_ops_util.c) ----------------------------------------------

TEST(OnnxOpsUtil, AttributesAndFusedActivation) {
    Node n("Conv", 13);
    n.Int("k", 3)
        .String("activation", "LeakyRelu")
        .Floats("activation_params", {0.2f});
    const onnx_node *node = n.Get();
    int64_t k;
    ASSERT_EQ(onnx_attr_int(node, "k", 0, &k), nullptr);
    EXPECT_EQ(k, 3);
    ASSERT_EQ(onnx_attr_int(node, "missing", 7, &k), nullptr);
    EXPECT_EQ(k, 7);
    float f;
    osp_error *err = onnx_attr_float(node, "activation", 0, &f);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(std::string(osp_error_message(err)).find("activation"),
              std::string::npos);
    osp_error_free(err);

    osp_unary_op op;
    float alpha, beta;
    ASSERT_EQ(onnx_fused_activation(node, &op, &alpha, &beta), nullptr);
    EXPECT_EQ(op, OSP_UNARY_LEAKY_RELU);
    EXPECT_FLOAT_EQ(alpha, 0.2f);

    Node none("Conv", 13);
    ASSERT_EQ(onnx_fused_activation(none.Get(), &op, &alpha, &beta), nullptr);
    EXPECT_EQ(op, OSP_UNARY_IDENTITY);
    Node clip("Conv", 13);
    clip.String("activation", "Clip").Floats("activation_params", {0.f, 6.f});
    ASSERT_EQ(onnx_fused_activation(clip.Get(), &op, &alpha, &beta), nullptr);
    EXPECT_EQ(op, OSP_UNARY_CLIP);
    EXPECT_FLOAT_EQ(beta, 6.f);
    Node bad("Conv", 13);
    bad.String("activation", "Swoosh");
    err = onnx_fused_activation(bad.Get(), &op, &alpha, &beta);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
    osp_error_free(err);
}

TEST(OnnxOpsUtil, BroadcastAndAxes) {
    Node n("Add", 13);
    const onnx_node *node = n.Get();
    osp_shape a = Shape({2, 1, 4}), b = Shape({3, 1}), out;
    ASSERT_EQ(onnx_broadcast_shape(node, &a, &b, &out), nullptr);
    EXPECT_EQ(out.rank, 3);
    EXPECT_EQ(out.dims[1], 3);
    int64_t s[OSP_MAX_DIMS];
    onnx_broadcast_strides(&b, &out, s);
    EXPECT_EQ(s[0], 0);
    EXPECT_EQ(s[1], 1);
    EXPECT_EQ(s[2], 0);
    osp_shape c = Shape({5});
    osp_error *err = onnx_broadcast_shape(node, &a, &c, &out);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(osp_error_message(err)).find("n0"),
              std::string::npos);
    osp_error_free(err);
    int ax;
    ASSERT_EQ(onnx_axis(node, -1, 3, &ax), nullptr);
    EXPECT_EQ(ax, 2);
    err = onnx_axis(node, 3, 3, &ax);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    osp_shape neg = Shape({2, -1});
    err = onnx_check_shape(node, &neg, OSP_TYPE_FP32);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    osp_shape huge = Shape({1LL << 30, 1LL << 30});
    err = onnx_check_shape(node, &huge, OSP_TYPE_FP32);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
}

TEST(OnnxOpsUtil, ReadIntsAndScalar) {
    Node n("Reshape", 13, 2);
    Tensor t = Make<int32_t>(OSP_TYPE_INT32, {3}, {4, -1, 2}, true);
    onnx_desc d{true, t.dtype, t.shape, t.bytes.data()};
    int64_t v[4];
    size_t count;
    ASSERT_EQ(onnx_read_ints(n.Get(), 1, &d, v, 4, &count), nullptr);
    EXPECT_EQ(count, 3u);
    EXPECT_EQ(v[1], -1);
    osp_error *err = onnx_read_ints(n.Get(), 1, &d, v, 2, &count);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    d.host = nullptr;
    err = onnx_read_ints(n.Get(), 1, &d, v, 4, &count);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(osp_error_message(err)).find("in1"),
              std::string::npos);
    osp_error_free(err);
    uint16_t half = 0x3e00; // 1.5
    onnx_desc h{true, OSP_TYPE_FP16, Shape({}), &half};
    double x;
    ASSERT_EQ(onnx_read_scalar(n.Get(), 0, &h, &x), nullptr);
    EXPECT_DOUBLE_EQ(x, 1.5);
}

// ---- Shape, Size ------------------------------------------------------------

TEST(OnnxOpsShape, Shape) {
    Node n("Shape", 13);
    Result r = RunOp(n, {F32({2, 3, 4}, Iota(24))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].dtype, OSP_TYPE_INT64);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({2, 3, 4}));

    Node s15("Shape", 15);
    s15.Int("start", -2);
    r = RunOp(s15, {F32({2, 3, 4}, Iota(24))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({3, 4}));

    Node e15("Shape", 15);
    e15.Int("start", 1).Int("end", -5); // clamped: empty
    r = RunOp(e15, {F32({2, 3, 4}, Iota(24))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({0}));
}

TEST(OnnxOpsShape, Size) {
    Node n("Size", 13);
    Result r = RunOp(n, {F32({2, 5}, Iota(10))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].shape.rank, 0);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({10}));
}

// ---- Reshape ----------------------------------------------------------------

TEST(OnnxOpsShape, ReshapeZeroAndMinusOne) {
    Node n("Reshape", 13, 2);
    Result r = RunOp(n, {F32({2, 3, 4}, Iota(24)), KnownI64({3}, {0, -1, 2})});
    ASSERT_RUN_OK(r);
    EXPECT_TRUE(r.aliased);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 6, 2}));

    // allowzero=1 (opset 14): 0 is a real zero.
    Node z("Reshape", 14, 2);
    z.Int("allowzero", 1);
    r = RunOp(z, {F32({0, 3}, {}), KnownI64({3}, {3, 0, 5})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3, 0, 5}));
    // allowzero=0: 0 copies the input's dim.
    Node nz("Reshape", 14, 2);
    r = RunOp(nz, {F32({0, 3}, {}), KnownI64({2}, {0, 3})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({0, 3}));
    // allowzero=1 with 0 and -1 is invalid.
    r = RunOp(z, {F32({0, 3}, {}), KnownI64({2}, {0, -1})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsShape, ReshapeErrors) {
    Node n("Reshape", 13, 2);
    Result r = RunOp(n, {F32({2, 3}, Iota(6)), KnownI64({2}, {-1, -1})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    r = RunOp(n, {F32({2, 3}, Iota(6)), KnownI64({2}, {4, 2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    EXPECT_NE(r.error.find("Reshape"), std::string::npos) << r.error;
    r = RunOp(n, {F32({2, 3}, Iota(6)), KnownI64({2}, {4, -1})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    r = RunOp(n, {F32({2, 3}, Iota(6)), I64({2}, {3, 2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    EXPECT_NE(r.error.find("must be known"), std::string::npos);
}

// ---- Flatten, Squeeze, Unsqueeze, Identity ----------------------------------

TEST(OnnxOpsShape, Flatten) {
    Node n("Flatten", 13);
    n.Int("axis", 2);
    Result r = RunOp(n, {F32({2, 3, 4, 5}, Iota(120))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({6, 20}));
    Node z("Flatten", 13);
    z.Int("axis", 0);
    r = RunOp(z, {F32({2, 3}, Iota(6))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1, 6}));
    Node neg("Flatten", 11);
    neg.Int("axis", -1);
    r = RunOp(neg, {F32({2, 3, 4}, Iota(24))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({6, 4}));
    Node old("Flatten", 9);
    old.Int("axis", -1);
    r = RunOp(old, {F32({2, 3, 4}, Iota(24))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsShape, SqueezeAttrAndInput) {
    Node a("Squeeze", 11);
    a.Ints("axes", {-1, 0});
    Result r = RunOp(a, {F32({1, 3, 1, 1}, Iota(3))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3, 1}));
    Node all("Squeeze", 11);
    r = RunOp(all, {F32({1, 3, 1, 1}, Iota(3))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3}));
    Node in("Squeeze", 13, 2);
    r = RunOp(in, {F32({1, 3, 1}, Iota(3)), KnownI64({1}, {2})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1, 3}));
    Node none("Squeeze", 13, 1);
    r = RunOp(none, {F32({1, 3, 1}, Iota(3))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3}));
    r = RunOp(in, {F32({1, 3, 1}, Iota(3)), KnownI64({1}, {1})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    EXPECT_NE(r.error.find("cannot squeeze axis 1"), std::string::npos);
}

TEST(OnnxOpsShape, UnsqueezeAttrAndInput) {
    Node a("Unsqueeze", 11);
    a.Ints("axes", {0, -1});
    Result r = RunOp(a, {F32({3, 4}, Iota(12))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1, 3, 4, 1}));
    Node in("Unsqueeze", 13, 2);
    r = RunOp(in, {F32({3, 4}, Iota(12)), KnownI64({2}, {1, 3})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3, 1, 4, 1}));
    r = RunOp(in, {F32({}, {1.f}), KnownI64({1}, {0})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1}));
    r = RunOp(in, {F32({3}, Iota(3)), KnownI64({2}, {1, 1})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsShape, Identity) {
    Node n("Identity", 16);
    Result r = RunOp(n, {F32({2, 2}, Iota(4))});
    ASSERT_RUN_OK(r);
    EXPECT_TRUE(r.aliased);
    EXPECT_EQ(r.outputs[0].Values<float>(), Iota(4));
}

// ---- Dropout ----------------------------------------------------------------

TEST(OnnxOpsShape, DropoutInference) {
    Node n("Dropout", 13, 3, 2);
    Tensor ratio = F32({}, {0.5f});
    ratio.known = true;
    Tensor training = Make<uint8_t>(OSP_TYPE_BOOL, {}, {0}, true);
    Result r = RunOp(n, {F32({2, 3}, Iota(6)), ratio, training});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), Iota(6));
    EXPECT_EQ(r.outputs[1].dtype, OSP_TYPE_BOOL);
    EXPECT_EQ(r.outputs[1].Values<uint8_t>(), std::vector<uint8_t>(6, 1));
    training.bytes[0] = 1;
    r = RunOp(n, {F32({2, 3}, Iota(6)), ratio, training});
    EXPECT_EQ(r.code, OSP_ERROR_UNSUPPORTED);

    Node old("Dropout", 7, 1, 2);
    r = RunOp(old, {F32({3}, Iota(3))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[1].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(r.outputs[1].Values<float>(), std::vector<float>(3, 1.f));
    Node nomask("Dropout", 12, 1, 2);
    nomask.OmitOutput(1);
    r = RunOp(nomask, {F32({3}, Iota(3))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), Iota(3));
}

// ---- Constant, ConstantOfShape, Range, EyeLike ------------------------------

TEST(OnnxOpsShape, Constant) {
    Node n("Constant", 13, 0);
    n.TensorAttr("value", Make<int32_t>(OSP_TYPE_INT32, {2, 2}, {1, 2, 3, 4}));
    Result r = RunOp(n, {});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].dtype, OSP_TYPE_INT32);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 2}));
    EXPECT_EQ(r.outputs[0].Values<int32_t>(),
              std::vector<int32_t>({1, 2, 3, 4}));
    Node fs("Constant", 13, 0);
    fs.Floats("value_floats", {1.5f, 2.5f});
    r = RunOp(fs, {});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({1.5f, 2.5f}));
    Node i("Constant", 13, 0);
    i.Int("value_int", -7);
    r = RunOp(i, {});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].shape.rank, 0);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({-7}));
    // value_string is a STRING scalar (its text: test_onnx_strings_ops.cc).
    Node s("Constant", 13, 0);
    s.String("value_string", "hi");
    r = RunOp(s, {});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].dtype, OSP_TYPE_BYTES);
    EXPECT_EQ(r.outputs[0].shape.rank, 0);
    Node sp("Constant", 13, 0);
    sp.String("sparse_value", "x");
    r = RunOp(sp, {});
    EXPECT_EQ(r.code, OSP_ERROR_UNSUPPORTED);
}

TEST(OnnxOpsShape, ConstantOfShape) {
    Node n("ConstantOfShape", 9);
    Result r = RunOp(n, {KnownI64({2}, {2, 3})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>(6, 0.f));
    Node v("ConstantOfShape", 9);
    v.TensorAttr("value", Make<int64_t>(OSP_TYPE_INT64, {1}, {42}));
    r = RunOp(v, {KnownI64({3}, {1, 2, 2})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims(4, 42));
    r = RunOp(v, {KnownI64({0}, {})}); // scalar
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].shape.rank, 0);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({42}));
    r = RunOp(v, {KnownI64({1}, {-2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsShape, Range) {
    Node n("Range", 11, 3);
    auto f = [](float v) { return Make<float>(OSP_TYPE_FP32, {}, {v}, true); };
    Result r = RunOp(n, {f(1.f), f(2.f), f(0.25f)});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({1.f, 1.25f, 1.5f, 1.75f}));
    auto i32 = [](int32_t v) {
        return Make<int32_t>(OSP_TYPE_INT32, {}, {v}, true);
    };
    r = RunOp(n, {i32(10), i32(4), i32(-3)});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int32_t>(), std::vector<int32_t>({10, 7}));
    auto i64 = [](int64_t v) {
        return Make<int64_t>(OSP_TYPE_INT64, {}, {v}, true);
    };
    r = RunOp(n, {i64(0), i64(5), i64(1)});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({0, 1, 2, 3, 4}));
    r = RunOp(n, {i64(5), i64(0), i64(1)});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({0}));
    r = RunOp(n, {i64(0), i64(5), i64(0)});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    Tensor unknown = i64(5);
    unknown.known = false;
    r = RunOp(n, {i64(0), unknown, i64(1)});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsShape, EyeLike) {
    Node n("EyeLike", 9);
    n.Int("k", 1);
    Result r = RunOp(n, {F32({3, 4}, Iota(12))});
    ASSERT_RUN_OK(r);
    std::vector<float> want(12, 0.f);
    want[1] = want[6] = want[11] = 1.f;
    EXPECT_EQ(r.outputs[0].Values<float>(), want);
    Node d("EyeLike", 9);
    d.Int("k", -1).Int("dtype", 7); // INT64
    r = RunOp(d, {F32({3, 2}, Iota(6))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int64_t>(), Dims({0, 0, 1, 0, 0, 1}));
}

TEST(OnnxOpsShape, Trilu) {
    // Two 3x4 matrices; upper with k = 1 (k known only on the device).
    Node n("Trilu", 14, 2);
    Result r = RunOp(n, {F32({2, 3, 4}, Iota(24, 1)), I64({}, {1})});
    ASSERT_RUN_OK(r);
    std::vector<float> want;
    ForEach({2, 3, 4}, [&](const Dims &i) {
        want.push_back(
            i[2] >= i[1] + 1 ? (float)(i[0] * 12 + i[1] * 4 + i[2] + 1) : 0.f);
    });
    EXPECT_EQ(r.outputs[0].Values<float>(), want);
    Node lower("Trilu", 14);
    lower.Int("upper", 0);
    r = RunOp(lower, {Make<int32_t>(OSP_TYPE_INT32, {2, 2}, {1, 2, 3, 4})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<int32_t>(),
              std::vector<int32_t>({1, 0, 3, 4}));
    r = RunOp(lower, {F32({3}, Iota(3))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

// ---- Transpose --------------------------------------------------------------

TEST(OnnxOpsMovement, Transpose) {
    Dims dims = {2, 3, 4};
    Node n("Transpose", 13);
    n.Ints("perm", {1, 2, 0});
    Result r = RunOp(n, {F32(dims, Iota(24))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3, 4, 2}));
    std::vector<float> want;
    Dims s = Strides(dims);
    ForEach({3, 4, 2}, [&](const Dims &i) {
        want.push_back((float)(i[2] * s[0] + i[0] * s[1] + i[1] * s[2]));
    });
    EXPECT_EQ(r.outputs[0].Values<float>(), want);

    Node rev("Transpose", 13);
    r = RunOp(rev, {F32({2, 3}, Iota(6))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({0, 3, 1, 4, 2, 5}));
    Node bad("Transpose", 13);
    bad.Ints("perm", {0, 0});
    r = RunOp(bad, {F32({2, 3}, Iota(6))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

// ---- Concat -----------------------------------------------------------------

TEST(OnnxOpsMovement, ConcatInnerAxis) {
    Node n("Concat", 13, 3);
    n.Int("axis", -1);
    Result r = RunOp(n, {F32({2, 2, 1}, Iota(4)), F32({2, 2, 2}, Iota(8, 100)),
                         F32({2, 2, 0}, {})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 2, 3}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>(
                  {0, 100, 101, 1, 102, 103, 2, 104, 105, 3, 106, 107}));
    Node m("Concat", 13, 2);
    m.Int("axis", 1);
    r = RunOp(m, {F32({2, 1}, {1, 2}), F32({2, 2}, {3, 4, 5, 6})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({1, 3, 4, 2, 5, 6}));
}

TEST(OnnxOpsMovement, ConcatErrors) {
    Node n("Concat", 13, 2);
    n.Get()->name[0] = 'x';
    n.Int("axis", 0);
    Result r = RunOp(n, {F32({1, 2, 3, 4}, Iota(24)), F32({1, 2, 3}, Iota(6))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    EXPECT_NE(r.error.find("(Concat): input 1 has rank 3, expected 4"),
              std::string::npos)
        << r.error;
    r = RunOp(n, {F32({1, 2}, Iota(2)), F32({1, 3}, Iota(3))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    Node noaxis("Concat", 13, 2);
    r = RunOp(noaxis, {F32({1}, Iota(1)), F32({1}, Iota(1))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

// ---- Split ------------------------------------------------------------------

TEST(OnnxOpsMovement, SplitAttrAndEqual) {
    Node n("Split", 11, 1, 2);
    n.Int("axis", 1).Ints("split", {1, 2});
    Result r = RunOp(n, {F32({2, 3}, Iota(6))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({0, 3}));
    EXPECT_EQ(r.outputs[1].Values<float>(), std::vector<float>({1, 2, 4, 5}));
    Node eq("Split", 11, 1, 3);
    r = RunOp(eq, {F32({6}, Iota(6))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[2].Values<float>(), std::vector<float>({4, 5}));
    Node bad("Split", 11, 1, 4);
    r = RunOp(bad, {F32({6}, Iota(6))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsMovement, SplitInputAndNumOutputs) {
    Node n("Split", 13, 2, 2);
    n.Int("axis", -1);
    Result r = RunOp(n, {F32({2, 4}, Iota(8)), KnownI64({2}, {3, 1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 3}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({0, 1, 2, 4, 5, 6}));
    EXPECT_EQ(r.outputs[1].Values<float>(), std::vector<float>({3, 7}));
    r = RunOp(n, {F32({2, 4}, Iota(8)), KnownI64({2}, {3, 2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    Node s18("Split", 18, 1, 3);
    s18.Int("num_outputs", 3);
    r = RunOp(s18, {F32({7}, Iota(7))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({0, 1, 2}));
    EXPECT_EQ(r.outputs[1].Values<float>(), std::vector<float>({3, 4, 5}));
    EXPECT_EQ(r.outputs[2].Values<float>(), std::vector<float>({6}));
    Node skip("Split", 13, 1, 2);
    skip.OmitOutput(0);
    r = RunOp(skip, {F32({4}, Iota(4))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[1].Values<float>(), std::vector<float>({2, 3}));
}

// ---- Slice ------------------------------------------------------------------

// numpy-style reference: picks index start + k * step on each axis.
std::vector<float> SliceRef(const Dims &dims, const Dims &start,
                            const Dims &step, const Dims &count) {
    std::vector<float> out;
    Dims s = Strides(dims);
    ForEach(count, [&](const Dims &i) {
        int64_t f = 0;
        for (size_t d = 0; d < dims.size(); d++)
            f += (start[d] + i[d] * step[d]) * s[d];
        out.push_back((float)f);
    });
    return out;
}

TEST(OnnxOpsMovement, SliceAttrs) {
    Node n("Slice", 9);
    n.Ints("starts", {1, 0}).Ints("ends", {2, 3}).Ints("axes", {0, 1});
    Result r = RunOp(n, {F32({2, 4}, Iota(8))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({4, 5, 6}));
    Node noaxes("Slice", 1 + 8);
    noaxes.Ints("starts", {-1}).Ints("ends", {1000});
    r = RunOp(noaxes, {F32({2, 4}, Iota(8))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1, 4}));
}

TEST(OnnxOpsMovement, SliceNegativeSteps) {
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    const int64_t kMin = std::numeric_limits<int64_t>::min();
    Dims dims = {3, 4, 5};
    Node n("Slice", 13, 5);
    // Axis 2 reversed fully (INT64_MIN end), axis 0 from 1 to the end
    // (INT64_MAX), axis 1 every second from the last.
    Result r = RunOp(n, {F32(dims, Iota(60)), KnownI64({3}, {-1, 1, 3}),
                         KnownI64({3}, {kMin, kMax, -100}),
                         KnownI64({3}, {2, 0, 1}), KnownI64({3}, {-1, 1, -2})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 2, 5}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              SliceRef(dims, {1, 3, 4}, {1, -2, -1}, {2, 2, 5}));
    // A step larger than the axis and an empty slice.
    r = RunOp(n, {F32(dims, Iota(60)), KnownI64({2}, {0, 4}),
                  KnownI64({2}, {3, 0}), KnownI64({2}, {0, 1}),
                  KnownI64({2}, {kMax, 1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({1, 0, 5}));
    // Only starts and ends; steps absent.
    r = RunOp(n, {F32(dims, Iota(60)), KnownI64({1}, {1}), KnownI64({1}, {-1}),
                  Absent(), Absent()});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(),
              SliceRef(dims, {1, 0, 0}, {1, 1, 1}, {1, 4, 5}));
    r = RunOp(n, {F32(dims, Iota(60)), KnownI64({1}, {1}), KnownI64({1}, {2}),
                  Absent(), KnownI64({1}, {0})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

// ---- Gather, GatherElements -------------------------------------------------

TEST(OnnxOpsMovement, Gather) {
    Node n("Gather", 13, 2);
    n.Int("axis", 1);
    Result r = RunOp(n, {F32({2, 3}, Iota(6)),
                         Make<int64_t>(OSP_TYPE_INT64, {2, 2}, {2, -3, 1, 1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 2, 2}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({2, 0, 1, 1, 5, 3, 4, 4}));
    Node s("Gather", 13, 2);
    r = RunOp(s,
              {F32({3, 2}, Iota(6)), Make<int32_t>(OSP_TYPE_INT32, {}, {-1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2}));
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({4, 5}));
    r = RunOp(s, {F32({3, 2}, Iota(6)), KnownI64({1}, {3})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsMovement, GatherElements) {
    Node n("GatherElements", 13, 2);
    n.Int("axis", 1);
    Result r = RunOp(n, {F32({2, 3}, Iota(6)),
                         Make<int64_t>(OSP_TYPE_INT64, {2, 2}, {2, -3, 1, 0})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({2, 0, 4, 3}));
    Node a0("GatherElements", 13, 2);
    r = RunOp(a0, {F32({3, 3}, Iota(9)),
                   Make<int32_t>(OSP_TYPE_INT32, {2, 3}, {1, 2, 0, 2, 0, 0})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({3, 7, 2, 6, 1, 2}));
}

// ---- Expand, Tile -----------------------------------------------------------

TEST(OnnxOpsMovement, Expand) {
    Node n("Expand", 13, 2);
    Result r = RunOp(n, {F32({3, 1}, {1, 2, 3}), KnownI64({3}, {2, 1, 2})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 3, 2}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
    // The shape may be smaller than the input's: bidirectional.
    r = RunOp(n, {F32({2, 2}, Iota(4)), KnownI64({1}, {1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 2}));
    r = RunOp(n, {F32({3}, Iota(3)), KnownI64({1}, {2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

TEST(OnnxOpsMovement, Tile) {
    Node n("Tile", 13, 2);
    Result r = RunOp(n, {F32({2, 2}, Iota(4)), KnownI64({2}, {2, 3})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({4, 6}));
    std::vector<float> want;
    ForEach({4, 6}, [&](const Dims &i) {
        want.push_back((float)((i[0] % 2) * 2 + i[1] % 2));
    });
    EXPECT_EQ(r.outputs[0].Values<float>(), want);
    r = RunOp(n, {F32({2, 2}, Iota(4)), KnownI64({2}, {1, 0})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 0}));
    r = RunOp(n, {F32({2, 2}, Iota(4)), KnownI64({1}, {2})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

// ---- Pad --------------------------------------------------------------------

TEST(OnnxOpsMovement, PadConstant) {
    Node n("Pad", 13, 3);
    Tensor value = F32({}, {9.f});
    value.known = true;
    Result r = RunOp(
        n, {F32({2, 2}, {1, 2, 3, 4}), KnownI64({4}, {0, 1, 1, 0}), value});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({3, 3}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({9, 1, 2, 9, 3, 4, 9, 9, 9}));
    Node old("Pad", 7);
    old.Ints("pads", {1, 0, 0, -1}).Float("value", 0.5f);
    r = RunOp(old, {F32({2, 2}, {1, 2, 3, 4})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Values<float>(), std::vector<float>({0.5f, 1, 3}));
}

TEST(OnnxOpsMovement, PadModes) {
    struct {
        const char *mode;
        std::vector<float> want;
    } cases[] = {
        {"reflect", {3, 2, 1, 2, 3, 2, 1}},
        {"edge", {1, 1, 1, 2, 3, 3, 3}},
        {"wrap", {2, 3, 1, 2, 3, 1, 2}},
    };
    for (auto &c : cases) {
        Node n("Pad", 19, 2);
        n.String("mode", c.mode);
        Result r = RunOp(n, {F32({3}, {1, 2, 3}), KnownI64({2}, {2, 2})});
        ASSERT_RUN_OK(r);
        EXPECT_EQ(r.outputs[0].Values<float>(), c.want) << c.mode;
    }
    Node n("Pad", 13, 2);
    n.String("mode", "reflect");
    Result r = RunOp(n, {F32({3}, {1, 2, 3}), KnownI64({2}, {3, 0})});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
    Node bad("Pad", 13, 2);
    bad.String("mode", "mirror");
    r = RunOp(bad, {F32({3}, {1, 2, 3}), KnownI64({2}, {1, 0})});
    EXPECT_EQ(r.code, OSP_ERROR_UNSUPPORTED);
}

TEST(OnnxOpsMovement, PadAxes) {
    Node n("Pad", 18, 4);
    Result r = RunOp(n, {F32({2, 2}, {1, 2, 3, 4}), KnownI64({2}, {1, 0}),
                         Absent(), KnownI64({1}, {-1})});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({2, 3}));
    EXPECT_EQ(r.outputs[0].Values<float>(),
              std::vector<float>({0, 1, 2, 0, 3, 4}));
}

// ---- DepthToSpace, SpaceToDepth ---------------------------------------------

TEST(OnnxOpsMovement, DepthToSpaceModes) {
    const int64_t N = 1, C = 8, H = 2, W = 3, b = 2, Co = C / (b * b);
    for (const char *mode : {"DCR", "CRD"}) {
        Node n("DepthToSpace", 13);
        n.Int("blocksize", b).String("mode", mode);
        Result r = RunOp(n, {F32({N, C, H, W}, Iota(N * C * H * W))});
        ASSERT_RUN_OK(r);
        EXPECT_EQ(r.outputs[0].Dims(), Dims({N, Co, H * b, W * b}));
        std::vector<float> want;
        ForEach({N, Co, H * b, W * b}, [&](const Dims &i) {
            int64_t b1 = i[2] % b, b2 = i[3] % b, h = i[2] / b, w = i[3] / b;
            int64_t c = strcmp(mode, "DCR") == 0 ? (b1 * b + b2) * Co + i[1]
                                                 : i[1] * b * b + b1 * b + b2;
            want.push_back((float)(((i[0] * C + c) * H + h) * W + w));
        });
        EXPECT_EQ(r.outputs[0].Values<float>(), want) << mode;
    }
}

TEST(OnnxOpsMovement, SpaceToDepth) {
    const int64_t N = 2, C = 2, H = 4, W = 6, b = 2;
    Node n("SpaceToDepth", 13);
    n.Int("blocksize", b);
    Result r = RunOp(n, {F32({N, C, H, W}, Iota(N * C * H * W))});
    ASSERT_RUN_OK(r);
    EXPECT_EQ(r.outputs[0].Dims(), Dims({N, C * b * b, H / b, W / b}));
    std::vector<float> want;
    ForEach({N, C * b * b, H / b, W / b}, [&](const Dims &i) {
        int64_t blk = i[1] / C, c = i[1] % C, b1 = blk / b, b2 = blk % b;
        int64_t h = i[2] * b + b1, w = i[3] * b + b2;
        want.push_back((float)(((i[0] * C + c) * H + h) * W + w));
    });
    EXPECT_EQ(r.outputs[0].Values<float>(), want);
    r = RunOp(n, {F32({1, 1, 3, 4}, Iota(12))});
    EXPECT_EQ(r.code, OSP_ERROR_INVALID_ARG);
}

} // namespace

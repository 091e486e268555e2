// The ops that move STRING tensors (16-byte onnx_string references,
// onnx_strings.h) on the CPU device, through onnx_op_find: Where's STRING
// X/Y taken as pairs of 8-byte halves (onnx_ops_elementwise.c), Gather and
// Transpose moving whole references (onnx_ops_movement.c), and Constant /
// ConstantOfShape of STRING values, whose bytes must outlive the node's
// state (onnx_ops_shape.c, onnx_ops_strings.c). The expected values are
// computed here from the ONNX definitions; tests/integration/
// test_onnx_strings.py compares every op with onnxruntime through the
// server.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "onnx_op_harness.h"

namespace {

using namespace onnx_test;
using Texts = std::vector<std::string>;

// A STRING tensor whose elements point into `keep` (which must outlive
// the tensor's use).
Tensor Strs(const std::vector<int64_t> &dims, const Texts &texts,
            std::deque<std::string> *keep) {
    Tensor t;
    t.dtype = OSP_TYPE_BYTES;
    t.shape = Shape(dims);
    t.bytes.resize(texts.size() * sizeof(onnx_string));
    for (size_t i = 0; i < texts.size(); i++) {
        keep->push_back(texts[i]);
        onnx_string s = {keep->back().data(), keep->back().size()};
        memcpy(&t.bytes[i * sizeof s], &s, sizeof s);
    }
    return t;
}

Texts TextsOf(const Tensor &t) {
    Texts out;
    for (const onnx_string &s : t.Values<onnx_string>())
        out.emplace_back(s.data, s.len);
    return out;
}

// Runs n on ins; the outputs' strings stay valid while *res lives.
void RunOk(Node &n, const std::vector<const Tensor *> &ins, OpResult *res) {
    osp_error *err = RunNode(nullptr, n, ins, res);
    ASSERT_EQ(err, nullptr) << TakeMessage(err);
}

TEST(OnnxStringsOps, WhereBroadcastsStrings) {
    std::deque<std::string> keep;
    // cond [2, 1], X [2, 3], Y a scalar: a row picks X or Y whole.
    Tensor x =
        Strs({2, 3}, {"a", "bb", std::string("c\0d", 3), "", "é", "f"}, &keep);
    Tensor y = Strs({}, {"?"}, &keep);
    Tensor cond = Bool({2, 1}, {true, false});
    Node n("Where", 16, 3, 1);
    OpResult res;
    RunOk(n, {&cond, &x, &y}, &res);
    ASSERT_EQ(OSP_TYPE_BYTES, res.outs[0].dtype);
    EXPECT_EQ((std::vector<int64_t>{2, 3}), res.outs[0].Dims());
    EXPECT_EQ((Texts{"a", "bb", std::string("c\0d", 3), "?", "?", "?"}),
              TextsOf(res.outs[0]));
    // Every input broadcast: cond [3], X [2, 1], Y [1, 3].
    Tensor x2 = Strs({2, 1}, {"x0", "x1"}, &keep);
    Tensor y2 = Strs({1, 3}, {"y0", "y1", "y2"}, &keep);
    Tensor c2 = Bool({3}, {false, true, false});
    OpResult res2;
    RunOk(n, {&c2, &x2, &y2}, &res2);
    EXPECT_EQ((Texts{"y0", "x0", "y2", "y0", "x1", "y2"}),
              TextsOf(res2.outs[0]));
    // The output borrows the chosen strings' bytes.
    EXPECT_EQ(keep[7].data(), res2.outs[0].Values<onnx_string>()[1].data);
}

TEST(OnnxStringsOps, WhereOfStringAndNumberIsRefused) {
    std::deque<std::string> keep;
    Tensor x = Strs({1}, {"a"}, &keep);
    Tensor y = F32({1}, {1.0f});
    Tensor cond = Bool({1}, {true});
    Node n("Where", 16, 3, 1);
    OpResult res;
    osp_error *err = RunNode(nullptr, n, {&cond, &x, &y}, &res);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(OSP_ERROR_INVALID_ARG, osp_error_get_code(err));
    TakeMessage(err);
}

TEST(OnnxStringsOps, GatherAndTransposeMoveWholeStrings) {
    std::deque<std::string> keep;
    Tensor text =
        Strs({3, 2}, {"r0a", "r0b", "r1a", "r1b", "r2a", "r2b"}, &keep);
    Tensor idx = I64({2}, {2, -3});
    Node g("Gather", 13, 2, 1);
    OpResult rg;
    RunOk(g, {&text, &idx}, &rg);
    EXPECT_EQ((Texts{"r2a", "r2b", "r0a", "r0b"}), TextsOf(rg.outs[0]));
    Node t("Transpose", 13, 1, 1);
    t.Ints("perm", {1, 0});
    OpResult rt;
    RunOk(t, {&text}, &rt);
    EXPECT_EQ((std::vector<int64_t>{2, 3}), rt.outs[0].Dims());
    EXPECT_EQ((Texts{"r0a", "r1a", "r2a", "r0b", "r1b", "r2b"}),
              TextsOf(rt.outs[0]));
}

TEST(OnnxStringsOps, ConstantStringsOutliveTheNode) {
    Node n("Constant", 13, 0, 1);
    n.Strings("value_strings", {"x", "yy", ""});
    OpResult res;
    RunOk(n, {}, &res); // RunNode frees the node's state before returning
    EXPECT_EQ((std::vector<int64_t>{3}), res.outs[0].Dims());
    EXPECT_EQ((Texts{"x", "yy", ""}), TextsOf(res.outs[0]));

    Node s("Constant", 13, 0, 1);
    s.String("value_string", "héllo");
    OpResult rs;
    RunOk(s, {}, &rs);
    EXPECT_EQ(0, rs.outs[0].shape.rank);
    EXPECT_EQ((Texts{"héllo"}), TextsOf(rs.outs[0]));
}

// A STRING tensor attribute holds the BYTES wire form, as the loader
// reads string_data.
Tensor WireTensor(const std::vector<int64_t> &dims, const Texts &texts) {
    Tensor t;
    t.dtype = OSP_TYPE_BYTES;
    t.shape = Shape(dims);
    for (const std::string &s : texts) {
        uint32_t len = (uint32_t)s.size();
        for (int i = 0; i < 4; i++)
            t.bytes.push_back((uint8_t)(len >> (8 * i)));
        t.bytes.insert(t.bytes.end(), s.begin(), s.end());
    }
    return t;
}

TEST(OnnxStringsOps, ConstantOfShapeFillsWithOneString) {
    Node n("ConstantOfShape", 9, 1, 1);
    n.TensorAttr("value", WireTensor({1}, {"pad"}));
    Tensor shape = KnownI64({2}, {2, 2});
    OpResult res;
    RunOk(n, {&shape}, &res);
    ASSERT_EQ(OSP_TYPE_BYTES, res.outs[0].dtype);
    EXPECT_EQ((Texts{"pad", "pad", "pad", "pad"}), TextsOf(res.outs[0]));

    Node c("Constant", 13, 0, 1);
    c.TensorAttr("value", WireTensor({2}, {"a", "bc"}));
    OpResult rc;
    RunOk(c, {}, &rc);
    EXPECT_EQ((Texts{"a", "bc"}), TextsOf(rc.outs[0]));
}

TEST(OnnxStringsOps, PadRefusesStrings) {
    std::deque<std::string> keep;
    Tensor text = Strs({2}, {"a", "b"}, &keep);
    Tensor pads = KnownI64({2}, {1, 0});
    Node n("Pad", 13, 2, 1);
    OpResult res;
    osp_error *err = RunNode(nullptr, n, {&text, &pads}, &res);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(OSP_ERROR_UNSUPPORTED, osp_error_get_code(err));
    EXPECT_NE(std::string::npos, TakeMessage(err).find("input 0"));
}

} // namespace

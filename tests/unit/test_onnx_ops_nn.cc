// backends/onnx/onnx_ops_nn.c and its files (onnx_ops_conv.c,
// onnx_ops_pool.c, onnx_ops_norm.c, onnx_ops_resize.c): each op built on a
// hand-made node, inferred on host descs and run on the CPU device, its
// outputs checked against references computed here in double precision
// (or against the values of ONNX's own operator examples).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "onnx_op_harness.h"

extern "C" const onnx_op_family onnx_ops_nn_family;

namespace {

using namespace onnx_test;

// ---- harness (onnx_op_harness.h) -------------------------------------------

osp_error *RunOp(const Call &call, const Attrs &attrs,
                 const std::vector<const Tensor *> &ins, OpResult *run) {
    return RunCall(onnx_ops_nn_family, call, attrs, ins, run);
}

osp_error_code FailCode(const Call &call, const Attrs &attrs,
                        const std::vector<const Tensor *> &ins,
                        std::string *msg = nullptr) {
    return FailCall(onnx_ops_nn_family, call, attrs, ins, msg);
}

void ExpectDims(const Tensor &t, const std::vector<int64_t> &dims) {
    EXPECT_EQ(t.Dims(), dims);
}

// ---- references ------------------------------------------------------------

// Spatial geometry padded to three dimensions (leading 1s) for the
// references' loops.
struct Geo {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1},
            s[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0},
            d[3] = {1, 1, 1};
};

Geo MakeGeo(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
            const std::vector<int64_t> &k, std::vector<int64_t> s = {},
            std::vector<int64_t> pads = {}, std::vector<int64_t> d = {}) {
    Geo g;
    size_t r = in.size(), off = 3 - r;
    for (size_t i = 0; i < r; i++) {
        g.in[off + i] = in[i];
        g.out[off + i] = out[i];
        g.k[off + i] = k[i];
        g.s[off + i] = s.empty() ? 1 : s[i];
        g.pb[off + i] = pads.empty() ? 0 : pads[i];
        g.pe[off + i] = pads.empty() ? 0 : pads[r + i];
        g.d[off + i] = d.empty() ? 1 : d[i];
    }
    return g;
}

// Conv: y[n][m][o] = b[m] + z + sum x[n][g*cg + c][o*s - pb + k*d] *
// w[m][c][k], then act (relu when `relu`).
std::vector<double> RefConv(const Tensor &x, const Tensor &w, const Tensor *b,
                            int64_t group, const Geo &g,
                            const Tensor *z = nullptr, bool relu = false) {
    std::vector<double> xv = x.Doubles(), wv = w.Doubles();
    std::vector<double> bv = b ? b->Doubles() : std::vector<double>();
    std::vector<double> zv = z ? z->Doubles() : std::vector<double>();
    int64_t N = x.shape.dims[0], C = x.shape.dims[1], M = w.shape.dims[0];
    int64_t cg = C / group, mg = M / group;
    int64_t in_sp = g.in[0] * g.in[1] * g.in[2];
    int64_t out_sp = g.out[0] * g.out[1] * g.out[2];
    int64_t k_sp = g.k[0] * g.k[1] * g.k[2];
    std::vector<double> y((size_t)(N * M * out_sp));
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t grp = m / mg;
            for (int64_t o0 = 0; o0 < g.out[0]; o0++)
                for (int64_t o1 = 0; o1 < g.out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
                        double acc = b ? bv[m] : 0.0;
                        for (int64_t c = 0; c < cg; c++)
                            for (int64_t k0 = 0; k0 < g.k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g.k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                                        int64_t i0 =
                                            o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                                        int64_t i1 =
                                            o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                                        int64_t i2 =
                                            o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                                        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 ||
                                            i1 >= g.in[1] || i2 < 0 ||
                                            i2 >= g.in[2])
                                            continue;
                                        int64_t xi =
                                            (n * C + grp * cg + c) * in_sp +
                                            (i0 * g.in[1] + i1) * g.in[2] + i2;
                                        int64_t wi =
                                            (m * cg + c) * k_sp +
                                            (k0 * g.k[1] + k1) * g.k[2] + k2;
                                        acc += xv[xi] * wv[wi];
                                    }
                        int64_t yi = (n * M + m) * out_sp +
                                     (o0 * g.out[1] + o1) * g.out[2] + o2;
                        if (z)
                            acc += zv[yi];
                        if (relu && acc < 0)
                            acc = 0;
                        y[yi] = acc;
                    }
        }
    return y;
}

// ConvTranspose by scattering: y[n][grp*mg + m][i*s - pb + k*d] +=
// x[n][grp*cg + c][i] * w[grp*cg + c][m][k], plus b.
std::vector<double> RefConvTranspose(const Tensor &x, const Tensor &w,
                                     const Tensor *b, int64_t group,
                                     const Geo &g) {
    std::vector<double> xv = x.Doubles(), wv = w.Doubles();
    std::vector<double> bv = b ? b->Doubles() : std::vector<double>();
    int64_t N = x.shape.dims[0], C = x.shape.dims[1];
    int64_t mg = w.shape.dims[1], M = mg * group, cg = C / group;
    int64_t in_sp = g.in[0] * g.in[1] * g.in[2];
    int64_t out_sp = g.out[0] * g.out[1] * g.out[2];
    int64_t k_sp = g.k[0] * g.k[1] * g.k[2];
    std::vector<double> y((size_t)(N * M * out_sp), 0.0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t o = 0; o < out_sp; o++)
                y[(n * M + m) * out_sp + o] = b ? bv[m] : 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t ci = 0; ci < C; ci++) {
            int64_t grp = ci / cg;
            for (int64_t i0 = 0; i0 < g.in[0]; i0++)
                for (int64_t i1 = 0; i1 < g.in[1]; i1++)
                    for (int64_t i2 = 0; i2 < g.in[2]; i2++) {
                        double xval = xv[(n * C + ci) * in_sp +
                                         (i0 * g.in[1] + i1) * g.in[2] + i2];
                        for (int64_t m = 0; m < mg; m++)
                            for (int64_t k0 = 0; k0 < g.k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g.k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                                        int64_t o0 =
                                            i0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                                        int64_t o1 =
                                            i1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                                        int64_t o2 =
                                            i2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                                        if (o0 < 0 || o0 >= g.out[0] ||
                                            o1 < 0 || o1 >= g.out[1] ||
                                            o2 < 0 || o2 >= g.out[2])
                                            continue;
                                        int64_t wi =
                                            (ci * mg + m) * k_sp +
                                            (k0 * g.k[1] + k1) * g.k[2] + k2;
                                        y[(n * M + grp * mg + m) * out_sp +
                                          (o0 * g.out[1] + o1) * g.out[2] +
                                          o2] += xval * wv[wi];
                                    }
                    }
        }
    return y;
}

enum class PoolKind { Max, Avg, Lp };

// Pooling as onnxruntime does it: padding never wins a max; an average
// counting padding divides by the window's positions inside [-pb, in + pe)
// (pe the attribute's), else by its real elements. indices, when given,
// get the flat index in x of each max.
std::vector<double> RefPool(const Tensor &x, PoolKind kind, const Geo &g,
                            bool count_include_pad = false, double p = 2,
                            std::vector<double> *indices = nullptr) {
    std::vector<double> xv = x.Doubles();
    int64_t planes = x.shape.dims[0] * x.shape.dims[1];
    int64_t in_sp = g.in[0] * g.in[1] * g.in[2];
    std::vector<double> y;
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t o0 = 0; o0 < g.out[0]; o0++)
            for (int64_t o1 = 0; o1 < g.out[1]; o1++)
                for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
                    double acc = kind == PoolKind::Max ? -INFINITY : 0.0;
                    int64_t arg = -1, real = 0, padded = 0;
                    for (int64_t k0 = 0; k0 < g.k[0]; k0++)
                        for (int64_t k1 = 0; k1 < g.k[1]; k1++)
                            for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                                int64_t i[3] = {
                                    o0 * g.s[0] - g.pb[0] + k0 * g.d[0],
                                    o1 * g.s[1] - g.pb[1] + k1 * g.d[1],
                                    o2 * g.s[2] - g.pb[2] + k2 * g.d[2]};
                                bool inside = true, in_pad = true;
                                for (int a = 0; a < 3; a++) {
                                    inside &= i[a] >= 0 && i[a] < g.in[a];
                                    in_pad &= i[a] >= -g.pb[a] &&
                                              i[a] < g.in[a] + g.pe[a];
                                }
                                padded += in_pad;
                                if (!inside)
                                    continue;
                                real++;
                                int64_t xi = pl * in_sp +
                                             (i[0] * g.in[1] + i[1]) * g.in[2] +
                                             i[2];
                                double v = xv[xi];
                                if (kind == PoolKind::Max) {
                                    if (v > acc)
                                        acc = v, arg = xi;
                                } else if (kind == PoolKind::Avg) {
                                    acc += v;
                                } else {
                                    acc += std::pow(std::fabs(v), p);
                                }
                            }
                    if (kind == PoolKind::Avg)
                        acc /= (double)(count_include_pad ? padded : real);
                    else if (kind == PoolKind::Lp)
                        acc = std::pow(acc, 1.0 / p);
                    y.push_back(acc);
                    if (indices)
                        indices->push_back((double)arg);
                }
    return y;
}

// ---- Conv ------------------------------------------------------------------

TEST(OnnxNnConv, Basic2dWithPadsStridesBias) {
    Tensor x = Rand({2, 3, 7, 6}, 1), w = Rand({4, 3, 3, 2}, 2);
    Tensor b = Rand({4}, 3);
    Attrs at;
    at.Ints("pads", {1, 0, 2, 1}).Ints("strides", {2, 1});
    OpResult r;
    ASSERT_OK(RunOp(Call("Conv", 11), at, {&x, &w, &b}, &r));
    // H: (7 + 1 + 2 - 3) / 2 + 1 = 4; W: (6 + 0 + 1 - 2) / 1 + 1 = 6
    ExpectDims(r.outs[0], {2, 4, 4, 6});
    ExpectNear(RefConv(x, w, &b, 1,
                       MakeGeo({7, 6}, {4, 6}, {3, 2}, {2, 1}, {1, 0, 2, 1})),
               r.outs[0]);
}

TEST(OnnxNnConv, AutoPadSameUpperAndLower) {
    // in 5, kernel 4, stride 2: out 3, total pad (3-1)*2 + 4 - 5 = 3;
    // SAME_UPPER puts 1 before and 2 after, SAME_LOWER 2 before.
    Tensor x = Rand({1, 2, 5, 5}, 4), w = Rand({3, 2, 4, 4}, 5);
    for (const char *mode : {"SAME_UPPER", "SAME_LOWER"}) {
        Attrs at;
        at.String("auto_pad", mode).Ints("strides", {2, 2});
        OpResult r;
        ASSERT_OK(RunOp(Call("Conv", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 3, 3, 3});
        int64_t pb = strcmp(mode, "SAME_UPPER") == 0 ? 1 : 2;
        int64_t pe = 3 - pb;
        ExpectNear(
            RefConv(x, w, nullptr, 1,
                    MakeGeo({5, 5}, {3, 3}, {4, 4}, {2, 2}, {pb, pb, pe, pe})),
            r.outs[0], 1e-4, mode);
    }
    // VALID ignores pads
    Attrs at;
    at.String("auto_pad", "VALID").Ints("pads", {3, 3, 3, 3});
    OpResult r;
    ASSERT_OK(RunOp(Call("Conv", 11), at, {&x, &w}, &r));
    ExpectDims(r.outs[0], {1, 3, 2, 2});
    ExpectNear(RefConv(x, w, nullptr, 1, MakeGeo({5, 5}, {2, 2}, {4, 4})),
               r.outs[0]);
}

TEST(OnnxNnConv, GroupsDepthwiseAndDilations) {
    Tensor x = Rand({1, 4, 9, 8}, 6);
    {
        Tensor w = Rand({6, 2, 3, 3}, 7), b = Rand({6}, 8);
        Attrs at;
        at.Int("group", 2).Ints("dilations", {2, 1}).Ints("pads", {1, 1, 1, 1});
        OpResult r;
        ASSERT_OK(RunOp(Call("Conv", 11), at, {&x, &w, &b}, &r));
        // H: 9 + 2 - 5 + 1 = 7; W: 8 + 2 - 3 + 1 = 8
        ExpectDims(r.outs[0], {1, 6, 7, 8});
        ExpectNear(
            RefConv(x, w, &b, 2,
                    MakeGeo({9, 8}, {7, 8}, {3, 3}, {}, {1, 1, 1, 1}, {2, 1})),
            r.outs[0], 1e-4, "group 2");
    }
    {
        Tensor w = Rand({4, 1, 3, 3}, 9);
        Attrs at;
        at.Int("group", 4).Ints("kernel_shape", {3, 3});
        OpResult r;
        ASSERT_OK(RunOp(Call("Conv", 1), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 4, 7, 6});
        ExpectNear(RefConv(x, w, nullptr, 4, MakeGeo({9, 8}, {7, 6}, {3, 3})),
                   r.outs[0], 1e-4, "depthwise");
    }
}

TEST(OnnxNnConv, OneAndThreeSpatialDims) {
    {
        Tensor x = Rand({2, 3, 10}, 10), w = Rand({2, 3, 3}, 11);
        Attrs at;
        at.Ints("strides", {3}).Ints("pads", {2, 1});
        OpResult r;
        ASSERT_OK(RunOp(Call("Conv", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {2, 2, 4});
        ExpectNear(
            RefConv(x, w, nullptr, 1, MakeGeo({10}, {4}, {3}, {3}, {2, 1})),
            r.outs[0]);
    }
    {
        Tensor x = Rand({1, 2, 4, 5, 6}, 12), w = Rand({3, 2, 2, 3, 2}, 13);
        Tensor b = Rand({3}, 14);
        OpResult r;
        ASSERT_OK(RunOp(Call("Conv", 11), Attrs(), {&x, &w, &b}, &r));
        ExpectDims(r.outs[0], {1, 3, 3, 3, 5});
        ExpectNear(
            RefConv(x, w, &b, 1, MakeGeo({4, 5, 6}, {3, 3, 5}, {2, 3, 2})),
            r.outs[0]);
    }
}

TEST(OnnxNnConv, FusedConvResidualAndRelu) {
    Tensor x = Rand({2, 3, 6, 6}, 15), w = Rand({4, 3, 3, 3}, 16);
    Tensor b = Rand({4}, 17), z = Rand({2, 4, 6, 6}, 18);
    Attrs at;
    at.Ints("pads", {1, 1, 1, 1}).String("activation", "Relu");
    OpResult r;
    ASSERT_OK(RunOp(Call("FusedConv", 1, "osprey"), at, {&x, &w, &b, &z}, &r));
    ExpectDims(r.outs[0], {2, 4, 6, 6});
    std::vector<double> want =
        RefConv(x, w, &b, 1, MakeGeo({6, 6}, {6, 6}, {3, 3}, {}, {1, 1, 1, 1}),
                &z, true);
    ExpectNear(want, r.outs[0]);
    bool some_zero = false, some_pos = false;
    for (double v : want)
        (v == 0 ? some_zero : some_pos) = true;
    EXPECT_TRUE(some_zero && some_pos);

    // LeakyRelu with its alpha, no bias, no residual
    Attrs at2;
    at2.String("activation", "LeakyRelu").Floats("activation_params", {0.25f});
    ASSERT_OK(RunOp(Call("FusedConv", 1, "osprey"), at2, {&x, &w}, &r));
    std::vector<double> plain =
        RefConv(x, w, nullptr, 1, MakeGeo({6, 6}, {4, 4}, {3, 3}));
    for (double &v : plain)
        v = v < 0 ? 0.25 * v : v;
    ExpectNear(plain, r.outs[0]);

    // a residual that does not broadcast
    Tensor bad = Rand({2, 4, 5, 6}, 19);
    EXPECT_EQ(FailCode(Call("FusedConv", 1, "osprey"), at, {&x, &w, &b, &bad}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxNnConv, FusedConvBroadcastResidual) {
    // The fusion folds Conv -> Add(tensor) before shapes are known, so Z
    // may broadcast to Y ([1, C, 1, 1]) or Y to Z (batch 1 against 2).
    Tensor x = Rand({1, 3, 5, 5}, 26), w = Rand({4, 3, 3, 3}, 27);
    Tensor b = Rand({4}, 28);
    Attrs at;
    at.String("activation", "Relu");
    Geo g = MakeGeo({5, 5}, {3, 3}, {3, 3});
    std::vector<double> conv = RefConv(x, w, &b, 1, g);
    {
        Tensor z = Rand({1, 4, 1, 1}, 29);
        std::vector<double> zv = z.Doubles(), want;
        for (size_t i = 0; i < conv.size(); i++)
            want.push_back(std::max(0.0, conv[i] + zv[i / 9]));
        OpResult r;
        ASSERT_OK(
            RunOp(Call("FusedConv", 1, "osprey"), at, {&x, &w, &b, &z}, &r));
        ExpectDims(r.outs[0], {1, 4, 3, 3});
        ExpectNear(want, r.outs[0], 1e-4, "Z broadcasts");
    }
    {
        Tensor z = Rand({2, 4, 3, 3}, 30);
        std::vector<double> zv = z.Doubles(), want;
        for (size_t i = 0; i < zv.size(); i++)
            want.push_back(std::max(0.0, conv[i % 36] + zv[i]));
        OpResult r;
        ASSERT_OK(
            RunOp(Call("FusedConv", 1, "osprey"), at, {&x, &w, &b, &z}, &r));
        ExpectDims(r.outs[0], {2, 4, 3, 3});
        ExpectNear(want, r.outs[0], 1e-4, "Y broadcasts");
    }
}

TEST(OnnxNnConv, ShapeErrors) {
    Tensor x = Rand({1, 3, 5, 5}, 20);
    Tensor w_bad_c = Rand({2, 2, 3, 3}, 21);
    std::string msg;
    EXPECT_EQ(FailCode(Call("Conv", 11), Attrs(), {&x, &w_bad_c}, &msg),
              OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("input channels"), std::string::npos) << msg;
    Tensor w = Rand({2, 3, 7, 3}, 22); // kernel taller than the input
    EXPECT_EQ(FailCode(Call("Conv", 11), Attrs(), {&x, &w}),
              OSP_ERROR_INVALID_ARG);
    Tensor w3 = Rand({2, 3, 3, 3}, 23);
    Attrs at;
    at.Ints("kernel_shape", {3, 2});
    EXPECT_EQ(FailCode(Call("Conv", 11), at, {&x, &w3}), OSP_ERROR_INVALID_ARG);
    Attrs bad_pad;
    bad_pad.String("auto_pad", "SAME");
    EXPECT_EQ(FailCode(Call("Conv", 11), bad_pad, {&x, &w3}),
              OSP_ERROR_INVALID_ARG);
    Tensor x4 = Rand({1, 1, 2, 2, 2, 2}, 24), w4 = Rand({1, 1, 1, 1, 1, 1}, 25);
    EXPECT_EQ(FailCode(Call("Conv", 11), Attrs(), {&x4, &w4}),
              OSP_ERROR_UNSUPPORTED);
}

// ---- ConvTranspose
// -----------------------------------------------------------

TEST(OnnxNnConvTranspose, StridesPadsBiasGroups) {
    Tensor x = Rand({2, 4, 3, 4}, 30), w = Rand({4, 3, 3, 2}, 31);
    Tensor b = Rand({6}, 32);
    Attrs at;
    at.Ints("strides", {2, 3}).Ints("pads", {1, 0, 0, 1}).Int("group", 2);
    OpResult r;
    ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w, &b}, &r));
    // H: 2 * 2 + 3 - 1 = 6; W: 3 * 3 + 2 - 1 = 10
    ExpectDims(r.outs[0], {2, 6, 6, 10});
    ExpectNear(RefConvTranspose(
                   x, w, &b, 2,
                   MakeGeo({3, 4}, {6, 10}, {3, 2}, {2, 3}, {1, 0, 0, 1})),
               r.outs[0]);
}

TEST(OnnxNnConvTranspose, OutputPaddingAndOutputShape) {
    // ONNX's operator example: X 1x1x3x3, W 1x2x3x3, strides 3x2.
    Tensor x = Rand({1, 1, 3, 3}, 33), w = Rand({1, 2, 3, 3}, 34);
    {
        Attrs at;
        at.Ints("strides", {3, 2}).Ints("output_padding", {1, 1});
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 2, 10, 8});
        ExpectNear(RefConvTranspose(x, w, nullptr, 1,
                                    MakeGeo({3, 3}, {10, 8}, {3, 3}, {3, 2})),
                   r.outs[0], 1e-4, "output_padding");
    }
    {
        // output_shape [10, 8]: total padding 9 - 10 = -1 per axis, so no
        // leading pad and the same result as output_padding.
        Attrs at;
        at.Ints("strides", {3, 2}).Ints("output_shape", {10, 8});
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 2, 10, 8});
        ExpectNear(RefConvTranspose(x, w, nullptr, 1,
                                    MakeGeo({3, 3}, {10, 8}, {3, 3}, {3, 2})),
                   r.outs[0], 1e-4, "output_shape");
    }
    {
        // output_shape smaller than the full output: total padding 2 on H
        // (1 before), 3 on W (2 before without SAME_UPPER), given as the
        // whole shape.
        Attrs at;
        at.Ints("strides", {3, 2}).Ints("output_shape", {1, 2, 9 - 2, 7 - 3});
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 2, 7, 4});
        ExpectNear(RefConvTranspose(
                       x, w, nullptr, 1,
                       MakeGeo({3, 3}, {7, 4}, {3, 3}, {3, 2}, {1, 2, 1, 1})),
                   r.outs[0], 1e-4, "smaller output_shape");
    }
    {
        // SAME_UPPER: out = in * stride = 6, total padding
        // 2 * 2 + 3 - 6 = 1 per axis, none of it before
        Attrs at;
        at.Ints("strides", {2, 2}).String("auto_pad", "SAME_UPPER");
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 2, 6, 6});
        ExpectNear(RefConvTranspose(
                       x, w, nullptr, 1,
                       MakeGeo({3, 3}, {6, 6}, {3, 3}, {2, 2}, {0, 0, 1, 1})),
                   r.outs[0], 1e-4, "SAME_UPPER");
    }
}

TEST(OnnxNnConvTranspose, DilationsAnd1d3d) {
    {
        Tensor x = Rand({1, 2, 5}, 35), w = Rand({2, 3, 3}, 36);
        Attrs at;
        at.Ints("dilations", {2}).Ints("strides", {2});
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), at, {&x, &w}, &r));
        // 2 * 4 + 2 * 2 + 1 = 13
        ExpectDims(r.outs[0], {1, 3, 13});
        ExpectNear(RefConvTranspose(x, w, nullptr, 1,
                                    MakeGeo({5}, {13}, {3}, {2}, {}, {2})),
                   r.outs[0]);
    }
    {
        Tensor x = Rand({1, 1, 2, 3, 2}, 37), w = Rand({1, 2, 2, 2, 2}, 38);
        OpResult r;
        ASSERT_OK(RunOp(Call("ConvTranspose", 11), Attrs(), {&x, &w}, &r));
        ExpectDims(r.outs[0], {1, 2, 3, 4, 3});
        ExpectNear(RefConvTranspose(x, w, nullptr, 1,
                                    MakeGeo({2, 3, 2}, {3, 4, 3}, {2, 2, 2})),
                   r.outs[0]);
    }
}

// ---- pools
// -------------------------------------------------------------------

TEST(OnnxNnPool, MaxPoolCeilModeAndIndices) {
    Tensor x = Rand({2, 3, 5, 5}, 40);
    Attrs at;
    at.Ints("kernel_shape", {2, 2}).Ints("strides", {2, 2}).Int("ceil_mode", 1);
    OpResult r;
    ASSERT_OK(RunOp(Call("MaxPool", 12, "", 2), at, {&x}, &r));
    ExpectDims(r.outs[0], {2, 3, 3, 3});
    ExpectDims(r.outs[1], {2, 3, 3, 3});
    EXPECT_EQ(r.outs[1].dtype, OSP_TYPE_INT64);
    std::vector<double> idx;
    ExpectNear(RefPool(x, PoolKind::Max,
                       MakeGeo({5, 5}, {3, 3}, {2, 2}, {2, 2}), false, 2, &idx),
               r.outs[0]);
    ExpectNear(idx, r.outs[1], 0);

    // ceil_mode with pads: in 4, kernel 3, stride 2, pads 1/1 gives
    // ceil((4 + 2 - 3) / 2) + 1 = 3 windows; the last starts at
    // 2 * 2 - 1 = 3, inside the input, so it stays.
    Tensor x4 = Rand({1, 1, 4, 4}, 41);
    Attrs at2;
    at2.Ints("kernel_shape", {3, 3})
        .Ints("strides", {2, 2})
        .Ints("pads", {1, 1, 1, 1})
        .Int("ceil_mode", 1);
    ASSERT_OK(RunOp(Call("MaxPool", 12), at2, {&x4}, &r));
    ExpectDims(r.outs[0], {1, 1, 3, 3});
    ExpectNear(RefPool(x4, PoolKind::Max,
                       MakeGeo({4, 4}, {3, 3}, {3, 3}, {2, 2}, {1, 1, 1, 1})),
               r.outs[0]);
    Attrs at3;
    at3.Ints("kernel_shape", {2})
        .Ints("strides", {2})
        .Ints("pads", {1, 1})
        .Int("ceil_mode", 1);
    Tensor x1 = Rand({1, 1, 3}, 42);
    ASSERT_OK(RunOp(Call("MaxPool", 12), at3, {&x1}, &r));
    // ceil((3 + 2 - 2) / 2) + 1 = 3, but window 3 starts at 2*2 - 1 = 3 =
    // in: it would hold only padding, so 2 windows.
    ExpectDims(r.outs[0], {1, 1, 2});
}

TEST(OnnxNnPool, MaxPoolDilationsSameAndUint8) {
    Tensor x = Rand({1, 2, 7, 6}, 43);
    Attrs at;
    at.Ints("kernel_shape", {3, 2})
        .Ints("dilations", {2, 2})
        .String("auto_pad", "SAME_UPPER");
    OpResult r;
    ASSERT_OK(RunOp(Call("MaxPool", 12), at, {&x}, &r));
    // out = in; total pads (7-1) + 5 - 7 = 4 (2 before), (6-1) + 3 - 6 = 2
    ExpectDims(r.outs[0], {1, 2, 7, 6});
    ExpectNear(
        RefPool(x, PoolKind::Max,
                MakeGeo({7, 6}, {7, 6}, {3, 2}, {}, {2, 1, 2, 1}, {2, 2})),
        r.outs[0]);

    std::vector<uint8_t> u = {1, 200, 3,   4,  5,  6,  7,  8,
                              9, 10,  250, 12, 13, 14, 15, 16};
    Tensor xu = Make<uint8_t>(OSP_TYPE_UINT8, {1, 1, 4, 4}, u);
    Attrs at2;
    at2.Ints("kernel_shape", {2, 2}).Ints("strides", {2, 2});
    ASSERT_OK(RunOp(Call("MaxPool", 12), at2, {&xu}, &r));
    EXPECT_EQ(r.outs[0].dtype, OSP_TYPE_UINT8);
    ExpectNear({200, 8, 14, 250}, r.outs[0], 0);
}

TEST(OnnxNnPool, MaxPoolIndicesColumnMajor) {
    // storage_order 1: each index is plane * S + h + w * H (2-d) or
    // plane * S + d + h * D + w * D * H (3-d), as onnxruntime.
    for (int rank : {2, 3}) {
        std::vector<int64_t> in = rank == 2 ? std::vector<int64_t>{5, 4}
                                            : std::vector<int64_t>{3, 4, 5};
        std::vector<int64_t> xd = {2, 3};
        xd.insert(xd.end(), in.begin(), in.end());
        Tensor x = Rand(xd, 48);
        std::vector<int64_t> k(rank, 2), s(rank, 1), out;
        for (int64_t d : in)
            out.push_back(d - 1);
        Attrs at;
        at.Ints("kernel_shape", k).Int("storage_order", 1);
        OpResult r;
        ASSERT_OK(RunOp(Call("MaxPool", 12, "", 2), at, {&x}, &r));
        std::vector<double> idx;
        std::vector<int64_t> pads(2 * rank, 0);
        ExpectNear(RefPool(x, PoolKind::Max, MakeGeo(in, out, k, s, pads),
                           false, 2, &idx),
                   r.outs[0]);
        int64_t plane = CountOf(in);
        for (double &v : idx) {
            int64_t f = (int64_t)v, pl = f / plane, rem = f % plane;
            int64_t col = 0, cstride = 1, rstride = plane;
            for (int d = 0; d < rank; d++) {
                rstride /= in[d];
                col += (rem / rstride) % in[d] * cstride;
                cstride *= in[d];
            }
            v = (double)(pl * plane + col);
        }
        ExpectNear(idx, r.outs[1], 0, "rank " + std::to_string(rank));
    }
}

TEST(OnnxNnPool, AveragePoolCountIncludePad) {
    Tensor x = Rand({2, 2, 5, 6}, 44);
    for (int cip = 0; cip < 2; cip++) {
        Attrs at;
        at.Ints("kernel_shape", {3, 3})
            .Ints("pads", {1, 2, 1, 0})
            .Ints("strides", {2, 2})
            .Int("count_include_pad", cip);
        OpResult r;
        ASSERT_OK(RunOp(Call("AveragePool", 11), at, {&x}, &r));
        // H: (5 + 2 - 3) / 2 + 1 = 3; W: (6 + 2 - 3) / 2 + 1 = 3
        ExpectDims(r.outs[0], {2, 2, 3, 3});
        ExpectNear(
            RefPool(x, PoolKind::Avg,
                    MakeGeo({5, 6}, {3, 3}, {3, 3}, {2, 2}, {1, 2, 1, 0}),
                    cip != 0),
            r.outs[0], 1e-5, cip ? "include" : "exclude");
    }
    // ceil_mode with count_include_pad: the last window hangs past the
    // padded input and divides by what it covers inside it.
    Tensor x5 = Rand({1, 1, 5, 5}, 45);
    Attrs at;
    at.Ints("kernel_shape", {3, 3})
        .Ints("strides", {2, 2})
        .Ints("pads", {1, 1, 0, 0})
        .Int("ceil_mode", 1)
        .Int("count_include_pad", 1);
    OpResult r;
    ASSERT_OK(RunOp(Call("AveragePool", 11), at, {&x5}, &r));
    // ceil((5 + 1 - 3) / 2) + 1 = 3; last start 4 - 1 = 3 < 6: kept
    ExpectDims(r.outs[0], {1, 1, 3, 3});
    ExpectNear(RefPool(x5, PoolKind::Avg,
                       MakeGeo({5, 5}, {3, 3}, {3, 3}, {2, 2}, {1, 1, 0, 0}),
                       true),
               r.outs[0]);
    EXPECT_GT(r.workspace, 0u);
}

TEST(OnnxNnPool, LpPool) {
    Tensor x = Rand({1, 3, 6, 5}, 46);
    for (int p : {1, 2, 3}) {
        Attrs at;
        at.Ints("kernel_shape", {2, 3}).Ints("pads", {1, 1, 0, 1}).Int("p", p);
        OpResult r;
        ASSERT_OK(RunOp(Call("LpPool", 11), at, {&x}, &r));
        ExpectDims(r.outs[0], {1, 3, 6, 5});
        ExpectNear(RefPool(x, PoolKind::Lp,
                           MakeGeo({6, 5}, {6, 5}, {2, 3}, {}, {1, 1, 0, 1}),
                           false, p),
                   r.outs[0], 1e-4, "p " + std::to_string(p));
    }
}

TEST(OnnxNnPool, GlobalPools) {
    Tensor x = Rand({2, 3, 4, 5}, 47);
    std::vector<double> xv = x.Doubles();
    std::vector<double> mx, mean, l2, l3;
    for (int pl = 0; pl < 6; pl++) {
        double m = -INFINITY, s = 0, q = 0, c = 0;
        for (int i = 0; i < 20; i++) {
            double v = xv[pl * 20 + i];
            m = std::max(m, v);
            s += v;
            q += v * v;
            c += std::pow(std::fabs(v), 3);
        }
        mx.push_back(m);
        mean.push_back(s / 20);
        l2.push_back(std::sqrt(q));
        l3.push_back(std::cbrt(c));
    }
    OpResult r;
    ASSERT_OK(RunOp(Call("GlobalMaxPool", 1), Attrs(), {&x}, &r));
    ExpectDims(r.outs[0], {2, 3, 1, 1});
    ExpectNear(mx, r.outs[0]);
    ASSERT_OK(RunOp(Call("GlobalAveragePool", 1), Attrs(), {&x}, &r));
    ExpectDims(r.outs[0], {2, 3, 1, 1});
    ExpectNear(mean, r.outs[0]);
    ASSERT_OK(RunOp(Call("GlobalLpPool", 2), Attrs(), {&x}, &r));
    ExpectNear(l2, r.outs[0]);
    Attrs p3;
    p3.Int("p", 3);
    ASSERT_OK(RunOp(Call("GlobalLpPool", 2), p3, {&x}, &r));
    ExpectDims(r.outs[0], {2, 3, 1, 1});
    ExpectNear(l3, r.outs[0]);
}

// ---- normalisations
// ------------------------------------------------------------

TEST(OnnxNnNorm, BatchNormalizationMatchesReference) {
    Tensor x = Rand({2, 3, 4, 2}, 50), scale = Rand({3}, 51);
    Tensor bias = Rand({3}, 52), mean = Rand({3}, 53);
    Tensor var = F32({3}, {0.5f, 1.25f, 2.0f});
    std::vector<double> xv = x.Doubles(), sv = scale.Doubles(),
                        bv = bias.Doubles(), mv = mean.Doubles(),
                        vv = var.Doubles();
    double eps = 1e-3;
    std::vector<double> want;
    for (int i = 0; i < 48; i++) {
        int c = (i / 8) % 3;
        want.push_back((xv[i] - mv[c]) / std::sqrt(vv[c] + eps) * sv[c] +
                       bv[c]);
    }
    for (int64_t opset : {7, 9, 14, 15}) {
        Attrs at;
        at.Float("epsilon", (float)eps);
        OpResult r;
        ASSERT_OK(RunOp(Call("BatchNormalization", opset), at,
                        {&x, &scale, &bias, &mean, &var}, &r));
        ExpectDims(r.outs[0], {2, 3, 4, 2});
        ExpectNear(want, r.outs[0], 1e-5, "opset " + std::to_string(opset));
    }
    Attrs train;
    train.Int("training_mode", 1);
    EXPECT_EQ(FailCode(Call("BatchNormalization", 15), train,
                       {&x, &scale, &bias, &mean, &var}),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode(Call("BatchNormalization", 15, "", 3), Attrs(),
                       {&x, &scale, &bias, &mean, &var}),
              OSP_ERROR_UNSUPPORTED);
    Tensor short_mean = Rand({2}, 54);
    EXPECT_EQ(FailCode(Call("BatchNormalization", 15), Attrs(),
                       {&x, &scale, &bias, &short_mean, &var}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxNnNorm, BatchNormalizationOpset7NotSpatial) {
    Tensor x = Rand({2, 2, 3}, 55);
    Tensor scale = Rand({2, 3}, 56), bias = Rand({2, 3}, 57);
    Tensor mean = Rand({2, 3}, 58), var = Rand({2, 3}, 59, 2.5f);
    std::vector<double> xv = x.Doubles(), sv = scale.Doubles(),
                        bv = bias.Doubles(), mv = mean.Doubles(),
                        vv = var.Doubles(), want;
    for (int i = 0; i < 12; i++) {
        int e = i % 6;
        want.push_back((xv[i] - mv[e]) / std::sqrt(vv[e] + 1e-5) * sv[e] +
                       bv[e]);
    }
    Attrs at;
    at.Int("spatial", 0);
    OpResult r;
    ASSERT_OK(RunOp(Call("BatchNormalization", 7), at,
                    {&x, &scale, &bias, &mean, &var}, &r));
    ExpectNear(want, r.outs[0], 1e-5);
}

TEST(OnnxNnNorm, InstanceNormalization) {
    Tensor x = Rand({2, 3, 5, 2}, 60), scale = Rand({3}, 61),
           bias = Rand({3}, 62);
    std::vector<double> xv = x.Doubles(), sv = scale.Doubles(),
                        bv = bias.Doubles(), want(60);
    for (int nc = 0; nc < 6; nc++) {
        double m = 0, v = 0;
        for (int i = 0; i < 10; i++)
            m += xv[nc * 10 + i];
        m /= 10;
        for (int i = 0; i < 10; i++)
            v += (xv[nc * 10 + i] - m) * (xv[nc * 10 + i] - m);
        v /= 10;
        for (int i = 0; i < 10; i++)
            want[nc * 10 + i] =
                (xv[nc * 10 + i] - m) / std::sqrt(v + 1e-2) * sv[nc % 3] +
                bv[nc % 3];
    }
    Attrs at;
    at.Float("epsilon", 1e-2f);
    OpResult r;
    ASSERT_OK(
        RunOp(Call("InstanceNormalization", 6), at, {&x, &scale, &bias}, &r));
    ExpectDims(r.outs[0], {2, 3, 5, 2});
    ExpectNear(want, r.outs[0], 1e-5);
}

// LayerNormalization's reference over [rows, cols] with full-size scale
// and bias; *mean and *inv_std per row.
std::vector<double> RefLayerNorm(const std::vector<double> &x, int64_t rows,
                                 int64_t cols, const std::vector<double> &s,
                                 const std::vector<double> &b, double eps,
                                 std::vector<double> *mean,
                                 std::vector<double> *inv_std) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols; c++)
            m += x[r * cols + c];
        m /= (double)cols;
        for (int64_t c = 0; c < cols; c++)
            v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
        v /= (double)cols;
        double is = 1.0 / std::sqrt(v + eps);
        mean->push_back(m);
        inv_std->push_back(is);
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] =
                (x[r * cols + c] - m) * is * s[c] + (b.empty() ? 0 : b[c]);
    }
    return y;
}

TEST(OnnxNnNorm, LayerNormalizationAxisMinusOneWithStats) {
    Tensor x = Rand({2, 3, 8}, 63), scale = Rand({8}, 64), bias = Rand({8}, 65);
    std::vector<double> mean, inv;
    std::vector<double> want = RefLayerNorm(x.Doubles(), 6, 8, scale.Doubles(),
                                            bias.Doubles(), 1e-5, &mean, &inv);
    OpResult r;
    ASSERT_OK(RunOp(Call("LayerNormalization", 17, "", 3), Attrs(),
                    {&x, &scale, &bias}, &r));
    ExpectDims(r.outs[0], {2, 3, 8});
    ExpectDims(r.outs[1], {2, 3, 1});
    ExpectDims(r.outs[2], {2, 3, 1});
    ExpectNear(want, r.outs[0], 1e-5);
    ExpectNear(mean, r.outs[1], 1e-5);
    ExpectNear(inv, r.outs[2], 1e-5);
    // only Y, no bias
    OpResult r2;
    mean.clear();
    inv.clear();
    want =
        RefLayerNorm(x.Doubles(), 6, 8, scale.Doubles(), {}, 1e-5, &mean, &inv);
    ASSERT_OK(RunOp(Call("LayerNormalization", 17, "", 3, {true, false, false}),
                    Attrs(), {&x, &scale}, &r2));
    ExpectNear(want, r2.outs[0], 1e-5);
}

TEST(OnnxNnNorm, LayerNormalizationAxis1AndBroadcastScale) {
    Tensor x = Rand({2, 3, 4}, 66);
    Tensor scale = Rand({1, 4}, 67); // broadcasts over the normalised [3, 4]
    Tensor bias = Rand({3, 4}, 68);
    std::vector<double> sv = scale.Doubles(), full;
    for (int i = 0; i < 12; i++)
        full.push_back(sv[i % 4]);
    std::vector<double> mean, inv;
    std::vector<double> want = RefLayerNorm(x.Doubles(), 2, 12, full,
                                            bias.Doubles(), 1e-3, &mean, &inv);
    Attrs at;
    at.Int("axis", 1).Float("epsilon", 1e-3f);
    OpResult r;
    ASSERT_OK(RunOp(Call("LayerNormalization", 17, "", 2), at,
                    {&x, &scale, &bias}, &r));
    ExpectDims(r.outs[1], {2, 1, 1});
    ExpectNear(want, r.outs[0], 1e-5);
    ExpectNear(mean, r.outs[1], 1e-5);
    EXPECT_GT(r.workspace, 0u);
    Tensor bad = Rand({2, 4}, 69);
    EXPECT_EQ(FailCode(Call("LayerNormalization", 17), at, {&x, &bad}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxNnNorm, GroupNormalization) {
    Tensor x = Rand({2, 4, 3}, 70);
    std::vector<double> xv = x.Doubles();
    for (int64_t opset : {18, 21}) {
        int64_t per = opset >= 21 ? 4 : 2;
        Tensor scale = Rand({per}, 71), bias = Rand({per}, 72);
        std::vector<double> sv = scale.Doubles(), bv = bias.Doubles(), want(24);
        for (int ng = 0; ng < 4; ng++) { // 2 groups of 2 channels x 3
            double m = 0, v = 0;
            for (int i = 0; i < 6; i++)
                m += xv[ng * 6 + i];
            m /= 6;
            for (int i = 0; i < 6; i++)
                v += (xv[ng * 6 + i] - m) * (xv[ng * 6 + i] - m);
            v /= 6;
            for (int i = 0; i < 6; i++) {
                int c = (ng % 2) * 2 + i / 3;
                int k = opset >= 21 ? c : ng % 2;
                want[ng * 6 + i] =
                    (xv[ng * 6 + i] - m) / std::sqrt(v + 1e-5) * sv[k] + bv[k];
            }
        }
        Attrs at;
        at.Int("num_groups", 2);
        OpResult r;
        ASSERT_OK(RunOp(Call("GroupNormalization", opset), at,
                        {&x, &scale, &bias}, &r));
        ExpectNear(want, r.outs[0], 1e-5, "opset " + std::to_string(opset));
    }
}

TEST(OnnxNnNorm, Lrn) {
    Tensor x = Rand({2, 5, 3, 2}, 73);
    std::vector<double> xv = x.Doubles(), want;
    const int size = 4;
    const double alpha = 2e-2, beta = 0.6, bias = 1.5;
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 5; c++)
            for (int s = 0; s < 6; s++) {
                double sum = 0;
                for (int cc = c - (size - 1) / 2; cc <= c + size / 2; cc++)
                    if (cc >= 0 && cc < 5)
                        sum +=
                            xv[(n * 5 + cc) * 6 + s] * xv[(n * 5 + cc) * 6 + s];
                want.push_back(xv[(n * 5 + c) * 6 + s] /
                               std::pow(bias + alpha / size * sum, beta));
            }
    Attrs at;
    at.Int("size", size)
        .Float("alpha", (float)alpha)
        .Float("beta", (float)beta)
        .Float("bias", (float)bias);
    OpResult r;
    ASSERT_OK(RunOp(Call("LRN", 13), at, {&x}, &r));
    ExpectDims(r.outs[0], {2, 5, 3, 2});
    ExpectNear(want, r.outs[0], 1e-5);
}

// ---- Resize and Upsample
// ---------------------------------------------------------

enum class Coord {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn
};

// ONNX's reference resize, one axis at a time: nearest (round_prefer_floor,
// round_prefer_ceil, floor, ceil) or linear with edge clamping.
std::vector<double> RefResize(const std::vector<double> &x,
                              std::vector<int64_t> dims,
                              const std::vector<int64_t> &out,
                              const std::vector<double> &scales, Coord coord,
                              bool linear, const std::string &nearest_mode) {
    std::vector<double> cur = x;
    for (size_t ax = 0; ax < dims.size(); ax++) {
        int64_t in = dims[ax], o = out[ax];
        double s = scales[ax];
        if (in == o && s == 1.0) // as ONNX's reference: identity
            continue;
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < ax; d++)
            outer *= dims[d];
        for (size_t d = ax + 1; d < dims.size(); d++)
            inner *= dims[d];
        std::vector<double> next((size_t)(outer * o * inner));
        for (int64_t j = 0; j < o; j++) {
            double width = s * (double)in, xo;
            switch (coord) {
            case Coord::HalfPixel:
                xo = (j + 0.5) / s - 0.5;
                break;
            case Coord::PytorchHalfPixel:
                xo = width == 1 ? -0.5 : (j + 0.5) / s - 0.5;
                break;
            case Coord::AlignCorners:
                xo = width == 1 ? 0 : j * (in - 1.0) / (width - 1);
                break;
            case Coord::TfHalfPixelForNn:
                xo = (j + 0.5) / s;
                break;
            default:
                xo = j / s;
                break;
            }
            int64_t i0, i1;
            double w = 0;
            if (linear) {
                double c = std::min(std::max(xo, 0.0), in - 1.0);
                i0 = (int64_t)std::floor(c);
                i1 = std::min(i0 + 1, in - 1);
                w = c - (double)i0;
            } else {
                double f = std::floor(xo), r = xo - f, v;
                if (r == 0)
                    v = xo;
                else if (nearest_mode == "round_prefer_floor")
                    v = r <= 0.5 ? f : f + 1;
                else if (nearest_mode == "round_prefer_ceil")
                    v = r < 0.5 ? f : f + 1;
                else if (nearest_mode == "floor")
                    v = f;
                else
                    v = f + 1;
                i0 = i1 = std::min(std::max((int64_t)v, (int64_t)0), in - 1);
            }
            for (int64_t a = 0; a < outer; a++)
                for (int64_t b = 0; b < inner; b++)
                    next[(a * o + j) * inner + b] =
                        cur[(a * in + i0) * inner + b] * (1 - w) +
                        cur[(a * in + i1) * inner + b] * w;
        }
        cur = next;
        dims[ax] = o;
    }
    return cur;
}

TEST(OnnxNnResize, NearestIntegerScalesIsOneCopy) {
    // ONNX's test_resize_upsample_scales_nearest
    Tensor x = F32({1, 1, 2, 2}, {1, 2, 3, 4});
    Tensor scales = F32({4}, {1, 1, 2, 3}, true);
    Attrs at;
    at.String("mode", "nearest");
    OpResult r;
    ASSERT_OK(RunOp(Call("Resize", 13), at, {&x, nullptr, &scales}, &r));
    ExpectDims(r.outs[0], {1, 1, 4, 6});
    ExpectNear({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
               r.outs[0], 0);
    EXPECT_EQ(r.workspace, 0u); // a single strided copy

    // the same through sizes, through Upsample (7 and 9), and downsampling
    // by an integer factor (ONNX's test_resize_downsample_scales_nearest)
    Tensor sizes = KnownI64({4}, {1, 1, 4, 6});
    ASSERT_OK(
        RunOp(Call("Resize", 13), at, {&x, nullptr, nullptr, &sizes}, &r));
    ExpectNear({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
               r.outs[0], 0);
    Tensor scales9 = F32({4}, {1, 1, 2, 3}, true);
    ASSERT_OK(RunOp(Call("Upsample", 9), at, {&x, &scales9}, &r));
    ExpectDims(r.outs[0], {1, 1, 4, 6});
    Attrs at7;
    at7.Floats("scales", {1, 1, 2, 3});
    ASSERT_OK(RunOp(Call("Upsample", 7), at7, {&x}, &r));
    ExpectNear({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
               r.outs[0], 0);
    Tensor xd = F32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    Tensor down = F32({4}, {1, 1, 0.6f, 0.6f}, true);
    ASSERT_OK(RunOp(Call("Resize", 13), at, {&xd, nullptr, &down}, &r));
    ExpectDims(r.outs[0], {1, 1, 1, 2});
    ExpectNear({1, 3}, r.outs[0], 0);
    EXPECT_EQ(r.workspace, 0u);
    // Resize-10: asymmetric, rounding up when shrinking
    ASSERT_OK(RunOp(Call("Resize", 10), at, {&xd, &down}, &r));
    ExpectNear({1, 3}, r.outs[0], 0);
    // an INT64 tensor moves by its bytes
    Tensor xi = I64({1, 2}, {7, -9});
    Tensor s2 = F32({2}, {2, 2}, true);
    ASSERT_OK(RunOp(Call("Resize", 13), at, {&xi, nullptr, &s2}, &r));
    ExpectNear({7, 7, -9, -9, 7, 7, -9, -9}, r.outs[0], 0);
}

TEST(OnnxNnResize, NearestGeneralScalesThroughGather) {
    Tensor x = Rand({1, 2, 3, 5}, 80);
    struct Case {
        Coord coord;
        const char *coord_name, *nearest;
    } cases[] = {
        {Coord::HalfPixel, "half_pixel", "round_prefer_floor"},
        {Coord::HalfPixel, "half_pixel", "round_prefer_ceil"},
        {Coord::Asymmetric, "asymmetric", "floor"},
        {Coord::AlignCorners, "align_corners", "ceil"},
        {Coord::PytorchHalfPixel, "pytorch_half_pixel", "round_prefer_floor"},
        {Coord::TfHalfPixelForNn, "tf_half_pixel_for_nn", "round_prefer_ceil"},
    };
    for (const Case &c : cases) {
        // sizes 3 -> 7 (grows, not an integer factor), 5 -> 3 (shrinks)
        Tensor sizes = KnownI64({4}, {1, 2, 7, 3});
        Attrs at;
        at.String("coordinate_transformation_mode", c.coord_name)
            .String("nearest_mode", c.nearest);
        OpResult r;
        ASSERT_OK(
            RunOp(Call("Resize", 13), at, {&x, nullptr, nullptr, &sizes}, &r));
        ExpectDims(r.outs[0], {1, 2, 7, 3});
        ExpectNear(RefResize(x.Doubles(), {1, 2, 3, 5}, {1, 2, 7, 3},
                             {1, 1, 7.0 / 3, 3.0 / 5}, c.coord, false,
                             c.nearest),
                   r.outs[0], 0, std::string(c.coord_name) + " " + c.nearest);
        EXPECT_GT(r.workspace, 0u);
    }
}

TEST(OnnxNnResize, Linear) {
    // ONNX's test_resize_upsample_scales_linear and its align_corners twin
    Tensor x = F32({1, 1, 2, 2}, {1, 2, 3, 4});
    Tensor scales = F32({4}, {1, 1, 2, 2}, true);
    Attrs at;
    at.String("mode", "linear");
    OpResult r;
    ASSERT_OK(RunOp(Call("Resize", 13), at, {&x, nullptr, &scales}, &r));
    ExpectNear({1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25,
                3.5, 3.0, 3.25, 3.75, 4.0},
               r.outs[0], 1e-6);
    Attrs ac;
    ac.String("mode", "linear")
        .String("coordinate_transformation_mode", "align_corners");
    ASSERT_OK(RunOp(Call("Resize", 13), ac, {&x, nullptr, &scales}, &r));
    ExpectNear({1.0, 1.33333333, 1.66666667, 2.0, 1.66666667, 2.0, 2.33333333,
                2.66666667, 2.33333333, 2.66666667, 3.0, 3.33333333, 3.0,
                3.33333333, 3.66666667, 4.0},
               r.outs[0], 1e-6);
    // downsampling (test_resize_downsample_scales_linear): 2.6666665,
    // 4.3333331
    Tensor xd = F32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    Tensor down = F32({4}, {1, 1, 0.6f, 0.6f}, true);
    ASSERT_OK(RunOp(Call("Resize", 13), at, {&xd, nullptr, &down}, &r));
    ExpectNear({2.6666665, 4.3333331}, r.outs[0], 1e-6);
    // random, several modes, sizes
    Tensor xr = Rand({2, 3, 4, 5}, 81);
    for (auto cm :
         {std::make_pair(Coord::HalfPixel, "half_pixel"),
          std::make_pair(Coord::AlignCorners, "align_corners"),
          std::make_pair(Coord::Asymmetric, "asymmetric"),
          std::make_pair(Coord::PytorchHalfPixel, "pytorch_half_pixel")}) {
        Tensor sizes = KnownI64({4}, {2, 3, 7, 3});
        Attrs a;
        a.String("mode", "linear")
            .String("coordinate_transformation_mode", cm.second);
        ASSERT_OK(
            RunOp(Call("Resize", 13), a, {&xr, nullptr, nullptr, &sizes}, &r));
        ExpectNear(RefResize(xr.Doubles(), {2, 3, 4, 5}, {2, 3, 7, 3},
                             {1, 1, 7.0 / 4, 3.0 / 5}, cm.first, true, ""),
                   r.outs[0], 1e-5, cm.second);
    }
    // Upsample linear (asymmetric)
    Tensor s9 = F32({4}, {1, 1, 2, 1.5f}, true);
    ASSERT_OK(RunOp(Call("Upsample", 9), at, {&xr, &s9}, &r));
    ExpectDims(r.outs[0], {2, 3, 8, 7});
    ExpectNear(RefResize(xr.Doubles(), {2, 3, 4, 5}, {2, 3, 8, 7},
                         {1, 1, 2, 1.5}, Coord::Asymmetric, true, ""),
               r.outs[0], 1e-5);
}

TEST(OnnxNnResize, AxesAndKeepAspectRatio) {
    Tensor x = Rand({1, 1, 4, 6}, 82);
    Tensor sizes = KnownI64({2}, {2, 2});
    Attrs at;
    at.Ints("axes", {2, 3}).String("keep_aspect_ratio_policy", "not_larger");
    OpResult r;
    ASSERT_OK(
        RunOp(Call("Resize", 18), at, {&x, nullptr, nullptr, &sizes}, &r));
    // scale min(2/4, 2/6) = 1/3: 4 -> round(1.33) = 1, 6 -> 2
    ExpectDims(r.outs[0], {1, 1, 1, 2});
    ExpectNear(RefResize(x.Doubles(), {1, 1, 4, 6}, {1, 1, 1, 2},
                         {1, 1, 1.0 / 3, 1.0 / 3}, Coord::HalfPixel, false,
                         "round_prefer_floor"),
               r.outs[0], 0);
}

TEST(OnnxNnResize, Unsupported) {
    Tensor x = Rand({1, 1, 4, 4}, 83);
    Tensor scales = F32({4}, {1, 1, 2, 2}, true);
    Attrs cubic;
    cubic.String("mode", "cubic");
    EXPECT_EQ(FailCode(Call("Resize", 13), cubic, {&x, nullptr, &scales}),
              OSP_ERROR_UNSUPPORTED);
    Attrs crop;
    crop.String("coordinate_transformation_mode", "tf_crop_and_resize");
    EXPECT_EQ(FailCode(Call("Resize", 13), crop, {&x, nullptr, &scales}),
              OSP_ERROR_UNSUPPORTED);
    Tensor unknown = F32({4}, {1, 1, 2, 2}, false);
    EXPECT_EQ(FailCode(Call("Resize", 13), Attrs(), {&x, nullptr, &unknown}),
              OSP_ERROR_INVALID_ARG);
    Tensor three = F32({3}, {1, 2, 2}, true);
    EXPECT_EQ(FailCode(Call("Resize", 13), Attrs(), {&x, nullptr, &three}),
              OSP_ERROR_INVALID_ARG);
}

} // namespace

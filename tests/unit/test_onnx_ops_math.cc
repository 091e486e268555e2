// backends/onnx/onnx_ops_math.c and its files (onnx_ops_matmul.c,
// onnx_ops_reduce.c, onnx_ops_softmax.c): each op built on a hand-made
// node, inferred on host descs and run on the CPU device, its outputs
// checked against references computed here in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "half.h"
#include "onnx_op_harness.h"

extern "C" const onnx_op_family onnx_ops_math_family;

namespace {

using namespace onnx_test;

// ASSERT_OK with what was being run in the failure message.
#define ASSERT_OK_AT(expr, what)                                               \
    do {                                                                       \
        osp_error *err_ = (expr);                                              \
        if (err_ != nullptr)                                                   \
            FAIL() << (what) << ": " << TakeMessage(err_);                     \
    } while (0)

// ---- harness (onnx_op_harness.h) -------------------------------------------

osp_error *RunOp(const Call &call, const Attrs &attrs,
                 const std::vector<const Tensor *> &ins, OpResult *run) {
    return RunCall(onnx_ops_math_family, call, attrs, ins, run);
}

osp_error_code FailCode(const Call &call, const Attrs &attrs,
                        const std::vector<const Tensor *> &ins,
                        std::string *msg = nullptr) {
    return FailCall(onnx_ops_math_family, call, attrs, ins, msg);
}

// ---- references ------------------------------------------------------------

// Multi-index <-> flat offset of a contiguous row-major shape.
std::vector<int64_t> Unflatten(int64_t flat, const std::vector<int64_t> &dims) {
    std::vector<int64_t> idx(dims.size());
    for (int i = (int)dims.size() - 1; i >= 0; i--) {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
    return idx;
}

// numpy matmul.
std::vector<double> RefMatMul(const Tensor &a, const Tensor &b,
                              std::vector<int64_t> *out_dims) {
    std::vector<int64_t> ad = a.Dims(), bd = b.Dims();
    bool a1 = ad.size() == 1, b1 = bd.size() == 1;
    if (a1)
        ad.insert(ad.begin(), 1);
    if (b1)
        bd.push_back(1);
    int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
    std::vector<int64_t> abat(ad.begin(), ad.end() - 2),
        bbat(bd.begin(), bd.end() - 2);
    size_t rank = std::max(abat.size(), bbat.size());
    abat.insert(abat.begin(), rank - abat.size(), 1);
    bbat.insert(bbat.begin(), rank - bbat.size(), 1);
    std::vector<int64_t> obat(rank);
    for (size_t i = 0; i < rank; i++)
        obat[i] = std::max(abat[i], bbat[i]);
    std::vector<double> av = a.Doubles(), bv = b.Doubles(), out;
    int64_t nb = CountOf(obat);
    for (int64_t f = 0; f < nb; f++) {
        std::vector<int64_t> idx = Unflatten(f, obat);
        int64_t ao = 0, bo = 0;
        for (size_t i = 0; i < rank; i++) {
            ao = ao * abat[i] + (abat[i] == 1 ? 0 : idx[i]);
            bo = bo * bbat[i] + (bbat[i] == 1 ? 0 : idx[i]);
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s +=
                        av[ao * m * k + i * k + p] * bv[bo * k * n + p * n + j];
                out.push_back(s);
            }
    }
    *out_dims = obat;
    if (!a1)
        out_dims->push_back(m);
    if (!b1)
        out_dims->push_back(n);
    return out;
}

// Einsum of letter-only terms with an explicit output, by enumeration.
std::vector<double> RefEinsum(const std::string &eq,
                              const std::vector<const Tensor *> &ins,
                              std::vector<int64_t> *out_dims) {
    std::string e;
    for (char c : eq)
        if (c != ' ')
            e += c;
    size_t arrow = e.find("->");
    std::string lhs = e.substr(0, arrow), rhs = e.substr(arrow + 2);
    std::vector<std::string> terms;
    size_t start = 0;
    for (;;) {
        size_t comma = lhs.find(',', start);
        terms.push_back(lhs.substr(start, comma - start));
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    std::map<char, int64_t> size;
    for (size_t t = 0; t < terms.size(); t++)
        for (size_t i = 0; i < terms[t].size(); i++)
            size[terms[t][i]] = ins[t]->shape.dims[i];
    std::vector<char> letters;
    for (auto &kv : size)
        letters.push_back(kv.first);
    std::vector<int64_t> ldims;
    for (char c : letters)
        ldims.push_back(size[c]);
    out_dims->clear();
    for (char c : rhs)
        out_dims->push_back(size[c]);
    std::vector<double> out((size_t)CountOf(*out_dims), 0.0);
    std::vector<std::vector<double>> vals;
    for (const Tensor *t : ins)
        vals.push_back(t->Doubles());
    int64_t total = CountOf(ldims);
    for (int64_t f = 0; f < total; f++) {
        std::vector<int64_t> idx = Unflatten(f, ldims);
        std::map<char, int64_t> at;
        for (size_t i = 0; i < letters.size(); i++)
            at[letters[i]] = idx[i];
        double prod = 1;
        for (size_t t = 0; t < terms.size(); t++) {
            int64_t off = 0;
            for (size_t i = 0; i < terms[t].size(); i++)
                off = off * ins[t]->shape.dims[i] + at[terms[t][i]];
            prod *= vals[t][off];
        }
        int64_t off = 0;
        for (size_t i = 0; i < rhs.size(); i++)
            off = off * (*out_dims)[i] + at[rhs[i]];
        out[off] += prod;
    }
    return out;
}

enum class Red { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSq };

// A reduction over `axes` (normalised, empty = all) of x.
std::vector<double> RefReduce(const Tensor &x, std::set<int> axes, Red op,
                              bool keepdims, std::vector<int64_t> *out_dims) {
    std::vector<int64_t> d = x.Dims();
    if (axes.empty())
        for (int i = 0; i < (int)d.size(); i++)
            axes.insert(i);
    std::vector<int64_t> kept;
    out_dims->clear();
    for (int i = 0; i < (int)d.size(); i++) {
        if (!axes.count(i)) {
            kept.push_back(d[i]);
            out_dims->push_back(d[i]);
        } else if (keepdims) {
            out_dims->push_back(1);
        }
    }
    int64_t n_out = CountOf(kept);
    std::vector<std::vector<double>> groups((size_t)n_out);
    std::vector<double> v = x.Doubles();
    for (int64_t f = 0; f < x.Count(); f++) {
        std::vector<int64_t> idx = Unflatten(f, d);
        int64_t o = 0;
        for (int i = 0; i < (int)d.size(); i++)
            if (!axes.count(i))
                o = o * d[i] + idx[i];
        groups[o].push_back(v[f]);
    }
    std::vector<double> out;
    for (auto &g : groups) {
        double r = 0;
        switch (op) {
        case Red::Sum:
            for (double e : g)
                r += e;
            break;
        case Red::Mean:
            for (double e : g)
                r += e;
            r /= (double)g.size();
            break;
        case Red::Max:
            r = -INFINITY;
            for (double e : g)
                r = std::max(r, e);
            break;
        case Red::Min:
            r = INFINITY;
            for (double e : g)
                r = std::min(r, e);
            break;
        case Red::Prod:
            r = 1;
            for (double e : g)
                r *= e;
            break;
        case Red::L1:
            for (double e : g)
                r += std::fabs(e);
            break;
        case Red::L2:
            for (double e : g)
                r += e * e;
            r = std::sqrt(r);
            break;
        case Red::LogSum:
            for (double e : g)
                r += e;
            r = std::log(r);
            break;
        case Red::LogSumExp:
            for (double e : g)
                r += std::exp(e);
            r = std::log(r);
            break;
        case Red::SumSq:
            for (double e : g)
                r += e * e;
            break;
        }
        out.push_back(r);
    }
    return out;
}

// ---- MatMul ----------------------------------------------------------------

void CheckMatMul(const std::vector<int64_t> &ad, const std::vector<int64_t> &bd,
                 unsigned seed) {
    Tensor a = Rand(ad, seed), b = Rand(bd, seed + 1);
    std::vector<int64_t> want_dims;
    std::vector<double> want = RefMatMul(a, b, &want_dims);
    OpResult run;
    ASSERT_OK(RunOp({"MatMul"}, Attrs(), {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), want_dims);
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP32);
    ExpectNear(want, run.outs[0], 1e-5);
}

TEST(OnnxMathMatMul, TwoD) {
    CheckMatMul({3, 4}, {4, 5}, 1);
}

TEST(OnnxMathMatMul, BatchTimesMatrixFoldsIntoRows) {
    CheckMatMul({2, 3, 4, 5}, {5, 6}, 2);
}

TEST(OnnxMathMatMul, MatrixTimesBatch) {
    CheckMatMul({4, 5}, {2, 5, 6}, 3);
}

TEST(OnnxMathMatMul, VectorTimesVectorIsScalar) {
    CheckMatMul({5}, {5}, 4);
}

TEST(OnnxMathMatMul, VectorOperands) {
    CheckMatMul({5}, {2, 5, 3}, 5);
    CheckMatMul({2, 3, 5}, {5}, 6);
    CheckMatMul({5}, {5, 3}, 7);
    CheckMatMul({3, 5}, {5}, 8);
}

TEST(OnnxMathMatMul, BatchedBothSides) {
    CheckMatMul({2, 3, 4, 5}, {2, 3, 5, 6}, 9);
    CheckMatMul({3, 4, 5}, {1, 5, 2}, 10);
}

TEST(OnnxMathMatMul, BroadcastNeedingOuterLoop) {
    // A broadcasts over the inner batch dim, B over the outer one: no single
    // stride describes either, so gemm_ex runs per outer index.
    CheckMatMul({2, 1, 3, 4}, {1, 3, 4, 2}, 11);
    CheckMatMul({3, 1, 2, 3}, {4, 3, 5}, 12);
}

TEST(OnnxMathMatMul, EmptyInnerDimensionGivesZeros) {
    Tensor a = F32({2, 0}, {}), b = F32({0, 3}, {});
    OpResult run;
    ASSERT_OK(RunOp({"MatMul"}, Attrs(), {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(std::vector<double>(6, 0.0), run.outs[0]);
}

TEST(OnnxMathMatMul, EmptyBatchRunsNothing) {
    Tensor a = F32({0, 3, 4}, {}), b = Rand({4, 2}, 1);
    OpResult run;
    ASSERT_OK(RunOp({"MatMul"}, Attrs(), {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{0, 3, 2}));
}

TEST(OnnxMathMatMul, ShapeErrorsNameTheNode) {
    Tensor a = Rand({3, 4}, 1), b = Rand({5, 6}, 2);
    std::string msg;
    EXPECT_EQ(FailCode({"MatMul"}, Attrs(), {&a, &b}, &msg),
              OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("the_node"), std::string::npos) << msg;
    Tensor c = Rand({2, 3, 4}, 1), d = Rand({3, 4, 5}, 2);
    EXPECT_EQ(FailCode({"MatMul"}, Attrs(), {&c, &d}), OSP_ERROR_INVALID_ARG);
    Tensor i = I64({2, 2}, {1, 2, 3, 4});
    EXPECT_EQ(FailCode({"MatMul"}, Attrs(), {&i, &i}), OSP_ERROR_UNSUPPORTED);
}

double Gelu(double x) {
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

TEST(OnnxMathFusedMatMul, BiasResidualGelu) {
    Tensor a = Rand({2, 3, 4}, 21), b = Rand({4, 5}, 22);
    Tensor bias = Rand({5}, 23), res = Rand({2, 3, 5}, 24);
    std::vector<int64_t> dims;
    std::vector<double> want = RefMatMul(a, b, &dims);
    std::vector<double> bv = bias.Doubles(), rv = res.Doubles();
    for (size_t i = 0; i < want.size(); i++)
        want[i] = Gelu(want[i] + bv[i % 5] + rv[i]);
    OpResult run;
    Call call{"FusedMatMul", 1, "osprey"};
    ASSERT_OK(RunOp(call, Attrs().String("activation", "Gelu"),
                    {&a, &b, &bias, &res}, &run));
    EXPECT_EQ(run.outs[0].Dims(), dims);
    ExpectNear(want, run.outs[0], 1e-5);
}

TEST(OnnxMathFusedMatMul, ResidualFollowsTheOuterLoop) {
    Tensor a = Rand({2, 1, 3, 4}, 31), b = Rand({1, 3, 4, 2}, 32);
    Tensor res = Rand({2, 3, 3, 2}, 33);
    std::vector<int64_t> dims;
    std::vector<double> want = RefMatMul(a, b, &dims);
    std::vector<double> rv = res.Doubles();
    for (size_t i = 0; i < want.size(); i++)
        want[i] = std::max(0.0, want[i] + rv[i]);
    OpResult run;
    Call call{"FusedMatMul", 1, "osprey"};
    Tensor *none = nullptr;
    ASSERT_OK(RunOp(call, Attrs().String("activation", "Relu"),
                    {&a, &b, none, &res}, &run));
    ExpectNear(want, run.outs[0], 1e-5);
}

TEST(OnnxMathFusedMatMul, BadBiasAndActivation) {
    Tensor a = Rand({3, 4}, 1), b = Rand({4, 5}, 2), bias = Rand({4}, 3);
    Call call{"FusedMatMul", 1, "osprey"};
    EXPECT_EQ(FailCode(call, Attrs(), {&a, &b, &bias}), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode(call, Attrs().String("activation", "Swish9"), {&a, &b}),
              OSP_ERROR_UNSUPPORTED);
}

// ---- Gemm ------------------------------------------------------------------

void CheckGemm(bool ta, bool tb, float alpha, float beta,
               const std::vector<int64_t> *c_dims, unsigned seed,
               const char *act = nullptr) {
    const int64_t m = 3, k = 4, n = 5;
    Tensor a = Rand(
        ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, seed);
    Tensor b = Rand(
        tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, seed + 1);
    Tensor c = c_dims ? Rand(*c_dims, seed + 2) : Tensor();
    std::vector<double> av = a.Doubles(), bv = b.Doubles(), cv = c.Doubles();
    std::vector<double> want;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += av[ta ? p * m + i : i * k + p] *
                     bv[tb ? j * k + p : p * n + j];
            s *= alpha;
            if (c_dims) {
                std::vector<int64_t> cd = *c_dims;
                int64_t ci = 0, cj = 0;
                int64_t rows = cd.size() == 2 ? cd[0] : 1;
                int64_t cols = cd.empty() ? 1 : cd.back();
                ci = rows == 1 ? 0 : i;
                cj = cols == 1 ? 0 : j;
                s += beta * cv[ci * cols + cj];
            }
            if (act)
                s = std::max(0.0, s);
            want.push_back(s);
        }
    Attrs attrs;
    attrs.Int("transA", ta)
        .Int("transB", tb)
        .Float("alpha", alpha)
        .Float("beta", beta);
    Call call{act ? "FusedGemm" : "Gemm", 13, act ? "osprey" : ""};
    if (act) {
        call.opset = 1;
        attrs.String("activation", act);
    }
    OpResult run;
    std::vector<const Tensor *> ins = {&a, &b};
    if (c_dims)
        ins.push_back(&c);
    std::string what = "transA=" + std::to_string(ta) +
                       " transB=" + std::to_string(tb) +
                       " beta=" + std::to_string(beta) + " C rank " +
                       (c_dims ? std::to_string(c_dims->size()) : "none");
    ASSERT_OK_AT(RunOp(call, attrs, ins, &run), what);
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{m, n})) << what;
    ExpectNear(want, run.outs[0], 1e-5, what);
}

TEST(OnnxMathGemm, TransposesAlphaBetaAndEveryShapeOfC) {
    std::vector<std::vector<int64_t>> cs = {{5}, {1, 5}, {3, 5}, {3, 1},
                                            {},  {1},    {1, 1}};
    unsigned seed = 100;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            CheckGemm(ta, tb, 1.0f, 1.0f, nullptr, seed++);
            CheckGemm(ta, tb, 0.5f, 1.0f, nullptr, seed++);
            for (auto &c : cs)
                for (float beta : {1.0f, 0.25f, 0.0f})
                    CheckGemm(ta, tb, 2.0f, beta, &c, seed++);
        }
}

TEST(OnnxMathGemm, FusedGemmRelu) {
    std::vector<int64_t> c5 = {5}, c35 = {3, 5}, c1 = {};
    CheckGemm(false, true, 1.0f, 1.0f, &c5, 300, "Relu");
    CheckGemm(true, false, 1.0f, 1.0f, &c35, 301, "Relu");
    CheckGemm(false, false, 1.0f, 0.5f, &c1, 302, "Relu");
}

TEST(OnnxMathGemm, Opset7ChecksShapes) {
    Tensor a = Rand({3, 4}, 1), b = Rand({4, 5}, 2), c = Rand({2, 5}, 3);
    Call call{"Gemm", 7};
    EXPECT_EQ(FailCode(call, Attrs(), {&a, &b, &c}), OSP_ERROR_INVALID_ARG);
    Tensor b2 = Rand({5, 5}, 2);
    EXPECT_EQ(FailCode(call, Attrs(), {&a, &b2}), OSP_ERROR_INVALID_ARG);
    Tensor c5 = Rand({5}, 3);
    OpResult run;
    ASSERT_OK(RunOp(call, Attrs(), {&a, &b, &c5}, &run));
}

TEST(OnnxMathGemm, EmptyInnerDimensionScalesC) {
    Tensor a = F32({3, 0}, {}), b = F32({0, 2}, {});
    Tensor c = F32({3, 1}, {1, 2, 3});
    OpResult run;
    ASSERT_OK(
        RunOp({"Gemm", 13}, Attrs().Float("beta", 0.5f), {&a, &b, &c}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{3, 2}));
    ExpectNear({0.5, 0.5, 1, 1, 1.5, 1.5}, run.outs[0]);
    ASSERT_OK(RunOp({"Gemm", 13}, Attrs(), {&a, &b}, &run));
    ExpectNear(std::vector<double>(6, 0.0), run.outs[0]);
}

TEST(OnnxMathMatMul, Fp16) {
    Tensor a32 = Rand({2, 3, 4}, 61), b32 = Rand({4, 5}, 62);
    std::vector<int64_t> dims;
    std::vector<double> want = RefMatMul(a32, b32, &dims);
    auto to16 = [](const Tensor &t) {
        std::vector<uint16_t> h;
        for (float f : t.Values<float>())
            h.push_back(fp32_to_fp16(f));
        return Make<uint16_t>(OSP_TYPE_FP16, t.Dims(), h);
    };
    Tensor a = to16(a32), b = to16(b32);
    OpResult run;
    ASSERT_OK(RunOp({"MatMul"}, Attrs(), {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_FP16);
    std::vector<uint16_t> got = run.outs[0].Values<uint16_t>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++)
        EXPECT_NEAR(fp16_to_fp32(got[i]), want[i],
                    1e-2 * std::max(1.0, std::fabs(want[i])));
}

// ---- Einsum ----------------------------------------------------------------

void CheckEinsum(const std::string &eq,
                 const std::vector<std::vector<int64_t>> &shapes,
                 unsigned seed) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < shapes.size(); i++)
        ts.push_back(Rand(shapes[i], seed + (unsigned)i));
    std::vector<const Tensor *> ins;
    for (auto &t : ts)
        ins.push_back(&t);
    std::vector<int64_t> dims;
    std::vector<double> want = RefEinsum(eq, ins, &dims);
    OpResult run;
    ASSERT_OK_AT(
        RunOp({"Einsum", 12}, Attrs().String("equation", eq), ins, &run), eq);
    EXPECT_EQ(run.outs[0].Dims(), dims) << eq;
    ExpectNear(want, run.outs[0], 1e-5, eq);
}

TEST(OnnxMathEinsum, TransformerPatterns) {
    CheckEinsum("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, 1);
    CheckEinsum("bhid,bhjd->bhij", {{2, 3, 4, 5}, {2, 3, 6, 5}}, 2);
    CheckEinsum("bhij,bhjd->bhid", {{2, 3, 4, 6}, {2, 3, 6, 5}}, 3);
    CheckEinsum("ij,jk->ik", {{3, 4}, {4, 5}}, 4);
    CheckEinsum("bid,jd->bij", {{2, 3, 4}, {5, 4}}, 5);
    CheckEinsum("bij, bjk -> bik", {{2, 3, 4}, {2, 4, 5}}, 6);
}

TEST(OnnxMathEinsum, LayoutsNeedingCopies) {
    // The output as [batch, N, M]: the operands swap roles.
    CheckEinsum("bij,bjk->bki", {{2, 3, 4}, {2, 4, 5}}, 11);
    // Batch not leading in an operand, and a permuted output.
    CheckEinsum("ibh,jbh->bij", {{3, 2, 4}, {5, 2, 4}}, 12);
    CheckEinsum("bqhd,bkhd->bhqk", {{2, 3, 2, 4}, {2, 5, 2, 4}}, 13);
    CheckEinsum("ij,kj->ik", {{3, 4}, {5, 4}}, 14);
    CheckEinsum("ji,jk->ik", {{4, 3}, {4, 5}}, 15);
    CheckEinsum("i,j->ij", {{3}, {4}}, 16);
    CheckEinsum("i,i->", {{6}, {6}}, 17);
    CheckEinsum("abc,cd->abd", {{2, 3, 4}, {4, 2}}, 18);
    CheckEinsum("abkc,ckd->abd", {{2, 3, 2, 4}, {4, 2, 3}}, 19);
}

TEST(OnnxMathEinsum, SingleInput) {
    CheckEinsum("ij->ji", {{3, 4}}, 21);
    CheckEinsum("ij->i", {{3, 4}}, 22);
    CheckEinsum("ij->j", {{3, 4}}, 23);
    CheckEinsum("ijk->ki", {{2, 3, 4}}, 24);
    CheckEinsum("ij->", {{3, 4}}, 25);
}

TEST(OnnxMathEinsum, ImplicitOutputAndEllipsis) {
    // "ij,jk" is "ij,jk->ik"; "i,i" an inner product.
    Tensor a = Rand({3, 4}, 31), b = Rand({4, 5}, 32);
    std::vector<int64_t> dims;
    std::vector<double> want = RefEinsum("ij,jk->ik", {&a, &b}, &dims);
    OpResult run;
    ASSERT_OK(RunOp({"Einsum", 12}, Attrs().String("equation", "ij,jk"),
                    {&a, &b}, &run));
    EXPECT_EQ(run.outs[0].Dims(), dims);
    ExpectNear(want, run.outs[0]);

    Tensor v = Rand({6}, 33), w = Rand({6}, 34);
    want = RefEinsum("i,i->", {&v, &w}, &dims);
    ASSERT_OK(RunOp({"Einsum", 12}, Attrs().String("equation", "i,i"), {&v, &w},
                    &run));
    EXPECT_EQ(run.outs[0].shape.rank, 0);
    ExpectNear(want, run.outs[0]);

    // "...ii ->...i": a batched diagonal.
    Tensor x = Rand({2, 3, 3}, 35);
    ASSERT_OK(RunOp({"Einsum", 12}, Attrs().String("equation", "...ii ->...i"),
                    {&x}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 3}));
    std::vector<double> xv = x.Doubles(), diag;
    for (int bb = 0; bb < 2; bb++)
        for (int i = 0; i < 3; i++)
            diag.push_back(xv[bb * 9 + i * 3 + i]);
    ExpectNear(diag, run.outs[0]);

    // "...ij,...jk->...ik" broadcasting the batch of B.
    Tensor p = Rand({2, 3, 4}, 36), q = Rand({1, 4, 5}, 37);
    std::vector<double> mm = RefMatMul(p, q, &dims);
    ASSERT_OK(RunOp({"Einsum", 12},
                    Attrs().String("equation", "...ij,...jk->...ik"), {&p, &q},
                    &run));
    EXPECT_EQ(run.outs[0].Dims(), dims);
    ExpectNear(mm, run.outs[0]);
}

TEST(OnnxMathEinsum, UnsupportedEquationsAreNamed) {
    Tensor a = Rand({3, 4}, 1), b = Rand({4, 5}, 2), c = Rand({5, 2}, 3);
    std::string msg;
    EXPECT_EQ(FailCode({"Einsum", 12},
                       Attrs().String("equation", "ij,jk,kl->il"), {&a, &b, &c},
                       &msg),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_NE(msg.find("ij,jk,kl->il"), std::string::npos) << msg;
    Tensor d = Rand({3}, 4);
    EXPECT_EQ(FailCode({"Einsum", 12}, Attrs().String("equation", "ij,k->i"),
                       {&a, &d}, &msg),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_NE(msg.find("ij,k->i"), std::string::npos) << msg;
    EXPECT_EQ(FailCode({"Einsum", 12}, Attrs().String("equation", "ij,jk->iz"),
                       {&a, &b}),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode({"Einsum", 12}, Attrs().String("equation", "i-j"), {&a}),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(
        FailCode({"Einsum", 12}, Attrs().String("equation", "ijk->i"), {&a}),
        OSP_ERROR_INVALID_ARG);
}

// ---- Reduce* ---------------------------------------------------------------

struct RedCase {
    const char *op_type;
    Red op;
};

const RedCase kReductions[] = {
    {"ReduceSum", Red::Sum},
    {"ReduceMean", Red::Mean},
    {"ReduceMax", Red::Max},
    {"ReduceMin", Red::Min},
    {"ReduceProd", Red::Prod},
    {"ReduceL1", Red::L1},
    {"ReduceL2", Red::L2},
    {"ReduceLogSum", Red::LogSum},
    {"ReduceLogSumExp", Red::LogSumExp},
    {"ReduceSumSquare", Red::SumSq},
};

// Positive inputs keep LogSum defined.
Tensor RandPositive(const std::vector<int64_t> &dims, unsigned seed) {
    Tensor t = Rand(dims, seed);
    std::vector<float> v = t.Values<float>();
    for (float &f : v)
        f = std::fabs(f) + 0.25f;
    return F32(dims, v);
}

void CheckReduce(const RedCase &rc, int64_t opset,
                 const std::vector<int64_t> &dims,
                 const std::vector<int64_t> &axes, bool keepdims,
                 unsigned seed) {
    Tensor x = RandPositive(dims, seed);
    std::set<int> norm;
    for (int64_t a : axes)
        norm.insert((int)(a < 0 ? a + (int64_t)dims.size() : a));
    std::vector<int64_t> want_dims;
    std::vector<double> want = RefReduce(x, norm, rc.op, keepdims, &want_dims);
    bool axes_input = opset >= 18 || (rc.op == Red::Sum && opset >= 13);
    Attrs attrs;
    attrs.Int("keepdims", keepdims);
    Tensor axes_t = I64({(int64_t)axes.size()}, axes, true);
    std::vector<const Tensor *> ins = {&x};
    if (axes_input)
        ins.push_back(&axes_t);
    else if (!axes.empty())
        attrs.Ints("axes", axes);
    OpResult run;
    std::string what = std::string(rc.op_type) + " opset " +
                       std::to_string(opset) + " keepdims " +
                       std::to_string(keepdims) + " axes " +
                       std::to_string(axes.size());
    ASSERT_OK_AT(RunOp({rc.op_type, opset}, attrs, ins, &run), what);
    EXPECT_EQ(run.outs[0].Dims(), want_dims) << what;
    ExpectNear(want, run.outs[0], 1e-4, what);
}

TEST(OnnxMathReduce, EveryOpOverAdjacentAndSeparateAxes) {
    unsigned seed = 1;
    for (const RedCase &rc : kReductions)
        for (int64_t opset : {11, 13, 18})
            for (bool keep : {false, true}) {
                // one block: no transpose
                CheckReduce(rc, opset, {2, 3, 4}, {1}, keep, seed++);
                CheckReduce(rc, opset, {2, 3, 4}, {1, 2}, keep, seed++);
                // not adjacent: transposed into the workspace first
                CheckReduce(rc, opset, {2, 3, 4}, {0, 2}, keep, seed++);
                CheckReduce(rc, opset, {2, 3, 4, 5}, {-1, 1}, keep, seed++);
                CheckReduce(rc, opset, {2, 1, 3, 4}, {0, 1, 3}, keep, seed++);
                // all
                CheckReduce(rc, opset, {2, 3, 4}, {}, keep, seed++);
            }
}

TEST(OnnxMathReduce, SeparateAxesUseTheWorkspace) {
    Tensor x = Rand({2, 3, 4}, 5);
    OpResult run;
    ASSERT_OK(
        RunOp({"ReduceMax", 13}, Attrs().Ints("axes", {0, 2}), {&x}, &run));
    EXPECT_EQ(run.workspace, 128u); // 24 floats, rounded up to 64
    ASSERT_OK(
        RunOp({"ReduceMax", 13}, Attrs().Ints("axes", {1, 2}), {&x}, &run));
    EXPECT_EQ(run.workspace, 0u);
    // A dim of 1 between two reduced axes does not separate them.
    Tensor y = Rand({2, 3, 1, 4}, 6);
    ASSERT_OK(
        RunOp({"ReduceMax", 13}, Attrs().Ints("axes", {1, 3}), {&y}, &run));
    EXPECT_EQ(run.workspace, 0u);
}

TEST(OnnxMathReduce, SumAxesInputAndNoopWithEmptyAxes) {
    Tensor x = Rand({2, 3}, 7);
    Tensor empty = I64({0}, {}, true);
    OpResult run;
    // noop: the input, unchanged
    ASSERT_OK(RunOp({"ReduceSum", 13}, Attrs().Int("noop_with_empty_axes", 1),
                    {&x, &empty}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(x.Doubles(), run.outs[0]);
    // no noop: everything
    ASSERT_OK(RunOp({"ReduceSum", 13}, Attrs().Int("keepdims", 0), {&x, &empty},
                    &run));
    EXPECT_EQ(run.outs[0].shape.rank, 0);
    std::vector<int64_t> d;
    ExpectNear(RefReduce(x, {}, Red::Sum, false, &d), run.outs[0]);
    // axes omitted (no input) with noop
    ASSERT_OK(RunOp({"ReduceSum", 13}, Attrs().Int("noop_with_empty_axes", 1),
                    {&x}, &run));
    ExpectNear(x.Doubles(), run.outs[0]);
    // axes as INT32 and negative
    Tensor ax32 = I32({1}, {-1}, true);
    ASSERT_OK(RunOp({"ReduceSum", 13}, Attrs(), {&x, &ax32}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 1}));
    ExpectNear(RefReduce(x, {1}, Red::Sum, true, &d), run.outs[0]);
    // axes not known while planning
    Tensor unknown = I64({1}, {1}, false);
    std::string msg;
    EXPECT_EQ(FailCode({"ReduceSum", 13}, Attrs(), {&x, &unknown}, &msg),
              OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("must be known"), std::string::npos) << msg;
    // opset 11: axes attribute; an axes input is ignored
    ASSERT_OK(RunOp({"ReduceSum", 11}, Attrs().Ints("axes", {0}), {&x}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{1, 3}));
    // out of range
    Tensor bad = I64({1}, {2}, true);
    EXPECT_EQ(FailCode({"ReduceSum", 13}, Attrs(), {&x, &bad}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxMathReduce, IntegersAndEmptyAxes) {
    Tensor x = I64({2, 3}, {1, -5, 3, 4, 2, -6});
    OpResult run;
    ASSERT_OK(RunOp({"ReduceMax", 13}, Attrs().Ints("axes", {1}), {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_INT64);
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{3, 4}));
    Tensor x32 = I32({2, 3}, {1, -5, 3, 4, 2, -6});
    Tensor ax = I64({1}, {0}, true);
    ASSERT_OK(RunOp({"ReduceSum", 13}, Attrs().Int("keepdims", 0), {&x32, &ax},
                    &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(), (std::vector<int32_t>{5, -3, -3}));
    EXPECT_EQ(FailCode({"ReduceMean", 13}, Attrs(), {&x}),
              OSP_ERROR_UNSUPPORTED);
    // Reducing an empty axis gives the identity.
    Tensor e = F32({2, 0}, {});
    ASSERT_OK(RunOp({"ReduceSum", 11}, Attrs().Ints("axes", {1}), {&e}, &run));
    ExpectNear({0.0, 0.0}, run.outs[0]);
    ASSERT_OK(RunOp({"ReduceMax", 11},
                    Attrs().Ints("axes", {1}).Int("keepdims", 0), {&e}, &run));
    ExpectNear({-INFINITY, -INFINITY}, run.outs[0]);
}

// ---- ArgMax, ArgMin --------------------------------------------------------

TEST(OnnxMathArg, SelectLastIndexAndKeepdims) {
    // ties in every row
    Tensor x = F32({2, 4}, {1, 3, 3, 0, 2, 2, -1, 2});
    OpResult run;
    ASSERT_OK(RunOp({"ArgMax", 13}, Attrs().Int("axis", 1), {&x}, &run));
    EXPECT_EQ(run.outs[0].dtype, OSP_TYPE_INT64);
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{1, 0}));
    ASSERT_OK(RunOp(
        {"ArgMax", 13},
        Attrs().Int("axis", -1).Int("select_last_index", 1).Int("keepdims", 0),
        {&x}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2}));
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{2, 3}));
    ASSERT_OK(
        RunOp({"ArgMin", 12}, Attrs().Int("select_last_index", 1), {&x}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{1, 4}));
    EXPECT_EQ(run.outs[0].Values<int64_t>(),
              (std::vector<int64_t>{0, 1, 1, 0}));
    // select_last_index is read from opset 12 only
    ASSERT_OK(RunOp({"ArgMax", 11},
                    Attrs().Int("axis", 1).Int("select_last_index", 1), {&x},
                    &run));
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{1, 0}));
    Tensor i = I32({3}, {4, 9, 9});
    ASSERT_OK(
        RunOp({"ArgMax", 13}, Attrs().Int("select_last_index", 1), {&i}, &run));
    EXPECT_EQ(run.outs[0].Values<int64_t>(), (std::vector<int64_t>{2}));
    EXPECT_EQ(FailCode({"ArgMax", 13}, Attrs().Int("axis", 2), {&x}),
              OSP_ERROR_INVALID_ARG);
}

// ---- Softmax, LogSoftmax, Hardmax ------------------------------------------

std::vector<double> RefSoftmax(const std::vector<double> &x, int64_t outer,
                               int64_t n, int64_t inner, bool log) {
    std::vector<double> y(x.size());
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; j++)
                mx = std::max(mx, x[(o * n + j) * inner + i]);
            for (int64_t j = 0; j < n; j++)
                s += std::exp(x[(o * n + j) * inner + i] - mx);
            for (int64_t j = 0; j < n; j++) {
                double v = x[(o * n + j) * inner + i] - mx;
                y[(o * n + j) * inner + i] =
                    log ? v - std::log(s) : std::exp(v) / s;
            }
        }
    return y;
}

TEST(OnnxMathSoftmax, Opset11CoercesTo2DAndOpset13UsesOneAxis) {
    Tensor x = Rand({2, 3, 4}, 41);
    std::vector<double> xv = x.Doubles();
    for (bool log : {false, true}) {
        const char *op = log ? "LogSoftmax" : "Softmax";
        OpResult run;
        // opset 11, axis 1: over the 12 trailing values of each batch
        ASSERT_OK(RunOp({op, 11}, Attrs().Int("axis", 1), {&x}, &run));
        EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{2, 3, 4}));
        ExpectNear(RefSoftmax(xv, 2, 12, 1, log), run.outs[0], 1e-5, op);
        // opset 11 default axis is 1 as well
        ASSERT_OK(RunOp({op, 11}, Attrs(), {&x}, &run));
        ExpectNear(RefSoftmax(xv, 2, 12, 1, log), run.outs[0], 1e-5, op);
        // opset 13, axis 1: along that axis only
        ASSERT_OK(RunOp({op, 13}, Attrs().Int("axis", 1), {&x}, &run));
        ExpectNear(RefSoftmax(xv, 2, 3, 4, log), run.outs[0], 1e-5, op);
        // opset 13 default axis is -1
        ASSERT_OK(RunOp({op, 13}, Attrs(), {&x}, &run));
        ExpectNear(RefSoftmax(xv, 6, 4, 1, log), run.outs[0], 1e-5, op);
        // opset 1 axis 0: everything at once
        ASSERT_OK(RunOp({op, 7}, Attrs().Int("axis", 0), {&x}, &run));
        ExpectNear(RefSoftmax(xv, 1, 24, 1, log), run.outs[0], 1e-5, op);
    }
    Tensor i = I64({2}, {1, 2});
    EXPECT_EQ(FailCode({"Softmax", 13}, Attrs(), {&i}), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(FailCode({"Softmax", 13}, Attrs().Int("axis", 3), {&x}),
              OSP_ERROR_INVALID_ARG);
}

std::vector<double> RefHardmax(const std::vector<double> &x, int64_t outer,
                               int64_t n, int64_t inner) {
    std::vector<double> y(x.size(), 0.0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++)
                if (x[(o * n + j) * inner + i] > x[(o * n + best) * inner + i])
                    best = j;
            y[(o * n + best) * inner + i] = 1.0;
        }
    return y;
}

TEST(OnnxMathSoftmax, Hardmax) {
    Tensor x = Rand({2, 3, 4}, 51);
    std::vector<double> xv = x.Doubles();
    OpResult run;
    ASSERT_OK(RunOp({"Hardmax", 13}, Attrs().Int("axis", 1), {&x}, &run));
    ExpectNear(RefHardmax(xv, 2, 3, 4), run.outs[0]);
    ASSERT_OK(RunOp({"Hardmax", 13}, Attrs(), {&x}, &run));
    ExpectNear(RefHardmax(xv, 6, 4, 1), run.outs[0]);
    ASSERT_OK(RunOp({"Hardmax", 11}, Attrs().Int("axis", 1), {&x}, &run));
    ExpectNear(RefHardmax(xv, 2, 12, 1), run.outs[0]);
    // ties: the first
    Tensor t = F32({1, 4}, {3, 5, 5, 1});
    ASSERT_OK(RunOp({"Hardmax", 13}, Attrs(), {&t}, &run));
    ExpectNear({0, 1, 0, 0}, run.outs[0]);
}

// ---- TopK ------------------------------------------------------------------

TEST(OnnxMathTopK, LargestSmallestAxisAndOpsetForms) {
    Tensor x = F32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8});
    Tensor k = I64({1}, {3}, true);
    OpResult run;
    Call call{"TopK", 11, "", 2};
    ASSERT_OK(RunOp(call, Attrs(), {&x, &k}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{3, 3}));
    ExpectNear({3, 2, 1, 7, 6, 5, 11, 10, 9}, run.outs[0]);
    EXPECT_EQ(run.outs[1].Values<int64_t>(),
              (std::vector<int64_t>{3, 2, 1, 3, 2, 1, 0, 1, 2}));
    ASSERT_OK(
        RunOp(call, Attrs().Int("largest", 0).Int("axis", 0), {&x, &k}, &run));
    EXPECT_EQ(run.outs[0].Dims(), (std::vector<int64_t>{3, 4}));
    ExpectNear({0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8}, run.outs[0]);
    Tensor k2 = I64({1}, {2}, true);
    ASSERT_OK(
        RunOp(call, Attrs().Int("largest", 0).Int("axis", 0), {&x, &k2}, &run));
    ExpectNear({0, 1, 2, 3, 4, 5, 6, 7}, run.outs[0]);
    EXPECT_EQ(run.outs[1].Values<int64_t>(),
              (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
    // opset 1: k is an attribute
    Call v1{"TopK", 1, "", 2};
    ASSERT_OK(RunOp(v1, Attrs().Int("k", 1), {&x}, &run));
    ExpectNear({3, 7, 11}, run.outs[0]);
    EXPECT_EQ(run.outs[1].Values<int64_t>(), (std::vector<int64_t>{3, 3, 0}));
    // values omitted: they go to the workspace
    Call idx_only{"TopK", 11, "", 2, {false, true}};
    ASSERT_OK(RunOp(idx_only, Attrs(), {&x, &k2}, &run));
    EXPECT_EQ(run.outs[1].Values<int64_t>(),
              (std::vector<int64_t>{3, 2, 3, 2, 0, 1}));
    // k unknown, or too large
    Tensor unknown = I64({1}, {2}, false), big = I64({1}, {5}, true);
    EXPECT_EQ(FailCode(call, Attrs(), {&x, &unknown}), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode(call, Attrs(), {&x, &big}), OSP_ERROR_INVALID_ARG);
}

// ---- CumSum ----------------------------------------------------------------

TEST(OnnxMathCumSum, ExclusiveReverseAxis) {
    Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor ax1 = I64({}, {1}, true), ax0 = I32({1}, {-2}, true);
    OpResult run;
    ASSERT_OK(RunOp({"CumSum", 11}, Attrs(), {&x, &ax1}, &run));
    ExpectNear({1, 3, 6, 4, 9, 15}, run.outs[0]);
    ASSERT_OK(
        RunOp({"CumSum", 11}, Attrs().Int("exclusive", 1), {&x, &ax1}, &run));
    ExpectNear({0, 1, 3, 0, 4, 9}, run.outs[0]);
    ASSERT_OK(
        RunOp({"CumSum", 14}, Attrs().Int("reverse", 1), {&x, &ax1}, &run));
    ExpectNear({6, 5, 3, 15, 11, 6}, run.outs[0]);
    ASSERT_OK(RunOp({"CumSum", 14},
                    Attrs().Int("reverse", 1).Int("exclusive", 1), {&x, &ax1},
                    &run));
    ExpectNear({5, 3, 0, 11, 6, 0}, run.outs[0]);
    ASSERT_OK(RunOp({"CumSum", 14}, Attrs(), {&x, &ax0}, &run));
    ExpectNear({1, 2, 3, 5, 7, 9}, run.outs[0]);
    Tensor xi = I32({4}, {1, 2, 3, 4}), a0 = I64({}, {0}, true);
    ASSERT_OK(RunOp({"CumSum", 14}, Attrs(), {&xi, &a0}, &run));
    EXPECT_EQ(run.outs[0].Values<int32_t>(),
              (std::vector<int32_t>{1, 3, 6, 10}));
    Tensor unknown = I64({}, {0}, false);
    EXPECT_EQ(FailCode({"CumSum", 14}, Attrs(), {&x, &unknown}),
              OSP_ERROR_INVALID_ARG);
}

} // namespace

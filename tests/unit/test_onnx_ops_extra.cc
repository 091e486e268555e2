// backends/onnx/onnx_ops_extra.c and its files (onnx_ops_loss.c,
// onnx_ops_quant.c, onnx_ops_index.c): each op built on a hand-made node,
// inferred on host descs and run on the CPU device, its outputs checked
// against references computed here (or against ONNX's documented
// examples).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "onnx_ops.h"
#include "osp_test.h"
#include "osprey/device.h"

extern "C" const onnx_op_family onnx_ops_extra_family;

namespace {

// ASSERT_OK with what was being run in the failure message.
#define ASSERT_OK_AT(expr, what)                                               \
    do {                                                                       \
        osp_error *err_ = (expr);                                              \
        if (err_ != nullptr)                                                   \
            FAIL() << (what) << ": " << TakeMessage(err_);                     \
    } while (0)

// ---- harness ---------------------------------------------------------------

struct Tensor {
    osp_datatype dtype = OSP_TYPE_INVALID;
    osp_shape shape{};
    std::vector<uint8_t> bytes;
    bool known = false; // the op sees its host values at infer

    int64_t Count() const {
        int64_t n = 1;
        for (int i = 0; i < shape.rank; i++)
            n *= shape.dims[i];
        return n;
    }
    template <typename T> std::vector<T> Values() const {
        std::vector<T> v(bytes.size() / sizeof(T));
        if (!v.empty())
            memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
        return v;
    }
    std::vector<double> Doubles() const {
        std::vector<double> out;
        if (dtype == OSP_TYPE_FP32)
            for (float f : Values<float>())
                out.push_back(f);
        else if (dtype == OSP_TYPE_INT64)
            for (int64_t v : Values<int64_t>())
                out.push_back((double)v);
        else if (dtype == OSP_TYPE_INT32)
            for (int32_t v : Values<int32_t>())
                out.push_back(v);
        else if (dtype == OSP_TYPE_FP64)
            for (double v : Values<double>())
                out.push_back(v);
        else if (dtype == OSP_TYPE_UINT8 || dtype == OSP_TYPE_BOOL)
            for (uint8_t v : Values<uint8_t>())
                out.push_back(v);
        else if (dtype == OSP_TYPE_INT8)
            for (int8_t v : Values<int8_t>())
                out.push_back(v);
        return out;
    }
    std::vector<int64_t> Dims() const {
        return std::vector<int64_t>(shape.dims, shape.dims + shape.rank);
    }
};

osp_shape Shape(const std::vector<int64_t> &dims) {
    osp_shape s{};
    s.rank = (int)dims.size();
    for (size_t i = 0; i < dims.size(); i++)
        s.dims[i] = dims[i];
    return s;
}

int64_t CountOf(const std::vector<int64_t> &dims) {
    int64_t n = 1;
    for (int64_t d : dims)
        n *= d;
    return n;
}

template <typename T>
Tensor Make(osp_datatype dt, const std::vector<int64_t> &dims,
            const std::vector<T> &vals, bool known = false) {
    Tensor t;
    t.dtype = dt;
    t.shape = Shape(dims);
    t.known = known;
    t.bytes.resize(vals.size() * sizeof(T));
    if (!vals.empty())
        memcpy(t.bytes.data(), vals.data(), t.bytes.size());
    EXPECT_EQ((int64_t)vals.size(), t.Count());
    return t;
}

Tensor F32(const std::vector<int64_t> &d, const std::vector<float> &v) {
    return Make<float>(OSP_TYPE_FP32, d, v);
}
Tensor I32(const std::vector<int64_t> &d, const std::vector<int32_t> &v,
           bool known = false) {
    return Make<int32_t>(OSP_TYPE_INT32, d, v, known);
}
Tensor I64(const std::vector<int64_t> &d, const std::vector<int64_t> &v,
           bool known = false) {
    return Make<int64_t>(OSP_TYPE_INT64, d, v, known);
}

// FP32 values in [-2, 2) on a 1/8 grid (exact in float; products and
// short sums stay exact too), from a fixed seed.
Tensor Rand(const std::vector<int64_t> &dims, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(-16, 15);
    std::vector<float> v((size_t)CountOf(dims));
    for (float &f : v)
        f = (float)dist(gen) / 8.0f;
    return F32(dims, v);
}

struct Attrs {
    std::vector<onnx_attr> list;
    std::vector<std::vector<int64_t>> ints;
    std::vector<std::vector<float>> floats;
    std::vector<std::string> strings;

    Attrs &Int(const char *name, int64_t v) {
        onnx_attr a{};
        a.name = const_cast<char *>(name);
        a.type = ONNX_ATTR_INT;
        a.i = v;
        list.push_back(a);
        return *this;
    }
    Attrs &Float(const char *name, float v) {
        onnx_attr a{};
        a.name = const_cast<char *>(name);
        a.type = ONNX_ATTR_FLOAT;
        a.f = v;
        list.push_back(a);
        return *this;
    }
    Attrs &Ints(const char *name, std::vector<int64_t> v) {
        ints.reserve(16);
        ints.push_back(std::move(v));
        onnx_attr a{};
        a.name = const_cast<char *>(name);
        a.type = ONNX_ATTR_INTS;
        a.ints = ints.back().data();
        a.n = ints.back().size();
        list.push_back(a);
        return *this;
    }
    Attrs &Floats(const char *name, std::vector<float> v) {
        floats.reserve(16);
        floats.push_back(std::move(v));
        onnx_attr a{};
        a.name = const_cast<char *>(name);
        a.type = ONNX_ATTR_FLOATS;
        a.floats = floats.back().data();
        a.n = floats.back().size();
        list.push_back(a);
        return *this;
    }
    Attrs &String(const char *name, const std::string &v) {
        strings.reserve(16);
        strings.push_back(v);
        onnx_attr a{};
        a.name = const_cast<char *>(name);
        a.type = ONNX_ATTR_STRING;
        a.s = const_cast<char *>(strings.back().c_str());
        a.s_len = v.size();
        list.push_back(a);
        return *this;
    }
};

// The entry of the extra family serving (domain, op_type, opset), as
// onnx_op_find picks it.
const onnx_op *Find(const char *domain, const char *op_type, int64_t opset) {
    const onnx_op_family *fam = &onnx_ops_extra_family;
    for (size_t i = 0; i < fam->n_ops; i++) {
        const onnx_op *op = &fam->ops[i];
        if (strcmp(op->op_type, op_type) == 0 &&
            strcmp(op->domain, domain) == 0 && opset >= op->since &&
            (op->until == 0 || opset <= op->until))
            return op;
    }
    return nullptr;
}

struct OpResult {
    std::vector<Tensor> outs;
    size_t workspace = 0;
};

struct Call {
    Call(const char *op_type_, int64_t opset_ = 13, const char *domain_ = "",
         size_t n_outputs_ = 1, std::vector<bool> outputs_present_ = {})
        : op_type(op_type_), opset(opset_), domain(domain_),
          n_outputs(n_outputs_), outputs_present(std::move(outputs_present_)) {}
    const char *op_type;
    int64_t opset;
    const char *domain;
    size_t n_outputs;
    std::vector<bool> outputs_present; // default: all
};

// prepare, infer, run and free of the call's op on `ins` (nullptr for an
// omitted input) on the CPU device. The error of the first step that
// fails, else NULL with *run filled.
osp_error *RunOp(const Call &call, const Attrs &attrs,
                 const std::vector<const Tensor *> &ins, OpResult *run) {
    const onnx_op *op = Find(call.domain, call.op_type, call.opset);
    if (!op)
        return osp_error_new(OSP_ERROR_NOT_FOUND, "no op %s at opset %lld",
                             call.op_type, (long long)call.opset);
    for (int i = 0; i < 8 && op->uses[i] != OSP_OP_KIND_COUNT_ &&
                    op->uses[i] != OSP_OP_NONE;
         i++)
        EXPECT_TRUE(osp_device_supports_op(osp_device_cpu(), op->uses[i]))
            << osp_op_kind_name(op->uses[i]);
    size_t n_out = call.n_outputs;
    std::vector<bool> present = call.outputs_present;
    present.resize(n_out, true);
    std::vector<std::string> in_names, out_names;
    for (size_t i = 0; i < ins.size(); i++)
        in_names.push_back(ins[i] ? "x" + std::to_string(i) : "");
    for (size_t i = 0; i < n_out; i++)
        out_names.push_back(present[i] ? "y" + std::to_string(i) : "");
    std::vector<char *> in_ptrs, out_ptrs;
    for (auto &s : in_names)
        in_ptrs.push_back(const_cast<char *>(s.c_str()));
    for (auto &s : out_names)
        out_ptrs.push_back(const_cast<char *>(s.c_str()));
    std::vector<onnx_attr> attr_list = attrs.list;
    onnx_node node{};
    node.name = const_cast<char *>("the_node");
    node.op_type = const_cast<char *>(call.op_type);
    node.domain = const_cast<char *>(call.domain);
    node.opset = call.opset;
    node.inputs = in_ptrs.data();
    node.n_inputs = in_ptrs.size();
    node.outputs = out_ptrs.data();
    node.n_outputs = out_ptrs.size();
    node.attrs = attr_list.data();
    node.n_attrs = attr_list.size();

    void *state = nullptr;
    osp_error *err = nullptr;
    osp_stream *stream = nullptr;
    void *ws = nullptr;
    std::vector<onnx_desc> in_desc(ins.size()), out_desc(n_out);
    std::vector<const void *> in_mem(ins.size());
    std::vector<void *> out_mem(n_out);
    onnx_infer_ctx ictx{};
    onnx_run_ctx rctx{};

    if (op->prepare && (err = op->prepare(&node, &state)))
        goto out;
    for (size_t i = 0; i < ins.size(); i++) {
        if (!ins[i])
            continue;
        in_desc[i].present = true;
        in_desc[i].dtype = ins[i]->dtype;
        in_desc[i].shape = ins[i]->shape;
        in_desc[i].host = ins[i]->known ? ins[i]->bytes.data() : nullptr;
        in_mem[i] = ins[i]->bytes.data();
    }
    for (size_t i = 0; i < n_out; i++)
        out_desc[i].present = present[i];
    ictx.node = &node;
    ictx.state = state;
    ictx.n_inputs = in_desc.size();
    ictx.inputs = in_desc.data();
    ictx.n_outputs = out_desc.size();
    ictx.outputs = out_desc.data();
    if ((err = op->infer(&ictx)))
        goto out;
    run->outs.assign(n_out, Tensor());
    for (size_t i = 0; i < n_out; i++) {
        if (!present[i])
            continue;
        Tensor &t = run->outs[i];
        t.dtype = out_desc[i].dtype;
        t.shape = out_desc[i].shape;
        // a canary value so that unwritten outputs show
        t.bytes.assign((size_t)t.Count() * osp_datatype_byte_size(t.dtype),
                       0xAB);
        out_mem[i] = t.bytes.data();
    }
    run->workspace = ictx.workspace_bytes;
    ws = aligned_alloc(64, ((ictx.workspace_bytes + 63) / 64 + 1) * 64);
    if ((err = osp_stream_new(osp_device_cpu(), &stream)))
        goto out;
    rctx.stream = stream;
    rctx.node = &node;
    rctx.state = state;
    rctx.n_inputs = in_desc.size();
    rctx.in_desc = in_desc.data();
    rctx.in = in_mem.data();
    rctx.n_outputs = out_desc.size();
    rctx.out_desc = out_desc.data();
    rctx.out = out_mem.data();
    rctx.workspace = ws;
    if ((err = op->run(&rctx)))
        goto out;
    err = osp_stream_synchronize(stream);
out:
    osp_stream_free(stream);
    free(ws);
    if (op->free)
        op->free(state);
    return err;
}

// The error code of a call expected to fail (and its message in *msg).
osp_error_code FailCode(const Call &call, const Attrs &attrs,
                        const std::vector<const Tensor *> &ins,
                        std::string *msg = nullptr) {
    OpResult run;
    osp_error *err = RunOp(call, attrs, ins, &run);
    EXPECT_NE(err, nullptr) << call.op_type << " was expected to fail";
    if (!err)
        return OSP_ERROR_UNKNOWN;
    osp_error_code code = osp_error_get_code(err);
    std::string m = TakeMessage(err);
    if (msg)
        *msg = m;
    return code;
}

void ExpectNear(const std::vector<double> &want, const Tensor &got,
                double tol = 1e-4, const std::string &what = "") {
    std::vector<double> g = got.Doubles();
    ASSERT_EQ(want.size(), g.size()) << what;
    for (size_t i = 0; i < want.size(); i++) {
        if (std::isinf(want[i])) {
            EXPECT_EQ(want[i], g[i]) << what << " at " << i;
            continue;
        }
        EXPECT_NEAR(want[i], g[i], tol * std::max(1.0, std::fabs(want[i])))
            << what << " at " << i;
    }
}

Tensor Known(Tensor t) {
    t.known = true;
    return t;
}

Tensor U8(const std::vector<int64_t> &d, const std::vector<uint8_t> &v) {
    return Make<uint8_t>(OSP_TYPE_UINT8, d, v);
}
Tensor S8(const std::vector<int64_t> &d, const std::vector<int8_t> &v) {
    return Make<int8_t>(OSP_TYPE_INT8, d, v);
}
Tensor Bool(const std::vector<int64_t> &d, const std::vector<uint8_t> &v,
            bool known = false) {
    return Make<uint8_t>(OSP_TYPE_BOOL, d, v, known);
}

// Runs the call, expecting success; the outputs.
std::vector<Tensor> RunOk(const Call &call, const Attrs &attrs,
                          const std::vector<const Tensor *> &ins) {
    OpResult r;
    osp_error *err = RunOp(call, attrs, ins, &r);
    EXPECT_EQ(err, nullptr) << call.op_type << ": " << TakeMessage(err);
    return r.outs;
}

std::vector<double> D(std::initializer_list<double> v) {
    return std::vector<double>(v);
}

// ---- Shrink
// ------------------------------------------------------------------

TEST(OnnxExtraShrink, HardAndSoft) {
    Tensor x = F32({5}, {-2, -1, 0, 1, 2});
    auto hard = RunOk(Call("Shrink", 9), Attrs().Float("lambd", 1.5f), {&x});
    ASSERT_EQ(hard.size(), 1u);
    ExpectNear(D({-2, 0, 0, 0, 2}), hard[0]);
    auto soft = RunOk(Call("Shrink", 9),
                      Attrs().Float("lambd", 1.5f).Float("bias", 1.5f), {&x});
    ExpectNear(D({-0.5, 0, 0, 0, 0.5}), soft[0]);
    // defaults: lambd 0.5, bias 0
    Tensor y = F32({4}, {-0.5f, -0.6f, 0.5f, 0.7f});
    auto dflt = RunOk(Call("Shrink", 9), Attrs(), {&y});
    ExpectNear(D({0, -0.6, 0, 0.7}), dflt[0], 1e-6);
    Tensor i = I32({1}, {1});
    EXPECT_EQ(FailCode(Call("Shrink", 9), Attrs(), {&i}),
              OSP_ERROR_UNSUPPORTED);
}

// ---- MeanVarianceNormalization
// -----------------------------------------------

std::vector<double> RefMvn(const Tensor &x, const std::vector<int64_t> &axes) {
    std::vector<int64_t> dims = x.Dims();
    std::vector<double> v = x.Doubles(), out(v.size());
    std::vector<bool> red(dims.size(), false);
    for (int64_t a : axes)
        red[(size_t)(a < 0 ? a + (int64_t)dims.size() : a)] = true;
    // group elements by their kept coordinates
    std::map<std::vector<int64_t>, std::vector<size_t>> groups;
    for (size_t f = 0; f < v.size(); f++) {
        std::vector<int64_t> idx(dims.size());
        int64_t r = (int64_t)f;
        for (int d = (int)dims.size() - 1; d >= 0; d--) {
            idx[d] = red[d] ? 0 : r % dims[d];
            r /= dims[d];
        }
        groups[idx].push_back(f);
    }
    for (auto &g : groups) {
        double mean = 0, sq = 0;
        for (size_t f : g.second) {
            mean += v[f];
            sq += v[f] * v[f];
        }
        mean /= (double)g.second.size();
        sq /= (double)g.second.size();
        double sd = std::sqrt(std::max(sq - mean * mean, 0.0));
        for (size_t f : g.second)
            out[f] = (v[f] - mean) / (sd + 1e-9);
    }
    return out;
}

TEST(OnnxExtraMvn, DefaultAxesAndExplicitOnes) {
    Tensor x = Rand({2, 3, 2, 2}, 7);
    auto dflt = RunOk(Call("MeanVarianceNormalization", 13), Attrs(), {&x});
    ExpectNear(RefMvn(x, {0, 2, 3}), dflt[0], 1e-4);
    // reduced axes already last: no transposition
    auto last = RunOk(Call("MeanVarianceNormalization", 9),
                      Attrs().Ints("axes", {2, 3}), {&x});
    ExpectNear(RefMvn(x, {2, 3}), last[0], 1e-4);
    auto mid = RunOk(Call("MeanVarianceNormalization", 13),
                     Attrs().Ints("axes", {1, -1}), {&x});
    ExpectNear(RefMvn(x, {1, 3}), mid[0], 1e-4);
    // constant groups normalise to 0, not NaN
    Tensor c = F32({1, 2, 1, 2}, {3, 3, 5, 5});
    auto zero = RunOk(Call("MeanVarianceNormalization", 13),
                      Attrs().Ints("axes", {0, 2, 3}), {&c});
    ExpectNear(D({0, 0, 0, 0}), zero[0], 1e-6);
    Tensor r3 = Rand({2, 3, 4}, 1);
    EXPECT_EQ(FailCode(Call("MeanVarianceNormalization", 13), Attrs(), {&r3}),
              OSP_ERROR_INVALID_ARG); // axis 3 of a rank-3 input
}

// ---- windows
// -------------------------------------------------------------------

std::vector<double> RefWindow(const std::string &kind, int64_t size,
                              bool periodic) {
    std::vector<double> w;
    double n_1 = periodic ? (double)size : (double)(size - 1);
    for (int64_t n = 0; n < size; n++) {
        double a = 2 * M_PI * (double)n / n_1;
        if (kind == "HannWindow")
            w.push_back(std::pow(std::sin(M_PI * (double)n / n_1), 2));
        else if (kind == "HammingWindow")
            w.push_back(25.0 / 46.0 - (21.0 / 46.0) * std::cos(a));
        else
            w.push_back(0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a));
    }
    return w;
}

TEST(OnnxExtraWindow, PeriodicSymmetricAndDtype) {
    Tensor size = Known(I32({}, {10}));
    for (const char *kind : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
        auto per = RunOk(Call(kind, 17), Attrs(), {&size});
        ASSERT_EQ(per[0].dtype, OSP_TYPE_FP32);
        ASSERT_EQ(per[0].Dims(), (std::vector<int64_t>{10}));
        ExpectNear(RefWindow(kind, 10, true), per[0], 1e-5, kind);
        auto sym = RunOk(Call(kind, 17), Attrs().Int("periodic", 0), {&size});
        ExpectNear(RefWindow(kind, 10, false), sym[0], 1e-5, kind);
        auto dbl =
            RunOk(Call(kind, 17), Attrs().Int("output_datatype", 11), {&size});
        ASSERT_EQ(dbl[0].dtype, OSP_TYPE_FP64);
        ExpectNear(RefWindow(kind, 10, true), dbl[0], 1e-5, kind);
    }
    Tensor zero = Known(I64({}, {0}));
    auto empty = RunOk(Call("HannWindow", 17), Attrs(), {&zero});
    EXPECT_EQ(empty[0].Count(), 0);
    Tensor unknown = I64({}, {4});
    EXPECT_EQ(FailCode(Call("HannWindow", 17), Attrs(), {&unknown}),
              OSP_ERROR_INVALID_ARG);
}

// ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss --------------------

struct LossCase {
    std::string reduction = "mean";
    bool has_ii = false;
    int64_t ii = 0;
    bool weighted = false;
};

// ONNX's reference for NLL (with onnxruntime's mean over the weights of
// the targets not ignored when there is an ignore_index and no weight).
std::vector<double> RefNll(const std::vector<double> &x,
                           const std::vector<int64_t> &xd,
                           const std::vector<int64_t> &t,
                           const std::vector<double> &w, const LossCase &c) {
    int64_t n = xd[0], cls = xd[1], d = 1;
    for (size_t i = 2; i < xd.size(); i++)
        d *= xd[i];
    std::vector<double> loss((size_t)(n * d));
    double wsum = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) {
            int64_t tg = t[(size_t)(i * d + j)];
            double wt = 0;
            if (!(c.has_ii && tg == c.ii)) {
                wt = c.weighted ? w[(size_t)tg] : 1.0;
                loss[(size_t)(i * d + j)] =
                    -x[(size_t)((i * cls + tg) * d + j)] * wt;
            }
            wsum += wt;
        }
    if (c.reduction == "none")
        return loss;
    double s = 0;
    for (double v : loss)
        s += v;
    if (c.reduction == "sum")
        return {s};
    return {s / wsum};
}

std::vector<double> LogSoftmax(const std::vector<double> &x,
                               const std::vector<int64_t> &xd) {
    int64_t n = xd[0], cls = xd[1], d = 1;
    for (size_t i = 2; i < xd.size(); i++)
        d *= xd[i];
    std::vector<double> out(x.size());
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) {
            double mx = -1e300, s = 0;
            for (int64_t k = 0; k < cls; k++)
                mx = std::max(mx, x[(size_t)((i * cls + k) * d + j)]);
            for (int64_t k = 0; k < cls; k++)
                s += std::exp(x[(size_t)((i * cls + k) * d + j)] - mx);
            for (int64_t k = 0; k < cls; k++)
                out[(size_t)((i * cls + k) * d + j)] =
                    x[(size_t)((i * cls + k) * d + j)] - mx - std::log(s);
        }
    return out;
}

void CheckLoss(bool sce, const std::vector<int64_t> &xd, const LossCase &c,
               bool int32_target = false, bool log_prob = false) {
    Tensor x = Rand(xd, 11);
    std::vector<int64_t> td = {xd[0]};
    for (size_t i = 2; i < xd.size(); i++)
        td.push_back(xd[i]);
    std::mt19937 gen(5);
    std::uniform_int_distribution<int64_t> pick(0, xd[1] - 1);
    std::vector<int64_t> t((size_t)CountOf(td));
    for (size_t i = 0; i < t.size(); i++)
        t[i] = (c.has_ii && i % 3 == 0) ? c.ii : pick(gen);
    std::vector<int32_t> t32(t.begin(), t.end());
    Tensor target = int32_target ? I32(td, t32) : I64(td, t);
    std::vector<float> wv;
    for (int64_t k = 0; k < xd[1]; k++)
        wv.push_back(0.25f + 0.125f * (float)k);
    Tensor w = F32({xd[1]}, wv);
    Attrs a;
    a.String("reduction", c.reduction);
    if (c.has_ii)
        a.Int("ignore_index", c.ii);
    std::vector<const Tensor *> ins = {&x, &target};
    if (c.weighted)
        ins.push_back(&w);
    std::vector<double> xs = x.Doubles();
    std::vector<double> lp = sce ? LogSoftmax(xs, xd) : xs;
    std::vector<double> wd(wv.begin(), wv.end());
    std::string what = std::string(sce ? "SCE" : "NLL") + " " + c.reduction +
                       (c.has_ii ? " ii=" + std::to_string(c.ii) : "") +
                       (c.weighted ? " weighted" : "");
    Call call(sce ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 13,
              "", log_prob ? 2 : 1);
    auto out = RunOk(call, a, ins);
    ASSERT_EQ(out.size(), log_prob ? 2u : 1u);
    ExpectNear(RefNll(lp, xd, t, wd, c), out[0], 1e-5, what);
    if (c.reduction == "none")
        EXPECT_EQ(out[0].Dims(), td);
    else
        EXPECT_EQ(out[0].shape.rank, 0);
    if (log_prob)
        ExpectNear(lp, out[1], 1e-5, what + " log_prob");
}

TEST(OnnxExtraLoss, NllReductionsWeightsAndIgnoreIndex) {
    for (const char *red : {"none", "sum", "mean"})
        for (bool weighted : {false, true})
            for (int ii : {0, 1, 2}) {
                LossCase c;
                c.reduction = red;
                c.weighted = weighted;
                c.has_ii = ii != 0;
                c.ii = ii == 1 ? 1 : -3; // in range, or never a class
                CheckLoss(false, {3, 5}, c);
                CheckLoss(false, {2, 4, 3, 2}, c);
            }
}

TEST(OnnxExtraLoss, NllInt32TargetsAndOutOfRangeIgnoreIndex) {
    LossCase c;
    c.has_ii = true;
    c.ii = 10; // not a class: the ignored targets must not be read
    c.weighted = true;
    c.reduction = "sum";
    CheckLoss(false, {3, 5, 2}, c, true);
    c.reduction = "mean";
    CheckLoss(false, {3, 5, 2}, c, false);
}

TEST(OnnxExtraLoss, SoftmaxCrossEntropyWithLogProb) {
    for (const char *red : {"none", "sum", "mean"})
        for (bool weighted : {false, true}) {
            LossCase c;
            c.reduction = red;
            c.weighted = weighted;
            CheckLoss(true, {3, 5}, c, false, true);
            c.has_ii = true;
            c.ii = 2;
            CheckLoss(true, {2, 5, 2, 3}, c, false, red[0] == 'm');
        }
}

TEST(OnnxExtraLoss, BadShapesAndAttributes) {
    Tensor x = Rand({3, 5}, 1);
    Tensor t = I64({2}, {0, 1});
    EXPECT_EQ(
        FailCode(Call("NegativeLogLikelihoodLoss", 13), Attrs(), {&x, &t}),
        OSP_ERROR_INVALID_ARG);
    Tensor t3 = I64({3}, {0, 1, 2});
    EXPECT_EQ(FailCode(Call("NegativeLogLikelihoodLoss", 13),
                       Attrs().String("reduction", "max"), {&x, &t3}),
              OSP_ERROR_UNSUPPORTED);
    Tensor w = F32({4}, {1, 1, 1, 1});
    EXPECT_EQ(
        FailCode(Call("NegativeLogLikelihoodLoss", 13), Attrs(), {&x, &t3, &w}),
        OSP_ERROR_INVALID_ARG);
    // known targets must be classes or the ignore_index
    Tensor out_of_range = Known(I64({3}, {0, 5, 1}));
    EXPECT_EQ(FailCode(Call("NegativeLogLikelihoodLoss", 13), Attrs(),
                       {&x, &out_of_range}),
              OSP_ERROR_INVALID_ARG);
    Tensor ignored = Known(I64({3}, {0, -1, 1}));
    auto ok = RunOk(Call("NegativeLogLikelihoodLoss", 13),
                    Attrs().Int("ignore_index", -1), {&x, &ignored});
    std::vector<double> xs = x.Doubles();
    ExpectNear({-(xs[0] + xs[11]) / 2}, ok[0], 1e-5);
}

// ---- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ----------------

TEST(OnnxExtraQuant, QuantizeSaturatesAndRoundsHalfToEven) {
    Tensor x = F32({8}, {0, 2, 3, 1000, -254, -1000, 1, 5});
    Tensor scale = F32({}, {2});
    Tensor zp = U8({}, {128});
    auto q = RunOk(Call("QuantizeLinear", 13), Attrs(), {&x, &scale, &zp});
    ASSERT_EQ(q[0].dtype, OSP_TYPE_UINT8);
    // 3/2 = 1.5 -> 2, 1/2 = 0.5 -> 0, 5/2 = 2.5 -> 2
    ExpectNear(D({128, 129, 130, 255, 1, 0, 128, 130}), q[0], 0);
    Tensor zs = S8({}, {-1});
    auto s = RunOk(Call("QuantizeLinear", 10), Attrs(), {&x, &scale, &zs});
    ASSERT_EQ(s[0].dtype, OSP_TYPE_INT8);
    ExpectNear(D({-1, 0, 1, 127, -128, -128, -1, 1}), s[0], 0);
    // no zero point: UINT8 around 0
    auto u = RunOk(Call("QuantizeLinear", 13), Attrs(), {&x, &scale});
    ExpectNear(D({0, 1, 2, 255, 0, 0, 0, 2}), u[0], 0);
}

TEST(OnnxExtraQuant, PerAxis) {
    Tensor x = F32({1, 3, 2}, {-162, 10, -100, 232, -20, -50});
    Tensor scale = F32({3}, {2, 4, 5});
    Tensor zp = U8({3}, {84, 24, 196});
    auto q = RunOk(Call("QuantizeLinear", 13), Attrs(), {&x, &scale, &zp});
    ExpectNear(D({3, 89, 0, 82, 192, 186}), q[0], 0);
    Tensor xq = U8({1, 3, 2}, {3, 89, 34, 200, 74, 59});
    auto d = RunOk(Call("DequantizeLinear", 13), Attrs(), {&xq, &scale, &zp});
    ExpectNear(D({-162, 10, 40, 704, -610, -685}), d[0], 1e-6);
    Tensor x2 = F32({2, 2}, {1, 2, 3, 4});
    Tensor s2 = F32({2}, {1, 2});
    auto a0 =
        RunOk(Call("QuantizeLinear", 13), Attrs().Int("axis", 0), {&x2, &s2});
    ExpectNear(D({1, 2, 2, 2}), a0[0], 0);
    Tensor bad = F32({3}, {1, 2, 3});
    EXPECT_EQ(FailCode(Call("QuantizeLinear", 13), Attrs(), {&x2, &bad}),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(FailCode(Call("QuantizeLinear", 10), Attrs(), {&x2, &s2}),
              OSP_ERROR_INVALID_ARG); // per axis needs opset 13
}

TEST(OnnxExtraQuant, Dequantize) {
    Tensor x = U8({4}, {0, 3, 128, 255});
    Tensor scale = F32({}, {2});
    Tensor zp = U8({}, {128});
    auto d = RunOk(Call("DequantizeLinear", 13), Attrs(), {&x, &scale, &zp});
    ExpectNear(D({-256, -250, 0, 254}), d[0], 1e-6);
    Tensor i32 = I32({3}, {-5, 0, 7});
    auto di = RunOk(Call("DequantizeLinear", 10), Attrs(), {&i32, &scale});
    ExpectNear(D({-10, 0, 14}), di[0], 1e-6);
    Tensor zs = S8({}, {1});
    EXPECT_EQ(
        FailCode(Call("DequantizeLinear", 13), Attrs(), {&x, &scale, &zs}),
        OSP_ERROR_INVALID_ARG);
}

void RefDynamicQuantize(const std::vector<float> &x, std::vector<double> *y,
                        double *scale, double *zp) {
    float mn = 0, mx = 0;
    for (float v : x) {
        mn = std::min(mn, v);
        mx = std::max(mx, v);
    }
    float s = (mx - mn) / 255.0f;
    float z = std::nearbyint(std::min(255.0f, std::max(0.0f, 0.0f - mn / s)));
    y->clear();
    for (float v : x)
        y->push_back(
            std::min(255.0f, std::max(0.0f, std::nearbyint(v / s) + z)));
    *scale = s;
    *zp = z;
}

TEST(OnnxExtraQuant, DynamicQuantize) {
    for (std::vector<float> xs :
         {std::vector<float>{0, 2, -3, -2.5f, 1.34f, 0.5f},
          std::vector<float>{-1, -2.1f, -1.3f, -2.5f, -3.34f, -4},
          std::vector<float>{1, 2.1f, 1.3f, 2.5f, 3.34f, 4, 1.5f, 2.6f, 3.9f, 4,
                             3, 2.345f}}) {
        Tensor x = F32({(int64_t)xs.size()}, xs);
        auto out =
            RunOk(Call("DynamicQuantizeLinear", 11, "", 3), Attrs(), {&x});
        ASSERT_EQ(out.size(), 3u);
        std::vector<double> y;
        double scale, zp;
        RefDynamicQuantize(xs, &y, &scale, &zp);
        EXPECT_EQ(out[0].dtype, OSP_TYPE_UINT8);
        ExpectNear(y, out[0], 0);
        ExpectNear({scale}, out[1], 1e-6);
        ExpectNear({zp}, out[2], 0);
    }
}

// ---- OneHot
// ------------------------------------------------------------------

TEST(OnnxExtraOneHot, AxesNegativeIndicesAndOpset9) {
    Tensor idx = I64({3}, {0, -7, -8});
    Tensor depth = Known(F32({}, {10}));
    Tensor values = F32({2}, {1, 3});
    auto v11 = RunOk(Call("OneHot", 11), Attrs().Int("axis", 1),
                     {&idx, &depth, &values});
    ASSERT_EQ(v11[0].Dims(), (std::vector<int64_t>{3, 10}));
    std::vector<double> want(30, 1);
    want[0] = 3;
    want[10 + 3] = 3;
    want[20 + 2] = 3;
    ExpectNear(want, v11[0], 0);
    // opset 9: negative indices are out of range, all off
    auto v9 = RunOk(Call("OneHot", 9), Attrs(), {&idx, &depth, &values});
    std::vector<double> want9(30, 1);
    want9[0] = 3;
    ExpectNear(want9, v9[0], 0);

    Tensor fidx = F32({2, 2}, {1, 9, 2, 4});
    for (int64_t axis : {1, -2}) {
        auto o = RunOk(Call("OneHot", 11), Attrs().Int("axis", axis),
                       {&fidx, &depth, &values});
        ASSERT_EQ(o[0].Dims(), (std::vector<int64_t>{2, 10, 2}));
        std::vector<double> w(40, 1);
        w[1 * 2 + 0] = 3;      // [0, 1, 0]
        w[9 * 2 + 1] = 3;      // [0, 9, 1]
        w[20 + 2 * 2 + 0] = 3; // [1, 2, 0]
        w[20 + 4 * 2 + 1] = 3; // [1, 4, 1]
        ExpectNear(w, o[0], 0);
    }
    Tensor idx2 = I64({3}, {0, 7, 8});
    Tensor depth12 = Known(F32({}, {12}));
    Tensor ivalues = I32({2}, {2, 5});
    auto oi = RunOk(Call("OneHot", 11), Attrs(), {&idx2, &depth12, &ivalues});
    ASSERT_EQ(oi[0].dtype, OSP_TYPE_INT32);
    std::vector<double> wi(36, 2);
    wi[0] = 5;
    wi[12 + 7] = 5;
    wi[24 + 8] = 5;
    ExpectNear(wi, oi[0], 0);
    Tensor unknown_depth = F32({}, {10});
    EXPECT_EQ(
        FailCode(Call("OneHot", 11), Attrs(), {&idx, &unknown_depth, &values}),
        OSP_ERROR_INVALID_ARG);
}

// ---- ReverseSequence
// ---------------------------------------------------------

TEST(OnnxExtraReverseSequence, TimeAndBatchMajor) {
    std::vector<float> v(16);
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    Tensor x = F32({4, 4}, v);
    Tensor lens = I64({4}, {4, 3, 2, 1});
    auto t =
        RunOk(Call("ReverseSequence", 10),
              Attrs().Int("time_axis", 0).Int("batch_axis", 1), {&x, &lens});
    ExpectNear(D({12, 9, 6, 3, 8, 5, 2, 7, 4, 1, 10, 11, 0, 13, 14, 15}), t[0],
               0);
    Tensor lens2 = I32({4}, {1, 2, 3, 4});
    auto b =
        RunOk(Call("ReverseSequence", 10),
              Attrs().Int("time_axis", 1).Int("batch_axis", 0), {&x, &lens2});
    ExpectNear(D({0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12}), b[0],
               0);
    // trailing dims move as rows
    Tensor x3 = F32({3, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    Tensor l3 = I64({2}, {3, 2});
    auto r3 = RunOk(Call("ReverseSequence", 10), Attrs(), {&x3, &l3});
    ExpectNear(D({8, 9, 6, 7, 4, 5, 2, 3, 0, 1, 10, 11}), r3[0], 0);
    Tensor bad = Known(I64({4}, {5, 1, 1, 1}));
    EXPECT_EQ(FailCode(Call("ReverseSequence", 10), Attrs(), {&x, &bad}),
              OSP_ERROR_INVALID_ARG);
}

// ---- GatherND, ScatterND
// -----------------------------------------------------

TEST(OnnxExtraGatherNd, SpecExamples) {
    Tensor d2 = I32({2, 2}, {0, 1, 2, 3});
    Tensor i1 = I64({2, 2}, {0, 0, 1, 1});
    auto e1 = RunOk(Call("GatherND", 13), Attrs(), {&d2, &i1});
    ExpectNear(D({0, 3}), e1[0], 0);
    Tensor i2 = I64({2, 1}, {1, 0});
    auto e2 = RunOk(Call("GatherND", 11), Attrs(), {&d2, &i2});
    ASSERT_EQ(e2[0].Dims(), (std::vector<int64_t>{2, 2}));
    ExpectNear(D({2, 3, 0, 1}), e2[0], 0);
    Tensor d3 = F32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
    Tensor i3 = I64({2, 2}, {0, 1, 1, 0});
    auto e3 = RunOk(Call("GatherND", 13), Attrs(), {&d3, &i3});
    ExpectNear(D({2, 3, 4, 5}), e3[0], 0);
    Tensor i4 = I64({2, 1, 2}, {0, 1, 1, 0});
    auto e4 = RunOk(Call("GatherND", 13), Attrs(), {&d3, &i4});
    ASSERT_EQ(e4[0].Dims(), (std::vector<int64_t>{2, 1, 2}));
    ExpectNear(D({2, 3, 4, 5}), e4[0], 0);
    Tensor i5 = I64({2, 1}, {1, 0});
    auto e5 =
        RunOk(Call("GatherND", 12), Attrs().Int("batch_dims", 1), {&d3, &i5});
    ASSERT_EQ(e5[0].Dims(), (std::vector<int64_t>{2, 2}));
    ExpectNear(D({2, 3, 4, 5}), e5[0], 0);
    // negative indices count from the end; INT32 indices
    Tensor i6 = I32({1, 3}, {-1, -2, 1});
    auto e6 = RunOk(Call("GatherND", 13), Attrs(), {&d3, &i6});
    ExpectNear(D({5}), e6[0], 0);
    Tensor bad = Known(I64({1, 2}, {2, 0}));
    EXPECT_EQ(FailCode(Call("GatherND", 13), Attrs(), {&d3, &bad}),
              OSP_ERROR_INVALID_ARG);
}

TEST(OnnxExtraScatterNd, NoneAddMul) {
    std::vector<float> data(64);
    for (int i = 0; i < 64; i++)
        data[i] = (float)(i % 8 + 1);
    Tensor x = F32({4, 4, 4}, data);
    std::vector<float> up(32);
    for (int i = 0; i < 32; i++)
        up[i] = (float)(i / 16 + 5);
    Tensor u = F32({2, 4, 4}, up);
    Tensor idx = I64({2, 1}, {0, 2});
    auto none = RunOk(Call("ScatterND", 16), Attrs(), {&x, &idx, &u});
    std::vector<double> want(data.begin(), data.end());
    for (int i = 0; i < 16; i++) {
        want[i] = 5;
        want[32 + i] = 6;
    }
    ExpectNear(want, none[0], 0);
    Tensor same = I64({2, 1}, {0, 0});
    auto add = RunOk(Call("ScatterND", 16), Attrs().String("reduction", "add"),
                     {&x, &same, &u});
    std::vector<double> wadd(data.begin(), data.end());
    for (int i = 0; i < 16; i++)
        wadd[i] += 11;
    ExpectNear(wadd, add[0], 0);
    auto mul = RunOk(Call("ScatterND", 16), Attrs().String("reduction", "mul"),
                     {&x, &same, &u});
    std::vector<double> wmul(data.begin(), data.end());
    for (int i = 0; i < 16; i++)
        wmul[i] *= 30;
    ExpectNear(wmul, mul[0], 0);
    // element updates: k = rank
    Tensor x1 = F32({8}, {1, 2, 3, 4, 5, 6, 7, 8});
    Tensor i1 = I64({4, 1}, {4, 3, 1, -1});
    Tensor u1 = F32({4}, {9, 10, 11, 12});
    auto e = RunOk(Call("ScatterND", 11), Attrs(), {&x1, &i1, &u1});
    ExpectNear(D({1, 11, 3, 10, 9, 6, 7, 12}), e[0], 0);
    auto mx = RunOk(Call("ScatterND", 18), Attrs().String("reduction", "max"),
                    {&x1, &i1, &u1});
    ExpectNear(D({1, 11, 3, 10, 9, 6, 7, 12}), mx[0], 0);
    Tensor bad_u = F32({3}, {1, 2, 3});
    EXPECT_EQ(FailCode(Call("ScatterND", 13), Attrs(), {&x1, &i1, &bad_u}),
              OSP_ERROR_INVALID_ARG);
}

// ---- ScatterElements, Scatter
// ------------------------------------------------

TEST(OnnxExtraScatterElements, AxesReductionsAndNegativeIndices) {
    Tensor x = F32({1, 5}, {1, 2, 3, 4, 5});
    Tensor idx = I64({1, 2}, {1, 3});
    Tensor u = F32({1, 2}, {1.1f, 2.1f});
    auto a = RunOk(Call("ScatterElements", 16), Attrs().Int("axis", 1),
                   {&x, &idx, &u});
    ExpectNear(D({1, 1.1, 3, 2.1, 5}), a[0], 1e-6);
    Tensor neg = I64({1, 2}, {1, -3});
    auto n = RunOk(Call("ScatterElements", 13), Attrs().Int("axis", 1),
                   {&x, &neg, &u});
    ExpectNear(D({1, 1.1, 2.1, 4, 5}), n[0], 1e-6);
    Tensor dup = I64({1, 2}, {1, 1});
    auto add = RunOk(Call("ScatterElements", 16),
                     Attrs().Int("axis", 1).String("reduction", "add"),
                     {&x, &dup, &u});
    ExpectNear(D({1, 5.2, 3, 4, 5}), add[0], 1e-6);
    auto mn = RunOk(Call("ScatterElements", 18),
                    Attrs().Int("axis", 1).String("reduction", "min"),
                    {&x, &dup, &u});
    ExpectNear(D({1, 1.1, 3, 4, 5}), mn[0], 1e-6);

    Tensor z = F32({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
    Tensor i2 = I32({2, 3}, {1, 0, 2, 0, 2, 1});
    Tensor u2 = F32({2, 3}, {1, 1.1f, 1.2f, 2, 2.1f, 2.2f});
    auto ax0 = RunOk(Call("ScatterElements", 11), Attrs(), {&z, &i2, &u2});
    ExpectNear(D({2, 1.1, 0, 1, 0, 2.2, 0, 2.1, 1.2}), ax0[0], 1e-6);
    auto old = RunOk(Call("Scatter", 10), Attrs(), {&z, &i2, &u2});
    ExpectNear(D({2, 1.1, 0, 1, 0, 2.2, 0, 2.1, 1.2}), old[0], 1e-6);
    EXPECT_EQ(Find("", "Scatter", 11), nullptr);
    Tensor oob = Known(I64({1, 2}, {1, 5}));
    EXPECT_EQ(FailCode(Call("ScatterElements", 16), Attrs().Int("axis", 1),
                       {&x, &oob, &u}),
              OSP_ERROR_INVALID_ARG);
    Tensor iu8 = U8({1, 2}, {1, 2});
    Tensor xu8 = U8({1, 5}, {1, 2, 3, 4, 5});
    EXPECT_EQ(FailCode(Call("ScatterElements", 16),
                       Attrs().Int("axis", 1).String("reduction", "add"),
                       {&xu8, &idx, &iu8}),
              OSP_ERROR_UNSUPPORTED);
}

// ---- NonZero, Compress
// -------------------------------------------------------

TEST(OnnxExtraNonZero, PositionsFromKnownValues) {
    Tensor b = Bool({2, 2}, {1, 0, 1, 1}, true);
    auto o = RunOk(Call("NonZero", 13), Attrs(), {&b});
    ASSERT_EQ(o[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(D({0, 1, 1, 0, 0, 1}), o[0], 0);
    Tensor f = Known(F32({2, 3}, {0, 1.5f, 0, -2, 0, 3}));
    auto of = RunOk(Call("NonZero", 9), Attrs(), {&f});
    ASSERT_EQ(of[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(D({0, 1, 1, 1, 0, 2}), of[0], 0);
    Tensor z = Known(F32({3}, {0, 0, 0}));
    auto oz = RunOk(Call("NonZero", 13), Attrs(), {&z});
    EXPECT_EQ(oz[0].Dims(), (std::vector<int64_t>{1, 0}));
    Tensor unknown = F32({3}, {1, 0, 1});
    std::string msg;
    EXPECT_EQ(FailCode(Call("NonZero", 13), Attrs(), {&unknown}, &msg),
              OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("must be known"), std::string::npos) << msg;
}

TEST(OnnxExtraCompress, AxesAndFlattened) {
    Tensor x = F32({3, 2}, {1, 2, 3, 4, 5, 6});
    Tensor c0 = Bool({3}, {0, 1, 1}, true);
    auto a0 = RunOk(Call("Compress", 11), Attrs().Int("axis", 0), {&x, &c0});
    ASSERT_EQ(a0[0].Dims(), (std::vector<int64_t>{2, 2}));
    ExpectNear(D({3, 4, 5, 6}), a0[0], 0);
    Tensor c1 = Bool({2}, {0, 1}, true);
    auto a1 = RunOk(Call("Compress", 9), Attrs().Int("axis", -1), {&x, &c1});
    ASSERT_EQ(a1[0].Dims(), (std::vector<int64_t>{3, 1}));
    ExpectNear(D({2, 4, 6}), a1[0], 0);
    Tensor cf = Bool({5}, {0, 1, 0, 0, 1}, true);
    auto fl = RunOk(Call("Compress", 11), Attrs(), {&x, &cf});
    ASSERT_EQ(fl[0].Dims(), (std::vector<int64_t>{2}));
    ExpectNear(D({2, 5}), fl[0], 0);
    Tensor none = Bool({3}, {0, 0, 0}, true);
    auto e = RunOk(Call("Compress", 11), Attrs().Int("axis", 0), {&x, &none});
    EXPECT_EQ(e[0].Dims(), (std::vector<int64_t>{0, 2}));
    Tensor over = Bool({4}, {0, 0, 0, 1}, true);
    EXPECT_EQ(
        FailCode(Call("Compress", 11), Attrs().Int("axis", 0), {&x, &over}),
        OSP_ERROR_INVALID_ARG);
    Tensor unknown = Bool({3}, {1, 1, 1});
    EXPECT_EQ(
        FailCode(Call("Compress", 11), Attrs().Int("axis", 0), {&x, &unknown}),
        OSP_ERROR_INVALID_ARG);
}

// ---- Unique
// ------------------------------------------------------------------

TEST(OnnxExtraUnique, SortedAndUnsortedFlat) {
    Tensor x = Known(F32({6}, {2, 1, 1, 3, 4, 3}));
    auto s = RunOk(Call("Unique", 11, "", 4), Attrs(), {&x});
    ASSERT_EQ(s.size(), 4u);
    ExpectNear(D({1, 2, 3, 4}), s[0], 0);
    ExpectNear(D({1, 0, 3, 4}), s[1], 0);
    ExpectNear(D({1, 0, 0, 2, 3, 2}), s[2], 0);
    ExpectNear(D({2, 1, 2, 1}), s[3], 0);
    auto u = RunOk(Call("Unique", 11, "", 4), Attrs().Int("sorted", 0), {&x});
    ExpectNear(D({2, 1, 3, 4}), u[0], 0);
    ExpectNear(D({0, 1, 3, 4}), u[1], 0);
    ExpectNear(D({0, 1, 1, 2, 3, 2}), u[2], 0);
    ExpectNear(D({1, 2, 2, 1}), u[3], 0);
    // only Y requested
    auto y = RunOk(Call("Unique", 11, "", 1), Attrs(), {&x});
    ExpectNear(D({1, 2, 3, 4}), y[0], 0);
}

TEST(OnnxExtraUnique, Axes) {
    Tensor x = Known(F32({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4}));
    auto a0 = RunOk(Call("Unique", 11, "", 4), Attrs().Int("axis", 0), {&x});
    ASSERT_EQ(a0[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(D({1, 0, 0, 2, 3, 4}), a0[0], 0);
    ExpectNear(D({0, 2}), a0[1], 0);
    ExpectNear(D({0, 0, 1}), a0[2], 0);
    ExpectNear(D({2, 1}), a0[3], 0);
    Tensor x3 =
        Known(F32({2, 4, 2}, {1, 1, 0, 1, 2, 1, 0, 1, 1, 1, 0, 1, 2, 1, 0, 1}));
    auto a1 = RunOk(Call("Unique", 11, "", 4), Attrs().Int("axis", 1), {&x3});
    ASSERT_EQ(a1[0].Dims(), (std::vector<int64_t>{2, 3, 2}));
    ExpectNear(D({0, 1, 1, 1, 2, 1, 0, 1, 1, 1, 2, 1}), a1[0], 0);
    ExpectNear(D({1, 0, 2}), a1[1], 0);
    ExpectNear(D({1, 0, 2, 0}), a1[2], 0);
    ExpectNear(D({2, 1, 1}), a1[3], 0);
    Tensor xi = Known(I64({5}, {5, -1, 5, 3, -1}));
    auto ui = RunOk(Call("Unique", 11, "", 4), Attrs(), {&xi});
    ExpectNear(D({-1, 3, 5}), ui[0], 0);
    ExpectNear(D({1, 3, 0}), ui[1], 0);
    ExpectNear(D({2, 0, 2, 1, 0}), ui[2], 0);
    Tensor unknown = F32({2}, {1, 2});
    EXPECT_EQ(FailCode(Call("Unique", 11), Attrs(), {&unknown}),
              OSP_ERROR_INVALID_ARG);
}

// ---- NonMaxSuppression
// -------------------------------------------------------

TEST(OnnxExtraNms, SuppressByIouAndScore) {
    Tensor boxes = Known(
        F32({1, 6, 4}, {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                        0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101}));
    Tensor scores =
        Known(F32({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f}));
    Tensor max_out = Known(I64({1}, {3}));
    Tensor iou = Known(F32({1}, {0.5f}));
    Tensor thr = Known(F32({1}, {0.0f}));
    auto o = RunOk(Call("NonMaxSuppression", 11), Attrs(),
                   {&boxes, &scores, &max_out, &iou, &thr});
    ASSERT_EQ(o[0].Dims(), (std::vector<int64_t>{3, 3}));
    ExpectNear(D({0, 0, 3, 0, 0, 0, 0, 0, 5}), o[0], 0);
    Tensor thr4 = Known(F32({1}, {0.4f}));
    auto s = RunOk(Call("NonMaxSuppression", 10), Attrs(),
                   {&boxes, &scores, &max_out, &iou, &thr4});
    ASSERT_EQ(s[0].Dims(), (std::vector<int64_t>{2, 3}));
    ExpectNear(D({0, 0, 3, 0, 0, 0}), s[0], 0);
    // center format: the same boxes as [x_c, y_c, w, h]
    Tensor centers = Known(F32(
        {1, 6, 4}, {0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                    0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1}));
    auto c =
        RunOk(Call("NonMaxSuppression", 11), Attrs().Int("center_point_box", 1),
              {&centers, &scores, &max_out, &iou, &thr});
    ExpectNear(D({0, 0, 3, 0, 0, 0, 0, 0, 5}), c[0], 0);
    // no max_output_boxes_per_class: nothing selected
    auto none =
        RunOk(Call("NonMaxSuppression", 11), Attrs(), {&boxes, &scores});
    EXPECT_EQ(none[0].Dims(), (std::vector<int64_t>{0, 3}));
    Tensor unknown = F32({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
    EXPECT_EQ(FailCode(Call("NonMaxSuppression", 11), Attrs(),
                       {&boxes, &unknown, &max_out}),
              OSP_ERROR_INVALID_ARG);
}

} // namespace

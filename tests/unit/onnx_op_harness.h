// The harness of the ONNX op unit tests (test_onnx_ops_*.cc): tensors with
// host values, attributes, a node built by hand, and RunNode, which drives
// one op the way the planner does: find it, prepare, infer on descs (with
// the host values of the tensors marked known), run on the CPU device (or
// alias, for views) and free. Header-only: each test is its own binary.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "onnx_ops.h"
#include "osp_test.h"
#include "osprey/device.h"

namespace onnx_test {

// ---- tensors ----------------------------------------------------------------

// A tensor on the host; the CPU device runs on host memory, so these bytes
// are what the op reads and writes.
struct Tensor {
    osp_datatype dtype = OSP_TYPE_INVALID;
    osp_shape shape{};
    std::vector<uint8_t> bytes;
    bool present = true; // false: an omitted input or output
    bool known = false;  // the op sees its host values at infer

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
    std::vector<float> Floats() const {
        return Values<float>();
    }
    // FP32, INT64, INT32 and UINT8 values as doubles (empty for others).
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
        else if (dtype == OSP_TYPE_UINT8)
            for (uint8_t v : Values<uint8_t>())
                out.push_back(v);
        return out;
    }
    std::vector<int64_t> Dims() const {
        return std::vector<int64_t>(shape.dims, shape.dims + shape.rank);
    }
};

inline osp_shape Shape(const std::vector<int64_t> &dims) {
    osp_shape s{};
    s.rank = (int)dims.size();
    for (size_t i = 0; i < dims.size(); i++)
        s.dims[i] = dims[i];
    return s;
}

inline int64_t CountOf(const std::vector<int64_t> &dims) {
    int64_t n = 1;
    for (int64_t d : dims)
        n *= d;
    return n;
}

// A tensor of `dims` holding `vals` (as many as the dims call for).
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

inline Tensor F32(const std::vector<int64_t> &d, const std::vector<float> &v,
                  bool known = false) {
    return Make<float>(OSP_TYPE_FP32, d, v, known);
}
inline Tensor F64(const std::vector<int64_t> &d, const std::vector<double> &v,
                  bool known = false) {
    return Make<double>(OSP_TYPE_FP64, d, v, known);
}
inline Tensor I32(const std::vector<int64_t> &d, const std::vector<int32_t> &v,
                  bool known = false) {
    return Make<int32_t>(OSP_TYPE_INT32, d, v, known);
}
inline Tensor I64(const std::vector<int64_t> &d, const std::vector<int64_t> &v,
                  bool known = false) {
    return Make<int64_t>(OSP_TYPE_INT64, d, v, known);
}
// An INT64 tensor whose values the planner knows (a shape, axes, pads).
inline Tensor KnownI64(const std::vector<int64_t> &d,
                       const std::vector<int64_t> &v) {
    return I64(d, v, true);
}
inline Tensor U8(const std::vector<int64_t> &d, const std::vector<uint8_t> &v,
                 bool known = false) {
    return Make<uint8_t>(OSP_TYPE_UINT8, d, v, known);
}
inline Tensor Bool(const std::vector<int64_t> &d,
                   const std::vector<uint8_t> &v) {
    return Make<uint8_t>(OSP_TYPE_BOOL, d, v);
}
// An omitted input.
inline Tensor Absent() {
    Tensor t;
    t.present = false;
    return t;
}

// FP32 values in [-2, 2) on a 1/8 grid (exact in float; products and
// short sums stay exact too) plus lo_shift, from a fixed seed.
inline Tensor Rand(const std::vector<int64_t> &dims, unsigned seed,
                   float lo_shift = 0.0f) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(-16, 15);
    std::vector<float> v((size_t)CountOf(dims));
    for (float &f : v)
        f = (float)dist(gen) / 8.0f + lo_shift;
    return F32(dims, v);
}

// Each value of `got` (as Doubles) within tol of `want`, relative past 1;
// infinities exactly.
inline void ExpectNear(const std::vector<double> &want, const Tensor &got,
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

// ---- attributes and nodes ---------------------------------------------------

// One attribute whose name (and string) outlive it: literals.
inline onnx_attr AttrInt(const char *name, int64_t v) {
    onnx_attr a{};
    a.name = const_cast<char *>(name);
    a.type = ONNX_ATTR_INT;
    a.i = v;
    return a;
}
inline onnx_attr AttrFloat(const char *name, float v) {
    onnx_attr a{};
    a.name = const_cast<char *>(name);
    a.type = ONNX_ATTR_FLOAT;
    a.f = v;
    return a;
}
inline onnx_attr AttrString(const char *name, const char *v) {
    onnx_attr a{};
    a.name = const_cast<char *>(name);
    a.type = ONNX_ATTR_STRING;
    a.s = const_cast<char *>(v);
    a.s_len = strlen(v);
    return a;
}

// A node's attributes; owns everything they point to. The adders return
// *this so that calls chain: Attrs().Int("axis", 1).Ints("pads", {0, 1}).
class Attrs {
  public:
    Attrs() = default;
    // Moved, never copied: the attributes point into their own storage.
    Attrs(Attrs &&) = default;
    Attrs &operator=(Attrs &&) = default;
    Attrs(const Attrs &) = delete;
    Attrs &operator=(const Attrs &) = delete;
    // Attributes made by AttrInt, AttrFloat and AttrString.
    Attrs(std::initializer_list<onnx_attr> list) : list_(list) {}
    explicit Attrs(std::vector<onnx_attr> list) : list_(std::move(list)) {}

    Attrs &Int(const char *name, int64_t v) {
        onnx_attr a = Base(name, ONNX_ATTR_INT);
        a.i = v;
        list_.push_back(a);
        return *this;
    }
    Attrs &Float(const char *name, float v) {
        onnx_attr a = Base(name, ONNX_ATTR_FLOAT);
        a.f = v;
        list_.push_back(a);
        return *this;
    }
    Attrs &String(const char *name, const std::string &v) {
        onnx_attr a = Base(name, ONNX_ATTR_STRING);
        strings_.push_back(v);
        a.s = &strings_.back()[0];
        a.s_len = v.size();
        list_.push_back(a);
        return *this;
    }
    Attrs &Ints(const char *name, const std::vector<int64_t> &v) {
        onnx_attr a = Base(name, ONNX_ATTR_INTS);
        ints_.push_back(v);
        a.ints = ints_.back().data();
        a.n = v.size();
        list_.push_back(a);
        return *this;
    }
    Attrs &Floats(const char *name, const std::vector<float> &v) {
        onnx_attr a = Base(name, ONNX_ATTR_FLOATS);
        floats_.push_back(v);
        a.floats = floats_.back().data();
        a.n = v.size();
        list_.push_back(a);
        return *this;
    }
    Attrs &Strings(const char *name, const std::vector<std::string> &v) {
        onnx_attr a = Base(name, ONNX_ATTR_STRINGS);
        string_lists_.emplace_back(v.begin(), v.end());
        string_ptrs_.emplace_back();
        for (std::string &s : string_lists_.back())
            string_ptrs_.back().push_back(&s[0]);
        a.strings = string_ptrs_.back().data();
        a.n = v.size();
        list_.push_back(a);
        return *this;
    }
    Attrs &TensorAttr(const char *name, const Tensor &t) {
        onnx_attr a = Base(name, ONNX_ATTR_TENSOR);
        tensor_bytes_.push_back(t.bytes);
        onnx_tensor ot{};
        ot.dtype = t.dtype;
        ot.shape = t.shape;
        ot.data = tensor_bytes_.back().data();
        ot.byte_size = t.bytes.size();
        tensors_.push_back(ot);
        a.t = &tensors_.back();
        list_.push_back(a);
        return *this;
    }

    // Appends attributes made by AttrInt, AttrFloat and AttrString.
    Attrs &Add(const std::vector<onnx_attr> &attrs) {
        list_.insert(list_.end(), attrs.begin(), attrs.end());
        return *this;
    }

    const std::vector<onnx_attr> &list() const {
        return list_;
    }
    std::vector<onnx_attr> &list() {
        return list_;
    }

  private:
    onnx_attr Base(const char *name, onnx_attr_type t) {
        onnx_attr a{};
        names_.push_back(name);
        a.name = &names_.back()[0];
        a.type = t;
        return a;
    }
    std::vector<onnx_attr> list_;
    // deques: what an attribute points to never moves as more are added
    std::deque<std::string> names_, strings_;
    std::deque<std::vector<int64_t>> ints_;
    std::deque<std::vector<float>> floats_;
    std::deque<std::deque<std::string>> string_lists_;
    std::deque<std::vector<char *>> string_ptrs_;
    std::deque<std::vector<uint8_t>> tensor_bytes_;
    std::deque<onnx_tensor> tensors_;
};

// A node built by hand, named "n0", its inputs "in0", "in1", ... and its
// outputs "out0", ...; owns everything the onnx_node points to.
class Node : public Attrs {
  public:
    Node(const char *op_type, int64_t opset, size_t n_inputs = 1,
         size_t n_outputs = 1)
        : op_type_(op_type), opset_(opset) {
        for (size_t i = 0; i < n_inputs; i++)
            inputs_.push_back("in" + std::to_string(i));
        for (size_t i = 0; i < n_outputs; i++)
            outputs_.push_back("out" + std::to_string(i));
    }
    Node &Name(const std::string &name) {
        name_ = name;
        return *this;
    }
    Node &Domain(const std::string &domain) {
        domain_ = domain;
        return *this;
    }
    // Marks input or output i as omitted ("").
    Node &OmitInput(size_t i) {
        inputs_[i] = "";
        return *this;
    }
    Node &OmitOutput(size_t i) {
        outputs_[i] = "";
        return *this;
    }

    // Valid until the node changes or goes.
    const onnx_node *Get() {
        in_ptrs_.clear();
        out_ptrs_.clear();
        for (auto &s : inputs_)
            in_ptrs_.push_back(&s[0]);
        for (auto &s : outputs_)
            out_ptrs_.push_back(&s[0]);
        attr_list_ = list();
        node_ = onnx_node{};
        node_.name = &name_[0];
        node_.op_type = &op_type_[0];
        node_.domain = &domain_[0];
        node_.opset = opset_;
        node_.inputs = in_ptrs_.data();
        node_.n_inputs = in_ptrs_.size();
        node_.outputs = out_ptrs_.data();
        node_.n_outputs = out_ptrs_.size();
        node_.attrs = attr_list_.data();
        node_.n_attrs = attr_list_.size();
        return &node_;
    }

  private:
    std::string name_ = "n0", op_type_, domain_ = "";
    int64_t opset_;
    std::vector<std::string> inputs_, outputs_;
    std::vector<char *> in_ptrs_, out_ptrs_;
    std::vector<onnx_attr> attr_list_;
    onnx_node node_{};
};

// ---- running an op ----------------------------------------------------------

// The entry serving (domain, op_type, opset) in `family`, as onnx_op_find
// picks it (the registry links every family; a test needs only its own).
inline const onnx_op *FindOp(const onnx_op_family &family, const char *domain,
                             const char *op_type, int64_t opset) {
    for (size_t i = 0; i < family.n_ops; i++) {
        const onnx_op *op = &family.ops[i];
        if (strcmp(op->op_type, op_type) == 0 &&
            strcmp(op->domain, domain) == 0 && opset >= op->since &&
            (op->until == 0 || opset <= op->until))
            return op;
    }
    return nullptr;
}

struct OpResult {
    std::vector<Tensor> outs; // as infer described them; empty if it failed
    size_t workspace = 0;     // bytes infer asked for
    bool aliased = false;     // output 0 is input 0's bytes; run not called
    // Where run puts the bytes of strings it makes (a STRING output's
    // elements may point here), as a session's pool; freed with the result.
    onnx_string_pool strings{};

    OpResult() = default;
    OpResult(const OpResult &) = delete;
    OpResult &operator=(const OpResult &) = delete;
    ~OpResult() {
        onnx_string_pool_destroy(&strings);
    }
};

// prepare, infer, run and free of node's op on `ins` (nullptr or !present:
// omitted) on the CPU device, the op taken from `family` (checked to be the
// one onnx_op_find picks) or, when family is null, from onnx_op_find. The
// error of the first step that fails, else NULL with *res filled. Outputs
// start as 0xAB canaries with one guard byte past the end that run must
// not touch; the workspace starts as 0xFF bytes (NaN as floats), garbage
// as the planner's may be. A view (output_aliases_input) is not run: its
// output is input 0's bytes, as the planner aliases it.
inline osp_error *RunNode(const onnx_op_family *family, Node &n,
                          const std::vector<const Tensor *> &ins,
                          OpResult *res) {
    const onnx_node *node = n.Get();
    const onnx_op *op =
        family ? FindOp(*family, node->domain, node->op_type, node->opset)
               : onnx_op_find(node->domain, node->op_type, node->opset);
    if (!op)
        return osp_error_new(OSP_ERROR_NOT_FOUND, "no op %s at opset %lld",
                             node->op_type, (long long)node->opset);
    if (family) {
        EXPECT_EQ(op, onnx_op_find(node->domain, node->op_type, node->opset));
    }
    for (int i = 0; i < 8 && op->uses[i] != OSP_OP_KIND_COUNT_; i++)
        EXPECT_TRUE(osp_device_supports_op(osp_device_cpu(), op->uses[i]))
            << osp_op_kind_name(op->uses[i]);

    static const uint64_t empty = 0; // the host values of a known empty tensor
    void *state = nullptr;
    osp_error *err = nullptr;
    osp_stream *stream = nullptr;
    void *ws = nullptr;
    size_t ws_bytes = 0;
    std::vector<onnx_desc> in_desc(ins.size()), out_desc(node->n_outputs);
    std::vector<const void *> in_mem(ins.size());
    std::vector<void *> out_mem(node->n_outputs);
    onnx_infer_ctx ictx{};
    onnx_run_ctx rctx{};

    if (op->prepare && (err = op->prepare(node, &state)))
        goto out;
    for (size_t i = 0; i < ins.size(); i++) {
        const Tensor *t = ins[i];
        if (!t || !t->present)
            continue;
        in_desc[i].present = true;
        in_desc[i].dtype = t->dtype;
        in_desc[i].shape = t->shape;
        if (t->known)
            in_desc[i].host = t->bytes.empty() ? (const void *)&empty
                                               : (const void *)t->bytes.data();
        in_mem[i] = t->bytes.data();
    }
    for (size_t i = 0; i < out_desc.size(); i++)
        out_desc[i].present = node->outputs[i][0] != '\0';
    ictx.node = node;
    ictx.state = state;
    ictx.n_inputs = in_desc.size();
    ictx.inputs = in_desc.data();
    ictx.n_outputs = out_desc.size();
    ictx.outputs = out_desc.data();
    if ((err = op->infer(&ictx)))
        goto out;
    res->workspace = ictx.workspace_bytes;
    res->outs.assign(out_desc.size(), Tensor());
    for (size_t i = 0; i < out_desc.size(); i++) {
        Tensor &t = res->outs[i];
        t.present = out_desc[i].present;
        t.dtype = out_desc[i].dtype;
        t.shape = out_desc[i].shape;
        if (!t.present)
            continue;
        t.bytes.assign((size_t)t.Count() * onnx_elem_bytes(t.dtype) + 1, 0xAB);
        out_mem[i] = t.bytes.data();
    }
    if (op->output_aliases_input) {
        res->aliased = true;
        if (!ins.empty() && ins[0])
            res->outs[0].bytes = ins[0]->bytes;
        goto out;
    }
    ws_bytes = (ictx.workspace_bytes + 63) / 64 * 64 + 64;
    ws = aligned_alloc(64, ws_bytes);
    memset(ws, 0xFF, ws_bytes);
    if ((err = osp_stream_new(osp_device_cpu(), &stream)))
        goto out;
    rctx.stream = stream;
    rctx.node = node;
    rctx.state = state;
    rctx.n_inputs = in_desc.size();
    rctx.in_desc = in_desc.data();
    rctx.in = in_mem.data();
    rctx.n_outputs = out_desc.size();
    rctx.out_desc = out_desc.data();
    rctx.out = out_mem.data();
    rctx.workspace = ws;
    rctx.strings = &res->strings;
    if (!(err = op->run(&rctx)))
        err = osp_stream_synchronize(stream);
    for (Tensor &t : res->outs)
        if (t.present) {
            EXPECT_EQ(t.bytes.back(), 0xAB) << "run wrote past the end";
            t.bytes.pop_back();
        }
out:
    osp_stream_free(stream);
    free(ws);
    if (op->free)
        op->free(state);
    return err;
}

// What to run: an op of a family with its outputs (all present unless
// outputs_present says otherwise).
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

// RunNode of the call's op from `family` on a node "the_node" with
// `attrs`, one input per entry of `ins` (nullptr: omitted).
inline osp_error *RunCall(const onnx_op_family &family, const Call &call,
                          const Attrs &attrs,
                          const std::vector<const Tensor *> &ins,
                          OpResult *res) {
    Node n(call.op_type, call.opset, ins.size(), call.n_outputs);
    n.Name("the_node").Domain(call.domain).Add(attrs.list());
    for (size_t i = 0; i < ins.size(); i++)
        if (!ins[i])
            n.OmitInput(i);
    for (size_t i = 0; i < call.outputs_present.size(); i++)
        if (!call.outputs_present[i])
            n.OmitOutput(i);
    return RunNode(&family, n, ins, res);
}

// The error code of a call expected to fail (and its message in *msg).
inline osp_error_code FailCall(const onnx_op_family &family, const Call &call,
                               const Attrs &attrs,
                               const std::vector<const Tensor *> &ins,
                               std::string *msg = nullptr) {
    OpResult res;
    osp_error *err = RunCall(family, call, attrs, ins, &res);
    EXPECT_NE(err, nullptr) << call.op_type << " was expected to fail";
    if (!err)
        return OSP_ERROR_UNKNOWN;
    osp_error_code code = osp_error_get_code(err);
    std::string m = TakeMessage(err);
    if (msg)
        *msg = m;
    return code;
}

} // namespace onnx_test

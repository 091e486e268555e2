// The ONNX model loader (backends/onnx/onnx_loader.c and its helpers): real
// files from Debian's libonnx-testdata (skipped when it is not installed),
// then models and tensors written byte by byte here, hostile ones included,
// each of which must fail with INVALID_ARG and a message that says why;
// and what preparing a loaded model keeps of its initializers.

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "onnx_graph.h"   // extern "C" itself
#include "onnx_pb_writer.h"
#include "onnx_runtime.h" // extern "C" itself
#include "osp_test.h"
#include "osprey/device.h"

namespace {

namespace fs = std::filesystem;

const char kTestData[] = "/usr/share/libonnx-testdata/data";

#define SKIP_WITHOUT_TESTDATA()                                                \
    do {                                                                       \
        if (!fs::is_directory(kTestData))                                      \
            GTEST_SKIP() << kTestData << " is absent (libonnx-testdata)";      \
    } while (0)

struct ModelDeleter {
    void operator()(onnx_model *m) const {
        onnx_model_free(m);
    }
};
using ModelPtr = std::unique_ptr<onnx_model, ModelDeleter>;


// ONNX field numbers (onnx.proto).
enum {
    kModelIrVersion = 1,
    kModelProducer = 2,
    kModelGraph = 7,
    kModelOpset = 8,
    kOpsetDomain = 1,
    kOpsetVersion = 2,
    kGraphNode = 1,
    kGraphName = 2,
    kGraphInitializer = 5,
    kGraphInput = 11,
    kGraphOutput = 12,
    kGraphValueInfo = 13,
    kGraphSparseInitializer = 15,
    kNodeInput = 1,
    kNodeOutput = 2,
    kNodeName = 3,
    kNodeOpType = 4,
    kNodeAttribute = 5,
    kNodeDomain = 7,
    kAttrName = 1,
    kAttrF = 2,
    kAttrI = 3,
    kAttrS = 4,
    kAttrT = 5,
    kAttrG = 6,
    kAttrInts = 8,
    kAttrStrings = 9,
    kAttrGraphs = 11,
    kAttrType = 20,
    kValueName = 1,
    kValueType = 2,
    kTypeTensor = 1,
    kTypeSequence = 4,
    kTensorTypeElem = 1,
    kTensorTypeShape = 2,
    kShapeDim = 1,
    kDimValue = 1,
    kDimParam = 2,
    kTensorDims = 1,
    kTensorDataType = 2,
    kTensorFloatData = 4,
    kTensorInt32Data = 5,
    kTensorStringData = 6,
    kTensorInt64Data = 7,
    kTensorName = 8,
    kTensorRawData = 9,
    kTensorUint64Data = 11,
    kTensorExternalData = 13,
    kTensorDataLocation = 14,
};

// TensorProto.DataType values.
enum {
    kFloat = 1,
    kUint8 = 2,
    kInt8 = 3,
    kInt32 = 6,
    kInt64 = 7,
    kString = 8,
    kBool = 9,
    kFloat16 = 10,
    kUint32 = 12,
    kComplex64 = 14,
    kFloat8E4M3FN = 17,
};

Pb Tensor(const std::string &name, int data_type,
          const std::vector<int64_t> &dims) {
    Pb t;
    for (int64_t d : dims)
        t.Varint(kTensorDims, static_cast<uint64_t>(d));
    t.Varint(kTensorDataType, data_type);
    t.Bytes(kTensorName, name);
    return t;
}

std::string FloatBytes(const std::vector<float> &v) {
    return std::string(reinterpret_cast<const char *>(v.data()),
                       v.size() * sizeof(float));
}

// ValueInfoProto of a tensor; a dim < 0 is written as dim_param "N".
Pb Value(const std::string &name, int elem_type,
         const std::vector<int64_t> &dims) {
    Pb shape;
    for (int64_t d : dims) {
        Pb dim;
        if (d >= 0)
            dim.Varint(kDimValue, static_cast<uint64_t>(d));
        else
            dim.Bytes(kDimParam, "N");
        shape.Msg(kShapeDim, dim);
    }
    Pb tensor_type;
    tensor_type.Varint(kTensorTypeElem, elem_type).Msg(kTensorTypeShape, shape);
    Pb type;
    type.Msg(kTypeTensor, tensor_type);
    Pb v;
    v.Bytes(kValueName, name).Msg(kValueType, type);
    return v;
}

Pb Node(const std::string &op, const std::vector<std::string> &inputs,
        const std::vector<std::string> &outputs) {
    Pb n;
    for (const auto &i : inputs)
        n.Bytes(kNodeInput, i);
    for (const auto &o : outputs)
        n.Bytes(kNodeOutput, o);
    n.Bytes(kNodeOpType, op);
    return n;
}

// A model around `graph` importing opset 13 of the default domain.
std::string Model(const Pb &graph, int64_t opset = 13) {
    Pb op;
    op.Bytes(kOpsetDomain, "").Varint(kOpsetVersion, opset);
    Pb m;
    m.Varint(kModelIrVersion, 8)
        .Bytes(kModelProducer, "test")
        .Msg(kModelGraph, graph)
        .Msg(kModelOpset, op);
    return m.str();
}

// A graph y = Identity(x) with `init` as its only initializer.
Pb GraphWithInitializer(const Pb &init) {
    Pb g;
    g.Bytes(kGraphName, "g")
        .Msg(kGraphNode, Node("Identity", {"x"}, {"y"}))
        .Msg(kGraphInitializer, init)
        .Msg(kGraphInput, Value("x", kFloat, {2}))
        .Msg(kGraphOutput, Value("y", kFloat, {2}));
    return g;
}

// Loads `bytes`; ADD_FAILURE with the message on error.
ModelPtr LoadOk(const std::string &bytes, const char *base_dir = nullptr,
                const onnx_load_limits *limits = nullptr) {
    onnx_model *m = nullptr;
    osp_error *err =
        onnx_model_load_bytes(bytes.data(), bytes.size(), base_dir, limits, &m);
    if (err)
        ADD_FAILURE() << "load failed: " << TakeMessage(err);
    return ModelPtr(m);
}

// Passes when loading fails with INVALID_ARG and a message containing
// `text` (and every `more`), and nothing is returned.
::testing::AssertionResult LoadFails(const std::string &bytes,
                                     const std::string &text,
                                     const char *base_dir = nullptr,
                                     const onnx_load_limits *limits = nullptr) {
    onnx_model *m = nullptr;
    osp_error *err =
        onnx_model_load_bytes(bytes.data(), bytes.size(), base_dir, limits, &m);
    if (!err) {
        onnx_model_free(m);
        return ::testing::AssertionFailure()
               << "loaded; expected an error containing \"" << text << "\"";
    }
    osp_error_code code = osp_error_get_code(err);
    std::string msg = TakeMessage(err);
    if (m)
        return ::testing::AssertionFailure() << "*out set on error: " << msg;
    if (code != OSP_ERROR_INVALID_ARG)
        return ::testing::AssertionFailure()
               << "code " << osp_error_code_name(code) << ": " << msg;
    if (msg.find(text) == std::string::npos)
        return ::testing::AssertionFailure()
               << "error \"" << msg << "\" lacks \"" << text << "\"";
    return ::testing::AssertionSuccess() << msg;
}

std::string ReadFile(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f),
                       std::istreambuf_iterator<char>());
}

void WriteFile(const std::string &path, const std::string &bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh temporary folder, removed with the test fixture.
class TempDir {
  public:
    TempDir() {
        std::string tmpl = ::testing::TempDir() + "/onnx_loader_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (mkdtemp(buf.data()))
            path_ = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        if (!path_.empty())
            fs::remove_all(path_, ec);
    }
    const std::string &path() const {
        return path_;
    }

  private:
    std::string path_;
};

const onnx_node *FindNode(const onnx_graph *g, const char *op) {
    for (size_t i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, op) == 0)
            return &g->nodes[i];
    return nullptr;
}

// ---- real files ----

TEST(OnnxLoaderTestData, AbsModelAndItsTensors) {
    SKIP_WITHOUT_TESTDATA();
    std::string dir = std::string(kTestData) + "/node/test_abs";
    onnx_model *raw = nullptr;
    ASSERT_OK(
        onnx_model_load_file((dir + "/model.onnx").c_str(), nullptr, &raw));
    ModelPtr m(raw);
    EXPECT_EQ(m->ir_version, 7);
    EXPECT_EQ(onnx_model_opset(m.get(), ""), 13);
    EXPECT_EQ(onnx_model_opset(m.get(), "ai.onnx"), 13);
    EXPECT_EQ(onnx_model_opset(m.get(), "com.microsoft"), 0);
    const onnx_graph *g = m->graph;
    ASSERT_EQ(g->n_nodes, 1u);
    EXPECT_STREQ(g->nodes[0].op_type, "Abs");
    EXPECT_STREQ(g->nodes[0].domain, "");
    EXPECT_EQ(g->nodes[0].opset, 13);
    ASSERT_EQ(g->nodes[0].n_inputs, 1u);
    EXPECT_STREQ(g->nodes[0].inputs[0], "x");
    ASSERT_EQ(g->n_inputs, 1u);
    EXPECT_STREQ(g->inputs[0].name, "x");
    EXPECT_EQ(g->inputs[0].dtype, OSP_TYPE_FP32);
    ASSERT_TRUE(g->inputs[0].has_shape);
    ASSERT_EQ(g->inputs[0].rank, 3);
    EXPECT_EQ(g->inputs[0].dims[0], 3);
    EXPECT_EQ(g->inputs[0].dims[2], 5);
    ASSERT_EQ(g->n_outputs, 1u);
    EXPECT_STREQ(g->outputs[0].name, "y");

    onnx_tensor in = {}, out = {};
    char *in_name = nullptr, *out_name = nullptr;
    ASSERT_OK(onnx_tensor_load_pb_file(
        (dir + "/test_data_set_0/input_0.pb").c_str(), &in, &in_name));
    ASSERT_OK(onnx_tensor_load_pb_file(
        (dir + "/test_data_set_0/output_0.pb").c_str(), &out, &out_name));
    EXPECT_STREQ(in_name, "x");
    EXPECT_STREQ(out_name, "y");
    EXPECT_EQ(in.dtype, OSP_TYPE_FP32);
    ASSERT_EQ(in.shape.rank, 3);
    EXPECT_EQ(in.byte_size, 3u * 4 * 5 * sizeof(float));
    ASSERT_EQ(out.byte_size, in.byte_size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(in.data) % 64, 0u);
    const float *x = static_cast<const float *>(in.data);
    const float *y = static_cast<const float *>(out.data);
    for (size_t i = 0; i < 60; i++)
        EXPECT_EQ(y[i], std::fabs(x[i])) << i;
    onnx_tensor_clear(&in);
    onnx_tensor_clear(&out);
    EXPECT_EQ(in.data, nullptr);
    EXPECT_EQ(in.byte_size, 0u);
    free(in_name);
    free(out_name);
}

TEST(OnnxLoaderTestData, ConvAttributes) {
    SKIP_WITHOUT_TESTDATA();
    onnx_model *raw = nullptr;
    ASSERT_OK(onnx_model_load_file(
        (std::string(kTestData) + "/node/test_conv_with_strides_padding")
            .c_str(),
        nullptr, &raw)); // the folder form: it holds model.onnx
    ModelPtr m(raw);
    const onnx_node *conv = FindNode(m->graph, "Conv");
    ASSERT_NE(conv, nullptr);
    EXPECT_EQ(conv->opset, 11);
    ASSERT_EQ(conv->n_inputs, 2u);
    EXPECT_STREQ(conv->inputs[1], "W");
    const onnx_attr *pads = onnx_node_attr(conv, "pads");
    ASSERT_NE(pads, nullptr);
    EXPECT_EQ(pads->type, ONNX_ATTR_INTS);
    ASSERT_EQ(pads->n, 4u);
    for (size_t i = 0; i < 4; i++)
        EXPECT_EQ(pads->ints[i], 1);
    const onnx_attr *strides = onnx_node_attr(conv, "strides");
    ASSERT_NE(strides, nullptr);
    ASSERT_EQ(strides->n, 2u);
    EXPECT_EQ(strides->ints[0], 2);
    const onnx_attr *kernel = onnx_node_attr(conv, "kernel_shape");
    ASSERT_NE(kernel, nullptr);
    EXPECT_EQ(kernel->ints[0], 3);
    EXPECT_EQ(onnx_node_attr(conv, "dilations"), nullptr);
    EXPECT_EQ(onnx_node_attr(conv, "group"), nullptr);
    EXPECT_EQ(m->graph->n_inputs, 2u);
}

TEST(OnnxLoaderTestData, PytorchConv2dInitializers) {
    SKIP_WITHOUT_TESTDATA();
    std::string dir = std::string(kTestData) + "/pytorch-converted/test_Conv2d";
    onnx_model *raw = nullptr;
    ASSERT_OK(
        onnx_model_load_file((dir + "/model.onnx").c_str(), nullptr, &raw));
    ModelPtr m(raw);
    EXPECT_STREQ(m->producer_name, "pytorch");
    const onnx_graph *g = m->graph;
    ASSERT_EQ(g->n_initializers, 2u);
    const onnx_tensor *w = &g->initializers[0].tensor;
    EXPECT_STREQ(g->initializers[0].name, "1");
    EXPECT_EQ(w->dtype, OSP_TYPE_FP32);
    ASSERT_EQ(w->shape.rank, 4);
    EXPECT_EQ(w->shape.dims[0], 4);
    EXPECT_EQ(w->byte_size, 4u * 3 * 3 * 2 * sizeof(float));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 64, 0u);
    EXPECT_EQ(g->initializers[1].tensor.byte_size, 4 * sizeof(float));
    // Only the data input is left; the weights are initializers.
    ASSERT_EQ(g->n_inputs, 1u);
    EXPECT_STREQ(g->inputs[0].name, "0");
    const onnx_node *conv = FindNode(g, "Conv");
    ASSERT_NE(conv, nullptr);
    EXPECT_EQ(conv->opset, 6);
    const onnx_attr *group = onnx_node_attr(conv, "group");
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->type, ONNX_ATTR_INT);
    EXPECT_EQ(group->i, 1);
}

TEST(OnnxLoaderTestData, IfSubgraphs) {
    SKIP_WITHOUT_TESTDATA();
    onnx_model *raw = nullptr;
    ASSERT_OK(onnx_model_load_file(
        (std::string(kTestData) + "/node/test_if/model.onnx").c_str(), nullptr,
        &raw));
    ModelPtr m(raw);
    const onnx_node *node = FindNode(m->graph, "If");
    ASSERT_NE(node, nullptr);
    for (const char *branch : {"then_branch", "else_branch"}) {
        const onnx_attr *a = onnx_node_attr(node, branch);
        ASSERT_NE(a, nullptr) << branch;
        ASSERT_EQ(a->type, ONNX_ATTR_GRAPH);
        ASSERT_NE(a->g, nullptr);
        ASSERT_EQ(a->g->n_nodes, 1u);
        const onnx_node *c = &a->g->nodes[0];
        EXPECT_STREQ(c->op_type, "Constant");
        EXPECT_EQ(c->opset, 11);
        const onnx_attr *value = onnx_node_attr(c, "value");
        ASSERT_NE(value, nullptr);
        ASSERT_EQ(value->type, ONNX_ATTR_TENSOR);
        EXPECT_EQ(value->t->dtype, OSP_TYPE_FP32);
        EXPECT_EQ(value->t->byte_size, 5 * sizeof(float));
    }
}

// Every model of the data set loads, or fails with INVALID_ARG because it
// uses what Osprey does not support; every test tensor loads, or (the
// sequences and optionals among them are other messages) fails with
// INVALID_ARG naming the file.
TEST(OnnxLoaderTestData, EveryModelAndTensor) {
    SKIP_WITHOUT_TESTDATA();
    size_t models = 0, tensors = 0, refused_models = 0, refused_tensors = 0;
    for (const auto &e : fs::recursive_directory_iterator(kTestData)) {
        if (!e.is_regular_file())
            continue;
        std::string path = e.path().string();
        bool is_model = e.path().extension() == ".onnx";
        osp_error *err = nullptr;
        if (is_model) {
            onnx_model *m = nullptr;
            err = onnx_model_load_file(path.c_str(), nullptr, &m);
            onnx_model_free(m);
            models++;
        } else if (e.path().extension() == ".pb") {
            onnx_tensor t = {};
            char *name = nullptr;
            err = onnx_tensor_load_pb_file(path.c_str(), &t, &name);
            if (!err) {
                onnx_tensor_clear(&t);
                free(name);
            }
            tensors++;
        } else {
            continue;
        }
        if (!err)
            continue;
        (is_model ? refused_models : refused_tensors)++;
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        std::string msg = TakeMessage(err);
        EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "names the file: " << msg;
        if (is_model) {
            EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
        }
    }
    EXPECT_GT(models, 1000u);
    EXPECT_GT(tensors, 2000u);
    EXPECT_LE(refused_models, 2u);
    EXPECT_LT(refused_tensors, tensors / 20);
}

// Truncating a real model anywhere inside its graph fails cleanly.
TEST(OnnxLoaderTestData, TruncatedModelsFail) {
    SKIP_WITHOUT_TESTDATA();
    std::string bytes = ReadFile(std::string(kTestData) +
                                 "/node/test_conv_with_strides_padding/"
                                 "model.onnx");
    ASSERT_GT(bytes.size(), 100u);
    // Find where the graph field (7, length-delimited) ends.
    size_t pos = 0, graph_end = 0;
    while (pos < bytes.size()) {
        uint64_t key = 0, v = 0;
        for (int s = 0;; s += 7) {
            uint8_t c = static_cast<uint8_t>(bytes[pos++]);
            key |= static_cast<uint64_t>(c & 0x7f) << s;
            if (!(c & 0x80))
                break;
        }
        for (int s = 0;; s += 7) {
            uint8_t c = static_cast<uint8_t>(bytes[pos++]);
            v |= static_cast<uint64_t>(c & 0x7f) << s;
            if (!(c & 0x80))
                break;
        }
        if ((key & 7) == 2)
            pos += v;
        if ((key >> 3) == kModelGraph)
            graph_end = pos;
    }
    ASSERT_GT(graph_end, 0u);
    for (size_t cut = 0; cut < bytes.size(); cut++) {
        onnx_model *m = nullptr;
        osp_error *err =
            onnx_model_load_bytes(bytes.data(), cut, nullptr, nullptr, &m);
        if (cut < graph_end) {
            EXPECT_NE(err, nullptr) << "cut at " << cut;
        }
        if (err) {
            EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
            EXPECT_EQ(m, nullptr);
            osp_error_free(err);
        }
        onnx_model_free(m);
    }
}

// Random byte changes never crash; what fails, fails with INVALID_ARG.
TEST(OnnxLoaderTestData, FlippedBytesNeverCrash) {
    SKIP_WITHOUT_TESTDATA();
    std::string good =
        ReadFile(std::string(kTestData) + "/node/test_if/model.onnx");
    ASSERT_FALSE(good.empty());
    std::mt19937 rng(12345);
    size_t failed = 0;
    for (int round = 0; round < 3000; round++) {
        std::string bytes = good;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; f++)
            bytes[rng() % bytes.size()] = static_cast<char>(rng());
        onnx_model *m = nullptr;
        osp_error *err = onnx_model_load_bytes(bytes.data(), bytes.size(),
                                               nullptr, nullptr, &m);
        if (err) {
            failed++;
            EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG)
                << osp_error_message(err);
            osp_error_free(err);
        }
        onnx_model_free(m);
    }
    EXPECT_GT(failed, 100u);
}

TEST(OnnxLoaderTestData, TensorFileIsNotAModel) {
    SKIP_WITHOUT_TESTDATA();
    std::string bytes = ReadFile(std::string(kTestData) +
                                 "/node/test_abs/test_data_set_0/input_0.pb");
    ASSERT_FALSE(bytes.empty());
    EXPECT_TRUE(LoadFails(bytes, "bad protobuf"));
}

// ---- models written here ----

TEST(OnnxLoader, BuiltModel) {
    Pb attr_ints;
    attr_ints.Bytes(kAttrName, "perm").Varint(kAttrType, 7);
    for (int v : {0, 2, 1})
        attr_ints.Varint(kAttrInts, static_cast<uint64_t>(v));
    Pb attr_f, attr_s, attr_untyped, attr_strings;
    attr_f.Bytes(kAttrName, "alpha").Varint(kAttrType, 1).Float(kAttrF, 0.5f);
    attr_s.Bytes(kAttrName, "mode")
        .Varint(kAttrType, 3)
        .Bytes(kAttrS, std::string("a\0b", 3));
    attr_untyped.Bytes(kAttrName, "axis").Varint(kAttrI, 3); // no type: INT
    attr_strings.Bytes(kAttrName, "names")
        .Varint(kAttrType, 8)
        .Bytes(kAttrStrings, "p")
        .Bytes(kAttrStrings, "");
    Pb node = Node("Custom", {"x", "", "w"}, {"y", ""});
    node.Bytes(kNodeName, "n1")
        .Bytes(kNodeDomain, "ai.onnx")
        .Msg(kNodeAttribute, attr_ints)
        .Msg(kNodeAttribute, attr_f)
        .Msg(kNodeAttribute, attr_s)
        .Msg(kNodeAttribute, attr_untyped)
        .Msg(kNodeAttribute, attr_strings);
    Pb other = Node("Relu", {"y"}, {"z"});
    other.Bytes(kNodeDomain, "com.example");
    Pb w = Tensor("w", kFloat, {2});
    w.Bytes(kTensorRawData, FloatBytes({1.5f, -2.0f}));
    Pb g;
    g.Bytes(kGraphName, "main")
        .Msg(kGraphNode, node)
        .Msg(kGraphNode, other)
        .Msg(kGraphInitializer, w)
        .Msg(kGraphInput, Value("x", kFloat, {-1, 3}))
        .Msg(kGraphInput, Value("w", kFloat, {2}))
        .Msg(kGraphOutput, Value("z", kInt64, {}))
        .Msg(kGraphValueInfo, Value("y", kComplex64, {4}));
    Pb op_default, op_custom;
    op_default.Bytes(kOpsetDomain, "ai.onnx").Varint(kOpsetVersion, 17);
    op_custom.Bytes(kOpsetDomain, "com.example").Varint(kOpsetVersion, 2);
    Pb mp;
    mp.Varint(kModelIrVersion, 9)
        .Msg(kModelGraph, g)
        .Msg(kModelOpset, op_default)
        .Msg(kModelOpset, op_custom);
    ModelPtr m = LoadOk(mp.str());
    ASSERT_TRUE(m);
    EXPECT_EQ(m->ir_version, 9);
    EXPECT_STREQ(m->producer_name, "");
    EXPECT_EQ(onnx_model_opset(m.get(), ""), 17);
    EXPECT_EQ(onnx_model_opset(m.get(), "com.example"), 2);
    const onnx_graph *gr = m->graph;
    EXPECT_STREQ(gr->name, "main");
    ASSERT_EQ(gr->n_nodes, 2u);
    const onnx_node *n = &gr->nodes[0];
    EXPECT_STREQ(n->name, "n1");
    EXPECT_STREQ(n->domain, "");
    EXPECT_EQ(n->opset, 17);
    ASSERT_EQ(n->n_inputs, 3u);
    EXPECT_STREQ(n->inputs[1], "");
    ASSERT_EQ(n->n_outputs, 2u);
    EXPECT_STREQ(n->outputs[1], "");
    EXPECT_STREQ(gr->nodes[1].name, "");
    EXPECT_STREQ(gr->nodes[1].domain, "com.example");
    EXPECT_EQ(gr->nodes[1].opset, 2);

    const onnx_attr *perm = onnx_node_attr(n, "perm");
    ASSERT_NE(perm, nullptr);
    ASSERT_EQ(perm->type, ONNX_ATTR_INTS);
    ASSERT_EQ(perm->n, 3u);
    EXPECT_EQ(perm->ints[1], 2);
    const onnx_attr *alpha = onnx_node_attr(n, "alpha");
    ASSERT_NE(alpha, nullptr);
    EXPECT_EQ(alpha->type, ONNX_ATTR_FLOAT);
    EXPECT_EQ(alpha->f, 0.5f);
    const onnx_attr *mode = onnx_node_attr(n, "mode");
    ASSERT_NE(mode, nullptr);
    EXPECT_EQ(mode->type, ONNX_ATTR_STRING);
    ASSERT_EQ(mode->s_len, 3u);
    EXPECT_EQ(std::string(mode->s, mode->s_len), std::string("a\0b", 3));
    EXPECT_EQ(mode->s[3], '\0');
    const onnx_attr *axis = onnx_node_attr(n, "axis");
    ASSERT_NE(axis, nullptr);
    EXPECT_EQ(axis->type, ONNX_ATTR_INT);
    EXPECT_EQ(axis->i, 3);
    const onnx_attr *names = onnx_node_attr(n, "names");
    ASSERT_NE(names, nullptr);
    EXPECT_EQ(names->type, ONNX_ATTR_STRINGS);
    ASSERT_EQ(names->n, 2u);
    EXPECT_STREQ(names->strings[0], "p");
    EXPECT_STREQ(names->strings[1], "");
    EXPECT_EQ(onnx_node_attr(n, "missing"), nullptr);

    // "w" names an initializer: only "x" is an input.
    ASSERT_EQ(gr->n_inputs, 1u);
    const onnx_value_info *x = &gr->inputs[0];
    EXPECT_STREQ(x->name, "x");
    ASSERT_TRUE(x->has_shape);
    ASSERT_EQ(x->rank, 2);
    EXPECT_EQ(x->dims[0], -1);
    EXPECT_STREQ(x->dim_params[0], "N");
    EXPECT_EQ(x->dims[1], 3);
    EXPECT_EQ(x->dim_params[1], nullptr);
    ASSERT_EQ(gr->n_outputs, 1u);
    EXPECT_EQ(gr->outputs[0].dtype, OSP_TYPE_INT64);
    EXPECT_TRUE(gr->outputs[0].has_shape);
    EXPECT_EQ(gr->outputs[0].rank, 0);
    ASSERT_EQ(gr->n_value_infos, 1u);
    EXPECT_EQ(gr->value_infos[0].dtype, OSP_TYPE_INVALID); // complex
    ASSERT_EQ(gr->n_initializers, 1u);
    const onnx_tensor *wt = &gr->initializers[0].tensor;
    ASSERT_EQ(wt->byte_size, 8u);
    EXPECT_EQ(static_cast<const float *>(wt->data)[1], -2.0f);
}

TEST(OnnxLoader, ValueInfoWithoutShapeOrTensorType) {
    Pb no_shape_type;
    no_shape_type.Msg(kTypeTensor, Pb().Varint(kTensorTypeElem, kFloat));
    Pb seq_type;
    seq_type.Msg(kTypeSequence, Pb().Msg(1, no_shape_type));
    Pb unknown_dim;
    unknown_dim.Msg(kShapeDim, Pb());
    Pb unknown_dim_type;
    unknown_dim_type.Msg(kTypeTensor, Pb().Varint(kTensorTypeElem, kFloat)
                                          .Msg(kTensorTypeShape, unknown_dim));
    Pb g;
    g.Msg(kGraphNode, Node("Identity", {"a"}, {"b"}))
        .Msg(kGraphInput,
             Pb().Bytes(kValueName, "a").Msg(kValueType, no_shape_type))
        .Msg(kGraphInput, Pb().Bytes(kValueName, "s").Msg(kValueType, seq_type))
        .Msg(kGraphInput, Pb().Bytes(kValueName, "u"))
        .Msg(kGraphOutput,
             Pb().Bytes(kValueName, "b").Msg(kValueType, unknown_dim_type));
    ModelPtr m = LoadOk(Model(g));
    ASSERT_TRUE(m);
    ASSERT_EQ(m->graph->n_inputs, 3u);
    EXPECT_EQ(m->graph->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_FALSE(m->graph->inputs[0].has_shape);
    EXPECT_EQ(m->graph->inputs[1].dtype, OSP_TYPE_INVALID);
    EXPECT_FALSE(m->graph->inputs[1].has_shape);
    EXPECT_EQ(m->graph->inputs[2].dtype, OSP_TYPE_INVALID);
    ASSERT_EQ(m->graph->outputs[0].rank, 1);
    EXPECT_EQ(m->graph->outputs[0].dims[0], -1);
    EXPECT_EQ(m->graph->outputs[0].dim_params[0], nullptr);
}

TEST(OnnxLoader, TypedTensorFields) {
    Pb f16 = Tensor("h", kFloat16, {2});
    f16.Varint(kTensorInt32Data, 0x3c00).Varint(kTensorInt32Data, 0xc000);
    Pb b = Tensor("b", kBool, {3});
    for (int v : {0, 1, 7})
        b.Varint(kTensorInt32Data, static_cast<uint64_t>(v));
    Pb i8 = Tensor("i8", kInt8, {2});
    i8.Varint(kTensorInt32Data, static_cast<uint64_t>(int64_t{-3}))
        .Varint(kTensorInt32Data, 5);
    Pb u32 = Tensor("u32", kUint32, {2});
    u32.Varint(kTensorUint64Data, 4000000000u).Varint(kTensorUint64Data, 1);
    Pb i64 = Tensor("i64", kInt64, {1});
    i64.Varint(kTensorInt64Data, static_cast<uint64_t>(int64_t{-9}));
    Pb f = Tensor("f", kFloat, {1, 1});
    f.Float(kTensorFloatData, 2.25f);
    Pb s = Tensor("s", kString, {2});
    s.Bytes(kTensorStringData, "hi").Bytes(kTensorStringData, "");
    Pb scalar = Tensor("scalar", kInt32, {});
    scalar.Varint(kTensorInt32Data, 42);
    Pb empty = Tensor("empty", kFloat, {0, 5});

    Pb g;
    g.Msg(kGraphNode, Node("Identity", {"x"}, {"y"}));
    for (const Pb *t : {&f16, &b, &i8, &u32, &i64, &f, &s, &scalar, &empty})
        g.Msg(kGraphInitializer, *t);
    ModelPtr m = LoadOk(Model(g));
    ASSERT_TRUE(m);
    const onnx_initializer *in = m->graph->initializers;
    ASSERT_EQ(m->graph->n_initializers, 9u);
    auto bytes = [](const onnx_tensor &t) {
        return std::vector<uint8_t>(static_cast<uint8_t *>(t.data),
                                    static_cast<uint8_t *>(t.data) +
                                        t.byte_size);
    };
    EXPECT_EQ(in[0].tensor.dtype, OSP_TYPE_FP16);
    EXPECT_EQ(bytes(in[0].tensor),
              (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0xc0}));
    EXPECT_EQ(in[1].tensor.dtype, OSP_TYPE_BOOL);
    EXPECT_EQ(bytes(in[1].tensor), (std::vector<uint8_t>{0, 1, 1}));
    EXPECT_EQ(in[2].tensor.dtype, OSP_TYPE_INT8);
    EXPECT_EQ(bytes(in[2].tensor), (std::vector<uint8_t>{0xfd, 5}));
    EXPECT_EQ(in[3].tensor.dtype, OSP_TYPE_UINT32);
    ASSERT_EQ(in[3].tensor.byte_size, 8u);
    EXPECT_EQ(static_cast<uint32_t *>(in[3].tensor.data)[0], 4000000000u);
    EXPECT_EQ(static_cast<int64_t *>(in[4].tensor.data)[0], -9);
    EXPECT_EQ(static_cast<float *>(in[5].tensor.data)[0], 2.25f);
    EXPECT_EQ(in[6].tensor.dtype, OSP_TYPE_BYTES);
    EXPECT_EQ(bytes(in[6].tensor),
              (std::vector<uint8_t>{2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0}));
    EXPECT_EQ(in[7].tensor.shape.rank, 0);
    EXPECT_EQ(static_cast<int32_t *>(in[7].tensor.data)[0], 42);
    EXPECT_EQ(in[8].tensor.byte_size, 0u);
    EXPECT_NE(in[8].tensor.data, nullptr);
    for (size_t i = 0; i < 9; i++)
        EXPECT_EQ(reinterpret_cast<uintptr_t>(in[i].tensor.data) % 64, 0u);
}

TEST(OnnxLoader, SubgraphAttributes) {
    Pb body;
    body.Bytes(kGraphName, "body")
        .Msg(kGraphNode, Node("Neg", {"x"}, {"y"}))
        .Msg(kGraphOutput, Value("y", kFloat, {1}));
    Pb then_attr, graphs_attr;
    then_attr.Bytes(kAttrName, "then_branch")
        .Varint(kAttrType, 5)
        .Msg(kAttrG, body);
    graphs_attr.Bytes(kAttrName, "bodies")
        .Varint(kAttrType, 10)
        .Msg(kAttrGraphs, body)
        .Msg(kAttrGraphs, body);
    Pb value = Tensor("", kFloat, {1});
    value.Float(kTensorFloatData, 3.0f);
    Pb tensor_attr;
    tensor_attr.Bytes(kAttrName, "value")
        .Varint(kAttrType, 4)
        .Msg(kAttrT, value);
    Pb node = Node("If", {"c"}, {"r"});
    node.Msg(kNodeAttribute, then_attr)
        .Msg(kNodeAttribute, graphs_attr)
        .Msg(kNodeAttribute, tensor_attr);
    Pb g;
    g.Msg(kGraphNode, node);
    ModelPtr m = LoadOk(Model(g, 16));
    ASSERT_TRUE(m);
    const onnx_node *n = &m->graph->nodes[0];
    const onnx_attr *then_branch = onnx_node_attr(n, "then_branch");
    ASSERT_NE(then_branch, nullptr);
    ASSERT_EQ(then_branch->type, ONNX_ATTR_GRAPH);
    EXPECT_STREQ(then_branch->g->name, "body");
    ASSERT_EQ(then_branch->g->n_nodes, 1u);
    EXPECT_EQ(then_branch->g->nodes[0].opset, 16);
    const onnx_attr *bodies = onnx_node_attr(n, "bodies");
    ASSERT_NE(bodies, nullptr);
    ASSERT_EQ(bodies->type, ONNX_ATTR_GRAPHS);
    ASSERT_EQ(bodies->n, 2u);
    EXPECT_STREQ(bodies->graphs[1]->nodes[0].op_type, "Neg");
    const onnx_attr *v = onnx_node_attr(n, "value");
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->type, ONNX_ATTR_TENSOR);
    EXPECT_EQ(static_cast<float *>(v->t->data)[0], 3.0f);
}

// ---- hostile models ----

TEST(OnnxLoaderHostile, GarbageAndEmpty) {
    EXPECT_TRUE(LoadFails("", "no graph"));
    EXPECT_TRUE(LoadFails("hello, world: this is not a model", ""));
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; round++) {
        std::string junk(1 + rng() % 300, '\0');
        for (auto &c : junk)
            c = static_cast<char>(rng());
        EXPECT_TRUE(LoadFails(junk, "")) << round;
    }
    // Wire types protobuf-c does not take: a group, and type 7.
    EXPECT_TRUE(LoadFails(Pb().Append("\x0b\x0c").str(), "wire type 3"));
    EXPECT_TRUE(LoadFails(Pb().Append("\x0f").str(), "wire type 7"));
    // A field key or length that runs past the end.
    EXPECT_TRUE(LoadFails(Pb().Append("\x80").str(), "field key"));
    EXPECT_TRUE(LoadFails(Pb().Append("\x3a\x10\x00").str(), "length runs"));
    // A known field with the wrong wire type (graph as a varint).
    EXPECT_TRUE(LoadFails(Pb().Varint(kModelGraph, 1).str(), "wire type 0"));
    // A packed field cut inside a value.
    Pb t = Tensor("t", kFloat, {1});
    t.Bytes(kTensorFloatData, "\x01\x02\x03");
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(t)), "packed field"));
}

TEST(OnnxLoaderHostile, MissingPieces) {
    Pb mp;
    mp.Varint(kModelIrVersion, 8);
    EXPECT_TRUE(LoadFails(mp.str(), "no graph"));
    Pb g;
    g.Msg(kGraphNode, Pb().Bytes(kNodeInput, "x"));
    EXPECT_TRUE(LoadFails(Model(g), "has no op_type"));
    Pb g2;
    g2.Msg(kGraphInput, Value("", kFloat, {1}));
    EXPECT_TRUE(LoadFails(Model(g2), "graph input has no name"));
    Pb no_name_attr = Node("Relu", {"x"}, {"y"});
    no_name_attr.Msg(kNodeAttribute, Pb().Varint(kAttrI, 1));
    EXPECT_TRUE(LoadFails(Model(Pb().Msg(kGraphNode, no_name_attr)),
                          "attribute without a name"));
    Pb bad_type = Node("Relu", {"x"}, {"y"});
    bad_type.Msg(kNodeAttribute,
                 Pb().Bytes(kAttrName, "a").Varint(kAttrType, 99));
    EXPECT_TRUE(LoadFails(Model(Pb().Msg(kGraphNode, bad_type)),
                          "unknown attribute type 99"));
    Pb no_tensor = Node("Constant", {}, {"y"});
    no_tensor.Msg(kNodeAttribute,
                  Pb().Bytes(kAttrName, "value").Varint(kAttrType, 4));
    EXPECT_TRUE(LoadFails(Model(Pb().Msg(kGraphNode, no_tensor)),
                          "without its tensor"));
    Pb nul_string;
    nul_string.Bytes(kGraphName, std::string("a\0b", 3));
    EXPECT_TRUE(LoadFails(Model(nul_string), "NUL"));
}

TEST(OnnxLoaderHostile, BadInitializers) {
    Pb short_raw = Tensor("w", kFloat, {2, 3});
    short_raw.Bytes(kTensorRawData, FloatBytes({1, 2, 3}));
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(short_raw)),
                          "initializer 'w': raw_data holds 12 bytes, but "
                          "FLOAT [2,3] needs 24"));
    Pb few_floats = Tensor("w", kFloat, {3});
    few_floats.Float(kTensorFloatData, 1.0f);
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(few_floats)),
                          "float_data holds 1 values"));
    Pb wrong_field = Tensor("w", kFloat, {1});
    wrong_field.Varint(kTensorInt64Data, 1);
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(wrong_field)),
                          "belong in float_data, but it has int64_data"));
    Pb both = Tensor("w", kFloat, {1});
    both.Float(kTensorFloatData, 1.0f).Bytes(kTensorRawData, FloatBytes({1}));
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(both)), "both"));
    Pb negative = Tensor("w", kFloat, {2, -1});
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(negative)),
                          "initializer 'w': dimension 1 is negative"));
    Pb overflow = Tensor("w", kFloat, {int64_t{1} << 40, int64_t{1} << 40});
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(overflow)), "overflows"));
    // Huge but representable: refused by the byte limit, never allocated.
    Pb huge = Tensor("w", kFloat, {int64_t{1} << 30, int64_t{1} << 20});
    EXPECT_TRUE(
        LoadFails(Model(GraphWithInitializer(huge)), "more than the limit"));
    Pb rank17 = Tensor("w", kFloat, std::vector<int64_t>(17, 1));
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(rank17)), "rank 17"));
    Pb complex = Tensor("c", kComplex64, {1});
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(complex)),
                          "initializer 'c': data type COMPLEX64 (14) is not "
                          "supported"));
    Pb f8 = Tensor("q", kFloat8E4M3FN, {1});
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(f8)), "FLOAT8E4M3FN"));
    Pb untyped;
    untyped.Bytes(kTensorName, "u");
    EXPECT_TRUE(
        LoadFails(Model(GraphWithInitializer(untyped)), "no data type"));
    Pb raw_strings = Tensor("s", kString, {1});
    raw_strings.Bytes(kTensorRawData, "abcd");
    EXPECT_TRUE(
        LoadFails(Model(GraphWithInitializer(raw_strings)), "string_data"));
    Pb few_strings = Tensor("s", kString, {2});
    few_strings.Bytes(kTensorStringData, "a");
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(few_strings)),
                          "string_data holds 1 strings"));
    Pb no_name = Tensor("", kFloat, {0});
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(no_name)),
                          "initializer 0 has no name"));
    Pb sparse;
    sparse.Msg(kGraphNode, Node("Identity", {"x"}, {"y"}))
        .Msg(kGraphSparseInitializer, Pb().Varint(3, 1));
    EXPECT_TRUE(
        LoadFails(Model(sparse), "sparse initializers are not supported"));

    // The tensor byte limit.
    Pb four = Tensor("w", kFloat, {4});
    four.Bytes(kTensorRawData, FloatBytes({1, 2, 3, 4}));
    onnx_load_limits limits = {};
    limits.max_tensor_bytes = 15;
    EXPECT_TRUE(LoadFails(Model(GraphWithInitializer(four)),
                          "limit of 15 bytes", nullptr, &limits));
    limits.max_tensor_bytes = 16;
    EXPECT_TRUE(LoadOk(Model(GraphWithInitializer(four)), nullptr, &limits));
}

TEST(OnnxLoaderHostile, Limits) {
    std::string model = Model(GraphWithInitializer(Tensor("e", kFloat, {0})));
    onnx_load_limits limits = {};
    limits.max_file_bytes = model.size() - 1;
    EXPECT_TRUE(LoadFails(model, "over the limit", nullptr, &limits));

    Pb g;
    for (int i = 0; i < 6; i++)
        g.Msg(kGraphNode, Node("Relu", {"x"}, {"x"}));
    limits = {};
    limits.max_nodes = 5;
    EXPECT_TRUE(LoadFails(Model(g), "has 6 nodes, over the limit of 5", nullptr,
                          &limits));
    limits.max_nodes = 6;
    EXPECT_TRUE(LoadOk(Model(g), nullptr, &limits));
}

// If(then_branch: If(then_branch: ...)) `levels` deep.
std::string NestedIfModel(int levels) {
    Pb inner;
    inner.Msg(kGraphNode, Node("Neg", {"x"}, {"y"}));
    for (int i = 0; i < levels; i++) {
        Pb attr;
        attr.Bytes(kAttrName, "then_branch")
            .Varint(kAttrType, 5)
            .Msg(kAttrG, inner);
        Pb node = Node("If", {"c"}, {"y"});
        node.Msg(kNodeAttribute, attr);
        Pb outer;
        outer.Msg(kGraphNode, node);
        inner = outer;
    }
    return Model(inner);
}

TEST(OnnxLoaderHostile, DeepNesting) {
    EXPECT_TRUE(LoadOk(NestedIfModel(16)));
    EXPECT_TRUE(LoadFails(NestedIfModel(17), "nest deeper than 16 levels"));
    onnx_load_limits limits = {};
    limits.max_graph_depth = 20;
    EXPECT_TRUE(LoadOk(NestedIfModel(20), nullptr, &limits));
    // Past what protobuf-c may recurse into, whatever the limit says.
    limits.max_graph_depth = 1000000;
    EXPECT_TRUE(LoadFails(NestedIfModel(200), "messages nest deeper than 256",
                          nullptr, &limits));
    // Sequence(Sequence(...)) types, 3000 deep: refused before protobuf-c
    // recurses.
    std::string type = Pb().Msg(kTypeTensor, Pb()).str();
    for (int i = 0; i < 3000; i++) {
        Pb seq;
        seq.Bytes(1, type);
        type = Pb().Msg(kTypeSequence, seq).str();
    }
    Pb value;
    value.Bytes(kValueName, "v").Bytes(kValueType, type);
    Pb g;
    g.Msg(kGraphInput, value);
    EXPECT_TRUE(LoadFails(Model(g), "messages nest deeper than"));
}

// A file that protobuf-c would blow up a hundredfold (empty attributes) is
// refused by the unpack budget.
TEST(OnnxLoaderHostile, UnpackMemoryIsBounded) {
    Pb node = Node("Relu", {"x"}, {"y"});
    std::string empty_attr = Pb().Msg(kNodeAttribute, Pb()).str();
    std::string attrs;
    attrs.reserve(empty_attr.size() * 1500000);
    for (int i = 0; i < 1500000; i++)
        attrs += empty_attr;
    node.Append(attrs);
    Pb g;
    g.Msg(kGraphNode, node);
    EXPECT_TRUE(LoadFails(Model(g), "bytes of memory to unpack"));
}

// ---- external data ----

class OnnxLoaderExternal : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_FALSE(tmp_.path().empty());
        dir_ = tmp_.path() + "/model";
        fs::create_directories(dir_ + "/weights");
        std::string data = "0123" + FloatBytes({1, 2, 3, 4});
        WriteFile(dir_ + "/weights/w.bin", data);
        WriteFile(tmp_.path() + "/outside.bin", data);
    }

    // A model whose initializer "w" (FLOAT [n]) lives in external data.
    static std::string ExternalModel(
        const std::vector<std::pair<std::string, std::string>> &entries,
        int64_t n = 4) {
        Pb t = Tensor("w", kFloat, {n});
        for (const auto &e : entries)
            t.Msg(kTensorExternalData,
                  Pb().Bytes(1, e.first).Bytes(2, e.second));
        t.Varint(kTensorDataLocation, 1);
        return Model(GraphWithInitializer(t));
    }

    ::testing::AssertionResult Fails(const std::string &model,
                                     const std::string &text) {
        return LoadFails(model, text, dir_.c_str());
    }

    TempDir tmp_;
    std::string dir_;
};

TEST_F(OnnxLoaderExternal, ReadsOffsetAndLength) {
    ModelPtr m = LoadOk(
        ExternalModel(
            {{"location", "weights/w.bin"}, {"offset", "4"}, {"length", "16"}}),
        dir_.c_str());
    ASSERT_TRUE(m);
    const onnx_tensor *w = &m->graph->initializers[0].tensor;
    ASSERT_EQ(w->byte_size, 16u);
    EXPECT_EQ(static_cast<float *>(w->data)[3], 4.0f);
    // No length: to the end of the file.
    m = LoadOk(
        ExternalModel({{"location", "./weights/w.bin"}, {"offset", "4"}}),
        dir_.c_str());
    ASSERT_TRUE(m);
    EXPECT_EQ(static_cast<float *>(m->graph->initializers[0].tensor.data)[0],
              1.0f);
}

TEST_F(OnnxLoaderExternal, FromAFileAndItsFolder) {
    std::string model = ExternalModel(
        {{"location", "weights/w.bin"}, {"offset", "4"}, {"length", "16"}});
    WriteFile(dir_ + "/model.onnx", model);
    for (const std::string &path : {dir_ + "/model.onnx", dir_}) {
        onnx_model *m = nullptr;
        ASSERT_OK(onnx_model_load_file(path.c_str(), nullptr, &m));
        EXPECT_EQ(m->graph->initializers[0].tensor.byte_size, 16u);
        onnx_model_free(m);
    }
    // Errors name the file.
    WriteFile(dir_ + "/bad.onnx", "\x0f");
    onnx_model *m = nullptr;
    std::string msg = TakeMessage(
        onnx_model_load_file((dir_ + "/bad.onnx").c_str(), nullptr, &m));
    EXPECT_EQ(msg.rfind(dir_ + "/bad.onnx: ", 0), 0u) << msg;
    msg = TakeMessage(
        onnx_model_load_file((dir_ + "/none.onnx").c_str(), nullptr, &m));
    EXPECT_NE(msg.find("none.onnx: cannot open the model"), std::string::npos)
        << msg;
    EXPECT_EQ(m, nullptr);
}

TEST_F(OnnxLoaderExternal, RefusesLocationsOutsideTheFolder) {
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "../outside.bin"}, {"offset", "4"}}),
              "leaves the model's folder"));
    EXPECT_TRUE(Fails(ExternalModel({{"location", "weights/../../outside.bin"},
                                     {"offset", "4"}}),
                      "leaves the model's folder"));
    EXPECT_TRUE(Fails(ExternalModel({{"location", tmp_.path() + "/outside.bin"},
                                     {"offset", "4"}}),
                      "absolute"));
    ASSERT_EQ(symlink((tmp_.path() + "/outside.bin").c_str(),
                      (dir_ + "/link.bin").c_str()),
              0);
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "link.bin"}, {"offset", "4"}}),
              "lies outside the model's folder"));
    EXPECT_TRUE(Fails(ExternalModel({{"offset", "4"}}), "without a location"));
    EXPECT_TRUE(Fails(ExternalModel({{"location", "missing.bin"}}),
                      "external data file 'missing.bin'"));
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "weights"}}), "not a regular file"));
    // Given as bytes without a folder.
    EXPECT_TRUE(LoadFails(ExternalModel({{"location", "weights/w.bin"}}),
                          "without a folder"));
}

TEST_F(OnnxLoaderExternal, RefusesBadOffsetsAndLengths) {
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "weights/w.bin"}, {"offset", "100"}}),
              "offset 100 lies past the end"));
    EXPECT_TRUE(Fails(
        ExternalModel(
            {{"location", "weights/w.bin"}, {"offset", "8"}, {"length", "16"}}),
        "runs past the end"));
    EXPECT_TRUE(Fails(ExternalModel({{"location", "weights/w.bin"},
                                     {"offset", "0"},
                                     {"length", "18446744073709551615"}}),
                      "runs past the end"));
    EXPECT_TRUE(Fails(
        ExternalModel(
            {{"location", "weights/w.bin"}, {"offset", "4"}, {"length", "12"}}),
        "has 12 bytes, but the tensor's type and dims need 16"));
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "weights/w.bin"}, {"offset", "-4"}}),
              "offset '-4' is not a number"));
    EXPECT_TRUE(Fails(ExternalModel({{"location", "weights/w.bin"},
                                     {"offset", "4"},
                                     {"length", "99999999999999999999"}}),
                      "is not a number"));
    // Huge dims are refused before any file is touched.
    EXPECT_TRUE(
        Fails(ExternalModel({{"location", "weights/w.bin"}}, int64_t{1} << 40),
              "more than the limit"));
}

TEST(OnnxTensorFile, HostileTensorFiles) {
    TempDir tmp;
    ASSERT_FALSE(tmp.path().empty());
    std::string path = tmp.path() + "/t.pb";
    onnx_tensor t = {};
    char *name = nullptr;

    Pb good = Tensor("g", kInt32, {2});
    good.Varint(kTensorInt32Data, 1).Varint(kTensorInt32Data, 2);
    WriteFile(path, good.str());
    ASSERT_OK(onnx_tensor_load_pb_file(path.c_str(), &t, &name));
    EXPECT_STREQ(name, "g");
    EXPECT_EQ(t.dtype, OSP_TYPE_INT32);
    EXPECT_EQ(static_cast<int32_t *>(t.data)[1], 2);
    onnx_tensor_clear(&t);
    free(name);
    name = nullptr;

    Pb bad = Tensor("b", kFloat, {3});
    bad.Bytes(kTensorRawData, "12345");
    WriteFile(path, bad.str());
    std::string msg =
        TakeMessage(onnx_tensor_load_pb_file(path.c_str(), &t, &name));
    EXPECT_NE(msg.find("tensor 'b': raw_data holds 5 bytes"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    EXPECT_EQ(name, nullptr);
    EXPECT_EQ(t.data, nullptr);

    WriteFile(path, good.str().substr(0, good.str().size() - 1));
    msg = TakeMessage(onnx_tensor_load_pb_file(path.c_str(), &t, &name));
    EXPECT_NE(msg.find("bad protobuf"), std::string::npos) << msg;
    msg = TakeMessage(onnx_tensor_load_pb_file(tmp.path().c_str(), &t, &name));
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
    EXPECT_EQ(name, nullptr);
}

} // namespace

namespace {

// Conv -> BatchNormalization (fused into one Conv with rescaled copies of
// the weights) beside a plain Conv that reads weights of its own, "w",
// and a second time the first Conv's, "w_bn" only if `share`.
std::string ConvBnModel(bool share) {
    std::vector<float> w(3 * 2 * 9), stats(3);
    for (size_t i = 0; i < w.size(); i++)
        w[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    Pb g;
    g.Bytes(kGraphName, "g")
        .Msg(kGraphNode, Node("Conv", {"x", "w_bn"}, {"c"}))
        .Msg(kGraphNode, Node("BatchNormalization",
                              {"c", "scale", "beta", "mean", "var"}, {"y"}))
        .Msg(kGraphNode, Node("Conv", {"x", share ? "w_bn" : "w"}, {"z"}));
    for (const char *name : {"w_bn", "w"})
        g.Msg(kGraphInitializer, Tensor(name, kFloat, {3, 2, 3, 3})
                                     .Bytes(kTensorRawData, FloatBytes(w)));
    const float values[4][3] = {
        {1.5f, 0.5f, 2}, {0.1f, -0.2f, 0.3f}, {0, 0.2f, -0.1f}, {1, 2, 0.5f}};
    const char *names[4] = {"scale", "beta", "mean", "var"};
    for (int i = 0; i < 4; i++)
        g.Msg(kGraphInitializer,
              Tensor(names[i], kFloat, {3})
                  .Bytes(kTensorRawData, FloatBytes({values[i][0], values[i][1],
                                                     values[i][2]})));
    g.Msg(kGraphInput, Value("x", kFloat, {1, 2, 5, 5}))
        .Msg(kGraphOutput, Value("y", kFloat, {1, 3, 3, 3}))
        .Msg(kGraphOutput, Value("z", kFloat, {1, 3, 3, 3}));
    return Model(g);
}

const onnx_tensor *Initializer(const onnx_rt_model *m, const char *name) {
    const onnx_graph *g = onnx_rt_model_graph(m);
    for (size_t i = 0; i < g->n_initializers; i++)
        if (strcmp(g->initializers[i].name, name) == 0)
            return &g->initializers[i].tensor;
    return nullptr;
}

// *out = both outputs of a model from ConvBnModel on the CPU device.
void RunConvBn(onnx_rt_model *m, std::vector<float> *out) {
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    onnx_session *s = nullptr;
    ASSERT_OK(onnx_session_new(m, osp_device_cpu(), stream, &s));
    std::vector<float> x(2 * 25);
    out->assign(2 * 27, NAN);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = static_cast<float>(i % 5) - 2.0f;
    onnx_io in = {OSP_TYPE_FP32, {4, {1, 2, 5, 5}}, x.data(), x.size() * 4, nullptr};
    auto alloc = [](void *ctx, size_t index, osp_datatype, const osp_shape *,
                    size_t bytes, void **data) -> osp_error * {
        float *o = static_cast<float *>(ctx);
        *data =
            bytes == 27 * sizeof(float) && index < 2 ? o + 27 * index : nullptr;
        return nullptr;
    };
    ASSERT_OK(onnx_session_run(s, &in, 1, alloc, out->data()));
    ASSERT_OK(osp_stream_synchronize(stream));
    onnx_session_free(s);
    osp_stream_free(stream);
}

// Fusion frees the initializers only the fused-away nodes read (without
// this a ResNet kept its weights twice), keeps one a live node still
// reads and one no node read, and both plans compute the same.
TEST(OnnxPrepare, FusionFreesTheInitializersItReplaced) {
    for (bool share : {false, true}) {
        SCOPED_TRACE(share ? "w_bn also read by the plain Conv" : "");
        std::string bytes = ConvBnModel(share);
        onnx_rt_model *fused = nullptr, *plain = nullptr;
        ASSERT_OK(onnx_rt_model_new(LoadOk(bytes).release(), nullptr, &fused));
        onnx_rt_options no_fusion = {};
        no_fusion.fuse = false;
        ASSERT_OK(
            onnx_rt_model_new(LoadOk(bytes).release(), &no_fusion, &plain));
        for (const char *name : {"scale", "beta", "mean", "var"}) {
            EXPECT_EQ(Initializer(fused, name)->data, nullptr) << name;
            EXPECT_NE(Initializer(plain, name)->data, nullptr) << name;
        }
        EXPECT_EQ(Initializer(fused, "w_bn")->data == nullptr, !share);
        EXPECT_NE(Initializer(plain, "w_bn")->data, nullptr);
        // with share, no node ever read "w": kept (a subgraph may name it)
        EXPECT_NE(Initializer(fused, "w")->data, nullptr);
        std::vector<float> got, want;
        RunConvBn(fused, &got);
        RunConvBn(plain, &want);
        for (size_t i = 0; i < want.size(); i++)
            EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i]))
                << "output element " << i;
        onnx_rt_model_free(fused);
        onnx_rt_model_free(plain);
    }
}

} // namespace

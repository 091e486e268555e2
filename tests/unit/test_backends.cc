// The built-in model backends (identity, add_sub, dense, affine) and the
// safetensors reader, driven directly on the CPU device through a
// hand-built osp_execute_ctx, the way the scheduler drives them.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "../../backends/backends.h"
#include "../../backends/builtin.h"
#include "../../backends/dense/safetensors.h"
#include "execute_ctx.h"
#include "half.h"
#include "osp_test.h"
#include "osprey/backend.h"
#include "osprey/device.h"
#include "osprey/model_config.h"
}

namespace {

namespace fs = std::filesystem;

// Passes when `err` is an error whose message contains `text`; frees it.
::testing::AssertionResult FailsWith(osp_error *err, const std::string &text) {
    if (!err)
        return ::testing::AssertionFailure()
               << "succeeded; expected an error containing \"" << text << "\"";
    std::string msg = TakeMessage(err);
    if (msg.find(text) == std::string::npos)
        return ::testing::AssertionFailure()
               << "error \"" << msg << "\" lacks \"" << text << "\"";
    return ::testing::AssertionSuccess() << msg;
}

struct ConfigDeleter {
    void operator()(osp_model_config *c) const {
        osp_model_config_free(c);
    }
};
using ConfigPtr = std::unique_ptr<osp_model_config, ConfigDeleter>;

ConfigPtr ParseConfig(const std::string &text) {
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "test.pbtxt", &cfg);
    if (err)
        ADD_FAILURE() << "config does not parse: " << TakeMessage(err) << "\n"
                      << text;
    return ConfigPtr(cfg);
}

std::string Io(const char *name, const std::string &type,
               const std::string &dims) {
    return std::string("{ name: \"") + name + "\" data_type: TYPE_" + type +
           " dims: " + dims + " }";
}

// The built-in backend named `name`, or nullptr (the server's lookup, over
// the list main() registers).
const osp_backend *FindBackend(const char *name) {
    for (size_t i = 0; name && i < backends_builtin_count; i++)
        if (strcmp(backends_builtin[i]->name, name) == 0)
            return backends_builtin[i];
    return nullptr;
}

// A model, one instance of it on the CPU device, and its stream.
class LoadedModel {
  public:
    explicit LoadedModel(const char *backend_name)
        : backend_(FindBackend(backend_name)) {}
    ~LoadedModel() {
        if (instance_)
            backend_->instance_free(instance_);
        if (model_)
            backend_->model_free(model_);
        osp_stream_free(stream_);
    }
    LoadedModel(const LoadedModel &) = delete;
    LoadedModel &operator=(const LoadedModel &) = delete;

    osp_error *Load(const osp_model_config *cfg,
                    const std::string &version_path = "/nonexistent") {
        if (!backend_)
            return osp_error_new(OSP_ERROR_NOT_FOUND, "no such backend");
        osp_error *err =
            backend_->model_new(cfg, version_path.c_str(), &model_);
        if (!err)
            err = osp_stream_new(osp_device_cpu(), &stream_);
        if (!err)
            err = backend_->instance_new(model_, osp_device_cpu(), stream_,
                                         &instance_);
        return err;
    }
    // Just model_new: for load errors.
    osp_error *LoadModelOnly(const osp_model_config *cfg,
                             const std::string &version_path) {
        return backend_->model_new(cfg, version_path.c_str(), &model_);
    }
    osp_error *Execute(osp_execute_ctx *ctx) {
        osp_error *err = backend_->execute(instance_, ctx);
        return err ? err : osp_stream_synchronize(stream_);
    }
    osp_stream *stream() const {
        return stream_;
    }

  private:
    const osp_backend *backend_;
    void *model_ = nullptr;
    void *instance_ = nullptr;
    osp_stream *stream_ = nullptr;
};

// One batch: inputs in CPU device memory, and the ctx over them.
class Batch {
  public:
    Batch(int64_t batch_size, size_t n_outputs)
        : outputs_(n_outputs), output_buffers_(n_outputs, nullptr),
          requested_(new bool[n_outputs]) {
        for (size_t i = 0; i < n_outputs; i++)
            requested_[i] = true;
        ctx_.device = osp_device_cpu();
        ctx_.batch_size = batch_size;
    }
    ~Batch() {
        execute_ctx_release_outputs(&ctx_);
        for (osp_buffer *b : input_buffers_)
            osp_buffer_free(b);
    }
    Batch(const Batch &) = delete;
    Batch &operator=(const Batch &) = delete;

    void AddInput(const char *name, osp_datatype dtype,
                  const std::vector<int64_t> &shape, const void *bytes,
                  size_t n) {
        // No bytes at all: no memory, as the core passes an empty tensor.
        osp_buffer *buf = nullptr;
        if (bytes || n) {
            osp_error *err = osp_device_alloc(osp_device_cpu(), n, &buf);
            ASSERT_EQ(err, nullptr) << TakeMessage(err);
            if (n)
                memcpy(buf->data, bytes, n); // CPU device memory is host memory
            input_buffers_.push_back(buf);
        }
        osp_backend_tensor t{};
        t.name = name;
        t.dtype = dtype;
        t.shape.rank = (int)shape.size();
        for (size_t i = 0; i < shape.size(); i++)
            t.shape.dims[i] = shape[i];
        t.data = buf ? buf->data : nullptr;
        t.byte_size = n;
        inputs_.push_back(t);
    }
    template <typename T>
    void AddInput(const char *name, osp_datatype dtype,
                  const std::vector<int64_t> &shape, const std::vector<T> &v) {
        AddInput(name, dtype, shape, v.data(), v.size() * sizeof(T));
    }
    void SetRequested(size_t i, bool wanted) {
        requested_[i] = wanted;
    }

    osp_execute_ctx *Ctx(osp_stream *stream) {
        ctx_.stream = stream;
        ctx_.inputs = inputs_.data();
        ctx_.n_inputs = inputs_.size();
        ctx_.output_requested = requested_.get();
        ctx_.n_outputs = outputs_.size();
        ctx_.outputs = outputs_.data();
        ctx_.output_buffers = output_buffers_.data();
        return &ctx_;
    }
    const osp_backend_tensor &Output(size_t i) const {
        return outputs_[i];
    }
    std::vector<uint8_t> OutputBytes(size_t i) const {
        const uint8_t *p = static_cast<const uint8_t *>(outputs_[i].data);
        return std::vector<uint8_t>(p, p + outputs_[i].byte_size);
    }
    std::vector<int64_t> OutputShape(size_t i) const {
        const osp_shape &s = outputs_[i].shape;
        return std::vector<int64_t>(s.dims, s.dims + s.rank);
    }
    // What the core offers for a lone request on the CPU: each input's
    // buffer may move to an output (osp_execute_output_take_input). Every
    // input must have bytes.
    void OfferInputs() {
        slots_.clear();
        for (osp_buffer *&b : input_buffers_)
            slots_.push_back(&b);
        ctx_.input_slots = slots_.data();
    }

  private:
    osp_execute_ctx ctx_{};
    std::vector<osp_backend_tensor> inputs_;
    std::vector<osp_buffer *> input_buffers_;
    std::vector<osp_buffer **> slots_;
    std::vector<osp_backend_tensor> outputs_;
    std::vector<osp_buffer *> output_buffers_;
    std::unique_ptr<bool[]> requested_;
};

// ---- registry -------------------------------------------------------------

TEST(BackendRegistry, ListsEachBuiltinByName) {
    for (const char *name :
         {"identity", "add_sub", "dense", "affine", "string_add_sub"}) {
        const osp_backend *b = FindBackend(name);
        ASSERT_NE(b, nullptr) << name;
        EXPECT_STREQ(b->name, name);
        EXPECT_NE(b->model_new, nullptr);
        EXPECT_NE(b->execute, nullptr);
    }
    EXPECT_EQ(FindBackend("onnxruntime_nope"), nullptr);
    EXPECT_EQ(FindBackend(""), nullptr);
    EXPECT_EQ(FindBackend(nullptr), nullptr);
}

// ---- identity ---------------------------------------------------------------

std::vector<uint8_t> SerializeStrings(const std::vector<std::string> &items) {
    std::vector<uint8_t> out;
    for (const std::string &s : items) {
        uint32_t n = (uint32_t)s.size();
        for (int i = 0; i < 4; i++)
            out.push_back((uint8_t)(n >> (8 * i)));
        out.insert(out.end(), s.begin(), s.end());
    }
    return out;
}

std::string IdentityConfig(const std::string &params = "") {
    return "name: \"echo\" backend: \"identity\" max_batch_size: 8\n"
           "input [ " +
           Io("INPUT0", "FP32", "[ -1 ]") + ", " +
           Io("INPUT1", "INT64", "[ -1, -1 ]") + ", " +
           Io("INPUT2", "STRING", "[ -1 ]") +
           " ]\n"
           "output [ " +
           Io("OUTPUT0", "FP32", "[ -1 ]") + ", " +
           Io("OUTPUT1", "INT64", "[ -1, -1 ]") + ", " +
           Io("OUTPUT2", "STRING", "[ -1 ]") + " ]\n" + params;
}

TEST(IdentityBackend, EchoesEveryDatatypeAndShapeByPosition) {
    ConfigPtr cfg = ParseConfig(IdentityConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("identity");
    ASSERT_OK(m.Load(cfg.get()));

    struct Case {
        std::vector<int64_t> fp32_shape, int64_shape;
        std::vector<std::string> strings;
    };
    const Case cases[] = {
        {{1, 1}, {1, 1, 1}, {"hello"}},
        {{2, 5}, {2, 3, 4}, {"", "two"}},
        {{8, 3}, {8, 1, 2}, {"a", "bb", "ccc", "\xc3\xbc", "", "x", "y", "z"}},
        {{3, 0}, {3, 0, 7}, {"", "", ""}},
    };
    for (const Case &c : cases) {
        int64_t rows = c.fp32_shape[0];
        std::vector<float> f(rows * c.fp32_shape[1]);
        for (size_t i = 0; i < f.size(); i++)
            f[i] = 0.5f * (float)i - 3.0f;
        std::vector<int64_t> q(rows * c.int64_shape[1] * c.int64_shape[2]);
        for (size_t i = 0; i < q.size(); i++)
            q[i] = ((int64_t)1 << 40) - (int64_t)i * 7;
        std::vector<uint8_t> s = SerializeStrings(c.strings);
        std::vector<int64_t> s_shape = {rows, 1};
        if ((size_t)rows != c.strings.size())
            s_shape = {rows, (int64_t)c.strings.size() / rows};

        Batch batch(rows, 3);
        batch.AddInput("INPUT0", OSP_TYPE_FP32, c.fp32_shape, f);
        batch.AddInput("INPUT1", OSP_TYPE_INT64, c.int64_shape, q);
        batch.AddInput("INPUT2", OSP_TYPE_BYTES, s_shape, s);
        ASSERT_OK(m.Execute(batch.Ctx(m.stream())));

        EXPECT_EQ(batch.OutputShape(0), c.fp32_shape);
        EXPECT_EQ(batch.OutputShape(1), c.int64_shape);
        EXPECT_EQ(batch.OutputShape(2), s_shape);
        std::vector<uint8_t> f_bytes((uint8_t *)f.data(),
                                     (uint8_t *)(f.data() + f.size()));
        std::vector<uint8_t> q_bytes((uint8_t *)q.data(),
                                     (uint8_t *)(q.data() + q.size()));
        EXPECT_EQ(batch.OutputBytes(0), f_bytes);
        EXPECT_EQ(batch.OutputBytes(1), q_bytes);
        EXPECT_EQ(batch.OutputBytes(2), s);
        // A copy, not the input's memory.
        if (!f.empty()) {
            EXPECT_NE(batch.Output(0).data,
                      batch.Ctx(m.stream())->inputs[0].data);
        }
    }
}

// Offered the request's buffers, identity returns them instead of copies;
// an output whose input was already taken (none here) would be copied.
TEST(IdentityBackend, ALoneRequestsInputsBecomeItsOutputsWhenOffered) {
    ConfigPtr cfg = ParseConfig(IdentityConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("identity");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> f = {1.5f, -2.0f, 3.25f};
    std::vector<int64_t> q = {7, 8};
    std::vector<uint8_t> s = SerializeStrings({"x"});
    Batch batch(1, 3);
    batch.AddInput("INPUT0", OSP_TYPE_FP32, {1, 3}, f);
    batch.AddInput("INPUT1", OSP_TYPE_INT64, {1, 1, 2}, q);
    batch.AddInput("INPUT2", OSP_TYPE_BYTES, {1, 1}, s);
    batch.OfferInputs();
    osp_execute_ctx *ctx = batch.Ctx(m.stream());
    const void *in[3] = {ctx->inputs[0].data, ctx->inputs[1].data,
                         ctx->inputs[2].data};
    ASSERT_OK(m.Execute(ctx));
    for (size_t i = 0; i < 3; i++)
        EXPECT_EQ(batch.Output(i).data, in[i]) << i; // no copy
    std::vector<uint8_t> f_bytes((uint8_t *)f.data(),
                                 (uint8_t *)(f.data() + f.size()));
    EXPECT_EQ(batch.OutputBytes(0), f_bytes);
    EXPECT_EQ(batch.OutputShape(1), (std::vector<int64_t>{1, 1, 2}));
    EXPECT_EQ(batch.OutputBytes(2), s);
    // Taken once: the slot is empty now, a second take is refused.
    void *again = nullptr;
    EXPECT_FALSE(osp_execute_output_take_input(ctx, 0, 0, &again));
}

TEST(IdentityBackend, SkipsOutputsNobodyRequested) {
    ConfigPtr cfg = ParseConfig(IdentityConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("identity");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> f = {1, 2};
    std::vector<int64_t> q = {3, 4};
    std::vector<uint8_t> s = SerializeStrings({"a", "b"});
    Batch batch(2, 3);
    batch.AddInput("INPUT0", OSP_TYPE_FP32, {2, 1}, f);
    batch.AddInput("INPUT1", OSP_TYPE_INT64, {2, 1, 1}, q);
    batch.AddInput("INPUT2", OSP_TYPE_BYTES, {2, 1}, s);
    batch.SetRequested(0, false);
    batch.SetRequested(2, false);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.Output(0).data, nullptr);
    EXPECT_NE(batch.Output(1).data, nullptr);
    EXPECT_EQ(batch.Output(2).data, nullptr);
}

TEST(IdentityBackend, AnAbsentOptionalInputFailsOnlyIfItsOutputIsWanted) {
    ConfigPtr cfg = ParseConfig(IdentityConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("identity");
    ASSERT_OK(m.Load(cfg.get()));
    for (bool wanted : {false, true}) {
        std::vector<float> f = {1, 2};
        std::vector<uint8_t> s = SerializeStrings({"a", "b"});
        Batch batch(2, 3);
        batch.AddInput("INPUT0", OSP_TYPE_FP32, {2, 1}, f);
        batch.AddInput("INPUT1", OSP_TYPE_INT64, {}, nullptr, 0); // not sent
        batch.AddInput("INPUT2", OSP_TYPE_BYTES, {2, 1}, s);
        batch.SetRequested(1, wanted);
        osp_error *err = m.Execute(batch.Ctx(m.stream()));
        if (!wanted) {
            ASSERT_OK(err);
            EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{2, 1}));
        } else {
            EXPECT_TRUE(FailsWith(err, "output 1 was requested but optional "
                                       "input 'INPUT1' was not given"));
        }
    }
}

TEST(IdentityBackend, ExecuteDelaySleepsOnTheHost) {
    ConfigPtr cfg = ParseConfig(IdentityConfig(
        "parameters { key: \"execute_delay_ms\" value: { string_value: "
        "\"40\" } }"));
    ASSERT_TRUE(cfg);
    LoadedModel m("identity");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> f = {1};
    std::vector<int64_t> q = {2};
    std::vector<uint8_t> s = SerializeStrings({"a"});
    Batch batch(1, 3);
    batch.AddInput("INPUT0", OSP_TYPE_FP32, {1, 1}, f);
    batch.AddInput("INPUT1", OSP_TYPE_INT64, {1, 1, 1}, q);
    batch.AddInput("INPUT2", OSP_TYPE_BYTES, {1, 1}, s);
    auto start = std::chrono::steady_clock::now();
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_GE(elapsed, std::chrono::milliseconds(40));
}

TEST(IdentityBackend, RefusesConfigsThatDoNotPairUp) {
    const std::string counts = "name: \"echo\" backend: \"identity\"\n"
                               "input [ " +
                               Io("INPUT0", "FP32", "[ 4 ]") +
                               " ]\n"
                               "output [ " +
                               Io("OUTPUT0", "FP32", "[ 4 ]") + ", " +
                               Io("OUTPUT1", "FP32", "[ 4 ]") + " ]\n";
    const std::string dtypes = "name: \"echo\" backend: \"identity\"\n"
                               "input [ " +
                               Io("INPUT0", "FP32", "[ 4 ]") +
                               " ]\n"
                               "output [ " +
                               Io("OUTPUT0", "INT32", "[ 4 ]") + " ]\n";
    struct Case {
        std::string config, message;
    } cases[] = {
        {counts, "identity model 'echo': needs as many outputs as inputs"},
        {dtypes, "output 'OUTPUT0' is TYPE_INT32 but input 'INPUT0'"},
        {IdentityConfig("parameters { key: \"execute_delay_ms\" value: { "
                        "string_value: \"soon\" } }"),
         "parameter 'execute_delay_ms' must be an integer"},
        {IdentityConfig("parameters { key: \"execute_delay_ms\" value: { "
                        "string_value: \"-5\" } }"),
         "got '-5'"},
    };
    for (const Case &c : cases) {
        ConfigPtr cfg = ParseConfig(c.config);
        ASSERT_TRUE(cfg);
        LoadedModel m("identity");
        EXPECT_TRUE(
            FailsWith(m.LoadModelOnly(cfg.get(), "/nonexistent"), c.message));
    }
}

// ---- add_sub
// ------------------------------------------------------------------

// Values as the bytes of `dtype` (all test values are exact in each type).
std::vector<uint8_t> Encode(osp_datatype dtype, const std::vector<double> &v) {
    std::vector<uint8_t> out;
    auto put = [&out](const void *p, size_t n) {
        out.insert(out.end(), (const uint8_t *)p, (const uint8_t *)p + n);
    };
    for (double x : v) {
        if (dtype == OSP_TYPE_INT32) {
            int32_t y = (int32_t)x;
            put(&y, sizeof y);
        } else if (dtype == OSP_TYPE_INT64) {
            int64_t y = (int64_t)x;
            put(&y, sizeof y);
        } else if (dtype == OSP_TYPE_FP32) {
            float y = (float)x;
            put(&y, sizeof y);
        } else {
            uint16_t y = fp32_to_fp16((float)x);
            put(&y, sizeof y);
        }
    }
    return out;
}

std::vector<double> Decode(osp_datatype dtype, const std::vector<uint8_t> &b) {
    std::vector<double> out;
    size_t size = osp_datatype_byte_size(dtype);
    for (size_t off = 0; off + size <= b.size(); off += size) {
        const uint8_t *p = b.data() + off;
        if (dtype == OSP_TYPE_INT32) {
            int32_t y;
            memcpy(&y, p, sizeof y);
            out.push_back(y);
        } else if (dtype == OSP_TYPE_INT64) {
            int64_t y;
            memcpy(&y, p, sizeof y);
            out.push_back((double)y);
        } else if (dtype == OSP_TYPE_FP32) {
            float y;
            memcpy(&y, p, sizeof y);
            out.push_back(y);
        } else {
            uint16_t y;
            memcpy(&y, p, sizeof y);
            out.push_back(fp16_to_fp32(y));
        }
    }
    return out;
}

std::string AddSubConfig(const std::string &type, const std::string &in1_type,
                         const std::string &in1_dims = "[ 16 ]") {
    return "name: \"simple\" backend: \"add_sub\" max_batch_size: 8\n"
           "input [ " +
           Io("INPUT0", type, "[ 16 ]") + ", " +
           Io("INPUT1", in1_type, in1_dims) +
           " ]\n"
           "output [ " +
           Io("OUTPUT0", type, "[ 16 ]") + ", " +
           Io("OUTPUT1", type, "[ 16 ]") + " ]\n";
}

TEST(AddSubBackend, AddsAndSubtractsInEachDatatype) {
    const struct {
        osp_datatype dtype;
        const char *config_type;
    } types[] = {{OSP_TYPE_INT32, "INT32"},
                 {OSP_TYPE_INT64, "INT64"},
                 {OSP_TYPE_FP32, "FP32"},
                 {OSP_TYPE_FP16, "FP16"}};
    for (const auto &t : types) {
        SCOPED_TRACE(t.config_type);
        ConfigPtr cfg = ParseConfig(AddSubConfig(t.config_type, t.config_type));
        ASSERT_TRUE(cfg);
        LoadedModel m("add_sub");
        ASSERT_OK(m.Load(cfg.get()));

        const int64_t rows = 3;
        std::vector<double> a, b;
        for (int i = 0; i < rows * 16; i++) {
            a.push_back(3 * i - 20 + (t.dtype == OSP_TYPE_INT64 ? 1e12 : 0));
            b.push_back(7 - 2 * i + (t.dtype == OSP_TYPE_FP32 ? 0.25 : 0));
        }
        std::vector<uint8_t> ab = Encode(t.dtype, a), bb = Encode(t.dtype, b);
        Batch batch(rows, 2);
        batch.AddInput("INPUT0", t.dtype, {rows, 16}, ab);
        batch.AddInput("INPUT1", t.dtype, {rows, 16}, bb);
        ASSERT_OK(m.Execute(batch.Ctx(m.stream())));

        std::vector<double> sum = Decode(t.dtype, batch.OutputBytes(0));
        std::vector<double> diff = Decode(t.dtype, batch.OutputBytes(1));
        ASSERT_EQ(sum.size(), a.size());
        ASSERT_EQ(diff.size(), a.size());
        EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{rows, 16}));
        EXPECT_EQ(batch.OutputShape(1), (std::vector<int64_t>{rows, 16}));
        for (size_t i = 0; i < a.size(); i++) {
            EXPECT_EQ(sum[i], a[i] + b[i]) << i;
            EXPECT_EQ(diff[i], a[i] - b[i]) << i;
        }
    }
}

TEST(AddSubBackend, ComputesOnlyRequestedOutputs) {
    ConfigPtr cfg = ParseConfig(AddSubConfig("INT32", "INT32"));
    ASSERT_TRUE(cfg);
    LoadedModel m("add_sub");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<int32_t> a(16, 5), b(16, 2);
    Batch batch(1, 2);
    batch.AddInput("INPUT0", OSP_TYPE_INT32, {1, 16}, a);
    batch.AddInput("INPUT1", OSP_TYPE_INT32, {1, 16}, b);
    batch.SetRequested(0, false);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.Output(0).data, nullptr);
    EXPECT_EQ(Decode(OSP_TYPE_INT32, batch.OutputBytes(1)),
              std::vector<double>(16, 3.0));
}

TEST(AddSubBackend, RefusesBadConfigsWithClearMessages) {
    const std::string one_input = "name: \"simple\" backend: \"add_sub\"\n"
                                  "input [ " +
                                  Io("INPUT0", "INT32", "[ 16 ]") +
                                  " ]\n"
                                  "output [ " +
                                  Io("OUTPUT0", "INT32", "[ 16 ]") + ", " +
                                  Io("OUTPUT1", "INT32", "[ 16 ]") + " ]\n";
    struct Case {
        std::string config, message;
    } cases[] = {
        {one_input, "add_sub model 'simple': needs exactly 2 inputs and 2 "
                    "outputs, got 1 inputs and 2 outputs"},
        {AddSubConfig("FP64", "FP64"),
         "input 'INPUT0' is TYPE_FP64; supported"},
        {AddSubConfig("INT32", "FP32"),
         "input 'INPUT1' is TYPE_FP32 but input 'INPUT0' is TYPE_INT32"},
        {AddSubConfig("INT32", "INT32", "[ 8 ]"),
         "input 'INPUT1' has dims [8] but input 'INPUT0' has dims [16]"},
    };
    for (const Case &c : cases) {
        ConfigPtr cfg = ParseConfig(c.config);
        ASSERT_TRUE(cfg);
        LoadedModel m("add_sub");
        EXPECT_TRUE(
            FailsWith(m.LoadModelOnly(cfg.get(), "/nonexistent"), c.message));
    }
}

TEST(AddSubBackend, RefusesInputsOfDifferentShapes) {
    ConfigPtr cfg = ParseConfig(AddSubConfig("FP32", "FP32", "[ 16 ]"));
    ASSERT_TRUE(cfg);
    LoadedModel m("add_sub");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> a(32, 1.0f), b(16, 1.0f);
    Batch batch(2, 2);
    batch.AddInput("INPUT0", OSP_TYPE_FP32, {2, 16}, a);
    batch.AddInput("INPUT1", OSP_TYPE_FP32, {1, 16}, b);
    osp_error *err = m.Execute(batch.Ctx(m.stream()));
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    EXPECT_TRUE(FailsWith(err, "has shape [2,16] but input 'INPUT1' has "
                               "shape [1,16]"));
}

// ---- string_add_sub -------------------------------------------------------

std::vector<std::string> DeserializeStrings(const std::vector<uint8_t> &b) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos + 4 <= b.size()) {
        uint32_t n = (uint32_t)b[pos] | (uint32_t)b[pos + 1] << 8 |
                     (uint32_t)b[pos + 2] << 16 | (uint32_t)b[pos + 3] << 24;
        pos += 4;
        if (n > b.size() - pos)
            break;
        out.emplace_back((const char *)b.data() + pos, n);
        pos += n;
    }
    EXPECT_EQ(pos, b.size());
    return out;
}

std::string StringAddSubConfig(const std::string &in1_type = "STRING",
                               const std::string &out1_dims = "[ 16 ]") {
    return "name: \"simple_string\" backend: \"string_add_sub\" "
           "max_batch_size: 8\n"
           "input [ " +
           Io("INPUT0", "STRING", "[ 16 ]") + ", " +
           Io("INPUT1", in1_type, "[ 16 ]") +
           " ]\n"
           "output [ " +
           Io("OUTPUT0", "STRING", "[ 16 ]") + ", " +
           Io("OUTPUT1", "STRING", out1_dims) + " ]\n";
}

TEST(StringAddSubBackend, AddsAndSubtractsIntegersWrittenAsText) {
    ConfigPtr cfg = ParseConfig(StringAddSubConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("string_add_sub");
    ASSERT_OK(m.Load(cfg.get()));

    const int64_t rows = 2;
    std::vector<std::string> a, b;
    std::vector<long long> av, bv;
    for (int i = 0; i < rows * 16; i++) {
        long long x = 1000LL * i - 9000, y = 7 - 3LL * i;
        av.push_back(x);
        bv.push_back(y);
        a.push_back(std::to_string(x));
        b.push_back(i % 2 && y >= 0 ? "+" + std::to_string(y)
                                    : std::to_string(y));
    }
    a[5] = "0005"; // leading zeros are decimal, not octal
    av[5] = 5;
    a[6] = "9223372036854775807";
    av[6] = INT64_MAX;
    b[6] = "0";
    bv[6] = 0;
    Batch batch(rows, 2);
    batch.AddInput("INPUT0", OSP_TYPE_BYTES, {rows, 16}, SerializeStrings(a));
    batch.AddInput("INPUT1", OSP_TYPE_BYTES, {rows, 16}, SerializeStrings(b));
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));

    std::vector<std::string> sum = DeserializeStrings(batch.OutputBytes(0));
    std::vector<std::string> diff = DeserializeStrings(batch.OutputBytes(1));
    ASSERT_EQ(sum.size(), a.size());
    ASSERT_EQ(diff.size(), a.size());
    EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{rows, 16}));
    EXPECT_EQ(batch.OutputShape(1), (std::vector<int64_t>{rows, 16}));
    for (size_t i = 0; i < a.size(); i++) {
        EXPECT_EQ(sum[i], std::to_string(av[i] + bv[i])) << i;
        EXPECT_EQ(diff[i], std::to_string(av[i] - bv[i])) << i;
    }
}

TEST(StringAddSubBackend, ComputesOnlyRequestedOutputs) {
    ConfigPtr cfg = ParseConfig(StringAddSubConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("string_add_sub");
    ASSERT_OK(m.Load(cfg.get()));
    Batch batch(1, 2);
    batch.AddInput("INPUT0", OSP_TYPE_BYTES, {1, 16},
                   SerializeStrings(std::vector<std::string>(16, "5")));
    batch.AddInput("INPUT1", OSP_TYPE_BYTES, {1, 16},
                   SerializeStrings(std::vector<std::string>(16, "2")));
    batch.SetRequested(0, false);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.Output(0).data, nullptr);
    EXPECT_EQ(DeserializeStrings(batch.OutputBytes(1)),
              std::vector<std::string>(16, "3"));
}

TEST(StringAddSubBackend, RefusesElementsThatAreNotIntegers) {
    ConfigPtr cfg = ParseConfig(StringAddSubConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("string_add_sub");
    ASSERT_OK(m.Load(cfg.get()));
    struct Case {
        std::string element, message;
    } cases[] = {
        {"x", "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {"", "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {" 1", "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {"1 ", "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {std::string("1\0", 2),
         "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {"9223372036854775808",
         "element 3 of input 'INPUT0' is not a 64-bit decimal integer"},
        {"9223372036854775807", "element 3: the result does not fit in 64 "
                                "bits"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.element);
        std::vector<std::string> a(16, "1");
        a[3] = c.element;
        Batch batch(1, 2);
        batch.AddInput("INPUT0", OSP_TYPE_BYTES, {1, 16}, SerializeStrings(a));
        batch.AddInput("INPUT1", OSP_TYPE_BYTES, {1, 16},
                       SerializeStrings(std::vector<std::string>(16, "1")));
        osp_error *err = m.Execute(batch.Ctx(m.stream()));
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        EXPECT_TRUE(FailsWith(err, c.message));
    }
}

TEST(StringAddSubBackend, RefusesMalformedSerializedTensors) {
    ConfigPtr cfg = ParseConfig(StringAddSubConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("string_add_sub");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<uint8_t> ok =
        SerializeStrings(std::vector<std::string>(2, "1"));
    std::vector<uint8_t> short_one = SerializeStrings({"1"});
    std::vector<uint8_t> long_one = SerializeStrings({"1", "2", "3"});
    std::vector<uint8_t> cut = ok;
    cut.pop_back();
    struct Case {
        std::vector<uint8_t> bytes;
        std::string message;
    } cases[] = {
        {short_one, "input 'INPUT0' holds fewer elements than its shape"},
        {long_one, "input 'INPUT0' holds more bytes than its shape"},
        {cut, "element 1 of input 'INPUT0' runs past the tensor's data"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.message);
        Batch batch(1, 2);
        batch.AddInput("INPUT0", OSP_TYPE_BYTES, {1, 2}, c.bytes);
        batch.AddInput("INPUT1", OSP_TYPE_BYTES, {1, 2}, ok);
        EXPECT_TRUE(FailsWith(m.Execute(batch.Ctx(m.stream())), c.message));
    }
}

TEST(StringAddSubBackend, RefusesBadConfigsWithClearMessages) {
    struct Case {
        std::string config, message;
    } cases[] = {
        {StringAddSubConfig("INT32"),
         "string_add_sub model 'simple_string': input 'INPUT1' is TYPE_INT32; "
         "all four must be TYPE_STRING"},
        {StringAddSubConfig("STRING", "[ 8 ]"),
         "output 'OUTPUT1' has dims [8] but input 'INPUT0' has dims [16]"},
    };
    for (const Case &c : cases) {
        ConfigPtr cfg = ParseConfig(c.config);
        ASSERT_TRUE(cfg);
        LoadedModel m("string_add_sub");
        EXPECT_TRUE(
            FailsWith(m.LoadModelOnly(cfg.get(), "/nonexistent"), c.message));
    }
}

// ---- affine -----------------------------------------------------------------

// half_plus_two: y = 0.5x + 2, y2 = 0.5x + 3, y3 = 0.5x2 + 3 (x2 defaults
// to 0 when not sent), FP32 of any shape.
std::string AffineConfig(const std::string &params =
                             "{ key: \"y\" value: { string_value: \"x * 0.5 + "
                             "2\" } }, "
                             "{ key: \"y2\" value: { string_value: \"x * 0.5 "
                             "+ 3\" } }, "
                             "{ key: \"y3\" value: { string_value: \"x2 * 0.5 "
                             "+ 3\" } }, "
                             "{ key: \"default:x2\" value: { string_value: "
                             "\"0.0\" } }",
                         const std::string &x2_type = "FP32") {
    return "name: \"hpt\" backend: \"affine\" max_batch_size: 0\n"
           "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] optional: "
           "true }, { name: \"x2\" data_type: TYPE_" +
           x2_type +
           " dims: [ -1 ] optional: true } ]\n"
           "output [ " +
           Io("y", "FP32", "[ -1 ]") + ", " + Io("y2", "FP32", "[ -1 ]") +
           ", " + Io("y3", "FP32", "[ -1 ]") + " ]\nparameters [ " + params +
           " ]\n";
}

std::vector<float> Floats(const Batch &batch, size_t i) {
    std::vector<uint8_t> b = batch.OutputBytes(i);
    std::vector<float> f(b.size() / sizeof(float));
    if (!b.empty())
        memcpy(f.data(), b.data(), b.size());
    return f;
}

TEST(AffineBackend, ComputesScaleAndOffsetOverAnyShape) {
    ConfigPtr cfg = ParseConfig(AffineConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("affine");
    ASSERT_OK(m.Load(cfg.get()));
    const std::vector<std::vector<int64_t>> shapes = {
        {3}, {2, 2}, {}, {1, 1, 2}};
    for (const auto &shape : shapes) {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        std::vector<float> x(n), x2(n);
        for (int64_t i = 0; i < n; i++) {
            x[i] = (float)i * 2.0f - 1.0f;
            x2[i] = (float)i + 10.0f;
        }
        Batch batch(0, 3);
        batch.AddInput("x", OSP_TYPE_FP32, shape, x);
        batch.AddInput("x2", OSP_TYPE_FP32, shape, x2);
        ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
        for (size_t o = 0; o < 3; o++)
            EXPECT_EQ(batch.OutputShape(o), shape);
        std::vector<float> y = Floats(batch, 0), y2 = Floats(batch, 1),
                           y3 = Floats(batch, 2);
        ASSERT_EQ(y.size(), (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            EXPECT_EQ(y[i], 0.5f * x[i] + 2.0f) << i;
            EXPECT_EQ(y2[i], 0.5f * x[i] + 3.0f) << i;
            EXPECT_EQ(y3[i], 0.5f * x2[i] + 3.0f) << i;
        }
    }
}

TEST(AffineBackend, HalfPlusTwoValuesOfTheTfServingVectors) {
    ConfigPtr cfg = ParseConfig(AffineConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("affine");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> x = {1.0f, 2.0f, 80.0f, 20.0f, 10.0f};
    Batch batch(0, 3);
    batch.AddInput("x", OSP_TYPE_FP32, {5}, x);
    batch.AddInput("x2", OSP_TYPE_FP32, {}, nullptr, 0); // not sent
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(Floats(batch, 0),
              (std::vector<float>{2.5f, 3.0f, 42.0f, 12.0f, 7.0f}));
    EXPECT_EQ(Floats(batch, 1),
              (std::vector<float>{3.5f, 4.0f, 43.0f, 13.0f, 8.0f}));
    // x2 not sent: its default 0.0, shaped like x.
    EXPECT_EQ(batch.OutputShape(2), (std::vector<int64_t>{5}));
    EXPECT_EQ(Floats(batch, 2), std::vector<float>(5, 3.0f));
}

TEST(AffineBackend, AMissingInputWithoutDefaultFailsOnlyIfItsOutputIsWanted) {
    ConfigPtr cfg = ParseConfig(AffineConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("affine");
    ASSERT_OK(m.Load(cfg.get()));
    std::vector<float> x2 = {4.0f};
    for (bool wanted : {false, true}) {
        Batch batch(0, 3);
        batch.AddInput("x", OSP_TYPE_FP32, {}, nullptr, 0); // not sent
        batch.AddInput("x2", OSP_TYPE_FP32, {1}, x2);
        batch.SetRequested(0, wanted);
        batch.SetRequested(1, false);
        osp_error *err = m.Execute(batch.Ctx(m.stream()));
        if (wanted) {
            EXPECT_TRUE(FailsWith(err, "affine model 'hpt': output 'y' reads "
                                       "input 'x', which was not sent and "
                                       "has no default"));
            continue;
        }
        ASSERT_OK(err);
        EXPECT_EQ(batch.Output(0).data, nullptr);
        EXPECT_EQ(batch.Output(1).data, nullptr);
        EXPECT_EQ(Floats(batch, 2), std::vector<float>{5.0f});
    }
    // Nothing sent at all: a default has no shape to take.
    Batch none(0, 3);
    none.AddInput("x", OSP_TYPE_FP32, {}, nullptr, 0);
    none.AddInput("x2", OSP_TYPE_FP32, {}, nullptr, 0);
    none.SetRequested(0, false);
    none.SetRequested(1, false);
    EXPECT_TRUE(FailsWith(m.Execute(none.Ctx(m.stream())),
                          "output 'y3' reads input 'x2', which was not sent "
                          "(its default needs another input"));
}

TEST(AffineBackend, EmptyTensorsGiveEmptyOutputs) {
    ConfigPtr cfg = ParseConfig(AffineConfig());
    ASSERT_TRUE(cfg);
    LoadedModel m("affine");
    ASSERT_OK(m.Load(cfg.get()));
    Batch batch(0, 3);
    batch.AddInput("x", OSP_TYPE_FP32, {0}, nullptr, 0);
    batch.AddInput("x2", OSP_TYPE_FP32, {2, 0}, nullptr, 0);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{0}));
    EXPECT_EQ(batch.OutputShape(2), (std::vector<int64_t>{2, 0}));
    EXPECT_TRUE(Floats(batch, 2).empty());
}

TEST(AffineBackend, ExpressionSyntax) {
    struct Case {
        const char *expr;
        float scale, offset;
    } cases[] = {
        {"x", 1.0f, 0.0f},
        {"x * 2", 2.0f, 0.0f},
        {"x + 1.5", 1.0f, 1.5f},
        {"x - 1", 1.0f, -1.0f},
        {"x * -0.25 - -4", -0.25f, 4.0f},
        {"  x\t*  3  +  1e1 ", 3.0f, 10.0f},
    };
    for (const Case &c : cases) {
        std::string one =
            std::string("{ key: \"y\" value: { string_value: \"") + c.expr +
            "\" } }, { key: \"y2\" value: { "
            "string_value: \"x\" } }, { key: \"y3\" "
            "value: { string_value: \"x\" } }";
        ConfigPtr cfg = ParseConfig(AffineConfig(one));
        ASSERT_TRUE(cfg);
        LoadedModel m("affine");
        ASSERT_OK(m.Load(cfg.get()));
        std::vector<float> x = {3.0f};
        Batch batch(0, 3);
        batch.AddInput("x", OSP_TYPE_FP32, {1}, x);
        batch.AddInput("x2", OSP_TYPE_FP32, {}, nullptr, 0);
        batch.SetRequested(1, false);
        batch.SetRequested(2, false);
        ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
        EXPECT_EQ(Floats(batch, 0),
                  std::vector<float>{c.scale * 3.0f + c.offset})
            << c.expr;
    }
}

TEST(AffineBackend, RefusesBadConfigsNamingTheOutput) {
    const std::string ok2 =
        ", { key: \"y2\" value: { string_value: \"x\" } }, { key: \"y3\" "
        "value: { string_value: \"x2\" } }";
    auto y = [&](const std::string &expr) {
        return "{ key: \"y\" value: { string_value: \"" + expr + "\" } }" + ok2;
    };
    struct Case {
        std::string config, message;
    } cases[] = {
        {AffineConfig(ok2.substr(2)),
         "affine model 'hpt': output 'y' needs a parameter 'y' saying what "
         "it computes"},
        {AffineConfig(y("x * 0.5 +")),
         "affine model 'hpt': output 'y': parameter 'y' is \"x * 0.5 +\"; "
         "expected \"<input> * <scale> + <offset>\""},
        {AffineConfig(y("x * half")), "output 'y': parameter 'y' is"},
        {AffineConfig(y("x * inf")), "output 'y': parameter 'y' is"},
        {AffineConfig(y("x / 2")), "output 'y': parameter 'y' is"},
        {AffineConfig(y("x + 1 * 2")), "output 'y': parameter 'y' is"},
        {AffineConfig(y("")), "output 'y': parameter 'y' is \"\""},
        {AffineConfig(y("z * 2")),
         "affine model 'hpt': output 'y' reads input 'z', which the config "
         "does not declare"},
        {AffineConfig(y("x") + ", { key: \"default:x3\" value: { "
                               "string_value: \"1\" } }"),
         "parameter 'default:x3' names input 'x3', which the config does "
         "not declare"},
        {AffineConfig(y("x") + ", { key: \"default:x2\" value: { "
                               "string_value: \"zero\" } }"),
         "parameter 'default:x2' must be a finite number, got 'zero'"},
        {AffineConfig(y("x"), "INT32"),
         "affine model 'hpt': input 'x2' is TYPE_INT32; only TYPE_FP32 is "
         "supported"},
    };
    for (const Case &c : cases) {
        ConfigPtr cfg = ParseConfig(c.config);
        ASSERT_TRUE(cfg);
        LoadedModel m("affine");
        EXPECT_TRUE(
            FailsWith(m.LoadModelOnly(cfg.get(), "/nonexistent"), c.message))
            << c.config;
    }
    // A default for an input that is always sent is a mistake.
    ConfigPtr required = ParseConfig(
        "name: \"r\" backend: \"affine\" input [ " + Io("x", "FP32", "[ -1 ]") +
        " ] output [ " + Io("y", "FP32", "[ -1 ]") +
        " ] parameters [ { key: \"y\" value: { string_value: \"x\" } }, { key: "
        "\"default:x\" value: { string_value: \"1\" } } ]");
    ASSERT_TRUE(required);
    LoadedModel m("affine");
    EXPECT_TRUE(FailsWith(m.LoadModelOnly(required.get(), "/nonexistent"),
                          "input 'x' is not optional"));
}

TEST(AffineBackend, TheBundledModelsLoad) {
    for (const char *name : {"half_plus_two", "saved_model_half_plus_three"}) {
        osp_model_config *cfg = nullptr;
        std::string path = std::string(OSPREY_SOURCE_DIR) + "/models/" + name +
                           "/config.pbtxt";
        ASSERT_OK(osp_model_config_load(path.c_str(), &cfg));
        ConfigPtr owned(cfg);
        LoadedModel m("affine");
        SCOPED_TRACE(name);
        ASSERT_OK(m.Load(cfg));
    }
}

// ---- safetensors files written by the tests --------------------------------

struct TensorSpec {
    std::string name;
    std::string dtype; // F32 gets `values`; others get zero bytes
    std::vector<int64_t> shape;
    std::vector<float> values;
};

std::string HeaderFile(const std::string &header, size_t data_bytes) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; i++)
        out[i] = (char)(n >> (8 * i));
    return out + header + std::string(data_bytes, '\0');
}

std::string SafetensorsBytes(const std::vector<TensorSpec> &tensors) {
    std::string header = "{", data;
    for (const TensorSpec &t : tensors) {
        size_t count = 1;
        for (int64_t d : t.shape)
            count *= (size_t)d;
        size_t size = t.dtype == "F32" ? 4 : t.dtype == "F16" ? 2 : 8;
        size_t begin = data.size();
        if (t.dtype == "F32") {
            std::vector<float> v = t.values;
            v.resize(count);
            data.append((const char *)v.data(), v.size() * sizeof(float));
        } else {
            data.append(count * size, '\0');
        }
        std::string shape;
        for (int64_t d : t.shape)
            shape += (shape.empty() ? "" : ",") + std::to_string(d);
        header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name +
                  "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape +
                  "],\"data_offsets\":[" + std::to_string(begin) + "," +
                  std::to_string(data.size()) + "]}";
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string out = HeaderFile(header, 0);
    return out + data;
}

std::vector<float> RandomValues(std::mt19937 &rng, size_t n, float scale) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(rng);
    return v;
}

// An MLP with random weights and the layer widths given.
std::vector<TensorSpec> RandomMlp(const std::vector<int64_t> &widths,
                                  uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TensorSpec> out;
    for (size_t i = 0; i + 1 < widths.size(); i++) {
        int64_t in = widths[i], o = widths[i + 1];
        std::string prefix = "layers." + std::to_string(i);
        out.push_back({prefix + ".weight",
                       "F32",
                       {o, in},
                       RandomValues(rng, (size_t)(o * in), 1.0f)});
        out.push_back(
            {prefix + ".bias", "F32", {o}, RandomValues(rng, (size_t)o, 0.5f)});
    }
    return out;
}

// ---- reference MLP ----------------------------------------------------------

struct RefLayer {
    int64_t in, out;
    std::vector<float> weight, bias;
};

double Activate(const std::string &act, double x) {
    if (act == "relu")
        return x > 0 ? x : 0;
    if (act == "sigmoid")
        return 1 / (1 + std::exp(-x));
    if (act == "tanh")
        return std::tanh(x);
    if (act == "gelu")
        return 0.5 * x *
               (1 +
                std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return x;
}

// Reads the layers back with the reader under test's help only for finding
// bytes; the arithmetic is independent of the backend.
std::vector<RefLayer> ReadLayers(const std::string &path) {
    std::vector<RefLayer> layers;
    safetensors *st = nullptr;
    osp_error *err = safetensors_load(path.c_str(), &st);
    if (err) {
        ADD_FAILURE() << TakeMessage(err);
        return layers;
    }
    for (size_t i = 0;; i++) {
        std::string p = "layers." + std::to_string(i);
        const safetensors_tensor *w =
            safetensors_find(st, (p + ".weight").c_str());
        const safetensors_tensor *b =
            safetensors_find(st, (p + ".bias").c_str());
        if (!w || !b)
            break;
        RefLayer l;
        l.out = w->shape.dims[0];
        l.in = w->shape.dims[1];
        l.weight.resize(w->byte_size / 4);
        l.bias.resize(b->byte_size / 4);
        memcpy(l.weight.data(), w->data, w->byte_size);
        memcpy(l.bias.data(), b->data, b->byte_size);
        layers.push_back(l);
    }
    safetensors_free(st);
    return layers;
}

std::vector<float> ReferenceForward(const std::vector<RefLayer> &layers,
                                    const std::vector<float> &x, int64_t rows,
                                    const std::string &hidden,
                                    const std::string &output) {
    std::vector<double> cur(x.begin(), x.end());
    for (size_t li = 0; li < layers.size(); li++) {
        const RefLayer &l = layers[li];
        bool last = li + 1 == layers.size();
        std::vector<double> next((size_t)(rows * l.out));
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t o = 0; o < l.out; o++) {
                double acc = l.bias[o];
                for (int64_t k = 0; k < l.in; k++)
                    acc += cur[r * l.in + k] * l.weight[o * l.in + k];
                next[r * l.out + o] =
                    last
                        ? (output == "sigmoid" ? Activate("sigmoid", acc) : acc)
                        : Activate(hidden, acc);
            }
        }
        cur.swap(next);
    }
    int64_t width = layers.back().out;
    if (output == "softmax") {
        for (int64_t r = 0; r < rows; r++) {
            double *row = &cur[r * width], max = row[0], sum = 0;
            for (int64_t c = 1; c < width; c++)
                max = std::max(max, row[c]);
            for (int64_t c = 0; c < width; c++)
                sum += (row[c] = std::exp(row[c] - max));
            for (int64_t c = 0; c < width; c++)
                row[c] /= sum;
        }
    }
    return std::vector<float>(cur.begin(), cur.end());
}

std::vector<float> OutputFloats(const Batch &batch) {
    std::vector<uint8_t> b = batch.OutputBytes(0);
    std::vector<float> out(b.size() / 4);
    memcpy(out.data(), b.data(), out.size() * 4);
    return out;
}

// ---- dense: the bundled digits model ----------------------------------------

TEST(DenseBackend, DigitsMlpMatchesAReferenceForwardPass) {
    const std::string dir =
        std::string(OSPREY_SOURCE_DIR) + "/models/digits_mlp";
    osp_model_config *raw = nullptr;
    ASSERT_OK(osp_model_config_load((dir + "/config.pbtxt").c_str(), &raw));
    ConfigPtr cfg(raw);
    ASSERT_EQ(cfg->n_inputs, 1u);
    const char *input = cfg->inputs[0].name;
    LoadedModel m("dense");
    ASSERT_OK(m.Load(cfg.get(), dir + "/1"));
    std::vector<RefLayer> layers = ReadLayers(dir + "/1/model.safetensors");
    ASSERT_EQ(layers.size(), 2u);
    ASSERT_EQ(layers[0].in, 64);
    ASSERT_EQ(layers.back().out, 10);

    std::mt19937 rng(7);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    // Growing then shrinking batches exercise the scratch buffers' reuse.
    for (int64_t rows : {1, 256, 7}) {
        SCOPED_TRACE(rows);
        std::vector<float> x((size_t)rows * 64);
        for (float &v : x)
            v = pixel(rng);
        Batch batch(rows, 1);
        batch.AddInput(input, OSP_TYPE_FP32, {rows, 64}, x);
        ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
        EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{rows, 10}));
        std::vector<float> got = OutputFloats(batch);
        std::vector<float> want =
            ReferenceForward(layers, x, rows, "relu", "softmax");
        ASSERT_EQ(got.size(), want.size());
        for (int64_t r = 0; r < rows; r++) {
            double sum = 0;
            for (int64_t c = 0; c < 10; c++) {
                EXPECT_NEAR(got[r * 10 + c], want[r * 10 + c], 1e-5)
                    << "row " << r << " class " << c;
                sum += got[r * 10 + c];
            }
            EXPECT_NEAR(sum, 1.0, 1e-5);
        }
    }
}

// ---- dense: models written to a temporary folder
// ------------------------------

class DenseTempModel : public ::testing::Test {
  protected:
    void SetUp() override {
        static int counter = 0;
        root_ = fs::temp_directory_path() /
                ("osprey_test_backends_" + std::to_string(getpid()) + "_" +
                 std::to_string(counter++));
        fs::create_directories(root_ / "1");
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    std::string VersionPath() const {
        return (root_ / "1").string();
    }
    void WriteFile(const std::string &name, const std::string &bytes) {
        std::ofstream f(root_ / "1" / name, std::ios::binary);
        f.write(bytes.data(), (std::streamsize)bytes.size());
    }
    static std::string Config(int64_t in, int64_t out,
                              const std::string &params = "",
                              int max_batch_size = 4) {
        return "name: \"mlp\" backend: \"dense\" max_batch_size: " +
               std::to_string(max_batch_size) + "\ninput [ " +
               Io("x", "FP32", "[ " + std::to_string(in) + " ]") +
               " ]\noutput [ " +
               Io("y", "FP32", "[ " + std::to_string(out) + " ]") + " ]\n" +
               params;
    }
    static std::string Param(const std::string &key, const std::string &value) {
        return "parameters { key: \"" + key + "\" value: { string_value: \"" +
               value + "\" } }\n";
    }
    osp_error *LoadError(const std::string &config) {
        ConfigPtr cfg = ParseConfig(config);
        if (!cfg)
            return osp_error_new(OSP_ERROR_INTERNAL, "config did not parse");
        LoadedModel m("dense");
        return m.LoadModelOnly(cfg.get(), VersionPath());
    }

    fs::path root_;
};

TEST_F(DenseTempModel, EveryActivationMatchesTheReference) {
    WriteFile("model.safetensors",
              SafetensorsBytes(RandomMlp({5, 7, 4, 3}, 1)));
    std::vector<RefLayer> layers =
        ReadLayers(VersionPath() + "/model.safetensors");
    ASSERT_EQ(layers.size(), 3u);
    std::mt19937 rng(3);
    for (const char *hidden : {"relu", "sigmoid", "tanh", "gelu", "none"}) {
        for (const char *output : {"none", "softmax", "sigmoid"}) {
            SCOPED_TRACE(std::string(hidden) + " / " + output);
            ConfigPtr cfg =
                ParseConfig(Config(5, 3,
                                   Param("activation", hidden) +
                                       Param("output_activation", output) +
                                       Param("allow_tf32", "true")));
            ASSERT_TRUE(cfg);
            LoadedModel m("dense");
            ASSERT_OK(m.Load(cfg.get(), VersionPath()));
            const int64_t rows = 4;
            std::vector<float> x = RandomValues(rng, rows * 5, 2.0f);
            Batch batch(rows, 1);
            batch.AddInput("x", OSP_TYPE_FP32, {rows, 5}, x);
            ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
            std::vector<float> got = OutputFloats(batch);
            std::vector<float> want =
                ReferenceForward(layers, x, rows, hidden, output);
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); i++)
                EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
                    << i;
        }
    }
}

TEST_F(DenseTempModel, WorksWithoutBatchingAndWithOneLayer) {
    WriteFile("one.safetensors", SafetensorsBytes(RandomMlp({6, 2}, 2)));
    ConfigPtr cfg =
        ParseConfig(Config(6, 2, Param("weights", "one.safetensors"), 0));
    ASSERT_TRUE(cfg);
    LoadedModel m("dense");
    ASSERT_OK(m.Load(cfg.get(), VersionPath()));
    std::vector<float> x = {1, -2, 3, -4, 5, -6};
    Batch batch(0, 1);
    batch.AddInput("x", OSP_TYPE_FP32, {6}, x);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{2}));
    std::vector<float> want = ReferenceForward(
        ReadLayers(VersionPath() + "/one.safetensors"), x, 1, "relu", "none");
    std::vector<float> got = OutputFloats(batch);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NEAR(got[0], want[0], 1e-5);
    EXPECT_NEAR(got[1], want[1], 1e-5);
}

TEST_F(DenseTempModel, AnEmptyBatchGivesAnEmptyOutput) {
    WriteFile("model.safetensors", SafetensorsBytes(RandomMlp({3, 4, 2}, 4)));
    ConfigPtr cfg = ParseConfig(Config(3, 2));
    ASSERT_TRUE(cfg);
    LoadedModel m("dense");
    ASSERT_OK(m.Load(cfg.get(), VersionPath()));
    Batch batch(0, 1);
    batch.AddInput("x", OSP_TYPE_FP32, {0, 3}, nullptr, 0);
    ASSERT_OK(m.Execute(batch.Ctx(m.stream())));
    EXPECT_EQ(batch.OutputShape(0), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(batch.Output(0).byte_size, 0u);
}

TEST_F(DenseTempModel, RefusesAnInputOfTheWrongShape) {
    WriteFile("model.safetensors", SafetensorsBytes(RandomMlp({3, 4, 2}, 4)));
    ConfigPtr cfg = ParseConfig(Config(3, 2));
    ASSERT_TRUE(cfg);
    LoadedModel m("dense");
    ASSERT_OK(m.Load(cfg.get(), VersionPath()));
    std::vector<float> x(8, 1.0f);
    Batch batch(2, 1);
    batch.AddInput("x", OSP_TYPE_FP32, {2, 4}, x);
    osp_error *err = m.Execute(batch.Ctx(m.stream()));
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    EXPECT_TRUE(FailsWith(err, "input 'x' must be FP32 of shape [N,3], got "
                               "FP32 [2,4]"));
}

TEST_F(DenseTempModel, MissingWeightsFileNamesTheFile) {
    osp_error *err = LoadError(Config(3, 2));
    ASSERT_NE(err, nullptr);
    std::string msg = TakeMessage(err);
    EXPECT_NE(msg.find("dense model 'mlp': weights file '"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("/1/model.safetensors' not found"), std::string::npos)
        << msg;
}

TEST_F(DenseTempModel, ShapeMismatchNamesTheTensor) {
    // The file's hidden layer is 32 wide; its last layer expects 64 inputs.
    std::vector<TensorSpec> t = RandomMlp({64, 32, 10}, 5);
    t[2] = {"layers.1.weight", "F32", {10, 64}, {}};
    WriteFile("model.safetensors", SafetensorsBytes(t));
    EXPECT_TRUE(FailsWith(LoadError(Config(64, 10)),
                          "dense model 'mlp': tensor 'layers.1.weight' has "
                          "shape [10,64], expected [10,32]"));
    // Against the config: first layer's inputs, last layer's outputs.
    WriteFile("model.safetensors",
              SafetensorsBytes(RandomMlp({64, 32, 10}, 5)));
    EXPECT_TRUE(FailsWith(LoadError(Config(60, 10)),
                          "tensor 'layers.0.weight' has shape [32,64], "
                          "expected [32,60]"));
    EXPECT_TRUE(FailsWith(LoadError(Config(64, 9)),
                          "tensor 'layers.1.weight' has shape [10,32], "
                          "expected [9,32]"));
}

TEST_F(DenseTempModel, RefusesBadTensors) {
    struct Case {
        std::vector<TensorSpec> tensors;
        std::string message;
    };
    std::vector<TensorSpec> no_bias = RandomMlp({4, 3, 2}, 6);
    no_bias.erase(no_bias.begin() + 3);
    std::vector<TensorSpec> bad_bias = RandomMlp({4, 3, 2}, 6);
    bad_bias[1].shape = {4};
    std::vector<TensorSpec> half = RandomMlp({4, 3, 2}, 6);
    half[0].dtype = "F16";
    std::vector<TensorSpec> gap = RandomMlp({4, 3, 2}, 6);
    gap[2].name = "layers.2.weight";
    gap[3].name = "layers.2.bias";
    std::vector<TensorSpec> vector_weight = RandomMlp({4, 3, 2}, 6);
    vector_weight[0].shape = {12};
    Case cases[] = {
        {{}, "has no tensor 'layers.0.weight'"},
        {no_bias, "has no tensor 'layers.1.bias'"},
        {bad_bias, "tensor 'layers.0.bias' has shape [4], expected [3]"},
        {half, "tensor 'layers.0.weight' has dtype F16, expected F32"},
        {gap, "tensor 'layers.2.weight' follows a gap: 'layers.1.weight' is "
              "missing"},
        {vector_weight, "tensor 'layers.0.weight' has shape [12], expected "
                        "[N,4] with N >= 1"},
    };
    for (const Case &c : cases) {
        WriteFile("model.safetensors", SafetensorsBytes(c.tensors));
        EXPECT_TRUE(FailsWith(LoadError(Config(4, 2)), c.message));
    }
}

TEST_F(DenseTempModel, BadSafetensorsHeaderIsALoadError) {
    WriteFile("model.safetensors", HeaderFile("{\"layers.0.weight\":", 0));
    EXPECT_TRUE(FailsWith(LoadError(Config(4, 2)),
                          "dense model 'mlp': " + VersionPath() +
                              "/model.safetensors: bad safetensors header"));
    std::string huge(8, '\xff');
    WriteFile("model.safetensors", huge);
    EXPECT_TRUE(FailsWith(LoadError(Config(4, 2)), "exceeds the limit"));
}

TEST_F(DenseTempModel, RefusesBadConfigsAndParameters) {
    WriteFile("model.safetensors", SafetensorsBytes(RandomMlp({4, 2}, 8)));
    const std::string two_inputs =
        "name: \"mlp\" backend: \"dense\" max_batch_size: 4\n"
        "input [ " +
        Io("a", "FP32", "[ 4 ]") + ", " + Io("b", "FP32", "[ 4 ]") +
        " ]\noutput [ " + Io("y", "FP32", "[ 2 ]") + " ]\n";
    const std::string variable =
        "name: \"mlp\" backend: \"dense\" max_batch_size: 4\n"
        "input [ " +
        Io("x", "FP32", "[ -1 ]") + " ]\noutput [ " + Io("y", "FP32", "[ 2 ]") +
        " ]\n";
    const std::string int_input =
        "name: \"mlp\" backend: \"dense\" max_batch_size: 4\n"
        "input [ " +
        Io("x", "INT32", "[ 4 ]") + " ]\noutput [ " + Io("y", "FP32", "[ 2 ]") +
        " ]\n";
    struct Case {
        std::string config, message;
    } cases[] = {
        {two_inputs, "needs exactly 1 input and 1 output, got 2 and 1"},
        {variable, "input 'x' has dims [-1], expected one fixed size"},
        {int_input, "input 'x' is TYPE_INT32, expected TYPE_FP32"},
        {Config(4, 2, Param("activation", "swish")),
         "parameter 'activation' is 'swish'"},
        {Config(4, 2, Param("output_activation", "relu")),
         "parameter 'output_activation' is 'relu'"},
        {Config(4, 2, Param("allow_tf32", "yes")),
         "parameter 'allow_tf32' is 'yes'"},
        {Config(4, 2, Param("weights", "../../secret")),
         "parameter 'weights' is '../../secret'"},
    };
    for (const Case &c : cases)
        EXPECT_TRUE(FailsWith(LoadError(c.config), c.message));
}

// ---- the safetensors reader itself
// --------------------------------------------

osp_error *Parse(const std::string &bytes, safetensors **st) {
    return safetensors_parse((const uint8_t *)bytes.data(), bytes.size(),
                             "t.safetensors", st);
}

TEST(Safetensors, ReadsTensorsEscapedNamesAndSkipsMetadata) {
    const std::string header =
        "{\"__metadata__\":{\"format\":\"pt\",\"nested\":[1,-2.5e3,true,null,"
        "{\"k\":\"v\"}]},"
        "\"caf\\u00e9 \\ud83d\\ude00\\n\":{\"dtype\":\"I64\",\"shape\":[],"
        "\"data_offsets\":[4,12]},"
        "\"w\":{\"shape\":[2,2],\"data_offsets\":[12,12],\"dtype\":\"F16\","
        "\"extra\":{}},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]}}   ";
    std::string bytes = HeaderFile(header, 12);
    bytes[8 + header.size() + 4] = 42; // first byte of the I64
    // "w" claims 8 bytes at [12,12): wrong on purpose, checked below.
    safetensors *st = nullptr;
    EXPECT_TRUE(FailsWith(Parse(bytes, &st),
                          "tensor 'w': data_offsets [12,12] hold 0 bytes but "
                          "F16 [2,2] needs 8"));

    const std::string good_header = header.substr(0, header.find("[12,12]")) +
                                    "[12,20]" +
                                    header.substr(header.find("[12,12]") + 7);
    bytes = HeaderFile(good_header, 20);
    bytes[8 + good_header.size() + 4] = 42;
    ASSERT_OK(Parse(bytes, &st));
    ASSERT_EQ(st->n_tensors, 3u);
    const safetensors_tensor *t =
        safetensors_find(st, "caf\xc3\xa9 \xf0\x9f\x98\x80\n");
    ASSERT_NE(t, nullptr);
    EXPECT_STREQ(t->dtype, "I64");
    EXPECT_EQ(t->shape.rank, 0);
    EXPECT_EQ(t->byte_size, 8u);
    EXPECT_EQ(t->data[0], 42);
    const safetensors_tensor *w = safetensors_find(st, "w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->element_size, 2u);
    EXPECT_EQ(w->shape.rank, 2);
    const safetensors_tensor *e = safetensors_find(st, "e");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->byte_size, 0u);
    EXPECT_EQ(safetensors_find(st, "__metadata__"), nullptr);
    safetensors_free(st);
}

TEST(Safetensors, RefusesMalformedFilesWithAReason) {
    const std::string ok_entry =
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
    auto entry = [](const std::string &body) {
        return "{\"a\":{" + body + "}}";
    };
    struct Case {
        std::string bytes, message;
    } cases[] = {
        {"", "0 bytes is too short"},
        {std::string("\x10\0\0\0\0\0\0\0{}", 10), "header length 16 exceeds "
                                                  "the 2 bytes"},
        {std::string("\0\0\0\0\x01\0\0\0", 8), "exceeds the limit"},
        {HeaderFile("[]", 0), "at byte 8: expected '{' at the start"},
        {HeaderFile("{" + ok_entry + "} x", 4), "unexpected bytes after"},
        {HeaderFile("{" + ok_entry + ",}", 4), "expected a string"},
        {HeaderFile("{\"a", 0), "unterminated string"},
        {HeaderFile("{\"a\\x\":{}}", 0), "unknown escape"},
        {HeaderFile("{\"a\\ud800\":{}}", 0), "lone high surrogate"},
        {HeaderFile("{\"a\\udc00\":{}}", 0), "lone low surrogate"},
        {HeaderFile("{\"a\\u0000\":{}}", 0), "\\u0000 in a string"},
        {HeaderFile("{\"a\\u12\":{}}", 0), "needs 4 hex digits"},
        {HeaderFile("{\"a\tb\":{}}", 0), "control character"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[-1],"
                          "\"data_offsets\":[0,4]"),
                    4),
         "shape: expected a non-negative integer"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[01],"
                          "\"data_offsets\":[0,4]"),
                    4),
         "expected a non-negative integer"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1.0],"
                          "\"data_offsets\":[0,4]"),
                    4),
         "expected a non-negative integer"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[0,99999999999999999999]"),
                    4),
         "number too large"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,"
                          "1,1,1,1,1,1],\"data_offsets\":[0,4]"),
                    4),
         "shape has more than 16 entries"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[0,4,8]"),
                    8),
         "data_offsets has more than 2 entries"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[4]"),
                    8),
         "data_offsets must be [begin, end]"},
        {HeaderFile(entry("\"shape\":[1],\"data_offsets\":[0,4]"), 4),
         "tensor 'a' lacks \"dtype\""},
        {HeaderFile(entry("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4),
         "tensor 'a' lacks \"shape\""},
        {HeaderFile(entry("\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[0,4]"),
                    4),
         "duplicate key 'dtype'"},
        {HeaderFile(entry("\"dtype\":\"F33\",\"shape\":[1],"
                          "\"data_offsets\":[0,4]"),
                    4),
         "tensor 'a' has unknown dtype 'F33'"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[0,8]"),
                    4),
         "lie outside the 4 bytes of tensor data"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[4,0]"),
                    4),
         "lie outside"},
        {HeaderFile(entry("\"dtype\":\"F32\",\"shape\":[4294967296,"
                          "4294967296],\"data_offsets\":[0,4]"),
                    4),
         "shape too large"},
        {HeaderFile("{" + ok_entry + "," + ok_entry + "}", 4),
         "tensor 'a' appears twice"},
        {HeaderFile("{" + ok_entry +
                        ",\"b\":{\"dtype\":\"F16\",\"shape\":[2],"
                        "\"data_offsets\":[2,6]}}",
                    8),
         "tensors 'a' and 'b' overlap"},
        {HeaderFile("{\"__metadata__\":[]}", 0),
         "__metadata__ must be one object"},
        {HeaderFile("{\"__metadata__\":{\"x\":" + std::string(70, '[') +
                        std::string(70, ']') + "}}",
                    0),
         "nested more than 64 deep"},
        {HeaderFile("{\"__metadata__\":{\"x\":tru}}", 0), "expected a value"},
        {HeaderFile("{\"__metadata__\":{\"x\":1.}}", 0),
         "expected digits after '.'"},
    };
    for (const Case &c : cases) {
        safetensors *st = nullptr;
        osp_error *err = Parse(c.bytes, &st);
        EXPECT_EQ(st, nullptr);
        if (err) {
            EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        }
        EXPECT_TRUE(FailsWith(err, c.message))
            << "header: " << (c.bytes.size() > 8 ? c.bytes.substr(8) : "");
    }
}

TEST(Safetensors, SurvivesCorruptedAndTruncatedFiles) {
    // A cheap stand-in for the fuzzer: every result is an error or a
    // consistent parse, never a crash (run under ASan in CI).
    const std::string good = SafetensorsBytes(RandomMlp({4, 3, 2}, 9));
    std::mt19937 rng(11);
    for (int round = 0; round < 3000; round++) {
        std::string bytes = good;
        int flips = 1 + (int)(rng() % 4);
        for (int i = 0; i < flips; i++)
            bytes[rng() % bytes.size()] = (char)(rng() % 256);
        if (round % 3 == 0)
            bytes.resize(rng() % bytes.size());
        safetensors *st = nullptr;
        osp_error *err = Parse(bytes, &st);
        if (err) {
            osp_error_free(err);
            continue;
        }
        for (size_t i = 0; i < st->n_tensors; i++) {
            const safetensors_tensor &t = st->tensors[i];
            ASSERT_GE(t.data, (const uint8_t *)bytes.data());
            ASSERT_LE(t.data + t.byte_size,
                      (const uint8_t *)bytes.data() + bytes.size());
        }
        safetensors_free(st);
    }
}

TEST(Safetensors, MissingFileIsNotFound) {
    safetensors *st = nullptr;
    osp_error *err = safetensors_load("/nonexistent/model.safetensors", &st);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_NOT_FOUND);
    EXPECT_TRUE(FailsWith(err, "cannot open '/nonexistent/model.safetensors'"));
}

} // namespace

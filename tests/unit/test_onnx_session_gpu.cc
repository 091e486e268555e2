// The ONNX runtime's sessions on the CUDA device (backends/onnx/
// onnx_session.c, onnx_weights.c) and the graph slots under them
// (server/device/device_graph.c, cuda/cuda_graph.c): weights uploaded once
// per device and shared by the instances on it, CUDA graphs recorded after
// a warm-up run and replayed (same results as the CPU device), a graph per
// input shape within a bound, graphs dropped when the arena moves, and the
// fake runtime's capture rules; precision fp16 and allow_tf32 on every
// matrix product of a small CNN and of a graph of MatMul, Gemm and Einsum
// (against the CPU device, and through cuBLAS: the fake's counts), and
// models whose tensors are FP16 on both devices. Built over the fake CUDA
// runtime (every build) and as _gpu over the real one (label gpu, SKIPPED
// without a GPU).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_provider.h"
#include "half.h"
#include "onnx_pb_writer.h"
#include "onnx_runtime.h"
#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#ifdef OSPREY_TEST_FAKE_CUDA
#include <cuda_runtime_api.h>

#include "fake_cuda.h"
#endif

namespace {

// The GPUs (the fake's two, or the real ones), freed at exit so that
// compute-sanitizer --leak-check sees every pool returned.
void InitDevicesOnce() {
    static const bool done = [] {
        osp_device_options opts;
        osp_device_options_init(&opts);
        opts.pinned_pool_bytes = size_t{8} << 20;
        opts.cuda_pool_bytes_default = size_t{16} << 20;
        static const osp_device_provider *const providers[] = {
            &osp_cuda_device_provider};
        opts.providers = providers;
        opts.n_providers = 1;
        osp_error *err = osp_devices_init(&opts);
        if (err != nullptr)
            fprintf(stderr, "osp_devices_init: %s\n", TakeMessage(err).c_str());
        return true;
    }();
    (void)done;
}

class DeviceShutdown : public ::testing::Environment {
  public:
    void TearDown() override {
        osp_devices_shutdown();
    }
};
const auto *const kShutdown =
    ::testing::AddGlobalTestEnvironment(new DeviceShutdown);

Pb MatMulNode(const std::string &a, const std::string &b,
              const std::string &y) {
    Pb n;
    n.Bytes(1, a).Bytes(1, b).Bytes(2, y).Bytes(4, "MatMul");
    return n;
}

constexpr int64_t kIn = 64, kHidden = 1024, kOut = 16;

// y[N, 16] = (x[N, 64] W1[64, 1024]) W2[1024, 16]: what the CUDA device
// runs today (MatMul through its gemm). W1 and W2 are 320 KiB together.
std::string MlpModel() {
    Pb g;
    g.Bytes(2, "mlp")
        .Msg(1, MatMulNode("x", "w1", "h"))
        .Msg(1, MatMulNode("h", "w2", "y"))
        .Msg(5,
             OnnxFloatInitializer("w1", {kIn, kHidden}, RandomFloats(kIn * kHidden, 1)))
        .Msg(5, OnnxFloatInitializer("w2", {kHidden, kOut},
                            RandomFloats(kHidden * kOut, 2)))
        .Msg(11, OnnxFloatValue("x", {-1, kIn}))
        .Msg(12, OnnxFloatValue("y", {-1, kOut}));
    Pb opset;
    opset.Bytes(1, "").Varint(2, 13);
    Pb m;
    m.Varint(1, 8).Msg(7, g).Msg(8, opset);
    return m.str();
}

constexpr size_t kWeightBytes = (kIn * kHidden + kHidden * kOut) * 4;

struct ModelFree {
    void operator()(onnx_rt_model *m) const {
        onnx_rt_model_free(m);
    }
};
using ModelPtr = std::unique_ptr<onnx_rt_model, ModelFree>;

ModelPtr LoadMlp(const onnx_rt_options &opts) {
    std::string bytes = MlpModel();
    onnx_model *file = nullptr;
    osp_error *err = onnx_model_load_bytes(bytes.data(), bytes.size(), nullptr,
                                           nullptr, &file);
    if (err != nullptr) {
        ADD_FAILURE() << TakeMessage(err);
        return nullptr;
    }
    onnx_rt_model *m = nullptr;
    if ((err = onnx_rt_model_new(file, &opts, &m)) != nullptr)
        ADD_FAILURE() << TakeMessage(err);
    return ModelPtr(m);
}

// A session with its stream on `dev`.
struct Instance {
    osp_stream *stream = nullptr;
    onnx_session *session = nullptr;
    ~Instance() {
        onnx_session_free(session);
        osp_stream_free(stream);
    }
};

osp_error *NewInstance(onnx_rt_model *m, osp_device *dev, Instance *out) {
    osp_error *err = osp_stream_new(dev, &out->stream);
    if (err == nullptr)
        err = onnx_session_new(m, dev, out->stream, &out->session);
    return err;
}

// Output 0 into a device buffer the run allocates.
struct OutputSink {
    osp_device *dev;
    osp_buffer *buf = nullptr;
    static osp_error *Alloc(void *ctx, size_t, osp_datatype, const osp_shape *,
                            size_t bytes, void **data) {
        auto *sink = static_cast<OutputSink *>(ctx);
        osp_buffer_free(sink->buf);
        sink->buf = nullptr;
        osp_error *err = osp_device_alloc(sink->dev, bytes, &sink->buf);
        if (err == nullptr)
            *data = sink->buf->data;
        return err;
    }
    ~OutputSink() {
        osp_buffer_free(buf);
    }
};

// Runs the session on x[n, 64] (host values) and returns y (host values).
std::vector<float> RunModel(Instance &inst, const std::vector<float> &x) {
    osp_device *dev = osp_stream_device(inst.stream);
    int64_t n = (int64_t)x.size() / kIn;
    size_t in_bytes = x.size() * sizeof(float);
    osp_buffer *in = nullptr;
    std::vector<float> y((size_t)n * kOut, NAN);
    osp_error *err = osp_device_alloc(dev, in_bytes, &in);
    if (err == nullptr && in_bytes > 0)
        err = osp_memcpy_async(inst.stream, in->data, x.data(), in_bytes,
                               OSP_COPY_HOST_TO_DEVICE);
    OutputSink sink{dev};
    onnx_io io = {};
    io.dtype = OSP_TYPE_FP32;
    io.shape.rank = 2;
    io.shape.dims[0] = n;
    io.shape.dims[1] = kIn;
    io.data = in != nullptr ? in->data : nullptr;
    io.byte_size = in_bytes;
    if (err == nullptr)
        err = onnx_session_run(inst.session, &io, 1, OutputSink::Alloc, &sink);
    if (err == nullptr && sink.buf != nullptr && !y.empty())
        err =
            osp_memcpy_async(inst.stream, y.data(), sink.buf->data,
                             y.size() * sizeof(float), OSP_COPY_DEVICE_TO_HOST);
    if (err == nullptr)
        err = osp_stream_synchronize(inst.stream);
    if (err != nullptr)
        ADD_FAILURE() << TakeMessage(err);
    osp_buffer_free(in);
    return y;
}

// The CPU device's answer for the same model: the oracle.
std::vector<float> RunOnCpu(onnx_rt_model *m, const std::vector<float> &x) {
    Instance cpu;
    osp_error *err = NewInstance(m, osp_device_cpu(), &cpu);
    if (err != nullptr) {
        ADD_FAILURE() << TakeMessage(err);
        return {};
    }
    return RunModel(cpu, x);
}

void ExpectClose(const std::vector<float> &got,
                 const std::vector<float> &want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++)
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << "element " << i;
}

class OnnxSessionGpu : public ::testing::Test {
  protected:
    void SetUp() override {
        InitDevicesOnce();
        if (osp_device_cuda_count() < 1)
            GTEST_SKIP() << "no CUDA GPU";
        ASSERT_OK(osp_device_cuda_get(0, &gpu_));
    }
    size_t PoolUsed() const {
        osp_device_memory_stats st;
        osp_device_get_memory_stats(gpu_, &st);
        return st.device_pool_used;
    }
    osp_device *gpu_ = nullptr;
};

TEST_F(OnnxSessionGpu, WeightsAreUploadedOncePerDeviceAndShared) {
    onnx_rt_options opts = {};
    ModelPtr m = LoadMlp(opts);
    ASSERT_TRUE(m);
    std::vector<float> x = RandomFloats(2 * kIn, 3);
    std::vector<float> want = RunOnCpu(m.get(), x);
    size_t before = PoolUsed();

    std::vector<std::unique_ptr<Instance>> insts;
    std::vector<size_t> used;
    for (int i = 0; i < 4; i++) {
        insts.push_back(std::make_unique<Instance>());
        ASSERT_OK(NewInstance(m.get(), gpu_, insts.back().get()));
        ExpectClose(RunModel(*insts.back(), x), want);
        EXPECT_EQ(onnx_session_weight_bytes(insts.back()->session),
                  kWeightBytes);
        used.push_back(PoolUsed() - before);
    }
    size_t arena = onnx_session_arena_bytes(insts[0]->session);
    printf("device memory: 1 instance %zu bytes, 4 instances %zu bytes "
           "(weights %zu, arena %zu per instance)\n",
           used[0], used[3], kWeightBytes, arena);
    EXPECT_GE(used[0], kWeightBytes + arena);
    // Each later instance adds its arena (and the run's buffers, freed),
    // not another copy of the weights.
    EXPECT_LT(used[3] - used[0], kWeightBytes);
    EXPECT_LE(used[3] - used[0], 3 * (arena + 4096));

    insts.clear();
    EXPECT_EQ(PoolUsed(), before); // the last instance freed the weights
}

TEST_F(OnnxSessionGpu, InstancesOnTwoGpusHaveAStoreEach) {
    if (osp_device_cuda_count() < 2)
        GTEST_SKIP() << "needs two GPUs";
    osp_device *gpu1 = nullptr;
    ASSERT_OK(osp_device_cuda_get(1, &gpu1));
    ModelPtr m = LoadMlp(onnx_rt_options{});
    ASSERT_TRUE(m);
    std::vector<float> x = RandomFloats(3 * kIn, 4);
    std::vector<float> want = RunOnCpu(m.get(), x);
    Instance a, b;
    ASSERT_OK(NewInstance(m.get(), gpu_, &a));
    ASSERT_OK(NewInstance(m.get(), gpu1, &b));
    ExpectClose(RunModel(a, x), want);
    ExpectClose(RunModel(b, x), want);
    EXPECT_EQ(onnx_session_weight_bytes(b.session), kWeightBytes);
}

TEST_F(OnnxSessionGpu, GraphIsRecordedAfterWarmupAndReplayedWithNewInputs) {
    onnx_rt_options opts = {};
    opts.graphs = true;
    ModelPtr m = LoadMlp(opts);
    ASSERT_TRUE(m);
    Instance inst;
    ASSERT_OK(NewInstance(m.get(), gpu_, &inst));
    for (uint32_t run = 0; run < 4; run++) {
        std::vector<float> x = RandomFloats(4 * kIn, 10 + run);
        ExpectClose(RunModel(inst, x), RunOnCpu(m.get(), x));
    }
    onnx_graph_stats st;
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.eager_runs, 1u); // the warm-up
    EXPECT_EQ(st.captures, 1u);
    EXPECT_EQ(st.replays, 3u);
    EXPECT_EQ(st.graphs, 1u);
    EXPECT_EQ(st.refused, 0u);
}

TEST_F(OnnxSessionGpu, WithoutTheOptionNothingIsRecorded) {
    ModelPtr m = LoadMlp(onnx_rt_options{});
    ASSERT_TRUE(m);
    Instance inst;
    ASSERT_OK(NewInstance(m.get(), gpu_, &inst));
    for (uint32_t run = 0; run < 3; run++)
        RunModel(inst, RandomFloats(2 * kIn, run));
    onnx_graph_stats st;
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.eager_runs, 3u);
    EXPECT_EQ(st.captures + st.replays, 0u);
}

TEST_F(OnnxSessionGpu, EachShapeGetsItsGraphWithinTheBound) {
    onnx_rt_options opts = {};
    opts.graphs = true;
    opts.max_graphs = 2;
    ModelPtr m = LoadMlp(opts);
    ASSERT_TRUE(m);
    Instance inst;
    ASSERT_OK(NewInstance(m.get(), gpu_, &inst));
    // Largest first, so the arena never moves here.
    for (int64_t n : {8, 8, 8, 2, 2, 2, 8}) {
        std::vector<float> x = RandomFloats((size_t)(n * kIn), (uint32_t)n);
        ExpectClose(RunModel(inst, x), RunOnCpu(m.get(), x));
    }
    onnx_graph_stats st;
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.captures, 2u);
    EXPECT_EQ(st.replays, 5u);
    EXPECT_EQ(st.graphs, 2u);
    EXPECT_EQ(st.invalidated, 0u);

    // A third shape takes the place of the least recently used (n = 2),
    // which then starts over: warm-up, then a new recording.
    for (int64_t n : {5, 5, 2, 2}) {
        std::vector<float> x = RandomFloats((size_t)(n * kIn), (uint32_t)n);
        ExpectClose(RunModel(inst, x), RunOnCpu(m.get(), x));
    }
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.graphs, 2u);
    EXPECT_EQ(st.captures, 4u);
    EXPECT_EQ(st.eager_runs, 4u);
}

TEST_F(OnnxSessionGpu, GraphsAreDroppedWhenTheArenaMoves) {
    onnx_rt_options opts = {};
    opts.graphs = true;
    ModelPtr m = LoadMlp(opts);
    ASSERT_TRUE(m);
    Instance inst;
    ASSERT_OK(NewInstance(m.get(), gpu_, &inst));
    std::vector<float> small = RandomFloats(1 * kIn, 20);
    RunModel(inst, small);
    RunModel(inst, small); // recorded against the small arena
    size_t arena = onnx_session_arena_bytes(inst.session);
    std::vector<float> big = RandomFloats(64 * kIn, 21);
    ExpectClose(RunModel(inst, big), RunOnCpu(m.get(), big));
    EXPECT_GT(onnx_session_arena_bytes(inst.session), arena);
    onnx_graph_stats st;
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.invalidated, 1u);
    // The small shape is recorded again, against the new arena.
    ExpectClose(RunModel(inst, small), RunOnCpu(m.get(), small));
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.captures, 2u);
    ExpectClose(RunModel(inst, small), RunOnCpu(m.get(), small));
}

// Norm-wise relative error of got against want.
double RelativeError(const std::vector<float> &got,
                     const std::vector<float> &want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size() && i < got.size(); i++) {
        diff += (double)(got[i] - want[i]) * (got[i] - want[i]);
        norm += (double)want[i] * want[i];
    }
    return got.size() == want.size() ? std::sqrt(diff / (norm + 1e-30)) : 1e9;
}

TEST_F(OnnxSessionGpu, Fp16HoldsMatMulWeightsInHalfWithFp32Accumulation) {
    onnx_rt_options opts = {};
    opts.fp16_weights = true;
    opts.graphs = true;
    ModelPtr m = LoadMlp(opts);
    ModelPtr fp32 = LoadMlp(onnx_rt_options{});
    ASSERT_TRUE(m && fp32);
    Instance inst;
    ASSERT_OK(NewInstance(m.get(), gpu_, &inst));
    for (uint32_t run = 0; run < 3; run++) { // warm-up, recording, replay
        std::vector<float> x = RandomFloats(4 * kIn, 30 + run);
        std::vector<float> want = RunOnCpu(fp32.get(), x);
        std::vector<float> got = RunModel(inst, x);
        double err = RelativeError(got, want);
        EXPECT_LT(err, 2e-3) << "run " << run;
        EXPECT_GT(err, 0.0) << "run " << run << ": FP32 results, not FP16";
        // On the CPU device the option changes nothing.
        ExpectClose(RunOnCpu(m.get(), x), want);
    }
    // Only the FP16 copies are on the GPU: half the FP32 weights.
    EXPECT_EQ(onnx_session_weight_bytes(inst.session), kWeightBytes / 2);
    onnx_graph_stats st;
    onnx_session_graph_stats(inst.session, &st);
    EXPECT_EQ(st.replays, 2u);
}

// ---- precision fp16 and allow_tf32 on every product; FP16 models ----

// A host-side tensor handed to or taken from RunGraph.
struct HostTensor {
    osp_datatype dtype = OSP_TYPE_FP32;
    std::vector<int64_t> shape;
    std::string bytes;
};

// Every output of a run, each into a device buffer of its own.
struct Outputs {
    osp_device *dev;
    std::vector<osp_buffer *> bufs;
    std::vector<HostTensor> meta;
    static osp_error *Alloc(void *ctx, size_t index, osp_datatype dtype,
                            const osp_shape *shape, size_t bytes, void **data) {
        auto *o = static_cast<Outputs *>(ctx);
        if (o->bufs.size() <= index) {
            o->bufs.resize(index + 1, nullptr);
            o->meta.resize(index + 1);
        }
        osp_buffer_free(o->bufs[index]);
        o->bufs[index] = nullptr;
        o->meta[index].dtype = dtype;
        o->meta[index].shape.assign(shape->dims, shape->dims + shape->rank);
        o->meta[index].bytes.assign(bytes, '\0');
        osp_error *err =
            osp_device_alloc(o->dev, bytes ? bytes : 1, &o->bufs[index]);
        if (err == nullptr)
            *data = o->bufs[index]->data;
        return err;
    }
    ~Outputs() {
        for (osp_buffer *b : bufs)
            osp_buffer_free(b);
    }
};

// Runs inst's session on inputs (host values) and returns every output.
std::vector<HostTensor> RunGraph(Instance &inst,
                                 const std::vector<HostTensor> &inputs) {
    osp_device *dev = osp_stream_device(inst.stream);
    std::vector<osp_buffer *> in(inputs.size(), nullptr);
    std::vector<onnx_io> io(inputs.size());
    osp_error *err = nullptr;
    for (size_t i = 0; i < inputs.size() && err == nullptr; i++) {
        const HostTensor &t = inputs[i];
        err = osp_device_alloc(dev, t.bytes.size(), &in[i]);
        if (err == nullptr)
            err = osp_memcpy_async(inst.stream, in[i]->data, t.bytes.data(),
                                   t.bytes.size(), OSP_COPY_HOST_TO_DEVICE);
        io[i].dtype = t.dtype;
        io[i].shape.rank = (int)t.shape.size();
        for (size_t d = 0; d < t.shape.size(); d++)
            io[i].shape.dims[d] = t.shape[d];
        io[i].data = in[i] != nullptr ? in[i]->data : nullptr;
        io[i].byte_size = t.bytes.size();
    }
    Outputs out{dev, {}, {}};
    if (err == nullptr)
        err = onnx_session_run(inst.session, io.data(), io.size(),
                               Outputs::Alloc, &out);
    for (size_t k = 0; k < out.bufs.size() && err == nullptr; k++)
        if (out.bufs[k] != nullptr && !out.meta[k].bytes.empty())
            err = osp_memcpy_async(inst.stream, &out.meta[k].bytes[0],
                                   out.bufs[k]->data, out.meta[k].bytes.size(),
                                   OSP_COPY_DEVICE_TO_HOST);
    if (err == nullptr)
        err = osp_stream_synchronize(inst.stream);
    if (err != nullptr)
        ADD_FAILURE() << TakeMessage(err);
    for (osp_buffer *b : in)
        osp_buffer_free(b);
    return out.meta;
}

// A tensor's values as doubles (FP32 or FP16).
std::vector<float> Values(const HostTensor &t) {
    std::vector<float> v;
    if (t.dtype == OSP_TYPE_FP16) {
        v.resize(t.bytes.size() / 2);
        for (size_t i = 0; i < v.size(); i++) {
            uint16_t h;
            memcpy(&h, t.bytes.data() + 2 * i, 2);
            v[i] = fp16_to_fp32(h);
        }
    } else {
        v.resize(t.bytes.size() / 4);
        if (!v.empty())
            memcpy(v.data(), t.bytes.data(), t.bytes.size());
    }
    return v;
}

// values as an elem_type tensor's bytes (FP16: rounded to nearest even).
std::string Raw(const std::vector<float> &values, int elem_type) {
    std::string raw;
    for (float f : values) {
        if (elem_type == kOnnxFloat16) {
            uint16_t h = fp32_to_fp16(f);
            raw.append(reinterpret_cast<const char *>(&h), 2);
        } else {
            raw.append(reinterpret_cast<const char *>(&f), 4);
        }
    }
    return raw;
}

// A graph builder for models whose every tensor is of one elem type.
struct Graph {
    Graph(int elem_type, bool half) : elem(elem_type), half_values(half) {}
    int elem;
    bool half_values; // FP32 weights of FP16 values (an FP16 model's twin)
    Pb g;
    size_t weight_count = 0; // elements of every initializer
    uint32_t seed = 100;
    Graph &Weight(const std::string &name, const std::vector<int64_t> &dims,
                  float scale = 0.5f) {
        size_t n = 1;
        for (int64_t d : dims)
            n *= (size_t)d;
        std::vector<float> v = RandomFloats(n, seed++);
        for (float &f : v) {
            f *= scale;
            if (half_values)
                f = fp16_to_fp32(fp32_to_fp16(f));
        }
        g.Msg(5, OnnxRawInitializer(name, elem, dims, Raw(v, elem)));
        weight_count += n;
        return *this;
    }
    Graph &Node(const std::string &op, const std::vector<std::string> &in,
                const std::string &out, const std::vector<Pb> &attrs = {}) {
        g.Msg(1, OnnxNode(op, in, {out}, attrs));
        return *this;
    }
    std::string Model(
        const std::vector<std::pair<std::string, std::vector<int64_t>>> &ins,
        const std::vector<std::pair<std::string, std::vector<int64_t>>> &outs) {
        Pb graph = g;
        graph.Bytes(2, "g");
        for (const auto &i : ins)
            graph.Msg(11, OnnxValue(i.first, elem, i.second));
        for (const auto &o : outs)
            graph.Msg(12, OnnxValue(o.first, elem, o.second));
        Pb opset;
        opset.Bytes(1, "").Varint(2, 13);
        Pb m;
        m.Varint(1, 8).Msg(7, graph).Msg(8, opset);
        return m.str();
    }
};

// A small CNN: a 3x3 conv (+ bias, fused ReLU), a depthwise 3x3 of
// stride 2, a pointwise conv, a grouped, dilated 3x3, average pooling
// over the whole 5x5 and a Gemm head (transB, alpha, bias); and a
// ConvTranspose of the depthwise output as a second output. Weights:
// 1554 elements, of which the convs' and the Gemm's (not depthwise, not
// ConvTranspose's, not the biases) are 1328.
std::string CnnModel(int elem, bool half_values = false) {
    Graph m(elem, half_values);
    m.Weight("w1", {8, 3, 3, 3})
        .Weight("b1", {8})
        .Weight("w2", {8, 1, 3, 3})
        .Weight("b2", {8})
        .Weight("w3", {16, 8, 1, 1})
        .Weight("w4", {12, 8, 3, 3}, 0.25f)
        .Weight("wf", {10, 12})
        .Weight("cf", {10})
        .Weight("wt", {8, 4, 2, 2});
    m.Node("Conv", {"x", "w1", "b1"}, "c1",
           {OnnxIntsAttr("pads", {1, 1, 1, 1})})
        .Node("Relu", {"c1"}, "r1")
        .Node("Conv", {"r1", "w2", "b2"}, "c2",
              {OnnxIntAttr("group", 8), OnnxIntsAttr("strides", {2, 2}),
               OnnxIntsAttr("pads", {1, 1, 1, 1})})
        .Node("Conv", {"c2", "w3"}, "c3")
        .Node("Conv", {"c3", "w4"}, "c4",
              {OnnxIntAttr("group", 2), OnnxIntsAttr("dilations", {2, 2}),
               OnnxIntsAttr("pads", {2, 2, 2, 2})})
        .Node("AveragePool", {"c4"}, "p",
              {OnnxIntsAttr("kernel_shape", {5, 5})})
        .Node("Flatten", {"p"}, "f")
        .Node("Gemm", {"f", "wf", "cf"}, "y",
              {OnnxIntAttr("transB", 1), OnnxFloatAttr("alpha", 0.5f)})
        .Node("ConvTranspose", {"c2", "wt"}, "t",
              {OnnxIntsAttr("strides", {2, 2})});
    return m.Model({{"x", {-1, 3, 9, 9}}},
                   {{"y", {-1, 10}}, {"t", {-1, 4, 10, 10}}});
}
constexpr size_t kCnnWeights = 1554, kCnnHalfWeights = 1328;

// Products of every kind: MatMul by a weight, MatMul + bias (fused),
// Gemm (transB, alpha, bias C), Einsum by a weight, and three products
// of two activations: MatMul (K = the batch), Gemm with transA, Einsum
// contracting the batch. Weights: 1632 elements, 1600 of them the
// products' (not the biases c2 and cz).
std::string ProductsModel(int elem, bool half_values = false) {
    Graph m(elem, half_values);
    m.Weight("w1", {16, 32})
        .Weight("w2", {24, 32})
        .Weight("c2", {24})
        .Weight("w3", {24, 8})
        .Weight("w4", {16, 8})
        .Weight("cz", {8});
    m.Node("MatMul", {"x", "w1"}, "h")
        .Node("Gemm", {"h", "w2", "c2"}, "g",
              {OnnxIntAttr("transB", 1), OnnxFloatAttr("alpha", 0.5f)})
        .Node("Einsum", {"g", "w3"}, "e",
              {OnnxStringAttr("equation", "nk,kj->nj")})
        .Node("Transpose", {"e"}, "et")
        .Node("MatMul", {"et", "e"}, "y1")
        .Node("Gemm", {"e", "e"}, "y2", {OnnxIntAttr("transA", 1)})
        .Node("Einsum", {"e", "g"}, "y3",
              {OnnxStringAttr("equation", "ni,nj->ij")})
        .Node("MatMul", {"x", "w4"}, "zm")
        .Node("Add", {"zm", "cz"}, "z");
    return m.Model({{"x", {-1, 16}}}, {{"y1", {8, 8}},
                                       {"y2", {8, 8}},
                                       {"y3", {8, 24}},
                                       {"e", {-1, 8}},
                                       {"z", {-1, 8}}});
}
constexpr size_t kProductWeights = 1632, kProductHalfWeights = 1600;

ModelPtr LoadBytes(const std::string &bytes, const onnx_rt_options &opts) {
    onnx_model *file = nullptr;
    osp_error *err = onnx_model_load_bytes(bytes.data(), bytes.size(), nullptr,
                                           nullptr, &file);
    if (err != nullptr) {
        ADD_FAILURE() << TakeMessage(err);
        return nullptr;
    }
    onnx_rt_model *m = nullptr;
    if ((err = onnx_rt_model_new(file, &opts, &m)) != nullptr)
        ADD_FAILURE() << TakeMessage(err);
    return ModelPtr(m);
}

// The model's input for a batch of n (CNN: [n, 3, 9, 9]; products: [n, 16]).
HostTensor ModelInput(bool cnn, int elem, int64_t n, uint32_t seed) {
    HostTensor t;
    t.dtype = elem == kOnnxFloat16 ? OSP_TYPE_FP16 : OSP_TYPE_FP32;
    t.shape =
        cnn ? std::vector<int64_t>{n, 3, 9, 9} : std::vector<int64_t>{n, 16};
    size_t count = 1;
    for (int64_t d : t.shape)
        count *= (size_t)d;
    t.bytes = Raw(RandomFloats(count, seed), elem);
    return t;
}

// The largest norm-wise relative error over the outputs of got vs want.
double WorstError(const std::vector<HostTensor> &got,
                  const std::vector<HostTensor> &want) {
    if (got.size() != want.size() || want.empty())
        return 1e9;
    double worst = 0;
    for (size_t k = 0; k < want.size(); k++) {
        EXPECT_EQ(got[k].shape, want[k].shape) << "output " << k;
        worst = std::max(worst, RelativeError(Values(got[k]), Values(want[k])));
    }
    return worst;
}

// GEMM calls of a precision the fake cuBLAS has made (0 on a real GPU).
unsigned long CublasCalls(bool fp16) {
#ifdef OSPREY_TEST_FAKE_CUDA
    fake_cublas_counts c;
    fake_cublas_counts_get(&c);
    return fp16 ? c.fp16_fp32c : c.tf32;
#else
    (void)fp16;
    return 0;
#endif
}

#ifdef OSPREY_TEST_FAKE_CUDA
constexpr bool kFake = true;
#else
constexpr bool kFake = false;
#endif

// precision fp16 and allow_tf32 on the CNN and on the products, on a GPU
// (graphs on: warm-up, recording, replay) against the CPU device in FP32:
// within 5e-3 norm-wise (both keep 11 significant bits of each operand
// and sum in FP32), not equal to FP32 (the products really were made in
// the lower precision), every product through cuBLAS in that precision
// (the fake's counts, during the warm-up: 4 for the CNN, whose depthwise
// conv keeps its FP32 kernel, and 7 for the products), and under fp16
// only the FP16 copies of the products' weights on the GPU. On the CPU
// device the options change nothing.
TEST_F(OnnxSessionGpu, PrecisionModesReachEveryProduct) {
    for (bool cnn : {true, false})
        for (bool fp16 : {true, false}) {
            SCOPED_TRACE(std::string(cnn ? "cnn" : "products") +
                         (fp16 ? " fp16" : " tf32"));
            std::string bytes =
                cnn ? CnnModel(kOnnxFloat) : ProductsModel(kOnnxFloat);
            onnx_rt_options opts = {};
            opts.fuse = true;
            opts.graphs = true;
            opts.fp16_weights = fp16;
            opts.allow_tf32 = !fp16;
            onnx_rt_options plain = {};
            plain.fuse = true;
            ModelPtr m = LoadBytes(bytes, opts), ref = LoadBytes(bytes, plain);
            ASSERT_TRUE(m && ref);
            Instance gpu, cpu, cpu_ref;
            ASSERT_OK(NewInstance(m.get(), gpu_, &gpu));
            ASSERT_OK(NewInstance(m.get(), osp_device_cpu(), &cpu));
            ASSERT_OK(NewInstance(ref.get(), osp_device_cpu(), &cpu_ref));
            for (uint32_t run = 0; run < 3; run++) {
                std::vector<HostTensor> in = {
                    ModelInput(cnn, kOnnxFloat, 2, 40 + run)};
                std::vector<HostTensor> want = RunGraph(cpu_ref, in);
                unsigned long calls = CublasCalls(fp16);
                std::vector<HostTensor> got = RunGraph(gpu, in);
                double err = WorstError(got, want);
                printf("%s %s run %u: error %.2e\n", cnn ? "cnn" : "products",
                       fp16 ? "fp16" : "tf32", run, err);
                EXPECT_LT(err, 5e-3) << "run " << run;
                if (kFake) {
                    EXPECT_GT(err, 1e-6) << "run " << run << ": FP32 results";
                    if (run == 0) {
                        EXPECT_GE(CublasCalls(fp16) - calls, cnn ? 4u : 7u);
                    }
                }
                EXPECT_LT(WorstError(RunGraph(cpu, in), want), 1e-5);
            }
            size_t all = cnn ? kCnnWeights : kProductWeights;
            size_t halves = cnn ? kCnnHalfWeights : kProductHalfWeights;
            EXPECT_EQ(onnx_session_weight_bytes(gpu.session),
                      fp16 ? halves * 2 + (all - halves) * 4 : all * 4);
            onnx_graph_stats st;
            onnx_session_graph_stats(gpu.session, &st);
            EXPECT_EQ(st.replays, 2u); // the recording's launch, a replay
        }
}

// Models whose tensors are FP16 in the file: every product (Conv,
// ConvTranspose, MatMul, Gemm, Einsum) runs on both devices, FP16
// operands with FP32 accumulation on each: the GPU within 2e-3 of the
// CPU (one FP16 rounding of the outputs apart at most), and the CPU within
// 1e-2 of the same model in FP32 (the weights the same values).
TEST_F(OnnxSessionGpu, Fp16ModelsRunEveryProductOnBothDevices) {
    for (bool cnn : {true, false}) {
        SCOPED_TRACE(cnn ? "cnn" : "products");
        onnx_rt_options opts = {};
        opts.fuse = true;
        ModelPtr half = LoadBytes(
            cnn ? CnnModel(kOnnxFloat16) : ProductsModel(kOnnxFloat16), opts);
        ASSERT_TRUE(half);
        Instance gpu, cpu;
        ASSERT_OK(NewInstance(half.get(), gpu_, &gpu));
        ASSERT_OK(NewInstance(half.get(), osp_device_cpu(), &cpu));
        // The FP32 twin: the same (FP16) weight values in FP32.
        ModelPtr twin = LoadBytes(cnn ? CnnModel(kOnnxFloat, true)
                                      : ProductsModel(kOnnxFloat, true),
                                  opts);
        ASSERT_TRUE(twin);
        Instance cpu32;
        ASSERT_OK(NewInstance(twin.get(), osp_device_cpu(), &cpu32));
        for (uint32_t run = 0; run < 2; run++) {
            HostTensor x16 = ModelInput(cnn, kOnnxFloat16, 3, 60 + run);
            std::vector<HostTensor> got = RunGraph(gpu, {x16});
            std::vector<HostTensor> want = RunGraph(cpu, {x16});
            ASSERT_EQ(got.size(), cnn ? 2u : 5u);
            EXPECT_EQ(got[0].dtype, OSP_TYPE_FP16);
            double err = WorstError(got, want);
            printf("fp16 model %s run %u: GPU vs CPU %.2e\n",
                   cnn ? "cnn" : "products", run, err);
            EXPECT_LT(err, 2e-3);
            HostTensor x32 = x16;
            x32.dtype = OSP_TYPE_FP32;
            x32.bytes = Raw(Values(x16), kOnnxFloat);
            double to_fp32 = WorstError(want, RunGraph(cpu32, {x32}));
            printf("fp16 model %s run %u: CPU vs FP32 %.2e\n",
                   cnn ? "cnn" : "products", run, to_fp32);
            EXPECT_LT(to_fp32, 1e-2);
        }
    }
}

// ---- the graph slots themselves ----

TEST_F(OnnxSessionGpu, CaptureRecordsInsteadOfRunningAndReplaysEachLaunch) {
    osp_stream *s = nullptr;
    ASSERT_OK(osp_stream_new(gpu_, &s));
    ASSERT_TRUE(osp_stream_supports_graphs(s));
    const size_t n = 1000;
    osp_buffer *a = nullptr, *b = nullptr;
    ASSERT_OK(osp_device_alloc(gpu_, n * 4, &a));
    ASSERT_OK(osp_device_alloc(gpu_, n * 4, &b));
    std::vector<float> ones(n, 1.0f), got(n);
    ASSERT_OK(osp_memcpy_async(s, a->data, ones.data(), n * 4,
                               OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_memcpy_async(s, b->data, ones.data(), n * 4,
                               OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_stream_synchronize(s));

    // b = a + b, recorded: nothing runs until the graph is launched.
    ASSERT_OK(osp_stream_begin_capture(s));
    ASSERT_OK(osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_FP32, a->data, b->data,
                            b->data, n));
    osp_graph *g = nullptr;
    ASSERT_OK(osp_stream_end_capture(s, &g));
    ASSERT_OK(osp_memcpy_async(s, got.data(), b->data, n * 4,
                               OSP_COPY_DEVICE_TO_HOST));
    ASSERT_OK(osp_stream_synchronize(s));
    EXPECT_EQ(got[0], 1.0f);
    for (int launch = 0; launch < 3; launch++)
        ASSERT_OK(osp_graph_launch(g, s));
    ASSERT_OK(osp_memcpy_async(s, got.data(), b->data, n * 4,
                               OSP_COPY_DEVICE_TO_HOST));
    ASSERT_OK(osp_stream_synchronize(s));
    EXPECT_EQ(got[0], 4.0f);
    EXPECT_EQ(got[n - 1], 4.0f);
    osp_graph_free(g);
    osp_buffer_free(a);
    osp_buffer_free(b);
    osp_stream_free(s);
}

TEST_F(OnnxSessionGpu, CaptureRefusesWhatAReplayCannotRepeat) {
    osp_stream *s = nullptr;
    ASSERT_OK(osp_stream_new(gpu_, &s));
    // Synchronising the capturing stream invalidates the capture.
    ASSERT_OK(osp_stream_begin_capture(s));
    osp_error *sync = osp_stream_synchronize(s);
    EXPECT_NE(sync, nullptr) << "synchronize allowed";
    osp_error_free(sync);
    osp_graph *g = nullptr;
    osp_error *err = osp_stream_end_capture(s, &g);
    EXPECT_NE(err, nullptr);
    osp_error_free(err);
    EXPECT_EQ(g, nullptr);
    // A host function would run at every replay: refused by the layer.
    ASSERT_OK(osp_stream_begin_capture(s));
    EXPECT_ERROR_CODE(osp_stream_launch_host_func(
                          s, [](void *) {}, nullptr),
                      OSP_ERROR_UNSUPPORTED);
    ASSERT_OK(osp_stream_end_capture(s, &g));
    osp_graph_free(g);
    // The stream works normally afterwards.
    ASSERT_OK(osp_stream_synchronize(s));
    // The CPU device records nothing.
    osp_stream *cpu = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &cpu));
    EXPECT_FALSE(osp_stream_supports_graphs(cpu));
    EXPECT_ERROR_CODE(osp_stream_begin_capture(cpu), OSP_ERROR_UNSUPPORTED);
    osp_stream_free(cpu);
    osp_stream_free(s);
}

#ifdef OSPREY_TEST_FAKE_CUDA
// What a GPU would silently corrupt, the fake catches: a graph replayed
// after memory it captured was freed.
TEST_F(OnnxSessionGpu, FakeRefusesReplayIntoFreedMemory) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    void *src = nullptr, *dst = nullptr;
    ASSERT_EQ(cudaMalloc(&src, 4096), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dst, 4096), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    // Allocating is refused while this thread captures.
    void *refused = nullptr;
    EXPECT_EQ(cudaMalloc(&refused, 64), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &graph),
              cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    (void)cudaGetLastError();

    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(dst, src, 4096, cudaMemcpyDeviceToDevice, s),
              cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(cudaFree(src), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    // Memory reallocated at the same address is another allocation.
    void *again = nullptr;
    ASSERT_EQ(cudaMalloc(&again, 4096), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaFree(again), cudaSuccess);
    EXPECT_EQ(cudaFree(dst), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}
#endif

} // namespace

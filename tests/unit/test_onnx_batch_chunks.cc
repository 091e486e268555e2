// Batch chunks on the CPU device (backends/onnx/onnx_batch_chunks.c and
// onnx_session.c): a graph whose nodes keep samples apart runs a large
// batch in chunks whose arena fits the budget, with the same outputs as
// the whole batch and as one sample at a time; a graph that mixes samples
// (a constant spanning dim 0) runs whole whatever the budget.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "onnx_pb_writer.h"
#include "onnx_runtime.h"
#include "osp_test.h"
#include "osprey/device.h"

namespace {

// An initializer of random values (the same for the same seed).
Pb Initializer(const std::string &name, const std::vector<int64_t> &dims,
               uint32_t seed) {
    size_t n = 1;
    for (int64_t d : dims)
        n *= static_cast<size_t>(d);
    return OnnxFloatInitializer(name, dims, RandomFloats(n, seed));
}

Pb Node(const std::string &op, const std::vector<std::string> &in,
        const std::string &out) {
    Pb n;
    for (const std::string &i : in)
        n.Bytes(1, i);
    n.Bytes(2, out).Bytes(4, op);
    return n;
}

Pb IntsAttr(const std::string &name, const std::vector<int64_t> &values) {
    Pb a;
    a.Bytes(1, name).Varint(20, 7); // type INTS
    for (int64_t v : values)
        a.Varint(8, static_cast<uint64_t>(v));
    return a;
}

std::string ModelBytes(const Pb &graph) {
    Pb opset;
    opset.Bytes(1, "").Varint(2, 13);
    Pb m;
    m.Varint(1, 8).Msg(7, graph).Msg(8, opset);
    return m.str();
}

constexpr int64_t kChannels = 2, kSide = 6, kFeatures = 3, kClasses = 4;

// A small CNN: x[N,2,6,6] → Conv 3x3 (pads 1) → Relu = r[N,3,6,6] →
// GlobalAveragePool → Flatten → Gemm = y[N,4]. Outputs y and r.
std::string CnnModel() {
    Pb conv = Node("Conv", {"x", "w", "b"}, "c");
    conv.Msg(5, IntsAttr("pads", {1, 1, 1, 1}));
    Pb g;
    g.Bytes(2, "cnn")
        .Msg(1, conv)
        .Msg(1, Node("Relu", {"c"}, "r"))
        .Msg(1, Node("GlobalAveragePool", {"r"}, "p"))
        .Msg(1, Node("Flatten", {"p"}, "f"))
        .Msg(1, Node("Gemm", {"f", "w2", "b2"}, "y"))
        .Msg(5, Initializer("w", {kFeatures, kChannels, 3, 3}, 1))
        .Msg(5, Initializer("b", {kFeatures}, 2))
        .Msg(5, Initializer("w2", {kFeatures, kClasses}, 3))
        .Msg(5, Initializer("b2", {kClasses}, 4))
        .Msg(11, OnnxFloatValue("x", {-1, kChannels, kSide, kSide}))
        .Msg(12, OnnxFloatValue("y", {-1, kClasses}))
        .Msg(12, OnnxFloatValue("r", {-1, kFeatures, kSide, kSide}));
    return ModelBytes(g);
}

// y[N,4] = x[N,4] + c[3,4]: only batch 3 (or 1) fits, and row i of the
// constant goes with sample i, so cutting the batch would change it.
std::string ConstantAcrossBatchModel() {
    Pb g;
    g.Bytes(2, "spanning")
        .Msg(1, Node("Add", {"x", "c"}, "y"))
        .Msg(5, Initializer("c", {3, kClasses}, 5))
        .Msg(11, OnnxFloatValue("x", {-1, kClasses}))
        .Msg(12, OnnxFloatValue("y", {-1, kClasses}));
    return ModelBytes(g);
}

struct ModelFree {
    void operator()(onnx_rt_model *m) const {
        onnx_rt_model_free(m);
    }
};
using ModelPtr = std::unique_ptr<onnx_rt_model, ModelFree>;

ModelPtr Load(const std::string &bytes, size_t chunk_bytes) {
    onnx_model *file = nullptr;
    osp_error *err = onnx_model_load_bytes(bytes.data(), bytes.size(), nullptr,
                                           nullptr, &file);
    if (err != nullptr) {
        ADD_FAILURE() << TakeMessage(err);
        return nullptr;
    }
    onnx_rt_options opts = {};
    opts.fuse = true;
    opts.batch_chunk_bytes = chunk_bytes;
    onnx_rt_model *m = nullptr;
    if ((err = onnx_rt_model_new(file, &opts, &m)) != nullptr)
        ADD_FAILURE() << TakeMessage(err);
    return ModelPtr(m);
}

// One CPU session and the outputs of its last run.
class Session {
  public:
    explicit Session(onnx_rt_model *m) {
        osp_error *err = osp_stream_new(osp_device_cpu(), &stream_);
        if (err == nullptr)
            err = onnx_session_new(m, osp_device_cpu(), stream_, &session_);
        if (err != nullptr)
            ADD_FAILURE() << TakeMessage(err);
    }
    ~Session() {
        onnx_session_free(session_);
        osp_stream_free(stream_);
    }

    // Runs x of shape dims; returns every output, flattened, in order.
    std::vector<std::vector<float>> Run(const std::vector<float> &x,
                                        const std::vector<int64_t> &dims) {
        onnx_io io = {};
        io.dtype = OSP_TYPE_FP32;
        io.shape.rank = static_cast<int>(dims.size());
        for (size_t i = 0; i < dims.size(); i++)
            io.shape.dims[i] = dims[i];
        io.data = x.data();
        io.byte_size = x.size() * sizeof(float);
        outputs_.clear();
        alloc_calls_ = 0;
        osp_error *err = onnx_session_run(session_, &io, 1, Alloc, this);
        if (err == nullptr)
            err = osp_stream_synchronize(stream_);
        if (err != nullptr)
            ADD_FAILURE() << TakeMessage(err);
        return outputs_;
    }

    uint64_t ChunkedRuns() const {
        onnx_graph_stats stats;
        onnx_session_graph_stats(session_, &stats);
        return stats.chunked_runs;
    }
    size_t ArenaBytes() const {
        return onnx_session_arena_bytes(session_);
    }
    int AllocCalls() const {
        return alloc_calls_;
    }

  private:
    static osp_error *Alloc(void *ctx, size_t index, osp_datatype,
                            const osp_shape *, size_t bytes, void **data) {
        auto *self = static_cast<Session *>(ctx);
        self->alloc_calls_++;
        if (self->outputs_.size() <= index)
            self->outputs_.resize(index + 1);
        self->outputs_[index].assign(bytes / sizeof(float), NAN);
        *data = self->outputs_[index].data();
        return nullptr;
    }

    osp_stream *stream_ = nullptr;
    onnx_session *session_ = nullptr;
    std::vector<std::vector<float>> outputs_;
    int alloc_calls_ = 0;
};

constexpr size_t kNeverChunk = SIZE_MAX;
constexpr size_t kSampleFloats = kChannels * kSide * kSide;

void ExpectNear(const std::vector<std::vector<float>> &got,
                const std::vector<std::vector<float>> &want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); k++) {
        ASSERT_EQ(got[k].size(), want[k].size()) << "output " << k;
        for (size_t i = 0; i < got[k].size(); i++)
            ASSERT_NEAR(got[k][i], want[k][i], 1e-5f)
                << "output " << k << " element " << i;
    }
}

// The outputs of each sample run alone, concatenated per output.
std::vector<std::vector<float>> OneSampleAtATime(onnx_rt_model *m,
                                                 const std::vector<float> &x,
                                                 int64_t batch) {
    Session one(m);
    std::vector<std::vector<float>> all;
    for (int64_t i = 0; i < batch; i++) {
        std::vector<float> sample(x.begin() + i * kSampleFloats,
                                  x.begin() + (i + 1) * kSampleFloats);
        auto outs = one.Run(sample, {1, kChannels, kSide, kSide});
        all.resize(outs.size());
        for (size_t k = 0; k < outs.size(); k++)
            all[k].insert(all[k].end(), outs[k].begin(), outs[k].end());
    }
    return all;
}

TEST(OnnxBatchChunks, ChunksOfOneGiveTheWholeBatchsOutputs) {
    constexpr int64_t kBatch = 5;
    std::vector<float> x = RandomFloats(kBatch * kSampleFloats, 7);
    ModelPtr whole = Load(CnnModel(), kNeverChunk);
    ModelPtr chunked = Load(CnnModel(), 1); // every sample alone
    ASSERT_TRUE(whole && chunked);
    Session a(whole.get()), b(chunked.get());
    auto want = a.Run(x, {kBatch, kChannels, kSide, kSide});
    auto got = b.Run(x, {kBatch, kChannels, kSide, kSide});
    EXPECT_EQ(a.ChunkedRuns(), 0u);
    EXPECT_EQ(b.ChunkedRuns(), 1u);
    EXPECT_EQ(b.AllocCalls(), 2) << "each output allocated once, whole";
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].size(), size_t{kBatch * kClasses});
    EXPECT_EQ(got[1].size(), size_t{kBatch * kFeatures * kSide * kSide});
    ExpectNear(got, want);
    ExpectNear(got, OneSampleAtATime(whole.get(), x, kBatch));
}

TEST(OnnxBatchChunks, UnevenChunksWithinTheBudget) {
    constexpr int64_t kBatch = 5;
    std::vector<float> x = RandomFloats(kBatch * kSampleFloats, 8);
    ModelPtr probe = Load(CnnModel(), kNeverChunk);
    ASSERT_TRUE(probe);
    Session sample(probe.get());
    sample.Run(std::vector<float>(x.begin(), x.begin() + kSampleFloats),
               {1, kChannels, kSide, kSide});
    size_t per_sample = sample.ArenaBytes();
    ASSERT_GT(per_sample, 0u);

    // Three samples fit: the batch of 5 runs as chunks of 3 and 2.
    ModelPtr chunked = Load(CnnModel(), 3 * per_sample);
    ASSERT_TRUE(chunked);
    Session s(chunked.get());
    auto got = s.Run(x, {kBatch, kChannels, kSide, kSide});
    EXPECT_EQ(s.ChunkedRuns(), 1u);
    EXPECT_LE(s.ArenaBytes(), 3 * per_sample);
    ExpectNear(got, OneSampleAtATime(probe.get(), x, kBatch));

    // A batch that fits runs whole.
    s.Run(std::vector<float>(x.begin(), x.begin() + 3 * kSampleFloats),
          {3, kChannels, kSide, kSide});
    EXPECT_EQ(s.ChunkedRuns(), 1u);
}

TEST(OnnxBatchChunks, AConstantSpanningTheBatchKeepsItWhole) {
    ModelPtr m = Load(ConstantAcrossBatchModel(), 1);
    ASSERT_TRUE(m);
    Session s(m.get());
    std::vector<float> x = RandomFloats(3 * kClasses, 9);
    auto got = s.Run(x, {3, kClasses});
    EXPECT_EQ(s.ChunkedRuns(), 0u);
    std::vector<float> c = RandomFloats(3 * kClasses, 5);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].size(), x.size());
    for (size_t i = 0; i < x.size(); i++)
        EXPECT_FLOAT_EQ(got[0][i], x[i] + c[i]) << i;
}

} // namespace

// The index-driven tensor ops of osprey/tensor_ops.h (scatter) on the CPU
// device, the reference every other device is tested against, checked
// against the plain loop below; then the dispatcher's argument checks,
// UNSUPPORTED for a device without the slot, and osp_device_supports_op.
//
// Random data comes from a fixed seed, printed with each failure; set
// OSPREY_TEST_SEED to try another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#include "osprey/tensor_ops.h"

namespace {

class TensorOpsIndex : public ::testing::Test {
  public:
    void SetUp() override {
        seed_ = TestSeed(20240611);
        gen_.seed(seed_);
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(osp_device_cpu(), &s));
        stream_.reset(s);
    }
    osp_stream *stream() {
        return stream_.get();
    }
    int64_t Int(int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
    }

    uint64_t seed_ = 0;
    std::mt19937_64 gen_;
    StreamPtr stream_;
};

// The reference: the loop of the header's contract, in T.
template <typename T>
void ReferenceScatter(osp_scatter_reduction red, std::vector<T> &data,
                      int64_t outer, int64_t len, int64_t inner,
                      const std::vector<int64_t> &idx,
                      const std::vector<T> &upd) {
    int64_t n = (int64_t)idx.size();
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++) {
            int64_t v = idx[j] < 0 ? idx[j] + len : idx[j];
            for (int64_t i = 0; i < inner; i++) {
                T &d = data[(o * len + v) * inner + i];
                T u = upd[(o * n + j) * inner + i];
                switch (red) {
                case OSP_SCATTER_NONE:
                    d = u;
                    break;
                case OSP_SCATTER_ADD:
                    d = d + u;
                    break;
                case OSP_SCATTER_MUL:
                    d = d * u;
                    break;
                case OSP_SCATTER_MAX:
                    d = std::max(d, u);
                    break;
                case OSP_SCATTER_MIN:
                    d = std::min(d, u);
                    break;
                default:
                    break;
                }
            }
        }
}

template <typename T> osp_datatype DtypeOf();
template <> osp_datatype DtypeOf<float>() {
    return OSP_TYPE_FP32;
}
template <> osp_datatype DtypeOf<int32_t>() {
    return OSP_TYPE_INT32;
}
template <> osp_datatype DtypeOf<int64_t>() {
    return OSP_TYPE_INT64;
}

// Every reduction on random shapes, with repeated and negative indices,
// INT64 and INT32 indices.
template <typename T> void CheckAllReductions(TensorOpsIndex *t) {
    for (int red = 0; red < OSP_SCATTER_REDUCTION_COUNT_; red++)
        for (int trial = 0; trial < 20; trial++) {
            int64_t outer = t->Int(1, 3), len = t->Int(1, 6),
                    inner = t->Int(1, 4), n = t->Int(1, 8);
            std::vector<T> data((size_t)(outer * len * inner));
            std::vector<T> upd((size_t)(outer * n * inner));
            for (auto &x : data)
                x = (T)t->Int(-5, 5);
            for (auto &x : upd)
                x = (T)t->Int(-5, 5);
            std::vector<int64_t> idx((size_t)n);
            for (auto &x : idx)
                x = t->Int(-len, len - 1);
            std::vector<T> want = data;
            ReferenceScatter<T>((osp_scatter_reduction)red, want, outer, len,
                                inner, idx, upd);
            bool i32 = trial % 2 == 1;
            std::vector<int32_t> idx32(idx.begin(), idx.end());
            osp_scatter_args a{};
            a.reduction = (osp_scatter_reduction)red;
            a.dtype = DtypeOf<T>();
            a.data = data.data();
            a.outer = outer;
            a.axis_len = len;
            a.inner = inner;
            a.index_dtype = i32 ? OSP_TYPE_INT32 : OSP_TYPE_INT64;
            a.indices =
                i32 ? (const void *)idx32.data() : (const void *)idx.data();
            a.n_indices = n;
            a.updates = upd.data();
            ASSERT_OK(osp_op_scatter(t->stream(), &a));
            ASSERT_OK(osp_stream_synchronize(t->stream()));
            EXPECT_EQ(data, want) << "reduction " << red << " trial " << trial
                                  << " seed " << t->seed_;
        }
}

TEST_F(TensorOpsIndex, ScatterFloat) {
    CheckAllReductions<float>(this);
}

TEST_F(TensorOpsIndex, ScatterInt32) {
    CheckAllReductions<int32_t>(this);
}

TEST_F(TensorOpsIndex, ScatterInt64) {
    CheckAllReductions<int64_t>(this);
}

// NONE moves bytes: a 1-byte and a 2-byte dtype; the last repeated index
// wins on the CPU.
TEST_F(TensorOpsIndex, ScatterNoneMovesAnyElementSize) {
    std::vector<uint8_t> data = {1, 2, 3, 4};
    std::vector<uint8_t> upd = {9, 8, 7};
    std::vector<int64_t> idx = {-1, 0, 3};
    osp_scatter_args a{};
    a.reduction = OSP_SCATTER_NONE;
    a.dtype = OSP_TYPE_UINT8;
    a.data = data.data();
    a.outer = 1;
    a.axis_len = 4;
    a.inner = 1;
    a.index_dtype = OSP_TYPE_INT64;
    a.indices = idx.data();
    a.n_indices = 3;
    a.updates = upd.data();
    ASSERT_OK(osp_op_scatter(stream(), &a));
    EXPECT_EQ(data, (std::vector<uint8_t>{8, 2, 3, 7}));

    std::vector<uint16_t> h = {10, 20, 30, 40, 50, 60};
    std::vector<uint16_t> hu = {1, 2};
    std::vector<int32_t> hi = {2};
    a.dtype = OSP_TYPE_FP16;
    a.data = h.data();
    a.outer = 1;
    a.axis_len = 3;
    a.inner = 2;
    a.index_dtype = OSP_TYPE_INT32;
    a.indices = hi.data();
    a.n_indices = 1;
    a.updates = hu.data();
    ASSERT_OK(osp_op_scatter(stream(), &a));
    EXPECT_EQ(h, (std::vector<uint16_t>{10, 20, 30, 40, 1, 2}));
}

// An index out of range is INVALID_ARG and writes nothing.
TEST_F(TensorOpsIndex, ScatterOutOfRangeWritesNothing) {
    std::vector<float> data = {1, 2, 3};
    std::vector<float> upd = {7, 8};
    std::vector<int64_t> idx = {0, 3};
    osp_scatter_args a{};
    a.reduction = OSP_SCATTER_ADD;
    a.dtype = OSP_TYPE_FP32;
    a.data = data.data();
    a.outer = 1;
    a.axis_len = 3;
    a.inner = 1;
    a.index_dtype = OSP_TYPE_INT64;
    a.indices = idx.data();
    a.n_indices = 2;
    a.updates = upd.data();
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &a), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
    idx[1] = -4;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &a), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
}

TEST_F(TensorOpsIndex, ScatterDispatcherChecks) {
    float data[2] = {1, 2}, upd[1] = {5};
    int64_t idx[1] = {0};
    osp_scatter_args a{};
    a.reduction = OSP_SCATTER_ADD;
    a.dtype = OSP_TYPE_FP32;
    a.data = data;
    a.outer = 1;
    a.axis_len = 2;
    a.inner = 1;
    a.index_dtype = OSP_TYPE_INT64;
    a.indices = idx;
    a.n_indices = 1;
    a.updates = upd;
    EXPECT_ERROR_CODE(osp_op_scatter(nullptr, &a), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), nullptr), OSP_ERROR_INVALID_ARG);

    osp_scatter_args b = a;
    b.dtype = OSP_TYPE_UINT8; // reductions take FP32, INT32, INT64
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_UNSUPPORTED);
    b = a;
    b.dtype = OSP_TYPE_BYTES;
    b.reduction = OSP_SCATTER_NONE;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_UNSUPPORTED);
    b = a;
    b.reduction = OSP_SCATTER_REDUCTION_COUNT_;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_INVALID_ARG);
    b = a;
    b.index_dtype = OSP_TYPE_FP32;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_UNSUPPORTED);
    b = a;
    b.inner = -1;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_INVALID_ARG);
    b = a;
    b.outer = INT64_MAX;
    b.axis_len = INT64_MAX;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_INVALID_ARG);
    b = a;
    b.updates = nullptr;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_INVALID_ARG);
    b = a;
    b.data = nullptr;
    EXPECT_ERROR_CODE(osp_op_scatter(stream(), &b), OSP_ERROR_INVALID_ARG);

    // No updates: nothing to do, even with NULL pointers.
    b = a;
    b.n_indices = 0;
    b.indices = nullptr;
    b.updates = nullptr;
    ASSERT_OK(osp_op_scatter(stream(), &b));
    EXPECT_EQ(data[0], 1.0f);
}

TEST_F(TensorOpsIndex, MissingScatterSlotIsUnsupported) {
    EXPECT_TRUE(osp_device_supports_op(osp_device_cpu(), OSP_OP_SCATTER));
    EXPECT_STREQ(osp_op_kind_name(OSP_OP_SCATTER), "scatter");

    osp_device_ops ops = *osp_device_cpu()->ops;
    ops.scatter = nullptr;
    osp_device dev;
    dev.ops = &ops;
    dev.info = osp_device_cpu()->info;
    snprintf(dev.info.name, sizeof dev.info.name, "fake");
    dev.impl = nullptr;
    EXPECT_FALSE(osp_device_supports_op(&dev, OSP_OP_SCATTER));
    osp_stream *raw = nullptr;
    ASSERT_OK(osp_stream_new(&dev, &raw));
    StreamPtr s(raw);
    float data[1] = {0}, upd[1] = {1};
    int64_t idx[1] = {0};
    osp_scatter_args a{};
    a.dtype = OSP_TYPE_FP32;
    a.data = data;
    a.outer = 1;
    a.axis_len = 1;
    a.inner = 1;
    a.index_dtype = OSP_TYPE_INT64;
    a.indices = idx;
    a.n_indices = 1;
    a.updates = upd;
    EXPECT_ERROR_CODE(osp_op_scatter(s.get(), &a), OSP_ERROR_UNSUPPORTED);
}

} // namespace

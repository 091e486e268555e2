// The comparison the CUDA device's op tests (test_cuda_ops_nn.cc,
// test_cuda_ops_gemm.cc) make for every case: the same op over the same
// arrays on the device under test and on the CPU device (the oracle),
// then each output compared, bit for bit or within a normwise relative
// error. Include after device_test_harness.h, once per program.
#pragma once

#include <utility>
#include <vector>

#include "device_test_harness.h"

namespace {

// An output to compare: its index among the arrays and its dtype.
struct Output {
    size_t index;
    osp_datatype dtype;
};

class CudaOpsTest : public DeviceTestBase {
  public:
    using DeviceTestBase::Rng;

    // Runs op over arrays: on the CPU device in place (on_device false),
    // or on the device under test with a device copy of each array
    // (copied back afterwards). An empty array is a NULL pointer.
    void RunArrays(bool on_device, const Op &op, std::vector<Bytes> &arrays) {
        Ptrs ptrs;
        if (!on_device) {
            for (Bytes &a : arrays)
                ptrs.push_back(a.empty() ? nullptr : a.data());
            ASSERT_OK(op(cpu_stream_.get(), ptrs));
            ASSERT_OK(osp_stream_synchronize(cpu_stream_.get()));
            return;
        }
        std::vector<BufferPtr> bufs;
        for (Bytes &a : arrays) {
            if (a.empty()) {
                bufs.emplace_back();
                ptrs.push_back(nullptr);
                continue;
            }
            bufs.push_back(Alloc(a.size()));
            ASSERT_NE(bufs.back(), nullptr);
            ptrs.push_back(bufs.back()->data);
            ASSERT_OK(osp_memcpy_async(stream_.get(), ptrs.back(), a.data(),
                                       a.size(), OSP_COPY_HOST_TO_DEVICE));
        }
        ASSERT_OK(op(stream_.get(), ptrs));
        for (size_t i = 0; i < arrays.size(); i++)
            if (!arrays[i].empty())
                ASSERT_OK(osp_memcpy_async(stream_.get(), arrays[i].data(),
                                           ptrs[i], arrays[i].size(),
                                           OSP_COPY_DEVICE_TO_HOST));
        ASSERT_OK(osp_stream_synchronize(stream_.get()));
    }

    // op on the device under test and on the CPU over copies of arrays;
    // each output must match: bit for bit (tol 0, NaN equal to NaN) or
    // within tol of the CPU's, relative to the output's largest magnitude
    // or 1 if that is smaller (the tests' data are of order 1, so that an
    // output cancelling to near 0 is not held to its own tiny scale).
    void Compare(const Op &op, const std::vector<Bytes> &arrays,
                 const std::vector<Output> &outputs, double tol) {
        std::vector<Bytes> got = arrays, want = arrays;
        ASSERT_NO_FATAL_FAILURE(RunArrays(true, op, got));
        ASSERT_NO_FATAL_FAILURE(RunArrays(false, op, want));
        for (const Output &o : outputs) {
            SCOPED_TRACE(testing::Message() << "output " << o.index);
            size_t n = want[o.index].size() / ByteSize(o.dtype);
            if (tol == 0)
                EXPECT_TRUE(
                    SameValues(o.dtype, got[o.index], want[o.index], n));
            else
                EXPECT_LE(ScaledError(o.dtype, got[o.index], want[o.index], n),
                          tol);
        }
    }

    // max |got - want| / max(max |want|, 1); NaN must meet NaN.
    static double ScaledError(osp_datatype dt, const Bytes &got,
                              const Bytes &want, size_t n) {
        double max_diff = 0, max_want = 1;
        for (size_t i = 0; i < n; i++) {
            double g = ValueAt(dt, got.data(), i),
                   w = ValueAt(dt, want.data(), i);
            if (std::isnan(g) != std::isnan(w))
                return INFINITY;
            if (std::isnan(g) || (std::isinf(w) && g == w))
                continue;
            max_diff = std::max(max_diff, std::fabs(g - w));
            max_want = std::max(max_want, std::fabs(w));
        }
        return max_diff / max_want;
    }

    // n random FP32 values of magnitude [lo, hi].
    Bytes Floats(size_t n, double lo = 0.1, double hi = 2.0) {
        return Rng().Data(OSP_TYPE_FP32, n, lo, hi);
    }
};

// A host array standing in for device memory: a launch on the fake GPU
// must refuse it (on a real GPU the kernel would fault, so the cases
// that pass one run on the fake runtime only).
#ifdef OSPREY_TEST_FAKE_CUDA
constexpr bool kFakeCuda = true;
#else
constexpr bool kFakeCuda = false;
#endif

} // namespace

// Device conformance: every op of osprey/device.h on every device.
//
// The CPU device is checked against the plain reference loops below; every
// other device is checked against the CPU device, on fresh random data
// (never all zeros), with relative-error tolerances of 1e-5 (FP32), 1e-3
// (TF32) and 1e-2 (FP16). Copies, pools, streams, host functions and
// events are exercised too.
//
// Built twice (tests/unit/special.cmake): test_device_conformance runs the
// CPU device; test_device_conformance_cuda (OSPREY_TEST_CUDA_ONLY, ctest
// label `gpu`) runs every CUDA GPU and reports SKIPPED without one.
//
// The random seed is printed with each failure; set OSPREY_TEST_SEED to
// replay it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "half.h"
#include "osp_test.h"
#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#ifdef OSPREY_HAVE_CUDA
#include "cuda_provider.h"
#endif
#ifdef OSPREY_TEST_FAKE_CUDA
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "device_test_harness.h"

namespace {

// ---- reference loops (the oracle for the CPU device) ----------------------

struct GemmCase {
    bool trans_a, trans_b;
    int64_t m, n, k;
    int64_t pad; // extra elements at the end of each stored row
    float alpha, beta;
};

struct GemmLayout {
    int64_t a_rows, a_cols, lda, b_rows, b_cols, ldb, ldc;
    explicit GemmLayout(const GemmCase &c)
        : a_rows(c.trans_a ? c.k : c.m), a_cols(c.trans_a ? c.m : c.k),
          lda(a_cols + c.pad), b_rows(c.trans_b ? c.n : c.k),
          b_cols(c.trans_b ? c.k : c.n), ldb(b_cols + c.pad), ldc(c.n + c.pad) {
    }
};

void RefGemm(const GemmCase &c, osp_datatype dt, const Bytes &a, const Bytes &b,
             Bytes &cm) {
    GemmLayout l(c);
    for (int64_t i = 0; i < c.m; i++) {
        for (int64_t j = 0; j < c.n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < c.k; p++) {
                double x = ValueAt(dt, a.data(),
                                   c.trans_a ? p * l.lda + i : i * l.lda + p);
                double y = ValueAt(dt, b.data(),
                                   c.trans_b ? j * l.ldb + p : p * l.ldb + j);
                acc += x * y;
            }
            size_t idx = i * l.ldc + j;
            double old = ValueAt(dt, cm.data(), idx);
            SetFloat(dt, cm.data(), idx, c.alpha * acc + c.beta * old);
        }
    }
}

void RefBinary(osp_binary_op op, osp_datatype dt, const Bytes &a,
               const Bytes &b, Bytes &out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64) {
            // Two's complement wrap, computed on the low bits.
            uint64_t x = 0, y = 0, r;
            memcpy(&x, a.data() + i * ByteSize(dt), ByteSize(dt));
            memcpy(&y, b.data() + i * ByteSize(dt), ByteSize(dt));
            r = op == OSP_BINARY_ADD   ? x + y
                : op == OSP_BINARY_SUB ? x - y
                                       : x * y;
            memcpy(out.data() + i * ByteSize(dt), &r, ByteSize(dt));
        } else {
            // Exactly one rounding to the element type, from float.
            float x = (float)ValueAt(dt, a.data(), i);
            float y = (float)ValueAt(dt, b.data(), i);
            float r = op == OSP_BINARY_ADD   ? x + y
                      : op == OSP_BINARY_SUB ? x - y
                                             : x * y;
            SetFloat(dt, out.data(), i, r);
        }
    }
}

double RefActivate(osp_activation act, double x) {
    switch (act) {
    case OSP_ACTIVATION_NONE:
        return x;
    case OSP_ACTIVATION_RELU:
        return x > 0 ? x : 0;
    case OSP_ACTIVATION_SIGMOID:
        return 1 / (1 + std::exp(-x));
    case OSP_ACTIVATION_TANH:
        return std::tanh(x);
    case OSP_ACTIVATION_GELU:
        return 0.5 * x *
               (1 +
                std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    return x;
}

void RefSoftmax(const float *x, float *out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *in = x + r * cols;
        double max = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; c++)
            max = std::max(max, (double)in[c]);
        for (int64_t c = 0; c < cols; c++)
            sum += std::exp(in[c] - max);
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = (float)(std::exp(in[c] - max) / sum);
    }
}

// Casts, stated independently of the devices' code: float -> integer
// truncates and saturates (NaN -> 0), integer -> integer keeps the low bits,
// float -> FP16/BF16 rounds through FP32, anything -> BOOL is x != 0. Long
// double holds every int64 and uint64 exactly, so the clamps are exact.
void RefCast(osp_datatype st, const Bytes &src, osp_datatype dt, Bytes &dst,
             size_t n) {
    size_t ss = ByteSize(st), ds = ByteSize(dt);
    for (size_t i = 0; i < n; i++) {
        long double fv = 0;
        uint64_t bits = 0; // integer source, sign-extended to 64 bits
        if (IsFloatType(st)) {
            fv = ValueAt(st, src.data(), i);
        } else {
            memcpy(&bits, src.data() + i * ss, ss);
            if (IsSignedInt(st) && ss < 8 && (bits >> (8 * ss - 1)) & 1)
                bits |= ~uint64_t{0} << (8 * ss);
        }
        unsigned char *out = dst.data() + i * ds;
        if (dt == OSP_TYPE_BOOL) {
            *out = IsFloatType(st) ? (fv != 0) : (bits != 0);
        } else if (!IsFloatType(dt)) {
            uint64_t r = bits;
            if (IsFloatType(st)) {
                int w = (int)(8 * ds);
                long double lo = IsSignedInt(dt) ? -ldexpl(1, w - 1) : 0;
                long double hi =
                    IsSignedInt(dt) ? ldexpl(1, w - 1) - 1 : ldexpl(1, w) - 1;
                long double t = std::isnan(fv) ? 0 : truncl(fv);
                t = std::min(std::max(t, lo), hi);
                r = IsSignedInt(dt) ? (uint64_t)(int64_t)t : (uint64_t)t;
            }
            memcpy(out, &r, ds); // low bytes (little-endian)
        } else {
            double v;
            float f;
            if (IsFloatType(st)) {
                v = (double)fv;
                f = (float)v;
            } else if (IsSignedInt(st)) {
                v = (double)(int64_t)bits;
                f = (float)(int64_t)bits;
            } else {
                v = (double)bits;
                f = (float)bits;
            }
            if (dt == OSP_TYPE_FP64)
                memcpy(out, &v, 8);
            else
                SetFloat(dt, out, 0, f);
        }
    }
}

// ---- the fixture ----------------------------------------------------------

class DeviceTest : public DeviceTestBase {
  protected:
    // Casts src (st) into out (dt, n elements, its bytes the initial
    // contents) on this device and compares with the expected result: the
    // reference loop for the CPU, the CPU device for every other device.
    void CheckCast(osp_datatype st, const Bytes &src, osp_datatype dt,
                   Bytes out, size_t n) {
        Bytes want = out, in = src;
        Op run = [&](osp_stream *s, const Ptrs &p) {
            return osp_op_cast(s, p[0], st, p[1], dt, n);
        };
        if (IsCpu()) {
            RefCast(st, src, dt, want, n);
        } else {
            Bytes src2 = src;
            ASSERT_NO_FATAL_FAILURE(RunOnCpu(run, {&src2, &want}));
        }
        ASSERT_NO_FATAL_FAILURE(RunOnDevice(run, {&in, &out}));
        ASSERT_TRUE(SameValues(dt, out, want, n));
    }

    void CheckGemm(const GemmCase &c, osp_datatype dt, bool tf32, double tol);
};

// ---- discovery and memory -------------------------------------------------

TEST_P(DeviceTest, Info) {
    osp_device_info info;
    osp_device_get_info(dev_, &info);
    EXPECT_EQ(info.type, GetParam().type);
    EXPECT_EQ(info.index, GetParam().index);
    EXPECT_GT(strlen(info.name), 0u);
    EXPECT_GT(info.total_memory, 0u);
    if (IsCpu()) {
        EXPECT_STREQ(info.name, "CPU");
        EXPECT_EQ(info.compute_major, 0);
    } else {
        EXPECT_GE(info.compute_major, 5);
    }
    EXPECT_EQ(osp_stream_device(stream_.get()), dev_);
}

TEST_P(DeviceTest, DiscoveryErrors) {
    osp_device *d = nullptr;
    EXPECT_ERROR_CODE(osp_device_cuda_get(osp_device_cuda_count(), &d),
                      OSP_ERROR_NOT_FOUND);
    EXPECT_ERROR_CODE(osp_device_cuda_get(-1, &d), OSP_ERROR_NOT_FOUND);
    // Discovery is idempotent: a second init succeeds and changes nothing.
    int count = osp_device_cuda_count();
    ASSERT_OK(osp_devices_init(nullptr));
    EXPECT_EQ(osp_device_cuda_count(), count);
}

TEST_P(DeviceTest, AllocKinds) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
        BufferPtr d = Alloc(size), h = AllocHost(size);
        ASSERT_NE(d, nullptr);
        ASSERT_NE(h, nullptr);
        EXPECT_NE(d->data, nullptr);
        EXPECT_EQ(d->size, size);
        EXPECT_EQ(d->kind, OSP_MEMORY_DEVICE);
        EXPECT_EQ(d->device, dev_);
        EXPECT_NE(h->data, nullptr);
        EXPECT_EQ(h->size, size);
        EXPECT_EQ(h->device, dev_);
        EXPECT_EQ((uintptr_t)h->data % 64, 0u);
        if (IsCpu())
            EXPECT_EQ(h->kind, OSP_MEMORY_HOST);
        else
            EXPECT_EQ(h->kind, OSP_MEMORY_HOST_PINNED);
        memset(h->data, 0x5a, size); // host memory is writable
    }
}

TEST_P(DeviceTest, Copies) {
    for (size_t n : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3}) {
        SCOPED_TRACE(n);
        Bytes src = Rng().Data(OSP_TYPE_UINT8, n);
        BufferPtr pinned_in = AllocHost(n), pinned_out = AllocHost(n),
                  host_copy = AllocHost(n);
        BufferPtr d1 = Alloc(n), d2 = Alloc(n);
        ASSERT_TRUE(pinned_in && pinned_out && host_copy && d1 && d2);
        memcpy(pinned_in->data, src.data(), n);
        osp_stream *s = stream_.get();
        // pinned -> device -> device -> pinned, then pinned -> host.
        ASSERT_OK(osp_memcpy_async(s, d1->data, pinned_in->data, n,
                                   OSP_COPY_HOST_TO_DEVICE));
        ASSERT_OK(osp_memcpy_async(s, d2->data, d1->data, n,
                                   OSP_COPY_DEVICE_TO_DEVICE));
        ASSERT_OK(osp_memcpy_async(s, pinned_out->data, d2->data, n,
                                   OSP_COPY_DEVICE_TO_HOST));
        ASSERT_OK(osp_memcpy_async(s, host_copy->data, pinned_out->data, n,
                                   OSP_COPY_HOST_TO_HOST));
        // Pageable memory works too.
        Bytes pageable(n, 0);
        ASSERT_OK(osp_memcpy_async(s, pageable.data(), d1->data, n,
                                   OSP_COPY_DEVICE_TO_HOST));
        ASSERT_OK(osp_stream_synchronize(s));
        EXPECT_EQ(memcmp(pinned_out->data, src.data(), n), 0);
        EXPECT_EQ(memcmp(host_copy->data, src.data(), n), 0);
        EXPECT_EQ(pageable, src);
    }
}

TEST_P(DeviceTest, PinnedPoolExhaustionFallsBackToPageable) {
    osp_device_memory_stats before;
    osp_device_get_memory_stats(dev_, &before);
    if (IsCpu()) {
        // No pool on the CPU: host memory is plain, nothing is counted.
        BufferPtr h = AllocHost(1 << 20);
        ASSERT_NE(h, nullptr);
        EXPECT_EQ(h->kind, OSP_MEMORY_HOST);
        osp_device_memory_stats after;
        osp_device_get_memory_stats(dev_, &after);
        EXPECT_EQ(after.pageable_fallbacks, 0u);
        EXPECT_EQ(after.pinned_pool_total, 0u);
        return;
    }
    ASSERT_EQ(before.pinned_pool_total, kPinnedPoolBytes);
    ASSERT_EQ(before.pinned_pool_used, 0u) << "a pinned buffer leaked";

    // Fill the pool exactly, then one more: that one is pageable.
    const size_t chunk = size_t{1} << 20;
    std::vector<BufferPtr> held;
    for (size_t i = 0; i < kPinnedPoolBytes / chunk; i++) {
        held.push_back(AllocHost(chunk));
        ASSERT_NE(held.back(), nullptr);
        EXPECT_EQ(held.back()->kind, OSP_MEMORY_HOST_PINNED) << i;
    }
    osp_device_memory_stats full;
    osp_device_get_memory_stats(dev_, &full);
    EXPECT_EQ(full.pinned_pool_used, kPinnedPoolBytes);
    EXPECT_EQ(full.pageable_fallbacks, before.pageable_fallbacks);

    BufferPtr extra = AllocHost(chunk);
    ASSERT_NE(extra, nullptr);
    EXPECT_EQ(extra->kind, OSP_MEMORY_HOST);
    osp_device_memory_stats after;
    osp_device_get_memory_stats(dev_, &after);
    EXPECT_EQ(after.pageable_fallbacks, before.pageable_fallbacks + 1);

    // The fallback buffer is a working transfer buffer.
    Bytes src = Rng().Data(OSP_TYPE_UINT8, chunk);
    memcpy(extra->data, src.data(), chunk);
    BufferPtr d = Alloc(chunk);
    ASSERT_NE(d, nullptr);
    ASSERT_OK(osp_memcpy_async(stream_.get(), d->data, extra->data, chunk,
                               OSP_COPY_HOST_TO_DEVICE));
    memset(held[0]->data, 0, chunk);
    ASSERT_OK(osp_memcpy_async(stream_.get(), held[0]->data, d->data, chunk,
                               OSP_COPY_DEVICE_TO_HOST));
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
    EXPECT_EQ(memcmp(held[0]->data, src.data(), chunk), 0);

    // Everything returns to the pool; freed blocks coalesce, so a buffer
    // as large as the whole pool is pinned again.
    held.clear();
    extra.reset();
    osp_device_get_memory_stats(dev_, &after);
    EXPECT_EQ(after.pinned_pool_used, 0u);
    BufferPtr whole = AllocHost(kPinnedPoolBytes);
    ASSERT_NE(whole, nullptr);
    EXPECT_EQ(whole->kind, OSP_MEMORY_HOST_PINNED);
}

TEST_P(DeviceTest, DevicePoolGrowsAndReuses) {
    osp_device_memory_stats before, during, after;
    osp_device_get_memory_stats(dev_, &before);
    if (!IsCpu()) {
        EXPECT_GE(before.device_pool_total, kCudaPoolBytes);
    }
    // Larger than the whole pool so far: the pool must grow.
    const size_t big_size = before.device_pool_total + (size_t{1} << 20);
    {
        BufferPtr small = Alloc(1000), big = Alloc(big_size);
        ASSERT_TRUE(small && big);
        osp_device_get_memory_stats(dev_, &during);
        if (!IsCpu()) {
            EXPECT_GE(during.device_pool_used,
                      before.device_pool_used + big_size + 1000);
            EXPECT_GE(during.device_pool_total,
                      before.device_pool_total + big_size);
        }
    }
    osp_device_get_memory_stats(dev_, &after);
    EXPECT_EQ(after.device_pool_used, before.device_pool_used);
    if (!IsCpu()) {
        // Cached, not returned: the same allocation needs no growth.
        BufferPtr again = Alloc(big_size);
        ASSERT_NE(again, nullptr);
        osp_device_memory_stats reuse;
        osp_device_get_memory_stats(dev_, &reuse);
        EXPECT_EQ(reuse.device_pool_total, after.device_pool_total);
    }
}

// ---- GEMM -----------------------------------------------------------------

void DeviceTest::CheckGemm(const GemmCase &c, osp_datatype dt, bool tf32,
                           double tol) {
    SCOPED_TRACE(testing::Message()
                 << osp_datatype_wire_name(dt) << (tf32 ? " tf32" : "")
                 << " trans_a=" << c.trans_a << " trans_b=" << c.trans_b
                 << " m=" << c.m << " n=" << c.n << " k=" << c.k
                 << " pad=" << c.pad << " beta=" << c.beta);
    GemmLayout l(c);
    Bytes a = Rng().Data(dt, l.a_rows * l.lda);
    Bytes b = Rng().Data(dt, l.b_rows * l.ldb);
    Bytes cm = Rng().Data(dt, c.m * l.ldc);
    const Bytes c_before = cm;
    Bytes want = cm;

    Op op = [&](osp_stream *s, const Ptrs &p) {
        osp_gemm_args g = {};
        g.trans_a = c.trans_a;
        g.trans_b = c.trans_b;
        g.m = c.m;
        g.n = c.n;
        g.k = c.k;
        g.alpha = c.alpha;
        g.beta = c.beta;
        g.dtype = dt;
        g.a = p[0];
        g.lda = l.lda;
        g.b = p[1];
        g.ldb = l.ldb;
        g.c = p[2];
        g.ldc = l.ldc;
        g.allow_tf32 = tf32;
        return osp_op_gemm(s, &g);
    };
    if (IsCpu()) {
        RefGemm(c, dt, a, b, want);
    } else {
        Bytes a2 = a, b2 = b;
        ASSERT_NO_FATAL_FAILURE(RunOnCpu(op, {&a2, &b2, &want}));
    }
    ASSERT_NO_FATAL_FAILURE(RunOnDevice(op, {&a, &b, &cm}));

    size_t n = cm.size() / ByteSize(dt);
    EXPECT_LE(RelativeError(dt, cm, want, n), tol);
    // The padding at the end of each row of C is never written.
    size_t es = ByteSize(dt);
    for (int64_t i = 0; i < c.m; i++)
        for (int64_t j = c.n; j < l.ldc; j++) {
            size_t at = (i * l.ldc + j) * es;
            ASSERT_EQ(memcmp(cm.data() + at, c_before.data() + at, es), 0)
                << "C padding written at row " << i << " col " << j;
        }
}

std::vector<GemmCase> GemmCases() {
    const int64_t shapes[][3] = {{1, 1, 1},     {3, 5, 7},   {17, 9, 33},
                                 {64, 10, 64},  {1, 64, 64}, {256, 10, 64},
                                 {128, 96, 200}};
    std::vector<GemmCase> cases;
    int shape_index = 0, variant = 0;
    for (auto &s : shapes) {
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                // Strides alternate per transpose pair and per shape, beta
                // every third case, so each transpose pair meets both.
                int64_t pad = (shape_index + ta + tb) % 2 ? 3 : 0;
                float beta = variant++ % 3 == 0 ? 0.0f : 0.5f;
                cases.push_back({ta, tb, s[0], s[1], s[2], pad, 1.25f, beta});
            }
        shape_index++;
    }
    return cases;
}

TEST_P(DeviceTest, GemmFp32) {
    for (const GemmCase &c : GemmCases())
        ASSERT_NO_FATAL_FAILURE(CheckGemm(c, OSP_TYPE_FP32, false, 1e-5));
}

// TF32 keeps 10 mantissa bits, and tensor cores may truncate rather than
// round, so each product can be off by up to 2 * 2^-10 of its size. On
// random data that is about 0.7e-3 of the result (normwise, simulated with
// truncation), below 1e-3 for k >= 33 in 300 of 300 draws; with a handful
// of terms (k < 8) one product's error shows whole, so those shapes get
// the bound 2^-9.
TEST_P(DeviceTest, GemmTf32) {
    for (const GemmCase &c : GemmCases())
        ASSERT_NO_FATAL_FAILURE(
            CheckGemm(c, OSP_TYPE_FP32, true, c.k < 8 ? 0x1p-9 : 1e-3));
}

TEST_P(DeviceTest, GemmFp16) {
    for (const GemmCase &c : GemmCases())
        ASSERT_NO_FATAL_FAILURE(CheckGemm(c, OSP_TYPE_FP16, false, 1e-2));
}

TEST_P(DeviceTest, GemmValidation) {
    float x[16] = {1};
    osp_gemm_args g = {};
    g.m = g.n = g.k = 2;
    g.alpha = 1;
    g.dtype = OSP_TYPE_FP32;
    g.a = g.b = g.c = x;
    g.lda = g.ldb = g.ldc = 2;
    osp_stream *s = stream_.get();
    EXPECT_ERROR_CODE(osp_op_gemm(s, nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_gemm(nullptr, &g), OSP_ERROR_INVALID_ARG);
    osp_gemm_args bad = g;
    bad.dtype = OSP_TYPE_INT32;
    EXPECT_ERROR_CODE(osp_op_gemm(s, &bad), OSP_ERROR_UNSUPPORTED);
    bad = g;
    bad.lda = 1;
    EXPECT_ERROR_CODE(osp_op_gemm(s, &bad), OSP_ERROR_INVALID_ARG);
    bad = g;
    bad.trans_b = true;
    bad.k = 3; // B^T stored as [n, k]: ldb must be >= k
    bad.lda = 3;
    EXPECT_ERROR_CODE(osp_op_gemm(s, &bad), OSP_ERROR_INVALID_ARG);
    bad = g;
    bad.m = -1;
    EXPECT_ERROR_CODE(osp_op_gemm(s, &bad), OSP_ERROR_INVALID_ARG);
    bad = g;
    bad.b = nullptr;
    EXPECT_ERROR_CODE(osp_op_gemm(s, &bad), OSP_ERROR_INVALID_ARG);
    bad = g;
    bad.m = 0; // empty: nothing to do
    ASSERT_OK(osp_op_gemm(s, &bad));
}

// ---- elementwise ----------------------------------------------------------

TEST_P(DeviceTest, Binary) {
    const osp_datatype types[] = {OSP_TYPE_INT32, OSP_TYPE_INT64, OSP_TYPE_FP32,
                                  OSP_TYPE_FP16};
    for (osp_datatype dt : types)
        for (osp_binary_op op :
             {OSP_BINARY_ADD, OSP_BINARY_SUB, OSP_BINARY_MUL})
            for (size_t n : {size_t{1}, size_t{1000}, size_t{65537}})
                for (bool in_place : {false, true}) {
                    SCOPED_TRACE(testing::Message()
                                 << osp_datatype_wire_name(dt) << " op " << op
                                 << " n=" << n << " in_place=" << in_place);
                    Bytes a = Rng().Data(dt, n), b = Rng().Data(dt, n);
                    Bytes out = Rng().Data(dt, n);
                    Bytes want = out;
                    Op run = [&](osp_stream *s, const Ptrs &p) {
                        void *dst = in_place ? p[0] : p[2];
                        return osp_op_binary(s, op, dt, p[0], p[1], dst, n);
                    };
                    if (IsCpu()) {
                        RefBinary(op, dt, a, b, want, n);
                    } else {
                        Bytes a2 = a, b2 = b;
                        ASSERT_NO_FATAL_FAILURE(
                            RunOnCpu(run, {&a2, &b2, &want}));
                        if (in_place)
                            want = a2;
                    }
                    ASSERT_NO_FATAL_FAILURE(RunOnDevice(run, {&a, &b, &out}));
                    const Bytes &got = in_place ? a : out;
                    if (dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64 || IsCpu())
                        EXPECT_TRUE(SameValues(dt, got, want, n));
                    else
                        EXPECT_LE(RelativeError(dt, got, want, n),
                                  dt == OSP_TYPE_FP16 ? 1e-2 : 1e-5);
                }
}

TEST_P(DeviceTest, BinaryValidation) {
    int32_t x[4] = {1, 2, 3, 4};
    osp_stream *s = stream_.get();
    EXPECT_ERROR_CODE(
        osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_FP64, x, x, x, 1),
        OSP_ERROR_UNSUPPORTED);
    EXPECT_ERROR_CODE(
        osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_BYTES, x, x, x, 1),
        OSP_ERROR_UNSUPPORTED);
    EXPECT_ERROR_CODE(
        osp_op_binary(s, (osp_binary_op)42, OSP_TYPE_INT32, x, x, x, 1),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_INT32, nullptr, x, x, 1),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_op_binary(nullptr, OSP_BINARY_ADD, OSP_TYPE_INT32, x, x, x, 1),
        OSP_ERROR_INVALID_ARG);
    ASSERT_OK(osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_INT32, nullptr, nullptr,
                            nullptr, 0));
}

TEST_P(DeviceTest, BiasActivation) {
    const osp_activation acts[] = {OSP_ACTIVATION_NONE, OSP_ACTIVATION_RELU,
                                   OSP_ACTIVATION_SIGMOID, OSP_ACTIVATION_TANH,
                                   OSP_ACTIVATION_GELU};
    const int64_t shapes[][2] = {{1, 1}, {7, 13}, {64, 10}, {300, 257}};
    for (osp_activation act : acts)
        for (auto &shape : shapes)
            for (bool with_bias : {true, false}) {
                int64_t rows = shape[0], cols = shape[1];
                SCOPED_TRACE(testing::Message()
                             << "act " << act << " " << rows << "x" << cols
                             << " bias=" << with_bias);
                size_t n = rows * cols;
                Bytes x = Rng().Data(OSP_TYPE_FP32, n, 0.1, 4.0);
                Bytes bias = Rng().Data(OSP_TYPE_FP32, cols, 0.1, 1.0);
                Bytes want = x;
                Op run = [&](osp_stream *s, const Ptrs &p) {
                    return osp_op_bias_activation(
                        s, (float *)p[0],
                        with_bias ? (const float *)p[1] : nullptr, rows, cols,
                        act);
                };
                if (IsCpu()) {
                    for (size_t i = 0; i < n; i++) {
                        double v = ValueAt(OSP_TYPE_FP32, x.data(), i);
                        if (with_bias)
                            v += ValueAt(OSP_TYPE_FP32, bias.data(), i % cols);
                        SetFloat(OSP_TYPE_FP32, want.data(), i,
                                 RefActivate(act, (float)v));
                    }
                } else {
                    Bytes bias2 = bias;
                    ASSERT_NO_FATAL_FAILURE(RunOnCpu(run, {&want, &bias2}));
                }
                ASSERT_NO_FATAL_FAILURE(RunOnDevice(run, {&x, &bias}));
                EXPECT_LE(RelativeError(OSP_TYPE_FP32, x, want, n), 1e-5);
            }
}

TEST_P(DeviceTest, SoftmaxRows) {
    const int64_t shapes[][2] = {{1, 1},     {3, 10},   {64, 10},
                                 {17, 1000}, {5, 4097}, {1000, 3}};
    for (auto &shape : shapes)
        for (bool in_place : {false, true}) {
            int64_t rows = shape[0], cols = shape[1];
            SCOPED_TRACE(testing::Message()
                         << rows << "x" << cols << " in_place=" << in_place);
            size_t n = rows * cols;
            Bytes x = Rng().Data(OSP_TYPE_FP32, n, 0.1, 20.0);
            // Row 0 is far from zero: only a max-subtracting softmax
            // survives exp(1000).
            for (int64_t c = 0; c < cols; c++) {
                float v = (float)ValueAt(OSP_TYPE_FP32, x.data(), c) + 1000.0f;
                memcpy(x.data() + 4 * c, &v, 4);
            }
            Bytes out = Rng().Data(OSP_TYPE_FP32, n);
            Bytes want(n * 4);
            Op run = [&](osp_stream *s, const Ptrs &p) {
                return osp_op_softmax_rows(s, (const float *)p[0],
                                           (float *)(in_place ? p[0] : p[1]),
                                           rows, cols);
            };
            if (IsCpu()) {
                RefSoftmax((const float *)x.data(), (float *)want.data(), rows,
                           cols);
            } else {
                Bytes x2 = x;
                ASSERT_NO_FATAL_FAILURE(RunOnCpu(run, {&x2, &want}));
                if (in_place)
                    want = x2;
            }
            ASSERT_NO_FATAL_FAILURE(RunOnDevice(run, {&x, &out}));
            const Bytes &got = in_place ? x : out;
            EXPECT_LE(RelativeError(OSP_TYPE_FP32, got, want, n), 1e-5);
            for (int64_t r = 0; r < rows; r++) {
                double sum = 0;
                for (int64_t c = 0; c < cols; c++)
                    sum += ValueAt(OSP_TYPE_FP32, got.data(), r * cols + c);
                ASSERT_NEAR(sum, 1.0, 1e-4) << "row " << r;
            }
        }
}

TEST_P(DeviceTest, ShapeValidation) {
    float x[4] = {1, 2, 3, 4};
    osp_stream *s = stream_.get();
    EXPECT_ERROR_CODE(
        osp_op_bias_activation(s, x, nullptr, -1, 4, OSP_ACTIVATION_RELU),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_op_bias_activation(s, x, nullptr, 1, 4, (osp_activation)99),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_op_bias_activation(s, nullptr, nullptr, 1, 4, OSP_ACTIVATION_RELU),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_softmax_rows(s, x, nullptr, 1, 4),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_softmax_rows(s, x, x, 1, -4),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_op_softmax_rows(s, x, x, INT64_MAX / 2, INT64_MAX / 2),
        OSP_ERROR_INVALID_ARG);
    ASSERT_OK(osp_op_softmax_rows(s, nullptr, nullptr, 0, 4));
}

// ---- casts ----------------------------------------------------------------

// Source data for casts: integers over their whole range (exercising wrap
// and int -> float rounding), floats in [0.1, 300] so narrow integer types
// saturate.
Bytes CastSource(Random &rng, osp_datatype dt, size_t n) {
    return rng.Data(dt, n, 0.1, 300.0);
}

TEST_P(DeviceTest, CastAllPairs) {
    const size_t n = 1003;
    for (osp_datatype st : kNumericTypes)
        for (osp_datatype dt : kNumericTypes) {
            SCOPED_TRACE(testing::Message()
                         << osp_datatype_wire_name(st) << " -> "
                         << osp_datatype_wire_name(dt));
            Bytes src = CastSource(Rng(), st, n);
            Bytes out = Rng().Data(dt, n);
            ASSERT_NO_FATAL_FAILURE(CheckCast(st, src, dt, out, n));
        }
}

TEST_P(DeviceTest, CastEdgeValues) {
    const double inf = INFINITY;
    // clang-format off
    const std::vector<double> floats = {
        NAN, inf, -inf, 0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1.5, -1.5,
        127.9, 128.0, -128.9, -129.0, 255.5, 256.0,          // 8-bit bounds
        65504.0, 65519.99, 65520.0,                          // FP16 max
        1e10, -1e10, 2147483647.0, 2147483648.0, -2147483649.0,
        4294967295.0, 4294967296.0,                          // 32-bit bounds
        9.2233720368547758e18, -9.2233720368547758e18,       // +-2^63
        1.8446744073709552e19, 1e30, -1e30,                  // 2^64, beyond
        6e-8, 3e-8, 1e-40, 3.0e38, 1.0000001, -7.0};         // tiny, huge
    const int64_t ints[] = {
        INT64_MIN, INT64_MAX, -1, 0, 1, 127, 128, 255, 256, -129, 65535, 65536,
        (int64_t{1} << 53) + 1}; // not exact in FP64
    // clang-format on
    for (osp_datatype st : {OSP_TYPE_FP64, OSP_TYPE_FP32, OSP_TYPE_FP16,
                            OSP_TYPE_BF16, OSP_TYPE_INT64, OSP_TYPE_UINT64})
        for (osp_datatype dt : kNumericTypes) {
            SCOPED_TRACE(testing::Message()
                         << osp_datatype_wire_name(st) << " -> "
                         << osp_datatype_wire_name(dt));
            size_t n = IsFloatType(st) ? floats.size() : std::size(ints);
            Bytes src(n * ByteSize(st));
            for (size_t i = 0; i < n; i++) {
                if (IsFloatType(st))
                    SetFloat(st, src.data(), i, floats[i]);
                else
                    memcpy(src.data() + 8 * i, &ints[i], 8);
            }
            Bytes out(n * ByteSize(dt), 0xcd);
            ASSERT_NO_FATAL_FAILURE(CheckCast(st, src, dt, out, n));
        }
}

TEST_P(DeviceTest, CastValidation) {
    char x[8] = {1};
    osp_stream *s = stream_.get();
    EXPECT_ERROR_CODE(osp_op_cast(s, x, OSP_TYPE_BYTES, x, OSP_TYPE_INT8, 1),
                      OSP_ERROR_UNSUPPORTED);
    EXPECT_ERROR_CODE(osp_op_cast(s, x, OSP_TYPE_INT8, x, OSP_TYPE_INVALID, 1),
                      OSP_ERROR_UNSUPPORTED);
    EXPECT_ERROR_CODE(
        osp_op_cast(s, nullptr, OSP_TYPE_INT8, x, OSP_TYPE_FP32, 1),
        OSP_ERROR_INVALID_ARG);
}

// ---- streams, host functions, events --------------------------------------

// Enqueues H2D, out = x * x, D2H on one stream; returns false on error.
struct SquareJob {
    size_t n;
    std::vector<float> expect;
    BufferPtr in, out, dev;
};

TEST_P(DeviceTest, ManyConcurrentStreams) {
    const int kStreams = 32;
    const size_t n = 64 * 1024 + 7;
    std::vector<StreamPtr> streams;
    std::vector<SquareJob> jobs(kStreams);
    for (int i = 0; i < kStreams; i++) {
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(dev_, &s));
        streams.emplace_back(s);
        SquareJob &j = jobs[i];
        j.n = n;
        j.in = AllocHost(n * 4);
        j.out = AllocHost(n * 4);
        j.dev = Alloc(n * 4);
        ASSERT_TRUE(j.in && j.out && j.dev);
        Bytes data = Rng().Data(OSP_TYPE_FP32, n);
        memcpy(j.in->data, data.data(), n * 4);
        const float *x = (const float *)j.in->data;
        for (size_t k = 0; k < n; k++)
            j.expect.push_back(x[k] * x[k]);
    }
    // Everything is enqueued before anything is waited for.
    for (int i = 0; i < kStreams; i++) {
        SquareJob &j = jobs[i];
        osp_stream *s = streams[i].get();
        ASSERT_OK(osp_memcpy_async(s, j.dev->data, j.in->data, n * 4,
                                   OSP_COPY_HOST_TO_DEVICE));
        ASSERT_OK(osp_op_binary(s, OSP_BINARY_MUL, OSP_TYPE_FP32, j.dev->data,
                                j.dev->data, j.dev->data, n));
        ASSERT_OK(osp_memcpy_async(s, j.out->data, j.dev->data, n * 4,
                                   OSP_COPY_DEVICE_TO_HOST));
    }
    for (int i = 0; i < kStreams; i++) {
        ASSERT_OK(osp_stream_synchronize(streams[i].get()));
        EXPECT_EQ(memcmp(jobs[i].out->data, jobs[i].expect.data(), n * 4), 0)
            << "stream " << i;
    }
}

TEST_P(DeviceTest, StreamsFromManyThreads) {
    const int kThreads = 8, kIterations = 20;
    const size_t n = 10000;
    std::atomic<int> failures{0};
    std::mutex messages_lock;
    std::vector<std::string> messages;
    auto note = [&](osp_error *err) {
        if (err == nullptr)
            return false;
        std::lock_guard<std::mutex> g(messages_lock);
        messages.push_back(TakeMessage(err));
        failures++;
        return true;
    };
    uint64_t base_seed = Rng().Bits();
    auto worker = [&](int t) {
        Random rng(base_seed + t);
        osp_stream *s = nullptr;
        if (note(osp_stream_new(dev_, &s)))
            return;
        StreamPtr stream(s);
        for (int it = 0; it < kIterations; it++) {
            osp_buffer *h = nullptr, *d = nullptr;
            if (note(osp_device_alloc_host(dev_, n * 4, &h)))
                return;
            BufferPtr host(h);
            if (note(osp_device_alloc(dev_, n * 4, &d)))
                return;
            BufferPtr dev(d);
            Bytes data = rng.Data(OSP_TYPE_FP32, n);
            memcpy(h->data, data.data(), n * 4);
            if (note(osp_memcpy_async(s, d->data, h->data, n * 4,
                                      OSP_COPY_HOST_TO_DEVICE)) ||
                note(osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_FP32, d->data,
                                   d->data, d->data, n)) ||
                note(osp_memcpy_async(s, h->data, d->data, n * 4,
                                      OSP_COPY_DEVICE_TO_HOST)) ||
                note(osp_stream_synchronize(s)))
                return;
            const float *in = (const float *)data.data();
            const float *out = (const float *)h->data;
            for (size_t k = 0; k < n; k++)
                if (out[k] != in[k] + in[k]) {
                    failures++;
                    return;
                }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back(worker, t);
    for (auto &th : threads)
        th.join();
    for (auto &m : messages)
        ADD_FAILURE() << m;
    EXPECT_EQ(failures.load(), 0);
}

struct HostFuncLog {
    std::mutex lock;
    std::vector<int> order;
    const void *check_data = nullptr; // compared with expect when step 1 runs
    const void *expect = nullptr;
    size_t check_size = 0;
    bool data_ready = false;
};

struct HostFuncStep {
    HostFuncLog *log;
    int step;
};

void RecordStep(void *arg) {
    auto *st = static_cast<HostFuncStep *>(arg);
    std::lock_guard<std::mutex> g(st->log->lock);
    if (st->step == 1)
        st->log->data_ready = memcmp(st->log->check_data, st->log->expect,
                                     st->log->check_size) == 0;
    st->log->order.push_back(st->step);
}

TEST_P(DeviceTest, HostFuncRunsInStreamOrder) {
    const size_t n = size_t{4} << 20;
    Bytes src = Rng().Data(OSP_TYPE_UINT8, n);
    BufferPtr in = AllocHost(n), out = AllocHost(n), d = Alloc(n);
    ASSERT_TRUE(in && out && d);
    memcpy(in->data, src.data(), n);
    memset(out->data, 0, n);

    HostFuncLog log;
    log.check_data = out->data;
    log.expect = src.data();
    log.check_size = n;
    HostFuncStep steps[3] = {{&log, 1}, {&log, 2}, {&log, 3}};
    osp_stream *s = stream_.get();
    ASSERT_OK(
        osp_memcpy_async(s, d->data, in->data, n, OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(
        osp_memcpy_async(s, out->data, d->data, n, OSP_COPY_DEVICE_TO_HOST));
    // Step 1 must see the copy finished.
    ASSERT_OK(osp_stream_launch_host_func(s, RecordStep, &steps[0]));
    ASSERT_OK(osp_op_binary(s, OSP_BINARY_ADD, OSP_TYPE_INT32, d->data, d->data,
                            d->data, n / 4));
    ASSERT_OK(osp_stream_launch_host_func(s, RecordStep, &steps[1]));
    ASSERT_OK(osp_stream_launch_host_func(s, RecordStep, &steps[2]));
    ASSERT_OK(osp_stream_synchronize(s));
    std::lock_guard<std::mutex> g(log.lock);
    EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3}));
    EXPECT_TRUE(log.data_ready);
    EXPECT_ERROR_CODE(osp_stream_launch_host_func(s, nullptr, nullptr),
                      OSP_ERROR_INVALID_ARG);
}

TEST_P(DeviceTest, EventsTimeWork) {
    osp_event *e = nullptr;
    ASSERT_OK(osp_event_new(dev_, &e));
    EventPtr start(e);
    ASSERT_OK(osp_event_new(dev_, &e));
    EventPtr end(e);
    uint64_t ns = 0;
    EXPECT_ERROR_CODE(osp_event_elapsed_ns(start.get(), end.get(), &ns),
                      OSP_ERROR_INVALID_ARG); // not recorded yet

    const int64_t dim = 256;
    BufferPtr a = Alloc(dim * dim * 4), c = Alloc(dim * dim * 4);
    ASSERT_TRUE(a && c);
    Bytes data = Rng().Data(OSP_TYPE_FP32, dim * dim);
    osp_stream *s = stream_.get();
    ASSERT_OK(osp_memcpy_async(s, a->data, data.data(), data.size(),
                               OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_event_record(start.get(), s));
    osp_gemm_args g = {};
    g.m = g.n = g.k = dim;
    g.alpha = 1;
    g.dtype = OSP_TYPE_FP32;
    g.a = g.b = a->data;
    g.c = c->data;
    g.lda = g.ldb = g.ldc = dim;
    for (int i = 0; i < 20; i++)
        ASSERT_OK(osp_op_gemm(s, &g));
    ASSERT_OK(osp_event_record(end.get(), s));
    ASSERT_OK(osp_event_synchronize(end.get()));
    ASSERT_OK(osp_event_elapsed_ns(start.get(), end.get(), &ns));
    EXPECT_GT(ns, 0u);
    EXPECT_LT(ns, uint64_t{60} * 1000000000u);
    ASSERT_OK(osp_stream_synchronize(s));

    if (!IsCpu()) {
        // Events belong to one device.
        EXPECT_ERROR_CODE(osp_event_record(start.get(), cpu_stream_.get()),
                          OSP_ERROR_INVALID_ARG);
    }
}

TEST_P(DeviceTest, CopyValidation) {
    osp_stream *s = stream_.get();
    char x[4] = {0};
    EXPECT_ERROR_CODE(osp_memcpy_async(s, nullptr, x, 4, OSP_COPY_HOST_TO_HOST),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_memcpy_async(s, x, x, 4, (osp_copy_kind)9),
                      OSP_ERROR_INVALID_ARG);
    ASSERT_OK(osp_memcpy_async(s, nullptr, nullptr, 0, OSP_COPY_HOST_TO_HOST));
    osp_buffer *b = nullptr;
    EXPECT_ERROR_CODE(osp_device_alloc(nullptr, 4, &b), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_stream_new(dev_, nullptr), OSP_ERROR_INVALID_ARG);
}

// osp_device_memcpy: host <-> device and device <-> device, arrived when
// it returns, on no stream of the caller's.
TEST_P(DeviceTest, SynchronousCopies) {
    for (size_t n : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3}) {
        SCOPED_TRACE(n);
        Bytes src = Rng().Data(OSP_TYPE_UINT8, n);
        BufferPtr d1 = Alloc(n), d2 = Alloc(n);
        ASSERT_TRUE(d1 && d2);
        Bytes back(n, 0);
        ASSERT_OK(osp_device_memcpy(dev_, d1->data, src.data(), n,
                                    OSP_COPY_HOST_TO_DEVICE));
        ASSERT_OK(osp_device_memcpy(dev_, d2->data, d1->data, n,
                                    OSP_COPY_DEVICE_TO_DEVICE));
        ASSERT_OK(osp_device_memcpy(dev_, back.data(), d2->data, n,
                                    OSP_COPY_DEVICE_TO_HOST));
        EXPECT_EQ(back, src);
    }
    char x[4] = {0};
    EXPECT_ERROR_CODE(
        osp_device_memcpy(dev_, nullptr, x, 4, OSP_COPY_HOST_TO_HOST),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_device_memcpy(dev_, x, x, 4, (osp_copy_kind)9),
                      OSP_ERROR_INVALID_ARG);
    ASSERT_OK(
        osp_device_memcpy(dev_, nullptr, nullptr, 0, OSP_COPY_HOST_TO_HOST));
}

// Memory of other processes: the CPU cannot open any; a GPU refuses
// handles that are not ones (the real round trip needs two processes:
// tests/gpu, and the fake runtime's below).
TEST_P(DeviceTest, IpcHandlesRefused) {
    unsigned char handle[OSP_DEVICE_IPC_HANDLE_BYTES] = {0};
    void *ptr = nullptr;
    size_t size = 0;
    if (IsCpu()) {
        EXPECT_FALSE(osp_device_supports_ipc(dev_));
        EXPECT_ERROR_CODE(
            osp_device_ipc_open(dev_, handle, sizeof handle, &ptr, &size),
            OSP_ERROR_UNSUPPORTED);
        EXPECT_ERROR_CODE(osp_device_ipc_close(dev_, handle),
                          OSP_ERROR_UNSUPPORTED);
        uint64_t offset = 0;
        EXPECT_ERROR_CODE(
            osp_device_ipc_export(dev_, handle, handle, sizeof handle, &offset),
            OSP_ERROR_UNSUPPORTED);
        return;
    }
    EXPECT_TRUE(osp_device_supports_ipc(dev_));
    uint64_t offset = 0;
    // host memory is no device allocation to export
    EXPECT_ERROR_CODE(
        osp_device_ipc_export(dev_, handle, handle, sizeof handle, &offset),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_device_ipc_open(dev_, handle, 10, &ptr, &size),
                      OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(
        osp_device_ipc_open(dev_, handle, sizeof handle, &ptr, &size),
        OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_device_ipc_close(dev_, handle), OSP_ERROR_INTERNAL);
}

#ifdef OSPREY_TEST_FAKE_CUDA
// The fake runtime's handles (tests/fake_cuda/fake_cuda.h): one naming an
// allocation of this process, and one naming a POSIX shared memory object
// that the fake maps as GPU memory, seen through both sides.
TEST_P(DeviceTest, FakeIpcRoundTrips) {
    const size_t n = 3 * 4096 + 5;
    void *alloc = nullptr;
    ASSERT_EQ(cudaSetDevice(GetParam().index), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&alloc, n), cudaSuccess);
    cudaIpcMemHandle_t h;
    ASSERT_EQ(cudaIpcGetMemHandle(&h, alloc), cudaSuccess);
    void *ptr = nullptr;
    size_t size = 0;
    ASSERT_OK(osp_device_ipc_open(dev_, &h, sizeof h, &ptr, &size));
    EXPECT_EQ(ptr, alloc);
    EXPECT_EQ(size, n);
    Bytes src = Rng().Data(OSP_TYPE_UINT8, n), back(n, 0);
    ASSERT_OK(
        osp_device_memcpy(dev_, ptr, src.data(), n, OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_device_memcpy(dev_, back.data(), alloc, n,
                                OSP_COPY_DEVICE_TO_HOST));
    EXPECT_EQ(back, src);
    ASSERT_OK(osp_device_ipc_close(dev_, ptr));
    EXPECT_ERROR_CODE(osp_device_ipc_close(dev_, ptr), OSP_ERROR_INTERNAL);
    ASSERT_EQ(cudaFree(alloc), cudaSuccess);

    std::string name = "/osp_conf_" + std::to_string(getpid());
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, (off_t)n), 0);
    auto *host = (unsigned char *)mmap(nullptr, n, PROT_READ | PROT_WRITE,
                                       MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(host, MAP_FAILED);
    memset(&h, 0, sizeof h);
    memcpy(h.reserved, "osprey-fake-ipc", 16);
    h.reserved[16] = 2;
    memcpy(h.reserved + 24, name.c_str(), name.size() + 1);
    ASSERT_OK(osp_device_ipc_open(dev_, &h, sizeof h, &ptr, &size));
    EXPECT_EQ(size, n);
    memcpy(host, src.data(), n); // the client writes...
    ASSERT_OK(
        osp_device_memcpy(dev_, back.data(), ptr, n, OSP_COPY_DEVICE_TO_HOST));
    EXPECT_EQ(back, src); // ...the server reads through the GPU
    Bytes other = Rng().Data(OSP_TYPE_UINT8, n);
    ASSERT_OK(osp_device_memcpy(dev_, (char *)ptr + 1, other.data(), n - 1,
                                OSP_COPY_HOST_TO_DEVICE));
    EXPECT_EQ(memcmp(host + 1, other.data(), n - 1), 0);
    // a copy past the end of the mapped allocation is refused
    EXPECT_ERROR_CODE(osp_device_memcpy(dev_, back.data(), ptr, n + 1,
                                        OSP_COPY_DEVICE_TO_HOST),
                      OSP_ERROR_INTERNAL);
    ASSERT_OK(osp_device_ipc_close(dev_, ptr));
    munmap(host, n);
    shm_unlink(name.c_str());
}

// Exporting: the handle names the allocation that holds the pointer and
// the offset says where in it, as the python backend hands a batch's
// inputs (which lie inside a pool region) to its stubs.
TEST_P(DeviceTest, FakeIpcExportsThePointersAllocation) {
    if (IsCpu())
        GTEST_SKIP() << "the CPU device exports nothing (IpcHandlesRefused)";
    const size_t n = 2 * 4096;
    BufferPtr buf = Alloc(n);
    char *inside = static_cast<char *>(buf->data) + 100;
    unsigned char handle[OSP_DEVICE_IPC_HANDLE_BYTES];
    uint64_t offset = 0;
    EXPECT_ERROR_CODE(osp_device_ipc_export(dev_, inside, handle, 10, &offset),
                      OSP_ERROR_INVALID_ARG);
    ASSERT_OK(
        osp_device_ipc_export(dev_, inside, handle, sizeof handle, &offset));
    void *base = nullptr;
    size_t size = 0;
    ASSERT_OK(osp_device_ipc_open(dev_, handle, sizeof handle, &base, &size));
    EXPECT_EQ(static_cast<char *>(base) + offset, inside);
    EXPECT_GE(size, offset + n - 100);
    Bytes src = Rng().Data(OSP_TYPE_UINT8, 64), back(64, 0);
    ASSERT_OK(osp_device_memcpy(dev_, inside, src.data(), 64,
                                OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_device_memcpy(dev_, back.data(),
                                static_cast<char *>(base) + offset, 64,
                                OSP_COPY_DEVICE_TO_HOST));
    EXPECT_EQ(back, src);
    ASSERT_OK(osp_device_ipc_close(dev_, base));
}
#endif

INSTANTIATE_TEST_SUITE_P(Devices, DeviceTest,
                         ::testing::ValuesIn(DevicesUnderTest()), SpecName);

} // namespace

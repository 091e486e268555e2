// The device test harness: devices initialised once (two fake or real
// GPUs when CUDA is built), typed random data, error measures, and
// DeviceTestBase, a fixture parameterised by device that runs an op on
// the device under test and on the CPU device (the oracle) over the same
// host arrays. Used by test_device_conformance.cc and the CUDA device's op
// tests (test_cuda_ops_*.cc, special.cmake); each includes it once, in its
// own program. Its functions are inline, so a program may leave some
// unused.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "half.h"
#include "osp_test.h"
#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#ifdef OSPREY_HAVE_CUDA
#include "cuda_provider.h"
#endif

namespace {

// ---- harness --------------------------------------------------------------

// Small pools so that exhaustion and growth are cheap to reach.
constexpr size_t kPinnedPoolBytes = size_t{8} << 20;
constexpr size_t kCudaPoolBytes = size_t{16} << 20;

inline void InitDevicesOnce() {
    static const bool done = [] {
        osp_device_options opts;
        osp_device_options_init(&opts);
        opts.pinned_pool_bytes = kPinnedPoolBytes;
        opts.cuda_pool_bytes_default = kCudaPoolBytes;
#ifdef OSPREY_HAVE_CUDA
        static const osp_device_provider *const providers[] = {
            &osp_cuda_device_provider};
        opts.providers = providers;
        opts.n_providers = 1;
#endif
        osp_error *err = osp_devices_init(&opts);
        if (err != nullptr) {
            fprintf(stderr, "osp_devices_init: %s\n", osp_error_message(err));
            osp_error_free(err);
        }
        return true;
    }();
    (void)done;
}

// Frees devices at exit, so that leak checkers (compute-sanitizer
// --leak-check) see every pool returned.
class DeviceShutdown : public ::testing::Environment {
  public:
    void TearDown() override {
        osp_devices_shutdown();
    }
};
::testing::Environment *const kShutdown =
    ::testing::AddGlobalTestEnvironment(new DeviceShutdown);

struct BufferDeleter {
    void operator()(osp_buffer *b) const {
        osp_buffer_free(b);
    }
};
using BufferPtr = std::unique_ptr<osp_buffer, BufferDeleter>;

struct EventDeleter {
    void operator()(osp_event *e) const {
        osp_event_free(e);
    }
};
using EventPtr = std::unique_ptr<osp_event, EventDeleter>;

using Bytes = std::vector<unsigned char>;

inline uint64_t TestSeed() {
    const char *env = getenv("OSPREY_TEST_SEED");
    if (env != nullptr)
        return strtoull(env, nullptr, 10);
    return std::random_device{}();
}

// ---- typed data -----------------------------------------------------------

const osp_datatype kNumericTypes[] = {
    OSP_TYPE_BOOL,   OSP_TYPE_UINT8, OSP_TYPE_UINT16, OSP_TYPE_UINT32,
    OSP_TYPE_UINT64, OSP_TYPE_INT8,  OSP_TYPE_INT16,  OSP_TYPE_INT32,
    OSP_TYPE_INT64,  OSP_TYPE_FP16,  OSP_TYPE_FP32,   OSP_TYPE_FP64,
    OSP_TYPE_BF16,
};

inline bool IsFloatType(osp_datatype dt) {
    return dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16 || dt == OSP_TYPE_FP32 ||
           dt == OSP_TYPE_FP64;
}

inline bool IsSignedInt(osp_datatype dt) {
    return dt == OSP_TYPE_INT8 || dt == OSP_TYPE_INT16 ||
           dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64;
}

inline size_t ByteSize(osp_datatype dt) {
    return osp_datatype_byte_size(dt);
}

// Element i of an array of T (unaligned bytes).
template <typename T> inline T Load(const unsigned char *p, size_t i) {
    T v;
    memcpy(&v, p + sizeof(T) * i, sizeof(T));
    return v;
}

// Element i of a typed array as a double (exact for all but huge int64s).
inline double ValueAt(osp_datatype dt, const unsigned char *p, size_t i) {
    switch (dt) {
    case OSP_TYPE_BOOL:
    case OSP_TYPE_UINT8:
        return p[i];
    case OSP_TYPE_UINT16:
        return Load<uint16_t>(p, i);
    case OSP_TYPE_UINT32:
        return Load<uint32_t>(p, i);
    case OSP_TYPE_UINT64:
        return (double)Load<uint64_t>(p, i);
    case OSP_TYPE_INT8:
        return (int8_t)p[i];
    case OSP_TYPE_INT16:
        return Load<int16_t>(p, i);
    case OSP_TYPE_INT32:
        return Load<int32_t>(p, i);
    case OSP_TYPE_INT64:
        return (double)Load<int64_t>(p, i);
    case OSP_TYPE_FP16:
        return fp16_to_fp32(Load<uint16_t>(p, i));
    case OSP_TYPE_BF16:
        return bf16_to_fp32(Load<uint16_t>(p, i));
    case OSP_TYPE_FP32:
        return Load<float>(p, i);
    case OSP_TYPE_FP64:
        return Load<double>(p, i);
    default:
        return 0;
    }
}

// Writes a float-family value (FP16/BF16/FP32/FP64), rounding as needed.
inline void SetFloat(osp_datatype dt, unsigned char *p, size_t i, double x) {
    if (dt == OSP_TYPE_FP64) {
        memcpy(p + 8 * i, &x, 8);
    } else if (dt == OSP_TYPE_FP32) {
        float f = (float)x;
        memcpy(p + 4 * i, &f, 4);
    } else {
        uint16_t h = dt == OSP_TYPE_FP16 ? fp32_to_fp16((float)x)
                                         : fp32_to_bf16((float)x);
        memcpy(p + 2 * i, &h, 2);
    }
}

class Random {
  public:
    explicit Random(uint64_t seed) : gen_(seed) {}

    // Magnitude in [lo, hi], random sign: never zero.
    double Signed(double lo, double hi) {
        double mag = std::uniform_real_distribution<double>(lo, hi)(gen_);
        return Bit() ? mag : -mag;
    }
    bool Bit() {
        return gen_() & 1;
    }
    uint64_t Bits() {
        return gen_();
    }

    // n random elements of dt: floats of magnitude [lo, hi]; integers over
    // their whole range (never zero); BOOL 0/1.
    Bytes Data(osp_datatype dt, size_t n, double lo = 0.1, double hi = 2.0) {
        Bytes out(n * ByteSize(dt));
        for (size_t i = 0; i < n; i++) {
            if (IsFloatType(dt)) {
                SetFloat(dt, out.data(), i, Signed(lo, hi));
            } else if (dt == OSP_TYPE_BOOL) {
                out[i] = Bit();
            } else {
                uint64_t v;
                do
                    v = Bits();
                while ((v & LowMask(ByteSize(dt))) == 0);
                memcpy(out.data() + i * ByteSize(dt), &v, ByteSize(dt));
            }
        }
        return out;
    }

  private:
    static uint64_t LowMask(size_t bytes) {
        return bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
    }
    std::mt19937_64 gen_;
};

// Normwise relative error max|got - want| / max|want| over n elements.
inline double RelativeError(osp_datatype dt, const Bytes &got, const Bytes &want,
                     size_t n) {
    double max_diff = 0, max_want = 0;
    for (size_t i = 0; i < n; i++) {
        double g = ValueAt(dt, got.data(), i), w = ValueAt(dt, want.data(), i);
        if (std::isnan(g) != std::isnan(w))
            return INFINITY;
        if (std::isnan(g))
            continue;
        max_diff = std::max(max_diff, std::fabs(g - w));
        max_want = std::max(max_want, std::fabs(w));
    }
    return max_want == 0 ? max_diff : max_diff / max_want;
}

// Bitwise equality, except that any NaN equals any NaN.
inline ::testing::AssertionResult SameValues(osp_datatype dt, const Bytes &got,
                                      const Bytes &want, size_t n) {
    size_t size = ByteSize(dt);
    for (size_t i = 0; i < n; i++) {
        if (memcmp(got.data() + i * size, want.data() + i * size, size) == 0)
            continue;
        double g = ValueAt(dt, got.data(), i), w = ValueAt(dt, want.data(), i);
        if (IsFloatType(dt) && std::isnan(g) && std::isnan(w))
            continue;
        return ::testing::AssertionFailure()
               << osp_datatype_wire_name(dt) << " element " << i << ": got "
               << g << ", want " << w;
    }
    return ::testing::AssertionSuccess();
}

// ---- the fixture ----------------------------------------------------------

struct DeviceSpec {
    osp_device_type type;
    int index;
};

inline void PrintTo(const DeviceSpec &spec, std::ostream *os) {
    *os << (spec.type == OSP_DEVICE_CPU ? "cpu" : "cuda");
    if (spec.type != OSP_DEVICE_CPU)
        *os << spec.index;
}

inline std::string SpecName(const ::testing::TestParamInfo<DeviceSpec> &info) {
    return info.param.type == OSP_DEVICE_CPU
               ? std::string("cpu")
               : "cuda" + std::to_string(info.param.index);
}

using Ptrs = std::vector<void *>;
using Op = std::function<osp_error *(osp_stream *, const Ptrs &)>;

class DeviceTestBase : public ::testing::TestWithParam<DeviceSpec> {
  protected:
    void SetUp() override {
        InitDevicesOnce();
        const DeviceSpec spec = GetParam();
        if (spec.type == OSP_DEVICE_CPU) {
            dev_ = osp_device_cpu();
        } else {
            if (spec.index >= osp_device_cuda_count())
                GTEST_SKIP() << "no CUDA GPU " << spec.index << " ("
                             << osp_device_cuda_count() << " present)";
            ASSERT_OK(osp_device_cuda_get(spec.index, &dev_));
        }
        cpu_ = osp_device_cpu();
        uint64_t seed = TestSeed();
        seed_trace_ = std::make_unique<::testing::ScopedTrace>(
            __FILE__, __LINE__, "OSPREY_TEST_SEED=" + std::to_string(seed));
        rng_ = std::make_unique<Random>(seed);
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(dev_, &s));
        stream_.reset(s);
        ASSERT_OK(osp_stream_new(cpu_, &s));
        cpu_stream_.reset(s);
    }

    bool IsCpu() const {
        return GetParam().type == OSP_DEVICE_CPU;
    }

    BufferPtr Alloc(size_t size) {
        osp_buffer *b = nullptr;
        osp_error *err = osp_device_alloc(dev_, size, &b);
        if (err != nullptr)
            ADD_FAILURE() << "osp_device_alloc(" << size
                          << "): " << TakeMessage(err);
        return BufferPtr(b);
    }

    BufferPtr AllocHost(size_t size) {
        osp_buffer *b = nullptr;
        osp_error *err = osp_device_alloc_host(dev_, size, &b);
        if (err != nullptr)
            ADD_FAILURE() << "osp_device_alloc_host(" << size
                          << "): " << TakeMessage(err);
        return BufferPtr(b);
    }

    // Copies each host array into fresh device memory, runs `op` on the
    // device under test with the device pointers (in the same order), and
    // copies every array back (so outputs and in-place results land in
    // the host arrays).
    void RunOnDevice(const Op &op, std::initializer_list<Bytes *> arrays) {
        std::vector<BufferPtr> bufs;
        Ptrs ptrs;
        for (Bytes *a : arrays) {
            bufs.push_back(Alloc(a->size()));
            ASSERT_NE(bufs.back(), nullptr);
            ptrs.push_back(bufs.back()->data);
            ASSERT_OK(osp_memcpy_async(stream_.get(), bufs.back()->data,
                                       a->data(), a->size(),
                                       OSP_COPY_HOST_TO_DEVICE));
        }
        ASSERT_OK(op(stream_.get(), ptrs));
        size_t i = 0;
        for (Bytes *a : arrays) {
            ASSERT_OK(osp_memcpy_async(stream_.get(), a->data(),
                                       bufs[i++]->data, a->size(),
                                       OSP_COPY_DEVICE_TO_HOST));
        }
        ASSERT_OK(osp_stream_synchronize(stream_.get()));
    }

    // Runs `op` on the CPU device, in place on the host arrays: the oracle
    // for devices other than the CPU.
    void RunOnCpu(const Op &op, std::initializer_list<Bytes *> arrays) {
        Ptrs ptrs;
        for (Bytes *a : arrays)
            ptrs.push_back(a->data());
        ASSERT_OK(op(cpu_stream_.get(), ptrs));
        ASSERT_OK(osp_stream_synchronize(cpu_stream_.get()));
    }

    Random &Rng() {
        return *rng_;
    }

    osp_device *dev_ = nullptr;
    osp_device *cpu_ = nullptr;
    // The trace lives from SetUp to the fixture's end, below every
    // SCOPED_TRACE of the test body.
    std::unique_ptr<::testing::ScopedTrace> seed_trace_;
    std::unique_ptr<Random> rng_;
    StreamPtr stream_, cpu_stream_;
};


// The devices a program tests: every CUDA GPU (OSPREY_TEST_CUDA_ONLY), else
// the CPU device.
inline std::vector<DeviceSpec> DevicesUnderTest() {
#ifdef OSPREY_TEST_CUDA_ONLY
    // Always at least cuda0, so that a host without a GPU lists the cases
    // and reports them skipped instead of silently running nothing.
    InitDevicesOnce();
    std::vector<DeviceSpec> specs;
    int count = std::max(osp_device_cuda_count(), 1);
    for (int i = 0; i < count; i++)
        specs.push_back({OSP_DEVICE_CUDA, i});
    return specs;
#else
    return {{OSP_DEVICE_CPU, 0}};
#endif
}


} // namespace

// The CUDA device's elementwise tensor ops (unary, binary_nd, where)
// against the CPU device, which is the reference: every op and dtype the
// CPU slot takes, over empty, 1-element, odd, broadcast and larger
// shapes, with NaN, infinities, zeros and the integer extremes among the
// inputs. Built over the fake CUDA runtime (the kernels' own code on the
// host) and as _gpu over a real GPU (tests/unit/special.cmake).
//
// Results must be bitwise equal (any NaN equals any NaN) except where
// the math library may round differently on a GPU (transcendental unary
// ops and POW): there within a few float ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "device_test_harness.h"
#include "osprey/tensor_ops.h"

namespace {

// The fixture, its runners opened to the helpers below.
class CudaOps : public DeviceTestBase {
  public:
    using DeviceTestBase::cpu_stream_;
    using DeviceTestBase::RunOnCpu;
    using DeviceTestBase::RunOnDevice;
};

// Elementwise equality of n values of dt, NaN matching NaN; with rel > 0,
// finite float values may differ by rel relative (or rel absolute near
// zero).
::testing::AssertionResult Close(osp_datatype dt, const Bytes &got,
                                 const Bytes &want, size_t n, double rel) {
    if (rel == 0 || !IsFloatType(dt))
        return SameValues(dt, got, want, n);
    for (size_t i = 0; i < n; i++) {
        double g = ValueAt(dt, got.data(), i), w = ValueAt(dt, want.data(), i);
        if (std::isnan(g) && std::isnan(w))
            continue;
        if (g == w || std::fabs(g - w) <= rel * std::max(std::fabs(w), 1.0))
            continue;
        return ::testing::AssertionFailure()
               << osp_datatype_wire_name(dt) << " element " << i << ": got "
               << g << ", want " << w;
    }
    return ::testing::AssertionSuccess();
}

// n random elements of dt whose first elements are the type's specials:
// NaN, +-inf, +-0 for floats; 0, -1, 1, min and max for integers.
Bytes WithSpecials(Random &rng, osp_datatype dt, size_t n) {
    Bytes data = rng.Data(dt, n);
    size_t es = ByteSize(dt);
    auto put = [&](size_t i, const void *v) {
        if (i < n)
            memcpy(data.data() + i * es, v, es);
    };
    if (dt == OSP_TYPE_FP32) {
        const float s[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
        for (size_t i = 0; i < 5; i++)
            put(i, &s[i]);
    } else if (dt == OSP_TYPE_FP64) {
        const double s[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
        for (size_t i = 0; i < 5; i++)
            put(i, &s[i]);
    } else if (dt != OSP_TYPE_BOOL) {
        uint64_t min = IsSignedInt(dt) ? uint64_t{1} << (8 * es - 1) : 0;
        uint64_t max = IsSignedInt(dt) ? min - 1 : ~uint64_t{0};
        const uint64_t s[] = {0, ~uint64_t{0}, 1, min, max};
        for (size_t i = 0; i < 5; i++)
            put(i, &s[i]); // little-endian: the low bytes
    }
    return data;
}

// ---- unary ----------------------------------------------------------------

struct UnaryCase {
    osp_unary_op op;
    float alpha, beta;
};

const UnaryCase kFloatUnary[] = {
    {OSP_UNARY_IDENTITY, 0, 0},
    {OSP_UNARY_ABS, 0, 0},
    {OSP_UNARY_NEG, 0, 0},
    {OSP_UNARY_SIGN, 0, 0},
    {OSP_UNARY_RELU, 0, 0},
    {OSP_UNARY_CLIP, -0.5f, 0.7f},
    {OSP_UNARY_EXP, 0, 0},
    {OSP_UNARY_LOG, 0, 0},
    {OSP_UNARY_SQRT, 0, 0},
    {OSP_UNARY_RECIPROCAL, 0, 0},
    {OSP_UNARY_FLOOR, 0, 0},
    {OSP_UNARY_CEIL, 0, 0},
    {OSP_UNARY_ROUND, 0, 0},
    {OSP_UNARY_SIGMOID, 0, 0},
    {OSP_UNARY_TANH, 0, 0},
    {OSP_UNARY_ERF, 0, 0},
    {OSP_UNARY_GELU, 0, 0},
    {OSP_UNARY_GELU_TANH, 0, 0},
    {OSP_UNARY_SILU, 0, 0},
    {OSP_UNARY_SOFTPLUS, 0, 0},
    {OSP_UNARY_SOFTSIGN, 0, 0},
    {OSP_UNARY_MISH, 0, 0},
    {OSP_UNARY_ELU, 1.0f, 0},
    {OSP_UNARY_CELU, 1.5f, 0},
    {OSP_UNARY_SELU, 1.6733f, 1.0507f},
    {OSP_UNARY_LEAKY_RELU, 0.1f, 0},
    {OSP_UNARY_THRESHOLDED_RELU, 0.3f, 0},
    {OSP_UNARY_HARD_SIGMOID, 0.2f, 0.5f},
    {OSP_UNARY_HARD_SWISH, 0, 0},
    {OSP_UNARY_SIN, 0, 0},
    {OSP_UNARY_COS, 0, 0},
    {OSP_UNARY_TAN, 0, 0},
    {OSP_UNARY_ASIN, 0, 0},
    {OSP_UNARY_ACOS, 0, 0},
    {OSP_UNARY_ATAN, 0, 0},
    {OSP_UNARY_SINH, 0, 0},
    {OSP_UNARY_COSH, 0, 0},
    {OSP_UNARY_ASINH, 0, 0},
    {OSP_UNARY_ACOSH, 0, 0},
    {OSP_UNARY_ATANH, 0, 0},
};

// The op on x (n elements of dt) on both devices; the outputs compared.
void ExpectUnaryMatches(CudaOps *t, const osp_unary_args &base, const Bytes &x,
                        osp_datatype out_dt, double rel) {
    size_t n = base.n, out_es = ByteSize(out_dt);
    Bytes want_x = x, want_y(n * out_es, 0xAB), got_x = x,
          got_y(n * out_es, 0xCD);
    auto op = [&](osp_stream *s, const Ptrs &p) {
        osp_unary_args a = base;
        a.x = p[0];
        a.y = p[1];
        return osp_op_unary(s, &a);
    };
    t->RunOnCpu(op, {&want_x, &want_y});
    t->RunOnDevice(op, {&got_x, &got_y});
    EXPECT_TRUE(Close(out_dt, got_y, want_y, n, rel))
        << "unary op " << base.op << " on "
        << osp_datatype_wire_name(base.dtype) << ", n=" << n;
}

TEST_P(CudaOps, UnaryFloatOpsMatchTheCpu) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{1031}}) {
        Bytes x = WithSpecials(Rng(), OSP_TYPE_FP32, n);
        for (const UnaryCase &c : kFloatUnary) {
            osp_unary_args a = {};
            a.op = c.op;
            a.dtype = OSP_TYPE_FP32;
            a.n = n;
            a.alpha = c.alpha;
            a.beta = c.beta;
            // Transcendental results may round differently on a GPU.
            ExpectUnaryMatches(this, a, x, OSP_TYPE_FP32, 4e-6);
        }
    }
}

TEST_P(CudaOps, UnaryIntegerOpsMatchTheCpuExactly) {
    const osp_datatype types[] = {OSP_TYPE_INT8, OSP_TYPE_INT16, OSP_TYPE_INT32,
                                  OSP_TYPE_INT64};
    const UnaryCase ops[] = {{OSP_UNARY_ABS, 0, 0},
                             {OSP_UNARY_NEG, 0, 0},
                             {OSP_UNARY_SIGN, 0, 0},
                             {OSP_UNARY_RELU, 0, 0},
                             {OSP_UNARY_CLIP, -1000.5f, 3e9f},
                             {OSP_UNARY_CLIP, NAN, 5.0f},
                             {OSP_UNARY_IDENTITY, 0, 0}};
    for (osp_datatype dt : types) {
        Bytes x = WithSpecials(Rng(), dt, 517);
        for (const UnaryCase &c : ops) {
            osp_unary_args a = {};
            a.op = c.op;
            a.dtype = dt;
            a.n = 517;
            a.alpha = c.alpha;
            a.beta = c.beta;
            ExpectUnaryMatches(this, a, x, dt, 0);
        }
    }
    // |x| of unsigned types is a copy; IDENTITY copies any type.
    for (osp_datatype dt :
         {OSP_TYPE_UINT8, OSP_TYPE_UINT16, OSP_TYPE_UINT32, OSP_TYPE_UINT64}) {
        osp_unary_args a = {};
        a.op = OSP_UNARY_ABS;
        a.dtype = dt;
        a.n = 33;
        ExpectUnaryMatches(this, a, Rng().Data(dt, 33), dt, 0);
    }
    for (osp_datatype dt : {OSP_TYPE_FP16, OSP_TYPE_BF16, OSP_TYPE_FP64}) {
        osp_unary_args a = {};
        a.op = OSP_UNARY_IDENTITY;
        a.dtype = dt;
        a.n = 9;
        ExpectUnaryMatches(this, a, Rng().Data(dt, 9), dt, 0);
    }
}

TEST_P(CudaOps, UnaryBoolOutAndNotMatchTheCpu) {
    Bytes x = WithSpecials(Rng(), OSP_TYPE_FP32, 64);
    for (osp_unary_op op : {OSP_UNARY_ISNAN, OSP_UNARY_ISINF}) {
        for (float alpha : {0.0f, 1.0f}) {
            for (float beta : {0.0f, 1.0f}) {
                osp_unary_args a = {};
                a.op = op;
                a.dtype = OSP_TYPE_FP32;
                a.n = 64;
                a.alpha = alpha;
                a.beta = beta;
                ExpectUnaryMatches(this, a, x, OSP_TYPE_BOOL, 0);
            }
        }
    }
    osp_unary_args a = {};
    a.op = OSP_UNARY_NOT;
    a.dtype = OSP_TYPE_BOOL;
    a.n = 301;
    ExpectUnaryMatches(this, a, Rng().Data(OSP_TYPE_BOOL, 301), OSP_TYPE_BOOL,
                       0);
}

TEST_P(CudaOps, UnaryRunsInPlace) {
    const size_t n = 300;
    for (osp_unary_op op :
         {OSP_UNARY_GELU, OSP_UNARY_NEG, OSP_UNARY_IDENTITY}) {
        Bytes want = Rng().Data(OSP_TYPE_FP32, n), got = want;
        auto run = [&](osp_stream *s, const Ptrs &p) {
            osp_unary_args a = {};
            a.op = op;
            a.dtype = OSP_TYPE_FP32;
            a.n = n;
            a.x = p[0];
            a.y = p[0];
            return osp_op_unary(s, &a);
        };
        RunOnCpu(run, {&want});
        RunOnDevice(run, {&got});
        EXPECT_LT(RelativeError(OSP_TYPE_FP32, got, want, n), 4e-6)
            << "op " << op;
    }
}

// ---- binary_nd ------------------------------------------------------------

struct Shape {
    std::vector<int64_t> out, a, b; // a and b broadcast to out (numpy rules)
};

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t> &in,
                                      const std::vector<int64_t> &out) {
    std::vector<int64_t> strides(out.size(), 0);
    int64_t step = 1;
    size_t skip = out.size() - in.size();
    for (size_t d = in.size(); d-- > 0;) {
        strides[skip + d] = in[d] == 1 ? 0 : step;
        step *= in[d];
    }
    return strides;
}

size_t Count(const std::vector<int64_t> &dims) {
    size_t n = 1;
    for (int64_t d : dims)
        n *= (size_t)d;
    return n;
}

const Shape kShapes[] = {
    {{37}, {37}, {37}},                // equal shapes
    {{}, {}, {}},                      // scalars
    {{1}, {1}, {1}},                   // one element
    {{5, 7}, {5, 7}, {7}},             // row broadcast
    {{5, 7}, {5, 1}, {5, 7}},          // column broadcast
    {{3, 5, 4}, {3, 1, 4}, {1, 5, 1}}, // both broadcast
    {{6, 9}, {}, {6, 9}},              // scalar a
    {{2, 0, 3}, {2, 0, 3}, {3}},       // empty
};

const osp_datatype kBinaryTypes[] = {
    OSP_TYPE_FP32,   OSP_TYPE_FP64,   OSP_TYPE_INT8,  OSP_TYPE_INT16,
    OSP_TYPE_INT32,  OSP_TYPE_INT64,  OSP_TYPE_UINT8, OSP_TYPE_UINT16,
    OSP_TYPE_UINT32, OSP_TYPE_UINT64, OSP_TYPE_BOOL,
};

bool IsComparison(osp_binary_nd_op op) {
    return op >= OSP_BINARY_ND_EQUAL && op <= OSP_BINARY_ND_GREATER_EQUAL;
}

// op on a and b of shape s on both devices, compared; false when the CPU
// does not take the op on dt (then the CUDA device must refuse it too).
bool ExpectBinaryMatches(CudaOps *t, osp_binary_nd_op op, osp_datatype dt,
                         const Shape &s, const Bytes &a, const Bytes &b) {
    size_t n = Count(s.out);
    size_t out_es = IsComparison(op) ? 1 : ByteSize(dt);
    std::vector<int64_t> sa = BroadcastStrides(s.a, s.out),
                         sb = BroadcastStrides(s.b, s.out);
    auto run = [&](osp_stream *st, const Ptrs &p) {
        osp_binary_nd_args args = {};
        args.op = op;
        args.dtype = dt;
        args.rank = (int)s.out.size();
        for (size_t d = 0; d < s.out.size(); d++) {
            args.dims[d] = s.out[d];
            args.a_strides[d] = sa[d];
            args.b_strides[d] = sb[d];
        }
        args.a = p[0];
        args.b = p[1];
        args.out = p[2];
        return osp_op_binary_nd(st, &args);
    };
    Bytes probe_a = a, probe_b = b, probe_out(std::max<size_t>(n, 1) * out_es);
    osp_error *err = run(t->cpu_stream_.get(),
                         {probe_a.data(), probe_b.data(), probe_out.data()});
    if (err != nullptr) {
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
        osp_error_free(err);
        return false;
    }
    Bytes want_a = a, want_b = b, want(std::max<size_t>(n, 1) * out_es, 0x11);
    Bytes got_a = a, got_b = b, got(std::max<size_t>(n, 1) * out_es, 0x22);
    t->RunOnCpu(run, {&want_a, &want_b, &want});
    t->RunOnDevice(run, {&got_a, &got_b, &got});
    osp_datatype out_dt = IsComparison(op) ? OSP_TYPE_BOOL : dt;
    double rel = op == OSP_BINARY_ND_POW ? 4e-6 : 0;
    if (n == 0) { // nothing written on either side
        EXPECT_EQ(got[0], 0x22);
    }
    EXPECT_TRUE(Close(out_dt, got, want, n, rel))
        << "binary_nd op " << op << " on " << osp_datatype_wire_name(dt)
        << ", shape case with " << n << " elements";
    return true;
}

TEST_P(CudaOps, BinaryNdEveryOpAndDtypeMatchesTheCpu) {
    int checked = 0;
    for (osp_datatype dt : kBinaryTypes) {
        for (const Shape &s : kShapes) {
            Bytes a = WithSpecials(Rng(), dt, std::max<size_t>(Count(s.a), 1));
            Bytes b = WithSpecials(Rng(), dt, std::max<size_t>(Count(s.b), 1));
            // Exponents and shift counts small enough to mean something.
            if (!IsFloatType(dt) && dt != OSP_TYPE_BOOL)
                for (size_t i = 5; i < Count(s.b); i += 2)
                    b[i * ByteSize(dt)] &= 0x0f;
            for (int op = 0; op < OSP_BINARY_ND_OP_COUNT_; op++)
                checked += ExpectBinaryMatches(this, (osp_binary_nd_op)op, dt,
                                               s, a, b);
        }
    }
    // Every dtype takes some op: the table above is not vacuous.
    EXPECT_GT(checked, 11 * 8 * 5);
}

TEST_P(CudaOps, BinaryNdLargeBroadcastMatchesTheCpu) {
    const Shape s = {{2, 129, 257}, {2, 129, 257}, {129, 1}};
    Bytes a = Rng().Data(OSP_TYPE_FP32, Count(s.a));
    Bytes b = Rng().Data(OSP_TYPE_FP32, Count(s.b));
    for (osp_binary_nd_op op :
         {OSP_BINARY_ND_ADD, OSP_BINARY_ND_DIV, OSP_BINARY_ND_LESS})
        EXPECT_TRUE(ExpectBinaryMatches(this, op, OSP_TYPE_FP32, s, a, b));
    Bytes ia = Rng().Data(OSP_TYPE_INT64, Count(s.a));
    Bytes ib = Rng().Data(OSP_TYPE_INT64, Count(s.b));
    EXPECT_TRUE(ExpectBinaryMatches(this, OSP_BINARY_ND_MUL, OSP_TYPE_INT64, s,
                                    ia, ib));
}

// Operands read through any strides: a transposed, b with its rows
// reversed (a negative stride, the pointer at its last row).
TEST_P(CudaOps, BinaryNdReadsTransposedAndReversedOperands) {
    Bytes a = Rng().Data(OSP_TYPE_FP32, 35), b = Rng().Data(OSP_TYPE_FP32, 35);
    auto run = [](osp_stream *s, const Ptrs &p) {
        osp_binary_nd_args args = {};
        args.op = OSP_BINARY_ND_SUB;
        args.dtype = OSP_TYPE_FP32;
        args.rank = 2;
        args.dims[0] = 5;
        args.dims[1] = 7;
        args.a = p[0]; // stored [7, 5]
        args.a_strides[0] = 1;
        args.a_strides[1] = 5;
        args.b = (float *)p[1] + 28; // stored [5, 7], rows last to first
        args.b_strides[0] = -7;
        args.b_strides[1] = 1;
        args.out = p[2];
        return osp_op_binary_nd(s, &args);
    };
    Bytes wa = a, wb = b, want(35 * 4), ga = a, gb = b, got(35 * 4, 0xCC);
    RunOnCpu(run, {&wa, &wb, &want});
    RunOnDevice(run, {&ga, &gb, &got});
    EXPECT_TRUE(SameValues(OSP_TYPE_FP32, got, want, 35));
}

// The CUDA device offers every slot this file and
// test_cuda_ops_movement.cc test (the ONNX runtime checks this before it
// places a model on the device).
TEST_P(CudaOps, DeviceOffersTheSlots) {
    for (osp_op_kind op :
         {OSP_OP_UNARY, OSP_OP_BINARY_ND, OSP_OP_WHERE, OSP_OP_COPY_STRIDED,
          OSP_OP_GATHER, OSP_OP_FILL, OSP_OP_PAD, OSP_OP_TOPK, OSP_OP_CUMSUM,
          OSP_OP_SCATTER})
        EXPECT_TRUE(osp_device_supports_op(dev_, op)) << osp_op_kind_name(op);
}

// ---- where ----------------------------------------------------------------

TEST_P(CudaOps, WhereMatchesTheCpuForEveryElementSize) {
    struct WhereShape {
        std::vector<int64_t> out, cond, x, y;
    };
    const WhereShape shapes[] = {
        {{41}, {41}, {41}, {41}},     {{}, {}, {}, {}},
        {{4, 5}, {4, 1}, {1, 5}, {}}, {{3, 2, 7}, {7}, {3, 2, 7}, {2, 1}},
        {{3, 0}, {3, 0}, {0}, {}},    {{64, 65}, {64, 65}, {65}, {64, 65}},
    };
    const osp_datatype types[] = {OSP_TYPE_UINT8, OSP_TYPE_FP16, OSP_TYPE_FP32,
                                  OSP_TYPE_INT64};
    for (osp_datatype dt : types) {
        size_t es = ByteSize(dt);
        for (const WhereShape &s : shapes) {
            size_t n = Count(s.out);
            Bytes cond =
                Rng().Data(OSP_TYPE_BOOL, std::max<size_t>(Count(s.cond), 1));
            Bytes x = Rng().Data(dt, std::max<size_t>(Count(s.x), 1));
            Bytes y = Rng().Data(dt, std::max<size_t>(Count(s.y), 1));
            auto sc = BroadcastStrides(s.cond, s.out),
                 sx = BroadcastStrides(s.x, s.out),
                 sy = BroadcastStrides(s.y, s.out);
            auto run = [&](osp_stream *st, const Ptrs &p) {
                osp_where_args a = {};
                a.elem_size = es;
                a.rank = (int)s.out.size();
                for (size_t d = 0; d < s.out.size(); d++) {
                    a.dims[d] = s.out[d];
                    a.cond_strides[d] = sc[d];
                    a.x_strides[d] = sx[d];
                    a.y_strides[d] = sy[d];
                }
                a.cond = (const bool *)p[0];
                a.x = p[1];
                a.y = p[2];
                a.out = p[3];
                return osp_op_where(st, &a);
            };
            Bytes c1 = cond, x1 = x, y1 = y,
                  want(std::max<size_t>(n, 1) * es, 0x5A);
            Bytes c2 = cond, x2 = x, y2 = y,
                  got(std::max<size_t>(n, 1) * es, 0x5A);
            RunOnCpu(run, {&c1, &x1, &y1, &want});
            RunOnDevice(run, {&c2, &x2, &y2, &got});
            EXPECT_EQ(got, want)
                << "element size " << es << ", " << n << " elements";
        }
    }
}

// ---- bad pointers ---------------------------------------------------------

#ifdef OSPREY_TEST_FAKE_CUDA
// A host pointer where device memory belongs fails the launch (the fake
// checks every pointer a kernel gets; a GPU would fault).
TEST_P(CudaOps, HostPointersFailTheLaunch) {
    std::vector<float> host(64, 1.0f);
    BufferPtr dev = Alloc(64 * sizeof(float));
    ASSERT_NE(dev, nullptr);
    osp_unary_args u = {};
    u.op = OSP_UNARY_EXP;
    u.dtype = OSP_TYPE_FP32;
    u.n = 64;
    u.x = host.data();
    u.y = dev->data;
    EXPECT_ERROR_CODE(osp_op_unary(stream_.get(), &u), OSP_ERROR_INTERNAL);
    osp_binary_nd_args b = {};
    b.op = OSP_BINARY_ND_ADD;
    b.dtype = OSP_TYPE_FP32;
    b.rank = 1;
    b.dims[0] = 64;
    b.a_strides[0] = b.b_strides[0] = 1;
    b.a = dev->data;
    b.b = dev->data;
    b.out = host.data();
    EXPECT_ERROR_CODE(osp_op_binary_nd(stream_.get(), &b), OSP_ERROR_INTERNAL);
    // The stream still works.
    u.x = dev->data;
    ASSERT_OK(osp_op_unary(stream_.get(), &u));
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
}
#endif

INSTANTIATE_TEST_SUITE_P(Devices, CudaOps,
                         ::testing::ValuesIn(DevicesUnderTest()), SpecName);

} // namespace

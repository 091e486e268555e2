// The CUDA device's data-movement, index and scan tensor ops
// (copy_strided, fill, pad, gather, scatter, topk, cumsum) against the
// CPU device, which is the reference: every element size or dtype the CPU
// slot takes, empty, 1-element, odd and larger shapes, and the kernels'
// own paths (rows moved as wide words, tiled transposes, misaligned
// pointers). Built over the fake CUDA runtime (the kernels' own code on
// the host) and as _gpu over a real GPU (tests/unit/special.cmake).
//
// These ops move or order values, so results must be bitwise equal;
// float scatter-add with repeated indices is the one exception (the GPU
// adds in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "device_test_harness.h"
#include "osprey/tensor_ops.h"

namespace {

class CudaOps : public DeviceTestBase {
  protected:
    // op on the CPU and on the device over copies of `arrays`; every array
    // must come back identical (outputs and in-place results alike).
    void ExpectSame(const Op &op, std::vector<Bytes> arrays,
                    const std::string &what) {
        std::vector<Bytes> got = arrays;
        switch (arrays.size()) {
        case 2:
            RunOnCpu(op, {&arrays[0], &arrays[1]});
            RunOnDevice(op, {&got[0], &got[1]});
            break;
        case 3:
            RunOnCpu(op, {&arrays[0], &arrays[1], &arrays[2]});
            RunOnDevice(op, {&got[0], &got[1], &got[2]});
            break;
        default:
            RunOnCpu(op, {&arrays[0], &arrays[1], &arrays[2], &arrays[3]});
            RunOnDevice(op, {&got[0], &got[1], &got[2], &got[3]});
            break;
        }
        for (size_t i = 0; i < arrays.size(); i++)
            EXPECT_TRUE(
                SameValues(OSP_TYPE_UINT8, got[i], arrays[i], arrays[i].size()))
                << what << ": array " << i;
    }
};

size_t Count(const std::vector<int64_t> &dims) {
    size_t n = 1;
    for (int64_t d : dims)
        n *= (size_t)d;
    return n;
}

const size_t kElemSizes[] = {1, 2, 4, 8, 16};

// ---- copy_strided ---------------------------------------------------------

// dims copied from src (strides src_strides, starting src_offset elements
// into a buffer of src_len) to dst (dst_strides, dst_offset into dst_len).
struct CopyCase {
    std::string name;
    std::vector<int64_t> dims, src_strides, dst_strides;
    int64_t src_offset, src_len, dst_offset, dst_len;
};

std::vector<CopyCase> CopyCases() {
    return {
        {"contiguous", {1001}, {1}, {1}, 0, 1001, 0, 1001},
        {"scalar", {}, {}, {}, 0, 1, 0, 1},
        {"one element", {1, 1}, {1, 1}, {1, 1}, 0, 1, 0, 1},
        {"empty", {4, 0}, {1, 1}, {1, 1}, 0, 1, 0, 1},
        // A slice of columns 3..66 of a [9, 70] matrix into [9, 64].
        {"slice", {9, 64}, {70, 1}, {64, 1}, 3, 630, 0, 576},
        // Rows of an odd length from an odd offset: no wider words.
        {"odd slice", {9, 63}, {70, 1}, {63, 1}, 1, 630, 0, 567},
        // Concat's second half: [5, 6] into columns 4..9 of [5, 10].
        {"concat", {5, 6}, {6, 1}, {10, 1}, 0, 30, 4, 50},
        {"reversed", {37}, {-1}, {1}, 36, 37, 0, 37},
        {"expand", {6, 33}, {0, 1}, {33, 1}, 0, 33, 0, 198},
        {"transpose", {45, 37}, {1, 45}, {37, 1}, 0, 1665, 0, 1665},
        {"transpose 3d",
         {3, 20, 17},
         {1, 51, 3},
         {340, 17, 1},
         0,
         1020,
         0,
         1020},
        // Several tiles each way, partial ones at the edges, two planes.
        {"large transpose",
         {2, 100, 70},
         {7000, 1, 100},
         {7000, 70, 1},
         0,
         14000,
         0,
         14000},
        {"small transpose", {3, 5}, {1, 3}, {5, 1}, 0, 15, 0, 15},
        {"permute 4d",
         {2, 9, 3, 11},
         {297, 1, 99, 9},
         {297, 33, 11, 1},
         0,
         594,
         0,
         594},
    };
}

TEST_P(CudaOps, CopyStridedMatchesTheCpuForEveryElementSize) {
    for (size_t es : kElemSizes) {
        for (const CopyCase &c : CopyCases()) {
            Bytes src = Rng().Data(OSP_TYPE_UINT8, (size_t)c.src_len * es);
            Bytes dst(c.dst_len * es, 0xEE); // untouched outside the box
            auto run = [&](osp_stream *s, const Ptrs &p) {
                osp_copy_strided_args a = {};
                a.elem_size = es;
                a.rank = (int)c.dims.size();
                for (size_t d = 0; d < c.dims.size(); d++) {
                    a.dims[d] = c.dims[d];
                    a.src_strides[d] = c.src_strides[d];
                    a.dst_strides[d] = c.dst_strides[d];
                }
                a.src = (char *)p[0] + c.src_offset * (int64_t)es;
                a.dst = (char *)p[1] + c.dst_offset * (int64_t)es;
                return osp_op_copy_strided(s, &a);
            };
            ExpectSame(run, {src, dst},
                       c.name + ", element size " + std::to_string(es));
        }
    }
}

// ---- fill -----------------------------------------------------------------

TEST_P(CudaOps, FillMatchesTheCpu) {
    for (size_t es : {1, 2, 4, 8}) {
        for (size_t n : {size_t{1}, size_t{7}, size_t{1003}}) {
            osp_fill_args a = {};
            a.elem_size = es;
            a.n = n;
            for (size_t i = 0; i < 8; i++)
                a.value[i] = (uint8_t)(0x31 + 17 * i);
            Bytes dst((n + 3) * es, 0x00); // the tail stays 0
            auto run = [&](osp_stream *s, const Ptrs &p) {
                osp_fill_args b = a;
                b.dst = p[0];
                return osp_op_fill(s, &b);
            };
            Bytes want = dst, got = dst;
            RunOnCpu(run, {&want});
            RunOnDevice(run, {&got});
            EXPECT_EQ(got, want) << "element size " << es << ", n " << n;
        }
    }
}

// ---- pad ------------------------------------------------------------------

struct PadCase {
    std::vector<int64_t> in, begin, end;
};

TEST_P(CudaOps, PadMatchesTheCpuInEveryMode) {
    const PadCase cases[] = {
        {{5}, {2}, {3}},
        {{4, 6}, {1, 2}, {3, 0}},
        {{4, 6}, {-1, 2}, {1, -3}}, // crops and pads
        {{3, 4, 5}, {0, 3, 1}, {2, 1, 4}},
        {{1}, {0}, {0}},          // one element, no pad
        {{}, {}, {}},             // scalar
        {{6, 7}, {0, 0}, {0, 0}}, // a copy
    };
    for (osp_pad_mode mode :
         {OSP_PAD_CONSTANT, OSP_PAD_REFLECT, OSP_PAD_EDGE, OSP_PAD_WRAP}) {
        for (size_t es : {1, 2, 4, 8}) {
            for (const PadCase &c : cases) {
                osp_pad_args a = {};
                a.mode = mode;
                a.elem_size = es;
                a.rank = (int)c.in.size();
                std::vector<int64_t> out;
                for (size_t d = 0; d < c.in.size(); d++) {
                    a.in_dims[d] = c.in[d];
                    a.pad_begin[d] = c.begin[d];
                    a.pad_end[d] = c.end[d];
                    out.push_back(c.in[d] + c.begin[d] + c.end[d]);
                }
                for (size_t i = 0; i < 8; i++)
                    a.value[i] = (uint8_t)(0xA0 + i);
                auto run = [&](osp_stream *s, const Ptrs &p) {
                    osp_pad_args b = a;
                    b.x = p[0];
                    b.y = p[1];
                    return osp_op_pad(s, &b);
                };
                // Reflect needs pads below the kept size; skip the cases
                // the dispatcher refuses (the CPU says which).
                Bytes x = Rng().Data(OSP_TYPE_UINT8, Count(c.in) * es);
                Bytes y(Count(out) * es, 0x77), px = x, py = y;
                osp_error *err = run(cpu_stream_.get(), {px.data(), py.data()});
                if (err != nullptr) {
                    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
                    osp_error_free(err);
                    continue;
                }
                ASSERT_OK(osp_stream_synchronize(cpu_stream_.get()));
                ExpectSame(run, {x, y},
                           "mode " + std::to_string(mode) + ", element size " +
                               std::to_string(es) + ", rank " +
                               std::to_string(c.in.size()));
            }
        }
    }
}

// ---- gather ---------------------------------------------------------------

TEST_P(CudaOps, GatherMatchesTheCpu) {
    struct GatherCase {
        int64_t outer, len, inner, n_idx;
    };
    const GatherCase cases[] = {
        {1, 10, 1, 7}, {3, 5, 4, 6}, {2, 9, 33, 4}, {1, 1, 1, 1}, {4, 6, 2, 0},
    };
    for (size_t es : kElemSizes) {
        for (osp_datatype idt : {OSP_TYPE_INT32, OSP_TYPE_INT64}) {
            for (const GatherCase &c : cases) {
                Bytes data = Rng().Data(
                    OSP_TYPE_UINT8, (size_t)(c.outer * c.len * c.inner) * es);
                Bytes idx(std::max<int64_t>(c.n_idx, 1) * ByteSize(idt));
                for (int64_t j = 0; j < c.n_idx; j++) {
                    int64_t v = (int64_t)(Rng().Bits() % (2 * c.len)) - c.len;
                    if (idt == OSP_TYPE_INT32) {
                        int32_t w = (int32_t)v;
                        memcpy(idx.data() + 4 * j, &w, 4);
                    } else {
                        memcpy(idx.data() + 8 * j, &v, 8);
                    }
                }
                Bytes out(
                    std::max<size_t>((size_t)(c.outer * c.n_idx * c.inner), 1) *
                        es,
                    0x99);
                auto run = [&](osp_stream *s, const Ptrs &p) {
                    osp_gather_args a = {};
                    a.elem_size = es;
                    a.data = p[0];
                    a.outer = c.outer;
                    a.axis_len = c.len;
                    a.inner = c.inner;
                    a.index_dtype = idt;
                    a.indices = p[1];
                    a.n_indices = c.n_idx;
                    a.out = p[2];
                    return osp_op_gather(s, &a);
                };
                ExpectSame(run, {data, idx, out},
                           "element size " + std::to_string(es) + ", inner " +
                               std::to_string(c.inner));
            }
        }
    }
}

// Indices are device memory, so the CUDA device cannot refuse a bad one
// before returning: it writes zeros for it (the CPU refuses the call).
TEST_P(CudaOps, GatherWritesZerosForAnIndexOutOfRange) {
    std::vector<float> data = {1, 2, 3, 4, 5, 6}; // [3, 2]
    std::vector<int64_t> idx = {2, 3, -4, -3};
    Bytes d((const unsigned char *)data.data(),
            (const unsigned char *)(data.data() + 6));
    Bytes i((const unsigned char *)idx.data(),
            (const unsigned char *)(idx.data() + 4));
    Bytes out(8 * sizeof(float), 0xFF);
    RunOnDevice(
        [](osp_stream *s, const Ptrs &p) {
            osp_gather_args a = {};
            a.elem_size = 4;
            a.data = p[0];
            a.outer = 1;
            a.axis_len = 3;
            a.inner = 2;
            a.index_dtype = OSP_TYPE_INT64;
            a.indices = p[1];
            a.n_indices = 4;
            a.out = p[2];
            return osp_op_gather(s, &a);
        },
        {&d, &i, &out});
    const float want[] = {5, 6, 0, 0, 0, 0, 1, 2};
    EXPECT_EQ(memcmp(out.data(), want, sizeof want), 0);
}

// ---- scatter --------------------------------------------------------------

// n_idx indices into [0, len): distinct (a random sample) or repeating.
Bytes ScatterIndices(Random &rng, osp_datatype idt, int64_t len, int64_t n_idx,
                     bool distinct) {
    std::vector<int64_t> pick(len);
    std::iota(pick.begin(), pick.end(), 0);
    for (int64_t i = len - 1; i > 0; i--)
        std::swap(pick[i], pick[rng.Bits() % (i + 1)]);
    Bytes out(std::max<int64_t>(n_idx, 1) * ByteSize(idt));
    for (int64_t j = 0; j < n_idx; j++) {
        int64_t v = distinct ? pick[j] : (int64_t)(rng.Bits() % len);
        if (rng.Bit())
            v -= len; // negative indices count from the end
        if (idt == OSP_TYPE_INT32) {
            int32_t w = (int32_t)v;
            memcpy(out.data() + 4 * j, &w, 4);
        } else {
            memcpy(out.data() + 8 * j, &v, 8);
        }
    }
    return out;
}

osp_error *RunScatter(osp_stream *s, const Ptrs &p, osp_scatter_reduction r,
                      osp_datatype dt, osp_datatype idt, int64_t outer,
                      int64_t len, int64_t inner, int64_t n_idx) {
    osp_scatter_args a = {};
    a.reduction = r;
    a.dtype = dt;
    a.data = p[0];
    a.outer = outer;
    a.axis_len = len;
    a.inner = inner;
    a.index_dtype = idt;
    a.indices = p[1];
    a.n_indices = n_idx;
    a.updates = p[2];
    return osp_op_scatter(s, &a);
}

TEST_P(CudaOps, ScatterReplaceMatchesTheCpuForEveryDtype) {
    const osp_datatype types[] = {OSP_TYPE_BOOL, OSP_TYPE_INT8, OSP_TYPE_FP16,
                                  OSP_TYPE_FP32, OSP_TYPE_UINT64};
    for (osp_datatype dt : types) {
        for (osp_datatype idt : {OSP_TYPE_INT32, OSP_TYPE_INT64}) {
            const int64_t outer = 3, len = 11, inner = 5, n_idx = 7;
            Bytes data = Rng().Data(dt, outer * len * inner);
            Bytes idx = ScatterIndices(Rng(), idt, len, n_idx, true);
            Bytes upd = Rng().Data(dt, outer * n_idx * inner);
            ExpectSame(
                [&](osp_stream *s, const Ptrs &p) {
                    return RunScatter(s, p, OSP_SCATTER_NONE, dt, idt, outer,
                                      len, inner, n_idx);
                },
                {data, idx, upd}, osp_datatype_wire_name(dt));
        }
    }
}

TEST_P(CudaOps, ScatterReductionsCombineRepeatedIndices) {
    const int64_t outer = 2, len = 5, inner = 3, n_idx = 40;
    for (osp_datatype dt : {OSP_TYPE_INT32, OSP_TYPE_INT64, OSP_TYPE_FP32}) {
        for (osp_scatter_reduction r : {OSP_SCATTER_ADD, OSP_SCATTER_MUL,
                                        OSP_SCATTER_MAX, OSP_SCATTER_MIN}) {
            Bytes data = Rng().Data(dt, outer * len * inner);
            Bytes idx =
                ScatterIndices(Rng(), OSP_TYPE_INT64, len, n_idx, false);
            Bytes upd = Rng().Data(dt, outer * n_idx * inner, 0.5, 1.5);
            auto run = [&](osp_stream *s, const Ptrs &p) {
                return RunScatter(s, p, r, dt, OSP_TYPE_INT64, outer, len,
                                  inner, n_idx);
            };
            if (IsSignedInt(dt) || r == OSP_SCATTER_MAX ||
                r == OSP_SCATTER_MIN) {
                ExpectSame(run, {data, idx, upd},
                           std::string(osp_datatype_wire_name(dt)) +
                               " reduction " + std::to_string(r));
                continue;
            }
            // Float sums and products in another order: close, not equal.
            Bytes want = data, wi = idx, wu = upd, got = data, gi = idx,
                  gu = upd;
            RunOnCpu(run, {&want, &wi, &wu});
            RunOnDevice(run, {&got, &gi, &gu});
            EXPECT_LT(RelativeError(dt, got, want, want.size() / 4), 1e-5)
                << "FP32 reduction " << r;
        }
    }
}

// Scatter skips an index out of range on the CUDA device (the CPU refuses
// the call): the other updates land.
TEST_P(CudaOps, ScatterSkipsAnIndexOutOfRange) {
    std::vector<int32_t> data = {1, 2, 3, 4};
    std::vector<int64_t> idx = {1, 9, -1};
    std::vector<int32_t> upd = {10, 20, 30};
    Bytes d((const unsigned char *)data.data(),
            (const unsigned char *)(data.data() + 4));
    Bytes i((const unsigned char *)idx.data(),
            (const unsigned char *)(idx.data() + 3));
    Bytes u((const unsigned char *)upd.data(),
            (const unsigned char *)(upd.data() + 3));
    RunOnDevice(
        [](osp_stream *s, const Ptrs &p) {
            return RunScatter(s, p, OSP_SCATTER_NONE, OSP_TYPE_INT32,
                              OSP_TYPE_INT64, 1, 4, 1, 3);
        },
        {&d, &i, &u});
    const int32_t want[] = {1, 10, 3, 30};
    EXPECT_EQ(memcmp(d.data(), want, sizeof want), 0);
}

// ---- topk -----------------------------------------------------------------

TEST_P(CudaOps, TopkMatchesTheCpuWithTiesAndNaN) {
    struct TopkCase {
        int64_t outer, n, inner, k;
    };
    const TopkCase cases[] = {
        {1, 1, 1, 1}, {2, 17, 1, 5}, {3, 9, 4, 9}, {1, 40, 3, 1}, {2, 6, 2, 0},
    };
    for (osp_datatype dt : {OSP_TYPE_FP32, OSP_TYPE_INT64}) {
        for (const TopkCase &c : cases) {
            for (bool largest : {true, false}) {
                size_t count = (size_t)(c.outer * c.n * c.inner);
                // Few distinct values, so that ties are common; NaN too.
                Bytes x(count * ByteSize(dt));
                for (size_t i = 0; i < count; i++) {
                    int64_t v = (int64_t)(Rng().Bits() % 7) - 3;
                    if (dt == OSP_TYPE_FP32) {
                        float f = Rng().Bits() % 11 == 0 ? NAN : (float)v;
                        memcpy(x.data() + 4 * i, &f, 4);
                    } else {
                        memcpy(x.data() + 8 * i, &v, 8);
                    }
                }
                size_t out_n =
                    std::max<size_t>((size_t)(c.outer * c.k * c.inner), 1);
                Bytes values(out_n * ByteSize(dt), 0x3C),
                    indices(out_n * 8, 0x3C);
                ExpectSame(
                    [&](osp_stream *s, const Ptrs &p) {
                        osp_topk_args a = {};
                        a.dtype = dt;
                        a.x = p[0];
                        a.outer = c.outer;
                        a.n = c.n;
                        a.inner = c.inner;
                        a.k = c.k;
                        a.largest = largest;
                        a.sorted = true;
                        a.values = p[1];
                        a.indices = (int64_t *)p[2];
                        return osp_op_topk(s, &a);
                    },
                    {x, values, indices},
                    std::string(osp_datatype_wire_name(dt)) + " n " +
                        std::to_string(c.n) + " k " + std::to_string(c.k) +
                        (largest ? " largest" : " smallest"));
            }
        }
    }
}

// ---- cumsum ---------------------------------------------------------------

TEST_P(CudaOps, CumsumMatchesTheCpuExactly) {
    struct CumsumCase {
        int64_t outer, n, inner;
    };
    const CumsumCase cases[] = {
        {1, 1, 1}, {1, 1000, 1}, {3, 17, 5}, {2, 0, 3},
        {4, 9, 1}, {70, 45, 1}, // contiguous lines: three tiles of lines,
                                // partial ones
    };
    for (osp_datatype dt : {OSP_TYPE_FP32, OSP_TYPE_INT32, OSP_TYPE_INT64}) {
        for (const CumsumCase &c : cases) {
            for (int flags = 0; flags < 4; flags++) {
                size_t count =
                    std::max<size_t>((size_t)(c.outer * c.n * c.inner), 1);
                // Integers over their whole range: the sums wrap.
                Bytes x = Rng().Data(dt, count, 0.01, 100.0);
                Bytes y(count * ByteSize(dt), 0x42);
                ExpectSame(
                    [&](osp_stream *s, const Ptrs &p) {
                        osp_cumsum_args a = {};
                        a.dtype = dt;
                        a.x = p[0];
                        a.y = p[1];
                        a.outer = c.outer;
                        a.n = c.n;
                        a.inner = c.inner;
                        a.exclusive = flags & 1;
                        a.reverse = flags & 2;
                        return osp_op_cumsum(s, &a);
                    },
                    {x, y},
                    std::string(osp_datatype_wire_name(dt)) + " n " +
                        std::to_string(c.n) + " flags " +
                        std::to_string(flags));
            }
        }
    }
}

// ---- bad pointers ---------------------------------------------------------

#ifdef OSPREY_TEST_FAKE_CUDA
// A host pointer where device memory belongs fails the launch (the fake
// checks every pointer a kernel gets; a GPU would fault).
TEST_P(CudaOps, HostPointersFailTheLaunch) {
    std::vector<uint32_t> host(64, 7);
    BufferPtr dev = Alloc(64 * sizeof(uint32_t));
    ASSERT_NE(dev, nullptr);
    osp_copy_strided_args c = {};
    c.elem_size = 4;
    c.rank = 1;
    c.dims[0] = 64;
    c.src_strides[0] = c.dst_strides[0] = 1;
    c.src = host.data();
    c.dst = dev->data;
    EXPECT_ERROR_CODE(osp_op_copy_strided(stream_.get(), &c),
                      OSP_ERROR_INTERNAL);
    osp_fill_args f = {};
    f.elem_size = 4;
    f.n = 64;
    f.dst = host.data();
    EXPECT_ERROR_CODE(osp_op_fill(stream_.get(), &f), OSP_ERROR_INTERNAL);
    osp_gather_args g = {};
    g.elem_size = 4;
    g.data = dev->data;
    g.outer = 1;
    g.axis_len = 64;
    g.inner = 1;
    g.index_dtype = OSP_TYPE_INT32;
    g.indices = host.data();
    g.n_indices = 8;
    g.out = dev->data;
    EXPECT_ERROR_CODE(osp_op_gather(stream_.get(), &g), OSP_ERROR_INTERNAL);
    // The stream still works.
    f.dst = dev->data;
    ASSERT_OK(osp_op_fill(stream_.get(), &f));
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
    EXPECT_EQ(host[0], 7u);
}
#endif

INSTANTIATE_TEST_SUITE_P(Devices, CudaOps,
                         ::testing::ValuesIn(DevicesUnderTest()), SpecName);

} // namespace

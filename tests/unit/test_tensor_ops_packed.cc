// Weights packed once (osp_op_conv_prepack, osp_op_gemm_prepack; the CPU
// device's cpu_packed_gemm.c): the packed GEMMs (weights on the left for
// conv, on the right for MatMul/Gemm) against a plain reference loop for
// both micro-kernels (AVX-512 where the CPU has it, and the portable
// one), at sizes that leave partial row panels and column tiles, every
// epilogue; and conv and gemm_ex through the public API with packed
// weights against the unpacked routes, threads 1 to 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "cpu_packed_gemm.h"
#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/tensor_ops.h"

namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto &x : v)
        x = dist(gen);
    return v;
}

double Act(osp_unary_op act, double x, double alpha, double beta) {
    switch (act) {
    case OSP_UNARY_RELU:
        return x < 0 ? 0 : x;
    case OSP_UNARY_CLIP:
        return std::fmin(std::fmax(x, alpha), beta);
    case OSP_UNARY_LEAKY_RELU:
        return x < 0 ? alpha * x : x;
    case OSP_UNARY_SIGMOID:
        return 1 / (1 + std::exp(-x));
    default:
        return x;
    }
}

struct Epilogue {
    bool bias, residual;
    osp_unary_op act;
    float alpha, beta;
};

const Epilogue kEpilogues[] = {
    {false, false, OSP_UNARY_IDENTITY, 0, 0},
    {true, false, OSP_UNARY_IDENTITY, 0, 0},
    {true, true, OSP_UNARY_RELU, 0, 0},
    {false, true, OSP_UNARY_CLIP, -0.25f, 0.5f},
    {true, false, OSP_UNARY_LEAKY_RELU, 0.1f, 0},
    {true, true, OSP_UNARY_SIGMOID, 0, 0},
};

// An epilogue's random bias (bias_n values) and residual (rows x ldr) and
// the cpu_packed_epilogue that reads them (each only when ep asks for it).
struct EpilogueInputs {
    std::vector<float> bias, res;
    cpu_packed_epilogue e;
    EpilogueInputs(const Epilogue &ep, int64_t bias_n, int64_t rows,
                   int64_t ldr, uint64_t seed)
        : bias(Random((size_t)bias_n, seed + 2)),
          res(Random((size_t)(rows * ldr), seed + 3)), e{ep.bias ? bias.data()
                                                                 : nullptr,
                                                         ep.residual
                                                             ? res.data()
                                                             : nullptr,
                                                         ldr,
                                                         ep.act,
                                                         ep.alpha,
                                                         ep.beta} {}
};

// Checks C element (i, j), `got`: against the dot product `dot` with the
// epilogue applied (bias_value and res_value are the element's bias and
// residual), counting a miss in bad (the first five are reported).
void ExpectElement(const Epilogue &ep, double dot, float bias_value,
                   float res_value, float got, int64_t i, int64_t j, int &bad) {
    double want = dot;
    if (ep.bias)
        want += bias_value;
    if (ep.residual)
        want += res_value;
    want = Act(ep.act, want, ep.alpha, ep.beta);
    if (!(std::fabs(got - want) <= 1e-4 + 1e-4 * std::fabs(want)) && bad++ < 5)
        ADD_FAILURE() << "c[" << i << ", " << j << "] = " << got << ", want "
                      << want;
}

// C rows [r0, r1) of a GEMM with m rows, k, n columns; C, B and the
// residual have row strides of their own, past n, so that no kernel may
// write or read outside its columns unnoticed (C's padding stays NaN).
void CheckPackedGemm(int64_t m, int64_t k, int64_t n, int64_t r0, int64_t r1,
                     const Epilogue &ep, uint64_t seed) {
    std::string what =
        "m " + std::to_string(m) + " k " + std::to_string(k) + " n " +
        std::to_string(n) + " rows [" + std::to_string(r0) + ", " +
        std::to_string(r1) + ") act " + std::to_string((int)ep.act) +
        (ep.bias ? " bias" : "") + (ep.residual ? " residual" : "");
    SCOPED_TRACE(what);
    int64_t lda = k + 3, ldb = n + 5, ldc = n + 7, ldr = n + 2;
    auto a = Random((size_t)(m * lda), seed);
    auto b = Random((size_t)(k * ldb + 1), seed + 1);
    EpilogueInputs in(ep, m, m, ldr, seed);
    const cpu_packed_epilogue &e = in.e;
    std::vector<float> packed(cpu_packed_floats(m, k), NAN);
    cpu_pack_a(a.data(), lda, m, k, packed.data());
    std::vector<float> c((size_t)(m * ldc), NAN);
    cpu_packed_gemm(packed.data(), k, r0, r1, b.data(), ldb, n, c.data(), ldc,
                    &e);
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[(size_t)(i * ldc + j)];
            if (i < r0 || i >= r1 || j >= n) {
                if (!std::isnan(got) && bad++ < 5)
                    ADD_FAILURE() << "wrote outside: row " << i << " col " << j;
                continue;
            }
            double dot = 0;
            for (int64_t p = 0; p < k; p++)
                dot +=
                    (double)a[(size_t)(i * lda + p)] * b[(size_t)(p * ldb + j)];
            ExpectElement(ep, dot, in.bias[(size_t)i],
                          in.res[(size_t)(i * ldr + j)], got, i, j, bad);
        }
    EXPECT_EQ(bad, 0);
}

class PackedGemm : public ::testing::TestWithParam<cpu_packed_kernel> {
  protected:
    void SetUp() override {
        if (GetParam() == CPU_PACKED_KERNEL_BEST &&
            !cpu_packed_gemm_has_avx512())
            GTEST_SKIP() << "this CPU has no AVX-512: the best kernel is the "
                            "portable one, tested on its own";
        cpu_packed_gemm_select(GetParam());
    }
    void TearDown() override {
        cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
    }
};

TEST_P(PackedGemm, OddSizesEdgeTilesEveryEpilogue) {
    uint64_t seed = TestSeed(777);
    // Rows: under one panel, one exactly, one and a bit, several; columns:
    // 1, under and over a 16-lane vector, one tile and a bit, several.
    const int64_t ms[] = {1, 7, 8, 9, 17, 24};
    const int64_t ns[] = {1, 15, 16, 17, 31, 32, 33, 49, 70};
    const int64_t ks[] = {0, 1, 5, 64};
    for (int64_t m : ms)
        for (int64_t n : ns)
            for (int64_t k : ks)
                for (const Epilogue &ep : kEpilogues)
                    CheckPackedGemm(m, k, n, 0, m, ep, seed++);
}

TEST_P(PackedGemm, RowRangesStartOnAPanel) {
    uint64_t seed = TestSeed(778);
    for (const Epilogue &ep : kEpilogues) {
        CheckPackedGemm(21, 13, 40, 8, 21, ep, seed++);
        CheckPackedGemm(21, 13, 40, 8, 16, ep, seed++);
        CheckPackedGemm(21, 13, 40, 16, 21, ep, seed++);
    }
}

// A k large enough that B's columns run in several blocks (the last one
// partial, ending in a partial strip).
TEST_P(PackedGemm, SeveralColumnBlocks) {
    uint64_t seed = TestSeed(783);
    for (const Epilogue &ep : kEpilogues)
        CheckPackedGemm(19, 700, 211, 0, 19, ep, seed++);
}

// B through a table of row offsets (cpu_packed_gemm_at, the direct conv
// route's GEMM): rows of B scattered over one buffer, some overlapping
// (as a conv's taps do), A packed or read as it lies, rows [r0, r1).
void CheckPackedGemmAt(int64_t m, int64_t k, int64_t n, int64_t r0, int64_t r1,
                       bool a_packed, const Epilogue &ep, uint64_t seed) {
    SCOPED_TRACE("B at offsets: m " + std::to_string(m) + " k " +
                 std::to_string(k) + " n " + std::to_string(n) + " rows [" +
                 std::to_string(r0) + ", " + std::to_string(r1) + ")" +
                 (a_packed ? " packed" : " as it lies") + " act " +
                 std::to_string((int)ep.act));
    int64_t ldc = n + 7, ldr = n + 2;
    auto a = Random((size_t)(m * k), seed);
    auto b = Random((size_t)(3 * k + n + 40), seed + 1);
    std::vector<int32_t> rows((size_t)k);
    std::mt19937_64 gen(seed + 4);
    for (auto &r : rows) // any start that leaves n floats after it
        r = (int32_t)(gen() % (uint64_t)(3 * k + 40));
    EpilogueInputs in(ep, m, m, ldr, seed);
    const cpu_packed_epilogue &e = in.e;
    std::vector<float> packed(cpu_packed_floats(m, k), NAN);
    cpu_pack_a(a.data(), k, m, k, packed.data());
    std::vector<float> c((size_t)(m * ldc), NAN);
    cpu_packed_gemm_at(a_packed ? packed.data() : a.data(), a_packed, k, r0, r1,
                       b.data(), rows.data(), n, c.data(), ldc, &e);
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[(size_t)(i * ldc + j)];
            if (i < r0 || i >= r1 || j >= n) {
                if (!std::isnan(got) && bad++ < 5)
                    ADD_FAILURE() << "wrote outside: row " << i << " col " << j;
                continue;
            }
            double dot = 0;
            for (int64_t p = 0; p < k; p++)
                dot += (double)a[(size_t)(i * k + p)] *
                       b[(size_t)(rows[(size_t)p] + j)];
            ExpectElement(ep, dot, in.bias[(size_t)i],
                          in.res[(size_t)(i * ldr + j)], got, i, j, bad);
        }
    EXPECT_EQ(bad, 0);
}

TEST_P(PackedGemm, RowOffsetsOddSizesEveryEpilogue) {
    uint64_t seed = TestSeed(784);
    // rows as they lie run 12 at a time on AVX-512 (8s where 12 would
    // leave a part-empty tile): 12, 20 = 12 + 8, 44 = 3 x 12 + 8, 64
    const int64_t ms[] = {1, 7, 9, 12, 17, 20, 44, 64};
    const int64_t ns[] = {1, 15, 16, 17, 32, 33, 61};
    const int64_t ks[] = {0, 1, 9, 40};
    for (int64_t m : ms)
        for (int64_t n : ns)
            for (int64_t k : ks)
                for (bool a_packed : {true, false})
                    for (const Epilogue &ep : kEpilogues)
                        CheckPackedGemmAt(m, k, n, 0, m, a_packed, ep, seed++);
    for (bool a_packed : {true, false})
        for (const Epilogue &ep : kEpilogues) {
            CheckPackedGemmAt(21, 13, 40, 8, 21, a_packed, ep, seed++);
            CheckPackedGemmAt(52, 13, 40, 16, 52, a_packed, ep, seed++);
        }
}

// The other way round (MatMul/Gemm weights): B packed by cpu_pack_b
// (as stored or transposed), A read in place, bias per column, strips
// [s0, s1) of C's columns.
void CheckPackedGemmB(int64_t m, int64_t k, int64_t n, bool trans_b, int64_t s0,
                      int64_t s1, const Epilogue &ep, uint64_t seed) {
    SCOPED_TRACE("B packed: m " + std::to_string(m) + " k " +
                 std::to_string(k) + " n " + std::to_string(n) +
                 (trans_b ? " trans_b" : "") + " strips [" +
                 std::to_string(s0) + ", " + std::to_string(s1) + ") act " +
                 std::to_string((int)ep.act));
    int64_t lda = k + 3, ldc = n + 7, ldr = n + 2;
    int64_t ldb = (trans_b ? k : n) + 5;
    auto a = Random((size_t)(m * lda), seed);
    auto b = Random((size_t)((trans_b ? n : k) * ldb), seed + 1);
    EpilogueInputs in(ep, n, m, ldr, seed);
    const cpu_packed_epilogue &e = in.e;
    std::vector<float> packed(cpu_packed_b_floats(k, n), NAN);
    cpu_pack_b(b.data(), ldb, trans_b, k, n, packed.data());
    std::vector<float> c((size_t)(m * ldc), NAN);
    cpu_packed_gemm_b(a.data(), lda, m, k, packed.data(), s0, s1, n, c.data(),
                      ldc, &e);
    int64_t c0 = s0 * CPU_PACK_STRIP, c1 = std::min(n, s1 * CPU_PACK_STRIP);
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[(size_t)(i * ldc + j)];
            if (j < c0 || j >= c1) {
                if (!std::isnan(got) && bad++ < 5)
                    ADD_FAILURE() << "wrote outside: row " << i << " col " << j;
                continue;
            }
            double dot = 0;
            for (int64_t p = 0; p < k; p++)
                dot += (double)a[(size_t)(i * lda + p)] *
                       (trans_b ? b[(size_t)(j * ldb + p)]
                                : b[(size_t)(p * ldb + j)]);
            ExpectElement(ep, dot, in.bias[(size_t)j],
                          in.res[(size_t)(i * ldr + j)], got, i, j, bad);
        }
    EXPECT_EQ(bad, 0);
}

TEST_P(PackedGemm, PackedBOddSizesEveryEpilogue) {
    uint64_t seed = TestSeed(781);
    const int64_t ms[] = {1, 7, 8, 9, 17};
    const int64_t ns[] = {1, 15, 16, 17, 33, 49};
    const int64_t ks[] = {0, 1, 5, 40};
    for (int64_t m : ms)
        for (int64_t n : ns)
            for (int64_t k : ks)
                for (bool trans_b : {false, true})
                    for (const Epilogue &ep : kEpilogues) {
                        int64_t strips =
                            (n + CPU_PACK_STRIP - 1) / CPU_PACK_STRIP;
                        CheckPackedGemmB(m, k, n, trans_b, 0, strips, ep,
                                         seed++);
                    }
    // a range of strips only
    for (const Epilogue &ep : kEpilogues)
        CheckPackedGemmB(10, 9, 100, false, 1, 3, ep, seed++);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, PackedGemm,
    ::testing::Values(CPU_PACKED_KERNEL_BEST, CPU_PACKED_KERNEL_PORTABLE),
    [](const auto &info) {
        return std::string(info.param == CPU_PACKED_KERNEL_BEST ? "Best"
                                                                : "Portable");
    });

// ---- conv through the public API ----------------------------------------

// osp_op_conv_prepack made under the portable kernel, which packs every
// conv whose weights fit (under AVX-512 the direct route reads them as
// they lie and gets none); `restore` is selected again after.
osp_packed_weights *PrepackAlways(osp_stream *stream, const osp_conv_args *a,
                                  cpu_packed_kernel restore) {
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_PORTABLE);
    osp_packed_weights *packed = nullptr;
    osp_error *err = osp_op_conv_prepack(stream, a, &packed);
    cpu_packed_gemm_select(restore);
    EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "");
    if (err)
        osp_error_free(err);
    return packed;
}

struct Conv {
    int64_t batch, in_ch, out_ch, group, h, w, kernel, stride, pad;
};

// y with packed weights against y without, for the same arguments, on a
// stream capped at `threads`.
void CheckPackedConv(const Conv &cv, const Epilogue &ep, int threads,
                     uint64_t seed) {
    std::string what =
        "conv " + std::to_string(cv.in_ch) + "->" + std::to_string(cv.out_ch) +
        " g" + std::to_string(cv.group) + " " + std::to_string(cv.h) + "x" +
        std::to_string(cv.w) + " k" + std::to_string(cv.kernel) + " s" +
        std::to_string(cv.stride) + " batch " + std::to_string(cv.batch) +
        " threads " + std::to_string(threads) + " act " +
        std::to_string((int)ep.act);
    SCOPED_TRACE(what);
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    ASSERT_OK(osp_stream_set_threads(stream, threads));
    int64_t oh = (cv.h + 2 * cv.pad - cv.kernel) / cv.stride + 1;
    int64_t ow = (cv.w + 2 * cv.pad - cv.kernel) / cv.stride + 1;
    auto x = Random((size_t)(cv.batch * cv.in_ch * cv.h * cv.w), seed);
    auto w = Random(
        (size_t)(cv.out_ch * cv.in_ch / cv.group * cv.kernel * cv.kernel),
        seed + 1);
    auto bias = Random((size_t)cv.out_ch, seed + 2);
    size_t y_count = (size_t)(cv.batch * cv.out_ch * oh * ow);
    auto res = Random(y_count, seed + 3);
    std::vector<float> want(y_count, NAN), got(y_count, NAN);
    osp_conv_args a = {};
    a.spatial_rank = 2;
    a.batch = cv.batch;
    a.in_channels = cv.in_ch;
    a.out_channels = cv.out_ch;
    a.group = cv.group;
    a.in_dims[0] = cv.h;
    a.in_dims[1] = cv.w;
    a.out_dims[0] = oh;
    a.out_dims[1] = ow;
    for (int d = 0; d < 2; d++) {
        a.kernel[d] = cv.kernel;
        a.stride[d] = cv.stride;
        a.pad_begin[d] = cv.pad;
        a.dilation[d] = 1;
    }
    a.x = x.data();
    a.w = w.data();
    a.bias = ep.bias ? bias.data() : nullptr;
    a.residual = ep.residual ? res.data() : nullptr;
    a.act = ep.act;
    a.act_alpha = ep.alpha;
    a.act_beta = ep.beta;
    a.y = want.data();
    ASSERT_OK(osp_op_conv(stream, &a));
    osp_packed_weights *packed =
        PrepackAlways(stream, &a, CPU_PACKED_KERNEL_BEST);
    ASSERT_NE(packed, nullptr);
    a.packed_w = packed;
    for (bool direct : {true, false}) { // im2col: the packed kernel on it
        SCOPED_TRACE(direct ? "direct route on" : "direct route off");
        cpu_conv_direct_enable(direct);
        a.y = got.data();
        ASSERT_OK(osp_op_conv(stream, &a));
        int bad = 0;
        for (size_t i = 0; i < y_count; i++)
            if (!(std::fabs(got[i] - want[i]) <=
                  1e-4 + 1e-4 * std::fabs(want[i])) &&
                bad++ < 5)
                ADD_FAILURE() << "y[" << i << "] = " << got[i] << ", unpacked "
                              << want[i];
        EXPECT_EQ(bad, 0);
    }
    cpu_conv_direct_enable(true);
    osp_packed_weights_free(osp_device_cpu(), packed);
    osp_stream_free(stream);
}

TEST(PackedConv, MatchesUnpackedOnEveryRoute) {
    uint64_t seed = TestSeed(779);
    const Conv convs[] = {
        {1, 5, 13, 1, 9, 11, 3, 1, 1},   // im2col, partial panel and tile
        {2, 8, 16, 1, 7, 7, 3, 1, 1},    // 49 columns: a 16-lane tail
        {2, 6, 10, 2, 12, 10, 3, 2, 1},  // groups, stride 2
        {1, 3, 9, 1, 23, 21, 7, 2, 3},   // a stem
        {2, 12, 20, 1, 14, 14, 1, 1, 0}, // pointwise, 196 columns
        {3, 16, 8, 4, 5, 9, 1, 1, 0},    // pointwise with groups
        {1, 24, 17, 1, 40, 36, 3, 1, 1}, // several im2col tiles
    };
    for (int threads = 1; threads <= 3; threads++)
        for (const Conv &cv : convs)
            for (const Epilogue &ep : kEpilogues)
                CheckPackedConv(cv, ep, threads, seed++);
}

// ---- the direct route (stride 1, no im2col) against a reference loop ------

struct DirectConv {
    int rank; // 1 or 2
    int64_t batch, in_ch, out_ch, group, h, w, kh, kw, dil_h, dil_w;
    int64_t pad_top, pad_left, pad_bottom, pad_right;
    int64_t stride_h = 1, stride_w = 1;
};

// y = conv(x, w) + bias + residual, activation, in double, NCHW (rank 1:
// h is 1 and only the w dimension has taps).
std::vector<double> ReferenceConv(const DirectConv &cv, int64_t oh, int64_t ow,
                                  const std::vector<float> &x,
                                  const std::vector<float> &w,
                                  const float *bias, const float *res,
                                  const Epilogue &ep) {
    int64_t cg = cv.in_ch / cv.group, mg = cv.out_ch / cv.group;
    std::vector<double> y((size_t)(cv.batch * cv.out_ch * oh * ow));
    for (int64_t b = 0; b < cv.batch; b++)
        for (int64_t oc = 0; oc < cv.out_ch; oc++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double acc = bias != nullptr ? bias[oc] : 0.0;
                    int64_t g = oc / mg;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t u = 0; u < cv.kh; u++)
                            for (int64_t v = 0; v < cv.kw; v++) {
                                int64_t ih =
                                    i * cv.stride_h + u * cv.dil_h - cv.pad_top;
                                int64_t iw = j * cv.stride_w + v * cv.dil_w -
                                             cv.pad_left;
                                if (ih < 0 || ih >= cv.h || iw < 0 ||
                                    iw >= cv.w)
                                    continue;
                                acc +=
                                    (double)
                                        w[(size_t)(((oc * cg + c) * cv.kh + u) *
                                                       cv.kw +
                                                   v)] *
                                    x[(size_t)(((b * cv.in_ch + g * cg + c) *
                                                    cv.h +
                                                ih) *
                                                   cv.w +
                                               iw)];
                            }
                    size_t at =
                        (size_t)(((b * cv.out_ch + oc) * oh + i) * ow + j);
                    if (res != nullptr)
                        acc += res[at];
                    y[at] = Act(ep.act, acc, ep.alpha, ep.beta);
                }
    return y;
}

// conv on the direct route, weights packed and as they lie, on `threads`,
// against ReferenceConv; also with the route off (im2col), which must give
// the same.
void CheckDirectConv(const DirectConv &cv, const Epilogue &ep, int threads,
                     cpu_packed_kernel kernel, uint64_t seed) {
    std::string what =
        "conv " + std::to_string(cv.in_ch) + "->" + std::to_string(cv.out_ch) +
        " g" + std::to_string(cv.group) + " " + std::to_string(cv.h) + "x" +
        std::to_string(cv.w) + " k" + std::to_string(cv.kh) + "x" +
        std::to_string(cv.kw) + " dil " + std::to_string(cv.dil_h) + "," +
        std::to_string(cv.dil_w) + " pads " + std::to_string(cv.pad_top) + "," +
        std::to_string(cv.pad_left) + "," + std::to_string(cv.pad_bottom) +
        "," + std::to_string(cv.pad_right) + " strides " +
        std::to_string(cv.stride_h) + "," + std::to_string(cv.stride_w) +
        " batch " + std::to_string(cv.batch) + " threads " +
        std::to_string(threads) + " act " + std::to_string((int)ep.act);
    SCOPED_TRACE(what);
    int64_t oh =
        (cv.h + cv.pad_top + cv.pad_bottom - (cv.kh - 1) * cv.dil_h - 1) /
            cv.stride_h +
        1;
    int64_t ow =
        (cv.w + cv.pad_left + cv.pad_right - (cv.kw - 1) * cv.dil_w - 1) /
            cv.stride_w +
        1;
    ASSERT_GT(oh, 0);
    ASSERT_GT(ow, 0);
    auto x = Random((size_t)(cv.batch * cv.in_ch * cv.h * cv.w), seed);
    auto w = Random((size_t)(cv.out_ch * cv.in_ch / cv.group * cv.kh * cv.kw),
                    seed + 1);
    auto bias = Random((size_t)cv.out_ch, seed + 2);
    size_t y_count = (size_t)(cv.batch * cv.out_ch * oh * ow);
    auto res = Random(y_count, seed + 3);
    auto want = ReferenceConv(cv, oh, ow, x, w, ep.bias ? bias.data() : nullptr,
                              ep.residual ? res.data() : nullptr, ep);
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    ASSERT_OK(osp_stream_set_threads(stream, threads));
    osp_conv_args a = {};
    a.spatial_rank = cv.rank;
    a.batch = cv.batch;
    a.in_channels = cv.in_ch;
    a.out_channels = cv.out_ch;
    a.group = cv.group;
    int d0 = cv.rank == 2 ? 1 : 0; // index of the w dimension
    if (cv.rank == 2) {
        a.in_dims[0] = cv.h;
        a.out_dims[0] = oh;
        a.kernel[0] = cv.kh;
        a.pad_begin[0] = cv.pad_top;
        a.dilation[0] = cv.dil_h;
        a.stride[0] = cv.stride_h;
    }
    a.in_dims[d0] = cv.w;
    a.out_dims[d0] = ow;
    a.kernel[d0] = cv.kw;
    a.pad_begin[d0] = cv.pad_left;
    a.dilation[d0] = cv.dil_w;
    a.stride[d0] = cv.stride_w;
    a.x = x.data();
    a.w = w.data();
    a.bias = ep.bias ? bias.data() : nullptr;
    a.residual = ep.residual ? res.data() : nullptr;
    a.act = ep.act;
    a.act_alpha = ep.alpha;
    a.act_beta = ep.beta;
    osp_packed_weights *packed = PrepackAlways(stream, &a, kernel);
    ASSERT_NE(packed, nullptr);
    for (int run = 0; run < 3; run++) { // as it lies, packed, im2col
        SCOPED_TRACE(run == 0   ? "direct, weights as they lie"
                     : run == 1 ? "direct, weights packed"
                                : "im2col");
        cpu_conv_direct_enable(run < 2);
        std::vector<float> got(y_count, NAN);
        a.packed_w = run == 1 ? packed : nullptr;
        a.y = got.data();
        ASSERT_OK(osp_op_conv(stream, &a));
        int bad = 0;
        for (size_t i = 0; i < y_count; i++)
            if (!(std::fabs(got[i] - want[i]) <=
                  1e-4 + 1e-4 * std::fabs(want[i])) &&
                bad++ < 5)
                ADD_FAILURE()
                    << "y[" << i << "] = " << got[i] << ", want " << want[i];
        EXPECT_EQ(bad, 0);
    }
    cpu_conv_direct_enable(true);
    osp_packed_weights_free(osp_device_cpu(), packed);
    osp_stream_free(stream);
}

class DirectConvRoute : public PackedGemm {};

TEST_P(DirectConvRoute, MatchesReference) {
    uint64_t seed = TestSeed(785);
    const DirectConv convs[] = {
        // ResNet's 3x3 on a narrow plane: 7 of every 9 flat columns kept
        {2, 2, 16, 24, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},
        // odd sizes: a partial row panel, a row not a strip multiple
        {2, 1, 5, 13, 1, 9, 37, 3, 3, 1, 1, 1, 1, 1, 1},
        // no padding; asymmetric padding (SAME_UPPER-like); 5x5
        {2, 1, 6, 9, 1, 8, 10, 3, 3, 1, 1, 0, 0, 0, 0},
        {2, 1, 4, 8, 1, 6, 11, 3, 3, 1, 1, 0, 0, 1, 2},
        {2, 1, 3, 10, 1, 12, 12, 5, 5, 1, 1, 2, 2, 2, 2},
        // 3x1 and 1x3 kernels, dilation, groups
        {2, 1, 4, 8, 1, 6, 5, 3, 1, 1, 1, 1, 0, 1, 0},
        {2, 1, 4, 8, 1, 6, 5, 1, 3, 1, 1, 0, 1, 0, 1},
        {2, 2, 6, 9, 1, 11, 13, 3, 3, 2, 3, 2, 3, 2, 3},
        {2, 2, 8, 12, 4, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1},
        // one-wide and one-high planes; a 1-d conv
        {2, 1, 3, 8, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1},
        {2, 1, 3, 8, 1, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1},
        {1, 2, 4, 9, 1, 1, 40, 1, 5, 1, 1, 0, 2, 0, 2},
        // several tiles of rows (their halo rows copied twice)
        {2, 1, 64, 16, 1, 40, 60, 3, 3, 1, 1, 1, 1, 1, 1},
        // 44 output channels: 12-row tiles and an 8-row one
        {2, 2, 16, 44, 1, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1},
        // stride 2: ResNet's 3x3 and 1x1 downsampling, odd input sizes, a
        // stem; stride 3 with dilation (taps in every phase); unequal
        // strides; a stride past the kernel (sub-planes no tap reads)
        {2, 2, 8, 16, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2},
        {2, 1, 8, 16, 1, 13, 11, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2},
        {2, 2, 8, 16, 1, 14, 13, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2},
        {2, 1, 3, 10, 1, 23, 21, 7, 7, 1, 1, 3, 3, 3, 3, 2, 2},
        {2, 1, 4, 9, 1, 17, 19, 3, 3, 2, 2, 2, 2, 2, 2, 3, 3},
        {2, 1, 4, 10, 2, 12, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2},
        {2, 1, 4, 9, 1, 12, 17, 2, 2, 1, 1, 0, 0, 0, 0, 3, 3},
        {1, 2, 4, 9, 1, 1, 40, 1, 5, 1, 1, 0, 2, 0, 2, 1, 2},
        // several tiles at stride 2
        {2, 1, 48, 16, 1, 80, 90, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2},
    };
    for (int threads = 1; threads <= 3; threads++)
        for (const DirectConv &cv : convs)
            for (const Epilogue &ep : kEpilogues)
                CheckDirectConv(cv, ep, threads, GetParam(), seed++);
}

// A 1-d conv whose one output row would need a tile of over 4 MiB takes
// im2col instead; still right.
TEST_P(DirectConvRoute, LongRowsFallBackToIm2col) {
    const DirectConv cv = {1, 1, 64, 8, 1, 1, 20000, 1, 3, 1, 1, 0, 1, 0, 1};
    CheckDirectConv(cv, kEpilogues[2], 1, GetParam(), TestSeed(786));
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, DirectConvRoute,
    ::testing::Values(CPU_PACKED_KERNEL_BEST, CPU_PACKED_KERNEL_PORTABLE),
    [](const auto &info) {
        return std::string(info.param == CPU_PACKED_KERNEL_BEST ? "Best"
                                                                : "Portable");
    });

TEST(PackedConv, DepthwiseAndLargeWeightsHaveNoPackedForm) {
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    std::vector<float> w(8 * 9, 0.5f);
    osp_conv_args a = {};
    a.spatial_rank = 2;
    a.batch = 1;
    a.in_channels = a.out_channels = a.group = 8;
    a.in_dims[0] = a.in_dims[1] = a.out_dims[0] = a.out_dims[1] = 6;
    a.kernel[0] = a.kernel[1] = 3;
    a.stride[0] = a.stride[1] = a.dilation[0] = a.dilation[1] = 1;
    a.pad_begin[0] = a.pad_begin[1] = 1;
    a.w = w.data();
    osp_packed_weights *packed = reinterpret_cast<osp_packed_weights *>(&a);
    ASSERT_OK(osp_op_conv_prepack(stream, &a, &packed));
    EXPECT_EQ(packed, nullptr);
    // Weights past what the packed kernel keeps in cache stay unpacked.
    std::vector<float> big(512 * 512 * 9, 0.5f);
    a.group = 1;
    a.in_channels = a.out_channels = 512;
    a.w = big.data();
    packed = reinterpret_cast<osp_packed_weights *>(&a);
    ASSERT_OK(osp_op_conv_prepack(stream, &a, &packed));
    EXPECT_EQ(packed, nullptr);
    a.w = nullptr;
    EXPECT_ERROR_CODE(osp_op_conv_prepack(stream, &a, &packed),
                      OSP_ERROR_INVALID_ARG);
    osp_stream_free(stream);
}

// Under AVX-512 the direct route reads the weights as they lie, so conv
// makes no packed copy of them (it would only take memory); pointwise
// convs still get one, and so does every conv under the portable kernel.
TEST(PackedConv, DirectRouteWeightsStayUnpacked) {
    if (!cpu_packed_gemm_has_avx512())
        GTEST_SKIP() << "this CPU has no AVX-512";
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    std::vector<float> w(16 * 8 * 9, 0.5f);
    osp_conv_args a = {};
    a.spatial_rank = 2;
    a.batch = 1;
    a.in_channels = 8;
    a.out_channels = 16;
    a.group = 1;
    a.in_dims[0] = a.in_dims[1] = a.out_dims[0] = a.out_dims[1] = 6;
    a.kernel[0] = a.kernel[1] = 3;
    a.stride[0] = a.stride[1] = a.dilation[0] = a.dilation[1] = 1;
    a.pad_begin[0] = a.pad_begin[1] = 1;
    a.w = w.data();
    osp_packed_weights *packed = reinterpret_cast<osp_packed_weights *>(&a);
    ASSERT_OK(osp_op_conv_prepack(stream, &a, &packed));
    EXPECT_EQ(packed, nullptr);
    packed = PrepackAlways(stream, &a, CPU_PACKED_KERNEL_BEST);
    EXPECT_NE(packed, nullptr);
    osp_packed_weights_free(osp_device_cpu(), packed);
    a.kernel[0] = a.kernel[1] = 1; // pointwise
    a.pad_begin[0] = a.pad_begin[1] = 0;
    packed = nullptr;
    ASSERT_OK(osp_op_conv_prepack(stream, &a, &packed));
    EXPECT_NE(packed, nullptr);
    osp_packed_weights_free(osp_device_cpu(), packed);
    osp_stream_free(stream);
}

// A packed form made for other shapes is not used: conv reads w.
TEST(PackedConv, MismatchedPackedFormIsIgnored) {
    uint64_t seed = TestSeed(780);
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    auto w_small = Random(4 * 2 * 9, seed);
    osp_conv_args small = {};
    small.spatial_rank = 2;
    small.batch = 1;
    small.in_channels = 2;
    small.out_channels = 4;
    small.group = 1;
    small.in_dims[0] = small.in_dims[1] = small.out_dims[0] =
        small.out_dims[1] = 5;
    small.kernel[0] = small.kernel[1] = 3;
    small.stride[0] = small.stride[1] = small.dilation[0] = small.dilation[1] =
        1;
    small.pad_begin[0] = small.pad_begin[1] = 1;
    small.w = w_small.data();
    osp_packed_weights *packed =
        PrepackAlways(stream, &small, CPU_PACKED_KERNEL_BEST);
    ASSERT_NE(packed, nullptr);

    osp_conv_args big = small;
    big.out_channels = 6;
    auto w = Random(6 * 2 * 9, seed + 1);
    auto x = Random(2 * 25, seed + 2);
    std::vector<float> want(6 * 25), got(6 * 25);
    big.w = w.data();
    big.x = x.data();
    big.y = want.data();
    ASSERT_OK(osp_op_conv(stream, &big));
    big.packed_w = packed;
    big.y = got.data();
    ASSERT_OK(osp_op_conv(stream, &big));
    EXPECT_EQ(want, got);
    osp_packed_weights_free(osp_device_cpu(), packed);
    osp_stream_free(stream);
}

// ---- gemm_ex through the public API ---------------------------------------

// gemm_ex with B packed against the same call without, on a stream capped
// at `threads`: batches sharing B, bias, residual, activations; calls the
// packed route does not serve (alpha, beta, trans_a, few rows) must still
// be right, read from b as it lies.
TEST(PackedGemmEx, MatchesUnpacked) {
    uint64_t seed = TestSeed(782);
    struct Case {
        int64_t batch, m, n, k;
        bool trans_a, trans_b;
        float alpha, beta;
    };
    const Case cases[] = {
        {1, 128, 128, 128, false, false, 1, 0}, // BERT's projections
        {3, 20, 70, 33, false, true, 1, 0},     // batch, Linear's B^T
        {1, 8, 10, 784, false, true, 1, 0},     // the MLP at batch 8
        {2, 5, 17, 9, false, false, 1, 0},      // fewer rows than a tile
        {1, 12, 40, 6, false, false, 0.5f, 0},  // alpha
        {1, 12, 40, 6, false, false, 1, 1},     // beta
        {1, 12, 40, 6, true, false, 1, 0},      // trans_a
    };
    for (int threads = 1; threads <= 3; threads++)
        for (const Case &cs : cases)
            for (const Epilogue &ep : kEpilogues) {
                SCOPED_TRACE("gemm_ex batch " + std::to_string(cs.batch) +
                             " m " + std::to_string(cs.m) + " n " +
                             std::to_string(cs.n) + " k " +
                             std::to_string(cs.k) + " threads " +
                             std::to_string(threads) + " act " +
                             std::to_string((int)ep.act));
                osp_stream *stream = nullptr;
                ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
                ASSERT_OK(osp_stream_set_threads(stream, threads));
                int64_t lda = cs.trans_a ? cs.m : cs.k;
                int64_t ldb = cs.trans_b ? cs.k : cs.n;
                auto a = Random((size_t)(cs.batch * cs.m * cs.k), seed++);
                auto b = Random((size_t)(cs.k * cs.n), seed++);
                auto bias = Random((size_t)cs.n, seed++);
                size_t c_count = (size_t)(cs.batch * cs.m * cs.n);
                auto res = Random(c_count, seed++);
                auto c0 = Random(c_count, seed++);
                std::vector<float> want = c0, got = c0;
                osp_gemm_ex_args x = {};
                x.gemm.trans_a = cs.trans_a;
                x.gemm.trans_b = cs.trans_b;
                x.gemm.m = cs.m;
                x.gemm.n = cs.n;
                x.gemm.k = cs.k;
                x.gemm.alpha = cs.alpha;
                x.gemm.beta = cs.beta;
                x.gemm.dtype = OSP_TYPE_FP32;
                x.gemm.a = a.data();
                x.gemm.lda = lda;
                x.gemm.b = b.data();
                x.gemm.ldb = ldb;
                x.gemm.ldc = cs.n;
                x.batch_count = cs.batch;
                x.stride_a = cs.m * cs.k;
                x.stride_b = 0;
                x.stride_c = cs.m * cs.n;
                x.bias = ep.bias ? bias.data() : nullptr;
                x.residual = ep.residual ? res.data() : nullptr;
                x.act = ep.act;
                x.act_alpha = ep.alpha;
                x.act_beta = ep.beta;
                x.gemm.c = want.data();
                ASSERT_OK(osp_op_gemm_ex(stream, &x));
                osp_packed_weights *packed = nullptr;
                ASSERT_OK(osp_op_gemm_prepack(stream, &x, &packed));
                ASSERT_NE(packed, nullptr);
                x.packed_b = packed;
                x.gemm.c = got.data();
                ASSERT_OK(osp_op_gemm_ex(stream, &x));
                osp_packed_weights_free(osp_device_cpu(), packed);
                osp_stream_free(stream);
                int bad = 0;
                for (size_t i = 0; i < c_count; i++)
                    if (!(std::fabs(got[i] - want[i]) <=
                          1e-4 + 1e-4 * std::fabs(want[i])) &&
                        bad++ < 5)
                        ADD_FAILURE() << "c[" << i << "] = " << got[i]
                                      << ", unpacked " << want[i];
                EXPECT_EQ(bad, 0);
            }
}

TEST(PackedGemmEx, PrepackChecksAndSkipsFp16) {
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    std::vector<float> b(12, 1.0f);
    osp_gemm_ex_args x = {};
    x.gemm.m = 2;
    x.gemm.n = 4;
    x.gemm.k = 3;
    x.gemm.dtype = OSP_TYPE_FP16;
    x.gemm.b = b.data();
    x.gemm.ldb = 4;
    osp_packed_weights *packed = reinterpret_cast<osp_packed_weights *>(&x);
    ASSERT_OK(osp_op_gemm_prepack(stream, &x, &packed));
    EXPECT_EQ(packed, nullptr);
    x.gemm.dtype = OSP_TYPE_FP32;
    x.gemm.ldb = 2; // shorter than a row of B
    EXPECT_ERROR_CODE(osp_op_gemm_prepack(stream, &x, &packed),
                      OSP_ERROR_INVALID_ARG);
    x.gemm.ldb = 4;
    x.gemm.b = nullptr;
    EXPECT_ERROR_CODE(osp_op_gemm_prepack(stream, &x, &packed),
                      OSP_ERROR_INVALID_ARG);
    osp_stream_free(stream);
}

} // namespace

// The matrix, convolution and pooling ops of osprey/tensor_ops.h (gemm_ex,
// conv, conv_transpose, pool) on the CPU device, against the plain
// reference loops below (double accumulation, every window position
// checked one by one), plus the dispatchers' argument checks and gemm_ex's
// fallback for devices without the slot.
//
// Data are random with a fixed seed per case (printed on failure); set
// OSPREY_TEST_SEED to vary it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_packed_gemm.h"
#include "half.h"
#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#include "osprey/tensor_ops.h"

namespace {

uint64_t BaseSeed() {
    return TestSeed(12345);
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto &x : v)
        x = dist(gen);
    return v;
}

// The reference activations, written from the header's definitions.
double RefAct(osp_unary_op act, double x, double alpha, double beta) {
    switch (act) {
    case OSP_UNARY_RELU:
        return x < 0 ? 0 : x;
    case OSP_UNARY_CLIP:
        return std::min(std::max(x, alpha), beta);
    case OSP_UNARY_LEAKY_RELU:
        return x < 0 ? alpha * x : x;
    case OSP_UNARY_SIGMOID:
        return 1 / (1 + std::exp(-x));
    case OSP_UNARY_HARD_SWISH:
        return x * std::max(0.0, std::min(1.0, x / 6 + 0.5));
    default:
        return x;
    }
}

// Each element within atol + rtol * |want|.
void ExpectNear(const std::vector<float> &got, const std::vector<double> &want,
                double atol, double rtol, const std::string &what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double g = got[i], w = want[i];
        bool ok = (std::isinf(w) && g == w) ||
                  std::fabs(g - w) <= atol + rtol * std::fabs(w);
        if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " is " << g
                          << ", want " << w;
    }
    EXPECT_EQ(bad, 0u) << what << " (seed " << BaseSeed() << ")";
}

class NnOps : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream_));
    }
    void TearDown() override {
        osp_stream_free(stream_);
    }
    osp_stream *stream_ = nullptr;
};

// ---- conv ---------------------------------------------------------------

struct ConvSpec {
    int rank;
    int64_t batch, in_channels, out_channels, group;
    std::vector<int64_t> in, kernel, stride, pad_begin, pad_end, dilation;
    bool bias = true, residual = false;
    osp_unary_op act = OSP_UNARY_IDENTITY;
    float alpha = 0, beta = 0;
    std::vector<int64_t> out = {}; // empty: from the floor formula
};

int64_t Product(const std::vector<int64_t> &v) {
    int64_t p = 1;
    for (int64_t x : v)
        p *= x;
    return p;
}

// Coordinates of flat index i in a row-major box of dims (rank <= 3).
void Unflatten(int64_t i, const std::vector<int64_t> &dims, int64_t *c) {
    for (int d = (int)dims.size() - 1; d >= 0; d--) {
        c[d] = i % dims[d];
        i /= dims[d];
    }
}

int64_t Flatten(const int64_t *c, const std::vector<int64_t> &dims) {
    int64_t i = 0;
    for (size_t d = 0; d < dims.size(); d++)
        i = i * dims[d] + c[d];
    return i;
}

void FillConvArgs(const ConvSpec &s, osp_conv_args *a) {
    *a = {};
    a->spatial_rank = s.rank;
    a->batch = s.batch;
    a->in_channels = s.in_channels;
    a->out_channels = s.out_channels;
    a->group = s.group;
    for (int d = 0; d < s.rank; d++) {
        a->in_dims[d] = s.in[d];
        a->out_dims[d] = s.out[d];
        a->kernel[d] = s.kernel[d];
        a->stride[d] = s.stride[d];
        a->pad_begin[d] = s.pad_begin[d];
        a->dilation[d] = s.dilation[d];
    }
    a->act = s.act;
    a->act_alpha = s.alpha;
    a->act_beta = s.beta;
}

// Direct convolution: every output, every input channel of its group,
// every kernel tap, bounds checked one by one.
std::vector<double> RefConv(const ConvSpec &s, const std::vector<float> &x,
                            const std::vector<float> &w,
                            const std::vector<float> &bias,
                            const std::vector<float> &res) {
    int64_t cg = s.in_channels / s.group, mg = s.out_channels / s.group;
    int64_t in_sp = Product(s.in), out_sp = Product(s.out),
            k_sp = Product(s.kernel);
    std::vector<double> y(s.batch * s.out_channels * out_sp);
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t oc = 0; oc < s.out_channels; oc++)
            for (int64_t o = 0; o < out_sp; o++) {
                int64_t oco[3], ko[3], io[3];
                Unflatten(o, s.out, oco);
                double acc = 0;
                int64_t g = oc / mg;
                for (int64_t ic = 0; ic < cg; ic++)
                    for (int64_t k = 0; k < k_sp; k++) {
                        Unflatten(k, s.kernel, ko);
                        bool inside = true;
                        for (int d = 0; d < s.rank; d++) {
                            io[d] = oco[d] * s.stride[d] - s.pad_begin[d] +
                                    ko[d] * s.dilation[d];
                            inside = inside && io[d] >= 0 && io[d] < s.in[d];
                        }
                        if (!inside)
                            continue;
                        double xv =
                            x[(b * s.in_channels + g * cg + ic) * in_sp +
                              Flatten(io, s.in)];
                        double wv = w[(oc * cg + ic) * k_sp + k];
                        acc += xv * wv;
                    }
                size_t at = (b * s.out_channels + oc) * out_sp + o;
                if (!bias.empty())
                    acc += bias[oc];
                if (!res.empty())
                    acc += res[at];
                y[at] = RefAct(s.act, acc, s.alpha, s.beta);
            }
    return y;
}

ConvSpec WithOut(ConvSpec s) {
    if (s.out.empty()) {
        s.out.resize(s.rank);
        for (int d = 0; d < s.rank; d++)
            s.out[d] = (s.in[d] + s.pad_begin[d] + s.pad_end[d] -
                        s.dilation[d] * (s.kernel[d] - 1) - 1) /
                           s.stride[d] +
                       1;
    }
    return s;
}

void RunConv(osp_stream *stream, ConvSpec spec, uint64_t seed,
             const std::string &what) {
    SCOPED_TRACE(what);
    ConvSpec s = WithOut(spec);
    int64_t cg = s.in_channels / s.group;
    auto x = RandomFloats(s.batch * s.in_channels * Product(s.in), seed);
    auto w = RandomFloats(s.out_channels * cg * Product(s.kernel), seed + 1);
    std::vector<float> bias, res;
    if (s.bias)
        bias = RandomFloats(s.out_channels, seed + 2);
    size_t y_count = s.batch * s.out_channels * Product(s.out);
    if (s.residual)
        res = RandomFloats(y_count, seed + 3);
    std::vector<float> y(y_count, NAN);
    osp_conv_args a;
    FillConvArgs(s, &a);
    a.x = x.data();
    a.w = w.data();
    a.bias = s.bias ? bias.data() : nullptr;
    a.residual = s.residual ? res.data() : nullptr;
    a.y = y.data();
    ASSERT_OK(osp_op_conv(stream, &a));
    ASSERT_OK(osp_stream_synchronize(stream));
    ExpectNear(y, RefConv(s, x, w, bias, res), 1e-4, 1e-4, what);
}

TEST_F(NnOps, Conv1d) {
    RunConv(stream_,
            {1,
             2,
             3,
             4,
             1,
             {17},
             {3},
             {2},
             {1},
             {2},
             {2},
             true,
             false,
             OSP_UNARY_RELU},
            BaseSeed(), "1d stride 2 dilation 2 asymmetric pads");
    RunConv(stream_, {1, 1, 4, 6, 2, {9}, {1}, {1}, {0}, {0}, {1}},
            BaseSeed() + 10, "1d pointwise, 2 groups");
}

TEST_F(NnOps, Conv2d) {
    RunConv(stream_,
            {2,
             1,
             8,
             16,
             1,
             {12, 10},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed(), "3x3 pad 1 bias residual relu");
    RunConv(stream_,
            {2,
             2,
             6,
             4,
             2,
             {11, 9},
             {3, 2},
             {2, 2},
             {0, 2},
             {1, 1},
             {2, 1},
             false,
             false,
             OSP_UNARY_CLIP,
             0.0f,
             0.5f},
            BaseSeed() + 10,
            "groups, stride 2, dilation, asymmetric pads, clip");
    RunConv(stream_,
            {2,
             1,
             3,
             5,
             1,
             {15, 16},
             {7, 7},
             {2, 2},
             {3, 3},
             {3, 3},
             {1, 1},
             true,
             false,
             OSP_UNARY_LEAKY_RELU,
             0.1f},
            BaseSeed() + 20, "7x7 stride 2 stem, leaky relu");
    RunConv(stream_,
            {2,
             1,
             4,
             6,
             1,
             {8, 9},
             {1, 1},
             {2, 2},
             {0, 0},
             {0, 0},
             {1, 1},
             true,
             true,
             OSP_UNARY_SIGMOID},
            BaseSeed() + 30, "1x1 stride 2 (im2col route), sigmoid");
    // Ceil-mode style: one more output than the floor formula gives.
    RunConv(stream_,
            {2,
             1,
             2,
             3,
             1,
             {7, 8},
             {3, 3},
             {2, 2},
             {0, 0},
             {0, 0},
             {1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY,
             0,
             0,
             {4, 4}},
            BaseSeed() + 40, "windows hanging past the input");
    RunConv(stream_,
            {2,
             1,
             2,
             3,
             1,
             {6, 50},
             {3, 3},
             {2, 2},
             {1, 1},
             {0, 1},
             {1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 50, "stride 2, wide rows (gathered im2col)");
}

TEST_F(NnOps, Conv2dPointwise) {
    RunConv(stream_,
            {2,
             2,
             16,
             24,
             1,
             {9, 11},
             {1, 1},
             {1, 1},
             {0, 0},
             {0, 0},
             {1, 1},
             true,
             true,
             OSP_UNARY_LEAKY_RELU,
             0.2f},
            BaseSeed(), "1x1 batch 2 bias residual leaky");
    RunConv(stream_,
            {2,
             1,
             8,
             12,
             4,
             {5, 7},
             {1, 1},
             {1, 1},
             {0, 0},
             {0, 0},
             {1, 1},
             false,
             false,
             OSP_UNARY_HARD_SWISH},
            BaseSeed() + 10, "1x1 with 4 groups, hard swish");
    // More columns than one pointwise tile.
    RunConv(stream_,
            {2,
             1,
             3,
             8,
             1,
             {128, 160},
             {1, 1},
             {1, 1},
             {0, 0},
             {0, 0},
             {1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed() + 20, "1x1 over several tiles");
}

TEST_F(NnOps, Conv2dIm2colTiles) {
    // K * N * 4 bytes well over one im2col tile.
    RunConv(stream_,
            {2,
             1,
             64,
             4,
             1,
             {70, 66},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed(), "3x3 over several tiles");
}

TEST_F(NnOps, Conv2dDepthwise) {
    RunConv(stream_,
            {2,
             2,
             6,
             6,
             6,
             {9, 19},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed(), "3x3 stride 1");
    RunConv(stream_,
            {2,
             1,
             4,
             4,
             4,
             {5, 37},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed() + 5, "3x3 stride 1, rows wide enough to run alone");
    RunConv(stream_,
            {2,
             1,
             5,
             5,
             5,
             {9, 23},
             {3, 3},
             {2, 2},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             false,
             OSP_UNARY_CLIP,
             0.0f,
             6.0f},
            BaseSeed() + 10, "3x3 stride 2, relu6");
    RunConv(stream_,
            {2,
             1,
             4,
             4,
             4,
             {10, 24},
             {3, 3},
             {2, 2},
             {0, 0},
             {1, 1},
             {1, 1},
             false,
             true,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 20, "3x3 stride 2, pads 0/1");
    RunConv(stream_,
            {2,
             1,
             3,
             3,
             3,
             {6, 13},
             {3, 3},
             {1, 1},
             {2, 2},
             {2, 0},
             {1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 30, "3x3 stride 1, pad 2");
    RunConv(stream_,
            {2,
             1,
             2,
             2,
             2,
             {4, 2},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 40, "3x3 on rows narrower than the kernel");
    RunConv(stream_,
            {2,
             2,
             4,
             8,
             4,
             {11, 12},
             {5, 3},
             {2, 1},
             {2, 1},
             {1, 2},
             {1, 2},
             true,
             true,
             OSP_UNARY_LEAKY_RELU,
             0.1f},
            BaseSeed() + 50, "multiplier 2, 5x3, stride, dilation");
    RunConv(stream_,
            {2,
             1,
             3,
             9,
             3,
             {8, 8},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             false,
             OSP_UNARY_RELU},
            BaseSeed() + 60, "3x3 multiplier 3");
    RunConv(stream_,
            {1,
             1,
             4,
             4,
             4,
             {21},
             {3},
             {2},
             {1},
             {1},
             {1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed() + 70, "1d depthwise");
    // Rows long enough for several 8-wide blocks plus a remainder.
    RunConv(stream_,
            {2,
             2,
             3,
             3,
             3,
             {7, 61},
             {3, 3},
             {2, 2},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             true,
             OSP_UNARY_CLIP,
             0.0f,
             6.0f},
            BaseSeed() + 80, "3x3 stride 2, wide rows");
    RunConv(stream_,
            {2,
             1,
             3,
             3,
             3,
             {5, 45},
             {3, 3},
             {1, 1},
             {1, 1},
             {1, 1},
             {1, 1},
             true,
             false,
             OSP_UNARY_RELU},
            BaseSeed() + 90, "3x3 stride 1, wide rows");
}

// The depthwise kernels of multiplier 1 (3x3 and 5x5 at strides 1 and 2:
// cpu_ops_depthwise.c where the CPU has AVX-512, and cpu_ops_conv.c's
// loops, forced with cpu_packed_gemm_select) against the reference: a
// 1x1 plane, rows narrower than a vector and a vector and a bit, heights
// that leave partial groups of four rows, channel counts off any vector
// width, pads of 0 to 2 on either side, every epilogue, 1 to 3 threads.
TEST_F(NnOps, DepthwiseKernelsOddSizesPaddingEpilogues) {
    struct Epi {
        bool residual;
        osp_unary_op act;
        float alpha, beta;
    };
    const Epi epis[] = {{false, OSP_UNARY_IDENTITY, 0, 0},
                        {true, OSP_UNARY_RELU, 0, 0},
                        {false, OSP_UNARY_CLIP, 0, 6},
                        {true, OSP_UNARY_CLIP, -0.3f, 0.4f},
                        {true, OSP_UNARY_LEAKY_RELU, 0.1f, 0},
                        {false, OSP_UNARY_HARD_SWISH, 0, 0}};
    const std::vector<int64_t> sizes[] = {{1, 1},  {2, 3},   {7, 7},  {9, 17},
                                          {5, 33}, {13, 40}, {11, 16}};
    const std::vector<int64_t> pads[] = {
        {1, 1, 1, 1}, {0, 0, 0, 0}, {2, 0, 1, 2}};
    const int64_t channels[] = {1, 3, 17};
    for (cpu_packed_kernel kernel :
         {CPU_PACKED_KERNEL_BEST, CPU_PACKED_KERNEL_PORTABLE}) {
        cpu_packed_gemm_select(kernel);
        uint64_t seed = BaseSeed() + 300;
        int n = 0;
        for (int64_t k : {3, 5})
            for (int64_t s : {1, 2})
                for (const auto &pad : pads)
                    for (const auto &in : sizes) {
                        // pads of up to twice the kernel's reach are
                        // allowed; leave out planes with no output
                        if (in[0] + pad[0] + pad[2] < k ||
                            in[1] + pad[1] + pad[3] < k)
                            continue;
                        const Epi &e = epis[n % 6];
                        int64_t c = channels[n % 3];
                        ASSERT_OK(osp_stream_set_threads(stream_, 1 + n % 3));
                        ConvSpec spec = {2,
                                         1 + n % 2,
                                         c,
                                         c,
                                         c,
                                         in,
                                         {k, k},
                                         {s, s},
                                         {pad[0], pad[1]},
                                         {pad[2], pad[3]},
                                         {1, 1},
                                         n % 5 != 4,
                                         e.residual,
                                         e.act,
                                         e.alpha,
                                         e.beta};
                        n++;
                        RunConv(stream_, spec, seed++,
                                std::string(kernel == CPU_PACKED_KERNEL_BEST
                                                ? "best"
                                                : "portable") +
                                    " k" + std::to_string(k) + " s" +
                                    std::to_string(s) + " " +
                                    std::to_string(in[0]) + "x" +
                                    std::to_string(in[1]) + " pads " +
                                    std::to_string(pad[0]) +
                                    std::to_string(pad[1]) +
                                    std::to_string(pad[2]) +
                                    std::to_string(pad[3]));
                    }
        // MobileNet's widest planes: several vectors and groups of rows;
        // and a row past the kernel's widest (the loops take it).
        RunConv(stream_,
                {2,
                 1,
                 2,
                 2,
                 2,
                 {23, 112},
                 {3, 3},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 true,
                 true,
                 OSP_UNARY_CLIP,
                 0.0f,
                 6.0f},
                seed++, "112 wide, stride 1");
        RunConv(stream_,
                {2,
                 1,
                 2,
                 2,
                 2,
                 {21, 113},
                 {3, 3},
                 {2, 2},
                 {0, 1},
                 {1, 1},
                 {1, 1},
                 true,
                 false,
                 OSP_UNARY_RELU},
                seed++, "113 wide, stride 2");
        RunConv(stream_,
                {2,
                 1,
                 1,
                 1,
                 1,
                 {3, 2100},
                 {3, 3},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 true,
                 false,
                 OSP_UNARY_RELU},
                seed++, "2100 wide");
    }
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
}

TEST_F(NnOps, ConvOnManyThreads) {
    // Each thread grows its own scratch, freed when the thread ends.
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
        threads.emplace_back([t] {
            osp_stream *stream = nullptr;
            ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
            RunConv(stream,
                    {2,
                     1,
                     8,
                     8,
                     1,
                     {20 + t, 18},
                     {3, 3},
                     {1, 1},
                     {1, 1},
                     {1, 1},
                     {1, 1},
                     true,
                     false,
                     OSP_UNARY_RELU},
                    BaseSeed() + t, "thread " + std::to_string(t));
            RunConv(stream,
                    {2,
                     1,
                     8,
                     8,
                     8,
                     {20, 18 + t},
                     {3, 3},
                     {1, 1},
                     {1, 1},
                     {1, 1},
                     {1, 1},
                     true,
                     false,
                     OSP_UNARY_RELU},
                    BaseSeed() + t, "depthwise thread " + std::to_string(t));
            osp_stream_free(stream);
        });
    for (auto &th : threads)
        th.join();
}

TEST_F(NnOps, Conv3d) {
    RunConv(stream_,
            {3,
             2,
             4,
             6,
             2,
             {5, 6, 7},
             {3, 2, 3},
             {1, 2, 1},
             {1, 0, 2},
             {0, 1, 1},
             {2, 1, 1},
             true,
             true,
             OSP_UNARY_RELU},
            BaseSeed(), "3d groups, strides, pads, dilation");
    RunConv(stream_,
            {3,
             1,
             3,
             3,
             3,
             {4, 5, 6},
             {3, 3, 3},
             {1, 1, 1},
             {1, 1, 1},
             {1, 1, 1},
             {1, 1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 10, "3d depthwise");
    RunConv(stream_,
            {3,
             1,
             3,
             3,
             3,
             {4, 5, 6},
             {1, 3, 3},
             {2, 1, 1},
             {0, 1, 1},
             {0, 1, 1},
             {1, 1, 1},
             true,
             false,
             OSP_UNARY_RELU},
            BaseSeed() + 20, "3d depthwise 1x3x3 (the 3x3 kernel per slice)");
    RunConv(stream_,
            {3,
             1,
             4,
             5,
             1,
             {3, 4, 5},
             {1, 1, 1},
             {1, 1, 1},
             {0, 0, 0},
             {0, 0, 0},
             {1, 1, 1},
             true,
             false,
             OSP_UNARY_IDENTITY},
            BaseSeed() + 30, "3d pointwise");
}

// ---- conv_transpose ------------------------------------------------------

struct ConvTSpec {
    int rank;
    int64_t batch, in_channels, out_channels, group;
    std::vector<int64_t> in, kernel, stride, pad_begin, pad_end, dilation,
        output_padding;
    bool bias;
};

void RunConvTranspose(osp_stream *stream, const ConvTSpec &s, uint64_t seed,
                      const std::string &what) {
    SCOPED_TRACE(what);
    std::vector<int64_t> out(s.rank);
    for (int d = 0; d < s.rank; d++)
        out[d] = (s.in[d] - 1) * s.stride[d] +
                 s.dilation[d] * (s.kernel[d] - 1) + 1 - s.pad_begin[d] -
                 s.pad_end[d] + s.output_padding[d];
    int64_t cg = s.in_channels / s.group, mg = s.out_channels / s.group;
    int64_t in_sp = Product(s.in), out_sp = Product(out),
            k_sp = Product(s.kernel);
    auto x = RandomFloats(s.batch * s.in_channels * in_sp, seed);
    auto w = RandomFloats(s.in_channels * mg * k_sp, seed + 1);
    auto bias = RandomFloats(s.out_channels, seed + 2);
    std::vector<float> y(s.batch * s.out_channels * out_sp, NAN);

    std::vector<double> want(y.size());
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t oc = 0; oc < s.out_channels; oc++)
            for (int64_t i = 0; i < out_sp; i++)
                want[(b * s.out_channels + oc) * out_sp + i] =
                    s.bias ? bias[oc] : 0.0;
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t ic = 0; ic < s.in_channels; ic++)
            for (int64_t i = 0; i < in_sp; i++)
                for (int64_t m = 0; m < mg; m++)
                    for (int64_t k = 0; k < k_sp; k++) {
                        int64_t io[3], ko[3], oo[3];
                        Unflatten(i, s.in, io);
                        Unflatten(k, s.kernel, ko);
                        bool inside = true;
                        for (int d = 0; d < s.rank; d++) {
                            oo[d] = io[d] * s.stride[d] - s.pad_begin[d] +
                                    ko[d] * s.dilation[d];
                            inside = inside && oo[d] >= 0 && oo[d] < out[d];
                        }
                        if (!inside)
                            continue;
                        int64_t oc = (ic / cg) * mg + m;
                        want[(b * s.out_channels + oc) * out_sp +
                             Flatten(oo, out)] +=
                            (double)x[(b * s.in_channels + ic) * in_sp + i] *
                            w[(ic * mg + m) * k_sp + k];
                    }

    osp_conv_transpose_args a = {};
    a.spatial_rank = s.rank;
    a.batch = s.batch;
    a.in_channels = s.in_channels;
    a.out_channels = s.out_channels;
    a.group = s.group;
    for (int d = 0; d < s.rank; d++) {
        a.in_dims[d] = s.in[d];
        a.out_dims[d] = out[d];
        a.kernel[d] = s.kernel[d];
        a.stride[d] = s.stride[d];
        a.pad_begin[d] = s.pad_begin[d];
        a.dilation[d] = s.dilation[d];
    }
    a.x = x.data();
    a.w = w.data();
    a.bias = s.bias ? bias.data() : nullptr;
    a.y = y.data();
    ASSERT_OK(osp_op_conv_transpose(stream, &a));
    ExpectNear(y, want, 1e-4, 1e-4, what);
}

TEST_F(NnOps, ConvTranspose) {
    RunConvTranspose(stream_,
                     {1, 2, 3, 4, 1, {7}, {3}, {2}, {1}, {1}, {1}, {1}, true},
                     BaseSeed(), "1d stride 2 pad 1 output_padding 1");
    RunConvTranspose(stream_,
                     {2,
                      2,
                      4,
                      6,
                      2,
                      {5, 6},
                      {3, 2},
                      {2, 3},
                      {1, 0},
                      {0, 1},
                      {1, 2},
                      {1, 0},
                      true},
                     BaseSeed() + 10,
                     "2d groups, strides, pads, dilation, output_padding");
    RunConvTranspose(stream_,
                     {2,
                      1,
                      8,
                      4,
                      1,
                      {6, 6},
                      {2, 2},
                      {2, 2},
                      {0, 0},
                      {0, 0},
                      {1, 1},
                      {0, 0},
                      false},
                     BaseSeed() + 20, "2x2 stride 2 upsampling, no bias");
    RunConvTranspose(stream_,
                     {3,
                      1,
                      2,
                      3,
                      1,
                      {3, 4, 3},
                      {2, 3, 2},
                      {2, 1, 2},
                      {1, 1, 0},
                      {0, 1, 1},
                      {1, 1, 2},
                      {0, 0, 1},
                      true},
                     BaseSeed() + 30, "3d");
    // Columns over several col2im tiles.
    RunConvTranspose(stream_,
                     {2,
                      1,
                      2,
                      64,
                      1,
                      {48, 50},
                      {3, 3},
                      {1, 1},
                      {1, 1},
                      {1, 1},
                      {1, 1},
                      {0, 0},
                      true},
                     BaseSeed() + 40, "several tiles");
}

// ---- pool ----------------------------------------------------------------

struct PoolSpec {
    osp_pool_kind kind;
    int rank;
    int64_t planes;
    std::vector<int64_t> in, kernel, stride, pad_begin, pad_end, dilation;
    bool ceil = false, count_include_pad = false;
    float p = 2.0f;
    bool indices = false;
};

// The ONNX output size, floor or ceil.
std::vector<int64_t> PoolOut(const PoolSpec &s) {
    std::vector<int64_t> out(s.rank);
    for (int d = 0; d < s.rank; d++) {
        int64_t span = s.in[d] + s.pad_begin[d] + s.pad_end[d] -
                       s.dilation[d] * (s.kernel[d] - 1) - 1;
        out[d] = (s.ceil ? (span + s.stride[d] - 1) / s.stride[d]
                         : span / s.stride[d]) +
                 1;
    }
    return out;
}

void RunPool(osp_stream *stream, const PoolSpec &s, uint64_t seed,
             const std::string &what) {
    SCOPED_TRACE(what);
    std::vector<int64_t> out = PoolOut(s);
    int64_t in_sp = Product(s.in), out_sp = Product(out),
            k_sp = Product(s.kernel);
    auto x = RandomFloats(s.planes * in_sp, seed);
    std::vector<float> y(s.planes * out_sp, NAN);
    std::vector<int64_t> idx(s.indices ? y.size() : 0, -7);

    std::vector<double> want(y.size());
    std::vector<int64_t> want_idx(y.size());
    for (int64_t pl = 0; pl < s.planes; pl++)
        for (int64_t o = 0; o < out_sp; o++) {
            int64_t oo[3], ko[3], io[3];
            Unflatten(o, out, oo);
            double best = -INFINITY, sum = 0;
            int64_t best_at = -1, real = 0, padded = 1;
            for (int d = 0; d < s.rank; d++) {
                // positions inside [-pad_begin, in + pad_end), pad_end
                // the least out implies (tensor_ops.h, cpu_ops_pool.c)
                int64_t pad_end =
                    std::max<int64_t>(0, (out[d] - 1) * s.stride[d] +
                                             (s.kernel[d] - 1) * s.dilation[d] +
                                             1 - s.in[d] - s.pad_begin[d]);
                int64_t n = 0;
                for (int64_t j = 0; j < s.kernel[d]; j++) {
                    int64_t at = oo[d] * s.stride[d] - s.pad_begin[d] +
                                 j * s.dilation[d];
                    n += at >= -s.pad_begin[d] && at < s.in[d] + pad_end;
                }
                padded *= n;
            }
            for (int64_t k = 0; k < k_sp; k++) {
                Unflatten(k, s.kernel, ko);
                bool inside = true;
                for (int d = 0; d < s.rank; d++) {
                    io[d] = oo[d] * s.stride[d] - s.pad_begin[d] +
                            ko[d] * s.dilation[d];
                    inside = inside && io[d] >= 0 && io[d] < s.in[d];
                }
                if (!inside)
                    continue;
                int64_t at = pl * in_sp + Flatten(io, s.in);
                double v = x[at];
                real++;
                if (v > best) {
                    best = v;
                    best_at = at;
                }
                sum += s.kind == OSP_POOL_LP ? std::pow(std::fabs(v), s.p) : v;
            }
            size_t at = pl * out_sp + o;
            int64_t divisor = s.count_include_pad ? padded : real;
            want[at] = s.kind == OSP_POOL_MAX ? best
                       : s.kind == OSP_POOL_AVG
                           ? (divisor > 0 ? sum / divisor : 0.0)
                           : std::pow(sum, 1.0 / s.p);
            want_idx[at] = best_at;
        }

    osp_pool_args a = {};
    a.kind = s.kind;
    a.spatial_rank = s.rank;
    a.planes = s.planes;
    for (int d = 0; d < s.rank; d++) {
        a.in_dims[d] = s.in[d];
        a.out_dims[d] = out[d];
        a.kernel[d] = s.kernel[d];
        a.stride[d] = s.stride[d];
        a.pad_begin[d] = s.pad_begin[d];
        a.dilation[d] = s.dilation[d];
    }
    a.count_include_pad = s.count_include_pad;
    a.p = s.p;
    a.x = x.data();
    a.y = y.data();
    a.indices = s.indices ? idx.data() : nullptr;
    ASSERT_OK(osp_op_pool(stream, &a));
    ExpectNear(y, want, 1e-5, 1e-5, what);
    if (s.indices) {
        EXPECT_EQ(idx, want_idx) << what;
    }
}

TEST_F(NnOps, PoolMax) {
    RunPool(
        stream_,
        {OSP_POOL_MAX, 2, 3, {13, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
        BaseSeed(), "3x3 stride 2 pad 1");
    RunPool(
        stream_,
        {OSP_POOL_MAX, 2, 2, {12, 17}, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
        BaseSeed() + 10, "2x2 stride 2");
    RunPool(
        stream_,
        {OSP_POOL_MAX, 2, 2, {9, 75}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
        BaseSeed() + 15, "3x3 stride 2, wide rows");
    RunPool(stream_, {OSP_POOL_MAX, 1, 2, {700}, {3}, {2}, {1}, {1}, {1}},
            BaseSeed() + 16, "1d stride 2, rows over several chunks");
    RunPool(stream_, {OSP_POOL_MAX, 1, 2, {100}, {4}, {3}, {1}, {1}, {1}},
            BaseSeed() + 17, "1d stride 3");
    RunPool(stream_,
            {OSP_POOL_MAX,
             2,
             2,
             {10, 9},
             {3, 2},
             {1, 3},
             {1, 0},
             {2, 1},
             {2, 2},
             true},
            BaseSeed() + 20, "dilation, asymmetric pads, ceil");
    RunPool(stream_, {OSP_POOL_MAX, 1, 4, {19}, {4}, {3}, {2}, {1}, {1}, true},
            BaseSeed() + 30, "1d ceil");
    RunPool(stream_,
            {OSP_POOL_MAX,
             3,
             2,
             {5, 6, 7},
             {2, 3, 2},
             {2, 1, 2},
             {0, 1, 1},
             {1, 1, 0},
             {1, 1, 2}},
            BaseSeed() + 40, "3d");
    RunPool(
        stream_,
        {OSP_POOL_MAX, 2, 3, {7, 7}, {7, 7}, {1, 1}, {0, 0}, {0, 0}, {1, 1}},
        BaseSeed() + 50, "global");
}

TEST_F(NnOps, PoolMaxIndices) {
    RunPool(stream_,
            {OSP_POOL_MAX,
             2,
             3,
             {10, 9},
             {3, 2},
             {1, 3},
             {1, 0},
             {2, 1},
             {2, 2},
             true,
             false,
             2.0f,
             true},
            BaseSeed(), "2d, dilation, pads, ceil");
    RunPool(stream_,
            {OSP_POOL_MAX,
             3,
             2,
             {4, 5, 6},
             {2, 2, 3},
             {2, 2, 2},
             {0, 1, 1},
             {1, 1, 1},
             {1, 1, 1},
             false,
             false,
             2.0f,
             true},
            BaseSeed() + 10, "3d");
    RunPool(stream_,
            {OSP_POOL_MAX,
             1,
             2,
             {9},
             {3},
             {2},
             {1},
             {1},
             {1},
             false,
             false,
             2.0f,
             true},
            BaseSeed() + 20, "1d");
}

TEST_F(NnOps, PoolAvg) {
    for (bool include : {false, true}) {
        std::string tag = include ? " (count_include_pad)" : "";
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 3,
                 {9, 10},
                 {3, 3},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 false,
                 include},
                BaseSeed(), "3x3 stride 1 pad 1" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 2,
                 {11, 12},
                 {3, 2},
                 {2, 2},
                 {1, 0},
                 {2, 1},
                 {1, 2},
                 false,
                 include},
                BaseSeed() + 10, "stride 2, asymmetric pads, dilation" + tag);
        RunPool(
            stream_,
            {OSP_POOL_AVG, 1, 2, {10}, {3}, {2}, {1}, {1}, {1}, true, include},
            BaseSeed() + 20, "1d ceil" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 2,
                 {8, 7},
                 {3, 3},
                 {2, 2},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 true,
                 include},
                BaseSeed() + 30, "2d ceil" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 3,
                 2,
                 {5, 4, 6},
                 {3, 2, 3},
                 {2, 1, 2},
                 {1, 0, 1},
                 {1, 1, 0},
                 {1, 1, 1},
                 false,
                 include},
                BaseSeed() + 40, "3d" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 4,
                 {7, 7},
                 {7, 7},
                 {1, 1},
                 {0, 0},
                 {0, 0},
                 {1, 1},
                 false,
                 include},
                BaseSeed() + 50, "global" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 2,
                 {6, 9},
                 {3, 5},
                 {1, 2},
                 {1, 2},
                 {1, 2},
                 {1, 1},
                 false,
                 include},
                BaseSeed() + 60, "kernel wider than the output row" + tag);
        RunPool(stream_,
                {OSP_POOL_AVG,
                 2,
                 2,
                 {5, 90},
                 {2, 3},
                 {2, 2},
                 {0, 1},
                 {1, 1},
                 {1, 1},
                 true,
                 include},
                BaseSeed() + 70, "stride 2, wide rows, ceil" + tag);
    }
}

TEST_F(NnOps, PoolAvgCeilDivisor) {
    // in 5, kernel 2, stride 2, no pads, ceil: windows [0,2) [2,4) [4,6).
    // The last covers one real element; with count_include_pad it counts
    // the position past the input too (the padded input ends where
    // out_dims imply: osp_pool_args has no pad_end).
    float x[5] = {1, 2, 3, 4, 10};
    for (bool include : {false, true}) {
        float y[3] = {0, 0, 0};
        osp_pool_args a = {};
        a.kind = OSP_POOL_AVG;
        a.spatial_rank = 1;
        a.planes = 1;
        a.in_dims[0] = 5;
        a.out_dims[0] = 3;
        a.kernel[0] = 2;
        a.stride[0] = 2;
        a.dilation[0] = 1;
        a.count_include_pad = include;
        a.x = x;
        a.y = y;
        ASSERT_OK(osp_op_pool(stream_, &a));
        EXPECT_FLOAT_EQ(y[0], 1.5f);
        EXPECT_FLOAT_EQ(y[1], 3.5f);
        EXPECT_FLOAT_EQ(y[2], include ? 5.0f : 10.0f);
    }
}

TEST_F(NnOps, PoolLp) {
    for (float p : {1.0f, 2.0f, 3.0f}) {
        std::string tag = " p=" + std::to_string(p);
        RunPool(stream_,
                {OSP_POOL_LP,
                 2,
                 2,
                 {9, 8},
                 {3, 3},
                 {2, 1},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 false,
                 false,
                 p},
                BaseSeed(), "2d" + tag);
        RunPool(
            stream_,
            {OSP_POOL_LP, 1, 3, {12}, {4}, {3}, {1}, {2}, {1}, true, false, p},
            BaseSeed() + 10, "1d ceil" + tag);
        RunPool(stream_,
                {OSP_POOL_LP,
                 2,
                 2,
                 {5, 5},
                 {5, 5},
                 {1, 1},
                 {0, 0},
                 {0, 0},
                 {1, 1},
                 false,
                 false,
                 p},
                BaseSeed() + 20, "global" + tag);
    }
}

TEST_F(NnOps, PoolWindowOnlyPadding) {
    // in 4, kernel 2, stride 3, out 3: the third window [6, 8) holds no
    // element: MAX gives -inf (index -1), AVG 0.
    float x[4] = {1, 5, 2, 3};
    float y[3];
    int64_t idx[3];
    osp_pool_args a = {};
    a.kind = OSP_POOL_MAX;
    a.spatial_rank = 1;
    a.planes = 1;
    a.in_dims[0] = 4;
    a.out_dims[0] = 3;
    a.kernel[0] = 2;
    a.stride[0] = 3;
    a.dilation[0] = 1;
    a.x = x;
    a.y = y;
    ASSERT_OK(osp_op_pool(stream_, &a));
    EXPECT_EQ(y[0], 5.0f);
    EXPECT_EQ(y[1], 3.0f);
    EXPECT_EQ(y[2], -INFINITY);
    a.indices = idx;
    ASSERT_OK(osp_op_pool(stream_, &a));
    EXPECT_EQ(idx[0], 1);
    EXPECT_EQ(idx[1], 3);
    EXPECT_EQ(idx[2], -1);
    a.indices = nullptr;
    a.kind = OSP_POOL_AVG;
    ASSERT_OK(osp_op_pool(stream_, &a));
    EXPECT_FLOAT_EQ(y[0], 3.0f);
    EXPECT_FLOAT_EQ(y[1], 3.0f);
    EXPECT_EQ(y[2], 0.0f);
}

// ---- gemm_ex -------------------------------------------------------------

struct GemmSpec {
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    int64_t pad_a = 1, pad_b = 2, pad_c = 3; // extra elements per row
    bool broadcast_b = false;
    bool bias = false, residual = false;
    osp_unary_op act = OSP_UNARY_IDENTITY;
    float alpha = 1.0f, beta = 0.0f;
    float act_alpha = 0.0f, act_beta = 0.0f;
};

// Operands of a gemm_ex test in FP32, laid out as the spec says.
struct GemmData {
    osp_gemm_ex_args args;
    std::vector<float> a, b, c, bias, residual;
    int64_t a_rows, a_cols, b_rows, b_cols;
};

GemmData MakeGemm(const GemmSpec &s, uint64_t seed) {
    GemmData d;
    d.a_rows = s.trans_a ? s.k : s.m;
    d.a_cols = s.trans_a ? s.m : s.k;
    d.b_rows = s.trans_b ? s.n : s.k;
    d.b_cols = s.trans_b ? s.k : s.n;
    int64_t lda = d.a_cols + s.pad_a, ldb = d.b_cols + s.pad_b,
            ldc = s.n + s.pad_c;
    int64_t batch = std::max<int64_t>(s.batch, 1);
    int64_t stride_a = d.a_rows * lda + 5, stride_b = d.b_rows * ldb + 7,
            stride_c = s.m * ldc + 2;
    d.a = RandomFloats(batch * stride_a, seed);
    d.b = RandomFloats((s.broadcast_b ? 1 : batch) * stride_b, seed + 1);
    d.c = RandomFloats(batch * stride_c, seed + 2);
    if (s.bias)
        d.bias = RandomFloats(s.n, seed + 3);
    if (s.residual)
        d.residual = RandomFloats(batch * stride_c, seed + 4);
    osp_gemm_ex_args &x = d.args;
    x = {};
    x.gemm.trans_a = s.trans_a;
    x.gemm.trans_b = s.trans_b;
    x.gemm.m = s.m;
    x.gemm.n = s.n;
    x.gemm.k = s.k;
    x.gemm.alpha = s.alpha;
    x.gemm.beta = s.beta;
    x.gemm.dtype = OSP_TYPE_FP32;
    x.gemm.lda = lda;
    x.gemm.ldb = ldb;
    x.gemm.ldc = ldc;
    x.batch_count = s.batch;
    x.stride_a = stride_a;
    x.stride_b = s.broadcast_b ? 0 : stride_b;
    x.stride_c = stride_c;
    x.act = s.act;
    x.act_alpha = s.act_alpha;
    x.act_beta = s.act_beta;
    return d;
}

void PointAt(GemmData &d) {
    d.args.gemm.a = d.a.data();
    d.args.gemm.b = d.b.data();
    d.args.gemm.c = d.c.data();
    d.args.bias = d.bias.empty() ? nullptr : d.bias.data();
    d.args.residual = d.residual.empty() ? nullptr : d.residual.data();
}

// C after the op, as the reference computes it: every element of the
// buffer (the gaps between rows and batches must keep their values).
std::vector<double> RefGemm(const GemmData &d) {
    const osp_gemm_ex_args &x = d.args;
    const osp_gemm_args &g = x.gemm;
    std::vector<double> c(d.c.begin(), d.c.end());
    int64_t batch = std::max<int64_t>(x.batch_count, 1);
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < g.m; i++)
            for (int64_t j = 0; j < g.n; j++) {
                double acc = 0;
                for (int64_t l = 0; l < g.k; l++) {
                    double av =
                        d.a[bi * x.stride_a +
                            (g.trans_a ? l * g.lda + i : i * g.lda + l)];
                    double bv =
                        d.b[bi * x.stride_b +
                            (g.trans_b ? j * g.ldb + l : l * g.ldb + j)];
                    acc += av * bv;
                }
                size_t at = bi * x.stride_c + i * g.ldc + j;
                double v = g.alpha * acc + g.beta * d.c[at];
                if (!d.bias.empty())
                    v += d.bias[j];
                if (!d.residual.empty())
                    v += d.residual[at];
                c[at] = RefAct(x.act, v, x.act_alpha, x.act_beta);
            }
    return c;
}

void RunGemm(osp_stream *stream, const GemmSpec &s, uint64_t seed,
             const std::string &what) {
    SCOPED_TRACE(what);
    GemmData d = MakeGemm(s, seed);
    PointAt(d);
    std::vector<double> want = RefGemm(d);
    ASSERT_OK(osp_op_gemm_ex(stream, &d.args));
    ExpectNear(d.c, want, 1e-5, 1e-5, what);
}

TEST_F(NnOps, GemmExTransposes) {
    for (int t = 0; t < 4; t++) {
        GemmSpec s = {(t & 1) != 0, (t & 2) != 0, 5, 7, 4, 3};
        s.alpha = 1.5f;
        s.beta = 0.5f;
        s.bias = s.residual = true;
        s.act = OSP_UNARY_LEAKY_RELU;
        s.act_alpha = 0.1f;
        RunGemm(stream_, s, BaseSeed() + t,
                "trans_a " + std::to_string(t & 1) + " trans_b " +
                    std::to_string(t >> 1));
    }
}

TEST_F(NnOps, GemmExEpilogues) {
    GemmSpec s = {false, false, 6, 33, 9, 2};
    RunGemm(stream_, s, BaseSeed(), "no epilogue");
    s.bias = true;
    RunGemm(stream_, s, BaseSeed() + 1, "bias");
    s.bias = false;
    s.residual = true;
    RunGemm(stream_, s, BaseSeed() + 2, "residual");
    s.residual = false;
    s.act = OSP_UNARY_RELU;
    RunGemm(stream_, s, BaseSeed() + 3, "relu");
    s.bias = s.residual = true;
    s.act = OSP_UNARY_CLIP;
    s.act_alpha = -0.5f;
    s.act_beta = 0.5f;
    RunGemm(stream_, s, BaseSeed() + 4, "bias residual clip");
    s.act = OSP_UNARY_SIGMOID;
    RunGemm(stream_, s, BaseSeed() + 5, "bias residual sigmoid");
}

TEST_F(NnOps, GemmExBatches) {
    GemmSpec s = {false, true, 4, 5, 6, 4};
    s.broadcast_b = true;
    s.bias = true;
    RunGemm(stream_, s, BaseSeed(), "stride_b 0 broadcasts B");
    GemmSpec one = {true, false, 3, 4, 5, 0};
    one.residual = true;
    RunGemm(stream_, one, BaseSeed() + 1, "batch_count 0 is one");
    GemmSpec empty_k = {false, false, 3, 4, 0, 2};
    empty_k.beta = 0.5f;
    empty_k.bias = true;
    empty_k.act = OSP_UNARY_RELU;
    RunGemm(stream_, empty_k, BaseSeed() + 3, "k == 0");
    GemmSpec wide = {false, false, 3, 2500, 7, 2};
    wide.bias = wide.residual = true;
    wide.act = OSP_UNARY_RELU;
    RunGemm(stream_, wide, BaseSeed() + 2, "rows over several chunks");
}

// A few rows of A against B^T (an MLP's or a classifier's Gemm at a small
// batch) take the CPU's own kernels rather than OpenBLAS's: every row
// count up to 16 and past it, row blocks with and without a tail, k with
// and without a remainder of 16, alpha and beta.
TEST_F(NnOps, GemmExFewRowsOfA) {
    int seed = 0;
    for (int64_t m : {1, 2, 3, 7, 8, 9, 13, 16, 17})
        for (int64_t n : {1, 5, 8, 13, 67})
            for (int64_t k : {16, 37, 300}) {
                GemmSpec s = {false, true, m, n, k, 1};
                s.alpha = 0.75f;
                s.beta = (seed & 1) != 0 ? 0.5f : 0.0f;
                s.bias = (seed & 2) != 0;
                RunGemm(stream_, s, BaseSeed() + seed++,
                        "m " + std::to_string(m) + " n " + std::to_string(n) +
                            " k " + std::to_string(k));
            }
}

// FP16 operands (rounded first, so the FP32 reference sees the same
// values), a broadcast B and the whole epilogue.
void RunGemmFp16(osp_stream *stream, int64_t k) {
    GemmSpec s = {false, true, 5, 6, k, 3};
    s.broadcast_b = true;
    s.bias = s.residual = true;
    s.beta = 0.5f;
    s.act = OSP_UNARY_RELU;
    GemmData d = MakeGemm(s, BaseSeed());
    // Round every operand to FP16 first so the reference sees the same.
    auto to_half = [](std::vector<float> &v) {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); i++) {
            h[i] = fp32_to_fp16(v[i]);
            v[i] = fp16_to_fp32(h[i]);
        }
        return h;
    };
    std::vector<uint16_t> a16 = to_half(d.a), b16 = to_half(d.b),
                          c16 = to_half(d.c);
    PointAt(d);
    std::vector<double> want = RefGemm(d);
    d.args.gemm.dtype = OSP_TYPE_FP16;
    d.args.gemm.a = a16.data();
    d.args.gemm.b = b16.data();
    d.args.gemm.c = c16.data();
    ASSERT_OK(osp_op_gemm_ex(stream, &d.args));
    std::vector<float> got(c16.size());
    for (size_t i = 0; i < got.size(); i++)
        got[i] = fp16_to_fp32(c16[i]);
    ExpectNear(got, want, 1e-3, 1e-3, "fp16");
}

TEST_F(NnOps, GemmExFp16) {
    for (int64_t k : {7, 0}) {
        SCOPED_TRACE("k " + std::to_string(k));
        RunGemmFp16(stream_, k);
    }
}

// FP16 operands into an FP32 C (c_dtype): the reference's FP32 sums of
// the same FP16 values, never rounded to FP16, beta reading C as FP32.
TEST_F(NnOps, GemmExFp16OperandsFp32C) {
    for (int64_t k : {7, 0}) {
        SCOPED_TRACE("k " + std::to_string(k));
        GemmSpec s = {true, true, 5, 6, k, 3};
        s.bias = s.residual = true;
        s.beta = 0.5f;
        s.act = OSP_UNARY_SIGMOID;
        GemmData d = MakeGemm(s, BaseSeed());
        auto to_half = [](std::vector<float> &v) {
            std::vector<uint16_t> h(v.size());
            for (size_t i = 0; i < v.size(); i++) {
                h[i] = fp32_to_fp16(v[i]);
                v[i] = fp16_to_fp32(h[i]);
            }
            return h;
        };
        std::vector<uint16_t> a16 = to_half(d.a), b16 = to_half(d.b);
        PointAt(d);
        std::vector<double> want = RefGemm(d);
        d.args.gemm.dtype = OSP_TYPE_FP16;
        d.args.gemm.c_dtype = OSP_TYPE_FP32;
        d.args.gemm.a = a16.data();
        d.args.gemm.b = b16.data();
        ASSERT_OK(osp_op_gemm_ex(stream_, &d.args));
        ExpectNear(d.c, want, 1e-5, 1e-5, "fp16 into fp32");
    }
}

// A device that is the CPU device but for the slots a test takes away.
class FakeDevice {
  public:
    FakeDevice() {
        ops_ = *osp_device_cpu()->ops;
        device_.ops = &ops_;
        device_.info = osp_device_cpu()->info;
        snprintf(device_.info.name, sizeof device_.info.name, "fake");
    }
    osp_device_ops &ops() {
        return ops_;
    }
    osp_device *device() {
        return &device_;
    }

  private:
    osp_device_ops ops_;
    osp_device device_ = {};
};

TEST_F(NnOps, GemmExFallbackMatchesDevice) {
    FakeDevice fake;
    fake.ops().gemm_ex = nullptr;
    EXPECT_TRUE(osp_device_supports_op(fake.device(), OSP_OP_GEMM_EX));
    osp_stream *fs = nullptr;
    ASSERT_OK(osp_stream_new(fake.device(), &fs));
    struct Case {
        GemmSpec spec;
        const char *what;
    };
    std::vector<Case> cases;
    GemmSpec s = {false, true, 4, 6, 5, 3};
    s.beta = 0.25f;
    cases.push_back({s, "no epilogue"});
    s.bias = true;
    cases.push_back({s, "bias, C with gaps"});
    s.bias = false;
    s.residual = true;
    cases.push_back({s, "residual, C with gaps"});
    s.residual = false;
    s.act = OSP_UNARY_RELU;
    cases.push_back({s, "act only, C with gaps"});
    s.bias = s.residual = true;
    s.act = OSP_UNARY_LEAKY_RELU;
    s.act_alpha = 0.3f;
    cases.push_back({s, "bias residual act, C with gaps"});
    s.broadcast_b = true;
    cases.push_back({s, "broadcast B"});
    GemmSpec packed = {true, false, 4, 6, 5, 3, 0, 0, 0};
    cases.push_back({packed, "packed, no epilogue"});
    packed.act = OSP_UNARY_CLIP;
    packed.act_alpha = -0.2f;
    packed.act_beta = 0.4f;
    cases.push_back({packed, "packed, act only"});
    packed.bias = true;
    cases.push_back({packed, "packed, bias act"});
    packed.residual = true;
    cases.push_back({packed, "packed, bias residual act"});
    packed.bias = false;
    cases.push_back({packed, "packed, residual act"});

    for (size_t i = 0; i < cases.size(); i++) {
        SCOPED_TRACE(cases[i].what);
        GemmData on_cpu = MakeGemm(cases[i].spec, BaseSeed() + i);
        GemmData on_fake = on_cpu;
        // MakeGemm's stride_c leaves gaps between batches; packed cases
        // close them.
        if (cases[i].spec.pad_c == 0) {
            for (GemmData *d : {&on_cpu, &on_fake})
                d->args.stride_c = d->args.gemm.m * d->args.gemm.ldc;
        }
        PointAt(on_cpu);
        PointAt(on_fake);
        ASSERT_OK(osp_op_gemm_ex(stream_, &on_cpu.args));
        ASSERT_OK(osp_op_gemm_ex(fs, &on_fake.args));
        ASSERT_OK(osp_stream_synchronize(fs));
        std::vector<double> want(on_cpu.c.begin(), on_cpu.c.end());
        ExpectNear(on_fake.c, want, 1e-6, 1e-6, cases[i].what);
    }

    // FP16 without an epilogue falls back; with one it cannot.
    GemmSpec h = {false, false, 3, 4, 5, 2};
    GemmData d = MakeGemm(h, BaseSeed());
    std::vector<uint16_t> a16(d.a.size()), b16(d.b.size()), c16(d.c.size()),
        ref16;
    for (size_t i = 0; i < d.a.size(); i++)
        a16[i] = fp32_to_fp16(d.a[i]);
    for (size_t i = 0; i < d.b.size(); i++)
        b16[i] = fp32_to_fp16(d.b[i]);
    for (size_t i = 0; i < d.c.size(); i++)
        c16[i] = fp32_to_fp16(d.c[i]);
    ref16 = c16;
    d.args.gemm.dtype = OSP_TYPE_FP16;
    d.args.gemm.a = a16.data();
    d.args.gemm.b = b16.data();
    d.args.gemm.c = ref16.data();
    ASSERT_OK(osp_op_gemm_ex(stream_, &d.args));
    d.args.gemm.c = c16.data();
    ASSERT_OK(osp_op_gemm_ex(fs, &d.args));
    EXPECT_EQ(c16, ref16);
    d.args.act = OSP_UNARY_RELU;
    EXPECT_ERROR_CODE(osp_op_gemm_ex(fs, &d.args), OSP_ERROR_UNSUPPORTED);

    // Without binary_nd the epilogue cannot run.
    fake.ops().binary_nd = nullptr;
    GemmData e = MakeGemm(cases[1].spec, BaseSeed());
    PointAt(e);
    EXPECT_ERROR_CODE(osp_op_gemm_ex(fs, &e.args), OSP_ERROR_UNSUPPORTED);
    osp_stream_free(fs);
}

// ---- argument checks -------------------------------------------------------

TEST_F(NnOps, GemmExRejects) {
    GemmData d = MakeGemm({false, false, 3, 4, 5, 2}, BaseSeed());
    PointAt(d);
    ASSERT_OK(osp_op_gemm_ex(stream_, &d.args));
    EXPECT_ERROR_CODE(osp_op_gemm_ex(nullptr, &d.args), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_gemm_ex(stream_, nullptr), OSP_ERROR_INVALID_ARG);
    auto expect = [&](auto mutate, osp_error_code code, const char *what) {
        osp_gemm_ex_args bad = d.args;
        mutate(bad);
        SCOPED_TRACE(what);
        EXPECT_ERROR_CODE(osp_op_gemm_ex(stream_, &bad), code);
    };
    expect([](osp_gemm_ex_args &x) { x.gemm.dtype = OSP_TYPE_INT32; },
           OSP_ERROR_UNSUPPORTED, "dtype");
    expect([](osp_gemm_ex_args &x) { x.batch_count = -1; },
           OSP_ERROR_INVALID_ARG, "negative batch");
    expect([](osp_gemm_ex_args &x) { x.stride_a = -1; }, OSP_ERROR_INVALID_ARG,
           "negative stride");
    expect([](osp_gemm_ex_args &x) { x.stride_c = 0; }, OSP_ERROR_INVALID_ARG,
           "outputs overlap");
    expect([](osp_gemm_ex_args &x) { x.stride_c = x.gemm.ldc; },
           OSP_ERROR_INVALID_ARG, "outputs overlap partly");
    expect([](osp_gemm_ex_args &x) { x.act = OSP_UNARY_ISNAN; },
           OSP_ERROR_INVALID_ARG, "BOOL activation");
    expect([](osp_gemm_ex_args &x) { x.act = OSP_UNARY_OP_COUNT_; },
           OSP_ERROR_INVALID_ARG, "unknown activation");
    expect([](osp_gemm_ex_args &x) { x.gemm.lda = 2; }, OSP_ERROR_INVALID_ARG,
           "lda");
    expect([](osp_gemm_ex_args &x) { x.gemm.c = nullptr; },
           OSP_ERROR_INVALID_ARG, "NULL c");
    expect([](osp_gemm_ex_args &x) { x.gemm.k = -1; }, OSP_ERROR_INVALID_ARG,
           "negative k");
    expect(
        [](osp_gemm_ex_args &x) {
            x.batch_count = INT64_MAX;
            x.stride_a = INT64_MAX / 2;
        },
        OSP_ERROR_INVALID_ARG, "batch span overflows");
    // No output: nothing is read.
    osp_gemm_ex_args empty = {};
    empty.gemm.dtype = OSP_TYPE_FP32;
    empty.gemm.m = 0;
    empty.gemm.n = 4;
    empty.batch_count = 3;
    ASSERT_OK(osp_op_gemm_ex(stream_, &empty));
}

// The w_fp16 form: x and w rounded to FP16, products summed in FP32, y
// FP32 (the reference the CUDA device's FP16 route is held to), for a
// plain, a strided and grouped, and a pointwise conv with the epilogue.
TEST_F(NnOps, ConvWithFp16WeightsRoundsXAndW) {
    const ConvSpec specs[] = {
        {2, 2, 3, 4, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
        {2, 1, 4, 6, 2, {7, 6}, {3, 2}, {2, 1}, {1, 0}, {0, 1}, {1, 2}},
        {2, 2, 5, 3, 1, {4, 5}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}},
    };
    uint64_t seed = BaseSeed();
    for (ConvSpec spec : specs) {
        spec.bias = spec.residual = true;
        spec.act = OSP_UNARY_RELU;
        ConvSpec s = WithOut(spec);
        int64_t cg = s.in_channels / s.group;
        auto x = RandomFloats(s.batch * s.in_channels * Product(s.in), seed);
        auto w =
            RandomFloats(s.out_channels * cg * Product(s.kernel), seed + 1);
        auto bias = RandomFloats(s.out_channels, seed + 2);
        size_t y_count = s.batch * s.out_channels * Product(s.out);
        auto res = RandomFloats(y_count, seed + 3);
        std::vector<uint16_t> w16(w.size());
        std::vector<float> xr(x.size()), wr(w.size());
        for (size_t i = 0; i < w.size(); i++) {
            w16[i] = fp32_to_fp16(w[i]);
            wr[i] = fp16_to_fp32(w16[i]);
        }
        for (size_t i = 0; i < x.size(); i++)
            xr[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
        osp_conv_args a;
        FillConvArgs(s, &a);
        std::vector<float> y(y_count, NAN);
        std::vector<char> ws(osp_conv_workspace_bytes(&a, true));
        a.x = x.data();
        a.w_fp16 = w16.data();
        a.bias = bias.data();
        a.residual = res.data();
        a.y = y.data();
        a.workspace = ws.data();
        a.workspace_bytes = ws.size();
        ASSERT_OK(osp_op_conv(stream_, &a));
        ASSERT_OK(osp_stream_synchronize(stream_));
        ExpectNear(y, RefConv(s, xr, wr, bias, res), 1e-5, 1e-5, "fp16");
    }
}

// What the GEMM route's workspace comes to: nothing for FP32, depthwise
// or TF32 pointwise convs; the whole batch's im2col matrix (FP16 or
// FP32 elements) up to the budget; never less than one column.
TEST_F(NnOps, ConvWorkspaceBytes) {
    ConvSpec s = WithOut(
        {2, 3, 4, 6, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
    osp_conv_args a;
    FillConvArgs(s, &a);
    size_t im2col = 3 * 4 * 9 * 25; // batch x channels x taps x positions
    EXPECT_EQ(osp_conv_workspace_bytes(&a, false), 0u);
    EXPECT_EQ(osp_conv_workspace_bytes(&a, true), im2col * 2);
    a.allow_tf32 = true;
    EXPECT_EQ(osp_conv_workspace_bytes(&a, false), im2col * 4);
    a.batch = 100000;
    EXPECT_EQ(osp_conv_workspace_bytes(&a, true), OSP_CONV_WORKSPACE_MAX_BYTES);
    a.batch = 0;
    EXPECT_EQ(osp_conv_workspace_bytes(&a, true), 4u * 9 * 2);
    osp_conv_args pw;
    FillConvArgs(
        WithOut(
            {2, 2, 4, 6, 1, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}),
        &pw);
    pw.allow_tf32 = true;
    EXPECT_EQ(osp_conv_workspace_bytes(&pw, false), 0u);
    EXPECT_EQ(osp_conv_workspace_bytes(&pw, true), 2u * 4 * 25 * 2);
    osp_conv_args dw;
    FillConvArgs(
        WithOut(
            {2, 1, 4, 4, 4, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}),
        &dw);
    dw.allow_tf32 = true;
    EXPECT_EQ(osp_conv_workspace_bytes(&dw, false), 0u);
    EXPECT_EQ(osp_conv_workspace_bytes(&dw, true), 0u);
    EXPECT_EQ(osp_conv_workspace_bytes(nullptr, true), 0u);
}

// w_fp16 needs a workspace of at least a column, is not for depthwise
// convs or conv_transpose, and stands in for w.
TEST_F(NnOps, ConvFp16WeightsRejects) {
    ConvSpec s = WithOut(
        {2, 1, 4, 6, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
    std::vector<float> x(4 * 25), y(6 * 25);
    std::vector<uint16_t> w16(6 * 2 * 9);
    std::vector<char> ws(4 * 9 * 2);
    osp_conv_args good;
    FillConvArgs(s, &good);
    good.x = x.data();
    good.w_fp16 = w16.data();
    good.y = y.data();
    good.workspace = ws.data();
    good.workspace_bytes = ws.size();
    ASSERT_OK(osp_op_conv(stream_, &good));
    osp_conv_args bad = good;
    bad.workspace_bytes = ws.size() - 1;
    EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
    bad.workspace_bytes = ws.size();
    bad.workspace = nullptr;
    EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
    bad = good;
    bad.w_fp16 = nullptr;
    EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_conv_transpose(stream_, &good),
                      OSP_ERROR_INVALID_ARG);
    bad = good;
    bad.group = bad.in_channels = bad.out_channels = 4; // depthwise
    EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
    ASSERT_OK(osp_stream_synchronize(stream_));
}

TEST_F(NnOps, ConvRejects) {
    ConvSpec s = WithOut(
        {2, 1, 4, 6, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
    std::vector<float> x(4 * 25), w(6 * 2 * 9), y(6 * 25);
    osp_conv_args good;
    FillConvArgs(s, &good);
    good.x = x.data();
    good.w = w.data();
    good.y = y.data();
    ASSERT_OK(osp_op_conv(stream_, &good));
    ASSERT_OK(osp_op_conv_transpose(stream_, &good));
    EXPECT_ERROR_CODE(osp_op_conv(nullptr, &good), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_conv(stream_, nullptr), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_conv_transpose(stream_, nullptr),
                      OSP_ERROR_INVALID_ARG);
    auto expect = [&](auto mutate, const char *what) {
        osp_conv_args bad = good;
        mutate(bad);
        SCOPED_TRACE(what);
        EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
        EXPECT_ERROR_CODE(osp_op_conv_transpose(stream_, &bad),
                          OSP_ERROR_INVALID_ARG);
    };
    expect([](osp_conv_args &a) { a.spatial_rank = 0; }, "rank 0");
    expect([](osp_conv_args &a) { a.spatial_rank = 4; }, "rank 4");
    expect([](osp_conv_args &a) { a.group = 3; }, "group divides nothing");
    expect([](osp_conv_args &a) { a.group = 0; }, "group 0");
    expect([](osp_conv_args &a) { a.out_channels = 5; },
           "group does not divide out_channels");
    expect([](osp_conv_args &a) { a.in_channels = 0; }, "no input channels");
    expect([](osp_conv_args &a) { a.kernel[1] = 0; }, "kernel 0");
    expect([](osp_conv_args &a) { a.stride[0] = 0; }, "stride 0");
    expect([](osp_conv_args &a) { a.dilation[1] = 0; }, "dilation 0");
    expect([](osp_conv_args &a) { a.pad_begin[0] = -1; }, "negative pad");
    expect([](osp_conv_args &a) { a.in_dims[0] = 0; }, "empty input");
    expect([](osp_conv_args &a) { a.out_dims[1] = -1; }, "negative out");
    expect([](osp_conv_args &a) { a.batch = -1; }, "negative batch");
    expect([](osp_conv_args &a) { a.x = nullptr; }, "NULL x");
    expect([](osp_conv_args &a) { a.w = nullptr; }, "NULL w");
    expect([](osp_conv_args &a) { a.y = nullptr; }, "NULL y");
    expect(
        [](osp_conv_args &a) { a.in_dims[0] = a.in_dims[1] = INT64_MAX / 4; },
        "input size overflows");
    expect([](osp_conv_args &a) { a.stride[0] = INT64_MAX / 2; },
           "window reach overflows");
    osp_conv_args bad = good;
    bad.act = OSP_UNARY_NOT;
    EXPECT_ERROR_CODE(osp_op_conv(stream_, &bad), OSP_ERROR_INVALID_ARG);
    // conv_transpose does not use act or residual.
    ASSERT_OK(osp_op_conv_transpose(stream_, &bad));

    // No output elements: succeeds without touching a pointer.
    osp_conv_args empty = good;
    empty.x = empty.w = nullptr;
    empty.y = nullptr;
    empty.batch = 0;
    ASSERT_OK(osp_op_conv(stream_, &empty));
    ASSERT_OK(osp_op_conv_transpose(stream_, &empty));
    empty = good;
    empty.x = empty.w = nullptr;
    empty.y = nullptr;
    empty.out_dims[1] = 0;
    ASSERT_OK(osp_op_conv(stream_, &empty));
    empty.out_dims[1] = good.out_dims[1];
    empty.out_channels = 0;
    ASSERT_OK(osp_op_conv(stream_, &empty));
}

TEST_F(NnOps, PoolRejects) {
    std::vector<float> x(2 * 25), y(2 * 9);
    osp_pool_args good = {};
    good.kind = OSP_POOL_MAX;
    good.spatial_rank = 2;
    good.planes = 2;
    for (int d = 0; d < 2; d++) {
        good.in_dims[d] = 5;
        good.out_dims[d] = 3;
        good.kernel[d] = 3;
        good.stride[d] = 2;
        good.pad_begin[d] = 1;
        good.dilation[d] = 1;
    }
    good.p = 2;
    good.x = x.data();
    good.y = y.data();
    ASSERT_OK(osp_op_pool(stream_, &good));
    EXPECT_ERROR_CODE(osp_op_pool(nullptr, &good), OSP_ERROR_INVALID_ARG);
    EXPECT_ERROR_CODE(osp_op_pool(stream_, nullptr), OSP_ERROR_INVALID_ARG);
    auto expect = [&](auto mutate, const char *what) {
        osp_pool_args bad = good;
        mutate(bad);
        SCOPED_TRACE(what);
        EXPECT_ERROR_CODE(osp_op_pool(stream_, &bad), OSP_ERROR_INVALID_ARG);
    };
    expect([](osp_pool_args &a) { a.kind = (osp_pool_kind)3; }, "kind");
    expect([](osp_pool_args &a) { a.kind = (osp_pool_kind)-1; },
           "negative kind");
    expect([](osp_pool_args &a) { a.spatial_rank = 4; }, "rank");
    expect([](osp_pool_args &a) { a.kernel[0] = 0; }, "kernel");
    expect([](osp_pool_args &a) { a.stride[1] = 0; }, "stride");
    expect([](osp_pool_args &a) { a.dilation[1] = 0; }, "dilation");
    expect([](osp_pool_args &a) { a.pad_begin[1] = -2; }, "pad");
    expect([](osp_pool_args &a) { a.planes = -1; }, "planes");
    expect([](osp_pool_args &a) { a.x = nullptr; }, "NULL x");
    expect(
        [](osp_pool_args &a) {
            a.kind = OSP_POOL_LP;
            a.p = 0;
        },
        "LP p 0");
    expect(
        [](osp_pool_args &a) {
            a.kind = OSP_POOL_LP;
            a.p = NAN;
        },
        "LP p NaN");
    std::vector<int64_t> idx(18);
    expect(
        [&](osp_pool_args &a) {
            a.kind = OSP_POOL_AVG;
            a.indices = idx.data();
        },
        "indices for AVG");
    osp_pool_args empty = good;
    empty.planes = 0;
    empty.x = nullptr;
    empty.y = nullptr;
    ASSERT_OK(osp_op_pool(stream_, &empty));
}

TEST_F(NnOps, MissingSlotsAreUnsupported) {
    FakeDevice fake;
    fake.ops().conv = nullptr;
    fake.ops().conv_transpose = nullptr;
    fake.ops().pool = nullptr;
    EXPECT_FALSE(osp_device_supports_op(fake.device(), OSP_OP_CONV));
    osp_stream *fs = nullptr;
    ASSERT_OK(osp_stream_new(fake.device(), &fs));
    ConvSpec s = WithOut({1, 1, 2, 2, 1, {5}, {3}, {1}, {1}, {1}, {1}});
    std::vector<float> buf(64);
    osp_conv_args c;
    FillConvArgs(s, &c);
    c.x = c.w = buf.data();
    c.y = buf.data() + 32;
    osp_error *err = osp_op_conv(fs, &c);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(TakeMessage(err), "device fake has no conv op");
    EXPECT_ERROR_CODE(osp_op_conv_transpose(fs, &c), OSP_ERROR_UNSUPPORTED);
    osp_pool_args p = {};
    p.kind = OSP_POOL_AVG;
    p.spatial_rank = 1;
    p.planes = 1;
    p.in_dims[0] = 4;
    p.out_dims[0] = 2;
    p.kernel[0] = 2;
    p.stride[0] = 2;
    p.dilation[0] = 1;
    p.x = buf.data();
    p.y = buf.data() + 32;
    EXPECT_ERROR_CODE(osp_op_pool(fs, &p), OSP_ERROR_UNSUPPORTED);
    osp_stream_free(fs);
}

} // namespace

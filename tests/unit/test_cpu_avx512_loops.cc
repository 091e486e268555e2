// The CPU device's AVX-512 loops for a transformer's elementwise and
// row-wise ops (cpu_act_avx512.h: GELU, Erf, also as the packed GEMM's
// epilogue; cpu_reduce_avx512.h: the softmax line, the LayerNormalization
// row) against their scalar
// references: the rules of unary_rules.h directly, and the public ops run
// with the AVX-512 kernels selected against the same ops with the portable
// loops (cpu_packed_gemm_select). Lengths 0, 1, odd, and around a vector;
// inf, NaN, huge, tiny and denormal inputs. Skipped on CPUs without
// AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_act_avx512.h"
#include "cpu_packed_gemm.h"
#include "cpu_reduce_avx512.h"
#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/tensor_ops.h"
#include "unary_rules.h"

namespace {

const int64_t kLengths[] = {0, 1, 2, 7, 15, 16, 17, 31, 33, 128, 1001};

std::vector<float> Random(size_t n, float lo, float hi, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v)
        x = dist(gen);
    return v;
}

// The special values, repeated to fill n.
std::vector<float> Specials(size_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    const float s[] = {0.0f,  -0.0f,  inf,    -inf,    NAN,    -NAN,
                       1e30f, -1e30f, 1e-30f, -1e-30f, 1e-40f, -1e-40f,
                       3.99f, 4.0f,   4.01f,  -4.01f,  9.0f,   -9.0f,
                       -5.7f, -13.0f, -14.5f, 88.0f,   -88.0f, 0.5f};
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = s[i % (sizeof s / sizeof s[0])];
    return v;
}

// a and b agree: both NaN, equal (infinities, zeros), or within rel of b
// (or abs, for results near zero).
::testing::AssertionResult Close(float a, float b, double rel, double abs,
                                 float x) {
    if (std::isnan(a) && std::isnan(b))
        return ::testing::AssertionSuccess();
    if (a == b)
        return ::testing::AssertionSuccess();
    double d = std::fabs((double)a - (double)b);
    if (std::isfinite(d) && (d <= rel * std::fabs((double)b) || d <= abs))
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "x " << x << ": " << a << " against the reference " << b;
}

// The relative bound between two evaluations of one rule: 2e-6, and for
// GELU's negative tail the rounding of its exponent -x^2 / 2 + P, which
// either side may round by an ulp (FMA or not): 1.2e-7 of x^2 / 2
// relative (unary_gelu_f32's comment: within 2.5e-6 of the truth down to
// -5.7, less precise below, where the results are under 1e-7).
double TailBound(osp_unary_op op, float x) {
    double bound = 2e-6;
    if (op == OSP_UNARY_GELU && std::isfinite(x) && x < 0.0f)
        bound += 1.2e-7 * (double)x * (double)x / 2.0;
    return bound;
}

class Avx512Loops : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!cpu_packed_gemm_has_avx512())
            GTEST_SKIP() << "this CPU has no AVX-512";
    }
    void TearDown() override {
        cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
    }
};

// Each activation of cpu_act_avx512 against its scalar rule, lane by
// lane, on random values of GELU's and erf's working range, wide ones and
// the specials; the elements past n stay untouched.
TEST_F(Avx512Loops, ActivationsMatchTheScalarRules) {
    struct Case {
        osp_unary_op op;
        float (*rule)(float, float, float);
    } cases[] = {{OSP_UNARY_GELU, unary_gelu_f32},
                 {OSP_UNARY_ERF, unary_erf_f32}};
    for (const Case &c : cases) {
        ASSERT_TRUE(cpu_act_avx512_serves(c.op));
        for (int64_t n : kLengths) {
            for (int set = 0; set < 3; set++) {
                std::vector<float> x =
                    set == 0   ? Random((size_t)n, -6.0f, 6.0f, 7 + n)
                    : set == 1 ? Random((size_t)n, -40.0f, 40.0f, 9 + n)
                               : Specials((size_t)n);
                std::vector<float> y((size_t)n + 16, 12345.0f);
                cpu_act_avx512(x.data(), y.data(), n, c.op);
                for (int64_t i = 0; i < n; i++)
                    EXPECT_TRUE(Close(y[i], c.rule(x[i], 0.0f, 0.0f),
                                      TailBound(c.op, x[i]), 1e-37, x[i]))
                        << "op " << c.op << " n " << n;
                for (int64_t i = n; i < n + 16; i++)
                    ASSERT_EQ(y[i], 12345.0f) << "wrote past n = " << n;
                // in place gives the same
                std::vector<float> z = x;
                cpu_act_avx512(z.data(), z.data(), n, c.op);
                for (int64_t i = 0; i < n; i++)
                    EXPECT_TRUE(Close(z[i], y[i], 0.0, 0.0, x[i]));
            }
        }
    }
    EXPECT_FALSE(cpu_act_avx512_serves(OSP_UNARY_RELU));
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_PORTABLE);
    EXPECT_FALSE(cpu_act_avx512_serves(OSP_UNARY_GELU));
}

// GELU in a tail where it keeps its relative precision (erfc, not 1 +
// erf): tiny negative results agree to the same bound, not just in
// absolute terms.
TEST_F(Avx512Loops, GeluKeepsItsNegativeTail) {
    std::vector<float> x;
    for (float v = -5.6f; v < -2.0f; v += 0.013f)
        x.push_back(v);
    std::vector<float> y(x.size());
    cpu_act_avx512(x.data(), y.data(), (int64_t)x.size(), OSP_UNARY_GELU);
    for (size_t i = 0; i < x.size(); i++) {
        float ref = unary_gelu_f32(x[i], 0.0f, 0.0f);
        ASSERT_LT(ref, 0.0f);
        EXPECT_TRUE(Close(y[i], ref, 2e-6, 0.0, x[i]));
        double exact = 0.5 * x[i] * std::erfc(-x[i] / std::sqrt(2.0));
        EXPECT_TRUE(Close(y[i], (float)exact, 1e-5, 0.0, x[i]));
    }
}

// The public ops, AVX-512 loops against the portable ones. `run` runs
// the op once on the stream; the outputs are compared elementwise.
template <typename Run>
void CompareRoutes(size_t outputs, Run run, double rel, double abs) {
    osp_stream *stream = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
    ASSERT_OK(osp_stream_set_threads(stream, 1));
    std::vector<float> best(outputs), portable(outputs);
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
    run(stream, best.data());
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_PORTABLE);
    run(stream, portable.data());
    cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
    for (size_t i = 0; i < outputs; i++)
        EXPECT_TRUE(Close(best[i], portable[i], rel, abs, (float)i))
            << "element " << i;
    osp_stream_free(stream);
}

TEST_F(Avx512Loops, UnaryOpGeluAndErfMatchThePortableLoops) {
    for (osp_unary_op op : {OSP_UNARY_GELU, OSP_UNARY_ERF}) {
        for (int64_t n : kLengths) {
            std::vector<float> x = Random((size_t)n, -8.0f, 8.0f, 3 + n);
            CompareRoutes((size_t)n,
                          [&](osp_stream *s, float *y) {
                              osp_unary_args a = {};
                              a.op = op;
                              a.dtype = OSP_TYPE_FP32;
                              a.x = x.data();
                              a.y = y;
                              a.n = (size_t)n;
                              ASSERT_OK(osp_op_unary(s, &a));
                          },
                          2e-6, 1e-37);
        }
    }
}

TEST_F(Avx512Loops, SoftmaxMatchesThePortableLoops) {
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t n : kLengths) {
        if (n == 0)
            continue;
        const int64_t outer = 6;
        std::vector<float> x = Random((size_t)(outer * n), -20.0f, 20.0f, n);
        // row 1: an attention mask's -10000s; row 2: a NaN; row 3: all
        // -inf; row 4: a +inf; row 5: differences past -87
        for (int64_t i = n / 2; i < n; i++)
            x[(size_t)(n + i)] -= 10000.0f;
        x[(size_t)(2 * n + n / 2)] = NAN;
        for (int64_t i = 0; i < n; i++)
            x[(size_t)(3 * n + i)] = -inf;
        x[(size_t)(4 * n)] = inf;
        for (int64_t i = 0; i < n; i += 2)
            x[(size_t)(5 * n + i)] = -100.0f;
        CompareRoutes(
            x.size(),
            [&](osp_stream *s, float *y) {
                osp_softmax_args a = {};
                a.x = x.data();
                a.out = y;
                a.outer = outer;
                a.n = n;
                a.inner = 1;
                ASSERT_OK(osp_op_softmax(s, &a));
            },
            4e-7, 1e-44);
    }
}

TEST_F(Avx512Loops, LayerNormMatchesThePortableLoops) {
    for (int64_t cols : kLengths) {
        if (cols == 0)
            continue;
        const int64_t rows = 5;
        std::vector<float> x = Random((size_t)(rows * cols), -3.0f, 5.0f, cols);
        for (int64_t i = 0; i < cols; i++) // a constant row: variance 0
            x[(size_t)i] = 2.5f;
        x[(size_t)(cols + cols / 2)] = NAN;
        x[(size_t)(2 * cols)] = 1e20f;
        std::vector<float> scale = Random((size_t)cols, 0.5f, 1.5f, 1);
        std::vector<float> bias = Random((size_t)cols, -1.0f, 1.0f, 2);
        // outputs: y, then the means, then the inverse deviations
        CompareRoutes(
            x.size() + 2 * (size_t)rows,
            [&](osp_stream *s, float *y) {
                osp_layer_norm_args a = {};
                a.x = x.data();
                a.scale = scale.data();
                a.bias = bias.data();
                a.out = y;
                a.rows = rows;
                a.cols = cols;
                a.epsilon = 1e-5f;
                a.mean = y + x.size();
                a.inv_std = y + x.size() + rows;
                ASSERT_OK(osp_op_layer_norm(s, &a));
            },
            1e-6, 1e-6);
    }
}

// gemm_ex with B packed and a GELU (or Erf) epilogue, which the packed
// route applies after each block of 64 rows: rows that leave a partial
// block, columns that leave a partial strip, a batch, bias and residual,
// 1 to 3 threads (tasks of a few strips each), against the portable
// kernel with the scalar rule.
TEST_F(Avx512Loops, PackedGemmActivationMatchesThePortableLoops) {
    const int64_t batch = 2, m = 130, n = 100, k = 33;
    std::vector<float> a = Random((size_t)(batch * m * k), -1.0f, 1.0f, 11);
    std::vector<float> b = Random((size_t)(k * n), -1.0f, 1.0f, 12);
    std::vector<float> bias = Random((size_t)n, -1.0f, 1.0f, 13);
    std::vector<float> res = Random((size_t)(batch * m * n), -2.0f, 2.0f, 14);
    for (osp_unary_op act : {OSP_UNARY_GELU, OSP_UNARY_ERF})
        for (int threads = 1; threads <= 3; threads++) {
            SCOPED_TRACE("act " + std::to_string((int)act) + " threads " +
                         std::to_string(threads));
            osp_stream *stream = nullptr;
            ASSERT_OK(osp_stream_new(osp_device_cpu(), &stream));
            ASSERT_OK(osp_stream_set_threads(stream, threads));
            osp_gemm_ex_args x = {};
            x.gemm.m = m;
            x.gemm.n = n;
            x.gemm.k = k;
            x.gemm.alpha = 1.0f;
            x.gemm.dtype = OSP_TYPE_FP32;
            x.gemm.a = a.data();
            x.gemm.lda = k;
            x.gemm.b = b.data();
            x.gemm.ldb = n;
            x.gemm.ldc = n;
            x.batch_count = batch;
            x.stride_a = m * k;
            x.stride_c = m * n;
            x.bias = bias.data();
            x.residual = res.data();
            x.act = act;
            osp_packed_weights *packed = nullptr;
            ASSERT_OK(osp_op_gemm_prepack(stream, &x, &packed));
            x.packed_b = packed;
            std::vector<float> best((size_t)(batch * m * n)),
                portable(best.size());
            x.gemm.c = best.data();
            ASSERT_OK(osp_op_gemm_ex(stream, &x));
            cpu_packed_gemm_select(CPU_PACKED_KERNEL_PORTABLE);
            x.gemm.c = portable.data();
            ASSERT_OK(osp_op_gemm_ex(stream, &x));
            cpu_packed_gemm_select(CPU_PACKED_KERNEL_BEST);
            osp_packed_weights_free(osp_device_cpu(), packed);
            osp_stream_free(stream);
            int bad = 0;
            for (size_t i = 0; i < best.size(); i++)
                if (!Close(best[i], portable[i], 1e-5, 1e-6, (float)i) &&
                    bad++ < 5)
                    ADD_FAILURE() << "c[" << i << "] = " << best[i]
                                  << ", portable " << portable[i];
            EXPECT_EQ(bad, 0);
        }
}

} // namespace

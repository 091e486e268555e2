// The CPU device's intra-op threads (server/device/cpu_threads.h): the
// worker pool's parallel_for, alone and called from several threads at
// once, osp_stream_set_threads, and every op that splits its work giving
// with 2 and 4 threads what it gives with 1 (bit for bit; GEMMs, whose
// blocks may take other OpenBLAS kernels, within rounding). The inputs are
// large enough for each op to split (CPU_GRAIN); how it splits does not
// depend on how many workers the machine has.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_threads.h"
#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/tensor_ops.h"

namespace {

// ---- the pool ---------------------------------------------------------------

struct Counts {
    std::vector<std::atomic<int>> hits;
    explicit Counts(size_t n) : hits(n) {}
};

void CountTask(void *ctx, int64_t task) {
    static_cast<Counts *>(ctx)->hits[task].fetch_add(1);
}

// parallel_for(n, ...) with the given cap ran each task exactly once.
::testing::AssertionResult RunsEachTaskOnce(int64_t n, int threads) {
    Counts c(static_cast<size_t>(n));
    cpu_parallel_for(n, CountTask, &c, threads);
    for (int64_t t = 0; t < n; t++)
        if (c.hits[t].load() != 1)
            return ::testing::AssertionFailure()
                   << "task " << t << " of " << n << " ran " << c.hits[t].load()
                   << " times with " << threads << " threads";
    return ::testing::AssertionSuccess();
}

TEST(CpuThreads, ParallelForRunsEveryTaskOnce) {
    for (int threads : {1, 2, 3, 4, 8, CPU_THREADS_MAX + 5})
        for (int64_t n : {0, 1, 2, 3, 7, 64, 1000})
            EXPECT_TRUE(RunsEachTaskOnce(n, threads));
}

// Tasks that call parallel_for themselves: the inner calls find the
// workers taken and run on their own thread, or take the idle ones.
struct Nested {
    std::atomic<int64_t> inner_hits{0};
};

void InnerTask(void *ctx, int64_t) {
    static_cast<Nested *>(ctx)->inner_hits.fetch_add(1);
}

void OuterTask(void *ctx, int64_t) {
    cpu_parallel_for(10, InnerTask, ctx, 4);
}

TEST(CpuThreads, TasksMayCallParallelFor) {
    Nested n;
    cpu_parallel_for(16, OuterTask, &n, 4);
    EXPECT_EQ(n.inner_hits.load(), 160);
}

// Several threads calling at once, each with a cap above the CPUs: every
// call still runs each of its tasks once, whoever holds the workers.
TEST(CpuThreads, ConcurrentCallersShareThePool) {
    std::atomic<int> failures{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 6; c++)
        callers.emplace_back([&failures, c] {
            for (int i = 0; i < 300; i++)
                if (!RunsEachTaskOnce(1 + (i * 7 + c) % 97, 2 + c % 4))
                    failures.fetch_add(1);
        });
    for (auto &t : callers)
        t.join();
    EXPECT_EQ(failures.load(), 0);
}

// A child of fork has none of the parent's workers: it runs its tasks
// (growing its own pool) and exits without waiting for the parent's.
TEST(CpuThreads, ForkedChildRunsAndExits) {
    ASSERT_TRUE(RunsEachTaskOnce(64, 4)); // the parent's pool exists
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        alarm(20); // a hang shows as SIGALRM, not a stuck test
        exit(RunsEachTaskOnce(64, 4) && RunsEachTaskOnce(5, 2) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_TRUE(RunsEachTaskOnce(64, 4));
}

TEST(CpuThreads, SplitRangeCoversEachItemOnce) {
    for (int64_t n : {1, 5, 16, 17, 100, 1001})
        for (int64_t parts : {1, 2, 3, 4, 7})
            for (int64_t align : {1, 4, 16}) {
                int64_t next = 0;
                for (int64_t p = 0; p < parts; p++) {
                    int64_t lo, hi;
                    cpu_split_range(n, parts, p, align, &lo, &hi);
                    if (hi <= lo)
                        continue;
                    EXPECT_EQ(lo, next) << n << " " << parts << " " << align;
                    EXPECT_TRUE(lo % align == 0) << lo;
                    next = hi;
                }
                EXPECT_EQ(next, n) << n << " " << parts << " " << align;
            }
}

// ---- osp_stream_set_threads
// ---------------------------------------------------

TEST(StreamThreads, CountsAreCheckedAndZeroIsTheDefault) {
    osp_stream *s = nullptr;
    ASSERT_OK(osp_stream_new(osp_device_cpu(), &s));
    osp_error *err = osp_stream_set_threads(s, -1);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    osp_error_free(err);
    err = osp_stream_set_threads(nullptr, 1);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    EXPECT_GE(cpu_threads_default(), 1);
    ASSERT_OK(osp_stream_set_threads(s, 3));
    ASSERT_OK(osp_stream_set_threads(s, 0));
    ASSERT_OK(osp_stream_set_threads(s, 100000)); /* capped, not refused */
    osp_stream_free(s);
}

// ---- ops agree across thread counts
// -------------------------------------------

std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v)
        x = dist(gen);
    return v;
}

// Runs `op` (which writes its output into the buffer it is given) on a
// stream with 1, 2 and 4 threads and compares the outputs with the first:
// bytes equal when tol < 0, else floats within tol relative.
template <typename T>
void ExpectSameAcrossThreads(
    const std::string &what, size_t out_n,
    const std::function<osp_error *(osp_stream *, T *)> &op,
    double tol = -1.0) {
    std::vector<T> first;
    for (int threads : {1, 2, 4}) {
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(osp_device_cpu(), &s));
        ASSERT_OK(osp_stream_set_threads(s, threads));
        std::vector<T> out(out_n);
        ASSERT_OK(op(s, out.data()));
        osp_stream_free(s);
        if (threads == 1) {
            first = out;
            continue;
        }
        if (tol < 0) {
            EXPECT_EQ(0, memcmp(first.data(), out.data(), out_n * sizeof(T)))
                << what << " with " << threads << " threads";
            continue;
        }
        size_t bad = 0;
        for (size_t i = 0; i < out_n; i++) {
            double a = first[i], b = out[i];
            if (std::fabs(a - b) > tol * (1.0 + std::fabs(a)))
                bad++;
        }
        EXPECT_EQ(bad, 0u) << what << " with " << threads << " threads";
    }
}

TEST(StreamThreads, UnaryAgrees) {
    const size_t n = 200003;
    auto x = Random(n, 1, -6.0f, 6.0f);
    for (osp_unary_op op : {OSP_UNARY_GELU, OSP_UNARY_EXP, OSP_UNARY_ISNAN}) {
        if (op == OSP_UNARY_ISNAN) {
            ExpectSameAcrossThreads<uint8_t>(
                "isnan", n, [&](osp_stream *s, uint8_t *y) {
                    osp_unary_args a = {op, OSP_TYPE_FP32, x.data(), y,
                                        n,  0.0f,          0.0f};
                    return osp_op_unary(s, &a);
                });
            continue;
        }
        ExpectSameAcrossThreads<float>(
            "unary", n, [&](osp_stream *s, float *y) {
                osp_unary_args a = {op, OSP_TYPE_FP32, x.data(), y,
                                    n,  0.0f,          0.0f};
                return osp_op_unary(s, &a);
            });
    }
}

TEST(StreamThreads, BinaryNdWhereAndCopyAgree) {
    const int64_t d0 = 16, d1 = 257, d2 = 301, total = d0 * d1 * d2;
    ASSERT_GE(total, 4 * CPU_GRAIN); // enough to split four ways
    auto a = Random(size_t(total), 2);
    auto b = Random(size_t(d1), 3);
    ExpectSameAcrossThreads<float>(
        "binary_nd broadcast", size_t(total), [&](osp_stream *s, float *out) {
            osp_binary_nd_args args = {};
            args.op = OSP_BINARY_ND_DIV;
            args.dtype = OSP_TYPE_FP32;
            args.rank = 3;
            args.dims[0] = d0, args.dims[1] = d1, args.dims[2] = d2;
            args.a = a.data();
            args.a_strides[0] = d1 * d2, args.a_strides[1] = d2;
            args.a_strides[2] = 1;
            args.b = b.data();
            args.b_strides[0] = 0, args.b_strides[1] = 1;
            args.b_strides[2] = 0;
            args.out = out;
            return osp_op_binary_nd(s, &args);
        });
    // One long row: the split falls inside it.
    ExpectSameAcrossThreads<float>("binary_nd one row", size_t(total),
                                   [&](osp_stream *s, float *out) {
                                       osp_binary_nd_args args = {};
                                       args.op = OSP_BINARY_ND_ADD;
                                       args.dtype = OSP_TYPE_FP32;
                                       args.rank = 1;
                                       args.dims[0] = total;
                                       args.a = a.data();
                                       args.a_strides[0] = 1;
                                       args.b = a.data();
                                       args.b_strides[0] = 1;
                                       args.out = out;
                                       return osp_op_binary_nd(s, &args);
                                   });
    std::vector<uint8_t> cond(static_cast<size_t>(d2));
    for (size_t i = 0; i < cond.size(); i++)
        cond[i] = (i * 7) % 3 == 0;
    ExpectSameAcrossThreads<float>(
        "where", size_t(total), [&](osp_stream *s, float *out) {
            osp_where_args args = {};
            args.elem_size = 4;
            args.rank = 3;
            args.dims[0] = d0, args.dims[1] = d1, args.dims[2] = d2;
            args.cond = reinterpret_cast<const bool *>(cond.data());
            args.cond_strides[2] = 1;
            args.x = a.data();
            args.x_strides[0] = d1 * d2, args.x_strides[1] = d2;
            args.x_strides[2] = 1;
            args.y = b.data();
            args.y_strides[1] = 1;
            args.out = out;
            return osp_op_where(s, &args);
        });
    // Transposes [d0, d1, d2] -> [d0, d2, d1] (the tiled path), and a
    // reversed slice (the row path).
    ExpectSameAcrossThreads<float>(
        "copy_strided transpose", size_t(total),
        [&](osp_stream *s, float *out) {
            osp_copy_strided_args args = {};
            args.elem_size = 4;
            args.rank = 3;
            args.dims[0] = d0, args.dims[1] = d2, args.dims[2] = d1;
            args.src = a.data();
            args.src_strides[0] = d1 * d2, args.src_strides[1] = 1;
            args.src_strides[2] = d2;
            args.dst = out;
            args.dst_strides[0] = d1 * d2, args.dst_strides[1] = d1;
            args.dst_strides[2] = 1;
            return osp_op_copy_strided(s, &args);
        });
    ExpectSameAcrossThreads<float>(
        "copy_strided reversed", size_t(total), [&](osp_stream *s, float *out) {
            osp_copy_strided_args args = {};
            args.elem_size = 4;
            args.rank = 2;
            args.dims[0] = d0 * d1, args.dims[1] = d2;
            args.src = a.data() + d2 - 1;
            args.src_strides[0] = d2, args.src_strides[1] = -1;
            args.dst = out;
            args.dst_strides[0] = d2, args.dst_strides[1] = 1;
            return osp_op_copy_strided(s, &args);
        });
}

TEST(StreamThreads, ReductionsAndNormalisationsAgree) {
    auto x = Random(1400 * 257 * 3, 4, -4.0f, 4.0f);
    ExpectSameAcrossThreads<float>(
        "softmax rows", 300 * 257, [&](osp_stream *s, float *out) {
            osp_softmax_args a = {x.data(), out, 300, 257, 1, false};
            return osp_op_softmax(s, &a);
        });
    ExpectSameAcrossThreads<float>(
        "log_softmax columns", 300 * 257 * 3, [&](osp_stream *s, float *out) {
            osp_softmax_args a = {x.data(), out, 300, 257, 3, true};
            return osp_op_softmax(s, &a);
        });
    auto scale = Random(257, 5), bias = Random(257, 6);
    ExpectSameAcrossThreads<float>(
        "layer_norm", 900 * 257, [&](osp_stream *s, float *out) {
            std::vector<float> mean(900), inv(900);
            osp_layer_norm_args a = {x.data(), scale.data(), bias.data(),
                                     out,      900,          257,
                                     1e-5f,    mean.data(),  inv.data()};
            return osp_op_layer_norm(s, &a);
        });
    // n 257 and inner 3 over 1400 rows: enough to split four ways
    const int64_t outer = 1400;
    ASSERT_GE(outer * 257 * 3, 4 * CPU_GRAIN);
    auto reduce = [&](osp_reduce_op op, void *out) {
        osp_reduce_args a = {};
        a.op = op;
        a.dtype = OSP_TYPE_FP32;
        a.x = x.data();
        a.outer = outer;
        a.n = 257;
        a.inner = 3;
        a.out = out;
        return a;
    };
    ExpectSameAcrossThreads<float>(
        "reduce mean", outer * 3, [&](osp_stream *s, float *out) {
            osp_reduce_args a = reduce(OSP_REDUCE_MEAN, out);
            return osp_op_reduce(s, &a);
        });
    ExpectSameAcrossThreads<int64_t>(
        "reduce argmax", outer * 3, [&](osp_stream *s, int64_t *out) {
            osp_reduce_args a = reduce(OSP_REDUCE_ARGMAX, out);
            return osp_op_reduce(s, &a);
        });
    ExpectSameAcrossThreads<float>("channel_affine", 300 * 257 * 3,
                                   [&](osp_stream *s, float *out) {
                                       osp_channel_affine_args a = {};
                                       a.x = x.data();
                                       a.out = out;
                                       a.batch = 3;
                                       a.channels = 100;
                                       a.spatial = 257;
                                       a.scale = scale.data();
                                       a.shift = bias.data();
                                       a.act = OSP_UNARY_GELU;
                                       return osp_op_channel_affine(s, &a);
                                   });
}

osp_pool_args Pool2d(osp_pool_kind kind, int64_t planes, int64_t h, int64_t w,
                     int64_t k, int64_t stride, int64_t pad) {
    osp_pool_args a = {};
    a.kind = kind;
    a.spatial_rank = 2;
    a.planes = planes;
    a.in_dims[0] = h, a.in_dims[1] = w;
    a.out_dims[0] = (h + 2 * pad - k) / stride + 1;
    a.out_dims[1] = (w + 2 * pad - k) / stride + 1;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = stride;
    a.pad_begin[0] = a.pad_begin[1] = pad;
    a.dilation[0] = a.dilation[1] = 1;
    a.p = 2.0f;
    return a;
}

TEST(StreamThreads, PoolAgrees) {
    auto x = Random(64 * 56 * 56, 7);
    for (osp_pool_kind kind : {OSP_POOL_MAX, OSP_POOL_AVG}) {
        osp_pool_args a = Pool2d(kind, 64, 56, 56, 3, 2, 1);
        a.x = x.data();
        size_t out_n = size_t(64 * a.out_dims[0] * a.out_dims[1]);
        ExpectSameAcrossThreads<float>("pool", out_n,
                                       [&](osp_stream *s, float *out) {
                                           osp_pool_args b = a;
                                           b.y = out;
                                           return osp_op_pool(s, &b);
                                       });
    }
    osp_pool_args a = Pool2d(OSP_POOL_MAX, 64, 56, 56, 3, 2, 1);
    a.x = x.data();
    size_t out_n = size_t(64 * a.out_dims[0] * a.out_dims[1]);
    std::vector<float> y(out_n);
    ExpectSameAcrossThreads<int64_t>("max pool indices", out_n,
                                     [&](osp_stream *s, int64_t *idx) {
                                         osp_pool_args b = a;
                                         b.y = y.data();
                                         b.indices = idx;
                                         return osp_op_pool(s, &b);
                                     });
}

osp_conv_args Conv2d(int64_t batch, int64_t cin, int64_t cout, int64_t group,
                     int64_t h, int64_t k, int64_t stride, int64_t pad) {
    osp_conv_args a = {};
    a.spatial_rank = 2;
    a.batch = batch;
    a.in_channels = cin;
    a.out_channels = cout;
    a.group = group;
    a.in_dims[0] = a.in_dims[1] = h;
    a.out_dims[0] = a.out_dims[1] = (h + 2 * pad - k) / stride + 1;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = stride;
    a.pad_begin[0] = a.pad_begin[1] = pad;
    a.dilation[0] = a.dilation[1] = 1;
    return a;
}

TEST(StreamThreads, ConvAgrees) {
    struct Case {
        const char *name;
        osp_conv_args a;
    } cases[] = {
        {"3x3", Conv2d(1, 32, 48, 1, 40, 3, 1, 1)},
        {"3x3 small map", Conv2d(1, 256, 256, 1, 7, 3, 1, 1)},
        {"3x3 stride 2 batch 3", Conv2d(3, 16, 32, 1, 33, 3, 2, 1)},
        {"pointwise", Conv2d(2, 64, 96, 1, 28, 1, 1, 0)},
        {"grouped", Conv2d(1, 32, 64, 4, 30, 3, 1, 1)},
        {"depthwise s1", Conv2d(2, 64, 64, 64, 56, 3, 1, 1)},
        {"depthwise s2", Conv2d(1, 96, 96, 96, 57, 3, 2, 1)},
        {"depthwise 5x5", Conv2d(1, 32, 32, 32, 30, 5, 1, 2)},
    };
    for (const Case &c : cases) {
        osp_conv_args a = c.a;
        int64_t out_n =
            a.batch * a.out_channels * a.out_dims[0] * a.out_dims[1];
        auto x = Random(
            size_t(a.batch * a.in_channels * a.in_dims[0] * a.in_dims[1]), 8);
        auto w = Random(size_t(a.out_channels * (a.in_channels / a.group) *
                               a.kernel[0] * a.kernel[1]),
                        9);
        auto bias = Random(size_t(a.out_channels), 10);
        auto res = Random(size_t(out_n), 11);
        a.x = x.data();
        a.w = w.data();
        a.bias = bias.data();
        a.residual = res.data();
        a.act = OSP_UNARY_RELU;
        ExpectSameAcrossThreads<float>(
            c.name, size_t(out_n),
            [&](osp_stream *s, float *out) {
                osp_conv_args b = a;
                b.y = out;
                return osp_op_conv(s, &b);
            },
            1e-5);
    }
}

TEST(StreamThreads, ConvTransposeAgrees) {
    for (int64_t group : {1, 2}) {
        osp_conv_transpose_args a = {};
        a.spatial_rank = 2;
        a.batch = 1;
        a.in_channels = 32;
        a.out_channels = 24;
        a.group = group;
        a.in_dims[0] = a.in_dims[1] = 31;
        a.kernel[0] = a.kernel[1] = 3;
        a.stride[0] = a.stride[1] = 2;
        a.pad_begin[0] = a.pad_begin[1] = 1;
        a.dilation[0] = a.dilation[1] = 1;
        a.out_dims[0] = a.out_dims[1] = (31 - 1) * 2 - 2 + 3;
        int64_t out_n = a.out_channels * a.out_dims[0] * a.out_dims[1];
        auto x = Random(size_t(a.in_channels * 31 * 31), 12);
        auto w =
            Random(size_t(a.in_channels * (a.out_channels / group) * 9), 13);
        auto bias = Random(size_t(a.out_channels), 14);
        a.x = x.data();
        a.w = w.data();
        a.bias = bias.data();
        ExpectSameAcrossThreads<float>(
            "conv_transpose", size_t(out_n),
            [&](osp_stream *s, float *out) {
                osp_conv_transpose_args b = a;
                b.y = out;
                return osp_op_conv_transpose(s, &b);
            },
            1e-5);
    }
}

TEST(StreamThreads, GemmAgrees) {
    struct Case {
        int64_t batch, m, n, k;
        bool ta, tb;
    } cases[] = {
        {1, 300, 200, 150, false, false}, {1, 8, 512, 784, false, true},
        {1, 1, 1000, 512, false, true},   {3, 128, 128, 64, true, false},
        {1, 1000, 40, 300, true, true},   {2, 5, 700, 100, false, false},
    };
    for (const Case &c : cases) {
        auto a = Random(size_t(c.batch * c.m * c.k), 15);
        auto b = Random(size_t(c.batch * c.k * c.n), 16);
        auto bias = Random(size_t(c.n), 17);
        auto res = Random(size_t(c.batch * c.m * c.n), 18);
        std::string name = "gemm_ex " + std::to_string(c.m) + "x" +
                           std::to_string(c.n) + "x" + std::to_string(c.k);
        ExpectSameAcrossThreads<float>(
            name, size_t(c.batch * c.m * c.n),
            [&](osp_stream *s, float *out) {
                osp_gemm_ex_args x = {};
                x.gemm.trans_a = c.ta;
                x.gemm.trans_b = c.tb;
                x.gemm.m = c.m, x.gemm.n = c.n, x.gemm.k = c.k;
                x.gemm.alpha = 0.5f;
                x.gemm.beta = 0.0f;
                x.gemm.dtype = OSP_TYPE_FP32;
                x.gemm.a = a.data();
                x.gemm.lda = c.ta ? c.m : c.k;
                x.gemm.b = b.data();
                x.gemm.ldb = c.tb ? c.k : c.n;
                x.gemm.c = out;
                x.gemm.ldc = c.n;
                x.batch_count = c.batch;
                x.stride_a = c.m * c.k;
                x.stride_b = c.k * c.n;
                x.stride_c = c.m * c.n;
                x.bias = bias.data();
                x.residual = res.data();
                x.act = OSP_UNARY_GELU;
                return osp_op_gemm_ex(s, &x);
            },
            1e-5);
        if (c.batch != 1)
            continue;
        ExpectSameAcrossThreads<float>(
            "gemm " + name, size_t(c.m * c.n),
            [&](osp_stream *s, float *out) {
                for (int64_t i = 0; i < c.m * c.n; i++)
                    out[i] = res[size_t(i)];
                osp_gemm_args g = {};
                g.trans_a = c.ta;
                g.trans_b = c.tb;
                g.m = c.m, g.n = c.n, g.k = c.k;
                g.alpha = 1.0f;
                g.beta = 0.25f;
                g.dtype = OSP_TYPE_FP32;
                g.a = a.data();
                g.lda = c.ta ? c.m : c.k;
                g.b = b.data();
                g.ldb = c.tb ? c.k : c.n;
                g.c = out;
                g.ldc = c.n;
                return osp_op_gemm(s, &g);
            },
            1e-5);
    }
}

// Ops running on several streams at once, each with its own cap, give
// what they give alone.
TEST(StreamThreads, StreamsRunConcurrently) {
    osp_conv_args a = Conv2d(1, 32, 32, 1, 28, 3, 1, 1);
    auto x = Random(size_t(32 * 28 * 28), 19);
    auto w = Random(size_t(32 * 32 * 9), 20);
    a.x = x.data();
    a.w = w.data();
    std::vector<float> want(size_t(32 * 28 * 28));
    {
        osp_stream *s = nullptr;
        ASSERT_OK(osp_stream_new(osp_device_cpu(), &s));
        ASSERT_OK(osp_stream_set_threads(s, 1));
        osp_conv_args b = a;
        b.y = want.data();
        ASSERT_OK(osp_op_conv(s, &b));
        osp_stream_free(s);
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> runners;
    for (int t = 0; t < 4; t++)
        runners.emplace_back([&, t] {
            osp_stream *s = nullptr;
            if (osp_stream_new(osp_device_cpu(), &s) != nullptr) {
                mismatches.fetch_add(1);
                return;
            }
            osp_error_free(osp_stream_set_threads(s, 1 + t));
            std::vector<float> y(want.size());
            for (int i = 0; i < 20; i++) {
                osp_conv_args b = a;
                b.y = y.data();
                osp_error *err = osp_op_conv(s, &b);
                if (err != nullptr) {
                    osp_error_free(err);
                    mismatches.fetch_add(1);
                    continue;
                }
                for (size_t j = 0; j < y.size(); j++)
                    if (std::fabs(y[j] - want[j]) >
                        1e-5 * (1.0 + std::fabs(want[j]))) {
                        mismatches.fetch_add(1);
                        break;
                    }
            }
            osp_stream_free(s);
        });
    for (auto &r : runners)
        r.join();
    EXPECT_EQ(mismatches.load(), 0);
}

} // namespace

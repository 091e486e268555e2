// The CUDA device's neural-network slots (cuda/cuda_ops_nn.c and the
// kernels of cuda/kernels_conv.cu, kernels_pool.cu, kernels_reduce.cu,
// kernels_norm.cu) against the CPU device: conv (implicit GEMM,
// depthwise, pointwise through cuBLAS, TF32 and FP16 operands through
// im2col and cuBLAS in chunks; groups, strides, pads, dilations, the
// epilogue), conv_transpose, pool, reduce, softmax, layer_norm and
// channel_affine, over odd, 1-element, wide and block-sized shapes. Over
// the fake runtime (tests/fake_cuda) the kernels' own code runs on the
// host; as _gpu on a real GPU.
#include "cuda_ops_compare.h"

#ifdef OSPREY_TEST_FAKE_CUDA
#include "fake_cuda.h"
#endif

namespace {

class CudaOps : public CudaOpsTest {};

// Elements a host-side FP32 tensor of `count` elements takes.
Bytes FloatZeros(size_t count) {
    return Bytes(count * sizeof(float), 0);
}

// ---- conv -------------------------------------------------------------------

struct ConvCase {
    const char *name;
    int rank;
    int64_t batch, in_channels, out_channels, group;
    int64_t in[3], kernel[3], stride[3], pad_begin[3], pad_end[3], dilation[3];
};

// ONNX's output size: floor((in + pads - dilated kernel) / stride) + 1.
int64_t ConvOut(const ConvCase &c, int d) {
    return (c.in[d] + c.pad_begin[d] + c.pad_end[d] -
            c.dilation[d] * (c.kernel[d] - 1) - 1) /
               c.stride[d] +
           1;
}

const ConvCase kConvCases[] = {
    {"3x3", 2, 2, 3, 5, 1, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    {"stride2_odd",
     2,
     1,
     4,
     6,
     1,
     {11, 8},
     {3, 2},
     {2, 2},
     {1, 0},
     {0, 1},
     {1, 1}},
    {"dilation2",
     2,
     2,
     2,
     3,
     1,
     {9, 10},
     {3, 3},
     {1, 2},
     {2, 1},
     {2, 2},
     {2, 3}},
    {"groups2", 2, 2, 4, 6, 2, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    {"depthwise3x3",
     2,
     2,
     5,
     5,
     5,
     {9, 8},
     {3, 3},
     {1, 1},
     {1, 1},
     {1, 1},
     {1, 1}},
    {"depthwise_s2",
     2,
     1,
     6,
     6,
     6,
     {10, 9},
     {3, 3},
     {2, 2},
     {1, 1},
     {0, 1},
     {1, 1}},
    {"depthwise_mult2",
     2,
     2,
     3,
     6,
     3,
     {5, 6},
     {5, 3},
     {1, 2},
     {2, 1},
     {2, 1},
     {1, 1}},
    {"pointwise",
     2,
     3,
     8,
     5,
     1,
     {6, 5},
     {1, 1},
     {1, 1},
     {0, 0},
     {0, 0},
     {1, 1}},
    {"pointwise_groups",
     2,
     2,
     8,
     6,
     2,
     {3, 5},
     {1, 1},
     {1, 1},
     {0, 0},
     {0, 0},
     {1, 1}},
    {"1x1_stride2",
     2,
     2,
     4,
     3,
     1,
     {7, 7},
     {1, 1},
     {2, 2},
     {0, 0},
     {0, 0},
     {1, 1}},
    {"1d", 1, 2, 3, 4, 1, {17}, {5}, {2}, {2}, {1}, {1}},
    {"3d",
     3,
     1,
     2,
     3,
     1,
     {4, 5, 6},
     {3, 2, 3},
     {1, 2, 1},
     {1, 0, 1},
     {1, 1, 0},
     {1, 1, 2}},
    // More than one 64 x 64 tile of channels and positions, K > 16.
    {"tiles", 2, 1, 5, 70, 1, {12, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    {"single", 2, 1, 1, 1, 1, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}},
};

// Fills args from c (pointers from p: x, w, bias, residual, y).
osp_conv_args ConvArgs(const ConvCase &c, const Ptrs &p, bool transpose) {
    osp_conv_args a = {};
    a.spatial_rank = c.rank;
    a.batch = c.batch;
    a.in_channels = c.in_channels;
    a.out_channels = c.out_channels;
    a.group = c.group;
    for (int d = 0; d < c.rank; d++) {
        a.in_dims[d] = c.in[d];
        // conv_transpose: out = (in - 1) stride - pads + dilated kernel
        // (+ the output padding, here pad_end's spare).
        a.out_dims[d] =
            transpose ? (c.in[d] - 1) * c.stride[d] - c.pad_begin[d] +
                            c.dilation[d] * (c.kernel[d] - 1) + 1 + c.pad_end[d]
                      : ConvOut(c, d);
        a.kernel[d] = c.kernel[d];
        a.stride[d] = c.stride[d];
        a.pad_begin[d] = c.pad_begin[d];
        a.dilation[d] = c.dilation[d];
    }
    a.x = (const float *)p[0];
    a.w = (const float *)p[1];
    a.bias = (const float *)p[2];
    a.residual = (const float *)p[3];
    a.y = (float *)p[4];
    return a;
}

// Element counts of x, w and y for c.
void ConvCounts(const ConvCase &c, bool transpose, size_t *x, size_t *w,
                size_t *y) {
    osp_conv_args a = ConvArgs(c, Ptrs(5, nullptr), transpose);
    size_t in = 1, out = 1, k = 1;
    for (int d = 0; d < c.rank; d++) {
        in *= (size_t)a.in_dims[d];
        out *= (size_t)a.out_dims[d];
        k *= (size_t)a.kernel[d];
    }
    *x = (size_t)(c.batch * c.in_channels) * in;
    *w = transpose ? (size_t)(c.in_channels * (c.out_channels / c.group)) * k
                   : (size_t)(c.out_channels * (c.in_channels / c.group)) * k;
    *y = (size_t)(c.batch * c.out_channels) * out;
}

TEST_P(CudaOps, Conv) {
    for (const ConvCase &c : kConvCases)
        for (int epilogue = 0; epilogue < 3; epilogue++) {
            SCOPED_TRACE(testing::Message()
                         << c.name << " epilogue " << epilogue);
            size_t xn, wn, yn;
            ConvCounts(c, false, &xn, &wn, &yn);
            std::vector<Bytes> arrays = {
                Floats(xn), Floats(wn),
                epilogue > 0 ? Floats((size_t)c.out_channels) : Bytes(),
                epilogue > 1 ? Floats(yn) : Bytes(), FloatZeros(yn)};
            osp_unary_op act = epilogue == 0   ? OSP_UNARY_IDENTITY
                               : epilogue == 1 ? OSP_UNARY_RELU
                                               : OSP_UNARY_HARD_SWISH;
            Op op = [&](osp_stream *s, const Ptrs &p) {
                osp_conv_args a = ConvArgs(c, p, false);
                a.act = act;
                return osp_op_conv(s, &a);
            };
            ASSERT_NO_FATAL_FAILURE(
                Compare(op, arrays, {{4, OSP_TYPE_FP32}}, 1e-5));
        }
}

// A clip with its two bounds, on the depthwise and implicit-GEMM kernels.
TEST_P(CudaOps, ConvClipEpilogue) {
    for (const ConvCase &c : {kConvCases[0], kConvCases[4]}) {
        size_t xn, wn, yn;
        ConvCounts(c, false, &xn, &wn, &yn);
        std::vector<Bytes> arrays = {Floats(xn), Floats(wn),
                                     Floats((size_t)c.out_channels), Floats(yn),
                                     FloatZeros(yn)};
        Op op = [&](osp_stream *s, const Ptrs &p) {
            osp_conv_args a = ConvArgs(c, p, false);
            a.act = OSP_UNARY_CLIP;
            a.act_alpha = -0.5f;
            a.act_beta = 6.0f;
            return osp_op_conv(s, &a);
        };
        ASSERT_NO_FATAL_FAILURE(
            Compare(op, arrays, {{4, OSP_TYPE_FP32}}, 1e-5));
    }
}

// ---- conv through cuBLAS: TF32 and FP16 operands ---------------------------

// What the GEMM route (cuda/cuda_conv_gemm.c) is given to lay im2col
// matrices in: what osp_conv_workspace_bytes asks for (the whole batch
// at once), two images' matrices (chunks of images, the last one short
// when the batch is odd), three output positions' columns (chunks of
// positions, the last one short), or less than one column (TF32 then
// stays FP32 on the device's own kernel).
enum WorkspaceSize { kWholeBatch, kTwoImages, kThreePositions, kTooSmall };

size_t WorkspaceFor(const osp_conv_args &a, bool fp16, WorkspaceSize size) {
    size_t taps = 1, positions = 1;
    for (int d = 0; d < a.spatial_rank; d++) {
        taps *= (size_t)a.kernel[d];
        positions *= (size_t)a.out_dims[d];
    }
    size_t column = (size_t)a.in_channels * taps * (fp16 ? 2 : 4);
    switch (size) {
    case kWholeBatch:
        return osp_conv_workspace_bytes(&a, fp16);
    case kTwoImages:
        return 2 * column * positions;
    case kThreePositions:
        return 3 * column;
    case kTooSmall:
        return column - 1;
    }
    return 0;
}

// GEMM calls the fake cuBLAS made in a precision so far (0 on a GPU).
unsigned long GemmCalls(bool fp16) {
#ifdef OSPREY_TEST_FAKE_CUDA
    fake_cublas_counts c;
    fake_cublas_counts_get(&c);
    return fp16 ? c.fp16_fp32c : c.tf32;
#else
    (void)fp16;
    return 0;
#endif
}

const ConvCase kGemmRouteCases[] = {
    {"batch5", 2, 5, 3, 4, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    {"batch5_groups2",
     2,
     5,
     4,
     6,
     2,
     {4, 5},
     {2, 3},
     {2, 1},
     {0, 1},
     {1, 1},
     {1, 2}},
};

// conv c through the GEMM route: the FP16 form (w_fp16, w not given) or
// TF32, in a workspace of `size`, against the CPU device: the FP16 form
// to FP32 rounding of the CPU's own FP16 form (x and w rounded the same
// way) and within 1e-2 of its FP32 conv (11 significant bits per
// operand), TF32 within 5e-3 of FP32 (and, on the fake, away from it:
// the inputs really were rounded). The fake cuBLAS's counts show the
// route ran, a call at least per chunk.
void RunConvGemmRoute(CudaOps *t, const ConvCase &c, bool fp16,
                      WorkspaceSize size, int epilogue) {
    SCOPED_TRACE(testing::Message()
                 << c.name << (fp16 ? " fp16" : " tf32") << " workspace "
                 << size << " epilogue " << epilogue);
    size_t xn, wn, yn;
    ConvCounts(c, false, &xn, &wn, &yn);
    osp_conv_args shape = ConvArgs(c, Ptrs(5, nullptr), false);
    shape.allow_tf32 = !fp16;
    size_t ws = WorkspaceFor(shape, fp16, size);
    Bytes w = t->Floats(wn), w16(wn * 2);
    for (size_t i = 0; i < wn; i++) {
        float f;
        memcpy(&f, &w[i * 4], 4);
        uint16_t h = fp32_to_fp16(f);
        memcpy(&w16[i * 2], &h, 2);
    }
    std::vector<Bytes> arrays = {
        t->Floats(xn),
        w,
        epilogue > 0 ? t->Floats((size_t)c.out_channels) : Bytes(),
        epilogue > 1 ? t->Floats(yn) : Bytes(),
        FloatZeros(yn),
        w16,
        Bytes(std::max<size_t>(ws, 1), 0)};
    osp_unary_op act = epilogue == 0 ? OSP_UNARY_IDENTITY : OSP_UNARY_RELU;
    auto conv = [&](bool route) {
        return [&, route](osp_stream *s, const Ptrs &p) {
            osp_conv_args a = ConvArgs(c, p, false);
            a.act = act;
            if (route && fp16) {
                a.w = nullptr;
                a.w_fp16 = p[5];
            }
            a.allow_tf32 = route && !fp16;
            a.workspace = route ? p[6] : nullptr;
            a.workspace_bytes = route ? ws : 0;
            return osp_op_conv(s, &a);
        };
    };
    unsigned long calls = GemmCalls(fp16);
    std::vector<Bytes> got = arrays, same = arrays, fp32 = arrays;
    ASSERT_NO_FATAL_FAILURE(t->RunArrays(true, conv(true), got));
    unsigned long made = GemmCalls(fp16) - calls;
    ASSERT_NO_FATAL_FAILURE(t->RunArrays(false, conv(true), same));
    ASSERT_NO_FATAL_FAILURE(t->RunArrays(false, conv(false), fp32));
    double to_same =
        CudaOpsTest::ScaledError(OSP_TYPE_FP32, got[4], same[4], yn);
    double to_fp32 =
        CudaOpsTest::ScaledError(OSP_TYPE_FP32, got[4], fp32[4], yn);
    bool pointwise = WorkspaceFor(shape, false, kWholeBatch) == 0;
    // The chunks the workspace makes: whole images while one fits, else
    // runs of positions of one image.
    size_t positions = yn / (size_t)(c.batch * c.out_channels);
    size_t column = WorkspaceFor(shape, fp16, kThreePositions) / 3;
    size_t images = ws / (column * positions), batch = (size_t)c.batch;
    size_t run = std::max<size_t>(ws / column, 1);
    unsigned long chunks =
        images >= 1 ? (unsigned long)((batch + images - 1) / images)
                    : (unsigned long)(batch * ((positions + run - 1) / run));
    if (fp16) {
        EXPECT_LE(to_same, 2e-5);
        EXPECT_LE(to_fp32, 1e-2);
        if (kFakeCuda) {
            EXPECT_GE(made, chunks);
        }
    } else if (size == kTooSmall && !pointwise) {
        EXPECT_LE(to_fp32, 1e-5); // the FP32 kernel
        EXPECT_EQ(made, 0u);
    } else {
        EXPECT_LE(to_fp32, 5e-3);
        if (kFakeCuda) {
            EXPECT_GE(made, pointwise ? 1 : chunks);
            if (xn * wn > 100) {
                EXPECT_GT(to_fp32, 1e-6) << "not TF32";
            }
        }
    }
}

TEST_P(CudaOps, ConvGemmRoute) {
    int i = 0;
    auto run = [&](const ConvCase &c) {
        if (c.group > 1 && c.in_channels == c.group)
            return; // depthwise: FP32 only
        for (bool fp16 : {true, false})
            for (WorkspaceSize size :
                 {kWholeBatch, kTwoImages, kThreePositions, kTooSmall}) {
                if (fp16 && size == kTooSmall)
                    continue; // refused: ConvFp16WeightsNeedAWorkspace
                ASSERT_NO_FATAL_FAILURE(
                    RunConvGemmRoute(this, c, fp16, size, i++ % 3));
            }
    };
    for (const ConvCase &c : kConvCases)
        run(c);
    for (const ConvCase &c : kGemmRouteCases)
        run(c);
}

// The FP16 form needs a column's worth of workspace, and depthwise convs
// keep their FP32 kernel: both refused by the dispatcher, nothing runs.
TEST_P(CudaOps, ConvFp16WeightsNeedAWorkspace) {
    for (const ConvCase &c : {kConvCases[0], kConvCases[4]}) {
        size_t xn, wn, yn;
        ConvCounts(c, false, &xn, &wn, &yn);
        BufferPtr x = Alloc(xn * 4), w16 = Alloc(wn * 2), y = Alloc(yn * 4),
                  ws = Alloc(1 << 16);
        ASSERT_TRUE(x && w16 && y && ws);
        osp_conv_args a =
            ConvArgs(c, {x->data, nullptr, nullptr, nullptr, y->data}, false);
        a.w_fp16 = w16->data;
        a.workspace = ws->data;
        a.workspace_bytes = WorkspaceFor(a, true, kTooSmall);
        EXPECT_ERROR_CODE(osp_op_conv(stream_.get(), &a),
                          OSP_ERROR_INVALID_ARG);
        a.workspace_bytes = 1 << 16;
        if (c.group > 1)
            EXPECT_ERROR_CODE(osp_op_conv(stream_.get(), &a),
                              OSP_ERROR_INVALID_ARG);
        else
            ASSERT_OK(osp_op_conv(stream_.get(), &a));
    }
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
}

// Depthwise convs stay on their FP32 kernel under allow_tf32.
TEST_P(CudaOps, ConvDepthwiseStaysFp32UnderTf32) {
    const ConvCase &c = kConvCases[4];
    size_t xn, wn, yn;
    ConvCounts(c, false, &xn, &wn, &yn);
    std::vector<Bytes> arrays = {Floats(xn), Floats(wn), Bytes(), Bytes(),
                                 FloatZeros(yn)};
    Op op = [&](osp_stream *s, const Ptrs &p) {
        osp_conv_args a = ConvArgs(c, p, false);
        a.allow_tf32 = true;
        return osp_op_conv(s, &a);
    };
    unsigned long calls = GemmCalls(false);
    ASSERT_NO_FATAL_FAILURE(Compare(op, arrays, {{4, OSP_TYPE_FP32}}, 1e-5));
    EXPECT_EQ(GemmCalls(false), calls);
}

TEST_P(CudaOps, ConvTranspose) {
    const ConvCase cases[] = {
        {"s2", 2, 2, 3, 4, 1, {4, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}},
        {"groups_dil",
         2,
         1,
         4,
         6,
         2,
         {5, 3},
         {2, 3},
         {1, 3},
         {0, 2},
         {0, 2},
         {2, 1}},
        {"1d", 1, 2, 2, 3, 1, {7}, {4}, {3}, {1}, {2}, {1}},
        {"3d",
         3,
         1,
         2,
         2,
         1,
         {2, 3, 4},
         {2, 2, 3},
         {2, 1, 2},
         {0, 1, 1},
         {1, 0, 0},
         {1, 1, 1}},
    };
    for (const ConvCase &c : cases)
        for (bool bias : {false, true}) {
            SCOPED_TRACE(testing::Message() << c.name << " bias " << bias);
            size_t xn, wn, yn;
            ConvCounts(c, true, &xn, &wn, &yn);
            std::vector<Bytes> arrays = {Floats(xn), Floats(wn),
                                         bias ? Floats((size_t)c.out_channels)
                                              : Bytes(),
                                         Bytes(), FloatZeros(yn)};
            Op op = [&](osp_stream *s, const Ptrs &p) {
                osp_conv_transpose_args a = ConvArgs(c, p, true);
                return osp_op_conv_transpose(s, &a);
            };
            ASSERT_NO_FATAL_FAILURE(
                Compare(op, arrays, {{4, OSP_TYPE_FP32}}, 1e-5));
        }
}

// ---- pool -------------------------------------------------------------------

struct PoolCase {
    const char *name;
    int rank;
    int64_t planes;
    int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
};

TEST_P(CudaOps, Pool) {
    const PoolCase cases[] = {
        {"2x2s2", 2, 3, {8, 7}, {4, 4}, {2, 2}, {2, 2}, {0, 0}, {1, 1}},
        {"3x3s2_pad", 2, 2, {9, 9}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
        {"ceil_mode", 2, 2, {6, 7}, {3, 4}, {3, 2}, {2, 2}, {0, 1}, {1, 1}},
        {"dilation", 2, 1, {9, 8}, {5, 4}, {2, 3}, {2, 2}, {1, 1}, {3, 2}},
        {"global", 2, 4, {7, 9}, {1, 1}, {7, 9}, {1, 1}, {0, 0}, {1, 1}},
        {"1d", 1, 3, {13}, {6}, {4}, {2}, {1}, {1}},
        {"3d",
         3,
         2,
         {4, 5, 6},
         {2, 3, 3},
         {2, 3, 2},
         {2, 2, 2},
         {0, 1, 0},
         {1, 1, 1}},
        {"single", 2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {1, 1}},
    };
    struct Kind {
        osp_pool_kind kind;
        bool include_pad, indices;
        float p;
    };
    const Kind kinds[] = {
        {OSP_POOL_MAX, false, false, 0}, {OSP_POOL_MAX, false, true, 0},
        {OSP_POOL_AVG, false, false, 0}, {OSP_POOL_AVG, true, false, 0},
        {OSP_POOL_LP, false, false, 2},  {OSP_POOL_LP, false, false, 3},
        {OSP_POOL_LP, false, false, 1},
    };
    for (const PoolCase &c : cases)
        for (const Kind &k : kinds) {
            SCOPED_TRACE(testing::Message()
                         << c.name << " kind " << k.kind << " include_pad "
                         << k.include_pad << " indices " << k.indices << " p "
                         << k.p);
            size_t in = 1, out = 1;
            for (int d = 0; d < c.rank; d++) {
                in *= (size_t)c.in[d];
                out *= (size_t)c.out[d];
            }
            Bytes x = Floats((size_t)c.planes * in);
            if (in > 2) { // a NaN, which never wins a MAX
                float nan = NAN;
                memcpy(x.data() + 4, &nan, 4);
            }
            std::vector<Bytes> arrays = {
                x, FloatZeros((size_t)c.planes * out),
                k.indices ? Bytes((size_t)c.planes * out * 8) : Bytes()};
            Op op = [&](osp_stream *s, const Ptrs &p) {
                osp_pool_args a = {};
                a.kind = k.kind;
                a.spatial_rank = c.rank;
                a.planes = c.planes;
                for (int d = 0; d < c.rank; d++) {
                    a.in_dims[d] = c.in[d];
                    a.out_dims[d] = c.out[d];
                    a.kernel[d] = c.kernel[d];
                    a.stride[d] = c.stride[d];
                    a.pad_begin[d] = c.pad[d];
                    a.dilation[d] = c.dilation[d];
                }
                a.count_include_pad = k.include_pad;
                a.p = k.p;
                a.x = (const float *)p[0];
                a.y = (float *)p[1];
                a.indices = (int64_t *)p[2];
                return osp_op_pool(s, &a);
            };
            std::vector<Output> outputs = {{1, OSP_TYPE_FP32}};
            if (k.indices)
                outputs.push_back({2, OSP_TYPE_INT64});
            // MAX picks values: bit for bit; the sums may round apart.
            ASSERT_NO_FATAL_FAILURE(Compare(op, arrays, outputs,
                                            k.kind == OSP_POOL_MAX ? 0 : 1e-5));
        }
}

// ---- reduce -----------------------------------------------------------------

struct Shape3 {
    int64_t outer, n, inner;
};

// Lines (a block each: inner below 32, n at least 64), a thread per line
// (wider inner, or short lines), an empty axis, one element.
const Shape3 kShapes[] = {{1, 1, 1},  {3, 7, 1},  {2, 700, 1},  {2, 300, 3},
                          {2, 33, 3}, {2, 5, 40}, {1, 300, 33}, {4, 0, 3}};

TEST_P(CudaOps, ReduceFp32) {
    for (int op = 0; op < OSP_REDUCE_OP_COUNT_; op++)
        for (const Shape3 &sh : kShapes)
            for (bool last : {false, true}) {
                osp_reduce_op rop = (osp_reduce_op)op;
                bool arg = rop == OSP_REDUCE_ARGMAX || rop == OSP_REDUCE_ARGMIN;
                if ((arg && sh.n == 0) || (last && !arg))
                    continue;
                SCOPED_TRACE(testing::Message()
                             << "op " << op << " shape " << sh.outer << "x"
                             << sh.n << "x" << sh.inner << " last " << last);
                size_t in = (size_t)(sh.outer * sh.n * sh.inner),
                       out = (size_t)(sh.outer * sh.inner);
                // Positive data for the logs and products near 1; ties
                // (small integers) for the args, and a NaN.
                Bytes x = Floats(in, 0.5, 1.5);
                for (size_t i = 0; i < in; i++) {
                    float v = ValueAt(OSP_TYPE_FP32, x.data(), i);
                    if (arg)
                        v = (float)(int)(v * 4.0f);
                    else if (rop != OSP_REDUCE_LOG_SUM &&
                             rop != OSP_REDUCE_PROD && Rng().Bit())
                        v = -v;
                    memcpy(x.data() + 4 * i, &v, 4);
                }
                if (in > 5 && rop != OSP_REDUCE_PROD) {
                    float nan = NAN;
                    memcpy(x.data() + 4 * 5, &nan, 4);
                }
                std::vector<Bytes> arrays = {x, Bytes(out * (arg ? 8 : 4))};
                Op run = [&](osp_stream *s, const Ptrs &p) {
                    osp_reduce_args a = {rop,  OSP_TYPE_FP32, p[0], sh.outer,
                                         sh.n, sh.inner,      p[1], last};
                    return osp_op_reduce(s, &a);
                };
                ASSERT_NO_FATAL_FAILURE(Compare(
                    run, arrays, {{1, arg ? OSP_TYPE_INT64 : OSP_TYPE_FP32}},
                    arg || rop == OSP_REDUCE_MAX || rop == OSP_REDUCE_MIN
                        ? 0
                        : 1e-6));
            }
}

// Integers over their whole range: sums and products wrap, bit for bit.
TEST_P(CudaOps, ReduceIntegers) {
    const osp_reduce_op ops[] = {OSP_REDUCE_SUM,    OSP_REDUCE_PROD,
                                 OSP_REDUCE_MAX,    OSP_REDUCE_MIN,
                                 OSP_REDUCE_ARGMAX, OSP_REDUCE_ARGMIN};
    for (osp_datatype dt : {OSP_TYPE_INT32, OSP_TYPE_INT64})
        for (osp_reduce_op op : ops)
            for (const Shape3 &sh : kShapes)
                for (bool last : {false, true}) {
                    bool arg =
                        op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN;
                    if ((arg && sh.n == 0) || (last && !arg))
                        continue;
                    SCOPED_TRACE(testing::Message()
                                 << osp_datatype_wire_name(dt) << " op " << op
                                 << " shape " << sh.outer << "x" << sh.n << "x"
                                 << sh.inner << " last " << last);
                    size_t in = (size_t)(sh.outer * sh.n * sh.inner),
                           out = (size_t)(sh.outer * sh.inner);
                    Bytes x = Rng().Data(dt, in);
                    if (arg && IsSignedInt(dt)) // ties
                        for (size_t i = 0; i < in; i += 3)
                            memcpy(x.data() + i * ByteSize(dt), x.data(),
                                   ByteSize(dt));
                    std::vector<Bytes> arrays = {
                        x, Bytes(out * (arg ? 8 : ByteSize(dt)))};
                    Op run = [&](osp_stream *s, const Ptrs &p) {
                        osp_reduce_args a = {op,   dt,       p[0], sh.outer,
                                             sh.n, sh.inner, p[1], last};
                        return osp_op_reduce(s, &a);
                    };
                    ASSERT_NO_FATAL_FAILURE(Compare(
                        run, arrays, {{1, arg ? OSP_TYPE_INT64 : dt}}, 0));
                }
}

// ---- softmax, layer_norm, channel_affine ---------------------------------

TEST_P(CudaOps, Softmax) {
    const Shape3 shapes[] = {{1, 1, 1},  {3, 7, 1},  {2, 700, 1},  {2, 300, 3},
                             {2, 33, 3}, {2, 5, 40}, {1, 300, 33}, {3, 1, 35}};
    for (const Shape3 &sh : shapes)
        for (bool log : {false, true})
            for (bool in_place : {false, true}) {
                SCOPED_TRACE(testing::Message()
                             << sh.outer << "x" << sh.n << "x" << sh.inner
                             << " log " << log << " in_place " << in_place);
                size_t count = (size_t)(sh.outer * sh.n * sh.inner);
                Bytes x = Floats(count, 0.1, 20.0);
                if (count > 3) { // -inf takes no share
                    float ninf = -INFINITY;
                    memcpy(x.data() + 12, &ninf, 4);
                }
                std::vector<Bytes> arrays = {x, FloatZeros(count)};
                Op op = [&](osp_stream *s, const Ptrs &p) {
                    osp_softmax_args a = {(const float *)p[0],
                                          (float *)(in_place ? p[0] : p[1]),
                                          sh.outer,
                                          sh.n,
                                          sh.inner,
                                          log};
                    return osp_op_softmax(s, &a);
                };
                ASSERT_NO_FATAL_FAILURE(Compare(
                    op, arrays, {{in_place ? 0u : 1u, OSP_TYPE_FP32}}, 1e-6));
            }
}

TEST_P(CudaOps, LayerNorm) {
    const std::pair<int64_t, int64_t> shapes[] = {
        {1, 1}, {3, 7}, {2, 700}, {33, 5}, {4, 0}};
    for (auto [rows, cols] : shapes)
        for (int variant = 0; variant < 4; variant++) {
            bool scale = variant & 1, bias = variant & 2,
                 in_place = variant == 3;
            SCOPED_TRACE(testing::Message()
                         << rows << "x" << cols << " variant " << variant);
            size_t count = (size_t)(rows * cols);
            std::vector<Bytes> arrays = {
                count ? Floats(count, 0.1, 5.0) : Bytes(),
                scale && cols ? Floats((size_t)cols) : Bytes(),
                bias && cols ? Floats((size_t)cols) : Bytes(),
                count ? FloatZeros(count) : Bytes(),
                FloatZeros((size_t)rows),
                FloatZeros((size_t)rows)};
            Op op = [&](osp_stream *s, const Ptrs &p) {
                osp_layer_norm_args a = {(const float *)p[0],
                                         (const float *)p[1],
                                         (const float *)p[2],
                                         (float *)(in_place ? p[0] : p[3]),
                                         rows,
                                         cols,
                                         1e-5f,
                                         (float *)p[4],
                                         (float *)p[5]};
                return osp_op_layer_norm(s, &a);
            };
            std::vector<Output> outputs = {{4, OSP_TYPE_FP32},
                                           {5, OSP_TYPE_FP32}};
            if (count)
                outputs.push_back({in_place ? 0u : 3u, OSP_TYPE_FP32});
            ASSERT_NO_FATAL_FAILURE(Compare(op, arrays, outputs, 1e-5));
        }
}

TEST_P(CudaOps, ChannelAffine) {
    const osp_unary_op acts[] = {OSP_UNARY_IDENTITY, OSP_UNARY_RELU,
                                 OSP_UNARY_CLIP,     OSP_UNARY_LEAKY_RELU,
                                 OSP_UNARY_SIGMOID,  OSP_UNARY_SILU};
    for (osp_unary_op act : acts)
        for (int variant = 0; variant < 4; variant++) {
            bool scale = variant & 1, shift = variant & 2,
                 in_place = variant == 3;
            SCOPED_TRACE(testing::Message()
                         << "act " << act << " variant " << variant);
            const int64_t batch = 2, channels = 5, spatial = 13;
            size_t count = (size_t)(batch * channels * spatial);
            std::vector<Bytes> arrays = {
                Floats(count), scale ? Floats(channels) : Bytes(),
                shift ? Floats(channels) : Bytes(), FloatZeros(count)};
            Op op = [&](osp_stream *s, const Ptrs &p) {
                osp_channel_affine_args a = {(const float *)p[0],
                                             (float *)(in_place ? p[0] : p[3]),
                                             batch,
                                             channels,
                                             spatial,
                                             (const float *)p[1],
                                             (const float *)p[2],
                                             act,
                                             0.1f,
                                             0.9f};
                return osp_op_channel_affine(s, &a);
            };
            ASSERT_NO_FATAL_FAILURE(Compare(
                op, arrays, {{in_place ? 0u : 3u, OSP_TYPE_FP32}}, 1e-6));
        }
}

// Zero output elements: every slot succeeds without touching memory (the
// pointers are NULL).
TEST_P(CudaOps, EmptyShapesDoNothing) {
    osp_stream *s = stream_.get();
    Ptrs none(5, nullptr);
    osp_conv_args cv = ConvArgs(kConvCases[0], none, false);
    cv.batch = 0;
    ASSERT_OK(osp_op_conv(s, &cv));
    ASSERT_OK(osp_op_conv_transpose(s, &cv));
    osp_pool_args pl = {};
    pl.kind = OSP_POOL_AVG;
    pl.spatial_rank = 1;
    pl.in_dims[0] = 4;
    pl.out_dims[0] = 2;
    pl.kernel[0] = pl.stride[0] = pl.dilation[0] = 1;
    ASSERT_OK(osp_op_pool(s, &pl)); // planes 0
    osp_reduce_args rd = {OSP_REDUCE_SUM, OSP_TYPE_FP32, nullptr, 0, 4, 3,
                          nullptr,        false};
    ASSERT_OK(osp_op_reduce(s, &rd));
    osp_softmax_args sm = {nullptr, nullptr, 3, 0, 2, true};
    ASSERT_OK(osp_op_softmax(s, &sm));
    osp_layer_norm_args ln = {nullptr, nullptr, nullptr, nullptr, 0,
                              8,       1e-5f,   nullptr, nullptr};
    ASSERT_OK(osp_op_layer_norm(s, &ln));
    osp_channel_affine_args ca = {nullptr, nullptr,        2, 0, 5, nullptr,
                                  nullptr, OSP_UNARY_RELU, 0, 0};
    ASSERT_OK(osp_op_channel_affine(s, &ca));
    ASSERT_OK(osp_stream_synchronize(s));
}

// Host memory where device memory belongs: every slot's launch fails.
TEST_P(CudaOps, HostPointersFail) {
    if (!kFakeCuda)
        GTEST_SKIP() << "a real GPU would fault, not refuse";
    std::vector<float> x(64, 1.0f), y(64), w(64, 1.0f);
    osp_stream *s = stream_.get();
    auto expect_fail = [](osp_error *err, const char *what) {
        EXPECT_NE(err, nullptr) << what;
        osp_error_free(err);
    };
    osp_softmax_args sm = {x.data(), y.data(), 1, 8, 1, false};
    expect_fail(osp_op_softmax(s, &sm), "softmax");
    osp_reduce_args rd = {OSP_REDUCE_SUM, OSP_TYPE_FP32, x.data(), 2, 4, 1,
                          y.data(),       false};
    expect_fail(osp_op_reduce(s, &rd), "reduce");
    osp_layer_norm_args ln = {x.data(), nullptr, nullptr, y.data(), 2,
                              4,        1e-5f,   nullptr, nullptr};
    expect_fail(osp_op_layer_norm(s, &ln), "layer_norm");
    osp_channel_affine_args ca = {
        x.data(), y.data(),           1, 2, 4, nullptr,
        nullptr,  OSP_UNARY_IDENTITY, 0, 0};
    expect_fail(osp_op_channel_affine(s, &ca), "channel_affine");
    osp_pool_args pl = {};
    pl.kind = OSP_POOL_MAX;
    pl.spatial_rank = 1;
    pl.planes = 1;
    pl.in_dims[0] = 4;
    pl.out_dims[0] = 2;
    pl.kernel[0] = pl.stride[0] = 2;
    pl.dilation[0] = 1;
    pl.x = x.data();
    pl.y = y.data();
    expect_fail(osp_op_pool(s, &pl), "pool");
    const ConvCase &c = kConvCases[0];
    Ptrs p = {x.data(), w.data(), nullptr, nullptr, y.data()};
    osp_conv_args cv = ConvArgs(c, p, false);
    cv.batch = 1;
    cv.in_channels = cv.out_channels = 1;
    cv.in_dims[0] = cv.in_dims[1] = 3;
    cv.out_dims[0] = cv.out_dims[1] = 3;
    expect_fail(osp_op_conv(s, &cv), "conv");
    expect_fail(osp_op_conv_transpose(s, &cv), "conv_transpose");
    cv.kernel[0] = cv.kernel[1] = 1;
    cv.pad_begin[0] = cv.pad_begin[1] = 0;
    expect_fail(osp_op_conv(s, &cv), "conv (pointwise)");
    ASSERT_OK(osp_stream_synchronize(s));
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaOps,
                         ::testing::ValuesIn(DevicesUnderTest()), SpecName);

} // namespace

// The CUDA device's gemm_ex (cuda/cuda_gemm.c: cuBLASLt's matmul with its
// epilogue, or cuBLAS's strided-batched GEMM and the epilogue kernel of
// cuda/kernels_gemm.cu) against the CPU device:
// FP32, TF32 and FP16, transposes, padded leading dimensions, batches
// with broadcast operands, alpha and beta, and every part of the
// epilogue. Over the fake runtime (tests/fake_cuda) the GEMM is the fake
// cuBLAS's and the epilogue the kernel's own code; as _gpu on a real GPU.
#include "cuda_ops_compare.h"

namespace {

class CudaOps : public CudaOpsTest {};

struct GemmCase {
    int64_t m, n, k;
    bool trans_a, trans_b;
    int64_t batch;
    bool broadcast_a, broadcast_b;
    int64_t pad; // extra elements on every leading dimension
    float alpha, beta;
};

enum Epilogue { kNone, kBias, kResidual, kAll };

// Runs gemm_ex c on the device and the CPU; arrays a, b, c, bias, residual.
// c_dt: C's dtype when it is not dt's (FP32 C of FP16 operands).
void RunGemmCase(CudaOps *t, const GemmCase &gc, osp_datatype dt, bool tf32,
                 Epilogue ep, osp_unary_op act, double tol,
                 osp_datatype c_dt = OSP_TYPE_INVALID) {
    osp_datatype c_type = c_dt != OSP_TYPE_INVALID ? c_dt : dt;
    SCOPED_TRACE(testing::Message()
                 << "m=" << gc.m << " n=" << gc.n << " k=" << gc.k << " trans="
                 << gc.trans_a << gc.trans_b << " batch=" << gc.batch
                 << " bcast=" << gc.broadcast_a << gc.broadcast_b
                 << " pad=" << gc.pad << " dtype=" << osp_datatype_wire_name(dt)
                 << " c=" << osp_datatype_wire_name(c_type) << " tf32=" << tf32
                 << " epilogue=" << ep << " act=" << act);
    int64_t a_rows = gc.trans_a ? gc.k : gc.m,
            a_cols = gc.trans_a ? gc.m : gc.k;
    int64_t b_rows = gc.trans_b ? gc.n : gc.k,
            b_cols = gc.trans_b ? gc.k : gc.n;
    int64_t lda = std::max<int64_t>(a_cols, 1) + gc.pad,
            ldb = std::max<int64_t>(b_cols, 1) + gc.pad, ldc = gc.n + gc.pad;
    int64_t batch = std::max<int64_t>(gc.batch, 1);
    int64_t stride_a = gc.broadcast_a ? 0 : a_rows * lda + gc.pad;
    int64_t stride_b = gc.broadcast_b ? 0 : b_rows * ldb + gc.pad;
    int64_t stride_c = gc.m * ldc + gc.pad;
    // At least one element: an operand of k == 0 still needs a pointer.
    auto count = [&](int64_t stride, int64_t rows, int64_t ld) {
        return (size_t)std::max<int64_t>((batch - 1) * stride + rows * ld, 1);
    };
    Random &rng = t->Rng();
    std::vector<Bytes> arrays = {
        rng.Data(dt, count(stride_a, a_rows, lda), 0.1, 1.0),
        rng.Data(dt, count(stride_b, b_rows, ldb), 0.1, 1.0),
        rng.Data(c_type, count(stride_c, gc.m, ldc), 0.1, 1.0),
        ep == kBias || ep == kAll ? rng.Data(OSP_TYPE_FP32, gc.n) : Bytes(),
        ep == kResidual || ep == kAll
            ? rng.Data(OSP_TYPE_FP32, count(stride_c, gc.m, ldc))
            : Bytes(),
    };
    Op op = [&](osp_stream *s, const Ptrs &p) {
        osp_gemm_ex_args x = {};
        x.gemm = {.trans_a = gc.trans_a,
                  .trans_b = gc.trans_b,
                  .m = gc.m,
                  .n = gc.n,
                  .k = gc.k,
                  .alpha = gc.alpha,
                  .beta = gc.beta,
                  .dtype = dt,
                  .a = p[0],
                  .lda = lda,
                  .b = p[1],
                  .ldb = ldb,
                  .c = p[2],
                  .ldc = ldc,
                  .allow_tf32 = tf32,
                  .c_dtype = c_dt};
        x.batch_count = gc.batch;
        x.stride_a = stride_a;
        x.stride_b = stride_b;
        x.stride_c = stride_c;
        x.bias = (const float *)p[3];
        x.residual = (const float *)p[4];
        x.act = act;
        x.act_alpha = 0.1f;
        x.act_beta = 0.8f;
        return osp_op_gemm_ex(s, &x);
    };
    t->Compare(op, arrays, {{2, c_type}}, tol);
}

const GemmCase kCases[] = {
    {1, 1, 1, false, false, 0, false, false, 0, 1.0f, 0.0f},
    {7, 5, 3, false, false, 1, false, false, 0, 1.0f, 0.0f},
    {7, 5, 3, true, false, 1, false, false, 2, 0.5f, 1.0f},
    {7, 5, 3, false, true, 3, false, false, 1, 1.0f, 0.5f},
    {9, 13, 17, true, true, 3, false, false, 3, 2.0f, 0.0f},
    {33, 17, 65, false, false, 4, false, true, 0, 1.0f, 0.0f}, // shared B
    {5, 31, 8, false, true, 3, true, false, 1, 1.0f, 0.0f},    // shared A
    {6, 4, 0, false, false, 2, false, false, 0, 1.0f, 0.5f},   // k == 0
};

// Bias alone and a residual with ReLU are cuBLASLt epilogues (where beta
// is 0); GELU (erf) takes the epilogue kernel.
TEST_P(CudaOps, GemmExFp32) {
    for (const GemmCase &gc : kCases)
        for (Epilogue ep : {kNone, kBias, kResidual, kAll})
            ASSERT_NO_FATAL_FAILURE(
                RunGemmCase(this, gc, OSP_TYPE_FP32, false, ep,
                            ep == kResidual ? OSP_UNARY_RELU
                            : ep == kAll    ? OSP_UNARY_GELU
                                            : OSP_UNARY_IDENTITY,
                            1e-5));
}

TEST_P(CudaOps, GemmExActivations) {
    const GemmCase gc = {11, 9, 6, false, true, 2, false, false, 1, 1.0f, 0.0f};
    for (osp_unary_op act :
         {OSP_UNARY_RELU, OSP_UNARY_CLIP, OSP_UNARY_LEAKY_RELU,
          OSP_UNARY_SIGMOID, OSP_UNARY_TANH, OSP_UNARY_GELU_TANH,
          OSP_UNARY_SILU, OSP_UNARY_HARD_SWISH})
        ASSERT_NO_FATAL_FAILURE(
            RunGemmCase(this, gc, OSP_TYPE_FP32, false, kAll, act, 1e-5));
}

// TF32 keeps 10 mantissa bits of each input: about 1e-3 of the CPU's FP32.
TEST_P(CudaOps, GemmExTf32) {
    for (const GemmCase &gc : kCases)
        ASSERT_NO_FATAL_FAILURE(RunGemmCase(this, gc, OSP_TYPE_FP32, true, kAll,
                                            OSP_UNARY_RELU, 5e-3));
}

// FP16 storage, FP32 accumulation; C rounds to FP16 (twice with an
// epilogue, once on the CPU).
TEST_P(CudaOps, GemmExFp16) {
    for (const GemmCase &gc : kCases)
        for (Epilogue ep : {kNone, kAll})
            ASSERT_NO_FATAL_FAILURE(RunGemmCase(
                this, gc, OSP_TYPE_FP16, false, ep,
                ep == kNone ? OSP_UNARY_IDENTITY : OSP_UNARY_RELU, 5e-3));
}

// FP16 operands into an FP32 C (precision fp16's products): the sums are
// never rounded to FP16, so the device matches the CPU's widened sgemm to
// FP32 rounding (the operands are the same FP16 values on both), with and
// without the epilogue (cuBLASLt's, or the kernel after the GEMM).
TEST_P(CudaOps, GemmExFp16OperandsFp32C) {
    for (const GemmCase &gc : kCases)
        for (Epilogue ep : {kNone, kBias, kResidual, kAll})
            ASSERT_NO_FATAL_FAILURE(
                RunGemmCase(this, gc, OSP_TYPE_FP16, false, ep,
                            ep == kAll ? OSP_UNARY_GELU_TANH : OSP_UNARY_RELU,
                            1e-5, OSP_TYPE_FP32));
}

// FP32 C with FP32 operands names C's own dtype; any other mix is
// refused by the dispatcher, and plain gemm takes no mix at all.
TEST_P(CudaOps, GemmExRefusesOtherMixes) {
    BufferPtr buf = Alloc(64);
    ASSERT_NE(buf, nullptr);
    osp_gemm_ex_args x = {};
    x.gemm.m = x.gemm.n = x.gemm.k = 2;
    x.gemm.alpha = 1.0f;
    x.gemm.lda = x.gemm.ldb = x.gemm.ldc = 2;
    x.gemm.a = x.gemm.b = buf->data;
    x.gemm.c = (char *)buf->data + 32;
    x.gemm.dtype = OSP_TYPE_FP32;
    x.gemm.c_dtype = OSP_TYPE_FP16;
    EXPECT_ERROR_CODE(osp_op_gemm_ex(stream_.get(), &x), OSP_ERROR_UNSUPPORTED);
    x.gemm.dtype = OSP_TYPE_FP16;
    x.gemm.c_dtype = OSP_TYPE_FP32;
    EXPECT_ERROR_CODE(osp_op_gemm(stream_.get(), &x.gemm),
                      OSP_ERROR_UNSUPPORTED);
    x.gemm.dtype = OSP_TYPE_FP32;
    ASSERT_OK(osp_op_gemm_ex(stream_.get(), &x));
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
}

// A large-ish GEMM through the whole path.
TEST_P(CudaOps, GemmExLarge) {
    const GemmCase gc = {130,   257,  96, false, true, 2,
                         false, true, 0,  1.0f,  0.0f};
    ASSERT_NO_FATAL_FAILURE(RunGemmCase(this, gc, OSP_TYPE_FP32, false, kAll,
                                        OSP_UNARY_RELU, 1e-5));
}

// No output (m or n 0): nothing runs, NULL operands are fine.
TEST_P(CudaOps, GemmExEmpty) {
    for (int64_t m : {0, 3}) {
        osp_gemm_ex_args x = {};
        x.gemm.m = m;
        x.gemm.n = 3 - m;
        x.gemm.k = 2;
        x.gemm.alpha = 1.0f;
        x.gemm.dtype = OSP_TYPE_FP32;
        x.gemm.lda = x.gemm.ldb = x.gemm.ldc = 3;
        x.batch_count = 4;
        x.act = OSP_UNARY_RELU;
        ASSERT_OK(osp_op_gemm_ex(stream_.get(), &x));
    }
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
}

// Host memory where device memory belongs: the call fails, nothing runs.
TEST_P(CudaOps, GemmExHostPointerFails) {
    if (!kFakeCuda)
        GTEST_SKIP() << "a real GPU would fault, not refuse";
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4), bias(2, 1.0f);
    BufferPtr dev_c = Alloc(16);
    ASSERT_NE(dev_c, nullptr);
    osp_gemm_ex_args x = {};
    x.gemm = {.trans_a = false,
              .trans_b = false,
              .m = 2,
              .n = 2,
              .k = 2,
              .alpha = 1.0f,
              .beta = 0.0f,
              .dtype = OSP_TYPE_FP32,
              .a = a.data(),
              .lda = 2,
              .b = b.data(),
              .ldb = 2,
              .c = c.data(),
              .ldc = 2,
              .allow_tf32 = false,
              .c_dtype = OSP_TYPE_INVALID};
    osp_error *err = osp_op_gemm_ex(stream_.get(), &x);
    EXPECT_NE(err, nullptr) << "host operands";
    osp_error_free(err);
    BufferPtr dev_ab = Alloc(32);
    ASSERT_NE(dev_ab, nullptr);
    x.gemm.a = dev_ab->data;
    x.gemm.b = (char *)dev_ab->data + 16;
    x.gemm.c = dev_c->data;
    x.bias = bias.data();
    err = osp_op_gemm_ex(stream_.get(), &x);
    EXPECT_NE(err, nullptr) << "host bias";
    osp_error_free(err);
    ASSERT_OK(osp_stream_synchronize(stream_.get()));
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaOps,
                         ::testing::ValuesIn(DevicesUnderTest()), SpecName);

} // namespace

/*
 * GEMM through cuBLAS. cuBLAS is column-major: a row-major matrix read as
 * column-major is its transpose, so row-major C = op(A) op(B) is computed
 * as column-major C^T = op(B)^T op(A)^T, i.e. the operands swap places,
 * m and n swap, and each keeps its own transpose flag and leading
 * dimension.
 */
#include <cublasLt.h>
#include <limits.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "kernels_nn.h"

osp_error *cuda_gemm(osp_device *dev, void *stream_impl,
                     const osp_gemm_args *g) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    cublasOperation_t op_a = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    int lda = (int)g->lda, ldb = (int)g->ldb, ldc = (int)g->ldc;

    /* The handle is per stream and a stream is driven by one thread at a
     * time, so setting the mode per call is safe. FP32: TF32 only when the
     * model asked for it. FP16: without DISALLOW_REDUCED_PRECISION_REDUCTION
     * cuBLAS may sum split-K partial results in FP16 (the output type),
     * which breaks the contract's FP32 accumulation. */
    cublasMath_t mode =
        g->dtype == OSP_TYPE_FP16
            ? (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        : g->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                        : CUBLAS_DEFAULT_MATH;
    err = OSP_CUBLAS_CHECK(cublasSetMathMode(s->blas, mode));
    if (err != NULL)
        return err;
    if (g->dtype == OSP_TYPE_FP32)
        return OSP_CUBLAS_CHECK(cublasSgemm(s->blas, op_b, op_a, n, m, k,
                                            &g->alpha, g->b, ldb, g->a, lda,
                                            &g->beta, g->c, ldc));
    /* FP16 storage, FP32 accumulation (alpha and beta are floats). */
    return OSP_CUBLAS_CHECK(
        cublasGemmEx(s->blas, op_b, op_a, n, m, k, &g->alpha, g->b, CUDA_R_16F,
                     ldb, g->a, CUDA_R_16F, lda, &g->beta, g->c, CUDA_R_16F,
                     ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---- batched GEMM and gemm_ex -------------------------------------------- */

osp_error *cuda_gemm_batched(cuda_stream *s, const osp_gemm_args *g,
                             int64_t batch, int64_t stride_a, int64_t stride_b,
                             int64_t stride_c) {
    bool fp16 = g->dtype == OSP_TYPE_FP16;
    cudaDataType type = fp16 ? CUDA_R_16F : CUDA_R_32F;
    bool c_fp32 = osp_gemm_c_dtype(g) == OSP_TYPE_FP32;
    cudaDataType c_type = c_fp32 ? CUDA_R_32F : CUDA_R_16F;
    /* TF32 only when the model asked; FP16 accumulates in FP32 (see
     * cuda_gemm for DISALLOW_REDUCED_PRECISION_REDUCTION). */
    cublasComputeType_t compute = !fp16 && g->allow_tf32
                                      ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
    cublasMath_t mode =
        fp16            ? (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        : g->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                        : CUBLAS_DEFAULT_MATH;
    osp_error *err = OSP_CUBLAS_CHECK(cublasSetMathMode(s->blas, mode));
    if (err != NULL)
        return err;
    /* Column-major: the operands swap (see the top of the file). cuBLAS
     * counts the batch in an int: larger batches go in parts. An FP32 C
     * of FP16 operands is one of cuBLAS's own mixes (16F A and B, 32F C,
     * compute 32F). */
    size_t elem = fp16 ? 2 : 4, c_elem = c_fp32 ? 4 : 2;
    for (int64_t b0 = 0; b0 < batch && err == NULL; b0 += INT_MAX) {
        int part = batch - b0 < INT_MAX ? (int)(batch - b0) : INT_MAX;
        err = OSP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            s->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
            g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m,
            (int)g->k, &g->alpha,
            (const char *)g->b + (size_t)(b0 * stride_b) * elem, type,
            (int)g->ldb, stride_b,
            (const char *)g->a + (size_t)(b0 * stride_a) * elem, type,
            (int)g->lda, stride_a, &g->beta,
            (char *)g->c + (size_t)(b0 * stride_c) * c_elem, c_type,
            (int)g->ldc, stride_c, part, compute, CUBLAS_GEMM_DEFAULT));
    }
    return err;
}

/* ---- cuBLASLt: the epilogue inside the GEMM ---------------------------- */

/* cuBLASLt's epilogue for x, when it has one that is x's exactly: an FP32
 * C (its bias takes D's type, and x's bias is FP32 whatever C's), of FP32
 * operands or of FP16 ones (cuBLASLt's 16F A and B, 32F C and D mix, so
 * precision fp16 keeps its fused epilogues), an activation it knows
 * (ReLU, GELU's tanh form), and a residual only where C is not read (the
 * residual then is Lt's C, D = act(AB + 1 * residual + bias)). Kept to
 * plain cases: k >= 1, and a batch (within its int32 count) of distinct
 * operands (the broadcast ones take cuBLAS's strided-batched call, where
 * a stride of 0 is known to work). */
static bool lt_epilogue_of(const osp_gemm_ex_args *x, cublasLtEpilogue_t *out) {
    const osp_gemm_args *g = &x->gemm;
    if (osp_gemm_c_dtype(g) != OSP_TYPE_FP32 || g->k == 0 ||
        x->batch_count > INT_MAX ||
        (x->batch_count > 1 && (x->stride_a == 0 || x->stride_b == 0)) ||
        (x->residual != NULL && g->beta != 0.0f))
        return false;
    bool bias = x->bias != NULL;
    switch (x->act) {
    case OSP_UNARY_IDENTITY:
        *out = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        return true;
    case OSP_UNARY_RELU:
        *out = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        return true;
    case OSP_UNARY_GELU_TANH:
        *out = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        return true;
    default:
        return false;
    }
}

/* A column-major layout of rows x cols (leading dimension ld) of `type`
 * repeated batch times, stride elements apart. */
static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, cudaDataType type,
                                int64_t rows, int64_t cols, int64_t ld,
                                int32_t batch, int64_t stride) {
    cublasStatus_t st =
        cublasLtMatrixLayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(
            *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(
            *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
            sizeof stride);
    return st;
}

/* x as one cublasLtMatmul with its epilogue (the operands swapped as for
 * cuBLAS, see the top of the file); the handle is the stream's cuBLAS
 * handle, which cuBLAS allows in place of a cuBLASLt one. The algorithm
 * is cuBLASLt's own choice for these pointers (algo NULL), without a
 * workspace. *done false (and nothing enqueued) when cuBLASLt does not
 * support the case: the caller then runs it the other way. */
static osp_error *gemm_ex_lt(cuda_stream *s, const osp_gemm_ex_args *x,
                             cublasLtEpilogue_t epilogue, bool *done) {
    const osp_gemm_args *g = &x->gemm;
    bool batched = x->batch_count > 1;
    int32_t batch = batched ? (int32_t)x->batch_count : 1;
    bool fp16 = g->dtype == OSP_TYPE_FP16;
    cudaDataType ab_type = fp16 ? CUDA_R_16F : CUDA_R_32F;
    cublasComputeType_t compute = !fp16 && g->allow_tf32
                                      ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
    int32_t op_a = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t op_b = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = (uint32_t)epilogue;
    const void *bias = x->bias;
    const void *c = x->residual != NULL ? (const void *)x->residual : g->c;
    float beta = x->residual != NULL ? 1.0f : g->beta;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasStatus_t st = cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                            &op_a, sizeof op_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                            &op_b, sizeof op_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                            &epi, sizeof epi);
    if (st == CUBLAS_STATUS_SUCCESS && bias != NULL)
        st = cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    /* Lt's A is our B (n x k after op), its B our A, C and D ours. */
    if (st == CUBLAS_STATUS_SUCCESS)
        st = lt_layout(&la, ab_type, g->trans_b ? g->k : g->n,
                       g->trans_b ? g->n : g->k, g->ldb, batch,
                       batched ? x->stride_b : 0);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = lt_layout(&lb, ab_type, g->trans_a ? g->m : g->k,
                       g->trans_a ? g->k : g->m, g->lda, batch,
                       batched ? x->stride_a : 0);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = lt_layout(&lc, CUDA_R_32F, g->n, g->m, g->ldc, batch,
                       batched ? x->stride_c : 0);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul((cublasLtHandle_t)s->blas, desc, &g->alpha, g->b,
                            la, g->a, lb, &beta, c, lc, g->c, lc, NULL, NULL, 0,
                            s->stream);
    *done = st != CUBLAS_STATUS_NOT_SUPPORTED;
    if (lc != NULL)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb != NULL)
        cublasLtMatrixLayoutDestroy(lb);
    if (la != NULL)
        cublasLtMatrixLayoutDestroy(la);
    if (desc != NULL)
        cublasLtMatmulDescDestroy(desc);
    return *done ? OSP_CUBLAS_CHECK(st) : NULL;
}

/* An FP32 C with an epilogue cuBLASLt has: one cublasLtMatmul. Otherwise
 * one strided-batched cuBLAS call for the whole batch (a stride of 0
 * broadcasts an operand), then, when there is an epilogue, one kernel
 * over C. FP16 C is then rounded by the GEMM and again after the
 * epilogue (computed in FP32), where the CPU device rounds once. */
osp_error *cuda_gemm_ex(osp_device *dev, void *stream_impl,
                        const osp_gemm_ex_args *args) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    bool epilogue = args->bias != NULL || args->residual != NULL ||
                    args->act != OSP_UNARY_IDENTITY;
    cublasLtEpilogue_t lt;
    if (epilogue && lt_epilogue_of(args, &lt)) {
        bool done;
        err = gemm_ex_lt(s, args, lt, &done);
        if (err != NULL || done)
            return err;
    }
    /* A single GEMM's strides are unused (and unchecked): pass 0. */
    bool batched = args->batch_count > 1;
    err = cuda_gemm_batched(s, &args->gemm, batched ? args->batch_count : 1,
                            batched ? args->stride_a : 0,
                            batched ? args->stride_b : 0,
                            batched ? args->stride_c : 0);
    if (err != NULL)
        return err;
    if (!epilogue)
        return NULL;
    return OSP_CUDA_CHECK(cuda_launch_gemm_epilogue(s->stream, args));
}

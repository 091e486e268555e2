/*
 * GEMM through cuBLAS. cuBLAS is column-major: a row-major matrix read as
 * column-major is its transpose, so row-major C = op(A) op(B) is computed
 * as column-major C^T = op(B)^T op(A)^T, i.e. the operands swap places,
 * m and n swap, and each keeps its own transpose flag and leading
 * dimension.
 */
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
    /* TF32 only when the model asked; FP16 accumulates in FP32 (see
     * cuda_gemm for DISALLOW_REDUCED_PRECISION_REDUCTION). */
    cublasComputeType_t compute = !fp16 && g->allow_tf32
                                      ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
    cublasMath_t mode =
        fp16 ? (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        : g->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                        : CUBLAS_DEFAULT_MATH;
    osp_error *err = OSP_CUBLAS_CHECK(cublasSetMathMode(s->blas, mode));
    if (err != NULL)
        return err;
    /* Column-major: the operands swap (see the top of the file). cuBLAS
     * counts the batch in an int: larger batches go in parts. */
    size_t elem = fp16 ? 2 : 4;
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
            (char *)g->c + (size_t)(b0 * stride_c) * elem, type, (int)g->ldc,
            stride_c, part, compute, CUBLAS_GEMM_DEFAULT));
    }
    return err;
}

/* One strided-batched cuBLAS call for the whole batch (a stride of 0
 * broadcasts an operand), then, when there is an epilogue, one kernel
 * over C. FP16 C is rounded by the GEMM and again after the epilogue
 * (computed in FP32), where the CPU device rounds once. */
osp_error *cuda_gemm_ex(osp_device *dev, void *stream_impl,
                        const osp_gemm_ex_args *args) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    /* A single GEMM's strides are unused (and unchecked): pass 0. */
    bool batched = args->batch_count > 1;
    err = cuda_gemm_batched(s, &args->gemm, batched ? args->batch_count : 1,
                            batched ? args->stride_a : 0,
                            batched ? args->stride_b : 0,
                            batched ? args->stride_c : 0);
    if (err != NULL)
        return err;
    if (args->bias == NULL && args->residual == NULL &&
        args->act == OSP_UNARY_IDENTITY)
        return NULL;
    return OSP_CUDA_CHECK(osp_cuda_launch_gemm_epilogue(s->stream, args));
}

/*
 * GEMM through cuBLAS. cuBLAS is column-major: a row-major matrix read as
 * column-major is its transpose, so row-major C = op(A) op(B) is computed
 * as column-major C^T = op(B)^T op(A)^T, i.e. the operands swap places,
 * m and n swap, and each keeps its own transpose flag and leading
 * dimension.
 */
#include "cuda_check.h"
#include "cuda_internal.h"

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

/*
 * The cuBLAS calls of cuda/cuda_gemm.c (Sgemm, GemmEx and
 * GemmStridedBatchedEx), faked with OpenBLAS in cuBLAS's own
 * (column-major) convention, so that the row-major mapping in cuda_gemm.c
 * is really tested. Arguments are checked as cuBLAS checks them; TF32 math
 * rounds the inputs to TF32 as tensor cores do.
 */
#include <cblas.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"
#include "half.h"

struct cublasContext {
    int gpu;
    cudaStream_t stream;
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    fake_enter(__func__);
    struct cublasContext *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->gpu = fake_current_device();
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    fake_enter(__func__);
    if (handle == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    fake_enter(__func__);
    if (handle == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    fake_enter(__func__);
    if (handle == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
}

/* ---- gemm ------------------------------------------------------------- */

typedef struct gemm_ctx {
    bool trans_a, trans_b, tf32, fp16;
    int m, n, k, lda, ldb, ldc;
    int batch;
    long long stride_a, stride_b, stride_c;
    float alpha, beta;
    const void *a, *b; /* writable views of device memory */
    void *c;
    size_t a_elems, b_elems, c_elems;
} gemm_ctx;

static float round_tf32(float f) {
    uint32_t u = osp_f32_bits(f);
    if ((u & 0x7f800000u) != 0x7f800000u) /* finite: keep 10 mantissa bits */
        u = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
    return osp_f32_from_bits(u);
}

/* n elements of p (FP16 or FP32) as FP32, TF32-rounded if asked; NULL when
 * out of memory. */
static float *to_float(const void *p, size_t n, bool fp16, bool tf32) {
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; f != NULL && i < n; i++) {
        float v = fp16 ? osp_fp16_to_fp32(((const uint16_t *)p)[i])
                       : ((const float *)p)[i];
        f[i] = tf32 ? round_tf32(v) : v;
    }
    return f;
}

static void run_gemm(void *ctx) {
    gemm_ctx *g = ctx;
    float *a = to_float(g->a, g->a_elems, g->fp16, g->tf32);
    float *b = to_float(g->b, g->b_elems, g->fp16, g->tf32);
    float *c = g->fp16 ? to_float(g->c, g->c_elems, true, false) : g->c;
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "fake cuBLAS: out of host memory\n");
        abort();
    }
    for (int i = 0; i < g->batch; i++)
        cblas_sgemm(CblasColMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k,
                    g->alpha, a + i * g->stride_a, g->lda, b + i * g->stride_b,
                    g->ldb, g->beta, c + i * g->stride_c, g->ldc);
    if (g->fp16) {
        for (size_t i = 0; i < g->c_elems; i++)
            ((uint16_t *)g->c)[i] = osp_fp32_to_fp16(c[i]);
        free(c);
    }
    free(a);
    free(b);
}

/* Elements a batch of column-major rows x cols matrices with leading
 * dimension ld, stride elements apart, spans. */
static size_t extent(int rows, int cols, int ld, int batch, long long stride) {
    return rows == 0 || cols == 0 || batch == 0
               ? 0
               : (size_t)(batch - 1) * (size_t)stride +
                     (size_t)(cols - 1) * (size_t)ld + rows;
}

static bool map_matrix(gemm_ctx *g, const char *name, const void **p,
                       size_t elems, size_t elem_size, int gpu) {
    if (elems == 0)
        return true;
    int owner = -1;
    void *view = fake_device_view(*p, elems * elem_size, &owner);
    if (view == NULL || owner != gpu) {
        fprintf(stderr,
                "fake cuBLAS: gemm m=%d n=%d k=%d: %s %p (%zu elements) is "
                "not device memory of GPU %d\n",
                g->m, g->n, g->k, name, *p, elems, gpu);
        return false;
    }
    *p = view;
    return true;
}

/* A batch of matrices: how many, and each operand's stride (elements). */
typedef struct gemm_batch {
    int count;
    long long stride_a, stride_b, stride_c;
} gemm_batch;

/* Every gemm: checks as cuBLAS does, then queues run_gemm on the stream.
 * TF32 when the compute type asks (fast_tf32) or the handle's math mode
 * does. */
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           float alpha, const void *a, int lda, const void *b,
                           int ldb, float beta, void *c, int ldc, bool fp16,
                           bool fast_tf32, gemm_batch batch) {
    if (h == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (batch.count < 0 || batch.stride_a < 0 || batch.stride_b < 0 ||
        batch.stride_c < 0 ||
        (batch.count > 1 &&
         batch.stride_c < (long long)(n > 0 ? n - 1 : 0) * ldc + m)) {
        fprintf(stderr,
                "fake cuBLAS: gemm batch %d strides %lld,%lld,%lld: "
                "invalid (outputs overlap)\n",
                batch.count, batch.stride_a, batch.stride_b, batch.stride_c);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    bool trans_a = ta != CUBLAS_OP_N, trans_b = tb != CUBLAS_OP_N;
    int rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
    int rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (rows_a > 1 ? rows_a : 1) ||
        ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1)) {
        fprintf(stderr,
                "fake cuBLAS: gemm m=%d n=%d k=%d lda=%d ldb=%d ldc=%d "
                "trans=%d,%d: invalid\n",
                m, n, k, lda, ldb, ldc, trans_a, trans_b);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (h->gpu != fake_current_device() ||
        fake_check_launch(h->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr,
                "fake cuBLAS: handle of GPU %d used with GPU %d "
                "current or on a bad stream\n",
                h->gpu, fake_current_device());
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (m == 0 || n == 0 || batch.count == 0)
        return CUBLAS_STATUS_SUCCESS;
    gemm_ctx g = {
        .trans_a = trans_a,
        .trans_b = trans_b,
        .fp16 = fp16,
        .tf32 = !fp16 &&
                (fast_tf32 ||
                 (h->math & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) ==
                     CUBLAS_TF32_TENSOR_OP_MATH),
        .m = m,
        .n = n,
        .k = k,
        .lda = lda,
        .ldb = ldb,
        .ldc = ldc,
        .batch = batch.count,
        .stride_a = batch.stride_a,
        .stride_b = batch.stride_b,
        .stride_c = batch.stride_c,
        .alpha = alpha,
        .beta = beta,
        .a = a,
        .b = b,
        .c = c,
        .a_elems =
            k ? extent(rows_a, cols_a, lda, batch.count, batch.stride_a) : 0,
        .b_elems =
            k ? extent(rows_b, cols_b, ldb, batch.count, batch.stride_b) : 0,
        .c_elems = extent(m, n, ldc, batch.count, batch.stride_c)};
    size_t elem = fp16 ? 2 : 4;
    const void *cv = c;
    if (!map_matrix(&g, "A", &g.a, g.a_elems, elem, h->gpu) ||
        !map_matrix(&g, "B", &g.b, g.b_elems, elem, h->gpu) ||
        !map_matrix(&g, "C", &cv, g.c_elems, elem, h->gpu))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    g.c = (void *)cv;
    gemm_ctx *queued = malloc(sizeof *queued);
    if (queued == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *queued = g;
    return fake_stream_enqueue(h->stream, run_gemm, queued) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C,
                           int ldc) {
    fake_enter(__func__);
    return gemm(handle, transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta,
                C, ldc, false, false, (gemm_batch){1, 0, 0, 0});
}

/* Only what cuda_gemm.c uses: FP16 storage with FP32 compute. */
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    fake_enter(__func__);
    if (Atype != CUDA_R_16F || Btype != CUDA_R_16F || Ctype != CUDA_R_16F ||
        computeType != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(handle, transa, transb, m, n, k, *(const float *)alpha, A, lda,
                B, ldb, *(const float *)beta, C, ldc, true, false,
                (gemm_batch){1, 0, 0, 0});
}

/* Only what cuda_gemm.c uses: A, B and C of one type, FP32 (compute 32F,
 * or 32F_FAST_TF32) or FP16 (compute 32F). */
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    fake_enter(__func__);
    bool fp16 = Atype == CUDA_R_16F;
    if ((Atype != CUDA_R_16F && Atype != CUDA_R_32F) || Btype != Atype ||
        Ctype != Atype ||
        (computeType != CUBLAS_COMPUTE_32F &&
         (fp16 || computeType != CUBLAS_COMPUTE_32F_FAST_TF32)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(handle, transa, transb, m, n, k, *(const float *)alpha, A, lda,
                B, ldb, *(const float *)beta, C, ldc, fp16,
                computeType == CUBLAS_COMPUTE_32F_FAST_TF32,
                (gemm_batch){batchCount, strideA, strideB, strideC});
}

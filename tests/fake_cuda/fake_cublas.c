/*
 * The cuBLAS calls of cuda/cuda_gemm.c (Sgemm, GemmEx,
 * GemmStridedBatchedEx and cuBLASLt's matmul), faked with OpenBLAS in cuBLAS's
 * own (column-major) convention, so that the row-major mapping in cuda_gemm.c
 * is really tested. Arguments are checked as cuBLAS checks them; the
 * precision asked for is honoured: TF32 math rounds the FP32 inputs to
 * TF32 as tensor cores do, FP16 operands are read as the FP16 values they
 * hold, and the sums are FP32, rounded to FP16 only where C is FP16. Each
 * call that computes something is counted by precision
 * (fake_cublas_counts_get), so that tests can tell which route ran.
 */
#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <math.h>
#include <stdatomic.h>
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

/* ---- counts ----------------------------------------------------------- */

static atomic_ulong count_fp32, count_tf32, count_fp16, count_fp16_fp32c;

void fake_cublas_counts_get(fake_cublas_counts *out) {
    out->fp32 = atomic_load(&count_fp32);
    out->tf32 = atomic_load(&count_tf32);
    out->fp16 = atomic_load(&count_fp16);
    out->fp16_fp32c = atomic_load(&count_fp16_fp32c);
}

/* Counts one call about to be queued. */
static void count_call(bool ab_fp16, bool c_fp16, bool tf32) {
    atomic_ulong *c = ab_fp16 ? (c_fp16 ? &count_fp16 : &count_fp16_fp32c)
                      : tf32  ? &count_tf32
                              : &count_fp32;
    atomic_fetch_add(c, 1);
}

/* ---- gemm ------------------------------------------------------------- */

typedef struct gemm_ctx {
    bool trans_a, trans_b, tf32;
    bool ab_fp16, c_fp16; /* A and B FP16; C FP16 (else FP32) */
    int m, n, k, lda, ldb, ldc;
    int batch;
    long long stride_a, stride_b, stride_c;
    float alpha, beta;
    const void *a, *b; /* writable views of device memory */
    void *c;
    size_t a_elems, b_elems, c_elems;
} gemm_ctx;

static float round_tf32(float f) {
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7f800000u) != 0x7f800000u) /* finite: keep 10 mantissa bits */
        u = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
    return half_f32_from_bits(u);
}

/* n elements of p (FP16 or FP32) as FP32, TF32-rounded if asked; NULL when
 * out of memory. */
static float *to_float(const void *p, size_t n, bool fp16, bool tf32) {
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; f != NULL && i < n; i++) {
        float v = fp16 ? fp16_to_fp32(((const uint16_t *)p)[i])
                       : ((const float *)p)[i];
        f[i] = tf32 ? round_tf32(v) : v;
    }
    return f;
}

static void run_gemm(void *ctx) {
    gemm_ctx *g = ctx;
    float *a = to_float(g->a, g->a_elems, g->ab_fp16, g->tf32);
    float *b = to_float(g->b, g->b_elems, g->ab_fp16, g->tf32);
    float *c = g->c_fp16 ? to_float(g->c, g->c_elems, true, false) : g->c;
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "fake cuBLAS: out of host memory\n");
        abort();
    }
    for (int i = 0; i < g->batch; i++)
        cblas_sgemm(CblasColMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k,
                    g->alpha, a + i * g->stride_a, g->lda, b + i * g->stride_b,
                    g->ldb, g->beta, c + i * g->stride_c, g->ldc);
    if (g->c_fp16) {
        for (size_t i = 0; i < g->c_elems; i++)
            ((uint16_t *)g->c)[i] = fp32_to_fp16(c[i]);
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
 * A and B are FP16 when ab_fp16, C when c_fp16 (else FP32). TF32 when
 * the compute type asks (fast_tf32) or the handle's math mode does, for
 * FP32 operands. */
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           float alpha, const void *a, int lda, const void *b,
                           int ldb, float beta, void *c, int ldc, bool ab_fp16,
                           bool c_fp16, bool fast_tf32, gemm_batch batch) {
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
        .ab_fp16 = ab_fp16,
        .c_fp16 = c_fp16,
        .tf32 =
            !ab_fp16 &&
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
    size_t elem = ab_fp16 ? 2 : 4, c_elem = c_fp16 ? 2 : 4;
    const void *cv = c;
    if (!map_matrix(&g, "A", &g.a, g.a_elems, elem, h->gpu) ||
        !map_matrix(&g, "B", &g.b, g.b_elems, elem, h->gpu) ||
        !map_matrix(&g, "C", &cv, g.c_elems, c_elem, h->gpu))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    count_call(ab_fp16, c_fp16, g.tf32);
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
                C, ldc, false, false, false, (gemm_batch){1, 0, 0, 0});
}

/* Only what cuda_gemm.c uses: FP16 A and B, FP16 or FP32 C, FP32
 * compute. */
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
    if (Atype != CUDA_R_16F || Btype != CUDA_R_16F ||
        (Ctype != CUDA_R_16F && Ctype != CUDA_R_32F) ||
        computeType != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(handle, transa, transb, m, n, k, *(const float *)alpha, A, lda,
                B, ldb, *(const float *)beta, C, ldc, true, Ctype == CUDA_R_16F,
                false, (gemm_batch){1, 0, 0, 0});
}

/* Only what cuda_gemm.c uses: A, B and C of one type, FP32 (compute 32F,
 * or 32F_FAST_TF32) or FP16 (compute 32F), or FP16 A and B with an FP32
 * C (compute 32F). */
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
        (Ctype != Atype && !(fp16 && Ctype == CUDA_R_32F)) ||
        (computeType != CUBLAS_COMPUTE_32F &&
         (fp16 || computeType != CUBLAS_COMPUTE_32F_FAST_TF32)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(handle, transa, transb, m, n, k, *(const float *)alpha, A, lda,
                B, ldb, *(const float *)beta, C, ldc, fp16, Ctype == CUDA_R_16F,
                computeType == CUBLAS_COMPUTE_32F_FAST_TF32,
                (gemm_batch){batchCount, strideA, strideB, strideC});
}

/* ---- cuBLASLt: the matmul with an epilogue of cuda_gemm.c ---------------
 * Descriptors live in the opaque storage cublasLt.h declares. Only what
 * cuda_gemm.c uses: FP32 C and D, of FP32 or FP16 A and B (compute 32F),
 * the implicit heuristic (algo NULL), strided batches, transposes and the
 * epilogues DEFAULT, RELU, GELU (tanh approximation) and BIAS with either. The
 * handle is a cuBLAS handle cast, as cuBLAS allows. */

typedef struct lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t trans_a, trans_b;
    uint32_t epilogue;
    const float *bias;
} lt_desc;

typedef struct lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
} lt_layout;

_Static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t),
               "lt_desc fits cuBLASLt's descriptor");
_Static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t),
               "lt_layout fits cuBLASLt's layout");

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    fake_enter(__func__);
    lt_desc *d = calloc(1, sizeof(cublasLtMatmulDescOpaque_t));
    if (d == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    d->compute = computeType;
    d->scale = scaleType;
    d->trans_a = d->trans_b = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    *desc = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    fake_enter(__func__);
    free(desc);
    return CUBLAS_STATUS_SUCCESS;
}

/* Copies an attribute of `size` bytes, which must be the attribute's own
 * size (cuBLASLt refuses any other). */
static cublasStatus_t set_attr(void *field, size_t field_size, const void *buf,
                               size_t size) {
    if (buf == NULL || size != field_size)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t size) {
    fake_enter(__func__);
    lt_desc *d = (lt_desc *)desc;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        return set_attr(&d->trans_a, sizeof d->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
        return set_attr(&d->trans_b, sizeof d->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        return set_attr(&d->epilogue, sizeof d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return set_attr(&d->bias, sizeof d->bias, buf, size);
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not faked */
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    fake_enter(__func__);
    lt_layout *l = calloc(1, sizeof(cublasLtMatrixLayoutOpaque_t));
    if (l == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *l = (lt_layout){type, rows, cols, ld, 1, 0};
    *layout = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    fake_enter(__func__);
    free(layout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                 cublasLtMatrixLayoutAttribute_t a,
                                 const void *buf, size_t size) {
    fake_enter(__func__);
    lt_layout *l = (lt_layout *)layout;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        return set_attr(&l->batch, sizeof l->batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        return set_attr(&l->stride, sizeof l->stride, buf, size);
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not faked */
    }
}

/* The queued matmul: C copied into D (when they differ), the GEMM on D,
 * then the epilogue, a batch element after another. */
typedef struct lt_ctx {
    gemm_ctx g; /* first: run_gemm takes it */
    const float *c;
    uint32_t epilogue;
    const float *bias;
} lt_ctx;

static float gelu_tanh(float x) {
    return 0.5f * x *
           (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static void run_lt(void *ctx) {
    lt_ctx *l = ctx;
    gemm_ctx *g = &l->g;
    float *d = g->c;
    for (int b = 0; b < g->batch && l->c != d; b++)
        for (int col = 0; col < g->n; col++)
            memmove(d + b * g->stride_c + (size_t)col * g->ldc,
                    l->c + b * g->stride_c + (size_t)col * g->ldc,
                    (size_t)g->m * sizeof(float));
    run_gemm(g);
    uint32_t act = l->epilogue & ~(uint32_t)CUBLASLT_EPILOGUE_BIAS;
    for (int b = 0; b < g->batch; b++)
        for (int col = 0; col < g->n; col++)
            for (int row = 0; row < g->m; row++) {
                float *v = d + b * g->stride_c + (size_t)col * g->ldc + row;
                if (l->bias != NULL)
                    *v += l->bias[row];
                if (act == CUBLASLT_EPILOGUE_RELU)
                    *v = *v > 0.0f ? *v : 0.0f;
                else if (act == CUBLASLT_EPILOGUE_GELU)
                    *v = gelu_tanh(*v);
            }
}

static bool same_layout(const lt_layout *a, const lt_layout *b) {
    return a->type == b->type && a->rows == b->rows && a->cols == b->cols &&
           a->ld == b->ld && a->batch == b->batch && a->stride == b->stride;
}

cublasStatus_t
cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc,
               const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
               const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
               const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
               cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
               void *workspace, size_t workspaceSizeInBytes,
               cudaStream_t stream) {
    (void)workspace;
    (void)workspaceSizeInBytes;
    fake_enter(__func__);
    struct cublasContext *h = (struct cublasContext *)handle;
    const lt_desc *d = (const lt_desc *)computeDesc;
    const lt_layout *la = (const lt_layout *)Adesc,
                    *lb = (const lt_layout *)Bdesc,
                    *lc = (const lt_layout *)Cdesc,
                    *ld = (const lt_layout *)Ddesc;
    if (h == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    uint32_t act = d->epilogue & ~(uint32_t)CUBLASLT_EPILOGUE_BIAS;
    bool with_bias = (d->epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
    if (algo != NULL || d->scale != CUDA_R_32F ||
        (d->compute != CUBLAS_COMPUTE_32F &&
         d->compute != CUBLAS_COMPUTE_32F_FAST_TF32) ||
        (la->type != CUDA_R_32F && la->type != CUDA_R_16F) ||
        lb->type != la->type || lc->type != CUDA_R_32F ||
        ld->type != CUDA_R_32F ||
        (la->type == CUDA_R_16F && d->compute != CUBLAS_COMPUTE_32F) ||
        (act != CUBLASLT_EPILOGUE_DEFAULT && act != CUBLASLT_EPILOGUE_RELU &&
         act != CUBLASLT_EPILOGUE_GELU && act != 0))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    bool ta = d->trans_a != CUBLAS_OP_N, tb = d->trans_b != CUBLAS_OP_N;
    uint64_t m = ld->rows, n = ld->cols, k = ta ? la->rows : la->cols;
    if ((ta ? la->cols : la->rows) != m || (tb ? lb->cols : lb->rows) != k ||
        (tb ? lb->rows : lb->cols) != n || !same_layout(lc, ld) ||
        la->batch != ld->batch || lb->batch != ld->batch || ld->batch < 1 ||
        la->ld < (int64_t)(la->rows > 1 ? la->rows : 1) ||
        lb->ld < (int64_t)(lb->rows > 1 ? lb->rows : 1) ||
        ld->ld < (int64_t)(m > 1 ? m : 1) || m > INT32_MAX || n > INT32_MAX ||
        k > INT32_MAX || la->ld > INT32_MAX || lb->ld > INT32_MAX ||
        ld->ld > INT32_MAX || (with_bias && d->bias == NULL)) {
        fprintf(stderr,
                "fake cuBLASLt: matmul m=%llu n=%llu k=%llu: "
                "layouts or epilogue invalid\n",
                (unsigned long long)m, (unsigned long long)n,
                (unsigned long long)k);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int gpu = fake_stream_device(stream);
    if (gpu != fake_current_device() ||
        fake_check_launch(stream) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr,
                "fake cuBLASLt: stream of GPU %d used with GPU %d "
                "current, or a bad stream\n",
                gpu, fake_current_device());
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    bool ab_fp16 = la->type == CUDA_R_16F;
    lt_ctx l = {.g = {.trans_a = ta,
                      .trans_b = tb,
                      .tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
                      .ab_fp16 = ab_fp16,
                      .m = (int)m,
                      .n = (int)n,
                      .k = (int)k,
                      .lda = (int)la->ld,
                      .ldb = (int)lb->ld,
                      .ldc = (int)ld->ld,
                      .batch = ld->batch,
                      .stride_a = la->stride,
                      .stride_b = lb->stride,
                      .stride_c = ld->stride,
                      .alpha = *(const float *)alpha,
                      .beta = *(const float *)beta,
                      .a = A,
                      .b = B,
                      .c = D,
                      .a_elems = k ? extent((int)la->rows, (int)la->cols,
                                            (int)la->ld, la->batch, la->stride)
                                   : 0,
                      .b_elems = k ? extent((int)lb->rows, (int)lb->cols,
                                            (int)lb->ld, lb->batch, lb->stride)
                                   : 0,
                      .c_elems = extent((int)m, (int)n, (int)ld->ld, ld->batch,
                                        ld->stride)},
                .c = C,
                .epilogue = d->epilogue,
                .bias = with_bias ? d->bias : NULL};
    const void *dv = D, *cv = C, *bias = l.bias;
    if (ld->batch > 1 && ld->stride < (int64_t)((n - 1) * ld->ld + m)) {
        fprintf(stderr, "fake cuBLASLt: batch outputs overlap\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t ab_elem = ab_fp16 ? 2 : 4;
    if (!map_matrix(&l.g, "A", &l.g.a, l.g.a_elems, ab_elem, gpu) ||
        !map_matrix(&l.g, "B", &l.g.b, l.g.b_elems, ab_elem, gpu) ||
        !map_matrix(&l.g, "D", &dv, l.g.c_elems, 4, gpu) ||
        !map_matrix(&l.g, "C", &cv, l.g.c_elems, 4, gpu) ||
        (bias != NULL && !map_matrix(&l.g, "bias", &bias, m, 4, gpu)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    l.g.c = (void *)dv;
    l.c = cv;
    l.bias = bias;
    count_call(ab_fp16, false, l.g.tf32);
    lt_ctx *queued = malloc(sizeof *queued);
    if (queued == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *queued = l;
    return fake_stream_enqueue(stream, run_lt, queued) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_ALLOC_FAILED;
}

/*
 * The CPU device: the reference implementation of osprey/device_impl.h.
 *
 * Memory is 64-byte aligned host memory, streams are synchronous (every op
 * has finished when it returns; a stream keeps only its thread cap),
 * copies are memcpy and FP32 GEMM is OpenBLAS, single-threaded, split by
 * cpu_sgemm.h. Ops with enough work split it across the shared worker pool
 * (cpu_threads.h), up to the stream's threads. Everything else is plain
 * loops written to be obviously right: other devices are tested against
 * this one. The optional slots (host memory, async copies, host
 * functions, events, memory stats) are left NULL; the dispatcher's
 * fallbacks are exactly what a synchronous device needs.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activation_rules.h"
#include "cpu_ops.h"
#include "cpu_sgemm.h"
#include "cpu_threads.h"
#include "device_internal.h"
#include "half.h"
#include "osprey/error.h"

/* ---- memory ------------------------------------------------------------ */

static osp_error *cpu_alloc(osp_device *dev, size_t size, void **ptr) {
    (void)dev;
    void *p = host_alloc_aligned(size);
    if (p == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "CPU device: out of memory allocating %zu bytes",
                             size);
    *ptr = p;
    return NULL;
}

static void cpu_free(osp_device *dev, void *ptr, size_t size) {
    (void)dev;
    host_free_aligned(ptr, size);
}

/* ---- streams ----------------------------------------------------------- */

/* A stream is synchronous: all it keeps is its thread cap. */
typedef struct cpu_stream {
    _Atomic int threads; /* osp_stream_set_threads's; 0 = the default */
} cpu_stream;

static osp_error *cpu_stream_new(osp_device *dev, void **impl) {
    (void)dev;
    cpu_stream *s = malloc(sizeof *s);
    if (s == NULL)
        return osp_error_out_of_memory();
    atomic_init(&s->threads, 0);
    *impl = s;
    return NULL;
}

static void cpu_stream_free(osp_device *dev, void *impl) {
    (void)dev;
    free(impl);
}

static osp_error *cpu_stream_set_threads(osp_device *dev, void *impl,
                                         int threads) {
    (void)dev;
    cpu_stream *s = impl;
    atomic_store_explicit(&s->threads,
                          threads > CPU_THREADS_MAX ? CPU_THREADS_MAX : threads,
                          memory_order_relaxed);
    return NULL;
}

int cpu_stream_threads(const void *stream) {
    cpu_stream *s = (cpu_stream *)stream; /* only read */
    int n =
        s != NULL ? atomic_load_explicit(&s->threads, memory_order_relaxed) : 0;
    return n > 0 ? n : cpu_threads_default();
}

static osp_error *cpu_stream_synchronize(osp_device *dev, void *impl) {
    (void)dev;
    (void)impl;
    return NULL;
}

/* ---- GEMM -------------------------------------------------------------- */

/* Copies the rows x cols FP16 matrix stored with row stride ld into a packed
 * FP32 array. */
static void fp16_matrix_to_fp32(const uint16_t *src, int64_t ld, int64_t rows,
                                int64_t cols, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = fp16_to_fp32(src[r * ld + c]);
}

static float *alloc_floats(int64_t rows, int64_t cols) {
    size_t n, bytes;
    if (__builtin_mul_overflow((size_t)rows, (size_t)cols, &n) ||
        __builtin_mul_overflow(n, sizeof(float), &bytes))
        return NULL;
    return host_alloc_aligned(bytes);
}

/* FP16 GEMM as the header defines it (FP32 accumulation): widen A, B and C
 * into packed FP32 copies, run sgemm, round C back. Only the m x n block of
 * C is written; the padding between rows is left untouched. */
static osp_error *cpu_gemm_fp16(const osp_gemm_args *g, int threads) {
    int64_t a_rows = g->trans_a ? g->k : g->m,
            a_cols = g->trans_a ? g->m : g->k;
    int64_t b_rows = g->trans_b ? g->n : g->k,
            b_cols = g->trans_b ? g->k : g->n;
    float *a = alloc_floats(a_rows, a_cols);
    float *b = alloc_floats(b_rows, b_cols);
    float *c = alloc_floats(g->m, g->n);
    osp_error *err = NULL;
    if (a == NULL || b == NULL || c == NULL) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "CPU device: out of memory for FP16 GEMM "
                            "(m=%lld n=%lld k=%lld)",
                            (long long)g->m, (long long)g->n, (long long)g->k);
        goto out;
    }
    fp16_matrix_to_fp32(g->a, g->lda, a_rows, a_cols, a);
    fp16_matrix_to_fp32(g->b, g->ldb, b_rows, b_cols, b);
    if (g->beta != 0.0f)
        fp16_matrix_to_fp32(g->c, g->ldc, g->m, g->n, c);
    else
        memset(c, 0, (size_t)g->m * (size_t)g->n * sizeof(float));

    cpu_sgemm_args s = cpu_sgemm_args_of(g, a, a_cols > 1 ? a_cols : 1, b,
                                         b_cols > 1 ? b_cols : 1, c, g->n);
    cpu_sgemm(&s, threads, NULL, NULL);

    uint16_t *out = g->c;
    for (int64_t r = 0; r < g->m; r++)
        for (int64_t col = 0; col < g->n; col++)
            out[r * g->ldc + col] = fp32_to_fp16(c[r * g->n + col]);
out:
    free(a);
    free(b);
    free(c);
    return err;
}

static osp_error *cpu_gemm(osp_device *dev, void *stream,
                           const osp_gemm_args *g) {
    (void)dev;
    int threads = cpu_stream_threads(stream);
    if (g->dtype == OSP_TYPE_FP16)
        return cpu_gemm_fp16(g, threads);
    /* FP32 (the dispatcher allows nothing else); TF32 does not exist here. */
    cpu_sgemm_args s =
        cpu_sgemm_args_of(g, g->a, g->lda, g->b, g->ldb, g->c, g->ldc);
    cpu_sgemm(&s, threads, NULL, NULL);
    return NULL;
}

/* ---- elementwise ------------------------------------------------------- */

/* Integer ops run in unsigned arithmetic so that overflow wraps (as on a
 * GPU) instead of being undefined behaviour. */
#define CPU_BINARY_INT(T, UT)                                                  \
    static void binary_##T(osp_binary_op op, const T *a, const T *b, T *out,   \
                           size_t n) {                                         \
        for (size_t i = 0; i < n; i++) {                                       \
            UT x = (UT)a[i], y = (UT)b[i];                                     \
            UT r = op == OSP_BINARY_ADD   ? x + y                              \
                   : op == OSP_BINARY_SUB ? x - y                              \
                                          : x * y;                             \
            out[i] = (T)r;                                                     \
        }                                                                      \
    }
CPU_BINARY_INT(int32_t, uint32_t)
CPU_BINARY_INT(int64_t, uint64_t)

static float binary_apply(osp_binary_op op, float x, float y) {
    switch (op) {
    case OSP_BINARY_ADD:
        return x + y;
    case OSP_BINARY_SUB:
        return x - y;
    case OSP_BINARY_MUL:
        return x * y;
    }
    return 0.0f;
}

static osp_error *cpu_binary(osp_device *dev, void *stream, osp_binary_op op,
                             osp_datatype dtype, const void *a, const void *b,
                             void *out, size_t n) {
    (void)dev;
    (void)stream;
    switch (dtype) {
    case OSP_TYPE_INT32:
        binary_int32_t(op, a, b, out, n);
        return NULL;
    case OSP_TYPE_INT64:
        binary_int64_t(op, a, b, out, n);
        return NULL;
    case OSP_TYPE_FP32: {
        const float *x = a, *y = b;
        float *z = out;
        for (size_t i = 0; i < n; i++)
            z[i] = binary_apply(op, x[i], y[i]);
        return NULL;
    }
    case OSP_TYPE_FP16: {
        const uint16_t *x = a, *y = b;
        uint16_t *z = out;
        for (size_t i = 0; i < n; i++)
            z[i] = fp32_to_fp16(
                binary_apply(op, fp16_to_fp32(x[i]), fp16_to_fp32(y[i])));
        return NULL;
    }
    default:
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "CPU device: binary op on datatype %s",
                             osp_datatype_wire_name(dtype));
    }
}

static osp_error *cpu_bias_activation(osp_device *dev, void *stream, float *x,
                                      const float *bias, int64_t rows,
                                      int64_t cols, osp_activation act) {
    (void)dev;
    (void)stream;
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * cols;
        for (int64_t c = 0; c < cols; c++)
            row[c] =
                activation_apply(act, row[c] + (bias != NULL ? bias[c] : 0.0f));
    }
    return NULL;
}

/* out may alias x: each element is read before it is written. */
static osp_error *cpu_softmax_rows(osp_device *dev, void *stream,
                                   const float *x, float *out, int64_t rows,
                                   int64_t cols) {
    (void)dev;
    (void)stream;
    for (int64_t r = 0; r < rows; r++) {
        const float *in_row = x + r * cols;
        float *out_row = out + r * cols;
        float max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            max = fmaxf(max, in_row[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; c++) {
            out_row[c] = expf(in_row[c] - max);
            sum += out_row[c];
        }
        for (int64_t c = 0; c < cols; c++)
            out_row[c] /= sum;
    }
    return NULL;
}

/* ---- casts ------------------------------------------------------------- */

/* The rules live in cast_rules.h, shared with the CUDA kernels; half types
 * go through half.h's conversions. */
#define OSP_CAST_FP16_TO_FLOAT(p, i) fp16_to_fp32(((const uint16_t *)(p))[i])
#define OSP_CAST_BF16_TO_FLOAT(p, i) bf16_to_fp32(((const uint16_t *)(p))[i])
#define OSP_CAST_STORE_FP16(p, i, f) (((uint16_t *)(p))[i] = fp32_to_fp16(f))
#define OSP_CAST_STORE_BF16(p, i, f) (((uint16_t *)(p))[i] = fp32_to_bf16(f))
#include "cast_rules.h"

static osp_error *cpu_cast(osp_device *dev, void *stream, const void *src,
                           osp_datatype src_dtype, void *dst,
                           osp_datatype dst_dtype, size_t n) {
    (void)dev;
    (void)stream;
    for (size_t i = 0; i < n; i++)
        cast_store(dst, dst_dtype, i, cast_load(src, src_dtype, i));
    return NULL;
}

/* ---- the device -------------------------------------------------------- */

static const osp_device_ops cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_set_threads = cpu_stream_set_threads,
    .gemm = cpu_gemm,
    .binary = cpu_binary,
    .bias_activation = cpu_bias_activation,
    .softmax_rows = cpu_softmax_rows,
    .cast = cpu_cast,
    .gemm_ex = cpu_op_gemm_ex,
    .gemm_prepack = cpu_op_gemm_prepack,
    .unary = cpu_op_unary,
    .binary_nd = cpu_op_binary_nd,
    .where = cpu_op_where,
    .copy_strided = cpu_op_copy_strided,
    .gather = cpu_op_gather,
    .fill = cpu_op_fill,
    .pad = cpu_op_pad,
    .reduce = cpu_op_reduce,
    .softmax = cpu_op_softmax,
    .layer_norm = cpu_op_layer_norm,
    .channel_affine = cpu_op_channel_affine,
    .conv = cpu_op_conv,
    .conv_transpose = cpu_op_conv_transpose,
    .conv_prepack = cpu_op_conv_prepack,
    .packed_weights_free = cpu_op_packed_weights_free,
    .pool = cpu_op_pool,
    .topk = cpu_op_topk,
    .cumsum = cpu_op_cumsum,
    .scatter = cpu_op_scatter,
};

static osp_device cpu_device = {
    .ops = &cpu_ops,
    .info = {.type = OSP_DEVICE_CPU, .index = 0, .name = "CPU"},
};

static pthread_once_t cpu_info_once = PTHREAD_ONCE_INIT;

/* Also makes OpenBLAS single-threaded (GEMMs are split across the pool
 * of cpu_threads.h instead, so that a stream's thread cap bounds them
 * too), after reading the default thread count, which may come from
 * OPENBLAS_NUM_THREADS. */
static void cpu_fill_info(void) {
    long pages = sysconf(_SC_PHYS_PAGES);
    long page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0)
        cpu_device.info.total_memory = (size_t)pages * (size_t)page_size;
    (void)cpu_threads_default();
    openblas_set_num_threads(1);
}

osp_device *cpu_device_get(void) {
    pthread_once(&cpu_info_once, cpu_fill_info);
    return &cpu_device;
}

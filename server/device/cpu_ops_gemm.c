/*
 * The CPU device's gemm_ex (osprey/tensor_ops.h): an sgemm per batch
 * element (cpu_sgemm.h; this OpenBLAS has no cblas_sgemm_batch), each
 * block of C followed by its epilogue while it is still in cache. A batch
 * of at least as many elements as threads runs an element per thread.
 * FP16 is widened to FP32 as cpu_device.c's gemm does, and rounded back
 * after the epilogue.
 *
 * Also home of the row epilogue that conv shares (cpu_ops_nn.h); its
 * GELU and Erf run cpu_act_avx512.h's loops where the CPU has AVX-512.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_act_avx512.h"
#include "cpu_ops.h"
#include "cpu_ops_nn.h"
#include "cpu_packed_gemm.h"
#include "cpu_sgemm.h"
#include "cpu_threads.h"
#include "half.h"
#include "osprey/error.h"
#include "unary_rules.h"

/* ---- the epilogue ------------------------------------------------------- */

/* Elements per pass: two passes (adds, then the activation) over a chunk
 * this size stay in L1. */
#define EPILOGUE_CHUNK 1024

/* The additions of the epilogue over one chunk. */
CPU_NN_HOT static void epilogue_add(float *restrict y, int64_t n, float bias,
                                    const float *restrict bias_vec,
                                    const float *restrict residual) {
    if (bias_vec != NULL && residual != NULL)
        CPU_NN_LOOP(n, i, y[i] = y[i] + bias + bias_vec[i] + residual[i]);
    else if (bias_vec != NULL)
        CPU_NN_LOOP(n, i, y[i] = y[i] + bias + bias_vec[i]);
    else if (residual != NULL)
        CPU_NN_LOOP(n, i, y[i] = y[i] + bias + residual[i]);
    else if (bias != 0.0f)
        CPU_NN_LOOP(n, i, y[i] += bias);
}

/* The activation over one chunk: the op switched once, its rule inlined
 * into a loop of its own. */
CPU_NN_HOT static void epilogue_act(float *restrict y, int64_t n,
                                    osp_unary_op act, float alpha, float beta) {
#define ACT_CASE(op, fn)                                                       \
    case op:                                                                   \
        CPU_NN_LOOP(n, i, y[i] = fn(y[i], alpha, beta));                       \
        break;
    switch (act) {
        OSP_UNARY_F32_OPS(ACT_CASE)
    default:
        break;
    }
#undef ACT_CASE
}

void cpu_nn__epilogue_row(float *y, int64_t n, float bias,
                          const float *bias_vec, const float *residual,
                          osp_unary_op act, float alpha, float beta) {
    bool adds = bias != 0.0f || bias_vec != NULL || residual != NULL;
    bool avx512_act = (act == OSP_UNARY_GELU || act == OSP_UNARY_ERF) &&
                      cpu_act_avx512_serves(act);
    for (int64_t at = 0; at < n; at += EPILOGUE_CHUNK) {
        int64_t len = n - at < EPILOGUE_CHUNK ? n - at : EPILOGUE_CHUNK;
        if (adds)
            epilogue_add(y + at, len, bias,
                         bias_vec != NULL ? bias_vec + at : NULL,
                         residual != NULL ? residual + at : NULL);
        if (act == OSP_UNARY_IDENTITY)
            continue;
        if (avx512_act)
            cpu_act_avx512(y + at, y + at, len, act);
        else
            epilogue_act(y + at, len, act, alpha, beta);
    }
}

/* ---- gemm_ex ------------------------------------------------------------ */

/* The epilogue of batch element `batch` on the block rows [r0, r1) x
 * columns [c0, c1) of its m x n result c (row stride ldc: C itself, or
 * FP16's packed FP32 copy); the residual has C's layout. */
typedef struct gemm_epilogue_ctx {
    const osp_gemm_ex_args *x;
    int64_t batch;
    float *c;
    int64_t ldc;
    bool bias; /* false when C started as the bias */
} gemm_epilogue_ctx;

static void gemm_epilogue(void *arg, int64_t r0, int64_t r1, int64_t c0,
                          int64_t c1) {
    const gemm_epilogue_ctx *e = arg;
    const osp_gemm_ex_args *x = e->x;
    const osp_gemm_args *g = &x->gemm;
    for (int64_t r = r0; r < r1; r++) {
        const float *res =
            x->residual != NULL
                ? x->residual + e->batch * x->stride_c + r * g->ldc + c0
                : NULL;
        cpu_nn__epilogue_row(e->c + r * e->ldc + c0, c1 - c0, 0.0f,
                             e->bias ? x->bias + c0 : NULL, res, x->act,
                             x->act_alpha, x->act_beta);
    }
}

/* Batch element i of x as one sgemm on FP32 operands a, b, c (C's row
 * stride ldc), and its epilogue, on up to `threads` threads. Where C is
 * not read (beta 0), it starts as the bias and the GEMM adds to it: one
 * pass over C instead of OpenBLAS's zeroing it and the epilogue's
 * adding the bias. */
static void gemm_one(const osp_gemm_ex_args *x, int64_t i, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c,
                     int64_t ldc, int threads) {
    const osp_gemm_args *g = &x->gemm;
    cpu_sgemm_args s = cpu_sgemm_args_of(g, a, lda, b, ldb, c, ldc);
    gemm_epilogue_ctx e = {x, i, c, ldc, x->bias != NULL};
    if (e.bias && g->beta == 0.0f) {
        for (int64_t r = 0; r < g->m; r++)
            memcpy(c + r * ldc, x->bias, (size_t)g->n * sizeof(float));
        s.beta = 1.0f;
        e.bias = false;
    }
    bool epilogue =
        e.bias || x->residual != NULL || x->act != OSP_UNARY_IDENTITY;
    cpu_sgemm(&s, threads, epilogue ? gemm_epilogue : NULL, &e);
}

/* Batch elements [lo, hi), a run per thread (what the next op reads of
 * them is then mostly in its caches). */
static void gemm_batch_range(void *arg, int64_t lo, int64_t hi) {
    const osp_gemm_ex_args *x = arg;
    const osp_gemm_args *g = &x->gemm;
    for (int64_t i = lo; i < hi; i++)
        gemm_one(x, i, (const float *)g->a + i * x->stride_a, g->lda,
                 (const float *)g->b + i * x->stride_b, g->ldb,
                 (float *)g->c + i * x->stride_c, g->ldc, 1);
}

/* ---- the packed route ----------------------------------------------------
 * B packed at plan time (x->packed_b), A read in place, the epilogue in
 * the kernel's registers (cpu_packed_gemm.h). It serves alpha 1, beta 0,
 * A not transposed, one B for the whole batch, at least CPU_PACK_MR
 * rows and half a strip of columns (with fewer, most of the kernel's
 * lanes would idle: cpu_sgemm's small kernels do better there). Tasks
 * are (batch element, strip of columns). */
static bool packed_serves(const osp_gemm_ex_args *x) {
    const osp_gemm_args *g = &x->gemm;
    const osp_packed_weights *p = x->packed_b;
    return p != NULL && p->layout == CPU_PACKED_GEMM_B && p->rows == g->n &&
           p->k == g->k && !g->trans_a && g->alpha == 1.0f && g->beta == 0.0f &&
           g->m >= CPU_PACK_MR && g->n >= CPU_PACK_STRIP / 2 &&
           (x->batch_count <= 1 || x->stride_b == 0);
}

typedef struct packed_gemm_job {
    const osp_gemm_ex_args *x;
    int64_t strips;
} packed_gemm_job;

/* Rows of C per block when packed_gemm_b_rows applies the activation
 * itself: the block's columns stay in L2 until it does. */
#define ACT_ROWS_BLOCK 64

/* cpu_packed_gemm_b over strips [s0, s1) of one batch element, the
 * activation applied after each block of ACT_ROWS_BLOCK rows by
 * cpu_act_avx512 where that serves it (one call per row of the block's
 * columns, not the kernel's one per row of every 32-column tile: at
 * GELU's cost per element those calls were a fifth of its time). */
static void packed_gemm_b_rows(const float *a, int64_t lda, int64_t m,
                               int64_t k, const float *packed, int64_t s0,
                               int64_t s1, int64_t n, float *c, int64_t ldc,
                               const cpu_packed_epilogue *e) {
    if (!cpu_act_avx512_serves(e->act)) {
        cpu_packed_gemm_b(a, lda, m, k, packed, s0, s1, n, c, ldc, e);
        return;
    }
    int64_t j0 = s0 * CPU_PACK_STRIP;
    int64_t j1 = s1 * CPU_PACK_STRIP < n ? s1 * CPU_PACK_STRIP : n;
    for (int64_t r0 = 0; r0 < m; r0 += ACT_ROWS_BLOCK) {
        int64_t rows = m - r0 < ACT_ROWS_BLOCK ? m - r0 : ACT_ROWS_BLOCK;
        cpu_packed_epilogue plain = *e;
        plain.act = OSP_UNARY_IDENTITY;
        if (e->residual != NULL)
            plain.residual = e->residual + r0 * e->ldr;
        cpu_packed_gemm_b(a + r0 * lda, lda, rows, k, packed, s0, s1, n,
                          c + r0 * ldc, ldc, &plain);
        for (int64_t r = r0; r < r0 + rows; r++)
            cpu_act_avx512(c + r * ldc + j0, c + r * ldc + j0, j1 - j0, e->act);
    }
}

static void packed_gemm_range(void *arg, int64_t lo, int64_t hi) {
    const packed_gemm_job *job = arg;
    const osp_gemm_ex_args *x = job->x;
    const osp_gemm_args *g = &x->gemm;
    for (int64_t t = lo; t < hi;) {
        int64_t i = t / job->strips, s0 = t % job->strips;
        int64_t s1 = hi - t < job->strips - s0 ? s0 + (hi - t) : job->strips;
        cpu_packed_epilogue e = {.bias = x->bias,
                                 .residual = x->residual != NULL
                                                 ? x->residual + i * x->stride_c
                                                 : NULL,
                                 .ldr = g->ldc,
                                 .act = x->act,
                                 .act_alpha = x->act_alpha,
                                 .act_beta = x->act_beta};
        packed_gemm_b_rows((const float *)g->a + i * x->stride_a, g->lda, g->m,
                           g->k, x->packed_b->data, s0, s1, g->n,
                           (float *)g->c + i * x->stride_c, g->ldc, &e);
        t += s1 - s0;
    }
}

static void gemm_ex_packed(const osp_gemm_ex_args *x, int64_t batch,
                           int threads) {
    const osp_gemm_args *g = &x->gemm;
    packed_gemm_job job = {x, (g->n + CPU_PACK_STRIP - 1) / CPU_PACK_STRIP};
    cpu_parallel_range(batch * job.strips, g->m * g->k * CPU_PACK_STRIP,
                       threads, packed_gemm_range, &job);
}

osp_error *cpu_op_gemm_prepack(osp_device *dev, void *stream,
                               const osp_gemm_ex_args *args,
                               osp_packed_weights **out) {
    (void)dev;
    (void)stream;
    const osp_gemm_args *g = &args->gemm;
    osp_packed_weights *p = cpu_packed_weights_new(
        CPU_PACKED_GEMM_B, 1, g->n, g->k, cpu_packed_b_floats(g->k, g->n));
    if (p == NULL)
        return osp_error_out_of_memory();
    cpu_pack_b(g->b, g->ldb, g->trans_b, g->k, g->n, p->data);
    *out = p;
    return NULL;
}

/* A batch at least as large as the threads splits into runs of elements;
 * a smaller one splits each element's GEMM instead. */
static osp_error *gemm_ex_fp32(const osp_gemm_ex_args *x, int64_t batch,
                               int threads) {
    const osp_gemm_args *g0 = &x->gemm;
    if (packed_serves(x)) {
        gemm_ex_packed(x, batch, threads);
        return NULL;
    }
    if (batch > 1 && batch >= threads) {
        cpu_parallel_range(batch, g0->m * g0->n * (g0->k + 1), threads,
                           gemm_batch_range, (void *)x);
        return NULL;
    }
    for (int64_t i = 0; i < batch; i++) {
        const osp_gemm_args *g = &x->gemm;
        gemm_one(x, i, (const float *)g->a + i * x->stride_a, g->lda,
                 (const float *)g->b + i * x->stride_b, g->ldb,
                 (float *)g->c + i * x->stride_c, g->ldc, threads);
    }
    return NULL;
}

/* rows x cols of FP16 (row stride ld) into packed FP32. */
static void widen(const uint16_t *src, int64_t ld, int64_t rows, int64_t cols,
                  float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = fp16_to_fp32(src[r * ld + c]);
}

static float *alloc_matrix(int64_t rows, int64_t cols) {
    size_t count, bytes;
    if (__builtin_mul_overflow((size_t)rows, (size_t)cols, &count) ||
        __builtin_mul_overflow(count, sizeof(float), &bytes))
        return NULL;
    return malloc(bytes > 0 ? bytes : 1);
}

/* FP16 with FP32 accumulation: each batch element's A and B widened into
 * packed FP32 (once only when the stride is 0), C widened when beta reads
 * it, sgemm, the epilogue in FP32, then C rounded back; an FP32 C
 * (c_dtype) is the sgemm's own, never rounded. */
static osp_error *gemm_ex_fp16(const osp_gemm_ex_args *x, int64_t batch,
                               int threads) {
    const osp_gemm_args *g = &x->gemm;
    int64_t a_rows = g->trans_a ? g->k : g->m,
            a_cols = g->trans_a ? g->m : g->k;
    int64_t b_rows = g->trans_b ? g->n : g->k,
            b_cols = g->trans_b ? g->k : g->n;
    osp_error *err = NULL;
    float *a = alloc_matrix(a_rows, a_cols);
    float *b = alloc_matrix(b_rows, b_cols);
    bool c_fp32 = osp_gemm_c_dtype(g) == OSP_TYPE_FP32;
    float *c = c_fp32 ? NULL : alloc_matrix(g->m, g->n);
    if (a == NULL || b == NULL || (c == NULL && !c_fp32)) {
        err = osp_error_out_of_memory();
        goto out;
    }
    const uint16_t *a16 = g->a, *b16 = g->b;
    uint16_t *c16 = g->c;
    for (int64_t i = 0; i < batch; i++) {
        if (i == 0 || x->stride_a != 0)
            widen(a16 + i * x->stride_a, g->lda, a_rows, a_cols, a);
        if (i == 0 || x->stride_b != 0)
            widen(b16 + i * x->stride_b, g->ldb, b_rows, b_cols, b);
        /* BLAS wants ld >= 1 even for the empty matrices of k == 0. */
        int64_t lda = a_cols > 1 ? a_cols : 1, ldb = b_cols > 1 ? b_cols : 1;
        if (c_fp32) {
            gemm_one(x, i, a, lda, b, ldb, (float *)g->c + i * x->stride_c,
                     g->ldc, threads);
            continue;
        }
        uint16_t *ci = c16 + i * x->stride_c;
        if (g->beta != 0.0f)
            widen(ci, g->ldc, g->m, g->n, c);
        else
            memset(c, 0, (size_t)g->m * (size_t)g->n * sizeof(float));
        gemm_one(x, i, a, lda, b, ldb, c, g->n, threads);
        for (int64_t r = 0; r < g->m; r++)
            for (int64_t col = 0; col < g->n; col++)
                ci[r * g->ldc + col] = fp32_to_fp16(c[r * g->n + col]);
    }
out:
    free(a);
    free(b);
    free(c);
    return err;
}

osp_error *cpu_op_gemm_ex(osp_device *dev, void *stream,
                          const osp_gemm_ex_args *args) {
    (void)dev;
    int threads = cpu_stream_threads(stream);
    int64_t batch = args->batch_count > 1 ? args->batch_count : 1;
    if (args->gemm.dtype == OSP_TYPE_FP16)
        return gemm_ex_fp16(args, batch, threads);
    return gemm_ex_fp32(args, batch, threads);
}

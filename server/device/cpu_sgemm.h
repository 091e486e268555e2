/*
 * FP32 GEMM for the CPU device's ops (cpu_device.c's gemm, gemm_ex, conv,
 * conv_transpose): one GEMM split into blocks of C across the worker pool
 * (cpu_threads.h), each block a single-threaded OpenBLAS sgemm, or for
 * a few rows of A, a kernel of its own that reads B where it lies
 * (OpenBLAS would copy all of B into its packed layout first, which for a
 * few rows costs as much as the arithmetic).
 *
 * Every element of C is computed by one block, over the whole of k, so
 * the split changes which kernel computes an element but never what it
 * sums: results agree with one thread's to the rounding of the kernels.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "osprey/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Multiply-adds per thread below which splitting a GEMM costs more than
 * it saves (a wake-up, and OpenBLAS's packing done once per block). */
#define CPU_SGEMM_GRAIN ((int64_t)1 << 19)

/* Row-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, as
 * osp_gemm_args (op(X) is X^T when trans_x; lda, ldb, ldc are the row
 * strides of the matrices as stored, each >= 1 and <= INT_MAX). Pointers
 * are borrowed; C does not overlap A or B. */
typedef struct cpu_sgemm_args {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
} cpu_sgemm_args;

/* g's shape, transposes, alpha and beta with FP32 operands a, b, c of row
 * strides lda, ldb, ldc (borrowed): the part of osp_gemm_args cpu_sgemm
 * takes, for operands that may be copies (FP16's widened ones). */
static inline cpu_sgemm_args cpu_sgemm_args_of(const osp_gemm_args *g,
                                               const float *a, int64_t lda,
                                               const float *b, int64_t ldb,
                                               float *c, int64_t ldc) {
    cpu_sgemm_args s;
    s.trans_a = g->trans_a;
    s.trans_b = g->trans_b;
    s.m = g->m;
    s.n = g->n;
    s.k = g->k;
    s.alpha = g->alpha;
    s.beta = g->beta;
    s.a = a;
    s.lda = lda;
    s.b = b;
    s.ldb = ldb;
    s.c = c;
    s.ldc = ldc;
    return s;
}

/* Called by the thread that computed the block rows [r0, r1) x columns
 * [c0, c1) of C, right after, while it is in cache (ctx borrowed). */
typedef void (*cpu_sgemm_epilogue)(void *ctx, int64_t r0, int64_t r1,
                                   int64_t c0, int64_t c1);

/* Computes g on up to `threads` threads, the epilogue (NULL: none) on each
 * block. m, n > 0 (k may be 0: C = beta C). */
void cpu_sgemm(const cpu_sgemm_args *g, int threads,
               cpu_sgemm_epilogue epilogue, void *ctx);

/* The same on the calling thread only. */
void cpu_sgemm_serial(const cpu_sgemm_args *g);

#ifdef __cplusplus
}
#endif

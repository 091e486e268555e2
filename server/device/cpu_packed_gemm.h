/*
 * FP32 GEMM against a weight matrix packed once (at plan time, through
 * osp_op_conv_prepack or osp_op_gemm_prepack) into the micro-kernel's
 * layout, with the conv/gemm epilogue (bias, residual, activation)
 * applied while each tile of C is still in registers. Conv's weights are
 * the left operand (cpu_pack_a, cpu_packed_gemm), MatMul/Gemm's the right
 * one (cpu_pack_b, cpu_packed_gemm_b, below).
 *
 * C[m, n] = act(A[m, k] B[k, n] + bias[row] + residual), row-major, A
 * packed, B read where it lies (an im2col tile, or for a pointwise conv
 * the input planes themselves). The micro-kernel computes CPU_PACK_MR
 * rows by up to 32 columns: AVX-512 where the CPU has it (chosen at run
 * time, so the binary runs everywhere), else a portable loop that the
 * compiler vectorises (cpu_ops_nn.h's x86-64-v3 clone on x86).
 *
 * Every element of C sums its k products in order p = 0 .. k-1 with
 * fused multiply-adds where the kernel has them, so results agree with a
 * plain loop to rounding.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of A per packed panel. */
#define CPU_PACK_MR 8

/* Floats of the packed form of an m x k matrix: m rounded up to
 * CPU_PACK_MR, times k. */
static inline size_t cpu_packed_floats(int64_t m, int64_t k) {
    return (size_t)((m + CPU_PACK_MR - 1) / CPU_PACK_MR * CPU_PACK_MR) *
           (size_t)k;
}

/* packed (cpu_packed_floats(m, k) floats, caller owns) = a (row-major,
 * rows lda apart, borrowed) as panels of CPU_PACK_MR rows: panel i holds
 * a[i MR + r][p] at [i MR k + p MR + r], zeros past row m. */
void cpu_pack_a(const float *a, int64_t lda, int64_t m, int64_t k,
                float *packed);

/* The epilogue: y = act(y + bias[row] + residual[row, col]); bias
 * (indexed by C's row) and residual (rows ldr apart, C's columns) may be
 * NULL; all borrowed. */
typedef struct cpu_packed_epilogue {
    const float *bias;
    const float *residual;
    int64_t ldr;
    osp_unary_op act;
    float act_alpha, act_beta;
} cpu_packed_epilogue;

/* Columns of C per micro-kernel tile. */
#define CPU_PACK_STRIP 32

/* C rows [r0, r1) (r0 a multiple of CPU_PACK_MR), columns [0, n):
 * c[i, j] = epilogue(sum_p A[i, p] b[p, j]) with A packed by cpu_pack_a
 * (m rows in all, k columns), b rows ldb apart, c rows ldc apart, k >= 0.
 * The epilogue's bias and residual are indexed as c is (row i of C reads
 * bias[i] and residual + i * ldr). On the calling thread; borrows all. */
void cpu_packed_gemm(const float *packed, int64_t k, int64_t r0, int64_t r1,
                     const float *b, int64_t ldb, int64_t n, float *c,
                     int64_t ldc, const cpu_packed_epilogue *e);

/* cpu_packed_gemm for a B that is no matrix: row p of B starts at b +
 * b_rows[p] (so a conv reads its taps straight from a padded input, no
 * im2col; cpu_ops_conv.c's direct route), and A either packed by
 * cpu_pack_a (a_packed) or row-major with rows k apart, as it lies. Row
 * panels outside, all n columns inside: meant for a B that stays in L2.
 * Rows [r0, r1) of C (r0 a multiple of CPU_PACK_MR), the epilogue as in
 * cpu_packed_gemm. On the calling thread; borrows all. */
void cpu_packed_gemm_at(const float *a, bool a_packed, int64_t k, int64_t r0,
                        int64_t r1, const float *b, const int32_t *b_rows,
                        int64_t n, float *c, int64_t ldc,
                        const cpu_packed_epilogue *e);

/* ---- the other way round: B packed, for MatMul/Gemm's weights -------- */

/* Floats of the packed form of a k x n right operand: n rounded up to
 * CPU_PACK_STRIP, times k. */
static inline size_t cpu_packed_b_floats(int64_t k, int64_t n) {
    return (size_t)((n + CPU_PACK_STRIP - 1) / CPU_PACK_STRIP *
                    CPU_PACK_STRIP) *
           (size_t)k;
}

/* packed (cpu_packed_b_floats(k, n) floats, caller owns) = op(b) [k, n]
 * (b row-major, rows ldb apart; op(b) = b^T when trans_b, borrowed) as
 * strips of CPU_PACK_STRIP columns: strip s holds op(b)[p][s S + j] at
 * [s S k + p S + j] (S = CPU_PACK_STRIP), zeros past column n. */
void cpu_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t k, int64_t n,
                float *packed);

/* C columns of strips [s0, s1), rows [0, m): c[i, j] = epilogue(sum_p
 * a[i, p] B[p, j]) with a row-major (rows lda apart) and B packed by
 * cpu_pack_b (n columns); the epilogue's bias is per column (bias[j]),
 * its residual in c's layout (rows ldr apart). On the calling thread;
 * borrows all. */
void cpu_packed_gemm_b(const float *a, int64_t lda, int64_t m, int64_t k,
                       const float *packed_b, int64_t s0, int64_t s1, int64_t n,
                       float *c, int64_t ldc, const cpu_packed_epilogue *e);

/* ---- the device's packed weights (osprey/tensor_ops.h's opaque type) -- */

typedef enum cpu_packed_layout {
    CPU_PACKED_CONV_A, /* per group, a [rows, k] matrix by cpu_pack_a */
    CPU_PACKED_GEMM_B, /* one [k, rows] right operand by cpu_pack_b */
} cpu_packed_layout;

struct osp_packed_weights {
    cpu_packed_layout layout;
    int64_t groups, rows, k;
    size_t group_floats; /* floats per group in data */
    float data[];
};

/* A packed form of `groups` blocks of group_floats floats each, fields
 * set, data uninitialised (64-byte aligned; free with free()); NULL on
 * overflow or out of memory. */
osp_packed_weights *cpu_packed_weights_new(cpu_packed_layout layout,
                                           int64_t groups, int64_t rows,
                                           int64_t k, size_t group_floats);

/* Which micro-kernel cpu_packed_gemm and cpu_packed_gemm_b (and the
 * depthwise route, cpu_depthwise.h) run: the best the CPU has (the
 * default), or the portable one everywhere (for the tests, which check
 * both against the same reference). Process-wide; not for use while
 * another thread runs a GEMM or conv. */
typedef enum cpu_packed_kernel {
    CPU_PACKED_KERNEL_BEST = 0,
    CPU_PACKED_KERNEL_PORTABLE,
} cpu_packed_kernel;
void cpu_packed_gemm_select(cpu_packed_kernel kernel);

/* Whether the AVX-512 kernel exists in this build and this CPU has it. */
bool cpu_packed_gemm_has_avx512(void);

/* Whether the AVX-512 kernels run: they exist, the CPU has them and
 * cpu_packed_gemm_select left them selected. */
bool cpu_packed_gemm_avx512_selected(void);

#ifdef __cplusplus
}
#endif

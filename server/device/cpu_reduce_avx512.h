/*
 * AVX-512 loops for a transformer's two row-wise ops, chosen at run time
 * like the packed GEMM's kernel; cpu_ops_reduce.c's loops stay the
 * reference and the route everywhere else:
 *
 * - one contiguous softmax line (softmax_line without log): attention's
 *   [batch, heads, seq, seq] scores. Same steps: the line's maximum (NaN
 *   if any element is), exp(x - max) with differences below -87 giving
 *   0, their sum in double, and the products by (float)(1 / sum);
 * - one LayerNormalization row with scale and bias (layer_norm_range):
 *   mean and two-pass variance in double, then (x - mean) inv scale +
 *   bias in float.
 *
 * The double sums add in another order than the reference's, which moves
 * a result by at most an ulp.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether these loops run on this CPU (the build has them and
 * cpu_packed_gemm_select left the AVX-512 kernels selected). */
bool cpu_reduce_avx512_serves(void);

/* out[0..n) = softmax(x[0..n)), n >= 0; out may be x; borrows both. */
void cpu_softmax_line_avx512(const float *x, float *out, int64_t n);

/* y[0..cols) = (x - mean) inv_std scale + bias, cols >= 1; y may be x;
 * *mean and *inv_std (the float values used) written when not NULL;
 * borrows all. */
void cpu_layer_norm_row_avx512(const float *x, const float *scale,
                               const float *bias, float *y, int64_t cols,
                               float epsilon, float *mean, float *inv_std);

#ifdef __cplusplus
}
#endif

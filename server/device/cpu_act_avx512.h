/*
 * AVX-512 loops of the activations whose scalar rules (unary_rules.h)
 * cost the most per element: GELU (erf form) and Erf, the epilogue of a
 * BERT encoder's intermediate MatMul. Chosen at run time like the packed
 * GEMM's kernel (cpu_packed_gemm_avx512_selected), so the binary runs
 * everywhere; elsewhere, or for other ops, the caller keeps its loop over
 * the scalar rule (cpu_ops_nn.h's x86-64-v3 clone), which stays the
 * reference: these loops compute the same formulas, lane by lane, and
 * agree with it to a few ulps (the scalar loop may or may not fuse a
 * multiply-add where these always do).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether cpu_act_avx512 serves act on this CPU: act is GELU or ERF, the
 * build has the kernels and cpu_packed_gemm_select left them selected. */
bool cpu_act_avx512_serves(osp_unary_op act);

/* y[i] = act(x[i]) for i < n (n >= 0; y may be x), act one that
 * cpu_act_avx512_serves accepted; borrows both. */
void cpu_act_avx512(const float *x, float *y, int64_t n, osp_unary_op act);

#ifdef __cplusplus
}
#endif

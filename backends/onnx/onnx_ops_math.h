/*
 * The math op family, private to its files: onnx_ops_math.c holds the one
 * family table (onnx_ops_math_family), the ops live in
 *   onnx_ops_matmul.c   MatMul, Gemm, osprey FusedMatMul/FusedGemm
 *   onnx_ops_einsum.c   Einsum
 *   onnx_ops_reduce.c   Reduce*, ArgMax/ArgMin, TopK, CumSum
 *   onnx_ops_softmax.c  Softmax, LogSoftmax, Hardmax
 * Every op keeps only attributes in its state; run recomputes the
 * geometry from its descs (cheap), so one state serves every binding.
 */
#pragma once

#include "onnx_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* onnx_ops_matmul.c */
osp_error *onnx_math__matmul_prepare(const onnx_node *node, void **state);
/* Free the states of matmul_prepare and gemm_prepare (and the packed
 * weights they hold). */
void onnx_math__matmul_free(void *state);
void onnx_math__gemm_free(void *state);
osp_error *onnx_math__matmul_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__matmul_run(onnx_run_ctx *ctx);
osp_error *onnx_math__gemm_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__gemm_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__gemm_run(onnx_run_ctx *ctx);

/* onnx_ops_einsum.c */
osp_error *onnx_math__einsum_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__einsum_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__einsum_run(onnx_run_ctx *ctx);

/* onnx_ops_reduce.c */
osp_error *onnx_math__reduce_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__reduce_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__reduce_run(onnx_run_ctx *ctx);
osp_error *onnx_math__arg_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__arg_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__arg_run(onnx_run_ctx *ctx);
osp_error *onnx_math__topk_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__topk_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__topk_run(onnx_run_ctx *ctx);
osp_error *onnx_math__cumsum_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__cumsum_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__cumsum_run(onnx_run_ctx *ctx);

/* onnx_ops_softmax.c */
osp_error *onnx_math__softmax_prepare(const onnx_node *node, void **state);
osp_error *onnx_math__softmax_infer(onnx_infer_ctx *ctx);
osp_error *onnx_math__softmax_run(onnx_run_ctx *ctx);
osp_error *onnx_math__hardmax_run(onnx_run_ctx *ctx);

#ifdef __cplusplus
}
#endif

/*
 * The "extra" op family, private to its files: onnx_ops_extra.c holds the
 * one family table (onnx_ops_extra_family), the helpers below and the
 * small ops; the others live in
 *   onnx_ops_loss.c   NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 *   onnx_ops_quant.c  QuantizeLinear, DequantizeLinear,
 *                     DynamicQuantizeLinear
 *   onnx_ops_index.c  OneHot, ReverseSequence, GatherND, ScatterND,
 *                     ScatterElements, Scatter, NonZero, Compress, Unique,
 *                     NonMaxSuppression
 * Every op keeps only attributes in its state (or none); run recomputes
 * its geometry and workspace layout from its descs with the same code
 * infer used to size the workspace, so one state serves every binding.
 */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A workspace carved into 64-byte aligned slots, the same way at infer
 * (base NULL: only `used` grows, to size the workspace) and at run (base
 * the run's workspace: each take returns its slot). */
typedef struct onnx_extra__ws {
    uint8_t *base; /* borrowed; NULL while sizing */
    size_t used;
} onnx_extra__ws;

/* The next slot of `bytes` (at least one alignment unit); NULL while
 * sizing. */
void *onnx_extra__take(onnx_extra__ws *ws, size_t bytes);

/* n elements of dtype dt (FP32, FP64, integers, BOOL) set to v. */
osp_error *onnx_extra__fill(osp_stream *stream, void *dst, osp_datatype dt,
                            double v, int64_t n);

/* out[k] = k for k < n in dtype (FP32, INT32 or INT64), through `ones`
 * (n elements of scratch): a fill of ones, exclusive-summed. */
osp_error *onnx_extra__iota(osp_stream *stream, osp_datatype dtype, void *ones,
                            void *out, int64_t n);

/* osp_op_cast of n elements (nothing when 0). */
osp_error *onnx_extra__cast(osp_stream *stream, const void *src,
                            osp_datatype src_dtype, void *dst,
                            osp_datatype dst_dtype, int64_t n);

/* Linear offsets over a grid: out[p] = sum_d p[d] * strides[d] for every
 * position p of the row-major grid `dims`, count(dims) of them, in dtype
 * (INT64, or INT32 when the caller knows the offsets fit). offsets_layout
 * carves its scratch from ws (call it the same way at infer and at run);
 * offsets enqueues the ops: one broadcast multiply-add per dim that moves
 * (size > 1, stride != 0). */
typedef struct onnx_extra__offsets_ws {
    void *tmp, *ones, *iota, *vec, *scalar;
} onnx_extra__offsets_ws;

void onnx_extra__offsets_layout(onnx_extra__ws *ws, int rank,
                                const int64_t *dims,
                                onnx_extra__offsets_ws *out);
osp_error *onnx_extra__offsets(osp_stream *stream,
                               const onnx_extra__offsets_ws *ws,
                               osp_datatype dtype, int rank,
                               const int64_t *dims, const int64_t *strides,
                               void *out);


/* onnx_ops_loss.c */
osp_error *onnx_extra__loss_prepare(const onnx_node *node, void **state);
osp_error *onnx_extra__loss_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__loss_run(onnx_run_ctx *ctx);

/* onnx_ops_quant.c */
osp_error *onnx_extra__quantize_prepare(const onnx_node *node, void **state);
osp_error *onnx_extra__quantize_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__quantize_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__dequantize_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__dequantize_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__dynamic_quantize_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__dynamic_quantize_run(onnx_run_ctx *ctx);

/* onnx_ops_index.c */
osp_error *onnx_extra__one_hot_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__one_hot_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__reverse_sequence_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__reverse_sequence_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__gather_nd_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__gather_nd_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__scatter_prepare(const onnx_node *node, void **state);
osp_error *onnx_extra__scatter_nd_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__scatter_nd_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__scatter_elements_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__scatter_elements_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__non_zero_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__non_zero_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__compress_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__compress_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__unique_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__unique_run(onnx_run_ctx *ctx);
osp_error *onnx_extra__nms_infer(onnx_infer_ctx *ctx);
osp_error *onnx_extra__nms_run(onnx_run_ctx *ctx);

#ifdef __cplusplus
}
#endif

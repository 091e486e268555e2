/*
 * The elementwise op family, private to its files: onnx_ops_elementwise.c
 * (binary, variadic, Clip, Where, Cast and the family's one table) and
 * onnx_ops_activation.c (the unary ops). What they share: dtype classes,
 * the workspace layout used when an op computes a half type (FP16, BF16)
 * in FP32 because the device ops take no half types, and the unary ops'
 * functions.
 *
 * Half promotion: an op whose device op has no half variant casts each
 * half operand into an FP32 copy in the workspace, computes in FP32 and
 * casts the result back. The inputs are exact in FP32 and the result is
 * rounded once to the output type, so for one elementwise op this gives
 * the same values as computing in the half type with FP32 arithmetic.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "onnx_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline bool onnx_ew__is_half(osp_datatype dt) {
    return dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16;
}

static inline bool onnx_ew__is_float(osp_datatype dt) {
    return dt == OSP_TYPE_FP32 || dt == OSP_TYPE_FP64;
}

static inline bool onnx_ew__is_signed(osp_datatype dt) {
    return dt == OSP_TYPE_INT8 || dt == OSP_TYPE_INT16 ||
           dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64;
}

static inline bool onnx_ew__is_unsigned(osp_datatype dt) {
    return dt == OSP_TYPE_UINT8 || dt == OSP_TYPE_UINT16 ||
           dt == OSP_TYPE_UINT32 || dt == OSP_TYPE_UINT64;
}

/* A number binary_nd computes in natively. */
static inline bool onnx_ew__is_number(osp_datatype dt) {
    return onnx_ew__is_float(dt) || onnx_ew__is_signed(dt) ||
           onnx_ew__is_unsigned(dt);
}

/* The dtype a numeric op computes `dt` in: FP32 for half types, else dt. */
static inline osp_datatype onnx_ew__compute_dtype(osp_datatype dt) {
    return onnx_ew__is_half(dt) ? OSP_TYPE_FP32 : dt;
}

/* Bytes of a workspace slot holding `count` elements of `dt`, rounded up
 * to the slot alignment. */
static inline size_t onnx_ew__slot(int64_t count, osp_datatype dt) {
    return onnx_align64((size_t)count * osp_datatype_byte_size(dt));
}

/* The unary ops (onnx_ops_activation.c), one entry each in the family's
 * table: prepare reads the op's parameters into a state from malloc;
 * infer and run serve every op of the table by the node's op_type. */
osp_error *onnx_ew__unary_prepare(const onnx_node *node, void **state);
osp_error *onnx_ew__unary_infer(onnx_infer_ctx *ctx);
osp_error *onnx_ew__unary_run(onnx_run_ctx *ctx);

#ifdef __cplusplus
}
#endif

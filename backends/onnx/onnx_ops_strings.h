/*
 * The ops' STRING cases (onnx_ops_strings.c): Cast and CastLike to and
 * from STRING, Equal of two STRING tensors, Constant and ConstantOfShape
 * of a STRING value. The op entries of onnx_ops_elementwise.c and
 * onnx_ops_shape.c hand their STRING cases here (the movement ops need
 * none: they move 16-byte references like any element).
 *
 * Numbers print and parse as onnxruntime's Cast does:
 *   to STRING    integers in decimal; BOOL "1"/"0"; FLOAT, DOUBLE and the
 *                half types (through FLOAT) as printf's "%.8g", with
 *                "NaN", "INF" and "-INF";
 *   from STRING  C's strtod for the floating types (leading blanks, a
 *                prefix of the text, "inf"/"nan", hex floats), then
 *                rounded to the target; strtoll (signed) or strtoull
 *                (unsigned, BOOL: non-zero is true) in base 10, then
 *                truncated to the target's width. Text with no number at
 *                its start, or one past the range of double / 64-bit
 *                integers, is an INVALID_ARG error naming the element.
 * Strings exist only on the CPU device, whose streams are synchronous, so
 * these run on the host directly.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "onnx_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest text onnx_string_format_number writes, NUL included. */
#define ONNX_NUMBER_TEXT_MAX 48

/* Prints element i of src (number dtype dt) as onnxruntime's Cast to
 * STRING does into buf (ONNX_NUMBER_TEXT_MAX bytes, NUL-terminated);
 * returns its length. */
size_t onnx_string_format_number(osp_datatype dt, const void *src, size_t i,
                                 char *buf);

/* Parses text[len] (borrowed; need not be NUL-terminated) as onnxruntime's
 * Cast from STRING does into element i of dst (number dtype dt). NULL, or
 * INVALID_ARG saying why (no number, out of range) and quoting the text. */
osp_error *onnx_string_parse_number(osp_datatype dt, const char *text,
                                    size_t len, void *dst, size_t i);

/* Whether Cast from `from` to `to`, one of them STRING, is served. */
bool onnx_strings_castable(osp_datatype from, osp_datatype to);

/* Cast/CastLike's run when its input or output is STRING. */
osp_error *onnx_strings_cast_run(onnx_run_ctx *ctx);

/* Constant's run for a STRING value: the `count` elements of wire[bytes]
 * (the BYTES wire form; borrowed from the node's state) into ctx->out[0],
 * each element's bytes copied into ctx->strings, since the value outlives
 * the node (a folded Constant's state is freed after planning). */
osp_error *onnx_strings_constant_run(onnx_run_ctx *ctx, const void *wire,
                                     size_t bytes, int64_t count);

/* ConstantOfShape's run for a STRING value: every element of ctx->out[0]
 * is `value` (borrowed), whose bytes are copied into ctx->strings once. */
osp_error *onnx_strings_fill_run(onnx_run_ctx *ctx, onnx_string value);

/* Equal's infer and run for two STRING inputs (numpy broadcasting; a BOOL
 * output). */
osp_error *onnx_strings_equal_infer(onnx_infer_ctx *ctx);
osp_error *onnx_strings_equal_run(onnx_run_ctx *ctx);

#ifdef __cplusplus
}
#endif

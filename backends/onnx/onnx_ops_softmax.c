/*
 * Softmax, LogSoftmax and Hardmax. Before opset 13 the input is coerced
 * to 2-D at `axis` (default 1): the op runs over all the trailing dims
 * flattened. From 13 it runs along the one axis (default -1). Either way
 * the input is [outer, n, inner] for osp_op_softmax. Hardmax has no
 * device op of its own: an argmax along the axis, then a one-hot made by
 * comparing against an iota (a fill of ones, exclusive-summed), cast to
 * FP32.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_math.h"

typedef struct softmax_state {
    int64_t axis;
    bool coerce_2d; /* opset < 13 */
    bool log;
} softmax_state;

osp_error *onnx_math__softmax_prepare(const onnx_node *node, void **state) {
    softmax_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    st->coerce_2d = node->opset < 13;
    st->log = strcmp(node->op_type, "LogSoftmax") == 0;
    osp_error *err =
        onnx_attr_int(node, "axis", st->coerce_2d ? 1 : -1, &st->axis);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

static osp_error *softmax_geometry(const onnx_node *node,
                                   const softmax_state *st, size_t n_inputs,
                                   const onnx_desc *inputs, int64_t *outer,
                                   int64_t *n, int64_t *inner) {
    if (!onnx_present(n_inputs, inputs, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input is required");
    const onnx_desc *x = &inputs[0];
    if (x->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32)",
                               osp_datatype_wire_name(x->dtype));
    const osp_shape *s = &x->shape;
    int axis;
    osp_error *err;
    if (st->coerce_2d) {
        if ((err = onnx_axis(node, st->axis, s->rank, &axis)) != NULL)
            return err;
        *outer = onnx_shape_span(s, 0, axis);
        *n = onnx_shape_span(s, axis, s->rank);
        *inner = 1;
        return NULL;
    }
    if ((err = onnx_axis(node, st->axis, s->rank, &axis)) != NULL)
        return err;
    *outer = onnx_shape_span(s, 0, axis);
    *n = s->dims[axis];
    *inner = onnx_shape_span(s, axis + 1, s->rank);
    return NULL;
}

/* Hardmax's workspace: ones and iota (INT64 [n]), the argmax (INT64
 * [outer, inner]), the one-hot mask (BOOL [outer, n, inner]). */
typedef struct hardmax_ws {
    size_t ones, iota, argmax, mask, total;
} hardmax_ws;

static hardmax_ws hardmax_layout(int64_t outer, int64_t n, int64_t inner) {
    hardmax_ws w;
    w.ones = 0;
    w.iota = w.ones + onnx_align64((size_t)n * 8);
    w.argmax = w.iota + onnx_align64((size_t)n * 8);
    w.mask = w.argmax + onnx_align64((size_t)(outer * inner) * 8);
    w.total = w.mask + onnx_align64((size_t)(outer * n * inner));
    return w;
}

osp_error *onnx_math__softmax_infer(onnx_infer_ctx *ctx) {
    int64_t outer, n, inner;
    osp_error *err = softmax_geometry(ctx->node, ctx->state, ctx->n_inputs,
                                      ctx->inputs, &outer, &n, &inner);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    if (strcmp(ctx->node->op_type, "Hardmax") == 0 && outer * n * inner > 0)
        ctx->workspace_bytes = hardmax_layout(outer, n, inner).total;
    return NULL;
}

osp_error *onnx_math__softmax_run(onnx_run_ctx *ctx) {
    const softmax_state *st = ctx->state;
    int64_t outer, n, inner;
    osp_error *err = softmax_geometry(ctx->node, st, ctx->n_inputs,
                                      ctx->in_desc, &outer, &n, &inner);
    if (err)
        return err;
    osp_softmax_args a = {
        .x = ctx->in[0],
        .out = ctx->out[0],
        .outer = outer,
        .n = n,
        .inner = inner,
        .log = st->log,
    };
    return osp_op_softmax(ctx->stream, &a);
}

osp_error *onnx_math__hardmax_run(onnx_run_ctx *ctx) {
    int64_t outer, n, inner;
    osp_error *err = softmax_geometry(ctx->node, ctx->state, ctx->n_inputs,
                                      ctx->in_desc, &outer, &n, &inner);
    if (err)
        return err;
    if (outer * n * inner == 0)
        return NULL;
    hardmax_ws w = hardmax_layout(outer, n, inner);
    char *ws = ctx->workspace;
    int64_t *ones = (int64_t *)(ws + w.ones);
    int64_t *iota = (int64_t *)(ws + w.iota);
    int64_t *argmax = (int64_t *)(ws + w.argmax);
    bool *mask = (bool *)(ws + w.mask);
    osp_reduce_args r = {
        .op = OSP_REDUCE_ARGMAX,
        .dtype = OSP_TYPE_FP32,
        .x = ctx->in[0],
        .outer = outer,
        .n = n,
        .inner = inner,
        .out = argmax,
    };
    osp_binary_nd_args eq = {
        .op = OSP_BINARY_ND_EQUAL,
        .dtype = OSP_TYPE_INT64,
        .rank = 3,
        .dims = {outer, n, inner},
        .a = iota,
        .a_strides = {0, 1, 0},
        .b = argmax,
        .b_strides = {inner, 0, 1},
        .out = mask,
    };
    if ((err = onnx_iota_i64(ctx->stream, ones, iota, n, 1)) != NULL ||
        (err = osp_op_reduce(ctx->stream, &r)) != NULL ||
        (err = osp_op_binary_nd(ctx->stream, &eq)) != NULL)
        return err;
    return osp_op_cast(ctx->stream, mask, OSP_TYPE_BOOL, ctx->out[0],
                       OSP_TYPE_FP32, (size_t)(outer * n * inner));
}

/*
 * Linear quantization: QuantizeLinear and DequantizeLinear (opset 10 with
 * a per-tensor scale, 13 on also per axis), DynamicQuantizeLinear (11).
 *
 * Everything is computed in FP32 and converted by osp_op_cast, whose
 * float-to-integer conversion saturates at the type's range, which is
 * the quantizers' saturation; the rounding before it is OSP_UNARY_ROUND
 * (half to even), as the spec asks:
 *   QuantizeLinear       y = saturate(round(x / scale) + zero_point)
 *   DequantizeLinear     y = (x - zero_point) * scale
 *   DynamicQuantizeLinear scale = (max(0, max x) - min(0, min x)) / 255,
 *                        zero_point = round(saturate(-min(0, min x) /
 *                        scale)), y as QuantizeLinear into UINT8.
 * A per-axis scale and zero point broadcast along `axis` of x viewed as
 * [outer, C, inner].
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_extra.h"

typedef struct quant_state {
    int64_t axis;
} quant_state;

osp_error *onnx_extra__quantize_prepare(const onnx_node *node, void **state) {
    int64_t axis, block = 0;
    osp_error *err = onnx_attr_int(node, "axis", 1, &axis);
    if (!err)
        err = onnx_attr_int(node, "block_size", 0, &block);
    if (err)
        return err;
    if (block != 0)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "attribute 'block_size' = %lld (blocked "
                                 "quantization) is not supported",
                                 (long long)block);
    if (onnx_node_attr(node, "output_dtype"))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "attribute 'output_dtype' is not "
                                 "supported");
    quant_state *st = malloc(sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    st->axis = axis;
    *state = st;
    return NULL;
}

static bool is_quantized_int(osp_datatype dt) {
    return dt == OSP_TYPE_UINT8 || dt == OSP_TYPE_INT8 ||
           dt == OSP_TYPE_UINT16 || dt == OSP_TYPE_INT16;
}

/* x viewed as [outer, c, inner] with the scale (and zero point) over c;
 * c = 1 for a per-tensor scale. */
typedef struct quant_geometry {
    int64_t outer, c, inner, count;
    bool has_zero_point;
    osp_datatype zp_dtype;
} quant_geometry;

static osp_error *quant_geometry_of(const onnx_node *node,
                                    const quant_state *st, size_t n_inputs,
                                    const onnx_desc *inputs,
                                    quant_geometry *g) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (err)
        return err;
    const onnx_desc *x = &inputs[0], *scale = &inputs[1];
    if (scale->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "scale: dtype %s is not supported (FP32)",
                                 osp_datatype_wire_name(scale->dtype));
    g->count = onnx_shape_count(&x->shape);
    g->outer = 1;
    g->c = 1;
    g->inner = g->count;
    int64_t n_scale = onnx_shape_count(&scale->shape);
    if (scale->shape.rank > 1)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "a scale of rank %d (blocked quantization) "
                                 "is not supported",
                                 scale->shape.rank);
    /* One value is a per-tensor scale whatever its rank (as onnxruntime
     * reads a [1] scale); more are per axis (opset 13). */
    if (n_scale != 1) {
        if (scale->shape.rank != 1 || node->opset < 13)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "scale has %lld values, expected 1",
                                     (long long)n_scale);
        int axis;
        if ((err = onnx_axis(node, st->axis, x->shape.rank, &axis)))
            return err;
        if (n_scale != x->shape.dims[axis])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "scale has %lld values for axis %d of "
                                     "%lld",
                                     (long long)n_scale, axis,
                                     (long long)x->shape.dims[axis]);
        g->outer = onnx_shape_span(&x->shape, 0, axis);
        g->c = x->shape.dims[axis];
        g->inner = onnx_shape_span(&x->shape, axis + 1, x->shape.rank);
    }
    g->has_zero_point = onnx_present(n_inputs, inputs, 2);
    g->zp_dtype = OSP_TYPE_INVALID;
    if (g->has_zero_point) {
        const onnx_desc *zp = &inputs[2];
        if (onnx_shape_count(&zp->shape) != n_scale)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "zero point and scale differ in shape");
        g->zp_dtype = zp->dtype;
    }
    return NULL;
}

/* out = a op b over [outer, c, inner]: a whole, b per c (or one value when
 * c is 1). */
static osp_error *per_channel(osp_stream *stream, osp_binary_nd_op op,
                              const quant_geometry *g, const float *a,
                              const float *b, float *out) {
    if (g->count == 0)
        return NULL;
    osp_binary_nd_args args = {.op = op,
                               .dtype = OSP_TYPE_FP32,
                               .rank = 3,
                               .dims = {g->outer, g->c, g->inner},
                               .a = a,
                               .a_strides = {g->c * g->inner, g->inner, 1},
                               .b = b,
                               .b_strides = {0, g->c > 1 ? 1 : 0, 0},
                               .out = out};
    return osp_op_binary_nd(stream, &args);
}

typedef struct quant_layout {
    float *a, *b, *zp;
} quant_layout;

static void quant_carve(onnx_extra__ws *ws, const quant_geometry *g,
                        quant_layout *l) {
    l->a = onnx_extra__take(ws, (size_t)g->count * 4);
    l->b = onnx_extra__take(ws, (size_t)g->count * 4);
    l->zp = onnx_extra__take(ws, (size_t)g->c * 4);
}

/* ---- QuantizeLinear ------------------------------------------------------
 */

osp_error *onnx_extra__quantize_infer(onnx_infer_ctx *ctx) {
    quant_geometry g;
    osp_error *err = quant_geometry_of(ctx->node, ctx->state, ctx->n_inputs,
                                       ctx->inputs, &g);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype != OSP_TYPE_FP32)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported (FP32)",
                                 osp_datatype_wire_name(x->dtype));
    osp_datatype out = g.has_zero_point ? g.zp_dtype : OSP_TYPE_UINT8;
    if (!is_quantized_int(out))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "zero point: dtype %s is not supported "
                                 "(UINT8, INT8, UINT16, INT16)",
                                 osp_datatype_wire_name(out));
    ctx->outputs[0].dtype = out;
    ctx->outputs[0].shape = x->shape;
    onnx_extra__ws ws = {0};
    quant_layout l;
    quant_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__quantize_run(onnx_run_ctx *ctx) {
    quant_geometry g;
    osp_error *err = quant_geometry_of(ctx->node, ctx->state, ctx->n_inputs,
                                       ctx->in_desc, &g);
    if (err || g.count == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    quant_layout l;
    quant_carve(&ws, &g, &l);
    osp_stream *s = ctx->stream;
    if ((err = per_channel(s, OSP_BINARY_ND_DIV, &g, ctx->in[0], ctx->in[1],
                           l.a)))
        return err;
    osp_unary_args round = {.op = OSP_UNARY_ROUND,
                            .dtype = OSP_TYPE_FP32,
                            .x = l.a,
                            .y = l.a,
                            .n = (size_t)g.count};
    if ((err = osp_op_unary(s, &round)))
        return err;
    const float *q = l.a;
    if (g.has_zero_point) {
        if ((err = onnx_extra__cast(s, ctx->in[2], g.zp_dtype, l.zp,
                                    OSP_TYPE_FP32, g.c)) ||
            (err = per_channel(s, OSP_BINARY_ND_ADD, &g, l.a, l.zp, l.b)))
            return err;
        q = l.b;
    }
    return onnx_extra__cast(s, q, OSP_TYPE_FP32, ctx->out[0],
                            ctx->out_desc[0].dtype, g.count);
}

/* ---- DequantizeLinear ----------------------------------------------------
 */

osp_error *onnx_extra__dequantize_infer(onnx_infer_ctx *ctx) {
    quant_geometry g;
    osp_error *err = quant_geometry_of(ctx->node, ctx->state, ctx->n_inputs,
                                       ctx->inputs, &g);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (!is_quantized_int(x->dtype) && x->dtype != OSP_TYPE_INT32)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported (UINT8, "
                                 "INT8, UINT16, INT16, INT32)",
                                 osp_datatype_wire_name(x->dtype));
    if (g.has_zero_point && g.zp_dtype != x->dtype)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                                 "zero point is %s, input 0 is %s",
                                 osp_datatype_wire_name(g.zp_dtype),
                                 osp_datatype_wire_name(x->dtype));
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = x->shape;
    onnx_extra__ws ws = {0};
    quant_layout l;
    quant_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__dequantize_run(onnx_run_ctx *ctx) {
    quant_geometry g;
    osp_error *err = quant_geometry_of(ctx->node, ctx->state, ctx->n_inputs,
                                       ctx->in_desc, &g);
    if (err || g.count == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    quant_layout l;
    quant_carve(&ws, &g, &l);
    osp_stream *s = ctx->stream;
    osp_datatype xdt = ctx->in_desc[0].dtype;
    if ((err =
             onnx_extra__cast(s, ctx->in[0], xdt, l.a, OSP_TYPE_FP32, g.count)))
        return err;
    const float *centered = l.a;
    if (g.has_zero_point) {
        if ((err = onnx_extra__cast(s, ctx->in[2], xdt, l.zp, OSP_TYPE_FP32,
                                    g.c)) ||
            (err = per_channel(s, OSP_BINARY_ND_SUB, &g, l.a, l.zp, l.b)))
            return err;
        centered = l.b;
    }
    return per_channel(s, OSP_BINARY_ND_MUL, &g, centered, ctx->in[1],
                       ctx->out[0]);
}

/* ---- DynamicQuantizeLinear -----------------------------------------------
 */

typedef struct dynq_layout {
    float *scalars; /* min, max, 0, 255, min0, max0, range, q, zp */
    float *a, *b;
} dynq_layout;

static void dynq_carve(onnx_extra__ws *ws, int64_t n, dynq_layout *l) {
    l->scalars = onnx_extra__take(ws, 16 * 4);
    l->a = onnx_extra__take(ws, (size_t)n * 4);
    l->b = onnx_extra__take(ws, (size_t)n * 4);
}

osp_error *onnx_extra__dynamic_quantize_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype != OSP_TYPE_FP32)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported (FP32)",
                                 osp_datatype_wire_name(x->dtype));
    static const osp_datatype types[3] = {OSP_TYPE_UINT8, OSP_TYPE_FP32,
                                          OSP_TYPE_UINT8};
    for (size_t i = 0; i < ctx->n_outputs && i < 3; i++) {
        ctx->outputs[i].dtype = types[i];
        ctx->outputs[i].shape = (osp_shape){.rank = 0};
    }
    ctx->outputs[0].shape = x->shape;
    onnx_extra__ws ws = {0};
    dynq_layout l;
    dynq_carve(&ws, onnx_shape_count(&x->shape), &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__dynamic_quantize_run(onnx_run_ctx *ctx) {
    int64_t n = onnx_shape_count(&ctx->in_desc[0].shape);
    onnx_extra__ws ws = {.base = ctx->workspace};
    dynq_layout l;
    dynq_carve(&ws, n, &l);
    osp_stream *s = ctx->stream;
    const osp_datatype f = OSP_TYPE_FP32;
    float *mn = l.scalars, *mx = mn + 1, *zero = mn + 2, *c255 = mn + 3,
          *mn0 = mn + 4, *mx0 = mn + 5, *range = mn + 6, *q = mn + 7,
          *zp = mn + 8;
    /* the outputs the node omits go to the workspace */
    float *scale = onnx_present(ctx->n_outputs, ctx->out_desc, 1)
                       ? ctx->out[1]
                       : mn + 9;
    osp_reduce_args r = {.op = OSP_REDUCE_MIN,
                         .dtype = f,
                         .x = ctx->in[0],
                         .outer = 1,
                         .n = n,
                         .inner = 1,
                         .out = mn};
    osp_error *err = osp_op_reduce(s, &r);
    if (err)
        return err;
    r.op = OSP_REDUCE_MAX;
    r.out = mx;
    if ((err = osp_op_reduce(s, &r)) ||
        (err = onnx_extra__fill(s, zero, f, 0.0, 1)) ||
        (err = onnx_extra__fill(s, c255, f, 255.0, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MIN, f, mn, true, zero, true,
                                  mn0, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MAX, f, mx, true, zero, true,
                                  mx0, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, f, mx0, true, mn0, true,
                                  range, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, f, range, true, c255,
                                  true, scale, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, f, mn0, true, scale,
                                  true, q, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, f, zero, true, q, true,
                                  zp, 1)))
        return err;
    osp_unary_args u = {.op = OSP_UNARY_CLIP,
                        .dtype = f,
                        .x = zp,
                        .y = zp,
                        .n = 1,
                        .alpha = 0.0f,
                        .beta = 255.0f};
    if ((err = osp_op_unary(s, &u)))
        return err;
    u.op = OSP_UNARY_ROUND;
    if ((err = osp_op_unary(s, &u)))
        return err;
    if (onnx_present(ctx->n_outputs, ctx->out_desc, 2) &&
        (err = onnx_extra__cast(s, zp, f, ctx->out[2], OSP_TYPE_UINT8, 1)))
        return err;
    if (n == 0 || !onnx_present(ctx->n_outputs, ctx->out_desc, 0))
        return NULL;
    if ((err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, f, ctx->in[0], false,
                                  scale, true, l.a, n)))
        return err;
    u.x = u.y = l.a;
    u.n = (size_t)n;
    if ((err = osp_op_unary(s, &u)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, f, l.a, false, zp, true,
                                  l.b, n)))
        return err;
    return onnx_extra__cast(s, l.b, f, ctx->out[0], OSP_TYPE_UINT8, n);
}

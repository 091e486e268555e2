/*
 * Convolutions: Conv (opset 1 on; 11 only relaxed defaults), osprey
 * FusedConv (Conv plus a residual input Z and an epilogue activation, made
 * by the fusion passes; Z normally has Y's shape and rides in the conv's
 * epilogue) and ConvTranspose (1 on). FP32 or FP16 tensors, 1 to 3
 * spatial dimensions, through osp_op_conv and osp_op_conv_transpose; the
 * ONNX shape rules (auto_pad, pads, output_padding, output_shape) are
 * resolved here into out_dims and leading pads.
 *
 * The products (see conv_plan): FP32; TF32 under allow_tf32 and FP16
 * operands under precision fp16 where the device has a GEMM route for
 * them (the CUDA device; the workspace for it reserved here); FP16 tensors
 * multiply their FP16 values with FP32 accumulation on every device,
 * through FP32 activations in the workspace, Y rounded to FP16 once.
 * Depthwise convs keep FP32 products.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_nn.h"
#include "onnx_packed.h"

typedef struct conv_state {
    onnx_nn_window w;
    int64_t group;
    bool fused; /* FusedConv: input 3 is the residual, act the epilogue */
    osp_unary_op act;
    float act_alpha, act_beta;
    /* ConvTranspose */
    size_t n_output_padding, n_output_shape;
    int64_t output_padding[OSP_CONV_MAX_SPATIAL];
    int64_t output_shape[OSP_MAX_DIMS];
    onnx_packed pack; /* Conv, FusedConv: W packed on the first run */
} conv_state;

/* Reads the attributes both convolutions share into a new state. */
static osp_error *conv_state_new(const onnx_node *node, conv_state **out) {
    conv_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_nn__window_read(node, false, &st->w);
    if (!err)
        err = onnx_attr_int(node, "group", 1, &st->group);
    if (!err && st->group < 1)
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'group' = %lld is below 1",
                              (long long)st->group);
    if (err) {
        free(st);
        return err;
    }
    *out = st;
    return NULL;
}

osp_error *onnx_nn__conv_prepare(const onnx_node *node, void **state) {
    conv_state *st;
    osp_error *err = conv_state_new(node, &st);
    if (err)
        return err;
    if ((err = onnx_packed_init(&st->pack))) {
        free(st);
        return err;
    }
    st->act = OSP_UNARY_IDENTITY;
    if (strcmp(node->domain, "osprey") == 0) {
        st->fused = true;
        err = onnx_fused_activation(node, &st->act, &st->act_alpha,
                                    &st->act_beta);
        if (err) {
            onnx_nn__conv_free(st);
            return err;
        }
    }
    *state = st;
    return NULL;
}

void onnx_nn__conv_free(void *state) {
    conv_state *st = state;
    if (st == NULL)
        return;
    onnx_packed_destroy(&st->pack);
    free(st);
}

static osp_error *conv_prepack(osp_stream *stream, const void *args,
                               osp_packed_weights **out) {
    return osp_op_conv_prepack(stream, args, out);
}

/* Checks X and W (inputs 0 and 1) of either convolution: FP32, or FP16
 * for both, W of X's rank, 1 to 3 spatial dimensions, kernel_shape (when
 * given) matching W. Sets *rank to the spatial rank and kernel[] from W. */
static osp_error *conv_check_xw(const onnx_node *node, const conv_state *st,
                                size_t n_in, const onnx_desc *in, int *rank,
                                int64_t kernel[OSP_CONV_MAX_SPATIAL]) {
    osp_error *err;
    if (!onnx_present(n_in, in, 0) || !onnx_present(n_in, in, 1))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs X and W are required");
    if (in[0].dtype != OSP_TYPE_FP16 && (err = onnx_want_fp32(node, &in[0], 0)))
        return err;
    if (in[1].dtype != in[0].dtype)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "X is %s but W is %s",
                               osp_datatype_wire_name(in[0].dtype),
                               osp_datatype_wire_name(in[1].dtype));
    const osp_shape *x = &in[0].shape, *w = &in[1].shape;
    if (x->rank < 3)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X has rank %d; [N, C, spatial...] of "
                               "rank 3 or more expected",
                               x->rank);
    if (x->rank > 2 + OSP_CONV_MAX_SPATIAL)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "input X has %d spatial dimensions; 1 to %d "
                               "are supported",
                               x->rank - 2, OSP_CONV_MAX_SPATIAL);
    if (w->rank != x->rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input W has rank %d, X rank %d; they must "
                               "match",
                               w->rank, x->rank);
    *rank = x->rank - 2;
    if (st->w.n_kernel && st->w.n_kernel != (size_t)*rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'kernel_shape' has %zu values, %d "
                               "expected",
                               st->w.n_kernel, *rank);
    for (int d = 0; d < *rank; d++) {
        kernel[d] = w->dims[2 + d];
        if (st->w.n_kernel && st->w.kernel[d] != kernel[d])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'kernel_shape'[%d] = %lld but "
                                   "W's kernel is %lld",
                                   d, (long long)st->w.kernel[d],
                                   (long long)kernel[d]);
        if (kernel[d] < 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input W has an empty kernel dimension");
    }
    return NULL;
}

/* Checks an optional input of X's dtype (the bias B, FusedConv's Z). */
static osp_error *conv_check_like_x(const onnx_node *node, size_t n_in,
                                    const onnx_desc *in, size_t j) {
    if (!onnx_present(n_in, in, j) || in[j].dtype == in[0].dtype)
        return NULL;
    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                           "input %zu is %s, X %s; they must match", j,
                           osp_datatype_wire_name(in[j].dtype),
                           osp_datatype_wire_name(in[0].dtype));
}

/* Checks the optional bias B (input 2): X's dtype, [channels]. */
static osp_error *conv_check_bias(const onnx_node *node, size_t n_in,
                                  const onnx_desc *in, int64_t channels) {
    if (!onnx_present(n_in, in, 2))
        return NULL;
    osp_error *err = conv_check_like_x(node, n_in, in, 2);
    if (err)
        return err;
    if (in[2].shape.rank != 1 || in[2].shape.dims[0] != channels)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input B must be [%lld] (one per output "
                               "channel)",
                               (long long)channels);
    return NULL;
}

/* Conv's geometry from its inputs: the device args (pointers unset) and
 * Y's shape. */
static osp_error *conv_geometry(const onnx_node *node, const conv_state *st,
                                size_t n_in, const onnx_desc *in,
                                osp_conv_args *a, osp_shape *y) {
    int rank;
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    osp_error *err = conv_check_xw(node, st, n_in, in, &rank, kernel);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape, *w = &in[1].shape;
    int64_t c = x->dims[1], m = w->dims[0];
    if (w->dims[1] * st->group != c)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input W has %lld input channels per group; "
                               "X's %lld channels in %lld groups need %lld",
                               (long long)w->dims[1], (long long)c,
                               (long long)st->group,
                               (long long)(c / st->group));
    if (m % st->group != 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "%lld output channels do not split into %lld "
                               "groups",
                               (long long)m, (long long)st->group);
    if ((err = conv_check_bias(node, n_in, in, m)))
        return err;
    onnx_nn_geom g;
    if ((err =
             onnx_nn__window_geom(node, &st->w, rank, x->dims + 2, kernel, &g)))
        return err;
    memset(a, 0, sizeof *a);
    a->spatial_rank = rank;
    a->batch = x->dims[0];
    a->in_channels = c;
    a->out_channels = m;
    a->group = st->group;
    y->rank = x->rank;
    y->dims[0] = x->dims[0];
    y->dims[1] = m;
    for (int d = 0; d < rank; d++) {
        a->in_dims[d] = g.in[d];
        a->out_dims[d] = g.out[d];
        a->kernel[d] = g.kernel[d];
        a->stride[d] = g.stride[d];
        a->pad_begin[d] = g.pad_begin[d];
        a->dilation[d] = g.dilation[d];
        y->dims[2 + d] = g.out[d];
    }
    a->act = st->act;
    a->act_alpha = st->act_alpha;
    a->act_beta = st->act_beta;
    return NULL;
}

/* How FusedConv's residual Z (input 3) reaches the conv's epilogue. The
 * fusion passes fold any Add of a tensor into FusedConv before shapes are
 * known, so Z may broadcast: */
typedef enum residual_kind {
    RESIDUAL_NONE = 0,
    RESIDUAL_DIRECT, /* Z has Y's shape */
    RESIDUAL_EXPAND, /* Z broadcasts to Y: expanded into the workspace */
    RESIDUAL_WIDEN,  /* Y broadcasts too: conv into the workspace, then a
                        broadcasting add into the output and the
                        activation there */
} residual_kind;

/* A conv's plan, the same at infer and run. The device conv is FP32
 * (x, bias, residual, y); its products are FP32, TF32 (allow_tf32) or
 * FP16 (w_fp16: precision fp16 on a GPU, or FP16 tensors on any device).
 * FP16 tensors ("half") are computed through FP32 copies in the
 * workspace, W passed as it is as the FP16 weights (widened for a
 * depthwise conv, which has no FP16 form), Y rounded back at the end.
 * Workspace, in this order (the FP32 path's part first, so that a run
 * that multiplies in FP32 finds its blocks where infer put them):
 *   res    the residual's expansion, or the conv's output to widen
 *   x, b, z, y   FP32 copies of X, B, Z and Y (half)
 *   w      W widened (half, depthwise), or cast to FP16 (precision fp16
 *          with a W that is not a constant)
 *   gemm   the device conv's own workspace (its GEMM route) */
typedef struct conv_plan {
    osp_conv_args conv; /* pointers unset */
    osp_shape y_conv;   /* what the conv computes */
    osp_shape y;        /* the node's output */
    residual_kind residual;
    int64_t z_strides[OSP_MAX_DIMS], c_strides[OSP_MAX_DIMS];
    bool half, depthwise;
    bool w16; /* the conv multiplies FP16 operands (w_fp16) */
    size_t off_x, off_b, off_z, off_y, off_w, off_gemm, gemm_bytes, ws_bytes;
} conv_plan;

static size_t conv_count(const onnx_desc *in, size_t n_in, size_t j) {
    return onnx_present(n_in, in, j) ? (size_t)onnx_shape_count(&in[j].shape)
                                     : 0;
}

/* fp16: the precision fp16 of the model (infer) or of the device (run);
 * tf32: the model's allow_tf32. */
static osp_error *conv_plan_make(const onnx_node *node, const conv_state *st,
                                 size_t n_in, const onnx_desc *in, bool fp16,
                                 bool tf32, conv_plan *p) {
    memset(p, 0, sizeof *p);
    osp_error *err = conv_geometry(node, st, n_in, in, &p->conv, &p->y_conv);
    if (err)
        return err;
    p->y = p->y_conv;
    p->half = in[0].dtype == OSP_TYPE_FP16;
    p->depthwise = p->conv.group > 1 && p->conv.in_channels == p->conv.group;
    if (st->fused && onnx_present(n_in, in, 3)) {
        if ((err = conv_check_like_x(node, n_in, in, 3)))
            return err;
        const osp_shape *z = &in[3].shape;
        if (osp_shape_equal(z, &p->y_conv)) {
            p->residual = RESIDUAL_DIRECT;
        } else {
            if ((err = onnx_broadcast_shape(node, &p->y_conv, z, &p->y)))
                return err;
            onnx_broadcast_strides(z, &p->y, p->z_strides);
            if (osp_shape_equal(&p->y, &p->y_conv)) {
                p->residual = RESIDUAL_EXPAND;
            } else {
                p->residual = RESIDUAL_WIDEN;
                onnx_broadcast_strides(&p->y_conv, &p->y, p->c_strides);
            }
            p->ws_bytes = onnx_align64((size_t)onnx_shape_count(&p->y_conv) *
                                       sizeof(float));
        }
    }
    if (p->half) {
        p->off_x = p->ws_bytes;
        p->off_b = p->off_x + onnx_align64(conv_count(in, n_in, 0) * 4);
        p->off_z = p->off_b + onnx_align64(conv_count(in, n_in, 2) * 4);
        p->off_y = p->off_z +
                   onnx_align64((st->fused ? conv_count(in, n_in, 3) : 0) * 4);
        p->ws_bytes =
            p->off_y + onnx_align64((size_t)onnx_shape_count(&p->y) * 4);
    }
    p->w16 =
        !p->depthwise && (p->half || (fp16 && in[0].dtype == OSP_TYPE_FP32));
    p->off_w = p->ws_bytes;
    size_t w_count = conv_count(in, n_in, 1);
    if (p->half && p->depthwise)
        p->ws_bytes += onnx_align64(w_count * 4);
    else if (p->w16 && !p->half && in[1].host == NULL)
        p->ws_bytes += onnx_align64(w_count * 2);
    p->off_gemm = p->ws_bytes;
    osp_conv_args shape = p->conv;
    shape.allow_tf32 = tf32 && !p->half;
    size_t ws32 = osp_conv_workspace_bytes(&shape, false);
    p->gemm_bytes = p->w16 ? osp_conv_workspace_bytes(&shape, true) : 0;
    if (ws32 > p->gemm_bytes)
        p->gemm_bytes = ws32;
    p->ws_bytes += onnx_align64(p->gemm_bytes);
    return NULL;
}

osp_error *onnx_nn__conv_infer(onnx_infer_ctx *ctx) {
    conv_plan p;
    osp_error *err =
        conv_plan_make(ctx->node, ctx->state, ctx->n_inputs, ctx->inputs,
                       ctx->fp16_weights, ctx->allow_tf32, &p);
    if (err)
        return err;
    osp_datatype dt = ctx->inputs[0].dtype;
    if ((err = onnx_check_shape(ctx->node, &p.y, dt)))
        return err;
    ctx->outputs[0].dtype = dt;
    ctx->outputs[0].shape = p.y;
    ctx->workspace_bytes = p.ws_bytes;
    if (p.w16 && !p.half && ctx->inputs[1].host)
        ctx->fp16_inputs = 1u << 1;
    return NULL;
}

/* Casts n elements from -> to (nothing for n == 0). */
static osp_error *conv_cast(osp_stream *stream, const void *src,
                            osp_datatype from, void *dst, osp_datatype to,
                            size_t n) {
    return n ? osp_op_cast(stream, src, from, dst, to, n) : NULL;
}

/* The conv of a (its x, w or w_fp16, bias and y set) with FusedConv's
 * residual z (FP32, or NULL) into y (FP32, the node's output shape). */
static osp_error *conv_with_residual(onnx_run_ctx *ctx, const conv_plan *p,
                                     osp_conv_args *a, const float *z,
                                     float *y) {
    const conv_state *st = ctx->state;
    float *ws = ctx->workspace;
    osp_error *err;
    osp_copy_strided_args expand = {
        .elem_size = sizeof(float),
        .rank = p->y.rank,
        .dst = ws,
    };
    a->y = y;
    switch (p->residual) {
    case RESIDUAL_NONE:
        break;
    case RESIDUAL_DIRECT:
        a->residual = z;
        break;
    case RESIDUAL_EXPAND:
        expand.src = z;
        memcpy(expand.dims, p->y.dims, sizeof expand.dims);
        memcpy(expand.src_strides, p->z_strides, sizeof expand.src_strides);
        onnx_contiguous_strides(&p->y, expand.dst_strides);
        if (onnx_shape_count(&p->y) > 0 &&
            (err = osp_op_copy_strided(ctx->stream, &expand)))
            return err;
        a->residual = ws;
        break;
    case RESIDUAL_WIDEN: {
        a->y = ws;
        a->act = OSP_UNARY_IDENTITY;
        if ((err = osp_op_conv(ctx->stream, a)))
            return err;
        if (onnx_shape_count(&p->y) == 0)
            return NULL;
        osp_binary_nd_args add = {
            .op = OSP_BINARY_ND_ADD,
            .dtype = OSP_TYPE_FP32,
            .rank = p->y.rank,
            .a = ws,
            .b = z,
            .out = y,
        };
        memcpy(add.dims, p->y.dims, sizeof add.dims);
        memcpy(add.a_strides, p->c_strides, sizeof add.a_strides);
        memcpy(add.b_strides, p->z_strides, sizeof add.b_strides);
        if ((err = osp_op_binary_nd(ctx->stream, &add)))
            return err;
        if (st->act == OSP_UNARY_IDENTITY)
            return NULL;
        osp_unary_args act = {
            .op = st->act,
            .dtype = OSP_TYPE_FP32,
            .x = y,
            .y = y,
            .n = (size_t)onnx_shape_count(&p->y),
            .alpha = st->act_alpha,
            .beta = st->act_beta,
        };
        return osp_op_unary(ctx->stream, &act);
    }
    }
    return osp_op_conv(ctx->stream, a);
}

osp_error *onnx_nn__conv_run(onnx_run_ctx *ctx) {
    conv_state *st = ctx->state;
    const onnx_desc *in = ctx->in_desc;
    size_t n_in = ctx->n_inputs;
    conv_plan p;
    osp_error *err =
        conv_plan_make(ctx->node, st, n_in, in, ctx->fp16, ctx->allow_tf32, &p);
    if (err)
        return err;
    char *ws = ctx->workspace;
    osp_conv_args *a = &p.conv;
    const float *z = st->fused && onnx_present(n_in, in, 3) ? ctx->in[3] : NULL;
    float *y = ctx->out[0];
    a->x = ctx->in[0];
    a->w = ctx->in[1];
    a->bias = onnx_present(n_in, in, 2) ? ctx->in[2] : NULL;
    a->allow_tf32 = ctx->allow_tf32 && !p.half;
    a->workspace = p.gemm_bytes ? ws + p.off_gemm : NULL;
    a->workspace_bytes = p.gemm_bytes;
    const osp_datatype f16 = OSP_TYPE_FP16, f32 = OSP_TYPE_FP32;
    if (p.half) {
        /* FP16 tensors: FP32 copies, W as the FP16 weights it is */
        float *x32 = (float *)(ws + p.off_x), *b32 = (float *)(ws + p.off_b),
              *z32 = (float *)(ws + p.off_z);
        if ((err = conv_cast(ctx->stream, a->x, f16, x32, f32,
                             conv_count(in, n_in, 0))) ||
            (a->bias && (err = conv_cast(ctx->stream, a->bias, f16, b32, f32,
                                         conv_count(in, n_in, 2)))) ||
            (z && (err = conv_cast(ctx->stream, z, f16, z32, f32,
                                   conv_count(in, n_in, 3)))))
            return err;
        a->x = x32;
        a->bias = a->bias ? b32 : NULL;
        z = z ? z32 : NULL;
        y = (float *)(ws + p.off_y);
        if (p.depthwise) {
            float *w32 = (float *)(ws + p.off_w);
            if ((err = conv_cast(ctx->stream, ctx->in[1], f16, w32, f32,
                                 conv_count(in, n_in, 1))))
                return err;
            a->w = w32;
        } else {
            a->w_fp16 = ctx->in[1];
            a->w = NULL;
        }
    } else if (p.w16 &&
               (in[1].host == NULL || (ctx->in_fp16 && ctx->in_fp16[1]))) {
        /* precision fp16: a constant's FP16 copy, or W cast here */
        a->w_fp16 = in[1].host ? ctx->in_fp16[1] : ws + p.off_w;
        if (in[1].host == NULL &&
            (err = conv_cast(ctx->stream, ctx->in[1], f32, ws + p.off_w, f16,
                             conv_count(in, n_in, 1))))
            return err;
        a->w = NULL;
    } else if (in[1].host != NULL &&
               (err = onnx_packed_get(&st->pack, ctx->stream, a->w,
                                      conv_prepack, a, &a->packed_w))) {
        /* a constant W (its values known while planning) is packed once */
        return err;
    }
    if ((err = conv_with_residual(ctx, &p, a, z, y)) || !p.half)
        return err;
    return conv_cast(ctx->stream, y, f32, ctx->out[0], f16,
                     (size_t)onnx_shape_count(&p.y));
}

/* ---- ConvTranspose -------------------------------------------------------
 */

osp_error *onnx_nn__conv_transpose_prepare(const onnx_node *node,
                                           void **state) {
    conv_state *st;
    osp_error *err = conv_state_new(node, &st);
    if (err)
        return err;
    const int64_t *v;
    size_t n;
    if ((err = onnx_attr_ints(node, "output_padding", &v, &n)))
        goto fail;
    if (n > OSP_CONV_MAX_SPATIAL) {
        err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                              "attribute 'output_padding' has %zu values: "
                              "more than %d spatial dimensions are not "
                              "supported",
                              n, OSP_CONV_MAX_SPATIAL);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] < 0) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'output_padding'[%zu] is "
                                  "negative",
                                  i);
            goto fail;
        }
        st->output_padding[i] = v[i];
    }
    st->n_output_padding = n;
    if ((err = onnx_attr_ints(node, "output_shape", &v, &n)))
        goto fail;
    if (n > OSP_MAX_DIMS) {
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'output_shape' has %zu values", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        st->output_shape[i] = v[i];
    st->n_output_shape = n;
    *state = st;
    return NULL;
fail:
    free(st);
    return err;
}

/* Python's floor division for a non-zero divisor. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* ConvTranspose's geometry (ONNX's rules): with output_shape, out is
 * given and the pads follow from it (the extra one at the end for
 * SAME_UPPER, at the start otherwise); with SAME_*, out = in * stride;
 * else out = stride * (in - 1) + output_padding + dilated kernel - pads. */
static osp_error *conv_transpose_geometry(const onnx_node *node,
                                          const conv_state *st, size_t n_in,
                                          const onnx_desc *in,
                                          osp_conv_transpose_args *a,
                                          osp_shape *y) {
    int rank;
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    osp_error *err = conv_check_xw(node, st, n_in, in, &rank, kernel);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape, *w = &in[1].shape;
    int64_t c = x->dims[1], m = w->dims[1] * st->group;
    if (w->dims[0] != c)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input W is [%lld, ...]; X's %lld channels "
                               "expected first",
                               (long long)w->dims[0], (long long)c);
    if (c % st->group != 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "%lld input channels do not split into %lld "
                               "groups",
                               (long long)c, (long long)st->group);
    if ((err = conv_check_bias(node, n_in, in, m)))
        return err;
    const onnx_nn_window *wa = &st->w;
    if (wa->n_strides && wa->n_strides != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'strides' has %zu values, %d "
                               "expected",
                               wa->n_strides, rank);
    if (wa->n_dilations && wa->n_dilations != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'dilations' has %zu values, %d "
                               "expected",
                               wa->n_dilations, rank);
    if (wa->n_pads && wa->n_pads != 2 * (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'pads' has %zu values, %d expected",
                               wa->n_pads, 2 * rank);
    if (st->n_output_padding && st->n_output_padding != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'output_padding' has %zu values, "
                               "%d expected",
                               st->n_output_padding, rank);
    /* output_shape may list the spatial dims or the whole shape. */
    const int64_t *oshape = NULL;
    if (st->n_output_shape == (size_t)rank)
        oshape = st->output_shape;
    else if (st->n_output_shape == (size_t)rank + 2)
        oshape = st->output_shape + 2;
    else if (st->n_output_shape)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'output_shape' has %zu values, %d "
                               "or %d expected",
                               st->n_output_shape, rank, rank + 2);
    memset(a, 0, sizeof *a);
    a->spatial_rank = rank;
    a->batch = x->dims[0];
    a->in_channels = c;
    a->out_channels = m;
    a->group = st->group;
    y->rank = x->rank;
    y->dims[0] = x->dims[0];
    y->dims[1] = m;
    for (int d = 0; d < rank; d++) {
        int64_t n = x->dims[2 + d];
        int64_t s = wa->n_strides ? wa->strides[d] : 1;
        int64_t dl = wa->n_dilations ? wa->dilations[d] : 1;
        int64_t op = st->n_output_padding ? st->output_padding[d] : 0;
        if (n < 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "spatial dimension %d of X is empty", d);
        if (kernel[d] > (INT64_C(1) << 31) || dl > (INT64_C(1) << 31) ||
            s > (INT64_C(1) << 31) || op > (INT64_C(1) << 31) ||
            n > (INT64_C(1) << 31))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "spatial dimension %d is out of range", d);
        int64_t full = s * (n - 1) + op + (kernel[d] - 1) * dl + 1;
        int64_t out, pb;
        bool same = wa->auto_pad == ONNX_NN_PAD_SAME_UPPER ||
                    wa->auto_pad == ONNX_NN_PAD_SAME_LOWER;
        if (oshape || same) {
            out = oshape ? oshape[d] : n * s;
            int64_t total = full - out;
            pb = wa->auto_pad == ONNX_NN_PAD_SAME_UPPER
                     ? floor_div(total, 2)
                     : total - floor_div(total, 2);
        } else {
            bool valid = wa->auto_pad == ONNX_NN_PAD_VALID;
            pb = wa->n_pads && !valid ? wa->pads[d] : 0;
            int64_t pe = wa->n_pads && !valid ? wa->pads[rank + d] : 0;
            out = full - pb - pe;
        }
        if (out < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "spatial dimension %d of Y would be %lld", d,
                                   (long long)out);
        if (pb < 0)
            return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                   "spatial dimension %d: output_shape %lld "
                                   "needs a negative leading pad (%lld)",
                                   d, (long long)out, (long long)pb);
        a->in_dims[d] = n;
        a->out_dims[d] = out;
        a->kernel[d] = kernel[d];
        a->stride[d] = s;
        a->pad_begin[d] = pb;
        a->dilation[d] = dl;
        y->dims[2 + d] = out;
    }
    return NULL;
}

/* FP16 tensors of a ConvTranspose: FP32 copies of X, W, B and Y in the
 * workspace, at these offsets (the conv_transpose slot is FP32). */
typedef struct conv_transpose_half {
    size_t off_w, off_b, off_y, bytes;
} conv_transpose_half;

static conv_transpose_half
conv_transpose_layout(size_t n_in, const onnx_desc *in, const osp_shape *y) {
    conv_transpose_half h = {0};
    if (in[0].dtype != OSP_TYPE_FP16)
        return h;
    h.off_w = onnx_align64(conv_count(in, n_in, 0) * 4);
    h.off_b = h.off_w + onnx_align64(conv_count(in, n_in, 1) * 4);
    h.off_y = h.off_b + onnx_align64(conv_count(in, n_in, 2) * 4);
    h.bytes = h.off_y + onnx_align64((size_t)onnx_shape_count(y) * 4);
    return h;
}

osp_error *onnx_nn__conv_transpose_infer(onnx_infer_ctx *ctx) {
    osp_conv_transpose_args a;
    osp_shape y;
    osp_error *err = conv_transpose_geometry(
        ctx->node, ctx->state, ctx->n_inputs, ctx->inputs, &a, &y);
    if (err)
        return err;
    osp_datatype dt = ctx->inputs[0].dtype;
    if ((err = onnx_check_shape(ctx->node, &y, dt)))
        return err;
    ctx->outputs[0].dtype = dt;
    ctx->outputs[0].shape = y;
    ctx->workspace_bytes =
        conv_transpose_layout(ctx->n_inputs, ctx->inputs, &y).bytes;
    return NULL;
}

osp_error *onnx_nn__conv_transpose_run(onnx_run_ctx *ctx) {
    osp_conv_transpose_args a;
    osp_shape y;
    const onnx_desc *in = ctx->in_desc;
    size_t n_in = ctx->n_inputs;
    osp_error *err =
        conv_transpose_geometry(ctx->node, ctx->state, n_in, in, &a, &y);
    if (err)
        return err;
    a.x = ctx->in[0];
    a.w = ctx->in[1];
    a.bias = onnx_present(n_in, in, 2) ? ctx->in[2] : NULL;
    a.y = ctx->out[0];
    if (in[0].dtype != OSP_TYPE_FP16)
        return osp_op_conv_transpose(ctx->stream, &a);
    /* FP16 tensors: computed in FP32, Y rounded once */
    conv_transpose_half h = conv_transpose_layout(n_in, in, &y);
    char *ws = ctx->workspace;
    const osp_datatype f16 = OSP_TYPE_FP16, f32 = OSP_TYPE_FP32;
    if ((err = conv_cast(ctx->stream, a.x, f16, ws, f32,
                         conv_count(in, n_in, 0))) ||
        (err = conv_cast(ctx->stream, a.w, f16, ws + h.off_w, f32,
                         conv_count(in, n_in, 1))) ||
        (a.bias && (err = conv_cast(ctx->stream, a.bias, f16, ws + h.off_b, f32,
                                    conv_count(in, n_in, 2)))))
        return err;
    a.x = (const float *)ws;
    a.w = (const float *)(ws + h.off_w);
    a.bias = a.bias ? (const float *)(ws + h.off_b) : NULL;
    a.y = (float *)(ws + h.off_y);
    if ((err = osp_op_conv_transpose(ctx->stream, &a)))
        return err;
    return conv_cast(ctx->stream, a.y, f32, ctx->out[0], f16,
                     (size_t)onnx_shape_count(&y));
}

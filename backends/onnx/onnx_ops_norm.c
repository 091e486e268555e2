/*
 * Normalisations, all FP32:
 *   BatchNormalization (7: spatial; 9: always per channel; 14:
 *     training_mode; 15: typed statistics), inference only: per-channel
 *     scale = gamma / sqrt(var + epsilon) and shift = beta - mean * scale
 *     are folded in the workspace with device ops, then one
 *     osp_op_channel_affine. (The fusion passes fold a BatchNormalization
 *     with constant statistics into the Conv before it; this is the
 *     unfused path.)
 *   InstanceNormalization (6): osp_op_layer_norm over [N*C, spatial]
 *     without scale, then channel_affine with scale and bias.
 *   LayerNormalization (17): osp_op_layer_norm over [prod(dims[:axis]),
 *     prod(dims[axis:])], Mean and InvStdDev when asked; a scale or bias
 *     that broadcasts to the normalised shape without having its size is
 *     expanded into the workspace first.
 *   GroupNormalization (18: scale and bias per group; 21: per channel):
 *     layer_norm over [N*G, C/G*spatial], then channel_affine.
 *   LRN (1, 13): x / (bias + alpha / size * sum of squares over the
 *     channel window)^beta; the window sum is an average pool over x^2
 *     seen as [N, 1, C, spatial] with a (size, 1) kernel that counts its
 *     padding (so it divides by size).
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_nn.h"

/* INVALID_ARG unless input i is present, FP32 and holds `count` values
 * shaped [count] (or, when `like` is given, shaped like it). */
static osp_error *check_param(const onnx_node *node, size_t n_in,
                              const onnx_desc *in, size_t i, const char *name,
                              int64_t count, const osp_shape *like) {
    if (!onnx_present(n_in, in, i))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu (%s) is required", i, name);
    osp_error *err = onnx_want_fp32(node, &in[i], i);
    if (err)
        return err;
    const osp_shape *s = &in[i].shape;
    bool ok =
        like ? osp_shape_equal(s, like) : s->rank == 1 && s->dims[0] == count;
    if (!ok) {
        char buf[128];
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu (%s) has shape %s; %lld values "
                               "(one per %s) expected",
                               i, name, osp_shape_format(s, buf, sizeof buf),
                               (long long)count, like ? "element" : "channel");
    }
    return NULL;
}

/* True when output i of the node is named (not omitted). */
static bool node_has_output(const onnx_node *node, size_t i) {
    return i < node->n_outputs && node->outputs[i] && node->outputs[i][0];
}

/* ---- BatchNormalization --------------------------------------------------
 */

typedef struct batch_norm_state {
    float epsilon;
    bool spatial; /* opset < 9: false = statistics per (channel, position) */
} batch_norm_state;

osp_error *onnx_nn__batch_norm_prepare(const onnx_node *node, void **state) {
    batch_norm_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_attr_float(node, "epsilon", 1e-5f, &st->epsilon);
    if (err)
        goto fail;
    st->spatial = true;
    if (node->opset < 9) {
        int64_t spatial;
        if ((err = onnx_attr_int(node, "spatial", 1, &spatial)))
            goto fail;
        st->spatial = spatial != 0;
    }
    int64_t training = 0;
    if (node->opset >= 14 &&
        (err = onnx_attr_int(node, "training_mode", 0, &training)))
        goto fail;
    if (training != 0) {
        err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                              "attribute 'training_mode' = %lld: only "
                              "inference (0) is supported",
                              (long long)training);
        goto fail;
    }
    for (size_t i = 1; i < node->n_outputs; i++)
        if (node_has_output(node, i)) {
            err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                  "output %zu is a training statistic; only "
                                  "inference (output Y alone) is supported",
                                  i);
            goto fail;
        }
    *state = st;
    return NULL;
fail:
    free(st);
    return err;
}

/* BatchNormalization's view of X: [batch, channels, spatial] where the
 * statistics have `channels` values. */
static osp_error *batch_norm_view(const onnx_node *node,
                                  const batch_norm_state *st, size_t n_in,
                                  const onnx_desc *in, int64_t *batch,
                                  int64_t *channels, int64_t *spatial) {
    osp_error *err = onnx_nn__want_nc(node, n_in, in, batch, channels, spatial);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape;
    osp_shape per_elem = {.rank = x->rank - 1};
    if (!st->spatial) {
        for (int d = 1; d < x->rank; d++)
            per_elem.dims[d - 1] = x->dims[d];
        *channels *= *spatial;
        *spatial = 1;
    }
    static const char *names[] = {"scale", "B", "mean", "var"};
    for (size_t i = 1; i <= 4; i++)
        if ((err = check_param(node, n_in, in, i, names[i - 1], *channels,
                               st->spatial ? NULL : &per_elem)))
            return err;
    return NULL;
}

osp_error *onnx_nn__batch_norm_infer(onnx_infer_ctx *ctx) {
    int64_t batch, channels, spatial;
    osp_error *err = batch_norm_view(ctx->node, ctx->state, ctx->n_inputs,
                                     ctx->inputs, &batch, &channels, &spatial);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    /* epsilon, then scale, shift and a temporary, [channels] each */
    ctx->workspace_bytes =
        64 + 3 * onnx_align64((size_t)channels * sizeof(float));
    return NULL;
}

osp_error *onnx_nn__batch_norm_run(onnx_run_ctx *ctx) {
    const batch_norm_state *st = ctx->state;
    int64_t batch, channels, spatial;
    osp_error *err = batch_norm_view(ctx->node, st, ctx->n_inputs, ctx->in_desc,
                                     &batch, &channels, &spatial);
    if (err)
        return err;
    if (batch * channels * spatial == 0)
        return NULL;
    size_t vec = onnx_align64((size_t)channels * sizeof(float));
    char *ws = ctx->workspace;
    float *eps = (float *)ws;
    float *scale = (float *)(ws + 64);
    float *shift = (float *)(ws + 64 + vec);
    float *tmp = (float *)(ws + 64 + 2 * vec);
    const float *gamma = ctx->in[1], *beta = ctx->in[2];
    const float *mean = ctx->in[3], *var = ctx->in[4];
    osp_stream *s = ctx->stream;
    osp_unary_args sq = {
        .op = OSP_UNARY_SQRT,
        .dtype = OSP_TYPE_FP32,
        .x = tmp,
        .y = tmp,
        .n = (size_t)channels,
    };
    if ((err = onnx_fill_f32(s, eps, 1, st->epsilon)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, OSP_TYPE_FP32, var, false,
                                eps, true, tmp, channels)) ||
        (err = osp_op_unary(s, &sq)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, OSP_TYPE_FP32, gamma,
                                false, tmp, false, scale, channels)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, OSP_TYPE_FP32, mean,
                                false, scale, false, tmp, channels)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, OSP_TYPE_FP32, beta,
                                false, tmp, false, shift, channels)))
        return err;
    osp_channel_affine_args a = {
        .x = ctx->in[0],
        .out = ctx->out[0],
        .batch = batch,
        .channels = channels,
        .spatial = spatial,
        .scale = scale,
        .shift = shift,
        .act = OSP_UNARY_IDENTITY,
    };
    return osp_op_channel_affine(s, &a);
}

/* ---- InstanceNormalization -----------------------------------------------
 */

typedef struct eps_state {
    float epsilon;
    int64_t groups; /* GroupNormalization */
} eps_state;

osp_error *onnx_nn__instance_norm_prepare(const onnx_node *node, void **state) {
    eps_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_attr_float(node, "epsilon", 1e-5f, &st->epsilon);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

/* X [N, C, spatial...] of FP32 with per-channel scale and B. */
static osp_error *instance_norm_view(const onnx_node *node, size_t n_in,
                                     const onnx_desc *in, int64_t *batch,
                                     int64_t *channels, int64_t *spatial) {
    osp_error *err = onnx_nn__want_nc(node, n_in, in, batch, channels, spatial);
    if (err)
        return err;
    if ((err = check_param(node, n_in, in, 1, "scale", *channels, NULL)) ||
        (err = check_param(node, n_in, in, 2, "B", *channels, NULL)))
        return err;
    return NULL;
}

osp_error *onnx_nn__instance_norm_infer(onnx_infer_ctx *ctx) {
    int64_t batch, channels, spatial;
    osp_error *err = instance_norm_view(ctx->node, ctx->n_inputs, ctx->inputs,
                                        &batch, &channels, &spatial);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    return NULL;
}

/* layer_norm of x [rows, cols] into out, then out = out * scale + shift
 * per channel of [batch, channels, spatial] (the same elements). */
static osp_error *norm_then_affine(osp_stream *s, const float *x, float *out,
                                   int64_t rows, int64_t cols, float epsilon,
                                   int64_t batch, int64_t channels,
                                   int64_t spatial, const float *scale,
                                   const float *shift) {
    if (rows * cols == 0)
        return NULL;
    osp_layer_norm_args ln = {
        .x = x,
        .out = out,
        .rows = rows,
        .cols = cols,
        .epsilon = epsilon,
    };
    osp_error *err = osp_op_layer_norm(s, &ln);
    if (err)
        return err;
    osp_channel_affine_args a = {
        .x = out,
        .out = out,
        .batch = batch,
        .channels = channels,
        .spatial = spatial,
        .scale = scale,
        .shift = shift,
        .act = OSP_UNARY_IDENTITY,
    };
    return osp_op_channel_affine(s, &a);
}

osp_error *onnx_nn__instance_norm_run(onnx_run_ctx *ctx) {
    const eps_state *st = ctx->state;
    int64_t batch, channels, spatial;
    osp_error *err = instance_norm_view(ctx->node, ctx->n_inputs, ctx->in_desc,
                                        &batch, &channels, &spatial);
    if (err)
        return err;
    return norm_then_affine(ctx->stream, ctx->in[0], ctx->out[0],
                            batch * channels, spatial, st->epsilon, batch,
                            channels, spatial, ctx->in[1], ctx->in[2]);
}

/* ---- GroupNormalization --------------------------------------------------
 */

osp_error *onnx_nn__group_norm_prepare(const onnx_node *node, void **state) {
    eps_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_attr_float(node, "epsilon", 1e-5f, &st->epsilon);
    if (!err && !onnx_node_attr(node, "num_groups"))
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'num_groups' is required");
    if (!err)
        err = onnx_attr_int(node, "num_groups", 0, &st->groups);
    if (!err && st->groups < 1)
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'num_groups' = %lld is below 1",
                              (long long)st->groups);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

/* X [N, C, spatial...] of FP32, C a multiple of the groups; scale and
 * bias per group (opset 18) or per channel (21). */
static osp_error *group_norm_view(const onnx_node *node, const eps_state *st,
                                  size_t n_in, const onnx_desc *in,
                                  int64_t *batch, int64_t *channels,
                                  int64_t *spatial) {
    osp_error *err = onnx_nn__want_nc(node, n_in, in, batch, channels, spatial);
    if (err)
        return err;
    if (*channels % st->groups != 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "%lld channels do not split into %lld groups",
                               (long long)*channels, (long long)st->groups);
    int64_t per = node->opset >= 21 ? *channels : st->groups;
    if ((err = check_param(node, n_in, in, 1, "scale", per, NULL)) ||
        (err = check_param(node, n_in, in, 2, "bias", per, NULL)))
        return err;
    return NULL;
}

osp_error *onnx_nn__group_norm_infer(onnx_infer_ctx *ctx) {
    int64_t batch, channels, spatial;
    osp_error *err = group_norm_view(ctx->node, ctx->state, ctx->n_inputs,
                                     ctx->inputs, &batch, &channels, &spatial);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    return NULL;
}

osp_error *onnx_nn__group_norm_run(onnx_run_ctx *ctx) {
    const eps_state *st = ctx->state;
    int64_t batch, channels, spatial;
    osp_error *err = group_norm_view(ctx->node, st, ctx->n_inputs, ctx->in_desc,
                                     &batch, &channels, &spatial);
    if (err)
        return err;
    int64_t g = st->groups, per_group = channels / g * spatial;
    if (ctx->node->opset >= 21)
        return norm_then_affine(ctx->stream, ctx->in[0], ctx->out[0], batch * g,
                                per_group, st->epsilon, batch, channels,
                                spatial, ctx->in[1], ctx->in[2]);
    return norm_then_affine(ctx->stream, ctx->in[0], ctx->out[0], batch * g,
                            per_group, st->epsilon, batch, g, per_group,
                            ctx->in[1], ctx->in[2]);
}

/* ---- LayerNormalization --------------------------------------------------
 */

typedef struct layer_norm_state {
    int64_t axis;
    float epsilon;
} layer_norm_state;

osp_error *onnx_nn__layer_norm_prepare(const onnx_node *node, void **state) {
    layer_norm_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    int64_t stash;
    osp_error *err = onnx_attr_int(node, "axis", -1, &st->axis);
    if (!err)
        err = onnx_attr_float(node, "epsilon", 1e-5f, &st->epsilon);
    /* stash_type names the type of the statistics: FP32 (1) is what the
     * device op computes in; any other is computed in FP32 as well. */
    if (!err)
        err = onnx_attr_int(node, "stash_type", 1, &stash);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

/* How a scale or bias reaches layer_norm: directly (it has the normalised
 * shape's size) or expanded into the workspace from its broadcast view. */
typedef struct ln_param {
    bool present, expand;
    int64_t strides[OSP_MAX_DIMS]; /* when expand: read as the norm shape */
} ln_param;

typedef struct ln_plan {
    int axis;
    int64_t rows, cols;
    osp_shape norm;  /* dims[axis:] */
    osp_shape stats; /* Mean and InvStdDev */
    ln_param scale, bias;
    size_t ws_scale, ws_bias, ws_bytes;
} ln_plan;

static osp_error *ln_param_view(const onnx_node *node, const onnx_desc *d,
                                size_t input, const ln_plan *p, ln_param *out) {
    osp_error *err = onnx_want_fp32(node, d, input);
    if (err)
        return err;
    osp_shape s = d->shape;
    while (s.rank > p->norm.rank && s.dims[0] == 1) {
        memmove(s.dims, s.dims + 1, (size_t)(s.rank - 1) * sizeof s.dims[0]);
        s.rank--;
    }
    bool ok = s.rank <= p->norm.rank;
    for (int i = 0; ok && i < s.rank; i++) {
        int64_t want = p->norm.dims[p->norm.rank - s.rank + i];
        ok = s.dims[i] == want || s.dims[i] == 1;
    }
    if (!ok) {
        char a[128], b[128];
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu has shape %s, which does not "
                               "broadcast to the normalised shape %s",
                               input, osp_shape_format(&d->shape, a, sizeof a),
                               osp_shape_format(&p->norm, b, sizeof b));
    }
    out->present = true;
    out->expand = onnx_shape_count(&s) != p->cols;
    if (out->expand)
        onnx_broadcast_strides(&s, &p->norm, out->strides);
    return NULL;
}

static osp_error *ln_plan_make(const onnx_node *node,
                               const layer_norm_state *st, size_t n_in,
                               const onnx_desc *in, ln_plan *p) {
    memset(p, 0, sizeof *p);
    if (!onnx_present(n_in, in, 0) || !onnx_present(n_in, in, 1))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs X and Scale are required");
    osp_error *err = onnx_want_fp32(node, &in[0], 0);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape;
    if ((err = onnx_axis(node, st->axis, x->rank, &p->axis)))
        return err;
    p->rows = onnx_shape_span(x, 0, p->axis);
    p->cols = onnx_shape_span(x, p->axis, x->rank);
    p->norm.rank = x->rank - p->axis;
    for (int d = p->axis; d < x->rank; d++)
        p->norm.dims[d - p->axis] = x->dims[d];
    p->stats = *x;
    for (int d = p->axis; d < x->rank; d++)
        p->stats.dims[d] = 1;
    if ((err = ln_param_view(node, &in[1], 1, p, &p->scale)))
        return err;
    if (onnx_present(n_in, in, 2) &&
        (err = ln_param_view(node, &in[2], 2, p, &p->bias)))
        return err;
    size_t vec = onnx_align64((size_t)p->cols * sizeof(float));
    if (p->scale.expand) {
        p->ws_scale = p->ws_bytes;
        p->ws_bytes += vec;
    }
    if (p->bias.expand) {
        p->ws_bias = p->ws_bytes;
        p->ws_bytes += vec;
    }
    return NULL;
}

osp_error *onnx_nn__layer_norm_infer(onnx_infer_ctx *ctx) {
    ln_plan p;
    osp_error *err =
        ln_plan_make(ctx->node, ctx->state, ctx->n_inputs, ctx->inputs, &p);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    for (size_t i = 1; i < 3 && i < ctx->n_outputs; i++) {
        ctx->outputs[i].dtype = OSP_TYPE_FP32;
        ctx->outputs[i].shape = p.stats;
    }
    ctx->workspace_bytes = p.ws_bytes;
    return NULL;
}

/* Expands a broadcast parameter into dst [norm shape]. */
static osp_error *ln_expand(osp_stream *s, const ln_plan *p,
                            const ln_param *prm, const float *src, float *dst) {
    osp_copy_strided_args c = {
        .elem_size = sizeof(float),
        .rank = p->norm.rank,
        .src = src,
        .dst = dst,
    };
    memcpy(c.dims, p->norm.dims, sizeof c.dims);
    memcpy(c.src_strides, prm->strides, sizeof c.src_strides);
    onnx_contiguous_strides(&p->norm, c.dst_strides);
    if (c.rank == 0) { /* a scalar normalised shape: one element */
        c.rank = 1;
        c.dims[0] = 1;
        c.src_strides[0] = c.dst_strides[0] = 1;
    }
    return osp_op_copy_strided(s, &c);
}

osp_error *onnx_nn__layer_norm_run(onnx_run_ctx *ctx) {
    ln_plan p;
    osp_error *err =
        ln_plan_make(ctx->node, ctx->state, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    const layer_norm_state *st = ctx->state;
    if (p.rows * p.cols == 0)
        return NULL;
    char *ws = ctx->workspace;
    const float *scale = ctx->in[1];
    const float *bias = p.bias.present ? ctx->in[2] : NULL;
    if (p.scale.expand) {
        float *e = (float *)(ws + p.ws_scale);
        if ((err = ln_expand(ctx->stream, &p, &p.scale, scale, e)))
            return err;
        scale = e;
    }
    if (p.bias.expand) {
        float *e = (float *)(ws + p.ws_bias);
        if ((err = ln_expand(ctx->stream, &p, &p.bias, bias, e)))
            return err;
        bias = e;
    }
    osp_layer_norm_args ln = {
        .x = ctx->in[0],
        .scale = scale,
        .bias = bias,
        .out = ctx->out[0],
        .rows = p.rows,
        .cols = p.cols,
        .epsilon = st->epsilon,
        .mean = ctx->n_outputs > 1 ? ctx->out[1] : NULL,
        .inv_std = ctx->n_outputs > 2 ? ctx->out[2] : NULL,
    };
    return osp_op_layer_norm(ctx->stream, &ln);
}

/* ---- LRN -----------------------------------------------------------------
 */

typedef struct lrn_state {
    int64_t size;
    float alpha, beta, bias;
} lrn_state;

osp_error *onnx_nn__lrn_prepare(const onnx_node *node, void **state) {
    lrn_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    if (!onnx_node_attr(node, "size"))
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'size' is required");
    if (!err)
        err = onnx_attr_int(node, "size", 1, &st->size);
    if (!err && (st->size < 1 || st->size > (INT64_C(1) << 31)))
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'size' = %lld is out of range",
                              (long long)st->size);
    if (!err)
        err = onnx_attr_float(node, "alpha", 1e-4f, &st->alpha);
    if (!err)
        err = onnx_attr_float(node, "beta", 0.75f, &st->beta);
    if (!err)
        err = onnx_attr_float(node, "bias", 1.0f, &st->bias);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

static osp_error *lrn_check(const onnx_node *node, size_t n_in,
                            const onnx_desc *in) {
    return onnx_nn__want_nc(node, n_in, in, NULL, NULL, NULL);
}

osp_error *onnx_nn__lrn_infer(onnx_infer_ctx *ctx) {
    osp_error *err = lrn_check(ctx->node, ctx->n_inputs, ctx->inputs);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    int64_t count = onnx_shape_count(&ctx->inputs[0].shape);
    ctx->workspace_bytes = 64 + onnx_align64((size_t)count * sizeof(float));
    return NULL;
}

osp_error *onnx_nn__lrn_run(onnx_run_ctx *ctx) {
    const lrn_state *st = ctx->state;
    osp_error *err = lrn_check(ctx->node, ctx->n_inputs, ctx->in_desc);
    if (err)
        return err;
    const osp_shape *xs = &ctx->in_desc[0].shape;
    int64_t count = onnx_shape_count(xs);
    if (count == 0)
        return NULL;
    osp_stream *s = ctx->stream;
    const float *x = ctx->in[0];
    float *y = ctx->out[0];
    float *k = ctx->workspace; /* alpha, bias, beta */
    float *sq = (float *)((char *)ctx->workspace + 64);
    if ((err = onnx_fill_f32(s, k, 1, st->alpha)) ||
        (err = onnx_fill_f32(s, k + 1, 1, st->bias)) ||
        (err = onnx_fill_f32(s, k + 2, 1, st->beta)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, OSP_TYPE_FP32, x, false,
                                x, false, sq, count)))
        return err;
    /* The window over channels [c - (size-1)/2, c + ceil((size-1)/2)]
     * always spans `size` positions of the padded channel axis, so the
     * average counting padding is the sum / size. */
    osp_pool_args pool = {
        .kind = OSP_POOL_AVG,
        .spatial_rank = 2,
        .planes = xs->dims[0],
        .in_dims = {xs->dims[1], onnx_shape_span(xs, 2, xs->rank)},
        .out_dims = {xs->dims[1], onnx_shape_span(xs, 2, xs->rank)},
        .kernel = {st->size, 1},
        .stride = {1, 1},
        .pad_begin = {(st->size - 1) / 2, 0},
        .dilation = {1, 1},
        .count_include_pad = true,
        .x = sq,
        .y = y,
    };
    osp_channel_affine_args affine = {
        .x = y,
        .out = y,
        .batch = 1,
        .channels = 1,
        .spatial = count,
        .scale = k,
        .shift = k + 1,
        .act = OSP_UNARY_IDENTITY,
    };
    if ((err = osp_op_pool(s, &pool)) ||
        (err = osp_op_channel_affine(s, &affine)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_POW, OSP_TYPE_FP32, y, false,
                                k + 2, true, sq, count)))
        return err;
    return onnx_binary_flat(s, OSP_BINARY_ND_DIV, OSP_TYPE_FP32, x, false, sq,
                            false, y, count);
}

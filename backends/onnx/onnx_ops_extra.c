/*
 * The extra family's table (losses, quantization, index ops, windows and
 * the odd elementwise op) and the helpers its files share
 * (onnx_ops_extra.h), with the small ops:
 *   Shrink                     two comparisons and two selects
 *   MeanVarianceNormalization  the reduced axes moved last, then one
 *                              layer_norm per row, moved back
 *   HannWindow, HammingWindow, BlackmanWindow
 *                              cosines of an iota, in FP32, cast to the
 *                              output_datatype
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_extra.h"

/* ---- shared helpers ------------------------------------------------------
 */

void *onnx_extra__take(onnx_extra__ws *ws, size_t bytes) {
    size_t size = (bytes + 63) & ~(size_t)63;
    if (size == 0)
        size = 64;
    void *p = ws->base ? ws->base + ws->used : NULL;
    ws->used += size;
    return p;
}

osp_error *onnx_extra__fill(osp_stream *stream, void *dst, osp_datatype dt,
                            double v, int64_t n) {
    if (n <= 0)
        return NULL;
    osp_fill_args f = {
        .elem_size = osp_datatype_byte_size(dt), .dst = dst, .n = (size_t)n};
    switch (dt) {
    case OSP_TYPE_FP32: {
        float x = (float)v;
        memcpy(f.value, &x, 4);
        break;
    }
    case OSP_TYPE_FP64:
        memcpy(f.value, &v, 8);
        break;
    case OSP_TYPE_BOOL:
        f.value[0] = v != 0.0;
        break;
    case OSP_TYPE_UINT64: {
        uint64_t x = v <= 0.0 ? 0 : (uint64_t)v;
        memcpy(f.value, &x, 8);
        break;
    }
    default: { /* integers: little-endian two's complement, low bytes */
        int64_t x = (int64_t)v;
        memcpy(f.value, &x, 8);
        break;
    }
    }
    return osp_op_fill(stream, &f);
}

osp_error *onnx_extra__iota(osp_stream *stream, osp_datatype dtype, void *ones,
                            void *out, int64_t n) {
    if (n <= 0)
        return NULL;
    osp_error *err = onnx_extra__fill(stream, ones, dtype, 1.0, n);
    if (err)
        return err;
    osp_cumsum_args cs = {.dtype = dtype,
                          .x = ones,
                          .y = out,
                          .outer = 1,
                          .n = n,
                          .inner = 1,
                          .exclusive = true};
    return osp_op_cumsum(stream, &cs);
}

osp_error *onnx_extra__cast(osp_stream *stream, const void *src,
                            osp_datatype src_dtype, void *dst,
                            osp_datatype dst_dtype, int64_t n) {
    if (n <= 0)
        return NULL;
    return osp_op_cast(stream, src, src_dtype, dst, dst_dtype, (size_t)n);
}

void onnx_extra__offsets_layout(onnx_extra__ws *ws, int rank,
                                const int64_t *dims,
                                onnx_extra__offsets_ws *out) {
    int64_t count = 1, longest = 1;
    for (int d = 0; d < rank; d++) {
        count *= dims[d];
        if (dims[d] > longest)
            longest = dims[d];
    }
    out->tmp = onnx_extra__take(ws, (size_t)count * 8);
    out->ones = onnx_extra__take(ws, (size_t)longest * 8);
    out->iota = onnx_extra__take(ws, (size_t)longest * 8);
    out->vec = onnx_extra__take(ws, (size_t)longest * 8);
    out->scalar = onnx_extra__take(ws, 8);
}

/* The first moving dim writes iota * stride straight into its buffer;
 * each later one adds its iota * stride broadcast along its dim, the
 * buffers alternating (binary_nd's output may not alias an input) so that
 * the last lands in out. */
osp_error *onnx_extra__offsets(osp_stream *stream,
                               const onnx_extra__offsets_ws *ws,
                               osp_datatype dtype, int rank,
                               const int64_t *dims, const int64_t *strides,
                               void *out) {
    int64_t count = 1, longest = 1;
    int moving = 0;
    for (int d = 0; d < rank; d++) {
        count *= dims[d];
        if (dims[d] > longest)
            longest = dims[d];
        if (dims[d] > 1 && strides[d] != 0)
            moving++;
    }
    if (count == 0)
        return NULL;
    if (moving == 0)
        return onnx_extra__fill(stream, out, dtype, 0.0, count);
    osp_error *err =
        onnx_extra__iota(stream, dtype, ws->ones, ws->iota, longest);
    if (err)
        return err;
    void *buf[2] = {moving % 2 == 1 ? out : ws->tmp,
                    moving % 2 == 1 ? ws->tmp : out};
    int cur = -1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] <= 1 || strides[d] == 0)
            continue;
        if ((err = onnx_extra__fill(stream, ws->scalar, dtype,
                                    (double)strides[d], 1)))
            return err;
        osp_binary_nd_args b = {.dtype = dtype, .rank = rank};
        memcpy(b.dims, dims, (size_t)rank * sizeof *dims);
        if (cur < 0) {
            b.op = OSP_BINARY_ND_MUL;
            b.a = ws->iota;
            b.a_strides[d] = 1;
            b.b = ws->scalar;
            b.out = buf[0];
            cur = 0;
        } else {
            if ((err = onnx_binary_flat(stream, OSP_BINARY_ND_MUL, dtype,
                                          ws->iota, false, ws->scalar, true,
                                          ws->vec, dims[d])))
                return err;
            b.op = OSP_BINARY_ND_ADD;
            b.a = buf[cur];
            int64_t s = 1;
            for (int k = rank - 1; k >= 0; k--) {
                b.a_strides[k] = s;
                s *= dims[k];
            }
            b.b = ws->vec;
            b.b_strides[d] = 1;
            b.out = buf[1 - cur];
            cur = 1 - cur;
        }
        if ((err = osp_op_binary_nd(stream, &b)))
            return err;
    }
    return NULL;
}

/* ---- Shrink --------------------------------------------------------------
 */

typedef struct shrink_layout {
    void *scalars; /* -lambd, lambd, bias, 0 */
    void *minus, *plus, *tmp;
    bool *hi, *lo;
} shrink_layout;

static void shrink_carve(onnx_extra__ws *ws, int64_t n, size_t es,
                         shrink_layout *l) {
    l->scalars = onnx_extra__take(ws, 4 * 8);
    l->minus = onnx_extra__take(ws, (size_t)n * es);
    l->plus = onnx_extra__take(ws, (size_t)n * es);
    l->tmp = onnx_extra__take(ws, (size_t)n * es);
    l->hi = onnx_extra__take(ws, (size_t)n);
    l->lo = onnx_extra__take(ws, (size_t)n);
}

static osp_error *shrink_params(const onnx_node *node, float *lambd,
                                float *bias) {
    osp_error *err = onnx_attr_float(node, "lambd", 0.5f, lambd);
    if (!err)
        err = onnx_attr_float(node, "bias", 0.0f, bias);
    return err;
}

static osp_error *shrink_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype != OSP_TYPE_FP32 && x->dtype != OSP_TYPE_FP64)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "dtype %s is not supported (FP32, FP64)",
                                 osp_datatype_wire_name(x->dtype));
    float lambd, bias;
    if ((err = shrink_params(ctx->node, &lambd, &bias)))
        return err;
    ctx->outputs[0].dtype = x->dtype;
    ctx->outputs[0].shape = x->shape;
    onnx_extra__ws ws = {0};
    shrink_layout l;
    shrink_carve(&ws, onnx_shape_count(&x->shape),
                 osp_datatype_byte_size(x->dtype), &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

/* y = x < -lambd ? x + bias : x > lambd ? x - bias : 0 */
static osp_error *shrink_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0];
    int64_t n = onnx_shape_count(&x->shape);
    if (n == 0)
        return NULL;
    float lambd, bias;
    osp_error *err = shrink_params(ctx->node, &lambd, &bias);
    if (err)
        return err;
    osp_datatype dt = x->dtype;
    size_t es = osp_datatype_byte_size(dt);
    onnx_extra__ws ws = {.base = ctx->workspace};
    shrink_layout l;
    shrink_carve(&ws, n, es, &l);
    uint8_t *s = l.scalars;
    void *neg_lambd = s, *pos_lambd = s + 8, *bias_v = s + 16, *zero = s + 24;
    const void *in = ctx->in[0];
    osp_stream *st = ctx->stream;
    if ((err = onnx_extra__fill(st, neg_lambd, dt, -(double)lambd, 1)) ||
        (err = onnx_extra__fill(st, pos_lambd, dt, (double)lambd, 1)) ||
        (err = onnx_extra__fill(st, bias_v, dt, (double)bias, 1)) ||
        (err = onnx_extra__fill(st, zero, dt, 0.0, 1)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_SUB, dt, in, false, bias_v,
                                  true, l.minus, n)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_ADD, dt, in, false, bias_v,
                                  true, l.plus, n)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_GREATER, dt, in, false,
                                  pos_lambd, true, l.hi, n)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_LESS, dt, in, false,
                                  neg_lambd, true, l.lo, n)))
        return err;
    osp_where_args w = {.elem_size = es,
                        .rank = 1,
                        .dims = {n},
                        .cond = l.hi,
                        .cond_strides = {1},
                        .x = l.minus,
                        .x_strides = {1},
                        .y = zero,
                        .y_strides = {0},
                        .out = l.tmp};
    if ((err = osp_op_where(st, &w)))
        return err;
    w.cond = l.lo;
    w.x = l.plus;
    w.y = l.tmp;
    w.y_strides[0] = 1;
    w.out = ctx->out[0];
    return osp_op_where(st, &w);
}

/* ---- MeanVarianceNormalization -------------------------------------------
 */

/* The axes as a permutation: the kept axes in order, then the reduced
 * ones; rows and cols the spans of each part. */
typedef struct mvn_geometry {
    int rank;
    int perm[OSP_MAX_DIMS];
    bool identity;
    int64_t rows, cols;
} mvn_geometry;

static osp_error *mvn_geometry_of(const onnx_node *node, const osp_shape *s,
                                  mvn_geometry *g) {
    static const int64_t default_axes[] = {0, 2, 3};
    const int64_t *axes;
    size_t n_axes;
    osp_error *err = onnx_attr_ints(node, "axes", &axes, &n_axes);
    if (err)
        return err;
    if (!axes) {
        axes = default_axes;
        n_axes = 3;
    }
    bool reduced[OSP_MAX_DIMS] = {false};
    for (size_t i = 0; i < n_axes; i++) {
        int a;
        if ((err = onnx_axis(node, axes[i], s->rank, &a)))
            return err;
        if (reduced[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "axis %d is given twice", a);
        reduced[a] = true;
    }
    g->rank = s->rank;
    g->rows = g->cols = 1;
    int k = 0;
    for (int d = 0; d < s->rank; d++)
        if (!reduced[d]) {
            g->perm[k++] = d;
            g->rows *= s->dims[d];
        }
    for (int d = 0; d < s->rank; d++)
        if (reduced[d]) {
            g->perm[k++] = d;
            g->cols *= s->dims[d];
        }
    g->identity = true;
    for (int d = 0; d < s->rank; d++)
        g->identity &= g->perm[d] == d;
    return NULL;
}

static osp_error *mvn_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype != OSP_TYPE_FP32)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                 "dtype %s is not supported (FP32)",
                                 osp_datatype_wire_name(x->dtype));
    mvn_geometry g;
    if ((err = mvn_geometry_of(ctx->node, &x->shape, &g)))
        return err;
    ctx->outputs[0].dtype = x->dtype;
    ctx->outputs[0].shape = x->shape;
    ctx->workspace_bytes =
        g.identity
            ? 0
            : ((size_t)onnx_shape_count(&x->shape) * 4 + 63) & ~(size_t)63;
    return NULL;
}

/* ONNX defines the op as (x - mean) / (sqrt(var) + 1e-9); layer_norm's
 * (x - mean) / sqrt(var + 1e-18) is the same where the variance matters
 * and gives the same 0 where it is 0. */
static osp_error *mvn_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0];
    mvn_geometry g;
    osp_error *err = mvn_geometry_of(ctx->node, &x->shape, &g);
    if (err)
        return err;
    if (g.rows == 0 || g.cols == 0)
        return NULL;
    osp_layer_norm_args ln = {.x = ctx->in[0],
                              .out = ctx->out[0],
                              .rows = g.rows,
                              .cols = g.cols,
                              .epsilon = 1e-18f};
    if (g.identity)
        return osp_op_layer_norm(ctx->stream, &ln);
    int64_t strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(&x->shape, strides);
    osp_copy_strided_args c = {.elem_size = 4,
                               .rank = g.rank,
                               .src = ctx->in[0],
                               .dst = ctx->workspace};
    int64_t s = 1;
    for (int i = g.rank - 1; i >= 0; i--) {
        c.dims[i] = x->shape.dims[g.perm[i]];
        c.src_strides[i] = strides[g.perm[i]];
        c.dst_strides[i] = s;
        s *= c.dims[i];
    }
    if ((err = osp_op_copy_strided(ctx->stream, &c)))
        return err;
    ln.x = ctx->workspace;
    ln.out = ctx->workspace;
    if ((err = osp_op_layer_norm(ctx->stream, &ln)))
        return err;
    /* back: the same box, read contiguous, written through the strides */
    for (int i = 0; i < g.rank; i++) {
        int64_t t = c.src_strides[i];
        c.src_strides[i] = c.dst_strides[i];
        c.dst_strides[i] = t;
    }
    c.src = ctx->workspace;
    c.dst = ctx->out[0];
    return osp_op_copy_strided(ctx->stream, &c);
}

/* ---- HannWindow, HammingWindow, BlackmanWindow ---------------------------
 */

/* w[n] = a0 + a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size
 * (periodic) or the size - 1 (symmetric). */
typedef struct window_coeffs {
    double a0, a1, a2;
} window_coeffs;

static window_coeffs window_of(const onnx_node *node) {
    if (strcmp(node->op_type, "HannWindow") == 0)
        return (window_coeffs){0.5, -0.5, 0.0};
    if (strcmp(node->op_type, "HammingWindow") == 0)
        return (window_coeffs){25.0 / 46.0, -(21.0 / 46.0), 0.0};
    return (window_coeffs){0.42, -0.5, 0.08}; /* BlackmanWindow */
}

static osp_error *window_params(const onnx_node *node, size_t n_inputs,
                                const onnx_desc *inputs, int64_t *size,
                                bool *periodic, osp_datatype *dtype) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t per, out_type;
    double v;
    if (err || (err = onnx_attr_int(node, "periodic", 1, &per)) ||
        (err = onnx_attr_int(node, "output_datatype", 1, &out_type)))
        return err;
    if (inputs[0].dtype != OSP_TYPE_INT32 && inputs[0].dtype != OSP_TYPE_INT64)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "input 0 is %s, expected INT32 or INT64",
                                 osp_datatype_wire_name(inputs[0].dtype));
    if ((err = onnx_read_scalar(node, 0, &inputs[0], &v)))
        return err;
    if (v < 0 || v > (double)((int64_t)1 << 40))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "size %.0f is out of range", v);
    *size = (int64_t)v;
    *periodic = per != 0;
    *dtype = onnx_proto_dtype(out_type);
    if (*dtype == OSP_TYPE_INVALID || *dtype == OSP_TYPE_BYTES ||
        *dtype == OSP_TYPE_BOOL)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "attribute 'output_datatype' = %lld is not "
                                 "supported",
                                 (long long)out_type);
    return NULL;
}

typedef struct window_layout {
    float *scalars, *ones, *n, *a, *b, *c, *res;
} window_layout;

static void window_carve(onnx_extra__ws *ws, int64_t size, bool cast,
                         window_layout *l) {
    size_t bytes = (size_t)size * 4;
    l->scalars = onnx_extra__take(ws, 8 * 4);
    l->ones = onnx_extra__take(ws, bytes);
    l->n = onnx_extra__take(ws, bytes);
    l->a = onnx_extra__take(ws, bytes);
    l->b = onnx_extra__take(ws, bytes);
    l->c = onnx_extra__take(ws, bytes);
    l->res = cast ? onnx_extra__take(ws, bytes) : NULL;
}

static osp_error *window_infer(onnx_infer_ctx *ctx) {
    int64_t size;
    bool periodic;
    osp_datatype dt;
    osp_error *err = window_params(ctx->node, ctx->n_inputs, ctx->inputs, &size,
                                   &periodic, &dt);
    if (err)
        return err;
    ctx->outputs[0].dtype = dt;
    ctx->outputs[0].shape = (osp_shape){.rank = 1, .dims = {size}};
    onnx_extra__ws ws = {0};
    window_layout l;
    window_carve(&ws, size, dt != OSP_TYPE_FP32, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

static osp_error *window_run(onnx_run_ctx *ctx) {
    int64_t size;
    bool periodic;
    osp_datatype dt;
    osp_error *err = window_params(ctx->node, ctx->n_inputs, ctx->in_desc,
                                   &size, &periodic, &dt);
    if (err || size == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    window_layout l;
    window_carve(&ws, size, dt != OSP_TYPE_FP32, &l);
    float *res = dt == OSP_TYPE_FP32 ? ctx->out[0] : l.res;
    window_coeffs k = window_of(ctx->node);
    /* a one-point symmetric window would divide 0 by 0: it is computed
     * as the periodic one of size 1 instead. n is exact in FP32 up to
     * 2^24 points. */
    int64_t period = periodic || size == 1 ? size : size - 1;
    const double pi = 3.14159265358979323846;
    float *s = l.scalars;
    osp_stream *st = ctx->stream;
    const osp_datatype f = OSP_TYPE_FP32;
    if ((err = onnx_extra__fill(st, s + 0, f, 2 * pi / (double)period, 1)) ||
        (err = onnx_extra__fill(st, s + 1, f, k.a1, 1)) ||
        (err = onnx_extra__fill(st, s + 2, f, k.a0, 1)) ||
        (err = onnx_extra__fill(st, s + 3, f, 4 * pi / (double)period, 1)) ||
        (err = onnx_extra__fill(st, s + 4, f, k.a2, 1)) ||
        (err = onnx_extra__iota(st, f, l.ones, l.n, size)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_MUL, f, l.n, false, s + 0,
                                  true, l.a, size)))
        return err;
    osp_unary_args cosine = {
        .op = OSP_UNARY_COS, .dtype = f, .x = l.a, .y = l.a, .n = (size_t)size};
    if ((err = osp_op_unary(st, &cosine)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_MUL, f, l.a, false, s + 1,
                                  true, l.b, size)) ||
        (err = onnx_binary_flat(st, OSP_BINARY_ND_ADD, f, l.b, false, s + 2,
                                  true, k.a2 != 0.0 ? l.c : res, size)))
        return err;
    if (k.a2 != 0.0) {
        if ((err = onnx_binary_flat(st, OSP_BINARY_ND_MUL, f, l.n, false,
                                      s + 3, true, l.a, size)) ||
            (err = osp_op_unary(st, &cosine)) ||
            (err = onnx_binary_flat(st, OSP_BINARY_ND_MUL, f, l.a, false,
                                      s + 4, true, l.b, size)) ||
            (err = onnx_binary_flat(st, OSP_BINARY_ND_ADD, f, l.c, false, l.b,
                                      false, res, size)))
            return err;
    }
    if (dt == OSP_TYPE_FP32)
        return NULL;
    return onnx_extra__cast(st, res, f, ctx->out[0], dt, size);
}

/* ---- the family ----------------------------------------------------------
 */

#define USES(...)                                                              \
    { __VA_ARGS__, OSP_OP_KIND_COUNT_ }

#define WINDOW_OP(name)                                                        \
    {                                                                          \
        .op_type = name, .domain = "", .since = 17, .infer = window_infer,     \
        .run = window_run,                                                     \
        .uses = USES(OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,             \
                     OSP_OP_UNARY, OSP_OP_CAST),                               \
    }

static const onnx_op extra_ops[] = {
    {.op_type = "Shrink",
     .domain = "",
     .since = 9,
     .infer = shrink_infer,
     .run = shrink_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_BINARY_ND, OSP_OP_WHERE)},
    {.op_type = "MeanVarianceNormalization",
     .domain = "",
     .since = 9,
     .infer = mvn_infer,
     .run = mvn_run,
     .uses = USES(OSP_OP_COPY_STRIDED, OSP_OP_LAYER_NORM)},
    WINDOW_OP("HannWindow"),
    WINDOW_OP("HammingWindow"),
    WINDOW_OP("BlackmanWindow"),
    /* the losses: softmax (SCE only), gathers of the picked scores and
     * weights at offsets built from an iota, then the reduction */
    {.op_type = "NegativeLogLikelihoodLoss",
     .domain = "",
     .since = 12,
     .prepare = onnx_extra__loss_prepare,
     .free = free,
     .infer = onnx_extra__loss_infer,
     .run = onnx_extra__loss_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND, OSP_OP_WHERE,
                  OSP_OP_GATHER, OSP_OP_REDUCE)},
    {.op_type = "SoftmaxCrossEntropyLoss",
     .domain = "",
     .since = 12,
     .prepare = onnx_extra__loss_prepare,
     .free = free,
     .infer = onnx_extra__loss_infer,
     .run = onnx_extra__loss_run,
     .uses = USES(OSP_OP_SOFTMAX, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_WHERE, OSP_OP_GATHER, OSP_OP_REDUCE)},
    {.op_type = "QuantizeLinear",
     .domain = "",
     .since = 10,
     .prepare = onnx_extra__quantize_prepare,
     .free = free,
     .infer = onnx_extra__quantize_infer,
     .run = onnx_extra__quantize_run,
     .uses = USES(OSP_OP_BINARY_ND, OSP_OP_UNARY, OSP_OP_CAST)},
    {.op_type = "DequantizeLinear",
     .domain = "",
     .since = 10,
     .prepare = onnx_extra__quantize_prepare,
     .free = free,
     .infer = onnx_extra__dequantize_infer,
     .run = onnx_extra__dequantize_run,
     .uses = USES(OSP_OP_BINARY_ND, OSP_OP_CAST)},
    {.op_type = "DynamicQuantizeLinear",
     .domain = "",
     .since = 11,
     .infer = onnx_extra__dynamic_quantize_infer,
     .run = onnx_extra__dynamic_quantize_run,
     .uses = USES(OSP_OP_REDUCE, OSP_OP_FILL, OSP_OP_BINARY_ND, OSP_OP_UNARY,
                  OSP_OP_CAST)},
    {.op_type = "OneHot",
     .domain = "",
     .since = 9,
     .infer = onnx_extra__one_hot_infer,
     .run = onnx_extra__one_hot_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_WHERE)},
    {.op_type = "ReverseSequence",
     .domain = "",
     .since = 10,
     .infer = onnx_extra__reverse_sequence_infer,
     .run = onnx_extra__reverse_sequence_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_WHERE, OSP_OP_GATHER)},
    {.op_type = "GatherND",
     .domain = "",
     .since = 11,
     .infer = onnx_extra__gather_nd_infer,
     .run = onnx_extra__gather_nd_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_REDUCE, OSP_OP_GATHER)},
    {.op_type = "ScatterND",
     .domain = "",
     .since = 11,
     .prepare = onnx_extra__scatter_prepare,
     .free = free,
     .infer = onnx_extra__scatter_nd_infer,
     .run = onnx_extra__scatter_nd_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_BINARY_ND, OSP_OP_REDUCE,
                  OSP_OP_SCATTER)},
    {.op_type = "ScatterElements",
     .domain = "",
     .since = 11,
     .prepare = onnx_extra__scatter_prepare,
     .free = free,
     .infer = onnx_extra__scatter_elements_infer,
     .run = onnx_extra__scatter_elements_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_SCATTER)},
    {.op_type = "Scatter", /* ScatterElements without reduction, until 11 */
     .domain = "",
     .since = 9,
     .until = 10,
     .prepare = onnx_extra__scatter_prepare,
     .free = free,
     .infer = onnx_extra__scatter_elements_infer,
     .run = onnx_extra__scatter_elements_run,
     .uses = USES(OSP_OP_CAST, OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND,
                  OSP_OP_SCATTER)},
    /* output shapes that depend on input values: infer needs them on the
     * host (see each op) */
    {.op_type = "NonZero",
     .domain = "",
     .since = 9,
     .infer = onnx_extra__non_zero_infer,
     .run = onnx_extra__non_zero_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_BINARY_ND, OSP_OP_WHERE, OSP_OP_CUMSUM,
                  OSP_OP_SCATTER)},
    {.op_type = "Compress",
     .domain = "",
     .since = 9,
     .infer = onnx_extra__compress_infer,
     .run = onnx_extra__compress_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_BINARY_ND, OSP_OP_WHERE, OSP_OP_CUMSUM,
                  OSP_OP_SCATTER, OSP_OP_GATHER)},
    {.op_type = "Unique",
     .domain = "",
     .since = 11,
     .infer = onnx_extra__unique_infer,
     .run = onnx_extra__unique_run,
     .uses = {OSP_OP_NONE}}, /* host results, copied */
    {.op_type = "NonMaxSuppression",
     .domain = "",
     .since = 10,
     .infer = onnx_extra__nms_infer,
     .run = onnx_extra__nms_run,
     .uses = {OSP_OP_NONE}}, /* host results, copied */
};

const onnx_op_family onnx_ops_extra_family = {
    .ops = extra_ops,
    .n_ops = sizeof extra_ops / sizeof extra_ops[0],
};

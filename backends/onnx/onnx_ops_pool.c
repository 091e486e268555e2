/*
 * Pooling: MaxPool (8: storage_order and Indices; 10: ceil_mode and
 * dilations; 12: INT8/UINT8), AveragePool (7: count_include_pad; 10:
 * ceil_mode; 19: dilations), LpPool (p an integer from 2; 18: ceil_mode,
 * dilations) through osp_op_pool, and GlobalMaxPool, GlobalAveragePool,
 * GlobalLpPool through osp_op_reduce over x viewed as [N*C, spatial, 1]
 * (cheaper than a window as wide as the input).
 *
 * Types other than FP32 (MaxPool's FP16, INT8, UINT8; the others' FP16)
 * go through FP32 copies in the workspace: every value of those types is
 * exact in FP32, so MaxPool stays exact.
 *
 * MaxPool's Indices with storage_order 1 (column-major positions inside
 * each [N, C] plane, as onnxruntime) are the device's row-major ones
 * remapped with INT64 binary_nd arithmetic.
 *
 * AveragePool with count_include_pad and ceil_mode divides a last window
 * that hangs past the padded input by the positions it covers inside it
 * (onnxruntime's rule); the device op only knows the pads out_dims imply,
 * so that one case pads the input explicitly first and pools it without
 * padding.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_nn.h"

typedef struct pool_state {
    onnx_nn_window w;
    osp_pool_kind kind;
    bool count_include_pad;
    bool col_major; /* MaxPool storage_order 1 */
    float p;
} pool_state;

osp_error *onnx_nn__pool_prepare(const onnx_node *node, void **state) {
    pool_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_nn__window_read(node, true, &st->w);
    if (err)
        goto fail;
    if (st->w.n_kernel == 0) {
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'kernel_shape' is required");
        goto fail;
    }
    if (strcmp(node->op_type, "MaxPool") == 0) {
        st->kind = OSP_POOL_MAX;
        int64_t order;
        if ((err = onnx_attr_int(node, "storage_order", 0, &order)))
            goto fail;
        if (order != 0 && order != 1) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'storage_order' = %lld is not 0 "
                                  "or 1",
                                  (long long)order);
            goto fail;
        }
        st->col_major = order == 1;
    } else if (strcmp(node->op_type, "AveragePool") == 0) {
        st->kind = OSP_POOL_AVG;
        int64_t cip;
        if ((err = onnx_attr_int(node, "count_include_pad", 0, &cip)))
            goto fail;
        st->count_include_pad = cip != 0;
    } else {
        st->kind = OSP_POOL_LP;
        if ((err = onnx_attr_float(node, "p", 2.0f, &st->p)))
            goto fail;
        if (!(st->p > 0.0f && st->p <= 1e30f)) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'p' = %g is not positive",
                                  (double)st->p);
            goto fail;
        }
    }
    *state = st;
    return NULL;
fail:
    free(st);
    return err;
}

/* What one binding of a pool does, from the state and the input's desc. */
typedef struct pool_plan {
    osp_pool_args pool; /* pointers unset */
    osp_datatype dtype; /* X's */
    bool cast;          /* through FP32 copies of X and Y */
    bool pre_pad;       /* X padded explicitly first (see the top) */
    bool remap;         /* Indices remapped to column-major */
    osp_pad_args pad;   /* pointers unset */
    int64_t x_count, y_count, padded_count;
    /* workspace offsets and size; ws_idx: 5 INT64 [y_count] buffers and
     * the constants of the remap */
    size_t ws_x, ws_y, ws_pad, ws_idx, ws_consts, ws_bytes;
    osp_shape y_shape;
} pool_plan;

static bool pool_dtype_ok(osp_pool_kind kind, osp_datatype t) {
    if (t == OSP_TYPE_FP32 || t == OSP_TYPE_FP16)
        return true;
    return kind == OSP_POOL_MAX && (t == OSP_TYPE_INT8 || t == OSP_TYPE_UINT8);
}

static osp_error *pool_plan_make(const onnx_node *node, const pool_state *st,
                                 size_t n_in, const onnx_desc *in, bool indices,
                                 pool_plan *p) {
    memset(p, 0, sizeof *p);
    if (!onnx_present(n_in, in, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X is required");
    const osp_shape *x = &in[0].shape;
    if (!pool_dtype_ok(st->kind, in[0].dtype))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "input 0: dtype %s is not supported",
                               osp_datatype_wire_name(in[0].dtype));
    if (x->rank < 3)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X has rank %d; [N, C, spatial...] of "
                               "rank 3 or more expected",
                               x->rank);
    int rank = x->rank - 2;
    if (rank > OSP_CONV_MAX_SPATIAL)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "input X has %d spatial dimensions; 1 to %d "
                               "are supported",
                               rank, OSP_CONV_MAX_SPATIAL);
    if (st->w.n_kernel != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'kernel_shape' has %zu values, %d "
                               "expected",
                               st->w.n_kernel, rank);
    onnx_nn_geom g;
    osp_error *err =
        onnx_nn__window_geom(node, &st->w, rank, x->dims + 2, st->w.kernel, &g);
    if (err)
        return err;
    osp_pool_args *a = &p->pool;
    a->kind = st->kind;
    a->spatial_rank = rank;
    a->planes = x->dims[0] * x->dims[1];
    a->count_include_pad = st->count_include_pad;
    a->p = st->p;
    p->y_shape.rank = x->rank;
    p->y_shape.dims[0] = x->dims[0];
    p->y_shape.dims[1] = x->dims[1];
    for (int d = 0; d < rank; d++) {
        a->in_dims[d] = g.in[d];
        a->out_dims[d] = g.out[d];
        a->kernel[d] = g.kernel[d];
        a->stride[d] = g.stride[d];
        a->pad_begin[d] = g.pad_begin[d];
        a->dilation[d] = g.dilation[d];
        p->y_shape.dims[2 + d] = g.out[d];
        int64_t span = (g.kernel[d] - 1) * g.dilation[d] + 1;
        int64_t implied =
            (g.out[d] - 1) * g.stride[d] + span - g.in[d] - g.pad_begin[d];
        if (st->kind == OSP_POOL_AVG && st->count_include_pad &&
            implied > g.pad_end[d])
            p->pre_pad = true;
    }
    if ((err = onnx_check_shape(node, &p->y_shape, in[0].dtype)))
        return err;
    p->dtype = in[0].dtype;
    p->cast = in[0].dtype != OSP_TYPE_FP32;
    p->x_count = onnx_shape_count(x);
    p->y_count = onnx_shape_count(&p->y_shape);
    size_t off = 0;
    if (p->cast) {
        p->ws_x = off;
        off += onnx_align64((size_t)p->x_count * sizeof(float));
        p->ws_y = off;
        off += onnx_align64((size_t)p->y_count * sizeof(float));
    }
    if (p->pre_pad) {
        osp_pad_args *pad = &p->pad;
        pad->mode = OSP_PAD_CONSTANT;
        pad->elem_size = sizeof(float);
        pad->rank = 1 + rank;
        pad->in_dims[0] = a->planes;
        p->padded_count = a->planes;
        for (int d = 0; d < rank; d++) {
            pad->in_dims[1 + d] = g.in[d];
            pad->pad_begin[1 + d] = g.pad_begin[d];
            pad->pad_end[1 + d] = g.pad_end[d];
            a->in_dims[d] = g.in[d] + g.pad_begin[d] + g.pad_end[d];
            a->pad_begin[d] = 0;
            p->padded_count *= a->in_dims[d];
        }
        a->count_include_pad = false;
        p->ws_pad = off;
        off += onnx_align64((size_t)p->padded_count * sizeof(float));
    }
    /* Column-major Indices differ from row-major ones only with two or
     * more spatial dimensions. */
    p->remap = indices && st->col_major && rank > 1;
    if (p->remap) {
        p->ws_idx = off;
        off += 5 * onnx_align64((size_t)p->y_count * sizeof(int64_t));
        p->ws_consts = off;
        off += 64 * 3;
    }
    p->ws_bytes = off;
    return NULL;
}

osp_error *onnx_nn__pool_infer(onnx_infer_ctx *ctx) {
    const pool_state *st = ctx->state;
    pool_plan p;
    bool indices = onnx_present(ctx->n_outputs, ctx->outputs, 1);
    osp_error *err =
        pool_plan_make(ctx->node, st, ctx->n_inputs, ctx->inputs, indices, &p);
    if (err)
        return err;
    ctx->outputs[0].dtype = p.dtype;
    ctx->outputs[0].shape = p.y_shape;
    if (onnx_present(ctx->n_outputs, ctx->outputs, 1)) {
        if (st->kind != OSP_POOL_MAX)
            return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                                   "only MaxPool has a second output");
        ctx->outputs[1].dtype = OSP_TYPE_INT64;
        ctx->outputs[1].shape = p.y_shape;
    }
    ctx->workspace_bytes = p.ws_bytes;
    return NULL;
}

/* Row-major flat indices f (in x's [N, C, spatial...] layout) into
 * column-major ones: plane * S + sum_d i_d * (D_0 ... D_{d-1}). buf holds
 * five INT64 [n] buffers (the first is f) `stride` bytes apart, consts
 * 3 * 64 bytes. */
static osp_error *remap_col_major(osp_stream *s, const pool_plan *p, char *buf,
                                  size_t stride, char *consts, int64_t *out) {
    const osp_pool_args *a = &p->pool;
    int64_t n = p->y_count, plane = 1;
    for (int d = 0; d < a->spatial_rank; d++)
        plane *= a->in_dims[d];
    int64_t *f = (int64_t *)buf, *rem = (int64_t *)(buf + stride);
    int64_t *acc[2] = {(int64_t *)(buf + 2 * stride),
                       (int64_t *)(buf + 3 * stride)};
    int64_t *t = (int64_t *)(buf + 4 * stride);
    int64_t *k = (int64_t *)consts; /* k[0] plane, k[8] D_d, k[16] cstride */
    osp_error *err;
    int cur = 0;
    if ((err = onnx_fill_i64(s, k, 1, plane)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MOD, OSP_TYPE_INT64, f, false,
                                k, true, rem, n)))
        return err;
    /* plane * S = f - rem; then one term per dimension, the last into out
     * (the accumulator alternates so that no op writes its input). */
    if ((err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, OSP_TYPE_INT64, f, false,
                                rem, false, acc[cur], n)))
        return err;
    int64_t rstride = plane, cstride = 1;
    for (int d = 0; d < a->spatial_rank; d++) {
        int64_t dim = a->in_dims[d];
        rstride /= dim;
        /* t = (rem / rstride) % dim * cstride, through f as scratch */
        if ((err = onnx_fill_i64(s, k + 8, 1, rstride)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, OSP_TYPE_INT64, rem,
                                    false, k + 8, true, t, n)) ||
            (err = onnx_fill_i64(s, k + 8, 1, dim)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_MOD, OSP_TYPE_INT64, t,
                                    false, k + 8, true, f, n)) ||
            (err = onnx_fill_i64(s, k + 16, 1, cstride)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, OSP_TYPE_INT64, f,
                                    false, k + 16, true, t, n)))
            return err;
        int64_t *dst = d + 1 == a->spatial_rank ? out : acc[cur ^ 1];
        if ((err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, OSP_TYPE_INT64,
                                    acc[cur], false, t, false, dst, n)))
            return err;
        cur ^= 1;
        cstride *= dim;
    }
    return NULL;
}

osp_error *onnx_nn__pool_run(onnx_run_ctx *ctx) {
    const pool_state *st = ctx->state;
    pool_plan p;
    bool indices =
        st->kind == OSP_POOL_MAX && ctx->n_outputs > 1 && ctx->out[1] != NULL;
    osp_error *err =
        pool_plan_make(ctx->node, st, ctx->n_inputs, ctx->in_desc, indices, &p);
    if (err)
        return err;
    if (p.y_count == 0)
        return NULL;
    char *ws = ctx->workspace;
    const float *x = ctx->in[0];
    float *y = ctx->out[0];
    if (p.cast) {
        float *xf = (float *)(ws + p.ws_x);
        if ((err = osp_op_cast(ctx->stream, ctx->in[0], p.dtype, xf,
                               OSP_TYPE_FP32, (size_t)p.x_count)))
            return err;
        x = xf;
        y = (float *)(ws + p.ws_y);
    }
    if (p.pre_pad) {
        float *padded = (float *)(ws + p.ws_pad);
        p.pad.x = x;
        p.pad.y = padded;
        if ((err = osp_op_pad(ctx->stream, &p.pad)))
            return err;
        x = padded;
    }
    p.pool.x = x;
    p.pool.y = y;
    if (indices)
        p.pool.indices = p.remap ? (int64_t *)(ws + p.ws_idx) : ctx->out[1];
    if ((err = osp_op_pool(ctx->stream, &p.pool)))
        return err;
    if (p.remap && (err = remap_col_major(
                        ctx->stream, &p, ws + p.ws_idx,
                        onnx_align64((size_t)p.y_count * sizeof(int64_t)),
                        ws + p.ws_consts, ctx->out[1])))
        return err;
    if (p.cast)
        err = osp_op_cast(ctx->stream, y, OSP_TYPE_FP32, ctx->out[0], p.dtype,
                          (size_t)p.y_count);
    return err;
}

/* ---- global pools --------------------------------------------------------
 */

typedef struct global_pool_state {
    osp_pool_kind kind;
    float p;
} global_pool_state;

osp_error *onnx_nn__global_pool_prepare(const onnx_node *node, void **state) {
    global_pool_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    if (strcmp(node->op_type, "GlobalMaxPool") == 0) {
        st->kind = OSP_POOL_MAX;
    } else if (strcmp(node->op_type, "GlobalAveragePool") == 0) {
        st->kind = OSP_POOL_AVG;
    } else {
        st->kind = OSP_POOL_LP;
        if ((err = onnx_attr_float(node, "p", 2.0f, &st->p)))
            goto fail;
        if (!(st->p > 0.0f && st->p <= 1e30f)) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'p' = %g is not positive",
                                  (double)st->p);
            goto fail;
        }
    }
    *state = st;
    return NULL;
fail:
    free(st);
    return err;
}

/* Checks X ([N, C, spatial...], FP32) and sets Y's shape. */
static osp_error *global_pool_shape(const onnx_node *node, size_t n_in,
                                    const onnx_desc *in, osp_shape *y) {
    osp_error *err = onnx_nn__want_nc(node, n_in, in, NULL, NULL, NULL);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape;
    *y = *x;
    for (int d = 2; d < x->rank; d++)
        y->dims[d] = 1;
    return NULL;
}

osp_error *onnx_nn__global_pool_infer(onnx_infer_ctx *ctx) {
    const global_pool_state *st = ctx->state;
    osp_shape y;
    osp_error *err =
        global_pool_shape(ctx->node, ctx->n_inputs, ctx->inputs, &y);
    if (err)
        return err;
    int rank = y.rank - 2;
    if (st->kind == OSP_POOL_LP && st->p != 1.0f && st->p != 2.0f &&
        (rank < 1 || rank > OSP_CONV_MAX_SPATIAL))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "p = %g over %d spatial dimensions: 1 to %d "
                               "are supported (any with p = 1 or 2)",
                               (double)st->p, rank, OSP_CONV_MAX_SPATIAL);
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    ctx->outputs[0].shape = y;
    return NULL;
}

osp_error *onnx_nn__global_pool_run(onnx_run_ctx *ctx) {
    const global_pool_state *st = ctx->state;
    osp_shape y;
    osp_error *err =
        global_pool_shape(ctx->node, ctx->n_inputs, ctx->in_desc, &y);
    if (err)
        return err;
    const osp_shape *x = &ctx->in_desc[0].shape;
    int64_t planes = x->dims[0] * x->dims[1];
    int64_t spatial = onnx_shape_span(x, 2, x->rank);
    if (planes == 0)
        return NULL;
    if (st->kind == OSP_POOL_LP && st->p != 1.0f && st->p != 2.0f) {
        osp_pool_args a = {
            .kind = OSP_POOL_LP,
            .spatial_rank = x->rank - 2,
            .planes = planes,
            .p = st->p,
            .x = ctx->in[0],
            .y = ctx->out[0],
        };
        for (int d = 0; d < a.spatial_rank; d++) {
            a.in_dims[d] = a.kernel[d] = x->dims[2 + d];
            a.out_dims[d] = a.stride[d] = a.dilation[d] = 1;
        }
        return osp_op_pool(ctx->stream, &a);
    }
    osp_reduce_args r = {
        .dtype = OSP_TYPE_FP32,
        .x = ctx->in[0],
        .outer = planes,
        .n = spatial,
        .inner = 1,
        .out = ctx->out[0],
    };
    switch (st->kind) {
    case OSP_POOL_MAX:
        r.op = OSP_REDUCE_MAX;
        break;
    case OSP_POOL_AVG:
        r.op = OSP_REDUCE_MEAN;
        break;
    default:
        r.op = st->p == 1.0f ? OSP_REDUCE_L1 : OSP_REDUCE_L2;
        break;
    }
    return osp_op_reduce(ctx->stream, &r);
}

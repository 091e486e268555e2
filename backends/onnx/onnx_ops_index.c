/*
 * Index ops: OneHot, ReverseSequence, GatherND, ScatterND,
 * ScatterElements (and the older Scatter), NonZero, Compress, Unique and
 * NonMaxSuppression.
 *
 * Most build a flat INT64 index on the device and end in one gather or
 * scatter over a flat view of the data; the index comes from binary ops
 * on the indices (MOD by the dim wraps negative indices; out-of-range ones
 * wrap too, unless the indices are known while planning, where they are
 * refused) plus linear offsets from an iota (onnx_extra__offsets).
 *
 * NonZero, Compress, Unique and NonMaxSuppression have output shapes that
 * depend on input values, so infer needs those values on the host (a
 * constant, or a small graph input the planner reads: see
 * learn_value_inputs in onnx_plan.c) and fails with
 * onnx_error_needs_values otherwise. NonZero and Compress then run on the
 * device like the others: the positions of the non-zero elements are an
 * exclusive cumsum of the mask, and a scatter of an iota to those
 * positions (others to a spare slot) lists them. Unique and
 * NonMaxSuppression need every input known, so the planner always
 * evaluates them while planning; run computes them on the host from the
 * known values, as infer did, and copies the results to the device.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_extra.h"

/* ---- shared ---------------------------------------------------------------
 */

static bool movable(osp_datatype dt) {
    size_t es = osp_datatype_byte_size(dt);
    return es > 0 && es <= 8 && dt != OSP_TYPE_BYTES;
}

static osp_error *check_movable(const onnx_node *node, const onnx_desc *d,
                                size_t input) {
    if (!movable(d->dtype))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "input %zu: dtype %s is not supported", input,
                                 osp_datatype_wire_name(d->dtype));
    return NULL;
}

static osp_error *check_index_dtype(const onnx_node *node, const onnx_desc *d,
                                    size_t input) {
    if (d->dtype != OSP_TYPE_INT64 && d->dtype != OSP_TYPE_INT32)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "input %zu is %s, expected INT64 or INT32",
                                 input, osp_datatype_wire_name(d->dtype));
    return NULL;
}

static int64_t host_index(const onnx_desc *d, int64_t i) {
    return d->dtype == OSP_TYPE_INT64 ? ((const int64_t *)d->host)[i]
                                      : ((const int32_t *)d->host)[i];
}

/* When the indices are known while planning, every index of column
 * `col` of the rows of `width` indices must be in [-len, len) (col -1:
 * every index against len); INVALID_ARG naming the node otherwise. */
static osp_error *check_known_indices(const onnx_node *node,
                                      const onnx_desc *idx, int64_t width,
                                      int64_t col, int64_t len) {
    if (!idx->host)
        return NULL;
    int64_t n = onnx_shape_count(&idx->shape);
    for (int64_t i = col < 0 ? 0 : col; i < n; i += col < 0 ? 1 : width) {
        int64_t v = host_index(idx, i);
        if (v < -len || v >= len)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "index %lld is out of range for a dim "
                                     "of %lld",
                                     (long long)v, (long long)len);
    }
    return NULL;
}

/* The indices as INT64 on the device: the input itself, or its cast into
 * `scratch`. */
static osp_error *indices_int64(osp_stream *stream, const onnx_desc *d,
                                const void *mem, int64_t *scratch,
                                const int64_t **out) {
    if (d->dtype == OSP_TYPE_INT64) {
        *out = mem;
        return NULL;
    }
    *out = scratch;
    return onnx_extra__cast(stream, mem, d->dtype, scratch, OSP_TYPE_INT64,
                            onnx_shape_count(&d->shape));
}

static osp_error *scatter_reduction_of(const onnx_node *node,
                                       osp_scatter_reduction *out) {
    const char *r;
    osp_error *err = onnx_attr_string(node, "reduction", "none", &r);
    if (err)
        return err;
    if (strcmp(r, "none") == 0)
        *out = OSP_SCATTER_NONE;
    else if (strcmp(r, "add") == 0)
        *out = OSP_SCATTER_ADD;
    else if (strcmp(r, "mul") == 0)
        *out = OSP_SCATTER_MUL;
    else if (strcmp(r, "max") == 0)
        *out = OSP_SCATTER_MAX;
    else if (strcmp(r, "min") == 0)
        *out = OSP_SCATTER_MIN;
    else
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "attribute 'reduction' = '%s' is not "
                                 "supported",
                                 r);
    return NULL;
}

/* ---- OneHot --------------------------------------------------------------
 */

/* out = values[indices == iota], the iota along the new axis: the output
 * viewed as [outer, depth, inner], the indices as [outer, inner]. From
 * opset 11 an index in [-depth, 0) counts from the end (depth added);
 * any other index outside [0, depth) gives a row of off values. */
typedef struct one_hot_geometry {
    int64_t depth, n, outer, inner;
    int axis;
} one_hot_geometry;

static osp_error *one_hot_geometry_of(const onnx_node *node, size_t n_inputs,
                                      const onnx_desc *inputs,
                                      one_hot_geometry *g) {
    osp_error *err = NULL;
    for (size_t i = 0; i < 3 && !err; i++)
        err = onnx_required_input(node, n_inputs, inputs, i);
    double depth;
    int64_t axis;
    if (err || (err = onnx_read_scalar(node, 1, &inputs[1], &depth)) ||
        (err = onnx_attr_int(node, "axis", -1, &axis)))
        return err;
    if (!(depth >= 1) || depth > (double)INT32_MAX)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "depth %g is out of range", depth);
    const onnx_desc *idx = &inputs[0], *values = &inputs[2];
    if (onnx_shape_count(&values->shape) != 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "values has %lld elements, expected 2 "
                                 "([off, on])",
                                 (long long)onnx_shape_count(&values->shape));
    if ((err = check_movable(node, values, 2)))
        return err;
    if (osp_datatype_byte_size(idx->dtype) == 0 || idx->dtype == OSP_TYPE_BYTES)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported",
                                 osp_datatype_wire_name(idx->dtype));
    int rank = idx->shape.rank;
    if (rank + 1 > OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "output rank %d is over the limit of %d",
                                 rank + 1, OSP_MAX_DIMS);
    if ((err = onnx_axis(node, axis, rank + 1, &g->axis)))
        return err;
    g->depth = (int64_t)depth;
    g->n = onnx_shape_count(&idx->shape);
    g->outer = onnx_shape_span(&idx->shape, 0, g->axis);
    g->inner = onnx_shape_span(&idx->shape, g->axis, rank);
    return NULL;
}

typedef struct one_hot_layout {
    int64_t *scalars; /* 0, depth */
    int64_t *idx64, *plus, *adjusted, *ones, *iota;
    bool *negative, *hot;
} one_hot_layout;

static void one_hot_carve(onnx_extra__ws *ws, const one_hot_geometry *g,
                          one_hot_layout *l) {
    size_t n8 = (size_t)g->n * 8, d8 = (size_t)g->depth * 8;
    l->scalars = onnx_extra__take(ws, 2 * 8);
    l->idx64 = onnx_extra__take(ws, n8);
    l->plus = onnx_extra__take(ws, n8);
    l->adjusted = onnx_extra__take(ws, n8);
    l->negative = onnx_extra__take(ws, (size_t)g->n);
    l->ones = onnx_extra__take(ws, d8);
    l->iota = onnx_extra__take(ws, d8);
    l->hot = onnx_extra__take(ws, (size_t)(g->n * g->depth));
}

osp_error *onnx_extra__one_hot_infer(onnx_infer_ctx *ctx) {
    one_hot_geometry g;
    osp_error *err =
        one_hot_geometry_of(ctx->node, ctx->n_inputs, ctx->inputs, &g);
    if (err)
        return err;
    const osp_shape *is = &ctx->inputs[0].shape;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = is->rank + 1;
    for (int d = 0, k = 0; d < out->rank; d++)
        out->dims[d] = d == g.axis ? g.depth : is->dims[k++];
    ctx->outputs[0].dtype = ctx->inputs[2].dtype;
    onnx_extra__ws ws = {0};
    one_hot_layout l;
    one_hot_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return onnx_check_shape(ctx->node, out, ctx->outputs[0].dtype);
}

osp_error *onnx_extra__one_hot_run(onnx_run_ctx *ctx) {
    one_hot_geometry g;
    osp_error *err =
        one_hot_geometry_of(ctx->node, ctx->n_inputs, ctx->in_desc, &g);
    if (err || g.n == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    one_hot_layout l;
    one_hot_carve(&ws, &g, &l);
    osp_stream *s = ctx->stream;
    const osp_datatype i64 = OSP_TYPE_INT64;
    const onnx_desc *id = &ctx->in_desc[0];
    const int64_t *idx = ctx->in[0];
    if (id->dtype != i64) {
        if ((err =
                 onnx_extra__cast(s, ctx->in[0], id->dtype, l.idx64, i64, g.n)))
            return err;
        idx = l.idx64;
    }
    if (ctx->node->opset >= 11) {
        int64_t *zero = l.scalars, *depth = l.scalars + 1;
        if ((err = onnx_extra__fill(s, zero, i64, 0.0, 1)) ||
            (err = onnx_extra__fill(s, depth, i64, (double)g.depth, 1)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_LESS, i64, idx, false,
                                      zero, true, l.negative, g.n)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, i64, idx, false,
                                      depth, true, l.plus, g.n)))
            return err;
        osp_where_args w = {.elem_size = 8,
                            .rank = 1,
                            .dims = {g.n},
                            .cond = l.negative,
                            .cond_strides = {1},
                            .x = l.plus,
                            .x_strides = {1},
                            .y = idx,
                            .y_strides = {1},
                            .out = l.adjusted};
        if ((err = osp_op_where(s, &w)))
            return err;
        idx = l.adjusted;
    }
    if ((err = onnx_extra__iota(s, i64, l.ones, l.iota, g.depth)))
        return err;
    osp_binary_nd_args eq = {.op = OSP_BINARY_ND_EQUAL,
                             .dtype = i64,
                             .rank = 3,
                             .dims = {g.outer, g.depth, g.inner},
                             .a = idx,
                             .a_strides = {g.inner, 0, 1},
                             .b = l.iota,
                             .b_strides = {0, 1, 0},
                             .out = l.hot};
    if ((err = osp_op_binary_nd(s, &eq)))
        return err;
    size_t es = osp_datatype_byte_size(ctx->in_desc[2].dtype);
    osp_where_args w = {.elem_size = es,
                        .rank = 1,
                        .dims = {g.n * g.depth},
                        .cond = l.hot,
                        .cond_strides = {1},
                        .x = (const uint8_t *)ctx->in[2] + es,
                        .x_strides = {0},
                        .y = ctx->in[2],
                        .y_strides = {0},
                        .out = ctx->out[0]};
    return osp_op_where(s, &w);
}

/* ---- ReverseSequence -----------------------------------------------------
 */

/* The input's first two dims are time and batch (either order); the rest
 * moves as rows of `rest` elements. Row (t, b) reads row
 * (t < len[b] ? len[b] - 1 - t : t, b), one gather over the d0 * d1 rows.
 */
typedef struct reverse_geometry {
    int time_axis, batch_axis;
    int64_t d0, d1, grid, rest, batch, longest;
} reverse_geometry;

static osp_error *reverse_geometry_of(const onnx_node *node, size_t n_inputs,
                                      const onnx_desc *inputs,
                                      reverse_geometry *g) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t ta, ba;
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (err || (err = onnx_attr_int(node, "time_axis", 0, &ta)) ||
        (err = onnx_attr_int(node, "batch_axis", 1, &ba)) ||
        (err = check_movable(node, &inputs[0], 0)) ||
        (err = check_index_dtype(node, &inputs[1], 1)))
        return err;
    if ((ta != 0 && ta != 1) || (ba != 0 && ba != 1) || ta == ba)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "time_axis %lld and batch_axis %lld must be "
                                 "0 and 1",
                                 (long long)ta, (long long)ba);
    const osp_shape *s = &inputs[0].shape;
    if (s->rank < 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "input 0 has rank %d, expected at least 2",
                                 s->rank);
    g->time_axis = (int)ta;
    g->batch_axis = (int)ba;
    g->d0 = s->dims[0];
    g->d1 = s->dims[1];
    g->grid = g->d0 * g->d1;
    g->rest = onnx_shape_span(s, 2, s->rank);
    g->batch = s->dims[ba];
    g->longest = g->d0 > g->d1 ? g->d0 : g->d1;
    const onnx_desc *lens = &inputs[1];
    if (lens->shape.rank != 1 || lens->shape.dims[0] != g->batch)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "sequence_lens must be 1-D of the batch size "
                                 "%lld",
                                 (long long)g->batch);
    if (lens->host)
        for (int64_t b = 0; b < g->batch; b++) {
            int64_t v = host_index(lens, b);
            if (v < 0 || v > s->dims[ta])
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                         "sequence length %lld is outside "
                                         "[0, %lld]",
                                         (long long)v, (long long)s->dims[ta]);
        }
    return NULL;
}

typedef struct reverse_layout {
    int64_t *scalars; /* 1, time stride, batch stride */
    int64_t *lens64, *ones, *iota, *last, *rev, *src, *scaled, *bvec, *flat;
    bool *inside;
} reverse_layout;

static void reverse_carve(onnx_extra__ws *ws, const reverse_geometry *g,
                          reverse_layout *l) {
    size_t b8 = (size_t)g->batch * 8, g8 = (size_t)g->grid * 8;
    l->scalars = onnx_extra__take(ws, 3 * 8);
    l->lens64 = onnx_extra__take(ws, b8);
    l->ones = onnx_extra__take(ws, (size_t)g->longest * 8);
    l->iota = onnx_extra__take(ws, (size_t)g->longest * 8);
    l->last = onnx_extra__take(ws, b8);
    l->inside = onnx_extra__take(ws, (size_t)g->grid);
    l->rev = onnx_extra__take(ws, g8);
    l->src = onnx_extra__take(ws, g8);
    l->scaled = onnx_extra__take(ws, g8);
    l->bvec = onnx_extra__take(ws, b8);
    l->flat = onnx_extra__take(ws, g8);
}

osp_error *onnx_extra__reverse_sequence_infer(onnx_infer_ctx *ctx) {
    reverse_geometry g;
    osp_error *err =
        reverse_geometry_of(ctx->node, ctx->n_inputs, ctx->inputs, &g);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    onnx_extra__ws ws = {0};
    reverse_layout l;
    reverse_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__reverse_sequence_run(onnx_run_ctx *ctx) {
    reverse_geometry g;
    osp_error *err =
        reverse_geometry_of(ctx->node, ctx->n_inputs, ctx->in_desc, &g);
    if (err || g.grid == 0 || g.rest == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    reverse_layout l;
    reverse_carve(&ws, &g, &l);
    osp_stream *s = ctx->stream;
    const osp_datatype i64 = OSP_TYPE_INT64;
    const int64_t *lens;
    if ((err = indices_int64(s, &ctx->in_desc[1], ctx->in[1], l.lens64, &lens)))
        return err;
    /* strides of the time and batch coordinates in the [d0, d1] grid, as
     * views of a vector, and as flat row strides */
    int64_t t_str[2] = {g.time_axis == 0, g.time_axis == 1};
    int64_t b_str[2] = {g.batch_axis == 0, g.batch_axis == 1};
    int64_t *one = l.scalars, *t_step = l.scalars + 1, *b_step = l.scalars + 2;
    if ((err = onnx_extra__fill(s, one, i64, 1.0, 1)) ||
        (err = onnx_extra__fill(s, t_step, i64,
                                g.time_axis == 0 ? (double)g.d1 : 1.0, 1)) ||
        (err = onnx_extra__fill(s, b_step, i64,
                                g.batch_axis == 0 ? (double)g.d1 : 1.0, 1)) ||
        (err = onnx_extra__iota(s, i64, l.ones, l.iota, g.longest)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, i64, lens, false, one,
                                  true, l.last, g.batch)))
        return err;
    osp_binary_nd_args b = {.op = OSP_BINARY_ND_LESS,
                            .dtype = i64,
                            .rank = 2,
                            .dims = {g.d0, g.d1},
                            .a = l.iota,
                            .a_strides = {t_str[0], t_str[1]},
                            .b = lens,
                            .b_strides = {b_str[0], b_str[1]},
                            .out = l.inside};
    if ((err = osp_op_binary_nd(s, &b)))
        return err;
    b.op = OSP_BINARY_ND_SUB;
    b.a = l.last;
    memcpy(b.a_strides, b_str, sizeof b_str);
    b.b = l.iota;
    memcpy(b.b_strides, t_str, sizeof t_str);
    b.out = l.rev;
    if ((err = osp_op_binary_nd(s, &b)))
        return err;
    osp_where_args w = {.elem_size = 8,
                        .rank = 2,
                        .dims = {g.d0, g.d1},
                        .cond = l.inside,
                        .cond_strides = {g.d1, 1},
                        .x = l.rev,
                        .x_strides = {g.d1, 1},
                        .y = l.iota,
                        .y_strides = {t_str[0], t_str[1]},
                        .out = l.src};
    if ((err = osp_op_where(s, &w)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, i64, l.src, false,
                                  t_step, true, l.scaled, g.grid)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, i64, l.iota, false,
                                  b_step, true, l.bvec, g.batch)))
        return err;
    b.op = OSP_BINARY_ND_ADD;
    b.a = l.scaled;
    b.a_strides[0] = g.d1;
    b.a_strides[1] = 1;
    b.b = l.bvec;
    memcpy(b.b_strides, b_str, sizeof b_str);
    b.out = l.flat;
    if ((err = osp_op_binary_nd(s, &b)))
        return err;
    osp_gather_args ga = {.elem_size =
                              osp_datatype_byte_size(ctx->in_desc[0].dtype),
                          .data = ctx->in[0],
                          .outer = 1,
                          .axis_len = g.grid,
                          .inner = g.rest,
                          .index_dtype = i64,
                          .indices = l.flat,
                          .n_indices = g.grid,
                          .out = ctx->out[0]};
    return osp_op_gather(s, &ga);
}

/* ---- GatherND, ScatterND -------------------------------------------------
 */

/* The indices [rows, k] address slices of data viewed as [batch, block,
 * slice], block = the k indexed dims; each row's flat slice number is
 * batch_of(row) * block + sum_m (idx[row, m] mod dim_m) * stride_m. */
typedef struct nd_geometry {
    int b, k;
    int64_t rows, batch, per_batch, block, slice;
    int64_t dims[OSP_MAX_DIMS], strides[OSP_MAX_DIMS]; /* of the k dims */
} nd_geometry;

static osp_error *nd_geometry_of(const onnx_node *node, const onnx_desc *data,
                                 const onnx_desc *idx, int b, nd_geometry *g) {
    const osp_shape *ds = &data->shape, *is = &idx->shape;
    if (is->rank < 1 || ds->rank < 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "data and indices must have rank 1 or more");
    if (b < 0 || b >= is->rank || b >= ds->rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "batch_dims %d is out of range", b);
    int64_t k = is->dims[is->rank - 1];
    if (k < 1 || k > ds->rank - b)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "the indices' last dim %lld must be in "
                                 "[1, %d]",
                                 (long long)k, ds->rank - b);
    for (int d = 0; d < b; d++)
        if (ds->dims[d] != is->dims[d])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "batch dim %d differs: %lld in data, "
                                     "%lld in indices",
                                     d, (long long)ds->dims[d],
                                     (long long)is->dims[d]);
    g->b = b;
    g->k = (int)k;
    g->batch = onnx_shape_span(ds, 0, b);
    g->rows = onnx_shape_span(is, 0, is->rank - 1);
    g->per_batch = onnx_shape_span(is, b, is->rank - 1);
    g->block = onnx_shape_span(ds, b, b + g->k);
    g->slice = onnx_shape_span(ds, b + g->k, ds->rank);
    int64_t stride = 1;
    for (int m = g->k - 1; m >= 0; m--) {
        g->dims[m] = ds->dims[b + m];
        g->strides[m] = stride;
        stride *= g->dims[m];
    }
    if (g->rows > 0 && g->block == 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "indices into an empty dim");
    for (int m = 0; m < g->k; m++) {
        osp_error *err = check_known_indices(node, idx, k, m, g->dims[m]);
        if (err)
            return err;
    }
    return NULL;
}

typedef struct nd_layout {
    int64_t *idx64, *dims, *strides, *wrapped, *scaled, *within, *boff, *flat;
    onnx_extra__offsets_ws offsets;
} nd_layout;

static void nd_carve(onnx_extra__ws *ws, const nd_geometry *g, nd_layout *l) {
    size_t rk = (size_t)(g->rows * g->k) * 8, r8 = (size_t)g->rows * 8;
    l->idx64 = onnx_extra__take(ws, rk);
    l->dims = onnx_extra__take(ws, (size_t)g->k * 8);
    l->strides = onnx_extra__take(ws, (size_t)g->k * 8);
    l->wrapped = onnx_extra__take(ws, rk);
    l->scaled = onnx_extra__take(ws, rk);
    l->within = onnx_extra__take(ws, r8);
    l->boff = onnx_extra__take(ws, r8);
    l->flat = onnx_extra__take(ws, r8);
    int64_t grid[2] = {g->batch, g->per_batch};
    onnx_extra__offsets_layout(ws, 2, grid, &l->offsets);
}

/* Enqueues the flat slice numbers of the rows; *flat gets where they are
 * (rows > 0). */
static osp_error *nd_flat(osp_stream *s, const nd_geometry *g,
                          const nd_layout *l, const onnx_desc *idx_desc,
                          const void *idx_mem, const int64_t **flat) {
    const osp_datatype i64 = OSP_TYPE_INT64;
    const int64_t *idx;
    osp_error *err = indices_int64(s, idx_desc, idx_mem, l->idx64, &idx);
    if (err)
        return err;
    for (int m = 0; m < g->k; m++)
        if ((err = onnx_extra__fill(s, l->dims + m, i64, (double)g->dims[m],
                                    1)) ||
            (err = onnx_extra__fill(s, l->strides + m, i64,
                                    (double)g->strides[m], 1)))
            return err;
    osp_binary_nd_args b = {.op = OSP_BINARY_ND_MOD,
                            .dtype = i64,
                            .rank = 2,
                            .dims = {g->rows, g->k},
                            .a = idx,
                            .a_strides = {g->k, 1},
                            .b = l->dims,
                            .b_strides = {0, 1},
                            .out = l->wrapped};
    if ((err = osp_op_binary_nd(s, &b)))
        return err;
    b.op = OSP_BINARY_ND_MUL;
    b.a = l->wrapped;
    b.b = l->strides;
    b.out = l->scaled;
    if ((err = osp_op_binary_nd(s, &b)))
        return err;
    osp_reduce_args r = {.op = OSP_REDUCE_SUM,
                         .dtype = i64,
                         .x = l->scaled,
                         .outer = g->rows,
                         .n = g->k,
                         .inner = 1,
                         .out = l->within};
    if ((err = osp_op_reduce(s, &r)))
        return err;
    *flat = l->within;
    if (g->batch <= 1)
        return NULL;
    int64_t grid[2] = {g->batch, g->per_batch}, strides[2] = {g->block, 0};
    if ((err = onnx_extra__offsets(s, &l->offsets, i64, 2, grid, strides,
                                   l->boff)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, i64, l->within, false,
                                  l->boff, false, l->flat, g->rows)))
        return err;
    *flat = l->flat;
    return NULL;
}

static osp_error *gather_nd_geometry(const onnx_node *node, size_t n_inputs,
                                     const onnx_desc *inputs, nd_geometry *g) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t b = 0;
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (!err && node->opset >= 12)
        err = onnx_attr_int(node, "batch_dims", 0, &b);
    if (err || (err = check_movable(node, &inputs[0], 0)) ||
        (err = check_index_dtype(node, &inputs[1], 1)))
        return err;
    if (b < 0 || b >= OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "batch_dims %lld is out of range",
                                 (long long)b);
    return nd_geometry_of(node, &inputs[0], &inputs[1], (int)b, g);
}

osp_error *onnx_extra__gather_nd_infer(onnx_infer_ctx *ctx) {
    nd_geometry g;
    osp_error *err =
        gather_nd_geometry(ctx->node, ctx->n_inputs, ctx->inputs, &g);
    if (err)
        return err;
    const osp_shape *ds = &ctx->inputs[0].shape, *is = &ctx->inputs[1].shape;
    int rank = is->rank - 1 + ds->rank - g.b - g.k;
    if (rank > OSP_MAX_DIMS)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                                 "output rank %d is over the limit of %d", rank,
                                 OSP_MAX_DIMS);
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = 0;
    for (int d = 0; d < is->rank - 1; d++)
        out->dims[out->rank++] = is->dims[d];
    for (int d = g.b + g.k; d < ds->rank; d++)
        out->dims[out->rank++] = ds->dims[d];
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    onnx_extra__ws ws = {0};
    nd_layout l;
    nd_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return onnx_check_shape(ctx->node, out, ctx->inputs[0].dtype);
}

osp_error *onnx_extra__gather_nd_run(onnx_run_ctx *ctx) {
    nd_geometry g;
    osp_error *err =
        gather_nd_geometry(ctx->node, ctx->n_inputs, ctx->in_desc, &g);
    if (err || g.rows == 0 || g.slice == 0)
        return err;
    onnx_extra__ws ws = {.base = ctx->workspace};
    nd_layout l;
    nd_carve(&ws, &g, &l);
    const int64_t *flat;
    if ((err =
             nd_flat(ctx->stream, &g, &l, &ctx->in_desc[1], ctx->in[1], &flat)))
        return err;
    osp_gather_args ga = {.elem_size =
                              osp_datatype_byte_size(ctx->in_desc[0].dtype),
                          .data = ctx->in[0],
                          .outer = 1,
                          .axis_len = g.batch * g.block,
                          .inner = g.slice,
                          .index_dtype = OSP_TYPE_INT64,
                          .indices = flat,
                          .n_indices = g.rows,
                          .out = ctx->out[0]};
    return osp_op_gather(ctx->stream, &ga);
}

/* ScatterND, ScatterElements and Scatter keep the reduction (and the axis
 * of the element-wise ones). */
typedef struct scatter_state {
    osp_scatter_reduction reduction;
    int64_t axis;
} scatter_state;

osp_error *onnx_extra__scatter_prepare(const onnx_node *node, void **state) {
    scatter_state st = {.reduction = OSP_SCATTER_NONE};
    osp_error *err = onnx_attr_int(node, "axis", 0, &st.axis);
    if (!err && node->opset >= 16)
        err = scatter_reduction_of(node, &st.reduction);
    if (err)
        return err;
    scatter_state *p = malloc(sizeof *p);
    if (!p)
        return osp_error_out_of_memory();
    *p = st;
    *state = p;
    return NULL;
}

/* Data, indices and updates of a scatter: updates of data's dtype, one
 * the reduction takes. */
static osp_error *scatter_inputs(const onnx_node *node, const scatter_state *st,
                                 size_t n_inputs, const onnx_desc *inputs) {
    osp_error *err = NULL;
    for (size_t i = 0; i < 3 && !err; i++)
        err = onnx_required_input(node, n_inputs, inputs, i);
    if (err || (err = check_movable(node, &inputs[0], 0)) ||
        (err = check_index_dtype(node, &inputs[1], 1)))
        return err;
    osp_datatype dt = inputs[0].dtype;
    if (inputs[2].dtype != dt)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "updates are %s, data is %s",
                                 osp_datatype_wire_name(inputs[2].dtype),
                                 osp_datatype_wire_name(dt));
    if (st->reduction != OSP_SCATTER_NONE && dt != OSP_TYPE_FP32 &&
        dt != OSP_TYPE_INT32 && dt != OSP_TYPE_INT64)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "a reduction over %s is not supported (FP32, "
                                 "INT32, INT64)",
                                 osp_datatype_wire_name(dt));
    return NULL;
}

static osp_error *scatter_nd_geometry(const onnx_node *node,
                                      const scatter_state *st, size_t n_inputs,
                                      const onnx_desc *inputs, nd_geometry *g) {
    osp_error *err = scatter_inputs(node, st, n_inputs, inputs);
    if (!err)
        err = nd_geometry_of(node, &inputs[0], &inputs[1], 0, g);
    if (err)
        return err;
    /* updates: indices.shape[:-1] + data.shape[k:] */
    const osp_shape *ds = &inputs[0].shape, *is = &inputs[1].shape,
                    *us = &inputs[2].shape;
    bool ok = us->rank == is->rank - 1 + ds->rank - g->k;
    for (int d = 0; ok && d < us->rank; d++)
        ok = us->dims[d] == (d < is->rank - 1
                                 ? is->dims[d]
                                 : ds->dims[g->k + d - (is->rank - 1)]);
    if (!ok) {
        char buf[160];
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "updates have shape %s, expected "
                                 "indices.shape[:-1] + data.shape[%d:]",
                                 osp_shape_format(us, buf, sizeof buf), g->k);
    }
    return NULL;
}

osp_error *onnx_extra__scatter_nd_infer(onnx_infer_ctx *ctx) {
    nd_geometry g;
    osp_error *err = scatter_nd_geometry(ctx->node, ctx->state, ctx->n_inputs,
                                         ctx->inputs, &g);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    onnx_extra__ws ws = {0};
    nd_layout l;
    nd_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

/* The output starts as a copy of data; the updates' slices then land on
 * it. */
osp_error *onnx_extra__scatter_nd_run(onnx_run_ctx *ctx) {
    const scatter_state *st = ctx->state;
    nd_geometry g;
    osp_error *err =
        scatter_nd_geometry(ctx->node, st, ctx->n_inputs, ctx->in_desc, &g);
    if (err)
        return err;
    const onnx_desc *data = &ctx->in_desc[0];
    size_t es = osp_datatype_byte_size(data->dtype);
    if ((err = onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                                (size_t)onnx_shape_count(&data->shape) * es)))
        return err;
    if (g.rows == 0 || g.slice == 0)
        return NULL;
    onnx_extra__ws ws = {.base = ctx->workspace};
    nd_layout l;
    nd_carve(&ws, &g, &l);
    const int64_t *flat;
    if ((err =
             nd_flat(ctx->stream, &g, &l, &ctx->in_desc[1], ctx->in[1], &flat)))
        return err;
    osp_scatter_args sc = {.reduction = st->reduction,
                           .dtype = data->dtype,
                           .data = ctx->out[0],
                           .outer = 1,
                           .axis_len = g.block,
                           .inner = g.slice,
                           .index_dtype = OSP_TYPE_INT64,
                           .indices = flat,
                           .n_indices = g.rows,
                           .updates = ctx->in[2]};
    return osp_op_scatter(ctx->stream, &sc);
}

/* ---- ScatterElements, Scatter --------------------------------------------
 */

/* Update p lands on data's flat element (idx[p] mod len) * stride_axis +
 * sum over the other dims d of p[d] * stride_d. */
typedef struct elements_geometry {
    int axis, rank;
    int64_t n, data_count, len, stride_axis;
    int64_t dims[OSP_MAX_DIMS];    /* of the indices */
    int64_t strides[OSP_MAX_DIMS]; /* data's, 0 on the axis */
} elements_geometry;

static osp_error *elements_geometry_of(const onnx_node *node,
                                       const scatter_state *st, size_t n_inputs,
                                       const onnx_desc *inputs,
                                       elements_geometry *g) {
    osp_error *err = scatter_inputs(node, st, n_inputs, inputs);
    if (err)
        return err;
    const osp_shape *ds = &inputs[0].shape, *is = &inputs[1].shape,
                    *us = &inputs[2].shape;
    if ((err = onnx_axis(node, st->axis, ds->rank, &g->axis)))
        return err;
    if (is->rank != ds->rank || !osp_shape_equal(is, us))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "indices and updates must have one shape "
                                 "of data's rank %d",
                                 ds->rank);
    for (int d = 0; d < ds->rank; d++)
        if (d != g->axis && is->dims[d] > ds->dims[d])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "indices have dim %d of %lld, over "
                                     "data's %lld",
                                     d, (long long)is->dims[d],
                                     (long long)ds->dims[d]);
    g->rank = ds->rank;
    g->n = onnx_shape_count(is);
    g->data_count = onnx_shape_count(ds);
    g->len = ds->dims[g->axis];
    onnx_contiguous_strides(ds, g->strides);
    g->stride_axis = g->strides[g->axis];
    g->strides[g->axis] = 0;
    memcpy(g->dims, is->dims, sizeof g->dims);
    if (g->n > 0 && g->len == 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "indices into an empty axis");
    return check_known_indices(node, &inputs[1], 1, -1, g->len);
}

typedef struct elements_layout {
    int64_t *scalars; /* len, stride_axis */
    int64_t *idx64, *wrapped, *scaled, *base, *flat;
    onnx_extra__offsets_ws offsets;
} elements_layout;

static void elements_carve(onnx_extra__ws *ws, const elements_geometry *g,
                           elements_layout *l) {
    size_t n8 = (size_t)g->n * 8;
    l->scalars = onnx_extra__take(ws, 2 * 8);
    l->idx64 = onnx_extra__take(ws, n8);
    l->wrapped = onnx_extra__take(ws, n8);
    l->scaled = onnx_extra__take(ws, n8);
    l->base = onnx_extra__take(ws, n8);
    l->flat = onnx_extra__take(ws, n8);
    onnx_extra__offsets_layout(ws, g->rank, g->dims, &l->offsets);
}

osp_error *onnx_extra__scatter_elements_infer(onnx_infer_ctx *ctx) {
    elements_geometry g;
    osp_error *err = elements_geometry_of(ctx->node, ctx->state, ctx->n_inputs,
                                          ctx->inputs, &g);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    onnx_extra__ws ws = {0};
    elements_layout l;
    elements_carve(&ws, &g, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__scatter_elements_run(onnx_run_ctx *ctx) {
    const scatter_state *st = ctx->state;
    elements_geometry g;
    osp_error *err =
        elements_geometry_of(ctx->node, st, ctx->n_inputs, ctx->in_desc, &g);
    if (err)
        return err;
    const onnx_desc *data = &ctx->in_desc[0];
    osp_stream *s = ctx->stream;
    if ((err = onnx_copy_bytes(s, ctx->out[0], ctx->in[0],
                                (size_t)g.data_count *
                                    osp_datatype_byte_size(data->dtype))))
        return err;
    if (g.n == 0)
        return NULL;
    onnx_extra__ws ws = {.base = ctx->workspace};
    elements_layout l;
    elements_carve(&ws, &g, &l);
    const osp_datatype i64 = OSP_TYPE_INT64;
    const int64_t *idx;
    if ((err = indices_int64(s, &ctx->in_desc[1], ctx->in[1], l.idx64, &idx)) ||
        (err = onnx_extra__fill(s, l.scalars, i64, (double)g.len, 1)) ||
        (err = onnx_extra__fill(s, l.scalars + 1, i64, (double)g.stride_axis,
                                1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MOD, i64, idx, false,
                                  l.scalars, true, l.wrapped, g.n)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, i64, l.wrapped, false,
                                  l.scalars + 1, true, l.scaled, g.n)) ||
        (err = onnx_extra__offsets(s, &l.offsets, i64, g.rank, g.dims,
                                   g.strides, l.base)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, i64, l.scaled, false,
                                  l.base, false, l.flat, g.n)))
        return err;
    osp_scatter_args sc = {.reduction = st->reduction,
                           .dtype = data->dtype,
                           .data = ctx->out[0],
                           .outer = 1,
                           .axis_len = g.data_count,
                           .inner = 1,
                           .index_dtype = i64,
                           .indices = l.flat,
                           .n_indices = g.n,
                           .updates = ctx->in[2]};
    return osp_op_scatter(s, &sc);
}

/* ---- positions of non-zero elements (NonZero, Compress) ------------------
 */

/* Whether element i of a host tensor is not zero (NaN is not zero). */
static bool host_nonzero(const void *p, osp_datatype dt, int64_t i) {
    switch (dt) {
    case OSP_TYPE_FP32:
        return ((const float *)p)[i] != 0.0f;
    case OSP_TYPE_FP64:
        return ((const double *)p)[i] != 0.0;
    case OSP_TYPE_BOOL:
    case OSP_TYPE_INT8:
    case OSP_TYPE_UINT8:
        return ((const uint8_t *)p)[i] != 0;
    case OSP_TYPE_INT16:
    case OSP_TYPE_UINT16:
        return ((const uint16_t *)p)[i] != 0;
    case OSP_TYPE_INT32:
    case OSP_TYPE_UINT32:
        return ((const uint32_t *)p)[i] != 0;
    default:
        return ((const uint64_t *)p)[i] != 0;
    }
}

/* The dtypes a zero test runs on: binary_nd's EQUAL takes them. */
static bool zero_testable(osp_datatype dt) {
    switch (dt) {
    case OSP_TYPE_FP32:
    case OSP_TYPE_FP64:
    case OSP_TYPE_BOOL:
    case OSP_TYPE_INT8:
    case OSP_TYPE_UINT8:
    case OSP_TYPE_INT16:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_INT32:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_INT64:
    case OSP_TYPE_UINT64:
        return true;
    default:
        return false;
    }
}

/* The k-th non-zero element's index for k < count, from n elements:
 * is_zero = (x == 0); pos = exclusive cumsum of !is_zero; an iota
 * scattered to pos where not zero, to a spare slot `count` where zero. */
typedef struct positions_layout {
    int64_t *scalars; /* 0, 1, count */
    uint8_t *zero;    /* x's zero */
    bool *is_zero;
    int64_t *mask, *pos, *target, *ones, *iota, *slots;
} positions_layout;

static void positions_carve(onnx_extra__ws *ws, int64_t n, int64_t count,
                            positions_layout *l) {
    size_t n8 = (size_t)n * 8;
    l->scalars = onnx_extra__take(ws, 3 * 8);
    l->zero = onnx_extra__take(ws, 8);
    l->is_zero = onnx_extra__take(ws, (size_t)n);
    l->mask = onnx_extra__take(ws, n8);
    l->pos = onnx_extra__take(ws, n8);
    l->target = onnx_extra__take(ws, n8);
    l->ones = onnx_extra__take(ws, n8);
    l->iota = onnx_extra__take(ws, n8);
    l->slots = onnx_extra__take(ws, (size_t)(count + 1) * 8);
}

/* Enqueues the positions into l->slots[0 .. count). */
static osp_error *positions(osp_stream *s, const positions_layout *l,
                            const void *x, osp_datatype dt, int64_t n,
                            int64_t count) {
    const osp_datatype i64 = OSP_TYPE_INT64;
    int64_t *zero64 = l->scalars, *one64 = l->scalars + 1,
            *spare = l->scalars + 2;
    osp_error *err;
    if ((err = onnx_extra__fill(s, l->zero, dt, 0.0, 1)) ||
        (err = onnx_extra__fill(s, zero64, i64, 0.0, 1)) ||
        (err = onnx_extra__fill(s, one64, i64, 1.0, 1)) ||
        (err = onnx_extra__fill(s, spare, i64, (double)count, 1)) ||
        (err = onnx_binary_flat(s, OSP_BINARY_ND_EQUAL, dt, x, false, l->zero,
                                  true, l->is_zero, n)))
        return err;
    osp_where_args w = {.elem_size = 8,
                        .rank = 1,
                        .dims = {n},
                        .cond = l->is_zero,
                        .cond_strides = {1},
                        .x = zero64,
                        .x_strides = {0},
                        .y = one64,
                        .y_strides = {0},
                        .out = l->mask};
    if ((err = osp_op_where(s, &w)))
        return err;
    osp_cumsum_args cs = {.dtype = i64,
                          .x = l->mask,
                          .y = l->pos,
                          .outer = 1,
                          .n = n,
                          .inner = 1,
                          .exclusive = true};
    if ((err = osp_op_cumsum(s, &cs)))
        return err;
    w.x = spare;
    w.y = l->pos;
    w.y_strides[0] = 1;
    w.out = l->target;
    if ((err = osp_op_where(s, &w)) ||
        (err = onnx_extra__iota(s, i64, l->ones, l->iota, n)))
        return err;
    osp_scatter_args sc = {.reduction = OSP_SCATTER_NONE,
                           .dtype = i64,
                           .data = l->slots,
                           .outer = 1,
                           .axis_len = count + 1,
                           .inner = 1,
                           .index_dtype = i64,
                           .indices = l->target,
                           .n_indices = n,
                           .updates = l->iota};
    return osp_op_scatter(s, &sc);
}

/* ---- NonZero -------------------------------------------------------------
 */

/* A scalar counts as the one-element vector (onnxruntime's reading). */
static osp_error *non_zero_input(const onnx_node *node, size_t n_inputs,
                                 const onnx_desc *inputs, int64_t *n,
                                 int *rank) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &inputs[0];
    if (!zero_testable(x->dtype))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported",
                                 osp_datatype_wire_name(x->dtype));
    *n = onnx_shape_count(&x->shape);
    *rank = x->shape.rank > 0 ? x->shape.rank : 1;
    return NULL;
}

osp_error *onnx_extra__non_zero_infer(onnx_infer_ctx *ctx) {
    int64_t n;
    int rank;
    osp_error *err =
        non_zero_input(ctx->node, ctx->n_inputs, ctx->inputs, &n, &rank);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (!x->host)
        return onnx_error_needs_values(ctx->node, 0);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        count += host_nonzero(x->host, x->dtype, i);
    ctx->outputs[0].dtype = OSP_TYPE_INT64;
    ctx->outputs[0].shape = (osp_shape){.rank = 2, .dims = {rank, count}};
    onnx_extra__ws ws = {0};
    positions_layout l;
    positions_carve(&ws, n, count, &l);
    onnx_extra__take(&ws, (size_t)count * 8); /* quotient */
    onnx_extra__take(&ws, 2 * 8);             /* divisor, dim */
    ctx->workspace_bytes = ws.used;
    return NULL;
}

/* Row d of the output is (position / stride_d) mod dim_d. */
osp_error *onnx_extra__non_zero_run(onnx_run_ctx *ctx) {
    int64_t n;
    int rank;
    osp_error *err =
        non_zero_input(ctx->node, ctx->n_inputs, ctx->in_desc, &n, &rank);
    if (err)
        return err;
    int64_t count = ctx->out_desc[0].shape.dims[1];
    if (count == 0)
        return NULL;
    onnx_extra__ws ws = {.base = ctx->workspace};
    positions_layout l;
    positions_carve(&ws, n, count, &l);
    int64_t *quotient = onnx_extra__take(&ws, (size_t)count * 8);
    int64_t *scalars = onnx_extra__take(&ws, 2 * 8);
    osp_stream *s = ctx->stream;
    const onnx_desc *x = &ctx->in_desc[0];
    if ((err = positions(s, &l, ctx->in[0], x->dtype, n, count)))
        return err;
    osp_shape shape = x->shape;
    if (shape.rank == 0)
        shape = (osp_shape){.rank = 1, .dims = {1}};
    int64_t strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(&shape, strides);
    const osp_datatype i64 = OSP_TYPE_INT64;
    int64_t *out = ctx->out[0];
    for (int d = 0; d < rank; d++)
        if ((err = onnx_extra__fill(s, scalars, i64, (double)strides[d], 1)) ||
            (err = onnx_extra__fill(s, scalars + 1, i64, (double)shape.dims[d],
                                    1)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, i64, l.slots, false,
                                      scalars, true, quotient, count)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_MOD, i64, quotient,
                                      false, scalars + 1, true,
                                      out + (size_t)d * (size_t)count, count)))
            return err;
    return NULL;
}

/* ---- Compress ------------------------------------------------------------
 */

/* The input viewed as [outer, len, inner] along the axis (flattened to
 * [1, count, 1] without one); the condition's first min(|condition|, len)
 * entries pick along it. */
typedef struct compress_geometry {
    int axis; /* -1: flattened */
    int64_t outer, len, inner, n_cond;
} compress_geometry;

static osp_error *compress_geometry_of(const onnx_node *node, size_t n_inputs,
                                       const onnx_desc *inputs,
                                       compress_geometry *g) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (err || (err = check_movable(node, &inputs[0], 0)))
        return err;
    const onnx_desc *x = &inputs[0], *cond = &inputs[1];
    if (cond->dtype != OSP_TYPE_BOOL || cond->shape.rank != 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "condition must be a 1-D BOOL tensor");
    g->axis = -1;
    g->outer = g->inner = 1;
    g->len = onnx_shape_count(&x->shape);
    if (onnx_node_attr(node, "axis")) {
        int64_t a;
        if ((err = onnx_attr_int(node, "axis", 0, &a)) ||
            (err = onnx_axis(node, a, x->shape.rank, &g->axis)))
            return err;
        g->outer = onnx_shape_span(&x->shape, 0, g->axis);
        g->len = x->shape.dims[g->axis];
        g->inner = onnx_shape_span(&x->shape, g->axis + 1, x->shape.rank);
    }
    g->n_cond = cond->shape.dims[0] < g->len ? cond->shape.dims[0] : g->len;
    return NULL;
}

static osp_error *compress_count(const onnx_node *node, const onnx_desc *cond,
                                 const compress_geometry *g, int64_t *count) {
    if (!cond->host)
        return onnx_error_needs_values(node, 1);
    const uint8_t *c = cond->host;
    *count = 0;
    for (int64_t i = 0; i < cond->shape.dims[0]; i++) {
        if (!c[i])
            continue;
        if (i >= g->len)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "condition selects entry %lld of an axis "
                                     "of %lld",
                                     (long long)i, (long long)g->len);
        ++*count;
    }
    return NULL;
}

osp_error *onnx_extra__compress_infer(onnx_infer_ctx *ctx) {
    compress_geometry g;
    int64_t count = 0;
    osp_error *err =
        compress_geometry_of(ctx->node, ctx->n_inputs, ctx->inputs, &g);
    if (err || (err = compress_count(ctx->node, &ctx->inputs[1], &g, &count)))
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    if (g.axis < 0) {
        ctx->outputs[0].shape = (osp_shape){.rank = 1, .dims = {count}};
    } else {
        ctx->outputs[0].shape = ctx->inputs[0].shape;
        ctx->outputs[0].shape.dims[g.axis] = count;
    }
    onnx_extra__ws ws = {0};
    positions_layout l;
    positions_carve(&ws, g.n_cond, count, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

osp_error *onnx_extra__compress_run(onnx_run_ctx *ctx) {
    compress_geometry g;
    osp_error *err =
        compress_geometry_of(ctx->node, ctx->n_inputs, ctx->in_desc, &g);
    if (err)
        return err;
    const osp_shape *out = &ctx->out_desc[0].shape;
    int64_t count = g.axis < 0 ? out->dims[0] : out->dims[g.axis];
    if (onnx_shape_count(out) == 0)
        return NULL;
    onnx_extra__ws ws = {.base = ctx->workspace};
    positions_layout l;
    positions_carve(&ws, g.n_cond, count, &l);
    if ((err = positions(ctx->stream, &l, ctx->in[1], OSP_TYPE_BOOL, g.n_cond,
                         count)))
        return err;
    osp_gather_args ga = {.elem_size =
                              osp_datatype_byte_size(ctx->in_desc[0].dtype),
                          .data = ctx->in[0],
                          .outer = g.outer,
                          .axis_len = g.len,
                          .inner = g.inner,
                          .index_dtype = OSP_TYPE_INT64,
                          .indices = l.slots,
                          .n_indices = count,
                          .out = ctx->out[0]};
    return osp_op_gather(ctx->stream, &ga);
}

/* ---- results computed on the host (Unique, NonMaxSuppression) ------------
 */

/* Copies each host result to its output on the device, then waits for the
 * copies so that the caller may free the results. */
static osp_error *upload_results(osp_stream *s, size_t n, void *const *dst,
                                 void *const *src, const size_t *bytes) {
    osp_error *err = NULL;
    for (size_t i = 0; i < n && !err; i++)
        if (dst[i] && bytes[i] > 0)
            err = osp_memcpy_async(s, dst[i], src[i], bytes[i],
                                   OSP_COPY_HOST_TO_DEVICE);
    osp_error *sync = osp_stream_synchronize(s);
    if (!err)
        return sync;
    osp_error_free(sync);
    return err;
}

/* ---- Unique --------------------------------------------------------------
 */

/* x viewed as [outer, n, inner] along the axis ([1, count, 1] without
 * one): the n slices x[:, a, :] compared element by element in row-major
 * order, the first difference deciding (numpy's unique with an axis). */
typedef struct unique_view {
    const uint8_t *x;
    osp_datatype dt;
    size_t es;
    int64_t outer, n, inner;
} unique_view;

/* -1, 0, 1 as element i of slice a compares with the same of slice b;
 * NaNs compare equal to each other and above every number. */
static int compare_elem(const unique_view *v, int64_t ia, int64_t ib) {
    const void *pa = v->x + (size_t)ia * v->es, *pb = v->x + (size_t)ib * v->es;
#define CMP(T)                                                                 \
    do {                                                                       \
        T a_, b_;                                                              \
        memcpy(&a_, pa, sizeof a_);                                            \
        memcpy(&b_, pb, sizeof b_);                                            \
        return a_ < b_ ? -1 : a_ > b_ ? 1 : 0;                                 \
    } while (0)
#define CMPF(T)                                                                \
    do {                                                                       \
        T a_, b_;                                                              \
        memcpy(&a_, pa, sizeof a_);                                            \
        memcpy(&b_, pb, sizeof b_);                                            \
        if (isnan(a_) || isnan(b_))                                            \
            return isnan(a_) ? (isnan(b_) ? 0 : 1) : -1;                       \
        return a_ < b_ ? -1 : a_ > b_ ? 1 : 0;                                 \
    } while (0)
    switch (v->dt) {
    case OSP_TYPE_FP32:
        CMPF(float);
    case OSP_TYPE_FP64:
        CMPF(double);
    case OSP_TYPE_INT8:
        CMP(int8_t);
    case OSP_TYPE_INT16:
        CMP(int16_t);
    case OSP_TYPE_INT32:
        CMP(int32_t);
    case OSP_TYPE_INT64:
        CMP(int64_t);
    case OSP_TYPE_UINT16:
        CMP(uint16_t);
    case OSP_TYPE_UINT32:
        CMP(uint32_t);
    case OSP_TYPE_UINT64:
        CMP(uint64_t);
    default: /* UINT8, BOOL */
        CMP(uint8_t);
    }
#undef CMP
#undef CMPF
}

static int compare_slices(const unique_view *v, int64_t a, int64_t b) {
    for (int64_t o = 0; o < v->outer; o++)
        for (int64_t i = 0; i < v->inner; i++) {
            int64_t base = o * v->n * v->inner + i;
            int c = compare_elem(v, base + a * v->inner, base + b * v->inner);
            if (c)
                return c;
        }
    return 0;
}

static bool unique_dtype_ok(osp_datatype dt) {
    return zero_testable(dt);
}

/* Stable merge sort of order[0..n) by slice, through tmp[n]. */
static void sort_slices(const unique_view *v, int64_t *order, int64_t *tmp,
                        int64_t n) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = compare_slices(v, order[j], order[i]) < 0
                               ? order[j++]
                               : order[i++];
            while (i < mid)
                tmp[k++] = order[i++];
            while (j < hi)
                tmp[k++] = order[j++];
        }
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
}

/* The result: u unique slices, each by its first index (in output
 * order), their counts, and each input slice's output slot. */
typedef struct unique_result {
    int64_t u;
    int64_t *first, *counts, *inverse;
} unique_result;

static void unique_result_free(unique_result *r) {
    free(r->first);
    free(r->counts);
    free(r->inverse);
    memset(r, 0, sizeof *r);
}

typedef struct unique_params {
    unique_view view;
    bool sorted;
    int axis; /* -1: flattened */
} unique_params;

static osp_error *unique_params_of(const onnx_node *node, size_t n_inputs,
                                   const onnx_desc *inputs, unique_params *p) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t sorted;
    if (err || (err = onnx_attr_int(node, "sorted", 1, &sorted)))
        return err;
    const onnx_desc *x = &inputs[0];
    if (!unique_dtype_ok(x->dtype))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported",
                                 osp_datatype_wire_name(x->dtype));
    if (!x->host)
        return onnx_error_needs_values(node, 0);
    p->sorted = sorted != 0;
    p->view = (unique_view){.x = x->host,
                            .dt = x->dtype,
                            .es = osp_datatype_byte_size(x->dtype),
                            .outer = 1,
                            .n = onnx_shape_count(&x->shape),
                            .inner = 1};
    p->axis = -1;
    if (onnx_node_attr(node, "axis")) {
        int64_t a;
        if ((err = onnx_attr_int(node, "axis", 0, &a)) ||
            (err = onnx_axis(node, a, x->shape.rank, &p->axis)))
            return err;
        p->view.outer = onnx_shape_span(&x->shape, 0, p->axis);
        p->view.n = x->shape.dims[p->axis];
        p->view.inner = onnx_shape_span(&x->shape, p->axis + 1, x->shape.rank);
    }
    return NULL;
}

/* Sorts the slices (stably, so each run of equal ones starts with its
 * first index), numbers the runs, and for sorted = 0 renumbers them by
 * first index. */
static osp_error *unique_compute(const unique_params *p, unique_result *r) {
    int64_t n = p->view.n;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
    int64_t *order = malloc(bytes), *tmp = malloc(bytes);
    memset(r, 0, sizeof *r);
    r->first = malloc(bytes);
    r->counts = malloc(bytes);
    r->inverse = malloc(bytes);
    osp_error *err = NULL;
    if (!order || !tmp || !r->first || !r->counts || !r->inverse) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    sort_slices(&p->view, order, tmp, n);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || compare_slices(&p->view, order[i - 1], order[i]) != 0) {
            r->first[u] = order[i];
            r->counts[u] = 0;
            u++;
        }
        r->counts[u - 1]++;
        r->inverse[order[i]] = u - 1;
    }
    r->u = u;
    if (!p->sorted) {
        /* groups by first index: rank[g] = the group's slot in that order;
         * tmp (sorted group numbers) from a sort of the first indices */
        for (int64_t g = 0; g < u; g++)
            order[g] = g;
        for (int64_t width = 1; width < u; width *= 2) {
            for (int64_t lo = 0; lo < u; lo += 2 * width) {
                int64_t mid = lo + width < u ? lo + width : u;
                int64_t hi = lo + 2 * width < u ? lo + 2 * width : u;
                int64_t i = lo, j = mid, k = lo;
                while (i < mid && j < hi)
                    tmp[k++] = r->first[order[j]] < r->first[order[i]]
                                   ? order[j++]
                                   : order[i++];
                while (i < mid)
                    tmp[k++] = order[i++];
                while (j < hi)
                    tmp[k++] = order[j++];
            }
            memcpy(order, tmp, (size_t)u * sizeof *order);
        }
        /* order[k] = the group in slot k; tmp[g] = slot of group g */
        for (int64_t k = 0; k < u; k++)
            tmp[order[k]] = k;
        int64_t *first = malloc(bytes), *counts = malloc(bytes);
        if (!first || !counts) {
            free(first);
            free(counts);
            err = osp_error_out_of_memory();
            goto out;
        }
        for (int64_t k = 0; k < u; k++) {
            first[k] = r->first[order[k]];
            counts[k] = r->counts[order[k]];
        }
        for (int64_t i = 0; i < n; i++)
            r->inverse[i] = tmp[r->inverse[i]];
        free(r->first);
        free(r->counts);
        r->first = first;
        r->counts = counts;
    }
out:
    free(order);
    free(tmp);
    if (err)
        unique_result_free(r);
    return err;
}

osp_error *onnx_extra__unique_infer(onnx_infer_ctx *ctx) {
    unique_params p;
    unique_result r;
    osp_error *err =
        unique_params_of(ctx->node, ctx->n_inputs, ctx->inputs, &p);
    if (err || (err = unique_compute(&p, &r)))
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    onnx_desc *out = ctx->outputs;
    out[0].dtype = x->dtype;
    if (p.axis < 0) {
        out[0].shape = (osp_shape){.rank = 1, .dims = {r.u}};
    } else {
        out[0].shape = x->shape;
        out[0].shape.dims[p.axis] = r.u;
    }
    const int64_t lens[4] = {0, r.u, p.view.n, r.u};
    for (size_t i = 1; i < ctx->n_outputs && i < 4; i++) {
        out[i].dtype = OSP_TYPE_INT64;
        out[i].shape = (osp_shape){.rank = 1, .dims = {lens[i]}};
    }
    unique_result_free(&r);
    return NULL;
}

osp_error *onnx_extra__unique_run(onnx_run_ctx *ctx) {
    unique_params p;
    unique_result r;
    osp_error *err =
        unique_params_of(ctx->node, ctx->n_inputs, ctx->in_desc, &p);
    if (err || (err = unique_compute(&p, &r)))
        return err;
    const unique_view *v = &p.view;
    size_t ybytes = (size_t)(v->outer * r.u * v->inner) * v->es;
    uint8_t *y = malloc(ybytes ? ybytes : 1);
    if (!y) {
        unique_result_free(&r);
        return osp_error_out_of_memory();
    }
    size_t row = (size_t)v->inner * v->es;
    for (int64_t o = 0; o < v->outer; o++)
        for (int64_t g = 0; g < r.u; g++)
            memcpy(y + (size_t)(o * r.u + g) * row,
                   v->x + (size_t)(o * v->n + r.first[g]) * row, row);
    void *dst[4] = {NULL, NULL, NULL, NULL};
    for (size_t i = 0; i < ctx->n_outputs && i < 4; i++)
        if (onnx_present(ctx->n_outputs, ctx->out_desc, i))
            dst[i] = ctx->out[i];
    void *src[4] = {y, r.first, r.inverse, r.counts};
    size_t bytes[4] = {ybytes, (size_t)r.u * 8, (size_t)v->n * 8,
                       (size_t)r.u * 8};
    err = upload_results(ctx->stream, 4, dst, src, bytes);
    free(y);
    unique_result_free(&r);
    return err;
}

/* ---- NonMaxSuppression ---------------------------------------------------
 */

/* Per batch and class: the boxes scoring above score_threshold (all when
 * it is absent), best score first (ties: lower index first), each kept
 * unless its IoU with a box kept before it is above iou_threshold, at
 * most max_output_boxes_per_class of them (onnxruntime's algorithm). */
typedef struct nms_params {
    const float *boxes, *scores;
    int64_t batches, classes, n_boxes, max_out;
    float iou, score;
    bool has_score, center;
} nms_params;

static osp_error *nms_params_of(const onnx_node *node, size_t n_inputs,
                                const onnx_desc *inputs, nms_params *p) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t center;
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (err || (err = onnx_attr_int(node, "center_point_box", 0, &center)))
        return err;
    if (center != 0 && center != 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "center_point_box must be 0 or 1");
    const onnx_desc *b = &inputs[0], *s = &inputs[1];
    if (b->dtype != OSP_TYPE_FP32 || s->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "boxes and scores must be FP32");
    if (b->shape.rank != 3 || b->shape.dims[2] != 4 || s->shape.rank != 3 ||
        s->shape.dims[0] != b->shape.dims[0] ||
        s->shape.dims[2] != b->shape.dims[1])
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "boxes must be [batches, boxes, 4] and scores "
                                 "[batches, classes, boxes]");
    for (size_t i = 0; i < 5 && i < n_inputs; i++)
        if (inputs[i].present && !inputs[i].host)
            return onnx_error_needs_values(node, i);
    *p = (nms_params){.boxes = b->host,
                      .scores = s->host,
                      .batches = b->shape.dims[0],
                      .classes = s->shape.dims[1],
                      .n_boxes = b->shape.dims[1],
                      .center = center != 0};
    double v;
    if (onnx_present(n_inputs, inputs, 2) &&
        onnx_shape_count(&inputs[2].shape) > 0) {
        if ((err = onnx_read_scalar(node, 2, &inputs[2], &v)))
            return err;
        p->max_out = v > 0 ? (int64_t)v : 0;
    }
    if (onnx_present(n_inputs, inputs, 3) &&
        onnx_shape_count(&inputs[3].shape) > 0) {
        if ((err = onnx_read_scalar(node, 3, &inputs[3], &v)))
            return err;
        p->iou = (float)v;
    }
    if (onnx_present(n_inputs, inputs, 4) &&
        onnx_shape_count(&inputs[4].shape) > 0) {
        if ((err = onnx_read_scalar(node, 4, &inputs[4], &v)))
            return err;
        p->score = (float)v;
        p->has_score = true;
    }
    return NULL;
}

/* Box i as [x_min, y_min, x_max, y_max]. */
static void nms_corners(const nms_params *p, const float *box, float c[4]) {
    if (p->center) {
        float hw = box[2] / 2, hh = box[3] / 2;
        c[0] = box[0] - hw;
        c[1] = box[1] - hh;
        c[2] = box[0] + hw;
        c[3] = box[1] + hh;
    } else {
        c[0] = fminf(box[1], box[3]);
        c[1] = fminf(box[0], box[2]);
        c[2] = fmaxf(box[1], box[3]);
        c[3] = fmaxf(box[0], box[2]);
    }
}

static bool nms_suppresses(const nms_params *p, const float *a,
                           const float *b) {
    float ca[4], cb[4];
    nms_corners(p, a, ca);
    nms_corners(p, b, cb);
    float x0 = fmaxf(ca[0], cb[0]), x1 = fminf(ca[2], cb[2]);
    float y0 = fmaxf(ca[1], cb[1]), y1 = fminf(ca[3], cb[3]);
    if (x1 <= x0 || y1 <= y0)
        return false;
    float inter = (x1 - x0) * (y1 - y0);
    float area_a = (ca[2] - ca[0]) * (ca[3] - ca[1]);
    float area_b = (cb[2] - cb[0]) * (cb[3] - cb[1]);
    float uni = area_a + area_b - inter;
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0)
        return false;
    return inter / uni > p->iou;
}

typedef struct nms_candidate {
    float score;
    int64_t index;
} nms_candidate;

/* Best first; equal scores by lower index. */
static int nms_candidate_cmp(const void *a, const void *b) {
    const nms_candidate *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The selected triples [count, 3] (caller frees *out; NULL when none). */
static osp_error *nms_compute(const nms_params *p, int64_t **out,
                              int64_t *count) {
    *out = NULL;
    *count = 0;
    if (p->max_out == 0 || p->n_boxes == 0)
        return NULL;
    size_t nb = (size_t)p->n_boxes;
    nms_candidate *cand = malloc(nb * sizeof *cand);
    int64_t *kept = malloc(nb * sizeof *kept);
    size_t cap = 0;
    int64_t *sel = NULL;
    osp_error *err = NULL;
    if (!cand || !kept) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (int64_t b = 0; b < p->batches; b++) {
        const float *boxes = p->boxes + (size_t)b * nb * 4;
        for (int64_t c = 0; c < p->classes; c++) {
            const float *scores =
                p->scores + ((size_t)b * (size_t)p->classes + (size_t)c) * nb;
            size_t n = 0;
            for (size_t i = 0; i < nb; i++)
                if (!p->has_score || scores[i] > p->score)
                    cand[n++] = (nms_candidate){scores[i], (int64_t)i};
            qsort(cand, n, sizeof *cand, nms_candidate_cmp);
            int64_t n_kept = 0;
            for (size_t i = 0; i < n && n_kept < p->max_out; i++) {
                bool keep = true;
                for (int64_t k = 0; k < n_kept && keep; k++)
                    keep = !nms_suppresses(p, boxes + cand[i].index * 4,
                                           boxes + kept[k] * 4);
                if (!keep)
                    continue;
                kept[n_kept++] = cand[i].index;
                if ((size_t)*count == cap) {
                    cap = cap ? 2 * cap : 16;
                    int64_t *grown = realloc(sel, cap * 3 * sizeof *sel);
                    if (!grown) {
                        err = osp_error_out_of_memory();
                        goto out;
                    }
                    sel = grown;
                }
                int64_t *t = sel + *count * 3;
                t[0] = b;
                t[1] = c;
                t[2] = cand[i].index;
                ++*count;
            }
        }
    }
out:
    free(cand);
    free(kept);
    if (err) {
        free(sel);
        *count = 0;
        return err;
    }
    *out = sel;
    return NULL;
}

osp_error *onnx_extra__nms_infer(onnx_infer_ctx *ctx) {
    nms_params p;
    int64_t *sel, count;
    osp_error *err = nms_params_of(ctx->node, ctx->n_inputs, ctx->inputs, &p);
    if (err || (err = nms_compute(&p, &sel, &count)))
        return err;
    free(sel);
    ctx->outputs[0].dtype = OSP_TYPE_INT64;
    ctx->outputs[0].shape = (osp_shape){.rank = 2, .dims = {count, 3}};
    return NULL;
}

osp_error *onnx_extra__nms_run(onnx_run_ctx *ctx) {
    nms_params p;
    int64_t *sel, count;
    osp_error *err = nms_params_of(ctx->node, ctx->n_inputs, ctx->in_desc, &p);
    if (err || (err = nms_compute(&p, &sel, &count)))
        return err;
    void *dst[1] = {ctx->out[0]};
    void *src[1] = {sel};
    size_t bytes[1] = {(size_t)count * 3 * sizeof(int64_t)};
    err = upload_results(ctx->stream, 1, dst, src, bytes);
    free(sel);
    return err;
}

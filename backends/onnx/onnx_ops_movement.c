/*
 * Data movement ops: Transpose, Concat, Split, Slice, Gather,
 * GatherElements, Expand, Tile, Pad, DepthToSpace and SpaceToDepth.
 *
 * Nearly all of them are one osp_op_copy_strided per output (or per
 * input, for Concat) over a view of the source: a permutation of its
 * strides (Transpose), an offset and scaled or negative strides (Slice),
 * zero strides (Expand, Tile's repeats), a 6-D reshape-and-permute
 * (DepthToSpace, SpaceToDepth). copy_box() first drops unit dims and
 * merges dims that are contiguous in both views, so that most copies end
 * up as one contiguous memcpy or a 2-D block copy.
 *
 * They move elements by size only, so every fixed-size dtype works, and
 * all but Pad, DepthToSpace and SpaceToDepth also move STRING tensors
 * (16-byte onnx_string references; the output borrows the input's bytes).
 * Values the ops need at infer (Slice's starts, Expand's shape, Pad's
 * pads) must be known on the host while planning; run recomputes what it
 * needs from its descs, since one node's state serves every plan.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- shared ---------------------------------------------------------------
 */

/* A STRING element is a 16-byte onnx_string, which copy_strided and gather
 * move whole (the bytes it points at stay where they are, so an output
 * borrows its input's strings). */
static size_t elem_size(const onnx_desc *d) {
    return onnx_elem_bytes(d->dtype);
}

/* A strided copy of up to 2 * OSP_MAX_DIMS dims before simplification
 * (Tile doubles the rank). */
#define BOX_MAX_DIMS (2 * OSP_MAX_DIMS)

typedef struct copy_box_args {
    size_t elem_size;
    int rank;
    int64_t dims[BOX_MAX_DIMS];
    const void *src; /* first element of the box in the source */
    int64_t src_strides[BOX_MAX_DIMS];
    void *dst;
    int64_t dst_strides[BOX_MAX_DIMS];
} copy_box_args;

/* Enqueues the copy of `b`: drops dims of 1, merges neighbours that are
 * contiguous in both source and destination, and issues one contiguous
 * device copy when what is left is one run of elements, else one
 * osp_op_copy_strided. An empty box copies nothing; a box still over
 * OSP_MAX_DIMS dims after merging is UNSUPPORTED. */
static osp_error *copy_box(osp_stream *stream, const copy_box_args *b) {
    osp_copy_strided_args c = {
        .elem_size = b->elem_size, .src = b->src, .dst = b->dst};
    int r = 0;
    int64_t dims[BOX_MAX_DIMS], ss[BOX_MAX_DIMS], ds[BOX_MAX_DIMS];
    for (int i = 0; i < b->rank; i++) {
        int64_t d = b->dims[i];
        if (d == 0)
            return NULL;
        if (d == 1)
            continue;
        if (r > 0 && ss[r - 1] == b->src_strides[i] * d &&
            ds[r - 1] == b->dst_strides[i] * d) {
            dims[r - 1] *= d;
            ss[r - 1] = b->src_strides[i];
            ds[r - 1] = b->dst_strides[i];
            continue;
        }
        dims[r] = d;
        ss[r] = b->src_strides[i];
        ds[r] = b->dst_strides[i];
        r++;
    }
    if (r == 0)
        return osp_memcpy_async(stream, b->dst, b->src, b->elem_size,
                                OSP_COPY_DEVICE_TO_DEVICE);
    if (r == 1 && ss[0] == 1 && ds[0] == 1)
        return osp_memcpy_async(stream, b->dst, b->src,
                                (size_t)dims[0] * b->elem_size,
                                OSP_COPY_DEVICE_TO_DEVICE);
    if (r > OSP_MAX_DIMS)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "a copy of %d dims is over the limit of %d", r,
                             OSP_MAX_DIMS);
    c.rank = r;
    memcpy(c.dims, dims, (size_t)r * sizeof dims[0]);
    memcpy(c.src_strides, ss, (size_t)r * sizeof ss[0]);
    memcpy(c.dst_strides, ds, (size_t)r * sizeof ds[0]);
    return osp_op_copy_strided(stream, &c);
}

/* ---- Transpose ------------------------------------------------------------
 */

/* The permutation of Transpose: the attribute, or reversed dims. */
static osp_error *transpose_perm(const onnx_node *node, int rank,
                                 int perm[OSP_MAX_DIMS]) {
    const int64_t *p;
    size_t n;
    osp_error *err = onnx_attr_ints(node, "perm", &p, &n);
    if (err)
        return err;
    if (!p) {
        for (int i = 0; i < rank; i++)
            perm[i] = rank - 1 - i;
        return NULL;
    }
    if (n != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'perm' has %zu values for rank %d", n,
                               rank);
    bool seen[OSP_MAX_DIMS] = {false};
    for (int i = 0; i < rank; i++) {
        int a;
        if ((err = onnx_axis(node, p[i], rank, &a)))
            return err;
        if (seen[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'perm' is not a permutation");
        seen[a] = true;
        perm[i] = a;
    }
    return NULL;
}

static osp_error *transpose_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *in = &ctx->inputs[0];
    int perm[OSP_MAX_DIMS];
    if ((err = onnx_want_movable(node, in->dtype, "input 0")) ||
        (err = transpose_perm(node, in->shape.rank, perm)))
        return err;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = in->shape.rank;
    for (int i = 0; i < out->rank; i++)
        out->dims[i] = in->shape.dims[perm[i]];
    ctx->outputs[0].dtype = in->dtype;
    return NULL;
}

static osp_error *transpose_run(onnx_run_ctx *ctx) {
    const onnx_desc *in = &ctx->in_desc[0];
    int perm[OSP_MAX_DIMS];
    osp_error *err = transpose_perm(ctx->node, in->shape.rank, perm);
    if (err)
        return err;
    int64_t in_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(&in->shape, in_strides);
    copy_box_args b = {.elem_size = elem_size(in),
                       .rank = in->shape.rank,
                       .src = ctx->in[0],
                       .dst = ctx->out[0]};
    onnx_contiguous_strides(&ctx->out_desc[0].shape, b.dst_strides);
    for (int i = 0; i < b.rank; i++) {
        b.dims[i] = in->shape.dims[perm[i]];
        b.src_strides[i] = in_strides[perm[i]];
    }
    return copy_box(ctx->stream, &b);
}

/* ---- Concat ---------------------------------------------------------------
 */

static osp_error *concat_axis(const onnx_node *node, int rank, int *axis) {
    if (!onnx_node_attr(node, "axis"))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'axis' is required");
    int64_t a;
    osp_error *err = onnx_attr_int(node, "axis", 0, &a);
    if (err)
        return err;
    if (rank == 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "cannot concatenate scalars");
    return onnx_axis(node, a, rank, axis);
}

static osp_error *concat_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *first = &ctx->inputs[0];
    int rank = first->shape.rank, axis;
    if ((err = onnx_want_movable(node, first->dtype, "input 0")) ||
        (err = concat_axis(node, rank, &axis)))
        return err;
    osp_shape out = first->shape;
    out.dims[axis] = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const onnx_desc *in = &ctx->inputs[i];
        if (!in->present)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input %zu is missing", i);
        if (in->dtype != first->dtype)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input %zu is %s, input 0 is %s", i,
                                   osp_datatype_wire_name(in->dtype),
                                   osp_datatype_wire_name(first->dtype));
        if (in->shape.rank != rank)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input %zu has rank %d, expected %d", i,
                                   in->shape.rank, rank);
        for (int d = 0; d < rank; d++)
            if (d != axis && in->shape.dims[d] != first->shape.dims[d])
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "input %zu has dim %d of %lld, expected "
                                       "%lld",
                                       i, d, (long long)in->shape.dims[d],
                                       (long long)first->shape.dims[d]);
        out.dims[axis] += in->shape.dims[axis];
    }
    ctx->outputs[0].dtype = first->dtype;
    ctx->outputs[0].shape = out;
    return onnx_check_shape(node, &out, first->dtype);
}

/* Each input into its slab of the output along the axis. */
static osp_error *concat_run(onnx_run_ctx *ctx) {
    const osp_shape *out = &ctx->out_desc[0].shape;
    int axis;
    osp_error *err = concat_axis(ctx->node, out->rank, &axis);
    if (err)
        return err;
    size_t es = elem_size(&ctx->out_desc[0]);
    int64_t out_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(out, out_strides);
    int64_t offset = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const osp_shape *in = &ctx->in_desc[i].shape;
        copy_box_args b = {.elem_size = es,
                           .rank = in->rank,
                           .src = ctx->in[i],
                           .dst = (uint8_t *)ctx->out[0] +
                                  (size_t)(offset * out_strides[axis]) * es};
        memcpy(b.dims, in->dims, sizeof in->dims);
        onnx_contiguous_strides(in, b.src_strides);
        memcpy(b.dst_strides, out_strides, sizeof out_strides);
        if ((err = copy_box(ctx->stream, &b)))
            return err;
        offset += in->dims[axis];
    }
    return NULL;
}

/* ---- Split ----------------------------------------------------------------
 */

/* How Split cuts its axis: explicit sizes (the attribute before opset 13,
 * input 1 from 13) or equal parts (ceil-sized with a smaller last one
 * from opset 18's num_outputs). */
typedef struct split_spec {
    int axis;
    const int64_t *sizes64; /* explicit sizes, or NULL */
    const int32_t *sizes32;
    int64_t chunk; /* equal parts: every part but maybe the last */
    int64_t dim;
    size_t n_parts;
} split_spec;

static int64_t split_size(const split_spec *s, size_t i) {
    if (s->sizes64)
        return s->sizes64[i];
    if (s->sizes32)
        return s->sizes32[i];
    int64_t left = s->dim - s->chunk * (int64_t)i;
    return left < s->chunk ? (left > 0 ? left : 0) : s->chunk;
}

static osp_error *split_plan(const onnx_node *node, size_t n_inputs,
                             const onnx_desc *inputs, size_t n_outputs,
                             split_spec *s) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    int64_t axis;
    if (!err)
        err = onnx_attr_int(node, "axis", 0, &axis);
    if (err)
        return err;
    const osp_shape *in = &inputs[0].shape;
    memset(s, 0, sizeof *s);
    if ((err = onnx_axis(node, axis, in->rank, &s->axis)))
        return err;
    s->dim = in->dims[s->axis];
    s->n_parts = n_outputs;
    size_t n_sizes = 0;
    bool explicit_sizes = false;
    if (node->opset < 13) {
        const int64_t *v;
        if ((err = onnx_attr_ints(node, "split", &v, &n_sizes)))
            return err;
        s->sizes64 = v;
        explicit_sizes = v != NULL;
    } else if (onnx_present(n_inputs, inputs, 1)) {
        const onnx_desc *d = &inputs[1];
        if (!d->host)
            return onnx_error_needs_values(node, 1);
        if (d->dtype == OSP_TYPE_INT64)
            s->sizes64 = d->host;
        else if (d->dtype == OSP_TYPE_INT32)
            s->sizes32 = d->host;
        else
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input 1 is %s, expected INT64",
                                   osp_datatype_wire_name(d->dtype));
        n_sizes = (size_t)onnx_shape_count(&d->shape);
        explicit_sizes = true;
    }
    int64_t num_outputs = 0;
    if (node->opset >= 18 &&
        (err = onnx_attr_int(node, "num_outputs", 0, &num_outputs)))
        return err;
    if (explicit_sizes) {
        if (n_sizes != n_outputs)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "split has %zu sizes for %zu outputs",
                                   n_sizes, n_outputs);
        int64_t sum = 0;
        for (size_t i = 0; i < n_sizes; i++) {
            int64_t v = split_size(s, i);
            if (v < 0 || v > s->dim - sum)
                return onnx_node_error(
                    node, OSP_ERROR_INVALID_ARG,
                    "split sizes do not add up to the axis's "
                    "%lld",
                    (long long)s->dim);
            sum += v;
        }
        if (sum != s->dim)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "split sizes add up to %lld, the axis has "
                                   "%lld",
                                   (long long)sum, (long long)s->dim);
        return NULL;
    }
    if (n_outputs == 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG, "no outputs");
    if (node->opset >= 18 && onnx_node_attr(node, "num_outputs")) {
        if (num_outputs <= 0 || (size_t)num_outputs != n_outputs)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'num_outputs' (%lld) must be the "
                                   "number of outputs (%zu)",
                                   (long long)num_outputs, n_outputs);
        s->chunk = (s->dim + (int64_t)n_outputs - 1) / (int64_t)n_outputs;
        if (s->chunk * ((int64_t)n_outputs - 1) >= s->dim && s->dim > 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "cannot split %lld into %zu parts",
                                   (long long)s->dim, n_outputs);
        return NULL;
    }
    if (s->dim % (int64_t)n_outputs != 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "the axis's %lld does not split into %zu equal "
                               "parts",
                               (long long)s->dim, n_outputs);
    s->chunk = s->dim / (int64_t)n_outputs;
    return NULL;
}

static osp_error *split_infer(onnx_infer_ctx *ctx) {
    split_spec s;
    osp_error *err =
        split_plan(ctx->node, ctx->n_inputs, ctx->inputs, ctx->n_outputs, &s);
    if (!err)
        err = onnx_want_movable(ctx->node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    for (size_t i = 0; i < ctx->n_outputs; i++) {
        if (!ctx->outputs[i].present)
            continue;
        ctx->outputs[i].dtype = ctx->inputs[0].dtype;
        ctx->outputs[i].shape = ctx->inputs[0].shape;
        ctx->outputs[i].shape.dims[s.axis] = split_size(&s, i);
    }
    return NULL;
}

static osp_error *split_run(onnx_run_ctx *ctx) {
    split_spec s;
    osp_error *err =
        split_plan(ctx->node, ctx->n_inputs, ctx->in_desc, ctx->n_outputs, &s);
    if (err)
        return err;
    const osp_shape *in = &ctx->in_desc[0].shape;
    size_t es = elem_size(&ctx->in_desc[0]);
    int64_t in_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(in, in_strides);
    int64_t offset = 0;
    for (size_t i = 0; i < ctx->n_outputs; i++) {
        int64_t part = split_size(&s, i);
        if (ctx->out[i]) {
            copy_box_args b = {.elem_size = es,
                               .rank = in->rank,
                               .src =
                                   (const uint8_t *)ctx->in[0] +
                                   (size_t)(offset * in_strides[s.axis]) * es,
                               .dst = ctx->out[i]};
            memcpy(b.dims, in->dims, sizeof in->dims);
            b.dims[s.axis] = part;
            memcpy(b.src_strides, in_strides, sizeof in_strides);
            onnx_contiguous_strides(&ctx->out_desc[i].shape, b.dst_strides);
            if ((err = copy_box(ctx->stream, &b)))
                return err;
        }
        offset += part;
    }
    return NULL;
}

/* ---- Slice ----------------------------------------------------------------
 */

/* Per axis of the input: where the slice starts, its step and length. */
typedef struct slice_plan_t {
    int64_t start[OSP_MAX_DIMS];
    int64_t step[OSP_MAX_DIMS];
    int64_t count[OSP_MAX_DIMS];
} slice_plan_t;

/* Reads Slice's starts/ends/axes/steps (attributes before opset 10,
 * inputs 1-4 from 10) and clamps them as the spec says. */
static osp_error *slice_plan(const onnx_node *node, size_t n_inputs,
                             const onnx_desc *inputs, slice_plan_t *p) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (err)
        return err;
    const osp_shape *in = &inputs[0].shape;
    int rank = in->rank;
    int64_t starts[OSP_MAX_DIMS], ends[OSP_MAX_DIMS], axes[OSP_MAX_DIMS],
        steps[OSP_MAX_DIMS];
    size_t n_starts, n_ends, n_axes = 0, n_steps = 0;
    bool have_axes = false, have_steps = false;
    if (node->opset < 10) {
        const int64_t *s, *e, *a;
        if ((err = onnx_attr_ints(node, "starts", &s, &n_starts)) ||
            (err = onnx_attr_ints(node, "ends", &e, &n_ends)) ||
            (err = onnx_attr_ints(node, "axes", &a, &n_axes)))
            return err;
        if (!s || !e)
            return onnx_node_error(
                node, OSP_ERROR_INVALID_ARG,
                "attributes 'starts' and 'ends' are required");
        if (n_starts > OSP_MAX_DIMS || n_ends > OSP_MAX_DIMS ||
            n_axes > OSP_MAX_DIMS)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "more than %d axes", OSP_MAX_DIMS);
        memcpy(starts, s, n_starts * sizeof *s);
        memcpy(ends, e, n_ends * sizeof *e);
        if (a) {
            memcpy(axes, a, n_axes * sizeof *a);
            have_axes = true;
        }
    } else {
        if ((err = onnx_required_input(node, n_inputs, inputs, 1)) ||
            (err = onnx_required_input(node, n_inputs, inputs, 2)) ||
            (err = onnx_read_ints(node, 1, &inputs[1], starts, OSP_MAX_DIMS,
                                  &n_starts)) ||
            (err = onnx_read_ints(node, 2, &inputs[2], ends, OSP_MAX_DIMS,
                                  &n_ends)))
            return err;
        if (onnx_present(n_inputs, inputs, 3)) {
            if ((err = onnx_read_ints(node, 3, &inputs[3], axes, OSP_MAX_DIMS,
                                      &n_axes)))
                return err;
            have_axes = true;
        }
        if (onnx_present(n_inputs, inputs, 4)) {
            if ((err = onnx_read_ints(node, 4, &inputs[4], steps, OSP_MAX_DIMS,
                                      &n_steps)))
                return err;
            have_steps = true;
        }
    }
    if (n_ends != n_starts || (have_axes && n_axes != n_starts) ||
        (have_steps && n_steps != n_starts))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "starts, ends, axes and steps have different "
                               "lengths");
    if (n_starts > (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "%zu axes for rank %d", n_starts, rank);
    for (int d = 0; d < rank; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = in->dims[d];
    }
    bool seen[OSP_MAX_DIMS] = {false};
    for (size_t i = 0; i < n_starts; i++) {
        int a;
        if ((err = onnx_axis(node, have_axes ? axes[i] : (int64_t)i, rank, &a)))
            return err;
        if (seen[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "axis %d is given twice", a);
        seen[a] = true;
        int64_t dim = in->dims[a], s = starts[i], e = ends[i];
        int64_t step = have_steps ? steps[i] : 1;
        if (step == 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "step of axis %d is 0", a);
        if (s < 0)
            s += dim;
        if (e < 0)
            e += dim;
        uint64_t span, ustep;
        if (step > 0) {
            s = s < 0 ? 0 : (s > dim ? dim : s);
            e = e < 0 ? 0 : (e > dim ? dim : e);
            span = e > s ? (uint64_t)(e - s) : 0;
            ustep = (uint64_t)step;
        } else {
            s = s < 0 ? 0 : (s > dim - 1 ? dim - 1 : s);
            e = e < -1 ? -1 : (e > dim - 1 ? dim - 1 : e);
            span = s > e ? (uint64_t)(s - e) : 0;
            ustep = (uint64_t)0 - (uint64_t)step;
        }
        p->start[a] = s;
        p->step[a] = step;
        p->count[a] = dim == 0 ? 0 : (int64_t)((span + ustep - 1) / ustep);
    }
    return NULL;
}

static osp_error *slice_infer(onnx_infer_ctx *ctx) {
    slice_plan_t p;
    osp_error *err = slice_plan(ctx->node, ctx->n_inputs, ctx->inputs, &p);
    if (!err)
        err = onnx_want_movable(ctx->node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = ctx->inputs[0].shape.rank;
    memcpy(out->dims, p.count, (size_t)out->rank * sizeof p.count[0]);
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return NULL;
}

/* The source view starts at the first picked element and walks each axis
 * by stride * step (negative for reversed slices). */
static osp_error *slice_run(onnx_run_ctx *ctx) {
    slice_plan_t p;
    osp_error *err = slice_plan(ctx->node, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    const osp_shape *in = &ctx->in_desc[0].shape;
    size_t es = elem_size(&ctx->in_desc[0]);
    int64_t in_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(in, in_strides);
    int64_t offset = 0;
    copy_box_args b = {.elem_size = es, .rank = in->rank, .dst = ctx->out[0]};
    onnx_contiguous_strides(&ctx->out_desc[0].shape, b.dst_strides);
    for (int d = 0; d < in->rank; d++) {
        if (p.count[d] == 0)
            return NULL;
        offset += p.start[d] * in_strides[d];
        b.dims[d] = p.count[d];
        b.src_strides[d] =
            p.count[d] > 1 ? in_strides[d] * p.step[d] : in_strides[d];
    }
    b.src = (const uint8_t *)ctx->in[0] + (size_t)offset * es;
    return copy_box(ctx->stream, &b);
}

/* ---- Gather ---------------------------------------------------------------
 */

static osp_error *gather_axis(const onnx_node *node, int rank, int *axis) {
    int64_t a;
    osp_error *err = onnx_attr_int(node, "axis", 0, &a);
    if (err)
        return err;
    return onnx_axis(node, a, rank, axis);
}

static osp_error *index_dtype(const onnx_node *node, const onnx_desc *d,
                              size_t input) {
    if (d->dtype != OSP_TYPE_INT64 && d->dtype != OSP_TYPE_INT32)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu is %s, expected INT64 or INT32",
                               input, osp_datatype_wire_name(d->dtype));
    return NULL;
}

/* What Gather and GatherElements check alike: data (input 0) of a
 * fixed-size dtype or STRING, indices (input 1) INT64 or INT32, and *axis from
 * the attribute, within data's rank. */
static osp_error *gather_check_inputs(const onnx_node *node, size_t n_inputs,
                                      const onnx_desc *inputs, int *axis) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (!err)
        err = onnx_want_movable(node, inputs[0].dtype, "input 0");
    if (!err)
        err = index_dtype(node, &inputs[1], 1);
    if (!err)
        err = gather_axis(node, inputs[0].shape.rank, axis);
    return err;
}

/* When the indices are known while planning, an index outside
 * [-len, len) is an INVALID_ARG naming the node (the device would only
 * catch it at run, and a GPU not at all). */
static osp_error *check_known_indices(const onnx_node *node,
                                      const onnx_desc *idx, int64_t len) {
    if (!idx->host)
        return NULL;
    int64_t n = onnx_shape_count(&idx->shape);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx->dtype == OSP_TYPE_INT64
                        ? ((const int64_t *)idx->host)[i]
                        : ((const int32_t *)idx->host)[i];
        if (v < -len || v >= len)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "index %lld is out of range for an axis of "
                                   "%lld",
                                   (long long)v, (long long)len);
    }
    return NULL;
}

static osp_error *gather_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    int axis;
    osp_error *err =
        gather_check_inputs(node, ctx->n_inputs, ctx->inputs, &axis);
    if (err)
        return err;
    const onnx_desc *data = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int rank = data->shape.rank - 1 + idx->shape.rank;
    if (rank > OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "output rank %d is over the limit of %d", rank,
                               OSP_MAX_DIMS);
    if ((err = check_known_indices(node, idx, data->shape.dims[axis])))
        return err;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = 0;
    for (int d = 0; d < axis; d++)
        out->dims[out->rank++] = data->shape.dims[d];
    for (int d = 0; d < idx->shape.rank; d++)
        out->dims[out->rank++] = idx->shape.dims[d];
    for (int d = axis + 1; d < data->shape.rank; d++)
        out->dims[out->rank++] = data->shape.dims[d];
    ctx->outputs[0].dtype = data->dtype;
    return onnx_check_shape(node, out, data->dtype);
}

static osp_error *gather_run(onnx_run_ctx *ctx) {
    const onnx_desc *data = &ctx->in_desc[0], *idx = &ctx->in_desc[1];
    int axis;
    osp_error *err = gather_axis(ctx->node, data->shape.rank, &axis);
    if (err)
        return err;
    osp_gather_args g = {
        .elem_size = elem_size(data),
        .data = ctx->in[0],
        .outer = onnx_shape_span(&data->shape, 0, axis),
        .axis_len = data->shape.dims[axis],
        .inner = onnx_shape_span(&data->shape, axis + 1, data->shape.rank),
        .index_dtype = idx->dtype,
        .indices = ctx->in[1],
        .n_indices = onnx_shape_count(&idx->shape),
        .out = ctx->out[0]};
    if (onnx_shape_count(&ctx->out_desc[0].shape) == 0)
        return NULL;
    return osp_op_gather(ctx->stream, &g);
}

/* ---- GatherElements -------------------------------------------------------
 */

/* GatherElements as one flat Gather: out[p] = data_flat[f(p)] with
 * f(p) = (idx[p] mod len) * stride_axis + sum over the other axes d of
 * p_d * stride_d. f is built on the device: the index term by MOD and MUL
 * with scalars filled into the workspace, then one broadcast ADD per
 * other axis of an arithmetic sequence (an exclusive cumsum of its
 * stride). Indices outside [-len, len) wrap instead of failing, unless
 * they are known while planning. Workspace: two INT64 buffers of the
 * output's size, two of the longest axis, two scalars. */
typedef struct gather_elements_layout {
    size_t buf_bytes, vec_bytes;
} gather_elements_layout;

static gather_elements_layout gather_elements_ws(const osp_shape *idx) {
    int64_t longest = 1;
    for (int d = 0; d < idx->rank; d++)
        if (idx->dims[d] > longest)
            longest = idx->dims[d];
    gather_elements_layout l = {
        .buf_bytes = onnx_align64((size_t)onnx_shape_count(idx) * 8),
        .vec_bytes = onnx_align64((size_t)longest * 8)};
    return l;
}

static osp_error *gather_elements_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    int axis;
    osp_error *err =
        gather_check_inputs(node, ctx->n_inputs, ctx->inputs, &axis);
    if (err)
        return err;
    const onnx_desc *data = &ctx->inputs[0], *idx = &ctx->inputs[1];
    if (idx->shape.rank != data->shape.rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input 1 has rank %d, expected %d",
                               idx->shape.rank, data->shape.rank);
    for (int d = 0; d < idx->shape.rank; d++)
        if (d != axis && idx->shape.dims[d] > data->shape.dims[d])
            return onnx_node_error(
                node, OSP_ERROR_INVALID_ARG,
                "input 1 has dim %d of %lld, over the data's "
                "%lld",
                d, (long long)idx->shape.dims[d],
                (long long)data->shape.dims[d]);
    if ((err = check_known_indices(node, idx, data->shape.dims[axis])))
        return err;
    if (onnx_shape_count(&idx->shape) > 0 && data->shape.dims[axis] == 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "indices into an empty axis");
    ctx->outputs[0].dtype = data->dtype;
    ctx->outputs[0].shape = idx->shape;
    gather_elements_layout l = gather_elements_ws(&idx->shape);
    ctx->workspace_bytes = 2 * l.buf_bytes + 2 * l.vec_bytes + 128;
    return NULL;
}

static osp_error *gather_elements_run(onnx_run_ctx *ctx) {
    const onnx_desc *data = &ctx->in_desc[0], *idx = &ctx->in_desc[1];
    const osp_shape *is = &idx->shape;
    int64_t n = onnx_shape_count(is);
    if (n == 0)
        return NULL;
    int axis;
    osp_error *err = gather_axis(ctx->node, data->shape.rank, &axis);
    if (err)
        return err;
    gather_elements_layout l = gather_elements_ws(is);
    uint8_t *ws = ctx->workspace;
    void *buf[2] = {ws, ws + l.buf_bytes};
    void *vec = ws + 2 * l.buf_bytes, *seq = ws + 2 * l.buf_bytes + l.vec_bytes;
    int64_t *len_scalar = (int64_t *)(ws + 2 * l.buf_bytes + 2 * l.vec_bytes);
    int64_t *stride_scalar = len_scalar + 8;
    int64_t data_strides[OSP_MAX_DIMS], idx_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(&data->shape, data_strides);
    onnx_contiguous_strides(is, idx_strides);
    if ((err = onnx_fill_i64(ctx->stream, len_scalar, 1,
                             data->shape.dims[axis])) ||
        (err =
             onnx_fill_i64(ctx->stream, stride_scalar, 1, data_strides[axis])))
        return err;
    const void *indices = ctx->in[1];
    int cur = 0;
    if (idx->dtype != OSP_TYPE_INT64) {
        if ((err = osp_op_cast(ctx->stream, indices, idx->dtype, buf[1],
                               OSP_TYPE_INT64, (size_t)n)))
            return err;
        indices = buf[1];
    }
    if ((err =
             onnx_binary_flat(ctx->stream, OSP_BINARY_ND_MOD, OSP_TYPE_INT64,
                              indices, false, len_scalar, true, buf[cur], n)) ||
        (err = onnx_binary_flat(ctx->stream, OSP_BINARY_ND_MUL, OSP_TYPE_INT64,
                                buf[cur], false, stride_scalar, true,
                                buf[1 - cur], n)))
        return err;
    cur = 1 - cur;
    for (int d = 0; d < is->rank; d++) {
        if (d == axis || is->dims[d] <= 1)
            continue;
        if ((err = onnx_iota_i64(ctx->stream, vec, seq, is->dims[d],
                                 data_strides[d])))
            return err;
        osp_binary_nd_args add = {.op = OSP_BINARY_ND_ADD,
                                  .dtype = OSP_TYPE_INT64,
                                  .rank = is->rank,
                                  .a = buf[cur],
                                  .b = seq,
                                  .out = buf[1 - cur]};
        memcpy(add.dims, is->dims, sizeof is->dims);
        memcpy(add.a_strides, idx_strides, sizeof idx_strides);
        add.b_strides[d] = 1;
        if ((err = osp_op_binary_nd(ctx->stream, &add)))
            return err;
        cur = 1 - cur;
    }
    osp_gather_args g = {.elem_size = elem_size(data),
                         .data = ctx->in[0],
                         .outer = 1,
                         .axis_len = onnx_shape_count(&data->shape),
                         .inner = 1,
                         .index_dtype = OSP_TYPE_INT64,
                         .indices = buf[cur],
                         .n_indices = n,
                         .out = ctx->out[0]};
    return osp_op_gather(ctx->stream, &g);
}

/* ---- Expand ---------------------------------------------------------------
 */

static osp_error *expand_shape(const onnx_node *node, size_t n_inputs,
                               const onnx_desc *inputs, osp_shape *out) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    int64_t dims[OSP_MAX_DIMS];
    size_t n;
    if (!err)
        err = onnx_read_ints(node, 1, &inputs[1], dims, OSP_MAX_DIMS, &n);
    if (err)
        return err;
    osp_shape want = {.rank = (int)n};
    for (size_t i = 0; i < n; i++) {
        if (dims[i] < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shape has a negative dimension %lld",
                                   (long long)dims[i]);
        want.dims[i] = dims[i];
    }
    return onnx_broadcast_shape(node, &inputs[0].shape, &want, out);
}

static osp_error *expand_infer(onnx_infer_ctx *ctx) {
    osp_error *err = expand_shape(ctx->node, ctx->n_inputs, ctx->inputs,
                                  &ctx->outputs[0].shape);
    if (!err)
        err = onnx_want_movable(ctx->node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return onnx_check_shape(ctx->node, &ctx->outputs[0].shape,
                            ctx->inputs[0].dtype);
}

static osp_error *expand_run(onnx_run_ctx *ctx) {
    const osp_shape *out = &ctx->out_desc[0].shape;
    copy_box_args b = {.elem_size = elem_size(&ctx->in_desc[0]),
                       .rank = out->rank,
                       .src = ctx->in[0],
                       .dst = ctx->out[0]};
    memcpy(b.dims, out->dims, sizeof out->dims);
    onnx_broadcast_strides(&ctx->in_desc[0].shape, out, b.src_strides);
    onnx_contiguous_strides(out, b.dst_strides);
    return copy_box(ctx->stream, &b);
}

/* ---- Tile -----------------------------------------------------------------
 */

static osp_error *tile_repeats(const onnx_node *node, size_t n_inputs,
                               const onnx_desc *inputs,
                               int64_t reps[OSP_MAX_DIMS]) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    size_t n;
    if (!err)
        err = onnx_read_ints(node, 1, &inputs[1], reps, OSP_MAX_DIMS, &n);
    if (err)
        return err;
    int rank = inputs[0].shape.rank;
    if (n != (size_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "repeats has %zu values for rank %d", n, rank);
    for (int d = 0; d < rank; d++)
        if (reps[d] < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "repeats has a negative value %lld",
                                   (long long)reps[d]);
    return NULL;
}

static osp_error *tile_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    int64_t reps[OSP_MAX_DIMS];
    osp_error *err = tile_repeats(node, ctx->n_inputs, ctx->inputs, reps);
    if (!err)
        err = onnx_want_movable(node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    const osp_shape *in = &ctx->inputs[0].shape;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = in->rank;
    for (int d = 0; d < in->rank; d++) {
        if (in->dims[d] != 0 && reps[d] > INT64_MAX / in->dims[d])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "output has too many elements");
        out->dims[d] = in->dims[d] * reps[d];
    }
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return onnx_check_shape(node, out, ctx->inputs[0].dtype);
}

/* The output viewed as [r0, d0, r1, d1, ...] (repeats of 1 left out) read
 * from the input with stride 0 on the repeat dims. */
static osp_error *tile_run(onnx_run_ctx *ctx) {
    int64_t reps[OSP_MAX_DIMS];
    osp_error *err = tile_repeats(ctx->node, ctx->n_inputs, ctx->in_desc, reps);
    if (err)
        return err;
    const osp_shape *in = &ctx->in_desc[0].shape;
    int64_t in_strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(in, in_strides);
    copy_box_args b = {.elem_size = elem_size(&ctx->in_desc[0]),
                       .src = ctx->in[0],
                       .dst = ctx->out[0]};
    for (int d = 0; d < in->rank; d++) {
        if (reps[d] != 1) {
            b.dims[b.rank] = reps[d];
            b.src_strides[b.rank++] = 0;
        }
        b.dims[b.rank] = in->dims[d];
        b.src_strides[b.rank++] = in_strides[d];
    }
    int64_t s = 1;
    for (int i = b.rank - 1; i >= 0; i--) {
        b.dst_strides[i] = s;
        s *= b.dims[i];
    }
    return copy_box(ctx->stream, &b);
}

/* ---- Pad ------------------------------------------------------------------
 */

typedef struct pad_state {
    osp_pad_mode mode;
} pad_state;

static osp_error *pad_prepare(const onnx_node *node, void **state) {
    const char *mode;
    osp_error *err = onnx_attr_string(node, "mode", "constant", &mode);
    if (err)
        return err;
    pad_state s;
    if (strcmp(mode, "constant") == 0)
        s.mode = OSP_PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        s.mode = OSP_PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        s.mode = OSP_PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0)
        s.mode = OSP_PAD_WRAP;
    else
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute 'mode' = '%s' is not supported",
                               mode);
    pad_state *p = malloc(sizeof *p);
    if (!p)
        return osp_error_out_of_memory();
    *p = s;
    *state = p;
    return NULL;
}

/* Pad's begin/end pads per axis and the constant's bytes: attributes
 * pads and value before opset 11; inputs pads, constant_value and (from
 * opset 18) axes after. */
static osp_error *pad_plan(const onnx_node *node, const pad_state *st,
                           size_t n_inputs, const onnx_desc *inputs,
                           osp_pad_args *p) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &inputs[0];
    int rank = x->shape.rank;
    memset(p, 0, sizeof *p);
    p->mode = st->mode;
    p->elem_size = elem_size(x);
    p->rank = rank;
    memcpy(p->in_dims, x->shape.dims, sizeof p->in_dims);
    int64_t pads[2 * OSP_MAX_DIMS];
    size_t n_pads;
    int64_t axes[OSP_MAX_DIMS];
    size_t n_axes = (size_t)rank;
    for (int d = 0; d < rank; d++)
        axes[d] = d;
    if (node->opset < 11) {
        const int64_t *v;
        float value;
        if ((err = onnx_attr_ints(node, "pads", &v, &n_pads)) ||
            (err = onnx_attr_float(node, "value", 0.0f, &value)))
            return err;
        if (!v)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'pads' is required");
        if (n_pads > 2 * OSP_MAX_DIMS)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'pads' has %zu values, expected "
                                   "%d",
                                   n_pads, 2 * rank);
        memcpy(pads, v, n_pads * sizeof *v);
        onnx_number_bytes(x->dtype, value, p->value);
    } else {
        if ((err = onnx_required_input(node, n_inputs, inputs, 1)) ||
            (err = onnx_read_ints(node, 1, &inputs[1], pads, 2 * OSP_MAX_DIMS,
                                  &n_pads)))
            return err;
        if (onnx_present(n_inputs, inputs, 2)) {
            const onnx_desc *v = &inputs[2];
            if (!v->host)
                return onnx_error_needs_values(node, 2);
            if (v->dtype != x->dtype)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "input 2 is %s, input 0 is %s",
                                       osp_datatype_wire_name(v->dtype),
                                       osp_datatype_wire_name(x->dtype));
            if (onnx_shape_count(&v->shape) > 0)
                memcpy(p->value, v->host, p->elem_size);
        }
        if (node->opset >= 18 && onnx_present(n_inputs, inputs, 3) &&
            (err = onnx_read_ints(node, 3, &inputs[3], axes, OSP_MAX_DIMS,
                                  &n_axes)))
            return err;
    }
    if (n_pads != 2 * n_axes)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "pads has %zu values, expected %zu", n_pads,
                               2 * n_axes);
    bool seen[OSP_MAX_DIMS] = {false};
    for (size_t i = 0; i < n_axes; i++) {
        int a;
        if ((err = onnx_axis(node, axes[i], rank, &a)))
            return err;
        if (seen[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "axis %d is given twice", a);
        seen[a] = true;
        p->pad_begin[a] = pads[i];
        p->pad_end[a] = pads[i + n_axes];
    }
    for (int d = 0; d < rank; d++) {
        int64_t dim = p->in_dims[d], b = p->pad_begin[d], e = p->pad_end[d];
        if (b < -dim || e < -dim || dim + b + e < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "pads %lld, %lld on axis %d of %lld leave a "
                                   "negative size",
                                   (long long)b, (long long)e, d,
                                   (long long)dim);
        if (b > INT64_MAX / 4 || e > INT64_MAX / 4)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "pads on axis %d are too large", d);
        /* Which dims the non-constant modes read from: what remains after
         * cropping. */
        int64_t kept = dim + (b < 0 ? b : 0) + (e < 0 ? e : 0);
        int64_t most = b > e ? b : e;
        if (p->mode != OSP_PAD_CONSTANT && most > 0 && kept <= 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "cannot pad an empty axis %d in this mode",
                                   d);
        if (p->mode == OSP_PAD_REFLECT && most >= kept && most > 0)
            return onnx_node_error(
                node, OSP_ERROR_INVALID_ARG,
                "reflect pads of axis %d must be smaller than "
                "its size %lld",
                d, (long long)kept);
    }
    return NULL;
}

static osp_error *pad_infer(onnx_infer_ctx *ctx) {
    osp_pad_args p;
    osp_error *err =
        pad_plan(ctx->node, ctx->state, ctx->n_inputs, ctx->inputs, &p);
    if (!err)
        err = onnx_want_fixed_size(ctx->node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = p.rank;
    for (int d = 0; d < p.rank; d++)
        out->dims[d] = p.in_dims[d] + p.pad_begin[d] + p.pad_end[d];
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return onnx_check_shape(ctx->node, out, ctx->inputs[0].dtype);
}

static osp_error *pad_run(onnx_run_ctx *ctx) {
    osp_pad_args p;
    osp_error *err =
        pad_plan(ctx->node, ctx->state, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    p.x = ctx->in[0];
    p.y = ctx->out[0];
    return osp_op_pad(ctx->stream, &p);
}

/* ---- DepthToSpace, SpaceToDepth -------------------------------------------
 */

/* Block size and (for DepthToSpace) whether the mode is CRD. */
static osp_error *block_params(const onnx_node *node, int64_t *block,
                               bool *crd) {
    osp_error *err = onnx_attr_int(node, "blocksize", 0, block);
    if (err)
        return err;
    if (*block <= 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'blocksize' must be positive");
    *crd = false;
    if (strcmp(node->op_type, "DepthToSpace") == 0 && node->opset >= 11) {
        const char *mode;
        if ((err = onnx_attr_string(node, "mode", "DCR", &mode)))
            return err;
        if (strcmp(mode, "CRD") == 0)
            *crd = true;
        else if (strcmp(mode, "DCR") != 0)
            return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                   "attribute 'mode' = '%s' is not supported",
                                   mode);
    }
    return NULL;
}

static osp_error *depth_space_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t b;
    bool crd;
    if (!err)
        err = block_params(node, &b, &crd);
    if (!err)
        err = onnx_want_fixed_size(node, ctx->inputs[0].dtype, "input 0");
    if (err)
        return err;
    const osp_shape *in = &ctx->inputs[0].shape;
    if (in->rank != 4)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input 0 has rank %d, expected 4", in->rank);
    osp_shape out = *in;
    if (b > (int64_t)1 << 31)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'blocksize' is too large");
    if (strcmp(node->op_type, "DepthToSpace") == 0) {
        if (in->dims[1] % (b * b) != 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "channels %lld are not a multiple of "
                                   "blocksize^2 = %lld",
                                   (long long)in->dims[1], (long long)(b * b));
        out.dims[1] = in->dims[1] / (b * b);
        if (in->dims[2] > INT64_MAX / b || in->dims[3] > INT64_MAX / b)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "output is too large");
        out.dims[2] = in->dims[2] * b;
        out.dims[3] = in->dims[3] * b;
    } else {
        if (in->dims[2] % b != 0 || in->dims[3] % b != 0)
            return onnx_node_error(
                node, OSP_ERROR_INVALID_ARG,
                "height %lld and width %lld must be multiples "
                "of blocksize %lld",
                (long long)in->dims[2], (long long)in->dims[3], (long long)b);
        if (in->dims[1] > INT64_MAX / (b * b))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "output is too large");
        out.dims[1] = in->dims[1] * b * b;
        out.dims[2] = in->dims[2] / b;
        out.dims[3] = in->dims[3] / b;
    }
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = out;
    return onnx_check_shape(node, &out, ctx->inputs[0].dtype);
}

/* DepthToSpace writes the output as [N, C', H, b, W, b] (contiguous) from
 * the input viewed as [N, b, b, C', H, W] (DCR) or [N, C', b, b, H, W]
 * (CRD); SpaceToDepth writes [N, b, b, C, H', W'] from the input's
 * [N, C, H', b, W', b]. */
static osp_error *depth_space_run(onnx_run_ctx *ctx) {
    int64_t b;
    bool crd;
    osp_error *err = block_params(ctx->node, &b, &crd);
    if (err)
        return err;
    const osp_shape *in = &ctx->in_desc[0].shape;
    int64_t n = in->dims[0], c = in->dims[1], h = in->dims[2], w = in->dims[3];
    copy_box_args box = {.elem_size = elem_size(&ctx->in_desc[0]),
                         .rank = 6,
                         .src = ctx->in[0],
                         .dst = ctx->out[0]};
    if (strcmp(ctx->node->op_type, "DepthToSpace") == 0) {
        int64_t co = c / (b * b);
        int64_t dims[6] = {n, co, h, b, w, b};
        /* strides of input dims n, c', h, b1, w, b2 */
        int64_t s_c = h * w, s_b1, s_b2;
        if (crd) {
            s_c = b * b * h * w;
            s_b1 = b * h * w;
            s_b2 = h * w;
        } else {
            s_b1 = b * co * h * w;
            s_b2 = co * h * w;
        }
        int64_t src[6] = {c * h * w, s_c, w, s_b1, 1, s_b2};
        memcpy(box.dims, dims, sizeof dims);
        memcpy(box.src_strides, src, sizeof src);
    } else {
        int64_t ho = h / b, wo = w / b;
        int64_t dims[6] = {n, b, b, c, ho, wo};
        int64_t src[6] = {c * h * w, w, 1, h * w, b * w, b};
        memcpy(box.dims, dims, sizeof dims);
        memcpy(box.src_strides, src, sizeof src);
    }
    int64_t s = 1;
    for (int i = 5; i >= 0; i--) {
        box.dst_strides[i] = s;
        s *= box.dims[i];
    }
    return copy_box(ctx->stream, &box);
}

/* ---- the family -----------------------------------------------------------
 */

#define USES(...)                                                              \
    { __VA_ARGS__, OSP_OP_KIND_COUNT_ }

static const onnx_op movement_ops[] = {
    {.op_type = "Transpose",
     .domain = "",
     .since = 7,
     .infer = transpose_infer,
     .run = transpose_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Concat",
     .domain = "",
     .since = 7,
     .infer = concat_infer,
     .run = concat_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Split",
     .domain = "",
     .since = 7,
     .infer = split_infer,
     .run = split_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Slice",
     .domain = "",
     .since = 7,
     .infer = slice_infer,
     .run = slice_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Gather",
     .domain = "",
     .since = 7,
     .infer = gather_infer,
     .run = gather_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_GATHER)},
    {.op_type = "GatherElements",
     .domain = "",
     .since = 11,
     .infer = gather_elements_infer,
     .run = gather_elements_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_FILL, OSP_OP_CAST, OSP_OP_BINARY_ND, OSP_OP_CUMSUM,
                  OSP_OP_GATHER)},
    {.op_type = "Expand",
     .domain = "",
     .since = 8,
     .infer = expand_infer,
     .run = expand_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Tile",
     .domain = "",
     .since = 7,
     .infer = tile_infer,
     .run = tile_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "Pad",
     .domain = "",
     .since = 7,
     .prepare = pad_prepare,
     .free = free,
     .infer = pad_infer,
     .run = pad_run,
     .uses = USES(OSP_OP_PAD)},
    {.op_type = "DepthToSpace",
     .domain = "",
     .since = 7,
     .infer = depth_space_infer,
     .run = depth_space_run,
     .uses = USES(OSP_OP_COPY_STRIDED)},
    {.op_type = "SpaceToDepth",
     .domain = "",
     .since = 7,
     .infer = depth_space_infer,
     .run = depth_space_run,
     .uses = USES(OSP_OP_COPY_STRIDED)},
};

const onnx_op_family onnx_ops_movement_family = {
    .ops = movement_ops,
    .n_ops = sizeof movement_ops / sizeof movement_ops[0],
};

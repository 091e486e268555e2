/*
 * Reductions and selections along axes: the ten Reduce* ops, ArgMax and
 * ArgMin, TopK and CumSum. Each views its input as [outer, n, inner]
 * around the axes it works on; Reduce* over axes that are not adjacent in
 * memory first transposes (copy_strided) the input into the workspace so
 * that they are, then reduces once.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_math.h"

/* ---- Reduce* ------------------------------------------------------------ */

typedef struct reduce_state {
    osp_reduce_op op;
    bool keepdims;
    bool noop_with_empty_axes;
    bool axes_from_input; /* ReduceSum from opset 13, the others from 18 */
    size_t n_axes;        /* the attribute's, when !axes_from_input */
    int64_t axes[OSP_MAX_DIMS];
} reduce_state;

static const struct {
    const char *op_type;
    osp_reduce_op op;
} reduce_names[] = {
    {"ReduceSum", OSP_REDUCE_SUM},
    {"ReduceMean", OSP_REDUCE_MEAN},
    {"ReduceMax", OSP_REDUCE_MAX},
    {"ReduceMin", OSP_REDUCE_MIN},
    {"ReduceProd", OSP_REDUCE_PROD},
    {"ReduceL1", OSP_REDUCE_L1},
    {"ReduceL2", OSP_REDUCE_L2},
    {"ReduceLogSum", OSP_REDUCE_LOG_SUM},
    {"ReduceLogSumExp", OSP_REDUCE_LOG_SUM_EXP},
    {"ReduceSumSquare", OSP_REDUCE_SUM_SQUARE},
};

osp_error *onnx_math__reduce_prepare(const onnx_node *node, void **state) {
    reduce_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    size_t i = 0;
    while (i < sizeof reduce_names / sizeof reduce_names[0] &&
           strcmp(reduce_names[i].op_type, node->op_type) != 0)
        i++;
    if (i == sizeof reduce_names / sizeof reduce_names[0]) {
        err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                              "not a reduction this runtime knows");
        goto out;
    }
    st->op = reduce_names[i].op;
    st->axes_from_input =
        node->opset >= 18 || (st->op == OSP_REDUCE_SUM && node->opset >= 13);
    int64_t keepdims, noop = 0;
    if ((err = onnx_attr_int(node, "keepdims", 1, &keepdims)) != NULL)
        goto out;
    st->keepdims = keepdims != 0;
    if (st->axes_from_input) {
        if ((err = onnx_attr_int(node, "noop_with_empty_axes", 0, &noop)) !=
            NULL)
            goto out;
    } else {
        const int64_t *axes;
        size_t n;
        if ((err = onnx_attr_ints(node, "axes", &axes, &n)) != NULL)
            goto out;
        if (n > OSP_MAX_DIMS) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'axes' has %zu values, at "
                                  "most %d expected",
                                  n, OSP_MAX_DIMS);
            goto out;
        }
        st->n_axes = n;
        if (n)
            memcpy(st->axes, axes, n * sizeof(int64_t));
    }
    st->noop_with_empty_axes = noop != 0;
    *state = st;
    return NULL;
out:
    free(st);
    return err;
}

/* How one reduction runs: an identity copy (no axes, noop), or one
 * osp_op_reduce on [outer, n, inner], first transposing the input into
 * the workspace as [kept dims..., reduced dims...] when the reduced axes
 * are not one block in memory. */
typedef struct reduce_plan {
    osp_shape out;
    bool identity;
    bool transpose;
    osp_copy_strided_args copy; /* src, dst set at run */
    int64_t outer, n, inner;
    size_t workspace;
} reduce_plan;

/* Plans a reduction of a contiguous tensor of `in` over the axes marked in
 * `reduced` (of in->rank). Dims of 1 are dropped before looking at the
 * layout; the rest merge into runs of kept or reduced dims. */
static void plan_reduce_axes(const osp_shape *in, const bool *reduced,
                             size_t elem_size, reduce_plan *p) {
    int64_t strides[OSP_MAX_DIMS];
    onnx_contiguous_strides(in, strides);
    int64_t count = onnx_shape_count(in);
    int64_t dims[OSP_MAX_DIMS], st[OSP_MAX_DIMS];
    bool red[OSP_MAX_DIMS];
    int n = 0;
    int64_t kept = 1, nred = 1;
    for (int i = 0; i < in->rank; i++) {
        if (reduced[i])
            nred *= in->dims[i];
        else
            kept *= in->dims[i];
        if (in->dims[i] == 1)
            continue;
        if (n > 0 && red[n - 1] == reduced[i]) {
            dims[n - 1] *= in->dims[i]; /* contiguous: always merges */
            st[n - 1] = strides[i];
            continue;
        }
        dims[n] = in->dims[i];
        st[n] = strides[i];
        red[n] = reduced[i];
        n++;
    }
    p->transpose = false;
    p->workspace = 0;
    int red_runs = 0;
    for (int i = 0; i < n; i++)
        red_runs += red[i];
    if (count == 0 || red_runs <= 1) {
        /* One block (or none, or nothing to read): [outer, n, inner]. */
        int64_t outer = 1, inner = 1;
        int i = 0;
        for (; i < n && !red[i]; i++)
            outer *= dims[i];
        for (i++; i < n; i++)
            inner *= dims[i];
        if (count == 0) {
            outer = kept;
            inner = 1;
        }
        p->outer = outer;
        p->n = nred;
        p->inner = inner;
        return;
    }
    /* Gather kept runs first, then reduced runs. */
    osp_copy_strided_args *c = &p->copy;
    memset(c, 0, sizeof *c);
    c->elem_size = elem_size;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (red[i] == (pass == 1)) {
                c->dims[c->rank] = dims[i];
                c->src_strides[c->rank] = st[i];
                c->rank++;
            }
    osp_shape s = {.rank = c->rank};
    memcpy(s.dims, c->dims, sizeof s.dims);
    onnx_contiguous_strides(&s, c->dst_strides);
    p->transpose = true;
    p->workspace = onnx_align64((size_t)count * elem_size);
    p->outer = kept;
    p->n = nred;
    p->inner = 1;
}

static bool reduce_int_ok(osp_reduce_op op) {
    return op == OSP_REDUCE_SUM || op == OSP_REDUCE_MAX ||
           op == OSP_REDUCE_MIN || op == OSP_REDUCE_PROD;
}

static osp_error *reduce_plan_build(const onnx_node *node,
                                    const reduce_state *st, size_t n_inputs,
                                    const onnx_desc *inputs, reduce_plan *p) {
    memset(p, 0, sizeof *p);
    if (!onnx_present(n_inputs, inputs, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input data is required");
    const onnx_desc *x = &inputs[0];
    if (x->dtype != OSP_TYPE_FP32 &&
        !(reduce_int_ok(st->op) &&
          (x->dtype == OSP_TYPE_INT32 || x->dtype == OSP_TYPE_INT64)))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32%s)",
                               osp_datatype_wire_name(x->dtype),
                               reduce_int_ok(st->op) ? ", INT32, INT64" : "");
    int64_t axes[OSP_MAX_DIMS];
    size_t n_axes = 0;
    osp_error *err;
    if (st->axes_from_input) {
        /* An empty axes tensor needs no values (its host copy may be
         * NULL). */
        if (onnx_present(n_inputs, inputs, 1) &&
            onnx_shape_count(&inputs[1].shape) > 0 &&
            (err = onnx_read_ints(node, 1, &inputs[1], axes, OSP_MAX_DIMS,
                                  &n_axes)) != NULL)
            return err;
    } else {
        n_axes = st->n_axes;
        memcpy(axes, st->axes, n_axes * sizeof(int64_t));
    }
    int rank = x->shape.rank;
    bool reduced[OSP_MAX_DIMS] = {false};
    if (n_axes == 0 && st->noop_with_empty_axes) {
        p->identity = true;
        p->out = x->shape;
        return NULL;
    }
    for (size_t i = 0; i < n_axes; i++) {
        int a;
        if ((err = onnx_axis(node, axes[i], rank, &a)) != NULL)
            return err;
        reduced[a] = true;
    }
    if (n_axes == 0)
        for (int i = 0; i < rank; i++)
            reduced[i] = true;
    p->out.rank = 0;
    for (int i = 0; i < rank; i++) {
        if (!reduced[i])
            p->out.dims[p->out.rank++] = x->shape.dims[i];
        else if (st->keepdims)
            p->out.dims[p->out.rank++] = 1;
    }
    if ((err = onnx_check_shape(node, &p->out, x->dtype)) != NULL)
        return err;
    plan_reduce_axes(&x->shape, reduced, osp_datatype_byte_size(x->dtype), p);
    return NULL;
}

osp_error *onnx_math__reduce_infer(onnx_infer_ctx *ctx) {
    reduce_plan p;
    osp_error *err = reduce_plan_build(ctx->node, ctx->state, ctx->n_inputs,
                                       ctx->inputs, &p);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = p.out;
    ctx->workspace_bytes = p.workspace;
    return NULL;
}

osp_error *onnx_math__reduce_run(onnx_run_ctx *ctx) {
    const reduce_state *st = ctx->state;
    reduce_plan p;
    osp_error *err =
        reduce_plan_build(ctx->node, st, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    const onnx_desc *x = &ctx->in_desc[0];
    size_t esize = osp_datatype_byte_size(x->dtype);
    if (p.identity) {
        return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                               (size_t)onnx_shape_count(&x->shape) * esize);
    }
    if (onnx_shape_count(&p.out) == 0)
        return NULL;
    const void *src = ctx->in[0];
    if (p.transpose) {
        p.copy.src = src;
        p.copy.dst = ctx->workspace;
        if ((err = osp_op_copy_strided(ctx->stream, &p.copy)) != NULL)
            return err;
        src = ctx->workspace;
    }
    osp_reduce_args r = {
        .op = st->op,
        .dtype = x->dtype,
        .x = src,
        .outer = p.outer,
        .n = p.n,
        .inner = p.inner,
        .out = ctx->out[0],
    };
    return osp_op_reduce(ctx->stream, &r);
}

/* ---- ArgMax, ArgMin ----------------------------------------------------- */

typedef struct arg_state {
    osp_reduce_op op;
    int64_t axis;
    bool keepdims, select_last_index;
} arg_state;

osp_error *onnx_math__arg_prepare(const onnx_node *node, void **state) {
    arg_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    int64_t keepdims, last = 0;
    osp_error *err;
    if ((err = onnx_attr_int(node, "axis", 0, &st->axis)) != NULL ||
        (err = onnx_attr_int(node, "keepdims", 1, &keepdims)) != NULL ||
        (node->opset >= 12 &&
         (err = onnx_attr_int(node, "select_last_index", 0, &last)) != NULL)) {
        free(st);
        return err;
    }
    st->op = strcmp(node->op_type, "ArgMin") == 0 ? OSP_REDUCE_ARGMIN
                                                  : OSP_REDUCE_ARGMAX;
    st->keepdims = keepdims != 0;
    st->select_last_index = last != 0;
    *state = st;
    return NULL;
}

/* The output shape and the [outer, n, inner] view around the axis. */
static osp_error *arg_geometry(const onnx_node *node, const arg_state *st,
                               const onnx_desc *x, osp_shape *out,
                               int64_t *outer, int64_t *n, int64_t *inner) {
    int axis;
    osp_error *err = onnx_axis(node, st->axis, x->shape.rank, &axis);
    if (err)
        return err;
    *outer = onnx_shape_span(&x->shape, 0, axis);
    *n = x->shape.dims[axis];
    *inner = onnx_shape_span(&x->shape, axis + 1, x->shape.rank);
    out->rank = 0;
    for (int i = 0; i < x->shape.rank; i++)
        if (i != axis)
            out->dims[out->rank++] = x->shape.dims[i];
        else if (st->keepdims)
            out->dims[out->rank++] = 1;
    return NULL;
}

osp_error *onnx_math__arg_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    if (!onnx_present(ctx->n_inputs, ctx->inputs, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input data is required");
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype != OSP_TYPE_FP32 && x->dtype != OSP_TYPE_INT32 &&
        x->dtype != OSP_TYPE_INT64)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32, INT32, "
                               "INT64)",
                               osp_datatype_wire_name(x->dtype));
    int64_t outer, n, inner;
    osp_shape out;
    osp_error *err =
        arg_geometry(node, ctx->state, x, &out, &outer, &n, &inner);
    if (err)
        return err;
    if (n == 0 && outer * inner > 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "the reduced axis is empty");
    ctx->outputs[0].dtype = OSP_TYPE_INT64;
    ctx->outputs[0].shape = out;
    return onnx_check_shape(node, &out, OSP_TYPE_INT64);
}

osp_error *onnx_math__arg_run(onnx_run_ctx *ctx) {
    const arg_state *st = ctx->state;
    const onnx_desc *x = &ctx->in_desc[0];
    int64_t outer, n, inner;
    osp_shape out;
    osp_error *err = arg_geometry(ctx->node, st, x, &out, &outer, &n, &inner);
    if (err)
        return err;
    osp_reduce_args r = {
        .op = st->op,
        .dtype = x->dtype,
        .x = ctx->in[0],
        .outer = outer,
        .n = n,
        .inner = inner,
        .out = ctx->out[0],
        .select_last_index = st->select_last_index,
    };
    return osp_op_reduce(ctx->stream, &r);
}

/* ---- TopK --------------------------------------------------------------- */

typedef struct topk_state {
    int64_t axis;
    int64_t k_attr; /* opset < 10 */
    bool largest, sorted;
} topk_state;

osp_error *onnx_math__topk_prepare(const onnx_node *node, void **state) {
    topk_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    int64_t largest = 1, sorted = 1;
    osp_error *err;
    if ((err = onnx_attr_int(node, "axis", -1, &st->axis)) != NULL)
        goto out;
    if (node->opset < 10) {
        const onnx_attr *k = onnx_node_attr(node, "k");
        if (!k) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'k' is required");
            goto out;
        }
        if ((err = onnx_attr_int(node, "k", 0, &st->k_attr)) != NULL)
            goto out;
    }
    if (node->opset >= 11 &&
        ((err = onnx_attr_int(node, "largest", 1, &largest)) != NULL ||
         (err = onnx_attr_int(node, "sorted", 1, &sorted)) != NULL))
        goto out;
    st->largest = largest != 0;
    st->sorted = sorted != 0;
    *state = st;
    return NULL;
out:
    free(st);
    return err;
}

static osp_error *topk_geometry(const onnx_node *node, const topk_state *st,
                                size_t n_inputs, const onnx_desc *inputs,
                                osp_shape *out, osp_topk_args *t) {
    if (!onnx_present(n_inputs, inputs, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X is required");
    const onnx_desc *x = &inputs[0];
    if (x->dtype != OSP_TYPE_FP32 && x->dtype != OSP_TYPE_INT64)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32, INT64)",
                               osp_datatype_wire_name(x->dtype));
    int64_t k = st->k_attr;
    osp_error *err;
    if (node->opset >= 10) {
        int64_t kv[1];
        size_t nk;
        if (!onnx_present(n_inputs, inputs, 1))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input K is required");
        if ((err = onnx_read_ints(node, 1, &inputs[1], kv, 1, &nk)) != NULL)
            return err;
        if (nk != 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input K must hold one value");
        k = kv[0];
    }
    int axis;
    if ((err = onnx_axis(node, st->axis, x->shape.rank, &axis)) != NULL)
        return err;
    int64_t n = x->shape.dims[axis];
    if (k < 0 || k > n)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "k = %lld is outside [0, %lld] (axis %d)",
                               (long long)k, (long long)n, axis);
    *out = x->shape;
    out->dims[axis] = k;
    memset(t, 0, sizeof *t);
    t->dtype = x->dtype;
    t->outer = onnx_shape_span(&x->shape, 0, axis);
    t->n = n;
    t->inner = onnx_shape_span(&x->shape, axis + 1, x->shape.rank);
    t->k = k;
    t->largest = st->largest;
    t->sorted = st->sorted;
    return NULL;
}

osp_error *onnx_math__topk_infer(onnx_infer_ctx *ctx) {
    osp_shape out;
    osp_topk_args t;
    osp_error *err = topk_geometry(ctx->node, ctx->state, ctx->n_inputs,
                                   ctx->inputs, &out, &t);
    if (err)
        return err;
    if ((err = onnx_check_shape(ctx->node, &out, OSP_TYPE_INT64)) != NULL)
        return err;
    bool has_values = onnx_present(ctx->n_outputs, ctx->outputs, 0);
    bool has_indices = onnx_present(ctx->n_outputs, ctx->outputs, 1);
    size_t count = (size_t)onnx_shape_count(&out);
    if (has_values) {
        ctx->outputs[0].dtype = ctx->inputs[0].dtype;
        ctx->outputs[0].shape = out;
    }
    if (has_indices) {
        ctx->outputs[1].dtype = OSP_TYPE_INT64;
        ctx->outputs[1].shape = out;
    }
    /* The device op writes both; an omitted one goes to the workspace. */
    ctx->workspace_bytes = (has_values ? 0 : onnx_align64(count * 8)) +
                           (has_indices ? 0 : onnx_align64(count * 8));
    return NULL;
}

osp_error *onnx_math__topk_run(onnx_run_ctx *ctx) {
    osp_shape out;
    osp_topk_args t;
    osp_error *err = topk_geometry(ctx->node, ctx->state, ctx->n_inputs,
                                   ctx->in_desc, &out, &t);
    if (err)
        return err;
    size_t count = (size_t)onnx_shape_count(&out);
    if (count == 0)
        return NULL;
    char *ws = ctx->workspace;
    t.x = ctx->in[0];
    t.values = ctx->n_outputs > 0 && ctx->out[0] ? ctx->out[0] : NULL;
    t.indices = ctx->n_outputs > 1 && ctx->out[1] ? ctx->out[1] : NULL;
    if (!t.values) {
        t.values = ws;
        ws += onnx_align64(count * 8);
    }
    if (!t.indices)
        t.indices = (int64_t *)ws;
    return osp_op_topk(ctx->stream, &t);
}

/* ---- CumSum ------------------------------------------------------------- */

typedef struct cumsum_state {
    bool exclusive, reverse;
} cumsum_state;

osp_error *onnx_math__cumsum_prepare(const onnx_node *node, void **state) {
    int64_t exclusive, reverse;
    osp_error *err;
    if ((err = onnx_attr_int(node, "exclusive", 0, &exclusive)) != NULL ||
        (err = onnx_attr_int(node, "reverse", 0, &reverse)) != NULL)
        return err;
    cumsum_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    st->exclusive = exclusive != 0;
    st->reverse = reverse != 0;
    *state = st;
    return NULL;
}

static osp_error *cumsum_geometry(const onnx_node *node, size_t n_inputs,
                                  const onnx_desc *inputs, osp_cumsum_args *c) {
    if (!onnx_present(n_inputs, inputs, 0) ||
        !onnx_present(n_inputs, inputs, 1))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs x and axis are required");
    const onnx_desc *x = &inputs[0];
    if (x->dtype != OSP_TYPE_FP32 && x->dtype != OSP_TYPE_INT32 &&
        x->dtype != OSP_TYPE_INT64)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32, INT32, "
                               "INT64)",
                               osp_datatype_wire_name(x->dtype));
    if (inputs[1].shape.rank > 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "axis must be a scalar or 1-D");
    int64_t av[1];
    size_t na;
    osp_error *err = onnx_read_ints(node, 1, &inputs[1], av, 1, &na);
    if (err)
        return err;
    if (na != 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "axis must hold one value");
    int axis;
    if ((err = onnx_axis(node, av[0], x->shape.rank, &axis)) != NULL)
        return err;
    memset(c, 0, sizeof *c);
    c->dtype = x->dtype;
    c->outer = onnx_shape_span(&x->shape, 0, axis);
    c->n = x->shape.dims[axis];
    c->inner = onnx_shape_span(&x->shape, axis + 1, x->shape.rank);
    return NULL;
}

osp_error *onnx_math__cumsum_infer(onnx_infer_ctx *ctx) {
    osp_cumsum_args c;
    osp_error *err = cumsum_geometry(ctx->node, ctx->n_inputs, ctx->inputs, &c);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    return NULL;
}

osp_error *onnx_math__cumsum_run(onnx_run_ctx *ctx) {
    const cumsum_state *st = ctx->state;
    osp_cumsum_args c;
    osp_error *err =
        cumsum_geometry(ctx->node, ctx->n_inputs, ctx->in_desc, &c);
    if (err)
        return err;
    c.x = ctx->in[0];
    c.y = ctx->out[0];
    c.exclusive = st->exclusive;
    c.reverse = st->reverse;
    return osp_op_cumsum(ctx->stream, &c);
}

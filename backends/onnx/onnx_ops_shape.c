/*
 * Shape ops: what a tensor's shape is (Shape, Size), views of a tensor
 * with another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
 * Dropout in inference), tensors made from attributes and shapes
 * (Constant, ConstantOfShape, Range, EyeLike) and Trilu (its input
 * under a triangular mask the op builds from index sequences).
 *
 * The views alias their input (output_aliases_input): the planner never
 * calls their run, which still copies so that a planner that does not
 * alias gets the right bytes. Dropout has a second output (the mask), so
 * it cannot alias: it copies its input and fills the mask.
 *
 * Everything that depends on an input's values (Reshape's shape,
 * Squeeze's axes from opset 13, Range's bounds) needs them on the host at
 * infer; run recomputes what it needs from its descs (the same values),
 * because one node's state serves every plan (every set of input shapes).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"
#include "onnx_ops_strings.h"

/* ---- shared ---------------------------------------------------------------
 */

/* The run of the views, for a planner that does not alias them: output 0
 * is a copy of input 0's bytes. */
static osp_error *view_run(onnx_run_ctx *ctx) {
    if (ctx->n_outputs < 1 || !ctx->out[0])
        return NULL;
    const onnx_desc *in = &ctx->in_desc[0];
    return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                           (size_t)onnx_shape_count(&in->shape) *
                               osp_datatype_byte_size(in->dtype));
}

/* Writes n int64 values into device memory `dst`, one fill each: for the
 * few values of Shape and Size, which the planner evaluates on the host. */
static osp_error *write_int64s(osp_stream *stream, int64_t *dst,
                               const int64_t *values, size_t n) {
    for (size_t i = 0; i < n; i++) {
        osp_error *err = onnx_fill_i64(stream, dst + i, 1, values[i]);
        if (err)
            return err;
    }
    return NULL;
}

/* Fills n elements of dt (fixed-size) at dst with the number 1. */
static osp_error *fill_ones(osp_stream *stream, osp_datatype dt, void *dst,
                            size_t n) {
    osp_fill_args f = {
        .elem_size = osp_datatype_byte_size(dt), .dst = dst, .n = n};
    onnx_number_bytes(dt, 1.0, f.value);
    return osp_op_fill(stream, &f);
}

/* ---- Shape, Size ----------------------------------------------------------
 */

/* The [start, end) of the input's dims that Shape returns: all of them
 * before opset 15, the clamped start/end attributes from 15. */
static osp_error *shape_bounds(const onnx_node *node, int rank, int *start,
                               int *end) {
    int64_t s = 0, e = rank;
    if (node->opset >= 15) {
        osp_error *err = onnx_attr_int(node, "start", 0, &s);
        if (!err)
            err = onnx_attr_int(node, "end", rank, &e);
        if (err)
            return err;
    }
    if (s < 0)
        s += rank;
    if (e < 0)
        e += rank;
    s = s < 0 ? 0 : (s > rank ? rank : s);
    e = e < 0 ? 0 : (e > rank ? rank : e);
    if (e < s)
        e = s;
    *start = (int)s;
    *end = (int)e;
    return NULL;
}

static osp_error *shape_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    int s, e;
    if (!err)
        err = shape_bounds(ctx->node, ctx->inputs[0].shape.rank, &s, &e);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_INT64;
    ctx->outputs[0].shape.rank = 1;
    ctx->outputs[0].shape.dims[0] = e - s;
    return NULL;
}

static osp_error *shape_run(onnx_run_ctx *ctx) {
    const osp_shape *in = &ctx->in_desc[0].shape;
    int s, e;
    osp_error *err = shape_bounds(ctx->node, in->rank, &s, &e);
    if (err)
        return err;
    return write_int64s(ctx->stream, ctx->out[0], in->dims + s,
                        (size_t)(e - s));
}

static osp_error *size_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_INT64;
    ctx->outputs[0].shape.rank = 0;
    return NULL;
}

static osp_error *size_run(onnx_run_ctx *ctx) {
    int64_t n = onnx_shape_count(&ctx->in_desc[0].shape);
    return write_int64s(ctx->stream, ctx->out[0], &n, 1);
}

/* ---- Reshape --------------------------------------------------------------
 */

/* The output shape of Reshape from the input's shape and the requested
 * one: 0 copies the input's dim at that index (unless allowzero, opset
 * 14, where it is a real 0), one -1 takes what is left. */
static osp_error *reshape_shape(const onnx_node *node, const onnx_desc *in,
                                const onnx_desc *shape_desc, osp_shape *out) {
    int64_t req[OSP_MAX_DIMS];
    size_t n;
    osp_error *err = onnx_read_ints(node, 1, shape_desc, req, OSP_MAX_DIMS, &n);
    if (err)
        return err;
    int64_t allowzero = 0;
    if (node->opset >= 14 &&
        (err = onnx_attr_int(node, "allowzero", 0, &allowzero)))
        return err;
    osp_shape s = {.rank = (int)n};
    int infer_at = -1;
    int64_t known = 1;
    bool has_zero = false;
    for (int i = 0; i < (int)n; i++) {
        int64_t d = req[i];
        if (d == -1) {
            if (infer_at >= 0)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "shape has more than one -1");
            infer_at = i;
            s.dims[i] = 1;
            continue;
        }
        if (d < -1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shape has a negative dimension %lld at %d",
                                   (long long)d, i);
        if (d == 0 && !allowzero) {
            if (i >= in->shape.rank)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "shape has 0 at index %d but the input "
                                       "has rank %d",
                                       i, in->shape.rank);
            d = in->shape.dims[i];
        }
        if (d == 0)
            has_zero = true;
        s.dims[i] = d;
        if (d != 0 && known > INT64_MAX / d)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shape has too many elements");
        known *= d;
    }
    int64_t total = onnx_shape_count(&in->shape);
    char a[256], b[256];
    if (infer_at >= 0) {
        if (allowzero && has_zero)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shape has both -1 and 0 with allowzero=1");
        if (known == 0 || total % known != 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "cannot reshape %s into a shape with -1 "
                                   "(the other dims give %lld elements)",
                                   osp_shape_format(&in->shape, a, sizeof a),
                                   (long long)known);
        s.dims[infer_at] = total / known;
    } else if (known != total) {
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "cannot reshape %s (%lld elements) into %s",
                               osp_shape_format(&in->shape, a, sizeof a),
                               (long long)total,
                               osp_shape_format(&s, b, sizeof b));
    }
    *out = s;
    return NULL;
}

static osp_error *reshape_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (!err)
        err = onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 1);
    if (!err)
        err = reshape_shape(ctx->node, &ctx->inputs[0], &ctx->inputs[1],
                            &ctx->outputs[0].shape);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return NULL;
}

/* ---- Flatten --------------------------------------------------------------
 */

static osp_error *flatten_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t axis;
    if (!err)
        err = onnx_attr_int(node, "axis", 1, &axis);
    if (err)
        return err;
    const osp_shape *in = &ctx->inputs[0].shape;
    int rank = in->rank;
    if (axis < 0 && node->opset >= 11)
        axis += rank;
    if (axis < 0 || axis > rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "axis %lld is out of range for rank %d",
                               (long long)axis, rank);
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = 2;
    out->dims[0] = onnx_shape_span(in, 0, (int)axis);
    out->dims[1] = onnx_shape_span(in, (int)axis, rank);
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return NULL;
}

/* ---- Squeeze, Unsqueeze ---------------------------------------------------
 */

/* The axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1
 * from 13 (*present false when neither is given). */
static osp_error *read_axes(const onnx_node *node, size_t n_inputs,
                            const onnx_desc *inputs, int64_t *axes, size_t *n,
                            bool *present) {
    if (node->opset < 13) {
        const int64_t *a;
        osp_error *err = onnx_attr_ints(node, "axes", &a, n);
        if (err)
            return err;
        if (*n > OSP_MAX_DIMS)
            return onnx_node_error(
                node, OSP_ERROR_INVALID_ARG,
                "attribute 'axes' has %zu values, at most %d", *n,
                OSP_MAX_DIMS);
        if (*n)
            memcpy(axes, a, *n * sizeof *a);
        *present = onnx_node_attr(node, "axes") != NULL;
        return NULL;
    }
    if (!onnx_present(n_inputs, inputs, 1)) {
        *n = 0;
        *present = false;
        return NULL;
    }
    *present = true;
    return onnx_read_ints(node, 1, &inputs[1], axes, OSP_MAX_DIMS, n);
}

static osp_error *squeeze_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t axes[OSP_MAX_DIMS];
    size_t n;
    bool present;
    if (!err)
        err = read_axes(node, ctx->n_inputs, ctx->inputs, axes, &n, &present);
    if (err)
        return err;
    const osp_shape *in = &ctx->inputs[0].shape;
    bool drop[OSP_MAX_DIMS] = {false};
    for (size_t i = 0; i < n; i++) {
        int a;
        if ((err = onnx_axis(node, axes[i], in->rank, &a)))
            return err;
        if (drop[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "axis %d is given twice", a);
        if (in->dims[a] != 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "cannot squeeze axis %d of size %lld", a,
                                   (long long)in->dims[a]);
        drop[a] = true;
    }
    if (!present || n == 0)
        for (int a = 0; a < in->rank; a++)
            drop[a] = in->dims[a] == 1;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = 0;
    for (int a = 0; a < in->rank; a++)
        if (!drop[a])
            out->dims[out->rank++] = in->dims[a];
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return NULL;
}

static osp_error *unsqueeze_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    if (!err && node->opset >= 13)
        err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 1);
    int64_t axes[OSP_MAX_DIMS];
    size_t n;
    bool present;
    if (!err)
        err = read_axes(node, ctx->n_inputs, ctx->inputs, axes, &n, &present);
    if (err)
        return err;
    const osp_shape *in = &ctx->inputs[0].shape;
    if (!present)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "axes are required");
    int out_rank = in->rank + (int)n;
    if (out_rank > OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "output rank %d is over the limit of %d",
                               out_rank, OSP_MAX_DIMS);
    bool inserted[OSP_MAX_DIMS] = {false};
    for (size_t i = 0; i < n; i++) {
        int a;
        if ((err = onnx_axis(node, axes[i], out_rank, &a)))
            return err;
        if (inserted[a])
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "axis %d is given twice", a);
        inserted[a] = true;
    }
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = out_rank;
    for (int a = 0, j = 0; a < out_rank; a++)
        out->dims[a] = inserted[a] ? 1 : in->dims[j++];
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    return NULL;
}

/* ---- Identity, Dropout ----------------------------------------------------
 */

static osp_error *identity_infer(onnx_infer_ctx *ctx) {
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    return NULL;
}

/* Dropout in inference: the output is the input; the optional mask is
 * all true (BOOL from opset 10, the input's type before). From opset 12
 * training_mode (input 2) must be false: random dropout is not done. */
static osp_error *dropout_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = identity_infer(ctx);
    if (err)
        return err;
    if (node->opset >= 12 && onnx_present(ctx->n_inputs, ctx->inputs, 2)) {
        double training;
        if ((err = onnx_read_scalar(node, 2, &ctx->inputs[2], &training)))
            return err;
        if (training != 0.0)
            return onnx_node_error(
                node, OSP_ERROR_UNSUPPORTED,
                "training_mode = true (random dropout) is not "
                "supported");
    }
    osp_datatype in_dt = ctx->inputs[0].dtype;
    if ((err = onnx_want_fixed_size(node, in_dt, "input 0")))
        return err;
    if (onnx_present(ctx->n_outputs, ctx->outputs, 1)) {
        ctx->outputs[1].dtype = node->opset >= 10 ? OSP_TYPE_BOOL : in_dt;
        ctx->outputs[1].shape = ctx->inputs[0].shape;
    }
    return NULL;
}

static osp_error *dropout_run(onnx_run_ctx *ctx) {
    osp_error *err = view_run(ctx);
    if (err || ctx->n_outputs < 2 || !ctx->out[1])
        return err;
    const onnx_desc *mask = &ctx->out_desc[1];
    return fill_ones(ctx->stream, mask->dtype, ctx->out[1],
                     (size_t)onnx_shape_count(&mask->shape));
}

/* ---- Constant -------------------------------------------------------------
 */

typedef struct constant_state {
    osp_datatype dtype;
    osp_shape shape;
    void *data; /* owned; host memory (STRING: the BYTES wire form) */
    size_t bytes;
} constant_state;

static void constant_free(void *state) {
    constant_state *s = state;
    if (s)
        free(s->data);
    free(s);
}

/* The BYTES wire form (4-byte little-endian length, then the bytes, per
 * element) of attribute `a`'s text: value_string (one element) or
 * value_strings (a.n elements, NUL-terminated). Caller owns *wire (NULL
 * when out of memory); *bytes is its size. */
static char *attr_text_wire(const onnx_attr *a, size_t *bytes) {
    bool one = a->type == ONNX_ATTR_STRING;
    size_t n = one ? 1 : a->n, total = 0;
    for (size_t i = 0; i < n; i++)
        total += 4 + (one ? a->s_len : strlen(a->strings[i]));
    char *wire = malloc(total ? total : 1);
    if (!wire)
        return NULL;
    char *p = wire;
    for (size_t i = 0; i < n; i++) {
        const char *text = one ? a->s : a->strings[i];
        size_t len = one ? a->s_len : strlen(text);
        for (int b = 0; b < 4; b++)
            p[b] = (char)((uint32_t)len >> (8 * b));
        memcpy(p + 4, text, len);
        p += 4 + len;
    }
    *bytes = total;
    return wire;
}

/* Reads the one value attribute of a Constant into a state that owns a
 * copy of its bytes (the node may be rewritten after prepare). A STRING
 * value keeps its BYTES wire form; run turns it into references. */
static osp_error *constant_prepare(const onnx_node *node, void **state) {
    static const char *const names[] = {
        "value",      "value_float",  "value_floats",  "value_int",
        "value_ints", "value_string", "value_strings", "sparse_value"};
    const onnx_attr *attr = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const onnx_attr *a = onnx_node_attr(node, names[i]);
        if (!a)
            continue;
        if (attr)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attributes '%s' and '%s' are both given",
                                   attr->name, a->name);
        attr = a;
    }
    if (!attr)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "no value attribute is given");
    osp_datatype dtype;
    osp_shape shape = {0};
    const void *src;
    int64_t count = 1;
    size_t bytes = 0;
    char *text_wire = NULL; /* value_string(s) as BYTES; owned */
    const char *name = attr->name;
    if (strcmp(name, "value") == 0 && attr->type == ONNX_ATTR_TENSOR &&
        attr->t) {
        dtype = attr->t->dtype;
        shape = attr->t->shape;
        src = attr->t->data;
        count = onnx_shape_count(&shape);
        if (dtype == OSP_TYPE_BYTES)
            bytes = attr->t->byte_size;
    } else if ((strcmp(name, "value_string") == 0 &&
                attr->type == ONNX_ATTR_STRING) ||
               (strcmp(name, "value_strings") == 0 &&
                attr->type == ONNX_ATTR_STRINGS)) {
        dtype = OSP_TYPE_BYTES;
        if (attr->type == ONNX_ATTR_STRINGS) {
            shape.rank = 1;
            shape.dims[0] = count = (int64_t)attr->n;
        }
        src = text_wire = attr_text_wire(attr, &bytes);
        if (!text_wire)
            return osp_error_out_of_memory();
    } else if (strcmp(name, "value_float") == 0 &&
               attr->type == ONNX_ATTR_FLOAT) {
        dtype = OSP_TYPE_FP32;
        src = &attr->f;
    } else if (strcmp(name, "value_int") == 0 && attr->type == ONNX_ATTR_INT) {
        dtype = OSP_TYPE_INT64;
        src = &attr->i;
    } else if (strcmp(name, "value_floats") == 0 &&
               attr->type == ONNX_ATTR_FLOATS) {
        dtype = OSP_TYPE_FP32;
        shape.rank = 1;
        shape.dims[0] = count = (int64_t)attr->n;
        src = attr->floats;
    } else if (strcmp(name, "value_ints") == 0 &&
               attr->type == ONNX_ATTR_INTS) {
        dtype = OSP_TYPE_INT64;
        shape.rank = 1;
        shape.dims[0] = count = (int64_t)attr->n;
        src = attr->ints;
    } else if (strcmp(name, "sparse_value") == 0) {
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute '%s' is not supported", name);
    } else {
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute '%s' has the wrong type", name);
    }
    osp_error *err = onnx_want_movable(node, dtype, "attribute 'value'");
    if (err)
        return err;
    if (dtype != OSP_TYPE_BYTES)
        bytes = (size_t)count * osp_datatype_byte_size(dtype);
    if (bytes && !src)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute '%s' has no data", name);
    constant_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(text_wire);
        return osp_error_out_of_memory();
    }
    s->data = text_wire ? text_wire : malloc(bytes ? bytes : 1);
    if (!s->data) {
        free(s);
        return osp_error_out_of_memory();
    }
    if (bytes && !text_wire)
        memcpy(s->data, src, bytes);
    s->dtype = dtype;
    s->shape = shape;
    s->bytes = bytes;
    *state = s;
    return NULL;
}

static osp_error *constant_infer(onnx_infer_ctx *ctx) {
    const constant_state *s = ctx->state;
    ctx->outputs[0].dtype = s->dtype;
    ctx->outputs[0].shape = s->shape;
    return NULL;
}

/* The attribute's bytes onto the device (the planner folds the node, so
 * this runs once, on the host, while planning). */
static osp_error *constant_run(onnx_run_ctx *ctx) {
    const constant_state *s = ctx->state;
    if (s->dtype == OSP_TYPE_BYTES)
        return onnx_strings_constant_run(ctx, s->data, s->bytes,
                                         onnx_shape_count(&s->shape));
    return osp_memcpy_async(ctx->stream, ctx->out[0], s->data, s->bytes,
                            OSP_COPY_HOST_TO_DEVICE);
}

/* ---- ConstantOfShape ------------------------------------------------------
 */

typedef struct fill_state {
    osp_datatype dtype;
    uint8_t value[8];
    onnx_string text; /* STRING: the value; its bytes owned */
} fill_state;

static void constant_of_shape_free(void *state) {
    fill_state *s = state;
    if (s)
        free((char *)s->text.data);
    free(s);
}

/* The value to fill with, from attribute 'value' (one element; float 0
 * when absent), into a state owning a copy (a STRING's bytes too). */
static osp_error *constant_of_shape_prepare(const onnx_node *node,
                                            void **state) {
    fill_state v = {.dtype = OSP_TYPE_FP32}; /* float 0 by default */
    const onnx_attr *a = onnx_node_attr(node, "value");
    if (a) {
        if (a->type != ONNX_ATTR_TENSOR || !a->t)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'value' must be a tensor");
        osp_error *err =
            onnx_want_movable(node, a->t->dtype, "attribute 'value'");
        if (err)
            return err;
        if (onnx_shape_count(&a->t->shape) != 1 || !a->t->data)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'value' must have one element");
        v.dtype = a->t->dtype;
        if (v.dtype == OSP_TYPE_BYTES) {
            onnx_string wire_ref;
            if ((err = onnx_strings_from_wire(a->t->data, a->t->byte_size, 1,
                                              &wire_ref, "attribute 'value'")))
                return err;
            char *copy = malloc(wire_ref.len ? wire_ref.len : 1);
            if (!copy)
                return osp_error_out_of_memory();
            memcpy(copy, wire_ref.data, wire_ref.len);
            v.text = (onnx_string){.data = copy, .len = wire_ref.len};
        } else {
            memcpy(v.value, a->t->data, osp_datatype_byte_size(v.dtype));
        }
    }
    fill_state *s = malloc(sizeof *s);
    if (!s) {
        free((char *)v.text.data);
        return osp_error_out_of_memory();
    }
    *s = v;
    *state = s;
    return NULL;
}

static osp_error *constant_of_shape_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    const fill_state *s = ctx->state;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t dims[OSP_MAX_DIMS];
    size_t n;
    if (!err)
        err = onnx_read_ints(node, 0, &ctx->inputs[0], dims, OSP_MAX_DIMS, &n);
    if (err)
        return err;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = (int)n;
    for (size_t i = 0; i < n; i++) {
        if (dims[i] < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shape has a negative dimension %lld",
                                   (long long)dims[i]);
        out->dims[i] = dims[i];
    }
    ctx->outputs[0].dtype = s->dtype;
    return onnx_check_shape(node, out, s->dtype);
}

static osp_error *constant_of_shape_run(onnx_run_ctx *ctx) {
    const fill_state *s = ctx->state;
    if (s->dtype == OSP_TYPE_BYTES)
        return onnx_strings_fill_run(ctx, s->text);
    osp_fill_args f = {.elem_size = osp_datatype_byte_size(s->dtype),
                       .dst = ctx->out[0],
                       .n = (size_t)onnx_shape_count(&ctx->out_desc[0].shape)};
    memcpy(f.value, s->value, sizeof f.value);
    return osp_op_fill(ctx->stream, &f);
}

/* ---- Range ----------------------------------------------------------------
 */

/* Range's element count, max(ceil((limit - start) / delta), 0), from the
 * host values of its three scalars (computed in their own type, as the
 * spec's reference does). */
static osp_error *range_count(const onnx_node *node, const onnx_desc *in,
                              int64_t *count) {
    osp_datatype dt = in[0].dtype;
    for (size_t i = 0; i < 3; i++) {
        if (in[i].dtype != dt)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input %zu is %s, input 0 is %s", i,
                                   osp_datatype_wire_name(in[i].dtype),
                                   osp_datatype_wire_name(dt));
        if (onnx_shape_count(&in[i].shape) != 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input %zu must be a scalar", i);
        if (!in[i].host)
            return onnx_error_needs_values(node, i);
    }
    double n;
    if (dt == OSP_TYPE_FP32) {
        float s = *(const float *)in[0].host, l = *(const float *)in[1].host,
              d = *(const float *)in[2].host;
        if (d == 0.0f)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG, "delta is 0");
        n = ceilf((l - s) / d);
    } else if (dt == OSP_TYPE_FP64) {
        double s = *(const double *)in[0].host, l = *(const double *)in[1].host,
               d = *(const double *)in[2].host;
        if (d == 0.0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG, "delta is 0");
        n = ceil((l - s) / d);
    } else if (dt == OSP_TYPE_INT16 || dt == OSP_TYPE_INT32 ||
               dt == OSP_TYPE_INT64) {
        int64_t v[3];
        for (int i = 0; i < 3; i++) {
            double x;
            osp_error *err = onnx_read_scalar(node, (size_t)i, &in[i], &x);
            if (err)
                return err;
            v[i] = dt == OSP_TYPE_INT64 ? *(const int64_t *)in[i].host
                                        : (int64_t)x;
        }
        int64_t span;
        if (v[2] == 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG, "delta is 0");
        if (__builtin_sub_overflow(v[1], v[0], &span))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "the range has too many elements");
        /* Division that rounds toward +inf for the count. */
        int64_t q = span / v[2], r = span % v[2];
        if (r != 0 && ((r > 0) == (v[2] > 0)))
            q++;
        *count = q > 0 ? q : 0;
        return NULL;
    } else {
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported",
                               osp_datatype_wire_name(dt));
    }
    if (!(n < 9.2e18))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "the range has too many elements");
    *count = n > 0 ? (int64_t)n : 0;
    return NULL;
}

static osp_error *range_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = NULL;
    for (size_t i = 0; i < 3 && !err; i++)
        err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, i);
    int64_t n = 0;
    if (!err)
        err = range_count(node, ctx->inputs, &n);
    if (err)
        return err;
    osp_datatype dt = ctx->inputs[0].dtype;
    osp_shape *out = &ctx->outputs[0].shape;
    out->rank = 1;
    out->dims[0] = n;
    ctx->outputs[0].dtype = dt;
    if ((err = onnx_check_shape(node, out, OSP_TYPE_FP64)))
        return err;
    ctx->workspace_bytes = 2 * onnx_align64((size_t)n * 8);
    return NULL;
}

/* out[i] = start + i * delta on the device, from the scalars start and
 * delta in device memory: i counts up by an exclusive cumsum of ones in an
 * integer type (exact), is cast to the output's type, times delta, plus
 * start. */
static osp_error *range_run(onnx_run_ctx *ctx) {
    osp_datatype dt = ctx->out_desc[0].dtype;
    int64_t n = ctx->out_desc[0].shape.dims[0];
    if (n == 0)
        return NULL;
    osp_datatype idx_dt = dt == OSP_TYPE_FP64 || dt == OSP_TYPE_INT64
                              ? OSP_TYPE_INT64
                              : OSP_TYPE_INT32;
    uint8_t *a = ctx->workspace;
    uint8_t *b = a + onnx_align64((size_t)n * 8);
    osp_error *err = fill_ones(ctx->stream, idx_dt, a, (size_t)n);
    if (err)
        return err;
    osp_cumsum_args cs = {.dtype = idx_dt,
                          .x = a,
                          .y = b,
                          .outer = 1,
                          .n = n,
                          .inner = 1,
                          .exclusive = true};
    if ((err = osp_op_cumsum(ctx->stream, &cs)))
        return err;
    void *idx = b, *tmp = a;
    if (dt != idx_dt) {
        if ((err = osp_op_cast(ctx->stream, b, idx_dt, a, dt, (size_t)n)))
            return err;
        idx = a;
        tmp = b;
    }
    if ((err = onnx_binary_flat(ctx->stream, OSP_BINARY_ND_MUL, dt, idx, false,
                                ctx->in[2], true, tmp, n)))
        return err;
    return onnx_binary_flat(ctx->stream, OSP_BINARY_ND_ADD, dt, tmp, false,
                            ctx->in[0], true, ctx->out[0], n);
}

/* ---- EyeLike --------------------------------------------------------------
 */

static osp_error *eye_like_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t dtype_attr;
    if (!err)
        err = onnx_attr_int(node, "dtype", 0, &dtype_attr);
    if (err)
        return err;
    const onnx_desc *in = &ctx->inputs[0];
    if (in->shape.rank != 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input 0 has rank %d, expected 2",
                               in->shape.rank);
    osp_datatype dt = in->dtype;
    if (onnx_node_attr(node, "dtype")) {
        dt = onnx_proto_dtype(dtype_attr);
        if (dt == OSP_TYPE_INVALID)
            return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                   "attribute 'dtype' = %lld is not supported",
                                   (long long)dtype_attr);
    }
    if ((err = onnx_want_fixed_size(node, dt, "output")))
        return err;
    ctx->outputs[0].dtype = dt;
    ctx->outputs[0].shape = in->shape;
    ctx->workspace_bytes = 64;
    return NULL;
}

/* Zeros, then ones on the k-th diagonal: one element of 1 in the
 * workspace copied with a source stride of 0 along the diagonal. */
static osp_error *eye_like_run(onnx_run_ctx *ctx) {
    const onnx_node *node = ctx->node;
    const onnx_desc *out = &ctx->out_desc[0];
    size_t es = osp_datatype_byte_size(out->dtype);
    int64_t rows = out->shape.dims[0], cols = out->shape.dims[1], k;
    osp_error *err = onnx_attr_int(node, "k", 0, &k);
    if (err)
        return err;
    osp_fill_args zero = {
        .elem_size = es, .dst = ctx->out[0], .n = (size_t)(rows * cols)};
    if ((err = osp_op_fill(ctx->stream, &zero)))
        return err;
    int64_t r0 = k >= 0 ? 0 : -k, c0 = k >= 0 ? k : 0;
    if (r0 >= rows || c0 >= cols)
        return NULL;
    int64_t len = rows - r0 < cols - c0 ? rows - r0 : cols - c0;
    if ((err = fill_ones(ctx->stream, out->dtype, ctx->workspace, 1)))
        return err;
    osp_copy_strided_args c = {.elem_size = es,
                               .rank = 1,
                               .dims = {len},
                               .src = ctx->workspace,
                               .src_strides = {0},
                               .dst = (uint8_t *)ctx->out[0] +
                                      (size_t)(r0 * cols + c0) * es,
                               .dst_strides = {cols + 1}};
    return osp_op_copy_strided(ctx->stream, &c);
}

/* ---- Trilu ----------------------------------------------------------------
 */

/* Trilu's workspace: two INT64 vectors of the rows, two of the columns,
 * the BOOL mask [rows, cols] and one zero element. */
typedef struct trilu_layout {
    size_t rows_bytes, cols_bytes, mask_bytes;
} trilu_layout;

static trilu_layout trilu_ws(int64_t rows, int64_t cols) {
    trilu_layout l = {.rows_bytes = onnx_align64((size_t)rows * 8),
                      .cols_bytes = onnx_align64((size_t)cols * 8),
                      .mask_bytes = onnx_align64((size_t)(rows * cols))};
    return l;
}

static osp_error *trilu_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    osp_error *err = onnx_required_input(node, ctx->n_inputs, ctx->inputs, 0);
    int64_t upper;
    if (!err)
        err = onnx_attr_int(node, "upper", 1, &upper);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if ((err = onnx_want_fixed_size(node, x->dtype, "input 0")))
        return err;
    if (x->shape.rank < 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input 0 has rank %d, expected at least 2",
                               x->shape.rank);
    if (onnx_present(ctx->n_inputs, ctx->inputs, 1)) {
        const onnx_desc *k = &ctx->inputs[1];
        if (k->dtype != OSP_TYPE_INT64 || onnx_shape_count(&k->shape) != 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input 1 (k) must be one INT64");
    }
    ctx->outputs[0].dtype = x->dtype;
    ctx->outputs[0].shape = x->shape;
    int64_t rows = x->shape.dims[x->shape.rank - 2],
            cols = x->shape.dims[x->shape.rank - 1];
    trilu_layout l = trilu_ws(rows, cols);
    ctx->workspace_bytes =
        2 * l.rows_bytes + 2 * l.cols_bytes + l.mask_bytes + 64;
    return NULL;
}

/* The mask keep[i, j] = j >= i + k (upper) or j <= i + k (lower) from
 * two index sequences (k added on the device, so it need not be known
 * while planning), then out = keep ? x : 0 over every matrix. */
static osp_error *trilu_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0];
    int rank = x->shape.rank;
    int64_t rows = x->shape.dims[rank - 2], cols = x->shape.dims[rank - 1];
    if (onnx_shape_count(&x->shape) == 0)
        return NULL;
    int64_t upper;
    osp_error *err = onnx_attr_int(ctx->node, "upper", 1, &upper);
    if (err)
        return err;
    trilu_layout l = trilu_ws(rows, cols);
    uint8_t *ws = ctx->workspace;
    int64_t *r0 = (int64_t *)ws, *r1 = (int64_t *)(ws + l.rows_bytes);
    int64_t *c0 = (int64_t *)(ws + 2 * l.rows_bytes),
            *c1 = (int64_t *)(ws + 2 * l.rows_bytes + l.cols_bytes);
    uint8_t *mask = ws + 2 * l.rows_bytes + 2 * l.cols_bytes,
            *zero = mask + l.mask_bytes;
    if ((err = onnx_iota_i64(ctx->stream, r0, r1, rows, 1)) ||
        (err = onnx_iota_i64(ctx->stream, c0, c1, cols, 1)))
        return err;
    const void *row_k = r1;
    if (onnx_present(ctx->n_inputs, ctx->in_desc, 1)) {
        if ((err = onnx_binary_flat(ctx->stream, OSP_BINARY_ND_ADD,
                                    OSP_TYPE_INT64, r1, false, ctx->in[1], true,
                                    r0, rows)))
            return err;
        row_k = r0;
    }
    osp_binary_nd_args cmp = {.op = upper ? OSP_BINARY_ND_GREATER_EQUAL
                                          : OSP_BINARY_ND_LESS_EQUAL,
                              .dtype = OSP_TYPE_INT64,
                              .rank = 2,
                              .dims = {rows, cols},
                              .a = c1,
                              .a_strides = {0, 1},
                              .b = row_k,
                              .b_strides = {1, 0},
                              .out = mask};
    if ((err = osp_op_binary_nd(ctx->stream, &cmp)))
        return err;
    size_t es = osp_datatype_byte_size(x->dtype);
    osp_fill_args z = {.elem_size = es, .dst = zero, .n = 1};
    if ((err = osp_op_fill(ctx->stream, &z)))
        return err;
    osp_where_args w = {.elem_size = es,
                        .rank = rank,
                        .cond = (const bool *)mask,
                        .x = ctx->in[0],
                        .y = zero,
                        .out = ctx->out[0]};
    memcpy(w.dims, x->shape.dims, sizeof w.dims);
    onnx_contiguous_strides(&x->shape, w.x_strides);
    w.cond_strides[rank - 2] = cols;
    w.cond_strides[rank - 1] = 1;
    return osp_op_where(ctx->stream, &w);
}

/* ---- the family -----------------------------------------------------------
 */

#define USES(...)                                                              \
    { __VA_ARGS__, OSP_OP_KIND_COUNT_ }
#define USES_NONE                                                              \
    { OSP_OP_KIND_COUNT_ }

/* A view of input 0 with another shape: the planner aliases it. */
#define VIEW(name, infer_fn)                                                   \
    {                                                                          \
        .op_type = name, .domain = "", .since = 7, .infer = infer_fn,          \
        .run = view_run, .output_aliases_input = true, .takes_strings = true,  \
        .uses = USES_NONE                                                      \
    }

static const onnx_op shape_ops[] = {
    {.op_type = "Shape",
     .domain = "",
     .since = 7,
     .infer = shape_infer,
     .run = shape_run,
     .needs_only_shapes = true,
     .takes_strings = true,
     .uses = USES(OSP_OP_FILL)},
    {.op_type = "Size",
     .domain = "",
     .since = 7,
     .infer = size_infer,
     .run = size_run,
     .needs_only_shapes = true,
     .takes_strings = true,
     .uses = USES(OSP_OP_FILL)},
    VIEW("Reshape", reshape_infer),
    VIEW("Flatten", flatten_infer),
    VIEW("Squeeze", squeeze_infer),
    VIEW("Unsqueeze", unsqueeze_infer),
    VIEW("Identity", identity_infer),
    {.op_type = "Dropout",
     .domain = "",
     .since = 7,
     .infer = dropout_infer,
     .run = dropout_run,
     .uses = USES(OSP_OP_FILL)},
    {.op_type = "Constant",
     .domain = "",
     .since = 7,
     .prepare = constant_prepare,
     .free = constant_free,
     .infer = constant_infer,
     .run = constant_run,
     .takes_strings = true,
     .uses = USES_NONE},
    {.op_type = "ConstantOfShape",
     .domain = "",
     .since = 9,
     .prepare = constant_of_shape_prepare,
     .free = constant_of_shape_free,
     .infer = constant_of_shape_infer,
     .run = constant_of_shape_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_FILL)},
    {.op_type = "Range",
     .domain = "",
     .since = 11,
     .infer = range_infer,
     .run = range_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_CAST, OSP_OP_BINARY_ND)},
    {.op_type = "EyeLike",
     .domain = "",
     .since = 9,
     .infer = eye_like_infer,
     .run = eye_like_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_COPY_STRIDED)},
    {.op_type = "Trilu",
     .domain = "",
     .since = 14,
     .infer = trilu_infer,
     .run = trilu_run,
     .uses = USES(OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND, OSP_OP_WHERE)},
};

const onnx_op_family onnx_ops_shape_family = {
    .ops = shape_ops,
    .n_ops = sizeof shape_ops / sizeof shape_ops[0],
};

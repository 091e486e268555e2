/*
 * Helpers shared by the op families (declared at the bottom of
 * onnx_ops.h): errors and input checks, attribute readers, host values of
 * planning-time inputs, axes, broadcasting and shape arithmetic, and the
 * small device-op sequences every family writes (copies, fills, iotas,
 * flat binary ops). Every error names the node as "node 'name' (OpType):
 * ..." so that a message read alone says where the model is wrong.
 */
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "half.h"
#include "onnx_load_internal.h"
#include "onnx_ops.h"

/* The most bytes one tensor an op computes may take. Far above any real
 * activation; it keeps size arithmetic on shapes from a hostile model
 * clear of overflow. */
#define ONNX_MAX_TENSOR_BYTES ((int64_t)1 << 34) /* 16 GiB */

static const char *node_name(const onnx_node *node) {
    return node && node->name ? node->name : "";
}

static const char *node_op(const onnx_node *node) {
    return node && node->op_type ? node->op_type : "?";
}

osp_error *onnx_node_error(const onnx_node *node, osp_error_code code,
                           const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return osp_error_new(code, "node '%s' (%s): %s", node_name(node),
                         node_op(node), msg);
}

static const char *attr_type_name(onnx_attr_type t) {
    switch (t) {
    case ONNX_ATTR_FLOAT:
        return "FLOAT";
    case ONNX_ATTR_INT:
        return "INT";
    case ONNX_ATTR_STRING:
        return "STRING";
    case ONNX_ATTR_TENSOR:
        return "TENSOR";
    case ONNX_ATTR_GRAPH:
        return "GRAPH";
    case ONNX_ATTR_FLOATS:
        return "FLOATS";
    case ONNX_ATTR_INTS:
        return "INTS";
    case ONNX_ATTR_STRINGS:
        return "STRINGS";
    case ONNX_ATTR_TENSORS:
        return "TENSORS";
    case ONNX_ATTR_GRAPHS:
        return "GRAPHS";
    default:
        return "UNDEFINED";
    }
}

static osp_error *wrong_attr_type(const onnx_node *node, const onnx_attr *a,
                                  const char *want) {
    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                           "attribute '%s' is %s, expected %s", a->name,
                           attr_type_name(a->type), want);
}

osp_error *onnx_error_needs_values(const onnx_node *node, size_t input) {
    const char *name = node && input < node->n_inputs && node->inputs[input]
                           ? node->inputs[input]
                           : "";
    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                           "input %zu ('%s') must be known when the model is "
                           "planned (a constant or computed from shapes)",
                           input, name);
}

osp_error *onnx_required_input(const onnx_node *node, size_t n_inputs,
                               const onnx_desc *inputs, size_t i) {
    if (!onnx_present(n_inputs, inputs, i))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu is required", i);
    return NULL;
}

osp_error *onnx_want_fp32(const onnx_node *node, const onnx_desc *desc,
                          size_t input) {
    if (desc->dtype == OSP_TYPE_FP32)
        return NULL;
    return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                           "input %zu: dtype %s is not supported (FP32 only)",
                           input, osp_datatype_wire_name(desc->dtype));
}

osp_error *onnx_want_fixed_size(const onnx_node *node, osp_datatype dt,
                                const char *what) {
    size_t es = osp_datatype_byte_size(dt);
    if (es == 0 || es > 8)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "%s: dtype %s is not supported", what,
                               osp_datatype_wire_name(dt));
    return NULL;
}

osp_error *onnx_want_movable(const onnx_node *node, osp_datatype dt,
                             const char *what) {
    return dt == OSP_TYPE_BYTES ? NULL : onnx_want_fixed_size(node, dt, what);
}

osp_error *onnx_attr_int(const onnx_node *node, const char *name, int64_t dflt,
                         int64_t *out) {
    const onnx_attr *a = onnx_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return NULL;
    }
    if (a->type != ONNX_ATTR_INT)
        return wrong_attr_type(node, a, "INT");
    *out = a->i;
    return NULL;
}

osp_error *onnx_attr_float(const onnx_node *node, const char *name, float dflt,
                           float *out) {
    const onnx_attr *a = onnx_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return NULL;
    }
    /* Some exporters write an integral float attribute as INT. */
    if (a->type == ONNX_ATTR_INT) {
        *out = (float)a->i;
        return NULL;
    }
    if (a->type != ONNX_ATTR_FLOAT)
        return wrong_attr_type(node, a, "FLOAT");
    *out = a->f;
    return NULL;
}

osp_error *onnx_attr_string(const onnx_node *node, const char *name,
                            const char *dflt, const char **out) {
    const onnx_attr *a = onnx_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return NULL;
    }
    if (a->type != ONNX_ATTR_STRING)
        return wrong_attr_type(node, a, "STRING");
    *out = a->s ? a->s : "";
    return NULL;
}

osp_error *onnx_attr_ints(const onnx_node *node, const char *name,
                          const int64_t **out, size_t *n) {
    const onnx_attr *a = onnx_node_attr(node, name);
    if (!a) {
        *out = NULL;
        *n = 0;
        return NULL;
    }
    if (a->type != ONNX_ATTR_INTS)
        return wrong_attr_type(node, a, "INTS");
    *out = a->ints;
    *n = a->n;
    return NULL;
}

osp_error *onnx_attr_floats(const onnx_node *node, const char *name,
                            const float **out, size_t *n) {
    const onnx_attr *a = onnx_node_attr(node, name);
    if (!a) {
        *out = NULL;
        *n = 0;
        return NULL;
    }
    if (a->type != ONNX_ATTR_FLOATS)
        return wrong_attr_type(node, a, "FLOATS");
    *out = a->floats;
    *n = a->n;
    return NULL;
}

/* The activation names of fused ops' "activation" attribute. */
static const struct {
    const char *name;
    osp_unary_op op;
    float alpha, beta; /* defaults when activation_params is absent */
} fused_activations[] = {
    {"", OSP_UNARY_IDENTITY, 0.0f, 0.0f},
    {"Relu", OSP_UNARY_RELU, 0.0f, 0.0f},
    {"Sigmoid", OSP_UNARY_SIGMOID, 0.0f, 0.0f},
    {"Tanh", OSP_UNARY_TANH, 0.0f, 0.0f},
    {"LeakyRelu", OSP_UNARY_LEAKY_RELU, 0.01f, 0.0f},
    {"Clip", OSP_UNARY_CLIP, -FLT_MAX, FLT_MAX},
    {"HardSigmoid", OSP_UNARY_HARD_SIGMOID, 0.2f, 0.5f},
    {"HardSwish", OSP_UNARY_HARD_SWISH, 0.0f, 0.0f},
    {"Gelu", OSP_UNARY_GELU, 0.0f, 0.0f},
    {"GeluTanh", OSP_UNARY_GELU_TANH, 0.0f, 0.0f},
    {"Silu", OSP_UNARY_SILU, 0.0f, 0.0f},
    {"Elu", OSP_UNARY_ELU, 1.0f, 0.0f},
};

osp_error *onnx_fused_activation(const onnx_node *node, osp_unary_op *op,
                                 float *alpha, float *beta) {
    const char *name = "";
    osp_error *err = onnx_attr_string(node, "activation", "", &name);
    if (err)
        return err;
    const float *params = NULL;
    size_t n_params = 0;
    err = onnx_attr_floats(node, "activation_params", &params, &n_params);
    if (err)
        return err;
    for (size_t i = 0;
         i < sizeof fused_activations / sizeof fused_activations[0]; i++) {
        if (strcmp(fused_activations[i].name, name) != 0)
            continue;
        if (n_params > 2)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'activation_params' has %zu "
                                   "values, at most 2 expected",
                                   n_params);
        *op = fused_activations[i].op;
        *alpha = n_params > 0 ? params[0] : fused_activations[i].alpha;
        *beta = n_params > 1 ? params[1] : fused_activations[i].beta;
        return NULL;
    }
    return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                           "attribute 'activation' = '%s' is not supported",
                           name);
}

osp_error *onnx_read_ints(const onnx_node *node, size_t input,
                          const onnx_desc *desc, int64_t *out, size_t cap,
                          size_t *n) {
    if (!desc || !desc->present || !desc->host)
        return onnx_error_needs_values(node, input);
    if (desc->dtype != OSP_TYPE_INT64 && desc->dtype != OSP_TYPE_INT32)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu is %s, expected INT64 or INT32",
                               input, osp_datatype_wire_name(desc->dtype));
    int64_t count = onnx_shape_count(&desc->shape);
    if (count < 0 || (uint64_t)count > cap)
        return onnx_node_error(
            node, OSP_ERROR_INVALID_ARG,
            "input %zu has %lld values, at most %zu expected", input,
            (long long)count, cap);
    if (desc->dtype == OSP_TYPE_INT64) {
        if (count > 0)
            memcpy(out, desc->host, (size_t)count * sizeof(int64_t));
    } else {
        const int32_t *v = desc->host;
        for (int64_t i = 0; i < count; i++)
            out[i] = v[i];
    }
    *n = (size_t)count;
    return NULL;
}

osp_error *onnx_read_scalar(const onnx_node *node, size_t input,
                            const onnx_desc *desc, double *out) {
    if (!desc || !desc->present || !desc->host)
        return onnx_error_needs_values(node, input);
    if (onnx_shape_count(&desc->shape) < 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu is empty, expected a scalar", input);
    const void *p = desc->host;
    double v;
    switch (desc->dtype) {
    case OSP_TYPE_FP32:
        v = *(const float *)p;
        break;
    case OSP_TYPE_FP64:
        v = *(const double *)p;
        break;
    case OSP_TYPE_FP16:
        v = fp16_to_fp32(*(const uint16_t *)p);
        break;
    case OSP_TYPE_BOOL:
        v = *(const uint8_t *)p ? 1.0 : 0.0;
        break;
    case OSP_TYPE_INT8:
        v = *(const int8_t *)p;
        break;
    case OSP_TYPE_INT16:
        v = *(const int16_t *)p;
        break;
    case OSP_TYPE_INT32:
        v = *(const int32_t *)p;
        break;
    case OSP_TYPE_INT64:
        v = (double)*(const int64_t *)p;
        break;
    case OSP_TYPE_UINT8:
        v = *(const uint8_t *)p;
        break;
    case OSP_TYPE_UINT16:
        v = *(const uint16_t *)p;
        break;
    case OSP_TYPE_UINT32:
        v = *(const uint32_t *)p;
        break;
    case OSP_TYPE_UINT64:
        v = (double)*(const uint64_t *)p;
        break;
    default:
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "input %zu: dtype %s is not supported for a "
                               "scalar",
                               input, osp_datatype_wire_name(desc->dtype));
    }
    *out = v;
    return NULL;
}

osp_error *onnx_axis(const onnx_node *node, int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "axis %lld is out of range for rank %d",
                               (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return NULL;
}

osp_error *onnx_broadcast_shape(const onnx_node *node, const osp_shape *a,
                                const osp_shape *b, osp_shape *out) {
    int rank = a->rank > b->rank ? a->rank : b->rank;
    osp_shape r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1;
        int64_t db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1) {
            r.dims[i] = da;
        } else if (da == 1) {
            r.dims[i] = db;
        } else {
            char sa[256], sb[256];
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "shapes %s and %s do not broadcast",
                                   osp_shape_format(a, sa, sizeof sa),
                                   osp_shape_format(b, sb, sizeof sb));
        }
    }
    *out = r;
    return NULL;
}

void onnx_broadcast_strides(const osp_shape *in, const osp_shape *out,
                            int64_t strides[OSP_MAX_DIMS]) {
    int64_t s = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int j = i - (out->rank - in->rank);
        if (j < 0 || in->dims[j] == 1) {
            strides[i] = 0;
        } else {
            strides[i] = s;
        }
        if (j >= 0)
            s *= in->dims[j];
    }
    for (int i = out->rank; i < OSP_MAX_DIMS; i++)
        strides[i] = 0;
}

void onnx_contiguous_strides(const osp_shape *shape,
                             int64_t strides[OSP_MAX_DIMS]) {
    int64_t s = 1;
    for (int i = shape->rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape->dims[i];
    }
    for (int i = shape->rank; i < OSP_MAX_DIMS; i++)
        strides[i] = 0;
}

int64_t onnx_shape_count(const osp_shape *shape) {
    int64_t count;
    for (int i = 0; i < shape->rank; i++)
        if (shape->dims[i] < 0)
            return 0;
    if (!osp_shape_element_count(shape, &count))
        return 0;
    return count;
}

int64_t onnx_shape_span(const osp_shape *shape, int from, int to) {
    int64_t p = 1;
    if (from < 0)
        from = 0;
    if (to > shape->rank)
        to = shape->rank;
    for (int i = from; i < to; i++)
        p *= shape->dims[i];
    return p;
}

osp_error *onnx_check_shape(const onnx_node *node, const osp_shape *shape,
                            osp_datatype dtype) {
    char buf[256];
    if (shape->rank < 0 || shape->rank > OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "output rank %d is over the limit of %d",
                               shape->rank, OSP_MAX_DIMS);
    for (int i = 0; i < shape->rank; i++)
        if (shape->dims[i] < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "output shape %s has a negative dimension",
                                   osp_shape_format(shape, buf, sizeof buf));
    int64_t count;
    if (!osp_shape_element_count(shape, &count))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "output shape %s has too many elements",
                               osp_shape_format(shape, buf, sizeof buf));
    size_t esize = osp_datatype_byte_size(dtype);
    if (dtype == OSP_TYPE_BYTES)
        esize = ONNX_STRING_BYTES; /* an onnx_string per element */
    if (esize == 0)
        esize = 1;
    if (count > ONNX_MAX_TENSOR_BYTES / (int64_t)esize)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "output shape %s of %s is over the limit of "
                               "%lld bytes",
                               osp_shape_format(shape, buf, sizeof buf),
                               osp_datatype_wire_name(dtype),
                               (long long)ONNX_MAX_TENSOR_BYTES);
    return NULL;
}

osp_datatype onnx_proto_dtype(int64_t t) {
    return t >= 0 && t <= INT32_MAX ? onnx__datatype((int32_t)t)
                                    : OSP_TYPE_INVALID;
}

const char *onnx_proto_dtype_name(int64_t t) {
    return t >= 0 && t <= INT32_MAX ? onnx__datatype_name((int32_t)t)
                                    : "UNKNOWN";
}

void onnx_number_bytes(osp_datatype dt, double v, uint8_t out[8]) {
    memset(out, 0, 8);
    switch (dt) {
    case OSP_TYPE_FP32: {
        float f = (float)v;
        memcpy(out, &f, 4);
        break;
    }
    case OSP_TYPE_FP64:
        memcpy(out, &v, 8);
        break;
    case OSP_TYPE_FP16: {
        uint16_t h = fp32_to_fp16((float)v);
        memcpy(out, &h, 2);
        break;
    }
    case OSP_TYPE_BF16: {
        uint16_t h = fp32_to_bf16((float)v);
        memcpy(out, &h, 2);
        break;
    }
    case OSP_TYPE_BOOL:
        out[0] = v != 0.0;
        break;
    default: { /* integers, little-endian two's complement */
        int64_t i = (int64_t)v;
        memcpy(out, &i, 8);
        break;
    }
    }
}

osp_error *onnx_copy_bytes(osp_stream *stream, void *dst, const void *src,
                           size_t n) {
    if (n == 0 || dst == src)
        return NULL;
    return osp_memcpy_async(stream, dst, src, n, OSP_COPY_DEVICE_TO_DEVICE);
}

osp_error *onnx_fill_f32(osp_stream *stream, float *dst, size_t n, float v) {
    osp_fill_args f = {.elem_size = sizeof v, .dst = dst, .n = n};
    memcpy(f.value, &v, sizeof v);
    return osp_op_fill(stream, &f);
}

osp_error *onnx_fill_i64(osp_stream *stream, int64_t *dst, size_t n,
                         int64_t v) {
    osp_fill_args f = {.elem_size = sizeof v, .dst = dst, .n = n};
    memcpy(f.value, &v, sizeof v);
    return osp_op_fill(stream, &f);
}

osp_error *onnx_iota_i64(osp_stream *stream, int64_t *tmp, int64_t *seq,
                         int64_t n, int64_t step) {
    osp_error *err = onnx_fill_i64(stream, tmp, (size_t)n, step);
    if (err)
        return err;
    osp_cumsum_args cs = {.dtype = OSP_TYPE_INT64,
                          .x = tmp,
                          .y = seq,
                          .outer = 1,
                          .n = n,
                          .inner = 1,
                          .exclusive = true};
    return osp_op_cumsum(stream, &cs);
}

osp_error *onnx_binary_flat(osp_stream *stream, osp_binary_nd_op op,
                            osp_datatype dt, const void *a, bool a_scalar,
                            const void *b, bool b_scalar, void *out,
                            int64_t n) {
    osp_binary_nd_args args = {
        .op = op,
        .dtype = dt,
        .rank = 1,
        .dims = {n},
        .a = a,
        .a_strides = {a_scalar ? 0 : 1},
        .b = b,
        .b_strides = {b_scalar ? 0 : 1},
        .out = out,
    };
    return osp_op_binary_nd(stream, &args);
}

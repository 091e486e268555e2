/*
 * The dispatchers of osprey/tensor_ops.h (all but the matrix-product,
 * convolution and pooling ones, which are in tensor_ops_nn.c): argument
 * checks, then the device's slot.
 *
 * Each dispatcher checks everything an implementation would otherwise
 * repeat: the op and dtype (and their pairing), ranks, non-negative sizes,
 * element counts and strided extents that fit in int64 and in memory, and
 * non-NULL pointers wherever there are elements. So a device may index
 * with int64 freely, and is never called for zero output elements. A NULL
 * slot is UNSUPPORTED.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "device_internal.h"
#include "osprey/device_impl.h"
#include "osprey/error.h"
#include "osprey/tensor_ops.h"

/* ---- the op kinds ------------------------------------------------------ */

static const char *const op_kind_names[OSP_OP_KIND_COUNT_] = {
    [OSP_OP_NONE] = "none",
    [OSP_OP_GEMM] = "gemm",
    [OSP_OP_BINARY] = "binary",
    [OSP_OP_BIAS_ACTIVATION] = "bias_activation",
    [OSP_OP_SOFTMAX_ROWS] = "softmax_rows",
    [OSP_OP_CAST] = "cast",
    [OSP_OP_GEMM_EX] = "gemm_ex",
    [OSP_OP_UNARY] = "unary",
    [OSP_OP_BINARY_ND] = "binary_nd",
    [OSP_OP_WHERE] = "where",
    [OSP_OP_COPY_STRIDED] = "copy_strided",
    [OSP_OP_GATHER] = "gather",
    [OSP_OP_FILL] = "fill",
    [OSP_OP_PAD] = "pad",
    [OSP_OP_REDUCE] = "reduce",
    [OSP_OP_SOFTMAX] = "softmax",
    [OSP_OP_LAYER_NORM] = "layer_norm",
    [OSP_OP_CHANNEL_AFFINE] = "channel_affine",
    [OSP_OP_CONV] = "conv",
    [OSP_OP_CONV_TRANSPOSE] = "conv_transpose",
    [OSP_OP_POOL] = "pool",
    [OSP_OP_TOPK] = "topk",
    [OSP_OP_CUMSUM] = "cumsum",
    [OSP_OP_SCATTER] = "scatter",
};

const char *osp_op_kind_name(osp_op_kind op) {
    if ((int)op < 0 || op >= OSP_OP_KIND_COUNT_ || op_kind_names[op] == NULL)
        return "unknown";
    return op_kind_names[op];
}

bool osp_device_supports_op(const osp_device *dev, osp_op_kind op) {
    if (dev == NULL)
        return false;
    const osp_device_ops *o = dev->ops;
    switch (op) {
    case OSP_OP_GEMM:
        return o->gemm != NULL;
    case OSP_OP_BINARY:
        return o->binary != NULL;
    case OSP_OP_BIAS_ACTIVATION:
        return o->bias_activation != NULL;
    case OSP_OP_SOFTMAX_ROWS:
        return o->softmax_rows != NULL;
    case OSP_OP_CAST:
        return o->cast != NULL;
    case OSP_OP_GEMM_EX: /* the dispatcher falls back to gemm */
        return o->gemm_ex != NULL || o->gemm != NULL;
    case OSP_OP_UNARY:
        return o->unary != NULL;
    case OSP_OP_BINARY_ND:
        return o->binary_nd != NULL;
    case OSP_OP_WHERE:
        return o->where != NULL;
    case OSP_OP_COPY_STRIDED:
        return o->copy_strided != NULL;
    case OSP_OP_GATHER:
        return o->gather != NULL;
    case OSP_OP_FILL:
        return o->fill != NULL;
    case OSP_OP_PAD:
        return o->pad != NULL;
    case OSP_OP_REDUCE:
        return o->reduce != NULL;
    case OSP_OP_SOFTMAX:
        return o->softmax != NULL;
    case OSP_OP_LAYER_NORM:
        return o->layer_norm != NULL;
    case OSP_OP_CHANNEL_AFFINE:
        return o->channel_affine != NULL;
    case OSP_OP_CONV:
        return o->conv != NULL;
    case OSP_OP_CONV_TRANSPOSE:
        return o->conv_transpose != NULL;
    case OSP_OP_POOL:
        return o->pool != NULL;
    case OSP_OP_TOPK:
        return o->topk != NULL;
    case OSP_OP_CUMSUM:
        return o->cumsum != NULL;
    case OSP_OP_SCATTER:
        return o->scatter != NULL;
    case OSP_OP_NONE: /* ends lists; no op */
    case OSP_OP_KIND_COUNT_:
        break;
    }
    return false;
}

/* ---- checks shared by the dispatchers ---------------------------------- */

/* The largest element count any tensor may have: its byte size (for the
 * widest element, 16 bytes) must fit in size_t and its index in int64. */
#define MAX_ELEMENTS ((uint64_t)INT64_MAX / 16)

static osp_error *unsupported(osp_stream *stream, osp_op_kind op) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED, "device %s has no %s op",
                         stream->device->info.name, osp_op_kind_name(op));
}

static osp_error *missing_args(const char *op) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "%s: stream and args are required", op);
}

/* *count = a * b * c for non-negative sizes, the product at most
 * MAX_ELEMENTS; false when a size is negative or the product too large. */
static bool count3(int64_t a, int64_t b, int64_t c, uint64_t *count) {
    uint64_t ab, abc;
    if (a < 0 || b < 0 || c < 0 ||
        __builtin_mul_overflow((uint64_t)a, (uint64_t)b, &ab) ||
        __builtin_mul_overflow(ab, (uint64_t)c, &abc) || abc > MAX_ELEMENTS)
        return false;
    *count = abc;
    return true;
}

/* [outer, n, inner]-shaped operands: INVALID_ARG unless all three are
 * non-negative and the element count fits; *count gets it. */
static osp_error *check_3d(const char *op, int64_t outer, int64_t n,
                           int64_t inner, uint64_t *count) {
    if (!count3(outer, n, inner, count))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: invalid shape [%lld, %lld, %lld]", op,
                             (long long)outer, (long long)n, (long long)inner);
    return NULL;
}

/* rank in [0, OSP_MAX_DIMS], every dim >= 0 and the element count (1 for
 * rank 0) at most MAX_ELEMENTS; *count gets it. `what` names the shape in
 * messages. */
static osp_error *check_dims(const char *op, const char *what, int rank,
                             const int64_t *dims, uint64_t *count) {
    if (rank < 0 || rank > OSP_MAX_DIMS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: rank %d outside [0, %d]", op, rank,
                             OSP_MAX_DIMS);
    uint64_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: %s dimension %d is negative (%lld)", op,
                                 what, d, (long long)dims[d]);
        if (n != 0 && (__builtin_mul_overflow(n, (uint64_t)dims[d], &n) ||
                       n > MAX_ELEMENTS))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: %s has too many elements", op, what);
        if (dims[d] == 0)
            n = 0;
    }
    *count = n;
    return NULL;
}

/* An operand read through `strides` over a non-empty box `dims`: the
 * farthest element, sum |stride| (dim - 1), must be addressable (its byte
 * offset fits in int64), so that implementations may compute offsets
 * freely. */
static osp_error *check_strides(const char *op, const char *what, int rank,
                                const int64_t *dims, const int64_t *strides,
                                size_t elem_size) {
    uint64_t reach = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] <= 1)
            continue;
        uint64_t s = strides[d] < 0 ? 0 - (uint64_t)strides[d]
                                    : (uint64_t)strides[d],
                 step;
        if (__builtin_mul_overflow(s, (uint64_t)(dims[d] - 1), &step) ||
            __builtin_add_overflow(reach, step, &reach) ||
            reach > (uint64_t)INT64_MAX / elem_size)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: strides of %s reach past any tensor", op,
                                 what);
    }
    return NULL;
}

static osp_error *null_operand(const char *op, const char *what) {
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s: %s is NULL", op, what);
}

static bool dtype_is_float(osp_datatype dt) {
    return dt == OSP_TYPE_FP32 || dt == OSP_TYPE_FP64;
}

static bool dtype_is_signed_int(osp_datatype dt) {
    return dt == OSP_TYPE_INT8 || dt == OSP_TYPE_INT16 ||
           dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64;
}

static bool dtype_is_unsigned_int(osp_datatype dt) {
    return dt == OSP_TYPE_UINT8 || dt == OSP_TYPE_UINT16 ||
           dt == OSP_TYPE_UINT32 || dt == OSP_TYPE_UINT64;
}

static bool dtype_is_number(osp_datatype dt) {
    return dtype_is_float(dt) || dtype_is_signed_int(dt) ||
           dtype_is_unsigned_int(dt);
}

static const char *dtype_name(osp_datatype dt) {
    return osp_datatype_wire_name(dt);
}

/* ---- elementwise ------------------------------------------------------- */

/* The dtypes each unary op takes: IDENTITY any fixed-size type (a copy),
 * ABS signed and unsigned integers, NEG SIGN RELU CLIP signed integers,
 * NOT BOOL, the rest FP32 (all ops but NOT take FP32). */
static bool unary_dtype_ok(osp_unary_op op, osp_datatype dt) {
    switch (op) {
    case OSP_UNARY_IDENTITY:
        return dt > OSP_TYPE_INVALID && dt < OSP_TYPE_COUNT_ &&
               dt != OSP_TYPE_BYTES;
    case OSP_UNARY_NOT:
        return dt == OSP_TYPE_BOOL;
    case OSP_UNARY_ABS:
        return dt == OSP_TYPE_FP32 || dtype_is_signed_int(dt) ||
               dtype_is_unsigned_int(dt);
    case OSP_UNARY_NEG:
    case OSP_UNARY_SIGN:
    case OSP_UNARY_RELU:
    case OSP_UNARY_CLIP:
        return dt == OSP_TYPE_FP32 || dtype_is_signed_int(dt);
    default:
        return dt == OSP_TYPE_FP32;
    }
}

osp_error *osp_op_unary(osp_stream *stream, const osp_unary_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("unary");
    if ((int)args->op < 0 || args->op >= OSP_UNARY_OP_COUNT_)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "unary: unknown op %d",
                             (int)args->op);
    if (!unary_dtype_ok(args->op, args->dtype))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "unary: op %d does not take datatype %s",
                             (int)args->op, dtype_name(args->dtype));
    if (args->n > MAX_ELEMENTS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unary: %zu elements are too many", args->n);
    if (args->n == 0)
        return NULL;
    if (args->x == NULL || args->y == NULL)
        return null_operand("unary", args->x == NULL ? "x" : "y");
    if (stream->device->ops->unary == NULL)
        return unsupported(stream, OSP_OP_UNARY);
    return stream->device->ops->unary(stream->device, stream->impl, args);
}

/* The dtypes of osp_binary_nd_op, as the header lists them. */
static bool binary_nd_dtype_ok(osp_binary_nd_op op, osp_datatype dt) {
    switch (op) {
    case OSP_BINARY_ND_ADD:
    case OSP_BINARY_ND_SUB:
    case OSP_BINARY_ND_MUL:
    case OSP_BINARY_ND_DIV:
    case OSP_BINARY_ND_MAX:
    case OSP_BINARY_ND_MIN:
    case OSP_BINARY_ND_MOD:
    case OSP_BINARY_ND_FMOD:
    case OSP_BINARY_ND_PRELU:
    case OSP_BINARY_ND_POW:
    case OSP_BINARY_ND_LESS:
    case OSP_BINARY_ND_LESS_EQUAL:
    case OSP_BINARY_ND_GREATER:
    case OSP_BINARY_ND_GREATER_EQUAL:
        return dtype_is_number(dt);
    case OSP_BINARY_ND_EQUAL:
        return dtype_is_number(dt) || dt == OSP_TYPE_BOOL;
    case OSP_BINARY_ND_AND:
    case OSP_BINARY_ND_OR:
    case OSP_BINARY_ND_XOR:
        return dt == OSP_TYPE_BOOL;
    case OSP_BINARY_ND_BITSHIFT_LEFT:
    case OSP_BINARY_ND_BITSHIFT_RIGHT:
        return dtype_is_unsigned_int(dt);
    case OSP_BINARY_ND_OP_COUNT_:
        break;
    }
    return false;
}

osp_error *osp_op_binary_nd(osp_stream *stream,
                            const osp_binary_nd_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("binary_nd");
    if ((int)args->op < 0 || args->op >= OSP_BINARY_ND_OP_COUNT_)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "binary_nd: unknown op %d",
                             (int)args->op);
    if (!binary_nd_dtype_ok(args->op, args->dtype))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "binary_nd: op %d does not take datatype %s",
                             (int)args->op, dtype_name(args->dtype));
    uint64_t count = 0;
    osp_error *err =
        check_dims("binary_nd", "output", args->rank, args->dims, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    size_t es = osp_datatype_byte_size(args->dtype);
    if ((err = check_strides("binary_nd", "a", args->rank, args->dims,
                             args->a_strides, es)) != NULL ||
        (err = check_strides("binary_nd", "b", args->rank, args->dims,
                             args->b_strides, es)) != NULL)
        return err;
    if (args->a == NULL || args->b == NULL || args->out == NULL)
        return null_operand("binary_nd", args->a == NULL   ? "a"
                                         : args->b == NULL ? "b"
                                                           : "out");
    if (stream->device->ops->binary_nd == NULL)
        return unsupported(stream, OSP_OP_BINARY_ND);
    return stream->device->ops->binary_nd(stream->device, stream->impl, args);
}

static bool elem_size_ok(size_t es, bool allow_16) {
    return es == 1 || es == 2 || es == 4 || es == 8 || (allow_16 && es == 16);
}

osp_error *osp_op_where(osp_stream *stream, const osp_where_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("where");
    if (!elem_size_ok(args->elem_size, false))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "where: element size %zu is not 1, 2, 4 or 8",
                             args->elem_size);
    uint64_t count = 0;
    osp_error *err =
        check_dims("where", "output", args->rank, args->dims, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    if ((err = check_strides("where", "cond", args->rank, args->dims,
                             args->cond_strides, 1)) != NULL ||
        (err = check_strides("where", "x", args->rank, args->dims,
                             args->x_strides, args->elem_size)) != NULL ||
        (err = check_strides("where", "y", args->rank, args->dims,
                             args->y_strides, args->elem_size)) != NULL)
        return err;
    if (args->cond == NULL || args->x == NULL || args->y == NULL ||
        args->out == NULL)
        return null_operand("where", args->cond == NULL ? "cond"
                                     : args->x == NULL  ? "x"
                                     : args->y == NULL  ? "y"
                                                        : "out");
    if (stream->device->ops->where == NULL)
        return unsupported(stream, OSP_OP_WHERE);
    return stream->device->ops->where(stream->device, stream->impl, args);
}

/* ---- data movement ----------------------------------------------------- */

osp_error *osp_op_copy_strided(osp_stream *stream,
                               const osp_copy_strided_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("copy_strided");
    if (!elem_size_ok(args->elem_size, true))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "copy_strided: element size %zu is not 1, 2, 4, 8 or 16",
            args->elem_size);
    uint64_t count = 0;
    osp_error *err =
        check_dims("copy_strided", "box", args->rank, args->dims, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    for (int d = 0; d < args->rank; d++)
        if (args->dims[d] > 1 && args->dst_strides[d] <= 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "copy_strided: dst stride %d is %lld, not "
                                 "positive",
                                 d, (long long)args->dst_strides[d]);
    if ((err = check_strides("copy_strided", "src", args->rank, args->dims,
                             args->src_strides, args->elem_size)) != NULL ||
        (err = check_strides("copy_strided", "dst", args->rank, args->dims,
                             args->dst_strides, args->elem_size)) != NULL)
        return err;
    if (args->src == NULL || args->dst == NULL)
        return null_operand("copy_strided", args->src == NULL ? "src" : "dst");
    if (stream->device->ops->copy_strided == NULL)
        return unsupported(stream, OSP_OP_COPY_STRIDED);
    return stream->device->ops->copy_strided(stream->device, stream->impl,
                                             args);
}

osp_error *osp_op_gather(osp_stream *stream, const osp_gather_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("gather");
    if (!elem_size_ok(args->elem_size, true))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gather: element size %zu is not 1, 2, 4, 8 or 16",
                             args->elem_size);
    if (args->index_dtype != OSP_TYPE_INT32 &&
        args->index_dtype != OSP_TYPE_INT64)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "gather: index datatype %s is not INT32 or INT64",
                             dtype_name(args->index_dtype));
    uint64_t data_count = 0, out_count = 0;
    osp_error *err;
    if ((err = check_3d("gather", args->outer, args->axis_len, args->inner,
                        &data_count)) != NULL ||
        (err = check_3d("gather", args->outer, args->n_indices, args->inner,
                        &out_count)) != NULL)
        return err;
    if (out_count == 0)
        return NULL;
    if ((data_count > 0 && args->data == NULL) || args->indices == NULL ||
        args->out == NULL)
        return null_operand("gather", args->indices == NULL ? "indices"
                                      : args->out == NULL   ? "out"
                                                            : "data");
    if (stream->device->ops->gather == NULL)
        return unsupported(stream, OSP_OP_GATHER);
    return stream->device->ops->gather(stream->device, stream->impl, args);
}

osp_error *osp_op_fill(osp_stream *stream, const osp_fill_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("fill");
    if (!elem_size_ok(args->elem_size, false))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "fill: element size %zu is not 1, 2, 4 or 8",
                             args->elem_size);
    if (args->n > MAX_ELEMENTS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "fill: %zu elements are too many", args->n);
    if (args->n == 0)
        return NULL;
    if (args->dst == NULL)
        return null_operand("fill", "dst");
    if (stream->device->ops->fill == NULL)
        return unsupported(stream, OSP_OP_FILL);
    return stream->device->ops->fill(stream->device, stream->impl, args);
}

osp_error *osp_op_pad(osp_stream *stream, const osp_pad_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("pad");
    if ((int)args->mode < OSP_PAD_CONSTANT || args->mode > OSP_PAD_WRAP)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "pad: unknown mode %d",
                             (int)args->mode);
    if (!elem_size_ok(args->elem_size, false))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "pad: element size %zu is not 1, 2, 4 or 8",
                             args->elem_size);
    uint64_t in_count = 0, out_count = 0;
    osp_error *err =
        check_dims("pad", "input", args->rank, args->in_dims, &in_count);
    if (err != NULL)
        return err;
    int64_t out_dims[OSP_MAX_DIMS];
    for (int d = 0; d < args->rank; d++) {
        int64_t in = args->in_dims[d], b = args->pad_begin[d],
                e = args->pad_end[d];
        /* Pads crop at most the whole dimension and add at most what any
         * tensor could hold; the input left after cropping is kept. */
        int64_t kept = in + (b < 0 ? b : 0) + (e < 0 ? e : 0);
        int64_t grow = (b > 0 ? b : 0), grow_end = (e > 0 ? e : 0);
        if (in > (int64_t)MAX_ELEMENTS || b < -in || e < -in || kept < 0 ||
            grow > (int64_t)MAX_ELEMENTS || grow_end > (int64_t)MAX_ELEMENTS)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "pad: pads %lld and %lld do not fit "
                                 "dimension %d of size %lld",
                                 (long long)b, (long long)e, d, (long long)in);
        out_dims[d] = kept + grow + grow_end;
        bool padded = grow > 0 || grow_end > 0;
        if (padded && kept == 0 && args->mode != OSP_PAD_CONSTANT)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "pad: dimension %d has no element left to "
                                 "pad from",
                                 d);
        if (args->mode == OSP_PAD_REFLECT && (grow >= kept || grow_end >= kept))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "pad: reflect pads %lld and %lld must be "
                                 "less than dimension %d (%lld)",
                                 (long long)grow, (long long)grow_end, d,
                                 (long long)kept);
    }
    if ((err = check_dims("pad", "output", args->rank, out_dims, &out_count)) !=
        NULL)
        return err;
    if (out_count == 0)
        return NULL;
    if ((in_count > 0 && args->x == NULL) || args->y == NULL)
        return null_operand("pad", args->y == NULL ? "y" : "x");
    if (stream->device->ops->pad == NULL)
        return unsupported(stream, OSP_OP_PAD);
    return stream->device->ops->pad(stream->device, stream->impl, args);
}

/* ---- reductions and normalisations ------------------------------------- */

osp_error *osp_op_reduce(osp_stream *stream, const osp_reduce_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("reduce");
    osp_reduce_op op = args->op;
    if ((int)op < 0 || op >= OSP_REDUCE_OP_COUNT_)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "reduce: unknown op %d",
                             (int)op);
    bool int_ok = op == OSP_REDUCE_SUM || op == OSP_REDUCE_MAX ||
                  op == OSP_REDUCE_MIN || op == OSP_REDUCE_PROD ||
                  op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN;
    if (args->dtype != OSP_TYPE_FP32 &&
        !(int_ok &&
          (args->dtype == OSP_TYPE_INT32 || args->dtype == OSP_TYPE_INT64)))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "reduce: op %d does not take datatype %s", (int)op,
                             dtype_name(args->dtype));
    uint64_t in_count = 0, out_count = 0;
    osp_error *err;
    if ((err = check_3d("reduce", args->outer, args->n, args->inner,
                        &in_count)) != NULL ||
        (err = check_3d("reduce", args->outer, 1, args->inner, &out_count)) !=
            NULL)
        return err;
    if (out_count == 0)
        return NULL;
    if (args->n == 0 && (op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "reduce: arg%s over an empty axis",
                             op == OSP_REDUCE_ARGMAX ? "max" : "min");
    if ((in_count > 0 && args->x == NULL) || args->out == NULL)
        return null_operand("reduce", args->out == NULL ? "out" : "x");
    if (stream->device->ops->reduce == NULL)
        return unsupported(stream, OSP_OP_REDUCE);
    return stream->device->ops->reduce(stream->device, stream->impl, args);
}

osp_error *osp_op_softmax(osp_stream *stream, const osp_softmax_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("softmax");
    uint64_t count = 0;
    osp_error *err =
        check_3d("softmax", args->outer, args->n, args->inner, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    if (args->x == NULL || args->out == NULL)
        return null_operand("softmax", args->x == NULL ? "x" : "out");
    if (stream->device->ops->softmax == NULL)
        return unsupported(stream, OSP_OP_SOFTMAX);
    return stream->device->ops->softmax(stream->device, stream->impl, args);
}

/* With cols == 0 there is nothing to normalise, but mean and inv_std (when
 * asked for) still get a value per row: 0 and 1 / sqrt(epsilon). */
osp_error *osp_op_layer_norm(osp_stream *stream,
                             const osp_layer_norm_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("layer_norm");
    uint64_t count = 0;
    osp_error *err = check_3d("layer_norm", args->rows, args->cols, 1, &count);
    if (err != NULL)
        return err;
    bool stats = args->mean != NULL || args->inv_std != NULL;
    if (args->rows == 0 || (count == 0 && !stats))
        return NULL;
    if (count > 0 && (args->x == NULL || args->out == NULL))
        return null_operand("layer_norm", args->x == NULL ? "x" : "out");
    if (stream->device->ops->layer_norm == NULL)
        return unsupported(stream, OSP_OP_LAYER_NORM);
    return stream->device->ops->layer_norm(stream->device, stream->impl, args);
}

osp_error *osp_op_channel_affine(osp_stream *stream,
                                 const osp_channel_affine_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("channel_affine");
    osp_unary_op act = args->act;
    if ((int)act < 0 || act >= OSP_UNARY_OP_COUNT_ || act == OSP_UNARY_NOT ||
        act == OSP_UNARY_ISNAN || act == OSP_UNARY_ISINF)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "channel_affine: op %d is not an FP32 "
                             "activation",
                             (int)act);
    uint64_t count = 0;
    osp_error *err = check_3d("channel_affine", args->batch, args->channels,
                              args->spatial, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    if (args->x == NULL || args->out == NULL)
        return null_operand("channel_affine", args->x == NULL ? "x" : "out");
    if (stream->device->ops->channel_affine == NULL)
        return unsupported(stream, OSP_OP_CHANNEL_AFFINE);
    return stream->device->ops->channel_affine(stream->device, stream->impl,
                                               args);
}

/* ---- selection and scans ----------------------------------------------- */

osp_error *osp_op_topk(osp_stream *stream, const osp_topk_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("topk");
    if (args->dtype != OSP_TYPE_FP32 && args->dtype != OSP_TYPE_INT64)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "topk: datatype %s is not FP32 or INT64",
                             dtype_name(args->dtype));
    uint64_t in_count = 0, out_count = 0;
    osp_error *err;
    if ((err = check_3d("topk", args->outer, args->n, args->inner,
                        &in_count)) != NULL)
        return err;
    if (args->k < 0 || args->k > args->n)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "topk: k=%lld outside [0, %lld]",
                             (long long)args->k, (long long)args->n);
    (void)count3(args->outer, args->k, args->inner, &out_count);
    if (out_count == 0)
        return NULL;
    if (args->x == NULL || args->values == NULL || args->indices == NULL)
        return null_operand("topk", args->x == NULL        ? "x"
                                    : args->values == NULL ? "values"
                                                           : "indices");
    if (stream->device->ops->topk == NULL)
        return unsupported(stream, OSP_OP_TOPK);
    return stream->device->ops->topk(stream->device, stream->impl, args);
}

osp_error *osp_op_cumsum(osp_stream *stream, const osp_cumsum_args *args) {
    if (stream == NULL || args == NULL)
        return missing_args("cumsum");
    if (args->dtype != OSP_TYPE_FP32 && args->dtype != OSP_TYPE_INT32 &&
        args->dtype != OSP_TYPE_INT64)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "cumsum: datatype %s is not FP32, INT32 or INT64",
                             dtype_name(args->dtype));
    uint64_t count = 0;
    osp_error *err =
        check_3d("cumsum", args->outer, args->n, args->inner, &count);
    if (err != NULL)
        return err;
    if (count == 0)
        return NULL;
    if (args->x == NULL || args->y == NULL)
        return null_operand("cumsum", args->x == NULL ? "x" : "y");
    if (stream->device->ops->cumsum == NULL)
        return unsupported(stream, OSP_OP_CUMSUM);
    return stream->device->ops->cumsum(stream->device, stream->impl, args);
}

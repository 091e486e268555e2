/*
 * Dispatch of the index-driven tensor ops of osprey/tensor_ops.h
 * (scatter): argument checks, so that a device may trust what it is given
 * (a dtype the reduction takes, [outer, len, inner] shapes whose element
 * counts fit in int64 and in memory, pointers set where there are
 * elements), and the zero-element shortcut.
 */
#include <stdint.h>

#include "device_internal.h"
#include "osprey/device_impl.h"
#include "osprey/error.h"
#include "osprey/tensor_ops.h"

/* The largest element count any operand may have: its byte size (for the
 * widest element, 16 bytes) must fit in size_t and its index in int64. */
#define MAX_ELEMENTS ((uint64_t)INT64_MAX / 16)

/* *count = a * b * c for non-negative sizes, at most MAX_ELEMENTS; false
 * when a size is negative or the product too large. */
static bool count3(int64_t a, int64_t b, int64_t c, uint64_t *count) {
    uint64_t ab, abc;
    if (a < 0 || b < 0 || c < 0 ||
        __builtin_mul_overflow((uint64_t)a, (uint64_t)b, &ab) ||
        __builtin_mul_overflow(ab, (uint64_t)c, &abc) || abc > MAX_ELEMENTS)
        return false;
    *count = abc;
    return true;
}

/* ---- scatter ------------------------------------------------------------ */

/* Whether `reduction` combines elements of `dtype`: NONE moves any
 * fixed-size element, the arithmetic ones take FP32, INT32 and INT64. */
static bool scatter_dtype_ok(osp_scatter_reduction reduction,
                             osp_datatype dtype) {
    if (dtype <= OSP_TYPE_INVALID || dtype >= OSP_TYPE_COUNT_ ||
        osp_datatype_byte_size(dtype) == 0)
        return false;
    if (reduction == OSP_SCATTER_NONE)
        return true;
    return dtype == OSP_TYPE_FP32 || dtype == OSP_TYPE_INT32 ||
           dtype == OSP_TYPE_INT64;
}

osp_error *osp_op_scatter(osp_stream *stream, const osp_scatter_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "scatter: stream and args are required");
    if ((int)args->reduction < 0 ||
        args->reduction >= OSP_SCATTER_REDUCTION_COUNT_)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "scatter: unknown reduction %d",
                             (int)args->reduction);
    if (!scatter_dtype_ok(args->reduction, args->dtype))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "scatter: datatype %s is not supported for "
                             "reduction %d",
                             osp_datatype_wire_name(args->dtype),
                             (int)args->reduction);
    if (args->index_dtype != OSP_TYPE_INT32 &&
        args->index_dtype != OSP_TYPE_INT64)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "scatter: index datatype %s is not INT32 or "
                             "INT64",
                             osp_datatype_wire_name(args->index_dtype));
    uint64_t data_count, update_count;
    if (!count3(args->outer, args->axis_len, args->inner, &data_count) ||
        !count3(args->outer, args->n_indices, args->inner, &update_count))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "scatter: invalid shape outer=%lld "
                             "axis_len=%lld inner=%lld n_indices=%lld",
                             (long long)args->outer, (long long)args->axis_len,
                             (long long)args->inner,
                             (long long)args->n_indices);
    if (update_count == 0)
        return NULL;
    if (args->indices == NULL || args->updates == NULL ||
        (data_count > 0 && args->data == NULL))
        return osp_error_new(OSP_ERROR_INVALID_ARG, "scatter: %s is NULL",
                             args->indices == NULL   ? "indices"
                             : args->updates == NULL ? "updates"
                                                     : "data");
    if (stream->device->ops->scatter == NULL)
        return osp_error_new(OSP_ERROR_UNSUPPORTED, "device %s has no %s op",
                             stream->device->info.name,
                             osp_op_kind_name(OSP_OP_SCATTER));
    return stream->device->ops->scatter(stream->device, stream->impl, args);
}

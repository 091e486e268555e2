/*
 * The string_add_sub backend (Triton's `simple_string` model): two BYTES
 * inputs whose elements are decimal integers written as text, two BYTES
 * outputs, OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1,
 * elementwise, written as decimal text. Values are 64-bit signed integers;
 * a result that does not fit is an error. Inputs and outputs are taken by
 * position; their names are free.
 *
 * Text has no device op, so the work is done on host copies obtained
 * through the device API: the inputs are copied device-to-host on the
 * instance's stream, parsed and summed on the host once the stream is
 * synchronised, and the outputs are copied host-to-device on the stream.
 * Device memory is never touched from the host.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../builtin.h"

/* The longest element accepted as a number ("-9223372036854775808" is 20
 * characters; leading zeros and a '+' sign get some room). */
#define STRING_ADD_SUB_MAX_DIGITS 64
/* Room for one output element: the 4-byte length and the text. */
#define STRING_ADD_SUB_OUT_ELEMENT (4 + 20)

typedef struct string_add_sub_model {
    char *name;
} string_add_sub_model;

/* Checks one config tensor against INPUT0: BYTES, the same dims. */
static osp_error *check_like_input0(const osp_model_config *config,
                                    const osp_model_io *io, const char *kind) {
    const osp_model_io *first = &config->inputs[0];
    char want[160], got[160];
    if (io->dtype != OSP_TYPE_BYTES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': %s '%s' is %s; all "
                             "four must be TYPE_STRING",
                             config->name, kind, io->name,
                             osp_datatype_config_name(io->dtype));
    if (!osp_shape_equal(&io->dims, &first->dims))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "string_add_sub model '%s': %s '%s' has dims %s but input '%s' "
            "has dims %s; all four must have the same dims",
            config->name, kind, io->name,
            osp_shape_format(&io->dims, got, sizeof got), first->name,
            osp_shape_format(&first->dims, want, sizeof want));
    return NULL;
}

static osp_error *string_add_sub_model_new(const osp_model_config *config,
                                           const char *version_path,
                                           void **out) {
    (void)version_path;
    osp_error *err = NULL;

    if (config->n_inputs != 2 || config->n_outputs != 2)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': needs exactly 2 "
                             "inputs and 2 outputs, got %zu inputs and %zu "
                             "outputs",
                             config->name, config->n_inputs, config->n_outputs);
    if ((err = check_like_input0(config, &config->inputs[0], "input")) ||
        (err = check_like_input0(config, &config->inputs[1], "input")) ||
        (err = check_like_input0(config, &config->outputs[0], "output")) ||
        (err = check_like_input0(config, &config->outputs[1], "output")))
        return err;

    string_add_sub_model *model = calloc(1, sizeof *model);
    if (!model || !(model->name = strdup(config->name))) {
        free(model);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "string_add_sub model '%s': out of memory",
                             config->name);
    }
    *out = model;
    return NULL;
}

static void string_add_sub_model_free(void *opaque) {
    string_add_sub_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model);
}

/* Instances need no state of their own: the instance is the model. */
static osp_error *string_add_sub_instance_new(void *model, osp_device *device,
                                              osp_stream *stream,
                                              void **instance) {
    (void)device;
    (void)stream;
    *instance = model;
    return NULL;
}

static void string_add_sub_instance_free(void *instance) {
    (void)instance;
}

/* Checks that both inputs are present, BYTES and of the same shape. Sets
 * *count to the element count. */
static osp_error *check_inputs(const string_add_sub_model *model,
                               const osp_backend_tensor *a,
                               const osp_backend_tensor *b, size_t *count) {
    char sa[160], sb[160];
    int64_t n;
    if (!builtin_input_given(a) || !builtin_input_given(b))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': input '%s' is missing",
                             model->name,
                             builtin_input_given(a) ? b->name : a->name);
    if (a->dtype != OSP_TYPE_BYTES || b->dtype != OSP_TYPE_BYTES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': inputs must be BYTES",
                             model->name);
    if (!osp_shape_equal(&a->shape, &b->shape))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "string_add_sub model '%s': input '%s' has shape %s but "
            "input '%s' has shape %s; they must match",
            model->name, a->name, osp_shape_format(&a->shape, sa, sizeof sa),
            b->name, osp_shape_format(&b->shape, sb, sizeof sb));
    if (!osp_shape_element_count(&a->shape, &n) || n < 0 ||
        (uint64_t)n > SIZE_MAX / STRING_ADD_SUB_OUT_ELEMENT)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': shape %s is too "
                             "large",
                             model->name,
                             osp_shape_format(&a->shape, sa, sizeof sa));
    *count = (size_t)n;
    return NULL;
}

/* Reads element `index` of a serialized BYTES tensor at *pos (advanced
 * past it) as a decimal integer. `t` names the tensor in errors. */
static osp_error *read_integer(const string_add_sub_model *model,
                               const osp_backend_tensor *t,
                               const uint8_t *bytes, size_t *pos, size_t index,
                               int64_t *value) {
    size_t left = t->byte_size - *pos;
    if (left < 4)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': input '%s' holds "
                             "fewer elements than its shape",
                             model->name, t->name);
    const uint8_t *p = bytes + *pos;
    uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24;
    if (len > left - 4)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': element %zu of "
                             "input '%s' runs past the tensor's data",
                             model->name, index, t->name);
    char text[STRING_ADD_SUB_MAX_DIGITS + 1];
    bool valid = len > 0 && len <= STRING_ADD_SUB_MAX_DIGITS;
    if (valid) {
        memcpy(text, p + 4, len);
        text[len] = '\0';
        /* strtoll would skip leading spaces; the element must be a number
         * and nothing else (an embedded NUL ends `text` early, so the end
         * is checked against len). */
        valid = text[0] == '-' || text[0] == '+' ||
                (text[0] >= '0' && text[0] <= '9');
    }
    if (valid) {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        valid = errno == 0 && end == text + len;
        *value = v;
    }
    if (!valid)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': element %zu of "
                             "input '%s' is not a 64-bit decimal integer",
                             model->name, index, t->name);
    *pos += 4 + (size_t)len;
    return NULL;
}

/* Appends one element, `value` as text, to a serialized BYTES tensor. */
static size_t write_integer(uint8_t *out, int64_t value) {
    char text[24];
    int n = snprintf(text, sizeof text, "%" PRId64, value);
    uint32_t len = (uint32_t)n;
    out[0] = (uint8_t)len;
    out[1] = (uint8_t)(len >> 8);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 24);
    memcpy(out + 4, text, len);
    return 4 + (size_t)len;
}

static void free_host_buffer(void *buf) {
    osp_buffer_free(buf);
}

/* Frees `buf` (ownership moves) once the work enqueued on `stream` so far
 * has finished: in a host function, or after a synchronisation when none
 * can be launched. */
static void free_after_stream(osp_stream *stream, osp_buffer *buf) {
    osp_error *err = osp_stream_launch_host_func(stream, free_host_buffer, buf);
    if (!err)
        return;
    osp_error_free(err);
    err = osp_stream_synchronize(stream);
    osp_error_free(err);
    osp_buffer_free(buf);
}

static osp_error *string_add_sub_execute(void *instance, osp_execute_ctx *ctx) {
    const string_add_sub_model *model = instance;
    osp_device *device = osp_execute_device(ctx);
    osp_stream *stream = osp_execute_stream(ctx);
    osp_buffer *in_host = NULL, *out_host = NULL;
    osp_error *err;
    size_t count = 0;

    if (osp_execute_input_count(ctx) != 2)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "string_add_sub model '%s': got %zu inputs, "
                             "expected 2",
                             model->name, osp_execute_input_count(ctx));
    const osp_backend_tensor *a = osp_execute_input(ctx, 0);
    const osp_backend_tensor *b = osp_execute_input(ctx, 1);
    if ((err = check_inputs(model, a, b, &count)))
        return err;
    if (a->byte_size > SIZE_MAX - b->byte_size)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "string_add_sub model '%s': inputs too large",
                             model->name);

    /* The inputs, on the host. */
    if ((err = osp_device_alloc_host(device, a->byte_size + b->byte_size,
                                     &in_host)))
        goto out;
    uint8_t *a_bytes = in_host->data;
    uint8_t *b_bytes = a_bytes + a->byte_size;
    if ((a->byte_size &&
         (err = osp_memcpy_async(stream, a_bytes, a->data, a->byte_size,
                                 OSP_COPY_DEVICE_TO_HOST))) ||
        (b->byte_size &&
         (err = osp_memcpy_async(stream, b_bytes, b->data, b->byte_size,
                                 OSP_COPY_DEVICE_TO_HOST))) ||
        (err = osp_stream_synchronize(stream)))
        goto out;

    /* Both outputs, serialized side by side on the host. */
    size_t out_room = count * STRING_ADD_SUB_OUT_ELEMENT;
    if ((err = osp_device_alloc_host(device, 2 * out_room, &out_host)))
        goto out;
    uint8_t *sum_bytes = out_host->data;
    uint8_t *diff_bytes = sum_bytes + out_room;
    size_t a_pos = 0, b_pos = 0, sum_len = 0, diff_len = 0;
    for (size_t i = 0; i < count; i++) {
        int64_t x, y, sum, diff;
        if ((err = read_integer(model, a, a_bytes, &a_pos, i, &x)) ||
            (err = read_integer(model, b, b_bytes, &b_pos, i, &y)))
            goto out;
        if (__builtin_add_overflow(x, y, &sum) ||
            __builtin_sub_overflow(x, y, &diff)) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "string_add_sub model '%s': element %zu: "
                                "the result does not fit in 64 bits",
                                model->name, i);
            goto out;
        }
        sum_len += write_integer(sum_bytes + sum_len, sum);
        diff_len += write_integer(diff_bytes + diff_len, diff);
    }
    if (a_pos != a->byte_size || b_pos != b->byte_size) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "string_add_sub model '%s': input '%s' holds more "
                            "bytes than its shape's elements",
                            model->name,
                            a_pos != a->byte_size ? a->name : b->name);
        goto out;
    }

    const uint8_t *results[2] = {sum_bytes, diff_bytes};
    const size_t lengths[2] = {sum_len, diff_len};
    for (size_t i = 0; i < 2; i++) {
        if (!osp_execute_output_requested(ctx, i))
            continue;
        void *data;
        if ((err = osp_execute_output_alloc(ctx, i, &a->shape, lengths[i],
                                            &data)))
            goto out;
        if (lengths[i] > 0 &&
            (err = osp_memcpy_async(stream, data, results[i], lengths[i],
                                    OSP_COPY_HOST_TO_DEVICE)))
            goto out;
    }

out:
    /* A copy on the stream may still use either buffer (an output copy, or
     * an input copy enqueued before a failed one), so each is freed once
     * the stream has passed it. */
    if (in_host)
        free_after_stream(stream, in_host);
    if (out_host)
        free_after_stream(stream, out_host);
    return err;
}

const osp_backend builtin_backend_string_add_sub = {
    .name = "string_add_sub",
    .model_new = string_add_sub_model_new,
    .model_free = string_add_sub_model_free,
    .instance_new = string_add_sub_instance_new,
    .instance_free = string_add_sub_instance_free,
    .execute = string_add_sub_execute,
};

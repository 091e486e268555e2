/*
 * The add_sub backend (Triton's `simple` model): two inputs, two outputs,
 * OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, elementwise, in
 * INT32, INT64, FP32 or FP16. Inputs and outputs are taken by position;
 * their names are free.
 */
#include <stdlib.h>
#include <string.h>

#include "../builtin.h"

typedef struct add_sub_model {
    char *name;
    osp_datatype dtype;
} add_sub_model;

static bool add_sub_supports(osp_datatype dtype) {
    return dtype == OSP_TYPE_INT32 || dtype == OSP_TYPE_INT64 ||
           dtype == OSP_TYPE_FP32 || dtype == OSP_TYPE_FP16;
}

/* Checks one config tensor against INPUT0's datatype and dims. */
static osp_error *check_like_input0(const osp_model_config *config,
                                    const osp_model_io *io, const char *kind) {
    const osp_model_io *first = &config->inputs[0];
    char want[160], got[160];
    if (io->dtype != first->dtype)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "add_sub model '%s': %s '%s' is %s but input "
                             "'%s' is %s; all four must have one datatype",
                             config->name, kind, io->name,
                             osp_datatype_config_name(io->dtype), first->name,
                             osp_datatype_config_name(first->dtype));
    if (!osp_shape_equal(&io->dims, &first->dims))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "add_sub model '%s': %s '%s' has dims %s but input '%s' has "
            "dims %s; all four must have the same dims",
            config->name, kind, io->name,
            osp_shape_format(&io->dims, got, sizeof got), first->name,
            osp_shape_format(&first->dims, want, sizeof want));
    return NULL;
}

static osp_error *add_sub_model_new(const osp_model_config *config,
                                    const char *version_path, void **out) {
    (void)version_path;
    osp_error *err = NULL;

    if (config->n_inputs != 2 || config->n_outputs != 2)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "add_sub model '%s': needs exactly 2 inputs and 2 "
                             "outputs, got %zu inputs and %zu outputs",
                             config->name, config->n_inputs, config->n_outputs);
    osp_datatype dtype = config->inputs[0].dtype;
    if (!add_sub_supports(dtype))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "add_sub model '%s': input '%s' is %s; supported "
                             "are TYPE_INT32, TYPE_INT64, TYPE_FP32, "
                             "TYPE_FP16",
                             config->name, config->inputs[0].name,
                             osp_datatype_config_name(dtype));
    if ((err = check_like_input0(config, &config->inputs[1], "input")) ||
        (err = check_like_input0(config, &config->outputs[0], "output")) ||
        (err = check_like_input0(config, &config->outputs[1], "output")))
        return err;

    add_sub_model *model = calloc(1, sizeof *model);
    if (!model || !(model->name = strdup(config->name))) {
        free(model);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "add_sub model '%s': out of memory", config->name);
    }
    model->dtype = dtype;
    *out = model;
    return NULL;
}

static void add_sub_model_free(void *opaque) {
    add_sub_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model);
}

/* Instances need no state of their own: the instance is the model. */
static osp_error *add_sub_instance_new(void *model, osp_device *device,
                                       osp_stream *stream, void **instance) {
    (void)device;
    (void)stream;
    *instance = model;
    return NULL;
}

static void add_sub_instance_free(void *instance) {
    (void)instance;
}

/* Checks that both inputs are present, of the same shape, and that the
 * byte size matches the shape. Sets *count to the element count. */
static osp_error *check_inputs(const add_sub_model *model,
                               const osp_backend_tensor *a,
                               const osp_backend_tensor *b, size_t *count) {
    char sa[160], sb[160];
    int64_t n;
    if (!builtin_input_given(a) || !builtin_input_given(b))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG, "add_sub model '%s': input '%s' is missing",
            model->name, builtin_input_given(a) ? b->name : a->name);
    if (a->dtype != model->dtype || b->dtype != model->dtype)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "add_sub model '%s': inputs must be %s",
                             model->name, osp_datatype_wire_name(model->dtype));
    if (!osp_shape_equal(&a->shape, &b->shape))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "add_sub model '%s': input '%s' has shape %s but "
            "input '%s' has shape %s; they must match",
            model->name, a->name, osp_shape_format(&a->shape, sa, sizeof sa),
            b->name, osp_shape_format(&b->shape, sb, sizeof sb));
    size_t element_size = osp_datatype_byte_size(model->dtype);
    if (!osp_shape_element_count(&a->shape, &n) || n < 0 ||
        (uint64_t)n > SIZE_MAX / element_size ||
        a->byte_size != (size_t)n * element_size ||
        b->byte_size != a->byte_size)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "add_sub model '%s': input byte sizes %zu and %zu "
                             "do not match shape %s",
                             model->name, a->byte_size, b->byte_size,
                             osp_shape_format(&a->shape, sa, sizeof sa));
    *count = (size_t)n;
    return NULL;
}

static osp_error *add_sub_execute(void *instance, osp_execute_ctx *ctx) {
    static const osp_binary_op ops[2] = {OSP_BINARY_ADD, OSP_BINARY_SUB};
    const add_sub_model *model = instance;
    osp_stream *stream = osp_execute_stream(ctx);
    osp_error *err;
    size_t count;

    if (osp_execute_input_count(ctx) != 2)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "add_sub model '%s': got %zu inputs, expected 2",
                             model->name, osp_execute_input_count(ctx));
    const osp_backend_tensor *a = osp_execute_input(ctx, 0);
    const osp_backend_tensor *b = osp_execute_input(ctx, 1);
    if ((err = check_inputs(model, a, b, &count)))
        return err;
    for (size_t i = 0; i < 2; i++) {
        if (!osp_execute_output_requested(ctx, i))
            continue;
        void *out;
        if ((err = osp_execute_output_alloc(ctx, i, &a->shape, a->byte_size,
                                            &out)))
            return err;
        if (count > 0 && (err = osp_op_binary(stream, ops[i], model->dtype,
                                              a->data, b->data, out, count)))
            return err;
    }
    return NULL;
}

/* Two elementwise passes over the inputs: always quick. */
static bool add_sub_execute_is_quick(const void *model) {
    (void)model;
    return true;
}

const osp_backend builtin_backend_add_sub = {
    .name = "add_sub",
    .model_new = add_sub_model_new,
    .model_free = add_sub_model_free,
    .instance_new = add_sub_instance_new,
    .instance_free = add_sub_instance_free,
    .execute = add_sub_execute,
    .execute_is_quick = add_sub_execute_is_quick,
};

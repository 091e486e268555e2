/*
 * The identity backend: OUTPUTi = INPUTi by position, any datatype (BYTES
 * included) and any shape. Each output is a device-to-device copy of its
 * input, so a request takes the whole path through device memory.
 *
 * Parameter `execute_delay_ms` (optional, default 0) makes every execute
 * sleep that long on the host first: a slow model for batching, queueing
 * and timeout tests. Parameter `load_delay_ms` (likewise) makes loading
 * the model sleep that long: a slow-loading model for tests of parallel
 * loading.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../builtin.h"

#define IDENTITY_MAX_DELAY_MS 3600000L /* one hour */

typedef struct identity_model {
    char *name;
    size_t n_outputs;
    long delay_ms;
} identity_model;

static void sleep_ms(long ms) {
    struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

/* Parses delay parameter `key` (its value `text`): a decimal integer in
 * [0, one hour]. */
static osp_error *parse_delay(const char *model_name, const char *key,
                              const char *text, long *delay_ms) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < 0 ||
        value > IDENTITY_MAX_DELAY_MS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "identity model '%s': parameter '%s' must be an "
                             "integer from 0 to %ld, got '%s'",
                             model_name, key, IDENTITY_MAX_DELAY_MS, text);
    *delay_ms = value;
    return NULL;
}

/* Checks that input i and output i pair up for every i. */
static osp_error *identity_model_new(const osp_model_config *config,
                                     const char *version_path, void **out) {
    (void)version_path;
    osp_error *err = NULL;
    identity_model *model = NULL;
    long delay_ms = 0;

    if (config->n_inputs == 0 || config->n_inputs != config->n_outputs) {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "identity model '%s': needs as many outputs as "
                             "inputs (at least one), got %zu inputs and %zu "
                             "outputs",
                             config->name, config->n_inputs, config->n_outputs);
    }
    for (size_t i = 0; i < config->n_inputs; i++) {
        const osp_model_io *in = &config->inputs[i];
        const osp_model_io *o = &config->outputs[i];
        if (in->dtype != o->dtype)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "identity model '%s': output '%s' is %s but input '%s' "
                "(same position, %zu) is %s",
                config->name, o->name, osp_datatype_config_name(o->dtype),
                in->name, i, osp_datatype_config_name(in->dtype));
    }
    const char *delay = osp_model_config_parameter(config, "execute_delay_ms");
    if (delay &&
        (err = parse_delay(config->name, "execute_delay_ms", delay, &delay_ms)))
        return err;
    long load_delay_ms = 0;
    const char *load_delay =
        osp_model_config_parameter(config, "load_delay_ms");
    if (load_delay && (err = parse_delay(config->name, "load_delay_ms",
                                         load_delay, &load_delay_ms)))
        return err;
    sleep_ms(load_delay_ms);

    model = calloc(1, sizeof *model);
    if (!model || !(model->name = strdup(config->name))) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "identity model '%s': out of memory", config->name);
        goto out;
    }
    model->n_outputs = config->n_outputs;
    model->delay_ms = delay_ms;
    *out = model;
    model = NULL;
out:
    if (model)
        free(model->name);
    free(model);
    return err;
}

static void identity_model_free(void *opaque) {
    identity_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model);
}

/* Instances need no state of their own: the instance is the model. */
static osp_error *identity_instance_new(void *model, osp_device *device,
                                        osp_stream *stream, void **instance) {
    (void)device;
    (void)stream;
    *instance = model;
    return NULL;
}

static void identity_instance_free(void *instance) {
    (void)instance;
}

static osp_error *identity_execute(void *instance, osp_execute_ctx *ctx) {
    const identity_model *model = instance;
    osp_stream *stream = osp_execute_stream(ctx);
    osp_error *err;

    if (model->delay_ms > 0)
        sleep_ms(model->delay_ms);
    if (osp_execute_input_count(ctx) != model->n_outputs)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "identity model '%s': got %zu inputs, expected "
                             "%zu",
                             model->name, osp_execute_input_count(ctx),
                             model->n_outputs);
    for (size_t i = 0; i < model->n_outputs; i++) {
        if (!osp_execute_output_requested(ctx, i))
            continue;
        const osp_backend_tensor *in = osp_execute_input(ctx, i);
        if (!builtin_input_given(in))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "identity model '%s': output %zu was "
                                 "requested but optional input '%s' was not "
                                 "given",
                                 model->name, i, in->name);
        void *out;
        /* A lone request on the CPU: its input becomes the output, no
         * copy (for a 16 MiB tensor that copy was ~30% of the server CPU). */
        if (osp_execute_output_take_input(ctx, i, i, &out))
            continue;
        if ((err = osp_execute_output_alloc(ctx, i, &in->shape, in->byte_size,
                                            &out)))
            return err;
        if (in->byte_size > 0 &&
            (err = osp_memcpy_async(stream, out, in->data, in->byte_size,
                                    OSP_COPY_DEVICE_TO_DEVICE)))
            return err;
    }
    return NULL;
}

/* A copy per output: quick unless execute_delay_ms makes it sleep. */
static bool identity_execute_is_quick(const void *opaque) {
    const identity_model *model = opaque;
    return model->delay_ms == 0;
}

const osp_backend builtin_backend_identity = {
    .name = "identity",
    .model_new = identity_model_new,
    .model_free = identity_model_free,
    .instance_new = identity_instance_new,
    .instance_free = identity_instance_free,
    .execute = identity_execute,
    .execute_is_quick = identity_execute_is_quick,
};

/*
 * The accumulator backend: a stateful test model in the manner of Triton's
 * QA sequence models, written against the sequence batcher's implicit
 * state.
 *
 * Config: one input (INT32, INT64 or FP32, any dims), a first output of the
 * same type and dims, and sequence_batching with one state of that type
 * and dims. Each request's first output is state + input, which also
 * becomes the sequence's next state: the running sum of the sequence (the
 * core resets the state to its initial value on START).
 *
 * Every further output must be named "<control input>_OUT" and carries that
 * control input's value as the request saw it (START, END, READY, CORRID
 * with their configured datatypes), so tests can watch the control inputs,
 * or be one of these TYPE_INT32 [1] outputs, so tests can watch the
 * batches the sequence batcher forms:
 *   BATCH_INDEX     the request's row in its batch (its `direct` slot)
 *   BATCH_SIZE      the rows of its batch, filler rows included
 *   INSTANCE        the index of the instance that ran it (0, 1, ...)
 *   NOT_READY_ROWS  the rows of its batch whose READY control is false
 *
 * Parameter "execute_delay_us" (default 0) makes each batch cost that much
 * more, however many requests it holds: a stand-in for a model whose cost
 * is per execution (the sequence batcher's benchmark).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../builtin.h"

/* What an output carries: the sum, a control input, or a batch fact. */
typedef enum accumulator_output {
    ACC_OUT_ECHO = 0,
    ACC_OUT_BATCH_INDEX,
    ACC_OUT_BATCH_SIZE,
    ACC_OUT_INSTANCE,
    ACC_OUT_NOT_READY_ROWS,
} accumulator_output;

typedef struct accumulator_model {
    char *name;
    accumulator_output *kind;          /* per output from the second on */
    const osp_sequence_control *ready; /* READY control, or NULL */
    int next_instance; /* instances are created one at a time, in order */
    osp_datatype dtype;
    const char *state_in, *state_out; /* borrowed from the config */
    size_t n_outputs;
    long delay_us; /* execute_delay_us */
    /* Per output from the second on: the control input it echoes. */
    const char **echo;
} accumulator_model;

static void accumulator_model_free(void *opaque) {
    accumulator_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model->echo);
    free(model->kind);
    free(model);
}

/* The control input whose value output `out` echoes ("<name>_OUT"). */
static const char *echoed_control(const osp_model_config *config,
                                  const char *out) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    size_t len = strlen(out);
    for (size_t i = 0; i < seq->n_controls; i++) {
        const char *name = seq->controls[i].name;
        size_t n = strlen(name);
        if (len == n + 4 && !strncmp(out, name, n) && !strcmp(out + n, "_OUT"))
            return name;
    }
    return NULL;
}

static osp_error *accumulator_model_new(const osp_model_config *config,
                                        const char *version_path, void **out) {
    (void)version_path;
    const osp_sequence_batching *seq = &config->sequence_batching;
    if (config->n_inputs != 1 || config->n_outputs < 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': needs one input and at "
                             "least one output",
                             config->name);
    const osp_model_io *in = &config->inputs[0], *sum = &config->outputs[0];
    osp_datatype dt = in->dtype;
    if (dt != OSP_TYPE_INT32 && dt != OSP_TYPE_INT64 && dt != OSP_TYPE_FP32)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': input '%s' must be "
                             "TYPE_INT32, TYPE_INT64 or TYPE_FP32",
                             config->name, in->name);
    if (!seq->enabled || seq->n_states != 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': needs sequence_batching "
                             "with exactly one state",
                             config->name);
    const osp_sequence_state *st = &seq->states[0];
    if (sum->dtype != dt || st->dtype != dt ||
        !osp_shape_equal(&sum->dims, &in->dims) ||
        !osp_shape_equal(&st->dims, &in->dims))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': output '%s' and state "
                             "'%s' must have the datatype and dims of input "
                             "'%s'",
                             config->name, sum->name, st->input_name, in->name);
    for (int d = 0; d < in->dims.rank; d++)
        if (in->dims.dims[d] < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "accumulator model '%s': input '%s' must "
                                 "have fixed dims",
                                 config->name, in->name);
    accumulator_model *model = calloc(1, sizeof *model);
    if (!model || !(model->name = strdup(config->name)) ||
        !(model->echo = calloc(config->n_outputs, sizeof(*model->echo))) ||
        !(model->kind = calloc(config->n_outputs, sizeof(*model->kind)))) {
        accumulator_model_free(model);
        return osp_error_out_of_memory();
    }
    const char *delay = osp_model_config_parameter(config, "execute_delay_us");
    if (delay) {
        char *end = NULL;
        errno = 0;
        model->delay_us = strtol(delay, &end, 10);
        if (errno || end == delay || *end || model->delay_us < 0 ||
            model->delay_us > 10000000) {
            accumulator_model_free(model);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "accumulator model '%s': parameter "
                                 "'execute_delay_us' must be an integer in "
                                 "[0, 10000000], got '%s'",
                                 config->name, delay);
        }
    }
    model->dtype = dt;
    model->state_in = st->input_name;
    model->state_out = st->output_name;
    model->n_outputs = config->n_outputs;
    for (size_t i = 0; i < seq->n_controls; i++)
        if (seq->controls[i].kind == OSP_SEQUENCE_CONTROL_READY)
            model->ready = &seq->controls[i];
    static const struct {
        const char *name;
        accumulator_output kind;
    } facts[] = {{"BATCH_INDEX", ACC_OUT_BATCH_INDEX},
                 {"BATCH_SIZE", ACC_OUT_BATCH_SIZE},
                 {"INSTANCE", ACC_OUT_INSTANCE},
                 {"NOT_READY_ROWS", ACC_OUT_NOT_READY_ROWS}};
    for (size_t o = 1; o < config->n_outputs; o++) {
        const osp_model_io *io = &config->outputs[o];
        for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++)
            if (!strcmp(io->name, facts[f].name) && io->dtype == OSP_TYPE_INT32)
                model->kind[o] = facts[f].kind;
        if (model->kind[o] != ACC_OUT_ECHO)
            continue;
        model->echo[o] = echoed_control(config, io->name);
        if (!model->echo[o]) {
            osp_error *err = osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "accumulator model '%s': output '%s' must be named "
                "'<control input>_OUT', or be a TYPE_INT32 BATCH_INDEX, "
                "BATCH_SIZE, INSTANCE or NOT_READY_ROWS",
                config->name, config->outputs[o].name);
            accumulator_model_free(model);
            return err;
        }
    }
    *out = model;
    return NULL;
}

/* An instance knows its model and its index (the core keeps the
 * sequences' state). */
typedef struct accumulator_instance {
    const accumulator_model *model;
    int index;
    osp_device *device; /* borrowed */
} accumulator_instance;

static osp_error *accumulator_instance_new(void *model, osp_device *device,
                                           osp_stream *stream,
                                           void **instance) {
    (void)stream;
    accumulator_model *m = model;
    accumulator_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return osp_error_out_of_memory();
    inst->model = m;
    inst->index = m->next_instance++;
    inst->device = device;
    *instance = inst;
    return NULL;
}

static void accumulator_instance_free(void *instance) {
    free(instance);
}

/* Whether row r of control tensor t holds the control's false value. */
static bool control_row_false(const osp_sequence_control *c,
                              const unsigned char *rows, int64_t r) {
    if (c->dtype == OSP_TYPE_INT32) {
        int32_t v;
        memcpy(&v, rows + 4 * r, 4);
        return v == c->int32_false_true[0];
    }
    if (c->dtype == OSP_TYPE_FP32) {
        float v;
        memcpy(&v, rows + 4 * r, 4);
        return v == c->fp32_false_true[0];
    }
    return (rows[r] != 0) == c->bool_false_true[0];
}

/* Output o, one of the batch facts, as one int32 per row: computed on the
 * host and copied to the instance's device. */
static osp_error *batch_fact_output(const accumulator_instance *inst,
                                    osp_execute_ctx *ctx, size_t o,
                                    accumulator_output kind) {
    const accumulator_model *model = inst->model;
    int64_t rows = osp_execute_batch_size(ctx);
    if (rows < 1)
        rows = 1;
    osp_device_info info;
    osp_device_get_info(inst->device, &info);
    osp_stream *stream = osp_execute_stream(ctx);
    int32_t *values = calloc((size_t)rows, sizeof *values);
    unsigned char *ready = NULL;
    osp_error *err = NULL;
    if (!values)
        return osp_error_out_of_memory();
    int32_t not_ready = 0;
    const osp_backend_tensor *t =
        model->ready ? osp_execute_input_by_name(ctx, model->ready->name)
                     : NULL;
    if (kind == ACC_OUT_NOT_READY_ROWS && t && t->data) {
        ready = malloc(t->byte_size + 1);
        if (!ready)
            err = osp_error_out_of_memory();
        else if (info.type == OSP_DEVICE_CPU)
            memcpy(ready, t->data, t->byte_size);
        else if (!(err = osp_memcpy_async(stream, ready, t->data, t->byte_size,
                                          OSP_COPY_DEVICE_TO_HOST)))
            err = osp_stream_synchronize(stream);
        for (int64_t r = 0; r < rows && !err; r++)
            not_ready += control_row_false(model->ready, ready, r);
    }
    for (int64_t r = 0; r < rows; r++)
        values[r] = kind == ACC_OUT_BATCH_INDEX  ? (int32_t)r
                    : kind == ACC_OUT_BATCH_SIZE ? (int32_t)rows
                    : kind == ACC_OUT_INSTANCE   ? inst->index
                                                 : not_ready;
    osp_shape shape = {.rank = 2, .dims = {rows, 1}};
    if (osp_execute_batch_size(ctx) == 0)
        shape = (osp_shape){.rank = 1, .dims = {1}};
    void *data = NULL;
    size_t bytes = (size_t)rows * sizeof *values;
    if (!err)
        err = osp_execute_output_alloc(ctx, o, &shape, bytes, &data);
    if (!err && info.type == OSP_DEVICE_CPU)
        memcpy(data, values, bytes);
    else if (!err && !(err = osp_memcpy_async(stream, data, values, bytes,
                                              OSP_COPY_HOST_TO_DEVICE)))
        err = osp_stream_synchronize(stream); /* before values is freed */
    free(ready);
    free(values);
    return err;
}

/* A copy of tensor t (on the instance's device) as output `index`. */
static osp_error *copy_to_output(osp_execute_ctx *ctx, size_t index,
                                 const osp_backend_tensor *t) {
    void *data = NULL;
    osp_error *err =
        osp_execute_output_alloc(ctx, index, &t->shape, t->byte_size, &data);
    if (!err && t->byte_size)
        err = osp_memcpy_async(osp_execute_stream(ctx), data, t->data,
                               t->byte_size, OSP_COPY_DEVICE_TO_DEVICE);
    return err;
}

static osp_error *accumulator_execute(void *instance, osp_execute_ctx *ctx) {
    const accumulator_instance *inst = instance;
    const accumulator_model *model = inst->model;
    const osp_backend_tensor *in = osp_execute_input(ctx, 0);
    const osp_backend_tensor *state =
        osp_execute_input_by_name(ctx, model->state_in);
    int state_out = osp_execute_output_index(ctx, model->state_out);
    /* A batch that did not come through the sequence batcher (a warmup
     * sample that does not give the state) has nothing to add to. */
    if (!state || !state->data || state_out < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': the batch has no state "
                             "input '%s'",
                             model->name, model->state_in);
    if (!builtin_input_given(in) || in->byte_size != state->byte_size ||
        in->dtype != model->dtype)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "accumulator model '%s': input '%s' must match "
                             "state '%s' in datatype and size",
                             model->name, in->name, model->state_in);
    if (model->delay_us > 0) {
        struct timespec pause = {.tv_sec = model->delay_us / 1000000,
                                 .tv_nsec = model->delay_us % 1000000 * 1000};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
    }
    size_t n = in->byte_size / osp_datatype_byte_size(model->dtype);
    void *sum = NULL;
    osp_error *err =
        osp_execute_output_alloc(ctx, 0, &in->shape, in->byte_size, &sum);
    if (!err)
        err = osp_op_binary(osp_execute_stream(ctx), OSP_BINARY_ADD,
                            model->dtype, state->data, in->data, sum, n);
    if (!err) {
        osp_backend_tensor next = *in;
        next.data = sum;
        err = copy_to_output(ctx, (size_t)state_out, &next);
    }
    for (size_t o = 1; o < model->n_outputs && !err; o++) {
        if (!osp_execute_output_requested(ctx, o))
            continue;
        if (model->kind[o] != ACC_OUT_ECHO) {
            err = batch_fact_output(inst, ctx, o, model->kind[o]);
            continue;
        }
        const osp_backend_tensor *ctl =
            osp_execute_input_by_name(ctx, model->echo[o]);
        if (!ctl || !ctl->data)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "accumulator model '%s': the batch has no "
                                 "control input '%s'",
                                 model->name, model->echo[o]);
        err = copy_to_output(ctx, o, ctl);
    }
    return err;
}

const osp_backend builtin_backend_accumulator = {
    .name = "accumulator",
    .model_new = accumulator_model_new,
    .model_free = accumulator_model_free,
    .instance_new = accumulator_instance_new,
    .instance_free = accumulator_instance_free,
    .execute = accumulator_execute,
};

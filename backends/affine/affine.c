/*
 * The affine backend: elementwise y = scale * x + offset over FP32 tensors
 * of any shape (TensorFlow Serving's half_plus_two and half_plus_three).
 *
 * Each output names the input it reads, its scale and its offset in a
 * parameter keyed by the output's name:
 *
 *   parameters { key: "y" value { string_value: "x * 0.5 + 2" } }
 *
 * The value is `<input> [* <scale>] [+|- <offset>]`, tokens separated by
 * spaces; scale defaults to 1 and offset to 0 ("x", "x * 2", "x - 1").
 * An output takes the shape of the input it reads.
 *
 * An input that a request may leave out (`optional: true`) can declare the
 * value it stands for then, in a parameter keyed "default:<input>":
 *
 *   parameters { key: "default:x2" value { string_value: "0.0" } }
 *
 * An output whose input was not sent then reads a tensor of that value
 * shaped like the first input that was sent (in config order); without a
 * default, asking for that output fails. Outputs nobody asked for are not
 * computed.
 *
 * The computation is two device ops per output (a k=1 GEMM by a one-element
 * scale, then a bias add of the offset), so it runs on every device.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../builtin.h"

#define AFFINE_DEFAULT_PREFIX "default:"
/* Rows per GEMM call: BLAS takes 32-bit sizes. */
#define AFFINE_MAX_ROWS ((int64_t)1 << 30)

typedef struct affine_output {
    char *name;   /* for messages */
    size_t input; /* config index of the input it reads */
    float scale;  /* y = scale * x + offset */
    float offset;
} affine_output;

typedef struct affine_input {
    bool has_default; /* "default:<input>" was given */
    float default_value;
} affine_input;

typedef struct affine_model {
    char *name;
    affine_input *inputs; /* config order */
    size_t n_inputs;
    affine_output *outputs; /* config order */
    size_t n_outputs;
    float *constants; /* scale and offset of output i at 2i, 2i+1 */
} affine_model;

typedef struct affine_instance {
    const affine_model *model;
    osp_device *device;
    osp_stream *stream;
    osp_buffer *constants; /* device copy of model->constants */
} affine_instance;

static osp_error *affine_oom(const char *model_name) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "affine model '%s': out of memory", model_name);
}

/* A finite float from a whole token; false otherwise. */
static bool parse_float(const char *token, float *out) {
    char *end;
    errno = 0;
    float v = strtof(token, &end);
    if (end == token || *end != '\0' || errno != 0 || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* Parses output `out_name`'s expression `text` against the config's inputs
 * into *out. The error names the output and says what was expected. */
static osp_error *parse_expression(const osp_model_config *config,
                                   const char *out_name, const char *text,
                                   affine_output *out) {
    osp_error *err = NULL;
    char *copy = strdup(text);
    char *tokens[6];
    size_t n = 0;
    char *save = NULL;

    if (!copy)
        return affine_oom(config->name);
    for (char *t = strtok_r(copy, " \t", &save); t;
         t = strtok_r(NULL, " \t", &save)) {
        if (n == sizeof tokens / sizeof tokens[0]) {
            n++;
            break;
        }
        tokens[n++] = t;
    }
    affine_output o = {.scale = 1.0f, .offset = 0.0f};
    size_t i = 1;
    bool ok = n >= 1 && n <= 5;
    if (ok && i < n && !strcmp(tokens[i], "*")) {
        ok = i + 1 < n && parse_float(tokens[i + 1], &o.scale);
        i += 2;
    }
    if (ok && i < n && (!strcmp(tokens[i], "+") || !strcmp(tokens[i], "-"))) {
        ok = i + 1 < n && parse_float(tokens[i + 1], &o.offset);
        if (ok && tokens[i][0] == '-')
            o.offset = -o.offset;
        i += 2;
    }
    ok = ok && i == n;
    if (!ok) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "affine model '%s': output '%s': parameter "
                            "'%s' is \"%s\"; expected \"<input> * <scale> + "
                            "<offset>\" (tokens separated by spaces, finite "
                            "numbers; \"* <scale>\" and \"+ <offset>\" "
                            "optional)",
                            config->name, out_name, out_name, text);
        goto out;
    }
    int index = osp_model_config_input_index(config, tokens[0]);
    if (index < 0) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "affine model '%s': output '%s' reads input "
                            "'%s', which the config does not declare",
                            config->name, out_name, tokens[0]);
        goto out;
    }
    o.input = (size_t)index;
    *out = o;
out:
    free(copy);
    return err;
}

/* Reads every "default:<input>" parameter into inputs[]. */
static osp_error *parse_defaults(const osp_model_config *config,
                                 affine_input *inputs) {
    const size_t plen = strlen(AFFINE_DEFAULT_PREFIX);
    for (size_t i = 0; i < config->n_parameters; i++) {
        const osp_model_parameter *p = &config->parameters[i];
        if (strncmp(p->key, AFFINE_DEFAULT_PREFIX, plen) != 0)
            continue;
        const char *input = p->key + plen;
        int index = osp_model_config_input_index(config, input);
        if (index < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "affine model '%s': parameter '%s' names "
                                 "input '%s', which the config does not "
                                 "declare",
                                 config->name, p->key, input);
        if (!config->inputs[index].optional)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "affine model '%s': parameter '%s': input "
                                 "'%s' is not optional, so its default would "
                                 "never be used (add optional: true)",
                                 config->name, p->key, input);
        if (!parse_float(p->value, &inputs[index].default_value))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "affine model '%s': parameter '%s' must be "
                                 "a finite number, got '%s'",
                                 config->name, p->key, p->value);
        inputs[index].has_default = true;
    }
    return NULL;
}

static void affine_model_free(void *opaque) {
    affine_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model->inputs);
    for (size_t i = 0; model->outputs && i < model->n_outputs; i++)
        free(model->outputs[i].name);
    free(model->outputs);
    free(model->constants);
    free(model);
}

static osp_error *affine_model_new(const osp_model_config *config,
                                   const char *version_path, void **out) {
    (void)version_path;
    osp_error *err = NULL;
    affine_model *model = NULL;

    if (config->n_inputs == 0 || config->n_outputs == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "affine model '%s': needs at least one input "
                             "and one output, got %zu inputs and %zu outputs",
                             config->name, config->n_inputs, config->n_outputs);
    for (size_t i = 0; i < config->n_inputs + config->n_outputs; i++) {
        bool is_input = i < config->n_inputs;
        const osp_model_io *io = is_input
                                     ? &config->inputs[i]
                                     : &config->outputs[i - config->n_inputs];
        if (io->dtype != OSP_TYPE_FP32)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "affine model '%s': %s '%s' is %s; only "
                                 "TYPE_FP32 is supported",
                                 config->name, is_input ? "input" : "output",
                                 io->name, osp_datatype_config_name(io->dtype));
    }

    model = calloc(1, sizeof *model);
    if (!model || !(model->name = strdup(config->name)) ||
        !(model->inputs = calloc(config->n_inputs, sizeof *model->inputs)) ||
        !(model->outputs = calloc(config->n_outputs, sizeof *model->outputs)) ||
        !(model->constants =
              calloc(2 * config->n_outputs, sizeof *model->constants))) {
        err = affine_oom(config->name);
        goto out;
    }
    model->n_inputs = config->n_inputs;
    model->n_outputs = config->n_outputs;
    for (size_t i = 0; i < config->n_outputs; i++) {
        const char *name = config->outputs[i].name;
        const char *text = osp_model_config_parameter(config, name);
        if (!text) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "affine model '%s': output '%s' needs a "
                                "parameter '%s' saying what it computes, "
                                "e.g. \"x * 0.5 + 2\"",
                                config->name, name, name);
            goto out;
        }
        if ((err = parse_expression(config, name, text, &model->outputs[i])))
            goto out;
        if (!(model->outputs[i].name = strdup(name))) {
            err = affine_oom(config->name);
            goto out;
        }
        model->constants[2 * i] = model->outputs[i].scale;
        model->constants[2 * i + 1] = model->outputs[i].offset;
    }
    if ((err = parse_defaults(config, model->inputs)))
        goto out;
    *out = model;
    model = NULL;
out:
    affine_model_free(model);
    return err;
}

static void affine_instance_free(void *opaque) {
    affine_instance *inst = opaque;
    if (!inst)
        return;
    /* Work still queued may read the constants. */
    osp_error_free(osp_stream_synchronize(inst->stream));
    osp_buffer_free(inst->constants);
    free(inst);
}

/* Uploads every output's scale and offset to `device` and waits. */
static osp_error *affine_instance_new(void *opaque, osp_device *device,
                                      osp_stream *stream, void **out) {
    const affine_model *model = opaque;
    osp_error *err = NULL;
    size_t bytes = 2 * model->n_outputs * sizeof(float);
    affine_instance *inst = calloc(1, sizeof *inst);

    if (!inst)
        return affine_oom(model->name);
    inst->model = model;
    inst->device = device;
    inst->stream = stream;
    if ((err = osp_device_alloc(device, bytes, &inst->constants)) ||
        (err = osp_memcpy_async(stream, inst->constants->data, model->constants,
                                bytes, OSP_COPY_HOST_TO_DEVICE)) ||
        (err = osp_stream_synchronize(stream))) {
        err = osp_error_wrap(err, "affine model '%s': uploading constants",
                             model->name);
        goto out;
    }
    *out = inst;
    inst = NULL;
out:
    affine_instance_free(inst);
    return err;
}

/* The element count of a given input, checked against its byte size. */
static osp_error *input_count(const affine_model *model,
                              const osp_backend_tensor *t, size_t *count) {
    char shape[160];
    int64_t n;
    if (t->dtype != OSP_TYPE_FP32)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "affine model '%s': input '%s' must be FP32, "
                             "got %s",
                             model->name, t->name,
                             osp_datatype_wire_name(t->dtype));
    if (!osp_shape_element_count(&t->shape, &n) || n < 0 ||
        (uint64_t)n > SIZE_MAX / sizeof(float) ||
        t->byte_size != (size_t)n * sizeof(float))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "affine model '%s': input '%s' has %zu bytes, "
                             "which does not match shape %s",
                             model->name, t->name, t->byte_size,
                             osp_shape_format(&t->shape, shape, sizeof shape));
    *count = (size_t)n;
    return NULL;
}

static void free_buffer(void *arg) {
    osp_buffer_free(arg);
}

/* Device memory holding `count` copies of `value`, for an input that was
 * not sent: filled by a copy from host memory that the stream frees once
 * the copy is done. Caller owns *out and must not free it before the ops
 * reading it are done (execute frees it from the stream). */
static osp_error *fill_default(affine_instance *inst, float value, size_t count,
                               osp_buffer **out) {
    const affine_model *model = inst->model;
    osp_buffer *host = NULL, *dev = NULL;
    osp_error *err = NULL;
    size_t bytes = count * sizeof(float);

    if ((err = osp_device_alloc_host(inst->device, bytes, &host)) ||
        (err = osp_device_alloc(inst->device, bytes, &dev)))
        goto out;
    float *h = host->data;
    for (size_t i = 0; i < count; i++)
        h[i] = value;
    if ((err = osp_memcpy_async(inst->stream, dev->data, host->data, bytes,
                                OSP_COPY_HOST_TO_DEVICE)) ||
        (err = osp_stream_launch_host_func(inst->stream, free_buffer, host)))
        goto out;
    host = NULL; /* freed by the stream */
    *out = dev;
    dev = NULL;
out:
    if (err && host) {
        /* A copy may already be queued from it. */
        osp_error_free(osp_stream_synchronize(inst->stream));
    }
    osp_buffer_free(host);
    osp_buffer_free(dev);
    return err ? osp_error_wrap(err, "affine model '%s': default input",
                                model->name)
               : NULL;
}

/* out[i] = scale * in[i] + offset for count elements, on the stream. */
static osp_error *enqueue_affine(affine_instance *inst, size_t output,
                                 const float *in, float *out, size_t count) {
    const float *constants = inst->constants->data;
    const float *scale = constants + 2 * output;
    const float *offset = constants + 2 * output + 1;
    osp_error *err = NULL;

    for (size_t done = 0; done < count && !err;) {
        int64_t rows = (int64_t)(count - done) < AFFINE_MAX_ROWS
                           ? (int64_t)(count - done)
                           : AFFINE_MAX_ROWS;
        osp_gemm_args g = {
            .m = rows,
            .n = 1,
            .k = 1,
            .alpha = 1.0f,
            .beta = 0.0f,
            .dtype = OSP_TYPE_FP32,
            .a = in + done,
            .lda = 1,
            .b = scale,
            .ldb = 1,
            .c = out + done,
            .ldc = 1,
        };
        if (!(err = osp_op_gemm(inst->stream, &g)))
            err = osp_op_bias_activation(inst->stream, out + done, offset, rows,
                                         1, OSP_ACTIVATION_NONE);
        done += (size_t)rows;
    }
    return err;
}

static osp_error *affine_execute(void *opaque, osp_execute_ctx *ctx) {
    affine_instance *inst = opaque;
    const affine_model *model = inst->model;
    osp_error *err = NULL;
    const osp_backend_tensor *shape_source = NULL;
    osp_buffer **defaults = NULL; /* per input, filled on first use */

    if (osp_execute_input_count(ctx) != model->n_inputs)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "affine model '%s': got %zu inputs, expected %zu",
                             model->name, osp_execute_input_count(ctx),
                             model->n_inputs);
    for (size_t i = 0; i < model->n_inputs && !shape_source; i++)
        if (builtin_input_given(osp_execute_input(ctx, i)))
            shape_source = osp_execute_input(ctx, i);
    defaults = calloc(model->n_inputs, sizeof *defaults);
    if (!defaults)
        return affine_oom(model->name);

    for (size_t o = 0; o < model->n_outputs && !err; o++) {
        if (!osp_execute_output_requested(ctx, o))
            continue;
        size_t idx = model->outputs[o].input;
        const osp_backend_tensor *in = osp_execute_input(ctx, idx);
        const osp_backend_tensor *shaped = in;
        const float *src;
        size_t count = 0;
        void *dst;
        if (!builtin_input_given(in)) {
            if (!model->inputs[idx].has_default || !shape_source) {
                err = osp_error_new(
                    OSP_ERROR_INVALID_ARG,
                    "affine model '%s': output '%s' reads input '%s', "
                    "which was not sent%s",
                    model->name, model->outputs[o].name, in->name,
                    model->inputs[idx].has_default
                        ? " (its default needs another input to take the "
                          "shape of, and none was sent)"
                        : " and has no default");
                break;
            }
            shaped = shape_source;
        }
        if ((err = input_count(model, shaped, &count)))
            break;
        if ((err = osp_execute_output_alloc(ctx, o, &shaped->shape,
                                            count * sizeof(float), &dst)))
            break;
        if (count == 0)
            continue;
        if (shaped == in) {
            src = in->data;
        } else {
            if (!defaults[idx] &&
                (err = fill_default(inst, model->inputs[idx].default_value,
                                    count, &defaults[idx])))
                break;
            src = defaults[idx]->data;
        }
        err = enqueue_affine(inst, o, src, dst, count);
    }

    /* Default tensors are freed once the ops reading them are done. */
    for (size_t i = 0; i < model->n_inputs; i++) {
        if (!defaults[i])
            continue;
        osp_error *ferr =
            osp_stream_launch_host_func(inst->stream, free_buffer, defaults[i]);
        if (ferr) {
            osp_error_free(osp_stream_synchronize(inst->stream));
            osp_buffer_free(defaults[i]);
            if (!err)
                err = ferr;
            else
                osp_error_free(ferr);
        }
    }
    free(defaults);
    return err;
}

const osp_backend builtin_backend_affine = {
    .name = "affine",
    .model_new = affine_model_new,
    .model_free = affine_model_free,
    .instance_new = affine_instance_new,
    .instance_free = affine_instance_free,
    .execute = affine_execute,
};

/*
 * The dense backend: a multilayer perceptron.
 *
 * Weights come from a safetensors file in the version folder (parameter
 * `weights`, default model.safetensors): for each layer i = 0, 1, ...
 * `layers.<i>.weight` [out, in] (row-major, as PyTorch's nn.Linear stores
 * it) and `layers.<i>.bias` [out], FP32. The layers are the consecutive
 * indices present from 0; the first takes the config input's [in], the
 * last produces the config output's [out].
 *
 * Parameters: `activation` after each hidden layer (relu, sigmoid, tanh,
 * gelu, none; default relu), `output_activation` after the last layer
 * (none, softmax, sigmoid; default none), `allow_tf32` ("true" lets GPUs
 * use TF32 tensor cores for the GEMMs).
 *
 * The config has one FP32 input of dims [in] and one FP32 output of dims
 * [out]; with max_batch_size > 0 a batch is [N, in] -> [N, out].
 * Per layer: x[N,in] x W^T -> [N,out] (one GEMM), then bias + activation
 * in place, then softmax over each row if asked for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../builtin.h"
#include "dense_internal.h"
#include "safetensors.h"
#define COUNT_OF(a) (sizeof(a) / sizeof *(a))

typedef enum dense_output_activation {
    DENSE_OUTPUT_NONE = 0,
    DENSE_OUTPUT_SOFTMAX,
    DENSE_OUTPUT_SIGMOID,
} dense_output_activation;

typedef struct dense_layer {
    int64_t in, out;
    size_t weight_offset; /* in floats, into the parameter block */
    size_t bias_offset;
} dense_layer;

typedef struct dense_model {
    char *name;
    int64_t in_dim, out_dim;
    bool batching;
    osp_activation hidden_activation;
    dense_output_activation output_activation;
    bool allow_tf32;
    dense_layer *layers;
    size_t n_layers;
    int64_t max_hidden; /* widest hidden layer: sizes the scratch buffers */
    float *params;      /* host copy: every weight and bias, one block */
    size_t n_params;
} dense_model;

typedef struct dense_instance {
    const dense_model *model;
    osp_device *device;
    osp_stream *stream;
    osp_buffer *params;     /* device copy of model->params */
    osp_buffer *scratch[2]; /* hidden activations, used in turn */
    int64_t scratch_rows;   /* rows each scratch buffer holds */
} dense_instance;

/* ---- loading ---------------------------------------------------------- */

/* The table entry whose name equals `text`, or -1. */
static int lookup(const char *const *names, size_t n, const char *text) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], text) == 0)
            return (int)i;
    return -1;
}

/* Reads the string parameters into `model`; an unknown value names the
 * parameter and lists the accepted ones. */
static osp_error *parse_parameters(const osp_model_config *config,
                                   dense_model *model) {
    static const char *const hidden_names[] = {"none", "relu", "sigmoid",
                                               "tanh", "gelu"};
    static const osp_activation hidden_values[] = {
        OSP_ACTIVATION_NONE, OSP_ACTIVATION_RELU, OSP_ACTIVATION_SIGMOID,
        OSP_ACTIVATION_TANH, OSP_ACTIVATION_GELU};
    static const char *const output_names[] = {"none", "softmax", "sigmoid"};
    static const char *const bool_names[] = {"false", "true"};

    const char *text = osp_model_config_parameter(config, "activation");
    int i = lookup(hidden_names, COUNT_OF(hidden_names), text ? text : "relu");
    if (i < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': parameter 'activation' is "
                             "'%s'; use relu, sigmoid, tanh, gelu or none",
                             config->name, text);
    model->hidden_activation = hidden_values[i];

    text = osp_model_config_parameter(config, "output_activation");
    i = lookup(output_names, COUNT_OF(output_names), text ? text : "none");
    if (i < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': parameter 'output_activation' "
                             "is '%s'; use none, softmax or sigmoid",
                             config->name, text);
    model->output_activation = (dense_output_activation)i;

    text = osp_model_config_parameter(config, "allow_tf32");
    i = lookup(bool_names, COUNT_OF(bool_names), text ? text : "false");
    if (i < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': parameter 'allow_tf32' is "
                             "'%s'; use true or false",
                             config->name, text);
    model->allow_tf32 = i == 1;
    return NULL;
}

/* Checks the config's shape: one FP32 input [in], one FP32 output [out]. */
static osp_error *check_config(const osp_model_config *config,
                               dense_model *model) {
    if (config->n_inputs != 1 || config->n_outputs != 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': needs exactly 1 input and 1 "
                             "output, got %zu and %zu",
                             config->name, config->n_inputs, config->n_outputs);
    const osp_model_io *ios[2] = {&config->inputs[0], &config->outputs[0]};
    for (int i = 0; i < 2; i++) {
        const osp_model_io *io = ios[i];
        const char *kind = i == 0 ? "input" : "output";
        char dims[160];
        if (io->dtype != OSP_TYPE_FP32)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "dense model '%s': %s '%s' is %s, expected "
                                 "TYPE_FP32",
                                 config->name, kind, io->name,
                                 osp_datatype_config_name(io->dtype));
        if (io->dims.rank != 1 || io->dims.dims[0] <= 0)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "dense model '%s': %s '%s' has dims %s, "
                "expected one fixed size like [64]",
                config->name, kind, io->name,
                osp_shape_format(&io->dims, dims, sizeof dims));
    }
    model->in_dim = config->inputs[0].dims.dims[0];
    model->out_dim = config->outputs[0].dims.dims[0];
    model->batching = config->max_batch_size > 0;
    return NULL;
}

/* Checks one weight or bias tensor: FP32 and exactly the expected shape. */
static osp_error *check_tensor(const dense_model *model,
                               const safetensors_tensor *t,
                               const osp_shape *expected) {
    char got[160], want[160];
    if (strcmp(t->dtype, "F32") != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': tensor '%s' has dtype %s, "
                             "expected F32",
                             model->name, t->name, t->dtype);
    if (!osp_shape_equal(&t->shape, expected))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': tensor '%s' has shape %s, "
                             "expected %s",
                             model->name, t->name,
                             osp_shape_format(&t->shape, got, sizeof got),
                             osp_shape_format(expected, want, sizeof want));
    return NULL;
}

size_t dense_count_layers(const safetensors *st) {
    char name[64];
    size_t n = 0;
    for (;;) {
        snprintf(name, sizeof name, "layers.%zu.weight", n);
        if (!safetensors_find(st, name))
            return n;
        n++;
    }
}

/* A layers.<k>.weight or .bias past the first missing index means a gap
 * in the file: refuse it rather than silently drop layers. */
static osp_error *check_no_stray_layers(const dense_model *model,
                                        const safetensors *st) {
    for (size_t i = 0; i < st->n_tensors; i++) {
        const char *name = st->tensors[i].name;
        if (strncmp(name, "layers.", 7) != 0)
            continue;
        char *end;
        unsigned long long k = strtoull(name + 7, &end, 10);
        bool layer_tensor = end != name + 7 && (strcmp(end, ".weight") == 0 ||
                                                strcmp(end, ".bias") == 0);
        if (layer_tensor && k >= model->n_layers)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "dense model '%s': tensor '%s' follows a gap: "
                                 "'layers.%zu.weight' is missing",
                                 model->name, name, model->n_layers);
    }
    return NULL;
}

/* Finds, checks and lays out every layer of `st` and copies the weights
 * into model->params. */
static osp_error *load_layers(dense_model *model, const safetensors *st,
                              const char *path) {
    osp_error *err = NULL;
    char name[64];
    size_t n = dense_count_layers(st);
    if (n == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': '%s' has no tensor "
                             "'layers.0.weight'",
                             model->name, path);
    model->n_layers = n;
    if ((err = check_no_stray_layers(model, st)))
        return err;
    model->layers = calloc(n, sizeof *model->layers);
    const safetensors_tensor **tensors = calloc(2 * n, sizeof *tensors);
    if (!model->layers || !tensors) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "dense model '%s': out of memory", model->name);
        goto out;
    }

    int64_t in = model->in_dim;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        snprintf(name, sizeof name, "layers.%zu.weight", i);
        const safetensors_tensor *w = safetensors_find(st, name);
        /* Hidden layers may have any width; the last must give `out`. */
        if (!last && (w->shape.rank != 2 || w->shape.dims[0] <= 0)) {
            char got[160];
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "dense model '%s': tensor '%s' has shape %s, "
                                "expected [N,%lld] with N >= 1",
                                model->name, name,
                                osp_shape_format(&w->shape, got, sizeof got),
                                (long long)in);
            goto out;
        }
        int64_t out = last ? model->out_dim : w->shape.dims[0];
        osp_shape want = {.rank = 2, .dims = {out, in}};
        if ((err = check_tensor(model, w, &want)))
            goto out;

        snprintf(name, sizeof name, "layers.%zu.bias", i);
        const safetensors_tensor *b = safetensors_find(st, name);
        if (!b) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "dense model '%s': '%s' has no tensor '%s'",
                                model->name, path, name);
            goto out;
        }
        want = (osp_shape){.rank = 1, .dims = {out}};
        if ((err = check_tensor(model, b, &want)))
            goto out;

        /* Sizes are bounded by the file, so these sums cannot overflow. */
        dense_layer *layer = &model->layers[i];
        layer->in = in;
        layer->out = out;
        layer->weight_offset = total;
        total += w->byte_size / sizeof(float);
        layer->bias_offset = total;
        total += b->byte_size / sizeof(float);
        if (!last && out > model->max_hidden)
            model->max_hidden = out;
        tensors[2 * i] = w;
        tensors[2 * i + 1] = b;
        in = out;
    }

    model->params = malloc(total ? total * sizeof(float) : 1);
    if (!model->params) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "dense model '%s': out of memory for %zu weights",
                            model->name, total);
        goto out;
    }
    model->n_params = total;
    for (size_t i = 0; i < n; i++) {
        const dense_layer *layer = &model->layers[i];
        memcpy(model->params + layer->weight_offset, tensors[2 * i]->data,
               tensors[2 * i]->byte_size);
        memcpy(model->params + layer->bias_offset, tensors[2 * i + 1]->data,
               tensors[2 * i + 1]->byte_size);
    }
out:
    free(tensors);
    return err;
}

static void dense_model_free(void *opaque) {
    dense_model *model = opaque;
    if (!model)
        return;
    free(model->name);
    free(model->layers);
    free(model->params);
    free(model);
}

osp_error *dense_weights_path(const osp_model_config *config,
                              const char *version_path, char **out) {
    const char *file = osp_model_config_parameter(config, "weights");
    if (!file)
        file = DENSE_DEFAULT_WEIGHTS;
    if (file[0] == '\0' || strchr(file, '/') || strcmp(file, ".") == 0 ||
        strcmp(file, "..") == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': parameter 'weights' is '%s'; "
                             "it must name a file in the version folder",
                             config->name, file);
    size_t len = strlen(version_path) + 1 + strlen(file) + 1;
    char *path = malloc(len);
    if (!path)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "dense model '%s': out of memory", config->name);
    snprintf(path, len, "%s/%s", version_path, file);
    *out = path;
    return NULL;
}

osp_error *dense_weights_load(const osp_model_config *config, const char *path,
                              safetensors **out) {
    osp_error *err = safetensors_load(path, out);
    if (!err)
        return NULL;
    if (osp_error_get_code(err) != OSP_ERROR_NOT_FOUND)
        return osp_error_wrap(err, "dense model '%s'", config->name);
    osp_error_free(err);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "dense model '%s': weights file '%s' not found "
                         "(parameter 'weights' names a file in the "
                         "version folder; default " DENSE_DEFAULT_WEIGHTS ")",
                         config->name, path);
}

static osp_error *dense_model_new(const osp_model_config *config,
                                  const char *version_path, void **out) {
    osp_error *err = NULL;
    safetensors *st = NULL;
    char *path = NULL;
    dense_model *model = calloc(1, sizeof *model);

    if (!model || !(model->name = strdup(config->name))) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "dense model '%s': out of memory", config->name);
        goto out;
    }
    if ((err = check_config(config, model)) ||
        (err = parse_parameters(config, model)) ||
        (err = dense_weights_path(config, version_path, &path)) ||
        (err = dense_weights_load(config, path, &st)))
        goto out;
    if ((err = load_layers(model, st, path)))
        goto out;
    *out = model;
    model = NULL;
out:
    safetensors_free(st);
    free(path);
    dense_model_free(model);
    return err;
}

/* ---- instances -------------------------------------------------------- */

static void dense_instance_free(void *opaque) {
    dense_instance *inst = opaque;
    if (!inst)
        return;
    /* Work still queued may read these buffers. */
    osp_error_free(osp_stream_synchronize(inst->stream));
    osp_buffer_free(inst->params);
    osp_buffer_free(inst->scratch[0]);
    osp_buffer_free(inst->scratch[1]);
    free(inst);
}

/* Uploads the weights to `device` and waits for the copy. */
static osp_error *dense_instance_new(void *opaque, osp_device *device,
                                     osp_stream *stream, void **out) {
    const dense_model *model = opaque;
    osp_error *err = NULL;
    size_t bytes = model->n_params * sizeof(float);
    dense_instance *inst = calloc(1, sizeof *inst);

    if (!inst)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "dense model '%s': out of memory", model->name);
    inst->model = model;
    inst->device = device;
    inst->stream = stream;
    if ((err = osp_device_alloc(device, bytes, &inst->params)) ||
        (err = osp_memcpy_async(stream, inst->params->data, model->params,
                                bytes, OSP_COPY_HOST_TO_DEVICE)) ||
        (err = osp_stream_synchronize(stream))) {
        err = osp_error_wrap(err, "dense model '%s': uploading weights",
                             model->name);
        goto out;
    }
    *out = inst;
    inst = NULL;
out:
    dense_instance_free(inst);
    return err;
}

/* Makes each scratch buffer the layers need hold `rows` rows of the widest
 * hidden layer. Grows only; before freeing smaller buffers it waits for
 * earlier batches on the stream, which may still be using them. */
static osp_error *ensure_scratch(dense_instance *inst, int64_t rows) {
    const dense_model *model = inst->model;
    size_t needed = model->n_layers > 2 ? 2 : model->n_layers - 1;
    osp_error *err;

    if (needed == 0 || rows <= inst->scratch_rows)
        return NULL;
    if ((uint64_t)rows > SIZE_MAX / sizeof(float) / (uint64_t)model->max_hidden)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': batch of %lld rows is too "
                             "large",
                             model->name, (long long)rows);
    size_t bytes = (size_t)rows * (size_t)model->max_hidden * sizeof(float);
    if (inst->scratch_rows > 0 && (err = osp_stream_synchronize(inst->stream)))
        return err;
    for (size_t i = 0; i < 2; i++) {
        osp_buffer_free(inst->scratch[i]);
        inst->scratch[i] = NULL;
    }
    inst->scratch_rows = 0;
    for (size_t i = 0; i < needed; i++)
        if ((err = osp_device_alloc(inst->device, bytes, &inst->scratch[i])))
            return err;
    inst->scratch_rows = rows;
    return NULL;
}

/* Checks the input against the config and sets *rows to the batch size
 * (1 without batching). */
static osp_error *input_rows(const dense_model *model,
                             const osp_backend_tensor *x, int64_t *rows) {
    char got[160];
    bool shape_ok =
        model->batching
            ? x->shape.rank == 2 && x->shape.dims[0] >= 0 &&
                  x->shape.dims[1] == model->in_dim
            : x->shape.rank == 1 && x->shape.dims[0] == model->in_dim;
    bool given = builtin_input_given(x);
    if (!given || x->dtype != OSP_TYPE_FP32 || !shape_ok)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "dense model '%s': input '%s' must be FP32 of "
            "shape %s%lld], got %s %s",
            model->name, x->name, model->batching ? "[N," : "[",
            (long long)model->in_dim, osp_datatype_wire_name(x->dtype),
            given ? osp_shape_format(&x->shape, got, sizeof got) : "nothing");
    int64_t n = model->batching ? x->shape.dims[0] : 1;
    /* Compare in rows so that a huge N cannot overflow the product. */
    size_t row_bytes = (size_t)model->in_dim * sizeof(float);
    if (x->byte_size % row_bytes != 0 ||
        (uint64_t)n != x->byte_size / row_bytes)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': input '%s' has %zu bytes, "
                             "which does not match its shape",
                             model->name, x->name, x->byte_size);
    *rows = n;
    return NULL;
}

static osp_error *dense_execute(void *opaque, osp_execute_ctx *ctx) {
    dense_instance *inst = opaque;
    const dense_model *model = inst->model;
    osp_stream *stream = inst->stream;
    const float *params = inst->params->data;
    osp_error *err;
    int64_t rows = 0;

    if (osp_execute_input_count(ctx) != 1)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "dense model '%s': got %zu inputs, expected 1",
                             model->name, osp_execute_input_count(ctx));
    if (!osp_execute_output_requested(ctx, 0))
        return NULL;
    const osp_backend_tensor *x = osp_execute_input(ctx, 0);
    if ((err = input_rows(model, x, &rows)))
        return err;

    osp_shape out_shape = {.rank = 1, .dims = {model->out_dim}};
    if (model->batching)
        out_shape = (osp_shape){.rank = 2, .dims = {rows, model->out_dim}};
    /* rows * in_dim floats fit in size_t (input_rows), so this does too
     * unless out_dim is wider; check. */
    if ((uint64_t)model->out_dim > SIZE_MAX / sizeof(float) ||
        (rows > 0 &&
         (uint64_t)rows > SIZE_MAX / sizeof(float) / (uint64_t)model->out_dim))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "dense model '%s': batch too large", model->name);
    size_t out_bytes = (size_t)rows * (size_t)model->out_dim * sizeof(float);
    void *y;
    if ((err = osp_execute_output_alloc(ctx, 0, &out_shape, out_bytes, &y)))
        return err;
    if (rows == 0)
        return NULL;
    if ((err = ensure_scratch(inst, rows)))
        return err;

    const float *src = x->data;
    for (size_t i = 0; i < model->n_layers; i++) {
        const dense_layer *layer = &model->layers[i];
        bool last = i + 1 == model->n_layers;
        float *dst = last ? y : inst->scratch[i % 2]->data;
        osp_gemm_args gemm = {
            .trans_a = false,
            .trans_b = true,
            .m = rows,
            .n = layer->out,
            .k = layer->in,
            .alpha = 1.0f,
            .beta = 0.0f,
            .dtype = OSP_TYPE_FP32,
            .a = src,
            .lda = layer->in,
            .b = params + layer->weight_offset,
            .ldb = layer->in,
            .c = dst,
            .ldc = layer->out,
            .allow_tf32 = model->allow_tf32,
        };
        osp_activation act = model->hidden_activation;
        if (last)
            act = model->output_activation == DENSE_OUTPUT_SIGMOID
                      ? OSP_ACTIVATION_SIGMOID
                      : OSP_ACTIVATION_NONE;
        if ((err = osp_op_gemm(stream, &gemm)) ||
            (err = osp_op_bias_activation(stream, dst,
                                          params + layer->bias_offset, rows,
                                          layer->out, act)))
            return err;
        src = dst;
    }
    if (model->output_activation == DENSE_OUTPUT_SOFTMAX)
        return osp_op_softmax_rows(stream, y, y, rows, model->out_dim);
    return NULL;
}

/* Quick when one row's pass touches little memory: at most
 * DENSE_QUICK_MAX_PARAMS weights and biases (256 KiB of FP32; digits_mlp's
 * 64-64-10 has 4,810) costs microseconds per row. A large model (the
 * 1024-wide one reads 8 MiB per pass) gains from batching on its worker
 * instead. */
#define DENSE_QUICK_MAX_PARAMS 65536
static bool dense_execute_is_quick(const void *opaque) {
    const dense_model *model = opaque;
    return model->n_params <= DENSE_QUICK_MAX_PARAMS;
}

const osp_backend builtin_backend_dense = {
    .name = "dense",
    .model_new = dense_model_new,
    .model_free = dense_model_free,
    .instance_new = dense_instance_new,
    .instance_free = dense_instance_free,
    .execute = dense_execute,
    .execute_is_quick = dense_execute_is_quick,
    .auto_complete = dense_auto_complete,
};

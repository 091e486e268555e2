/*
 * An Osprey model as TensorFlow Serving sees it (tfs_model.h): the
 * "tf_serving" declaration of a config (a JSON document, schema in
 * docs/tfserving.md) parsed and checked against the config, the default
 * serving_default signature of a model that declares nothing, and the
 * status and metadata replies of the /v1 API, printed the way protobuf's
 * JSON printer prints them (1-space indent, fields in field-number order,
 * int64 as strings, a newline after the top-level value).
 */
#include "tfs_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "tfs_codec.h"

#define TFS_PARAMETER "tf_serving"
#define TFS_DEFAULT_SIGNATURE "serving_default"

const char *tfs_method_name(tfs_method method) {
    switch (method) {
    case TFS_METHOD_PREDICT:
        return "tensorflow/serving/predict";
    case TFS_METHOD_CLASSIFY:
        return "tensorflow/serving/classify";
    case TFS_METHOD_REGRESS:
        return "tensorflow/serving/regress";
    }
    return "";
}

/* ---- the view -------------------------------------------------------------
 */

static void tensor_infos_free(tfs_tensor_info *infos, size_t n) {
    for (size_t i = 0; infos && i < n; i++) {
        free(infos[i].key);
        free(infos[i].tensor);
        free(infos[i].name);
    }
    free(infos);
}

static void signature_clear(tfs_signature *sig) {
    free(sig->name);
    tensor_infos_free(sig->inputs, sig->n_inputs);
    tensor_infos_free(sig->outputs, sig->n_outputs);
    for (size_t i = 0; sig->features && i < sig->n_features; i++) {
        free(sig->features[i].feature);
        free(sig->features[i].input);
    }
    free(sig->features);
}

void tfs_model_view_free(tfs_model_view *view) {
    if (!view)
        return;
    for (size_t i = 0; view->signatures && i < view->n_signatures; i++)
        signature_clear(&view->signatures[i]);
    free(view->signatures);
    for (size_t i = 0; view->labels && i < view->n_labels; i++)
        free(view->labels[i].label);
    free(view->labels);
    free(view);
}

const tfs_signature *tfs_model_view_signature(const tfs_model_view *view,
                                              const char *name) {
    for (size_t i = 0; view && name && i < view->n_signatures; i++)
        if (!strcmp(view->signatures[i].name, name))
            return &view->signatures[i];
    return NULL;
}

bool tfs_model_view_label(const tfs_model_view *view, const char *label,
                          int64_t *version) {
    for (size_t i = 0; view && label && i < view->n_labels; i++)
        if (!strcmp(view->labels[i].label, label)) {
            *version = view->labels[i].version;
            return true;
        }
    return false;
}

static int cmp_signature(const void *a, const void *b) {
    return strcmp(((const tfs_signature *)a)->name,
                  ((const tfs_signature *)b)->name);
}

static int cmp_tensor_info(const void *a, const void *b) {
    return strcmp(((const tfs_tensor_info *)a)->key,
                  ((const tfs_tensor_info *)b)->key);
}

static int cmp_feature(const void *a, const void *b) {
    return strcmp(((const tfs_feature_spec *)a)->feature,
                  ((const tfs_feature_spec *)b)->feature);
}

static int cmp_label(const void *a, const void *b) {
    return strcmp(((const tfs_version_label *)a)->label,
                  ((const tfs_version_label *)b)->label);
}

/* The shape metadata shows for a config tensor: its dims, after a -1 batch
 * dimension when the model batches. */
static void config_shape(const osp_model_config *config, const osp_model_io *io,
                         osp_shape *out) {
    int batch = config->max_batch_size > 0;
    out->rank = 0;
    if (batch)
        out->dims[out->rank++] = -1;
    for (int i = 0; i < io->dims.rank && out->rank < OSP_MAX_DIMS; i++)
        out->dims[out->rank++] = io->dims.dims[i];
}

/* Fills `info` for config tensor `io` as the default signature shows it:
 * key and tensor = its name, TF name "<name>:0". */
static osp_error *info_from_config(const osp_model_config *config,
                                   const osp_model_io *io,
                                   tfs_tensor_info *info) {
    size_t len = strlen(io->name);
    info->key = strdup(io->name);
    info->tensor = strdup(io->name);
    info->name = malloc(len + 3);
    if (!info->key || !info->tensor || !info->name)
        return osp_error_out_of_memory();
    memcpy(info->name, io->name, len);
    memcpy(info->name + len, ":0", 3);
    info->dtype = io->dtype;
    info->has_shape = true;
    info->unknown_rank = false;
    config_shape(config, io, &info->shape);
    return NULL;
}

/* serving_default: predict, every config input and output. */
static osp_error *default_view(const osp_model_config *config,
                               tfs_model_view *view) {
    osp_error *err = NULL;
    tfs_signature *sig = calloc(1, sizeof *sig);
    if (!sig)
        return osp_error_out_of_memory();
    view->signatures = sig;
    view->n_signatures = 1;
    sig->method = TFS_METHOD_PREDICT;
    if (!(sig->name = strdup(TFS_DEFAULT_SIGNATURE)) ||
        (config->n_inputs &&
         !(sig->inputs = calloc(config->n_inputs, sizeof *sig->inputs))) ||
        (config->n_outputs &&
         !(sig->outputs = calloc(config->n_outputs, sizeof *sig->outputs))))
        return osp_error_out_of_memory();
    for (size_t i = 0; i < config->n_inputs && !err; i++, sig->n_inputs++)
        err = info_from_config(config, &config->inputs[i], &sig->inputs[i]);
    for (size_t i = 0; i < config->n_outputs && !err; i++, sig->n_outputs++)
        err = info_from_config(config, &config->outputs[i], &sig->outputs[i]);
    if (err)
        return err;
    qsort(sig->inputs, sig->n_inputs, sizeof *sig->inputs, cmp_tensor_info);
    qsort(sig->outputs, sig->n_outputs, sizeof *sig->outputs, cmp_tensor_info);
    return NULL;
}

/* ---- the declaration ------------------------------------------------------
 */

/* What the parser is looking at, for messages. */
typedef struct decl_ctx {
    const osp_model_config *config;
} decl_ctx;

/* INVALID_ARG "model '<m>': parameter 'tf_serving': <why>". */
static osp_error *decl_error(const decl_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static osp_error *decl_error(const decl_ctx *ctx, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "model '%s': parameter '" TFS_PARAMETER "': %s",
                         ctx->config->name, why);
}

static const char *json_type_word(struct json_object *v) {
    switch (json_object_get_type(v)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "a boolean";
    case json_type_double:
    case json_type_int:
        return "a number";
    case json_type_object:
        return "an object";
    case json_type_array:
        return "an array";
    case json_type_string:
        return "a string";
    }
    return "a value";
}

/* Fails naming `where` and the first key of `obj` not in `allowed`
 * (NULL-terminated): a misspelt key is a mistake, not an extension. */
static osp_error *only_keys(const decl_ctx *ctx, struct json_object *obj,
                            const char *where, const char *const *allowed) {
    json_object_object_foreach(obj, key, val) {
        (void)val;
        bool known = false;
        for (size_t i = 0; allowed[i] && !known; i++)
            known = !strcmp(key, allowed[i]);
        if (!known) {
            char list[256] = "";
            for (size_t i = 0; allowed[i]; i++) {
                strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, allowed[i], sizeof list - strlen(list) - 1);
            }
            return decl_error(ctx, "%s: unknown key '%s' (known: %s)", where,
                              key, list);
        }
    }
    return NULL;
}

static osp_error *want_object(const decl_ctx *ctx, struct json_object *v,
                              const char *where) {
    if (!json_object_is_type(v, json_type_object))
        return decl_error(ctx, "%s must be an object, got %s", where,
                          json_type_word(v));
    return NULL;
}

static osp_error *want_string(const decl_ctx *ctx, struct json_object *v,
                              const char *where, const char **out) {
    if (!json_object_is_type(v, json_type_string) ||
        json_object_get_string_len(v) == 0)
        return decl_error(ctx, "%s must be a non-empty string, got %s", where,
                          json_object_is_type(v, json_type_string)
                              ? "\"\""
                              : json_type_word(v));
    *out = json_object_get_string(v);
    if (strlen(*out) != (size_t)json_object_get_string_len(v))
        return decl_error(ctx, "%s must not contain NUL characters", where);
    return NULL;
}

/* "shape": [d, ...] (each >= -1), "unknown_rank", or null (no shape). */
static osp_error *parse_shape(const decl_ctx *ctx, struct json_object *v,
                              const char *where, tfs_tensor_info *info) {
    if (!v) {
        info->has_shape = false;
        return NULL;
    }
    if (json_object_is_type(v, json_type_string) &&
        !strcmp(json_object_get_string(v), "unknown_rank")) {
        info->has_shape = true;
        info->unknown_rank = true;
        info->shape.rank = 0;
        return NULL;
    }
    if (!json_object_is_type(v, json_type_array))
        return decl_error(ctx,
                          "%s: \"shape\" must be an array of dimensions, "
                          "\"unknown_rank\" or null, got %s",
                          where, json_type_word(v));
    size_t n = json_object_array_length(v);
    if (n > OSP_MAX_DIMS)
        return decl_error(ctx, "%s: \"shape\" has %zu dimensions; at most %d",
                          where, n, OSP_MAX_DIMS);
    info->has_shape = true;
    info->unknown_rank = false;
    info->shape.rank = (int)n;
    for (size_t i = 0; i < n; i++) {
        struct json_object *d = json_object_array_get_idx(v, i);
        if (!json_is_int64(d) || json_object_get_int64(d) < -1)
            return decl_error(ctx,
                              "%s: \"shape\" dimension %zu must be an "
                              "integer >= -1 (-1: any size)",
                              where, i);
        info->shape.dims[i] = json_object_get_int64(d);
    }
    return NULL;
}

typedef enum info_role {
    ROLE_PREDICT_INPUT,
    ROLE_EXAMPLES_INPUT, /* classify/regress: serialized tf.Examples */
    ROLE_OUTPUT,
} info_role;

/* One entry of a signature's "inputs" or "outputs" map. */
static osp_error *parse_tensor_info(const decl_ctx *ctx, const char *sig,
                                    const char *key, struct json_object *v,
                                    info_role role, tfs_tensor_info *info) {
    static const char *const keys[] = {"tensor", "name", "dtype", "shape",
                                       NULL};
    const osp_model_config *config = ctx->config;
    const char *kind = role == ROLE_OUTPUT ? "output" : "input";
    char where[384];
    struct json_object *m;
    osp_error *err;
    const char *tensor = NULL, *name = NULL, *dtype = NULL;
    const osp_model_io *io = NULL;

    snprintf(where, sizeof where, "signature '%s': %s '%s'", sig, kind, key);
    if (!(info->key = strdup(key)))
        return osp_error_out_of_memory();
    if ((err = want_object(ctx, v, where)) ||
        (err = only_keys(ctx, v, where, keys)))
        return err;
    if (json_object_object_get_ex(v, "tensor", &m)) {
        /* A classify/regress input of another dtype than DT_STRING is a
         * tensor inside the graph (half_plus_two's x2:0): :predict feeds
         * it directly, :classify and :regress still go through the
         * features. */
        struct json_object *d;
        if (role == ROLE_EXAMPLES_INPUT &&
            (!json_object_object_get_ex(v, "dtype", &d) ||
             !json_object_is_type(d, json_type_string) ||
             strcmp(json_object_get_string(d), "DT_STRING") == 0))
            return decl_error(ctx,
                              "%s: the input of a classify or regress "
                              "signature takes serialized tf.Examples; its "
                              "features say which inputs they fill, so it "
                              "names no \"tensor\" unless its \"dtype\" "
                              "is another than DT_STRING",
                              where);
        if ((err = want_string(ctx, m, where, &tensor)))
            return err;
        int idx = role == ROLE_OUTPUT
                      ? osp_model_config_output_index(config, tensor)
                      : osp_model_config_input_index(config, tensor);
        if (idx < 0)
            return decl_error(ctx,
                              "%s: \"tensor\" '%s' is not an %s of the "
                              "model",
                              where, tensor, kind);
        io = role == ROLE_OUTPUT ? &config->outputs[idx] : &config->inputs[idx];
    } else if (role != ROLE_EXAMPLES_INPUT) {
        return decl_error(ctx, "%s: needs \"tensor\", the model %s it is",
                          where, kind);
    }
    if (json_object_object_get_ex(v, "name", &m) &&
        (err = want_string(ctx, m, where, &name)))
        return err;
    if (!name && !io)
        return decl_error(ctx,
                          "%s: needs \"name\", the TensorFlow tensor name "
                          "metadata shows (e.g. \"tf_example:0\")",
                          where);
    if (json_object_object_get_ex(v, "dtype", &m)) {
        if ((err = want_string(ctx, m, where, &dtype)))
            return err;
        info->dtype = tfs_dtype_from_enum_name(dtype);
        if (info->dtype == OSP_TYPE_INVALID)
            return decl_error(ctx,
                              "%s: unknown \"dtype\" '%s' (DT_FLOAT, "
                              "DT_INT32, DT_STRING, ...)",
                              where, dtype);
        if (io && info->dtype != io->dtype)
            return decl_error(ctx,
                              "%s: \"dtype\" %s does not match %s '%s', "
                              "which is %s",
                              where, dtype, kind, io->name,
                              osp_datatype_config_name(io->dtype));
    } else {
        info->dtype = io ? io->dtype : OSP_TYPE_BYTES;
    }
    if (json_object_object_get_ex(v, "shape", &m)) {
        if ((err = parse_shape(ctx, m, where, info)))
            return err;
    } else if (io) {
        info->has_shape = true;
        config_shape(config, io, &info->shape);
    } else {
        info->has_shape = true;
        info->unknown_rank = true;
    }
    if (io && !(info->tensor = strdup(io->name)))
        return osp_error_out_of_memory();
    if (name) {
        info->name = strdup(name);
    } else {
        size_t len = strlen(io->name);
        if ((info->name = malloc(len + 3))) {
            memcpy(info->name, io->name, len);
            memcpy(info->name + len, ":0", 3);
        }
    }
    return info->name ? NULL : osp_error_out_of_memory();
}

/* A signature's "inputs" or "outputs" map into a sorted array. */
static osp_error *parse_info_map(const decl_ctx *ctx, const char *sig,
                                 struct json_object *v, const char *which,
                                 info_role role, tfs_tensor_info **out,
                                 size_t *n_out) {
    char where[320];
    osp_error *err;
    snprintf(where, sizeof where, "signature '%s': \"%s\"", sig, which);
    if (!v)
        return decl_error(ctx, "%s is missing", where);
    if ((err = want_object(ctx, v, where)))
        return err;
    size_t n = (size_t)json_object_object_length(v);
    if (n == 0)
        return decl_error(ctx, "%s is empty", where);
    tfs_tensor_info *infos = calloc(n, sizeof *infos);
    if (!infos)
        return osp_error_out_of_memory();
    *out = infos;
    *n_out = 0;
    json_object_object_foreach(v, key, val) {
        (*n_out)++;
        if ((err = parse_tensor_info(ctx, sig, key, val, role,
                                     &infos[*n_out - 1])))
            return err;
    }
    qsort(infos, *n_out, sizeof *infos, cmp_tensor_info);
    return NULL;
}

/* classify/regress "features": feature -> {"input": ..., "default": ...}. */
static osp_error *parse_features(const decl_ctx *ctx, const char *sig,
                                 struct json_object *v, tfs_signature *out) {
    static const char *const keys[] = {"input", "default", NULL};
    char where[384];
    osp_error *err;
    snprintf(where, sizeof where, "signature '%s': \"features\"", sig);
    if (!v)
        return decl_error(ctx,
                          "%s is missing: a classify or regress signature "
                          "says which model input each tf.Example feature "
                          "fills",
                          where);
    if ((err = want_object(ctx, v, where)))
        return err;
    size_t n = (size_t)json_object_object_length(v);
    if (n == 0)
        return decl_error(ctx, "%s is empty", where);
    if (!(out->features = calloc(n, sizeof *out->features)))
        return osp_error_out_of_memory();
    json_object_object_foreach(v, feature, spec) {
        tfs_feature_spec *f = &out->features[out->n_features++];
        struct json_object *m;
        const char *input;
        snprintf(where, sizeof where, "signature '%s': feature '%s'", sig,
                 feature);
        if (!(f->feature = strdup(feature)))
            return osp_error_out_of_memory();
        if ((err = want_object(ctx, spec, where)) ||
            (err = only_keys(ctx, spec, where, keys)))
            return err;
        if (!json_object_object_get_ex(spec, "input", &m))
            return decl_error(ctx,
                              "%s: needs \"input\", the model input it "
                              "fills",
                              where);
        if ((err = want_string(ctx, m, where, &input)))
            return err;
        int idx = osp_model_config_input_index(ctx->config, input);
        if (idx < 0)
            return decl_error(ctx,
                              "%s: \"input\" '%s' is not an input of "
                              "the model",
                              where, input);
        if (ctx->config->inputs[idx].dtype != OSP_TYPE_FP32)
            return decl_error(
                ctx,
                "%s: input '%s' is %s; features are float "
                "(FixedLenFeature([1], tf.float32)) and fill "
                "TYPE_FP32 inputs only",
                where, input,
                osp_datatype_config_name(ctx->config->inputs[idx].dtype));
        for (size_t i = 0; i + 1 < out->n_features; i++)
            if (!strcmp(out->features[i].input, input))
                return decl_error(ctx,
                                  "%s: input '%s' is already filled by "
                                  "feature '%s'",
                                  where, input, out->features[i].feature);
        if (!(f->input = strdup(input)))
            return osp_error_out_of_memory();
        if (json_object_object_get_ex(spec, "default", &m)) {
            if (!json_object_is_type(m, json_type_double) &&
                !json_object_is_type(m, json_type_int))
                return decl_error(ctx,
                                  "%s: \"default\" must be a number, "
                                  "got %s",
                                  where, json_type_word(m));
            f->has_default = true;
            f->default_value = (float)json_object_get_double(m);
        }
    }
    qsort(out->features, out->n_features, sizeof *out->features, cmp_feature);
    return NULL;
}

/* The output checks §5 makes of classify and regress signatures, done once
 * here so that a declaration TF would refuse at every request does not
 * load: regress has one output "outputs" (FP32); classify one or two of
 * "classes" (BYTES) and "scores" (FP32). */
static osp_error *check_examples_outputs(const decl_ctx *ctx, const char *sig,
                                         const tfs_signature *s) {
    bool regress = s->method == TFS_METHOD_REGRESS;
    if (s->n_inputs != 1 || strcmp(s->inputs[0].key, "inputs") != 0)
        return decl_error(ctx,
                          "signature '%s': a %s signature has exactly one "
                          "input, keyed \"inputs\"",
                          sig, regress ? "regress" : "classify");
    if (regress && (s->n_outputs != 1 || strcmp(s->outputs[0].key, "outputs")))
        return decl_error(ctx,
                          "signature '%s': a regress signature has exactly "
                          "one output, keyed \"outputs\"",
                          sig);
    for (size_t i = 0; i < s->n_outputs; i++) {
        const tfs_tensor_info *o = &s->outputs[i];
        bool classes = !strcmp(o->key, "classes");
        if (!regress && !classes && strcmp(o->key, "scores") != 0)
            return decl_error(ctx,
                              "signature '%s': output '%s': a classify "
                              "signature's outputs are \"classes\" and/or "
                              "\"scores\"",
                              sig, o->key);
        osp_datatype want = classes ? OSP_TYPE_BYTES : OSP_TYPE_FP32;
        if (o->dtype != want)
            return decl_error(ctx, "signature '%s': output '%s' must be %s",
                              sig, o->key, tfs_dtype_enum_name(want));
    }
    return NULL;
}

static osp_error *parse_signature(const decl_ctx *ctx, const char *name,
                                  struct json_object *v, tfs_signature *sig) {
    static const char *const keys[] = {"method",   "inputs",      "outputs",
                                       "features", "elementwise", NULL};
    char where[320];
    struct json_object *m;
    const char *method;
    osp_error *err;

    snprintf(where, sizeof where, "signature '%s'", name);
    if (!(sig->name = strdup(name)))
        return osp_error_out_of_memory();
    if ((err = want_object(ctx, v, where)) ||
        (err = only_keys(ctx, v, where, keys)))
        return err;
    if (!json_object_object_get_ex(v, "method", &m))
        return decl_error(ctx,
                          "%s: needs \"method\": \"predict\", "
                          "\"classify\" or \"regress\"",
                          where);
    if ((err = want_string(ctx, m, where, &method)))
        return err;
    if (!strcmp(method, "predict"))
        sig->method = TFS_METHOD_PREDICT;
    else if (!strcmp(method, "classify"))
        sig->method = TFS_METHOD_CLASSIFY;
    else if (!strcmp(method, "regress"))
        sig->method = TFS_METHOD_REGRESS;
    else
        return decl_error(ctx,
                          "%s: unknown \"method\" '%s' (predict, "
                          "classify, regress)",
                          where, method);
    bool predict = sig->method == TFS_METHOD_PREDICT;
    if ((err = parse_info_map(
             ctx, name, json_object_object_get(v, "inputs"), "inputs",
             predict ? ROLE_PREDICT_INPUT : ROLE_EXAMPLES_INPUT, &sig->inputs,
             &sig->n_inputs)) ||
        (err = parse_info_map(ctx, name, json_object_object_get(v, "outputs"),
                              "outputs", ROLE_OUTPUT, &sig->outputs,
                              &sig->n_outputs)))
        return err;
    if (json_object_object_get_ex(v, "elementwise", &m)) {
        if (!json_object_is_type(m, json_type_boolean))
            return decl_error(ctx,
                              "%s: \"elementwise\" must be true or "
                              "false, got %s",
                              where, json_type_word(m));
        sig->elementwise = json_object_get_boolean(m);
    }
    if (predict) {
        if (json_object_object_get_ex(v, "features", &m))
            return decl_error(ctx,
                              "%s: \"features\" are for classify and "
                              "regress signatures only",
                              where);
        return NULL;
    }
    if ((err = check_examples_outputs(ctx, name, sig)))
        return err;
    return parse_features(ctx, name, json_object_object_get(v, "features"),
                          sig);
}

static osp_error *parse_labels(const decl_ctx *ctx, struct json_object *v,
                               tfs_model_view *view) {
    osp_error *err;
    if ((err = want_object(ctx, v, "\"version_labels\"")))
        return err;
    size_t n = (size_t)json_object_object_length(v);
    if (n == 0)
        return NULL;
    if (!(view->labels = calloc(n, sizeof *view->labels)))
        return osp_error_out_of_memory();
    json_object_object_foreach(v, label, version) {
        if (!*label)
            return decl_error(ctx, "\"version_labels\": a label must not be "
                                   "empty");
        if (!json_is_int64(version) || json_object_get_int64(version) < 0)
            return decl_error(ctx,
                              "\"version_labels\": label '%s' must map to a "
                              "version number (an integer >= 0), got %s",
                              label, json_type_word(version));
        tfs_version_label *l = &view->labels[view->n_labels++];
        l->version = json_object_get_int64(version);
        if (!(l->label = strdup(label)))
            return osp_error_out_of_memory();
    }
    qsort(view->labels, view->n_labels, sizeof *view->labels, cmp_label);
    return NULL;
}

static osp_error *parse_declaration(const decl_ctx *ctx, const char *text,
                                    tfs_model_view *view) {
    static const char *const keys[] = {"version_labels", "signatures", NULL};
    struct json_object *root = NULL, *m;
    osp_error *err = json_parse_body(text, strlen(text), &root);
    if (err) {
        osp_error *bad =
            decl_error(ctx, "not valid JSON: %s", osp_error_message(err));
        osp_error_free(err);
        return bad;
    }
    if ((err = want_object(ctx, root, "the declaration")) ||
        (err = only_keys(ctx, root, "the declaration", keys)))
        goto out;
    if (json_object_object_get_ex(root, "version_labels", &m) &&
        (err = parse_labels(ctx, m, view)))
        goto out;
    if (!json_object_object_get_ex(root, "signatures", &m)) {
        err = default_view(ctx->config, view);
        goto out;
    }
    if ((err = want_object(ctx, m, "\"signatures\"")))
        goto out;
    size_t n = (size_t)json_object_object_length(m);
    if (n == 0) {
        err = decl_error(ctx, "\"signatures\" is empty; leave it out for "
                              "the default serving_default");
        goto out;
    }
    if (!(view->signatures = calloc(n, sizeof *view->signatures))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    json_object_object_foreach(m, name, sig) {
        if (!*name) {
            err = decl_error(ctx, "a signature name must not be empty");
            goto out;
        }
        if ((err = parse_signature(ctx, name, sig,
                                   &view->signatures[view->n_signatures++])))
            goto out;
    }
    qsort(view->signatures, view->n_signatures, sizeof *view->signatures,
          cmp_signature);
out:
    json_free(root);
    return err;
}

osp_error *tfs_model_view_new(const osp_model_config *config,
                              tfs_model_view **out) {
    osp_error *err = NULL;
    decl_ctx ctx = {.config = config};
    tfs_model_view *view = calloc(1, sizeof *view);
    if (!view)
        return osp_error_out_of_memory();
    const char *text = osp_model_config_parameter(config, TFS_PARAMETER);
    err =
        text ? parse_declaration(&ctx, text, view) : default_view(config, view);
    if (err) {
        tfs_model_view_free(view);
        return err;
    }
    *out = view;
    return NULL;
}

/* ---- protobuf's JSON printer ----------------------------------------------
 */

/* Whether protobuf's JSON writer escapes code point `c` (besides the short
 * escapes): control characters, '<', '>' and invisible or formatting
 * characters that are dangerous in JavaScript. */
static bool pb_must_escape(uint32_t c) {
    static const uint32_t ranges[][2] = {
        {0x0000, 0x001f}, {0x007f, 0x009f},   {0x0600, 0x0603},
        {0x200b, 0x200f}, {0x2028, 0x202e},   {0x2060, 0x2064},
        {0x206a, 0x206f}, {0x1d173, 0x1d17a}, {0xe0020, 0xe007f},
    };
    switch (c) {
    case '<':
    case '>':
    case 0xfeff:
    case 0xfff9:
    case 0xfffa:
    case 0xfffb:
    case 0x00ad:
    case 0x06dd:
    case 0x070f:
    case 0x17b4:
    case 0x17b5:
    case 0xe0001:
        return true;
    }
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (c >= ranges[i][0] && c <= ranges[i][1])
            return true;
    return false;
}

/* Decodes one UTF-8 sequence at s[0..n) as protobuf's writer does: the lead
 * byte says how many continuation bytes to take; each one is consumed even
 * when it turns out not to be one. Sets *used; returns the code point or
 * UINT32_MAX for a malformed sequence. */
static uint32_t pb_utf8_next(const unsigned char *s, size_t n, size_t *used) {
    unsigned char lead = s[0];
    int more;
    uint32_t c;
    bool bad = false;
    if (lead < 0x80) {
        *used = 1;
        return lead;
    } else if ((lead & 0xe0) == 0xc0) {
        more = 1, c = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
        more = 2, c = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
        more = 3, c = lead & 0x07;
    } else {
        *used = 1;
        return UINT32_MAX;
    }
    size_t i = 1;
    for (int k = 0; k < more; k++) {
        if (i >= n) {
            bad = true;
            break;
        }
        unsigned char b = s[i++];
        if ((b & 0xc0) != 0x80) {
            bad = true;
            break;
        }
        c = (c << 6) | (b & 0x3f);
    }
    *used = i;
    return bad || c > 0x10ffff ? UINT32_MAX : c;
}

/* A quoted string escaped as protobuf's JSON writer escapes it: the JSON
 * short escapes, \uXXXX (lower-case hex, surrogate pairs above U+FFFF) for
 * the characters pb_must_escape names, a space for malformed UTF-8. */
static void pb_string(bytebuf *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    bytebuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t c = pb_utf8_next(s + i, n - i, &used);
        const char *esc = NULL;
        switch (c) {
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '"':
            esc = "\\\"";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case UINT32_MAX:
            esc = " ";
            break;
        }
        if (esc) {
            bytebuf_puts(b, esc);
        } else if (!pb_must_escape(c)) {
            bytebuf_put(b, s + i, used);
        } else if (c < 0x10000) {
            bytebuf_printf(b, "\\u%04x", (unsigned)c);
        } else {
            uint32_t v = c - 0x10000;
            bytebuf_printf(b, "\\u%04x\\u%04x", (unsigned)(0xd800 + (v >> 10)),
                           (unsigned)(0xdc00 + (v & 0x3ff)));
        }
        i += used;
    }
    bytebuf_putc(b, '"');
}

/* Protobuf's pretty printer: each member or element on its own line,
 * indented one space per level; "key": value; empty containers as {} and
 * []. `first` tracks the comma of the container being written. */
static void pb_newline(bytebuf *b, int indent) {
    bytebuf_putc(b, '\n');
    for (int i = 0; i < indent; i++)
        bytebuf_putc(b, ' ');
}

static void pb_key(bytebuf *b, int indent, bool *first, const char *key) {
    if (!*first)
        bytebuf_putc(b, ',');
    *first = false;
    pb_newline(b, indent);
    pb_string(b, key);
    bytebuf_puts(b, ": ");
}

/* Closes a container opened at `indent`. */
static void pb_close(bytebuf *b, int indent, bool first, char close) {
    if (!first)
        pb_newline(b, indent);
    bytebuf_putc(b, close);
}

static void pb_int64_string(bytebuf *b, int64_t v) {
    bytebuf_putc(b, '"');
    json_write_int(b, v);
    bytebuf_putc(b, '"');
}

/* TensorShapeProto: dim (2), unknown_rank (3); Dim: size (1), name (2). */
static void pb_tensor_shape(bytebuf *b, int indent,
                            const tfs_tensor_info *info) {
    bool first = true;
    bytebuf_putc(b, '{');
    pb_key(b, indent + 1, &first, "dim");
    bytebuf_putc(b, '[');
    int rank = info->unknown_rank ? 0 : info->shape.rank;
    for (int i = 0; i < rank; i++) {
        bool dim_first = true;
        if (i)
            bytebuf_putc(b, ',');
        pb_newline(b, indent + 2);
        bytebuf_putc(b, '{');
        pb_key(b, indent + 3, &dim_first, "size");
        pb_int64_string(b, info->shape.dims[i]);
        pb_key(b, indent + 3, &dim_first, "name");
        bytebuf_puts(b, "\"\"");
        pb_close(b, indent + 2, dim_first, '}');
    }
    pb_close(b, indent + 1, rank == 0, ']');
    pb_key(b, indent + 1, &first, "unknown_rank");
    bytebuf_puts(b, info->unknown_rank ? "true" : "false");
    pb_close(b, indent, first, '}');
}

/* TensorInfo: name (1), dtype (2), tensor_shape (3, only when set). */
static void pb_tensor_info(bytebuf *b, int indent,
                           const tfs_tensor_info *info) {
    bool first = true;
    bytebuf_putc(b, '{');
    pb_key(b, indent + 1, &first, "name");
    pb_string(b, info->name);
    pb_key(b, indent + 1, &first, "dtype");
    bytebuf_puts(b, "\"");
    bytebuf_puts(b, tfs_dtype_enum_name(info->dtype));
    bytebuf_puts(b, "\"");
    if (info->has_shape) {
        pb_key(b, indent + 1, &first, "tensor_shape");
        pb_tensor_shape(b, indent + 1, info);
    }
    pb_close(b, indent, first, '}');
}

static void pb_info_map(bytebuf *b, int indent, const tfs_tensor_info *infos,
                        size_t n) {
    bool first = true;
    bytebuf_putc(b, '{');
    for (size_t i = 0; i < n; i++) {
        pb_key(b, indent + 1, &first, infos[i].key);
        pb_tensor_info(b, indent + 1, &infos[i]);
    }
    pb_close(b, indent, first, '}');
}

/* SignatureDef: inputs (1), outputs (2), method_name (3), defaults (4). */
static void pb_signature(bytebuf *b, int indent, const tfs_signature *sig) {
    bool first = true;
    bytebuf_putc(b, '{');
    pb_key(b, indent + 1, &first, "inputs");
    pb_info_map(b, indent + 1, sig->inputs, sig->n_inputs);
    pb_key(b, indent + 1, &first, "outputs");
    pb_info_map(b, indent + 1, sig->outputs, sig->n_outputs);
    pb_key(b, indent + 1, &first, "method_name");
    pb_string(b, tfs_method_name(sig->method));
    pb_key(b, indent + 1, &first, "defaults");
    bytebuf_puts(b, "{}");
    pb_close(b, indent, first, '}');
}

/* ---- replies --------------------------------------------------------------
 */

static int cmp_entry_version_desc(const void *a, const void *b) {
    int64_t va = ((const osp_repository_entry *)a)->version;
    int64_t vb = ((const osp_repository_entry *)b)->version;
    return va < vb ? 1 : va > vb ? -1 : 0;
}

/* ModelVersionStatus.State name and whether the status is OK. */
static const char *version_state(osp_model_state state, bool *ok) {
    *ok = true;
    switch (state) {
    case OSP_MODEL_STATE_READY:
        return "AVAILABLE";
    case OSP_MODEL_STATE_LOADING:
        return "LOADING";
    case OSP_MODEL_STATE_UNLOADING:
        return "UNLOADING";
    case OSP_MODEL_STATE_UNAVAILABLE:
        *ok = false;
        return "END";
    case OSP_MODEL_STATE_UNKNOWN:
        break;
    }
    return "UNKNOWN";
}

osp_error *tfs_write_model_status(osp_server *server, const char *name,
                                  bool has_version, int64_t version,
                                  struct bytebuf *out) {
    osp_repository_entry *entries = NULL;
    size_t n = 0, kept = 0;
    osp_error *err = osp_server_repository_index(server, false, &entries, &n);
    if (err)
        return err;
    /* Keep the versions of `name` that exist (a model that never got as far
     * as its versions has none to show), moved to the front. */
    for (size_t i = 0; i < n; i++) {
        const osp_repository_entry *e = &entries[i];
        if (strcmp(e->name, name) != 0 || e->version < 0 ||
            (has_version && e->version != version))
            continue;
        osp_repository_entry tmp = entries[kept];
        entries[kept++] = *e;
        entries[i] = tmp;
    }
    if (kept == 0) {
        if (has_version)
            err = osp_error_new_reason(
                OSP_ERROR_NOT_FOUND, OSP_REASON_VERSION_NOT_FOUND,
                "Could not find version %lld of model %s", (long long)version,
                name);
        else
            err = osp_error_new_reason(OSP_ERROR_NOT_FOUND,
                                       OSP_REASON_MODEL_NOT_FOUND,
                                       "Could not find any versions of model "
                                       "%s",
                                       name);
        goto out;
    }
    qsort(entries, kept, sizeof *entries, cmp_entry_version_desc);

    bool first = true;
    bytebuf_putc(out, '{');
    pb_key(out, 1, &first, "model_version_status");
    bytebuf_putc(out, '[');
    for (size_t i = 0; i < kept; i++) {
        bool ok, f = true, sf = true;
        const char *state = version_state(entries[i].state, &ok);
        ok = ok || entries[i].unloaded; /* END after an unload is OK */
        if (i)
            bytebuf_putc(out, ',');
        pb_newline(out, 2);
        bytebuf_putc(out, '{');
        pb_key(out, 3, &f, "version");
        pb_int64_string(out, entries[i].version);
        pb_key(out, 3, &f, "state");
        pb_string(out, state);
        pb_key(out, 3, &f, "status");
        bytebuf_putc(out, '{');
        pb_key(out, 4, &sf, "error_code");
        pb_string(out, ok ? "OK" : "UNKNOWN");
        pb_key(out, 4, &sf, "error_message");
        pb_string(out, ok ? "" : entries[i].reason);
        pb_close(out, 3, sf, '}');
        pb_close(out, 2, f, '}');
    }
    pb_close(out, 1, false, ']');
    pb_close(out, 0, first, '}');
    bytebuf_putc(out, '\n');
out:
    osp_repository_index_free(entries, n);
    return err;
}

void tfs_write_model_metadata(const char *name, int64_t version,
                              const tfs_model_view *view, struct bytebuf *out) {
    bool first = true;
    /* ModelSpec: name (1), version (2, Int64Value), signature_name (3). */
    bytebuf_puts(out, "{\n\"model_spec\":{");
    pb_key(out, 1, &first, "name");
    pb_string(out, name);
    pb_key(out, 1, &first, "version");
    pb_int64_string(out, version);
    pb_key(out, 1, &first, "signature_name");
    bytebuf_puts(out, "\"\"");
    pb_close(out, 0, first, '}');
    bytebuf_puts(out, "\n,\n\"metadata\": {\"signature_def\": ");

    /* SignatureDefMap: signature_def (1), a map printed in name order. */
    bool map_first = true, sigs_first = true;
    bytebuf_putc(out, '{');
    pb_key(out, 1, &map_first, "signature_def");
    bytebuf_putc(out, '{');
    for (size_t i = 0; i < view->n_signatures; i++) {
        pb_key(out, 2, &sigs_first, view->signatures[i].name);
        pb_signature(out, 2, &view->signatures[i]);
    }
    pb_close(out, 1, sigs_first, '}');
    pb_close(out, 0, map_first, '}');
    bytebuf_puts(out, "\n}\n}\n");
}

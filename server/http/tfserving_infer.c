/*
 * POST :predict, :classify and :regress of the /v1 surface: the body is
 * parsed (server/tfserving/tfs_codec.h), the servable and signature looked
 * up in TF Serving's order (§3.2, §5 of the protocol reference), the
 * signature's tensors mapped onto the model's inputs and outputs, and the
 * request runs through the core like any other (batching, statistics,
 * trace); the reply is written when it completes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "osprey/infer.h"
#include "osprey/log.h"
#include "tfs_codec.h"
#include "tfserving_internal.h"

/* What a request keeps between start and finish. */
typedef struct infer_state {
    tfserving_action action;
    osp_model *model; /* held */
    tfs_model_view *view;
    const tfs_signature *sig; /* in view */
    tfs_format format;
    /* elementwise predict: the outputs take this (first input's) shape */
    bool reshape_outputs;
    osp_shape feed_shape;
    tfs_examples *examples; /* classify/regress, parsed before the lookup */
    size_t n_examples;
    osp_infer_response *response;
} infer_state;

void tfserving_infer_free(void *p) {
    infer_state *s = p;
    if (!s)
        return;
    if (s->model)
        osp_model_unref(s->model);
    tfs_model_view_free(s->view);
    tfs_examples_free(s->examples);
    osp_infer_response_free(s->response);
    free(s);
}

/* A short protobuf-text rendering of a signature for TF's
 * "... found in SignatureDef: <DebugString>" messages. */
static void signature_debug_string(const tfs_signature *sig, bytebuf *b) {
    for (int pass = 0; pass < 2; pass++) {
        const tfs_tensor_info *infos = pass ? sig->outputs : sig->inputs;
        size_t n = pass ? sig->n_outputs : sig->n_inputs;
        for (size_t i = 0; i < n; i++)
            bytebuf_printf(b,
                           "%s {\n  key: \"%s\"\n  value {\n    name: \"%s\"\n"
                           "    dtype: %s\n  }\n}\n",
                           pass ? "outputs" : "inputs", infos[i].key,
                           infos[i].name, tfs_dtype_enum_name(infos[i].dtype));
    }
    bytebuf_printf(b, "method_name: \"%s\"\n", tfs_method_name(sig->method));
}

static osp_error *signature_error(const tfs_signature *sig, const char *what) {
    bytebuf b;
    bytebuf_init(&b);
    signature_debug_string(sig, &b);
    osp_error *err =
        osp_error_new(OSP_ERROR_INVALID_ARG, "%s found in SignatureDef: %.*s",
                      what, (int)b.len, b.data ? b.data : "");
    bytebuf_free(&b);
    return err;
}

static const tfs_tensor_info *find_info(const tfs_tensor_info *infos, size_t n,
                                        const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].key, key) == 0)
            return &infos[i];
    return NULL;
}

/* The structure checks of TF's classifier/regressor signature validation
 * (with the method-name check off, TF Serving's default). */
static osp_error *check_signature(const tfs_signature *sig,
                                  tfserving_action action) {
    bool classify = action == TFSERVING_CLASSIFY;
    if (sig->n_inputs != 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected one input Tensor.");
    if (classify && (sig->n_outputs < 1 || sig->n_outputs > 2))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected one or two output Tensors, found %zu",
                             sig->n_outputs);
    if (!classify && sig->n_outputs != 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected one output Tensor.");
    if (strcmp(sig->inputs[0].key, "inputs") != 0 ||
        (sig->inputs[0].tensor && sig->n_features == 0))
        return signature_error(sig, classify ? "No classification inputs"
                                             : "No regression inputs");
    if (classify && !find_info(sig->outputs, sig->n_outputs, "classes") &&
        !find_info(sig->outputs, sig->n_outputs, "scores"))
        return signature_error(sig, "No classification outputs");
    if (!classify && !find_info(sig->outputs, sig->n_outputs, "outputs"))
        return signature_error(sig, "No regression outputs");
    return NULL;
}

/* ---- predict ---- */

/* Adds the signature's inputs, fed from the body, to req. */
static osp_error *add_predict_inputs(http_request *http, infer_state *s,
                                     const tfs_body *body,
                                     osp_infer_request *req,
                                     const char *signature) {
    const tfs_signature *sig = s->sig;
    if (sig->n_inputs == 0)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG, "Failed to get input map for signature: %s",
            strcmp(signature, "serving_default") == 0 ? "DEFAULT" : signature);
    tfs_input_spec *specs = calloc(sig->n_inputs, sizeof *specs);
    if (!specs)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < sig->n_inputs; i++)
        specs[i] = (tfs_input_spec){sig->inputs[i].key, sig->inputs[i].dtype};
    tfs_tensor *tensors = NULL;
    osp_error *err = tfs_predict_inputs(body, specs, sig->n_inputs,
                                        http_request_max_input_size(http),
                                        &s->format, &tensors);
    free(specs);
    if (err)
        return err;
    for (size_t i = 0; i < sig->n_inputs && !err; i++) {
        const tfs_tensor_info *info = &sig->inputs[i];
        tfs_tensor *t = &tensors[i];
        if (!info->tensor) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "Input '%s' of signature '%s' is a serialized "
                                "tf.Example: use :classify or :regress",
                                info->key, signature);
            break;
        }
        osp_shape shape = t->shape;
        if (sig->elementwise) {
            /* Any feed shape: the model sees one flat tensor. */
            int64_t count = 1;
            osp_shape_element_count(&t->shape, &count);
            if (i == 0) {
                s->feed_shape = t->shape;
                s->reshape_outputs = true;
            }
            shape = (osp_shape){.rank = 1, .dims = {count}};
        }
        err = osp_infer_request_add_input(req, info->tensor, t->dtype, &shape,
                                          t->data);
        if (!err)
            t->data = NULL; /* moved into the request */
    }
    tfs_tensors_free(tensors, sig->n_inputs);
    return err;
}

/* The reply of a finished predict: the signature's outputs under their
 * keys. */
static osp_error *write_predict(const infer_state *s,
                                const osp_infer_response *r, bytebuf *b) {
    const tfs_signature *sig = s->sig;
    tfs_output *outs =
        calloc(sig->n_outputs ? sig->n_outputs : 1, sizeof *outs);
    if (!outs)
        return osp_error_out_of_memory();
    size_t n = 0;
    for (size_t i = 0; i < sig->n_outputs; i++) {
        const tfs_tensor_info *info = &sig->outputs[i];
        for (size_t j = 0; j < r->n_outputs; j++) {
            const osp_infer_output *o = &r->outputs[j];
            if (!info->tensor || strcmp(o->name, info->tensor) != 0)
                continue;
            osp_shape shape = o->shape;
            int64_t out_count = 0, feed_count = 0;
            if (s->reshape_outputs &&
                osp_shape_element_count(&o->shape, &out_count) &&
                osp_shape_element_count(&s->feed_shape, &feed_count) &&
                out_count == feed_count)
                shape = s->feed_shape;
            outs[n++] = (tfs_output){
                .name = info->key,
                .dtype = o->dtype,
                .shape = shape,
                .data = o->data ? o->data->data : NULL,
                .byte_size = o->data ? o->byte_size : 0,
            };
            break;
        }
    }
    osp_error *err = tfs_write_predict(s->format, outs, n, b);
    free(outs);
    return err;
}

/* ---- classify and regress ---- */

/* The model input shape for n examples of a [1]-shaped feature: [n] for
 * a model without batching, [n, 1] for one that batches. */
static osp_shape feature_shape(const osp_model_config *cfg, const char *input,
                               size_t n) {
    int idx = osp_model_config_input_index(cfg, input);
    if (idx >= 0 && cfg->max_batch_size > 0 && cfg->inputs[idx].dims.rank == 1)
        return (osp_shape){.rank = 2, .dims = {(int64_t)n, 1}};
    return (osp_shape){.rank = 1, .dims = {(int64_t)n}};
}

static const char *feature_kind_name(tfs_feature_kind kind) {
    switch (kind) {
    case TFS_FEATURE_BYTES:
        return "string";
    case TFS_FEATURE_INT64:
        return "int64";
    default:
        return "float";
    }
}

/* One FixedLenFeature([1], float32) column over the examples, as TF's
 * example parser checks it. */
static osp_error *feature_column(const tfs_examples *ex,
                                 const tfs_feature_spec *spec, float *out) {
    size_t n = tfs_examples_count(ex);
    for (size_t i = 0; i < n; i++) {
        const tfs_feature *f =
            tfs_example_feature(tfs_examples_at(ex, i), spec->feature);
        if (!f || f->kind == TFS_FEATURE_EMPTY) {
            if (!spec->has_default)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Name: <unknown>, Feature: %s (data "
                                     "type: float) is required but could not "
                                     "be found.",
                                     spec->feature);
            out[i] = spec->default_value;
            continue;
        }
        if (f->kind != TFS_FEATURE_FLOAT)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Name: <unknown>, Key: %s, Index: %zu.  Data "
                                 "types don't match. Data type: %s but "
                                 "expected type: float",
                                 spec->feature, i, feature_kind_name(f->kind));
        if (f->n != 1)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Name: <unknown>, Key: %s, Index: %zu.  "
                                 "Number of float values != expected.  Values "
                                 "size: %zu but output shape: [1]",
                                 spec->feature, i, f->n);
        out[i] = f->floats[0];
    }
    return NULL;
}

/* Adds one input per feature of the signature, from s->examples. */
static osp_error *add_example_inputs(infer_state *s, osp_infer_request *req) {
    const tfs_examples *ex = s->examples;
    size_t n = tfs_examples_count(ex);
    s->n_examples = n;
    osp_error *err = NULL;
    const osp_model_config *cfg = osp_model_get_config(s->model);
    for (size_t k = 0; k < s->sig->n_features && !err; k++) {
        const tfs_feature_spec *spec = &s->sig->features[k];
        osp_buffer *buf = osp_buffer_new_host(n * sizeof(float));
        if (!buf) {
            err = osp_error_out_of_memory();
            break;
        }
        if ((err = feature_column(ex, spec, buf->data))) {
            osp_buffer_free(buf);
            break;
        }
        osp_shape shape = feature_shape(cfg, spec->input, n);
        if ((err = osp_infer_request_add_input(req, spec->input, OSP_TYPE_FP32,
                                               &shape, buf)))
            osp_buffer_free(buf);
    }
    return err;
}

static const osp_infer_output *response_output(const osp_infer_response *r,
                                               const tfs_tensor_info *info) {
    for (size_t j = 0; info && info->tensor && j < r->n_outputs; j++)
        if (strcmp(r->outputs[j].name, info->tensor) == 0 && r->outputs[j].data)
            return &r->outputs[j];
    return NULL;
}

/* The strings of a BYTES tensor of `count` elements (4-byte length
 * prefixes), NUL-terminated copies in one block: *labels[i] point into
 * *block. Caller frees both. */
static osp_error *bytes_strings(const osp_infer_output *o, size_t count,
                                char ***labels, char **block) {
    const unsigned char *p = o->data->data, *end = p + o->byte_size;
    *labels = calloc(count ? count : 1, sizeof **labels);
    *block = malloc(o->byte_size + count + 1);
    if (!*labels || !*block)
        return osp_error_out_of_memory();
    char *w = *block;
    for (size_t i = 0; i < count; i++) {
        uint32_t len;
        if ((size_t)(end - p) < 4)
            return osp_error_new(OSP_ERROR_INTERNAL, "bad classes tensor");
        memcpy(&len, p, 4);
        p += 4;
        if ((size_t)(end - p) < len)
            return osp_error_new(OSP_ERROR_INTERNAL, "bad classes tensor");
        memcpy(w, p, len);
        w[len] = '\0';
        (*labels)[i] = w;
        w += len + 1;
        p += len;
    }
    return NULL;
}

static osp_error *write_classify(const infer_state *s,
                                 const osp_infer_response *r, bytebuf *b) {
    const tfs_signature *sig = s->sig;
    const osp_infer_output *scores =
        response_output(r, find_info(sig->outputs, sig->n_outputs, "scores"));
    const osp_infer_output *classes =
        response_output(r, find_info(sig->outputs, sig->n_outputs, "classes"));
    size_t n = s->n_examples;
    int64_t count = 0;
    const osp_infer_output *any = scores ? scores : classes;
    if (!any || !osp_shape_element_count(&any->shape, &count) || n == 0 ||
        count % (int64_t)n != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected classification outputs of shape "
                             "[batch_size, num_classes]");
    size_t k = (size_t)count / n;
    if (scores && (scores->dtype != OSP_TYPE_FP32 ||
                   scores->byte_size < (size_t)count * sizeof(float)))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected scores Tensor of DT_FLOAT");
    char **labels = NULL, *block = NULL;
    osp_error *err = NULL;
    if (classes && classes->dtype == OSP_TYPE_BYTES)
        err = bytes_strings(classes, (size_t)count, &labels, &block);
    if (!err)
        err = tfs_write_classify(n, k, (const char *const *)labels,
                                 scores ? scores->data->data : NULL, b);
    free(labels);
    free(block);
    return err;
}

static osp_error *write_regress(const infer_state *s,
                                const osp_infer_response *r, bytebuf *b) {
    const tfs_signature *sig = s->sig;
    const osp_infer_output *o =
        response_output(r, find_info(sig->outputs, sig->n_outputs, "outputs"));
    int64_t count = 0;
    if (!o || o->dtype != OSP_TYPE_FP32 ||
        !osp_shape_element_count(&o->shape, &count) ||
        (size_t)count != s->n_examples ||
        o->byte_size < (size_t)count * sizeof(float))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expected output Tensor shape to be either "
                             "[batch_size] or [batch_size, 1]");
    return tfs_write_regress(o->data->data, (size_t)count, b);
}

/* ---- start and finish ---- */

static void infer_done(osp_infer_response *response, void *user) {
    http_request *http = user;
    infer_state *s = *tfserving_infer_slot(http);
    s->response = response;
    http_request_resume(http);
}

osp_error *tfserving_infer_start(http_request *http, tfserving_target *t,
                                 const char *text, size_t len) {
    const tfserving_context *ctx = http_request_surface_ctx(http);
    tfs_body *body = NULL;
    osp_infer_request *req = NULL;
    const char *signature = NULL;
    /* The body is parsed before the model is looked up (§1.3). */
    osp_error *err = tfs_body_parse(text, len, &body, &signature);
    if (err)
        return err;
    infer_state *s = calloc(1, sizeof *s);
    if (!s) {
        err = osp_error_out_of_memory();
        goto out;
    }
    *tfserving_infer_slot(http) = s;
    s->action = t->action;
    bool predict = t->action == TFSERVING_PREDICT;
    /* classify and regress read the examples before they look anything up
     * (FillClassifyRegressRequestFromJson runs first); predict's inputs
     * need the signature. */
    if (!predict && (err = tfs_parse_examples(body, &s->examples)))
        goto out;
    if ((err = tfserving_servable(ctx->server, t, &s->model, &s->view)))
        goto out;
    s->sig = tfs_model_view_signature(s->view, signature);
    if (!s->sig) {
        err = predict ? osp_error_new(OSP_ERROR_INVALID_ARG,
                                      "Serving signature name: \"%s\" not "
                                      "found in signature def",
                                      signature)
                      : osp_error_new(OSP_ERROR_INVALID_ARG,
                                      "No signature was found with the name: "
                                      "%s",
                                      signature);
        goto out;
    }
    if (!predict && (err = check_signature(s->sig, t->action)))
        goto out;
    req = osp_infer_request_new(t->name, osp_model_get_version(s->model));
    if (!req) {
        err = osp_error_out_of_memory();
        goto out;
    }
    err = predict ? add_predict_inputs(http, s, body, req, signature)
                  : add_example_inputs(s, req);
    for (size_t i = 0; i < s->sig->n_outputs && !err; i++)
        if (s->sig->outputs[i].tensor)
            err = osp_infer_request_add_output(req, s->sig->outputs[i].tensor);
    if (err)
        goto out;

    osp_trace *trace = osp_tracer_sample(ctx->tracer, t->name);
    if (trace)
        http_request_set_trace(http, trace);
    req->trace = http_request_trace(http); /* lent to the core */
    req->receive_start_ns = http_request_start_ns(http);
    http_request_begin_async(http);
    err = osp_server_infer_async(ctx->server, req, infer_done, http);
    req = NULL; /* the core owns it in every case */
    if (err)
        http_request_resume(http); /* the callback will not run */
out:
    osp_infer_request_free(req);
    tfs_body_free(body);
    return err;
}

osp_error *tfserving_infer_finish(http_request *http) {
    infer_state *s = *tfserving_infer_slot(http);
    osp_infer_response *r = s->response;
    if (!r)
        return osp_error_new(OSP_ERROR_INTERNAL, "no inference response");
    if (r->error) {
        osp_error *err = r->error;
        r->error = NULL;
        return err;
    }
    bytebuf b;
    bytebuf_init(&b);
    osp_error *err = s->action == TFSERVING_PREDICT ? write_predict(s, r, &b)
                     : s->action == TFSERVING_CLASSIFY
                         ? write_classify(s, r, &b)
                         : write_regress(s, r, &b);
    if (err) {
        bytebuf_free(&b);
        return err;
    }
    tfserving_reply_json(http, &b);
    return NULL;
}

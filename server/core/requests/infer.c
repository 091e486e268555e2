/* Inference request and response construction and teardown. */
#include "osprey/infer.h"

#include <stdlib.h>
#include <string.h>

osp_infer_request *osp_infer_request_new(const char *model, int64_t version) {
    osp_infer_request *req = calloc(1, sizeof(*req));
    if (!req)
        return NULL;
    req->model_name = strdup(model ? model : "");
    req->id = strdup("");
    if (!req->model_name || !req->id) {
        osp_infer_request_free(req);
        return NULL;
    }
    req->model_version = version;
    return req;
}

static void parameters_free(osp_parameter *params, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(params[i].key);
        if (params[i].type == OSP_PARAM_STRING)
            free(params[i].value.s);
    }
    free(params);
}

void osp_infer_request_free(osp_infer_request *req) {
    if (!req)
        return;
    for (size_t i = 0; i < req->n_inputs; i++) {
        free(req->inputs[i].name);
        osp_buffer_free(req->inputs[i].data);
    }
    free(req->inputs);
    for (size_t i = 0; i < req->n_outputs; i++)
        free(req->outputs[i]);
    free(req->outputs);
    free(req->output_class_counts);
    parameters_free(req->parameters, req->n_parameters);
    free(req->model_name);
    free(req->id);
    free(req);
}

osp_error *osp_infer_request_set_id(osp_infer_request *req, const char *id) {
    char *copy = strdup(id ? id : "");
    if (!copy)
        return osp_error_out_of_memory();
    free(req->id);
    req->id = copy;
    return NULL;
}

/* Grows *array (of element size `size`) to hold n + 1 entries. */
static bool grow(void **array, size_t n, size_t size) {
    void *bigger = realloc(*array, (n + 1) * size);
    if (!bigger)
        return false;
    *array = bigger;
    return true;
}

osp_error *osp_infer_request_add_input(osp_infer_request *req, const char *name,
                                       osp_datatype dtype,
                                       const osp_shape *shape,
                                       osp_buffer *data) {
    if (req->raw_input)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "input '%s' can't be added to a raw request",
                             name);
    for (size_t i = 0; i < req->n_inputs; i++)
        if (strcmp(req->inputs[i].name, name) == 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "input '%s' already exists in request", name);
    char *copy = strdup(name);
    if (!copy ||
        !grow((void **)&req->inputs, req->n_inputs, sizeof(req->inputs[0]))) {
        free(copy);
        return osp_error_out_of_memory();
    }
    osp_infer_input *in = &req->inputs[req->n_inputs++];
    in->name = copy;
    in->dtype = dtype;
    in->shape = *shape;
    in->data = data;
    return NULL;
}

osp_error *osp_infer_request_set_raw_input(osp_infer_request *req,
                                           osp_buffer *data) {
    if (req->n_inputs > 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "raw input can't be added to request with other "
                             "inputs");
    osp_shape none = {0};
    osp_error *err = osp_infer_request_add_input(req, "raw_input",
                                                 OSP_TYPE_INVALID, &none, data);
    if (!err)
        req->raw_input = true;
    return err;
}

osp_error *osp_infer_request_add_output(osp_infer_request *req,
                                        const char *name) {
    return osp_infer_request_add_output_classified(req, name, 0);
}

osp_error *osp_infer_request_add_output_classified(osp_infer_request *req,
                                                   const char *name,
                                                   uint32_t class_count) {
    for (size_t i = 0; i < req->n_outputs; i++)
        if (strcmp(req->outputs[i], name) == 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "output '%s' already exists in request", name);
    char *copy = strdup(name);
    if (!copy ||
        !grow((void **)&req->outputs, req->n_outputs,
              sizeof(req->outputs[0])) ||
        !grow((void **)&req->output_class_counts, req->n_outputs,
              sizeof(req->output_class_counts[0]))) {
        free(copy);
        return osp_error_out_of_memory();
    }
    req->output_class_counts[req->n_outputs] = class_count;
    req->outputs[req->n_outputs++] = copy;
    return NULL;
}

osp_error *osp_infer_request_add_parameter(osp_infer_request *req,
                                           const osp_parameter *param) {
    osp_parameter copy = *param;
    copy.key = strdup(param->key);
    if (param->type == OSP_PARAM_STRING)
        copy.value.s = strdup(param->value.s ? param->value.s : "");
    if (!copy.key || (param->type == OSP_PARAM_STRING && !copy.value.s) ||
        !grow((void **)&req->parameters, req->n_parameters,
              sizeof(req->parameters[0]))) {
        free(copy.key);
        if (param->type == OSP_PARAM_STRING)
            free(copy.value.s);
        return osp_error_out_of_memory();
    }
    req->parameters[req->n_parameters++] = copy;
    return NULL;
}

void osp_infer_response_free(osp_infer_response *resp) {
    if (!resp)
        return;
    osp_error_free(resp->error);
    for (size_t i = 0; i < resp->n_outputs; i++) {
        free(resp->outputs[i].name);
        osp_buffer_free(resp->outputs[i].data);
    }
    free(resp->outputs);
    parameters_free(resp->parameters, resp->n_parameters);
    free(resp->model_name);
    free(resp->id);
    free(resp);
}

osp_buffer *osp_infer_response_take_output(osp_infer_response *resp, size_t i) {
    if (i >= resp->n_outputs)
        return NULL;
    osp_buffer *buf = resp->outputs[i].data;
    resp->outputs[i].data = NULL;
    return buf;
}

/* Request validation against the model config (Triton's Normalize). */
#include "request_validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classification.h"
#include "osprey/memory.h"

/* Triton's LogRequest() prefix. */
static const char *id_or_unknown(const osp_infer_request *req) {
    return req->id[0] ? req->id : OSP_REQUEST_ID_UNKNOWN;
}

osp_error *request_error(const osp_infer_request *req, osp_error *inner) {
    osp_error *err = osp_error_new_reason(
        osp_error_get_code(inner), osp_error_get_reason(inner),
        "[request id: %s] %s", id_or_unknown(req), osp_error_message(inner));
    osp_error_free(inner);
    return err;
}
#define REQUEST_ERROR(req, ...)                                                \
    request_error(req, osp_error_new(OSP_ERROR_INVALID_ARG, __VA_ARGS__))

/* Deduces the raw input's name, dtype and shape from the model's only
 * input; prepends the 4-byte length for BYTES. */
static osp_error *resolve_raw_input(const osp_model_config *config,
                                    osp_infer_request *req) {
    if (req->n_inputs != 1 || config->n_inputs != 1)
        return REQUEST_ERROR(req,
                             "Raw request must only have 1 input (found %zu) "
                             "to be deduced but got %zu inputs in '%s' model "
                             "configuration",
                             req->n_inputs, config->n_inputs, config->name);
    const osp_model_io *cin = &config->inputs[0];
    osp_infer_input *in = &req->inputs[0];
    osp_shape shape = {0};
    if (config->max_batch_size != 0)
        shape.dims[shape.rank++] = 1;
    int dynamic_axis = -1;
    int64_t element_count = 1;
    for (int i = 0; i < cin->dims.rank; i++) {
        int64_t d = cin->dims.dims[i];
        if (d == -1) {
            if (dynamic_axis != -1)
                return REQUEST_ERROR(req,
                                     "The shape of the raw input '%s' can not "
                                     "be deduced because there are more than "
                                     "one variable-sized dimension",
                                     cin->name);
            dynamic_axis = shape.rank;
        } else {
            element_count *= d;
        }
        if (shape.rank >= OSP_MAX_DIMS)
            return REQUEST_ERROR(req, "too many dimensions for raw input");
        shape.dims[shape.rank++] = d;
    }
    size_t bytes = in->data ? in->data->size : 0;
    if (cin->dtype == OSP_TYPE_BYTES) {
        if (dynamic_axis != -1 || element_count != 1)
            return REQUEST_ERROR(req,
                                 "For BYTE datatype raw input '%s', the model "
                                 "must have input shape [1]",
                                 cin->name);
        if (bytes > UINT32_MAX)
            return REQUEST_ERROR(req, "raw input '%s' is too large", cin->name);
        osp_buffer *prefixed = osp_buffer_new_host(bytes + 4);
        if (!prefixed)
            return osp_error_out_of_memory();
        uint32_t len = (uint32_t)bytes; /* little-endian host */
        memcpy(prefixed->data, &len, 4);
        if (bytes)
            memcpy((char *)prefixed->data + 4, in->data->data, bytes);
        osp_buffer_free(in->data);
        in->data = prefixed;
    } else if (dynamic_axis != -1) {
        size_t elem = osp_datatype_byte_size(cin->dtype);
        shape.dims[dynamic_axis] =
            element_count > 0 ? (int64_t)(bytes / (size_t)element_count / elem)
                              : 0;
    }
    char *name = strdup(cin->name);
    if (!name)
        return osp_error_out_of_memory();
    free(in->name);
    in->name = name;
    in->dtype = cin->dtype;
    in->shape = shape;
    return NULL;
}

/* Appends "'a','b'" style lists for the input-count message. */
static void append_name(char *buf, size_t cap, const char *name, bool *first) {
    size_t used = strlen(buf);
    snprintf(buf + used, cap - used, "%s'%s'", *first ? "" : ",", name);
    *first = false;
}

static osp_error *check_input_count(const osp_model_config *config,
                                    const osp_infer_request *req) {
    size_t required = 0;
    for (size_t i = 0; i < config->n_inputs; i++)
        required += !config->inputs[i].optional;
    if (req->n_inputs <= config->n_inputs && req->n_inputs >= required)
        return NULL;
    char got[1024] = "[", missing[1024] = "[";
    bool first = true;
    for (size_t i = 0; i < req->n_inputs; i++)
        append_name(got, sizeof(got) - 2, req->inputs[i].name, &first);
    strcat(got, "]");
    first = true;
    for (size_t i = 0; i < config->n_inputs; i++) {
        const osp_model_io *cin = &config->inputs[i];
        bool present = false;
        for (size_t j = 0; j < req->n_inputs; j++)
            present |= strcmp(req->inputs[j].name, cin->name) == 0;
        if (!cin->optional && !present)
            append_name(missing, sizeof(missing) - 2, cin->name, &first);
    }
    strcat(missing, "]");
    if (required == config->n_inputs)
        return REQUEST_ERROR(req,
                             "expected %zu inputs but got %zu inputs for "
                             "model '%s'. Got input(s) %s, but missing "
                             "required input(s) %s. Please provide all "
                             "required input(s).",
                             config->n_inputs, req->n_inputs, config->name, got,
                             missing);
    return REQUEST_ERROR(req,
                         "expected number of inputs between %zu and %zu but "
                         "got %zu inputs for model '%s'. Got input(s) %s, but "
                         "missing required input(s) %s. Please provide all "
                         "required input(s).",
                         required, config->n_inputs, req->n_inputs,
                         config->name, got, missing);
}

/* Checks a BYTES tensor's serialized elements: exactly `expected` of them,
 * each a complete 4-byte length + bytes, nothing left over. */
static osp_error *check_bytes_input(const osp_infer_request *req,
                                    const osp_infer_input *in,
                                    const char *model, int64_t expected) {
    const unsigned char *p = in->data ? in->data->data : NULL;
    size_t left = in->data ? in->data->size : 0;
    int64_t count = 0;
    while (left > 0) {
        if (left < 4)
            return REQUEST_ERROR(req,
                                 "incomplete string length indicator for "
                                 "inference input '%s' for model '%s', "
                                 "expecting 4 bytes but only %zu bytes "
                                 "available. Please make sure the string "
                                 "length indicator is in one buffer.",
                                 in->name, model, left);
        if (count >= expected)
            return REQUEST_ERROR(req,
                                 "unexpected number of string elements %lld "
                                 "for inference input '%s' for model '%s', "
                                 "expecting %lld",
                                 (long long)count + 1, in->name, model,
                                 (long long)expected);
        uint32_t len;
        memcpy(&len, p, 4);
        p += 4;
        left -= 4;
        if (len > left) /* Triton's backends word this one, no request id */
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "incomplete string data for inference input "
                                 "'%s', expecting string of length %u but "
                                 "only %zu bytes available",
                                 in->name, len, left);
        p += len;
        left -= len;
        count++;
    }
    if (count != expected)
        return REQUEST_ERROR(req,
                             "expected %lld string elements for inference "
                             "input '%s' for model '%s', got %lld",
                             (long long)expected, in->name, model,
                             (long long)count);
    return NULL;
}

/* Checks one input's dtype, shape (batch dim removed) and byte size. */
static osp_error *check_input(const osp_model_config *config,
                              const osp_infer_request *req,
                              const osp_infer_input *in,
                              const osp_model_io *cin, int64_t batch_size) {
    const char *model = config->name;
    if (in->dtype != cin->dtype)
        return REQUEST_ERROR(req,
                             "inference input '%s' data-type is '%s', but "
                             "model '%s' expects '%s'",
                             in->name, osp_datatype_wire_name(in->dtype), model,
                             osp_datatype_wire_name(cin->dtype));
    int skip = config->max_batch_size > 0 ? 1 : 0;
    bool match = in->shape.rank - skip == cin->dims.rank;
    for (int i = 0; match && i < cin->dims.rank; i++) {
        int64_t want = cin->dims.dims[i], got = in->shape.dims[i + skip];
        if (want != -1 && want != got)
            match = false;
    }
    if (!match) {
        osp_shape full = {0};
        if (skip)
            full.dims[full.rank++] = -1;
        for (int i = 0; i < cin->dims.rank && full.rank < OSP_MAX_DIMS; i++)
            full.dims[full.rank++] = cin->dims.dims[i];
        char want_s[256], got_s[256];
        return REQUEST_ERROR(
            req,
            "unexpected shape for input '%s' for model '%s'. Expected %s, "
            "got %s. %s",
            in->name, model, osp_shape_format(&full, want_s, sizeof(want_s)),
            osp_shape_format(&in->shape, got_s, sizeof(got_s)),
            skip ? "NOTE: Setting a non-zero max_batch_size in the model "
                   "config requires a batch dimension to be prepended to "
                   "each input shape. If you want to specify the full shape "
                   "including the batch dim in your input dims config, try "
                   "setting max_batch_size to zero. See the model "
                   "configuration docs for more info on max_batch_size."
                 : "");
    }
    (void)batch_size;
    /* Only gRPC can send a negative dimension (a wildcard is not a shape). */
    for (int i = 0; i < in->shape.rank; i++)
        if (in->shape.dims[i] < 0) {
            char s[256];
            return REQUEST_ERROR(req,
                                 "All input dimensions should be specified "
                                 "for input '%s' for model '%s', got %s",
                                 in->name, model,
                                 osp_shape_format(&in->shape, s, sizeof(s)));
        }
    int64_t elements;
    if (!osp_shape_element_count(&in->shape, &elements)) {
        char s[256];
        return REQUEST_ERROR(req,
                             "invalid shape for input '%s': shape %s causes "
                             "total element count to exceed maximum size of "
                             "9223372036854775807",
                             in->name,
                             osp_shape_format(&in->shape, s, sizeof(s)));
    }
    if (in->dtype == OSP_TYPE_BYTES)
        return check_bytes_input(req, in, model, elements);
    size_t got = in->data ? in->data->size : 0;
    unsigned __int128 want =
        (unsigned __int128)elements * osp_datatype_byte_size(in->dtype);
    if (want != got)
        return REQUEST_ERROR(req,
                             "input byte size mismatch for input '%s' for "
                             "model '%s'. Expected %llu, got %zu",
                             in->name, model, (unsigned long long)want, got);
    return NULL;
}

osp_error *request_validate(const osp_model_config *config,
                            pending_request *p) {
    osp_infer_request *req = p->req;
    osp_error *err = NULL;
    if (req->raw_input && (err = resolve_raw_input(config, req)))
        return err;

    p->input_map = malloc(sizeof(int) * (config->n_inputs + 1));
    p->output_requested = calloc(config->n_outputs + 1, sizeof(bool));
    p->response_outputs =
        malloc(sizeof(size_t) * (config->n_outputs + req->n_outputs + 1));
    if (!p->input_map || !p->output_requested || !p->response_outputs)
        return osp_error_out_of_memory();

    /* Requested outputs must exist; none listed means all, config order. */
    p->n_response_outputs = 0;
    for (size_t i = 0; i < req->n_outputs; i++) {
        int idx = osp_model_config_output_index(config, req->outputs[i]);
        if (idx < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unexpected inference output '%s' for model "
                                 "'%s'",
                                 req->outputs[i], config->name);
        if (req->output_class_counts[i] > 0 &&
            (err = classification_check_dtype(config->outputs[idx].dtype)))
            return err;
        p->output_requested[idx] = true;
        p->response_outputs[p->n_response_outputs++] = (size_t)idx;
    }
    if (req->n_outputs == 0)
        for (size_t i = 0; i < config->n_outputs; i++) {
            p->output_requested[i] = true;
            p->response_outputs[p->n_response_outputs++] = i;
        }

    if ((err = check_input_count(config, req)))
        return err;

    /* Map inputs to config order and find the batch size. */
    for (size_t i = 0; i < config->n_inputs; i++)
        p->input_map[i] = -1;
    p->batch_size = 0;
    for (size_t j = 0; j < req->n_inputs; j++) {
        const osp_infer_input *in = &req->inputs[j];
        int idx = osp_model_config_input_index(config, in->name);
        if (idx < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unexpected inference input '%s' for model "
                                 "'%s'",
                                 in->name, config->name);
        p->input_map[idx] = (int)j;
        if (config->max_batch_size == 0)
            continue;
        if (in->shape.rank == 0)
            return REQUEST_ERROR(req,
                                 "input '%s' has no shape but model requires "
                                 "batch dimension for '%s'",
                                 in->name, config->name);
        if (p->batch_size == 0)
            p->batch_size = in->shape.dims[0];
        else if (in->shape.dims[0] != p->batch_size)
            return REQUEST_ERROR(req,
                                 "input '%s' batch size does not match other "
                                 "inputs for '%s'",
                                 in->name, config->name);
    }
    if (p->batch_size > config->max_batch_size)
        return REQUEST_ERROR(req,
                             "inference request batch-size must be <= %d for "
                             "'%s'",
                             config->max_batch_size, config->name);

    for (size_t i = 0; i < config->n_inputs; i++) {
        if (p->input_map[i] < 0)
            continue;
        err = check_input(config, req, &req->inputs[p->input_map[i]],
                          &config->inputs[i], p->batch_size);
        if (err)
            return err;
    }
    return NULL;
}

/*
 * Inference requests and responses as frontends build and read them.
 * Tensor bytes are host memory in osp_buffer (pinned where a GPU is
 * present); BYTES tensors hold each element as a 4-byte little-endian length
 * followed by its bytes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/memory.h"
#include "osprey/tensor.h"
#include "osprey/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_parameter_type {
    OSP_PARAM_STRING = 0,
    OSP_PARAM_INT,
    OSP_PARAM_BOOL,
    OSP_PARAM_DOUBLE,
} osp_parameter_type;

typedef struct osp_parameter {
    char *key;
    osp_parameter_type type;
    union {
        char *s;
        int64_t i;
        bool b;
        double d;
    } value;
} osp_parameter;

typedef struct osp_infer_input {
    char *name;
    osp_datatype dtype;
    osp_shape shape;
    osp_buffer *data; /* owned by the request */
} osp_infer_input;

typedef struct osp_infer_request {
    char *model_name;
    int64_t model_version; /* -1 = latest ready version */
    char *id;              /* "" when none; never NULL */
    osp_infer_input *inputs;
    size_t n_inputs;
    /* Raw binary request (Triton's Inference-Header-Content-Length: 0): a
     * single input with no name, dtype or shape, deduced by the core from
     * the model's only input. */
    bool raw_input;
    char **outputs; /* requested output names; none = all */
    size_t n_outputs;
    /* Per outputs[i]: how many top classes to return instead of the values
     * (Triton's classification extension); 0 = the values. */
    uint32_t *output_class_counts;
    uint64_t priority;         /* 0 = the model's default level */
    uint64_t timeout_us;       /* 0 = the model's default */
    osp_parameter *parameters; /* custom request parameters */
    size_t n_parameters;
    /* Monotonic ns when the frontend started receiving it (for trace and
     * statistics); 0 = unknown. */
    uint64_t receive_start_ns;
    /* The request's trace when it was sampled, else NULL. Borrowed: the
     * frontend owns it (osp_tracer_sample .. osp_trace_end); the core
     * reports into it until it calls the completion callback or returns
     * an error from osp_server_infer_async, and never frees it. */
    osp_trace *trace;
} osp_infer_request;

/* New empty request for `model` (copied). NULL on OOM. */
osp_infer_request *osp_infer_request_new(const char *model, int64_t version);
void osp_infer_request_free(osp_infer_request *req);
osp_error *osp_infer_request_set_id(osp_infer_request *req, const char *id);

/* Appends an input. `data` ownership moves to the request on success; on
 * error the caller keeps it. */
osp_error *osp_infer_request_add_input(osp_infer_request *req, const char *name,
                                       osp_datatype dtype,
                                       const osp_shape *shape,
                                       osp_buffer *data);
/* Makes this a raw request with `data` as its only input (ownership moves
 * on success). */
osp_error *osp_infer_request_set_raw_input(osp_infer_request *req,
                                           osp_buffer *data);
/* Appends a requested output; a repeated name gives INVALID_ARG
 * "output '<name>' already exists in request". */
osp_error *osp_infer_request_add_output(osp_infer_request *req,
                                        const char *name);
/* Same, returning the output's top `class_count` classes instead of its
 * values (0: the values). */
osp_error *osp_infer_request_add_output_classified(osp_infer_request *req,
                                                   const char *name,
                                                   uint32_t class_count);
/* Appends a custom parameter (key and string copied). */
osp_error *osp_infer_request_add_parameter(osp_infer_request *req,
                                           const osp_parameter *param);

typedef struct osp_infer_output {
    char *name;
    osp_datatype dtype;
    osp_shape shape;
    osp_buffer *data; /* host memory, owned by the response; NULL if taken */
    size_t byte_size; /* valid bytes at data->data */
} osp_infer_output;

typedef struct osp_infer_response {
    osp_error *error; /* non-NULL: the request failed, no outputs */
    char *model_name;
    int64_t model_version;
    char *id; /* the request's id ("" when none) */
    /* In the order the request listed them, or config order when it listed
     * none. */
    osp_infer_output *outputs;
    size_t n_outputs;
    osp_parameter *parameters;
    size_t n_parameters;
} osp_infer_response;

void osp_infer_response_free(osp_infer_response *resp);
/* Moves output i's buffer to the caller (e.g. to send it without a copy);
 * the response keeps the metadata. */
osp_buffer *osp_infer_response_take_output(osp_infer_response *resp, size_t i);

/* Error message prefix the core puts on request errors, like Triton:
 * "[request id: <id>] " or "[request id: <id_unknown>] ". */
#define OSP_REQUEST_ID_UNKNOWN "<id_unknown>"

#ifdef __cplusplus
}
#endif

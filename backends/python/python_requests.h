/*
 * The requests of an EXEC (python_protocol.h): what the stub needs to
 * build one pb_utils.InferenceRequest per request of a batch. The batch's
 * inputs lie once in the shared-memory region; each request's descriptors
 * point at its own rows there, so the stub views them without a copy.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/backend.h"
#include "python_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One input of a batch as placed in the region, or left in GPU memory. */
typedef struct pyreq_input {
    const char *name; /* borrowed */
    osp_datatype dtype;
    osp_shape shape; /* the batch's: dim 0 is every request's rows */
    size_t offset;   /* in the region, or in gpu's allocation */
    size_t byte_size;
    /* The placed bytes (borrowed), read for a BYTES input's row
     * boundaries (4-byte length, then the element, per element); NULL
     * for an input on the GPU (never BYTES). */
    const uint8_t *bytes;
    bool on_gpu; /* handed to the stub as a GPU tensor at gpu */
    pyproto_gpu_ref gpu;
} pyreq_input;

/* Appends the EXEC's requests (binary, python_protocol.h) to `exec`: u32
 * count, then per request (in batch order) its id, correlation id (a
 * number or a string), parameters (the text of a JSON object, Triton's
 * InferenceRequest.parameters()), the config outputs it asked for and a
 * tensor descriptor of its rows of each input.
 * `output_names` are the config's outputs, indexed as the requests'
 * output_requested. Errors (INTERNAL): the requests' rows do not fit an
 * input, or a BYTES input's elements overrun it. `exec` may hold part of
 * the array then. */
osp_error *pyreq_append_requests(pyproto_text *exec, const pyreq_input *inputs,
                                 size_t n_inputs,
                                 const osp_batch_request *requests,
                                 size_t n_requests, char *const *output_names,
                                 size_t n_outputs);

/* Appends `params` as the text of a JSON object (Triton's
 * InferenceRequest.parameters()) to `t`. */
void pyreq_append_parameters(pyproto_text *t, const osp_parameter *params,
                             size_t n);

#ifdef __cplusplus
}
#endif

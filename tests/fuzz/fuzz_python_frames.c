/*
 * libFuzzer target for what a python stub sends the server
 * (backends/python/python_protocol.c): a stub runs user code, so its
 * frames are untrusted. Byte 0 mod 5 picks the decoder for the rest: a
 * RESULT (execute's responses), a BLS request, a decoupled model's
 * RESPONSE frame, a BLS_CALL (tensors inline) or a BLS_CANCEL. A payload
 * that decodes must hold what the decoders promise: ranks within
 * OSP_MAX_DIMS, every tensor inside the region (RESULT, BLS) or the frame
 * (RESPONSE, BLS_CALL) it names, or, for a tensor in GPU memory, a device,
 * a range that does not wrap and no BYTES (its CUDA allocation bounds it
 * when the server opens it), and every parameter a key (and a string
 * value when a string).
 * Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "python_protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless out lies inside [0, limit), or is a GPU tensor as the
 * decoders promise one. */
static void check_output(const pyproto_output *out, uint64_t limit) {
    if (!out->name || out->shape.rank < 0 || out->shape.rank > OSP_MAX_DIMS)
        abort();
    if (out->on_gpu) {
        if (out->gpu.device_id < 0 || out->dtype == OSP_TYPE_BYTES ||
            out->offset > UINT64_MAX - out->byte_size)
            abort();
    } else if (out->offset > limit || out->byte_size > limit - out->offset) {
        abort();
    }
}

/* Aborts unless each parameter has its key and a string its value. */
static void check_parameters(const pyproto_bls_request *req) {
    if (req->n_parameters && !req->parameters)
        abort();
    for (size_t i = 0; i < req->n_parameters; i++) {
        const osp_parameter *p = &req->parameters[i];
        if (!p->key || (p->type == OSP_PARAM_STRING && !p->value.s))
            abort();
    }
}

static void check_response(const pyproto_response *r, uint64_t limit) {
    if (r->is_error && !r->error_message)
        abort();
    for (size_t i = 0; i < r->n_outputs; i++)
        check_output(&r->outputs[i], limit);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    const uint8_t *payload = data + 1;
    size_t len = size - 1;
    osp_error *err = NULL;
    switch (data[0] % 5) {
    case 0: {
        pyproto_result result;
        if (!(err = pyproto_result_decode(payload, len, &result))) {
            for (size_t i = 0; i < result.n_responses; i++)
                check_response(&result.responses[i], result.region_size);
            pyproto_result_destroy(&result);
        }
        break;
    }
    case 1: {
        pyproto_bls_request bls;
        if (!(err = pyproto_bls_decode(payload, len, &bls))) {
            if (!bls.model)
                abort();
            for (size_t i = 0; i < bls.n_inputs; i++)
                check_output(&bls.inputs[i], bls.region_size);
            for (size_t i = 0; i < bls.n_outputs; i++)
                if (!bls.outputs[i])
                    abort();
            check_parameters(&bls);
            pyproto_bls_destroy(&bls);
        }
        break;
    }
    case 3: {
        pyproto_bls_request call;
        uint64_t id = 0;
        if (!(err = pyproto_bls_call_decode(payload, len, &call, &id))) {
            if (!call.model || id != call.call_id)
                abort();
            if (call.data_len && (call.data < payload || call.data_len > len ||
                                  call.data + call.data_len > payload + len))
                abort();
            for (size_t i = 0; i < call.n_inputs; i++)
                check_output(&call.inputs[i], call.data_len);
            for (size_t i = 0; i < call.n_outputs; i++)
                if (!call.outputs[i])
                    abort();
            check_parameters(&call);
            pyproto_bls_destroy(&call);
        }
        break;
    }
    case 4: {
        uint64_t id = 0;
        if (!(err = pyproto_bls_cancel_decode(payload, len, &id)) && len != 8)
            abort();
        break;
    }
    default: {
        pyproto_stream_response r;
        if (!(err = pyproto_stream_response_decode(payload, len, &r))) {
            if (r.has_response)
                check_response(&r.response, r.data_len);
            if (r.data_len && (r.data < payload || r.data_len > len ||
                               r.data + r.data_len > payload + len))
                abort();
            pyproto_stream_response_destroy(&r);
        }
        break;
    }
    }
    osp_error_free(err);
    return 0;
}

/* The server's half of BLS for python models (python_bls.h). */
#include "python_bls.h"

#include <stdlib.h>
#include <string.h>

#include "osprey/infer.h"
#include "python_gpu.h"
#include "python_protocol.h"

/* Appends one response as RESULT encodes it (error or outputs written into
 * the region from *cursor on). NULL stands for an empty response. */
static osp_error *encode_outputs(pystub *stub, const osp_infer_response *resp,
                                 uint64_t *cursor, pyproto_text *t);

void pybls_append_error(pyproto_text *t, const osp_error *err) {
    const char *message = osp_error_message(err);
    uint32_t fields[3] = {1, pyproto_triton_code(osp_error_get_code(err)),
                          (uint32_t)strlen(message)};
    pyproto_text_append(t, fields, sizeof fields);
    pyproto_text_append(t, message, fields[2]);
}

osp_error *pybls_build_request(const pyproto_bls_request *bls,
                               const uint8_t *base, osp_infer_request **out) {
    osp_infer_request *req = osp_infer_request_new(bls->model, bls->version);
    if (!req)
        return osp_error_out_of_memory();
    osp_error *err = osp_infer_request_set_id(req, bls->id);
    for (size_t i = 0; i < bls->n_inputs && !err; i++) {
        const pyproto_output *in = &bls->inputs[i];
        osp_buffer *buf =
            osp_buffer_new_host(in->byte_size ? in->byte_size : 1);
        if (!buf) {
            err = osp_error_out_of_memory();
            break;
        }
        if ((err = pygpu_read_tensor(in, base, buf->data))) {
            osp_buffer_free(buf);
            break;
        }
        if ((err = osp_infer_request_add_input(req, in->name, in->dtype,
                                               &in->shape, buf)))
            osp_buffer_free(buf);
    }
    for (size_t i = 0; i < bls->n_outputs && !err; i++)
        err = osp_infer_request_add_output(req, bls->outputs[i]);
    for (size_t i = 0; i < bls->n_parameters && !err; i++)
        err = osp_infer_request_add_parameter(req, &bls->parameters[i]);
    req->timeout_us = bls->timeout_us; /* the core's queue applies it */
    if (err)
        osp_infer_request_free(req);
    else
        *out = req;
    return err;
}

/* Appends a response with outputs: each written into the region from
 * `cursor` on (growing it). */
static osp_error *encode_outputs(pystub *stub, const osp_infer_response *resp,
                                 uint64_t *cursor_io, pyproto_text *t) {
    uint64_t cursor = *cursor_io;
    size_t n = resp ? resp->n_outputs : 0;
    uint32_t head[2] = {0, (uint32_t)n};
    pyproto_text_append(t, head, sizeof head);
    for (size_t k = 0; k < n; k++) {
        const osp_infer_output *o = &resp->outputs[k];
        cursor = pyshm_align(cursor);
        osp_error *err =
            pyshm_region_reserve(&stub->region, cursor + o->byte_size);
        if (err)
            return err;
        if (o->byte_size)
            memcpy(stub->region.base + cursor, o->data->data, o->byte_size);
        if ((err = pyproto_append_tensor(t, o->name, o->dtype, &o->shape,
                                         cursor, o->byte_size)))
            return err;
        cursor += o->byte_size;
    }
    *cursor_io = cursor;
    return NULL;
}

bool pybls_send_gathered(pystub *stub, const pybls_gathered *g) {
    pyproto_text answer = {0};
    osp_error *err = NULL;
    const osp_error *failed = g->error;
    if (!failed && g->response && g->response->error)
        failed = g->response->error;
    uint64_t header[1] = {0};
    uint32_t count = 1;
    pyproto_text_append(&answer, header, sizeof header);
    pyproto_text_append(&answer, &count, sizeof count);
    uint64_t cursor = g->out_offset;
    if (!failed)
        err = encode_outputs(stub, g->response, &cursor, &answer);
    if (err)
        failed = err;
    if (failed) {
        answer.len = sizeof header + sizeof count; /* drop partial outputs */
        count = 1;
        pybls_append_error(&answer, failed);
    }
    osp_error_free(err);
    bool sent = false;
    if (!answer.failed) {
        uint64_t size = stub->region.size; /* after any growth */
        memcpy(answer.data, &size, sizeof size);
        memcpy(answer.data + sizeof size, &count, sizeof count);
        sent = pystub_send(stub, PYPROTO_BLS_RESULT, answer.data, answer.len);
    }
    pyproto_text_free(&answer);
    return sent;
}

void pybls_gathered_free(pybls_gathered *g) {
    if (!g)
        return;
    osp_infer_response_free(g->response);
    osp_error_free(g->error);
    free(g);
}

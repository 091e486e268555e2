/* The server's half of BLS for python models (python_bls.h). */
#include "python_bls.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/infer.h"
#include "python_protocol.h"

/* One BLS request in flight: the stub's instance thread waits here for
 * the core's completion callback. */
typedef struct bls_wait {
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done;
    osp_infer_response *response; /* owned once done */
    /* exec(decoupled=True): every response, the last one possibly an
     * empty one standing for the final flag alone (NULL). Owned. */
    osp_infer_response **responses;
    size_t n_responses;
    bool lost; /* a response could not be kept (OOM) */
} bls_wait;

static void bls_complete(osp_infer_response *response, void *user) {
    bls_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->response = response;
    w->done = true;
    pthread_cond_signal(&w->done_cond);
    pthread_mutex_unlock(&w->lock);
}

/* Most responses one exec(decoupled=True) collects. */
#define BLS_MAX_RESPONSES 65536

static void bls_respond(osp_infer_response *response, bool final, void *user) {
    bls_wait *w = user;
    pthread_mutex_lock(&w->lock);
    osp_infer_response **grown = NULL;
    if (w->n_responses < BLS_MAX_RESPONSES)
        grown =
            realloc(w->responses, (w->n_responses + 1) * sizeof *w->responses);
    if (grown) {
        w->responses = grown;
        w->responses[w->n_responses++] = response;
    } else {
        osp_infer_response_free(response);
        w->lost = true;
    }
    if (final) {
        w->done = true;
        pthread_cond_signal(&w->done_cond);
    }
    pthread_mutex_unlock(&w->lock);
}

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

/* The BLS_RESULT body of a decoupled call: every response collected. */
static osp_error *encode_all(pystub *stub, bls_wait *w, uint64_t cursor,
                             pyproto_text *t, uint32_t *count) {
    if (w->lost)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "too many responses for one BLS request (at "
                             "most %d)",
                             BLS_MAX_RESPONSES);
    for (size_t i = 0; i < w->n_responses; i++) {
        osp_infer_response *r = w->responses[i];
        osp_error *err = NULL;
        if (r && r->error)
            pybls_append_error(t, r->error);
        else if ((err = encode_outputs(stub, r, &cursor, t)))
            return err;
    }
    *count = (uint32_t)w->n_responses;
    return NULL;
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
        memcpy(buf->data, base + in->offset, in->byte_size);
        if ((err = osp_infer_request_add_input(req, in->name, in->dtype,
                                               &in->shape, buf)))
            osp_buffer_free(buf);
    }
    for (size_t i = 0; i < bls->n_outputs && !err; i++)
        err = osp_infer_request_add_output(req, bls->outputs[i]);
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

bool pybls_serve(pystub *stub, osp_server *server, const uint8_t *payload,
                 size_t len) {
    pyproto_bls_request bls = {0};
    osp_infer_request *req = NULL;
    bls_wait w = {.done = false, .response = NULL};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.done_cond, NULL);
    pyproto_text answer = {0};
    osp_error *err = pyproto_bls_decode(payload, len, &bls);
    if (!err)
        err = pyshm_region_follow(&stub->region, bls.region_size);
    if (!err && !server)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "BLS requests need a server (none attached)");
    if (!err)
        err = pybls_build_request(&bls, stub->region.base, &req);
    if (!err) {
        /* Ownership of req moves to the server either way. */
        err = bls.decoupled
                  ? osp_server_infer_stream_async(server, req, NULL,
                                                  bls_respond, &w)
                  : osp_server_infer_async(server, req, bls_complete, &w);
        if (!err) {
            pthread_mutex_lock(&w.lock);
            while (!w.done)
                pthread_cond_wait(&w.done_cond, &w.lock);
            pthread_mutex_unlock(&w.lock);
            if (!bls.decoupled && w.response->error) {
                err = w.response->error;
                w.response->error = NULL;
            }
        }
    }
    uint64_t header[1] = {0};
    uint32_t count = 1;
    pyproto_text_append(&answer, header, sizeof header);
    pyproto_text_append(&answer, &count, sizeof count);
    uint64_t cursor = bls.out_offset;
    if (!err && bls.decoupled)
        err = encode_all(stub, &w, cursor, &answer, &count);
    else if (!err)
        err = encode_outputs(stub, w.response, &cursor, &answer);
    if (err) {
        answer.len = sizeof header + sizeof count; /* drop partial outputs */
        count = 1;
        pybls_append_error(&answer, err);
        osp_error_free(err);
    }
    bool sent = false;
    if (!answer.failed) {
        uint64_t size = stub->region.size; /* after any growth */
        memcpy(answer.data, &size, sizeof size);
        memcpy(answer.data + sizeof size, &count, sizeof count);
        sent = pystub_send(stub, PYPROTO_BLS_RESULT, answer.data, answer.len);
    }
    osp_infer_response_free(w.response);
    for (size_t i = 0; i < w.n_responses; i++)
        osp_infer_response_free(w.responses[i]);
    free(w.responses);
    pyproto_text_free(&answer);
    pyproto_bls_destroy(&bls);
    pthread_cond_destroy(&w.done_cond);
    pthread_mutex_destroy(&w.lock);
    return sent;
}

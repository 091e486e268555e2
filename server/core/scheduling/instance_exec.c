/*
 * Running one batch on a model instance: gather the requests' inputs into
 * device tensors along the batch dimension, call the backend, copy outputs
 * back into host buffers and scatter them into one response per request.
 * A sequence model's implicit states stay on the instance's device: their
 * rows are gathered from and scattered to the sequences' device buffers
 * (sequence_state.h) with device-to-device copies.
 *
 * All device work for a batch is enqueued on the instance's stream and the
 * worker waits once per batch (not per request) before completing the
 * responses.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "execute_ctx.h"
#include "model_internal.h"
#include "osprey/log.h"
#include "request_answer.h"
#include "response_sender.h"
#include "trace_report.h"

static void fail_batch(pending_request **batch, size_t n,
                       const osp_error *err) {
    for (size_t i = 0; i < n; i++) {
        batch[i]->failure_reason = OSP_FAILURE_BACKEND;
        pending_request_fail(batch[i],
                             osp_error_new(osp_error_get_code(err), "%s",
                                           osp_error_message(err)));
    }
}

/* Per-batch scratch: device input tensors and the execute context. Its
 * arrays, the staged outputs and the responses share one allocation
 * (`block`, batch_state_alloc): a batch of one small request made seven
 * callocs here before. */
typedef struct batch_state {
    void *block;
    osp_backend_tensor *inputs;
    osp_buffer **input_buffers; /* device buffers we allocated, or NULL */
    osp_buffer **input_host;    /* host copies of small gathered inputs */
    bool *output_requested;
    osp_backend_tensor *outputs;
    osp_buffer **output_buffers;
    osp_buffer **staged; /* outputs reachable from the host (stage_output) */
    osp_buffer ***input_slots;   /* givable request input buffers (ctx) */
    osp_infer_response **resps;  /* one per request of the batch */
    osp_batch_request *requests; /* per request, what execute sees of it */
    osp_parameter *params;       /* their parameters (shallow copies) */
    request_answer *answers;     /* per request (osp_execute_respond) */
    osp_execute_ctx ctx;
} batch_state;

/* Allocates bs's arrays, zeroed, for n_in inputs, n_out outputs, n
 * requests and n_params parameters. False when out of memory. */
static bool batch_state_alloc(batch_state *bs, size_t n_in, size_t n_out,
                              size_t n, size_t n_params) {
    /* Widest alignment first; every size is a multiple of its own. */
    size_t tensors_in = (n_in + 1) * sizeof(osp_backend_tensor);
    size_t tensors_out = (n_out + 1) * sizeof(osp_backend_tensor);
    size_t ptrs_in = (n_in + 1) * sizeof(osp_buffer *);
    size_t ptrs_out = (n_out + 1) * sizeof(osp_buffer *);
    size_t ptrs_resp = (n + 1) * sizeof(osp_infer_response *);
    size_t slots_in = (n_in + 1) * sizeof(osp_buffer **);
    size_t views = (n + 1) * sizeof(osp_batch_request);
    size_t params = (n_params + 1) * sizeof(osp_parameter);
    size_t answers = (n + 1) * sizeof(request_answer);
    size_t flags = (n_out + 1) * sizeof(bool);
    char *p =
        calloc(1, tensors_in + tensors_out + 2 * ptrs_in + 2 * ptrs_out +
                      ptrs_resp + slots_in + views + params + answers + flags);
    if (!p)
        return false;
    bs->block = p;
    bs->inputs = (osp_backend_tensor *)p;
    p += tensors_in;
    bs->outputs = (osp_backend_tensor *)p;
    p += tensors_out;
    bs->input_buffers = (osp_buffer **)p;
    p += ptrs_in;
    bs->input_host = (osp_buffer **)p;
    p += ptrs_in;
    bs->output_buffers = (osp_buffer **)p;
    p += ptrs_out;
    bs->staged = (osp_buffer **)p;
    p += ptrs_out;
    bs->resps = (osp_infer_response **)p;
    p += ptrs_resp;
    bs->input_slots = (osp_buffer ***)p;
    p += slots_in;
    bs->requests = (osp_batch_request *)p;
    p += views;
    bs->params = (osp_parameter *)p;
    p += params;
    bs->answers = (request_answer *)p;
    p += answers;
    bs->output_requested = (bool *)p;
    return true;
}

static void batch_state_free(batch_state *bs, size_t n_inputs) {
    if (bs->input_buffers)
        for (size_t i = 0; i < n_inputs; i++) {
            osp_buffer_free(bs->input_buffers[i]);
            osp_buffer_free(bs->input_host[i]);
        }
    if (bs->output_buffers)
        execute_ctx_release_outputs(&bs->ctx);
    execute_ctx_release_answers(&bs->ctx);
    free(bs->block);
}

/* Fills bs->requests, what osp_execute_request shows of each request:
 * its id, correlation id, custom parameters (shallow copies in bs->params)
 * and its rows of the batch's inputs. */
static void describe_requests(const osp_model *model, batch_state *bs,
                              pending_request **batch, size_t n) {
    int64_t row = 0;
    size_t used = 0;
    for (size_t r = 0; r < n; r++) {
        const osp_infer_request *req = batch[r]->req;
        osp_batch_request *view = &bs->requests[r];
        view->id = req->id ? req->id : "";
        view->cancel = batch[r]->cancel;
        view->parameters = &bs->params[used];
        for (size_t i = 0; i < req->n_parameters; i++) {
            const osp_parameter *prm = &req->parameters[i];
            if (!strcmp(prm->key, "sequence_id")) {
                if (prm->type == OSP_PARAM_STRING)
                    view->correlation_id_string = prm->value.s;
                else
                    view->correlation_id = (uint64_t)prm->value.i;
            } else if (strcmp(prm->key, "sequence_start") != 0 &&
                       strcmp(prm->key, "sequence_end") != 0) {
                bs->params[used++] = *prm;
                view->n_parameters++;
            }
        }
        view->first_row = row;
        view->rows =
            model->config->max_batch_size > 0 ? batch[r]->batch_size : 0;
        row += view->rows;
        view->output_requested = batch[r]->output_requested;
    }
}

/* Name and datatype of batch input i: config input i, or past them the
 * sequence batcher's control and state inputs. */
static void batch_input_desc(const osp_model *model, size_t i,
                             const char **name, osp_datatype *dtype) {
    const osp_model_config *cfg = model->config;
    if (i < cfg->n_inputs) {
        *name = cfg->inputs[i].name;
        *dtype = cfg->inputs[i].dtype;
    } else {
        sequence_batcher_extra_input(model->sequences, i - cfg->n_inputs, name,
                                     dtype);
    }
}

/* Batch outputs: the config's, then one per implicit state. */
static size_t batch_output_count(const osp_model *model) {
    return model->config->n_outputs +
           (model->sequences ? sequence_batcher_extra_outputs(model->sequences)
                             : 0);
}

/* The config output that state k's output_name also names, or -1. Triton
 * lets a state's next value be an ordinary output as well (its backends
 * give the tensor to the response and to the state): the backend then
 * fills that config output, and the state takes a copy of each request's
 * rows from it. */
static int state_twin_output(const osp_model *model, size_t k) {
    return osp_model_config_output_index(
        model->config,
        sequence_batcher_state(model->sequences, k)->output_name);
}

/* The state whose output_name config output o also is, or -1. */
static int output_twin_state(const osp_model *model, size_t o) {
    if (!model->sequences)
        return -1;
    size_t n_states = sequence_batcher_extra_outputs(model->sequences);
    for (size_t k = 0; k < n_states; k++)
        if (state_twin_output(model, k) == (int)o)
            return (int)k;
    return -1;
}

/* A state's next value for `rows` rows (state k's output) must have the
 * state's dims after the batch dim, and their bytes: the sequence batcher
 * hands exactly one state's bytes to the sequence's next request. */
static osp_error *check_state_output(const osp_model *model, size_t k,
                                     const osp_shape *shape, size_t byte_size,
                                     int64_t rows) {
    const osp_model_config *cfg = model->config;
    const osp_sequence_state *st = sequence_batcher_state(model->sequences, k);
    osp_shape want = {.rank = 0};
    if (cfg->max_batch_size > 0)
        want.dims[want.rank++] = rows;
    size_t bytes = osp_datatype_byte_size(st->dtype) *
                   (size_t)(cfg->max_batch_size > 0 ? rows : 1);
    for (int d = 0; d < st->dims.rank && want.rank < OSP_MAX_DIMS; d++) {
        want.dims[want.rank++] = st->dims.dims[d];
        bytes *= (size_t)st->dims.dims[d];
    }
    if (osp_shape_equal(shape, &want) && byte_size == bytes)
        return NULL;
    char got[256], expected[256];
    osp_shape_format(shape, got, sizeof got);
    osp_shape_format(&want, expected, sizeof expected);
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "model '%s': state output '%s' has shape %s (%zu "
                         "bytes), the state needs shape %s (%zu bytes)",
                         cfg->name, st->output_name, got, byte_size, expected,
                         bytes);
}

/* Copies the next states of a backend's answer `sent` to request p
 * (tensors named by a state's output_name) into p's sequence step, on the
 * instance's device (a backend that answers one by one may give host
 * buffers: the python backend's come from its stub); an error (the answer
 * then becomes that error) when one has the wrong shape, the sequence
 * keeping its previous state. A state output that is no config output
 * leaves the answer. */
static osp_error *take_answer_states(model_instance *inst, pending_request *p,
                                     osp_sent_response *sent) {
    const osp_model *model = inst->model;
    if (!model->sequences || sent->error)
        return NULL;
    size_t n_states = sequence_batcher_extra_outputs(model->sequences);
    for (size_t k = 0; k < n_states; k++) {
        const osp_sequence_state *st =
            sequence_batcher_state(model->sequences, k);
        for (size_t i = 0; i < sent->n_outputs; i++) {
            osp_infer_output *o = &sent->outputs[i];
            if (!o->data || strcmp(o->name, st->output_name) != 0)
                continue;
            osp_error *err = check_state_output(model, k, &o->shape,
                                                o->byte_size, p->batch_size);
            osp_buffer *next = NULL;
            if (!err)
                err = sequence_batcher_next_state_row(
                    model->sequences, p, (size_t)inst->index, k, &next);
            if (!err && next && o->byte_size)
                err = osp_device_memcpy(inst->device, next->data, o->data->data,
                                        o->byte_size,
                                        o->data->kind == OSP_MEMORY_DEVICE
                                            ? OSP_COPY_DEVICE_TO_DEVICE
                                            : OSP_COPY_HOST_TO_DEVICE);
            if (err)
                return err;
            int twin = state_twin_output(model, k);
            if (twin < 0 || !p->output_requested[twin]) {
                osp_buffer_free(o->data); /* not the client's */
                o->data = NULL;
            }
            break;
        }
    }
    return NULL;
}

/* Builds each request's response from the backend's answer to it
 * (osp_execute_respond); a request left unanswered fails. Marks the
 * requests whose answer is an error as backend failures. */
static osp_error *take_answers(model_instance *inst, batch_state *bs,
                               pending_request **batch, size_t n,
                               osp_infer_response **resps) {
    const osp_model *model = inst->model;
    for (size_t r = 0; r < n; r++) {
        request_answer *a = &bs->answers[r];
        if (a->given) {
            osp_error *state_err = take_answer_states(inst, batch[r], &a->sent);
            if (state_err) {
                sent_response_free_buffers(&a->sent);
                a->sent.error = state_err;
            }
            resps[r] = pending_request_response_from(batch[r], &a->sent);
        } else if ((resps[r] = pending_request_response_new(batch[r]))) {
            resps[r]->error =
                osp_error_new(OSP_ERROR_INTERNAL,
                              "backend '%s' did not answer request %zu of a "
                              "batch of %zu",
                              model->backend->name, r, n);
        }
        if (!resps[r])
            return osp_error_out_of_memory();
        if (resps[r]->error)
            batch[r]->failure_reason = OSP_FAILURE_BACKEND;
    }
    return NULL;
}

/* The state whose input_name batch input i is, or -1. */
static int input_state(const osp_model *model, size_t i) {
    if (!model->sequences)
        return -1;
    size_t first =
        model->config->n_inputs + model->config->sequence_batching.n_controls;
    size_t n_states = sequence_batcher_extra_outputs(model->sequences);
    return i >= first && i < first + n_states ? (int)(i - first) : -1;
}

/* Builds state k's batch input (batch input i) on the instance's device,
 * one row per request, from where each row's state lives
 * (sequence_batcher_state_row: its sequence's state, the initial value,
 * zeros for a filler), with device-to-device copies: the state never
 * passes through the host. On the CPU device a single row is passed
 * without a copy (not given to outputs: the sequence keeps it). */
static osp_error *gather_state_input(model_instance *inst, batch_state *bs,
                                     pending_request **batch, size_t n,
                                     size_t i, size_t k) {
    const osp_model *model = inst->model;
    const osp_sequence_state *st = sequence_batcher_state(model->sequences, k);
    size_t row = sequence_batcher_state_bytes(model->sequences, k);
    osp_backend_tensor *t = &bs->inputs[i];
    t->shape.rank = 0;
    if (model->config->max_batch_size > 0)
        t->shape.dims[t->shape.rank++] = (int64_t)n;
    for (int d = 0; d < st->dims.rank; d++)
        t->shape.dims[t->shape.rank++] = st->dims.dims[d];
    t->byte_size = row * n;
    osp_device_info info;
    osp_device_get_info(inst->device, &info);
    const osp_buffer *src = NULL;
    osp_error *err = NULL;
    if (n == 1 && info.type == OSP_DEVICE_CPU && !model->config->decoupled) {
        err = sequence_batcher_state_row(model->sequences, batch[0],
                                         (size_t)inst->index, k, &src);
        if (!err)
            t->data = src->data;
        return err;
    }
    err = osp_device_alloc(inst->device, t->byte_size ? t->byte_size : 1,
                           &bs->input_buffers[i]);
    if (err)
        return err;
    t->data = bs->input_buffers[i]->data;
    for (size_t r = 0; r < n && !err; r++) {
        err = sequence_batcher_state_row(model->sequences, batch[r],
                                         (size_t)inst->index, k, &src);
        if (!err && row)
            err = osp_memcpy_async(inst->stream, (char *)t->data + r * row,
                                   src->data, row, OSP_COPY_DEVICE_TO_DEVICE);
    }
    return err;
}

/* Inputs of a multi-request batch up to this size are gathered on the
 * host first, so that the backend also gets their values there (host_data:
 * a shape or axes fed as an input, which the ONNX runtime reads while
 * planning); one upload follows instead of one per request. */
#define SMALL_INPUT_HOST_BYTES ((size_t)8 << 10)

/* The bytes of batch input i of request r (NULL when it has none). */
static const osp_buffer *request_input(pending_request **batch, size_t r,
                                       size_t i) {
    return batch[r]->req->inputs[batch[r]->input_map[i]].data;
}

/* Gathers batch input i (total bytes, at most SMALL_INPUT_HOST_BYTES, its
 * device buffer allocated) into a pinned host buffer that the batch keeps
 * (bs->input_host), then uploads it with one copy. False (nothing done)
 * when a request's bytes are not in host memory. */
static bool gather_small_input(model_instance *inst, batch_state *bs,
                               pending_request **batch, size_t n, size_t i,
                               size_t total, osp_error **err) {
    for (size_t r = 0; r < n; r++) {
        const osp_buffer *part = request_input(batch, r, i);
        if (part && part->kind == OSP_MEMORY_DEVICE)
            return false;
    }
    osp_backend_tensor *t = &bs->inputs[i];
    if ((*err = osp_device_alloc_host(inst->device, total, &bs->input_host[i])))
        return true;
    char *host = bs->input_host[i]->data;
    size_t offset = 0;
    for (size_t r = 0; r < n; r++) {
        const osp_buffer *part = request_input(batch, r, i);
        if (part && part->size) {
            memcpy(host + offset, part->data, part->size);
            offset += part->size;
        }
    }
    t->host_data = host;
    if (total)
        *err = osp_memcpy_async(inst->stream, (void *)t->data, host, total,
                                OSP_COPY_HOST_TO_DEVICE);
    return true;
}

/* Builds device input i from every request's bytes. A single request on
 * a host-memory device is passed through without a copy. The states of a
 * batch of sequences come from the device (gather_state_input). */
static osp_error *gather_input(model_instance *inst, batch_state *bs,
                               pending_request **batch, size_t n, size_t i,
                               int64_t total_batch) {
    const osp_model_config *cfg = inst->model->config;
    osp_backend_tensor *t = &bs->inputs[i];
    batch_input_desc(inst->model, i, &t->name, &t->dtype);
    int state = input_state(inst->model, i);
    /* A warmup sample (no sequence) gives its states as inputs. */
    if (state >= 0 && batch[0]->sequence)
        return gather_state_input(inst, bs, batch, n, i, (size_t)state);
    const osp_infer_input *first = NULL;
    size_t total = 0, present = 0;
    for (size_t r = 0; r < n; r++) {
        int j = batch[r]->input_map[i];
        if (j < 0)
            continue;
        const osp_infer_input *in = &batch[r]->req->inputs[j];
        if (!first)
            first = in;
        present++;
        total += in->data ? in->data->size : 0;
    }
    if (present != 0 && present != n)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "optional input '%s' given by only some requests "
                             "of a batch",
                             t->name);
    if (!first)
        return NULL; /* optional input absent everywhere */
    t->shape = first->shape;
    if (cfg->max_batch_size > 0)
        t->shape.dims[0] = total_batch;
    t->byte_size = total;

    /* A single request's bytes stay in its host buffer until the batch is
     * done: the backend may read them there (host_data). */
    if (n == 1 && first->data && first->data->kind != OSP_MEMORY_DEVICE)
        t->host_data = first->data->data;
    osp_device_info info;
    osp_device_get_info(inst->device, &info);
    if (n == 1 && info.type == OSP_DEVICE_CPU) {
        t->data = first->data ? first->data->data : NULL;
        /* The backend may give this buffer to an output instead of a copy
         * (osp_execute_output_take_input). */
        if (first->data)
            bs->input_slots[i] =
                &batch[0]->req->inputs[batch[0]->input_map[i]].data;
        return NULL;
    }
    osp_error *err =
        osp_device_alloc(inst->device, total, &bs->input_buffers[i]);
    if (err)
        return err;
    t->data = bs->input_buffers[i]->data;
    if (info.type == OSP_DEVICE_CPU)
        t->host_data = t->data;
    else if (n > 1 && total <= SMALL_INPUT_HOST_BYTES &&
             gather_small_input(inst, bs, batch, n, i, total, &err))
        return err;
    size_t offset = 0;
    for (size_t r = 0; r < n; r++) {
        const osp_infer_input *in =
            &batch[r]->req->inputs[batch[r]->input_map[i]];
        size_t size = in->data ? in->data->size : 0;
        if (size == 0)
            continue;
        err = osp_memcpy_async(inst->stream, (char *)t->data + offset,
                               in->data->data, size, OSP_COPY_HOST_TO_DEVICE);
        if (err)
            return err;
        offset += size;
    }
    return NULL;
}

/* Bytes taken by the first `elements` serialized BYTES elements at p
 * (within `avail` bytes). */
static size_t bytes_rows_size(const unsigned char *p, size_t avail,
                              int64_t elements) {
    size_t off = 0;
    for (int64_t e = 0; e < elements && off + 4 <= avail; e++) {
        uint32_t len;
        memcpy(&len, p + off, 4);
        off += 4 + (size_t)len;
    }
    return off <= avail ? off : avail;
}

/* Makes output o of the batch reachable from the host: on a host-memory
 * device the output buffer itself, otherwise a (pinned) host buffer that
 * a device-to-host copy queued on the instance's stream fills. *host is
 * valid once the stream has reached this point. */
static osp_error *stage_output(model_instance *inst, batch_state *bs, size_t o,
                               osp_buffer **host) {
    osp_backend_tensor *t = &bs->outputs[o];
    osp_device_info info;
    osp_device_get_info(inst->device, &info);
    if (info.type == OSP_DEVICE_CPU) {
        *host = bs->output_buffers[o];
        return NULL;
    }
    osp_error *err = osp_device_alloc_host(inst->device, t->byte_size, host);
    if (!err)
        err = osp_memcpy_async(inst->stream, (*host)->data, t->data,
                               t->byte_size, OSP_COPY_DEVICE_TO_HOST);
    return err;
}

/* Copies each request's rows of batch output o, state k's next value, into
 * a new buffer of its step on the instance's device
 * (sequence_batcher_next_state_row), device to device, queued on the
 * instance's stream: the next state never passes through the host. Filler
 * rows are skipped. The output has the state's shape (checked). */
static osp_error *scatter_state_rows(model_instance *inst, batch_state *bs,
                                     pending_request **batch, size_t n,
                                     size_t o, size_t k) {
    sequence_batcher *sb = inst->model->sequences;
    size_t row = sequence_batcher_state_bytes(sb, k);
    const char *from = bs->outputs[o].data;
    osp_error *err = NULL;
    for (size_t r = 0; r < n && !err; r++) {
        osp_buffer *next = NULL;
        err = sequence_batcher_next_state_row(sb, batch[r], (size_t)inst->index,
                                              k, &next);
        if (!err && next && row)
            err = osp_memcpy_async(inst->stream, next->data, from + r * row,
                                   row, OSP_COPY_DEVICE_TO_DEVICE);
    }
    return err;
}

/* Splits staged output o (see stage_output; taken over here) into one host
 * buffer per request and attaches them to the responses. */
static osp_error *scatter_output(model_instance *inst, batch_state *bs,
                                 pending_request **batch, size_t n,
                                 osp_infer_response **resps, size_t o,
                                 osp_buffer *host) {
    const osp_model_config *cfg = inst->model->config;
    osp_backend_tensor *t = &bs->outputs[o];
    osp_error *err = NULL;
    bool host_device = host == bs->output_buffers[o];

    int64_t row_elements = 1;
    for (int d = cfg->max_batch_size > 0 ? 1 : 0; d < t->shape.rank; d++)
        row_elements *= t->shape.dims[d];
    size_t row_bytes = (size_t)row_elements * osp_datatype_byte_size(t->dtype);
    size_t offset = 0;
    for (size_t r = 0; r < n && !err; r++) {
        int64_t rows = cfg->max_batch_size > 0 ? batch[r]->batch_size : 1;
        size_t size =
            t->dtype == OSP_TYPE_BYTES
                ? bytes_rows_size((unsigned char *)host->data + offset,
                                  t->byte_size - offset, rows * row_elements)
                : (n == 1 ? t->byte_size : (size_t)rows * row_bytes);
        osp_buffer *mine = NULL;
        if (n == 1 && host_device) {
            mine = host; /* hand the device buffer over, no copy */
            bs->output_buffers[o] = NULL;
        } else if (n == 1) {
            mine = host;
            host = NULL;
        } else {
            mine = osp_buffer_new_host(size);
            if (!mine) {
                err = osp_error_out_of_memory();
                break;
            }
            memcpy(mine->data, (char *)host->data + offset, size);
        }
        offset += size;
        /* Attach to the request's response at its position. */
        for (size_t k = 0; k < batch[r]->n_response_outputs; k++) {
            if (batch[r]->response_outputs[k] != o)
                continue;
            osp_infer_output *out = &resps[r]->outputs[k];
            out->dtype = t->dtype;
            out->shape = t->shape;
            if (cfg->max_batch_size > 0)
                out->shape.dims[0] = batch[r]->batch_size;
            out->data = mine;
            out->byte_size = size;
            mine = NULL;
            break;
        }
        osp_buffer_free(mine); /* this request did not ask for it */
    }
    if (!host_device)
        osp_buffer_free(host);
    return err;
}

/* Replaces the outputs that p's request asked to classify (Triton's
 * classification extension) by their top classes, after the trace saw the
 * backend's values. An error is for this request alone. */
static osp_error *classify_outputs(const osp_model *model,
                                   const pending_request *p,
                                   osp_infer_response *resp) {
    const osp_infer_request *req = p->req;
    if (!resp || req->n_outputs == 0) /* none listed: none classified */
        return NULL;
    for (size_t k = 0; k < resp->n_outputs; k++) {
        uint32_t count = req->output_class_counts[k];
        if (count == 0)
            continue;
        osp_error *err = classification_apply(
            &resp->outputs[k], model->config->max_batch_size > 0, count,
            &model->output_labels[p->response_outputs[k]]);
        if (err)
            return err;
    }
    return NULL;
}

/* Sets every request's compute stamps from the instance's marks: the host
 * clock at the start plus device-measured intervals (on a GPU these come
 * from CUDA events on the stream; on the CPU device from the host clock).
 * The output stage ends at the last mark (outputs on the host) plus
 * host_tail_ns, the host time spent splitting them into responses. */
static void stamp_compute_times(model_instance *inst, pending_request **batch,
                                size_t n, uint64_t compute_start,
                                uint64_t host_tail_ns) {
    uint64_t at[4] = {compute_start, 0, 0, 0};
    for (int m = 1; m < 4; m++) {
        uint64_t ns = 0;
        osp_error *err =
            osp_event_elapsed_ns(inst->marks[0], inst->marks[m], &ns);
        osp_error_free(err); /* a device that cannot time: intervals of 0 */
        at[m] = compute_start + ns;
    }
    at[3] += host_tail_ns;
    for (size_t r = 0; r < n; r++) {
        batch[r]->times.compute_start = at[0];
        batch[r]->times.compute_input_end = at[1];
        batch[r]->times.compute_output_start = at[2];
        batch[r]->times.compute_end = at[3];
    }
}

/* Runs a batch of a decoupled model whose inputs are gathered into bs:
 * the requests move to response senders (response_sender.h), which the
 * backend answers through, during execute or later. Ends every request
 * execute leaves open when it fails. */
static void execute_decoupled(model_instance *inst, batch_state *bs,
                              pending_request **batch, size_t n,
                              uint64_t compute_start) {
    osp_model *model = inst->model;
    core_sender **senders = calloc(n, sizeof *senders);
    osp_response_sender **views = calloc(n, sizeof *views);
    if (!senders || !views || !response_senders_new(batch, n, senders, views)) {
        free(senders);
        free(views);
        osp_error *err = osp_error_out_of_memory();
        fail_batch(batch, n, err);
        osp_error_free(err);
        return;
    }
    uint64_t inputs_ready = osp_now_ns();
    int64_t rows = 0;
    for (size_t r = 0; r < n; r++) {
        batch[r]->times.compute_start = compute_start;
        batch[r]->times.compute_input_end = inputs_ready;
        rows += batch[r]->batch_size > 0 ? batch[r]->batch_size : 1;
    }
    bs->ctx.input_slots = NULL; /* inputs end with their request */
    bs->ctx.senders = views;
    bs->ctx.n_requests = n;
    /* batch[] belongs to the senders now: not touched past this point. */
    osp_error *err = model->backend->execute(inst->state, &bs->ctx);
    uint64_t executed = osp_now_ns();
    if (err)
        OSP_LOG_VERBOSE("model '%s' batch of %zu failed: %s",
                        model->config->name, n, osp_error_message(err));
    response_senders_release(senders, n, err);
    if (!err) {
        stats_stamps t = {.compute_start = compute_start,
                          .compute_input_end = inputs_ready,
                          .compute_output_start = executed,
                          .compute_end = executed};
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        model_stats_record_execution(&model->stats, &t, rows,
                                     (uint64_t)wall.tv_sec * 1000u +
                                         (uint64_t)wall.tv_nsec / 1000000u);
    }
    osp_error_free(err);
    free(senders);
    free(views);
}

/* The completion callback of a filler row: nobody receives its outputs. */
static void drop_filler_response(osp_infer_response *resp, void *user) {
    (void)user;
    osp_infer_response_free(resp);
}

/* Replaces the holes of a `direct` batch (NULL rows: batch slots without
 * a request) by filler requests (sequence_batcher_filler_new). False when
 * one cannot be made: the batch's requests have then failed. */
static bool fill_holes(model_instance *inst, pending_request **batch,
                       size_t n) {
    const pending_request *like = NULL;
    for (size_t r = 0; r < n && !like; r++)
        like = batch[r];
    osp_error *err = NULL;
    for (size_t r = 0; r < n && !err && like; r++) {
        if (batch[r])
            continue;
        err = sequence_batcher_filler_new(inst->model->sequences, like,
                                          &batch[r]);
        if (!err)
            batch[r]->complete = drop_filler_response;
    }
    if (!err)
        return like != NULL;
    for (size_t r = 0; r < n; r++)
        if (batch[r])
            pending_request_fail(batch[r],
                                 osp_error_new(osp_error_get_code(err), "%s",
                                               osp_error_message(err)));
    osp_error_free(err);
    return false;
}

void instance_execute_batch(model_instance *inst, pending_request **batch,
                            size_t n) {
    osp_model *model = inst->model;
    if (model->direct_rows) {
        bool holes = false;
        for (size_t r = 0; r < n; r++)
            holes |= batch[r] == NULL;
        if (holes && !fill_holes(inst, batch, n))
            return;
    }
    const osp_model_config *cfg = model->config;
    size_t n_in = model_batch_input_count(model);
    size_t n_out = batch_output_count(model);
    batch_state bs = {0};
    osp_error *err = NULL;
    int64_t total_batch = 0;
    osp_infer_response **resps = NULL;
    osp_buffer **staged = NULL;
    size_t n_params = 0;
    for (size_t r = 0; r < n; r++)
        n_params += batch[r]->req->n_parameters;

    if (!batch_state_alloc(&bs, n_in, n_out, n, n_params)) {
        err = osp_error_out_of_memory();
        goto out;
    }
    resps = bs.resps;
    staged = bs.staged;
    for (size_t r = 0; r < n; r++) {
        total_batch += batch[r]->batch_size;
        for (size_t o = 0; o < cfg->n_outputs; o++)
            bs.output_requested[o] |= batch[r]->output_requested[o];
    }
    for (size_t o = 0; o < cfg->n_outputs; o++) {
        bs.outputs[o].name = cfg->outputs[o].name;
        bs.outputs[o].dtype = cfg->outputs[o].dtype;
    }
    for (size_t o = cfg->n_outputs; o < n_out; o++) {
        const osp_sequence_state *st =
            sequence_batcher_state(model->sequences, o - cfg->n_outputs);
        int twin = state_twin_output(model, o - cfg->n_outputs);
        bs.outputs[o].dtype = st->dtype;
        if (twin >= 0) {
            /* Nameless, so backends fill the config output instead, which
             * the state needs whether a client asked for it or not. */
            bs.output_requested[twin] = true;
            continue;
        }
        bs.outputs[o].name = st->output_name;
        bs.output_requested[o] = true; /* the next state, always */
    }
    uint64_t compute_start = osp_now_ns();
    err = osp_event_record(inst->marks[0], inst->stream);
    for (size_t i = 0; i < n_in && !err; i++)
        err = gather_input(inst, &bs, batch, n, i, total_batch);
    if (err)
        goto out;

    bs.ctx = (osp_execute_ctx){
        .device = inst->device,
        .stream = inst->stream,
        .batch_size = cfg->max_batch_size > 0 ? total_batch : 0,
        .inputs = bs.inputs,
        .n_inputs = n_in,
        .output_requested = bs.output_requested,
        .n_outputs = n_out,
        .outputs = bs.outputs,
        .output_buffers = bs.output_buffers,
        .input_slots = bs.input_slots,
        .n_requests = n,
        .requests = bs.requests,
        .answers = cfg->decoupled ? NULL : bs.answers,
    };
    describe_requests(model, &bs, batch, n);
    if ((err = osp_event_record(inst->marks[1], inst->stream)))
        goto out;
    if (cfg->decoupled) {
        execute_decoupled(inst, &bs, batch, n, compute_start);
        batch_state_free(&bs, n_in);
        return;
    }
    if ((err = model->backend->execute(inst->state, &bs.ctx)))
        goto out;
    /* Requests answered one by one (osp_execute_respond) carry their own
     * outputs and next states. */
    bool answered = bs.ctx.n_answered > 0;
    if ((err = osp_event_record(inst->marks[2], inst->stream)))
        goto out;
    /* Every output's device-to-host copy is queued behind the model, then
     * the worker waits once, for the event after the last copy. */
    for (size_t o = 0; o < n_out && !err; o++) {
        /* Answered requests carry their outputs, and their next states
         * unless the backend allocated those for the batch. */
        if (!bs.output_requested[o] ||
            (answered && (o < cfg->n_outputs || !bs.output_buffers[o])))
            continue;
        if (!bs.output_buffers[o])
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "backend '%s' produced no output '%s'",
                                model->backend->name, bs.outputs[o].name);
        else if (o >= cfg->n_outputs)
            err = check_state_output(model, o - cfg->n_outputs,
                                     &bs.outputs[o].shape,
                                     bs.outputs[o].byte_size, total_batch);
        else if (output_twin_state(model, o) >= 0)
            err = check_state_output(model, (size_t)output_twin_state(model, o),
                                     &bs.outputs[o].shape,
                                     bs.outputs[o].byte_size, total_batch);
        if (!err && o >= cfg->n_outputs) {
            /* A state's next value only: it stays on the device. */
            err =
                scatter_state_rows(inst, &bs, batch, n, o, o - cfg->n_outputs);
            continue;
        }
        if (!err && output_twin_state(model, o) >= 0)
            err = scatter_state_rows(inst, &bs, batch, n, o,
                                     (size_t)output_twin_state(model, o));
        if (!err)
            err = stage_output(inst, &bs, o, &staged[o]);
    }
    if (!err)
        err = osp_event_record(inst->marks[3], inst->stream);
    if (!err)
        err = osp_event_synchronize(inst->marks[3]);
    if (err)
        goto out;
    uint64_t outputs_on_host = osp_now_ns();

    if (answered)
        err = take_answers(inst, &bs, batch, n, resps);
    for (size_t r = 0; r < n && !err && !answered; r++) {
        resps[r] = pending_request_response_new(batch[r]);
        if (resps[r])
            resps[r]->outputs = calloc(batch[r]->n_response_outputs + 1,
                                       sizeof(*resps[r]->outputs));
        if (!resps[r] || !resps[r]->outputs) {
            err = osp_error_out_of_memory();
            break;
        }
        resps[r]->n_outputs = batch[r]->n_response_outputs;
        for (size_t k = 0; k < batch[r]->n_response_outputs; k++) {
            size_t o = batch[r]->response_outputs[k];
            resps[r]->outputs[k].name = strdup(cfg->outputs[o].name);
            if (!resps[r]->outputs[k].name)
                err = osp_error_out_of_memory();
        }
    }
    for (size_t o = 0; o < n_out && !err; o++) {
        if (!staged[o])
            continue;
        osp_buffer *host = staged[o];
        staged[o] = NULL;
        err = scatter_output(inst, &bs, batch, n, resps, o, host);
    }
    if (!err)
        stamp_compute_times(inst, batch, n, compute_start,
                            osp_now_ns() - outputs_on_host);

out:
    if (err) {
        /* Copies or kernels may still be queued on the stream: they must
         * finish before the buffers they use go back to the pools. */
        osp_error_free(osp_stream_synchronize(inst->stream));
        OSP_LOG_VERBOSE("model '%s' batch of %zu failed: %s", cfg->name, n,
                        osp_error_message(err));
        for (size_t r = 0; r < n && resps; r++)
            osp_infer_response_free(resps[r]);
        fail_batch(batch, n, err);
        osp_error_free(err);
    } else {
        /* The execution counts before any response leaves, so a client
         * that reads statistics after its response sees its batch. */
        stats_stamps t = {
            .compute_start = batch[0]->times.compute_start,
            .compute_input_end = batch[0]->times.compute_input_end,
            .compute_output_start = batch[0]->times.compute_output_start,
            .compute_end = batch[0]->times.compute_end,
        };
        int64_t rows = 0;
        for (size_t r = 0; r < n; r++)
            rows += batch[r]->batch_size > 0 ? batch[r]->batch_size : 1;
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        model_stats_record_execution(&model->stats, &t, rows,
                                     (uint64_t)wall.tv_sec * 1000u +
                                         (uint64_t)wall.tv_nsec / 1000000u);
        trace_report_backend_tensors(inst, batch, n, bs.inputs, resps);
        for (size_t r = 0; r < n; r++) {
            osp_error *cls = classify_outputs(model, batch[r], resps[r]);
            if (cls) {
                osp_infer_response_free(resps[r]);
                pending_request_fail(batch[r], cls);
            } else {
                pending_request_finish(batch[r], resps[r]);
            }
        }
    }
    for (size_t o = 0; bs.staged && o < n_out; o++)
        if (bs.staged[o] != bs.output_buffers[o])
            osp_buffer_free(bs.staged[o]);
    batch_state_free(&bs, n_in);
}

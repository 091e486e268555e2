/* The accessors backends use on an osp_execute_ctx (see execute_ctx.h). */
#include "execute_ctx.h"
#include "request_answer.h"

#include <string.h>

osp_device *osp_execute_device(const osp_execute_ctx *ctx) {
    return ctx->device;
}

osp_stream *osp_execute_stream(const osp_execute_ctx *ctx) {
    return ctx->stream;
}

int64_t osp_execute_batch_size(const osp_execute_ctx *ctx) {
    return ctx->batch_size;
}

size_t osp_execute_input_count(const osp_execute_ctx *ctx) {
    return ctx->n_inputs;
}

const osp_backend_tensor *osp_execute_input(const osp_execute_ctx *ctx,
                                            size_t index) {
    return index < ctx->n_inputs ? &ctx->inputs[index] : NULL;
}

const osp_backend_tensor *osp_execute_input_by_name(const osp_execute_ctx *ctx,
                                                    const char *name) {
    for (size_t i = 0; i < ctx->n_inputs; i++)
        if (ctx->inputs[i].name && strcmp(ctx->inputs[i].name, name) == 0)
            return &ctx->inputs[i];
    return NULL;
}

int osp_execute_output_index(const osp_execute_ctx *ctx, const char *name) {
    for (size_t i = 0; i < ctx->n_outputs; i++)
        if (ctx->outputs[i].name && strcmp(ctx->outputs[i].name, name) == 0)
            return (int)i;
    return -1;
}

bool osp_execute_output_requested(const osp_execute_ctx *ctx, size_t index) {
    return index < ctx->n_outputs && ctx->output_requested[index];
}

osp_error *osp_execute_output_alloc(osp_execute_ctx *ctx, size_t index,
                                    const osp_shape *shape, size_t byte_size,
                                    void **data) {
    if (index >= ctx->n_outputs)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "backend allocated output %zu of %zu", index,
                             ctx->n_outputs);
    if (ctx->output_buffers[index])
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "backend allocated output %zu twice", index);
    osp_buffer *buf = NULL;
    osp_error *err = osp_device_alloc(ctx->device, byte_size, &buf);
    if (err)
        return err;
    ctx->output_buffers[index] = buf;
    ctx->outputs[index].shape = *shape;
    ctx->outputs[index].byte_size = byte_size;
    ctx->outputs[index].data = buf->data;
    *data = buf->data;
    return NULL;
}

bool osp_execute_output_take_input(osp_execute_ctx *ctx, size_t index,
                                   size_t input, void **data) {
    if (index >= ctx->n_outputs || input >= ctx->n_inputs ||
        !ctx->input_slots || !ctx->input_slots[input] ||
        !*ctx->input_slots[input] || ctx->output_buffers[index])
        return false;
    osp_buffer *buf = *ctx->input_slots[input];
    *ctx->input_slots[input] = NULL; /* the output owns it now */
    ctx->input_slots[input] = NULL;
    ctx->output_buffers[index] = buf;
    ctx->outputs[index].shape = ctx->inputs[input].shape;
    ctx->outputs[index].byte_size = ctx->inputs[input].byte_size;
    ctx->outputs[index].data = buf->data;
    *data = buf->data;
    return true;
}

void execute_ctx_release_outputs(osp_execute_ctx *ctx) {
    for (size_t i = 0; i < ctx->n_outputs; i++) {
        osp_buffer_free(ctx->output_buffers[i]);
        ctx->output_buffers[i] = NULL;
        ctx->outputs[i].data = NULL;
    }
}

size_t osp_execute_request_count(const osp_execute_ctx *ctx) {
    return ctx->n_requests ? ctx->n_requests : 1;
}

const osp_batch_request *osp_execute_request(const osp_execute_ctx *ctx,
                                             size_t index) {
    return ctx->requests && index < ctx->n_requests ? &ctx->requests[index]
                                                    : NULL;
}

osp_error *osp_execute_respond(osp_execute_ctx *ctx, size_t index,
                               osp_sent_response *response) {
    osp_error *err = NULL;
    if (!ctx->answers)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "requests of this batch cannot be answered one "
                            "by one");
    else if (index >= ctx->n_requests)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "backend answered request %zu of %zu", index,
                            ctx->n_requests);
    else if (ctx->answers[index].given)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "backend answered request %zu twice", index);
    if (err) {
        sent_response_free_buffers(response);
        return err;
    }
    if ((err = request_answer_store(&ctx->answers[index], response)))
        return err;
    ctx->n_answered++;
    return NULL;
}

void execute_ctx_release_answers(osp_execute_ctx *ctx) {
    for (size_t i = 0; ctx->answers && i < ctx->n_requests; i++)
        request_answer_clear(&ctx->answers[i]);
    ctx->n_answered = 0;
}

osp_response_sender *osp_execute_response_sender(osp_execute_ctx *ctx,
                                                 size_t index) {
    return ctx->senders && index < ctx->n_requests ? ctx->senders[index]
                                                   : NULL;
}

osp_error *osp_response_sender_send(osp_response_sender *sender,
                                    osp_sent_response *response, bool final) {
    return sender->send(sender, response, final);
}

bool osp_response_sender_is_cancelled(const osp_response_sender *sender) {
    return sender->is_cancelled(sender);
}

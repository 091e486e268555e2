/*
 * The core's side of osp_execute_ctx (osprey/backend.h): one batch handed
 * to a backend's execute(). The scheduler fills it; unit tests build one by
 * hand to drive a backend directly.
 */
#pragma once

#include <stdbool.h>

#include "osprey/backend.h"

struct osp_execute_ctx {
    osp_device *device;
    osp_stream *stream;
    int64_t batch_size;
    const osp_backend_tensor *inputs; /* config order, borrowed */
    size_t n_inputs;
    const bool *output_requested; /* per config output, borrowed */
    size_t n_outputs;
    /* Filled by osp_execute_output_alloc; the ctx's creator owns the
     * buffers (free them with execute_ctx_release_outputs). Arrays of
     * n_outputs entries provided by the creator, zero-initialised. */
    osp_backend_tensor *outputs;
    osp_buffer **output_buffers;
    /* (optional) Per config input: the request's slot holding the buffer
     * of that input when the core may give it to an output
     * (osp_execute_output_take_input moves it out and clears the slot),
     * else NULL. NULL: no input can be given. */
    osp_buffer ***input_slots;
    /* Decoupled models: one sender per request (borrowed), else NULL. */
    osp_response_sender **senders;
    size_t n_requests;
    /* (optional) The batch's requests as backends see them, n_requests
     * entries (borrowed); NULL: osp_execute_request has none to show. */
    const osp_batch_request *requests;
    /* (optional) Per request, its answer (osp_execute_respond):
     * n_requests entries provided by the creator, zero-initialised, freed
     * with execute_ctx_release_answers; NULL: requests cannot be answered
     * one by one (decoupled models, or the creator takes batch outputs
     * only). n_answered counts those given. */
    struct request_answer *answers;
    size_t n_answered;
};

/* A response sender as the core (or a unit test) implements it: the
 * public osp_response_sender_* calls dispatch to these slots. */
struct osp_response_sender {
    osp_error *(*send)(osp_response_sender *self, osp_sent_response *response,
                       bool final);
    bool (*is_cancelled)(const osp_response_sender *self);
};

/* Frees every buffer osp_execute_output_alloc made and clears the slots. */
void execute_ctx_release_outputs(osp_execute_ctx *ctx);

/* Frees what the answers of osp_execute_respond still hold and clears
 * them. */
void execute_ctx_release_answers(osp_execute_ctx *ctx);

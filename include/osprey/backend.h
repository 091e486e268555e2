/*
 * The model backend interface: what a model computes, written once against
 * device ops (osprey/device.h) so it runs on every device.
 *
 * Lifecycle, driven by the core:
 *   model_new      once per loaded model version (host side: parse
 *                  parameters, read weights)
 *   instance_new   once per instance, on the instance's device and stream
 *                  (upload weights)
 *   execute        many times, one batch at a time per instance, never
 *                  concurrently on the same instance
 *   instance_free, model_free   at unload
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/model_config.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a batch as a backend sees it: device memory of the
 * instance's device, owned by the core. */
typedef struct osp_backend_tensor {
    const char *name;
    osp_datatype dtype;
    osp_shape shape; /* full shape, batch dim first when batching */
    void *data;      /* NULL for an optional input not given */
    size_t byte_size;
    /* Inputs only: the same bytes in host memory, owned by the core and
     * valid during execute(), when it has them as one block (a batch of
     * one request whose bytes are in host memory); NULL otherwise. For a
     * backend on a GPU that needs an input's values on the host (a shape)
     * without copying it back. */
    const void *host_data;
} osp_backend_tensor;

typedef struct osp_server osp_server;

/* Opaque, owned by the core, valid only during execute(). */
typedef struct osp_execute_ctx osp_execute_ctx;

osp_device *osp_execute_device(const osp_execute_ctx *ctx);
osp_stream *osp_execute_stream(const osp_execute_ctx *ctx);
/* Batch size (sum of the requests' batch dims); 0 when the model does not
 * batch (max_batch_size 0). */
int64_t osp_execute_batch_size(const osp_execute_ctx *ctx);
/* Inputs in config order (index i is config input i), followed, for a
 * model with sequence_batching, by the inputs the core adds (see
 * osp_execute_input_by_name). Borrowed. */
size_t osp_execute_input_count(const osp_execute_ctx *ctx);
const osp_backend_tensor *osp_execute_input(const osp_execute_ctx *ctx,
                                            size_t index);
/* Whether config output `index` is wanted by any request in the batch; a
 * backend may skip computing outputs nobody asked for. */
bool osp_execute_output_requested(const osp_execute_ctx *ctx, size_t index);
/* Allocates device memory for config output `index` with the given full
 * shape and byte size, and sets *data. The core owns the memory and copies
 * it out after execute's work on the stream completes. Call at most once
 * per output. */
osp_error *osp_execute_output_alloc(osp_execute_ctx *ctx, size_t index,
                                    const osp_shape *shape, size_t byte_size,
                                    void **data);

/* Makes config output `index` the memory of config input `input` itself
 * (its shape, byte size and bytes) instead of a buffer the backend would
 * copy the input into: for outputs equal to an input (identity). Returns
 * true and sets *data when the core can hand the input's memory over (a
 * batch of one request on a host-memory device, not yet taken); false
 * otherwise, and the backend allocates and copies as usual. The input
 * stays readable through osp_execute_input either way. */
bool osp_execute_output_take_input(osp_execute_ctx *ctx, size_t index,
                                   size_t input, void **data);

/* Sequence batching: the inputs the core adds to a batch of a model with
 * sequence_batching (its control inputs, then its states' input_name
 * tensors) come after the config's inputs. The input named `name` (config
 * or added), or NULL. Borrowed. */
const osp_backend_tensor *osp_execute_input_by_name(const osp_execute_ctx *ctx,
                                                    const char *name);
/* Index for osp_execute_output_alloc of the output named `name`: a config
 * output, or a state's output_name (the next state, which the core keeps
 * for the sequence); -1 if none. */
int osp_execute_output_index(const osp_execute_ctx *ctx, const char *name);

/* ---- decoupled models ----------------------------------------------------
 * A model with model_transaction_policy { decoupled: true } does not fill
 * outputs with osp_execute_output_alloc: each request of the batch has a
 * response sender through which the backend sends 0..n responses and then
 * the final flag, during execute or later, from any thread. The core runs
 * the batches of a decoupled model one request at a time. Its inputs are
 * valid until execute returns or the request's final send, whichever
 * comes first. */

typedef struct osp_response_sender osp_response_sender;

/* One response a backend sends: outputs in host memory (each output's name
 * is copied and its data buffer's ownership moves to the core when
 * osp_response_sender_send is called, whatever it returns; outputs the
 * request did not ask for are dropped), or, with error set, an error
 * response (ownership moves too). */
typedef struct osp_sent_response {
    osp_infer_output *outputs; /* the array stays the caller's */
    size_t n_outputs;
    osp_error *error;
} osp_sent_response;

/* Requests in the batch (1 for a decoupled model, whose batches the core
 * runs one request at a time). */
size_t osp_execute_request_count(const osp_execute_ctx *ctx);
/* The sender of request `index` of a decoupled model's batch; NULL for a
 * model that is not decoupled. Borrowed: valid from execute until the send
 * with `final` returns. When execute returns an error, the core ends every
 * request not yet ended with that error, and their senders are gone when
 * execute has returned. */
osp_response_sender *osp_execute_response_sender(osp_execute_ctx *ctx,
                                                 size_t index);
/* Sends one response (`response` NULL: only the flag) to the request's
 * client; `final` ends the request (Triton's
 * TRITONSERVER_RESPONSE_COMPLETE_FINAL). A response of a request whose
 * client is gone is dropped. Thread-safe; responses reach the client in
 * the order of the calls. Errors only for OOM (the response is then lost,
 * the request still ends when final). */
osp_error *osp_response_sender_send(osp_response_sender *sender,
                                    osp_sent_response *response, bool final);
/* Whether the request's client has gone (its stream closed): the model may
 * stop producing responses. */
bool osp_response_sender_is_cancelled(const osp_response_sender *sender);

/* ---- the requests of a batch ---------------------------------------------
 * A batch is its requests' inputs concatenated along dim 0 in request order
 * (one request when the model does not batch). A backend may look at each
 * request (Triton's TRITONBACKEND_Request accessors) and answer each on its
 * own with osp_execute_respond instead of filling batch outputs with
 * osp_execute_output_alloc: then each request gets its own outputs (any
 * shape) or its own error. */

/* One request of the batch. Borrowed from the core, valid during execute()
 * (for a decoupled model, until the request's final send if that comes
 * first). */
typedef struct osp_batch_request {
    const char *id; /* "" when none */
    /* Its correlation id (sequence_id): a string when
     * correlation_id_string is not NULL, else the number (0: none). */
    uint64_t correlation_id;
    const char *correlation_id_string;
    /* The client's custom parameters; not sequence_id, sequence_start and
     * sequence_end, which the core reads as the correlation id and flags. */
    const osp_parameter *parameters;
    size_t n_parameters;
    /* Its rows of every input: [first_row, first_row + rows) along dim 0.
     * rows is 0 for a model that does not batch (max_batch_size 0): the
     * inputs are the request's whole. */
    int64_t first_row, rows;
    /* Per config output: whether this request asked for it (all when it
     * named none). */
    const bool *output_requested;
    /* Its client's cancellation (osp_cancel_token_is_cancelled of
     * osprey/server.h turns true once the client has gone); may be NULL. */
    const struct osp_cancel_token *cancel;
} osp_batch_request;

/* Request `index` (< osp_execute_request_count) of the batch, or NULL. */
const osp_batch_request *osp_execute_request(const osp_execute_ctx *ctx,
                                             size_t index);

/* Answers request `index` on its own: `response`'s outputs in host memory,
 * any shape (the core keeps those the request asked for, in its order),
 * or its error, for this request only; for a model with sequence_batching
 * an output named by a state's output_name is the request's next state
 * (its shape checked against the state's). Ownership of the output buffers
 * and the error moves to the core whatever this returns; the outputs array
 * and the names stay the caller's. Once any request is answered this way,
 * the batch's config outputs from osp_execute_output_alloc are ignored
 * and a request left unanswered when execute returns fails. Errors: the
 * model is decoupled (use its response sender), `index` is out of range
 * or already answered, or OOM. */
osp_error *osp_execute_respond(osp_execute_ctx *ctx, size_t index,
                               osp_sent_response *response);

typedef struct osp_backend {
    const char *name; /* matches `backend:` in config.pbtxt */
    /* Validates the config for this backend and loads what the model needs
     * from `version_path` (borrowed, the numbered version folder). Errors
     * are load errors a user can act on (name the tensor, the parameter).
     * The config's backend_config holds the --backend-config settings for
     * this backend (osp_model_config_backend_setting), here and in
     * auto_complete. Caller owns *model, freed with model_free. */
    osp_error *(*model_new)(const osp_model_config *config,
                            const char *version_path, void **model);
    void (*model_free)(void *model);
    /* Per-instance state on `device`, whose ops run on `stream` (both
     * borrowed, valid until instance_free). */
    osp_error *(*instance_new)(void *model, osp_device *device,
                               osp_stream *stream, void **instance);
    void (*instance_free)(void *instance);
    /* Enqueues the batch's computation on the instance's stream and
     * allocates every requested output with osp_execute_output_alloc.
     * May return before the work completes. */
    osp_error *(*execute)(void *instance, osp_execute_ctx *ctx);
    /* (optional) Whether execute of `model` on the CPU device is quick: it
     * costs about what reading its inputs costs (elementwise work, a copy,
     * a small GEMM), and never sleeps, waits or does I/O. The core may then
     * run a batch on the thread that queued a request when an instance is
     * idle, sparing the hand-off to the instance's worker and back. NULL,
     * or false: batches run only on the instance workers. Asked once, after
     * model_new. */
    bool (*execute_is_quick)(const void *model);
    /* (optional) Triton's auto-complete: fills in what `config` leaves
     * out, from the model's files in `version_path` (borrowed), before
     * model_new sees it. Called only when auto-complete is on
     * (--disable-auto-complete-config and --strict-model-config=true turn
     * it off) and the config has no inputs or no outputs. What it adds to
     * config it allocates as osp_model_config_free frees it. */
    osp_error *(*auto_complete)(osp_model_config *config,
                                const char *version_path);
    /* (optional) Hands the backend the server that lists it, once, when
     * that server is created and before any model loads; borrowed, it
     * outlives every model of the backend. For backends whose models send
     * requests of their own into the core (the python backend's BLS,
     * through osp_server_infer_async). */
    void (*attach_server)(osp_server *server);
} osp_backend;

#ifdef __cplusplus
}
#endif

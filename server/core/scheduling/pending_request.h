/*
 * A request between osp_server_infer_async and its completion callback:
 * what the scheduler keeps for it, and the one path by which every such
 * request ends (pending_request.c).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "batcher.h"
#include "osprey/backend.h"
#include "osprey/infer.h"
#include "osprey/server.h"
#include "response_cache.h"
#include "stats.h"

/* Monotonic timestamps (ns) of one request's stages, as Triton's
 * statistics and trace extensions name them; 0 = not reached. A request
 * that ran in a batch carries the batch's compute stamps. */
typedef struct request_times {
    uint64_t request_start;        /* accepted by osp_server_infer_async */
    uint64_t queue_start;          /* entered the model's queue */
    uint64_t compute_start;        /* its batch started on an instance */
    uint64_t compute_input_end;    /* inputs are on the device */
    uint64_t compute_output_start; /* the backend's work is done */
    uint64_t compute_end;          /* outputs are back in host memory */
} request_times;

/* A validated request waiting in (or taken from) a model's queue. Owns its
 * request; holds a reference on its model. */
typedef struct pending_request {
    osp_infer_request *req;
    osp_infer_complete_fn complete;
    /* Streaming callers (osp_server_infer_stream_async) get their responses
     * here instead of through `complete`. */
    osp_infer_response_fn respond;
    void *user;
    osp_cancel_token *cancel; /* a reference the request holds, or NULL */
    osp_model *model;
    int64_t batch_size; /* request's batch dim; 0 if the model doesn't batch */
    int *input_map;     /* config input i -> req->inputs index, or -1 */
    bool *output_requested;   /* per config output */
    size_t *response_outputs; /* config output indices in response order */
    size_t n_response_outputs;
    request_times times;
    struct pending_request *next;
    batcher_entry entry; /* its place in the model's queue */
    /* preserve_ordering: delivered in queue order through this buffer
     * (the model's, or an `oldest` sequence model's instance's; guarded by
     * the model's order_lock). NULL: delivered when finished. */
    reorder_buffer *reorder;
    osp_infer_response *held_response; /* finished, waiting for its turn */
    osp_failure_reason failure_reason; /* statistics label if it fails */
    /* A step of an ensemble also adds its compute durations here when it
     * succeeds (borrowed; NULL for other requests). */
    stats_sink *secondary_stats;
    /* Response cache (borrowed; NULL when it does not serve this model):
     * a successful response is inserted under cache_request_key before it is
     * delivered. cache_lookup_ns: the lookup's time; cache_hit: the
     * response came from the cache. */
    response_cache *cache;
    cache_key cache_request_key;
    uint64_t cache_lookup_ns;
    bool cache_hit;
    /* Its place in a sequence (sequence_batcher.h); NULL for a model
     * without sequence_batching. Owned. */
    struct sequence_step *sequence;
} pending_request;

/* Frees a pending request and everything it owns, releasing its model
 * reference. Does not call its completion callback. */
void pending_request_free(pending_request *p);

/* A response shell carrying p's identity (model, version, id); NULL on
 * OOM. Caller owns it. */
osp_infer_response *pending_request_response_new(const pending_request *p);

/* The one place every queued request ends, successful or not: statistics
 * and trace record it, then the frontend's callback gets `resp`
 * (ownership moves; NULL only when even an error response could not be
 * allocated) and p is freed. With preserve_ordering the callback may run
 * later, from the thread that finishes an earlier request. */
void pending_request_finish(pending_request *p, osp_infer_response *resp);

/* The end of a request of a decoupled model (response_sender.c): as
 * pending_request_finish, with `resp` the final response (NULL: only the
 * flag) and `failed` saying how statistics count it. */
void pending_request_finish_decoupled(pending_request *p,
                                      osp_infer_response *resp, bool failed);

/* p's response from what the backend answered for it (`r` borrowed; its
 * buffers and error move): r's error, or the outputs p's request asked
 * for, in its order; outputs it did not ask for are dropped. NULL on OOM;
 * r's remaining buffers are freed either way. Caller owns the response. */
osp_infer_response *pending_request_response_from(const pending_request *p,
                                                  osp_sent_response *r);

/* Finishes `p` with `err` (ownership moves) as an error response. */
void pending_request_fail(pending_request *p, osp_error *err);
/* Whether p's client has cancelled it (its cancel token). */
bool pending_request_cancelled(const pending_request *p);
/* Finishes `p`, which its client cancelled before it ran, as Triton's
 * schedulers answer such a request: CANCELLED with an empty message,
 * counted as a failure of reason CANCELED. */
void pending_request_cancel(pending_request *p);

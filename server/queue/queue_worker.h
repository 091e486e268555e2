/*
 * A model service's built-in worker (inside the queue service): one
 * consumer of the input queue "{model}" in group "{model}", which runs each
 * item as a KServe v2 JSON inference request through the core (batching,
 * priorities, statistics and trace as for HTTP; item priority > 0 is the
 * request's highest priority level), stores the KServe v2 JSON response in
 * "{model}/sink" tagged requestId=<the item's request id> and status=200,
 * and commits the input item only once the sink item is stored. A failed
 * inference stores one sink item {"error":"<message>"} tagged
 * status=<HTTP status> (400 for a body that is not JSON). A response with
 * binary outputs (binary_data_output) is stored as the HTTP body would be,
 * tagged Inference-Header-Content-Length=<JSON header bytes>. A sink put
 * that fails (sink full, store down) is retried by queue_worker_retry until
 * it succeeds or the worker stops; the input item then stays uncommitted.
 *
 * Threads: deliveries come on store threads, completions on core threads;
 * every function is thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/queue.h"
#include "osprey/server.h"
#include "osprey/trace.h"

typedef struct queue_worker queue_worker;

typedef struct queue_worker_options {
    const char *model;  /* copied */
    osp_server *core;   /* borrowed for the worker's life */
    osp_tracer *tracer; /* borrowed likewise; may be NULL */
    osp_queue *input;   /* borrowed likewise */
    osp_queue *sink;    /* borrowed likewise */
    const char *uid;    /* consumer uid (copied); gid is the model name */
    unsigned window;
    size_t max_input;
} queue_worker_options;

/* Opens the consumer and starts taking items. Caller owns *out (one
 * reference). */
osp_error *queue_worker_start(const queue_worker_options *opts,
                              queue_worker **out);
/* Closes the consumer (no item is taken after this returns) and waits up
 * to timeout_ms for the items in flight. false when some remain (they
 * finish later; the worker stays alive for them). Idempotent. */
bool queue_worker_stop(queue_worker *w, int timeout_ms);
/* Puts the sink items whose put failed again (called periodically). */
void queue_worker_retry(queue_worker *w);
/* Drops the caller's reference (after queue_worker_stop); the worker is
 * freed when its last item in flight finishes. */
void queue_worker_release(queue_worker *w);

const char *queue_worker_model(const queue_worker *w);
/* Counters since start. */
void queue_worker_counts(queue_worker *w, uint64_t *processed, uint64_t *failed,
                         uint64_t *wait_count, uint64_t *wait_us);

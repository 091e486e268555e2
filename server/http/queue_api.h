/*
 * The asynchronous queue service's HTTP and WebSocket surface (PAI-EAS
 * compatible; docs/queue.md): /api/predict/{service} (input queue) and
 * /api/predict/{service}/sink, plus / and /sink when the server hosts one
 * lone queue-only service. Requests are dispatched on (method, reserved
 * query keys) in the reference's order: Upgrade + _watch_ is a WebSocket
 * watch (queue_watch.c); GET _attrs_ | _search_ | _count_ | else get; POST
 * _eos_ | else put; PUT _negative_ | _indexes_ (commit); DELETE _trunc_ |
 * _indexes_. Every store call is asynchronous: a request never holds an
 * MHD thread while it waits (long polls included).
 *
 * Statuses: 401 for a token mismatch, 404 unknown service, 400 bad query
 * values and unknown reserved keys, 413 payload too large and 429 queue is
 * full (both before anything is stored), 503 store unavailable or shutting
 * down. A stored item always gets its 200.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "http_server.h"
#include "osprey/error.h"
#include "queue_services.h"

typedef struct queue_api queue_api;

typedef struct queue_api_options {
    queue_services *services; /* borrowed for the surface's life */
    /* Authorization header every request (the watch handshake included)
     * must carry exactly; NULL or "": none. Copied. */
    const char *token;
    uint64_t max_payload_bytes; /* inclusive (attributes, 413) */
} queue_api_options;

/* Caller owns *out; list it as the surface_ctx of a "queue" http_surface
 * with queue_api_route and queue_api_reply_error. */
osp_error *queue_api_new(const queue_api_options *opts, queue_api **out);
/* At shutdown, before the HTTP server drains: long polls are answered now
 * (with what they have: nothing), new ones answer at once, new watches get
 * 503, and every watch is sent a close frame (1001) and closed. */
void queue_api_quiesce(queue_api *api);
/* After the HTTP server is freed. NULL is a no-op. */
void queue_api_free(queue_api *api);

bool queue_api_route(http_request *req, void *surface_ctx);
void queue_api_reply_error(http_request *req, osp_error *err);

/*
 * Shared by the queue surface's files (queue_api.c: routes and handlers;
 * queue_watch.c: the WebSocket watch).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_server.h"
#include "osprey/queue.h"
#include "queue_api.h"
#include "queue_params.h"

#define QUEUE_UID_HEADER "X-EAS-QueueService-Redis-Uid"
#define QUEUE_GID_HEADER "X-EAS-QueueService-Redis-Gid"
#define QUEUE_PRIORITY_HEADER "X-EAS-QueueService-Priority"
#define QUEUE_REQUEST_ID_HEADER "X-Eas-Queueservice-Request-Id"
#define QUEUE_PROTOBUF_TYPE "application/vnd.google.protobuf"
#define QUEUE_MAX_ID_BYTES 128 /* uid and gid header values */

struct queue_watch;
struct pending_get;

struct queue_api {
    queue_services *services;
    char *token; /* NULL: none */
    uint64_t max_payload_bytes;

    pthread_mutex_t mu;          /* the fields below */
    bool closing;                /* queue_api_quiesce ran */
    struct pending_get *gets;    /* gets waiting for the store */
    struct queue_watch *watches; /* open watches */
};

/* The query's tags (non-reserved keys) in a caller-provided array of
 * QUEUE_MAX_TAGS; the request id (key requestId) goes to *request_id
 * instead when that is not NULL. INVALID_ARG for too many or too long. */
osp_error *queue_query_tags(http_request *req, osp_queue_tag *tags, size_t *n,
                            const char **request_id);

/* Starts a WebSocket watch of `queue` for the request (claims it: an
 * upgrade, or an error reply). */
void queue_watch_start(http_request *req, queue_api *api, osp_queue *queue);
/* Sends every open watch a close frame and closes it (shutdown). */
void queue_watch_close_all(queue_api *api);

/*
 * The queue services of one server: every READY model is a service of the
 * same name (input queue "{model}", sink "{model}/sink") with a built-in
 * worker (queue_worker.h); --queue-service names add queue-only services
 * whose workers live outside Osprey. The registry owns the store, follows
 * the core's models (a thread polls the ready list, so models loaded and
 * unloaded in explicit or poll mode gain and lose their workers), and
 * answers the HTTP surface's lookups.
 *
 * Threads: every function is thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/queue.h"
#include "osprey/server.h"
#include "osprey/trace.h"

typedef struct queue_services queue_services;

typedef struct queue_services_options {
    osp_server *core;   /* borrowed for the registry's life */
    osp_tracer *tracer; /* borrowed likewise; NULL: no traces */
    /* The store (opened by queue_services_new, owned by the registry). */
    osp_queue_store_options store;
    /* Queue-only service names (borrowed during the call). */
    const char *const *queue_only;
    size_t n_queue_only;
    /* Built-in workers: items each takes at once (its window), and its
     * consumer uid (NULL: "<hostname>:<pid>"; replicas sharing a Redis
     * store need distinct ones). Their gid is the service name. */
    unsigned worker_window;
    const char *worker_uid;
    /* Largest JSON input of a queued KServe request (the HTTP limit). */
    size_t max_input;
} queue_services_options;

/* Opens the store, starts a worker for every ready model and the thread
 * that follows the models. Caller owns *out. */
osp_error *queue_services_new(const queue_services_options *opts,
                              queue_services **out);
/* Stops every worker taking items and waits up to timeout_ms for the ones
 * in flight to finish (their sink item stored and the input committed).
 * Returns false when some are still running. Idempotent. */
bool queue_services_quiesce(queue_services *qs, int timeout_ms);
/* After quiesce and once nothing uses the store (watches closed): frees
 * the workers, flushes and frees the store, frees qs. NULL is a no-op. */
void queue_services_free(queue_services *qs);

/* The store (borrowed, valid as qs). */
osp_queue_store *queue_services_store(queue_services *qs);

/* The queue of service `name` (its sink when sink): NOT_FOUND "unknown
 * queue service '<name>'" when no ready model and no queue-only service
 * has that name. *out is borrowed (valid as the store). */
osp_error *queue_services_find(queue_services *qs, const char *name, bool sink,
                               osp_queue **out);
/* The service that `/` and `/sink` address: copies its name into buf and
 * returns true when the server has exactly one queue service and no ready
 * model (a lone queue-only service). */
bool queue_services_lone(queue_services *qs, char *buf, size_t cap);

/* What a model service's worker did, for /metrics. */
typedef struct queue_service_stats {
    const char *name;    /* borrowed for the callback */
    uint64_t processed;  /* items run (success or error item) */
    uint64_t failed;     /* of which error items */
    uint64_t wait_count; /* items taken */
    uint64_t wait_us;    /* sum of put -> taken by the worker */
} queue_service_stats;
/* Calls fn for every running worker. */
void queue_services_foreach_worker(queue_services *qs,
                                   void (*fn)(void *ctx,
                                              const queue_service_stats *s),
                                   void *ctx);
